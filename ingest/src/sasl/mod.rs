//! SASL authentication of Kafka connections (KIP-43's SaslHandshake, KIP-152's
//! SaslAuthenticate, KIP-368's re-authentication): PLAIN and SCRAM-SHA-256/512, checked
//! against the users' SCRAM credentials in the metadata store (`credentials`; PLAIN derives
//! the salted password and compares it with the stored key, so no password is ever stored).
//!
//! A connection on a SASL listener starts unauthenticated ([`Authentication`]): only
//! ApiVersions, SaslHandshake and SaslAuthenticate are answered, one at a time, and any other
//! request closes the connection, as Kafka's broker does. Once a mechanism's exchange
//! succeeds, the connection's principal is `User:<name>`. With `connections.max.reauth.ms`,
//! SaslAuthenticate tells the client how long the session lasts; the client re-authenticates
//! (as the same user) before then, or the connection is closed at its next request after.

pub mod credentials;
pub(crate) mod failures;
pub mod oauthbearer;
pub mod scram;

use std::sync::atomic::Ordering;

use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use crate::broker::{str, Broker};
use scram::{Mechanism, ServerExchange};

pub use crate::config::{DEFAULT_MECHANISMS, MECHANISMS};

/// Where a connection's authentication stands.
#[derive(Debug)]
enum Stage {
    /// Waiting for SaslHandshake.
    Handshake,
    /// PLAIN chosen; waiting for its one SaslAuthenticate.
    Plain,
    /// A SCRAM mechanism chosen; in its exchange.
    Scram(ServerExchange),
    /// OAUTHBEARER chosen; waiting for its one SaslAuthenticate.
    OAuthBearer,
    /// Authenticated as `user`.
    Done,
}

/// One connection's SASL authentication.
#[derive(Debug)]
pub struct Authentication {
    enabled: Vec<String>,
    stage: Stage,
    /// The authenticated user, once there is one (kept through a re-authentication, which
    /// must name the same user).
    user: Option<String>,
    /// When the session ends (`connections.max.reauth.ms`), in the broker clock's ms.
    expires_ms: Option<u64>,
    /// The client's address, whose failed authentications are counted (`failures`).
    peer: Option<std::net::IpAddr>,
}

/// What the connection does after an authentication request.
#[derive(Debug)]
pub enum Outcome {
    /// Send this answer and go on.
    Answer(ResponseKind),
    /// Send this answer, then close the connection (a failed authentication).
    AnswerAndClose(ResponseKind),
}

impl Authentication {
    /// A new connection from `peer` on a listener offering `enabled` mechanisms.
    pub fn new(enabled: &[String], peer: Option<std::net::IpAddr>) -> Self {
        Authentication {
            enabled: enabled.to_vec(),
            stage: Stage::Handshake,
            user: None,
            expires_ms: None,
            peer,
        }
    }

    /// The authenticated principal, once the first exchange succeeded.
    pub fn principal(&self) -> Option<String> {
        self.user.as_ref().map(|u| format!("User:{u}"))
    }

    /// Whether requests other than authentication ones may be served now: authenticated, and
    /// the session not over (`now_ms`). A re-authentication in progress does not stop them:
    /// clients pipeline requests around it (Kafka's broker holds them until it is over; the
    /// connection is the same user's throughout).
    pub fn serves(&self, now_ms: u64) -> bool {
        self.user.is_some() && self.expires_ms.is_none_or(|end| now_ms < end)
    }

    /// Answers a SaslHandshake.
    pub fn handshake(&mut self, r: &SaslHandshakeRequest) -> Outcome {
        let mechanisms: Vec<_> = self.enabled.iter().map(|m| str(m.clone())).collect();
        let chosen = r.mechanism.as_str();
        if !matches!(self.stage, Stage::Handshake | Stage::Done) {
            return Outcome::AnswerAndClose(ResponseKind::SaslHandshake(
                SaslHandshakeResponse::default()
                    .with_error_code(ResponseError::IllegalSaslState.code())
                    .with_mechanisms(mechanisms),
            ));
        }
        if !self.enabled.iter().any(|m| m == chosen) {
            return Outcome::AnswerAndClose(ResponseKind::SaslHandshake(
                SaslHandshakeResponse::default()
                    .with_error_code(ResponseError::UnsupportedSaslMechanism.code())
                    .with_mechanisms(mechanisms),
            ));
        }
        self.stage = match Mechanism::from_name(chosen) {
            Some(m) => Stage::Scram(ServerExchange::new(m)),
            None if chosen == "OAUTHBEARER" => Stage::OAuthBearer,
            None => Stage::Plain,
        };
        Outcome::Answer(ResponseKind::SaslHandshake(
            SaslHandshakeResponse::default().with_mechanisms(mechanisms),
        ))
    }

