//! Durable state of the registry in the metadata store (SQLite or PostgreSQL, the same SQL for
//! both): schemas by global id, subject versions, compatibility and mode settings.
//!
//! Invariants:
//! - A schema row is never changed or removed once written, so an id means the same schema
//!   forever; the same (type, normalized text) has at most one id (found by its fingerprint, then
//!   compared in full). Ids come from the shared `inlet_counters` table.
//! - Versions of a subject count from 1 and are never reused while a row for them exists
//!   (soft-deleted versions keep their row; only a permanent delete removes it).
//! - Every write is one transaction committed before the call returns: with SQLite's
//!   `synchronous = FULL` it survives kill -9 once the HTTP answer is sent.
//! - A schema's identity includes its references (`refs`, a JSON array; empty for none). Each
//!   reference is also a row of `registry_references`, written in the same transaction, so the
//!   versions a schema depends on can be found and protected from deletion.
//! - Creating a schema id takes the row lock of the `schema_id` counter first and then looks
//!   the schema up again, so two nodes registering the same schema at once on PostgreSQL get
//!   the same id (the second waits for the first to commit, then finds its row).
//! - Compatibility and mode settings for the whole registry live under the empty subject `""`.

use inlet_storage::MetaStore;
use sqlx::Row;

use crate::error::{Error, Result};
use crate::schema::Reference;

const MIGRATIONS: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS registry_schemas (
        schema_id BIGINT PRIMARY KEY,
        schema_type VARCHAR(16) NOT NULL,
        fingerprint BIGINT NOT NULL,
        schema_text TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS registry_schemas_fingerprint ON registry_schemas (fingerprint)",
    "CREATE TABLE IF NOT EXISTS registry_versions (
        subject VARCHAR(1024) NOT NULL,
        version BIGINT NOT NULL,
        schema_id BIGINT NOT NULL,
        deleted BIGINT NOT NULL,
        PRIMARY KEY (subject, version))",
    "CREATE INDEX IF NOT EXISTS registry_versions_schema ON registry_versions (schema_id)",
    "CREATE TABLE IF NOT EXISTS registry_config (
        subject VARCHAR(1024) PRIMARY KEY,
        compatibility VARCHAR(32) NOT NULL)",
    "CREATE TABLE IF NOT EXISTS registry_mode (
        subject VARCHAR(1024) PRIMARY KEY,
        mode VARCHAR(16) NOT NULL)",
    "INSERT INTO inlet_counters (name, value) VALUES ('schema_id', 0)",
    "ALTER TABLE registry_schemas ADD COLUMN refs TEXT NOT NULL DEFAULT ''",
    "CREATE TABLE IF NOT EXISTS registry_references (
        schema_id BIGINT NOT NULL,
        name VARCHAR(1024) NOT NULL,
        subject VARCHAR(1024) NOT NULL,
        version BIGINT NOT NULL,
        PRIMARY KEY (schema_id, name))",
    "CREATE INDEX IF NOT EXISTS registry_references_target ON registry_references (subject, version)",
];

/// A stored schema row: type, canonical text and references key.
#[derive(Debug, Clone)]
pub(crate) struct SchemaRow {
    pub schema_type: String,
    pub text: String,
    pub refs: String,
}

/// One row of `registry_versions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct VersionRow {
    pub version: u32,
    pub schema_id: u32,
    pub deleted: bool,
}

/// FNV-1a over the schema type, text and references: an index key, not an identity (texts
/// are compared). Without references it is the key schemas had before references existed.
fn fingerprint(schema_type: &str, text: &str, refs: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let refs_part = if refs.is_empty() { None } else { Some(refs) };
    for b in schema_type.bytes().chain([0u8]).chain(text.bytes()).chain(
        refs_part
            .into_iter()
            .flat_map(|r| [0u8].into_iter().chain(r.bytes())),
    ) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h as i64
}

/// The registry's tables.
#[derive(Debug, Clone)]
pub(crate) struct Store {
    meta: MetaStore,
}

impl Store {
    /// Creates or upgrades the registry's tables.
    pub(crate) async fn open(meta: MetaStore) -> Result<Self> {
        meta.migrate("schema-registry", MIGRATIONS).await?;
        Ok(Store { meta })
    }

