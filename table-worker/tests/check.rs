//! The produce-time check and the conversion job agree on every payload: the same bytes are fed
//! to [`PayloadChecker`] and, as records of a stream, to [`convert_range`]; a payload the check
//! accepts must become a row, and one it refuses a dead letter.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use apache_avro::types::Value as Avro;
use bytes::Bytes;
use inlet_table_worker::convert_range;
use inlet_table_worker::MemoryPool;
use inlet_table_worker::{PayloadChecker, Side};
use proptest::prelude::*;

const SCHEMA: &str = r#"{
  "type": "record", "name": "Order", "namespace": "shop",
  "fields": [
    {"name": "id", "type": "long"},
    {"name": "qty", "type": "int"},
    {"name": "name", "type": "string"},
    {"name": "blob", "type": "bytes"},
    {"name": "price", "type": "double"},
    {"name": "ok", "type": "boolean"},
    {"name": "state", "type": {"type": "enum", "name": "State", "symbols": ["NEW", "PAID", "SENT"]}},
    {"name": "tag", "type": {"type": "fixed", "name": "Tag", "size": 4}},
    {"name": "note", "type": ["null", "string"], "default": null},
    {"name": "items", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": "long"}},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "addr", "type": {"type": "record", "name": "Addr", "fields": [
      {"name": "city", "type": "string"}, {"name": "zip", "type": ["null", "int"]}
    ]}}
  ]
}"#;

fn valid_datum(schema: &apache_avro::Schema, n: i64, text: &str) -> Vec<u8> {
    let value = Avro::Record(vec![
        ("id".into(), Avro::Long(n)),
        ("qty".into(), Avro::Int(n as i32)),
        ("name".into(), Avro::String(text.into())),
        ("blob".into(), Avro::Bytes(text.as_bytes().to_vec())),
        ("price".into(), Avro::Double(n as f64 / 3.0)),
        ("ok".into(), Avro::Boolean(n % 2 == 0)),
        (
            "state".into(),
            Avro::Enum(
                (n % 3) as u32,
                ["NEW", "PAID", "SENT"][(n % 3) as usize].into(),
            ),
        ),
        ("tag".into(), Avro::Fixed(4, vec![1, 2, 3, 4])),
        (
            "note".into(),
            Avro::Union(1, Box::new(Avro::String(text.into()))),
        ),
        (
            "items".into(),
            Avro::Array(vec![Avro::String(text.into()), Avro::String("x".into())]),
        ),
        (
            "attrs".into(),
            Avro::Map([("a".to_string(), Avro::Long(n))].into_iter().collect()),
        ),
        (
            "amount".into(),
            Avro::Decimal(apache_avro::Decimal::from(vec![0x01, 0x02])),
        ),
        ("at".into(), Avro::TimestampMillis(1_700_000_000_000 + n)),
        (
            "uid".into(),
            Avro::Uuid(uuid::Uuid::from_u128(n as u128 + 1)),
        ),
        (
            "addr".into(),
            Avro::Record(vec![
                ("city".into(), Avro::String(text.into())),
                ("zip".into(), Avro::Union(0, Box::new(Avro::Null))),
            ]),
        ),
    ]);
    apache_avro::to_avro_datum(schema, value).expect("a valid datum")
}

/// How a payload is made from a valid datum.
#[derive(Debug, Clone)]
enum Damage {
    None,
    Truncate(usize),
    Flip(usize, u8),
    Append(Vec<u8>),
    Garbage(Vec<u8>),
    /// A string length prefix that claims more than is left (the case from the issue).
    LongString,
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        2 => Just(Damage::None),
        2 => (0usize..200).prop_map(Damage::Truncate),
        4 => ((0usize..200), any::<u8>()).prop_map(|(a, b)| Damage::Flip(a, b)),
        1 => proptest::collection::vec(any::<u8>(), 1..4).prop_map(Damage::Append),
        2 => proptest::collection::vec(any::<u8>(), 0..60).prop_map(Damage::Garbage),
        1 => Just(Damage::LongString),
    ]
}

