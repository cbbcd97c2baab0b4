//! End-to-end Kafka load benchmark: one `inlet serve` node (the release binary) driven by
//! librdkafka clients on the same machine, measured against the raw disk in the same run.
//!
//! ```text
//! cargo bench --bench kafka_load
//! ```
//!
//! Environment: `INLET_BENCH_SECONDS` (length of each timed phase, default 20),
//! `INLET_BENCH_RUNS` (repetitions of the produce-throughput phase; medians are reported,
//! default 3), `INLET_BENCH_DIR` (where the node's data dir and the raw-disk probe files go, so
//! both are on the same filesystem; default: the target dir's `tmp/`, not the system temp dir,
//! which may be a tmpfs), `INLET_BENCH_CATCHUP_MIB` (bytes produced before the catch-up read,
//! default 1024), `INLET_BENCH_PRODUCERS` (producer instances in the throughput phases, default
//! 2), `INLET_BENCH_PARTITIONS` (partitions per topic, default 4), `INLET_BENCH_LATENCY_MIB_S`
//! (offered load of the latency phase, default 20), `INLET_BENCH_LATENCY_LINGER_MS` (the latency
//! producer's `linger.ms`, default 0), `INLET_BENCH_LATENCY_INFLIGHT` (its
//! `max.in.flight.requests.per.connection`, default 5), `INLET_BENCH_NODE_LOG` (the node's `INLET_LOG`, default
//! `info`; its warnings and errors are echoed), `INLET_BENCH_NODE_ARGS` (extra `inlet serve`
//! arguments, split on whitespace, e.g. `--config FILE` to change the store's settings).
//!
//! All produce traffic is acks=all, 1 KiB random payloads, no compression. Phases, in order:
//! 1. raw disk on the bench dir's filesystem: fsynced sequential 1 MiB writes (MiB/s); 4 KiB
//!    write + `fdatasync` latency (p50/p99/max; measured again at the end and merged); the raw
//!    disk doing an ideal group commit of 1 KiB messages at the latency phase's offered load;
//! 2. produce throughput: batching `ThreadedProducer`s (linger.ms 5, batch.size 1 MiB, 5
//!    requests in flight; acks are counted in the delivery callback) for the phase length,
//!    after a warm-up; MiB/s acked, and the broker's CPU time (utime + stime from
//!    `/proc/<pid>/stat`) per MiB acked;
//! 3. produce latency at a paced offered load (open loop: messages fall due on a fixed
//!    schedule; latency counts from when each message fell due to its delivery report);
//! 4. tail reads: a consumer reading the topic's end while the producers run;
//! 5. catch-up reads: a topic of `INLET_BENCH_CATCHUP_MIB` is produced, the node uploads it
//!    (`inlet_dirty_bytes` falls), then a fresh consumer reads it from the beginning.
//!
//! The clients run in this process and share the machine's cores with the broker; the table
//! reports this process's CPU time next to the broker's.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::RngCore;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use inlet_test_support::node::process_cpu_ms as cpu_ms;

const MIB: f64 = 1024.0 * 1024.0;
/// Message payload size.
const MSG: usize = 1024;
/// Random bytes the payloads are cut from (each message starts at a different offset).
const POOL: usize = 8 << 20;

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
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

// ---------------------------------------------------------------------------------------------
// Raw disk (the method of storage/benches/stream_store.rs).

use inlet_test_support::raw_disk::{
    raw_fsync_latency, raw_group_commit_latency, raw_sequential_mib_s,
};

/// Writes back every dirty page so that a phase does not pay for the one before it.
fn sync_all() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
}

/// The filesystem type of `dir` (`statfs(2)`'s magic), for the report.
fn fs_kind(dir: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    // SAFETY: a zeroed statfs is a valid out-parameter; `c` is a NUL-terminated path.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return "unknown".into();
    }
    match st.f_type as i64 {
        0xEF53 => "ext2/3/4".into(),
        0x01021994 => "tmpfs (NOT a disk: set INLET_BENCH_DIR)".into(),
        0x58465342 => "xfs".into(),
        0x9123683E => "btrfs".into(),
        0x794c7630 => "overlayfs".into(),
        other => format!("0x{other:x}"),
    }
}

// ---------------------------------------------------------------------------------------------
// The node.

use inlet_test_support::node::Node;

/// The `inlet` this bench was built with; `INLET_BENCH_BIN` names another
/// (`inlet_test_support::node::Node::start_bench`).
const INLET: &str = env!("CARGO_BIN_EXE_inlet");

/// What this bench reads of a node.
trait BenchNode {
    fn metrics(&self) -> Metrics;
    fn wait_uploaded(&self, max: f64, timeout: Duration) -> f64;
}

