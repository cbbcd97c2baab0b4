//! The decoder's column buffers: one per Arrow array of the target schema, nested ones
//! included, kept in one arena and addressed by index.
//!
//! Invariants:
//! - A struct's children are contiguous in the arena (`children` is a range), so nested work
//!   needs no allocation.
//! - Between rows every column holds exactly as many entries as its parent dictates: a top-level
//!   column `rows`, a struct child its struct's length, a list or map child the parent's last
//!   offset. [`truncate`] relies on this to roll a failed row back from the top alone.
//! - A value appended to a non-nullable column is never null: a "null" there (a child of a null
//!   struct) is a default value instead (0, empty, false), which Arrow's validation accepts.
//! - Arrays are built in [`finish`] with the target's own `DataType`s, so nested `Field`s
//!   (names, nullability, `PARQUET:field_id` metadata) are exactly the target's.

use std::ops::Range;

use arrow::array::{ArrayData, BooleanBufferBuilder, NullBufferBuilder};
use arrow::buffer::Buffer;
use arrow::datatypes::{DataType, FieldRef, TimeUnit};

use super::reader::FaultKind;
use crate::error::Error;

/// Offsets of a variable-width column: `i32` for `Utf8`/`Binary`, `i64` for the `Large` kinds.
pub(crate) enum Offsets {
    Small(Vec<i32>),
    Large(Vec<i64>),
}

impl Offsets {
    fn new(large: bool) -> Self {
        if large {
            Offsets::Large(vec![0])
        } else {
            Offsets::Small(vec![0])
        }
    }

    fn entries(&self) -> usize {
        match self {
            Offsets::Small(v) => v.len().saturating_sub(1),
            Offsets::Large(v) => v.len().saturating_sub(1),
        }
    }

    #[inline]
    fn push(&mut self, end: usize) -> Result<(), FaultKind> {
        match self {
            Offsets::Small(v) => v.push(i32::try_from(end).map_err(|_| FaultKind::ColumnFull)?),
            Offsets::Large(v) => v.push(i64::try_from(end).map_err(|_| FaultKind::ColumnFull)?),
        }
        Ok(())
    }

    fn last(&self) -> usize {
        match self {
            Offsets::Small(v) => v.last().map_or(0, |&o| o as usize),
            Offsets::Large(v) => v.last().map_or(0, |&o| o as usize),
        }
    }

    fn truncate(&mut self, entries: usize) {
        match self {
            Offsets::Small(v) => v.truncate(entries + 1),
            Offsets::Large(v) => v.truncate(entries + 1),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Offsets::Small(v) => v.capacity() * 4,
            Offsets::Large(v) => v.capacity() * 8,
        }
    }

    fn take(&mut self) -> Buffer {
        match self {
            Offsets::Small(v) => Buffer::from_vec(std::mem::replace(v, vec![0])),
            Offsets::Large(v) => Buffer::from_vec(std::mem::replace(v, vec![0])),
        }
    }
}

/// The values of one column.
pub(crate) enum Data {
    Bool(BooleanBufferBuilder),
    /// `Int32`, `Date32`.
    I32(Vec<i32>),
    /// `Int64`, `Time64`, `Timestamp`.
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    /// `Decimal128`.
    I128(Vec<i128>),
    FixedBytes {
        size: usize,
        values: Vec<u8>,
    },
    /// `Utf8`, `LargeUtf8`, `Binary`, `LargeBinary`.
    Bytes {
        offsets: Offsets,
        values: Vec<u8>,
    },
    Struct {
        children: Range<usize>,
        len: usize,
    },
    List {
        offsets: Vec<i32>,
        child: usize,
    },
    Map {
        offsets: Vec<i32>,
        key: usize,
        value: usize,
    },
}

/// One column: its target field, where it sits (for messages), validity and values.
pub(crate) struct Column {
    pub(crate) field: FieldRef,
    pub(crate) path: String,
    /// `None` for a non-nullable column.
    nulls: Option<NullBufferBuilder>,
    pub(crate) data: Data,
}

