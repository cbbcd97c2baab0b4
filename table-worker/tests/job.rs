//! Conversion jobs over a real stream store and schema registry: Kafka record batches of
//! Confluent-framed records in, Parquet data files out, read back with the `parquet` crate.
//! Also the memory test of docs/architecture.md, "Time-shared memory": 100 table topics converting at once stay within the
//! node's one budget.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;

use common::whole;

use std::sync::Arc;

use apache_avro::types::Value as AvroValue;
use arrow::array::{Array, AsArray};
use arrow::datatypes::Int64Type;
use bytes::Bytes;
use inlet_schema_registry::framing;
use inlet_storage::{StreamId, StreamStore};
use inlet_table_worker::Change;
use inlet_table_worker::MemoryPool;
use inlet_table_worker::{convert_range, JobOutput, JobSpec, TableContext, ValueType};
use kafka_protocol::records::Compression;

const V1: &str = r#"{"type":"record","name":"User","namespace":"t","fields":[{"name":"id","type":"long"},{"name":"name","type":"string"}]}"#;
const V2: &str = r#"{"type":"record","name":"User","namespace":"t","fields":[{"name":"id","type":"long"},{"name":"name","type":"string"},{"name":"email","type":["null","string"],"default":null}]}"#;

/// What this file's tests add to the common fixture.
struct Job {
    warehouse: String,
}

type Fixture = common::Fixture<Job>;

async fn fixture() -> Fixture {
    let f = common::Fixture::open().await;
    let warehouse = format!("file://{}/warehouse", f.dir.path().display());
    f.with(Job { warehouse })
}

/// Appends `values` as one Kafka record batch, keyed `k0`, `k1`…
async fn append(store: &StreamStore, stream: StreamId, values: &[Option<Bytes>]) {
    let records: Vec<(Option<Bytes>, Option<Bytes>)> = values
        .iter()
        .enumerate()
        .map(|(i, v)| (Some(Bytes::from(format!("k{i}"))), v.clone()))
        .collect();
    common::append_records(store, stream, &records).await;
}

async fn register(registry: &inlet_schema_registry::Registry, subject: &str, text: &str) -> u32 {
    common::register_typed(registry, subject, text, None).await
}

fn framed_user(schema_text: &str, id: u32, n: i64, email: Option<&str>) -> Bytes {
    let schema = apache_avro::Schema::parse_str(schema_text).expect("schema");
    let mut fields = vec![
        ("id".to_string(), AvroValue::Long(n)),
        ("name".to_string(), AvroValue::String(format!("user-{n}"))),
    ];
    if schema_text.contains("email") {
        fields.push((
            "email".to_string(),
            match email {
                Some(e) => AvroValue::Union(1, Box::new(AvroValue::String(e.into()))),
                None => AvroValue::Union(0, Box::new(AvroValue::Null)),
            },
        ));
    }
    let datum = apache_avro::to_avro_datum(&schema, AvroValue::Record(fields)).expect("encode");
    Bytes::from(framing::frame(id, &datum))
}

/// A fixture with the stream `kafka/<name>/0`.
async fn fixture_and_stream(name: &str) -> (Fixture, StreamId) {
    let f = fixture().await;
    let stream = common::create_stream(&f.store, &format!("kafka/{name}/0")).await;
    (f, stream)
}

/// Appends V1 users `users` (framed with schema `id`) to `stream` as one batch.
async fn append_users(f: &Fixture, stream: StreamId, id: u32, users: std::ops::Range<i64>) {
    let values: Vec<Option<Bytes>> = users.map(|n| Some(framed_user(V1, id, n, None))).collect();
    append(&f.store, stream, &values).await;
}

/// Streams `kafka/<prefix><t>/0` for `t` in `0..count`, each holding one batch of `users` V1
/// users (schema `id`).
async fn user_streams(
    f: &Fixture,
    id: u32,
    prefix: &str,
    count: usize,
    users: i64,
) -> Vec<StreamId> {
    let mut streams = Vec::new();
    for t in 0..count {
        let stream = common::create_stream(&f.store, &format!("kafka/{prefix}{t}/0")).await;
        append_users(f, stream, id, 0..users).await;
        streams.push(stream);
    }
    streams
}

