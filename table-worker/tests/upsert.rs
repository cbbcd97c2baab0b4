//! Upsert and CDC tables through the worker, over a real stream store and schema registry:
//! each commit round is the outputs of one `Worker::drain`, and "the table" is what an Iceberg
//! reader sees — every committed data file's rows minus the rows the committed position
//! delete files name. Covers de-duplication within a job and across the jobs of one round,
//! updates across rounds, CDC deletes, partitioned position deletes, an index spilling past a
//! tiny budget, an index rebuilt from the table by a new worker (a restart), Debezium
//! envelopes (`flatten_debezium`) whose `d` events delete, and a failed job that makes the
//! table need re-registration (as the coordinator does) without losing or doubling a record.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};

use apache_avro::types::Value as AvroValue;
use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::Int64Type;
use bytes::Bytes;
use iceberg::spec::{DataContentType, DataFile};
use inlet_schema_registry::framing;
use inlet_storage::StreamId;
use inlet_table_worker::FileRef;
use inlet_table_worker::MemoryPool;
use inlet_table_worker::{FromCheckpoint, LiveDataFile, LiveFiles, UpsertSpec};
use inlet_table_worker::{JobOutput, TableContext, ValueType};
use inlet_table_worker::{PartitionSource, TableIndex, Worker};

const SCHEMA: &str = r#"{"type":"record","name":"Row","namespace":"t","fields":[{"name":"id","type":"long"},{"name":"name","type":"string"},{"name":"op","type":["null","string"],"default":null}]}"#;

/// What this file's tests add to the common fixture: the stream `kafka/t/0`, and the id of
/// the value schema.
struct Upsert {
    stream: StreamId,
    schema_id: u32,
}

type Fixture = common::Fixture<Upsert>;

async fn fixture() -> Fixture {
    fixture_with(SCHEMA).await
}

async fn fixture_with(schema: &str) -> Fixture {
    let f = common::Fixture::open().await;
    let schema_id = common::register_typed(&f.registry, "t-value", schema, None).await;
    let stream = common::create_stream(&f.store, "kafka/t/0").await;
    f.with(Upsert { stream, schema_id })
}

/// A record: id, name, and the CDC op (None: no op).
fn row(f: &Fixture, id: i64, name: &str, op: Option<&str>) -> Bytes {
    let schema = apache_avro::Schema::parse_str(SCHEMA).expect("schema");
    let op = match op {
        Some(o) => AvroValue::Union(1, Box::new(AvroValue::String(o.into()))),
        None => AvroValue::Union(0, Box::new(AvroValue::Null)),
    };
    let datum = apache_avro::to_avro_datum(
        &schema,
        AvroValue::Record(vec![
            ("id".into(), AvroValue::Long(id)),
            ("name".into(), AvroValue::String(name.into())),
            ("op".into(), op),
        ]),
    )
    .expect("encode");
    Bytes::from(framing::frame(f.schema_id, &datum))
}

/// Appends `values` as one Kafka record batch, without keys.
async fn append(f: &Fixture, values: Vec<Bytes>) {
    let records: Vec<(Option<Bytes>, Option<Bytes>)> =
        values.into_iter().map(|v| (None, Some(v))).collect();
    common::append_records(&f.store, f.stream, &records).await;
}

fn context(f: &Fixture, cdc: bool, budget: usize, partition_by: &str) -> TableContext {
    TableContext {
        last_column_id: 0,
        partition_by: inlet_table_worker::partition::parse(partition_by).expect("partition.by"),
        upsert: Some(UpsertSpec {
            id_columns: vec!["id".into()],
            cdc_field: cdc.then(|| "op".to_string()),
            index_budget: budget.into(),
            index_dir: f.dir.path().join("index"),
            deferred: false,
        }),
        ..common::table_context(
            &f.registry,
            format!("file://{}/warehouse/t/data", f.dir.path().display()),
        )
    }
}

/// What has been "committed": every round's files, with the round's sequence number.
#[derive(Default)]
struct Table {
    data: Vec<(DataFile, i64)>,
    deletes: Vec<DataFile>,
    rounds: i64,
    schema: Option<iceberg::spec::Schema>,
}

