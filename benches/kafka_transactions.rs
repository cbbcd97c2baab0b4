//! Transactional produce against idempotent produce, measured in the same run (issue 41: "≥ 0.8×
//! with 1 KiB messages and 100 ms transactions"): one `inlet serve` node (the release binary)
//! driven by librdkafka clients on the same machine.
//!
//! ```text
//! cargo bench --bench kafka_transactions
//! ```
//!
//! Environment: `INLET_BENCH_SECONDS` (length of each measured phase, default 20),
//! `INLET_BENCH_RUNS` (rounds of one idempotent and one transactional phase; medians are
//! reported, default 3), `INLET_BENCH_TXN_MS` (how long each transaction produces before it
//! commits, default 100), `INLET_BENCH_PRODUCERS` (producer instances in each phase, default 2),
//! `INLET_BENCH_PARTITIONS` (partitions of the topic, default 4), `INLET_BENCH_DIR` (where the
//! node's data dir goes; default: the target dir's `tmp/`, not the system temp dir, which may be
//! a tmpfs), `INLET_BENCH_BIN` (another `inlet` executable), `INLET_BENCH_NODE_LOG` (the node's
//! `INLET_LOG`, default `info`), `INLET_BENCH_NODE_ARGS` (extra `inlet serve` arguments).
//!
//! One topic takes every phase. Each round runs, after a 3 s warm-up each:
//! 1. idempotent producers: `ThreadedProducer`s with `enable.idempotence`, acks=all, linger.ms 5,
//!    batch.size 1 MiB, 5 requests in flight, each fed by its own thread as fast as librdkafka
//!    takes messages; bytes are counted in the delivery callback (successful deliveries only);
//! 2. transactional producers: the same settings plus a `transactional.id` each; each thread
//!    loops `begin_transaction` → send for `INLET_BENCH_TXN_MS` → `flush` → `commit_transaction`.
//!    A transaction's acknowledged bytes count only once its commit has succeeded (an aborted
//!    transaction counts nothing). The flush is timed apart from the commit: `commit_transaction`
//!    would flush by itself, so its latency would otherwise be mostly the wait for the
//!    transaction's last batches, not the commit.
//!
//! Each phase reports MiB/s acknowledged (committed), the broker's CPU time (utime + stime from
//! `/proc/<pid>/stat`) per MiB, and for transactions commits/s and the flush and
//! `commit_transaction` latency (hdrhistogram, over the measured window). The table gives the
//! medians and the ratio transactional / idempotent with a verdict against 0.8×. Then a
//! `read_committed` consumer reads the whole topic and its record count must equal the records
//! of committed transactions plus the idempotent ones: a correctness guard (a count only), which
//! fails the bench when it does not hold.
//!
//! The clients run in this process and share the machine's cores with the broker; the lines per
//! run report this process's CPU time next to the broker's.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

use std::collections::HashMap;
use std::path::PathBuf;
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
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use inlet_test_support::node::{process_cpu_ms as cpu_ms, Node};

const MIB: f64 = 1024.0 * 1024.0;
/// Message payload size.
const MSG: usize = 1024;
/// Random bytes the payloads are cut from (each message starts at a different offset).
const POOL: usize = 8 << 20;
/// The target of issue 41: transactional / idempotent throughput.
const TARGET: f64 = 0.8;

/// The `inlet` this bench was built with; `INLET_BENCH_BIN` names another
/// (`inlet_test_support::node::Node::start_bench`).
const INLET: &str = env!("CARGO_BIN_EXE_inlet");

