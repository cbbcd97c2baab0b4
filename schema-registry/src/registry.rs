//! The registry's operations, as the REST API and the framed-record decoder use them: register,
//! look up, list, delete, compatibility and mode settings. HTTP-free, so the broker can call it
//! directly.
//!
//! Invariants: registrations and deletes run one at a time in this process (the write lock),
//! so version numbers are assigned without races; each write is durable in the metadata store
//! before the call returns. Several nodes sharing PostgreSQL rely on the `(subject, version)`
//! primary key: a concurrent registration of the same version on another node fails with a
//! retryable store error instead of overwriting.

use std::collections::HashSet;
use std::sync::Arc;

use inlet_storage::MetaStore;

use crate::cache::{SchemaCache, UnknownIds};
use crate::compat::{Compatibility, Mode};
use crate::config::RegistryConfig;
use crate::error::{Error, Result};
use crate::schema::{
    references_from_key, references_key, ParsedSchema, Reference, SchemaType, StoredSchema,
};
use crate::store::{SchemaRow, Store, VersionRow};

/// Most schemas one schema may depend on, references of references included.
const MAX_REFERENCES: usize = 256;

/// A schema to register, look up or test, as a client sends it.
#[derive(Debug, Clone, Default)]
pub struct SchemaRequest {
    pub schema: String,
    /// `schemaType`; None is AVRO.
    pub schema_type: Option<String>,
    /// `references`; a version of -1 means the subject's latest.
    pub references: Vec<Reference>,
    /// `id`, only accepted in IMPORT mode.
    pub id: Option<u32>,
    /// `version`, only accepted in IMPORT mode.
    pub version: Option<u32>,
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
    unknown: UnknownIds,
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
        unknown: UnknownIds::new(
            config.unknown_id_max_entries,
            std::time::Duration::from_millis(config.unknown_id_ttl_ms),
        ),
        config,
        write: tokio::sync::Mutex::new(()),
    })
}

/// A parsed request: the schema and its references, resolved to concrete versions.
struct Parsed {
    schema: ParsedSchema,
    references: Vec<Reference>,
    refs_key: String,
}

impl Registry {
    async fn parse(&self, req: &SchemaRequest) -> Result<Parsed> {
        let schema_type = SchemaType::parse(req.schema_type.as_deref())?;
        if req.schema.len() > self.config.max_schema_bytes {
            return Err(Error::InvalidSchema(format!(
                "schema of {} bytes exceeds the limit of {} bytes",
                req.schema.len(),
                self.config.max_schema_bytes
            )));
        }
        let (references, texts) = self.resolve_references(&req.references).await?;
        let schema = ParsedSchema::parse(schema_type, &req.schema, &texts)?;
        let refs_key = references_key(&references);
        Ok(Parsed {
            schema,
            references,
            refs_key,
        })
    }

    /// Resolves `refs` to concrete versions, and collects the (name, canonical text) of every
    /// schema they reach, references of references included, dependencies first.
    async fn resolve_references(
        &self,
        refs: &[Reference],
    ) -> Result<(Vec<Reference>, Vec<(String, String)>)> {
        let mut concrete = Vec::with_capacity(refs.len());
        let mut names = HashSet::new();
        for r in refs {
            if r.name.is_empty() || r.subject.is_empty() {
                return Err(Error::InvalidSchema(
                    "a reference needs a name, a subject and a version".into(),
                ));
            }
            if !names.insert(r.name.clone()) {
                return Err(Error::InvalidSchema(format!(
                    "reference name {:?} appears twice",
                    r.name
                )));
            }
            let version = self.reference_version(r).await?;
            concrete.push(Reference {
                version: i64::from(version.version),
                ..r.clone()
            });
        }
        // Walk the graph of references, dependencies first; a schema reached twice is
        // collected once, and each is read from the store once.
        let mut texts: Vec<(String, String)> = Vec::new();
        let mut seen: HashSet<(String, i64)> = HashSet::new();
        // (reference, its text once its own references are queued).
        let mut stack: Vec<(Reference, Option<String>)> =
            concrete.iter().rev().map(|r| (r.clone(), None)).collect();
        while let Some((r, text)) = stack.pop() {
            if let Some(text) = text {
                texts.push((r.name.clone(), text));
                continue;
            }
            if !seen.insert((r.subject.clone(), r.version)) {
                continue;
            }
            if seen.len() > MAX_REFERENCES {
                return Err(Error::InvalidSchema(format!(
                    "more than {MAX_REFERENCES} schemas are referenced, directly or not"
                )));
            }
            // The referenced schema, parsed and cached like any other.
            let schema = self.reference_version(&r).await?.schema;
            let deps = schema.references.clone();
            stack.push((r, Some(schema.text.clone())));
            for dep in deps.into_iter().rev() {
                stack.push((dep, None));
            }
        }
        Ok((concrete, texts))
    }

