//! Table routes: list, create (and stage), load, exists, drop, commit, rename, register,
//! metrics, and multi-table transactions.

use std::collections::{BTreeSet, HashMap};

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use iceberg::{ErrorKind, TableCreation, TableIdent, TableRequirement, TableUpdate};
use iceberg_catalog_rest::{
    CommitTableRequest, CommitTableResponse, CreateTableRequest, ListTablesResponse,
    LoadTableResult, RegisterTableRequest, RenameTableRequest,
};
use inlet_common::access::{TableOp, Viewer};

use super::commit::{self, Checked, MetadataPointerStore, StagedCommit};
use super::error::{RestError, Result};
use super::guard;
use super::handlers::{
    paginate, require_namespace, take_format_version, AppState, JsonBody, NamespacePath, Params,
    TablePath, LOCATION_PROPERTY,
};
use super::model::CommitTransactionRequest;
use super::names::{check_location, check_name, check_table_ident, NameKind};
use super::RestConfig;

pub(super) async fn list_tables(
    State(state): State<AppState>,
    viewer: Option<Extension<Viewer>>,
    NamespacePath(ns): NamespacePath,
    params: Params,
) -> Result<Json<ListTablesResponse>> {
    let mut tables = state
        .catalog
        .list_tables(&ns)
        .await
        .map_err(RestError::from_catalog)?;
    tables.retain(|t| guard::may_describe(&viewer, t));
    tables.sort();
    let (identifiers, next_page_token) = paginate(tables, &params, state.config.max_page_size)?;
    Ok(Json(ListTablesResponse {
        identifiers,
        next_page_token,
    }))
}

/// Creates a table, or with `stage-create` answers the metadata a create transaction starts
/// from without creating anything (the transaction's commit creates the table).
pub(super) async fn create_table(
    State(state): State<AppState>,
    viewer: Option<Extension<Viewer>>,
    NamespacePath(ns): NamespacePath,
    JsonBody(request): JsonBody<CreateTableRequest>,
) -> Result<Json<LoadTableResult>> {
    check_name(NameKind::Table, &request.name)?;
    guard::authorize(
        &viewer,
        TableOp::Create,
        &TableIdent::new(ns.clone(), request.name.clone()),
    )?;
    let allowed = &state.config.allowed_locations;
    if let Some(location) = &request.location {
        check_location(allowed, location)?;
    }
    let mut properties = request.properties;
    let format_version = take_format_version(&mut properties)?;
    let mut creation = TableCreation::builder()
        .name(request.name)
        .location_opt(request.location)
        .schema(request.schema)
        .partition_spec_opt(request.partition_spec)
        .sort_order_opt(request.write_order)
        .properties(properties)
        .format_version(format_version)
        .build();
    let catalog = state.catalog.as_ref();

    if request.stage_create == Some(true) {
        let namespace = catalog
            .get_namespace(&ns)
            .await
            .map_err(RestError::from_catalog)?;
        let ident = TableIdent::new(ns, creation.name.clone());
        if catalog
            .table_exists(&ident)
            .await
            .map_err(RestError::from_catalog)?
        {
            return Err(RestError::AlreadyExists(format!(
                "table {ident} already exists"
            )));
        }
        if creation.location.is_none() {
            let location = default_location(&state.config, namespace.properties(), &ident)?;
            check_location(allowed, &location)?;
            creation.location = Some(location);
        }
        return Ok(Json(LoadTableResult {
            metadata_location: None,
            metadata: commit::staged_metadata(creation)?,
            config: state.table_config(),
            storage_credentials: None,
        }));
    }

    let table = catalog
        .create_table(&ns, creation)
        .await
        .map_err(RestError::from_catalog_input)?;
    Ok(Json(state.load_result(&table)))
}

/// Where a staged table goes without an explicit location: under the namespace's `location`
/// property, else under the configured warehouse (the SQL catalog's rule).
fn default_location(
    config: &RestConfig,
    namespace_properties: &HashMap<String, String>,
    ident: &TableIdent,
) -> Result<String> {
    if let Some(base) = namespace_properties.get(LOCATION_PROPERTY) {
        return Ok(format!("{}/{}", base.trim_end_matches('/'), ident.name()));
    }
    match &config.warehouse_location {
        Some(warehouse) => Ok(format!(
            "{}/{}/{}",
            warehouse.trim_end_matches('/'),
            ident.namespace().join("/"),
            ident.name()
        )),
        None => Err(RestError::BadRequest(
            "stage-create needs a location: give one in the request or as the namespace's \
             location property"
                .to_string(),
        )),
    }
}

