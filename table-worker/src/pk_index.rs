//! The primary-key index of an upsert table: for every live key, the data file and row
//! position that hold its row (docs/table-worker.md, "Upsert and CDC"). An update or delete
//! looks the key up here to know which row to remove with a position delete.
//!
//! Design: a small LSM.
//! - Recent changes live in a hash map, counted in bytes (key, location and the map's
//!   overhead). When the map passes the byte budget it is written to local disk as a *run*: a
//!   file of entries sorted by key (tombstones included) plus, in memory, a sparse index with
//!   the first key of every [`BLOCK_ENTRIES`] entries. The map is then empty again.
//! - A lookup tries the map, then the runs from newest to oldest; in a run it binary-searches
//!   the sparse index and reads one block with a positioned read.
//! - More than [`MAX_RUNS`] runs are merged into one (newest entry per key wins; tombstones
//!   disappear, since nothing older remains), so a lookup reads at most `MAX_RUNS` blocks.
//!
//! Invariants:
//! - Memory stays within the budget, apart from the sparse indexes (one key per
//!   `BLOCK_ENTRIES` spilled entries) and the table of data file paths (one per data file
//!   holding a live key); both are counted in [`KeyIndex::memory_bytes`].
//! - The newest entry of a key wins: the map over runs, newer runs over older.
//! - The index lives only in memory and in its spill directory, which it owns and empties on
//!   creation: after a restart it is rebuilt from the table (`upsert::rebuild`), or caught
//!   up from a checkpoint in the object store (`index_checkpoint`).
//!
//! Locations name data files by an interned id, so each entry costs the key plus 12 bytes
//! (file id and row position).

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use iceberg::spec::Struct;

use crate::error::{Error, Result};

/// Entries per block of a run (one sparse-index key per block).
pub(crate) const BLOCK_ENTRIES: usize = 64;
/// Runs kept before they are merged into one.
pub const MAX_RUNS: usize = 4;
/// Bytes a map entry costs beyond its key (location, hash map slot, `Vec` header).
const ENTRY_OVERHEAD: usize = 64;

/// A data file that holds indexed rows, and the partition its rows (and the position deletes
/// against them) belong to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRef {
    pub path: String,
    pub partition: Struct,
    pub spec_id: i32,
}

/// Where a key's live row is: a data file and a row position in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Location {
    pub file: u32,
    pub pos: u64,
}

/// One spilled run: a sorted file and its sparse index.
#[derive(Debug)]
struct Run {
    path: PathBuf,
    file: File,
    /// (first key of the block, byte offset of the block).
    sparse: Vec<(Vec<u8>, u64)>,
    len: u64,
}

/// The memory that primary-key indexes keep their entries in: a fixed amount for one index,
/// or one node-wide amount shared by every index alive ([`IndexBudget::shared`]), so that the
/// memory of upsert tables does not grow with their number. An index over its share spills
/// at its next change.
#[derive(Debug, Clone)]
pub struct IndexBudget(Arc<BudgetInner>);

#[derive(Debug)]
struct BudgetInner {
    bytes: usize,
    shared: bool,
    /// Indexes alive on a shared budget.
    indexes: AtomicUsize,
}

impl IndexBudget {
    /// The least an index keeps in memory, however many share the budget: a run per few
    /// entries would make every lookup read many runs.
    pub const MIN_SHARE: usize = 256 << 10;

    /// `bytes` for one index.
    pub fn fixed(bytes: usize) -> Self {
        Self::new(bytes, false)
    }

    /// `bytes` shared by every index built on this budget (and its clones): each keeps
    /// `bytes / indexes alive`, at least [`IndexBudget::MIN_SHARE`].
    pub fn shared(bytes: usize) -> Self {
        Self::new(bytes, true)
    }

    fn new(bytes: usize, shared: bool) -> Self {
        IndexBudget(Arc::new(BudgetInner {
            bytes: bytes.max(1),
            shared,
            indexes: AtomicUsize::new(0),
        }))
    }

    /// The whole budget.
    pub fn bytes(&self) -> usize {
        self.0.bytes
    }

