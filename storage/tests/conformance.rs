//! The stream store's conformance suite, run against every backend: in-memory objects with
//! SQLite, a local folder with SQLite (the embedded default), and a real S3-compatible server
//! with PostgreSQL (the cluster setup).
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;

use bytes::Bytes;
use common::{payload, read_all, read_payloads, Backend, Fixture};
use inlet_storage::{AppendOptions, ErrorKind, Op};

macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {
        mod memory { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { if let Some(f) = super::Fixture::new(super::Backend::Memory).await { super::$name(f).await } } )* }
        mod local { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { if let Some(f) = super::Fixture::new(super::Backend::Local).await { super::$name(f).await } } )* }
        mod s3_postgres { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { if let Some(f) = super::Fixture::new(super::Backend::S3Postgres).await { super::$name(f).await } } )* }
    };
}

on_every_backend!(
    append_read_and_restart,
    uploads_serve_catch_up_reads,
    write_base_offset_fills_the_payload,
    trim_and_retention_expire_objects,
    a_table_hold_keeps_what_the_table_has_not_committed,
    compaction_merges_and_builds_stream_objects,
    rewrite_in_place_keeps_offsets_and_survives_a_restart,
    delete_stream_collects_its_objects,
    bad_requests_get_clear_errors,
);

async fn append_read_and_restart(f: Fixture) {
    let store = f.open().await;
    let a = store.create_stream("a").await.expect("create a").id;
    let b = store.create_stream("b").await.expect("create b").id;
    let mut expected_a = Vec::new();
    for seq in 0..50u64 {
        let count = (seq % 3 + 1) as u32;
        let base = store
            .append(a, payload(0, seq, 100), count)
            .await
            .expect("append");
        expected_a.push((base, count, payload(0, seq, 100)));
        store
            .append(b, payload(1, seq, 10), 1)
            .await
            .expect("append b");
    }
    // Offsets are dense and start at zero.
    let mut next = 0;
    for (base, count, _) in &expected_a {
        assert_eq!(*base, next);
        next += *count as u64;
    }
    assert_eq!(store.end_offset(a).unwrap(), next);
    let check = |batches: Vec<inlet_storage::ReadBatch>| {
        let got: Vec<_> = batches
            .into_iter()
            .map(|b| (b.base_offset, b.record_count, b.payload))
            .collect();
        assert_eq!(got, expected_a);
    };
    check(read_all(&store, a, 0).await);
    // A read from the middle of a batch starts with the batch holding that offset.
    let mid = store.read(a, 2, 1).await.expect("read");
    assert_eq!(
        mid[0].base_offset, 1,
        "offset 2 lies in the batch at 1 (2 records)"
    );
    assert_eq!(mid.len(), 1, "max_bytes limits the batches (at least one)");
    store.check_invariants().expect("invariants");
    let stats = store.stats();
    assert!(
        stats.wal_syncs >= 1 && stats.wal_syncs <= stats.appends,
        "{stats:?}"
    );
    assert!(stats.wal_bytes >= stats.appended_bytes, "{stats:?}");

    // Crash (drop without close): everything comes back from the WAL.
    drop(store);
    let store = f.open().await;
    assert_eq!(store.open_stream("a").expect("a exists").id, a);
    check(read_all(&store, a, 0).await);
    assert_eq!(read_all(&store, b, 0).await.len(), 50);
    // Appends continue at the right offset.
    assert_eq!(store.append(a, payload(0, 99, 5), 1).await.unwrap(), next);
    store.close().await;

    // Upload, then restart: the data now comes from objects.
    let store = f.open().await;
    store.flush().await.expect("flush");
    assert!(store.stats().uploads >= 1);
    store.close().await;
    let store = f.open().await;
    let all = read_all(&store, a, 0).await;
    assert_eq!(all.len(), 51);
    assert!(store.stats().object_reads > 0, "reads came from objects");
    assert_eq!(
        f.objects.calls(Op::List),
        0,
        "the store never lists the object store"
    );
    store.check_invariants().expect("invariants");
}

