//! JSON records as Iceberg rows: the Iceberg schema of a JSON Schema ([`json_to_iceberg`]) and
//! the conversion of JSON values into Arrow arrays of a table's columns ([`JsonConverter`]).
//!
//! Conventions (fixed: tables already written depend on them):
//! - The root schema must be an object schema with `properties`; its properties become the
//!   columns. Every field is optional, list elements and map values included (JSON arrays and
//!   objects may hold nulls).
//! - Local `$ref`s ("#/definitions/x", "#/$defs/x", any "#/..." pointer) are followed; any other
//!   `$ref` is an Error::Schema, as is a recursive schema.
//! - `string` → string, or with `format` "date" → date, "date-time" → timestamptz, "time" →
//!   time; `integer` → long; `number` → double; `boolean` → boolean; an object with
//!   `properties` → struct; an object without properties whose `additionalProperties` is a
//!   schema → map<string, V>; any other object → string holding the JSON text; `array` → list
//!   of the `items` schema (no single items schema → list of JSON texts).
//! - Unions: `["null", T]` → T; several non-null types, or `oneOf`/`anyOf` alternatives of
//!   different types → string holding the JSON text. `allOf` (and a `$ref` beside other
//!   keywords) merges: properties unite, types intersect. `enum` and `const` take the type of
//!   their values (strings → string).
//! - A schema that says nothing (`{}`, `true`) → string holding the JSON text.
//! - Columns follow the order of the schema's keys as parsed (serde_json sorts object keys).
//! - JSON-text columns hold `serde_json::to_string` of the value (a string value keeps its
//!   quotes); a JSON null is a null, in every column.
//! - Field ids of [`json_to_iceberg`] are provisional: assigned depth-first (a field, then its
//!   nested fields, then its next sibling) from 1, re-mapped onto a table's ids by name path
//!   elsewhere.
//!
//! Values convert strictly: a value of the wrong JSON type, an integer column given 1.5 (2.0
//! is fine), an integer beyond the long range, or a date that is not RFC 3339 is a Decode
//! error. Dates and times are parsed by [`time`].
//!
//! [`JsonConverter`] writes into a table's columns, which may come from a newer schema: fields
//! are matched by name at every level, target columns the schema lacks are null, properties the
//! target lacks are ignored. Matching and type checks happen once, in [`JsonConverter::new`].
//!
//! All-or-nothing: [`JsonConverter::append`] either appends the whole row or, on error, leaves
//! the buffered rows exactly as they were, so the caller can send the record to the
//! dead-letter table and go on.

mod schema;
#[cfg(test)]
mod tests;
mod time;

use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::{DataType, Fields, SchemaRef, TimeUnit};
use iceberg::spec::{
    ListType, MapType, NestedField, NestedFieldRef, PrimitiveType, Schema, StructType, Type,
};
use serde_json::{Map, Number, Value};

use self::schema::{root_fields, JType};
use crate::error::{Error, Result};
use crate::protobuf::columns::{Column, RowBuffer};

/// The Iceberg schema of a JSON Schema document (`schema` is the whole root document): its
/// root's properties become the table's columns. Provisional field ids assigned depth-first
/// from 1 (another module re-maps them onto a table's stable ids by name path).
pub fn json_to_iceberg(schema: &Value) -> Result<Schema> {
    let fields = root_fields(schema)?;
    let mut ids = 0;
    Schema::builder()
        .with_fields(struct_fields(&fields, &mut ids))
        .build()
        .map_err(|e| Error::Schema(format!("JSON Schema: {e}")))
}

fn next_id(ids: &mut i32) -> i32 {
    *ids += 1;
    *ids
}

fn struct_fields(fields: &[(String, JType)], ids: &mut i32) -> Vec<NestedFieldRef> {
    fields
        .iter()
        .map(|(name, jtype)| {
            let id = next_id(ids);
            Arc::new(NestedField::optional(id, name, iceberg_type(jtype, ids)))
        })
        .collect()
}

fn iceberg_type(jtype: &JType, ids: &mut i32) -> Type {
    let primitive = match jtype {
        JType::String | JType::JsonText => PrimitiveType::String,
        JType::Long => PrimitiveType::Long,
        JType::Double => PrimitiveType::Double,
        JType::Boolean => PrimitiveType::Boolean,
        JType::Date => PrimitiveType::Date,
        JType::Timestamptz => PrimitiveType::Timestamptz,
        JType::Time => PrimitiveType::Time,
        JType::Struct(fields) => return Type::Struct(StructType::new(struct_fields(fields, ids))),
        JType::List(element) => {
            let id = next_id(ids);
            let element = iceberg_type(element, ids);
            return Type::List(ListType::new(Arc::new(NestedField::list_element(
                id, element, false,
            ))));
        }
        JType::Map(value) => {
            let key_id = next_id(ids);
            let value_id = next_id(ids);
            let value = iceberg_type(value, ids);
            return Type::Map(MapType::new(
                Arc::new(NestedField::map_key_element(
                    key_id,
                    Type::Primitive(PrimitiveType::String),
                )),
                Arc::new(NestedField::map_value_element(value_id, value, false)),
            ));
        }
    };
    Type::Primitive(primitive)
}

