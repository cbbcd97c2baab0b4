//! The Iceberg REST catalog server (docs/architecture.md, "Catalog and SQL"): the HTTP API that Spark, Trino, pyiceberg
//! and DuckDB use to find Inlet's tables, served over any `iceberg::Catalog`.
//!
//! [`router`] answers the spec's routes under `/v1/...`; the binary mounts it under
//! `/iceberg`, so engines connect with `uri=http://HOST:8181/iceberg`. It owns no state of its
//! own: namespaces and tables live in the catalog, table metadata files in the object store.
//!
//! Invariants:
//! - Every name from a path or body is checked ([`names`]) before it reaches the catalog; bad
//!   input is a 400 in the spec's `ErrorModel` form, never a catalog error.
//! - Locations clients choose are confined to [`RestConfig::allowed_locations`] when set.
//! - Table commits are compare-and-swap on the table's metadata pointer (the `commit`
//!   module): a failed requirement or a concurrent commit is a 409 `CommitFailedException`,
//!   which clients answer by refreshing and retrying; an unknown outcome is a 500
//!   `CommitStateUnknownException`.
//!   Commits need a [`MetadataPointerStore`]: [`router`] without one answers commits with 501.
//! - `POST /v1/transactions/commit` is atomic across tables (one SQL transaction).
//! - After a commit, metadata files that dropped off the table's metadata log are deleted if
//!   the table sets `write.metadata.delete-after-commit.enabled` (Iceberg's default: off).
//! - In front of an external catalog ([`router_forwarding`]) the server commits nothing
//!   itself: table commits and transactions are forwarded as they are.
//! - Create transactions (`stage-create`) are served, but their commit is two steps (create,
//!   then commit the rest), so the new table is briefly visible empty; a failed second step
//!   drops it again.
//!
//! What `iceberg::Catalog` and the SQL catalog (`iceberg_catalog_sql::SqlCatalog`, Inlet's
//! embedded catalog) cannot do, and how this server covers it:
//! - No public way to build a `TableCommit` (iceberg 0.10.1), so client commits cannot go
//!   through `Catalog::update_table`: the server applies them itself and swaps the pointer
//!   through a [`MetadataPointerStore`] ([`SqlMetadataPointers`] for the SQL catalog).
//! - The SQL catalog's `update_namespace` only upserts. The server passes the full set of
//!   properties, as `iceberg::Catalog` specifies, and answers 406 (before any update is
//!   applied) if a removed key is still there. The embedded catalog
//!   ([`crate::embedded::EmbeddedSqlCatalog`]) removes keys, except the SQL catalog's
//!   `exists` marker.
//! - `drop_namespace` of a non-empty namespace is a generic error and ignores nested
//!   namespaces: the server checks both first and answers 409 `NamespaceNotEmptyException`.
//! - `list_namespaces(parent)` matches by string prefix (`a` lists `ab` and `a.b.c`): the
//!   server keeps only direct children.
//! - Namespace levels are stored joined by `.`: levels containing `.` are refused (400).
//! - `register_table` does not check the namespace (the server does, 404) and cannot
//!   overwrite (406).
//! - No staged creates: served as described above.
//!
//! Guarded ([`guarded`], with the node's `HttpAccess`), every request but the OAuth2 token
//! endpoint is authenticated and authorized first ([`guard`]).

mod commit;
mod error;
pub mod guard;
mod handlers;
mod model;
pub mod names;
mod namespaces;
mod tables;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use serde::{Deserialize, Serialize};

pub use commit::{
    publish, stage, BoxFuture, Checked, MetadataPointerStore, PointerSwap, SqlMetadataPointers,
    StagedCommit, DELETE_AFTER_COMMIT,
};
pub use error::RestError;
pub use guard::guarded;

/// Settings of the REST catalog server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RestConfig {
    /// Catalog properties clients apply before their own configuration (`defaults` of
    /// `GET /v1/config`).
    pub defaults: BTreeMap<String, String>,
    /// Catalog properties that override the client's configuration (`overrides` of
    /// `GET /v1/config`): e.g. `warehouse`, `s3.endpoint`, `s3.region`, `s3.path-style-access`.
    pub overrides: BTreeMap<String, String>,
    /// Table properties returned as the `config` of every loaded or created table, e.g. the
    /// FileIO settings engines need to read the files.
    pub table_config: BTreeMap<String, String>,
    /// Where a staged create puts a table whose request and namespace name no location:
    /// `<warehouse_location>/<namespace levels joined by />/<table>`, as the SQL catalog does.
    /// Without it such staged creates are refused (400).
    pub warehouse_location: Option<String>,
    /// Prefixes (like `s3://bucket/warehouse`) that every location a client chooses must lie
    /// under: table locations, namespace `location` properties, `set-location` updates,
    /// registered metadata files. Empty allows any location.
    pub allowed_locations: Vec<String>,
    /// Largest request body accepted, in bytes (larger ones get 413).
    pub max_body_bytes: usize,
    /// Most namespaces or tables one list response holds; clients follow `next-page-token`.
    pub max_page_size: usize,
}

