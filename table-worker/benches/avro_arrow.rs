//! Avro binary datums → Arrow arrays with `AvroDecoder`, against apache-avro's own decoding to
//! `Value` as a baseline.
//!
//! ```text
//! cargo bench -p inlet-table-worker --bench avro_arrow
//! ```
//!
//! Two writer schemas, 100,000 datums each, generated in memory before timing (deterministic):
//! - `flat`: a 20-field record of about 400 bytes — longs, ints, doubles, strings of 20–40
//!   characters, a boolean, a timestamp-millis and a nullable string;
//! - `nested`: a record with a nested record, an array of 3 small records and a map of 3
//!   entries (20 leaf values per record).
//!
//! A third measurement, `decoder_zstd_parquet`, adds writing the batch as a zstd Parquet file
//! in memory: the whole conversion a table worker does per file, object store upload aside.
//!
//! One iteration decodes all datums of a schema (one `append` each) and `finish`es the batch,
//! on one thread; the decoder is compiled once, outside the timing, as the worker does per
//! writer schema. Criterion reports input bytes per second; a summary line per schema then
//! gives the best of 5 timed passes as leaf fields per second (leaf values per record × records)
//! and MiB/s, for the decoder and for `apache_avro::from_avro_datum` (to `Value`, no Arrow),
//! and their ratio, and the peak heap one decode + zstd Parquet pass allocates (on top of the
//! datums).
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod support;

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use apache_avro::types::Value;
use apache_avro::Schema;
use arrow::datatypes::SchemaRef;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use inlet_table_worker::{avro_to_iceberg, AvroDecoder};
use support::{best, Rng};

const RECORDS: usize = 100_000;

const FLAT: &str = r#"{"type":"record","name":"Flat","namespace":"bench","fields":[
    {"name":"id","type":"long"},
    {"name":"account","type":"long"},
    {"name":"sequence","type":"long"},
    {"name":"quantity","type":"int"},
    {"name":"region","type":"int"},
    {"name":"price","type":"double"},
    {"name":"discount","type":"double"},
    {"name":"customer","type":"string"},
    {"name":"email","type":"string"},
    {"name":"street","type":"string"},
    {"name":"city","type":"string"},
    {"name":"country","type":"string"},
    {"name":"product","type":"string"},
    {"name":"category","type":"string"},
    {"name":"currency","type":"string"},
    {"name":"channel","type":"string"},
    {"name":"status","type":"string"},
    {"name":"paid","type":"boolean"},
    {"name":"created","type":{"type":"long","logicalType":"timestamp-millis"}},
    {"name":"note","type":["null","string"]}]}"#;

const NESTED: &str = r#"{"type":"record","name":"Order","namespace":"bench","fields":[
    {"name":"id","type":"long"},
    {"name":"customer","type":"string"},
    {"name":"address","type":{"type":"record","name":"Address","fields":[
        {"name":"street","type":"string"},
        {"name":"city","type":"string"},
        {"name":"zip","type":"int"}]}},
    {"name":"items","type":{"type":"array","items":{"type":"record","name":"Item","fields":[
        {"name":"sku","type":"string"},
        {"name":"qty","type":"int"},
        {"name":"price","type":"double"}]}}},
    {"name":"attrs","type":{"type":"map","values":"string"}}]}"#;

/// Leaf values per record of each schema.
const FLAT_LEAVES: usize = 20;
const NESTED_LEAVES: usize = 5 + 3 * 3 + 3 * 2;

fn flat_value(rng: &mut Rng) -> Value {
    let mut fields = vec![
        ("id".to_string(), Value::Long(rng.long())),
        ("account".to_string(), Value::Long(rng.long())),
        ("sequence".to_string(), Value::Long(rng.long())),
        ("quantity".to_string(), Value::Int(rng.int())),
        ("region".to_string(), Value::Int(rng.int())),
        ("price".to_string(), Value::Double(rng.double())),
        ("discount".to_string(), Value::Double(rng.double())),
    ];
    for name in support::FLAT_STRINGS {
        fields.push((name.to_string(), Value::String(rng.text(20, 40))));
    }
    fields.push((
        "paid".to_string(),
        Value::Boolean(rng.next().is_multiple_of(2)),
    ));
    fields.push((
        "created".to_string(),
        Value::TimestampMillis(1_700_000_000_000 + (rng.next() % 100_000_000_000) as i64),
    ));
    let note = if rng.next().is_multiple_of(4) {
        Value::Union(0, Box::new(Value::Null))
    } else {
        Value::Union(1, Box::new(Value::String(rng.text(15, 25))))
    };
    fields.push(("note".to_string(), note));
    Value::Record(fields)
}

