//! What only the root crate's end-to-end tests share: the `inlet` executable this crate builds,
//! on the kit's launcher (`inlet_test_support::node`), and the table topic client scripts of
//! `tests/clients/`. The launcher, the Python runner (`python`) and the raw Kafka wire helpers
//! (`wire`) are the kit's.
#![allow(dead_code, unused_imports)] // each test binary uses some of it

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub(crate) use inlet_test_support::node::{http_get, poll_until, wait_until, Node};
pub(crate) use inlet_test_support::process::tool_runs;
/// A required external tool or service for client tests: in CI (`CI` set) its absence fails
/// the test; elsewhere the test is skipped and the skip is counted (`inlet_test_support`).
pub(crate) use inlet_test_support::{python, require, service_env, wire};

/// The `inlet` executable under test.
pub(crate) const INLET: &str = env!("CARGO_BIN_EXE_inlet");

/// kafkajs (`INLET_TEST_KAFKAJS`, installed by scripts/test-env.sh) with node, or `None` (the
/// test is skipped; CI requires them).
pub(crate) fn kafkajs() -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("INLET_TEST_KAFKAJS")
        .filter(|d| !d.is_empty())
        .map(std::path::PathBuf::from)
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

/// `inlet users add NAME --password PASSWORD` on the node data directory `data_dir`; the
/// test fails if it does.
pub(crate) fn add_user(data_dir: &Path, name: &str, password: &str) {
    let added = inlet_test_support::process::run_captured(
        Command::new(INLET)
            .args(["users", "add", name, "--password", password, "--data-dir"])
            .arg(data_dir),
        None,
        std::time::Duration::from_secs(60),
        std::time::Duration::from_millis(100),
    );
    assert!(
        added.success(),
        "inlet users add {name}: {}",
        added.output()
    );
}

/// A node on `dir/node` with the ACL authorizer on, `super.users=User:admin`, a PLAINTEXT and
/// a SASL_PLAINTEXT listener, `config_toml` as its config file, and the users `admin`,
/// `alice` and `bob` (passwords `<name>-secret`); with the SASL listener's address.
pub(crate) fn secured_node(dir: &Path, config_toml: &str) -> (Node, String) {
    secured_node_with(dir, config_toml, &[])
}

/// [`secured_node`] with more `--kafka-config` settings (`KEY=VALUE` each).
pub(crate) fn secured_node_with(
    dir: &Path,
    config_toml: &str,
    kafka_configs: &[&str],
) -> (Node, String) {
    let data = dir.join("node");
    for user in ["admin", "alice", "bob"] {
        add_user(&data, user, &format!("{user}-secret"));
    }
    let config = dir.join("inlet.toml");
    std::fs::write(&config, config_toml).expect("the config file is written");
    let sasl = format!("127.0.0.1:{}", inlet_test_support::node::free_port());
    let listeners = format!(
        "listeners=PLAINTEXT://127.0.0.1:{},SASL_PLAINTEXT://{sasl}",
        inlet_test_support::node::free_port()
    );
    let config = config.to_string_lossy();
    let mut args = vec![
        "--config",
        &config,
        "--kafka-config",
        &listeners,
        "--kafka-config",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "--kafka-config",
        "super.users=User:admin",
    ];
    for c in kafka_configs {
        args.extend(["--kafka-config", c]);
    }
    let node = <Node as Start>::start(&data, &args);
    (node, sasl)
}

/// Starts `inlet serve` on `data_dir` with `extra` arguments that it must refuse; returns its
/// output (the test fails if it starts, or stays up for a minute).
pub(crate) fn refused_at_start(data_dir: &Path, extra: &[String]) -> String {
    let run = inlet_test_support::process::run_captured(
        &mut serve_command(data_dir, extra),
        None,
        std::time::Duration::from_secs(60),
        std::time::Duration::from_millis(100),
    );
    let text = run.output();
    assert!(!run.success(), "{extra:?} was not refused: {text}");
    text
}

/// `inlet serve` on `data_dir`, listening on free ports, with `extra` arguments.
pub(crate) fn serve_command<S: AsRef<std::ffi::OsStr>>(data_dir: &Path, extra: &[S]) -> Command {
    inlet_test_support::node::serve_command(INLET.as_ref(), data_dir, extra)
}

