//! A cluster of `inlet serve` processes on one S3 store (moto) and one PostgreSQL, driven by
//! librdkafka (the `rdkafka` crate) with acks=all and idempotence (`cluster/src/node.rs`):
//! - partitions spread over three nodes;
//! - kill -9 of a node under load: its partitions and its consumer group move, every record
//!   acknowledged is read back exactly once at the offset it was acknowledged with, and the
//!   group's committed offsets carry over;
//! - SIGSTOP of a node past its lease, then SIGCONT: a produce it had read meanwhile is not
//!   acknowledged (its commit is fenced), and the record is nowhere;
//! - a node restarted after kill -9 and a fourth node join and take a share;
//! - SIGTERM drains a node: its partitions move and producing goes on;
//! - a node with a live node's id is refused;
//! - a 6-partition table topic through the kill -9 of its node, produced by Python's
//!   confluent-kafka and read back exactly once by pyiceberg;
//! - another writer (pyiceberg's deletes, appends, overwrite and new column) on a table
//!   converted on three nodes, then the kill -9 of its coordinator's node: exactly once;
//! - PostgreSQL and S3 behind a fault-injecting proxy (latency, cut connections, PostgreSQL
//!   refusing connections): nothing acknowledged is lost or doubled;
//! - PostgreSQL silent to one node (a black hole: its connections dropped without a word):
//!   the node stops acknowledging, its partitions move within the failover bound, and it
//!   comes back once PostgreSQL answers again;
//! - a node paused again and again inside its WAL commits' transactions: its partitions move
//!   within the failover bound each time.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::Start as _;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::wire::{record_batch, Conn};
use common::{poll_until, serve_command, service_env, Node};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, DeleteGroupsRequest, DeleteGroupsResponse, DescribeConfigsRequest,
    DescribeConfigsResponse, DescribeGroupsRequest, DescribeGroupsResponse, ListGroupsRequest,
    ListGroupsResponse, ProduceRequest, ProduceResponse, RequestKind,
};
use kafka_protocol::records::Compression;
use rdkafka::admin::{
    AdminClient, AdminOptions, AlterConfig, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

const TOPIC: &str = "orders";
const PARTITIONS: i32 = 12;

/// The cluster's shared settings: one PostgreSQL database, one S3 prefix, short leases.
struct Cluster {
    dir: tempfile::TempDir,
    db: String,
    objects: String,
    config: String,
    endpoint: String,
    /// Each node's Kafka, HTTP and registry ports, kept across restarts: a node comes back on
    /// its address, as in production (librdkafka keeps a group's coordinator at the address
    /// it first had, so a node back elsewhere strands the groups it coordinated).
    ports: std::sync::Mutex<BTreeMap<u64, [u16; 3]>>,
}

impl Cluster {
    /// A fresh database and S3 prefix, and a config of short leases plus `extra` (TOML), or
    /// `None` without PostgreSQL and S3 (outside CI).
    fn new(extra: &str) -> Option<Cluster> {
        let (Some(pg), Some(endpoint), Some(bucket)) = (
            service_env("INLET_TEST_POSTGRES_URL"),
            service_env("INLET_TEST_S3_ENDPOINT"),
            service_env("INLET_TEST_S3_BUCKET"),
        ) else {
            return None;
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let prefix = dir
            .path()
            .file_name()
            .map(|n| n.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        let config = dir.path().join("inlet.toml");
        std::fs::write(
            &config,
            format!("[cluster]\nlease_ms = 3000\nrebalance_ms = 300\n{extra}"),
        )
        .expect("config");
        Some(Cluster {
            db: common::fresh_postgres_database(&pg),
            objects: format!("s3://{bucket}/{prefix}"),
            config: config.to_string_lossy().into_owned(),
            endpoint,
            dir,
            ports: Default::default(),
        })
    }

    fn args<'a>(&'a self, id: &'a str) -> Vec<&'a str> {
        vec![
            "--meta",
            &self.db,
            "--object-store",
            &self.objects,
            "--config",
            &self.config,
            "--node-id",
            id,
        ]
    }

    fn start(&self, id: u64) -> Node {
        self.start_with_env(id, &[])
    }

    /// The listener arguments of node `id`: the same addresses at every start.
    fn listen(&self, id: u64) -> Vec<String> {
        let ports = *self.ports.lock().unwrap().entry(id).or_insert_with(|| {
            use inlet_test_support::node::free_port;
            [free_port(), free_port(), free_port()]
        });
        ["--kafka-listen", "--http-listen", "--registry-listen"]
            .iter()
            .zip(ports)
            .flat_map(|(flag, port)| [flag.to_string(), format!("127.0.0.1:{port}")])
            .collect()
    }

    fn env(&self) -> [(&str, &str); 2] {
        [("AWS_ENDPOINT", &self.endpoint), ("AWS_ALLOW_HTTP", "true")]
    }

    /// [`Cluster::start`] with more environment for the node.
    fn start_with_env(&self, id: u64, env: &[(&str, &str)]) -> Node {
        self.start_on_meta_with_env(id, &self.db, env)
    }

    /// [`Cluster::start`] on another URL of the cluster's metadata store (through a proxy).
    fn start_on_meta(&self, id: u64, db: &str) -> Node {
        self.start_on_meta_with_env(id, db, &[])
    }

    /// [`Cluster::start_on_meta`] with more environment for the node.
    fn start_on_meta_with_env(&self, id: u64, db: &str, env: &[(&str, &str)]) -> Node {
        let dir = self.dir.path().join(format!("node-{id}"));
        let listen = self.listen(id);
        let id = id.to_string();
        let mut args = self.args(&id);
        args[1] = db;
        args.extend(listen.iter().map(String::as_str));
        let mut all = self.env().to_vec();
        all.extend_from_slice(env);
        Node::start_with_env(&dir, &args, &all)
    }

    /// Cuts every object of the cluster whose key `wanted` takes to half its length (but for
    /// those deleted meanwhile); returns how many.
    fn cut_objects(&self, wanted: impl Fn(&str) -> bool) -> usize {
        use futures::TryStreamExt;
        use object_store::{ObjectStore, ObjectStoreExt};
        let (bucket, prefix) = self
            .objects
            .trim_start_matches("s3://")
            .split_once('/')
            .expect("s3://bucket/prefix");
        let store = object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .with_endpoint(&self.endpoint)
            .with_allow_http(true)
            .build()
            .expect("an S3 client");
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        runtime.block_on(async {
            let prefix = object_store::path::Path::from(prefix);
            let listed: Vec<_> = store
                .list(Some(&prefix))
                .try_collect()
                .await
                .expect("listed");
            let mut cut = 0;
            for meta in listed.iter().filter(|m| wanted(m.location.as_ref())) {
                // A running node may delete an object between the listing and here (a
                // checkpoint a newer one replaced): there is nothing left to cut.
                let bytes = match store.get(&meta.location).await {
                    Ok(got) => got.bytes().await.expect("bytes"),
                    Err(object_store::Error::NotFound { .. }) => continue,
                    Err(e) => panic!("get {}: {e}", meta.location),
                };
                store
                    .put(&meta.location, bytes.slice(..bytes.len() / 2).into())
                    .await
                    .expect("put");
                cut += 1;
            }
            cut
        })
    }
}

/// A client context that prints librdkafka's log lines (`debug` set through
/// `INLET_TEST_RDKAFKA_DEBUG`) on stderr, so a failed run shows what the client did.
struct StderrLog;

impl rdkafka::ClientContext for StderrLog {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, line: &str) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        eprintln!("[rdkafka {:.3} {level:?} {fac}] {line}", now.as_secs_f64());
    }
}

impl rdkafka::consumer::ConsumerContext for StderrLog {}

/// Sets librdkafka's `debug` contexts from `INLET_TEST_RDKAFKA_DEBUG`, if set (with
/// [`StderrLog`] as the client's context, its lines go to stderr).
fn debug_from_env(config: &mut ClientConfig) {
    if let Ok(debug) = std::env::var("INLET_TEST_RDKAFKA_DEBUG") {
        config
            .set("debug", debug)
            .set_log_level(rdkafka::config::RDKafkaLogLevel::Debug);
    }
}

/// Every node's Kafka address, as a client's bootstrap list.
fn bootstrap(nodes: &BTreeMap<u64, Node>) -> String {
    nodes
        .values()
        .map(|n| n.kafka.clone())
        .collect::<Vec<_>>()
        .join(",")
}

/// Creates `topics` through `node`'s Kafka endpoint (librdkafka's AdminClient); each must be
/// created.
fn create_topics(node: &Node, topics: &[NewTopic]) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &node.kafka)
        .create()
        .expect("admin");
    let created = tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(admin.create_topics(
            topics,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        ))
        .expect("create topics");
    assert!(created.iter().all(|c| c.is_ok()), "{created:?}");
}

/// Creates the table topic `name` (`partitions` partitions, 1 s commits, values converted as
/// `value_type`) through node 1, and waits until its partitions are owned by every one of
/// nodes 1–3.
fn spread_table_topic(nodes: &BTreeMap<u64, Node>, name: &str, partitions: i32, value_type: &str) {
    create_topics(
        &nodes[&1],
        &[NewTopic::new(name, partitions, TopicReplication::Fixed(1))
            .set("table.topic.enable", "true")
            .set("table.topic.commit.interval.ms", "1000")
            .set("table.topic.convert.value.type", value_type)],
    );
    poll_until(60, "the table's partitions on every node", || {
        let owners = wait_topic_owned_by(&nodes[&1], name, partitions, &[1, 2, 3], 30);
        (owners
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            == 3)
            .then_some(())
    });
}

/// The node running the coordinator of `table` (`namespace.name`), waited for up to `secs`.
fn coordinator_node(nodes: &BTreeMap<u64, Node>, table: &str, secs: u64) -> u64 {
    poll_until(secs, &format!("{table}'s coordinator on one node"), || {
        nodes.iter().find_map(|(id, n)| {
            view(n)["owned_by_this_node"]["tables"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t == table))
                .then_some(*id)
        })
    })
}

/// Runs one `phase` of the client script `script` (`tests/clients`) against the cluster
/// `nodes`, with `reader`'s Schema Registry and Iceberg catalog; it must print OK. Returns its
/// output.
fn run_phase(
    python: &std::path::Path,
    script: &str,
    nodes: &BTreeMap<u64, Node>,
    reader: &Node,
    phase: &str,
) -> String {
    let (status, output) = common::python::run(
        python,
        &[
            common::python::script(script).into(),
            bootstrap(nodes).into(),
            format!("http://{}", reader.registry).into(),
            format!("http://{}/iceberg", reader.http).into(),
            phase.into(),
        ],
        Duration::from_secs(300),
    );
    assert!(
        status.is_some_and(|s| s.success()) && output.contains("OK"),
        "the {phase} phase of {script} ({status:?}):\n{output}"
    );
    output
}

fn view(node: &Node) -> serde_json::Value {
    let (status, body) = node.http_get("/v1/cluster");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("JSON")
}

/// Each partition's owner of `topic` as `node` sees the metadata store.
fn owners_of(node: &Node, topic: &str) -> Vec<Option<u64>> {
    view(node)["partitions"][topic]
        .as_array()
        .map(|parts| parts.iter().map(|p| p["owner"].as_u64()).collect())
        .unwrap_or_default()
}

/// The partitions of `topic` that node `id` owns, as `node` sees the metadata store.
fn owned_by(node: &Node, topic: &str, id: u64) -> Vec<i32> {
    owners_of(node, topic)
        .iter()
        .enumerate()
        .filter(|(_, o)| **o == Some(id))
        .map(|(p, _)| p as i32)
        .collect()
}

/// Waits until every partition is owned by one of `nodes` (as `node` sees it), and returns the
/// owners.
fn wait_owned_by(node: &Node, nodes: &[u64], secs: u64) -> Vec<u64> {
    wait_topic_owned_by(node, TOPIC, PARTITIONS, nodes, secs)
}

fn owners(node: &Node) -> Vec<Option<u64>> {
    owners_of(node, TOPIC)
}

fn wait_topic_owned_by(
    node: &Node,
    topic: &str,
    partitions: i32,
    nodes: &[u64],
    secs: u64,
) -> Vec<u64> {
    poll_until(
        secs,
        &format!("every partition of {topic} owned by one of {nodes:?}"),
        || {
            let owners = owners_of(node, topic);
            (owners.len() == partitions as usize
                && owners.iter().all(|o| o.is_some_and(|o| nodes.contains(&o))))
            .then(|| owners.into_iter().flatten().collect())
        },
    )
}

/// Waits until the owners (all among `nodes`) stop changing: the same over two looks a few
/// passes apart.
fn settled(node: &Node, nodes: &[u64]) -> Vec<u64> {
    let mut last = wait_owned_by(node, nodes, 30);
    poll_until(30, "the assignment to settle", || {
        std::thread::sleep(Duration::from_millis(1_000));
        let now = wait_owned_by(node, nodes, 30);
        let same = now == last;
        last = now.clone();
        (same && now.iter().collect::<BTreeSet<_>>().len() > 1).then_some(now)
    })
}

fn producer(bootstrap: &str) -> FutureProducer<StderrLog> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "120000")
        .set("topic.metadata.refresh.interval.ms", "1000");
    debug_from_env(&mut config);
    config.create_with_context(StderrLog).expect("producer")
}

/// Sends `keys` (value = key) round robin over the partitions, at most 64 in flight, and
/// returns each key's (partition, offset) and when it was acknowledged. Every send must be
/// acknowledged.
async fn produce(
    producer: &FutureProducer<StderrLog>,
    keys: std::ops::Range<u64>,
    between: impl FnMut(u64),
) -> Vec<(u64, i32, i64, Instant)> {
    produce_to(producer, TOPIC, PARTITIONS, keys, between).await
}

async fn produce_to(
    producer: &FutureProducer<StderrLog>,
    topic: &'static str,
    partitions: i32,
    keys: std::ops::Range<u64>,
    mut between: impl FnMut(u64),
) -> Vec<(u64, i32, i64, Instant)> {
    let mut acked = Vec::new();
    let mut in_flight = futures::stream::FuturesOrdered::new();
    for k in keys {
        between(k);
        let key = format!("k{k}");
        let partition = (k % partitions as u64) as i32;
        let p = producer.clone();
        in_flight.push_back(async move {
            let record = FutureRecord::to(topic)
                .key(&key)
                .payload(&key)
                .partition(partition);
            let delivery = p
                .send(record, Duration::from_secs(120))
                .await
                .unwrap_or_else(|(e, _)| panic!("{key} was not acknowledged: {e}"));
            (k, delivery.partition, delivery.offset, Instant::now())
        });
        if in_flight.len() >= 64 {
            acked.push(futures::StreamExt::next(&mut in_flight).await.unwrap());
        }
    }
    while let Some(a) = futures::StreamExt::next(&mut in_flight).await {
        acked.push(a);
    }
    acked
}

fn consumer(bootstrap: &str, group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("topic.metadata.refresh.interval.ms", "1000")
        .create()
        .expect("consumer")
}

/// Reads every partition from the start to its end: key → (partition, offset). Panics on a
/// key read twice.
fn read_all(bootstrap: &str) -> BTreeMap<u64, (i32, i64)> {
    read_topic(bootstrap, TOPIC, PARTITIONS)
}

/// [`read_all`] of `topic`: from each partition's start (after retention, which may move it
/// while reading) to its end.
fn read_topic(bootstrap: &str, topic: &str, partitions: i32) -> BTreeMap<u64, (i32, i64)> {
    let c = consumer(bootstrap, "reader");
    let mut ends = BTreeMap::new();
    // Where reading starts: retention may have taken a partition's head, or all of it (a
    // table topic's, once its table held it).
    let mut at = BTreeMap::new();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        let (low, high) = poll_until(60, "the partition's watermarks", || {
            c.fetch_watermarks(topic, p, Duration::from_secs(5)).ok()
        });
        ends.insert(p, high);
        at.insert(p, low);
        tpl.add_partition_offset(topic, p, Offset::Offset(low))
            .expect("add");
    }
    c.assign(&tpl).expect("assign");
    let mut got = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while at.iter().any(|(p, o)| *o < ends[p]) {
        assert!(
            Instant::now() < deadline,
            "reading stalled at {at:?} of {ends:?}"
        );
        let Some(m) = c.poll(Duration::from_millis(500)) else {
            // Retention may take what is left to read meanwhile (the client then skips to the
            // new start): reading that partition goes on from there.
            for (p, o) in at.iter_mut().filter(|(p, o)| **o < ends[p]) {
                if let Ok((low, _)) = c.fetch_watermarks(topic, *p, Duration::from_secs(5)) {
                    *o = (*o).max(low);
                }
            }
            continue;
        };
        let m = m.expect("a record");
        let key = m.key().unwrap_or_else(|| {
            panic!(
                "a record that was never acknowledged (the paused node's?) at {}-{}",
                m.partition(),
                m.offset()
            )
        });
        let key: u64 = std::str::from_utf8(key)
            .expect("utf8")
            .trim_start_matches('k')
            .parse()
            .expect("a key");
        assert_eq!(m.payload(), m.key(), "value of k{key}");
        if let Some(before) = got.insert(key, (m.partition(), m.offset())) {
            panic!(
                "k{key} is in the topic twice: at {before:?} and at {:?}",
                (m.partition(), m.offset())
            );
        }
        at.insert(m.partition(), m.offset() + 1);
    }
    got
}

