//! What TLS and SASL cost the Kafka path: produce throughput over a `SASL_SSL` listener
//! (SCRAM-SHA-512, rustls on the node) against a `PLAINTEXT` listener of the same node, in
//! the same run, with the broker's and the client's CPU per MiB beside each.
//!
//! ```text
//! cargo bench --bench kafka_tls
//! ```
//!
//! The client is `kcat` (librdkafka with OpenSSL), producing a file of 1 KiB messages, acks=all,
//! `linger.ms` 5, `batch.size` 1 MiB, no compression; each round runs the two listeners in
//! alternating order (PLAINTEXT first in even rounds), each to a topic of its own. Then, in
//! the same order, produce latency at a load both carry: the rdkafka crate (librdkafka with
//! OpenSSL) sending `INLET_BENCH_LATENCY_MIB_S` (50) MiB/s of 1 KiB messages for
//! `INLET_BENCH_LATENCY_SECONDS` (10) after a second of warm-up, open loop, acks=all,
//! idempotent, `linger.ms` 0: send→ack p50 and p99. The figures are medians over the rounds.
//! Environment: `INLET_BENCH_MIB` (the file, 512 MiB),
//! `INLET_BENCH_RUNS` (rounds, 5), `INLET_BENCH_PARTITIONS` (4), `INLET_BENCH_DIR` (the
//! target dir's `tmp/`), `INLET_BENCH_BIN` (another inlet executable), `KCAT` (the kcat to
//! run, `kcat`). The node's certificate is made with `openssl` (a self-signed RSA-2048 one
//! for 127.0.0.1). Skipped, saying why, without kcat or openssl.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a bench: a failed step fails it, and its timings are real time

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use inlet_test_support::node::{free_port, process_cpu_ms, Node};

const INLET: &str = env!("CARGO_BIN_EXE_inlet");
const PASSWORD: &str = "bench-secret";

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// CPU time (ms) of this process's waited-for children so far.
fn children_cpu_ms() -> f64 {
    // SAFETY: rusage is plain data (all zeroes is a valid value), and getrusage only writes
    // the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1000.0 + t.tv_usec as f64 / 1000.0;
    ms(usage.ru_utime) + ms(usage.ru_stime)
}

