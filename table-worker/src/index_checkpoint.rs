//! Checkpoints of a keyed table's primary-key index (docs/architecture.md, "Cluster"): the
//! index as it was at one snapshot of the table, written to the object store, from which a
//! new coordinator *catches up* to the table's current snapshot ([`catch_up`]) instead of
//! reading the keys of every data file again (`upsert::rebuild`, whose time grows with the
//! table).
//!
//! Format: `INLETKI1`; a JSON [`Header`] (its length as u32 LE before it): the table's uuid,
//! the snapshot, the id columns' field ids and the data file paths the entries name; the
//! entries (key length u32 LE, key, file number u32 LE, row position u64 LE); `INLETKIE` and
//! the entry count (u64 LE). A checkpoint cut short, or that does not end so, is refused.
//!
//! Catching up from a checkpoint of snapshot C to the current snapshot S (the caller checks
//! that C is an ancestor of S) gives the index that a rebuild from S's live files gives:
//! - An entry stays when S still lists its data file and no position delete file that S
//!   lists and C did not removes its row.
//! - The keys of data files S lists and C did not (rounds, compaction outputs, other engines'
//!   appends) are read in data sequence order, minus their deleted rows; a key's row in a
//!   file of a later or equal sequence number replaces the entry, as in the rebuild.
//! - A position delete file C lists and S does not may only name data files that S no longer
//!   lists (a compaction removes the deletes it applied with their data files). Otherwise
//!   rows might be live again that the checkpoint cannot name: the catch-up is refused and
//!   the caller rebuilds.
//!
//! Where it can differ from a rebuild: a key with two live rows (rows appended before upsert
//! was enabled, or by another engine) is indexed at the later one; if that row is deleted
//! after C, a rebuild indexes the earlier one and a catch-up none, so a later upsert of the
//! key leaves the earlier row visible (as it already was before the delete).

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use futures::StreamExt;
use iceberg::io::{FileIO, FileRead};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::live_files::{index_files, read_deleted, read_position_deletes, LiveFiles};
use crate::pk_index::{KeyIndex, Location};

const MAGIC: &[u8; 8] = b"INLETKI1";
const END: &[u8; 8] = b"INLETKIE";
/// Bytes written or read per object store call.
const CHUNK: usize = 8 << 20;

/// The memory a checkpoint's write or read holds at most beyond the index (its buffer, and
/// one key of up to a MiB): what callers borrow from the node's conversion pool.
pub const BUFFER_BYTES: usize = CHUNK + (1 << 20);
/// Removed delete files read at once while catching up.
const READ_AHEAD: usize = 8;

/// What a checkpoint is of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointOf {
    /// The table's uuid: a table made again under the name is another table.
    pub table_uuid: String,
    /// The snapshot whose live rows the index held.
    pub snapshot_id: i64,
    /// The id columns' field ids the keys were read from.
    pub id_field_ids: Vec<i32>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    of: CheckpointOf,
    /// The data files entries name, by number.
    files: Vec<String>,
}

/// A written checkpoint.
#[derive(Debug, Clone, Copy)]
pub struct Written {
    pub entries: u64,
    pub bytes: u64,
}

/// Writes `index`, which holds the live rows of `of`'s snapshot, to `path`.
pub(crate) async fn write(
    index: &KeyIndex,
    of: &CheckpointOf,
    file_io: &FileIO,
    path: &str,
) -> Result<Written> {
    let header = serde_json::to_vec(&Header {
        of: of.clone(),
        files: index.files().iter().map(|f| f.path.clone()).collect(),
    })
    .map_err(|e| Error::Schema(format!("index checkpoint header: {e}")))?;
    let mut out = file_io.new_output(path)?.writer().await?;
    let mut buf = Vec::with_capacity(CHUNK + 4096);
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(&(header.len() as u32).to_le_bytes());
    buf.extend_from_slice(&header);
    let mut entries = 0u64;
    let mut bytes = 0u64;
    let mut live = index.live_entries()?;
    while let Some((key, at)) = live.next()? {
        buf.extend_from_slice(&(key.len() as u32).to_le_bytes());
        buf.extend_from_slice(&key);
        buf.extend_from_slice(&at.file.to_le_bytes());
        buf.extend_from_slice(&at.pos.to_le_bytes());
        entries += 1;
        if buf.len() >= CHUNK {
            bytes += buf.len() as u64;
            out.write(Bytes::from(std::mem::take(&mut buf))).await?;
            buf.reserve(CHUNK + 4096);
        }
    }
    buf.extend_from_slice(END);
    buf.extend_from_slice(&entries.to_le_bytes());
    bytes += buf.len() as u64;
    out.write(Bytes::from(buf)).await?;
    out.close().await?;
    Ok(Written { entries, bytes })
}

