//! The decoder against an independent reference: values generated for a writer schema are
//! encoded with apache-avro, decoded with [`AvroDecoder`], and compared with arrays built from
//! the same values by a small converter that uses Arrow's typed constructors; then written to
//! Parquet and read back. Plus rollback, hostile input (proptest) and compile-time refusals.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;

use apache_avro::schema::{Name, ResolvedSchema, Schema};
use apache_avro::types::Value;
use apache_avro::{BigDecimal, Days, Decimal, Duration, Millis, Months, Uuid};
use arrow::array::{
    Array, ArrayRef, BooleanArray, Date32Array, Decimal128Array, FixedSizeBinaryArray,
    Float32Array, Float64Array, Int32Array, Int64Array, LargeBinaryArray, ListArray, MapArray,
    RecordBatch, StringArray, StructArray, Time64MicrosecondArray, TimestampMicrosecondArray,
};
use arrow::buffer::{NullBuffer, OffsetBuffer};
use arrow::datatypes::{DataType, Field, SchemaRef, TimeUnit};
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use proptest::prelude::*;

use super::{avro_to_iceberg, AvroDecoder};
use crate::error::Error;

// ---------------------------------------------------------------------------------------------
// Test data: a deterministic generator of Avro values for any schema.

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }

    fn i64_in(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % ((hi - lo) as u64 + 1)) as i64
    }

    fn string(&mut self) -> String {
        const PIECES: [&str; 8] = ["a", "bc", "héllo", "日本", "z", " ", "🦀", "xyz"];
        let n = self.below(5);
        (0..n).map(|_| PIECES[self.below(8) as usize]).collect()
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Named types of `schema` and `refs`, for `Ref`s.
fn names<'s>(schema: &'s Schema, refs: &'s [Schema]) -> HashMap<Name, &'s Schema> {
    let mut all: Vec<&Schema> = refs.iter().collect();
    all.push(schema);
    ResolvedSchema::try_from(all)
        .expect("resolvable")
        .get_names()
        .clone()
}

fn resolve<'s>(schema: &'s Schema, names: &HashMap<Name, &'s Schema>) -> &'s Schema {
    match schema {
        Schema::Ref { name } => names.get(name).expect("known name"),
        other => other,
    }
}

/// Minimal big-endian two's complement bytes of `v`.
fn twos_complement(v: i128) -> Vec<u8> {
    let bytes = v.to_be_bytes();
    let mut start = 0;
    while start < 15 {
        let (b, next) = (bytes[start], bytes[start + 1]);
        if (b == 0 && next & 0x80 == 0) || (b == 0xff && next & 0x80 != 0) {
            start += 1;
        } else {
            break;
        }
    }
    bytes[start..].to_vec()
}

fn decimal_value(rng: &mut Rng, precision: usize) -> i128 {
    let limit = 10i128.pow(precision.min(38) as u32);
    let v = (rng.next() as i128) << 64 | rng.next() as i128;
    let v = v.rem_euclid(limit);
    if rng.chance(2) {
        -v
    } else {
        v
    }
}

const BIG_DECIMALS: [&str; 7] = [
    "123.45",
    "-0.5",
    "0",
    "1000",
    "0.001",
    "12345678901234567890.12345",
    "-98765.4321",
];

fn generate(schema: &Schema, names: &HashMap<Name, &Schema>, rng: &mut Rng) -> Value {
    match resolve(schema, names) {
        Schema::Null => Value::Null,
        Schema::Boolean => Value::Boolean(rng.chance(2)),
        Schema::Int => Value::Int(match rng.below(4) {
            0 => i32::MIN,
            1 => i32::MAX,
            _ => rng.next() as i32 >> rng.below(31),
        }),
        Schema::Long => Value::Long(match rng.below(4) {
            0 => i64::MIN,
            1 => i64::MAX,
            _ => rng.next() as i64 >> rng.below(63),
        }),
        Schema::Float => Value::Float(rng.i64_in(-1_000_000, 1_000_000) as f32 / 7.0),
        Schema::Double => Value::Double(rng.next() as i64 as f64 / 3.0),
        Schema::Bytes => {
            let n = rng.below(20) as usize;
            Value::Bytes(rng.bytes(n))
        }
        Schema::String => Value::String(rng.string()),
        Schema::Fixed(f) => Value::Fixed(f.size, rng.bytes(f.size)),
        Schema::Enum(e) => {
            let i = rng.below(e.symbols.len() as u64) as usize;
            Value::Enum(i as u32, e.symbols[i].clone())
        }
        Schema::Union(u) => {
            let i = rng.below(u.variants().len() as u64) as usize;
            Value::Union(i as u32, Box::new(generate(&u.variants()[i], names, rng)))
        }
        Schema::Record(r) => Value::Record(
            r.fields
                .iter()
                .map(|f| (f.name.clone(), generate(&f.schema, names, rng)))
                .collect(),
        ),
        Schema::Array(a) => {
            let n = rng.below(4);
            Value::Array((0..n).map(|_| generate(&a.items, names, rng)).collect())
        }
        Schema::Map(m) => {
            let n = rng.below(3);
            Value::Map(
                (0..n)
                    .map(|i| {
                        (
                            format!("k{i}{}", rng.string()),
                            generate(&m.types, names, rng),
                        )
                    })
                    .collect(),
            )
        }
        Schema::Date => Value::Date(rng.i64_in(-100_000, 100_000) as i32),
        Schema::TimeMillis => Value::TimeMillis(rng.i64_in(0, 86_399_999) as i32),
        Schema::TimeMicros => Value::TimeMicros(rng.i64_in(0, 86_399_999_999)),
        Schema::TimestampMillis => Value::TimestampMillis(rng.i64_in(-4e12 as i64, 4e12 as i64)),
        Schema::TimestampMicros => Value::TimestampMicros(rng.next() as i64),
        Schema::TimestampNanos => Value::TimestampNanos(rng.next() as i64),
        Schema::LocalTimestampMillis => {
            Value::LocalTimestampMillis(rng.i64_in(-4e12 as i64, 4e12 as i64))
        }
        Schema::LocalTimestampMicros => Value::LocalTimestampMicros(rng.next() as i64),
        Schema::LocalTimestampNanos => Value::LocalTimestampNanos(rng.next() as i64),
        Schema::Decimal(d) => {
            let v = decimal_value(rng, d.precision);
            let bytes = match resolve(&d.inner, names) {
                Schema::Fixed(f) => {
                    let mut out = vec![if v < 0 { 0xff } else { 0 }; f.size];
                    let minimal = twos_complement(v);
                    let at = f.size - minimal.len();
                    out[at..].copy_from_slice(&minimal);
                    out
                }
                _ => twos_complement(v),
            };
            Value::Decimal(Decimal::from(bytes))
        }
        Schema::Uuid => Value::Uuid(Uuid::from_bytes(
            rng.bytes(16).try_into().expect("16 bytes"),
        )),
        Schema::Duration => Value::Duration(Duration::new(
            Months::new(rng.next() as u32),
            Days::new(rng.next() as u32),
            Millis::new(rng.next() as u32),
        )),
        Schema::BigDecimal => Value::BigDecimal(
            BigDecimal::from_str(BIG_DECIMALS[rng.below(7) as usize]).expect("decimal"),
        ),
        Schema::Ref { .. } => unreachable!("resolved"),
    }
}

// ---------------------------------------------------------------------------------------------
// The reference: Avro values → a plain tree (following the table conventions) → Arrow arrays.

#[derive(Debug, Clone)]
enum R {
    Null,
    Bool(bool),
    I32(i32),
    I64(i64),
    F32(f32),
    F64(f64),
    I128(i128),
    Bytes(Vec<u8>),
    Str(String),
    Struct(Vec<(String, R)>),
    List(Vec<R>),
    Map(Vec<(String, R)>),
}

/// The field name of a union branch (the table convention, restated for the test schemas).
fn branch_label(schema: &Schema, names: &HashMap<Name, &Schema>) -> String {
    match resolve(schema, names) {
        Schema::Int => "int".into(),
        Schema::Long => "long".into(),
        Schema::String => "string".into(),
        Schema::Boolean => "boolean".into(),
        Schema::Float => "float".into(),
        Schema::Double => "double".into(),
        Schema::Bytes => "bytes".into(),
        Schema::Array(_) => "array".into(),
        Schema::Map(_) => "map".into(),
        Schema::Record(r) => r.name.name.clone(),
        Schema::Enum(e) => e.name.name.clone(),
        Schema::Fixed(f) => f.name.name.clone(),
        other => panic!("no label for {other:?} in the test schemas"),
    }
}

fn signed_be(bytes: &[u8]) -> i128 {
    let mut v: i128 = if bytes.first().is_some_and(|b| b & 0x80 != 0) {
        -1
    } else {
        0
    };
    for &b in bytes {
        v = (v << 8) | i128::from(b);
    }
    v
}

fn plain(value: &Value, schema: &Schema, names: &HashMap<Name, &Schema>) -> R {
    let schema = resolve(schema, names);
    match (value, schema) {
        (Value::Union(i, inner), Schema::Union(u)) => {
            let branch = &u.variants()[*i as usize];
            let non_null = u
                .variants()
                .iter()
                .filter(|s| !matches!(s, Schema::Null))
                .count();
            if matches!(**inner, Value::Null) {
                R::Null
            } else if non_null == 1 {
                plain(inner, branch, names)
            } else {
                // Labels in branch order, a repeated one suffixed _1, _2, ...
                let mut labels: Vec<String> = Vec::new();
                for b in u.variants() {
                    let base = match resolve(b, names) {
                        Schema::Null => "null".to_string(),
                        _ => branch_label(b, names),
                    };
                    let count = labels
                        .iter()
                        .filter(|l| **l == base || l.starts_with(&format!("{base}_")))
                        .count();
                    labels.push(if count == 0 {
                        base
                    } else {
                        format!("{base}_{count}")
                    });
                }
                R::Struct(vec![(
                    labels[*i as usize].clone(),
                    plain(inner, branch, names),
                )])
            }
        }
        (Value::Null, _) => R::Null,
        (Value::Boolean(b), _) => R::Bool(*b),
        (Value::Int(v) | Value::Date(v), _) => R::I32(*v),
        (Value::TimeMillis(v), _) => R::I64(i64::from(*v) * 1000),
        (Value::Long(v) | Value::TimeMicros(v) | Value::TimestampMicros(v), _) => R::I64(*v),
        (Value::LocalTimestampMicros(v), _) => R::I64(*v),
        (Value::TimestampMillis(v) | Value::LocalTimestampMillis(v), _) => R::I64(v * 1000),
        (Value::TimestampNanos(v) | Value::LocalTimestampNanos(v), _) => R::I64(v.div_euclid(1000)),
        (Value::Float(v), _) => R::F32(*v),
        (Value::Double(v), _) => R::F64(*v),
        (Value::Bytes(b) | Value::Fixed(_, b), _) => R::Bytes(b.clone()),
        (Value::String(s) | Value::Enum(_, s), _) => R::Str(s.clone()),
        (Value::Uuid(u), _) => R::Bytes(u.as_bytes().to_vec()),
        (Value::Duration(d), _) => R::Bytes(<[u8; 12]>::from(*d).to_vec()),
        (Value::Decimal(d), _) => R::I128(signed_be(&Vec::<u8>::try_from(d).expect("bytes"))),
        (Value::BigDecimal(d), _) => R::Str(d.to_string()),
        (Value::Record(fields), Schema::Record(r)) => R::Struct(
            fields
                .iter()
                .zip(&r.fields)
                .map(|((name, v), f)| (name.clone(), plain(v, &f.schema, names)))
                .collect(),
        ),
        (Value::Array(items), Schema::Array(a)) => {
            R::List(items.iter().map(|v| plain(v, &a.items, names)).collect())
        }
        (Value::Map(entries), Schema::Map(m)) => R::Map(
            entries
                .iter()
                .map(|(k, v)| (k.clone(), plain(v, &m.types, names)))
                .collect(),
        ),
        (v, s) => panic!("no reference for {v:?} as {s:?}"),
    }
}

fn nulls_of(rows: &[&R]) -> Option<NullBuffer> {
    let nulls = NullBuffer::from(
        rows.iter()
            .map(|r| !matches!(r, R::Null))
            .collect::<Vec<_>>(),
    );
    (nulls.null_count() > 0).then_some(nulls)
}

/// Builds `field`'s array from `rows`, with Arrow's typed constructors.
fn build(field: &Field, rows: &[&R]) -> ArrayRef {
    macro_rules! prim {
        ($array:ty, $($pat:pat => $v:expr),+) => {
            Arc::new(<$array>::from(
                rows.iter()
                    .map(|r| match r {
                        R::Null => None,
                        $($pat => Some($v),)+
                        other => panic!("{other:?} in {}", field.name()),
                    })
                    .collect::<Vec<_>>(),
            ))
        };
    }
    match field.data_type() {
        DataType::Boolean => prim!(BooleanArray, R::Bool(b) => *b),
        DataType::Int32 => prim!(Int32Array, R::I32(v) => *v),
        DataType::Date32 => prim!(Date32Array, R::I32(v) => *v),
        DataType::Int64 => prim!(Int64Array, R::I64(v) => *v, R::I32(v) => i64::from(*v)),
        DataType::Time64(TimeUnit::Microsecond) => {
            prim!(Time64MicrosecondArray, R::I64(v) => *v)
        }
        DataType::Timestamp(TimeUnit::Microsecond, tz) => {
            let array: TimestampMicrosecondArray = rows
                .iter()
                .map(|r| match r {
                    R::Null => None,
                    R::I64(v) => Some(*v),
                    other => panic!("{other:?}"),
                })
                .collect();
            Arc::new(array.with_timezone_opt(tz.clone()))
        }
        DataType::Float32 => prim!(Float32Array, R::F32(v) => *v),
        DataType::Float64 => prim!(Float64Array, R::F64(v) => *v, R::F32(v) => f64::from(*v)),
        DataType::Utf8 => prim!(StringArray, R::Str(s) => s.as_str()),
        DataType::LargeBinary => prim!(LargeBinaryArray, R::Bytes(b) => b.as_slice()),
        DataType::FixedSizeBinary(size) => Arc::new(
            FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                rows.iter().map(|r| match r {
                    R::Null => None,
                    R::Bytes(b) => Some(b.clone()),
                    other => panic!("{other:?}"),
                }),
                *size,
            )
            .expect("fixed"),
        ),
        DataType::Decimal128(p, s) => {
            let array: Decimal128Array = rows
                .iter()
                .map(|r| match r {
                    R::Null => None,
                    R::I128(v) => Some(*v),
                    other => panic!("{other:?}"),
                })
                .collect();
            Arc::new(array.with_precision_and_scale(*p, *s).expect("decimal"))
        }
        DataType::Struct(fields) => {
            let children = fields
                .iter()
                .map(|child| {
                    let child_rows: Vec<&R> = rows
                        .iter()
                        .map(|r| match r {
                            R::Struct(values) => values
                                .iter()
                                .find(|(n, _)| n == child.name())
                                .map_or(&R::Null, |(_, v)| v),
                            _ => &R::Null,
                        })
                        .collect();
                    build(child, &child_rows)
                })
                .collect();
            Arc::new(
                StructArray::try_new(fields.clone(), children, nulls_of(rows)).expect("struct"),
            )
        }
        DataType::List(element) => {
            let mut items: Vec<&R> = Vec::new();
            let mut lengths = Vec::new();
            for r in rows {
                let before = items.len();
                if let R::List(values) = r {
                    items.extend(values.iter());
                }
                lengths.push(items.len() - before);
            }
            Arc::new(
                ListArray::try_new(
                    element.clone(),
                    OffsetBuffer::from_lengths(lengths),
                    build(element, &items),
                    nulls_of(rows),
                )
                .expect("list"),
            )
        }
        DataType::Map(entries, sorted) => {
            let DataType::Struct(kv) = entries.data_type() else {
                panic!("map entries")
            };
            let mut keys: Vec<R> = Vec::new();
            let mut values: Vec<&R> = Vec::new();
            let mut lengths = Vec::new();
            for r in rows {
                let before = values.len();
                if let R::Map(map) = r {
                    for (k, v) in map {
                        keys.push(R::Str(k.clone()));
                        values.push(v);
                    }
                }
                lengths.push(values.len() - before);
            }
            let key_refs: Vec<&R> = keys.iter().collect();
            let entries_array = StructArray::try_new(
                kv.clone(),
                vec![build(&kv[0], &key_refs), build(&kv[1], &values)],
                None,
            )
            .expect("entries");
            Arc::new(
                MapArray::try_new(
                    entries.clone(),
                    OffsetBuffer::from_lengths(lengths),
                    entries_array,
                    nulls_of(rows),
                    *sorted,
                )
                .expect("map"),
            )
        }
        other => panic!("no reference for {other}"),
    }
}

