//! Rounds for the committer tests, and for the external-catalog ones: no files, one partition,
//! an `id` column.
#![allow(dead_code)] // each test file uses its own part

use std::collections::BTreeMap;
use std::sync::Arc;

use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use iceberg::table::Table;
use inlet_catalog::{CatalogConfig, NodeCatalog};
use inlet_table_coordinator::commit::{Committer, Round, RoundBase};

/// A round committing `commit_id` in `schema` and nothing else: no files, no progress, no
/// watermarks, on the latest snapshot.
pub(crate) fn plain_round(commit_id: String, schema: Schema) -> Round {
    Round {
        commit_id,
        schema,
        files: Vec::new(),
        delete_files: Vec::new(),
        base: RoundBase::Latest,
        id_columns: Vec::new(),
        offsets: BTreeMap::new(),
        watermark_ms: None,
        partition_watermarks: BTreeMap::new(),
        timestamp_ms: 0,
        partition_spec: None,
        topic_id: None,
        base_column_id: 0,
        start_offsets: BTreeMap::new(),
        exact_start: false,
        epoch: None,
        table_uuid: None,
    }
}

/// Round `n` with commit id `<prefix>-<n>`: partition 0 at offset `n * 10`.
pub(crate) fn round(prefix: &str, n: u64) -> Round {
    let id = NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long));
    let schema = Schema::builder()
        .with_fields(vec![Arc::new(id)])
        .build()
        .expect("schema");
    Round {
        offsets: BTreeMap::from([(0, n * 10)]),
        watermark_ms: Some(1_000 + n as i64),
        partition_watermarks: BTreeMap::from([(0, 1_000 + n as i64)]),
        timestamp_ms: 1_000 + n as i64,
        ..plain_round(format!("{prefix}-{n}"), schema)
    }
}

/// The node's catalog that `config` names, on the system clock.
pub(crate) async fn open_catalog(config: &CatalogConfig, root: &str) -> NodeCatalog {
    let clock = Arc::new(inlet_common::SystemClock);
    NodeCatalog::open(config, "unused", root, None, clock)
        .await
        .expect("catalog")
}

/// Asserts that `table` holds three snapshots, the current one `third`, rebuilt on round 2
/// (commit id `<prefix>-2`), and that its progress is round 3's.
pub(crate) fn assert_rebuilt_on_round_2(table: &Table, third: Option<i64>, prefix: &str) {
    let meta = table.metadata();
    assert_eq!(meta.snapshots().len(), 3);
    let current = meta.current_snapshot().expect("current");
    assert_eq!(Some(current.snapshot_id()), third);
    let parent_id = current.parent_snapshot_id().expect("a parent");
    let parent = meta.snapshot_by_id(parent_id).expect("parent");
    let commit_id = parent
        .summary()
        .additional_properties
        .get("inlet.commit-id");
    assert_eq!(commit_id, Some(&format!("{prefix}-2")));
    let progress = Committer::committed(table).offsets;
    assert_eq!(progress, BTreeMap::from([(0, 30)]));
}
