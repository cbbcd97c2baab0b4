//! Compacted topics under load (issue 41: "Compaction: the MiB/s it rewrites, and its CPU and
//! memory, while produce runs at 100 MiB/s, with produce p99 unchanged within noise"): one
//! `inlet serve` node (the release binary, embedded default) driven by a librdkafka producer on
//! the same machine, a plain topic against a compacted one, alternating, in the same run.
//!
//! ```text
//! cargo bench --bench kafka_compaction
//! ```
//!
//! Environment: `INLET_BENCH_SECONDS` (length of each measured window, default 30),
//! `INLET_BENCH_WARMUP_SECONDS` (paced produce before each window, default 5),
//! `INLET_BENCH_RUNS` (rounds of one plain and one compacted phase; medians are reported,
//! default 3), `INLET_BENCH_MIB_S` (the offered load, default 100), `INLET_BENCH_KEYS`
//! (distinct record keys, default 100000), `INLET_BENCH_PARTITIONS` (partitions of each topic,
//! default 4), `INLET_BENCH_UPLOAD_INTERVAL_MS` (the node's `[storage] upload_interval_ms`,
//! written to a config file, default 1000), `INLET_BENCH_CLEANER_BACKOFF_MS` (the node's
//! `--kafka-config log.cleaner.backoff.ms`, default 1000), `INLET_BENCH_DIRTY_RATIO` (the
//! compacted topic's `min.cleanable.dirty.ratio`, default 0.5), `INLET_BENCH_LINGER_MS` (the
//! producer's `linger.ms`, default 0), `INLET_BENCH_INFLIGHT` (its
//! `max.in.flight.requests.per.connection`, 1 to 5, default 5), `INLET_BENCH_DIR` (where the
//! node's data dir goes; default: the target dir's `tmp/`, not the system temp dir, which may be
//! a tmpfs), `INLET_BENCH_BIN` (another `inlet` executable), `INLET_BENCH_NODE_LOG` (the node's
//! `INLET_LOG`, default `info`; `inlet_ingest::compaction=info` is always added, since the bench
//! reads the compactor's per-pass log lines), `INLET_BENCH_NODE_ARGS` (extra `inlet serve`
//! arguments, split on whitespace; when they name a `--config`, that file replaces the bench's
//! and `INLET_BENCH_UPLOAD_INTERVAL_MS` does not apply).
//!
//! Two topics of `INLET_BENCH_PARTITIONS` partitions: `plain` (`cleanup.policy=delete`) and
//! `compacted` (`cleanup.policy=compact`, `min.cleanable.dirty.ratio`). Every record has a key
//! drawn uniformly from `INLET_BENCH_KEYS` keys and a 1 KiB random value. One idempotent
//! `ThreadedProducer` (acks=all, no compression, batch.size 1 MiB, a 64 MiB queue) is fed by one
//! pacing thread at `INLET_BENCH_MIB_S` (open loop, as kafka_load's latency phase: messages fall
//! due on a fixed schedule). Each round starts a fresh node (so that what earlier rounds left,
//! ~1.5 GiB a phase, tilts nothing) and runs two phases, A then B in even rounds and B then A
//! in odd ones (so that neither always follows the other's uploads), each after the node has
//! uploaded what was appended, the compactor has been idle for three backoffs, the node has
//! been idle (below 5% of a core over a second: its own maintenance of the last phase's
//! uploads done) and `sync(2)`:
//! - **A (baseline)**: the paced load to `plain`, so the compactor has nothing to do;
//! - **B**: the same load to `compacted`, so the compactor runs meanwhile.
//!
//! Each phase measures, over its window after the warm-up: produce latency send→ack and from
//! when each message fell due (hdrhistogram, p50/p99/p999/max), MiB/s acknowledged, the
//! broker's CPU time (utime + stime from `/proc/<pid>/stat`), its peak RSS (`VmRSS` sampled
//! every 100 ms), its storage writes (`write_bytes` of `/proc/<pid>/io`), and from `/metrics`
//! `inlet_kafka_compaction_passes_total`, `_records_removed_total` and `_bytes_read_total` (the
//! "rewrite MiB/s" is the last over the window) plus, from the compactor's `compacted` log line
//! of each pass, the bytes of the objects it wrote (no metric counts them:
//! `inlet_store_uploaded_bytes_total` counts uploads of new data only). The table gives the
//! medians, the ratio B / A of produce p99 and a verdict: "produce p99 unchanged within noise"
//! when the ratio of the medians is at most 1.25.
//!
//! Then a correctness guard, on the last round's node: once it has uploaded everything and the compactor is idle, a
//! consumer (`enable.partition.eof`) reads `compacted` from the beginning and counts records,
//! until the count is at most the distinct keys produced plus the records after each
//! partition's clean point (the `cleaned_to` of its last pass, from the log); it is printed with
//! that bound, and the bench fails only if it exceeds the records produced.
//!
//! The clients run in this process and share the machine's cores with the broker; the run lines
//! report this process's CPU time next to the broker's. The plain topic keeps everything a
//! round sends it (`INLET_BENCH_SECONDS` plus the warm-up at `INLET_BENCH_MIB_S`, ~3.5 GiB with
//! the defaults): the bench dir needs that much free space; each round's node dir is removed
//! after it.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::{Rng, RngCore};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use inlet_test_support::node::{process_cpu_ms as cpu_ms, Node};

