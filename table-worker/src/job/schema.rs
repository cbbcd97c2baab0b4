//! Value schemas as a job sees them: a registered schema looked up by id, the Iceberg schema
//! of the values it describes, and whether a table can take them.
//!
//! Invariants:
//! - A schema id the registry does not know is not an error here (its records become dead
//!   letters); a registry that cannot answer (a retryable error) is, and ends the job.
//! - [`value_schema_fits`] decides as a job would for that schema's records: the same mapping
//!   to Iceberg and the same reconciliation with the table's schema.

use std::sync::Arc;

use iceberg::spec::Schema;
use inlet_schema_registry::framing;
use inlet_schema_registry::{ParsedSchema, Registry, StoredSchema};
use prost_reflect::ReflectMessage;

use crate::error::{Error, Result};
use crate::evolve;
use crate::transform::ValueTransform;

/// The registered schema `id`; None when the registry does not have it. A registry that
/// cannot answer (a retryable error) ends the job.
pub(super) async fn registered(registry: &Registry, id: u32) -> Result<Option<Arc<StoredSchema>>> {
    match registry.schema_by_id(id).await {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.is_retryable() => Err(Error::Schema(format!("schema registry: {e}"))),
        Err(_) => Ok(None),
    }
}

/// Whether a table whose schema is `table` (with `last_column_id`, see
/// [`TableContext::last_column_id`](super::TableContext::last_column_id)) can take values
/// written with `stored`, as a job decides it for that schema's records: Err names the column
/// and the change. Protobuf schemas are left to the job (the message type is in each payload).
pub(crate) fn value_schema_fits(
    table: &Schema,
    last_column_id: i32,
    transform: ValueTransform,
    stored: &StoredSchema,
) -> std::result::Result<(), String> {
    if matches!(stored.parsed, ParsedSchema::Protobuf(_)) {
        return Ok(());
    }
    let fits = || -> Result<()> {
        if let Some(m) = iceberg_schema_of(stored, &[])? {
            evolve::reconcile_above(Some(table), &transform.table_schema(&m)?, last_column_id)?;
        }
        Ok(())
    };
    fits().map_err(|e| e.to_string())
}

/// The Iceberg schema of the values a stored schema describes (for Protobuf, of the message
/// the payload names); None when the payload cannot tell (it becomes a dead letter).
pub(super) fn iceberg_schema_of(
    schema: &StoredSchema,
    framed_or_payload: &[u8],
) -> Result<Option<Schema>> {
    Ok(Some(match &schema.parsed {
        ParsedSchema::Avro(a) => crate::avro::avro_to_iceberg(a.table_schema(), &a.refs)?,
        ParsedSchema::Json(j) => crate::json::json_to_iceberg(&j.value)?,
        ParsedSchema::Protobuf(p) => {
            let payload = framing::split(framed_or_payload)
                .map(|(_, p)| p)
                .unwrap_or(framed_or_payload);
            match inlet_schema_registry::protobuf::decode_payload(p, payload) {
                Ok(m) => crate::protobuf::protobuf_to_iceberg(&m.descriptor())?,
                Err(_) => return Ok(None),
            }
        }
    }))
}
