//! Crash test: a child process appends from many tasks at once, with uploads and compaction
//! running in the background, and is killed with SIGKILL at a random moment, many times over the
//! same data directory. After each kill the store is reopened and must hold every append that
//! was acknowledged, at the offset it was acknowledged with, and nothing that was never
//! appended: no duplicates, no torn batches, offsets dense.
//!
//! The child is this test binary itself, re-run with `INLET_CRASH_CHILD_DIR` set.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use inlet_storage::{StorageConfig, StreamStore};
use rand::Rng;

const WRITERS: u32 = 8;

fn config() -> StorageConfig {
    StorageConfig {
        wal_segment_bytes: 256 * 1024,
        upload_bytes: 256 * 1024,
        upload_interval_ms: 30,
        maintenance_interval_ms: 40,
        object_block_bytes: 4096,
        compaction_small_object_bytes: 512 * 1024,
        stream_object_min_bytes: 1 << 20,
        delete_grace_ms: 0,
        retention_ms: None,
        ..StorageConfig::default()
    }
}

async fn open(dir: &Path, background: bool) -> StreamStore {
    StreamStore::builder(dir.join("wal"))
        .config(config())
        .background_tasks(background)
        .open()
        .await
        .expect("store opens")
}

fn payload(writer: u32, seq: u64, len: usize) -> Bytes {
    let mut v = format!("w{writer}:s{seq}:l{len}:").into_bytes();
    v.resize(len.max(v.len()), b'.');
    Bytes::from(v)
}

/// Parses a payload back into (writer, seq); panics on anything that is not one whole payload.
fn parse(p: &[u8]) -> (u32, u64) {
    let text = std::str::from_utf8(p).expect("payload is text");
    let mut parts = text.splitn(4, ':');
    let w = parts
        .next()
        .and_then(|w| w.strip_prefix('w'))
        .expect("writer");
    let s = parts.next().and_then(|s| s.strip_prefix('s')).expect("seq");
    let l: usize = parts
        .next()
        .and_then(|l| l.strip_prefix('l'))
        .expect("len")
        .parse()
        .expect("len number");
    assert_eq!(l.max(text.len()), p.len(), "payload length intact");
    assert!(
        parts.next().expect("padding").bytes().all(|b| b == b'.'),
        "padding intact"
    );
    (
        w.parse().expect("writer id"),
        s.parse().expect("seq number"),
    )
}

/// The child: append as fast as possible from many tasks until killed, printing each ack.
/// Not a test of its own: `appends_survive_sigkill` runs it (hence ignored).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of appends_survive_sigkill"]
async fn crash_child() {
    let dir = std::env::var("INLET_CRASH_CHILD_DIR").expect("run by appends_survive_sigkill");
    let first_seq: u64 = std::env::var("INLET_CRASH_FIRST_SEQ")
        .unwrap()
        .parse()
        .unwrap();
    let store = Arc::new(open(Path::new(&dir), true).await);
    let stream = match store.open_stream("crash") {
        Ok(s) => s.id,
        Err(_) => store.create_stream("crash").await.expect("create").id,
    };
    println!("READY");
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..WRITERS {
        let store = store.clone();
        tasks.spawn(async move {
            let mut seq = first_seq;
            loop {
                let (len, count) = {
                    let mut rng = rand::rng();
                    (rng.random_range(10..3000), rng.random_range(1..4u32))
                };
                let base = store
                    .append(stream, payload(w, seq, len), count)
                    .await
                    .expect("append");
                println!("ACK {w} {seq} {base} {count}");
                seq += 1;
            }
        });
    }
    while tasks.join_next().await.is_some() {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_survive_sigkill() {
    let iterations: u64 = std::env::var("INLET_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    // (writer, seq) → (base offset, record count) of every acknowledged append.
    let mut acked: HashMap<(u32, u64), (u64, u32)> = HashMap::new();
    let mut rng = rand::rng();
    for iteration in 0..iterations {
        let mut child = Command::new(&exe)
            .args([
                "crash_child",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("INLET_CRASH_CHILD_DIR", dir.path())
            .env("INLET_CRASH_FIRST_SEQ", (iteration * 1_000_000).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Wait for the child to be appending, then let it run a random while and kill it.
        // (libtest prints its own lines first.)
        while !rx
            .recv_timeout(Duration::from_secs(60))
            .expect("child starts")
            .ends_with("READY")
        {}
        rx.recv_timeout(Duration::from_secs(30)).expect("first ack");
        std::thread::sleep(Duration::from_millis(rng.random_range(20..700)));
        child.kill().expect("SIGKILL"); // std's kill is SIGKILL on Unix
        child.wait().unwrap();
        reader.join().unwrap();
        let mut new_acks = 0;
        for line in rx.try_iter() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() != 5 || f[0] != "ACK" {
                continue; // a line cut by the kill
            }
            let key = (f[1].parse().unwrap(), f[2].parse().unwrap());
            acked.insert(key, (f[3].parse().unwrap(), f[4].parse().unwrap()));
            new_acks += 1;
        }

        let store = open(dir.path(), false).await;
        store.check_invariants().expect("invariants after crash");
        let stream = store.open_stream("crash").expect("stream exists").id;
        let end = store.end_offset(stream).unwrap();
        let mut seen: HashMap<(u32, u64), (u64, u32)> = HashMap::new();
        let mut at = 0;
        while at < end {
            for b in store.read(stream, at, 1 << 20).await.expect("read") {
                assert_eq!(b.base_offset, at, "offsets are dense");
                let key = parse(&b.payload);
                assert!(
                    seen.insert(key, (b.base_offset, b.record_count)).is_none(),
                    "append {key:?} is stored twice"
                );
                at = b.end_offset();
            }
        }
        for (key, place) in &acked {
            assert_eq!(
                seen.get(key),
                Some(place),
                "iteration {iteration}: acknowledged append {key:?} lost or moved"
            );
        }
        eprintln!(
            "iteration {iteration}: {new_acks} new acks, {} acked in all, {} stored, end offset {end}",
            acked.len(),
            seen.len()
        );
        store.close().await;
    }
    assert!(acked.len() as u64 > iterations, "the child made progress");
}
