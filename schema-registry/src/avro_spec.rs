//! Avro schema validity by the Avro specification, where apache-avro 0.21 parses differently
//! from the reference (Apache Avro's Java parser, which Confluent's registry uses):
//!
//! - **Field types must be types.** apache-avro reads a field object itself as a type, so
//!   `{"name": "f", "type": "array"}` (no `items`) or `{"name": "f", "type": "enum", "symbols":
//!   [...]}` parse; in Java, and by the specification, `"array"` there is an undefined name. Both
//!   are refused here ([`check_field_types`]).
//! - **Defaults are checked per type, logical types by their underlying type**, as Java's
//!   `Schema.isValidDefault` checks them. apache-avro resolves a default through its value
//!   model, which refuses a string default for a `bytes` decimal (`"default": "\u0000"`, what
//!   Debezium writes for every PostgreSQL `NUMERIC … DEFAULT` column). So defaults are taken
//!   out of the text before apache-avro parses it ([`hide_defaults`]), put back on the parsed
//!   fields ([`restore_defaults`]), and checked here ([`check_defaults`]): null for `null`; a
//!   boolean; an integer in range for `int` and `long` (dates, times and timestamps
//!   included); a number for `float` and `double`; a string for `string`, `bytes`, `fixed`,
//!   enums and the logical types on them; an array or object whose items or values are valid;
//!   for a record, an object with a valid value for every field that has no default of its
//!   own; for a union, a valid value of any branch (Java's rule; the specification says the
//!   first).

use std::collections::HashMap;

use apache_avro::schema::{Schema, UnionSchema};
use serde_json::Value;

use crate::error::{Error, Result};

/// The field attribute that carries a default through apache-avro's parser unchecked.
const HIDDEN_DEFAULT: &str = "inlet.hidden.default";

/// Keywords that name a complex type only as the `type` of a type object, never by themselves.
const COMPLEX: [&str; 6] = ["record", "error", "enum", "array", "map", "fixed"];

/// The text apache-avro should parse: `text` with each field's default moved into
/// [`HIDDEN_DEFAULT`], after [`check_field_types`]. Text that is not JSON is returned as it
/// is, for apache-avro's parser to describe.
pub(crate) fn hide_defaults(text: &str) -> Result<String> {
    let Ok(mut json) = serde_json::from_str::<Value>(text) else {
        return Ok(text.to_string());
    };
    walk_types(&mut json)?;
    Ok(json.to_string())
}

/// Walks a type in JSON form: checks record fields and hides their defaults.
fn walk_types(t: &mut Value) -> Result<()> {
    match t {
        Value::Array(variants) => variants.iter_mut().try_for_each(walk_types),
        Value::Object(o) => {
            let kind = o.get("type").and_then(Value::as_str).map(str::to_string);
            match kind.as_deref() {
                Some("record" | "error") => {
                    if let Some(Value::Array(fields)) = o.get_mut("fields") {
                        for f in fields {
                            check_field_types(f)?;
                            let Value::Object(field) = f else { continue };
                            if let Some(d) = field.remove("default") {
                                field.insert(HIDDEN_DEFAULT.into(), d);
                            }
                            if let Some(ty) = field.get_mut("type") {
                                walk_types(ty)?;
                            }
                        }
                    }
                    Ok(())
                }
                Some("array") => match o.get_mut("items") {
                    Some(items) => walk_types(items),
                    None => Err(Error::InvalidSchema("an array type needs \"items\"".into())),
                },
                Some("map") => match o.get_mut("values") {
                    Some(values) => walk_types(values),
                    None => Err(Error::InvalidSchema("a map type needs \"values\"".into())),
                },
                Some(_) => Ok(()),
                // {"type": {...}} or {"type": [...]}: the type is inside.
                None => match o.get_mut("type") {
                    Some(inner) => walk_types(inner),
                    None => Ok(()),
                },
            }
        }
        _ => Ok(()),
    }
}