async fn uploads_serve_catch_up_reads(f: Fixture) {
    let store = f.open().await;
    let s = store.create_stream("s").await.unwrap().id;
    let mut payloads = Vec::new();
    for seq in 0..400u64 {
        let p = payload(0, seq, 200 + (seq as usize % 300));
        store.append(s, p.clone(), 1).await.unwrap();
        payloads.push(p);
        if seq % 100 == 99 {
            store.flush().await.unwrap();
        }
    }
    store.close().await;
    let store = f.open().await;
    let gets_before = f.objects.calls(Op::Get);
    let got = read_payloads(&store, s, 0).await;
    assert_eq!(got, payloads);
    let gets = f.objects.calls(Op::Get) - gets_before;
    // ~140 KiB in 1 KiB blocks: read-ahead of 4 KiB must need far fewer GETs than blocks.
    assert!(gets < 80, "sequential catch-up read took {gets} GETs");
    // A second pass is served by the block cache where it fits.
    let stats = store.stats();
    assert!(stats.block_cache_hits > 0, "{stats:?}");
    assert!(stats.block_cache_used_bytes <= f.config.block_cache_bytes);
    assert_eq!(f.objects.calls(Op::List), 0);
}

async fn write_base_offset_fills_the_payload(f: Fixture) {
    let store = f.open().await;
    let s = store.create_stream("kafkaish").await.unwrap().id;
    let opts = AppendOptions {
        write_base_offset: true,
        timestamp_ms: Some(42),
        ..AppendOptions::default()
    };
    store
        .append(s, Bytes::from(vec![0xff; 20]), 3)
        .await
        .unwrap();
    let base = store
        .append_with(s, Bytes::from(vec![0xff; 20]), 2, opts)
        .await
        .unwrap();
    assert_eq!(base, 3);
    let check = |batches: Vec<inlet_storage::ReadBatch>| {
        assert_eq!(batches[1].payload[..8], 3u64.to_be_bytes());
        assert_eq!(batches[1].payload[8..], [0xff; 12]);
        assert_eq!(batches[1].timestamp_ms, 42);
        assert_eq!(
            batches[0].payload[..],
            [0xff; 20],
            "untouched without the option"
        );
    };
    check(read_all(&store, s, 0).await);
    drop(store);
    let store = f.open().await; // from the WAL
    check(read_all(&store, s, 0).await);
    store.flush().await.unwrap();
    drop(store);
    let store = f.open().await; // from an object
    check(read_all(&store, s, 0).await);
}

async fn trim_and_retention_expire_objects(mut f: Fixture) {
    f.config.retention_ms = Some(60_000);
    let store = f.open().await;
    let s = store.create_stream("r").await.unwrap().id;
    for seq in 0..10 {
        store.append(s, payload(0, seq, 50), 1).await.unwrap();
    }
    store.flush().await.unwrap();
    f.clock.advance(30_000);
    for seq in 10..20 {
        store.append(s, payload(0, seq, 50), 1).await.unwrap();
    }
    store.flush().await.unwrap();
    f.clock.advance(40_000); // the first object's data is now 70 s old, the second's 40 s
    let report = store.run_maintenance().await.unwrap();
    assert_eq!(report.ranges_expired, 1, "{report:?}");
    assert_eq!(store.start_offset(s).unwrap(), 10);
    let err = store.read(s, 5, 100).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadInput, "{err}");
    assert_eq!(read_all(&store, s, 10).await.len(), 10);
    // The expired object goes after the grace period.
    let keys_before = f.object_keys().await.len();
    f.clock.advance(f.config.delete_grace_ms + 1);
    let report = store.run_maintenance().await.unwrap();
    assert_eq!(report.objects_deleted, 1, "{report:?}");
    assert_eq!(f.object_keys().await.len(), keys_before - 1);

    // Trim past the remaining object: it goes too; data still in the cache stays readable.
    for seq in 20..25 {
        store.append(s, payload(0, seq, 50), 1).await.unwrap();
    }
    store.trim(s, 22).await.unwrap();
    assert_eq!(store.start_offset(s).unwrap(), 22);
    assert_eq!(read_all(&store, s, 22).await.len(), 3);
    store.run_maintenance().await.unwrap();
    store.check_invariants().unwrap();
    drop(store);
    let store = f.open().await;
    assert_eq!(store.start_offset(s).unwrap(), 22, "trim is durable");
    assert_eq!(read_all(&store, s, 22).await.len(), 3);

    // Retention by bytes keeps at most the configured size in objects.
    store.flush().await.unwrap();
    store.set_retention(s, Some(-1), Some(100)).await.unwrap();
    for seq in 25..45 {
        store.append(s, payload(0, seq, 50), 1).await.unwrap();
        store.flush().await.unwrap();
    }
    store.run_maintenance().await.unwrap();
    let start = store.start_offset(s).unwrap();
    let held = read_all(&store, s, start).await;
    assert!(
        held.len() <= 3 && !held.is_empty(),
        "kept {} batches",
        held.len()
    );
    assert_eq!(held.last().unwrap().end_offset(), 45);
    store.check_invariants().unwrap();
}

