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
//!
//! With an [`Access`] ([`guarded_router`]), every routed request is authenticated and
//! authorized first ([`guard`]; the rules are in [`crate::access`]).

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, MatchedPath, Path, Query, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::Digest;
use tokio_util::sync::CancellationToken;

use crate::access::{Access, Operation, Viewer};
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

/// The REST API as an axum router, open to every request.
pub fn router(registry: Arc<Registry>) -> Router {
    routes().with_state(registry)
}

/// The REST API with every routed request authenticated and authorized by `access`.
pub fn guarded_router(registry: Arc<Registry>, access: Arc<dyn Access>) -> Router {
    let guarded = Guarded {
        verified: Arc::new(Verified {
            ttl: std::time::Duration::from_millis(registry.config().auth_cache_ttl_ms),
            max_bytes: registry.config().auth_cache_max_bytes,
            entries: parking_lot::Mutex::default(),
        }),
        registry: registry.clone(),
        access,
    };
    routes()
        .route_layer(axum::middleware::from_fn_with_state(guarded, guard))
        .with_state(registry)
}

fn routes() -> Router<Arc<Registry>> {
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
}

/// Serves the REST API on `listener` until `stop` is cancelled, then finishes the requests in
/// flight; guarded by `access` when there is one.
pub async fn serve(
    listener: tokio::net::TcpListener,
    registry: Arc<Registry>,
    access: Option<Arc<dyn Access>>,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let app = match access {
        Some(access) => guarded_router(registry, access),
        None => router(registry),
    };
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(stop.cancelled_owned())
    .await
}

/// The state of [`guard`].
#[derive(Clone)]
struct Guarded {
    registry: Arc<Registry>,
    access: Arc<dyn Access>,
    verified: Arc<Verified>,
}

/// `Authorization` headers verified lately (`auth_cache_ttl_ms`), by their SHA-256, so that a
/// client's every request does not cost a password check; within `auth_cache_max_bytes`.
struct Verified {
    ttl: std::time::Duration,
    max_bytes: usize,
    entries: parking_lot::Mutex<VerifiedEntries>,
}

#[derive(Default)]
struct VerifiedEntries {
    /// Principal and when the header was verified.
    by_digest: HashMap<[u8; 32], (String, tokio::time::Instant)>,
    bytes: usize,
}

impl Verified {
    /// What an entry costs: the digest, the principal, the instant, the map's overhead.
    fn cost(principal: &str) -> usize {
        32 + principal.len() + 64
    }

    fn get(&self, digest: &[u8; 32]) -> Option<String> {
        let e = self.entries.lock();
        let (principal, at) = e.by_digest.get(digest)?;
        (at.elapsed() < self.ttl).then(|| principal.clone())
    }

    fn put(&self, digest: [u8; 32], principal: &str) {
        if self.ttl.is_zero() {
            return;
        }
        let mut e = self.entries.lock();
        let cost = Self::cost(principal);
        if e.bytes + cost > self.max_bytes {
            let ttl = self.ttl;
            e.by_digest.retain(|_, (_, at)| at.elapsed() < ttl);
            e.bytes = e.by_digest.values().map(|(p, _)| Self::cost(p)).sum();
            if e.bytes + cost > self.max_bytes {
                return;
            }
        }
        let now = tokio::time::Instant::now();
        if let Some((old, _)) = e.by_digest.insert(digest, (principal.to_owned(), now)) {
            e.bytes -= Self::cost(&old);
        }
        e.bytes += cost;
    }
}

/// What a route needs beyond an authenticated principal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    /// Nothing (`/`, `/schemas/types`).
    Nothing,
    /// The operation, on the route's subject where it has one.
    Operation(Operation),
    /// SUBJECT_READ on one of the subjects that use the route's schema id (SCHEMA_READ).
    SchemaRead,
    /// Nothing here: the handler lists only the subjects the principal may read.
    Listing,
}