impl Table {
    fn commit(&mut self, outputs: Vec<(i32, JobOutput)>) -> (usize, usize) {
        self.rounds += 1;
        let (mut data, mut deletes) = (0, 0);
        for (_, out) in outputs {
            for d in out.data_files {
                self.data.push((d, self.rounds));
                data += 1;
            }
            for d in out.delete_files {
                assert_eq!(d.content_type(), DataContentType::PositionDeletes);
                self.deletes.push(d);
                deletes += 1;
            }
            self.schema = Some(out.schema);
        }
        (data, deletes)
    }

    /// The rows an Iceberg reader sees: id → name.
    fn rows(&self) -> BTreeMap<i64, String> {
        let mut gone: HashSet<(String, i64)> = HashSet::new();
        for d in &self.deletes {
            for b in read(d.file_path()) {
                let paths = b.column(0).as_string::<i32>();
                let pos = b.column(1).as_primitive::<Int64Type>();
                for i in 0..b.num_rows() {
                    assert!(
                        gone.insert((paths.value(i).to_string(), pos.value(i))),
                        "a row deleted twice"
                    );
                }
            }
        }
        let mut rows = BTreeMap::new();
        for (d, _) in &self.data {
            let mut pos = 0i64;
            for b in read(d.file_path()) {
                let ids = b
                    .column_by_name("id")
                    .expect("id")
                    .as_primitive::<Int64Type>();
                let names = b.column_by_name("name").expect("name").as_string::<i32>();
                for i in 0..b.num_rows() {
                    if !gone.contains(&(d.file_path().to_string(), pos)) {
                        let old = rows.insert(ids.value(i), names.value(i).to_string());
                        assert!(old.is_none(), "id {} has two live rows", ids.value(i));
                    }
                    pos += 1;
                }
            }
        }
        rows
    }

    /// The table's live files, as a coordinator reads them from the current snapshot.
    fn live(&self) -> LiveFiles {
        LiveFiles {
            data: self
                .data
                .iter()
                .map(|(d, seq)| LiveDataFile {
                    file: FileRef {
                        path: d.file_path().to_string(),
                        partition: d.partition().clone(),
                        spec_id: 0,
                    },
                    sequence_number: *seq,
                })
                .collect(),
            position_deletes: self
                .deletes
                .iter()
                .map(|d| d.file_path().to_string())
                .collect(),
        }
    }
}

fn read(path: &str) -> Vec<RecordBatch> {
    common::read_parquet(path)
}

fn source(f: &Fixture, start: u64) -> Vec<PartitionSource> {
    vec![PartitionSource {
        partition: 0,
        stream: f.stream,
        start,
    }]
}

async fn round(f: &Fixture, worker: &Worker, table: &mut Table) -> (usize, usize) {
    let end = f.store.end_offset(f.stream).expect("end");
    let outputs = worker
        .drain("t", &BTreeMap::from([(0, end)]))
        .await
        .expect("drain");
    table.commit(outputs)
}

fn names(pairs: &[(i64, &str)]) -> BTreeMap<i64, String> {
    pairs.iter().map(|(i, n)| (*i, n.to_string())).collect()
}

