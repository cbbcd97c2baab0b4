//! Rounds for the external-catalog tests: no files, one partition, an `id` column.

use std::collections::BTreeMap;
use std::sync::Arc;

use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use inlet_table_coordinator::commit::{Round, RoundBase};

/// Round `n` with commit id `<prefix>-<n>`: partition 0 at offset `n * 10`.
pub(crate) fn round(prefix: &str, n: u64) -> Round {
    let schema = Schema::builder()
        .with_fields(vec![Arc::new(NestedField::required(
            1,
            "id",
            Type::Primitive(PrimitiveType::Long),
        ))])
        .build()
        .expect("schema");
    Round {
        commit_id: format!("{prefix}-{n}"),
        schema,
        files: Vec::new(),
        delete_files: Vec::new(),
        base: RoundBase::Latest,
        id_columns: Vec::new(),
        offsets: BTreeMap::from([(0, n * 10)]),
        watermark_ms: Some(1_000 + n as i64),
        partition_watermarks: BTreeMap::from([(0, 1_000 + n as i64)]),
        timestamp_ms: 1_000 + n as i64,
        partition_spec: None,
        topic_id: None,
        base_column_id: 0,
        start_offsets: BTreeMap::new(),
        epoch: None,
        table_uuid: None,
    }
}
