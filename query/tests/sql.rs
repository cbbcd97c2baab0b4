//! The SQL behaviour of `inlet_query::run`, as cases in `tests/sql/*.slt` over two tables
//! written the way table topics are: `shop.orders` (partitioned by region, two snapshots) and
//! `shop.customers`.
//!
//! Case file format, blocks separated by blank lines, `#` starts a comment line:
//! - `query <label>`, the SQL, `----`, then the expected result as CSV with its header;
//! - `explain <label>`, the SQL (run as `EXPLAIN <sql>`), `----`, then text every line of
//!   which must appear in the plan;
//! - `error <status> <label>`, the SQL, `----`, then text the error message must contain.
//!
//! `${name}` in SQL is replaced by the fixture's values: `orders_snapshot_1`/`_2` (snapshot
//! ids) and `orders_time_1`/`_2` (their commit times, RFC 3339), `before_orders`.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, Float64Array, Int64Array, StringArray, TimestampMicrosecondArray,
};
use iceberg::spec::{NestedField, PrimitiveType, Schema, Transform, Type, UnboundPartitionSpec};
use inlet_query::{QueryConfig, QueryError};

use common::Fixture;

fn orders_schema() -> Schema {
    Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::required(2, "customer_id", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::required(3, "region", Type::Primitive(PrimitiveType::String)).into(),
            NestedField::optional(4, "amount", Type::Primitive(PrimitiveType::Double)).into(),
            NestedField::required(5, "ts", Type::Primitive(PrimitiveType::Timestamptz)).into(),
        ])
        .build()
        .expect("schema")
}

fn orders(rows: &[(i64, i64, &str, Option<f64>)]) -> Vec<ArrayRef> {
    // 2026-11-01T00:00:00Z plus `id` hours.
    let base = 1_793_491_200_000_000i64;
    vec![
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.2))),
        Arc::new(Float64Array::from_iter(rows.iter().map(|r| r.3))),
        Arc::new(
            TimestampMicrosecondArray::from_iter_values(
                rows.iter().map(|r| base + r.0 * 3_600_000_000),
            )
            .with_timezone("+00:00"),
        ),
    ]
}

fn rfc3339(ms: i64) -> String {
    let nanos = ms * 1_000_000;
    let ts =
        datafusion::arrow::array::TimestampNanosecondArray::from(vec![nanos]).with_timezone("UTC");
    datafusion::arrow::util::display::array_value_to_string(&ts, 0).expect("fmt")
}

async fn fixture() -> (Fixture, BTreeMap<String, String>) {
    let f = Fixture::new().await;
    let spec = UnboundPartitionSpec::builder()
        .add_partition_field(3, "region", Transform::Identity)
        .expect("spec")
        .build();
    let t = f
        .create("shop", "orders", orders_schema(), Some(spec))
        .await;
    let t = f
        .append(
            &t,
            orders(&[
                (1, 1, "eu", Some(10.0)),
                (2, 2, "us", Some(20.0)),
                (3, 3, "ap", Some(30.0)),
                (4, 1, "eu", Some(40.0)),
                (5, 2, "us", Some(50.0)),
                (6, 3, "ap", Some(60.0)),
            ]),
            32 << 20,
            "first",
        )
        .await;
    let first = t.metadata().current_snapshot().expect("snapshot 1").clone();
    // The second commit must be later than the first on the millisecond clock, so that a
    // time between the two names the first.
    while inlet_now_ms() <= first.timestamp_ms() {
        tokio::task::yield_now().await;
    }
    let t = f
        .append(
            &t,
            orders(&[
                (7, 1, "eu", Some(70.0)),
                (8, 1, "eu", Some(80.0)),
                (9, 2, "us", None),
            ]),
            32 << 20,
            "second",
        )
        .await;
    let second = t.metadata().current_snapshot().expect("snapshot 2").clone();

    let customers_schema = Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::required(2, "name", Type::Primitive(PrimitiveType::String)).into(),
        ])
        .build()
        .expect("schema");
    let c = f.create("shop", "customers", customers_schema, None).await;
    f.append(
        &c,
        vec![
            Arc::new(Int64Array::from(vec![1, 2, 3, 4])),
            Arc::new(StringArray::from(vec!["ada", "bob", "cy", "dee"])),
        ],
        32 << 20,
        "customers",
    )
    .await;

    let vars = BTreeMap::from([
        (
            "orders_snapshot_1".to_string(),
            first.snapshot_id().to_string(),
        ),
        (
            "orders_snapshot_2".to_string(),
            second.snapshot_id().to_string(),
        ),
        ("orders_time_1".to_string(), rfc3339(first.timestamp_ms())),
        ("orders_time_2".to_string(), rfc3339(second.timestamp_ms())),
        (
            "before_orders".to_string(),
            rfc3339(first.timestamp_ms() - 60_000),
        ),
    ]);
    (f, vars)
}

