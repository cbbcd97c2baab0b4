//! Table topics end to end on a running node: confluent-kafka's AvroSerializer (and its
//! ProtobufSerializer, on another topic) produces to a 3-partition topic with
//! `table.topic.enable=true`; pyiceberg, through the node's REST
//! catalog, sees exactly the produced records as rows (nested and logical types, `_kafka`),
//! with `inlet.offsets` and `inlet.watermark` in the snapshot summary; a schema evolution
//! mid-stream adds a column. Then the node is killed with SIGKILL and restarted: more records
//! land once each, none twice.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::temp_node;

use std::time::Duration;

use common::python::{require_python, run, run_client, script};
use common::{http_url, inlet_ok, run_table_topic_phase, Node};

#[test]
fn produced_records_become_rows_of_the_table() {
    let Some(python) = require_python("import confluent_kafka.schema_registry.avro, confluent_kafka.schema_registry.protobuf, pyiceberg.catalog.rest", "confluent-kafka[avro] and pyiceberg") else {
        return;
    };
    let (_dir, mut node) = temp_node(&[]);
    for phase in ["first", "after-restart"] {
        run_table_topic_phase(
            &python,
            "table_topic_e2e.py",
            &node,
            phase,
            Duration::from_secs(240),
        );
        if phase == "first" {
            // Commit lag is visible: the table committed, and holds everything produced.
            let (_, metrics) = node.http_get("/metrics");
            let value = |name: &str| -> Option<f64> {
                metrics.lines().find_map(|l| {
                    l.strip_prefix(&format!("{name}{{table=\"default.orders\"}} "))
                        .and_then(|v| v.parse().ok())
                })
            };
            assert!(
                value("inlet_table_commits_total").is_some_and(|c| c >= 1.0),
                "{metrics}"
            );
            assert_eq!(value("inlet_table_records_behind"), Some(0.0), "{metrics}");
            assert!(
                value("inlet_table_watermark_seconds").is_some(),
                "{metrics}"
            );
            // The same, as JSON.
            let (code, body) = node.http_get("/v1/tables/default/orders");
            assert_eq!(code, 200, "{body}");
            let status: serde_json::Value = serde_json::from_str(&body).expect("JSON");
            assert_eq!(status["records_behind"], 0, "{status}");
            assert!(
                status["commits"].as_u64().is_some_and(|c| c >= 1),
                "{status}"
            );
            assert!(
                status["committed_offsets"]["0"].as_u64().is_some(),
                "{status}"
            );
            let (_, all) = node.http_get("/v1/tables");
            let all: serde_json::Value = serde_json::from_str(&all).expect("JSON");
            assert!(all["default.orders"]["watermark_ms"].is_i64(), "{all}");
            assert_eq!(node.http_get("/v1/tables/default/nope").0, 404);
            watermark_cli(&node);
            query_cli(&node);
            query_http(&node, &python);
            watermark_wait_until_a_commit(&node, &python);
            node = node.restart_after_kill9();
        }
    }
    node.stop();
}

/// `table.topic.event.time.field` and `table.topic.watermark.idle.ms` on a running node: the
/// watermark is the payload's event time, a silent partition holds it back until it is idle,
/// and it never goes back (tests/clients/table_topic_watermarks.py).
#[test]
fn watermarks_follow_event_time_and_idleness() {
    let Some(python) = require_python(
        "import confluent_kafka.schema_registry.avro",
        "confluent-kafka[avro]",
    ) else {
        return;
    };
    let (_dir, node) = temp_node(&[]);
    run_client(
        &python,
        "table_topic_watermarks.py",
        &[
            &node.kafka,
            &format!("http://{}", node.registry),
            &format!("http://{}", node.http),
        ],
        Duration::from_secs(180),
    );
    node.stop();
}