const MIB: f64 = 1024.0 * 1024.0;
/// Message value size.
const MSG: usize = 1024;
/// Random bytes the values are cut from (each message starts at a different offset).
const POOL: usize = 8 << 20;
/// Produce p99 with the compactor running, over produce p99 without it, that still counts as
/// unchanged: the noise between runs on the development machines.
const NOISE: f64 = 1.25;
/// The two topics.
const PLAIN: &str = "plain";
const COMPACTED: &str = "compacted";
/// The compactor's counters in `/metrics` (`ingest/src/metrics.rs`).
const PASSES: &str = "inlet_kafka_compaction_passes_total";
const REMOVED: &str = "inlet_kafka_compaction_records_removed_total";
const READ: &str = "inlet_kafka_compaction_bytes_read_total";

/// The `inlet` this bench was built with; `INLET_BENCH_BIN` names another.
const INLET: &str = env!("CARGO_BIN_EXE_inlet");

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new(3).expect("3 significant figures is valid")
}

/// The bench's settings, from the environment.
struct Settings {
    seconds: u64,
    warmup: u64,
    runs: u64,
    mib_s: f64,
    keys: usize,
    partitions: i32,
    upload_interval_ms: u64,
    backoff_ms: u64,
    dirty_ratio: f64,
    linger_ms: u64,
    inflight: u64,
}

