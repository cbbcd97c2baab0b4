//! What operators scrape and alert on (docs/monitoring.md): a live node's `/metrics` holds
//! every metric family the shipped alert rules (`deploy/prometheus/inlet-alerts.yml`) and
//! Grafana dashboard (`deploy/grafana/inlet-dashboard.json`) use, and docs/monitoring.md
//! documents every family the node exposes, so neither the rules nor the docs can name a
//! metric that does not exist or miss one that does. The consumer-group lag gauge says what a
//! group has not read (escaping a group name with a quote), and the alert rules parse as
//! Prometheus rule groups (PyYAML, from scripts/test-env.sh's venv).
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{poll_until, temp_node};

fn inlet(node: &common::Node, args: &[&str], stdin: Option<&str>) {
    common::inlet_client_ok(node, args, stdin);
}

/// The `inlet_…` names in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("inlet_") {
        let start = i + at;
        let preceded =
            start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let end = start
            + text[start..]
                .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
                .unwrap_or(text.len() - start);
        // `inlet_` alone (the prefix named in prose) is no metric.
        if !preceded && end > start + "inlet_".len() {
            out.insert(text[start..end].to_string());
        }
        i = end;
    }
    out
}

#[test]
fn the_shipped_alerts_dashboard_and_docs_name_only_metrics_the_node_exposes() {
    let (dir, node) = temp_node(&[]);
    inlet(
        &node,
        &[
            "topic",
            "create",
            "orders",
            "-p",
            "1",
            "--table",
            "-c",
            "table.topic.commit.interval.ms=1000",
        ],
        None,
    );
    let schema = dir.path().join("o.avsc");
    std::fs::write(
        &schema,
        r#"{"type": "record", "name": "O", "fields": [{"name": "id", "type": "long"}]}"#,
    )
    .unwrap();
    inlet(
        &node,
        &[
            "produce",
            "--topic",
            "orders",
            "--value-schema",
            &schema.to_string_lossy(),
        ],
        Some("{\"id\": 1}\n{\"id\": 2}\n{\"id\": 3}\n"),
    );
    for group in ["billing", "we\"ird"] {
        inlet(
            &node,
            &[
                "consume",
                "--topic",
                "orders",
                "--group",
                group,
                "--from-beginning",
                "--max-messages",
                "2",
            ],
            None,
        );
    }
    let metrics = poll_until(60, "the table's and the groups' series", || {
        let (status, body) = node.http_get("/metrics");
        (status == 200
            && body.contains("inlet_table_records_behind{table=\"default.orders\"}")
            && body.contains("inlet_kafka_group_lag{group=\"we\\\"ird\",topic=\"orders\"} 1"))
        .then_some(body)
    });
    assert!(
        metrics
            .lines()
            .any(|l| l == "inlet_kafka_group_lag{group=\"billing\",topic=\"orders\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.lines().any(|l| l == "inlet_wal_failed 0"),
        "{metrics}"
    );

    let exposed: BTreeSet<String> = metrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for file in [
        "deploy/prometheus/inlet-alerts.yml",
        "deploy/grafana/inlet-dashboard.json",
    ] {
        let used = metric_names(&std::fs::read_to_string(root.join(file)).unwrap());
        assert!(used.len() >= 8, "{file} uses {used:?}");
        let unknown: Vec<&String> = used.difference(&exposed).collect();
        assert!(
            unknown.is_empty(),
            "{file} names metrics the node does not expose: {unknown:?}"
        );
    }
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("deploy/grafana/inlet-dashboard.json")).unwrap(),
    )
    .unwrap();
    assert!(dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| !p["targets"][0]["expr"].as_str().unwrap_or("").is_empty()));

    let documented =
        metric_names(&std::fs::read_to_string(root.join("docs/monitoring.md")).unwrap());
    let undocumented: Vec<&String> = exposed.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "docs/monitoring.md does not document {undocumented:?}"
    );
    let stale: Vec<&String> = documented.difference(&exposed).collect();
    assert!(
        stale.is_empty(),
        "docs/monitoring.md documents metrics the node does not expose: {stale:?}"
    );

    if let Some(python) = inlet_test_support::python::require_python("import yaml", "PyYAML") {
        inlet_test_support::python::run_client(
            &python,
            "alert_rules.py",
            &[&root.join("deploy/prometheus/inlet-alerts.yml")],
            Duration::from_secs(60),
        );
    }
    node.stop();
}
