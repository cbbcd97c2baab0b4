//! Protobuf records as Iceberg rows: the Iceberg schema of a message type
//! ([`protobuf_to_iceberg`]) and the conversion of decoded messages into Arrow arrays of a
//! table's columns ([`ProtobufConverter`]).
//!
//! Conventions (fixed: tables already written depend on them):
//! - A message is a struct and its fields are the columns. Every field is optional in Iceberg:
//!   Protobuf has no reliable presence and schema evolution adds and removes fields.
//! - A proto3 scalar left at its default is written as that default, not null; a field with
//!   explicit presence (`optional`, message types, oneof members, proto2 fields) is null when
//!   unset. An unset repeated or map field is an empty list or map.
//! - int32/sint32/sfixed32 → int; uint32/fixed32 and the 64-bit integers → long (a uint64
//!   above `i64::MAX` does not convert: it is never wrapped); bool → boolean; float → float;
//!   double → double; string → string; bytes → binary; enum → string, the value's name (an
//!   unknown number is written as its decimal digits).
//! - repeated → list with required elements; `map<K, V>` → map with the mapped key type and an
//!   optional value. Oneof members are ordinary optional fields.
//! - Well-known types: `Timestamp` → timestamptz (microseconds, nanos truncated); `Duration` →
//!   long (microseconds); the wrappers (`Int32Value` … `BytesValue`) → their optional primitive;
//!   `Struct`, `Value`, `ListValue` → string holding the JSON text; `Any` → struct {type_url:
//!   string, value: binary} (it is an ordinary message); `Empty` → boolean, true when set. Any
//!   other message without fields maps like `Empty` (Parquet cannot store an empty struct).
//! - A recursive message type has no Iceberg schema: Error::Schema.
//! - Field ids of [`protobuf_to_iceberg`] are provisional: assigned depth-first (a field, then
//!   its nested fields, then its next sibling) from 1. The table's stable ids are re-mapped
//!   onto them by name path elsewhere.
//!
//! [`ProtobufConverter`] writes into a table's columns, which may come from a newer schema than
//! the message's: fields are matched by name at every level, target columns the message lacks
//! are null, message fields the target lacks are ignored, and int → long and float → double
//! widen. All name matching and type checking happens once, in [`ProtobufConverter::new`],
//! which compiles a plan of field descriptors per column; appending a row only follows it.
//!
//! All-or-nothing: [`ProtobufConverter::append`] either appends the whole row or, on error,
//! leaves the buffered rows exactly as they were, so the caller can send the record to the
//! dead-letter table and go on.

pub(crate) mod columns;
#[cfg(test)]
mod tests;

use std::io::Write as _;
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::{DataType, Field, Fields, SchemaRef, TimeUnit};
use iceberg::spec::{
    ListType, MapType, NestedField, NestedFieldRef, PrimitiveType, Schema, StructType, Type,
};
use prost_reflect::{
    DynamicMessage, EnumDescriptor, FieldDescriptor, Kind, MapKey, MessageDescriptor,
    ReflectMessage as _, Value,
};

use self::columns::{Column, RowBuffer};
use crate::error::{Error, Result};

/// The Iceberg schema of a message type: its fields become the table's columns. Provisional
/// field ids assigned depth-first from 1 (another module re-maps them onto a table's stable
/// ids by name path).
pub fn protobuf_to_iceberg(message: &MessageDescriptor) -> Result<Schema> {
    let mut ids = IdCounter(0);
    let mut stack = vec![message.clone()];
    let fields = struct_fields(message, &mut ids, &mut stack)?;
    Schema::builder()
        .with_fields(fields)
        .build()
        .map_err(|e| Error::Schema(format!("message {}: {e}", message.full_name())))
}

struct IdCounter(i32);

impl IdCounter {
    fn next(&mut self) -> i32 {
        self.0 += 1;
        self.0
    }
}

fn struct_fields(
    message: &MessageDescriptor,
    ids: &mut IdCounter,
    stack: &mut Vec<MessageDescriptor>,
) -> Result<Vec<NestedFieldRef>> {
    let mut fields = Vec::with_capacity(message.fields().len());
    for field in message.fields() {
        let id = ids.next();
        let field_type = field_type(&field, ids, stack)?;
        fields.push(Arc::new(NestedField::optional(
            id,
            field.name(),
            field_type,
        )));
    }
    Ok(fields)
}

