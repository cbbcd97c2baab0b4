//! Key conversion (`table.topic.convert.key.type`): a record's Kafka key as the table's `_key`
//! column.
//!
//! The raw key bytes are always in `_kafka.key`. With a key type other than `raw`, the key is
//! also decoded into `_key`, an optional top-level column:
//! - `string`: the key as UTF-8 text;
//! - `by_schema_id` (Schema Registry framed keys) and `by_latest_schema` (unframed keys of the
//!   topic's key subject's latest schema): the key schema's type. A record or message key is a
//!   struct of its fields; a primitive key (Avro `"string"`, `"long"`, JSON Schema
//!   `{"type": "integer"}`…) is that type. Key schemas evolve like value schemas: `_key`'s
//!   field ids stay stable, new fields are added as optional.
//!
//! A null key is a null `_key`. A key that does not decode makes its record a dead letter,
//! like a bad value.
//!
//! Upsert tables use `_key` for tombstones (a record with a null value): its id columns are
//! read from the key, a struct's fields of the same names or a primitive key standing for the
//! one id column ([`tombstone_keys`]).
//!
//! Invariant: [`KeyColumn`] holds exactly one entry per record appended, in order; the caller
//! takes them in the same counts as its rows ([`KeyColumn::take`]) and undoes the last one when
//! the record's value fails ([`KeyColumn::pop`]).

use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, AsArray, StringArray, StructArray};
use arrow::datatypes::{DataType, Field, FieldRef, Schema as ArrowSchema, SchemaRef};
use bytes::Bytes;
use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use inlet_schema_registry::framing::{self, Value};
use inlet_schema_registry::{ParsedSchema, StoredSchema};
use prost_reflect::ReflectMessage;

use crate::error::{Error, Result};

/// The decoded key's column.
pub(crate) const KEY_COLUMN: &str = "_key";

/// The name of the single field that wraps a key schema, so that any key type (a record or a
/// primitive) maps and decodes as a record with one field.
const WRAPPED: &str = "key";

/// The `_key` column for keys written with `schema` (for Protobuf, of the message the payload
/// names: None when the payload does not tell). Optional; its ids are provisional.
pub(crate) fn key_field(schema: &StoredSchema, payload: &[u8]) -> Result<Option<NestedField>> {
    let ty = match &schema.parsed {
        ParsedSchema::Avro(a) => {
            let wrapped = wrap_avro(a.table_schema(), &a.refs)?;
            unwrap_type(crate::avro::avro_to_iceberg(&wrapped, &a.refs)?)?
        }
        ParsedSchema::Json(j) => unwrap_type(crate::json::json_to_iceberg(&wrap_json(&j.value))?)?,
        ParsedSchema::Protobuf(p) => {
            match inlet_schema_registry::protobuf::decode_payload(p, payload) {
                Ok(m) => {
                    let s = crate::protobuf::protobuf_to_iceberg(&m.descriptor())?;
                    Type::Struct(s.as_struct().clone())
                }
                Err(_) => return Ok(None),
            }
        }
    };
    Ok(Some(NestedField::optional(1, KEY_COLUMN, ty)))
}

/// The `_key` column of `string` keys.
pub(crate) fn string_key_field() -> NestedField {
    NestedField::optional(1, KEY_COLUMN, Type::Primitive(PrimitiveType::String))
}

/// `schema` with `key` added as its last top-level column, ids renumbered past its own.
pub(crate) fn with_key(schema: &Schema, key: &NestedField) -> Result<Schema> {
    let mut next = schema.highest_field_id();
    let mut fields: Vec<_> = schema.as_struct().fields().to_vec();
    fields.push(Arc::new(crate::evolve::renumber(key, &mut next)));
    Ok(Schema::builder().with_fields(fields).build()?)
}

/// The one field of a wrapped key schema's mapping.
fn unwrap_type(wrapped: Schema) -> Result<Type> {
    wrapped
        .as_struct()
        .field_by_name(WRAPPED)
        .map(|f| (*f.field_type).clone())
        .ok_or_else(|| Error::Schema("the key schema has no mapping".into()))
}

