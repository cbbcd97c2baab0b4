//! Key conversion (`table.topic.convert.key.type`) through conversion jobs over a real stream
//! store and schema registry: the `_key` column for Avro record and primitive keys, JSON
//! Schema and Protobuf keys, `string` keys, null keys, key schema evolution, and bad keys as
//! dead letters, with every row's `_key` next to its own value (checked through `_kafka`).
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;

use std::collections::BTreeMap;

use apache_avro::types::Value as AvroValue;
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{Int32Type, Int64Type};
use bytes::Bytes;
use inlet_schema_registry::framing;
use inlet_table_worker::{JobOutput, TableContext, ValueType};

const VALUE: &str =
    r#"{"type":"record","name":"V","namespace":"t","fields":[{"name":"n","type":"long"}]}"#;
const KEY_V1: &str = r#"{"type":"record","name":"K","namespace":"t","fields":[{"name":"id","type":"long"},{"name":"region","type":"string"}]}"#;
const KEY_V2: &str = r#"{"type":"record","name":"K","namespace":"t","fields":[{"name":"id","type":"long"},{"name":"region","type":"string"},{"name":"zone","type":["null","int"],"default":null}]}"#;

/// What this file's tests add to the common fixture: [`VALUE`]'s id.
struct Keys {
    value_id: u32,
}

type Fixture = common::Fixture<Keys>;

async fn fixture() -> Fixture {
    let f = common::Fixture::open().await;
    let value_id = common::register_typed(&f.registry, "t-value", VALUE, None).await;
    f.with(Keys { value_id })
}

fn avro(schema: &str, value: AvroValue) -> Vec<u8> {
    let schema = apache_avro::Schema::parse_str(schema).expect("schema");
    apache_avro::to_avro_datum(&schema, value).expect("datum")
}

/// A key record's `id` and `region` (`r<id>`) fields.
fn key_fields(id: i64) -> Vec<(String, AvroValue)> {
    let region = AvroValue::String(format!("r{id}"));
    vec![
        ("id".into(), AvroValue::Long(id)),
        ("region".into(), region),
    ]
}

fn value(f: &Fixture, n: i64) -> Option<Bytes> {
    let datum = avro(
        VALUE,
        AvroValue::Record(vec![("n".into(), AvroValue::Long(n))]),
    );
    Some(Bytes::from(framing::frame(f.value_id, &datum)))
}

fn context(f: &Fixture, key_type: ValueType) -> TableContext {
    TableContext {
        last_column_id: 0,
        key_type,
        ..common::table_context(
            &f.registry,
            format!("file://{}/warehouse/t/data", f.dir.path().display()),
        )
    }
}

/// Converts everything `records` (key, value) became, as one range.
async fn convert(
    f: &Fixture,
    ctx: &TableContext,
    records: &[(Option<Bytes>, Option<Bytes>)],
) -> (JobOutput, Vec<RecordBatch>) {
    let stream = common::create_stream(&f.store, &format!("kafka/t{}/0", rand_suffix())).await;
    // Two stored batches, so that rows cross a batch boundary.
    let (a, b) = records.split_at(records.len() / 2);
    for part in [a, b].into_iter().filter(|p| !p.is_empty()) {
        common::append_records(&f.store, stream, part).await;
    }
    let out = common::convert_whole(&f.store, ctx, stream).await;
    let out = out.expect("convert");
    let batches = common::read_outputs(&out);
    (out, batches)
}

