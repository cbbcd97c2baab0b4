//! Produce-time validation for table topics (`docs/ingest.md`, "Produce-time validation of
//! table topics"): before a batch of a topic with `table.topic.enable=true` is stored, every record's value (and
//! key, when its convert type says so) must be a Schema Registry framed record whose schema id
//! exists, whose payload converts, and whose schema the topic's table can take
//! ([`PayloadCheck::check_schema`]). With `table.topic.errors.tolerance=none` a batch with any
//! bad record is refused whole (INVALID_RECORD with one message per bad record) and nothing of
//! it is stored; with `all` it is stored and the table side routes the bad records to the
//! dead-letter table.
//!
//! Only `by_schema_id` is checked here; `string` and `raw` accept any bytes, and
//! `by_latest_schema` is decoded by the table worker.
//!
//! **One decoder.** Whether a payload converts is decided by a [`PayloadCheck`] that the node
//! wires in: the table workers' own decoders (`inlet_table_worker::PayloadChecker`), so a record accepted
//! here always converts. Without one (a broker built alone, in tests), the registry's decoder
//! ([`RegistryDecoder`]) stands in.
//!
//! Records are read with [`crate::records::walk`] (streaming, bounded); schemas are resolved
//! first, so the walk that checks payloads needs no I/O and runs off the async threads.

use std::collections::HashMap;
use std::sync::Arc;

use inlet_schema_registry::framing;
use inlet_schema_registry::{Error as RegistryError, Registry, StoredSchema};

use crate::batch::Batch;
use crate::records::{self, Limits};
use crate::topic_config::TopicConfigs;

/// At most this many per-record messages go back in one response.
const MAX_RECORD_ERRORS: usize = 20;

/// Which side of a record a payload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Value,
    Key,
}

/// Decides whether a framed record's payload (after the 5-byte header) converts.
pub trait PayloadCheck: Send + Sync + 'static {
    fn check(&self, side: Side, schema: &StoredSchema, payload: &[u8]) -> Result<(), String>;

    /// Whether the table of table topic `topic` can take values written with `schema`: a
    /// change the registry accepts may be one an Iceberg table cannot make (int → double).
    /// Asked once per schema id and batch, only where `errors.tolerance=none`; by default
    /// (no table known) every schema fits.
    fn check_schema(&self, _topic: &str, _schema: &StoredSchema) -> Result<(), String> {
        Ok(())
    }
}

/// The Schema Registry's decoder ([`framing::decode_payload`]): the check when the node wires
/// none in.
#[derive(Debug, Default, Clone, Copy)]
pub struct RegistryDecoder;

