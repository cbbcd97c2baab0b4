//! Column buffers for the record converters ([`crate::protobuf`] and [`crate::json`]): one
//! growable buffer per Arrow column, nested columns owning their children, each built from a
//! target [`Field`] so that a finished array has exactly the target's data type, nested `Field`
//! metadata (such as `PARQUET:field_id`) included.
//!
//! Why not arrow's builders: a row that fails halfway must leave no trace (the converters'
//! all-or-nothing guarantee), and arrow's builders cannot take back what was appended. These
//! buffers can: [`Column::truncate`] cuts a column, and through its offsets its children, back to
//! a number of slots, whatever half-written state a failed row left.
//!
//! The push methods work on physical types (an `i64` goes to Int64, Time64 and Timestamp
//! columns alike); matching logical types is the converters' job, done once when they plan.
//! Widening (an `i32` into Int64, an `f32` into Float64) happens here.
//!
//! Invariants: every column holds one validity bit per slot; variable-width and list/map
//! offsets start at 0 and their last offset is the data's (child's) length; a struct's children
//! have exactly as many slots as the struct. A null struct slot gives every child a "masked"
//! null, non-nullable children included, as Arrow allows under a null parent.
//!
//! Shared by both converters; it lives under `protobuf/` only because the two modules were
//! written alongside other work on this crate and could not add a top-level module.

use arrow::array::{make_array, ArrayData, ArrayRef, BooleanBufferBuilder};
use arrow::buffer::{Buffer, NullBuffer};
use arrow::datatypes::{DataType, Field, FieldRef, TimeUnit};
use arrow::error::ArrowError;

use crate::error::{Error, Result};

/// A buffer of one Arrow column (see the module docs).
#[derive(Debug)]
pub(crate) struct Column {
    field: FieldRef,
    validity: BooleanBufferBuilder,
    data: Data,
}

#[derive(Debug)]
enum Data {
    Boolean(BooleanBufferBuilder),
    /// Int32 and Date32.
    Int32(Vec<i32>),
    /// Int64, Time64(µs) and Timestamp(µs).
    Int64(Vec<i64>),
    Float32(Vec<f32>),
    Float64(Vec<f64>),
    /// Utf8, LargeUtf8, Binary and LargeBinary. Offsets are kept as i64 and narrowed when the
    /// column finishes if it is not a large type (pushes keep them in range).
    Bytes {
        offsets: Vec<i64>,
        data: Vec<u8>,
        large: bool,
    },
    List {
        offsets: Vec<i32>,
        element: Box<Column>,
    },
    Map {
        offsets: Vec<i32>,
        entries: FieldRef,
        keys: Box<Column>,
        values: Box<Column>,
    },
    Struct(Vec<Column>),
}

impl Column {
    /// An empty buffer for `field`. Error::Schema for a type the converters never write.
    pub(crate) fn new(field: &FieldRef) -> Result<Self> {
        let data = match field.data_type() {
            DataType::Boolean => Data::Boolean(BooleanBufferBuilder::new(0)),
            DataType::Int32 | DataType::Date32 => Data::Int32(Vec::new()),
            DataType::Int64
            | DataType::Time64(TimeUnit::Microsecond)
            | DataType::Timestamp(TimeUnit::Microsecond, _) => Data::Int64(Vec::new()),
            DataType::Float32 => Data::Float32(Vec::new()),
            DataType::Float64 => Data::Float64(Vec::new()),
            DataType::Utf8 | DataType::Binary => Data::Bytes {
                offsets: vec![0],
                data: Vec::new(),
                large: false,
            },
            DataType::LargeUtf8 | DataType::LargeBinary => Data::Bytes {
                offsets: vec![0],
                data: Vec::new(),
                large: true,
            },
            DataType::List(element) => Data::List {
                offsets: vec![0],
                element: Box::new(Column::new(element)?),
            },
            DataType::Map(entries, _) => match entries.data_type() {
                DataType::Struct(kv) if kv.len() == 2 => Data::Map {
                    offsets: vec![0],
                    entries: entries.clone(),
                    keys: Box::new(Column::new(&kv[0])?),
                    values: Box::new(Column::new(&kv[1])?),
                },
                other => {
                    return Err(Error::Schema(format!(
                        "column `{}`: map entries of type {other} are not a key/value struct",
                        field.name()
                    )))
                }
            },
            DataType::Struct(fields) => {
                Data::Struct(fields.iter().map(Column::new).collect::<Result<Vec<_>>>()?)
            }
            other => {
                return Err(Error::Schema(format!(
                    "column `{}` has type {other}, which Protobuf and JSON records are never \
                     converted to",
                    field.name()
                )))
            }
        };
        Ok(Column {
            field: field.clone(),
            validity: BooleanBufferBuilder::new(0),
            data,
        })
    }

