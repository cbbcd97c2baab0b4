//! Raw-disk probes shared by the benchmarks (`storage/benches/stream_store.rs` and the root
//! `benches/kafka_load.rs`), so both compare against the same measurement: fsynced sequential
//! bandwidth, 4 KiB `fdatasync` latency, and an ideal group commit at a given load.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

const MIB: f64 = 1024.0 * 1024.0;

/// Creates (or truncates) `path` for writing.
pub fn create(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(path)
        .unwrap()
}

/// Fsynced sequential 1 MiB writes for `seconds`; MiB/s.
pub fn raw_sequential_mib_s(dir: &Path, seconds: u64) -> f64 {
    let path = dir.join("raw-seq");
    let mut file = create(&path);
    let chunk = vec![0x5au8; 1 << 20];
    let start = Instant::now();
    let mut written = 0u64;
    while start.elapsed() < Duration::from_secs(seconds) {
        file.write_all(&chunk).unwrap();
        file.sync_data().unwrap();
        written += chunk.len() as u64;
    }
    let rate = written as f64 / MIB / start.elapsed().as_secs_f64();
    std::fs::remove_file(&path).unwrap();
    rate
}

/// 4 KiB write + `fdatasync`, back to back; latency in µs.
pub fn raw_fsync_latency(dir: &Path, seconds: u64) -> Histogram<u64> {
    let path = dir.join("raw-4k");
    let mut file = create(&path);
    let chunk = vec![0x5au8; 4096];
    let mut hist = Histogram::<u64>::new(3).unwrap();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(seconds) {
        let t = Instant::now();
        file.write_all(&chunk).unwrap();
        file.sync_data().unwrap();
        hist.record(t.elapsed().as_micros() as u64).unwrap();
    }
    std::fs::remove_file(&path).unwrap();
    hist
}

/// The raw disk doing a broker's durable job at the same offered load with no broker around
/// it: `chunk`-byte messages fall due on a fixed schedule; one thread writes everything due
/// with one write and one `fdatasync` (an ideal group commit). Per-message latency (µs) from
/// when each message fell due.
pub fn raw_group_commit_latency(
    dir: &Path,
    seconds: u64,
    mib_s: f64,
    chunk: usize,
) -> Histogram<u64> {
    let path = dir.join("raw-group");
    let mut file = create(&path);
    let max_chunks = (4 << 20) / chunk as u64;
    let interval = Duration::from_secs_f64(chunk as f64 / (mib_s * MIB));
    let count = (seconds as f64 / interval.as_secs_f64()) as u64;
    let buf = vec![0x77u8; chunk * max_chunks as usize];
    let mut hist = Histogram::<u64>::new(3).unwrap();
    let start = Instant::now();
    let mut next = 0u64;
    while next < count {
        let due_next = start + interval.mul_f64(next as f64);
        let now = Instant::now();
        if now < due_next {
            std::thread::sleep(due_next - now);
        }
        let now = Instant::now();
        let due: u64 = (((now - start).as_secs_f64() / interval.as_secs_f64()) as u64 + 1)
            .min(count)
            .min(next + max_chunks);
        let n = (due - next) as usize;
        file.write_all(&buf[..n * chunk]).unwrap();
        file.sync_data().unwrap();
        for i in next..due {
            let t = start + interval.mul_f64(i as f64);
            hist.record(t.elapsed().as_micros() as u64).unwrap();
        }
        next = due;
    }
    std::fs::remove_file(&path).unwrap();
    hist
}