/// The reference arrays for `values` of `writer` in `target`'s columns.
fn reference(
    values: &[Value],
    writer: &Schema,
    refs: &[Schema],
    target: &SchemaRef,
) -> Vec<ArrayRef> {
    let names = names(writer, refs);
    let rows: Vec<R> = values.iter().map(|v| plain(v, writer, &names)).collect();
    target
        .fields()
        .iter()
        .map(|field| {
            let column: Vec<&R> = rows
                .iter()
                .map(|r| match r {
                    R::Struct(values) => values
                        .iter()
                        .find(|(n, _)| n == field.name())
                        .map_or(&R::Null, |(_, v)| v),
                    other => panic!("top level {other:?}"),
                })
                .collect();
            build(field, &column)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Helpers.

fn parse(json: &str) -> Schema {
    Schema::parse_str(json).expect("valid Avro schema")
}

/// The table's Arrow schema for Avro schema `table` (mapped to Iceberg, then to Arrow).
fn target_of(table: &Schema, refs: &[Schema]) -> SchemaRef {
    let iceberg = avro_to_iceberg(table, refs).expect("maps");
    Arc::new(iceberg::arrow::schema_to_arrow_schema(&iceberg).expect("arrow schema"))
}

fn encode(schema: &Schema, refs: &[Schema], value: &Value) -> Vec<u8> {
    if refs.is_empty() {
        apache_avro::to_avro_datum(schema, value.clone()).expect("encodes")
    } else {
        apache_avro::to_avro_datum_schemata(schema, refs.iter().collect(), value.clone())
            .expect("encodes")
    }
}

fn values_for(schema: &Schema, refs: &[Schema], n: usize, seed: u64) -> Vec<Value> {
    let names = names(schema, refs);
    let mut rng = Rng(seed | 1);
    (0..n).map(|_| generate(schema, &names, &mut rng)).collect()
}

fn assert_arrays_eq(got: &[ArrayRef], want: &[ArrayRef], target: &SchemaRef) {
    assert_eq!(got.len(), want.len());
    for ((g, w), field) in got.iter().zip(want).zip(target.fields()) {
        assert_eq!(g.data_type(), field.data_type(), "type of {}", field.name());
        assert_eq!(g.as_ref(), w.as_ref(), "column {}", field.name());
    }
}

/// Writes a batch to Parquet and reads it back equal.
fn parquet_round_trip(batch: &RecordBatch) {
    let mut file = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut file, batch.schema(), None).expect("writer");
    writer.write(batch).expect("write");
    writer.close().expect("close");
    let reader = ParquetRecordBatchReaderBuilder::try_new(Bytes::from(file))
        .expect("reader")
        .with_batch_size(batch.num_rows().max(1))
        .build()
        .expect("build");
    let batches: Vec<RecordBatch> = reader.map(|b| b.expect("read")).collect();
    let read = arrow::compute::concat_batches(&batch.schema(), &batches).expect("concat");
    for (i, field) in batch.schema().fields().iter().enumerate() {
        assert_eq!(
            read.column(i).as_ref(),
            batch.column(i).as_ref(),
            "Parquet round trip of {}",
            field.name()
        );
    }
}

/// Generates `n` values of `writer`, decodes them into `table`'s columns, and checks the arrays
/// against the reference and through Parquet.
fn round_trip(writer_json: &str, table_json: &str, n: usize) {
    let writer = parse(writer_json);
    let table = parse(table_json);
    let target = target_of(&table, &[]);
    let values = values_for(&writer, &[], n, 0x5eed ^ writer_json.len() as u64);
    let mut decoder = AvroDecoder::new(&writer, &[], target.clone()).expect("compiles");
    for v in &values {
        decoder.append(&encode(&writer, &[], v)).expect("decodes");
    }
    assert_eq!(decoder.len(), n);
    assert!(decoder.buffered_bytes() > 0);
    let got = decoder.finish().expect("finish");
    assert!(decoder.is_empty());
    assert_arrays_eq(&got, &reference(&values, &writer, &[], &target), &target);
    parquet_round_trip(&RecordBatch::try_new(target.clone(), got).expect("batch"));
    // The decoder is reusable after finish.
    decoder
        .append(&encode(&writer, &[], &values[0]))
        .expect("decodes again");
    let again = decoder.finish().expect("finish");
    assert_eq!(again[0].len(), 1);
}

fn same(json: &str, n: usize) {
    round_trip(json, json, n)
}

// ---------------------------------------------------------------------------------------------
// Round trips.

const FLAT20: &str = r#"{"type":"record","name":"Flat","namespace":"t","fields":[
    {"name":"b","type":"boolean"},
    {"name":"i","type":"int"},
    {"name":"l","type":"long"},
    {"name":"f","type":"float"},
    {"name":"d","type":"double"},
    {"name":"s","type":"string"},
    {"name":"y","type":"bytes"},
    {"name":"nb","type":["null","boolean"]},
    {"name":"ni","type":["int","null"]},
    {"name":"nl","type":["null","long"]},
    {"name":"nf","type":["null","float"]},
    {"name":"nd","type":["null","double"]},
    {"name":"ns","type":["null","string"]},
    {"name":"ny","type":["null","bytes"]},
    {"name":"i2","type":"int"},
    {"name":"l2","type":"long"},
    {"name":"s2","type":"string"},
    {"name":"s3","type":"string"},
    {"name":"d2","type":"double"},
    {"name":"b2","type":"boolean"}]}"#;

