//! The committer over the node's embedded catalog (SQLite and a local object store): rounds
//! become snapshots with Inlet's summary, a round is never committed twice, schema evolution
//! lands with the files that need it, and expiry keeps the metadata bounded. Upsert rounds
//! commit as row deltas that iceberg-rust's own reader applies, only on their base snapshot.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use iceberg::spec::{NestedField, NestedFieldRef, PrimitiveType, Schema, Type};
use iceberg::{NamespaceIdent, TableIdent};
use inlet_table_coordinator::commit::{CommitError, Committer, Round, RoundBase};

/// The embedded catalog (SQLite and a local object store) in `dir`.
async fn embedded(dir: &tempfile::TempDir) -> inlet_catalog::embedded::EmbeddedCatalog {
    let meta = format!("sqlite://{}?mode=rwc", dir.path().join("meta.db").display());
    let root = dir.path().join("objects");
    std::fs::create_dir_all(&root).expect("objects dir");
    inlet_catalog::embedded::open(&meta, &root.to_string_lossy(), None)
        .await
        .expect("catalog")
}

async fn committer(dir: &tempfile::TempDir) -> Committer {
    let catalog = embedded(dir).await;
    Committer::new(catalog.catalog, catalog.pointers)
}

/// A primitive field of a test schema.
fn field(id: i32, name: &str, required: bool, ty: PrimitiveType) -> NestedFieldRef {
    Arc::new(NestedField::new(id, name, Type::Primitive(ty), required))
}

/// A schema of `fields`.
fn schema_of(fields: Vec<NestedFieldRef>) -> Schema {
    Schema::builder()
        .with_fields(fields)
        .build()
        .expect("schema")
}

/// `id` (required long), and with `extra` an optional string `note`.
fn schema(extra: bool) -> Schema {
    let mut fields = vec![field(1, "id", true, PrimitiveType::Long)];
    if extra {
        fields.push(field(2, "note", false, PrimitiveType::String));
    }
    schema_of(fields)
}

fn round(n: u64, extra: bool, timestamp_ms: i64) -> Round {
    Round {
        offsets: BTreeMap::from([(0, n * 10), (1, n)]),
        watermark_ms: Some(1_000 + n as i64),
        partition_watermarks: BTreeMap::from([(0, 1_000 + n as i64), (1, 2_000)]),
        timestamp_ms,
        ..common::plain_round(format!("t-{n}"), schema(extra))
    }
}

#[tokio::test]
async fn rounds_become_snapshots_once_each_and_expire() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = committer(&dir).await;
    let ident = TableIdent::new(NamespaceIdent::new("default".into()), "t".into());
    assert!(c.load(&ident).await.expect("load").is_none());

    let first = c
        .commit(&ident, &round(1, false, 1_000))
        .await
        .expect("commit");
    assert!(first.is_some());
    // The same round again (a retry after an unknown outcome): not committed twice.
    assert_eq!(
        c.commit(&ident, &round(1, false, 1_000))
            .await
            .expect("retry"),
        None
    );
    let table = c.load(&ident).await.expect("load").expect("created");
    assert_eq!(table.metadata().snapshots().len(), 1);
    let committed = Committer::committed(&table);
    assert_eq!(committed.offsets, BTreeMap::from([(0, 10), (1, 1)]));
    assert_eq!(committed.watermark_ms, Some(1_001));
    assert_eq!(
        committed.partition_watermarks,
        BTreeMap::from([(0, 1_001), (1, 2_000)])
    );
    assert_eq!(committed.commit_id.as_deref(), Some("t-1"));

    // A round written with an evolved schema makes it current in the same commit.
    for n in 2..=5 {
        c.commit(&ident, &round(n, true, 1_000 * n as i64))
            .await
            .expect("commit");
    }
    let table = c.load(&ident).await.expect("load").expect("table");
    assert!(table
        .metadata()
        .current_schema()
        .field_by_name("note")
        .is_some());
    assert_eq!(table.metadata().snapshots().len(), 5);
    assert_eq!(
        Committer::committed(&table).offsets,
        BTreeMap::from([(0, 50), (1, 5)])
    );

    // Old metadata files are deleted once the metadata log drops them (here: a log of 2).
    let metadata_files = || {
        std::fs::read_dir(dir.path().join("objects/warehouse/default/t/metadata"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".metadata.json"))
                    .count()
            })
            .unwrap_or(0)
    };
    assert_eq!(
        metadata_files(),
        6,
        "the creation's and one per commit so far"
    );
    c.set_properties(
        &ident,
        [(
            "write.metadata.previous-versions-max".to_string(),
            "2".to_string(),
        )]
        .into(),
    )
    .await
    .expect("set properties");
    assert_eq!(
        metadata_files(),
        3,
        "setting the property already trims the log"
    );
    c.commit(&ident, &round(6, true, 6_000))
        .await
        .expect("commit");
    assert_eq!(
        metadata_files(),
        3,
        "the current file and the two the log keeps"
    );

    // Expire everything older than the newest two.
    let expired = c.expire(&ident, i64::MAX, 2).await.expect("expire");
    assert_eq!(expired, 4);
    let table = c.load(&ident).await.expect("load").expect("table");
    assert_eq!(table.metadata().snapshots().len(), 2);
    assert_eq!(
        Committer::committed(&table).offsets,
        BTreeMap::from([(0, 60), (1, 6)]),
        "the current snapshot stays"
    );
    // Nothing old enough: nothing expires.
    assert_eq!(c.expire(&ident, 0, 1).await.expect("expire"), 0);
}

fn upsert_schema() -> Schema {
    schema_of(vec![
        field(1, "id", true, PrimitiveType::Long),
        field(2, "name", false, PrimitiveType::String),
    ])
}

/// Where data and delete files of `table` are written.
fn file_target(table: &iceberg::table::Table) -> inlet_table_worker::data_file::FileTarget {
    inlet_table_worker::data_file::FileTarget {
        file_io: table.file_io().clone(),
        schema: table.metadata().current_schema().clone(),
        spec: table.metadata().default_partition_spec().clone(),
        data_location: format!("{}/data", table.metadata().location()),
    }
}

/// A committer on an embedded catalog in `dir`, and a new append-only table `default.<name>`
/// of [`upsert_schema`].
async fn append_table(
    dir: &tempfile::TempDir,
    name: &str,
) -> (Committer, TableIdent, iceberg::table::Table) {
    let c = committer(dir).await;
    let ident = TableIdent::new(NamespaceIdent::new("default".into()), name.into());
    let table = c
        .create_with_ids_if_missing(&ident, &upsert_schema(), None, &[])
        .await
        .expect("create");
    (c, ident, table)
}

/// The files a scan of `table` plans, under `filter`.
async fn plan(
    table: &iceberg::table::Table,
    filter: Option<iceberg::expr::Predicate>,
) -> Vec<iceberg::scan::FileScanTask> {
    use futures::TryStreamExt;
    let mut scan = table.scan();
    if let Some(f) = filter {
        scan = scan.with_filter(f);
    }
    scan.build()
        .expect("scan")
        .plan_files()
        .await
        .expect("plan")
        .try_collect()
        .await
        .expect("tasks")
}

/// [`data_file`] of rows whose strings are owned.
async fn owned_data_file(
    table: &iceberg::table::Table,
    prefix: &str,
    rows: &[(i64, String)],
) -> iceberg::spec::DataFile {
    let borrowed: Vec<(i64, &str)> = rows.iter().map(|(i, s)| (*i, s.as_str())).collect();
    data_file(table, prefix, &borrowed).await
}

/// Writes rows (id, name) as one data file of `table`.
async fn data_file(
    table: &iceberg::table::Table,
    prefix: &str,
    rows: &[(i64, &str)],
) -> iceberg::spec::DataFile {
    use arrow::array::{Int64Array, RecordBatch, StringArray};
    use inlet_table_worker::data_file::{write, FileSettings};
    let target = file_target(table);
    let arrow_schema =
        Arc::new(iceberg::arrow::schema_to_arrow_schema(&target.schema).expect("arrow"));
    let batch = RecordBatch::try_new(
        arrow_schema,
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
        ],
    )
    .expect("batch");
    let mut files = write(&target, prefix, [batch], &FileSettings::default())
        .await
        .expect("write");
    assert_eq!(files.len(), 1);
    files.remove(0)
}