/// `inlet watermark get` and `wait` against the node: the watermark is the records' time; a
/// past time is reached at once, a far-future one times out with a clear message and exit 1.
fn watermark_cli(node: &Node) {
    let server = http_url(node);
    let inlet = common::INLET;
    let out = inlet_ok(&[
        "watermark",
        "get",
        "--table",
        "default.orders",
        "--server",
        &server,
    ]);
    let w: serde_json::Value = serde_json::from_slice(&out).expect("JSON");
    let ms = w["watermark_ms"].as_i64().expect("a watermark");
    assert!(ms > 1_600_000_000_000, "{w}");
    assert!(
        w["watermark"].as_str().is_some_and(|s| s.ends_with('Z')),
        "{w}"
    );
    assert_eq!(w["partitions"].as_object().map(|p| p.len()), Some(3), "{w}");
    assert!(w["snapshot_id"].is_i64(), "{w}");

    let wait = |until: &str, timeout: &str| {
        std::process::Command::new(inlet)
            .args([
                "watermark",
                "wait",
                "--table",
                "default.orders",
                "--until",
                until,
                "--timeout",
                timeout,
                "--server",
                &server,
            ])
            .output()
            .expect("inlet watermark wait")
    };
    let past = wait("2020-01-01T00:00:00Z", "10");
    assert!(
        past.status.success(),
        "{}",
        String::from_utf8_lossy(&past.stderr)
    );
    let future = wait("2999-01-01", "1");
    assert_eq!(future.status.code(), Some(1));
    let message = String::from_utf8_lossy(&future.stderr);
    assert!(
        message.contains("timed out") && message.contains("2999-01-01"),
        "{message}"
    );
    let bad = wait("tomorrow", "1");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("RFC 3339"));
}

/// `inlet query` (and so `POST /v1/query`) over the table: an aggregate in JSON, CSV and the
/// boxed table (Arrow IPC underneath); writes are refused with a message and exit 1.
fn query_cli(node: &Node) {
    let server = format!("http://{}", node.http);
    let query = |format: &str, sql: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_inlet"))
            .args(["query", "--server", &server, "--format", format, sql])
            .output()
            .expect("inlet query")
    };
    let sql = "SELECT count(*) AS n, sum(id) AS s FROM default.orders WHERE id >= 10";
    let json = query("json", sql);
    assert!(
        json.status.success(),
        "{}",
        String::from_utf8_lossy(&json.stderr)
    );
    let rows: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON rows");
    // ids 0..40 were produced; 10..40 sum to 735.
    assert_eq!(rows, serde_json::json!([{"n": 30, "s": 735}]));
    let csv = query("csv", sql);
    assert_eq!(String::from_utf8_lossy(&csv.stdout).trim(), "n,s\n30,735");
    let table = query(
        "table",
        "SELECT customer.name AS name FROM default.orders WHERE id = 7",
    );
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains("| name |") && text.contains("| c7   |"),
        "{text}"
    );
    for write in [
        "DROP TABLE default.orders",
        "INSERT INTO default.orders (id) VALUES (1)",
        "CREATE EXTERNAL TABLE x STORED AS PARQUET LOCATION '/etc'",
    ] {
        let out = query("json", write);
        assert_eq!(out.status.code(), Some(1), "{write}");
        assert!(!out.stderr.is_empty(), "{write}: a message");
    }
    let bad = query("json", "SELEC 1");
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("SELEC"));
}

/// `POST /v1/query` from Python: Arrow IPC read by pyarrow, CSV, time travel, a refusal.
fn query_http(node: &Node, python: &std::path::Path) {
    run_client(
        python,
        "query_http.py",
        &[&format!("http://{}", node.http)],
        Duration::from_secs(120),
    );
}

/// `inlet watermark wait` blocks until a commit moves the watermark past the asked time: the
/// one-partition `events` table waits for a time after all its records; a record stamped after
/// that time arrives, its commit lands, and the waiter exits 0.
fn watermark_wait_until_a_commit(node: &Node, python: &std::path::Path) {
    let server = format!("http://{}", node.http);
    let get = std::process::Command::new(env!("CARGO_BIN_EXE_inlet"))
        .args([
            "watermark",
            "get",
            "--table",
            "default.events",
            "--server",
            &server,
        ])
        .output()
        .expect("inlet watermark get");
    let w: serde_json::Value = serde_json::from_slice(&get.stdout).expect("JSON");
    let now = w["watermark_ms"].as_i64().expect("events has a watermark");
    let until = now + 60_000;
    let until_text = inlet::watermark::rfc3339(until);
    let waiter = std::process::Command::new(env!("CARGO_BIN_EXE_inlet"))
        .args([
            "watermark",
            "wait",
            "--table",
            "default.events",
            "--until",
            &until_text,
            "--timeout",
            "120",
            "--server",
            &server,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("inlet watermark wait");
    let (status, output) = run(
        python,
        &[
            script("produce_at.py").into(),
            node.kafka.clone().into(),
            format!("http://{}", node.registry).into(),
            "events".into(),
            "1000".into(),
            (until + 1_000).to_string().into(),
        ],
        Duration::from_secs(60),
    );
    assert!(status.is_some_and(|s| s.success()), "{output}");
    let out = waiter.wait_with_output().expect("the waiter ends");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("complete up to"));
}
