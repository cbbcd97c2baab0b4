//! The node's HTTP listener (docs/architecture.md, "HTTP endpoints"): `/healthz`, Prometheus `/metrics`, each table
//! topic's commit lag at `/v1/tables[/{namespace}/{table}]`, watermarks at
//! `/v1/watermarks/{namespace}/{table}`, read-only SQL at `POST /v1/query`, the Iceberg REST
//! catalog under `/iceberg`, and the web console at `/ui` with its listings (`console`).
//!
//! With `[http] authentication = "token"` (an `HttpAccess`), every endpoint but `/healthz`
//! and the catalog's token endpoint authenticates its requests; the catalog authorizes each
//! (`inlet_catalog::rest::guard`), a watermark needs DESCRIBE on its table, and a query sees
//! only the tables its principal may read (`inlet_catalog::visible`).

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use inlet_common::access::HttpAccess;
use inlet_ingest::Broker;
use inlet_table_coordinator::{Statuses, TableStatus};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// A request of the CLI (`inlet query`, `inlet watermark`) to a node's HTTP listener, with the
/// bearer token of `INLET_TOKEN` when it is set (a node with `[http] authentication = "token"`
/// wants one; `/iceberg/v1/oauth/tokens` issues them).
pub(crate) fn with_token(request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    match std::env::var("INLET_TOKEN") {
        Ok(token) if !token.is_empty() => request.bearer_auth(token),
        _ => request,
    }
}

/// What the HTTP handlers read.
#[derive(Clone)]
struct Node {
    broker: Arc<Broker>,
    tables: Statuses,
}

#[allow(clippy::too_many_arguments)] // the listener's parts, each passed once at start
pub(crate) async fn serve(
    listener: TcpListener,
    broker: Arc<Broker>,
    registry: Arc<inlet_schema_registry::Registry>,
    tables: Statuses,
    history: Arc<inlet_common::history::History>,
    catalog: Arc<dyn iceberg::Catalog>,
    query: inlet_query::QueryConfig,
    iceberg: Router,
    access: Option<Arc<dyn HttpAccess>>,
    tls: Option<Arc<inlet_ingest::tls::Tls>>,
    stop: CancellationToken,
) {
    let watermarks = Router::new()
        .route(
            "/v1/watermarks/{namespace}/{table}",
            get(crate::watermark::get),
        )
        .with_state(catalog.clone());
    let sql = Router::new()
        .route("/v1/query", axum::routing::post(crate::sql::post))
        .with_state((catalog, query));
    let (pages, listings) = crate::console::routers(broker.clone(), registry, history);
    let node = Node { broker, tables };
    let open = Router::new()
        .route("/healthz", get(healthz))
        .with_state(node.clone())
        .merge(pages);
    let mut guarded = Router::new()
        .route("/metrics", get(metrics))
        .route("/v1/tables", get(tables_status))
        .route("/v1/tables/{namespace}/{table}", get(table_status))
        .route("/v1/cluster", get(cluster))
        .with_state(node)
        .merge(watermarks)
        .merge(sql)
        .merge(listings);
    let mut iceberg = iceberg;
    if let Some(access) = access {
        guarded = guarded.route_layer(axum::middleware::from_fn_with_state(
            access.clone(),
            inlet_catalog::rest::guard::authenticate,
        ));
        iceberg = inlet_catalog::rest::guarded(iceberg, access);
    }
    let app = open
        .merge(guarded)
        .nest("/iceberg", iceberg)
        .layer(axum::middleware::from_fn(
            |req: axum::extract::Request, next: axum::middleware::Next| {
                crate::audit::http("http", req, next)
            },
        ));
    if let Err(e) = crate::https::serve(listener, tls, app, "HTTP", stop).await {
        tracing::error!(error = %e, "the HTTP listener failed");
    }
}