fn env_u64(name: &str, default: u64) -> u64 {
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

// ---------------------------------------------------------------------------------------------
// The node's /metrics.

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

    /// `self + other` for every series (deltas of several windows).
    fn plus(&self, other: &Metrics) -> Metrics {
        let mut sum = self.0.clone();
        for (k, v) in &other.0 {
            *sum.entry(k.clone()).or_insert(0.0) += v;
        }
        Metrics(sum)
    }

    /// The API label of the request-latency series named `name` (`Produce` or `ProduceKey`).
    fn api(&self, name: &str) -> Option<String> {
        self.0.keys().find_map(|k| {
            let api = k
                .strip_prefix("inlet_kafka_request_seconds_count{api=\"")?
                .strip_suffix("\"}")?;
            (api == name || api == format!("{name}Key")).then(|| api.to_string())
        })
    }

    /// Count, mean (ms) and the bucket bound holding the `q` quantile of one API's request
    /// latency, over a delta of the metrics.
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
        for api in ["Produce", "AddPartitionsToTxn", "EndTxn"] {
            if let Some((count, mean, p99)) = self.request_latency(api, 0.99) {
                s += &format!(
                    "; {api} {:.1} req/s, mean {mean:.2} ms, p99 {p99}",
                    count / secs
                );
            }
        }
        s
    }
}

/// Lets the node upload what the previous phase appended and the disk write it back, so that
/// a phase does not pay for the one before it.
fn settle(node: &Node) {
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
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
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

/// Successful and failed deliveries.
#[derive(Default)]
struct Acks {
    bytes: AtomicU64,
    records: AtomicU64,
    failed: AtomicU64,
}

/// Counts a producer's deliveries in the delivery callback (librdkafka's polling thread): all
/// of them for an idempotent producer, the open transaction's for a transactional one.
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
                    .fetch_add(m.payload_len() as u64, Ordering::SeqCst);
                self.0.records.fetch_add(1, Ordering::SeqCst);
            }
            Err((e, _)) => {
                if self.0.failed.fetch_add(1, Ordering::SeqCst) == 0 {
                    eprintln!("delivery failed: {e}");
                }
            }
        }
    }
}

/// What a phase's producers have done so far.
struct Totals {
    /// The deliveries of committed transactions (an idempotent phase's are counted in its
    /// producers' contexts).
    committed: Acks,
    /// Transactional: deliveries that failed (in transactions that were then aborted).
    txn_failed: AtomicU64,
    commits: AtomicU64,
    aborts: AtomicU64,
    /// From the end of a transaction's sends until its last delivery report (µs).
    flush_us: Mutex<Histogram<u64>>,
    /// `commit_transaction` once nothing is left to flush (µs).
    commit_us: Mutex<Histogram<u64>>,
}

impl Totals {
    fn new() -> Totals {
        Totals {
            committed: Acks::default(),
            txn_failed: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            aborts: AtomicU64::new(0),
            flush_us: Mutex::new(new_histogram()),
            commit_us: Mutex::new(new_histogram()),
        }
    }
}

fn producer_config(kafka: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", kafka)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("compression.codec", "none")
        .set("linger.ms", "5")
        .set("batch.size", (1 << 20).to_string())
        // A request may carry a full batch for every partition.
        .set("message.max.bytes", (16 << 20).to_string())
        .set("max.in.flight.requests.per.connection", "5")
        .set("queue.buffering.max.kbytes", (64 << 10).to_string())
        .set("queue.buffering.max.messages", "1000000");
    c
}

