//! Data files of the table workers read by an independent reader: records written with Avro
//! (nested records, arrays, maps, unions, enums, logical types), Protobuf and JSON Schema are
//! converted by a real conversion job from a real stream store, and `pyarrow`
//! (`tests/clients/read_parquet.py`) reads the Parquet files back.
//!
//! The interpreter: `INLET_TEST_PYTHON`, else the venv of `scripts/test-env.sh`. Without
//! pyarrow the test is skipped locally and fails in CI.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;

use std::sync::Arc;
use std::time::Duration;

use apache_avro::types::Value as AvroValue;
use bytes::Bytes;
use common::python::{require_python, run, script};
use common::wire::{encode_batch, BatchOptions};
use iceberg::io::FileIO;
use iceberg::spec::PartitionSpec;
use inlet_schema_registry::{framing, RegistryConfig, SchemaRequest};
use inlet_storage::{AppendOptions, MetaStore, StreamStore};
use inlet_table_worker::data_file::{FileSettings, FileTarget};
use inlet_table_worker::MemoryPool;
use inlet_table_worker::{convert_range, JobSpec, TableContext, ValueType};
use kafka_protocol::records::Compression;
use serde_json::{json, Value};

const ORDER: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
  {"name":"id","type":"long"},
  {"name":"customer","type":{"type":"record","name":"Customer","fields":[
     {"name":"name","type":"string"},{"name":"vip","type":"boolean"}]}},
  {"name":"lines","type":{"type":"array","items":{"type":"record","name":"Line","fields":[
     {"name":"sku","type":"string"},{"name":"qty","type":"int"}]}}},
  {"name":"attrs","type":{"type":"map","values":"string"}},
  {"name":"note","type":["null","string"],"default":null},
  {"name":"choice","type":["null","int","string"],"default":null},
  {"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID"]}},
  {"name":"day","type":{"type":"int","logicalType":"date"}},
  {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
  {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
  {"name":"ref","type":{"type":"string","logicalType":"uuid"}}
]}"#;

fn order(n: i64) -> AvroValue {
    AvroValue::Record(vec![
        ("id".into(), AvroValue::Long(n)),
        (
            "customer".into(),
            AvroValue::Record(vec![
                ("name".into(), AvroValue::String(format!("c{n}"))),
                ("vip".into(), AvroValue::Boolean(n % 2 == 0)),
            ]),
        ),
        (
            "lines".into(),
            AvroValue::Array(vec![AvroValue::Record(vec![
                ("sku".into(), AvroValue::String("A-1".into())),
                ("qty".into(), AvroValue::Int(n as i32 + 1)),
            ])]),
        ),
        (
            "attrs".into(),
            AvroValue::Map([("k".to_string(), AvroValue::String("v".into()))].into()),
        ),
        (
            "note".into(),
            if n == 0 {
                AvroValue::Union(0, Box::new(AvroValue::Null))
            } else {
                AvroValue::Union(1, Box::new(AvroValue::String("hi".into())))
            },
        ),
        (
            "choice".into(),
            AvroValue::Union(2, Box::new(AvroValue::String("s".into()))),
        ),
        ("status".into(), AvroValue::Enum(1, "PAID".into())),
        ("day".into(), AvroValue::Date(19_723)),
        ("at".into(), AvroValue::TimestampMillis(1_704_067_200_123)),
        (
            "price".into(),
            AvroValue::Decimal(apache_avro::Decimal::from(12_345i64.to_be_bytes().to_vec())),
        ),
        (
            "ref".into(),
            AvroValue::Uuid(
                "0f8fad5b-d9cb-469f-a165-70867728950e"
                    .parse()
                    .expect("uuid"),
            ),
        ),
    ])
}

fn kafka_batch(values: &[Bytes]) -> Bytes {
    let records: Vec<_> = values.iter().map(|v| (None, Some(v.clone()))).collect();
    encode_batch(
        &records,
        &BatchOptions {
            timestamp_step: 0,
            compression: Compression::Lz4,
            ..BatchOptions::default()
        },
    )
}