    /// Answers a SaslAuthenticate, reading credentials from `broker`'s metadata store.
    /// `reauth_ms` is `connections.max.reauth.ms` (0: sessions do not expire); `now_ms` the
    /// broker clock.
    pub async fn authenticate(
        &mut self,
        broker: &Broker,
        r: &SaslAuthenticateRequest,
        reauth_ms: u64,
        now_ms: u64,
    ) -> Outcome {
        let peer = self.peer;
        let failed = |code: ResponseError, why: String| {
            // The audit entry is the log's line for it (target `inlet_audit`).
            crate::audit::authentication_failed(
                "kafka",
                &peer.map(|p| p.to_string()).unwrap_or_default(),
                "",
                &why,
            );
            broker
                .metrics()
                .sasl_failures
                .fetch_add(1, Ordering::Relaxed);
            if let (Some(ip), ResponseError::SaslAuthenticationFailed) = (peer, code) {
                broker.authentication_failed(ip);
            }
            Outcome::AnswerAndClose(ResponseKind::SaslAuthenticate(
                SaslAuthenticateResponse::default()
                    .with_error_code(code.code())
                    .with_error_message(Some(str(why))),
            ))
        };
        let auth_failed = |why: String| failed(ResponseError::SaslAuthenticationFailed, why);
        let meta = broker.store.meta();
        // An address that failed too often lately is refused before any check (`failures`).
        if let Some(ms) = peer.and_then(|ip| broker.authentication_refused_for(ip)) {
            tracing::info!(
                ?peer,
                "SASL authentication refused: too many failures lately"
            );
            broker
                .metrics()
                .sasl_failures
                .fetch_add(1, Ordering::Relaxed);
            return Outcome::AnswerAndClose(ResponseKind::SaslAuthenticate(
                SaslAuthenticateResponse::default()
                    .with_error_code(ResponseError::SaslAuthenticationFailed.code())
                    .with_error_message(Some(str(format!(
                        "too many failed authentications from this address: try again in {} s",
                        ms.div_ceil(1000)
                    )))),
            ));
        }
        let stage = std::mem::replace(&mut self.stage, Stage::Handshake);
        // When the credential itself expires (an OAUTHBEARER token), in the broker clock's ms.
        let mut credential_expires_ms: Option<u64> = None;
        let (user, reply) = match stage {
            Stage::OAuthBearer => {
                let (token, authzid) = match oauthbearer::parse_client_first(&r.auth_bytes) {
                    Ok(t) => t,
                    Err(e) => return auth_failed(e),
                };
                let validated = match broker.validate_bearer(&token, now_ms).await {
                    Ok(v) => v,
                    Err(e) => return auth_failed(format!("invalid OAUTHBEARER token: {e}")),
                };
                if authzid.as_ref().is_some_and(|a| *a != validated.subject) {
                    return auth_failed(format!(
                        "the authorization id {:?} is not the token's subject {:?}",
                        authzid.unwrap_or_default(),
                        validated.subject
                    ));
                }
                credential_expires_ms = Some(validated.expires_ms);
                (validated.subject, Bytes::new())
            }
            Stage::Plain => {
                let Some((user, password)) = parse_plain(&r.auth_bytes) else {
                    return auth_failed("malformed PLAIN message".into());
                };
                let verified = match credentials::verify_password(meta, &user, &password).await {
                    Ok(v) => v,
                    Err(e) => {
                        return failed(
                            ResponseError::SaslAuthenticationFailed,
                            format!("reading the credentials failed: {}", e.message),
                        )
                    }
                };
                if !verified {
                    return auth_failed(format!(
                        "authentication failed: invalid credentials for user {user:?}"
                    ));
                }
                (user, Bytes::new())
            }
            Stage::Scram(mut exchange) => match &exchange {
                ServerExchange::Start { mechanism } => {
                    let mechanism = *mechanism;
                    let user = match ServerExchange::user_of(&r.auth_bytes) {
                        Ok(u) => u,
                        Err(e) => return auth_failed(e),
                    };
                    let credential = match credentials::credential(meta, &user, mechanism).await {
                        Ok(c) => c,
                        Err(e) => {
                            return auth_failed(format!(
                                "reading the credentials failed: {}",
                                e.message
                            ))
                        }
                    };
                    match exchange.first(&r.auth_bytes, credential) {
                        Ok(server_first) => {
                            self.stage = Stage::Scram(exchange);
                            return Outcome::Answer(ResponseKind::SaslAuthenticate(
                                SaslAuthenticateResponse::default()
                                    .with_error_message(None)
                                    .with_auth_bytes(Bytes::from(server_first)),
                            ));
                        }
                        Err(e) => return auth_failed(e),
                    }
                }
                _ => match exchange.last(&r.auth_bytes) {
                    Ok((user, server_final)) => (user, Bytes::from(server_final)),
                    Err(e) => return auth_failed(e),
                },
            },
            Stage::Handshake | Stage::Done => {
                return failed(
                    ResponseError::IllegalSaslState,
                    "SaslAuthenticate before SaslHandshake".into(),
                )
            }
        };
        if self.user.as_ref().is_some_and(|before| *before != user) {
            return auth_failed(format!(
                "re-authentication as {user:?} on a connection authenticated as {:?}",
                self.user.as_deref().unwrap_or_default()
            ));
        }
        let again = self.user.is_some();
        self.user = Some(user);
        self.stage = Stage::Done;
        tracing::debug!(
            user = self.user.as_deref().unwrap_or_default(),
            again,
            reauth_ms,
            "SASL authenticated"
        );
        let metrics = broker.metrics();
        metrics.sasl_authentications.fetch_add(1, Ordering::Relaxed);
        if again {
            metrics
                .sasl_reauthentications
                .fetch_add(1, Ordering::Relaxed);
        }
        // As Kafka's: with re-authentication on, a session lasts `reauth_ms`, and no longer than
        // its token.
        let lifetime = if reauth_ms > 0 {
            let end = credential_expires_ms.map_or(now_ms + reauth_ms, |exp| {
                (now_ms + reauth_ms).min(exp.max(now_ms + 1))
            });
            self.expires_ms = Some(end);
            (end - now_ms) as i64
        } else {
            0
        };
        Outcome::Answer(ResponseKind::SaslAuthenticate(
            SaslAuthenticateResponse::default()
                .with_error_message(None)
                .with_auth_bytes(reply)
                .with_session_lifetime_ms(lifetime),
        ))
    }
}

