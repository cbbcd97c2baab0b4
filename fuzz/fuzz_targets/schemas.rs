//! Shared by the fuzz targets that decode framed payloads: schema texts parsed once into
//! stored schemas whose ids are their positions.

use inlet_schema_registry::{ParsedSchema, SchemaType, StoredSchema};

/// `texts` parsed, schema `i` with id `i`; panics on an invalid schema (a bug in the target).
pub fn parse_all(texts: &[(SchemaType, &str)]) -> Vec<StoredSchema> {
    texts
        .iter()
        .enumerate()
        .map(|(i, (schema_type, text))| {
            let parsed = ParsedSchema::parse(*schema_type, text, &[]).expect("valid schema");
            StoredSchema::new(i as u32, parsed, Vec::new())
        })
        .collect()
}
