use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{
    Array, AsArray, BooleanArray, Float32Array, Float64Array, Int32Array, Int64Array,
    LargeBinaryArray, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Field, Schema as ArrowSchema, SchemaRef};
use iceberg::arrow::schema_to_arrow_schema;
use iceberg::spec::{ListType, MapType, NestedField, PrimitiveType, StructType, Type};
use inlet_schema_registry::protobuf::{parse, ProtoSchema};
use proptest::prelude::*;
use prost_reflect::{DynamicMessage, MapKey, MessageDescriptor, Value};
use serde_json::json;

use super::columns::test_support::{parquet_round_trip, rows_json};
use super::*;

const PROTO: &str = r#"
syntax = "proto3";
package t;

import "google/protobuf/any.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/empty.proto";
import "google/protobuf/struct.proto";
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

enum Color {
  RED = 0;
  GREEN = 1;
}

message Scalars {
  int32 i32 = 1;
  sint32 s32 = 2;
  sfixed32 sf32 = 3;
  uint32 u32 = 4;
  fixed32 fx32 = 5;
  int64 i64 = 6;
  sint64 s64 = 7;
  sfixed64 sf64 = 8;
  uint64 u64 = 9;
  fixed64 fx64 = 10;
  bool flag = 11;
  float real = 12;
  double dbl = 13;
  string text = 14;
  bytes raw = 15;
  Color color = 16;
}

message Item {
  string sku = 1;
  int32 qty = 2;
}

message Order {
  int64 id = 1;
  Item main = 2;
  repeated Item items = 3;
  map<string, int64> counts = 4;
  repeated string tags = 5;
  optional int32 maybe = 6;
  oneof choice {
    string name = 7;
    int32 number = 8;
  }
  map<uint64, Item> by_slot = 9;
}

message Wkt {
  google.protobuf.Timestamp ts = 1;
  google.protobuf.Duration dur = 2;
  google.protobuf.Int32Value w_i32 = 3;
  google.protobuf.Int64Value w_i64 = 4;
  google.protobuf.UInt32Value w_u32 = 5;
  google.protobuf.UInt64Value w_u64 = 6;
  google.protobuf.FloatValue w_float = 7;
  google.protobuf.DoubleValue w_double = 8;
  google.protobuf.BoolValue w_bool = 9;
  google.protobuf.StringValue w_string = 10;
  google.protobuf.BytesValue w_bytes = 11;
  google.protobuf.Struct st = 12;
  google.protobuf.Value val = 13;
  google.protobuf.ListValue list = 14;
  google.protobuf.Any any = 15;
  google.protobuf.Empty empty = 16;
  repeated google.protobuf.Timestamp times = 17;
}

message Shelf {
  repeated Order orders = 1;
}

message Marker {}

message Flags {
  Marker marker = 1;
  repeated Marker markers = 2;
}

message Node {
  string name = 1;
  Node next = 2;
}

message A {
  B b = 1;
}

message B {
  repeated A a = 1;
}

message Big {
  string s = 1;
  uint64 u = 2;
}

message Bigs {
  int64 id = 1;
  repeated Big bigs = 2;
  map<string, Big> named = 3;
}
"#;

fn schema() -> ProtoSchema {
    parse(PROTO, &[]).expect("test proto compiles")
}

fn descriptor(schema: &ProtoSchema, name: &str) -> MessageDescriptor {
    schema
        .pool
        .get_message_by_name(&format!("t.{name}"))
        .unwrap_or_else(|| panic!("message {name}"))
}

fn message(descriptor: &MessageDescriptor, fields: Vec<(&str, Value)>) -> DynamicMessage {
    let mut message = DynamicMessage::new(descriptor.clone());
    for (name, value) in fields {
        message.set_field_by_name(name, value);
    }
    message
}

fn target_of(descriptor: &MessageDescriptor) -> SchemaRef {
    let schema = protobuf_to_iceberg(descriptor).expect("maps");
    Arc::new(schema_to_arrow_schema(&schema).expect("arrow schema"))
}

/// Converts `messages` into the message's own table schema and round-trips them through
/// Parquet.
fn convert(descriptor: &MessageDescriptor, messages: &[DynamicMessage]) -> RecordBatch {
    let target = target_of(descriptor);
    let mut converter = ProtobufConverter::new(descriptor, target.clone()).expect("converter");
    for message in messages {
        converter.append(message).expect("append");
    }
    assert_eq!(converter.len(), messages.len());
    let arrays = converter.finish().expect("finish");
    assert!(converter.is_empty());
    parquet_round_trip(&target, arrays)
}

