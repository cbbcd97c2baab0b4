//! Producer snapshots: a partition's idempotent-producer state as its durable batches define
//! it, kept up to date by its owner and saved to the metadata store, so a node that takes the
//! partition over (or restarts) reads only the batches after the last snapshot instead of the
//! partition's whole recent log.
//!
//! A [`ProducerImage`] is built only from batches read back from the stream store, never from
//! batches in flight: every batch below its `end` is reflected in it and none at or past it.
//! That is what makes a snapshot safe to load on another node. Data below a stream's durable
//! end never changes (a fenced owner commits nothing), so an image any owner built up to `end`
//! is the same image; a snapshot row is only replaced by one with a later `end`.
//!
//! The owner's [`run`] task catches each produced-to partition's image up from the log cache
//! (the batches were just written, so this reads memory) every
//! `inlet.producer.snapshot.interval.ms` and saves the changed ones in one transaction. A node
//! handing a partition over saves it once more first ([`save_now`]). Loading
//! ([`ProducerImage::rebuild`]) starts at the snapshot, or without one at the stream's start,
//! and reads every batch to the durable end: skipping any could forget a producer whose retry
//! is still on its way, and store that retry twice.

use std::collections::{HashMap, VecDeque};

use base64::Engine;
use inlet_storage::{MetaStore, ReadBatch, StreamId, StreamStore};
use sqlx::Row;

use crate::batch::{self, BatchHeader};
use crate::error::Result;
use crate::Broker;

const MIGRATIONS: &[&str] = &["CREATE TABLE inlet_producer_snapshots (
        stream_id BIGINT PRIMARY KEY,
        end_offset BIGINT NOT NULL,
        state TEXT NOT NULL)"];

/// Batches remembered per producer and partition, as in Kafka.
pub(crate) const REMEMBERED_BATCHES: usize = 5;
/// Bytes asked for per read while rebuilding or catching up.
const READ_BYTES: usize = 4 << 20;
/// The encoding's version byte (1: without transactions; still read).
const VERSION: u8 = 2;
/// How often the snapshot task drops the rows of deleted streams, in task rounds.
pub(crate) const SWEEP_ROUNDS: u64 = 600;

/// One producer's remembered batches: (first sequence, last sequence, base offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ImageEntry {
    pub epoch: i16,
    /// The broker time of its last batch, epoch ms (for `producer.id.expiration.ms`).
    pub last_ms: u64,
    pub batches: VecDeque<(i32, i32, i64)>,
}

/// A partition's producer state up to `end` (see the module doc).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ProducerImage {
    /// Every batch below this offset is reflected, none at or past it.
    pub end: u64,
    pub producers: HashMap<i64, ImageEntry>,
    /// Open and aborted transactions (`txn::partition`).
    pub(crate) txns: crate::txn::LogTxns,
    /// The `end` last saved to the metadata store.
    saved_end: Option<u64>,
}

/// What a rebuild read, for its log line and the tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RebuildStats {
    /// Where the snapshot it started from ended, if one was used.
    pub snapshot_end: Option<u64>,
    pub batches: usize,
    pub bytes: usize,
}

impl ProducerImage {
    /// Takes in one durable batch (the next one after `end`).
    fn apply(&mut self, b: &ReadBatch) {
        self.end = b.end_offset();
        let Some(h) = batch::stored_header(&b.payload) else {
            return;
        };
        if h.is_control() {
            self.fence(h.producer_id, h.producer_epoch);
        } else if h.has_producer_id() {
            self.remember(&h, b.base_offset as i64, b.timestamp_ms);
        }
        self.txns.apply(&h, &b.payload, b.base_offset);
    }

    /// A transaction marker at `epoch`: a newer epoch than the producer's (its coordinator
    /// fenced the producer) starts its sequences over, as the live state's `fence`.
    fn fence(&mut self, producer_id: i64, epoch: i16) {
        if let Some(entry) = self.producers.get_mut(&producer_id) {
            if epoch > entry.epoch {
                entry.epoch = epoch;
                entry.batches.clear();
            }
        }
    }