fn field_type(
    field: &FieldDescriptor,
    ids: &mut IdCounter,
    stack: &mut Vec<MessageDescriptor>,
) -> Result<Type> {
    if field.is_map() {
        let Kind::Message(entry) = field.kind() else {
            return Err(Error::Schema(format!(
                "map field {} has no entry message",
                field.full_name()
            )));
        };
        let key_id = ids.next();
        let value_id = ids.next();
        let key = kind_type(&entry.map_entry_key_field().kind(), ids, stack)?;
        let value = kind_type(&entry.map_entry_value_field().kind(), ids, stack)?;
        return Ok(Type::Map(MapType::new(
            Arc::new(NestedField::map_key_element(key_id, key)),
            Arc::new(NestedField::map_value_element(value_id, value, false)),
        )));
    }
    if field.is_list() {
        let element_id = ids.next();
        let element = kind_type(&field.kind(), ids, stack)?;
        return Ok(Type::List(ListType::new(Arc::new(
            NestedField::list_element(element_id, element, true),
        ))));
    }
    kind_type(&field.kind(), ids, stack)
}

fn kind_type(kind: &Kind, ids: &mut IdCounter, stack: &mut Vec<MessageDescriptor>) -> Result<Type> {
    let primitive = match kind {
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => PrimitiveType::Int,
        Kind::Uint32
        | Kind::Fixed32
        | Kind::Int64
        | Kind::Sint64
        | Kind::Sfixed64
        | Kind::Uint64
        | Kind::Fixed64 => PrimitiveType::Long,
        Kind::Bool => PrimitiveType::Boolean,
        Kind::Float => PrimitiveType::Float,
        Kind::Double => PrimitiveType::Double,
        Kind::String | Kind::Enum(_) => PrimitiveType::String,
        Kind::Bytes => PrimitiveType::Binary,
        Kind::Message(message) => match WellKnown::of(message) {
            Some(WellKnown::Timestamp) => PrimitiveType::Timestamptz,
            Some(WellKnown::Duration) => PrimitiveType::Long,
            Some(WellKnown::Wrapper) => {
                return kind_type(&wrapped_field(message)?.kind(), ids, stack)
            }
            Some(WellKnown::JsonText) => PrimitiveType::String,
            Some(WellKnown::Empty) => PrimitiveType::Boolean,
            None => {
                enter(stack, message)?;
                let fields = struct_fields(message, ids, stack)?;
                stack.pop();
                return Ok(Type::Struct(StructType::new(fields)));
            }
        },
    };
    Ok(Type::Primitive(primitive))
}

/// Pushes `message` on the stack of messages being mapped, refusing recursion.
fn enter(stack: &mut Vec<MessageDescriptor>, message: &MessageDescriptor) -> Result<()> {
    if let Some(start) = stack.iter().position(|m| m == message) {
        let cycle: Vec<&str> = stack[start..]
            .iter()
            .map(MessageDescriptor::full_name)
            .chain(std::iter::once(message.full_name()))
            .collect();
        return Err(Error::Schema(format!(
            "message {} is recursive ({}): an Iceberg table cannot hold a recursive type",
            message.full_name(),
            cycle.join(" → ")
        )));
    }
    stack.push(message.clone());
    Ok(())
}

/// The well-known types with a mapping of their own (`Any` maps as an ordinary message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WellKnown {
    Timestamp,
    Duration,
    /// `Int32Value` … `BytesValue`: the primitive of their field `value`.
    Wrapper,
    /// `Struct`, `Value`, `ListValue`: their JSON text.
    JsonText,
    /// `Empty`, and any other message without fields: true when set.
    Empty,
}