    /// The row of schema `id`.
    pub(crate) async fn schema(&self, id: u32) -> Result<Option<SchemaRow>> {
        let row = sqlx::query(
            "SELECT schema_type, schema_text, refs FROM registry_schemas WHERE schema_id = $1",
        )
        .bind(i64::from(id))
        .fetch_optional(self.meta.pool())
        .await?;
        row.map(|r| {
            Ok(SchemaRow {
                schema_type: r.try_get("schema_type")?,
                text: r.try_get("schema_text")?,
                refs: r.try_get("refs")?,
            })
        })
        .transpose()
    }

    /// The id of the schema with this type, canonical text and references, if registered.
    pub(crate) async fn find_schema(
        &self,
        schema_type: &str,
        text: &str,
        refs: &str,
    ) -> Result<Option<u32>> {
        Self::find_schema_in(self.meta.pool(), schema_type, text, refs).await
    }

    async fn find_schema_in<'e, E>(
        executor: E,
        schema_type: &str,
        text: &str,
        refs: &str,
    ) -> Result<Option<u32>>
    where
        E: sqlx::Executor<'e, Database = sqlx::Any>,
    {
        let rows = sqlx::query(
            "SELECT schema_id, schema_text, refs FROM registry_schemas
             WHERE fingerprint = $1 AND schema_type = $2",
        )
        .bind(fingerprint(schema_type, text, refs))
        .bind(schema_type.to_string())
        .fetch_all(executor)
        .await?;
        for r in rows {
            let stored: String = r.try_get("schema_text")?;
            let stored_refs: String = r.try_get("refs")?;
            if stored == text && stored_refs == refs {
                return Ok(Some(r.try_get::<i64, _>("schema_id")? as u32));
            }
        }
        Ok(None)
    }

    /// Ids of the schemas that reference version `version` of `subject`.
    pub(crate) async fn referenced_by(&self, subject: &str, version: u32) -> Result<Vec<u32>> {
        let rows = sqlx::query(
            "SELECT DISTINCT r.schema_id FROM registry_references r
             WHERE r.subject = $1 AND r.version = $2
               AND EXISTS (SELECT 1 FROM registry_versions v WHERE v.schema_id = r.schema_id)
             ORDER BY r.schema_id",
        )
        .bind(subject.to_string())
        .bind(i64::from(version))
        .fetch_all(self.meta.pool())
        .await?;
        rows.iter()
            .map(|r| Ok(r.try_get::<i64, _>("schema_id")? as u32))
            .collect()
    }

    /// Whether any version row exists (of `subject`, or of any subject for None), soft-deleted
    /// ones included.
    pub(crate) async fn has_versions(&self, subject: Option<&str>) -> Result<bool> {
        let row = match subject {
            Some(s) => {
                sqlx::query("SELECT COUNT(*) AS n FROM registry_versions WHERE subject = $1")
                    .bind(s.to_string())
                    .fetch_one(self.meta.pool())
                    .await?
            }
            None => {
                sqlx::query("SELECT COUNT(*) AS n FROM registry_versions")
                    .fetch_one(self.meta.pool())
                    .await?
            }
        };
        Ok(row.try_get::<i64, _>("n")? > 0)
    }

    /// Rows of `subject`, oldest first, soft-deleted ones included.
    pub(crate) async fn versions(&self, subject: &str) -> Result<Vec<VersionRow>> {
        let rows = sqlx::query(
            "SELECT version, schema_id, deleted FROM registry_versions
             WHERE subject = $1 ORDER BY version",
        )
        .bind(subject.to_string())
        .fetch_all(self.meta.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(VersionRow {
                    version: r.try_get::<i64, _>("version")? as u32,
                    schema_id: r.try_get::<i64, _>("schema_id")? as u32,
                    deleted: r.try_get::<i64, _>("deleted")? != 0,
                })
            })
            .collect()
    }

    /// Subjects with at least one version (live only unless `deleted`), sorted.
    pub(crate) async fn subjects(&self, deleted: bool) -> Result<Vec<String>> {
        let sql = if deleted {
            "SELECT DISTINCT subject FROM registry_versions ORDER BY subject"
        } else {
            "SELECT DISTINCT subject FROM registry_versions WHERE deleted = 0 ORDER BY subject"
        };
        let rows = sqlx::query(sql).fetch_all(self.meta.pool()).await?;
        rows.iter()
            .map(|r| Ok(r.try_get::<String, _>("subject")?))
            .collect()
    }

    /// (subject, version) pairs that use schema `id`.
    pub(crate) async fn uses_of(&self, id: u32, deleted: bool) -> Result<Vec<(String, u32)>> {
        let sql = if deleted {
            "SELECT subject, version FROM registry_versions WHERE schema_id = $1
             ORDER BY subject, version"
        } else {
            "SELECT subject, version FROM registry_versions WHERE schema_id = $1 AND deleted = 0
             ORDER BY subject, version"
        };
        let rows = sqlx::query(sql)
            .bind(i64::from(id))
            .fetch_all(self.meta.pool())
            .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get::<String, _>("subject")?,
                    r.try_get::<i64, _>("version")? as u32,
                ))
            })
            .collect()
    }

    /// Registers a schema under `subject` as `version` in one transaction, creating its global
    /// id unless the same schema already has one. With `import_id` (IMPORT mode) the schema gets
    /// that id, which must be free or already hold the same schema. Returns the id. Durable when
    /// it returns.
    pub(crate) async fn add_version(
        &self,
        subject: &str,
        version: u32,
        row: &SchemaRow,
        references: &[Reference],
        import_id: Option<u32>,
    ) -> Result<u32> {
        let (schema_type, text, refs) = (&row.schema_type, &row.text, &row.refs);
        let existing = self.find_schema(schema_type, text, refs).await?;
        let mut tx = self.meta.pool().begin().await?;
        let id = match (existing, import_id) {
            (Some(id), None) => id,
            (Some(id), Some(wanted)) if id == wanted => id,
            (Some(id), Some(wanted)) => {
                return Err(Error::IdConflict(format!(
                    "schema already registered with id {id} instead of input id {wanted}"
                )))
            }
            (None, _) => {
                // The counter's row lock serializes id creation across nodes; look again
                // under it, since another node may have created this schema meanwhile.
                let counter = sqlx::query(
                    "UPDATE inlet_counters SET value = value + $1 WHERE name = 'schema_id'
                     RETURNING value",
                )
                .bind(if import_id.is_some() { 0i64 } else { 1i64 })
                .fetch_one(&mut *tx)
                .await?
                .try_get::<i64, _>("value")?;
                match Self::find_schema_in(&mut *tx, schema_type, text, refs).await? {
                    Some(id) if import_id.is_none_or(|w| w == id) => id,
                    Some(id) => {
                        return Err(Error::IdConflict(format!(
                            "schema already registered with id {id} instead of input id {}",
                            import_id.unwrap_or_default()
                        )))
                    }
                    None => {
                        let id = match import_id {
                            None => counter,
                            Some(wanted) => {
                                let taken = sqlx::query(
                                    "SELECT schema_id FROM registry_schemas WHERE schema_id = $1",
                                )
                                .bind(i64::from(wanted))
                                .fetch_optional(&mut *tx)
                                .await?;
                                if taken.is_some() {
                                    return Err(Error::IdConflict(format!(
                                        "id {wanted} already holds a different schema"
                                    )));
                                }
                                // Later ids must not collide with imported ones.
                                sqlx::query(
                                    "UPDATE inlet_counters SET value = $1
                                     WHERE name = 'schema_id' AND value < $1",
                                )
                                .bind(i64::from(wanted))
                                .execute(&mut *tx)
                                .await?;
                                i64::from(wanted)
                            }
                        };
                        sqlx::query(
                            "INSERT INTO registry_schemas
                             (schema_id, schema_type, fingerprint, schema_text, refs)
                             VALUES ($1, $2, $3, $4, $5)",
                        )
                        .bind(id)
                        .bind(schema_type.to_string())
                        .bind(fingerprint(schema_type, text, refs))
                        .bind(text.to_string())
                        .bind(refs.to_string())
                        .execute(&mut *tx)
                        .await?;
                        for r in references {
                            sqlx::query(
                                "INSERT INTO registry_references (schema_id, name, subject, version)
                                 VALUES ($1, $2, $3, $4)",
                            )
                            .bind(id)
                            .bind(r.name.clone())
                            .bind(r.subject.clone())
                            .bind(r.version)
                            .execute(&mut *tx)
                            .await?;
                        }
                        id as u32
                    }
                }
            }
        };
        sqlx::query(
            "INSERT INTO registry_versions (subject, version, schema_id, deleted)
             VALUES ($1, $2, $3, 0)",
        )
        .bind(subject.to_string())
        .bind(i64::from(version))
        .bind(i64::from(id))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(id)
    }

    /// Marks versions of `subject` soft-deleted (all when `version` is None).
    pub(crate) async fn soft_delete(&self, subject: &str, version: Option<u32>) -> Result<()> {
        let q = match version {
            Some(v) => sqlx::query(
                "UPDATE registry_versions SET deleted = 1 WHERE subject = $1 AND version = $2",
            )
            .bind(subject.to_string())
            .bind(i64::from(v)),
            None => sqlx::query("UPDATE registry_versions SET deleted = 1 WHERE subject = $1")
                .bind(subject.to_string()),
        };
        q.execute(self.meta.pool()).await?;
        Ok(())
    }

    /// Removes rows of `subject` (all when `version` is None). The schemas keep their ids.
    pub(crate) async fn hard_delete(&self, subject: &str, version: Option<u32>) -> Result<()> {
        let q = match version {
            Some(v) => {
                sqlx::query("DELETE FROM registry_versions WHERE subject = $1 AND version = $2")
                    .bind(subject.to_string())
                    .bind(i64::from(v))
            }
            None => sqlx::query("DELETE FROM registry_versions WHERE subject = $1")
                .bind(subject.to_string()),
        };
        q.execute(self.meta.pool()).await?;
        Ok(())
    }

    async fn get_setting(
        &self,
        table: &str,
        column: &str,
        subject: &str,
    ) -> Result<Option<String>> {
        let sql = format!("SELECT {column} FROM {table} WHERE subject = $1");
        let row = sqlx::query(&sql)
            .bind(subject.to_string())
            .fetch_optional(self.meta.pool())
            .await?;
        Ok(row.map(|r| r.try_get::<String, _>(column)).transpose()?)
    }

    async fn put_setting(
        &self,
        table: &str,
        column: &str,
        subject: &str,
        value: &str,
    ) -> Result<()> {
        let mut tx = self.meta.pool().begin().await?;
        sqlx::query(&format!("DELETE FROM {table} WHERE subject = $1"))
            .bind(subject.to_string())
            .execute(&mut *tx)
            .await?;
        sqlx::query(&format!(
            "INSERT INTO {table} (subject, {column}) VALUES ($1, $2)"
        ))
        .bind(subject.to_string())
        .bind(value.to_string())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn delete_setting(&self, table: &str, subject: &str) -> Result<()> {
        sqlx::query(&format!("DELETE FROM {table} WHERE subject = $1"))
            .bind(subject.to_string())
            .execute(self.meta.pool())
            .await?;
        Ok(())
    }

    /// The compatibility level set for `subject` (`""`: the global one).
    pub(crate) async fn compatibility(&self, subject: &str) -> Result<Option<String>> {
        self.get_setting("registry_config", "compatibility", subject)
            .await
    }

    pub(crate) async fn set_compatibility(&self, subject: &str, level: &str) -> Result<()> {
        self.put_setting("registry_config", "compatibility", subject, level)
            .await
    }

    pub(crate) async fn delete_compatibility(&self, subject: &str) -> Result<()> {
        self.delete_setting("registry_config", subject).await
    }

    /// The mode set for `subject` (`""`: the global one).
    pub(crate) async fn mode(&self, subject: &str) -> Result<Option<String>> {
        self.get_setting("registry_mode", "mode", subject).await
    }

    pub(crate) async fn set_mode(&self, subject: &str, mode: &str) -> Result<()> {
        self.put_setting("registry_mode", "mode", subject, mode)
            .await
    }

    pub(crate) async fn delete_mode(&self, subject: &str) -> Result<()> {
        self.delete_setting("registry_mode", subject).await
    }
}
