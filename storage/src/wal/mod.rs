//! The write-ahead log: where an append becomes durable before it is acknowledged.
//!
//! The WAL is a directory of segment files named by the WAL position they start at. One writer
//! thread owns the active segment and runs *group commit*: it takes every request waiting in its
//! queue (up to `wal_max_group_bytes`), encodes them into one buffer in queue order, writes the
//! buffer with a single `write` and makes it durable with a single `fdatasync`, then completes
//! the requests in WAL order. Concurrent appends therefore share one sync.
//!
//! Invariants:
//! - WAL positions are dense: a segment's entries end exactly where the next segment starts.
//! - A request is completed `Ok` only after the sync that covers it returned; the durable
//!   position ([`Wal::durable_position`]) moves only after the requests below it completed.
//! - After a failed write or sync nothing more is written (the outcome on disk is unknown); every
//!   later request fails with [`Error::WalFailed`] and the node must restart and replay.
//! - Replay of a segment stops at the first entry that is torn, fails its CRC, or is stale (left
//!   from the file's previous life: the CRC covers the entry's position). That point must be
//!   where the next segment starts; anywhere else in a sealed segment it is corruption, reported
//!   rather than skipped. In the last segment it is the end of the log.
//! - Segments leave only through [`Segments::trim`], which the store calls after everything
//!   below the trim position is committed in object storage; the active segment never does.
//!
//! Trimmed segment files are *recycled* rather than deleted: renamed to `*.free` and reused at
//! the next roll, so the writer overwrites already-allocated blocks. Its `fdatasync` then
//! flushes data only, without an ext4 journal commit, and it never waits behind the freeing
//! (and discard) of a deleted file's blocks — which measurably stalled appends for tens of
//! milliseconds at every trim (see docs/benchmarks.md).

pub mod format;

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::mpsc;

use crate::error::{Error, Result};
use format::{Decoded, Entry, SEGMENT_HEADER_LEN};

/// What the writer tells a request once its group is durable.
#[derive(Debug, Clone)]
pub(crate) struct Written {
    /// The whole group's encoded bytes; the request's entry is `group[range]`.
    pub group: Bytes,
    pub range: std::ops::Range<usize>,
    /// WAL position just past this entry.
    pub wal_end: u64,
}

/// A request the WAL writer serves. `encode` runs on the writer thread in WAL order, so it is
/// where a request may take its place in a sequence (the store assigns offsets there).
pub(crate) trait WalRequest: Send + 'static {
    /// Encoded size, for group sizing.
    fn encoded_len(&self) -> usize;
    /// Appends this request's entry, at WAL position `position`, to `buf`. Returning an error
    /// fails this request alone and writes nothing for it.
    fn encode(&mut self, buf: &mut Vec<u8>, position: u64) -> Result<()>;
    /// What [`WalRequest::complete`] leaves to hand to the requester.
    type Ack: Send;
    /// Records the outcome (the entry is durable, or it failed and is not in the WAL) where
    /// readers see it. Runs in WAL order; the durable position moves past this entry right
    /// after, and only then is the returned ack sent with [`WalRequest::ack`].
    fn complete(self, result: Result<Written>) -> Self::Ack;
    /// Tells the requester.
    fn ack(ack: Self::Ack);
}

/// One entry found by replay, with the WAL position just past it.
#[derive(Debug)]
pub(crate) struct Replayed {
    pub entry: Entry,
    pub wal_end: u64,
}

/// Recycled segment files kept for reuse; trimming beyond this many deletes files.
const MAX_FREE_SEGMENTS: usize = 4;

#[derive(Debug)]
pub(crate) struct Segments {
    dir: PathBuf,
    /// start position → path, the last one active.
    files: Mutex<BTreeMap<u64, PathBuf>>,
    /// Recycled files (`*.free`) ready for the next roll.
    free: Mutex<Vec<PathBuf>>,
}

