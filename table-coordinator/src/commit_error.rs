//! Why a commit failed ([`CommitError`]), and what its caller may do about it (`kind`). A
//! module of its own so that the modules a commit calls (`manifest_merge`, `control`) can
//! answer with it without importing the committer.

use inlet_catalog::rest::RestError;
use inlet_common::ErrorKind;

/// Why a commit failed.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("iceberg: {0}")]
    Iceberg(#[from] iceberg::Error),
    #[error("catalog: {0}")]
    Rest(#[source] RestError),
    /// A step of the commit that could not be done: the message says which.
    #[error("catalog: {0}")]
    Catalog(String),
    /// The table worker failed at a step of compaction: its memory, or writing or reading a
    /// data or delete file.
    #[error("{what}: {source}")]
    Worker {
        what: String,
        #[source]
        source: Box<inlet_table_worker::Error>,
    },
    /// Parquet failed while compaction read or wrote files.
    #[error("{what}: parquet: {source}")]
    Parquet {
        what: String,
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// Arrow failed while compaction filtered deleted rows out.
    #[error("compaction: arrow: {0}")]
    Arrow(#[source] arrow::error::ArrowError),
    /// A coordinator of a newer epoch has committed to the table: this one is stale and
    /// must stop ([`crate::lease`]).
    #[error("the table's last round is epoch {theirs}'s, and this coordinator's epoch is {ours}: a newer coordinator took over")]
    Fenced { ours: i64, theirs: i64 },
    /// A requirement failed or another commit won: nothing changed; retry on the new base.
    #[error("commit conflict: {0}")]
    Conflict(String),
    #[error("the table kept changing under the commit ({0} attempts)")]
    Contended(u32),
    #[error(transparent)]
    Control(#[from] crate::control::ControlError),
    /// The round's files do not fit the table's current schema (another engine changed it
    /// in a way the round's field ids cannot follow, `crate::rebase`): the round must be
    /// converted again from the table as it is.
    #[error("the round does not fit the table's schema: {0}")]
    SchemaConflict(String),
    /// The table's progress is not where the round starts: another writer committed the
    /// same records (the table is ahead), or the table was rolled back below Inlet's last
    /// round (behind). The round must be converted again from the table's progress. (`start`
    /// is 0 for a partition an [`crate::round::Round::exact_start`] round does not name.)
    #[error("the round starts partition {partition} at offset {start}, but the table's progress there is {table}")]
    NotContinuous {
        partition: i32,
        start: u64,
        table: u64,
    },
    /// The table the round was built for is no longer under its name (renamed or dropped;
    /// another table, or none, has the name now). The round must be converted again from the
    /// progress of the table that has the name.
    #[error("the table the round was built for ({expected}) is gone from its name (now {found:?}): renamed or dropped")]
    TableReplaced {
        expected: uuid::Uuid,
        found: Option<uuid::Uuid>,
    },
    /// An upsert round's base snapshot is no longer `main`'s: the round must be rebuilt.
    #[error("the table moved from snapshot {expected:?} to {found:?} under an upsert round; the round must be rebuilt on the new base")]
    BaseChanged {
        expected: Option<i64>,
        found: Option<i64>,
    },
}

impl CommitError {
    /// What the caller may do: retry (`Retryable`, and `Conflict` on the reloaded table),
    /// stop (`Shutdown`: a newer coordinator took over), or convert the round again from the
    /// table as it is (`Permanent`: the round itself can never land).
    pub fn kind(&self) -> ErrorKind {
        match self {
            CommitError::Iceberg(e) if e.retryable() => ErrorKind::Retryable,
            CommitError::Iceberg(_) => ErrorKind::Permanent,
            CommitError::Rest(e) => e.kind(),
            CommitError::Catalog(_) | CommitError::Contended(_) => ErrorKind::Retryable,
            CommitError::Worker { source, .. } => source.kind(),
            // As every compaction failure: the next run tries again from the table as it is.
            CommitError::Parquet { .. } | CommitError::Arrow(_) => ErrorKind::Retryable,
            CommitError::Control(e) => e.kind(),
            CommitError::Conflict(_) => ErrorKind::Conflict,
            CommitError::Fenced { .. } => ErrorKind::Shutdown,
            CommitError::SchemaConflict(_)
            | CommitError::NotContinuous { .. }
            | CommitError::TableReplaced { .. }
            | CommitError::BaseChanged { .. } => ErrorKind::Permanent,
        }
    }
}

impl From<RestError> for CommitError {
    fn from(e: RestError) -> Self {
        match e {
            RestError::CommitFailed(m) => CommitError::Conflict(m),
            e => CommitError::Rest(e),
        }
    }
}
