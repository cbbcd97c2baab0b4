//! The client quotas in the metadata store: one row per entity and quota key
//! (`inlet_client_quotas`) and one version number (`inlet_client_quota_version`) that every
//! change raises in the same transaction, so a node polls one small row to learn whether its
//! copy is stale. An entity's components are stored as `-` (absent), `d` (the default) or
//! `n:<name>`; values as text (Rust's shortest round-trip form), the same on both backends.

use inlet_storage::MetaStore;
use sqlx::Row;

use super::{Configured, Entity, Kind, Part};
use crate::error::Result;

pub(crate) const MIGRATIONS: &[&str] = &[
    "CREATE TABLE inlet_client_quotas (
        user_part VARCHAR(512) NOT NULL,
        client_part VARCHAR(512) NOT NULL,
        quota_key VARCHAR(64) NOT NULL,
        quota_value VARCHAR(64) NOT NULL,
        PRIMARY KEY (user_part, client_part, quota_key))",
    "CREATE TABLE inlet_client_quota_version (id SMALLINT PRIMARY KEY, version BIGINT NOT NULL)",
    "INSERT INTO inlet_client_quota_version (id, version) VALUES (1, 0)",
];

fn err(e: sqlx::Error) -> crate::error::KafkaError {
    inlet_storage::Error::from(e).into()
}

fn encode(p: &Part) -> String {
    match p {
        Part::Absent => "-".into(),
        Part::Default => "d".into(),
        Part::Named(n) => format!("n:{n}"),
    }
}

fn decode(s: &str) -> Option<Part> {
    match s {
        "-" => Some(Part::Absent),
        "d" => Some(Part::Default),
        _ => s.strip_prefix("n:").map(|n| Part::Named(n.to_string())),
    }
}

/// The table of the quotas' version.
const VERSION: &str = "inlet_client_quota_version";

/// The version of the stored quotas.
pub(crate) async fn version(meta: &MetaStore) -> Result<i64> {
    crate::versioned::version(meta, VERSION).await
}

/// Every stored quota, with the version they are at.
pub(crate) async fn load(meta: &MetaStore) -> Result<Configured> {
    let mut tx = meta.pool().begin().await.map_err(err)?;
    let version = crate::versioned::version_in(&mut tx, VERSION).await?;
    let rows = sqlx::query(
        "SELECT user_part, client_part, quota_key, quota_value FROM inlet_client_quotas",
    )
    .fetch_all(&mut *tx)
    .await
    .map_err(err)?;
    tx.commit().await.map_err(err)?;
    let mut configured = Configured {
        version,
        ..Configured::default()
    };
    for row in rows {
        let text = |i: usize| row.try_get::<String, _>(i).ok();
        let read = (|| {
            let entity = Entity {
                user: decode(&text(0)?)?,
                client: decode(&text(1)?)?,
            };
            let kind = Kind::from_key(&text(2)?)?;
            let value: f64 = text(3)?.parse().ok()?;
            Some((entity, kind, value))
        })();
        match read {
            Some((entity, kind, value)) => {
                configured
                    .values
                    .entry(entity)
                    .or_default()
                    .insert(kind, value);
            }
            None => tracing::warn!("a client quota row this version cannot read is left out"),
        }
    }
    Ok(configured)
}

/// One change: set (`Some`) or remove (`None`) `kind`'s quota of `entity`.
pub(crate) type Change = (Entity, Kind, Option<f64>);

/// Applies `changes` in one transaction and raises the version.
pub(crate) async fn apply(meta: &MetaStore, changes: &[Change]) -> Result<()> {
    let mut tx = meta.pool().begin().await.map_err(err)?;
    for (entity, kind, value) in changes {
        let (user, client) = (encode(&entity.user), encode(&entity.client));
        sqlx::query(
            "DELETE FROM inlet_client_quotas
             WHERE user_part = $1 AND client_part = $2 AND quota_key = $3",
        )
        .bind(&user)
        .bind(&client)
        .bind(kind.key())
        .execute(&mut *tx)
        .await
        .map_err(err)?;
        if let Some(value) = value {
            sqlx::query(
                "INSERT INTO inlet_client_quotas (user_part, client_part, quota_key, quota_value)
                 VALUES ($1, $2, $3, $4)",
            )
            .bind(&user)
            .bind(&client)
            .bind(kind.key())
            .bind(value.to_string())
            .execute(&mut *tx)
            .await
            .map_err(err)?;
        }
    }
    crate::versioned::bump(&mut tx, VERSION).await?;
    tx.commit().await.map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_round_trip_through_their_stored_form() {
        for p in [
            Part::Absent,
            Part::Default,
            Part::Named(String::new()),
            Part::Named("n:x-".into()),
        ] {
            assert_eq!(decode(&encode(&p)), Some(p));
        }
        assert_eq!(decode("x"), None);
    }
}
