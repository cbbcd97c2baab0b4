//! The rows of a range: each record's value decoded into Arrow columns by the decoder of its
//! schema (Avro, Protobuf, JSON, or the plain `value` column), with `_kafka` and `_key` beside
//! it, and runs of records with the same decoder cut into record batches.
//!
//! Invariants:
//! - Rows are appended in offset order, and a batch holds one run of one decoder (for
//!   Protobuf, of one message type), so batches keep the records' order.
//! - A record becomes a whole row or none: an error names the record's problem and leaves no
//!   part of its row behind (the caller pops its `_key`).
//! - Every batch has the job's table schema: value columns a run's decoder does not fill are
//!   null.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::ArrayBuilder;
use arrow::array::{
    ArrayRef, Int32Builder, Int64Builder, LargeBinaryBuilder, RecordBatch, StringBuilder,
    StructArray, TimestampMicrosecondBuilder,
};
use arrow::datatypes::{DataType, SchemaRef};
use iceberg::spec::Schema;
use inlet_schema_registry::framing::{self, Value};
use inlet_schema_registry::{ParsedSchema, StoredSchema};
use prost_reflect::ReflectMessage;

use super::read::Rec;
use crate::error::{Error, Result};
use crate::key::KeyColumn;
use crate::transform::ValueTransform;

/// A value decoder for one schema (or the plain `value` column), with the nested target it
/// fills (see `transform`).
enum Decoder {
    Avro(crate::avro::AvroDecoder, SchemaRef),
    /// Converters per message type, and the type of the current run.
    Protobuf(
        HashMap<String, (crate::protobuf::ProtobufConverter, SchemaRef)>,
        Option<String>,
    ),
    Json(crate::json::JsonConverter, SchemaRef),
    Plain(PlainColumn),
}

enum PlainColumn {
    Str(StringBuilder),
    Raw(LargeBinaryBuilder),
}

/// Builds the rows of a range: runs of records with the same decoder become record batches.
pub(super) struct RowBuilder {
    schema: SchemaRef,
    value_target: SchemaRef,
    kafka_index: usize,
    kafka_fields: arrow::datatypes::Fields,
    /// The `_key` column's index and values (`convert.key.type`), filled by the caller one
    /// key per row, before the row's value.
    pub(super) keys: Option<(usize, KeyColumn)>,
    partition_number: i32,
    transform: ValueTransform,
    decoders: HashMap<Option<u32>, Decoder>,
    current: Option<Option<u32>>,
    partition: Int32Builder,
    offset: Int64Builder,
    timestamp: TimestampMicrosecondBuilder,
    /// `_kafka.key` is binary in Iceberg: LargeBinary in Arrow.
    key: LargeBinaryBuilder,
    schema_id: Int32Builder,
    /// Rows cut into batches so far, those left out included.
    cut_rows: u64,
    /// The positions among all rows cut (in append order) of those left out of the batches:
    /// Debezium events without a row (`crate::transform`).
    pub(super) left_out: Vec<u64>,
}

impl RowBuilder {
    pub(super) fn new(
        schema: SchemaRef,
        value_target: SchemaRef,
        kafka_index: usize,
        key_index: Option<usize>,
        partition_number: i32,
        transform: ValueTransform,
    ) -> Result<Self> {
        let key = key_index.map(|i| (i, KeyColumn::new(schema.fields()[i].clone())));
        let DataType::Struct(kafka_fields) = schema.field(kafka_index).data_type().clone() else {
            return Err(Error::Schema("_kafka is not a struct".into()));
        };
        Ok(RowBuilder {
            schema,
            value_target,
            kafka_index,
            kafka_fields,
            keys: key,
            partition_number,
            transform,
            decoders: HashMap::new(),
            current: None,
            partition: Int32Builder::new(),
            offset: Int64Builder::new(),
            timestamp: TimestampMicrosecondBuilder::new().with_timezone("+00:00"),
            key: LargeBinaryBuilder::new(),
            schema_id: Int32Builder::new(),
            cut_rows: 0,
            left_out: Vec::new(),
        })
    }

    pub(super) fn buffered_bytes(&self) -> usize {
        let decoders: usize = self
            .decoders
            .values()
            .map(|d| match d {
                Decoder::Avro(a, _) => a.buffered_bytes(),
                Decoder::Protobuf(m, _) => m.values().map(|(c, _)| c.buffered_bytes()).sum(),
                Decoder::Json(j, _) => j.buffered_bytes(),
                Decoder::Plain(PlainColumn::Str(b)) => b.values_slice().len(),
                Decoder::Plain(PlainColumn::Raw(b)) => b.values_slice().len(),
            })
            .sum();
        decoders
            + self.key.values_slice().len()
            + self.offset.len() * 32
            + self.keys.as_ref().map_or(0, |(_, k)| k.buffered_bytes())
    }