/// Starting [`Node`]s of this crate's `inlet`.
pub(crate) trait Start {
    /// Starts a node on `data_dir` with extra `serve` arguments.
    fn start(data_dir: &Path, extra: &[&str]) -> Node;
    /// [`Start::start`] with extra environment variables for the node.
    fn start_with_env(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Node;
}

impl Start for Node {
    fn start(data_dir: &Path, extra: &[&str]) -> Node {
        Node::launch(INLET.as_ref(), data_dir, extra, &[])
    }

    fn start_with_env(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Node {
        Node::launch(INLET.as_ref(), data_dir, extra, env)
    }
}

/// Runs one phase of a table topic client script (`script BOOTSTRAP REGISTRY_URL ICEBERG_URI
/// PHASE`) against `node`; it must exit 0 and print OK. In its `after-restart` phase the
/// script also reads with DuckDB: only a machine without DuckDB's packages skips that, never
/// CI. Returns the script's output.
pub(crate) fn run_table_topic_phase(
    python: &Path,
    script_name: &str,
    node: &Node,
    phase: &str,
    timeout: Duration,
) -> String {
    let (status, output) = python::run(
        python,
        &[
            python::script(script_name).into(),
            node.kafka.clone().into(),
            format!("http://{}", node.registry).into(),
            format!("http://{}/iceberg", node.http).into(),
            phase.into(),
        ],
        timeout,
    );
    assert!(
        status.is_some_and(|s| s.success()) && output.contains("OK"),
        "the {phase} phase of {script_name} failed ({status:?}):\n{output}"
    );
    if phase == "after-restart" && std::env::var_os("CI").is_some() {
        assert!(
            output.contains("DuckDB OK"),
            "DuckDB did not check:\n{output}"
        );
    }
    output
}

/// A node started in a new data directory, after which a one-phase table topic client
/// script (`script BOOTSTRAP REGISTRY_URL ICEBERG_URI run`) ran against it and printed OK.
pub(crate) struct ScriptRun {
    pub node: Node,
    /// What the script printed.
    pub output: String,
    _dir: tempfile::TempDir,
}

/// Starts a node and runs `script`'s `run` phase with confluent-kafka (Avro) and pyiceberg;
/// None when that Python is missing and the test is skipped (a failure in CI).
pub(crate) fn run_table_topic_script(script: &str) -> Option<ScriptRun> {
    let python = avro_python()?;
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(dir.path(), &[]);
    let output = run_table_topic_phase(&python, script, &node, "run", Duration::from_secs(240));
    Some(ScriptRun {
        node,
        output,
        _dir: dir,
    })
}

/// A Python with confluent-kafka's Avro serializer and pyiceberg; None after skipping the
/// test (a failure in CI).
pub(crate) fn avro_python() -> Option<PathBuf> {
    python::require_python(
        "import confluent_kafka.schema_registry.avro, pyiceberg.catalog.rest",
        "confluent-kafka[avro] and pyiceberg",
    )
}

/// Is there a `java` that runs (for Spark)?
pub(crate) fn java() -> bool {
    tool_runs("java", "-version")
}

/// The folder of the Java client jars (kafka-clients 4.3.0 and Confluent's serializers, from
/// `scripts/test-env.sh`'s `INLET_TEST_JAVA_LIBS`) when it and a JDK (`javac`, `java`) are
/// there; None after skipping the test (a failure in CI).
pub(crate) fn java_clients() -> Option<PathBuf> {
    let libs = std::env::var_os("INLET_TEST_JAVA_LIBS")
        .map(PathBuf::from)
        .filter(|dir| dir.join("kafka-clients-4.3.0.jar").is_file());
    let available = libs.is_some() && tool_runs("javac", "-version") && java();
    if require(
        "the Java client jars (INLET_TEST_JAVA_LIBS) and a JDK",
        available,
    ) {
        libs
    } else {
        None
    }
}

/// Compiles `tests/clients/java/<name>` against the jars of `libs`; the classes' folder.
pub(crate) fn compile_java(name: &str, libs: &Path) -> tempfile::TempDir {
    let classes = tempfile::tempdir().expect("tempdir");
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients/java")
        .join(name);
    let compiled = Command::new("javac")
        .arg("-d")
        .arg(classes.path())
        .arg("-cp")
        .arg(format!("{}/*", libs.display()))
        .arg(&source)
        .output()
        .expect("javac runs");
    assert!(
        compiled.status.success(),
        "javac {name} failed:\n{}",
        String::from_utf8_lossy(&compiled.stderr)
    );
    classes
}

/// A Python with pyiceberg, pyspark and Iceberg's Spark runtime jar (from the PyPI package
/// snowpark-connect-deps-iceberg), and a `java` that runs; None after skipping the test (a
/// failure in CI) when either is missing.
pub(crate) fn require_spark() -> Option<PathBuf> {
    let python = python::python(
        "import pyiceberg.catalog.rest, pyarrow, pyspark, snowpark_connect_deps_iceberg, os; \
         assert os.path.isfile(os.path.join(os.path.dirname(snowpark_connect_deps_iceberg.__file__), \
         'jars', 'iceberg-spark-runtime-3.5_2.12-1.10.2.jar'))",
    );
    if !require(
        "python with pyiceberg, pyspark and the Iceberg Spark runtime jar",
        python.is_some(),
    ) || !require("java (for Spark)", java())
    {
        return None;
    }
    python
}

/// A new empty database on the PostgreSQL at `url`; returns its URL
/// (`inlet_test_support::fresh_postgres_database`, for synchronous tests).
pub(crate) fn fresh_postgres_database(url: &str) -> String {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(inlet_test_support::fresh_postgres_database(url))
}

/// A node started in a new temporary directory, with extra `serve` arguments. Keep the
/// directory (first) as long as the node: `let (_dir, node) = temp_node(&[]);`.
/// [`temp_node`] whose table coordinators sweep orphan files every second, at the youngest
/// age they allow (ten commit intervals): for tests where other engines write to the tables,
/// so that a sweep deleting a file any snapshot or round still names fails them.
pub(crate) fn sweeping_node() -> (tempfile::TempDir, Node) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("sweeping.toml");
    std::fs::write(
        &config,
        "[tables]\norphan_files_older_than_ms = 1\norphan_files_interval_ms = 1000\n",
    )
    .expect("config");
    let node = Node::start(
        &dir.path().join("node"),
        &["--config", &config.to_string_lossy()],
    );
    (dir, node)
}

pub(crate) fn temp_node(extra: &[&str]) -> (tempfile::TempDir, Node) {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(dir.path(), extra);
    (dir, node)
}

/// The node's base URL over HTTP.
pub(crate) fn http_url(node: &Node) -> String {
    format!("http://{}", node.http)
}

/// The node's schema registry URL.
pub(crate) fn registry_url(node: &Node) -> String {
    format!("http://{}", node.registry)
}

/// The node's Iceberg REST catalog URI.
pub(crate) fn iceberg_uri(node: &Node) -> String {
    format!("http://{}/iceberg", node.http)
}

/// A client command (`inlet topic|produce|consume|…`) run against `node`'s Kafka listener and
/// registry (`INLET_BOOTSTRAP_SERVER`, `INLET_REGISTRY`), with `stdin`; its exit and output.
pub(crate) fn inlet_client(
    node: &Node,
    args: &[&str],
    stdin: Option<&str>,
) -> inlet_test_support::process::Captured {
    inlet_test_support::process::run_captured(
        Command::new(INLET)
            .args(args)
            .env("INLET_BOOTSTRAP_SERVER", &node.kafka)
            .env("INLET_REGISTRY", registry_url(node)),
        stdin.map(str::as_bytes),
        Duration::from_secs(120),
        Duration::from_millis(50),
    )
}

/// [`inlet_client`], which must exit 0 (else the test fails with its output).
pub(crate) fn inlet_client_ok(node: &Node, args: &[&str], stdin: Option<&str>) -> String {
    let c = inlet_client(node, args, stdin);
    assert!(c.success(), "inlet {args:?}:\n{}", c.output());
    c.stdout
}

/// `inlet ARGS`: it must exit 0 (else the test fails with its stderr); returns its stdout.
pub(crate) fn inlet_ok(args: &[&str]) -> Vec<u8> {
    let out = Command::new(INLET).args(args).output().expect("inlet runs");
    assert!(
        out.status.success(),
        "inlet {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `inlet query --format FORMAT SQL` against `node`'s server: it must exit 0; returns what it
/// printed, trimmed.
pub(crate) fn inlet_query(node: &Node, format: &str, sql: &str) -> String {
    let server = http_url(node);
    let out = inlet_ok(&["query", "--server", &server, "--format", format, sql]);
    String::from_utf8_lossy(&out).trim().to_string()
}

/// The rows of `sql` against `node`, as JSON (`inlet query --format json`).
pub(crate) fn query_json(node: &Node, sql: &str) -> serde_json::Value {
    serde_json::from_str(&inlet_query(node, "json", sql)).expect("JSON rows")
}

/// [`query_json`], or the error `inlet query` printed: for a check that polls across a fault
/// (a node that lost its metadata store a moment ago may still fail a query).
pub(crate) fn try_query_json(node: &Node, sql: &str) -> Result<serde_json::Value, String> {
    let server = http_url(node);
    let out = Command::new(INLET)
        .args(["query", "--server", &server, "--format", "json", sql])
        .output()
        .expect("inlet runs");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("not JSON rows: {e}"))
}

/// The records a table topic's table has committed, summed over its partitions, as `node`'s
/// coordinator reports them (`GET /v1/tables/{namespace}/{table}`); 0 while it reports none.
pub(crate) fn committed_records(node: &Node, namespace: &str, table: &str) -> u64 {
    let (status, body) = node.http_get(&format!("/v1/tables/{namespace}/{table}"));
    if status != 200 {
        return 0;
    }
    let json: serde_json::Value = serde_json::from_str(&body).expect("status JSON");
    json["committed_offsets"]
        .as_object()
        .map(|o| o.values().filter_map(|v| v.as_u64()).sum())
        .unwrap_or(0)
}

/// A single-threaded Tokio runtime for a test's client calls.
pub(crate) fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Sends `payloads` to `topic` one after another with a librdkafka producer (`config` on top
/// of the node's bootstrap servers and a 20 s message timeout); every one must be acked, or
/// the test fails saying `what`.
pub(crate) fn rdkafka_send(
    node: &Node,
    config: &[(&str, &str)],
    topic: &str,
    payloads: impl IntoIterator<Item = String>,
    what: &str,
) {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let mut client = rdkafka::config::ClientConfig::new();
    client
        .set("bootstrap.servers", &node.kafka)
        .set("message.timeout.ms", "20000");
    for (k, v) in config {
        client.set(*k, *v);
    }
    let producer: FutureProducer = client.create().expect("producer");
    current_thread_runtime().block_on(async {
        for payload in payloads {
            producer
                .send(
                    FutureRecord::<(), _>::to(topic).payload(&payload),
                    Duration::from_secs(20),
                )
                .await
                .unwrap_or_else(|(e, _)| panic!("produce to {topic}: {what}: {e}"));
        }
    });
}

/// Kafka requests the protocol-level tests build by hand (to be sent with [`wire::Conn`]).
pub(crate) mod requests {
    use bytes::Bytes;
    use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{
        BrokerId, CreateTopicsRequest, ListOffsetsRequest, ProduceRequest, RequestKind, TopicName,
    };
    use kafka_protocol::protocol::StrBytes;

    /// The topic name `name` on the wire.
    pub(crate) fn topic_name(name: &str) -> TopicName {
        TopicName(StrBytes::from_string(name.to_string()))
    }

    /// A Produce request (acks=all, a 10 s timeout) of `records` (a raw record set) to
    /// partition 0 of `topic`.
    pub(crate) fn produce(topic: &str, records: Bytes) -> RequestKind {
        RequestKind::Produce(
            ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(10_000)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(topic_name(topic))
                    .with_partition_data(vec![PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(records))])]),
        )
    }