/// Every acknowledged record is in the topic read (`got`), once, at the partition and offset
/// it was acknowledged with, and nothing else is.
fn all_in_place(got: &BTreeMap<u64, (i32, i64)>, acked: &[(u64, i32, i64, Instant)]) {
    let at: BTreeMap<(i32, i64), u64> = got.iter().map(|(k, &place)| (place, *k)).collect();
    let astray: Vec<String> = acked
        .iter()
        .filter(|(k, partition, offset, _)| got.get(k) != Some(&(*partition, *offset)))
        .map(|(k, partition, offset, _)| {
            format!(
                "k{k} acknowledged at {partition}-{offset}, found at {:?}, where k{:?} is",
                got.get(k),
                at.get(&(*partition, *offset))
            )
        })
        .collect();
    assert!(
        astray.is_empty(),
        "{} of {} acknowledged records are not where they were acknowledged: {:#?}",
        astray.len(),
        acked.len(),
        &astray[..astray.len().min(20)]
    );
    assert_eq!(
        got.len(),
        acked.len(),
        "records in the topic vs acknowledged"
    );
}

/// Sends one record to `partition` on `conn` without reading the answer.
fn send_raw(conn: &mut Conn, partition: i32, value: &str) -> i32 {
    let records = record_batch(
        &[Some(bytes::Bytes::from(value.to_string()))],
        -1,
        -1,
        0,
        Compression::None,
    );
    conn.send(
        ApiKey::Produce,
        9,
        RequestKind::Produce(
            ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(30_000)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(common::requests::topic_name(TOPIC))
                    .with_partition_data(vec![PartitionProduceData::default()
                        .with_index(partition)
                        .with_records(Some(records))])]),
        ),
    )
}

fn signal(node: &Node, sig: i32) {
    // SAFETY: signalling a child process of this test.
    assert_eq!(unsafe { libc::kill(node.pid(), sig) }, 0);
}

#[test]
fn three_nodes_survive_kill_pause_join_and_drain() {
    let Some(cluster) = Cluster::new("") else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");

    let mut nodes: BTreeMap<u64, Node> = (1..=3).map(|id| (id, cluster.start(id))).collect();
    create_topics(
        &nodes[&1],
        &[NewTopic::new(TOPIC, PARTITIONS, TopicReplication::Fixed(1))],
    );

    // The partitions (created on node 1, so its own at first) spread over the three nodes.
    let spread = settled(&nodes[&1], &[1, 2, 3]);
    let distinct: BTreeSet<u64> = spread.iter().copied().collect();
    assert!(distinct.len() >= 2, "partitions spread: {spread:?}");

    // The victim owns the most partitions; the group is one it coordinates.
    let victim = *distinct
        .iter()
        .max_by_key(|n| spread.iter().filter(|o| o == n).count())
        .unwrap();
    let group = (0..)
        .map(|i| format!("g{i}"))
        .find(|g| inlet::cluster::rendezvous(&format!("group:{g}"), &[1, 2, 3]) == Some(victim))
        .unwrap();

    // A group commits offsets through its coordinator, the victim.
    let all = bootstrap(&nodes);
    let p = producer(&all);
    let mut acked = rt.block_on(produce(&p, 0..1200, |_| {}));
    let committed: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, 7 + p as i64)).collect();
    {
        let c = consumer(&all, &group);
        let mut tpl = TopicPartitionList::new();
        for (p, o) in &committed {
            tpl.add_partition_offset(TOPIC, *p, Offset::Offset(*o))
                .expect("add");
        }
        poll_until(60, "the group's commit", || {
            c.commit(&tpl, CommitMode::Sync).ok()
        });
    }
    // Group admin requests follow the coordinator too: another node answers DescribeGroups
    // and DeleteGroups for the group NOT_COORDINATOR (deleting nothing), and only the
    // coordinator lists it, so an admin client that asks every node sees it once.
    {
        const NOT_COORDINATOR: i16 = 16;
        let other = nodes.keys().copied().find(|n| *n != victim).unwrap();
        let mut conn = Conn::open(&nodes[&other]);
        let gid = kafka_protocol::messages::GroupId(
            kafka_protocol::protocol::StrBytes::from_string(group.clone()),
        );
        let described: DescribeGroupsResponse = conn.call(
            ApiKey::DescribeGroups,
            5,
            RequestKind::DescribeGroups(
                DescribeGroupsRequest::default().with_groups(vec![gid.clone()]),
            ),
        );
        assert_eq!(described.groups.len(), 1);
        assert_eq!(described.groups[0].error_code, NOT_COORDINATOR);
        let deleted: DeleteGroupsResponse = conn.call(
            ApiKey::DeleteGroups,
            2,
            RequestKind::DeleteGroups(DeleteGroupsRequest::default().with_groups_names(vec![gid])),
        );
        assert_eq!(deleted.results[0].error_code, NOT_COORDINATOR);
        let listings: Vec<usize> = nodes
            .values()
            .map(|n| {
                let listed: ListGroupsResponse = Conn::open(n).call(
                    ApiKey::ListGroups,
                    4,
                    RequestKind::ListGroups(ListGroupsRequest::default()),
                );
                listed
                    .groups
                    .iter()
                    .filter(|g| g.group_id.as_str() == group)
                    .count()
            })
            .collect();
        assert_eq!(listings.iter().sum::<usize>(), 1, "listed by {listings:?}");
        let c = consumer(&all, &group);
        let listed = c
            .fetch_group_list(None, Duration::from_secs(10))
            .expect("group list");
        assert_eq!(
            listed.groups().iter().filter(|g| g.name() == group).count(),
            1,
            "librdkafka lists the group once"
        );
    }
    let victim_partitions: Vec<i32> = spread
        .iter()
        .enumerate()
        .filter(|(_, o)| **o == victim)
        .map(|(p, _)| p as i32)
        .collect();

    // kill -9 the victim under load.
    let mut killed_at = None;
    let victim_node = nodes.remove(&victim).unwrap();
    let mut victim_node = Some(victim_node);
    let more = rt.block_on(produce(&p, 1200..3600, |k| {
        if k == 1600 {
            let node = victim_node.take().unwrap();
            node.kill9();
            killed_at = Some(Instant::now());
        }
    }));
    let killed_at = killed_at.unwrap();
    // Failover time: from the kill to the first acknowledgement on each moved partition.
    let failover: Vec<Duration> = victim_partitions
        .iter()
        .filter_map(|vp| {
            more.iter()
                .filter(|(_, p, _, at)| p == vp && *at > killed_at)
                .map(|(_, _, _, at)| at.duration_since(killed_at))
                .min()
        })
        .collect();
    eprintln!("failover after kill -9: {failover:?}");
    assert_eq!(failover.len(), victim_partitions.len());
    acked.extend(more);
    let live: Vec<u64> = nodes.keys().copied().collect();
    wait_owned_by(&nodes[&live[0]], &live, 30);

    // The group's offsets carry over to its next coordinator.
    {
        let c = consumer(&bootstrap(&nodes), &group);
        let mut tpl = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            tpl.add_partition(TOPIC, p);
        }
        let got = poll_until(60, "the group's committed offsets", || {
            c.committed_offsets(tpl.clone(), Duration::from_secs(5))
                .ok()
        });
        for (p, o) in &committed {
            assert_eq!(
                got.find_partition(TOPIC, *p).map(|e| e.offset()),
                Some(Offset::Offset(*o)),
                "partition {p}"
            );
        }
    }

    // `/v1/cluster` shows the moves of the last hour: every partition of the victim taken
    // from it by a live node, and the group taken from it by its next coordinator.
    {
        let moves = view(&nodes[&live[0]])["moves"].clone();
        let moves = moves.as_array().expect("moves");
        for vp in &victim_partitions {
            assert!(
                moves.iter().any(|m| m["kind"] == "partition"
                    && m["topic"] == TOPIC
                    && m["partition"] == *vp
                    && m["from"] == victim
                    && m["to"].as_u64().is_some_and(|to| live.contains(&to))),
                "partition {vp} taken from node {victim}: {moves:#?}"
            );
        }
        assert!(
            moves.iter().any(|m| m["kind"] == "group"
                && m["name"] == group.as_str()
                && m["from"] == victim
                && m["to"].as_u64().is_some_and(|to| live.contains(&to))),
            "group {group} taken from node {victim}: {moves:#?}"
        );
        // The group's owner row names the node that took it.
        let owners = view(&nodes[&live[0]])["groups"].clone();
        assert!(
            owners
                .as_array()
                .expect("groups")
                .iter()
                .any(|g| g["group"] == group.as_str()
                    && g["owner"].as_u64().is_some_and(|o| live.contains(&o))),
            "group {group} owned by a live node: {owners:#?}"
        );
        let at: Vec<u64> = moves.iter().filter_map(|m| m["at_ms"].as_u64()).collect();
        assert!(at.windows(2).all(|w| w[0] >= w[1]), "newest first: {at:?}");
    }

    // The moved partitions' producer state came from the dead node's producer snapshots, not
    // from reading their history again.
    // (Waited for: each node's log lines reach the test through a reader thread, which a
    // busy machine may hold back.)
    let mut rebuilt = Vec::new();
    poll_until(
        30,
        "a moved partition's producer state loaded from a snapshot",
        || {
            rebuilt.extend(
                nodes
                    .values()
                    .flat_map(|n| n.logs_so_far())
                    .filter(|l| l.contains("rebuilt the partition's producer state")),
            );
            let found = rebuilt.iter().any(|l| l.contains("snapshot_end="));
            if !found {
                std::thread::sleep(Duration::from_millis(100));
            }
            found.then_some(())
        },
    );

    // Pause a node past its lease with a produce in its socket: once it runs again, that
    // produce is not acknowledged.
    let zombie_id = *nodes.keys().max().unwrap();
    let zombie = nodes.remove(&zombie_id).unwrap();
    let owners_now = owners(&zombie);
    let Some(zp) = owners_now.iter().position(|o| *o == Some(zombie_id)) else {
        panic!("node {zombie_id} owns no partition: {owners_now:?}");
    };
    let mut conn = Conn::open(&zombie);
    signal(&zombie, libc::SIGSTOP);
    let correlation = send_raw(&mut conn, zp as i32, "zombie");
    let rest: Vec<u64> = nodes.keys().copied().collect();
    wait_owned_by(&nodes[&rest[0]], &rest, 30);
    acked.extend(rt.block_on(produce(&p, 3600..4000, |_| {})));
    signal(&zombie, libc::SIGCONT);
    // It answers with an error, or (standing down as it resumes past its lease) closes the
    // connection unanswered: either way the record is not acknowledged.
    if let Some(answer) = conn.try_receive::<ProduceResponse>(ApiKey::Produce, 9, correlation) {
        let code = answer.responses[0].partition_responses[0].error_code;
        assert_ne!(
            code, 0,
            "the paused node acknowledged a produce after losing its partition"
        );
    }
    // And it says its lease had lapsed.
    let lapsed = zombie.wait_for_log("renewed its lease after it had ended");
    eprintln!("the paused node: {lapsed}");
    drop(conn);
    nodes.insert(zombie_id, zombie);

    // The killed node comes back on its data directory, and a fourth node joins: each takes
    // a share.
    nodes.insert(victim, cluster.start(victim));
    nodes.insert(4, cluster.start(4));
    let ids: Vec<u64> = nodes.keys().copied().collect();
    // A fair share: 12 partitions over 4 nodes, 3 each.
    let shared = poll_until(60, "the new node to take its share", || {
        let owners: Vec<u64> = owners(&nodes[&1]).into_iter().flatten().collect();
        (owners.len() == PARTITIONS as usize
            && ids
                .iter()
                .all(|n| owners.iter().filter(|o| *o == n).count() == 3))
        .then_some(owners)
    });
    eprintln!("owners with four nodes: {shared:?}");
    acked.extend(rt.block_on(produce(&p, 4000..4600, |_| {})));

    // SIGTERM drains node 4: its partitions move while producing goes on.
    let drained = nodes.remove(&4).unwrap();
    let started = Instant::now();
    let stop = std::thread::spawn(move || drained.stop());
    acked.extend(rt.block_on(produce(&p, 4600..5200, |_| {})));
    stop.join().expect("node 4 stopped");
    let ids: Vec<u64> = nodes.keys().copied().collect();
    wait_owned_by(&nodes[&1], &ids, 30);
    eprintln!("drain handed over within {:?}", started.elapsed());

    // A node with a live node's id is refused.
    let dup_dir = cluster.dir.path().join("duplicate");
    let out = serve_command(&dup_dir, &cluster.args("1"))
        .envs(cluster.env())
        .output()
        .expect("inlet runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("node id 1 is live"), "{stderr}");

    // Every acknowledged record once, where it was acknowledged; nothing else.
    all_in_place(&read_all(&bootstrap(&nodes)), &acked);
    for node in nodes.into_values() {
        node.stop();
    }
}

/// A 6-partition append-only table topic, its partitions converted on all three nodes and
/// committed by one coordinator, through the kill -9 of the coordinator's node under load from
/// Python's confluent-kafka: the coordinator and that node's partitions move (its chunks not
/// yet committed are converted again by the new owners), and every acknowledged record is in
/// the table exactly once, read by pyiceberg through another node's catalog and by that node's
/// SQL. The data files name the nodes that wrote them: more than one did.
#[test]
fn a_table_topic_survives_the_kill_of_its_node() {
    let Some(python) = common::python::require_python(
        "import pyiceberg.catalog.rest, confluent_kafka",
        "pyiceberg and confluent-kafka",
    ) else {
        return;
    };
    // A coordinator lease far longer than the test: the new owner takes the table's lease
    // because its holder left the cluster, not because it expired.
    let Some(cluster) = Cluster::new("[tables]\ncoordinator_lease_ms = 3600000\n") else {
        return;
    };
    const TABLE: &str = "events";
    let mut nodes: BTreeMap<u64, Node> = (1..=3).map(|id| (id, cluster.start(id))).collect();
    // The partitions spread over the three nodes, and one node runs the coordinator.
    spread_table_topic(&nodes, TABLE, 6, "string");
    let home = coordinator_node(&nodes, "default.events", 60);
    let all = bootstrap(&nodes);
    // Python's confluent-kafka produces (3000 records at ~300/s); the table's node is killed
    // once a third is acknowledged.
    let mut producer = std::process::Command::new(&python)
        .arg(common::python::script("cluster_produce.py"))
        .args([all.as_str(), TABLE, "6", "3000", "300"])
        .env("PYTHONUNBUFFERED", "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python runs");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(
        producer.stdout.take().expect("stdout"),
    ));
    let mut home_node = nodes.remove(&home);
    let mut acked = 0;
    let mut ok = false;
    for line in lines.by_ref() {
        let line = line.expect("a line");
        if line == "acked 900" {
            home_node.take().expect("killed once").kill9();
        }
        if line.split(' ').count() == 3 {
            acked += 1;
        }
        if line == "OK" {
            ok = true;
        } else if !line.chars().next().is_some_and(|c| c.is_ascii_digit()) {
            eprintln!("[cluster_produce.py] {line}");
        }
    }
    assert!(
        producer.wait().expect("exits").success() && ok,
        "the producer failed"
    );
    assert!(home_node.is_none(), "the table's node was killed mid-way");
    assert_eq!(acked, 3000);
    let rest: Vec<u64> = nodes.keys().copied().collect();
    wait_topic_owned_by(&nodes[&rest[0]], TABLE, 6, &rest, 30);
    let reader = &nodes[&rest[0]];
    let (status, output) = common::python::run(
        &python,
        &[
            common::python::script("cluster_table_read.py").into(),
            format!("http://{}/iceberg", reader.http).into(),
            TABLE.into(),
            "3000".into(),
        ],
        Duration::from_secs(240),
    );
    assert!(
        status.is_some_and(|s| s.success()) && output.contains("OK"),
        "pyiceberg read ({status:?}):\n{output}"
    );
    let writers: Vec<&str> = output
        .lines()
        .find_map(|l| l.strip_prefix("writers "))
        .map(|w| w.split(',').filter(|w| !w.is_empty()).collect())
        .unwrap_or_default();
    eprintln!("data files written by nodes {writers:?}; the coordinator was node {home}");
    assert!(
        writers.len() >= 2,
        "one table's files come from several nodes: {output}"
    );
    let rows = common::query_json(
        reader,
        "SELECT count(*) AS n, count(DISTINCT value) AS d FROM default.events",
    );
    assert_eq!(rows[0]["n"], 3000, "{rows}");
    assert_eq!(rows[0]["d"], 3000, "{rows}");
    for node in nodes.into_values() {
        node.stop();
    }
}