#[tokio::test]
async fn latest_row_per_key_across_jobs_rounds_deletes_and_a_restart() {
    let f = fixture().await;
    let worker = Worker::new(f.store.clone(), MemoryPool::new(64 << 20));
    let mut ctx = context(&f, true, 64 << 20, "");
    // One job per stored batch: a round of several batches is several jobs.
    ctx.settings.target_file_bytes = 1;
    worker.add_table_with_base("t", ctx.clone(), &source(&f, 0), LiveFiles::default());
    let mut table = Table::default();

    // Round 1, one job: key 1 twice in the same batch; the later row wins and the earlier one
    // is never written.
    append(
        &f,
        vec![
            row(&f, 1, "a", None),
            row(&f, 2, "b", Some("I")),
            row(&f, 3, "c", Some("c")),
            row(&f, 1, "a2", Some("U")),
        ],
    )
    .await;
    let (data, deletes) = round(&f, &worker, &mut table).await;
    assert_eq!((data, deletes), (1, 0));
    assert_eq!(
        table.data[0].0.record_count(),
        3,
        "the earlier row of key 1 is dropped"
    );
    assert_eq!(table.rows(), names(&[(1, "a2"), (2, "b"), (3, "c")]));

    // Round 2, two jobs: key 2 updated by both (the second job's position delete points into
    // the first job's file of the same round), key 3 deleted, key 4 new then deleted again.
    append(&f, vec![row(&f, 2, "b2", Some("u")), row(&f, 4, "d", None)]).await;
    append(
        &f,
        vec![
            row(&f, 2, "b3", Some("U")),
            row(&f, 3, "ignored", Some("D")),
            row(&f, 5, "e", Some("r")),
        ],
    )
    .await;
    let (_, deletes) = round(&f, &worker, &mut table).await;
    assert!(deletes >= 2, "{deletes} delete files");
    assert_eq!(
        table.rows(),
        names(&[(1, "a2"), (2, "b3"), (4, "d"), (5, "e")])
    );

    // A delete of a key written in the same job: neither row stays.
    append(&f, vec![row(&f, 6, "f", None), row(&f, 6, "f", Some("d"))]).await;
    round(&f, &worker, &mut table).await;
    assert_eq!(
        table.rows(),
        names(&[(1, "a2"), (2, "b3"), (4, "d"), (5, "e")])
    );

    // A restart: a new worker rebuilds the index from the table's live files.
    drop(worker);
    let worker = Worker::new(f.store.clone(), MemoryPool::new(64 << 20));
    ctx.schema = table.schema.clone();
    let end = f.store.end_offset(f.stream).expect("end");
    worker.add_table_with_base("t", ctx.clone(), &source(&f, end), table.live());
    append(
        &f,
        vec![
            row(&f, 4, "d2", Some("U")),
            row(&f, 1, "gone", Some("D")),
            row(&f, 7, "g", None),
        ],
    )
    .await;
    round(&f, &worker, &mut table).await;
    assert_eq!(
        table.rows(),
        names(&[(2, "b3"), (4, "d2"), (5, "e"), (7, "g")]),
        "the rebuilt index found the rows written before the restart"
    );
}

#[tokio::test]
async fn an_index_past_its_budget_spills_and_stays_exact() {
    let f = fixture().await;
    let worker = Worker::new(f.store.clone(), MemoryPool::new(64 << 20));
    // A budget of about ten keys for 500 keys.
    let ctx = context(&f, false, 1_000, "");
    worker.add_table_with_base("t", ctx, &source(&f, 0), LiveFiles::default());
    let mut table = Table::default();
    // Every key, then every second one, then every third one: a round each.
    for (step, name) in [(1, "v1"), (2, "v2"), (3, "v3")] {
        let ids = (0..500).filter(|i| i % step == 0);
        append(&f, ids.map(|i| row(&f, i, name, None)).collect()).await;
        round(&f, &worker, &mut table).await;
    }
    let stats = worker
        .index_stats("t")
        .await
        .expect("stats")
        .expect("index");
    assert!(stats.spills > 0, "{stats:?}");
    assert!(stats.runs <= inlet_table_worker::MAX_RUNS, "{stats:?}");
    let rows = table.rows();
    assert_eq!(rows.len(), 500);
    for (id, name) in rows {
        let want = if id % 3 == 0 {
            "v3"
        } else if id % 2 == 0 {
            "v2"
        } else {
            "v1"
        };
        assert_eq!(name, want, "id {id}");
    }
}

