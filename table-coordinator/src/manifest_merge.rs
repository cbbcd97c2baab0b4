//! Manifest merging: keeps a table that commits every second from growing its manifest list
//! without bound.
//!
//! Each round adds one manifest. The manifest list of every new snapshot names all manifests,
//! so without merging it grows by one entry per commit forever (86,400 a day at a 1 s commit
//! interval), and every commit rewrites it. Like Iceberg's merge-append, a commit that finds
//! `commit.manifest.min-count-to-merge` or more small manifests of one kind (data or
//! deletes) and one partition spec rewrites them as one. A manifest of
//! `commit.manifest.target-size-bytes` or more is small no longer and is left alone.
//! `commit.manifest-merge.enabled=false` turns merging off. These are the table's own
//! properties, with Iceberg's defaults ([`MergePolicy`]): whoever owns the table (Spark,
//! pyiceberg, `ALTER TABLE ... SET TBLPROPERTIES`) tunes it the way Iceberg documents.
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

use crate::commit_error::CommitError;

/// Small manifests of one kind and spec merged once this many exist (Iceberg's default for
/// `commit.manifest.min-count-to-merge`).
pub const MIN_COUNT_TO_MERGE: usize = 100;

/// Manifests at least this long are not merged again (Iceberg's default for
/// `commit.manifest.target-size-bytes`).
pub(crate) const TARGET_MANIFEST_BYTES: i64 = 8 << 20;

/// The table properties that govern merging, by Iceberg's names.
pub(crate) const PROP_ENABLED: &str = "commit.manifest-merge.enabled";
pub(crate) const PROP_MIN_COUNT: &str = "commit.manifest.min-count-to-merge";
pub(crate) const PROP_TARGET_BYTES: &str = "commit.manifest.target-size-bytes";

/// How a table's manifests are merged: its properties, with Iceberg's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MergePolicy {
    /// `commit.manifest-merge.enabled` (true).
    pub enabled: bool,
    /// `commit.manifest.min-count-to-merge` ([`MIN_COUNT_TO_MERGE`]); at least 2, since one
    /// manifest merged alone would be rewritten on every commit for nothing.
    pub min_count: usize,
    /// `commit.manifest.target-size-bytes` ([`TARGET_MANIFEST_BYTES`]).
    pub target_bytes: i64,
}

impl Default for MergePolicy {
    fn default() -> Self {
        MergePolicy {
            enabled: true,
            min_count: MIN_COUNT_TO_MERGE,
            target_bytes: TARGET_MANIFEST_BYTES,
        }
    }
}

impl MergePolicy {
    /// The policy `properties` (a table's) set. A value that does not parse keeps the
    /// default, with a warning: another engine's typo must not stop the table's commits.
    pub fn of(properties: &std::collections::HashMap<String, String>) -> Self {
        fn read<T: std::str::FromStr>(
            properties: &std::collections::HashMap<String, String>,
            name: &str,
            default: T,
        ) -> T {
            match properties.get(name).map(|v| v.trim().parse::<T>()) {
                None => default,
                Some(Ok(v)) => v,
                Some(Err(_)) => {
                    tracing::warn!(property = name, value = %properties[name], "table property does not parse; Iceberg's default applies");
                    default
                }
            }
        }
        let default = MergePolicy::default();
        MergePolicy {
            enabled: read(properties, PROP_ENABLED, default.enabled),
            min_count: read(properties, PROP_MIN_COUNT, default.min_count).max(2),
            target_bytes: read(properties, PROP_TARGET_BYTES, default.target_bytes).max(1),
        }
    }
}

/// `existing` (the parent snapshot's manifests) with every group of at least the table's
/// [`MergePolicy::min_count`] small manifests replaced by one, written under
/// `location/metadata` for `snapshot_id`. Returns the manifests and how many were merged
/// away.
pub(crate) async fn merge(
    existing: Vec<ManifestFile>,
    meta: &TableMetadata,
    schema: &SchemaRef,
    file_io: &FileIO,
    location: &str,
    snapshot_id: i64,
) -> Result<(Vec<ManifestFile>, usize), CommitError> {
    let policy = MergePolicy::of(meta.properties());
    if !policy.enabled {
        return Ok((existing, 0));
    }
    // (content, spec id) → indexes of its small manifests.
    let mut groups: BTreeMap<(u8, i32), Vec<usize>> = BTreeMap::new();
    for (i, m) in existing.iter().enumerate() {
        if m.manifest_length < policy.target_bytes {
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
        if members.len() < policy.min_count {
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn policy(pairs: &[(&str, &str)]) -> MergePolicy {
        MergePolicy::of(
            &pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<HashMap<_, _>>(),
        )
    }

    #[test]
    fn the_tables_properties_set_the_policy_with_icebergs_defaults() {
        assert_eq!(policy(&[]), MergePolicy::default());
        assert_eq!(
            policy(&[
                (PROP_ENABLED, "false"),
                (PROP_MIN_COUNT, "5"),
                (PROP_TARGET_BYTES, "1048576"),
            ]),
            MergePolicy {
                enabled: false,
                min_count: 5,
                target_bytes: 1 << 20,
            }
        );
        // A value that does not parse keeps the default; a count below two is two.
        assert_eq!(
            policy(&[(PROP_MIN_COUNT, "many"), (PROP_ENABLED, "yes")]),
            MergePolicy::default()
        );
        assert_eq!(policy(&[(PROP_MIN_COUNT, "0")]).min_count, 2);
    }
}
