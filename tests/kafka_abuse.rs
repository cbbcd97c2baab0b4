//! Hostile clients on the Kafka port, as an attacker or an unlucky operator would be: record
//! batches that lie about their records, decompression bombs, bodies announced and never sent,
//! slowloris sends, thousands of idle connections, huge fetch limits and huge partition counts.
//! After each case a real librdkafka client must still produce and consume at once, and the
//! node's RSS must stay within a bound.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::temp_node;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use common::requests::{self, produce as produce_request, topic_name};
use common::wire::{record_batch, Conn};
use common::{rdkafka_send, Node};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, CreateTopicsResponse, FetchRequest, FetchResponse, MetadataRequest, MetadataResponse,
    ProduceRequest, ProduceResponse, RequestKind,
};
use kafka_protocol::records::Compression;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;

const CORRUPT_MESSAGE: i16 = 2;
const INVALID_RECORD: i16 = 87;

/// Produce requests in flight on one connection are appended in the order they were sent, as
/// Kafka appends them, whatever each one's checks cost: here a zstd batch of many records
/// (read off the async threads) is followed by small uncompressed ones. Before, the small
/// ones overtook it, so a client's records landed out of order.
#[test]
fn pipelined_produce_requests_keep_their_order() {
    let (_dir, node) = temp_node(&[]);
    let mut conn = Conn::open(&node);
    let (code, _, first) = produce_at(
        &mut conn,
        "ordered",
        record_batch(
            &[Some(Bytes::from_static(b"v"))],
            -1,
            -1,
            -1,
            Compression::None,
        ),
    );
    assert_eq!(code, 0);
    let slow: Vec<Option<Bytes>> = (0..200_000).map(|_| Some(Bytes::new())).collect();
    let mut requests = vec![(record_batch(&slow, -1, -1, -1, Compression::Zstd), 200_000)];
    for _ in 0..5 {
        requests.push((
            record_batch(
                &[Some(Bytes::from_static(b"small"))],
                -1,
                -1,
                -1,
                Compression::None,
            ),
            1,
        ));
    }
    let sent: Vec<(i32, i64)> = requests
        .into_iter()
        .map(|(b, n)| {
            let c = conn.send(ApiKey::Produce, 9, produce_request("ordered", b));
            (c, n)
        })
        .collect();
    let mut expected = first + 1;
    for (correlation, n) in sent {
        let r: ProduceResponse = conn.receive(ApiKey::Produce, 9, correlation);
        let p = &r.responses[0].partition_responses[0];
        assert_eq!(p.error_code, 0, "{:?}", p.error_message);
        assert_eq!(
            p.base_offset, expected,
            "request {correlation} in its place"
        );
        expected += n;
    }
    node.stop();
}

/// Produces `records` to partition 0 of `topic`; the partition's error code and message.
fn produce_raw(conn: &mut Conn, topic: &str, records: Bytes) -> (i16, String) {
    let (code, message, _) = produce_at(conn, topic, records);
    (code, message)
}

/// Produces `records` to partition 0 of `topic`: the error code, message and base offset.
fn produce_at(conn: &mut Conn, topic: &str, records: Bytes) -> (i16, String, i64) {
    let r: ProduceResponse = conn.call(ApiKey::Produce, 9, produce_request(topic, records));
    let p = &r.responses[0].partition_responses[0];
    (
        p.error_code,
        p.error_message
            .as_ref()
            .map(|m| m.to_string())
            .unwrap_or_default(),
        p.base_offset,
    )
}

/// Rewrites a batch's record count and last offset delta, and its CRC.
fn claim(batch: &Bytes, count: i32, last_delta: i32) -> Bytes {
    let mut m = BytesMut::from(&batch[..]);
    m[57..61].copy_from_slice(&count.to_be_bytes());
    m[23..27].copy_from_slice(&last_delta.to_be_bytes());
    let crc = crc32c::crc32c(&m[21..]);
    m[17..21].copy_from_slice(&crc.to_be_bytes());
    m.freeze()
}

/// A real librdkafka client produces and then consumes `n` records of `topic` at once.
fn librdkafka_works(node: &Node, topic: &str, n: usize) {
    rdkafka_send(
        node,
        &[("enable.idempotence", "true")],
        topic,
        (0..n).map(|i| format!("after-{i}")),
        "after the attack",
    );
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &node.kafka)
        .set("group.id", format!("abuse-{topic}"))
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut seen = 0;
    while seen < n {
        assert!(
            Instant::now() < deadline,
            "consumed {seen} of {n} from {topic}"
        );
        if let Some(m) = consumer.poll(Duration::from_millis(200)) {
            let m = m.expect("a message");
            assert!(m.payload().is_some_and(|p| p.starts_with(b"after-")));
            seen += 1;
        }
    }
}

