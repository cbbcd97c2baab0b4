//! The ACL bindings in the metadata store: one row per binding (`inlet_acls`) and one version
//! number (`inlet_acl_version`) that every change raises in the same transaction, so a node
//! polls one small row to learn whether its copy is stale, and reads the bindings only then.

use inlet_storage::MetaStore;
use sqlx::Row;

use super::{AclBinding, AclFilter, Bindings, Operation, PatternType, Permission, ResourceType};
use crate::error::Result;

pub(crate) const MIGRATIONS: &[&str] = &[
    "CREATE TABLE inlet_acls (
        resource_type SMALLINT NOT NULL,
        resource_name VARCHAR(255) NOT NULL,
        pattern_type SMALLINT NOT NULL,
        principal VARCHAR(255) NOT NULL,
        host VARCHAR(255) NOT NULL,
        operation SMALLINT NOT NULL,
        permission SMALLINT NOT NULL,
        PRIMARY KEY (resource_type, resource_name, pattern_type, principal, host, operation, permission))",
    "CREATE TABLE inlet_acl_version (id SMALLINT PRIMARY KEY, version BIGINT NOT NULL)",
    "INSERT INTO inlet_acl_version (id, version) VALUES (1, 0)",
];

fn err(e: sqlx::Error) -> crate::error::KafkaError {
    inlet_storage::Error::from(e).into()
}

/// The table of the bindings' version.
const VERSION: &str = "inlet_acl_version";

/// The version of the stored bindings.
pub(crate) async fn version(meta: &MetaStore) -> Result<i64> {
    crate::versioned::version(meta, VERSION).await
}

/// Every stored binding, with the version they are at.
pub(crate) async fn load(meta: &MetaStore) -> Result<Bindings> {
    let mut tx = meta.pool().begin().await.map_err(err)?;
    let version = crate::versioned::version_in(&mut tx, VERSION).await?;
    let rows = sqlx::query(
        "SELECT resource_type, resource_name, pattern_type, principal, host, operation, permission
         FROM inlet_acls",
    )
    .fetch_all(&mut *tx)
    .await
    .map_err(err)?;
    tx.commit().await.map_err(err)?;
    let mut list = Vec::with_capacity(rows.len());
    for row in rows {
        let code = |i: usize| -> Result<i8> {
            let v: i32 = row
                .try_get::<i32, _>(i)
                .or_else(|_| row.try_get::<i16, _>(i).map(i32::from))
                .map_err(err)?;
            Ok(i8::try_from(v).unwrap_or(0))
        };
        // A row this version cannot read (written by a newer one) is left out: it can only
        // allow less, never more... except a DENY, so it is logged.
        let binding = (|| {
            Some(AclBinding {
                resource_type: ResourceType::from_code(code(0).ok()?)?,
                resource_name: row.try_get(1).ok()?,
                pattern_type: PatternType::from_code(code(2).ok()?)?,
                principal: row.try_get(3).ok()?,
                host: row.try_get(4).ok()?,
                operation: Operation::from_code(code(5).ok()?)?,
                permission: Permission::from_code(code(6).ok()?)?,
            })
        })();
        match binding {
            Some(b) => list.push(b),
            None => tracing::warn!("an ACL row this version cannot read is left out"),
        }
    }
    list.sort();
    Ok(Bindings { version, list })
}

/// Stores `bindings` (those already there stay as they are) and raises the version.
pub(crate) async fn create(meta: &MetaStore, bindings: &[AclBinding]) -> Result<()> {
    let mut tx = meta.pool().begin().await.map_err(err)?;
    for b in bindings {
        bind(
            b,
            sqlx::query(
                "INSERT INTO inlet_acls
                (resource_type, resource_name, pattern_type, principal, host, operation, permission)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT DO NOTHING",
            ),
        )
        .execute(&mut *tx)
        .await
        .map_err(err)?;
    }
    bump(&mut tx).await?;
    tx.commit().await.map_err(err)?;
    Ok(())
}

/// Deletes the stored bindings each filter matches; returns them, per filter.
pub(crate) async fn delete(
    meta: &MetaStore,
    filters: &[AclFilter],
) -> Result<Vec<Vec<AclBinding>>> {
    let current = load(meta).await?;
    let matched: Vec<Vec<AclBinding>> = filters
        .iter()
        .map(|f| {
            current
                .list
                .iter()
                .filter(|b| f.matches(b))
                .cloned()
                .collect()
        })
        .collect();
    let mut tx = meta.pool().begin().await.map_err(err)?;
    for b in matched.iter().flatten() {
        bind(
            b,
            sqlx::query(
                "DELETE FROM inlet_acls WHERE resource_type = $1 AND resource_name = $2
               AND pattern_type = $3 AND principal = $4 AND host = $5 AND operation = $6
               AND permission = $7",
            ),
        )
        .execute(&mut *tx)
        .await
        .map_err(err)?;
    }
    bump(&mut tx).await?;
    tx.commit().await.map_err(err)?;
    Ok(matched)
}

/// `query` with a binding's seven columns bound as $1 to $7, in the table's order.
fn bind<'q>(
    b: &'q AclBinding,
    query: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    query
        .bind(i16::from(b.resource_type.code()))
        .bind(&b.resource_name)
        .bind(i16::from(b.pattern_type.code()))
        .bind(&b.principal)
        .bind(&b.host)
        .bind(i16::from(b.operation.code()))
        .bind(i16::from(b.permission.code()))
}

async fn bump(tx: &mut sqlx::Transaction<'_, sqlx::Any>) -> Result<()> {
    crate::versioned::bump(tx, VERSION).await
}
