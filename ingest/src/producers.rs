//! Idempotent producers: producer id allocation and, per partition, the sequence numbers
//! that drop retried batches and refuse gaps.
//!
//! Kafka's rules: a producer (id, epoch) numbers its batches per partition; a batch must
//! start right after the previous one's last sequence (wrapping at `i32::MAX`), a retry of one
//! of the last five batches is answered with the original offset and not stored again, and a
//! newer epoch starts again at 0. A producer the partition has no state for is accepted at
//! any sequence (as Kafka does since KIP-360), so expired state never blocks a producer.
//!
//! Durability: producer ids come from a counter in the metadata store, handed out in blocks,
//! so an id is never given twice even after kill -9. A partition's sequence state is rebuilt
//! from its last producer snapshot and the batches after it when it is first used after a
//! start, so retries that arrive after a restart are still recognized; and again when the
//! partition comes to this node from another (a new ownership epoch), so a producer's state
//! carries over a failover (`producer_image`).
//!
//! Memory: a partition remembers a producer until `producer.id.expiration.ms` passes without a
//! batch from it, and the node as a whole within `inlet.producer.state.max.bytes`: past that,
//! the longest idle producers are forgotten first ([`enforce_budget`]), the same way.

use std::collections::{HashMap, VecDeque};

use inlet_storage::{MetaStore, StreamId, StreamStore};
use kafka_protocol::ResponseError;
use sqlx::Row;
use tokio::sync::watch;

use crate::batch::BatchHeader;
use crate::error::{KafkaError, Result};
use crate::producer_image::{ProducerImage, Snapshots, REMEMBERED_BATCHES};

const MIGRATIONS: &[&str] = &[
    "CREATE TABLE inlet_ingest_counters (name VARCHAR(64) PRIMARY KEY, value BIGINT NOT NULL)",
    "INSERT INTO inlet_ingest_counters (name, value) VALUES ('producer_id', 0)",
];

/// Ids handed out per metadata transaction.
const ID_BLOCK: i64 = 100;

/// Hands out producer ids.
#[derive(Debug)]
pub(crate) struct ProducerIds {
    meta: MetaStore,
    /// Next id to give and the end of the current block.
    block: tokio::sync::Mutex<(i64, i64)>,
}

impl ProducerIds {
    pub(crate) async fn open(meta: MetaStore) -> Result<Self> {
        meta.migrate("ingest.producers", MIGRATIONS).await?;
        Ok(ProducerIds {
            meta,
            block: tokio::sync::Mutex::new((0, 0)),
        })
    }

    /// A producer id never handed out before.
    pub(crate) async fn next(&self) -> Result<i64> {
        let mut block = self.block.lock().await;
        if block.0 >= block.1 {
            let row = sqlx::query(
                "UPDATE inlet_ingest_counters SET value = value + $1 WHERE name = 'producer_id' \
                 RETURNING value",
            )
            .bind(ID_BLOCK)
            .fetch_one(self.meta.pool())
            .await
            .map_err(inlet_storage::Error::from)?;
            let end: i64 = row.try_get("value").map_err(inlet_storage::Error::from)?;
            *block = (end - ID_BLOCK, end);
        }
        let id = block.0;
        block.0 += 1;
        Ok(id)
    }
}

/// How an appended batch ended, for retries that wait on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Pending,
    Stored(i64),
    Failed,
}

#[derive(Debug)]
struct SeqBatch {
    first: i32,
    last: i32,
    outcome: watch::Receiver<Outcome>,
}

#[derive(Debug)]
struct ProducerEntry {
    epoch: i16,
    batches: VecDeque<SeqBatch>,
    /// When the producer last sent a batch here (the broker's clock, epoch ms).
    last_ms: u64,
    /// The first sequence of the batch whose append failed last, until a batch is taken
    /// again ([`PartitionProducers::fail_from`]): the sequence expected next when the failure
    /// emptied `batches`, and a later batch of the producer is one it had in flight behind the
    /// failed one ([`PartitionProducers::check`]).
    failed_at: Option<i32>,
}