impl WellKnown {
    fn of(message: &MessageDescriptor) -> Option<WellKnown> {
        Some(match message.full_name() {
            "google.protobuf.Timestamp" => WellKnown::Timestamp,
            "google.protobuf.Duration" => WellKnown::Duration,
            "google.protobuf.Int32Value"
            | "google.protobuf.Int64Value"
            | "google.protobuf.UInt32Value"
            | "google.protobuf.UInt64Value"
            | "google.protobuf.FloatValue"
            | "google.protobuf.DoubleValue"
            | "google.protobuf.BoolValue"
            | "google.protobuf.StringValue"
            | "google.protobuf.BytesValue" => WellKnown::Wrapper,
            "google.protobuf.Struct" | "google.protobuf.Value" | "google.protobuf.ListValue" => {
                WellKnown::JsonText
            }
            "google.protobuf.Empty" => WellKnown::Empty,
            // Any other message without fields is a marker like Empty; Parquet cannot store
            // an empty struct.
            _ if message.fields().len() == 0 => WellKnown::Empty,
            _ => return None,
        })
    }
}

fn wrapped_field(wrapper: &MessageDescriptor) -> Result<FieldDescriptor> {
    wrapper
        .get_field(1)
        .ok_or_else(|| Error::Schema(format!("{} has no field 1 (`value`)", wrapper.full_name())))
}

/// Converts decoded messages of one type into Arrow arrays of a table's value columns (see the
/// module docs for the mapping, the matching by name and the all-or-nothing guarantee).
#[derive(Debug)]
pub struct ProtobufConverter {
    message: MessageDescriptor,
    /// One per target column, in the target's order.
    plans: Vec<FieldPlan>,
    buffer: RowBuffer,
}

/// How one target column (or nested field) is filled from a message.
#[derive(Debug)]
struct FieldPlan {
    /// The message's field of the column's name; None: the message has no such field and the
    /// column is always null.
    source: Option<FieldDescriptor>,
    /// The field has explicit presence: unset is null.
    presence: bool,
    shape: Shape,
    /// The column's name path, for errors.
    path: Box<str>,
}

#[derive(Debug)]
enum Shape {
    Single(Conv),
    /// A repeated field: each element converts with the plan.
    List(Conv),
    /// A map field: keys are scalars, values convert with the plan.
    Map(Conv),
}

/// Which JSON well-known type a [`Conv::JsonText`] holds.
#[derive(Debug, Clone, Copy)]
enum JsonKind {
    Struct,
    List,
    Value,
}

/// How one value converts.
#[derive(Debug)]
enum Conv {
    /// A scalar written as it is (or widened by the column).
    Scalar,
    Enum(EnumDescriptor),
    Timestamp {
        seconds: FieldDescriptor,
        nanos: FieldDescriptor,
    },
    Duration {
        seconds: FieldDescriptor,
        nanos: FieldDescriptor,
    },
    /// A wrapper message: the scalar in its field `value`.
    Wrapper(FieldDescriptor),
    /// `Struct`, `Value` or `ListValue` as JSON text.
    JsonText(JsonKind),
    /// `Empty`: true.
    Empty,
    Message(Vec<FieldPlan>),
}

impl ProtobufConverter {
    /// `target`: Arrow schema of the table's value columns (`schema_to_arrow_schema` of the
    /// table schema, value columns only), possibly of a newer schema than `message`. Fields are
    /// matched by name at every level; a target field missing from the message is null
    /// (Error::Schema here if it is not nullable); a message field missing from the target is
    /// ignored; int → long and float → double widen. Any other type difference is an
    /// Error::Schema, as is a recursive message.
    pub fn new(message: &MessageDescriptor, target: SchemaRef) -> Result<Self> {
        let mut stack = vec![message.clone()];
        let plans = plan_fields(message, target.fields(), "", &mut stack)?;
        let columns = target
            .fields()
            .iter()
            .map(Column::new)
            .collect::<Result<Vec<_>>>()?;
        Ok(ProtobufConverter {
            message: message.clone(),
            plans,
            buffer: RowBuffer::new(columns),
        })
    }

    /// Appends one message as a row. On error nothing of the row remains (all-or-nothing), so
    /// the caller can route the record to a dead-letter table and go on.
    pub fn append(&mut self, message: &DynamicMessage) -> Result<()> {
        let descriptor = message.descriptor();
        if descriptor != self.message && descriptor.full_name() != self.message.full_name() {
            return Err(Error::Decode(format!(
                "a {} message given to the converter of {}",
                descriptor.full_name(),
                self.message.full_name()
            )));
        }
        let plans = &self.plans;
        self.buffer
            .append(|columns| write_fields(plans, columns, message))
    }