    /// The same rule as the live state's `remember`: a new epoch starts over; the last
    /// [`REMEMBERED_BATCHES`] are kept.
    fn remember(&mut self, h: &BatchHeader, offset: i64, at_ms: u64) {
        let entry = self
            .producers
            .entry(h.producer_id)
            .or_insert_with(|| ImageEntry {
                epoch: h.producer_epoch,
                last_ms: at_ms,
                batches: VecDeque::new(),
            });
        entry.last_ms = entry.last_ms.max(at_ms);
        if h.producer_epoch != entry.epoch {
            entry.epoch = h.producer_epoch;
            entry.batches.clear();
        }
        entry
            .batches
            .push_back((h.base_sequence, h.last_sequence(), offset));
        while entry.batches.len() > REMEMBERED_BATCHES {
            entry.batches.pop_front();
        }
    }

    /// Drops producers that sent nothing for `expiration_ms` before `now_ms`.
    pub(crate) fn expire(&mut self, now_ms: u64, expiration_ms: u64) {
        self.producers
            .retain(|_, p| now_ms.saturating_sub(p.last_ms) < expiration_ms);
    }

    /// Reads `stream` from `end` (or its start, if retention passed `end`) to its durable end.
    pub(crate) async fn catch_up(
        &mut self,
        store: &StreamStore,
        stream: StreamId,
    ) -> Result<RebuildStats> {
        let mut stats = RebuildStats::default();
        loop {
            let batches = match store.read(stream, self.end, READ_BYTES).await {
                Ok(b) => b,
                // Trimmed by retention: what was before the start is reflected already.
                Err(inlet_storage::Error::OffsetOutOfRange { start, .. }) if start > self.end => {
                    self.end = start;
                    self.txns.trim(start);
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            if batches.is_empty() {
                return Ok(stats);
            }
            stats.batches += batches.len();
            for b in &batches {
                stats.bytes += b.payload.len();
                self.apply(b);
            }
        }
    }

    /// The image of `stream` now: its snapshot, if there is a usable one, then every batch
    /// after it (without one, every batch from the stream's start). Nothing is skipped, however
    /// far behind the snapshot is: a producer seen only in a skipped range would be forgotten,
    /// and a retry of its last batch stored again. The snapshot task keeps that range short
    /// (a snapshot every `inlet.producer.snapshot.interval.ms`, and one at every hand-over).
    pub(crate) async fn rebuild(
        store: &StreamStore,
        snapshots: &Snapshots,
        stream: StreamId,
    ) -> Result<(ProducerImage, RebuildStats)> {
        let info = store.stream(stream)?;
        let mut image = match snapshots.load(stream).await {
            // A snapshot past the durable end cannot be this stream's: ignore it.
            Some(image) if image.end <= info.end_offset => image,
            _ => ProducerImage::default(),
        };
        let snapshot_end = image.saved_end;
        // Below the stream's start there is nothing to read (retention or a trim took it).
        image.end = image.end.max(info.start_offset);
        image.txns.trim(info.start_offset);
        let mut stats = image.catch_up(store, stream).await?;
        stats.snapshot_end = snapshot_end;
        Ok((image, stats))
    }

    /// The snapshot text: base64 of a version byte, a producer count (u32) and per producer
    /// its id (i64), epoch (i16), last time (u64), batch count (u8) and batches (i32 first,
    /// i32 last, i64 offset); then (version 2) the open transactions, a count (u32) and per
    /// transaction its producer id (i64) and first offset (u64), and the aborted ones, a count
    /// (u32) and per transaction producer id (i64), first and last offset (u64); big-endian.
    pub(crate) fn encode(&self) -> String {
        let mut out = Vec::with_capacity(5 + self.producers.len() * 40);
        out.push(VERSION);
        out.extend_from_slice(&(self.producers.len() as u32).to_be_bytes());
        let mut ids: Vec<&i64> = self.producers.keys().collect();
        ids.sort_unstable();
        for id in ids {
            let p = &self.producers[id];
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&p.epoch.to_be_bytes());
            out.extend_from_slice(&p.last_ms.to_be_bytes());
            out.push(p.batches.len() as u8);
            for (first, last, offset) in &p.batches {
                out.extend_from_slice(&first.to_be_bytes());
                out.extend_from_slice(&last.to_be_bytes());
                out.extend_from_slice(&offset.to_be_bytes());
            }
        }
        let mut open: Vec<(&i64, &u64)> = self.txns.open.iter().collect();
        open.sort_unstable();
        out.extend_from_slice(&(open.len() as u32).to_be_bytes());
        for (id, first) in open {
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&first.to_be_bytes());
        }
        out.extend_from_slice(&(self.txns.aborted.len() as u32).to_be_bytes());
        for a in &self.txns.aborted {
            out.extend_from_slice(&a.producer_id.to_be_bytes());
            out.extend_from_slice(&a.first.to_be_bytes());
            out.extend_from_slice(&a.last.to_be_bytes());
        }
        base64::engine::general_purpose::STANDARD.encode(out)
    }