/// One producer as DescribeProducers reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ActiveProducer {
    pub(crate) producer_id: i64,
    pub(crate) epoch: i16,
    /// The last sequence of its last batch here (-1: none kept).
    pub(crate) last_sequence: i32,
    /// When it last sent a batch here (the broker's clock, epoch ms).
    pub(crate) last_ms: u64,
}

/// What to do with a batch.
#[derive(Debug)]
pub enum SeqCheck {
    /// Store it.
    Append,
    /// A retry of a batch already taken: answer with that batch's offset once it is stored.
    Duplicate(watch::Receiver<Outcome>),
}

/// One partition's producer state.
#[derive(Debug, Default)]
pub struct PartitionProducers {
    /// The stream epoch the state was rebuilt under: a partition that moved away and back
    /// (another node appended meanwhile) is rebuilt again.
    loaded: Option<u64>,
    producers: HashMap<i64, ProducerEntry>,
    /// When entries were last checked for expiry.
    swept_ms: u64,
}

/// How often a partition looks for expired producers (when it is produced to).
const SWEEP_EVERY_MS: u64 = 60_000;

impl PartitionProducers {
    /// Rebuilds the state from the partition's snapshot and the batches after it, once per
    /// start and once per ownership epoch ([`ProducerImage::rebuild`]). Returns the epoch the
    /// state is for (appends must be made under it: `AppendOptions::expect_epoch`) and, when
    /// it rebuilt, the image it was built from, for the snapshot task to keep up to date.
    ///
    /// A partition this node does not own answers `NOT_LEADER_OR_FOLLOWER` without a rebuild,
    /// and so does one whose epoch changed during the rebuild. Rebuilding for no epoch, or for
    /// one the node no longer holds, left a state that the next request rebuilt again, which
    /// forgot a batch appended in between: the producer's next batch was then refused
    /// `OUT_OF_ORDER_SEQUENCE_NUMBER`, a fatal error for librdkafka.
    pub(crate) async fn ensure_loaded(
        &mut self,
        store: &StreamStore,
        snapshots: &Snapshots,
        stream: StreamId,
    ) -> Result<(u64, Option<ProducerImage>)> {
        let not_leader = || {
            KafkaError::new(
                ResponseError::NotLeaderOrFollower,
                "this node does not lead this partition (or has just stopped or started to): \
                 refresh the metadata",
            )
        };
        let epoch = store.owned_epoch(stream).ok_or_else(not_leader)?;
        if self.loaded == Some(epoch) {
            return Ok((epoch, None));
        }
        #[allow(clippy::disallowed_methods)] // how long the rebuild took, for the log only
        let started = std::time::Instant::now();
        let (image, stats) = ProducerImage::rebuild(store, snapshots, stream).await?;
        self.producers = image
            .producers
            .iter()
            .map(|(&id, p)| {
                let batches = p
                    .batches
                    .iter()
                    .map(|&(first, last, offset)| SeqBatch {
                        first,
                        last,
                        outcome: watch::channel(Outcome::Stored(offset)).1,
                    })
                    .collect();
                let entry = ProducerEntry {
                    epoch: p.epoch,
                    batches,
                    last_ms: p.last_ms,
                    failed_at: None,
                };
                (id, entry)
            })
            .collect();
        if store.owned_epoch(stream) != Some(epoch) {
            return Err(not_leader());
        }
        self.loaded = Some(epoch);
        tracing::info!(
            stream,
            snapshot_end = stats.snapshot_end,
            end = image.end,
            batches = stats.batches,
            bytes = stats.bytes,
            producers = self.producers.len(),
            ms = started.elapsed().as_millis() as u64,
            "rebuilt the partition's producer state"
        );
        Ok((epoch, Some(image)))
    }

    /// The producers the state knows, in id order: what DescribeProducers reports.
    pub(crate) fn describe(&self) -> Vec<ActiveProducer> {
        let mut active: Vec<ActiveProducer> = self
            .producers
            .iter()
            .map(|(&producer_id, p)| ActiveProducer {
                producer_id,
                epoch: p.epoch,
                last_sequence: p
                    .batches
                    .back()
                    .map(|b| b.last)
                    .or(p.failed_at.map(|s| s.wrapping_sub(1)))
                    .unwrap_or(-1),
                last_ms: p.last_ms,
            })
            .collect();
        active.sort_by_key(|p| p.producer_id);
        active
    }