    /// The version a reference names (-1: the latest).
    async fn reference_version(&self, r: &Reference) -> Result<SubjectVersion> {
        let spec = match r.version {
            -1 => VersionSpec::Latest,
            v if (1..=i64::from(i32::MAX)).contains(&v) => VersionSpec::Number(v as u32),
            v => return Err(Error::InvalidVersion(v.to_string())),
        };
        self.version(&r.subject, spec, false)
            .await
            .map_err(|e| match e {
                Error::SubjectNotFound(_) | Error::VersionNotFound { .. } => {
                    Error::InvalidSchema(format!(
                        "reference {:?} names version {} of subject {:?}, which does not exist",
                        r.name, r.version, r.subject
                    ))
                }
                e => e,
            })
    }

    /// Schema `id`, from the cache or the store.
    pub async fn schema_by_id(&self, id: u32) -> Result<Arc<StoredSchema>> {
        if let Some(s) = self.cache.get(id) {
            return Ok(s);
        }
        if self.unknown.contains(id) {
            return Err(Error::SchemaIdNotFound(id));
        }
        let Some(row) = self.store.schema(id).await? else {
            self.unknown.insert(id);
            return Err(Error::SchemaIdNotFound(id));
        };
        let schema_type = SchemaType::parse(Some(&row.schema_type)).map_err(|_| {
            Error::Corrupt(format!("schema {id} has unknown type {}", row.schema_type))
        })?;
        let references = references_from_key(&row.refs)?;
        let (_, texts) = Box::pin(self.resolve_references(&references)).await?;
        let parsed = ParsedSchema::parse(schema_type, &row.text, &texts)
            .map_err(|e| Error::Corrupt(format!("stored schema {id} no longer parses: {e}")))?;
        let stored = Arc::new(StoredSchema::new(id, parsed, references));
        self.cache.insert(stored.clone());
        Ok(stored)
    }

    /// Parsed schemas in the by-id cache and their estimated bytes.
    /// The settings the registry was opened with.
    pub fn config(&self) -> &RegistryConfig {
        &self.config
    }

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

    async fn check_writable(&self, subject: &str) -> Result<Mode> {
        let mode = self.mode(Some(subject), true).await?;
        if mode == Mode::ReadOnly {
            return Err(Error::ReadOnly(subject.to_string()));
        }
        Ok(mode)
    }