/// Registers `schema` under `subject`, appends the framed `payloads` (built from the id) to a
/// stream, converts the range with a conversion job, and returns the local paths of the files.
fn convert(
    dir: &std::path::Path,
    schema_type: Option<&str>,
    schema: &str,
    payloads: impl FnOnce(u32) -> Vec<Bytes>,
) -> Vec<String> {
    convert_job(dir, schema_type, schema, payloads)
        .data_files
        .iter()
        .map(|f| f.file_path().trim_start_matches("file://").to_string())
        .collect()
}

/// The output of one conversion job of `payloads` (registered under `schema`) in `dir`.
fn convert_job(
    dir: &std::path::Path,
    schema_type: Option<&str>,
    schema: &str,
    payloads: impl FnOnce(u32) -> Vec<Bytes>,
) -> inlet_table_worker::JobOutput {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let meta_url = format!("sqlite://{}", dir.join("meta.db").display());
        let store = StreamStore::builder(dir.join("wal"))
            .meta(MetaStore::connect(&meta_url).await.expect("meta"))
            .object_store_url(format!("file://{}", dir.join("objects").display()))
            .background_tasks(false)
            .open()
            .await
            .expect("store");
        let registry = Arc::new(
            inlet_schema_registry::open(store.meta().clone(), RegistryConfig::default())
                .await
                .expect("registry"),
        );
        let (id, _) = registry
            .register(
                "t-value",
                &SchemaRequest {
                    schema: schema.into(),
                    schema_type: schema_type.map(str::to_string),
                    ..SchemaRequest::default()
                },
            )
            .await
            .expect("register");
        let values = payloads(id);
        let stream = store.create_stream("kafka/t/0").await.expect("stream").id;
        store
            .append_with(
                stream,
                kafka_batch(&values),
                values.len() as u32,
                AppendOptions {
                    write_base_offset: true,
                    ..AppendOptions::default()
                },
            )
            .await
            .expect("append");
        let ctx = TableContext {
            last_column_id: 0,
            registry,
            value_type: ValueType::BySchemaId,
            key_type: ValueType::Raw,
            transform: inlet_table_worker::ValueTransform::None,
            schema: None,
            target: FileTarget {
                file_io: FileIO::new_with_fs(),
                schema: Arc::new(iceberg::spec::Schema::builder().build().expect("empty")),
                spec: Arc::new(PartitionSpec::unpartition_spec()),
                data_location: format!("file://{}/warehouse/t/data", dir.display()),
            },
            dead_letter_target: None,
            partition_by: Vec::new(),
            settings: FileSettings::default(),
            event_time_field: None,
            dead_letter_floor: Default::default(),
            upsert: None,
            file_tag: None,
        };
        let out = convert_range(
            &store,
            &MemoryPool::new(64 << 20),
            &ctx,
            JobSpec {
                partition: 0,
                stream,
                from: 0,
                until: None,
                max_input_bytes: 8 << 20,
            },
        )
        .await
        .expect("convert");
        assert!(out.dead_letters.is_empty(), "{:?}", out.dead_letters);
        assert_eq!(out.rows as usize, values.len());
        out
    })
}

/// Rows and the schema line as pyarrow reads them.
fn read_with_pyarrow(python: &std::path::Path, files: &[String]) -> (Vec<Value>, Value) {
    let mut args: Vec<std::ffi::OsString> = vec![script("read_parquet.py").into()];
    args.extend(files.iter().map(Into::into));
    let (status, output) = run(python, &args, Duration::from_secs(120));
    assert!(
        status.is_some_and(|s| s.success()),
        "pyarrow failed:\n{output}"
    );
    let rows = output
        .lines()
        .filter_map(|l| l.strip_prefix("row: "))
        .map(|l| serde_json::from_str(l).expect("row json"))
        .collect();
    let schema = output
        .lines()
        .find_map(|l| l.strip_prefix("schema: "))
        .map(|l| serde_json::from_str(l).expect("schema json"))
        .expect("schema line");
    (rows, schema)
}

fn pyarrow() -> Option<std::path::PathBuf> {
    require_python("import pyarrow.parquet", "pyarrow")
}

