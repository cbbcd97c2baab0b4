//! DataFusion's view of the catalog: one schema per namespace, one table provider per Iceberg
//! table, and the scan that reads a table's data files in parallel.
//!
//! Invariants:
//! - A query plans its files once, when DataFusion asks for the scan: the table's snapshot (the
//!   current one, or the one time travel named) is fixed then, so every partition of the scan
//!   reads the same snapshot.
//! - Filters are pushed into Iceberg's scan planning as `Inexact`: manifests, partitions and
//!   files whose statistics cannot match are skipped, row groups too, and DataFusion still
//!   applies the filter to the rows that are read. `EXPLAIN` shows how many of the snapshot's
//!   data files are left.
//! - The files are spread over up to `target_partitions` scan partitions, balanced by bytes, so
//!   a query uses every core. A partition reads its plain files (local Parquet files with no
//!   deletes, in a table whose column names still match their field ids, see [`crate::native`])
//!   with DataFusion's Parquet reader, and every other file with Iceberg's Arrow reader, which
//!   applies position and equality deletes and maps columns by field id. `EXPLAIN` shows how
//!   many files take the fast path (`native=`).
//! - Tables are loaded when a query names them, not when the catalog is listed: a query costs
//!   one metadata load per table it reads, however many tables the catalog holds.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{CatalogProvider, SchemaProvider, Session};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{
    project_schema, DFSchema, DataFusionError, Result as DFResult, ScalarValue,
};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::{StreamExt, TryStreamExt};
use iceberg::arrow::{schema_to_arrow_schema, ArrowReaderBuilder};
use iceberg::expr::Predicate;
use iceberg::scan::FileScanTask;
use iceberg::spec::SchemaRef as IcebergSchemaRef;
use iceberg::table::Table;
use iceberg::Runtime;
use iceberg::{Catalog, NamespaceIdent, TableIdent};
use iceberg_datafusion::physical_plan::convert_filters_to_predicate;

use crate::native;