/// A one-row struct key's `id` and `region`.
fn id_and_region(k: &arrow::array::StructArray) -> (i64, String) {
    let id = k.column_by_name("id").expect("id");
    let region = k.column_by_name("region").expect("region");
    let region = region.as_string::<i32>().value(0).to_string();
    (id.as_primitive::<Int64Type>().value(0), region)
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Per row: (`_kafka.offset`, `n`, `_key`).
fn rows(batches: &[RecordBatch]) -> Vec<(i64, i64, ArrayRef)> {
    let mut out = Vec::new();
    for b in batches {
        let kafka = b.column_by_name("_kafka").expect("_kafka").as_struct();
        let offsets = kafka.column(1).as_primitive::<Int64Type>();
        let n = b
            .column_by_name("n")
            .expect("n")
            .as_primitive::<Int64Type>();
        let key = b.column_by_name("_key").expect("_key");
        for i in 0..b.num_rows() {
            out.push((offsets.value(i), n.value(i), key.slice(i, 1)));
        }
    }
    out
}

#[tokio::test]
async fn avro_record_keys_become_a_struct_that_evolves() {
    let f = fixture().await;
    let k1 = common::register_typed(&f.registry, "t-key", KEY_V1, None).await;
    let k2 = common::register_typed(&f.registry, "t-key", KEY_V2, None).await;
    let key_v1 = |id: i64| {
        let d = avro(KEY_V1, AvroValue::Record(key_fields(id)));
        Some(Bytes::from(framing::frame(k1, &d)))
    };
    let key_v2 = |id: i64| {
        let mut fields = key_fields(id);
        let zone = AvroValue::Union(1, Box::new(AvroValue::Int(id as i32 * 10)));
        fields.push(("zone".into(), zone));
        let d = avro(KEY_V2, AvroValue::Record(fields));
        Some(Bytes::from(framing::frame(k2, &d)))
    };
    let records = vec![
        (key_v1(0), value(&f, 0)),
        (None, value(&f, 1)),
        (key_v2(2), value(&f, 2)),
        // A good key with a bad value: a dead letter, and no `_key` left behind for it.
        (key_v1(3), Some(Bytes::from_static(b"\0\0\0\0\x63bad"))),
        (key_v1(4), value(&f, 4)),
        // A key with an unknown schema id.
        (Some(Bytes::from(framing::frame(9999, b"x"))), value(&f, 5)),
        (key_v2(6), value(&f, 6)),
    ];
    let (out, batches) = convert(&f, &context(&f, ValueType::BySchemaId), &records).await;
    let dead: Vec<i64> = out.dead_letters.iter().map(|d| d.offset).collect();
    assert_eq!(dead, vec![3, 5], "{:?}", out.dead_letters);
    assert!(
        out.dead_letters[1]
            .error
            .contains("key: unknown schema id 9999"),
        "{}",
        out.dead_letters[1].error
    );
    let key_field = out.schema.field_by_name("_key").expect("_key");
    assert!(!key_field.required);
    let iceberg::spec::Type::Struct(key_type) = &*key_field.field_type else {
        panic!("_key is {}", key_field.field_type);
    };
    let names: Vec<&str> = key_type.fields().iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["id", "region", "zone"]);

    let got: BTreeMap<i64, Option<(i64, String, Option<i32>)>> = rows(&batches)
        .into_iter()
        .map(|(offset, n, key)| {
            assert_eq!(offset, n, "the row's value is its own record's");
            let k = key.as_struct();
            let decoded = (!k.is_null(0)).then(|| {
                let zone = k.column_by_name("zone").expect("zone");
                let (id, region) = id_and_region(k);
                let zone = (!zone.is_null(0)).then(|| zone.as_primitive::<Int32Type>().value(0));
                (id, region, zone)
            });
            (offset, decoded)
        })
        .collect();
    let expected = BTreeMap::from([
        (0, Some((0, "r0".to_string(), None))),
        (1, None),
        (2, Some((2, "r2".to_string(), Some(20)))),
        (4, Some((4, "r4".to_string(), None))),
        (6, Some((6, "r6".to_string(), Some(60)))),
    ]);
    assert_eq!(got, expected);

    // The table exists with v1 keys only: a range with v2 keys proposes `_key.zone`.
    let mut ctx = context(&f, ValueType::BySchemaId);
    let (first, _) = convert(&f, &ctx, &[(key_v1(0), value(&f, 0))]).await;
    assert!(first.schema.field_by_name("_key.region").is_some());
    assert!(first.schema.field_by_name("_key.zone").is_none());
    ctx.schema = Some(first.schema.clone());
    let (next, _) = convert(&f, &ctx, &[(key_v2(1), value(&f, 1))]).await;
    assert!(
        next.changes.iter().any(|c| matches!(c,
            inlet_table_worker::Change::AddColumn { path, .. } if path == &["_key", "zone"])),
        "{:?}",
        next.changes
    );
    let old_id = first.schema.field_by_name("_key").expect("_key").id;
    assert_eq!(next.schema.field_by_name("_key").expect("_key").id, old_id);
}

