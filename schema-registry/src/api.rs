//! The Confluent Schema Registry REST API over a [`Registry`], as Confluent's clients use it.
//!
//! Answers are `application/vnd.schemaregistry.v1+json`; request bodies are read as JSON
//! whatever their content type says (`application/vnd.schemaregistry.v1+json`,
//! `application/json`, or none). Errors are `{"error_code": N, "message": "..."}` with the HTTP
//! status of [`Error::http_status`].
//!
//! Only Avro for now: a `schemaType` of PROTOBUF or JSON, and any `references`, are answered
//! with 422 / 42201 "not supported yet", and `GET /schemas/types` lists only AVRO.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::compat::{Compatibility, Mode};
use crate::error::Error;
use crate::registry::{Registry, SchemaRequest, SchemaType, SubjectVersion, VersionSpec};

const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

type Reg = State<Arc<Registry>>;
type Params = Query<HashMap<String, String>>;

/// An error answered in Confluent's shape.
struct ApiError(Error);

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.0.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if status.is_server_error() {
            tracing::warn!(error = %self.0, "schema registry request failed");
        }
        let body = json!({"error_code": self.0.error_code(), "message": self.0.to_string()});
        (
            status,
            [(header::CONTENT_TYPE, CONTENT_TYPE)],
            body.to_string(),
        )
            .into_response()
    }
}

type ApiResult = Result<Response, ApiError>;

fn ok(v: Value) -> ApiResult {
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], v.to_string()).into_response())
}

fn flag(q: &HashMap<String, String>, name: &str) -> bool {
    q.get(name).is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

#[derive(Deserialize)]
struct SchemaBody {
    schema: String,
    #[serde(rename = "schemaType")]
    schema_type: Option<String>,
    references: Option<Vec<Value>>,
}

fn schema_request(body: &Bytes) -> Result<SchemaRequest, Error> {
    let b: SchemaBody = serde_json::from_slice(body)
        .map_err(|e| Error::InvalidSchema(format!("request body: {e}")))?;
    Ok(SchemaRequest {
        schema: b.schema,
        schema_type: b.schema_type,
        references: b.references.map_or(0, |r| r.len()),
    })
}

fn with_type(mut v: Value, t: SchemaType) -> Value {
    if t != SchemaType::Avro {
        v["schemaType"] = json!(t.as_str());
    }
    v
}

fn version_json(sv: &SubjectVersion) -> Value {
    with_type(
        json!({"subject": sv.subject, "version": sv.version, "id": sv.schema.id,
               "schema": sv.schema.text}),
        sv.schema.schema_type,
    )
}

/// The REST API as an axum router.
pub fn router(registry: Arc<Registry>) -> Router {
    Router::new()
        .route("/", get(|| async { ok(json!({})) }))
        .route("/subjects", get(subjects))
        .route("/subjects/{s}", post(lookup).delete(delete_subject))
        .route("/subjects/{s}/versions", get(versions).post(register))
        .route(
            "/subjects/{s}/versions/{v}",
            get(version).delete(delete_version),
        )
        .route("/subjects/{s}/versions/{v}/schema", get(version_schema))
        .route("/schemas/ids/{id}", get(schema_by_id))
        .route("/schemas/ids/{id}/schema", get(schema_text_by_id))
        .route("/schemas/ids/{id}/subjects", get(subjects_by_id))
        .route("/schemas/ids/{id}/versions", get(versions_by_id))
        .route("/schemas/types", get(|| async { ok(json!(["AVRO"])) }))
        .route(
            "/compatibility/subjects/{s}/versions/{v}",
            post(compatibility_version),
        )
        .route(
            "/compatibility/subjects/{s}/versions",
            post(compatibility_all),
        )
        .route(
            "/config",
            get(get_config).put(put_config).delete(delete_config),
        )
        .route(
            "/config/{s}",
            get(get_subject_config)
                .put(put_subject_config)
                .delete(delete_subject_config),
        )
        .route("/mode", get(get_mode).put(put_mode))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(registry)
}

/// Serves the REST API on `listener` until `stop` is cancelled, then finishes the requests in
/// flight.
pub async fn serve(
    listener: tokio::net::TcpListener,
    registry: Arc<Registry>,
    stop: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router(registry))
        .with_graceful_shutdown(stop.cancelled_owned())
        .await
}

/// Unknown paths answer in Confluent's error shape too.
async fn not_found() -> Response {
    let body = json!({"error_code": 404, "message": "HTTP 404 Not Found"});
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        body.to_string(),
    )
        .into_response()
}

async fn method_not_allowed() -> Response {
    let body = json!({"error_code": 405, "message": "HTTP 405 Method Not Allowed"});
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        body.to_string(),
    )
        .into_response()
}

async fn subjects(State(r): Reg, Query(q): Params) -> ApiResult {
    ok(json!(r.subjects(flag(&q, "deleted")).await?))
}

async fn register(State(r): Reg, Path(s): Path<String>, body: Bytes) -> ApiResult {
    let req = schema_request(&body)?;
    let (id, version) = r.register(&s, &req).await?;
    ok(json!({"id": id, "version": version}))
}

async fn lookup(State(r): Reg, Path(s): Path<String>, Query(q): Params, body: Bytes) -> ApiResult {
    let req = schema_request(&body)?;
    ok(version_json(
        &r.lookup(&s, &req, flag(&q, "deleted")).await?,
    ))
}

async fn versions(State(r): Reg, Path(s): Path<String>, Query(q): Params) -> ApiResult {
    ok(json!(r.versions(&s, flag(&q, "deleted")).await?))
}

async fn version(
    State(r): Reg,
    Path((s, v)): Path<(String, String)>,
    Query(q): Params,
) -> ApiResult {
    let spec = VersionSpec::parse(&v)?;
    ok(version_json(
        &r.version(&s, spec, flag(&q, "deleted")).await?,
    ))
}

