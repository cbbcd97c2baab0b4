//! Schema Registry lookups by id served from the cache, over HTTP and in-process.
//!
//! ```text
//! cargo bench -p inlet-schema-registry --bench lookups
//! ```
//!
//! Environment: `INLET_BENCH_SECONDS` (length of each timed phase, default 10),
//! `INLET_BENCH_RUNS` (repetitions; medians are reported, default 3),
//! `INLET_BENCH_CONNECTIONS` (concurrent keep-alive HTTP/1.1 connections, default 32).
//!
//! A registry is opened over a SQLite file in a temp dir, a handful of Avro schemas are
//! registered (and read once, so the by-id cache holds them), and the REST API is served on
//! 127.0.0.1 in this process by a tokio multi-thread runtime of 2 workers. The clients run on a
//! second runtime of 2 workers in the same process, so **client and server share the machine's
//! cores**; the CPU time of each runtime's threads is reported per request. Each connection
//! writes `GET /schemas/ids/{id}` by hand, waits for the answer (status line, `Content-Length`,
//! body) and writes the next one: a closed loop, one request in flight per connection. A run
//! is a 1 s warm-up and then `INLET_BENCH_SECONDS` measured; latency is per request, from the
//! write to the last byte of the answer (hdrhistogram).
//!
//! Then the same lookups without HTTP: `Registry::schema_by_id` in a loop on the server
//! runtime, from 1 task and from 2 tasks, to show what HTTP costs.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use inlet_schema_registry::{open, serve, Registry, RegistryConfig, SchemaRequest};
use inlet_storage::MetaStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;

const SERVER_THREAD: &str = "registry-server";
const CLIENT_THREAD: &str = "bench-client";
const WARMUP: Duration = Duration::from_secs(1);

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a whole number, got {v:?}")),
        Err(_) => default,
    }
}

fn runtime(name: &'static str) -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A handful of Avro schemas of different sizes (records of 2 to 32 fields).
fn schemas() -> Vec<(String, String)> {
    [2usize, 4, 8, 16, 32]
        .iter()
        .enumerate()
        .map(|(i, &fields)| {
            let fields: Vec<String> = (0..fields)
                .map(|f| {
                    let t = match f % 4 {
                        0 => r#""long""#,
                        1 => r#""string""#,
                        2 => r#"["null","double"],"default":null"#,
                        _ => r#"{"type":"array","items":"int"}"#,
                    };
                    format!(r#"{{"name":"f{f}","type":{t}}}"#)
                })
                .collect();
            let schema = format!(
                r#"{{"type":"record","name":"Event{i}","namespace":"bench","fields":[{}]}}"#,
                fields.join(",")
            );
            (format!("bench-{i}-value"), schema)
        })
        .collect()
}

/// CPU time (user + system) of this process's threads whose name starts with `prefix`.
fn thread_cpu(prefix: &str) -> Duration {
    // utime and stime are in USER_HZ, 100 on every Linux architecture this runs on.
    let ticks = 100.0;
    let mut total = 0u64;
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.trim_end().starts_with(prefix) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        // Fields after the parenthesised name: state is field 3; utime and stime are 14 and 15.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() > 12 {
            total += f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0);
        }
    }
    Duration::from_secs_f64(total as f64 / ticks)
}

/// Reads one HTTP/1.1 response from `stream` into `buf` (which may hold the start of it
/// already); returns the status and the body's length, and leaves in `buf` any bytes past it.
async fn read_response(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<(u16, usize)> {
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = std::str::from_utf8(&buf[..head_end])
        .map_err(|_| std::io::Error::other("response head is not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line in {head:?}")))?;
    let length: usize = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no Content-Length in {head:?}")))?;
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok((status, length))
}

/// One keep-alive connection issuing lookups until `end`; records latencies after `measure`.
async fn connection(
    addr: std::net::SocketAddr,
    ids: Arc<Vec<u32>>,
    first: usize,
    measure: Instant,
    end: Instant,
) -> (u64, Histogram<u64>) {
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram");
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let requests: Vec<Vec<u8>> = ids
        .iter()
        .map(|id| format!("GET /schemas/ids/{id} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").into_bytes())
        .collect();
    let mut buf = Vec::with_capacity(16 * 1024);
    let mut count = 0u64;
    let mut i = first;
    loop {
        let start = Instant::now();
        if start >= end {
            break;
        }
        stream
            .write_all(&requests[i % requests.len()])
            .await
            .expect("write request");
        let (status, length) = read_response(&mut stream, &mut buf)
            .await
            .expect("read response");
        assert_eq!(status, 200, "GET /schemas/ids answered {status}");
        assert!(length > 0, "empty body");
        let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        buf.drain(..head_end + length);
        let done = Instant::now();
        if start >= measure {
            count += 1;
            hist.saturating_record((done - start).as_nanos() as u64);
        }
        i += 1;
    }
    (count, hist)
}

