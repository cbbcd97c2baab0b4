//! Asking another node of the cluster to write a transaction's markers: the coordinator of a
//! transaction sends WriteTxnMarkers to the node that leads a partition the transaction wrote
//! to (or coordinates a group whose offsets it committed), over the Kafka protocol, as
//! Kafka's coordinators do. One connection per call, bounded by [`CALL_TIMEOUT`]: a marker
//! that cannot be written now is written by the coordinator's next sweep.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    ApiKey, ProducerId, RequestHeader, RequestKind, ResponseHeader, TopicName,
    WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use kafka_protocol::ResponseError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::broker::BrokerAddr;
use crate::error::{KafkaError, Result};

/// The longest one forwarded call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// The largest answer read back.
const MAX_RESPONSE: usize = 1 << 20;
/// The topic name that stands for a group's pending offsets in a forwarded marker, as
/// Kafka's markers go to the `__consumer_offsets` partition of the group.
pub(crate) const GROUP_OFFSETS: &str = "__consumer_offsets";

/// Asks `to` to write `producer`'s `commit` (or abort) marker to `topic`'s `partition`.
pub(crate) async fn write_marker(
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
    let response = tokio::time::timeout(CALL_TIMEOUT, call(to, request))
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

async fn call(
    to: &BrokerAddr,
    request: WriteTxnMarkersRequest,
) -> anyhow::Result<WriteTxnMarkersResponse> {
    let version = 1;
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::WriteTxnMarkers as i16)
        .with_request_api_version(version)
        .with_correlation_id(1)
        .with_client_id(Some(StrBytes::from_static_str(
            "inlet-transaction-coordinator",
        )));
    let frame = crate::codec::encode_request(&header, &RequestKind::WriteTxnMarkers(request))?;
    let mut s = tokio::net::TcpStream::connect((to.host.as_str(), to.port)).await?;
    s.write_all(&frame).await?;
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await?;
    let len = usize::try_from(i32::from_be_bytes(len))?;
    anyhow::ensure!(len <= MAX_RESPONSE, "an answer of {len} bytes");
    let mut buf = BytesMut::zeroed(len);
    s.read_exact(&mut buf).await?;
    let mut buf: Bytes = buf.freeze();
    let h = ResponseHeader::decode(
        &mut buf,
        ApiKey::WriteTxnMarkers.response_header_version(version),
    )?;
    anyhow::ensure!(h.correlation_id == 1, "an answer to another request");
    WriteTxnMarkersResponse::decode(&mut buf, version)
}
