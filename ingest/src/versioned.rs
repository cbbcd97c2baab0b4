//! Rows every node keeps a copy of (ACLs, client quotas), with one version number each in a
//! table of its own (`id = 1`, `version`): every change raises it in the change's transaction,
//! so a node polls one small row to learn whether its copy is stale, and reads the rows only
//! then.

use inlet_storage::MetaStore;
use sqlx::Row;

use crate::error::Result;

/// The version in `table` (one of the version tables: a constant name, never input).
pub(crate) async fn version(meta: &MetaStore, table: &'static str) -> Result<i64> {
    let sql = format!("SELECT version FROM {table} WHERE id = 1");
    inlet_storage::bounded(async {
        let row = sqlx::query(&sql).fetch_one(meta.pool()).await?;
        Ok(row.try_get::<i64, _>(0)?)
    })
    .await
    .map_err(Into::into)
}

/// The version in `table`, read within a transaction (with the rows it versions).
pub(crate) async fn version_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    table: &'static str,
) -> Result<i64> {
    let sql = format!("SELECT version FROM {table} WHERE id = 1");
    let row = sqlx::query(&sql)
        .fetch_one(&mut **tx)
        .await
        .map_err(inlet_storage::Error::from)?;
    Ok(row
        .try_get::<i64, _>(0)
        .map_err(inlet_storage::Error::from)?)
}

/// Raises the version in `table`, within the change's transaction.
pub(crate) async fn bump(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    table: &'static str,
) -> Result<()> {
    let sql = format!("UPDATE {table} SET version = version + 1 WHERE id = 1");
    sqlx::query(&sql)
        .execute(&mut **tx)
        .await
        .map_err(inlet_storage::Error::from)?;
    Ok(())
}
