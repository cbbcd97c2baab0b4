//! Kafka transactions with independent clients: each of `tests/clients/txn_*` runs, against a
//! node of its own, commits and aborts across partitions read at both isolation levels, an open
//! transaction holding `read_committed` back (non-transactional records behind it too),
//! read-process-write with the consumer's offsets sent in the transaction, zombie fencing by a
//! second producer with the same transactional id, and a transaction the broker aborts when it
//! times out; it exits non-zero on the first mismatch and prints OK at its end. The clients:
//! confluent-kafka (librdkafka), kafka-python, aiokafka and kafkajs. Over the raw protocol,
//! KIP-890's check: a transactional batch needs its partition in an open transaction.
//!
//! The nodes abort timed-out transactions within half a second of their timeout
//! (`transaction.abort.timed.out.transaction.cleanup.interval.ms=500`), so that the timeout
//! case takes seconds.
//!
//! The Python interpreter: `INLET_TEST_PYTHON`, else the venv that `scripts/test-env.sh` creates
//! (`~/.cache/inlet/venv`); kafkajs: `INLET_TEST_KAFKAJS` (from `scripts/test-env.sh`) and a
//! `node` on PATH. A client that is missing skips its test locally and fails it in CI.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::temp_node;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use common::python::{require_python, run, script};
use common::{require, tool_runs};
use inlet_test_support::process::run_captured;

/// How long a whole script may run before it is killed.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(300);

/// The `serve` arguments of every test's node: groups rebalance at once, and timed-out
/// transactions are aborted every half second.
const NODE_ARGS: &[&str] = &[
    "--kafka-config",
    "group.initial.rebalance.delay.ms=0",
    "--kafka-config",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=500",
];

/// The script `name` must have exited 0 within [`SCRIPT_TIMEOUT`] and printed OK as its last
/// line; prints its output.
fn check_script(name: &str, status: Option<ExitStatus>, output: &str) {
    match status {
        None => panic!("{name} did not finish within {SCRIPT_TIMEOUT:?}\n{output}"),
        Some(status) => assert!(status.success(), "{name} failed: {status}\n{output}"),
    }
    assert!(
        output.contains("\nOK\n"),
        "{name} exited 0 without reaching its end\n{output}"
    );
    println!("{output}");
}

/// Runs the Python client script `name` under `python` against a new node.
fn run_python_script(python: &Path, name: &str) {
    let (_dir, node) = temp_node(NODE_ARGS);
    let (status, output) = run(
        python,
        &[script(name).into_os_string(), node.kafka.clone().into()],
        SCRIPT_TIMEOUT,
    );
    check_script(name, status, &output);
    node.stop();
}

/// The folder whose `node_modules` holds kafkajs (`INLET_TEST_KAFKAJS`) when it and a `node`
/// are there; None after skipping the test (a failure in CI).
fn kafkajs() -> Option<PathBuf> {
    let dir = std::env::var_os("INLET_TEST_KAFKAJS")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .filter(|d| d.join("node_modules/kafkajs/package.json").is_file());
    let available = dir.is_some() && tool_runs("node", "--version");
    if require(
        "node and kafkajs (INLET_TEST_KAFKAJS, from scripts/test-env.sh)",
        available,
    ) {
        dir
    } else {
        None
    }
}

#[test]
fn confluent_kafka_transactions() {
    let Some(python) = require_python("import confluent_kafka", "confluent-kafka") else {
        return;
    };
    run_python_script(&python, "txn_confluent_kafka.py");
}

#[test]
fn kafka_python_transactions() {
    let Some(python) = require_python("import kafka", "kafka-python") else {
        return;
    };
    run_python_script(&python, "txn_kafka_python.py");
}

#[test]
fn aiokafka_transactions() {
    let Some(python) = require_python("import aiokafka", "aiokafka") else {
        return;
    };
    run_python_script(&python, "txn_aiokafka.py");
}

#[test]
fn kafkajs_transactions() {
    let Some(kafkajs) = kafkajs() else {
        return;
    };
    let (_dir, node) = temp_node(NODE_ARGS);
    let name = "txn_kafkajs.js";
    let done = run_captured(
        Command::new("node")
            .env("NODE_PATH", kafkajs.join("node_modules"))
            .arg(script(name))
            .arg(&node.kafka),
        None,
        SCRIPT_TIMEOUT,
        // Waiting for the script to exit, checked every 50 ms.
        Duration::from_millis(50),
    );
    check_script(name, done.status, &done.output());
    node.stop();
}

