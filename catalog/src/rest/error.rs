//! Errors of the REST catalog server, each answered as the spec's `ErrorModel`
//! (`{"error": {"message", "type", "code"}}`) with the status clients act on: 404 means "does not
//! exist", 409 on a commit means "retry on fresh metadata", 500 on a commit means "state unknown,
//! do not clean up".

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use iceberg::ErrorKind;
use serde::Serialize;

/// The server's result type.
pub(super) type Result<T, E = RestError> = std::result::Result<T, E>;

/// Errors of the REST catalog server. `Display` is the message a client sees.
#[derive(Debug, thiserror::Error)]
pub enum RestError {
    /// Malformed body, path, query or name (400).
    #[error("{0}")]
    BadRequest(String),
    /// The namespace does not exist (404).
    #[error("{0}")]
    NoSuchNamespace(String),
    /// The table does not exist (404).
    #[error("{0}")]
    NoSuchTable(String),
    /// No route for this path (404).
    #[error("{0}")]
    NoSuchRoute(String),
    /// The route exists but not with this method (405).
    #[error("{0}")]
    MethodNotAllowed(String),
    /// The namespace or table already exists (409).
    #[error("{0}")]
    AlreadyExists(String),
    /// The namespace still holds tables or namespaces (409).
    #[error("{0}")]
    NamespaceNotEmpty(String),
    /// A commit requirement failed or a concurrent commit won (409): the client refreshes and
    /// retries.
    #[error("{0}")]
    CommitFailed(String),
    /// A valid request this catalog cannot serve (406).
    #[error("{0}")]
    Unsupported(String),
    /// The request body is too large (413).
    #[error("{0}")]
    PayloadTooLarge(String),
    /// A property key is both updated and removed (422).
    #[error("{0}")]
    Unprocessable(String),
    /// A commit failed in a way that may or may not have applied it (500): clients must not
    /// delete files the commit references.
    #[error("{0}")]
    CommitStateUnknown(String),
    /// A transient failure; retrying later may succeed (503).
    #[error("{0}")]
    ServiceUnavailable(String),
    /// An endpoint this server does not implement (501).
    #[error("{0}")]
    NotImplemented(String),
    /// The request did not authenticate (401).
    #[error("{0}")]
    NotAuthorized(String),
    /// The principal may not do this (403).
    #[error("{0}")]
    Forbidden(String),
    /// Anything else (500).
    #[error("{0}")]
    Internal(String),
}

impl RestError {
    /// What a caller of the catalog may do about this error.
    pub fn kind(&self) -> inlet_common::ErrorKind {
        use inlet_common::ErrorKind as Kind;
        match self {
            Self::BadRequest(_)
            | Self::NoSuchNamespace(_)
            | Self::NoSuchTable(_)
            | Self::NoSuchRoute(_)
            | Self::MethodNotAllowed(_)
            | Self::AlreadyExists(_)
            | Self::NamespaceNotEmpty(_)
            | Self::Unsupported(_)
            | Self::PayloadTooLarge(_)
            | Self::Unprocessable(_)
            | Self::NotImplemented(_)
            | Self::NotAuthorized(_)
            | Self::Forbidden(_) => Kind::BadInput,
            Self::CommitFailed(_) => Kind::Conflict,
            // Unknown: the same commit may be tried again (commit ids make it idempotent).
            Self::CommitStateUnknown(_) | Self::ServiceUnavailable(_) => Kind::Retryable,
            Self::Internal(_) => Kind::Permanent,
        }
    }

