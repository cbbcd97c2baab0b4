//! The node's [`HttpAccess`] (`[http] authentication = "token"`): who may use the Iceberg REST
//! catalog, SQL, watermarks and the status endpoints, decided with the Kafka users and the
//! Kafka ACLs, so an operator keeps one set of users and one set of permissions.
//!
//! **Authentication.** `Authorization: Basic` with a Kafka user's password (checked against
//! the user's SCRAM credential, as SASL/PLAIN checks it), or `Authorization: Bearer` with a
//! token from the catalog's OAuth2 token endpoint (client credentials: the user and the
//! password). A token is a JWT (HS256) naming the user, signed with a key kept in the
//! metadata store (`inlet_cluster`, made by the first node that needs it), so every node
//! accepts every node's tokens; it expires after `token_ttl_s`. An identity provider's JWT is
//! accepted as SASL/OAUTHBEARER accepts it (`crate::sasl::oauthbearer`, with Kafka's
//! `sasl.oauthbearer.*` configs): its subject is the user.
//!
//! **Authorization**, by the Kafka ACLs of a table's resource: the TOPIC of the table topic that
//! writes the table (its `table.topic.namespace` and `table.topic.table`), or, for a table no
//! topic writes, the TOPIC named by its identifier joined with dots (`analytics.rollup`; a
//! PREFIXED binding on `analytics.` covers a namespace). Loading a table or reading its
//! watermark needs DESCRIBE (implied by READ and WRITE), reading its rows with SQL READ,
//! committing WRITE, creating CREATE (on the resource or the cluster, as Kafka's CreateTopics),
//! dropping DELETE. Creating, dropping or changing namespaces needs ALTER on the cluster.
//! `super.users`, DENY over ALLOW and `allow.everyone.if.no.acl.found` hold as on Kafka; with the
//! Kafka authorizer off, every authenticated user may do everything.

use std::net::IpAddr;
use std::sync::Arc;

use base64::Engine as _;
use hmac::{Hmac, Mac};
use inlet_common::access::{BoxFuture, HttpAccess, Named, Refused, TableOp, Token};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use sqlx::Row;

use super::{Operation, ResourceType, Session};
use crate::sasl::credentials;
use crate::Broker;

/// The node's [`HttpAccess`].
pub struct NodeAccess {
    broker: Arc<Broker>,
    token_ttl_s: u64,
}

/// A token's claims.
#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    /// The user.
    sub: String,
    iss: String,
    /// Issued and expiring, in seconds since the epoch.
    iat: u64,
    exp: u64,
}

const ISSUER: &str = "inlet";
const B64: base64::engine::general_purpose::GeneralPurpose =
    base64::engine::general_purpose::URL_SAFE_NO_PAD;

impl NodeAccess {
    /// Tokens it issues live `token_ttl_s` seconds.
    pub fn new(broker: Arc<Broker>, token_ttl_s: u64) -> Self {
        NodeAccess {
            broker,
            token_ttl_s: token_ttl_s.max(1),
        }
    }

    async fn key(&self) -> Result<&[u8], String> {
        token_key(&self.broker).await
    }

    fn sign(key: &[u8], signed: &str) -> Vec<u8> {
        // HMAC takes a key of any length.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key)
            .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
        mac.update(signed.as_bytes());
        mac.finalize().into_bytes().to_vec()
    }

    /// A token for `user`, signed with `key`, issued at `now_s`.
    fn token(key: &[u8], user: &str, now_s: u64, ttl_s: u64) -> String {
        let header = B64.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
        let claims = Claims {
            sub: user.to_owned(),
            iss: ISSUER.into(),
            iat: now_s,
            exp: now_s + ttl_s,
        };
        let payload = B64.encode(serde_json::to_vec(&claims).unwrap_or_default());
        let signed = format!("{header}.{payload}");
        let signature = B64.encode(Self::sign(key, &signed));
        format!("{signed}.{signature}")
    }

    fn now_s(&self) -> u64 {
        self.broker.clock.now_ms() / 1000
    }

    /// The Kafka resource whose ACLs decide for table `table` of `namespace` (see the module
    /// doc).
    fn table_resource(&self, namespace: &[String], table: &str) -> String {
        let dotted = namespace.join(".");
        let config = self.broker.config();
        let defaults = &config.topic_defaults;
        for topic in self.broker.topics().list() {
            if let Some((ns, t)) = topic.configs.table_of(&topic.name, defaults) {
                if ns == dotted && t == table {
                    return topic.name.clone();
                }
            }
        }
        if dotted.is_empty() {
            table.to_owned()
        } else {
            format!("{dotted}.{table}")
        }
    }

    fn session(principal: &str, peer: Option<IpAddr>) -> Session {
        Session {
            principal: principal.to_owned(),
            host: peer.map(|p| p.to_string()).unwrap_or_default(),
            listener: "HTTP".into(),
        }
    }

    async fn password(&self, user: &str, password: &str) -> Result<(), String> {
        match credentials::verify_password(self.broker.store().meta(), user, password).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(format!("invalid credentials for user {user:?}")),
            Err(e) => Err(format!("reading the credentials failed: {}", e.message)),
        }
    }
}

