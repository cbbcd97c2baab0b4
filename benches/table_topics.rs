//! End-to-end table topic benchmark: one `inlet serve` node (the release binary) fed framed
//! Avro records by librdkafka producers on the same machine, with the table read back through
//! the node's Iceberg REST catalog (docs/architecture.md, "Table topics"; the performance section of the table
//! coordinator issue).
//!
//! ```text
//! cargo bench --bench table_topics
//! ```
//!
//! The records are the table-worker bench's `flat` shape: 20 fields (longs, ints, doubles,
//! 20–40 character strings, a boolean, a timestamp-millis, a nullable string), ~400 bytes of
//! Avro, framed for the registry (magic byte 0, the 4-byte id the node's registry gave the
//! schema, then the Avro binary). A pool of distinct records is encoded once and cycled.
//! Producers: acks=all, linger.ms 5, batch.size 1 MiB, no compression, messages sent on a
//! fixed schedule (open loop) round-robin over the topics' partitions.
//!
//! "Visible in the table" means the table's current snapshot, as `loadTable` on the node's
//! REST catalog answers it, has `inlet.offsets` past the record's offset.
//!
//! Phases (each on a fresh node and data dir):
//! 1. **ingest**: for each rate of `INLET_BENCH_RATES` (MiB/s of record bytes), a fresh table
//!    topic (`INLET_BENCH_PARTITIONS` partitions, commit interval 1 s) is fed at that rate for
//!    `INLET_BENCH_SECONDS`, while `loadTable` is polled every 250 ms. The table keeps up when
//!    the records produced but not yet in the table at the end of the window are at most
//!    `KEEP_UP_SECONDS` of input, and, after the producers stop, the table holds every acked
//!    record within `CATCH_UP_LIMIT`. Repeated `INLET_BENCH_RUNS` times per rate; the
//!    steps stop at the first rate at which most runs fall behind.
//! 2. **freshness**: one table topic fed at `INLET_BENCH_FRESH_MIB_S` for the window;
//!    `loadTable` is polled every 20 ms; every record's delay from its delivery report (ack)
//!    to the first poll that saw it in the table goes into a histogram. `INLET_BENCH_RUNS`
//!    topics, one after the other; medians of the per-run percentiles.
//! 3. **memory**: a fresh node with 10 table topics, then a fresh node with 100, each fed the
//!    same total `INLET_BENCH_MEMORY_MIB_S` spread evenly for `INLET_BENCH_MEMORY_SECONDS`
//!    (commit interval `INLET_BENCH_MEMORY_INTERVAL_MS`); the node's `VmRSS` is sampled every
//!    500 ms and `VmHWM` read at the end. Steady RSS is the median sample of the window's second
//!    half. The log cache (which holds recent records whatever the number of topics) is
//!    reported beside it. `INLET_BENCH_RUNS` pairs, alternating which goes first.
//!
//! 4. **files** (not in the default phases): a fresh node with `INLET_BENCH_FILES_TOPICS` (4)
//!    table topics of `INLET_BENCH_FILES_PARTITIONS` (1) partitions at a 1 s commit interval,
//!    fed `INLET_BENCH_FILES_MIB_S` (10) MiB/s in total for `INLET_BENCH_FILES_SECONDS`
//!    (1200), then left alone for `INLET_BENCH_FILES_SETTLE_SECONDS` (150: two compaction
//!    intervals). Then the node stops and the bench opens its embedded catalog: per table,
//!    the data files Inlet's rounds wrote (per partition-hour), the live files' median and p10
//!    size, the snapshots and the size of the current `metadata.json`; and the node's CPU
//!    during the load and during the settling (when only compaction works).
//!
//! Other knobs: `INLET_BENCH_DIR` (default: the target dir's `tmp/`), `INLET_BENCH_PHASES`
//! (comma list of `ingest`, `freshness`, `memory`; default all), `INLET_BENCH_NODE_ARGS`
//! (extra `inlet serve` arguments), `INLET_BENCH_NODE_LOG` (the node's `INLET_LOG`, default
//! `info`; its warnings and errors are echoed), `INLET_BENCH_MEMORY_TOPICS` (default `10,100`).
//!
//! The producers, the pollers and the node share the machine's cores; the report gives the
//! node's and this process's CPU per window.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use apache_avro::types::Value;
use apache_avro::Schema;
use hdrhistogram::Histogram;
use inlet_test_support::node::process_cpu_ms as cpu_ms;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;

const MIB: f64 = 1024.0 * 1024.0;
/// Distinct records encoded up front and cycled.
const POOL_RECORDS: usize = 20_000;
/// Records produced but not in the table at the end of a window, in seconds of input, below
/// which the table keeps up: a 1 s commit interval plus the round's conversion and commit.
const KEEP_UP_SECONDS: f64 = 3.0;
/// After the producers stop, the table must hold every acked record within this.
const CATCH_UP_LIMIT: Duration = Duration::from_secs(10);

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

fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_string())
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

/// Writes back every dirty page so that a phase does not pay for the one before it.
fn sync_all() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
}

/// `VmRSS` and `VmHWM` of a process, MiB.
fn rss_mib(pid: i32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    };
    (kb("VmRSS:"), kb("VmHWM:"))
}

// ---------------------------------------------------------------------------------------------
// The node.

use inlet_test_support::node::Node;

/// The `inlet` this bench was built with; `INLET_BENCH_BIN` names another
/// (`inlet_test_support::node::Node::start_bench`).
const INLET: &str = env!("CARGO_BIN_EXE_inlet");