    /// The HTTP status and the spec's error `type` for this error.
    pub fn status_and_type(&self) -> (StatusCode, &'static str) {
        match self {
            Self::BadRequest(_) => (StatusCode::BAD_REQUEST, "BadRequestException"),
            Self::NoSuchNamespace(_) => (StatusCode::NOT_FOUND, "NoSuchNamespaceException"),
            Self::NoSuchTable(_) => (StatusCode::NOT_FOUND, "NoSuchTableException"),
            Self::NoSuchRoute(_) => (StatusCode::NOT_FOUND, "NotFoundException"),
            Self::MethodNotAllowed(_) => {
                (StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowedException")
            }
            Self::AlreadyExists(_) => (StatusCode::CONFLICT, "AlreadyExistsException"),
            Self::NamespaceNotEmpty(_) => (StatusCode::CONFLICT, "NamespaceNotEmptyException"),
            Self::CommitFailed(_) => (StatusCode::CONFLICT, "CommitFailedException"),
            Self::Unsupported(_) => (StatusCode::NOT_ACCEPTABLE, "UnsupportedOperationException"),
            Self::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "BadRequestException"),
            Self::Unprocessable(_) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "UnprocessableEntityException",
            ),
            Self::CommitStateUnknown(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "CommitStateUnknownException",
            ),
            Self::ServiceUnavailable(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailableException",
            ),
            Self::NotImplemented(_) => (StatusCode::NOT_IMPLEMENTED, "NotImplementedException"),
            Self::NotAuthorized(_) => (StatusCode::UNAUTHORIZED, "NotAuthorizedException"),
            Self::Forbidden(_) => (StatusCode::FORBIDDEN, "ForbiddenException"),
            Self::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "InternalServerError"),
        }
    }

    /// Maps an error of an `iceberg::Catalog` call whose input the server already validated.
    ///
    /// `DataInvalid` then means corrupt or unreadable metadata (500); handlers that pass
    /// client-supplied specs to the catalog use [`RestError::from_catalog_input`] instead.
    /// `Unexpected` errors the catalog marks retryable become 503 so clients try again.
    pub fn from_catalog(err: iceberg::Error) -> Self {
        let message = describe(&err);
        match err.kind() {
            ErrorKind::NamespaceNotFound => Self::NoSuchNamespace(message),
            ErrorKind::TableNotFound => Self::NoSuchTable(message),
            ErrorKind::NamespaceAlreadyExists | ErrorKind::TableAlreadyExists => {
                Self::AlreadyExists(message)
            }
            ErrorKind::CatalogCommitConflicts | ErrorKind::PreconditionFailed => {
                Self::CommitFailed(message)
            }
            ErrorKind::FeatureUnsupported => Self::Unsupported(message),
            _ if err.retryable() => Self::ServiceUnavailable(message),
            _ => Self::Internal(message),
        }
    }

    /// Like [`RestError::from_catalog`], for calls that carry client-supplied schemas, specs,
    /// sort orders or properties: `DataInvalid` means the client's input is invalid (400).
    pub fn from_catalog_input(err: iceberg::Error) -> Self {
        match err.kind() {
            ErrorKind::DataInvalid => Self::BadRequest(describe(&err)),
            _ => Self::from_catalog(err),
        }
    }
}

/// The message of an iceberg error with its context and source, without its kind's name
/// (the error `type` already says what kind of failure it is).
fn describe(err: &iceberg::Error) -> String {
    // `Display` is "Kind, context: { .. } => message, source: ..": keep everything after the kind.
    let full = err.to_string();
    let kind = err.kind().into_static();
    match full.strip_prefix(kind) {
        Some(rest) => {
            let rest = rest.trim_start_matches([',', ' ']);
            let rest = rest.strip_prefix("=> ").unwrap_or(rest);
            if rest.is_empty() {
                full
            } else {
                rest.to_string()
            }
        }
        None => full,
    }
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorModel<'a>,
}

#[derive(Serialize)]
struct ErrorModel<'a> {
    message: &'a str,
    r#type: &'a str,
    code: u16,
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        let (status, kind) = self.status_and_type();
        let message = self.to_string();
        if status.is_server_error() {
            tracing::warn!(status = status.as_u16(), r#type = kind, %message, "iceberg REST request failed");
        } else {
            tracing::debug!(status = status.as_u16(), r#type = kind, %message, "iceberg REST request refused");
        }
        let body = ErrorBody {
            error: ErrorModel {
                message: &message,
                r#type: kind,
                code: status.as_u16(),
            },
        };
        (status, axum::Json(body)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iceberg_kinds_map_to_spec_statuses() {
        let status = |kind, retryable| {
            let err = iceberg::Error::new(kind, "boom").with_retryable(retryable);
            RestError::from_catalog(err).status_and_type().0
        };
        assert_eq!(
            status(ErrorKind::NamespaceNotFound, false),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            status(ErrorKind::TableNotFound, false),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            status(ErrorKind::TableAlreadyExists, false),
            StatusCode::CONFLICT
        );
        assert_eq!(
            status(ErrorKind::NamespaceAlreadyExists, false),
            StatusCode::CONFLICT
        );
        assert_eq!(
            status(ErrorKind::CatalogCommitConflicts, true),
            StatusCode::CONFLICT
        );
        assert_eq!(
            status(ErrorKind::FeatureUnsupported, false),
            StatusCode::NOT_ACCEPTABLE
        );
        assert_eq!(
            status(ErrorKind::DataInvalid, false),
            StatusCode::INTERNAL_SERVER_ERROR
        );
        assert_eq!(
            status(ErrorKind::Unexpected, false),
            StatusCode::INTERNAL_SERVER_ERROR
        );
        assert_eq!(
            status(ErrorKind::Unexpected, true),
            StatusCode::SERVICE_UNAVAILABLE
        );
        let invalid = iceberg::Error::new(ErrorKind::DataInvalid, "bad schema");
        assert_eq!(
            RestError::from_catalog_input(invalid).status_and_type().0,
            StatusCode::BAD_REQUEST
        );
    }

    #[test]
    fn messages_drop_the_kind_prefix() {
        let err = iceberg::Error::new(ErrorKind::TableNotFound, "No such table: t")
            .with_context("table", "ns.t");
        let message = RestError::from_catalog(err).to_string();
        assert!(message.starts_with("context: { table: ns.t }"), "{message}");
        assert!(message.ends_with("No such table: t"), "{message}");
    }
}