    /// Registers `req` under `subject` (or finds it already there) and returns its global id
    /// and version. Checks compatibility with the subject's live versions at its level, except
    /// in IMPORT mode, where the request may also choose the id and version. Durable when it
    /// returns.
    pub async fn register(&self, subject: &str, req: &SchemaRequest) -> Result<(u32, u32)> {
        let parsed = self.parse(req).await?;
        let _write = self.write.lock().await;
        let mode = self.check_writable(subject).await?;
        let importing = mode == Mode::Import;
        if !importing && (req.id.is_some() || req.version.is_some()) {
            return Err(Error::NotPermitted(format!(
                "Subject {subject:?} is not in IMPORT mode: a schema's id and version can only be given while importing"
            )));
        }
        let rows = self.store.versions(subject).await?;
        let type_name = parsed.schema.schema_type().as_str();
        let canonical = parsed.schema.canonical();
        if let Some(id) = self
            .store
            .find_schema(type_name, canonical, &parsed.refs_key)
            .await?
        {
            if let Some(wanted) = req.id.filter(|w| *w != id) {
                return Err(Error::IdConflict(format!(
                    "Schema already registered with id {id} instead of input id {wanted}"
                )));
            }
            if let Some(row) = rows.iter().find(|r| !r.deleted && r.schema_id == id) {
                if req.version.is_none_or(|v| v == row.version) {
                    return Ok((id, row.version));
                }
            }
        }
        if !importing {
            let existing = self.live_schemas(&rows).await?;
            let level = self.compatibility(Some(subject), true).await?;
            let olds: Vec<&ParsedSchema> = existing.iter().map(|s| &s.parsed).collect();
            let reasons = level.check(&parsed.schema, &olds);
            if !reasons.is_empty() {
                return Err(Error::Incompatible {
                    subject: subject.to_string(),
                    messages: reasons,
                });
            }
        }
        let version = match req.version {
            Some(v) => {
                if v == 0 || v > i32::MAX as u32 {
                    return Err(Error::InvalidVersion(v.to_string()));
                }
                if rows.iter().any(|r| r.version == v) {
                    return Err(Error::NotPermitted(format!(
                        "Version {v} of subject {subject:?} already exists"
                    )));
                }
                v
            }
            None => rows.iter().map(|r| r.version).max().unwrap_or(0) + 1,
        };
        let row = SchemaRow {
            schema_type: type_name.to_string(),
            text: canonical.to_string(),
            refs: parsed.refs_key.clone(),
        };
        let id = self
            .store
            .add_version(subject, version, &row, &parsed.references, req.id)
            .await?;
        self.unknown.forget(id);
        tracing::info!(subject, id, version, "registered schema");
        Ok((id, version))
    }

    async fn live_schemas(&self, rows: &[VersionRow]) -> Result<Vec<Arc<StoredSchema>>> {
        let mut out = Vec::new();
        for row in rows.iter().filter(|r| !r.deleted) {
            out.push(self.schema_by_id(row.schema_id).await?);
        }
        Ok(out)
    }