/// 503 with `{"error": …}`: what `/v1/cluster` reads from the metadata store did not answer.
fn unavailable(e: impl std::fmt::Display) -> axum::response::Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        axum::Json(serde_json::json!({ "error": e.to_string() })),
    )
        .into_response()
}

/// `GET /v1/cluster`: the nodes on this node's metadata store with their leases and WALs, which
/// node owns each partition (from the metadata store, with the ownership epoch, and the weight
/// the cluster balances it by: 1 plus its bytes in over `[cluster] load_unit_bytes`, rounded to a
/// power of two), and what this
/// node runs: its table topics, and the groups it coordinates (in a cluster, a group's node is
/// the rendezvous of its id over the live nodes; see `crate::cluster`), every group's owner
/// and epoch (`inlet_group_owners`: the node that last claimed it), and the moves of the
/// last hour (`inlet_storage::Move`), newest first: partitions and groups taken or given up.
async fn cluster(
    State(Node { broker, tables }): State<Node>,
    viewer: Option<axum::Extension<inlet_common::access::Viewer>>,
) -> axum::response::Response {
    use inlet_common::access::Named;
    // With authentication, a principal that is not an operator sees the topics and groups its
    // ACLs let it describe (as the console's listings).
    let sees = |named: Named<'_>| {
        viewer
            .as_ref()
            .is_none_or(|axum::Extension(v)| v.sees(named))
    };
    let me = broker.config().node_id;
    let (members, now_ms) = match crate::members::Membership::members(broker.store().meta()).await {
        Ok(m) => m,
        Err(e) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                axum::Json(serde_json::json!({ "error": format!("{e:#}") })),
            )
                .into_response()
        }
    };
    let nodes: Vec<serde_json::Value> = members
        .iter()
        .map(|m| {
            serde_json::json!({
                "node_id": m.node_id,
                "kafka": m.kafka_addr,
                "http": m.http_addr,
                "started_ms": m.started_ms,
                "lease_expires_ms": m.expires_ms,
                "wal": m.wal,
                "live": m.expires_ms > now_ms,
                "this_node": m.node_id as i64 == i64::from(me),
            })
        })
        .collect();
    let owners: std::collections::HashMap<u64, (Option<u64>, u64)> =
        match broker.store().stream_owners().await {
            Ok(rows) => rows
                .into_iter()
                .map(|(info, owner, epoch)| (info.id, (owner, epoch)))
                .collect(),
            Err(e) => return unavailable(e),
        };
    // In a cluster, the published weights, which the assignment balances once they settle
    // (`cluster::Settled`); absent on a single node: all 1.
    let weights = crate::cluster::load_weights(broker.store().meta())
        .await
        .unwrap_or_default();
    let mut mine = serde_json::Map::new();
    let partitions: serde_json::Map<String, serde_json::Value> = broker
        .topics()
        .list()
        .iter()
        .filter(|t| sees(Named::Topic(&t.name)))
        .map(|t| {
            let parts: Vec<serde_json::Value> = t
                .partitions
                .iter()
                .map(|p| {
                    let (owner, epoch) = owners.get(&p.stream).copied().unwrap_or((None, 0));
                    let weight = weights.get(&p.stream).copied().unwrap_or(1);
                    serde_json::json!({ "partition": p.index, "owner": owner, "epoch": epoch, "weight": weight })
                })
                .collect();
            let here: Vec<i32> = t
                .partitions
                .iter()
                .filter(|p| broker.store().owns(p.stream))
                .map(|p| p.index)
                .collect();
            if !here.is_empty() {
                mine.insert(t.name.clone(), serde_json::json!(here));
            }
            (t.name.clone(), serde_json::json!(parts))
        })
        .collect();
    let table_names: Vec<String> = tables.snapshot().keys().cloned().collect();
    let since_ms = broker
        .clock_ms()
        .saturating_sub(inlet_storage::MOVES_KEPT_MS);
    let moves = match broker.store().meta().moves(since_ms).await {
        Ok(moves) => moves,
        Err(e) => return unavailable(e),
    };
    // Every group's owner: the node that last claimed it (a group moves to the rendezvous of
    // its id over the live nodes at its next call there).
    let group_owners: Vec<serde_json::Value> = match broker.group_owners().await {
        Ok(rows) => rows
            .into_iter()
            .filter(|(group, _, _)| sees(Named::Group(group)))
            .map(|(group, owner, epoch)| {
                serde_json::json!({ "group": group, "owner": owner, "epoch": epoch })
            })
            .collect(),
        Err(e) => {
            return unavailable(e)
        }
    };
    let streams: std::collections::HashMap<u64, (String, i32)> = broker
        .topics()
        .list()
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (p.stream, (t.name.clone(), p.index)))
        })
        .collect();
    // Newest first; a partition by its topic and index (its stream's name once deleted).
    let moves: Vec<serde_json::Value> = moves
        .iter()
        .rev()
        .filter_map(|m| {
            let (topic, partition) = match m.stream_id.and_then(|id| streams.get(&id)) {
                Some((topic, index)) => (Some(topic.as_str()), Some(*index)),
                None => (None, None),
            };
            let seen = match (m.kind.as_str(), topic) {
                ("group", _) => sees(Named::Group(&m.name)),
                (_, Some(topic)) => sees(Named::Topic(topic)),
                // A deleted topic's partition: named by its stream, for operators only.
                (_, None) => viewer
                    .as_ref()
                    .is_none_or(|axum::Extension(v)| v.operates()),
            };
            if !seen {
                return None;
            }
            Some(serde_json::json!({
                "at_ms": m.at_ms,
                "kind": m.kind,
                "name": m.name,
                "topic": topic,
                "partition": partition,
                "from": m.from_node,
                "to": m.to_node,
                "epoch": m.epoch,
            }))
        })
        .collect();
    axum::Json(serde_json::json!({
        "node_id": me,
        "nodes": nodes,
        "partitions": partitions,
        "groups": group_owners,
        "moves": moves,
        "owned_by_this_node": {
            "partitions": mine,
            "groups": broker.coordinated_groups(),
            "tables": table_names,
        },
    }))
    .into_response()
}

