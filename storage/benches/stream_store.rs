//! Stream store load benchmark, measured against the raw disk in the same run.
//!
//! ```text
//! cargo bench -p inlet-storage --bench stream_store
//! ```
//!
//! Environment: `INLET_BENCH_DIR` (default: the system temp dir; put it on the disk you want to
//! measure), `INLET_BENCH_SECONDS` (duration of each timed phase, default 10),
//! `INLET_BENCH_RUNS` (repetitions of each phase; medians are reported, default 3),
//! `INLET_BENCH_OBJECT_STORE` (object store URL; default: a folder beside the WAL, as in the
//! embedded default), `INLET_BENCH_NO_UPLOAD` (set: upload thresholds so high that the phases
//! measure the WAL alone).
//!
//! Phases:
//! 1. raw disk: sequential 1 MiB writes each followed by `fdatasync` (MiB/s), and 4 KiB
//!    write + `fdatasync` latency (p50/p99);
//! 2. durable append throughput with 64 concurrent writers × 16 KiB;
//! 3. durable append latency at 50 MiB/s offered load (open loop: appends are issued on a fixed
//!    schedule whether or not earlier ones finished), beside the raw disk doing the same job with
//!    an ideal group commit (one thread, one write + `fdatasync` for everything due);
//! 4. tail reads from the log cache and catch-up reads from objects after a restart (MiB/s);
//! 5. peak resident memory against the configured cache budgets.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use inlet_storage::{StorageConfig, StreamStore};

const MIB: f64 = 1024.0 * 1024.0;

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

use inlet_test_support::raw_disk::{
    raw_fsync_latency, raw_group_commit_latency, raw_sequential_mib_s,
};

fn config() -> StorageConfig {
    let no_upload = std::env::var("INLET_BENCH_NO_UPLOAD").is_ok();
    StorageConfig {
        retention_ms: None,
        upload_bytes: if no_upload { 1 << 29 } else { 64 << 20 },
        log_cache_bytes: if no_upload { 1 << 30 } else { 512 << 20 },
        upload_interval_ms: if no_upload { 3_600_000 } else { 10_000 },
        ..StorageConfig::default()
    }
}

async fn open(dir: &Path) -> StreamStore {
    StreamStore::builder(dir.join("wal"))
        .config(config())
        .open()
        .await
        .unwrap()
}

/// 64 writers append 16 KiB batches as fast as they can; returns MiB/s.
async fn append_throughput(dir: &Path, seconds: u64) -> f64 {
    let store = Arc::new(open(dir).await);
    let stream = store.create_stream("throughput").await.unwrap().id;
    let payload = Bytes::from(vec![0xabu8; 16 * 1024]);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..64 {
        let store = store.clone();
        let payload = payload.clone();
        tasks.spawn(async move {
            let mut bytes = 0u64;
            while Instant::now() < deadline {
                store.append(stream, payload.clone(), 1).await.unwrap();
                bytes += payload.len() as u64;
            }
            bytes
        });
    }
    let mut total = 0;
    while let Some(r) = tasks.join_next().await {
        total += r.unwrap();
    }
    let rate = total as f64 / MIB / start.elapsed().as_secs_f64();
    Arc::try_unwrap(store).unwrap().close().await;
    rate
}

