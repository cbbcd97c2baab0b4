//! Cluster benchmark: `inlet serve` release nodes on one PostgreSQL and one S3-compatible store
//! (start them with `source scripts/test-env.sh`, which sets `INLET_TEST_POSTGRES_URL`,
//! `INLET_TEST_S3_ENDPOINT` and `INLET_TEST_S3_BUCKET`), driven by librdkafka in this process.
//!
//! ```text
//! source scripts/test-env.sh && cargo bench --bench cluster
//! ```
//!
//! Environment: `INLET_BENCH_PHASES` (comma list of `failover`, `scale`, `tables`; default all),
//! `INLET_BENCH_KILLS` (rounds of each fault in the failover phase, default 20),
//! `INLET_BENCH_FAULTS` (the failover phase's faults, default `kill,pause`),
//! `INLET_BENCH_RDKAFKA_DEBUG` (librdkafka's `debug` contexts for the producers, logged),
//! `INLET_BENCH_SECONDS` (each scale run, default 15), `INLET_BENCH_RUNS` (scale runs per node
//! count, default 3; medians),
//! `INLET_BENCH_NODE_ARGS` (extra `inlet serve` arguments, e.g. `--config FILE`),
//! `INLET_BENCH_NODE_COUNTS` (the scale and tables phases' node counts, default `1,3`),
//! `INLET_BENCH_S3_QUERY` (appended to the object store URL, e.g. `?unsigned_payload=true`),
//! `INLET_BENCH_MIB_PER_NODE` (the scale phase offers this many MiB/s per node, so every node
//! count runs each node at the same load; default 0: flat out), `INLET_BENCH_TABLE_KEYS` (the
//! tables phase's tables are upsert tables keyed by the record key, `_key`, over this many
//! keys, each record updating one; default 0: append-only tables).
//!
//! Phases, each on a fresh database and S3 prefix, with the nodes' default settings (a 6 s
//! lease, a 1 s rebalance):
//! 1. failover: three nodes, a 12-partition topic, an idempotent acks=all producer sending
//!    small records to every partition all along. `INLET_BENCH_KILLS` rounds of kill -9 (then a
//!    restart at the node's addresses), then as many of SIGSTOP (until its partitions are
//!    acknowledged elsewhere, then SIGCONT), each on one node in turn; measured: the time
//!    from the signal to the first acknowledgement on each partition the victim owned (and
//!    on any other held up for more than a second). A third of the rounds strike a settled
//!    cluster; a third a new load, 3–26 s after a new topic is created and a new producer
//!    starts on it (measured on that topic); a third a rebalance, while a node that was
//!    killed comes back and takes its share (the victim is that node or another). p50 / p99 /
//!    max per fault, over all rounds and per kind.
//! 2. scale: 1 node, then 3 nodes (on this one machine, so they share its cores): aggregate
//!    produce throughput (acks=all, 1 KiB records, 24 partitions, 4 producers flat out) and the
//!    nodes' CPU time per MiB acknowledged, also net of the nodes' idle CPU (measured for 5 s
//!    before), the part spent in the kernel, and the minor page faults per MiB. Measured once
//!    every node's log cache is full ([`warm_up`]); the node counts take turns run by run. The
//!    cost per MiB is what should stay flat; the throughput cannot triple on a machine whose
//!    cores the nodes share. Flat out, three nodes each run at a fraction of the load one
//!    node runs at, and a node's fixed costs per wake-up weigh more per MiB at a lower load;
//!    with `INLET_BENCH_MIB_PER_NODE` every node runs at the same load whatever the count, so
//!    the comparison is what the cluster itself adds per MiB.
//! 3. tables: the same node counts, taking turns run by run, with three table topics (4
//!    partitions each, string values, 1 s commits; each partition converted on its owner, one
//!    coordinator per table), produced flat out or at `INLET_BENCH_MIB_PER_NODE` per node.
//!    Measured once every node's log cache is full ([`warm_up`]) and the partitions no longer
//!    move ([`settle`]: the assignment balances the bytes in once the weights settle), for
//!    `INLET_BENCH_SECONDS`, then until every acknowledged record is committed: MiB/s of the
//!    records converted in the window (acknowledged in it, and the lag at its start) from its
//!    start to the last commit (and acknowledged while producing, and the seconds left to
//!    commit after), node CPU ms per MiB net of idle (the kernel's part and the page faults),
//!    the CPU the rest of the machine (PostgreSQL, moto) spent per MiB net of its idle, the
//!    reads that missed the log cache and the objects uploaded per MiB, the tables'
//!    snapshots, and the partition moves (in the window and in the warm-up).
//! 4. coordinator (not in the default phases): three nodes, one upsert table of 4 partitions
//!    keyed by `_key` over `INLET_BENCH_TABLE_KEYS` keys (default 100,000), produced at 4 MiB/s
//!    all along. Every `INLET_BENCH_SECONDS` × 4 (the table grows meanwhile) the node running
//!    the table's coordinator is killed (kill -9); measured: the seconds from the kill to the
//!    table's next snapshot, and the new coordinator's index rebuild (its log line), against
//!    the table's size. The node then restarts; its coordinator comes back to it (the
//!    rendezvous of the table's id), and the seconds from its start to the next snapshot after
//!    that move are measured too. `INLET_BENCH_KILLS` rounds (default 20; 5 is plenty).
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a benchmark: a failed step fails it, and its clocks are real time

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use inlet_test_support::node::{poll_until, Node};
use inlet_test_support::service_env;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;

const MIB: f64 = 1024.0 * 1024.0;
const INLET: &str = env!("CARGO_BIN_EXE_inlet");

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// One database and S3 prefix the nodes share.
struct Cluster {
    dir: tempfile::TempDir,
    db: String,
    objects: String,
    endpoint: String,
    /// Each node's listeners, kept across its restarts (a restarted node comes back at its
    /// address, as a real one does).
    ports: Mutex<BTreeMap<u64, [u16; 3]>>,
}

impl Cluster {
    fn new() -> Cluster {
        let (Some(pg), Some(endpoint), Some(bucket)) = (
            service_env("INLET_TEST_POSTGRES_URL"),
            service_env("INLET_TEST_S3_ENDPOINT"),
            service_env("INLET_TEST_S3_BUCKET"),
        ) else {
            panic!("the cluster benchmark needs PostgreSQL and S3: source scripts/test-env.sh");
        };
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir
            .path()
            .file_name()
            .map(|n| n.to_string_lossy().to_ascii_lowercase())
            .unwrap();
        Cluster {
            db: tokio::runtime::Runtime::new()
                .unwrap()
                .block_on(inlet_test_support::fresh_postgres_database(&pg)),
            objects: format!(
                "s3://{bucket}/{prefix}{}",
                std::env::var("INLET_BENCH_S3_QUERY").unwrap_or_default()
            ),
            endpoint,
            dir,
            ports: Mutex::new(BTreeMap::new()),
        }
    }

