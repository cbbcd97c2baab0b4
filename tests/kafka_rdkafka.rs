//! The Kafka endpoint with librdkafka (the `rdkafka` crate) as the client: admin calls,
//! idempotent produce with every codec, consumer groups with commits and rebalances, and a
//! SIGKILL of the node in the middle with nothing lost or duplicated.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::temp_node;
use common::Start as _;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use common::{poll_until, wait_until, Node};
use rdkafka::admin::{
    AdminClient, AdminOptions, AlterConfig, ConfigResource, NewPartitions, NewTopic,
    ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

const TIMEOUT: Duration = Duration::from_secs(30);

fn admin(node: &Node) -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", &node.kafka)
        .create()
        .expect("admin client")
}

fn producer(node: &Node, codec: &str) -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", &node.kafka)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("compression.codec", codec)
        .set("linger.ms", "5")
        .create()
        .expect("producer")
}

struct LogContext;
impl rdkafka::ClientContext for LogContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        eprintln!("[rdkafka {level:?}] {fac}: {log_message}");
    }
}
impl rdkafka::consumer::ConsumerContext for LogContext {}

fn consumer(node: &Node, group: &str, extra: &[(&str, &str)]) -> BaseConsumer<LogContext> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &node.kafka)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "10000")
        .set("heartbeat.interval.ms", "500");
    for (k, v) in extra {
        config.set(*k, *v);
    }
    if let Ok(d) = std::env::var("INLET_TEST_RDKAFKA_DEBUG") {
        config.set("debug", d);
    }
    config.create_with_context(LogContext).expect("consumer")
}

/// A node in a new directory with extra `serve` arguments, an admin client of it, and a
/// runtime for the async client calls.
fn start(
    extra: &[&str],
) -> (
    tempfile::TempDir,
    Node,
    AdminClient<DefaultClientContext>,
    tokio::runtime::Runtime,
) {
    let (dir, node) = temp_node(extra);
    let admin = admin(&node);
    (dir, node, admin, runtime())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

async fn create_topic(admin: &AdminClient<DefaultClientContext>, name: &str, partitions: i32) {
    let results = admin
        .create_topics(
            &[NewTopic::new(name, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        )
        .await
        .expect("create_topics");
    assert_eq!(results[0], Ok(name.to_string()));
}

/// The configs of `resource`, described through `admin`.
async fn describe(
    admin: &AdminClient<DefaultClientContext>,
    resource: ResourceSpecifier<'_>,
    opts: &AdminOptions,
) -> ConfigResource {
    let what = format!("{resource:?}");
    let described = admin
        .describe_configs(&[resource], opts)
        .await
        .unwrap_or_else(|e| panic!("describe {what}: {e}"));
    described
        .into_iter()
        .next()
        .expect("one resource")
        .unwrap_or_else(|e| panic!("{what} described: {e}"))
}

/// The value of the config `name` in `resource`.
fn value<'a>(resource: &'a ConfigResource, name: &str) -> Option<&'a str> {
    resource.get(name).and_then(|e| e.value.as_deref())
}

/// Produces `count` records `key-i`/`value-i` and returns (partition, offset) per record.
async fn produce(p: &FutureProducer, topic: &str, prefix: &str, count: usize) -> Vec<(i32, i64)> {
    let sends: Vec<_> = (0..count)
        .map(|i| {
            let key = format!("{prefix}-key-{i}");
            let value = format!("{prefix}-value-{i}");
            let p = p.clone();
            let topic = topic.to_string();
            async move {
                p.send(FutureRecord::to(&topic).key(&key).payload(&value), TIMEOUT)
                    .await
                    .map_err(|(e, _)| e)
            }
        })
        .collect();
    futures::future::join_all(sends)
        .await
        .into_iter()
        .map(|r| {
            let d = r.expect("acked");
            (d.partition, d.offset)
        })
        .collect()
}

/// Reads every partition of `topic` from the beginning to its end: (partition, offset, value).
fn read_all(node: &Node, topic: &str, partitions: i32) -> Vec<(i32, i64, String)> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &node.kafka)
        .set("group.id", "reader-no-commits")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    let mut ends = HashMap::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .expect("add");
        let (_, high) = c.fetch_watermarks(topic, p, TIMEOUT).expect("watermarks");
        ends.insert(p, high);
    }
    c.assign(&tpl).expect("assign");
    let mut out = Vec::new();
    let mut positions: HashMap<i32, i64> = HashMap::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !ends
        .iter()
        .all(|(p, end)| *end == 0 || positions.get(p).is_some_and(|at| at + 1 >= *end))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "reading {topic} stalled: ends {ends:?}, positions {positions:?}"
        );
        if let Some(m) = c.poll(Duration::from_millis(200)) {
            let m = m.expect("message");
            positions.insert(m.partition(), m.offset());
            out.push((
                m.partition(),
                m.offset(),
                String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(),
            ));
        }
    }
    out
}

