//! A seeded simulation of the commit protocol: two coordinators racing one table, through the
//! real committer, leases, continuity and fencing, on the embedded catalog (SQLite and a local
//! object store), with a manual clock, a pointer store that conflicts, fails or loses its
//! replies, a foreign writer that appends, and expires every snapshot but its own, and
//! coordinators paused past their lease (between a renewal and the commit it was for), at
//! random.
//!
//! Each schedule is a seed: the same seed makes the same choices, so a failing one replays.
//! `INLET_SIM_SEEDS` (default 100; `scripts/test` runs 500) schedules run, from `INLET_SIM_FIRST_SEED` (default 0);
//! `INLET_SIM_STEPS` (default 40) steps each, then a fault-free drain until every produced
//! record is committed. A failure prints `INLET_SIM_FIRST_SEED=<seed> INLET_SIM_SEEDS=1` to
//! replay it alone.
//!
//! The records are offsets of one partition; a round writes a data file whose rows are its
//! offsets. Invariants, after every step:
//! - **progress is monotone**: the table's committed offset never goes back;
//! - **one committing epoch at a time**: the epoch of the table's progress never goes back
//!   (once a newer coordinator committed, no older one did);
//! - and at the end of each schedule, read from the table's rows: **no record twice**, and
//!   **none lost**: the rows are exactly the offsets below the committed progress, which is
//!   every record produced.
//!
//! What this does not cover: the coordinator's own loop (ticks, the worker, the control
//! stream), which is driven by the node's end-to-end and crash tests. Here the two
//! coordinators are small models that call the same committer and leases the loop calls, in
//! the same order (renew, then commit; reload on a refused round; stop on a lost lease).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::TryStreamExt;
use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{NamespaceIdent, TableIdent};
use inlet_catalog::rest::{BoxFuture, MetadataPointerStore, PointerSwap};
use inlet_storage::{ManualClock, MetaStore};
use inlet_table_coordinator::commit::{CommitError, Committer, Round, RoundBase};
use inlet_table_coordinator::lease::{Lease, Leases};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const TABLE: &str = "default.sim";
const LEASE_TTL: Duration = Duration::from_secs(30);

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn schema() -> Schema {
    Schema::builder()
        .with_fields(vec![Arc::new(NestedField::required(
            1,
            "offset",
            Type::Primitive(PrimitiveType::Long),
        ))])
        .build()
        .expect("schema")
}

/// What the faulty pointer store does at its next swap, drawn from the schedule's generator.
#[derive(Debug)]
struct Faults {
    rng: StdRng,
    /// Off for the final drain.
    on: bool,
}

/// The catalog's pointer store, with injected conflicts (nothing changes), failures before
/// the swap (nothing changes, the outcome looks unknown) and lost replies (the swap happens,
/// the caller sees an error).
#[derive(Debug)]
struct FaultyPointers {
    inner: Arc<dyn MetadataPointerStore>,
    faults: Arc<Mutex<Faults>>,
}

impl MetadataPointerStore for FaultyPointers {
    fn swap<'a>(&'a self, swaps: &'a [PointerSwap]) -> BoxFuture<'a, iceberg::Result<()>> {
        Box::pin(async move {
            let roll = {
                let mut f = self.faults.lock().expect("faults");
                if f.on {
                    f.rng.random_range(0..100u32)
                } else {
                    100
                }
            };
            match roll {
                0..10 => Err(iceberg::Error::new(
                    iceberg::ErrorKind::CatalogCommitConflicts,
                    "injected conflict",
                )),
                10..15 => Err(iceberg::Error::new(
                    iceberg::ErrorKind::Unexpected,
                    "injected failure before the swap",
                )),
                15..22 => {
                    self.inner.swap(swaps).await?;
                    Err(iceberg::Error::new(
                        iceberg::ErrorKind::Unexpected,
                        "injected lost reply after the swap",
                    ))
                }
                _ => self.inner.swap(swaps).await,
            }
        })
    }
}

