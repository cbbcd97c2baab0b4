//! The stream store's error type. Every error says which [`ErrorKind`] it is (the one kind
//! shared by every crate, `inlet_common::ErrorKind`), so callers decide what to do without
//! matching on messages: retry it, report bad input, stop on corruption, give up because the
//! store is shutting down, or report a bug (`Permanent`).

use std::io;

pub use inlet_common::ErrorKind;

/// Errors of the stream store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("stream {0} does not exist")]
    UnknownStream(String),
    #[error("stream {name:?} already exists")]
    StreamExists { name: String },
    #[error("offset {offset} is out of range for stream {stream} (start {start}, end {end})")]
    OffsetOutOfRange {
        stream: u64,
        offset: u64,
        start: u64,
        end: u64,
    },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("append of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    #[error("WAL I/O error at {path}: {source}")]
    WalIo {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error(
        "the WAL failed a durable write earlier ({0}); restart the node to recover from the WAL"
    )]
    WalFailed(String),
    #[error("corrupt data in {location}: {detail}")]
    Corrupt { location: String, detail: String },
    #[error("object store error on {op} {path}: {source}")]
    ObjectStore {
        op: &'static str,
        path: String,
        #[source]
        source: object_store::Error,
    },
    #[error("metadata store error: {0}")]
    Meta(#[from] sqlx::Error),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("the stream store is shut down")]
    Shutdown,
    /// Another node took the stream (it raised the stream's epoch past `epoch`, to `now`): the
    /// commit made under `epoch` was refused and changed nothing.
    #[error(
        "stream {stream} is fenced: this node held it under epoch {epoch}, which is now {now}"
    )]
    Fenced { stream: u64, epoch: u64, now: u64 },
    /// This node does not own the stream (another node does, or nobody yet); ask the owner.
    #[error("stream {0} is not owned by this node")]
    NotOwner(u64),
    /// The object-store WAL failed to make a group durable; the appends in it were not stored.
    #[error("the object-store WAL could not store the append: {0}")]
    ObjectWal(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// Which kind of failure this is; see [`ErrorKind`].
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::UnknownStream(_)
            | Error::StreamExists { .. }
            | Error::OffsetOutOfRange { .. }
            | Error::InvalidArgument(_)
            | Error::TooLarge { .. }
            | Error::Config(_) => ErrorKind::BadInput,
            Error::Corrupt { .. } => ErrorKind::Corruption,
            Error::WalFailed(_) | Error::Shutdown => ErrorKind::Shutdown,
            Error::Fenced { .. } | Error::NotOwner(_) => ErrorKind::Conflict,
            Error::ObjectWal(_) => ErrorKind::Retryable,
            Error::Internal(_) => ErrorKind::Permanent,
            Error::WalIo { .. } => ErrorKind::Shutdown,
            Error::ObjectStore { source, .. } => match source {
                object_store::Error::NotFound { .. }
                | object_store::Error::InvalidPath { .. }
                | object_store::Error::NotSupported { .. }
                | object_store::Error::AlreadyExists { .. }
                | object_store::Error::PermissionDenied { .. }
                | object_store::Error::Unauthenticated { .. }
                | object_store::Error::UnknownConfigurationKey { .. } => ErrorKind::BadInput,
                _ => ErrorKind::Retryable,
            },
            Error::Meta(e) => meta_error_kind(e),
        }
    }

    /// Whether retrying the same call later may succeed.
    pub fn is_retryable(&self) -> bool {
        self.kind() == ErrorKind::Retryable
    }

    pub(crate) fn corrupt(location: impl Into<String>, detail: impl Into<String>) -> Self {
        Error::Corrupt {
            location: location.into(),
            detail: detail.into(),
        }
    }

    pub(crate) fn wal_io(path: &std::path::Path, source: io::Error) -> Self {
        Error::WalIo {
            path: path.display().to_string(),
            source,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The kind of a metadata store error (SQLite or PostgreSQL through sqlx), for every crate that
/// talks to the store: connection and pool failures, SQLite's BUSY and LOCKED, and PostgreSQL's
/// serialization and deadlock failures may pass; anything else is the statement's own fault.
/// Whether a metadata store error code may pass on a retry: SQLite's BUSY (5) and LOCKED (6);
/// PostgreSQL's serialization failure and deadlock (40001, 40P01), the session bounds
/// (`lock_timeout` 55P03, `statement_timeout` 57014, `idle_in_transaction_session_timeout`
/// 25P03), a server shutting down, restarting or starting up (57P01 to 57P03), and every
/// connection exception (class 08). A statement that failed this way did not commit.
fn passes(code: &str) -> bool {
    matches!(
        code,
        "5" | "6" | "40001" | "40P01" | "55P03" | "57014" | "25P03" | "57P01" | "57P02" | "57P03"
    ) || code.starts_with("08")
}

pub fn meta_error_kind(e: &sqlx::Error) -> ErrorKind {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Tls(_) => ErrorKind::Retryable,
        sqlx::Error::Database(db) => match db.code().as_deref() {
            Some(code) if passes(code) => ErrorKind::Retryable,
            _ => ErrorKind::BadInput,
        },
        _ => ErrorKind::BadInput,
    }
}

#[cfg(test)]
mod tests {
    use super::passes;

    #[test]
    fn the_errors_that_pass_are_the_transient_ones() {
        for code in [
            "5", "6", "40001", "40P01", "55P03", "57014", "25P03", "57P01", "57P03", "08006",
            "08003",
        ] {
            assert!(passes(code), "{code}");
        }
        for code in ["23505", "42P01", "22P02", "42601", "0A000"] {
            assert!(!passes(code), "{code}");
        }
    }
}
