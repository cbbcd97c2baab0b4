//! The table-reading side of commits: a snapshot's manifests, and the live files of one or
//! more snapshots (to rebuild an upsert table's primary-key index from).

use std::collections::{HashMap, HashSet};

use iceberg::spec::{DataContentType, ManifestFile, ManifestList};
use iceberg::table::Table;
use inlet_table_worker::FileRef;
use inlet_table_worker::{LiveDataFile, LiveFiles};

use crate::commit_error::CommitError;

/// The manifests `snapshot` of `table` lists (its manifest list, read and parsed).
pub(crate) async fn manifests(
    table: &Table,
    snapshot: &iceberg::spec::Snapshot,
) -> Result<Vec<ManifestFile>, iceberg::Error> {
    let bytes = table
        .file_io()
        .new_input(snapshot.manifest_list())?
        .read()
        .await?;
    let list = ManifestList::parse_with_version(&bytes, table.metadata().format_version())?;
    Ok(list.consume_entries().into_iter().collect())
}

/// The live files of the table's current snapshot: data files (with their partition, spec id
/// and data sequence number) and position delete files, to rebuild an upsert table's
/// primary-key index from.
pub async fn live_files(table: &Table) -> Result<LiveFiles, CommitError> {
    match table.metadata().current_snapshot() {
        Some(snapshot) => Ok(live_files_of(table, std::slice::from_ref(snapshot))
            .await?
            .pop()
            .unwrap_or_default()),
        None => Ok(LiveFiles::default()),
    }
}

/// Manifests read at once by [`live_files_of`]: one after the other, a table of a hundred
/// manifests on an object store took seconds.
const MANIFEST_READ_AHEAD: usize = 16;

/// [`live_files`] of each of `snapshots` (snapshots of `table`), in their order. A manifest
/// that several list is read once.
pub async fn live_files_of(
    table: &Table,
    snapshots: &[iceberg::spec::SnapshotRef],
) -> Result<Vec<LiveFiles>, CommitError> {
    use futures::{StreamExt, TryStreamExt};
    let file_io = table.file_io();
    let mut lists = Vec::with_capacity(snapshots.len());
    for snapshot in snapshots {
        lists.push(manifests(table, snapshot).await?);
    }
    // (Owned: futures over borrowed items are not `Send` for every lifetime.)
    let mut distinct: Vec<ManifestFile> = Vec::new();
    let mut seen = HashSet::new();
    for m in lists.iter().flatten() {
        if seen.insert(m.manifest_path.as_str()) {
            distinct.push(m.clone());
        }
    }
    let loaded: HashMap<String, LiveFiles> =
        futures::stream::iter(distinct.into_iter().map(|m| async move {
            let manifest = m.load_manifest(file_io).await?;
            Ok::<_, CommitError>((m.manifest_path.clone(), manifest_live(&m, &manifest)?))
        }))
        .buffer_unordered(MANIFEST_READ_AHEAD)
        .try_collect()
        .await?;
    Ok(lists
        .iter()
        .map(|list| {
            let mut live = LiveFiles::default();
            for m in list {
                if let Some(l) = loaded.get(&m.manifest_path) {
                    live.data.extend(l.data.iter().cloned());
                    live.position_deletes
                        .extend(l.position_deletes.iter().cloned());
                }
            }
            live
        })
        .collect())
}

/// The live entries of one manifest.
fn manifest_live(
    m: &ManifestFile,
    manifest: &iceberg::spec::Manifest,
) -> Result<LiveFiles, CommitError> {
    let mut live = LiveFiles::default();
    for entry in manifest.entries() {
        if !entry.is_alive() {
            continue;
        }
        let f = entry.data_file();
        match f.content_type() {
            DataContentType::Data => live.data.push(LiveDataFile {
                file: FileRef {
                    path: f.file_path().to_string(),
                    partition: f.partition().clone(),
                    spec_id: m.partition_spec_id,
                },
                sequence_number: entry.sequence_number().unwrap_or(m.sequence_number),
            }),
            DataContentType::PositionDeletes => {
                live.position_deletes.push(f.file_path().to_string())
            }
            DataContentType::EqualityDeletes => {
                return Err(CommitError::Catalog(format!(
                    "{} has equality deletes, which upsert tables do not apply",
                    f.file_path()
                )))
            }
        }
    }
    Ok(live)
}
