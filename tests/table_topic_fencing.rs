//! Coordinator epochs fence a live node's coordinator: another holder ("node-9", whose clock
//! is an hour ahead, so it finds the node's lease expired) takes a table topic's lease in the
//! node's metadata store while records are produced. The node's coordinator finds out at
//! its next renewal and stops, its replacement waits for the lease, and the table's progress
//! does not move while node-9 holds it. Once node-9 releases the lease, the node takes it back
//! with a higher epoch and every record is a row exactly once.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::Start as _;

use std::sync::Arc;
use std::time::Duration;

use common::{poll_until, query_json, Node};
use inlet_common::{Clock, ManualClock, SystemClock};
use inlet_storage::MetaStore;
use inlet_table_coordinator::Leases;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};

const TOPIC: &str = "fenced";
const TABLE: &str = "default.fenced";

async fn produce(node: &Node, range: std::ops::Range<u32>) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &node.kafka)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    for i in range {
        let value = format!("v{i}");
        producer
            .send(
                FutureRecord::<(), _>::to(TOPIC).payload(&value),
                Duration::from_secs(30),
            )
            .await
            .expect("acked");
    }
}

/// The records the table has committed.
fn committed(node: &Node) -> u64 {
    common::committed_records(node, "default", "fenced")
}

/// `inlet.coordinator-epoch` of the table's current snapshot, and the records its
/// `inlet.offsets` cover, through the REST catalog.
fn table_progress(node: &Node) -> (i64, u64) {
    let (status, body) = node.http_get("/iceberg/v1/namespaces/default/tables/fenced");
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).expect("table JSON");
    let meta = &json["metadata"];
    let current = meta["current-snapshot-id"].as_i64().expect("a snapshot");
    let snapshot = meta["snapshots"]
        .as_array()
        .expect("snapshots")
        .iter()
        .find(|s| s["snapshot-id"].as_i64() == Some(current))
        .expect("the current snapshot");
    let summary = &snapshot["summary"];
    let epoch = summary["inlet.coordinator-epoch"]
        .as_str()
        .and_then(|e| e.parse().ok())
        .unwrap_or_else(|| panic!("no epoch in {snapshot}"));
    let offsets: std::collections::BTreeMap<String, u64> =
        serde_json::from_str(summary["inlet.offsets"].as_str().expect("offsets")).expect("JSON");
    (epoch, offsets.values().sum())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_whose_lease_was_taken_stops_committing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(dir.path(), &[]);
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &node.kafka)
        .create()
        .expect("admin");
    let topic = NewTopic::new(TOPIC, 1, TopicReplication::Fixed(1))
        .set("table.topic.enable", "true")
        .set("table.topic.commit.interval.ms", "1000")
        .set("table.topic.convert.value.type", "string");
    let created = admin
        .create_topics([&topic], &AdminOptions::new())
        .await
        .expect("create");
    assert!(created.iter().all(Result::is_ok), "{created:?}");
    produce(&node, 0..100).await;
    poll_until(60, "the first 100 records committed", || {
        (committed(&node) == 100).then_some(())
    });
    let (first_epoch, records) = table_progress(&node);
    assert!(first_epoch >= 1);
    assert_eq!(records, 100);

    // node-9, an hour ahead, finds the lease expired and takes it.
    let meta = MetaStore::connect(&format!(
        "sqlite://{}",
        dir.path().join("meta.db").display()
    ))
    .await
    .expect("the node's metadata store");
    let ahead = Arc::new(ManualClock::new(SystemClock.now_ms() + 3_600_000));
    let other = Leases::open(meta, "node-9", Duration::from_secs(3_600), ahead)
        .await
        .expect("leases");
    let taken = other
        .acquire(TABLE, 0)
        .await
        .expect("acquire")
        .expect("node-9 sees the node's lease expired");
    assert!(taken.epoch > first_epoch, "{taken:?} after {first_epoch}");

    produce(&node, 100..200).await;
    node.wait_for_log("a newer coordinator took the table over");
    node.wait_for_log("another coordinator holds the table");
    // Fenced: the records produced after the takeover never reached the table, as every
    // commit follows a renewal, and the node's renewals fail while node-9 holds the lease.
    assert_eq!(
        table_progress(&node),
        (first_epoch, 100),
        "committed while fenced"
    );

    other.release(&taken).await.expect("release");
    poll_until(60, "all 200 records committed", || {
        (committed(&node) == 200).then_some(())
    });
    let (epoch, records) = table_progress(&node);
    assert_eq!(records, 200);
    assert!(
        epoch > taken.epoch,
        "the node took it back above node-9's: {epoch}"
    );

    // Every record once, read by the embedded SQL engine.
    let rows = query_json(
        &node,
        "SELECT count(*) AS n, count(DISTINCT value) AS d FROM default.fenced",
    );
    assert_eq!(rows[0]["n"], 200, "{rows}");
    assert_eq!(rows[0]["d"], 200, "{rows}");
    node.stop();
}
