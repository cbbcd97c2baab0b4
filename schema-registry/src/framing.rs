//! Decoding a record framed by Confluent's serializers: magic byte 0, the schema id as a
//! big-endian u32, then the Avro binary datum. The one decoder the broker (produce-time
//! validation) and the table workers share.
//!
//! Contract: any input bytes give a value or a [`FramingError`], never a panic; a datum must use
//! the whole payload (trailing bytes are an error, as they mean a wrong schema).

use std::sync::Arc;

use apache_avro::types::Value;

use crate::error::Error;
use crate::registry::{Registry, StoredSchema};

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
    Registry(Error),
}

impl FramingError {
    /// Whether retrying later may succeed (a metadata store failure, not bad bytes).
    pub fn is_retryable(&self) -> bool {
        matches!(self, FramingError::Registry(e) if e.is_retryable())
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

/// Decodes an Avro `payload` (without header) written with `schema`.
pub fn decode_payload(schema: &StoredSchema, payload: &[u8]) -> Result<Value, FramingError> {
    let mut rest = payload;
    let value = apache_avro::from_avro_datum(&schema.avro, &mut rest, None).map_err(|e| {
        FramingError::Undecodable {
            id: schema.id,
            detail: e.to_string(),
        }
    })?;
    if !rest.is_empty() {
        return Err(FramingError::TrailingBytes {
            id: schema.id,
            extra: rest.len(),
        });
    }
    Ok(value)
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

/// Frames an Avro datum: header then `payload`.
pub fn frame(id: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.push(MAGIC);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::SchemaType;
    use proptest::prelude::*;

    const SCHEMAS: &[&str] = &[
        r#""string""#,
        r#"{"type":"array","items":{"type":"map","values":"bytes"}}"#,
        r#"{"type":"record","name":"r","fields":[{"name":"a","type":"long"},{"name":"s","type":["null","string"]},{"name":"e","type":{"type":"enum","name":"e","symbols":["A","B"]}},{"name":"f","type":{"type":"fixed","name":"f","size":3}},{"name":"d","type":"double"}]}"#,
        r#"{"type":"record","name":"node","fields":[{"name":"v","type":"int"},{"name":"next","type":["null","node"]}]}"#,
        r#"{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}"#,
    ];

    fn stored(text: &str) -> StoredSchema {
        StoredSchema {
            id: 7,
            schema_type: SchemaType::Avro,
            text: text.to_string(),
            avro: crate::avro::parse(text).expect("valid").schema,
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
        let value = Value::Record(vec![
            ("a".into(), Value::Long(-5)),
            (
                "s".into(),
                Value::Union(1, Box::new(Value::String("x".into()))),
            ),
            ("e".into(), Value::Enum(1, "B".into())),
            ("f".into(), Value::Fixed(3, vec![1, 2, 3])),
            ("d".into(), Value::Double(1.5)),
        ]);
        let bytes = apache_avro::to_avro_datum(&s.avro, value.clone()).expect("encode");
        let framed = frame(7, &bytes);
        let (id, payload) = split(&framed).expect("header");
        assert_eq!(id, 7);
        assert_eq!(decode_payload(&s, payload).expect("decode"), value);
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
