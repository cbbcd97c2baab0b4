//! The Kafka endpoint and the Schema Registry with the Java clients: Apache kafka-clients 4.3.0
//! (AdminClient, an idempotent producer, a consumer group) and Confluent's `KafkaAvroSerializer`
//! through Inlet's registry, from `tests/clients/java/InletClients.java`.
//!
//! The jars come from `scripts/test-env.sh` (`INLET_TEST_JAVA_LIBS`); `javac` and `java` from
//! the machine. Without them the test is skipped locally and fails in CI.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::python::run;
use common::{require, Node};

fn java_libs() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("INLET_TEST_JAVA_LIBS")?);
    dir.join("kafka-clients-4.3.0.jar").is_file().then_some(dir)
}

fn has(tool: &str) -> bool {
    Command::new(tool)
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn java_kafka_clients_4_3_and_the_avro_serializer() {
    let libs = java_libs();
    if !require(
        "the Java client jars (INLET_TEST_JAVA_LIBS) and a JDK",
        libs.is_some() && has("javac") && has("java"),
    ) {
        return;
    }
    let libs = libs.expect("checked");
    let classes = tempfile::tempdir().expect("tempdir");
    let classpath = format!("{}/*", libs.display());
    let source =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients/java/InletClients.java");
    let compiled = Command::new("javac")
        .arg("-d")
        .arg(classes.path())
        .args(["-cp", &classpath])
        .arg(&source)
        .output()
        .expect("javac runs");
    assert!(
        compiled.status.success(),
        "javac failed:\n{}",
        String::from_utf8_lossy(&compiled.stderr)
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(
        dir.path(),
        &["--kafka-config", "group.initial.rebalance.delay.ms=0"],
    );
    let registry = format!("http://{}", node.registry);
    let (status, output) = run(
        "java".as_ref(),
        &[
            "-cp".into(),
            format!("{}:{classpath}", classes.path().display()).into(),
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
            "the Java clients failed: {status}\n{output}"
        ),
    }
    assert!(
        output.lines().any(|l| l == "OK") && output.contains("kafka-clients 4.3.0"),
        "the program exited 0 without reaching its end\n{output}"
    );
    node.stop();
}
