//! Orphan files: files Inlet wrote into a table's `data/` folder that no snapshot names and
//! that nothing will commit any more. They come from conversions that did not land: another
//! node's chunk of the same range won ([`crate::chunks`]; a chunk the coordinator refuses
//! has its files deleted at once), a range a node converted again under new names, an
//! upsert round dropped on re-registration, a crash between an upload and its commit; and
//! from compactions that crashed before their commit. Nothing else ever deletes them, so
//! each coordinator sweeps its table (and its dead-letter table) every
//! [`OrphanSweep::every`], never while it compacts: files older than
//! [`OrphanSweep::older_than`] that no snapshot of the table names and no pending round or
//! chunk holds are deleted.
//!
//! Invariants:
//! - Only files Inlet's conversions or compactions wrote for *this* table are candidates: in
//!   the table's `data/` folder, named `p<partition>-<from>-<next>-<tag>…`
//!   ([`inlet_table_worker::TableContext::file_tag`]) with a tag of this table: its uuid's
//!   first digits, or a tag some file of its snapshots carries (conversions that ran before
//!   the table existed tag their files at random, and their committed files make the tag
//!   known); or a compaction's outputs, named `compact-<parent snapshot id>-<random>…`
//!   ([`crate::compact`]), whose random part starts with the table's uuid tag, or (files
//!   of compactions from before that tag) whose parent is a snapshot of this table (in its
//!   snapshots or its snapshot log). Another engine's files and files of an older table at
//!   the same location (renamed away, or dropped without purging) are never touched. What
//!   this misses: a conversion before the table existed none of whose files landed, and an
//!   untagged compaction's outputs whose parent snapshot has since left the table's
//!   metadata.
//! - A file is deleted only if, after it was listed, neither the caller's `keep` (the
//!   worker's uncollected outputs, the coordinator's pending rounds and every chunk row, read
//!   after the listing; the coordinator sweeps between rounds, so these do not move
//!   meanwhile except chunk rows, which only go once committed) nor any
//!   manifest of any snapshot of the table (loaded after `keep`) names it. A file moves from a
//!   chunk row or a pending round into a snapshot by a commit that lands before the row or
//!   round goes, so a file on its way in is seen in one or the other.
//! - The age rule covers what is in flight elsewhere: a file being uploaded, or uploaded by
//!   another node's converter and not yet in a chunk row (it publishes every commit
//!   interval), is minutes old at most. Iceberg's own `remove_orphan_files` keeps 3 days by
//!   default; so does the default here. What it does not cover: a converter paused for longer
//!   than that between uploading a chunk's files and publishing its row.
//! - Any failure to read a manifest, or a snapshot naming a file outside the node's object
//!   store root (which cannot be compared with the listing), deletes nothing.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use iceberg::table::Table;
use iceberg::TableIdent;
use inlet_catalog::storage::ObjectStoreStorage;

use crate::commit::{CommitError, Committer};

/// How a coordinator looks for orphan files (`[tables] orphan_files_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrphanSweep {
    /// Files younger than this are never orphans: they may be on their way into a round.
    pub older_than: Duration,
    /// The least time between two sweeps of a table.
    pub every: Duration,
}

/// The default `[tables] orphan_files_older_than_ms`: 3 days, as Iceberg's own procedure.
pub const DEFAULT_OLDER_THAN: Duration = Duration::from_secs(3 * 24 * 3600);

/// The default `[tables] orphan_files_interval_ms`: hourly.
pub const DEFAULT_EVERY: Duration = Duration::from_secs(3600);

/// The folder a table's conversions write to.
pub(crate) fn data_location(table: &Table) -> String {
    format!("{}/data", table.metadata().location().trim_end_matches('/'))
}

/// How many hex digits of a table's uuid make its tag.
pub(crate) const TAG_LEN: usize = 8;