impl Settings {
    fn from_env() -> Settings {
        Settings {
            seconds: env_u64("INLET_BENCH_SECONDS", 30).max(1),
            warmup: env_u64("INLET_BENCH_WARMUP_SECONDS", 5),
            runs: env_u64("INLET_BENCH_RUNS", 3).max(1),
            mib_s: env_f64("INLET_BENCH_MIB_S", 100.0).max(0.1),
            keys: env_u64("INLET_BENCH_KEYS", 100_000).max(1) as usize,
            partitions: env_u64("INLET_BENCH_PARTITIONS", 4).max(1) as i32,
            upload_interval_ms: env_u64("INLET_BENCH_UPLOAD_INTERVAL_MS", 1000).max(1),
            backoff_ms: env_u64("INLET_BENCH_CLEANER_BACKOFF_MS", 1000).max(1),
            dirty_ratio: env_f64("INLET_BENCH_DIRTY_RATIO", 0.5),
            linger_ms: env_u64("INLET_BENCH_LINGER_MS", 0),
            // An idempotent producer allows at most 5.
            inflight: env_u64("INLET_BENCH_INFLIGHT", 5).clamp(1, 5),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The node.

/// Starts the node: `INLET_BENCH_BIN` (else this build's `inlet`) on `base/node`, with a config
/// file setting the upload interval, the cleaner's backoff, then `INLET_BENCH_NODE_ARGS`. Not
/// `Node::start_bench`, which drops the node's log lines: the bench reads the compactor's.
fn start_node(base: &Path, s: &Settings) -> Node {
    let bin = std::env::var_os("INLET_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(INLET));
    let config = base.join("node.toml");
    std::fs::write(
        &config,
        format!("[storage]\nupload_interval_ms = {}\n", s.upload_interval_ms),
    )
    .expect("the node's config file");
    let config = config.to_str().expect("a UTF-8 bench dir").to_string();
    let backoff = format!("log.cleaner.backoff.ms={}", s.backoff_ms);
    let user = std::env::var("INLET_BENCH_NODE_ARGS").unwrap_or_default();
    let mut args: Vec<&str> = Vec::new();
    if user
        .split_whitespace()
        .any(|a| a == "--config" || a.starts_with("--config="))
    {
        eprintln!(
            "note: INLET_BENCH_NODE_ARGS names a --config: the upload interval is that file's"
        );
    } else {
        args.extend(["--config", config.as_str()]);
    }
    args.extend(["--kafka-config", backoff.as_str()]);
    args.extend(user.split_whitespace());
    let log = std::env::var("INLET_BENCH_NODE_LOG").unwrap_or_else(|_| "info".into());
    let log = format!("{log},inlet_ingest::compaction=info");
    Node::launch(
        &bin,
        &base.join("node"),
        &args,
        &[("INLET_LOG", log.as_str())],
    )
}

#[derive(Clone, Default)]
struct Metrics(HashMap<String, f64>);

fn metrics(node: &Node) -> Metrics {
    Metrics(node.metric_values())
}

impl Metrics {
    fn get(&self, key: &str) -> f64 {
        self.0.get(key).copied().unwrap_or(0.0)
    }

    /// `self - before` for every series.
    fn since(&self, before: &Metrics) -> Metrics {
        Metrics(
            self.0
                .iter()
                .map(|(k, v)| (k.clone(), v - before.get(k)))
                .collect(),
        )
    }

    /// Count, mean (ms) and the bucket bound holding the `q` quantile of Produce's request
    /// latency as the broker measured it, over a delta of the metrics.
    fn produce_latency(&self, q: f64) -> Option<(f64, f64, String)> {
        let api = self.0.keys().find_map(|k| {
            let api = k
                .strip_prefix("inlet_kafka_request_seconds_count{api=\"")?
                .strip_suffix("\"}")?;
            (api == "Produce" || api == "ProduceKey").then(|| api.to_string())
        })?;
        let count = self.get(&format!(
            "inlet_kafka_request_seconds_count{{api=\"{api}\"}}"
        ));
        if count <= 0.0 {
            return None;
        }
        let sum = self.get(&format!("inlet_kafka_request_seconds_sum{{api=\"{api}\"}}"));
        let prefix = format!("inlet_kafka_request_seconds_bucket{{api=\"{api}\",le=\"");
        let mut buckets: Vec<(f64, f64)> = self
            .0
            .iter()
            .filter_map(|(k, v)| {
                let le = k.strip_prefix(&prefix)?.strip_suffix("\"}")?;
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().ok()?
                };
                Some((le, *v))
            })
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        let bound = buckets
            .iter()
            .find(|(_, c)| *c >= q * count)
            .map(|(le, _)| {
                if le.is_infinite() {
                    "> 30 s".to_string()
                } else {
                    format!("≤ {} ms", le * 1000.0)
                }
            })
            .unwrap_or_default();
        Some((count, sum / count * 1000.0, bound))
    }

    /// One line on where the time went in a window (a delta of the metrics over `secs`).
    fn describe(&self, secs: f64) -> String {
        let syncs = self.get("inlet_wal_syncs_total");
        let sync_s = self.get("inlet_wal_sync_seconds_total");
        let mut s = format!(
            "WAL {:.0} syncs/s, mean sync {:.2} ms, {:.0}% of the time in fdatasync",
            syncs / secs,
            if syncs > 0.0 {
                sync_s / syncs * 1000.0
            } else {
                0.0
            },
            sync_s / secs * 100.0,
        );
        if let Some((count, mean, p99)) = self.produce_latency(0.99) {
            s += &format!(
                "; Produce {:.0} req/s, mean {mean:.2} ms, p99 {p99} (broker)",
                count / secs
            );
        }
        s += &format!(
            "; uploaded {:.1} MiB/s",
            self.get("inlet_store_uploaded_bytes_total") / MIB / secs
        );
        s
    }
}

/// `name=value` of a log line (values have no spaces here).
fn log_field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
}

/// What the compactor's `compacted` log lines (one per pass, `ingest/src/compaction.rs`) said.
#[derive(Clone, Copy, Default)]
struct Passes {
    passes: u64,
    /// The bytes of the objects the passes wrote.
    written: u64,
}

/// Reads the node's log lines as they come: the compactor's passes over one topic, and where
/// each partition's last pass left it clean (every record below is its key's only one there).
struct CompactionLog {
    topic: String,
    cleaned_to: HashMap<i32, u64>,
}

impl CompactionLog {
    fn new(topic: &str) -> CompactionLog {
        CompactionLog {
            topic: topic.to_string(),
            cleaned_to: HashMap::new(),
        }
    }

    /// The passes logged since the last call (the other log lines are dropped).
    fn drain(&mut self, node: &Node) -> Passes {
        let mut sum = Passes::default();
        for line in node.logs_so_far() {
            if !line.contains("inlet_ingest::compaction") {
                continue;
            }
            let topic = log_field(&line, "topic").map(|t| t.trim_matches('"'));
            if topic != Some(self.topic.as_str()) {
                continue;
            }
            let n = |name: &str| log_field(&line, name).and_then(|v| v.parse::<u64>().ok());
            let (Some(partition), Some(cleaned), Some(written)) =
                (n("partition"), n("cleaned_to"), n("written"))
            else {
                continue; // not a pass (a failed one says so with a warning)
            };
            let at = self.cleaned_to.entry(partition as i32).or_insert(0);
            *at = (*at).max(cleaned);
            sum.passes += 1;
            sum.written += written;
        }
        sum
    }

    fn cleaned_to(&self, partition: i32) -> u64 {
        self.cleaned_to.get(&partition).copied().unwrap_or(0)
    }
}

/// Lets the node upload what the previous phase appended, the compactor finish (its pass count
/// unchanged for three backoffs) and the disk write it back, so that a phase does not pay for
/// the one before it.
fn settle(node: &Node, log: &mut CompactionLog, backoff_ms: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let dirty = metrics(node).get("inlet_dirty_bytes");
        if dirty <= MIB {
            break;
        }
        if Instant::now() > deadline {
            eprintln!("note: {:.0} MiB still not uploaded after 60 s", dirty / MIB);
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let quiet = Duration::from_millis(backoff_ms.saturating_mul(3).max(2000));
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut passes = metrics(node).get(PASSES);
    let mut since = Instant::now();
    while since.elapsed() < quiet {
        if Instant::now() > deadline {
            eprintln!("note: the compactor was still making passes after 120 s");
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
        let now = metrics(node).get(PASSES);
        if now != passes {
            passes = now;
            since = Instant::now();
        }
    }
    // Then until the node itself is idle (below 5% of a core over a second): the storage's
    // own maintenance of what the last phase wrote (merging its uploads into stream objects)
    // would otherwise run in the next phase, whichever it is.
    let pid = node.pid().to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let before = cpu_ms(&pid);
        std::thread::sleep(Duration::from_secs(1));
        if cpu_ms(&pid) - before < 50.0 {
            break;
        }
        if Instant::now() > deadline {
            eprintln!("note: the node was still busy after 120 s");
            break;
        }
    }
    log.drain(node);
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
}

/// A `/proc/<pid>/status` figure in KiB (`VmRSS:`, `VmHWM:`).
fn proc_status_kib(pid: i32, field: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// A `/proc/<pid>/io` counter (`write_bytes:`: what the process caused to be written to
/// storage); `None` where the kernel does not keep them.
fn proc_io(pid: i32, field: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .trim()
        .parse()
        .ok()
}

/// Samples the node's resident set every 100 ms until finished.
struct RssPeak {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<u64>,
}

impl RssPeak {
    fn start(pid: i32) -> RssPeak {
        let stop = Arc::new(AtomicBool::new(false));
        let handle = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut peak = 0u64;
                loop {
                    peak = peak.max(proc_status_kib(pid, "VmRSS:").unwrap_or(0));
                    if stop.load(Ordering::Relaxed) {
                        return peak;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        };
        RssPeak { stop, handle }
    }

    /// The highest sample, KiB.
    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().expect("the RSS sampler")
    }
}

// ---------------------------------------------------------------------------------------------
// Clients.

struct Ctx;

impl ClientContext for Ctx {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        if (level as i32) <= RDKafkaLogLevel::Warning as i32 {
            eprintln!("[rdkafka {level:?}] {fac}: {message}");
        }
    }
    fn error(&self, error: KafkaError, reason: &str) {
        eprintln!("[rdkafka error] {error}: {reason}");
    }
}

impl rdkafka::consumer::ConsumerContext for Ctx {}

fn create_topic(kafka: &str, name: &str, partitions: i32, configs: &[(&str, &str)]) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", kafka)
        .create()
        .expect("admin client");
    let mut topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    for (k, v) in configs {
        topic = topic.set(k, v);
    }
    let results = futures::executor::block_on(admin.create_topics(
        &[topic],
        &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
    ))
    .expect("create_topics");
    assert_eq!(results[0], Ok(name.to_string()), "create topic {name}");
}

fn random_pool() -> Arc<Vec<u8>> {
    let mut pool = vec![0u8; POOL];
    rand::rng().fill_bytes(&mut pool);
    Arc::new(pool)
}

/// What the paced producer's delivery callback records: each message's latency to its
/// delivery report from when it fell due and from when it was handed to librdkafka (the
/// opaque: both instants, in ns since `base`), and what was acknowledged.
struct Shared {
    base: Instant,
    from_due: Mutex<Histogram<u64>>,
    from_send: Mutex<Histogram<u64>>,
    /// How late the pacing thread handed messages to librdkafka (a full queue, a busy core).
    late: Mutex<Histogram<u64>>,
    acked_bytes: AtomicU64,
    acked_records: AtomicU64,
    failed: AtomicU64,
}

impl Shared {
    fn reset_histograms(&self) {
        self.from_due.lock().unwrap().reset();
        self.from_send.lock().unwrap().reset();
        self.late.lock().unwrap().reset();
    }
}

struct LatencyCtx(Arc<Shared>);

impl ClientContext for LatencyCtx {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        Ctx.log(level, fac, message)
    }
    fn error(&self, error: KafkaError, reason: &str) {
        Ctx.error(error, reason)
    }
}

impl ProducerContext for LatencyCtx {
    type DeliveryOpaque = Box<[u64; 2]>;
    fn delivery(&self, result: &DeliveryResult<'_>, at: Box<[u64; 2]>) {
        let s = &self.0;
        let now = s.base.elapsed().as_nanos() as u64;
        match result {
            Ok(m) => {
                s.acked_bytes
                    .fetch_add(m.payload_len() as u64, Ordering::Relaxed);
                s.acked_records.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, _)) => {
                if s.failed.fetch_add(1, Ordering::Relaxed) == 0 {
                    eprintln!("delivery failed: {e}");
                }
                return;
            }
        }
        let [due, sent] = *at;
        let us = |t: u64| (now.saturating_sub(t) / 1000).max(1);
        s.from_due.lock().unwrap().record(us(due)).unwrap();
        s.from_send.lock().unwrap().record(us(sent)).unwrap();
    }
}