pub(crate) fn df_error(e: iceberg::Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// The catalog as DataFusion's `inlet` catalog: namespaces (nested ones joined with `.`) and
/// their table names, listed when the query starts.
#[derive(Debug)]
pub(crate) struct InletCatalog {
    schemas: BTreeMap<String, Arc<NamespaceSchema>>,
}

impl InletCatalog {
    pub(crate) async fn list(catalog: Arc<dyn Catalog>) -> iceberg::Result<Self> {
        let mut schemas = BTreeMap::new();
        let mut pending: Vec<Option<NamespaceIdent>> = vec![None];
        while let Some(parent) = pending.pop() {
            for ns in catalog.list_namespaces(parent.as_ref()).await? {
                let tables = catalog
                    .list_tables(&ns)
                    .await?
                    .into_iter()
                    .map(|t| t.name().to_string())
                    .collect();
                schemas.insert(
                    ns.join("."),
                    Arc::new(NamespaceSchema {
                        catalog: catalog.clone(),
                        namespace: ns.clone(),
                        tables,
                    }),
                );
                pending.push(Some(ns));
            }
        }
        Ok(InletCatalog { schemas })
    }
}

impl CatalogProvider for InletCatalog {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn schema_names(&self) -> Vec<String> {
        self.schemas.keys().cloned().collect()
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        self.schemas
            .get(name)
            .map(|s| s.clone() as Arc<dyn SchemaProvider>)
    }
}

/// One namespace.
#[derive(Debug)]
pub(crate) struct NamespaceSchema {
    catalog: Arc<dyn Catalog>,
    namespace: NamespaceIdent,
    tables: Vec<String>,
}

#[async_trait]
impl SchemaProvider for NamespaceSchema {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn table_names(&self) -> Vec<String> {
        self.tables.clone()
    }

    fn table_exist(&self, name: &str) -> bool {
        self.tables.iter().any(|t| t == name)
    }

    async fn table(&self, name: &str) -> DFResult<Option<Arc<dyn TableProvider>>> {
        if !self.table_exist(name) {
            return Ok(None);
        }
        let ident = TableIdent::new(self.namespace.clone(), name.to_string());
        let table = self.catalog.load_table(&ident).await.map_err(df_error)?;
        Ok(Some(Arc::new(
            IcebergTable::new(table, None).map_err(df_error)?,
        )))
    }
}

/// One table, at its current snapshot or at a fixed one.
#[derive(Debug, Clone)]
pub(crate) struct IcebergTable {
    table: Table,
    snapshot_id: Option<i64>,
    /// The schema the table is read with, as Iceberg's and as Arrow's.
    iceberg_schema: IcebergSchemaRef,
    schema: SchemaRef,
}

impl IcebergTable {
    /// The table at `snapshot_id` (with the schema that snapshot was written with), or at its
    /// current snapshot.
    pub(crate) fn new(table: Table, snapshot_id: Option<i64>) -> iceberg::Result<Self> {
        let metadata = table.metadata();
        let schema = match snapshot_id {
            Some(id) => {
                let snapshot = metadata.snapshot_by_id(id).ok_or_else(|| {
                    iceberg::Error::new(
                        iceberg::ErrorKind::DataInvalid,
                        format!("table {} has no snapshot {id}", table.identifier()),
                    )
                })?;
                snapshot.schema(metadata)?
            }
            None => metadata.current_schema().clone(),
        };
        let arrow = Arc::new(view_strings(&schema_to_arrow_schema(&schema)?));
        Ok(IcebergTable {
            table,
            snapshot_id,
            iceberg_schema: schema,
            schema: arrow,
        })
    }
}

#[async_trait]
impl TableProvider for IcebergTable {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let schema = project_schema(&self.schema, projection)?;
        let columns: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
        let plain: Vec<Expr> = filters.iter().map(plain_string_literals).collect();
        let predicate = convert_filters_to_predicate(&plain);
        let snapshot_id = self
            .snapshot_id
            .or_else(|| self.table.metadata().current_snapshot_id());
        let mut tasks: Vec<FileScanTask> = Vec::new();
        if let Some(id) = snapshot_id {
            let mut builder = self.table.scan().snapshot_id(id).select(columns.clone());
            if let Some(p) = &predicate {
                builder = builder.with_filter(p.clone());
            }
            let scan = builder.build().map_err(df_error)?;
            tasks = scan
                .plan_files()
                .await
                .map_err(df_error)?
                .try_collect()
                .await
                .map_err(df_error)?;
        }
        let total_files = snapshot_id
            .and_then(|id| self.table.metadata().snapshot_by_id(id))
            .and_then(|s| {
                s.summary()
                    .additional_properties
                    .get("total-data-files")
                    .and_then(|n| n.parse().ok())
            });
        let partitions = state.config().target_partitions().max(1);
        let field_ids: Vec<i32> = columns
            .iter()
            .filter_map(|c| self.iceberg_schema.as_struct().field_by_name(c))
            .map(|f| f.id)
            .collect();
        let names_match_ids =
            native::names_match_ids(self.table.metadata(), &self.iceberg_schema, &field_ids);
        let mut scan = IcebergScan::new(
            self.table.clone(),
            snapshot_id,
            schema,
            columns,
            predicate,
            tasks,
            total_files,
            partitions,
            limit,
        );
        if names_match_ids {
            scan.read_plain_files_natively(state, &self.schema, projection, filters)?;
        }
        Ok(Arc::new(scan))
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DFResult<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }
}

/// `schema` with its top-level strings as `Utf8View`, the string type DataFusion's Parquet
/// reader decodes without copying every value and groups and compares fastest. Query results
/// go back to `Utf8` ([`crate::plain_strings`]).
fn view_strings(schema: &Schema) -> Schema {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Utf8 | DataType::LargeUtf8 => {
                f.as_ref().clone().with_data_type(DataType::Utf8View)
            }
            _ => f.as_ref().clone(),
        })
        .collect();
    Schema::new_with_metadata(fields, schema.metadata().clone())
}