    pub(crate) fn field(&self) -> &Field {
        &self.field
    }

    /// Number of slots (rows for a top-level column).
    pub(crate) fn len(&self) -> usize {
        self.validity.len()
    }

    /// Appends a null; a Decode error if the column is not nullable.
    pub(crate) fn push_null(&mut self) -> Result<()> {
        if !self.field.is_nullable() {
            return Err(Error::Decode("a value is required but missing".to_string()));
        }
        self.push_masked_null();
        Ok(())
    }

    /// Appends a null slot without the nullability check: for the children of a null struct.
    fn push_masked_null(&mut self) {
        self.validity.append(false);
        match &mut self.data {
            Data::Boolean(values) => values.append(false),
            Data::Int32(values) => values.push(0),
            Data::Int64(values) => values.push(0),
            Data::Float32(values) => values.push(0.0),
            Data::Float64(values) => values.push(0.0),
            Data::Bytes { offsets, data, .. } => offsets.push(data.len() as i64),
            Data::List { offsets, .. } | Data::Map { offsets, .. } => {
                let last = offsets.last().copied().unwrap_or(0);
                offsets.push(last);
            }
            Data::Struct(children) => children.iter_mut().for_each(Column::push_masked_null),
        }
    }

    pub(crate) fn push_bool(&mut self, value: bool) -> Result<()> {
        match &mut self.data {
            Data::Boolean(values) => values.append(value),
            _ => return Err(self.mismatch("boolean")),
        }
        self.validity.append(true);
        Ok(())
    }

    /// Int32 and Date32 take the value as is; Int64 widens it.
    pub(crate) fn push_i32(&mut self, value: i32) -> Result<()> {
        match &mut self.data {
            Data::Int32(values) => values.push(value),
            Data::Int64(values) if self.field.data_type() == &DataType::Int64 => {
                values.push(i64::from(value))
            }
            _ => return Err(self.mismatch("32-bit integer")),
        }
        self.validity.append(true);
        Ok(())
    }

    /// Int64, Time64(µs) and Timestamp(µs).
    pub(crate) fn push_i64(&mut self, value: i64) -> Result<()> {
        match &mut self.data {
            Data::Int64(values) => values.push(value),
            _ => return Err(self.mismatch("64-bit integer")),
        }
        self.validity.append(true);
        Ok(())
    }

    /// Float32 takes the value as is; Float64 widens it.
    pub(crate) fn push_f32(&mut self, value: f32) -> Result<()> {
        match &mut self.data {
            Data::Float32(values) => values.push(value),
            Data::Float64(values) => values.push(f64::from(value)),
            _ => return Err(self.mismatch("float")),
        }
        self.validity.append(true);
        Ok(())
    }

    pub(crate) fn push_f64(&mut self, value: f64) -> Result<()> {
        match &mut self.data {
            Data::Float64(values) => values.push(value),
            _ => return Err(self.mismatch("double")),
        }
        self.validity.append(true);
        Ok(())
    }

