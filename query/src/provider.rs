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
//!   a query uses every core; each partition reads its files with Iceberg's Arrow reader, which
//!   applies position and equality deletes.
//! - Tables are loaded when a query names them, not when the catalog is listed: a query costs
//!   one metadata load per table it reads, however many tables the catalog holds.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{CatalogProvider, SchemaProvider, Session};
use datafusion::common::{project_schema, DataFusionError, Result as DFResult};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
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
use iceberg::table::Table;
use iceberg::Runtime;
use iceberg::{Catalog, NamespaceIdent, TableIdent};
use iceberg_datafusion::physical_plan::convert_filters_to_predicate;

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
        let schema = Arc::new(schema_to_arrow_schema(&schema)?);
        Ok(IcebergTable {
            table,
            snapshot_id,
            schema,
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
        let predicate = convert_filters_to_predicate(filters);
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
        Ok(Arc::new(IcebergScan::new(
            self.table.clone(),
            snapshot_id,
            schema,
            columns,
            predicate,
            tasks,
            total_files,
            partitions,
            limit,
        )))
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DFResult<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }
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
            groups,
            total_files,
            limit,
            properties,
        }
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
        let tasks = self.groups.get(partition).cloned().unwrap_or_default();
        let batch_size = context.session_config().batch_size();
        let reader = ArrowReaderBuilder::new(self.table.file_io().clone(), Runtime::current())
            .with_batch_size(batch_size)
            .with_row_group_filtering_enabled(true)
            .with_data_file_concurrency_limit(2)
            .build();
        let stream = reader
            .read(futures::stream::iter(tasks.into_iter().map(Ok)).boxed())
            .map_err(df_error)?
            .stream()
            .map_err(df_error);
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
