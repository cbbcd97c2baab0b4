//! Request and response bodies the `iceberg-catalog-rest` crate does not make public, in the
//! REST spec's JSON form. The rest (`CreateTableRequest`, `LoadTableResult`, ...) come from that
//! crate, which is the client side of the same spec.

use std::collections::BTreeMap;

use iceberg_catalog_rest::CommitTableRequest;
use serde::{Deserialize, Serialize};

/// `GET /v1/config` response.
#[derive(Debug, Serialize)]
pub(super) struct ConfigResponse {
    /// Properties clients apply before their own.
    pub defaults: BTreeMap<String, String>,
    /// Properties that override the client's.
    pub overrides: BTreeMap<String, String>,
    /// The routes this server serves, as `"METHOD /v1/{prefix}/path"`.
    pub endpoints: Vec<String>,
}

/// `POST /v1/transactions/commit` request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) struct CommitTransactionRequest {
    /// One commit per table; each must name its table.
    pub table_changes: Vec<CommitTableRequest>,
}
