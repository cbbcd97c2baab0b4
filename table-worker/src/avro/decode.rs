//! [`AvroDecoder`]: Avro binary datums straight into Arrow arrays.
//!
//! The writer's schema is compiled against the target Arrow schema once ([`super::plan`]);
//! each datum then runs the plan, decoding varints and bytes directly into the column buffers
//! ([`super::columns`]), with no `apache_avro::types::Value`, no per-record allocation beyond
//! buffer growth, and no name lookups. Arrays are built only in [`AvroDecoder::finish`].
//!
//! Guarantees:
//! - **Rollback.** A datum that fails to decode leaves nothing behind: every column is cut back
//!   to the row count before it, so the caller can route that record elsewhere and go on.
//! - **Hostile input.** Decoding never panics. Lengths and block counts are bounded by the
//!   bytes left in the datum, the total items of its arrays and maps by its length, and nesting
//!   by the (compiled, bounded) schema depth, so memory and time stay proportional to input.
//! - **Exactness.** A datum must be consumed exactly: trailing bytes are an error.
//! - **Types.** Finished arrays have exactly the target's types, nested fields and their
//!   metadata included.

use std::ops::Range;

use apache_avro::schema::Schema;
use arrow::array::{make_array, ArrayRef};
use arrow::datatypes::SchemaRef;

use super::columns::{self, append_null, truncate, Column};
use super::mapping::kind;
use super::names::{Expansion, Names};
use super::plan::{alloc_columns, Branch, Compiler, Op, RecordOp};
use super::reader::{big_decimal, decimal, decimal_text, uuid, zoned_timestamp, FaultKind, Reader};
use crate::error::Error;

/// Decodes Avro binary datums of one writer schema into columns of one target Arrow schema.
pub struct AvroDecoder {
    target: SchemaRef,
    cols: Vec<Column>,
    top: Range<usize>,
    plan: RecordOp,
    rows: usize,
}

impl std::fmt::Debug for AvroDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AvroDecoder")
            .field("target", &self.target)
            .field("rows", &self.rows)
            .finish_non_exhaustive()
    }
}

impl AvroDecoder {
    /// Compiles a decoding plan from the writer's Avro schema (its `Ref`s resolved through
    /// itself and `refs`) to `target`: the table's Arrow schema
    /// (`iceberg::arrow::schema_to_arrow_schema`) restricted to the value columns, possibly of
    /// a newer schema version than the writer's.
    ///
    /// Fields are matched by name at every level. A target field the writer lacks is filled
    /// with nulls (refused if the field is required); a writer field the target lacks is
    /// decoded and dropped. Allowed widenings: int → long, float → double, a larger decimal
    /// precision (same scale), a required writer value into a nullable column. Anything else is
    /// an [`Error::Schema`] naming the field.
    pub fn new(writer: &Schema, refs: &[Schema], target: SchemaRef) -> Result<Self, Error> {
        let names = Names::new(writer, refs);
        let (top, namespace) = names.resolve(writer, &None)?;
        let Schema::Record(record) = top else {
            return Err(Error::Schema(format!(
                "the writer's schema must be an Avro record to be read into a table, not {}",
                kind(top)
            )));
        };
        let mut cols = Vec::new();
        let top_cols = alloc_columns(&mut cols, target.fields(), "")?;
        let mut compiler = Compiler {
            names: &names,
            cols: &cols,
            expansion: Expansion::new(),
        };
        let plan = compiler.record(record, &namespace, None, top_cols.clone(), "")?;
        Ok(AvroDecoder {
            target,
            cols,
            top: top_cols,
            plan,
            rows: 0,
        })
    }

    /// The target schema the finished arrays follow.
    pub fn schema(&self) -> SchemaRef {
        self.target.clone()
    }

