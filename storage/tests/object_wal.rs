//! The object-store WAL and stream ownership: what a node acknowledged survives the loss of the
//! node, a stream moves between nodes without copying data, and a node that lost a stream (its
//! epoch raised by the next owner) acknowledges nothing more of it.

mod common;

use std::sync::Arc;

use common::{payload, read_payloads, Backend, Fixture};
use inlet_storage::{
    AppendOptions, Error, Fault, MetaStore, Op, StorageConfig, StreamStore, WalKind,
};

fn node_config(fixture: &Fixture, node_id: u64) -> StorageConfig {
    StorageConfig {
        node_id,
        wal: Some(WalKind::Object),
        ..fixture.config.clone()
    }
}

/// Opens node `node_id` of a cluster on the fixture's metadata store and object store.
async fn node(fixture: &Fixture, node_id: u64) -> StreamStore {
    StreamStore::builder(fixture.dir.path().join(format!("node-{node_id}")))
        .config(node_config(fixture, node_id))
        .meta(MetaStore::connect(&fixture.meta_url).await.expect("meta"))
        .object_store(Arc::new(fixture.objects.clone()))
        .clock(Arc::new(fixture.clock.clone()))
        .background_tasks(false)
        .open()
        .await
        .expect("node opens")
}

async fn acked_appends_survive_the_loss_of_their_node(backend: Backend) {
    let Some(fixture) = Fixture::new(backend).await else {
        return;
    };
    let one = node(&fixture, 1).await;
    let s = one.create_stream("p0").await.expect("create").id;
    assert!(one.owns(s), "the node that creates a stream owns it first");
    assert!(one.acquire(s, &[1]).await.expect("acquire again"));
    // Many appends in flight at once: they share groups, and the groups' commits land in order.
    let mut pending = Vec::new();
    for seq in 0..200u64 {
        let mut p = payload(1, seq, 300).to_vec();
        p[..8].copy_from_slice(&[0xff; 8]);
        pending.push(
            one.submit_append(
                s,
                p.into(),
                2,
                AppendOptions {
                    write_base_offset: true,
                    ..AppendOptions::default()
                },
            )
            .await
            .expect("queued"),
        );
    }
    let mut offsets = Vec::new();
    for p in pending {
        offsets.push(p.await.expect("acknowledged"));
    }
    assert_eq!(offsets, (0..200u64).map(|i| i * 2).collect::<Vec<_>>());
    let groups = one.stats().wal_syncs;
    assert!(
        (1..200).contains(&groups),
        "appends share WAL objects: {groups} groups"
    );
    // The node is lost whole: no close, no flush, nothing of it is kept but what it committed.
    drop(one);
    let two = node(&fixture, 2).await;
    two.refresh_streams().await.expect("refresh");
    assert!(two.acquire(s, &[2]).await.expect("node 1 is not live"));
    let got = read_payloads(&two, s, 0).await;
    assert_eq!(got.len(), 200, "every acknowledged batch, once");
    for (seq, p) in got.iter().enumerate() {
        assert_eq!(
            &p[..8],
            &(seq as u64 * 2).to_be_bytes(),
            "the base offset was written"
        );
        assert_eq!(&p[8..], &payload(1, seq as u64, 300)[8..], "batch {seq}");
    }
    assert_eq!(
        two.append(s, payload(2, 0, 10), 1).await.expect("append"),
        400
    );
    two.check_invariants().expect("invariants");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acked_appends_survive_the_loss_of_their_node_memory() {
    acked_appends_survive_the_loss_of_their_node(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acked_appends_survive_the_loss_of_their_node_s3_postgres() {
    acked_appends_survive_the_loss_of_their_node(Backend::S3Postgres).await;
}

async fn a_fenced_node_acknowledges_nothing_more(backend: Backend) {
    let Some(fixture) = Fixture::new(backend).await else {
        return;
    };
    let one = node(&fixture, 1).await;
    let two = node(&fixture, 2).await;
    let s = one.create_stream("p0").await.expect("create").id;
    assert!(one.acquire(s, &[1, 2]).await.expect("acquire"));
    for seq in 0..10 {
        one.append(s, payload(1, seq, 50), 1).await.expect("append");
    }
    two.refresh_streams().await.expect("refresh");
    assert!(
        !two.acquire(s, &[1, 2]).await.expect("acquire"),
        "a live owner keeps its stream"
    );
    // Node 1 was paused past its lease: node 2 sees it gone and takes the stream.
    assert!(two.acquire(s, &[2]).await.expect("acquire"));
    let err = one
        .append(s, payload(1, 10, 50), 1)
        .await
        .expect_err("the old owner is fenced");
    assert!(err.to_string().contains("fenced"), "{err}");
    assert!(matches!(
        one.append(s, payload(1, 11, 50), 1).await,
        Err(Error::NotOwner(_))
    ));
    assert_eq!(
        two.append(s, payload(2, 0, 50), 1).await.expect("append"),
        10
    );
    let got = read_payloads(&two, s, 0).await;
    let want: Vec<_> = (0..10)
        .map(|seq| payload(1, seq, 50))
        .chain([payload(2, 0, 50)])
        .collect();
    assert_eq!(got, want, "nothing of the fenced node after the takeover");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_node_acknowledges_nothing_more_memory() {
    a_fenced_node_acknowledges_nothing_more(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_node_acknowledges_nothing_more_s3_postgres() {
    a_fenced_node_acknowledges_nothing_more(Backend::S3Postgres).await;
}

/// A WAL object whose PUT fails for good fails its appends (and the ones behind it); the next
/// appends take the offsets the failed ones had, so the stream stays dense, and the failed
/// object is collected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_put_fails_its_appends_and_offsets_stay_dense() {
    let fixture = Fixture::new(Backend::Memory).await.expect("memory");
    let one = node(&fixture, 1).await;
    let s = one.create_stream("p0").await.expect("create").id;
    assert!(one.acquire(s, &[1]).await.expect("acquire"));
    one.append(s, payload(1, 0, 50), 1).await.expect("append");
    fixture.objects.inject(Op::Put, Fault::Fail, None);
    let err = one
        .append(s, payload(1, 1, 50), 1)
        .await
        .expect_err("the PUT fails");
    assert!(err.is_retryable(), "{err}");
    fixture.objects.clear(Op::Put);
    assert_eq!(
        one.append(s, payload(1, 2, 50), 1).await.expect("append"),
        1
    );
    assert_eq!(
        read_payloads(&one, s, 0).await,
        vec![payload(1, 0, 50), payload(1, 2, 50)]
    );
    one.check_invariants().expect("invariants");
}

/// A stream handed over (released by a live node, taken by another) moves without copying:
/// the new owner reads the old owner's objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_stream_moves_without_copying() {
    let fixture = Fixture::new(Backend::Memory).await.expect("memory");
    let one = node(&fixture, 1).await;
    let two = node(&fixture, 2).await;
    let s = one.create_stream("p0").await.expect("create").id;
    assert!(one.acquire(s, &[1, 2]).await.expect("acquire"));
    for seq in 0..20 {
        one.append(s, payload(1, seq, 100), 1)
            .await
            .expect("append");
    }
    let puts = fixture.objects.calls(Op::Put);
    one.release(s).await.expect("release");
    assert!(!one.owns(s));
    two.refresh_streams().await.expect("refresh");
    assert!(
        two.acquire(s, &[1, 2]).await.expect("acquire"),
        "a released stream is free even while its old owner lives"
    );
    assert_eq!(read_payloads(&two, s, 0).await.len(), 20);
    assert_eq!(fixture.objects.calls(Op::Put), puts, "nothing was copied");
    assert_eq!(
        two.append(s, payload(2, 0, 100), 1).await.expect("append"),
        20
    );
}

/// A latching writer (a Kafka partition) is refused after its append failed until it has
/// taken the failure in, so no append after a failed one is stored before the writer knows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_latching_append_holds_the_stream_until_cleared() {
    let fixture = Fixture::new(Backend::Memory).await.expect("memory");
    let one = node(&fixture, 1).await;
    let s = one.create_stream("p0").await.expect("create").id;
    let latching = AppendOptions {
        failure_latch: true,
        ..AppendOptions::default()
    };
    fixture.objects.inject(Op::Put, Fault::Fail, None);
    one.append_with(s, payload(1, 0, 50), 1, latching)
        .await
        .expect_err("the PUT fails");
    fixture.objects.clear(Op::Put);
    let refused = one
        .append_with(s, payload(1, 1, 50), 1, latching)
        .await
        .expect_err("held until the writer takes the failure in");
    assert!(refused.to_string().contains("not taken it in"), "{refused}");
    one.clear_failure(s);
    assert_eq!(
        one.append_with(s, payload(1, 0, 50), 1, latching)
            .await
            .expect("let in again"),
        0
    );
}

/// Under a steady load, groups that are not full are cut at most once per
/// `object_wal_min_interval_ms` (so a node's PUTs are bounded whatever the load), and every
/// append of them lands; a lone append after a quiet spell is not held back by the interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_load_is_cut_once_per_interval_and_a_lone_append_is_not_held() {
    let mut fixture = Fixture::new(Backend::Memory).await.expect("memory");
    fixture.config.object_wal_min_interval_ms = 500;
    fixture.config.object_wal_linger_ms = 2;
    let one = node(&fixture, 1).await;
    let s = one.create_stream("p0").await.expect("create").id;
    assert!(one.acquire(s, &[1]).await.expect("acquire"));
    let puts = fixture.objects.calls(Op::Put);
    // One small append every 10 ms for 2 s: with a cut per linger this was ~200 objects.
    let started = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(10));
    let mut pending = Vec::new();
    for seq in 0..200u64 {
        tick.tick().await;
        pending.push(
            one.submit_append(s, payload(1, seq, 100), 1, AppendOptions::default())
                .await
                .expect("queued"),
        );
    }
    for (seq, p) in pending.into_iter().enumerate() {
        assert_eq!(p.await.expect("acked"), seq as u64);
    }
    let elapsed_ms = started.elapsed().as_millis() as u64;
    let objects = fixture.objects.calls(Op::Put) - puts;
    assert!(
        objects <= elapsed_ms / 500 + 2,
        "{objects} WAL objects in {elapsed_ms} ms at one cut per 500 ms"
    );
    assert_eq!(read_payloads(&one, s, 0).await.len(), 200);
    // A quiet spell longer than the interval, then one append: cut after the linger alone.
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let lone = tokio::time::Instant::now();
    assert_eq!(
        one.append(s, payload(1, 200, 100), 1)
            .await
            .expect("append"),
        200
    );
    assert!(
        lone.elapsed() < std::time::Duration::from_millis(500),
        "a lone append waited {:?}",
        lone.elapsed()
    );
    one.check_invariants().expect("invariants");
}

/// A stream taken by another node while this one was away fails only its own step of this
/// node's maintenance (its commit is fenced): the pass goes on with the streams this node
/// still owns, and leaves the taken one to its new owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_goes_on_past_a_stream_that_moved() {
    let mut fixture = Fixture::new(Backend::Memory).await.expect("memory");
    fixture.config.retention_ms = Some(60_000);
    let one = node(&fixture, 1).await;
    let two = node(&fixture, 2).await;
    let taken = one.create_stream("p0").await.expect("create").id;
    let kept = one.create_stream("p1").await.expect("create").id;
    for s in [taken, kept] {
        assert!(one.acquire(s, &[1, 2]).await.expect("acquire"));
        for seq in 0..10 {
            one.append(s, payload(1, seq, 50), 1).await.expect("append");
        }
    }
    one.flush().await.expect("flush");
    fixture.clock.advance(70_000); // every range is past retention
    two.refresh_streams().await.expect("refresh");
    assert!(two.acquire(taken, &[2]).await.expect("acquire"));
    let report = one
        .run_maintenance()
        .await
        .expect("the pass goes on past the taken stream");
    assert!(report.ranges_expired > 0, "{report:?}");
    assert_eq!(
        one.start_offset(kept).expect("kept"),
        10,
        "the kept stream expired"
    );
    assert_eq!(
        two.start_offset(taken).expect("taken"),
        0,
        "the old owner expired nothing of the taken stream"
    );
    assert_eq!(read_payloads(&two, taken, 0).await.len(), 10);
}