/// Converts JSON values of one schema into Arrow arrays of a table's value columns (see the
/// module docs for the mapping, the matching by name and the all-or-nothing guarantee).
#[derive(Debug)]
pub struct JsonConverter {
    /// One per target column, in the target's order.
    plans: Vec<FieldPlan>,
    buffer: RowBuffer,
}

/// How one target column (or nested field) is filled from an object.
#[derive(Debug)]
struct FieldPlan {
    /// The property's name.
    key: Box<str>,
    /// The column's name path, for errors.
    path: Box<str>,
    plan: Plan,
}

/// How one value converts.
#[derive(Debug)]
enum Plan {
    /// The schema has no such property: always null.
    Missing,
    String,
    Long,
    Double,
    Boolean,
    Date,
    Timestamptz,
    Time,
    JsonText,
    Struct(Vec<FieldPlan>),
    List(Box<Plan>),
    Map(Box<Plan>),
}

impl JsonConverter {
    /// `schema`: the whole root JSON Schema document. `target`: Arrow schema of the table's
    /// value columns (`schema_to_arrow_schema` of the table schema, value columns only),
    /// possibly of a newer schema. Fields are matched by name at every level; a target field
    /// the schema lacks is null (Error::Schema here if it is not nullable); a property the
    /// target lacks is ignored. Any type difference is an Error::Schema.
    pub fn new(schema: &Value, target: SchemaRef) -> Result<Self> {
        let fields = root_fields(schema)?;
        let plans = plan_fields(&fields, target.fields(), "")?;
        let columns = target
            .fields()
            .iter()
            .map(Column::new)
            .collect::<Result<Vec<_>>>()?;
        Ok(JsonConverter {
            plans,
            buffer: RowBuffer::new(columns),
        })
    }