#[test]
fn admin_creates_describes_alters_and_deletes_topics() {
    let (_dir, node, admin, rt) = start(&["--kafka-config", "num.partitions=2"]);
    rt.block_on(async {
        let opts = AdminOptions::new();
        let topic = NewTopic::new("orders", 3, TopicReplication::Fixed(1))
            .set("table.topic.enable", "true")
            .set("automq.table.topic.commit.interval.ms", "5000")
            .set("retention.ms", "3600000");
        let created = admin.create_topics(&[topic], &opts).await.expect("create");
        assert_eq!(created, vec![Ok("orders".to_string())]);

        // Again: the topic exists. A bad config and a bad name are refused with the right codes.
        let refused = |topic: NewTopic<'static>, name: &'static str, code| {
            let admin = &admin;
            let opts = &opts;
            async move {
                let answer = admin.create_topics(&[topic], opts).await.expect("create");
                assert_eq!(answer, vec![Err((name.to_string(), code))]);
            }
        };
        refused(
            NewTopic::new("orders", 1, TopicReplication::Fixed(1)),
            "orders",
            RDKafkaErrorCode::TopicAlreadyExists,
        )
        .await;
        refused(
            NewTopic::new("bad-config", 1, TopicReplication::Fixed(1))
                .set("table.topic.commit.interval.ms", "10"),
            "bad-config",
            RDKafkaErrorCode::InvalidConfig,
        )
        .await;
        refused(
            NewTopic::new("no/slashes", 1, TopicReplication::Fixed(1)),
            "no/slashes",
            RDKafkaErrorCode::InvalidTopic,
        )
        .await;

        let resource = describe(&admin, ResourceSpecifier::Topic("orders"), &opts).await;
        assert_eq!(value(&resource, "table.topic.enable"), Some("true"));
        assert_eq!(
            value(&resource, "table.topic.commit.interval.ms"),
            Some("5000")
        );
        assert_eq!(value(&resource, "retention.ms"), Some("3600000"));
        assert!(resource
            .get("table.topic.enable")
            .is_some_and(|e| !e.is_default));
        assert!(resource.get("cleanup.policy").is_some_and(|e| e.is_default));

        let altered = admin
            .alter_configs(
                &[AlterConfig::new(ResourceSpecifier::Topic("orders"))
                    .set("table.topic.enable", "true")
                    .set("table.topic.namespace", "sales")],
                &opts,
            )
            .await
            .expect("alter");
        assert!(altered[0].is_ok(), "{altered:?}");
        let resource = describe(&admin, ResourceSpecifier::Topic("orders"), &opts).await;
        assert_eq!(value(&resource, "table.topic.namespace"), Some("sales"));
        // AlterConfigs replaces the whole set: retention.ms is back to its default.
        assert!(resource.get("retention.ms").is_some_and(|e| e.is_default));

        let broker = describe(&admin, ResourceSpecifier::Broker(0), &opts).await;
        assert_eq!(value(&broker, "num.partitions"), Some("2"));
        assert_eq!(value(&broker, "auto.create.topics.enable"), Some("true"));

        let grown = admin
            .create_partitions(&[NewPartitions::new("orders", 5)], &opts)
            .await
            .expect("create partitions");
        assert_eq!(grown, vec![Ok("orders".to_string())]);
        let metadata = admin
            .inner()
            .fetch_metadata(Some("orders"), TIMEOUT)
            .expect("metadata");
        assert_eq!(metadata.topics()[0].partitions().len(), 5);

        let deleted = admin
            .delete_topics(&["orders"], &opts)
            .await
            .expect("delete");
        assert_eq!(deleted, vec![Ok("orders".to_string())]);
        let deleted = admin
            .delete_topics(&["orders"], &opts)
            .await
            .expect("delete");
        assert_eq!(
            deleted,
            vec![Err((
                "orders".to_string(),
                RDKafkaErrorCode::UnknownTopicOrPartition
            ))]
        );
    });
    node.stop();
}

