//! Time travel and table history as table functions:
//! - `as_of('ns.table', 1234)` reads the table at snapshot 1234 (with that snapshot's schema);
//! - `as_of('ns.table', '2026-11-29T10:00:00Z')` reads it as it was at that time: the last
//!   snapshot of its `main` history committed at or before it;
//! - `snapshots('ns.table')` lists the table's snapshots (time, id, parent, operation,
//!   summary), to find the ids and times to travel to;
//! - `files('ns.table')` lists the live files of its current snapshot (content, path, format,
//!   partition, records, bytes): what a scan of it reads.
//!
//! DataFusion calls table functions synchronously while planning, but loading a table is
//! asynchronous, so [`resolve`] walks the parsed statement first, loads every table these
//! functions name, and registers functions that answer from what it loaded.
//!
//! Invariants: the arguments must be literals (a table name, then a snapshot id or a time);
//! anything else is a planning error with the function's usage, never a guess.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::compute::concat_batches;
use datafusion::catalog::{TableFunctionImpl, TableProvider};
use datafusion::common::{plan_err, Result as DFResult, ScalarValue};
use datafusion::datasource::MemTable;
use datafusion::logical_expr::Expr;
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::{DFParser, Statement as DFStatement};
use datafusion::sql::sqlparser::ast::{
    self, FunctionArg, FunctionArgExpr, TableFactor, UnaryOperator, Visit, Visitor,
};
use futures::TryStreamExt;
use iceberg::{Catalog, NamespaceIdent, TableIdent};

use crate::provider::IcebergTable;
use crate::QueryError;

const AS_OF: &str = "as_of";
const SNAPSHOTS: &str = "snapshots";
const FILES: &str = "files";

/// A literal argument, as text: the same key whether it came from the SQL text or from
/// DataFusion's planned expression.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Arg {
    Text(String),
    Number(String),
}

impl Arg {
    fn from_sql(arg: &FunctionArg) -> Option<Arg> {
        let FunctionArg::Unnamed(FunctionArgExpr::Expr(expr)) = arg else {
            return None;
        };
        match expr {
            ast::Expr::Value(v) => match &v.value {
                ast::Value::SingleQuotedString(s) => Some(Arg::Text(s.clone())),
                ast::Value::Number(n, _) => Some(Arg::Number(n.clone())),
                _ => None,
            },
            ast::Expr::UnaryOp {
                op: UnaryOperator::Minus,
                expr,
            } => match expr.as_ref() {
                ast::Expr::Value(v) => match &v.value {
                    ast::Value::Number(n, _) => Some(Arg::Number(format!("-{n}"))),
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        }
    }

    fn from_expr(expr: &Expr) -> Option<Arg> {
        match expr {
            Expr::Literal(ScalarValue::Utf8(Some(s)), _)
            | Expr::Literal(ScalarValue::Utf8View(Some(s)), _)
            | Expr::Literal(ScalarValue::LargeUtf8(Some(s)), _) => Some(Arg::Text(s.clone())),
            Expr::Literal(v, _) if v.data_type().is_integer() => Some(Arg::Number(v.to_string())),
            Expr::Negative(inner) => match Arg::from_expr(inner)? {
                Arg::Number(n) => Some(Arg::Number(format!("-{n}"))),
                Arg::Text(_) => None,
            },
            _ => None,
        }
    }
}

/// One call of a time-travel function.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Call {
    function: &'static str,
    args: Vec<Arg>,
}

#[derive(Default)]
struct Calls(Vec<Call>);

impl Visitor for Calls {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
        if let TableFactor::Table {
            name,
            args: Some(args),
            ..
        } = factor
        {
            let function = name.to_string().to_ascii_lowercase();
            let function = match function.as_str() {
                AS_OF => AS_OF,
                SNAPSHOTS => SNAPSHOTS,
                FILES => FILES,
                _ => return ControlFlow::Continue(()),
            };
            // Calls with non-literal arguments are left for the function to refuse.
            if let Some(args) = args.args.iter().map(Arg::from_sql).collect() {
                self.0.push(Call { function, args });
            }
        }
        ControlFlow::Continue(())
    }
}

fn collect(statement: &DFStatement, calls: &mut Calls) {
    match statement {
        DFStatement::Statement(s) => {
            let _ = s.visit(calls);
        }
        DFStatement::Explain(e) => collect(&e.statement, calls),
        _ => {}
    }
}