impl Segments {
    /// Retires the sealed segments that lie wholly below `position` (recycled, or deleted when
    /// enough are free); returns how many. Blocking file-system work.
    pub(crate) fn trim(&self, position: u64) -> Result<usize> {
        let victims: Vec<(u64, PathBuf)> = {
            let files = self.files.lock();
            let starts: Vec<u64> = files.keys().copied().collect();
            starts
                .windows(2)
                .filter(|w| w[1] <= position)
                .map(|w| (w[0], files[&w[0]].clone()))
                .collect()
        };
        for (start, path) in &victims {
            let recycle = self.free.lock().len() < MAX_FREE_SEGMENTS;
            if recycle {
                let free = self.dir.join(format!("{start:020}.free"));
                std::fs::rename(path, &free).map_err(|e| Error::wal_io(path, e))?;
                self.free.lock().push(free);
            } else {
                match std::fs::remove_file(path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Error::wal_io(path, e)),
                }
            }
            self.files.lock().remove(start);
        }
        if !victims.is_empty() {
            sync_dir(&self.dir)?;
        }
        Ok(victims.len())
    }
}

/// Counters of the WAL writer.
#[derive(Debug, Default)]
pub(crate) struct WalCounters {
    /// Group commits (one write and one `fdatasync` each).
    pub syncs: AtomicU64,
    /// Time spent writing and syncing, in microseconds.
    pub sync_micros: AtomicU64,
    /// Longest single write + sync, in microseconds.
    pub max_sync_micros: AtomicU64,
    pub bytes: AtomicU64,
    /// Why the writer stopped taking appends (a failed write or sync), once it has.
    pub failed: parking_lot::Mutex<Option<String>>,
}

/// The write-ahead log.
pub(crate) struct Wal<R: WalRequest> {
    tx: Option<mpsc::Sender<R>>,
    durable: Arc<AtomicU64>,
    counters: Arc<WalCounters>,
    segments: Arc<Segments>,
    thread: Option<JoinHandle<()>>,
}

fn segment_path(dir: &Path, start: u64) -> PathBuf {
    dir.join(format!("{start:020}.wal"))
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::wal_io(dir, e))
}

/// Lists the segment files in `dir` by start position.
fn list_segments(dir: &Path) -> Result<BTreeMap<u64, PathBuf>> {
    let mut out = BTreeMap::new();
    for item in std::fs::read_dir(dir).map_err(|e| Error::wal_io(dir, e))? {
        let item = item.map_err(|e| Error::wal_io(dir, e))?;
        let name = item.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".wal")) else {
            continue;
        };
        if let Ok(start) = stem.parse::<u64>() {
            out.insert(start, item.path());
        }
    }
    Ok(out)
}

/// Lists the recycled segment files in `dir`.
fn list_free(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for item in std::fs::read_dir(dir).map_err(|e| Error::wal_io(dir, e))? {
        let item = item.map_err(|e| Error::wal_io(dir, e))?;
        if item
            .file_name()
            .to_str()
            .is_some_and(|n| n.ends_with(".free"))
        {
            out.push(item.path());
        }
    }
    out.sort();
    Ok(out)
}