/// A job over partition 3's `stream` from `from` (to `until`), reading up to 32 MiB.
fn partition_3(stream: StreamId, from: u64, until: Option<u64>) -> JobSpec {
    JobSpec {
        partition: 3,
        from,
        until,
        ..whole(stream, 32 << 20)
    }
}

fn context(f: &Fixture, table: &str) -> TableContext {
    common::table_context(&f.registry, format!("{}/{table}/data", f.warehouse))
}

/// [`common::convert_whole`], which must succeed.
async fn convert_whole(f: &Fixture, ctx: &TableContext, stream: StreamId) -> JobOutput {
    let out = common::convert_whole(&f.store, ctx, stream).await;
    out.expect("convert")
}

#[tokio::test]
async fn a_range_with_two_schema_versions_and_a_bad_record() {
    let f = fixture().await;
    let v1 = register(&f.registry, "users-value", V1).await;
    let v2 = register(&f.registry, "users-value", V2).await;
    let stream = common::create_stream(&f.store, "kafka/users/0").await;
    append_users(&f, stream, v1, 0..10).await;
    append(&f.store, stream, &[Some(Bytes::from_static(b"not framed"))]).await;
    let second: Vec<Option<Bytes>> = (10..20)
        .map(|n| Some(framed_user(V2, v2, n, Some(&format!("u{n}@x")))))
        .collect();
    append(&f.store, stream, &second).await;

    let pool = MemoryPool::new(64 << 20);
    let mut ctx = context(&f, "users");
    ctx.dead_letter_target = Some(inlet_table_worker::data_file::FileTarget {
        data_location: format!("{}/users_dlq/data", f.warehouse),
        ..ctx.target.clone()
    });
    let out = convert_range(&f.store, &pool, &ctx, partition_3(stream, 0, None))
        .await
        .expect("convert");
    assert_eq!(out.next_offset, 21);
    assert_eq!(out.rows, 20);
    assert_eq!(out.dead_letters.len(), 1);
    assert_eq!(out.dead_letters[0].offset, 10);
    assert!(
        out.dead_letters[0].error.contains("magic"),
        "{}",
        out.dead_letters[0].error
    );
    // A new table: the union of both versions is its first schema, no changes to commit.
    assert!(out.changes.is_empty(), "{:?}", out.changes);
    assert!(out.schema.field_by_name("email").is_some());
    assert_eq!(pool.used(), 0, "the job returned its memory");

    let batches = common::read_outputs(&out);
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, 20);
    let mut ids: Vec<i64> = Vec::new();
    let mut emails = 0;
    let mut offsets: Vec<i64> = Vec::new();
    for b in &batches {
        ids.extend(
            b.column_by_name("id")
                .expect("id")
                .as_primitive::<Int64Type>()
                .values()
                .iter(),
        );
        emails += b.num_rows() - b.column_by_name("email").expect("email").null_count();
        let kafka = b.column_by_name("_kafka").expect("_kafka").as_struct();
        offsets.extend(kafka.column(1).as_primitive::<Int64Type>().values().iter());
        let partitions = kafka
            .column(0)
            .as_primitive::<arrow::datatypes::Int32Type>();
        assert!(partitions.values().iter().all(|p| *p == 3));
    }
    assert_eq!(ids, (0..20).collect::<Vec<i64>>());
    assert_eq!(emails, 10);
    let expected: Vec<i64> = (0..10).chain(11..21).collect();
    assert_eq!(offsets, expected);

    // The next range of the same table: a table that exists gets the evolution proposed.
    let mut ctx = context(&f, "users");
    let v1_table = inlet_table_worker::reconcile(
        None,
        &inlet_table_worker::avro_to_iceberg(&apache_avro::Schema::parse_str(V1).expect("v1"), &[])
            .expect("map"),
    )
    .expect("table")
    .schema;
    ctx.schema = Some(v1_table);
    let out = convert_range(&f.store, &pool, &ctx, partition_3(stream, 11, Some(15)))
        .await
        .expect("convert");
    assert_eq!((out.next_offset, out.rows), (15, 4));
    assert!(
        matches!(&out.changes[..], [Change::AddColumn { path, .. }] if path == &["email"]),
        "{:?}",
        out.changes
    );
}

