//! Avro schema → Iceberg schema.
//!
//! The rules are fixed conventions that the decoder ([`super::AvroDecoder`]) and schema
//! evolution depend on; change them only together:
//!
//! - The top-level schema is a record; its fields are the table's columns, named as in Avro.
//! - `boolean`, `int`, `long`, `float`, `double`, `string`, `bytes` → `boolean`, `int`, `long`,
//!   `float`, `double`, `string`, `binary`; record → struct; enum → string; array → list; map →
//!   `map<string, V>`; fixed(n) → fixed\[n\]. `null` alone has no mapping.
//! - A field, list element or map value is required unless its type is a union containing
//!   `null`. `["null", T]` (either order) is an optional `T`. A union with two or more non-null
//!   branches is an optional struct with one optional field per non-null branch, named by
//!   [`super::names::branch_names`]; a row sets the branch it holds and leaves the others null.
//! - Logical types: date → date; time-millis, time-micros → time (micros); timestamp-millis,
//!   timestamp-micros → timestamptz; local-timestamp-millis, local-timestamp-micros → timestamp;
//!   timestamp-nanos → timestamptz and local-timestamp-nanos → timestamp, both in microseconds:
//!   the decoder truncates nanoseconds to the microsecond at or before the instant (floor, as
//!   Iceberg's `DateTimeUtil.nanosToMicros`); decimal(p, s) on bytes or fixed → decimal(p, s),
//!   refused above 38 digits; uuid → uuid; duration → fixed\[12\]; big-decimal → string.
//! - Kafka Connect's and Debezium's semantic types arrive as logical types through the
//!   registry's semantic view (`inlet_schema_registry::avro::AvroSchema::table_schema`), but
//!   for two kinds no logical type can carry: a field the view marks as
//!   `io.debezium.time.ZonedTimestamp` (an ISO-8601 string with an offset) → timestamptz, and
//!   Debezium's `VariableScaleDecimal` record (`scale`, `value`: a `NUMERIC` without a declared
//!   scale, whose scale varies per value, which no Iceberg decimal holds) → string, the
//!   decimal's text as for big-decimal.
//! - Refused: recursive types, records with no fields and fixed(0) (Parquet cannot store an
//!   empty group or a zero-length fixed), nesting deeper than [`super::names::MAX_DEPTH`].
//! - Field ids are provisional, assigned depth-first (pre-order) from 1: a field, then the
//!   types nested in it; a list's element and a map's key and value take the ids after their
//!   field's. Another module re-maps them onto a table's stable ids by name path.

use std::sync::Arc;

use apache_avro::schema::{Namespace, RecordSchema, Schema, UnionSchema};
use iceberg::spec::{
    ListType, MapType, NestedField, NestedFieldRef, PrimitiveType, StructType, Type,
};

use super::names::{branch_names, join, Expansion, Names};
use crate::error::Error;

/// Maps the Avro `schema` (whose `Ref`s may name types defined in `refs`) to an Iceberg schema
/// with provisional field ids. Fails with [`Error::Schema`] if the top level is not a record or
/// any part of the schema has no mapping.
pub fn avro_to_iceberg(schema: &Schema, refs: &[Schema]) -> Result<iceberg::spec::Schema, Error> {
    let names = Names::new(schema, refs);
    let (top, namespace) = names.resolve(schema, &None)?;
    let Schema::Record(record) = top else {
        return Err(Error::Schema(format!(
            "a table topic's value schema must be an Avro record (its fields become the table's columns), not {}",
            kind(top)
        )));
    };
    let mut mapper = Mapper {
        names: &names,
        expansion: Expansion::new(),
        next_id: 1,
    };
    let fields = mapper.record(record, &namespace, "")?;
    Ok(iceberg::spec::Schema::builder()
        .with_fields(fields)
        .build()?)
}

/// Whether the registry's semantic view marks `field` as Debezium's `ZonedTimestamp`.
pub(crate) fn is_zoned_timestamp(field: &apache_avro::schema::RecordField) -> bool {
    field
        .custom_attributes
        .get(inlet_schema_registry::avro::SEMANTIC_FIELD_PROPERTY)
        .and_then(|v| v.as_str())
        == Some("io.debezium.time.ZonedTimestamp")
}

/// Debezium's name for a decimal whose scale varies per value.
const VARIABLE_SCALE_DECIMAL: &str = "io.debezium.data.VariableScaleDecimal";