fn table_ident(name: &str) -> Result<TableIdent, QueryError> {
    let parts: Vec<String> = name.split('.').map(str::to_string).collect();
    if parts.len() < 2 || parts.iter().any(String::is_empty) {
        return Err(QueryError::Invalid(format!(
            "{name:?} is not a table name: write it as 'namespace.table'"
        )));
    }
    let (table, namespace) = parts.split_last().expect("two parts");
    let namespace = NamespaceIdent::from_vec(namespace.to_vec())
        .map_err(|e| QueryError::Invalid(e.to_string()))?;
    Ok(TableIdent::new(namespace, table.clone()))
}

async fn load(catalog: &dyn Catalog, name: &str) -> Result<iceberg::table::Table, QueryError> {
    let ident = table_ident(name)?;
    if !catalog
        .table_exists(&ident)
        .await
        .map_err(QueryError::failed)?
    {
        return Err(QueryError::Invalid(format!("table {name} does not exist")));
    }
    catalog.load_table(&ident).await.map_err(QueryError::failed)
}

/// The snapshot of `table`'s main history current at `time` (epoch ms).
fn snapshot_at(table: &iceberg::table::Table, time: &str) -> Result<i64, QueryError> {
    let nanos = datafusion::arrow::compute::kernels::cast_utils::string_to_timestamp_nanos(time)
        .map_err(|e| {
            QueryError::Invalid(format!(
                "{time:?} is neither a snapshot id nor a time (e.g. '2026-11-29T10:00:00Z'): {e}"
            ))
        })?;
    let ms = nanos.div_euclid(1_000_000);
    table
        .metadata()
        .history()
        .iter()
        .rfind(|entry| entry.timestamp_ms <= ms)
        .map(|entry| entry.snapshot_id)
        .ok_or_else(|| {
            QueryError::Invalid(format!(
                "table {} has no snapshot at or before {time}",
                table.identifier()
            ))
        })
}

async fn provide(catalog: &dyn Catalog, call: &Call) -> Result<Arc<dyn TableProvider>, QueryError> {
    match (call.function, call.args.as_slice()) {
        (AS_OF, [Arg::Text(name), at]) => {
            let table = load(catalog, name).await?;
            let snapshot_id = match at {
                Arg::Number(n) => n
                    .parse::<i64>()
                    .map_err(|_| QueryError::Invalid(format!("{n} is not a snapshot id")))?,
                Arg::Text(time) => snapshot_at(&table, time)?,
            };
            let provider = IcebergTable::new(table, Some(snapshot_id))
                .map_err(|e| QueryError::Invalid(e.to_string()))?;
            Ok(Arc::new(provider))
        }
        (SNAPSHOTS, [Arg::Text(name)]) => {
            let table = load(catalog, name).await?;
            let failed = |e: iceberg::Error| QueryError::failed(e);
            let inspect = table.inspect();
            let snapshots = inspect.snapshots();
            let batches: Vec<_> = snapshots
                .scan()
                .await
                .map_err(failed)?
                .try_collect()
                .await
                .map_err(failed)?;
            let schema = snapshots.schema();
            let schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema).map_err(failed)?);
            let batch = concat_batches(&schema, &batches).map_err(QueryError::failed)?;
            let table = MemTable::try_new(schema, vec![vec![batch]]).map_err(QueryError::failed)?;
            Ok(Arc::new(table))
        }
        (FILES, [Arg::Text(name)]) => {
            let table = load(catalog, name).await?;
            Ok(Arc::new(live_files(&table).await?))
        }
        _ => Err(QueryError::Invalid(usage(call.function).to_string())),
    }
}

fn usage(function: &str) -> &'static str {
    match function {
        AS_OF => {
            "as_of takes a table name and a snapshot id or a time: as_of('ns.table', 1234) or \
             as_of('ns.table', '2026-11-29T10:00:00Z')"
        }
        FILES => "files takes a table name: files('ns.table')",
        _ => "snapshots takes a table name: snapshots('ns.table')",
    }
}

