//! The web console (docs/console.md) in a real browser: headless Chromium (Debian's
//! `chromium`) driven by Playwright (`tests/clients/console.py`) against a node with a live
//! table topic, a schema with two versions and a consumer group. Every page loads without
//! console errors, shows what the API says (counts, lag, rows, files, the schema diff, the
//! watermark per partition, a dead letter's error), and the SQL box runs a query. Screenshots of every page are kept in `INLET_TEST_ARTIFACTS/console`
//! (default `test-artifacts/console` in the clone). Chromium and Playwright come from
//! scripts/test; without them the test is skipped locally and fails in CI.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;

use std::time::Duration;

use common::{committed_records, http_url, poll_until, tool_runs, Start};

fn inlet(node: &common::Node, args: &[&str], stdin: Option<&str>) {
    common::inlet_client_ok(node, args, stdin);
}

#[test]
fn every_console_page_loads_in_chromium_and_shows_what_the_api_says() {
    let chromium = common::require(
        "chromium (Debian's package, from scripts/test)",
        tool_runs("chromium", "--version"),
    );
    let Some(python) = inlet_test_support::python::require_python(
        "import playwright.sync_api",
        "Playwright (scripts/requirements-test.txt)",
    ) else {
        return;
    };
    if !chromium {
        return;
    }
    // The node's history is sampled every 200 ms, so the charts have one to start from.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("inlet.toml");
    std::fs::write(&config, "[http]\nhistory_interval_ms = 200\n").unwrap();
    let node = common::Node::start(
        &dir.path().join("node"),
        &["--config", &config.to_string_lossy()],
    );
    inlet(
        &node,
        &[
            "topic",
            "create",
            "people",
            "-p",
            "1",
            "--table",
            "-c",
            "table.topic.commit.interval.ms=1000",
            "-c",
            "table.topic.errors.tolerance=all",
        ],
        None,
    );
    let v1 = dir.path().join("v1.avsc");
    std::fs::write(&v1, r#"{"type": "record", "name": "Person", "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}"#).unwrap();
    let v2 = dir.path().join("v2.avsc");
    std::fs::write(&v2, r#"{"type": "record", "name": "Person", "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}, {"name": "email", "type": ["null", "string"], "default": null}]}"#).unwrap();
    inlet(
        &node,
        &[
            "produce",
            "--topic",
            "people",
            "--value-schema",
            &v1.to_string_lossy(),
        ],
        Some("{\"id\": 1, \"name\": \"ann\"}\n{\"id\": 2, \"name\": \"bob\"}\n"),
    );
    inlet(
        &node,
        &[
            "produce",
            "--topic",
            "people",
            "--value-schema",
            &v2.to_string_lossy(),
        ],
        Some("{\"id\": 3, \"name\": \"cy\", \"email\": \"cy@example.com\"}\n"),
    );
    inlet(
        &node,
        &[
            "consume",
            "--topic",
            "people",
            "--group",
            "billing",
            "--from-beginning",
            "--max-messages",
            "2",
        ],
        None,
    );
    // A record the table cannot take (not framed): its dead-letter table keeps it.
    inlet(
        &node,
        &["produce", "--topic", "people"],
        Some("not a framed record\n"),
    );
    poll_until(
        60,
        "the table commits the four records (one as a dead letter)",
        || (committed_records(&node, "default", "people") == 4).then_some(()),
    );
    let shots = std::env::var_os("INLET_TEST_ARTIFACTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("test-artifacts"))
        .join("console");
    inlet_test_support::python::run_client(
        &python,
        "console.py",
        &[&http_url(&node), &shots],
        Duration::from_secs(180),
    );
    assert!(
        shots.join("table.png").is_file(),
        "screenshots in {}",
        shots.display()
    );
    node.stop();
}

/// On a node whose HTTP listener authenticates, the pages load without a login (they hold no
/// data) and the listings want one (401). An operator (`super.users` here) sees every topic,
/// group and subject; another user only those its ACLs let it describe, and a subject or a
/// group's history it may not describe is refused or left out (`tests/clients/console_acls.py`).
#[test]
fn the_console_listings_name_only_what_the_viewer_may_describe() {
    let Some(python) =
        inlet_test_support::python::require_python("import confluent_kafka", "confluent-kafka")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (node, sasl) = common::secured_node(
        dir.path(),
        "[http]\nauthentication = \"token\"\nhistory_interval_ms = 200\n",
    );
    let base = http_url(&node);
    let rt = common::current_thread_runtime();
    let status = |path: &str| -> u16 {
        rt.block_on(async {
            let request = reqwest::Client::new().get(format!("{base}{path}"));
            request.send().await.unwrap().status().as_u16()
        })
    };
    assert_eq!(status("/ui"), 200);
    assert_eq!(status("/ui/app.js"), 200);
    for path in ["/v1/topics", "/v1/groups", "/v1/schemas", "/v1/history"] {
        assert_eq!(status(path), 401, "{path} without a login");
    }
    inlet_test_support::python::run_client(
        &python,
        "console_acls.py",
        &[&sasl, &base, &common::registry_url(&node)],
        Duration::from_secs(180),
    );
    node.stop();
}
