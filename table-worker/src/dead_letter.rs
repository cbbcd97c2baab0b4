//! The dead-letter table (docs/architecture.md, "Dead letters"; `table.topic.errors.tolerance=all`): records that could
//! not be converted are kept, with the reason, in `<table>_dlq` instead of being dropped.
//!
//! Its schema is fixed, so it never evolves: `partition`, `offset`, `timestamp`, `key`,
//! `value` (the raw bytes as produced) and `error`. A job writes its dead letters as data files
//! of this table beside its data files; the coordinator commits both in the same round.

use std::sync::Arc;

use arrow::array::{
    Int32Array, Int64Array, LargeBinaryArray, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};

use crate::error::Result;
use crate::job::DeadLetter;

/// Suffix of the dead-letter table's name.
pub const SUFFIX: &str = "_dlq";

/// The dead-letter table's schema.
pub fn schema() -> Result<Schema> {
    let p = |t| Type::Primitive(t);
    Ok(Schema::builder()
        .with_schema_id(0)
        .with_fields(vec![
            Arc::new(NestedField::required(1, "partition", p(PrimitiveType::Int))),
            Arc::new(NestedField::required(2, "offset", p(PrimitiveType::Long))),
            Arc::new(NestedField::required(
                3,
                "timestamp",
                p(PrimitiveType::Timestamptz),
            )),
            Arc::new(NestedField::optional(4, "key", p(PrimitiveType::Binary))),
            Arc::new(NestedField::optional(5, "value", p(PrimitiveType::Binary))),
            Arc::new(NestedField::required(6, "error", p(PrimitiveType::String))),
        ])
        .build()?)
}

/// `letters` as one record batch of the dead-letter schema.
pub fn batch(letters: &[DeadLetter]) -> Result<RecordBatch> {
    let arrow_schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema()?)?);
    Ok(RecordBatch::try_new(
        arrow_schema,
        vec![
            Arc::new(Int32Array::from_iter_values(
                letters.iter().map(|d| d.partition),
            )),
            Arc::new(Int64Array::from_iter_values(
                letters.iter().map(|d| d.offset),
            )),
            Arc::new(
                TimestampMicrosecondArray::from_iter_values(
                    letters.iter().map(|d| d.timestamp_ms.saturating_mul(1000)),
                )
                .with_timezone("+00:00"),
            ),
            Arc::new(LargeBinaryArray::from_iter(
                letters.iter().map(|d| d.key.as_deref()),
            )),
            Arc::new(LargeBinaryArray::from_iter(
                letters.iter().map(|d| d.value.as_deref()),
            )),
            Arc::new(StringArray::from_iter_values(
                letters.iter().map(|d| d.error.as_str()),
            )),
        ],
    )?)
}