    /// What one index may keep now.
    pub fn share(&self) -> usize {
        if !self.0.shared {
            return self.0.bytes;
        }
        let n = self.0.indexes.load(Ordering::Relaxed).max(1);
        (self.0.bytes / n).max(Self::MIN_SHARE.min(self.0.bytes))
    }
}

impl From<usize> for IndexBudget {
    fn from(bytes: usize) -> Self {
        IndexBudget::fixed(bytes)
    }
}

impl PartialEq for IndexBudget {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
            || (self.0.bytes == other.0.bytes && self.0.shared == other.0.shared)
    }
}

impl Eq for IndexBudget {}

/// The primary-key index of one table.
#[derive(Debug)]
pub(crate) struct KeyIndex {
    budget: IndexBudget,
    dir: PathBuf,
    /// Recent changes; None is a tombstone (only needed while runs exist).
    mem: HashMap<Vec<u8>, Option<Location>>,
    mem_bytes: usize,
    files: Vec<FileRef>,
    file_ids: HashMap<String, u32>,
    /// Oldest first.
    runs: Vec<Run>,
    next_run: u64,
    spills: u64,
}

impl KeyIndex {
    /// An empty index that keeps at most `budget` bytes of entries in memory and spills to
    /// `dir` (created, and emptied of earlier runs).
    pub(crate) fn new(budget: impl Into<IndexBudget>, dir: PathBuf) -> Result<Self> {
        let budget = budget.into();
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| io("clearing", &dir, e))?;
        }
        std::fs::create_dir_all(&dir).map_err(|e| io("creating", &dir, e))?;
        budget.0.indexes.fetch_add(1, Ordering::Relaxed);
        Ok(KeyIndex {
            budget,
            dir,
            mem: HashMap::new(),
            mem_bytes: 0,
            files: Vec::new(),
            file_ids: HashMap::new(),
            runs: Vec::new(),
            next_run: 0,
            spills: 0,
        })
    }

    /// Registers a data file (idempotent); returns its id for [`Location`]s.
    pub(crate) fn file_id(&mut self, file: FileRef) -> u32 {
        if let Some(id) = self.file_ids.get(&file.path) {
            return *id;
        }
        let id = self.files.len() as u32;
        self.file_ids.insert(file.path.clone(), id);
        self.files.push(file);
        id
    }

    /// The data file of a location.
    pub(crate) fn file(&self, id: u32) -> Option<&FileRef> {
        self.files.get(id as usize)
    }

    /// The live location of `key`, if any.
    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<Location>> {
        if let Some(entry) = self.mem.get(key) {
            return Ok(*entry);
        }
        for run in self.runs.iter().rev() {
            if let Some(entry) = run.get(key)? {
                return Ok(entry);
            }
        }
        Ok(None)
    }

    /// Sets `key`'s live row.
    pub(crate) fn put(&mut self, key: Vec<u8>, at: Location) -> Result<()> {
        self.set(key, Some(at))
    }

    /// Forgets `key` (its row was deleted).
    pub(crate) fn remove(&mut self, key: &[u8]) -> Result<()> {
        if self.runs.is_empty() {
            if self.mem.remove(key).is_some() {
                self.mem_bytes = self.mem_bytes.saturating_sub(key.len() + ENTRY_OVERHEAD);
            }
            return Ok(());
        }
        self.set(key.to_vec(), None)
    }

    fn set(&mut self, key: Vec<u8>, entry: Option<Location>) -> Result<()> {
        let cost = key.len() + ENTRY_OVERHEAD;
        if self.mem.insert(key, entry).is_none() {
            self.mem_bytes += cost;
        }
        if self.mem_bytes > self.budget.share() {
            self.spill()?;
        }
        Ok(())
    }

    /// Bytes held in memory: the map, the runs' sparse indexes and the file table.
    pub(crate) fn memory_bytes(&self) -> usize {
        let sparse: usize = self
            .runs
            .iter()
            .flat_map(|r| r.sparse.iter())
            .map(|(k, _)| k.len() + 32)
            .sum();
        let files: usize = self.files.iter().map(|f| 2 * f.path.len() + 96).sum();
        self.mem_bytes + sparse + files
    }

    /// How many times the map was spilled to disk.
    pub(crate) fn spills(&self) -> u64 {
        self.spills
    }

    /// Runs on disk now.
    pub(crate) fn runs(&self) -> usize {
        self.runs.len()
    }

    /// Writes the map as a new run (and merges the runs when there are too many).
    fn spill(&mut self) -> Result<()> {
        let mut entries: Vec<(Vec<u8>, Option<Location>)> = self.mem.drain().collect();
        self.mem_bytes = 0;
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let run = self.write_run(entries.into_iter())?;
        self.runs.push(run);
        self.spills += 1;
        if self.runs.len() > MAX_RUNS {
            self.merge_runs()?;
        }
        Ok(())
    }

    fn write_run(
        &mut self,
        entries: impl Iterator<Item = (Vec<u8>, Option<Location>)>,
    ) -> Result<Run> {
        let mut w = self.run_writer()?;
        for (key, entry) in entries {
            w.push(&key, entry)?;
        }
        w.finish()
    }

    fn run_writer(&mut self) -> Result<RunWriter> {
        let path = self.dir.join(format!("run-{:08}.idx", self.next_run));
        self.next_run += 1;
        let file = File::create(&path).map_err(|e| io("creating", &path, e))?;
        Ok(RunWriter {
            out: BufWriter::new(file),
            path,
            sparse: Vec::new(),
            offset: 0,
            entries: 0,
        })
    }

    /// Merges every run into one, streaming (memory: one entry per run, plus the new sparse
    /// index): the newest entry of each key, tombstones dropped.
    fn merge_runs(&mut self) -> Result<()> {
        let runs = std::mem::take(&mut self.runs);
        let mut merged = MergedRuns::open(&runs)?;
        let mut w = self.run_writer()?;
        while let Some((key, entry)) = merged.next()? {
            if let Some(at) = entry {
                w.push(&key, Some(at))?;
            }
        }
        let run = w.finish()?;
        for r in runs {
            let _ = std::fs::remove_file(&r.path);
        }
        self.runs.push(run);
        Ok(())
    }

    /// Every live key and its row, each key once, in no particular order (memory: one entry
    /// per run). For a checkpoint of the index.
    pub(crate) fn live_entries(&self) -> Result<LiveEntries<'_>> {
        Ok(LiveEntries {
            mem: self.mem.iter(),
            runs: MergedRuns::open(&self.runs)?,
            index: self,
        })
    }

    /// The data files locations name, by id.
    pub(crate) fn files(&self) -> &[FileRef] {
        &self.files
    }
}