/// A stream held for a table: retention by time and by bytes expires only ranges that the
/// table's floor passed, whatever their age or the stream's size; the held bytes and the lag
/// are reported; the floor never goes down, survives a restart, and ending the hold lets
/// retention take the rest. An explicit trim is not held.
async fn a_table_hold_keeps_what_the_table_has_not_committed(mut f: Fixture) {
    // One range per object: a merge would join them (and the hold then keeps the merged range
    // until the table passes its end: more, never less).
    f.config.compaction_small_object_bytes = 0;
    let store = f.open().await;
    let s = store.create_stream("held").await.unwrap().id;
    store.hold_for_table(s, true).await.unwrap();
    store
        .set_retention(s, Some(10_000), Some(100))
        .await
        .unwrap();
    // Five objects of two batches (ten records) each.
    for object in 0..5u64 {
        for seq in 0..2 {
            store
                .append(s, payload(0, object * 10 + seq, 200), 5)
                .await
                .unwrap();
        }
        store.flush().await.unwrap();
    }
    f.clock.advance(60_000); // every object is past retention.ms, and past retention.bytes
    let lag = store.table_lag_bytes(s).expect("held and owned");
    assert_eq!(lag.floor, 0);
    assert!(lag.lag_bytes > 0, "{lag:?}");
    let report = store.run_maintenance().await.unwrap();
    assert_eq!(
        report.ranges_expired, 0,
        "nothing is committed to the table yet"
    );
    assert_eq!(store.start_offset(s).unwrap(), 0);
    // Everything is uploaded and past retention: all of it is held for the table.
    let all_held = store.table_lag_bytes(s).unwrap();
    assert_eq!(all_held.held_bytes, lag.lag_bytes, "{all_held:?}");

    // The table committed 25 records: the two objects wholly below go, the one across stays.
    store.raise_table_floor(s, 25).await.unwrap();
    store.raise_table_floor(s, 12).await.unwrap(); // never lowered
    let report = store.run_maintenance().await.unwrap();
    assert_eq!(report.ranges_expired, 2, "{report:?}");
    assert_eq!(store.start_offset(s).unwrap(), 20);
    assert_eq!(read_all(&store, s, 20).await.len(), 6);
    let lag = store.table_lag_bytes(s).unwrap();
    assert_eq!(lag.floor, 25);
    assert!(
        lag.held_bytes > 0
            && lag.held_bytes < all_held.held_bytes
            && lag.held_bytes == lag.lag_bytes,
        "{lag:?} {all_held:?}"
    );
    store.check_invariants().unwrap();

    // The floor is in the metadata store: a restarted store holds the same.
    drop(store);
    let store = f.open().await;
    let report = store.run_maintenance().await.unwrap();
    assert_eq!(report.ranges_expired, 0, "{report:?}");
    assert_eq!(store.table_lag_bytes(s).unwrap().floor, 25);
    assert_eq!(store.start_offset(s).unwrap(), 20);

    // A trim is the user's explicit deletion: not held.
    store.trim(s, 30).await.unwrap();
    store.run_maintenance().await.unwrap();
    assert_eq!(store.start_offset(s).unwrap(), 30);

    // The hold ends (the topic is no table topic any more): retention takes the rest.
    store.hold_for_table(s, false).await.unwrap();
    assert!(store.table_lag_bytes(s).is_none());
    store.raise_table_floor(s, 40).await.unwrap(); // no effect on a stream not held
    store.run_maintenance().await.unwrap();
    assert_eq!(store.start_offset(s).unwrap(), 50);
    assert!(read_all(&store, s, 50).await.is_empty());
    // Held again: from floor 0, nothing more goes until the table reports.
    store.hold_for_table(s, true).await.unwrap();
    assert_eq!(store.table_lag_bytes(s).unwrap().floor, 0);
    store.check_invariants().unwrap();
}