/// 100 table topics converting at once through one small pool: jobs take turns, every job
/// finishes, and the pool never lends more than its budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_table_topics_share_one_memory_budget() {
    let f = Arc::new(fixture().await);
    let id = register(&f.registry, "t-value", V1).await;
    let streams = user_streams(&f, id, "t", 100, 200).await;
    let budget = 4 << 20;
    let pool = MemoryPool::new(budget);
    let rss_before = rss_bytes();
    let mut jobs = tokio::task::JoinSet::new();
    for (t, stream) in streams.into_iter().enumerate() {
        let (f, pool) = (f.clone(), pool.clone());
        jobs.spawn(async move {
            let ctx = context(&f, &format!("t{t}"));
            convert_range(&f.store, &pool, &ctx, whole(stream, 1 << 20))
                .await
                .expect("convert")
                .rows
        });
    }
    let mut total = 0;
    while let Some(j) = jobs.join_next().await {
        total += j.expect("job");
    }
    assert_eq!(total, 100 * 200);
    assert!(
        pool.high_water() <= budget,
        "{} > {budget}",
        pool.high_water()
    );
    assert!(pool.high_water() > 0);
    assert_eq!(pool.used(), 0);
    if let (Some(before), Some(after)) = (rss_before, rss_bytes()) {
        // 100 topics × the 1 MiB each asked for would be 100 MiB; the pool keeps it to its
        // 4 MiB plus what the runtime and allocator keep around.
        let grown = after.saturating_sub(before);
        assert!(grown < 64 << 20, "RSS grew by {grown} bytes");
    }
}

/// Resident set size of this process, from /proc (None elsewhere).
fn rss_bytes() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// The worker converts a partition as soon as its unsynced bytes pass the file target, leaves
/// small ones for the commit, and a drain covers every offset exactly once.
#[tokio::test]
async fn the_worker_converts_full_partitions_early_and_tails_at_commit() {
    use inlet_table_worker::{PartitionSource, Worker};
    let f = fixture().await;
    let id = register(&f.registry, "w-value", V1).await;
    let busy = common::create_stream(&f.store, "kafka/w/0").await;
    let quiet = common::create_stream(&f.store, "kafka/w/1").await;
    for chunk in 0..10 {
        append_users(&f, busy, id, chunk * 50..chunk * 50 + 50).await;
    }
    append_users(&f, quiet, id, 0..3).await;

    let worker = Worker::new(f.store.clone(), MemoryPool::new(16 << 20));
    let mut ctx = context(&f, "w");
    ctx.settings.target_file_bytes = 4096;
    worker.add_table(
        "w",
        ctx,
        &[
            PartitionSource {
                partition: 0,
                stream: busy,
                start: 0,
            },
            PartitionSource {
                partition: 1,
                stream: quiet,
                start: 0,
            },
        ],
    );
    // A table polled first whose conversion fails (its subject has no schema): the tables
    // after it still convert.
    let mut broken = context(&f, "a-broken");
    broken.value_type = ValueType::ByLatestSchema {
        subject: "nobody-value".into(),
    };
    broken.settings.target_file_bytes = 4096;
    worker.add_table(
        "a-broken",
        broken,
        &[PartitionSource {
            partition: 0,
            stream: busy,
            start: 0,
        }],
    );
    let jobs = worker.poll().await;
    assert!(jobs >= 1, "the busy partition passed the target");
    assert_eq!(
        worker.synced("a-broken").await.expect("synced")[&0],
        0,
        "the broken table did not convert"
    );
    let synced = worker.synced("w").await.expect("synced");
    assert!(synced[&0] > 0, "{synced:?}");
    assert_eq!(synced[&1], 0, "the quiet partition waits for the commit");

    let until = [(0, 500u64), (1, 3u64)].into_iter().collect();
    let outputs = worker.drain("w", &until).await.expect("drain");
    let mut next = std::collections::BTreeMap::new();
    let mut rows = 0;
    for (partition, out) in &outputs {
        rows += out.rows;
        let from = next.get(partition).copied().unwrap_or(0u64);
        assert!(out.next_offset > from, "ranges move forward");
        next.insert(*partition, out.next_offset);
        assert!(!out.data_files.is_empty());
    }
    assert_eq!(rows, 503);
    assert_eq!(next[&0], 500);
    assert_eq!(next[&1], 3);
    assert!(
        worker.drain("w", &until).await.expect("again").is_empty(),
        "handed over once"
    );
}