    fn start(&self, id: u64) -> Node {
        let data = self.dir.path().join(format!("node-{id}"));
        let id = id.to_string();
        let extra_args = std::env::var("INLET_BENCH_NODE_ARGS").unwrap_or_default();
        let ports = *self
            .ports
            .lock()
            .unwrap()
            .entry(id.parse().unwrap())
            .or_insert_with(|| {
                [
                    inlet_test_support::node::free_port(),
                    inlet_test_support::node::free_port(),
                    inlet_test_support::node::free_port(),
                ]
            });
        let listen: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let mut args = vec![
            "--meta",
            &self.db,
            "--object-store",
            &self.objects,
            "--node-id",
            &id,
            "--kafka-listen",
            &listen[0],
            "--http-listen",
            &listen[1],
            "--registry-listen",
            &listen[2],
        ];
        args.extend(extra_args.split_whitespace());
        Node::launch(
            INLET.as_ref(),
            &data,
            &args,
            &[("AWS_ENDPOINT", &self.endpoint), ("AWS_ALLOW_HTTP", "true")],
        )
    }
}

/// Each partition's owner of `topic`, as `node` sees it.
fn owners(node: &Node, topic: &str) -> Vec<Option<u64>> {
    let (_, body) = node.http_get("/v1/cluster");
    let view: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    view["partitions"][topic]
        .as_array()
        .map(|p| p.iter().map(|p| p["owner"].as_u64()).collect())
        .unwrap_or_default()
}

/// Waits until every partition is owned by one of `live` and each of `live` owns one.
fn settled(node: &Node, topic: &str, partitions: usize, live: &[u64]) -> Vec<u64> {
    poll_until(120, "the partitions to settle", || {
        let o = owners(node, topic);
        let all: Option<Vec<u64>> = o.into_iter().collect();
        let all = all.filter(|a| a.len() == partitions)?;
        (all.iter().all(|n| live.contains(n)) && live.iter().all(|n| all.contains(n)))
            .then_some(all)
    })
}

fn create_topic(node: &Node, topic: &str, partitions: i32) {
    create_topics(
        node,
        &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
    );
}

fn create_topics(node: &Node, topics: &[NewTopic]) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &node.kafka)
        .create()
        .unwrap();
    let created = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(admin.create_topics(
            topics,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        ))
        .unwrap();
    assert!(created.iter().all(|c| c.is_ok()), "{created:?}");
}

/// Acknowledgements counted in the delivery callback: bytes, and per partition the last ack.
#[derive(Default)]
struct Acks {
    bytes: AtomicU64,
    last: Mutex<BTreeMap<i32, Instant>>,
    failed: AtomicU64,
    first: Mutex<Option<Mark>>,
}

/// Since [`Acks::mark`]: its instant and wall-clock milliseconds, and each partition's first
/// acknowledgement of a record created after it.
type Mark = (Instant, i64, BTreeMap<i32, Instant>);

impl Acks {
    /// From now on, each partition's first acknowledgement of a record created from now on is
    /// kept (an acknowledgement already on its way when a node is signalled does not count);
    /// returns now.
    fn mark(&self) -> Instant {
        let now = Instant::now();
        let wall_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        *self.first.lock().unwrap() = Some((now, wall_ms, BTreeMap::new()));
        now
    }

    /// The first acknowledgement on `partition` since the mark at `since`.
    fn first_after(&self, partition: i32, since: Instant) -> Option<Instant> {
        let first = self.first.lock().unwrap();
        let (at, _, firsts) = first.as_ref()?;
        (*at == since)
            .then(|| firsts.get(&partition).copied())
            .flatten()
    }
}

struct Ctx(Arc<Acks>);

/// librdkafka's warnings and errors go to stderr (a fatal idempotence error says why here).
impl ClientContext for Ctx {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        if std::env::var_os("INLET_BENCH_RDKAFKA_DEBUG").is_some()
            || (level as i32) <= rdkafka::config::RDKafkaLogLevel::Warning as i32
        {
            eprintln!("librdkafka {level:?} {fac}: {message}");
        }
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        eprintln!("librdkafka error {error}: {reason}");
    }
}