/// Position deletes of `rows` (a data file's path, a row in it), written under `target`.
async fn position_deletes(
    target: &inlet_table_worker::data_file::FileTarget,
    prefix: &str,
    rows: Vec<(String, u64)>,
) -> Vec<iceberg::spec::DataFile> {
    let settings = Default::default();
    let written = inlet_table_worker::position_delete::write(target, prefix, None, rows, &settings);
    written.await.expect("deletes")
}

/// Appends `file` to `table` in `catalog`, as another writer (not the committer) would.
async fn foreign_append(
    catalog: &dyn iceberg::Catalog,
    table: &iceberg::table::Table,
    file: iceberg::spec::DataFile,
) {
    use iceberg::transaction::{ApplyTransactionAction, Transaction};
    let tx = Transaction::new(table);
    let action = tx.fast_append().add_data_files([file]);
    let tx = action.apply(tx).expect("apply");
    tx.commit(catalog).await.expect("foreign commit");
}

async fn scan(table: &iceberg::table::Table) -> BTreeMap<i64, String> {
    use arrow::array::AsArray;
    use futures::TryStreamExt;
    let scan = table.scan().build().expect("scan");
    let stream = scan.to_arrow().await.expect("arrow");
    let batches: Vec<arrow::array::RecordBatch> = stream.try_collect().await.expect("batches");
    let mut rows = BTreeMap::new();
    for b in batches {
        let ids = b.column(0).as_primitive::<arrow::datatypes::Int64Type>();
        let names = b.column(1).as_string::<i32>();
        for i in 0..b.num_rows() {
            assert!(
                rows.insert(ids.value(i), names.value(i).to_string())
                    .is_none(),
                "id {} twice",
                ids.value(i)
            );
        }
    }
    rows
}

#[tokio::test]
async fn upsert_rounds_are_row_deltas_on_their_base_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = committer(&dir).await;
    let ident = TableIdent::new(NamespaceIdent::new("default".into()), "u".into());
    let table = c
        .create_with_ids_if_missing(&ident, &upsert_schema(), None, &["id".to_string()])
        .await
        .expect("create");
    let meta = table.metadata();
    assert_eq!(
        meta.current_schema()
            .identifier_field_ids()
            .collect::<Vec<_>>(),
        vec![1],
        "the id column is the identifier field"
    );
    let order = meta.default_sort_order();
    assert_eq!(order.fields.len(), 1);
    assert_eq!(order.fields[0].source_id, 1);

    let first = data_file(&table, "r1", &[(1, "a"), (2, "b"), (3, "c")]).await;
    let first_path = first.file_path().to_string();
    let upsert_round = |n: u64, files, deletes, base| Round {
        files,
        delete_files: deletes,
        base,
        id_columns: vec!["id".into()],
        offsets: BTreeMap::from([(0, n * 10)]),
        watermark_ms: Some(n as i64),
        partition_watermarks: BTreeMap::from([(0, n as i64)]),
        timestamp_ms: 1_000 * n as i64,
        ..common::plain_round(format!("u-{n}"), upsert_schema())
    };
    let s1 = c
        .commit(
            &ident,
            &upsert_round(1, vec![first], Vec::new(), RoundBase::Snapshot(None)),
        )
        .await
        .expect("commit")
        .expect("a snapshot");

    // Round 2: id 2 updated, id 3 deleted: a new data file and position deletes against the
    // first file, in one snapshot.
    let table = c.load(&ident).await.expect("load").expect("table");
    let second = data_file(&table, "r2", &[(2, "b2")]).await;
    let rows = vec![(first_path.clone(), 1), (first_path.clone(), 2)];
    let deletes = position_deletes(&file_target(&table), "r2", rows).await;
    let round2 = upsert_round(2, vec![second], deletes, RoundBase::Snapshot(Some(s1)));
    // On a base it was not built on, the round is refused, not retried.
    let stale = Round {
        base: RoundBase::Snapshot(None),
        ..round2.clone()
    };
    match c.commit(&ident, &stale).await {
        Err(CommitError::BaseChanged { expected, found }) => {
            assert_eq!((expected, found), (None, Some(s1)))
        }
        other => panic!("expected BaseChanged, got {other:?}"),
    }
    let s2 = c
        .commit(&ident, &round2)
        .await
        .expect("commit")
        .expect("a snapshot");

    let table = c.load(&ident).await.expect("load").expect("table");
    let snapshot = table.metadata().current_snapshot().expect("snapshot");
    assert_eq!(snapshot.snapshot_id(), s2);
    let summary = snapshot.summary();
    assert_eq!(summary.operation, iceberg::spec::Operation::Overwrite);
    let props = &summary.additional_properties;
    assert_eq!(
        props.get("inlet.commit-id").map(String::as_str),
        Some("u-2")
    );
    assert_eq!(
        props.get("inlet.offsets").map(String::as_str),
        Some(r#"{"0":20}"#)
    );
    assert_eq!(props.get("inlet.watermark").map(String::as_str), Some("2"));
    assert_eq!(
        props.get("added-position-deletes").map(String::as_str),
        Some("2")
    );
    assert_eq!(
        props.get("total-position-deletes").map(String::as_str),
        Some("2")
    );
    assert_eq!(
        props.get("total-delete-files").map(String::as_str),
        Some("1")
    );
    // One manifest list: the earlier data manifest, the new data manifest, the delete manifest.
    let bytes = table
        .file_io()
        .new_input(snapshot.manifest_list())
        .expect("input")
        .read()
        .await
        .expect("read");
    let list =
        iceberg::spec::ManifestList::parse_with_version(&bytes, iceberg::spec::FormatVersion::V2)
            .expect("manifest list");
    let contents: Vec<_> = list.entries().iter().map(|m| m.content).collect();
    assert_eq!(contents.len(), 3, "{contents:?}");
    assert_eq!(
        contents
            .iter()
            .filter(|c| **c == iceberg::spec::ManifestContentType::Deletes)
            .count(),
        1
    );

    // Iceberg's own reader applies the deletes.
    assert_eq!(
        scan(&table).await,
        BTreeMap::from([(1, "a".to_string()), (2, "b2".to_string())])
    );
    // The live files, as an index rebuild reads them.
    let live = inlet_table_coordinator::reading::live_files(&table)
        .await
        .expect("live");
    assert_eq!(live.data.len(), 2);
    assert_eq!(live.position_deletes.len(), 1);
    let seqs: Vec<i64> = live.data.iter().map(|d| d.sequence_number).collect();
    assert!(seqs.contains(&1) && seqs.contains(&2), "{seqs:?}");

    // A repeated round (unknown outcome) is recognised, whatever its base says.
    assert_eq!(c.commit(&ident, &round2).await.expect("retry"), None);

    // A schema evolution keeps the identifier fields.
    let mut evolved = upsert_schema().as_struct().fields().to_vec();
    evolved.push(field(3, "note", false, PrimitiveType::String));
    let round3 = Round {
        schema: schema_of(evolved),
        ..upsert_round(3, Vec::new(), Vec::new(), RoundBase::Snapshot(Some(s2)))
    };
    c.commit(&ident, &round3)
        .await
        .expect("commit")
        .expect("a snapshot");
    let table = c.load(&ident).await.expect("load").expect("table");
    let schema = table.metadata().current_schema();
    assert!(schema.field_by_name("note").is_some());
    assert_eq!(schema.identifier_field_ids().collect::<Vec<_>>(), vec![1]);
}

#[tokio::test]
async fn optional_id_columns_sort_the_table_but_are_not_identifier_fields() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = committer(&dir).await;
    let ident = TableIdent::new(NamespaceIdent::new("default".into()), "cdc".into());
    // `flatten_debezium` makes every column optional.
    let schema = schema_of(vec![field(1, "id", false, PrimitiveType::Long)]);
    let table = c
        .create_with_ids_if_missing(&ident, &schema, None, &["id".to_string()])
        .await
        .expect("create");
    let meta = table.metadata();
    assert_eq!(meta.current_schema().identifier_field_ids().count(), 0);
    assert_eq!(meta.default_sort_order().fields.len(), 1);
    // An id column the schema lacks is a clear error.
    let missing = TableIdent::new(NamespaceIdent::new("default".into()), "bad".into());
    let err = c
        .create_with_ids_if_missing(&missing, &schema, None, &["nope".to_string()])
        .await
        .expect_err("no such column");
    assert!(err.to_string().contains("nope"), "{err}");
}