    /// The version of `subject` that holds the schema of `req`.
    pub async fn lookup(
        &self,
        subject: &str,
        req: &SchemaRequest,
        deleted: bool,
    ) -> Result<SubjectVersion> {
        let parsed = self.parse(req).await?;
        let rows = self.live_rows(subject, deleted).await?;
        let id = self
            .store
            .find_schema(
                parsed.schema.schema_type().as_str(),
                parsed.schema.canonical(),
                &parsed.refs_key,
            )
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

    /// Subjects starting with `prefix` that have versions the filter keeps, sorted.
    pub async fn subjects(&self, prefix: &str, filter: Deleted) -> Result<Vec<String>> {
        let all = self.store.subjects(true).await?;
        let live: HashSet<String> = match filter {
            Deleted::Include => HashSet::new(),
            _ => self.store.subjects(false).await?.into_iter().collect(),
        };
        Ok(all
            .into_iter()
            .filter(|s| s.starts_with(prefix))
            .filter(|s| match filter {
                Deleted::Exclude => live.contains(s),
                Deleted::Include => true,
                // Subjects with no live version left.
                Deleted::Only => !live.contains(s),
            })
            .collect())
    }

    /// Version numbers of `subject` the filter keeps.
    pub async fn versions(&self, subject: &str, filter: Deleted) -> Result<Vec<u32>> {
        let rows = self.rows(subject).await?;
        let versions: Vec<u32> = rows
            .iter()
            .filter(|r| match filter {
                Deleted::Exclude => !r.deleted,
                Deleted::Include => true,
                Deleted::Only => r.deleted,
            })
            .map(|r| r.version)
            .collect();
        if versions.is_empty() && filter == Deleted::Exclude {
            return Err(Error::SubjectNotFound(subject.to_string()));
        }
        Ok(versions)
    }

    /// Ids of the schemas that reference version `spec` of `subject`.
    pub async fn referenced_by(&self, subject: &str, spec: VersionSpec) -> Result<Vec<u32>> {
        let sv = self.version(subject, spec, true).await?;
        self.store.referenced_by(subject, sv.version).await
    }

    /// Refuses to delete version `version` of `subject` while other schemas reference it.
    async fn check_unreferenced(&self, subject: &str, version: u32) -> Result<()> {
        let ids = self.store.referenced_by(subject, version).await?;
        if ids.is_empty() {
            Ok(())
        } else {
            Err(Error::ReferenceExists {
                subject: subject.to_string(),
                version,
                ids,
            })
        }
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
        self.check_writable(subject).await?;
        let rows = self.rows(subject).await?;
        for row in &rows {
            self.check_unreferenced(subject, row.version).await?;
        }
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
        self.check_writable(subject).await?;
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
        self.check_unreferenced(subject, version).await?;
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
        let parsed = self.parse(req).await?;
        let level = self.compatibility(Some(subject), true).await?;
        match spec {
            Some(spec) => {
                let old = self.version(subject, spec, false).await?;
                Ok(level.check_pair(&parsed.schema, &old.schema.parsed))
            }
            None => {
                let rows = match self.live_rows(subject, false).await {
                    Ok(rows) => rows,
                    Err(Error::SubjectNotFound(_)) => Vec::new(),
                    Err(e) => return Err(e),
                };
                let existing = self.live_schemas(&rows).await?;
                let olds: Vec<&ParsedSchema> = existing.iter().map(|s| &s.parsed).collect();
                Ok(level.check(&parsed.schema, &olds))
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

    /// The mode of `subject` (None: the global one). A subject without its own mode has the
    /// global one when `default_to_global`, else 40409.
    pub async fn mode(&self, subject: Option<&str>, default_to_global: bool) -> Result<Mode> {
        if let Some(s) = subject {
            if let Some(m) = self.store.mode(s).await? {
                return m.parse();
            }
            if !default_to_global {
                return Err(Error::SubjectModeNotFound(s.to_string()));
            }
        }
        match self.store.mode("").await? {
            Some(m) => m.parse(),
            None => Ok(Mode::default()),
        }
    }

    /// Sets the mode of `subject` (None: the global one). IMPORT is only allowed where no
    /// version was ever registered (permanently deleted ones aside), unless `force`. Durable
    /// when it returns.
    pub async fn set_mode(&self, subject: Option<&str>, mode: Mode, force: bool) -> Result<()> {
        let _write = self.write.lock().await;
        if mode == Mode::Import && !force && self.store.has_versions(subject).await? {
            return Err(Error::NotPermitted(match subject {
                Some(s) => format!(
                    "Cannot import since subject {s:?} has versions; delete them permanently first or set force=true"
                ),
                None => "Cannot import since found existing subjects; delete them permanently first or set force=true".into(),
            }));
        }
        self.store
            .set_mode(subject.unwrap_or(""), mode.as_str())
            .await
    }

    /// Removes the mode of `subject` and returns the mode it had.
    pub async fn delete_mode(&self, subject: &str) -> Result<Mode> {
        let previous = self.mode(Some(subject), true).await?;
        self.store.delete_mode(subject).await?;
        Ok(previous)
    }
}

/// Which versions a listing keeps: live ones, all, or only soft-deleted ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    Exclude,
    Include,
    Only,
}

impl Deleted {
    /// From the `deleted` and `deletedOnly` query flags.
    pub fn from_flags(deleted: bool, deleted_only: bool) -> Self {
        if deleted_only {
            Deleted::Only
        } else if deleted {
            Deleted::Include
        } else {
            Deleted::Exclude
        }
    }
}