/// Uploads failing for this long (with errors that may pass) make the node unhealthy: the WAL
/// still holds the data, but the node is not doing its job and an operator should know.
const UPLOADS_UNHEALTHY_AFTER_MS: u64 = 5 * 60 * 1000;

/// Why the node cannot take or keep data, if it cannot: a WAL that failed a write or sync
/// (it refuses appends until a restart), uploads failing with an error that will not pass, or
/// uploads failing for [`UPLOADS_UNHEALTHY_AFTER_MS`].
pub(crate) fn unhealthy(broker: &inlet_ingest::Broker) -> Option<String> {
    let health = broker.store().health();
    if let Some(reason) = health.wal_failed {
        return Some(format!(
            "the WAL failed and refuses appends until a restart: {reason}"
        ));
    }
    if let Some(reason) = table_lag_unhealthy(broker) {
        return Some(reason);
    }
    let failure = health.upload_failure?;
    let for_ms = broker.clock_ms().saturating_sub(failure.since_ms);
    if !failure.retryable {
        return Some(format!(
            "uploads to the object store fail with an error that will not pass: {}",
            failure.error
        ));
    }
    (for_ms >= UPLOADS_UNHEALTHY_AFTER_MS).then(|| {
        format!(
            "uploads to the object store have failed for {} s: {}",
            for_ms / 1000,
            failure.error
        )
    })
}