/// `transform.value.type=flatten`: nested record fields become `parent_child` columns, null
/// where the parent is.
#[tokio::test]
async fn flatten_turns_nested_fields_into_columns() {
    const NESTED: &str = r#"{"type":"record","name":"P","namespace":"t","fields":[
        {"name":"id","type":"long"},
        {"name":"address","type":["null",{"type":"record","name":"A","fields":[
            {"name":"city","type":"string"},{"name":"zip","type":"int"}]}],"default":null}]}"#;
    let f = fixture().await;
    let id = register(&f.registry, "p-value", NESTED).await;
    let schema = apache_avro::Schema::parse_str(NESTED).expect("schema");
    let values: Vec<Option<Bytes>> = (0..4)
        .map(|n| {
            let address = if n % 2 == 0 {
                AvroValue::Union(
                    1,
                    Box::new(AvroValue::Record(vec![
                        ("city".into(), AvroValue::String(format!("c{n}"))),
                        ("zip".into(), AvroValue::Int(n as i32)),
                    ])),
                )
            } else {
                AvroValue::Union(0, Box::new(AvroValue::Null))
            };
            let datum = apache_avro::to_avro_datum(
                &schema,
                AvroValue::Record(vec![
                    ("id".into(), AvroValue::Long(n)),
                    ("address".into(), address),
                ]),
            )
            .expect("datum");
            Some(Bytes::from(framing::frame(id, &datum)))
        })
        .collect();
    let stream = common::create_stream(&f.store, "kafka/p/0").await;
    append(&f.store, stream, &values).await;
    let mut ctx = context(&f, "p");
    ctx.transform = inlet_table_worker::ValueTransform::Flatten;
    let out = convert_whole(&f, &ctx, stream).await;
    let names: Vec<_> = out
        .schema
        .as_struct()
        .fields()
        .iter()
        .map(|f| f.name.clone())
        .collect();
    assert_eq!(names, vec!["id", "address_city", "address_zip", "_kafka"]);
    let batches = common::read_outputs(&out);
    let b = &batches[0];
    let city = b
        .column_by_name("address_city")
        .expect("city")
        .as_string::<i32>();
    assert_eq!(city.value(0), "c0");
    assert!(city.is_null(1));
    assert_eq!(
        b.column_by_name("address_zip").expect("zip").null_count(),
        2
    );
}

/// Records deleted by retention before they were converted are skipped, not a stall.
#[tokio::test]
async fn a_range_trimmed_by_retention_resumes_at_the_first_record_left() {
    let f = fixture().await;
    let id = register(&f.registry, "r-value", V1).await;
    let stream = common::create_stream(&f.store, "kafka/r/0").await;
    for chunk in 0..2 {
        append_users(&f, stream, id, chunk * 10..chunk * 10 + 10).await;
    }
    f.store.trim(stream, 10).await.expect("trim");
    let out = convert_whole(&f, &context(&f, "r"), stream).await;
    assert_eq!((out.rows, out.next_offset), (10, 20));
}