    /// Rows appended since the last [`finish`](Self::finish).
    pub fn len(&self) -> usize {
        self.buffer.len()
    }

    /// Drops the rows past the first `rows` (a caller undoing a row whose other half failed).
    pub fn truncate(&mut self, rows: usize) {
        self.buffer.truncate(rows)
    }

    pub fn is_empty(&self) -> bool {
        self.buffer.len() == 0
    }

    /// Bytes currently buffered (for a memory budget).
    pub fn buffered_bytes(&self) -> usize {
        self.buffer.buffered_bytes()
    }

    /// The rows so far as arrays in the target's column order, of exactly the target's types
    /// (nested field metadata included); the converter is empty afterwards, also on error.
    pub fn finish(&mut self) -> Result<Vec<ArrayRef>> {
        self.buffer.finish()
    }
}

fn plan_fields(
    message: &MessageDescriptor,
    target: &Fields,
    prefix: &str,
    stack: &mut Vec<MessageDescriptor>,
) -> Result<Vec<FieldPlan>> {
    target
        .iter()
        .map(|column| {
            let path: Box<str> = format!("{prefix}{}", column.name()).into();
            match message.get_field_by_name(column.name()) {
                Some(field) => plan_field(&field, column, path, stack),
                None if column.is_nullable() => Ok(FieldPlan {
                    source: None,
                    presence: true,
                    shape: Shape::Single(Conv::Scalar),
                    path,
                }),
                None => Err(Error::Schema(format!(
                    "column `{path}` is required but message {} has no field `{}`",
                    message.full_name(),
                    column.name()
                ))),
            }
        })
        .collect()
}

fn plan_field(
    field: &FieldDescriptor,
    column: &Field,
    path: Box<str>,
    stack: &mut Vec<MessageDescriptor>,
) -> Result<FieldPlan> {
    let mismatch = |what: &str| {
        Error::Schema(format!(
            "column `{path}` of type {} cannot take {what} field {}",
            column.data_type(),
            field.full_name()
        ))
    };
    let shape = if field.is_map() {
        let (DataType::Map(entries, _), Kind::Message(entry)) = (column.data_type(), field.kind())
        else {
            return Err(mismatch("map"));
        };
        let DataType::Struct(key_value) = entries.data_type() else {
            return Err(mismatch("map"));
        };
        let [key_column, value_column] = key_value.iter().collect::<Vec<_>>()[..] else {
            return Err(mismatch("map"));
        };
        let key = entry.map_entry_key_field().kind();
        if !scalar_fits(&key, key_column.data_type()) {
            return Err(mismatch(&format!("map with {key:?} keys of")));
        }
        let value_kind = entry.map_entry_value_field().kind();
        Shape::Map(plan_kind(
            &value_kind,
            value_column.data_type(),
            &path,
            stack,
        )?)
    } else if field.is_list() {
        let DataType::List(element) = column.data_type() else {
            return Err(mismatch("repeated"));
        };
        Shape::List(plan_kind(&field.kind(), element.data_type(), &path, stack)?)
    } else {
        Shape::Single(plan_kind(&field.kind(), column.data_type(), &path, stack)?)
    };
    Ok(FieldPlan {
        source: Some(field.clone()),
        presence: field.supports_presence(),
        shape,
        path,
    })
}

