//! Authentication and authorization of the REST catalog ([`guarded`]), and the OAuth2 token
//! endpoint (`POST /v1/oauth/tokens`) that pyiceberg's and Spark's `credential` property use.
//! The decisions are an [`HttpAccess`]'s; this module says which a request needs.
//!
//! Invariants:
//! - Every routed request but the token endpoint is authenticated before its handler runs
//!   (401 `NotAuthorizedException`).
//! - A request on a table named by its path is authorized before its handler runs (403
//!   `ForbiddenException`): loading or checking it needs [`TableOp::Describe`], committing
//!   [`TableOp::Write`], dropping [`TableOp::Drop`]. Creating, registering, renaming and
//!   multi-table commits name their tables in the body: their handlers check
//!   ([`authorize`]). Namespace changes need [`HttpAccess::allows_namespaces`].
//! - Listing tables shows only those the principal may describe. Namespaces are listed and
//!   loaded by any authenticated principal.
//! - A route without a rule here is refused, so a route added without one is closed.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts, MatchedPath, Path, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Router};
use iceberg::TableIdent;
use inlet_common::access::{Authenticated, HttpAccess, Refused, TableOp, Viewer};
use serde_json::json;

use super::error::{RestError, Result};
use super::names::parse_namespace;

/// What a route needs beyond an authenticated principal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    /// Nothing more.
    Nothing,
    /// The operation on the table of the path.
    Table(TableOp),
    /// The right to change namespaces.
    Namespaces,
    /// The handler checks (the tables are in the body, or it lists what may be seen).
    Handler,
}

/// What a request needs, by its route (from `/v1/`) and method; None for a route this does
/// not know.
fn need(method: &Method, route: &str) -> Option<Need> {
    let read = *method == Method::GET || *method == Method::HEAD;
    Some(match route {
        "/v1/config" => Need::Nothing,
        "/v1/namespaces" | "/v1/namespaces/{namespace}" if read => Need::Nothing,
        "/v1/namespaces" | "/v1/namespaces/{namespace}" => Need::Namespaces,
        "/v1/namespaces/{namespace}/properties" => Need::Namespaces,
        "/v1/namespaces/{namespace}/tables"
        | "/v1/namespaces/{namespace}/register"
        | "/v1/tables/rename"
        | "/v1/transactions/commit" => Need::Handler,
        "/v1/namespaces/{namespace}/tables/{table}" => Need::Table(match *method {
            Method::GET | Method::HEAD => TableOp::Describe,
            Method::DELETE => TableOp::Drop,
            _ => TableOp::Write,
        }),
        "/v1/namespaces/{namespace}/tables/{table}/metrics" => Need::Table(TableOp::Describe),
        _ => return None,
    })
}

/// The REST catalog `router` with every routed request authenticated and authorized by
/// `access`, and the token endpoint beside it.
pub fn guarded(router: Router, access: Arc<dyn HttpAccess>) -> Router {
    router
        .route_layer(axum::middleware::from_fn_with_state(access.clone(), guard))
        .merge(
            Router::new()
                .route("/v1/oauth/tokens", post(tokens))
                .with_state(access),
        )
}

/// The client's address, when the server records it.
fn peer(req: &Request) -> Option<std::net::IpAddr> {
    req.extensions()
        .get::<ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip())
}

/// The refusal as the spec's error model (401 with a challenge, or 403).
fn refused(r: Refused) -> Response {
    match r {
        Refused::Unauthenticated(why) => {
            let mut response = RestError::NotAuthorized(why).into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer realm=\"inlet\""),
            );
            response
        }
        Refused::Forbidden(why) => RestError::Forbidden(why).into_response(),
    }
}

/// Authenticates a request and, on success, hands the handler its [`Viewer`]: the layer of
/// every guarded HTTP API (the catalog's own rules follow in [`guard`]).
pub async fn authenticate(
    State(access): State<Arc<dyn HttpAccess>>,
    mut req: Request,
    next: Next,
) -> Response {
    match viewer(&access, credentials(&req), peer(&req)).await {
        Ok(v) => {
            let principal = Authenticated(v.principal.clone());
            req.extensions_mut().insert(v);
            let mut response = next.run(req).await;
            response.extensions_mut().insert(principal);
            response
        }
        Err(r) => refused(r),
    }
}

/// What a request proves who it is with: its `Authorization` header, and the principal of
/// its verified client certificate (mTLS), if any.
fn credentials(req: &Request) -> (Option<String>, Option<String>) {
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let certificate = req
        .extensions()
        .get::<inlet_common::access::ClientCertificate>()
        .map(|c| c.0.clone());
    (authorization, certificate)
}