/// A field's `type` must be a type: a primitive or defined name, a type object or a union, not
/// a bare complex keyword (`"array"`, `"record"`…) that apache-avro would complete from the
/// field's own keys.
fn check_field_types(field: &Value) -> Result<()> {
    let name = field.get("name").and_then(Value::as_str).unwrap_or("?");
    match field.get("type") {
        Some(Value::String(t)) if COMPLEX.contains(&t.as_str()) => {
            Err(Error::InvalidSchema(format!(
                "the type of field {name:?} is {t:?}, which is not a defined name; write {{\"type\": \"{t}\", …}} as the field's type"
            )))
        }
        Some(_) => Ok(()),
        None => Err(Error::InvalidSchema(format!("field {name:?} has no type"))),
    }
}

/// Puts hidden defaults back on the parsed schema's fields (see [`hide_defaults`]).
pub(crate) fn restore_defaults(schema: &mut Schema) -> Result<()> {
    match schema {
        Schema::Record(r) => {
            for f in &mut r.fields {
                if let Some(d) = f.custom_attributes.remove(HIDDEN_DEFAULT) {
                    f.default = Some(d);
                }
                restore_defaults(&mut f.schema)?;
            }
        }
        Schema::Array(a) => restore_defaults(&mut a.items)?,
        Schema::Map(m) => restore_defaults(&mut m.types)?,
        Schema::Union(u) => {
            let mut variants = u.variants().to_vec();
            for v in &mut variants {
                restore_defaults(v)?;
            }
            *u = UnionSchema::new(variants)
                .map_err(|e| Error::InvalidSchema(format!("union: {e}")))?;
        }
        _ => {}
    }
    Ok(())
}

/// Checks every field default of `schema` (named types resolved through `names`).
pub(crate) fn check_defaults(schema: &Schema, names: &HashMap<String, &Schema>) -> Result<()> {
    let mut seen = Vec::new();
    check_schema(schema, names, &mut seen)
}

fn check_schema<'a>(
    schema: &'a Schema,
    names: &HashMap<String, &'a Schema>,
    seen: &mut Vec<String>,
) -> Result<()> {
    match schema {
        Schema::Record(r) => {
            let full = r.name.fullname(None);
            if seen.contains(&full) {
                return Ok(());
            }
            seen.push(full.clone());
            for f in &r.fields {
                if let Some(d) = &f.default {
                    if let Err(why) = valid_default(&f.schema, d, names, 0) {
                        return Err(Error::InvalidSchema(format!(
                            "Invalid default for field {}: {} not a {} ({why})",
                            f.name,
                            d,
                            describe(&f.schema)
                        )));
                    }
                }
                check_schema(&f.schema, names, seen)?;
            }
            Ok(())
        }
        Schema::Array(a) => check_schema(&a.items, names, seen),
        Schema::Map(m) => check_schema(&m.types, names, seen),
        Schema::Union(u) => u
            .variants()
            .iter()
            .try_for_each(|v| check_schema(v, names, seen)),
        _ => Ok(()),
    }
}

fn describe(schema: &Schema) -> String {
    serde_json::to_string(schema).unwrap_or_else(|_| "schema".into())
}

/// Deeper than this, a default is refused rather than walked (a recursive record's default can
/// nest only as deep as its JSON, which the registry's size limit bounds; this bounds the stack).
const MAX_DEPTH: usize = 64;