#[test]
fn pyarrow_reads_converted_avro_records() {
    let Some(python) = pyarrow() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let schema = apache_avro::Schema::parse_str(ORDER).expect("schema");
    let files = convert(dir.path(), None, ORDER, |id| {
        (0..3)
            .map(|n| {
                let datum = apache_avro::to_avro_datum(&schema, order(n)).expect("datum");
                Bytes::from(framing::frame(id, &datum))
            })
            .collect()
    });
    let (rows, schema) = read_with_pyarrow(&python, &files);
    assert_eq!(rows.len(), 3);
    let r = &rows[1];
    assert_eq!(r["id"], 1);
    assert_eq!(r["customer"], json!({"name": "c1", "vip": false}));
    assert_eq!(r["lines"], json!([{"sku": "A-1", "qty": 2}]));
    assert_eq!(r["attrs"], json!([["k", "v"]]));
    assert_eq!(r["note"], "hi");
    assert_eq!(rows[0]["note"], Value::Null);
    assert_eq!(r["choice"]["string"], "s");
    assert_eq!(r["choice"]["int"], Value::Null);
    assert_eq!(r["status"], "PAID");
    assert_eq!(r["day"], "2024-01-01");
    assert_eq!(r["at"], "2024-01-01T00:00:00.123000+00:00");
    assert_eq!(r["price"], "123.45");
    assert_eq!(r["ref"], "0f8fad5bd9cb469fa16570867728950e");
    assert_eq!(r["_kafka"]["offset"], 1);
    assert_eq!(
        schema["ids"]["id"], "1",
        "Iceberg field ids reach the Parquet schema"
    );
}

/// Compaction's copy path (`inlet_table_coordinator::concat`: column chunks copied, no value
/// decoded) makes a file pyarrow reads exactly as it reads the files it came from: every row
/// in order, nested types and logical types included, the Iceberg field ids kept.
#[test]
fn pyarrow_reads_files_merged_by_copying_column_chunks() {
    let Some(python) = pyarrow() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let avro = apache_avro::Schema::parse_str(ORDER).expect("schema");
    let mut inputs = Vec::new();
    let mut table_schema = None;
    for part in 0..3i64 {
        let sub = dir.path().join(format!("p{part}"));
        std::fs::create_dir_all(&sub).expect("dir");
        let out = convert_job(&sub, None, ORDER, |id| {
            (part * 3..part * 3 + 3)
                .map(|n| {
                    let datum = apache_avro::to_avro_datum(&avro, order(n)).expect("datum");
                    Bytes::from(framing::frame(id, &datum))
                })
                .collect()
        });
        assert_eq!(out.data_files.len(), 1);
        table_schema = Some(out.schema.clone());
        inputs.extend(out.data_files);
    }
    let schema = Arc::new(table_schema.expect("a schema"));
    let merged = tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(inlet_table_coordinator::concat::concat(
            &inputs,
            &inlet_table_coordinator::concat::Output {
                file_io: &FileIO::new_with_fs(),
                data_location: &format!("file://{}/merged", dir.path().display()),
                file_name: "merged.parquet",
                schema: &schema,
                spec: &Arc::new(PartitionSpec::unpartition_spec()),
                partition: &iceberg::spec::Struct::empty(),
            },
            0,
        ))
        .expect("concat")
        .expect("files of the table's schema are copied");
    assert_eq!(merged.record_count(), 9);
    let paths: Vec<String> = inputs
        .iter()
        .map(|f| f.file_path().trim_start_matches("file://").to_string())
        .collect();
    let (want, want_schema) = read_with_pyarrow(&python, &paths);
    let (rows, schema) = read_with_pyarrow(
        &python,
        &[merged.file_path().trim_start_matches("file://").to_string()],
    );
    assert_eq!(rows.len(), 9);
    assert_eq!(rows, want, "the same rows, in the inputs' order");
    assert_eq!(schema, want_schema, "the same schema and field ids");
    assert_eq!(rows[4]["id"], 4);
    assert_eq!(rows[4]["customer"], json!({"name": "c4", "vip": true}));
}

const PROTO: &str = r#"syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Shipment {
  int64 id = 1;
  string carrier = 2;
  repeated string parcels = 3;
  map<string, int32> weights = 4;
  Address to = 5;
  google.protobuf.Timestamp sent = 6;
  Kind kind = 7;
  message Address { string city = 1; uint32 zip = 2; }
  enum Kind { STANDARD = 0; EXPRESS = 1; }
}
"#;