/// Replays every segment in `dir` in order, calling `apply` for each valid entry, and returns
/// the WAL position after the last valid entry. Truncates a torn tail of the last segment.
/// A replay of more than one segment logs its progress (at most every 5 s) and its end.
#[allow(clippy::disallowed_methods)] // Instant: only the progress lines' spacing is measured
pub(crate) fn replay(dir: &Path, mut apply: impl FnMut(Replayed) -> Result<()>) -> Result<u64> {
    std::fs::create_dir_all(dir).map_err(|e| Error::wal_io(dir, e))?;
    let segments: Vec<(u64, PathBuf)> = list_segments(dir)?.into_iter().collect();
    let started = std::time::Instant::now();
    let mut last_progress = started;
    let mut replayed_bytes = 0u64;
    let progress = segments.len() > 1;
    if progress {
        tracing::info!(segments = segments.len(), "replaying the WAL");
    }
    let mut end = 0;
    for (i, (start, path)) in segments.iter().enumerate() {
        if progress && last_progress.elapsed() >= std::time::Duration::from_secs(5) {
            last_progress = std::time::Instant::now();
            tracing::info!(
                segment = i + 1,
                of = segments.len(),
                mib = replayed_bytes >> 20,
                "replaying the WAL"
            );
        }
        let start = *start;
        let next_start = segments.get(i + 1).map(|(s, _)| *s);
        let data = Bytes::from(std::fs::read(path).map_err(|e| Error::wal_io(path, e))?);
        replayed_bytes += data.len() as u64;
        let location = || path.display().to_string();
        let problem = match format::decode_segment_header(&data) {
            Ok(s) if s == start => None,
            Ok(s) => Some(format!("header says start {s}, name says {start}")),
            Err(detail) => Some(detail.to_string()),
        };
        if let Some(detail) = problem {
            // The newest segment's header is written (and synced with the first group in it)
            // before any entry, so a torn header there means nothing in the segment was ever
            // acknowledged: a roll cut short by a crash or power cut (a fresh file, or a
            // recycled one whose header rewrite did not land). It replays as an empty segment
            // where the previous one ended. Anywhere else it is corruption.
            if next_start.is_none() && (i == 0 || start == end) {
                tracing::warn!(segment = %location(), detail, "the newest WAL segment has a torn header; it holds nothing acknowledged and starts again empty");
                truncate_to_header(path, start)?;
                end = start;
                continue;
            }
            return Err(Error::corrupt(location(), detail));
        }
        if i > 0 && start != end {
            return Err(Error::corrupt(
                location(),
                format!("segment starts at {start} but the previous one ends at {end}"),
            ));
        }
        let mut at = SEGMENT_HEADER_LEN;
        let mut position = start;
        loop {
            match format::decode_entry(&data[at..], position) {
                Decoded::Entry {
                    header,
                    payload,
                    len,
                } => {
                    position += len as u64;
                    let entry = Entry {
                        stream_id: header.stream_id,
                        base_offset: header.base_offset,
                        record_count: header.record_count,
                        timestamp_ms: header.timestamp_ms,
                        payload: data.slice(at + payload.start..at + payload.end),
                    };
                    apply(Replayed {
                        entry,
                        wal_end: position,
                    })?;
                    at += len;
                }
                Decoded::Incomplete if at == data.len() => break,
                other => {
                    if next_start.is_none() && at < data.len() {
                        tracing::info!(
                            segment = %path.display(),
                            at,
                            reason = ?other,
                            "end of the WAL (a torn, stale or zeroed tail holds no acknowledged data)"
                        );
                    }
                    break;
                }
            }
        }
        end = position;
        if let Some(next) = next_start {
            if next != end {
                return Err(Error::corrupt(
                    location(),
                    format!(
                        "sealed segment ends at WAL position {end} (damaged entry at byte {at}) but the next segment starts at {next}"
                    ),
                ));
            }
        }
    }
    if progress {
        tracing::info!(
            segments = segments.len(),
            mib = replayed_bytes >> 20,
            seconds = started.elapsed().as_secs_f64(),
            "WAL replayed"
        );
    }
    Ok(end)
}

fn truncate_to_header(path: &Path, start: u64) -> Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .map_err(|e| Error::wal_io(path, e))?;
    file.write_all(&format::encode_segment_header(start))
        .and_then(|_| file.sync_all())
        .map_err(|e| Error::wal_io(path, e))
}

