//! The web console (docs/console.md): pages built into the binary and served at `/ui` on the
//! HTTP listener, with no install and no Node.js at run time (plain HTML, CSS and JavaScript in
//! `src/console/`, no build step), and the JSON listings they read that the node's other
//! endpoints do not give: `/v1/topics`, `/v1/groups`, `/v1/schemas` and a schema diff. The
//! pages read the rest from the endpoints every client has: `/v1/tables`, `/v1/cluster`,
//! `/metrics`, `/v1/query`.
//!
//! It also keeps an hour of the node's own figures (`history`: throughput, each table's commit
//! lag, freshness and watermark, each group's lag) in `[http] history_bytes`, served at
//! `/v1/history`, so the charts start with the last hour rather than when the page opened.
//!
//! With `[http] authentication = "token"` the pages log in like any client (a bearer token from
//! `/iceberg/v1/oauth/tokens`). An operator (ALTER on the cluster) sees every topic, group and
//! subject; any other principal sees those its ACLs let it DESCRIBE (a subject by its topic, as
//! the registry decides), and a group's partitions only of topics it may describe.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use inlet_common::access::{Named, TableOp, Viewer};
use inlet_common::history::History;
use inlet_ingest::Broker;
use inlet_schema_registry::{Deleted, Registry, VersionSpec};
use serde_json::{json, Value};

const INDEX: &str = include_str!("console/index.html");
const SCRIPT: &str = include_str!("console/app.js");
const STYLE: &str = include_str!("console/app.css");

pub(crate) mod history;

#[derive(Clone)]
struct Console {
    broker: Arc<Broker>,
    registry: Arc<Registry>,
    history: Arc<History>,
}

/// The pages (open: they hold no data) and the listings (behind the listener's guard).
pub(crate) fn routers(
    broker: Arc<Broker>,
    registry: Arc<Registry>,
    history: Arc<History>,
) -> (Router, Router) {
    let page = |body: &'static str, kind: &'static str| {
        get(move || async move { ([(header::CONTENT_TYPE, kind)], body) })
    };
    let pages = Router::new()
        .route("/ui", page(INDEX, "text/html; charset=utf-8"))
        .route("/ui/", page(INDEX, "text/html; charset=utf-8"))
        .route("/ui/app.js", page(SCRIPT, "text/javascript; charset=utf-8"))
        .route("/ui/app.css", page(STYLE, "text/css; charset=utf-8"));
    let listings = Router::new()
        .route("/v1/topics", get(topics))
        .route("/v1/groups", get(groups))
        .route("/v1/schemas", get(schemas))
        .route("/v1/schemas/{subject}/versions/{version}", get(version))
        .route("/v1/schemas/{subject}/diff", get(diff))
        .route("/v1/history", get(history_of))
        .with_state(Console {
            broker,
            registry,
            history,
        });
    (pages, listings)
}

/// Whether the viewer (when the listener authenticates) may know of `named`.
fn sees(viewer: &Option<Extension<Viewer>>, named: Named<'_>) -> bool {
    viewer.as_ref().is_none_or(|Extension(v)| v.sees(named))
}

/// 403 unless the viewer may know of `subject`.
fn subject_refused(viewer: &Option<Extension<Viewer>>, subject: &str) -> Option<Response> {
    if sees(viewer, Named::Subject(subject)) {
        return None;
    }
    let principal = viewer
        .as_ref()
        .map_or("", |Extension(v)| v.principal.as_str());
    Some(failed(
        StatusCode::FORBIDDEN,
        format!("{principal} may not read subject {subject:?} (that needs DESCRIBE on its topic)"),
    ))
}

fn failed(status: StatusCode, e: impl std::fmt::Display) -> Response {
    (status, Json(json!({"error": e.to_string()}))).into_response()
}

