//! Time retention ages data by when the broker received it: records backfilled with a 2020
//! CreateTime are kept for `retention.ms` after they arrive (Kafka keeps them through its
//! active segment), and are deleted once that has passed.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::Start as _;

use std::time::{Duration, Instant};

use common::{poll_until, Node};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};

#[test]
fn backfilled_records_live_for_retention_ms_after_they_arrive() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("inlet.toml");
    std::fs::write(
        &config,
        "[storage]\nupload_interval_ms = 100\nmaintenance_interval_ms = 200\ndelete_grace_ms = 0\n",
    )
    .expect("config");
    let node = Node::start(dir.path(), &["--config", config.to_str().expect("utf8")]);
    let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
        ClientConfig::new()
            .set("bootstrap.servers", &node.kafka)
            .create()
            .expect("admin");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let retention = Duration::from_secs(8);
    // Before the first send: every record arrives after this, so none may expire before
    // `sent + retention`.
    let sent = Instant::now();
    rt.block_on(async {
        let topic = rdkafka::admin::NewTopic::new(
            "backfill",
            1,
            rdkafka::admin::TopicReplication::Fixed(1),
        )
        .set("retention.ms", "8000");
        let created = admin
            .create_topics([&topic], &rdkafka::admin::AdminOptions::new())
            .await
            .expect("create");
        assert!(created[0].is_ok(), "{created:?}");
        let producer: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", &node.kafka)
            .create()
            .expect("producer");
        // 2020-01-01T00:00:00Z
        for i in 0..20 {
            producer
                .send(
                    FutureRecord::<(), _>::to("backfill")
                        .payload(&format!("old-{i}"))
                        .timestamp(1_577_836_800_000 + i),
                    Duration::from_secs(10),
                )
                .await
                .map_err(|(e, _)| e)
                .expect("produce");
        }
    });
    let arrived = Instant::now();
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &node.kafka)
        .set("group.id", "retention-check")
        .create()
        .expect("consumer");
    let low = || {
        consumer
            .fetch_watermarks("backfill", 0, Duration::from_secs(10))
            .expect("watermarks")
    };
    // Many upload and maintenance passes run in the first seconds: the old timestamps must not
    // make them delete anything.
    while arrived.elapsed() < retention / 2 {
        assert_eq!(
            low(),
            (0, 20),
            "records deleted {:?} after they arrived",
            arrived.elapsed()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // Once retention.ms has passed since they arrived, they go.
    poll_until(60, "the records to expire", || {
        std::thread::sleep(Duration::from_millis(100));
        (low().0 == 20).then_some(())
    });
    assert!(
        sent.elapsed() >= retention,
        "expired {:?} after the first send",
        sent.elapsed()
    );
    node.stop();
}