#[test]
fn idempotent_produce_with_every_codec_reads_back_exactly() {
    let (_dir, node, admin, rt) = start(&[]);
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let topic = format!("codec-{codec}");
        rt.block_on(create_topic(&admin, &topic, 3));
        let p = producer(&node, codec);
        let acked = rt.block_on(produce(&p, &topic, codec, 500));
        eprintln!("{codec}: 500 records acked");
        let unique: BTreeSet<_> = acked.iter().collect();
        assert_eq!(
            unique.len(),
            500,
            "{codec}: every record got its own offset"
        );
        let read = read_all(&node, &topic, 3);
        eprintln!("{codec}: {} records read", read.len());
        assert_eq!(
            read.len(),
            500,
            "{codec}: every acked record is read back once"
        );
        let values: BTreeSet<_> = read.iter().map(|(_, _, v)| v.clone()).collect();
        let expected: BTreeSet<_> = (0..500).map(|i| format!("{codec}-value-{i}")).collect();
        assert_eq!(values, expected, "{codec}");
        // Offsets within a partition are dense and start at 0.
        let mut by_partition: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
        for (p, o, _) in &read {
            by_partition.entry(*p).or_default().push(*o);
        }
        for offsets in by_partition.values() {
            assert!(
                offsets.iter().enumerate().all(|(i, o)| *o == i as i64),
                "{codec}: {offsets:?}"
            );
        }
    }
    node.stop();
}

#[test]
fn oversized_batches_are_refused_with_message_too_large() {
    let (_dir, node, admin, rt) = start(&[]);
    rt.block_on(async {
        let topic =
            NewTopic::new("small", 1, TopicReplication::Fixed(1)).set("max.message.bytes", "2000");
        admin
            .create_topics(&[topic], &AdminOptions::new())
            .await
            .expect("create");
        let p = producer(&node, "none");
        let big = vec![b'x'; 5000];
        let err = p
            .send(FutureRecord::<(), _>::to("small").payload(&big), TIMEOUT)
            .await
            .expect_err("too large");
        assert_eq!(
            err.0,
            KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge)
        );
        p.send(FutureRecord::<(), _>::to("small").payload("fits"), TIMEOUT)
            .await
            .expect("a small record is accepted");
    });
    node.stop();
}

/// Leaves the group: unsubscribes and polls until the partitions are revoked, which the
/// broker sees as a LeaveGroup. The handle is then leaked rather than destroyed: after a
/// rebalance, `rd_kafka_destroy` in librdkafka 2.12.1 can wait forever for a broker thread
/// that still holds a partition reference (every request had been answered), and the test is
/// about the broker, not about destroying client handles.
fn close(c: BaseConsumer<LogContext>) {
    c.unsubscribe();
    wait_until(60, "the consumer to give up its partitions", || {
        let _ = c.poll(Duration::from_millis(50));
        c.assignment().ok().filter(|a| a.count() == 0)
    });
    std::mem::forget(c);
}

/// The partitions assigned to `c` now (None if it cannot say).
fn assigned(c: &BaseConsumer<LogContext>) -> Option<BTreeSet<i32>> {
    Some(
        c.assignment()
            .ok()?
            .elements()
            .iter()
            .map(|e| e.partition())
            .collect(),
    )
}

/// Polls `c` until its assignment has `n` partitions.
fn wait_for_assignment(c: &BaseConsumer<LogContext>, n: usize, what: &str) -> BTreeSet<i32> {
    wait_until(60, what, || {
        let _ = c.poll(Duration::from_millis(100));
        let a = c.assignment().expect("assignment");
        (a.count() == n).then(|| a.elements().iter().map(|e| e.partition()).collect())
    })
}