/// One coordinator, as the loop drives the committer.
struct Coordinator {
    name: &'static str,
    leases: Leases,
    lease: Option<Lease>,
    /// Where its next round starts (the table's progress when it took the lease or reloaded).
    next: u64,
    pending: Option<Round>,
    /// The lease was renewed for `pending`, which commits at this coordinator's next step:
    /// other steps (time passing past the lease, the other coordinator) may come between,
    /// as a pause between the renewal and the commit would let them.
    renewed: bool,
    /// Steps this coordinator sleeps through (a SIGSTOP), however long they take.
    paused: u32,
}

struct World {
    committer: Committer,
    plain: Committer,
    catalog: Arc<dyn iceberg::Catalog>,
    ident: TableIdent,
    /// The pointers without faults, for the foreign writer.
    plain_target: inlet_catalog::CommitTarget,
    clock: Arc<ManualClock>,
    /// Records produced so far: offsets `0..produced`.
    produced: u64,
    foreign_rows: u64,
    log: Vec<String>,
}

impl World {
    async fn table(&self) -> iceberg::table::Table {
        self.plain
            .load(&self.ident)
            .await
            .expect("load")
            .expect("the table")
    }

    /// The table's progress: (offset, epoch).
    async fn progress(&self) -> (u64, i64) {
        let c = Committer::committed(&self.table().await);
        (
            c.offsets.get(&0).copied().unwrap_or(0),
            c.epoch.unwrap_or(0),
        )
    }

    /// A data file whose rows are `rows`.
    async fn file(&self, name: &str, rows: std::ops::Range<i64>) -> iceberg::spec::DataFile {
        use arrow::array::{Int64Array, RecordBatch};
        let table = self.table().await;
        let schema = table.metadata().current_schema().clone();
        let arrow_schema =
            Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema).expect("arrow schema"));
        let batch = RecordBatch::try_new(
            arrow_schema,
            vec![Arc::new(Int64Array::from_iter_values(rows))],
        )
        .expect("batch");
        let target = inlet_table_worker::data_file::FileTarget {
            file_io: table.file_io().clone(),
            schema,
            spec: table.metadata().default_partition_spec().clone(),
            data_location: format!("{}/data", table.metadata().location()),
        };
        let mut files = inlet_table_worker::data_file::write(
            &target,
            name,
            [batch],
            &inlet_table_worker::data_file::FileSettings::default(),
        )
        .await
        .expect("write");
        files.remove(0)
    }

    /// Every row's offset, read from the table's files.
    async fn rows(&self) -> Vec<i64> {
        use arrow::array::AsArray;
        let table = self.table().await;
        let batches: Vec<arrow::array::RecordBatch> = table
            .scan()
            .build()
            .expect("scan")
            .to_arrow()
            .await
            .expect("arrow")
            .try_collect()
            .await
            .expect("batches");
        let mut rows: Vec<i64> = batches
            .iter()
            .flat_map(|b| {
                b.column(0)
                    .as_primitive::<arrow::datatypes::Int64Type>()
                    .values()
                    .to_vec()
            })
            .collect();
        rows.sort_unstable();
        rows
    }
}

