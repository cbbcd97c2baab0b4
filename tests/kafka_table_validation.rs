//! Produce-time validation of table topics, end to end: `inlet serve` with its Schema
//! Registry, and Python `confluent-kafka`'s Avro, Protobuf and JSON serializers as producers. Valid framed
//! records are stored; unframed, unknown-id, truncated and null values are refused with
//! INVALID_RECORD and not stored; with `errors.tolerance=all` they are accepted.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::temp_node;

use std::ffi::OsString;
use std::time::Duration;

use common::{python, requests, Node};

#[test]
fn table_topics_refuse_records_that_do_not_match_a_registered_schema() {
    let Some(python) = python::require_python(
        "import confluent_kafka.schema_registry.avro, fastavro, confluent_kafka.schema_registry.protobuf",
        "confluent-kafka[avro,schemaregistry,protobuf,json]",
    ) else {
        return;
    };
    let (_dir, node) = temp_node(&[]);
    let args: Vec<OsString> = vec![
        python::script("table_topic_validation.py").into(),
        node.kafka.clone().into(),
        format!("http://{}", node.registry).into(),
    ];
    let (status, output) = python::run(&python, &args, Duration::from_secs(180));
    assert!(
        status.is_some_and(|s| s.success()) && output.contains("OK"),
        "the validation script failed ({status:?}):\n{output}"
    );
    let refused = node.metric("inlet_kafka_invalid_records_refused_total");
    // Five bad Avro records (one a truncated string), two bad Protobuf ones and two bad JSON
    // ones.
    assert_eq!(refused, 9.0, "the nine bad records were counted");
    node.stop();
}

/// The refusal at the protocol level: Produce v8+ carries one message per bad record, and the
/// partition stays empty.
#[test]
fn refused_batches_name_each_bad_record() {
    use bytes::Bytes;
    use common::wire::Conn;
    use kafka_protocol::messages::*;
    use kafka_protocol::records::Compression;

    let (_dir, node) = temp_node(&[]);
    let mut c = Conn::open(&node);
    let created: CreateTopicsResponse = c.call(
        ApiKey::CreateTopics,
        5,
        requests::create_topic("strict", 1, &[("table.topic.enable", "true")]),
    );
    assert_eq!(created.topics[0].error_code, 0);

    let values = [
        Some(Bytes::from_static(b"plain text")),
        None,
        Some(Bytes::from_static(b"\x00\x00\x00")),
    ];
    let batch = common::wire::record_batch(&values, -1, -1, 0, Compression::Lz4);
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, requests::produce("strict", batch));
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 87, "INVALID_RECORD");
    let message = p
        .error_message
        .as_deref()
        .map(|m| m.to_string())
        .unwrap_or_default();
    assert!(message.contains("nothing was stored"), "{message}");
    let indexes: Vec<i32> = p.record_errors.iter().map(|e| e.batch_index).collect();
    assert_eq!(indexes, vec![0, 1, 2]);
    let texts: Vec<String> = p
        .record_errors
        .iter()
        .map(|e| {
            e.batch_index_error_message
                .as_deref()
                .map(|m| m.to_string())
                .unwrap_or_default()
        })
        .collect();
    assert!(texts[0].contains("magic"), "{texts:?}");
    assert!(texts[1].contains("needs a value"), "{texts:?}");
    assert!(texts[2].contains("too short"), "{texts:?}");
    // Nothing was stored, and the connection is still usable.
    let meta: MetadataResponse = c.call(
        ApiKey::Metadata,
        9,
        RequestKind::Metadata(MetadataRequest::default().with_topics(None)),
    );
    assert!(meta
        .topics
        .iter()
        .any(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == "strict")));
    let offsets: ListOffsetsResponse =
        c.call(ApiKey::ListOffsets, 5, requests::list_offsets("strict", -1));
    assert_eq!(
        offsets.topics[0].partitions[0].offset, 0,
        "the partition stays empty"
    );
    let stream_end = node.http_get("/metrics").1;
    assert!(
        stream_end.contains("inlet_kafka_invalid_records_refused_total 3"),
        "metrics"
    );
    drop(c);
    node.stop();
}

/// A writer schema the registry accepts but the table cannot take (Avro int → double): with
/// `errors.tolerance=none` Produce refuses its records, with `all` they go to the dead-letter
/// table with the reason, and neither table stalls (`tests/clients/table_topic_schema_fit.py`).
#[test]
fn schemas_the_table_cannot_take_are_refused_or_dead_lettered() {
    let Some(run) = common::run_table_topic_script("table_topic_schema_fit.py") else {
        return;
    };
    // The rest of `run` (the node's data directory) lives to the end of the test.
    let (node, output) = (run.node, run.output);
    // Over the wire, the refusal names the column and the change.
    let id: u32 = output
        .split("double schema id ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("no schema id in:\n{output}"));
    let mut value = vec![0u8];
    value.extend(id.to_be_bytes());
    value.extend(2.5f64.to_le_bytes());
    let (code, messages) = produce_one(&node, "strict", bytes::Bytes::from(value));
    assert_eq!(code, 87, "INVALID_RECORD");
    assert!(
        messages
            .iter()
            .any(|m| m.contains("column n would change from int to double")),
        "{messages:?}"
    );
    node.stop();
}

/// Produces one record to partition 0 of `topic` (Produce v9); returns the partition's error
/// code and its per-record messages.
fn produce_one(node: &Node, topic: &str, value: bytes::Bytes) -> (i16, Vec<String>) {
    use common::wire::Conn;
    use kafka_protocol::messages::*;
    let batch = common::wire::record_batch(
        &[Some(value)],
        -1,
        -1,
        0,
        kafka_protocol::records::Compression::None,
    );
    let mut c = Conn::open(node);
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, requests::produce(topic, batch));
    let p = &r.responses[0].partition_responses[0];
    let messages = p
        .record_errors
        .iter()
        .filter_map(|e| {
            e.batch_index_error_message
                .as_deref()
                .map(|m| m.to_string())
        })
        .collect();
    (p.error_code, messages)
}

/// Debezium's semantic types as Confluent's AvroConverter registers them (`connect.name` on
/// plain ints and longs): the registry hands the text back with them, and the table holds
/// dates, times and timestamps with the values written
/// (`tests/clients/table_topic_debezium_types.py`).
#[test]
fn debezium_semantic_types_become_dates_times_and_timestamps() {
    let Some(run) = common::run_table_topic_script("table_topic_debezium_types.py") else {
        return;
    };
    assert!(
        run.output
            .contains("dates, times and timestamps as Debezium meant them"),
        "{}",
        run.output
    );
    run.node.stop();
}