#[tokio::test]
async fn primitive_json_and_protobuf_keys() {
    let f = fixture().await;
    // An Avro "string" key: `_key` is a string.
    let s = common::register_typed(&f.registry, "t-key", r#""string""#, None).await;
    let string_key = |v: &str| {
        let d = avro(r#""string""#, AvroValue::String(v.into()));
        Some(Bytes::from(framing::frame(s, &d)))
    };
    let (out, batches) = convert(
        &f,
        &context(&f, ValueType::BySchemaId),
        &[
            (string_key("a"), value(&f, 0)),
            (string_key("b"), value(&f, 1)),
        ],
    )
    .await;
    assert!(out.dead_letters.is_empty(), "{:?}", out.dead_letters);
    let keys: Vec<String> = rows(&batches)
        .iter()
        .map(|(_, _, k)| k.as_string::<i32>().value(0).to_string())
        .collect();
    assert_eq!(keys, ["a", "b"]);

    // A JSON Schema key with an integer property.
    let json = common::register_typed(
        &f.registry,
        "j-key",
        r#"{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]}"#,
        Some("JSON"),
    )
    .await;
    let json_key = |id: i64| {
        Some(Bytes::from(framing::frame(
            json,
            format!(r#"{{"id":{id}}}"#).as_bytes(),
        )))
    };
    let (out, batches) = convert(
        &f,
        &context(&f, ValueType::BySchemaId),
        &[(json_key(7), value(&f, 0)), (json_key(8), value(&f, 1))],
    )
    .await;
    assert!(out.dead_letters.is_empty(), "{:?}", out.dead_letters);
    let ids: Vec<i64> = rows(&batches)
        .iter()
        .map(|(_, _, k)| {
            k.as_struct()
                .column_by_name("id")
                .expect("id")
                .as_primitive::<Int64Type>()
                .value(0)
        })
        .collect();
    assert_eq!(ids, [7, 8]);

    // A Protobuf key message: message indexes [0] (one zero byte), then the message.
    let proto = common::register_typed(
        &f.registry,
        "p-key",
        "syntax = \"proto3\"; package t; message K { int64 id = 1; string region = 2; }",
        Some("PROTOBUF"),
    )
    .await;
    let proto_key = |id: u8, region: &str| {
        let mut m = vec![0u8, 0x08, id, 0x12, region.len() as u8];
        m.extend_from_slice(region.as_bytes());
        Some(Bytes::from(framing::frame(proto, &m)))
    };
    let (out, batches) = convert(
        &f,
        &context(&f, ValueType::BySchemaId),
        &[
            (proto_key(5, "eu"), value(&f, 0)),
            (None, value(&f, 1)),
            (proto_key(6, "us"), value(&f, 2)),
        ],
    )
    .await;
    assert!(out.dead_letters.is_empty(), "{:?}", out.dead_letters);
    let got: Vec<Option<(i64, String)>> = rows(&batches)
        .iter()
        .map(|(_, _, k)| {
            let k = k.as_struct();
            (!k.is_null(0)).then(|| id_and_region(k))
        })
        .collect();
    assert_eq!(got, [Some((5, "eu".into())), None, Some((6, "us".into()))]);
}

#[tokio::test]
async fn string_keys_and_unframed_keys_of_the_latest_schema() {
    let f = fixture().await;
    let (out, batches) = convert(
        &f,
        &context(&f, ValueType::String),
        &[
            (Some(Bytes::from_static(b"alpha")), value(&f, 0)),
            (Some(Bytes::from_static(b"\xff\xfe")), value(&f, 1)),
            (None, value(&f, 2)),
            (Some(Bytes::from_static(b"gamma")), value(&f, 3)),
        ],
    )
    .await;
    assert_eq!(out.dead_letters.len(), 1);
    assert!(
        out.dead_letters[0].error.contains("UTF-8"),
        "{}",
        out.dead_letters[0].error
    );
    let keys: Vec<(i64, Option<String>)> = rows(&batches)
        .iter()
        .map(|(o, _, k)| {
            let k = k.as_string::<i32>();
            (*o, (!k.is_null(0)).then(|| k.value(0).to_string()))
        })
        .collect();
    assert_eq!(
        keys,
        [
            (0, Some("alpha".into())),
            (2, None),
            (3, Some("gamma".into()))
        ]
    );
    let key_type = &out.schema.field_by_name("_key").expect("_key").field_type;
    assert_eq!(key_type.to_string(), "string");

    // Unframed Avro long keys of the subject's latest schema.
    common::register_typed(&f.registry, "t-key", r#""long""#, None).await;
    let long_key = |v: i64| Some(Bytes::from(avro(r#""long""#, AvroValue::Long(v))));
    let (out, batches) = convert(
        &f,
        &context(
            &f,
            ValueType::ByLatestSchema {
                subject: "t-key".into(),
            },
        ),
        &[
            (long_key(-3), value(&f, 0)),
            (long_key(1 << 40), value(&f, 1)),
        ],
    )
    .await;
    assert!(out.dead_letters.is_empty(), "{:?}", out.dead_letters);
    let keys: Vec<i64> = rows(&batches)
        .iter()
        .map(|(_, _, k)| k.as_primitive::<Int64Type>().value(0))
        .collect();
    assert_eq!(keys, [-3, 1 << 40]);
}

#[tokio::test]
async fn a_value_field_named_key_is_refused_when_keys_are_converted() {
    let f = fixture().await;
    let clash = common::register_typed(
        &f.registry,
        "c-value",
        r#"{"type":"record","name":"C","fields":[{"name":"_key","type":"long"}]}"#,
        None,
    )
    .await;
    let d = avro(
        r#"{"type":"record","name":"C","fields":[{"name":"_key","type":"long"}]}"#,
        AvroValue::Record(vec![("_key".into(), AvroValue::Long(1))]),
    );
    let stream = common::create_stream(&f.store, "kafka/c/0").await;
    common::append_records(
        &f.store,
        stream,
        &[(
            Some(Bytes::from_static(b"k")),
            Some(Bytes::from(framing::frame(clash, &d))),
        )],
    )
    .await;
    let ctx = context(&f, ValueType::String);
    let out = common::convert_whole(&f.store, &ctx, stream).await;
    let err = out.expect_err("a clash");
    assert!(err.to_string().contains("_key"), "{err}");
}