/// `convert.value.type=by_latest_schema`: unframed Avro datums read with the subject's latest
/// schema.
#[tokio::test]
async fn unframed_values_use_the_latest_schema_of_the_subject() {
    let f = fixture().await;
    register(&f.registry, "u-value", V1).await;
    let schema = apache_avro::Schema::parse_str(V1).expect("schema");
    let values: Vec<Option<Bytes>> = (0..5)
        .map(|n| {
            let v = AvroValue::Record(vec![
                ("id".into(), AvroValue::Long(n)),
                ("name".into(), AvroValue::String(format!("n{n}"))),
            ]);
            Some(Bytes::from(
                apache_avro::to_avro_datum(&schema, v).expect("datum"),
            ))
        })
        .collect();
    let stream = common::create_stream(&f.store, "kafka/u/0").await;
    append(&f.store, stream, &values).await;
    let mut ctx = context(&f, "u");
    ctx.value_type = ValueType::ByLatestSchema {
        subject: "u-value".into(),
    };
    let out = convert_whole(&f, &ctx, stream).await;
    assert_eq!(out.rows, 5, "{:?}", out.dead_letters);
    let batches = common::read_outputs(&out);
    let names = batches[0]
        .column_by_name("name")
        .expect("name")
        .as_string::<i32>();
    assert_eq!(names.value(4), "n4");
}

/// A job stops reading once the records it decoded hold its `max_input_bytes`, not once it has
/// read that many stored bytes, and a batch that alone holds more than a few MiB is split
/// between jobs: zstd batches of tiny records store a few KiB and decode to far more, and
/// counting stored bytes (or decoding whole batches) let one job hold many times the memory it
/// reserved. Jobs that go on from each other's next offset convert every record exactly once,
/// compressed or not.
#[tokio::test]
async fn a_job_counts_what_its_records_hold_and_stops_inside_a_batch() {
    for compression in [Compression::Zstd, Compression::None] {
        let name = format!("tiny-{compression:?}");
        let (f, stream) = fixture_and_stream(&name).await;
        // 100,000 records of one byte: ~8 MB as decoded records, over the 4 MiB a job holds
        // before it splits a batch.
        let per_batch = 100_000;
        for _ in 0..3 {
            let records: Vec<(Option<Bytes>, Option<Bytes>)> = (0..per_batch)
                .map(|_| (None, Some(Bytes::from_static(b"x"))))
                .collect();
            common::append_records_with(&f.store, stream, &records, compression).await;
        }
        let stored: usize = f
            .store
            .read(stream, 0, 64 << 20)
            .await
            .expect("read")
            .iter()
            .map(|b| b.payload.len())
            .sum();
        let max_input_bytes = 1 << 20;
        // Each record holds ~80 bytes as a decoded struct; zstd stores it in a few.
        if compression == Compression::Zstd {
            let holds = 3 * per_batch * 80;
            assert!(stored * 8 < holds, "the batches store {stored} bytes");
        }
        let mut ctx = context(&f, &name);
        ctx.value_type = ValueType::Raw;
        let pool = MemoryPool::new(64 << 20);
        let (mut from, mut rows, mut jobs) = (0u64, 0u64, 0);
        while from < 3 * per_batch as u64 {
            let out = convert_range(
                &f.store,
                &pool,
                &ctx,
                JobSpec {
                    from,
                    ..whole(stream, max_input_bytes)
                },
            )
            .await
            .expect("convert");
            // No job takes a whole batch.
            assert!(
                out.next_offset > from && out.next_offset - from < per_batch as u64,
                "{compression:?}: a job from {from} ended at {}",
                out.next_offset
            );
            assert_eq!(
                out.rows,
                out.next_offset - from,
                "{compression:?}: every record of the range"
            );
            rows += out.rows;
            from = out.next_offset;
            jobs += 1;
        }
        assert_eq!(rows, 3 * per_batch as u64, "{compression:?}");
        assert!(jobs > 3, "{compression:?}: {jobs} jobs");
    }
}

