//! Embedded DataFusion SQL over the Iceberg catalog (DESIGN.md §6): what `POST /v1/query` and
//! `inlet query` run. Tables are `namespace.table`, read through `iceberg-datafusion` (Iceberg
//! scan planning with projection and filter pushdown).
//!
//! Invariants:
//! - Read-only: DataFusion's own statement checks refuse DDL (`CREATE`, `DROP`, `CREATE
//!   EXTERNAL TABLE`), DML (`INSERT`, `COPY TO`) and `SET`, before anything is planned; no
//!   file-reading table functions are registered. A refused or malformed statement is
//!   [`QueryError::Refused`] / [`QueryError::Invalid`] with the parser's or planner's message.
//! - Each query sees the catalog as it is when it starts (a fresh catalog provider per query),
//!   and runs within a memory limit and a timeout from [`QueryConfig`].
//!
//! Not built yet: streaming results to the client (they are collected, up to
//! `max_result_bytes`), time travel syntax, a benchmark against DuckDB.

use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{SQLOptions, SessionConfig, SessionContext};
use iceberg_datafusion::IcebergCatalogProvider;

pub use datafusion::arrow;

/// Limits of one query.
#[derive(Debug, Clone)]
pub struct QueryConfig {
    /// Execution memory (sorts, joins, aggregates) before the query fails.
    pub memory_limit_bytes: usize,
    /// Wall time before the query is cancelled.
    pub timeout: Duration,
    /// Largest result a query may return.
    pub max_result_bytes: usize,
}

impl Default for QueryConfig {
    fn default() -> Self {
        QueryConfig {
            memory_limit_bytes: 512 << 20,
            timeout: Duration::from_secs(300),
            max_result_bytes: 256 << 20,
        }
    }
}

/// Why a query did not run.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// A statement that is not a query (DDL, DML, SET, ...).
    #[error("{0}")]
    Refused(String),
    /// Bad SQL, an unknown table or column, a type error.
    #[error("{0}")]
    Invalid(String),
    #[error("the query ran longer than {0:?}")]
    Timeout(Duration),
    #[error("the result is larger than {0} bytes; add a LIMIT or aggregate")]
    TooLarge(usize),
    /// The catalog or storage failed.
    #[error("{0}")]
    Failed(String),
}

impl QueryError {
    /// The HTTP status this error answers with.
    pub fn status(&self) -> u16 {
        match self {
            QueryError::Refused(_) => 403,
            QueryError::Invalid(_) => 400,
            QueryError::Timeout(_) => 408,
            QueryError::TooLarge(_) => 413,
            QueryError::Failed(_) => 500,
        }
    }
}

fn classify(e: datafusion::error::DataFusionError) -> QueryError {
    use datafusion::error::DataFusionError as E;
    let msg = e.to_string();
    match e {
        E::SQL(..) | E::Plan(_) | E::SchemaError(..) | E::NotImplemented(_) => {
            if msg.contains("not supported")
                && (msg.contains("DDL") || msg.contains("DML") || msg.contains("Statement"))
            {
                QueryError::Refused(msg)
            } else {
                QueryError::Invalid(msg)
            }
        }
        _ => QueryError::Failed(msg),
    }
}

/// Runs `sql` over `catalog` and returns its result.
pub async fn run(
    catalog: Arc<dyn iceberg::Catalog>,
    sql: &str,
    config: &QueryConfig,
) -> Result<(SchemaRef, Vec<RecordBatch>), QueryError> {
    let provider = IcebergCatalogProvider::try_new(catalog)
        .await
        .map_err(|e| QueryError::Failed(e.to_string()))?;
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_limit(config.memory_limit_bytes, 1.0)
        .build_arc()
        .map_err(|e| QueryError::Failed(e.to_string()))?;
    let session = SessionConfig::new()
        .with_default_catalog_and_schema("inlet", "default")
        .with_information_schema(true);
    let ctx = SessionContext::new_with_config_rt(session, runtime);
    ctx.register_catalog("inlet", Arc::new(provider));
    let options = SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false);
    let work = async {
        let df = ctx.sql_with_options(sql, options).await.map_err(classify)?;
        let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
        let batches = df.collect().await.map_err(classify)?;
        let bytes: usize = batches.iter().map(|b| b.get_array_memory_size()).sum();
        if bytes > config.max_result_bytes {
            return Err(QueryError::TooLarge(config.max_result_bytes));
        }
        Ok((schema, batches))
    };
    tokio::time::timeout(config.timeout, work)
        .await
        .map_err(|_| QueryError::Timeout(config.timeout))?
}

/// A result as text in one of `inlet query`'s formats: `table` (boxed), `csv` or `json`.
pub fn format(
    schema: &SchemaRef,
    batches: &[RecordBatch],
    format: &str,
) -> Result<Vec<u8>, QueryError> {
    let err = |e: arrow::error::ArrowError| QueryError::Failed(e.to_string());
    match format {
        "table" => Ok(arrow::util::pretty::pretty_format_batches(batches)
            .map_err(err)?
            .to_string()
            .into_bytes()),
        "csv" => {
            let mut out = Vec::new();
            {
                let mut w = arrow::csv::WriterBuilder::new()
                    .with_header(true)
                    .build(&mut out);
                for b in batches {
                    w.write(b).map_err(err)?;
                }
            }
            if batches.is_empty() {
                let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
                out.extend_from_slice(names.join(",").as_bytes());
                out.push(b'\n');
            }
            Ok(out)
        }
        "json" => {
            let mut w = arrow::json::ArrayWriter::new(Vec::new());
            for b in batches {
                w.write(b).map_err(err)?;
            }
            w.finish().map_err(err)?;
            let out = w.into_inner();
            Ok(if out.is_empty() { b"[]".to_vec() } else { out })
        }
        "arrow" => {
            let mut out = Vec::new();
            {
                let mut w =
                    arrow::ipc::writer::StreamWriter::try_new(&mut out, schema).map_err(err)?;
                for b in batches {
                    w.write(b).map_err(err)?;
                }
                w.finish().map_err(err)?;
            }
            Ok(out)
        }
        other => Err(QueryError::Invalid(format!(
            "unknown format {other:?} (table, csv, json or arrow)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::SessionContext;

    #[tokio::test]
    async fn datafusion_runs_a_query() {
        let ctx = SessionContext::new();
        let batches = ctx
            .sql("SELECT 40 + 2 AS answer")
            .await
            .expect("plan")
            .collect()
            .await
            .expect("run");
        let answer = batches[0]
            .column(0)
            .as_any()
            .downcast_ref::<datafusion::arrow::array::Int64Array>()
            .expect("int64")
            .value(0);
        assert_eq!(answer, 42);
    }
}