impl BenchNode for Node {
    /// The node's `/metrics`.
    fn metrics(&self) -> Metrics {
        Metrics(self.metric_values())
    }

    /// Waits until the node has uploaded all but `max` bytes of what was appended.
    fn wait_uploaded(&self, max: f64, timeout: Duration) -> f64 {
        let deadline = Instant::now() + timeout;
        loop {
            let dirty = self.metrics().get("inlet_dirty_bytes");
            if dirty <= max || Instant::now() > deadline {
                return dirty;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

#[derive(Clone)]
struct Metrics(HashMap<String, f64>);

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

    /// The API label of the request-latency series whose label contains `name`.
    fn api(&self, name: &str) -> Option<String> {
        self.0.keys().find_map(|k| {
            let api = k
                .strip_prefix("inlet_kafka_request_seconds_count{api=\"")?
                .strip_suffix("\"}")?;
            (api == name || api == format!("{name}Key")).then(|| api.to_string())
        })
    }

    /// Count, mean (ms) and the bucket bound holding the `q` quantile (ms) of one API's
    /// request latency, over a delta of the metrics.
    fn request_latency(&self, name: &str, q: f64) -> Option<(f64, f64, String)> {
        let api = self.api(name)?;
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
        buckets.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
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

    /// One line on where the time went in a phase (a delta of the metrics over `secs`).
    fn describe(&self, secs: f64) -> String {
        let syncs = self.get("inlet_wal_syncs_total");
        let sync_s = self.get("inlet_wal_sync_seconds_total");
        let wal = self.get("inlet_wal_bytes_total");
        let mut s = format!(
            "WAL {:.0} syncs/s, mean sync {:.2} ms, {:.0}% of the time in fdatasync, {:.0} KiB per sync",
            syncs / secs,
            if syncs > 0.0 { sync_s / syncs * 1000.0 } else { 0.0 },
            sync_s / secs * 100.0,
            if syncs > 0.0 { wal / syncs / 1024.0 } else { 0.0 }
        );
        for api in ["Produce", "Fetch"] {
            if let Some((count, mean, p99)) = self.request_latency(api, 0.99) {
                s += &format!(
                    "; {api} {:.0} req/s, mean {mean:.2} ms, p99 {p99}",
                    count / secs
                );
            }
        }
        let uploaded = self.get("inlet_store_uploaded_bytes_total");
        if uploaded > 0.0 {
            s += &format!("; uploaded {:.0} MiB", uploaded / MIB);
        }
        s
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

#[derive(Default)]
struct Acks {
    bytes: AtomicU64,
    failed: AtomicU64,
}

/// Counts acknowledged bytes in the delivery callback (librdkafka's polling thread).
struct CountingCtx(Arc<Acks>);

impl ClientContext for CountingCtx {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        Ctx.log(level, fac, message)
    }
    fn error(&self, error: KafkaError, reason: &str) {
        Ctx.error(error, reason)
    }
}

impl ProducerContext for CountingCtx {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(m) => {
                self.0
                    .bytes
                    .fetch_add(m.payload_len() as u64, Ordering::Relaxed);
            }
            Err((e, _)) => {
                if self.0.failed.fetch_add(1, Ordering::Relaxed) == 0 {
                    eprintln!("delivery failed: {e}");
                }
            }
        }
    }
}

/// Records each message's latency to its delivery report from when it fell due and from when
/// it was handed to librdkafka (the opaque: both instants, in ns since `base`).
struct LatencyCtx {
    base: Instant,
    from_due: Mutex<Histogram<u64>>,
    from_send: Mutex<Histogram<u64>>,
    failed: AtomicU64,
}

impl ClientContext for LatencyCtx {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        Ctx.log(level, fac, message)
    }
}

impl ProducerContext for LatencyCtx {
    type DeliveryOpaque = Box<[u64; 2]>;
    fn delivery(&self, result: &DeliveryResult<'_>, at: Box<[u64; 2]>) {
        let now = self.base.elapsed().as_nanos() as u64;
        if result.is_err() {
            self.failed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let [due, sent] = *at;
        let us = |t: u64| (now.saturating_sub(t) / 1000).max(1);
        self.from_due.lock().unwrap().record(us(due)).unwrap();
        self.from_send.lock().unwrap().record(us(sent)).unwrap();
    }
}

fn producer_config(kafka: &str, linger_ms: u64) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", kafka)
        .set("acks", "all")
        .set("compression.codec", "none")
        .set("linger.ms", linger_ms.to_string())
        .set("batch.size", (1 << 20).to_string())
        // A request may carry a full batch for every partition.
        .set("message.max.bytes", (16 << 20).to_string())
        .set("max.in.flight.requests.per.connection", "5")
        .set("queue.buffering.max.kbytes", (64 << 10).to_string())
        .set("queue.buffering.max.messages", "1000000");
    c
}

fn create_topic(kafka: &str, name: &str, partitions: i32) {
    create_topic_with(kafka, name, partitions, &[]);
}

fn create_topic_with(kafka: &str, name: &str, partitions: i32, configs: &[(&str, &str)]) {
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

/// Producers sending 1 KiB messages as fast as librdkafka takes them, each from its own
/// thread, until stopped or until each has sent `budget` bytes.
struct Load {
    stop: Arc<AtomicBool>,
    senders: Vec<JoinHandle<()>>,
    producers: Vec<ThreadedProducer<CountingCtx>>,
    acks: Arc<Acks>,
}

impl Load {
    fn start(
        kafka: &str,
        topic: &str,
        producers: usize,
        budget: Option<u64>,
        pool: &Arc<Vec<u8>>,
        framed: Option<&Arc<Vec<Vec<u8>>>>,
    ) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let acks = Arc::new(Acks::default());
        let mut load = Load {
            stop: stop.clone(),
            senders: Vec::new(),
            producers: Vec::new(),
            acks: acks.clone(),
        };
        for p in 0..producers {
            let producer: ThreadedProducer<CountingCtx> = producer_config(kafka, 5)
                .create_with_context(CountingCtx(acks.clone()))
                .expect("producer");
            load.producers.push(producer.clone());
            let stop = stop.clone();
            let pool = pool.clone();
            let framed = framed.cloned();
            let topic = topic.to_string();
            load.senders.push(std::thread::spawn(move || {
                let mut sent = 0u64;
                let mut k = p * 7919;
                while !stop.load(Ordering::Relaxed) && budget.is_none_or(|b| sent < b) {
                    let off = (k * 1031) % (POOL - MSG);
                    let payload: &[u8] = match &framed {
                        Some(msgs) => &msgs[k % msgs.len()],
                        None => &pool[off..off + MSG],
                    };
                    let record = BaseRecord::<(), [u8]>::to(&topic).payload(payload);
                    match producer.send(record) {
                        Ok(()) => {
                            sent += MSG as u64;
                            k += 1;
                        }
                        Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        Err((e, _)) => panic!("send: {e}"),
                    }
                }
            }));
        }
        load
    }

    fn acked(&self) -> u64 {
        self.acks.bytes.load(Ordering::Relaxed)
    }

    /// Waits for the senders to finish (they stop on their own with a budget).
    fn finish(self) -> u64 {
        for s in self.senders {
            s.join().expect("sender");
        }
        for p in &self.producers {
            p.flush(Duration::from_secs(120)).expect("flush");
        }
        let failed = self.acks.failed.load(Ordering::Relaxed);
        assert_eq!(failed, 0, "{failed} deliveries failed");
        self.acks.bytes.load(Ordering::Relaxed)
    }

    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.finish()
    }
}

/// What a timed window of a load measured.
struct Window {
    secs: f64,
    acked_mib: f64,
    broker_cpu_ms: f64,
    client_cpu_ms: f64,
    metrics: Metrics,
}

impl Window {
    fn mib_s(&self) -> f64 {
        self.acked_mib / self.secs
    }
}

/// Measures `seconds` of a running load after `warmup`.
fn window(node: &Node, load: &Load, warmup: Duration, seconds: u64) -> Window {
    std::thread::sleep(warmup);
    let pid = node.pid().to_string();
    let m0 = node.metrics();
    let (b0, c0, a0) = (cpu_ms(&pid), cpu_ms("self"), load.acked());
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(seconds));
    let (b1, c1, a1) = (cpu_ms(&pid), cpu_ms("self"), load.acked());
    let secs = t0.elapsed().as_secs_f64();
    let m1 = node.metrics();
    Window {
        secs,
        acked_mib: (a1 - a0) as f64 / MIB,
        broker_cpu_ms: b1 - b0,
        client_cpu_ms: c1 - c0,
        metrics: m1.since(&m0),
    }
}