#[test]
fn pyarrow_reads_converted_protobuf_records() {
    use prost_reflect::{DynamicMessage, MapKey, Value as PValue};
    let Some(python) = pyarrow() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let parsed = inlet_schema_registry::protobuf::parse(PROTO, &[]).expect("proto");
    let desc = parsed
        .pool
        .get_message_by_name("shop.Shipment")
        .expect("message");
    let files = convert(dir.path(), Some("PROTOBUF"), PROTO, |id| {
        (0..2)
            .map(|n| {
                let mut m = DynamicMessage::new(desc.clone());
                m.set_field_by_name("id", PValue::I64(n));
                m.set_field_by_name("carrier", PValue::String("post".into()));
                m.set_field_by_name(
                    "parcels",
                    PValue::List(vec![PValue::String("a".into()), PValue::String("b".into())]),
                );
                m.set_field_by_name(
                    "weights",
                    PValue::Map([(MapKey::String("a".into()), PValue::I32(7))].into()),
                );
                let mut to = DynamicMessage::new(
                    parsed
                        .pool
                        .get_message_by_name("shop.Shipment.Address")
                        .expect("address"),
                );
                to.set_field_by_name("city", PValue::String("oslo".into()));
                to.set_field_by_name("zip", PValue::U32(150));
                m.set_field_by_name("to", PValue::Message(to));
                let ts_desc = parsed
                    .pool
                    .get_message_by_name("google.protobuf.Timestamp")
                    .expect("timestamp");
                let mut ts = DynamicMessage::new(ts_desc);
                ts.set_field_by_name("seconds", PValue::I64(1_704_067_200));
                ts.set_field_by_name("nanos", PValue::I32(5_000));
                m.set_field_by_name("sent", PValue::Message(ts));
                m.set_field_by_name("kind", PValue::EnumNumber(1));
                // Header, message index [0] as the single byte 0, then the message.
                let mut payload = vec![0u8];
                payload.extend(prost_reflect::prost::Message::encode_to_vec(&m));
                Bytes::from(framing::frame(id, &payload))
            })
            .collect()
    });
    let (rows, _) = read_with_pyarrow(&python, &files);
    assert_eq!(rows.len(), 2);
    let r = &rows[1];
    assert_eq!(r["id"], 1);
    assert_eq!(r["carrier"], "post");
    assert_eq!(r["parcels"], json!(["a", "b"]));
    assert_eq!(r["weights"], json!([["a", 7]]));
    assert_eq!(r["to"], json!({"city": "oslo", "zip": 150}));
    assert_eq!(r["sent"], "2024-01-01T00:00:00.000005+00:00");
    assert_eq!(r["kind"], "EXPRESS");
    assert_eq!(r["_kafka"]["schema_id"], 1);
}

const JSON_SCHEMA: &str = r#"{"type":"object","properties":{
  "id":{"type":"integer"},
  "amount":{"type":"number"},
  "paid_at":{"type":"string","format":"date-time"},
  "tags":{"type":"array","items":{"type":"string"}},
  "payer":{"type":"object","properties":{"name":{"type":"string"}}},
  "extra":{"type":"object","additionalProperties":{"type":"integer"}}},
  "required":["id"]}"#;

#[test]
fn pyarrow_reads_converted_json_records() {
    let Some(python) = pyarrow() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let files = convert(dir.path(), Some("JSON"), JSON_SCHEMA, |id| {
        (0..2)
            .map(|n| {
                let v = json!({"id": n, "amount": 2.5, "paid_at": "2024-01-01T10:00:00.25Z",
                               "tags": ["x"], "payer": {"name": "ada"}, "extra": {"k": 3}});
                Bytes::from(framing::frame(id, v.to_string().as_bytes()))
            })
            .collect()
    });
    let (rows, _) = read_with_pyarrow(&python, &files);
    assert_eq!(rows.len(), 2);
    let r = &rows[1];
    assert_eq!(r["id"], 1);
    assert_eq!(r["amount"], 2.5);
    assert_eq!(r["paid_at"], "2024-01-01T10:00:00.250000+00:00");
    assert_eq!(r["tags"], json!(["x"]));
    assert_eq!(r["payer"], json!({"name": "ada"}));
    assert_eq!(r["extra"], json!([["k", 3]]));
}
