//! Fetch semantics at the protocol level: long polling returns as soon as data arrives and
//! not before, `max_wait_ms` bounds the wait, `partition_max_bytes` bounds the answer but the
//! first batch always goes out whole (KIP-74), out-of-range offsets get their error; fetch
//! sessions (KIP-227) answer only what changed and check their epochs; and DescribeCluster
//! names this broker.
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

/// The partition's leader epoch as Metadata v12 reports it.
fn metadata_epoch(c: &mut Conn) -> i32 {
    let r: MetadataResponse = c.call(
        ApiKey::Metadata,
        12,
        RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![
            metadata_request::MetadataRequestTopic::default()
                .with_name(Some(requests::topic_name(TOPIC))),
        ]))),
    );
    let p = &r.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    p.leader_epoch
}

/// (error code, records) of a Fetch v12 from offset 0 naming `current_leader_epoch`.
fn fetch_in_epoch(c: &mut Conn, current_leader_epoch: i32) -> (i16, Bytes) {
    let r: FetchResponse = c.call(
        ApiKey::Fetch,
        12,
        requests::fetch_from_start(TOPIC, 0, current_leader_epoch),
    );
    let p = &r.responses[0].partitions[0];
    (p.error_code, p.records.clone().unwrap_or_default())
}

/// (error code, offset, leader epoch) of ListOffsets v6 latest naming `current_leader_epoch`.
fn latest_in_epoch(c: &mut Conn, current_leader_epoch: i32) -> (i16, i64, i32) {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    let r: ListOffsetsResponse = c.call(
        ApiKey::ListOffsets,
        6,
        RequestKind::ListOffsets(
            ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![ListOffsetsTopic::default()
                    .with_name(requests::topic_name(TOPIC))
                    .with_partitions(vec![ListOffsetsPartition::default()
                        .with_partition_index(0)
                        .with_current_leader_epoch(current_leader_epoch)
                        .with_timestamp(-1)])]),
        ),
    );
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.offset, p.leader_epoch)
}

/// (error code, leader epoch, end offset) of OffsetForLeaderEpoch v4 for `partition`.
fn epoch_end(c: &mut Conn, partition: i32, current: i32, epoch: i32) -> (i16, i32, i64) {
    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    let r: OffsetForLeaderEpochResponse = c.call(
        ApiKey::OffsetForLeaderEpoch,
        4,
        RequestKind::OffsetForLeaderEpoch(
            OffsetForLeaderEpochRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![OffsetForLeaderTopic::default()
                    .with_topic(requests::topic_name(TOPIC))
                    .with_partitions(vec![OffsetForLeaderPartition::default()
                        .with_partition(partition)
                        .with_current_leader_epoch(current)
                        .with_leader_epoch(epoch)])]),
        ),
    );
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.leader_epoch, p.end_offset)
}

/// Leader epochs as Kafka clients use them (KIP-320): Metadata's epoch is stamped into every
/// batch appended (the partition leader epoch field, outside the CRC) and answered by
/// ListOffsets; Fetch, ListOffsets and OffsetForLeaderEpoch refuse a newer epoch than the
/// leader's with UNKNOWN_LEADER_EPOCH; OffsetForLeaderEpoch ends every epoch up to the
/// leader's at the log's end (an Inlet log never diverges) and knows no newer one. The older
/// epoch's FENCED_LEADER_EPOCH needs a partition that moved: `tests/cluster.rs`.
#[test]
fn leader_epochs_are_reported_stamped_and_checked() {
    let (_dir, node) = temp_node(&[]);
    let mut c = Conn::open(&node);
    assert_eq!(produce(&mut c, batch(2, 10)), 0); // creates the topic
    assert_eq!(produce(&mut c, batch(3, 10)), 2);
    let epoch = metadata_epoch(&mut c);
    assert!(epoch >= 0, "{epoch}");

    let (code, records) = fetch_in_epoch(&mut c, epoch);
    assert_eq!(code, 0);
    // Two batches, each stamped with the epoch at bytes 12..16, and their CRCs still hold.
    let mut at = 0;
    let mut batches = 0;
    while at + 61 <= records.len() {
        let len = i32::from_be_bytes(records[at + 8..at + 12].try_into().unwrap()) as usize;
        let stamped = i32::from_be_bytes(records[at + 12..at + 16].try_into().unwrap());
        assert_eq!(stamped, epoch, "batch {batches}'s partition leader epoch");
        let crc = u32::from_be_bytes(records[at + 17..at + 21].try_into().unwrap());
        assert_eq!(
            crc32c::crc32c(&records[at + 21..at + 12 + len]),
            crc,
            "batch {batches}'s CRC"
        );
        at += 12 + len;
        batches += 1;
    }
    assert_eq!(batches, 2);
    let unknown = kafka_protocol::ResponseError::UnknownLeaderEpoch.code();
    assert_eq!(fetch_in_epoch(&mut c, epoch + 1).0, unknown);
    assert_eq!(
        fetch_in_epoch(&mut c, -1).0,
        0,
        "no epoch given: not checked"
    );

    assert_eq!(latest_in_epoch(&mut c, epoch), (0, 5, epoch));
    assert_eq!(latest_in_epoch(&mut c, epoch + 1).0, unknown);

    assert_eq!(epoch_end(&mut c, 0, epoch, epoch), (0, epoch, 5));
    assert_eq!(epoch_end(&mut c, 0, -1, epoch), (0, epoch, 5));
    assert_eq!(
        epoch_end(&mut c, 0, epoch, epoch + 1),
        (0, -1, -1),
        "a newer epoch is unknown"
    );
    assert_eq!(epoch_end(&mut c, 0, epoch + 1, epoch).0, unknown);
    assert_eq!(
        epoch_end(&mut c, 7, epoch, epoch).0,
        kafka_protocol::ResponseError::UnknownTopicOrPartition.code()
    );
}

