//! JSON Schema payloads → Arrow → zstd Parquet, the table worker's JSON path: the registry's
//! decoder (UTF-8 check, `serde_json` parse, validation against the schema) and
//! `JsonConverter`.
//!
//! ```text
//! cargo bench -p inlet-table-worker --bench json_arrow
//! ```
//!
//! The 20-field record of `avro_arrow`'s flat schema as a JSON object (integers, numbers,
//! strings of 20–40 characters, a boolean, a `date-time` string and an optional string),
//! 100,000 payloads generated before timing. JSON carries its field names, so a record is
//! about 1.9× its Avro size. Three measurements on one thread: decode (parse + validate),
//! decode + convert (+ `finish`), and decode + convert + one zstd Parquet file in memory. The
//! summary gives the best of 5 passes as leaf fields per second and input MiB/s, then the
//! peak heap of one full pass (on top of the payloads).
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod support;

use std::hint::black_box;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use criterion::{criterion_group, criterion_main, Criterion};
use inlet_schema_registry::json_schema::{decode_payload, parse, JsonSchema};
use inlet_table_worker::{json_to_iceberg, JsonConverter};
use serde_json::{json, Map, Value};
use support::{Rng, Stage, StageBench};

const RECORDS: usize = 100_000;
const LEAVES: usize = 20;

fn schema_text() -> String {
    let mut properties = Map::new();
    for name in ["id", "account", "sequence", "quantity", "region"] {
        properties.insert(name.into(), json!({"type": "integer"}));
    }
    for name in ["price", "discount"] {
        properties.insert(name.into(), json!({"type": "number"}));
    }
    for name in support::FLAT_STRINGS {
        properties.insert(name.into(), json!({"type": "string"}));
    }
    properties.insert("paid".into(), json!({"type": "boolean"}));
    properties.insert(
        "created".into(),
        json!({"type": "string", "format": "date-time"}),
    );
    properties.insert("note".into(), json!({"type": ["string", "null"]}));
    json!({
        "type": "object",
        "title": "Flat",
        "properties": properties,
        "required": ["id", "account", "sequence", "created"],
    })
    .to_string()
}

fn payloads() -> Vec<Vec<u8>> {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    (0..RECORDS)
        .map(|i| {
            let mut m = Map::new();
            for name in ["id", "account", "sequence"] {
                m.insert(name.into(), json!(rng.long()));
            }
            m.insert("quantity".into(), json!(rng.int()));
            m.insert("region".into(), json!(rng.int()));
            m.insert("price".into(), json!(rng.double()));
            m.insert("discount".into(), json!(rng.double()));
            for name in support::FLAT_STRINGS {
                m.insert(name.into(), json!(rng.text(20, 40)));
            }
            m.insert("paid".into(), json!(rng.next().is_multiple_of(2)));
            m.insert(
                "created".into(),
                json!(format!(
                    "2024-01-{:02}T{:02}:{:02}:{:02}.{:03}Z",
                    1 + i % 28,
                    i % 24,
                    i % 60,
                    (i / 60) % 60,
                    i % 1000
                )),
            );
            m.insert(
                "note".into(),
                if rng.next().is_multiple_of(4) {
                    Value::Null
                } else {
                    json!(rng.text(15, 25))
                },
            );
            serde_json::to_vec(&Value::Object(m)).expect("encodes")
        })
        .collect()
}

fn converter(schema: &JsonSchema) -> (JsonConverter, SchemaRef) {
    let table = json_to_iceberg(&schema.value).expect("maps");
    let target = Arc::new(iceberg::arrow::schema_to_arrow_schema(&table).expect("arrow"));
    (
        JsonConverter::new(&schema.value, target.clone()).expect("converter"),
        target,
    )
}

fn decode_only(schema: &JsonSchema, data: &[Vec<u8>]) {
    for p in data {
        black_box(decode_payload(schema, p).expect("decodes"));
    }
}

fn convert(schema: &JsonSchema, c: &mut JsonConverter, data: &[Vec<u8>]) {
    for p in data {
        let v = decode_payload(schema, p).expect("decodes");
        c.append(&v).expect("converts");
    }
    black_box(c.finish().expect("finish"));
}

fn to_parquet(
    schema: &JsonSchema,
    c: &mut JsonConverter,
    target: &SchemaRef,
    data: &[Vec<u8>],
) -> usize {
    for p in data {
        let v = decode_payload(schema, p).expect("decodes");
        c.append(&v).expect("converts");
    }
    support::zstd_parquet(target, c.finish().expect("finish"))
}

fn bench(c: &mut Criterion) {
    let schema = parse(&schema_text(), &[]).expect("schema");
    let data = payloads();
    let bytes: usize = data.iter().map(Vec::len).sum();
    let (mut conv, target) = converter(&schema);
    let bench = StageBench {
        group: "json_arrow/flat",
        title: "json flat",
        decode: "decode (parse + validate)",
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