#[test]
fn lying_batches_are_refused_and_clients_carry_on() {
    let (_dir, node) = temp_node(&[
        "--kafka-config",
        "inlet.batch.max.decompressed.bytes=8388608",
    ]);
    let mut conn = Conn::open(&node);
    let _: MetadataResponse = conn.call(
        ApiKey::Metadata,
        9,
        RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![
            kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
                .with_name(Some(topic_name("bombs"))),
        ]))),
    );
    let rss_before = node.rss_kib();
    let one = record_batch(
        &[Some(Bytes::from_static(b"v"))],
        -1,
        -1,
        -1,
        Compression::None,
    );

    // A record-count bomb: a 70-byte batch with a valid CRC claiming 2^31-1 records.
    let (code, message) = produce_raw(&mut conn, "bombs", claim(&one, i32::MAX, i32::MAX - 1));
    assert_eq!(code, INVALID_RECORD, "{message}");
    assert!(message.contains("2147483647"), "{message}");
    // The same with every codec.
    for codec in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let b = record_batch(&[Some(Bytes::from_static(b"v"))], -1, -1, -1, codec);
        let (code, message) = produce_raw(&mut conn, "bombs", claim(&b, i32::MAX, i32::MAX - 1));
        assert_eq!(code, INVALID_RECORD, "{codec:?}: {message}");
    }
    // A header that says two records, but the batch holds one.
    let (code, message) = produce_raw(&mut conn, "bombs", claim(&one, 2, 1));
    assert_eq!(code, INVALID_RECORD, "{message}");
    // A last offset delta that does not match the count.
    let (code, message) = produce_raw(&mut conn, "bombs", claim(&one, 1, 5));
    assert_eq!(code, INVALID_RECORD, "{message}");
    // Bad offset deltas: two records whose second says delta 7.
    let two = record_batch(
        &[
            Some(Bytes::from_static(b"a")),
            Some(Bytes::from_static(b"b")),
        ],
        -1,
        -1,
        -1,
        Compression::None,
    );
    let mut m = BytesMut::from(&two[..]);
    // Record 1 starts after record 0 (length byte + its length); its offset delta is its
    // third byte after the length (attributes, timestamp delta).
    let first_len = (m[61] >> 1) as usize;
    let second = 61 + 1 + first_len;
    assert_eq!(m[second + 3], 2, "offset delta 1 as a zigzag varint");
    m[second + 3] = 14;
    let crc = crc32c::crc32c(&m[21..]);
    m[17..21].copy_from_slice(&crc.to_be_bytes());
    let (code, message) = produce_raw(&mut conn, "bombs", m.freeze());
    assert_eq!(code, INVALID_RECORD, "{message}");
    assert!(message.contains("offset delta 7"), "{message}");
    // A decompression bomb: 16 MiB of zeros in a few KiB of zstd, over the 8 MiB bound.
    let bomb = record_batch(
        &[Some(Bytes::from(vec![0u8; 16 << 20]))],
        -1,
        -1,
        -1,
        Compression::Zstd,
    );
    assert!(bomb.len() < 64 << 10, "the bomb is small: {}", bomb.len());
    let (code, message) = produce_raw(&mut conn, "bombs", bomb);
    assert_eq!(code, INVALID_RECORD, "{message}");
    // A zstd batch of half a million tiny records (4.5 MiB once decompressed, a few KiB
    // compressed; as Record structs it would be ~50 MB): read streaming and stored.
    let tiny: Vec<Option<Bytes>> = (0..500_000).map(|_| Some(Bytes::new())).collect();
    let many = record_batch(&tiny, -1, -1, -1, Compression::Zstd);
    let (code, message) = produce_raw(&mut conn, "bombs", many);
    assert_eq!(
        code, 0,
        "a valid batch of 500,000 empty records is stored: {message}"
    );
    // A million of them decompress to more than the 8 MiB bound: refused.
    let tiny: Vec<Option<Bytes>> = (0..1_000_000).map(|_| Some(Bytes::new())).collect();
    let many = record_batch(&tiny, -1, -1, -1, Compression::Zstd);
    let (code, message) = produce_raw(&mut conn, "bombs", many);
    assert_eq!(code, INVALID_RECORD, "{message}");
    assert!(message.contains("more than 8388608 bytes"), "{message}");
    // Garbage where the compressed payload should be.
    let mut g = BytesMut::from(
        &record_batch(
            &[Some(Bytes::from_static(b"x"))],
            -1,
            -1,
            -1,
            Compression::Gzip,
        )[..],
    );
    for b in g[70..].iter_mut() {
        *b ^= 0x3c;
    }
    let crc = crc32c::crc32c(&g[21..]);
    g[17..21].copy_from_slice(&crc.to_be_bytes());
    let (code, _) = produce_raw(&mut conn, "bombs", g.freeze());
    assert!(
        code == INVALID_RECORD || code == CORRUPT_MESSAGE,
        "code {code}"
    );

    // Two valid batches for one partition: refused by Kafka's one-batch rule, and neither of
    // them is stored (the next batch takes the very next offset).
    let (code, _, before) = produce_at(&mut conn, "bombs", one.clone());
    assert_eq!(code, 0);
    let mut pair = BytesMut::from(&one[..]);
    pair.extend_from_slice(&one);
    let (code, message) = produce_raw(&mut conn, "bombs", pair.freeze());
    assert_eq!(code, INVALID_RECORD, "{message}");
    assert!(
        message.contains("one record batch per partition"),
        "{message}"
    );
    let (code, _, after) = produce_at(&mut conn, "bombs", one.clone());
    assert_eq!(
        (code, after),
        (0, before + 1),
        "the refused pair left nothing"
    );

    // The connection still works, and the node did not allocate for the lies.
    let (code, message) = produce_raw(&mut conn, "bombs", one.clone());
    assert_eq!(code, 0, "{message}");
    let rss_after = node.rss_kib();
    assert!(
        rss_after < rss_before + 256 * 1024,
        "RSS grew from {rss_before} KiB to {rss_after} KiB"
    );
    let refused = node.metric("inlet_kafka_invalid_batches_total");
    assert!(refused >= 9.0, "invalid batches counted: {refused}");
    librdkafka_works(&node, "after-bombs", 20);
    node.stop();
}