    /// Switches to the decoder `id`, cutting the current run into a batch first.
    fn switch(&mut self, id: Option<u32>, batches: &mut Vec<RecordBatch>) -> Result<(), String> {
        if self.current != Some(id) {
            self.cut(batches).map_err(|e| e.to_string())?;
            self.current = Some(id);
        }
        Ok(())
    }

    fn push_kafka(&mut self, r: &Rec, schema_id: Option<u32>) {
        self.partition.append_value(self.partition_number);
        self.offset.append_value(r.offset);
        self.timestamp
            .append_value(r.timestamp_ms.saturating_mul(1000));
        match &r.key {
            Some(k) => self.key.append_value(k),
            None => self.key.append_null(),
        }
        match schema_id {
            Some(id) => self.schema_id.append_value(id as i32),
            None => self.schema_id.append_null(),
        }
    }

    /// The nested target a decoder of `writer` (a mapped record schema) fills.
    fn target_for(&self, writer: &Schema) -> Result<SchemaRef, String> {
        crate::transform::nested_target(self.transform, &self.value_target, writer)
            .map_err(|e| e.to_string())
    }

    pub(super) fn append_framed(
        &mut self,
        schema: &Arc<StoredSchema>,
        payload: &[u8],
        r: &Rec,
        batches: &mut Vec<RecordBatch>,
    ) -> Result<(), String> {
        let id = Some(schema.id);
        self.switch(id, batches)?;
        if !self.decoders.contains_key(&id) {
            let d = match &schema.parsed {
                ParsedSchema::Avro(a) => {
                    let writer = crate::avro::avro_to_iceberg(a.table_schema(), &a.refs)
                        .map_err(|e| e.to_string())?;
                    let target = self.target_for(&writer)?;
                    Decoder::Avro(
                        crate::avro::AvroDecoder::new(a.table_schema(), &a.refs, target.clone())
                            .map_err(|e| e.to_string())?,
                        target,
                    )
                }
                ParsedSchema::Json(j) => {
                    let writer =
                        crate::json::json_to_iceberg(&j.value).map_err(|e| e.to_string())?;
                    let target = self.target_for(&writer)?;
                    Decoder::Json(
                        crate::json::JsonConverter::new(&j.value, target.clone())
                            .map_err(|e| e.to_string())?,
                        target,
                    )
                }
                ParsedSchema::Protobuf(_) => Decoder::Protobuf(HashMap::new(), None),
            };
            self.decoders.insert(id, d);
        }
        // A Protobuf schema may frame several message types: each gets runs of its own.
        let message = match &schema.parsed {
            ParsedSchema::Protobuf(_) => match framing::decode_payload(schema, payload) {
                Ok(Value::Protobuf(m)) => Some(m),
                Ok(_) => return Err("not a Protobuf message".into()),
                Err(e) => return Err(e.to_string()),
            },
            _ => None,
        };
        if let (Some(m), Some(Decoder::Protobuf(_, Some(last)))) =
            (&message, self.decoders.get(&id))
        {
            if last != m.descriptor().full_name() {
                self.cut(batches).map_err(|e| e.to_string())?;
                self.current = Some(id);
            }
        }
        let new_target = match (&message, self.decoders.get(&id)) {
            (Some(m), Some(Decoder::Protobuf(converters, _)))
                if !converters.contains_key(m.descriptor().full_name()) =>
            {
                let writer = crate::protobuf::protobuf_to_iceberg(&m.descriptor())
                    .map_err(|e| e.to_string())?;
                Some(self.target_for(&writer)?)
            }
            _ => None,
        };
        let decoder = self.decoders.get_mut(&id).ok_or("decoder")?;
        match decoder {
            Decoder::Avro(a, _) => a.append(payload).map_err(|e| e.to_string())?,
            Decoder::Json(j, _) => {
                let v = match framing::decode_payload(schema, payload) {
                    Ok(Value::Json(v)) => v,
                    Ok(_) => return Err("not a JSON value".into()),
                    Err(e) => return Err(e.to_string()),
                };
                j.append(&v).map_err(|e| e.to_string())?;
            }
            Decoder::Protobuf(converters, last) => {
                let m = message.ok_or("no message")?;
                let name = m.descriptor().full_name().to_string();
                if let Some(target) = new_target {
                    let c =
                        crate::protobuf::ProtobufConverter::new(&m.descriptor(), target.clone())
                            .map_err(|e| e.to_string())?;
                    converters.insert(name.clone(), (c, target));
                }
                converters
                    .get_mut(&name)
                    .ok_or("converter")?
                    .0
                    .append(&m)
                    .map_err(|e| e.to_string())?;
                *last = Some(name);
            }
            Decoder::Plain(_) => return Err("unexpected plain column".into()),
        }
        self.push_kafka(r, Some(schema.id));
        Ok(())
    }

