//! Produce: validate each partition's record batches, order them with the partition's
//! idempotent producer state, append them to the partition's stream as produced (only the base
//! offset is rewritten), and answer once they are durable.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::join_all;
use inlet_storage::AppendOptions;
use kafka_protocol::messages::produce_request::PartitionProduceData;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use tokio::sync::{oneshot, watch};

use crate::batch::{self, Batch, BatchError};
use crate::broker::{str, Broker};
use crate::error::{KafkaError, Result};
use crate::producers::{Outcome, SeqCheck};
use crate::records::{self, Limits};
use crate::topics::{Partition, Topic};

/// A Produce request's place among its connection's Produce requests (see
/// [`Broker::produce`]): it submits its batches once `after` fires (or its sender is gone),
/// and drops `done` once its own are submitted.
#[derive(Default)]
pub struct ProduceTurn {
    pub after: Option<oneshot::Receiver<()>>,
    pub done: Option<oneshot::Sender<()>>,
}

/// One partition's batch, submitted, not yet durable.
struct SubmittedPartition {
    append: SubmittedBatch,
    stream: inlet_storage::StreamId,
    log_append_time: i64,
}

/// A batch handed to the stream store, or a retry of one that was.
enum SubmittedBatch {
    Appended {
        pending: inlet_storage::PendingAppend,
        tx: watch::Sender<Outcome>,
        header: batch::BatchHeader,
        size: u64,
        topic: Arc<Topic>,
        index: i32,
        /// The lower bound this batch opened its transaction in the partition at, if it did.
        opened_at: Option<u64>,
    },
    Duplicate(watch::Receiver<Outcome>),
}

/// What one partition's produce stored.
struct Stored {
    base_offset: i64,
    log_append_time: i64,
    log_start: i64,
}

fn batch_error(e: BatchError) -> KafkaError {
    let code = match e {
        BatchError::Crc { .. } | BatchError::Truncated(_) => ResponseError::CorruptMessage,
        BatchError::UnsupportedMagic(_) => ResponseError::UnsupportedForMessageFormat,
        BatchError::Invalid(_) => ResponseError::InvalidRecord,
    };
    KafkaError::new(code, e.to_string())
}

impl Broker {
    /// Answers a Produce request. `turn` orders it after the connection's earlier Produce
    /// requests: its batches are submitted to the stream store (which assigns offsets in
    /// submission order) only once theirs are, as Kafka appends one connection's requests in
    /// the order they arrived. The wait for durability is not ordered, so requests in flight
    /// still share group commits.
    pub(crate) async fn produce(
        &self,
        r: ProduceRequest,
        version: i16,
        turn: ProduceTurn,
    ) -> Option<ProduceResponse> {
        if let Some(earlier) = turn.after {
            // Err: the earlier request was dropped; it submits nothing more.
            let _ = earlier.await;
        }
        let acks = r.acks;
        let refuse_all = if !(-1..=1).contains(&acks) {
            Some(KafkaError::new(
                ResponseError::InvalidRequiredAcks,
                format!("acks must be -1, 0 or 1, not {acks}"),
            ))
        } else {
            None
        };
        let txn_id: Option<String> = r
            .transactional_id
            .as_ref()
            .filter(|t| !t.is_empty())
            .map(|t| t.to_string());
        let txn_id = txn_id.as_deref();
        let topics = join_all(r.topic_data.into_iter().map(|t| {
            let refuse_all = refuse_all.clone();
            async move {
                let name = t.name.0.as_str().to_string();
                let topic = match &refuse_all {
                    Some(e) => Err(e.clone()),
                    None => self.topic_for_write(&name).await,
                };
                let partitions = join_all(t.partition_data.into_iter().map(|p| {
                    let topic = topic.clone();
                    async move {
                        let index = p.index;
                        let submitted = match topic {
                            Ok(topic) => self.submit_partition(&topic, p, version, txn_id).await,
                            Err(e) => Err(e),
                        };
                        (index, submitted)
                    }
                }))
                .await;
                (t.name, partitions)
            }
        }))
        .await;
        // Every batch of this request is submitted: the next request may submit its own.
        drop(turn.done);
        let topics = join_all(topics.into_iter().map(|(name, partitions)| async move {
            let partitions =
                join_all(partitions.into_iter().map(|(index, submitted)| async move {
                    let outcome = match submitted {
                        Ok(s) => self.finish_partition(s).await,
                        Err(e) => Err(e),
                    };
                    partition_response(index, outcome, version)
                }))
                .await;
            TopicProduceResponse::default()
                .with_name(name)
                .with_partition_responses(partitions)
        }))
        .await;
        if acks == 0 {
            return None;
        }
        Some(ProduceResponse::default().with_responses(topics))
    }

