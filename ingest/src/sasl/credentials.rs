//! Users' SCRAM credentials in the metadata store (`inlet_scram_credentials`): one row per user
//! and mechanism with the salt, iterations, StoredKey and ServerKey (never a password), shared
//! by every node and read at each authentication, so a change holds on every node for the next
//! connection. Managed with Kafka's DescribeUserScramCredentials and
//! AlterUserScramCredentials (KIP-554) and with `inlet users`.

use std::collections::BTreeMap;

use base64::Engine as _;
use inlet_storage::MetaStore;
use sqlx::Row;

use super::scram::{Credential, Mechanism};
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