/// Whether `d` is a valid default for `schema`, by the specification; the error says why not.
fn valid_default(
    schema: &Schema,
    d: &Value,
    names: &HashMap<String, &Schema>,
    depth: usize,
) -> std::result::Result<(), String> {
    if depth > MAX_DEPTH {
        return Err("nested too deeply".into());
    }
    let need = |ok: bool, what: &str| {
        if ok {
            Ok(())
        } else {
            Err(format!("expected {what}"))
        }
    };
    match schema {
        Schema::Array(a) => match d {
            Value::Array(items) => items
                .iter()
                .try_for_each(|i| valid_default(&a.items, i, names, depth + 1)),
            _ => Err("expected an array".into()),
        },
        Schema::Map(m) => match d {
            Value::Object(values) => values
                .values()
                .try_for_each(|v| valid_default(&m.types, v, names, depth + 1)),
            _ => Err("expected an object".into()),
        },
        // Java's parser takes a default of any branch (the specification says the first).
        Schema::Union(u) => {
            if u.variants()
                .iter()
                .any(|v| valid_default(v, d, names, depth + 1).is_ok())
            {
                Ok(())
            } else {
                Err("expected a value of one of the union's branches".into())
            }
        }
        Schema::Record(r) => {
            let Value::Object(o) = d else {
                return Err("expected an object".into());
            };
            for f in &r.fields {
                match o.get(&f.name) {
                    Some(v) => valid_default(&f.schema, v, names, depth + 1)
                        .map_err(|e| format!("field {}: {e}", f.name))?,
                    None if f.default.is_some() => {}
                    None => return Err(format!("field {} has no value and no default", f.name)),
                }
            }
            Ok(())
        }
        Schema::Ref { name } => match names.get(&name.fullname(None)) {
            Some(target) if !matches!(target, Schema::Ref { .. }) => {
                valid_default(target, d, names, depth + 1)
            }
            _ => Err(format!("unknown type {}", name.fullname(None))),
        },
        // The rest by the kind it is read as (`kind`: logical types as their underlying
        // type). As Java's parser: any string for the kinds whose JSON form is a string (the
        // specification's code points 0-255 and fixed sizes are not checked by it).
        _ => match kind(schema) {
            Some(Kind::Null) => need(d.is_null(), "null"),
            Some(Kind::Boolean) => need(d.is_boolean(), "a boolean"),
            Some(Kind::Int) => need(
                d.as_i64().is_some_and(|n| i32::try_from(n).is_ok()),
                "a 32-bit integer",
            ),
            Some(Kind::Long) => need(d.is_i64(), "a 64-bit integer"),
            Some(Kind::Float | Kind::Double) => need(d.is_number(), "a number"),
            Some(Kind::Bytes | Kind::String | Kind::Fixed | Kind::Enum) => {
                need(d.is_string(), "a string")
            }
            // Arrays, maps, unions, records and references are matched above.
            _ => Ok(()),
        },
    }
}

/// The kind a schema is resolved as: logical types count as their underlying type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    Array,
    Map,
    Union,
    Record,
    Enum,
    Fixed,
}

impl Kind {
    /// The Avro spec's name of the kind (`int`, `record`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Null => "null",
            Kind::Boolean => "boolean",
            Kind::Int => "int",
            Kind::Long => "long",
            Kind::Float => "float",
            Kind::Double => "double",
            Kind::Bytes => "bytes",
            Kind::String => "string",
            Kind::Array => "array",
            Kind::Map => "map",
            Kind::Union => "union",
            Kind::Record => "record",
            Kind::Enum => "enum",
            Kind::Fixed => "fixed",
        }
    }
}

/// The kind a schema is read as: logical types count as their underlying type; `None` for a
/// reference (resolve it first).
pub fn kind(s: &Schema) -> Option<Kind> {
    Some(match s {
        Schema::Null => Kind::Null,
        Schema::Boolean => Kind::Boolean,
        Schema::Int | Schema::Date | Schema::TimeMillis => Kind::Int,
        Schema::Long
        | Schema::TimeMicros
        | Schema::TimestampMillis
        | Schema::TimestampMicros
        | Schema::TimestampNanos
        | Schema::LocalTimestampMillis
        | Schema::LocalTimestampMicros
        | Schema::LocalTimestampNanos => Kind::Long,
        Schema::Float => Kind::Float,
        Schema::Double => Kind::Double,
        Schema::Bytes | Schema::BigDecimal => Kind::Bytes,
        Schema::String | Schema::Uuid => Kind::String,
        Schema::Array(_) => Kind::Array,
        Schema::Map(_) => Kind::Map,
        Schema::Union(_) => Kind::Union,
        Schema::Record(_) => Kind::Record,
        Schema::Enum(_) => Kind::Enum,
        Schema::Fixed(_) | Schema::Duration => Kind::Fixed,
        Schema::Decimal(d) => return kind(&d.inner),
        Schema::Ref { .. } => return None,
    })
}