/// `GET /v1/topics`: every topic with its partitions' start and end offsets and, for a table
/// topic, its table and its dead-letter table when it keeps one.
async fn topics(State(c): State<Console>, viewer: Option<Extension<Viewer>>) -> Response {
    let defaults = &c.broker.config().topic_defaults;
    let mut out: Vec<Value> = c
        .broker
        .topics()
        .list()
        .iter()
        .filter(|t| sees(&viewer, Named::Topic(&t.name)))
        .map(|t| {
            let config = t.configs.table_topic(&t.name, defaults);
            let table = config
                .as_ref()
                .map(|tt| format!("{}.{}", tt.namespace, tt.table));
            // Where `table.topic.errors.tolerance=all` sends the records the table refuses.
            let dead_letters = config
                .as_ref()
                .filter(|tt| tt.tolerate_errors)
                .map(|tt| format!("{}.{}_dlq", tt.namespace, tt.table));
            let partitions: Vec<Value> = t
                .partitions
                .iter()
                .map(|p| {
                    let store = c.broker.store();
                    json!({"partition": p.index,
                           "start": store.start_offset(p.stream).ok(),
                           "end": store.end_offset(p.stream).ok()})
                })
                .collect();
            json!({"name": t.name, "table": table, "dead_letter_table": dead_letters,
                   "partitions": partitions})
        })
        .collect();
    out.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Json(Value::Array(out)).into_response()
}

/// `GET /v1/groups`: the consumer groups this node coordinates: state, members, and per
/// partition the committed offset, the end, the lag and the member it is assigned to.
async fn groups(State(c): State<Console>, viewer: Option<Extension<Viewer>>) -> Response {
    let out: Vec<Value> = c
        .broker
        .group_views()
        .into_iter()
        .filter(|g| sees(&viewer, Named::Group(&g.group)))
        .map(|g| {
            let mut owner = std::collections::BTreeMap::new();
            for m in &g.members {
                for p in &m.partitions {
                    owner.insert(p.clone(), m.member_id.clone());
                }
            }
            let mut partitions: std::collections::BTreeMap<(String, i32), Option<i64>> = g
                .offsets
                .iter()
                .map(|(t, p, o)| ((t.clone(), *p), Some(*o)))
                .collect();
            for key in owner.keys() {
                partitions.entry(key.clone()).or_insert(None);
            }
            // As OffsetFetch does: only the topics the viewer may describe.
            partitions.retain(|(topic, _), _| sees(&viewer, Named::Topic(topic)));
            let mut lag = 0u64;
            let rows: Vec<Value> = partitions
                .into_iter()
                .map(|((topic, partition), committed)| {
                    let end = c.broker.partition_end(&topic, partition);
                    let behind = match (committed, end) {
                        (Some(o), Some(e)) => Some(e.saturating_sub(o.max(0) as u64)),
                        _ => None,
                    };
                    lag += behind.unwrap_or(0);
                    json!({"topic": topic, "partition": partition, "committed": committed,
                           "end": end, "lag": behind,
                           "member": owner.get(&(topic.clone(), partition))})
                })
                .collect();
            let members: Vec<Value> = g
                .members
                .iter()
                .map(|m| {
                    json!({"member": m.member_id, "client_id": m.client_id,
                                "host": m.host, "partitions": m.partitions.len()})
                })
                .collect();
            json!({"group": g.group, "state": g.state, "lag": lag, "members": members,
                   "partitions": rows})
        })
        .collect();
    Json(Value::Array(out)).into_response()
}

/// `GET /v1/schemas`: every subject with its versions, latest schema id and type, and
/// compatibility level.
async fn schemas(State(c): State<Console>, viewer: Option<Extension<Viewer>>) -> Response {
    let subjects = match c.registry.subjects("", Deleted::Exclude).await {
        Ok(s) => s,
        Err(e) => return failed(StatusCode::SERVICE_UNAVAILABLE, e),
    };
    let mut out = Vec::new();
    for subject in subjects {
        if !sees(&viewer, Named::Subject(&subject)) {
            continue;
        }
        let (Ok(versions), Ok(latest), Ok(level)) = (
            c.registry.versions(&subject, Deleted::Exclude).await,
            c.registry
                .version(&subject, VersionSpec::Latest, false)
                .await,
            c.registry.compatibility(Some(&subject), true).await,
        ) else {
            // Deleted while listed.
            continue;
        };
        out.push(json!({
            "subject": subject, "versions": versions, "id": latest.schema.id,
            "type": latest.schema.schema_type().as_str(), "compatibility": level.to_string(),
        }));
    }
    Json(Value::Array(out)).into_response()
}

