//! Produce-time validation for table topics (DESIGN.md §5): before a batch of a topic with
//! `table.topic.enable=true` is stored, every record's value (and key, when its convert type
//! says so) must be a Schema Registry framed record whose schema id exists and whose payload
//! decodes. With `table.topic.errors.tolerance=none` a batch with any bad record is refused
//! whole (INVALID_RECORD with one message per bad record) and nothing of it is stored; with
//! `all` it is stored and the table side routes the bad records to the dead-letter table.
//!
//! Only `by_schema_id` is checked here; `string` and `raw` accept any bytes, and
//! `by_latest_schema` is decoded by the table worker.

use bytes::Bytes;
use inlet_schema_registry::Registry;
use kafka_protocol::records::RecordBatchDecoder;

use crate::batch::Batch;
use crate::topic_config::TopicConfigs;

/// At most this many per-record messages go back in one response.
const MAX_RECORD_ERRORS: usize = 20;

/// What a table topic's records must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    pub value_framed: bool,
    pub key_framed: bool,
    /// A null value is a delete in upsert mode; otherwise a table row needs a value.
    pub null_value_ok: bool,
    /// `errors.tolerance=all`: store bad records instead of refusing the batch.
    pub tolerate: bool,
}

impl Rules {
    /// The rules of a topic, or `None` when nothing is checked at produce time.
    pub fn of(configs: &TopicConfigs, defaults: &TopicConfigs) -> Option<Rules> {
        let get = |name: &str| configs.get(name).or_else(|| defaults.get(name));
        if get("table.topic.enable") != Some("true") {
            return None;
        }
        let value_framed =
            get("table.topic.convert.value.type").unwrap_or("by_schema_id") == "by_schema_id";
        let key_framed = get("table.topic.convert.key.type") == Some("by_schema_id");
        if !value_framed && !key_framed {
            return None;
        }
        Some(Rules {
            value_framed,
            key_framed,
            null_value_ok: get("table.topic.upsert.enable") == Some("true"),
            tolerate: get("table.topic.errors.tolerance") == Some("all"),
        })
    }
}

/// Checks every record of `batches`; returns (index of the record in the request's record
/// set, message) for the bad ones, at most [`MAX_RECORD_ERRORS`], and how many were bad.
pub async fn check(
    registry: &Registry,
    rules: Rules,
    batches: &[Batch],
) -> (Vec<(i32, String)>, usize) {
    let mut errors = Vec::new();
    let mut bad = 0usize;
    let mut index = 0i32;
    for b in batches {
        let records = match RecordBatchDecoder::decode(&mut b.bytes.clone()) {
            Ok(set) => set.records,
            Err(e) => {
                bad += b.header.record_count.max(1) as usize;
                if errors.len() < MAX_RECORD_ERRORS {
                    errors.push((index, format!("the batch's records do not decode: {e:#}")));
                }
                index += b.header.record_count;
                continue;
            }
        };
        for r in &records {
            let problem = check_record(registry, rules, r.key.as_ref(), r.value.as_ref()).await;
            if let Some(message) = problem {
                bad += 1;
                if errors.len() < MAX_RECORD_ERRORS {
                    errors.push((index, message));
                }
            }
            index += 1;
        }
    }
    (errors, bad)
}

async fn check_record(
    registry: &Registry,
    rules: Rules,
    key: Option<&Bytes>,
    value: Option<&Bytes>,
) -> Option<String> {
    if rules.value_framed {
        match value {
            None if rules.null_value_ok => {}
            None => return Some("a table topic record needs a value (null is a delete only with table.topic.upsert.enable=true)".into()),
            Some(v) => {
                if let Err(e) = inlet_schema_registry::framing::decode(registry, v).await {
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
                if let Err(e) = inlet_schema_registry::framing::decode(registry, k).await {
                    return Some(format!("key: {e}"));
                }
            }
        }
    }
    None
}