/// One table topic's three partitions, each converted on another node, evolve apart at once
/// (confluent-kafka's AvroSerializer: partition 0 adds `a`, partition 1 adds `b`). Two nodes
/// may give their new columns the same field id: the coordinator commits one, refuses the
/// other's chunk, and that node converts again on the evolved table. pyiceberg then reads
/// both columns on exactly the records that had them, every record once
/// (`tests/clients/cluster_table_evolve.py`).
#[test]
fn a_table_converted_on_three_nodes_evolves_apart_and_lands_once() {
    let Some(python) = common::python::require_python(
        "import pyiceberg.catalog.rest, confluent_kafka.schema_registry.avro",
        "pyiceberg and confluent-kafka",
    ) else {
        return;
    };
    // Refused chunks' files are deleted with their rows; other orphans are swept as soon as
    // the rules allow (ten commit intervals, 10 s), while the table is read.
    let Some(cluster) =
        Cluster::new("[tables]\norphan_files_older_than_ms = 1\norphan_files_interval_ms = 1000\n")
    else {
        return;
    };
    const TABLE: &str = "evolving";
    let nodes: BTreeMap<u64, Node> = (1..=3).map(|id| (id, cluster.start(id))).collect();
    spread_table_topic(&nodes, TABLE, 3, "by_schema_id");
    let (status, output) = common::python::run(
        &python,
        &[
            common::python::script("cluster_table_evolve.py").into(),
            bootstrap(&nodes).into(),
            format!("http://{}", nodes[&2].registry).into(),
            format!("http://{}/iceberg", nodes[&3].http).into(),
            TABLE.into(),
        ],
        Duration::from_secs(300),
    );
    assert!(
        status.is_some_and(|s| s.success()) && output.contains("OK"),
        "the evolving table ({status:?}):\n{output}"
    );
    let logs: Vec<String> = nodes.values().flat_map(|n| n.logs_so_far()).collect();
    let count = |needle: &str| logs.iter().filter(|l| l.contains(needle)).count();
    let refused = count("a chunk's schema does not fit");
    eprintln!("{output}chunks refused for a clashing column id: {refused}");
    // The re-conversion that landed the rows followed the refusal, and the deletion of the
    // refused chunk's files came before it.
    assert_eq!(
        count("deleted a refused chunk's files"),
        refused,
        "every refused chunk's files are deleted"
    );
    // Every row still reads: nothing a snapshot names was swept.
    let rows = common::query_json(
        &nodes[&1],
        "SELECT count(*) AS n, count(DISTINCT id) AS d FROM default.evolving",
    );
    assert_eq!(rows[0]["n"], 200, "{rows}");
    assert_eq!(rows[0]["d"], 200, "{rows}");
    for node in nodes.into_values() {
        node.stop();
    }
}

/// Another writer on a table converted on three nodes (`tests/clients/table_topic_foreign.py`,
/// the single-node test's script): pyiceberg, through node 3's catalog, deletes rows,
/// appends its own, overwrites some and adds a column while the partitions convert on their
/// owners; the next records add a column whose id, as the converters number it, is the one
/// pyiceberg's took (their chunks are refused and converted again on the table's schema).
/// Then the node running the table's coordinator is killed at once after the last
/// acknowledgement, and the survivors finish: every Kafka record is a row once, the deleted
/// rows stay deleted, and pyiceberg's rows, overwrite and column stay.
#[test]
fn another_writer_and_a_kill_on_a_table_converted_on_three_nodes() {
    let Some(python) = common::python::require_python(
        "import confluent_kafka.schema_registry.avro, pyiceberg.catalog.rest, pyiceberg.expressions, pyarrow",
        "confluent-kafka[avro], pyiceberg and pyarrow",
    ) else {
        return;
    };
    let Some(cluster) = Cluster::new("[tables]\ncoordinator_lease_ms = 3600000\n") else {
        return;
    };
    const TABLE: &str = "shop";
    let mut nodes: BTreeMap<u64, Node> = (1..=3).map(|id| (id, cluster.start(id))).collect();
    spread_table_topic(&nodes, TABLE, 3, "by_schema_id");
    let phase = |nodes: &BTreeMap<u64, Node>, reader: &Node, phase: &str| {
        run_phase(&python, "table_topic_foreign.py", nodes, reader, phase);
    };
    phase(&nodes, &nodes[&3], "first");
    let home = coordinator_node(&nodes, "default.shop", 30);
    let refused = nodes
        .values()
        .flat_map(|n| n.logs_so_far())
        .filter(|l| l.contains("does not fit"))
        .count();
    nodes.remove(&home).expect("the coordinator's node").kill9();
    eprintln!("killed node {home}, the table's coordinator; chunks or rounds refused for their schema: {refused}");
    let reader = nodes.keys().next().copied().expect("a survivor");
    phase(&nodes, &nodes[&reader], "restarted");
    for node in nodes.into_values() {
        node.stop();
    }
}

/// Keyed tables on three nodes (`tests/clients/table_topic_upsert.py`, the single-node
/// test's script): an upsert table with tombstones, a CDC table and an upsert table
/// partitioned by `bucket(id, 2)`, whose partitions spread over the nodes and convert on their
/// owners while each table's coordinator applies their keys to its one primary-key index.
/// After every step each table holds exactly the latest row per key (pyiceberg, DuckDB when
/// installed), also after another writer's append (the round built on the snapshot before is
/// dropped and redone on the new base), and across compactions of `users` and `accounts`
/// every few rounds (each moves the table under its coordinator, which catches its index up
/// from its last checkpoint). Then the node running the `users` coordinator is killed at once
/// after an acknowledged step, and the survivors catch the index up from its checkpoint and
/// land that step and a last one of updates and deletes of earlier keys: no key with two live
/// rows, no lost update. The tables' files come from several nodes. Last, with every
/// checkpoint cut short while the users coordinator's node is stopped, that node is killed:
/// the last node rebuilds the index from the table and the rows stay right.
#[test]
fn keyed_tables_convert_on_every_node_and_keep_the_latest_row_per_key_across_a_kill() {
    let Some(python) = common::python::require_python(
        "import confluent_kafka.schema_registry.avro, pyiceberg.catalog.rest, pyarrow",
        "confluent-kafka[avro], pyiceberg and pyarrow",
    ) else {
        return;
    };
    // Compactions every few rounds: each moves the tables under the coordinators' indexes.
    let Some(cluster) = Cluster::new(
        "[tables]\ncoordinator_lease_ms = 3600000\ncompaction_min_files = 2\ncompaction_every_commits = 1\n",
    ) else {
        return;
    };
    let mut nodes: BTreeMap<u64, Node> = (1..=3).map(|id| (id, cluster.start(id))).collect();
    let phase = |nodes: &BTreeMap<u64, Node>, reader: &Node, phase: &str| {
        run_phase(&python, "table_topic_upsert.py", nodes, reader, phase)
    };
    phase(&nodes, &nodes[&2], "first");
    let owners: BTreeSet<u64> = ["users", "accounts", "items"]
        .iter()
        .flat_map(|t| owners_of(&nodes[&1], t))
        .flatten()
        .collect();
    let home = coordinator_node(&nodes, "default.users", 30);
    let logs: Vec<String> = nodes.values().flat_map(|n| n.logs_so_far()).collect();
    assert!(
        logs.iter().any(|l| l.contains("re-registered")),
        "the round built before pyiceberg's append was redone on the new base"
    );
    // Compactions moved tables under their coordinators, and coordinators caught their
    // indexes up from checkpoints (after pyiceberg's append at least; after a compaction
    // when a round followed it). The script's steps check the rows after each.
    assert!(
        logs.iter().any(|l| l.contains("compacted small files")),
        "a keyed table was compacted"
    );
    assert!(
        logs.iter()
            .any(|l| l.contains("caught the primary-key index up from its checkpoint")),
        "an index was caught up from a checkpoint"
    );
    nodes.remove(&home).expect("the coordinator's node").kill9();
    eprintln!("the keyed tables' partitions were owned by nodes {owners:?}; killed node {home}, the users table's coordinator");
    let reader = nodes.keys().next().copied().expect("a survivor");
    let output = phase(&nodes, &nodes[&reader], "after-restart");
    // The new coordinator started from the index checkpoint, not from every data file.
    let logs: Vec<String> = nodes.values().flat_map(|n| n.logs_so_far()).collect();
    assert!(
        logs.iter().any(
            |l| l.contains("caught the primary-key index up from its checkpoint")
                && l.contains("default.users")
        ),
        "the users table's new coordinator caught up from a checkpoint"
    );
    let writers: BTreeSet<u64> = output
        .lines()
        .filter_map(|l| l.strip_prefix("writers "))
        .flat_map(|l| l.split_once(' ').map_or("", |(_, w)| w).split(','))
        .filter_map(|w| w.parse().ok())
        .collect();
    eprintln!("{output}the keyed tables' files were written by nodes {writers:?}");
    assert!(
        writers.len() >= 2,
        "keyed tables convert on their partitions' owners: {output}"
    );
    // A checkpoint that does not read: the users coordinator's node is stopped (it writes no
    // new one), its checkpoints cut short, and the node killed. The last node rebuilds the
    // index from the table, and the last step lands again with the latest row per key.
    let home = coordinator_node(&nodes, "default.users", 30);
    signal(&nodes[&home], libc::SIGSTOP);
    let cut = cluster.cut_objects(|key| key.contains("/inlet-key-index/"));
    assert!(cut > 0, "the users table had checkpoints");
    nodes.remove(&home).expect("the coordinator's node").kill9();
    let reader = nodes.keys().next().copied().expect("a survivor");
    phase(&nodes, &nodes[&reader], "after-restart");
    let logs: Vec<String> = nodes.values().flat_map(|n| n.logs_so_far()).collect();
    assert!(
        logs.iter().any(|l| l
            .contains("cannot catch the primary-key index up from its checkpoint")
            && l.contains("default.users")),
        "the cut checkpoint was refused"
    );
    assert!(
        logs.iter()
            .any(|l| l.contains("built the primary-key index from the table")
                && l.contains("default.users")),
        "the index was rebuilt from the table"
    );
    for node in nodes.into_values() {
        node.stop();
    }
}

/// Two nodes whose PostgreSQL and S3 are behind fault-injecting proxies: latency, every
/// connection cut, PostgreSQL refusing connections for two seconds. Producing rides through
/// (acknowledgements wait or fail with retriable errors and the client retries), and every
/// acknowledged record is in the topic once.
#[test]
fn a_cluster_rides_through_a_faulty_network_to_postgresql_and_s3() {
    use inlet_test_support::proxy::Proxy;
    let Some(mut cluster) = Cluster::new("") else {
        return;
    };
    const FAULTS: &str = "faults";
    let pg_upstream = pg_host_port(&cluster.db);
    let pg = std::sync::Arc::new(Proxy::start(&pg_upstream));
    cluster.db = cluster.db.replacen(&pg_upstream, &pg.addr, 1);
    let s3 = Proxy::start(cluster.endpoint.trim_start_matches("http://"));
    cluster.endpoint = format!("http://{}", s3.addr);

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let nodes: BTreeMap<u64, Node> = (1..=2).map(|id| (id, cluster.start(id))).collect();
    create_topics(
        &nodes[&1],
        &[NewTopic::new(FAULTS, 6, TopicReplication::Fixed(1))],
    );
    wait_topic_owned_by(&nodes[&1], FAULTS, 6, &[1, 2], 30);
    let all = bootstrap(&nodes);
    let p = producer(&all);

    let acked = rt.block_on(produce_to(&p, FAULTS, 6, 0..3000, |k| match k {
        500 => {
            pg.set_delay(20);
            s3.set_delay(30);
        }
        1000 => {
            pg.cut();
            s3.cut();
        }
        1500 => {
            // PostgreSQL down for two seconds, its connections gone.
            pg.set_refuse(true);
            pg.cut();
            let pg = pg.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_secs(2));
                pg.set_refuse(false);
            });
        }
        2000 => {
            pg.set_refuse(false);
            pg.set_delay(0);
            s3.set_delay(0);
        }
        _ => {}
    }));
    assert_eq!(acked.len(), 3000);
    let got = read_topic(&all, FAULTS, 6);
    let missing: Vec<_> = acked
        .iter()
        .filter(|(k, ..)| !got.contains_key(k))
        .map(|(k, p, o, _)| (*k, *p, *o))
        .collect();
    assert!(
        missing.is_empty(),
        "acknowledged, not in the topic (key, partition, offset): {missing:?}; owners {:?}",
        owners_of(&nodes[&1], FAULTS)
    );
    assert_eq!(got.len(), 3000, "records in the topic vs acknowledged");
    for (k, partition, offset, _) in &acked {
        assert_eq!(got.get(k), Some(&(*partition, *offset)), "k{k}");
    }
    for node in nodes.into_values() {
        node.stop();
    }
}

/// The host:port of a PostgreSQL URL.
fn pg_host_port(url: &str) -> String {
    url.split_once('@')
        .and_then(|(_, rest)| rest.split_once('/'))
        .map(|(hostport, _)| hostport.to_string())
        .expect("host:port in the PostgreSQL URL")
}

/// Nodes 1 and 2 on the cluster's metadata store and node 3 on `db3` (the same store through
/// a proxy), with `topic` of `partitions` spread over the three.
fn three_nodes_with_node_3_on(
    cluster: &Cluster,
    db3: &str,
    topic: &str,
    partitions: i32,
) -> BTreeMap<u64, Node> {
    let mut nodes: BTreeMap<u64, Node> = (1..=2).map(|id| (id, cluster.start(id))).collect();
    nodes.insert(3, cluster.start_on_meta(3, db3));
    create_topics(
        &nodes[&1],
        &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
    );
    wait_topic_owned_by(&nodes[&1], topic, partitions, &[1, 2, 3], 60);
    nodes
}

/// Waits (90 s at most) for node `id` to lead partitions of `topic`, as `node` sees it;
/// returns them.
fn wait_node_leads(node: &Node, topic: &str, id: u64) -> Vec<i32> {
    poll_until(
        90,
        &format!("node {id} to lead partitions of {topic}"),
        || {
            let mine = owned_by(node, topic, id);
            (!mine.is_empty()).then_some(mine)
        },
    )
}

/// Each acknowledged key's partition and offset, and when it was acknowledged.
type Acked = Vec<(u64, i32, i64, Instant)>;

/// An idempotent acks=all librdkafka producer sending round robin over every partition of a
/// topic, at most 64 records in flight, until stopped; each acknowledgement is kept with its
/// instant as it comes (a partition held up holds up no other). A record not acknowledged
/// within 120 s fails the test.
struct Load {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    acks: std::sync::Arc<std::sync::Mutex<Acked>>,
    thread: std::thread::JoinHandle<()>,
    partitions: i32,
}

