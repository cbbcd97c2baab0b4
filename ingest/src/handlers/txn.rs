//! The transaction coordinator's requests (InitProducerId with a transactional id,
//! AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions), the
//! partition leader's WriteTxnMarkers, and the coordinator's sweep. See the `txn` module for
//! the flow; the state machine is Kafka's:
//!
//! ```text
//! Empty ──AddPartitions/AddOffsets──▶ Ongoing ──EndTxn──▶ PrepareCommit ──markers──▶ CompleteCommit
//!   ▲                                   │  └─timeout/fence──▶ PrepareAbort ──markers──▶ CompleteAbort
//!   └────────InitProducerId (epoch + 1)─┴──────────────────────────────────────────────────┘
//! ```

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use inlet_storage::AppendOptions;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::list_transactions_response::TransactionState as ListedState;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use tokio_util::sync::CancellationToken;

use crate::batch::{self, Marker};
use crate::broker::{str, Broker};
use crate::error::{KafkaError, Result};
use crate::txn::state::{Slot, TxnMeta, TxnState};

/// How a marker is retried (retriable Kafka errors only: a partition moving, a node away)
/// before the decision is left to the sweep.
const MARKER_RETRY: inlet_common::RetryPolicy =
    inlet_common::RetryPolicy::new(5, Duration::from_millis(100), Duration::from_secs(1));

fn fenced(version: i16, since: i16, what: String) -> KafkaError {
    // PRODUCER_FENCED exists from these versions on (KIP-588); older clients know
    // INVALID_PRODUCER_EPOCH, which they treat the same way.
    let code = if version >= since {
        ResponseError::ProducerFenced
    } else {
        ResponseError::InvalidProducerEpoch
    };
    KafkaError::new(code, what)
}

impl Broker {
    /// Whether this node coordinates the transactional id (always, on a single node).
    pub(crate) fn coordinates_txn(&self, id: &str) -> bool {
        self.coordinates(id)
    }

    /// `NOT_COORDINATOR` unless this node coordinates `id`.
    /// How this node calls the others, or why it cannot (a cluster node does not start then).
    fn inter_broker(&self) -> Result<&crate::inter_broker::InterBroker> {
        self.inter_broker.as_ref().map_err(|e| {
            KafkaError::new(
                ResponseError::CoordinatorNotAvailable,
                format!("this node cannot call the others: {e}"),
            )
        })
    }

    fn check_txn_coordinator(&self, id: &str) -> Result<()> {
        self.check_standing().map_err(|_| {
            KafkaError::new(
                ResponseError::CoordinatorNotAvailable,
                "this node stands down: ask another",
            )
        })?;
        if !self.coordinates_txn(id) {
            self.txns.forget(id);
            return Err(KafkaError::new(
                ResponseError::NotCoordinator,
                format!("another node coordinates transactional id {id:?}"),
            ));
        }
        Ok(())
    }