    /// A ListOffsets request (as a consumer) for partition 0 of `topic` at `timestamp` (-1: the
    /// end).
    pub(crate) fn list_offsets(topic: &str, timestamp: i64) -> RequestKind {
        RequestKind::ListOffsets(
            ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![ListOffsetsTopic::default()
                    .with_name(topic_name(topic))
                    .with_partitions(vec![ListOffsetsPartition::default()
                        .with_partition_index(0)
                        .with_timestamp(timestamp)])]),
        )
    }

    /// A Fetch request (as a consumer, no session, 1 MiB at most, no wait) of `partition` of
    /// `topic` from offset 0, naming `current_leader_epoch` (-1: none).
    pub(crate) fn fetch_from_start(
        topic: &str,
        partition: i32,
        current_leader_epoch: i32,
    ) -> RequestKind {
        use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
        RequestKind::Fetch(
            kafka_protocol::messages::FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_bytes(1 << 20)
                .with_session_epoch(-1)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(topic_name(topic))
                    .with_partitions(vec![FetchPartition::default()
                        .with_partition(partition)
                        .with_current_leader_epoch(current_leader_epoch)
                        .with_fetch_offset(0)
                        .with_partition_max_bytes(1 << 20)])]),
        )
    }

    /// A CreateTopics request (a 10 s timeout) of one topic `name` with `partitions`
    /// partitions, replication factor 1 and `configs`.
    pub(crate) fn create_topic(
        name: &str,
        partitions: i32,
        configs: &[(&str, &str)],
    ) -> RequestKind {
        let configs = configs
            .iter()
            .map(|(k, v)| {
                CreatableTopicConfig::default()
                    .with_name(StrBytes::from_string(k.to_string()))
                    .with_value(Some(StrBytes::from_string(v.to_string())))
            })
            .collect();
        RequestKind::CreateTopics(
            CreateTopicsRequest::default()
                .with_timeout_ms(10_000)
                .with_topics(vec![CreatableTopic::default()
                    .with_name(topic_name(name))
                    .with_num_partitions(partitions)
                    .with_replication_factor(1)
                    .with_configs(configs)]),
        )
    }

    /// An IncrementalAlterConfigs request on the broker resource `resource` (`""` for the
    /// cluster-wide default, or a node id) of `ops`: (name, operation, value), the operation
    /// as Kafka numbers it (0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT).
    pub(crate) fn alter_broker_configs(
        resource: &str,
        ops: &[(&str, i8, Option<&str>)],
    ) -> RequestKind {
        use kafka_protocol::messages::incremental_alter_configs_request::{
            AlterConfigsResource, AlterableConfig,
        };
        let configs = ops
            .iter()
            .map(|(name, op, value)| {
                AlterableConfig::default()
                    .with_name(StrBytes::from_string(name.to_string()))
                    .with_config_operation(*op)
                    .with_value(value.map(|v| StrBytes::from_string(v.to_string())))
            })
            .collect();
        RequestKind::IncrementalAlterConfigs(
            kafka_protocol::messages::IncrementalAlterConfigsRequest::default().with_resources(
                vec![AlterConfigsResource::default()
                    .with_resource_type(4)
                    .with_resource_name(StrBytes::from_string(resource.to_string()))
                    .with_configs(configs)],
            ),
        )
    }
}

