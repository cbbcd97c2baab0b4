//! The registry's operations, as the REST API and the framed-record decoder use them: register,
//! look up, list, delete, compatibility and mode settings. HTTP-free, so the broker can call it
//! directly.
//!
//! Invariants: registrations and deletes run one at a time in this process (the write lock),
//! so version numbers are assigned without races; each write is durable in the metadata store
//! before the call returns. Several nodes sharing PostgreSQL rely on the `(subject, version)`
//! primary key: a concurrent registration of the same version on another node fails with a
//! retryable store error instead of overwriting.

use std::sync::Arc;

use apache_avro::Schema;
use inlet_storage::MetaStore;

use crate::avro;
use crate::cache::SchemaCache;
use crate::compat::{Compatibility, Mode};
use crate::config::RegistryConfig;
use crate::error::{Error, Result};
use crate::store::{Store, VersionRow};

/// The type of a schema. Only Avro is supported so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaType {
    Avro,
    Protobuf,
    Json,
}

impl SchemaType {
    pub fn as_str(self) -> &'static str {
        match self {
            SchemaType::Avro => "AVRO",
            SchemaType::Protobuf => "PROTOBUF",
            SchemaType::Json => "JSON",
        }
    }

    /// Parses the `schemaType` field (absent: AVRO). PROTOBUF and JSON are recognized but
    /// answered with [`Error::InvalidSchema`] until they are implemented.
    pub fn parse(s: Option<&str>) -> Result<Self> {
        match s.map(str::to_ascii_uppercase).as_deref() {
            None | Some("AVRO") => Ok(SchemaType::Avro),
            Some(t @ ("PROTOBUF" | "JSON")) => Err(Error::InvalidSchema(format!(
                "schemaType {t} is not supported yet by this registry; only AVRO is"
            ))),
            Some(other) => Err(Error::InvalidSchema(format!(
                "unknown schemaType {other:?}"
            ))),
        }
    }
}

/// A registered schema, parsed.
#[derive(Debug)]
pub struct StoredSchema {
    /// The global id.
    pub id: u32,
    pub schema_type: SchemaType,
    /// The normalized text, as stored and served.
    pub text: String,
    pub avro: Schema,
    /// Whether a record type contains itself: such schemas are not decoded (see
    /// `framing::decode_payload`). Derived from `avro` once, here, not per record.
    pub recursive: bool,
}

impl StoredSchema {
    pub fn new(id: u32, schema_type: SchemaType, text: String, avro: Schema) -> Self {
        let recursive = crate::framing::is_recursive(&avro, &mut Vec::new());
        StoredSchema {
            id,
            schema_type,
            text,
            avro,
            recursive,
        }
    }
}

/// A schema to register, look up or test, as a client sends it.
#[derive(Debug, Clone, Default)]
pub struct SchemaRequest {
    pub schema: String,
    /// `schemaType`; None is AVRO.
    pub schema_type: Option<String>,
    /// Number of `references` the request carries (references are not supported yet).
    pub references: usize,
}

/// One version of a subject.
#[derive(Debug, Clone)]
pub struct SubjectVersion {
    pub subject: String,
    pub version: u32,
    pub schema: Arc<StoredSchema>,
}

/// Which version of a subject: a number or the latest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionSpec {
    Latest,
    Number(u32),
}

impl VersionSpec {
    /// Parses `latest`, `-1` (latest) or a number from 1 to 2^31-1.
    pub fn parse(s: &str) -> Result<Self> {
        if s == "latest" || s == "-1" {
            return Ok(VersionSpec::Latest);
        }
        match s.parse::<u32>() {
            Ok(n) if (1..=i32::MAX as u32).contains(&n) => Ok(VersionSpec::Number(n)),
            _ => Err(Error::InvalidVersion(s.to_string())),
        }
    }
}

/// The schema registry.
#[derive(Debug)]
pub struct Registry {
    store: Store,
    cache: SchemaCache,
    config: RegistryConfig,
    write: tokio::sync::Mutex<()>,
}

