//! Embedded DataFusion SQL over the Iceberg catalog (docs/architecture.md, "Catalog and SQL"): what `POST /v1/query` and
//! `inlet query` run. Tables are `namespace.table` ([`provider`]: Iceberg scan planning with
//! projection and filter pushdown, files read in parallel); `as_of(...)` and `snapshots(...)`
//! travel in time ([`time_travel`]).
//!
//! Invariants:
//! - Read-only: DataFusion's own statement checks refuse DDL (`CREATE`, `DROP`, `CREATE
//!   EXTERNAL TABLE`), DML (`INSERT`, `COPY TO`) and `SET`, before anything is planned; no
//!   file-reading table functions are registered. A refused or malformed statement is
//!   [`QueryError::Refused`] / [`QueryError::Invalid`] with the parser's or planner's message.
//! - Each query sees the catalog as it is when it starts (a fresh catalog provider per query),
//!   and runs within a memory limit and a timeout from [`QueryConfig`].
//! - Results stream: [`run`] answers once the query is planned, and batches flow to the caller
//!   as they are computed ([`Encoder`] turns them into JSON, CSV or Arrow IPC chunks); the
//!   timeout covers the whole stream.

mod native;
mod provider;
mod time_travel;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::error::DataFusionError;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::prelude::{SQLOptions, SessionConfig, SessionContext};
use futures::{Stream, StreamExt};

pub use datafusion::arrow;

/// Limits of one query.
#[derive(Debug, Clone)]
pub struct QueryConfig {
    /// Execution memory (sorts, joins, aggregates) before the query fails.
    pub memory_limit_bytes: usize,
    /// Wall time, planning and streaming the result included, before the query is cancelled.
    pub timeout: Duration,
}