/// Rows carry each record's Kafka timestamp in `_kafka.timestamp`: the producer's CreateTime,
/// or for a batch the broker stamped with LogAppendTime, the broker's time for every record
/// (Kafka's rule: the batch's max timestamp), compressed or not.
#[tokio::test]
async fn rows_carry_create_time_or_the_brokers_log_append_time() {
    for compression in [Compression::None, Compression::Lz4] {
        let name = format!("stamped-{compression:?}");
        let (f, stream) = fixture_and_stream(&name).await;
        let records: Vec<(Option<Bytes>, Option<Bytes>)> = (0..3)
            .map(|i| (None, Some(Bytes::from(format!("v{i}")))))
            .collect();
        let created = common::encode_records(&records, compression);
        common::append_batch(&f.store, stream, created.clone(), 3).await;
        let stamped = inlet_records::batch::set_log_append_time(&created, 1_800_000_000_000);
        common::append_batch(&f.store, stream, stamped, 3).await;
        let mut ctx = context(&f, &name);
        ctx.value_type = ValueType::Raw;
        let pool = MemoryPool::new(64 << 20);
        let out = convert_range(&f.store, &pool, &ctx, whole(stream, 1 << 20))
            .await
            .expect("convert");
        assert_eq!(out.rows, 6);
        let mut micros: Vec<i64> = Vec::new();
        for b in common::read_outputs(&out) {
            let kafka = b.column_by_name("_kafka").expect("_kafka").as_struct();
            micros.extend(
                kafka
                    .column(2)
                    .as_primitive::<arrow::datatypes::TimestampMicrosecondType>()
                    .values()
                    .iter(),
            );
        }
        let create = 1_700_000_000_000_000;
        let append = 1_800_000_000_000_000;
        assert_eq!(
            micros,
            vec![create, create + 1000, create + 2000, append, append, append],
            "{compression:?}"
        );
    }
}

/// Jobs that all need more than they first reserved, at once, in a pool they fill: none waits
/// for room while holding its own (which deadlocked every table on the node: sixteen jobs
/// filled the pool with their first reservations, then each waited for the others to give
/// some back). A job that cannot grow gives everything back and asks again for what it needs,
/// so every job finishes, converts every record once, and the pool never lends more than its
/// budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_that_outgrow_their_reservations_at_once_never_deadlock() {
    let f = Arc::new(fixture().await);
    let id = register(&f.registry, "grow-value", V1).await;
    let jobs_n = 8;
    let per_job = 4_000;
    // One batch each (a job never splits one under 4 MiB) whose records hold ~400 KiB decoded.
    let streams = user_streams(&f, id, "grow", jobs_n, per_job).await;
    // Eight first reservations of 128 KiB fill the 1 MiB pool; each job then needs several
    // times that.
    let budget = 1 << 20;
    let pool = MemoryPool::new(budget);
    let start = Arc::new(tokio::sync::Barrier::new(jobs_n));
    let mut jobs = tokio::task::JoinSet::new();
    for (t, stream) in streams.into_iter().enumerate() {
        let (f, pool, start) = (f.clone(), pool.clone(), start.clone());
        jobs.spawn(async move {
            let ctx = context(&f, &format!("grow{t}"));
            start.wait().await;
            convert_range(&f.store, &pool, &ctx, whole(stream, budget / jobs_n))
                .await
                .expect("convert")
        });
    }
    let all = async {
        let mut rows = 0;
        while let Some(j) = jobs.join_next().await {
            let out = j.expect("job");
            assert_eq!(out.next_offset, per_job as u64, "the whole range");
            rows += out.rows;
        }
        rows
    };
    let rows = tokio::time::timeout(std::time::Duration::from_secs(60), all)
        .await
        .expect("every job finishes (the pool deadlocked)");
    assert_eq!(rows, (jobs_n * per_job as usize) as u64);
    assert!(
        pool.high_water() <= budget,
        "{} > {budget}",
        pool.high_water()
    );
    assert!(
        pool.high_water() > budget / 2,
        "the jobs grew past their first reservations: {}",
        pool.high_water()
    );
    assert_eq!(pool.used(), 0);
}