#[test]
fn flat_record_of_all_primitive_types_round_trips() {
    same(FLAT20, 300);
}

#[test]
fn nested_records_round_trip() {
    same(
        r#"{"type":"record","name":"Outer","fields":[
            {"name":"id","type":"long"},
            {"name":"inner","type":{"type":"record","name":"Inner","fields":[
                {"name":"name","type":"string"},
                {"name":"deep","type":{"type":"record","name":"Deep","fields":[
                    {"name":"x","type":"int"},{"name":"y","type":["null","double"]}]}}]}},
            {"name":"maybe","type":["null","Inner"]},
            {"name":"again","type":"Deep"}]}"#,
        200,
    );
}

#[test]
fn arrays_round_trip() {
    same(
        r#"{"type":"record","name":"A","fields":[
            {"name":"ints","type":{"type":"array","items":"int"}},
            {"name":"maybe_ints","type":{"type":"array","items":["null","long"]}},
            {"name":"recs","type":{"type":"array","items":{"type":"record","name":"Item","fields":[
                {"name":"sku","type":"string"},{"name":"qty","type":"int"},
                {"name":"tags","type":{"type":"array","items":"string"}}]}}},
            {"name":"nested","type":{"type":"array","items":{"type":"array","items":"double"}}},
            {"name":"opt","type":["null",{"type":"array","items":"Item"}]}]}"#,
        200,
    );
}