/// One step of coordinator `c`, as its loop would take it.
async fn step(w: &mut World, c: &mut Coordinator, rng: &mut StdRng) {
    if c.paused > 0 {
        c.paused -= 1;
        return;
    }
    let Some(lease) = c.lease.clone() else {
        // Take the lease, above the table's epoch, and start from the table's progress.
        let (at, epoch) = w.progress().await;
        match c.leases.acquire(TABLE, epoch).await.expect("acquire") {
            Ok(lease) => {
                w.log
                    .push(format!("{} took epoch {} at {at}", c.name, lease.epoch));
                c.lease = Some(lease);
                c.next = at;
                c.pending = None;
            }
            Err(held) => w.log.push(format!("{} waits for {held:?}", c.name)),
        }
        return;
    };
    if c.pending.is_none() {
        if c.next >= w.produced {
            return;
        }
        let end = (c.next + rng.random_range(1..=20)).min(w.produced);
        let file = w
            .file(
                &format!("{}-{}-{end}", c.name, c.next),
                c.next as i64..end as i64,
            )
            .await;
        // The loop's commit id: the topic and the end offsets, the same for both.
        c.pending = Some(Round {
            commit_id: format!("sim-0.{end}"),
            schema: schema(),
            files: vec![file],
            delete_files: Vec::new(),
            base: RoundBase::Latest,
            id_columns: Vec::new(),
            offsets: BTreeMap::from([(0, end)]),
            watermark_ms: None,
            partition_watermarks: BTreeMap::new(),
            timestamp_ms: w.clock.now_ms_i64(),
            partition_spec: None,
            topic_id: None,
            base_column_id: i32::MAX,
            start_offsets: BTreeMap::from([(0, c.next)]),
            epoch: Some(lease.epoch),
            table_uuid: None,
        });
        return;
    }
    // Renew, then commit, as the loop does, in two steps.
    if !c.renewed {
        if c.leases.renew(&lease).await.expect("renew") {
            c.renewed = true;
        } else {
            w.log.push(format!("{} lost epoch {}", c.name, lease.epoch));
            c.lease = None;
            c.pending = None;
        }
        return;
    }
    c.renewed = false;
    let round = c.pending.clone().expect("pending");
    let end = round.offsets[&0];
    match w.committer.commit(&w.ident, &round).await {
        Ok(snapshot) => {
            w.log.push(format!(
                "{} epoch {} committed {}..{end} ({snapshot:?})",
                c.name, lease.epoch, round.start_offsets[&0]
            ));
            c.next = end;
            c.pending = None;
        }
        Err(e @ (CommitError::NotContinuous { .. } | CommitError::SchemaConflict(_))) => {
            let (at, _) = w.progress().await;
            w.log
                .push(format!("{} refused ({e}); reloads at {at}", c.name));
            c.next = at;
            c.pending = None;
        }
        Err(e @ CommitError::Fenced { .. }) => {
            w.log.push(format!("{} fenced: {e}", c.name));
            c.lease = None;
            c.pending = None;
        }
        // A conflict that kept coming, a failure, an unknown outcome: the same round again.
        Err(e) => w
            .log
            .push(format!("{} commit failed ({e}); retries", c.name)),
    }
}

/// A foreign writer: an append of its own rows, or an expiry of every snapshot but the
/// current one (Spark's `expire_snapshots(retain_last => 1)`).
async fn foreign(w: &mut World, rng: &mut StdRng) {
    let table = w.table().await;
    if rng.random_bool(0.5) {
        let first = 1_000_000 + w.foreign_rows as i64;
        let file = w.file(&format!("foreign-{first}"), first..first + 3).await;
        let tx = Transaction::new(&table);
        let tx = tx
            .fast_append()
            .add_data_files([file])
            .apply(tx)
            .expect("apply");
        match tx.commit(&*w.catalog).await {
            Ok(_) => {
                w.foreign_rows += 3;
                w.log.push("foreign append".into());
            }
            Err(e) => w.log.push(format!("foreign append failed: {e}")),
        }
    } else {
        let Some(current) = table.metadata().current_snapshot().map(|s| s.snapshot_id()) else {
            return;
        };
        let others: Vec<i64> = table
            .metadata()
            .snapshots()
            .map(|s| s.snapshot_id())
            .filter(|id| *id != current)
            .collect();
        if others.is_empty() {
            return;
        }
        match w
            .plain_target
            .commit(
                &table,
                vec![iceberg::TableRequirement::RefSnapshotIdMatch {
                    r#ref: "main".into(),
                    snapshot_id: Some(current),
                }],
                vec![iceberg::TableUpdate::RemoveSnapshots {
                    snapshot_ids: others,
                }],
            )
            .await
        {
            Ok(_) => w
                .log
                .push("foreign expiry of all but the current snapshot".into()),
            Err(e) => w.log.push(format!("foreign expiry failed: {e}")),
        }
    }
}

