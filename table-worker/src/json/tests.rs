use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Date32Array, Float64Array, Int64Array, RecordBatch, StringArray,
    Time64MicrosecondArray, TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Field, Schema as ArrowSchema};
use iceberg::arrow::schema_to_arrow_schema;
use iceberg::spec::{ListType, MapType, NestedField, PrimitiveType, StructType, Type};
use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::protobuf::columns::test_support::{parquet_round_trip, rows_json};

fn opt(id: i32, name: &str, field_type: Type) -> NestedFieldRef {
    Arc::new(NestedField::optional(id, name, field_type))
}

fn prim(p: PrimitiveType) -> Type {
    Type::Primitive(p)
}

fn list(id: i32, element: Type) -> Type {
    Type::List(ListType::new(Arc::new(NestedField::list_element(
        id, element, false,
    ))))
}

fn point(first_id: i32) -> Type {
    Type::Struct(StructType::new(vec![
        opt(first_id, "x", prim(PrimitiveType::Double)),
        opt(first_id + 1, "y", prim(PrimitiveType::Double)),
    ]))
}

/// One property per rule; names sort in the order written (serde_json sorts keys).
fn every_rule() -> Value {
    json!({
        "type": "object",
        "definitions": {
            "Point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}}
        },
        "$defs": {"Name": {"type": "string"}},
        "properties": {
            "a_string": {"type": "string"},
            "b_date": {"type": "string", "format": "date"},
            "c_datetime": {"type": "string", "format": "date-time"},
            "d_time": {"type": "string", "format": "time"},
            "e_integer": {"type": "integer"},
            "f_number": {"type": "number"},
            "g_boolean": {"type": "boolean"},
            "h_object": {"type": "object", "properties": {"x": {"type": "integer"}}},
            "i_map": {"type": "object", "additionalProperties": {"type": "number"}},
            "j_free": {"type": "object"},
            "k_list": {"type": "array", "items": {"type": "string"}},
            "l_list_any": {"type": "array"},
            "m_nullable": {"type": ["null", "string"]},
            "n_multi": {"type": ["string", "integer"]},
            "o_one_of": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
            "p_any_of_null": {"anyOf": [{"type": "null"}, {"type": "integer"}]},
            "q_enum": {"enum": ["a", "b", null]},
            "r_const": {"const": 5},
            "s_anything": {},
            "t_all_of": {"allOf": [
                {"type": "object", "properties": {"a": {"type": "integer"}}},
                {"properties": {"b": {"type": "string"}}}
            ]},
            "u_ref": {"$ref": "#/definitions/Point"},
            "v_defs": {"$ref": "#/$defs/Name"},
            "w_points": {"type": "array", "items": {"$ref": "#/definitions/Point"}}
        }
    })
}

#[test]
fn every_rule_maps_to_its_iceberg_type_with_ids_depth_first() {
    let schema = json_to_iceberg(&every_rule()).expect("maps");
    let expected = StructType::new(vec![
        opt(1, "a_string", prim(PrimitiveType::String)),
        opt(2, "b_date", prim(PrimitiveType::Date)),
        opt(3, "c_datetime", prim(PrimitiveType::Timestamptz)),
        opt(4, "d_time", prim(PrimitiveType::Time)),
        opt(5, "e_integer", prim(PrimitiveType::Long)),
        opt(6, "f_number", prim(PrimitiveType::Double)),
        opt(7, "g_boolean", prim(PrimitiveType::Boolean)),
        opt(
            8,
            "h_object",
            Type::Struct(StructType::new(vec![opt(
                9,
                "x",
                prim(PrimitiveType::Long),
            )])),
        ),
        opt(
            10,
            "i_map",
            Type::Map(MapType::new(
                Arc::new(NestedField::map_key_element(
                    11,
                    prim(PrimitiveType::String),
                )),
                Arc::new(NestedField::map_value_element(
                    12,
                    prim(PrimitiveType::Double),
                    false,
                )),
            )),
        ),
        opt(13, "j_free", prim(PrimitiveType::String)),
        opt(14, "k_list", list(15, prim(PrimitiveType::String))),
        opt(16, "l_list_any", list(17, prim(PrimitiveType::String))),
        opt(18, "m_nullable", prim(PrimitiveType::String)),
        opt(19, "n_multi", prim(PrimitiveType::String)),
        opt(20, "o_one_of", prim(PrimitiveType::String)),
        opt(21, "p_any_of_null", prim(PrimitiveType::Long)),
        opt(22, "q_enum", prim(PrimitiveType::String)),
        opt(23, "r_const", prim(PrimitiveType::Long)),
        opt(24, "s_anything", prim(PrimitiveType::String)),
        opt(
            25,
            "t_all_of",
            Type::Struct(StructType::new(vec![
                opt(26, "a", prim(PrimitiveType::Long)),
                opt(27, "b", prim(PrimitiveType::String)),
            ])),
        ),
        opt(28, "u_ref", point(29)),
        opt(31, "v_defs", prim(PrimitiveType::String)),
        opt(32, "w_points", list(33, point(34))),
    ]);
    assert_eq!(schema.as_struct(), &expected);
}