#[test]
fn maps_round_trip() {
    same(
        r#"{"type":"record","name":"M","fields":[
            {"name":"counts","type":{"type":"map","values":"long"}},
            {"name":"maybe","type":{"type":"map","values":["null","string"]}},
            {"name":"recs","type":{"type":"map","values":{"type":"record","name":"V","fields":[
                {"name":"a","type":"int"},{"name":"b","type":{"type":"map","values":"int"}}]}}},
            {"name":"opt","type":["null",{"type":"map","values":{"type":"array","items":"int"}}]}]}"#,
        200,
    );
}

#[test]
fn unions_round_trip() {
    same(
        r#"{"type":"record","name":"U","fields":[
            {"name":"n1","type":["null","string"]},
            {"name":"n2","type":["string","null"]},
            {"name":"single","type":["int"]},
            {"name":"three","type":["null","int","string"]},
            {"name":"no_null","type":["int","string",
                {"type":"record","name":"P","fields":[{"name":"p","type":"long"}]}]},
            {"name":"same_names","type":["null",
                {"type":"record","name":"Item","namespace":"a","fields":[{"name":"x","type":"int"}]},
                {"type":"record","name":"Item","namespace":"b","fields":[{"name":"y","type":"string"}]},
                {"type":"record","name":"Item","namespace":"c","fields":[{"name":"z","type":"double"}]}]},
            {"name":"complex","type":["null",{"type":"array","items":"int"},
                {"type":"map","values":"string"},
                {"type":"enum","name":"E","symbols":["X","Y","Z"]},
                {"type":"fixed","name":"F3","size":3}]}]}"#,
        300,
    );
}

#[test]
fn enums_and_fixed_round_trip() {
    same(
        r#"{"type":"record","name":"EF","fields":[
            {"name":"color","type":{"type":"enum","name":"Color","symbols":["RED","GREEN","BLUE"]}},
            {"name":"maybe_color","type":["null","Color"]},
            {"name":"hash","type":{"type":"fixed","name":"H8","size":8}},
            {"name":"hashes","type":{"type":"array","items":"H8"}}]}"#,
        200,
    );
}

#[test]
fn logical_types_round_trip() {
    same(
        r#"{"type":"record","name":"L","fields":[
            {"name":"date","type":{"type":"int","logicalType":"date"}},
            {"name":"tms","type":{"type":"int","logicalType":"time-millis"}},
            {"name":"tus","type":{"type":"long","logicalType":"time-micros"}},
            {"name":"ts_ms","type":{"type":"long","logicalType":"timestamp-millis"}},
            {"name":"ts_us","type":{"type":"long","logicalType":"timestamp-micros"}},
            {"name":"ts_ns","type":{"type":"long","logicalType":"timestamp-nanos"}},
            {"name":"lts_ms","type":{"type":"long","logicalType":"local-timestamp-millis"}},
            {"name":"lts_us","type":{"type":"long","logicalType":"local-timestamp-micros"}},
            {"name":"lts_ns","type":{"type":"long","logicalType":"local-timestamp-nanos"}},
            {"name":"dec_b","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
            {"name":"dec_f","type":{"type":"fixed","name":"D16","size":16,"logicalType":"decimal","precision":38,"scale":4}},
            {"name":"dec_w","type":{"type":"fixed","name":"D20","size":20,"logicalType":"decimal","precision":30,"scale":0}},
            {"name":"id","type":{"type":"string","logicalType":"uuid"}},
            {"name":"dur","type":{"type":"fixed","name":"Dur","size":12,"logicalType":"duration"}},
            {"name":"big","type":{"type":"bytes","logicalType":"big-decimal"}},
            {"name":"opt_ts","type":["null",{"type":"long","logicalType":"timestamp-millis"}]},
            {"name":"opt_dec","type":["null",{"type":"bytes","logicalType":"decimal","precision":5,"scale":1}]}]}"#,
        300,
    );
}