    /// InitProducerId for a transactional producer: its producer id and new epoch.
    pub(crate) async fn init_transactional(
        &self,
        id: &str,
        r: &InitProducerIdRequest,
        version: i16,
    ) -> Result<(i64, i16)> {
        self.check_txn_coordinator(id)?;
        let timeout = i64::from(r.transaction_timeout_ms);
        let max = self.config().transaction_max_timeout_ms;
        if timeout <= 0 || timeout as u64 > max {
            return Err(KafkaError::new(
                ResponseError::InvalidTransactionTimeout,
                format!(
                    "transaction.timeout.ms {timeout} must be positive and at most the broker's \
                     transaction.max.timeout.ms ({max})"
                ),
            ));
        }
        let mut slot = self.txns.lock(id).await?;
        let now = self.clock_ms();
        let Some(mut meta) = slot.meta.clone() else {
            let pid = self.producer_ids.next().await?;
            self.txns
                .save(id, &mut slot, TxnMeta::new(pid, 0, timeout, now))
                .await?;
            return Ok((pid, 0));
        };
        // KIP-360: a producer that names its id and epoch (to recover) must name the current
        // ones; an older instance is fenced.
        if r.producer_id.0 >= 0
            && (r.producer_id.0 != meta.producer_id || r.producer_epoch != meta.epoch)
        {
            return Err(fenced(
                version,
                4,
                format!(
                    "producer {} epoch {} is not transactional id {id:?}'s current producer",
                    r.producer_id.0, r.producer_epoch
                ),
            ));
        }
        if meta.state.is_prepared() {
            self.complete(id, &mut slot).await?;
            meta = slot.meta.clone().ok_or_else(|| gone(id))?;
        }
        let mut next = meta.clone();
        if meta.state == TxnState::Ongoing {
            // A new instance fences the old one: its transaction is aborted under a new epoch,
            // which the new instance then uses.
            self.abort_fenced(id, &mut slot, now).await?;
            next = slot.meta.clone().ok_or_else(|| gone(id))?;
        } else if next.epoch >= i16::MAX - 1 {
            next.producer_id = self.producer_ids.next().await?;
            next.epoch = 0;
        } else {
            next.epoch += 1;
        }
        next.state = TxnState::Empty;
        next.partitions.clear();
        next.groups.clear();
        next.timeout_ms = timeout;
        next.updated_ms = now;
        let answer = (next.producer_id, next.epoch);
        self.txns.save(id, &mut slot, next).await?;
        Ok(answer)
    }

    /// Checks a request's producer id and epoch against the transactional id's state, and
    /// completes a decision left half done (so the request sees a settled state).
    async fn check_producer(
        &self,
        id: &str,
        slot: &mut Slot,
        (producer_id, epoch): (i64, i16),
        (version, fenced_since): (i16, i16),
    ) -> Result<TxnMeta> {
        let meta = slot.meta.clone().ok_or_else(|| {
            KafkaError::new(
                ResponseError::InvalidProducerIdMapping,
                format!("transactional id {id:?} has no producer: call InitProducerId first"),
            )
        })?;
        if meta.producer_id != producer_id {
            return Err(KafkaError::new(
                ResponseError::InvalidProducerIdMapping,
                format!(
                    "producer {producer_id} is not transactional id {id:?}'s (its producer is {})",
                    meta.producer_id
                ),
            ));
        }
        if epoch != meta.epoch {
            return Err(fenced(
                version,
                fenced_since,
                format!(
                    "producer {producer_id} epoch {epoch} was fenced: transactional id {id:?} is \
                     at epoch {} (another instance started, or the transaction timed out)",
                    meta.epoch
                ),
            ));
        }
        if meta.state.is_prepared() {
            self.complete(id, slot).await?;
            return slot.meta.clone().ok_or_else(|| gone(id));
        }
        Ok(meta)
    }

    /// Marks the transaction open (if it was not) with what it now touches; writes only when
    /// something changed.
    async fn touch(&self, id: &str, slot: &mut Slot, mut next: TxnMeta) -> Result<()> {
        let before = slot.meta.clone();
        let now = self.clock_ms();
        if next.state != TxnState::Ongoing {
            next.state = TxnState::Ongoing;
            next.started_ms = now;
        }
        if before.as_ref() == Some(&next) {
            return Ok(());
        }
        next.updated_ms = now;
        self.txns.save(id, slot, next).await
    }