async fn version_schema(
    State(r): Reg,
    Path((s, v)): Path<(String, String)>,
    Query(q): Params,
) -> ApiResult {
    let spec = VersionSpec::parse(&v)?;
    let sv = r.version(&s, spec, flag(&q, "deleted")).await?;
    Ok((
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        sv.schema.text.clone(),
    )
        .into_response())
}

async fn delete_subject(State(r): Reg, Path(s): Path<String>, Query(q): Params) -> ApiResult {
    ok(json!(r.delete_subject(&s, flag(&q, "permanent")).await?))
}

async fn delete_version(
    State(r): Reg,
    Path((s, v)): Path<(String, String)>,
    Query(q): Params,
) -> ApiResult {
    let spec = VersionSpec::parse(&v)?;
    ok(json!(
        r.delete_version(&s, spec, flag(&q, "permanent")).await?
    ))
}

fn schema_id(id: &str) -> Result<u32, Error> {
    id.parse::<u32>()
        .map_err(|_| Error::BadRequest(format!("schema id {id:?} is not a number")))
}

async fn schema_by_id(State(r): Reg, Path(id): Path<String>) -> ApiResult {
    let schema = r.schema_by_id(schema_id(&id)?).await?;
    ok(with_type(
        json!({"schema": schema.text}),
        schema.schema_type,
    ))
}

async fn schema_text_by_id(State(r): Reg, Path(id): Path<String>) -> ApiResult {
    let schema = r.schema_by_id(schema_id(&id)?).await?;
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], schema.text.clone()).into_response())
}

async fn subjects_by_id(State(r): Reg, Path(id): Path<String>, Query(q): Params) -> ApiResult {
    let mut subjects: Vec<String> = r
        .uses_of(schema_id(&id)?, flag(&q, "deleted"))
        .await?
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    subjects.dedup();
    ok(json!(subjects))
}

async fn versions_by_id(State(r): Reg, Path(id): Path<String>, Query(q): Params) -> ApiResult {
    let uses = r.uses_of(schema_id(&id)?, flag(&q, "deleted")).await?;
    ok(json!(uses
        .into_iter()
        .map(|(s, v)| json!({"subject": s, "version": v}))
        .collect::<Vec<_>>()))
}

fn compat_answer(reasons: Vec<String>, verbose: bool) -> ApiResult {
    if verbose {
        ok(json!({"is_compatible": reasons.is_empty(), "messages": reasons}))
    } else {
        ok(json!({"is_compatible": reasons.is_empty()}))
    }
}

async fn compatibility_version(
    State(r): Reg,
    Path((s, v)): Path<(String, String)>,
    Query(q): Params,
    body: Bytes,
) -> ApiResult {
    let spec = VersionSpec::parse(&v)?;
    let req = schema_request(&body)?;
    let reasons = r.test_compatibility(&s, Some(spec), &req).await?;
    compat_answer(reasons, flag(&q, "verbose"))
}

async fn compatibility_all(
    State(r): Reg,
    Path(s): Path<String>,
    Query(q): Params,
    body: Bytes,
) -> ApiResult {
    let req = schema_request(&body)?;
    let reasons = r.test_compatibility(&s, None, &req).await?;
    compat_answer(reasons, flag(&q, "verbose"))
}

/// The level in a PUT /config body: `compatibility` (or `compatibilityLevel`).
fn level_from(body: &Bytes) -> Result<Compatibility, Error> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| Error::BadRequest(format!("request body: {e}")))?;
    let level = v
        .get("compatibility")
        .and_then(Value::as_str)
        .or_else(|| v.get("compatibilityLevel").and_then(Value::as_str))
        .ok_or_else(|| Error::InvalidCompatibility("(missing)".into()))?;
    level.parse()
}

async fn get_config(State(r): Reg) -> ApiResult {
    ok(json!({"compatibilityLevel": r.compatibility(None, true).await?.as_str()}))
}

async fn put_config(State(r): Reg, body: Bytes) -> ApiResult {
    let level = level_from(&body)?;
    r.set_compatibility(None, level).await?;
    ok(json!({"compatibility": level.as_str()}))
}

async fn delete_config(State(r): Reg) -> ApiResult {
    let previous = r.delete_compatibility(None).await?;
    ok(json!({"compatibilityLevel": previous.as_str()}))
}

async fn get_subject_config(State(r): Reg, Path(s): Path<String>, Query(q): Params) -> ApiResult {
    let level = r
        .compatibility(Some(&s), flag(&q, "defaultToGlobal"))
        .await?;
    ok(json!({"compatibilityLevel": level.as_str()}))
}

async fn put_subject_config(State(r): Reg, Path(s): Path<String>, body: Bytes) -> ApiResult {
    let level = level_from(&body)?;
    r.set_compatibility(Some(&s), level).await?;
    ok(json!({"compatibility": level.as_str()}))
}

async fn delete_subject_config(State(r): Reg, Path(s): Path<String>) -> ApiResult {
    let previous = r.delete_compatibility(Some(&s)).await?;
    ok(json!({"compatibilityLevel": previous.as_str()}))
}

async fn get_mode(State(r): Reg) -> ApiResult {
    ok(json!({"mode": r.mode().await?.as_str()}))
}

async fn put_mode(State(r): Reg, body: Bytes) -> ApiResult {
    let v: Value = serde_json::from_slice(&body)
        .map_err(|e| Error::BadRequest(format!("request body: {e}")))?;
    let mode: Mode = v
        .get("mode")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::InvalidMode("(missing)".into()))?
        .parse()?;
    r.set_mode(mode).await?;
    ok(json!({"mode": mode.as_str()}))
}