fn producer_config(kafka: &str, s: &Settings) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", kafka)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("compression.codec", "none")
        .set("linger.ms", s.linger_ms.to_string())
        .set("batch.size", (1 << 20).to_string())
        // A request may carry a full batch for every partition.
        .set("message.max.bytes", (16 << 20).to_string())
        .set(
            "max.in.flight.requests.per.connection",
            s.inflight.to_string(),
        )
        .set("queue.buffering.max.kbytes", (64 << 10).to_string())
        .set("queue.buffering.max.messages", "1000000");
    c
}

/// One producer sending keyed 1 KiB messages at a paced offered load from its own thread
/// until stopped.
struct Paced {
    producer: ThreadedProducer<LatencyCtx>,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    /// Returns the keys it marked as produced (the bitmap it was given).
    sender: JoinHandle<Vec<bool>>,
}

impl Paced {
    /// Starts sending to `topic`; each message's key is drawn uniformly from `keys` and marked
    /// in `seen`.
    fn start(
        kafka: &str,
        topic: &str,
        s: &Settings,
        pool: &Arc<Vec<u8>>,
        keys: &Arc<Vec<String>>,
        mut seen: Vec<bool>,
    ) -> Paced {
        let shared = Arc::new(Shared {
            base: Instant::now(),
            from_due: Mutex::new(new_histogram()),
            from_send: Mutex::new(new_histogram()),
            late: Mutex::new(new_histogram()),
            acked_bytes: AtomicU64::new(0),
            acked_records: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        });
        let producer: ThreadedProducer<LatencyCtx> = producer_config(kafka, s)
            .create_with_context(LatencyCtx(shared.clone()))
            .expect("producer");
        let stop = Arc::new(AtomicBool::new(false));
        let interval = Duration::from_secs_f64(MSG as f64 / (s.mib_s * MIB));
        let sender = {
            let producer = producer.clone();
            let shared = shared.clone();
            let stop = stop.clone();
            let pool = pool.clone();
            let keys = keys.clone();
            let topic = topic.to_string();
            std::thread::spawn(move || {
                let base = shared.base;
                let mut rng = rand::rng();
                let mut send = |due: Instant, i: u64| {
                    let key = rng.random_range(0..keys.len());
                    seen[key] = true;
                    let off = (i as usize * 1031) % (POOL - MSG);
                    let at = Box::new([
                        (due - base).as_nanos() as u64,
                        base.elapsed().as_nanos() as u64,
                    ]);
                    let mut record =
                        BaseRecord::<str, [u8], Box<[u64; 2]>>::with_opaque_to(&topic, at)
                            .key(keys[key].as_str())
                            .payload(&pool[off..off + MSG]);
                    loop {
                        match producer.send(record) {
                            Ok(()) => break,
                            Err((
                                KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull),
                                r,
                            )) => {
                                record = r;
                                std::thread::sleep(Duration::from_micros(100));
                            }
                            Err((e, _)) => panic!("send: {e}"),
                        }
                    }
                    let late = (due.elapsed().as_micros() as u64).max(1);
                    shared.late.lock().unwrap().record(late).unwrap();
                };
                // Open loop: message i falls due at start + i × interval, whenever the one
                // before it was sent; late messages go at once, at most 4096 between checks of
                // the stop flag.
                let start = Instant::now();
                let mut next = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let due_next = start + interval.mul_f64(next as f64);
                    let now = Instant::now();
                    if now < due_next {
                        std::thread::sleep(due_next - now);
                    }
                    let elapsed = start.elapsed().as_secs_f64();
                    let due_until =
                        ((elapsed / interval.as_secs_f64()) as u64 + 1).min(next + 4096);
                    for i in next..due_until {
                        send(start + interval.mul_f64(i as f64), i);
                    }
                    next = due_until;
                }
                seen
            })
        };
        Paced {
            producer,
            shared,
            stop,
            sender,
        }
    }

    /// Stops the sender and waits for every delivery report; returns the keys bitmap and the
    /// records acknowledged since the start. Fails if a delivery failed.
    fn stop(self) -> (Vec<bool>, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let seen = self.sender.join().expect("sender");
        self.producer
            .flush(Duration::from_secs(120))
            .expect("flush");
        let failed = self.shared.failed.load(Ordering::Relaxed);
        assert_eq!(failed, 0, "{failed} deliveries failed");
        (seen, self.shared.acked_records.load(Ordering::Relaxed))
    }
}

