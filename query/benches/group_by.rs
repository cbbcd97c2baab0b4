//! `SELECT region, count(*), sum(amount) … GROUP BY region` over a 10-million-row table, with
//! Inlet's DataFusion and, in the same run, DuckDB 1.5.5 (its iceberg extension reading the
//! same metadata file). Prints each engine's median of 5 runs and their ratio.
//!
//! `cargo bench -p inlet-query --bench group_by`
//!
//! - `INLET_BENCH_ROWS` (default 10 000 000): rows in the table.
//! - `INLET_BENCH_PYTHON` (else `INLET_TEST_PYTHON`, else the venv `scripts/test-env.sh`
//!   makes): a Python with `duckdb==1.5.5` and `duckdb-extension-iceberg==1.5.5`; without one
//!   only Inlet's figure is printed.
//!
//! The table is shaped like a table topic's: an id, a customer, a region (16 values), an
//! amount, an event time and the `_kafka` struct, in zstd Parquet files of the table worker's
//! default 32 MiB, committed as one snapshot.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{
    ArrayRef, Float64Array, Int32Array, Int64Array, StringArray, StructArray,
    TimestampMicrosecondArray,
};
use datafusion::arrow::datatypes::{DataType, Fields};
use iceberg::arrow::schema_to_arrow_schema;
use iceberg::spec::{NestedField, PrimitiveType, Schema, StructType, Type};
use inlet_query::QueryConfig;

const SQL: &str = "SELECT region, count(*) AS n, sum(amount) AS total FROM bench.orders \
                   GROUP BY region ORDER BY region";
const RUNS: usize = 5;
const CHUNK: usize = 1 << 20;

fn schema() -> Schema {
    let p = |t| Type::Primitive(t);
    let kafka = StructType::new(vec![
        NestedField::required(7, "partition", p(PrimitiveType::Int)).into(),
        NestedField::required(8, "offset", p(PrimitiveType::Long)).into(),
        NestedField::required(9, "timestamp", p(PrimitiveType::Timestamptz)).into(),
    ]);
    Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "id", p(PrimitiveType::Long)).into(),
            NestedField::required(2, "customer_id", p(PrimitiveType::Long)).into(),
            NestedField::required(3, "region", p(PrimitiveType::String)).into(),
            NestedField::optional(4, "amount", p(PrimitiveType::Double)).into(),
            NestedField::required(5, "ts", p(PrimitiveType::Timestamptz)).into(),
            NestedField::required(6, "_kafka", Type::Struct(kafka)).into(),
        ])
        .build()
        .expect("schema")
}

/// Rows `start..start+len`: deterministic, so every run builds the same table.
fn columns(schema: &Schema, start: i64, len: usize) -> Vec<ArrayRef> {
    let arrow = schema_to_arrow_schema(schema).expect("arrow");
    let ids: Vec<i64> = (start..start + len as i64).collect();
    let ts = |id: &i64| 1_793_491_200_000_000 + id * 1_000;
    let kafka_fields: Fields = match arrow.field_with_name("_kafka").expect("_kafka").data_type() {
        DataType::Struct(f) => f.clone(),
        _ => unreachable!(),
    };
    let kafka = StructArray::new(
        kafka_fields,
        vec![
            Arc::new(Int32Array::from_iter_values(
                ids.iter().map(|i| (i % 3) as i32),
            )),
            Arc::new(Int64Array::from_iter_values(ids.iter().map(|i| i / 3))),
            Arc::new(
                TimestampMicrosecondArray::from_iter_values(ids.iter().map(ts))
                    .with_timezone("+00:00"),
            ),
        ],
        None,
    );
    vec![
        Arc::new(Int64Array::from(ids.clone())),
        Arc::new(Int64Array::from_iter_values(
            ids.iter().map(|i| (i * 7919) % 100_000),
        )),
        Arc::new(StringArray::from_iter_values(
            ids.iter().map(|i| format!("region-{:02}", (i * 31) % 16)),
        )),
        Arc::new(Float64Array::from_iter(ids.iter().map(|i| {
            if i % 97 == 0 {
                None
            } else {
                Some(((i * 37) % 10_000) as f64 / 100.0)
            }
        }))),
        Arc::new(
            TimestampMicrosecondArray::from_iter_values(ids.iter().map(ts)).with_timezone("+00:00"),
        ),
        Arc::new(kafka),
    ]
}

/// `region,n,total` lines as tuples.
fn parse_answer<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<(String, String, f64)> {
    lines
        .map(|l| {
            let v: Vec<&str> = l.split(',').collect();
            (
                v[0].to_string(),
                v[1].to_string(),
                v[2].parse().expect("sum"),
            )
        })
        .collect()
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn python() -> Option<std::path::PathBuf> {
    let p = ["INLET_BENCH_PYTHON", "INLET_TEST_PYTHON"]
        .iter()
        .find_map(std::env::var_os)
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| std::path::PathBuf::from(h).join(".cache/inlet/venv/bin/python"))
        })?;
    p.exists().then_some(p)
}