/// [`KeyIndex::live_entries`]: the map's, then the runs' that the map does not override.
pub(crate) struct LiveEntries<'a> {
    mem: std::collections::hash_map::Iter<'a, Vec<u8>, Option<Location>>,
    runs: MergedRuns,
    index: &'a KeyIndex,
}

impl LiveEntries<'_> {
    /// The next live key and its row.
    pub(crate) fn next(&mut self) -> Result<Option<(Vec<u8>, Location)>> {
        for (key, entry) in self.mem.by_ref() {
            if let Some(at) = entry {
                return Ok(Some((key.clone(), *at)));
            }
        }
        while let Some((key, entry)) = self.runs.next()? {
            // The map is newer than every run.
            if let (Some(at), false) = (entry, self.index.mem.contains_key(&key)) {
                return Ok(Some((key, at)));
            }
        }
        Ok(None)
    }
}

/// The runs of an index read together in key order: each key once, with the newest run's
/// entry (a tombstone included).
struct MergedRuns {
    readers: Vec<RunReader>,
    heads: Vec<Option<(Vec<u8>, Option<Location>)>>,
}

impl MergedRuns {
    /// `runs` oldest first.
    fn open(runs: &[Run]) -> Result<Self> {
        let mut readers: Vec<RunReader> = runs
            .iter()
            .map(|r| RunReader::open(&r.path))
            .collect::<Result<_>>()?;
        let heads = readers
            .iter_mut()
            .map(RunReader::next)
            .collect::<Result<_>>()?;
        Ok(MergedRuns { readers, heads })
    }