impl Load {
    fn start(boot: &str, topic: &'static str, partitions: i32) -> Load {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let acks: std::sync::Arc<std::sync::Mutex<Acked>> = Default::default();
        let thread = {
            let (stop, acks, boot) = (stop.clone(), acks.clone(), boot.to_string());
            std::thread::spawn(move || {
                use futures::StreamExt;
                let rt = tokio::runtime::Runtime::new().expect("runtime");
                // A request already sent to a node that stops answering (paused, or cut off)
                // is given up only after `request.timeout.ms` (librdkafka's default: 30 s),
                // and an idempotent producer sends nothing more to that partition until then;
                // a Metadata request is given up after `socket.timeout.ms` (60 s), and no
                // other is sent for the topic meanwhile. So it is with a Kafka broker: no
                // server can answer for a stopped process. 5 s each here, as a client tuned
                // for fast failover sets them.
                let mut config = ClientConfig::new();
                config
                    .set("bootstrap.servers", &boot)
                    .set("enable.idempotence", "true")
                    .set("acks", "all")
                    .set("linger.ms", "5")
                    .set("message.timeout.ms", "120000")
                    .set("request.timeout.ms", "5000")
                    .set("socket.timeout.ms", "5000")
                    .set("topic.metadata.refresh.interval.ms", "1000");
                debug_from_env(&mut config);
                let p: FutureProducer<StderrLog> =
                    config.create_with_context(StderrLog).expect("producer");
                rt.block_on(async {
                    let mut in_flight = futures::stream::FuturesUnordered::new();
                    let mut next = 0u64;
                    loop {
                        let stopping = stop.load(Ordering::Relaxed);
                        if !stopping && in_flight.len() < 64 {
                            let (p, k) = (p.clone(), next);
                            next += 1;
                            in_flight.push(async move {
                                let key = format!("k{k}");
                                let record = FutureRecord::to(topic)
                                    .key(&key)
                                    .payload(&key)
                                    .partition((k % partitions as u64) as i32);
                                let d = p
                                    .send(record, Duration::from_secs(120))
                                    .await
                                    .unwrap_or_else(|(e, _)| {
                                        panic!("{key} was not acknowledged: {e}")
                                    });
                                (k, d.partition, d.offset, Instant::now())
                            });
                            continue;
                        }
                        match in_flight.next().await {
                            Some(a) => acks.lock().unwrap().push(a),
                            None => break,
                        }
                    }
                });
            })
        };
        Load {
            stop,
            acks,
            thread,
            partitions,
        }
    }

    /// The first acknowledgement on `partition` after `since`, if any yet.
    fn acked_since(&self, since: Instant, partition: i32) -> Option<Instant> {
        self.acks
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, p, _, at)| *p == partition && *at > since)
            .map(|(.., at)| *at)
            .min()
    }

    /// Waits for an acknowledgement on every partition after `since`.
    fn wait_for_every_partition_since(&self, since: Instant) {
        poll_until(60, "acks on every partition", || {
            (0..self.partitions)
                .all(|p| self.acked_since(since, p).is_some())
                .then_some(())
        });
    }

    /// Waits for a first acknowledgement on every partition.
    fn wait_for_every_partition(&self) {
        self.wait_for_every_partition_since(Instant::now() - Duration::from_secs(3600));
    }

    /// Stops sending, waits for every record in flight, and returns what was acknowledged.
    fn stop(self) -> Acked {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().expect("the load ran to its end");
        std::mem::take(&mut *self.acks.lock().unwrap())
    }
}

/// Node 3 reaches PostgreSQL through a proxy that turns into a black hole for 20 s, as a lost
/// route or a firewall that forgets its state does: its open connections go silent for good
/// (no FIN, no RST) and new ones hang. Meanwhile an idempotent producer sends to every
/// partition. Node 3 stops acknowledging within its lease and turns Kafka connections away;
/// its partitions are acknowledged on the other nodes within the failover bound; once the path answers again (the silent
/// connections stay silent), node 3 comes back, takes a share and acknowledges again; and
/// every acknowledged record is in the topic once, at its offset.
#[test]
fn a_node_whose_postgresql_goes_silent_stops_acknowledging_and_comes_back() {
    use inlet_test_support::proxy::Proxy;
    let Some(cluster) = Cluster::new("") else {
        return;
    };
    const SILENT: &str = "silent";
    const PARTS: i32 = 6;
    let upstream = pg_host_port(&cluster.db);
    let hole = Proxy::start(&upstream);
    let db3 = cluster.db.replacen(&upstream, &hole.addr, 1);
    let nodes = three_nodes_with_node_3_on(&cluster, &db3, SILENT, PARTS);
    let boot = bootstrap(&nodes);

    let load = Load::start(&boot, SILENT, PARTS);
    load.wait_for_every_partition();
    // (A busy machine may have moved node 3's partitions meanwhile: it leads some again soon.)
    let theirs = wait_node_leads(&nodes[&1], SILENT, 3);

    let silenced = Instant::now();
    hole.black_hole(true);
    // Its partitions are acknowledged elsewhere within the failover bound (a 3 s lease here).
    for p in &theirs {
        let at = poll_until(30, "an ack on node 3's partition", || {
            load.acked_since(silenced, *p)
        });
        let took = at.duration_since(silenced);
        assert!(
            took < Duration::from_secs(10),
            "partition {p} was acknowledged again {took:?} after node 3 lost PostgreSQL"
        );
    }
    // Node 3 acknowledges nothing once its lease is over.
    let lease_over = silenced + Duration::from_secs(4);
    if let Some(wait) = lease_over.checked_duration_since(Instant::now()) {
        std::thread::sleep(wait);
    }
    // It turns Kafka connections away: its view is stale, and a Metadata answer from it would
    // name no leader for the partitions the others took (librdkafka kept asking it, and
    // stalled on them, before it did).
    let mut turned_away = Conn::open(&nodes[&3]);
    let request = common::wire::encode_request(
        &kafka_protocol::messages::RequestHeader::default()
            .with_request_api_key(ApiKey::ApiVersions as i16)
            .with_request_api_version(0),
        &RequestKind::ApiVersions(Default::default()),
    );
    // The write may already fail (the node closed the connection): the read below says so.
    let _ = std::io::Write::write_all(&mut turned_away.s, &request);
    let mut byte = [0u8; 1];
    let read = std::io::Read::read(&mut turned_away.s, &mut byte);
    assert!(
        matches!(read, Ok(0)) || read.is_err(),
        "node 3 answered a Kafka request while it stands down: {read:?}"
    );
    let produced = |n: &Node| n.metric("inlet_kafka_produced_records_total");
    let before = produced(&nodes[&3]);
    wait_topic_owned_by(&nodes[&1], SILENT, PARTS, &[1, 2], 30);
    poll_until(60, "the hole's 20 s", || {
        (silenced.elapsed() > Duration::from_secs(20)).then_some(())
    });
    assert_eq!(
        produced(&nodes[&3]),
        before,
        "node 3 acknowledged records with PostgreSQL silent past its lease"
    );

    // The path answers again; the connections it silenced stay silent.
    hole.black_hole(false);
    let healed = Instant::now();
    let back = wait_node_leads(&nodes[&1], SILENT, 3);
    let resumed = produced(&nodes[&3]);
    poll_until(60, "node 3 to acknowledge again", || {
        (produced(&nodes[&3]) > resumed).then_some(())
    });
    println!(
        "node 3 took {back:?} again {:?} after PostgreSQL answered",
        healed.elapsed()
    );

    let acked = load.stop();
    all_in_place(&read_topic(&boot, SILENT, PARTS), &acked);
    for node in nodes.into_values() {
        node.stop();
    }
}

/// Node 3 reaches PostgreSQL through a proxy that adds 25 ms each way, so that its WAL-object
/// commits (a transaction that locks its streams' rows over several round trips) last long
/// enough to be caught in the middle. Under an idempotent load it is SIGSTOPped again and
/// again, each time the moment PostgreSQL shows one of its sessions inside a transaction,
/// until three pauses caught it there (one of its sessions idle in
/// a transaction for more than a second, as PostgreSQL reports in `pg_stat_activity`). Each
/// time, its partitions are acknowledged on the other nodes within the failover bound:
/// PostgreSQL ends the paused session (`idle_in_transaction_session_timeout`), which frees its
/// row locks, and the takeovers waiting on them go on. Then it resumes and takes a share
/// again. Every acknowledged record is in the topic once, at its offset.
#[test]
fn repeated_pauses_inside_wal_commits_hold_up_no_failover() {
    use inlet_test_support::proxy::Proxy;
    let Some(cluster) = Cluster::new("") else {
        return;
    };
    const TOPIC: &str = "paused";
    const PARTS: i32 = 6;
    const CAUGHT: usize = 3;
    let upstream = pg_host_port(&cluster.db);
    let slow = Proxy::start(&upstream);
    slow.set_delay(25);
    // Node 3's sessions are named, to catch one inside a transaction.
    let db3 = format!(
        "{}{}application_name=inlet-node-3",
        cluster.db.replacen(&upstream, &slow.addr, 1),
        if cluster.db.contains('?') { '&' } else { '?' }
    );
    let nodes = three_nodes_with_node_3_on(&cluster, &db3, TOPIC, PARTS);
    let boot = bootstrap(&nodes);
    let load = Load::start(&boot, TOPIC, PARTS);
    load.wait_for_every_partition();

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    // Node 3's sessions idle inside a transaction for over a second: it is paused in the
    // middle of one.
    let stuck_sessions = || {
        rt.block_on(inlet_test_support::postgres_i64(
            &cluster.db,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'inlet-node-3' \
             AND state = 'idle in transaction' AND state_change < now() - interval '1 second'",
        ))
    };
    let mut caught = 0;
    let mut pauses = 0;
    while caught < CAUGHT {
        assert!(
            pauses < 4 * CAUGHT,
            "only {caught} of {pauses} pauses caught node 3 inside a transaction"
        );
        // Node 3 leads partitions and acknowledges on each of them.
        let theirs = wait_node_leads(&nodes[&1], TOPIC, 3);
        let since = Instant::now();
        poll_until(60, "acks on node 3's partitions", || {
            theirs
                .iter()
                .all(|p| load.acked_since(since, *p).is_some())
                .then_some(())
        });
        // At a moment node 3 is inside a transaction (it may finish it before the signal
        // lands: what counts is checked below).
        rt.block_on(inlet_test_support::postgres_until_positive(
            &cluster.db,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'inlet-node-3' \
             AND state = 'idle in transaction'",
            10,
        ));
        let paused = Instant::now();
        signal(&nodes[&3], libc::SIGSTOP);
        pauses += 1;
        // The pause must last before PostgreSQL can tell (this is the fault, not a wait).
        std::thread::sleep(Duration::from_millis(1500));
        let inside = stuck_sessions() > 0;
        caught += usize::from(inside);
        for p in &theirs {
            // (An answer node 3 sent before it stopped reaches the client within a moment.)
            let at = poll_until(30, "an ack on node 3's partition elsewhere", || {
                load.acked_since(paused + Duration::from_millis(200), *p)
            });
            let took = at.duration_since(paused);
            assert!(
                took < Duration::from_secs(10),
                "partition {p} was acknowledged again {took:?} after node 3 was paused \
                 (inside a transaction: {inside})"
            );
        }
        println!(
            "pause {pauses}: inside a transaction: {inside}; partitions {theirs:?} acknowledged \
             elsewhere within {:?}",
            paused.elapsed()
        );
        signal(&nodes[&3], libc::SIGCONT);
    }
    // Every partition goes on being acknowledged after the last resume.
    load.wait_for_every_partition_since(Instant::now());
    let acked = load.stop();
    all_in_place(&read_topic(&boot, TOPIC, PARTS), &acked);
    for node in nodes.into_values() {
        node.stop();
    }
}

/// Partitions are balanced by bytes in: three partitions one node holds become hot, and the
/// nodes end up with one hot partition each (by count alone nothing would move). Every record
/// acknowledged while they move is in the topic once.
#[test]
fn hot_partitions_spread_over_the_nodes() {
    const HOT_TOPIC: &str = "hot";
    // A small load unit: about 100 KiB/s of produce weighs 7 partitions.
    let Some(cluster) = Cluster::new("load_unit_bytes = 16384\n") else {
        return;
    };
    let nodes: BTreeMap<u64, Node> = (1..=3).map(|id| (id, cluster.start(id))).collect();
    create_topics(
        &nodes[&1],
        &[NewTopic::new(HOT_TOPIC, 9, TopicReplication::Fixed(1))],
    );
    let spread = poll_until(60, "three partitions on each node", || {
        let now = wait_topic_owned_by(&nodes[&1], HOT_TOPIC, 9, &[1, 2, 3], 60);
        [1, 2, 3]
            .iter()
            .all(|n| now.iter().filter(|o| *o == n).count() == 3)
            .then_some(now)
    });
    let hot: Vec<i32> = (0..9)
        .filter(|p| spread[*p as usize] == spread[0])
        .collect();

    // About 100 KiB/s to each hot partition until they sit on three nodes.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sender = {
        let (stop, all, hot) = (stop.clone(), bootstrap(&nodes), hot.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().expect("runtime");
            let p = producer(&all);
            let value = "x".repeat(1024);
            let mut acked: BTreeMap<i32, i64> = BTreeMap::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let started = Instant::now();
                let sends: Vec<_> = (0..100)
                    .flat_map(|_| hot.iter().copied())
                    .map(|part| {
                        let record = FutureRecord::<(), _>::to(HOT_TOPIC)
                            .payload(&value)
                            .partition(part);
                        p.send_result(record).expect("queued")
                    })
                    .collect();
                for s in sends {
                    let delivered = rt
                        .block_on(s)
                        .expect("delivery")
                        .unwrap_or_else(|(e, _)| panic!("not acknowledged: {e}"));
                    *acked.entry(delivered.partition).or_default() += 1;
                }
                if let Some(rest) = Duration::from_secs(1).checked_sub(started.elapsed()) {
                    std::thread::sleep(rest);
                }
            }
            acked
        })
    };
    let moved = poll_until(120, "the hot partitions on three nodes", || {
        let v = view(&nodes[&1]);
        let parts = v["partitions"][HOT_TOPIC].as_array()?.clone();
        let owners: BTreeSet<u64> = hot
            .iter()
            .map(|p| parts[*p as usize]["owner"].as_u64())
            .collect::<Option<_>>()?;
        let heavy = hot.iter().all(|p| {
            parts[*p as usize]["weight"]
                .as_u64()
                .is_some_and(|w| w >= 3)
        });
        (heavy && owners.len() == 3).then_some(parts)
    });
    eprintln!("hot partitions {hot:?}, now: {moved:?}");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked = sender.join().expect("the producer thread");
    // Each partition holds exactly what was acknowledged to it: nothing lost, nothing twice.
    let c = consumer(&bootstrap(&nodes), "watermarks");
    for part in 0..9 {
        let (_, high) = poll_until(60, "the partition's watermarks", || {
            c.fetch_watermarks(HOT_TOPIC, part, Duration::from_secs(5))
                .ok()
        });
        assert_eq!(
            high,
            acked.get(&part).copied().unwrap_or(0),
            "partition {part}"
        );
    }

    // Deleting the topic deletes its published weights too (every pass reads them).
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let weights = || {
        rt.block_on(async {
            let pool = sqlx::PgPool::connect(&cluster.db)
                .await
                .expect("PostgreSQL");
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM inlet_stream_load")
                .fetch_one(&pool)
                .await
                .expect("the weights");
            pool.close().await;
            n
        })
    };
    assert!(weights() >= 3, "the hot partitions' weights are published");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap(&nodes))
        .create()
        .expect("admin");
    let deleted = rt
        .block_on(admin.delete_topics(
            &[HOT_TOPIC],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        ))
        .expect("delete the topic");
    assert!(deleted.iter().all(|d| d.is_ok()), "{deleted:?}");
    poll_until(30, "the deleted topic's weights gone", || {
        (weights() == 0).then_some(())
    });
}

/// The value of topic config `key` of `topic`, as `node` answers DescribeConfigs.
fn topic_config(node: &Node, topic: &str, key: &str) -> Option<String> {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    let r: DescribeConfigsResponse = Conn::open(node).call(
        ApiKey::DescribeConfigs,
        4,
        RequestKind::DescribeConfigs(DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(kafka_protocol::protocol::StrBytes::from_string(
                    topic.to_string(),
                ))
                .with_configuration_keys(Some(vec![
                    kafka_protocol::protocol::StrBytes::from_string(key.to_string()),
                ])),
        ])),
    );
    let resource = r.results.first()?;
    if resource.error_code != 0 {
        return None;
    }
    resource
        .configs
        .iter()
        .find(|c| c.name.as_str() == key)
        .and_then(|c| c.value.as_ref().map(|v| v.to_string()))
}

/// Everything besides partitions is shared: schemas registered at once through every node get
/// ids unique cluster-wide (Python's SchemaRegistryClient), and a topic created on one node is
/// seen by another.
#[test]
fn the_registry_and_topics_are_shared_by_every_node() {
    let Some(python) = common::python::require_python(
        "import confluent_kafka.schema_registry",
        "confluent-kafka's SchemaRegistryClient",
    ) else {
        return;
    };
    let Some(cluster) = Cluster::new("") else {
        return;
    };
    let nodes: BTreeMap<u64, Node> = (1..=3).map(|id| (id, cluster.start(id))).collect();
    let mut args: Vec<std::ffi::OsString> =
        vec![common::python::script("cluster_registry.py").into()];
    args.extend(
        nodes
            .values()
            .map(|n| format!("http://{}", n.registry).into()),
    );
    let (status, output) = common::python::run(&python, &args, Duration::from_secs(180));
    assert!(
        status.is_some_and(|s| s.success()) && output.contains("OK"),
        "the registry across nodes ({status:?}):\n{output}"
    );

    create_topics(
        &nodes[&1],
        &[NewTopic::new("shared", 3, TopicReplication::Fixed(1))],
    );
    let seen = Instant::now();
    poll_until(30, "node 3 to know the topic", || {
        topic_config(&nodes[&3], "shared", "retention.ms")
    });
    eprintln!(
        "node 3 saw the topic {:?} after its creation",
        seen.elapsed()
    );
}