#[test]
fn announced_bodies_slow_senders_and_idle_crowds_stall_no_one() {
    let (_dir, node) = temp_node(&[
        "--kafka-config",
        "inlet.request.read.timeout.ms=3000",
        "--kafka-config",
        "connections.max.idle.ms=4000",
    ]);
    librdkafka_works(&node, "warm-up", 1);
    let rss_before = node.rss_kib();

    // Three sockets each announce a 100 MiB body (over the 256 MiB budget together) and send
    // nothing: room is reserved only as bytes arrive, so nobody waits for them.
    let mut announced = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(&node.kafka).expect("connect");
        s.write_all(&(100i32 << 20).to_be_bytes())
            .expect("announce");
        announced.push(s);
    }
    // A slowloris: a real request's bytes, one every 200 ms.
    let mut slow = TcpStream::connect(&node.kafka).expect("connect");
    let slow_started = Instant::now();
    slow.write_all(&(1000i32).to_be_bytes()).expect("length");
    // Thousands of idle connections.
    let idle: Vec<TcpStream> = (0..2000)
        .map(|_| TcpStream::connect(&node.kafka).expect("connect an idle socket"))
        .collect();
    // Everyone else carries on at once.
    let started = Instant::now();
    librdkafka_works(&node, "during", 20);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "clients were stalled for {:?}",
        started.elapsed()
    );
    for _ in 0..5 {
        let _ = slow.write_all(&[0u8]);
        std::thread::sleep(Duration::from_millis(200));
    }
    // The slow request is cut off at its read timeout, the announced ones too.
    slow.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    let mut buf = [0u8; 8];
    let closed = matches!(slow.read(&mut buf), Ok(0) | Err(_));
    assert!(closed, "the slow request's connection is closed");
    assert!(
        slow_started.elapsed() < Duration::from_secs(60),
        "closed at its read timeout, not left open"
    );
    for mut s in announced {
        s.set_read_timeout(Some(Duration::from_secs(15)))
            .expect("timeout");
        assert!(
            matches!(s.read(&mut buf), Ok(0) | Err(_)),
            "closed at the read timeout"
        );
    }
    // The idle crowd is closed at connections.max.idle.ms.
    let mut first = idle.into_iter().next().expect("one idle socket");
    first
        .set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    assert!(
        matches!(first.read(&mut buf), Ok(0) | Err(_)),
        "idle socket closed"
    );
    let rss_after = node.rss_kib();
    assert!(
        rss_after < rss_before + 256 * 1024,
        "RSS grew from {rss_before} KiB to {rss_after} KiB"
    );
    let (_, metrics) = node.http_get("/metrics");
    assert!(
        metrics.contains("inlet_kafka_slow_requests_total"),
        "{metrics}"
    );
    librdkafka_works(&node, "after-crowds", 5);
    node.stop();
}