struct HttpRun {
    rate: f64,
    hist: Histogram<u64>,
    server_cpu_us: f64,
    client_cpu_us: f64,
}

fn http_run(
    client: &Runtime,
    addr: std::net::SocketAddr,
    ids: &Arc<Vec<u32>>,
    connections: usize,
    seconds: u64,
) -> HttpRun {
    let measure = Instant::now() + WARMUP;
    let end = measure + Duration::from_secs(seconds);
    let handles: Vec<_> = (0..connections)
        .map(|c| client.spawn(connection(addr, ids.clone(), c, measure, end)))
        .collect();
    // CPU from the end of the warm-up to the end of the window.
    std::thread::sleep(measure.saturating_duration_since(Instant::now()));
    let (server0, client0) = (thread_cpu(SERVER_THREAD), thread_cpu(CLIENT_THREAD));
    std::thread::sleep(end.saturating_duration_since(Instant::now()));
    let (server1, client1) = (thread_cpu(SERVER_THREAD), thread_cpu(CLIENT_THREAD));
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram");
    let mut count = 0u64;
    for h in handles {
        let (n, h) = client.block_on(h).expect("connection task");
        count += n;
        hist.add(h).expect("merge histograms");
    }
    let per_request = |d: Duration| d.as_secs_f64() * 1e6 / count.max(1) as f64;
    HttpRun {
        rate: count as f64 / seconds as f64,
        hist,
        server_cpu_us: per_request(server1 - server0),
        client_cpu_us: per_request(client1 - client0),
    }
}