#[test]
fn consumer_groups_commit_and_rebalance_with_every_assignor() {
    let (_dir, node, admin, rt) = start(&["--kafka-config", "group.initial.rebalance.delay.ms=0"]);
    for strategy in ["range", "roundrobin", "cooperative-sticky"] {
        let topic = format!("groups-{strategy}");
        let group = format!("group-{strategy}");
        rt.block_on(create_topic(&admin, &topic, 4));
        let p = producer(&node, "lz4");
        rt.block_on(produce(&p, &topic, "g", 200));

        let a = consumer(
            &node,
            &group,
            &[("partition.assignment.strategy", strategy)],
        );
        a.subscribe(&[&topic]).expect("subscribe");
        eprintln!("{strategy}: produced");
        let first = wait_for_assignment(&a, 4, "the first member gets every partition");
        eprintln!("{strategy}: first member assigned");
        assert_eq!(first.len(), 4);
        // Consume a few and commit synchronously.
        let mut seen = 0;
        poll_until(60, "records for the first member", || {
            if let Some(m) = a.poll(Duration::from_millis(100)) {
                m.expect("message");
                seen += 1;
            }
            (seen >= 20).then_some(())
        });
        eprintln!("{strategy}: consumed {seen}");
        a.commit_consumer_state(CommitMode::Sync).expect("commit");
        eprintln!("{strategy}: committed");
        let committed = a.committed(TIMEOUT).expect("committed");
        let total: i64 = committed
            .elements()
            .iter()
            .filter_map(|e| match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            })
            .sum();
        assert!(
            total >= 20,
            "{strategy}: committed offsets cover what was consumed: {total}"
        );

        // A second member joins: the partitions are split between them.
        let b = consumer(
            &node,
            &group,
            &[("partition.assignment.strategy", strategy)],
        );
        b.subscribe(&[&topic]).expect("subscribe");
        let (pa, pb) = wait_until(90, "the rebalance to split the partitions", || {
            let _ = a.poll(Duration::from_millis(50));
            let _ = b.poll(Duration::from_millis(50));
            let (pa, pb) = (assigned(&a)?, assigned(&b)?);
            (pa.len() == 2 && pb.len() == 2).then_some((pa, pb))
        });
        assert!(pa.is_disjoint(&pb), "{strategy}: {pa:?} and {pb:?} overlap");
        eprintln!("{strategy}: rebalanced {pa:?} {pb:?}");
        close(b);
        close(a);
        // Both left: the group is empty and can be deleted, once. librdkafka's close sends
        // LeaveGroup without waiting for its answer, so the broker may still see a member for
        // a moment (Kafka answers NON_EMPTY_GROUP then too): wait for the delete to succeed.
        let deleted = poll_until(30, "the group to become deletable", || {
            let deleted = rt
                .block_on(admin.delete_groups(&[&group], &AdminOptions::new()))
                .expect("delete_groups");
            match &deleted[..] {
                [Err((_, RDKafkaErrorCode::NonEmptyGroup))] => {
                    std::thread::sleep(Duration::from_millis(50));
                    None
                }
                _ => Some(deleted),
            }
        });
        assert_eq!(deleted, vec![Ok(group.clone())], "{strategy}");
        let again = rt
            .block_on(admin.delete_groups(&[&group], &AdminOptions::new()))
            .expect("delete_groups");
        assert_eq!(
            again,
            vec![Err((group.clone(), RDKafkaErrorCode::GroupIdNotFound))],
            "{strategy}"
        );
    }
    node.stop();
}