impl ProducerContext for Ctx {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(m) => {
                use rdkafka::message::Message;
                self.0
                    .bytes
                    .fetch_add(m.payload().map_or(0, |p| p.len()) as u64, Ordering::Relaxed);
                let now = Instant::now();
                self.0.last.lock().unwrap().insert(m.partition(), now);
                if let Some((_, wall_ms, firsts)) = self.0.first.lock().unwrap().as_mut() {
                    if m.timestamp().to_millis().is_some_and(|t| t >= *wall_ms) {
                        firsts.entry(m.partition()).or_insert(now);
                    }
                }
            }
            Err(_) => {
                self.0.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

fn producer(bootstrap: &str, acks: Arc<Acks>, linger_ms: &str) -> ThreadedProducer<Ctx> {
    let mut config = ClientConfig::new();
    if let Ok(debug) = std::env::var("INLET_BENCH_RDKAFKA_DEBUG") {
        config.set("debug", debug);
    }
    config
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", linger_ms)
        .set("batch.size", "1048576")
        .set("message.timeout.ms", "120000")
        .set("topic.metadata.refresh.interval.ms", "500")
        .create_with_context(Ctx(acks))
        .unwrap()
}

/// Sends `size`-byte records round robin over `partitions` until `stop`, at most `per_sec`
/// a second (0: as fast as the queue takes them).
fn send_until(
    p: &ThreadedProducer<Ctx>,
    topic: &str,
    partitions: i32,
    size: usize,
    per_sec: u64,
    stop: &AtomicBool,
) {
    send_keyed_until(p, topic, partitions, size, per_sec, 0, stop)
}

/// [`send_until`], with record keys `0..keys` in turn when `keys` is not 0 (each partition
/// gets its own keys: the key's number modulo `partitions` is its partition, as a keyed
/// producer's partitioner keeps a key on one partition).
fn send_keyed_until(
    p: &ThreadedProducer<Ctx>,
    topic: &str,
    partitions: i32,
    size: usize,
    per_sec: u64,
    keys: u64,
    stop: &AtomicBool,
) {
    let payload = vec![0x5au8; size];
    let mut start = Instant::now();
    let mut i: u64 = 0;
    let mut key = String::from("k");
    while !stop.load(Ordering::Relaxed) {
        if per_sec > 0 {
            let due = start + Duration::from_secs_f64(i as f64 / per_sec as f64);
            let now = Instant::now();
            match due.checked_duration_since(now) {
                Some(wait) => std::thread::sleep(wait),
                // Fallen behind (a full queue): go on at the rate from here, no burst to catch
                // up, so a paced run offers its rate and no more.
                None if now - due > Duration::from_millis(100) => start += now - due,
                None => {}
            }
        }
        let partition = (i % partitions as u64) as i32;
        if keys > 0 {
            use std::fmt::Write as _;
            key.clear();
            let _ = write!(key, "{}", i % keys);
        }
        let record = BaseRecord::to(topic)
            .payload(&payload[..])
            .key(key.as_str())
            .partition(partition);
        if let Err((e, _)) = p.send(record) {
            // A full queue: wait for room.
            assert!(
                e.to_string().contains("Queue full"),
                "send failed: {e} (fatal error: {:?})",
                p.client().fatal_error()
            );
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        i += 1;
    }
}

/// A table topic of 4 partitions (string values, 1 s commits); `keyed`: an upsert table keyed
/// by the record key (`_key`).
fn table_topic(name: &str, keyed: bool) -> NewTopic<'_> {
    let topic = NewTopic::new(name, 4, TopicReplication::Fixed(1))
        .set("table.topic.enable", "true")
        .set("table.topic.commit.interval.ms", "1000")
        .set("table.topic.convert.value.type", "string");
    if !keyed {
        return topic;
    }
    topic
        .set("table.topic.convert.key.type", "string")
        .set("table.topic.id.columns", "[_key]")
        .set("table.topic.upsert.enable", "true")
}

/// A producer (acks=all, idempotent) to every node of `nodes`, and a thread sending through
/// it with `send` until the returned flag is set.
fn background_sender<'a>(
    nodes: impl IntoIterator<Item = &'a Node>,
    send: impl FnOnce(&ThreadedProducer<Ctx>, &AtomicBool) + Send + 'static,
) -> (
    Arc<Acks>,
    ThreadedProducer<Ctx>,
    Arc<AtomicBool>,
    std::thread::JoinHandle<()>,
) {
    let bootstrap: String = nodes
        .into_iter()
        .map(|n| n.kafka.clone())
        .collect::<Vec<_>>()
        .join(",");
    let acks = Arc::new(Acks::default());
    let p = producer(&bootstrap, acks.clone(), "5");
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let (stop, p) = (stop.clone(), p.clone());
        std::thread::spawn(move || send(&p, &stop))
    };
    (acks, p, stop, sender)
}

/// What a failover round does to its victim.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    /// kill -9, then a restart at the node's addresses.
    Kill,
    /// SIGSTOP until its partitions are acknowledged elsewhere, then SIGCONT.
    Pause,
}

/// When in a load a failover round strikes.
#[derive(Clone, Copy, Debug)]
enum When {
    /// Every partition settled, the load running for minutes.
    Settled,
    /// `seconds` into a new load: a topic just created, a new producer just started.
    EarlyLoad { seconds: u64 },
    /// While a node that was killed comes back and takes its share: the victim is that node
    /// (`returning`) or one handing partitions to it.
    Rebalance { returning: bool },
}

/// The partitions of `topic` that `node` owns by its own view, and nothing on error (a node
/// mid-start answers nothing: it owns nothing).
fn owned_by(node: &Node, id: u64, topic: &str) -> Vec<i32> {
    owners(node, topic)
        .iter()
        .enumerate()
        .filter(|(_, o)| **o == Some(id))
        .map(|(p, _)| p as i32)
        .collect()
}

fn signal(node: &Node, sig: i32) {
    // SAFETY: signalling a child process of this benchmark.
    assert_eq!(unsafe { libc::kill(node.pid(), sig) }, 0);
}

/// Seconds from `since` to the first acknowledgement after it on each partition of
/// `partitions` that the fault held up: every partition the victim owned (`owned`) and every
/// other whose first acknowledgement came more than a second later (one that was moving).
fn failover_times(acks: &Acks, since: Instant, partitions: i32, owned: &[i32]) -> Vec<(i32, f64)> {
    (0..partitions)
        .filter_map(|part| {
            let at = poll_until(90, "an ack on every partition after the fault", || {
                acks.first_after(part, since)
            });
            let s = at.duration_since(since).as_secs_f64();
            (owned.contains(&part) || s > 1.0).then_some((part, s))
        })
        .collect()
}

fn delete_topic(node: &Node, topic: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &node.kafka)
        .create()
        .unwrap();
    let deleted = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(admin.delete_topics(&[topic], &AdminOptions::new()))
        .unwrap();
    assert!(deleted.iter().all(|c| c.is_ok()), "{deleted:?}");
}

/// The failover phase: `rounds` kill -9s, then `rounds` SIGSTOPs, each a third settled, a
/// third early in a new load and a third during a rebalance.
fn failover(rounds: u64) {
    const TOPIC: &str = "failover";
    const PARTITIONS: i32 = 12;
    const EARLY_SECONDS: [u64; 6] = [3, 8, 8, 14, 20, 26];
    let cluster = Cluster::new();
    let mut nodes: BTreeMap<u64, Node> = (1..=3).map(|id| (id, cluster.start(id))).collect();
    create_topic(&nodes[&1], TOPIC, PARTITIONS);
    settled(&nodes[&1], TOPIC, PARTITIONS as usize, &[1, 2, 3]);
    let (acks, p, stop, sender) = background_sender(nodes.values(), |p, stop| {
        send_until(p, TOPIC, PARTITIONS, 100, 2_000, stop)
    });
    let mut results: Vec<(Fault, &str, Vec<f64>)> = Vec::new();
    let faults: Vec<Fault> = std::env::var("INLET_BENCH_FAULTS")
        .unwrap_or_else(|_| "kill,pause".into())
        .split(',')
        .map(|f| match f {
            "kill" => Fault::Kill,
            "pause" => Fault::Pause,
            other => panic!("INLET_BENCH_FAULTS: {other}? (kill, pause)"),
        })
        .collect();
    for &fault in &faults {
        for r in 0..rounds {
            let when = match r % 3 {
                0 => When::Settled,
                1 => When::EarlyLoad {
                    seconds: EARLY_SECONDS[(r as usize / 3) % EARLY_SECONDS.len()],
                },
                _ => When::Rebalance {
                    returning: (r / 3) % 2 == 0,
                },
            };
            let victim = 1 + r % 3;
            let round = format!("{fault:?} {r} ({when:?}, node {victim})");
            let times = failover_round(&cluster, &mut nodes, &acks, fault, when, victim, &round);
            let kind = match when {
                When::Settled => "settled",
                When::EarlyLoad { .. } => "early in a load",
                When::Rebalance { .. } => "during a rebalance",
            };
            results.push((fault, kind, times));
        }
    }
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
    p.flush(Duration::from_secs(60)).unwrap();
    let failed = acks.failed.load(Ordering::Relaxed);
    for &fault in &faults {
        let of = |kind: Option<&str>| -> Vec<f64> {
            let mut t: Vec<f64> = results
                .iter()
                .filter(|(f, k, _)| *f == fault && kind.is_none_or(|kind| kind == *k))
                .flat_map(|(_, _, t)| t.iter().copied())
                .collect();
            t.sort_by(|a, b| a.partial_cmp(b).unwrap());
            t
        };
        let line = |t: &[f64]| {
            format!(
                "{} partitions, p50 {:.2} s, p99 {:.2} s, max {:.2} s",
                t.len(),
                quantile(t, 0.5),
                quantile(t, 0.99),
                t.last().copied().unwrap_or(0.0)
            )
        };
        println!(
            "failover ({fault:?}, signal to the first ack on each moved partition) over {rounds} rounds: {}",
            line(&of(None))
        );
        for kind in ["settled", "early in a load", "during a rebalance"] {
            println!("  {kind}: {}", line(&of(Some(kind))));
        }
    }
    println!("failed deliveries of the long-running producer: {failed}");
    for node in nodes.into_values() {
        node.stop_within(30);
    }
}

