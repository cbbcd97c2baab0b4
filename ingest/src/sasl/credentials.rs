//! Users' SCRAM credentials in the metadata store (`inlet_scram_credentials`): one row per user
//! and mechanism with the salt, iterations, StoredKey and ServerKey (never a password), shared
//! by every node and read at each authentication, so a change holds on every node for the next
//! connection. Managed with Kafka's DescribeUserScramCredentials and
//! AlterUserScramCredentials (KIP-554) and with `inlet users`.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use inlet_storage::MetaStore;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use sqlx::Row;

use super::scram::{Credential, Mechanism, MAX_ITERATIONS, MIN_ITERATIONS};
use crate::broker::{str, Broker};
use crate::error::{KafkaError, Result};

pub(crate) const MIGRATIONS: &[&str] = &["CREATE TABLE inlet_scram_credentials (
        name VARCHAR(255) NOT NULL,
        mechanism SMALLINT NOT NULL,
        salt TEXT NOT NULL,
        iterations INTEGER NOT NULL,
        stored_key TEXT NOT NULL,
        server_key TEXT NOT NULL,
        PRIMARY KEY (name, mechanism))"];

fn err(e: sqlx::Error) -> KafkaError {
    inlet_storage::Error::from(e).into()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn unb64(text: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap_or_default()
}

/// Prepares `meta` for the credentials (creates their table), for tools that open the
/// metadata store without a node (`inlet users`).
pub async fn prepare(meta: &MetaStore) -> Result<()> {
    meta.migrate("ingest.scram_credentials", MIGRATIONS).await?;
    Ok(())
}

/// `user`'s credential for `mechanism`, if it has one.
pub async fn credential(
    meta: &MetaStore,
    user: &str,
    mechanism: Mechanism,
) -> Result<Option<Credential>> {
    let row = inlet_storage::bounded(async {
        Ok(sqlx::query(
            "SELECT salt, iterations, stored_key, server_key FROM inlet_scram_credentials
             WHERE name = $1 AND mechanism = $2",
        )
        .bind(user)
        .bind(i16::from(mechanism.code()))
        .fetch_optional(meta.pool())
        .await?)
    })
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    Ok(Some(Credential {
        mechanism,
        salt: unb64(&row.try_get::<String, _>(0).map_err(err)?),
        iterations: row.try_get(1).map_err(err)?,
        stored_key: unb64(&row.try_get::<String, _>(2).map_err(err)?),
        server_key: unb64(&row.try_get::<String, _>(3).map_err(err)?),
    }))
}

/// Whether `password` is `user`'s: checked against the user's SCRAM-SHA-512 credential, or
/// its SCRAM-SHA-256 one (SASL/PLAIN and HTTP basic auth check passwords this way). False for
/// a user with neither.
pub async fn verify_password(meta: &MetaStore, user: &str, password: &str) -> Result<bool> {
    for m in [Mechanism::Sha512, Mechanism::Sha256] {
        if let Some(c) = credential(meta, user, m).await? {
            // PBKDF2 of the credential's iterations: CPU work, off the async workers (a
            // check that panicked verifies nothing).
            let password = password.to_owned();
            return Ok(tokio::task::spawn_blocking(move || c.verifies(&password))
                .await
                .unwrap_or(false));
        }
    }
    Ok(false)
}

/// Every user with a credential, with the mechanisms and iterations of theirs.
pub async fn list(meta: &MetaStore) -> Result<BTreeMap<String, Vec<(Mechanism, i32)>>> {
    let rows = inlet_storage::bounded(async {
        Ok(
            sqlx::query("SELECT name, mechanism, iterations FROM inlet_scram_credentials")
                .fetch_all(meta.pool())
                .await?,
        )
    })
    .await?;
    let mut out: BTreeMap<String, Vec<(Mechanism, i32)>> = BTreeMap::new();
    for row in rows {
        let name: String = row.try_get(0).map_err(err)?;
        let mechanism: i32 = row
            .try_get::<i32, _>(1)
            .or_else(|_| row.try_get::<i16, _>(1).map(i32::from))
            .map_err(err)?;
        let iterations: i32 = row.try_get(2).map_err(err)?;
        if let Some(m) = i8::try_from(mechanism).ok().and_then(Mechanism::from_code) {
            out.entry(name).or_default().push((m, iterations));
        }
    }
    Ok(out)
}

/// Stores `credential` as `user`'s for its mechanism (replacing one there).
pub async fn upsert(meta: &MetaStore, user: &str, c: &Credential) -> Result<()> {
    sqlx::query(
        "INSERT INTO inlet_scram_credentials (name, mechanism, salt, iterations, stored_key, server_key)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (name, mechanism) DO UPDATE SET salt = excluded.salt,
            iterations = excluded.iterations, stored_key = excluded.stored_key,
            server_key = excluded.server_key",
    )
    .bind(user)
    .bind(i16::from(c.mechanism.code()))
    .bind(b64(&c.salt))
    .bind(c.iterations)
    .bind(b64(&c.stored_key))
    .bind(b64(&c.server_key))
    .execute(meta.pool())
    .await
    .map_err(err)?;
    Ok(())
}

/// Deletes `user`'s credential for `mechanism` (every mechanism's with `None`); returns how
/// many there were.
pub async fn delete(meta: &MetaStore, user: &str, mechanism: Option<Mechanism>) -> Result<u64> {
    let done = match mechanism {
        Some(m) => {
            sqlx::query("DELETE FROM inlet_scram_credentials WHERE name = $1 AND mechanism = $2")
                .bind(user)
                .bind(i16::from(m.code()))
                .execute(meta.pool())
                .await
        }
        None => {
            sqlx::query("DELETE FROM inlet_scram_credentials WHERE name = $1")
                .bind(user)
                .execute(meta.pool())
                .await
        }
    }
    .map_err(err)?;
    Ok(done.rows_affected())
}

/// One user's alterations in an AlterUserScramCredentials request.
#[derive(Default)]
struct Alterations {
    deletions: Vec<i8>,
    upsertions: Vec<(i8, i32, Vec<u8>, Vec<u8>)>,
}

fn refuse(code: ResponseError, why: impl Into<String>) -> KafkaError {
    KafkaError::new(code, why.into())
}

impl Broker {
    pub(crate) async fn describe_user_scram_credentials(
        &self,
        r: DescribeUserScramCredentialsRequest,
        _version: i16,
    ) -> DescribeUserScramCredentialsResponse {
        let known = match list(self.store.meta()).await {
            Ok(k) => k,
            Err(e) => {
                return DescribeUserScramCredentialsResponse::default()
                    .with_error_code(e.code())
                    .with_error_message(Some(str(e.message)))
            }
        };
        let infos = |creds: &Vec<(Mechanism, i32)>| {
            creds
                .iter()
                .map(|(m, i)| {
                    CredentialInfo::default()
                        .with_mechanism(m.code())
                        .with_iterations(*i)
                })
                .collect()
        };
        let asked: Vec<String> = r
            .users
            .unwrap_or_default()
            .into_iter()
            .map(|u| u.name.to_string())
            .collect();
        let results = if asked.is_empty() {
            known
                .iter()
                .map(|(user, creds)| {
                    DescribeUserScramCredentialsResult::default()
                        .with_user(str(user.clone()))
                        .with_error_message(None)
                        .with_credential_infos(infos(creds))
                })
                .collect()
        } else {
            let mut seen = BTreeSet::new();
            let duplicated: BTreeSet<&String> = asked.iter().filter(|u| !seen.insert(*u)).collect();
            let mut done = BTreeSet::new();
            asked
                .iter()
                .filter(|u| done.insert(*u))
                .map(|user| {
                    let result = DescribeUserScramCredentialsResult::default()
                        .with_user(str(user.clone()))
                        .with_error_message(None);
                    if duplicated.contains(user) {
                        return result
                            .with_error_code(ResponseError::DuplicateResource.code())
                            .with_error_message(Some(str(format!("user {user:?} is named more than once"))));
                    }
                    match known.get(user) {
                        Some(creds) => result.with_credential_infos(infos(creds)),
                        None => result
                            .with_error_code(ResponseError::ResourceNotFound.code())
                            .with_error_message(Some(str(format!(
                                "attempt to describe a user credential that does not exist: {user:?}"
                            )))),
                    }
                })
                .collect()
        };
        DescribeUserScramCredentialsResponse::default()
            .with_error_message(None)
            .with_results(results)
    }

    pub(crate) async fn alter_user_scram_credentials(
        &self,
        r: AlterUserScramCredentialsRequest,
        _version: i16,
    ) -> AlterUserScramCredentialsResponse {
        let mut by_user: BTreeMap<String, Alterations> = BTreeMap::new();
        let mut order: Vec<String> = Vec::new();
        let note = |name: &str, order: &mut Vec<String>| {
            if !order.iter().any(|n| n == name) {
                order.push(name.to_string());
            }
        };
        for d in &r.deletions {
            note(&d.name, &mut order);
            by_user
                .entry(d.name.to_string())
                .or_default()
                .deletions
                .push(d.mechanism);
        }
        for u in &r.upsertions {
            note(&u.name, &mut order);
            by_user
                .entry(u.name.to_string())
                .or_default()
                .upsertions
                .push((
                    u.mechanism,
                    u.iterations,
                    u.salt.to_vec(),
                    u.salted_password.to_vec(),
                ));
        }
        let mut results = Vec::new();
        for user in order {
            let alterations = by_user.remove(&user).unwrap_or_default();
            let outcome = self.alter_one_user(&user, alterations).await;
            let mut result = AlterUserScramCredentialsResult::default()
                .with_user(str(user))
                .with_error_message(None);
            if let Err(e) = outcome {
                result.error_code = e.code();
                result.error_message = Some(str(e.message));
            }
            results.push(result);
        }
        AlterUserScramCredentialsResponse::default().with_results(results)
    }

    /// Checks all of one user's alterations, then applies them; a user with a refused one gets
    /// none applied (Kafka's rule).
    async fn alter_one_user(&self, user: &str, a: Alterations) -> Result<()> {
        if user.is_empty() {
            return Err(refuse(
                ResponseError::UnacceptableCredential,
                "the user name is empty",
            ));
        }
        let mut mechanisms = BTreeSet::new();
        for m in a.deletions.iter().chain(a.upsertions.iter().map(|u| &u.0)) {
            if !mechanisms.insert(*m) {
                return Err(refuse(
                    ResponseError::DuplicateResource,
                    format!(
                        "a credential of user {user:?} is altered more than once in one request"
                    ),
                ));
            }
        }
        let mut deletions = Vec::new();
        for code in &a.deletions {
            let m = Mechanism::from_code(*code).ok_or_else(|| {
                refuse(
                    ResponseError::UnsupportedSaslMechanism,
                    format!("unknown SCRAM mechanism {code}"),
                )
            })?;
            if credential(self.store.meta(), user, m).await?.is_none() {
                return Err(refuse(
                    ResponseError::ResourceNotFound,
                    format!(
                        "attempt to delete a user credential that does not exist: {user:?} {}",
                        m.name()
                    ),
                ));
            }
            deletions.push(m);
        }
        let mut upsertions = Vec::new();
        for (code, iterations, salt, salted) in a.upsertions {
            let m = Mechanism::from_code(code).ok_or_else(|| {
                refuse(
                    ResponseError::UnsupportedSaslMechanism,
                    format!("unknown SCRAM mechanism {code}"),
                )
            })?;
            if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
                return Err(refuse(
                    ResponseError::UnacceptableCredential,
                    format!(
                        "iterations must be {MIN_ITERATIONS} to {MAX_ITERATIONS}, not {iterations}"
                    ),
                ));
            }
            if salt.is_empty() || salted.is_empty() {
                return Err(refuse(
                    ResponseError::UnacceptableCredential,
                    "the salt and the salted password must not be empty",
                ));
            }
            upsertions.push(Credential::from_salted(m, &salt, iterations, &salted));
        }
        for m in deletions {
            delete(self.store.meta(), user, Some(m)).await?;
        }
        for c in &upsertions {
            upsert(self.store.meta(), user, c).await?;
        }
        Ok(())
    }
}