impl Column {
    /// An empty column for `field`; a struct, list or map gets `children` (arena indexes,
    /// allocated by the caller): for a struct its fields in order, for a list its element, for a
    /// map its key then its value.
    pub(crate) fn new(
        field: FieldRef,
        path: String,
        children: Range<usize>,
    ) -> Result<Self, Error> {
        let unsupported = || {
            Error::Schema(format!(
                "column `{path}` has Arrow type {}, which the Avro decoder does not produce",
                field.data_type()
            ))
        };
        let data = match field.data_type() {
            DataType::Boolean => Data::Bool(BooleanBufferBuilder::new(0)),
            DataType::Int32 | DataType::Date32 => Data::I32(Vec::new()),
            DataType::Int64
            | DataType::Time64(TimeUnit::Microsecond)
            | DataType::Timestamp(TimeUnit::Microsecond | TimeUnit::Nanosecond, _) => {
                Data::I64(Vec::new())
            }
            DataType::Float32 => Data::F32(Vec::new()),
            DataType::Float64 => Data::F64(Vec::new()),
            DataType::Decimal128(_, _) => Data::I128(Vec::new()),
            DataType::FixedSizeBinary(size) => Data::FixedBytes {
                size: usize::try_from(*size).map_err(|_| unsupported())?,
                values: Vec::new(),
            },
            DataType::Utf8 | DataType::Binary => Data::Bytes {
                offsets: Offsets::new(false),
                values: Vec::new(),
            },
            DataType::LargeUtf8 | DataType::LargeBinary => Data::Bytes {
                offsets: Offsets::new(true),
                values: Vec::new(),
            },
            DataType::Struct(_) => Data::Struct { children, len: 0 },
            DataType::List(_) => Data::List {
                offsets: vec![0],
                child: children.start,
            },
            DataType::Map(_, _) => Data::Map {
                offsets: vec![0],
                key: children.start,
                value: children.start + 1,
            },
            _ => return Err(unsupported()),
        };
        let nulls = field.is_nullable().then(|| NullBufferBuilder::new(0));
        Ok(Column {
            field,
            path,
            nulls,
            data,
        })
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        match &self.data {
            Data::Bool(b) => b.len(),
            Data::I32(v) => v.len(),
            Data::I64(v) => v.len(),
            Data::F32(v) => v.len(),
            Data::F64(v) => v.len(),
            Data::I128(v) => v.len(),
            Data::FixedBytes { size, values } => values.len().checked_div(*size).unwrap_or(0),
            Data::Bytes { offsets, .. } => offsets.entries(),
            Data::Struct { len, .. } => *len,
            Data::List { offsets, .. } | Data::Map { offsets, .. } => {
                offsets.len().saturating_sub(1)
            }
        }
    }

    #[inline]
    fn valid(&mut self) {
        if let Some(nulls) = &mut self.nulls {
            nulls.append_non_null();
        }
    }

    #[inline]
    pub(crate) fn push_bool(&mut self, v: bool) -> Result<(), FaultKind> {
        match &mut self.data {
            Data::Bool(b) => b.append(v),
            _ => return Err(FaultKind::Internal),
        }
        self.valid();
        Ok(())
    }

    #[inline]
    pub(crate) fn push_i32(&mut self, v: i32) -> Result<(), FaultKind> {
        match &mut self.data {
            Data::I32(values) => values.push(v),
            _ => return Err(FaultKind::Internal),
        }
        self.valid();
        Ok(())
    }

    #[inline]
    pub(crate) fn push_i64(&mut self, v: i64) -> Result<(), FaultKind> {
        match &mut self.data {
            Data::I64(values) => values.push(v),
            _ => return Err(FaultKind::Internal),
        }
        self.valid();
        Ok(())
    }

    #[inline]
    pub(crate) fn push_f32(&mut self, v: f32) -> Result<(), FaultKind> {
        match &mut self.data {
            Data::F32(values) => values.push(v),
            _ => return Err(FaultKind::Internal),
        }
        self.valid();
        Ok(())
    }

    #[inline]
    pub(crate) fn push_f64(&mut self, v: f64) -> Result<(), FaultKind> {
        match &mut self.data {
            Data::F64(values) => values.push(v),
            _ => return Err(FaultKind::Internal),
        }
        self.valid();
        Ok(())
    }

    #[inline]
    pub(crate) fn push_i128(&mut self, v: i128) -> Result<(), FaultKind> {
        match &mut self.data {
            Data::I128(values) => values.push(v),
            _ => return Err(FaultKind::Internal),
        }
        self.valid();
        Ok(())
    }