/// The wall clock Iceberg's commit stamps snapshots with.
#[allow(clippy::disallowed_methods)]
fn inlet_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

#[derive(Debug)]
enum Expect {
    Rows(Vec<String>),
    Plan(Vec<String>),
    Error(u16, String),
}

#[derive(Debug)]
struct Case {
    label: String,
    sql: String,
    expect: Expect,
}

fn parse_cases(text: &str) -> Vec<Case> {
    let mut cases = Vec::new();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect();
    for block in lines.split(|l| l.trim().is_empty()) {
        if block.is_empty() {
            continue;
        }
        let head: Vec<&str> = block[0].split_whitespace().collect();
        let sep = block
            .iter()
            .position(|l| l.trim() == "----")
            .unwrap_or_else(|| panic!("no ---- in block {:?}", block[0]));
        let sql = block[1..sep].join("\n");
        let after: Vec<String> = block[sep + 1..].iter().map(|l| l.to_string()).collect();
        let (expect, label) = match head[0] {
            "query" => (Expect::Rows(after), head[1..].join(" ")),
            "explain" => (Expect::Plan(after), head[1..].join(" ")),
            "error" => (
                Expect::Error(head[1].parse().expect("status"), after.join("\n")),
                head[2..].join(" "),
            ),
            other => panic!("unknown block kind {other:?}"),
        };
        cases.push(Case { label, sql, expect });
    }
    cases
}

fn substitute(sql: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = sql.to_string();
    for (k, v) in vars {
        out = out.replace(&format!("${{{k}}}"), v);
    }
    assert!(!out.contains("${"), "unknown variable in {sql}");
    out
}

async fn run_csv(f: &Fixture, sql: &str) -> Result<String, QueryError> {
    run_as(f, sql, "csv").await
}

async fn run_as(f: &Fixture, sql: &str, format: &str) -> Result<String, QueryError> {
    let out = inlet_query::run(f.catalog.clone(), sql, &QueryConfig::default()).await?;
    let schema = out.schema.clone();
    let batches = out.collect().await?;
    let bytes = inlet_query::format(&schema, &batches, format)?;
    Ok(String::from_utf8(bytes).expect("utf-8"))
}

async fn run_file(name: &str) {
    let (f, vars) = fixture().await;
    run_cases(&f, &vars, name).await;
}

