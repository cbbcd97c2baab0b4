//! `inlet produce` as people pipe files through it (issue 44: "sustains ≥ 50 MiB/s of JSON
//! lines into Avro on one core"): JSON lines of an order with 20 fields (about 400 bytes each)
//! from a file on standard input, written as Confluent-framed Avro to a plain topic of one
//! `inlet serve` node (the release binary) on the same machine.
//!
//! ```text
//! cargo bench --bench cli_produce
//! ```
//!
//! Environment: `INLET_BENCH_MIB` (MiB of JSON lines per run, default 256), `INLET_BENCH_RUNS`
//! (default 3; medians are reported), `INLET_BENCH_DIR` (where the node's data dir and the
//! input go; default: the target dir's `tmp/`), `INLET_BENCH_BIN` (another `inlet` executable,
//! for the node and the producer), `INLET_BENCH_NODE_LOG`, `INLET_BENCH_NODE_ARGS`.
//!
//! Each run pipes the file into `inlet produce --topic orders --value-schema order.avsc` and
//! waits for it to exit 0 (every record acknowledged). It reports the input MiB per second of
//! wall time, the producer process's CPU time (user + system, from `getrusage` of the waited
//! child: its own thread and librdkafka's) and the input MiB per CPU second: the "on one core"
//! figure, which holds whatever the other processes on the machine take. The node's CPU is
//! reported beside it. A guard checks the topic's end offset: every line is a record.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a bench: a failed step fails it, and it measures real time

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::ClientConfig;

use inlet_test_support::node::{process_cpu_ms, Node};

const INLET: &str = env!("CARGO_BIN_EXE_inlet");
const MIB: f64 = 1024.0 * 1024.0;
/// Issue 44's target: input MiB per CPU second of the producer.
const TARGET: f64 = 50.0;

const SCHEMA: &str = r#"{"type": "record", "name": "Order", "namespace": "bench", "fields": [
  {"name": "id", "type": "long"},
  {"name": "customer", "type": "string"},
  {"name": "email", "type": ["null", "string"], "default": null},
  {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]}},
  {"name": "amount", "type": "double"},
  {"name": "quantity", "type": "int"},
  {"name": "currency", "type": "string"},
  {"name": "created_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
  {"name": "updated_at", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}], "default": null},
  {"name": "country", "type": "string"},
  {"name": "city", "type": "string"},
  {"name": "street", "type": "string"},
  {"name": "zip", "type": "string"},
  {"name": "gift", "type": "boolean"},
  {"name": "note", "type": ["null", "string"], "default": null},
  {"name": "tags", "type": {"type": "array", "items": "string"}},
  {"name": "channel", "type": "string"},
  {"name": "discount", "type": ["null", "double"], "default": null},
  {"name": "weight_grams", "type": "int"},
  {"name": "priority", "type": "int"}
]}"#;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Writes about `mib` MiB of order lines; returns how many.
fn write_input(path: &Path, mib: u64) -> u64 {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let (mut bytes, mut n) = (0u64, 0u64);
    let statuses = ["NEW", "PAID", "SHIPPED"];
    while bytes < mib << 20 {
        let email = if n % 3 == 0 {
            "null".to_string()
        } else {
            format!("{{\"string\": \"customer{}@example.com\"}}", n % 997)
        };
        let line = format!(
            "{{\"id\": {n}, \"customer\": \"customer-{c}\", \"email\": {email}, \"status\": \"{s}\", \
             \"amount\": {a}.{cents:02}, \"quantity\": {q}, \"currency\": \"EUR\", \"created_at\": {t}, \
             \"updated_at\": {u}, \"country\": \"DE\", \"city\": \"Berlin\", \"street\": \"Hauptstrasse {q}\", \
             \"zip\": \"1011{z}\", \"gift\": {g}, \"note\": {note}, \"tags\": [\"web\", \"promo-{z}\"], \
             \"channel\": \"online\", \"discount\": {d}, \"weight_grams\": {w}, \"priority\": {p}}}\n",
            c = n % 10_007,
            s = statuses[(n % 3) as usize],
            a = n % 1000,
            cents = n % 100,
            q = n % 7 + 1,
            t = 1_765_000_000_000 + n,
            u = if n % 2 == 0 { "null".to_string() } else { format!("{{\"long\": {}}}", 1_765_000_000_000 + n + 5) },
            z = n % 10,
            g = n % 5 == 0,
            note = if n % 4 == 0 { "{\"string\": \"leave at the door\"}" } else { "null" },
            d = if n % 6 == 0 { "{\"double\": 0.1}" } else { "null" },
            w = 100 + n % 5000,
            p = n % 3,
        );
        out.write_all(line.as_bytes()).unwrap();
        bytes += line.len() as u64;
        n += 1;
    }
    out.flush().unwrap();
    n
}

