//! Produce-time checks with the table path's own decoders: [`PayloadChecker`] decides whether a
//! framed record's payload will convert, by running exactly the decoders a conversion job runs
//! (the Avro → Arrow decoder, the JSON and Protobuf converters, and [`KeyColumn`] for keys),
//! into the writer schema's own columns, and throwing the row away.
//!
//! Invariant: a payload this accepts, a job converts (as long as the table can take the
//! writer's schema, which `worker::TableSchemas::fits` answers); a payload this refuses, a
//! job sends to the dead-letter table. A property
//! test (`tests/check.rs`) feeds both the same bytes.
//!
//! Memory: decoders are cached per schema id, at most [`PayloadChecker::MAX_SCHEMAS`] of them,
//! and each holds at most one row (it is cut back after every check), so the cache is bounded
//! by the schema count times the largest row seen; a decoder that held more than
//! [`MAX_RETAINED_BYTES`] after a check is dropped rather than kept.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{Field, SchemaRef};
use inlet_schema_registry::framing::{self, Value};
use inlet_schema_registry::{ParsedSchema, StoredSchema};
use parking_lot::Mutex;
use prost_reflect::ReflectMessage;

use crate::key::{key_field, KeyColumn};

/// Which side of a record a payload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    Value,
    Key,
}

/// A decoder kept after a check only while it holds less than this.
pub(crate) const MAX_RETAINED_BYTES: usize = 1 << 20;

enum ValueCheck {
    Avro(crate::avro::AvroDecoder),
    Json(crate::json::JsonConverter),
    /// Converters per message type.
    Protobuf(HashMap<String, crate::protobuf::ProtobufConverter>),
    /// The schema has no table mapping: every payload of it is a dead letter.
    Unmappable(String),
}

/// Key decoders by (schema id, Protobuf message name or empty).
type KeyColumns = HashMap<(u32, String), Arc<Mutex<KeyColumn>>>;

/// Checks payloads with the table path's decoders. See the module docs.
#[derive(Default)]
pub struct PayloadChecker {
    values: Mutex<HashMap<u32, Arc<Mutex<ValueCheck>>>>,
    keys: Mutex<KeyColumns>,
}

impl std::fmt::Debug for PayloadChecker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PayloadChecker")
            .field("values", &self.values.lock().len())
            .field("keys", &self.keys.lock().len())
            .finish()
    }
}

impl PayloadChecker {
    /// Schemas whose decoders are kept, per side.
    pub const MAX_SCHEMAS: usize = 256;

    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `payload` (after the 5-byte framing) converts as `side` of a record written
    /// with `schema`; the error is the message a dead letter would carry.
    pub fn check(&self, side: Side, schema: &StoredSchema, payload: &[u8]) -> Result<(), String> {
        match side {
            Side::Value => self.check_value(schema, payload),
            Side::Key => self.check_key(schema, payload),
        }
    }

    fn check_value(&self, schema: &StoredSchema, payload: &[u8]) -> Result<(), String> {
        let check = {
            let mut values = self.values.lock();
            if values.len() >= Self::MAX_SCHEMAS && !values.contains_key(&schema.id) {
                values.clear();
            }
            values
                .entry(schema.id)
                .or_insert_with(|| Arc::new(Mutex::new(value_check(schema))))
                .clone()
        };
        let mut check = check.lock();
        let (result, held) = match &mut *check {
            ValueCheck::Unmappable(e) => (Err(e.clone()), 0),
            ValueCheck::Avro(d) => {
                let r = d.append(payload).map_err(|e| e.to_string());
                let held = d.buffered_bytes();
                d.truncate(0);
                (r, held)
            }
            ValueCheck::Json(j) => {
                let r = match framing::decode_payload(schema, payload) {
                    Ok(Value::Json(v)) => j.append(&v).map_err(|e| e.to_string()),
                    Ok(_) => Err("not a JSON value".into()),
                    Err(e) => Err(e.to_string()),
                };
                let held = j.buffered_bytes();
                j.truncate(0);
                (r, held)
            }
            ValueCheck::Protobuf(converters) => {
                let message = match framing::decode_payload(schema, payload) {
                    Ok(Value::Protobuf(m)) => m,
                    Ok(_) => return Err("not a Protobuf message".into()),
                    Err(e) => return Err(e.to_string()),
                };
                let name = message.descriptor().full_name().to_string();
                if !converters.contains_key(&name) {
                    let made = crate::protobuf::protobuf_to_iceberg(&message.descriptor())
                        .and_then(|s| arrow_of(&s))
                        .and_then(|t| {
                            crate::protobuf::ProtobufConverter::new(&message.descriptor(), t)
                        });
                    match made {
                        Ok(c) => {
                            converters.insert(name.clone(), c);
                        }
                        Err(e) => return Err(e.to_string()),
                    }
                }
                let c = converters.get_mut(&name).ok_or("converter")?;
                let r = c.append(&message).map_err(|e| e.to_string());
                let held = c.buffered_bytes();
                c.truncate(0);
                (r, held)
            }
        };
        if held > MAX_RETAINED_BYTES {
            drop(check);
            self.values.lock().remove(&schema.id);
        }
        result
    }

