//! Errors of the table workers, in the tiers callers act on: a schema that cannot map or
//! evolve (bad input: a job makes dead letters of a writer schema's records when the table
//! cannot take it, and fails only for a table-wide mismatch), a payload that does not
//! decode (the record goes to the dead-letter table), and object store or catalog failures
//! (retryable), a corrupt primary-key index (corruption), and memory pool shutdown; see
//! [`Error::kind`].

/// The table worker's result type.
pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

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
    Storage(#[source] inlet_storage::Error),
    /// The primary-key index's local files could not be read or written.
    #[error("primary-key index: {what} {path}: {source}")]
    IndexIo {
        what: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A primary-key index run does not decode: the index must be rebuilt from the table.
    #[error("primary-key index: {path}: corrupt run")]
    IndexCorrupt { path: String },
}

impl Error {
    /// What the caller may do: a schema or payload the table cannot take is the input's
    /// fault; the store, the catalog and local I/O may pass; a corrupt index never does.
    pub fn kind(&self) -> inlet_common::ErrorKind {
        use inlet_common::ErrorKind as Kind;
        match self {
            Error::Schema(_) | Error::Decode(_) => Kind::BadInput,
            Error::Iceberg(e) if e.retryable() => Kind::Retryable,
            Error::Iceberg(_) | Error::Arrow(_) | Error::Parquet(_) => Kind::Permanent,
            Error::Memory(e) => e.kind(),
            Error::Storage(e) => e.kind(),
            Error::IndexIo { .. } => Kind::Retryable,
            Error::IndexCorrupt { .. } => Kind::Corruption,
        }
    }

    /// Whether the same call may succeed later.
    pub fn is_retryable(&self) -> bool {
        self.kind().is_retryable()
    }
}