/// Debezium's semantic types, as Confluent's AvroConverter writes them (a `connect.name` on a
/// primitive type, no logical type), become the table types of the same meaning, and values
/// written with the plain types decode to them: the registry's semantic view
/// (`AvroSchema::table_schema`).
#[test]
fn debezium_semantic_types_become_dates_times_and_timestamps() {
    use iceberg::spec::{PrimitiveType, Type};
    let text = r#"{"type":"record","name":"Value","namespace":"dbz.public.orders","fields":[
        {"name":"id","type":"int"},
        {"name":"day","type":{"type":"int","connect.version":1,"connect.name":"io.debezium.time.Date"}},
        {"name":"at","type":{"type":"int","connect.version":1,"connect.name":"io.debezium.time.Time"}},
        {"name":"at_us","type":{"type":"long","connect.version":1,"connect.name":"io.debezium.time.MicroTime"}},
        {"name":"ts","type":{"type":"long","connect.version":1,"connect.name":"io.debezium.time.Timestamp"}},
        {"name":"ts_us","type":["null",{"type":"long","connect.version":1,"connect.name":"io.debezium.time.MicroTimestamp"}],"default":null},
        {"name":"ts_ns","type":{"type":"long","connect.version":1,"connect.name":"io.debezium.time.NanoTimestamp"}},
        {"name":"instant","type":{"type":"long","connect.version":1,"connect.name":"org.apache.kafka.connect.data.Timestamp"}},
        {"name":"zoned","type":{"type":"string","connect.version":1,"connect.name":"io.debezium.time.ZonedTimestamp"}},
        {"name":"uid","type":{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Uuid"}}],
        "connect.name":"dbz.public.orders.Value"}"#;
    let a = inlet_schema_registry::avro::parse(text).expect("parses");
    assert!(a.semantic.is_some(), "a semantic view");
    let iceberg = avro_to_iceberg(a.table_schema(), &a.refs).expect("maps");
    let kind = |name: &str| iceberg.field_by_name(name).expect(name).field_type.clone();
    let p = |t: PrimitiveType| Box::new(Type::Primitive(t));
    assert_eq!(kind("id"), p(PrimitiveType::Int));
    assert_eq!(kind("day"), p(PrimitiveType::Date));
    assert_eq!(kind("at"), p(PrimitiveType::Time));
    assert_eq!(kind("at_us"), p(PrimitiveType::Time));
    assert_eq!(kind("ts"), p(PrimitiveType::Timestamp));
    assert_eq!(kind("ts_us"), p(PrimitiveType::Timestamp));
    assert_eq!(kind("ts_ns"), p(PrimitiveType::Timestamp));
    assert_eq!(kind("instant"), p(PrimitiveType::Timestamptz));
    // A zoned timestamp (ISO-8601 text with an offset) is an instant.
    assert_eq!(kind("zoned"), p(PrimitiveType::Timestamptz));
    assert_eq!(kind("uid"), p(PrimitiveType::Uuid));

    // A record written with the plain types (what a producer's serializer encodes).
    let value = Value::Record(vec![
        ("id".into(), Value::Int(7)),
        ("day".into(), Value::Int(19_700)),
        ("at".into(), Value::Int(3_600_000)),
        ("at_us".into(), Value::Long(3_600_000_001)),
        ("ts".into(), Value::Long(1_700_000_000_123)),
        (
            "ts_us".into(),
            Value::Union(1, Box::new(Value::Long(1_700_000_000_123_456))),
        ),
        ("ts_ns".into(), Value::Long(1_700_000_000_123_456_789)),
        ("instant".into(), Value::Long(1_700_000_000_999)),
        (
            "zoned".into(),
            Value::String("2023-11-14T22:13:20.5+01:00".into()),
        ),
        (
            "uid".into(),
            Value::String("67e55044-10b1-426f-9247-bb680e5fe0c8".into()),
        ),
    ]);
    let bytes = encode(&a.schema, &[], &value);
    let target = target_of(a.table_schema(), &[]);
    let mut decoder = AvroDecoder::new(a.table_schema(), &[], target.clone()).expect("compiles");
    decoder.append(&bytes).expect("decodes");
    let got = decoder.finish().expect("finish");
    let column = |name: &str| got[target.index_of(name).expect(name)].clone();
    let day = column("day");
    assert_eq!(
        day.as_any().downcast_ref::<Date32Array>().unwrap().value(0),
        19_700
    );
    let at = column("at");
    let at = at
        .as_any()
        .downcast_ref::<Time64MicrosecondArray>()
        .unwrap();
    assert_eq!(at.value(0), 3_600_000_000);
    let micros = |name: &str| {
        column(name)
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .unwrap()
            .value(0)
    };
    assert_eq!(micros("ts"), 1_700_000_000_123_000);
    assert_eq!(micros("ts_us"), 1_700_000_000_123_456);
    assert_eq!(micros("ts_ns"), 1_700_000_000_123_456);
    assert_eq!(micros("instant"), 1_700_000_000_999_000);
    // 2023-11-14T22:13:20.5+01:00 is 21:13:20.5 UTC.
    assert_eq!(micros("zoned"), 1_699_996_400_500_000);
    let uid = column("uid");
    let uid = uid
        .as_any()
        .downcast_ref::<arrow::array::FixedSizeBinaryArray>()
        .unwrap();
    assert_eq!(
        uid.value(0),
        &[
            0x67, 0xe5, 0x50, 0x44, 0x10, 0xb1, 0x42, 0x6f, 0x92, 0x47, 0xbb, 0x68, 0x0e, 0x5f,
            0xe0, 0xc8
        ]
    );
}

/// Debezium's ZonedTimestamp in the forms its formatter writes (no fraction, up to nine
/// digits, `Z` or an offset, optional), and text that names no instant: a record with one is
/// refused with the reason, not stored as a wrong instant.
#[test]
fn zoned_timestamps_parse_as_instants_and_refuse_what_is_not_one() {
    let text = r#"{"type":"record","name":"V","fields":[
        {"name":"z","type":["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.time.ZonedTimestamp"}],"default":null}]}"#;
    let a = inlet_schema_registry::avro::parse(text).expect("parses");
    let target = target_of(a.table_schema(), &[]);
    let mut decoder = AvroDecoder::new(a.table_schema(), &[], target.clone()).expect("compiles");
    let row = |v: Option<&str>| {
        let value = Value::Record(vec![(
            "z".into(),
            match v {
                Some(t) => Value::Union(1, Box::new(Value::String(t.into()))),
                None => Value::Union(0, Box::new(Value::Null)),
            },
        )]);
        encode(&a.schema, &[], &value)
    };
    for good in [
        "1970-01-01T00:00:00Z",
        "2023-11-14T22:13:20.123456789Z",
        "2023-11-14T17:13:20-05:00",
        "1969-12-31T23:59:59.9999995Z",
    ] {
        decoder.append(&row(Some(good))).expect(good);
    }
    decoder.append(&row(None)).expect("null");
    for bad in [
        "2023-11-14T22:13:20",
        "infinity",
        "2023-11-14",
        "not a time",
    ] {
        let err = decoder.append(&row(Some(bad))).expect_err(bad).to_string();
        assert!(
            err.contains("field `z`") && err.contains("ZonedTimestamp"),
            "{bad}: {err}"
        );
    }
    let got = decoder.finish().expect("finish");
    let z = got[0]
        .as_any()
        .downcast_ref::<TimestampMicrosecondArray>()
        .unwrap();
    assert_eq!(z.len(), 5, "the refused rows left nothing behind");
    assert_eq!(z.value(0), 0);
    // 22:13:20 UTC that day is 1,700,000,000 s; nanoseconds floor to the microsecond.
    assert_eq!(z.value(1), 1_700_000_000_123_456);
    assert_eq!(z.value(2), 1_700_000_000_000_000);
    assert_eq!(z.value(3), -1, "rounded toward the past");
    assert!(z.is_null(4));
}