/// Opens the segment starting at `start` for writing: a recycled file if one is free (its
/// header rewritten and synced before it takes the segment's name), else a new file.
fn open_segment(segments: &Segments, start: u64) -> Result<File> {
    let dir = &segments.dir;
    let recycled = segments.free.lock().pop();
    if let Some(free) = recycled {
        let path = segment_path(dir, start);
        let file = OpenOptions::new()
            .write(true)
            .open(&free)
            .map_err(|e| Error::wal_io(&free, e))?;
        use std::os::unix::fs::FileExt;
        file.write_all_at(&format::encode_segment_header(start), 0)
            .and_then(|_| file.sync_data())
            .map_err(|e| Error::wal_io(&free, e))?;
        std::fs::rename(&free, &path).map_err(|e| Error::wal_io(&path, e))?;
        sync_dir(dir)?;
        return Ok(file);
    }
    create_segment(dir, start)
}

fn create_segment(dir: &Path, start: u64) -> Result<File> {
    let path = segment_path(dir, start);
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .map_err(|e| Error::wal_io(&path, e))?;
    file.write_all(&format::encode_segment_header(start))
        .and_then(|_| file.sync_all())
        .map_err(|e| Error::wal_io(&path, e))?;
    sync_dir(dir)?;
    Ok(file)
}

impl<R: WalRequest> Wal<R> {
    /// Starts the writer at WAL position `start` (the end found by [`replay`]) in a new segment.
    pub(crate) fn start(
        dir: &Path,
        start: u64,
        segment_bytes: u64,
        max_group_bytes: u64,
        queue_len: usize,
    ) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| Error::wal_io(dir, e))?;
        let mut files = list_segments(dir)?;
        let segments = Arc::new(Segments {
            dir: dir.to_path_buf(),
            files: Mutex::new(BTreeMap::new()),
            free: Mutex::new(list_free(dir)?),
        });
        // An existing segment at `start` can only be empty (replay ended there); recreate it.
        if let Some(empty) = files.remove(&start) {
            std::fs::remove_file(&empty).map_err(|e| Error::wal_io(&empty, e))?;
        }
        let file = open_segment(&segments, start)?;
        files.insert(start, segment_path(dir, start));
        *segments.files.lock() = files;
        let durable = Arc::new(AtomicU64::new(start));
        let (tx, rx) = mpsc::channel(queue_len);
        let counters = Arc::new(WalCounters::default());
        let writer = Writer {
            counters: counters.clone(),
            segments: segments.clone(),
            file,
            segment_start: start,
            position: start,
            segment_bytes,
            max_group_bytes: max_group_bytes as usize,
            durable: durable.clone(),
            failed: None,
        };
        let thread = std::thread::Builder::new()
            .name("inlet-wal".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| Error::wal_io(dir, e))?;
        Ok(Wal {
            tx: Some(tx),
            durable,
            segments,
            thread: Some(thread),
            counters,
        })
    }

    pub(crate) fn counters(&self) -> &WalCounters {
        &self.counters
    }

    /// Why the WAL refuses appends, once a write or sync has failed.
    pub(crate) fn failure(&self) -> Option<String> {
        self.counters.failed.lock().clone()
    }

    /// Queues a request; waits while the queue is full.
    pub(crate) async fn submit(&self, request: R) -> std::result::Result<(), R> {
        match &self.tx {
            Some(tx) => tx.send(request).await.map_err(|e| e.0),
            None => Err(request),
        }
    }

    /// The WAL position below which every entry is durable and its request completed.
    pub(crate) fn durable_position(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// A handle to the segment list for trimming from a blocking thread.
    pub(crate) fn segments(&self) -> Arc<Segments> {
        self.segments.clone()
    }

    /// Number of segment files, the active one included.
    pub(crate) fn segment_count(&self) -> usize {
        self.segments.files.lock().len()
    }

    /// Stops taking requests, lets the writer finish what is queued, and waits for it.
    pub(crate) fn close(&mut self) {
        self.tx = None;
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("WAL writer thread panicked");
            }
        }
    }
}

impl<R: WalRequest> Drop for Wal<R> {
    fn drop(&mut self) {
        self.close();
    }
}