/// One failover round (see [`failover`]); the seconds to the first acknowledgement on each
/// partition the fault held up. The cluster is whole again when it returns.
fn failover_round(
    cluster: &Cluster,
    nodes: &mut BTreeMap<u64, Node>,
    acks: &Arc<Acks>,
    fault: Fault,
    when: When,
    victim: u64,
    round: &str,
) -> Vec<f64> {
    const TOPIC: &str = "failover";
    const PARTITIONS: i32 = 12;
    let all = [1, 2, 3];
    let observer = if victim == 1 { 2 } else { 1 };
    settled(&nodes[&observer], TOPIC, PARTITIONS as usize, &all);
    // The topic measured, and the acknowledgements of its producer.
    let mut early = None;
    match when {
        When::Settled => std::thread::sleep(Duration::from_millis(500)),
        When::EarlyLoad { seconds } => {
            let topic = format!(
                "early-{}",
                round.split(' ').take(2).collect::<Vec<_>>().join("-")
            )
            .to_ascii_lowercase();
            create_topic(&nodes[&observer], &topic, PARTITIONS);
            settled(&nodes[&observer], &topic, PARTITIONS as usize, &all);
            let sending = topic.clone();
            let (acks, p, stop, sender) = background_sender(nodes.values(), move |p, stop| {
                send_until(p, &sending, PARTITIONS, 100, 2_000, stop)
            });
            std::thread::sleep(Duration::from_secs(seconds));
            early = Some((topic, acks, p, stop, sender));
        }
        When::Rebalance { returning } => {
            // Another node than the victim leaves and comes back, unless the victim is the
            // one coming back.
            let back = if returning { victim } else { 1 + victim % 3 };
            let live: Vec<u64> = all.iter().copied().filter(|n| *n != back).collect();
            nodes.remove(&back).unwrap().kill9();
            settled(&nodes[&live[0]], TOPIC, PARTITIONS as usize, &live);
            nodes.insert(back, cluster.start(back));
            poll_until(60, "the returning node's first partition", || {
                (!owned_by(&nodes[&live[0]], back, TOPIC).is_empty()).then_some(())
            });
        }
    }
    let (topic, measured) = match &early {
        Some((topic, acks, ..)) => (topic.clone(), acks.clone()),
        None => (TOPIC.to_string(), acks.clone()),
    };
    let owned = owned_by(&nodes[&victim], victim, &topic);
    let since = measured.mark();
    let day_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        % 86_400_000;
    eprintln!(
        "{round}: signal at {:02}:{:02}:{:02}.{:03} UTC",
        day_ms / 3_600_000,
        day_ms / 60_000 % 60,
        day_ms / 1000 % 60,
        day_ms % 1000
    );
    let dead = match fault {
        Fault::Kill => {
            nodes.remove(&victim).unwrap().kill9();
            true
        }
        Fault::Pause => {
            signal(&nodes[&victim], libc::SIGSTOP);
            false
        }
    };
    let times = failover_times(&measured, since, PARTITIONS, &owned);
    eprintln!(
        "{round}: owned {owned:?}; {:?}",
        times
            .iter()
            .map(|(p, s)| format!("{p}: {s:.2} s"))
            .collect::<Vec<_>>()
    );
    if dead {
        nodes.insert(victim, cluster.start(victim));
    } else {
        signal(&nodes[&victim], libc::SIGCONT);
    }
    if let Some((topic, acks, p, stop, sender)) = early {
        stop.store(true, Ordering::Relaxed);
        sender.join().unwrap();
        p.flush(Duration::from_secs(60)).unwrap();
        assert_eq!(
            acks.failed.load(Ordering::Relaxed),
            0,
            "{round}: failed deliveries"
        );
        delete_topic(&nodes[&observer], &topic);
    }
    times.into_iter().map(|(_, s)| s).collect()
}

/// The metadata of table `default.<table>` (null while it does not exist), from `node`'s
/// catalog.
fn table_metadata(node: &Node, table: &str) -> serde_json::Value {
    let (_, body) = node.http_get(&format!("/iceberg/v1/namespaces/default/tables/{table}"));
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    v["metadata"].clone()
}

/// The current snapshot's summary of table `default.<table>`, from `node`'s catalog.
fn table_summary(node: &Node, table: &str) -> serde_json::Value {
    let meta = table_metadata(node, table);
    let current = &meta["current-snapshot-id"];
    meta["snapshots"]
        .as_array()
        .and_then(|s| s.iter().find(|s| &s["snapshot-id"] == current))
        .map(|s| s["summary"].clone())
        .unwrap_or_default()
}

/// The id of the current snapshot of `default.<table>`, from `node`'s catalog.
fn current_snapshot(node: &Node, table: &str) -> Option<i64> {
    table_metadata(node, table)["current-snapshot-id"].as_i64()
}