trait NowMs {
    fn now_ms_i64(&self) -> i64;
}

impl NowMs for ManualClock {
    fn now_ms_i64(&self) -> i64 {
        inlet_storage::Clock::now_ms(self) as i64
    }
}

/// Runs schedule `seed`; on a broken invariant, the error and the schedule's last events.
/// Adds what happened to `seen` (event kind → count).
async fn schedule(
    seed: u64,
    steps: u64,
    seen: &mut BTreeMap<&'static str, u64>,
) -> Result<(), String> {
    let mut log = Vec::new();
    let result = run_schedule(seed, steps, &mut log).await;
    for line in &log {
        for kind in [
            "committed",
            "(None)",
            "refused",
            "fenced",
            "lost epoch",
            "took epoch",
            "lost reply",
            "foreign append",
            "foreign expiry of",
        ] {
            if line.contains(kind) {
                *seen.entry(kind).or_default() += 1;
            }
        }
    }
    result.map_err(|e| {
        let tail = log.len().saturating_sub(30);
        format!("{e}\nlast events:\n  {}", log[tail..].join("\n  "))
    })
}

async fn run_schedule(seed: u64, steps: u64, out: &mut Vec<String>) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let meta_url = format!("sqlite://{}?mode=rwc", dir.path().join("meta.db").display());
    let root = dir.path().join("objects");
    std::fs::create_dir_all(&root).expect("objects dir");
    let embedded = inlet_catalog::embedded::open(&meta_url, &root.to_string_lossy(), None)
        .await
        .expect("catalog");
    let faults = Arc::new(Mutex::new(Faults {
        rng: StdRng::seed_from_u64(seed ^ 0x5eed),
        on: true,
    }));
    let faulty = Arc::new(FaultyPointers {
        inner: embedded.pointers.clone(),
        faults: faults.clone(),
    });
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let leases_meta = MetaStore::connect(&format!(
        "sqlite://{}",
        dir.path().join("leases.db").display()
    ))
    .await
    .expect("lease store");
    let ident = TableIdent::new(NamespaceIdent::new("default".into()), "sim".into());
    let plain = Committer::new(embedded.catalog.clone(), embedded.pointers.clone());
    plain
        .create_if_missing(&ident, &schema(), None)
        .await
        .expect("create");
    let mut w = World {
        committer: Committer::new(embedded.catalog.clone(), faulty),
        plain,
        plain_target: inlet_catalog::CommitTarget::Pointers(embedded.pointers.clone()),
        catalog: embedded.catalog.clone(),
        ident,
        clock: clock.clone(),
        produced: 0,
        foreign_rows: 0,
        log: Vec::new(),
    };
    let mut coordinators = Vec::new();
    for (name, holder) in [("A", "node-a"), ("B", "node-b")] {
        coordinators.push(Coordinator {
            name,
            leases: Leases::open(leases_meta.clone(), holder, LEASE_TTL, clock.clone())
                .await
                .expect("leases"),
            lease: None,
            next: 0,
            pending: None,
            renewed: false,
            paused: 0,
        });
    }
    let mut seen = (0u64, 0i64);
    let check = |w: &World, seen: &mut (u64, i64), now: (u64, i64)| -> Result<(), String> {
        if now.0 < seen.0 {
            return Err(format!("progress went back from {} to {}", seen.0, now.0));
        }
        if now.1 < seen.1 {
            return Err(format!(
                "an older epoch committed: {} after {}",
                now.1, seen.1
            ));
        }
        if now.0 > w.produced {
            return Err(format!("progress {} past what was produced", now.0));
        }
        *seen = now;
        Ok(())
    };
    let result = drive(
        &mut w,
        &mut coordinators,
        &mut rng,
        &clock,
        &faults,
        steps,
        &mut seen,
        check,
    )
    .await;
    *out = std::mem::take(&mut w.log);
    result?;
    let rows = w.rows().await;
    let mine: Vec<i64> = rows.iter().copied().filter(|r| *r < 1_000_000).collect();
    let expected: Vec<i64> = (0..w.produced as i64).collect();
    if mine != expected {
        let mut dupes = mine.clone();
        dupes.dedup();
        return Err(format!(
            "rows are not every record once: {} rows, {} distinct, {} produced",
            mine.len(),
            dupes.len(),
            w.produced
        ));
    }
    let theirs = rows.len() as u64 - mine.len() as u64;
    if theirs != w.foreign_rows {
        return Err(format!(
            "the foreign writer's rows: {theirs} of {}",
            w.foreign_rows
        ));
    }
    Ok(())
}

