//! Snapshot expiry ([`Committer::expire_beyond`]): the snapshots older than an age or beyond
//! a count go, except the newest ones and those a branch or tag names; then the manifest
//! lists of the expired snapshots, and the manifests and files that only they referenced
//! (on a one-line history), are deleted.

use std::collections::{HashMap, HashSet};

use iceberg::spec::{ManifestFile, SnapshotRef, TableMetadata};
use iceberg::table::Table;
use iceberg::{TableIdent, TableRequirement, TableUpdate};

use crate::commit::{CommitError, Committer, MAIN};
use crate::reading::manifests;

impl Committer {
    /// Expires the snapshots of `ident` older than `older_than_ms` (epoch ms), keeping the
    /// newest `retain_last` (at least 1: the current one) whatever their age, and deletes the
    /// expired snapshots' manifest lists. Data files and manifests stay: in an append-only
    /// table every later snapshot still lists them. Returns how many snapshots were expired.
    pub async fn expire(
        &self,
        ident: &TableIdent,
        older_than_ms: i64,
        retain_last: usize,
    ) -> Result<usize, CommitError> {
        self.expire_beyond(ident, older_than_ms, retain_last, usize::MAX)
            .await
    }

    /// [`Committer::expire`], and also every snapshot beyond the newest `max_snapshots`
    /// whatever its age (`table.topic.expire.snapshot.max.count`): at a 1 s commit interval a
    /// day is 86,400 snapshots, and every commit rewrites `metadata.json` with all of them.
    pub async fn expire_beyond(
        &self,
        ident: &TableIdent,
        older_than_ms: i64,
        retain_last: usize,
        max_snapshots: usize,
    ) -> Result<usize, CommitError> {
        let Some(table) = self.load(ident).await? else {
            return Ok(0);
        };
        let meta = table.metadata();
        let Some(current) = meta.current_snapshot() else {
            return Ok(0);
        };
        let mut snapshots: Vec<_> = meta.snapshots().cloned().collect();
        snapshots.sort_by_key(|s| std::cmp::Reverse(s.timestamp_ms()));
        // Snapshots that a tag or a branch names stay, whatever their age: a user (or
        // another engine) pinned them.
        let referenced = ref_heads(meta);
        let keep = retain_last.max(1);
        let expired: Vec<_> = snapshots
            .iter()
            .enumerate()
            .skip(keep)
            .filter(|(newer, s)| {
                (s.timestamp_ms() < older_than_ms || *newer >= max_snapshots.max(keep))
                    && s.snapshot_id() != current.snapshot_id()
                    && !referenced.contains(&s.snapshot_id())
            })
            .map(|(_, s)| s.clone())
            .collect();
        if expired.is_empty() {
            return Ok(0);
        }
        // The manifests only the expired snapshots list, read before their lists go.
        let orphans = unreferenced(&table, &expired).await;
        let requirements = vec![TableRequirement::RefSnapshotIdMatch {
            r#ref: MAIN.to_string(),
            snapshot_id: Some(current.snapshot_id()),
        }];
        let updates = vec![TableUpdate::RemoveSnapshots {
            snapshot_ids: expired.iter().map(|s| s.snapshot_id()).collect(),
        }];
        if self
            .target
            .commit(&table, requirements, updates)
            .await?
            .is_none()
        {
            return Ok(0);
        }
        // Best effort: an unreferenced manifest list or manifest is harmless.
        let files = expired
            .iter()
            .map(|s| s.manifest_list().to_string())
            .chain(orphans.manifests)
            .chain(orphans.files);
        for file in files {
            if let Err(e) = table.file_io().delete(&file).await {
                tracing::debug!(file, error = %e, "could not delete an expired metadata file");
            }
        }
        Ok(expired.len())
    }
}

/// The snapshots that the table's refs (branches and tags, `main` too) name. iceberg-rust
/// keeps the refs private, so they are read from the metadata's JSON form (`refs`).
fn ref_heads(meta: &TableMetadata) -> HashSet<i64> {
    let Ok(json) = serde_json::to_value(meta) else {
        return HashSet::new();
    };
    json.get("refs")
        .and_then(|r| r.as_object())
        .map(|refs| {
            refs.values()
                .filter_map(|r| r.get("snapshot-id").and_then(|id| id.as_i64()))
                .collect()
        })
        .unwrap_or_default()
}