struct Writer {
    counters: Arc<WalCounters>,
    segments: Arc<Segments>,
    file: File,
    segment_start: u64,
    position: u64,
    segment_bytes: u64,
    max_group_bytes: usize,
    durable: Arc<AtomicU64>,
    failed: Option<String>,
}

impl Writer {
    fn run<R: WalRequest>(mut self, mut rx: mpsc::Receiver<R>) {
        let mut group: Vec<R> = Vec::new();
        while let Some(first) = rx.blocking_recv() {
            let mut bytes = first.encoded_len();
            group.push(first);
            while bytes < self.max_group_bytes {
                match rx.try_recv() {
                    Ok(next) => {
                        bytes += next.encoded_len();
                        group.push(next);
                    }
                    Err(_) => break,
                }
            }
            self.commit_group(std::mem::take(&mut group), bytes);
        }
        if self.failed.is_none() {
            if let Err(e) = self.file.sync_data() {
                tracing::error!(error = %e, "final WAL sync failed");
            }
        }
    }

    fn commit_group<R: WalRequest>(&mut self, group: Vec<R>, size_hint: usize) {
        if let Some(reason) = &self.failed {
            for request in group {
                R::ack(request.complete(Err(Error::WalFailed(reason.clone()))));
            }
            return;
        }
        let mut buf = Vec::with_capacity(size_hint);
        let mut encoded: Vec<(R, std::ops::Range<usize>)> = Vec::with_capacity(group.len());
        for mut request in group {
            let start = buf.len();
            match request.encode(&mut buf, self.position + start as u64) {
                Ok(()) => encoded.push((request, start..buf.len())),
                Err(e) => {
                    buf.truncate(start);
                    R::ack(request.complete(Err(e)));
                }
            }
        }
        if encoded.is_empty() {
            return;
        }
        if let Err(e) = self.write_durably(&buf) {
            let reason = e.to_string();
            tracing::error!(error = %reason, "WAL write failed; refusing further appends");
            *self.counters.failed.lock() = Some(reason.clone());
            self.failed = Some(reason);
            for (request, _) in encoded {
                R::ack(request.complete(Err(e.clone_shallow())));
            }
            return;
        }
        let group_start = self.position;
        self.position += buf.len() as u64;
        let group = Bytes::from(buf);
        let mut acks = Vec::with_capacity(encoded.len());
        for (request, range) in encoded {
            let wal_end = group_start + range.end as u64;
            acks.push(request.complete(Ok(Written {
                group: group.clone(),
                range,
                wal_end,
            })));
            // Everything below `wal_end` is now visible to readers and the uploader.
            self.durable.store(wal_end, Ordering::Release);
        }
        self.durable.store(self.position, Ordering::Release);
        for ack in acks {
            R::ack(ack);
        }
    }

    fn write_durably(&mut self, buf: &[u8]) -> Result<()> {
        let started = tokio::time::Instant::now();
        let in_segment = self.position - self.segment_start;
        if in_segment > 0 && in_segment + buf.len() as u64 > self.segment_bytes {
            // Everything in the current segment is already synced: roll.
            self.file = open_segment(&self.segments, self.position)?;
            self.segment_start = self.position;
            self.segments.files.lock().insert(
                self.position,
                segment_path(&self.segments.dir, self.position),
            );
        }
        let path = || segment_path(&self.segments.dir, self.segment_start);
        // Positioned writes: a recycled file is longer than what this segment holds so far.
        use std::os::unix::fs::FileExt;
        let at = SEGMENT_HEADER_LEN as u64 + self.position - self.segment_start;
        self.file
            .write_all_at(buf, at)
            .map_err(|e| Error::wal_io(&path(), e))?;
        let written = started.elapsed();
        self.file
            .sync_data()
            .map_err(|e| Error::wal_io(&path(), e))?;
        let total = started.elapsed();
        let micros = total.as_micros() as u64;
        self.counters.syncs.fetch_add(1, Ordering::Relaxed);
        self.counters
            .sync_micros
            .fetch_add(micros, Ordering::Relaxed);
        self.counters
            .max_sync_micros
            .fetch_max(micros, Ordering::Relaxed);
        self.counters
            .bytes
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        if total > std::time::Duration::from_millis(10) {
            tracing::debug!(bytes = buf.len(), ?written, ?total, "slow WAL write");
        }
        Ok(())
    }
}