    #[allow(clippy::type_complexity)]
    fn next(&mut self) -> Result<Option<(Vec<u8>, Option<Location>)>> {
        // The smallest key; among equal keys the newest run's (the highest index) wins.
        let Some(min) = self.heads.iter().flatten().map(|(k, _)| k).min().cloned() else {
            return Ok(None);
        };
        let mut winner = None;
        for (i, head) in self.heads.iter_mut().enumerate() {
            if head.as_ref().is_some_and(|(k, _)| *k == min) {
                winner = head.take().map(|(_, e)| e);
                *head = self.readers[i].next()?;
            }
        }
        Ok(Some((min, winner.flatten())))
    }
}

/// Writes one run, entries in key order.
struct RunWriter {
    out: BufWriter<File>,
    path: PathBuf,
    sparse: Vec<(Vec<u8>, u64)>,
    offset: u64,
    entries: usize,
}

impl RunWriter {
    fn push(&mut self, key: &[u8], entry: Option<Location>) -> Result<()> {
        if self.entries.is_multiple_of(BLOCK_ENTRIES) {
            self.sparse.push((key.to_vec(), self.offset));
        }
        let bytes = encode_entry(key, entry);
        self.out
            .write_all(&bytes)
            .map_err(|e| io("writing", &self.path, e))?;
        self.offset += bytes.len() as u64;
        self.entries += 1;
        Ok(())
    }

    fn finish(mut self) -> Result<Run> {
        self.out.flush().map_err(|e| io("writing", &self.path, e))?;
        drop(self.out);
        let file = File::open(&self.path).map_err(|e| io("opening", &self.path, e))?;
        Ok(Run {
            path: self.path,
            file,
            sparse: self.sparse,
            len: self.offset,
        })
    }
}

impl Drop for KeyIndex {
    fn drop(&mut self) {
        self.budget.0.indexes.fetch_sub(1, Ordering::Relaxed);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Run {
    fn get(&self, key: &[u8]) -> Result<Option<Option<Location>>> {
        // The last block whose first key is <= key.
        let block = match self.sparse.partition_point(|(k, _)| k.as_slice() <= key) {
            0 => return Ok(None),
            n => n - 1,
        };
        let start = self.sparse[block].1;
        let end = self.sparse.get(block + 1).map_or(self.len, |(_, o)| *o);
        let mut buf = vec![0u8; (end - start) as usize];
        read_exact_at(&self.file, &mut buf, start).map_err(|e| io("reading", &self.path, e))?;
        let mut at = buf.as_slice();
        while !at.is_empty() {
            let (k, entry, rest) = decode_entry(at).ok_or_else(|| Error::IndexCorrupt {
                path: self.path.display().to_string(),
            })?;
            if k == key {
                return Ok(Some(entry));
            }
            at = rest;
        }
        Ok(None)
    }
}

/// Reads a run sequentially (for merging).
struct RunReader {
    path: PathBuf,
    reader: BufReader<File>,
}

impl RunReader {
    fn open(path: &PathBuf) -> Result<Self> {
        let file = File::open(path).map_err(|e| io("opening", path, e))?;
        Ok(RunReader {
            path: path.clone(),
            reader: BufReader::new(file),
        })
    }

    #[allow(clippy::type_complexity)]
    fn next(&mut self) -> Result<Option<(Vec<u8>, Option<Location>)>> {
        let mut len = [0u8; 4];
        match self.reader.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(io("reading", &self.path, e)),
        }
        let n = u32::from_le_bytes(len) as usize;
        let mut rest = vec![0u8; n + 13];
        self.reader
            .read_exact(&mut rest)
            .map_err(|e| io("reading", &self.path, e))?;
        let mut whole = len.to_vec();
        whole.extend_from_slice(&rest);
        let (k, entry, _) = decode_entry(&whole).ok_or_else(|| Error::IndexCorrupt {
            path: self.path.display().to_string(),
        })?;
        Ok(Some((k.to_vec(), entry)))
    }
}

/// An entry on disk: key length (u32 LE), key, live flag (u8), file id (u32 LE), position
/// (u64 LE).
fn encode_entry(key: &[u8], entry: Option<Location>) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 17);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    let at = entry.unwrap_or(Location { file: 0, pos: 0 });
    out.push(u8::from(entry.is_some()));
    out.extend_from_slice(&at.file.to_le_bytes());
    out.extend_from_slice(&at.pos.to_le_bytes());
    out
}