#[cfg(test)]
mod tests {
    use crate::avro::parse;

    /// A Debezium 3 PostgreSQL envelope (`io.debezium.connector.postgresql`, the AvroConverter's
    /// form) for a table with `NUMERIC(12,2) DEFAULT 0`, a `TIMESTAMPTZ` and an enum-like text.
    const DEBEZIUM: &str = r#"{
      "type": "record", "name": "Envelope", "namespace": "pg.public.orders",
      "fields": [
        {"name": "before", "type": ["null", {
          "type": "record", "name": "Value",
          "fields": [
            {"name": "id", "type": {"type": "int", "connect.default": 0}, "default": 0},
            {"name": "total", "type": {"type": "bytes", "scale": 2, "precision": 12,
              "connect.version": 1, "connect.parameters": {"scale": "2", "connect.decimal.precision": "12"},
              "connect.default": "\u0000", "connect.name": "org.apache.kafka.connect.data.Decimal",
              "logicalType": "decimal"}, "default": "\u0000"},
            {"name": "created", "type": ["null", {"type": "string", "connect.version": 1,
              "connect.name": "io.debezium.time.ZonedTimestamp"}], "default": null},
            {"name": "day", "type": ["null", {"type": "int", "connect.version": 1,
              "connect.name": "io.debezium.time.Date", "logicalType": "date"}], "default": null}
          ],
          "connect.name": "pg.public.orders.Value"}], "default": null},
        {"name": "after", "type": ["null", "Value"], "default": null},
        {"name": "source", "type": {
          "type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
          "fields": [
            {"name": "version", "type": "string"},
            {"name": "connector", "type": "string"},
            {"name": "name", "type": "string"},
            {"name": "ts_ms", "type": "long"},
            {"name": "snapshot", "type": [{"type": "string", "connect.version": 1,
              "connect.parameters": {"allowed": "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},
              "connect.default": "false", "connect.name": "io.debezium.data.Enum"}, "null"],
              "default": "false"},
            {"name": "db", "type": "string"},
            {"name": "sequence", "type": ["null", "string"], "default": null},
            {"name": "schema", "type": "string"},
            {"name": "table", "type": "string"},
            {"name": "txId", "type": ["null", "long"], "default": null},
            {"name": "lsn", "type": ["null", "long"], "default": null}
          ],
          "connect.name": "io.debezium.connector.postgresql.Source"}},
        {"name": "transaction", "type": ["null", {"type": "record", "name": "block",
          "namespace": "event", "fields": [
            {"name": "id", "type": "string"},
            {"name": "total_order", "type": "long"},
            {"name": "data_collection_order", "type": "long"}],
          "connect.version": 1, "connect.name": "event.block"}], "default": null},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": null}
      ],
      "connect.version": 2, "connect.name": "pg.public.orders.Envelope"
    }"#;