#[tokio::test]
async fn partitioned_tables_get_position_deletes_in_the_data_files_partition() {
    let f = fixture().await;
    let worker = Worker::new(f.store.clone(), MemoryPool::new(64 << 20));
    let ctx = context(&f, true, 64 << 20, "[bucket(id, 4)]");
    worker.add_table_with_base("t", ctx, &source(&f, 0), LiveFiles::default());
    let mut table = Table::default();
    append(&f, (0..20).map(|i| row(&f, i, "v1", None)).collect()).await;
    let (data, _) = round(&f, &worker, &mut table).await;
    assert!(data > 1, "one file per bucket");
    append(
        &f,
        (0..20)
            .filter(|i| i % 2 == 0)
            .map(|i| row(&f, i, "v2", if i % 4 == 0 { Some("D") } else { None }))
            .collect(),
    )
    .await;
    let (_, deletes) = round(&f, &worker, &mut table).await;
    assert!(deletes > 1, "one delete file per partition: {deletes}");
    // Each delete file is in the partition (tuple and path) of every data file it names.
    let partition_of: HashMap<&str, &DataFile> =
        table.data.iter().map(|(d, _)| (d.file_path(), d)).collect();
    for d in &table.deletes {
        assert!(d.file_path().contains("/id_bucket_4="), "{}", d.file_path());
        for b in read(d.file_path()) {
            let paths = b.column(0).as_string::<i32>();
            for p in paths.iter().flatten() {
                let target = partition_of.get(p).expect("a known data file");
                assert_eq!(target.partition(), d.partition(), "{p}");
                assert!(!target.partition().fields().is_empty());
            }
        }
    }
    let rows = table.rows();
    let want: BTreeMap<i64, String> = (0..20)
        .filter(|i| i % 4 != 0)
        .map(|i| (i, if i % 2 == 0 { "v2" } else { "v1" }.to_string()))
        .collect();
    assert_eq!(rows, want);
}

const ENVELOPE: &str = r#"{"type":"record","name":"Envelope","namespace":"db.users","fields":[
  {"name":"before","type":["null",{"type":"record","name":"Value","fields":[{"name":"id","type":"long"},{"name":"name","type":"string"}]}],"default":null},
  {"name":"after","type":["null","Value"],"default":null},
  {"name":"op","type":"string"},
  {"name":"ts_ms","type":["null","long"],"default":null}]}"#;

/// A Debezium change event: `op` with the row before and after.
fn event(f: &Fixture, op: &str, before: Option<(i64, &str)>, after: Option<(i64, &str)>) -> Bytes {
    let schema = apache_avro::Schema::parse_str(ENVELOPE).expect("schema");
    let row = |r: Option<(i64, &str)>| match r {
        Some((id, name)) => AvroValue::Union(
            1,
            Box::new(AvroValue::Record(vec![
                ("id".into(), AvroValue::Long(id)),
                ("name".into(), AvroValue::String(name.into())),
            ])),
        ),
        None => AvroValue::Union(0, Box::new(AvroValue::Null)),
    };
    let datum = apache_avro::to_avro_datum(
        &schema,
        AvroValue::Record(vec![
            ("before".into(), row(before)),
            ("after".into(), row(after)),
            ("op".into(), AvroValue::String(op.into())),
            (
                "ts_ms".into(),
                AvroValue::Union(1, Box::new(AvroValue::Long(1_700_000_000_000))),
            ),
        ]),
    )
    .expect("encode");
    Bytes::from(framing::frame(f.schema_id, &datum))
}

#[tokio::test]
async fn debezium_change_events_upsert_and_delete_by_their_op() {
    let f = fixture_with(ENVELOPE).await;
    let worker = Worker::new(f.store.clone(), MemoryPool::new(64 << 20));
    let mut ctx = context(&f, false, 64 << 20, "");
    ctx.transform = inlet_table_worker::ValueTransform::FlattenDebezium;
    // What the node makes of `upsert.enable=true` with `flatten_debezium` and no cdc.field.
    ctx.upsert = UpsertSpec::from_configs(
        &["id".to_string()],
        true,
        None,
        ctx.transform,
        (64usize << 20).into(),
        f.dir.path().join("index"),
    )
    .expect("configs");
    worker.add_table_with_base("t", ctx, &source(&f, 0), LiveFiles::default());
    let mut table = Table::default();
    append(
        &f,
        vec![
            event(&f, "r", None, Some((1, "snapshot"))),
            event(&f, "c", None, Some((2, "created"))),
            event(&f, "c", None, Some((3, "created"))),
        ],
    )
    .await;
    round(&f, &worker, &mut table).await;
    assert_eq!(
        table.rows(),
        names(&[(1, "snapshot"), (2, "created"), (3, "created")])
    );
    append(
        &f,
        vec![
            event(&f, "u", Some((1, "snapshot")), Some((1, "updated"))),
            // A delete carries its row (and so its key) in `before`.
            event(&f, "d", Some((2, "created")), None),
            event(&f, "c", None, Some((4, "created"))),
            event(&f, "d", Some((4, "created")), None),
        ],
    )
    .await;
    round(&f, &worker, &mut table).await;
    assert_eq!(table.rows(), names(&[(1, "updated"), (3, "created")]));
}