/// Every partition of a table topic this node owns, with what its table has not committed
/// (`StreamStore::table_lag_bytes`) and the topic's `table.topic.lag.max.bytes` (None: no
/// bound).
fn table_lags(
    broker: &inlet_ingest::Broker,
) -> Vec<(String, i32, inlet_storage::TableLag, Option<u64>)> {
    let defaults = &broker.config().topic_defaults;
    let mut out = Vec::new();
    for topic in broker.topics().list() {
        if topic.configs.table_topic(&topic.name, defaults).is_none() {
            continue;
        }
        let bound = topic.configs.table_lag_bound(defaults);
        for p in &topic.partitions {
            if let Some(lag) = broker.store().table_lag_bytes(p.stream) {
                out.push((topic.name.clone(), p.index, lag, bound));
            }
        }
    }
    out
}

/// A table topic's partition whose table lags `table.topic.lag.max.bytes` or more: the node
/// refuses produce to it (retriably) and keeps every byte until the table commits.
fn table_lag_unhealthy(broker: &inlet_ingest::Broker) -> Option<String> {
    let over: Vec<String> = table_lags(broker)
        .into_iter()
        .filter(|(_, _, lag, bound)| bound.is_some_and(|b| lag.lag_bytes >= b))
        .map(|(topic, p, lag, _)| format!("{topic}/{p} ({} bytes)", lag.lag_bytes))
        .collect();
    (!over.is_empty()).then(|| {
        format!(
            "table topic partitions hold table.topic.lag.max.bytes or more that their tables have \
             not committed, and refuse produce until they do: {}",
            over.join(", ")
        )
    })
}

async fn healthz(State(Node { broker, .. }): State<Node>) -> impl IntoResponse {
    // Answered from memory.
    match unhealthy(&broker) {
        None => (StatusCode::OK, "ok\n".to_string()),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("unhealthy: {reason}\n"),
        ),
    }
}

async fn metrics(State(Node { broker, tables }): State<Node>) -> impl IntoResponse {
    let mut out = String::new();
    broker.metrics().render(&mut out);
    let s = broker.store().stats();
    let healthy = unhealthy(&broker).is_none();
    let upload_failing_ms = broker
        .store()
        .health()
        .upload_failure
        .map_or(0, |f| broker.clock_ms().saturating_sub(f.since_ms));
    let mut gauge = |name: &str, help: &str, kind: &str, value: f64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    };
    gauge(
        "inlet_healthy",
        "1 while the node can take and keep data (what /healthz says), 0 when not.",
        "gauge",
        if healthy { 1.0 } else { 0.0 },
    );
    gauge(
        "inlet_wal_failed",
        "1 once the WAL failed (a write or fdatasync error): it refuses appends until a restart.",
        "gauge",
        if broker.store().health().wal_failed.is_some() {
            1.0
        } else {
            0.0
        },
    );
    gauge(
        "inlet_upload_failing_seconds",
        "How long uploads to the object store have been failing (0 when the last one worked).",
        "gauge",
        upload_failing_ms as f64 / 1000.0,
    );
    gauge(
        "inlet_wal_syncs_total",
        "WAL fdatasync calls (group commits).",
        "counter",
        s.wal_syncs as f64,
    );
    gauge(
        "inlet_wal_sync_seconds_total",
        "Time spent in WAL fdatasync.",
        "counter",
        s.wal_sync_micros_total as f64 / 1e6,
    );
    gauge(
        "inlet_wal_sync_seconds_max",
        "Longest WAL fdatasync since start.",
        "gauge",
        s.wal_sync_micros_max as f64 / 1e6,
    );
    gauge(
        "inlet_wal_bytes_total",
        "Bytes written to the WAL.",
        "counter",
        s.wal_bytes as f64,
    );
    gauge(
        "inlet_wal_segments",
        "WAL segment files.",
        "gauge",
        s.wal_segments as f64,
    );
    gauge(
        "inlet_store_appends_total",
        "Batches appended to streams.",
        "counter",
        s.appends as f64,
    );
    gauge(
        "inlet_store_uploads_total",
        "Stream set objects uploaded.",
        "counter",
        s.uploads as f64,
    );
    gauge(
        "inlet_store_uploaded_bytes_total",
        "Bytes uploaded to the object store.",
        "counter",
        s.uploaded_bytes as f64,
    );
    gauge(
        "inlet_log_cache_reads_total",
        "Reads answered from the log cache (tail reads).",
        "counter",
        s.log_cache_reads as f64,
    );
    gauge(
        "inlet_object_reads_total",
        "Reads that went to objects (catch-up reads).",
        "counter",
        s.object_reads as f64,
    );
    gauge(
        "inlet_block_cache_hits_total",
        "Block cache hits.",
        "counter",
        s.block_cache_hits as f64,
    );
    gauge(
        "inlet_block_cache_misses_total",
        "Block cache misses.",
        "counter",
        s.block_cache_misses as f64,
    );
    let lookups = s.block_cache_hits + s.block_cache_misses;
    gauge(
        "inlet_block_cache_hit_ratio",
        "Block cache hits over lookups since start (1 when there were none).",
        "gauge",
        if lookups == 0 {
            1.0
        } else {
            s.block_cache_hits as f64 / lookups as f64
        },
    );
    gauge(
        "inlet_log_cache_used_bytes",
        "Log cache bytes in use.",
        "gauge",
        s.log_cache_used_bytes as f64,
    );
    gauge(
        "inlet_log_cache_budget_bytes",
        "The log cache's byte budget (`[storage] log_cache_bytes`).",
        "gauge",
        s.log_cache_budget_bytes as f64,
    );
    gauge(
        "inlet_block_cache_used_bytes",
        "Block cache bytes in use.",
        "gauge",
        s.block_cache_used_bytes as f64,
    );
    gauge(
        "inlet_dirty_bytes",
        "Appended bytes not yet uploaded.",
        "gauge",
        s.dirty_bytes as f64,
    );
    render_tables(&mut out, &tables, broker.clock_ms() as i64);
    render_table_lags(&mut out, &broker);
    render_group_lags(&mut out, &broker);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out)
}