/// The conversion of one value of `kind` into a column of type `target`.
fn plan_kind(
    kind: &Kind,
    target: &DataType,
    path: &str,
    stack: &mut Vec<MessageDescriptor>,
) -> Result<Conv> {
    let fits = match kind {
        Kind::Enum(_) => matches!(target, DataType::Utf8 | DataType::LargeUtf8),
        Kind::Message(message) => match WellKnown::of(message) {
            Some(WellKnown::Timestamp) => {
                matches!(target, DataType::Timestamp(TimeUnit::Microsecond, Some(_)))
            }
            Some(WellKnown::Duration) => target == &DataType::Int64,
            Some(WellKnown::Wrapper) => scalar_fits(&wrapped_field(message)?.kind(), target),
            Some(WellKnown::JsonText) => matches!(target, DataType::Utf8 | DataType::LargeUtf8),
            Some(WellKnown::Empty) => target == &DataType::Boolean,
            None => matches!(target, DataType::Struct(_)),
        },
        scalar => scalar_fits(scalar, target),
    };
    if !fits {
        return Err(Error::Schema(format!(
            "column `{path}` of type {target} cannot take protobuf {}",
            kind_name(kind)
        )));
    }
    Ok(match kind {
        Kind::Enum(e) => Conv::Enum(e.clone()),
        Kind::Message(message) => match WellKnown::of(message) {
            Some(WellKnown::Timestamp) => {
                let (seconds, nanos) = seconds_and_nanos(message)?;
                Conv::Timestamp { seconds, nanos }
            }
            Some(WellKnown::Duration) => {
                let (seconds, nanos) = seconds_and_nanos(message)?;
                Conv::Duration { seconds, nanos }
            }
            Some(WellKnown::Wrapper) => Conv::Wrapper(wrapped_field(message)?),
            Some(WellKnown::JsonText) => Conv::JsonText(match message.full_name() {
                "google.protobuf.Struct" => JsonKind::Struct,
                "google.protobuf.ListValue" => JsonKind::List,
                _ => JsonKind::Value,
            }),
            Some(WellKnown::Empty) => Conv::Empty,
            None => {
                let DataType::Struct(fields) = target else {
                    return Err(Error::Schema(format!("column `{path}` is not a struct")));
                };
                enter(stack, message)?;
                let plans = plan_fields(message, fields, &format!("{path}."), stack)?;
                stack.pop();
                Conv::Message(plans)
            }
        },
        _ => Conv::Scalar,
    })
}

/// Whether a scalar of `kind` goes to a column of type `target` (with widening).
fn scalar_fits(kind: &Kind, target: &DataType) -> bool {
    match kind {
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            matches!(target, DataType::Int32 | DataType::Int64)
        }
        Kind::Uint32
        | Kind::Fixed32
        | Kind::Int64
        | Kind::Sint64
        | Kind::Sfixed64
        | Kind::Uint64
        | Kind::Fixed64 => target == &DataType::Int64,
        Kind::Bool => target == &DataType::Boolean,
        Kind::Float => matches!(target, DataType::Float32 | DataType::Float64),
        Kind::Double => target == &DataType::Float64,
        Kind::String => matches!(target, DataType::Utf8 | DataType::LargeUtf8),
        Kind::Bytes => matches!(target, DataType::Binary | DataType::LargeBinary),
        Kind::Enum(_) | Kind::Message(_) => false,
    }
}

fn kind_name(kind: &Kind) -> String {
    match kind {
        Kind::Message(m) => format!("message {}", m.full_name()),
        Kind::Enum(e) => format!("enum {}", e.full_name()),
        scalar => format!("{scalar:?}").to_lowercase(),
    }
}

fn seconds_and_nanos(message: &MessageDescriptor) -> Result<(FieldDescriptor, FieldDescriptor)> {
    match (message.get_field(1), message.get_field(2)) {
        (Some(seconds), Some(nanos)) => Ok((seconds, nanos)),
        _ => Err(Error::Schema(format!(
            "{} lacks its `seconds` and `nanos` fields",
            message.full_name()
        ))),
    }
}

fn write_fields(
    plans: &[FieldPlan],
    columns: &mut [Column],
    message: &DynamicMessage,
) -> Result<()> {
    for (plan, column) in plans.iter().zip(columns) {
        write_field(plan, column, message)?;
    }
    Ok(())
}