/// The live data and delete files of `table`'s current snapshot, one row each.
async fn live_files(table: &iceberg::table::Table) -> Result<MemTable, QueryError> {
    use datafusion::arrow::array::{ArrayRef, Int32Array, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::arrow::record_batch::RecordBatch;

    /// content, path, format, spec id, partition, records, bytes.
    type Row = (String, String, String, i32, String, i64, i64);
    let failed = |e: iceberg::Error| QueryError::failed(e);
    let mut rows: Vec<Row> = Vec::new();
    if let Some(snapshot) = table.metadata().current_snapshot() {
        let bytes = table
            .file_io()
            .new_input(snapshot.manifest_list())
            .map_err(failed)?
            .read()
            .await
            .map_err(failed)?;
        let list = iceberg::spec::ManifestList::parse_with_version(
            &bytes,
            table.metadata().format_version(),
        )
        .map_err(failed)?;
        for m in list.entries() {
            let manifest = m.load_manifest(table.file_io()).await.map_err(failed)?;
            for entry in manifest.entries().iter().filter(|e| e.is_alive()) {
                let f = entry.data_file();
                rows.push((
                    format!("{:?}", f.content_type()).to_lowercase(),
                    f.file_path().to_string(),
                    format!("{:?}", f.file_format()).to_lowercase(),
                    m.partition_spec_id,
                    partition_text(f.partition()),
                    f.record_count() as i64,
                    f.file_size_in_bytes() as i64,
                ));
            }
        }
    }
    rows.sort_by(|a, b| a.1.cmp(&b.1));
    let schema = Arc::new(Schema::new(vec![
        Field::new("content", DataType::Utf8, false),
        Field::new("file_path", DataType::Utf8, false),
        Field::new("file_format", DataType::Utf8, false),
        Field::new("spec_id", DataType::Int32, false),
        Field::new("partition", DataType::Utf8, false),
        Field::new("record_count", DataType::Int64, false),
        Field::new("file_size_in_bytes", DataType::Int64, false),
    ]));
    let text = |f: fn(&Row) -> &str| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(rows.iter().map(f)))
    };
    let columns: Vec<ArrayRef> = vec![
        text(|r| &r.0),
        text(|r| &r.1),
        text(|r| &r.2),
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.3))),
        text(|r| &r.4),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.5))),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.6))),
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns).map_err(QueryError::failed)?;
    MemTable::try_new(schema, vec![vec![batch]]).map_err(QueryError::failed)
}

/// A file's partition tuple as text: `[19700, 3]`, `null` for a null value, `[]` unpartitioned.
fn partition_text(partition: &iceberg::spec::Struct) -> String {
    let values: Vec<String> = partition
        .iter()
        .map(|v| match v {
            Some(iceberg::spec::Literal::Primitive(p)) => {
                use iceberg::spec::PrimitiveLiteral as P;
                match p {
                    P::Boolean(b) => b.to_string(),
                    P::Int(n) => n.to_string(),
                    P::Long(n) => n.to_string(),
                    P::Float(f) => f.to_string(),
                    P::Double(f) => f.to_string(),
                    P::String(s) => format!("{s:?}"),
                    P::Int128(n) => n.to_string(),
                    P::UInt128(n) => n.to_string(),
                    other => format!("{other:?}"),
                }
            }
            Some(other) => format!("{other:?}"),
            None => "null".to_string(),
        })
        .collect();
    format!("[{}]", values.join(", "))
}

/// Loads what the time-travel functions in `sql` read and registers the functions in `ctx`.
/// Statements that do not parse are left for DataFusion to report.
pub(crate) async fn resolve(
    ctx: &SessionContext,
    catalog: &dyn Catalog,
    sql: &str,
) -> Result<(), QueryError> {
    let mut calls = Calls::default();
    if let Ok(statements) = DFParser::parse_sql(sql) {
        for s in &statements {
            collect(s, &mut calls);
        }
    }
    let mut resolved: HashMap<Call, Arc<dyn TableProvider>> = HashMap::new();
    for call in calls.0 {
        if let std::collections::hash_map::Entry::Vacant(slot) = resolved.entry(call) {
            let provider = provide(catalog, slot.key()).await?;
            slot.insert(provider);
        }
    }
    let resolved = Arc::new(resolved);
    for function in [AS_OF, SNAPSHOTS, FILES] {
        ctx.register_udtf(
            function,
            Arc::new(Resolved {
                function,
                resolved: resolved.clone(),
            }),
        );
    }
    Ok(())
}

/// A time-travel function answering from the tables [`resolve`] loaded.
#[derive(Debug)]
struct Resolved {
    function: &'static str,
    resolved: Arc<HashMap<Call, Arc<dyn TableProvider>>>,
}

impl TableFunctionImpl for Resolved {
    fn call(&self, args: &[Expr]) -> DFResult<Arc<dyn TableProvider>> {
        let Some(args) = args.iter().map(Arg::from_expr).collect::<Option<Vec<_>>>() else {
            return plan_err!("{}", usage(self.function));
        };
        let call = Call {
            function: self.function,
            args,
        };
        match self.resolved.get(&call) {
            Some(provider) => Ok(provider.clone()),
            None => plan_err!("{}", usage(self.function)),
        }
    }
}
