//! The object-store WAL (`wal = "object"`) against an object store whose every PUT takes an
//! injected latency (30 ms by default), as S3's do: one store, the appends of one node.
//!
//! ```text
//! cargo bench -p inlet-storage --bench object_wal
//! ```
//!
//! Environment: `INLET_BENCH_SECONDS` (each timed phase, default 10), `INLET_BENCH_RUNS`
//! (repetitions; medians are reported, default 3), `INLET_BENCH_PUT_MS` (the injected PUT
//! latency, default 30), `INLET_BENCH_POSTGRES_URL` (a PostgreSQL database for the metadata
//! store, as in a cluster; default SQLite in a temp dir), `INLET_BENCH_IN_FLIGHT`
//! (`object_wal_in_flight`, default the store's), `INLET_BENCH_MIN_INTERVAL_MS`
//! (`object_wal_min_interval_ms`, default the store's), `INLET_BENCH_RATES` (the offered
//! loads of the latency phase in MiB/s, default `2,20`).
//!
//! Phases, each on a fresh store:
//! 1. throughput: 256 writers append 64 KiB batches to 12 streams as fast as they can (MiB/s);
//!    the same with no injected latency, as the baseline of the same run;
//! 2. latency at each offered load (open loop: 16 KiB appends issued on a fixed schedule,
//!    latency counted from when each was due): p50 / p99 / max, and the WAL objects (PUTs)
//!    written per second.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a benchmark: a failed step fails it, and its clocks are real time

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use inlet_storage::{
    open_object_store, Fault, FaultyStore, MetaStore, Op, StorageConfig, StreamStore, WalKind,
};

const MIB: f64 = 1024.0 * 1024.0;
const STREAMS: usize = 12;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

/// A fresh store with the object-store WAL, its PUTs delayed by `put_ms`, and its streams.
async fn open(dir: &std::path::Path, put_ms: u64) -> (Arc<StreamStore>, Vec<u64>) {
    let objects = FaultyStore::new(open_object_store("memory://").unwrap());
    if put_ms > 0 {
        objects.inject(Op::Put, Fault::Delay(Duration::from_millis(put_ms)), None);
    }
    let meta_url = match std::env::var("INLET_BENCH_POSTGRES_URL") {
        Ok(url) => url,
        Err(_) => format!("sqlite://{}", dir.join("meta.db").display()),
    };
    let defaults = StorageConfig::default();
    let config = StorageConfig {
        wal: Some(WalKind::Object),
        retention_ms: None,
        maintenance_interval_ms: 3_600_000,
        object_wal_in_flight: env_u64(
            "INLET_BENCH_IN_FLIGHT",
            defaults.object_wal_in_flight as u64,
        ) as usize,
        object_wal_min_interval_ms: env_u64(
            "INLET_BENCH_MIN_INTERVAL_MS",
            defaults.object_wal_min_interval_ms,
        ),
        ..defaults
    };
    let store = StreamStore::builder(dir.join("wal"))
        .config(config)
        .meta(MetaStore::connect(&meta_url).await.unwrap())
        .object_store(Arc::new(objects))
        .open()
        .await
        .unwrap();
    let mut streams = Vec::new();
    for i in 0..STREAMS {
        // Unique per run: a PostgreSQL database may be reused.
        let name = format!("bench/{}/{}/{i}", std::process::id(), rand::random::<u64>());
        streams.push(store.create_stream(&name).await.unwrap().id);
    }
    (Arc::new(store), streams)
}

/// `INLET_BENCH_WRITERS` writers append 64 KiB batches round robin over the streams; returns
/// MiB/s.
async fn throughput(put_ms: u64, seconds: u64) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let (store, streams) = open(dir.path(), put_ms).await;
    let payload = Bytes::from(vec![0xabu8; 64 * 1024]);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..env_u64("INLET_BENCH_WRITERS", 256) as usize {
        let (store, payload, streams) = (store.clone(), payload.clone(), streams.clone());
        tasks.spawn(async move {
            let mut bytes = 0u64;
            let mut i = w;
            while Instant::now() < deadline {
                store
                    .append(streams[i % streams.len()], payload.clone(), 1)
                    .await
                    .unwrap();
                bytes += payload.len() as u64;
                i += 1;
            }
            bytes
        });
    }
    let mut total = 0;
    while let Some(r) = tasks.join_next().await {
        total += r.unwrap();
    }
    let rate = total as f64 / MIB / start.elapsed().as_secs_f64();
    let stats = store.stats();
    eprintln!(
        "  PUT {put_ms} ms: {rate:.1} MiB/s in {} WAL objects (mean {:.1} ms from cut to commit)",
        stats.wal_syncs,
        stats.wal_sync_micros_total as f64 / stats.wal_syncs.max(1) as f64 / 1000.0
    );
    Arc::try_unwrap(store).unwrap().close().await;
    rate
}