    /// Checks a batch's producer id, epoch and sequence against the state.
    pub fn check(&self, h: &BatchHeader) -> Result<SeqCheck> {
        if !h.has_producer_id() {
            return Ok(SeqCheck::Append);
        }
        let Some(entry) = self.producers.get(&h.producer_id) else {
            return Ok(SeqCheck::Append);
        };
        if h.producer_epoch < entry.epoch {
            return Err(KafkaError::new(
                ResponseError::InvalidProducerEpoch,
                format!(
                    "producer {} epoch {} is older than the current epoch {}",
                    h.producer_id, h.producer_epoch, entry.epoch
                ),
            ));
        }
        if h.producer_epoch > entry.epoch {
            return if h.base_sequence == 0 {
                Ok(SeqCheck::Append)
            } else {
                Err(KafkaError::new(
                    ResponseError::OutOfOrderSequenceNumber,
                    format!(
                        "producer {} starts epoch {} at sequence {} instead of 0",
                        h.producer_id, h.producer_epoch, h.base_sequence
                    ),
                ))
            };
        }
        let last = h.last_sequence();
        if let Some(dup) = entry
            .batches
            .iter()
            .find(|b| b.first == h.base_sequence && b.last == last)
        {
            return Ok(SeqCheck::Duplicate(dup.outcome.clone()));
        }
        let expected = match (entry.batches.back(), entry.failed_at) {
            (Some(b), _) if b.last == i32::MAX => 0,
            (Some(b), _) => b.last + 1,
            (None, Some(resume)) => resume,
            (None, None) => return Ok(SeqCheck::Append),
        };
        if h.base_sequence == expected {
            Ok(SeqCheck::Append)
        } else if entry.failed_at == Some(expected) && ahead_of(h.base_sequence, expected) {
            // A batch the producer had in flight behind the one that failed. Kafka answers
            // OUT_OF_ORDER_SEQUENCE_NUMBER, and librdkafka then bumps the producer's epoch and
            // renumbers every partition's unacknowledged records, so a record whose
            // acknowledgement was lost on another partition (a closed connection) is written
            // again under the new epoch (librdkafka issue 4953). A retriable error keeps the
            // epoch: the client sends the failed batch again, then this one, as it does after
            // any failed request.
            Err(KafkaError::new(
                ResponseError::RequestTimedOut,
                format!(
                    "producer {}'s batch at sequence {expected} failed; its batch at sequence {} \
                     is taken once that one is sent again",
                    h.producer_id, h.base_sequence
                ),
            ))
        } else {
            Err(KafkaError::new(
                ResponseError::OutOfOrderSequenceNumber,
                format!(
                    "producer {} sent sequence {} where {} was expected",
                    h.producer_id, h.base_sequence, expected
                ),
            ))
        }
    }

    /// Records a batch that was queued for appending at `now_ms`.
    pub fn remember(&mut self, h: &BatchHeader, outcome: watch::Receiver<Outcome>, now_ms: u64) {
        if !h.has_producer_id() {
            return;
        }
        let entry = self
            .producers
            .entry(h.producer_id)
            .or_insert_with(|| ProducerEntry {
                epoch: h.producer_epoch,
                batches: VecDeque::new(),
                last_ms: now_ms,
                failed_at: None,
            });
        entry.failed_at = None;
        entry.last_ms = entry.last_ms.max(now_ms);
        if h.producer_epoch != entry.epoch {
            entry.epoch = h.producer_epoch;
            entry.batches.clear();
        }
        entry.batches.push_back(SeqBatch {
            first: h.base_sequence,
            last: h.last_sequence(),
            outcome,
        });
        while entry.batches.len() > REMEMBERED_BATCHES {
            entry.batches.pop_front();
        }
    }