/// `Registry::schema_by_id` in a loop from `tasks` tasks for `seconds`; lookups/s.
fn in_process_run(
    server: &Runtime,
    registry: &Arc<Registry>,
    ids: &Arc<Vec<u32>>,
    tasks: usize,
    seconds: u64,
) -> f64 {
    let total = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + Duration::from_secs(seconds);
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (registry, ids, total) = (registry.clone(), ids.clone(), total.clone());
            server.spawn(async move {
                let mut n = 0u64;
                let mut i = t;
                'outer: loop {
                    // Check the clock every 1024 lookups; a lookup is well under a microsecond.
                    for _ in 0..1024 {
                        let s = registry
                            .schema_by_id(ids[i % ids.len()])
                            .await
                            .expect("lookup");
                        std::hint::black_box(&s);
                        i += 1;
                        n += 1;
                    }
                    if Instant::now() >= end {
                        break 'outer;
                    }
                }
                total.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    let started = Instant::now();
    for h in handles {
        server.block_on(h).expect("lookup task");
    }
    let elapsed = started.elapsed().max(Duration::from_secs(seconds));
    total.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn main() {
    // `cargo bench` passes --bench; nothing else to parse.
    let seconds = env_u64("INLET_BENCH_SECONDS", 10).max(1);
    let runs = env_u64("INLET_BENCH_RUNS", 3).max(1) as usize;
    let connections = env_u64("INLET_BENCH_CONNECTIONS", 32).max(1) as usize;
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());

    let server = runtime(SERVER_THREAD);
    let client = runtime(CLIENT_THREAD);
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("meta.db").display());

    let (registry, ids) = server.block_on(async {
        let meta = MetaStore::connect(&url).await.expect("meta store");
        let registry = Arc::new(
            open(meta, RegistryConfig::default())
                .await
                .expect("registry"),
        );
        let mut ids = Vec::new();
        for (subject, schema) in schemas() {
            let req = SchemaRequest {
                schema,
                ..Default::default()
            };
            let (id, _version) = registry.register(&subject, &req).await.expect("register");
            ids.push(id);
        }
        for &id in &ids {
            registry.schema_by_id(id).await.expect("warm the cache");
        }
        (registry, Arc::new(ids))
    });
    let (cached, cached_bytes) = registry.cache_usage();
    assert!(
        cached >= ids.len(),
        "the by-id cache should hold every schema"
    );

    let stop = CancellationToken::new();
    let listener = server
        .block_on(TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let served = server.spawn(serve(listener, registry.clone(), None, stop.clone()));

    // Check one answer's body before timing anything.
    let expected = server
        .block_on(registry.schema_by_id(ids[0]))
        .expect("lookup");
    let body = client.block_on(async {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let req = format!(
            "GET /schemas/ids/{} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
            ids[0]
        );
        s.write_all(req.as_bytes()).await.expect("write");
        let mut buf = Vec::new();
        let (status, length) = read_response(&mut s, &mut buf).await.expect("read");
        assert_eq!(status, 200);
        let start = buf.len() - length;
        buf[start..].to_vec()
    });
    let v: serde_json::Value = serde_json::from_slice(&body).expect("JSON body");
    assert_eq!(v["schema"].as_str(), Some(expected.text.as_str()));

    println!(
        "Schema Registry lookups by id: {} schemas ({} cached, ~{} KiB), {runs} runs × {seconds} s \
         (after {} s warm-up), {connections} keep-alive HTTP/1.1 connections, {cores} cores",
        ids.len(),
        cached,
        cached_bytes / 1024,
        WARMUP.as_secs()
    );
    println!(
        "server: tokio multi-thread runtime, 2 workers; clients: a second 2-worker runtime in the \
         same process — client and server share the {cores} cores"
    );

    let mut rates = Vec::new();
    let mut p50s = Vec::new();
    let mut p99s = Vec::new();
    let mut server_cpu = Vec::new();
    let mut client_cpu = Vec::new();
    for run in 0..runs {
        let r = http_run(&client, addr, &ids, connections, seconds);
        let (p50, p99, p999, max) = (
            ms(r.hist.value_at_quantile(0.50)),
            ms(r.hist.value_at_quantile(0.99)),
            ms(r.hist.value_at_quantile(0.999)),
            ms(r.hist.max()),
        );
        println!(
            "run {run}: HTTP {:.0} req/s; latency p50 {p50:.3} p99 {p99:.3} p999 {p999:.3} max \
             {max:.3} ms; CPU per request: server {:.1} µs, clients {:.1} µs",
            r.rate, r.server_cpu_us, r.client_cpu_us
        );
        rates.push(r.rate);
        p50s.push(p50);
        p99s.push(p99);
        server_cpu.push(r.server_cpu_us);
        client_cpu.push(r.client_cpu_us);
    }

    let mut one = Vec::new();
    let mut two = Vec::new();
    for run in 0..runs {
        let a = in_process_run(&server, &registry, &ids, 1, seconds);
        let b = in_process_run(&server, &registry, &ids, 2, seconds);
        println!(
            "run {run}: in-process schema_by_id: 1 task {:.0}/s ({:.0} ns each), 2 tasks {:.0}/s",
            a,
            1e9 / a,
            b
        );
        one.push(a);
        two.push(b);
    }

    stop.cancel();
    server.block_on(served).expect("serve task").expect("serve");

    let rate = median(&mut rates);
    let server_us = median(&mut server_cpu);
    let one = median(&mut one);
    println!();
    println!("medians of {runs} runs:");
    println!(
        "  HTTP GET /schemas/ids/{{id}}, {connections} connections: {rate:.0} req/s; p50 {:.3} ms, \
         p99 {:.3} ms",
        median(&mut p50s),
        median(&mut p99s)
    );
    println!(
        "  CPU per request: server {server_us:.1} µs, clients {:.1} µs (client and server share \
         the {cores} cores; 2 cores at that CPU cost would serve ~{:.0} req/s to remote clients)",
        median(&mut client_cpu),
        2e6 / server_us
    );
    println!(
        "  in-process schema_by_id: 1 task {one:.0}/s ({:.0} ns each), 2 tasks {:.0}/s; the \
         server's CPU per HTTP request is ~{:.0}× a cached lookup",
        1e9 / one,
        median(&mut two),
        server_us * 1e3 / (1e9 / one)
    );
    println!(
        "  target ≥ 50000 req/s over HTTP: {}",
        if rate >= 50_000.0 { "met" } else { "NOT met" }
    );
}
