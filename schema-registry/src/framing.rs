//! Decoding a record framed by Confluent's serializers: magic byte 0, the schema id as a
//! big-endian u32, then the payload of the schema's type: an Avro binary datum; Protobuf
//! message indexes then the message; or JSON text. The one decoder the broker (produce-time
//! validation) and the table workers share.
//!
//! Contract: any input bytes give a value or a [`FramingError`], never a panic; a datum must use
//! the whole payload (trailing bytes are an error, as they mean a wrong schema); a JSON payload
//! must satisfy its schema.

use std::sync::Arc;

use crate::error::Error;
use crate::registry::Registry;
use crate::schema::{ParsedSchema, StoredSchema};

/// A decoded payload, typed by its schema's type.
#[derive(Debug, Clone)]
pub enum Value {
    Avro(apache_avro::types::Value),
    Protobuf(prost_reflect::DynamicMessage),
    Json(serde_json::Value),
}

/// Magic byte of Confluent's framing.
pub const MAGIC: u8 = 0;
/// Length of the header: magic byte and schema id.
pub const HEADER_LEN: usize = 5;

/// Why a framed record could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum FramingError {
    #[error("record of {0} bytes is too short for the 5-byte schema registry header")]
    TooShort(usize),
    #[error("unknown magic byte {0} (expected 0: a schema registry framed record)")]
    BadMagic(u8),
    #[error("unknown schema id {0}")]
    UnknownId(u32),
    #[error("payload does not decode with schema {id}: {detail}")]
    Undecodable { id: u32, detail: String },
    #[error("payload has {extra} bytes left over after a datum of schema {id}")]
    TrailingBytes { id: u32, extra: usize },
    #[error("schema registry: {0}")]
    Registry(#[source] Error),
}

impl FramingError {
    /// Whether retrying later may succeed (a metadata store failure, not bad bytes).
    pub fn is_retryable(&self) -> bool {
        matches!(self, FramingError::Registry(e) if e.is_retryable())
    }

    /// What the caller may do: bytes that are not a framed record of a known schema are the
    /// producer's; a registry failure keeps the registry's kind.
    pub fn kind(&self) -> inlet_common::ErrorKind {
        match self {
            FramingError::Registry(e) => e.kind(),
            _ => inlet_common::ErrorKind::BadInput,
        }
    }
}

/// A decoded record.
#[derive(Debug, Clone)]
pub struct Decoded {
    pub schema: Arc<StoredSchema>,
    pub value: Value,
}

/// Splits a framed record into its schema id and payload.
pub fn split(record: &[u8]) -> Result<(u32, &[u8]), FramingError> {
    if record.len() < HEADER_LEN {
        return Err(FramingError::TooShort(record.len()));
    }
    if record[0] != MAGIC {
        return Err(FramingError::BadMagic(record[0]));
    }
    let id = u32::from_be_bytes([record[1], record[2], record[3], record[4]]);
    Ok((id, &record[HEADER_LEN..]))
}

/// Largest length apache-avro accepts for one string, bytes value or array block while
/// decoding. Its own default (512 MiB) lets an 8-byte payload claiming a huge array make it
/// reserve `count × size_of::<Value>()` bytes — 4.6 GB in the case the fuzz target found. With
/// this bound the worst reservation is about 200 MiB, never touched; a record whose single
/// string or bytes field exceeds it is refused as undecodable.
pub const AVRO_MAX_ALLOCATION_BYTES: usize = 4 << 20;

/// Decodes a `payload` (without header) written with `schema`.
pub fn decode_payload(schema: &StoredSchema, payload: &[u8]) -> Result<Value, FramingError> {
    let undecodable = |detail: String| FramingError::Undecodable {
        id: schema.id,
        detail,
    };
    match &schema.parsed {
        ParsedSchema::Avro(avro) => {
            // First call wins for the process (apache-avro's setting is global and set once);
            // every decode in Inlet comes through here.
            apache_avro::util::max_allocation_bytes(AVRO_MAX_ALLOCATION_BYTES);
            // apache-avro decodes recursively, one stack frame per level: a recursive schema (a
            // linked list) lets a payload nest as deep as it has bytes and overflow the stack,
            // which aborts the process (found by the fuzz target). Such schemas have no Iceberg
            // mapping either.
            if avro.recursive {
                return Err(undecodable("recursive schemas are not decoded (a record type that contains itself has no table mapping, and its nesting is unbounded)".into()));
            }
            let mut rest = payload;
            let value = if avro.refs.is_empty() {
                apache_avro::from_avro_datum(&avro.schema, &mut rest, None)
            } else {
                apache_avro::from_avro_datum_schemata(
                    &avro.schema,
                    avro.refs.iter().collect(),
                    &mut rest,
                    None,
                )
            }
            .map_err(|e| undecodable(e.to_string()))?;
            if !rest.is_empty() {
                return Err(FramingError::TrailingBytes {
                    id: schema.id,
                    extra: rest.len(),
                });
            }
            Ok(Value::Avro(value))
        }
        ParsedSchema::Protobuf(proto) => crate::protobuf::decode_payload(proto, payload)
            .map(Value::Protobuf)
            .map_err(undecodable),
        ParsedSchema::Json(json) => crate::json_schema::decode_payload(json, payload)
            .map(Value::Json)
            .map_err(undecodable),
    }
}

