//! Who may use the REST API: authentication of each request and authorization of each
//! operation, as Confluent's security plugin names them ([`Operation`]). The registry only
//! asks; an [`Access`] answers (the node's is `inlet_ingest::acl::registry`, which checks
//! passwords against the Kafka users and operations against the Kafka ACLs). Without one the
//! API is open, as Confluent's registry is without its plugin.
//!
//! Invariants: every routed request is authenticated before its handler runs (401 and
//! `WWW-Authenticate` otherwise); an operation on one subject is authorized before its
//! handler runs (403); listings (`GET /subjects`, a schema id's subjects and versions) show
//! only the subjects the principal may read; a schema read by id needs SUBJECT_READ on one
//! of the subjects that use it (Confluent's SCHEMA_READ).

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;

/// What a request asks to do, in Confluent's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// Read a subject's versions and schemas, look a schema up in it.
    SubjectRead,
    /// Register a schema under a subject; test compatibility against it.
    SubjectWrite,
    /// Delete a subject or one of its versions.
    SubjectDelete,
    /// Read a subject's compatibility level or mode.
    SubjectCompatibilityRead,
    /// Set or delete a subject's compatibility level or mode.
    SubjectCompatibilityWrite,
    /// Read the global compatibility level or mode.
    GlobalCompatibilityRead,
    /// Set the global compatibility level or mode.
    GlobalCompatibilityWrite,
}

impl Operation {
    /// Confluent's name of the operation, as error messages give it.
    pub fn name(self) -> &'static str {
        match self {
            Operation::SubjectRead => "SUBJECT_READ",
            Operation::SubjectWrite => "SUBJECT_WRITE",
            Operation::SubjectDelete => "SUBJECT_DELETE",
            Operation::SubjectCompatibilityRead => "SUBJECT_COMPATIBILITY_READ",
            Operation::SubjectCompatibilityWrite => "SUBJECT_COMPATIBILITY_WRITE",
            Operation::GlobalCompatibilityRead => "GLOBAL_COMPATIBILITY_READ",
            Operation::GlobalCompatibilityWrite => "GLOBAL_COMPATIBILITY_WRITE",
        }
    }

    /// Whether the operation is on one subject (else on the registry as a whole).
    pub fn on_subject(self) -> bool {
        !matches!(
            self,
            Operation::GlobalCompatibilityRead | Operation::GlobalCompatibilityWrite
        )
    }
}

/// Why a request was not authenticated: answered 401 with this message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unauthenticated(pub String);

/// A boxed future, for [`Access`]'s asynchronous method.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Authentication and authorization for the REST API.
pub trait Access: Send + Sync + 'static {
    /// The principal (`User:alice`) a request's `Authorization` header proves, from `peer`.
    fn authenticate<'a>(
        &'a self,
        authorization: Option<&'a str>,
        peer: Option<IpAddr>,
    ) -> BoxFuture<'a, Result<String, Unauthenticated>>;

    /// Whether `principal`, from `peer`, may perform `op` (on `subject`, for an operation on
    /// one).
    fn allows(
        &self,
        principal: &str,
        peer: Option<IpAddr>,
        op: Operation,
        subject: Option<&str>,
    ) -> bool;
}

/// An authenticated request's principal and the [`Access`] that decides for it: handlers that
/// list subjects keep only those it may read.
#[derive(Clone)]
pub(crate) struct Viewer {
    pub(crate) access: Arc<dyn Access>,
    pub(crate) principal: String,
    pub(crate) peer: Option<IpAddr>,
}

impl Viewer {
    pub(crate) fn may_read(&self, subject: &str) -> bool {
        self.access.allows(
            &self.principal,
            self.peer,
            Operation::SubjectRead,
            Some(subject),
        )
    }
}