fn main() {
    let rows: usize = std::env::var("INLET_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let f = common::Fixture::new().await;
        let schema = schema();
        let mut table = f.create("bench", "orders", schema.clone(), None).await;
        let started = Instant::now();
        // One snapshot of all rows, written in chunks so memory stays small.
        let mut files = Vec::new();
        let mut start = 0;
        while start < rows {
            let len = CHUNK.min(rows - start);
            files.extend(
                f.write_files(
                    &table,
                    columns(&schema, start as i64, len),
                    32 << 20,
                    &format!("c{start}"),
                )
                .await,
            );
            start += len;
        }
        table = f.commit_files(&table, files).await;
        let meta = table.metadata();
        let summary = &meta
            .current_snapshot()
            .expect("snapshot")
            .summary()
            .additional_properties;
        println!(
            "table: {rows} rows, {} data files, {} bytes, written in {:.1} s",
            summary
                .get("total-data-files")
                .map(String::as_str)
                .unwrap_or("?"),
            summary
                .get("total-files-size")
                .map(String::as_str)
                .unwrap_or("?"),
            started.elapsed().as_secs_f64()
        );

        let mut times = Vec::new();
        let mut answer = String::new();
        for _ in 0..RUNS {
            let t = Instant::now();
            let out = inlet_query::run(f.catalog.clone(), SQL, &QueryConfig::default())
                .await
                .expect("run");
            let schema = out.schema.clone();
            let batches = out.collect().await.expect("collect");
            times.push(t.elapsed());
            answer = String::from_utf8(inlet_query::format(&schema, &batches, "csv").expect("csv"))
                .expect("utf-8");
        }
        let inlet = median(times);
        let groups = answer.lines().count() - 1;
        if std::env::var_os("INLET_BENCH_DIRECT").is_some() {
            // DataFusion's own Parquet reader over the same files, for comparison.
            let ctx = datafusion::prelude::SessionContext::new();
            let data = format!("{}/data/", meta.location().trim_start_matches("file://"));
            ctx.register_parquet("orders", &data, Default::default())
                .await
                .expect("register");
            let sql = SQL.replace("bench.orders", "orders");
            let mut direct = Vec::new();
            for _ in 0..RUNS {
                let t = Instant::now();
                ctx.sql(&sql)
                    .await
                    .expect("plan")
                    .collect()
                    .await
                    .expect("run");
                direct.push(t.elapsed());
            }
            println!(
                "datafusion parquet directly: median {:.3} s of {RUNS}",
                median(direct).as_secs_f64()
            );
        }
        println!(
            "inlet (DataFusion): median {:.3} s of {RUNS}, {:.1} M rows/s, {groups} groups",
            inlet.as_secs_f64(),
            rows as f64 / inlet.as_secs_f64() / 1e6
        );

        let Some(python) = python() else {
            println!("duckdb: skipped (no Python with duckdb; set INLET_BENCH_PYTHON)");
            return;
        };
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/duckdb_group_by.py");
        let out = std::process::Command::new(python)
            .arg(script)
            .arg(table.metadata_location().expect("metadata location"))
            .arg(RUNS.to_string())
            .output()
            .expect("run python");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "duckdb failed:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let duck: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("median_seconds "))
            .and_then(|v| v.trim().parse().ok())
            .expect("duckdb's median");
        let duck_answer: String = text
            .lines()
            .skip_while(|l| !l.starts_with("answer"))
            .skip(1)
            .collect::<Vec<_>>()
            .join("\n");
        // Both engines agree on the answer (counts exactly; sums to the cent).
        let ours = parse_answer(answer.lines().skip(1));
        let theirs = parse_answer(duck_answer.lines());
        assert_eq!(
            ours.len(),
            theirs.len(),
            "ours:\n{answer}\nduckdb:\n{duck_answer}"
        );
        for (a, b) in ours.iter().zip(&theirs) {
            assert_eq!(
                (&a.0, &a.1),
                (&b.0, &b.1),
                "ours:\n{answer}\nduckdb:\n{duck_answer}"
            );
            assert!(
                (a.2 - b.2).abs() < 0.01 * a.2.abs().max(1.0),
                "{a:?} vs {b:?}"
            );
        }
        println!(
            "duckdb 1.5.5 (iceberg_scan): median {duck:.3} s of {RUNS}, {:.1} M rows/s",
            rows as f64 / duck / 1e6
        );
        println!(
            "ratio inlet/duckdb: {:.2} (target <= 1.5)",
            inlet.as_secs_f64() / duck
        );
    });
}