/// Debezium's VariableScaleDecimal (a NUMERIC without a declared scale: a record of the
/// scale and the unscaled bytes) is a string column holding the decimal's text; Connect's
/// fixed-scale Decimal stays a decimal.
#[test]
fn variable_scale_decimals_become_their_text() {
    use iceberg::spec::{PrimitiveType, Type};
    let text = r#"{"type":"record","name":"Value","namespace":"dbz.public.t","fields":[
        {"name":"amount","type":["null",{"type":"record","name":"VariableScaleDecimal","namespace":"io.debezium.data","fields":[
            {"name":"scale","type":"int"},{"name":"value","type":"bytes"}],
            "connect.doc":"Variable scaled decimal","connect.version":1,"connect.name":"io.debezium.data.VariableScaleDecimal"}],"default":null},
        {"name":"price","type":{"type":"bytes","scale":2,"precision":10,"connect.version":1,
            "connect.parameters":{"scale":"2","connect.decimal.precision":"10"},
            "connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}}]}"#;
    let a = inlet_schema_registry::avro::parse(text).expect("parses");
    let iceberg = avro_to_iceberg(a.table_schema(), &a.refs).expect("maps");
    let kind = |name: &str| iceberg.field_by_name(name).expect(name).field_type.clone();
    assert_eq!(
        kind("amount"),
        Box::new(Type::Primitive(PrimitiveType::String))
    );
    assert_eq!(kind("price"), Box::new(Type::decimal(10, 2).unwrap()));
    let target = target_of(a.table_schema(), &[]);
    let mut decoder = AvroDecoder::new(a.table_schema(), &[], target.clone()).expect("compiles");
    let row = |scale: i32, unscaled: &[u8]| {
        let amount = Value::Union(
            1,
            Box::new(Value::Record(vec![
                ("scale".into(), Value::Int(scale)),
                ("value".into(), Value::Bytes(unscaled.to_vec())),
            ])),
        );
        let price = Value::Decimal(Decimal::from(vec![0x04, 0xd2]));
        encode(
            &a.schema,
            &[],
            &Value::Record(vec![("amount".into(), amount), ("price".into(), price)]),
        )
    };
    // 12345 at scale 3; -1 at scale 0; 5 at scale 8 (Java's text turns scientific there).
    decoder.append(&row(3, &[0x30, 0x39])).expect("12.345");
    decoder.append(&row(0, &[0xff])).expect("-1");
    decoder.append(&row(8, &[0x05])).expect("5E-8");
    let got = decoder.finish().expect("finish");
    let amount = got[target.index_of("amount").unwrap()]
        .as_any()
        .downcast_ref::<arrow::array::StringArray>()
        .unwrap();
    assert_eq!(
        (amount.value(0), amount.value(1), amount.value(2)),
        ("12.345", "-1", "5E-8")
    );
}

#[test]
fn evolution_fills_new_columns_with_nulls_and_skips_dropped_fields() {
    let writer = r#"{"type":"record","name":"Order","fields":[
        {"name":"id","type":"long"},
        {"name":"gone","type":{"type":"record","name":"Gone","fields":[
            {"name":"a","type":{"type":"array","items":["null","string"]}},
            {"name":"m","type":{"type":"map","values":"Gone2"}, "default":{}}]}},
        {"name":"addr","type":{"type":"record","name":"Addr","fields":[
            {"name":"city","type":"string"},
            {"name":"old","type":{"type":"enum","name":"Old","symbols":["P","Q"]}}]}},
        {"name":"items","type":{"type":"array","items":{"type":"record","name":"It","fields":[
            {"name":"q","type":"int"}]}}},
        {"name":"u","type":["null","int","string","boolean"]}]}"#
        .replace(
            r#""Gone2""#,
            r#"{"type":"record","name":"Gone2","fields":[{"name":"z","type":["null","bytes"]}]}"#,
        );
    let table = r#"{"type":"record","name":"Order","fields":[
        {"name":"id","type":"long"},
        {"name":"note","type":["null","string"]},
        {"name":"addr","type":{"type":"record","name":"Addr","fields":[
            {"name":"city","type":"string"},
            {"name":"zip","type":["null","string"]},
            {"name":"geo","type":["null",{"type":"record","name":"Geo","fields":[
                {"name":"lat","type":"double"}]}]}]}},
        {"name":"items","type":{"type":"array","items":{"type":"record","name":"It","fields":[
            {"name":"q","type":"int"},{"name":"sku","type":["null","string"]}]}}},
        {"name":"u","type":["null","int","string","long"]},
        {"name":"tags","type":["null",{"type":"map","values":"string"}]}]}"#;
    round_trip(&writer, table, 200);
}

#[test]
fn widening_int_to_long_float_to_double_decimal_precision_and_optional() {
    round_trip(
        r#"{"type":"record","name":"W","fields":[
            {"name":"n","type":"int"},
            {"name":"on","type":["null","int"]},
            {"name":"x","type":"float"},
            {"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":5,"scale":2}},
            {"name":"r","type":"string"},
            {"name":"ints","type":{"type":"array","items":"int"}}]}"#,
        r#"{"type":"record","name":"W","fields":[
            {"name":"n","type":"long"},
            {"name":"on","type":["null","long"]},
            {"name":"x","type":"double"},
            {"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
            {"name":"r","type":["null","string"]},
            {"name":"ints","type":{"type":"array","items":["null","long"]}}]}"#,
        200,
    );
}