    /// A Utf8 or LargeUtf8 value.
    pub(crate) fn push_str(&mut self, value: &str) -> Result<()> {
        if !self.is_string() {
            return Err(self.mismatch("string"));
        }
        self.push_text_with(|data| {
            data.extend_from_slice(value.as_bytes());
            Ok(())
        })
    }

    /// A Binary or LargeBinary value.
    pub(crate) fn push_binary(&mut self, value: &[u8]) -> Result<()> {
        if !matches!(
            self.field.data_type(),
            DataType::Binary | DataType::LargeBinary
        ) {
            return Err(self.mismatch("binary"));
        }
        self.push_bytes_with(|data| {
            data.extend_from_slice(value);
            Ok(())
        })
    }

    /// A Utf8 or LargeUtf8 value that `write` appends to the column's data (JSON text, a
    /// number's digits) without an intermediate String. `write` must append UTF-8 only: the
    /// column is validated when it finishes. If `write` fails, what it wrote is dropped.
    pub(crate) fn push_text_with(
        &mut self,
        write: impl FnOnce(&mut Vec<u8>) -> Result<()>,
    ) -> Result<()> {
        if !self.is_string() {
            return Err(self.mismatch("string"));
        }
        self.push_bytes_with(write)
    }

    fn is_string(&self) -> bool {
        matches!(self.field.data_type(), DataType::Utf8 | DataType::LargeUtf8)
    }

    fn push_bytes_with(&mut self, write: impl FnOnce(&mut Vec<u8>) -> Result<()>) -> Result<()> {
        let Data::Bytes {
            offsets,
            data,
            large,
        } = &mut self.data
        else {
            return Err(self.mismatch("string or binary"));
        };
        let start = data.len();
        if let Err(e) = write(data) {
            data.truncate(start);
            return Err(e);
        }
        let end = data.len();
        if !*large && i32::try_from(end).is_err() {
            data.truncate(start);
            return Err(Error::Arrow(ArrowError::OffsetOverflowError(end)));
        }
        offsets.push(end as i64);
        self.validity.append(true);
        Ok(())
    }

    /// Appends a valid struct slot and returns the children; the caller must then append
    /// exactly one slot to each child.
    pub(crate) fn push_struct(&mut self) -> Result<&mut [Column]> {
        if !matches!(self.data, Data::Struct(_)) {
            return Err(self.mismatch("struct"));
        }
        self.validity.append(true);
        match &mut self.data {
            Data::Struct(children) => Ok(children),
            _ => Err(Error::Decode(
                "a struct column changed its kind".to_string(),
            )),
        }
    }

    /// The element column of a list column: append the list's elements to it, then call
    /// [`Column::close_entries`].
    pub(crate) fn list_element(&mut self) -> Result<&mut Column> {
        if !matches!(self.data, Data::List { .. }) {
            return Err(self.mismatch("list"));
        }
        match &mut self.data {
            Data::List { element, .. } => Ok(element),
            _ => Err(Error::Decode("a list column changed its kind".to_string())),
        }
    }

    /// The key and value columns of a map column: append one key and one value per entry, then
    /// call [`Column::close_entries`].
    pub(crate) fn map_entries(&mut self) -> Result<(&mut Column, &mut Column)> {
        if !matches!(self.data, Data::Map { .. }) {
            return Err(self.mismatch("map"));
        }
        match &mut self.data {
            Data::Map { keys, values, .. } => Ok((keys, values)),
            _ => Err(Error::Decode("a map column changed its kind".to_string())),
        }
    }

    /// Ends a valid list or map slot holding what was appended to its children since the
    /// previous slot.
    pub(crate) fn close_entries(&mut self) -> Result<()> {
        let (offsets, end) = match &mut self.data {
            Data::List { offsets, element } => (offsets, element.len()),
            Data::Map {
                offsets,
                keys,
                values,
                ..
            } => {
                if keys.len() != values.len() {
                    return Err(Error::Decode(format!(
                        "map has {} keys but {} values",
                        keys.len(),
                        values.len()
                    )));
                }
                (offsets, keys.len())
            }
            _ => return Err(self.mismatch("list or map")),
        };
        let end = i32::try_from(end).map_err(|_| ArrowError::OffsetOverflowError(end))?;
        offsets.push(end);
        self.validity.append(true);
        Ok(())
    }