fn spec(v: &str) -> Option<VersionSpec> {
    match v {
        "latest" => Some(VersionSpec::Latest),
        n => n.parse().ok().map(VersionSpec::Number),
    }
}

/// `GET /v1/schemas/{subject}/versions/{version}`: one version's id, type and text.
async fn version(
    State(c): State<Console>,
    viewer: Option<Extension<Viewer>>,
    Path((subject, v)): Path<(String, String)>,
) -> Response {
    if let Some(refused) = subject_refused(&viewer, &subject) {
        return refused;
    }
    let Some(spec) = spec(&v) else {
        return failed(StatusCode::BAD_REQUEST, format!("{v:?} is not a version"));
    };
    match c.registry.version(&subject, spec, false).await {
        Ok(sv) => Json(json!({
            "subject": sv.subject, "version": sv.version, "id": sv.schema.id,
            "type": sv.schema.schema_type().as_str(), "schema": sv.schema.text,
        }))
        .into_response(),
        Err(e) => failed(StatusCode::NOT_FOUND, e),
    }
}

#[derive(serde::Deserialize)]
struct DiffQuery {
    from: String,
    to: Option<String>,
}

/// `GET /v1/schemas/{subject}/diff?from=V&to=W`: the field-level changes from one version to
/// another (`inlet schema diff`'s lines).
async fn diff(
    State(c): State<Console>,
    viewer: Option<Extension<Viewer>>,
    Path(subject): Path<String>,
    Query(q): Query<DiffQuery>,
) -> Response {
    if let Some(refused) = subject_refused(&viewer, &subject) {
        return refused;
    }
    let to = q.to.unwrap_or_else(|| "latest".into());
    let (Some(from), Some(to_spec)) = (spec(&q.from), spec(&to)) else {
        return failed(StatusCode::BAD_REQUEST, "from and to are versions");
    };
    let (old, new) = match (
        c.registry.version(&subject, from, false).await,
        c.registry.version(&subject, to_spec, false).await,
    ) {
        (Ok(o), Ok(n)) => (o, n),
        (Err(e), _) | (_, Err(e)) => return failed(StatusCode::NOT_FOUND, e),
    };
    let lines = inlet_cli::schema::changes(
        &inlet_cli::schema::fields(&old.schema.parsed),
        &inlet_cli::schema::fields(&new.schema.parsed),
    );
    Json(json!({"subject": subject, "from": old.version, "to": new.version, "lines": lines}))
        .into_response()
}

#[derive(serde::Deserialize)]
struct HistoryQuery {
    #[serde(default)]
    prefix: String,
}

/// `GET /v1/history?prefix=P`: the last hour of the node's own figures whose series name starts
/// with `P` (`history` names them), each as `[[unix_ms, value], ...]`, oldest first. A table's
/// series need DESCRIBE on the table, a group's DESCRIBE on the group.
async fn history_of(
    State(c): State<Console>,
    viewer: Option<Extension<Viewer>>,
    Query(q): Query<HistoryQuery>,
) -> Response {
    let keep = |name: &str| match history::Series::parse(name) {
        Some(history::Series::Table(table)) => viewer.as_ref().is_none_or(|Extension(v)| {
            let (namespace, table) = table.rsplit_once('.').unwrap_or(("", table));
            let levels: Vec<String> = namespace.split('.').map(str::to_string).collect();
            v.may(TableOp::Describe, &levels, table)
        }),
        Some(history::Series::Group(group)) => sees(&viewer, Named::Group(group)),
        Some(history::Series::Node) => true,
        None => false,
    };
    let series = c.history.series(&q.prefix, keep);
    Json(json!({
        "window_ms": history::WINDOW_MS,
        "series": series,
    }))
    .into_response()
}