/// The request's principal: its `Authorization` header's, or, with none, its verified client
/// certificate's (mTLS); else what [`HttpAccess::authenticate`] says of no credentials.
async fn viewer(
    access: &Arc<dyn HttpAccess>,
    (authorization, certificate): (Option<String>, Option<String>),
    peer: Option<std::net::IpAddr>,
) -> Result<Viewer, Refused> {
    let principal = match (&authorization, certificate) {
        (None, Some(c)) => c,
        _ => access.authenticate(authorization.as_deref(), peer).await?,
    };
    Ok(Viewer {
        access: access.clone(),
        principal,
        peer,
    })
}

async fn guard(State(access): State<Arc<dyn HttpAccess>>, req: Request, next: Next) -> Response {
    let viewer = match viewer(&access, credentials(&req), peer(&req)).await {
        Ok(v) => v,
        Err(r) => return refused(r),
    };
    // The principal goes back with the answer, for the listener's audit trail.
    let principal = Authenticated(viewer.principal.clone());
    let mut response = route_rules(&access, viewer, req, next).await;
    response.extensions_mut().insert(principal);
    response
}

/// [`guard`]'s second half, for an authenticated `viewer`: what the route needs.
async fn route_rules(
    access: &Arc<dyn HttpAccess>,
    viewer: Viewer,
    req: Request,
    next: Next,
) -> Response {
    let matched = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_owned())
        .unwrap_or_default();
    // Mounted under a prefix (`/iceberg`), the route is what follows it.
    let route = matched
        .find("/v1/")
        .map_or(matched.as_str(), |i| &matched[i..])
        .to_owned();
    let (mut parts, body) = req.into_parts();
    let params: HashMap<String, String> =
        match <Path<HashMap<String, String>> as FromRequestParts<()>>::from_request_parts(
            &mut parts,
            &(),
        )
        .await
        {
            Ok(Path(p)) => p,
            Err(e) => return RestError::BadRequest(format!("invalid path: {e}")).into_response(),
        };
    let mut req = Request::from_parts(parts, body);
    match need(req.method(), &route) {
        None => {
            return RestError::Forbidden(format!(
                "{} is denied {} {route}: no rule authorizes that route",
                viewer.principal,
                req.method()
            ))
            .into_response()
        }
        Some(Need::Nothing | Need::Handler) => {}
        Some(Need::Namespaces) => {
            if !access.allows_namespaces(&viewer.principal, viewer.peer) {
                return RestError::Forbidden(format!(
                    "{} may not create, drop or change namespaces (ALTER on the cluster)",
                    viewer.principal
                ))
                .into_response();
            }
        }
        Some(Need::Table(op)) => {
            let (Some(namespace), Some(table)) = (params.get("namespace"), params.get("table"))
            else {
                return RestError::BadRequest("missing namespace or table in path".into())
                    .into_response();
            };
            let ident = match parse_namespace(namespace) {
                Ok(ns) => TableIdent::new(ns, table.clone()),
                Err(e) => return e.into_response(),
            };
            if let Err(e) = check(&viewer, op, &ident) {
                return e.into_response();
            }
        }
    }
    req.extensions_mut().insert(viewer);
    next.run(req).await
}

fn check(viewer: &Viewer, op: TableOp, ident: &TableIdent) -> Result<()> {
    if viewer.may(op, ident.namespace().as_ref(), ident.name()) {
        return Ok(());
    }
    Err(RestError::Forbidden(format!(
        "{} may not {} table {}",
        viewer.principal,
        op.name(),
        ident
    )))
}

/// For a handler whose tables are in the body: whether the request's principal (if the API
/// is guarded) may perform `op` on `ident`.
pub(super) fn authorize(
    viewer: &Option<Extension<Viewer>>,
    op: TableOp,
    ident: &TableIdent,
) -> Result<()> {
    match viewer {
        Some(Extension(v)) => check(v, op, ident),
        None => Ok(()),
    }
}

/// For a handler that lists tables: whether the request's principal may see `ident`.
pub(super) fn may_describe(viewer: &Option<Extension<Viewer>>, ident: &TableIdent) -> bool {
    authorize(viewer, TableOp::Describe, ident).is_ok()
}

