//! Asking another node of the cluster to write a transaction's markers: the coordinator of a
//! transaction sends WriteTxnMarkers to the node that leads a partition the transaction wrote
//! to (or coordinates a group whose offsets it committed), over the Kafka protocol, as
//! Kafka's coordinators do, on the inter-broker listener with its TLS and SASL
//! (`inter_broker`). One connection per call, bounded by [`CALL_TIMEOUT`]: a marker that
//! cannot be written now is written by the coordinator's next sweep.

use std::time::Duration;

use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    ApiKey, ProducerId, RequestKind, TopicName, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::broker::BrokerAddr;
use crate::error::{KafkaError, Result};
use crate::inter_broker::InterBroker;

/// The longest one forwarded call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// The topic name that stands for a group's pending offsets in a forwarded marker, as
/// Kafka's markers go to the `__consumer_offsets` partition of the group.
pub(crate) const GROUP_OFFSETS: &str = "__consumer_offsets";

/// Asks `to` to write `producer`'s `commit` (or abort) marker to `topic`'s `partition`.
pub(crate) async fn write_marker(
    link: &InterBroker,
    to: &BrokerAddr,
    (producer_id, epoch): (i64, i16),
    commit: bool,
    topic: &str,
    partition: i32,
) -> Result<()> {
    let request =
        WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(epoch)
            .with_transaction_result(commit)
            .with_coordinator_epoch(0)
            .with_topics(vec![WritableTxnMarkerTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partition_indexes(vec![partition])])]);
    let unavailable = |what: String| {
        KafkaError::new(
            ResponseError::CoordinatorNotAvailable,
            format!(
                "node {} ({}:{}) could not be asked to write a marker: {what}",
                to.node_id, to.host, to.port
            ),
        )
    };
    let call = async {
        let mut s = link.connect(to).await?;
        crate::inter_broker::call::<WriteTxnMarkersResponse>(
            &mut s,
            ApiKey::WriteTxnMarkers,
            1,
            RequestKind::WriteTxnMarkers(request),
        )
        .await
    };
    let response = tokio::time::timeout(CALL_TIMEOUT, call)
        .await
        .map_err(|_| unavailable(format!("no answer within {CALL_TIMEOUT:?}")))?
        .map_err(|e| unavailable(e.to_string()))?;
    let code = response
        .markers
        .iter()
        .flat_map(|m| &m.topics)
        .flat_map(|t| &t.partitions)
        .map(|p| p.error_code)
        .find(|&c| c != 0);
    match code {
        None => Ok(()),
        Some(code) => Err(KafkaError::new(
            ResponseError::try_from_code(code).unwrap_or(ResponseError::UnknownServerError),
            format!(
                "node {} refused the marker for {topic}-{partition} (error {code})",
                to.node_id
            ),
        )),
    }
}