#[test]
fn a_root_reference_is_followed() {
    let schema = json!({
        "$ref": "#/definitions/Order",
        "definitions": {"Order": {"type": "object", "properties": {
            "id": {"type": "integer"},
            "at": {"$ref": "#/definitions/When"}
        }},
        "When": {"type": "string", "format": "date-time"}}
    });
    let schema = json_to_iceberg(&schema).expect("maps");
    let expected = StructType::new(vec![
        opt(1, "at", prim(PrimitiveType::Timestamptz)),
        opt(2, "id", prim(PrimitiveType::Long)),
    ]);
    assert_eq!(schema.as_struct(), &expected);
}

#[test]
fn unmappable_schemas_are_schema_errors() {
    for (schema, why) in [
        (json!({"type": "string"}), "root"),
        (json!({"type": "object"}), "root"),
        (json!(true), "root"),
        (
            json!({"properties": {"a": {"$ref": "other.json#/definitions/A"}}}),
            "only local",
        ),
        (
            json!({"properties": {"a": {"$ref": "#/definitions/Nope"}}}),
            "nothing",
        ),
        (json!({"properties": {"next": {"$ref": "#"}}}), "recursive"),
        (
            json!({
                "properties": {"head": {"$ref": "#/definitions/Node"}},
                "definitions": {"Node": {"type": "object", "properties": {
                    "children": {"type": "array", "items": {"$ref": "#/definitions/Node"}}
                }}}
            }),
            "recursive",
        ),
        (
            json!({"properties": {"a": {"type": "text"}}}),
            "unknown type",
        ),
    ] {
        match json_to_iceberg(&schema) {
            Err(Error::Schema(message)) => assert!(message.contains(why), "{message}"),
            other => panic!("{schema}: expected a schema error, got {other:?}"),
        }
        let target = Arc::new(ArrowSchema::empty());
        assert!(matches!(
            JsonConverter::new(&schema, target),
            Err(Error::Schema(_))
        ));
    }
}

fn target_of(schema: &Value) -> SchemaRef {
    let schema = json_to_iceberg(schema).expect("maps");
    Arc::new(schema_to_arrow_schema(&schema).expect("arrow schema"))
}

fn convert(schema: &Value, values: &[Value]) -> RecordBatch {
    let target = target_of(schema);
    let mut converter = JsonConverter::new(schema, target.clone()).expect("converter");
    for value in values {
        converter.append(value).expect("append");
    }
    assert_eq!(converter.len(), values.len());
    let arrays = converter.finish().expect("finish");
    assert!(converter.is_empty());
    parquet_round_trip(&target, arrays)
}