/// `POST /v1/oauth/tokens`: OAuth2's client-credentials grant (a Kafka user and its password,
/// in the form or as HTTP basic auth), and the token-exchange grant Iceberg's Java client
/// refreshes with (a token of ours for a new one). Answers the spec's `OAuthTokenResponse`,
/// or its `OAuthError` (400 `invalid_request` / `unsupported_grant_type`, 401
/// `invalid_client`).
async fn tokens(State(access): State<Arc<dyn HttpAccess>>, req: Request) -> Response {
    let oauth_error = |status: StatusCode, error: &str, description: String| {
        (
            status,
            axum::Json(json!({"error": error, "error_description": description})),
        )
            .into_response()
    };
    let peer = peer(&req);
    let basic = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic ").map(str::to_owned));
    let body = match axum::body::to_bytes(req.into_body(), 64 * 1024).await {
        Ok(b) => b,
        Err(e) => {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                format!("the body does not read: {e}"),
            )
        }
    };
    let form: HashMap<String, String> = url::form_urlencoded::parse(&body).into_owned().collect();
    let grant = form.get("grant_type").map(String::as_str).unwrap_or("");
    let issued = match grant {
        "client_credentials" => {
            let (id, secret) = match (form.get("client_id"), form.get("client_secret"), &basic) {
                (Some(id), Some(secret), _) => (id.clone(), secret.clone()),
                (_, _, Some(encoded)) => {
                    use base64::Engine as _;
                    let decoded = base64::engine::general_purpose::STANDARD
                        .decode(encoded.trim())
                        .ok()
                        .and_then(|d| String::from_utf8(d).ok());
                    match decoded.as_deref().and_then(|d| d.split_once(':')) {
                        Some((id, secret)) => (id.to_owned(), secret.to_owned()),
                        None => {
                            return oauth_error(
                                StatusCode::BAD_REQUEST,
                                "invalid_request",
                                "the basic credentials are not of the form id:secret".into(),
                            )
                        }
                    }
                }
                _ => {
                    return oauth_error(
                        StatusCode::BAD_REQUEST,
                        "invalid_request",
                        "client_credentials needs client_id and client_secret".into(),
                    )
                }
            };
            access.issue_token(&id, &secret, peer).await
        }
        "urn:ietf:params:oauth:grant-type:token-exchange" => {
            let Some(subject) = form.get("subject_token") else {
                return oauth_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_request",
                    "token-exchange needs subject_token".into(),
                );
            };
            let authorization = format!("Bearer {subject}");
            match access.authenticate(Some(&authorization), peer).await {
                Ok(principal) => {
                    let user = principal.strip_prefix("User:").unwrap_or(&principal);
                    access.refresh_token(user).await
                }
                Err(e) => Err(e),
            }
        }
        other => {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "unsupported_grant_type",
                format!("grant_type {other:?} is not client_credentials or token-exchange"),
            )
        }
    };
    match issued {
        Ok(token) => axum::Json(json!({
            "access_token": token.access_token,
            "token_type": "bearer",
            "expires_in": token.expires_in_s,
            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
        }))
        .into_response(),
        Err(Refused::Unauthenticated(why) | Refused::Forbidden(why)) => {
            oauth_error(StatusCode::UNAUTHORIZED, "invalid_client", why)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_needs_its_rule_and_an_unknown_one_is_closed() {
        let (get, head, post, delete) = (Method::GET, Method::HEAD, Method::POST, Method::DELETE);
        let table = "/v1/namespaces/{namespace}/tables/{table}";
        for (method, route, expected) in [
            (&get, "/v1/config", Some(Need::Nothing)),
            (&get, "/v1/namespaces", Some(Need::Nothing)),
            (&post, "/v1/namespaces", Some(Need::Namespaces)),
            (&head, "/v1/namespaces/{namespace}", Some(Need::Nothing)),
            (
                &delete,
                "/v1/namespaces/{namespace}",
                Some(Need::Namespaces),
            ),
            (
                &post,
                "/v1/namespaces/{namespace}/properties",
                Some(Need::Namespaces),
            ),
            (
                &get,
                "/v1/namespaces/{namespace}/tables",
                Some(Need::Handler),
            ),
            (
                &post,
                "/v1/namespaces/{namespace}/tables",
                Some(Need::Handler),
            ),
            (
                &post,
                "/v1/namespaces/{namespace}/register",
                Some(Need::Handler),
            ),
            (&get, table, Some(Need::Table(TableOp::Describe))),
            (&head, table, Some(Need::Table(TableOp::Describe))),
            (&post, table, Some(Need::Table(TableOp::Write))),
            (&delete, table, Some(Need::Table(TableOp::Drop))),
            (&post, "/v1/tables/rename", Some(Need::Handler)),
            (&post, "/v1/transactions/commit", Some(Need::Handler)),
            (&get, "/v1/namespaces/{namespace}/views", None),
        ] {
            assert_eq!(need(method, route), expected, "{method} {route}");
        }
    }
}