/// A table that commits every round keeps a short manifest list: once 100 small data
/// manifests exist, a commit merges them into one. The merged entries keep their sequence
/// numbers, so a position delete committed before the merge still applies to its data file
/// (and not to files added after it), as iceberg-rust's reader shows.
#[tokio::test]
async fn many_rounds_merge_manifests_and_deletes_still_apply() {
    use inlet_table_coordinator::MIN_COUNT_TO_MERGE;
    let dir = tempfile::tempdir().expect("tempdir");
    let c = committer(&dir).await;
    let ident = TableIdent::new(NamespaceIdent::new("default".into()), "m".into());
    let table = c
        .create_with_ids_if_missing(&ident, &upsert_schema(), None, &["id".to_string()])
        .await
        .expect("create");
    let round = |n: u64, files, deletes, base| Round {
        files,
        delete_files: deletes,
        base,
        id_columns: vec!["id".into()],
        offsets: BTreeMap::from([(0, n)]),
        timestamp_ms: 1_000 * n as i64,
        ..common::plain_round(format!("m-{n}"), upsert_schema())
    };
    let first = data_file(&table, "r0", &[(1, "a"), (2, "b")]).await;
    let first_path = first.file_path().to_string();
    let mut base = c
        .commit(
            &ident,
            &round(0, vec![first], Vec::new(), RoundBase::Snapshot(None)),
        )
        .await
        .expect("commit");
    let rounds = MIN_COUNT_TO_MERGE as u64 + 10;
    let mut expected = BTreeMap::from([(2, "b".to_string())]);
    for n in 1..=rounds {
        let table = c.load(&ident).await.expect("load").expect("table");
        let id = 100 + n as i64;
        let file = data_file(&table, &format!("r{n}"), &[(id, "x")]).await;
        expected.insert(id, "x".to_string());
        // Round 5 deletes id 1 (row 0 of the first file).
        let deletes = if n == 5 {
            position_deletes(&file_target(&table), "r5", vec![(first_path.clone(), 0)]).await
        } else {
            Vec::new()
        };
        base = c
            .commit(
                &ident,
                &round(n, vec![file], deletes, RoundBase::Snapshot(base)),
            )
            .await
            .expect("commit");
    }
    let table = c.load(&ident).await.expect("load").expect("table");
    let snapshot = table.metadata().current_snapshot().expect("snapshot");
    let bytes = table
        .file_io()
        .new_input(snapshot.manifest_list())
        .expect("input")
        .read()
        .await
        .expect("read");
    let list =
        iceberg::spec::ManifestList::parse_with_version(&bytes, iceberg::spec::FormatVersion::V2)
            .expect("manifest list");
    assert!(
        list.entries().len() < 20,
        "{} manifests after {} rounds",
        list.entries().len(),
        rounds + 1
    );
    // Every data file is still listed once, the old ones as existing entries.
    let mut data_files = 0;
    let mut existing = 0;
    for m in list.entries() {
        let manifest = m.load_manifest(table.file_io()).await.expect("manifest");
        for e in manifest.entries() {
            if e.content_type() == iceberg::spec::DataContentType::Data {
                data_files += 1;
                existing += usize::from(e.status() == iceberg::spec::ManifestStatus::Existing);
            }
        }
    }
    assert_eq!(data_files, rounds as usize + 1);
    assert!(
        existing >= MIN_COUNT_TO_MERGE,
        "{existing} existing entries"
    );
    assert_eq!(scan(&table).await, expected);

    // Expiring every snapshot but the last deletes the manifests merged away, and only those.
    let listed: std::collections::HashSet<String> = list
        .entries()
        .iter()
        .map(|m| m.manifest_path.trim_start_matches("file://").to_string())
        .collect();
    let expired = c.expire(&ident, i64::MAX, 1).await.expect("expire");
    assert_eq!(expired, rounds as usize);
    let metadata_dir = format!(
        "{}/metadata",
        table.metadata().location().trim_start_matches("file://")
    );
    let manifests: std::collections::HashSet<String> = std::fs::read_dir(&metadata_dir)
        .expect("metadata dir")
        .filter_map(Result::ok)
        .map(|e| e.path().to_string_lossy().into_owned())
        .filter(|p| p.ends_with(".avro") && !p.contains("/snap-"))
        .collect();
    assert_eq!(
        manifests, listed,
        "manifests on disk are exactly the listed ones"
    );
    let table = c.load(&ident).await.expect("load").expect("table");
    assert_eq!(scan(&table).await, expected);
}

/// An append-only table's small files are rewritten into one, in a `replace` snapshot that
/// keeps Inlet's progress in its summary; the rows are the same, and appends go on after it.
#[tokio::test]
async fn small_files_are_compacted_and_progress_is_kept() {
    use inlet_table_coordinator::compact::MIN_FILES;
    let dir = tempfile::tempdir().expect("tempdir");
    let (c, ident, table) = append_table(&dir, "small").await;
    let round = |n: u64, files| Round {
        files,
        offsets: BTreeMap::from([(0, 10 * n)]),
        watermark_ms: Some(n as i64),
        partition_watermarks: BTreeMap::from([(0, n as i64)]),
        timestamp_ms: 1_000 * n as i64,
        ..common::plain_round(format!("small-{n}"), upsert_schema())
    };
    let mut expected = BTreeMap::new();
    let files = MIN_FILES as u64 + 4;
    for n in 1..=files {
        let rows: Vec<(i64, String)> = (0..10)
            .map(|i| (n as i64 * 100 + i, format!("r{n}")))
            .collect();
        let file = owned_data_file(&table, &format!("s{n}"), &rows).await;
        expected.extend(rows);
        c.commit(&ident, &round(n, vec![file]))
            .await
            .expect("commit");
    }
    let before = Committer::committed(&c.load(&ident).await.expect("load").expect("table"));

    let pool = inlet_table_worker::MemoryPool::new(64 << 20);
    let settings = inlet_table_worker::data_file::FileSettings::default();
    let done = c
        .compact(&ident, &settings, &pool, MIN_FILES, 100_000)
        .await
        .expect("compact");
    assert_eq!((done.removed, done.added), (files as usize, 1));
    assert!(
        !done.copied,
        "row groups of a few rows are decoded and written again, not copied"
    );
    assert_eq!(pool.used(), 0, "the compaction returned its memory");

    let table = c.load(&ident).await.expect("load").expect("table");
    let snapshot = table.metadata().current_snapshot().expect("snapshot");
    assert_eq!(
        snapshot.summary().operation,
        iceberg::spec::Operation::Replace
    );
    let props = &snapshot.summary().additional_properties;
    assert_eq!(props.get("total-data-files").map(String::as_str), Some("1"));
    assert_eq!(
        props.get("total-records").map(String::as_str),
        Some((files * 10).to_string().as_str())
    );
    let after = Committer::committed(&table);
    assert_eq!(
        after.offsets, before.offsets,
        "conversion resumes where it did"
    );
    assert_eq!(after.watermark_ms, before.watermark_ms);
    assert_eq!(after.partition_watermarks, before.partition_watermarks);
    assert_eq!(scan(&table).await, expected, "the same rows");
    let plan = plan(&table, None).await;
    assert_eq!(plan.len(), 1, "one file to read");
    // Nothing small enough left: a second compaction does nothing.
    assert_eq!(
        c.compact(&ident, &settings, &pool, MIN_FILES, 100_000)
            .await
            .expect("compact")
            .removed,
        0
    );

    // Rounds go on after the replace snapshot; a repeated round is still recognised.
    assert_eq!(
        c.commit(&ident, &round(files, Vec::new()))
            .await
            .expect("retry"),
        None
    );
    let file = data_file(&table, "late", &[(9_999, "late")]).await;
    expected.insert(9_999, "late".into());
    c.commit(&ident, &round(files + 1, vec![file]))
        .await
        .expect("commit")
        .expect("a snapshot");
    let table = c.load(&ident).await.expect("load").expect("table");
    assert_eq!(scan(&table).await, expected);

    // Once the snapshots before the compaction expire, the small files it replaced are
    // deleted; the compacted file and the later one stay, and the rows are the same.
    fn walk(dir: &std::path::Path, out: &mut std::collections::BTreeSet<String>) {
        for e in std::fs::read_dir(dir)
            .expect("read dir")
            .filter_map(Result::ok)
        {
            let path = e.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|x| x == "parquet") {
                out.insert(path.to_string_lossy().into_owned());
            }
        }
    }
    let parquet_files = || {
        let mut out = std::collections::BTreeSet::new();
        walk(dir.path(), &mut out);
        out
    };
    let before = parquet_files();
    assert_eq!(before.len(), files as usize + 2, "{before:?}");
    let expired = c.expire(&ident, i64::MAX, 2).await.expect("expire");
    assert!(expired > 0);
    let after = parquet_files();
    assert_eq!(
        after.len(),
        2,
        "the compacted file and the later one: {after:?}"
    );
    assert!(
        after
            .iter()
            .all(|p| p.contains("compact-") || p.contains("late")),
        "{after:?}"
    );
    let table = c.load(&ident).await.expect("load").expect("table");
    assert_eq!(
        scan(&table).await,
        expected,
        "the same rows, read from the files left"
    );
}

