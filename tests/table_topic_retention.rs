//! A table topic never loses a record to retention: its table's folder in the warehouse is
//! broken (replaced by a file, so nothing under it can be read or written, root or not) for
//! more than three times the topic's `retention.ms` while producers keep writing. Retention
//! runs every half second meanwhile and would take most of the stream; it keeps what the
//! table has not committed instead, and says so in `/metrics` and `/v1/tables`. With
//! `table.topic.lag.max.bytes` lowered, produce is refused (retriably) and `/healthz` says
//! why. Once the warehouse is back, every acknowledged record is a row of the table exactly
//! once, and only then does retention shorten the stream.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::Start as _;

use std::time::{Duration, Instant};

use common::{poll_until, query_json, Node};
use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, NewTopic, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};

const TOPIC: &str = "held";
const RETENTION_MS: u64 = 3_000;

/// The records the table has committed.
fn committed(node: &Node) -> u64 {
    common::committed_records(node, "default", "held")
}

/// The sum over the topic's partitions of a per-partition metric.
fn partition_metric(node: &Node, name: &str) -> f64 {
    node.metric_values()
        .iter()
        .filter(|(k, _)| k.starts_with(&format!("{name}{{topic=\"{TOPIC}\"")))
        .map(|(_, v)| v)
        .sum()
}

fn producer(node: &Node, timeout_ms: &str) -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", &node.kafka)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("message.timeout.ms", timeout_ms)
        .create()
        .expect("producer")
}

async fn send_all(producer: &FutureProducer, range: std::ops::Range<u32>) {
    for i in range {
        let value = format!("v{i:06}-{}", "x".repeat(200));
        producer
            .send(
                FutureRecord::<(), _>::to(TOPIC)
                    .payload(&value)
                    .partition((i % 2) as i32),
                Duration::from_secs(30),
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("record {i} not acknowledged: {e}"));
    }
}

/// The topic's configs.
const CONFIGS: [(&str, &str); 4] = [
    ("table.topic.enable", "true"),
    ("table.topic.commit.interval.ms", "1000"),
    ("table.topic.convert.value.type", "string"),
    ("retention.ms", "3000"),
];