#[test]
fn kill9_then_resume_from_committed_offsets_without_loss_or_duplicates() {
    let (_dir, node) = temp_node(&["--kafka-config", "group.initial.rebalance.delay.ms=0"]);
    let rt = runtime();
    rt.block_on(create_topic(&admin(&node), "events", 2));
    let p = producer(&node, "zstd");
    let first = rt.block_on(produce(&p, "events", "before", 400));
    assert_eq!(first.len(), 400);
    drop(p);

    // Consume part of it and commit exactly what was processed.
    let mut processed: BTreeSet<String> = BTreeSet::new();
    {
        let c = consumer(&node, "resumer", &[]);
        c.subscribe(&["events"]).expect("subscribe");
        let mut offsets = TopicPartitionList::new();
        poll_until(60, "the first 150 records", || {
            if let Some(m) = c.poll(Duration::from_millis(100)) {
                let m = m.expect("message");
                processed
                    .insert(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
                offsets
                    .add_partition_offset("events", m.partition(), Offset::Offset(m.offset() + 1))
                    .expect("offset");
            }
            (processed.len() >= 150).then_some(())
        });
        c.commit(&offsets, CommitMode::Sync).expect("commit");
    }

    // SIGKILL: no clean shutdown, no flush. Then produce more on the restarted node.
    let node = node.restart_after_kill9();
    let p = producer(&node, "zstd");
    rt.block_on(produce(&p, "events", "after", 200));

    let mut rest: Vec<String> = Vec::new();
    let c = consumer(&node, "resumer", &[]);
    c.subscribe(&["events"]).expect("subscribe");
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while processed.len() + rest.len() < 600 {
        assert!(
            std::time::Instant::now() < deadline,
            "only {} of the remaining records arrived",
            rest.len()
        );
        if let Some(m) = c.poll(Duration::from_millis(100)) {
            let m = m.expect("message");
            rest.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
        }
    }
    // Nothing more arrives: no duplicates.
    let extra = c.poll(Duration::from_secs(2));
    assert!(
        extra.is_none(),
        "an unexpected extra record: {:?}",
        extra.map(|m| m.map(|m| m.offset()))
    );
    let rest_set: BTreeSet<String> = rest.iter().cloned().collect();
    assert_eq!(rest_set.len(), rest.len(), "no record is delivered twice");
    assert!(
        rest_set.is_disjoint(&processed),
        "committed records are not delivered again"
    );
    let all: BTreeSet<String> = processed.union(&rest_set).cloned().collect();
    let expected: BTreeSet<String> = (0..400)
        .map(|i| format!("before-value-{i}"))
        .chain((0..200).map(|i| format!("after-value-{i}")))
        .collect();
    assert_eq!(all, expected, "every acked record survives the SIGKILL");
    node.stop();
}

#[test]
fn health_and_metrics_are_served() {
    let (_dir, node) = temp_node(&[]);
    let rt = runtime();
    rt.block_on(create_topic(&admin(&node), "m", 1));
    rt.block_on(produce(&producer(&node, "none"), "m", "m", 10));
    let (status, body) = node.http_get("/healthz");
    assert_eq!((status, body.trim()), (200, "ok"));
    let (status, body) = node.http_get("/metrics");
    assert_eq!(status, 200);
    let value = |name: &str| -> f64 {
        body.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing from /metrics"))
    };
    assert!(value("inlet_kafka_requests_total{api=\"Produce\"}") >= 1.0);
    assert!(value("inlet_kafka_request_seconds_count{api=\"Produce\"}") >= 1.0);
    assert!(value("inlet_kafka_bytes_in_total") > 0.0);
    assert!(value("inlet_wal_syncs_total") >= 1.0);
    assert!(value("inlet_kafka_produced_records_total") >= 10.0);
    assert!(body.contains("inlet_block_cache_hit_ratio"));
    node.stop();
}

#[test]
fn sigterm_answers_in_flight_produces_and_loses_nothing_acked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(dir.path(), &[]);
    let rt = runtime();
    rt.block_on(create_topic(&admin(&node), "drain", 2));
    // Records the stopped node never answers fail after 3 s instead of librdkafka's 5 minutes.
    let p: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &node.kafka)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("compression.codec", "lz4")
        .set("linger.ms", "2")
        .set("message.timeout.ms", "3000")
        .create()
        .expect("producer");
    // Keep producing while the node is told to stop: each record is either acked (and must
    // survive) or fails; none may be acked and then lost.
    rt.block_on(produce(&p, "drain", "warmup", 10));
    let acks = std::sync::atomic::AtomicUsize::new(0);
    let acked = rt.block_on(async {
        let sends: Vec<_> = (0..100_000)
            .map(|i| {
                let p = p.clone();
                let acks = &acks;
                async move {
                    let value = format!("drain-{i}-{}", "x".repeat(1000));
                    let r = p
                        .send(
                            FutureRecord::<(), _>::to("drain").payload(&value),
                            Duration::from_secs(5),
                        )
                        .await;
                    if r.is_ok() {
                        acks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    r.ok().map(|_| value)
                }
            })
            .collect();
        let all = futures::future::join_all(sends);
        // Stop the node in the middle of the stream: after the first 300 acks.
        let stop = async {
            while acks.load(std::sync::atomic::Ordering::SeqCst) < 300 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            // SAFETY: signalling our own child process.
            unsafe { libc::kill(node.pid(), libc::SIGTERM) };
        };
        let (results, ()) = futures::join!(all, stop);
        results.into_iter().flatten().collect::<BTreeSet<String>>()
    });
    assert!(acked.len() >= 300, "the stop came after 300 acks");
    node.wait_for_log("stopped cleanly");
    drop(p);
    let node = Node::start(dir.path(), &[]);
    let read: Vec<String> = read_all(&node, "drain", 2)
        .into_iter()
        .map(|(_, _, v)| v)
        .filter(|v| v.starts_with("drain-"))
        .collect();
    let stored: BTreeSet<String> = read.iter().cloned().collect();
    assert_eq!(stored.len(), read.len(), "no record is stored twice");
    let lost: Vec<_> = acked.difference(&stored).collect();
    assert!(
        lost.is_empty(),
        "{} acked records were lost, e.g. {:?}",
        lost.len(),
        lost.first()
    );
    eprintln!(
        "{} of 100000 acked before the stop, {} stored",
        acked.len(),
        stored.len()
    );
    node.stop();
}