    /// Checks one partition's batch and submits it to the stream store (offsets are assigned
    /// then); [`Self::finish_partition`] waits for it to be durable.
    async fn submit_partition(
        &self,
        topic: &Arc<Topic>,
        p: PartitionProduceData,
        version: i16,
        txn_id: Option<&str>,
    ) -> Result<SubmittedPartition> {
        let partition = topic.partition(p.index).ok_or_else(|| {
            KafkaError::new(
                ResponseError::UnknownTopicOrPartition,
                format!("topic {:?} has no partition {}", topic.name, p.index),
            )
        })?;
        self.check_standing()?;
        let records = p.records.unwrap_or_default();
        let batches = batch::split(&records).map_err(batch_error)?;
        // Kafka's rule for Produce v3 and later (every version Inlet serves): one record batch
        // per partition. The partition's append is then one WAL entry, stored whole or not at
        // all, and a failure never hides stored batches.
        if batches.len() != 1 {
            return Err(KafkaError::new(
                ResponseError::InvalidRecord,
                format!(
                    "a Produce v{version} request carries one record batch per partition; \
                     partition {} of topic {:?} has {}",
                    p.index,
                    topic.name,
                    batches.len()
                ),
            ));
        }
        let limit = topic
            .configs
            .get("max.message.bytes")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(self.config().message_max_bytes as usize);
        for b in &batches {
            if b.bytes.len() > limit {
                return Err(KafkaError::new(
                    ResponseError::MessageTooLarge,
                    format!(
                        "a record batch of {} bytes exceeds max.message.bytes {limit} of topic {:?}",
                        b.bytes.len(),
                        topic.name
                    ),
                ));
            }
            if b.header.is_control() {
                return Err(KafkaError::new(
                    ResponseError::InvalidRecord,
                    "control batches are written by the transaction coordinator, not by clients",
                ));
            }
            if b.header.is_transactional() && txn_id.is_none() {
                return Err(KafkaError::new(
                    ResponseError::InvalidRecord,
                    "a transactional record batch needs the Produce request's transactional id",
                ));
            }
            if b.header.is_transactional() && !b.header.has_producer_id() {
                return Err(KafkaError::new(
                    ResponseError::InvalidRecord,
                    "a transactional record batch needs a producer id",
                ));
            }
        }
        if let (Some(id), Some(b)) = (txn_id, batches.first()) {
            if b.header.is_transactional() {
                // Only the partition's leader checks (a follower of stale metadata is told
                // to look again, before it reads any transaction state).
                self.led_stream(partition.stream)?;
                self.verify_in_transaction(id, &b.header, &topic.name, partition)
                    .await?;
            }
        }
        // A table that lags too far holds the stream back (its retention keeps what the
        // table has not committed): produce waits, retriably, instead of growing it further.
        if let Some(bound) = topic.configs.table_lag_bound(&self.config().topic_defaults) {
            if let Some(lag) = self.store.table_lag_bytes(partition.stream) {
                if lag.lag_bytes >= bound {
                    self.metrics
                        .table_lag_refusals
                        .fetch_add(1, Ordering::Relaxed);
                    return Err(KafkaError::new(
                        ResponseError::KafkaStorageError,
                        format!(
                            "the table of topic {:?} has not committed {} bytes of partition {} \
                             (table.topic.lag.max.bytes {bound}); produce resumes once it does",
                            topic.name, lag.lag_bytes, p.index
                        ),
                    ));
                }
            }
        }
        let config = self.config();
        let rules = crate::validate::Rules::of(&topic.configs, &config.topic_defaults);
        let policy = topic.configs.cleanup_policy(&config.topic_defaults);
        let need_keys = crate::topic_config::compacts(policy);
        let ids = self.validate_records(&batches, rules, need_keys).await?;
        if let Some(rules) = rules {
            let registry = self.registry.as_ref().ok_or_else(|| {
                KafkaError::new(
                    ResponseError::InvalidRecord,
                    "this node has no Schema Registry to check table topic records with",
                )
            })?;
            let verdict = crate::validate::check(
                registry,
                self.payloads.clone(),
                &topic.name,
                rules,
                &batches,
                ids,
                self.record_limits(),
            )
            .await
            .map_err(|e| {
                KafkaError::new(
                    ResponseError::KafkaStorageError,
                    format!("checking table topic records failed; retry: {e}"),
                )
            })?;
            let bad = verdict.bad;
            if bad > 0 {
                if rules.tolerate {
                    self.metrics
                        .invalid_records_accepted
                        .fetch_add(bad as u64, Ordering::Relaxed);
                } else {
                    self.metrics
                        .invalid_records_refused
                        .fetch_add(bad as u64, Ordering::Relaxed);
                    let first = verdict
                        .errors
                        .first()
                        .map(|(i, m)| format!("record {i}: {m}"))
                        .unwrap_or_default();
                    let mut e = KafkaError::new(
                        ResponseError::InvalidRecord,
                        format!(
                            "{bad} record(s) of table topic {:?} failed validation; nothing was stored (first: {first})",
                            topic.name
                        ),
                    );
                    e.record_errors = verdict.errors;
                    return Err(e);
                }
            }
        }
        let log_append_time = topic.configs.get("message.timestamp.type") == Some("LogAppendTime");
        let now = self.now_ms();
        let mut batch = batches.into_iter().next().expect("checked: one batch");
        if let Some(codec) = topic
            .configs
            .get("compression.type")
            .and_then(batch::Codec::of_topic_config)
        {
            batch = recompressed(batch, codec, self.record_limits()).await?;
        }
        let append = self
            .submit_batch(
                topic,
                p.index,
                partition,
                batch,
                log_append_time.then_some(now),
            )
            .await?;
        Ok(SubmittedPartition {
            append,
            stream: partition.stream,
            log_append_time: if log_append_time { now } else { -1 },
        })
    }