fn opt(id: i32, name: &str, field_type: Type) -> NestedFieldRef {
    Arc::new(NestedField::optional(id, name, field_type))
}

fn prim(p: PrimitiveType) -> Type {
    Type::Primitive(p)
}

#[test]
fn scalars_map_to_their_iceberg_types() {
    let schema = protobuf_to_iceberg(&descriptor(&schema(), "Scalars")).expect("maps");
    let expected = StructType::new(vec![
        opt(1, "i32", prim(PrimitiveType::Int)),
        opt(2, "s32", prim(PrimitiveType::Int)),
        opt(3, "sf32", prim(PrimitiveType::Int)),
        opt(4, "u32", prim(PrimitiveType::Long)),
        opt(5, "fx32", prim(PrimitiveType::Long)),
        opt(6, "i64", prim(PrimitiveType::Long)),
        opt(7, "s64", prim(PrimitiveType::Long)),
        opt(8, "sf64", prim(PrimitiveType::Long)),
        opt(9, "u64", prim(PrimitiveType::Long)),
        opt(10, "fx64", prim(PrimitiveType::Long)),
        opt(11, "flag", prim(PrimitiveType::Boolean)),
        opt(12, "real", prim(PrimitiveType::Float)),
        opt(13, "dbl", prim(PrimitiveType::Double)),
        opt(14, "text", prim(PrimitiveType::String)),
        opt(15, "raw", prim(PrimitiveType::Binary)),
        opt(16, "color", prim(PrimitiveType::String)),
    ]);
    assert_eq!(schema.as_struct(), &expected);
}

fn item_type(first_id: i32) -> Type {
    Type::Struct(StructType::new(vec![
        opt(first_id, "sku", prim(PrimitiveType::String)),
        opt(first_id + 1, "qty", prim(PrimitiveType::Int)),
    ]))
}

#[test]
fn nested_lists_and_maps_get_ids_depth_first() {
    let schema = protobuf_to_iceberg(&descriptor(&schema(), "Order")).expect("maps");
    let expected = StructType::new(vec![
        opt(1, "id", prim(PrimitiveType::Long)),
        opt(2, "main", item_type(3)),
        opt(
            5,
            "items",
            Type::List(ListType::new(Arc::new(NestedField::list_element(
                6,
                item_type(7),
                true,
            )))),
        ),
        opt(
            9,
            "counts",
            Type::Map(MapType::new(
                Arc::new(NestedField::map_key_element(
                    10,
                    prim(PrimitiveType::String),
                )),
                Arc::new(NestedField::map_value_element(
                    11,
                    prim(PrimitiveType::Long),
                    false,
                )),
            )),
        ),
        opt(
            12,
            "tags",
            Type::List(ListType::new(Arc::new(NestedField::list_element(
                13,
                prim(PrimitiveType::String),
                true,
            )))),
        ),
        opt(14, "maybe", prim(PrimitiveType::Int)),
        opt(15, "name", prim(PrimitiveType::String)),
        opt(16, "number", prim(PrimitiveType::Int)),
        opt(
            17,
            "by_slot",
            Type::Map(MapType::new(
                Arc::new(NestedField::map_key_element(18, prim(PrimitiveType::Long))),
                Arc::new(NestedField::map_value_element(19, item_type(20), false)),
            )),
        ),
    ]);
    assert_eq!(schema.as_struct(), &expected);
}

