//! `POST /v1/query` and `inlet query` (docs/architecture.md, "Catalog and SQL"): read-only SQL over the node's tables.
//! The body is `{"sql": "..."}`; the answer's format follows `Accept`: `application/json` (an
//! array of row objects, the default), `text/csv`, or `application/vnd.apache.arrow.stream`.
//! Refused and failing statements answer 4xx with `{"error": "..."}`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use inlet_query::arrow::array::RecordBatch;
use inlet_query::{Encoder, QueryConfig, QueryError, QueryStream};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
pub struct QueryBody {
    sql: String,
}

const ARROW: &str = "application/vnd.apache.arrow.stream";

fn error(status: u16, message: String) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}

/// `POST /v1/query`.
pub async fn post(
    State((catalog, config)): State<(Arc<dyn iceberg::Catalog>, QueryConfig)>,
    viewer: Option<axum::Extension<inlet_common::access::Viewer>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    // Guarded: the query sees only the tables its principal may read.
    let catalog: Arc<dyn iceberg::Catalog> = match viewer {
        Some(axum::Extension(v)) => Arc::new(inlet_catalog::visible::VisibleTo::new(catalog, v)),
        None => catalog,
    };
    let body: QueryBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return error(400, format!("the body must be {{\"sql\": \"...\"}}: {e}")),
    };
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let (format, content_type) = if accept.contains(ARROW) {
        ("arrow", ARROW)
    } else if accept.contains("text/csv") {
        ("csv", "text/csv")
    } else {
        ("json", "application/json")
    };
    let mut output = match inlet_query::run(catalog, &body.sql, &config).await {
        Ok(output) => output,
        Err(e) => return error(e.status(), e.to_string()),
    };
    // The first batch decides the status: most failures (bad data, a missing file, the
    // memory limit) show up before any row, and get a 4xx/5xx with a message. A failure
    // after rows were sent ends the body early, so the client sees a truncated answer.
    let first = match output.next().await {
        Some(Err(e)) => return error(e.status(), e.to_string()),
        other => other,
    };
    let (mut encoder, head) = match Encoder::new(&output.schema, format) {
        Ok(e) => e,
        Err(e) => return error(e.status(), e.to_string()),
    };
    let body = async_stream(head, first, output, move |item| match item {
        Chunk::Batch(b) => encoder.batch(&b),
        Chunk::End => encoder.finish(),
    });
    (
        [(header::CONTENT_TYPE, content_type)],
        axum::body::Body::from_stream(body),
    )
        .into_response()
}

enum Chunk {
    Batch(RecordBatch),
    End,
}

/// The response body: `head`, then each batch encoded, then the closing bytes.
fn async_stream(
    head: Vec<u8>,
    first: Option<Result<RecordBatch, QueryError>>,
    rest: QueryStream,
    mut encode: impl FnMut(Chunk) -> Result<Vec<u8>, QueryError> + Send + 'static,
) -> impl futures::Stream<Item = Result<Vec<u8>, QueryError>> + Send {
    let batches = futures::stream::iter(first).chain(rest);
    let encoded = batches
        .map(move |b| b.map(Chunk::Batch))
        .chain(futures::stream::once(async { Ok(Chunk::End) }))
        .map(move |chunk| {
            chunk.and_then(&mut encode).inspect_err(
                |e| tracing::warn!(error = %e, "query failed while streaming its result"),
            )
        });
    futures::stream::once(async move { Ok(head) }).chain(encoded)
}

/// `inlet query`: runs `sql` on the node at `server` and returns the answer in `format`
/// (`table`, `csv` or `json`).
pub async fn remote(server: &str, sql: &str, format: &str) -> anyhow::Result<String> {
    let accept = match format {
        "csv" => "text/csv",
        "json" => "application/json",
        "table" => ARROW,
        other => anyhow::bail!("--format must be table, csv or json, not {other:?}"),
    };
    let response = crate::http::with_token(
        reqwest::Client::new().post(format!("{}/v1/query", server.trim_end_matches('/'))),
    )
    .header(header::ACCEPT, accept)
    .json(&serde_json::json!({ "sql": sql }))
    .send()
    .await
    .map_err(|e| anyhow::anyhow!("cannot reach {server}: {e}"))?;
    let status = response.status();
    let bytes = response.bytes().await?;
    if !status.is_success() {
        let message = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned());
        anyhow::bail!("{message}");
    }
    if format != "table" {
        return Ok(String::from_utf8_lossy(&bytes).into_owned());
    }
    let reader =
        inlet_query::arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)?;
    let schema = reader.schema();
    let batches = reader.collect::<Result<Vec<_>, _>>()?;
    let out = inlet_query::format(&schema, &batches, "table")
        .map_err(|e: QueryError| anyhow::anyhow!(e))?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}
