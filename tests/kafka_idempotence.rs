//! Idempotent produce at the protocol level: a retried batch is answered with its first
//! offset and not stored twice, a gap is refused, and both still hold after the node is
//! killed with SIGKILL and restarted (the producer state is rebuilt from the log); the
//! producer state stays within its byte budget, forgetting the longest idle producers first.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::temp_node;

use std::io::Write;

use bytes::Bytes;
use common::requests;
use common::wire::{record_batch, Conn};
use inlet_ingest::codec::encode_request;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;

fn batch(producer_id: i64, epoch: i16, first_seq: i32, count: usize, tag: &str) -> Bytes {
    let values: Vec<Option<Bytes>> = (0..count)
        .map(|i| Some(Bytes::from(format!("{tag}-{i}"))))
        .collect();
    record_batch(&values, producer_id, epoch, first_seq, Compression::None)
}

/// Produces one batch to `idem-0`; returns (error code, base offset).
fn produce(c: &mut Conn, records: Bytes) -> (i16, i64) {
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, requests::produce("idem", records));
    let p = &r.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

fn init_producer_id(c: &mut Conn) -> i64 {
    let r: InitProducerIdResponse = c.call(
        ApiKey::InitProducerId,
        4,
        RequestKind::InitProducerId(
            InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        ),
    );
    assert_eq!(r.error_code, 0);
    r.producer_id.0
}

fn end_offset(c: &mut Conn) -> i64 {
    let r: ListOffsetsResponse = c.call(ApiKey::ListOffsets, 5, requests::list_offsets("idem", -1));
    r.topics[0].partitions[0].offset
}

const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;

#[test]
fn retries_are_deduplicated_and_gaps_refused_across_a_sigkill() {
    let (_dir, node) = temp_node(&[]);
    let mut c = Conn::open(&node);
    let _: MetadataResponse = c.call(
        ApiKey::Metadata,
        9,
        RequestKind::Metadata(
            MetadataRequest::default()
                .with_allow_auto_topic_creation(true)
                .with_topics(Some(vec![MetadataRequestTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_static_str("idem"))))])),
        ),
    );
    let pid = init_producer_id(&mut c);
    let first = batch(pid, 0, 0, 5, "a");
    assert_eq!(produce(&mut c, first.clone()), (0, 0));
    // The same batch again (a client retry): answered with the first offset, not stored.
    assert_eq!(produce(&mut c, first.clone()), (0, 0));
    assert_eq!(end_offset(&mut c), 5);
    // A gap: sequence 10 where 5 is expected.
    let (code, _) = produce(&mut c, batch(pid, 0, 10, 1, "gap"));
    assert_eq!(code, OUT_OF_ORDER_SEQUENCE_NUMBER);
    assert_eq!(produce(&mut c, batch(pid, 0, 5, 3, "b")), (0, 5));
    assert_eq!(end_offset(&mut c), 8);
    drop(c);

    // SIGKILL, restart: the retry is still recognized, the gap still refused.
    let node = node.restart_after_kill9();
    let mut c = Conn::open(&node);
    assert_eq!(
        produce(&mut c, batch(pid, 0, 5, 3, "b")),
        (0, 5),
        "retry after restart"
    );
    assert_eq!(end_offset(&mut c), 8, "the retry was not stored again");
    let (code, _) = produce(&mut c, batch(pid, 0, 20, 1, "gap"));
    assert_eq!(code, OUT_OF_ORDER_SEQUENCE_NUMBER);
    assert_eq!(produce(&mut c, batch(pid, 0, 8, 2, "c")), (0, 8));
    assert_eq!(end_offset(&mut c), 10);
    // Producer ids are never handed out twice, even after SIGKILL.
    assert!(init_producer_id(&mut c) > pid);
    drop(c);
    node.stop();
}

/// The node's producer state has a byte budget (`inlet.producer.state.max.bytes`, here ten
/// producers' worth at 2 KiB each): past it, the longest idle producers are forgotten first,
/// down to nine tenths of it. A kept producer's retry is still answered with its offset and
/// its gap still refused; a forgotten one's next batch is taken at any sequence, as after
/// `producer.id.expiration.ms`.
#[test]
fn producer_state_past_its_budget_forgets_the_longest_idle_first() {
    let (_dir, node) = temp_node(&[
        "--kafka-config",
        "inlet.producer.state.max.bytes=20480",
        "--kafka-config",
        "inlet.producer.snapshot.interval.ms=50",
    ]);
    let mut c = Conn::open(&node);
    let mut offsets = Vec::new();
    for pid in 1000..1030 {
        let (code, offset) = produce(&mut c, batch(pid, 0, 0, 1, "p"));
        assert_eq!(code, 0, "producer {pid}");
        offsets.push(offset);
    }
    let forgotten = common::wait_until(30, "the producers past the budget forgotten", || {
        let n = node.metric("inlet_kafka_producer_states_forgotten_total");
        (n >= 21.0).then_some(n)
    });
    assert_eq!(forgotten, 21.0, "30 producers, 9 kept");
    common::wait_until(30, "the gauge to show the nine kept", || {
        (node.metric("inlet_kafka_producer_states") == 9.0).then_some(())
    });
    assert_eq!(end_offset(&mut c), 30);
    // The newest is kept: its retry is a duplicate, its gap is refused.
    assert_eq!(produce(&mut c, batch(1029, 0, 0, 1, "p")), (0, offsets[29]));
    assert_eq!(end_offset(&mut c), 30, "the retry was not stored again");
    let (code, _) = produce(&mut c, batch(1029, 0, 7, 1, "gap"));
    assert_eq!(code, OUT_OF_ORDER_SEQUENCE_NUMBER);
    // The oldest was forgotten: sequence 7 is taken, as from a producer whose state expired.
    assert_eq!(produce(&mut c, batch(1000, 0, 7, 1, "late")), (0, 30));
    drop(c);
    node.stop();
}

#[test]
fn acks_zero_stores_without_answering() {
    let (_dir, node) = temp_node(&[]);
    let mut c = Conn::open(&node);
    let request = ProduceRequest::default()
        .with_acks(0)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("idem")))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch(-1, -1, -1, 4, "fire-and-forget")))])]);
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::Produce as i16)
        .with_request_api_version(9)
        .with_correlation_id(777)
        .with_client_id(Some(StrBytes::from_static_str("acks0")));
    c.s.write_all(&encode_request(&header, &RequestKind::Produce(request)).expect("encode"))
        .expect("write");
    // The next answer on the connection is the ListOffsets one (`call` checks the
    // correlation id): nothing was sent for the produce.
    let end = common::wait_until(30, "the acks=0 records to be stored", || {
        let end = end_offset(&mut c);
        (end == 4).then_some(end)
    });
    assert_eq!(end, 4);
    drop(c);
    node.stop();
}
