//! The committer over the node's embedded catalog (SQLite and a local object store): rounds
//! become snapshots with Inlet's summary, a round is never committed twice, schema evolution
//! lands with the files that need it, and expiry keeps the metadata bounded.

use std::collections::BTreeMap;
use std::sync::Arc;

use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use iceberg::{NamespaceIdent, TableIdent};
use inlet_table_coordinator::commit::{Committer, Round};

async fn committer(dir: &tempfile::TempDir) -> Committer {
    let meta = format!("sqlite://{}?mode=rwc", dir.path().join("meta.db").display());
    let root = dir.path().join("objects");
    std::fs::create_dir_all(&root).expect("objects dir");
    let catalog = inlet_catalog::embedded::open(&meta, &root.to_string_lossy(), None)
        .await
        .expect("catalog");
    Committer::new(catalog.catalog, catalog.pointers)
}

fn schema(extra: bool) -> Schema {
    let mut fields = vec![Arc::new(NestedField::required(
        1,
        "id",
        Type::Primitive(PrimitiveType::Long),
    ))];
    if extra {
        fields.push(Arc::new(NestedField::optional(
            2,
            "note",
            Type::Primitive(PrimitiveType::String),
        )));
    }
    Schema::builder()
        .with_fields(fields)
        .build()
        .expect("schema")
}

fn round(n: u64, extra: bool, timestamp_ms: i64) -> Round {
    Round {
        commit_id: format!("t-{n}"),
        schema: schema(extra),
        files: Vec::new(),
        offsets: BTreeMap::from([(0, n * 10), (1, n)]),
        watermark_ms: Some(1_000 + n as i64),
        partition_watermarks: BTreeMap::from([(0, 1_000 + n as i64), (1, 2_000)]),
        timestamp_ms,
        partition_spec: None,
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