/// Whether `record` is Debezium's `VariableScaleDecimal` (by its Connect name, or its Avro
/// name when the converter dropped that), in its shape: an `int` scale, then `bytes`, the
/// unscaled value in big-endian two's complement.
pub(crate) fn is_variable_scale_decimal(record: &RecordSchema) -> bool {
    let named = record
        .attributes
        .get("connect.name")
        .and_then(|v| v.as_str())
        == Some(VARIABLE_SCALE_DECIMAL)
        || record.name.fullname(None) == VARIABLE_SCALE_DECIMAL;
    named
        && matches!(
            record.fields.as_slice(),
            [scale, value] if scale.name == "scale"
                && matches!(scale.schema, Schema::Int)
                && value.name == "value"
                && matches!(value.schema, Schema::Bytes)
        )
}

struct Mapper<'n, 'a> {
    names: &'n Names<'a>,
    expansion: Expansion,
    next_id: i32,
}

impl<'a> Mapper<'_, 'a> {
    fn id(&mut self) -> i32 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// The fields of `record`, whose path is `path`.
    fn record(
        &mut self,
        record: &'a RecordSchema,
        namespace: &Namespace,
        path: &str,
    ) -> Result<Vec<NestedFieldRef>, Error> {
        let shown = if path.is_empty() {
            &record.name.name
        } else {
            path
        };
        if record.fields.is_empty() {
            return Err(Error::Schema(format!(
                "record `{shown}` has no fields: Parquet cannot store an empty struct"
            )));
        }
        self.expansion
            .open_record(record.name.fully_qualified_name(namespace), shown)?;
        let mut fields = Vec::with_capacity(record.fields.len());
        for field in &record.fields {
            let field_path = join(path, &field.name);
            let id = self.id();
            let (mut ty, required) = self.ty(&field.schema, namespace, &field_path)?;
            if is_zoned_timestamp(field) && ty == Type::Primitive(PrimitiveType::String) {
                ty = Type::Primitive(PrimitiveType::Timestamptz);
            }
            fields.push(Arc::new(NestedField::new(id, &field.name, ty, required)));
        }
        self.expansion.close_record();
        Ok(fields)
    }

    /// The Iceberg type of `schema` at `path`, and whether a value of it is required.
    fn ty(
        &mut self,
        schema: &'a Schema,
        namespace: &Namespace,
        path: &str,
    ) -> Result<(Type, bool), Error> {
        self.expansion.enter(path)?;
        let result = self.ty_inner(schema, namespace, path);
        self.expansion.leave();
        result
    }

    fn ty_inner(
        &mut self,
        schema: &'a Schema,
        namespace: &Namespace,
        path: &str,
    ) -> Result<(Type, bool), Error> {
        let (schema, namespace) = self.names.resolve(schema, namespace)?;
        let primitive = |p| Ok((Type::Primitive(p), true));
        match schema {
            Schema::Null => Err(Error::Schema(format!(
                "`{path}` has type null, which has no Iceberg mapping (use a union with null for an optional field)"
            ))),
            Schema::Boolean => primitive(PrimitiveType::Boolean),
            Schema::Int => primitive(PrimitiveType::Int),
            Schema::Long => primitive(PrimitiveType::Long),
            Schema::Float => primitive(PrimitiveType::Float),
            Schema::Double => primitive(PrimitiveType::Double),
            Schema::String | Schema::Enum(_) | Schema::BigDecimal => {
                primitive(PrimitiveType::String)
            }
            Schema::Bytes => primitive(PrimitiveType::Binary),
            Schema::Fixed(f) => {
                if f.size == 0 {
                    return Err(Error::Schema(format!(
                        "`{path}` is a fixed of size 0, which Parquet cannot store"
                    )));
                }
                let size = u64::try_from(f.size)
                    .map_err(|_| Error::Schema(format!("`{path}`: fixed size too large")))?;
                primitive(PrimitiveType::Fixed(size))
            }
            Schema::Duration => primitive(PrimitiveType::Fixed(12)),
            Schema::Uuid => primitive(PrimitiveType::Uuid),
            Schema::Date => primitive(PrimitiveType::Date),
            Schema::TimeMillis | Schema::TimeMicros => primitive(PrimitiveType::Time),
            Schema::TimestampMillis | Schema::TimestampMicros | Schema::TimestampNanos => {
                primitive(PrimitiveType::Timestamptz)
            }
            Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos => primitive(PrimitiveType::Timestamp),
            Schema::Decimal(d) => {
                if d.precision > 38 {
                    return Err(Error::Schema(format!(
                        "`{path}` is a decimal of precision {}; Iceberg decimals hold at most 38 digits",
                        d.precision
                    )));
                }
                let ty = u32::try_from(d.precision)
                    .ok()
                    .zip(u32::try_from(d.scale).ok())
                    .and_then(|(p, s)| Type::decimal(p, s).ok())
                    .ok_or_else(|| {
                        Error::Schema(format!(
                            "`{path}`: decimal({}, {}) has no Iceberg mapping",
                            d.precision, d.scale
                        ))
                    })?;
                Ok((ty, true))
            }
            Schema::Record(r) if is_variable_scale_decimal(r) => primitive(PrimitiveType::String),
            Schema::Record(r) => {
                let fields = self.record(r, &namespace, path)?;
                Ok((Type::Struct(StructType::new(fields)), true))
            }
            Schema::Array(a) => {
                let id = self.id();
                let (element, required) = self.ty(&a.items, &namespace, &join(path, "element"))?;
                let field = NestedField::list_element(id, element, required);
                Ok((Type::List(ListType::new(Arc::new(field))), true))
            }
            Schema::Map(m) => {
                let key_id = self.id();
                let value_id = self.id();
                let (value, required) = self.ty(&m.types, &namespace, &join(path, "value"))?;
                let key = NestedField::map_key_element(key_id, Type::Primitive(PrimitiveType::String));
                let value = NestedField::map_value_element(value_id, value, required);
                Ok((Type::Map(MapType::new(Arc::new(key), Arc::new(value))), true))
            }
            Schema::Union(u) => self.union(u, &namespace, path),
            Schema::Ref { .. } => Err(Error::Schema(format!(
                "`{path}`: a reference names another reference"
            ))),
        }
    }

    fn union(
        &mut self,
        union: &'a UnionSchema,
        namespace: &Namespace,
        path: &str,
    ) -> Result<(Type, bool), Error> {
        let mut non_null = Vec::new();
        let mut nullable = false;
        for branch in union.variants() {
            let (resolved, _) = self.names.resolve(branch, namespace)?;
            if matches!(resolved, Schema::Null) {
                nullable = true;
            } else {
                non_null.push(branch);
            }
        }
        match non_null.as_slice() {
            [] => Err(Error::Schema(format!(
                "`{path}` is a union of only null, which has no Iceberg mapping"
            ))),
            [only] => {
                let (ty, _) = self.ty(only, namespace, path)?;
                Ok((ty, !nullable))
            }
            _ => {
                let branch_names = branch_names(self.names, union, namespace)?;
                let mut fields = Vec::with_capacity(non_null.len());
                for (branch, name) in union.variants().iter().zip(&branch_names) {
                    let (resolved, _) = self.names.resolve(branch, namespace)?;
                    if matches!(resolved, Schema::Null) {
                        continue;
                    }
                    let id = self.id();
                    let (ty, _) = self.ty(branch, namespace, &join(path, name))?;
                    fields.push(Arc::new(NestedField::optional(id, name, ty)));
                }
                Ok((Type::Struct(StructType::new(fields)), false))
            }
        }
    }
}