/// A schema change the registry accepts (Avro promotes int to double) but an Iceberg table
/// cannot make (int → double is no Iceberg promotion) does not stall the table: the job
/// converts the records of the schema the table takes and makes dead letters of the others,
/// naming the column and the change. The job used to fail, and so every job after it.
#[tokio::test]
async fn records_of_a_schema_the_table_cannot_take_become_dead_letters() {
    const INT: &str =
        r#"{"type":"record","name":"M","namespace":"t","fields":[{"name":"n","type":"int"}]}"#;
    const DOUBLE: &str =
        r#"{"type":"record","name":"M","namespace":"t","fields":[{"name":"n","type":"double"}]}"#;
    let f = fixture().await;
    let ints = register(&f.registry, "m-value", INT).await;
    let doubles = register(&f.registry, "m-value", DOUBLE).await;
    let stream = common::create_stream(&f.store, "kafka/m/0").await;
    let frame = |text: &str, id: u32, v: AvroValue| {
        let schema = apache_avro::Schema::parse_str(text).expect("schema");
        let datum = apache_avro::to_avro_datum(&schema, AvroValue::Record(vec![("n".into(), v)]))
            .expect("encode");
        Some(Bytes::from(framing::frame(id, &datum)))
    };
    let values: Vec<Option<Bytes>> = (0..6)
        .map(|n| {
            if n % 2 == 0 {
                frame(INT, ints, AvroValue::Int(n))
            } else {
                frame(DOUBLE, doubles, AvroValue::Double(n as f64 + 0.5))
            }
        })
        .collect();
    append(&f.store, stream, &values).await;
    let pool = MemoryPool::new(16 << 20);
    let ctx = context(&f, "m");
    let out = convert_range(&f.store, &pool, &ctx, whole(stream, 1 << 20))
        .await
        .expect("the job does not fail on a schema the table cannot take");
    assert_eq!(out.next_offset, 6, "the whole range is consumed");
    assert_eq!(out.rows, 3, "the int records are rows");
    let offsets: Vec<i64> = out.dead_letters.iter().map(|d| d.offset).collect();
    assert_eq!(offsets, vec![1, 3, 5]);
    let why = &out.dead_letters[0].error;
    assert!(
        why.contains(&format!("schema id {doubles}"))
            && why.contains("column n would change from int to double"),
        "{why}"
    );
    let field = out.schema.as_struct().field_by_name("n").expect("column n");
    assert_eq!(
        *field.field_type,
        iceberg::spec::Type::Primitive(iceberg::spec::PrimitiveType::Int),
        "the table keeps its int column"
    );
}

/// Files are cut at the target size of Parquet *output*: the worker learns how much input
/// makes a target-size file (these records compress to a fraction of their input), so the
/// files its early jobs write are near the target, not a target of input's worth of Parquet.
#[tokio::test]
async fn early_files_are_near_the_target_size_of_output() {
    use inlet_table_worker::{PartitionSource, Worker};
    let f = fixture().await;
    let id = register(&f.registry, "sized-value", V1).await;
    let stream = common::create_stream(&f.store, "kafka/sized/0").await;
    let schema = apache_avro::Schema::parse_str(V1).expect("schema");
    let mut offset = 0i64;
    for _ in 0..100 {
        let values: Vec<Option<Bytes>> = (0..500)
            .map(|_| {
                offset += 1;
                let name =
                    format!("{offset:08} the quick brown fox jumps over the lazy dog ").repeat(4);
                let datum = apache_avro::to_avro_datum(
                    &schema,
                    AvroValue::Record(vec![
                        ("id".into(), AvroValue::Long(offset)),
                        ("name".into(), AvroValue::String(name)),
                    ]),
                )
                .expect("encode");
                Some(Bytes::from(framing::frame(id, &datum)))
            })
            .collect();
        // Uncompressed, as librdkafka and the Java clients send by default.
        let records: Vec<(Option<Bytes>, Option<Bytes>)> =
            values.into_iter().map(|v| (None, v)).collect();
        common::append_records_with(&f.store, stream, &records, Compression::None).await;
    }
    let target = 512 << 10;
    let worker = Worker::new(f.store.clone(), MemoryPool::new(64 << 20));
    let mut ctx = context(&f, "sized");
    ctx.settings.target_file_bytes = target;
    worker.add_table(
        "sized",
        ctx,
        &[PartitionSource {
            partition: 0,
            stream,
            start: 0,
        }],
    );
    while worker.poll().await > 0 {}
    let outputs = worker
        .drain("sized", &[(0, 50_000u64)].into_iter().collect())
        .await
        .expect("drain");
    let mut sizes: Vec<u64> = outputs
        .iter()
        .flat_map(|(_, o)| o.data_files.iter().map(|d| d.file_size_in_bytes()))
        .collect();
    let input: usize = outputs.iter().map(|(_, o)| o.decoded_bytes).sum();
    let output: u64 = sizes.iter().sum();
    assert!(
        (output as f64) < input as f64 * 0.5,
        "the records compress ({output} of {input} bytes): else this test shows nothing"
    );
    // The last file holds the tail; the first was written before the ratio was known.
    sizes.pop();
    sizes.remove(0);
    sizes.sort_unstable();
    let median = sizes[sizes.len() / 2];
    assert!(
        median as f64 >= target as f64 * 0.6 && median as f64 <= target as f64 * 1.3,
        "median file {median} bytes for a {target}-byte target: {sizes:?}"
    );
}

