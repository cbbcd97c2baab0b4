//! Upsert and CDC table topics end to end on a running node: confluent-kafka's AvroSerializer
//! produces to a topic with `table.topic.upsert.enable=true` and one with
//! `table.topic.cdc.field=op` (both `table.topic.id.columns=[id]`); pyiceberg (and DuckDB,
//! when its extension packages are installed) must see exactly the latest row per key after
//! every step: inserts, updates (a key twice in one burst), CDC deletes, re-inserts. The node
//! is killed with SIGKILL right after a step was acked; after the restart the primary-key
//! indexes are rebuilt from the tables, and a last step of updates and deletes of keys
//! written before the kill must land exactly (no key with two live rows, no lost update).
//! Another writer (pyiceberg) appends to the upsert table in between: the node's round built
//! on the earlier snapshot is dropped and redone on the new base. A third topic, partitioned
//! by `bucket(id, 2)`, checks position deletes in partitions, before and after the restart.
//! Last, the embedded SQL engine (`inlet query`) must see the same latest rows, and Spark the
//! same rows as pyiceberg.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::temp_node;

use std::time::Duration;

use common::python::run_client;
use common::{assert_logged, avro_python, query_json, require_spark, run_table_topic_phase, Node};

#[test]
fn upserts_and_cdc_deletes_leave_the_latest_row_per_key_across_a_kill9() {
    let Some(python) = avro_python() else {
        return;
    };
    let (_dir, mut node) = temp_node(&[]);
    for phase in ["first", "after-restart"] {
        run_table_topic_phase(
            &python,
            "table_topic_upsert.py",
            &node,
            phase,
            Duration::from_secs(300),
        );
        if phase == "first" {
            // The round built before another writer's append was dropped and redone on the
            // new base, with the index rebuilt from the table.
            node.wait_for_log("re-registered");
            node = node.restart_after_kill9();
        } else {
            query_sees_the_latest_rows(&node);
            spark_sees_the_same_rows(&node);
        }
    }
    node.stop();
}

/// Spark 3.5 with Iceberg's runtime reads the upsert, CDC and partitioned upsert tables as
/// pyiceberg does: the same latest row per key, position deletes applied.
fn spark_sees_the_same_rows(node: &Node) {
    let Some(python) = require_spark() else {
        return;
    };
    run_client(
        &python,
        "table_topic_spark.py",
        &[
            &format!("http://{}/iceberg", node.http),
            &"default.users:id:name",
            &"default.accounts:id:balance",
            &"default.items:id:name",
        ],
        Duration::from_secs(300),
    );
}

/// The embedded SQL engine (`inlet query`) applies the position deletes too: one row per key,
/// as many as the scripts' expected tables hold (20 users, after 3 tombstones; 12 accounts, balances summing to
/// 2306).
fn query_sees_the_latest_rows(node: &Node) {
    let query = |sql: &str| query_json(node, sql);
    assert_eq!(
        query("SELECT count(*) AS n, count(DISTINCT id) AS k FROM default.users"),
        serde_json::json!([{"n": 20, "k": 20}])
    );
    assert_eq!(
        query("SELECT count(*) AS n, sum(balance) AS s FROM default.accounts"),
        serde_json::json!([{"n": 12, "s": 2306}])
    );
    assert_eq!(
        query("SELECT name FROM default.users WHERE id = 1"),
        serde_json::json!([{"name": "u1-v5"}])
    );
}

/// An upsert table compacted while it is updated (`table.topic.compaction.interval.ms`):
/// after every round, and after the compaction, exactly the latest row per key
/// (`tests/clients/table_topic_upsert_compaction.py`). The round built on the snapshot before
/// the compaction is refused, and the index is rebuilt from the compacted table.
#[test]
fn an_upsert_table_is_compacted_with_its_deletes_applied() {
    let Some(run) = common::run_table_topic_script("table_topic_upsert_compaction.py") else {
        return;
    };
    assert_logged(&run.node, "compacted small files", "the node compacted");
    run.node.stop();
}