/// Appends of 16 KiB issued at `mib_s` on a fixed schedule; returns the latency histogram (µs).
async fn append_latency(dir: &Path, seconds: u64, mib_s: f64) -> Histogram<u64> {
    let store = Arc::new(open(dir).await);
    let stream = store.create_stream("latency").await.unwrap().id;
    let payload = Bytes::from(vec![0xcdu8; 16 * 1024]);
    let per_second = mib_s * MIB / payload.len() as f64;
    let interval = Duration::from_secs_f64(1.0 / per_second);
    let count = (per_second * seconds as f64) as u64;
    // The schedule runs on its own thread with precise sleeps: tokio's timer ticks in whole
    // milliseconds and would add its own lateness to every latency.
    let handle = tokio::runtime::Handle::current();
    let issuer = std::thread::spawn(move || {
        let start = Instant::now();
        let mut tasks = Vec::with_capacity(count as usize);
        for i in 0..count {
            let due = start + interval.mul_f64(i as f64);
            let now = Instant::now();
            if now < due {
                std::thread::sleep(due - now);
            }
            let store = store.clone();
            let payload = payload.clone();
            tasks.push(handle.spawn(async move {
                // Latency counts from when the append was due, so a late issue shows up too.
                store.append(stream, payload, 1).await.unwrap();
                let us = due.elapsed().as_micros() as u64;
                if us > 20_000 && std::env::var("INLET_BENCH_TRACE").is_ok() {
                    eprintln!("slow append due at {:?}: {us} µs", due - start);
                }
                us
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
    Arc::try_unwrap(store).unwrap().close().await;
    hist
}

/// Reads `stream` from `from` to its end in 1 MiB reads, copying each batch out as a consumer
/// writing to a socket would; returns MiB/s.
async fn read_rate(store: &StreamStore, stream: u64, from: u64) -> f64 {
    let end = store.end_offset(stream).unwrap();
    let start = Instant::now();
    let mut bytes = 0u64;
    let mut at = from;
    let mut out = Vec::with_capacity(2 << 20);
    while at < end {
        out.clear();
        for b in store.read(stream, at, 1 << 20).await.unwrap() {
            out.extend_from_slice(&b.payload);
            bytes += b.payload.len() as u64;
            at = b.end_offset();
        }
        std::hint::black_box(&out);
    }
    bytes as f64 / MIB / start.elapsed().as_secs_f64()
}

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Writes back every dirty page (the previous phase's object files, which the local object store
/// does not fsync) so that a phase does not pay for the one before it.
/// Also hands memory freed by the previous phase back to the OS, so each phase's peak RSS is its
/// own and not the allocator's leftovers.
fn settle() {
    // SAFETY: sync(2) takes no arguments and cannot fail; malloc_trim(3) only releases free
    // memory of glibc's heap.
    unsafe {
        libc::sync();
        libc::malloc_trim(0);
    }
}

/// Resets the kernel's peak-RSS mark (`VmHWM`) so the next phase is measured on its own.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn fresh(base: &Path, name: &str) -> PathBuf {
    let dir = base.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks benches to list their tests
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("INLET_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let seconds = env_u64("INLET_BENCH_SECONDS", 10);
    let runs = env_u64("INLET_BENCH_RUNS", 3);
    let base = std::env::var("INLET_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir())
        .join(format!("inlet-bench-{}", std::process::id()));
    std::fs::create_dir_all(&base).unwrap();
    let rss_start_kib = status_kib("VmRSS:");

    let mut raw_seq = Vec::new();
    let mut raw_p50 = Vec::new();
    let mut raw_p99 = Vec::new();
    let mut raw_group_p99 = Vec::new();
    let mut thr_ratio = Vec::new();
    let mut lat_peak = Vec::new();
    let mut thr_peak = Vec::new();
    let mut p99_vs_fsync = Vec::new();
    let mut p99_vs_group = Vec::new();
    let mut thr = Vec::new();
    let mut lat_p50 = Vec::new();
    let mut lat_p99 = Vec::new();
    for run in 0..runs {
        settle();
        raw_seq.push(raw_sequential_mib_s(&base, seconds));
        settle();
        let h = raw_fsync_latency(&base, seconds);
        raw_p50.push(h.value_at_quantile(0.5) as f64 / 1000.0);
        raw_p99.push(h.value_at_quantile(0.99) as f64 / 1000.0);
        settle();
        let h = raw_group_commit_latency(&base, seconds, 50.0, 16 * 1024);
        raw_group_p99.push(h.value_at_quantile(0.99) as f64 / 1000.0);
        settle();
        reset_peak_rss();
        let h = append_latency(&fresh(&base, &format!("lat{run}")), seconds, 50.0).await;
        lat_p50.push(h.value_at_quantile(0.5) as f64 / 1000.0);
        lat_p99.push(h.value_at_quantile(0.99) as f64 / 1000.0);
        lat_peak.push(status_kib("VmHWM:") as f64 / 1024.0);
        settle();
        reset_peak_rss();
        thr.push(append_throughput(&fresh(&base, &format!("thr{run}")), seconds).await);
        thr_peak.push(status_kib("VmHWM:") as f64 / 1024.0);
        let _ = std::fs::remove_dir_all(base.join(format!("thr{run}")));
        let _ = std::fs::remove_dir_all(base.join(format!("lat{run}")));
        let r = run as usize;
        thr_ratio.push(thr[r] / raw_seq[r]);
        p99_vs_fsync.push(lat_p99[r] / raw_p99[r]);
        p99_vs_group.push(lat_p99[r] / raw_group_p99[r]);
        eprintln!(
            "run {run}: raw {:.0} MiB/s, raw 4K fsync p99 {:.2} ms, raw group p99 {:.2} ms, append {:.0} MiB/s, append p99 {:.2} ms",
            raw_seq[run as usize], raw_p99[run as usize], raw_group_p99[run as usize], thr[run as usize], lat_p99[run as usize]
        );
    }

    reset_peak_rss();
    settle();
    // Reads: tail from the log cache, then catch-up from objects after a restart.
    let dir = fresh(&base, "reads");
    let store = Arc::new(open(&dir).await);
    let stream = store.create_stream("reads").await.unwrap().id;
    let payload = Bytes::from(vec![0xeeu8; 64 * 1024]);
    let batches = (256.0 * MIB) as usize / payload.len();
    for _ in 0..batches / 64 {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..64 {
            let store = store.clone();
            let p = payload.clone();
            tasks.spawn(async move { store.append(stream, p, 1).await.unwrap() });
        }
        while tasks.join_next().await.is_some() {}
    }
    let end = store.end_offset(stream).unwrap();
    let tail_from = end.saturating_sub(((128.0 * MIB) as usize / payload.len()) as u64);
    let tail = read_rate(&store, stream, tail_from).await;
    store.flush().await.unwrap();
    Arc::try_unwrap(store).unwrap().close().await;
    let store = open(&dir).await;
    settle();
    let catch_up = read_rate(&store, stream, 0).await;
    let stats = store.stats();
    store.close().await;

    let read_peak_kib = status_kib("VmHWM:");
    let budgets = config().log_cache_bytes + config().block_cache_bytes;
    let _ = std::fs::remove_dir_all(&base);

    let raw = median(raw_seq);
    let raw99 = median(raw_p99);
    let thr_m = median(thr);
    let p99 = median(lat_p99);
    println!("| measure | value | ratio |");
    println!("|---|---|---|");
    println!("| raw fsynced sequential 1 MiB writes | {raw:.0} MiB/s | 1.00 |");
    println!(
        "| raw 4 KiB write+fdatasync p50 / p99 | {:.2} / {raw99:.2} ms | 1.00 |",
        median(raw_p50)
    );
    println!(
        "| durable append, 64 writers × 16 KiB | {thr_m:.0} MiB/s | {:.2} of raw bandwidth |",
        thr_m / raw
    );
    let raw_group = median(raw_group_p99);
    println!("| raw disk group commit at 50 MiB/s offered (16 KiB chunks), p99 | {raw_group:.2} ms | 1.00 |");
    println!("| durable append p50 / p99 at 50 MiB/s offered | {:.2} / {p99:.2} ms | p99 {:.2}× raw 4 KiB fsync p99; {:.2}× raw group commit p99 |", median(lat_p50), median(p99_vs_fsync), median(p99_vs_group));
    println!("| tail read (log cache), 64 KiB batches | {tail:.0} MiB/s | |");
    println!("| catch-up read (objects, cold cache) | {catch_up:.0} MiB/s | block cache hits {} / misses {} |", stats.block_cache_hits, stats.block_cache_misses);
    println!(
        "| peak RSS, latency phase / throughput phase (median; max) | {:.0} / {:.0} MiB; {:.0} / {:.0} MiB (start {:.0} MiB) | log cache budget {:.0} MiB |",
        median(lat_peak.clone()),
        median(thr_peak.clone()),
        lat_peak.iter().cloned().fold(0.0, f64::max),
        thr_peak.iter().cloned().fold(0.0, f64::max),
        rss_start_kib as f64 / 1024.0,
        config().log_cache_bytes as f64 / MIB
    );
    println!(
        "| peak RSS, read phases | {:.0} MiB | log cache + block cache budgets {:.0} MiB |",
        read_peak_kib as f64 / 1024.0,
        budgets as f64 / MIB
    );
    println!(
        "\n({runs} runs of {seconds} s per phase; medians; ratios are medians of per-run ratios)"
    );
}