impl Error {
    /// A copy for fanning one failure out to many waiters (I/O errors are not `Clone`).
    fn clone_shallow(&self) -> Error {
        Error::WalFailed(self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use format::EntryHeader;
    use proptest::prelude::*;

    struct TestRequest {
        header: EntryHeader,
        payload: Vec<u8>,
        done: std::sync::mpsc::Sender<Result<u64>>,
    }

    impl WalRequest for TestRequest {
        type Ack = (std::sync::mpsc::Sender<Result<u64>>, Result<u64>);

        fn encoded_len(&self) -> usize {
            format::entry_len(self.payload.len())
        }

        fn encode(&mut self, buf: &mut Vec<u8>, position: u64) -> Result<()> {
            format::encode_entry(buf, position, &self.header, &self.payload, |_| {});
            Ok(())
        }

        fn complete(self, result: Result<Written>) -> Self::Ack {
            (self.done, result.map(|w| w.wal_end))
        }

        fn ack((done, result): Self::Ack) {
            let _ = done.send(result);
        }
    }

    /// Writes `count` entries through a real writer (tiny segments, so it rolls) and returns
    /// the payloads in WAL order.
    fn write_log(dir: &Path, start: u64, count: usize, first: u64) -> Vec<Vec<u8>> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let mut wal: Wal<TestRequest> = Wal::start(dir, start, 300, 1 << 20, 16).expect("start");
        let mut payloads = Vec::new();
        for i in 0..count {
            let payload = format!("entry-{}", first + i as u64)
                .into_bytes()
                .repeat(i % 7 + 1);
            let (done, wait) = std::sync::mpsc::channel();
            let request = TestRequest {
                header: EntryHeader {
                    stream_id: 1,
                    base_offset: first + i as u64,
                    record_count: 1,
                    timestamp_ms: 0,
                },
                payload: payload.clone(),
                done,
            };
            assert!(rt.block_on(wal.submit(request)).is_ok());
            wait.recv().expect("completed").expect("durable");
            payloads.push(payload);
        }
        wal.close();
        payloads
    }

    fn replay_payloads(dir: &Path) -> (Vec<Vec<u8>>, u64) {
        let mut got = Vec::new();
        let end = replay(dir, |r| {
            got.push(r.entry.payload.to_vec());
            Ok(())
        })
        .expect("replay");
        (got, end)
    }

    #[test]
    fn rolls_replays_and_trims() {
        let dir = tempfile::tempdir().expect("tempdir");
        let written = write_log(dir.path(), 0, 40, 0);
        let (got, end) = replay_payloads(dir.path());
        assert_eq!(got, written);
        let segments = list_segments(dir.path()).expect("list");
        assert!(
            segments.len() > 3,
            "rolled into {} segments",
            segments.len()
        );
        // Continue after replay, then trim everything below the end of the first log.
        let more = write_log(dir.path(), end, 5, 40);
        let (got, _) = replay_payloads(dir.path());
        assert_eq!(got, [written, more.clone()].concat());
        let wal: Wal<TestRequest> = Wal::start(
            dir.path(),
            replay(dir.path(), |_| Ok(())).expect("replay"),
            300,
            1 << 20,
            4,
        )
        .expect("start");
        let trimmed = wal.segments().trim(end).expect("trim");
        assert!(trimmed >= 3, "trimmed {trimmed}");
        drop(wal);
        let (got, end2) = replay_payloads(dir.path());
        assert!(got.ends_with(&more), "entries above the trim point survive");
        let kept = got.clone();
        // Trimmed files were recycled; writing on reuses them, and their stale entries (written
        // at other positions) never come back.
        let free = list_free(dir.path()).expect("free").len();
        assert!(
            free >= MAX_FREE_SEGMENTS.min(trimmed),
            "{free} free files after trimming {trimmed}"
        );
        let newest = write_log(dir.path(), end2, 30, 100);
        assert!(
            list_free(dir.path()).expect("free").len() < free,
            "free files were reused"
        );
        let (got, _) = replay_payloads(dir.path());
        assert_eq!(got, [kept, newest].concat());
    }

    /// A crash while rolling leaves the newest segment with a torn header (zeros, a stale
    /// header of a recycled file, or half a header): replay treats it as empty and the log is
    /// intact up to it; the WAL then writes on.
    #[test]
    fn a_torn_header_of_the_newest_segment_replays_as_empty() {
        for damage in 0..4 {
            let dir = tempfile::tempdir().expect("tempdir");
            let written = write_log(dir.path(), 0, 12, 0);
            let (_, end) = replay_payloads(dir.path());
            // The writer rolled at `end`: a file named for it, its header torn.
            let newest_real = segment_path(dir.path(), end);
            let mut header = format::encode_segment_header(end).to_vec();
            match damage {
                0 => header = vec![0; SEGMENT_HEADER_LEN + 100],
                1 => header = format::encode_segment_header(end + 4096).to_vec(),
                2 => header.truncate(SEGMENT_HEADER_LEN / 2),
                _ => header[20] ^= 0xff,
            }
            std::fs::write(&newest_real, &header).expect("torn segment");
            let (got, end2) = replay_payloads(dir.path());
            assert_eq!(got, written, "damage {damage}");
            assert_eq!(end2, end, "damage {damage}");
            let more = write_log(dir.path(), end2, 3, 12);
            let (got, _) = replay_payloads(dir.path());
            assert_eq!(got, [written.clone(), more].concat(), "damage {damage}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(40))]

        /// Truncating the last segment anywhere, or flipping any bit in it, replays to a clean
        /// prefix of what was written; the damaged tail is cut off, and a second replay agrees.
        #[test]
        fn damaged_tail_replays_to_a_prefix(count in 1usize..30, cut in any::<prop::sample::Index>(), flip in any::<Option<(prop::sample::Index, u8)>>()) {
            let dir = tempfile::tempdir().expect("tempdir");
            let written = write_log(dir.path(), 0, count, 0);
            let segments = list_segments(dir.path()).expect("list");
            // The writer's last (active) segment may be empty; damage the last one with data.
            let (_, path) = segments
                .iter()
                .rev()
                .find(|(_, p)| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0) > SEGMENT_HEADER_LEN as u64)
                .expect("a segment with data");
            let mut data = std::fs::read(path).expect("read");
            let len = data.len();
            match flip {
                Some((at, bit)) => {
                    let at = SEGMENT_HEADER_LEN + at.index(len - SEGMENT_HEADER_LEN);
                    data[at] ^= 1 << (bit % 8);
                }
                None => data.truncate(SEGMENT_HEADER_LEN + cut.index(len - SEGMENT_HEADER_LEN + 1)),
            }
            // Damage only counts as a torn tail in the last segment: drop later empty ones.
            for (_, later) in segments.range(segments.iter().find(|(_, p)| *p == path).map(|(s, _)| s + 1).unwrap()..) {
                std::fs::remove_file(later).expect("remove");
            }
            std::fs::write(path, &data).expect("write");
            let (got, end) = replay_payloads(dir.path());
            prop_assert!(got.len() <= written.len());
            prop_assert_eq!(&got[..], &written[..got.len()]);
            let (again, end_again) = replay_payloads(dir.path());
            prop_assert_eq!(again, got);
            prop_assert_eq!(end_again, end);
        }
    }
}