    fn check_key(&self, schema: &StoredSchema, payload: &[u8]) -> Result<(), String> {
        // A Protobuf schema may frame several message types, each its own `_key` type.
        let message = match &schema.parsed {
            ParsedSchema::Protobuf(_) => match framing::decode_payload(schema, payload) {
                Ok(Value::Protobuf(m)) => m.descriptor().full_name().to_string(),
                Ok(_) => return Err("key: not a Protobuf message".into()),
                Err(e) => return Err(format!("key: {e}")),
            },
            _ => String::new(),
        };
        let slot = (schema.id, message);
        let column = {
            let mut keys = self.keys.lock();
            if keys.len() >= Self::MAX_SCHEMAS && !keys.contains_key(&slot) {
                keys.clear();
            }
            match keys.get(&slot) {
                Some(c) => c.clone(),
                None => {
                    let field = match key_field(schema, payload) {
                        Ok(Some(f)) => f,
                        Ok(None) => return Err("key: the payload names no message".into()),
                        Err(e) => return Err(format!("key: {e}")),
                    };
                    let arrow = arrow_of(
                        &iceberg::spec::Schema::builder()
                            .with_fields(vec![Arc::new(field)])
                            .build()
                            .map_err(|e| format!("key: {e}"))?,
                    )
                    .map_err(|e| format!("key: {e}"))?;
                    let field: Arc<Field> = arrow.fields()[0].clone();
                    let c = Arc::new(Mutex::new(KeyColumn::new(field)));
                    keys.insert(slot.clone(), c.clone());
                    c
                }
            }
        };
        let mut column = column.lock();
        let result = column.append_decoded(schema, payload);
        if result.is_ok() {
            column
                .pop()
                .map_err(|e| format!("key: undoing the check failed: {e}"))?;
        }
        if column.buffered_bytes() > MAX_RETAINED_BYTES {
            drop(column);
            self.keys.lock().remove(&slot);
        }
        result
    }
}

fn value_check(schema: &StoredSchema) -> ValueCheck {
    let made = match &schema.parsed {
        ParsedSchema::Avro(a) => crate::avro::avro_to_iceberg(a.table_schema(), &a.refs)
            .and_then(|s| arrow_of(&s))
            .and_then(|t| crate::avro::AvroDecoder::new(a.table_schema(), &a.refs, t))
            .map(ValueCheck::Avro),
        ParsedSchema::Json(j) => crate::json::json_to_iceberg(&j.value)
            .and_then(|s| arrow_of(&s))
            .and_then(|t| crate::json::JsonConverter::new(&j.value, t))
            .map(ValueCheck::Json),
        ParsedSchema::Protobuf(_) => Ok(ValueCheck::Protobuf(HashMap::new())),
    };
    made.unwrap_or_else(|e| ValueCheck::Unmappable(e.to_string()))
}

fn arrow_of(schema: &iceberg::spec::Schema) -> crate::error::Result<SchemaRef> {
    Ok(Arc::new(iceberg::arrow::schema_to_arrow_schema(schema)?))
}