/// The node (of `nodes`) running the coordinator of `default.<table>`. After 120 s without
/// one, the nodes' logs about tables and the cluster go to `INLET_BENCH_DIAG` (if set), and the
/// bench fails.
fn coordinator_of(nodes: &BTreeMap<u64, Node>, table: &str) -> u64 {
    let ident = format!("default.{table}");
    let started = Instant::now();
    loop {
        let found = nodes.iter().find_map(|(id, n)| {
            let (_, body) = n.http_get("/v1/cluster");
            let view: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            view["owned_by_this_node"]["tables"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t == ident.as_str()))
                .then_some(*id)
        });
        if let Some(id) = found {
            return id;
        }
        if started.elapsed() > Duration::from_secs(120) {
            if let Ok(path) = std::env::var("INLET_BENCH_DIAG") {
                let mut out = String::new();
                for (id, n) in nodes {
                    let (_, view) = n.http_get("/v1/cluster");
                    out.push_str(&format!("== node {id}: {view}\n"));
                    for line in n.logs_so_far() {
                        out.push_str(&format!("node {id}: {line}\n"));
                    }
                }
                std::fs::write(path, out).unwrap();
            }
            panic!("no node runs the coordinator of {ident} after 120 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The seconds from `since` to a snapshot of `table` other than `before`, as `node` sees it,
/// and the seconds the coordinator that made it logged for its index (0 if none of `nodes`
/// logged one since their logs were last read), and whether every index logged came from a
/// checkpoint.
fn next_commit(
    node: &Node,
    nodes: &BTreeMap<u64, Node>,
    table: &str,
    before: Option<i64>,
    since: Instant,
) -> (f64, (f64, bool)) {
    let secs = poll_until(600, "the table's next snapshot", || {
        let now = current_snapshot(node, table);
        let fresh = now.is_some() && now != before;
        fresh.then(|| since.elapsed().as_secs_f64())
    });
    let logs: Vec<String> = nodes
        .iter()
        .flat_map(|(id, n)| {
            n.logs_so_far()
                .into_iter()
                .map(move |l| format!("node {id}: {l}"))
        })
        .collect();
    if let Ok(path) = std::env::var("INLET_BENCH_DIAG") {
        // Where the pause went: the coordinators' and the membership's lines, appended.
        use std::io::Write as _;
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        writeln!(out, "== {secs:.1} s to the next snapshot of {table}").unwrap();
        for l in logs
            .iter()
            .filter(|l| l.contains("coordinator") || l.contains("members"))
        {
            writeln!(out, "{l}").unwrap();
        }
    }
    // The new coordinator's index: caught up from a checkpoint, or built from the table.
    let rebuild = logs
        .iter()
        .filter(|l| {
            l.contains("built the primary-key index from the table")
                || l.contains("caught the primary-key index up from its checkpoint")
        })
        .filter_map(|l| {
            let at = l.find("seconds=")? + "seconds=".len();
            let secs = l[at..].split_whitespace().next()?.parse::<f64>().ok()?;
            Some((secs, l.contains("from its checkpoint")))
        })
        .fold((0.0, true), |(s, c), (t, d)| (f64::max(s, t), c && d));
    (secs, rebuild)
}

/// Phase 4 (module docs): a keyed table's coordinator killed, and moved back, while it grows.
fn coordinator_failover(kills: u64, seconds: u64, keys: u64) {
    const TABLE: &str = "kt";
    let cluster = Cluster::new();
    let mut nodes: BTreeMap<u64, Node> = (1..=3).map(|id| (id, cluster.start(id))).collect();
    create_topics(&nodes[&1], &[table_topic(TABLE, true)]);
    let (acks, p, stop, sender) = background_sender(nodes.values(), move |p, stop| {
        send_keyed_until(p, TABLE, 4, 1024, 4 * 1024, keys, stop)
    });
    let (mut after_kill, mut after_return) = (Vec::new(), Vec::new());
    for k in 0..kills {
        std::thread::sleep(Duration::from_secs(seconds * 4));
        let victim = coordinator_of(&nodes, TABLE);
        let observer = *nodes.keys().find(|&&id| id != victim).unwrap();
        let summary = table_summary(&nodes[&observer], TABLE);
        let field = |k: &str| {
            summary[k]
                .as_str()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let (mib, files, deletes) = (
            field("total-files-size") / MIB,
            field("total-data-files"),
            field("total-position-deletes"),
        );
        for n in nodes.values() {
            let _ = n.logs_so_far(); // read from here on
        }
        nodes.remove(&victim).unwrap().kill9();
        let killed = Instant::now();
        // Read once the old coordinator is gone: nothing of it lands after.
        let before = current_snapshot(&nodes[&observer], TABLE);
        let (kill_s, kill_rebuild) = next_commit(&nodes[&observer], &nodes, TABLE, before, killed);
        // Back: the coordinator returns to its rendezvous node once it is live again (the
        // snapshot read once it has moved: the new coordinator rebuilds its index first, so
        // it has not committed yet).
        let restarted = Instant::now();
        nodes.insert(victim, cluster.start(victim));
        poll_until(120, "the coordinator back on its node", || {
            (coordinator_of(&nodes, TABLE) == victim).then_some(())
        });
        let before = current_snapshot(&nodes[&observer], TABLE);
        let (back_s, back_rebuild) =
            next_commit(&nodes[&observer], &nodes, TABLE, before, restarted);
        let how = |(s, checkpoint): (f64, bool)| {
            let from = if checkpoint {
                "its checkpoint"
            } else {
                "the table"
            };
            format!("index from {from} in {s:.1} s")
        };
        eprintln!(
            "  round {k}: table {mib:.1} MiB in {files} data files ({deletes} position deletes); kill -9 of node {victim} to the next snapshot {kill_s:.1} s ({}); its restart to the next snapshot {back_s:.1} s ({})",
            how(kill_rebuild),
            how(back_rebuild)
        );
        after_kill.push(kill_s);
        after_return.push(back_s);
    }
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
    p.flush(Duration::from_secs(60)).unwrap();
    println!(
        "keyed coordinator over {kills} rounds: kill -9 to the next snapshot median {:.1} s, max {:.1} s; restart to the next snapshot median {:.1} s, max {:.1} s; failed deliveries {}",
        median(after_kill.clone()),
        after_kill.iter().copied().fold(0.0, f64::max),
        median(after_return.clone()),
        after_return.iter().copied().fold(0.0, f64::max),
        acks.failed.load(Ordering::Relaxed)
    );
    for node in nodes.into_values() {
        node.stop_within(30);
    }
}

/// The nodes' CPU time so far, ms.
fn cpu(nodes: &[Node]) -> f64 {
    nodes.iter().map(Node::cpu_ms).sum::<f64>()
}

/// The nodes' CPU ms per second while idle (their passes, leases and snapshots), over 5 s.
fn idle_cpu(nodes: &[Node]) -> f64 {
    let c0 = cpu(nodes);
    std::thread::sleep(Duration::from_secs(5));
    (cpu(nodes) - c0) / 5.0
}

/// WAL objects the nodes have written (`inlet_wal_syncs_total`: one per object-store WAL group).
fn wal_objects(nodes: &[Node]) -> f64 {
    nodes
        .iter()
        .map(|n| n.metric("inlet_wal_syncs_total"))
        .sum()
}

/// Waits, under load, until every node's log cache is nine tenths full (at most 120 s): until
/// then each MiB appended is also a MiB of memory the node touches for the first time (page
/// faults that zero it), a cost a node pays once, not per MiB. Three nodes at a third of the
/// rate each take three times as long to fill theirs, so a fixed warm-up measured that cost
/// for them and not for one node (`docs/benchmarks.md`, 1 vs 3 nodes).
fn warm_up(nodes: &[Node]) {
    let started = Instant::now();
    let full = || {
        nodes.iter().all(|n| {
            n.metric("inlet_log_cache_used_bytes") >= 0.9 * n.metric("inlet_log_cache_budget_bytes")
        })
    };
    while !full() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the log caches did not fill in 120 s"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    println!(
        "  warm-up: the log caches filled in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// What one scale run measured, over the nodes together.
struct ScaleRun {
    mib_per_s: f64,
    cpu_ms_per_mib: f64,
    /// The same, net of the nodes' idle CPU.
    net_ms_per_mib: f64,
    cpu_percent_per_node: f64,
    wal_objects_per_mib: f64,
    /// CPU in the kernel (syscalls, page faults), ms per MiB.
    system_ms_per_mib: f64,
    /// Minor page faults per MiB (256 is a MiB of memory touched for the first time).
    faults_per_mib: f64,
}

/// The nodes' minor page faults and kernel CPU ms so far.
fn faults_and_system(nodes: &[Node]) -> (f64, f64) {
    nodes.iter().fold((0.0, 0.0), |(f, s), n| {
        let (nf, ns) = n.faults_and_system_ms();
        (f + nf as f64, s + ns)
    })
}

/// One scale run: `count` nodes, produce for `seconds`, flat out (`mib_per_node` 0) or at
/// `mib_per_node` × `count` MiB/s.
fn scale_run(count: u64, seconds: u64, mib_per_node: u64) -> ScaleRun {
    const TOPIC: &str = "scale";
    const PARTITIONS: i32 = 24;
    let cluster = Cluster::new();
    let nodes: Vec<Node> = (1..=count).map(|id| cluster.start(id)).collect();
    create_topic(&nodes[0], TOPIC, PARTITIONS);
    let ids: Vec<u64> = (1..=count).collect();
    settled(&nodes[0], TOPIC, PARTITIONS as usize, &ids);
    let idle = idle_cpu(&nodes);
    let bootstrap: String = nodes
        .iter()
        .map(|n| n.kafka.clone())
        .collect::<Vec<_>>()
        .join(",");
    let acks = Arc::new(Acks::default());
    let stop = Arc::new(AtomicBool::new(false));
    const PRODUCERS: u64 = 4;
    // 1 KiB records: 1,024 a second are a MiB.
    let per_producer = mib_per_node * count * 1024 / PRODUCERS;
    let senders: Vec<_> = (0..PRODUCERS)
        .map(|_| {
            let p = producer(&bootstrap, acks.clone(), "5");
            let stop = stop.clone();
            std::thread::spawn(move || {
                send_until(&p, TOPIC, PARTITIONS, 1024, per_producer, &stop);
                p.flush(Duration::from_secs(60)).unwrap();
            })
        })
        .collect();
    warm_up(&nodes);
    let (c0, b0, w0, (f0, s0), t0) = (
        cpu(&nodes),
        acks.bytes.load(Ordering::Relaxed),
        wal_objects(&nodes),
        faults_and_system(&nodes),
        Instant::now(),
    );
    std::thread::sleep(Duration::from_secs(seconds));
    let (c1, b1, w1, (f1, s1), elapsed) = (
        cpu(&nodes),
        acks.bytes.load(Ordering::Relaxed),
        wal_objects(&nodes),
        faults_and_system(&nodes),
        t0.elapsed().as_secs_f64(),
    );
    stop.store(true, Ordering::Relaxed);
    for s in senders {
        s.join().unwrap();
    }
    for node in nodes {
        node.stop_within(30);
    }
    let mib = (b1 - b0) as f64 / MIB;
    ScaleRun {
        mib_per_s: mib / elapsed,
        cpu_ms_per_mib: (c1 - c0) / mib,
        net_ms_per_mib: (c1 - c0 - idle * elapsed) / mib,
        cpu_percent_per_node: (c1 - c0) / 10.0 / elapsed / count as f64,
        wal_objects_per_mib: (w1 - w0) / mib,
        system_ms_per_mib: (s1 - s0) / mib,
        faults_per_mib: (f1 - f0) / mib,
    }
}

/// Records committed to the tables of every node, from their `/v1/tables`.
fn committed_records(nodes: &[Node]) -> u64 {
    nodes
        .iter()
        .map(|n| {
            let (_, body) = n.http_get("/v1/tables");
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            v.as_object()
                .map(|tables| {
                    tables
                        .values()
                        .flat_map(|t| t["committed_offsets"].as_object().cloned())
                        .flat_map(|o| o.into_iter().map(|(_, v)| v.as_u64().unwrap_or(0)))
                        .sum::<u64>()
                })
                .unwrap_or(0)
        })
        .sum()
}

/// The machine's busy CPU time so far (every process, from `/proc/stat`), ms.
fn machine_busy_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let line = stat.lines().next().unwrap();
    // user nice system idle iowait irq softirq steal: busy is all but idle and iowait.
    let f: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap())
        .collect();
    let busy = f[0] + f[1] + f[2] + f[5] + f[6] + f.get(7).copied().unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    busy * 1000.0 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) as f64 }
}

/// CPU ms so far outside the nodes and this process: the stores (PostgreSQL, moto) and the
/// rest of the machine.
fn others_ms(nodes: &[Node]) -> f64 {
    machine_busy_ms() - cpu(nodes) - inlet_test_support::node::process_cpu_ms("self")
}

/// Sums a metric over the nodes and its labels (0 where a node has none).
fn metric_sum(nodes: &[Node], name: &str) -> f64 {
    nodes
        .iter()
        .flat_map(|n| n.metric_values())
        .filter(|(k, _)| k.split('{').next() == Some(name))
        .map(|(_, v)| v)
        .sum()
}

/// What one table-ingest run measured, over the nodes together.
struct TableRun {
    /// MiB/s from the first send to the last commit.
    mib_per_s: f64,
    /// MiB/s acknowledged while producing.
    acked_mib_per_s: f64,
    /// Seconds from the last acknowledgement to the commit of every record.
    tail_s: f64,
    net_ms_per_mib: f64,
    system_ms_per_mib: f64,
    faults_per_mib: f64,
    /// CPU ms per MiB outside the nodes and the bench (the stores), net of their idle.
    others_ms_per_mib: f64,
    /// Reads that missed the log cache and went to the object store, per MiB.
    object_reads_per_mib: f64,
    /// Objects uploaded (WAL objects, stream objects, table files), per MiB.
    uploads_per_mib: f64,
    /// The tables' snapshots made in the window (rounds and compactions; a node's commit
    /// counter starts over when a coordinator moves, the tables' snapshots do not).
    commits: u64,
    /// Partition moves in the window (the rise of the tables' partition epochs).
    moves: u64,
    /// Partition moves in the warm-up: the assignment balancing the bytes in, once the
    /// partitions' weights are published and settle.
    warm_up_moves: u64,
}

/// Waits, under load, until the tables' partitions have published weights (every one heavier
/// than an idle partition, when `heavy`: a partition's load must reach about 1.4 partitions'
/// worth to weigh 2) and then have not moved for 15 s: the assignment takes weights in once
/// they settle (10 s without a change, `cluster/src/placement.rs`), and the partitions it moves then
/// start their conversion over. One node waits the same, though nothing moves there.
fn settle(node: &Node, tables: &[&str], heavy: bool) {
    let started = Instant::now();
    poll_until(120, "every table partition's weight published", || {
        if !heavy {
            return Some(());
        }
        partitions(node, tables)
            .iter()
            .all(|p| p["weight"].as_u64().is_some_and(|w| w > 1))
            .then_some(())
    });
    let (mut last, mut since) = (epochs(node, tables), Instant::now());
    while since.elapsed() < Duration::from_secs(15) {
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "the partitions did not stop moving in 180 s"
        );
        std::thread::sleep(Duration::from_millis(500));
        let now = epochs(node, tables);
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    println!(
        "  warm-up: the partitions settled in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// The snapshots of `tables`, from the catalog of `node`.
fn snapshots(node: &Node, tables: &[&str]) -> u64 {
    tables
        .iter()
        .map(|t| {
            table_metadata(node, t)["snapshots"]
                .as_array()
                .map_or(0, |s| s.len() as u64)
        })
        .sum()
}

/// The partitions of `topics` in `node`'s view of the cluster (`GET /v1/cluster`).
fn partitions(node: &Node, topics: &[&str]) -> Vec<serde_json::Value> {
    let (_, body) = node.http_get("/v1/cluster");
    let view: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    topics
        .iter()
        .flat_map(|t| {
            view["partitions"][t]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .collect()
}

/// The sum of `topics`' partition epochs, as `node` sees them (each move raises one by one).
fn epochs(node: &Node, topics: &[&str]) -> u64 {
    partitions(node, topics)
        .iter()
        .map(|p| p["epoch"].as_u64().unwrap_or(0))
        .sum()
}

/// One table-ingest run: `count` nodes, three table topics of 4 partitions (string values,
/// 1 s commits; each partition is converted on its owner, so with three nodes every node
/// converts part of every table), produced for `seconds`, flat out (`mib_per_node` 0) or at
/// `mib_per_node` × `count` MiB/s; then until every acknowledged record is committed. With
/// `keys` (not 0) the tables are upsert tables keyed by `_key`, the records' keys `0..keys`
/// in turn: every record updates its key's row (each coordinator applies its table's keys).
fn table_run(count: u64, seconds: u64, mib_per_node: u64, keys: u64) -> TableRun {
    const TABLES: [&str; 3] = ["t0", "t1", "t2"];
    let cluster = Cluster::new();
    let nodes: Vec<Node> = (1..=count).map(|id| cluster.start(id)).collect();
    let topics: Vec<NewTopic> = TABLES.iter().map(|t| table_topic(t, keys > 0)).collect();
    create_topics(&nodes[0], &topics);
    // Every table's partitions spread over the nodes.
    poll_until(120, "the tables' partitions spread", || {
        let mut homes = std::collections::BTreeSet::new();
        for t in TABLES {
            let o = owners(&nodes[0], t);
            if o.len() != 4 || o.iter().any(|p| p.is_none()) {
                return None;
            }
            homes.extend(o.into_iter().flatten());
        }
        (homes.len() == count as usize).then_some(())
    });
    let bootstrap: String = nodes
        .iter()
        .map(|n| n.kafka.clone())
        .collect::<Vec<_>>()
        .join(",");
    let (o0, i0) = (others_ms(&nodes), Instant::now());
    let idle = idle_cpu(&nodes);
    let others_idle = (others_ms(&nodes) - o0) / i0.elapsed().as_secs_f64();
    let acks = Arc::new(Acks::default());
    let stop = Arc::new(AtomicBool::new(false));
    let counters = |nodes: &[Node]| {
        (
            faults_and_system(nodes),
            others_ms(nodes),
            metric_sum(nodes, "inlet_object_reads_total"),
            metric_sum(nodes, "inlet_store_uploads_total"),
        )
    };
    let first_epochs = epochs(&nodes[0], &TABLES);
    let per_topic = mib_per_node * count * 1024 / TABLES.len() as u64;
    let senders: Vec<_> = TABLES
        .iter()
        .map(|t| {
            let p = producer(&bootstrap, acks.clone(), "5");
            let stop = stop.clone();
            std::thread::spawn(move || {
                send_keyed_until(&p, t, 4, 1024, per_topic, keys, &stop);
                p.flush(Duration::from_secs(60)).unwrap();
            })
        })
        .collect();
    warm_up(&nodes);
    // Flat out, or at least 128 KiB/s a partition (half the default load unit): heavy.
    let heavy = mib_per_node == 0 || per_topic * 1024 / 4 >= 128 * 1024;
    settle(&nodes[0], &TABLES, heavy);
    let (c0, k0, e0, r0, s0, t0) = (
        cpu(&nodes),
        counters(&nodes),
        epochs(&nodes[0], &TABLES),
        committed_records(&nodes),
        snapshots(&nodes[0], &TABLES),
        Instant::now(),
    );
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    for s in senders {
        s.join().unwrap();
    }
    let acked_at = t0.elapsed().as_secs_f64();
    let records = acks.bytes.load(Ordering::Relaxed) / 1024;
    poll_until(600, "every acknowledged record in the tables", || {
        (committed_records(&nodes) >= records).then_some(())
    });
    // What the window converted: the records acknowledged in it and the lag at its start.
    let records = records - r0;
    let (c1, k1, e1, elapsed) = (
        cpu(&nodes),
        counters(&nodes),
        epochs(&nodes[0], &TABLES),
        t0.elapsed().as_secs_f64(),
    );
    let commits = snapshots(&nodes[0], &TABLES) - s0;
    for node in nodes {
        node.stop_within(30);
    }
    let mib = (records * 1024) as f64 / MIB;
    TableRun {
        mib_per_s: mib / elapsed,
        acked_mib_per_s: mib / acked_at,
        tail_s: elapsed - acked_at,
        net_ms_per_mib: (c1 - c0 - idle * elapsed) / mib,
        system_ms_per_mib: (k1.0 .1 - k0.0 .1) / mib,
        faults_per_mib: (k1.0 .0 - k0.0 .0) / mib,
        others_ms_per_mib: (k1.1 - k0.1 - others_idle * elapsed) / mib,
        object_reads_per_mib: (k1.2 - k0.2) / mib,
        uploads_per_mib: (k1.3 - k0.3) / mib,
        commits,
        moves: e1.saturating_sub(e0),
        warm_up_moves: e0.saturating_sub(first_epochs),
    }
}

/// `INLET_BENCH_NODE_COUNTS` (default `1,3`): the node counts the scale and tables phases run.
fn node_counts() -> Vec<u64> {
    std::env::var("INLET_BENCH_NODE_COUNTS")
        .unwrap_or_else(|_| "1,3".into())
        .split(',')
        .map(|n| n.trim().parse().expect("INLET_BENCH_NODE_COUNTS: numbers"))
        .collect()
}

/// The scale and tables phases' settings: `INLET_BENCH_SECONDS` (15), `INLET_BENCH_RUNS` (3)
/// and `INLET_BENCH_MIB_PER_NODE` (0: flat out).
fn settings() -> (u64, u64, u64) {
    (
        env_u64("INLET_BENCH_SECONDS", 15),
        env_u64("INLET_BENCH_RUNS", 3),
        env_u64("INLET_BENCH_MIB_PER_NODE", 0),
    )
}

/// The load a run of `count` nodes was offered, as printed.
fn offered(mib_per_node: u64, count: u64) -> String {
    match mib_per_node {
        0 => "flat out".to_string(),
        m => format!("{} MiB/s offered", m * count),
    }
}

/// `runs` runs of each node count ([`node_counts`]), the counts taking turns run by run so
/// that the machine's drift over the phase (it slows as the runs go on) falls on every count
/// alike; each count with its runs.
fn take_turns<R>(runs: u64, mut run: impl FnMut(u64) -> R) -> Vec<(u64, Vec<R>)> {
    let mut by_count: Vec<(u64, Vec<R>)> =
        node_counts().into_iter().map(|c| (c, Vec::new())).collect();
    for _ in 0..runs {
        for (count, rows) in &mut by_count {
            rows.push(run(*count));
        }
    }
    by_count
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let phases =
        std::env::var("INLET_BENCH_PHASES").unwrap_or_else(|_| "failover,scale,tables".into());
    if phases.split(',').any(|p| p == "failover") {
        failover(env_u64("INLET_BENCH_KILLS", 20));
    }
    if phases.split(',').any(|p| p == "scale") {
        let (seconds, runs, mib_per_node) = settings();
        let offered = |count| offered(mib_per_node, count);
        let by_count = take_turns(runs, |count| {
            let r = scale_run(count, seconds, mib_per_node);
            eprintln!(
                    "  {count} node(s), {}: {:.1} MiB/s, {:.1} CPU ms/MiB ({:.1} net of idle, {:.1} in the kernel), {:.0}% CPU per node, {:.1} WAL objects and {:.0} page faults per MiB",
                    offered(count), r.mib_per_s, r.cpu_ms_per_mib, r.net_ms_per_mib, r.system_ms_per_mib,
                    r.cpu_percent_per_node, r.wal_objects_per_mib, r.faults_per_mib
                );
            r
        });
        for (count, rows) in &by_count {
            let m = |f: fn(&ScaleRun) -> f64| median(rows.iter().map(f).collect());
            println!(
                "produce, {count} node(s), {}: {:.1} MiB/s acked, {:.1} node CPU ms per MiB ({:.1} net of idle, {:.1} in the kernel), {:.0}% CPU per node, {:.1} WAL objects and {:.0} page faults per MiB (medians of {runs})",
                offered(*count),
                m(|r| r.mib_per_s),
                m(|r| r.cpu_ms_per_mib),
                m(|r| r.net_ms_per_mib),
                m(|r| r.system_ms_per_mib),
                m(|r| r.cpu_percent_per_node),
                m(|r| r.wal_objects_per_mib),
                m(|r| r.faults_per_mib),
            );
        }
    }
    if phases.split(',').any(|p| p == "coordinator") {
        coordinator_failover(
            env_u64("INLET_BENCH_KILLS", 20),
            env_u64("INLET_BENCH_SECONDS", 15),
            env_u64("INLET_BENCH_TABLE_KEYS", 100_000),
        );
    }
    if phases.split(',').any(|p| p == "tables") {
        let (seconds, runs, mib_per_node) = settings();
        let keys = env_u64("INLET_BENCH_TABLE_KEYS", 0);
        let offered = |count| {
            let kind = match keys {
                0 => "append-only".to_string(),
                k => format!("upsert over {k} keys"),
            };
            format!("{kind}, {}", offered(mib_per_node, count))
        };
        let by_count = take_turns(runs, |count| {
            let r = table_run(count, seconds, mib_per_node, keys);
            eprintln!(
                    "  {count} node(s), {}: {:.1} MiB/s into tables ({:.1} acked, then {:.1} s to commit), {:.1} CPU ms/MiB net of idle ({:.1} in the kernel, {:.0} page faults/MiB), the stores {:.1} CPU ms/MiB, {:.2} object reads and {:.2} uploads per MiB, {} snapshots and {} partition moves ({} in the warm-up)",
                    offered(count), r.mib_per_s, r.acked_mib_per_s, r.tail_s, r.net_ms_per_mib,
                    r.system_ms_per_mib, r.faults_per_mib, r.others_ms_per_mib,
                    r.object_reads_per_mib, r.uploads_per_mib, r.commits, r.moves, r.warm_up_moves
                );
            r
        });
        for (count, rows) in &by_count {
            let m = |f: fn(&TableRun) -> f64| median(rows.iter().map(f).collect());
            println!(
                "tables, {count} node(s), {}: {:.1} MiB/s into tables ({:.1} acked, then {:.1} s to commit), {:.1} node CPU ms per MiB net of idle ({:.1} in the kernel, {:.0} page faults per MiB), the stores {:.1} CPU ms per MiB, {:.2} object reads and {:.2} uploads per MiB (medians of {runs})",
                offered(*count),
                m(|r| r.mib_per_s),
                m(|r| r.acked_mib_per_s),
                m(|r| r.tail_s),
                m(|r| r.net_ms_per_mib),
                m(|r| r.system_ms_per_mib),
                m(|r| r.faults_per_mib),
                m(|r| r.others_ms_per_mib),
                m(|r| r.object_reads_per_mib),
                m(|r| r.uploads_per_mib),
            );
        }
    }
}