/// A PLAIN message (RFC 4616): `[authzid] NUL authcid NUL passwd`, as (user, password); an
/// authzid other than the user is refused.
pub fn parse_plain(bytes: &[u8]) -> Option<(String, String)> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut parts = text.split('\0');
    let authzid = parts.next()?;
    let user = parts.next()?;
    let password = parts.next()?;
    if parts.next().is_some() || user.is_empty() || (!authzid.is_empty() && authzid != user) {
        return None;
    }
    Some((user.to_string(), password.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_messages_are_read_as_rfc_4616_writes_them() {
        assert_eq!(
            parse_plain(b"\0alice\0secret"),
            Some(("alice".into(), "secret".into()))
        );
        assert_eq!(
            parse_plain(b"alice\0alice\0secret"),
            Some(("alice".into(), "secret".into()))
        );
        assert_eq!(parse_plain(b"bob\0alice\0secret"), None);
        assert_eq!(parse_plain(b"\0\0secret"), None);
        assert_eq!(parse_plain(b"\0alice"), None);
    }

    #[test]
    fn a_handshake_offers_the_enabled_mechanisms_and_refuses_others() {
        let mut auth = Authentication::new(&["PLAIN".into(), "SCRAM-SHA-512".into()], None);
        let asked = |m: &str| SaslHandshakeRequest::default().with_mechanism(str(m.to_string()));
        assert!(matches!(
            auth.handshake(&asked("SCRAM-SHA-256")),
            Outcome::AnswerAndClose(ResponseKind::SaslHandshake(r))
                if r.error_code == ResponseError::UnsupportedSaslMechanism.code() && r.mechanisms.len() == 2
        ));
        assert!(matches!(
            auth.handshake(&asked("SCRAM-SHA-512")),
            Outcome::Answer(ResponseKind::SaslHandshake(r)) if r.error_code == 0
        ));
        assert!(!auth.serves(0));
    }
}