impl PayloadCheck for RegistryDecoder {
    fn check(&self, _side: Side, schema: &StoredSchema, payload: &[u8]) -> Result<(), String> {
        framing::decode_payload(schema, payload)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// What a table topic's records must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rules {
    pub value_framed: bool,
    pub key_framed: bool,
    /// A null value is a delete in upsert mode; otherwise a table row needs a value.
    pub null_value_ok: bool,
    /// `errors.tolerance=all`: store bad records instead of refusing the batch.
    pub tolerate: bool,
}

impl Rules {
    /// The rules of a topic, or `None` when nothing is checked at produce time.
    pub(crate) fn of(configs: &TopicConfigs, defaults: &TopicConfigs) -> Option<Rules> {
        // The topic's name only names the table, which the rules do not need.
        let table = configs.table_topic("", defaults)?;
        let value_framed = table.convert_value == "by_schema_id";
        let key_framed = table.convert_key == "by_schema_id";
        if !value_framed && !key_framed {
            return None;
        }
        Some(Rules {
            value_framed,
            key_framed,
            // Upsert and CDC tables take a null value as a delete of its key (a CDC source
            // such as Debezium follows each delete event with one).
            null_value_ok: table.upsert || table.cdc_field.is_some(),
            tolerate: table.tolerate_errors,
        })
    }
}

/// The outcome of checking a request's batches for one partition.
#[derive(Debug, Default)]
pub(crate) struct Verdict {
    /// (index of the record in the partition's record set, message), at most
    /// [`MAX_RECORD_ERRORS`].
    pub errors: Vec<(i32, String)>,
    /// How many records were bad.
    pub bad: usize,
}

/// Schemas by id, as resolved before the checking walk: `None` is an unknown id.
type Schemas = HashMap<u32, Option<Arc<StoredSchema>>>;

impl Rules {
    /// Notes the schema ids a record names (for [`check`]); called from the validation walk
    /// every batch gets anyway, so the ids cost no walk of their own.
    pub(crate) fn collect_ids(&self, key: Option<&[u8]>, value: Option<&[u8]>, ids: &mut Vec<u32>) {
        for (framed, bytes) in [(self.value_framed, value), (self.key_framed, key)] {
            if let (true, Some(b)) = (framed, bytes) {
                // A record that is not framed fails in `check`.
                if let Ok((id, _)) = framing::split(b) {
                    if !ids.contains(&id) {
                        ids.push(id);
                    }
                }
            }
        }
    }
}

/// Checks every record of `batches` (each already passed [`crate::records::walk`], which
/// collected the schema `ids` they name with [`Rules::collect_ids`]).
pub(crate) async fn check(
    registry: &Registry,
    payloads: Arc<dyn PayloadCheck>,
    topic: &str,
    rules: Rules,
    batches: &[Batch],
    ids: Vec<u32>,
    limits: Limits,
) -> Result<Verdict, String> {
    let mut schemas = Schemas::new();
    for id in ids {
        let schema = match registry.schema_by_id(id).await {
            Ok(s) => Some(s),
            Err(RegistryError::SchemaIdNotFound(_)) => None,
            Err(e) => return Err(e.to_string()),
        };
        schemas.insert(id, schema);
    }
    // Value schemas the table cannot take, with why (refused only when nothing is tolerated:
    // otherwise the records go to the dead-letter table with the reason).
    let mut unfit: HashMap<u32, String> = HashMap::new();
    if rules.value_framed && !rules.tolerate {
        for (id, schema) in &schemas {
            if let Some(schema) = schema {
                if let Err(why) = payloads.check_schema(topic, schema) {
                    unfit.insert(*id, why);
                }
            }
        }
    }
    // Second walk: the payloads, with no I/O; off the async threads.
    let batches = batches.to_vec();
    let work = move || {
        let mut verdict = Verdict::default();
        let mut index = 0i32;
        for b in &batches {
            let walked = records::walk(b, limits, |r| {
                let problem = unfit_value(&unfit, rules, r.value)
                    .or_else(|| check_record(&schemas, &*payloads, rules, r.key, r.value));
                if let Some(message) = problem {
                    verdict.bad += 1;
                    if verdict.errors.len() < MAX_RECORD_ERRORS {
                        verdict.errors.push((index + r.index, message));
                    }
                }
            });
            if let Err(e) = walked {
                verdict.bad += b.header.record_count.max(1) as usize;
                if verdict.errors.len() < MAX_RECORD_ERRORS {
                    verdict.errors.push((index, e.to_string()));
                }
            }
            index += b.header.record_count;
        }
        verdict
    };
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| format!("the validation task failed: {e}"))
}

/// Why a record's value is refused when its schema is one the table cannot take.
fn unfit_value(unfit: &HashMap<u32, String>, rules: Rules, value: Option<&[u8]>) -> Option<String> {
    if !rules.value_framed || unfit.is_empty() {
        return None;
    }
    let (id, _) = framing::split(value?).ok()?;
    unfit
        .get(&id)
        .map(|why| format!("value: schema id {id} does not fit the table: {why}"))
}

fn check_record(
    schemas: &Schemas,
    payloads: &dyn PayloadCheck,
    rules: Rules,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> Option<String> {
    let framed = |side: Side, bytes: &[u8]| -> Result<(), String> {
        let (id, payload) = framing::split(bytes).map_err(|e| e.to_string())?;
        let schema = schemas
            .get(&id)
            .and_then(Option::as_ref)
            .ok_or_else(|| framing::FramingError::UnknownId(id).to_string())?;
        payloads.check(side, schema, payload)
    };
    if rules.value_framed {
        match value {
            None if rules.null_value_ok => {}
            None => return Some("a table topic record needs a value (null is a delete only with table.topic.upsert.enable=true or table.topic.cdc.field)".into()),
            Some(v) => {
                if let Err(e) = framed(Side::Value, v) {
                    return Some(format!("value: {e}"));
                }
            }
        }
    }
    if rules.key_framed {
        match key {
            None => {
                return Some("key: table.topic.convert.key.type=by_schema_id needs a key".into())
            }
            Some(k) => {
                if let Err(e) = framed(Side::Key, k) {
                    return Some(if e.starts_with("key: ") {
                        e
                    } else {
                        format!("key: {e}")
                    });
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(pairs: &[(&str, &str)]) -> Rules {
        let configs = TopicConfigs::from_stored(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        Rules::of(&configs, &TopicConfigs::default()).expect("a checked table topic")
    }

    #[test]
    fn upsert_and_cdc_topics_take_null_values_as_deletes() {
        let on = ("table.topic.enable", "true");
        let ids = ("table.topic.id.columns", "[id]");
        assert!(!rules(&[on]).null_value_ok);
        assert!(rules(&[on, ids, ("table.topic.upsert.enable", "true")]).null_value_ok);
        assert!(rules(&[on, ids, ("table.topic.cdc.field", "op")]).null_value_ok);
        assert!(!rules(&[on, ids, ("table.topic.cdc.field", "")]).null_value_ok);
    }
}