/// An Avro record with the key schema as its one field. Its binary encoding is the key's.
fn wrap_avro(
    key: &apache_avro::Schema,
    refs: &[apache_avro::Schema],
) -> Result<apache_avro::Schema> {
    let key_json =
        serde_json::to_value(key).map_err(|e| Error::Schema(format!("key schema: {e}")))?;
    let wrapper = serde_json::json!({
        "type": "record",
        "name": "inlet_key_wrapper",
        "fields": [{"name": WRAPPED, "type": key_json}],
    });
    let refs: Vec<String> = refs
        .iter()
        .map(|r| serde_json::to_string(r).map_err(|e| Error::Schema(format!("key schema: {e}"))))
        .collect::<Result<_>>()?;
    let (schema, _) = apache_avro::Schema::parse_str_with_list(&wrapper.to_string(), &refs)
        .map_err(|e| Error::Schema(format!("key schema: {e}")))?;
    Ok(schema)
}

/// A JSON Schema object with the key schema as its one property; the key schema's definitions
/// stay reachable at the root.
fn wrap_json(key: &serde_json::Value) -> serde_json::Value {
    let mut wrapper = serde_json::json!({
        "type": "object",
        "properties": {WRAPPED: key},
    });
    for defs in ["definitions", "$defs"] {
        if let Some(d) = key.get(defs) {
            wrapper[defs] = d.clone();
        }
    }
    wrapper
}

/// Decodes one key schema's keys into `_key` values.
enum Decoder {
    Avro(crate::avro::AvroDecoder),
    Json(crate::json::JsonConverter),
    /// Per message type of the schema.
    Protobuf(crate::protobuf::ProtobufConverter, arrow::datatypes::Fields),
}

impl Decoder {
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn len(&self) -> usize {
        match self {
            Decoder::Avro(d) => d.len(),
            Decoder::Json(d) => d.len(),
            Decoder::Protobuf(d, _) => d.len(),
        }
    }

    fn truncate(&mut self, rows: usize) {
        match self {
            Decoder::Avro(d) => d.truncate(rows),
            Decoder::Json(d) => d.truncate(rows),
            Decoder::Protobuf(d, _) => d.truncate(rows),
        }
    }

    fn buffered_bytes(&self) -> usize {
        match self {
            Decoder::Avro(d) => d.buffered_bytes(),
            Decoder::Json(d) => d.buffered_bytes(),
            Decoder::Protobuf(d, _) => d.buffered_bytes(),
        }
    }

    fn finish(&mut self) -> Result<ArrayRef> {
        let mut arrays = match self {
            Decoder::Avro(d) => d.finish()?,
            Decoder::Json(d) => d.finish()?,
            Decoder::Protobuf(d, fields) => {
                let columns = d.finish()?;
                return Ok(Arc::new(StructArray::try_new(
                    fields.clone(),
                    columns,
                    None,
                )?));
            }
        };
        arrays
            .pop()
            .ok_or_else(|| Error::Schema("the key decoder made no column".into()))
    }
}

/// Where the last appended key went (for [`KeyColumn::pop`]).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Run {
    Nulls,
    Strings,
    /// Schema id and (Protobuf) message name.
    Decoded(u32, String),
}

/// The `_key` values of a job's rows, decoded as they come. See the module docs.
pub(crate) struct KeyColumn {
    /// The table's `_key` field (Arrow).
    field: FieldRef,
    decoders: std::collections::HashMap<(u32, String), Decoder>,
    current: Option<Run>,
    /// Finished pieces, in order, each of `field`'s type.
    done: Vec<ArrayRef>,
    nulls: usize,
    strings: Vec<Option<Bytes>>,
}

impl KeyColumn {
    /// A column filling `field`, the table's `_key` column in Arrow.
    pub(crate) fn new(field: FieldRef) -> Self {
        KeyColumn {
            field,
            decoders: Default::default(),
            current: None,
            done: Vec::new(),
            nulls: 0,
            strings: Vec::new(),
        }
    }

