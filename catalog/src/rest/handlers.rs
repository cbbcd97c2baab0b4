//! One handler per REST route, and the extractors that turn paths, queries and bodies into
//! checked identifiers and typed requests (answering 400 in the spec's error form otherwise).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use iceberg::spec::FormatVersion;
use iceberg::table::Table;
use iceberg::{Catalog, ErrorKind, NamespaceIdent, TableCreation, TableIdent};
use iceberg_catalog_rest::{
    CommitTableRequest, CommitTableResponse, CreateNamespaceRequest, CreateTableRequest,
    ListNamespaceResponse, ListTablesResponse, LoadTableResult, NamespaceResponse,
    RegisterTableRequest, RenameTableRequest, UpdateNamespacePropertiesRequest,
    UpdateNamespacePropertiesResponse,
};
use serde::de::DeserializeOwned;

use super::commit::{self, Checked, MetadataPointerStore, StagedCommit};
use super::error::{RestError, Result};
use super::model::{CommitTransactionRequest, ConfigResponse};
use super::names::{
    check_location, check_name, check_namespace, check_table_ident, parse_namespace, NameKind,
    MAX_NAME_BYTES,
};
use super::RestConfig;

/// Namespace property that sets where the namespace's tables go (the SQL catalog's rule too).
const LOCATION_PROPERTY: &str = "location";
/// Longest namespace property value the SQL catalog stores.
const MAX_PROPERTY_VALUE_BYTES: usize = 1000;

/// What every handler shares.
#[derive(Clone, Debug)]
pub struct AppState {
    pub catalog: Arc<dyn Catalog>,
    pub pointers: Option<Arc<dyn MetadataPointerStore>>,
    pub config: Arc<RestConfig>,
}

impl AppState {
    fn pointers(&self) -> Result<&dyn MetadataPointerStore> {
        self.pointers.as_deref().ok_or_else(|| {
            RestError::NotImplemented(
                "this server has no metadata pointer store, so it cannot commit table changes"
                    .to_string(),
            )
        })
    }

    fn load_result(&self, table: &Table) -> LoadTableResult {
        LoadTableResult {
            metadata_location: table.metadata_location().map(str::to_string),
            metadata: table.metadata().clone(),
            config: self.table_config(),
            storage_credentials: None,
        }
    }

    fn table_config(&self) -> HashMap<String, String> {
        self.config
            .table_config
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// Extractors

/// A namespace from the `{namespace}` path segment, checked.
pub struct NamespacePath(pub NamespaceIdent);

impl<S: Send + Sync> FromRequestParts<S> for NamespacePath {
    type Rejection = RestError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self> {
        let Path(segments) = Path::<Vec<String>>::from_request_parts(parts, state)
            .await
            .map_err(|e| RestError::BadRequest(format!("invalid path: {e}")))?;
        let encoded = segments
            .first()
            .ok_or_else(|| RestError::BadRequest("missing namespace in path".to_string()))?;
        Ok(Self(parse_namespace(encoded)?))
    }
}

/// A table from the `{namespace}/tables/{table}` path segments, checked.
pub struct TablePath(pub TableIdent);

impl<S: Send + Sync> FromRequestParts<S> for TablePath {
    type Rejection = RestError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self> {
        let Path((namespace, table)) = Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map_err(|e| RestError::BadRequest(format!("invalid path: {e}")))?;
        let namespace = parse_namespace(&namespace)?;
        check_name(NameKind::Table, &table)?;
        Ok(Self(TableIdent::new(namespace, table)))
    }
}

/// Query parameters as a map; bad encoding is a 400.
pub struct Params(pub HashMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = RestError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self> {
        let Query(map) = Query::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map_err(|e| RestError::BadRequest(format!("invalid query: {e}")))?;
        Ok(Self(map))
    }
}

impl Params {
    fn bool(&self, name: &str) -> Result<bool> {
        match self.0.get(name).map(|v| v.to_ascii_lowercase()) {
            None => Ok(false),
            Some(v) if v == "true" => Ok(true),
            Some(v) if v == "false" || v.is_empty() => Ok(false),
            Some(v) => Err(RestError::BadRequest(format!(
                "query parameter {name} must be true or false, not {v:?}"
            ))),
        }
    }
}

/// A JSON body of type `T`. Unlike `axum::Json` it needs no content type and answers bad JSON
/// with the spec's 400 (and an oversized body with 413).
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = RestError;

    async fn from_request(req: Request, state: &S) -> Result<Self> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                RestError::PayloadTooLarge(format!("request body too large: {e}"))
            } else {
                RestError::BadRequest(format!("cannot read request body: {e}"))
            }
        })?;
        serde_json::from_slice(&bytes)
            .map(Self)
            .map_err(|e| RestError::BadRequest(format!("malformed request body: {e}")))
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// Page through a sorted list: `pageToken` is the offset of the page's first item, `pageSize`
/// is capped by the configured maximum (which also applies when the client gives none).
fn paginate<T>(
    items: Vec<T>,
    params: &Params,
    max_page_size: usize,
) -> Result<(Vec<T>, Option<String>)> {
    let parse = |name: &str| -> Result<Option<usize>> {
        match params.0.get(name).filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(v) => v.parse::<usize>().map(Some).map_err(|_| {
                RestError::BadRequest(format!("{name} must be a non-negative integer, not {v:?}"))
            }),
        }
    };
    let start = parse("pageToken")?.unwrap_or(0);
    let size = match parse("pageSize")? {
        Some(0) => {
            return Err(RestError::BadRequest(
                "pageSize must be positive".to_string(),
            ))
        }
        Some(size) => size.min(max_page_size),
        None => max_page_size,
    };
    if start > items.len() {
        return Err(RestError::BadRequest(format!(
            "pageToken {start} is past the end"
        )));
    }
    let end = start.saturating_add(size).min(items.len());
    let next = (end < items.len()).then(|| end.to_string());
    let page = items.into_iter().skip(start).take(end - start).collect();
    Ok((page, next))
}