/// A topic reconfigured on node 2 is seen, with its config, by nodes 3 and 1, within a few
/// seconds, and so is a cluster-wide dynamic broker config set through node 2 (each node reads the topics every 250 ms, apart from its assigner's pass; the
/// issue asks for a second, and the time taken is printed; the bound here leaves room for a
/// loaded machine).
///
/// History: this check, when it ran inside the registry test, failed twice in five runs beside
/// the other tests of this file (the change was acknowledged, and for 30 s no node described
/// it), and was ignored. It was not reproduced since (six runs of this form, three beside
/// every other test of the file). The topics were then read only by the assigner's pass,
/// which can wait on a takeover's replay; they are now also polled on their own.
#[test]
fn a_config_change_on_one_node_reaches_the_others() {
    let Some(cluster) = Cluster::new("") else {
        return;
    };
    let nodes: BTreeMap<u64, Node> = (1..=3).map(|id| (id, cluster.start(id))).collect();
    create_topics(
        &nodes[&1],
        &[NewTopic::new("shared", 3, TopicReplication::Fixed(1))],
    );
    for n in [2, 3] {
        poll_until(30, "every node to know the topic", || {
            topic_config(&nodes[&n], "shared", "retention.ms")
        });
    }
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &nodes[&2].kafka)
        .create()
        .expect("admin");
    let altered = tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(admin.alter_configs(
            &[AlterConfig::new(ResourceSpecifier::Topic("shared")).set("retention.ms", "123456")],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        ))
        .expect("alter configs");
    assert!(altered[0].is_ok(), "{altered:?}");
    let altered_at = Instant::now();
    for n in [3, 1] {
        poll_until(
            30,
            &format!("node {n} to see node 2's config change"),
            || {
                (topic_config(&nodes[&n], "shared", "retention.ms").as_deref() == Some("123456"))
                    .then_some(())
            },
        );
        let took = altered_at.elapsed();
        eprintln!("node {n} saw the config change {took:?} after it");
        assert!(
            took < Duration::from_secs(5),
            "the config change took {took:?} to reach node {n}"
        );
    }

    // A cluster-wide dynamic broker config (resource "") set through node 2 reaches the
    // topic's default on the other nodes the same way.
    let (code, message) = common::alter_broker_configs(
        &nodes[&2],
        "",
        &[("log.retention.bytes", 0, Some("7654321"))],
    );
    assert_eq!(code, 0, "{message:?}");
    let altered_at = Instant::now();
    for n in [3, 1] {
        poll_until(
            30,
            &format!("node {n} to see the cluster-wide broker config"),
            || {
                (topic_config(&nodes[&n], "shared", "retention.bytes").as_deref()
                    == Some("7654321"))
                .then_some(())
            },
        );
        let took = altered_at.elapsed();
        eprintln!("node {n} saw the dynamic broker config {took:?} after it");
        assert!(
            took < Duration::from_secs(5),
            "the dynamic broker config took {took:?} to reach node {n}"
        );
    }
}

/// Apache kafka-clients 4.3.0 through the kill of a node (`tests/clients/java/ClusterClients.java`):
/// its idempotent producer has every record acknowledged, its consumer group reads each once
/// at its acknowledged offset, and its AdminClient finds the group's offsets and lists it once.
#[test]
fn java_clients_ride_through_the_kill_of_a_node() {
    let Some(libs) = common::java_clients() else {
        return;
    };
    let Some(cluster) = Cluster::new("") else {
        return;
    };
    const JAVA_TOPIC: &str = "java-cluster";
    const N: u64 = 3000;
    let classes = common::compile_java("ClusterClients.java", &libs);
    let mut nodes: BTreeMap<u64, Node> = (1..=3).map(|id| (id, cluster.start(id))).collect();
    let mut java = std::process::Command::new("java")
        .arg("-cp")
        .arg(format!("{}:{}/*", classes.path().display(), libs.display()))
        .args(["ClusterClients", &bootstrap(&nodes), JAVA_TOPIC, "6"])
        .arg(N.to_string())
        .arg("300")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("java runs");
    let lines =
        std::io::BufRead::lines(std::io::BufReader::new(java.stdout.take().expect("stdout")));
    let (mut killed, mut ok, mut output) = (None, false, Vec::new());
    for line in lines {
        let line = line.expect("a line");
        if line == format!("acked {}", N * 3 / 10) {
            // The node that owns partition 0 of the topic, under load.
            let observer = *nodes.keys().next().unwrap();
            let owner = owners_of(&nodes[&observer], JAVA_TOPIC)[0].expect("an owner");
            nodes.remove(&owner).expect("a node").kill9();
            killed = Some(owner);
        }
        ok |= line == "OK";
        output.push(line);
    }
    let status = java.wait().expect("java exits");
    assert!(
        status.success() && ok,
        "the Java clients failed ({status}):\n{}",
        output.join("\n")
    );
    assert!(
        killed.is_some(),
        "no node was killed:\n{}",
        output.join("\n")
    );
    assert!(
        output.iter().any(|l| l.starts_with("kafka-clients 4.3.0")),
        "{output:?}"
    );
    for node in nodes.into_values() {
        node.stop();
    }
}

/// What one group's consumer saw: every delivery below an offset it had already committed is a
/// re-delivery the fencing should have prevented.
#[derive(Debug, Default)]
struct GroupLog {
    /// partition → the offset the group last committed successfully (next to read).
    committed: BTreeMap<i32, i64>,
    /// Deliveries below `committed`: (partition, offset, committed then).
    redelivered: Vec<(i32, i64, i64)>,
    delivered: u64,
    /// Successful commits.
    commits: u64,
}

/// Consumes `topic` in group `group`, committing synchronously every 10 records (and whatever
/// it consumed since its last commit when it finds nothing new), until `stop`; logs what it
/// saw in `log`.
fn consume_group(
    bootstrap: String,
    topic: &'static str,
    group: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    log: std::sync::Arc<std::sync::Mutex<GroupLog>>,
) {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", &group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "10000")
        .set("heartbeat.interval.ms", "1000")
        .set("topic.metadata.refresh.interval.ms", "1000");
    debug_from_env(&mut config);
    let c: BaseConsumer<StderrLog> = config.create_with_context(StderrLog).expect("consumer");
    c.subscribe(&[topic]).expect("subscribe");
    let mut since_commit = 0;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let idle = match c.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let mut log = log.lock().unwrap();
                let floor = log.committed.get(&m.partition()).copied().unwrap_or(0);
                if m.offset() < floor {
                    log.redelivered.push((m.partition(), m.offset(), floor));
                }
                log.delivered += 1;
                since_commit += 1;
                false
            }
            Some(Err(_)) => false,
            None => true,
        };
        if since_commit >= 10 || (idle && since_commit > 0) {
            since_commit = 0;
            // A commit that fails (the coordinator moving) is retried with the next ten.
            if c.commit_consumer_state(CommitMode::Sync).is_ok() {
                let positions = c.position().expect("positions");
                let mut log = log.lock().unwrap();
                log.commits += 1;
                for e in positions.elements() {
                    if let Offset::Offset(o) = e.offset() {
                        let at = log.committed.entry(e.partition()).or_insert(0);
                        *at = (*at).max(o);
                    }
                }
            }
        }
    }
}