/// Other engines commit to Inlet's tables (a pyiceberg append, Spark's maintenance, a Trino
/// delete): their snapshots carry no `inlet.*` keys. Progress is read from the newest snapshot
/// of `main`'s history that has them, so a foreign snapshot on top does not start every
/// partition again from the stream's start (which duplicated every retained record), and the
/// next round commits on top of the foreign one.
#[tokio::test]
async fn progress_survives_snapshots_that_other_engines_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let embedded = embedded(&dir).await;
    let catalog = embedded.catalog.clone();
    let c = Committer::new(embedded.catalog, embedded.pointers);
    let ident = TableIdent::new(NamespaceIdent::new("default".into()), "t".into());
    c.commit(&ident, &round(1, true, 1_000))
        .await
        .expect("commit");

    // Two foreign appends on top, as another writer makes them.
    for n in 0..2 {
        let table = c.load(&ident).await.expect("load").expect("table");
        let file = data_file(&table, &format!("foreign-{n}"), &[(100 + n, "theirs")]).await;
        foreign_append(&*catalog, &table, file).await;
    }
    let table = c.load(&ident).await.expect("load").expect("table");
    assert_eq!(table.metadata().snapshots().len(), 3);
    let current = table.metadata().current_snapshot().expect("current");
    assert!(
        !current
            .summary()
            .additional_properties
            .contains_key("inlet.offsets"),
        "the newest snapshot is the foreign one"
    );
    let committed = Committer::committed(&table);
    assert_eq!(committed.offsets, BTreeMap::from([(0, 10), (1, 1)]));
    assert_eq!(committed.watermark_ms, Some(1_001));
    assert_eq!(committed.commit_id.as_deref(), Some("t-1"));

    // Inlet's next round goes on top of the foreign snapshots and keeps their rows.
    c.commit(&ident, &round(2, true, 2_000))
        .await
        .expect("commit");
    let table = c.load(&ident).await.expect("load").expect("table");
    assert_eq!(
        Committer::committed(&table).offsets,
        BTreeMap::from([(0, 20), (1, 2)])
    );
    let current = table.metadata().current_snapshot().expect("current");
    assert_eq!(current.parent_snapshot_id(), Some(current_parent(&table)));
    let ids: Vec<i64> = scan(&table).await.into_keys().collect();
    assert_eq!(ids, vec![100, 101], "the foreign rows are still there");
}

/// The id of the snapshot before the current one in `main`'s history (by sequence number).
fn current_parent(table: &iceberg::table::Table) -> i64 {
    let mut snapshots: Vec<_> = table.metadata().snapshots().collect();
    snapshots.sort_by_key(|s| s.sequence_number());
    snapshots[snapshots.len() - 2].snapshot_id()
}

/// A pointer store that, at the first swap it sees, lets `race` commit first: a second
/// compaction of the same parent wins while the first is committing.
#[derive(Debug)]
struct RacingPointers {
    inner: Arc<dyn inlet_catalog::rest::MetadataPointerStore>,
    race: tokio::sync::Mutex<Option<Race>>,
}

/// What commits first, through the plain pointers, at the racing store's first swap.
#[derive(Debug)]
enum Race {
    /// A compaction of the same table.
    Compaction(Committer),
    /// A round.
    Round(Committer, Box<Round>),
}

impl inlet_catalog::rest::MetadataPointerStore for RacingPointers {
    fn swap<'a>(
        &'a self,
        swaps: &'a [inlet_catalog::rest::PointerSwap],
    ) -> inlet_catalog::rest::BoxFuture<'a, iceberg::Result<()>> {
        Box::pin(async move {
            let ident = swaps[0].table.clone();
            match self.race.lock().await.take() {
                Some(Race::Compaction(other)) => {
                    let pool = inlet_table_worker::MemoryPool::new(64 << 20);
                    let won = other
                        .compact(
                            &ident,
                            &inlet_table_worker::data_file::FileSettings::default(),
                            &pool,
                            inlet_table_coordinator::compact::MIN_FILES,
                            200_000,
                        )
                        .await
                        .expect("the racing compaction");
                    assert!(won.removed > 0, "the racing compaction landed");
                }
                Some(Race::Round(other, round)) => {
                    other
                        .commit(&ident, &round)
                        .await
                        .expect("the racing round")
                        .expect("a snapshot");
                }
                None => {}
            }
            self.inner.swap(swaps).await
        })
    }
}

/// A committer through plain pointers, the racing pointer store, and a committer through it.
async fn racing_committers(dir: &tempfile::TempDir) -> (Committer, Arc<RacingPointers>, Committer) {
    let catalog = embedded(dir).await;
    let plain = Committer::new(catalog.catalog.clone(), catalog.pointers.clone());
    let racing = Arc::new(RacingPointers {
        inner: catalog.pointers.clone(),
        race: tokio::sync::Mutex::new(None),
    });
    let c = Committer::new(catalog.catalog.clone(), racing.clone());
    (plain, racing, c)
}

/// Two compactions of one parent: the one that commits second is refused, and cleaning up
/// after itself deletes only its own files. Both used to name their files after the parent
/// snapshot, so the loser overwrote and then deleted the winner's live file.
#[tokio::test]
async fn a_compaction_that_loses_a_race_deletes_only_its_own_files() {
    use inlet_table_coordinator::compact::MIN_FILES;
    let dir = tempfile::tempdir().expect("tempdir");
    let (plain, racing, c) = racing_committers(&dir).await;
    let ident = TableIdent::new(NamespaceIdent::new("default".into()), "raced".into());
    let table = c
        .create_with_ids_if_missing(&ident, &upsert_schema(), None, &[])
        .await
        .expect("create");
    let mut expected = BTreeMap::new();
    for n in 1..=MIN_FILES as u64 {
        let rows: Vec<(i64, String)> = (0..10)
            .map(|i| (n as i64 * 100 + i, format!("r{n}")))
            .collect();
        let file = owned_data_file(&table, &format!("s{n}"), &rows).await;
        expected.extend(rows);
        let round = Round {
            files: vec![file],
            offsets: BTreeMap::from([(0, 10 * n)]),
            timestamp_ms: 1_000 * n as i64,
            ..common::plain_round(format!("raced-{n}"), upsert_schema())
        };
        c.commit(&ident, &round).await.expect("commit");
    }
    *racing.race.lock().await = Some(Race::Compaction(plain));
    let pool = inlet_table_worker::MemoryPool::new(64 << 20);
    let lost = c
        .compact(
            &ident,
            &inlet_table_worker::data_file::FileSettings::default(),
            &pool,
            MIN_FILES,
            100_000,
        )
        .await
        .expect("the losing compaction");
    assert_eq!(
        lost.removed, 0,
        "the second commit of one parent is refused"
    );
    assert!(racing.race.lock().await.is_none(), "the race ran");

    let table = c.load(&ident).await.expect("load").expect("table");
    let snapshot = table.metadata().current_snapshot().expect("snapshot");
    assert_eq!(
        snapshot.summary().operation,
        iceberg::spec::Operation::Replace,
        "the winner's compaction is current"
    );
    assert_eq!(scan(&table).await, expected, "the winner's file is there");
}