#[test]
fn the_schema_registry_listens_beside_the_kafka_port() {
    let (_dir, node) = temp_node(&[]);
    let (status, body) = node.registry_get("/subjects");
    assert_eq!((status, body.trim()), (200, "[]"));
    let (status, body) = node.registry_get("/schemas/ids/1");
    assert_eq!(status, 404);
    assert!(body.contains("40403"), "{body}");
    node.stop();
}

/// The codec (attribute bits 0–2) of every batch a Fetch from offset 0 of `topic`'s partition
/// 0 returns.
fn stored_codecs(node: &Node, topic: &str) -> BTreeSet<u8> {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, FetchResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let mut conn = common::wire::Conn::open(node);
    let r: FetchResponse = conn.call(
        ApiKey::Fetch,
        12,
        kafka_protocol::messages::RequestKind::Fetch(
            FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_wait_ms(0)
                .with_max_bytes(50 << 20)
                .with_session_epoch(-1)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                    .with_partitions(vec![FetchPartition::default()
                        .with_partition(0)
                        .with_fetch_offset(0)
                        .with_partition_max_bytes(50 << 20)])]),
        ),
    );
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.error_code, 0, "fetch of {topic}");
    let mut bytes = p.records.clone().unwrap_or_default();
    let mut codecs = BTreeSet::new();
    // Batches: base offset (8), length (4), then `length` bytes; attributes at byte 21.
    while bytes.len() >= 61 {
        let length = i32::from_be_bytes(bytes[8..12].try_into().unwrap()) as usize;
        codecs.insert(bytes[22] & 0x7);
        if bytes.len() < 12 + length {
            break;
        }
        let _ = bytes.split_to(12 + length);
    }
    codecs
}