pub(super) async fn load_table(
    State(state): State<AppState>,
    TablePath(ident): TablePath,
    params: Params,
) -> Result<Json<LoadTableResult>> {
    // All snapshots are always returned: a superset of `snapshots=refs`.
    if let Some(mode) = params.0.get("snapshots") {
        if mode != "all" && mode != "refs" {
            return Err(RestError::BadRequest(format!(
                "snapshots must be all or refs, not {mode:?}"
            )));
        }
    }
    let table = state
        .catalog
        .load_table(&ident)
        .await
        .map_err(RestError::from_catalog)?;
    Ok(Json(state.load_result(&table)))
}

pub(super) async fn table_exists(
    State(state): State<AppState>,
    TablePath(ident): TablePath,
) -> Result<StatusCode> {
    if state
        .catalog
        .table_exists(&ident)
        .await
        .map_err(RestError::from_catalog)?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(RestError::NoSuchTable(format!(
            "table {ident} does not exist"
        )))
    }
}

/// Drops a table; with `purgeRequested=true` also deletes the files its metadata lists.
pub(super) async fn drop_table(
    State(state): State<AppState>,
    TablePath(ident): TablePath,
    params: Params,
) -> Result<StatusCode> {
    let catalog = state.catalog.as_ref();
    if params.bool("purgeRequested")? {
        catalog.purge_table(&ident).await
    } else {
        catalog.drop_table(&ident).await
    }
    .map_err(RestError::from_catalog)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Commits requirements and updates to one table (see the `commit` module). The body's
/// `identifier` is optional (Spark omits it); when present it must match the path.
pub(super) async fn commit_table(
    State(state): State<AppState>,
    TablePath(ident): TablePath,
    JsonBody(request): JsonBody<CommitTableRequest>,
) -> Result<Json<CommitTableResponse>> {
    if let Some(named) = &request.identifier {
        let named = check_table_ident(named)?;
        if named != ident {
            return Err(RestError::BadRequest(format!(
                "body names table {named} but the path names {ident}"
            )));
        }
    }
    if let Some(external) = &state.forward {
        let response = external
            .commit(&ident, request.requirements, request.updates)
            .await?;
        return Ok(Json(response));
    }
    let pointers = state.pointers()?;
    let catalog = state.catalog.as_ref();
    let allowed = &state.config.allowed_locations;
    let table = match catalog.load_table(&ident).await {
        Ok(table) => table,
        Err(e)
            if e.kind() == ErrorKind::TableNotFound
                && commit::asserts_create(&request.requirements) =>
        {
            return commit_create_transaction(&state, pointers, ident, request).await;
        }
        Err(e) => return Err(RestError::from_catalog(e)),
    };
    match commit::stage(table, &request.requirements, request.updates, allowed).await? {
        Checked::Unchanged(table) => Ok(Json(CommitTableResponse {
            metadata_location: table.metadata_location().unwrap_or_default().to_string(),
            metadata: table.metadata().clone(),
        })),
        Checked::Staged(staged) => {
            let staged = *staged;
            commit::publish(pointers, std::slice::from_ref(&staged)).await?;
            staged.delete_dropped_metadata(false).await;
            Ok(Json(CommitTableResponse {
                metadata_location: staged.swap.new,
                metadata: staged.metadata,
            }))
        }
    }
}

/// Finishes a create transaction: creates the table from the transaction's set-up updates,
/// then commits the remaining updates on it. Not atomic: between the two steps the new table
/// is visible without its data. If the second step fails the table is dropped again.
async fn commit_create_transaction(
    state: &AppState,
    pointers: &dyn MetadataPointerStore,
    ident: TableIdent,
    request: CommitTableRequest,
) -> Result<Json<CommitTableResponse>> {
    let catalog = state.catalog.as_ref();
    let allowed = &state.config.allowed_locations;
    let commit::CreateTransaction { mut creation, rest } =
        commit::split_create_transaction(ident.name(), request.updates)?;
    if let Some(location) = &creation.location {
        check_location(allowed, location)?;
    }
    if creation.properties.contains_key("format-version") {
        creation.format_version = take_format_version(&mut creation.properties)?;
    }
    let table = catalog
        .create_table(ident.namespace(), creation)
        .await
        .map_err(|e| match e.kind() {
            ErrorKind::TableAlreadyExists => RestError::CommitFailed(format!(
                "requirement failed: table {ident} was created concurrently"
            )),
            _ => RestError::from_catalog_input(e),
        })?;
    // The created table has a uuid of its own until the transaction's `assign-uuid` applies,
    // so a requirement on the client's uuid holds by construction.
    let client_uuid = rest.iter().find_map(|u| match u {
        TableUpdate::AssignUuid { uuid } => Some(*uuid),
        _ => None,
    });
    let others: Vec<_> = request
        .requirements
        .into_iter()
        .filter(|r| match r {
            TableRequirement::NotExist => false,
            TableRequirement::UuidMatch { uuid } => Some(*uuid) != client_uuid,
            _ => true,
        })
        .collect();
    let outcome = async {
        match commit::stage(table, &others, rest, allowed).await? {
            Checked::Unchanged(table) => Ok(CommitTableResponse {
                metadata_location: table.metadata_location().unwrap_or_default().to_string(),
                metadata: table.metadata().clone(),
            }),
            Checked::Staged(staged) => {
                let staged = *staged;
                commit::publish(pointers, std::slice::from_ref(&staged)).await?;
                staged.delete_dropped_metadata(false).await;
                Ok(CommitTableResponse {
                    metadata_location: staged.swap.new,
                    metadata: staged.metadata,
                })
            }
        }
    }
    .await;
    match outcome {
        Ok(response) => Ok(Json(response)),
        Err(err) => match catalog.drop_table(&ident).await {
            Ok(()) => Err(match err {
                RestError::CommitStateUnknown(message) => RestError::Internal(format!(
                    "{message}; the table was dropped again, so the create did not happen"
                )),
                other => other,
            }),
            Err(drop_err) => {
                tracing::warn!(table = %ident, %drop_err, "could not drop the table of a failed create transaction");
                Err(RestError::CommitStateUnknown(format!(
                    "{err}; the table was created but dropping it again failed: {drop_err}"
                )))
            }
        },
    }
}

pub(super) async fn rename_table(
    State(state): State<AppState>,
    viewer: Option<Extension<Viewer>>,
    JsonBody(request): JsonBody<RenameTableRequest>,
) -> Result<StatusCode> {
    let source = check_table_ident(&request.source)?;
    let destination = check_table_ident(&request.destination)?;
    guard::authorize(&viewer, TableOp::Drop, &source)?;
    guard::authorize(&viewer, TableOp::Create, &destination)?;
    state
        .catalog
        .rename_table(&source, &destination)
        .await
        .map_err(RestError::from_catalog)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Registers an existing metadata file as a table. `overwrite` of an existing table is not
/// supported (406).
pub(super) async fn register_table(
    State(state): State<AppState>,
    viewer: Option<Extension<Viewer>>,
    NamespacePath(ns): NamespacePath,
    JsonBody(request): JsonBody<RegisterTableRequest>,
) -> Result<Json<LoadTableResult>> {
    check_name(NameKind::Table, &request.name)?;
    guard::authorize(
        &viewer,
        TableOp::Create,
        &TableIdent::new(ns.clone(), request.name.clone()),
    )?;
    check_location(&state.config.allowed_locations, &request.metadata_location)?;
    let catalog = state.catalog.as_ref();
    // The SQL catalog would register into a namespace that does not exist.
    require_namespace(catalog, &ns).await?;
    let ident = TableIdent::new(ns, request.name);
    if request.overwrite == Some(true)
        && catalog
            .table_exists(&ident)
            .await
            .map_err(RestError::from_catalog)?
    {
        return Err(RestError::Unsupported(format!(
            "table {ident} exists and overwriting a registration is not supported"
        )));
    }
    let table = catalog
        .register_table(&ident, request.metadata_location)
        .await
        .map_err(RestError::from_catalog_input)?;
    Ok(Json(state.load_result(&table)))
}

/// Accepts a scan or commit metrics report and drops it (204).
pub(super) async fn report_metrics(
    State(state): State<AppState>,
    TablePath(ident): TablePath,
    JsonBody(report): JsonBody<serde_json::Value>,
) -> Result<StatusCode> {
    if !report.is_object() {
        return Err(RestError::BadRequest(
            "a metrics report must be a JSON object".to_string(),
        ));
    }
    table_exists(State(state), TablePath(ident)).await
}

/// Commits to several tables at once: every table's requirements are checked and its metadata
/// written, then all pointers move in one atomic swap (409 if any moved meanwhile; a table with
/// requirements but no updates takes part as an assertion that it did not move). Create
/// transactions are not accepted here (406).
pub(super) async fn commit_transaction(
    State(state): State<AppState>,
    viewer: Option<Extension<Viewer>>,
    JsonBody(body): JsonBody<serde_json::Value>,
) -> Result<StatusCode> {
    if viewer.is_some() {
        // Every table the transaction changes, before anything is decided or forwarded.
        let changes = body
            .get("table-changes")
            .and_then(|c| c.as_array())
            .map(Vec::as_slice)
            .unwrap_or_default();
        for change in changes {
            let ident: TableIdent = change
                .get("identifier")
                .cloned()
                .and_then(|i| serde_json::from_value(i).ok())
                .ok_or_else(|| {
                    RestError::BadRequest("a table change has no readable identifier".into())
                })?;
            guard::authorize(&viewer, TableOp::Write, &ident)?;
        }
    }
    if let Some(external) = &state.forward {
        let body = serde_json::to_vec(&body)
            .map_err(|e| RestError::Internal(format!("cannot encode the transaction: {e}")))?;
        external.commit_transaction(body).await?;
        return Ok(StatusCode::NO_CONTENT);
    }
    let request: CommitTransactionRequest = serde_json::from_value(body)
        .map_err(|e| RestError::BadRequest(format!("malformed request body: {e}")))?;
    let pointers = state.pointers()?;
    let catalog = state.catalog.as_ref();
    let mut seen = BTreeSet::new();
    let mut changes = Vec::with_capacity(request.table_changes.len());
    for change in request.table_changes {
        let ident = change.identifier.as_ref().ok_or_else(|| {
            RestError::BadRequest("every table change must have an identifier".to_string())
        })?;
        let ident = check_table_ident(ident)?;
        if !seen.insert(ident.clone()) {
            return Err(RestError::BadRequest(format!(
                "table {ident} appears more than once in the transaction"
            )));
        }
        changes.push((ident, change));
    }

    let mut staged: Vec<StagedCommit> = Vec::with_capacity(changes.len());
    let outcome = async {
        for (ident, change) in changes {
            let table = catalog.load_table(&ident).await.map_err(|e| {
                if e.kind() == ErrorKind::TableNotFound
                    && commit::asserts_create(&change.requirements)
                {
                    RestError::Unsupported(format!(
                        "create transactions cannot be part of a multi-table commit (table {ident})"
                    ))
                } else {
                    RestError::from_catalog(e)
                }
            })?;
            let checked = commit::stage(
                table,
                &change.requirements,
                change.updates,
                &state.config.allowed_locations,
            )
            .await?;
            staged.push(match checked {
                Checked::Staged(commit) => *commit,
                Checked::Unchanged(table) => StagedCommit::assertion(table),
            });
        }
        Ok::<(), RestError>(())
    }
    .await;
    if let Err(err) = outcome {
        commit::discard(&staged).await;
        return Err(err);
    }
    if !staged.is_empty() {
        commit::publish(pointers, &staged).await?;
        for commit in &staged {
            commit.delete_dropped_metadata(false).await;
        }
    }
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staged_tables_go_under_the_namespace_location_or_the_warehouse() {
        let ident = TableIdent::from_strs(["a", "b", "t"]).unwrap();
        let config = RestConfig {
            warehouse_location: Some("s3://bucket/wh/".to_string()),
            ..RestConfig::default()
        };
        let none = HashMap::new();
        assert_eq!(
            default_location(&config, &none, &ident).unwrap(),
            "s3://bucket/wh/a/b/t"
        );
        let placed = HashMap::from([(LOCATION_PROPERTY.to_string(), "s3://x/ns/".to_string())]);
        assert_eq!(
            default_location(&config, &placed, &ident).unwrap(),
            "s3://x/ns/t"
        );
        assert!(default_location(&RestConfig::default(), &none, &ident).is_err());
    }
}
