//! Event time for watermarks (`table.topic.event.time.field`, docs/architecture.md, "Watermarks"): the largest value
//! of a column among the rows a job converted.
//!
//! The field is a column of the table, a nested one written with dots (`payload.ts`). Its
//! values count as epoch milliseconds when they are timestamps (any unit, with or without a
//! zone), dates (midnight UTC), 64-bit integers (epoch ms) or RFC 3339 strings. Null values,
//! and strings that are not times, don't count. A column of another type is an error, which
//! the caller reports instead of inventing a watermark.

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StructArray};
use arrow::compute;
use arrow::datatypes::{
    DataType, Date32Type, Date64Type, Int64Type, TimeUnit, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType,
};

/// The largest event time (epoch ms) in `batches`' column `path`, or None when no row has one.
pub(crate) fn max_ms(batches: &[RecordBatch], path: &str) -> Result<Option<i64>, String> {
    let mut max: Option<i64> = None;
    for batch in batches {
        let column = column(batch, path)?;
        if let Some(m) = column_max(&column)? {
            max = Some(max.map_or(m, |x| x.max(m)));
        }
    }
    Ok(max)
}

fn column(batch: &RecordBatch, path: &str) -> Result<ArrayRef, String> {
    let mut parts = path.split('.');
    let first = parts.next().unwrap_or_default();
    let mut array = batch
        .column_by_name(first)
        .cloned()
        .ok_or_else(|| format!("the table has no column {first:?} (event.time.field {path:?})"))?;
    for part in parts {
        let s: &StructArray = array
            .as_struct_opt()
            .ok_or_else(|| format!("{path:?}: the column before {part:?} is not a struct"))?;
        let child = s
            .column_by_name(part)
            .ok_or_else(|| format!("{path:?}: no field {part:?}"))?
            .clone();
        // A null parent struct makes its fields null too.
        array = match s.nulls() {
            Some(parent) => {
                let nulls = arrow::buffer::NullBuffer::union(Some(parent), child.nulls());
                arrow::array::make_array(
                    child
                        .to_data()
                        .into_builder()
                        .nulls(nulls)
                        .build()
                        .map_err(|e| e.to_string())?,
                )
            }
            None => child,
        };
    }
    Ok(array)
}

fn column_max(array: &ArrayRef) -> Result<Option<i64>, String> {
    Ok(match array.data_type() {
        DataType::Timestamp(unit, _) => match unit {
            TimeUnit::Second => {
                compute::max(array.as_primitive::<TimestampSecondType>()).map(|v| v * 1000)
            }
            TimeUnit::Millisecond => compute::max(array.as_primitive::<TimestampMillisecondType>()),
            TimeUnit::Microsecond => compute::max(array.as_primitive::<TimestampMicrosecondType>())
                .map(|v| v.div_euclid(1000)),
            TimeUnit::Nanosecond => compute::max(array.as_primitive::<TimestampNanosecondType>())
                .map(|v| v.div_euclid(1_000_000)),
        },
        DataType::Date32 => {
            compute::max(array.as_primitive::<Date32Type>()).map(|d| i64::from(d) * 86_400_000)
        }
        DataType::Date64 => compute::max(array.as_primitive::<Date64Type>()),
        DataType::Int64 => compute::max(array.as_primitive::<Int64Type>()),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            let strings = arrow::compute::cast(array, &DataType::Utf8).map_err(|e| e.to_string())?;
            strings
                .as_string::<i32>()
                .iter()
                .flatten()
                .filter_map(|s| arrow::compute::kernels::cast_utils::string_to_timestamp_nanos(s).ok())
                .map(|n| n.div_euclid(1_000_000))
                .max()
        }
        other => {
            return Err(format!(
                "an event time must be a timestamp, date, long (epoch ms) or RFC 3339 string, not {other}"
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{
        Date32Array, Int32Array, Int64Array, StringArray, TimestampMicrosecondArray,
    };
    use arrow::datatypes::{Field, Fields, Schema};

    use super::*;

    fn batch(name: &str, array: ArrayRef) -> RecordBatch {
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new(
                name,
                array.data_type().clone(),
                true,
            )])),
            vec![array],
        )
        .expect("batch")
    }

    #[test]
    fn timestamps_of_every_kind_become_epoch_ms() {
        let micros = batch(
            "ts",
            Arc::new(
                TimestampMicrosecondArray::from(vec![Some(5_000_000), None, Some(9_000_999)])
                    .with_timezone("+00:00"),
            ),
        );
        let later = batch(
            "ts",
            Arc::new(
                TimestampMicrosecondArray::from(vec![Some(12_000_000)]).with_timezone("+00:00"),
            ),
        );
        assert_eq!(max_ms(std::slice::from_ref(&micros), "ts"), Ok(Some(9_000)));
        assert_eq!(max_ms(&[micros, later], "ts"), Ok(Some(12_000)));
        let dates = batch("d", Arc::new(Date32Array::from(vec![1, 3, 2])));
        assert_eq!(max_ms(&[dates], "d"), Ok(Some(3 * 86_400_000)));
        let longs = batch("ms", Arc::new(Int64Array::from(vec![7, 70, 700])));
        assert_eq!(max_ms(&[longs], "ms"), Ok(Some(700)));
        let strings = batch(
            "s",
            Arc::new(StringArray::from(vec![
                Some("1970-01-01T00:00:02Z"),
                Some("not a time"),
                None,
                Some("1970-01-01T00:00:01.500+00:00"),
            ])),
        );
        assert_eq!(max_ms(&[strings], "s"), Ok(Some(2_000)));
    }

    #[test]
    fn nulls_only_give_no_event_time() {
        let b = batch("ts", Arc::new(Int64Array::from(vec![None, None])));
        assert_eq!(max_ms(&[b], "ts"), Ok(None));
        assert_eq!(max_ms(&[], "ts"), Ok(None));
    }

    #[test]
    fn nested_fields_are_found_and_null_parents_hide_them() {
        let fields = Fields::from(vec![Field::new("ts", DataType::Int64, true)]);
        let inner = StructArray::new(
            fields,
            vec![Arc::new(Int64Array::from(vec![10, 99, 20])) as ArrayRef],
            // The middle row's struct is null: its 99 must not count.
            Some(vec![true, false, true].into()),
        );
        let b = batch("payload", Arc::new(inner));
        assert_eq!(max_ms(&[b], "payload.ts"), Ok(Some(20)));
    }

    #[test]
    fn bad_fields_are_errors() {
        let b = batch("n", Arc::new(Int32Array::from(vec![1])));
        assert!(max_ms(std::slice::from_ref(&b), "n")
            .unwrap_err()
            .contains("event time must be"));
        assert!(max_ms(std::slice::from_ref(&b), "missing")
            .unwrap_err()
            .contains("no column"));
        assert!(max_ms(&[b], "n.x").unwrap_err().contains("not a struct"));
    }
}