async fn run_cases(f: &Fixture, vars: &BTreeMap<String, String>, name: &str) {
    let path = format!("{}/tests/sql/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("case file");
    let cases = parse_cases(&text);
    assert!(!cases.is_empty(), "{path} has no cases");
    let mut failures = Vec::new();
    for case in &cases {
        let sql = substitute(&case.sql, vars);
        match &case.expect {
            Expect::Rows(expected) => match run_csv(f, &sql).await {
                Ok(csv) => {
                    let got: Vec<&str> = csv.lines().collect();
                    if got != *expected {
                        failures.push(format!(
                            "{}: expected\n{}\ngot\n{}",
                            case.label,
                            expected.join("\n"),
                            csv
                        ));
                    }
                }
                Err(e) => failures.push(format!("{}: failed: {e}", case.label)),
            },
            Expect::Plan(lines) => match run_as(f, &format!("EXPLAIN {sql}"), "table").await {
                Ok(plan) => {
                    for line in lines {
                        let line = substitute(line, vars);
                        if !plan.contains(&line) {
                            failures
                                .push(format!("{}: the plan lacks {line:?}:\n{plan}", case.label));
                        }
                    }
                }
                Err(e) => failures.push(format!("{}: failed: {e}", case.label)),
            },
            Expect::Error(status, text) => match run_csv(f, &sql).await {
                Ok(csv) => failures.push(format!(
                    "{}: expected error {status}, got\n{csv}",
                    case.label
                )),
                Err(e) => {
                    if e.status() != *status || !e.to_string().contains(text.as_str()) {
                        failures.push(format!(
                            "{}: expected {status} containing {text:?}, got {} {e}",
                            case.label,
                            e.status()
                        ));
                    }
                }
            },
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries() {
    run_file("queries.slt").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_travel() {
    run_file("time_travel.slt").await;
}

/// Tables whose files take different read paths: `evo.added` (a column added after its first
/// file), `evo.reused` (a column dropped, then added again under its old name) and
/// `evo.upserts` (rows deleted by a position delete file, then a file appended).
async fn scan_fixture() -> Fixture {
    let f = Fixture::new().await;
    let long =
        |id, name: &str| NestedField::required(id, name, Type::Primitive(PrimitiveType::Long));
    let string =
        |id, name: &str| NestedField::optional(id, name, Type::Primitive(PrimitiveType::String));
    let schema = |fields: Vec<NestedField>| {
        Schema::builder()
            .with_fields(fields.into_iter().map(Into::into).collect::<Vec<_>>())
            .build()
            .expect("schema")
    };
    let ids = |v: &[i64]| Arc::new(Int64Array::from(v.to_vec())) as ArrayRef;
    let strings = |v: &[&str]| Arc::new(StringArray::from(v.to_vec())) as ArrayRef;

    let t = f
        .create(
            "evo",
            "added",
            schema(vec![long(1, "id"), string(2, "name")]),
            None,
        )
        .await;
    let t = f
        .append(
            &t,
            vec![ids(&[1, 2]), strings(&["a", "b"])],
            32 << 20,
            "old",
        )
        .await;
    let t = f
        .add_column(&t, "score", Type::Primitive(PrimitiveType::Double))
        .await;
    f.append(
        &t,
        vec![
            ids(&[3]),
            strings(&["c"]),
            Arc::new(Float64Array::from(vec![3.5])),
        ],
        32 << 20,
        "new",
    )
    .await;

    let t = f
        .create(
            "evo",
            "reused",
            schema(vec![long(1, "id"), string(2, "tag")]),
            None,
        )
        .await;
    let t = f
        .append(
            &t,
            vec![ids(&[1, 2]), strings(&["old", "old"])],
            32 << 20,
            "old",
        )
        .await;
    let t = f.drop_column(&t, "tag").await;
    let t = f
        .add_column(&t, "tag", Type::Primitive(PrimitiveType::String))
        .await;
    f.append(&t, vec![ids(&[3]), strings(&["new"])], 32 << 20, "new")
        .await;

    let t = f
        .create(
            "evo",
            "upserts",
            schema(vec![long(1, "id"), string(2, "v")]),
            None,
        )
        .await;
    let files = f
        .write_files(
            &t,
            vec![ids(&[1, 2, 3, 4]), strings(&["a", "b", "c", "d"])],
            32 << 20,
            "first",
        )
        .await;
    let path = files[0].file_path().to_string();
    let t = f.commit_files(&t, files).await;
    // Rows 2 and 4 (positions 1 and 3) deleted.
    let t = f
        .delete_positions(&t, vec![(path.clone(), 1), (path, 3)])
        .await;
    f.append(&t, vec![ids(&[5]), strings(&["e"])], 32 << 20, "later")
        .await;
    f
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scans() {
    let f = scan_fixture().await;
    run_cases(&f, &BTreeMap::new(), "scans.slt").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals() {
    run_file("refusals.slt").await;
}

/// The streamed encoders give one well-formed document however the result is split into
/// batches: JSON parses to every row, the Arrow IPC stream reads back to the same rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_formats_are_whole_documents() {
    let (f, _) = fixture().await;
    let sql = "SELECT id, region, amount FROM shop.orders ORDER BY id";
    let out = inlet_query::run(f.catalog.clone(), sql, &QueryConfig::default())
        .await
        .expect("run");
    let schema = out.schema.clone();
    let batches = out.collect().await.expect("rows");
    // One row per batch, the most chunks the encoder can be asked for.
    let single: Vec<_> = batches
        .iter()
        .flat_map(|b| (0..b.num_rows()).map(move |i| b.slice(i, 1)))
        .collect();
    assert_eq!(single.len(), 9);
    let json = inlet_query::format(&schema, &single, "json").expect("json");
    let rows: serde_json::Value = serde_json::from_slice(&json).expect("valid JSON");
    let ids: Vec<i64> = rows
        .as_array()
        .expect("array")
        .iter()
        .map(|r| r["id"].as_i64().expect("id"))
        .collect();
    assert_eq!(ids, (1..=9).collect::<Vec<_>>());
    assert_eq!(rows[8]["amount"], serde_json::Value::Null);

    let arrow = inlet_query::format(&schema, &single, "arrow").expect("arrow");
    let reader =
        datafusion::arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(arrow), None)
            .expect("arrow stream");
    let read: usize = reader.map(|b| b.expect("batch").num_rows()).sum();
    assert_eq!(read, 9);

    let empty = inlet_query::format(&schema, &[], "json").expect("json");
    assert_eq!(empty, b"[]");
    let csv = inlet_query::format(&schema, &[], "csv").expect("csv");
    assert_eq!(csv, b"id,region,amount\n");
}

/// A query that outlives its timeout fails with `Timeout`, whether in planning or streaming.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_query_times_out() {
    let (f, _) = fixture().await;
    let config = QueryConfig {
        timeout: std::time::Duration::from_millis(200),
        ..QueryConfig::default()
    };
    // A cross join large enough to run for minutes.
    let sql = "SELECT count(*) FROM generate_series(1, 100000000) a, generate_series(1, 1000) b \
               WHERE a.value + b.value = 7";
    let started = std::time::Instant::now();
    let result = match inlet_query::run(f.catalog.clone(), sql, &config).await {
        Ok(out) => out.collect().await.map(|_| ()),
        Err(e) => Err(e),
    };
    assert!(matches!(result, Err(QueryError::Timeout(_))), "{result:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

/// A query needing more memory than its limit fails with a clear error instead of growing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_limit_is_enforced() {
    let (f, _) = fixture().await;
    let config = QueryConfig {
        memory_limit_bytes: 1 << 20,
        ..QueryConfig::default()
    };
    let sql = "SELECT value % 1000003 AS k, count(*) FROM generate_series(1, 5000000) \
               GROUP BY k ORDER BY k";
    let result = match inlet_query::run(f.catalog.clone(), sql, &config).await {
        Ok(out) => out.collect().await.map(|_| ()),
        Err(e) => Err(e),
    };
    match result {
        Err(QueryError::ResourcesExhausted(msg)) => assert!(msg.contains("memory"), "{msg}"),
        other => panic!("expected ResourcesExhausted, got {other:?}"),
    }
}