    /// Appends a fixed-size value; `v` must be the column's size.
    #[inline]
    pub(crate) fn push_fixed(&mut self, v: &[u8]) -> Result<(), FaultKind> {
        match &mut self.data {
            Data::FixedBytes { size, values } if *size == v.len() => values.extend_from_slice(v),
            _ => return Err(FaultKind::Internal),
        }
        self.valid();
        Ok(())
    }

    /// Appends a string or bytes value (UTF-8 already checked for string columns).
    #[inline]
    pub(crate) fn push_bytes(&mut self, v: &[u8]) -> Result<(), FaultKind> {
        match &mut self.data {
            Data::Bytes { offsets, values } => {
                values.extend_from_slice(v);
                offsets.push(values.len())?;
            }
            _ => return Err(FaultKind::Internal),
        }
        self.valid();
        Ok(())
    }

    /// Appends a value written by `write` into the value bytes of a string column.
    pub(crate) fn push_with(
        &mut self,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), FaultKind>,
    ) -> Result<(), FaultKind> {
        match &mut self.data {
            Data::Bytes { offsets, values } => {
                let start = values.len();
                if let Err(e) = write(values) {
                    values.truncate(start);
                    return Err(e);
                }
                offsets.push(values.len())?;
            }
            _ => return Err(FaultKind::Internal),
        }
        self.valid();
        Ok(())
    }

    /// Marks a struct entry present (its children are appended separately).
    #[inline]
    pub(crate) fn push_struct(&mut self) -> Result<(), FaultKind> {
        match &mut self.data {
            Data::Struct { len, .. } => *len += 1,
            _ => return Err(FaultKind::Internal),
        }
        self.valid();
        Ok(())
    }

    /// Ends a list or map entry whose `items` were appended to its children.
    #[inline]
    pub(crate) fn push_items(&mut self, items: usize) -> Result<(), FaultKind> {
        match &mut self.data {
            Data::List { offsets, .. } | Data::Map { offsets, .. } => {
                let last = offsets.last().copied().unwrap_or(0);
                let end = i32::try_from(items)
                    .ok()
                    .and_then(|n| last.checked_add(n))
                    .ok_or(FaultKind::ColumnFull)?;
                offsets.push(end);
            }
            _ => return Err(FaultKind::Internal),
        }
        self.valid();
        Ok(())
    }

    /// Bytes of memory the column's buffers hold (allocated capacity, not just the used part).
    fn allocated(&self) -> usize {
        let nulls = self.nulls.as_ref().map_or(0, |n| n.allocated_size());
        nulls
            + match &self.data {
                Data::Bool(b) => b.capacity() / 8,
                Data::I32(v) => v.capacity() * 4,
                Data::I64(v) => v.capacity() * 8,
                Data::F32(v) => v.capacity() * 4,
                Data::F64(v) => v.capacity() * 8,
                Data::I128(v) => v.capacity() * 16,
                Data::FixedBytes { values, .. } => values.capacity(),
                Data::Bytes { offsets, values } => offsets.bytes() + values.capacity(),
                Data::Struct { .. } => 0,
                Data::List { offsets, .. } | Data::Map { offsets, .. } => offsets.capacity() * 4,
            }
    }
}

/// Appends a null to column `idx` — or, in a non-nullable column, a default value — and, for a
/// struct, to each of its children (a list or map gets an empty entry).
pub(crate) fn append_null(cols: &mut [Column], idx: usize) -> Result<(), FaultKind> {
    let col = cols.get_mut(idx).ok_or(FaultKind::Internal)?;
    if let Some(nulls) = &mut col.nulls {
        nulls.append_null();
    }
    match &mut col.data {
        Data::Bool(b) => b.append(false),
        Data::I32(v) => v.push(0),
        Data::I64(v) => v.push(0),
        Data::F32(v) => v.push(0.0),
        Data::F64(v) => v.push(0.0),
        Data::I128(v) => v.push(0),
        Data::FixedBytes { size, values } => values.resize(values.len() + *size, 0),
        Data::Bytes { offsets, values } => offsets.push(values.len())?,
        Data::List { offsets, .. } | Data::Map { offsets, .. } => {
            offsets.push(offsets.last().copied().unwrap_or(0))
        }
        Data::Struct { children, len } => {
            *len += 1;
            for child in children.clone() {
                append_null(cols, child)?;
            }
        }
    }
    Ok(())
}