#[test]
fn connection_caps_huge_fetches_and_huge_partition_counts_are_bounded() {
    let (_dir, node) = temp_node(&[
        "--kafka-config",
        "max.connections.per.ip=50",
        "--kafka-config",
        "fetch.max.bytes=1048576",
    ]);
    // Over max.connections.per.ip: the 51st and later are closed as they are accepted. The
    // connection used below is the first of the 50.
    let mut conn = common::wire::Conn::open(&node);
    let _: MetadataResponse = conn.call(
        ApiKey::Metadata,
        9,
        RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![]))),
    );
    let held: Vec<TcpStream> = (0..49)
        .map(|_| TcpStream::connect(&node.kafka).expect("connect"))
        .collect();
    let mut over = TcpStream::connect(&node.kafka).expect("the accept itself succeeds");
    over.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut buf = [0u8; 8];
    assert!(
        matches!(over.read(&mut buf), Ok(0) | Err(_)),
        "closed over the cap"
    );
    drop(held);

    // A huge fetch limit is capped by fetch.max.bytes: 8 batches of 512 KiB, one fetch
    // asking for 2 GiB gets at most 1 MiB (or the first batch whole).
    let topic = "big-fetch";
    let _: MetadataResponse = conn.call(
        ApiKey::Metadata,
        9,
        RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![
            kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
                .with_name(Some(topic_name(topic))),
        ]))),
    );
    for _ in 0..8 {
        let b = record_batch(
            &[Some(Bytes::from(vec![7u8; 512 << 10]))],
            -1,
            -1,
            -1,
            Compression::None,
        );
        let (code, message) = produce_raw(&mut conn, topic, b);
        assert_eq!(code, 0, "{message}");
    }
    let r: FetchResponse = conn.call(
        ApiKey::Fetch,
        11,
        RequestKind::Fetch(
            FetchRequest::default()
                .with_max_wait_ms(100)
                .with_max_bytes(i32::MAX)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(topic_name(topic))
                    .with_partitions(vec![FetchPartition::default()
                        .with_partition(0)
                        .with_fetch_offset(0)
                        .with_partition_max_bytes(i32::MAX)])]),
        ),
    );
    let got = r.responses[0].partitions[0]
        .records
        .as_ref()
        .map_or(0, |b| b.len());
    assert!(got > 0 && got <= 1 << 20, "a 2 GiB fetch got {got} bytes");

    // A CreateTopics of 100,000 partitions is refused by the partition caps; nothing is left.
    let r: CreateTopicsResponse = conn.call(
        ApiKey::CreateTopics,
        5,
        requests::create_topic("huge", 100_000, &[]),
    );
    assert_ne!(r.topics[0].error_code, 0, "100,000 partitions are refused");
    let m: MetadataResponse = conn.call(
        ApiKey::Metadata,
        9,
        RequestKind::Metadata(
            MetadataRequest::default()
                .with_allow_auto_topic_creation(false)
                .with_topics(None),
        ),
    );
    assert!(
        !m.topics
            .iter()
            .any(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == "huge")),
        "nothing of the refused topic is left"
    );
    // A produce naming 100,000 partitions of one topic: each unknown one gets an error.
    let partitions: Vec<PartitionProduceData> = (0..100_000)
        .map(|i| {
            PartitionProduceData::default()
                .with_index(i)
                .with_records(None)
        })
        .collect();
    let r: ProduceResponse = conn.call(
        ApiKey::Produce,
        9,
        RequestKind::Produce(
            ProduceRequest::default()
                .with_acks(1)
                .with_timeout_ms(10_000)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(topic_name(topic))
                    .with_partition_data(partitions)]),
        ),
    );
    assert_eq!(r.responses[0].partition_responses.len(), 100_000);
    librdkafka_works(&node, "after-caps", 5);
    node.stop();
}