/// The manifests that `expired` list and that no other snapshot of the table lists: those merged
/// away (see `manifest_merge`) before the oldest snapshot that stays. Empty unless the history
/// is one line: every snapshot that stays is an ancestor of `main`'s head (a branch or tag
/// elsewhere keeps a snapshot off that line). Then a
/// manifest a later snapshot lists is also in the oldest one that stays, because a snapshot
/// lists its parent's manifests or new ones. Read failures also give an empty answer.
///
/// The data and delete files that those manifests hold alive and that no manifest of the
/// oldest snapshot that stays holds alive go too: files a compaction (or another engine's
/// rewrite, overwrite or delete) replaced before it. Later snapshots of a one-line history
/// never add an existing file again.
async fn unreferenced(table: &Table, expired: &[SnapshotRef]) -> Unreferenced {
    let meta = table.metadata();
    let gone: HashSet<i64> = expired.iter().map(|s| s.snapshot_id()).collect();
    let mut chain: Vec<i64> = Vec::new();
    let mut next = meta.current_snapshot().map(|s| s.snapshot_id());
    while let Some(id) = next {
        chain.push(id);
        next = meta.snapshot_by_id(id).and_then(|s| s.parent_snapshot_id());
    }
    let chain_set: HashSet<i64> = chain.iter().copied().collect();
    let stays: Vec<i64> = meta
        .snapshots()
        .map(|s| s.snapshot_id())
        .filter(|id| !gone.contains(id))
        .collect();
    if stays.iter().any(|id| !chain_set.contains(id)) {
        return Unreferenced::default();
    }
    // The chain runs newest first: the last one that stays is the oldest.
    let Some(oldest) = chain
        .iter()
        .rev()
        .find(|id| !gone.contains(id))
        .and_then(|id| meta.snapshot_by_id(*id))
    else {
        return Unreferenced::default();
    };
    let list = |snapshot: SnapshotRef| async move { manifests(table, &snapshot).await };
    let Ok(keep) = list(oldest.clone()).await else {
        return Unreferenced::default();
    };
    let kept: HashSet<&str> = keep.iter().map(|m| m.manifest_path.as_str()).collect();
    let mut orphans: HashMap<String, ManifestFile> = HashMap::new();
    for s in expired {
        match list(s.clone()).await {
            Ok(manifests) => orphans.extend(
                manifests
                    .into_iter()
                    .filter(|m| !kept.contains(m.manifest_path.as_str()))
                    .map(|m| (m.manifest_path.clone(), m)),
            ),
            Err(_) => return Unreferenced::default(),
        }
    }
    // Files live in a manifest that goes and in none that stays: replaced by a compaction
    // (or another engine's rewrite or delete) before the oldest snapshot that stays. Any
    // read failure keeps every file.
    let mut live: HashSet<String> = HashSet::new();
    for m in &keep {
        let Ok(manifest) = m.load_manifest(table.file_io()).await else {
            return Unreferenced {
                manifests: sorted(orphans.into_keys()),
                files: Vec::new(),
            };
        };
        live.extend(
            manifest
                .entries()
                .iter()
                .filter(|e| e.is_alive())
                .map(|e| e.data_file().file_path().to_string()),
        );
    }
    let mut files = HashSet::new();
    for m in orphans.values() {
        let Ok(manifest) = m.load_manifest(table.file_io()).await else {
            files.clear();
            break;
        };
        files.extend(
            manifest
                .entries()
                .iter()
                .filter(|e| e.is_alive())
                .map(|e| e.data_file().file_path().to_string())
                .filter(|f| !live.contains(f)),
        );
    }
    Unreferenced {
        manifests: sorted(orphans.into_keys()),
        files: sorted(files),
    }
}

/// What an expiry leaves unreferenced: manifests, and data and delete files.
#[derive(Debug, Default)]
struct Unreferenced {
    manifests: Vec<String>,
    files: Vec<String>,
}

fn sorted(paths: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut v: Vec<String> = paths.into_iter().collect();
    v.sort();
    v
}