/// 32 tables converting large backlogs at once through the worker, in a small pool: every
/// drain finishes, the pool never lends more than its budget, and the process's RSS grows by
/// far less than the backlogs decoded at once would take.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_backlogs_drain_at_once_within_a_small_pool() {
    use inlet_table_worker::{PartitionSource, Worker};
    let f = Arc::new(fixture().await);
    let id = register(&f.registry, "b-value", V1).await;
    let schema = apache_avro::Schema::parse_str(V1).expect("schema");
    let pad = "x".repeat(160);
    let mut streams = Vec::new();
    for t in 0..32 {
        let stream = common::create_stream(&f.store, &format!("kafka/b{t}/0")).await;
        for chunk in 0..8 {
            let records: Vec<(Option<Bytes>, Option<Bytes>)> = (0..1_000)
                .map(|n| {
                    let datum = apache_avro::to_avro_datum(
                        &schema,
                        AvroValue::Record(vec![
                            ("id".into(), AvroValue::Long(chunk * 1_000 + n)),
                            ("name".into(), AvroValue::String(format!("{n}{pad}"))),
                        ]),
                    )
                    .expect("encode");
                    (None, Some(Bytes::from(framing::frame(id, &datum))))
                })
                .collect();
            common::append_records_with(&f.store, stream, &records, Compression::None).await;
        }
        streams.push(stream);
    }
    // 32 backlogs of 8,000 records (~1.6 MiB each, ~52 MiB in all, more decoded) through a
    // 4 MiB pool: a job reads at most a quarter of it.
    let budget = 4 << 20;
    let worker = Arc::new(Worker::new(f.store.clone(), MemoryPool::new(budget)));
    for (t, stream) in streams.iter().enumerate() {
        let mut ctx = context(&f, &format!("b{t}"));
        ctx.settings.target_file_bytes = 256 << 10;
        worker.add_table(
            &format!("b{t}"),
            ctx,
            &[PartitionSource {
                partition: 0,
                stream: *stream,
                start: 0,
            }],
        );
    }
    let rss_before = rss_bytes();
    let mut drains = tokio::task::JoinSet::new();
    for t in 0..32 {
        let worker = worker.clone();
        drains.spawn(async move {
            let outputs = worker
                .drain(&format!("b{t}"), &[(0, 8_000u64)].into_iter().collect())
                .await
                .expect("drain");
            let rows: u64 = outputs.iter().map(|(_, o)| o.rows).sum();
            let next = outputs.last().map(|(_, o)| o.next_offset);
            (rows, next)
        });
    }
    while let Some(d) = drains.join_next().await {
        assert_eq!(d.expect("drain task"), (8_000, Some(8_000)));
    }
    let pool = worker.pool();
    assert!(
        pool.high_water() <= budget,
        "{} > {budget}",
        pool.high_water()
    );
    assert!(pool.high_water() > 0);
    assert_eq!(pool.used(), 0, "every job gave its room back");
    if let (Some(before), Some(after)) = (rss_before, rss_bytes()) {
        // At once, the backlogs' records alone would hold ~60 MiB decoded, and their Arrow
        // rows as much again.
        let grown = after.saturating_sub(before);
        assert!(grown < 48 << 20, "RSS grew by {grown} bytes");
    }
}
