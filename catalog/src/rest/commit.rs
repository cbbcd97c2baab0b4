//! Table commits from REST clients: check the requirements, apply the updates, write the new
//! metadata file, then move the table's metadata pointer with one compare-and-swap.
//!
//! Why the server does this itself: iceberg 0.10.1 gives code outside the `iceberg` crate no
//! way to build the `TableCommit` that `Catalog::update_table` takes (its builder is
//! crate-private, apache/iceberg-rust#164 and #1262), so a client's requirements and updates
//! cannot be handed to the catalog. The one primitive missing from `iceberg::Catalog` is the
//! pointer swap, which [`MetadataPointerStore`] supplies; [`SqlMetadataPointers`] implements it
//! on the tables of `iceberg_catalog_sql::SqlCatalog` (the Iceberg JDBC catalog schema, shared
//! with Java's `JdbcCatalog` and pyiceberg's `SqlCatalog`), with the same conditional `UPDATE`
//! that `SqlCatalog::update_table` runs, so commits through either path exclude each other.
//!
//! Invariants:
//! - A commit is applied only if every requirement holds on the metadata it is applied to: the
//!   requirements are checked on the loaded metadata, and the swap succeeds only if the pointer
//!   still names that metadata's file. A failed requirement or a lost race is a 409.
//! - Metadata files are never overwritten: each commit writes a new `<version>-<uuid>` file.
//!   A file whose swap definitely failed is deleted (best effort); after an unknown outcome it
//!   is kept, because the commit may have landed (500 `CommitStateUnknownException`).
//! - Multi-table commits swap all pointers in one SQL transaction: all or none.
//! - The new metadata file is durable before the swap: the storage fsyncs local files
//!   ([`crate::storage`]).
//! - Old metadata files go only after a successful swap, and only those the new metadata's
//!   log no longer lists ([`StagedCommit::delete_dropped_metadata`]).

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;

use iceberg::io::FileIO;
use iceberg::spec::{FormatVersion, TableMetadata, TableMetadataBuilder, UnboundPartitionSpec};
use iceberg::table::Table;
use iceberg::{
    ErrorKind, MetadataLocation, TableCreation, TableIdent, TableRequirement, TableUpdate,
};
use sqlx::any::{AnyPoolOptions, AnyQueryResult};
use sqlx::AnyPool;

use super::error::{RestError, Result};
use super::names::check_location;

/// A boxed, sendable future (the pointer store is used as a trait object).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Moving one table's metadata pointer from the file a commit was based on to its new file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PointerSwap {
    /// The table.
    pub table: TableIdent,
    /// The metadata location the commit was based on.
    pub expected: String,
    /// The metadata location the commit wrote.
    pub new: String,
}

/// Where table metadata pointers live: the compare-and-swap that commits need.
pub trait MetadataPointerStore: Debug + Send + Sync {
    /// Atomically moves every table's pointer from `expected` to `new`: all or none. A swap
    /// whose `new` equals `expected` only asserts that the pointer is still there.
    ///
    /// Fails with `ErrorKind::CatalogCommitConflicts` when any table's pointer is not
    /// `expected` (another commit won, or the table was dropped or renamed): nothing changed.
    /// Any other error leaves the outcome unknown.
    fn swap<'a>(&'a self, swaps: &'a [PointerSwap]) -> BoxFuture<'a, iceberg::Result<()>>;

    /// [`swap`](Self::swap) for staged commits, with their new metadata at hand for a store
    /// that keeps more than the pointer (Glue keeps the table's columns and location).
    /// Same contract; by default, only the swaps.
    fn swap_staged<'a>(&'a self, staged: &'a [StagedCommit]) -> BoxFuture<'a, iceberg::Result<()>> {
        Box::pin(async move {
            let swaps: Vec<PointerSwap> = staged.iter().map(|s| s.swap.clone()).collect();
            self.swap(&swaps).await
        })
    }
}

/// The connections of [`SqlMetadataPointers::connect`]'s pool.
const POOL_CONNECTIONS: u32 = 4;