/// A fetch (v12, no wait unless `max_wait_ms`) in session `id` at `epoch` of `parts` (topic,
/// fetch offset; partition 0), forgetting partition 0 of the `forget` topics.
fn session_fetch(
    c: &mut Conn,
    (id, epoch): (i32, i32),
    parts: &[(&str, i64)],
    forget: &[&str],
    max_wait_ms: i32,
) -> FetchResponse {
    use kafka_protocol::messages::fetch_request::ForgottenTopic;
    c.call(
        ApiKey::Fetch,
        12,
        RequestKind::Fetch(
            FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_wait_ms(max_wait_ms)
                .with_min_bytes(1)
                .with_max_bytes(50 << 20)
                .with_session_id(id)
                .with_session_epoch(epoch)
                .with_topics(
                    parts
                        .iter()
                        .map(|(t, offset)| {
                            FetchTopic::default()
                                .with_topic(requests::topic_name(t))
                                .with_partitions(vec![FetchPartition::default()
                                    .with_partition(0)
                                    .with_fetch_offset(*offset)
                                    .with_partition_max_bytes(1 << 20)])
                        })
                        .collect(),
                )
                .with_forgotten_topics_data(
                    forget
                        .iter()
                        .map(|t| {
                            ForgottenTopic::default()
                                .with_topic(requests::topic_name(t))
                                .with_partitions(vec![0])
                        })
                        .collect(),
                ),
        ),
    )
}

/// The topics an answer carries, with each one's record bytes.
fn carried(r: &FetchResponse) -> Vec<(String, usize)> {
    r.responses
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                assert_eq!(p.error_code, 0, "{}: {p:?}", t.topic.0);
                (
                    t.topic.0.to_string(),
                    p.records.as_ref().map_or(0, |r| r.len()),
                )
            })
        })
        .collect()
}

/// KIP-227 as the Java client and kafka-python use it: a full fetch at epoch 0 opens a
/// session; incremental fetches name only what changed and are answered only with
/// partitions that have news; forgotten partitions leave the session; a stale epoch, an
/// unknown session and a closed one are refused with their errors.
#[test]
fn fetch_sessions_answer_only_news_and_check_their_epochs() {
    const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
    const INVALID_FETCH_SESSION_EPOCH: i16 = 71;
    let (_dir, node) = temp_node(&[]);
    let mut c = Conn::open(&node);
    let produce_to = |c: &mut Conn, topic: &str, n: usize| {
        let r: ProduceResponse = c.call(ApiKey::Produce, 9, requests::produce(topic, batch(n, 10)));
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    };
    produce_to(&mut c, "session-a", 1);
    produce_to(&mut c, "session-b", 1);

    // The full fetch opens a session and carries both partitions.
    let full = session_fetch(
        &mut c,
        (0, 0),
        &[("session-a", 0), ("session-b", 0)],
        &[],
        0,
    );
    assert_eq!(full.error_code, 0);
    let id = full.session_id;
    assert!(id > 0, "a session was opened: {full:?}");
    let got = carried(&full);
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|(_, bytes)| *bytes > 0), "{got:?}");

    // Both consumed: the new offsets, and nothing new to answer (after the wait).
    let quiet = session_fetch(
        &mut c,
        (id, 1),
        &[("session-a", 1), ("session-b", 1)],
        &[],
        200,
    );
    assert_eq!((quiet.error_code, quiet.session_id), (0, id));
    assert_eq!(carried(&quiet), vec![]);

    // Records for b only: the answer to a fetch that names nothing carries b alone.
    produce_to(&mut c, "session-b", 2);
    let news = session_fetch(&mut c, (id, 2), &[], &[], 0);
    let got = carried(&news);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, "session-b");
    assert!(got[0].1 > 0);

    // The same epoch again.
    let stale = session_fetch(&mut c, (id, 2), &[], &[], 0);
    assert_eq!(stale.error_code, INVALID_FETCH_SESSION_EPOCH);

    // b forgotten: its new records are no longer answered.
    let forgot = session_fetch(&mut c, (id, 3), &[], &["session-b"], 0);
    assert_eq!(forgot.error_code, 0);
    produce_to(&mut c, "session-b", 1);
    let after = session_fetch(&mut c, (id, 4), &[], &[], 100);
    assert_eq!(carried(&after), vec![]);
    // a still is.
    produce_to(&mut c, "session-a", 1);
    let a = session_fetch(&mut c, (id, 5), &[], &[], 0);
    assert_eq!(
        carried(&a)
            .iter()
            .map(|(t, _)| t.as_str())
            .collect::<Vec<_>>(),
        vec!["session-a"]
    );

    // An unknown session; then closing this one (a full fetch, session id 0), after which it
    // is unknown too.
    let unknown = session_fetch(&mut c, (id + 1000, 1), &[], &[], 0);
    assert_eq!(unknown.error_code, FETCH_SESSION_ID_NOT_FOUND);
    let closing = session_fetch(&mut c, (id, -1), &[("session-a", 0)], &[], 0);
    assert_eq!((closing.error_code, closing.session_id), (0, 0));
    assert_eq!(carried(&closing).len(), 1);
    let closed = session_fetch(&mut c, (id, 6), &[], &[], 0);
    assert_eq!(closed.error_code, FETCH_SESSION_ID_NOT_FOUND);
}