fn create_topic(kafka: &str, name: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", kafka)
        .create()
        .expect("admin client");
    let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
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

/// The transactions of a transactional phase.
struct Txns {
    /// Each producer's `transactional.id` is this, `-`, its index.
    id_prefix: String,
    /// How long each transaction sends before it commits.
    length: Duration,
}

/// One producer thread's loop.
struct Sender {
    producer: ThreadedProducer<CountingCtx>,
    topic: String,
    pool: Arc<Vec<u8>>,
    stop: Arc<AtomicBool>,
    /// What the producer's delivery callback counts into.
    acks: Arc<Acks>,
    totals: Arc<Totals>,
    /// Which message of the pool comes next.
    k: usize,
}

impl Sender {
    /// Sends one message unless librdkafka's queue is full; an error other than a full queue
    /// is returned.
    fn send_one(&mut self) -> Result<(), KafkaError> {
        let off = (self.k * 1031) % (POOL - MSG);
        let record = BaseRecord::<(), [u8]>::to(&self.topic).payload(&self.pool[off..off + MSG]);
        match self.producer.send(record) {
            Ok(()) => {
                self.k += 1;
                Ok(())
            }
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                std::thread::sleep(Duration::from_millis(1));
                Ok(())
            }
            Err((e, _)) => Err(e),
        }
    }

    /// Idempotent: sends until stopped.
    fn run_idempotent(mut self) {
        while !self.stop.load(Ordering::Relaxed) {
            if let Err(e) = self.send_one() {
                panic!("send: {e}");
            }
        }
    }

    /// Transactional: transactions of `length` until stopped (the open one is committed).
    fn run_transactional(mut self, length: Duration) {
        let timeout = Duration::from_secs(120);
        while !self.stop.load(Ordering::Relaxed) {
            self.producer
                .begin_transaction()
                .unwrap_or_else(|e| panic!("begin_transaction: {e}"));
            let end = Instant::now() + length;
            while Instant::now() < end {
                if let Err(e) = self.send_one() {
                    // The transaction is in error (a delivery failed): its commit will say
                    // to abort.
                    eprintln!("send in a transaction: {e}");
                    break;
                }
            }
            let t0 = Instant::now();
            self.producer
                .flush(timeout)
                .unwrap_or_else(|e| panic!("flush: {e}"));
            let t1 = Instant::now();
            let committed = commit(&self.producer);
            let t2 = Instant::now();
            if !committed {
                // The abort purged what was queued: wait for those delivery reports too.
                self.producer
                    .flush(timeout)
                    .unwrap_or_else(|e| panic!("flush after abort: {e}"));
            }
            // Every delivery report of this transaction has been handled (flush waits for
            // them), and the next transaction has sent nothing yet.
            let bytes = self.acks.bytes.swap(0, Ordering::SeqCst);
            let records = self.acks.records.swap(0, Ordering::SeqCst);
            let failed = self.acks.failed.swap(0, Ordering::SeqCst);
            let t = &self.totals;
            t.txn_failed.fetch_add(failed, Ordering::SeqCst);
            if committed {
                let us = |d: Duration| (d.as_micros() as u64).max(1);
                t.flush_us.lock().unwrap().record(us(t1 - t0)).unwrap();
                t.commit_us.lock().unwrap().record(us(t2 - t1)).unwrap();
                t.committed.bytes.fetch_add(bytes, Ordering::SeqCst);
                t.committed.records.fetch_add(records, Ordering::SeqCst);
                t.commits.fetch_add(1, Ordering::SeqCst);
            } else {
                t.aborts.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

/// Commits the open transaction, retrying a retriable error a few times; aborts it when the
/// error asks for that. Whether it committed.
fn commit(producer: &ThreadedProducer<CountingCtx>) -> bool {
    let timeout = Duration::from_secs(60);
    let mut attempt = 0;
    loop {
        attempt += 1;
        match producer.commit_transaction(timeout) {
            Ok(()) => return true,
            Err(KafkaError::Transaction(e)) if e.txn_requires_abort() => {
                eprintln!("commit_transaction: {e}; aborting");
                producer
                    .abort_transaction(timeout)
                    .unwrap_or_else(|e| panic!("abort_transaction: {e}"));
                return false;
            }
            Err(KafkaError::Transaction(e)) if e.is_retriable() && attempt < 5 => {
                eprintln!("commit_transaction: {e}; retrying");
            }
            Err(e) => panic!("commit_transaction: {e}"),
        }
    }
}

/// A phase's producers, each sending 1 KiB messages from its own thread until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    senders: Vec<JoinHandle<()>>,
    producers: Vec<ThreadedProducer<CountingCtx>>,
    totals: Arc<Totals>,
    transactional: bool,
}

/// What a phase's producers did from start to stop.
struct Ended {
    /// Records acknowledged (idempotent) or in committed transactions.
    records: u64,
    commits: u64,
    aborts: u64,
    /// Deliveries that failed in transactions then aborted.
    txn_failed: u64,
}

impl Load {
    fn start(
        kafka: &str,
        topic: &str,
        producers: usize,
        txns: Option<&Txns>,
        pool: &Arc<Vec<u8>>,
    ) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let totals = Arc::new(Totals::new());
        let mut load = Load {
            stop: stop.clone(),
            senders: Vec::new(),
            producers: Vec::new(),
            totals: totals.clone(),
            transactional: txns.is_some(),
        };
        for p in 0..producers {
            let mut config = producer_config(kafka);
            if let Some(t) = txns {
                config.set("transactional.id", format!("{}-{p}", t.id_prefix));
            }
            // Each producer's callback counts into its own `Acks`: an idempotent producer's are
            // summed by `acked`, a transactional one's are moved to the totals at each commit.
            let acks = Arc::new(Acks::default());
            let producer: ThreadedProducer<CountingCtx> = config
                .create_with_context(CountingCtx(acks.clone()))
                .expect("producer");
            if txns.is_some() {
                producer
                    .init_transactions(Duration::from_secs(30))
                    .unwrap_or_else(|e| panic!("init_transactions: {e}"));
            }
            load.producers.push(producer.clone());
            let sender = Sender {
                producer,
                topic: topic.to_string(),
                pool: pool.clone(),
                stop: stop.clone(),
                acks,
                totals: totals.clone(),
                k: p * 7919,
            };
            let length = txns.map(|t| t.length);
            load.senders.push(std::thread::spawn(move || match length {
                Some(length) => sender.run_transactional(length),
                None => sender.run_idempotent(),
            }));
        }
        load
    }

    /// Bytes acknowledged so far (idempotent) or in committed transactions.
    fn acked(&self) -> u64 {
        if self.transactional {
            self.totals.committed.bytes.load(Ordering::SeqCst)
        } else {
            // An idempotent producer's callback counts into its own `Acks`; sum them.
            self.producers
                .iter()
                .map(|p| p.context().0.bytes.load(Ordering::SeqCst))
                .sum()
        }
    }

    /// Stops the senders (a transactional one commits its open transaction first) and waits
    /// for every delivery report.
    fn stop(self) -> Ended {
        self.stop.store(true, Ordering::Relaxed);
        for s in self.senders {
            s.join().expect("sender");
        }
        for p in &self.producers {
            p.flush(Duration::from_secs(120)).expect("flush");
        }
        let t = &self.totals;
        if self.transactional {
            Ended {
                records: t.committed.records.load(Ordering::SeqCst),
                commits: t.commits.load(Ordering::SeqCst),
                aborts: t.aborts.load(Ordering::SeqCst),
                txn_failed: t.txn_failed.load(Ordering::SeqCst),
            }
        } else {
            let failed: u64 = self
                .producers
                .iter()
                .map(|p| p.context().0.failed.load(Ordering::SeqCst))
                .sum();
            // A failed idempotent delivery may or may not be stored: the guard could not tell.
            assert_eq!(failed, 0, "{failed} idempotent deliveries failed");
            Ended {
                records: self
                    .producers
                    .iter()
                    .map(|p| p.context().0.records.load(Ordering::SeqCst))
                    .sum(),
                commits: 0,
                aborts: 0,
                txn_failed: 0,
            }
        }
    }
}

/// What the measured window of a phase saw.
struct Window {
    secs: f64,
    acked_mib: f64,
    broker_cpu_ms: f64,
    client_cpu_ms: f64,
    commits: u64,
    flush_us: Histogram<u64>,
    commit_us: Histogram<u64>,
    metrics: Metrics,
}

impl Window {
    fn mib_s(&self) -> f64 {
        self.acked_mib / self.secs
    }
    fn broker_ms_per_mib(&self) -> f64 {
        self.broker_cpu_ms / self.acked_mib
    }
    fn client_ms_per_mib(&self) -> f64 {
        self.client_cpu_ms / self.acked_mib
    }
    fn commits_s(&self) -> f64 {
        self.commits as f64 / self.secs
    }
}

/// Measures `seconds` of a running load after `warmup`.
fn window(node: &Node, load: &Load, warmup: Duration, seconds: u64) -> Window {
    std::thread::sleep(warmup);
    let pid = node.pid().to_string();
    let t = &load.totals;
    let m0 = metrics(node);
    t.flush_us.lock().unwrap().reset();
    t.commit_us.lock().unwrap().reset();
    let (b0, c0, a0) = (cpu_ms(&pid), cpu_ms("self"), load.acked());
    let k0 = t.commits.load(Ordering::SeqCst);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(seconds));
    let (b1, c1, a1) = (cpu_ms(&pid), cpu_ms("self"), load.acked());
    let k1 = t.commits.load(Ordering::SeqCst);
    let flush_us = t.flush_us.lock().unwrap().clone();
    let commit_us = t.commit_us.lock().unwrap().clone();
    let secs = t0.elapsed().as_secs_f64();
    let m1 = metrics(node);
    Window {
        secs,
        acked_mib: (a1 - a0) as f64 / MIB,
        broker_cpu_ms: b1 - b0,
        client_cpu_ms: c1 - c0,
        commits: k1 - k0,
        flush_us,
        commit_us,
        metrics: m1.since(&m0),
    }
}

/// Records a `read_committed` consumer reads from the beginning of `topic` to its end (every
/// partition's end of file, then 2 s without a record), and the seconds it took.
fn count_committed(kafka: &str, topic: &str, partitions: i32) -> (u64, f64) {
    let consumer: BaseConsumer<Ctx> = ClientConfig::new()
        .set("bootstrap.servers", kafka)
        .set("group.id", format!("inlet-bench-{topic}-check"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .set("max.partition.fetch.bytes", (4 << 20).to_string())
        .create_with_context(Ctx)
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .expect("a partition to assign");
    }
    consumer.assign(&tpl).expect("assign");
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(1800);
    let mut eof = vec![false; partitions as usize];
    let mut records = 0u64;
    let mut last = Instant::now();
    loop {
        let all_eof = eof.iter().all(|e| *e);
        if all_eof && last.elapsed() > Duration::from_secs(2) {
            break;
        }
        if last.elapsed() > Duration::from_secs(60) {
            eprintln!("the read_committed consumer got nothing for 60 s; partitions at their end: {eof:?}");
            break;
        }
        assert!(Instant::now() < deadline, "the read took over 1800 s");
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
    (records, t0.elapsed().as_secs_f64())
}

// ---------------------------------------------------------------------------------------------

/// One measured phase, for the table.
struct Phase {
    window: Window,
    line: String,
}

/// The median over `phases` of one figure of their windows.
fn medians(phases: &[Phase], figure: fn(&Window) -> f64) -> f64 {
    median(phases.iter().map(|p| figure(&p.window)).collect())
}

fn run_phase(
    node: &Node,
    topic: &str,
    producers: usize,
    txns: Option<&Txns>,
    pool: &Arc<Vec<u8>>,
    seconds: u64,
) -> (Phase, Ended) {
    settle(node);
    let load = Load::start(&node.kafka, topic, producers, txns, pool);
    let w = window(node, &load, Duration::from_secs(3), seconds);
    let ended = load.stop();
    let common = format!(
        "broker CPU {:.1} ms/MiB ({:.0}% of a core), clients {:.1} ms/MiB ({:.0}%); {}",
        w.broker_ms_per_mib(),
        w.broker_cpu_ms / w.secs / 10.0,
        w.client_ms_per_mib(),
        w.client_cpu_ms / w.secs / 10.0,
        w.metrics.describe(w.secs)
    );
    let line = if txns.is_some() {
        let per_txn_mib = if w.commits > 0 {
            w.acked_mib / w.commits as f64
        } else {
            0.0
        };
        let txn_ms = if w.commits > 0 {
            w.secs * producers as f64 / w.commits as f64 * 1000.0
        } else {
            0.0
        };
        format!(
            "transactional: {:.0} MiB/s committed; {:.1} commits/s of {per_txn_mib:.1} MiB, one every {txn_ms:.0} ms per producer; flush p50 {:.2} p99 {:.2} ms, commit_transaction p50 {:.2} p99 {:.2} ms; {} aborted, {} deliveries failed (whole phase); {common}",
            w.mib_s(),
            w.commits_s(),
            ms(w.flush_us.value_at_quantile(0.5)),
            ms(w.flush_us.value_at_quantile(0.99)),
            ms(w.commit_us.value_at_quantile(0.5)),
            ms(w.commit_us.value_at_quantile(0.99)),
            ended.aborts,
            ended.txn_failed,
        )
    } else {
        format!("idempotent: {:.0} MiB/s acked; {common}", w.mib_s())
    };
    (Phase { window: w, line }, ended)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks benches to list their tests
    }
    let seconds = env_u64("INLET_BENCH_SECONDS", 20).max(1);
    let runs = env_u64("INLET_BENCH_RUNS", 3).max(1);
    let producers = env_u64("INLET_BENCH_PRODUCERS", 2).max(1) as usize;
    let partitions = env_u64("INLET_BENCH_PARTITIONS", 4).max(1) as i32;
    let txn_ms = env_u64("INLET_BENCH_TXN_MS", 100).max(1);
    let base = std::env::var("INLET_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_TARGET_TMPDIR")))
        .join(format!("inlet-kafka-txn-bench-{}", std::process::id()));
    std::fs::create_dir_all(&base).expect("the bench dir");
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    eprintln!(
        "kafka_transactions: {}, {cores} cores shared by the broker and the clients; {runs} rounds of {seconds} s idempotent + {seconds} s transactional ({txn_ms} ms transactions), {producers} producers, {partitions} partitions",
        base.display()
    );
    let pool = random_pool();
    let node = Node::start_bench(INLET.as_ref(), &base.join("node"));
    let topic = "transactions";
    create_topic(&node.kafka, topic, partitions);
    let start_metrics = metrics(&node);

    let mut idem: Vec<Phase> = Vec::new();
    let mut txn: Vec<Phase> = Vec::new();
    let mut lines = Vec::new();
    let (mut idem_records, mut txn_records) = (0u64, 0u64);
    let (mut commits, mut aborts, mut txn_failed) = (0u64, 0u64, 0u64);
    for run in 0..runs {
        let (phase, ended) = run_phase(&node, topic, producers, None, &pool, seconds);
        idem_records += ended.records;
        let idem_mib_s = phase.window.mib_s();
        let line = format!("run {run} {}", phase.line);
        eprintln!("{line}");
        lines.push(line);
        idem.push(phase);

        let txns = Txns {
            id_prefix: format!("inlet-bench-txn-{run}"),
            length: Duration::from_millis(txn_ms),
        };
        let (phase, ended) = run_phase(&node, topic, producers, Some(&txns), &pool, seconds);
        txn_records += ended.records;
        commits += ended.commits;
        aborts += ended.aborts;
        txn_failed += ended.txn_failed;
        let ratio = phase.window.mib_s() / idem_mib_s;
        let line = format!(
            "run {run} {}; transactional / idempotent {ratio:.2}",
            phase.line
        );
        eprintln!("{line}");
        lines.push(line);
        txn.push(phase);
    }

    // The guard: what read_committed sees is exactly what was acknowledged and committed.
    let expected = idem_records + txn_records;
    eprintln!("reading the topic back with read_committed ({expected} records expected)");
    let (read, read_secs) = count_committed(&node.kafka, topic, partitions);
    let whole = metrics(&node).since(&start_metrics);
    node.stop_within(60);
    let _ = std::fs::remove_dir_all(&base);

    let (i_mib, t_mib) = (medians(&idem, Window::mib_s), medians(&txn, Window::mib_s));
    let per_round = median(
        idem.iter()
            .zip(&txn)
            .map(|(i, t)| t.window.mib_s() / i.window.mib_s())
            .collect(),
    );
    let (i_cpu, t_cpu) = (
        medians(&idem, Window::broker_ms_per_mib),
        medians(&txn, Window::broker_ms_per_mib),
    );
    let (i_client, t_client) = (
        medians(&idem, Window::client_ms_per_mib),
        medians(&txn, Window::client_ms_per_mib),
    );
    let commits_s = medians(&txn, Window::commits_s);
    let per_txn_mib = median(
        txn.iter()
            .filter(|p| p.window.commits > 0)
            .map(|p| p.window.acked_mib / p.window.commits as f64)
            .collect(),
    );
    let (mut flush_us, mut commit_us) = (new_histogram(), new_histogram());
    let mut txn_metrics = Metrics::default();
    for p in &txn {
        flush_us.add(&p.window.flush_us).expect("histograms merge");
        commit_us
            .add(&p.window.commit_us)
            .expect("histograms merge");
        txn_metrics = txn_metrics.plus(&p.window.metrics);
    }
    let end_txn = txn_metrics
        .request_latency("EndTxn", 0.99)
        .map(|(count, mean, p99)| format!("{count:.0} EndTxn, mean {mean:.2} ms, p99 {p99}"))
        .unwrap_or_else(|| "no EndTxn in the windows".into());

    println!();
    println!("| measure | idempotent | transactional | transactional / idempotent |");
    println!("|---|---|---|---|");
    println!(
        "| produce, acks=all, {producers} producers × (linger 5 ms, batch 1 MiB), {partitions} partitions, median of {runs} | {i_mib:.0} MiB/s acked | {t_mib:.0} MiB/s committed ({txn_ms} ms transactions) | **{per_round:.2}** (median of the per-round ratios; {:.2} by medians) |",
        t_mib / i_mib
    );
    println!(
        "| broker CPU per MiB | {i_cpu:.1} ms/MiB | {t_cpu:.1} ms/MiB | {:.2} |",
        t_cpu / i_cpu
    );
    println!(
        "| clients (this process) CPU per MiB | {i_client:.1} ms/MiB | {t_client:.1} ms/MiB | {:.2} |",
        t_client / i_client
    );
    println!(
        "| commits/s, all producers (mean MiB per transaction) | – | {commits_s:.1} ({per_txn_mib:.1} MiB) | |"
    );
    println!(
        "| flush before the commit (last sends → last delivery report), p50 / p99 | – | {:.2} / {:.2} ms | |",
        ms(flush_us.value_at_quantile(0.5)),
        ms(flush_us.value_at_quantile(0.99))
    );
    println!(
        "| commit_transaction after the flush, p50 / p99 / max over {} commits | – | {:.2} / {:.2} / {:.2} ms | broker: {end_txn} |",
        commit_us.len(),
        ms(commit_us.value_at_quantile(0.5)),
        ms(commit_us.value_at_quantile(0.99)),
        ms(commit_us.max())
    );
    println!(
        "\nverdict: transactional / idempotent throughput {per_round:.2} (median of {runs} per-round ratios; {:.2} by medians), target ≥ {TARGET}×: {}",
        t_mib / i_mib,
        if per_round >= TARGET { "met" } else { "not met" }
    );
    println!(
        "(one node, {cores} cores shared by the broker and the librdkafka clients; 1 KiB random payloads, acks=all, idempotence on, no compression; {runs} rounds of {seconds} s per phase after a 3 s warm-up)"
    );
    println!();
    for line in &lines {
        println!("{line}");
    }
    let ok = read == expected;
    println!(
        "correctness: a read_committed consumer read {read} records in {read_secs:.1} s; expected {expected} = {idem_records} idempotent + {txn_records} in {commits} committed transactions ({aborts} aborted, {txn_failed} failed deliveries in them); broker: {:.0} transactions committed, {:.0} aborted: {}",
        whole.get("inlet_kafka_transactions_committed_total"),
        whole.get("inlet_kafka_transactions_aborted_total"),
        if ok { "ok" } else { "MISMATCH" }
    );
    assert!(
        ok,
        "read_committed read {read} records, expected {expected}"
    );
}