/// The metadata pointers of an `iceberg_catalog_sql::SqlCatalog`: rows of its `iceberg_tables`
/// table, keyed by catalog name, namespace (levels joined by `.`) and table name.
#[derive(Debug, Clone)]
pub struct SqlMetadataPointers {
    pool: AnyPool,
    catalog_name: String,
    /// Postgres takes `$1` placeholders, SQLite `?`.
    numbered_params: bool,
}

impl SqlMetadataPointers {
    /// Opens a small pool on the catalog database `uri` (the same URI the `SqlCatalog` was
    /// built with) for the catalog named `catalog_name` (the name it was loaded with). On
    /// PostgreSQL it is checked as the metadata store's own pool is
    /// ([`inlet_storage::postgres_pool_options`]): every table load reads a pointer here, so a
    /// connection whose path went silent must be dropped, not handed out.
    pub async fn connect(uri: &str, catalog_name: impl Into<String>) -> iceberg::Result<Self> {
        sqlx::any::install_default_drivers();
        let options = if uri.starts_with("postgres") {
            inlet_storage::postgres_pool_options(POOL_CONNECTIONS)
        } else {
            AnyPoolOptions::new().max_connections(POOL_CONNECTIONS)
        };
        let pool = options.connect(uri).await.map_err(sql_error)?;
        Ok(Self::from_pool(pool, catalog_name))
    }

    /// Uses an existing pool on the catalog database.
    pub fn from_pool(pool: AnyPool, catalog_name: impl Into<String>) -> Self {
        let scheme = pool.connect_options().database_url.scheme().to_string();
        Self {
            pool,
            catalog_name: catalog_name.into(),
            numbered_params: scheme.starts_with("postgres"),
        }
    }

    fn placeholder(&self, n: usize) -> String {
        if self.numbered_params {
            format!("${n}")
        } else {
            "?".to_string()
        }
    }

    /// The conditional update both this store and `SqlCatalog::update_table` use.
    fn update_statement(&self) -> String {
        let p = |n| self.placeholder(n);
        format!(
            "UPDATE iceberg_tables \
             SET metadata_location = {}, previous_metadata_location = {} \
             WHERE catalog_name = {} AND table_namespace = {} AND table_name = {} \
             AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL) \
             AND metadata_location = {}",
            p(1),
            p(2),
            p(3),
            p(4),
            p(5),
            p(6)
        )
    }

    /// A write that changes nothing but locks the row and matches only if the pointer is still
    /// `expected` (a plain read would not hold the row until the transaction commits).
    fn assert_statement(&self) -> String {
        let p = |n| self.placeholder(n);
        format!(
            "UPDATE iceberg_tables SET metadata_location = metadata_location \
             WHERE catalog_name = {} AND table_namespace = {} AND table_name = {} \
             AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL) \
             AND metadata_location = {}",
            p(1),
            p(2),
            p(3),
            p(4)
        )
    }

    /// Where the table's metadata pointer is, if the table exists.
    pub async fn location(&self, table: &TableIdent) -> iceberg::Result<Option<String>> {
        let p = |n| self.placeholder(n);
        let select = format!(
            "SELECT metadata_location FROM iceberg_tables \
             WHERE catalog_name = {} AND table_namespace = {} AND table_name = {} \
             AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)",
            p(1),
            p(2),
            p(3)
        );
        let namespace = table.namespace().join(".");
        let row: Option<(Option<String>,)> = sqlx::query_as(&select)
            .bind(self.catalog_name.as_str())
            .bind(namespace.as_str())
            .bind(table.name())
            .fetch_optional(&self.pool)
            .await
            .map_err(sql_error)?;
        Ok(row.and_then(|(location,)| location))
    }

    /// Removes namespace properties (rows of the SQL catalog's `iceberg_namespace_properties`,
    /// which `SqlCatalog::update_namespace` can only add to or change). Missing keys are
    /// ignored.
    pub async fn remove_namespace_properties(
        &self,
        namespace: &iceberg::NamespaceIdent,
        keys: &[String],
    ) -> iceberg::Result<()> {
        let p = |n| self.placeholder(n);
        let delete = format!(
            "DELETE FROM iceberg_namespace_properties \
             WHERE catalog_name = {} AND namespace = {} AND property_key = {}",
            p(1),
            p(2),
            p(3)
        );
        let namespace = namespace.join(".");
        let mut tx = self.pool.begin().await.map_err(sql_error)?;
        for key in keys {
            sqlx::query(&delete)
                .bind(self.catalog_name.as_str())
                .bind(namespace.as_str())
                .bind(key.as_str())
                .execute(&mut *tx)
                .await
                .map_err(sql_error)?;
        }
        tx.commit().await.map_err(sql_error)
    }