    pub(crate) async fn add_partitions_to_txn(
        &self,
        r: AddPartitionsToTxnRequest,
        version: i16,
    ) -> AddPartitionsToTxnResponse {
        let id = r.v3_and_below_transactional_id.to_string();
        let requested: Vec<(TopicName, Vec<i32>)> = r
            .v3_and_below_topics
            .iter()
            .map(|t| (t.name.clone(), t.partitions.clone()))
            .collect();
        let outcome = self
            .add_partitions(
                &id,
                (r.v3_and_below_producer_id.0, r.v3_and_below_producer_epoch),
                &requested,
                version,
            )
            .await;
        let results = requested
            .iter()
            .map(|(name, partitions)| {
                AddPartitionsToTxnTopicResult::default()
                    .with_name(name.clone())
                    .with_results_by_partition(
                        partitions
                            .iter()
                            .map(|&p| {
                                let code = match &outcome {
                                    Ok(()) => 0,
                                    Err(per) => per(name.as_str(), p),
                                };
                                AddPartitionsToTxnPartitionResult::default()
                                    .with_partition_index(p)
                                    .with_partition_error_code(code)
                            })
                            .collect(),
                    )
            })
            .collect();
        AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results)
    }

    /// Adds the partitions; on failure, the error code of each requested partition.
    #[allow(clippy::type_complexity)]
    async fn add_partitions(
        &self,
        id: &str,
        producer: (i64, i16),
        requested: &[(TopicName, Vec<i32>)],
        version: i16,
    ) -> std::result::Result<(), Box<dyn Fn(&str, i32) -> i16 + Send + Sync>> {
        let all = |e: KafkaError| -> Box<dyn Fn(&str, i32) -> i16 + Send + Sync> {
            tracing::debug!(transactional_id = id, error = %e, "AddPartitionsToTxn refused");
            let code = e.code();
            Box::new(move |_, _| code)
        };
        if let Err(e) = self.check_txn_coordinator(id) {
            return Err(all(e));
        }
        // Kafka checks the partitions first: unknown ones fail, and the others are not
        // attempted.
        let unknown: Vec<(String, i32)> = requested
            .iter()
            .flat_map(|(name, partitions)| {
                let topic = self.topics.get(name.as_str());
                partitions
                    .iter()
                    .filter(move |&&p| topic.as_ref().and_then(|t| t.partition(p)).is_none())
                    .map(move |&p| (name.to_string(), p))
            })
            .collect();
        if !unknown.is_empty() {
            return Err(Box::new(move |t, p| {
                if unknown.iter().any(|(ut, up)| ut == t && *up == p) {
                    ResponseError::UnknownTopicOrPartition.code()
                } else {
                    ResponseError::OperationNotAttempted.code()
                }
            }));
        }
        let result = async {
            let mut slot = self.txns.lock(id).await?;
            let mut next = self
                .check_producer(id, &mut slot, producer, (version, 2))
                .await?;
            for (name, partitions) in requested {
                for &p in partitions {
                    next.partitions.insert((name.to_string(), p));
                }
            }
            self.touch(id, &mut slot, next).await
        }
        .await;
        result.map_err(all)
    }

    pub(crate) async fn add_offsets_to_txn(
        &self,
        r: AddOffsetsToTxnRequest,
        version: i16,
    ) -> AddOffsetsToTxnResponse {
        let id = r.transactional_id.to_string();
        let result = async {
            self.check_txn_coordinator(&id)?;
            let mut slot = self.txns.lock(&id).await?;
            let mut next = self
                .check_producer(
                    &id,
                    &mut slot,
                    (r.producer_id.0, r.producer_epoch),
                    (version, 2),
                )
                .await?;
            next.groups.insert(r.group_id.to_string());
            self.touch(&id, &mut slot, next).await
        }
        .await;
        AddOffsetsToTxnResponse::default().with_error_code(result.err().map_or(0, |e| e.code()))
    }

    pub(crate) async fn end_txn(&self, r: EndTxnRequest, version: i16) -> EndTxnResponse {
        let id = r.transactional_id.to_string();
        let result = self
            .end(
                &id,
                (r.producer_id.0, r.producer_epoch),
                r.committed,
                version,
            )
            .await;
        if let Err(e) = &result {
            tracing::debug!(transactional_id = id, error = %e, "EndTxn refused");
        }
        EndTxnResponse::default()
            .with_error_code(result.err().map_or(0, |e| e.code()))
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
    }

    async fn end(&self, id: &str, producer: (i64, i16), commit: bool, version: i16) -> Result<()> {
        self.check_txn_coordinator(id)?;
        let mut slot = self.txns.lock(id).await?;
        let meta = self
            .check_producer(id, &mut slot, producer, (version, 2))
            .await?;
        let invalid = |state: TxnState| {
            KafkaError::new(
                ResponseError::InvalidTxnState,
                format!(
                    "transactional id {id:?} cannot {} a transaction in state {}",
                    if commit { "commit" } else { "abort" },
                    state.name()
                ),
            )
        };
        match (meta.state, commit) {
            (TxnState::Ongoing, _) => {
                let mut next = meta;
                next.state = if commit {
                    TxnState::PrepareCommit
                } else {
                    TxnState::PrepareAbort
                };
                next.updated_ms = self.clock_ms();
                self.txns.save(id, &mut slot, next).await?;
                self.complete(id, &mut slot).await
            }
            // A retried EndTxn whose first attempt completed, and an empty transaction (a
            // client may end one it never added anything to): nothing to do.
            (TxnState::CompleteCommit, true)
            | (TxnState::CompleteAbort, false)
            | (TxnState::Empty, _) => Ok(()),
            (state, _) => Err(invalid(state)),
        }
    }

    /// Aborts `id`'s open transaction under a new epoch (a fenced instance or a timeout).
    async fn abort_fenced(&self, id: &str, slot: &mut Slot, now: u64) -> Result<()> {
        let mut next = slot.meta.clone().ok_or_else(|| gone(id))?;
        // At the last epoch the markers go out under it (no producer can go higher).
        next.epoch = next.epoch.saturating_add(1);
        next.state = TxnState::PrepareAbort;
        next.updated_ms = now;
        self.txns.save(id, slot, next).await?;
        self.complete(id, slot).await
    }

    /// Carries a prepared decision out: a marker to every partition, the group offsets
    /// ended, then `Complete*`. Fails, leaving the decision for the sweep to complete, when a
    /// marker or a group cannot be written.
    async fn complete(&self, id: &str, slot: &mut Slot) -> Result<()> {
        let meta = slot.meta.clone().ok_or_else(|| gone(id))?;
        let commit = match meta.state {
            TxnState::PrepareCommit => true,
            TxnState::PrepareAbort => false,
            _ => return Ok(()),
        };
        let marker = if commit {
            Marker::Commit
        } else {
            Marker::Abort
        };
        let markers = join_all(meta.partitions.iter().map(|(topic, p)| {
            self.write_marker_retrying(topic, *p, (meta.producer_id, meta.epoch), marker)
        }))
        .await;
        for (result, (topic, p)) in markers.into_iter().zip(&meta.partitions) {
            if let Err(e) = result {
                tracing::warn!(transactional_id = id, topic, partition = p, error = %e, "a transaction marker could not be written yet");
                return Err(KafkaError::new(
                    ResponseError::CoordinatorLoadInProgress,
                    format!("the transaction's marker for {topic}-{p} is not written yet: {e}"),
                ));
            }
        }
        for group in &meta.groups {
            if let Err(code) = self.end_group_txn(group, meta.producer_id, commit).await {
                return Err(KafkaError::new(
                    code,
                    format!("the transaction's offsets of group {group:?} are not ended yet"),
                ));
            }
        }
        let mut next = meta;
        next.state = if commit {
            TxnState::CompleteCommit
        } else {
            TxnState::CompleteAbort
        };
        next.partitions.clear();
        next.groups.clear();
        next.updated_ms = self.clock_ms();
        self.txns.save(id, slot, next).await?;
        let counter = if commit {
            &self.metrics.transactions_committed
        } else {
            &self.metrics.transactions_aborted
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Ends a producer's pending offsets in `group`, on the node that coordinates the group.
    async fn end_group_txn(
        &self,
        group: &str,
        producer_id: i64,
        commit: bool,
    ) -> std::result::Result<(), ResponseError> {
        if self.coordinates(group) {
            return self
                .groups
                .end_txn_offsets(group, producer_id, commit)
                .await;
        }
        // Another node coordinates the group: it is asked to, as Kafka's coordinator writes
        // a marker to the group's offsets partition.
        let view = self.cluster_view().ok_or(ResponseError::NotCoordinator)?;
        let node = view
            .coordinator(group)
            .ok_or(ResponseError::CoordinatorNotAvailable)?;
        let to = view
            .brokers()
            .into_iter()
            .find(|b| b.node_id == node)
            .ok_or(ResponseError::CoordinatorNotAvailable)?;
        // The producer's epoch does not matter to a group's pending offsets.
        let link = self.inter_broker().map_err(|e| {
            tracing::warn!(group, error = %e, "the group's coordinator cannot be asked to end the transaction's offsets");
            e.code
        })?;
        crate::txn::forward::write_marker(
            link,
            &to,
            (producer_id, 0),
            commit,
            crate::txn::forward::GROUP_OFFSETS,
            0,
        )
        .await
        .map_err(|e| {
            tracing::warn!(group, node, error = %e, "the group's coordinator could not end the transaction's offsets yet");
            e.code
        })
    }

    /// Ends `producer_id`'s pending offsets in every group this node coordinates (a
    /// forwarded marker for the groups' offsets).
    async fn end_txn_offsets_here(&self, producer_id: i64, commit: bool) -> Result<()> {
        for group in self
            .groups
            .groups_with_pending(producer_id)
            .await
            .map_err(|code| {
                KafkaError::new(code, "the pending transactional offsets could not be read")
            })?
        {
            if self.coordinates(&group) {
                self.groups
                    .end_txn_offsets(&group, producer_id, commit)
                    .await
                    .map_err(|code| {
                        KafkaError::new(
                            code,
                            format!("group {group:?}'s offsets could not be ended"),
                        )
                    })?;
            }
        }
        Ok(())
    }

    async fn write_marker_retrying(
        &self,
        topic: &str,
        partition: i32,
        producer: (i64, i16),
        marker: Marker,
    ) -> Result<()> {
        inlet_common::retry(&MARKER_RETRY, KafkaError::kind, |_| {
            self.write_marker_anywhere(topic, partition, producer, marker)
        })
        .await
    }

    /// Writes one transaction marker to a partition: here if this node leads it, else through
    /// the node that does (WriteTxnMarkers).
    async fn write_marker_anywhere(
        &self,
        topic: &str,
        index: i32,
        producer: (i64, i16),
        marker: Marker,
    ) -> Result<()> {
        let stream = self
            .topics
            .get(topic)
            .and_then(|t| t.partition(index).map(|p| p.stream));
        let view = self.cluster_view();
        let (Some(stream), Some(view)) = (stream, view) else {
            return self.write_marker(topic, index, producer, marker).await;
        };
        if self.store.owns(stream) {
            return self.write_marker(topic, index, producer, marker).await;
        }
        let not_led = || {
            KafkaError::new(
                ResponseError::NotLeaderOrFollower,
                format!("no live node leads {topic}-{index} yet"),
            )
        };
        let (node, _) = view.leader(stream).ok_or_else(not_led)?;
        let to = view
            .brokers()
            .into_iter()
            .find(|b| b.node_id == node)
            .ok_or_else(not_led)?;
        crate::txn::forward::write_marker(
            self.inter_broker()?,
            &to,
            producer,
            marker == Marker::Commit,
            topic,
            index,
        )
        .await
    }

    /// Writes one transaction marker to a partition this node leads, and waits until it is
    /// durable. A deleted topic or partition has nothing to mark.
    pub(crate) async fn write_marker(
        &self,
        topic: &str,
        index: i32,
        (producer_id, epoch): (i64, i16),
        marker: Marker,
    ) -> Result<()> {
        let Some(topic) = self.topics.get(topic) else {
            return Ok(());
        };
        let Some(partition) = topic.partition(index) else {
            return Ok(());
        };
        let now = self.now_ms();
        let bytes = batch::control_batch(producer_id, epoch, marker, 0, now);
        let pending = {
            let mut producers = partition.producers.lock().await;
            let stream_epoch = self.load_producers(partition, &mut producers).await?;
            producers.fence(producer_id, epoch, now as u64);
            let start = self.store.start_offset(partition.stream)?;
            {
                let mut txns = partition.txns.lock();
                txns.marker_queued(producer_id, marker);
                txns.trim(start);
            }
            self.store
                .submit_append(
                    partition.stream,
                    bytes,
                    1,
                    AppendOptions {
                        timestamp_ms: Some(now.max(0) as u64),
                        write_base_offset: true,
                        write_epoch: true,
                        failure_latch: false,
                        expect_epoch: Some(stream_epoch),
                    },
                )
                .await?
        };
        let offset = pending.await?;
        partition.txns.lock().marker_stored(producer_id, offset);
        Ok(())
    }

    /// WriteTxnMarkers v1: markers a transaction coordinator asks this node, the partitions'
    /// leader, to write.
    pub(crate) async fn write_txn_markers(
        &self,
        r: WriteTxnMarkersRequest,
        _version: i16,
    ) -> WriteTxnMarkersResponse {
        let markers = join_all(r.markers.into_iter().map(|m| async move {
            let marker = if m.transaction_result {
                Marker::Commit
            } else {
                Marker::Abort
            };
            let mut topics = Vec::new();
            for t in m.topics {
                let mut partitions = Vec::new();
                for p in t.partition_indexes {
                    let outcome = if t.name.as_str() == crate::txn::forward::GROUP_OFFSETS {
                        self.end_txn_offsets_here(m.producer_id.0, m.transaction_result)
                            .await
                    } else {
                        self.write_marker(
                            t.name.as_str(),
                            p,
                            (m.producer_id.0, m.producer_epoch),
                            marker,
                        )
                        .await
                    };
                    let code = match outcome {
                        Ok(()) => 0,
                        Err(e) => e.code(),
                    };
                    partitions.push(
                        WritableTxnMarkerPartitionResult::default()
                            .with_partition_index(p)
                            .with_error_code(code),
                    );
                }
                topics.push(
                    WritableTxnMarkerTopicResult::default()
                        .with_name(t.name)
                        .with_partitions(partitions),
                );
            }
            WritableTxnMarkerResult::default()
                .with_producer_id(m.producer_id)
                .with_topics(topics)
        }))
        .await;
        WriteTxnMarkersResponse::default().with_markers(markers)
    }

    pub(crate) async fn describe_transactions(
        &self,
        r: DescribeTransactionsRequest,
        _version: i16,
    ) -> DescribeTransactionsResponse {
        let mut states = Vec::new();
        for id in r.transactional_ids {
            let described = async {
                self.check_txn_coordinator(id.as_str())?;
                let slot = self.txns.lock(id.as_str()).await?;
                slot.meta.clone().ok_or_else(|| {
                    KafkaError::new(
                        ResponseError::TransactionalIdNotFound,
                        format!("no transactional id {:?}", id.as_str()),
                    )
                })
            }
            .await;
            let state = TransactionState::default().with_transactional_id(id.clone());
            states.push(match described {
                Err(e) => state.with_error_code(e.code()),
                Ok(meta) => {
                    let mut topics: Vec<TopicData> = Vec::new();
                    for (topic, p) in &meta.partitions {
                        match topics.last_mut() {
                            Some(t) if t.topic.as_str() == topic => t.partitions.push(*p),
                            _ => topics.push(
                                TopicData::default()
                                    .with_topic(TopicName(str(topic.clone())))
                                    .with_partitions(vec![*p]),
                            ),
                        }
                    }
                    state
                        .with_transaction_state(str(meta.state.name()))
                        .with_transaction_timeout_ms(meta.timeout_ms as i32)
                        .with_transaction_start_time_ms(if meta.state == TxnState::Ongoing {
                            meta.started_ms as i64
                        } else {
                            -1
                        })
                        .with_producer_id(ProducerId(meta.producer_id))
                        .with_producer_epoch(meta.epoch)
                        .with_topics(topics)
                }
            });
        }
        DescribeTransactionsResponse::default().with_transaction_states(states)
    }

    pub(crate) async fn list_transactions(
        &self,
        r: ListTransactionsRequest,
        version: i16,
    ) -> ListTransactionsResponse {
        let all = match self.txns.all().await {
            Ok(all) => all,
            Err(e) => return ListTransactionsResponse::default().with_error_code(e.code()),
        };
        let known = [
            "Empty",
            "Ongoing",
            "PrepareCommit",
            "PrepareAbort",
            "CompleteCommit",
            "CompleteAbort",
        ];
        let unknown: Vec<_> = r
            .state_filters
            .iter()
            .filter(|s| !known.contains(&s.as_str()))
            .cloned()
            .collect();
        let now = self.clock_ms();
        let listed = all
            .into_iter()
            .filter(|(id, _)| self.coordinates_txn(id))
            .filter(|(_, m)| {
                r.state_filters.is_empty()
                    || r.state_filters.iter().any(|s| s.as_str() == m.state.name())
            })
            .filter(|(_, m)| {
                r.producer_id_filters.is_empty()
                    || r.producer_id_filters.contains(&ProducerId(m.producer_id))
            })
            .filter(|(_, m)| {
                // v1+: transactions open longer than the filter.
                version < 1
                    || r.duration_filter < 0
                    || (m.state == TxnState::Ongoing
                        && now.saturating_sub(m.started_ms) as i64 > r.duration_filter)
            })
            .map(|(id, m)| {
                ListedState::default()
                    .with_transactional_id(TransactionalId(str(id)))
                    .with_producer_id(ProducerId(m.producer_id))
                    .with_transaction_state(str(m.state.name()))
            })
            .collect();
        ListTransactionsResponse::default()
            .with_unknown_state_filters(unknown)
            .with_transaction_states(listed)
    }

    /// The coordinator's sweep, every `transaction.abort.timed.out.transaction.cleanup.interval.ms`
    /// until `stop`: completes decisions left half done (after a crash, or a partition that
    /// could not be written), aborts transactions open past their timeout (bumping the
    /// epoch, so the late producer is fenced), and forgets ids idle past
    /// `transactional.id.expiration.ms`. Runs once at start, so a restarted coordinator
    /// finishes what it had decided.
    pub async fn run_transactions(self: Arc<Self>, stop: CancellationToken) {
        let every = Duration::from_millis(self.config().transaction_abort_interval_ms.max(1));
        loop {
            if let Err(e) = self.sweep_transactions().await {
                tracing::warn!(error = %e, "the transaction sweep failed; it runs again");
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
        }
    }

    async fn sweep_transactions(&self) -> Result<()> {
        for id in self.txns.cached() {
            if !self.coordinates_txn(&id) {
                self.txns.forget(&id);
            }
        }
        if self.check_standing().is_err() {
            return Ok(());
        }
        self.txns.evict_idle();
        let now = self.clock_ms();
        for (id, seen) in self.txns.all().await? {
            if !self.coordinates_txn(&id) {
                continue;
            }
            let timed_out = seen.state == TxnState::Ongoing
                && now.saturating_sub(seen.started_ms) > seen.timeout_ms.max(0) as u64;
            let expired = matches!(
                seen.state,
                TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
            ) && now.saturating_sub(seen.updated_ms)
                > self.config().transactional_id_expiration_ms;
            if !(timed_out || expired || seen.state.is_prepared()) {
                continue;
            }
            let mut slot = self.txns.lock(&id).await?;
            let Some(meta) = slot.meta.clone() else {
                continue;
            };
            // Decided on what the row says now, not what the listing saw.
            let outcome = if meta.state.is_prepared() {
                self.complete(&id, &mut slot).await
            } else if meta.state == TxnState::Ongoing
                && now.saturating_sub(meta.started_ms) > meta.timeout_ms.max(0) as u64
            {
                tracing::info!(
                    transactional_id = id,
                    producer_id = meta.producer_id,
                    epoch = meta.epoch,
                    "aborting a transaction open past its timeout"
                );
                self.metrics
                    .transactions_timed_out
                    .fetch_add(1, Ordering::Relaxed);
                self.abort_fenced(&id, &mut slot, now).await
            } else if expired && meta.updated_ms == seen.updated_ms {
                self.txns.delete(&id, &mut slot).await
            } else {
                Ok(())
            };
            if let Err(e) = outcome {
                tracing::warn!(transactional_id = id, error = %e, "a transaction could not be settled yet");
            }
        }
        Ok(())
    }
}

fn gone(id: &str) -> KafkaError {
    KafkaError::new(
        ResponseError::NotCoordinator,
        format!("transactional id {id:?} changed on another node meanwhile"),
    )
}

impl Broker {
    /// KIP-890's check of a transactional batch (part 1, on the broker): the batch's producer
    /// must have an open transaction, at its epoch, that the partition was added to. A late
    /// batch of a transaction that was aborted meanwhile would otherwise open a transaction in
    /// the partition that no coordinator knows of, and hold its last stable offset back for
    /// good. Where this node coordinates the id, every batch is checked against its cached
    /// state; where another node does (a cluster), a batch that would open a transaction at
    /// the partition is checked against the id's stored row.
    pub(crate) async fn verify_in_transaction(
        &self,
        id: &str,
        h: &crate::batch::BatchHeader,
        topic: &str,
        partition: &crate::topics::Partition,
    ) -> Result<()> {
        if self.coordinates_txn(id) {
            let slot = self.txns.lock(id).await?;
            return in_transaction(slot.meta.as_ref(), id, h, topic, partition.index);
        }
        // Another node coordinates `id`. Its state row is in the metadata store, written
        // before that node answered AddPartitionsToTxn, so it is read here instead of asking
        // the node. A batch that continues a transaction open at this partition needs no
        // look: only one that would open one could hang the last stable offset.
        if partition.txns.lock().open_first(h.producer_id).is_some() {
            return Ok(());
        }
        // A store that does not answer is retriable for the producer (as Kafka answers a
        // verification its coordinator could not give): NOT_ENOUGH_REPLICAS.
        let meta = self.txns.read(id).await.map_err(|e| {
            KafkaError::new(
                ResponseError::NotEnoughReplicas,
                format!("the state of transactional id {id:?} could not be read; retry: {e}"),
            )
        })?;
        in_transaction(meta.as_ref(), id, h, topic, partition.index)
    }

    /// The last stable offset of a partition this node leads, loading its transactions if
    /// this node has not yet (for the table worker: a table reads no further).
    pub async fn partition_stable_end(&self, topic: &str, index: i32) -> Result<u64> {
        let topic = self
            .topics
            .get(topic)
            .ok_or_else(|| KafkaError::unknown_topic(topic))?;
        let partition = topic
            .partition(index)
            .ok_or_else(|| KafkaError::unknown_topic(&topic.name))?;
        let info = self.led_stream(partition.stream)?;
        self.stable_end(partition, info.end_offset, true).await
    }

    /// A partition's aborted transactions overlapping `from..to`, as (producer id, first
    /// offset, abort marker's offset).
    pub fn partition_aborted(
        &self,
        topic: &str,
        index: i32,
        from: u64,
        to: u64,
    ) -> Vec<(i64, u64, u64)> {
        let Some(partition) = self
            .topics
            .get(topic)
            .and_then(|t| t.partition(index).cloned())
        else {
            return Vec::new();
        };
        let aborted = partition.txns.lock().aborted_in(from, to);
        aborted
            .into_iter()
            .map(|a| (a.producer_id, a.first, a.last))
            .collect()
    }
}

/// KIP-890's check of a transactional batch against its transactional id's state `meta`: its
/// producer's transaction must be open at that epoch with `topic`-`partition` added.
fn in_transaction(
    meta: Option<&TxnMeta>,
    id: &str,
    h: &crate::batch::BatchHeader,
    topic: &str,
    partition: i32,
) -> Result<()> {
    let ok = meta.is_some_and(|m| {
        m.producer_id == h.producer_id
            && m.epoch == h.producer_epoch
            && m.state == TxnState::Ongoing
            && m.partitions.contains(&(topic.to_string(), partition))
    });
    if ok {
        return Ok(());
    }
    let fenced = meta.is_some_and(|m| m.producer_id == h.producer_id && m.epoch > h.producer_epoch);
    Err(if fenced {
        KafkaError::new(
            ResponseError::InvalidProducerEpoch,
            format!(
                "producer {} epoch {} was fenced: transactional id {id:?} is at a newer epoch",
                h.producer_id, h.producer_epoch
            ),
        )
    } else {
        KafkaError::new(
            ResponseError::InvalidTxnState,
            format!(
                "{topic}-{partition} is not in an open transaction of producer {} epoch {} \
                 (transactional id {id:?}): add it first (AddPartitionsToTxn)",
                h.producer_id, h.producer_epoch
            ),
        )
    })
}
