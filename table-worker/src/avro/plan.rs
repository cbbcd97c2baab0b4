//! The decoding plan: the writer's Avro schema compiled against the target Arrow schema, once,
//! into a tree of [`Op`]s that read a datum straight into the column buffers.
//!
//! Compiling does all the matching (fields by name at every level, union branches by their
//! [`branch_names`], type conversions) so that decoding does no lookups: each `Op` knows its
//! column's arena index and the conversion to apply. Writer data the target lacks compiles to
//! skip ops that still check it (UTF-8, enum and branch indexes), so a datum is accepted or
//! refused the same way whatever the table looks like.
//!
//! Allowed writer → target differences: a target field the writer lacks is filled with nulls
//! (it must be nullable); a writer field the target lacks is skipped; int → long, float →
//! double, a decimal's precision may grow (same scale), and a required writer value may go into
//! a nullable column. Anything else is refused with [`Error::Schema`] naming the field.
//!
//! Value conversions: an enum becomes its symbol; timestamps in milliseconds are multiplied to
//! microseconds (overflow is a decode error), nanoseconds are divided down rounding toward
//! negative infinity (the microsecond at or before the instant); time-millis becomes
//! microseconds; a decimal's two's complement bytes become an `i128` (more than 16 bytes only
//! as sign extension; a value with more digits than the column's precision is a decode error);
//! big-decimal, and Debezium's `VariableScaleDecimal` record, become the text of Java's
//! `BigDecimal.toString()`; a string read into a timestamptz column (Debezium's
//! `ZonedTimestamp`, see `super::mapping`) is parsed as an RFC 3339 instant; a duration stays its 12
//! bytes; a uuid becomes its 16 bytes. apache-avro 0.21 reads every uuid as a length-prefixed
//! value (text, or 16 raw bytes) — also one declared on a `fixed(16)`, which its parser turns into
//! the same `Schema::Uuid` — and so does this decoder, to accept exactly what the broker's
//! produce-time validation (apache-avro) accepts.

use std::ops::Range;

use apache_avro::schema::{Namespace, RecordSchema, Schema, UnionSchema};
use arrow::datatypes::{DataType, Field, FieldRef, TimeUnit};

use super::columns::{Column, Data};
use super::mapping::kind;
use super::names::{branch_names, join, Expansion, Names};
use crate::error::Error;

/// One step of decoding. Ops that fill a column hold its arena index and append exactly one
/// entry to it per execution; skip ops read and check a value without keeping it.
pub(crate) enum Op {
    Bool(usize),
    /// `int` → `Int32` or `Date32`.
    Int32(usize),
    /// `int` → `Int64`.
    IntToInt64(usize),
    /// `long` → `Int64`, `Time64(µs)` or a timestamp of the same unit.
    Int64(usize),
    /// `int` milliseconds → `i64` microseconds.
    TimeMillis(usize),
    /// `long` times a factor, checked (a timestamp into a finer unit).
    ScaleUp(usize, i64),
    /// `long` divided by a factor, rounding down (a timestamp into a coarser unit).
    ScaleDown(usize, i64),
    Float32(usize),
    FloatToFloat64(usize),
    Float64(usize),
    /// `string` (checked UTF-8).
    Utf8(usize),
    Binary(usize),
    /// `fixed(size)` or duration.
    Fixed(usize, usize),
    /// `uuid` string → 16 bytes.
    Uuid(usize),
    Enum(usize, Box<[Box<str>]>),
    /// decimal on `bytes` (`fixed == None`) or `fixed(n)`, with the column's precision.
    Decimal {
        col: usize,
        fixed: Option<usize>,
        precision: u8,
    },
    /// big-decimal → its text.
    BigDecimal(usize),
    /// Debezium's `VariableScaleDecimal` record (an `int` scale, then `bytes`) → its text.
    VariableScaleDecimal(usize),
    /// Debezium's `ZonedTimestamp` (ISO-8601 text with an offset) → the instant, in units of
    /// this many nanoseconds (rounded toward negative infinity).
    ZonedTimestamp(usize, i64),
    Record(Box<RecordOp>),
    /// A union of null and one other branch.
    Nullable(Box<NullableOp>),
    /// A union of one branch (no null): the index must be 0.
    Single(Box<Op>),
    /// A union with several non-null branches → a struct with a field per branch.
    UnionStruct(Box<UnionOp>),
    List(Box<ListOp>),
    Map(Box<MapOp>),
    SkipNull,
    SkipBool,
    SkipInt,
    SkipLong,
    SkipFloat,
    SkipDouble,
    SkipBytes,
    SkipString,
    SkipFixed(usize),
    SkipEnum(usize),
    SkipRecord(Vec<Op>),
    SkipUnion(Vec<Op>),
    SkipArray(Box<Op>),
    SkipMap(Box<Op>),
}