#[test]
fn well_known_types_map_to_their_conventions() {
    let schema = protobuf_to_iceberg(&descriptor(&schema(), "Wkt")).expect("maps");
    let expected = StructType::new(vec![
        opt(1, "ts", prim(PrimitiveType::Timestamptz)),
        opt(2, "dur", prim(PrimitiveType::Long)),
        opt(3, "w_i32", prim(PrimitiveType::Int)),
        opt(4, "w_i64", prim(PrimitiveType::Long)),
        opt(5, "w_u32", prim(PrimitiveType::Long)),
        opt(6, "w_u64", prim(PrimitiveType::Long)),
        opt(7, "w_float", prim(PrimitiveType::Float)),
        opt(8, "w_double", prim(PrimitiveType::Double)),
        opt(9, "w_bool", prim(PrimitiveType::Boolean)),
        opt(10, "w_string", prim(PrimitiveType::String)),
        opt(11, "w_bytes", prim(PrimitiveType::Binary)),
        opt(12, "st", prim(PrimitiveType::String)),
        opt(13, "val", prim(PrimitiveType::String)),
        opt(14, "list", prim(PrimitiveType::String)),
        opt(
            15,
            "any",
            Type::Struct(StructType::new(vec![
                opt(16, "type_url", prim(PrimitiveType::String)),
                opt(17, "value", prim(PrimitiveType::Binary)),
            ])),
        ),
        opt(18, "empty", prim(PrimitiveType::Boolean)),
        opt(
            19,
            "times",
            Type::List(ListType::new(Arc::new(NestedField::list_element(
                20,
                prim(PrimitiveType::Timestamptz),
                true,
            )))),
        ),
    ]);
    assert_eq!(schema.as_struct(), &expected);
}

#[test]
fn messages_without_fields_are_booleans() {
    let schema = schema();
    let flags = descriptor(&schema, "Flags");
    let expected = StructType::new(vec![
        opt(1, "marker", prim(PrimitiveType::Boolean)),
        opt(
            2,
            "markers",
            Type::List(ListType::new(Arc::new(NestedField::list_element(
                3,
                prim(PrimitiveType::Boolean),
                true,
            )))),
        ),
    ]);
    assert_eq!(
        protobuf_to_iceberg(&flags).expect("maps").as_struct(),
        &expected
    );
    let marker = Value::Message(DynamicMessage::new(descriptor(&schema, "Marker")));
    let set = message(
        &flags,
        vec![
            ("marker", marker.clone()),
            ("markers", Value::List(vec![marker])),
        ],
    );
    let batch = convert(&flags, &[set, DynamicMessage::new(flags.clone())]);
    assert_eq!(
        rows_json(&batch),
        json!([
            {"marker": true, "markers": [true]},
            {"marker": null, "markers": []},
        ])
    );
}

#[test]
fn recursive_messages_are_refused() {
    let schema = schema();
    for name in ["Node", "A", "B"] {
        let desc = descriptor(&schema, name);
        match protobuf_to_iceberg(&desc) {
            Err(Error::Schema(message)) => assert!(message.contains("recursive"), "{message}"),
            other => panic!("{name}: expected a schema error, got {other:?}"),
        }
    }
    // The converter refuses it too, whatever the target.
    let node = descriptor(&schema, "Node");
    let inner = Field::new(
        "next",
        DataType::Struct(vec![Field::new("name", DataType::Utf8, true)].into()),
        true,
    );
    let next = Field::new("next", DataType::Struct(vec![inner].into()), true);
    let target = Arc::new(ArrowSchema::new(vec![next]));
    assert!(matches!(
        ProtobufConverter::new(&node, target),
        Err(Error::Schema(_))
    ));
}