/// Cuts column `idx` (and what it contains) back to `len` entries; no effect on a shorter one.
pub(crate) fn truncate(cols: &mut [Column], idx: usize, len: usize) {
    let Some(col) = cols.get_mut(idx) else {
        return;
    };
    if let Some(nulls) = &mut col.nulls {
        nulls.truncate(len);
    }
    match &mut col.data {
        Data::Bool(b) => b.truncate(len),
        Data::I32(v) => v.truncate(len),
        Data::I64(v) => v.truncate(len),
        Data::F32(v) => v.truncate(len),
        Data::F64(v) => v.truncate(len),
        Data::I128(v) => v.truncate(len),
        Data::FixedBytes { size, values } => values.truncate(len.saturating_mul(*size)),
        Data::Bytes { offsets, values } => {
            offsets.truncate(len);
            values.truncate(offsets.last());
        }
        Data::Struct { children, len: n } => {
            *n = (*n).min(len);
            for child in children.clone() {
                truncate(cols, child, len);
            }
        }
        Data::List { offsets, child } => {
            offsets.truncate(len + 1);
            let end = offsets.last().map_or(0, |&o| o as usize);
            let child = *child;
            truncate(cols, child, end);
        }
        Data::Map {
            offsets,
            key,
            value,
        } => {
            offsets.truncate(len + 1);
            let end = offsets.last().map_or(0, |&o| o as usize);
            let (key, value) = (*key, *value);
            truncate(cols, key, end);
            truncate(cols, value, end);
        }
    }
}

/// Bytes held by all columns.
pub(crate) fn allocated(cols: &[Column]) -> usize {
    cols.iter().map(Column::allocated).sum()
}

/// Takes column `idx`'s entries (and its children's) as Arrow data of the target's type,
/// leaving the columns empty.
pub(crate) fn finish(cols: &mut [Column], idx: usize) -> Result<ArrayData, Error> {
    let internal = || Error::Schema("internal error: column arena out of step".to_string());
    let col = cols.get_mut(idx).ok_or_else(internal)?;
    let len = col.len();
    let nulls = col.nulls.as_mut().and_then(NullBufferBuilder::finish);
    let data_type = col.field.data_type().clone();
    let builder = ArrayData::builder(data_type.clone()).len(len).nulls(nulls);
    let builder = match &mut col.data {
        Data::Bool(b) => builder.add_buffer(b.finish().into_inner()),
        Data::I32(v) => builder.add_buffer(Buffer::from_vec(std::mem::take(v))),
        Data::I64(v) => builder.add_buffer(Buffer::from_vec(std::mem::take(v))),
        Data::F32(v) => builder.add_buffer(Buffer::from_vec(std::mem::take(v))),
        Data::F64(v) => builder.add_buffer(Buffer::from_vec(std::mem::take(v))),
        Data::I128(v) => builder.add_buffer(Buffer::from_vec(std::mem::take(v))),
        Data::FixedBytes { values, .. } => {
            builder.add_buffer(Buffer::from_vec(std::mem::take(values)))
        }
        Data::Bytes { offsets, values } => builder
            .add_buffer(offsets.take())
            .add_buffer(Buffer::from_vec(std::mem::take(values))),
        Data::Struct { children, len } => {
            *len = 0;
            let mut child_data = Vec::with_capacity(children.len());
            for child in children.clone() {
                child_data.push(finish(cols, child)?);
            }
            builder.child_data(child_data)
        }
        Data::List { offsets, child } => {
            let offsets = Buffer::from_vec(std::mem::replace(offsets, vec![0]));
            let child = *child;
            builder
                .add_buffer(offsets)
                .child_data(vec![finish(cols, child)?])
        }
        Data::Map {
            offsets,
            key,
            value,
        } => {
            let entries = offsets.last().map_or(0, |&o| o as usize);
            let offsets = Buffer::from_vec(std::mem::replace(offsets, vec![0]));
            let (key, value) = (*key, *value);
            let DataType::Map(entries_field, _) = &data_type else {
                return Err(internal());
            };
            let entries = ArrayData::builder(entries_field.data_type().clone())
                .len(entries)
                .child_data(vec![finish(cols, key)?, finish(cols, value)?])
                .build()?;
            builder.add_buffer(offsets).child_data(vec![entries])
        }
    };
    Ok(builder.build()?)
}