#[test]
fn every_rule_round_trips() {
    let full = json!({
        "a_string": "héllo",
        "b_date": "2024-02-29",
        "c_datetime": "2023-11-15T00:13:20.1234567+02:00",
        "d_time": "12:30:01.25",
        "e_integer": 2.0,
        "f_number": 7,
        "g_boolean": true,
        "h_object": {"x": -1, "ignored": 1},
        "i_map": {"b": 2.5, "a": null},
        "j_free": {"z": [1, "two"]},
        "k_list": ["x", null, "y"],
        "l_list_any": [1, {"a": true}, "s"],
        "m_nullable": "m",
        "n_multi": "text",
        "o_one_of": 12,
        "p_any_of_null": 3,
        "q_enum": "b",
        "r_const": 5,
        "s_anything": [null],
        "t_all_of": {"a": 1, "b": "B"},
        "u_ref": {"x": 1.5, "y": -2},
        "v_defs": "name",
        "w_points": [{"x": 0, "y": 1}, {"x": 2}],
        "not_in_schema": "ignored"
    });
    let nulls = json!({"a_string": null, "h_object": null, "k_list": null, "s_anything": null});
    let batch = convert(&every_rule(), &[full, nulls, json!({})]);
    let column = |name: &str| batch.column_by_name(name).expect("column").clone();

    let strings: ArrayRef = Arc::new(StringArray::from(vec![Some("héllo"), None, None]));
    assert_eq!(&column("a_string"), &strings);
    let dates: ArrayRef = Arc::new(Date32Array::from(vec![Some(19_782), None, None]));
    assert_eq!(&column("b_date"), &dates);
    let timestamps: ArrayRef = Arc::new(
        TimestampMicrosecondArray::from(vec![Some(1_700_000_000_123_456), None, None])
            .with_timezone("+00:00"),
    );
    assert_eq!(&column("c_datetime"), &timestamps);
    let times: ArrayRef = Arc::new(Time64MicrosecondArray::from(vec![
        Some((12 * 3600 + 30 * 60 + 1) * 1_000_000 + 250_000),
        None,
        None,
    ]));
    assert_eq!(&column("d_time"), &times);
    let integers: ArrayRef = Arc::new(Int64Array::from(vec![Some(2), None, None]));
    assert_eq!(&column("e_integer"), &integers);
    let numbers: ArrayRef = Arc::new(Float64Array::from(vec![Some(7.0), None, None]));
    assert_eq!(&column("f_number"), &numbers);
    let booleans: ArrayRef = Arc::new(BooleanArray::from(vec![Some(true), None, None]));
    assert_eq!(&column("g_boolean"), &booleans);

    let rows = rows_json(&batch);
    let row = &rows[0];
    assert_eq!(row["h_object"], json!({"x": -1}));
    assert_eq!(row["i_map"], json!({"a": null, "b": 2.5}));
    assert_eq!(row["j_free"], json!(r#"{"z":[1,"two"]}"#));
    assert_eq!(row["k_list"], json!(["x", null, "y"]));
    assert_eq!(row["l_list_any"], json!(["1", r#"{"a":true}"#, r#""s""#]));
    assert_eq!(row["m_nullable"], json!("m"));
    assert_eq!(row["n_multi"], json!(r#""text""#));
    assert_eq!(row["o_one_of"], json!("12"));
    assert_eq!(row["p_any_of_null"], json!(3));
    assert_eq!(row["q_enum"], json!("b"));
    assert_eq!(row["r_const"], json!(5));
    assert_eq!(row["s_anything"], json!("[null]"));
    assert_eq!(row["t_all_of"], json!({"a": 1, "b": "B"}));
    assert_eq!(row["u_ref"], json!({"x": 1.5, "y": -2.0}));
    assert_eq!(row["v_defs"], json!("name"));
    assert_eq!(
        row["w_points"],
        json!([{"x": 0.0, "y": 1.0}, {"x": 2.0, "y": null}])
    );
    for row in [&rows[1], &rows[2]] {
        let object = row.as_object().expect("object");
        assert_eq!(object.len(), 23);
        assert!(object.values().all(Value::is_null), "{row}");
    }
}

#[test]
fn converts_into_a_newer_table_schema() {
    let old = json!({"type": "object", "properties": {
        "id": {"type": "integer"},
        "dropped": {"type": "string"},
        "item": {"type": "object", "properties": {"sku": {"type": "string"}}},
        "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}}}}
    }});
    let new = json!({"type": "object", "properties": {
        "id": {"type": "integer"},
        "added": {"type": "boolean"},
        "item": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}},
        "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}}}
    }});
    let target = target_of(&new);
    let mut converter = JsonConverter::new(&old, target.clone()).expect("converter");
    converter
        .append(&json!({
            "id": 1,
            "dropped": "gone",
            "item": {"sku": "a", "qty": 5},
            "items": [{"sku": "b"}],
            "added": true
        }))
        .expect("append");
    let batch = parquet_round_trip(&target, converter.finish().expect("finish"));
    // Properties the old schema lacks are null even when the value has them: their type is
    // the old schema's to say.
    assert_eq!(
        rows_json(&batch),
        json!([{
            "added": null,
            "id": 1,
            "item": {"qty": null, "sku": "a"},
            "items": [{"qty": null, "sku": "b"}],
        }])
    );
}

#[test]
fn incompatible_targets_are_schema_errors() {
    let schema = json!({"type": "object", "properties": {
        "n": {"type": "number"},
        "i": {"type": "integer"},
        "s": {"type": "string"}
    }});
    for field in [
        Field::new("n", DataType::Int64, true),
        Field::new("i", DataType::Int32, true),
        Field::new("s", DataType::Int64, true),
        Field::new("missing", DataType::Utf8, false),
    ] {
        let name = field.name().clone();
        let target = Arc::new(ArrowSchema::new(vec![field]));
        match JsonConverter::new(&schema, target) {
            Err(Error::Schema(message)) => assert!(message.contains(&name), "{message}"),
            other => panic!("{name}: expected a schema error, got {other:?}"),
        }
    }
}

#[test]
fn failed_rows_leave_nothing_behind() {
    let schema = json!({"type": "object", "properties": {
        "id": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "lines": {"type": "array", "items": {"type": "object", "properties": {
            "sku": {"type": "string"},
            "qty": {"type": "integer"}
        }}},
        "at": {"type": "string", "format": "date-time"}
    }});
    let target = target_of(&schema);
    let mut converter = JsonConverter::new(&schema, target.clone()).expect("converter");
    let good = |id: i64| json!({"id": id, "tags": ["t"], "lines": [{"sku": "a", "qty": 1}], "at": "2024-01-01T00:00:00Z"});
    converter.append(&good(1)).expect("append");
    for (bad, field) in [
        // 1.5 for an integer, in the second element, after the first went in.
        (
            json!({"id": 2, "tags": ["x", "y"], "lines": [{"sku": "b", "qty": 1}, {"sku": "c", "qty": 1.5}]}),
            "lines.qty",
        ),
        (json!({"id": 18446744073709551615u64}), "id"),
        (json!({"id": 3, "tags": ["x", 4]}), "tags"),
        (
            json!({"id": 3, "lines": [{"sku": "d"}], "at": "yesterday"}),
            "at",
        ),
        (json!({"id": 3, "lines": {"sku": "d"}}), "lines"),
    ] {
        match converter.append(&bad) {
            Err(Error::Decode(message)) => {
                assert!(message.contains(&format!("`{field}`")), "{message}")
            }
            other => panic!("{bad}: expected a decode error, got {other:?}"),
        }
        assert_eq!(converter.len(), 1);
    }
    assert!(matches!(
        converter.append(&json!([1])),
        Err(Error::Decode(_))
    ));
    converter.append(&good(4)).expect("append");
    let batch = parquet_round_trip(&target, converter.finish().expect("finish"));
    let ids: ArrayRef = Arc::new(Int64Array::from(vec![1, 4]));
    assert_eq!(batch.column_by_name("id").expect("id"), &ids);
    let rows = rows_json(&batch);
    for row in rows.as_array().expect("rows") {
        assert_eq!(row["tags"], json!(["t"]));
        assert_eq!(row["lines"], json!([{"qty": 1, "sku": "a"}]));
    }
}

#[test]
fn buffers_are_counted_and_released_by_finish() {
    let schema = json!({"type": "object", "properties": {"s": {"type": "string"}}});
    let mut converter = JsonConverter::new(&schema, target_of(&schema)).expect("converter");
    let row = json!({"s": "x".repeat(1000)});
    for _ in 0..100 {
        converter.append(&row).expect("append");
    }
    assert!(converter.buffered_bytes() >= 100_000);
    converter.finish().expect("finish");
    assert!(converter.buffered_bytes() < 100_000);
}

proptest! {
    #[test]
    fn integers_and_texts_round_trip(
        long in any::<i64>(),
        double in any::<f64>().prop_filter("finite", |d| d.is_finite()),
        text in ".{0,20}",
    ) {
        let schema = json!({"type": "object", "properties": {
            "l": {"type": "integer"},
            "d": {"type": "number"},
            "s": {"type": "string"},
            "any": {}
        }});
        let value = json!({"l": long, "d": double, "s": text, "any": {"t": text}});
        let batch = convert(&schema, &[value]);
        let column = |name: &str| batch.column_by_name(name).expect("column").clone();
        prop_assert_eq!(&column("l"), &(Arc::new(Int64Array::from(vec![long])) as ArrayRef));
        prop_assert_eq!(&column("d"), &(Arc::new(Float64Array::from(vec![double])) as ArrayRef));
        prop_assert_eq!(&column("s"), &(Arc::new(StringArray::from(vec![text.clone()])) as ArrayRef));
        let any = serde_json::to_string(&json!({"t": text})).expect("json");
        prop_assert_eq!(&column("any"), &(Arc::new(StringArray::from(vec![any])) as ArrayRef));
    }
}