    /// Avro's interoperability test schema (`share/test/schemas/interop.avsc`).
    const INTEROP: &str = r#"{"type": "record", "name": "Interop", "namespace": "org.apache.avro",
      "fields": [
        {"name": "intField", "type": "int"},
        {"name": "longField", "type": "long"},
        {"name": "stringField", "type": "string"},
        {"name": "boolField", "type": "boolean"},
        {"name": "floatField", "type": "float"},
        {"name": "doubleField", "type": "double"},
        {"name": "bytesField", "type": "bytes"},
        {"name": "nullField", "type": "null"},
        {"name": "arrayField", "type": {"type": "array", "items": "double"}},
        {"name": "mapField", "type": {"type": "map", "values":
          {"type": "record", "name": "Foo", "fields": [{"name": "label", "type": "string"}]}}},
        {"name": "unionField", "type": ["boolean", "double", {"type": "array", "items": "bytes"}]},
        {"name": "enumField", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}},
        {"name": "fixedField", "type": {"type": "fixed", "name": "MD5", "size": 16}},
        {"name": "recordField", "type": {"type": "record", "name": "Node", "fields": [
          {"name": "label", "type": "string"},
          {"name": "children", "type": {"type": "array", "items": "Node"}}]}}
      ]}"#;

    fn record(fields: &str) -> String {
        format!(r#"{{"type": "record", "name": "R", "namespace": "t", "fields": [{fields}]}}"#)
    }

    #[test]
    fn valid_schemas_parse() {
        let logical_defaults = record(
            r#"{"name": "d", "type": {"type": "int", "logicalType": "date"}, "default": 0},
               {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}, "default": 1},
               {"name": "tu", "type": {"type": "long", "logicalType": "time-micros"}, "default": 2},
               {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}, "default": 1700000000000},
               {"name": "tsu", "type": {"type": "long", "logicalType": "timestamp-micros"}, "default": 0},
               {"name": "tsn", "type": {"type": "long", "logicalType": "timestamp-nanos"}, "default": 0},
               {"name": "lts", "type": {"type": "long", "logicalType": "local-timestamp-millis"}, "default": 0},
               {"name": "ltu", "type": {"type": "long", "logicalType": "local-timestamp-micros"}, "default": 0},
               {"name": "u", "type": {"type": "string", "logicalType": "uuid"}, "default": "00000000-0000-0000-0000-000000000000"},
               {"name": "db", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}, "default": "\u0000"},
               {"name": "df", "type": {"type": "fixed", "name": "Dec", "size": 4, "logicalType": "decimal", "precision": 8, "scale": 2}, "default": "\u0000\u0000\u0000\u0000"},
               {"name": "dur", "type": {"type": "fixed", "name": "Dur", "size": 12, "logicalType": "duration"}, "default": "\u0000\u0000\u0000\u0000\u0000\u0000\u0000\u0000\u0000\u0000\u0000\u0000"}"#,
        );
        let complex_defaults = record(
            r#"{"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"], "default": "A"}, "default": "B"},
               {"name": "a", "type": {"type": "array", "items": "int"}, "default": [1, 2]},
               {"name": "m", "type": {"type": "map", "values": "string"}, "default": {"k": "v"}},
               {"name": "r", "type": {"type": "record", "name": "In", "fields": [
                  {"name": "x", "type": "int"}, {"name": "y", "type": "string", "default": "z"}]},
                "default": {"x": 1}},
               {"name": "again", "type": "In", "default": {"x": 2, "y": "w"}},
               {"name": "n", "type": ["null", "string"], "default": null},
               {"name": "later", "type": ["null", "string"], "default": "a later branch, as Java allows"},
               {"name": "f", "type": "float", "default": 1},
               {"name": "l", "type": "long", "default": 9007199254740993},
               {"name": "b", "type": "bytes", "default": "\u00ff"},
               {"name": "nul", "type": "null", "default": null}"#,
        );
        for (name, text) in [
            ("debezium", DEBEZIUM.to_string()),
            ("interop", INTEROP.to_string()),
            ("logical types with defaults", logical_defaults),
            ("complex defaults", complex_defaults),
            ("a primitive", r#""string""#.to_string()),
            ("a wrapped primitive", r#"{"type": "long"}"#.to_string()),
        ] {
            if let Err(e) = parse(&text) {
                panic!("{name}: {e}");
            }
        }
    }

    #[test]
    fn defaults_survive_parsing_into_the_normalized_text() {
        let s = parse(DEBEZIUM).expect("debezium");
        assert!(
            s.normalized.contains(r#""default":"\u0000""#),
            "{}",
            s.normalized
        );
        assert!(!s.normalized.contains("inlet.hidden"), "{}", s.normalized);
        let apache_avro::Schema::Record(r) = &s.schema else {
            panic!("a record")
        };
        assert_eq!(r.fields[0].default, Some(serde_json::Value::Null));
    }

    #[test]
    fn invalid_schemas_are_refused() {
        let cases = [
            (
                "a bare array field type",
                record(r#"{"name": "f", "type": "array"}"#),
            ),
            (
                "a field object as an array",
                record(r#"{"name": "f", "type": "array", "items": "string"}"#),
            ),
            (
                "a bare map field type",
                record(r#"{"name": "f", "type": "map", "values": "int"}"#),
            ),
            (
                "a field object as an enum",
                record(r#"{"name": "f", "type": "enum", "symbols": ["A"]}"#),
            ),
            (
                "an array without items",
                record(r#"{"name": "f", "type": {"type": "array"}}"#),
            ),
            (
                "a map without values",
                record(r#"{"name": "f", "type": {"type": "map"}}"#),
            ),
            (
                "a string default for an int",
                record(r#"{"name": "f", "type": "int", "default": "x"}"#),
            ),
            (
                "an int default out of range",
                record(r#"{"name": "f", "type": "int", "default": 4294967296}"#),
            ),
            (
                "a fraction for a long",
                record(r#"{"name": "f", "type": "long", "default": 1.5}"#),
            ),
            (
                "a number for a boolean",
                record(r#"{"name": "f", "type": "boolean", "default": 1}"#),
            ),
            (
                "a number for a string",
                record(r#"{"name": "f", "type": "string", "default": 1}"#),
            ),
            (
                "a number for bytes",
                record(r#"{"name": "f", "type": "bytes", "default": 0}"#),
            ),
            (
                "zero for null",
                record(r#"{"name": "f", "type": "null", "default": 0}"#),
            ),
            (
                "a number for a bytes decimal",
                record(
                    r#"{"name": "f", "type": {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}, "default": 0}"#,
                ),
            ),
            (
                "a string for a timestamp",
                record(
                    r#"{"name": "f", "type": {"type": "long", "logicalType": "timestamp-millis"}, "default": "2024-01-01"}"#,
                ),
            ),
            (
                "a record default without a required field",
                record(
                    r#"{"name": "f", "type": {"type": "record", "name": "In", "fields": [{"name": "x", "type": "int"}]}, "default": {}}"#,
                ),
            ),
            (
                "an array default of the wrong items",
                record(
                    r#"{"name": "f", "type": {"type": "array", "items": "int"}, "default": ["a"]}"#,
                ),
            ),
            (
                "a map default that is an array",
                record(
                    r#"{"name": "f", "type": {"type": "map", "values": "int"}, "default": [1]}"#,
                ),
            ),
            (
                "a union default of no branch",
                record(r#"{"name": "f", "type": ["null", "int"], "default": "x"}"#),
            ),
            (
                "an enum default that is a number",
                record(
                    r#"{"name": "f", "type": {"type": "enum", "name": "E", "symbols": ["A"]}, "default": 0}"#,
                ),
            ),
            (
                "an undefined name",
                record(r#"{"name": "f", "type": "Missing"}"#),
            ),
        ];
        for (name, text) in cases {
            match parse(&text) {
                Ok(_) => panic!("{name} was accepted: {text}"),
                Err(crate::Error::InvalidSchema(_)) => {}
                Err(e) => panic!("{name}: not InvalidSchema: {e}"),
            }
        }
    }
}