/// Expiry keeps the snapshots that tags and branches name, however old: a user pinned them,
/// and expiring them would leave the refs dangling.
#[tokio::test]
async fn expiry_keeps_tagged_and_branched_snapshots() {
    use iceberg::spec::{SnapshotReference, SnapshotRetention};
    let dir = tempfile::tempdir().expect("tempdir");
    let catalog = embedded(&dir).await;
    let c = Committer::new(catalog.catalog.clone(), catalog.pointers.clone());
    let ident = TableIdent::new(NamespaceIdent::new("default".into()), "pinned".into());
    for n in 1..=5 {
        c.commit(&ident, &round(n, false, 1_000 * n as i64))
            .await
            .expect("commit");
    }
    let table = c.load(&ident).await.expect("load").expect("table");
    let mut by_age: Vec<(i64, i64)> = table
        .metadata()
        .snapshots()
        .map(|s| (s.timestamp_ms(), s.snapshot_id()))
        .collect();
    by_age.sort();
    let (tagged, branched) = (by_age[0].1, by_age[1].1);
    let pin = |name: &str, snapshot_id: i64, retention: SnapshotRetention| {
        iceberg::TableUpdate::SetSnapshotRef {
            ref_name: name.to_string(),
            reference: SnapshotReference {
                snapshot_id,
                retention,
            },
        }
    };
    inlet_catalog::CommitTarget::Pointers(catalog.pointers.clone())
        .commit(
            &table,
            Vec::new(),
            vec![
                pin(
                    "v1",
                    tagged,
                    SnapshotRetention::Tag {
                        max_ref_age_ms: None,
                    },
                ),
                pin(
                    "audit",
                    branched,
                    SnapshotRetention::Branch {
                        min_snapshots_to_keep: None,
                        max_snapshot_age_ms: None,
                        max_ref_age_ms: None,
                    },
                ),
            ],
        )
        .await
        .expect("tag and branch");

    let expired = c.expire(&ident, i64::MAX, 1).await.expect("expire");
    assert_eq!(expired, 2, "the two unpinned old snapshots");
    let table = c.load(&ident).await.expect("load").expect("table");
    let left: HashSet<i64> = table
        .metadata()
        .snapshots()
        .map(|s| s.snapshot_id())
        .collect();
    assert!(
        left.contains(&tagged) && left.contains(&branched),
        "{left:?}"
    );
    assert_eq!(left.len(), 3, "the pinned two and main's head");
    for (name, id) in [("v1", tagged), ("audit", branched)] {
        assert_eq!(
            table
                .metadata()
                .snapshot_for_ref(name)
                .map(|s| s.snapshot_id()),
            Some(id),
            "{name} still names its snapshot"
        );
    }
}

/// A round commits only where the table's progress is: a second round of the same records
/// (a second coordinator, a stale retry) is refused, and so is a round after a rollback that
/// took Inlet's last rounds off `main`. The rolled-back round, converted again, lands again:
/// its commit id is only "already committed" while `main`'s history holds it.
#[tokio::test]
async fn rounds_start_where_the_tables_progress_ends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let catalog = embedded(&dir).await;
    let c = Committer::new(catalog.catalog.clone(), catalog.pointers.clone());
    let ident = TableIdent::new(NamespaceIdent::new("default".into()), "continuous".into());
    let spanning = |id: &str, from: u64, to: u64| {
        let mut r = round(0, false, 1_000 + to as i64);
        r.commit_id = id.to_string();
        r.offsets = BTreeMap::from([(0, to)]);
        r.start_offsets = BTreeMap::from([(0, from)]);
        r
    };
    c.commit(&ident, &spanning("a", 0, 10))
        .await
        .expect("first");
    c.commit(&ident, &spanning("b", 10, 20))
        .await
        .expect("second");
    // The same records again under another id (a second coordinator's round).
    match c.commit(&ident, &spanning("b-again", 10, 20)).await {
        Err(CommitError::NotContinuous {
            partition: 0,
            start: 10,
            table: 20,
        }) => {}
        other => panic!("a round of committed records: {other:?}"),
    }

    // Someone rolls main back to the first round's snapshot.
    let table = c.load(&ident).await.expect("load").expect("table");
    let first = table
        .metadata()
        .snapshots()
        .find(|s| {
            s.summary().additional_properties.get("inlet.commit-id") == Some(&"a".to_string())
        })
        .expect("the first round's snapshot")
        .snapshot_id();
    inlet_catalog::CommitTarget::Pointers(catalog.pointers.clone())
        .commit(
            &table,
            Vec::new(),
            vec![iceberg::TableUpdate::SetSnapshotRef {
                ref_name: "main".into(),
                reference: iceberg::spec::SnapshotReference {
                    snapshot_id: first,
                    retention: iceberg::spec::SnapshotRetention::Branch {
                        min_snapshots_to_keep: None,
                        max_snapshot_age_ms: None,
                        max_ref_age_ms: None,
                    },
                },
            }],
        )
        .await
        .expect("rollback");
    match c.commit(&ident, &spanning("c", 20, 30)).await {
        Err(CommitError::NotContinuous { table: 10, .. }) => {}
        other => panic!("a round past a rollback: {other:?}"),
    }
    // Converted again from the rolled-back progress, the second round lands again.
    assert!(
        c.commit(&ident, &spanning("b", 10, 20))
            .await
            .expect("the second round again")
            .is_some(),
        "not mistaken for the rolled-back snapshot"
    );
    let table = c.load(&ident).await.expect("load").expect("table");
    assert_eq!(
        Committer::committed(&table).offsets,
        BTreeMap::from([(0, 20)])
    );
}

/// A round with an exact start (a dead-letter round) names the whole progress it was built
/// on: two built on the same empty progress, a deposed coordinator's and its successor's, do
/// not both land, and a partition it does not name must have no progress either. A round
/// without it (read back from an older `PRE_COMMIT`) checks only the partitions it names.
#[tokio::test]
async fn rounds_with_an_exact_start_need_the_whole_progress_there() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = committer(&dir).await;
    let ident = TableIdent::new(NamespaceIdent::new("default".into()), "exact_dlq".into());
    let exact = |id: &str, start: &[(i32, u64)], to: &[(i32, u64)]| {
        let mut r = round(0, false, 1_000);
        r.commit_id = id.to_string();
        r.start_offsets = start.iter().copied().collect();
        r.offsets = to.iter().copied().collect();
        r.exact_start = true;
        r
    };
    c.commit(&ident, &exact("a", &[], &[(0, 10), (1, 5)]))
        .await
        .expect("the first round on no progress");
    match c.commit(&ident, &exact("b", &[], &[(0, 12), (1, 5)])).await {
        Err(CommitError::NotContinuous {
            partition: 0,
            start: 0,
            table: 10,
        }) => {}
        other => panic!("a second round on the same empty progress: {other:?}"),
    }
    // Partition 1 has progress the round does not name.
    match c.commit(&ident, &exact("c", &[(0, 10)], &[(0, 20)])).await {
        Err(CommitError::NotContinuous {
            partition: 1,
            start: 0,
            table: 5,
        }) => {}
        other => panic!("a round that leaves out a partition with progress: {other:?}"),
    }
    // The same without an exact start: only partition 0 is checked (and the table has no
    // progress for the new partition 2).
    let mut loose = exact("d", &[(0, 10), (2, 7)], &[(0, 20), (1, 5), (2, 9)]);
    loose.exact_start = false;
    c.commit(&ident, &loose).await.expect("a loose start");
    c.commit(
        &ident,
        &exact("e", &[(0, 20), (1, 5), (2, 9)], &[(0, 30), (1, 5), (2, 9)]),
    )
    .await
    .expect("the whole progress");
    let table = c.load(&ident).await.expect("load").expect("table");
    assert_eq!(
        Committer::committed(&table).offsets,
        BTreeMap::from([(0, 30), (1, 5), (2, 9)])
    );
}