#[tokio::test]
async fn a_failed_upsert_job_needs_a_rebuild_and_loses_nothing() {
    let f = fixture().await;
    let worker = Worker::new(f.store.clone(), MemoryPool::new(64 << 20));
    let mut ctx = context(&f, true, 64 << 20, "");
    worker.add_table_with_base("t", ctx.clone(), &source(&f, 0), LiveFiles::default());
    let mut table = Table::default();
    append(&f, vec![row(&f, 1, "a", None), row(&f, 2, "b", None)]).await;
    round(&f, &worker, &mut table).await;
    let committed = f.store.end_offset(f.stream).expect("end");

    // The next job cannot write (its data location is under a regular file).
    let blocker = f.dir.path().join("not-a-dir");
    std::fs::write(&blocker, b"x").expect("file");
    let mut broken = ctx.clone();
    broken.schema = table.schema.clone();
    broken.target.data_location = format!("file://{}/data", blocker.display());
    worker.add_table_with_base("t", broken, &source(&f, committed), table.live());
    append(
        &f,
        vec![row(&f, 1, "a2", Some("U")), row(&f, 2, "", Some("D"))],
    )
    .await;
    let end = f.store.end_offset(f.stream).expect("end");
    assert!(worker
        .drain("t", &BTreeMap::from([(0, end)]))
        .await
        .is_err());
    // The index was dropped with the failed job: nothing converts until the table is
    // registered again with its live files.
    let err = worker
        .drain("t", &BTreeMap::from([(0, end)]))
        .await
        .expect_err("needs a rebuild");
    assert!(err.to_string().contains("rebuilt"), "{err}");

    // Registered again (as the coordinator does), the same records convert once.
    ctx.schema = table.schema.clone();
    worker.add_table_with_base("t", ctx, &source(&f, committed), table.live());
    round(&f, &worker, &mut table).await;
    assert_eq!(table.rows(), names(&[(1, "a2")]));
}

/// `convert.key.type=by_schema_id` on an upsert table: a tombstone (null value) deletes the
/// row of the key it names, ordered with the rows around it. The key's `id` is an Avro int;
/// the table's is a long.
#[tokio::test]
async fn tombstones_delete_by_their_converted_key() {
    const KEY: &str =
        r#"{"type":"record","name":"K","namespace":"t","fields":[{"name":"id","type":"int"}]}"#;
    let f = fixture().await;
    let key_id = common::register_typed(&f.registry, "t-key", KEY, None).await;
    let key_schema = apache_avro::Schema::parse_str(KEY).expect("key schema");
    let key = |id: i32| -> Option<Bytes> {
        let datum = apache_avro::to_avro_datum(
            &key_schema,
            AvroValue::Record(vec![("id".into(), AvroValue::Int(id))]),
        )
        .expect("key");
        Some(Bytes::from(framing::frame(key_id, &datum)))
    };
    let keyed = |id: i64, name: &str| (key(id as i32), Some(row(&f, id, name, None)));
    let worker = Worker::new(f.store.clone(), MemoryPool::new(64 << 20));
    let mut ctx = context(&f, false, 64 << 20, "");
    ctx.key_type = ValueType::BySchemaId;
    worker.add_table_with_base("t", ctx, &source(&f, 0), LiveFiles::default());
    let mut table = Table::default();

    // Round 1: key 4 written then deleted by a tombstone in the same job.
    let first = vec![
        keyed(1, "a"),
        keyed(2, "b"),
        keyed(3, "c"),
        keyed(4, "d"),
        (key(4), None),
    ];
    common::append_records(&f.store, f.stream, &first).await;
    round(&f, &worker, &mut table).await;
    assert_eq!(table.rows(), names(&[(1, "a"), (2, "b"), (3, "c")]));

    // Round 2: 2 deleted; 3 deleted then written again (the later record wins); a tombstone
    // of a key that never had a row; a tombstone without a key is skipped.
    let second = vec![
        (key(2), None),
        (key(3), None),
        keyed(3, "c2"),
        (key(9), None),
        (None, None),
    ];
    common::append_records(&f.store, f.stream, &second).await;
    let (_, deletes) = round(&f, &worker, &mut table).await;
    assert!(deletes >= 1, "{deletes} delete files");
    assert_eq!(table.rows(), names(&[(1, "a"), (3, "c2")]));
}

