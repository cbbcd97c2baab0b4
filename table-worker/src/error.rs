//! The table worker's errors: what went wrong, in words a user can act on, and which kind of
//! failure it is (bad schema, bad record, or a failure of a library underneath).

/// Errors of the table worker.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A schema with no table mapping (the top level is not a record, a recursive type, a
    /// decimal wider than 38 digits, ...) or a writer schema that cannot be read into a table's
    /// schema. Bad input: retrying does not help, the schema has to change.
    #[error("schema: {0}")]
    Schema(String),
    /// A payload that does not decode with its writer schema. Bad input confined to one record:
    /// the caller can route that record elsewhere (the dead-letter table) and continue.
    #[error("undecodable record: {0}")]
    Decode(String),
    /// An error from the Iceberg library.
    #[error(transparent)]
    Iceberg(#[from] iceberg::Error),
    /// An error from the Arrow library.
    #[error(transparent)]
    Arrow(#[from] arrow::error::ArrowError),
}
