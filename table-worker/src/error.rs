//! Errors of the table workers, in the tiers callers act on: a schema that cannot map or
//! evolve (bad input: a job makes dead letters of a writer schema's records when the table
//! cannot take it, and fails only for a table-wide mismatch), a payload that does not
//! decode (the record goes to the dead-letter table), and object store or catalog failures
//! (retryable), and memory pool shutdown.

/// The table worker's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A schema with no Iceberg mapping, or a change the table cannot take.
    #[error("schema: {0}")]
    Schema(String),
    /// A record whose payload does not decode with its schema.
    #[error("record does not decode: {0}")]
    Decode(String),
    #[error("iceberg: {0}")]
    Iceberg(#[from] iceberg::Error),
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    #[error(transparent)]
    Memory(#[from] crate::memory::MemoryError),
    /// The stream store failed (reading a range).
    #[error("stream store: {0}")]
    Storage(String),
}

impl Error {
    /// Whether the same call may succeed later (object store or catalog I/O).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Storage(_)) || matches!(self, Error::Iceberg(e) if e.retryable())
    }
}
