//! Protobuf payloads → Arrow → zstd Parquet, the table worker's Protobuf path: the registry's
//! decoder (message indexes, then prost-reflect's `DynamicMessage`) and `ProtobufConverter`.
//!
//! ```text
//! cargo bench -p inlet-table-worker --bench protobuf_arrow
//! ```
//!
//! A 20-field message of about 400 bytes (the shape of `avro_arrow`'s flat record: int64s,
//! int32s, doubles, strings of 20–40 characters, a bool, a Timestamp and an optional string),
//! 100,000 payloads generated before timing. Three measurements on one thread: decode only
//! (payload → `DynamicMessage`), decode + convert (+ `finish`), and decode + convert + one zstd
//! Parquet file in memory. A summary line per stage gives the best of 5 passes as leaf fields
//! per second and input MiB/s; then the peak heap of one full pass (on top of the payloads).
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod support;

use std::hint::black_box;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use criterion::{criterion_group, criterion_main, Criterion};
use inlet_schema_registry::protobuf::{decode_payload, parse, ProtoSchema};
use inlet_table_worker::{protobuf_to_iceberg, ProtobufConverter};
use prost_reflect::{DynamicMessage, Value};
use support::{Rng, Stage, StageBench};

const RECORDS: usize = 100_000;
const LEAVES: usize = 20;

const PROTO: &str = r#"syntax = "proto3";
package bench;
import "google/protobuf/timestamp.proto";
message Flat {
  int64 id = 1; int64 account = 2; int64 sequence = 3;
  int32 quantity = 4; int32 region = 5;
  double price = 6; double discount = 7;
  string customer = 8; string email = 9; string street = 10; string city = 11;
  string country = 12; string product = 13; string category = 14; string currency = 15;
  string channel = 16; string status = 17;
  bool paid = 18;
  google.protobuf.Timestamp created = 19;
  optional string note = 20;
}
"#;

fn payloads(schema: &ProtoSchema) -> Vec<Vec<u8>> {
    let desc = schema
        .pool
        .get_message_by_name("bench.Flat")
        .expect("message");
    let ts = schema
        .pool
        .get_message_by_name("google.protobuf.Timestamp")
        .expect("timestamp");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    (0..RECORDS)
        .map(|i| {
            let mut m = DynamicMessage::new(desc.clone());
            for (n, name) in ["id", "account", "sequence"].iter().enumerate() {
                m.set_field_by_name(name, Value::I64((rng.next() >> 1) as i64 + n as i64));
            }
            m.set_field_by_name("quantity", Value::I32((rng.next() % 1000) as i32));
            m.set_field_by_name("region", Value::I32((rng.next() % 50) as i32));
            m.set_field_by_name("price", Value::F64((rng.next() % 100_000) as f64 / 100.0));
            m.set_field_by_name("discount", Value::F64((rng.next() % 100) as f64 / 100.0));
            for name in support::FLAT_STRINGS {
                m.set_field_by_name(name, Value::String(rng.text(20, 40)));
            }
            m.set_field_by_name("paid", Value::Bool(i % 2 == 0));
            let mut t = DynamicMessage::new(ts.clone());
            t.set_field_by_name("seconds", Value::I64(1_700_000_000 + i as i64));
            t.set_field_by_name("nanos", Value::I32(123_000));
            m.set_field_by_name("created", Value::Message(t));
            if i % 3 == 0 {
                m.set_field_by_name("note", Value::String(rng.text(20, 40)));
            }
            // Message index [0] as the single byte 0, then the message.
            let mut p = vec![0u8];
            p.extend(prost_reflect::prost::Message::encode_to_vec(&m));
            p
        })
        .collect()
}

fn converter(schema: &ProtoSchema) -> (ProtobufConverter, SchemaRef) {
    let desc = schema
        .pool
        .get_message_by_name("bench.Flat")
        .expect("message");
    let table = protobuf_to_iceberg(&desc).expect("maps");
    let target = Arc::new(iceberg::arrow::schema_to_arrow_schema(&table).expect("arrow"));
    (
        ProtobufConverter::new(&desc, target.clone()).expect("converter"),
        target,
    )
}

fn decode_only(schema: &ProtoSchema, data: &[Vec<u8>]) {
    for p in data {
        black_box(decode_payload(schema, p).expect("decodes"));
    }
}

fn convert(schema: &ProtoSchema, c: &mut ProtobufConverter, data: &[Vec<u8>]) {
    for p in data {
        let m = decode_payload(schema, p).expect("decodes");
        c.append(&m).expect("converts");
    }
    black_box(c.finish().expect("finish"));
}

fn to_parquet(
    schema: &ProtoSchema,
    c: &mut ProtobufConverter,
    target: &SchemaRef,
    data: &[Vec<u8>],
) -> usize {
    for p in data {
        let m = decode_payload(schema, p).expect("decodes");
        c.append(&m).expect("converts");
    }
    support::zstd_parquet(target, c.finish().expect("finish"))
}

fn bench(c: &mut Criterion) {
    let schema = parse(PROTO, &[]).expect("schema");
    let data = payloads(&schema);
    let bytes: usize = data.iter().map(Vec::len).sum();
    let (mut conv, target) = converter(&schema);
    let bench = StageBench {
        group: "protobuf_arrow/flat",
        title: "protobuf flat",
        decode: "decode to DynamicMessage",
        records: RECORDS,
        input_bytes: bytes,
        leaves: LEAVES,
    };
    bench.run(c, |stage| match stage {
        Stage::Decode => {
            decode_only(&schema, &data);
            0
        }
        Stage::Convert => {
            convert(&schema, &mut conv, &data);
            0
        }
        Stage::Parquet => to_parquet(&schema, &mut conv, &target, &data),
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