/// Sends [`requests::alter_broker_configs`] to `node`; returns the resource's error code and
/// message.
pub(crate) fn alter_broker_configs(
    node: &Node,
    resource: &str,
    ops: &[(&str, i8, Option<&str>)],
) -> (i16, Option<String>) {
    let answer: kafka_protocol::messages::IncrementalAlterConfigsResponse = wire::Conn::open(node)
        .call(
            kafka_protocol::messages::ApiKey::IncrementalAlterConfigs,
            1,
            requests::alter_broker_configs(resource, ops),
        );
    let result = answer.responses.first().expect("one resource answered");
    (
        result.error_code,
        result.error_message.as_ref().map(|m| m.to_string()),
    )
}

/// `node` logged a line containing `needle`; else the test fails saying `what`, with the log.
pub(crate) fn assert_logged(node: &Node, needle: &str, what: &str) {
    let log = node.logs_so_far();
    assert!(log.iter().any(|l| l.contains(needle)), "{what}:\n{log:#?}");
}

/// The Parquet files directly under `dir` (none if it is missing).
pub(crate) fn parquet_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.path().extension().is_some_and(|x| x == "parquet"))
                .count()
        })
        .unwrap_or(0)
}

/// Runs the catalog client `script ICEBERG_URI` against a new node; it must print OK. The
/// table `table` (`namespace/name`) it wrote in two inserts must then be in the node's object
/// store, with at least a data file for each.
pub(crate) fn run_catalog_client(python: &Path, script: &str, timeout: Duration, table: &str) {
    let (dir, node) = temp_node(&[]);
    python::run_client(python, script, &[&iceberg_uri(&node)], timeout);
    let data = dir
        .path()
        .join("objects/warehouse")
        .join(table)
        .join("data");
    let files = parquet_files(&data);
    assert!(
        files >= 2,
        "two inserts, {files} data files under {}",
        data.display()
    );
    node.stop();
}