/// What [`catch_up`] did.
#[derive(Debug, Clone, Copy, Default)]
pub struct CaughtUp {
    /// Entries of the checkpoint kept.
    pub kept: u64,
    /// Entries whose rows are gone since (their file left the table, or their row was
    /// deleted).
    pub dropped: u64,
    /// Data files added since the checkpoint, whose keys were read.
    pub new_data_files: usize,
    /// Position delete files added since the checkpoint, read.
    pub new_delete_files: usize,
    /// Keys with more than one live row (the later is indexed).
    pub duplicates: u64,
}

/// Fills the empty `index` from the checkpoint at `path`, which must be `of`, and the table's
/// change from `then` (the live files of `of`'s snapshot) to `now` (its current snapshot's).
/// `Err(why)` when the checkpoint cannot say (the caller rebuilds); then, or on an error, the
/// index holds part of it and the caller drops it.
pub(crate) async fn catch_up(
    index: &mut KeyIndex,
    file_io: &FileIO,
    path: &str,
    of: &CheckpointOf,
    then: &LiveFiles,
    now: &LiveFiles,
) -> Result<Result<CaughtUp, String>> {
    let now_data: HashMap<&str, _> = now.data.iter().map(|f| (f.file.path.as_str(), f)).collect();
    let then_data: HashSet<&str> = then.data.iter().map(|f| f.file.path.as_str()).collect();
    let then_deletes: HashSet<&str> = then.position_deletes.iter().map(String::as_str).collect();
    let now_deletes: HashSet<&str> = now.position_deletes.iter().map(String::as_str).collect();
    // Delete files gone since: each must have gone with every data file it names.
    // (Owned paths: futures over borrowed items are not `Send` for every lifetime.)
    let removed: Vec<String> = then_deletes
        .difference(&now_deletes)
        .map(|p| p.to_string())
        .collect();
    let mut reads = futures::stream::iter(removed.into_iter().map(|p| async move {
        let rows = read_position_deletes(file_io, &p).await;
        (p, rows)
    }))
    .buffer_unordered(READ_AHEAD);
    while let Some((delete_file, rows)) = reads.next().await {
        if let Some((data_file, _)) = rows?
            .iter()
            .find(|(f, _)| now_data.contains_key(f.as_str()))
        {
            return Ok(Err(format!(
                "position delete file {delete_file} left the table while {data_file}, whose rows it deleted, stayed"
            )));
        }
    }
    drop(reads);
    // Rows deleted since, per data file, sorted.
    let added: Vec<String> = now_deletes
        .difference(&then_deletes)
        .map(|p| p.to_string())
        .collect();
    let new_delete_files = added.len();
    let deleted = read_deleted(file_io, added).await?;
    let is_deleted = |path: &str, pos: u64| {
        deleted
            .get(path)
            .is_some_and(|g| g.binary_search(&pos).is_ok())
    };
    // The checkpoint's entries whose rows are still live.
    let mut input = Input::open(file_io, path).await?;
    if input.take(8).await? != MAGIC {
        return Ok(Err(format!("{path} is not an index checkpoint")));
    }
    let len = u32_at(input.take(4).await?) as usize;
    let header: Header =
        serde_json::from_slice(input.take(len).await?).map_err(|_| corrupt(path))?;
    if header.of != *of {
        return Ok(Err(format!(
            "{path} is a checkpoint of {:?}, not of {of:?}",
            header.of
        )));
    }
    // Per file number: the index's id of the file and its sequence number, if still live.
    let mut sequence: HashMap<u32, i64> = HashMap::new();
    let files: Vec<Option<u32>> = header
        .files
        .iter()
        .map(|p| {
            now_data.get(p.as_str()).map(|f| {
                let id = index.file_id(f.file.clone());
                sequence.insert(id, f.sequence_number);
                id
            })
        })
        .collect();
    let mut caught = CaughtUp {
        new_delete_files,
        ..Default::default()
    };
    let entries_end = input.size.checked_sub(16).ok_or_else(|| corrupt(path))?;
    while input.offset() < entries_end {
        let n = u32_at(input.take(4).await?) as usize;
        let entry = input.take(n + 12).await?;
        let key = entry[..n].to_vec();
        let number = u32_at(&entry[n..n + 4]);
        let pos = u64::from_le_bytes(entry[n + 4..n + 12].try_into().expect("8 bytes"));
        let name = header
            .files
            .get(number as usize)
            .ok_or_else(|| corrupt(path))?;
        match files[number as usize] {
            Some(file) if !is_deleted(name, pos) => {
                index.put(key, Location { file, pos })?;
                caught.kept += 1;
            }
            _ => caught.dropped += 1,
        }
    }
    if input.offset() != entries_end || input.take(8).await? != END {
        return Err(corrupt(path));
    }
    let count = u64::from_le_bytes(input.take(8).await?.try_into().expect("8 bytes"));
    if count != caught.kept + caught.dropped {
        return Err(corrupt(path));
    }
    // The keys of the files added since, in sequence order.
    let added: Vec<_> = now
        .data
        .iter()
        .filter(|f| !then_data.contains(f.file.path.as_str()))
        .cloned()
        .collect();
    caught.new_data_files = added.len();
    caught.duplicates = index_files(
        index,
        file_io,
        added,
        &deleted,
        &of.id_field_ids,
        &mut sequence,
    )
    .await?;
    Ok(Ok(caught))
}

