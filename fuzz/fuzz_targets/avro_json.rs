//! Avro's JSON encoding (`inlet_schema_registry::avro_json`, what `inlet produce` writes each
//! input line with): any JSON text against schemas of every kind is written as a datum or
//! refused with a reason, never a panic or a stack overflow; a datum written must read back
//! with the same schema through apache-avro's own decoder, using all its bytes, and print back
//! as JSON.
#![no_main]

use std::sync::OnceLock;

use inlet_schema_registry::avro::{parse, AvroSchema};
use inlet_schema_registry::avro_json::{to_json, Encoder};
use libfuzzer_sys::fuzz_target;

const SCHEMAS: &[&str] = &[
    r#""string""#,
    r#"["null", "int", "string"]"#,
    r#"{"type":"array","items":{"type":"map","values":["null","bytes","double"]}}"#,
    r#"{"type":"record","name":"r","fields":[{"name":"a","type":"long"},{"name":"s","type":["null","string"],"default":null},{"name":"e","type":{"type":"enum","name":"e","symbols":["A","B"]}},{"name":"f","type":{"type":"fixed","name":"f","size":3}},{"name":"d","type":"float","default":1.5}]}"#,
    r#"{"type":"record","name":"node","fields":[{"name":"v","type":"int"},{"name":"next","type":["null","node"]}]}"#,
    r#"{"type":"record","name":"t","fields":[{"name":"day","type":{"type":"int","logicalType":"date"}},{"name":"at","type":{"type":"long","logicalType":"timestamp-micros"}},{"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":20,"scale":4}},{"name":"small","type":{"type":"fixed","name":"dec4","size":4,"logicalType":"decimal","precision":9,"scale":2}},{"name":"id","type":{"type":"string","logicalType":"uuid"}}]}"#,
];

fn schemas() -> &'static [AvroSchema] {
    static PARSED: OnceLock<Vec<AvroSchema>> = OnceLock::new();
    PARSED.get_or_init(|| {
        SCHEMAS
            .iter()
            .map(|s| parse(s).expect("the fuzz target's schemas parse"))
            .collect()
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, text)) = data.split_first() else {
        return;
    };
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(text) else {
        return;
    };
    // Inlet's bound on apache-avro's allocations (process-wide, set by the first call), as
    // every decode in the node has it.
    apache_avro::util::max_allocation_bytes(inlet_schema_registry::framing::AVRO_MAX_ALLOCATION_BYTES);
    let schema = &schemas()[usize::from(which) % SCHEMAS.len()];
    let mut out = Vec::new();
    if Encoder::new(schema).encode(&value, &mut out).is_ok() {
        let mut rest = &out[..];
        let decoded = apache_avro::from_avro_datum(&schema.schema, &mut rest, None)
            .unwrap_or_else(|e| panic!("a datum written for {value} does not read back: {e}"));
        assert!(rest.is_empty(), "a datum written for {value} has bytes left over");
        let printed = to_json(schema, &decoded);
        assert!(
            serde_json::from_str::<serde_json::Value>(&printed).is_ok(),
            "{printed} is not JSON"
        );
    }
});
