//! Object store failures: retries with backoff, the WAL kept until an upload commits, orphans
//! of a crash between upload and commit, and back pressure when uploads cannot keep up.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;

use std::time::Duration;

use common::{payload, read_all, read_payloads, Backend, Fixture};
use std::sync::Arc;

use inlet_storage::{Fault, Op};

async fn fixture() -> Fixture {
    Fixture::new(Backend::Local).await.expect("local backend")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_failures_and_timeouts_are_retried() {
    let mut f = fixture().await;
    f.config.retry.attempt_timeout_ms = 200;
    let store = f.open().await;
    let s = store.create_stream("s").await.unwrap().id;
    store.append(s, payload(0, 0, 100), 1).await.unwrap();
    // Two failures, then success: one flush survives them.
    f.objects.inject(Op::Put, Fault::Fail, Some(2));
    store.flush().await.expect("retried past two failures");
    assert_eq!(f.objects.calls(Op::Put), 3);
    // A PUT that hangs past the attempt timeout is abandoned and retried.
    store.append(s, payload(0, 1, 100), 1).await.unwrap();
    f.objects
        .inject(Op::Put, Fault::Delay(Duration::from_secs(5)), Some(1));
    store.flush().await.expect("retried past a timeout");
    // A PUT that landed but reported failure is retried too (PUTs are idempotent).
    store.append(s, payload(0, 2, 100), 1).await.unwrap();
    f.objects.inject(Op::Put, Fault::FailAfterWrite, Some(1));
    store.flush().await.expect("retried past a lost response");
    drop(store);
    let store = f.open().await;
    assert_eq!(read_all(&store, s, 0).await.len(), 3);
    assert!(store.stats().object_reads > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wal_is_kept_until_an_upload_commits_and_a_restart_loses_nothing() {
    let mut f = fixture().await;
    f.config.wal_segment_bytes = 4096;
    let store = f.open().await;
    let s = store.create_stream("s").await.unwrap().id;
    let mut expected = Vec::new();
    for seq in 0..100 {
        let p = payload(0, seq, 200);
        store.append(s, p.clone(), 1).await.unwrap();
        expected.push(p);
    }
    let segments = store.stats().wal_segments;
    assert!(segments > 3, "the WAL rolled: {segments} segments");
    f.objects.inject(Op::Put, Fault::Fail, None);
    let err = store.flush().await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert_eq!(
        store.stats().wal_segments,
        segments,
        "nothing trimmed after a failed upload"
    );
    assert_eq!(f.objects.calls(Op::Put), f.config.retry.max_attempts as u64);
    // Restart while the object store is still down: everything is replayed from the WAL.
    drop(store);
    let store = f.open().await;
    let got = read_payloads(&store, s, 0).await;
    assert_eq!(got, expected);
    // The store comes back: the upload commits and the WAL is trimmed to its active segment.
    f.objects.clear(Op::Put);
    store.flush().await.unwrap();
    assert_eq!(store.stats().wal_segments, 1);
    drop(store);
    let store = f.open().await;
    let got = read_payloads(&store, s, 0).await;
    assert_eq!(got, expected);
    store.check_invariants().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_upload_and_commit_leaves_an_orphan_that_is_collected() {
    let mut f = fixture().await;
    f.config.retry.max_attempts = 1;
    let store = f.open().await;
    let s = store.create_stream("s").await.unwrap().id;
    for seq in 0..10 {
        store.append(s, payload(0, seq, 100), 1).await.unwrap();
    }
    // The PUT lands but the node "dies" before committing: the object is prepared, never
    // committed.
    f.objects.inject(Op::Put, Fault::FailAfterWrite, Some(1));
    assert!(store.flush().await.is_err());
    assert_eq!(
        f.object_keys().await.len(),
        1,
        "the uploaded object is there"
    );
    drop(store);
    let store = f.open().await;
    assert!(
        f.object_keys().await.is_empty(),
        "the orphan was collected at open"
    );
    assert_eq!(
        read_all(&store, s, 0).await.len(),
        10,
        "the data came back from the WAL"
    );
    store.flush().await.unwrap();
    assert_eq!(f.object_keys().await.len(), 1);
    assert_eq!(f.objects.calls(Op::List), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_wait_for_room_when_uploads_fail_and_resume_when_they_succeed() {
    let mut f = fixture().await;
    f.config.log_cache_bytes = 64 * 1024;
    f.config.max_append_bytes = 8 * 1024;
    f.config.upload_bytes = 32 * 1024;
    f.config.retry.max_attempts = 1;
    f.config.upload_interval_ms = 50;
    let store = std::sync::Arc::new(
        inlet_storage::StreamStore::builder(f.wal_dir())
            .config(f.config.clone())
            .meta_url(f.meta_url.clone())
            .object_store(std::sync::Arc::new(f.objects.clone()))
            .open()
            .await
            .unwrap(),
    );
    let s = store.create_stream("s").await.unwrap().id;
    f.objects.inject(Op::Put, Fault::Fail, None);
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for seq in 0..40u64 {
                store.append(s, payload(0, seq, 4096), 1).await.unwrap();
            }
        })
    };
    // 40 × 4 KiB cannot fit in 64 KiB while nothing uploads: the writer must block once the
    // budget holds 16 of them.
    let stuck_at = f.config.log_cache_bytes / 4096;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut end_rx = store.watch_end(s).unwrap();
    while *end_rx.borrow() < stuck_at {
        tokio::time::timeout_at(deadline, end_rx.changed())
            .await
            .expect("progress")
            .unwrap();
    }
    assert!(store.stats().log_cache_used_bytes <= f.config.log_cache_bytes);
    // Wait until the uploader has failed at least twice more, and check appends stayed blocked.
    let puts = f.objects.calls(Op::Put);
    while f.objects.calls(Op::Put) < puts + 2 {
        tokio::time::timeout_at(deadline, tokio::time::sleep(Duration::from_millis(20)))
            .await
            .expect("uploader retries");
    }
    assert_eq!(
        store.end_offset(s).unwrap(),
        stuck_at,
        "appends are held back"
    );
    assert!(!writer.is_finished());
    f.objects.clear(Op::Put);
    tokio::time::timeout(Duration::from_secs(20), writer)
        .await
        .expect("writer resumes")
        .unwrap();
    assert_eq!(store.end_offset(s).unwrap(), 40);
    assert!(store.stats().log_cache_used_bytes <= f.config.log_cache_bytes);
    assert_eq!(read_all(&store, s, 0).await.len(), 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_share_syncs() {
    let f = fixture().await;
    let store = std::sync::Arc::new(f.open().await);
    let s = store.create_stream("s").await.unwrap().id;
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..32u32 {
        let store = store.clone();
        tasks.spawn(async move {
            for seq in 0..20u64 {
                store.append(s, payload(w, seq, 512), 1).await.unwrap();
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    let stats = store.stats();
    assert_eq!(stats.appends, 640);
    eprintln!("{} appends in {} syncs", stats.appends, stats.wal_syncs);
    // With 32 writers waiting on each sync, groups form: far fewer syncs than appends.
    assert!(stats.wal_syncs < stats.appends / 2, "{stats:?}");
    assert_eq!(read_all(&store, s, 0).await.len(), 640);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_appends_give_their_cache_room_back() {
    let mut f = fixture().await;
    f.config.wal_queue_len = 1;
    let store = std::sync::Arc::new(f.open().await);
    let s = store.create_stream("s").await.unwrap().id;
    // Many appends abandoned at their first await: some while waiting for a place in the WAL
    // queue (holding cache room), some after being queued (they still land).
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..64u32 {
        let store = store.clone();
        tasks.spawn(async move {
            for seq in 0..20u64 {
                let append = store.append(s, payload(w, seq, 1000), 1);
                let _ = tokio::time::timeout(Duration::ZERO, append).await;
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    // Let the WAL writer finish what was queued, with one more append behind it.
    store.append(s, payload(999, 0, 1000), 1).await.unwrap();
    let stored: u64 = read_all(&store, s, 0)
        .await
        .iter()
        .map(|b| b.payload.len() as u64)
        .sum();
    assert_eq!(
        store.stats().log_cache_used_bytes,
        stored,
        "the cache accounts exactly the bytes it holds"
    );
    assert!(
        stored < 64 * 20 * 1000 + 1000,
        "some appends were cancelled before the WAL"
    );
}

/// Failing uploads are reported by `health()` (from their first failure, with the error and
/// whether it may pass), and the report clears with the first upload that works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_uploads_are_reported_by_health_until_one_works() {
    let mut f = fixture().await;
    f.config.upload_interval_ms = 20;
    f.config.retry.max_attempts = 1;
    let store = f.open_with_background_tasks().await;
    assert_eq!(store.health(), Default::default(), "healthy at start");
    let s = store.create_stream("s").await.unwrap().id;
    f.objects.inject(Op::Put, Fault::Fail, None);
    store.append(s, payload(0, 0, 100), 1).await.unwrap();
    let failure = wait_for(|| store.health().upload_failure).await;
    assert!(
        failure.retryable,
        "an injected failure may pass: {failure:?}"
    );
    assert!(failure.error.contains("injected"), "{}", failure.error);
    f.objects.clear(Op::Put);
    wait_for(|| store.health().upload_failure.is_none().then_some(())).await;
    assert!(store.health().wal_failed.is_none());
    store.close().await;
}

async fn wait_for<T>(mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A backlog larger than `upload_max_object_bytes` (as after an outage) drains as several
/// bounded objects, and the WAL is trimmed only behind what was uploaded: a crash between the
/// rounds loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_drains_as_bounded_objects() {
    let mut f = fixture().await;
    f.config.upload_max_object_bytes = 64 * 1024;
    f.config.wal_segment_bytes = 16 * 1024;
    let store = f.open().await;
    let s = store.create_stream("s").await.unwrap().id;
    let t = store.create_stream("t").await.unwrap().id;
    let mut expected = Vec::new();
    for seq in 0..100 {
        let p = payload(0, seq, 3000);
        store
            .append(if seq % 2 == 0 { s } else { t }, p.clone(), 1)
            .await
            .unwrap();
        expected.push(p);
    }
    // One round by hand: at most 64 KiB, and the WAL keeps what it left behind.
    let puts = f.objects.calls(Op::Put);
    f.objects.inject(Op::Put, Fault::Fail, None);
    assert!(store.flush().await.is_err(), "the outage");
    f.objects.clear(Op::Put);
    store.flush().await.expect("the backlog drains");
    let objects = f.objects.calls(Op::Put) - puts;
    assert!(
        objects >= 5,
        "300 KB went up as {objects} PUTs of at most 64 KiB"
    );
    drop(store);
    let store = f.open().await;
    let mut got = read_all(&store, s, 0).await;
    got.extend(read_all(&store, t, 0).await);
    assert_eq!(
        got.len(),
        expected.len(),
        "every append survives the reopen"
    );
}

/// An object store outage under load: writers keep appending (waiting for room once the log
/// cache is full of data not uploaded, the back pressure) while every PUT fails; the outage
/// ends, the backlog drains as bounded objects, and every acknowledged append is there after a
/// reopen, once, at its offset. The outage lasts `INLET_TEST_OUTAGE_SECS` (3 s; `scripts/test`
/// makes it three minutes), and the writers go on for 3 s after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_under_load_drains_and_loses_nothing() {
    let mut f = fixture().await;
    f.config.upload_interval_ms = 20;
    f.config.upload_bytes = 64 * 1024;
    f.config.upload_max_object_bytes = 128 * 1024;
    f.config.log_cache_bytes = 2 << 20;
    f.config.wal_segment_bytes = 256 * 1024;
    f.config.retry.max_attempts = 2;
    let store = Arc::new(f.open_with_background_tasks().await);
    let streams: Vec<u64> = futures::future::join_all((0..4).map(|i| {
        let store = store.clone();
        async move { store.create_stream(&format!("s{i}")).await.unwrap().id }
    }))
    .await;
    f.objects.inject(Op::Put, Fault::Fail, None);
    let outage = Duration::from_secs(
        std::env::var("INLET_TEST_OUTAGE_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(3),
    );
    let started = std::time::Instant::now();
    let mut writers = tokio::task::JoinSet::new();
    for (w, &stream) in streams.iter().enumerate() {
        let store = store.clone();
        writers.spawn(async move {
            let mut acked = Vec::new();
            let mut seq = 0u64;
            while started.elapsed() < outage + Duration::from_secs(3) {
                let p = payload(w as u32, seq, 2000);
                let offset = store.append(stream, p.clone(), 1).await.expect("append");
                acked.push((offset, p));
                seq += 1;
            }
            (stream, acked)
        });
    }
    tokio::time::sleep(outage).await;
    let failure = store
        .health()
        .upload_failure
        .expect("uploads fail during the outage");
    assert!(failure.retryable);
    f.objects.clear(Op::Put);
    let mut acked = Vec::new();
    while let Some(done) = writers.join_next().await {
        acked.push(done.expect("writer"));
    }
    let total: usize = acked.iter().map(|(_, a)| a.len()).sum();
    assert!(total > 1000, "the writers kept going: {total} appends");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while store.stats().dirty_bytes > 0 {
        assert!(std::time::Instant::now() < deadline, "the backlog drains");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(store.health().upload_failure.is_none());
    Arc::try_unwrap(store).expect("one owner").close().await;
    let store = f.open().await;
    for (stream, appended) in acked {
        let got = read_all(&store, stream, 0).await;
        assert_eq!(got.len(), appended.len(), "stream {stream}");
        for ((offset, p), b) in appended.iter().zip(&got) {
            assert_eq!((&b.base_offset, &b.payload), (offset, p));
        }
    }
}