/// 16 KiB appends issued at `mib_s` on a fixed schedule; the latency histogram (µs) and the
/// WAL objects written per second.
async fn latency(put_ms: u64, seconds: u64, mib_s: f64) -> (Histogram<u64>, f64) {
    let dir = tempfile::tempdir().unwrap();
    let (store, streams) = open(dir.path(), put_ms).await;
    let payload = Bytes::from(vec![0xcdu8; 16 * 1024]);
    let per_second = mib_s * MIB / payload.len() as f64;
    let interval = Duration::from_secs_f64(1.0 / per_second);
    let count = (per_second * seconds as f64) as u64;
    // The schedule runs on its own thread with precise sleeps (tokio's timer ticks in whole
    // milliseconds).
    let handle = tokio::runtime::Handle::current();
    let start = Instant::now();
    let issuer = std::thread::spawn(move || {
        let start = Instant::now();
        let mut tasks = Vec::with_capacity(count as usize);
        for i in 0..count {
            let due = start + interval.mul_f64(i as f64);
            let now = Instant::now();
            if now < due {
                std::thread::sleep(due - now);
            }
            let (store, payload) = (store.clone(), payload.clone());
            let stream = streams[i as usize % streams.len()];
            tasks.push(handle.spawn(async move {
                store.append(stream, payload, 1).await.unwrap();
                due.elapsed().as_micros() as u64
            }));
        }
        (tasks, store)
    });
    let (tasks, store) = tokio::task::spawn_blocking(move || issuer.join().unwrap())
        .await
        .unwrap();
    let mut hist = Histogram::<u64>::new(3).unwrap();
    for task in tasks {
        hist.record(task.await.unwrap()).unwrap();
    }
    let objects_per_second = store.stats().wal_syncs as f64 / start.elapsed().as_secs_f64();
    Arc::try_unwrap(store).unwrap().close().await;
    (hist, objects_per_second)
}

#[tokio::main]
async fn main() {
    let seconds = env_u64("INLET_BENCH_SECONDS", 10);
    let runs = env_u64("INLET_BENCH_RUNS", 3);
    let put_ms = env_u64("INLET_BENCH_PUT_MS", 30);
    let meta = if std::env::var("INLET_BENCH_POSTGRES_URL").is_ok() {
        "PostgreSQL"
    } else {
        "SQLite"
    };
    println!(
        "object-store WAL, {put_ms} ms per PUT, metadata in {meta}, {runs} runs of {seconds} s"
    );
    let (mut slow, mut fast) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        slow.push(throughput(put_ms, seconds).await);
        fast.push(throughput(0, seconds).await);
    }
    let (slow, fast) = (median(slow), median(fast));
    println!(
        "throughput: {slow:.1} MiB/s with {put_ms} ms PUTs, {fast:.1} MiB/s with no injected latency (ratio {:.2})",
        slow / fast
    );
    let rates = std::env::var("INLET_BENCH_RATES").unwrap_or_else(|_| "2,20".into());
    for rate in rates.split(',').map(|r| r.trim().parse::<f64>().unwrap()) {
        let (mut p50, mut p99, mut max, mut puts) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            let (h, objects) = latency(put_ms, seconds, rate).await;
            p50.push(h.value_at_quantile(0.5) as f64 / 1000.0);
            p99.push(h.value_at_quantile(0.99) as f64 / 1000.0);
            max.push(h.max() as f64 / 1000.0);
            puts.push(objects);
        }
        let puts = median(puts);
        println!(
            "latency at {rate} MiB/s: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {puts:.1} WAL objects/s, {:.2} per MiB (medians of {runs} runs)",
            median(p50),
            median(p99),
            median(max),
            puts / rate
        );
    }
}