/// A cluster's split of the work (docs/architecture.md, "Cluster"): the partitions' owners
/// run deferred jobs (rows de-duplicated, deleted keys returned, no index), and the table's
/// coordinator applies each job's rows and deleted keys to its one [`TableIndex`] in the order
/// the jobs ran. The table must read as when one worker does both, across rounds of several
/// jobs, CDC deletes, a key written and deleted in one job, and an index built again from the
/// table (a new coordinator).
#[tokio::test]
async fn deferred_jobs_applied_by_the_coordinators_index_leave_the_latest_row_per_key() {
    let f = fixture().await;
    let worker = Worker::new(f.store.clone(), MemoryPool::new(64 << 20));
    let mut ctx = context(&f, true, 64 << 20, "");
    ctx.settings.target_file_bytes = 1;
    let spec = ctx.upsert.clone().expect("upsert");
    let mut deferred = ctx.clone();
    deferred.upsert.as_mut().expect("upsert").deferred = true;
    worker.add_table("t", deferred, &source(&f, 0));
    let mut index = TableIndex::build(&spec, &ctx.target.file_io, None, &LiveFiles::default())
        .await
        .expect("an empty index");
    let mut table = Table::default();
    append(
        &f,
        vec![
            row(&f, 1, "a", None),
            row(&f, 2, "b", Some("I")),
            row(&f, 3, "c", Some("c")),
            row(&f, 1, "a2", Some("U")),
        ],
    )
    .await;
    table.commit(deferred_round(&f, &worker, &ctx, &mut index).await);
    assert_eq!(table.rows(), names(&[(1, "a2"), (2, "b"), (3, "c")]));
    // Two jobs in one round: the second's deletes point into the first's file.
    append(&f, vec![row(&f, 2, "b2", Some("u")), row(&f, 4, "d", None)]).await;
    append(
        &f,
        vec![
            row(&f, 2, "b3", Some("U")),
            row(&f, 3, "ignored", Some("D")),
            row(&f, 5, "e", Some("r")),
        ],
    )
    .await;
    let (_, deletes) = table.commit(deferred_round(&f, &worker, &ctx, &mut index).await);
    assert!(deletes >= 2, "{deletes} delete files");
    assert_eq!(
        table.rows(),
        names(&[(1, "a2"), (2, "b3"), (4, "d"), (5, "e")])
    );
    // Written and deleted in one job; a delete of a key no row has.
    append(
        &f,
        vec![
            row(&f, 6, "f", None),
            row(&f, 6, "f", Some("d")),
            row(&f, 99, "never", Some("D")),
        ],
    )
    .await;
    table.commit(deferred_round(&f, &worker, &ctx, &mut index).await);
    assert_eq!(
        table.rows(),
        names(&[(1, "a2"), (2, "b3"), (4, "d"), (5, "e")])
    );
    // A new coordinator builds its index from the table.
    drop(index);
    let mut index = TableIndex::build(
        &spec,
        &ctx.target.file_io,
        table.schema.as_ref(),
        &table.live(),
    )
    .await
    .expect("rebuilt");
    append(
        &f,
        vec![
            row(&f, 4, "d2", Some("U")),
            row(&f, 1, "gone", Some("D")),
            row(&f, 7, "g", None),
        ],
    )
    .await;
    table.commit(deferred_round(&f, &worker, &ctx, &mut index).await);
    assert_eq!(
        table.rows(),
        names(&[(2, "b3"), (4, "d2"), (5, "e"), (7, "g")]),
        "the rebuilt index found the rows of earlier rounds"
    );
}