    /// Decodes one datum (the bytes after the 5-byte Confluent header) and appends it as one
    /// row. The datum must be consumed exactly. On any error nothing of the row remains (the
    /// columns are rolled back to the previous row count) and the error is
    /// [`Error::Decode`], naming the field where it could.
    pub fn append(&mut self, datum: &[u8]) -> Result<(), Error> {
        let mut r = Reader::new(datum);
        let result =
            exec_record(&self.plan, &mut r, &mut self.cols).and_then(|()| match r.remaining() {
                0 => Ok(()),
                n => Err(Fault::at(FaultKind::TrailingBytes(n), NOWHERE)),
            });
        match result {
            Ok(()) => {
                self.rows += 1;
                Ok(())
            }
            Err(fault) => {
                for c in self.top.clone() {
                    truncate(&mut self.cols, c, self.rows);
                }
                Err(self.describe(fault))
            }
        }
    }

    /// Rows appended since the last finish.
    pub fn len(&self) -> usize {
        self.rows
    }

    /// Drops the rows past the first `rows` (a caller undoing a row whose other half failed).
    pub fn truncate(&mut self, rows: usize) {
        let rows = rows.min(self.rows);
        for c in self.top.clone() {
            truncate(&mut self.cols, c, rows);
        }
        self.rows = rows;
    }

    /// Whether no rows were appended since the last finish.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Bytes of memory the buffered rows hold (allocated buffer capacity), for accounting
    /// against a memory budget. Close to 0 after [`AvroDecoder::finish`].
    pub fn buffered_bytes(&self) -> usize {
        columns::allocated(&self.cols)
    }

    /// The rows so far as arrays in the target's field order, with exactly the target's types;
    /// the decoder is then empty. On error the buffered rows are dropped.
    pub fn finish(&mut self) -> Result<Vec<ArrayRef>, Error> {
        let mut arrays = Vec::with_capacity(self.top.len());
        for c in self.top.clone() {
            match columns::finish(&mut self.cols, c) {
                Ok(data) => arrays.push(make_array(data)),
                Err(e) => {
                    for c in self.top.clone() {
                        truncate(&mut self.cols, c, 0);
                    }
                    self.rows = 0;
                    return Err(e);
                }
            }
        }
        self.rows = 0;
        Ok(arrays)
    }

    fn describe(&self, fault: Fault) -> Error {
        match self.cols.get(fault.col as usize) {
            Some(col) => Error::Decode(format!("field `{}`: {}", col.path, fault.kind)),
            None => Error::Decode(fault.kind.to_string()),
        }
    }
}

/// A decoding failure and the column (arena index) it happened in, or [`NOWHERE`].
#[derive(Debug, Clone, Copy)]
struct Fault {
    kind: FaultKind,
    col: u32,
}

/// Not in a column: the datum's end, or a writer field the table does not have.
const NOWHERE: u32 = u32::MAX;

impl Fault {
    #[inline]
    fn at(kind: FaultKind, col: u32) -> Self {
        Fault { kind, col }
    }
}

/// Tags a fault with column `c`.
#[inline]
fn at(c: usize) -> impl Fn(FaultKind) -> Fault {
    move |kind| Fault {
        kind,
        col: u32::try_from(c).unwrap_or(NOWHERE),
    }
}

#[inline]
fn col(cols: &mut [Column], c: usize) -> Result<&mut Column, Fault> {
    cols.get_mut(c)
        .ok_or(Fault::at(FaultKind::Internal, NOWHERE))
}

#[inline]
fn skipped(kind: FaultKind) -> Fault {
    Fault::at(kind, NOWHERE)
}

fn exec_record(rec: &RecordOp, r: &mut Reader<'_>, cols: &mut [Column]) -> Result<(), Fault> {
    if let Some(c) = rec.col {
        col(cols, c)?.push_struct().map_err(at(c))?;
    }
    for op in &rec.fields {
        exec(op, r, cols)?;
    }
    for &c in &rec.missing {
        append_null(cols, c).map_err(at(c))?;
    }
    Ok(())
}

