//! object_store errors as iceberg errors: the kind says what went wrong, `retryable()` whether
//! the same call may succeed later, and the object_store error stays the source.

use iceberg::{Error, ErrorKind};

/// Wraps a failed object store call; `doing` completes "could not … <location>".
///
/// iceberg has no file-not-found kind: a missing object is `DataInvalid` (as in iceberg's own
/// file IO) and [`is_not_found`] tells it apart. Failures the store does not classify
/// (`Generic`: network, throttling, 5xx, timeouts) are retryable; refusals are not.
pub(crate) fn from_object_store(doing: &str, location: &str, err: object_store::Error) -> Error {
    use object_store::Error as E;
    let (kind, retryable, why) = match &err {
        E::NotFound { .. } => (ErrorKind::DataInvalid, false, "no such object"),
        E::AlreadyExists { .. } => (ErrorKind::PreconditionFailed, false, "it already exists"),
        E::Precondition { .. } | E::NotModified { .. } => (
            ErrorKind::PreconditionFailed,
            false,
            "a precondition failed",
        ),
        E::InvalidPath { .. } => (ErrorKind::DataInvalid, false, "invalid object key"),
        E::NotSupported { .. } | E::NotImplemented { .. } => (
            ErrorKind::FeatureUnsupported,
            false,
            "the object store does not support this",
        ),
        E::PermissionDenied { .. } => (ErrorKind::Unexpected, false, "permission denied"),
        E::Unauthenticated { .. } => (ErrorKind::Unexpected, false, "not authenticated"),
        E::UnknownConfigurationKey { .. } => (
            ErrorKind::DataInvalid,
            false,
            "bad object store configuration",
        ),
        // Generic, JoinError and whatever object_store adds later: transient until known.
        _ => (ErrorKind::Unexpected, true, "object store failure"),
    };
    Error::new(kind, format!("could not {doing} {location}: {why}"))
        .with_retryable(retryable)
        .with_source(err)
}

/// Whether `err` says an object does not exist (an object_store `NotFound` underneath).
pub fn is_not_found(err: &Error) -> bool {
    let mut source = std::error::Error::source(err);
    while let Some(e) = source {
        if let Some(object_store::Error::NotFound { .. }) = e.downcast_ref::<object_store::Error>()
        {
            return true;
        }
        source = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic() -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: "503 Slow Down".into(),
        }
    }

    #[test]
    fn kinds_and_retryability() {
        let not_found = from_object_store(
            "read",
            "s3://b/x",
            object_store::Error::NotFound {
                path: "x".into(),
                source: "404".into(),
            },
        );
        assert_eq!(not_found.kind(), ErrorKind::DataInvalid);
        assert!(!not_found.retryable());
        assert!(is_not_found(&not_found));
        assert!(
            not_found.to_string().contains("no such object"),
            "{not_found}"
        );

        let transient = from_object_store("read", "s3://b/x", generic());
        assert_eq!(transient.kind(), ErrorKind::Unexpected);
        assert!(transient.retryable());
        assert!(!is_not_found(&transient));
        let text = transient.to_string();
        assert!(
            text.contains("s3://b/x") && text.contains("503 Slow Down"),
            "{text}"
        );

        let denied = from_object_store(
            "write",
            "s3://b/x",
            object_store::Error::PermissionDenied {
                path: "x".into(),
                source: "403".into(),
            },
        );
        assert!(!denied.retryable());
        let exists = from_object_store(
            "write",
            "s3://b/x",
            object_store::Error::AlreadyExists {
                path: "x".into(),
                source: "412".into(),
            },
        );
        assert_eq!(exists.kind(), ErrorKind::PreconditionFailed);
        assert!(!exists.retryable());
    }
}