    async fn swap_all(&self, swaps: &[PointerSwap]) -> iceberg::Result<()> {
        let update = self.update_statement();
        let assert = self.assert_statement();
        let mut tx = self.pool.begin().await.map_err(sql_error)?;
        for swap in swaps {
            let namespace = swap.table.namespace().join(".");
            let query = if swap.new == swap.expected {
                sqlx::query(&assert)
            } else {
                sqlx::query(&update)
                    .bind(swap.new.as_str())
                    .bind(swap.expected.as_str())
            };
            let result: AnyQueryResult = query
                .bind(self.catalog_name.as_str())
                .bind(namespace.as_str())
                .bind(swap.table.name())
                .bind(swap.expected.as_str())
                .execute(&mut *tx)
                .await
                .map_err(sql_error)?;
            if result.rows_affected() != 1 {
                // Dropping `tx` rolls back the swaps made so far.
                return Err(iceberg::Error::new(
                    ErrorKind::CatalogCommitConflicts,
                    format!(
                        "table {} is no longer at metadata {}: another commit won, or it was \
                         dropped or renamed",
                        swap.table, swap.expected
                    ),
                )
                .with_retryable(true));
            }
        }
        tx.commit().await.map_err(sql_error)
    }
}

impl MetadataPointerStore for SqlMetadataPointers {
    fn swap<'a>(&'a self, swaps: &'a [PointerSwap]) -> BoxFuture<'a, iceberg::Result<()>> {
        Box::pin(self.swap_all(swaps))
    }
}

fn sql_error(err: sqlx::Error) -> iceberg::Error {
    iceberg::Error::new(ErrorKind::Unexpected, "catalog database error").with_source(err)
}

/// One table's commit, checked and written, waiting for its pointer swap. A commit without
/// updates wrote nothing: its swap only asserts the current pointer (`new == expected`).
#[derive(Debug)]
pub struct StagedCommit {
    /// The swap that makes the commit visible.
    pub swap: PointerSwap,
    /// The new metadata, as written to `swap.new`.
    pub metadata: TableMetadata,
    file_io: FileIO,
    /// The metadata files the table's metadata log listed before this commit, and the file
    /// it was at: candidates for deletion once the new metadata no longer lists them.
    previous: Vec<String>,
}

impl StagedCommit {
    /// A commit without updates, as part of a multi-table commit: it only asserts that the
    /// table is still at the metadata its requirements were checked on.
    pub fn assertion(table: Table) -> Self {
        let location = table.metadata_location().unwrap_or_default().to_string();
        Self {
            swap: PointerSwap {
                table: table.identifier().clone(),
                expected: location.clone(),
                new: location,
            },
            metadata: table.metadata().clone(),
            file_io: table.file_io().clone(),
            previous: Vec::new(),
        }
    }

    /// After the commit is published: deletes the metadata files that dropped off the new
    /// metadata's log (Iceberg keeps the newest `write.metadata.previous-versions-max`, 100
    /// by default), if the table's `write.metadata.delete-after-commit.enabled` says so
    /// (`default` when it is not set: Iceberg's default is `false`, Inlet's own commits pass
    /// `true`). A table committing every second would otherwise keep every metadata file it
    /// ever wrote. Best effort: a leftover file is harmless.
    pub async fn delete_dropped_metadata(&self, default: bool) {
        let enabled = self
            .metadata
            .properties()
            .get(DELETE_AFTER_COMMIT)
            .map_or(default, |v| v.eq_ignore_ascii_case("true"));
        if !enabled || self.swap.new == self.swap.expected {
            return;
        }
        let kept: std::collections::HashSet<&str> = self
            .metadata
            .metadata_log()
            .iter()
            .map(|l| l.metadata_file.as_str())
            .chain([self.swap.new.as_str()])
            .collect();
        for file in self.previous.iter().filter(|f| !kept.contains(f.as_str())) {
            if let Err(e) = self.file_io.delete(file).await {
                tracing::debug!(%file, error = %e, "could not delete an old metadata file");
            }
        }
    }
}