    /// Keys held, not taken yet.
    pub(crate) fn len(&self) -> usize {
        let current = match &self.current {
            Some(Run::Nulls) => self.nulls,
            Some(Run::Strings) => self.strings.len(),
            Some(Run::Decoded(id, m)) => {
                self.decoders.get(&(*id, m.clone())).map_or(0, Decoder::len)
            }
            None => 0,
        };
        self.done.iter().map(|a| a.len()).sum::<usize>() + current
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held by keys not taken yet.
    pub(crate) fn buffered_bytes(&self) -> usize {
        let decoders: usize = self.decoders.values().map(Decoder::buffered_bytes).sum();
        let strings: usize = self.strings.iter().flatten().map(|s| s.len() + 16).sum();
        let done: usize = self.done.iter().map(|a| a.get_array_memory_size()).sum();
        decoders + strings + done
    }

    /// Appends a null key.
    pub(crate) fn append_null(&mut self) -> Result<()> {
        self.switch(Run::Nulls)?;
        self.nulls += 1;
        Ok(())
    }

    /// Appends a `string` key (null: a null key).
    pub(crate) fn append_string(&mut self, key: Option<&Bytes>) -> std::result::Result<(), String> {
        let Some(key) = key else {
            return self.append_null().map_err(|e| e.to_string());
        };
        std::str::from_utf8(key).map_err(|e| format!("key is not UTF-8: {e}"))?;
        self.switch(Run::Strings).map_err(|e| e.to_string())?;
        self.strings.push(Some(key.clone()));
        Ok(())
    }

    /// Appends a key whose schema is `schema` and whose encoded form (after any framing) is
    /// `payload`.
    pub(crate) fn append_decoded(
        &mut self,
        schema: &StoredSchema,
        payload: &[u8],
    ) -> std::result::Result<(), String> {
        let message = match &schema.parsed {
            ParsedSchema::Protobuf(_) => match framing::decode_payload(schema, payload) {
                Ok(Value::Protobuf(m)) => Some(m),
                Ok(_) => return Err("key: not a Protobuf message".into()),
                Err(e) => return Err(format!("key: {e}")),
            },
            _ => None,
        };
        let name = message
            .as_ref()
            .map(|m| m.descriptor().full_name().to_string())
            .unwrap_or_default();
        let slot = (schema.id, name.clone());
        if !self.decoders.contains_key(&slot) {
            let d = self
                .decoder(schema, message.as_ref())
                .map_err(|e| format!("key: {e}"))?;
            self.decoders.insert(slot.clone(), d);
        }
        self.switch(Run::Decoded(schema.id, name))
            .map_err(|e| e.to_string())?;
        let decoder = self.decoders.get_mut(&slot).ok_or("key decoder")?;
        let appended = match decoder {
            Decoder::Avro(d) => d.append(payload),
            Decoder::Json(d) => match framing::decode_payload(schema, payload) {
                Ok(Value::Json(v)) => d.append(&serde_json::json!({ WRAPPED: v })),
                Ok(_) => return Err("key: not a JSON value".into()),
                Err(e) => return Err(format!("key: {e}")),
            },
            Decoder::Protobuf(d, _) => d.append(message.as_ref().ok_or("key: no message")?),
        };
        appended.map_err(|e| format!("key: {e}"))
    }

    fn decoder(
        &self,
        schema: &StoredSchema,
        message: Option<&prost_reflect::DynamicMessage>,
    ) -> Result<Decoder> {
        let wrapped_target = || -> SchemaRef {
            Arc::new(ArrowSchema::new(vec![Field::new(
                WRAPPED,
                self.field.data_type().clone(),
                true,
            )
            .with_metadata(self.field.metadata().clone())]))
        };
        Ok(match &schema.parsed {
            ParsedSchema::Avro(a) => {
                let wrapped = wrap_avro(a.table_schema(), &a.refs)?;
                Decoder::Avro(crate::avro::AvroDecoder::new(
                    &wrapped,
                    &a.refs,
                    wrapped_target(),
                )?)
            }
            ParsedSchema::Json(j) => Decoder::Json(crate::json::JsonConverter::new(
                &wrap_json(&j.value),
                wrapped_target(),
            )?),
            ParsedSchema::Protobuf(_) => {
                let DataType::Struct(fields) = self.field.data_type() else {
                    return Err(Error::Schema(
                        "a Protobuf key needs a struct _key column".into(),
                    ));
                };
                let message = message.ok_or_else(|| Error::Schema("no key message".into()))?;
                let target = Arc::new(ArrowSchema::new(fields.clone()));
                Decoder::Protobuf(
                    crate::protobuf::ProtobufConverter::new(&message.descriptor(), target)?,
                    fields.clone(),
                )
            }
        })
    }

    /// Makes `run` the current run, finishing the previous one into `done`.
    fn switch(&mut self, run: Run) -> Result<()> {
        if self.current.as_ref() == Some(&run) {
            return Ok(());
        }
        self.finish_current()?;
        self.current = Some(run);
        Ok(())
    }

    fn finish_current(&mut self) -> Result<()> {
        let piece: Option<ArrayRef> = match self.current.take() {
            None => None,
            Some(Run::Nulls) => Some(new_null_array(
                self.field.data_type(),
                std::mem::take(&mut self.nulls),
            )),
            Some(Run::Strings) => Some(Arc::new(StringArray::from_iter(
                self.strings
                    .drain(..)
                    .map(|s| s.map(|b| String::from_utf8_lossy(&b).into_owned())),
            ))),
            Some(Run::Decoded(id, m)) => match self.decoders.get_mut(&(id, m)) {
                Some(d) => Some(d.finish()?),
                None => None,
            },
        };
        if let Some(p) = piece.filter(|p| !p.is_empty()) {
            self.done.push(p);
        }
        Ok(())
    }

    /// Undoes the last append (its record's value failed).
    pub(crate) fn pop(&mut self) -> Result<()> {
        match self.current.clone() {
            Some(Run::Nulls) if self.nulls > 0 => {
                self.nulls -= 1;
                return Ok(());
            }
            Some(Run::Strings) if !self.strings.is_empty() => {
                self.strings.pop();
                return Ok(());
            }
            Some(Run::Decoded(id, m)) => {
                if let Some(d) = self.decoders.get_mut(&(id, m)) {
                    if !d.is_empty() {
                        let n = d.len();
                        d.truncate(n - 1);
                        return Ok(());
                    }
                }
            }
            _ => {}
        }
        // The last key was already moved into a finished piece by a take.
        if let Some(last) = self.done.pop() {
            if last.len() > 1 {
                self.done.push(last.slice(0, last.len() - 1));
            }
        }
        Ok(())
    }

    /// The first `rows` keys as one array of the `_key` type; the rest stay.
    pub(crate) fn take(&mut self, rows: usize) -> Result<ArrayRef> {
        self.finish_current()?;
        let pieces: Vec<&dyn Array> = self.done.iter().map(|a| a.as_ref()).collect();
        let all = if pieces.is_empty() {
            arrow::array::new_empty_array(self.field.data_type())
        } else {
            arrow::compute::concat(&pieces)?
        };
        if all.len() < rows {
            return Err(Error::Schema(format!("{} keys for {rows} rows", all.len())));
        }
        self.done.clear();
        if all.len() > rows {
            // Copy the rest so the taken rows' buffers can go.
            let rest = all.slice(rows, all.len() - rows);
            self.done.push(arrow::compute::concat(&[rest.as_ref()])?);
        }
        Ok(all.slice(0, rows))
    }
}

/// The id column values of tombstones, from their `_key` values: a struct key's fields named
/// like the id columns, or a primitive key standing for the single id column. Each is cast to
/// the id column's type (`id_types`, Arrow) so that it encodes like the rows' keys. Null keys
/// are skipped (None).
pub(crate) fn tombstone_keys(
    keys: &ArrayRef,
    id_columns: &[String],
    id_types: &[DataType],
) -> Result<Vec<Option<Vec<u8>>>> {
    let columns: Vec<ArrayRef> = match keys.data_type() {
        DataType::Struct(_) => {
            let s = keys.as_struct();
            id_columns
                .iter()
                .zip(id_types)
                .map(|(c, t)| {
                    let column = s.column_by_name(c).ok_or_else(|| {
                        Error::Schema(format!(
                            "a tombstone's key has no field {c:?} (table.topic.id.columns)"
                        ))
                    })?;
                    Ok(arrow::compute::cast(column, t)?)
                })
                .collect::<Result<_>>()?
        }
        _ if id_columns.len() == 1 => vec![arrow::compute::cast(keys, &id_types[0])?],
        _ => {
            return Err(Error::Schema(format!(
                "a primitive key cannot stand for {} id columns; tombstones need a record key",
                id_columns.len()
            )))
        }
    };
    let encoded = crate::live_files::encode_keys(&columns, keys.len())?;
    Ok(encoded
        .into_iter()
        .enumerate()
        .map(|(i, k)| {
            let null = keys.is_null(i) || columns.iter().any(|c| c.is_null(i));
            (!null).then_some(k)
        })
        .collect())
}
