//! One round to commit ([`Round`]) and the snapshot it may be committed on ([`RoundBase`]):
//! what the machine builds, the control stream records and the committer lands.

use std::collections::BTreeMap;

use iceberg::spec::{DataFile, Schema};

/// Which snapshot a round may be committed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RoundBase {
    /// Whatever `main` is (append-only rounds: appending is right on any base).
    #[default]
    Latest,
    /// Only this snapshot of `main` (None: the table has no snapshot yet).
    Snapshot(Option<i64>),
}

/// One round to commit.
#[derive(Debug, Clone)]
pub struct Round {
    pub commit_id: String,
    /// The schema the files were written with (the table's, possibly evolved).
    pub schema: Schema,
    pub files: Vec<DataFile>,
    /// Position delete files (upsert tables): committed with `files` as one row delta.
    pub delete_files: Vec<DataFile>,
    /// Which snapshot the round may be committed on.
    pub base: RoundBase,
    /// `table.topic.id.columns`: a table created by this round gets them as its sort order,
    /// and as identifier fields when they are all required columns.
    pub id_columns: Vec<String>,
    /// Next offset per partition after this round (all partitions, not only those with files).
    pub offsets: BTreeMap<i32, u64>,
    /// The table's watermark after this round (epoch ms), if any partition has one.
    pub watermark_ms: Option<i64>,
    /// Each partition's watermark after this round (epoch ms).
    pub partition_watermarks: BTreeMap<i32, i64>,
    /// Commit time (epoch ms), from the caller's clock.
    pub timestamp_ms: i64,
    /// The partition spec a table created by this round gets (the one its files were written
    /// with); ignored for an existing table.
    pub partition_spec: Option<iceberg::spec::UnboundPartitionSpec>,
    /// The Kafka topic id whose offsets `offsets` are ([`crate::commit::TOPIC_ID`]); None: not recorded.
    pub topic_id: Option<String>,
    /// The table's `last-column-id` when the worker that converted the round was registered:
    /// field ids above it in `schema` are the worker's own ([`crate::rebase`]).
    pub base_column_id: i32,
    /// The epoch of the coordinator that built the round ([`crate::commit::EPOCH`]); None: not fenced.
    pub epoch: Option<i64>,
    /// Where the round's records start per partition: the progress of the snapshot it was
    /// built on. The commit is refused unless the table's progress is exactly there
    /// ([`crate::commit_error::CommitError::NotContinuous`]); partitions the table has no progress for are not
    /// checked, nor, unless [`Round::exact_start`], partitions the map does not name (an empty
    /// map checks nothing).
    pub start_offsets: BTreeMap<i32, u64>,
    /// `start_offsets` is the whole progress the round was built on: a partition it does not
    /// name starts at 0, so the table's progress there must be 0 (or absent) too, and an empty
    /// map requires a table without progress. Dead-letter rounds set it: their table's
    /// progress is often empty when they are built, and two rounds built on the same empty
    /// progress (a deposed coordinator's and its successor's) must not both land. False for
    /// rounds read back from a `PRE_COMMIT` written before rounds carried it.
    pub exact_start: bool,
    /// The table the round was built for: its uuid when the coordinator read its progress.
    /// The commit is refused ([`crate::commit_error::CommitError::TableReplaced`]) when the name now holds another
    /// table or none (the table was renamed or dropped): the round's offsets continue that
    /// table's progress, not the new one's. None: whatever table has the name (created by
    /// this round if missing).
    pub table_uuid: Option<uuid::Uuid>,
}