/// CPU milliseconds of this process's waited-for children so far.
fn children_cpu_ms() -> f64 {
    // SAFETY: getrusage only fills the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    ms(usage.ru_utime) + ms(usage.ru_stime)
}

fn end_offset(bootstrap: &str, topic: &str) -> i64 {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    consumer
        .fetch_watermarks(topic, 0, std::time::Duration::from_secs(30))
        .unwrap()
        .1
}

fn main() {
    let mib = env_u64("INLET_BENCH_MIB", 256).max(1);
    let runs = env_u64("INLET_BENCH_RUNS", 3).max(1);
    let bin = std::env::var_os("INLET_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(INLET));
    let base = std::env::var("INLET_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_TARGET_TMPDIR")))
        .join(format!("inlet-cli-produce-bench-{}", std::process::id()));
    std::fs::create_dir_all(&base).unwrap();
    let input = base.join("orders.jsonl");
    let lines = write_input(&input, mib);
    let input_bytes = std::fs::metadata(&input).unwrap().len() as f64;
    let schema = base.join("order.avsc");
    std::fs::write(&schema, SCHEMA).unwrap();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    eprintln!(
        "cli_produce: {}, {cores} cores shared by the node and the producer; {runs} runs of {:.1} MiB ({lines} lines of ~{} bytes)",
        base.display(),
        input_bytes / MIB,
        input_bytes as u64 / lines
    );
    let node = Node::start_bench(INLET.as_ref(), &base.join("node"));
    let registry = format!("http://{}", node.registry);
    let (mut walls, mut per_cpu, mut cpus, mut node_cpus) = (vec![], vec![], vec![], vec![]);
    for run in 0..runs {
        let topic = format!("orders{run}");
        let created = Command::new(&bin)
            .args([
                "topic",
                "create",
                &topic,
                "-p",
                "1",
                "--bootstrap-server",
                &node.kafka,
            ])
            .output()
            .unwrap();
        assert!(
            created.status.success(),
            "{}",
            String::from_utf8_lossy(&created.stderr)
        );
        let node_before = process_cpu_ms(&node.pid().to_string());
        let cpu_before = children_cpu_ms();
        let started = Instant::now();
        let status = Command::new(&bin)
            .args([
                "produce",
                "--topic",
                &topic,
                "--bootstrap-server",
                &node.kafka,
            ])
            .args(["--registry", &registry, "--value-schema"])
            .arg(&schema)
            .stdin(std::fs::File::open(&input).unwrap())
            .stdout(Stdio::null())
            .status()
            .unwrap();
        let wall = started.elapsed().as_secs_f64();
        let cpu = (children_cpu_ms() - cpu_before) / 1e3;
        let node_cpu = (process_cpu_ms(&node.pid().to_string()) - node_before) / 1e3;
        assert!(status.success(), "inlet produce failed: {status}");
        let records = end_offset(&node.kafka, &topic);
        assert_eq!(records as u64, lines, "every line is a record");
        let (mib_s, mib_cpu_s) = (input_bytes / MIB / wall, input_bytes / MIB / cpu);
        eprintln!(
            "run {run}: {mib_s:.1} MiB/s of JSON lines ({:.0} records/s) in {wall:.2} s; producer CPU {cpu:.2} s ({:.0}% of a core): {mib_cpu_s:.1} MiB per CPU second; node CPU {node_cpu:.2} s",
            lines as f64 / wall,
            cpu / wall * 100.0
        );
        walls.push(mib_s);
        per_cpu.push(mib_cpu_s);
        cpus.push(cpu / wall * 100.0);
        node_cpus.push(node_cpu / wall * 100.0);
    }
    node.stop_within(60);
    let _ = std::fs::remove_dir_all(&base);
    let on_one_core = median(per_cpu);
    println!("| measure (median of {runs} runs) | inlet produce |");
    println!("|---|---|");
    println!(
        "| JSON lines in, MiB/s of wall time | {:.1} |",
        median(walls)
    );
    println!("| producer CPU, % of a core | {:.0} % |", median(cpus));
    println!("| **MiB of JSON lines per CPU second** | **{on_one_core:.1}** |");
    println!("| node CPU, % of a core | {:.0} % |", median(node_cpus));
    println!(
        "\nissue 44's target (≥ {TARGET} MiB/s on one core): {}",
        if on_one_core >= TARGET {
            "met"
        } else {
            "NOT met"
        }
    );
}