fn consumer(kafka: &str, topic: &str, partitions: i32, from: Offset) -> BaseConsumer<Ctx> {
    let c: BaseConsumer<Ctx> = ClientConfig::new()
        .set("bootstrap.servers", kafka)
        .set("group.id", format!("inlet-bench-{topic}"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .set("max.partition.fetch.bytes", (4 << 20).to_string())
        .create_with_context(Ctx)
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, from).unwrap();
    }
    c.assign(&tpl).expect("assign");
    c
}

/// Produce latency at a paced offered load, µs.
struct Latency {
    /// From when each message fell due to its delivery report (open loop).
    from_due: Histogram<u64>,
    /// From the `send` call to the delivery report.
    from_send: Histogram<u64>,
    /// How late the pacing thread handed messages to librdkafka.
    late: Histogram<u64>,
}

/// Produce latency at `mib_s` offered.
fn produce_latency(
    kafka: &str,
    topic: &str,
    seconds: u64,
    mib_s: f64,
    linger_ms: u64,
    pool: &[u8],
) -> Latency {
    let base = Instant::now();
    let ctx = LatencyCtx {
        base,
        from_due: Mutex::new(Histogram::new(3).unwrap()),
        from_send: Mutex::new(Histogram::new(3).unwrap()),
        failed: AtomicU64::new(0),
    };
    let mut config = producer_config(kafka, linger_ms);
    config.set("batch.size", "1000000").set(
        "max.in.flight.requests.per.connection",
        env_u64("INLET_BENCH_LATENCY_INFLIGHT", 5).to_string(),
    );
    let producer: ThreadedProducer<LatencyCtx> = config.create_with_context(ctx).expect("producer");
    let send = |due: Instant, k: usize| {
        let off = (k * 1031) % (POOL - MSG);
        let at = Box::new([
            (due - base).as_nanos() as u64,
            base.elapsed().as_nanos() as u64,
        ]);
        let mut record = BaseRecord::<(), [u8], Box<[u64; 2]>>::with_opaque_to(topic, at)
            .payload(&pool[off..off + MSG]);
        loop {
            match producer.send(record) {
                Ok(()) => return,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    std::thread::sleep(Duration::from_micros(100));
                }
                Err((e, _)) => panic!("send: {e}"),
            }
        }
    };
    // Warm-up: connections, metadata, the first batches.
    for k in 0..2000 {
        send(Instant::now(), k);
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    producer.context().from_due.lock().unwrap().reset();
    producer.context().from_send.lock().unwrap().reset();

    let interval = Duration::from_secs_f64(MSG as f64 / (mib_s * MIB));
    let count = (seconds as f64 / interval.as_secs_f64()) as u64;
    let mut late = Histogram::<u64>::new(3).unwrap();
    let start = Instant::now();
    let mut next = 0u64;
    while next < count {
        let due_next = start + interval.mul_f64(next as f64);
        let now = Instant::now();
        if now < due_next {
            std::thread::sleep(due_next - now);
        }
        let now = Instant::now();
        let due_until =
            (((now - start).as_secs_f64() / interval.as_secs_f64()) as u64 + 1).min(count);
        for i in next..due_until {
            let due = start + interval.mul_f64(i as f64);
            send(due, i as usize);
            late.record((due.elapsed().as_micros() as u64).max(1))
                .unwrap();
        }
        next = due_until;
    }
    producer.flush(Duration::from_secs(60)).expect("flush");
    let failed = producer.context().failed.load(Ordering::Relaxed);
    assert_eq!(failed, 0, "{failed} deliveries failed");
    let ctx = producer.context();
    let from_due = ctx.from_due.lock().unwrap().clone();
    let from_send = ctx.from_send.lock().unwrap().clone();
    Latency {
        from_due,
        from_send,
        late,
    }
}