    /// Reads [`ProducerImage::encode`]'s text back, for a snapshot that ended at `end`.
    pub(crate) fn decode(text: &str, end: u64) -> std::result::Result<ProducerImage, String> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| format!("not base64: {e}"))?;
        let mut r = Reader(&bytes);
        let version = r.take::<1>()?[0];
        if version != VERSION && version != 1 {
            return Err(format!("unknown snapshot version {version}"));
        }
        let count = u32::from_be_bytes(r.take()?);
        let mut producers = HashMap::new();
        for _ in 0..count {
            let id = i64::from_be_bytes(r.take()?);
            let epoch = i16::from_be_bytes(r.take()?);
            let last_ms = u64::from_be_bytes(r.take()?);
            let n = r.take::<1>()?[0] as usize;
            if n > REMEMBERED_BATCHES {
                return Err(format!("producer {id} has {n} batches"));
            }
            let mut batches = VecDeque::with_capacity(n);
            for _ in 0..n {
                let first = i32::from_be_bytes(r.take()?);
                let last = i32::from_be_bytes(r.take()?);
                let offset = i64::from_be_bytes(r.take()?);
                if offset < 0 || offset as u64 >= end {
                    return Err(format!("producer {id} has a batch at {offset}, past {end}"));
                }
                batches.push_back((first, last, offset));
            }
            producers.insert(
                id,
                ImageEntry {
                    epoch,
                    last_ms,
                    batches,
                },
            );
        }
        let mut txns = crate::txn::LogTxns::default();
        if version >= 2 {
            for _ in 0..u32::from_be_bytes(r.take()?) {
                let id = i64::from_be_bytes(r.take()?);
                let first = u64::from_be_bytes(r.take()?);
                if first >= end {
                    return Err(format!(
                        "producer {id} opens a transaction at {first}, past {end}"
                    ));
                }
                txns.open.insert(id, first);
            }
            for _ in 0..u32::from_be_bytes(r.take()?) {
                let producer_id = i64::from_be_bytes(r.take()?);
                let first = u64::from_be_bytes(r.take()?);
                let last = u64::from_be_bytes(r.take()?);
                if first > last || last >= end {
                    return Err(format!(
                        "an aborted transaction at {first}..={last}, past {end}"
                    ));
                }
                txns.aborted.push(crate::txn::Aborted {
                    producer_id,
                    first,
                    last,
                });
            }
        }
        if !r.0.is_empty() {
            return Err(format!("{} bytes after the last producer", r.0.len()));
        }
        Ok(ProducerImage {
            end,
            producers,
            txns,
            saved_end: Some(end),
        })
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> std::result::Result<[u8; N], String> {
        let (head, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or_else(|| "the snapshot ends early".to_string())?;
        self.0 = rest;
        Ok(*head)
    }
}

/// The snapshot rows in the metadata store.
#[derive(Debug, Clone)]
pub(crate) struct Snapshots {
    meta: MetaStore,
}