    /// Cuts the column back to `len` slots, dropping children's entries past the last kept
    /// offset, including entries of a slot that was never closed.
    pub(crate) fn truncate(&mut self, len: usize) {
        self.validity.truncate(len);
        let len = self.validity.len();
        match &mut self.data {
            Data::Boolean(values) => values.truncate(len),
            Data::Int32(values) => values.truncate(len),
            Data::Int64(values) => values.truncate(len),
            Data::Float32(values) => values.truncate(len),
            Data::Float64(values) => values.truncate(len),
            Data::Bytes { offsets, data, .. } => {
                offsets.truncate(len + 1);
                let end = offsets.last().copied().unwrap_or(0);
                data.truncate(usize::try_from(end).unwrap_or(0));
            }
            Data::List { offsets, element } => {
                offsets.truncate(len + 1);
                element.truncate(last_offset(offsets));
            }
            Data::Map {
                offsets,
                keys,
                values,
                ..
            } => {
                offsets.truncate(len + 1);
                let end = last_offset(offsets);
                keys.truncate(end);
                values.truncate(end);
            }
            Data::Struct(children) => children.iter_mut().for_each(|c| c.truncate(len)),
        }
    }

    /// Bytes of memory the buffers hold (capacity, not length).
    pub(crate) fn buffered_bytes(&self) -> usize {
        let own = self.validity.capacity() / 8;
        own + match &self.data {
            Data::Boolean(values) => values.capacity() / 8,
            Data::Int32(values) => values.capacity() * 4,
            Data::Int64(values) => values.capacity() * 8,
            Data::Float32(values) => values.capacity() * 4,
            Data::Float64(values) => values.capacity() * 8,
            Data::Bytes { offsets, data, .. } => offsets.capacity() * 8 + data.capacity(),
            Data::List { offsets, element } => offsets.capacity() * 4 + element.buffered_bytes(),
            Data::Map {
                offsets,
                keys,
                values,
                ..
            } => offsets.capacity() * 4 + keys.buffered_bytes() + values.buffered_bytes(),
            Data::Struct(children) => children.iter().map(Column::buffered_bytes).sum(),
        }
    }

    /// The slots so far as array data of the field's exact type; the column is empty after.
    /// On error the column's content is unspecified: truncate it to 0.
    pub(crate) fn finish(&mut self) -> Result<ArrayData> {
        let len = self.len();
        let nulls = NullBuffer::new(self.validity.finish());
        let nulls = (nulls.null_count() > 0).then_some(nulls);
        let mut builder = ArrayData::builder(self.field.data_type().clone())
            .len(len)
            .nulls(nulls);
        builder = match &mut self.data {
            Data::Boolean(values) => builder.add_buffer(values.finish().into_inner()),
            Data::Int32(values) => builder.add_buffer(Buffer::from_vec(std::mem::take(values))),
            Data::Int64(values) => builder.add_buffer(Buffer::from_vec(std::mem::take(values))),
            Data::Float32(values) => builder.add_buffer(Buffer::from_vec(std::mem::take(values))),
            Data::Float64(values) => builder.add_buffer(Buffer::from_vec(std::mem::take(values))),
            Data::Bytes {
                offsets,
                data,
                large,
            } => {
                let taken = std::mem::replace(offsets, vec![0]);
                let offsets = if *large {
                    Buffer::from_vec(taken)
                } else {
                    let narrow = taken
                        .into_iter()
                        .map(|o| {
                            i32::try_from(o)
                                .map_err(|_| ArrowError::OffsetOverflowError(o as usize))
                        })
                        .collect::<std::result::Result<Vec<i32>, _>>()?;
                    Buffer::from_vec(narrow)
                };
                builder
                    .add_buffer(offsets)
                    .add_buffer(Buffer::from_vec(std::mem::take(data)))
            }
            Data::List { offsets, element } => builder
                .add_buffer(Buffer::from_vec(std::mem::replace(offsets, vec![0])))
                .add_child_data(element.finish()?),
            Data::Map {
                offsets,
                entries,
                keys,
                values,
            } => {
                let entry_count = keys.len();
                let entries = ArrayData::builder(entries.data_type().clone())
                    .len(entry_count)
                    .add_child_data(keys.finish()?)
                    .add_child_data(values.finish()?)
                    .build()?;
                builder
                    .add_buffer(Buffer::from_vec(std::mem::replace(offsets, vec![0])))
                    .add_child_data(entries)
            }
            Data::Struct(children) => {
                for child in children.iter_mut() {
                    builder = builder.add_child_data(child.finish()?);
                }
                builder
            }
        };
        Ok(builder.build()?)
    }