/// Opens the registry on `meta`, creating its tables if needed.
pub async fn open(meta: MetaStore, config: RegistryConfig) -> Result<Registry> {
    config.validate()?;
    let store = Store::open(meta).await?;
    Ok(Registry {
        store,
        cache: SchemaCache::new(config.cache_max_schemas, config.cache_max_bytes),
        config,
        write: tokio::sync::Mutex::new(()),
    })
}

/// A parsed request: its type and parsed Avro schema.
struct Parsed {
    schema_type: SchemaType,
    avro: avro::AvroSchema,
}

impl Registry {
    fn parse(&self, req: &SchemaRequest) -> Result<Parsed> {
        let schema_type = SchemaType::parse(req.schema_type.as_deref())?;
        if req.references > 0 {
            return Err(Error::InvalidSchema(
                "schema references are not supported yet by this registry".into(),
            ));
        }
        if req.schema.len() > self.config.max_schema_bytes {
            return Err(Error::InvalidSchema(format!(
                "schema of {} bytes exceeds the limit of {} bytes",
                req.schema.len(),
                self.config.max_schema_bytes
            )));
        }
        Ok(Parsed {
            schema_type,
            avro: avro::parse(&req.schema)?,
        })
    }

    /// Schema `id`, from the cache or the store.
    pub async fn schema_by_id(&self, id: u32) -> Result<Arc<StoredSchema>> {
        if let Some(s) = self.cache.get(id) {
            return Ok(s);
        }
        let (schema_type, text) = self
            .store
            .schema(id)
            .await?
            .ok_or(Error::SchemaIdNotFound(id))?;
        let schema_type = match schema_type.as_str() {
            "AVRO" => SchemaType::Avro,
            other => {
                return Err(Error::Store(format!(
                    "schema {id} has type {other}, which this version cannot read"
                )))
            }
        };
        let avro = avro::parse(&text)
            .map_err(|e| Error::Store(format!("stored schema {id} no longer parses: {e}")))?;
        let stored = Arc::new(StoredSchema::new(id, schema_type, text, avro.schema));
        self.cache.insert(stored.clone());
        Ok(stored)
    }

    /// Parsed schemas in the by-id cache and their estimated bytes.
    pub fn cache_usage(&self) -> (usize, usize) {
        self.cache.usage()
    }

    async fn rows(&self, subject: &str) -> Result<Vec<VersionRow>> {
        let rows = self.store.versions(subject).await?;
        if rows.is_empty() {
            return Err(Error::SubjectNotFound(subject.to_string()));
        }
        Ok(rows)
    }

    async fn live_rows(&self, subject: &str, deleted: bool) -> Result<Vec<VersionRow>> {
        let rows: Vec<VersionRow> = self
            .rows(subject)
            .await?
            .into_iter()
            .filter(|r| deleted || !r.deleted)
            .collect();
        if rows.is_empty() {
            return Err(Error::SubjectNotFound(subject.to_string()));
        }
        Ok(rows)
    }

    async fn check_writable(&self) -> Result<()> {
        if self.mode().await? == Mode::ReadOnly {
            return Err(Error::ReadOnly(String::new()));
        }
        Ok(())
    }

    /// Registers `req` under `subject` (or finds it already there) and returns its global id
    /// and version. Checks compatibility with the subject's live versions at its level.
    /// Durable when it returns.
    pub async fn register(&self, subject: &str, req: &SchemaRequest) -> Result<(u32, u32)> {
        let parsed = self.parse(req)?;
        let _write = self.write.lock().await;
        self.check_writable().await?;
        let rows = self.store.versions(subject).await?;
        let type_name = parsed.schema_type.as_str();
        if let Some(id) = self
            .store
            .find_schema(type_name, &parsed.avro.normalized)
            .await?
        {
            if let Some(row) = rows.iter().find(|r| !r.deleted && r.schema_id == id) {
                return Ok((id, row.version));
            }
        }
        let mut existing = Vec::new();
        for row in rows.iter().filter(|r| !r.deleted) {
            existing.push(self.schema_by_id(row.schema_id).await?);
        }
        let level = self.compatibility(Some(subject), true).await?;
        let olds: Vec<&Schema> = existing.iter().map(|s| &s.avro).collect();
        let reasons = level.check(&parsed.avro.schema, &olds);
        if !reasons.is_empty() {
            return Err(Error::Incompatible {
                subject: subject.to_string(),
                messages: reasons,
            });
        }
        let version = rows.iter().map(|r| r.version).max().unwrap_or(0) + 1;
        let id = self
            .store
            .add_version(subject, version, type_name, &parsed.avro.normalized)
            .await?;
        tracing::info!(subject, id, version, "registered schema");
        Ok((id, version))
    }