fn found(program: &str) -> bool {
    Command::new(program)
        .env_remove("LD_LIBRARY_PATH")
        .arg(if program == "openssl" {
            "version"
        } else {
            "-V"
        })
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A self-signed certificate for 127.0.0.1 and its key in one PEM file (Kafka's PEM keystore),
/// and the certificate alone (the client's CA).
fn certificate(dir: &Path) -> (PathBuf, PathBuf) {
    let (key, cert) = (dir.join("key.pem"), dir.join("cert.pem"));
    let made = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args([
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    let keystore = dir.join("keystore.pem");
    let mut pem = std::fs::read(&key).unwrap();
    pem.extend(std::fs::read(&cert).unwrap());
    std::fs::write(&keystore, pem).unwrap();
    (keystore, cert)
}

/// `mib` MiB of 1 KiB messages (1,023 printable random bytes and a newline each).
fn messages(path: &Path, mib: u64) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut line = [0u8; 1024];
    line[1023] = b'\n';
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..mib * 1024 {
        for b in line[..1023].iter_mut() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *b = alphabet[(state % 64) as usize];
        }
        out.write_all(&line).unwrap();
    }
    out.flush().unwrap();
}

/// One produce of the whole file through `kcat` with `security` (extra `-X` settings): the
/// MiB/s acked, the broker's and the client's CPU per MiB (ms).
fn produce(
    kcat: &str,
    node: &Node,
    bootstrap: &str,
    topic: &str,
    security: &[String],
    file: &Path,
    mib: u64,
) -> (f64, f64, f64) {
    let pid = node.pid().to_string();
    let (broker0, client0) = (process_cpu_ms(&pid), children_cpu_ms());
    let started = Instant::now();
    let mut cmd = Command::new(kcat);
    // Cargo's library path holds rdkafka-sys's own librdkafka (a newer build), which
    // kcat would load in place of the system's.
    cmd.env_remove("LD_LIBRARY_PATH");
    cmd.args(["-P", "-q", "-b", bootstrap, "-t", topic, "-l"])
        .arg(file)
        .args([
            "-X",
            "acks=all",
            "-X",
            "linger.ms=5",
            "-X",
            "batch.size=1048576",
        ])
        .args([
            "-X",
            "queue.buffering.max.kbytes=1048576",
            "-X",
            "message.max.bytes=1048576",
        ]);
    for s in security {
        cmd.args(["-X", s]);
    }
    let out = cmd.output().unwrap();
    let seconds = started.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "kcat to {topic} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (broker, client) = (process_cpu_ms(&pid) - broker0, children_cpu_ms() - client0);
    let m = mib as f64;
    (m / seconds, broker / m, client / m)
}

/// Records each message's send→ack time (µs) into a histogram.
struct Timed(
    std::sync::Mutex<hdrhistogram::Histogram<u64>>,
    std::sync::atomic::AtomicU64,
);

impl rdkafka::ClientContext for Timed {}

impl rdkafka::producer::ProducerContext for Timed {
    type DeliveryOpaque = Box<Instant>;

    fn delivery(&self, result: &rdkafka::producer::DeliveryResult<'_>, sent: Box<Instant>) {
        if result.is_ok() {
            let us = sent.elapsed().as_micros() as u64;
            self.0.lock().unwrap().saturating_record(us.max(1));
        } else {
            self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Produce latency at a load both listeners carry: `rate_mib` MiB/s of 1 KiB messages for
/// `seconds`, open loop (each message falls due on a fixed schedule), from the rdkafka crate
/// (librdkafka with OpenSSL) with `security`, acks=all, idempotent, `linger.ms` 0. Returns the
/// send→ack p50 and p99 (ms) and the failed deliveries.
fn latency(
    bootstrap: &str,
    topic: &str,
    security: &[String],
    rate_mib: f64,
    seconds: u64,
) -> (f64, f64, u64) {
    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{BaseRecord, Producer as _, ThreadedProducer};

    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "0")
        .set("queue.buffering.max.kbytes", "65536");
    for s in security {
        let (k, v) = s.split_once('=').unwrap();
        config.set(k, v);
    }
    let context = Timed(
        std::sync::Mutex::new(hdrhistogram::Histogram::new(3).unwrap()),
        std::sync::atomic::AtomicU64::new(0),
    );
    let producer: ThreadedProducer<Timed> = config.create_with_context(context).unwrap();
    let value = vec![b'x'; 1024];
    let per_message = std::time::Duration::from_secs_f64(1.0 / (rate_mib * 1024.0));
    // A second of warm-up (connections, the idempotent producer id), then the measured part.
    let warmup = (rate_mib * 1024.0) as u64;
    let total = warmup + (rate_mib * 1024.0) as u64 * seconds;
    let start = Instant::now();
    for i in 0..total {
        if i == warmup {
            producer.flush(std::time::Duration::from_secs(30)).unwrap();
            producer.context().0.lock().unwrap().reset();
        }
        let due = start + per_message.mul_f64(i as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let mut record =
            BaseRecord::<(), [u8], Box<Instant>>::with_opaque_to(topic, Box::new(Instant::now()))
                .payload(&value[..]);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, back)) => {
                    record = back;
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        }
    }
    producer.flush(std::time::Duration::from_secs(60)).unwrap();
    let h = producer.context().0.lock().unwrap().clone();
    let failed = producer
        .context()
        .1
        .load(std::sync::atomic::Ordering::Relaxed);
    (
        h.value_at_quantile(0.5) as f64 / 1000.0,
        h.value_at_quantile(0.99) as f64 / 1000.0,
        failed,
    )
}

fn main() {
    let kcat = std::env::var("KCAT").unwrap_or_else(|_| "kcat".into());
    if !found(&kcat) || !found("openssl") {
        eprintln!("kafka_tls: skipped: it needs kcat (with SSL and SASL) and openssl");
        return;
    }
    let mib = env_u64("INLET_BENCH_MIB", 512).max(1);
    let runs = env_u64("INLET_BENCH_RUNS", 5).max(1);
    let partitions = env_u64("INLET_BENCH_PARTITIONS", 4).max(1);
    let base = std::env::var_os("INLET_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")))
        .join(format!("inlet-kafka-tls-bench-{}", std::process::id()));
    std::fs::create_dir_all(&base).unwrap();
    let bin = std::env::var_os("INLET_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(INLET));
    let data = base.join("node");
    let added = Command::new(&bin)
        .args([
            "users",
            "add",
            "bench",
            "--mechanism",
            "SCRAM-SHA-512",
            "--password",
            PASSWORD,
            "--data-dir",
        ])
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        added.status.success(),
        "inlet users add: {}",
        String::from_utf8_lossy(&added.stderr)
    );
    let (keystore, ca) = certificate(&base);
    let file = base.join("messages.txt");
    messages(&file, mib);
    let (plain, secure) = (free_port(), free_port());
    let listeners =
        format!("listeners=PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{secure}");
    let keystore = format!("ssl.keystore.location={}", keystore.display());
    let partitions_config = format!("num.partitions={partitions}");
    let node = Node::launch(
        &bin,
        &data,
        &[
            "--kafka-config",
            &listeners,
            "--kafka-config",
            "ssl.keystore.type=PEM",
            "--kafka-config",
            &keystore,
            "--kafka-config",
            "sasl.enabled.mechanisms=SCRAM-SHA-512",
            "--kafka-config",
            &partitions_config,
        ],
        &[("INLET_LOG", "warn,inlet=info")],
    );
    let tls = vec![
        "security.protocol=SASL_SSL".to_string(),
        "sasl.mechanisms=SCRAM-SHA-512".to_string(),
        "sasl.username=bench".to_string(),
        format!("sasl.password={PASSWORD}"),
        format!("ssl.ca.location={}", ca.display()),
    ];
    let listeners = [
        ("PLAINTEXT", format!("127.0.0.1:{plain}"), Vec::new()),
        ("SASL_SSL", format!("127.0.0.1:{secure}"), tls),
    ];
    eprintln!(
        "kafka_tls: {} rounds of {mib} MiB of 1 KiB messages per listener, {partitions} partitions, kcat (librdkafka with OpenSSL) on the same 2 cores as the node",
        runs
    );
    let mut results: [Vec<(f64, f64, f64)>; 2] = [Vec::new(), Vec::new()];
    let mut latencies: [Vec<(f64, f64)>; 2] = [Vec::new(), Vec::new()];
    let (rate, seconds) = (
        env_u64("INLET_BENCH_LATENCY_MIB_S", 50).max(1) as f64,
        env_u64("INLET_BENCH_LATENCY_SECONDS", 10).max(1),
    );
    for round in 0..runs {
        let order: [usize; 2] = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let (name, bootstrap, security) = &listeners[i];
            let topic = format!("{}-{round}", name.to_ascii_lowercase());
            let r = produce(&kcat, &node, bootstrap, &topic, security, &file, mib);
            eprintln!(
                "round {round} {name}: {:.1} MiB/s acked; broker {:.2} ms CPU per MiB, client {:.2}",
                r.0, r.1, r.2
            );
            results[i].push(r);
        }
        for i in order {
            let (name, bootstrap, security) = &listeners[i];
            let topic = format!("{}-latency-{round}", name.to_ascii_lowercase());
            let (p50, p99, failed) = latency(bootstrap, &topic, security, rate, seconds);
            assert_eq!(failed, 0, "{name}: deliveries failed");
            eprintln!(
                "round {round} {name}: at {rate} MiB/s, send→ack p50 {p50:.2} ms, p99 {p99:.2} ms"
            );
            latencies[i].push((p50, p99));
        }
    }
    let stat =
        |i: usize, f: fn(&(f64, f64, f64)) -> f64| median(results[i].iter().map(f).collect());
    let (mp, ms) = (stat(0, |r| r.0), stat(1, |r| r.0));
    let per_round: Vec<String> = results[0]
        .iter()
        .zip(&results[1])
        .map(|(p, s)| format!("{:.2}", s.0 / p.0))
        .collect();
    println!();
    println!("| measure (median of {runs} rounds) | PLAINTEXT | SASL_SSL (SCRAM-SHA-512) | SASL_SSL / PLAINTEXT |");
    println!("|---|---|---|---|");
    println!(
        "| produce MiB/s acked | {mp:.1} | {ms:.1} | **{:.2}** (per round {}) |",
        ms / mp,
        per_round.join(", ")
    );
    let (bp, bs) = (stat(0, |r| r.1), stat(1, |r| r.1));
    println!(
        "| broker CPU per MiB | {bp:.2} ms | {bs:.2} ms | {:.2} |",
        bs / bp
    );
    let (cp, cs) = (stat(0, |r| r.2), stat(1, |r| r.2));
    println!(
        "| client (kcat) CPU per MiB | {cp:.2} ms | {cs:.2} ms | {:.2} |",
        cs / cp
    );
    let lat = |i: usize, f: fn(&(f64, f64)) -> f64| median(latencies[i].iter().map(f).collect());
    println!(
        "| produce send→ack p50 / p99 at {rate} MiB/s (rdkafka) | {:.2} / {:.2} ms | {:.2} / {:.2} ms | p99 {:.2} |",
        lat(0, |l| l.0),
        lat(0, |l| l.1),
        lat(1, |l| l.0),
        lat(1, |l| l.1),
        lat(1, |l| l.1) / lat(0, |l| l.1)
    );
    println!();
    println!(
        "verdict: SASL_SSL keeps {:.0}% of PLAINTEXT's throughput (issue 42's target: TLS costs at most 25%): {}",
        100.0 * ms / mp,
        if ms / mp >= 0.75 { "met" } else { "not met" }
    );
    node.stop();
    let _ = std::fs::remove_dir_all(&base);
}