/// The tag of the table whose uuid is `uuid`: its first [`TAG_LEN`] hex digits.
pub(crate) fn uuid_tag(uuid: &uuid::Uuid) -> String {
    uuid.simple().to_string()[..TAG_LEN].to_string()
}

/// The tag a table's conversions put in their file names, and its compactions at the start
/// of their random part (the first digits of its uuid).
pub(crate) fn file_tag(table: &Table) -> String {
    uuid_tag(&table.metadata().uuid())
}

/// The tag of `name` (a file name, no folder) if a conversion wrote it:
/// `p<partition>-<from>-<next>-<tag>…`.
fn conversion_tag(name: &str) -> Option<&str> {
    let mut parts = name.split('-');
    let numeric =
        |s: Option<&str>| s.is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()));
    let tagged = numeric(parts.next().and_then(|p| p.strip_prefix('p')))
        && numeric(parts.next())
        && numeric(parts.next());
    let tag = parts.next().filter(|t| !t.is_empty())?;
    tagged.then_some(tag)
}

/// The parent snapshot id and the random part of `name` (a file name, no folder) if a
/// compaction wrote it: `compact-<parent id, 16 hex digits>-<random, 32 hex digits>…`. The
/// random part starts with the table's tag ([`file_tag`]) in the files of compactions since
/// the tag was added.
fn compaction(name: &str) -> Option<(i64, &str)> {
    let rest = name.strip_prefix("compact-")?;
    let (parent, rest) = rest.split_once('-')?;
    let hex = |s: &str, len| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    let random = rest.get(..32)?;
    if !hex(parent, 16) || !hex(random, 32) {
        return None;
    }
    // The id as `{:016x}` wrote it (two's complement).
    let parent = u64::from_str_radix(parent, 16).ok()? as i64;
    Some((parent, random))
}

/// Whether `name` is a file Inlet's conversions or compactions write.
fn inlet_written(name: &str) -> bool {
    conversion_tag(name).is_some() || compaction(name).is_some()
}

fn file_name(location: &str) -> &str {
    location.rsplit('/').next().unwrap_or_default()
}

/// The files under `data_location` that conversions or compactions wrote (of any table: see
/// [`remove`])
/// and that were last written before `cutoff_ms`: the candidates, as locations.
pub(crate) async fn candidates(
    storage: &ObjectStoreStorage,
    data_location: &str,
    cutoff_ms: i64,
) -> Result<Vec<String>, CommitError> {
    let listed = storage
        .list(data_location, |f| {
            f.last_modified_ms < cutoff_ms && inlet_written(file_name(&f.location))
        })
        .await?;
    Ok(listed.into_iter().map(|f| f.location).collect())
}

/// Takes out of `unnamed` (object key → location) every file a manifest of any snapshot of
/// `table` names (data and delete files, live or not), and returns the conversion tags of
/// the files they name. Memory grows with the candidates, the manifests and the tags, not
/// with the files of the table's history.
async fn take_named(
    table: &Table,
    storage: &ObjectStoreStorage,
    unnamed: &mut HashMap<String, String>,
) -> Result<HashSet<String>, CommitError> {
    let meta = table.metadata();
    let mut manifests = HashSet::new();
    let mut tags = HashSet::new();
    for snapshot in meta.snapshots() {
        for m in crate::reading::manifests(table, snapshot).await? {
            if !manifests.insert(m.manifest_path.clone()) {
                continue;
            }
            let manifest = m.load_manifest(table.file_io()).await?;
            for entry in manifest.entries() {
                let path = entry.data_file().file_path();
                unnamed.remove(&key(storage, path)?);
                if let Some(tag) = conversion_tag(file_name(path)) {
                    if !tags.contains(tag) {
                        tags.insert(tag.to_string());
                    }
                }
            }
        }
    }
    Ok(tags)
}

/// The object key of `location`; a location outside the root cannot be compared with the
/// listing, so it stops the sweep.
fn key(storage: &ObjectStoreStorage, location: &str) -> Result<String, CommitError> {
    Ok(storage.object_key(location)?.to_string())
}