async fn compaction_merges_and_builds_stream_objects(mut f: Fixture) {
    f.config.stream_object_min_bytes = 20 * 1024;
    let store = f.open().await;
    let big = store.create_stream("big").await.unwrap().id;
    let small = store.create_stream("small").await.unwrap().id;
    let mut expected_big = Vec::new();
    let mut expected_small = Vec::new();
    for round in 0..6u64 {
        for seq in 0..20u64 {
            let p = payload(0, round * 100 + seq, 300);
            store.append(big, p.clone(), 2).await.unwrap();
            expected_big.push(p);
        }
        let p = payload(1, round, 40);
        store.append(small, p.clone(), 1).await.unwrap();
        expected_small.push(p);
        store.flush().await.unwrap();
    }
    let objects_before = f.object_keys().await.len();
    assert_eq!(objects_before, 6);
    let report = store.run_maintenance().await.unwrap();
    assert_eq!(report.stream_objects_written, 1, "{report:?}");
    // What is left of the small objects (the small stream's ranges) got merged.
    let report2 = store.run_maintenance().await.unwrap();
    assert!(
        report.objects_merged + report2.objects_merged >= 2,
        "{report:?} {report2:?}"
    );
    store.check_invariants().unwrap();
    let payloads =
        |b: Vec<inlet_storage::ReadBatch>| b.into_iter().map(|b| b.payload).collect::<Vec<_>>();
    assert_eq!(payloads(read_all(&store, big, 0).await), expected_big);
    assert_eq!(payloads(read_all(&store, small, 0).await), expected_small);
    // Replaced objects are deleted once the grace period passes.
    f.clock.advance(f.config.delete_grace_ms + 1);
    let report = store.run_maintenance().await.unwrap();
    assert!(report.objects_deleted >= 6, "{report:?}");
    assert!(
        f.object_keys().await.len() <= 2,
        "{:?}",
        f.object_keys().await
    );
    drop(store);
    let store = f.open().await;
    assert_eq!(payloads(read_all(&store, big, 0).await), expected_big);
    assert_eq!(payloads(read_all(&store, small, 0).await), expected_small);
    assert_eq!(f.objects.calls(Op::List), 0);
}

/// `rewrite_uploaded` (a compacted topic's cleaner): uploaded batches get new bytes at the
/// same offsets, a run of ranges at a time within the byte bound, reads (cached ones too)
/// return the new bytes, data not uploaded is left alone, and the result survives a restart.
/// (The swap is fenced by the ownership epoch like every maintenance commit: the cluster's
/// compaction test kills an owner mid-pass.)
async fn rewrite_in_place_keeps_offsets_and_survives_a_restart(f: Fixture) {
    let store = f.open().await;
    let s = store.create_stream("compacted").await.unwrap().id;
    let mut expected = Vec::new();
    for round in 0..4u64 {
        for seq in 0..5u64 {
            let p = payload(0, round * 10 + seq, 100);
            store.append(s, p.clone(), 3).await.unwrap();
            expected.push(p);
        }
        store.flush().await.unwrap();
    }
    // One more batch, not uploaded: left alone.
    let tail = payload(0, 99, 100);
    store.append(s, tail.clone(), 3).await.unwrap();
    expected.push(tail);
    let ranges = store.uploaded_ranges(s).unwrap();
    assert_eq!(ranges.len(), 4, "{ranges:?}");
    assert_eq!(ranges.last().unwrap().1, 60);
    let thin = |b: &inlet_storage::ReadBatch| -> Option<Bytes> {
        b.base_offset
            .is_multiple_of(2)
            .then(|| Bytes::from(format!("rewritten at {}", b.base_offset)))
    };
    let mut from = 0;
    let mut calls = 0;
    while from < 60 {
        let mut each = |b: &inlet_storage::ReadBatch| thin(b);
        // Two ranges' worth at a time.
        let max = ranges[0].2 + ranges[1].2;
        match store
            .rewrite_uploaded(s, (from, 60, max), &mut each)
            .await
            .unwrap()
        {
            Some(next) => from = next,
            None => break,
        }
        calls += 1;
    }
    assert_eq!((from, calls), (60, 2));
    let mut want = expected.clone();
    for (i, p) in want.iter_mut().enumerate().take(20) {
        let base = i as u64 * 3;
        if base.is_multiple_of(2) {
            *p = Bytes::from(format!("rewritten at {base}"));
        }
    }
    let offsets: Vec<(u64, Bytes)> = want
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, p)| (i as u64 * 3, p))
        .collect();
    let read: Vec<(u64, Bytes)> = read_all(&store, s, 0)
        .await
        .into_iter()
        .map(|b| (b.base_offset, b.payload))
        .collect();
    assert_eq!(read, offsets);
    store.check_invariants().unwrap();
    drop(store);
    let store = f.open().await;
    let read: Vec<(u64, Bytes)> = read_all(&store, s, 0)
        .await
        .into_iter()
        .map(|b| (b.base_offset, b.payload))
        .collect();
    assert_eq!(read, offsets);
}