    /// The version of `subject` that holds the schema of `req`.
    pub async fn lookup(
        &self,
        subject: &str,
        req: &SchemaRequest,
        deleted: bool,
    ) -> Result<SubjectVersion> {
        let parsed = self.parse(req)?;
        let rows = self.live_rows(subject, deleted).await?;
        let id = self
            .store
            .find_schema(parsed.schema_type.as_str(), &parsed.avro.normalized)
            .await?
            .ok_or_else(|| Error::SchemaNotFound(subject.to_string()))?;
        let row = rows
            .iter()
            .rev()
            .find(|r| r.schema_id == id)
            .ok_or_else(|| Error::SchemaNotFound(subject.to_string()))?;
        Ok(SubjectVersion {
            subject: subject.to_string(),
            version: row.version,
            schema: self.schema_by_id(id).await?,
        })
    }

    /// Subjects with live versions (all with any version when `deleted`).
    pub async fn subjects(&self, deleted: bool) -> Result<Vec<String>> {
        self.store.subjects(deleted).await
    }

    /// Version numbers of `subject`.
    pub async fn versions(&self, subject: &str, deleted: bool) -> Result<Vec<u32>> {
        Ok(self
            .live_rows(subject, deleted)
            .await?
            .iter()
            .map(|r| r.version)
            .collect())
    }

    /// One version of `subject` (soft-deleted ones only when `deleted`).
    pub async fn version(
        &self,
        subject: &str,
        spec: VersionSpec,
        deleted: bool,
    ) -> Result<SubjectVersion> {
        let rows = self.live_rows(subject, deleted).await?;
        let row = match spec {
            VersionSpec::Latest => rows.last(),
            VersionSpec::Number(n) => rows.iter().find(|r| r.version == n),
        }
        .copied()
        .ok_or_else(|| Error::VersionNotFound {
            subject: subject.to_string(),
            version: match spec {
                VersionSpec::Latest => "latest".into(),
                VersionSpec::Number(n) => n.to_string(),
            },
        })?;
        Ok(SubjectVersion {
            subject: subject.to_string(),
            version: row.version,
            schema: self.schema_by_id(row.schema_id).await?,
        })
    }

    /// Deletes `subject`: soft (versions hidden, numbers kept) or, after a soft delete,
    /// permanently. Returns the versions deleted.
    pub async fn delete_subject(&self, subject: &str, permanent: bool) -> Result<Vec<u32>> {
        let _write = self.write.lock().await;
        self.check_writable().await?;
        let rows = self.rows(subject).await?;
        let live: Vec<u32> = rows
            .iter()
            .filter(|r| !r.deleted)
            .map(|r| r.version)
            .collect();
        if permanent {
            if !live.is_empty() {
                return Err(Error::SubjectNotSoftDeleted(subject.to_string()));
            }
            self.store.hard_delete(subject, None).await?;
            self.store.delete_compatibility(subject).await?;
            Ok(rows.iter().map(|r| r.version).collect())
        } else {
            if live.is_empty() {
                return Err(Error::SubjectSoftDeleted(subject.to_string()));
            }
            self.store.soft_delete(subject, None).await?;
            Ok(live)
        }
    }