#[test]
fn scalars_round_trip_with_proto3_defaults() {
    let schema = schema();
    let desc = descriptor(&schema, "Scalars");
    let full = message(
        &desc,
        vec![
            ("i32", Value::I32(-1)),
            ("s32", Value::I32(i32::MIN)),
            ("sf32", Value::I32(i32::MAX)),
            ("u32", Value::U32(u32::MAX)),
            ("fx32", Value::U32(7)),
            ("i64", Value::I64(i64::MIN)),
            ("s64", Value::I64(-5)),
            ("sf64", Value::I64(6)),
            ("u64", Value::U64(i64::MAX as u64)),
            ("fx64", Value::U64(8)),
            ("flag", Value::Bool(true)),
            ("real", Value::F32(1.5)),
            ("dbl", Value::F64(-2.25)),
            ("text", Value::String("héllo".into())),
            ("raw", Value::Bytes(vec![0, 1, 255].into())),
            ("color", Value::EnumNumber(1)),
        ],
    );
    let unknown_enum = message(&desc, vec![("color", Value::EnumNumber(42))]);
    let defaults = DynamicMessage::new(desc.clone());
    let batch = convert(&desc, &[full, unknown_enum, defaults]);
    let column = |name: &str| batch.column_by_name(name).expect("column").clone();
    let int32 = |v: [i32; 3]| Arc::new(Int32Array::from(v.to_vec())) as ArrayRef;
    let int64 = |v: [i64; 3]| Arc::new(Int64Array::from(v.to_vec())) as ArrayRef;
    assert_eq!(&column("i32"), &int32([-1, 0, 0]));
    assert_eq!(&column("s32"), &int32([i32::MIN, 0, 0]));
    assert_eq!(&column("sf32"), &int32([i32::MAX, 0, 0]));
    assert_eq!(&column("u32"), &int64([u32::MAX.into(), 0, 0]));
    assert_eq!(&column("fx32"), &int64([7, 0, 0]));
    assert_eq!(&column("i64"), &int64([i64::MIN, 0, 0]));
    assert_eq!(&column("s64"), &int64([-5, 0, 0]));
    assert_eq!(&column("sf64"), &int64([6, 0, 0]));
    assert_eq!(&column("u64"), &int64([i64::MAX, 0, 0]));
    assert_eq!(&column("fx64"), &int64([8, 0, 0]));
    let flags: ArrayRef = Arc::new(BooleanArray::from(vec![true, false, false]));
    assert_eq!(&column("flag"), &flags);
    let reals: ArrayRef = Arc::new(Float32Array::from(vec![1.5, 0.0, 0.0]));
    assert_eq!(&column("real"), &reals);
    let doubles: ArrayRef = Arc::new(Float64Array::from(vec![-2.25, 0.0, 0.0]));
    assert_eq!(&column("dbl"), &doubles);
    let texts: ArrayRef = Arc::new(StringArray::from(vec!["héllo", "", ""]));
    assert_eq!(&column("text"), &texts);
    let raws: ArrayRef = Arc::new(LargeBinaryArray::from_vec(vec![&[0, 1, 255], &[], &[]]));
    assert_eq!(&column("raw"), &raws);
    let colors: ArrayRef = Arc::new(StringArray::from(vec!["GREEN", "42", "RED"]));
    assert_eq!(&column("color"), &colors);
}

#[test]
fn nested_messages_lists_maps_and_presence_round_trip() {
    let schema = schema();
    let order = descriptor(&schema, "Order");
    let item = descriptor(&schema, "Item");
    let item_value = |sku: &str, qty: i32| {
        Value::Message(message(
            &item,
            vec![("sku", Value::String(sku.into())), ("qty", Value::I32(qty))],
        ))
    };
    let full = message(
        &order,
        vec![
            ("id", Value::I64(1)),
            ("main", item_value("m", 1)),
            (
                "items",
                Value::List(vec![item_value("a", 2), item_value("b", 0)]),
            ),
            (
                "counts",
                Value::Map(HashMap::from([
                    (MapKey::String("y".into()), Value::I64(2)),
                    (MapKey::String("x".into()), Value::I64(1)),
                ])),
            ),
            (
                "tags",
                Value::List(vec![Value::String("t1".into()), Value::String("t2".into())]),
            ),
            ("maybe", Value::I32(0)),
            ("number", Value::I32(5)),
            (
                "by_slot",
                Value::Map(HashMap::from([(MapKey::U64(3), item_value("c", 3))])),
            ),
        ],
    );
    // Unset: the message, the optional scalar and the oneof are null; the repeated and map
    // fields are empty; the proto3 scalar is its default.
    let empty = DynamicMessage::new(order.clone());
    let named = message(&order, vec![("name", Value::String("n".into()))]);
    let batch = convert(&order, &[full, empty, named]);
    // The JSON writer takes string map keys only: by_slot (uint64 keys) is checked apart.
    let by_slot = batch.num_columns() - 1;
    let others: Vec<usize> = (0..by_slot).collect();
    assert_eq!(
        rows_json(&batch.project(&others).expect("project")),
        json!([
            {
                "id": 1,
                "main": {"sku": "m", "qty": 1},
                "items": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 0}],
                "counts": {"x": 1, "y": 2},
                "tags": ["t1", "t2"],
                "maybe": 0,
                "name": null,
                "number": 5,
            },
            {
                "id": 0, "main": null, "items": [], "counts": {}, "tags": [], "maybe": null,
                "name": null, "number": null,
            },
            {
                "id": 0, "main": null, "items": [], "counts": {}, "tags": [], "maybe": null,
                "name": "n", "number": null,
            },
        ])
    );
    let by_slot = batch.column(by_slot).as_map();
    assert_eq!(by_slot.value_offsets(), &[0, 1, 1, 1]);
    assert_eq!(by_slot.null_count(), 0);
    let keys: ArrayRef = Arc::new(Int64Array::from(vec![3]));
    assert_eq!(by_slot.keys(), &keys);
    let values = by_slot.values().as_struct();
    let skus: ArrayRef = Arc::new(StringArray::from(vec!["c"]));
    assert_eq!(values.column_by_name("sku").expect("sku"), &skus);
}