/// What a read of a whole topic from the beginning measured.
struct ReadAll {
    bytes: u64,
    secs: f64,
    broker_cpu_ms: f64,
    client_cpu_ms: f64,
    metrics: Metrics,
}

impl ReadAll {
    fn mib_s(&self) -> f64 {
        self.bytes as f64 / MIB / self.secs
    }

    fn describe(&self) -> String {
        let mib = self.bytes as f64 / MIB;
        format!(
            "read {mib:.0} MiB in {:.1} s = {:.0} MiB/s; object reads +{:.0}, log cache reads +{:.0}, block cache hits +{:.0} misses +{:.0}; broker CPU {:.1} ms/MiB, consumer {:.1} ms/MiB; {}",
            self.secs,
            self.mib_s(),
            self.metrics.get("inlet_object_reads_total"),
            self.metrics.get("inlet_log_cache_reads_total"),
            self.metrics.get("inlet_block_cache_hits_total"),
            self.metrics.get("inlet_block_cache_misses_total"),
            self.broker_cpu_ms / mib,
            self.client_cpu_ms / mib,
            self.metrics.describe(self.secs)
        )
    }
}

/// Reads all of `topic` from the beginning with a fresh consumer.
fn read_all(node: &Node, topic: &str, partitions: i32) -> ReadAll {
    let pid = node.pid().to_string();
    let reader = consumer(&node.kafka, topic, partitions, Offset::Beginning);
    let mut ends = Vec::new();
    for p in 0..partitions {
        let (_, high) = reader
            .fetch_watermarks(topic, p, Duration::from_secs(30))
            .expect("watermarks");
        ends.push(high);
    }
    let m0 = node.metrics();
    let (b0, c0) = (cpu_ms(&pid), cpu_ms("self"));
    let t0 = Instant::now();
    let mut bytes = 0u64;
    let mut at = vec![0i64; partitions as usize];
    let deadline = Instant::now() + Duration::from_secs(600);
    while at.iter().zip(&ends).any(|(a, e)| a < e) {
        assert!(Instant::now() < deadline, "the read took over 600 s");
        if let Some(m) = reader.poll(Duration::from_millis(500)) {
            let m = m.expect("consume");
            bytes += m.payload_len() as u64;
            at[m.partition() as usize] = m.offset() + 1;
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let (b1, c1) = (cpu_ms(&pid), cpu_ms("self"));
    ReadAll {
        bytes,
        secs,
        broker_cpu_ms: b1 - b0,
        client_cpu_ms: c1 - c0,
        metrics: node.metrics().since(&m0),
    }
}

fn fresh_topic(node: &Node, name: &str, partitions: i32) -> String {
    create_topic(&node.kafka, name, partitions);
    name.to_string()
}

/// Lets the node upload what the previous phase appended and the disk write it back.
fn settle(node: &Node) {
    let dirty = node.wait_uploaded(1.0 * MIB, Duration::from_secs(60));
    if dirty > MIB {
        eprintln!("note: {:.0} MiB still not uploaded after 60 s", dirty / MIB);
    }
    sync_all();
}

/// Registers an Avro schema over the registry's REST API; returns its id.
fn register_schema(registry: &str, subject: &str, schema: &str) -> u32 {
    use std::io::{Read, Write};
    let body = serde_json::json!({ "schema": schema }).to_string();
    let mut s = std::net::TcpStream::connect(registry).expect("connect to the registry");
    write!(
        s,
        "POST /subjects/{subject}/versions HTTP/1.1\r\nHost: x\r\nContent-Type: application/vnd.schemaregistry.v1+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    let json = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {out}"));
    v["id"].as_u64().unwrap_or_else(|| panic!("no id in {out}")) as u32
}

fn zigzag_varint(out: &mut Vec<u8>, v: i64) {
    let mut n = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            break;
        }
        out.push(b | 0x80);
    }
}