/// One round of a deferred table: the converter's jobs, then the coordinator's `index` over
/// them, job after job.
async fn deferred_round(
    f: &Fixture,
    worker: &Worker,
    ctx: &TableContext,
    index: &mut TableIndex,
) -> Vec<(i32, JobOutput)> {
    let end = f.store.end_offset(f.stream).expect("end");
    let mut outputs = worker
        .drain("t", &BTreeMap::from([(0, end)]))
        .await
        .expect("drain");
    for (n, (_, out)) in outputs.iter_mut().enumerate() {
        assert!(
            out.delete_files.is_empty(),
            "a deferred job writes no deletes"
        );
        let deleted = std::mem::take(&mut out.deleted_keys);
        out.delete_files = index
            .apply_job(
                &ctx.target,
                &format!("p0-{}-{}-j{n}", out.next_offset, end),
                &out.schema,
                &out.data_files,
                deleted,
                &ctx.settings,
            )
            .await
            .expect("applied");
    }
    outputs
}

/// A new coordinator catches up from a checkpoint of the index instead of reading every data
/// file (`index_checkpoint`): from a checkpoint of round 2, through rounds that update and
/// delete keys and a data file another engine removed with its rows, the caught-up index is
/// the rebuilt one, and rounds applied to it leave the latest row per key. A checkpoint of
/// another snapshot, and a delete file gone while its data file stayed, are refused. Both
/// with the index in memory and spilled to runs.
#[tokio::test]
async fn a_checkpointed_index_catches_up_to_the_table_as_a_rebuild_would() {
    catch_up_from_a_checkpoint(64 << 20).await;
    catch_up_from_a_checkpoint(1 << 10).await;
}