/// A Prometheus label value: backslash, double quote and newline escaped.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Each consumer group this node coordinates: its lag per topic.
fn render_group_lags(out: &mut String, broker: &inlet_ingest::Broker) {
    let name = "inlet_kafka_group_lag";
    let _ = writeln!(
        out,
        "# HELP {name} Records between a consumer group's committed offsets and the ends of a topic's partitions, for the groups this node coordinates.\n# TYPE {name} gauge"
    );
    for (group, topic, lag) in broker.group_lags() {
        let _ = writeln!(
            out,
            "{name}{{group=\"{}\",topic=\"{}\"}} {lag}",
            label(&group),
            label(&topic)
        );
    }
}

/// One table's progress as JSON (`/v1/tables`).
fn status_json(status: &TableStatus, now_ms: i64) -> serde_json::Value {
    let by_partition = |m: &std::collections::BTreeMap<i32, u64>| -> serde_json::Value {
        m.iter()
            .map(|(p, o)| (p.to_string(), serde_json::json!(o)))
            .collect()
    };
    serde_json::json!({
        "last_commit_ms": status.last_commit_ms,
        "seconds_since_commit": status.last_commit_ms.map(|c| (now_ms - c).max(0) as f64 / 1e3),
        "records_behind": status.records_behind(),
        "watermark_ms": status.watermark_ms,
        "partition_watermarks": status
            .partition_watermarks
            .iter()
            .map(|(p, w)| (p.to_string(), serde_json::json!(w)))
            .collect::<serde_json::Map<_, _>>(),
        "committed_offsets": by_partition(&status.committed),
        "end_offsets": by_partition(&status.ends),
        "commits": status.commits,
        "failed_commits": status.failed_commits,
        "pending_dead_letter_files": status.pending_dead_letter_files,
        "held_by_dead_letters": status.held_by_dead_letters,
        "lag_bytes": by_partition(&status.lag_bytes),
    })
}