/// The table property that turns deleting old metadata files after a commit on.
pub const DELETE_AFTER_COMMIT: &str = "write.metadata.delete-after-commit.enabled";

/// The outcome of checking a commit against a table.
#[derive(Debug)]
pub enum Checked {
    /// The commit has no updates and its requirements hold: nothing to write.
    Unchanged(Table),
    /// The new metadata file is written; the swap remains.
    Staged(Box<StagedCommit>),
}

/// Checks `requirements` against `table`, applies `updates` and writes the new metadata file
/// next to the current one.
pub async fn stage(
    table: Table,
    requirements: &[TableRequirement],
    updates: Vec<TableUpdate>,
    allowed_locations: &[String],
) -> Result<Checked> {
    for requirement in requirements {
        requirement.check(Some(table.metadata())).map_err(|e| {
            RestError::CommitFailed(format!(
                "requirement failed for table {}: {}",
                table.identifier(),
                e.message()
            ))
        })?;
    }
    if updates.is_empty() {
        return Ok(Checked::Unchanged(table));
    }
    for update in &updates {
        if let TableUpdate::SetLocation { location } = update {
            check_location(allowed_locations, location)?;
        }
    }
    let current_location = table
        .metadata_location()
        .ok_or_else(|| {
            RestError::Internal(format!(
                "table {} has no metadata location",
                table.identifier()
            ))
        })?
        .to_string();

    let mut builder = table
        .metadata()
        .clone()
        .into_builder(Some(current_location.clone()));
    for update in updates {
        builder = update
            .apply(builder)
            .map_err(|e| invalid_update(&table, e))?;
    }
    let metadata = builder
        .build()
        .map_err(|e| invalid_update(&table, e))?
        .metadata;

    let new_location = match MetadataLocation::from_str(&current_location) {
        Ok(current) => current.with_next_version().with_new_metadata(&metadata),
        // A registered table may carry a file name of another writer's scheme.
        Err(_) => MetadataLocation::new_with_metadata(metadata.location(), &metadata),
    };
    let file_io = table.file_io().clone();
    let previous = table
        .metadata()
        .metadata_log()
        .iter()
        .map(|l| l.metadata_file.clone())
        .chain([current_location.clone()])
        .collect();
    metadata
        .write_to(&file_io, &new_location)
        .await
        .map_err(RestError::from_catalog)?;
    Ok(Checked::Staged(Box::new(StagedCommit {
        swap: PointerSwap {
            table: table.identifier().clone(),
            expected: current_location,
            new: new_location.to_string(),
        },
        metadata,
        file_io,
        previous,
    })))
}

fn invalid_update(table: &Table, err: iceberg::Error) -> RestError {
    RestError::BadRequest(format!(
        "cannot apply the updates to table {}: {}",
        table.identifier(),
        err.message()
    ))
}

/// Makes staged commits visible with one atomic swap. On a definite conflict the written
/// metadata files are deleted and the answer is 409; on an unknown outcome they are kept (500).
pub async fn publish(pointers: &dyn MetadataPointerStore, staged: &[StagedCommit]) -> Result<()> {
    let swaps: Vec<PointerSwap> = staged.iter().map(|s| s.swap.clone()).collect();
    match pointers.swap_staged(staged).await {
        Ok(()) => {
            for swap in &swaps {
                tracing::debug!(table = %swap.table, metadata = %swap.new, "committed");
            }
            Ok(())
        }
        Err(e) if e.kind() == ErrorKind::CatalogCommitConflicts => {
            discard(staged).await;
            Err(RestError::CommitFailed(e.message().to_string()))
        }
        // The store refused the swap as a whole before changing anything (Glue and a
        // multi-table commit).
        Err(e) if e.kind() == ErrorKind::FeatureUnsupported => {
            discard(staged).await;
            Err(RestError::Unsupported(e.message().to_string()))
        }
        Err(e) => Err(RestError::CommitStateUnknown(format!(
            "the commit may or may not have been applied: {e}"
        ))),
    }
}