fn check_properties(
    properties: &HashMap<String, String>,
    allowed_locations: &[String],
) -> Result<()> {
    for (key, value) in properties {
        if key.is_empty() || key.len() > MAX_NAME_BYTES {
            return Err(RestError::BadRequest(format!(
                "property keys must be 1 to {MAX_NAME_BYTES} bytes"
            )));
        }
        if value.len() > MAX_PROPERTY_VALUE_BYTES {
            return Err(RestError::BadRequest(format!(
                "value of property {key:?} is more than {MAX_PROPERTY_VALUE_BYTES} bytes"
            )));
        }
        if key == LOCATION_PROPERTY {
            check_location(allowed_locations, value)?;
        }
    }
    Ok(())
}

/// Takes the reserved `format-version` table property out of a creation's properties.
fn take_format_version(properties: &mut HashMap<String, String>) -> Result<FormatVersion> {
    match properties.remove("format-version").as_deref() {
        None | Some("2") => Ok(FormatVersion::V2),
        Some("1") => Ok(FormatVersion::V1),
        Some("3") => Ok(FormatVersion::V3),
        Some(other) => Err(RestError::BadRequest(format!(
            "unsupported format-version {other:?}: use 1, 2 or 3"
        ))),
    }
}

/// The direct children of `parent` (or the top-level namespaces) among what the catalog
/// listed. Catalogs differ here (the SQL catalog matches by string prefix, so under `a` it
/// also lists `ab` and `a.b.c`): normalizing keeps the spec's answer.
fn direct_children(
    parent: Option<&NamespaceIdent>,
    listed: Vec<NamespaceIdent>,
) -> Vec<NamespaceIdent> {
    let depth = parent.map_or(0, |p| p.len());
    let children: BTreeSet<Vec<String>> = listed
        .into_iter()
        .map(NamespaceIdent::inner)
        .filter(|levels| levels.len() > depth)
        .filter(|levels| parent.is_none_or(|p| levels[..depth] == p[..]))
        .map(|mut levels| {
            levels.truncate(depth + 1);
            levels
        })
        .collect();
    children
        .into_iter()
        .filter_map(|levels| NamespaceIdent::from_vec(levels).ok())
        .collect()
}

async fn require_namespace(catalog: &dyn Catalog, ns: &NamespaceIdent) -> Result<()> {
    if catalog
        .namespace_exists(ns)
        .await
        .map_err(RestError::from_catalog)?
    {
        Ok(())
    } else {
        Err(RestError::NoSuchNamespace(format!(
            "namespace {ns} does not exist"
        )))
    }
}

// ---------------------------------------------------------------------------------------------
// Configuration