/// Decodes a framed `record`, finding its schema in `registry` (cached after the first use).
pub async fn decode(registry: &Registry, record: &[u8]) -> Result<Decoded, FramingError> {
    let (id, payload) = split(record)?;
    let schema = registry.schema_by_id(id).await.map_err(|e| match e {
        Error::SchemaIdNotFound(id) => FramingError::UnknownId(id),
        e => FramingError::Registry(e),
    })?;
    let value = decode_payload(&schema, payload)?;
    Ok(Decoded { schema, value })
}

/// Frames a payload: header then `payload`.
pub fn frame(id: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.push(MAGIC);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn framing_errors_are_the_producers_unless_the_registry_failed() {
        use inlet_common::ErrorKind;
        assert_eq!(super::FramingError::TooShort(3).kind(), ErrorKind::BadInput);
        assert_eq!(
            super::FramingError::UnknownId(7).kind(),
            ErrorKind::BadInput
        );
        let registry = super::FramingError::Registry(super::Error::Corrupt("a row".into()));
        assert_eq!(
            registry.kind(),
            super::Error::Corrupt("a row".into()).kind()
        );
        assert!(std::error::Error::source(&registry).is_some());
    }

    #[test]
    fn recursive_schemas_are_not_decoded() {
        // Found by the fuzz target: a linked list nested as deep as the payload is long
        // overflowed the stack inside apache-avro.
        let schema = stored(
            r#"{"type":"record","name":"node","fields":[{"name":"v","type":"int"},{"name":"next","type":["null","node"]}]}"#,
        );
        let deep: Vec<u8> = std::iter::repeat_n([0x02u8, 0x02], 200_000)
            .flatten()
            .collect();
        let err = super::decode_payload(&schema, &deep).expect_err("refused");
        assert!(err.to_string().contains("recursive"), "{err}");
    }

    #[test]
    fn a_huge_array_count_in_a_tiny_payload_is_refused() {
        // Found by the fuzz target: a large count in an 8-byte payload made apache-avro reserve
        // gigabytes for the array's values.
        let schema = stored(r#"{"type":"array","items":"string"}"#);
        // A block count of 100 million (zig-zag varint), then nothing: under apache-avro's own
        // 512 MiB bound, so only ours refuses it before the reservation.
        let payload = [0x80, 0x84, 0xaf, 0x5f, 0, 0, 0];
        let err = super::decode_payload(&schema, &payload).expect_err("refused");
        assert!(err.to_string().contains("allocate"), "{err}");
    }

    use super::*;
    use apache_avro::types::Value as AvroValue;
    use proptest::prelude::*;

    const SCHEMAS: &[&str] = &[
        r#""string""#,
        r#"{"type":"array","items":{"type":"map","values":"bytes"}}"#,
        r#"{"type":"record","name":"r","fields":[{"name":"a","type":"long"},{"name":"s","type":["null","string"]},{"name":"e","type":{"type":"enum","name":"e","symbols":["A","B"]}},{"name":"f","type":{"type":"fixed","name":"f","size":3}},{"name":"d","type":"double"}]}"#,
        r#"{"type":"record","name":"node","fields":[{"name":"v","type":"int"},{"name":"next","type":["null","node"]}]}"#,
        r#"{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}"#,
    ];

    pub(super) fn stored(text: &str) -> StoredSchema {
        let avro = crate::avro::parse(text).expect("valid");
        StoredSchema::new(7, ParsedSchema::Avro(avro), Vec::new())
    }

    fn avro_schema(s: &StoredSchema) -> &apache_avro::Schema {
        match &s.parsed {
            ParsedSchema::Avro(a) => &a.schema,
            _ => unreachable!("an Avro schema"),
        }
    }

    #[test]
    fn header_errors() {
        assert!(matches!(split(&[0, 0, 0]), Err(FramingError::TooShort(3))));
        assert!(matches!(
            split(&[1, 0, 0, 0, 1]),
            Err(FramingError::BadMagic(1))
        ));
        assert_eq!(split(&[0, 0, 0, 1, 2, 9]).expect("ok"), (258, &[9u8][..]));
    }

    #[test]
    fn round_trip_and_trailing_bytes() {
        let s = stored(SCHEMAS[2]);
        let value = AvroValue::Record(vec![
            ("a".into(), AvroValue::Long(-5)),
            (
                "s".into(),
                AvroValue::Union(1, Box::new(AvroValue::String("x".into()))),
            ),
            ("e".into(), AvroValue::Enum(1, "B".into())),
            ("f".into(), AvroValue::Fixed(3, vec![1, 2, 3])),
            ("d".into(), AvroValue::Double(1.5)),
        ]);
        let bytes = apache_avro::to_avro_datum(avro_schema(&s), value.clone()).expect("encode");
        let framed = frame(7, &bytes);
        let (id, payload) = split(&framed).expect("header");
        assert_eq!(id, 7);
        match decode_payload(&s, payload).expect("decode") {
            Value::Avro(v) => assert_eq!(v, value),
            other => panic!("not an Avro value: {other:?}"),
        }
        let mut longer = payload.to_vec();
        longer.push(0);
        assert!(matches!(
            decode_payload(&s, &longer),
            Err(FramingError::TrailingBytes { extra: 1, .. })
        ));
        assert!(matches!(
            decode_payload(&s, &payload[..payload.len() - 1]),
            Err(FramingError::Undecodable { .. })
        ));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = split(&bytes);
            for text in SCHEMAS {
                let _ = decode_payload(&stored(text), &bytes);
            }
        }
    }
}
