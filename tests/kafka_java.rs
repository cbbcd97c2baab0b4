//! The Kafka endpoint and the Schema Registry with the Java clients: Apache kafka-clients 4.3.0
//! and 3.9.1 (AdminClient, an idempotent producer, a consumer group) and Confluent's
//! `KafkaAvroSerializer` through Inlet's registry, from `tests/clients/java/InletClients.java`.
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

/// Runs the client program on a fresh node with `classpath`; it must report `version`.
fn run_clients(classes: &Path, classpath: &str, version: &str) {
    let (_dir, node) = temp_node(&["--kafka-config", "group.initial.rebalance.delay.ms=0"]);
    let registry = format!("http://{}", node.registry);
    let (status, output) = run(
        "java".as_ref(),
        &[
            "-cp".into(),
            format!("{}:{classpath}", classes.display()).into(),
            "InletClients".into(),
            node.kafka.clone().into(),
            registry.into(),
        ],
        Duration::from_secs(300),
    );
    match status {
        None => panic!("the Java clients did not finish within 300 s\n{output}"),
        Some(status) => assert!(
            status.success(),
            "the Java clients {version} failed: {status}\n{output}"
        ),
    }
    assert!(
        output.lines().any(|l| l == "OK") && output.contains(&format!("kafka-clients {version},")),
        "kafka-clients {version}: the program exited 0 without reaching its end\n{output}"
    );
    node.stop();
}

#[test]
fn java_kafka_clients_4_3_and_3_9_and_the_avro_serializer() {
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
    let classes = common::compile_java("InletClients.java", &libs);
    let all = format!("{}/*", libs.display());
    run_clients(classes.path(), &all, "4.3.0");
    // 3.9.1 ahead of the same serializers and codecs, 4.3.0 left out.
    let older = classpath(
        &[libs_3_9.join("kafka-clients.jar")],
        &libs,
        "kafka-clients-4.3.0.jar",
    );
    run_clients(classes.path(), &older, "3.9.1");
}