/// The schedule's steps, then the fault-free drain.
#[allow(clippy::too_many_arguments)]
async fn drive(
    w: &mut World,
    coordinators: &mut [Coordinator],
    rng: &mut StdRng,
    clock: &ManualClock,
    faults: &Mutex<Faults>,
    steps: u64,
    seen: &mut (u64, i64),
    check: impl Fn(&World, &mut (u64, i64), (u64, i64)) -> Result<(), String>,
) -> Result<(), String> {
    for _ in 0..steps {
        match rng.random_range(0..100u32) {
            // Records arrive.
            0..20 => w.produced += rng.random_range(1..=30),
            // Time passes: sometimes past a lease (a paused node).
            20..28 => clock.advance(if rng.random_bool(0.3) {
                LEASE_TTL.as_millis() as u64 + 1
            } else {
                rng.random_range(100..5_000)
            }),
            28..34 => foreign(w, rng).await,
            // A coordinator is paused (a SIGSTOP, a long GC) past its lease.
            34..37 => {
                let c = &mut coordinators[rng.random_range(0..2usize)];
                c.paused = rng.random_range(5..15);
                clock.advance(LEASE_TTL.as_millis() as u64 + 1);
                w.log.push(format!("{} paused", c.name));
            }
            n => {
                let c = &mut coordinators[(n % 2) as usize];
                step(w, c, rng).await;
            }
        }
        let now = w.progress().await;
        check(w, seen, now)?;
    }
    // The drain: no more faults or records; the coordinators go on until all is committed.
    faults.lock().expect("faults").on = false;
    for round in 0..400 {
        if w.progress().await.0 == w.produced {
            break;
        }
        if round % 50 == 49 {
            // A coordinator waiting for the other's lease gets it after a ttl.
            clock.advance(LEASE_TTL.as_millis() as u64 + 1);
        }
        let c = &mut coordinators[round % 2];
        step(w, c, rng).await;
        let now = w.progress().await;
        check(w, seen, now)?;
    }
    let (at, _) = w.progress().await;
    if at != w.produced {
        return Err(format!(
            "not every record committed: progress {at} of {}",
            w.produced
        ));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_schedules_keep_every_record_once() {
    let first = env("INLET_SIM_FIRST_SEED", 0);
    let seeds = env("INLET_SIM_SEEDS", 100);
    let steps = env("INLET_SIM_STEPS", 40);
    let mut seen = BTreeMap::new();
    for seed in first..first + seeds {
        if let Err(e) = schedule(seed, steps, &mut seen).await {
            panic!(
                "seed {seed}: {e}\nreplay: INLET_SIM_FIRST_SEED={seed} INLET_SIM_SEEDS=1 cargo test -p inlet-table-coordinator --test simulation"
            );
        }
    }
    eprintln!("{seeds} schedules of {steps} steps: {seen:?}");
    // The schedules reach the cases they are for.
    for kind in [
        "committed",
        "(None)",
        "refused",
        "fenced",
        "took epoch",
        "foreign expiry of",
    ] {
        assert!(
            seeds < 20 || seen.get(kind).is_some_and(|n| *n > 0),
            "no schedule saw {kind:?}: {seen:?}"
        );
    }
}