fn u32_at(b: &[u8]) -> u32 {
    u32::from_le_bytes(b[..4].try_into().expect("4 bytes"))
}

fn corrupt(path: &str) -> Error {
    Error::IndexCorrupt {
        path: path.to_string(),
    }
}

/// A checkpoint read front to back, [`CHUNK`] bytes per request.
struct Input {
    path: String,
    reader: Box<dyn FileRead>,
    size: u64,
    buf: Vec<u8>,
    /// Where `buf` starts in the object.
    start: u64,
    /// Bytes of `buf` taken.
    used: usize,
}

impl Input {
    async fn open(file_io: &FileIO, path: &str) -> Result<Self> {
        let input = file_io.new_input(path)?;
        let size = input.metadata().await?.size;
        Ok(Input {
            path: path.to_string(),
            reader: input.reader().await?,
            size,
            buf: Vec::new(),
            start: 0,
            used: 0,
        })
    }

    fn offset(&self) -> u64 {
        self.start + self.used as u64
    }

    /// The next `n` bytes; an error when the object ends first.
    async fn take(&mut self, n: usize) -> Result<&[u8]> {
        if self.used + n > self.buf.len() {
            self.buf.drain(..self.used);
            self.start += self.used as u64;
            self.used = 0;
            let have = self.start + self.buf.len() as u64;
            let want = (self.start + n as u64)
                .max(have + CHUNK as u64)
                .min(self.size);
            if want < self.start + n as u64 {
                return Err(corrupt(&self.path));
            }
            if want > have {
                let more = self.reader.read(have..want).await?;
                self.buf.extend_from_slice(&more);
            }
            if self.buf.len() < n {
                return Err(corrupt(&self.path));
            }
        }
        let at = self.used;
        self.used += n;
        Ok(&self.buf[at..at + n])
    }
}