fn write_field(plan: &FieldPlan, column: &mut Column, message: &DynamicMessage) -> Result<()> {
    let Some(field) = &plan.source else {
        return column.push_null().map_err(|e| at(&plan.path, e));
    };
    if plan.presence && !message.has_field(field) {
        return column.push_null().map_err(|e| at(&plan.path, e));
    }
    let value = message.get_field(field);
    match (&plan.shape, &*value) {
        (Shape::Single(conv), value) => write_value(conv, column, value, &plan.path),
        (Shape::List(conv), Value::List(items)) => {
            let element = column.list_element()?;
            for item in items {
                write_value(conv, element, item, &plan.path)?;
            }
            column.close_entries()
        }
        (Shape::Map(conv), Value::Map(entries)) => {
            // Sorted by key: files do not depend on hash order.
            let mut sorted: Vec<(&MapKey, &Value)> = entries.iter().collect();
            sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
            let (keys, values) = column.map_entries()?;
            for (key, value) in sorted {
                push_key(keys, key).map_err(|e| at(&plan.path, e))?;
                write_value(conv, values, value, &plan.path)?;
            }
            column.close_entries()
        }
        (_, other) => Err(at(&plan.path, unexpected(other))),
    }
}

fn write_value(conv: &Conv, column: &mut Column, value: &Value, path: &str) -> Result<()> {
    let result = match conv {
        Conv::Message(plans) => {
            let message = as_message(value).map_err(|e| at(path, e))?;
            let children = column.push_struct()?;
            // Errors of nested fields carry their own path.
            return write_fields(plans, children, message);
        }
        Conv::Scalar => push_scalar(column, value),
        Conv::Enum(descriptor) => match value {
            Value::EnumNumber(number) => match descriptor.get_value(*number) {
                Some(known) => column.push_str(known.name()),
                None => column.push_text_with(|data| {
                    write!(data, "{number}").map_err(|e| Error::Decode(e.to_string()))
                }),
            },
            other => Err(unexpected(other)),
        },
        Conv::Timestamp { seconds, nanos } | Conv::Duration { seconds, nanos } => as_message(value)
            .and_then(|message| {
                let micros = micros(message, seconds, nanos)?;
                column.push_i64(micros)
            }),
        Conv::Wrapper(inner) => {
            as_message(value).and_then(|message| push_scalar(column, &message.get_field(inner)))
        }
        Conv::JsonText(kind) => as_message(value).and_then(|message| {
            column.push_text_with(|data| match kind {
                JsonKind::Struct => write_json_struct(data, message),
                JsonKind::List => write_json_list(data, message),
                JsonKind::Value => write_json_value(data, message),
            })
        }),
        Conv::Empty => as_message(value).and_then(|_| column.push_bool(true)),
    };
    result.map_err(|e| at(path, e))
}

fn push_scalar(column: &mut Column, value: &Value) -> Result<()> {
    match value {
        Value::Bool(v) => column.push_bool(*v),
        Value::I32(v) => column.push_i32(*v),
        Value::I64(v) => column.push_i64(*v),
        Value::U32(v) => column.push_i64(i64::from(*v)),
        Value::U64(v) => column.push_i64(u64_to_long(*v)?),
        Value::F32(v) => column.push_f32(*v),
        Value::F64(v) => column.push_f64(*v),
        Value::String(v) => column.push_str(v),
        Value::Bytes(v) => column.push_binary(v),
        other => Err(unexpected(other)),
    }
}

fn push_key(column: &mut Column, key: &MapKey) -> Result<()> {
    match key {
        MapKey::Bool(v) => column.push_bool(*v),
        MapKey::I32(v) => column.push_i32(*v),
        MapKey::I64(v) => column.push_i64(*v),
        MapKey::U32(v) => column.push_i64(i64::from(*v)),
        MapKey::U64(v) => column.push_i64(u64_to_long(*v)?),
        MapKey::String(v) => column.push_str(v),
    }
}

fn u64_to_long(value: u64) -> Result<i64> {
    i64::try_from(value).map_err(|_| {
        Error::Decode(format!(
            "{value} is larger than the largest long ({})",
            i64::MAX
        ))
    })
}

/// Microseconds of a `Timestamp` or `Duration`, nanos truncated toward zero.
fn micros(
    message: &DynamicMessage,
    seconds: &FieldDescriptor,
    nanos: &FieldDescriptor,
) -> Result<i64> {
    let (Value::I64(s), Value::I32(n)) = (&*message.get_field(seconds), &*message.get_field(nanos))
    else {
        return Err(Error::Decode(format!(
            "{} has unexpected field types",
            message.descriptor().full_name()
        )));
    };
    s.checked_mul(1_000_000)
        .and_then(|m| m.checked_add(i64::from(*n / 1_000)))
        .ok_or_else(|| Error::Decode(format!("{s} s does not fit in microseconds")))
}