    /// Waits until a submitted partition's batch is durable; what the answer reports.
    async fn finish_partition(&self, s: SubmittedPartition) -> Result<Stored> {
        let base_offset = self.finish_batch(s.append).await?;
        let log_start = self.store.start_offset(s.stream)? as i64;
        Ok(Stored {
            base_offset,
            log_append_time: s.log_append_time,
            log_start,
        })
    }

    /// How far record walks may go: the decompressed bound of one batch.
    pub(crate) fn record_limits(&self) -> Limits {
        Limits {
            max_decompressed_bytes: self.config().max_decompressed_batch_bytes as usize,
            compacted: false,
        }
    }

    /// Reads every record of `batches` as Kafka's LogValidator does ([`records::walk`]): the
    /// count the header claims, consecutive offset deltas, well-formed records, a payload that
    /// decompresses within the bound. Compressed batches are read off the async threads. For a
    /// table topic (`rules`) the same walk returns the schema ids its records name.
    async fn validate_records(
        &self,
        batches: &[Batch],
        rules: Option<crate::validate::Rules>,
        need_keys: bool,
    ) -> Result<Vec<u32>> {
        let limits = self.record_limits();
        // The schema ids, and (a compacted topic) the records without a key.
        type Walked = (Vec<u32>, Vec<i32>);
        let walk_all = move |batches: &[Batch]| -> std::result::Result<Walked, BatchError> {
            let mut ids = Vec::new();
            let mut keyless = Vec::new();
            for b in batches {
                records::walk(b, limits, |r| {
                    if need_keys && r.key.is_none() {
                        keyless.push(r.index);
                    }
                    if let Some(rules) = &rules {
                        rules.collect_ids(r.key, r.value, &mut ids);
                    }
                })?;
            }
            Ok((ids, keyless))
        };
        let compressed = batches.iter().any(|b| b.header.attributes & 0x7 != 0);
        let outcome = if compressed {
            let owned = batches.to_vec();
            tokio::task::spawn_blocking(move || walk_all(&owned))
                .await
                .map_err(|e| {
                    KafkaError::new(
                        ResponseError::UnknownServerError,
                        format!("the record validation task failed: {e}"),
                    )
                })?
        } else {
            walk_all(batches)
        };
        let (ids, keyless) = outcome.map_err(|e| {
            self.metrics.invalid_batches.fetch_add(1, Ordering::Relaxed);
            batch_error(e)
        })?;
        if !keyless.is_empty() {
            // As Kafka answers (KIP-467): the batch is refused, and the records without a key
            // are named, so a client fails those and may send the others again.
            let why = "a compacted topic cannot accept a record without a key";
            let mut e = KafkaError::new(
                ResponseError::InvalidRecord,
                format!("{} record(s) without a key: {why}", keyless.len()),
            );
            e.record_errors = keyless.into_iter().map(|i| (i, why.to_string())).collect();
            return Err(e);
        }
        Ok(ids)
    }

