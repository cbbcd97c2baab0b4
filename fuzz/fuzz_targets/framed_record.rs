//! A record framed for the schema registry (magic byte, schema id, Avro datum): splitting and
//! decoding against a few schemas must refuse bad input with an error, never panic.
#![no_main]

use std::sync::OnceLock;

use inlet_schema_registry::framing::{decode_payload, split};
use inlet_schema_registry::{avro, SchemaType, StoredSchema};
use libfuzzer_sys::fuzz_target;

const SCHEMAS: &[&str] = &[
    r#""string""#,
    r#"{"type":"array","items":{"type":"map","values":"bytes"}}"#,
    r#"{"type":"record","name":"r","fields":[{"name":"a","type":"long"},{"name":"s","type":["null","string"]},{"name":"e","type":{"type":"enum","name":"e","symbols":["A","B"]}},{"name":"f","type":{"type":"fixed","name":"f","size":3}},{"name":"d","type":"double"}]}"#,
    r#"{"type":"record","name":"node","fields":[{"name":"v","type":"int"},{"name":"next","type":["null","node"]}]}"#,
    r#"{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}"#,
];

fn schemas() -> &'static [StoredSchema] {
    static PARSED: OnceLock<Vec<StoredSchema>> = OnceLock::new();
    PARSED.get_or_init(|| {
        SCHEMAS
            .iter()
            .enumerate()
            .map(|(i, text)| {
                let schema = avro::parse(text).expect("valid schema").schema;
                StoredSchema::new(i as u32, SchemaType::Avro, text.to_string(), schema)
            })
            .collect()
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok((id, payload)) = split(data) else {
        return;
    };
    let schemas = schemas();
    let _ = decode_payload(&schemas[id as usize % schemas.len()], payload);
});
