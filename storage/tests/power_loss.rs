//! Power loss on the local object folder: every fsync the store makes is recorded, and a
//! simulated power cut then forgets every object file whose data or directory entry was not
//! synced. After the cut the store reopens (its WAL and metadata as the disk kept them) and must
//! hold every acknowledged append.
//!
//! The cut comes at random points: after some appends, some uploads (each of which trims the
//! WAL behind it) and some more appends. A control run with a syncer that syncs nothing shows
//! the simulation does lose data when writes are not synced, so the test can fail.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use inlet_storage::{StorageConfig, StreamStore, SyncedLocalStore, Syncer};
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};

/// Records when each path was last synced (a global sequence number); syncs for real too when
/// `real`, so that files are on disk like an ordinary run's.
#[derive(Debug, Default)]
struct Recorder {
    synced: Mutex<(u64, HashMap<PathBuf, u64>)>,
    /// false: a disk that never syncs (the control).
    effective: bool,
}

impl Syncer for Recorder {
    fn sync(&self, path: &Path) -> std::io::Result<()> {
        std::fs::File::open(path)?.sync_all()?;
        if self.effective {
            let mut s = self.synced.lock();
            s.0 += 1;
            let seq = s.0;
            s.1.insert(path.to_path_buf(), seq);
        }
        Ok(())
    }
}

impl Recorder {
    /// The power cut: deletes every file under `root` that was not synced, or whose directories
    /// (up to `root`) were not synced after it.
    fn cut(&self, root: &Path) -> usize {
        let synced = self.synced.lock().1.clone();
        let mut lost = 0;
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("read dir") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                let kept = synced.get(&path).is_some_and(|&at| {
                    path.ancestors()
                        .skip(1)
                        .take_while(|d| d.starts_with(root))
                        .all(|d| synced.get(d).is_some_and(|&dir_at| dir_at > at))
                });
                if !kept {
                    std::fs::remove_file(&path).expect("forget the file");
                    lost += 1;
                }
            }
        }
        lost
    }
}

fn config() -> StorageConfig {
    StorageConfig {
        wal_segment_bytes: 64 * 1024,
        upload_bytes: 64 << 20,
        object_block_bytes: 4096,
        delete_grace_ms: 0,
        retention_ms: None,
        ..StorageConfig::default()
    }
}

async fn open(dir: &Path, recorder: Arc<Recorder>) -> StreamStore {
    let objects = dir.join("objects");
    std::fs::create_dir_all(&objects).expect("objects dir");
    StreamStore::builder(dir.join("wal"))
        .config(config())
        .meta_url(format!("sqlite://{}", dir.join("meta.db").display()))
        .object_store(Arc::new(
            SyncedLocalStore::new(&objects, recorder).expect("synced store"),
        ))
        .background_tasks(false)
        .open()
        .await
        .expect("store opens")
}

/// Appends, uploads and cuts the power as `seed` says; returns (acked appends, records read
/// back after the cut that match them, files the cut forgot).
async fn run(seed: u64, effective: bool) -> (usize, usize, usize) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().expect("dir");
    let recorder = Arc::new(Recorder {
        effective,
        ..Recorder::default()
    });
    let store = open(dir.path(), recorder.clone()).await;
    let stream = store.create_stream("p").await.expect("stream").id;
    let mut acked: Vec<(u64, Bytes)> = Vec::new();
    let rounds = rng.random_range(1..5);
    for round in 0..rounds {
        for i in 0..rng.random_range(1..40) {
            let len = rng.random_range(10..4000);
            let payload = Bytes::from(format!("r{round}i{i}:{}", "x".repeat(len)));
            let offset = store
                .append(stream, payload.clone(), 1)
                .await
                .expect("append");
            acked.push((offset, payload));
        }
        // Upload (and trim the WAL behind it) in most rounds; the last may leave data in the WAL.
        if round + 1 < rounds || rng.random_bool(0.5) {
            store.flush().await.expect("flush");
        }
    }
    drop(store);
    let lost = recorder.cut(&dir.path().join("objects"));

    let store = open(dir.path(), recorder.clone()).await;
    let stream = store.open_stream("p").expect("stream survives").id;
    let mut found: HashMap<u64, Bytes> = HashMap::new();
    let mut at = 0;
    loop {
        let batches = match store.read(stream, at, 1 << 20).await {
            Ok(b) => b,
            Err(_) => break,
        };
        let Some(last) = batches.last() else { break };
        at = last.end_offset();
        for b in batches {
            found.insert(b.base_offset, b.payload);
        }
    }
    let intact = acked
        .iter()
        .filter(|(offset, payload)| found.get(offset) == Some(payload))
        .count();
    (acked.len(), intact, lost)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_appends_survive_a_power_cut() {
    for seed in 0..12 {
        let (acked, intact, lost) = run(seed, true).await;
        assert_eq!(lost, 0, "seed {seed}: a synced store loses no object file");
        assert_eq!(intact, acked, "seed {seed}: every acked append survives");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulated_cut_loses_unsynced_objects() {
    // A disk that never syncs: uploaded objects are forgotten, and with the WAL trimmed behind
    // them, so is acked data. This is what the real store prevents.
    let mut lost_any = false;
    for seed in 0..4 {
        let (acked, intact, lost) = run(seed, false).await;
        if lost > 0 && intact < acked {
            lost_any = true;
        }
    }
    assert!(lost_any, "the simulation must be able to lose data");
}