/// Each partition of `topic` with its owner and epoch, as `node` sees the metadata store.
fn partition_epochs(node: &Node, topic: &str) -> BTreeMap<i32, (Option<u64>, i64)> {
    view(node)["partitions"][topic]
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .map(|p| {
                    (
                        p["partition"].as_i64().expect("index") as i32,
                        (p["owner"].as_u64(), p["epoch"].as_i64().expect("epoch")),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The error code of a Fetch v12 of `topic`'s `partition` on `node` from offset 0, naming
/// `current_leader_epoch`.
fn fetch_code(node: &Node, topic: &str, partition: i32, current_leader_epoch: i32) -> i16 {
    let mut conn = Conn::open(node);
    let r: kafka_protocol::messages::FetchResponse = conn.call(
        ApiKey::Fetch,
        12,
        common::requests::fetch_from_start(topic, partition, current_leader_epoch),
    );
    r.responses[0].partitions[0].error_code
}

/// Every key a nemesis load sent: acknowledged (key, partition, offset) or failed (key, error).
fn sent_keys(acked: &[(u64, i32, i64)], failed: &[(u64, String)]) -> BTreeSet<u64> {
    acked
        .iter()
        .map(|(k, ..)| *k)
        .chain(failed.iter().map(|(k, _)| *k))
        .collect()
}

/// Waits up to `secs` for the consumer threads to end; returns how many did not (a thread
/// blocked in librdkafka's synchronous commit cannot be stopped: it is left to end with the
/// test's process, instead of holding the test up).
fn join_consumers(consumers: Vec<std::thread::JoinHandle<()>>, secs: u64) -> usize {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline && consumers.iter().any(|c| !c.is_finished()) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut blocked = 0;
    for c in consumers {
        if c.is_finished() {
            c.join().expect("consumer thread");
        } else {
            blocked += 1;
        }
    }
    blocked
}

/// Checks what `group`'s consumer saw of `topic`: nothing delivered below an offset it had
/// committed, and what the group's coordinator answers now is at least where its consumer last
/// committed (higher is possible: a commit that landed but whose answer was lost; lower never).
/// `context` ends every message.
fn check_group(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    group: &str,
    log: &GroupLog,
    context: &str,
) {
    assert!(
        log.redelivered.is_empty(),
        "{group} was delivered records below offsets it had committed (partition, offset, \
         committed){context}: {:?}",
        &log.redelivered[..log.redelivered.len().min(10)]
    );
    let c = consumer(bootstrap, group);
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let committed = c
        .committed_offsets(tpl, Duration::from_secs(30))
        .expect("committed offsets");
    for e in committed.elements() {
        let want = log.committed.get(&e.partition()).copied().unwrap_or(0);
        let got = match e.offset() {
            Offset::Offset(o) => o,
            _ => 0,
        };
        assert!(
            got >= want,
            "{group} partition {}: committed offsets went back from {want} to {got}{context}",
            e.partition()
        );
    }
    println!(
        "{group}: {} delivered, {} commits",
        log.delivered, log.commits
    );
}

/// The groups `node` coordinates (and holds members of) now.
fn groups_of(node: &Node) -> BTreeSet<String> {
    view(node)["owned_by_this_node"]["groups"]
        .as_array()
        .map(|g| {
            g.iter()
                .filter_map(|g| g.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Eight consumer groups commit synchronously while records keep coming. The node that
/// coordinates most of them is SIGSTOPped past its lease (their consumers move to the other
/// nodes and commit there), then resumed (the groups come back to it). No group is delivered
/// a record below an offset it had committed, and every group's committed offsets end where
/// its consumer last committed them: a returning coordinator reads the groups afresh instead
/// of serving what it held before the pause, and its late writes are fenced.
#[test]
fn consumer_groups_never_go_back_when_their_coordinator_pauses_past_its_lease() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let Some(cluster) = Cluster::new("") else {
        return;
    };
    const FEED: &str = "feed";
    let nodes: BTreeMap<u64, Node> = (1..=3).map(|id| (id, cluster.start(id))).collect();
    let boot = bootstrap(&nodes);
    create_topics(
        &nodes[&1],
        &[NewTopic::new(FEED, 4, TopicReplication::Fixed(1))],
    );
    wait_topic_owned_by(&nodes[&1], FEED, 4, &[1, 2, 3], 60);
    let stop_producing = Arc::new(AtomicBool::new(false));
    let producing = {
        let stop = stop_producing.clone();
        let boot = boot.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().expect("runtime");
            let p = producer(&boot);
            let mut next = 0;
            while !stop.load(Ordering::Relaxed) {
                rt.block_on(produce_to(&p, FEED, 4, next..next + 20, |_| {}));
                next += 20;
                std::thread::sleep(Duration::from_millis(50));
            }
            next
        })
    };
    let stop_consuming = Arc::new(AtomicBool::new(false));
    let groups: Vec<(String, Arc<Mutex<GroupLog>>)> = (0..8)
        .map(|i| (format!("g{i}"), Arc::new(Mutex::new(GroupLog::default()))))
        .collect();
    let consumers: Vec<_> = groups
        .iter()
        .map(|(g, log)| {
            let (boot, g, stop, log) =
                (boot.clone(), g.clone(), stop_consuming.clone(), log.clone());
            std::thread::spawn(move || consume_group(boot, FEED, g, stop, log))
        })
        .collect();
    let commits = |groups: &[(String, Arc<Mutex<GroupLog>>)]| -> Vec<u64> {
        groups
            .iter()
            .map(|(_, l)| l.lock().unwrap().commits)
            .collect()
    };
    // Every group consumes and commits, and each has its coordinator.
    poll_until(90, "every group committing", || {
        commits(&groups).iter().all(|&c| c >= 3).then_some(())
    });
    let (&paused, held) = poll_until(60, "the groups' coordinators", || {
        let by_node: BTreeMap<u64, BTreeSet<String>> =
            nodes.iter().map(|(id, n)| (*id, groups_of(n))).collect();
        let all: BTreeSet<&String> = by_node.values().flatten().collect();
        (all.len() == 8)
            .then(|| by_node.into_iter().max_by_key(|(_, g)| g.len()))
            .flatten()
            .map(|(id, g)| (nodes.keys().find(|&&k| k == id).unwrap(), g))
    });
    let others: Vec<u64> = nodes.keys().copied().filter(|&id| id != paused).collect();
    // The leader epochs of the partitions the paused node leads, as the cluster sees them.
    let before: BTreeMap<i32, i64> = partition_epochs(&nodes[&others[0]], FEED)
        .into_iter()
        .filter(|(_, (owner, _))| *owner == Some(paused))
        .map(|(p, (_, epoch))| (p, epoch))
        .collect();
    println!("node {paused} coordinates {held:?} and leads {before:?}; pausing it past its lease");
    signal(&nodes[&paused], libc::SIGSTOP);
    // Its groups move to the other nodes, and their consumers commit there.
    poll_until(60, "the paused node's groups coordinated elsewhere", || {
        let elsewhere: BTreeSet<String> =
            others.iter().flat_map(|id| groups_of(&nodes[id])).collect();
        held.is_subset(&elsewhere).then_some(())
    });
    // Its partitions moved under higher epochs: their new leaders fence the old epoch.
    for (&p, &old) in &before {
        let (owner, epoch) = poll_until(60, "the paused node's partition moved", || {
            let (owner, epoch) = partition_epochs(&nodes[&others[0]], FEED)[&p];
            owner.filter(|o| others.contains(o)).map(|o| (o, epoch))
        });
        assert!(
            epoch > old,
            "partition {p} moved at epoch {epoch}, after {old}"
        );
        let fenced = kafka_protocol::ResponseError::FencedLeaderEpoch.code();
        let code = poll_until(30, "the new leader serving the partition", || {
            let code = fetch_code(&nodes[&owner], FEED, p, old as i32);
            (code != kafka_protocol::ResponseError::NotLeaderOrFollower.code()).then_some(code)
        });
        assert_eq!(
            code, fenced,
            "a fetch in the old epoch {old} on node {owner}"
        );
        assert_eq!(fetch_code(&nodes[&owner], FEED, p, epoch as i32), 0);
    }
    let before = commits(&groups);
    poll_until(60, "every group committing on the other nodes", || {
        commits(&groups)
            .iter()
            .zip(&before)
            .all(|(now, then)| now >= &(then + 3))
            .then_some(())
    });
    signal(&nodes[&paused], libc::SIGCONT);
    nodes[&paused].wait_for_log("after it had ended");
    // The groups come back to it (rendezvous), and their consumers commit there again.
    poll_until(60, "the groups back on the resumed node", || {
        held.is_subset(&groups_of(&nodes[&paused])).then_some(())
    });
    let before = commits(&groups);
    poll_until(60, "every group committing after the resume", || {
        commits(&groups)
            .iter()
            .zip(&before)
            .all(|(now, then)| now >= &(then + 3))
            .then_some(())
    });
    stop_consuming.store(true, Ordering::Relaxed);
    assert_eq!(
        join_consumers(consumers, 60),
        0,
        "consumers blocked past 60 s"
    );
    stop_producing.store(true, Ordering::Relaxed);
    let produced = producing.join().expect("producer thread");
    assert!(produced > 0);
    for (group, log) in &groups {
        check_group(&boot, FEED, 4, group, &log.lock().unwrap(), "");
    }
}

/// libfaketime's preload library (Debian's `libfaketime`), if installed.
fn libfaketime() -> Option<String> {
    let found = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib",
    ]
    .iter()
    .map(|d| format!("{d}/faketime/libfaketime.so.1"))
    .find(|p| std::path::Path::new(p).exists());
    if found.is_none() {
        common::require("libfaketime (Debian's libfaketime)", false);
    }
    found
}

/// The node FindCoordinator on `node` names for group `group` (v3, one key).
fn find_coordinator(node: &Node, group: &str) -> i32 {
    use kafka_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};
    let mut conn = Conn::open(node);
    let r: FindCoordinatorResponse = conn.call(
        ApiKey::FindCoordinator,
        3,
        RequestKind::FindCoordinator(
            FindCoordinatorRequest::default()
                .with_key(kafka_protocol::protocol::StrBytes::from_string(
                    group.into(),
                ))
                .with_key_type(0),
        ),
    );
    assert_eq!(
        r.error_code, 0,
        "FindCoordinator({group}) on {}",
        node.kafka
    );
    r.node_id.0
}

/// Node 3's clock runs 10 s ahead of the others' (libfaketime), more than three leases. Leases
/// are written and read on the metadata store's clock, so every node sees the same live nodes:
/// the skewed node neither takes the others' partitions (it would see their leases expired
/// by its own clock) nor coordinates groups they coordinate. Checked over many rebalance
/// passes: one coordinator per group, every node live in every view, and the partitions
/// stay where they settled.
#[test]
fn a_node_whose_clock_runs_ten_seconds_ahead_agrees_with_the_others() {
    let Some(cluster) = Cluster::new("") else {
        return;
    };
    let Some(faketime) = libfaketime() else {
        return;
    };
    // libfaketime works here: `date` under it is 10 s ahead.
    let date = |env: &[(&str, &str)]| -> i64 {
        let out = std::process::Command::new("date")
            .arg("+%s")
            .envs(env.iter().copied())
            .output()
            .expect("date");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("seconds")
    };
    let skew = [
        ("LD_PRELOAD", faketime.as_str()),
        ("FAKETIME", "+10s"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    let ahead = date(&skew) - date(&[]);
    assert!(
        (9..=11).contains(&ahead),
        "libfaketime put date {ahead} s ahead"
    );
    let mut nodes: BTreeMap<u64, Node> = (1..=2).map(|id| (id, cluster.start(id))).collect();
    nodes.insert(3, cluster.start_with_env(3, &skew));
    create_topics(
        &nodes[&1],
        &[NewTopic::new("skewed", 12, TopicReplication::Fixed(1))],
    );
    let settled = poll_until(60, "the partitions settled over the three nodes", || {
        let first = wait_topic_owned_by(&nodes[&1], "skewed", 12, &[1, 2, 3], 30);
        std::thread::sleep(Duration::from_millis(1_000));
        let then = wait_topic_owned_by(&nodes[&1], "skewed", 12, &[1, 2, 3], 30);
        (first == then && then.iter().collect::<BTreeSet<_>>().len() == 3).then_some(then)
    });
    let groups: Vec<String> = (0..16).map(|i| format!("skew-{i}")).collect();
    let mut coordinated: BTreeSet<i32> = BTreeSet::new();
    // Twenty looks, a pass (300 ms) apart: the skewed node's lease checks ran many times.
    for look in 0..20 {
        for (id, node) in &nodes {
            let live: BTreeSet<u64> = view(node)["nodes"]
                .as_array()
                .expect("nodes")
                .iter()
                .filter(|n| n["live"] == true)
                .filter_map(|n| n["node_id"].as_u64())
                .collect();
            assert_eq!(
                live,
                BTreeSet::from([1, 2, 3]),
                "node {id}'s view at look {look}"
            );
        }
        for g in &groups {
            let answers: BTreeSet<i32> = nodes.values().map(|n| find_coordinator(n, g)).collect();
            assert_eq!(
                answers.len(),
                1,
                "{g} has coordinators {answers:?} at look {look}"
            );
            coordinated.extend(answers);
        }
        assert_eq!(
            wait_topic_owned_by(&nodes[&1], "skewed", 12, &[1, 2, 3], 30),
            settled,
            "partitions moved at look {look}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(
        coordinated.len(),
        3,
        "the groups spread over every node: {coordinated:?}"
    );
}

/// A seeded randomized schedule of faults (a nemesis, as Jepsen runs against Kafka) against
/// three nodes under load, then a checker. Load: an idempotent acks=all producer on a plain
/// topic, a transactional producer on another (`txn_load`), another on a table topic (whose retention is shorter than the run, so the table's
/// hold is exercised), and four consumer groups committing synchronously. Faults, one at a
/// time, each undone before the next: kill -9 of a node and its restart (sometimes with its
/// clock 2–9 s ahead, under libfaketime), SIGSTOP of a node for 1–8 s, PostgreSQL "restarted"
/// (every connection cut, new ones refused for 1–3 s), PostgreSQL connections cut, PostgreSQL
/// silent to one node for 2–10 s (a black hole on its own path: its connections dropped
/// without a word; off with `INLET_NEMESIS_BLACK_HOLES=0`), S3 slowed by 50–300 ms a
/// request, S3 connections cut. The checker: every acknowledged record is in
/// its topic exactly once at the offset it was acknowledged with, every record of the table
/// topic is a row of its table exactly once, no group is delivered a record below an
/// offset it had committed (committed offsets never go backwards), and a transactional
/// producer's transactions are atomic (`check_transactions`: read_committed sees each
/// committed one whole, no aborted record, nothing twice).
///
/// `INLET_NEMESIS_SEED` replays a schedule (the seed is printed first); `INLET_NEMESIS_SECONDS`
/// sets how long faults are injected (CI: 60; docs/benchmarks.md has a 10-minute run).
#[test]
fn a_seeded_nemesis_of_kills_pauses_and_faults_loses_and_doubles_nothing() {
    use inlet_test_support::proxy::Proxy;
    use rand::{Rng, SeedableRng};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let Some(mut cluster) = Cluster::new("") else {
        return;
    };
    let Some(faketime) = libfaketime() else {
        return;
    };
    let seed: u64 = std::env::var("INLET_NEMESIS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    let seconds: u64 = std::env::var("INLET_NEMESIS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    // Black holes on one node's path to PostgreSQL: on unless `INLET_NEMESIS_BLACK_HOLES=0`
    // (the schedule of a seed differs with them off, so a replay sets the same).
    let black_holes = std::env::var("INLET_NEMESIS_BLACK_HOLES").as_deref() != Ok("0");
    println!(
        "nemesis seed {seed} ({seconds} s{}): replay with INLET_NEMESIS_SEED={seed}{}",
        if black_holes { ", black holes" } else { "" },
        if black_holes {
            ""
        } else {
            " INLET_NEMESIS_BLACK_HOLES=0"
        }
    );
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);

    // PostgreSQL and S3 behind fault-injecting proxies.
    let pg_upstream = pg_host_port(&cluster.db);
    let pg = Proxy::start(&pg_upstream);
    cluster.db = cluster.db.replacen(&pg_upstream, &pg.addr, 1);
    let s3 = Proxy::start(cluster.endpoint.trim_start_matches("http://"));
    cluster.endpoint = format!("http://{}", s3.addr);
    // Each node's own path to that proxy, to cut one node off.
    let paths: BTreeMap<u64, (Proxy, String)> = (1..=3)
        .map(|id| {
            let path = Proxy::start(&pg.addr);
            let db = cluster.db.replacen(&pg.addr, &path.addr, 1);
            (id, (path, db))
        })
        .collect();
    let start =
        |id: u64, env: &[(&str, &str)]| cluster.start_on_meta_with_env(id, &paths[&id].1, env);

    const PLAIN: &str = "nemesis";
    const TABLE: &str = "nemesis_table";
    const TXN: &str = "nemesis_txn";
    let mut nodes: BTreeMap<u64, Node> = (1..=3).map(|id| (id, start(id, &[]))).collect();
    create_topics(
        &nodes[&1],
        &[
            NewTopic::new(PLAIN, 6, TopicReplication::Fixed(1)),
            NewTopic::new(TABLE, 4, TopicReplication::Fixed(1))
                .set("table.topic.enable", "true")
                .set("table.topic.commit.interval.ms", "1000")
                .set("table.topic.convert.value.type", "string")
                .set("retention.ms", "15000"),
            NewTopic::new(TXN, 4, TopicReplication::Fixed(1)),
        ],
    );
    wait_topic_owned_by(&nodes[&1], PLAIN, 6, &[1, 2, 3], 60);
    wait_topic_owned_by(&nodes[&1], TXN, 4, &[1, 2, 3], 60);
    wait_topic_owned_by(&nodes[&1], TABLE, 4, &[1, 2, 3], 60);
    let boot = bootstrap(&nodes);

    let stop = Arc::new(AtomicBool::new(false));
    // Each load returns what was acknowledged (key, partition, offset) and the keys whose
    // delivery failed (the nemesis may hold a partition past the delivery timeout: a
    // liveness finding, printed; such a record may be in the topic at most once).
    let load = |topic: &'static str, partitions: i32| {
        let (stop, boot) = (stop.clone(), boot.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().expect("runtime");
            let p = producer(&boot);
            let (mut acked, mut failed) = (Vec::new(), Vec::new());
            let mut next = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let sends: Vec<_> = (next..next + 50)
                    .map(|k| {
                        let p = p.clone();
                        async move {
                            let key = format!("k{k}");
                            let partition = (k % partitions as u64) as i32;
                            let record = FutureRecord::to(topic)
                                .key(&key)
                                .payload(&key)
                                .partition(partition);
                            match p.send(record, Duration::from_secs(120)).await {
                                Ok(d) => Ok((k, d.partition, d.offset)),
                                Err((e, _)) => Err((k, e.to_string())),
                            }
                        }
                    })
                    .collect();
                for outcome in rt.block_on(futures::future::join_all(sends)) {
                    match outcome {
                        Ok(a) => acked.push(a),
                        Err(f) => failed.push(f),
                    }
                }
                next += 50;
                std::thread::sleep(Duration::from_millis(20));
            }
            (acked, failed)
        })
    };
    let plain_load = load(PLAIN, 6);
    let table_load = load(TABLE, 4);
    let txn_load = {
        let (stop, boot) = (stop.clone(), boot.clone());
        std::thread::spawn(move || txn_load(boot, TXN, 4, stop))
    };
    let groups: Vec<(String, Arc<Mutex<GroupLog>>)> = (0..4)
        .map(|i| {
            (
                format!("nemesis-{i}"),
                Arc::new(Mutex::new(GroupLog::default())),
            )
        })
        .collect();
    let stop_consuming = Arc::new(AtomicBool::new(false));
    let consumers: Vec<_> = groups
        .iter()
        .map(|(g, log)| {
            let (boot, g, stop, log) =
                (boot.clone(), g.clone(), stop_consuming.clone(), log.clone());
            std::thread::spawn(move || consume_group(boot, PLAIN, g, stop, log))
        })
        .collect();

    let started = Instant::now();
    let mut step = 0;
    while started.elapsed() < Duration::from_secs(seconds) {
        let id = rng.random_range(1..=3u64);
        let hold = Duration::from_millis(rng.random_range(1_000..8_000));
        let at = started.elapsed().as_secs_f64();
        match rng.random_range(0..if black_holes { 8 } else { 7 }) {
            0 | 1 => {
                let skew = (rng.random_range(0..3) == 0).then(|| rng.random_range(2..10));
                println!("[{at:6.1} s] step {step}: kill -9 node {id}, restart after {hold:?} (clock ahead: {skew:?} s)");
                nodes.remove(&id).expect("running").kill9();
                std::thread::sleep(hold);
                let node = match skew {
                    Some(s) => {
                        let ahead = format!("+{s}s");
                        start(
                            id,
                            &[
                                ("LD_PRELOAD", faketime.as_str()),
                                ("FAKETIME", ahead.as_str()),
                                ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
                            ],
                        )
                    }
                    None => start(id, &[]),
                };
                nodes.insert(id, node);
            }
            2 => {
                println!("[{at:6.1} s] step {step}: SIGSTOP node {id} for {hold:?}");
                signal(&nodes[&id], libc::SIGSTOP);
                std::thread::sleep(hold);
                signal(&nodes[&id], libc::SIGCONT);
            }
            3 => {
                let down = Duration::from_millis(rng.random_range(1_000..3_000));
                println!("[{at:6.1} s] step {step}: PostgreSQL restarts (connections cut, refused for {down:?})");
                pg.set_refuse(true);
                pg.cut();
                std::thread::sleep(down);
                pg.set_refuse(false);
            }
            4 => {
                println!("[{at:6.1} s] step {step}: PostgreSQL connections cut");
                pg.cut();
            }
            7 => {
                let silent = Duration::from_millis(rng.random_range(2_000..10_000));
                println!("[{at:6.1} s] step {step}: PostgreSQL silent to node {id} for {silent:?} (a black hole)");
                paths[&id].0.black_hole(true);
                std::thread::sleep(silent);
                paths[&id].0.black_hole(false);
            }
            5 => {
                let ms = rng.random_range(50..300);
                println!("[{at:6.1} s] step {step}: S3 slowed by {ms} ms for {hold:?}");
                s3.set_delay(ms);
                std::thread::sleep(hold);
                s3.set_delay(0);
            }
            _ => {
                println!("[{at:6.1} s] step {step}: S3 connections cut");
                s3.cut();
            }
        }
        step += 1;
        std::thread::sleep(Duration::from_millis(rng.random_range(500..3_000)));
    }
    println!("nemesis over after {step} steps; checking (seed {seed})");
    // Every node live again, then the load stops.
    wait_topic_owned_by(&nodes[&1], PLAIN, 6, &[1, 2, 3], 120);
    stop.store(true, Ordering::Relaxed);
    let (plain, plain_failed) = plain_load.join().expect("plain load");
    let (table, table_failed) = table_load.join().expect("table load");
    let txns = txn_load.join().expect("transactional load");
    for (topic, failed) in [(PLAIN, &plain_failed), (TABLE, &table_failed)] {
        if !failed.is_empty() {
            println!(
                "LIVENESS (seed {seed}): {} sends to {topic} were not acknowledged within 120 s, first {:?}",
                failed.len(),
                &failed[..failed.len().min(3)]
            );
        }
    }
    // The groups consume and commit up to the end before they stop.
    let mut ends: BTreeMap<i32, i64> = BTreeMap::new();
    for (_, partition, offset) in &plain {
        let end = ends.entry(*partition).or_default();
        *end = (*end).max(offset + 1);
    }
    let caught_up = |groups: &[(String, Arc<Mutex<GroupLog>>)]| {
        groups.iter().all(|(_, l)| {
            let l = l.lock().unwrap();
            ends.iter().all(|(p, end)| l.committed.get(p) == Some(end))
        })
    };
    // Liveness, reported (not a safety property): how long the groups take to catch up.
    let deadline = Instant::now() + Duration::from_secs(120);
    while !caught_up(&groups) {
        if Instant::now() >= deadline {
            println!(
                "LIVENESS (seed {seed}): the groups did not commit up to the end {ends:?} within 120 s: {:?}",
                groups
                    .iter()
                    .map(|(g, l)| (g.clone(), l.lock().unwrap().committed.clone()))
                    .collect::<Vec<_>>()
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    stop_consuming.store(true, Ordering::Relaxed);
    let blocked = join_consumers(consumers, 60);
    if blocked > 0 {
        println!("LIVENESS (seed {seed}): {blocked} consumers still blocked 60 s after being told to stop (in a synchronous commit); left behind");
    }

    // Restarted nodes listen on new ports.
    let boot = bootstrap(&nodes);
    // The stream: every acknowledged record once, where it was acknowledged, unless retention
    // took it (the table topic's, once its table held it); nothing that was never sent.
    // (read_topic fails on a record found twice.)
    let c = consumer(&boot, "nemesis-checker");
    for (topic, partitions, acked, failed) in [
        (PLAIN, 6, &plain, &plain_failed),
        (TABLE, 4, &table, &table_failed),
    ] {
        let got = read_topic(&boot, topic, partitions);
        let starts: BTreeMap<i32, i64> = (0..partitions)
            .map(|p| {
                let (low, _) = c
                    .fetch_watermarks(topic, p, Duration::from_secs(10))
                    .expect("watermarks");
                (p, low)
            })
            .collect();
        for (k, partition, offset) in acked {
            if *offset >= starts[partition] {
                assert_eq!(
                    got.get(k),
                    Some(&(*partition, *offset)),
                    "{topic}: acknowledged k{k} (seed {seed})"
                );
            }
        }
        let sent = sent_keys(acked, failed);
        let stray: Vec<&u64> = got.keys().filter(|k| !sent.contains(k)).collect();
        assert!(
            stray.is_empty(),
            "{topic}: records never sent (seed {seed}): {stray:?}"
        );
    }
    // The table: every acknowledged record a row once, and no row of a record never sent.
    let reader = &nodes[&1];
    let values = poll_until(180, "every acknowledged record in the table", || {
        // The faults ended a moment ago: a query may still fail while the reader's pools
        // replace connections that went silent; only the rows count.
        let rows =
            match common::try_query_json(reader, &format!("SELECT value FROM default.{TABLE}")) {
                Ok(rows) => rows,
                Err(e) => {
                    println!("the table's query failed; asking again: {e}");
                    std::thread::sleep(Duration::from_millis(500));
                    return None;
                }
            };
        let values: Vec<String> = rows
            .as_array()
            .expect("rows")
            .iter()
            .filter_map(|r| r["value"].as_str().map(str::to_string))
            .collect();
        (values.len() >= table.len()).then_some(values)
    });
    let mut rows: BTreeMap<u64, usize> = BTreeMap::new();
    for v in &values {
        let k: u64 = v.trim_start_matches('k').parse().expect("a key");
        *rows.entry(k).or_default() += 1;
    }
    let twice: Vec<&u64> = rows
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(k, _)| k)
        .collect();
    assert!(
        twice.is_empty(),
        "rows of the table twice (seed {seed}): {twice:?}"
    );
    for (k, ..) in &table {
        assert!(
            rows.contains_key(k),
            "acknowledged k{k} is not a row (seed {seed})"
        );
    }
    let sent = sent_keys(&table, &table_failed);
    let stray: Vec<&u64> = rows.keys().filter(|k| !sent.contains(k)).collect();
    assert!(stray.is_empty(), "rows never sent (seed {seed}): {stray:?}");
    // Transactions: each committed one whole, no aborted record, nothing twice.
    check_transactions(&boot, TXN, 4, &txns, seed);
    // The groups: nothing delivered below a committed offset; commits never went back.
    for (group, log) in &groups {
        check_group(
            &boot,
            PLAIN,
            6,
            group,
            &log.lock().unwrap(),
            &format!(" (seed {seed})"),
        );
    }
    println!(
        "nemesis seed {seed}: {} + {} records acknowledged, all in place once",
        plain.len(),
        table.len()
    );
    for node in nodes.into_values() {
        node.stop();
    }
}

/// The node that coordinates the transactional id `id` (FindCoordinator, key type 1), as
/// `node` answers.
fn txn_coordinator(node: &Node, id: &str) -> u64 {
    use kafka_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};
    poll_until(
        30,
        &format!("a coordinator for transactional id {id}"),
        || {
            let found: FindCoordinatorResponse = Conn::open(node).call(
                ApiKey::FindCoordinator,
                3,
                RequestKind::FindCoordinator(
                    FindCoordinatorRequest::default()
                        .with_key(kafka_protocol::protocol::StrBytes::from_string(id.into()))
                        .with_key_type(1),
                ),
            );
            (found.error_code == 0).then_some(found.node_id.0 as u64)
        },
    )
}

/// Transactions through the kill -9 of the transaction coordinator's node mid-transaction,
/// and of a partition leader between AddPartitionsToTxn and EndTxn
/// (`tests/clients/cluster_transactions.py`, librdkafka's transactional producer): the
/// coordinator's state is in PostgreSQL, so the next node completes the open transaction, and
/// its markers go to the partitions' new leaders. read_committed then sees each committed
/// transaction whole, each record once, and no aborted record.
#[test]
fn transactions_survive_the_kill_of_their_coordinator_and_of_a_partition_leader() {
    let Some(python) = common::python::require_python("import confluent_kafka", "confluent-kafka")
    else {
        return;
    };
    let Some(cluster) = Cluster::new("") else {
        return;
    };
    const TXN_TOPIC: &str = "payments";
    let mut nodes: BTreeMap<u64, Node> = (1..=3).map(|id| (id, cluster.start(id))).collect();
    create_topics(
        &nodes[&1],
        &[NewTopic::new(TXN_TOPIC, 6, TopicReplication::Fixed(1))],
    );
    poll_until(60, "the topic's partitions on every node", || {
        let owners = wait_topic_owned_by(&nodes[&1], TXN_TOPIC, 6, &[1, 2, 3], 30);
        (owners.iter().collect::<BTreeSet<_>>().len() == 3).then_some(())
    });
    let mut client = std::process::Command::new(&python)
        .arg(common::python::script("cluster_transactions.py"))
        .args([bootstrap(&nodes).as_str(), TXN_TOPIC, "6"])
        .env("PYTHONUNBUFFERED", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python runs");
    let mut to_client = client.stdin.take().expect("stdin");
    let lines = std::io::BufRead::lines(std::io::BufReader::new(
        client.stdout.take().expect("stdout"),
    ));
    let writer = format!("{TXN_TOPIC}-writer");
    let mut pauses = 0;
    let mut ok = false;
    for line in lines {
        let line = line.expect("a line");
        eprintln!("[cluster_transactions.py] {line}");
        if line.starts_with("open ") {
            let any = nodes.keys().next().copied().expect("a live node");
            let coordinator = txn_coordinator(&nodes[&any], &writer);
            let victim = if pauses == 0 {
                coordinator
            } else {
                // A node that leads some of the transaction's partitions but does not
                // coordinate it.
                *nodes
                    .keys()
                    .find(|&&id| {
                        id != coordinator && !owned_by(&nodes[&any], TXN_TOPIC, id).is_empty()
                    })
                    .expect("a partition leader other than the coordinator")
            };
            eprintln!(
                "killing node {victim} (the transaction's coordinator is node {coordinator})"
            );
            nodes.remove(&victim).expect("live").kill9();
            let rest: Vec<u64> = nodes.keys().copied().collect();
            wait_topic_owned_by(&nodes[&rest[0]], TXN_TOPIC, 6, &rest, 60);
            if pauses == 0 {
                // Back for the second round: three nodes again.
                nodes.insert(victim, cluster.start(victim));
            }
            pauses += 1;
            std::io::Write::write_all(&mut to_client, b"go\n").expect("go");
        }
        if line == "OK" {
            ok = true;
        }
    }
    assert!(
        client.wait().expect("exits").success() && ok,
        "the transactional client failed"
    );
    assert_eq!(pauses, 2, "both kills happened");
    for node in nodes.into_values() {
        node.stop();
    }
}

/// A compacted topic in a cluster (`tests/clients/compacted_topic.py`): its partition's owner
/// dies in the middle of its first compaction (a fail point aborts it once the rewritten
/// object is uploaded, before the swap is committed), and the node that takes the partition
/// over compacts it: a consumer from offset 0 then reads exactly the latest record of every
/// key, at the offset it was written at, and never a key's older value meanwhile.
#[test]
fn a_compacted_topic_is_compacted_by_the_new_owner_after_its_owner_dies_mid_pass() {
    let Some(python) = common::python::require_python("import confluent_kafka", "confluent-kafka")
    else {
        return;
    };
    let Some(cluster) = Cluster::new(
        "[storage]\nupload_interval_ms = 300\n[kafka]\n\"log.cleaner.backoff.ms\" = \"500\"\n",
    ) else {
        return;
    };
    let mut nodes: BTreeMap<u64, Node> = (1..=3)
        .map(|id| {
            (
                id,
                cluster.start_with_env(id, &[("INLET_FAILPOINT", "log-compaction-written:1")]),
            )
        })
        .collect();
    // Compaction starts 10 s after the records were appended: after `fill` has finished.
    let run_script = |nodes: &BTreeMap<u64, Node>, phase: &str| {
        let (status, output) = common::python::run(
            &python,
            &[
                common::python::script("compacted_topic.py").into(),
                bootstrap(nodes).into(),
                phase.into(),
                "10000".into(),
            ],
            Duration::from_secs(240),
        );
        assert!(
            status.is_some_and(|s| s.success()) && output.contains("\nOK\n"),
            "the {phase} phase ({status:?}):\n{output}"
        );
        output
    };
    run_script(&nodes, "fill");
    let owner = wait_topic_owned_by(&nodes[&1], "customers", 1, &[1, 2, 3], 30)[0];
    let (status, _) = nodes.remove(&owner).expect("the owner").wait_for_exit(60);
    assert!(
        !status.success(),
        "the owner was aborted mid-compaction: {status:?}"
    );
    // The others carry the same fail point: they come back without it (kill -9, or already
    // aborted if one took the partition and began compacting it first).
    let rest: Vec<u64> = nodes.keys().copied().collect();
    for id in &rest {
        let mut node = nodes.remove(id).expect("live");
        if !node.exited() {
            node.kill9();
        }
        nodes.insert(*id, cluster.start(*id));
    }
    let new_owner = wait_topic_owned_by(&nodes[&rest[0]], "customers", 1, &rest, 60)[0];
    eprintln!("node {owner} died mid-compaction; node {new_owner} owns the partition now");
    let output = run_script(&nodes, "check");
    assert!(output.contains("ok: compacted: "), "{output}");
    for node in nodes.into_values() {
        node.stop();
    }
}

/// The transactions of the nemesis's transactional load, by outcome: each a list of the keys
/// it wrote.
#[derive(Debug, Default)]
struct TxnLog {
    /// `commit_transaction` succeeded: every key must be read once.
    committed: Vec<Vec<u64>>,
    /// Aborted (by the client, or never committed: a send failed, or the producer was
    /// replaced): no key may be read.
    aborted: Vec<Vec<u64>>,
    /// The commit's outcome is unknown (a fatal error during it): all keys or none.
    uncertain: Vec<Vec<u64>>,
}

/// A transactional producer under the nemesis (librdkafka): transactions of 8 records over
/// the topic's partitions, every fourth aborted, until `stop`. A producer that hits a fatal
/// error is replaced by a new one with the same transactional id, which fences it. At the end
/// a last instance is initialized, which aborts whatever the last one left open.
fn txn_load(
    boot: String,
    topic: &'static str,
    partitions: i32,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> TxnLog {
    use rdkafka::producer::Producer as _;
    use std::sync::atomic::Ordering;
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let make = || -> Option<FutureProducer> {
        let p: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", &boot)
            .set("transactional.id", format!("{topic}-writer"))
            .set("transaction.timeout.ms", "60000")
            .set("message.timeout.ms", "60000")
            .set("topic.metadata.refresh.interval.ms", "1000")
            .create()
            .expect("a transactional producer");
        match p.init_transactions(Duration::from_secs(60)) {
            Ok(()) => Some(p),
            Err(e) => {
                println!("[txn load] init_transactions failed: {e}");
                None
            }
        }
    };
    let mut log = TxnLog::default();
    let mut producer = None;
    let mut next = 0u64;
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let Some(p) = producer.take().or_else(make) else {
            std::thread::sleep(Duration::from_millis(500));
            continue;
        };
        if let Err(e) = p.begin_transaction() {
            println!("[txn load] begin_transaction failed: {e}; a new producer");
            continue;
        }
        let keys: Vec<u64> = (next..next + 8).collect();
        next += 8;
        n += 1;
        let sends = rt.block_on(futures::future::join_all(keys.iter().map(|k| {
            let p = p.clone();
            async move {
                let key = format!("t{k}");
                let partition = (*k % partitions as u64) as i32;
                let record = FutureRecord::to(topic)
                    .key(&key)
                    .payload(&key)
                    .partition(partition);
                p.send(record, Duration::from_secs(60)).await.map(|_| ())
            }
        })));
        let sent = sends.iter().all(Result::is_ok);
        if !sent || n.is_multiple_of(4) {
            // Never committed: aborted now, or by the next instance's fencing, or by the
            // transaction timeout.
            if let Err(e) = p.abort_transaction(Duration::from_secs(60)) {
                println!("[txn load] abort_transaction failed: {e}; a new producer");
                log.aborted.push(keys);
                continue;
            }
            log.aborted.push(keys);
            producer = Some(p);
            continue;
        }
        let mut outcome = None;
        for _ in 0..5 {
            match p.commit_transaction(Duration::from_secs(60)) {
                Ok(()) => {
                    outcome = Some(true);
                    break;
                }
                Err(rdkafka::error::KafkaError::Transaction(e)) if e.txn_requires_abort() => {
                    let _ = p.abort_transaction(Duration::from_secs(60));
                    outcome = Some(false);
                    break;
                }
                Err(rdkafka::error::KafkaError::Transaction(e)) if e.is_retriable() => {
                    println!("[txn load] commit_transaction: {e}; retrying");
                }
                Err(e) => {
                    println!("[txn load] commit_transaction failed: {e}; outcome unknown");
                    break;
                }
            }
        }
        match outcome {
            Some(true) => {
                log.committed.push(keys);
                producer = Some(p);
            }
            Some(false) => {
                log.aborted.push(keys);
                producer = Some(p);
            }
            None => log.uncertain.push(keys),
        }
    }
    drop(producer);
    // A last instance fences the last producer and aborts what it left open.
    let _last = poll_until(120, "a last transactional producer", make);
    log
}

/// The nemesis's checker of transactions: read_committed from the start to the end (once no
/// transaction is open), each committed transaction whole, each record once, no record of an
/// aborted one, an uncertain one all or nothing, and nothing never sent.
fn check_transactions(boot: &str, topic: &str, partitions: i32, log: &TxnLog, seed: u64) {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", boot)
        .set("group.id", "nemesis-txn-checker")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    let mut ends = BTreeMap::new();
    for p in 0..partitions {
        let (low, high) = poll_until(60, "the partition's watermarks", || {
            c.fetch_watermarks(topic, p, Duration::from_secs(5)).ok()
        });
        ends.insert(p, high);
        tpl.add_partition_offset(topic, p, Offset::Offset(low))
            .expect("add");
    }
    c.assign(&tpl).expect("assign");
    let mut read: BTreeMap<u64, usize> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(m) = c.poll(Duration::from_millis(500)) {
            let m = m.expect("a record");
            let key: u64 = std::str::from_utf8(m.key().expect("a key"))
                .expect("utf8")
                .trim_start_matches('t')
                .parse()
                .expect("a key");
            *read.entry(key).or_default() += 1;
            continue;
        }
        let positions = c.position().expect("positions");
        let done = (0..partitions).all(|p| {
            positions
                .find_partition(topic, p)
                .and_then(|e| e.offset().to_raw())
                .is_some_and(|o| o >= ends[&p])
        });
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "read_committed stalled before the ends {ends:?} (seed {seed}): an open transaction?"
        );
    }
    let twice: Vec<_> = read.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "{topic}: records read twice (seed {seed}): {twice:?}"
    );
    for keys in &log.committed {
        let missing: Vec<_> = keys.iter().filter(|k| !read.contains_key(k)).collect();
        assert!(
            missing.is_empty(),
            "{topic}: a committed transaction is missing {missing:?} of {keys:?} (seed {seed})"
        );
    }
    for keys in &log.aborted {
        let found: Vec<_> = keys.iter().filter(|k| read.contains_key(k)).collect();
        assert!(
            found.is_empty(),
            "{topic}: records of an aborted transaction are visible: {found:?} (seed {seed})"
        );
    }
    for keys in &log.uncertain {
        let found = keys.iter().filter(|k| read.contains_key(k)).count();
        assert!(
            found == 0 || found == keys.len(),
            "{topic}: a transaction is visible in part: {found} of {keys:?} (seed {seed})"
        );
    }
    let sent: BTreeSet<u64> = log
        .committed
        .iter()
        .chain(&log.aborted)
        .chain(&log.uncertain)
        .flatten()
        .copied()
        .collect();
    let stray: Vec<_> = read.keys().filter(|k| !sent.contains(k)).collect();
    assert!(
        stray.is_empty(),
        "{topic}: records never sent (seed {seed}): {stray:?}"
    );
    println!(
        "transactions (seed {seed}): {} committed, {} aborted, {} uncertain; read_committed holds {} records",
        log.committed.len(),
        log.aborted.len(),
        log.uncertain.len(),
        read.len()
    );
}

/// KIP-890's check where one node coordinates the transactional id and another leads the
/// partition: the leader reads the id's state row, so a batch before AddPartitionsToTxn and a
/// late batch of an aborted transaction are refused there too (`INVALID_TXN_STATE`), a fenced
/// epoch is (`INVALID_PRODUCER_EPOCH`), and the partition's last stable offset never hangs
/// (`common::txn_checks`).
#[test]
fn transactional_batches_are_checked_where_another_node_coordinates() {
    let Some(cluster) = Cluster::new("") else {
        return;
    };
    const CHECKED: &str = "verified";
    let nodes: BTreeMap<u64, Node> = (1..=2).map(|id| (id, cluster.start(id))).collect();
    // Both nodes live, as each sees it (each coordinates some ids), before the topic exists:
    // its partition is placed once, not moved by a node joining.
    poll_until(60, "both nodes live on both", || {
        nodes
            .values()
            .all(|n| {
                let coordinators: BTreeSet<u64> = (0..100)
                    .map(|i| txn_coordinator(n, &format!("verifier-{i}")))
                    .collect();
                coordinators.len() == 2
            })
            .then_some(())
    });
    common::txn_checks::create_topic(&mut Conn::open(&nodes[&1]), CHECKED);
    // The node that creates a topic owns it first; the cluster may then hand the partition
    // to the node it places it on. The owner, once the same over three looks a second apart.
    let mut seen: Vec<Option<u64>> = Vec::new();
    let leader = poll_until(60, "the partition's owner to settle", || {
        std::thread::sleep(Duration::from_millis(1_000));
        seen.push(owners_of(&nodes[&1], CHECKED).first().copied().flatten());
        match seen.as_slice() {
            [.., a, b, c] if a.is_some() && a == b && b == c => *c,
            _ => None,
        }
    });
    wait_node_leads(&nodes[&leader], CHECKED, leader);
    poll_until(60, "the leader to serve the partition", || {
        (fetch_code(&nodes[&leader], CHECKED, 0, -1) == 0).then_some(())
    });
    let (id, coordinator) = (0..100)
        .map(|i| format!("verifier-{i}"))
        .map(|id| {
            let c = txn_coordinator(&nodes[&1], &id);
            (id, c)
        })
        .find(|(_, c)| *c != leader)
        .expect("a transactional id the other node coordinates");
    // The coordinator learns of the new topic at its next look at the topics (until then
    // AddPartitionsToTxn answers UNKNOWN_TOPIC_OR_PARTITION, which clients retry).
    poll_until(60, "the coordinator to know the topic", || {
        use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
        use kafka_protocol::messages::{MetadataRequest, MetadataResponse, TopicName};
        let r: MetadataResponse = Conn::open(&nodes[&coordinator]).call(
            ApiKey::Metadata,
            12,
            RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(TopicName(
                    kafka_protocol::protocol::StrBytes::from_static_str(CHECKED),
                ))),
            ]))),
        );
        (r.topics.first().map(|t| t.error_code) == Some(0)).then_some(())
    });
    common::txn_checks::batches_need_an_open_transaction(
        &mut Conn::open(&nodes[&coordinator]),
        &mut Conn::open(&nodes[&leader]),
        &id,
        CHECKED,
    );
}

