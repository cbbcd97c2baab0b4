//! The Confluent Schema Registry REST API over a [`Registry`], as Confluent's clients use it.
//!
//! Answers are `application/vnd.schemaregistry.v1+json`; request bodies are read as JSON
//! whatever their content type says (`application/vnd.schemaregistry.v1+json`,
//! `application/json`, or none). Errors are `{"error_code": N, "message": "..."}` with the HTTP
//! status of [`Error::http_status`].
//!
//! Schemas of all three types, with `references`. `?format=serialized` answers a Protobuf
//! schema as a base64 `FileDescriptorProto` (what confluent-kafka's Protobuf serdes ask for);
//! other formats are answered with the canonical text. Listings accept `deleted`,
//! `deletedOnly`, `subjectPrefix`, `offset` and `limit` as Confluent's do.

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
use crate::registry::{Deleted, Registry, SchemaRequest, SubjectVersion, VersionSpec};
use crate::schema::{ParsedSchema, Reference, SchemaType, StoredSchema};

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

/// A request body with a schema. Unknown fields (`metadata`, `ruleSet`) are accepted and
/// ignored.
#[derive(Deserialize)]
struct SchemaBody {
    schema: String,
    #[serde(rename = "schemaType")]
    schema_type: Option<String>,
    references: Option<Vec<Reference>>,
    id: Option<i64>,
    version: Option<i64>,
}

fn schema_request(body: &Bytes) -> Result<SchemaRequest, Error> {
    let b: SchemaBody = serde_json::from_slice(body)
        .map_err(|e| Error::InvalidSchema(format!("request body: {e}")))?;
    // Confluent's clients send -1 or 0 for "not given".
    let given = |v: Option<i64>, what: &str| -> Result<Option<u32>, Error> {
        match v {
            None | Some(-1) | Some(0) => Ok(None),
            Some(v) if (1..=i64::from(i32::MAX)).contains(&v) => Ok(Some(v as u32)),
            Some(v) => Err(Error::BadRequest(format!("{what} {v} is out of range"))),
        }
    };
    Ok(SchemaRequest {
        schema: b.schema,
        schema_type: b.schema_type,
        references: b.references.unwrap_or_default(),
        id: given(b.id, "id")?,
        version: given(b.version, "version")?,
    })
}

/// The schema's text in the asked `format`: a Protobuf schema as base64 of its descriptor
/// for `serialized`, else the canonical text.
fn schema_text<'a>(
    schema: &'a StoredSchema,
    q: &HashMap<String, String>,
) -> std::borrow::Cow<'a, str> {
    match (&schema.parsed, q.get("format").map(String::as_str)) {
        (ParsedSchema::Protobuf(p), Some("serialized")) => p.serialized().into(),
        _ => schema.text.as_str().into(),
    }
}

/// The type and references fields of a schema answer (both left out when default, as
/// Confluent does).
fn with_type(mut v: Value, schema: &StoredSchema) -> Value {
    if schema.schema_type() != SchemaType::Avro {
        v["schemaType"] = json!(schema.schema_type().as_str());
    }
    if !schema.references.is_empty() {
        v["references"] = json!(schema.references);
    }
    v
}

fn version_json(sv: &SubjectVersion, q: &HashMap<String, String>) -> Value {
    with_type(
        json!({"subject": sv.subject, "version": sv.version, "id": sv.schema.id,
               "schema": schema_text(&sv.schema, q)}),
        &sv.schema,
    )
}

/// `offset` and `limit` (-1: all) applied to a listing.
fn page<T>(items: Vec<T>, q: &HashMap<String, String>) -> Result<Vec<T>, Error> {
    let number = |name: &str, default: i64| -> Result<i64, Error> {
        q.get(name).map_or(Ok(default), |v| {
            v.parse()
                .map_err(|_| Error::BadRequest(format!("{name} {v:?} is not a number")))
        })
    };
    let offset = number("offset", 0)?.max(0) as usize;
    let limit = number("limit", -1)?;
    let rest = items.into_iter().skip(offset);
    Ok(if limit < 0 {
        rest.collect()
    } else {
        rest.take(limit as usize).collect()
    })
}

