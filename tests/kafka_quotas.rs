//! Client quotas (`ingest/src/quota`): set and described with the Java AdminClient 4.3.0
//! (`tests/clients/java/QuotaClients.java`), which also checks that a producer and a consumer
//! are held to their byte rates and that ALTER_CONFIGS on the cluster is required; on the raw
//! protocol, that an answer over the quota carries its throttle time and that the connection
//! reads nothing more until the throttle has passed (KIP-219), and that quotas survive a
//! restart; and librdkafka (confluent-kafka, `tests/clients/quotas.py`) held to its quotas,
//! reporting the throttle times through `throttle_cb`; and kafka-python (its own protocol
//! code) held to a produce quota (`tests/clients/quotas_kafka_python.py`).
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::Start as _;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::python::{require_python, run, script};
use common::Node;
use inlet_test_support::wire::{record_batch, Conn};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;

/// Rates over three one-second samples.
const WINDOWS: &[&str] = &[
    "--kafka-config",
    "quota.window.num=3",
    "--kafka-config",
    "quota.window.size.seconds=1",
];

/// The client id `Conn` sends.
const RAW_CLIENT: &str = "idempotence-test";

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// Sets `quotas` (key, value) of the client id `client` over the raw protocol; the answer's
/// error code and message.
fn set_client_quotas(conn: &mut Conn, client: &str, quotas: &[(&str, f64)]) -> (i16, String) {
    let entry = alter_client_quotas_request::EntryData::default()
        .with_entity(vec![alter_client_quotas_request::EntityData::default()
            .with_entity_type(s("client-id"))
            .with_entity_name(Some(s(client)))])
        .with_ops(
            quotas
                .iter()
                .map(|(k, v)| {
                    alter_client_quotas_request::OpData::default()
                        .with_key(s(k))
                        .with_value(*v)
                })
                .collect(),
        );
    let r: AlterClientQuotasResponse = conn.call(
        ApiKey::AlterClientQuotas,
        1,
        RequestKind::AlterClientQuotas(
            AlterClientQuotasRequest::default().with_entries(vec![entry]),
        ),
    );
    let e = &r.entries[0];
    (
        e.error_code,
        e.error_message.as_deref().unwrap_or_default().to_string(),
    )
}

fn describe_all(conn: &mut Conn, version: i16) -> Vec<describe_client_quotas_response::EntryData> {
    let r: DescribeClientQuotasResponse = conn.call(
        ApiKey::DescribeClientQuotas,
        version,
        RequestKind::DescribeClientQuotas(DescribeClientQuotasRequest::default()),
    );
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    r.entries.unwrap()
}

fn produce(conn: &mut Conn, topic: &str, bytes: usize) -> ProduceResponse {
    let values: Vec<Option<Bytes>> = (0..bytes / 1024)
        .map(|_| Some(Bytes::from(vec![b'q'; 1024])))
        .collect();
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![produce_request::TopicProduceData::default()
            .with_name(TopicName(s(topic)))
            .with_partition_data(vec![
                produce_request::PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(record_batch(&values, -1, -1, -1, Compression::None))),
            ])]);
    conn.call(ApiKey::Produce, 9, RequestKind::Produce(request))
}

#[test]
fn java_clients_set_describe_and_are_held_to_client_quotas() {
    let Some(libs) = common::java_clients() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut args = WINDOWS.to_vec();
    args.extend([
        "--kafka-config",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "--kafka-config",
        "allow.everyone.if.no.acl.found=true",
    ]);
    let node = Node::start(dir.path(), &args);
    let classes = common::compile_java("QuotaClients.java", &libs);
    let (status, output) = run(
        "java".as_ref(),
        &[
            "-cp".into(),
            format!("{}:{}/*", classes.path().display(), libs.display()).into(),
            "QuotaClients".into(),
            node.kafka.clone().into(),
        ],
        Duration::from_secs(300),
    );
    assert!(
        status.is_some_and(|s| s.success()) && output.lines().any(|l| l == "OK"),
        "QuotaClients failed ({status:?}):\n{output}"
    );
    node.stop();
}