    /// A transaction marker of `producer_id` at `epoch` was queued: an epoch newer than the
    /// producer's (its coordinator fenced an older instance, or aborted a timed-out
    /// transaction) refuses the older epoch's batches from now on, and the new epoch's
    /// sequences start at 0.
    pub(crate) fn fence(&mut self, producer_id: i64, epoch: i16, now_ms: u64) {
        let entry = self
            .producers
            .entry(producer_id)
            .or_insert_with(|| ProducerEntry {
                epoch,
                batches: VecDeque::new(),
                last_ms: now_ms,
                failed_at: None,
            });
        entry.last_ms = entry.last_ms.max(now_ms);
        if epoch > entry.epoch {
            entry.epoch = epoch;
            entry.batches.clear();
            entry.failed_at = None;
        }
    }

    /// Drops the state of producers that sent nothing here for `expiration_ms`
    /// (`producer.id.expiration.ms`), at most once a minute. Their next batch is accepted at
    /// any sequence, as Kafka accepts a producer whose state expired.
    pub fn expire(&mut self, now_ms: u64, expiration_ms: u64) -> usize {
        if now_ms.saturating_sub(self.swept_ms) < SWEEP_EVERY_MS.min(expiration_ms) {
            return 0;
        }
        self.swept_ms = now_ms;
        let before = self.producers.len();
        self.producers
            .retain(|_, p| now_ms.saturating_sub(p.last_ms) < expiration_ms);
        before - self.producers.len()
    }

    /// How many producers this partition keeps state for.
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// Each remembered producer's id and when it last sent a batch here (broker time, epoch
    /// ms), for the node's budget ([`enforce_budget`]).
    pub(crate) fn last_seen(&self) -> impl Iterator<Item = (i64, u64)> + '_ {
        self.producers.iter().map(|(&id, p)| (id, p.last_ms))
    }

    /// Forgets `producer_id` if it has sent nothing here since `last_ms` and none of its
    /// batches is still being appended (a retry of one must find it). Returns whether it did.
    pub(crate) fn forget_idle(&mut self, producer_id: i64, last_ms: u64) -> bool {
        let idle = self.producers.get(&producer_id).is_some_and(|p| {
            p.last_ms == last_ms
                && p.batches
                    .iter()
                    .all(|b| *b.outcome.borrow() != Outcome::Pending)
        });
        if idle {
            self.producers.remove(&producer_id);
        }
        idle
    }

    /// After a failed append of the batch starting at `first_sequence`: forgets that batch and
    /// every later one of the producer (they were queued behind it and fail with it), so the
    /// partition expects `first_sequence` again. The client's retry of it is then stored, and a
    /// later batch that arrives first is refused, with a retriable error rather than Kafka's
    /// out-of-order one ([`PartitionProducers::check`]): were it accepted, the client would
    /// conclude the failed batch had been stored (librdkafka reports such a batch delivered,
    /// at offset -1001).
    pub fn fail_from(&mut self, producer_id: i64, first_sequence: i32) {
        if let Some(entry) = self.producers.get_mut(&producer_id) {
            if let Some(at) = entry.batches.iter().position(|b| b.first == first_sequence) {
                entry.batches.truncate(at);
                entry.failed_at = Some(first_sequence);
            }
        }
    }
}

/// Whether sequence `seq` comes after `expected` (within half the sequence space: sequences
/// wrap from `i32::MAX` to 0).
fn ahead_of(seq: i32, expected: i32) -> bool {
    let distance = (i64::from(seq) - i64::from(expected)).rem_euclid(1 << 31);
    distance > 0 && distance < 1 << 30
}

/// What one producer remembered by one partition is charged against
/// `inlet.producer.state.max.bytes`: its live entry (up to five batches, each holding the
/// channel a retry of it waits on) and its entry in the partition's snapshot image. An
/// estimate from the types' sizes, not a measurement of the allocator.
pub(crate) const STATE_BYTES: u64 = 2048;

#[cfg(test)]
mod tests {
    use super::*;

    fn header(pid: i64, epoch: i16, seq: i32, count: i32) -> BatchHeader {
        BatchHeader {
            last_offset_delta: count - 1,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            record_count: count,
            attributes: 0,
        }
    }

    fn stored(state: &mut PartitionProducers, h: &BatchHeader, offset: i64) {
        state.remember(h, watch::channel(Outcome::Stored(offset)).1, 0);
    }