// ---------------------------------------------------------------------------------------------
// Phases.

/// What the measured window of a phase saw.
struct Phase {
    secs: f64,
    acked_mib: f64,
    acked_records: u64,
    broker_cpu_ms: f64,
    client_cpu_ms: f64,
    from_send: Histogram<u64>,
    from_due: Histogram<u64>,
    late: Histogram<u64>,
    peak_rss_kib: u64,
    disk_write_bytes: Option<u64>,
    metrics: Metrics,
    logged: Passes,
}

impl Phase {
    fn mib_s(&self) -> f64 {
        self.acked_mib / self.secs
    }
    fn p(&self, q: f64) -> f64 {
        ms(self.from_send.value_at_quantile(q))
    }
    fn p99(&self) -> f64 {
        self.p(0.99)
    }
    fn due_p99(&self) -> f64 {
        ms(self.from_due.value_at_quantile(0.99))
    }
    fn broker_core_pct(&self) -> f64 {
        self.broker_cpu_ms / self.secs / 10.0
    }
    fn client_core_pct(&self) -> f64 {
        self.client_cpu_ms / self.secs / 10.0
    }
    fn broker_ms_per_mib(&self) -> f64 {
        self.broker_cpu_ms / self.acked_mib
    }
    fn peak_rss_mib(&self) -> f64 {
        self.peak_rss_kib as f64 / 1024.0
    }
    /// The node's storage writes, MiB/s (NaN where `/proc/<pid>/io` is missing).
    fn disk_mib_s(&self) -> f64 {
        self.disk_write_bytes
            .map_or(f64::NAN, |b| b as f64 / MIB / self.secs)
    }
    fn passes_s(&self) -> f64 {
        self.metrics.get(PASSES) / self.secs
    }
    /// What the compactor read to map keys (`_bytes_read_total`), MiB/s: the rewrite rate.
    fn rewrite_mib_s(&self) -> f64 {
        self.metrics.get(READ) / MIB / self.secs
    }
    fn removed_s(&self) -> f64 {
        self.metrics.get(REMOVED) / self.secs
    }
    fn produced_s(&self) -> f64 {
        self.acked_records as f64 / self.secs
    }
    /// What the compactor's passes wrote, MiB/s (from its log lines).
    fn written_mib_s(&self) -> f64 {
        self.logged.written as f64 / MIB / self.secs
    }

    fn line(&self, s: &Settings) -> String {
        format!(
            "{:.1} MiB/s acked of {} offered; send→ack p50 {:.2} p99 {:.2} p999 {:.2} max {:.2} ms over {} messages; from due p99 {:.2} ms (sends late p99 {:.2} ms); broker CPU {:.0}% of a core ({:.1} ms/MiB), clients {:.0}%; node peak RSS {:.0} MiB, storage writes {:.1} MiB/s; compaction {:.0} passes ({} logged), read {:.1} MiB/s, wrote {:.1} MiB/s, removed {:.0} records/s of {:.0} produced/s; {}",
            self.mib_s(),
            s.mib_s,
            self.p(0.5),
            self.p99(),
            self.p(0.999),
            ms(self.from_send.max()),
            self.from_send.len(),
            self.due_p99(),
            ms(self.late.value_at_quantile(0.99)),
            self.broker_core_pct(),
            self.broker_ms_per_mib(),
            self.client_core_pct(),
            self.peak_rss_mib(),
            self.disk_mib_s(),
            self.metrics.get(PASSES),
            self.logged.passes,
            self.rewrite_mib_s(),
            self.written_mib_s(),
            self.removed_s(),
            self.produced_s(),
            self.metrics.describe(self.secs)
        )
    }
}

