//! Fetch semantics at the protocol level: long polling returns as soon as data arrives and
//! not before, `max_wait_ms` bounds the wait, `partition_max_bytes` bounds the answer but the
//! first batch always goes out whole (KIP-74), out-of-range offsets get their error; and
//! DescribeCluster names this broker.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::temp_node;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::requests;
use common::wire::{record_batch, Conn};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;

const TOPIC: &str = "polled";
const OFFSET_OUT_OF_RANGE: i16 = 1;

fn batch(count: usize, size: usize) -> Bytes {
    let values: Vec<Option<Bytes>> = (0..count)
        .map(|_| Some(Bytes::from(vec![b'p'; size])))
        .collect();
    record_batch(&values, -1, -1, 0, Compression::None)
}

fn produce(c: &mut Conn, records: Bytes) -> i64 {
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, requests::produce(TOPIC, records));
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 0);
    p.base_offset
}

/// (error code, high watermark, record bytes)
fn fetch(
    c: &mut Conn,
    offset: i64,
    max_wait_ms: i32,
    min_bytes: i32,
    partition_max: i32,
) -> (i16, i64, Bytes) {
    let r: FetchResponse = c.call(
        ApiKey::Fetch,
        12,
        RequestKind::Fetch(
            FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_wait_ms(max_wait_ms)
                .with_min_bytes(min_bytes)
                .with_max_bytes(50 << 20)
                .with_session_epoch(-1)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_static_str(TOPIC)))
                    .with_partitions(vec![FetchPartition::default()
                        .with_partition(0)
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(partition_max)])]),
        ),
    );
    let p = &r.responses[0].partitions[0];
    (
        p.error_code,
        p.high_watermark,
        p.records.clone().unwrap_or_default(),
    )
}

#[test]
fn long_polls_wait_for_data_and_answers_respect_byte_limits() {
    let (_dir, node) = temp_node(&[]);
    let mut c = Conn::open(&node);
    assert_eq!(produce(&mut c, batch(1, 10)), 0); // creates the topic

    // Nothing past offset 1 yet: a fetch with max_wait 300 ms waits that long, then answers
    // empty.
    let t = Instant::now();
    let (code, hw, records) = fetch(&mut c, 1, 300, 1, 1 << 20);
    let waited = t.elapsed();
    assert_eq!((code, hw, records.len()), (0, 1, 0));
    assert!(
        waited >= Duration::from_millis(250),
        "answered after {waited:?}, before max_wait"
    );

    // A long poll (max_wait 20 s) answers as soon as another client produces.
    let kafka_node = Conn::open(&node);
    let producer = std::thread::spawn(move || {
        let mut p = kafka_node;
        std::thread::sleep(Duration::from_millis(300));
        produce(&mut p, batch(3, 100))
    });
    let t = Instant::now();
    let (code, hw, records) = fetch(&mut c, 1, 20_000, 1, 1 << 20);
    let waited = t.elapsed();
    assert_eq!(producer.join().expect("producer"), 1);
    assert_eq!((code, hw), (0, 4));
    assert!(!records.is_empty());
    assert!(
        waited < Duration::from_secs(10),
        "the long poll did not wake up: {waited:?}"
    );

    // min_bytes larger than what exists: waits max_wait, then answers what there is.
    let t = Instant::now();
    let (_, _, records) = fetch(&mut c, 0, 400, 1 << 20, 1 << 20);
    assert!(t.elapsed() >= Duration::from_millis(350));
    assert!(!records.is_empty());

    // partition_max_bytes: a small limit still returns the first batch whole (KIP-74), and
    // only that batch.
    let big = batch(10, 1000);
    let at = produce(&mut c, big.clone());
    produce(&mut c, batch(10, 1000));
    let (_, _, records) = fetch(&mut c, at, 0, 1, 100);
    assert_eq!(records.len(), big.len(), "exactly the first batch");
    let (_, _, records) = fetch(&mut c, at, 0, 1, 1 << 20);
    assert_eq!(records.len(), 2 * big.len(), "both batches fit");

    // Out of range on either side.
    let (code, hw, _) = fetch(&mut c, hw + 100, 0, 1, 1 << 20);
    assert_eq!(
        code, OFFSET_OUT_OF_RANGE,
        "past the end (high watermark {hw})"
    );

    let cluster: DescribeClusterResponse = c.call(
        ApiKey::DescribeCluster,
        0,
        RequestKind::DescribeCluster(DescribeClusterRequest::default()),
    );
    assert_eq!(cluster.error_code, 0);
    assert!(!cluster.cluster_id.is_empty());
    assert_eq!(cluster.brokers.len(), 1);
    let port: i32 = node
        .kafka
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port");
    assert_eq!(cluster.brokers[0].port, port);
    drop(c);
    node.stop();
}