/// A record: its fields in writer order, then nulls for the target fields the writer lacks.
pub(crate) struct RecordOp {
    /// The struct column, or `None` at the top level.
    pub(crate) col: Option<usize>,
    pub(crate) fields: Vec<Op>,
    pub(crate) missing: Vec<usize>,
}

pub(crate) struct NullableOp {
    pub(crate) col: usize,
    pub(crate) null_branch: usize,
    pub(crate) inner: Op,
}

pub(crate) enum Branch {
    Null,
    /// The branch fills struct child `child` (an arena index).
    Value {
        child: usize,
        op: Op,
    },
    /// A branch the target has no field for: read, and the struct's fields all null.
    Skip(Op),
}

pub(crate) struct UnionOp {
    pub(crate) col: usize,
    pub(crate) children: Range<usize>,
    pub(crate) branches: Vec<Branch>,
}

pub(crate) struct ListOp {
    pub(crate) col: usize,
    pub(crate) item: Op,
}

pub(crate) struct MapOp {
    pub(crate) col: usize,
    pub(crate) key: usize,
    pub(crate) value: Op,
}

/// Allocates the columns for `fields` contiguously at the end of `cols` (their descendants
/// after them), returning their range.
pub(crate) fn alloc_columns(
    cols: &mut Vec<Column>,
    fields: &[FieldRef],
    parent: &str,
) -> Result<Range<usize>, Error> {
    let start = cols.len();
    // Placeholders keep siblings contiguous; each is replaced below.
    for field in fields {
        cols.push(Column::new(
            std::sync::Arc::new(Field::new(field.name(), DataType::Boolean, true)),
            String::new(),
            0..0,
        )?);
    }
    for (i, field) in fields.iter().enumerate() {
        let path = join(parent, field.name());
        let children = match field.data_type() {
            DataType::Struct(children) => alloc_columns(cols, children, &path)?,
            DataType::List(element) => alloc_columns(cols, std::slice::from_ref(element), &path)?,
            DataType::Map(entries, _) => match entries.data_type() {
                DataType::Struct(kv) if kv.len() == 2 => alloc_columns(cols, kv, &path)?,
                other => {
                    return Err(Error::Schema(format!(
                        "map column `{path}` has entries of type {other}, not a key/value struct"
                    )))
                }
            },
            _ => 0..0,
        };
        cols[start + i] = Column::new(field.clone(), path, children)?;
    }
    Ok(start..cols.len().min(start + fields.len()))
}

/// Compiles writer schemas against the columns.
pub(crate) struct Compiler<'n, 'a> {
    pub(crate) names: &'n Names<'a>,
    pub(crate) cols: &'n [Column],
    pub(crate) expansion: Expansion,
}