#[test]
fn refs_to_referenced_schemas_decode() {
    let (writer, refs) = Schema::parse_str_with_list(
        r#"{"type":"record","name":"Order","namespace":"shop","fields":[
            {"name":"customer","type":"common.Customer"},
            {"name":"previous","type":["null","common.Customer"]}]}"#,
        [
            r#"{"type":"record","name":"Customer","namespace":"common","fields":[
            {"name":"id","type":"long"},{"name":"name","type":"string"}]}"#,
        ],
    )
    .expect("parses");
    let target = target_of(&writer, &refs);
    let values = values_for(&writer, &refs, 50, 7);
    let mut decoder = AvroDecoder::new(&writer, &refs, target.clone()).expect("compiles");
    for v in &values {
        decoder.append(&encode(&writer, &refs, v)).expect("decodes");
    }
    let got = decoder.finish().expect("finish");
    assert_arrays_eq(&got, &reference(&values, &writer, &refs, &target), &target);
}

#[test]
fn uuid_text_forms_and_timestamp_truncation() {
    let writer = parse(
        r#"{"type":"record","name":"T","fields":[
            {"name":"id","type":{"type":"string","logicalType":"uuid"}},
            {"name":"ns","type":{"type":"long","logicalType":"timestamp-nanos"}}]}"#,
    );
    let target = target_of(&writer, &[]);
    let mut decoder = AvroDecoder::new(&writer, &[], target).expect("compiles");
    let datum = |id: &str, ns: i64| {
        apache_avro::to_avro_datum(
            &parse(
                r#"{"type":"record","name":"T","fields":[
                    {"name":"id","type":"string"},{"name":"ns","type":"long"}]}"#,
            ),
            Value::Record(vec![
                ("id".into(), Value::String(id.into())),
                ("ns".into(), Value::Long(ns)),
            ]),
        )
        .expect("encodes")
    };
    decoder
        .append(&datum("550E8400-E29B-41D4-A716-446655440000", -1))
        .expect("uppercase hyphenated");
    decoder
        .append(&datum("550e8400e29b41d4a716446655440000", 1999))
        .expect("simple form");
    let err = decoder
        .append(&datum("not-a-uuid", 0))
        .expect_err("bad uuid");
    assert!(
        matches!(&err, Error::Decode(m) if m.contains("field `id`")),
        "{err}"
    );
    let got = decoder.finish().expect("finish");
    let ids = got[0]
        .as_any()
        .downcast_ref::<FixedSizeBinaryArray>()
        .expect("fixed");
    assert_eq!(ids.value(0), ids.value(1));
    assert_eq!(ids.value(0)[..4], [0x55, 0x0e, 0x84, 0x00]);
    let ts = got[1]
        .as_any()
        .downcast_ref::<TimestampMicrosecondArray>()
        .expect("timestamp");
    assert_eq!(ts.values().to_vec(), vec![-1, 1]);
}

// ---------------------------------------------------------------------------------------------
// Rollback and hostile input.

const NESTED: &str = r#"{"type":"record","name":"N","fields":[
    {"name":"id","type":"long"},
    {"name":"name","type":["null","string"]},
    {"name":"inner","type":{"type":"record","name":"I","fields":[
        {"name":"tags","type":{"type":"array","items":"string"}},
        {"name":"attrs","type":{"type":"map","values":["null","int"]}}]}},
    {"name":"items","type":{"type":"array","items":{"type":"record","name":"It","fields":[
        {"name":"q","type":"int"},{"name":"u","type":["null","long","string"]}]}}},
    {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
    {"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
    {"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"]}}]}"#;

#[test]
fn a_bad_datum_leaves_nothing_behind() {
    let writer = parse(NESTED);
    let target = target_of(&writer, &[]);
    let values = values_for(&writer, &[], 200, 99);
    let mut decoder = AvroDecoder::new(&writer, &[], target.clone()).expect("compiles");
    let mut good = Vec::new();
    for (i, v) in values.iter().enumerate() {
        let datum = encode(&writer, &[], v);
        if i % 2 == 0 {
            decoder.append(&datum).expect("good datum");
            good.push(v.clone());
            continue;
        }
        // Corruptions that cannot stay valid, failing early, deep inside, and at the very end.
        let id_len = datum.iter().position(|b| b & 0x80 == 0).expect("varint") + 1;
        let bad = match i % 8 {
            1 => datum[..datum.len() / 2].to_vec(),
            3 => [datum.as_slice(), &[0]].concat(),
            5 => {
                let mut d = datum.clone();
                d[id_len] = 0x0a; // branch 5 of the union `name`
                d
            }
            _ => {
                let mut d = datum.clone();
                let last = d.len() - 1;
                d[last] = 0x08; // symbol 4 of the 2-symbol enum `e`, the last field
                d
            }
        };
        let before = decoder.len();
        let err = decoder.append(&bad).expect_err("corrupt datum");
        assert!(matches!(err, Error::Decode(_)), "{err}");
        assert_eq!(decoder.len(), before, "rolled back");
    }
    let got = decoder.finish().expect("finish");
    assert_arrays_eq(&got, &reference(&good, &writer, &[], &target), &target);
    parquet_round_trip(&RecordBatch::try_new(target, got).expect("batch"));
}

#[test]
fn lying_lengths_and_counts_are_refused_without_allocating() {
    let writer = parse(
        r#"{"type":"record","name":"H","fields":[
            {"name":"a","type":{"type":"array","items":"long"}},
            {"name":"s","type":"string"},
            {"name":"e","type":{"type":"array","items":{"type":"record","name":"Empty","fields":[]}}}]}"#,
    );
    let table = parse(
        r#"{"type":"record","name":"H","fields":[
            {"name":"a","type":{"type":"array","items":"long"}},
            {"name":"s","type":"string"}]}"#,
    );
    let mut decoder = AvroDecoder::new(&writer, &[], target_of(&table, &[])).expect("compiles");
    // Array block of i64::MAX / 2 items.
    let huge = [0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
    assert!(decoder.append(&huge).is_err());
    // String of length 2^40 in a 10-byte datum.
    let mut d = vec![0x00, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20];
    d.extend_from_slice(b"abc");
    assert!(decoder.append(&d).is_err());
    // Skipped zero-size items: many blocks of as many items as bytes left.
    let mut d = vec![0x00, 0x00];
    // 100 blocks of 63 items of an empty record.
    d.extend(std::iter::repeat_n(0x7e, 100));
    d.push(0x00);
    let err = decoder.append(&d).expect_err("too many items");
    assert!(
        err.to_string().contains("more array and map items"),
        "{err}"
    );
    assert_eq!(decoder.len(), 0);
    assert!(decoder.buffered_bytes() < 4096);
}