fn deleted_filter(q: &HashMap<String, String>) -> Deleted {
    Deleted::from_flags(flag(q, "deleted"), flag(q, "deletedOnly"))
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
        .route(
            "/subjects/{s}/versions/{v}/referencedby",
            get(referenced_by),
        )
        .route("/schemas/ids/{id}", get(schema_by_id))
        .route("/schemas/ids/{id}/schema", get(schema_text_by_id))
        .route("/schemas/ids/{id}/subjects", get(subjects_by_id))
        .route("/schemas/ids/{id}/versions", get(versions_by_id))
        .route(
            "/schemas/types",
            get(|| async {
                ok(json!(SchemaType::ALL
                    .iter()
                    .map(|t| t.as_str())
                    .collect::<Vec<_>>()))
            }),
        )
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
        .route(
            "/mode/{s}",
            get(get_subject_mode)
                .put(put_subject_mode)
                .delete(delete_subject_mode),
        )
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
    let prefix = q.get("subjectPrefix").map_or("", String::as_str);
    let subjects = r.subjects(prefix, deleted_filter(&q)).await?;
    ok(json!(page(subjects, &q)?))
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
        &q,
    ))
}

async fn versions(State(r): Reg, Path(s): Path<String>, Query(q): Params) -> ApiResult {
    let versions = r.versions(&s, deleted_filter(&q)).await?;
    ok(json!(page(versions, &q)?))
}

async fn version(
    State(r): Reg,
    Path((s, v)): Path<(String, String)>,
    Query(q): Params,
) -> ApiResult {
    let spec = VersionSpec::parse(&v)?;
    ok(version_json(
        &r.version(&s, spec, flag(&q, "deleted")).await?,
        &q,
    ))
}

async fn referenced_by(State(r): Reg, Path((s, v)): Path<(String, String)>) -> ApiResult {
    let spec = VersionSpec::parse(&v)?;
    ok(json!(r.referenced_by(&s, spec).await?))
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
        schema_text(&sv.schema, &q).into_owned(),
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

async fn schema_by_id(State(r): Reg, Path(id): Path<String>, Query(q): Params) -> ApiResult {
    let schema = r.schema_by_id(schema_id(&id)?).await?;
    ok(with_type(
        json!({"schema": schema_text(&schema, &q)}),
        &schema,
    ))
}

async fn schema_text_by_id(State(r): Reg, Path(id): Path<String>, Query(q): Params) -> ApiResult {
    let schema = r.schema_by_id(schema_id(&id)?).await?;
    Ok((
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        schema_text(&schema, &q).into_owned(),
    )
        .into_response())
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

fn mode_from(body: &Bytes) -> Result<Mode, Error> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| Error::BadRequest(format!("request body: {e}")))?;
    v.get("mode")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::InvalidMode("(missing)".into()))?
        .parse()
}

async fn get_mode(State(r): Reg) -> ApiResult {
    ok(json!({"mode": r.mode(None, true).await?.as_str()}))
}

async fn put_mode(State(r): Reg, Query(q): Params, body: Bytes) -> ApiResult {
    let mode = mode_from(&body)?;
    r.set_mode(None, mode, flag(&q, "force")).await?;
    ok(json!({"mode": mode.as_str()}))
}

async fn get_subject_mode(State(r): Reg, Path(s): Path<String>, Query(q): Params) -> ApiResult {
    let mode = r.mode(Some(&s), flag(&q, "defaultToGlobal")).await?;
    ok(json!({"mode": mode.as_str()}))
}

async fn put_subject_mode(
    State(r): Reg,
    Path(s): Path<String>,
    Query(q): Params,
    body: Bytes,
) -> ApiResult {
    let mode = mode_from(&body)?;
    r.set_mode(Some(&s), mode, flag(&q, "force")).await?;
    ok(json!({"mode": mode.as_str()}))
}

async fn delete_subject_mode(State(r): Reg, Path(s): Path<String>) -> ApiResult {
    ok(json!({"mode": r.delete_mode(&s).await?.as_str()}))
}
