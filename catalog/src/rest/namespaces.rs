//! Namespace routes: list, create, load, exists, drop, update properties.

use std::collections::BTreeSet;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use iceberg::NamespaceIdent;
use iceberg_catalog_rest::{
    CreateNamespaceRequest, ListNamespaceResponse, NamespaceResponse,
    UpdateNamespacePropertiesRequest, UpdateNamespacePropertiesResponse,
};

use super::error::{RestError, Result};
use super::handlers::{
    check_properties, paginate, require_namespace, AppState, JsonBody, NamespacePath, Params,
};
use super::names::{check_namespace, parse_namespace};

pub(super) async fn list_namespaces(
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

pub(super) async fn create_namespace(
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

pub(super) async fn load_namespace(
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

pub(super) async fn namespace_exists(
    State(state): State<AppState>,
    NamespacePath(ns): NamespacePath,
) -> Result<StatusCode> {
    require_namespace(state.catalog.as_ref(), &ns).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Drops an empty namespace: 409 while it holds tables or nested namespaces. (The SQL catalog
/// checks only tables, and reports that as a generic error.) Not atomic with concurrent
/// creates in the namespace.
pub(super) async fn drop_namespace(
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
pub(super) async fn update_namespace_properties(
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
    if let Some(external) = &state.forward {
        // iceberg's `RestCatalog` has no update_namespace: the request goes on as it is.
        let request = UpdateNamespacePropertiesRequest {
            removals: Some(removals.into_iter().collect()),
            updates,
        };
        return Ok(Json(
            external.update_namespace_properties(&ns, &request).await?,
        ));
    }
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
}