    /// The state is built only for an epoch this node holds, and kept through it: a partition
    /// it does not lead answers `NOT_LEADER_OR_FOLLOWER` without building one (a state built
    /// for no epoch was built again at the next request, which forgot a batch taken in
    /// between, and the producer's next batch was refused out of order).
    #[tokio::test]
    async fn the_state_is_built_for_an_epoch_the_node_holds_and_kept_through_it() {
        let dir = tempfile::tempdir().expect("dir");
        let store = StreamStore::builder(dir.path().join("wal"))
            .config(inlet_storage::StorageConfig {
                node_id: 1,
                wal: Some(inlet_storage::WalKind::Object),
                ..Default::default()
            })
            .object_store_url("memory://")
            .background_tasks(false)
            .open()
            .await
            .expect("store");
        let snapshots = Snapshots::open(store.meta().clone())
            .await
            .expect("snapshots");
        let s = store.create_stream("kafka/t/0").await.expect("stream").id;
        store.release(s).await.expect("release");
        let mut producers = PartitionProducers::default();
        let refused = producers
            .ensure_loaded(&store, &snapshots, s)
            .await
            .expect_err("a partition this node does not lead");
        assert_eq!(refused.code, ResponseError::NotLeaderOrFollower);

        assert!(store.acquire(s, &[1]).await.expect("acquire"));
        let (epoch, image) = producers
            .ensure_loaded(&store, &snapshots, s)
            .await
            .expect("built");
        assert_eq!(Some(epoch), store.owned_epoch(s));
        assert!(image.is_some());
        // A batch taken and not stored yet: the next request keeps it and follows it.
        let taken = header(7, 0, 0, 4);
        assert!(matches!(producers.check(&taken), Ok(SeqCheck::Append)));
        producers.remember(&taken, watch::channel(Outcome::Pending).1, 0);
        let (again, image) = producers
            .ensure_loaded(&store, &snapshots, s)
            .await
            .expect("kept");
        assert_eq!((again, image.is_none()), (epoch, true));
        assert!(matches!(
            producers.check(&header(7, 0, 4, 3)),
            Ok(SeqCheck::Append)
        ));
    }

    #[test]
    fn sequences_duplicates_gaps_and_epochs() {
        let mut s = PartitionProducers::default();
        let b0 = header(1, 0, 0, 3);
        assert!(matches!(s.check(&b0), Ok(SeqCheck::Append)));
        stored(&mut s, &b0, 100);
        // A retry of the same batch is a duplicate answered with the first offset.
        match s.check(&b0) {
            Ok(SeqCheck::Duplicate(rx)) => assert_eq!(*rx.borrow(), Outcome::Stored(100)),
            other => panic!("expected a duplicate, got {other:?}"),
        }
        let gap = header(1, 0, 5, 1);
        let err = s.check(&gap).expect_err("gap");
        assert_eq!(err.code, ResponseError::OutOfOrderSequenceNumber);
        let b1 = header(1, 0, 3, 2);
        assert!(matches!(s.check(&b1), Ok(SeqCheck::Append)));
        stored(&mut s, &b1, 103);
        // An older epoch is fenced; a newer one must start at 0.
        assert_eq!(
            s.check(&header(1, -1, 5, 1)).expect_err("old epoch").code,
            ResponseError::InvalidProducerEpoch
        );
        assert_eq!(
            s.check(&header(1, 1, 5, 1))
                .expect_err("new epoch at 5")
                .code,
            ResponseError::OutOfOrderSequenceNumber
        );
        assert!(matches!(s.check(&header(1, 1, 0, 1)), Ok(SeqCheck::Append)));
        // Unknown producers and plain batches are accepted.
        assert!(matches!(
            s.check(&header(2, 0, 77, 1)),
            Ok(SeqCheck::Append)
        ));
        assert!(matches!(
            s.check(&header(-1, -1, -1, 1)),
            Ok(SeqCheck::Append)
        ));
    }