/// The paced load to `topic`: settles the node, warms up, measures one window, stops.
/// Returns the phase, the keys bitmap (`seen`, marked further) and the records acknowledged
/// over the whole phase, warm-up included.
fn run_phase(
    node: &Node,
    log: &mut CompactionLog,
    topic: &str,
    s: &Settings,
    pool: &Arc<Vec<u8>>,
    keys: &Arc<Vec<String>>,
    seen: Vec<bool>,
) -> (Phase, Vec<bool>, u64) {
    settle(node, log, s.backoff_ms);
    let pid = node.pid();
    let pid_s = pid.to_string();
    let load = Paced::start(&node.kafka, topic, s, pool, keys, seen);
    std::thread::sleep(Duration::from_secs(s.warmup));

    load.shared.reset_histograms();
    log.drain(node);
    let m0 = metrics(node);
    let (b0, c0, io0) = (cpu_ms(&pid_s), cpu_ms("self"), proc_io(pid, "write_bytes:"));
    let (a0, r0) = (
        load.shared.acked_bytes.load(Ordering::Relaxed),
        load.shared.acked_records.load(Ordering::Relaxed),
    );
    let rss = RssPeak::start(pid);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(s.seconds));
    let (b1, c1, io1) = (cpu_ms(&pid_s), cpu_ms("self"), proc_io(pid, "write_bytes:"));
    let (a1, r1) = (
        load.shared.acked_bytes.load(Ordering::Relaxed),
        load.shared.acked_records.load(Ordering::Relaxed),
    );
    let secs = t0.elapsed().as_secs_f64();
    let from_send = load.shared.from_send.lock().unwrap().clone();
    let from_due = load.shared.from_due.lock().unwrap().clone();
    let late = load.shared.late.lock().unwrap().clone();
    let m1 = metrics(node);
    let logged = log.drain(node);
    let peak_rss_kib = rss.finish();

    let (seen, acked_records) = load.stop();
    let phase = Phase {
        secs,
        acked_mib: (a1 - a0) as f64 / MIB,
        acked_records: r1 - r0,
        broker_cpu_ms: b1 - b0,
        client_cpu_ms: c1 - c0,
        from_send,
        from_due,
        late,
        peak_rss_kib,
        disk_write_bytes: io0.zip(io1).map(|(a, b)| b.saturating_sub(a)),
        metrics: m1.since(&m0),
        logged,
    };
    (phase, seen, acked_records)
}

/// Records a consumer reads from the beginning of every partition of `topic` to each one's
/// end (`enable.partition.eof`), and the partitions' high watermarks, taken before the read.
fn count_records(kafka: &str, topic: &str, partitions: i32) -> (u64, Vec<i64>) {
    let consumer: BaseConsumer<Ctx> = ClientConfig::new()
        .set("bootstrap.servers", kafka)
        .set("group.id", format!("inlet-bench-{topic}-count"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("max.partition.fetch.bytes", (4 << 20).to_string())
        .create_with_context(Ctx)
        .expect("consumer");
    let highs: Vec<i64> = (0..partitions)
        .map(|p| {
            consumer
                .fetch_watermarks(topic, p, Duration::from_secs(30))
                .expect("watermarks")
                .1
        })
        .collect();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .expect("a partition to assign");
    }
    consumer.assign(&tpl).expect("assign");
    let deadline = Instant::now() + Duration::from_secs(1800);
    let mut eof = vec![false; partitions as usize];
    let mut records = 0u64;
    let mut last = Instant::now();
    while !eof.iter().all(|e| *e) {
        assert!(Instant::now() < deadline, "the read took over 1800 s");
        if last.elapsed() > Duration::from_secs(60) {
            eprintln!("the consumer got nothing for 60 s; partitions at their end: {eof:?}");
            break;
        }
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Ok(_)) => {
                records += 1;
                last = Instant::now();
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                if let Some(e) = eof.get_mut(p as usize) {
                    *e = true;
                }
                last = Instant::now();
            }
            Some(Err(e)) => panic!("consume: {e}"),
        }
    }
    (records, highs)
}

/// The median over `phases` of one figure.
fn med(phases: &[Phase], figure: impl Fn(&Phase) -> f64) -> f64 {
    median(phases.iter().map(figure).filter(|v| !v.is_nan()).collect())
}

/// What the correctness guard found: the compacted topic read from the beginning.
struct Guard {
    count: u64,
    bound: u64,
    tail: u64,
    reads: u32,
    secs: f64,
    distinct: u64,
    produced: u64,
}