#[test]
fn null_structs_inside_list_elements_round_trip() {
    let schema = schema();
    let shelf = descriptor(&schema, "Shelf");
    let order = descriptor(&schema, "Order");
    let item = descriptor(&schema, "Item");
    let with_main = message(
        &order,
        vec![
            ("id", Value::I64(1)),
            (
                "main",
                Value::Message(message(&item, vec![("sku", Value::String("s".into()))])),
            ),
        ],
    );
    let without_main = message(&order, vec![("id", Value::I64(2))]);
    let row = message(
        &shelf,
        vec![(
            "orders",
            Value::List(vec![
                Value::Message(without_main),
                Value::Message(with_main),
            ]),
        )],
    );
    let batch = convert(&shelf, &[row, DynamicMessage::new(shelf.clone())]);
    // (The JSON writer cannot show by_slot's integer keys: inspect the arrays.)
    let orders = batch.column(0).as_list::<i32>();
    assert_eq!(orders.value_offsets(), &[0, 2, 2]);
    let elements = orders.values().as_struct();
    let main = elements.column_by_name("main").expect("main").as_struct();
    assert!(main.is_null(0));
    assert!(main.is_valid(1));
    let skus: ArrayRef = Arc::new(StringArray::from(vec![None, Some("s")]));
    assert_eq!(main.column_by_name("sku").expect("sku"), &skus);
}

