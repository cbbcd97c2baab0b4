//! Who may use the node's HTTP APIs (the Iceberg REST catalog, SQL, watermarks, table and
//! cluster status): the questions those endpoints ask, and the trait a node answers them with
//! (`inlet_ingest::acl::http`, with the Kafka users and the Kafka ACLs). Without an
//! [`HttpAccess`] the APIs are open.

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;

/// A boxed future, for [`HttpAccess`]'s asynchronous methods.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a request does to a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TableOp {
    /// Know it exists and load its metadata; read its watermark.
    Describe,
    /// Read its rows (SQL).
    Read,
    /// Commit to it.
    Write,
    /// Create it (or register it, or rename to it).
    Create,
    /// Drop it (or rename it away).
    Drop,
}

impl TableOp {
    pub fn name(self) -> &'static str {
        match self {
            TableOp::Describe => "describe",
            TableOp::Read => "read",
            TableOp::Write => "write",
            TableOp::Create => "create",
            TableOp::Drop => "drop",
        }
    }
}

/// A topic, group or subject a listing names (the console's `/v1/topics`, `/v1/groups`,
/// `/v1/schemas`), for [`HttpAccess::allows_describe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Named<'a> {
    Topic(&'a str),
    Group(&'a str),
    /// A Schema Registry subject: decided as the registry decides reading it.
    Subject(&'a str),
}

/// Why a request was refused: unauthenticated (401) or unauthorized (403), with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    Unauthenticated(String),
    Forbidden(String),
}

/// A bearer token issued for client credentials (OAuth2's client-credentials grant).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub access_token: String,
    /// Seconds until it expires.
    pub expires_in_s: u64,
}

/// Authentication and authorization of the HTTP APIs.
pub trait HttpAccess: Send + Sync + 'static {
    /// The principal (`User:alice`) a request's `Authorization` header proves (`Basic` with a
    /// user's password, or `Bearer` with a token of [`HttpAccess::issue_token`]), from `peer`.
    fn authenticate<'a>(
        &'a self,
        authorization: Option<&'a str>,
        peer: Option<IpAddr>,
    ) -> BoxFuture<'a, Result<String, Refused>>;

    /// A bearer token for a user's credentials (`client_id` the user, `client_secret` the
    /// password).
    fn issue_token<'a>(
        &'a self,
        client_id: &'a str,
        client_secret: &'a str,
        peer: Option<IpAddr>,
    ) -> BoxFuture<'a, Result<Token, Refused>>;

    /// A new token for `user`, who holds a valid one (OAuth2's token exchange, with which
    /// Iceberg's Java client refreshes).
    fn refresh_token<'a>(&'a self, user: &'a str) -> BoxFuture<'a, Result<Token, Refused>>;

    /// Whether `principal` may perform `op` on table `table` of `namespace` (its levels).
    fn allows_table(
        &self,
        principal: &str,
        peer: Option<IpAddr>,
        op: TableOp,
        namespace: &[String],
        table: &str,
    ) -> bool;

    /// Whether `principal` may create, drop or change namespaces.
    fn allows_namespaces(&self, principal: &str, peer: Option<IpAddr>) -> bool;

    /// Whether `principal` may know of `named` and describe it (Kafka's DESCRIBE).
    fn allows_describe(&self, principal: &str, peer: Option<IpAddr>, named: Named<'_>) -> bool;
}

/// The principal a client certificate names (mTLS: `User:` and the subject's distinguished
/// name, as Kafka's SSL listeners name it), verified against the listener's truststore during
/// the TLS handshake; the listener puts it in each request's extensions. A request with no
/// `Authorization` header is that principal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertificate(pub String);

/// The principal an HTTP listener's authentication found, left in the response's extensions
/// so that the listener's audit trail can name who made a change (`src/audit.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated(pub String);

/// An authenticated request's principal, with the [`HttpAccess`] that decides for it; the
/// guard of an HTTP API hands it to the handlers, which keep to what it may see.
#[derive(Clone)]
pub struct Viewer {
    pub access: std::sync::Arc<dyn HttpAccess>,
    pub principal: String,
    pub peer: Option<IpAddr>,
}

impl Viewer {
    pub fn may(&self, op: TableOp, namespace: &[String], table: &str) -> bool {
        self.access
            .allows_table(&self.principal, self.peer, op, namespace, table)
    }

    /// Whether the viewer may see everything the node lists: an operator (who may change
    /// namespaces: ALTER on the cluster).
    pub fn operates(&self) -> bool {
        self.access.allows_namespaces(&self.principal, self.peer)
    }

    /// Whether the viewer may know of `named` (an operator knows of everything).
    pub fn sees(&self, named: Named<'_>) -> bool {
        self.operates()
            || self
                .access
                .allows_describe(&self.principal, self.peer, named)
    }
}