/// What this bench reads of a node.
trait BenchNode {
    fn metrics(&self) -> HashMap<String, f64>;
    fn table_sum(&self, family: &str) -> f64;
    fn table_offsets(&self, table: &str) -> Option<BTreeMap<i32, u64>>;
    fn settle(&self);
}

impl BenchNode for Node {
    /// The node's `/metrics`, as `name{labels}` → value.
    fn metrics(&self) -> HashMap<String, f64> {
        self.metric_values()
    }

    /// The sum over tables of a per-table metric family.
    fn table_sum(&self, family: &str) -> f64 {
        let prefix = format!("{family}{{");
        self.metrics()
            .iter()
            .filter(|(k, _)| k.starts_with(&prefix))
            .map(|(_, v)| v)
            .sum()
    }

    /// `inlet.offsets` of the current snapshot of `default.<table>`, as the REST catalog's
    /// loadTable answers it; None before the table exists.
    fn table_offsets(&self, table: &str) -> Option<BTreeMap<i32, u64>> {
        let (status, body) = http(
            &self.http,
            "GET",
            &format!("/iceberg/v1/namespaces/default/tables/{table}"),
            None,
        );
        if status == 404 {
            return None;
        }
        assert_eq!(status, 200, "loadTable {table}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("loadTable answers JSON");
        let meta = &v["metadata"];
        let current = meta["current-snapshot-id"].as_i64()?;
        let snapshot = meta["snapshots"]
            .as_array()?
            .iter()
            .find(|s| s["snapshot-id"].as_i64() == Some(current))?;
        let offsets: BTreeMap<String, u64> =
            serde_json::from_str(snapshot["summary"]["inlet.offsets"].as_str()?).ok()?;
        Some(
            offsets
                .into_iter()
                .filter_map(|(p, o)| Some((p.parse().ok()?, o)))
                .collect(),
        )
    }

    /// Lets the node upload what the previous phase appended and the disk write it back.
    fn settle(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self
            .metrics()
            .get("inlet_dirty_bytes")
            .copied()
            .unwrap_or(0.0)
            > MIB
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(200));
        }
        sync_all();
    }
}

/// One HTTP/1.1 request on a fresh connection; (status, body).
fn http(addr: &str, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).expect("connect HTTP");
    let body = body.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut out = Vec::new();
    s.read_to_end(&mut out).expect("read");
    let out = String::from_utf8_lossy(&out);
    let (head, rest) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        let mut body = String::new();
        let mut rest = rest;
        while let Some((size, tail)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 || tail.len() < n {
                break;
            }
            body.push_str(&tail[..n]);
            rest = tail[n..].trim_start_matches("\r\n");
        }
        body
    } else {
        rest.to_string()
    };
    (status, body)
}

// ---------------------------------------------------------------------------------------------
// Records.

const FLAT: &str = r#"{"type":"record","name":"Flat","namespace":"bench","fields":[
    {"name":"id","type":"long"},
    {"name":"account","type":"long"},
    {"name":"sequence","type":"long"},
    {"name":"quantity","type":"int"},
    {"name":"region","type":"int"},
    {"name":"price","type":"double"},
    {"name":"discount","type":"double"},
    {"name":"customer","type":"string"},
    {"name":"email","type":"string"},
    {"name":"street","type":"string"},
    {"name":"city","type":"string"},
    {"name":"country","type":"string"},
    {"name":"product","type":"string"},
    {"name":"category","type":"string"},
    {"name":"currency","type":"string"},
    {"name":"channel","type":"string"},
    {"name":"status","type":"string"},
    {"name":"paid","type":"boolean"},
    {"name":"created","type":{"type":"long","logicalType":"timestamp-millis"}},
    {"name":"note","type":["null","string"]}]}"#;

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn text(&mut self, min: usize, max: usize) -> String {
        const ALPHABET: &[u8] =
            b"abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ-.@0123456789";
        let len = min + (self.next() as usize) % (max - min + 1);
        (0..len)
            .map(|_| ALPHABET[(self.next() as usize) % ALPHABET.len()] as char)
            .collect()
    }
}

fn flat_value(rng: &mut Rng, i: usize) -> Value {
    let mut fields = vec![
        ("id".to_string(), Value::Long(i as i64)),
        (
            "account".to_string(),
            Value::Long((rng.next() >> 20) as i64),
        ),
        (
            "sequence".to_string(),
            Value::Long((rng.next() >> 20) as i64),
        ),
        (
            "quantity".to_string(),
            Value::Int((rng.next() % 100_000) as i32),
        ),
        (
            "region".to_string(),
            Value::Int((rng.next() % 100_000) as i32),
        ),
        (
            "price".to_string(),
            Value::Double((rng.next() % 1_000_000) as f64 / 100.0),
        ),
        (
            "discount".to_string(),
            Value::Double((rng.next() % 1_000_000) as f64 / 100.0),
        ),
    ];
    for name in [
        "customer", "email", "street", "city", "country", "product", "category", "currency",
        "channel", "status",
    ] {
        fields.push((name.to_string(), Value::String(rng.text(20, 40))));
    }
    fields.push((
        "paid".to_string(),
        Value::Boolean(rng.next().is_multiple_of(2)),
    ));
    fields.push((
        "created".to_string(),
        Value::TimestampMillis(1_700_000_000_000 + (rng.next() % 100_000_000_000) as i64),
    ));
    let note = if rng.next().is_multiple_of(4) {
        Value::Union(0, Box::new(Value::Null))
    } else {
        Value::Union(1, Box::new(Value::String(rng.text(15, 25))))
    };
    fields.push(("note".to_string(), note));
    Value::Record(fields)
}