/// KIP-890's check of transactional batches, driven over the wire (`tests/kafka_transactions.rs`
/// on one node, `tests/cluster.rs` with the coordinator and the partition's leader on two).
pub(crate) mod txn_checks {
    use super::wire::{encode_batch, BatchOptions, Conn};
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::ResponseError;

    fn s(v: &str) -> StrBytes {
        StrBytes::from_string(v.to_string())
    }

    /// Error codes a client retries: a leader or coordinator that stood down for a moment (a
    /// node whose lease renewal ran late under load), or a state row not read in time.
    const RETRIABLE: &[i16] = &[6, 15, 16, 19, 51];

    /// `call`'s answer once it is not a retriable error code (the first of the pair), asking
    /// again 100 ms apart for 30 s at most.
    fn answered<T>(mut call: impl FnMut() -> (i16, T)) -> (i16, T) {
        for _ in 0..300 {
            let (code, value) = call();
            if !RETRIABLE.contains(&code) {
                return (code, value);
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        call()
    }

    /// Creates `topic` with one partition through `conn`.
    pub(crate) fn create_topic(conn: &mut Conn, topic: &str) {
        let created: CreateTopicsResponse = conn.call(
            ApiKey::CreateTopics,
            5,
            RequestKind::CreateTopics(
                CreateTopicsRequest::default()
                    .with_topics(vec![CreatableTopic::default()
                        .with_name(TopicName(s(topic)))
                        .with_num_partitions(1)
                        .with_replication_factor(1)])
                    .with_timeout_ms(10_000),
            ),
        );
        assert_eq!(created.topics[0].error_code, 0, "{created:?}");
    }

    /// A transactional batch is stored only in its producer's open transaction that
    /// partition 0 of `topic` was added to. A batch before AddPartitionsToTxn, and a late batch
    /// of a transaction already aborted (at the same epoch), answer `INVALID_TXN_STATE` and
    /// leave the partition's last stable offset at its end; a batch of a fenced epoch answers
    /// `INVALID_PRODUCER_EPOCH`. The transaction requests go to `coordinator` (the node that
    /// coordinates `txn_id`), Produce and ListOffsets to `leader` (the partition's).
    pub(crate) fn batches_need_an_open_transaction(
        coordinator: &mut Conn,
        leader: &mut Conn,
        txn_id: &str,
        topic: &str,
    ) {
        let init = |conn: &mut Conn| -> (i64, i16) {
            let (code, r) = answered(|| {
                let r: InitProducerIdResponse = conn.call(
                    ApiKey::InitProducerId,
                    4,
                    RequestKind::InitProducerId(
                        InitProducerIdRequest::default()
                            .with_transactional_id(Some(TransactionalId(s(txn_id))))
                            .with_transaction_timeout_ms(60_000)
                            .with_producer_id(ProducerId(-1))
                            .with_producer_epoch(-1),
                    ),
                );
                (r.error_code, r)
            });
            assert_eq!(code, 0, "{r:?}");
            (r.producer_id.0, r.producer_epoch)
        };
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
            answered(|| {
                let r: ProduceResponse = conn.call(
                    ApiKey::Produce,
                    9,
                    RequestKind::Produce(
                        ProduceRequest::default()
                            .with_transactional_id(Some(TransactionalId(s(txn_id))))
                            .with_acks(-1)
                            .with_timeout_ms(10_000)
                            .with_topic_data(vec![TopicProduceData::default()
                                .with_name(TopicName(s(topic)))
                                .with_partition_data(vec![PartitionProduceData::default()
                                    .with_index(0)
                                    .with_records(Some(batch.clone()))])]),
                    ),
                );
                (r.responses[0].partition_responses[0].error_code, ())
            })
            .0
        };
        let add = |conn: &mut Conn, (pid, epoch): (i64, i16)| {
            let (code, r) = answered(|| {
                let r: AddPartitionsToTxnResponse = conn.call(
                    ApiKey::AddPartitionsToTxn,
                    3,
                    RequestKind::AddPartitionsToTxn(
                        AddPartitionsToTxnRequest::default()
                            .with_v3_and_below_transactional_id(TransactionalId(s(txn_id)))
                            .with_v3_and_below_producer_id(ProducerId(pid))
                            .with_v3_and_below_producer_epoch(epoch)
                            .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                                .with_name(TopicName(s(topic)))
                                .with_partitions(vec![0])]),
                    ),
                );
                let code =
                    r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code;
                (code, r)
            });
            assert_eq!(code, 0, "{r:?}");
        };
        let end = |conn: &mut Conn, (pid, epoch): (i64, i16), commit: bool| {
            let (code, r) = answered(|| {
                let r: EndTxnResponse = conn.call(
                    ApiKey::EndTxn,
                    3,
                    RequestKind::EndTxn(
                        EndTxnRequest::default()
                            .with_transactional_id(TransactionalId(s(txn_id)))
                            .with_producer_id(ProducerId(pid))
                            .with_producer_epoch(epoch)
                            .with_committed(commit),
                    ),
                );
                (r.error_code, r)
            });
            assert_eq!(code, 0, "{r:?}");
        };
        // (last stable offset, high watermark)
        let stable_end = |conn: &mut Conn| -> (i64, i64) {
            let ask = |conn: &mut Conn, isolation: i8| -> i64 {
                let (code, r) = answered(|| {
                    let r: ListOffsetsResponse = conn.call(
                        ApiKey::ListOffsets,
                        5,
                        RequestKind::ListOffsets(
                            ListOffsetsRequest::default()
                                .with_replica_id(BrokerId(-1))
                                .with_isolation_level(isolation)
                                .with_topics(vec![ListOffsetsTopic::default()
                                    .with_name(TopicName(s(topic)))
                                    .with_partitions(vec![ListOffsetsPartition::default()
                                        .with_partition_index(0)
                                        .with_timestamp(-1)])]),
                        ),
                    );
                    (r.topics[0].partitions[0].error_code, r)
                });
                assert_eq!(code, 0, "{r:?}");
                r.topics[0].partitions[0].offset
            };
            (ask(conn, 1), ask(conn, 0))
        };
        let invalid_txn_state = ResponseError::InvalidTxnState.code();
        let (pid, epoch) = init(coordinator);
        // Not added yet: refused, nothing stored.
        assert_eq!(produce(leader, (pid, epoch), 0), invalid_txn_state);
        assert_eq!(stable_end(leader), (0, 0));
        add(coordinator, (pid, epoch));
        assert_eq!(produce(leader, (pid, epoch), 0), 0);
        assert_eq!(
            stable_end(leader),
            (0, 1),
            "the open transaction holds the LSO"
        );
        end(coordinator, (pid, epoch), false);
        assert_eq!(stable_end(leader), (2, 2), "the abort marker settles it");
        // A late batch of the aborted transaction, at the same epoch: refused, and the
        // partition stays settled.
        assert_eq!(produce(leader, (pid, epoch), 1), invalid_txn_state);
        assert_eq!(stable_end(leader), (2, 2));
        // A new instance fences the old epoch.
        let (pid2, epoch2) = init(coordinator);
        assert_eq!(pid2, pid);
        assert!(epoch2 > epoch);
        assert_eq!(
            produce(leader, (pid, epoch), 1),
            ResponseError::InvalidProducerEpoch.code()
        );
        add(coordinator, (pid2, epoch2));
        assert_eq!(produce(leader, (pid2, epoch2), 0), 0);
        end(coordinator, (pid2, epoch2), true);
        assert_eq!(stable_end(leader), (4, 4));
    }
}
