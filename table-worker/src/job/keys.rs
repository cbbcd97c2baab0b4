//! A range's keys (`table.topic.convert.key.type`): the key schemas its records were written
//! with, the `_key` columns they map to, and each record's key decoded into that column.
//!
//! Invariants:
//! - Every key schema of the range adds its `_key` column to the schemas the job reconciles, so
//!   the range is written with one table schema whatever keys it holds.
//! - A record's key that does not resolve or decode is an error for that record alone (it
//!   becomes a dead letter).
//! - A value schema with its own `_key` field fails the job: that name holds the converted key.

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::spec::{NestedField, Schema};
use inlet_schema_registry::framing;
use inlet_schema_registry::StoredSchema;

use super::read::Rec;
use super::schema::registered;
use super::{TableContext, ValueType};
use crate::error::{Error, Result};
use crate::evolve::KAFKA_COLUMN;
use crate::key::KeyColumn;

/// The key schemas of a range (`convert.key.type`), and the `_key` columns they map to.
pub(super) struct KeySchemas<'t> {
    key_type: &'t ValueType,
    by_id: HashMap<u32, Arc<StoredSchema>>,
    latest: Option<Arc<StoredSchema>>,
    /// One `_key` column per key schema seen (for `string`, the one string column).
    pub(super) fields: Vec<NestedField>,
}

impl<'t> KeySchemas<'t> {
    pub(super) async fn load(table: &'t TableContext, records: &[Rec]) -> Result<Self> {
        let mut keys = KeySchemas {
            key_type: &table.key_type,
            by_id: HashMap::new(),
            latest: None,
            fields: Vec::new(),
        };
        match &table.key_type {
            ValueType::Raw => {}
            ValueType::String => keys.fields.push(crate::key::string_key_field()),
            ValueType::BySchemaId => {
                for r in records {
                    let Some(k) = &r.key else { continue };
                    let Ok((id, payload)) = framing::split(k) else {
                        continue;
                    };
                    if keys.by_id.contains_key(&id) {
                        continue;
                    }
                    // Unknown ids make dead letters.
                    if let Some(s) = registered(&table.registry, id).await? {
                        keys.fields.extend(crate::key::key_field(&s, payload)?);
                        keys.by_id.insert(id, s);
                    }
                }
            }
            ValueType::ByLatestSchema { subject } => {
                if records.iter().any(|r| r.key.is_some()) {
                    let sv = table
                        .registry
                        .version(subject, inlet_schema_registry::VersionSpec::Latest, false)
                        .await
                        .map_err(|e| Error::Schema(format!("latest schema of {subject:?}: {e}")))?;
                    let first = records.iter().find_map(|r| r.key.as_deref()).unwrap_or(&[]);
                    keys.fields
                        .extend(crate::key::key_field(&sv.schema, first)?);
                    keys.latest = Some(sv.schema);
                }
            }
        }
        Ok(keys)
    }

    /// The schema and encoded form of a record's (non-null) key.
    pub(super) fn resolve<'r>(
        &self,
        r: &'r Rec,
    ) -> std::result::Result<(&Arc<StoredSchema>, &'r [u8]), String> {
        let key = r.key.as_deref().ok_or("key: null")?;
        match self.key_type {
            ValueType::BySchemaId => {
                let (id, payload) = framing::split(key).map_err(|e| format!("key: {e}"))?;
                let s = self
                    .by_id
                    .get(&id)
                    .ok_or_else(|| format!("key: unknown schema id {id}"))?;
                Ok((s, payload))
            }
            ValueType::ByLatestSchema { subject } => self
                .latest
                .as_ref()
                .map(|s| (s, key))
                .ok_or_else(|| format!("key: no schema in subject {subject:?}")),
            ValueType::String | ValueType::Raw => Err("key: not decoded by a schema".into()),
        }
    }

    /// Appends a record's key to `column`.
    pub(super) fn append(
        &self,
        column: &mut KeyColumn,
        r: &Rec,
    ) -> std::result::Result<(), String> {
        match (self.key_type, &r.key) {
            (ValueType::String, key) => column.append_string(key.as_ref()),
            (_, None) => column.append_null().map_err(|e| e.to_string()),
            (_, Some(_)) => {
                let (schema, payload) = self.resolve(r)?;
                column.append_decoded(schema, payload)
            }
        }
    }
}

/// The value schemas `incoming` with the `_key` column added: one schema per value schema
/// with the first key schema, then one per further key schema, so that reconciling them all
/// merges every value and key schema. With no value schema, the table's value columns stand
/// in (tombstones alone can add `_key`).
pub(super) fn with_key_column(
    table: &TableContext,
    incoming: Vec<Schema>,
    key_fields: &[NestedField],
) -> Result<Vec<Schema>> {
    use crate::key::{with_key, KEY_COLUMN};
    if incoming
        .iter()
        .any(|s| s.as_struct().field_by_name(KEY_COLUMN).is_some())
    {
        return Err(Error::Schema(format!(
            "the value schema has a field named {KEY_COLUMN}, which holds the converted key (table.topic.convert.key.type)"
        )));
    }
    let base = match incoming.last() {
        Some(s) => s.clone(),
        None => match &table.schema {
            Some(t) => Schema::builder()
                .with_fields(
                    t.as_struct()
                        .fields()
                        .iter()
                        .filter(|f| f.name != KAFKA_COLUMN && f.name != KEY_COLUMN)
                        .cloned()
                        .collect::<Vec<_>>(),
                )
                .build()?,
            // No table and no values: nothing to write.
            None => return Ok(incoming),
        },
    };
    let mut keyed = Vec::with_capacity(incoming.len() + key_fields.len());
    for v in &incoming {
        keyed.push(with_key(v, &key_fields[0])?);
    }
    if incoming.is_empty() {
        keyed.push(with_key(&base, &key_fields[0])?);
    }
    for k in &key_fields[1..] {
        keyed.push(with_key(&base, k)?);
    }
    Ok(keyed)
}
