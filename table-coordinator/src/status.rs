//! What each table's coordinator reports about itself, for `/metrics`: when it last committed,
//! how far behind the partitions' ends the table is, and its watermark.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

/// One table's progress.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableStatus {
    /// Epoch ms of the last successful commit.
    pub last_commit_ms: Option<i64>,
    /// Next offset per partition in the table.
    pub committed: BTreeMap<i32, u64>,
    /// End offset per partition when the last round started.
    pub ends: BTreeMap<i32, u64>,
    pub watermark_ms: Option<i64>,
    /// Each partition's watermark as the table records it (epoch ms).
    pub partition_watermarks: BTreeMap<i32, i64>,
    pub commits: u64,
    pub failed_commits: u64,
    /// Dead-letter files waiting for the dead-letter table to take them (it refused them).
    pub pending_dead_letter_files: usize,
    /// The table's rounds wait: `pending_dead_letter_files` reached the node's bound
    /// (`[tables] dead_letter_pending_files`).
    pub held_by_dead_letters: bool,
    /// Per partition whose stream this node owns: the bytes the table has not committed
    /// (`StreamStore::table_lag_bytes`), as of the coordinator's last tick.
    pub lag_bytes: BTreeMap<i32, u64>,
}

impl TableStatus {
    /// Records the table lacks: the partitions' ends minus what is committed.
    pub fn records_behind(&self) -> u64 {
        self.ends
            .iter()
            .map(|(p, end)| end.saturating_sub(self.committed.get(p).copied().unwrap_or(0)))
            .sum()
    }
}

/// The statuses of a node's tables, by `namespace.table`.
#[derive(Debug, Clone, Default)]
pub struct Statuses(Arc<Mutex<BTreeMap<String, TableStatus>>>);

impl Statuses {
    /// Changes the status of `table`.
    pub fn update(&self, table: &str, f: impl FnOnce(&mut TableStatus)) {
        f(self.0.lock().entry(table.to_string()).or_default());
    }

    pub fn remove(&self, table: &str) {
        self.0.lock().remove(table);
    }

    /// A copy of every table's status.
    pub fn snapshot(&self) -> BTreeMap<String, TableStatus> {
        self.0.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_behind_counts_every_partition() {
        let s = Statuses::default();
        s.update("d.t", |t| {
            t.ends = [(0, 10), (1, 5)].into();
            t.committed = [(0, 7)].into();
        });
        assert_eq!(s.snapshot()["d.t"].records_behind(), 8);
        s.remove("d.t");
        assert!(s.snapshot().is_empty());
    }
}