/// What a request needs, by its route and method. A route this does not know is refused, so
/// that a route added without a rule is closed, not open.
fn need(method: &Method, route: &str) -> Option<Need> {
    use Operation::*;
    let read = *method == Method::GET;
    Some(match route {
        "/" | "/schemas/types" => Need::Nothing,
        "/subjects" => Need::Listing,
        "/subjects/{s}" if *method == Method::POST => Need::Operation(SubjectRead),
        "/subjects/{s}" => Need::Operation(SubjectDelete),
        "/subjects/{s}/versions" | "/subjects/{s}/versions/{v}" if read => {
            Need::Operation(SubjectRead)
        }
        "/subjects/{s}/versions" => Need::Operation(SubjectWrite),
        "/subjects/{s}/versions/{v}" => Need::Operation(SubjectDelete),
        "/subjects/{s}/versions/{v}/schema" | "/subjects/{s}/versions/{v}/referencedby" => {
            Need::Operation(SubjectRead)
        }
        "/compatibility/subjects/{s}/versions/{v}" | "/compatibility/subjects/{s}/versions" => {
            Need::Operation(SubjectWrite)
        }
        "/schemas/ids/{id}" | "/schemas/ids/{id}/schema" => Need::SchemaRead,
        "/schemas/ids/{id}/subjects" | "/schemas/ids/{id}/versions" => Need::Listing,
        "/config" | "/mode" if read => Need::Operation(GlobalCompatibilityRead),
        "/config" | "/mode" => Need::Operation(GlobalCompatibilityWrite),
        "/config/{s}" | "/mode/{s}" if read => Need::Operation(SubjectCompatibilityRead),
        "/config/{s}" | "/mode/{s}" => Need::Operation(SubjectCompatibilityWrite),
        _ => return None,
    })
}

/// 401, with the challenge Confluent's clients answer with their `basic.auth.user.info`.
fn unauthorized(message: &str) -> Response {
    let body = json!({"error_code": 401, "message": message});
    (
        StatusCode::UNAUTHORIZED,
        [
            (header::CONTENT_TYPE, CONTENT_TYPE),
            (header::WWW_AUTHENTICATE, "Basic realm=\"inlet\""),
        ],
        body.to_string(),
    )
        .into_response()
}

/// 403 in the shape of Confluent's security plugin (error code 40301).
fn forbidden(message: String) -> Response {
    let body = json!({"error_code": 40301, "message": message});
    (
        StatusCode::FORBIDDEN,
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        body.to_string(),
    )
        .into_response()
}

/// Authenticates a routed request and authorizes what its route needs ([`need`]); the
/// handler then sees the principal as a [`Viewer`].
async fn guard(State(g): State<Guarded>, req: Request, next: Next) -> Response {
    let peer = req
        .extensions()
        .get::<ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip());
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let digest: Option<[u8; 32]> = authorization.map(|a| sha2::Sha256::digest(a.as_bytes()).into());
    // With no `Authorization` header, a verified client certificate (mTLS) names the principal.
    let certificate = req
        .extensions()
        .get::<inlet_common::access::ClientCertificate>()
        .filter(|_| authorization.is_none())
        .map(|c| c.0.clone());
    let principal = match certificate.or_else(|| digest.and_then(|d| g.verified.get(&d))) {
        Some(p) => p,
        None => match g.access.authenticate(authorization, peer).await {
            Ok(p) => {
                if let Some(d) = digest {
                    g.verified.put(d, &p);
                }
                p
            }
            Err(e) => return unauthorized(&e.0),
        },
    };
    // The principal goes back with the answer, for the listener's audit trail.
    let mut response = authorize(g, req, next, principal.clone(), peer).await;
    response
        .extensions_mut()
        .insert(inlet_common::access::Authenticated(principal));
    response
}