/// Deletes the metadata files of commits that will not be published (best effort: an
/// unreferenced metadata file is harmless).
pub(super) async fn discard(staged: &[StagedCommit]) {
    for commit in staged.iter().filter(|c| c.swap.new != c.swap.expected) {
        if let Err(err) = commit.file_io.delete(&commit.swap.new).await {
            tracing::warn!(file = %commit.swap.new, %err, "could not delete the metadata file of an abandoned commit");
        }
    }
}

/// The first part of a create transaction's updates, which sets up the table, turned into the
/// `TableCreation` the catalog takes; the rest of the updates follow as a normal commit.
#[derive(Debug)]
pub(super) struct CreateTransaction {
    /// What to create.
    pub creation: TableCreation,
    /// Updates to commit on the created table (`assign-uuid` and everything after the set-up).
    pub rest: Vec<TableUpdate>,
}

/// Splits a create transaction (a commit with `assert-create` on a table that does not exist)
/// into the creation and the updates after it.
///
/// Clients (Java, pyiceberg) start a create transaction with the table's initial state:
/// `assign-uuid`, `upgrade-format-version`, `add-schema`, `set-current-schema`, `add-spec`,
/// `set-default-spec`, `add-sort-order`, `set-default-sort-order`, `set-location`,
/// `set-properties`. That prefix becomes the creation (the uuid is assigned afterwards); the
/// first update of another kind, or a second schema, spec or sort order, starts the rest.
pub(super) fn split_create_transaction(
    name: &str,
    updates: Vec<TableUpdate>,
) -> Result<CreateTransaction> {
    let mut schema = None;
    let mut spec: Option<UnboundPartitionSpec> = None;
    let mut sort_order = None;
    let mut location = None;
    let mut format_version = FormatVersion::V2;
    let mut properties = std::collections::HashMap::new();
    let mut rest = Vec::new();
    let mut updates = updates.into_iter();
    for update in updates.by_ref() {
        match update {
            TableUpdate::AssignUuid { .. } => rest.push(update),
            TableUpdate::UpgradeFormatVersion { format_version: v } => format_version = v,
            TableUpdate::AddSchema { schema: s } if schema.is_none() => schema = Some(s),
            TableUpdate::SetCurrentSchema { .. } if schema.is_some() => {}
            TableUpdate::AddSpec { spec: s } if spec.is_none() => spec = Some(s),
            TableUpdate::SetDefaultSpec { .. } if spec.is_some() => {}
            TableUpdate::AddSortOrder { sort_order: s } if sort_order.is_none() => {
                sort_order = Some(s)
            }
            TableUpdate::SetDefaultSortOrder { .. } if sort_order.is_some() => {}
            TableUpdate::SetLocation { location: l } if location.is_none() => location = Some(l),
            TableUpdate::SetProperties { updates } => properties.extend(updates),
            other => {
                rest.push(other);
                break;
            }
        }
    }
    rest.extend(updates);
    let schema = schema.ok_or_else(|| {
        RestError::BadRequest(format!(
            "create transaction for table {name:?} has no add-schema update"
        ))
    })?;
    let location = location.ok_or_else(|| {
        RestError::BadRequest(format!(
            "create transaction for table {name:?} has no set-location update"
        ))
    })?;
    let creation = TableCreation::builder()
        .name(name.to_string())
        .location(location)
        .schema(schema)
        .partition_spec_opt(spec)
        .sort_order_opt(sort_order)
        .properties(properties)
        .format_version(format_version)
        .build();
    Ok(CreateTransaction { creation, rest })
}

/// The initial metadata of a staged create, not written anywhere: what the client starts its
/// create transaction from.
pub(super) fn staged_metadata(creation: TableCreation) -> Result<TableMetadata> {
    Ok(TableMetadataBuilder::from_table_creation(creation)
        .and_then(|b| b.build())
        .map_err(RestError::from_catalog_input)?
        .metadata)
}

/// Whether a commit's requirements include `assert-create`.
pub(super) fn asserts_create(requirements: &[TableRequirement]) -> bool {
    requirements
        .iter()
        .any(|r| matches!(r, TableRequirement::NotExist))
}