fn as_message(value: &Value) -> Result<&DynamicMessage> {
    match value {
        Value::Message(message) => Ok(message),
        other => Err(unexpected(other)),
    }
}

fn unexpected(value: &Value) -> Error {
    let kind = match value {
        Value::Bool(_) => "bool",
        Value::I32(_) => "int32",
        Value::I64(_) => "int64",
        Value::U32(_) => "uint32",
        Value::U64(_) => "uint64",
        Value::F32(_) => "float",
        Value::F64(_) => "double",
        Value::String(_) => "string",
        Value::Bytes(_) => "bytes",
        Value::EnumNumber(_) => "enum",
        Value::Message(_) => "message",
        Value::List(_) => "list",
        Value::Map(_) => "map",
    };
    Error::Decode(format!("unexpected {kind} value"))
}

/// Puts a field's name path in front of a Decode error.
fn at(path: &str, error: Error) -> Error {
    match error {
        Error::Decode(message) => Error::Decode(format!("field `{path}`: {message}")),
        other => other,
    }
}

/// Writes a `Struct` as JSON text (the proto3 JSON mapping, with object keys sorted and
/// non-finite numbers as the strings "NaN", "Infinity" and "-Infinity").
fn write_json_struct(out: &mut Vec<u8>, message: &DynamicMessage) -> Result<()> {
    out.push(b'{');
    if let Some(fields) = message.get_field_by_number(1) {
        let Value::Map(entries) = &*fields else {
            return Err(unexpected(&fields));
        };
        let mut sorted: Vec<(&MapKey, &Value)> = entries.iter().collect();
        sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (i, (key, value)) in sorted.into_iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let MapKey::String(key) = key else {
                return Err(Error::Decode("a Struct key is not a string".to_string()));
            };
            write_json_string(out, key)?;
            out.push(b':');
            write_json_value(out, as_message(value)?)?;
        }
    }
    out.push(b'}');
    Ok(())
}

fn write_json_list(out: &mut Vec<u8>, message: &DynamicMessage) -> Result<()> {
    out.push(b'[');
    if let Some(values) = message.get_field_by_number(1) {
        let Value::List(items) = &*values else {
            return Err(unexpected(&values));
        };
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_json_value(out, as_message(item)?)?;
        }
    }
    out.push(b']');
    Ok(())
}

/// `Value`'s oneof `kind`: 1 null, 2 number, 3 string, 4 bool, 5 struct, 6 list; unset is null.
fn write_json_value(out: &mut Vec<u8>, message: &DynamicMessage) -> Result<()> {
    let Some((field, value)) = message.fields().next() else {
        out.extend_from_slice(b"null");
        return Ok(());
    };
    match (field.number(), value) {
        (1, _) => out.extend_from_slice(b"null"),
        (2, Value::F64(v)) => match serde_json::Number::from_f64(*v) {
            Some(number) => serde_json::to_writer(&mut *out, &number).map_err(json_error)?,
            None if v.is_nan() => out.extend_from_slice(b"\"NaN\""),
            None if *v > 0.0 => out.extend_from_slice(b"\"Infinity\""),
            None => out.extend_from_slice(b"\"-Infinity\""),
        },
        (3, Value::String(v)) => write_json_string(out, v)?,
        (4, Value::Bool(v)) => out.extend_from_slice(if *v { b"true" } else { b"false" }),
        (5, Value::Message(v)) => write_json_struct(out, v)?,
        (6, Value::Message(v)) => write_json_list(out, v)?,
        (_, other) => return Err(unexpected(other)),
    }
    Ok(())
}

fn write_json_string(out: &mut Vec<u8>, value: &str) -> Result<()> {
    serde_json::to_writer(&mut *out, value).map_err(json_error)
}

fn json_error(error: serde_json::Error) -> Error {
    Error::Decode(format!("cannot write JSON text: {error}"))
}