/// ACLs are the cluster's: one created through node 1 is enforced by node 2 within about a
/// second (each node polls the ACLs' version with its topics, every 250 ms). A DENY of
/// DESCRIBE on a topic for `User:ANONYMOUS` makes node 2's Metadata answer
/// TOPIC_AUTHORIZATION_FAILED for it; deleting it through node 2 opens it on node 1. Client
/// quotas travel the same way: a request quota set through node 1 throttles the same client
/// on node 2 within about a second.
#[test]
fn an_acl_changed_through_one_node_holds_on_the_others_within_a_second() {
    use kafka_protocol::messages::create_acls_request::AclCreation;
    use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::{
        CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
        MetadataRequest, MetadataResponse,
    };
    use kafka_protocol::protocol::StrBytes;
    let Some(cluster) = Cluster::new(
        "[kafka]\n\"authorizer.class.name\" = \"org.apache.kafka.metadata.authorizer.StandardAuthorizer\"\n\"allow.everyone.if.no.acl.found\" = \"true\"\n",
    ) else {
        return;
    };
    let nodes: BTreeMap<u64, Node> = (1..=2).map(|id| (id, cluster.start(id))).collect();
    create_topics(
        &nodes[&1],
        &[NewTopic::new("guarded", 1, TopicReplication::Fixed(1))],
    );
    let code_on = |n: u64| -> i16 {
        let r: MetadataResponse = Conn::open(&nodes[&n]).call(
            ApiKey::Metadata,
            12,
            RequestKind::Metadata(
                MetadataRequest::default()
                    .with_topics(Some(vec![MetadataRequestTopic::default()
                        .with_name(Some(common::requests::topic_name("guarded")))]))
                    .with_allow_auto_topic_creation(false),
            ),
        );
        r.topics.first().map_or(-1, |t| t.error_code)
    };
    poll_until(30, "node 2 to know the topic", || {
        (code_on(2) == 0).then_some(())
    });
    let s = |v: &str| StrBytes::from_string(v.to_string());
    let created: CreateAclsResponse = Conn::open(&nodes[&1]).call(
        ApiKey::CreateAcls,
        3,
        RequestKind::CreateAcls(CreateAclsRequest::default().with_creations(vec![
            AclCreation::default()
                .with_resource_type(2)
                .with_resource_name(s("guarded"))
                .with_resource_pattern_type(3)
                .with_principal(s("User:ANONYMOUS"))
                .with_host(s("*"))
                .with_operation(8)
                .with_permission_type(2),
        ])),
    );
    assert_eq!(created.results[0].error_code, 0, "{created:?}");
    let at = Instant::now();
    poll_until(30, "node 2 to enforce node 1's ACL", || {
        (code_on(2) == 29).then_some(())
    });
    let took = at.elapsed();
    eprintln!("node 2 enforced the ACL {took:?} after node 1 stored it");
    assert!(
        took < Duration::from_secs(3),
        "the ACL took {took:?} to reach node 2"
    );

    let deleted: DeleteAclsResponse = Conn::open(&nodes[&2]).call(
        ApiKey::DeleteAcls,
        3,
        RequestKind::DeleteAcls(DeleteAclsRequest::default().with_filters(vec![
            DeleteAclsFilter::default()
                .with_resource_type_filter(2)
                .with_resource_name_filter(Some(s("guarded")))
                .with_pattern_type_filter(3)
                .with_principal_filter(None)
                .with_host_filter(None)
                .with_operation(1)
                .with_permission_type(1),
        ])),
    );
    assert_eq!(
        deleted.filter_results[0].matching_acls.len(),
        1,
        "{deleted:?}"
    );
    let at = Instant::now();
    poll_until(30, "node 1 to drop the deleted ACL", || {
        (code_on(1) == 0).then_some(())
    });
    let took = at.elapsed();
    eprintln!("node 1 dropped the ACL {took:?} after node 2 deleted it");
    assert!(
        took < Duration::from_secs(3),
        "the delete took {took:?} to reach node 1"
    );

    // A request quota no request fits in, for the test connection's client id, through node 1.
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
    use kafka_protocol::messages::{AlterClientQuotasRequest, AlterClientQuotasResponse};
    let throttle_on = |n: u64| -> i32 {
        let r: MetadataResponse = Conn::open(&nodes[&n]).call(
            ApiKey::Metadata,
            12,
            RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![]))),
        );
        r.throttle_time_ms
    };
    assert_eq!(throttle_on(2), 0, "no quota yet");
    let altered: AlterClientQuotasResponse = Conn::open(&nodes[&1]).call(
        ApiKey::AlterClientQuotas,
        1,
        RequestKind::AlterClientQuotas(AlterClientQuotasRequest::default().with_entries(vec![
            EntryData::default()
                .with_entity(vec![EntityData::default()
                    .with_entity_type(s("client-id"))
                    .with_entity_name(Some(s("idempotence-test")))])
                .with_ops(vec![OpData::default()
                    .with_key(s("request_percentage"))
                    .with_value(1e-9)]),
        ])),
    );
    assert_eq!(altered.entries[0].error_code, 0, "{altered:?}");
    let at = Instant::now();
    poll_until(30, "node 2 to throttle under node 1's quota", || {
        (throttle_on(2) > 0).then_some(())
    });
    let took = at.elapsed();
    eprintln!("node 2 enforced the quota {took:?} after node 1 stored it");
    assert!(
        took < Duration::from_secs(3),
        "the quota took {took:?} to reach node 2"
    );
}