/// Another engine expires every snapshot Inlet wrote (Spark's `rewrite_data_files`, then
/// `expire_snapshots` with `retain_last => 1`): the progress comes from the `inlet.progress`
/// property, and the last round is still known as committed. A rollback to before Inlet's
/// last round is not mistaken for such an expiry: the property's snapshot is still listed.
#[tokio::test]
async fn progress_outlives_an_expiry_of_every_snapshot_inlet_wrote() {
    let dir = tempfile::tempdir().expect("tempdir");
    let embedded = embedded(&dir).await;
    let catalog = embedded.catalog.clone();
    let target = inlet_catalog::CommitTarget::Pointers(embedded.pointers.clone());
    let c = Committer::new(embedded.catalog, embedded.pointers);
    let ident = TableIdent::new(NamespaceIdent::new("default".into()), "expired".into());
    for n in 1..=2 {
        c.commit(&ident, &round(n, true, 1_000 * n as i64))
            .await
            .expect("commit");
    }
    // A foreign append, then an expiry of every snapshot but it.
    let table = c.load(&ident).await.expect("load").expect("table");
    let file = data_file(&table, "foreign", &[(7, "theirs")]).await;
    foreign_append(&*catalog, &table, file).await;
    let table = c.load(&ident).await.expect("load").expect("table");
    let foreign = table
        .metadata()
        .current_snapshot()
        .expect("current")
        .snapshot_id();
    let snapshots = table.metadata().snapshots().map(|s| s.snapshot_id());
    let inlets: Vec<i64> = snapshots.filter(|id| *id != foreign).collect();
    assert_eq!(inlets.len(), 2);
    target
        .commit(
            &table,
            Vec::new(),
            vec![iceberg::TableUpdate::RemoveSnapshots {
                snapshot_ids: inlets,
            }],
        )
        .await
        .expect("expiry");
    let table = c.load(&ident).await.expect("load").expect("table");
    assert_eq!(table.metadata().snapshots().len(), 1);
    let committed = Committer::committed(&table);
    assert!(committed.from_property);
    assert_eq!(committed.offsets, BTreeMap::from([(0, 20), (1, 2)]));
    assert_eq!(committed.watermark_ms, Some(1_002));
    assert_eq!(
        committed.partition_watermarks,
        BTreeMap::from([(0, 1_002), (1, 2_000)])
    );
    let meta = table.metadata();
    assert!(inlet_table_coordinator::commit::already_committed(
        meta, "t-2"
    ));
    assert!(!inlet_table_coordinator::commit::already_committed(
        meta, "t-1"
    ));
    // A round that does not start there is refused, one that does lands.
    let mut next = round(3, true, 3_000);
    next.start_offsets = BTreeMap::from([(0, 10), (1, 1)]);
    assert!(matches!(
        c.commit(&ident, &next).await,
        Err(CommitError::NotContinuous { table: 20, .. })
    ));
    next.start_offsets = BTreeMap::from([(0, 20), (1, 2)]);
    c.commit(&ident, &next).await.expect("the next round");
    let table = c.load(&ident).await.expect("load").expect("table");
    let committed = Committer::committed(&table);
    assert!(!committed.from_property, "the new snapshot carries it");
    assert_eq!(committed.offsets, BTreeMap::from([(0, 30), (1, 3)]));

    // Rolled back to the foreign snapshot: round 3 is off main but still listed, so the
    // property (round 3's) does not count, and nothing is known.
    target
        .commit(
            &table,
            Vec::new(),
            vec![iceberg::TableUpdate::SetSnapshotRef {
                ref_name: "main".into(),
                reference: iceberg::spec::SnapshotReference {
                    snapshot_id: foreign,
                    retention: iceberg::spec::SnapshotRetention::Branch {
                        min_snapshots_to_keep: None,
                        max_snapshot_age_ms: None,
                        max_ref_age_ms: None,
                    },
                },
            }],
        )
        .await
        .expect("rollback");
    let table = c.load(&ident).await.expect("load").expect("table");
    assert_eq!(Committer::committed(&table), Default::default());
    assert!(!inlet_table_coordinator::commit::already_committed(
        table.metadata(),
        "t-3"
    ));
}

/// A round lands while a compaction is committing (compaction runs beside the rounds, not
/// between them): the compaction's commit is rebuilt on the round's snapshot and lands, with
/// the round's progress and rows kept.
#[tokio::test]
async fn a_compaction_rebases_onto_a_round_that_landed_first() {
    use inlet_table_coordinator::compact::MIN_FILES;
    let dir = tempfile::tempdir().expect("tempdir");
    let (plain, racing, c) = racing_committers(&dir).await;
    let ident = TableIdent::new(NamespaceIdent::new("default".into()), "rebased".into());
    let table = c
        .create_with_ids_if_missing(&ident, &upsert_schema(), None, &[])
        .await
        .expect("create");
    let round = |n: u64, files| Round {
        files,
        offsets: BTreeMap::from([(0, 10 * n)]),
        watermark_ms: Some(n as i64),
        timestamp_ms: 1_000 * n as i64,
        ..common::plain_round(format!("rebased-{n}"), upsert_schema())
    };
    let mut expected = BTreeMap::new();
    let files = MIN_FILES as u64;
    for n in 1..=files {
        let rows: Vec<(i64, String)> = (0..10)
            .map(|i| (n as i64 * 100 + i, format!("r{n}")))
            .collect();
        let file = owned_data_file(&table, &format!("s{n}"), &rows).await;
        expected.extend(rows);
        plain
            .commit(&ident, &round(n, vec![file]))
            .await
            .expect("commit");
    }
    let late = data_file(&table, "late", &[(9_999, "late")]).await;
    expected.insert(9_999, "late".into());
    *racing.race.lock().await = Some(Race::Round(
        plain.clone(),
        Box::new(round(files + 1, vec![late])),
    ));
    let pool = inlet_table_worker::MemoryPool::new(64 << 20);
    let done = c
        .compact(
            &ident,
            &inlet_table_worker::data_file::FileSettings::default(),
            &pool,
            MIN_FILES,
            100_000,
        )
        .await
        .expect("compact");
    assert!(racing.race.lock().await.is_none(), "the race ran");
    assert_eq!(
        (done.removed, done.added),
        (files as usize, 1),
        "landed on the round's snapshot"
    );
    let table = c.load(&ident).await.expect("load").expect("table");
    let snapshot = table.metadata().current_snapshot().expect("snapshot");
    assert_eq!(
        snapshot.summary().operation,
        iceberg::spec::Operation::Replace
    );
    assert_eq!(
        Committer::committed(&table).offsets,
        BTreeMap::from([(0, 10 * (files + 1))]),
        "the round's progress, not the compaction's first parent's"
    );
    assert_eq!(
        snapshot
            .summary()
            .additional_properties
            .get("total-data-files")
            .map(String::as_str),
        Some("2"),
        "the compacted file and the round's"
    );
    assert_eq!(scan(&table).await, expected, "every row once");
}

/// Files too big to count as commit tails but well under the target (2–8 MiB files at the
/// default 32 MiB) are merged too: a few that make half a target file are enough.
#[tokio::test]
async fn mid_size_files_are_merged_into_target_size_ones() {
    use inlet_table_coordinator::compact::MIN_FILES;
    let dir = tempfile::tempdir().expect("tempdir");
    let (c, ident, table) = append_table(&dir, "mid").await;
    let mut expected = BTreeMap::new();
    let mut sizes = Vec::new();
    for n in 1..=4u64 {
        // Incompressible strings: the file is about as big as its rows.
        let rows: Vec<(i64, String)> = (0..200)
            .map(|i| {
                let id = n as i64 * 1_000 + i;
                // splitmix64 of (id, k): letters zstd cannot predict.
                let noise: String = (0..40u64)
                    .map(|k| {
                        let mut x = (id as u64) << 8 ^ k;
                        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
                        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                        char::from(b'a' + ((x ^ (x >> 31)) % 26) as u8)
                    })
                    .collect();
                (id, noise)
            })
            .collect();
        let file = owned_data_file(&table, &format!("m{n}"), &rows).await;
        sizes.push(file.file_size_in_bytes());
        expected.extend(rows);
        let round = Round {
            commit_id: format!("mid-{n}"),
            offsets: BTreeMap::from([(0, n)]),
            files: vec![file],
            ..round(n, false, 1_000 * n as i64)
        };
        c.commit(
            &ident,
            &Round {
                schema: upsert_schema(),
                ..round
            },
        )
        .await
        .expect("commit");
    }
    // A target for which each file is between a quarter and three quarters of it, so three
    // fit in one target file and make more than half of it: the old rule (16 files under a
    // quarter) merged none of them.
    let largest = *sizes.iter().max().expect("sizes");
    let smallest = *sizes.iter().min().expect("sizes");
    let target = largest * 7 / 2;
    assert!(
        smallest * 4 > target && largest * 4 < target * 3,
        "{sizes:?} for {target}"
    );
    let settings = inlet_table_worker::data_file::FileSettings {
        target_file_bytes: target as usize,
        ..Default::default()
    };
    let pool = inlet_table_worker::MemoryPool::new(64 << 20);
    let done = c
        .compact(&ident, &settings, &pool, MIN_FILES, 100_000)
        .await
        .expect("compact");
    assert_eq!((done.removed, done.added), (3, 1), "{sizes:?} for {target}");
    assert!(
        done.copied,
        "files of the current schema without deletes, in row groups of more than a 32nd of \
         the target, are copied, not decoded"
    );
    let table = c.load(&ident).await.expect("load").expect("table");
    assert_eq!(scan(&table).await, expected, "the same rows");
    // The merged file's metrics are the inputs' merged: its record count adds up, and
    // planning prunes by its bounds of id (ids run from 1,000 to 4,199 over the four files).
    let all = plan(&table, None).await;
    assert_eq!(all.len(), 2, "the merged file and the one left");
    let merged = all
        .iter()
        .find(|t| t.data_file_path.contains("compact-"))
        .expect("the merged file");
    assert_eq!(merged.record_count, Some(600));
    let id = iceberg::expr::Reference::new("id");
    let past = plan(
        &table,
        Some(id.clone().greater_than(iceberg::spec::Datum::long(4_199))),
    )
    .await;
    assert!(
        past.is_empty(),
        "past every upper bound of id, nothing to read"
    );
    let below = plan(
        &table,
        Some(id.less_than(iceberg::spec::Datum::long(1_000))),
    )
    .await;
    assert!(below.is_empty(), "below every lower bound, nothing to read");
    assert_eq!(
        c.compact(&ident, &settings, &pool, MIN_FILES, 100_000)
            .await
            .expect("again")
            .removed,
        0,
        "the merged file is past three quarters, and one small file is left: nothing to merge"
    );
}

