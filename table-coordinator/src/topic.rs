//! A table topic as its coordinator needs it ([`TableTopic`]): the coordinator, the
//! conversion on partition owners and the key checkpoints all read it.

use std::time::Duration;

use iceberg::TableIdent;
use inlet_storage::StreamId;
use inlet_table_worker::TableContext;

use crate::machine::Expiry;

/// A table topic as the coordinator needs it.
#[derive(Debug, Clone)]
pub struct TableTopic {
    /// The key the worker knows the table by (the topic's name).
    pub name: String,
    /// The Kafka topic id: rounds record it, and progress another topic id recorded (a
    /// deleted topic of the same name) is not resumed from.
    pub topic_id: String,
    pub ident: TableIdent,
    /// (partition, stream) of every partition.
    pub partitions: Vec<(i32, StreamId)>,
    /// In a cluster, an append-only table's partitions are converted on their owners
    /// ([`crate::convert`]) and handed over as chunks ([`crate::chunks`]); the coordinator
    /// converts nothing itself and commits the chunks that continue the table's progress.
    /// Then this is the chunk table; None: the node's worker converts every partition.
    pub chunks: Option<crate::chunks::Chunks>,
    /// How records convert; its `schema` is replaced by the table's.
    pub ctx: TableContext,
    pub commit_interval: Duration,
    /// `table.topic.watermark.idle.ms`: a partition without new records this long stops
    /// holding the table watermark back. None: off.
    pub watermark_idle: Option<Duration>,
    /// Snapshot expiry (`table.topic.expire.snapshot.*`): see [`Expiry`]. None: off.
    pub expire: Option<Expiry>,
    /// `table.topic.compaction.interval.ms`: the least time between two compaction runs;
    /// None: never. See [`crate::compact::default_interval`].
    pub compaction_interval: Option<Duration>,
    /// `[tables] compaction_*`: how often and how much compaction works.
    pub compaction: crate::compact::CompactionTuning,
    /// `[tables] expire_every_commits`: commits between two expiry runs (when `expire` is on).
    pub expire_every: u64,
    /// `[tables] dead_letter_pending_files`: while the dead-letter table refuses commits, its
    /// files are carried from round to round (in memory and in every `PRE_COMMIT`); at this
    /// many the table's rounds wait until it takes them. Nothing is lost meanwhile: the records
    /// stay in the stream.
    pub dead_letter_pending_files: usize,
    /// `[tables] orphan_files_*`: how the coordinator sweeps the table's orphan files
    /// ([`crate::orphans`]); None, or a committer without file listing: never.
    pub orphans: Option<crate::orphans::OrphanSweep>,
}