#[test]
fn well_known_types_round_trip() {
    let schema = schema();
    let wkt = descriptor(&schema, "Wkt");
    let pool = &schema.pool;
    let get = |name: &str| {
        pool.get_message_by_name(&format!("google.protobuf.{name}"))
            .expect("well-known type")
    };
    let seconds_nanos = |name: &str, seconds: i64, nanos: i32| {
        Value::Message(message(
            &get(name),
            vec![
                ("seconds", Value::I64(seconds)),
                ("nanos", Value::I32(nanos)),
            ],
        ))
    };
    let wrapper =
        |name: &str, value: Value| Value::Message(message(&get(name), vec![("value", value)]));
    let json_value =
        |field: &str, value: Value| Value::Message(message(&get("Value"), vec![(field, value)]));
    let list = message(
        &get("ListValue"),
        vec![(
            "values",
            Value::List(vec![
                json_value("number_value", Value::F64(1.0)),
                json_value("string_value", Value::String("two".into())),
                json_value("null_value", Value::EnumNumber(0)),
                json_value("number_value", Value::F64(f64::NAN)),
            ]),
        )],
    );
    let inner = message(
        &get("Struct"),
        vec![(
            "fields",
            Value::Map(HashMap::from([(
                MapKey::String("ok".into()),
                json_value("bool_value", Value::Bool(true)),
            )])),
        )],
    );
    let st = message(
        &get("Struct"),
        vec![(
            "fields",
            Value::Map(HashMap::from([
                (
                    MapKey::String("b".into()),
                    json_value("list_value", Value::Message(list.clone())),
                ),
                (
                    MapKey::String("a\"".into()),
                    json_value("struct_value", Value::Message(inner)),
                ),
            ])),
        )],
    );
    let full = message(
        &wkt,
        vec![
            ("ts", seconds_nanos("Timestamp", 1_700_000_000, 123_456_789)),
            ("dur", seconds_nanos("Duration", -2, -500_999)),
            ("w_i32", wrapper("Int32Value", Value::I32(-3))),
            ("w_i64", wrapper("Int64Value", Value::I64(4))),
            ("w_u32", wrapper("UInt32Value", Value::U32(5))),
            ("w_u64", wrapper("UInt64Value", Value::U64(6))),
            ("w_float", wrapper("FloatValue", Value::F32(0.5))),
            ("w_double", wrapper("DoubleValue", Value::F64(0.25))),
            ("w_bool", wrapper("BoolValue", Value::Bool(false))),
            (
                "w_string",
                wrapper("StringValue", Value::String("s".into())),
            ),
            (
                "w_bytes",
                wrapper("BytesValue", Value::Bytes(vec![9].into())),
            ),
            ("st", Value::Message(st)),
            ("val", json_value("string_value", Value::String("v".into()))),
            ("list", Value::Message(list)),
            (
                "any",
                Value::Message(message(
                    &get("Any"),
                    vec![
                        (
                            "type_url",
                            Value::String("type.googleapis.com/t.Item".into()),
                        ),
                        ("value", Value::Bytes(vec![1, 2].into())),
                    ],
                )),
            ),
            ("empty", Value::Message(DynamicMessage::new(get("Empty")))),
            (
                "times",
                Value::List(vec![seconds_nanos("Timestamp", 0, 1_999)]),
            ),
        ],
    );
    // A set wrapper holding its default is the default, not null.
    let zero_wrapper = message(
        &wkt,
        vec![(
            "w_i32",
            Value::Message(DynamicMessage::new(get("Int32Value"))),
        )],
    );
    let unset = DynamicMessage::new(wkt.clone());
    let batch = convert(&wkt, &[full, zero_wrapper, unset]);
    let column = |name: &str| batch.column_by_name(name).expect("column").clone();

    let ts: ArrayRef = Arc::new(
        TimestampMicrosecondArray::from(vec![Some(1_700_000_000_123_456), None, None])
            .with_timezone("+00:00"),
    );
    assert_eq!(&column("ts"), &ts);
    let dur: ArrayRef = Arc::new(Int64Array::from(vec![Some(-2_000_500), None, None]));
    assert_eq!(&column("dur"), &dur);
    let w_i32: ArrayRef = Arc::new(Int32Array::from(vec![Some(-3), Some(0), None]));
    assert_eq!(&column("w_i32"), &w_i32);
    let w_u64: ArrayRef = Arc::new(Int64Array::from(vec![Some(6), None, None]));
    assert_eq!(&column("w_u64"), &w_u64);
    let w_float: ArrayRef = Arc::new(Float32Array::from(vec![Some(0.5), None, None]));
    assert_eq!(&column("w_float"), &w_float);
    let w_bool: ArrayRef = Arc::new(BooleanArray::from(vec![Some(false), None, None]));
    assert_eq!(&column("w_bool"), &w_bool);
    let w_bytes: ArrayRef = Arc::new(LargeBinaryArray::from(vec![Some(&[9u8][..]), None, None]));
    assert_eq!(&column("w_bytes"), &w_bytes);
    let st: ArrayRef = Arc::new(StringArray::from(vec![
        Some(r#"{"a\"":{"ok":true},"b":[1.0,"two",null,"NaN"]}"#),
        None,
        None,
    ]));
    assert_eq!(&column("st"), &st);
    let val: ArrayRef = Arc::new(StringArray::from(vec![Some(r#""v""#), None, None]));
    assert_eq!(&column("val"), &val);
    let list: ArrayRef = Arc::new(StringArray::from(vec![
        Some(r#"[1.0,"two",null,"NaN"]"#),
        None,
        None,
    ]));
    assert_eq!(&column("list"), &list);
    let empty: ArrayRef = Arc::new(BooleanArray::from(vec![Some(true), None, None]));
    assert_eq!(&column("empty"), &empty);
    let rows = rows_json(&batch);
    assert_eq!(
        rows[0]["any"],
        json!({"type_url": "type.googleapis.com/t.Item", "value": "0102"})
    );
    assert_eq!(rows[2]["any"], json!(null));
    assert_eq!(rows[0]["times"], json!(["1970-01-01T00:00:00.000001Z"]));
}

#[test]
fn converts_into_a_newer_table_schema() {
    let v1 = parse(
        r#"syntax = "proto3"; package t;
        message Sub { int32 x = 1; }
        message Rec { int32 n = 1; float f = 2; Sub sub = 3; string dropped = 4;
                      repeated Sub subs = 5; map<string, Sub> by_name = 6; }"#,
        &[],
    )
    .expect("v1");
    let v2 = parse(
        r#"syntax = "proto3"; package t;
        message Sub { int64 x = 1; string y = 2; }
        message Rec { int64 n = 1; double f = 2; Sub sub = 3; repeated Sub subs = 5;
                      map<string, Sub> by_name = 6; string added = 7; }"#,
        &[],
    )
    .expect("v2");
    let rec = descriptor(&v1, "Rec");
    let sub = descriptor(&v1, "Sub");
    let sub_value = |x: i32| Value::Message(message(&sub, vec![("x", Value::I32(x))]));
    let row = message(
        &rec,
        vec![
            ("n", Value::I32(-7)),
            ("f", Value::F32(0.5)),
            ("sub", sub_value(1)),
            ("dropped", Value::String("gone".into())),
            ("subs", Value::List(vec![sub_value(2)])),
            (
                "by_name",
                Value::Map(HashMap::from([(MapKey::String("k".into()), sub_value(3))])),
            ),
        ],
    );
    let target = target_of(&descriptor(&v2, "Rec"));
    let mut converter = ProtobufConverter::new(&rec, target.clone()).expect("converter");
    converter.append(&row).expect("append");
    let batch = parquet_round_trip(&target, converter.finish().expect("finish"));
    assert_eq!(
        rows_json(&batch),
        json!([{
            "n": -7,
            "f": 0.5,
            "sub": {"x": 1, "y": null},
            "subs": [{"x": 2, "y": null}],
            "by_name": {"k": {"x": 3, "y": null}},
            "added": null,
        }])
    );
}

#[test]
fn incompatible_targets_are_schema_errors() {
    let schema = schema();
    let scalars = descriptor(&schema, "Scalars");
    let target = |field: Field| Arc::new(ArrowSchema::new(vec![field]));
    for field in [
        // Narrowing.
        Field::new("i64", DataType::Int32, true),
        Field::new("dbl", DataType::Float32, true),
        // uint32 is a long.
        Field::new("u32", DataType::Int32, true),
        Field::new("text", DataType::Int64, true),
        Field::new("color", DataType::Int32, true),
        // A required column the message lacks.
        Field::new("missing", DataType::Utf8, false),
        // A type no message maps to.
        Field::new("unmapped", DataType::Float16, true),
    ] {
        let name = field.name().clone();
        match ProtobufConverter::new(&scalars, target(field)) {
            Err(Error::Schema(message)) => assert!(message.contains(&name), "{message}"),
            other => panic!("{name}: expected a schema error, got {other:?}"),
        }
    }
    // A nullable column the message lacks is fine.
    let mut converter = ProtobufConverter::new(
        &scalars,
        target(Field::new("missing", DataType::Utf8, true)),
    )
    .expect("converter");
    converter
        .append(&DynamicMessage::new(scalars.clone()))
        .expect("append");
    let arrays = converter.finish().expect("finish");
    assert_eq!(arrays[0].null_count(), 1);
}

#[test]
fn failed_rows_leave_nothing_behind() {
    let schema = schema();
    let bigs = descriptor(&schema, "Bigs");
    let big = descriptor(&schema, "Big");
    let big_value = |s: &str, u: u64| {
        Value::Message(message(
            &big,
            vec![("s", Value::String(s.into())), ("u", Value::U64(u))],
        ))
    };
    let good = |id: i64| {
        message(
            &bigs,
            vec![
                ("id", Value::I64(id)),
                ("bigs", Value::List(vec![big_value("ok", 1)])),
                (
                    "named",
                    Value::Map(HashMap::from([(
                        MapKey::String("k".into()),
                        big_value("v", 2),
                    )])),
                ),
            ],
        )
    };
    // Fails on the second list element, after its string went into the buffers.
    let in_list = message(
        &bigs,
        vec![
            ("id", Value::I64(99)),
            (
                "bigs",
                Value::List(vec![big_value("first", 1), big_value("second", u64::MAX)]),
            ),
        ],
    );
    // Fails in a map value, after the list and the key were written.
    let in_map = message(
        &bigs,
        vec![
            ("id", Value::I64(98)),
            ("bigs", Value::List(vec![big_value("x", 1)])),
            (
                "named",
                Value::Map(HashMap::from([(
                    MapKey::String("k".into()),
                    big_value("v", u64::MAX),
                )])),
            ),
        ],
    );
    let target = target_of(&bigs);
    let mut converter = ProtobufConverter::new(&bigs, target.clone()).expect("converter");
    converter.append(&good(1)).expect("append");
    for bad in [&in_list, &in_map] {
        match converter.append(bad) {
            Err(Error::Decode(message)) => {
                assert!(message.contains(".u`"), "{message}");
                assert!(message.contains("18446744073709551615"), "{message}");
            }
            other => panic!("expected a decode error, got {other:?}"),
        }
        assert_eq!(converter.len(), 1);
    }
    converter.append(&good(2)).expect("append");
    assert_eq!(converter.len(), 2);
    let batch = parquet_round_trip(&target, converter.finish().expect("finish"));
    let row = |id: i64| {
        json!({
            "id": id,
            "bigs": [{"s": "ok", "u": 1}],
            "named": {"k": {"s": "v", "u": 2}},
        })
    };
    assert_eq!(rows_json(&batch), json!([row(1), row(2)]));
}

#[test]
fn a_message_of_another_type_is_refused() {
    let schema = schema();
    let scalars = descriptor(&schema, "Scalars");
    let mut converter = ProtobufConverter::new(&scalars, target_of(&scalars)).expect("converter");
    let other = DynamicMessage::new(descriptor(&schema, "Item"));
    assert!(matches!(converter.append(&other), Err(Error::Decode(_))));
    assert_eq!(converter.len(), 0);
}

#[test]
fn buffers_are_counted_and_released_by_finish() {
    let schema = schema();
    let scalars = descriptor(&schema, "Scalars");
    let mut converter = ProtobufConverter::new(&scalars, target_of(&scalars)).expect("converter");
    let empty = converter.buffered_bytes();
    let row = message(&scalars, vec![("text", Value::String("x".repeat(1000)))]);
    for _ in 0..100 {
        converter.append(&row).expect("append");
    }
    assert!(converter.buffered_bytes() >= empty + 100_000);
    let arrays = converter.finish().expect("finish");
    assert_eq!(arrays[0].len(), 100);
    assert!(converter.buffered_bytes() < 100_000);
    // Finishing again gives empty arrays of the same types.
    let arrays = converter.finish().expect("finish");
    assert!(arrays.iter().all(|a| a.is_empty()));
}

proptest! {
    #[test]
    fn scalar_values_round_trip(
        i32_value in any::<i32>(),
        u32_value in any::<u32>(),
        i64_value in any::<i64>(),
        u64_value in any::<u64>(),
        text in ".{0,20}",
        raw in proptest::collection::vec(any::<u8>(), 0..20),
    ) {
        let schema = schema();
        let scalars = descriptor(&schema, "Scalars");
        let row = message(&scalars, vec![
            ("i32", Value::I32(i32_value)),
            ("u32", Value::U32(u32_value)),
            ("i64", Value::I64(i64_value)),
            ("u64", Value::U64(u64_value)),
            ("text", Value::String(text.clone())),
            ("raw", Value::Bytes(raw.clone().into())),
        ]);
        let target = target_of(&scalars);
        let mut converter = ProtobufConverter::new(&scalars, target.clone()).expect("converter");
        let appended = converter.append(&row);
        prop_assert_eq!(appended.is_ok(), i64::try_from(u64_value).is_ok());
        if appended.is_ok() {
            let batch = parquet_round_trip(&target, converter.finish().expect("finish"));
            let column = |name: &str| batch.column_by_name(name).expect("column").clone();
            prop_assert_eq!(&column("i32"), &(Arc::new(Int32Array::from(vec![i32_value])) as ArrayRef));
            prop_assert_eq!(&column("u32"), &(Arc::new(Int64Array::from(vec![i64::from(u32_value)])) as ArrayRef));
            prop_assert_eq!(&column("i64"), &(Arc::new(Int64Array::from(vec![i64_value])) as ArrayRef));
            prop_assert_eq!(&column("u64"), &(Arc::new(Int64Array::from(vec![u64_value as i64])) as ArrayRef));
            prop_assert_eq!(&column("text"), &(Arc::new(StringArray::from(vec![text])) as ArrayRef));
            prop_assert_eq!(&column("raw"), &(Arc::new(LargeBinaryArray::from_vec(vec![&raw[..]])) as ArrayRef));
        } else {
            prop_assert_eq!(converter.len(), 0);
        }
    }
}