/// A round of an older coordinator epoch than the table's last round is refused
/// (`CommitError::Fenced`), even when it would continue the table's progress; rounds of the
/// same or a newer epoch land, and rounds without an epoch are not fenced.
#[tokio::test]
async fn rounds_of_an_older_epoch_are_fenced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = committer(&dir).await;
    let ident = TableIdent::new(NamespaceIdent::new("default".into()), "epochs".into());
    let at = |n: u64, epoch: Option<i64>| {
        let mut r = round(n, false, 1_000 * n as i64);
        r.offsets = BTreeMap::from([(0, 10 * n)]);
        r.start_offsets = BTreeMap::from([(0, 10 * (n - 1))]);
        r.epoch = epoch;
        r
    };
    c.commit(&ident, &at(1, Some(2))).await.expect("epoch 2");
    match c.commit(&ident, &at(2, Some(1))).await {
        Err(CommitError::Fenced { ours: 1, theirs: 2 }) => {}
        other => panic!("a stale coordinator's round: {other:?}"),
    }
    c.commit(&ident, &at(2, Some(2)))
        .await
        .expect("the same epoch");
    c.commit(&ident, &at(3, Some(5)))
        .await
        .expect("a newer epoch");
    let table = c.load(&ident).await.expect("load").expect("table");
    let committed = Committer::committed(&table);
    assert_eq!(committed.epoch, Some(5));
    assert_eq!(committed.offsets, BTreeMap::from([(0, 30)]));
    assert!(matches!(
        c.commit(&ident, &at(4, Some(4))).await,
        Err(CommitError::Fenced { ours: 4, theirs: 5 })
    ));
    c.commit(&ident, &at(4, None)).await.expect("not fenced");
}

/// `metadata.json` stays bounded at a 1 s interval: beyond `max.count` snapshots, the oldest
/// are expired whatever their age, the current one and the progress kept.
#[tokio::test]
async fn expiry_keeps_at_most_the_newest_max_count_snapshots() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = committer(&dir).await;
    let ident = TableIdent::new(NamespaceIdent::new("default".into()), "capped".into());
    for n in 1..=10 {
        c.commit(&ident, &round(n, false, 1_000 * n as i64))
            .await
            .expect("commit");
    }
    // None is older than the cutoff: only the count expires them.
    assert_eq!(
        c.expire_beyond(&ident, 0, 1, usize::MAX)
            .await
            .expect("expire"),
        0
    );
    assert_eq!(c.expire_beyond(&ident, 0, 1, 4).await.expect("expire"), 6);
    let table = c.load(&ident).await.expect("load").expect("table");
    let mut left: Vec<String> = table
        .metadata()
        .snapshots()
        .filter_map(|s| {
            s.summary()
                .additional_properties
                .get("inlet.commit-id")
                .cloned()
        })
        .collect();
    left.sort_unstable();
    assert_eq!(left, vec!["t-10", "t-7", "t-8", "t-9"], "the newest four");
    assert_eq!(
        Committer::committed(&table).offsets,
        BTreeMap::from([(0, 100), (1, 10)])
    );
    // retain.last above max.count wins: what the user asked to keep stays.
    assert_eq!(
        c.expire_beyond(&ident, i64::MAX, 3, 1)
            .await
            .expect("expire"),
        1
    );
}

#[tokio::test]
async fn a_round_pinned_to_a_table_never_lands_in_another_under_its_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let catalog = embedded(&dir).await;
    let c = Committer::new(catalog.catalog.clone(), catalog.pointers.clone());
    let ident = TableIdent::new(NamespaceIdent::new("default".into()), "t".into());
    c.commit(&ident, &round(1, false, 1_000))
        .await
        .expect("first round creates the table");
    let first = c.load(&ident).await.expect("load").expect("table");
    let pinned = |n| Round {
        table_uuid: Some(first.metadata().uuid()),
        ..round(n, false, 1_000 * n as i64)
    };
    assert!(c
        .commit(&ident, &pinned(2))
        .await
        .expect("same table")
        .is_some());

    // Renamed away: the name holds nothing, and the pinned round does not create a table.
    let moved = TableIdent::new(NamespaceIdent::new("default".into()), "t_old".into());
    catalog
        .catalog
        .rename_table(&ident, &moved)
        .await
        .expect("rename");
    let err = c.commit(&ident, &pinned(3)).await.expect_err("refused");
    assert!(
        matches!(err, CommitError::TableReplaced { expected, found: None } if expected == first.metadata().uuid()),
        "{err:?}"
    );
    assert!(
        c.load(&ident).await.expect("load").is_none(),
        "no table was created"
    );

    // Another table under the name: refused too, and nothing lands in either table.
    c.commit(&ident, &round(7, false, 7_000))
        .await
        .expect("an unpinned round creates the new table");
    let second = c.load(&ident).await.expect("load").expect("new table");
    assert_ne!(second.metadata().uuid(), first.metadata().uuid());
    let err = c.commit(&ident, &pinned(3)).await.expect_err("refused");
    assert!(
        matches!(err, CommitError::TableReplaced { found: Some(u), .. } if u == second.metadata().uuid()),
        "{err:?}"
    );
    let after = c.load(&ident).await.expect("load").expect("new table");
    assert_eq!(after.metadata().snapshots().count(), 1);
    let old = c.load(&moved).await.expect("load").expect("renamed table");
    assert_eq!(Committer::committed(&old).commit_id.as_deref(), Some("t-2"));
}