    /// Makes `producers` (the partition's state, locked by the caller) the state of the epoch
    /// this node holds the partition under, handing an image it rebuilt to the snapshot task;
    /// returns the epoch.
    pub(crate) async fn load_producers(
        &self,
        partition: &Partition,
        producers: &mut crate::producers::PartitionProducers,
    ) -> Result<u64> {
        let (epoch, image) = producers
            .ensure_loaded(&self.store, &self.snapshots, partition.stream)
            .await?;
        if let Some(image) = image {
            *partition.txns.lock() = crate::txn::PartitionTxns::rebuilt(
                epoch,
                image.txns.open.clone(),
                image.txns.aborted.clone(),
            );
            *partition.image.lock().await = Some((epoch, image));
        }
        Ok(epoch)
    }

    /// Submits one batch under the partition's producer lock: its offsets are assigned when
    /// this returns. A retried duplicate is not submitted again: it waits for the original.
    async fn submit_batch(
        &self,
        topic: &Arc<Topic>,
        index: i32,
        partition: &Partition,
        b: Batch,
        append_time: Option<i64>,
    ) -> Result<SubmittedBatch> {
        let header = b.header;
        let bytes: Bytes = match append_time {
            Some(now) => batch::set_log_append_time(&b.bytes, now),
            None => b.bytes,
        };
        // The stream store ages data for time retention by this: the broker's arrival time,
        // not the producer's timestamps, so backfilled records with an old CreateTime are kept
        // for retention.ms after they arrive (Kafka gets the same effect by never deleting its
        // active segment). ListOffsets by time reads the batches' own timestamps.
        let arrival = append_time.unwrap_or_else(|| self.now_ms());
        let options = AppendOptions {
            timestamp_ms: (arrival >= 0).then_some(arrival as u64),
            write_base_offset: true,
            // The partition leader epoch, as a Kafka broker stamps it: consumers validate
            // their position with it after a leader change (OffsetForLeaderEpoch).
            write_epoch: true,
            // A producer's batches depend on the ones before (sequences): none after a failed
            // one may be stored before `finish_batch` has taken the failure in.
            failure_latch: true,
            // Set below, to the epoch the producer state is for.
            expect_epoch: None,
        };
        let size = bytes.len() as u64;
        let (pending, tx, opened_at) = {
            let mut producers = partition.producers.lock().await;
            let now = self.now_ms() as u64;
            let epoch = self.load_producers(partition, &mut producers).await?;
            // The state is this epoch's: an append under another would not match it.
            let options = AppendOptions {
                expect_epoch: Some(epoch),
                ..options
            };
            producers.expire(now, self.config().producer_id_expiration_ms);
            let checked = producers.check(&header).inspect_err(|e| {
                tracing::debug!(stream = partition.stream, epoch, error = %e, "refused a producer's batch");
            });
            match checked? {
                SeqCheck::Duplicate(outcome) => return Ok(SubmittedBatch::Duplicate(outcome)),
                SeqCheck::Append => {}
            }
            // A transactional batch opens its producer's transaction here (if it is the first)
            // before it can become durable: the last stable offset stays below it.
            let opened = if header.is_transactional() {
                let end = self.store.end_offset(partition.stream)?;
                partition
                    .txns
                    .lock()
                    .batch_queued(header.producer_id, end)
                    .then_some(end)
            } else {
                None
            };
            let pending = self
                .store
                .submit_append(partition.stream, bytes, header.offset_count(), options)
                .await;
            match pending {
                Ok(pending) => {
                    let (tx, rx) = watch::channel(Outcome::Pending);
                    producers.remember(&header, rx, now);
                    (pending, tx, opened)
                }
                // Nothing was remembered of it: the partition still expects this batch. A
                // transaction it opened stays open (its lower bound holds readers back) until
                // the producer's retry or the transaction's marker.
                Err(e) => return Err(e.into()),
            }
        };
        Ok(SubmittedBatch::Appended {
            pending,
            tx,
            header,
            size,
            topic: topic.clone(),
            index,
            opened_at,
        })
    }