/// [`guard`]'s second half, for an authenticated `principal`: what the route needs.
async fn authorize(
    g: Guarded,
    mut req: Request,
    next: Next,
    principal: String,
    peer: Option<std::net::IpAddr>,
) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_owned())
        .unwrap_or_default();
    let params: HashMap<String, String> = {
        let (mut parts, body) = req.into_parts();
        let params = match <Path<HashMap<String, String>> as axum::extract::FromRequestParts<
            (),
        >>::from_request_parts(&mut parts, &())
        .await
        {
            Ok(Path(p)) => p,
            Err(e) => return e.into_response(),
        };
        req = Request::from_parts(parts, body);
        params
    };
    let viewer = Viewer {
        access: g.access.clone(),
        principal,
        peer,
    };
    let allowed = match need(req.method(), &route) {
        None => {
            return forbidden(format!(
                "{} is denied {} {route}: no rule authorizes that route",
                viewer.principal,
                req.method()
            ))
        }
        Some(Need::Nothing | Need::Listing) => true,
        Some(Need::Operation(op)) => {
            let subject = params.get("s").map(String::as_str);
            if !g.access.allows(
                &viewer.principal,
                peer,
                op,
                subject.filter(|_| op.on_subject()),
            ) {
                let on = subject.map_or("the registry".into(), |s| format!("subject {s:?}"));
                return forbidden(format!(
                    "{} is denied operation {} on {on}",
                    viewer.principal,
                    op.name()
                ));
            }
            true
        }
        Some(Need::SchemaRead) => {
            let id = match params.get("id").map(|id| schema_id(id)) {
                Some(Ok(id)) => id,
                Some(Err(e)) => return ApiError(e).into_response(),
                None => return not_found().await,
            };
            match g.registry.uses_of(id, true).await {
                // An id no subject uses: the handler answers that it is not found.
                Ok(uses) if uses.is_empty() => true,
                Ok(uses) => uses.iter().any(|(s, _)| viewer.may_read(s)),
                Err(e) => return ApiError(e).into_response(),
            }
        }
    };
    if !allowed {
        return forbidden(format!(
            "{} is denied operation SCHEMA_READ: it may read none of the subjects that use \
             the schema",
            viewer.principal
        ));
    }
    req.extensions_mut().insert(viewer);
    next.run(req).await
}

