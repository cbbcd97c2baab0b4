//! The Confluent-compatible Schema Registry (DESIGN.md §2, §5): REST API, schema storage,
//! compatibility rules for Avro, Protobuf and JSON Schema, and decoding a framed record
//! (magic byte 0, 4-byte schema id, payload) into a typed value.
//!
//! Not built yet: the Schema Registry issue builds this crate. Until then it only proves that
//! the pinned `apache-avro` and `prost-reflect` crates work with this toolchain.

#[cfg(test)]
mod tests {
    use apache_avro::{from_avro_datum, to_avro_datum, types::Value, Schema};

    #[test]
    fn avro_datum_round_trips() {
        let schema = Schema::parse_str(
            r#"{"type":"record","name":"r","fields":[{"name":"id","type":"long"}]}"#,
        )
        .expect("parse schema");
        let value = Value::Record(vec![("id".into(), Value::Long(42))]);
        let bytes = to_avro_datum(&schema, value.clone()).expect("encode");
        let decoded = from_avro_datum(&schema, &mut bytes.as_slice(), None).expect("decode");
        assert_eq!(decoded, value);
    }

    #[test]
    fn prost_reflect_builds_an_empty_pool() {
        let pool = prost_reflect::DescriptorPool::new();
        assert_eq!(pool.all_messages().count(), 0);
    }
}