/// An upsert table's small files are compacted with their position deletes applied: the new
/// file holds only the live rows, a delete file that pointed only into them goes too, and
/// deletes that a round commits while the compaction runs are carried over to the new file,
/// so no deleted row comes back.
#[tokio::test]
async fn compaction_applies_position_deletes_and_carries_over_new_ones() {
    use inlet_table_coordinator::compact::MIN_FILES;
    let dir = tempfile::tempdir().expect("tempdir");
    let (plain, racing, c) = racing_committers(&dir).await;
    let ident = TableIdent::new(NamespaceIdent::new("default".into()), "upserted".into());
    let table = c
        .create_with_ids_if_missing(&ident, &upsert_schema(), None, &["id".into()])
        .await
        .expect("create");
    let target = file_target(&table);
    let deletes = |prefix: &'static str, rows: Vec<(String, u64)>| {
        let target = target.clone();
        async move { position_deletes(&target, prefix, rows).await }
    };
    let upsert_round = |n: u64, files, delete_files| Round {
        schema: upsert_schema(),
        files,
        delete_files,
        ..round(n, false, 1_000 * n as i64)
    };
    let mut expected = BTreeMap::new();
    let mut paths = Vec::new();
    for n in 1..=MIN_FILES as u64 {
        let rows: Vec<(i64, String)> = (0..10)
            .map(|i| (n as i64 * 100 + i, format!("r{n}")))
            .collect();
        let file = owned_data_file(&table, &format!("s{n}"), &rows).await;
        paths.push(file.file_path().to_string());
        expected.extend(rows);
        plain
            .commit(&ident, &upsert_round(n, vec![file], Vec::new()))
            .await
            .expect("commit");
    }
    // Rows 3 of the first file and 0 of the second are deleted (ids 103 and 200): one delete
    // file that points only into files the compaction takes.
    let first = deletes("d1", vec![(paths[0].clone(), 3), (paths[1].clone(), 0)]).await;
    let n = MIN_FILES as u64 + 1;
    plain
        .commit(&ident, &upsert_round(n, Vec::new(), first))
        .await
        .expect("deletes commit");
    expected.remove(&103);
    expected.remove(&200);
    // While the compaction commits, a round deletes row 5 of the third file (id 305) and
    // adds a row.
    let late = data_file(&table, "late", &[(9_999, "late")]).await;
    let racing_deletes = deletes("d2", vec![(paths[2].clone(), 5)]).await;
    *racing.race.lock().await = Some(Race::Round(
        plain.clone(),
        Box::new(upsert_round(n + 1, vec![late], racing_deletes)),
    ));
    expected.remove(&305);
    expected.insert(9_999, "late".into());
    let before = scan(&c.load(&ident).await.expect("load").expect("table")).await;
    assert!(
        before.contains_key(&305) && !before.contains_key(&9_999) && !before.contains_key(&103),
        "before: the first deletes applied, the racing round not landed"
    );

    let pool = inlet_table_worker::MemoryPool::new(64 << 20);
    let done = c
        .compact(
            &ident,
            &inlet_table_worker::data_file::FileSettings::default(),
            &pool,
            MIN_FILES,
            100_000,
        )
        .await
        .expect("compact");
    assert!(racing.race.lock().await.is_none(), "the race ran");
    assert_eq!((done.removed, done.added), (MIN_FILES, 1));
    assert!(!done.copied, "rows are deleted: decoded, not copied");
    let table = c.load(&ident).await.expect("load").expect("table");
    assert_eq!(
        scan(&table).await,
        expected,
        "every live row once, no deleted one"
    );
    let live = inlet_table_coordinator::reading::live_files(&table)
        .await
        .expect("live");
    let compacted: Vec<&str> = live
        .data
        .iter()
        .map(|d| d.file.path.as_str())
        .filter(|p| p.contains("compact-"))
        .collect();
    assert_eq!(compacted.len(), 1, "{live:?}");
    // The first delete file went with the files; the racing one stays (it points into a
    // replaced file), and one carried-over delete file points into the new file.
    assert_eq!(live.position_deletes.len(), 2, "{live:?}");
    let carried = live
        .position_deletes
        .iter()
        .find(|p| p.contains("compact-"))
        .expect("a carried-over delete file");
    let rows = inlet_table_worker::read_position_deletes(table.file_io(), carried)
        .await
        .expect("read");
    // Id 305 was row 5 of the third file; before it in the new file: the first file's 9
    // live rows, the second's 9, then rows 0..5 of the third.
    assert_eq!(rows, vec![(compacted[0].to_string(), 9 + 9 + 5)]);
    let summary = &table
        .metadata()
        .current_snapshot()
        .expect("snapshot")
        .summary()
        .additional_properties;
    assert_eq!(
        summary.get("total-position-deletes").map(String::as_str),
        Some("2"),
        "the racing delete and the carried one: {summary:?}"
    );
    assert_eq!(
        summary.get("total-records").map(String::as_str),
        Some((MIN_FILES * 10 - 2 + 1).to_string().as_str()),
        "the live rows rewritten, plus the late row: {summary:?}"
    );
}

/// Files written before a column was added are not copied as they are (their Parquet schema
/// lacks the column): they are read in the current schema and written again, and the rows
/// stay the same.
#[tokio::test]
async fn files_of_an_older_schema_are_decoded_into_the_current_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (c, ident, table) = append_table(&dir, "evolved").await;
    let mut fields = upsert_schema().as_struct().fields().to_vec();
    fields.push(field(3, "score", false, PrimitiveType::Int));
    let wider = schema_of(fields);
    let mut expected = BTreeMap::new();
    for n in 1..=4u64 {
        let (schema, files) = if n < 4 {
            let rows: Vec<(i64, String)> = (0..5)
                .map(|i| (n as i64 * 10 + i, format!("e{n}")))
                .collect();
            let file = owned_data_file(&table, &format!("e{n}"), &rows).await;
            expected.extend(rows);
            (upsert_schema(), vec![file])
        } else {
            // The last round adds a column and no file.
            (wider.clone(), Vec::new())
        };
        c.commit(
            &ident,
            &Round {
                commit_id: format!("evolved-{n}"),
                schema,
                files,
                offsets: BTreeMap::from([(0, n)]),
                ..round(n, false, 1_000 * n as i64)
            },
        )
        .await
        .expect("commit");
    }
    let pool = inlet_table_worker::MemoryPool::new(64 << 20);
    let done = c
        .compact(
            &ident,
            &inlet_table_worker::data_file::FileSettings::default(),
            &pool,
            2,
            100_000,
        )
        .await
        .expect("compact");
    assert_eq!((done.removed, done.added), (3, 1));
    assert!(!done.copied, "files of an older schema are decoded");
    let table = c.load(&ident).await.expect("load").expect("table");
    assert_eq!(
        table.metadata().current_schema().as_struct().fields().len(),
        3
    );
    assert_eq!(scan(&table).await, expected, "the same rows");
}

/// Iceberg renumbers the schema a table is created with. A new table's first round may carry
/// a schema that evolved within it: here `added` (id 4) came after the nested `s.x` (id 3),
/// where a fresh numbering puts it at 3. The table is created with the part that creation
/// keeps (ids 1–3), and the round's commit adds `added` under its own id, so the round lands
/// the first time instead of being refused for ids its files do not have.
#[tokio::test]
async fn a_new_tables_first_round_keeps_ids_evolved_within_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = committer(&dir).await;
    let ident = TableIdent::new(NamespaceIdent::new("default".into()), "evolved".into());
    let nested = Arc::new(NestedField::optional(
        2,
        "s",
        Type::Struct(iceberg::spec::StructType::new(vec![field(
            3,
            "x",
            false,
            PrimitiveType::String,
        )])),
    ));
    let evolved = schema_of(vec![
        field(1, "id", true, PrimitiveType::Long),
        nested,
        field(4, "added", false, PrimitiveType::String),
    ]);
    let round = common::plain_round("t-1".into(), evolved.clone());
    assert!(c.commit(&ident, &round).await.expect("commit").is_some());
    let table = c.load(&ident).await.expect("load").expect("created");
    let ids = table
        .metadata()
        .current_schema()
        .field_id_to_name_map()
        .clone();
    for (id, name) in [(1, "id"), (2, "s"), (3, "s.x"), (4, "added")] {
        assert_eq!(ids.get(&id).map(String::as_str), Some(name), "{ids:?}");
    }
    assert_eq!(table.metadata().last_column_id(), 4);
}

/// The worker numbers a new table's columns as the catalog's create does
/// (`inlet_table_worker::fresh_ids`): nested structs, lists and maps keep every id.
#[tokio::test]
async fn fresh_ids_are_the_ids_a_created_table_gets() {
    use iceberg::spec::{ListType, MapType, StructType};
    let dir = tempfile::tempdir().expect("tempdir");
    let c = committer(&dir).await;
    let ident = TableIdent::new(NamespaceIdent::new("default".into()), "fresh".into());
    let inner = Type::Struct(StructType::new(vec![
        field(0, "a", true, PrimitiveType::Int),
        field(0, "b", false, PrimitiveType::String),
    ]));
    let fields = vec![
        field(0, "first", true, PrimitiveType::Long),
        Arc::new(NestedField::optional(0, "s", inner.clone())),
        Arc::new(NestedField::optional(
            0,
            "l",
            Type::List(ListType::new(Arc::new(NestedField::list_element(
                0, inner, false,
            )))),
        )),
        Arc::new(NestedField::optional(
            0,
            "m",
            Type::Map(MapType::new(
                Arc::new(NestedField::map_key_element(
                    0,
                    Type::Primitive(PrimitiveType::String),
                )),
                Arc::new(NestedField::map_value_element(
                    0,
                    Type::List(ListType::new(Arc::new(NestedField::list_element(
                        0,
                        Type::Primitive(PrimitiveType::Int),
                        true,
                    )))),
                    false,
                )),
            )),
        )),
        field(0, "last", false, PrimitiveType::String),
    ];
    let schema = schema_of(inlet_table_worker::fresh_ids(&fields));
    let table = c
        .create_if_missing(&ident, &schema, None)
        .await
        .expect("create");
    assert_eq!(
        table.metadata().current_schema().as_struct(),
        schema.as_struct()
    );
}