/// Registers the record schema under `subject` in the node's registry; returns its id.
fn register_schema(registry: &str, subject: &str) -> u32 {
    let body = serde_json::json!({ "schema": FLAT }).to_string();
    let (status, answer) = http(
        registry,
        "POST",
        &format!("/subjects/{subject}/versions"),
        Some(&body),
    );
    assert_eq!(status, 200, "register {subject}: {answer}");
    let v: serde_json::Value = serde_json::from_str(&answer).expect("JSON");
    v["id"].as_u64().expect("an id") as u32
}

/// `POOL_RECORDS` framed records: magic byte 0, the schema id, the Avro binary.
fn framed_records(schema_id: u32) -> Arc<Vec<Vec<u8>>> {
    let schema = Schema::parse_str(FLAT).expect("the schema parses");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    Arc::new(
        (0..POOL_RECORDS)
            .map(|i| {
                let mut m = vec![0u8];
                m.extend_from_slice(&schema_id.to_be_bytes());
                m.extend(
                    apache_avro::to_avro_datum(&schema, flat_value(&mut rng, i))
                        .expect("the record encodes"),
                );
                m
            })
            .collect(),
    )
}

fn mean_len(records: &[Vec<u8>]) -> f64 {
    records.iter().map(Vec::len).sum::<usize>() as f64 / records.len() as f64
}

// ---------------------------------------------------------------------------------------------
// Clients.

/// Creates table topics with the commit interval and `extra` topic configs.
fn create_table_topics(
    kafka: &str,
    names: &[String],
    partitions: i32,
    interval_ms: u64,
    extra: &[(&str, String)],
) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", kafka)
        .create()
        .expect("admin client");
    let interval = interval_ms.to_string();
    for chunk in names.chunks(20) {
        let topics: Vec<NewTopic> = chunk
            .iter()
            .map(|n| {
                let mut t = NewTopic::new(n, partitions, TopicReplication::Fixed(1))
                    .set("table.topic.enable", "true")
                    .set("table.topic.commit.interval.ms", &interval);
                for (k, v) in extra {
                    t = t.set(k, v);
                }
                t
            })
            .collect();
        let results = futures::executor::block_on(admin.create_topics(
            &topics,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        ))
        .expect("create_topics");
        for r in results {
            r.unwrap_or_else(|(t, e)| panic!("create topic {t}: {e}"));
        }
    }
}

/// What the delivery reports said.
#[derive(Default)]
struct Acks {
    bytes: AtomicU64,
    records: AtomicU64,
    failed: AtomicU64,
    /// (ns since `base` of the report, partition, offset) of every acked record, when kept.
    log: Option<Mutex<Vec<(u64, i32, i64)>>>,
}

struct AckCtx {
    base: Instant,
    acks: Arc<Acks>,
}

impl ClientContext for AckCtx {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        if (level as i32) <= RDKafkaLogLevel::Warning as i32 {
            eprintln!("[rdkafka {level:?}] {fac}: {message}");
        }
    }
    fn error(&self, error: KafkaError, reason: &str) {
        eprintln!("[rdkafka error] {error}: {reason}");
    }
}

impl ProducerContext for AckCtx {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(m) => {
                self.acks
                    .bytes
                    .fetch_add(m.payload_len() as u64, Ordering::Relaxed);
                self.acks.records.fetch_add(1, Ordering::Relaxed);
                if let Some(log) = &self.acks.log {
                    let at = self.base.elapsed().as_nanos() as u64;
                    log.lock().unwrap().push((at, m.partition(), m.offset()));
                }
            }
            Err((e, _)) => {
                if self.acks.failed.fetch_add(1, Ordering::Relaxed) == 0 {
                    eprintln!("delivery failed: {e}");
                }
            }
        }
    }
}

/// One producer sending records on a fixed schedule at `mib_s` (record bytes), round-robin
/// over `targets` (topic, partition), from its own thread.
struct Paced {
    stop: Arc<AtomicBool>,
    sender: JoinHandle<u64>,
    producer: ThreadedProducer<AckCtx>,
    acks: Arc<Acks>,
}

impl Paced {
    fn start(
        kafka: &str,
        targets: Vec<(String, i32)>,
        mib_s: f64,
        records: &Arc<Vec<Vec<u8>>>,
        base: Instant,
        keep_log: bool,
    ) -> Paced {
        let acks = Arc::new(Acks {
            log: keep_log.then(|| Mutex::new(Vec::with_capacity(1 << 20))),
            ..Acks::default()
        });
        let producer: ThreadedProducer<AckCtx> = ClientConfig::new()
            .set("bootstrap.servers", kafka)
            .set("acks", "all")
            .set("compression.codec", "none")
            .set("linger.ms", "5")
            .set("batch.size", (1 << 20).to_string())
            .set("message.max.bytes", (16 << 20).to_string())
            .set("max.in.flight.requests.per.connection", "5")
            .set("queue.buffering.max.kbytes", (256 << 10).to_string())
            .set("queue.buffering.max.messages", "2000000")
            .create_with_context(AckCtx {
                base,
                acks: acks.clone(),
            })
            .expect("producer");
        let stop = Arc::new(AtomicBool::new(false));
        let per_record = Duration::from_secs_f64(mean_len(records) / (mib_s * MIB));
        let sender = {
            let (stop, producer, records) = (stop.clone(), producer.clone(), records.clone());
            std::thread::spawn(move || {
                let start = Instant::now();
                let mut k = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let due = (start.elapsed().as_secs_f64() / per_record.as_secs_f64()) as u64;
                    while k < due && !stop.load(Ordering::Relaxed) {
                        let (topic, partition) = &targets[k as usize % targets.len()];
                        let payload = &records[k as usize % records.len()];
                        let mut record = BaseRecord::<(), [u8]>::to(topic)
                            .partition(*partition)
                            .payload(payload);
                        loop {
                            match producer.send(record) {
                                Ok(()) => break,
                                Err((
                                    KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull),
                                    r,
                                )) => {
                                    record = r;
                                    std::thread::sleep(Duration::from_millis(1));
                                }
                                Err((e, _)) => panic!("send: {e}"),
                            }
                        }
                        k += 1;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                k
            })
        };
        Paced {
            stop,
            sender,
            producer,
            acks,
        }
    }