/// Keeps what `viewer` (if the API is guarded) may read.
fn readable<T>(
    viewer: &Option<Extension<Viewer>>,
    items: Vec<T>,
    subject: impl Fn(&T) -> &str,
) -> Vec<T> {
    match viewer {
        Some(Extension(v)) => items
            .into_iter()
            .filter(|i| v.may_read(subject(i)))
            .collect(),
        None => items,
    }
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

async fn subjects(State(r): Reg, viewer: Option<Extension<Viewer>>, Query(q): Params) -> ApiResult {
    let prefix = q.get("subjectPrefix").map_or("", String::as_str);
    let subjects = readable(
        &viewer,
        r.subjects(prefix, deleted_filter(&q)).await?,
        |s| s,
    );
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

async fn subjects_by_id(
    State(r): Reg,
    viewer: Option<Extension<Viewer>>,
    Path(id): Path<String>,
    Query(q): Params,
) -> ApiResult {
    let uses = r.uses_of(schema_id(&id)?, flag(&q, "deleted")).await?;
    let mut subjects: Vec<String> = readable(&viewer, uses, |(s, _)| s)
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    subjects.dedup();
    ok(json!(subjects))
}

async fn versions_by_id(
    State(r): Reg,
    viewer: Option<Extension<Viewer>>,
    Path(id): Path<String>,
    Query(q): Params,
) -> ApiResult {
    let uses = readable(
        &viewer,
        r.uses_of(schema_id(&id)?, flag(&q, "deleted")).await?,
        |(s, _)| s,
    );
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_needs_what_confluents_security_plugin_names() {
        use Operation::*;
        let (get, post, put, delete) = (Method::GET, Method::POST, Method::PUT, Method::DELETE);
        let table = [
            (&get, "/", Some(Need::Nothing)),
            (&get, "/schemas/types", Some(Need::Nothing)),
            (&get, "/subjects", Some(Need::Listing)),
            (&post, "/subjects/{s}", Some(Need::Operation(SubjectRead))),
            (
                &delete,
                "/subjects/{s}",
                Some(Need::Operation(SubjectDelete)),
            ),
            (
                &get,
                "/subjects/{s}/versions",
                Some(Need::Operation(SubjectRead)),
            ),
            (
                &post,
                "/subjects/{s}/versions",
                Some(Need::Operation(SubjectWrite)),
            ),
            (
                &get,
                "/subjects/{s}/versions/{v}",
                Some(Need::Operation(SubjectRead)),
            ),
            (
                &delete,
                "/subjects/{s}/versions/{v}",
                Some(Need::Operation(SubjectDelete)),
            ),
            (
                &get,
                "/subjects/{s}/versions/{v}/schema",
                Some(Need::Operation(SubjectRead)),
            ),
            (
                &get,
                "/subjects/{s}/versions/{v}/referencedby",
                Some(Need::Operation(SubjectRead)),
            ),
            (
                &post,
                "/compatibility/subjects/{s}/versions",
                Some(Need::Operation(SubjectWrite)),
            ),
            (
                &post,
                "/compatibility/subjects/{s}/versions/{v}",
                Some(Need::Operation(SubjectWrite)),
            ),
            (&get, "/schemas/ids/{id}", Some(Need::SchemaRead)),
            (&get, "/schemas/ids/{id}/schema", Some(Need::SchemaRead)),
            (&get, "/schemas/ids/{id}/subjects", Some(Need::Listing)),
            (&get, "/schemas/ids/{id}/versions", Some(Need::Listing)),
            (
                &get,
                "/config",
                Some(Need::Operation(GlobalCompatibilityRead)),
            ),
            (
                &put,
                "/config",
                Some(Need::Operation(GlobalCompatibilityWrite)),
            ),
            (
                &delete,
                "/config",
                Some(Need::Operation(GlobalCompatibilityWrite)),
            ),
            (
                &get,
                "/mode",
                Some(Need::Operation(GlobalCompatibilityRead)),
            ),
            (
                &put,
                "/mode",
                Some(Need::Operation(GlobalCompatibilityWrite)),
            ),
            (
                &get,
                "/config/{s}",
                Some(Need::Operation(SubjectCompatibilityRead)),
            ),
            (
                &put,
                "/config/{s}",
                Some(Need::Operation(SubjectCompatibilityWrite)),
            ),
            (
                &delete,
                "/mode/{s}",
                Some(Need::Operation(SubjectCompatibilityWrite)),
            ),
            // A route without a rule is closed.
            (&get, "/exporters", None),
        ];
        for (method, route, expected) in table {
            assert_eq!(need(method, route), expected, "{method} {route}");
        }
    }

    #[test]
    fn verified_headers_expire_and_stay_within_their_budget() {
        let v = Verified {
            ttl: std::time::Duration::from_secs(60),
            max_bytes: 2 * Verified::cost("User:alice"),
            entries: parking_lot::Mutex::default(),
        };
        v.put([1; 32], "User:alice");
        v.put([1; 32], "User:alice");
        v.put([2; 32], "User:alice");
        v.put([3; 32], "User:alice");
        assert_eq!(v.get(&[1; 32]).as_deref(), Some("User:alice"));
        assert_eq!(v.get(&[3; 32]), None, "over the budget: not kept");
        assert_eq!(v.entries.lock().bytes, 2 * Verified::cost("User:alice"));
        let expired = Verified {
            ttl: std::time::Duration::ZERO,
            max_bytes: 1 << 20,
            entries: parking_lot::Mutex::default(),
        };
        expired.put([1; 32], "User:alice");
        assert_eq!(expired.get(&[1; 32]), None);
    }
}