fn nested_value(rng: &mut Rng) -> Value {
    let item = |rng: &mut Rng| {
        Value::Record(vec![
            ("sku".to_string(), Value::String(rng.text(8, 12))),
            ("qty".to_string(), Value::Int(rng.int())),
            ("price".to_string(), Value::Double(rng.double())),
        ])
    };
    let attrs = (0..3)
        .map(|i| (format!("attr{i}"), Value::String(rng.text(5, 15))))
        .collect();
    Value::Record(vec![
        ("id".to_string(), Value::Long(rng.long())),
        ("customer".to_string(), Value::String(rng.text(10, 20))),
        (
            "address".to_string(),
            Value::Record(vec![
                ("street".to_string(), Value::String(rng.text(15, 25))),
                ("city".to_string(), Value::String(rng.text(5, 12))),
                ("zip".to_string(), Value::Int(rng.int())),
            ]),
        ),
        (
            "items".to_string(),
            Value::Array((0..3).map(|_| item(rng)).collect()),
        ),
        ("attrs".to_string(), Value::Map(attrs)),
    ])
}

struct Case {
    name: &'static str,
    schema: Schema,
    datums: Vec<Vec<u8>>,
    bytes: usize,
    leaves: usize,
}

fn case(name: &'static str, json: &str, leaves: usize, gen: fn(&mut Rng) -> Value) -> Case {
    let schema = Schema::parse_str(json).expect("bench schema parses");
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let datums: Vec<Vec<u8>> = (0..RECORDS)
        .map(|_| apache_avro::to_avro_datum(&schema, gen(&mut rng)).expect("encodes"))
        .collect();
    let bytes = datums.iter().map(Vec::len).sum();
    Case {
        name,
        schema,
        datums,
        bytes,
        leaves,
    }
}

fn target_for(case: &Case) -> SchemaRef {
    let table = avro_to_iceberg(&case.schema, &[]).expect("maps");
    Arc::new(iceberg::arrow::schema_to_arrow_schema(&table).expect("arrow schema"))
}

fn decoder_for(case: &Case) -> AvroDecoder {
    AvroDecoder::new(&case.schema, &[], target_for(case)).expect("compiles")
}

fn decode_all(decoder: &mut AvroDecoder, datums: &[Vec<u8>]) {
    for d in datums {
        decoder.append(d).expect("decodes");
    }
    black_box(decoder.finish().expect("finish"));
}

/// Decodes all datums and writes them as one zstd Parquet file in memory, as a conversion job
/// does; returns the file's size.
fn to_parquet(decoder: &mut AvroDecoder, target: &SchemaRef, datums: &[Vec<u8>]) -> usize {
    for d in datums {
        decoder.append(d).expect("decodes");
    }
    support::zstd_parquet(target, decoder.finish().expect("finish"))
}

fn values_all(schema: &Schema, datums: &[Vec<u8>]) {
    for d in datums {
        let mut r = d.as_slice();
        black_box(apache_avro::from_avro_datum(schema, &mut r, None).expect("decodes"));
    }
}

fn summary(case: &Case) {
    let mut decoder = decoder_for(case);
    let ours = best(5, || decode_all(&mut decoder, &case.datums));
    let theirs = best(5, || values_all(&case.schema, &case.datums));
    let target = target_for(case);
    let mut file_bytes = 0;
    let parquet = best(5, || {
        file_bytes = to_parquet(&mut decoder, &target, &case.datums)
    });
    let peak = support::peak_heap(|| {
        to_parquet(&mut decoder, &target, &case.datums);
    });
    let fields = (case.leaves * RECORDS) as f64;
    let mib = case.bytes as f64 / (1024.0 * 1024.0);
    println!(
        "summary {}: {} records, {:.0} bytes/record, {} leaf fields/record",
        case.name,
        RECORDS,
        case.bytes as f64 / RECORDS as f64,
        case.leaves
    );
    for (what, t) in [
        ("AvroDecoder (decode+finish)", ours),
        ("decode + zstd Parquet", parquet),
        ("apache-avro to Value", theirs),
    ] {
        support::print_stage(what, t, fields, mib);
    }
    println!(
        "  peak heap of one decode + zstd Parquet: {:.1} MiB ({:.2}x the {:.1} MiB input)",
        support::mib(peak),
        peak as f64 / case.bytes as f64,
        mib
    );
    println!(
        "  ratio: AvroDecoder is {:.1}x apache-avro's Value decoding; the Parquet file is {:.1} MiB ({:.0}% of the input)",
        theirs.as_secs_f64() / ours.as_secs_f64(),
        file_bytes as f64 / (1024.0 * 1024.0),
        100.0 * file_bytes as f64 / case.bytes as f64
    );
}

fn bench(c: &mut Criterion) {
    let cases = [
        case("flat", FLAT, FLAT_LEAVES, flat_value),
        case("nested", NESTED, NESTED_LEAVES, nested_value),
    ];
    for case in &cases {
        let mut group = c.benchmark_group(format!("avro_arrow/{}", case.name));
        group.throughput(Throughput::Bytes(case.bytes as u64));
        group.sample_size(10);
        group.measurement_time(Duration::from_secs(10));
        let mut decoder = decoder_for(case);
        group.bench_function("decoder", |b| {
            b.iter(|| decode_all(&mut decoder, &case.datums))
        });
        let target = target_for(case);
        group.bench_function("decoder_zstd_parquet", |b| {
            b.iter(|| to_parquet(&mut decoder, &target, &case.datums))
        });
        group.bench_function("apache_avro_value", |b| {
            b.iter(|| values_all(&case.schema, &case.datums))
        });
        group.finish();
    }
    for case in &cases {
        summary(case);
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