async fn delete_stream_collects_its_objects(f: Fixture) {
    let store = f.open().await;
    let gone = store.create_stream("gone").await.unwrap().id;
    let kept = store.create_stream("kept").await.unwrap().id;
    for seq in 0..10 {
        store.append(gone, payload(0, seq, 100), 1).await.unwrap();
    }
    store.flush().await.unwrap();
    store.append(gone, payload(0, 10, 100), 1).await.unwrap(); // only in the WAL
    store.append(kept, payload(1, 0, 100), 1).await.unwrap();
    store.delete_stream(gone).await.unwrap();
    assert_eq!(
        store.read(gone, 0, 10).await.unwrap_err().kind(),
        ErrorKind::BadInput
    );
    assert!(store.append(gone, payload(0, 11, 1), 1).await.is_err());
    // The name is free again, for a new stream with new offsets.
    let again = store.create_stream("gone").await.unwrap();
    assert_ne!(again.id, gone);
    assert_eq!(again.end_offset, 0);
    // The deleted stream's data that waited for upload no longer counts anywhere.
    store.flush().await.unwrap();
    assert_eq!(store.stats().dirty_bytes, 0, "{:?}", store.stats());
    f.clock.advance(f.config.delete_grace_ms + 1);
    let report = store.run_maintenance().await.unwrap();
    assert_eq!(report.objects_deleted, 1, "{report:?}");
    assert_eq!(
        f.object_keys().await.len(),
        1,
        "only the kept stream's new object remains"
    );
    drop(store);
    let store = f.open().await;
    assert!(
        store.stream(gone).is_err(),
        "deleted streams stay deleted after replay"
    );
    assert_eq!(store.end_offset(kept).unwrap(), 1);
    assert_eq!(store.open_stream("gone").unwrap().end_offset, 0);
}

async fn bad_requests_get_clear_errors(f: Fixture) {
    let store = f.open().await;
    let s = store.create_stream("x").await.unwrap().id;
    let err = store.create_stream("x").await.unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
    let err = store
        .append(s, Bytes::from(vec![0; 2 << 20]), 1)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("exceeds the limit"), "{err}");
    let err = store
        .append(s, Bytes::from_static(b"x"), 0)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadInput);
    let err = store.read(s, 1, 10).await.unwrap_err();
    assert!(err.to_string().contains("out of range"), "{err}");
    assert!(
        store.read(s, 0, 10).await.unwrap().is_empty(),
        "reading at the end is empty"
    );
    let err = store.read(12345, 0, 10).await.unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
    let err = store.trim(s, 5).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadInput);
    let err = store
        .append_with(
            s,
            Bytes::from_static(b"short"),
            1,
            AppendOptions {
                write_base_offset: true,
                timestamp_ms: None,
                ..AppendOptions::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadInput);
}
