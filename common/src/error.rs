//! [`ErrorKind`]: the part of an error that decides what its caller does next.

/// What a caller may do about an error. Every crate's error type has `kind()`; the retry
/// helper ([`crate::retry()`]) and the borders between crates (an HTTP status, a Kafka error
/// code) decide from it, never from the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A failure that may pass: a timeout, a dropped connection, a throttled or unavailable
    /// service. Trying again, after a backoff, is right.
    Retryable,
    /// Someone else changed the thing first (a compare-and-swap lost, a commit's base moved).
    /// Trying again on the new state may be right; the caller decides
    /// ([`crate::RetryPolicy::retry_conflicts`]).
    Conflict,
    /// The request or its data is wrong: a malformed record, an unknown topic, a bad setting.
    /// Retrying gives the same answer; the client is told why.
    BadInput,
    /// Stored bytes are not what was written (a checksum, a truncated file, an index that does
    /// not parse). Never retried and never skipped silently.
    Corruption,
    /// The component is shutting down; the work stops and is picked up on the next start.
    Shutdown,
    /// Anything else that retrying will not fix: a missing object, a refused permission, a
    /// broken invariant.
    Permanent,
}

impl ErrorKind {
    /// Whether the error may pass on its own ([`ErrorKind::Retryable`]).
    pub fn is_retryable(self) -> bool {
        self == ErrorKind::Retryable
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ErrorKind::Retryable => "retryable",
            ErrorKind::Conflict => "conflict",
            ErrorKind::BadInput => "bad input",
            ErrorKind::Corruption => "corruption",
            ErrorKind::Shutdown => "shutdown",
            ErrorKind::Permanent => "permanent",
        })
    }
}
