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

/// Dynamic broker configs (KIP-226) through librdkafka's admin client: `log.retention.ms` and
/// `message.max.bytes` changed on the running node reach a topic that sets neither (its
/// records expire, a large record is refused), are described as dynamic, survive a restart,
/// and go back to the static values when the node's dynamic set is replaced by an empty one.
/// A static setting is refused with the reason.
#[test]
fn dynamic_broker_configs_reach_existing_topics_and_survive_a_restart() {
    use rdkafka::admin::{
        AdminClient, AdminOptions, AlterConfig, NewTopic, ResourceSpecifier, TopicReplication,
    };
    use rdkafka::client::DefaultClientContext;
    use rdkafka::types::RDKafkaErrorCode;

    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("inlet.toml");
    std::fs::write(
        &config,
        "[storage]\nupload_interval_ms = 100\nmaintenance_interval_ms = 200\ndelete_grace_ms = 0\n",
    )
    .expect("config");
    let data = dir.path().join("data");
    let args = ["--config", config.to_str().expect("utf8")];
    let node = Node::start(&data, &args);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let admin_of = |node: &Node| -> AdminClient<DefaultClientContext> {
        ClientConfig::new()
            .set("bootstrap.servers", &node.kafka)
            .create()
            .expect("admin")
    };
    let opts = AdminOptions::new().request_timeout(Some(Duration::from_secs(30)));
    let describe = |admin: &AdminClient<DefaultClientContext>, resource: ResourceSpecifier| {
        let described = rt
            .block_on(admin.describe_configs(&[resource], &opts))
            .expect("describe");
        described
            .into_iter()
            .next()
            .expect("one resource")
            .expect("described")
    };
    let entry = |resource: &rdkafka::admin::ConfigResource, name: &str| {
        let e = resource
            .get(name)
            .unwrap_or_else(|| panic!("{name} is not described"));
        (
            e.value.clone().unwrap_or_default(),
            format!("{:?}", e.source),
            e.is_read_only,
        )
    };
    let alter = |admin: &AdminClient<DefaultClientContext>, change: AlterConfig| {
        rt.block_on(admin.alter_configs(&[change], &opts))
            .expect("alter configs")
            .remove(0)
    };
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &node.kafka)
        .create()
        .expect("producer");
    let send = |producer: &FutureProducer, payload: &[u8]| {
        rt.block_on(producer.send(
            FutureRecord::<(), _>::to("plain").payload(payload),
            Duration::from_secs(10),
        ))
        .map(drop)
        .map_err(|(e, _)| e)
    };

    let admin = admin_of(&node);
    let created = rt
        .block_on(admin.create_topics(
            [&NewTopic::new("plain", 1, TopicReplication::Fixed(1))],
            &opts,
        ))
        .expect("create");
    assert!(created[0].is_ok(), "{created:?}");
    for i in 0..20 {
        send(&producer, format!("r-{i}").as_bytes()).expect("produce");
    }
    let topic = describe(&admin, ResourceSpecifier::Topic("plain"));
    assert_eq!(
        entry(&topic, "retention.ms"),
        ("604800000".into(), "Default".into(), false)
    );

    // A static setting is refused, with what to do instead (librdkafka's crate drops a
    // resource's error, so this goes on the wire by hand); nothing changes.
    let (code, message) =
        common::alter_broker_configs(&node, "0", &[("num.partitions", 0, Some("3"))]);
    assert_eq!(code, 42, "INVALID_REQUEST: {message:?}");
    assert!(
        message
            .as_deref()
            .is_some_and(|m| m.contains("--kafka-config num.partitions=VALUE")),
        "{message:?}"
    );
    let (code, message) =
        common::alter_broker_configs(&node, "0", &[("message.max.bytes", 0, Some("lots"))]);
    assert_eq!(code, 40, "INVALID_CONFIG: {message:?}");

    let altered = alter(
        &admin,
        AlterConfig::new(ResourceSpecifier::Broker(0))
            .set("log.retention.ms", "1000")
            .set("message.max.bytes", "2000"),
    );
    assert!(altered.is_ok(), "{altered:?}");
    let topic = describe(&admin, ResourceSpecifier::Topic("plain"));
    assert_eq!(
        entry(&topic, "retention.ms"),
        ("1000".into(), "DynamicBroker".into(), false)
    );
    // The records are older than a second: retention takes them.
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &node.kafka)
        .set("group.id", "dynamic-retention")
        .create()
        .expect("consumer");
    poll_until(
        60,
        "the records to expire under the dynamic retention",
        || {
            std::thread::sleep(Duration::from_millis(100));
            let (low, high) = consumer
                .fetch_watermarks("plain", 0, Duration::from_secs(10))
                .expect("watermarks");
            (low == 20 && high == 20).then_some(())
        },
    );
    let big = vec![b'x'; 5000];
    let err = send(&producer, &big).expect_err("larger than the dynamic message.max.bytes");
    assert_eq!(
        err,
        rdkafka::error::KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge)
    );
    drop((producer, consumer, admin));

    // The dynamic configs are in the metadata store: a restart keeps them.
    node.stop();
    let node = Node::start(&data, &args);
    let admin = admin_of(&node);
    let broker = describe(&admin, ResourceSpecifier::Broker(0));
    assert_eq!(
        entry(&broker, "log.retention.ms"),
        ("1000".into(), "DynamicBroker".into(), false)
    );
    assert_eq!(
        entry(&broker, "message.max.bytes"),
        ("2000".into(), "DynamicBroker".into(), false)
    );
    assert_eq!(
        entry(&broker, "num.partitions"),
        ("1".into(), "Default".into(), true)
    );
    assert_eq!(
        entry(&broker, "message.max.bytes").0,
        "2000",
        "a refused change left the stored value as it was"
    );

    // AlterConfigs replaces the node's whole dynamic set: an empty one gives the static
    // values back.
    let cleared = alter(&admin, AlterConfig::new(ResourceSpecifier::Broker(0)));
    assert!(cleared.is_ok(), "{cleared:?}");
    let topic = describe(&admin, ResourceSpecifier::Topic("plain"));
    assert_eq!(
        entry(&topic, "retention.ms"),
        ("604800000".into(), "Default".into(), false)
    );
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &node.kafka)
        .create()
        .expect("producer");
    send(&producer, &big).expect("the static message.max.bytes is back");
    node.stop();
}