/// Sets `key` on the topic with AlterConfigs, which replaces every config: [`CONFIGS`] with it.
async fn set_topic_config(admin: &AdminClient<DefaultClientContext>, key: &str, value: &str) {
    let mut alter = AlterConfig::new(ResourceSpecifier::Topic(TOPIC)).set(key, value);
    for (k, v) in CONFIGS {
        alter = alter.set(k, v);
    }
    let done = admin
        .alter_configs([&alter], &AdminOptions::new())
        .await
        .expect("alter configs");
    assert!(done.iter().all(Result::is_ok), "{done:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_keeps_what_the_table_has_not_committed_through_a_warehouse_outage() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("inlet.toml");
    std::fs::write(
        &config,
        "[storage]\nupload_interval_ms = 100\nmaintenance_interval_ms = 500\ndelete_grace_ms = 0\n",
    )
    .expect("config");
    let node = Node::start(dir.path(), &["--config", config.to_str().expect("utf8")]);
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &node.kafka)
        .create()
        .expect("admin");
    let mut topic = NewTopic::new(TOPIC, 2, rdkafka::admin::TopicReplication::Fixed(1));
    for (k, v) in CONFIGS {
        topic = topic.set(k, v);
    }
    let created = admin
        .create_topics([&topic], &AdminOptions::new())
        .await
        .expect("create");
    assert!(created.iter().all(Result::is_ok), "{created:?}");
    let fast = producer(&node, "30000");
    send_all(&fast, 0..200).await;
    poll_until(60, "the first 200 records committed", || {
        (committed(&node) == 200).then_some(())
    });

    // The warehouse goes: the table's folder is moved away and a file put in its place.
    let table_dir = dir.path().join("objects/warehouse/default/held");
    let away = dir.path().join("objects/warehouse/default/held.away");
    assert!(
        table_dir.is_dir(),
        "no table folder at {}",
        table_dir.display()
    );
    std::fs::rename(&table_dir, &away).expect("move the table away");
    std::fs::write(&table_dir, b"not a folder").expect("a file in its place");
    let outage = Instant::now();
    // Producers go on for more than three times the retention, a batch every 500 ms.
    let mut sent = 200;
    while outage.elapsed() < Duration::from_millis(3 * RETENTION_MS + 1_000) {
        send_all(&fast, sent..sent + 40).await;
        sent += 40;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    node.wait_for_any_log(&["conversion failed", "commit failed"]);
    // Retention ran over data older than retention.ms, and kept it for the table.
    poll_until(30, "retention holding bytes for the table", || {
        (partition_metric(&node, "inlet_table_retention_held_bytes") > 0.0).then_some(())
    });
    let lag = partition_metric(&node, "inlet_table_lag_bytes");
    assert!(lag > 0.0, "no table lag reported");
    let (_, status) = node.http_get("/v1/tables/default/held");
    let status: serde_json::Value = serde_json::from_str(&status).expect("status JSON");
    let lag_bytes: u64 = status["lag_bytes"]
        .as_object()
        .expect("lag_bytes per partition")
        .values()
        .filter_map(|v| v.as_u64())
        .sum();
    assert!(lag_bytes > 0, "{status}");
    assert_eq!(committed(&node), 200, "nothing can commit meanwhile");
    assert_eq!(node.http_get("/healthz").0, 200);

    // A bound the table is past: produce is refused, retriably, and /healthz says why.
    set_topic_config(&admin, "table.topic.lag.max.bytes", "1000").await;
    poll_until(30, "/healthz unhealthy", || {
        let (code, body) = node.http_get("/healthz");
        (code == 503).then_some(body)
    });
    let (_, body) = node.http_get("/healthz");
    assert!(body.contains("table.topic.lag.max.bytes"), "{body}");
    assert!(body.contains("held/0") || body.contains("held/1"), "{body}");
    let refused = producer(&node, "3000");
    let answer = refused
        .send(
            FutureRecord::<(), _>::to(TOPIC)
                .payload("refused")
                .partition(0),
            Duration::from_secs(10),
        )
        .await;
    assert!(answer.is_err(), "a produce past the bound was acknowledged");
    assert!(node.metric("inlet_kafka_table_lag_refusals_total") > 0.0);
    set_topic_config(&admin, "table.topic.lag.max.bytes", "-1").await;
    poll_until(30, "/healthz healthy again", || {
        (node.http_get("/healthz").0 == 200).then_some(())
    });

    // The warehouse comes back: every acknowledged record reaches the table, once.
    std::fs::remove_file(&table_dir).expect("remove the file");
    std::fs::rename(&away, &table_dir).expect("move the table back");
    poll_until(120, "every acknowledged record committed", || {
        (committed(&node) == u64::from(sent)).then_some(())
    });
    let rows = query_json(
        &node,
        "SELECT count(*) AS n, count(DISTINCT value) AS d FROM default.held",
    );
    assert_eq!(rows[0]["n"], sent, "{rows}");
    assert_eq!(rows[0]["d"], sent, "{rows}");
    let logs = node.logs_so_far().join("\n");
    assert!(
        !logs.contains("records were deleted by retention before they reached the table"),
        "retention took records the table had not committed"
    );
    // Now that the table holds them, retention shortens the stream as Kafka's would.
    let consumer: rdkafka::consumer::BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &node.kafka)
        .create()
        .expect("consumer");
    poll_until(60, "retention expiring what the table holds", || {
        use rdkafka::consumer::Consumer as _;
        let (low, high) = consumer
            .fetch_watermarks(TOPIC, 0, Duration::from_secs(10))
            .expect("watermarks");
        (low > 0
            && high == i64::from(sent / 2)
            && partition_metric(&node, "inlet_table_retention_held_bytes") == 0.0)
            .then_some(())
    });
    node.stop();
}