/// A topic's `compression.type` naming a codec has every batch stored in it whatever the
/// producer used, as Kafka's broker recompresses; `producer` keeps the producer's. Set at
/// creation and by AlterConfigs.
#[test]
fn a_topic_compression_type_recompresses_every_batch_as_kafka_does() {
    let (_dir, node, admin, rt) = start(&[]);
    let opts = AdminOptions::new();
    let cases = [
        ("gzip", 1u8),
        ("zstd", 4),
        ("snappy", 2),
        ("uncompressed", 0),
        ("producer", 3),
    ];
    for (i, (codec, _)) in cases.iter().enumerate() {
        let topic = format!("compress-{codec}");
        let created = rt
            .block_on(
                admin.create_topics(
                    &[NewTopic::new(&topic, 1, TopicReplication::Fixed(1))
                        // Half at creation, half by AlterConfigs afterwards.
                        .set(
                            "compression.type",
                            if i % 2 == 0 { codec } else { "producer" },
                        )],
                    &opts,
                ),
            )
            .expect("create");
        assert_eq!(created, vec![Ok(topic.clone())]);
        if i % 2 == 1 {
            let altered = rt
                .block_on(
                    admin.alter_configs(
                        &[AlterConfig::new(ResourceSpecifier::Topic(&topic))
                            .set("compression.type", codec)],
                        &opts,
                    ),
                )
                .expect("alter");
            assert!(altered[0].is_ok(), "{altered:?}");
        }
        let described = rt.block_on(describe(&admin, ResourceSpecifier::Topic(&topic), &opts));
        assert_eq!(value(&described, "compression.type"), Some(*codec));
    }
    // A name Kafka does not know is refused.
    let refused = rt
        .block_on(
            admin.create_topics(
                &[NewTopic::new("compress-bad", 1, TopicReplication::Fixed(1))
                    .set("compression.type", "brotli")],
                &opts,
            ),
        )
        .expect("create");
    assert_eq!(
        refused,
        vec![Err((
            "compress-bad".to_string(),
            RDKafkaErrorCode::InvalidConfig
        ))]
    );
    let p = producer(&node, "lz4");
    for (codec, stored) in cases {
        let topic = format!("compress-{codec}");
        let acked = rt.block_on(produce(&p, &topic, codec, 300));
        assert_eq!(acked.iter().collect::<BTreeSet<_>>().len(), 300);
        let codecs = stored_codecs(&node, &topic);
        if codec == "producer" {
            // As produced: librdkafka may send a batch that does not shrink uncompressed.
            assert!(
                codecs.contains(&stored) && codecs.is_subset(&BTreeSet::from([0, stored])),
                "{codec}: {codecs:?}"
            );
        } else {
            assert_eq!(
                codecs,
                BTreeSet::from([stored]),
                "{codec}: the codec of the stored batches"
            );
        }
        let read = read_all(&node, &topic, 1);
        let values: Vec<String> = read.iter().map(|(_, _, v)| v.clone()).collect();
        let expected: Vec<String> = (0..300).map(|i| format!("{codec}-value-{i}")).collect();
        let mut sorted = values.clone();
        sorted.sort();
        let mut want = expected.clone();
        want.sort();
        assert_eq!(sorted, want, "{codec}: every record once");
        assert!(
            read.iter().enumerate().all(|(i, (_, o, _))| *o == i as i64),
            "{codec}: dense offsets"
        );
    }
    node.stop();
}

/// CreateTopics and CreatePartitions with manual replica assignments, as Kafka checks them:
/// live brokers are accepted (Inlet places the leaders itself), unknown ones refused.
#[test]
fn manual_replica_assignments_naming_live_brokers_are_accepted() {
    let (_dir, node, admin, rt) = start(&[]);
    let opts = AdminOptions::new();
    let metadata = admin
        .inner()
        .fetch_metadata(None, TIMEOUT)
        .expect("metadata");
    let id = metadata.brokers()[0].id();
    let created = rt
        .block_on(admin.create_topics(
            &[NewTopic::new(
                "assigned",
                3,
                TopicReplication::Variable(&[&[id], &[id], &[id]]),
            )],
            &opts,
        ))
        .expect("create");
    assert_eq!(created, vec![Ok("assigned".to_string())]);
    let refused = rt
        .block_on(admin.create_topics(
            &[NewTopic::new(
                "misassigned",
                2,
                TopicReplication::Variable(&[&[id], &[id + 100]]),
            )],
            &opts,
        ))
        .expect("create");
    assert_eq!(
        refused,
        vec![Err((
            "misassigned".to_string(),
            RDKafkaErrorCode::InvalidReplicaAssignment
        ))]
    );
    let grown = rt
        .block_on(admin.create_partitions(
            &[NewPartitions::new("assigned", 5).assign(&[&[id], &[id]])],
            &opts,
        ))
        .expect("create partitions");
    assert_eq!(grown, vec![Ok("assigned".to_string())]);
    let grown = rt
        .block_on(admin.create_partitions(
            &[NewPartitions::new("assigned", 6).assign(&[&[id + 100]])],
            &opts,
        ))
        .expect("create partitions");
    assert_eq!(
        grown,
        vec![Err((
            "assigned".to_string(),
            RDKafkaErrorCode::InvalidReplicaAssignment
        ))]
    );
    let metadata = admin
        .inner()
        .fetch_metadata(Some("assigned"), TIMEOUT)
        .expect("metadata");
    assert_eq!(metadata.topics()[0].partitions().len(), 5);
    let acked = rt.block_on(produce(&producer(&node, "none"), "assigned", "a", 50));
    assert_eq!(
        acked.iter().map(|(p, _)| *p).collect::<BTreeSet<_>>().len(),
        5,
        "every partition takes records"
    );
    node.stop();
}