async fn catch_up_from_a_checkpoint(index_budget: usize) {
    let f = fixture().await;
    let worker = Worker::new(f.store.clone(), MemoryPool::new(64 << 20));
    let mut ctx = context(&f, true, index_budget, "");
    ctx.settings.target_file_bytes = 1;
    let spec = ctx.upsert.clone().expect("upsert");
    let mut deferred = ctx.clone();
    deferred.upsert.as_mut().expect("upsert").deferred = true;
    worker.add_table("t", deferred, &source(&f, 0));
    let file_io = ctx.target.file_io.clone();
    let mut index = TableIndex::build(&spec, &file_io, None, &LiveFiles::default())
        .await
        .expect("an empty index");
    let mut table = Table::default();
    let names_of = |n: std::ops::Range<i64>, tag: &str| -> Vec<Bytes> {
        n.map(|i| row(&f, i, &format!("{tag}{i}"), Some("U")))
            .collect()
    };
    append(&f, names_of(0..40, "a")).await;
    table.commit(deferred_round(&f, &worker, &ctx, &mut index).await);
    append(&f, names_of(20..60, "b")).await;
    table.commit(deferred_round(&f, &worker, &ctx, &mut index).await);
    // Round 2 landed: the index holds its rows exactly.
    index.landed(Some(2));
    let of = inlet_table_worker::CheckpointOf {
        table_uuid: "t-uuid".into(),
        snapshot_id: 2,
        id_field_ids: spec
            .id_field_ids(table.schema.as_ref().expect("schema"))
            .expect("ids"),
    };
    let path = format!("{}/checkpoint-2.kix", ctx.target.data_location);
    let written = index
        .write_checkpoint(&file_io, &path, &of)
        .await
        .expect("written");
    assert_eq!(written.entries, 60);
    let then = table.live();
    let mut wrong = of.clone();
    wrong.snapshot_id = 1;
    assert!(index
        .write_checkpoint(&file_io, &path, &wrong)
        .await
        .is_err());
    // Updates, CDC deletes and new keys after the checkpoint.
    append(&f, names_of(50..70, "c")).await;
    append(
        &f,
        vec![row(&f, 0, "", Some("D")), row(&f, 25, "", Some("d"))],
    )
    .await;
    table.commit(deferred_round(&f, &worker, &ctx, &mut index).await);
    append(&f, names_of(5..8, "d")).await;
    table.commit(deferred_round(&f, &worker, &ctx, &mut index).await);
    // Another engine deletes the rows of round 1's first file by dropping the file.
    let gone = table.data.remove(0).0;
    let before = table.rows();
    assert!(!before.is_empty());
    let now = table.live();
    let rebuilt = TableIndex::build(&spec, &file_io, table.schema.as_ref(), &now)
        .await
        .expect("rebuilt");
    let outcome = TableIndex::from_checkpoint(&spec, &file_io, &path, &of, &then, &now)
        .await
        .expect("caught up");
    let FromCheckpoint::Built(mut caught, done) = outcome else {
        panic!("refused: {outcome:?}")
    };
    assert_eq!(done.new_data_files, now.data.len() - (then.data.len() - 1));
    assert!(done.dropped > 0 && done.new_delete_files > 0, "{done:?}");
    let rows = caught.live_rows().expect("rows");
    assert_eq!(rows, rebuilt.live_rows().expect("rows"));
    assert!(rows.iter().all(|(_, p, _)| p != gone.file_path()));
    assert_eq!(rows.len(), before.len());
    // Another engine appends a copy of round 1's file with round 1's sequence number (as a
    // rewrite keeping its starting sequence number does): its keys lose to the later rows
    // the checkpoint names and win where no later row is live, as in a rebuild.
    let copy = gone.file_path().replace(".parquet", "-copy.parquet");
    assert_ne!(copy, gone.file_path());
    std::fs::copy(
        gone.file_path().trim_start_matches("file://"),
        copy.trim_start_matches("file://"),
    )
    .expect("copied");
    let mut with_copy = now.clone();
    with_copy.data.push(LiveDataFile {
        file: FileRef {
            path: copy.clone(),
            partition: gone.partition().clone(),
            spec_id: 0,
        },
        sequence_number: 1,
    });
    let rebuilt = TableIndex::build(&spec, &file_io, table.schema.as_ref(), &with_copy)
        .await
        .expect("rebuilt");
    let outcome = TableIndex::from_checkpoint(&spec, &file_io, &path, &of, &then, &with_copy)
        .await
        .expect("caught up");
    let FromCheckpoint::Built(copied, _) = outcome else {
        panic!("refused: {outcome:?}")
    };
    let rows = copied.live_rows().expect("rows");
    assert_eq!(rows, rebuilt.live_rows().expect("rows"));
    assert!(
        rows.iter().any(|(_, p, _)| *p == copy),
        "some keys live in the copy"
    );
    drop((copied, rebuilt));
    // Rounds go on from the caught-up index.
    append(&f, names_of(0..70, "e")).await;
    table.commit(deferred_round(&f, &worker, &ctx, &mut caught).await);
    let expect: BTreeMap<i64, String> = (0..70).map(|i| (i, format!("e{i}"))).collect();
    assert_eq!(table.rows(), expect);
    // A checkpoint of another snapshot is refused, and so is a delete file gone while the
    // data file it deleted rows of stayed (those rows would be live again).
    let mut other = of.clone();
    other.snapshot_id = 3;
    let outcome = TableIndex::from_checkpoint(&spec, &file_io, &path, &other, &then, &now)
        .await
        .expect("read");
    assert!(matches!(outcome, FromCheckpoint::Refused(_)), "{outcome:?}");
    let mut undeleted = then.clone();
    let now = table.live();
    let kept: Vec<String> = now.position_deletes.clone();
    undeleted.position_deletes = kept.clone();
    // The last round's deletes name rows of files that stay.
    let mut fewer = now.clone();
    fewer.position_deletes = kept[..kept.len() - 1].to_vec();
    let outcome = TableIndex::from_checkpoint(&spec, &file_io, &path, &of, &undeleted, &fewer)
        .await
        .expect("read");
    let FromCheckpoint::Refused(why) = outcome else {
        panic!("{outcome:?}")
    };
    assert!(why.contains("left the table"), "{why}");
    // A checkpoint cut short is an error, not an index.
    let bytes = std::fs::read(path.trim_start_matches("file://")).expect("checkpoint");
    std::fs::write(
        path.trim_start_matches("file://"),
        &bytes[..bytes.len() - 5],
    )
    .expect("cut");
    assert!(
        TableIndex::from_checkpoint(&spec, &file_io, &path, &of, &then, &table.live())
            .await
            .is_err()
    );
}