    /// Waits for a submitted batch; returns its base offset once it is durable (or the
    /// original's offset for a retried duplicate).
    async fn finish_batch(&self, submitted: SubmittedBatch) -> Result<i64> {
        let (pending, tx, header, size, topic, index, opened_at) = match submitted {
            SubmittedBatch::Duplicate(mut outcome) => {
                let result = outcome
                    .wait_for(|o| *o != Outcome::Pending)
                    .await
                    .map(|o| *o);
                return match result {
                    Ok(Outcome::Stored(offset)) => Ok(offset),
                    _ => Err(KafkaError::new(
                        ResponseError::KafkaStorageError,
                        "the first attempt of this retried batch failed; retry",
                    )),
                };
            }
            SubmittedBatch::Appended {
                pending,
                tx,
                header,
                size,
                topic,
                index,
                opened_at,
            } => (pending, tx, header, size, topic, index, opened_at),
        };
        // In a task of its own: the outcome must reach the producer state (and a failure
        // lift the stream's latch) even when the connection goes away meanwhile.
        let (store, metrics) = (self.store.clone(), self.metrics.clone());
        let outcome = tokio::spawn(async move {
            match pending.await {
                Ok(offset) => {
                    if let (Some(bound), Some(p)) = (opened_at, topic.partition(index)) {
                        p.txns
                            .lock()
                            .first_stored(header.producer_id, bound, offset);
                    }
                    tx.send_replace(Outcome::Stored(offset as i64));
                    metrics
                        .produced_records
                        .fetch_add(header.record_count as u64, Ordering::Relaxed);
                    metrics.produced_bytes.fetch_add(size, Ordering::Relaxed);
                    Ok(offset as i64)
                }
                Err(e) => {
                    tx.send_replace(Outcome::Failed);
                    if let Some(p) = topic.partition(index) {
                        let mut producers = p.producers.lock().await;
                        producers.fail_from(header.producer_id, header.base_sequence);
                        store.clear_failure(p.stream);
                    }
                    Err(e.into())
                }
            }
        });
        outcome.await.unwrap_or_else(|e| {
            Err(KafkaError::new(
                ResponseError::UnknownServerError,
                format!("the append's task failed: {e}"),
            ))
        })
    }
}

/// `b` in `codec`, as a topic with that `compression.type` stores its batches (Kafka's
/// broker recompresses the same way); on a blocking thread when there is work to do.
async fn recompressed(b: Batch, codec: batch::Codec, limits: Limits) -> Result<Batch> {
    if b.header.attributes & 0x7 == codec as i16 {
        return Ok(b);
    }
    tokio::task::spawn_blocking(move || inlet_records::rewrite::recompress(&b, codec, limits))
        .await
        .map_err(|e| {
            KafkaError::new(
                ResponseError::UnknownServerError,
                format!("the recompression task failed: {e}"),
            )
        })?
        .map_err(batch_error)
}

fn partition_response(
    index: i32,
    outcome: Result<Stored>,
    version: i16,
) -> PartitionProduceResponse {
    match outcome {
        Ok(s) => PartitionProduceResponse::default()
            .with_index(index)
            .with_base_offset(s.base_offset)
            .with_log_append_time_ms(s.log_append_time)
            .with_log_start_offset(s.log_start),
        Err(e) => {
            if e.code != ResponseError::OutOfOrderSequenceNumber {
                tracing::debug!(partition = index, error = %e, "produce refused");
            }
            let mut r = PartitionProduceResponse::default()
                .with_index(index)
                .with_error_code(e.code())
                .with_base_offset(-1)
                .with_log_append_time_ms(-1)
                .with_log_start_offset(-1);
            if version >= 8 {
                r.record_errors = e
                    .record_errors
                    .into_iter()
                    .map(|(index, message)| {
                        BatchIndexAndErrorMessage::default()
                            .with_batch_index(index)
                            .with_batch_index_error_message(Some(str(message)))
                    })
                    .collect();
                r.error_message = Some(str(e.message));
            }
            r
        }
    }
}