impl<'a> Compiler<'_, 'a> {
    fn mismatch(&self, col: usize, writer: &Schema) -> Error {
        let column = &self.cols[col];
        Error::Schema(format!(
            "field `{}`: the writer's {} cannot be read into the table's column of type {}{}",
            column.path,
            kind(writer),
            column.field.data_type(),
            if column.field.is_nullable() {
                ""
            } else {
                " (required)"
            }
        ))
    }

    /// A record's fields against the target `children` (columns of the struct, or the top).
    pub(crate) fn record(
        &mut self,
        record: &'a RecordSchema,
        namespace: &Namespace,
        col: Option<usize>,
        children: Range<usize>,
        path: &str,
    ) -> Result<RecordOp, Error> {
        let shown = if path.is_empty() {
            &record.name.name
        } else {
            path
        };
        self.expansion
            .open_record(record.name.fully_qualified_name(namespace), shown)?;
        let mut matched = vec![false; children.len()];
        let mut fields = Vec::with_capacity(record.fields.len());
        for field in &record.fields {
            let target = children
                .clone()
                .find(|&c| self.cols[c].field.name() == &field.name);
            let op = match target {
                Some(c) => {
                    if std::mem::replace(&mut matched[c - children.start], true) {
                        return Err(Error::Schema(format!(
                            "the writer's record `{}` has two fields named `{}`",
                            record.name.fullname(None),
                            field.name
                        )));
                    }
                    self.value(&field.schema, namespace, c)?
                }
                None => self.skip(&field.schema, namespace, &join(path, &field.name))?,
            };
            fields.push(op);
        }
        let mut missing = Vec::new();
        for (c, _) in children.clone().zip(&matched).filter(|(_, m)| !**m) {
            if !self.cols[c].field.is_nullable() {
                return Err(Error::Schema(format!(
                    "field `{}` is required in the table but the writer's record `{}` has no such field",
                    self.cols[c].path,
                    record.name.fullname(None)
                )));
            }
            missing.push(c);
        }
        self.expansion.close_record();
        Ok(RecordOp {
            col,
            fields,
            missing,
        })
    }

    /// The op reading a `writer` value into column `col`.
    pub(crate) fn value(
        &mut self,
        writer: &'a Schema,
        namespace: &Namespace,
        col: usize,
    ) -> Result<Op, Error> {
        let path = self.cols[col].path.clone();
        self.expansion.enter(&path)?;
        let (writer, namespace) = self.names.resolve(writer, namespace)?;
        let op = match writer {
            Schema::Union(u) => self.union(u, &namespace, col),
            other => self.plain(other, &namespace, col),
        };
        self.expansion.leave();
        op
    }

    fn union(
        &mut self,
        union: &'a UnionSchema,
        namespace: &Namespace,
        col: usize,
    ) -> Result<Op, Error> {
        let mut null_branch = None;
        let mut non_null = Vec::new();
        for (i, branch) in union.variants().iter().enumerate() {
            let (resolved, _) = self.names.resolve(branch, namespace)?;
            if matches!(resolved, Schema::Null) {
                null_branch = Some(i);
            } else {
                non_null.push((i, branch));
            }
        }
        let nullable = self.cols[col].field.is_nullable();
        let path = self.cols[col].path.clone();
        match (non_null.as_slice(), null_branch) {
            ([], _) => Err(Error::Schema(format!(
                "field `{path}`: the writer's union has only null"
            ))),
            ([(_, only)], None) => Ok(Op::Single(Box::new(self.value(only, namespace, col)?))),
            ([(_, only)], Some(null_branch)) => {
                if !nullable {
                    return Err(Error::Schema(format!(
                        "field `{path}` is optional in the writer but required in the table"
                    )));
                }
                let inner = self.value(only, namespace, col)?;
                Ok(Op::Nullable(Box::new(NullableOp {
                    col,
                    null_branch,
                    inner,
                })))
            }
            _ => {
                let children = match &self.cols[col].data {
                    Data::Struct { children, .. } if nullable => children.clone(),
                    _ => {
                        return Err(Error::Schema(format!(
                            "field `{path}`: the writer's union of several types is read into an optional struct with a field per branch, but the table's column has type {}{}",
                            self.cols[col].field.data_type(),
                            if nullable { "" } else { " (required)" }
                        )))
                    }
                };
                if let Some(c) = children
                    .clone()
                    .find(|&c| !self.cols[c].field.is_nullable())
                {
                    return Err(Error::Schema(format!(
                        "field `{}`: a union branch's field must be optional",
                        self.cols[c].path
                    )));
                }
                let names = branch_names(self.names, union, namespace)?;
                let mut branches = Vec::with_capacity(names.len());
                for (i, (branch, name)) in union.variants().iter().zip(&names).enumerate() {
                    if null_branch == Some(i) {
                        branches.push(Branch::Null);
                        continue;
                    }
                    let child = children
                        .clone()
                        .find(|&c| self.cols[c].field.name() == name);
                    branches.push(match child {
                        Some(child) => Branch::Value {
                            child,
                            op: self.value(branch, namespace, child)?,
                        },
                        None => Branch::Skip(self.skip(branch, namespace, &join(&path, name))?),
                    });
                }
                Ok(Op::UnionStruct(Box::new(UnionOp {
                    col,
                    children,
                    branches,
                })))
            }
        }
    }

    /// A non-union writer value into column `col`.
    fn plain(
        &mut self,
        writer: &'a Schema,
        namespace: &Namespace,
        col: usize,
    ) -> Result<Op, Error> {
        use DataType as D;
        let target = self.cols[col].field.data_type().clone();
        let utc = |tz: &Option<std::sync::Arc<str>>| tz.is_some();
        let op = match (writer, &target) {
            (Schema::Boolean, D::Boolean) => Op::Bool(col),
            (Schema::Int, D::Int32) | (Schema::Date, D::Date32) => Op::Int32(col),
            (Schema::Int, D::Int64) => Op::IntToInt64(col),
            (Schema::Long, D::Int64) => Op::Int64(col),
            (Schema::Float, D::Float32) => Op::Float32(col),
            (Schema::Float, D::Float64) => Op::FloatToFloat64(col),
            (Schema::Double, D::Float64) => Op::Float64(col),
            (Schema::String, D::Utf8 | D::LargeUtf8) => Op::Utf8(col),
            (Schema::Bytes, D::Binary | D::LargeBinary) => Op::Binary(col),
            (Schema::Enum(e), D::Utf8 | D::LargeUtf8) => {
                Op::Enum(col, e.symbols.iter().map(|s| s.as_str().into()).collect())
            }
            (Schema::Fixed(f), D::FixedSizeBinary(n)) if usize::try_from(*n) == Ok(f.size) => {
                Op::Fixed(col, f.size)
            }
            (Schema::Duration, D::FixedSizeBinary(12)) => Op::Fixed(col, 12),
            (Schema::Uuid, D::FixedSizeBinary(16)) => Op::Uuid(col),
            (Schema::BigDecimal, D::Utf8 | D::LargeUtf8) => Op::BigDecimal(col),
            (Schema::Record(r), D::Utf8 | D::LargeUtf8)
                if super::mapping::is_variable_scale_decimal(r) =>
            {
                Op::VariableScaleDecimal(col)
            }
            (Schema::String, D::Timestamp(unit, Some(_))) => match unit {
                TimeUnit::Microsecond => Op::ZonedTimestamp(col, 1_000),
                TimeUnit::Nanosecond => Op::ZonedTimestamp(col, 1),
                _ => return Err(self.mismatch(col, writer)),
            },
            (Schema::Decimal(d), D::Decimal128(p, s))
                if usize::from(*p) >= d.precision && usize::try_from(*s) == Ok(d.scale) =>
            {
                let (inner, _) = self.names.resolve(&d.inner, namespace)?;
                let fixed = match inner {
                    Schema::Bytes => None,
                    Schema::Fixed(f) => Some(f.size),
                    _ => return Err(self.mismatch(col, writer)),
                };
                Op::Decimal {
                    col,
                    fixed,
                    precision: *p,
                }
            }
            (Schema::TimeMillis, D::Time64(TimeUnit::Microsecond)) => Op::TimeMillis(col),
            (Schema::TimeMicros, D::Time64(TimeUnit::Microsecond)) => Op::Int64(col),
            (
                Schema::TimestampMillis
                | Schema::TimestampMicros
                | Schema::TimestampNanos
                | Schema::LocalTimestampMillis
                | Schema::LocalTimestampMicros
                | Schema::LocalTimestampNanos,
                D::Timestamp(unit, tz),
            ) => {
                let (writer_utc, writer_nanos_per_unit) = match writer {
                    Schema::TimestampMillis => (true, 1_000_000),
                    Schema::TimestampMicros => (true, 1_000),
                    Schema::TimestampNanos => (true, 1),
                    Schema::LocalTimestampMillis => (false, 1_000_000),
                    Schema::LocalTimestampMicros => (false, 1_000),
                    _ => (false, 1),
                };
                if writer_utc != utc(tz) {
                    return Err(self.mismatch(col, writer));
                }
                let target_nanos_per_unit: i64 = match unit {
                    TimeUnit::Microsecond => 1_000,
                    TimeUnit::Nanosecond => 1,
                    _ => return Err(self.mismatch(col, writer)),
                };
                match writer_nanos_per_unit.cmp(&target_nanos_per_unit) {
                    std::cmp::Ordering::Equal => Op::Int64(col),
                    std::cmp::Ordering::Greater => {
                        Op::ScaleUp(col, writer_nanos_per_unit / target_nanos_per_unit)
                    }
                    std::cmp::Ordering::Less => {
                        Op::ScaleDown(col, target_nanos_per_unit / writer_nanos_per_unit)
                    }
                }
            }
            (Schema::Record(r), D::Struct(_)) => {
                let children = match &self.cols[col].data {
                    Data::Struct { children, .. } => children.clone(),
                    _ => return Err(self.mismatch(col, writer)),
                };
                let path = self.cols[col].path.clone();
                Op::Record(Box::new(self.record(
                    r,
                    namespace,
                    Some(col),
                    children,
                    &path,
                )?))
            }
            (Schema::Array(a), D::List(_)) => {
                let child = match &self.cols[col].data {
                    Data::List { child, .. } => *child,
                    _ => return Err(self.mismatch(col, writer)),
                };
                Op::List(Box::new(ListOp {
                    col,
                    item: self.value(&a.items, namespace, child)?,
                }))
            }
            (Schema::Map(m), D::Map(_, _)) => {
                let (key, value) = match &self.cols[col].data {
                    Data::Map { key, value, .. } => (*key, *value),
                    _ => return Err(self.mismatch(col, writer)),
                };
                if !matches!(self.cols[key].field.data_type(), D::Utf8 | D::LargeUtf8) {
                    return Err(self.mismatch(col, writer));
                }
                Op::Map(Box::new(MapOp {
                    col,
                    key,
                    value: self.value(&m.types, namespace, value)?,
                }))
            }
            _ => return Err(self.mismatch(col, writer)),
        };
        Ok(op)
    }

    /// The op reading and dropping a `writer` value at `path` (for messages).
    pub(crate) fn skip(
        &mut self,
        writer: &'a Schema,
        namespace: &Namespace,
        path: &str,
    ) -> Result<Op, Error> {
        self.expansion.enter(path)?;
        let result = self.skip_inner(writer, namespace, path);
        self.expansion.leave();
        result
    }

    fn skip_inner(
        &mut self,
        writer: &'a Schema,
        namespace: &Namespace,
        path: &str,
    ) -> Result<Op, Error> {
        let (writer, namespace) = self.names.resolve(writer, namespace)?;
        Ok(match writer {
            Schema::Null => Op::SkipNull,
            Schema::Boolean => Op::SkipBool,
            Schema::Int | Schema::Date | Schema::TimeMillis => Op::SkipInt,
            Schema::Long
            | Schema::TimeMicros
            | Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos => Op::SkipLong,
            Schema::Float => Op::SkipFloat,
            Schema::Double => Op::SkipDouble,
            Schema::Bytes | Schema::BigDecimal | Schema::Uuid => Op::SkipBytes,
            Schema::String => Op::SkipString,
            Schema::Fixed(f) => Op::SkipFixed(f.size),
            Schema::Duration => Op::SkipFixed(12),
            Schema::Enum(e) => Op::SkipEnum(e.symbols.len()),
            Schema::Decimal(d) => {
                let (inner, _) = self.names.resolve(&d.inner, &namespace)?;
                match inner {
                    Schema::Fixed(f) => Op::SkipFixed(f.size),
                    _ => Op::SkipBytes,
                }
            }
            Schema::Record(r) => {
                self.expansion
                    .open_record(r.name.fully_qualified_name(&namespace), path)?;
                let mut fields = Vec::with_capacity(r.fields.len());
                for field in &r.fields {
                    fields.push(self.skip(&field.schema, &namespace, &join(path, &field.name))?);
                }
                self.expansion.close_record();
                Op::SkipRecord(fields)
            }
            Schema::Union(u) => {
                let mut branches = Vec::with_capacity(u.variants().len());
                for branch in u.variants() {
                    branches.push(self.skip(branch, &namespace, path)?);
                }
                Op::SkipUnion(branches)
            }
            Schema::Array(a) => Op::SkipArray(Box::new(self.skip(
                &a.items,
                &namespace,
                &join(path, "element"),
            )?)),
            Schema::Map(m) => Op::SkipMap(Box::new(self.skip(
                &m.types,
                &namespace,
                &join(path, "value"),
            )?)),
            Schema::Ref { .. } => {
                return Err(Error::Schema(format!(
                    "`{path}`: a reference names another reference"
                )))
            }
        })
    }
}