fn apply(datum: Vec<u8>, d: &Damage) -> Vec<u8> {
    let mut out = datum;
    match d {
        Damage::None => {}
        Damage::Truncate(at) => out.truncate(at % out.len().max(1)),
        Damage::Flip(at, b) => {
            let at = at % out.len();
            out[at] ^= b | 1;
        }
        Damage::Append(extra) => out.extend_from_slice(extra),
        Damage::Garbage(g) => out = g.clone(),
        Damage::LongString => {
            // id 0 (1 byte), qty 0 (1 byte), then the name's length: 8 chars claimed, 2 left.
            out.truncate(2);
            out.extend_from_slice(&[16, b'a', b'b']);
        }
    }
    out
}

/// A store and registry in a folder, [`SCHEMA`] registered there, and a checker.
struct Setup {
    store: Arc<inlet_storage::StreamStore>,
    registry: Arc<inlet_schema_registry::Registry>,
    /// [`SCHEMA`]'s id.
    id: u32,
    /// [`SCHEMA`] as the registry stores it.
    stored: Arc<inlet_schema_registry::StoredSchema>,
    /// [`SCHEMA`] parsed, to write payloads with.
    writer: apache_avro::Schema,
    checker: PayloadChecker,
}

async fn setup(dir: &tempfile::TempDir) -> Setup {
    let (store, registry) = common::open(dir.path()).await;
    let id = common::register_typed(&registry, "orders-value", SCHEMA, None).await;
    let stored = registry.schema_by_id(id).await.expect("schema");
    let writer = apache_avro::Schema::parse_str(SCHEMA).expect("schema");
    Setup {
        store,
        registry,
        id,
        stored,
        writer,
        checker: PayloadChecker::new(),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn the_check_and_the_job_agree_on_every_payload(
        cases in proptest::collection::vec((damage(), 0i64..1000, "[a-z]{0,12}"), 60..120),
    ) {
        runtime().block_on(async move {
            let dir = tempfile::tempdir().expect("dir");
            let Setup { store, registry, id, stored, writer, checker } = setup(&dir).await;
            let stream = common::create_stream(&store, "kafka/orders/0").await;
            let mut refused = BTreeSet::new();
            let mut records = Vec::new();
            for (i, (d, n, text)) in cases.iter().enumerate() {
                let payload = apply(valid_datum(&writer, *n, text), d);
                if checker.check(Side::Value, &stored, &payload).is_err() {
                    refused.insert(i as i64);
                }
                let framed = inlet_schema_registry::framing::frame(id, &payload);
                records.push((None, Some(Bytes::from(framed))));
            }
            common::append_records(&store, stream, &records).await;

            let warehouse = dir.path().join("warehouse").display().to_string();
            let mut ctx = common::table_context(&registry, format!("file://{warehouse}/orders/data"));
            ctx.dead_letter_target = Some(inlet_table_worker::data_file::FileTarget {
                data_location: format!("file://{warehouse}/orders_dlq/data"),
                ..ctx.target.clone()
            });
            let pool = MemoryPool::new(64 << 20);
            let out = convert_range(
                &store,
                &pool,
                &ctx,
                common::whole(stream, 32 << 20),
            )
            .await
            .expect("convert");
            let dead: BTreeSet<i64> = out.dead_letters.iter().map(|d| d.offset).collect();
            prop_assert_eq!(&dead, &refused, "dead letters vs refused; cases {:?}", cases);
            prop_assert_eq!(out.rows as usize + dead.len(), cases.len());
            Ok(())
        })?;
    }
}

#[test]
fn a_truncated_string_is_refused_by_the_check() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().expect("dir");
        let Setup {
            stored,
            writer,
            checker,
            ..
        } = setup(&dir).await;
        let good = valid_datum(&writer, 0, "hello");
        checker
            .check(Side::Value, &stored, &good)
            .expect("a valid datum passes");
        let bad = apply(good, &Damage::LongString);
        let err = checker
            .check(Side::Value, &stored, &bad)
            .expect_err("a string claiming 8 bytes with 2 left");
        assert!(!err.is_empty());
    });
}