/// Why an address is refused before any check (`sasl::failures`), for `ms` more.
fn too_many(ms: u64) -> String {
    format!(
        "too many failed authentications from this address: try again in {} s",
        ms.div_ceil(1000)
    )
}

/// The cluster's token signing key: read from the metadata store, made there by the first
/// node that needs one; kept by the broker once read.
pub(crate) async fn token_key(broker: &Broker) -> Result<&[u8], String> {
    let meta = broker.store().meta();
    broker
        .token_key
        .get_or_try_init(|| async {
            let fresh: [u8; 32] = inlet_common::random::bytes();
            let read = async {
                sqlx::query(
                    "INSERT INTO inlet_cluster (name, value) VALUES ('token_signing_key', $1)
                     ON CONFLICT (name) DO NOTHING",
                )
                .bind(B64.encode(fresh))
                .execute(meta.pool())
                .await?;
                let row =
                    sqlx::query("SELECT value FROM inlet_cluster WHERE name = 'token_signing_key'")
                        .fetch_one(meta.pool())
                        .await?;
                row.try_get::<String, _>("value")
            };
            let text =
                inlet_storage::bounded(async { read.await.map_err(inlet_storage::Error::from) })
                    .await
                    .map_err(|e| format!("reading the token signing key failed: {e}"))?;
            B64.decode(text)
                .map_err(|_| "the token signing key is not base64".to_string())
        })
        .await
        .map(Vec::as_slice)
}

/// The user a token of this cluster's names and when it expires (seconds since the epoch), if
/// `key` signed it and it has not expired at `now_s`. The HTTP listeners and SASL/OAUTHBEARER
/// (`crate::sasl::oauthbearer`) take the same tokens.
pub(crate) fn verify_token(key: &[u8], token: &str, now_s: u64) -> Result<(String, u64), String> {
    let (header, claims, signed, given) = crate::sasl::oauthbearer::split(token)?;
    if header.get("alg").and_then(|a| a.as_str()) != Some("HS256") {
        return Err("the bearer token is not one this cluster issued (alg)".into());
    }
    let expected = NodeAccess::sign(key, signed);
    let same = given.len() == expected.len()
        && given
            .iter()
            .zip(&expected)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    if !same {
        return Err("the bearer token's signature is not this cluster's".into());
    }
    let claims: Claims =
        serde_json::from_value(claims).map_err(|_| "the bearer token's claims do not read")?;
    if claims.iss != ISSUER {
        return Err(format!("the bearer token's issuer is {:?}", claims.iss));
    }
    if claims.exp <= now_s {
        return Err(format!(
            "the bearer token expired {} s ago",
            now_s - claims.exp
        ));
    }
    Ok((claims.sub, claims.exp))
}

/// The user and password of a `Basic` `Authorization` header's credentials.
pub(crate) fn basic_credentials(encoded: &str) -> Result<(String, String), String> {
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|_| "the basic credentials are not base64")?;
    let text = String::from_utf8(decoded).map_err(|_| "the basic credentials are not UTF-8")?;
    let (user, password) = text
        .split_once(':')
        .ok_or("the basic credentials are not of the form user:password")?;
    Ok((user.to_owned(), password.to_owned()))
}