/// A short description of a schema's kind for messages.
pub(crate) fn kind(schema: &Schema) -> String {
    match schema {
        Schema::Record(r) => format!("record `{}`", r.name.fullname(None)),
        Schema::Enum(e) => format!("enum `{}`", e.name.fullname(None)),
        Schema::Fixed(f) => format!("fixed `{}` (size {})", f.name.fullname(None), f.size),
        Schema::Ref { name } => format!("type `{}`", name.fullname(None)),
        Schema::Union(_) => "a union".to_string(),
        Schema::Array(_) => "an array".to_string(),
        Schema::Map(_) => "a map".to_string(),
        Schema::Decimal(d) => format!("decimal({}, {})", d.precision, d.scale),
        Schema::BigDecimal => "big-decimal".to_string(),
        Schema::Uuid => "uuid".to_string(),
        Schema::Date => "date".to_string(),
        Schema::TimeMillis => "time-millis".to_string(),
        Schema::TimeMicros => "time-micros".to_string(),
        Schema::TimestampMillis => "timestamp-millis".to_string(),
        Schema::TimestampMicros => "timestamp-micros".to_string(),
        Schema::TimestampNanos => "timestamp-nanos".to_string(),
        Schema::LocalTimestampMillis => "local-timestamp-millis".to_string(),
        Schema::LocalTimestampMicros => "local-timestamp-micros".to_string(),
        Schema::LocalTimestampNanos => "local-timestamp-nanos".to_string(),
        Schema::Duration => "duration".to_string(),
        Schema::Null => "null".to_string(),
        Schema::Boolean => "boolean".to_string(),
        Schema::Int => "int".to_string(),
        Schema::Long => "long".to_string(),
        Schema::Float => "float".to_string(),
        Schema::Double => "double".to_string(),
        Schema::Bytes => "bytes".to_string(),
        Schema::String => "string".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use apache_avro::Schema;
    use iceberg::spec::{ListType, MapType, NestedField, PrimitiveType as P, StructType, Type};

    use super::avro_to_iceberg;
    use crate::error::Error;

    fn map(json: &str) -> Result<iceberg::spec::Schema, Error> {
        let schema = Schema::parse_str(json).expect("valid Avro schema");
        avro_to_iceberg(&schema, &[])
    }

    /// The table fields of a record with the given Avro `fields` (JSON array items).
    fn fields(avro_fields: &str) -> Vec<NestedField> {
        let json =
            format!(r#"{{"type":"record","name":"R","namespace":"ns","fields":[{avro_fields}]}}"#);
        map(&json)
            .expect("maps")
            .as_struct()
            .fields()
            .iter()
            .map(|f| (**f).clone())
            .collect()
    }

    fn refused(json: &str) -> String {
        match map(json) {
            Err(Error::Schema(message)) => message,
            other => panic!("expected a schema error, got {other:?}"),
        }
    }

    fn req(id: i32, name: &str, ty: Type) -> NestedField {
        NestedField::required(id, name, ty)
    }

    fn opt(id: i32, name: &str, ty: Type) -> NestedField {
        NestedField::optional(id, name, ty)
    }

    fn p(p: P) -> Type {
        Type::Primitive(p)
    }

    fn st(fields: Vec<NestedField>) -> Type {
        Type::Struct(StructType::new(fields.into_iter().map(Arc::new).collect()))
    }

    fn list(id: i32, element: Type, required: bool) -> Type {
        Type::List(ListType::new(Arc::new(NestedField::list_element(
            id, element, required,
        ))))
    }

    fn map_of(key_id: i32, value: Type, required: bool) -> Type {
        Type::Map(MapType::new(
            Arc::new(NestedField::map_key_element(key_id, p(P::String))),
            Arc::new(NestedField::map_value_element(key_id + 1, value, required)),
        ))
    }

    #[test]
    fn primitives_map_to_required_columns_named_as_in_avro() {
        let got = fields(
            r#"{"name":"flag","type":"boolean"},{"name":"i","type":"int"},
               {"name":"L","type":"long"},{"name":"f","type":"float"},
               {"name":"d","type":"double"},{"name":"CamelCase_s","type":"string"},
               {"name":"b","type":"bytes"}"#,
        );
        assert_eq!(
            got,
            vec![
                req(1, "flag", p(P::Boolean)),
                req(2, "i", p(P::Int)),
                req(3, "L", p(P::Long)),
                req(4, "f", p(P::Float)),
                req(5, "d", p(P::Double)),
                req(6, "CamelCase_s", p(P::String)),
                req(7, "b", p(P::Binary)),
            ]
        );
    }

    #[test]
    fn records_enums_fixed_become_structs_strings_fixed_with_depth_first_ids() {
        let got = fields(
            r#"{"name":"a","type":"int"},
               {"name":"b","type":{"type":"record","name":"B","fields":[
                   {"name":"x","type":{"type":"enum","name":"Color","symbols":["RED","GREEN"]}},
                   {"name":"y","type":{"type":"record","name":"C","fields":[
                       {"name":"z","type":{"type":"fixed","name":"F4","size":4}}]}}]}},
               {"name":"c","type":"B"}"#,
        );
        let b = |base: i32| {
            st(vec![
                req(base, "x", p(P::String)),
                req(base + 1, "y", st(vec![req(base + 2, "z", p(P::Fixed(4)))])),
            ])
        };
        assert_eq!(
            got,
            vec![req(1, "a", p(P::Int)), req(2, "b", b(3)), req(6, "c", b(7)),]
        );
    }

    #[test]
    fn arrays_and_maps_have_required_items_unless_nullable() {
        let got = fields(
            r#"{"name":"ints","type":{"type":"array","items":"int"}},
               {"name":"maybe_ints","type":{"type":"array","items":["null","int"]}},
               {"name":"recs","type":{"type":"array","items":{"type":"record","name":"I","fields":[{"name":"q","type":"long"}]}}},
               {"name":"m","type":{"type":"map","values":"string"}},
               {"name":"mn","type":{"type":"map","values":["string","null"]}},
               {"name":"mm","type":["null",{"type":"map","values":{"type":"array","items":"double"}}]}"#,
        );
        assert_eq!(
            got,
            vec![
                req(1, "ints", list(2, p(P::Int), true)),
                req(3, "maybe_ints", list(4, p(P::Int), false)),
                req(5, "recs", list(6, st(vec![req(7, "q", p(P::Long))]), true)),
                req(8, "m", map_of(9, p(P::String), true)),
                req(11, "mn", map_of(12, p(P::String), false)),
                opt(14, "mm", map_of(15, list(17, p(P::Double), true), true)),
            ]
        );
    }

    #[test]
    fn unions_with_null_are_optional_in_either_order() {
        let got = fields(
            r#"{"name":"a","type":["null","string"]},
               {"name":"b","type":["long","null"]},
               {"name":"c","type":["int"]},
               {"name":"d","type":["null",{"type":"record","name":"D","fields":[{"name":"e","type":["null","int"]}]}]}"#,
        );
        assert_eq!(
            got,
            vec![
                opt(1, "a", p(P::String)),
                opt(2, "b", p(P::Long)),
                req(3, "c", p(P::Int)),
                opt(4, "d", st(vec![opt(5, "e", p(P::Int))])),
            ]
        );
    }

    #[test]
    fn unions_of_several_types_become_optional_structs_of_branches() {
        let got = fields(
            r#"{"name":"u","type":["null","int","string"]},
               {"name":"v","type":["boolean","long","float","double","bytes"]},
               {"name":"w","type":[
                   {"type":"record","name":"Item","namespace":"a","fields":[{"name":"x","type":"int"}]},
                   {"type":"record","name":"Item","namespace":"b","fields":[{"name":"y","type":"int"}]},
                   {"type":"record","name":"Item","namespace":"c","fields":[{"name":"z","type":"int"}]},
                   {"type":"enum","name":"E","symbols":["A"]},
                   {"type":"fixed","name":"Fx","size":2},
                   {"type":"array","items":"int"},
                   {"type":"map","values":"int"}]}"#,
        );
        assert_eq!(
            got,
            vec![
                opt(
                    1,
                    "u",
                    st(vec![
                        opt(2, "int", p(P::Int)),
                        opt(3, "string", p(P::String))
                    ])
                ),
                opt(
                    4,
                    "v",
                    st(vec![
                        opt(5, "boolean", p(P::Boolean)),
                        opt(6, "long", p(P::Long)),
                        opt(7, "float", p(P::Float)),
                        opt(8, "double", p(P::Double)),
                        opt(9, "bytes", p(P::Binary)),
                    ])
                ),
                opt(
                    10,
                    "w",
                    st(vec![
                        opt(11, "Item", st(vec![req(12, "x", p(P::Int))])),
                        opt(13, "Item_1", st(vec![req(14, "y", p(P::Int))])),
                        opt(15, "Item_2", st(vec![req(16, "z", p(P::Int))])),
                        opt(17, "E", p(P::String)),
                        opt(18, "Fx", p(P::Fixed(2))),
                        opt(19, "array", list(20, p(P::Int), true)),
                        opt(21, "map", map_of(22, p(P::Int), true)),
                    ])
                ),
            ]
        );
    }

    #[test]
    fn logical_types_map_to_iceberg_types() {
        let got = fields(
            r#"{"name":"date","type":{"type":"int","logicalType":"date"}},
               {"name":"tms","type":{"type":"int","logicalType":"time-millis"}},
               {"name":"tus","type":{"type":"long","logicalType":"time-micros"}},
               {"name":"ts_ms","type":{"type":"long","logicalType":"timestamp-millis"}},
               {"name":"ts_us","type":{"type":"long","logicalType":"timestamp-micros"}},
               {"name":"ts_ns","type":{"type":"long","logicalType":"timestamp-nanos"}},
               {"name":"lts_ms","type":{"type":"long","logicalType":"local-timestamp-millis"}},
               {"name":"lts_us","type":{"type":"long","logicalType":"local-timestamp-micros"}},
               {"name":"lts_ns","type":{"type":"long","logicalType":"local-timestamp-nanos"}},
               {"name":"dec_b","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
               {"name":"dec_f","type":{"type":"fixed","name":"D16","size":16,"logicalType":"decimal","precision":38,"scale":0}},
               {"name":"id","type":{"type":"string","logicalType":"uuid"}},
               {"name":"dur","type":{"type":"fixed","name":"Dur","size":12,"logicalType":"duration"}},
               {"name":"big","type":{"type":"bytes","logicalType":"big-decimal"}},
               {"name":"opt_ts","type":["null",{"type":"long","logicalType":"timestamp-millis"}]}"#,
        );
        let dec = |precision, scale| P::Decimal { precision, scale };
        assert_eq!(
            got,
            vec![
                req(1, "date", p(P::Date)),
                req(2, "tms", p(P::Time)),
                req(3, "tus", p(P::Time)),
                req(4, "ts_ms", p(P::Timestamptz)),
                req(5, "ts_us", p(P::Timestamptz)),
                req(6, "ts_ns", p(P::Timestamptz)),
                req(7, "lts_ms", p(P::Timestamp)),
                req(8, "lts_us", p(P::Timestamp)),
                req(9, "lts_ns", p(P::Timestamp)),
                req(10, "dec_b", p(dec(10, 2))),
                req(11, "dec_f", p(dec(38, 0))),
                req(12, "id", p(P::Uuid)),
                req(13, "dur", p(P::Fixed(12))),
                req(14, "big", p(P::String)),
                opt(15, "opt_ts", p(P::Timestamptz)),
            ]
        );
    }

    #[test]
    fn refs_resolve_through_referenced_schemas() {
        let (schema, refs) = Schema::parse_str_with_list(
            r#"{"type":"record","name":"Order","namespace":"shop","fields":[
                {"name":"customer","type":"common.Customer"},
                {"name":"previous","type":["null","common.Customer"]}]}"#,
            [r#"{"type":"record","name":"Customer","namespace":"common","fields":[
                {"name":"id","type":"long"},{"name":"tier","type":{"type":"enum","name":"Tier","symbols":["A","B"]}}]}"#],
        )
        .expect("parses");
        let got = avro_to_iceberg(&schema, &refs).expect("maps");
        let customer = |base| {
            st(vec![
                req(base, "id", p(P::Long)),
                req(base + 1, "tier", p(P::String)),
            ])
        };
        let want: Vec<NestedField> = vec![
            req(1, "customer", customer(2)),
            opt(4, "previous", customer(5)),
        ];
        let got: Vec<NestedField> = got
            .as_struct()
            .fields()
            .iter()
            .map(|f| (**f).clone())
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn schemas_without_a_mapping_are_refused_with_a_reason() {
        assert!(refused(r#""string""#).contains("must be an Avro record"));
        assert!(refused(r#"{"type":"array","items":"int"}"#).contains("must be an Avro record"));
        let recursive = refused(
            r#"{"type":"record","name":"Node","fields":[
                {"name":"value","type":"int"},
                {"name":"next","type":["null","Node"]}]}"#,
        );
        assert!(recursive.contains("recursive"), "{recursive}");
        assert!(recursive.contains("no Iceberg mapping"), "{recursive}");
        let mutual = refused(
            r#"{"type":"record","name":"A","fields":[
                {"name":"b","type":{"type":"record","name":"B","fields":[
                    {"name":"a","type":{"type":"array","items":"A"}}]}}]}"#,
        );
        assert!(mutual.contains("recursive"), "{mutual}");
        assert!(
            refused(r#"{"type":"record","name":"R","fields":[{"name":"n","type":"null"}]}"#)
                .contains("`n` has type null")
        );
        assert!(
            refused(r#"{"type":"record","name":"R","fields":[{"name":"n","type":["null"]}]}"#)
                .contains("only null")
        );
        assert!(refused(
            r#"{"type":"record","name":"R","fields":[{"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":39,"scale":2}}]}"#
        )
        .contains("at most 38 digits"));
        assert!(refused(r#"{"type":"record","name":"R","fields":[{"name":"e","type":{"type":"record","name":"E","fields":[]}}]}"#)
            .contains("no fields"));
        assert!(refused(r#"{"type":"record","name":"R","fields":[{"name":"f","type":{"type":"fixed","name":"F0","size":0}}]}"#)
            .contains("size 0"));
        // Nested beyond the depth bound.
        let mut deep = String::from("\"int\"");
        for _ in 0..80 {
            deep = format!(r#"{{"type":"array","items":{deep}}}"#);
        }
        let deep =
            format!(r#"{{"type":"record","name":"R","fields":[{{"name":"a","type":{deep}}}]}}"#);
        assert!(refused(&deep).contains("levels deep"));
    }
}