fn decode_entry(b: &[u8]) -> Option<(&[u8], Option<Location>, &[u8])> {
    let n = u32::from_le_bytes(b.get(..4)?.try_into().ok()?) as usize;
    let key = b.get(4..4 + n)?;
    let rest = b.get(4 + n..4 + n + 13)?;
    let live = rest[0] == 1;
    let file = u32::from_le_bytes(rest[1..5].try_into().ok()?);
    let pos = u64::from_le_bytes(rest[5..13].try_into().ok()?);
    Some((
        key,
        live.then_some(Location { file, pos }),
        &b[4 + n + 13..],
    ))
}

#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(not(unix))]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    use std::io::{Seek, SeekFrom};
    let mut f = file.try_clone()?;
    f.seek(SeekFrom::Start(offset))?;
    f.read_exact(buf)
}

fn io(what: &'static str, path: &std::path::Path, e: std::io::Error) -> Error {
    Error::IndexIo {
        what,
        path: path.display().to_string(),
        source: e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64) -> Vec<u8> {
        format!("key-{i:06}").into_bytes()
    }

    #[test]
    fn a_corrupt_run_is_reported_as_corruption_not_as_retryable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut index = KeyIndex::new(
            IndexBudget::fixed(IndexBudget::MIN_SHARE),
            dir.path().join("i"),
        )
        .expect("index");
        let f = index.file_id(FileRef {
            path: "a.parquet".into(),
            partition: Struct::empty(),
            spec_id: 0,
        });
        let n = 2 * IndexBudget::MIN_SHARE as u64 / (10 + ENTRY_OVERHEAD as u64);
        for i in 0..n {
            index
                .put(key(i), Location { file: f, pos: i })
                .expect("put");
        }
        assert!(index.spills() > 0, "the entries spilled to a run on disk");
        assert_eq!(
            index.get(&key(0)).expect("get"),
            Some(Location { file: f, pos: 0 })
        );
        // Every run file's bytes overwritten with a pattern that is no entry.
        let mut runs = 0;
        for entry in std::fs::read_dir(dir.path().join("i")).expect("dir") {
            let path = entry.expect("entry").path();
            let len = std::fs::metadata(&path).expect("metadata").len() as usize;
            std::fs::write(&path, vec![0xff; len]).expect("overwrite");
            runs += 1;
        }
        assert!(runs > 0);
        let err = index.get(&key(0)).expect_err("a corrupt run");
        assert_eq!(err.kind(), inlet_common::ErrorKind::Corruption, "{err}");
        assert!(!err.is_retryable());
        assert!(err.to_string().contains("corrupt run"), "{err}");
    }

    #[test]
    fn indexes_on_a_shared_budget_keep_their_share() {
        let dir = tempfile::tempdir().expect("tempdir");
        let total = 4 * IndexBudget::MIN_SHARE;
        let budget = IndexBudget::shared(total);
        let fill = |index: &mut KeyIndex, from: u64| {
            let f = index.file_id(FileRef {
                path: "a.parquet".into(),
                partition: Struct::empty(),
                spec_id: 0,
            });
            // ~300 KiB of entries each time.
            for i in from..from + 300_000 / (10 + ENTRY_OVERHEAD as u64) {
                index
                    .put(key(i), Location { file: f, pos: i })
                    .expect("put");
            }
        };
        let mut a = KeyIndex::new(budget.clone(), dir.path().join("a")).expect("a");
        fill(&mut a, 0);
        assert_eq!(a.spills(), 0, "alone, an index has the whole budget");
        let mut others: Vec<KeyIndex> = (0..3)
            .map(|i| KeyIndex::new(budget.clone(), dir.path().join(format!("o{i}"))).expect("o"))
            .collect();
        assert_eq!(budget.share(), total / 4);
        fill(&mut a, 1_000_000);
        assert!(a.spills() > 0, "over its share of four, it spills");
        assert!(a.mem_bytes <= total / 4);
        for o in &mut others {
            fill(o, 0);
            assert!(o.mem_bytes <= total / 4);
        }
        drop(others);
        assert_eq!(budget.share(), total, "the share grows back");
        // A thousand indexes still keep the least share each.
        let many: Vec<KeyIndex> = (0..1_000)
            .map(|i| KeyIndex::new(budget.clone(), dir.path().join(format!("m{i}"))).expect("m"))
            .collect();
        assert_eq!(budget.share(), IndexBudget::MIN_SHARE);
        drop(many);
    }

    #[test]
    fn spills_beyond_the_budget_and_still_finds_every_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        // About 20 entries fit: everything else goes to runs, which get merged.
        let mut index =
            KeyIndex::new(20 * (10 + ENTRY_OVERHEAD), dir.path().join("idx")).expect("index");
        let f = index.file_id(FileRef {
            path: "a.parquet".into(),
            partition: Struct::empty(),
            spec_id: 0,
        });
        for i in 0..2_000 {
            index
                .put(key(i), Location { file: f, pos: i })
                .expect("put");
        }
        // Updates and deletes after the spills shadow the spilled entries.
        for i in (0..2_000).step_by(3) {
            index
                .put(
                    key(i),
                    Location {
                        file: f,
                        pos: 10_000 + i,
                    },
                )
                .expect("update");
        }
        for i in (0..2_000).step_by(7) {
            index.remove(&key(i)).expect("remove");
        }
        assert!(index.spills() > 10, "spilled {} times", index.spills());
        assert!(index.runs() <= MAX_RUNS, "{} runs", index.runs());
        assert!(index.mem_bytes <= 20 * (10 + ENTRY_OVERHEAD));
        for i in 0..2_000 {
            let want = if i % 7 == 0 {
                None
            } else if i % 3 == 0 {
                Some(Location {
                    file: f,
                    pos: 10_000 + i,
                })
            } else {
                Some(Location { file: f, pos: i })
            };
            assert_eq!(index.get(&key(i)).expect("get"), want, "key {i}");
        }
        assert_eq!(index.get(b"absent").expect("get"), None);
        assert_eq!(index.get(b"zzz").expect("get"), None);
        let run_files = std::fs::read_dir(dir.path().join("idx"))
            .expect("dir")
            .count();
        assert_eq!(run_files, index.runs(), "merged runs are deleted");
        drop(index);
        assert!(
            !dir.path().join("idx").exists(),
            "the index removes its spill directory"
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Any sequence of puts and removes, with spills and merges along the way, answers
        /// like a hash map.
        #[test]
        fn behaves_like_a_map(
            ops in proptest::collection::vec((0u8..3, 0u16..200, 0u64..1000), 1..600),
            budget in 1usize..3000,
        ) {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut index = KeyIndex::new(budget, dir.path().join("idx")).expect("index");
            let mut model: HashMap<Vec<u8>, Location> = HashMap::new();
            for (op, k, pos) in ops {
                let key = format!("k{k}").into_bytes();
                match op {
                    0 | 1 => {
                        let at = Location { file: (k % 3) as u32, pos };
                        index.put(key.clone(), at).expect("put");
                        model.insert(key, at);
                    }
                    _ => {
                        index.remove(&key).expect("remove");
                        model.remove(&key);
                    }
                }
            }
            for k in 0u16..200 {
                let key = format!("k{k}").into_bytes();
                proptest::prop_assert_eq!(index.get(&key).expect("get"), model.get(&key).copied());
            }
            proptest::prop_assert!(index.runs() <= MAX_RUNS);
        }
    }

    #[test]
    fn a_new_index_starts_empty_even_over_old_runs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("idx");
        std::fs::create_dir_all(&path).expect("dir");
        std::fs::write(path.join("run-00000000.idx"), b"stale").expect("stale run");
        let index = KeyIndex::new(1 << 20, path.clone()).expect("index");
        assert_eq!(std::fs::read_dir(&path).expect("dir").count(), 0);
        assert_eq!(index.get(b"k").expect("get"), None);
    }
}