    /// Stops sending, waits for every delivery report; returns the records sent.
    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let sent = self.sender.join().expect("sender");
        self.producer
            .flush(Duration::from_secs(120))
            .expect("flush");
        let failed = self.acks.failed.load(Ordering::Relaxed);
        assert_eq!(failed, 0, "{failed} deliveries failed");
        sent
    }
}

fn committed_total(offsets: &Option<BTreeMap<i32, u64>>) -> u64 {
    offsets.as_ref().map_or(0, |o| o.values().sum())
}

// ---------------------------------------------------------------------------------------------
// 1. Ingest at paced rates.

struct IngestRun {
    offered: f64,
    acked_mib_s: f64,
    table_mib_s: f64,
    lag_end_s: f64,
    max_lag_s: f64,
    catch_up_s: Option<f64>,
    broker_cpu: f64,
    client_cpu: f64,
    rss: (f64, f64),
}

impl IngestRun {
    fn keeps_up(&self) -> bool {
        self.lag_end_s <= KEEP_UP_SECONDS && self.catch_up_s.is_some()
    }
}

#[allow(clippy::too_many_arguments)]
fn ingest_run(
    node: &Node,
    name: &str,
    partitions: i32,
    mib_s: f64,
    seconds: u64,
    records: &Arc<Vec<Vec<u8>>>,
    record_bytes: f64,
) -> IngestRun {
    create_table_topics(&node.kafka, &[name.to_string()], partitions, 1000, &[]);
    let targets = (0..partitions).map(|p| (name.to_string(), p)).collect();
    let pid = node.pid().to_string();
    let load = Paced::start(&node.kafka, targets, mib_s, records, Instant::now(), false);
    // Warm-up: the first commit creates the table.
    std::thread::sleep(Duration::from_secs(3));
    let rate_records = mib_s * MIB / record_bytes;
    let (b0, c0) = (cpu_ms(&pid), cpu_ms("self"));
    let a0 = load.acks.records.load(Ordering::Relaxed);
    let k0 = committed_total(&node.table_offsets(name));
    let t0 = Instant::now();
    let mut max_lag = 0f64;
    let mut last = (0u64, k0);
    while t0.elapsed() < Duration::from_secs(seconds) {
        std::thread::sleep(Duration::from_millis(250));
        let acked = load.acks.records.load(Ordering::Relaxed);
        let committed = committed_total(&node.table_offsets(name));
        max_lag = max_lag.max(acked.saturating_sub(committed) as f64);
        last = (acked, committed);
    }
    let secs = t0.elapsed().as_secs_f64();
    let (b1, c1) = (cpu_ms(&pid), cpu_ms("self"));
    let rss = rss_mib(node.pid());
    let (acked_end, committed_end) = last;
    let lag_end = acked_end.saturating_sub(committed_end) as f64;
    load.stop();
    let total = load_acked(node, name);
    let t_stop = Instant::now();
    let mut catch_up = None;
    while t_stop.elapsed() < CATCH_UP_LIMIT * 6 {
        if committed_total(&node.table_offsets(name)) >= total {
            catch_up = Some(t_stop.elapsed().as_secs_f64());
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let catch_up = catch_up.filter(|s| *s <= CATCH_UP_LIMIT.as_secs_f64());
    let acked_mib = (acked_end - a0) as f64 * record_bytes / MIB;
    IngestRun {
        offered: mib_s,
        acked_mib_s: acked_mib / secs,
        table_mib_s: (committed_end - k0) as f64 * record_bytes / MIB / secs,
        lag_end_s: lag_end / rate_records,
        max_lag_s: max_lag / rate_records,
        catch_up_s: catch_up,
        broker_cpu: (b1 - b0) / secs / 10.0,
        client_cpu: (c1 - c0) / secs / 10.0,
        rss,
    }
}

/// The records acked for `topic`: its partitions' end offsets (the topic is fresh).
fn load_acked(node: &Node, topic: &str) -> u64 {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &node.kafka)
        .set("group.id", "inlet-bench-ends")
        .create()
        .expect("consumer");
    let md = c
        .fetch_metadata(Some(topic), Duration::from_secs(30))
        .expect("metadata");
    md.topics()[0]
        .partitions()
        .iter()
        .map(|p| {
            c.fetch_watermarks(topic, p.id(), Duration::from_secs(30))
                .expect("watermarks")
                .1 as u64
        })
        .sum()
}

fn ingest_phase(base: &Path, seconds: u64, runs: u64, partitions: i32) -> Vec<String> {
    let rates: Vec<f64> = env_list("INLET_BENCH_RATES", "20,40,60,80")
        .iter()
        .filter_map(|r| r.parse().ok())
        .collect();
    let node = Node::start_bench(INLET.as_ref(), &base.join("ingest"));
    let id = register_schema(&node.registry, "bench-flat-value");
    let records = framed_records(id);
    let record_bytes = mean_len(&records);
    eprintln!("records: {record_bytes:.0} bytes each on average (framing included), 20 fields");
    let mut out = Vec::new();
    let mut lines = Vec::new();
    for rate in rates {
        let mut rs = Vec::new();
        for run in 0..runs {
            node.settle();
            let name = format!("ingest_{}_{run}", rate as u64);
            let r = ingest_run(
                &node,
                &name,
                partitions,
                rate,
                seconds,
                &records,
                record_bytes,
            );
            let line = format!(
                "offered {:.0} MiB/s run {run}: acked {:.1} MiB/s, into the table {:.1} MiB/s; behind at the end {:.2} s of input (max {:.2} s); caught up {} after the producers stopped; node CPU {:.0}% of a core, bench process {:.0}%; node RSS {:.0} MiB (peak {:.0}) => {}",
                r.offered,
                r.acked_mib_s,
                r.table_mib_s,
                r.lag_end_s,
                r.max_lag_s,
                r.catch_up_s
                    .map_or("NOT within 10 s".to_string(), |s| format!("in {s:.2} s")),
                r.broker_cpu,
                r.client_cpu,
                r.rss.0,
                r.rss.1,
                if r.keeps_up() { "keeps up" } else { "falls behind" }
            );
            eprintln!("{line}");
            lines.push(line);
            rs.push(r);
        }
        let kept = rs.iter().filter(|r| r.keeps_up()).count();
        let row = format!(
            "| {rate:.0} MiB/s | {:.1} MiB/s | {:.1} MiB/s | {:.2} s | {:.0}% / {:.0}% | {kept} of {} runs |",
            median(rs.iter().map(|r| r.acked_mib_s).collect()),
            median(rs.iter().map(|r| r.table_mib_s).collect()),
            median(rs.iter().map(|r| r.lag_end_s).collect()),
            median(rs.iter().map(|r| r.broker_cpu).collect()),
            median(rs.iter().map(|r| r.client_cpu).collect()),
            rs.len()
        );
        out.push(row);
        if kept * 2 < rs.len() {
            break;
        }
    }
    node.stop_within(60);
    let mut report = vec![
        format!("ingest ({runs} runs of {seconds} s per rate, {partitions} partitions, commit interval 1 s; medians):"),
        "| offered | acked | into the table | behind at the end | node / bench CPU (of one core) | kept up |".into(),
        "|---|---|---|---|---|---|".into(),
    ];
    report.extend(out);
    report.push(String::new());
    report.extend(lines);
    report
}

// ---------------------------------------------------------------------------------------------
// 2. Freshness.

fn freshness_phase(base: &Path, seconds: u64, runs: u64, partitions: i32) -> Vec<String> {
    let mib_s = env_f64("INLET_BENCH_FRESH_MIB_S", 10.0);
    let poll = Duration::from_millis(20);
    let node = Node::start_bench(INLET.as_ref(), &base.join("freshness"));
    let id = register_schema(&node.registry, "bench-flat-value");
    let records = framed_records(id);
    let pid = node.pid().to_string();
    let mut p50s = Vec::new();
    let mut p99s = Vec::new();
    let mut lines = Vec::new();
    for run in 0..runs {
        node.settle();
        let name = format!("fresh_{run}");
        create_table_topics(
            &node.kafka,
            std::slice::from_ref(&name),
            partitions,
            1000,
            &[],
        );
        let targets = (0..partitions).map(|p| (name.clone(), p)).collect();
        let base_t = Instant::now();
        let load = Paced::start(&node.kafka, targets, mib_s, &records, base_t, true);
        // (ns since base_t, committed offsets) of every poll.
        let mut polls: Vec<(u64, BTreeMap<i32, u64>)> = Vec::new();
        let (b0, c0) = (cpu_ms(&pid), cpu_ms("self"));
        let t0 = Instant::now();
        let mut poll_ms = Histogram::<u64>::new(3).unwrap();
        loop {
            let before = Instant::now();
            let offsets = node.table_offsets(&name);
            poll_ms
                .record(before.elapsed().as_micros().max(1) as u64)
                .unwrap();
            let at = base_t.elapsed().as_nanos() as u64;
            if let Some(o) = offsets {
                polls.push((at, o));
            }
            if t0.elapsed() >= Duration::from_secs(seconds) {
                break;
            }
            std::thread::sleep(poll.saturating_sub(before.elapsed()));
        }
        let secs = t0.elapsed().as_secs_f64();
        let (b1, c1) = (cpu_ms(&pid), cpu_ms("self"));
        let acks = load.acks.clone();
        load.stop();
        // Keep polling until the table holds every acked record.
        let ends: BTreeMap<i32, i64> = {
            let log = acks.log.as_ref().unwrap().lock().unwrap();
            let mut e = BTreeMap::new();
            for (_, p, o) in log.iter() {
                let x = e.entry(*p).or_insert(-1);
                *x = (*x).max(*o);
            }
            e
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let before = Instant::now();
            if let Some(o) = node.table_offsets(&name) {
                let done = ends
                    .iter()
                    .all(|(p, e)| o.get(p).is_some_and(|c| *c as i64 > *e));
                polls.push((base_t.elapsed().as_nanos() as u64, o));
                if done {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the table did not catch up within 60 s"
            );
            std::thread::sleep(poll.saturating_sub(before.elapsed()));
        }
        // Each record: the first poll whose offsets cover it.
        let mut hist = Histogram::<u64>::new(3).unwrap();
        let log = acks.log.as_ref().unwrap().lock().unwrap();
        // Per partition, the polls' committed offsets are non-decreasing: binary search.
        let by_partition: BTreeMap<i32, Vec<(u64, u64)>> = (0..partitions)
            .map(|p| {
                (
                    p,
                    polls
                        .iter()
                        .map(|(t, o)| (*t, o.get(&p).copied().unwrap_or(0)))
                        .collect(),
                )
            })
            .collect();
        for (acked_at, p, o) in log.iter() {
            let series = &by_partition[p];
            let i = series.partition_point(|(_, c)| *c <= *o as u64);
            let seen = series[i].0;
            hist.record((seen.saturating_sub(*acked_at) / 1000).max(1))
                .unwrap();
        }
        let ms = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
        let line = format!(
            "run {run}: {} records at {mib_s} MiB/s offered; ack → visible p50 {:.0} ms, p90 {:.0}, p99 {:.0}, max {:.0} ms; {} polls, loadTable p50 {:.1} ms p99 {:.1} ms; node CPU {:.0}% of a core, bench {:.0}%",
            hist.len(),
            ms(0.5),
            ms(0.9),
            ms(0.99),
            hist.max() as f64 / 1000.0,
            polls.len(),
            poll_ms.value_at_quantile(0.5) as f64 / 1000.0,
            poll_ms.value_at_quantile(0.99) as f64 / 1000.0,
            (b1 - b0) / secs / 10.0,
            (c1 - c0) / secs / 10.0,
        );
        eprintln!("{line}");
        lines.push(line);
        p50s.push(ms(0.5));
        p99s.push(ms(0.99));
    }
    node.stop_within(60);
    let p99 = median(p99s);
    let mut report = vec![
        format!(
            "freshness ({runs} runs of {seconds} s, {mib_s} MiB/s offered, {partitions} partitions, commit interval 1 s, loadTable polled every {} ms): ack → visible in the table p50 {:.0} ms, p99 {p99:.0} ms (medians of runs); target p99 ≤ 2000 ms: {}",
            poll.as_millis(),
            median(p50s),
            if p99 <= 2000.0 { "met" } else { "NOT met" }
        ),
    ];
    report.extend(lines);
    report
}

// ---------------------------------------------------------------------------------------------
// 3. Memory with many table topics.

struct MemoryRun {
    topics: usize,
    steady: f64,
    peak: f64,
    log_cache: f64,
    behind_end: f64,
    acked_mib_s: f64,
    commits: f64,
    failed: f64,
    broker_cpu: f64,
}

fn memory_run(
    base: &Path,
    topics: usize,
    mib_s: f64,
    seconds: u64,
    interval_ms: u64,
    partitions: i32,
) -> MemoryRun {
    let dir = base.join(format!("memory-{topics}"));
    let _ = std::fs::remove_dir_all(&dir);
    sync_all();
    let node = Node::start_bench(INLET.as_ref(), &dir);
    let pid = node.pid();
    let names: Vec<String> = (0..topics).map(|i| format!("mem_{i:03}")).collect();
    // One schema (the producers frame every record with its id), registered under each
    // topic's subject as a serializer would.
    let mut id = 0;
    for n in &names {
        id = register_schema(&node.registry, &format!("{n}-value"));
    }
    let records = framed_records(id);
    create_table_topics(&node.kafka, &names, partitions, interval_ms, &[]);
    let targets = names
        .iter()
        .flat_map(|n| (0..partitions).map(move |p| (n.clone(), p)))
        .collect();
    let load = Paced::start(&node.kafka, targets, mib_s, &records, Instant::now(), false);
    let t0 = Instant::now();
    let b0 = cpu_ms(&pid.to_string());
    let a0 = load.acks.bytes.load(Ordering::Relaxed);
    let mut samples = Vec::new();
    let mut log_cache = Vec::new();
    while t0.elapsed() < Duration::from_secs(seconds) {
        std::thread::sleep(Duration::from_millis(500));
        let (rss, _) = rss_mib(pid);
        if t0.elapsed() >= Duration::from_secs(seconds / 2) {
            samples.push(rss);
            log_cache.push(
                node.metrics()
                    .get("inlet_log_cache_used_bytes")
                    .copied()
                    .unwrap_or(0.0)
                    / MIB,
            );
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let acked = (load.acks.bytes.load(Ordering::Relaxed) - a0) as f64 / MIB;
    let broker_cpu = (cpu_ms(&pid.to_string()) - b0) / secs / 10.0;
    let behind_end = node.table_sum("inlet_table_records_behind");
    let commits = node.table_sum("inlet_table_commits_total");
    let failed = node.table_sum("inlet_table_failed_commits_total");
    let (_, peak) = rss_mib(pid);
    load.stop();
    node.stop_within(60);
    let _ = std::fs::remove_dir_all(&dir);
    MemoryRun {
        topics,
        steady: median(samples),
        peak,
        log_cache: median(log_cache),
        behind_end,
        acked_mib_s: acked / secs,
        commits,
        failed,
        broker_cpu,
    }
}

fn memory_phase(base: &Path, runs: u64) -> Vec<String> {
    let mib_s = env_f64("INLET_BENCH_MEMORY_MIB_S", 10.0);
    let seconds = env_u64("INLET_BENCH_MEMORY_SECONDS", 60);
    let interval_ms = env_u64("INLET_BENCH_MEMORY_INTERVAL_MS", 1000);
    let partitions = env_u64("INLET_BENCH_MEMORY_PARTITIONS", 1).max(1) as i32;
    let counts: Vec<usize> = env_list("INLET_BENCH_MEMORY_TOPICS", "10,100")
        .iter()
        .filter_map(|c| c.parse().ok())
        .collect();
    let mut by_count: BTreeMap<usize, Vec<MemoryRun>> = BTreeMap::new();
    let mut lines = Vec::new();
    for run in 0..runs {
        let mut order = counts.clone();
        if run % 2 == 1 {
            order.reverse();
        }
        for topics in order {
            let r = memory_run(base, topics, mib_s, seconds, interval_ms, partitions);
            let line = format!(
                "run {run}, {} topics: RSS steady {:.0} MiB (log cache {:.0} MiB of it), peak {:.0} MiB; acked {:.1} MiB/s; {:.0} commits ({:.0} failed); {:.0} records behind at the end; node CPU {:.0}% of a core",
                r.topics, r.steady, r.log_cache, r.peak, r.acked_mib_s, r.commits, r.failed, r.behind_end, r.broker_cpu
            );
            eprintln!("{line}");
            lines.push(line);
            by_count.entry(topics).or_default().push(r);
        }
    }
    let mut report = vec![
        format!("memory ({runs} runs per count, {seconds} s at {mib_s} MiB/s in total, {partitions} partition(s) per topic, commit interval {interval_ms} ms; medians; steady = median VmRSS over the second half, peak = VmHWM):"),
        "| table topics | steady RSS | of which log cache | steady RSS without the log cache | peak RSS | commits in the window | records behind at the end |".into(),
        "|---|---|---|---|---|---|---|".into(),
    ];
    let mut figures = BTreeMap::new();
    for (topics, rs) in &by_count {
        let steady = median(rs.iter().map(|r| r.steady).collect());
        let cache = median(rs.iter().map(|r| r.log_cache).collect());
        let peak = median(rs.iter().map(|r| r.peak).collect());
        let rest = median(rs.iter().map(|r| r.steady - r.log_cache).collect());
        figures.insert(*topics, (steady, peak, rest));
        report.push(format!(
            "| {topics} | {steady:.0} MiB | {cache:.0} MiB | {rest:.0} MiB | {peak:.0} MiB | {:.0} | {:.0} |",
            median(rs.iter().map(|r| r.commits).collect()),
            median(rs.iter().map(|r| r.behind_end).collect()),
        ));
    }
    if let (Some(few), Some(many)) = (figures.values().next(), figures.values().last()) {
        report.push(format!(
            "ratio {} / {} topics: steady {:.2}, peak {:.2}, steady without the log cache {:.2} (target ≤ 1.3: {})",
            figures.keys().last().unwrap(),
            figures.keys().next().unwrap(),
            many.0 / few.0,
            many.1 / few.1,
            many.2 / few.2,
            if many.0 / few.0 <= 1.3 && many.1 / few.1 <= 1.3 { "met" } else { "NOT met" }
        ));
    }
    report.push(String::new());
    report.extend(lines);
    report
}

// ---------------------------------------------------------------------------------------------
// 4. Files: how big the table's files get at a 1 s interval, once compaction catches up.

/// One table's files, read from the node's embedded catalog after the node stopped.
struct TableFiles {
    /// Data files added by Inlet's rounds (append snapshots), over the whole run.
    written: u64,
    /// Sizes of the live data files.
    live: Vec<u64>,
    snapshots: usize,
    replaces: usize,
    metadata_bytes: u64,
}

fn table_files(dir: &Path, table: &str) -> TableFiles {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        use futures::TryStreamExt;
        let meta = format!("sqlite://{}", dir.join("meta.db").display());
        let catalog =
            inlet_catalog::embedded::open(&meta, &dir.join("objects").to_string_lossy(), None)
                .await
                .expect("the node's catalog");
        let ident = iceberg::TableIdent::new(
            iceberg::NamespaceIdent::new("default".into()),
            table.to_string(),
        );
        let t = iceberg::Catalog::load_table(catalog.catalog.as_ref(), &ident)
            .await
            .expect("table");
        let m = t.metadata();
        let count = |key: &str, s: &iceberg::spec::Snapshot| {
            s.summary()
                .additional_properties
                .get(key)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let written = m
            .snapshots()
            .filter(|s| s.summary().operation == iceberg::spec::Operation::Append)
            .map(|s| count("added-data-files", s))
            .sum();
        let replaces = m
            .snapshots()
            .filter(|s| s.summary().operation == iceberg::spec::Operation::Replace)
            .count();
        let live: Vec<u64> = t
            .scan()
            .build()
            .expect("scan")
            .plan_files()
            .await
            .expect("plan")
            .map_ok(|task| task.file_size_in_bytes)
            .try_collect()
            .await
            .expect("tasks");
        let location = t.metadata_location().unwrap_or_default().to_string();
        let metadata_bytes = t
            .file_io()
            .new_input(&location)
            .expect("metadata file")
            .metadata()
            .await
            .map(|m| m.size)
            .unwrap_or(0);
        TableFiles {
            written,
            live,
            snapshots: m.snapshots().count(),
            replaces,
            metadata_bytes,
        }
    })
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn files_phase(base: &Path) -> Vec<String> {
    let topics = env_u64("INLET_BENCH_FILES_TOPICS", 4).max(1) as usize;
    let partitions = env_u64("INLET_BENCH_FILES_PARTITIONS", 1).max(1) as i32;
    let mib_s = env_f64("INLET_BENCH_FILES_MIB_S", 10.0);
    let seconds = env_u64("INLET_BENCH_FILES_SECONDS", 1200);
    let settle = env_u64("INLET_BENCH_FILES_SETTLE_SECONDS", 150);
    let dir = base.join("files");
    let _ = std::fs::remove_dir_all(&dir);
    let node = Node::start_bench(INLET.as_ref(), &dir);
    let pid = node.pid().to_string();
    let names: Vec<String> = (0..topics).map(|i| format!("files_{i}")).collect();
    let mut id = 0;
    for n in &names {
        id = register_schema(&node.registry, &format!("{n}-value"));
    }
    let records = framed_records(id);
    // INLET_BENCH_FILES_COMPACTION_MS: the topics' table.topic.compaction.interval.ms (-1 to
    // measure the load without compaction); the topic default when unset.
    let compaction: Vec<(&str, String)> = std::env::var("INLET_BENCH_FILES_COMPACTION_MS")
        .ok()
        .map(|v| vec![("table.topic.compaction.interval.ms", v)])
        .unwrap_or_default();
    create_table_topics(&node.kafka, &names, partitions, 1000, &compaction);
    let targets = names
        .iter()
        .flat_map(|n| (0..partitions).map(move |p| (n.clone(), p)))
        .collect();
    let load = Paced::start(&node.kafka, targets, mib_s, &records, Instant::now(), false);
    let t0 = Instant::now();
    let c0 = cpu_ms(&pid);
    while t0.elapsed() < Duration::from_secs(seconds) {
        std::thread::sleep(Duration::from_secs(10));
        eprintln!(
            "files: {:.0} s, {:.0} MiB acked, {:.0} records behind",
            t0.elapsed().as_secs_f64(),
            load.acks.bytes.load(Ordering::Relaxed) as f64 / MIB,
            node.table_sum("inlet_table_records_behind")
        );
    }
    let load_secs = t0.elapsed().as_secs_f64();
    let acked_mib = load.acks.bytes.load(Ordering::Relaxed) as f64 / MIB;
    let load_cpu = (cpu_ms(&pid) - c0) / load_secs / 10.0;
    load.stop();
    let t1 = Instant::now();
    let c1 = cpu_ms(&pid);
    std::thread::sleep(Duration::from_secs(settle)); // compaction's own schedule, not a condition
    let settle_cpu = (cpu_ms(&pid) - c1) / t1.elapsed().as_secs_f64() / 10.0;
    let behind = node.table_sum("inlet_table_records_behind");
    node.stop_within(60);

    let hours = load_secs / 3600.0;
    let mut lines = vec![
        format!("files ({topics} table topics × {partitions} partition(s), 1 s commits, {mib_s} MiB/s in total for {seconds} s, then {settle} s idle; {acked_mib:.0} MiB acked; {behind:.0} records behind at the end):"),
        "| table | files written per partition-hour | live files | median live file | p10 live file | snapshots | replace snapshots | metadata.json |".into(),
        "|---|---|---|---|---|---|---|---|".into(),
    ];
    let mut all_live = Vec::new();
    for n in &names {
        let f = table_files(&dir, n);
        let mut live = f.live.clone();
        live.sort_unstable();
        lines.push(format!(
            "| {n} | {:.0} | {} | {:.1} MiB | {:.1} MiB | {} | {} | {:.0} KiB |",
            f.written as f64 / (partitions as f64 * hours),
            live.len(),
            percentile(&live, 0.5) as f64 / MIB,
            percentile(&live, 0.1) as f64 / MIB,
            f.snapshots,
            f.replaces,
            f.metadata_bytes as f64 / 1024.0,
        ));
        all_live.extend(live);
    }
    all_live.sort_unstable();
    let median = percentile(&all_live, 0.5) as f64 / MIB;
    lines.push(format!(
        "all tables: median live file {median:.1} MiB, p10 {:.1} MiB (target: median ≥ 16 MiB: {}); node CPU {load_cpu:.0}% of a core during the load, {settle_cpu:.0}% while idle (compaction and empty rounds)",
        percentile(&all_live, 0.1) as f64 / MIB,
        if median >= 16.0 { "met" } else { "NOT met" },
    ));
    let _ = std::fs::remove_dir_all(&dir);
    lines
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks benches to list their tests
    }
    let seconds = env_u64("INLET_BENCH_SECONDS", 20);
    let runs = env_u64("INLET_BENCH_RUNS", 3).max(1);
    let partitions = env_u64("INLET_BENCH_PARTITIONS", 4).max(1) as i32;
    let phases = env_list("INLET_BENCH_PHASES", "ingest,freshness,memory");
    let base = std::env::var("INLET_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_TARGET_TMPDIR")))
        .join(format!("inlet-table-bench-{}", std::process::id()));
    std::fs::create_dir_all(&base).unwrap();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    eprintln!(
        "table_topics: {}, {cores} cores shared by the node and the clients; phases {phases:?}",
        base.display()
    );
    let mut report = Vec::new();
    for phase in &phases {
        let lines = match phase.as_str() {
            "ingest" => ingest_phase(&base, seconds, runs, partitions),
            "freshness" => freshness_phase(&base, seconds, runs, partitions),
            "memory" => memory_phase(&base, runs),
            "files" => files_phase(&base),
            other => panic!("unknown phase {other:?}"),
        };
        for l in &lines {
            eprintln!("{l}");
        }
        report.extend(lines);
        report.push(String::new());
    }
    let _ = std::fs::remove_dir_all(&base);
    println!();
    for l in report {
        println!("{l}");
    }
}
