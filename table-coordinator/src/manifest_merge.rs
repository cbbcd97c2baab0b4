//! Manifest merging: keeps a table that commits every second from growing its manifest list
//! without bound.
//!
//! Each round adds one manifest. The manifest list of every new snapshot names all manifests,
//! so without merging it grows by one entry per commit forever (86,400 a day at a 1 s commit
//! interval), and every commit rewrites it. Like Iceberg's merge-append
//! (`commit.manifest-merge.enabled`), a commit that finds [`MIN_COUNT_TO_MERGE`] or more
//! small manifests of one kind (data or deletes) and one partition spec rewrites them as one.
//! A manifest of [`TARGET_MANIFEST_BYTES`] or more is small no longer and is left alone.
//!
//! Invariants:
//! - A merged manifest holds every live entry of the manifests it replaces, as `EXISTING`
//!   entries with their original snapshot id and data and file sequence numbers: which delete
//!   files apply to which data files does not change. `DELETED` entries are dropped (they
//!   only matter to the snapshot that deleted them).
//! - The round's own new manifests are never merged in the same commit: a reader of the
//!   snapshot sees its files as `ADDED`.

use std::collections::BTreeMap;

use iceberg::io::FileIO;
use iceberg::spec::{
    Manifest, ManifestContentType, ManifestFile, ManifestStatus, ManifestWriter,
    ManifestWriterBuilder, SchemaRef, TableMetadata,
};

use crate::commit::CommitError;

/// Small manifests of one kind and spec merged once this many exist (Iceberg's default for
/// `commit.manifest.min-count-to-merge`).
pub const MIN_COUNT_TO_MERGE: usize = 100;

/// Manifests at least this long are not merged again (Iceberg's default for
/// `commit.manifest.target-size-bytes`).
pub const TARGET_MANIFEST_BYTES: i64 = 8 << 20;

/// `existing` (the parent snapshot's manifests) with every group of at least
/// [`MIN_COUNT_TO_MERGE`] small manifests replaced by one, written under `location/metadata`
/// for `snapshot_id`. Returns the manifests and how many were merged away.
pub async fn merge(
    existing: Vec<ManifestFile>,
    meta: &TableMetadata,
    schema: &SchemaRef,
    file_io: &FileIO,
    location: &str,
    snapshot_id: i64,
) -> Result<(Vec<ManifestFile>, usize), CommitError> {
    // (content, spec id) → indexes of its small manifests.
    let mut groups: BTreeMap<(u8, i32), Vec<usize>> = BTreeMap::new();
    for (i, m) in existing.iter().enumerate() {
        if m.manifest_length < TARGET_MANIFEST_BYTES {
            let kind = match m.content {
                ManifestContentType::Data => 0,
                ManifestContentType::Deletes => 1,
            };
            groups
                .entry((kind, m.partition_spec_id))
                .or_default()
                .push(i);
        }
    }
    let mut merged_away = vec![false; existing.len()];
    let mut merged = Vec::new();
    for ((kind, spec_id), members) in groups {
        if members.len() < MIN_COUNT_TO_MERGE {
            continue;
        }
        let Some(spec) = meta.partition_spec_by_id(spec_id) else {
            continue;
        };
        let path = format!("{location}/metadata/{snapshot_id:016x}-merged-{kind}-{spec_id}.avro");
        let builder = ManifestWriterBuilder::new(
            file_io.new_output(&path)?,
            Some(snapshot_id),
            schema.clone(),
            spec.as_ref().clone(),
        );
        let mut writer = if kind == 0 {
            builder.build_v2_data()
        } else {
            builder.build_v2_deletes()
        };
        for &i in &members {
            let manifest = existing[i].load_manifest(file_io).await?;
            carry_entries(&mut writer, &manifest, &existing[i].manifest_path, |_| {
                false
            })?;
            merged_away[i] = true;
        }
        merged.push(writer.write_manifest_file().await?);
    }
    let count = merged_away.iter().filter(|m| **m).count();
    let mut out: Vec<ManifestFile> = existing
        .into_iter()
        .zip(merged_away)
        .filter(|(_, away)| !away)
        .map(|(m, _)| m)
        .collect();
    out.extend(merged);
    Ok((out, count))
}

/// Writes the live entries of `manifest` (read from `path`) to `writer`: those `drop` names by
/// file path as `DELETED` (by the writer's snapshot), the others as `EXISTING`, each with its
/// original snapshot id and data and file sequence numbers. Its `DELETED` entries are left out.
pub(crate) fn carry_entries(
    writer: &mut ManifestWriter,
    manifest: &Manifest,
    path: &str,
    drop: impl Fn(&str) -> bool,
) -> Result<(), CommitError> {
    for entry in manifest.entries() {
        if entry.status() == ManifestStatus::Deleted {
            continue;
        }
        let (Some(snapshot), Some(sequence)) = (entry.snapshot_id(), entry.sequence_number())
        else {
            return Err(CommitError::Catalog(format!(
                "manifest {path} has an entry without its snapshot or sequence number"
            )));
        };
        let file_sequence = entry.file_sequence_number.or(Some(sequence));
        let file = entry.data_file().clone();
        if drop(entry.file_path()) {
            writer.add_delete_file(file, sequence, file_sequence)?;
        } else {
            writer.add_existing_file(file, snapshot, sequence, file_sequence)?;
        }
    }
    Ok(())
}
