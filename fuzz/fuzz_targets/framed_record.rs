//! A record framed for the schema registry (magic byte, schema id, then an Avro datum, Protobuf
//! message indexes and message, or JSON text): splitting and decoding against schemas of all
//! three types must refuse bad input with an error, never panic.
#![no_main]

use std::sync::OnceLock;

use inlet_schema_registry::framing::{decode_payload, split};
use inlet_schema_registry::{SchemaType, StoredSchema};
use libfuzzer_sys::fuzz_target;

#[path = "schemas.rs"]
mod schemas;

const SCHEMAS: &[(SchemaType, &str)] = &[
    (SchemaType::Avro, r#""string""#),
    (
        SchemaType::Avro,
        r#"{"type":"array","items":{"type":"map","values":"bytes"}}"#,
    ),
    (
        SchemaType::Avro,
        r#"{"type":"record","name":"r","fields":[{"name":"a","type":"long"},{"name":"s","type":["null","string"]},{"name":"e","type":{"type":"enum","name":"e","symbols":["A","B"]}},{"name":"f","type":{"type":"fixed","name":"f","size":3}},{"name":"d","type":"double"}]}"#,
    ),
    (
        SchemaType::Avro,
        r#"{"type":"record","name":"node","fields":[{"name":"v","type":"int"},{"name":"next","type":["null","node"]}]}"#,
    ),
    (
        SchemaType::Avro,
        r#"{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}"#,
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
  message Line { sint32 qty = 1; fixed64 sku = 2; Order parent = 3; }
  enum Kind { A = 0; B = 1; }
  Kind kind = 7;
}
message Other { float f = 1; }
"#,
    ),
    (
        SchemaType::Json,
        r##"{"type":"object","properties":{"id":{"type":"integer"},"tags":{"type":"array","items":{"type":"string","maxLength":8}},"nested":{"$ref":"#"}},"required":["id"],"additionalProperties":false}"##,
    ),
];

fn schemas() -> &'static [StoredSchema] {
    static PARSED: OnceLock<Vec<StoredSchema>> = OnceLock::new();
    PARSED.get_or_init(|| schemas::parse_all(SCHEMAS))
}

fuzz_target!(|data: &[u8]| {
    let Ok((id, payload)) = split(data) else {
        return;
    };
    let schemas = schemas();
    let _ = decode_payload(&schemas[id as usize % schemas.len()], payload);
});