impl Default for QueryConfig {
    fn default() -> Self {
        QueryConfig {
            memory_limit_bytes: 512 << 20,
            timeout: Duration::from_secs(300),
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
    /// The query needed more memory than its limit.
    #[error("{0}")]
    ResourcesExhausted(String),
    /// The catalog, storage or the engine failed: the error it failed with, kept typed.
    #[error("{0}")]
    Failed(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl QueryError {
    /// [`QueryError::Failed`] with `e` as its source.
    pub fn failed(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        QueryError::Failed(e.into())
    }

    /// What the caller may do: a refused or invalid statement, or one over its memory limit,
    /// is the client's to change; a timeout or a failure may pass (a catalog or store that
    /// was unavailable) when the source says so, and is otherwise permanent.
    pub fn kind(&self) -> inlet_common::ErrorKind {
        use inlet_common::ErrorKind as Kind;
        match self {
            QueryError::Refused(_) | QueryError::Invalid(_) | QueryError::ResourcesExhausted(_) => {
                Kind::BadInput
            }
            QueryError::Timeout(_) => Kind::Retryable,
            QueryError::Failed(source) => {
                let mut at: Option<&(dyn std::error::Error + 'static)> = Some(source.as_ref());
                while let Some(e) = at {
                    if let Some(e) = e.downcast_ref::<iceberg::Error>() {
                        return if e.retryable() {
                            Kind::Retryable
                        } else {
                            Kind::Permanent
                        };
                    }
                    at = e.source();
                }
                Kind::Permanent
            }
        }
    }
}

impl QueryError {
    /// The HTTP status this error answers with.
    pub fn status(&self) -> u16 {
        match self {
            QueryError::Refused(_) => 403,
            QueryError::Invalid(_) => 400,
            QueryError::Timeout(_) => 408,
            QueryError::ResourcesExhausted(_) => 413,
            QueryError::Failed(_) => 500,
        }
    }
}

fn classify(e: DataFusionError) -> QueryError {
    use datafusion::error::DataFusionError as E;
    let msg = e.to_string();
    match e.find_root() {
        E::SQL(..) | E::Plan(_) | E::SchemaError(..) | E::NotImplemented(_) => {
            if msg.contains("not supported")
                && (msg.contains("DDL") || msg.contains("DML") || msg.contains("Statement"))
            {
                QueryError::Refused(msg)
            } else {
                QueryError::Invalid(msg)
            }
        }
        E::ResourcesExhausted(_) => QueryError::ResourcesExhausted(msg),
        _ => QueryError::failed(e),
    }
}

/// A planned query: its result's schema and the stream of its batches.
pub struct QueryStream {
    pub schema: SchemaRef,
    stream: SendableRecordBatchStream,
    /// Whether batches need their `Utf8View` columns cast to `schema`'s `Utf8`.
    plain: bool,
    deadline: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
    done: bool,
}

impl Stream for QueryStream {
    type Item = Result<RecordBatch, QueryError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        if self.deadline.as_mut().poll(cx).is_ready() {
            self.done = true;
            return Poll::Ready(Some(Err(QueryError::Timeout(self.timeout))));
        }
        match self.stream.poll_next_unpin(cx) {
            Poll::Ready(Some(Err(e))) => {
                self.done = true;
                Poll::Ready(Some(Err(classify(e))))
            }
            Poll::Ready(None) => {
                self.done = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Ok(batch))) if self.plain => {
                let batch = to_schema(batch, &self.schema);
                if batch.is_err() {
                    self.done = true;
                }
                Poll::Ready(Some(batch))
            }
            other => other.map(|o| o.map(|r| r.map_err(classify))),
        }
    }
}

impl QueryStream {
    /// Every batch of the result.
    pub async fn collect(mut self) -> Result<Vec<RecordBatch>, QueryError> {
        let mut batches = Vec::new();
        while let Some(batch) = self.next().await {
            batches.push(batch?);
        }
        Ok(batches)
    }
}

/// `schema` with `Utf8` for its top-level `Utf8View` columns, if it has any. Tables read
/// strings as `Utf8View` (see `provider`), results keep the plain `Utf8` that every client
/// of the Arrow format reads.
fn plain_strings(schema: &SchemaRef) -> Option<SchemaRef> {
    use arrow::datatypes::{DataType, Field, Schema};
    if !schema
        .fields()
        .iter()
        .any(|f| f.data_type() == &DataType::Utf8View)
    {
        return None;
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Utf8View => f.as_ref().clone().with_data_type(DataType::Utf8),
            _ => f.as_ref().clone(),
        })
        .collect();
    Some(Arc::new(Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    )))
}

/// `batch` cast to `schema` (column by column, where the types differ).
fn to_schema(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, QueryError> {
    let err = |e: arrow::error::ArrowError| QueryError::failed(e);
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(c, f)| {
            if c.data_type() == f.data_type() {
                Ok(c.clone())
            } else {
                arrow::compute::cast(c, f.data_type()).map_err(err)
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(schema.clone(), columns, &options).map_err(err)
}

/// Plans `sql` over `catalog` and returns its result as a stream.
pub async fn run(
    catalog: Arc<dyn iceberg::Catalog>,
    sql: &str,
    config: &QueryConfig,
) -> Result<QueryStream, QueryError> {
    let deadline = tokio::time::Instant::now() + config.timeout;
    let plan = async {
        let inlet = provider::InletCatalog::list(catalog.clone())
            .await
            .map_err(QueryError::failed)?;
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_limit(config.memory_limit_bytes, 1.0)
            .build_arc()
            .map_err(QueryError::failed)?;
        let session = SessionConfig::new()
            .with_default_catalog_and_schema("inlet", "default")
            .with_information_schema(true);
        let ctx = SessionContext::new_with_config_rt(session, runtime);
        ctx.register_catalog("inlet", Arc::new(inlet));
        time_travel::resolve(&ctx, catalog.as_ref(), sql).await?;
        let options = SQLOptions::new()
            .with_allow_ddl(false)
            .with_allow_dml(false)
            .with_allow_statements(false);
        let df = ctx.sql_with_options(sql, options).await.map_err(classify)?;
        let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
        let stream = df.execute_stream().await.map_err(classify)?;
        Ok::<_, QueryError>((schema, stream))
    };
    let (schema, stream) = tokio::time::timeout_at(deadline, plan)
        .await
        .map_err(|_| QueryError::Timeout(config.timeout))??;
    let (schema, plain) = match plain_strings(&schema) {
        Some(plain) => (plain, true),
        None => (schema, false),
    };
    Ok(QueryStream {
        schema,
        stream,
        plain,
        deadline: Box::pin(tokio::time::sleep_until(deadline)),
        timeout: config.timeout,
        done: false,
    })
}

/// Turns a result's batches into the bytes of one of the streamed formats, chunk by chunk:
/// `json` (one array of row objects), `csv` (with a header row) or `arrow` (an Arrow IPC
/// stream).
pub struct Encoder {
    format: Format,
    rows_written: bool,
}

enum Format {
    Json,
    Csv,
    Arrow(Box<arrow::ipc::writer::StreamWriter<Vec<u8>>>),
}

impl Encoder {
    /// An encoder for `format`, and the bytes that open the output.
    pub fn new(schema: &SchemaRef, format: &str) -> Result<(Encoder, Vec<u8>), QueryError> {
        let err = |e: arrow::error::ArrowError| QueryError::failed(e);
        let (format, head) = match format {
            "json" => (Format::Json, b"[".to_vec()),
            "csv" => {
                let names: Vec<String> = schema
                    .fields()
                    .iter()
                    .map(|f| csv_field(f.name()))
                    .collect();
                let mut head = names.join(",").into_bytes();
                head.push(b'\n');
                (Format::Csv, head)
            }
            "arrow" => {
                let mut w =
                    arrow::ipc::writer::StreamWriter::try_new(Vec::new(), schema).map_err(err)?;
                let head = std::mem::take(w.get_mut());
                (Format::Arrow(Box::new(w)), head)
            }
            other => {
                return Err(QueryError::Invalid(format!(
                    "unknown format {other:?} (json, csv or arrow)"
                )))
            }
        };
        Ok((
            Encoder {
                format,
                rows_written: false,
            },
            head,
        ))
    }

    /// The bytes of one batch.
    pub fn batch(&mut self, batch: &RecordBatch) -> Result<Vec<u8>, QueryError> {
        let err = |e: arrow::error::ArrowError| QueryError::failed(e);
        match &mut self.format {
            Format::Json => {
                let mut w = arrow::json::LineDelimitedWriter::new(Vec::new());
                w.write(batch).map_err(err)?;
                w.finish().map_err(err)?;
                let lines = w.into_inner();
                let mut out = Vec::with_capacity(lines.len() + 1);
                // Row objects never hold a raw newline (JSON escapes it), so lines are rows.
                for row in lines.split(|b| *b == b'\n').filter(|r| !r.is_empty()) {
                    if self.rows_written {
                        out.push(b',');
                    }
                    out.extend_from_slice(row);
                    self.rows_written = true;
                }
                Ok(out)
            }
            Format::Csv => {
                let mut out = Vec::new();
                csv_writer(&mut out, false).write(batch).map_err(err)?;
                Ok(out)
            }
            Format::Arrow(w) => {
                w.write(batch).map_err(err)?;
                Ok(std::mem::take(w.get_mut()))
            }
        }
    }

    /// The bytes that close the output.
    pub fn finish(&mut self) -> Result<Vec<u8>, QueryError> {
        match &mut self.format {
            Format::Json => Ok(b"]".to_vec()),
            Format::Csv => Ok(Vec::new()),
            Format::Arrow(w) => {
                w.finish().map_err(QueryError::failed)?;
                Ok(std::mem::take(w.get_mut()))
            }
        }
    }
}

fn csv_writer<W: std::io::Write>(out: W, header: bool) -> arrow::csv::Writer<W> {
    arrow::csv::WriterBuilder::new()
        .with_header(header)
        .build(out)
}

/// A column name as a CSV field: quoted when it holds a separator, a quote or a line break.
fn csv_field(name: &str) -> String {
    if name.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", name.replace('"', "\"\""))
    } else {
        name.to_string()
    }
}

/// A result as text in one of `inlet query`'s formats: `table` (boxed), `csv` or `json`.
pub fn format(
    schema: &SchemaRef,
    batches: &[RecordBatch],
    format: &str,
) -> Result<Vec<u8>, QueryError> {
    if format == "table" {
        return Ok(arrow::util::pretty::pretty_format_batches(batches)
            .map_err(QueryError::failed)?
            .to_string()
            .into_bytes());
    }
    let (mut encoder, mut out) = Encoder::new(schema, format)?;
    for b in batches {
        out.extend(encoder.batch(b)?);
    }
    out.extend(encoder.finish()?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::SessionContext;

    use super::QueryError;
    use inlet_common::ErrorKind;

    #[tokio::test]
    async fn errors_keep_their_kind_and_their_typed_source() {
        let ctx = SessionContext::new();
        let planned = match ctx.sql("SELECT nope FROM nowhere").await {
            Ok(_) => panic!("an unknown table plans"),
            Err(e) => super::classify(e),
        };
        assert_eq!(planned.kind(), ErrorKind::BadInput, "{planned}");
        let unavailable = iceberg::Error::new(iceberg::ErrorKind::Unexpected, "catalog down")
            .with_retryable(true);
        let failed = QueryError::failed(unavailable);
        assert_eq!(failed.kind(), ErrorKind::Retryable);
        let source = std::error::Error::source(&failed).expect("a source");
        assert!(
            source.downcast_ref::<iceberg::Error>().is_some(),
            "{source:?}"
        );
        let broken = QueryError::failed(iceberg::Error::new(
            iceberg::ErrorKind::DataInvalid,
            "bad manifest",
        ));
        assert_eq!(broken.kind(), ErrorKind::Permanent);
    }

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