/// `count` Schema Registry framed Avro records `{id: long, data: bytes}` of exactly `MSG`
/// bytes each, random data.
fn framed_messages(schema_id: u32, count: usize) -> Arc<Vec<Vec<u8>>> {
    let mut rng = rand::rng();
    Arc::new(
        (0..count)
            .map(|i| {
                let mut m = vec![0u8];
                m.extend_from_slice(&schema_id.to_be_bytes());
                zigzag_varint(&mut m, i as i64);
                // bytes: zig-zag length, then the data; pick the length that fills MSG.
                let mut len = MSG - m.len() - 2;
                let mut prefix = Vec::new();
                zigzag_varint(&mut prefix, len as i64);
                len = MSG - m.len() - prefix.len();
                prefix.clear();
                zigzag_varint(&mut prefix, len as i64);
                m.extend_from_slice(&prefix);
                let mut data = vec![0u8; len];
                rng.fill_bytes(&mut data);
                m.extend_from_slice(&data);
                m
            })
            .collect(),
    )
}

/// Produce-time validation (`INLET_BENCH_VALIDATION=1` runs only this): the same framed Avro
/// records to a plain topic and to a table topic whose broker checks every record against the
/// registry, alternating, `runs` times each.
fn validation_phase(node: &Node, seconds: u64, runs: u64, producers: usize, partitions: i32) {
    let pool = random_pool();
    let schema = r#"{"type":"record","name":"Row","fields":[{"name":"id","type":"long"},{"name":"data","type":"bytes"}]}"#;
    let id = register_schema(&node.registry, "bench-value", schema);
    let msgs = framed_messages(id, 4096);
    let (mut plain, mut table) = (Vec::new(), Vec::new());
    let (mut plain_cpu, mut table_cpu) = (Vec::new(), Vec::new());
    for run in 0..runs {
        for validated in [false, true] {
            settle(node);
            let name = format!(
                "validation-{run}-{}",
                if validated { "table" } else { "plain" }
            );
            let configs: &[(&str, &str)] = if validated {
                &[("table.topic.enable", "true")]
            } else {
                &[]
            };
            create_topic_with(&node.kafka, &name, partitions, configs);
            let load = Load::start(&node.kafka, &name, producers, None, &pool, Some(&msgs));
            let w = window(node, &load, Duration::from_secs(3), seconds);
            load.stop();
            eprintln!(
                "validation run {run} {}: {:.0} MiB/s acked, broker CPU {:.1} ms/MiB",
                if validated {
                    "table topic (validated)"
                } else {
                    "plain topic"
                },
                w.mib_s(),
                w.broker_cpu_ms / w.acked_mib
            );
            if validated {
                table.push(w.mib_s());
                table_cpu.push(w.broker_cpu_ms / w.acked_mib);
            } else {
                plain.push(w.mib_s());
                plain_cpu.push(w.broker_cpu_ms / w.acked_mib);
            }
        }
    }
    let refused = node
        .metrics()
        .0
        .get("inlet_kafka_invalid_records_refused_total")
        .copied()
        .unwrap_or(0.0);
    assert_eq!(refused, 0.0, "valid records were refused");
    let (p, t) = (median(plain), median(table));
    println!();
    println!("produce-time validation ({runs} runs of {seconds} s each, {producers} producers, {partitions} partitions, 1 KiB framed Avro records):");
    println!(
        "  plain topic: {p:.0} MiB/s (broker {:.1} ms CPU/MiB)",
        median(plain_cpu)
    );
    println!(
        "  table topic: {t:.0} MiB/s (broker {:.1} ms CPU/MiB)",
        median(table_cpu)
    );
    println!("  validated / plain: {:.2} (target >= 0.70)", t / p);
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks benches to list their tests
    }
    let seconds = env_u64("INLET_BENCH_SECONDS", 20);
    let runs = env_u64("INLET_BENCH_RUNS", 3).max(1);
    let catchup_mib = env_u64("INLET_BENCH_CATCHUP_MIB", 1024);
    let producers = env_u64("INLET_BENCH_PRODUCERS", 2).max(1) as usize;
    let partitions = env_u64("INLET_BENCH_PARTITIONS", 4).max(1) as i32;
    let lat_mib_s = env_f64("INLET_BENCH_LATENCY_MIB_S", 20.0);
    let lat_linger = env_u64("INLET_BENCH_LATENCY_LINGER_MS", 0);
    let raw_secs = seconds.clamp(1, 10);
    let base = std::env::var("INLET_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_TARGET_TMPDIR")))
        .join(format!("inlet-kafka-bench-{}", std::process::id()));
    std::fs::create_dir_all(&base).unwrap();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    eprintln!(
        "kafka_load: {} ({}), {cores} cores shared by the broker and the clients; {seconds} s phases, {runs} throughput runs",
        base.display(),
        fs_kind(&base)
    );
    let pool = random_pool();

    // 1. The raw disk.
    sync_all();
    let raw_seq = raw_sequential_mib_s(&base, raw_secs);
    sync_all();
    let mut raw_4k = raw_fsync_latency(&base, raw_secs);
    let raw_4k_before = ms(raw_4k.value_at_quantile(0.99));
    sync_all();
    let raw_group = raw_group_commit_latency(&base, raw_secs, lat_mib_s, MSG);
    eprintln!(
        "raw: sequential {raw_seq:.0} MiB/s; 4 KiB fdatasync p50 {:.2} p99 {:.2} ms; group commit at {lat_mib_s} MiB/s p99 {:.2} ms",
        ms(raw_4k.value_at_quantile(0.5)),
        raw_4k_before,
        ms(raw_group.value_at_quantile(0.99))
    );

    let node = Node::start_bench(INLET.as_ref(), &base.join("node"));
    if std::env::var_os("INLET_BENCH_VALIDATION").is_some() {
        validation_phase(&node, seconds, runs, producers, partitions);
        node.stop_within(60);
        let _ = std::fs::remove_dir_all(&base);
        return;
    }
    let start_metrics = node.metrics();

    // 2. Produce throughput.
    let mut thr = Vec::new();
    let mut broker_cpu = Vec::new();
    let mut client_cpu = Vec::new();
    let mut per_run = Vec::new();
    for run in 0..runs {
        settle(&node);
        let topic = fresh_topic(&node, &format!("throughput-{run}"), partitions);
        let load = Load::start(&node.kafka, &topic, producers, None, &pool, None);
        let w = window(&node, &load, Duration::from_secs(3), seconds);
        load.stop();
        thr.push(w.mib_s());
        broker_cpu.push(w.broker_cpu_ms / w.acked_mib);
        client_cpu.push(w.client_cpu_ms / w.acked_mib);
        let line = format!(
            "run {run}: {:.0} MiB/s acked; broker CPU {:.1} ms/MiB ({:.0}% of a core), clients {:.1} ms/MiB ({:.0}%); {}",
            w.mib_s(),
            w.broker_cpu_ms / w.acked_mib,
            w.broker_cpu_ms / w.secs / 10.0,
            w.client_cpu_ms / w.acked_mib,
            w.client_cpu_ms / w.secs / 10.0,
            w.metrics.describe(w.secs)
        );
        eprintln!("{line}");
        per_run.push(line);
    }

    // 3. Produce latency at a paced offered load.
    settle(&node);
    let topic = fresh_topic(&node, "latency", partitions);
    let m0 = node.metrics();
    let t0 = Instant::now();
    let latency = produce_latency(&node.kafka, &topic, seconds, lat_mib_s, lat_linger, &pool);
    let (lat, due) = (&latency.from_send, &latency.from_due);
    let lat_metrics = node.metrics().since(&m0);
    let lat_line = format!(
        "latency phase: send→ack p50 {:.2} p99 {:.2} p999 {:.2} max {:.2} ms over {} messages; from due p50 {:.2} p99 {:.2} p999 {:.2} max {:.2} ms (sends late p99 {:.2} ms); {}",
        ms(lat.value_at_quantile(0.5)),
        ms(lat.value_at_quantile(0.99)),
        ms(lat.value_at_quantile(0.999)),
        ms(lat.max()),
        lat.len(),
        ms(due.value_at_quantile(0.5)),
        ms(due.value_at_quantile(0.99)),
        ms(due.value_at_quantile(0.999)),
        ms(due.max()),
        ms(latency.late.value_at_quantile(0.99)),
        lat_metrics.describe(t0.elapsed().as_secs_f64())
    );
    eprintln!("{lat_line}");

    // 4. Tail reads while producing.
    settle(&node);
    let topic = fresh_topic(&node, "tail", partitions);
    let tail_consumer = consumer(&node.kafka, &topic, partitions, Offset::End);
    let consumed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let consumed = consumed.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Some(m) = tail_consumer.poll(Duration::from_millis(100)) {
                    let m = m.expect("consume");
                    consumed.fetch_add(m.payload_len() as u64, Ordering::Relaxed);
                }
            }
        })
    };
    std::thread::sleep(Duration::from_secs(1));
    let load = Load::start(&node.kafka, &topic, producers, None, &pool, None);
    std::thread::sleep(Duration::from_secs(3));
    let c0 = consumed.load(Ordering::Relaxed);
    let w = window(&node, &load, Duration::ZERO, seconds);
    let c1 = consumed.load(Ordering::Relaxed);
    let produced_total = load.stop();
    // Let the consumer catch up with the end before stopping it, to report its lag.
    let deadline = Instant::now() + Duration::from_secs(30);
    while consumed.load(Ordering::Relaxed) < produced_total && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    reader.join().expect("reader");
    let tail_mib_s = (c1 - c0) as f64 / MIB / w.secs;
    let tail_line = format!(
        "tail phase: consumed {tail_mib_s:.0} MiB/s while {:.0} MiB/s were acked; log cache reads +{:.0}, object reads +{:.0}; {}",
        w.mib_s(),
        w.metrics.get("inlet_log_cache_reads_total"),
        w.metrics.get("inlet_object_reads_total"),
        w.metrics.describe(w.secs)
    );
    eprintln!("{tail_line}");

    // 5. Catch-up reads from objects.
    settle(&node);
    let topic = fresh_topic(&node, "catchup", partitions);
    let per_producer = catchup_mib * (1 << 20) / producers as u64;
    let t0 = Instant::now();
    let load = Load::start(
        &node.kafka,
        &topic,
        producers,
        Some(per_producer),
        &pool,
        None,
    );
    let catchup_bytes = load.finish();
    let catchup_produce_mib_s = catchup_bytes as f64 / MIB / t0.elapsed().as_secs_f64();
    let t_up = Instant::now();
    let dirty = node.wait_uploaded(1.0 * MIB, Duration::from_secs(180));
    let upload_wait = t_up.elapsed().as_secs_f64();
    sync_all();
    let warm = read_all(&node, &topic, partitions);
    let catchup_line = format!(
        "catch-up phase: produced {:.0} MiB at {catchup_produce_mib_s:.0} MiB/s; {:.0} MiB still dirty after waiting {upload_wait:.1} s; {}",
        catchup_bytes as f64 / MIB,
        dirty / MIB,
        warm.describe()
    );
    eprintln!("{catchup_line}");
    let end_metrics = node.metrics();
    let total = end_metrics.since(&start_metrics);
    node.stop_within(60);

    // The same read after a restart: no log cache, a cold block cache, all from objects.
    sync_all();
    let node = Node::start_bench(INLET.as_ref(), &base.join("node"));
    let cold = read_all(&node, &topic, partitions);
    let cold_line = format!("catch-up after a restart: {}", cold.describe());
    eprintln!("{cold_line}");
    node.stop_within(60);
    // The raw disk again, after the load: the figures above are compared with both probes.
    sync_all();
    let raw_after = raw_fsync_latency(&base, raw_secs);
    let raw_4k_after = ms(raw_after.value_at_quantile(0.99));
    raw_4k.add(&raw_after).unwrap();
    let _ = std::fs::remove_dir_all(&base);

    let raw_p99 = ms(raw_4k.value_at_quantile(0.99));
    let raw_group_p99 = ms(raw_group.value_at_quantile(0.99));
    let thr_m = median(thr.clone());
    let lat_p99 = ms(lat.value_at_quantile(0.99));
    println!();
    println!("| measure | value | ratio / note |");
    println!("|---|---|---|");
    println!("| raw fsynced sequential 1 MiB writes | {raw_seq:.0} MiB/s | 1.00 |");
    println!(
        "| raw 4 KiB write+fdatasync p50 / p99 / max | {:.2} / {raw_p99:.2} / {:.2} ms | 1.00 (p99 {raw_4k_before:.2} ms before the load, {raw_4k_after:.2} ms after) |",
        ms(raw_4k.value_at_quantile(0.5)),
        ms(raw_4k.max())
    );
    println!(
        "| raw group commit of 1 KiB messages at {lat_mib_s} MiB/s, p50 / p99 | {:.2} / {raw_group_p99:.2} ms | 1.00 |",
        ms(raw_group.value_at_quantile(0.5))
    );
    println!(
        "| produce, acks=all, {producers} producers × (linger 5 ms, batch 1 MiB), {partitions} partitions | {thr_m:.0} MiB/s acked | {:.2} of raw sequential bandwidth; target ≥ 150 MiB/s: {} |",
        thr_m / raw_seq,
        if thr_m >= 150.0 { "met" } else { "not met" }
    );
    println!(
        "| broker CPU per MiB produced | {:.1} ms/MiB | clients (this process) {:.1} ms/MiB |",
        median(broker_cpu),
        median(client_cpu)
    );
    println!(
        "| produce latency send→ack at {lat_mib_s} MiB/s offered (linger {lat_linger} ms), p50 / p99 / p999 / max | {:.2} / {lat_p99:.2} / {:.2} / {:.2} ms | p99 {:.2}× raw 4 KiB fsync p99 (target ≤ 2×: {}); {:.2}× raw group commit p99 |",
        ms(lat.value_at_quantile(0.5)),
        ms(lat.value_at_quantile(0.999)),
        ms(lat.max()),
        lat_p99 / raw_p99,
        if lat_p99 <= 2.0 * raw_p99 { "met" } else { "not met" },
        lat_p99 / raw_group_p99
    );
    let due_p99 = ms(due.value_at_quantile(0.99));
    println!(
        "| the same from when each message fell due (open loop), p50 / p99 / p999 / max | {:.2} / {due_p99:.2} / {:.2} / {:.2} ms | p99 {:.2}× raw 4 KiB fsync p99; {:.2}× raw group commit p99 |",
        ms(due.value_at_quantile(0.5)),
        ms(due.value_at_quantile(0.999)),
        ms(due.max()),
        due_p99 / raw_p99,
        due_p99 / raw_group_p99
    );
    println!(
        "| tail read while producing | {tail_mib_s:.0} MiB/s | producers acked {:.0} MiB/s meanwhile |",
        w.mib_s()
    );
    for (what, r) in [
        ("after upload", &warm),
        ("after a restart (cold caches)", &cold),
    ] {
        println!(
            "| catch-up read of {:.0} MiB {what} | {:.0} MiB/s | object reads +{:.0}, log cache reads +{:.0}; consumer CPU {:.1} ms/MiB |",
            r.bytes as f64 / MIB,
            r.mib_s(),
            r.metrics.get("inlet_object_reads_total"),
            r.metrics.get("inlet_log_cache_reads_total"),
            r.client_cpu_ms / (r.bytes as f64 / MIB)
        );
    }
    println!(
        "\n(one node, {cores} cores shared by the broker and the librdkafka clients; 1 KiB random payloads, acks=all, no compression; {runs} throughput runs of {seconds} s, median; raw 4 KiB fsync figures merge the probes before and after the load)"
    );
    println!();
    for line in &per_run {
        println!("{line}");
    }
    println!("{lat_line}");
    println!("{tail_line}");
    println!("{catchup_line}");
    println!("{cold_line}");
    println!(
        "whole run: WAL {:.0} syncs, mean {:.2} ms, max {:.1} ms",
        total.get("inlet_wal_syncs_total"),
        total.get("inlet_wal_sync_seconds_total") / total.get("inlet_wal_syncs_total").max(1.0)
            * 1000.0,
        end_metrics.get("inlet_wal_sync_seconds_max") * 1000.0
    );
}