impl Default for RestConfig {
    fn default() -> Self {
        Self {
            defaults: BTreeMap::new(),
            overrides: BTreeMap::new(),
            table_config: BTreeMap::new(),
            warehouse_location: None,
            allowed_locations: Vec::new(),
            max_body_bytes: 8 * 1024 * 1024,
            max_page_size: 1000,
        }
    }
}

impl RestConfig {
    /// Checks the settings, saying what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_body_bytes == 0 {
            return Err("max_body_bytes must be positive".to_string());
        }
        if self.max_page_size == 0 {
            return Err("max_page_size must be positive".to_string());
        }
        if self
            .allowed_locations
            .iter()
            .any(|p| p.trim_end_matches('/').is_empty())
        {
            return Err("allowed_locations must not contain empty prefixes".to_string());
        }
        if let Some(warehouse) = &self.warehouse_location {
            names::check_location(&self.allowed_locations, warehouse)
                .map_err(|e| format!("warehouse_location {warehouse:?} is not allowed: {e}"))?;
        }
        Ok(())
    }
}

/// The REST catalog API over `catalog`, without table commits: `POST` to a table and
/// `POST /v1/transactions/commit` answer 501, and `GET /v1/config` does not list them.
///
/// iceberg 0.10.1 offers no way to pass a client's commit to `Catalog::update_table` (see the
/// `commit` module); use [`router_with_commits`] to serve commits.
pub fn router(catalog: Arc<dyn iceberg::Catalog>, config: RestConfig) -> Router {
    build(catalog, None, None, config)
}

/// The full REST catalog API over `catalog`, committing table changes by swapping metadata
/// pointers in `pointers`, which must be the pointer store of the same catalog (for Inlet's SQL
/// catalog: [`SqlMetadataPointers`] on the same database and catalog name).
pub fn router_with_commits(
    catalog: Arc<dyn iceberg::Catalog>,
    pointers: Arc<dyn MetadataPointerStore>,
    config: RestConfig,
) -> Router {
    build(catalog, Some(pointers), None, config)
}

/// The REST catalog API in front of an external REST catalog: `catalog` (iceberg's
/// `RestCatalog` on it) answers reads and DDL, and table commits and multi-table transactions
/// are forwarded to it as they are through `external`, which decides them.
pub fn router_forwarding(
    catalog: Arc<dyn iceberg::Catalog>,
    external: Arc<crate::external::RestClient>,
    config: RestConfig,
) -> Router {
    build(catalog, None, Some(external), config)
}

fn build(
    catalog: Arc<dyn iceberg::Catalog>,
    pointers: Option<Arc<dyn MetadataPointerStore>>,
    forward: Option<Arc<crate::external::RestClient>>,
    mut config: RestConfig,
) -> Router {
    use handlers::*;
    use namespaces::*;
    use tables::*;

    config.max_page_size = config.max_page_size.max(1);
    let body_limit = config.max_body_bytes.max(1);
    let state = AppState {
        catalog,
        pointers,
        forward,
        config: Arc::new(config),
    };
    Router::new()
        .route("/v1/config", get(get_config))
        .route(
            "/v1/namespaces",
            get(list_namespaces).post(create_namespace),
        )
        .route(
            "/v1/namespaces/{namespace}",
            get(load_namespace)
                .head(namespace_exists)
                .delete(drop_namespace),
        )
        .route(
            "/v1/namespaces/{namespace}/properties",
            post(update_namespace_properties),
        )
        .route(
            "/v1/namespaces/{namespace}/tables",
            get(list_tables).post(create_table),
        )
        .route("/v1/namespaces/{namespace}/register", post(register_table))
        .route(
            "/v1/namespaces/{namespace}/tables/{table}",
            get(load_table)
                .head(table_exists)
                .delete(drop_table)
                .post(commit_table),
        )
        .route(
            "/v1/namespaces/{namespace}/tables/{table}/metrics",
            post(report_metrics),
        )
        .route("/v1/tables/rename", post(rename_table))
        .route("/v1/transactions/commit", post(commit_transaction))
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state)
}