/// Nodes call each other as Kafka brokers do (`ingest/src/inter_broker.rs`): on the
/// inter-broker listener (`inter.broker.listener.name=INTERNAL`, SASL_SSL: each node checks
/// the other's certificate against the CA and authenticates with SCRAM-SHA-512 as
/// `User:broker`, a super user), not on the first listener, where clients authenticate as
/// `admin` and an unauthenticated call would be closed. With the authorizer on and nothing
/// allowed to `User:ANONYMOUS`, librdkafka's transactions over partitions on both nodes commit
/// and abort whole: read_committed sees every committed record once and no aborted one, which
/// needs the coordinator's markers on the other node's partitions. A node whose inter-broker
/// listener has no credentials refuses to start, with the reason.
#[test]
fn nodes_call_each_other_on_the_inter_broker_listener_with_tls_and_scram() {
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
    use rdkafka::util::Timeout;
    let Some(python) = common::python::require_python("import cryptography", "cryptography") else {
        return;
    };
    let certs = tempfile::tempdir().unwrap();
    let (status, output) = common::python::run(
        &python,
        &[
            common::python::script("tls_certs.py").into(),
            certs.path().as_os_str().to_owned(),
        ],
        Duration::from_secs(120),
    );
    assert!(
        status.is_some_and(|s| s.success()),
        "tls_certs.py: {output}"
    );
    let pem = |f: &str| certs.path().join(f).display().to_string();
    let jaas = r#"org.apache.kafka.common.security.scram.ScramLoginModule required username=\"broker\" password=\"broker-secret\";"#;
    let kafka = format!(
        "[kafka]\n\
         \"authorizer.class.name\" = \"org.apache.kafka.metadata.authorizer.StandardAuthorizer\"\n\
         \"super.users\" = \"User:admin;User:broker\"\n\
         \"listener.security.protocol.map\" = \"EXTERNAL:SASL_PLAINTEXT,INTERNAL:SASL_SSL\"\n\
         \"inter.broker.listener.name\" = \"INTERNAL\"\n\
         \"sasl.enabled.mechanisms\" = \"SCRAM-SHA-512\"\n\
         \"listener.name.internal.scram-sha-512.sasl.jaas.config\" = \"{jaas}\"\n\
         \"ssl.keystore.type\" = \"PEM\"\n\
         \"ssl.keystore.location\" = \"{}\"\n\
         \"ssl.truststore.location\" = \"{}\"\n",
        pem("server.pem"),
        pem("ca.pem"),
    );
    let Some(cluster) = Cluster::new(&kafka) else {
        return;
    };
    for (user, password) in [("admin", "admin-secret"), ("broker", "broker-secret")] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_inlet"))
            .args(["users", "add", user, "--password", password])
            .args(["--mechanism", "SCRAM-SHA-512", "--meta", &cluster.db])
            .args(["--config", &cluster.config])
            .output()
            .expect("inlet users add");
        assert!(out.status.success(), "{out:?}");
    }
    let ports: BTreeMap<u64, (u16, u16)> = (1..=2)
        .map(|id| {
            use inlet_test_support::node::free_port;
            (id, (free_port(), free_port()))
        })
        .collect();
    let start = |id: u64, extra: &[&str]| {
        let (external, internal) = ports[&id];
        let listeners =
            format!("listeners=EXTERNAL://127.0.0.1:{external},INTERNAL://127.0.0.1:{internal}");
        let dir = cluster.dir.path().join(format!("node-{id}"));
        let id_text = id.to_string();
        let mut args = cluster.args(&id_text);
        let listen = cluster.listen(id);
        args.extend(listen.iter().skip(2).map(String::as_str));
        args.extend(["--kafka-config", &listeners]);
        args.extend(extra);
        Node::start_with_env(&dir, &args, &cluster.env())
    };

    // Without its own credentials, a cluster node cannot call the others: it does not start.
    {
        let (external, _) = ports[&1];
        let listeners = format!("listeners=EXTERNAL://127.0.0.1:{external}");
        use inlet_test_support::node::free_port;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_inlet"))
            .arg("serve")
            .args(cluster.args("1"))
            .args([
                "--data-dir",
                &cluster.dir.path().join("refused").display().to_string(),
            ])
            .args(["--http-listen", &format!("127.0.0.1:{}", free_port())])
            .args(["--registry-listen", &format!("127.0.0.1:{}", free_port())])
            .args(["--kafka-config", &listeners])
            .args(["--kafka-config", "inter.broker.listener.name=EXTERNAL"])
            .envs(cluster.env())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("inlet serve");
        let exited = poll_until(60, "the misconfigured node to exit", || {
            child
                .try_wait()
                .expect("wait")
                .map(|status| status.success())
        });
        let out = child.wait_with_output().expect("output");
        let text = String::from_utf8_lossy(&out.stderr).to_string()
            + &String::from_utf8_lossy(&out.stdout);
        assert!(
            !exited,
            "a node without inter-broker credentials started: {text}"
        );
        assert!(
            text.contains("listener.name.external.scram-sha-512.sasl.jaas.config"),
            "{text}"
        );
    }

    let nodes: BTreeMap<u64, Node> = (1..=2).map(|id| (id, start(id, &[]))).collect();
    let boot = nodes
        .values()
        .map(|n| n.kafka.clone())
        .collect::<Vec<_>>()
        .join(",");
    let sasl = |c: &mut ClientConfig| {
        c.set("bootstrap.servers", &boot)
            .set("security.protocol", "SASL_PLAINTEXT")
            .set("sasl.mechanism", "SCRAM-SHA-512")
            .set("sasl.username", "admin")
            .set("sasl.password", "admin-secret");
    };
    let mut admin_config = ClientConfig::new();
    sasl(&mut admin_config);
    let admin: AdminClient<DefaultClientContext> = admin_config.create().expect("admin");
    let rt = tokio::runtime::Runtime::new().unwrap();
    for r in rt
        .block_on(admin.create_topics(
            &[NewTopic::new("ledger", 4, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        ))
        .expect("create")
    {
        r.expect("created");
    }
    poll_until(60, "ledger's partitions on both nodes", || {
        let owners = wait_topic_owned_by(&nodes[&1], "ledger", 4, &[1, 2], 30);
        (owners.iter().collect::<BTreeSet<_>>().len() == 2).then_some(())
    });

    let mut pc = ClientConfig::new();
    sasl(&mut pc);
    pc.set("transactional.id", "ledger-writer");
    let producer: ThreadedProducer<DefaultProducerContext> = pc.create().expect("producer");
    let t = Timeout::After(Duration::from_secs(60));
    producer.init_transactions(t).expect("init_transactions");
    let mut committed = BTreeSet::new();
    for (round, commit) in [(0, true), (1, false), (2, true)] {
        producer.begin_transaction().expect("begin");
        for p in 0..4 {
            let value = format!("r{round}-p{p}");
            producer
                .send(
                    BaseRecord::<(), str>::to("ledger")
                        .partition(p)
                        .payload(&value),
                )
                .expect("send");
            if commit {
                committed.insert(value);
            }
        }
        if commit {
            producer.commit_transaction(t).expect("commit");
        } else {
            producer.abort_transaction(t).expect("abort");
        }
    }

    let mut cc = ClientConfig::new();
    sasl(&mut cc);
    cc.set("group.id", "ledger-reader")
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false");
    let consumer: BaseConsumer = cc.create().expect("consumer");
    consumer.subscribe(&["ledger"]).expect("subscribe");
    let mut seen: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    while seen.len() < committed.len() && Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(500)) {
            let m = m.expect("a record");
            seen.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
        }
    }
    // A little longer: an aborted record would come now.
    let settle = Instant::now() + Duration::from_secs(2);
    while Instant::now() < settle {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            seen.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
        }
    }
    let got: BTreeSet<String> = seen.iter().cloned().collect();
    assert_eq!(got.len(), seen.len(), "a record twice: {seen:?}");
    assert_eq!(got, committed, "read_committed saw {seen:?}");
    drop(consumer);
    drop(producer);
    for node in nodes.into_values() {
        node.stop();
    }
}