impl HttpAccess for NodeAccess {
    fn authenticate<'a>(
        &'a self,
        authorization: Option<&'a str>,
        peer: Option<IpAddr>,
    ) -> BoxFuture<'a, Result<String, Refused>> {
        Box::pin(async move {
            let refuse = |why: String| {
                // The audit entry is the log's line for it (target `inlet_audit`).
                crate::audit::authentication_failed(
                    "http",
                    &peer.map(|p| p.to_string()).unwrap_or_default(),
                    "",
                    &why,
                );
                Refused::Unauthenticated(why)
            };
            if let Some(ms) = peer.and_then(|ip| self.broker.authentication_refused_for(ip)) {
                return Err(Refused::Unauthenticated(too_many(ms)));
            }
            let refuse = |why: String| {
                if let Some(ip) = peer {
                    self.broker.authentication_failed(ip);
                }
                refuse(why)
            };
            let Some(authorization) = authorization else {
                return Err(Refused::Unauthenticated(
                    "this endpoint requires authentication: a bearer token from \
                     /iceberg/v1/oauth/tokens, or HTTP basic auth with a Kafka user"
                        .into(),
                ));
            };
            let (scheme, rest) = authorization
                .split_once(' ')
                .ok_or_else(|| refuse("the Authorization header has no scheme".into()))?;
            if scheme.eq_ignore_ascii_case("basic") {
                let (user, password) = basic_credentials(rest).map_err(refuse)?;
                self.password(&user, &password).await.map_err(refuse)?;
                Ok(format!("User:{user}"))
            } else if scheme.eq_ignore_ascii_case("bearer") {
                // This cluster's token, or an identity provider's (checked as SASL/OAUTHBEARER
                // checks it, against the `sasl.oauthbearer.*` configs).
                let token = self
                    .broker
                    .validate_bearer(rest.trim(), self.broker.clock.now_ms())
                    .await
                    .map_err(refuse)?;
                Ok(format!("User:{}", token.subject))
            } else {
                Err(refuse(format!(
                    "the {scheme} scheme is not accepted: use Bearer or Basic"
                )))
            }
        })
    }

    fn issue_token<'a>(
        &'a self,
        client_id: &'a str,
        client_secret: &'a str,
        peer: Option<IpAddr>,
    ) -> BoxFuture<'a, Result<Token, Refused>> {
        Box::pin(async move {
            if let Some(ms) = peer.and_then(|ip| self.broker.authentication_refused_for(ip)) {
                return Err(Refused::Unauthenticated(too_many(ms)));
            }
            if let Err(why) = self.password(client_id, client_secret).await {
                tracing::info!(peer = ?peer, reason = %why, "token request refused");
                if let Some(ip) = peer {
                    self.broker.authentication_failed(ip);
                }
                return Err(Refused::Unauthenticated(why));
            }
            self.refresh_token(client_id).await
        })
    }

    fn refresh_token<'a>(&'a self, user: &'a str) -> BoxFuture<'a, Result<Token, Refused>> {
        Box::pin(async move {
            let key = self.key().await.map_err(Refused::Unauthenticated)?;
            Ok(Token {
                access_token: Self::token(key, user, self.now_s(), self.token_ttl_s),
                expires_in_s: self.token_ttl_s,
            })
        })
    }

    fn allows_table(
        &self,
        principal: &str,
        peer: Option<IpAddr>,
        op: TableOp,
        namespace: &[String],
        table: &str,
    ) -> bool {
        let authorizer = &self.broker.authorizer;
        if !authorizer.enabled() {
            return true;
        }
        let session = Self::session(principal, peer);
        let resource = self.table_resource(namespace, table);
        let on_topic =
            |operation| authorizer.allows(&session, operation, ResourceType::Topic, &resource);
        match op {
            TableOp::Describe => on_topic(Operation::Describe),
            TableOp::Read => on_topic(Operation::Read),
            TableOp::Write => on_topic(Operation::Write),
            TableOp::Drop => on_topic(Operation::Delete),
            TableOp::Create => {
                authorizer.allows(
                    &session,
                    Operation::Create,
                    ResourceType::Cluster,
                    super::CLUSTER,
                ) || on_topic(Operation::Create)
            }
        }
    }

    fn allows_namespaces(&self, principal: &str, peer: Option<IpAddr>) -> bool {
        self.broker.authorizer.allows(
            &Self::session(principal, peer),
            Operation::Alter,
            ResourceType::Cluster,
            super::CLUSTER,
        )
    }

    fn allows_describe(&self, principal: &str, peer: Option<IpAddr>, named: Named<'_>) -> bool {
        let (resource_type, name) = match named {
            Named::Topic(topic) => (ResourceType::Topic, topic),
            Named::Group(group) => (ResourceType::Group, group),
            Named::Subject(subject) => (ResourceType::Topic, super::subject_topic(subject)),
        };
        self.broker.authorizer.allows(
            &Self::session(principal, peer),
            Operation::Describe,
            resource_type,
            name,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_verifies_with_its_key_until_it_expires_and_not_otherwise() {
        let key = [7u8; 32];
        let token = NodeAccess::token(&key, "alice", 1_000, 60);
        assert_eq!(
            verify_token(&key, &token, 1_000),
            Ok(("alice".into(), 1_060))
        );
        assert_eq!(
            verify_token(&key, &token, 1_059),
            Ok(("alice".into(), 1_060))
        );
        assert!(verify_token(&key, &token, 1_060)
            .unwrap_err()
            .contains("expired"));
        assert!(verify_token(&[8u8; 32], &token, 1_000)
            .unwrap_err()
            .contains("signature"));
        // Another user's claims under alice's signature.
        let (head, rest) = token.split_once('.').unwrap();
        let signature = rest.rsplit_once('.').unwrap().1;
        let forged_claims = B64.encode(br#"{"sub":"admin","iss":"inlet","iat":1000,"exp":9999}"#);
        let forged = format!("{head}.{forged_claims}.{signature}");
        assert!(verify_token(&key, &forged, 1_000)
            .unwrap_err()
            .contains("signature"));
        // alg none is not accepted, whatever the signature.
        let none = format!("{}.{forged_claims}.", B64.encode(br#"{"alg":"none"}"#));
        assert!(verify_token(&key, &none, 1_000)
            .unwrap_err()
            .contains("alg"));
        assert!(verify_token(&key, "abc", 1_000)
            .unwrap_err()
            .contains("JWT"));
    }

    #[test]
    fn basic_credentials_are_read_or_refused_with_the_reason() {
        let encoded = base64::engine::general_purpose::STANDARD.encode("alice:s3cr:et");
        assert_eq!(
            basic_credentials(&encoded),
            Ok(("alice".into(), "s3cr:et".into()))
        );
        assert!(basic_credentials("!!!").unwrap_err().contains("base64"));
        let no_colon = base64::engine::general_purpose::STANDARD.encode("alice");
        assert!(basic_credentials(&no_colon)
            .unwrap_err()
            .contains("user:password"));
    }
}