fn hostile_decoders() -> Vec<(Schema, AvroDecoder)> {
    [NESTED, FLAT20]
        .iter()
        .map(|json| {
            let writer = parse(json);
            let decoder =
                AvroDecoder::new(&writer, &[], target_of(&writer, &[])).expect("compiles");
            (writer, decoder)
        })
        .collect()
}

proptest! {
    // No regression files: this crate keeps its test inputs in code.
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic_and_keep_the_decoder_consistent(
        datums in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..120), 1..20)
    ) {
        for (_, mut decoder) in hostile_decoders() {
            for d in &datums {
                let before = decoder.len();
                match decoder.append(d) {
                    Ok(()) => prop_assert_eq!(decoder.len(), before + 1),
                    Err(_) => prop_assert_eq!(decoder.len(), before),
                }
            }
            let rows = decoder.len();
            let arrays = decoder.finish().expect("finish after hostile input");
            for a in arrays {
                prop_assert_eq!(a.len(), rows);
            }
        }
    }

    /// Whatever mix of valid and damaged datums, the rows kept are exactly those of the datums
    /// accepted, as a fresh decoder fed only those produces them; the decoder accepts nothing
    /// apache-avro refuses.
    #[test]
    fn mutated_valid_datums_never_panic_and_good_rows_stay_exact(
        seed in any::<u64>(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        cut in any::<usize>(),
    ) {
        for (writer, mut decoder) in hostile_decoders() {
            let values = values_for(&writer, &[], 4, seed);
            let mut accepted = Vec::new();
            for (i, v) in values.iter().enumerate() {
                let mut datum = encode(&writer, &[], v);
                if i % 2 == 1 && !datum.is_empty() {
                    for (at, byte) in &edits {
                        let n = datum.len();
                        datum[at % n] = *byte;
                    }
                    let n = datum.len();
                    datum.truncate(n - cut % (n / 4 + 1));
                }
                let before = decoder.len();
                if decoder.append(&datum).is_ok() {
                    let mut r = &datum[..];
                    let decoded = apache_avro::from_avro_datum(&writer, &mut r, None);
                    prop_assert!(
                        decoded.is_ok() && r.is_empty(),
                        "decoder accepted what apache-avro refuses: {:?}",
                        decoded
                    );
                    accepted.push(datum);
                } else {
                    prop_assert_eq!(decoder.len(), before);
                }
            }
            let got = decoder.finish().expect("finish");
            let mut fresh = AvroDecoder::new(&writer, &[], decoder.schema()).expect("compiles");
            for d in &accepted {
                fresh.append(d).expect("decodes again");
            }
            let want = fresh.finish().expect("finish");
            for (g, w) in got.iter().zip(&want) {
                prop_assert_eq!(g.as_ref(), w.as_ref());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Compile-time refusals.

fn compile_error(writer: &str, table: &str) -> String {
    let writer = parse(writer);
    let target = target_of(&parse(table), &[]);
    match AvroDecoder::new(&writer, &[], target) {
        Err(Error::Schema(message)) => message,
        other => panic!("expected a schema error, got {other:?}"),
    }
}

#[test]
fn incompatible_writers_are_refused_at_compile_time() {
    let base = r#"{"type":"record","name":"R","fields":[{"name":"a","type":"long"},{"name":"b","type":"string"}]}"#;
    // A required table column the writer lacks.
    let m = compile_error(
        r#"{"type":"record","name":"R","fields":[{"name":"a","type":"long"}]}"#,
        base,
    );
    assert!(m.contains("`b` is required"), "{m}");
    // string → int.
    let m = compile_error(
        r#"{"type":"record","name":"R","fields":[{"name":"a","type":"long"},{"name":"b","type":"int"}]}"#,
        base,
    );
    assert!(m.contains("field `b`") && m.contains("int"), "{m}");
    // long → int is a narrowing.
    let m = compile_error(
        r#"{"type":"record","name":"R","fields":[{"name":"a","type":"long"},{"name":"b","type":"string"}]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"b","type":"string"}]}"#,
    );
    assert!(m.contains("field `a`"), "{m}");
    // Optional writer field into a required column.
    let m = compile_error(
        r#"{"type":"record","name":"R","fields":[{"name":"a","type":"long"},{"name":"b","type":["null","string"]}]}"#,
        base,
    );
    assert!(m.contains("optional in the writer"), "{m}");
    // Nested type change.
    let m = compile_error(
        r#"{"type":"record","name":"R","fields":[{"name":"s","type":{"type":"record","name":"S","fields":[{"name":"x","type":"string"}]}}]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"s","type":{"type":"record","name":"S","fields":[{"name":"x","type":"double"}]}}]}"#,
    );
    assert!(m.contains("field `s.x`"), "{m}");
    // Decimal scale change; timestamp with and without zone.
    let m = compile_error(
        r#"{"type":"record","name":"R","fields":[{"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":5,"scale":2}}]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":3}}]}"#,
    );
    assert!(m.contains("field `d`"), "{m}");
    let m = compile_error(
        r#"{"type":"record","name":"R","fields":[{"name":"t","type":{"type":"long","logicalType":"local-timestamp-millis"}}]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"t","type":{"type":"long","logicalType":"timestamp-millis"}}]}"#,
    );
    assert!(m.contains("field `t`"), "{m}");
}

#[test]
fn recursive_writers_are_refused() {
    let writer = parse(
        r#"{"type":"record","name":"Node","fields":[
            {"name":"v","type":"int"},
            {"name":"next","type":["null","Node"]}]}"#,
    );
    let table = parse(r#"{"type":"record","name":"Node","fields":[{"name":"v","type":"int"}]}"#);
    // Refused even where the recursive field is not a table column.
    match AvroDecoder::new(&writer, &[], target_of(&table, &[])) {
        Err(Error::Schema(m)) => assert!(m.contains("recursive"), "{m}"),
        other => panic!("expected a schema error, got {other:?}"),
    }
    let not_a_record = parse(r#""string""#);
    assert!(matches!(
        AvroDecoder::new(&not_a_record, &[], target_of(&table, &[])),
        Err(Error::Schema(_))
    ));
}

#[test]
fn target_columns_of_unsupported_arrow_types_are_refused() {
    let writer = parse(r#"{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}"#);
    let target = Arc::new(arrow::datatypes::Schema::new(vec![Field::new(
        "a",
        DataType::Int16,
        false,
    )]));
    assert!(matches!(
        AvroDecoder::new(&writer, &[], target),
        Err(Error::Schema(_))
    ));
}