    fn mismatch(&self, what: &str) -> Error {
        Error::Decode(format!(
            "a {what} value cannot go to column `{}` of type {}",
            self.field.name(),
            self.field.data_type()
        ))
    }
}

/// Finishes every column into an array; on error every column is reset to empty.
pub(crate) fn finish_columns(columns: &mut [Column], rows: usize) -> Result<Vec<ArrayRef>> {
    let mut arrays = Vec::with_capacity(columns.len());
    for column in columns.iter_mut() {
        debug_assert_eq!(column.len(), rows, "column `{}`", column.field().name());
        match column.finish() {
            Ok(data) => arrays.push(make_array(data)),
            Err(e) => {
                columns.iter_mut().for_each(|c| c.truncate(0));
                return Err(e);
            }
        }
    }
    Ok(arrays)
}

/// The columns of a converter and how many complete rows they hold: a row is appended whole
/// or not at all.
#[derive(Debug)]
pub(crate) struct RowBuffer {
    pub(crate) columns: Vec<Column>,
    rows: usize,
}

impl RowBuffer {
    pub(crate) fn new(columns: Vec<Column>) -> Self {
        RowBuffer { columns, rows: 0 }
    }

    /// Runs `write` over the columns as one row; on error every column is cut back to the rows
    /// before it.
    pub(crate) fn append(&mut self, write: impl FnOnce(&mut [Column]) -> Result<()>) -> Result<()> {
        match write(&mut self.columns) {
            Ok(()) => {
                self.rows += 1;
                Ok(())
            }
            Err(e) => {
                for column in &mut self.columns {
                    column.truncate(self.rows);
                }
                Err(e)
            }
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.rows
    }

    /// Drops the rows past the first `rows`.
    pub(crate) fn truncate(&mut self, rows: usize) {
        self.rows = rows.min(self.rows);
        for column in &mut self.columns {
            column.truncate(self.rows);
        }
    }

    pub(crate) fn buffered_bytes(&self) -> usize {
        self.columns.iter().map(Column::buffered_bytes).sum()
    }

    /// The rows as arrays, then empty (also on error).
    pub(crate) fn finish(&mut self) -> Result<Vec<ArrayRef>> {
        let rows = std::mem::take(&mut self.rows);
        finish_columns(&mut self.columns, rows)
    }
}

fn last_offset(offsets: &[i32]) -> usize {
    offsets
        .last()
        .and_then(|&o| usize::try_from(o).ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{make_array, Array, ListArray, StringArray, StructArray};
    use arrow::datatypes::Fields;

    use super::*;

    fn list_of_strings() -> FieldRef {
        Arc::new(Field::new(
            "tags",
            DataType::List(Arc::new(Field::new("element", DataType::Utf8, false))),
            true,
        ))
    }

    #[test]
    fn truncate_drops_a_half_written_list() {
        let mut column = Column::new(&list_of_strings()).expect("column");
        let element = column.list_element().expect("list");
        element.push_str("a").expect("push");
        column.close_entries().expect("close");
        // A second row fails after one element.
        column
            .list_element()
            .expect("list")
            .push_str("b")
            .expect("push");
        column.truncate(1);
        column.push_null().expect("null");
        let array = make_array(column.finish().expect("finish"));
        let list = array.as_any().downcast_ref::<ListArray>().expect("list");
        assert_eq!(list.len(), 2);
        assert!(list.is_null(1));
        let values = list
            .values()
            .as_any()
            .downcast_ref::<StringArray>()
            .expect("strings");
        assert_eq!(values.iter().collect::<Vec<_>>(), vec![Some("a")]);
    }

    #[test]
    fn null_struct_masks_required_children() {
        let fields = Fields::from(vec![Field::new("x", DataType::Int64, false)]);
        let field = Arc::new(Field::new("s", DataType::Struct(fields), true));
        let mut column = Column::new(&field).expect("column");
        column.push_struct().expect("struct")[0]
            .push_i32(7)
            .expect("push");
        column.push_null().expect("null");
        let array = make_array(column.finish().expect("finish"));
        let array = array
            .as_any()
            .downcast_ref::<StructArray>()
            .expect("struct");
        assert_eq!(array.null_count(), 1);
        assert_eq!(array.data_type(), field.data_type());
    }

    #[test]
    fn required_column_refuses_null() {
        let field = Arc::new(Field::new("x", DataType::Int64, false));
        let mut column = Column::new(&field).expect("column");
        assert!(matches!(column.push_null(), Err(Error::Decode(_))));
        assert_eq!(column.len(), 0);
    }

    #[test]
    fn unsupported_type_is_a_schema_error() {
        let field = Arc::new(Field::new("x", DataType::Float16, true));
        assert!(matches!(Column::new(&field), Err(Error::Schema(_))));
    }
}

/// Helpers for the converters' tests.
#[cfg(test)]
pub(crate) mod test_support {
    use arrow::array::{ArrayRef, RecordBatch};
    use arrow::datatypes::SchemaRef;
    use bytes::Bytes;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::arrow::ArrowWriter;

    /// Asserts that `arrays` have exactly the target's types, writes them to Parquet, reads them
    /// back, asserts that nothing changed and returns the batch read.
    pub(crate) fn parquet_round_trip(target: &SchemaRef, arrays: Vec<ArrayRef>) -> RecordBatch {
        assert_eq!(arrays.len(), target.fields().len());
        for (array, field) in arrays.iter().zip(target.fields()) {
            assert_eq!(
                array.data_type(),
                field.data_type(),
                "column {}",
                field.name()
            );
        }
        let batch = RecordBatch::try_new(target.clone(), arrays).expect("batch");
        let mut file = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut file, target.clone(), None).expect("writer");
        writer.write(&batch).expect("write");
        writer.close().expect("close");
        let reader = ParquetRecordBatchReaderBuilder::try_new(Bytes::from(file))
            .expect("reader")
            .build()
            .expect("build");
        let batches: Vec<RecordBatch> = reader.map(|b| b.expect("read")).collect();
        let read = arrow::compute::concat_batches(target, &batches).expect("concat");
        assert_eq!(read.columns(), batch.columns());
        read
    }

    /// The batch's rows as JSON objects (nulls explicit), for readable expectations of nested
    /// columns.
    pub(crate) fn rows_json(batch: &RecordBatch) -> serde_json::Value {
        let mut out = Vec::new();
        let mut writer = arrow::json::WriterBuilder::new()
            .with_explicit_nulls(true)
            .build::<_, arrow::json::writer::JsonArray>(&mut out);
        writer.write(batch).expect("json");
        writer.finish().expect("json");
        drop(writer);
        if out.is_empty() {
            return serde_json::Value::Array(Vec::new());
        }
        serde_json::from_slice(&out).expect("json text")
    }
}