impl Snapshots {
    pub(crate) async fn open(meta: MetaStore) -> Result<Snapshots> {
        meta.migrate("ingest.producer_snapshots", MIGRATIONS)
            .await?;
        Ok(Snapshots { meta })
    }

    /// The last snapshot of `stream`; an unreadable one is logged and ignored (the rebuild
    /// then reads the log, as without one).
    pub(crate) async fn load(&self, stream: StreamId) -> Option<ProducerImage> {
        let row = sqlx::query(
            "SELECT end_offset, state FROM inlet_producer_snapshots WHERE stream_id = $1",
        )
        .bind(stream as i64)
        .fetch_optional(self.meta.pool())
        .await;
        let row = match row {
            Ok(row) => row?,
            Err(e) => {
                tracing::warn!(stream, error = %e, "could not read the producer snapshot; rebuilding from the log");
                return None;
            }
        };
        let (end, text): (i64, String) =
            (row.try_get("end_offset").ok()?, row.try_get("state").ok()?);
        match ProducerImage::decode(&text, end.max(0) as u64) {
            Ok(image) => Some(image),
            Err(e) => {
                tracing::warn!(stream, error = %e, "ignoring an unreadable producer snapshot");
                None
            }
        }
    }

    /// Saves images whose `end` moved since they were last saved, in one transaction. A row
    /// is only replaced by a later `end` (another owner may have saved one meanwhile).
    pub(crate) async fn save(
        &self,
        images: &mut [(StreamId, &mut ProducerImage)],
    ) -> Result<usize> {
        let changed: Vec<usize> = (0..images.len())
            .filter(|&i| images[i].1.saved_end != Some(images[i].1.end))
            .collect();
        if changed.is_empty() {
            return Ok(0);
        }
        // Bounded: the caller holds the partitions' images (and so their produce) meanwhile.
        inlet_storage::bounded(async {
            let mut tx = self.meta.pool().begin().await?;
            for &i in &changed {
                let (stream, image) = (images[i].0, &images[i].1);
                sqlx::query(
                    "INSERT INTO inlet_producer_snapshots (stream_id, end_offset, state)
                     VALUES ($1, $2, $3)
                     ON CONFLICT (stream_id) DO UPDATE
                     SET end_offset = excluded.end_offset, state = excluded.state
                     WHERE inlet_producer_snapshots.end_offset <= excluded.end_offset",
                )
                .bind(stream as i64)
                .bind(image.end as i64)
                .bind(image.encode())
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(())
        })
        .await?;
        for &i in &changed {
            images[i].1.saved_end = Some(images[i].1.end);
        }
        Ok(changed.len())
    }

    /// Drops the snapshots of deleted streams.
    pub(crate) async fn sweep(&self) -> Result<u64> {
        let done = sqlx::query(
            "DELETE FROM inlet_producer_snapshots WHERE stream_id NOT IN
             (SELECT stream_id FROM inlet_streams WHERE deleted_ms IS NULL)",
        )
        .execute(self.meta.pool())
        .await
        .map_err(inlet_storage::Error::from)?;
        Ok(done.rows_affected())
    }
}

/// Catches up and saves, in one transaction, the images of the partitions `wanted` picks that
/// this node owns and has produced to.
pub(crate) async fn save_images(
    broker: &Broker,
    wanted: impl Fn(StreamId) -> bool,
) -> Result<usize> {
    let expiration = broker.config().producer_id_expiration_ms;
    let now = broker.clock.now_ms();
    let mut guards = Vec::new();
    for topic in broker.topics.list() {
        for partition in topic.partitions.iter().filter(|p| wanted(p.stream)) {
            let mut image = partition.image.clone().lock_owned().await;
            let stream = partition.stream;
            let Some((epoch, current)) = image.as_mut() else {
                continue;
            };
            // A partition that moved away (or whose image is from an earlier ownership) is
            // imaged again when it is next produced to here.
            if broker.store.owned_epoch(stream) != Some(*epoch) {
                *image = None;
                continue;
            }
            if let Err(e) = current.catch_up(&broker.store, stream).await {
                tracing::debug!(stream, error = %e, "could not catch a producer image up");
                continue;
            }
            current.expire(now, expiration);
            guards.push((stream, image));
        }
    }
    let mut images: Vec<(StreamId, &mut ProducerImage)> = guards
        .iter_mut()
        .filter_map(|(stream, g)| g.as_mut().map(|(_, image)| (*stream, image)))
        .collect();
    broker.snapshots.save(&mut images).await
}

/// Saves the images of `streams` now, caught up to the durable end (before the node hands
/// those partitions over, so their next owner reads nothing).
pub async fn save_now(broker: &Broker, streams: &[StreamId]) {
    if streams.is_empty() {
        return;
    }
    let streams: std::collections::HashSet<StreamId> = streams.iter().copied().collect();
    if let Err(e) = save_images(broker, |s| streams.contains(&s)).await {
        tracing::warn!(error = %e, "could not save the producer snapshots before handing over");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(epoch: i16, last_ms: u64, batches: &[(i32, i32, i64)]) -> ImageEntry {
        ImageEntry {
            epoch,
            last_ms,
            batches: batches.iter().copied().collect(),
        }
    }

    #[test]
    fn snapshots_round_trip_and_refuse_damage() {
        let mut image = ProducerImage {
            end: 100,
            ..ProducerImage::default()
        };
        image
            .producers
            .insert(7, entry(2, 1_000, &[(0, 4, 10), (5, 9, 20)]));
        image.producers.insert(9, entry(0, 5, &[]));
        image.txns.open.insert(9, 40);
        image.txns.aborted.push(crate::txn::Aborted {
            producer_id: 7,
            first: 12,
            last: 30,
        });
        let text = image.encode();
        let back = ProducerImage::decode(&text, 100).expect("decodes");
        assert_eq!(back.producers, image.producers);
        assert_eq!(back.txns, image.txns);
        assert_eq!(back.end, 100);

        // A batch at or past the snapshot's end cannot be in it.
        assert!(ProducerImage::decode(&text, 20)
            .expect_err("past the end")
            .contains("past 20"));
        let raw = base64::engine::general_purpose::STANDARD
            .decode(&text)
            .expect("base64");
        for cut in 0..raw.len() {
            let short = base64::engine::general_purpose::STANDARD.encode(&raw[..cut]);
            assert!(ProducerImage::decode(&short, 100).is_err(), "cut at {cut}");
        }
        let mut long = raw.clone();
        long.push(0);
        let long = base64::engine::general_purpose::STANDARD.encode(&long);
        assert!(ProducerImage::decode(&long, 100)
            .expect_err("trailing")
            .contains("after the last"));
        let mut version = raw;
        version[0] = 9;
        let version = base64::engine::general_purpose::STANDARD.encode(&version);
        assert!(ProducerImage::decode(&version, 100)
            .expect_err("version")
            .contains("version 9"));
        assert!(ProducerImage::decode("not base64!", 100).is_err());
    }

    /// Appends one idempotent record batch of `producer` at `seq` (one record).
    async fn append(store: &StreamStore, stream: StreamId, producer: i64, seq: i32) -> u64 {
        let batch = inlet_test_support::wire::record_batch(
            &[Some(bytes::Bytes::from_static(b"v"))],
            producer,
            0,
            seq,
            kafka_protocol::records::Compression::None,
        );
        let options = inlet_storage::AppendOptions {
            write_base_offset: true,
            ..inlet_storage::AppendOptions::default()
        };
        store
            .append_with(stream, batch, 1, options)
            .await
            .expect("append")
    }

    #[tokio::test]
    async fn a_rebuild_reads_only_past_the_snapshot_and_keeps_what_retention_dropped() {
        let dir = tempfile::tempdir().expect("dir");
        let store = StreamStore::builder(dir.path().join("wal"))
            .background_tasks(false)
            .open()
            .await
            .expect("store");
        let snapshots = Snapshots::open(store.meta().clone())
            .await
            .expect("snapshots");
        let s = store.create_stream("kafka/t/0").await.expect("stream").id;
        for seq in 0..10 {
            assert_eq!(append(&store, s, 1, seq).await, seq as u64);
        }

        // No snapshot yet: the log is read; the last five batches are remembered.
        let (mut image, stats) = ProducerImage::rebuild(&store, &snapshots, s)
            .await
            .expect("rebuild");
        assert_eq!(
            (stats.snapshot_end, stats.batches, image.end),
            (None, 10, 10)
        );
        let kept: Vec<_> = image.producers[&1].batches.iter().copied().collect();
        assert_eq!(kept, (5..10).map(|q| (q, q, q as i64)).collect::<Vec<_>>());
        assert_eq!(
            snapshots.save(&mut [(s, &mut image)]).await.expect("save"),
            1
        );
        // Unchanged since: nothing to write.
        assert_eq!(
            snapshots.save(&mut [(s, &mut image)]).await.expect("save"),
            0
        );

        // Three more batches: a rebuild reads only those, and ends as a full replay does.
        append(&store, s, 1, 10).await;
        append(&store, s, 2, 0).await;
        append(&store, s, 2, 1).await;
        let (from_snapshot, stats) = ProducerImage::rebuild(&store, &snapshots, s)
            .await
            .expect("rebuild");
        assert_eq!((stats.snapshot_end, stats.batches), (Some(10), 3));
        let mut full = ProducerImage::default();
        full.catch_up(&store, s).await.expect("full replay");
        assert_eq!(from_snapshot.producers, full.producers);
        assert_eq!(from_snapshot.end, 13);

        // Retention drops every batch: the live state built from the snapshot still knows
        // the last ones, so a retry of one is answered as a duplicate, not stored again.
        let mut latest = from_snapshot;
        snapshots.save(&mut [(s, &mut latest)]).await.expect("save");
        store.trim(s, 13).await.expect("trim");
        let mut live = crate::producers::PartitionProducers::default();
        live.ensure_loaded(&store, &snapshots, s)
            .await
            .expect("loaded");
        let retry = crate::batch::BatchHeader {
            last_offset_delta: 0,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: 2,
            producer_epoch: 0,
            base_sequence: 1,
            record_count: 1,
            attributes: 0,
        };
        match live.check(&retry).expect("checked") {
            crate::producers::SeqCheck::Duplicate(outcome) => {
                assert_eq!(*outcome.borrow(), crate::producers::Outcome::Stored(12));
            }
            other => panic!("a retry after retention was not recognized: {other:?}"),
        }

        // A snapshot far behind the end (its saves failed for a while, or its owner was slow):
        // a producer seen only just after it, then 300,000 offsets of others (two batches of
        // 150,000 records, one stored record each, the offsets claimed), is still remembered,
        // since the rebuild reads every batch after the snapshot.
        let quiet = append(&store, s, 3, 0).await;
        let filler = inlet_test_support::wire::record_batch(
            &[Some(bytes::Bytes::from_static(b"f"))],
            -1,
            -1,
            -1,
            kafka_protocol::records::Compression::None,
        );
        for _ in 0..2 {
            let options = inlet_storage::AppendOptions {
                write_base_offset: true,
                ..inlet_storage::AppendOptions::default()
            };
            store
                .append_with(s, filler.clone(), 150_000, options)
                .await
                .expect("filler");
        }
        let (far, stats) = ProducerImage::rebuild(&store, &snapshots, s)
            .await
            .expect("rebuild");
        assert_eq!(stats.snapshot_end, Some(13));
        assert_eq!(far.end, quiet + 1 + 300_000);
        let remembered = far.producers.get(&3).map(|p| p.batches.clone());
        assert_eq!(
            remembered,
            Some([(0, 0, quiet as i64)].into()),
            "producer 3, 300,000 offsets before the end, was forgotten"
        );

        // An older snapshot (a former owner's, saved late) does not replace a newer one.
        let mut stale = image;
        stale.saved_end = None;
        assert_eq!(
            snapshots.save(&mut [(s, &mut stale)]).await.expect("save"),
            1
        );
        assert_eq!(snapshots.load(s).await.expect("a snapshot").end, 13);
        store.close().await;
    }
}