/// KIP-890's check, over the raw protocol: a transactional batch is stored only in a partition
/// its producer's open transaction added. A batch before AddPartitionsToTxn, and a late batch
/// of a transaction already aborted (at the same epoch), answer `INVALID_TXN_STATE` and leave
/// the partition's last stable offset at its end; a batch of a fenced epoch answers
/// `INVALID_PRODUCER_EPOCH`.
#[test]
fn a_transactional_batch_needs_its_partition_in_an_open_transaction() {
    use common::wire::{encode_batch, BatchOptions, Conn};
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::ResponseError;

    let (_dir, node) = temp_node(&[]);
    let mut conn = Conn::open(&node);
    let s = |v: &str| StrBytes::from_string(v.to_string());
    let created: CreateTopicsResponse = conn.call(
        ApiKey::CreateTopics,
        5,
        RequestKind::CreateTopics(
            CreateTopicsRequest::default()
                .with_topics(vec![
                    kafka_protocol::messages::create_topics_request::CreatableTopic::default()
                        .with_name(TopicName(s("verified")))
                        .with_num_partitions(1)
                        .with_replication_factor(1),
                ])
                .with_timeout_ms(10_000),
        ),
    );
    assert_eq!(created.topics[0].error_code, 0, "{created:?}");
    let init = |conn: &mut Conn| -> (i64, i16) {
        let r: InitProducerIdResponse = conn.call(
            ApiKey::InitProducerId,
            4,
            RequestKind::InitProducerId(
                InitProducerIdRequest::default()
                    .with_transactional_id(Some(TransactionalId(s("verifier"))))
                    .with_transaction_timeout_ms(60_000)
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1),
            ),
        );
        assert_eq!(r.error_code, 0, "{r:?}");
        (r.producer_id.0, r.producer_epoch)
    };
    let (pid, epoch) = init(&mut conn);
    let produce = |conn: &mut Conn, (pid, epoch): (i64, i16), seq: i32| -> i16 {
        let batch = encode_batch(
            &[(
                Some(bytes::Bytes::from_static(b"k")),
                Some(bytes::Bytes::from_static(b"v")),
            )],
            &BatchOptions {
                producer_id: pid,
                producer_epoch: epoch,
                first_sequence: seq,
                transactional: true,
                ..BatchOptions::default()
            },
        );
        let r: ProduceResponse = conn.call(
            ApiKey::Produce,
            9,
            RequestKind::Produce(
                ProduceRequest::default()
                    .with_transactional_id(Some(TransactionalId(s("verifier"))))
                    .with_acks(-1)
                    .with_timeout_ms(10_000)
                    .with_topic_data(vec![TopicProduceData::default()
                        .with_name(TopicName(s("verified")))
                        .with_partition_data(vec![PartitionProduceData::default()
                            .with_index(0)
                            .with_records(Some(batch))])]),
            ),
        );
        r.responses[0].partition_responses[0].error_code
    };
    let add = |conn: &mut Conn, (pid, epoch): (i64, i16)| {
        let r: AddPartitionsToTxnResponse = conn.call(
            ApiKey::AddPartitionsToTxn,
            3,
            RequestKind::AddPartitionsToTxn(
                AddPartitionsToTxnRequest::default()
                    .with_v3_and_below_transactional_id(TransactionalId(s("verifier")))
                    .with_v3_and_below_producer_id(ProducerId(pid))
                    .with_v3_and_below_producer_epoch(epoch)
                    .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                        .with_name(TopicName(s("verified")))
                        .with_partitions(vec![0])]),
            ),
        );
        let code = r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code;
        assert_eq!(code, 0, "{r:?}");
    };
    let end = |conn: &mut Conn, (pid, epoch): (i64, i16), commit: bool| {
        let r: EndTxnResponse = conn.call(
            ApiKey::EndTxn,
            3,
            RequestKind::EndTxn(
                EndTxnRequest::default()
                    .with_transactional_id(TransactionalId(s("verifier")))
                    .with_producer_id(ProducerId(pid))
                    .with_producer_epoch(epoch)
                    .with_committed(commit),
            ),
        );
        assert_eq!(r.error_code, 0, "{r:?}");
    };
    let stable_end = |conn: &mut Conn| -> (i64, i64) {
        use kafka_protocol::messages::list_offsets_request::{
            ListOffsetsPartition, ListOffsetsTopic,
        };
        let ask = |conn: &mut Conn, isolation: i8| -> i64 {
            let r: ListOffsetsResponse = conn.call(
                ApiKey::ListOffsets,
                5,
                RequestKind::ListOffsets(
                    ListOffsetsRequest::default()
                        .with_replica_id(BrokerId(-1))
                        .with_isolation_level(isolation)
                        .with_topics(vec![ListOffsetsTopic::default()
                            .with_name(TopicName(s("verified")))
                            .with_partitions(vec![ListOffsetsPartition::default()
                                .with_partition_index(0)
                                .with_timestamp(-1)])]),
                ),
            );
            r.topics[0].partitions[0].offset
        };
        (ask(conn, 1), ask(conn, 0))
    };
    let invalid_txn_state = ResponseError::InvalidTxnState.code();
    // Not added yet: refused, nothing stored.
    assert_eq!(produce(&mut conn, (pid, epoch), 0), invalid_txn_state);
    assert_eq!(stable_end(&mut conn), (0, 0));
    add(&mut conn, (pid, epoch));
    assert_eq!(produce(&mut conn, (pid, epoch), 0), 0);
    assert_eq!(
        stable_end(&mut conn),
        (0, 1),
        "the open transaction holds the LSO"
    );
    end(&mut conn, (pid, epoch), false);
    assert_eq!(stable_end(&mut conn), (2, 2), "the abort marker settles it");
    // A late batch of the aborted transaction, at the same epoch: refused, and the partition
    // stays settled.
    assert_eq!(produce(&mut conn, (pid, epoch), 1), invalid_txn_state);
    assert_eq!(stable_end(&mut conn), (2, 2));
    // A new instance fences the old epoch.
    let (pid2, epoch2) = init(&mut conn);
    assert_eq!(pid2, pid);
    assert!(epoch2 > epoch);
    assert_eq!(
        produce(&mut conn, (pid, epoch), 1),
        ResponseError::InvalidProducerEpoch.code()
    );
    add(&mut conn, (pid2, epoch2));
    assert_eq!(produce(&mut conn, (pid2, epoch2), 0), 0);
    end(&mut conn, (pid2, epoch2), true);
    assert_eq!(stable_end(&mut conn), (4, 4));
    node.stop();
}