/// Runs `op` on the datum at `r`. Recursion follows the compiled plan, whose depth is bounded.
fn exec(op: &Op, r: &mut Reader<'_>, cols: &mut [Column]) -> Result<(), Fault> {
    match op {
        Op::Bool(c) => {
            let v = r.boolean().map_err(at(*c))?;
            col(cols, *c)?.push_bool(v).map_err(at(*c))
        }
        Op::Int32(c) => {
            let v = r.int().map_err(at(*c))?;
            col(cols, *c)?.push_i32(v).map_err(at(*c))
        }
        Op::IntToInt64(c) => {
            let v = r.int().map_err(at(*c))?;
            col(cols, *c)?.push_i64(i64::from(v)).map_err(at(*c))
        }
        Op::Int64(c) => {
            let v = r.long().map_err(at(*c))?;
            col(cols, *c)?.push_i64(v).map_err(at(*c))
        }
        Op::TimeMillis(c) => {
            let v = r.int().map_err(at(*c))?;
            col(cols, *c)?.push_i64(i64::from(v) * 1000).map_err(at(*c))
        }
        Op::ScaleUp(c, factor) => {
            let v = r.long().map_err(at(*c))?;
            let scaled = v
                .checked_mul(*factor)
                .ok_or(FaultKind::TimeOverflow(v))
                .map_err(at(*c))?;
            col(cols, *c)?.push_i64(scaled).map_err(at(*c))
        }
        Op::ScaleDown(c, factor) => {
            let v = r.long().map_err(at(*c))?;
            col(cols, *c)?
                .push_i64(v.div_euclid(*factor))
                .map_err(at(*c))
        }
        Op::Float32(c) => {
            let v = r.float().map_err(at(*c))?;
            col(cols, *c)?.push_f32(v).map_err(at(*c))
        }
        Op::FloatToFloat64(c) => {
            let v = r.float().map_err(at(*c))?;
            col(cols, *c)?.push_f64(f64::from(v)).map_err(at(*c))
        }
        Op::Float64(c) => {
            let v = r.double().map_err(at(*c))?;
            col(cols, *c)?.push_f64(v).map_err(at(*c))
        }
        Op::Utf8(c) => {
            let v = r.string().map_err(at(*c))?;
            col(cols, *c)?.push_bytes(v).map_err(at(*c))
        }
        Op::Binary(c) => {
            let v = r.bytes().map_err(at(*c))?;
            col(cols, *c)?.push_bytes(v).map_err(at(*c))
        }
        Op::Fixed(c, size) => {
            let v = r.take(*size).map_err(at(*c))?;
            col(cols, *c)?.push_fixed(v).map_err(at(*c))
        }
        Op::Uuid(c) => {
            let v = r.bytes().and_then(uuid).map_err(at(*c))?;
            col(cols, *c)?.push_fixed(&v).map_err(at(*c))
        }
        Op::Enum(c, symbols) => {
            let i = r.enum_index(symbols.len()).map_err(at(*c))?;
            let symbol = symbols.get(i).ok_or(FaultKind::Internal).map_err(at(*c))?;
            col(cols, *c)?.push_bytes(symbol.as_bytes()).map_err(at(*c))
        }
        Op::Decimal {
            col: c,
            fixed,
            precision,
        } => {
            let bytes = match fixed {
                Some(n) => r.take(*n),
                None => r.bytes(),
            }
            .map_err(at(*c))?;
            let v = decimal(bytes, *precision).map_err(at(*c))?;
            col(cols, *c)?.push_i128(v).map_err(at(*c))
        }
        Op::BigDecimal(c) => {
            let v = r.bytes().map_err(at(*c))?;
            col(cols, *c)?
                .push_with(|out| big_decimal(v, out))
                .map_err(at(*c))
        }
        Op::VariableScaleDecimal(c) => {
            let scale = r.int().map_err(at(*c))?;
            let unscaled = r.bytes().map_err(at(*c))?;
            col(cols, *c)?
                .push_with(|out| decimal_text(unscaled, i64::from(scale), out))
                .map_err(at(*c))
        }
        Op::ZonedTimestamp(c, nanos_per_unit) => {
            let text = r.string().map_err(at(*c))?;
            let nanos = zoned_timestamp(text).map_err(at(*c))?;
            col(cols, *c)?
                .push_i64(nanos.div_euclid(*nanos_per_unit))
                .map_err(at(*c))
        }
        Op::Record(rec) => exec_record(rec, r, cols),
        Op::Nullable(n) => {
            let branch = r.branch(2).map_err(at(n.col))?;
            if branch == n.null_branch {
                append_null(cols, n.col).map_err(at(n.col))
            } else {
                exec(&n.inner, r, cols)
            }
        }
        Op::Single(inner) => {
            r.branch(1).map_err(skipped)?;
            exec(inner, r, cols)
        }
        Op::UnionStruct(u) => {
            let i = r.branch(u.branches.len()).map_err(at(u.col))?;
            let Some(branch) = u.branches.get(i) else {
                return Err(Fault::at(FaultKind::Internal, NOWHERE));
            };
            let chosen = match branch {
                Branch::Null => return append_null(cols, u.col).map_err(at(u.col)),
                Branch::Value { child, op } => {
                    col(cols, u.col)?.push_struct().map_err(at(u.col))?;
                    exec(op, r, cols)?;
                    Some(*child)
                }
                Branch::Skip(op) => {
                    col(cols, u.col)?.push_struct().map_err(at(u.col))?;
                    exec(op, r, cols)?;
                    None
                }
            };
            for c in u.children.clone() {
                if Some(c) != chosen {
                    append_null(cols, c).map_err(at(c))?;
                }
            }
            Ok(())
        }
        Op::List(l) => {
            let mut items = 0usize;
            loop {
                let n = r.block_count().map_err(at(l.col))?;
                if n == 0 {
                    break;
                }
                for _ in 0..n {
                    exec(&l.item, r, cols)?;
                }
                items += n;
            }
            col(cols, l.col)?.push_items(items).map_err(at(l.col))
        }
        Op::Map(m) => {
            let mut items = 0usize;
            loop {
                let n = r.block_count().map_err(at(m.col))?;
                if n == 0 {
                    break;
                }
                for _ in 0..n {
                    let key = r.string().map_err(at(m.key))?;
                    col(cols, m.key)?.push_bytes(key).map_err(at(m.key))?;
                    exec(&m.value, r, cols)?;
                }
                items += n;
            }
            col(cols, m.col)?.push_items(items).map_err(at(m.col))
        }
        Op::SkipNull => Ok(()),
        Op::SkipBool => r.boolean().map(drop).map_err(skipped),
        Op::SkipInt => r.int().map(drop).map_err(skipped),
        Op::SkipLong => r.long().map(drop).map_err(skipped),
        Op::SkipFloat => r.take(4).map(drop).map_err(skipped),
        Op::SkipDouble => r.take(8).map(drop).map_err(skipped),
        Op::SkipBytes => r.bytes().map(drop).map_err(skipped),
        Op::SkipString => r.string().map(drop).map_err(skipped),
        Op::SkipFixed(n) => r.take(*n).map(drop).map_err(skipped),
        Op::SkipEnum(n) => r.enum_index(*n).map(drop).map_err(skipped),
        Op::SkipRecord(fields) => {
            for op in fields {
                exec(op, r, cols)?;
            }
            Ok(())
        }
        Op::SkipUnion(branches) => {
            let i = r.branch(branches.len()).map_err(skipped)?;
            match branches.get(i) {
                Some(op) => exec(op, r, cols),
                None => Err(skipped(FaultKind::Internal)),
            }
        }
        Op::SkipArray(item) => loop {
            let n = r.block_count().map_err(skipped)?;
            if n == 0 {
                return Ok(());
            }
            for _ in 0..n {
                exec(item, r, cols)?;
            }
        },
        Op::SkipMap(value) => loop {
            let n = r.block_count().map_err(skipped)?;
            if n == 0 {
                return Ok(());
            }
            for _ in 0..n {
                r.string().map_err(skipped)?;
                exec(value, r, cols)?;
            }
        },
    }
}
