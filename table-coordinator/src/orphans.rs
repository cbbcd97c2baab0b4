//! Orphan files: files Inlet wrote into a table's `data/` folder that no snapshot names and
//! that nothing will commit any more. They come from conversions that did not land: a chunk
//! the coordinator refused or another node's chunk of the same range won
//! ([`crate::chunks`]), a range a node converted again under new names, an upsert round
//! dropped on re-registration, a crash between an upload and its commit. Nothing else ever
//! deletes them, so each coordinator sweeps its table (and its dead-letter table) every
//! [`OrphanSweep::every`]: files older than [`OrphanSweep::older_than`] that no snapshot of
//! the table names and no pending round or chunk holds are deleted.
//!
//! Invariants:
//! - Only files Inlet's conversions wrote for *this* table are candidates: in the table's
//!   `data/` folder, named `p<partition>-<from>-<next>-<tag>…` where the tag is the table's
//!   uuid's first digits ([`inlet_table_worker::TableContext::file_tag`]). Another engine's
//!   files, compaction outputs and files of an older table at the same location are never
//!   touched; nor are a first round's files, written under a random tag before the table
//!   existed.
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

use std::collections::HashSet;
use std::time::Duration;

use iceberg::spec::{ManifestFile, ManifestList};
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

/// The tag a table's conversions put in their file names (the first digits of its uuid).
pub(crate) fn file_tag(table: &Table) -> String {
    table.metadata().uuid().simple().to_string()[..8].to_string()
}

/// Whether `name` (a file name, no folder) is one a conversion tagged `tag` writes:
/// `p<partition>-<from>-<next>-<tag>…`.
fn converted_with(name: &str, tag: &str) -> bool {
    let mut parts = name.splitn(4, '-');
    let numeric =
        |s: Option<&str>| s.is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()));
    let partition = parts.next().and_then(|p| p.strip_prefix('p'));
    numeric(partition)
        && numeric(parts.next())
        && numeric(parts.next())
        && parts.next().is_some_and(|rest| rest.starts_with(tag))
}

/// The files under `data_location` that conversions tagged `tag` wrote and that were last
/// written before `cutoff_ms`: the candidates, as locations.
pub(crate) async fn candidates(
    storage: &ObjectStoreStorage,
    data_location: &str,
    tag: &str,
    cutoff_ms: i64,
) -> Result<Vec<String>, CommitError> {
    let listed = storage.list(data_location).await?;
    Ok(listed
        .into_iter()
        .filter(|f| f.last_modified_ms < cutoff_ms)
        .filter(|f| {
            let name = f.location.rsplit('/').next().unwrap_or_default();
            converted_with(name, tag)
        })
        .map(|f| f.location)
        .collect())
}

/// Every file a manifest of any snapshot of `table` names (data and delete files, live or
/// not), as object keys.
async fn referenced(
    table: &Table,
    storage: &ObjectStoreStorage,
) -> Result<HashSet<String>, CommitError> {
    let meta = table.metadata();
    let mut manifests = HashSet::new();
    let mut files = HashSet::new();
    for snapshot in meta.snapshots() {
        let bytes = table
            .file_io()
            .new_input(snapshot.manifest_list())?
            .read()
            .await?;
        let list = ManifestList::parse_with_version(&bytes, meta.format_version())?;
        let entries: Vec<ManifestFile> = list.consume_entries().into_iter().collect();
        for m in entries {
            if !manifests.insert(m.manifest_path.clone()) {
                continue;
            }
            let manifest = m.load_manifest(table.file_io()).await?;
            for entry in manifest.entries() {
                files.insert(key(storage, entry.data_file().file_path())?);
            }
        }
    }
    Ok(files)
}

/// The object key of `location`; a location outside the root cannot be compared with the
/// listing, so it stops the sweep.
fn key(storage: &ObjectStoreStorage, location: &str) -> Result<String, CommitError> {
    Ok(storage.object_key(location)?.to_string())
}

/// Deletes the `candidates` of `ident` that neither `keep` (locations) nor any snapshot of
/// the table names, reading the table now (after `keep` was read). Returns what it deleted.
pub(crate) async fn remove(
    committer: &Committer,
    storage: &ObjectStoreStorage,
    ident: &TableIdent,
    candidates: Vec<String>,
    keep: &HashSet<String>,
) -> Result<Vec<String>, CommitError> {
    let Some(table) = committer.load(ident).await? else {
        return Ok(Vec::new());
    };
    let mut named = referenced(&table, storage).await?;
    for location in keep {
        named.insert(key(storage, location)?);
    }
    let mut removed = Vec::new();
    for location in candidates {
        if named.contains(&key(storage, &location)?) {
            continue;
        }
        table.file_io().delete(&location).await?;
        removed.push(location);
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::converted_with;

    #[test]
    fn only_this_tables_conversions_are_candidates() {
        assert!(converted_with(
            "p0-0-1000-1a2b3c4d-00000-0.parquet",
            "1a2b3c4d"
        ));
        assert!(converted_with(
            "p12-5-9-1a2b3c4dn3-00001-0.parquet",
            "1a2b3c4d"
        ));
        // Another table's tag, a compaction's output, another engine's file.
        assert!(!converted_with(
            "p0-0-1000-ffffffff-00000-0.parquet",
            "1a2b3c4d"
        ));
        assert!(!converted_with(
            "compact-00000000000000ab-1a2b3c4d.parquet",
            "1a2b3c4d"
        ));
        assert!(!converted_with("00000-0-1a2b3c4d-0001.parquet", "1a2b3c4d"));
        assert!(!converted_with("px-0-1000-1a2b3c4d.parquet", "1a2b3c4d"));
        assert!(!converted_with("p0-0-1000", "1a2b3c4d"));
    }
}
