//! A whole node in-process (`inlet::Node::builder`), on a fault-injecting object store and a
//! manual clock: while every upload fails, produced records are still acknowledged (from the
//! WAL); `/healthz` turns unhealthy only when the node's clock says uploads have failed for
//! five minutes, and healthy again once the store heals and the backlog is uploaded; every
//! record reads back once.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

use std::sync::Arc;
use std::time::Duration;

use inlet::config::NodeConfig;
use inlet::Node;
use inlet_common::ManualClock;
use inlet_storage::{Fault, FaultyStore, Op};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};

const RECORDS: usize = 200;

/// Polls `check` every 50 ms until it holds, for at most `secs` seconds.
async fn wait_for<F: FnMut() -> bool>(what: &str, secs: u64, mut check: F) {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while !check() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn health(http: &std::net::SocketAddr) -> (u16, String) {
    let response = reqwest::get(format!("http://{http}/healthz"))
        .await
        .expect("GET /healthz");
    let status = response.status().as_u16();
    (status, response.text().await.expect("body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_in_process_rides_out_an_object_store_outage_on_a_manual_clock() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = NodeConfig {
        data_dir: dir.path().join("data"),
        kafka_listen: "127.0.0.1:0".into(),
        http_listen: "127.0.0.1:0".into(),
        registry_listen: "127.0.0.1:0".into(),
        ..NodeConfig::default()
    };
    config.storage.upload_interval_ms = 100;
    config.storage.retry.max_attempts = 2;
    config.storage.retry.initial_backoff_ms = 10;
    std::fs::create_dir_all(dir.path().join("data/objects")).expect("objects dir");
    let objects = FaultyStore::new(
        inlet_storage::open_object_store(&config.object_store_url()).expect("object store"),
    );
    let clock = ManualClock::new(1_700_000_000_000);
    // Every PUT fails from the start: nothing can be uploaded.
    objects.inject(Op::Put, Fault::Fail, None);
    let node = Node::builder(config)
        .object_store(Arc::new(objects.clone()))
        .clock(Arc::new(clock.clone()))
        .start()
        .await
        .expect("node");
    let kafka = node.kafka_addr().to_string();
    let http = node.http_addr();

    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &kafka)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .create()
        .expect("producer");
    for i in 0..RECORDS {
        let value = format!("record-{i}");
        producer
            .send(
                FutureRecord::<(), _>::to("outage").payload(&value),
                Duration::from_secs(30),
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("record {i} not acknowledged: {e}"));
    }
    let store = node.store().clone();
    wait_for("a failed upload", 60, || {
        store.health().upload_failure.is_some()
    })
    .await;
    assert!(store.stats().dirty_bytes > 0, "nothing was uploaded");
    // Uploads fail, but not yet for long by the node's clock.
    assert_eq!(health(&http).await.0, 200);
    clock.advance(6 * 60 * 1000);
    let (status, body) = health(&http).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("have failed for 360 s"), "{body}");

    objects.clear(Op::Put);
    wait_for("the backlog uploaded", 60, || {
        store.stats().dirty_bytes == 0 && store.health().upload_failure.is_none()
    })
    .await;
    assert_eq!(health(&http).await.0, 200);

    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &kafka)
        .set("group.id", "outage-reader")
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    // Assigned, not subscribed: a group's rebalance waits on the node's clock, which this
    // test holds still.
    let mut assignment = rdkafka::TopicPartitionList::new();
    assignment
        .add_partition_offset("outage", 0, rdkafka::Offset::Beginning)
        .expect("offset");
    consumer.assign(&assignment).expect("assign");
    let mut values = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while values.len() < RECORDS {
        assert!(
            std::time::Instant::now() < deadline,
            "read {} of {RECORDS}",
            values.len()
        );
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            let message = message.expect("message");
            values.push(
                String::from_utf8(message.payload().expect("payload").to_vec()).expect("utf-8"),
            );
        }
    }
    let expected: Vec<String> = (0..RECORDS).map(|i| format!("record-{i}")).collect();
    assert_eq!(values, expected, "every record once, in order");
    drop((consumer, producer, store));
    node.shutdown().await.expect("shutdown");
}