/// `filter` with its `Utf8View` literals (which the planner makes when it compares them with a
/// `Utf8View` column) as `Utf8`, the string literals Iceberg's predicate conversion knows.
fn plain_string_literals(filter: &Expr) -> Expr {
    filter
        .clone()
        .transform(|e| {
            Ok(match e {
                Expr::Literal(ScalarValue::Utf8View(v), m) => {
                    Transformed::yes(Expr::Literal(ScalarValue::Utf8(v), m))
                }
                other => Transformed::no(other),
            })
        })
        .map(|t| t.data)
        .unwrap_or_else(|_| filter.clone())
}

/// `batch` from Iceberg's reader with its string columns as `schema` types them (`Utf8View`).
fn to_view_strings(batch: RecordBatch, schema: &SchemaRef) -> DFResult<RecordBatch> {
    if batch
        .schema()
        .fields()
        .iter()
        .zip(schema.fields())
        .all(|(a, b)| a.data_type() == b.data_type() || b.data_type() != &DataType::Utf8View)
    {
        return Ok(batch);
    }
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(c, f)| {
            if f.data_type() == &DataType::Utf8View && c.data_type() != &DataType::Utf8View {
                cast(c, &DataType::Utf8View)
            } else {
                Ok(c.clone())
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .zip(&columns)
        .map(|(f, c)| f.as_ref().clone().with_data_type(c.data_type().clone()))
        .collect();
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(
        Arc::new(Schema::new_with_metadata(
            fields,
            batch.schema().metadata().clone(),
        )),
        columns,
        &options,
    )?)
}

/// Reads a planned set of data files, spread over partitions.
#[derive(Debug)]
pub(crate) struct IcebergScan {
    table: Table,
    snapshot_id: Option<i64>,
    schema: SchemaRef,
    columns: Vec<String>,
    predicate: Option<Predicate>,
    /// Each partition's files.
    groups: Vec<Vec<FileScanTask>>,
    /// Each partition's files for Iceberg's reader: all of `groups`, or those the native plan
    /// does not read.
    iceberg_groups: Vec<Vec<FileScanTask>>,
    /// DataFusion's Parquet reader over the plain files, one file group per partition.
    native: Option<Arc<dyn ExecutionPlan>>,
    native_files: usize,
    total_files: Option<usize>,
    limit: Option<usize>,
    properties: Arc<PlanProperties>,
}

impl IcebergScan {
    #[allow(clippy::too_many_arguments)]
    fn new(
        table: Table,
        snapshot_id: Option<i64>,
        schema: SchemaRef,
        columns: Vec<String>,
        predicate: Option<Predicate>,
        tasks: Vec<FileScanTask>,
        total_files: Option<usize>,
        partitions: usize,
        limit: Option<usize>,
    ) -> Self {
        let groups = balance(tasks, partitions);
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(groups.len()),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        IcebergScan {
            table,
            snapshot_id,
            schema,
            columns,
            predicate,
            iceberg_groups: groups.clone(),
            groups,
            native: None,
            native_files: 0,
            total_files,
            limit,
            properties,
        }
    }

    /// Moves the plain files ([`native::is_plain`]) to DataFusion's Parquet reader, with
    /// `filters` for row group and page pruning. `table_schema` is the whole table's, which
    /// `projection` indexes.
    fn read_plain_files_natively(
        &mut self,
        state: &dyn Session,
        table_schema: &SchemaRef,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
    ) -> DFResult<()> {
        let mut file_groups = Vec::with_capacity(self.groups.len());
        for group in &mut self.iceberg_groups {
            let mut plain = Vec::new();
            group.retain(|task| match native::is_plain(task) {
                Some(path) => {
                    plain.push(PartitionedFile::new(path, task.file_size_in_bytes));
                    false
                }
                None => true,
            });
            self.native_files += plain.len();
            file_groups.push(FileGroup::new(plain));
        }
        if self.native_files == 0 {
            return Ok(());
        }
        let mut source = ParquetSource::new(table_schema.clone())
            .with_table_parquet_options(state.table_options().parquet.clone());
        if let Some(filter) = conjunction(filters.iter().cloned()) {
            let df_schema = DFSchema::try_from(table_schema.as_ref().clone())?;
            // A filter that does not compile to a physical expression only costs pruning:
            // DataFusion applies it above the scan anyway.
            if let Ok(predicate) = state.create_physical_expr(filter, &df_schema) {
                source = source.with_predicate(predicate);
            }
        }
        let config =
            FileScanConfigBuilder::new(ObjectStoreUrl::local_filesystem(), Arc::new(source))
                .with_file_groups(file_groups)
                .with_projection_indices(projection.cloned())?
                .with_limit(self.limit)
                .with_batch_size(Some(state.config().batch_size()))
                .build();
        self.native = Some(DataSourceExec::from_data_source(config));
        Ok(())
    }

    /// Data files this scan reads.
    pub(crate) fn files(&self) -> usize {
        self.groups.iter().map(Vec::len).sum()
    }
}

/// Spreads `tasks` over at most `partitions` groups (at least one), largest first onto the
/// lightest group, so each partition reads about the same number of bytes.
fn balance(mut tasks: Vec<FileScanTask>, partitions: usize) -> Vec<Vec<FileScanTask>> {
    let n = partitions.min(tasks.len()).max(1);
    tasks.sort_by_key(|t| std::cmp::Reverse(t.length));
    let mut groups: Vec<(u64, Vec<FileScanTask>)> = (0..n).map(|_| (0, Vec::new())).collect();
    for task in tasks {
        let lightest = groups
            .iter_mut()
            .min_by_key(|(bytes, _)| *bytes)
            .expect("at least one group");
        lightest.0 += task.length;
        lightest.1.push(task);
    }
    groups.into_iter().map(|(_, g)| g).collect()
}

impl DisplayAs for IcebergScan {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "IcebergScan: table={}", self.table.identifier())?;
        if let Some(id) = self.snapshot_id {
            write!(f, " snapshot={id}")?;
        }
        match self.total_files {
            Some(total) => write!(f, " files={}/{total}", self.files())?,
            None => write!(f, " files={}", self.files())?,
        }
        write!(f, " native={}", self.native_files)?;
        write!(f, " projection=[{}]", self.columns.join(","))?;
        if let Some(p) = &self.predicate {
            write!(f, " predicate=[{p}]")?;
        }
        if let Some(limit) = self.limit {
            write!(f, " limit={limit}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for IcebergScan {
    fn name(&self) -> &str {
        "IcebergScan"
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DFResult<SendableRecordBatchStream> {
        let tasks = self
            .iceberg_groups
            .get(partition)
            .cloned()
            .unwrap_or_default();
        let native = match &self.native {
            Some(plan) => Some(plan.execute(partition, context.clone())?.boxed()),
            None => None,
        };
        let iceberg = if tasks.is_empty() {
            None
        } else {
            let batch_size = context.session_config().batch_size();
            let reader = ArrowReaderBuilder::new(self.table.file_io().clone(), Runtime::current())
                .with_batch_size(batch_size)
                .with_row_group_filtering_enabled(true)
                .with_data_file_concurrency_limit(2)
                .build();
            Some(
                reader
                    .read(futures::stream::iter(tasks.into_iter().map(Ok)).boxed())
                    .map_err(df_error)?
                    .stream()
                    .map_err(df_error)
                    .and_then({
                        let schema = self.schema.clone();
                        move |b| futures::future::ready(to_view_strings(b, &schema))
                    })
                    .boxed(),
            )
        };
        let stream = futures::stream::iter(native.into_iter().chain(iceberg)).flatten();
        let stream = match self.limit {
            Some(limit) => {
                let mut left = limit;
                stream
                    .try_filter_map(move |batch| {
                        let out = if left == 0 {
                            None
                        } else if batch.num_rows() <= left {
                            left -= batch.num_rows();
                            Some(batch)
                        } else {
                            let b = batch.slice(0, left);
                            left = 0;
                            Some(b)
                        };
                        futures::future::ready(Ok(out))
                    })
                    .boxed()
            }
            None => stream.boxed(),
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            stream,
        )))
    }
}