/// Deletes the `candidates` of `ident` that carry one of its tags (`own_tag`, or one its
/// snapshots' files carry) or come from one of its compactions (of one of its snapshots, or
/// tagged with `own_tag`), and that neither `keep` (locations) nor any snapshot of the table
/// names, reading the table now (after `keep` was read). Returns what it deleted.
pub(crate) async fn remove(
    committer: &Committer,
    storage: &ObjectStoreStorage,
    ident: &TableIdent,
    own_tag: &str,
    candidates: Vec<String>,
    keep: &HashSet<String>,
) -> Result<Vec<String>, CommitError> {
    let Some(table) = committer.load(ident).await? else {
        return Ok(Vec::new());
    };
    let mut unnamed = HashMap::with_capacity(candidates.len());
    for location in candidates {
        unnamed.insert(key(storage, &location)?, location);
    }
    for location in keep {
        unnamed.remove(&key(storage, location)?);
    }
    let tags = take_named(&table, storage, &mut unnamed).await?;
    // The table's own tag, alone or followed by a converter's node and registration.
    let ours = |tag: &str| tags.contains(tag) || tag.starts_with(own_tag);
    // A compaction's parent: a snapshot the table has or had.
    let meta = table.metadata();
    let snapshots: HashSet<i64> = meta
        .snapshots()
        .map(|s| s.snapshot_id())
        .chain(meta.history().iter().map(|l| l.snapshot_id))
        .collect();
    let mut orphans: Vec<String> = unnamed
        .into_values()
        .filter(|location| {
            let name = file_name(location);
            conversion_tag(name).is_some_and(ours)
                || compaction(name).is_some_and(|(parent, random)| {
                    snapshots.contains(&parent) || random.starts_with(own_tag)
                })
        })
        .collect();
    orphans.sort();
    for location in &orphans {
        table.file_io().delete(location).await?;
    }
    Ok(orphans)
}

#[cfg(test)]
mod tests {
    use super::{compaction, conversion_tag};

    #[test]
    fn compactions_name_their_files_with_their_parent_snapshot_and_random_part() {
        let random = "0123456789abcdef0123456789abcdef";
        assert_eq!(
            compaction(&format!(
                "compact-00000000000000ab-{random}-00000-0.parquet"
            )),
            Some((0xab, random))
        );
        // A negative id, as `{:016x}` writes it.
        assert_eq!(
            compaction(&format!("compact-{:016x}-{random}-00001-0.parquet", -5i64)),
            Some((-5, random))
        );
        assert_eq!(compaction(&format!("compact-ab-{random}.parquet")), None);
        assert_eq!(compaction("compact-00000000000000ab-0123.parquet"), None);
        assert_eq!(compaction("p0-0-1000-1a2b3c4d-00000-0.parquet"), None);
        assert_eq!(
            compaction(&format!("compact-00000000000000zz-{random}.parquet")),
            None
        );
    }

    #[test]
    fn conversions_name_their_files_with_a_tag() {
        assert_eq!(
            conversion_tag("p0-0-1000-1a2b3c4d-00000-0.parquet"),
            Some("1a2b3c4d")
        );
        assert_eq!(
            conversion_tag("p12-5-9-1a2b3c4dn3rab12cd-00001-0.parquet"),
            Some("1a2b3c4dn3rab12cd")
        );
        // A compaction's output, another engine's file, no tag.
        assert_eq!(
            conversion_tag("compact-00000000000000ab-1a2b.parquet"),
            None
        );
        assert_eq!(conversion_tag("00000-0-1a2b3c4d-0001.parquet"), None);
        assert_eq!(conversion_tag("px-0-1000-1a2b3c4d.parquet"), None);
        assert_eq!(conversion_tag("p0-0-1000"), None);
        assert_eq!(conversion_tag("p0-0-1000-"), None);
    }
}
