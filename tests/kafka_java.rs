//! The Kafka endpoint and the Schema Registry with the Java clients, each program run with Apache
//! kafka-clients 4.3.0 and then 3.9.1, on a fresh node each time:
//! - `tests/clients/java/InletClients.java`: the AdminClient, an idempotent producer, a consumer
//!   group, and Confluent's `KafkaAvroSerializer` through Inlet's registry;
//! - `tests/clients/java/TxnClients.java`: transactions. Commits and aborts across partitions
//!   read with `read_committed` and `read_uncommitted` (last stable offset, no control
//!   records), an open transaction holding `read_committed` back, read-process-write with the
//!   group's offsets in the transaction, zombie fencing, the broker aborting a timed-out
//!   transaction, and a `transaction.timeout.ms` above the broker's `transaction.max.timeout.ms`
//!   refused. Its node aborts timed-out transactions every 500 ms and caps their timeout at
//!   60 s.
//!
//! Each run's consumers must have fetched in fetch sessions (KIP-227): the node counts
//! incremental fetches.
//!
//! The jars come from `scripts/test-env.sh` (`INLET_TEST_JAVA_LIBS`, `INLET_TEST_JAVA_LIBS_3_9`);
//! `javac` and `java` from the machine. Without them the test is skipped locally and fails in
//! CI.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::temp_node;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::python::run;
use common::require;

/// The class path of `dir`'s jars, with `first` ahead of them and the jars `without` left out.
fn classpath(first: &[PathBuf], dir: &Path, without: &str) -> String {
    let mut jars: Vec<PathBuf> = first.to_vec();
    let mut rest: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("jar folder")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "jar"))
        .filter(|p| p.file_name().is_none_or(|n| n != without))
        .collect();
    rest.sort();
    jars.extend(rest);
    jars.iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(":")
}

/// The node flags of the `InletClients` run.
const CLIENTS_NODE: &[&str] = &["--kafka-config", "group.initial.rebalance.delay.ms=0"];

/// The node flags of the `TxnClients` run: timed-out transactions are looked for every 500 ms
/// (so the program's 3 s transaction is aborted soon after it expires), and a transaction may
/// last at most 60 s (the program asks for 120 s and must be refused).
const TXN_NODE: &[&str] = &[
    "--kafka-config",
    "group.initial.rebalance.delay.ms=0",
    "--kafka-config",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=500",
    "--kafka-config",
    "transaction.max.timeout.ms=60000",
];

/// Runs the client program `class` on a fresh node started with `node_flags`, with `classpath`;
/// its arguments are the node's Kafka address and registry URL. It must exit 0, print `OK` and
/// report kafka-clients `version`.
fn run_clients(class: &str, node_flags: &[&str], classes: &Path, classpath: &str, version: &str) {
    let (_dir, node) = temp_node(node_flags);
    let registry = format!("http://{}", node.registry);
    let (status, output) = run(
        "java".as_ref(),
        &[
            "-cp".into(),
            format!("{}:{classpath}", classes.display()).into(),
            class.into(),
            node.kafka.clone().into(),
            registry.into(),
        ],
        Duration::from_secs(300),
    );
    match status {
        None => panic!("{class} did not finish within 300 s\n{output}"),
        Some(status) => assert!(
            status.success(),
            "{class} with kafka-clients {version} failed: {status}\n{output}"
        ),
    }
    assert!(
        output.lines().any(|l| l == "OK") && output.contains(&format!("kafka-clients {version},")),
        "{class} with kafka-clients {version}: the program exited 0 without reaching its end\n{output}"
    );
    // The consumers fetched in sessions (KIP-227), as the Java client does when the broker
    // opens them.
    let (status, metrics) = node.http_get("/metrics");
    assert_eq!(status, 200);
    let incremental: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("inlet_kafka_fetch_sessions_incremental_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("the incremental fetch metric");
    assert!(
        incremental > 0,
        "{class} with kafka-clients {version}: no incremental fetch"
    );
    node.stop();
}

/// Compiles `tests/clients/java/<class>.java` and runs it with kafka-clients 4.3.0, then with
/// 3.9.1 (ahead of the same serializers and codecs, 4.3.0 left out), each on a fresh node
/// started with `node_flags`. Skipped (a failure in CI) without the jars or a JDK.
fn run_with_both_clients(class: &str, node_flags: &[&str]) {
    let Some(libs) = common::java_clients() else {
        return;
    };
    let libs_3_9 = std::env::var_os("INLET_TEST_JAVA_LIBS_3_9")
        .map(PathBuf::from)
        .filter(|d| d.join("kafka-clients.jar").is_file());
    if !require(
        "kafka-clients 3.9.1 (INLET_TEST_JAVA_LIBS_3_9)",
        libs_3_9.is_some(),
    ) {
        return;
    }
    let libs_3_9 = libs_3_9.expect("checked");
    let classes = common::compile_java(&format!("{class}.java"), &libs);
    let all = format!("{}/*", libs.display());
    run_clients(class, node_flags, classes.path(), &all, "4.3.0");
    let older = classpath(
        &[libs_3_9.join("kafka-clients.jar")],
        &libs,
        "kafka-clients-4.3.0.jar",
    );
    run_clients(class, node_flags, classes.path(), &older, "3.9.1");
}

#[test]
fn java_kafka_clients_4_3_and_3_9_and_the_avro_serializer() {
    run_with_both_clients("InletClients", CLIENTS_NODE);
}

#[test]
fn java_transactions_kafka_clients_4_3_and_3_9() {
    run_with_both_clients("TxnClients", TXN_NODE);
}