pub async fn get_config(State(state): State<AppState>) -> Json<ConfigResponse> {
    let mut endpoints = vec![
        "GET /v1/{prefix}/namespaces",
        "POST /v1/{prefix}/namespaces",
        "GET /v1/{prefix}/namespaces/{namespace}",
        "HEAD /v1/{prefix}/namespaces/{namespace}",
        "DELETE /v1/{prefix}/namespaces/{namespace}",
        "POST /v1/{prefix}/namespaces/{namespace}/properties",
        "GET /v1/{prefix}/namespaces/{namespace}/tables",
        "POST /v1/{prefix}/namespaces/{namespace}/tables",
        "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
        "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
        "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
        "POST /v1/{prefix}/namespaces/{namespace}/register",
        "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics",
        "POST /v1/{prefix}/tables/rename",
    ];
    if state.pointers.is_some() {
        endpoints.push("POST /v1/{prefix}/namespaces/{namespace}/tables/{table}");
        endpoints.push("POST /v1/{prefix}/transactions/commit");
    }
    Json(ConfigResponse {
        defaults: state.config.defaults.clone(),
        overrides: state.config.overrides.clone(),
        endpoints: endpoints.into_iter().map(str::to_string).collect(),
    })
}

// ---------------------------------------------------------------------------------------------
// Namespaces

pub async fn list_namespaces(
    State(state): State<AppState>,
    params: Params,
) -> Result<Json<ListNamespaceResponse>> {
    let parent = match params.0.get("parent").filter(|p| !p.is_empty()) {
        Some(encoded) => Some(parse_namespace(encoded)?),
        None => None,
    };
    let listed = state
        .catalog
        .list_namespaces(parent.as_ref())
        .await
        .map_err(RestError::from_catalog)?;
    let children = direct_children(parent.as_ref(), listed);
    let (namespaces, next_page_token) = paginate(children, &params, state.config.max_page_size)?;
    Ok(Json(ListNamespaceResponse {
        namespaces,
        next_page_token,
    }))
}

pub async fn create_namespace(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<CreateNamespaceRequest>,
) -> Result<Json<NamespaceResponse>> {
    let ns = check_namespace(request.namespace.as_ref())?;
    check_properties(&request.properties, &state.config.allowed_locations)?;
    let namespace = state
        .catalog
        .create_namespace(&ns, request.properties)
        .await
        .map_err(RestError::from_catalog)?;
    Ok(Json(NamespaceResponse::from(&namespace)))
}

pub async fn load_namespace(
    State(state): State<AppState>,
    NamespacePath(ns): NamespacePath,
) -> Result<Json<NamespaceResponse>> {
    let namespace = state
        .catalog
        .get_namespace(&ns)
        .await
        .map_err(RestError::from_catalog)?;
    Ok(Json(NamespaceResponse::from(&namespace)))
}