    /// Deletes one version: soft, or permanently after a soft delete. Returns its number.
    pub async fn delete_version(
        &self,
        subject: &str,
        spec: VersionSpec,
        permanent: bool,
    ) -> Result<u32> {
        let _write = self.write.lock().await;
        self.check_writable().await?;
        let rows = self.rows(subject).await?;
        let not_found = |v: String| Error::VersionNotFound {
            subject: subject.to_string(),
            version: v,
        };
        let row = match spec {
            VersionSpec::Latest => rows
                .iter()
                .rev()
                .find(|r| !r.deleted)
                .ok_or_else(|| not_found("latest".into()))?,
            VersionSpec::Number(n) => rows
                .iter()
                .find(|r| r.version == n)
                .ok_or_else(|| not_found(n.to_string()))?,
        };
        let version = row.version;
        match (permanent, row.deleted) {
            (false, true) => Err(Error::VersionSoftDeleted {
                subject: subject.to_string(),
                version,
            }),
            (false, false) => {
                self.store.soft_delete(subject, Some(version)).await?;
                Ok(version)
            }
            (true, false) => Err(Error::VersionNotSoftDeleted {
                subject: subject.to_string(),
                version,
            }),
            (true, true) => {
                self.store.hard_delete(subject, Some(version)).await?;
                Ok(version)
            }
        }
    }

    /// (subject, version) pairs that use schema `id`; 40403 if the id does not exist.
    pub async fn uses_of(&self, id: u32, deleted: bool) -> Result<Vec<(String, u32)>> {
        self.schema_by_id(id).await?;
        self.store.uses_of(id, deleted).await
    }

    /// Checks `req` against `subject`: against one version (`Some`) in the direction of the
    /// subject's level, or against the versions its level names (`None`). Returns the reasons
    /// it is incompatible, empty when compatible.
    pub async fn test_compatibility(
        &self,
        subject: &str,
        spec: Option<VersionSpec>,
        req: &SchemaRequest,
    ) -> Result<Vec<String>> {
        let parsed = self.parse(req)?;
        let level = self.compatibility(Some(subject), true).await?;
        match spec {
            Some(spec) => {
                let old = self.version(subject, spec, false).await?;
                Ok(level.check_pair(&parsed.avro.schema, &old.schema.avro))
            }
            None => {
                let rows = match self.live_rows(subject, false).await {
                    Ok(rows) => rows,
                    Err(Error::SubjectNotFound(_)) => Vec::new(),
                    Err(e) => return Err(e),
                };
                let mut existing = Vec::new();
                for row in rows {
                    existing.push(self.schema_by_id(row.schema_id).await?);
                }
                let olds: Vec<&Schema> = existing.iter().map(|s| &s.avro).collect();
                Ok(level.check(&parsed.avro.schema, &olds))
            }
        }
    }

    /// The compatibility level of `subject` (None: the global one). A subject without its own
    /// level gets the global one when `default_to_global`, else 40408.
    pub async fn compatibility(
        &self,
        subject: Option<&str>,
        default_to_global: bool,
    ) -> Result<Compatibility> {
        if let Some(s) = subject {
            if let Some(level) = self.store.compatibility(s).await? {
                return level.parse();
            }
            if !default_to_global {
                return Err(Error::SubjectConfigNotFound(s.to_string()));
            }
        }
        match self.store.compatibility("").await? {
            Some(level) => level.parse(),
            None => Ok(Compatibility::default()),
        }
    }

    /// Sets the level of `subject` (None: the global one). Durable when it returns.
    pub async fn set_compatibility(
        &self,
        subject: Option<&str>,
        level: Compatibility,
    ) -> Result<()> {
        self.store
            .set_compatibility(subject.unwrap_or(""), level.as_str())
            .await
    }

    /// Removes the level of `subject` (None: resets the global one) and returns the level it
    /// had.
    pub async fn delete_compatibility(&self, subject: Option<&str>) -> Result<Compatibility> {
        let previous = self.compatibility(subject, subject.is_none()).await?;
        self.store
            .delete_compatibility(subject.unwrap_or(""))
            .await?;
        Ok(previous)
    }

    /// The global mode.
    pub async fn mode(&self) -> Result<Mode> {
        match self.store.mode("").await? {
            Some(m) => m.parse(),
            None => Ok(Mode::default()),
        }
    }

    /// Sets the global mode. Durable when it returns.
    pub async fn set_mode(&self, mode: Mode) -> Result<()> {
        self.store.set_mode("", mode.as_str()).await
    }
}