    pub(super) fn append_plain(
        &mut self,
        r: &Rec,
        utf8: bool,
        batches: &mut Vec<RecordBatch>,
    ) -> Result<(), String> {
        self.switch(None, batches)?;
        let d = self.decoders.entry(None).or_insert_with(|| {
            Decoder::Plain(if utf8 {
                PlainColumn::Str(StringBuilder::new())
            } else {
                PlainColumn::Raw(LargeBinaryBuilder::new())
            })
        });
        match (d, &r.value) {
            (Decoder::Plain(PlainColumn::Str(b)), Some(v)) => {
                let s = std::str::from_utf8(v).map_err(|e| format!("value is not UTF-8: {e}"))?;
                b.append_value(s);
            }
            (Decoder::Plain(PlainColumn::Str(b)), None) => b.append_null(),
            (Decoder::Plain(PlainColumn::Raw(b)), Some(v)) => b.append_value(v),
            (Decoder::Plain(PlainColumn::Raw(b)), None) => b.append_null(),
            _ => return Err("unexpected decoder".into()),
        }
        self.push_kafka(r, None);
        Ok(())
    }

    /// Cuts the current run into a record batch.
    pub(super) fn cut(&mut self, batches: &mut Vec<RecordBatch>) -> Result<()> {
        let Some(id) = self.current else {
            return Ok(());
        };
        let rows = self.offset.len();
        if rows == 0 {
            return Ok(());
        }
        let transform = self.transform;
        let value_target = self.value_target.clone();
        let (values, keep) = match self.decoders.get_mut(&id) {
            Some(Decoder::Avro(a, t)) => {
                crate::transform::flatten_columns(transform, t, a.finish()?, &value_target)?
            }
            Some(Decoder::Json(j, t)) => {
                crate::transform::flatten_columns(transform, t, j.finish()?, &value_target)?
            }
            Some(Decoder::Protobuf(converters, last)) => {
                let name = last.take().unwrap_or_default();
                match converters.get_mut(&name) {
                    Some((c, t)) => {
                        crate::transform::flatten_columns(transform, t, c.finish()?, &value_target)?
                    }
                    None => return Err(Error::Schema("no Protobuf converter".into())),
                }
            }
            Some(Decoder::Plain(p)) => {
                let column: ArrayRef = match p {
                    PlainColumn::Str(b) => Arc::new(b.finish()),
                    PlainColumn::Raw(b) => Arc::new(b.finish()),
                };
                // The plain column is `value`; other value columns (from an earlier schema of
                // the table) are null.
                let values = self
                    .value_target
                    .fields()
                    .iter()
                    .map(|f| {
                        if f.name() == "value" {
                            column.clone()
                        } else {
                            arrow::array::new_null_array(f.data_type(), column.len())
                        }
                    })
                    .collect();
                (values, None)
            }
            None => return Err(Error::Schema("no decoder for the current run".into())),
        };
        let kafka = StructArray::try_new(
            self.kafka_fields.clone(),
            vec![
                Arc::new(self.partition.finish()),
                Arc::new(self.offset.finish()),
                Arc::new(self.timestamp.finish()),
                Arc::new(self.key.finish()),
                Arc::new(self.schema_id.finish()),
            ],
            None,
        )?;
        let mut columns = values;
        let mut system: Vec<(usize, ArrayRef)> = vec![(self.kafka_index, Arc::new(kafka))];
        if let Some((i, k)) = self.keys.as_mut() {
            system.push((*i, k.take(rows)?));
        }
        system.sort_by_key(|(i, _)| *i);
        for (i, column) in system {
            columns.insert(i, column);
        }
        let first = self.cut_rows;
        self.cut_rows += rows as u64;
        if let Some(keep) = keep {
            let left_out: Vec<u64> = (0..rows)
                .filter(|&i| !keep.value(i))
                .map(|i| first + i as u64)
                .collect();
            tracing::warn!(
                partition = self.partition_number,
                events = left_out.len(),
                "Debezium events without a row (truncates?) change no row: left out of the table"
            );
            self.left_out.extend(left_out);
            columns = columns
                .iter()
                .map(|c| arrow::compute::filter(c, &keep))
                .collect::<std::result::Result<_, _>>()?;
        }
        batches.push(RecordBatch::try_new(self.schema.clone(), columns)?);
        Ok(())
    }
}