    /// Appends one JSON object as a row. On error nothing of the row remains (all-or-nothing),
    /// so the caller can route the record to a dead-letter table and go on.
    pub fn append(&mut self, value: &Value) -> Result<()> {
        let Value::Object(object) = value else {
            return Err(Error::Decode(format!(
                "a record must be a JSON object, not {}",
                kind_of(value)
            )));
        };
        let plans = &self.plans;
        self.buffer
            .append(|columns| write_fields(plans, columns, object))
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
    fields: &[(String, JType)],
    target: &Fields,
    prefix: &str,
) -> Result<Vec<FieldPlan>> {
    target
        .iter()
        .map(|column| {
            let path: Box<str> = format!("{prefix}{}", column.name()).into();
            let plan = match fields.iter().find(|(name, _)| name == column.name()) {
                Some((_, jtype)) => plan_type(jtype, column.data_type(), &path)?,
                None if column.is_nullable() => Plan::Missing,
                None => {
                    return Err(Error::Schema(format!(
                        "column `{path}` is required but the JSON Schema has no such property"
                    )))
                }
            };
            Ok(FieldPlan {
                key: column.name().as_str().into(),
                path,
                plan,
            })
        })
        .collect()
}

fn plan_type(jtype: &JType, target: &DataType, path: &str) -> Result<Plan> {
    let string = matches!(target, DataType::Utf8 | DataType::LargeUtf8);
    let plan = match (jtype, target) {
        (JType::String, _) if string => Plan::String,
        (JType::JsonText, _) if string => Plan::JsonText,
        (JType::Long, DataType::Int64) => Plan::Long,
        (JType::Double, DataType::Float64) => Plan::Double,
        (JType::Boolean, DataType::Boolean) => Plan::Boolean,
        (JType::Date, DataType::Date32) => Plan::Date,
        (JType::Timestamptz, DataType::Timestamp(TimeUnit::Microsecond, Some(_))) => {
            Plan::Timestamptz
        }
        (JType::Time, DataType::Time64(TimeUnit::Microsecond)) => Plan::Time,
        (JType::Struct(fields), DataType::Struct(columns)) => {
            Plan::Struct(plan_fields(fields, columns, &format!("{path}."))?)
        }
        (JType::List(element), DataType::List(column)) => {
            Plan::List(Box::new(plan_type(element, column.data_type(), path)?))
        }
        (JType::Map(value), DataType::Map(entries, _)) => match entries.data_type() {
            DataType::Struct(kv)
                if kv.len() == 2 && matches!(kv[0].data_type(), DataType::Utf8) =>
            {
                Plan::Map(Box::new(plan_type(value, kv[1].data_type(), path)?))
            }
            _ => return Err(mismatch(jtype, target, path)),
        },
        _ => return Err(mismatch(jtype, target, path)),
    };
    Ok(plan)
}

fn mismatch(jtype: &JType, target: &DataType, path: &str) -> Error {
    Error::Schema(format!(
        "column `{path}` of type {target} cannot take a JSON {}",
        jtype.name()
    ))
}

fn write_fields(
    plans: &[FieldPlan],
    columns: &mut [Column],
    object: &Map<String, Value>,
) -> Result<()> {
    for (field, column) in plans.iter().zip(columns) {
        let value = match field.plan {
            Plan::Missing => None,
            _ => object.get(&*field.key),
        };
        write_value(&field.plan, column, value, &field.path)?;
    }
    Ok(())
}

/// Writes one value (None: the property is absent). Errors name `path`, except those of nested
/// objects, which name their own.
fn write_value(plan: &Plan, column: &mut Column, value: Option<&Value>, path: &str) -> Result<()> {
    let value = match value {
        None | Some(Value::Null) => return column.push_null().map_err(|e| at(path, e)),
        Some(value) => value,
    };
    match (plan, value) {
        (Plan::Struct(fields), Value::Object(object)) => {
            let children = column.push_struct()?;
            write_fields(fields, children, object)
        }
        (Plan::List(element), Value::Array(items)) => {
            let column_of_elements = column.list_element()?;
            for item in items {
                write_value(element, column_of_elements, Some(item), path)?;
            }
            column.close_entries()
        }
        (Plan::Map(plan), Value::Object(entries)) => {
            let (keys, values) = column.map_entries()?;
            for (key, item) in entries {
                keys.push_str(key)?;
                write_value(plan, values, Some(item), path)?;
            }
            column.close_entries()
        }
        (plan, value) => write_scalar(plan, column, value).map_err(|e| at(path, e)),
    }
}

fn write_scalar(plan: &Plan, column: &mut Column, value: &Value) -> Result<()> {
    match (plan, value) {
        (Plan::Missing, _) => column.push_null(),
        (Plan::JsonText, value) => column.push_text_with(|out| {
            serde_json::to_writer(&mut *out, value)
                .map_err(|e| Error::Decode(format!("cannot write JSON text: {e}")))
        }),
        (Plan::String, Value::String(text)) => column.push_str(text),
        (Plan::Long, Value::Number(number)) => column.push_i64(to_long(number)?),
        (Plan::Double, Value::Number(number)) => {
            let double = number
                .as_f64()
                .ok_or_else(|| Error::Decode(format!("{number} is not a double")))?;
            column.push_f64(double)
        }
        (Plan::Boolean, Value::Bool(flag)) => column.push_bool(*flag),
        (Plan::Date, Value::String(text)) => column.push_i32(time::parse_date(text)?),
        (Plan::Timestamptz, Value::String(text)) => column.push_i64(time::parse_date_time(text)?),
        (Plan::Time, Value::String(text)) => column.push_i64(time::parse_time(text)?),
        (plan, value) => Err(Error::Decode(format!(
            "expected {}, got {}",
            expected(plan),
            kind_of(value)
        ))),
    }
}

/// An integer JSON number as a long: 2.0 is 2, 1.5 and out-of-range numbers do not convert.
fn to_long(number: &Number) -> Result<i64> {
    if let Some(long) = number.as_i64() {
        return Ok(long);
    }
    // 2^63: the first double above the long range.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    match number.as_f64() {
        Some(double) if !number.is_u64() && double.fract() == 0.0 && double.abs() < LIMIT => {
            Ok(double as i64)
        }
        _ => Err(Error::Decode(format!(
            "{number} is not an integer within the range of a long"
        ))),
    }
}

fn expected(plan: &Plan) -> &'static str {
    match plan {
        Plan::Missing | Plan::JsonText => "any value",
        Plan::String => "a string",
        Plan::Long => "an integer",
        Plan::Double => "a number",
        Plan::Boolean => "a boolean",
        Plan::Date => "a date string",
        Plan::Timestamptz => "a date-time string",
        Plan::Time => "a time string",
        Plan::Struct(_) | Plan::Map(_) => "an object",
        Plan::List(_) => "an array",
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Puts a field's name path in front of a Decode error.
fn at(path: &str, error: Error) -> Error {
    match error {
        Error::Decode(message) => Error::Decode(format!("field `{path}`: {message}")),
        other => other,
    }
}