pub async fn namespace_exists(
    State(state): State<AppState>,
    NamespacePath(ns): NamespacePath,
) -> Result<StatusCode> {
    require_namespace(state.catalog.as_ref(), &ns).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Drops an empty namespace: 409 while it holds tables or nested namespaces. (The SQL catalog
/// checks only tables, and reports that as a generic error.) Not atomic with concurrent
/// creates in the namespace.
pub async fn drop_namespace(
    State(state): State<AppState>,
    NamespacePath(ns): NamespacePath,
) -> Result<StatusCode> {
    let catalog = state.catalog.as_ref();
    require_namespace(catalog, &ns).await?;
    let tables = catalog
        .list_tables(&ns)
        .await
        .map_err(RestError::from_catalog)?;
    if !tables.is_empty() {
        return Err(RestError::NamespaceNotEmpty(format!(
            "namespace {ns} still holds {} table(s)",
            tables.len()
        )));
    }
    let listed = catalog
        .list_namespaces(Some(&ns))
        .await
        .map_err(RestError::from_catalog)?;
    let children = direct_children(Some(&ns), listed);
    if !children.is_empty() {
        return Err(RestError::NamespaceNotEmpty(format!(
            "namespace {ns} still holds {} namespace(s)",
            children.len()
        )));
    }
    catalog
        .drop_namespace(&ns)
        .await
        .map_err(RestError::from_catalog)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Sets and removes namespace properties. `iceberg::Catalog::update_namespace` takes the full
/// property set; a catalog that cannot delete properties (the SQL catalog only upserts) gets
/// 406 for removals, checked before any update is applied.
pub async fn update_namespace_properties(
    State(state): State<AppState>,
    NamespacePath(ns): NamespacePath,
    JsonBody(request): JsonBody<UpdateNamespacePropertiesRequest>,
) -> Result<Json<UpdateNamespacePropertiesResponse>> {
    let removals: BTreeSet<String> = request.removals.unwrap_or_default().into_iter().collect();
    let updates = request.updates;
    if let Some(key) = removals.iter().find(|k| updates.contains_key(*k)) {
        return Err(RestError::Unprocessable(format!(
            "property {key:?} is both updated and removed"
        )));
    }
    check_properties(&updates, &state.config.allowed_locations)?;
    let catalog = state.catalog.as_ref();
    let current = catalog
        .get_namespace(&ns)
        .await
        .map_err(RestError::from_catalog)?
        .properties()
        .clone();
    let (removed, missing): (Vec<String>, Vec<String>) =
        removals.into_iter().partition(|k| current.contains_key(k));

    if !removed.is_empty() {
        let mut without = current.clone();
        for key in &removed {
            without.remove(key);
        }
        catalog
            .update_namespace(&ns, without)
            .await
            .map_err(RestError::from_catalog)?;
        let after = catalog
            .get_namespace(&ns)
            .await
            .map_err(RestError::from_catalog)?;
        let kept: Vec<&String> = removed
            .iter()
            .filter(|k| after.properties().contains_key(*k))
            .collect();
        if !kept.is_empty() {
            return Err(RestError::Unsupported(format!(
                "this catalog cannot remove namespace properties (still present: {kept:?}); \
                 nothing was changed"
            )));
        }
    }
    let mut updated: Vec<String> = updates.keys().cloned().collect();
    updated.sort();
    if !updates.is_empty() {
        let mut properties = catalog
            .get_namespace(&ns)
            .await
            .map_err(RestError::from_catalog)?
            .properties()
            .clone();
        properties.extend(updates);
        catalog
            .update_namespace(&ns, properties)
            .await
            .map_err(RestError::from_catalog)?;
    }
    Ok(Json(UpdateNamespacePropertiesResponse {
        updated,
        removed,
        // Always present: pyiceberg requires the field.
        missing: Some(missing),
    }))
}

// ---------------------------------------------------------------------------------------------
// Tables

pub async fn list_tables(
    State(state): State<AppState>,
    NamespacePath(ns): NamespacePath,
    params: Params,
) -> Result<Json<ListTablesResponse>> {
    let mut tables = state
        .catalog
        .list_tables(&ns)
        .await
        .map_err(RestError::from_catalog)?;
    tables.sort();
    let (identifiers, next_page_token) = paginate(tables, &params, state.config.max_page_size)?;
    Ok(Json(ListTablesResponse {
        identifiers,
        next_page_token,
    }))
}

/// Creates a table, or with `stage-create` answers the metadata a create transaction starts
/// from without creating anything (the transaction's commit creates the table).
pub async fn create_table(
    State(state): State<AppState>,
    NamespacePath(ns): NamespacePath,
    JsonBody(request): JsonBody<CreateTableRequest>,
) -> Result<Json<LoadTableResult>> {
    check_name(NameKind::Table, &request.name)?;
    let allowed = &state.config.allowed_locations;
    if let Some(location) = &request.location {
        check_location(allowed, location)?;
    }
    let mut properties = request.properties;
    let format_version = take_format_version(&mut properties)?;
    let catalog = state.catalog.as_ref();

    if request.stage_create == Some(true) {
        let namespace = catalog
            .get_namespace(&ns)
            .await
            .map_err(RestError::from_catalog)?;
        let ident = TableIdent::new(ns.clone(), request.name.clone());
        if catalog
            .table_exists(&ident)
            .await
            .map_err(RestError::from_catalog)?
        {
            return Err(RestError::AlreadyExists(format!(
                "table {ident} already exists"
            )));
        }
        let location = match request.location {
            Some(location) => location,
            None => default_location(&state.config, namespace.properties(), &ident)?,
        };
        check_location(allowed, &location)?;
        let creation = TableCreation::builder()
            .name(request.name)
            .location(location)
            .schema(request.schema)
            .partition_spec_opt(request.partition_spec)
            .sort_order_opt(request.write_order)
            .properties(properties)
            .format_version(format_version)
            .build();
        let metadata = commit::staged_metadata(creation)?;
        return Ok(Json(LoadTableResult {
            metadata_location: None,
            metadata,
            config: state.table_config(),
            storage_credentials: None,
        }));
    }

    let creation = TableCreation::builder()
        .name(request.name)
        .location_opt(request.location)
        .schema(request.schema)
        .partition_spec_opt(request.partition_spec)
        .sort_order_opt(request.write_order)
        .properties(properties)
        .format_version(format_version)
        .build();
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

pub async fn load_table(
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

pub async fn table_exists(
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
pub async fn drop_table(
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
pub async fn commit_table(
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
    let others: Vec<_> = request
        .requirements
        .into_iter()
        .filter(|r| !matches!(r, iceberg::TableRequirement::NotExist))
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

pub async fn rename_table(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<RenameTableRequest>,
) -> Result<StatusCode> {
    let source = check_table_ident(&request.source)?;
    let destination = check_table_ident(&request.destination)?;
    state
        .catalog
        .rename_table(&source, &destination)
        .await
        .map_err(RestError::from_catalog)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Registers an existing metadata file as a table. `overwrite` of an existing table is not
/// supported (406).
pub async fn register_table(
    State(state): State<AppState>,
    NamespacePath(ns): NamespacePath,
    JsonBody(request): JsonBody<RegisterTableRequest>,
) -> Result<Json<LoadTableResult>> {
    check_name(NameKind::Table, &request.name)?;
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
pub async fn report_metrics(
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
/// written, then all pointers move in one atomic swap (409 if any moved meanwhile). Create
/// transactions are not accepted here (406).
pub async fn commit_transaction(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<CommitTransactionRequest>,
) -> Result<StatusCode> {
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
            if let Checked::Staged(commit) = checked {
                staged.push(*commit);
            }
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
    }
    Ok(StatusCode::NO_CONTENT)
}

// ---------------------------------------------------------------------------------------------
// Fallbacks

pub async fn no_route() -> Response {
    RestError::NoSuchRoute("no such route in the Iceberg REST catalog API".to_string())
        .into_response()
}

pub async fn wrong_method() -> Response {
    RestError::MethodNotAllowed("this route does not take this method".to_string()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(levels: &[&str]) -> NamespaceIdent {
        NamespaceIdent::from_strs(levels).unwrap()
    }

    #[test]
    fn direct_children_keep_one_level_below_the_parent() {
        let listed = vec![
            ns(&["a", "b"]),
            ns(&["a", "b", "c"]),
            ns(&["ab"]),
            ns(&["a", "d", "e"]),
        ];
        let parent = ns(&["a"]);
        assert_eq!(
            direct_children(Some(&parent), listed.clone()),
            vec![ns(&["a", "b"]), ns(&["a", "d"])]
        );
        assert_eq!(direct_children(None, listed), vec![ns(&["a"]), ns(&["ab"])]);
    }

    #[test]
    fn pages_follow_tokens() {
        let params = |pairs: &[(&str, &str)]| {
            Params(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        let items: Vec<u32> = (0..5).collect();
        let (page, next) = paginate(items.clone(), &params(&[("pageSize", "2")]), 100).unwrap();
        assert_eq!((page, next.as_deref()), (vec![0, 1], Some("2")));
        let (page, next) = paginate(
            items.clone(),
            &params(&[("pageSize", "2"), ("pageToken", "4")]),
            100,
        )
        .unwrap();
        assert_eq!((page, next), (vec![4], None));
        let (page, next) = paginate(items.clone(), &params(&[]), 3).unwrap();
        assert_eq!((page, next.as_deref()), (vec![0, 1, 2], Some("3")));
        assert!(paginate(items.clone(), &params(&[("pageSize", "0")]), 3).is_err());
        assert!(paginate(items.clone(), &params(&[("pageToken", "x")]), 3).is_err());
        assert!(paginate(items, &params(&[("pageToken", "6")]), 3).is_err());
    }

    #[test]
    fn format_version_is_taken_out_of_properties() {
        let mut props = HashMap::from([("format-version".to_string(), "1".to_string())]);
        assert_eq!(take_format_version(&mut props).unwrap(), FormatVersion::V1);
        assert!(props.is_empty());
        let mut props = HashMap::from([("format-version".to_string(), "9".to_string())]);
        assert!(take_format_version(&mut props).is_err());
    }
}