/// The guard: once the node has uploaded everything and the compactor is idle, the compacted
/// topic holds at most one record per key below each partition's clean point, plus what came
/// after it; read again (up to 300 s) until it does.
fn read_back(
    node: &Node,
    log: &mut CompactionLog,
    s: &Settings,
    seen: &[bool],
    produced: u64,
) -> Guard {
    settle(node, log, s.backoff_ms);
    let distinct = seen.iter().filter(|k| **k).count() as u64;
    eprintln!(
        "reading the compacted topic back ({produced} records produced, {distinct} distinct keys)"
    );
    let deadline = Instant::now() + Duration::from_secs(300);
    let t0 = Instant::now();
    let mut reads = 0u32;
    loop {
        log.drain(node);
        let (count, highs) = count_records(&node.kafka, COMPACTED, s.partitions);
        reads += 1;
        let tail: u64 = highs
            .iter()
            .enumerate()
            .map(|(p, h)| ((*h).max(0) as u64).saturating_sub(log.cleaned_to(p as i32)))
            .sum();
        let bound = distinct + tail;
        if count <= bound || Instant::now() > deadline {
            return Guard {
                count,
                bound,
                tail,
                reads,
                secs: t0.elapsed().as_secs_f64(),
                distinct,
                produced,
            };
        }
        eprintln!("{count} records > {bound} (distinct keys + records after the clean points); waiting for the compactor");
        std::thread::sleep(Duration::from_millis(
            s.backoff_ms.saturating_mul(2).max(2000),
        ));
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks benches to list their tests
    }
    let s = Settings::from_env();
    let base = std::env::var("INLET_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_TARGET_TMPDIR")))
        .join(format!(
            "inlet-kafka-compaction-bench-{}",
            std::process::id()
        ));
    std::fs::create_dir_all(&base).expect("the bench dir");
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let (runs, seconds, mib_s, partitions) = (s.runs, s.seconds, s.mib_s, s.partitions);
    eprintln!(
        "kafka_compaction: {}, {cores} cores shared by the broker and the clients; {runs} rounds of {seconds} s plain + {seconds} s compacted at {mib_s} MiB/s offered, {} keys, {partitions} partitions; upload interval {} ms, cleaner backoff {} ms, dirty ratio {}",
        base.display(),
        s.keys,
        s.upload_interval_ms,
        s.backoff_ms,
        s.dirty_ratio
    );
    let pool = random_pool();
    let keys: Arc<Vec<String>> = Arc::new((0..s.keys).map(|k| format!("key-{k:09}")).collect());

    let mut plain: Vec<Phase> = Vec::new();
    let mut compacted: Vec<Phase> = Vec::new();
    let mut lines = Vec::new();
    let mut guard = None;
    let mut hwm_kib = None;
    for run in 0..runs {
        // A fresh node each round: what a node holds (the plain topic keeps every byte it is
        // sent) must not tilt later rounds, and the order of the two phases alternates, so
        // neither phase always follows the other's uploads.
        let round_dir = base.join(format!("round-{run}"));
        std::fs::create_dir_all(&round_dir).expect("the round's dir");
        let node = start_node(&round_dir, &s);
        let mut log = CompactionLog::new(COMPACTED);
        create_topic(
            &node.kafka,
            PLAIN,
            partitions,
            &[("cleanup.policy", "delete")],
        );
        let ratio = s.dirty_ratio.to_string();
        create_topic(
            &node.kafka,
            COMPACTED,
            partitions,
            &[
                ("cleanup.policy", "compact"),
                ("min.cleanable.dirty.ratio", ratio.as_str()),
            ],
        );
        let mut phase_a = None;
        let mut phase_b = None;
        // The keys sent to the compacted topic, for the guard.
        let mut compacted_seen = vec![false; s.keys];
        let mut compacted_records = 0u64;
        let order: [&str; 2] = if run % 2 == 0 {
            [PLAIN, COMPACTED]
        } else {
            [COMPACTED, PLAIN]
        };
        for topic in order {
            if topic == PLAIN {
                let (a, _, _) = run_phase(
                    &node,
                    &mut log,
                    PLAIN,
                    &s,
                    &pool,
                    &keys,
                    vec![false; s.keys],
                );
                let line = format!("run {run} A plain: {}", a.line(&s));
                eprintln!("{line}");
                lines.push(line);
                phase_a = Some(a);
            } else {
                let (b, seen, records) = run_phase(
                    &node,
                    &mut log,
                    COMPACTED,
                    &s,
                    &pool,
                    &keys,
                    std::mem::take(&mut compacted_seen),
                );
                compacted_seen = seen;
                compacted_records += records;
                let line = format!("run {run} B compacted: {}", b.line(&s));
                eprintln!("{line}");
                lines.push(line);
                phase_b = Some(b);
            }
        }
        let (a, b) = (
            phase_a.expect("the round ran A"),
            phase_b.expect("the round ran B"),
        );
        let line = format!(
            "run {run} ({}): produce p99 B / A {:.2}",
            if run % 2 == 0 { "A then B" } else { "B then A" },
            b.p99() / a.p99()
        );
        eprintln!("{line}");
        lines.push(line);
        plain.push(a);
        compacted.push(b);
        if run + 1 == runs {
            guard = Some(read_back(
                &node,
                &mut log,
                &s,
                &compacted_seen,
                compacted_records,
            ));
        }
        hwm_kib = hwm_kib.max(proc_status_kib(node.pid(), "VmHWM:"));
        node.stop_within(60);
        let _ = std::fs::remove_dir_all(&round_dir);
    }
    let _ = std::fs::remove_dir_all(&base);
    let Guard {
        count,
        bound,
        tail,
        reads,
        secs: guard_secs,
        distinct,
        produced: compacted_records,
    } = guard.expect("the last round reads back");

    let (a_p99, b_p99) = (med(&plain, Phase::p99), med(&compacted, Phase::p99));
    let ratio = b_p99 / a_p99;
    let per_run = median(
        plain
            .iter()
            .zip(&compacted)
            .map(|(a, b)| b.p99() / a.p99())
            .collect(),
    );
    let a_min = plain.iter().map(Phase::p99).fold(f64::INFINITY, f64::min);
    let a_max = plain.iter().map(Phase::p99).fold(0.0, f64::max);
    let row = |what: &str, f: &dyn Fn(&Phase) -> f64, unit: &str, digits: usize| {
        let (a, b) = (med(&plain, f), med(&compacted, f));
        println!(
            "| {what} | {a:.digits$} {unit} | {b:.digits$} {unit} | {:.2} |",
            b / a
        );
    };
    println!();
    println!("| measure (median of {runs} runs) | A: plain topic | B: compacted topic | B / A |");
    println!("|---|---|---|---|");
    row("produce MiB/s acked", &Phase::mib_s, "MiB/s", 1);
    println!(
        "| produce send→ack p50 / p99 / p999 | {:.2} / {a_p99:.2} / {:.2} ms | {:.2} / {b_p99:.2} / {:.2} ms | p99 **{ratio:.2}** |",
        med(&plain, |p| p.p(0.5)),
        med(&plain, |p| p.p(0.999)),
        med(&compacted, |p| p.p(0.5)),
        med(&compacted, |p| p.p(0.999)),
    );
    row(
        "produce p99 from when each message fell due",
        &Phase::due_p99,
        "ms",
        2,
    );
    row("broker CPU, % of a core", &Phase::broker_core_pct, "%", 0);
    row(
        "broker CPU per MiB produced",
        &Phase::broker_ms_per_mib,
        "ms",
        1,
    );
    row(
        "clients (this process) CPU, % of a core",
        &Phase::client_core_pct,
        "%",
        0,
    );
    row(
        "node peak RSS (VmRSS every 100 ms)",
        &Phase::peak_rss_mib,
        "MiB",
        0,
    );
    row(
        "node storage writes (/proc/<pid>/io write_bytes)",
        &Phase::disk_mib_s,
        "MiB/s",
        1,
    );
    println!(
        "| compaction passes/s | {:.2} | {:.2} | |",
        med(&plain, Phase::passes_s),
        med(&compacted, Phase::passes_s)
    );
    println!(
        "| **compaction rewrite** (bytes the compactor read) | {:.1} MiB/s | **{:.1} MiB/s** | |",
        med(&plain, Phase::rewrite_mib_s),
        med(&compacted, Phase::rewrite_mib_s)
    );
    println!(
        "| compaction written (objects of its passes, from the log) | {:.1} MiB/s | {:.1} MiB/s | |",
        med(&plain, Phase::written_mib_s),
        med(&compacted, Phase::written_mib_s)
    );
    println!(
        "| records removed/s (of records produced/s) | {:.0} | {:.0} (of {:.0}) | |",
        med(&plain, Phase::removed_s),
        med(&compacted, Phase::removed_s),
        med(&compacted, Phase::produced_s)
    );
    let extra_cpu = med(&compacted, Phase::broker_core_pct) - med(&plain, Phase::broker_core_pct);
    let rewrite = med(&compacted, Phase::rewrite_mib_s);
    println!(
        "\ncompaction's cost: broker CPU +{extra_cpu:.0}% of a core ({:.1} ms per MiB rewritten), peak RSS {:+.0} MiB, storage writes {:+.1} MiB/s; node VmHWM {} over the whole run",
        extra_cpu * 10.0 / rewrite,
        med(&compacted, Phase::peak_rss_mib) - med(&plain, Phase::peak_rss_mib),
        med(&compacted, Phase::disk_mib_s) - med(&plain, Phase::disk_mib_s),
        hwm_kib
            .map(|k| format!("{:.0} MiB", k as f64 / 1024.0))
            .unwrap_or_else(|| "n/a".into())
    );
    let kept_up = |p: &[Phase]| med(p, Phase::mib_s) >= 0.95 * mib_s;
    if !kept_up(&plain) || !kept_up(&compacted) {
        println!(
            "note: the node did not take the offered {mib_s} MiB/s in every phase (acked A {:.1}, B {:.1} MiB/s): latencies are those of a saturated node",
            med(&plain, Phase::mib_s),
            med(&compacted, Phase::mib_s)
        );
    }
    if rewrite <= 0.0 {
        println!("warning: the compactor read nothing during the B windows: this run measured no compaction");
    }
    println!(
        "\nverdict: produce p99 B / A {ratio:.2} by medians ({b_p99:.2} ms with the compactor running, {a_p99:.2} ms without; median of the per-run ratios {per_run:.2}; A's p99 ranged {a_min:.2}–{a_max:.2} ms over the runs): {}",
        if ratio <= NOISE {
            format!("produce p99 unchanged within noise (≤ {NOISE})")
        } else {
            format!("produce p99 NOT unchanged within noise (> {NOISE})")
        }
    );
    println!(
        "(one node, {cores} cores shared by the broker and the librdkafka client; keyed 1 KiB random values over {} keys, acks=all, idempotent, linger {} ms, no compression; {runs} rounds of {seconds} s per phase after a {} s warm-up; upload interval {} ms, log.cleaner.backoff.ms {}, min.cleanable.dirty.ratio {})",
        s.keys, s.linger_ms, s.warmup, s.upload_interval_ms, s.backoff_ms, s.dirty_ratio
    );
    println!();
    for line in &lines {
        println!("{line}");
    }
    let within = count <= bound;
    println!(
        "correctness: a consumer read {count} records of the compacted topic from the beginning ({reads} reads, {guard_secs:.1} s); {compacted_records} produced, {distinct} distinct keys, {tail} records after the partitions' clean points: {}",
        if within {
            format!("≤ {bound} (distinct keys + those after the clean points)")
        } else {
            format!("NOT ≤ {bound} (distinct keys + those after the clean points) within 300 s")
        }
    );
    assert!(
        count <= compacted_records,
        "the compacted topic holds {count} records, more than the {compacted_records} produced"
    );
}
