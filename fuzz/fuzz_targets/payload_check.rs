//! Produce-time checks of table topic payloads with the table workers' own decoders
//! (`inlet_table_worker::PayloadChecker`), as values and as keys, against Avro, Protobuf and JSON Schema
//! schemas: any bytes give a verdict, never a panic.
#![no_main]

use std::sync::OnceLock;

use inlet_schema_registry::framing::split;
use inlet_schema_registry::{SchemaType, StoredSchema};
use inlet_table_worker::{PayloadChecker, Side};
use libfuzzer_sys::fuzz_target;

#[path = "schemas.rs"]
mod schemas;

const SCHEMAS: &[(SchemaType, &str)] = &[
    (SchemaType::Avro, r#""string""#),
    (SchemaType::Avro, r#""long""#),
    (
        SchemaType::Avro,
        r#"{"type":"record","name":"r","fields":[{"name":"a","type":"long"},{"name":"s","type":["null","string"]},{"name":"e","type":{"type":"enum","name":"e","symbols":["A","B"]}},{"name":"f","type":{"type":"fixed","name":"f","size":3}},{"name":"d","type":"double"},{"name":"m","type":{"type":"map","values":{"type":"array","items":"int"}}},{"name":"dec","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},{"name":"ts","type":{"type":"long","logicalType":"timestamp-micros"}},{"name":"u","type":{"type":"string","logicalType":"uuid"}}]}"#,
    ),
    (
        SchemaType::Protobuf,
        r#"syntax = "proto3";
package f;
message Order {
  int64 id = 1;
  string customer = 2;
  repeated Line lines = 3;
  map<string, double> attrs = 4;
  oneof pay { string card = 5; bytes token = 6; }
  message Line { sint32 qty = 1; fixed64 sku = 2; }
  enum Kind { A = 0; B = 1; }
  Kind kind = 7;
}
"#,
    ),
    (
        SchemaType::Json,
        r##"{"type":"object","properties":{"id":{"type":"integer"},"tags":{"type":"array","items":{"type":"string","maxLength":8}},"at":{"type":"string","format":"date-time"}},"required":["id"]}"##,
    ),
];

fn schemas() -> &'static [StoredSchema] {
    static PARSED: OnceLock<Vec<StoredSchema>> = OnceLock::new();
    PARSED.get_or_init(|| schemas::parse_all(SCHEMAS))
}

fn checker() -> &'static PayloadChecker {
    static CHECKER: OnceLock<PayloadChecker> = OnceLock::new();
    CHECKER.get_or_init(PayloadChecker::new)
}

fuzz_target!(|data: &[u8]| {
    let Ok((id, payload)) = split(data) else {
        return;
    };
    let schemas = schemas();
    let schema = &schemas[id as usize % schemas.len()];
    let side = if id & 0x100 == 0 { Side::Value } else { Side::Key };
    let _ = checker().check(side, schema, payload);
});