#[test]
fn a_throttled_answer_mutes_its_connection_and_librdkafka_is_held_to_its_quotas() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), WINDOWS);
    let mut conn = Conn::open(&node);

    // Refused values, each with its reason; nothing stored.
    let (code, why) = set_client_quotas(&mut conn, "x", &[("producer_byte_rate", -5.0)]);
    assert_eq!(code, 42, "INVALID_REQUEST: {why}");
    assert!(why.contains("positive"), "{why}");
    assert!(describe_all(&mut conn, 0).is_empty());

    // 100 kB/s for the raw connection's client id: 400 kB go over by 200 kB, two seconds.
    let (code, why) =
        set_client_quotas(&mut conn, RAW_CLIENT, &[("producer_byte_rate", 100_000.0)]);
    assert_eq!(code, 0, "{why}");
    let answer = produce(&mut conn, "raw-quota", 100 * 1024);
    assert_eq!(answer.responses[0].partition_responses[0].error_code, 0);
    assert_eq!(answer.throttle_time_ms, 0, "within the two seconds' burst");
    let answer = produce(&mut conn, "raw-quota", 300 * 1024);
    assert_eq!(
        answer.responses[0].partition_responses[0].error_code, 0,
        "still stored"
    );
    let throttle = answer.throttle_time_ms;
    assert!((1500..=3000).contains(&throttle), "throttle {throttle} ms");
    // The connection reads nothing more until the throttle has passed.
    let sent = Instant::now();
    let _: MetadataResponse = conn.call(
        ApiKey::Metadata,
        12,
        RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![]))),
    );
    let waited = sent.elapsed();
    assert!(
        waited >= Duration::from_millis(throttle as u64 - 100),
        "answered after {waited:?}, throttle {throttle} ms"
    );

    // librdkafka, held to produce and fetch quotas of its client id.
    const QUOTA: f64 = 256.0 * 1024.0;
    let (code, why) = set_client_quotas(
        &mut conn,
        "rdkafka-slow",
        &[("producer_byte_rate", QUOTA), ("consumer_byte_rate", QUOTA)],
    );
    assert_eq!(code, 0, "{why}");
    // Version 0 and 1 describe the same.
    let described = describe_all(&mut conn, 0);
    assert_eq!(described, describe_all(&mut conn, 1));
    assert_eq!(described.len(), 2, "{described:?}");
    if let Some(python) = require_python("import confluent_kafka", "confluent-kafka") {
        let (status, output) = run(
            &python,
            &[
                script("quotas.py").into(),
                node.kafka.clone().into(),
                (QUOTA as u64).to_string().into(),
                "3".into(),
            ],
            Duration::from_secs(300),
        );
        assert!(
            status.is_some_and(|s| s.success()) && output.lines().any(|l| l == "OK"),
            "quotas.py failed ({status:?}):\n{output}"
        );
    }
    drop(conn);

    // The quotas are in the metadata store: a restarted node still enforces them.
    node.stop();
    let node = Node::start(dir.path(), WINDOWS);
    let mut conn = Conn::open(&node);
    assert_eq!(describe_all(&mut conn, 1), described);
    let answer = produce(&mut conn, "raw-quota", 400 * 1024);
    assert!(answer.throttle_time_ms > 0, "throttled after the restart");
    node.stop();
}

/// kafka-python (its own protocol code, not librdkafka's or Java's) under a produce quota:
/// held to it, while a client id without one is not (`tests/clients/quotas_kafka_python.py`).
#[test]
fn kafka_python_is_held_to_its_produce_quota() {
    let Some(python) = require_python("import kafka", "kafka-python") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), WINDOWS);
    let mut conn = Conn::open(&node);
    const QUOTA: f64 = 256.0 * 1024.0;
    let (code, why) = set_client_quotas(&mut conn, "kpy-slow", &[("producer_byte_rate", QUOTA)]);
    assert_eq!(code, 0, "{why}");
    let (status, output) = run(
        &python,
        &[
            script("quotas_kafka_python.py").into(),
            node.kafka.clone().into(),
            (QUOTA as u64).to_string().into(),
            "3".into(),
        ],
        Duration::from_secs(300),
    );
    assert!(
        status.is_some_and(|s| s.success()) && output.lines().any(|l| l == "OK"),
        "quotas_kafka_python.py failed ({status:?}):\n{output}"
    );
    node.stop();
}