    /// A failed batch and the ones queued behind it are forgotten; the partition expects the
    /// failed batch again, and refuses the one after it until then with a retriable error,
    /// not OUT_OF_ORDER_SEQUENCE_NUMBER (which makes librdkafka bump the producer's epoch).
    #[test]
    fn a_failed_batch_is_expected_again() {
        let mut s = PartitionProducers::default();
        stored(&mut s, &header(1, 0, 0, 2), 0);
        let failed = header(1, 0, 2, 2);
        let behind = header(1, 0, 4, 2);
        stored(&mut s, &failed, 2);
        stored(&mut s, &behind, 4);
        s.fail_from(1, 2);
        assert_eq!(
            s.check(&behind).expect_err("after a gap").code,
            ResponseError::RequestTimedOut
        );
        // A batch that is neither the failed one nor behind it is still out of order.
        assert_eq!(
            s.check(&header(1, 0, 1, 1)).expect_err("before").code,
            ResponseError::OutOfOrderSequenceNumber
        );
        assert!(matches!(s.check(&failed), Ok(SeqCheck::Append)));
        // Once the failed batch is taken again, a gap is out of order as ever.
        stored(&mut s, &failed, 2);
        assert_eq!(
            s.check(&header(1, 0, 9, 1)).expect_err("a gap").code,
            ResponseError::OutOfOrderSequenceNumber
        );
        // Also when the failed batch was the first this partition saw of the producer.
        let mut s = PartitionProducers::default();
        stored(&mut s, &failed, 0);
        stored(&mut s, &behind, 2);
        s.fail_from(1, 2);
        assert_eq!(
            s.check(&behind).expect_err("after a gap").code,
            ResponseError::RequestTimedOut
        );
        assert!(matches!(s.check(&failed), Ok(SeqCheck::Append)));
    }

    #[test]
    fn ahead_of_follows_the_wrap() {
        assert!(ahead_of(5, 4));
        assert!(!ahead_of(4, 4));
        assert!(!ahead_of(3, 4));
        assert!(ahead_of(0, i32::MAX));
        assert!(ahead_of(2, i32::MAX - 1));
        assert!(!ahead_of(i32::MAX, 0));
    }

    #[test]
    fn sequences_wrap_at_i32_max() {
        let mut s = PartitionProducers::default();
        let near_end = header(9, 0, i32::MAX - 1, 2);
        assert_eq!(near_end.last_sequence(), i32::MAX);
        stored(&mut s, &near_end, 0);
        assert!(matches!(s.check(&header(9, 0, 0, 1)), Ok(SeqCheck::Append)));
    }

    #[tokio::test]
    async fn producer_ids_are_unique_across_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}", dir.path().join("meta.db").display());
        let first = {
            let ids = ProducerIds::open(MetaStore::connect(&url).await.expect("meta"))
                .await
                .expect("open");
            let a = ids.next().await.expect("id");
            let b = ids.next().await.expect("id");
            assert_ne!(a, b);
            b
        };
        let ids = ProducerIds::open(MetaStore::connect(&url).await.expect("meta"))
            .await
            .expect("reopen");
        assert!(ids.next().await.expect("id") > first);
    }

    #[test]
    fn producer_state_expires_after_producer_id_expiration_ms() {
        let mut state = PartitionProducers::default();
        let day = 86_400_000;
        let a = header(1, 0, 0, 2);
        state.remember(&a, watch::channel(Outcome::Stored(0)).1, 1_000);
        let b = header(2, 0, 0, 1);
        state.remember(&b, watch::channel(Outcome::Stored(2)).1, day);
        assert_eq!(state.len(), 2);
        // Producer 1 is a day old, producer 2 fresh: only 1 goes.
        assert_eq!(state.expire(day + 1_000, day), 1);
        assert_eq!(state.len(), 1);
        // Producer 1 comes back at any sequence: accepted (no state), not out of order.
        assert!(matches!(
            state.check(&header(1, 0, 57, 1)),
            Ok(SeqCheck::Append)
        ));
        // Within a minute of a sweep nothing is swept again, even what has expired meanwhile.
        state.remember(&header(3, 0, 0, 1), watch::channel(Outcome::Stored(3)).1, 0);
        assert_eq!(state.expire(day + 2_000, day), 0);
        assert_eq!(state.expire(day + 61_000, day), 1);
    }
}