/// `GET /v1/tables`: every table topic's commit lag, by `namespace.table`.
async fn tables_status(State(Node { broker, tables }): State<Node>) -> impl IntoResponse {
    let now_ms = broker.clock_ms() as i64;
    let body: serde_json::Map<String, serde_json::Value> = tables
        .snapshot()
        .iter()
        .map(|(t, s)| (t.clone(), status_json(s, now_ms)))
        .collect();
    axum::Json(body)
}

/// `GET /v1/tables/{namespace}/{table}`: one table topic's commit lag; 404 for a table no
/// coordinator of this node runs.
async fn table_status(
    State(Node { broker, tables }): State<Node>,
    axum::extract::Path((namespace, table)): axum::extract::Path<(String, String)>,
) -> axum::response::Response {
    let now_ms = broker.clock_ms() as i64;
    match tables.snapshot().get(&format!("{namespace}.{table}")) {
        Some(s) => axum::Json(status_json(s, now_ms)).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            axum::Json(serde_json::json!({
                "error": format!("no table topic {namespace}.{table} on this node")
            })),
        )
            .into_response(),
    }
}

/// Per partition of a table topic this node owns: the bytes its table has not committed, and
/// those past the topic's retention that the stream keeps for the table.
fn render_table_lags(out: &mut String, broker: &inlet_ingest::Broker) {
    let lags = table_lags(broker);
    type Value = fn(&inlet_storage::TableLag) -> u64;
    let families: [(&str, &str, Value); 2] = [
        (
            "inlet_table_lag_bytes",
            "Bytes of the partition's stream (owned by this node) that its table has not committed.",
            |l| l.lag_bytes,
        ),
        (
            "inlet_table_retention_held_bytes",
            "Bytes past the partition's retention that its stream keeps because its table has not committed them (as of the last maintenance pass).",
            |l| l.held_bytes,
        ),
    ];
    for (name, help, value) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for (topic, partition, lag, _) in &lags {
            let _ = writeln!(
                out,
                "{name}{{topic=\"{topic}\",partition=\"{partition}\"}} {}",
                value(lag)
            );
        }
    }
}

/// Per table topic: commit lag, records behind, watermark, commits.
fn render_tables(out: &mut String, tables: &Statuses, now_ms: i64) {
    let tables = tables.snapshot();
    type Value<'a> = &'a dyn Fn(&TableStatus) -> Option<f64>;
    let families: [(&str, &str, &str, Value); 6] = [
        (
            "inlet_table_seconds_since_commit",
            "Seconds since the table's last commit.",
            "gauge",
            &|t| t.last_commit_ms.map(|c| (now_ms - c).max(0) as f64 / 1e3),
        ),
        (
            "inlet_table_records_behind",
            "Records in the topic not yet in the table.",
            "gauge",
            &|t| Some(t.records_behind() as f64),
        ),
        (
            "inlet_table_watermark_seconds",
            "The table's watermark: how far its event time is complete, as a Unix time in seconds.",
            "gauge",
            &|t| t.watermark_ms.map(|w| w as f64 / 1e3),
        ),
        (
            "inlet_table_commits_total",
            "Commits of the table since the node started.",
            "counter",
            &|t| Some(t.commits as f64),
        ),
        (
            "inlet_table_failed_commits_total",
            "Failed commit attempts since the node started.",
            "counter",
            &|t| Some(t.failed_commits as f64),
        ),
        (
            "inlet_table_pending_dead_letter_files",
            "Dead-letter files the dead-letter table has not taken yet.",
            "gauge",
            &|t| Some(t.pending_dead_letter_files as f64),
        ),
    ];
    for (name, help, kind, value) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (table, status) in &tables {
            if let Some(v) = value(status) {
                let _ = writeln!(out, "{name}{{table=\"{table}\"}} {v}");
            }
        }
    }
}
