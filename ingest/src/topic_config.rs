//! Topic configs: the Kafka ones Inlet honours or accepts, and the `table.topic.*` ones of
//! docs/architecture.md, "Topic configs" (with AutoMQ's `automq.table.topic.*` spellings as aliases).
//!
//! Invariant: a [`TopicConfigs`] holds only canonical names with values that passed
//! validation, so readers of a stored topic never meet a value they cannot interpret.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::ResponseError;

use crate::error::KafkaError;

/// What a config's value must look like.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Bool,
    /// An integer in `min..=max`.
    Int(i64, i64),
    /// One of these words.
    Choice(&'static [&'static str]),
    /// A bracketed list of column names: `[id]`, `[a, b]`.
    Columns,
    /// A bracketed list of Iceberg partition transforms.
    Transforms,
    /// An identifier of letters, digits, `_`, `-` and `.`.
    Name,
    /// Free text.
    Text,
    /// A decimal number from 0 to 1.
    Fraction,
    /// A comma-separated list of some of these words (Kafka's list configs).
    List(&'static [&'static str]),
}

/// One known topic config.
pub(crate) struct Def {
    pub(crate) name: &'static str,
    pub(crate) default: &'static str,
    kind: Kind,
    /// Documents what Inlet does with it; every config here is honoured or explicitly a no-op.
    #[allow(dead_code)]
    effect: &'static str,
}

const LONG: Kind = Kind::Int(-1, i64::MAX);
const NONNEG: Kind = Kind::Int(0, i64::MAX);

/// Every topic config Inlet knows, in DescribeConfigs order.
pub(crate) const DEFS: &[Def] = &[
    Def {
        name: "cleanup.policy",
        default: "delete",
        kind: Kind::List(&["delete", "compact"]),
        effect: "delete: retention by time and size; compact: the latest record per key is kept (the compactor, `compaction`); both together",
    },
    Def {
        name: "retention.ms",
        default: "",
        kind: LONG,
        effect: "time retention of each partition; -1 keeps forever",
    },
    Def {
        name: "retention.bytes",
        default: "-1",
        kind: LONG,
        effect: "size retention of each partition; -1 is unlimited",
    },
    Def {
        name: "max.message.bytes",
        default: "",
        kind: Kind::Int(0, i32::MAX as i64),
        effect: "largest record batch accepted",
    },
    Def {
        name: "message.timestamp.type",
        default: "CreateTime",
        kind: Kind::Choice(&["CreateTime", "LogAppendTime"]),
        effect: "LogAppendTime stamps batches with the broker's time",
    },
    Def {
        name: "compression.type",
        default: "producer",
        kind: Kind::Choice(&["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"]),
        effect: "producer stores batches as produced; a codec (or uncompressed) recompresses \
                 every batch in another codec on produce, as Kafka's broker does",
    },
    Def {
        name: "min.insync.replicas",
        default: "1",
        kind: Kind::Int(1, i32::MAX as i64),
        effect: "accepted; an acked batch is durable in the WAL, then in object storage",
    },
    Def {
        name: "segment.bytes",
        default: "1073741824",
        kind: Kind::Int(14, i32::MAX as i64),
        effect: "accepted; the stream store has no log segments",
    },
    Def {
        name: "segment.ms",
        default: "604800000",
        kind: Kind::Int(1, i64::MAX),
        effect: "accepted; the stream store has no log segments",
    },
    Def {
        name: "message.timestamp.before.max.ms",
        default: "9223372036854775807",
        kind: NONNEG,
        effect: "accepted, not enforced",
    },
    Def {
        name: "message.timestamp.after.max.ms",
        default: "9223372036854775807",
        kind: NONNEG,
        effect: "accepted, not enforced",
    },
    Def {
        name: "unclean.leader.election.enable",
        default: "false",
        kind: Kind::Bool,
        effect: "accepted; there are no replicas to elect",
    },
    Def {
        name: "flush.messages",
        default: "9223372036854775807",
        kind: NONNEG,
        effect: "accepted; every acked batch is synced",
    },
    Def {
        name: "flush.ms",
        default: "9223372036854775807",
        kind: NONNEG,
        effect: "accepted; every acked batch is synced",
    },
    // Kafka's other topic configs, accepted as Kafka accepts them (tools and clients set
    // them, librdkafka's admin tests among them) and without effect here: the compaction ones
    // act only on compacted topics, which Inlet does not have; the segment and index ones
    // describe a log layout the stream store does not use; there are no replicas to throttle
    // and no tier below object storage.
    Def {
        name: "delete.retention.ms",
        default: "86400000",
        kind: NONNEG,
        effect: "how long compaction keeps a tombstone (a null value) after it was appended",
    },
    Def {
        name: "min.compaction.lag.ms",
        default: "0",
        kind: NONNEG,
        effect: "records younger than this are not compacted",
    },
    Def {
        name: "max.compaction.lag.ms",
        default: "9223372036854775807",
        kind: Kind::Int(1, i64::MAX),
        effect: "a record not compacted this long after it was appended makes its partition due, whatever its dirty ratio",
    },
    Def {
        name: "min.cleanable.dirty.ratio",
        default: "0.5",
        kind: Kind::Fraction,
        effect: "a partition is compacted once this share of its bytes was appended since its last compaction",
    },
    Def {
        name: "file.delete.delay.ms",
        default: "60000",
        kind: NONNEG,
        effect: "accepted; objects are deleted after the stream store's own grace period",
    },
    Def {
        name: "index.interval.bytes",
        default: "4096",
        kind: Kind::Int(0, i32::MAX as i64),
        effect: "accepted; objects carry their own index",
    },
    Def {
        name: "segment.index.bytes",
        default: "10485760",
        kind: Kind::Int(4, i32::MAX as i64),
        effect: "accepted; the stream store has no log segments",
    },
    Def {
        name: "segment.jitter.ms",
        default: "0",
        kind: NONNEG,
        effect: "accepted; the stream store has no log segments",
    },
    Def {
        name: "preallocate",
        default: "false",
        kind: Kind::Bool,
        effect: "accepted; the stream store has no log segments",
    },
    Def {
        name: "message.downconversion.enable",
        default: "true",
        kind: Kind::Bool,
        effect: "accepted; Inlet serves record batches of magic 2 only",
    },
    Def {
        name: "compression.gzip.level",
        default: "-1",
        kind: Kind::Int(-1, 9),
        effect: "accepted; recompression uses each codec's default level",
    },
    Def {
        name: "compression.lz4.level",
        default: "9",
        kind: Kind::Int(1, 17),
        effect: "accepted; recompression uses each codec's default level",
    },
    Def {
        name: "compression.zstd.level",
        default: "3",
        kind: Kind::Int(-131072, 22),
        effect: "accepted; recompression uses each codec's default level",
    },
    Def {
        name: "leader.replication.throttled.replicas",
        default: "",
        kind: Kind::Text,
        effect: "accepted; one copy in object storage, no replicas to throttle",
    },
    Def {
        name: "follower.replication.throttled.replicas",
        default: "",
        kind: Kind::Text,
        effect: "accepted; one copy in object storage, no replicas to throttle",
    },
    Def {
        name: "message.format.version",
        default: "3.0-IV1",
        kind: Kind::Text,
        effect: "accepted, as Kafka 3 accepts it: batches are always magic 2",
    },
    Def {
        name: "message.timestamp.difference.max.ms",
        default: "9223372036854775807",
        kind: NONNEG,
        effect: "accepted, not enforced (Kafka 3's older name of the two bounds above)",
    },
    Def {
        name: "remote.storage.enable",
        default: "false",
        kind: Kind::Bool,
        effect: "accepted; every stream is in object storage already",
    },
    Def {
        name: "local.retention.ms",
        default: "-2",
        kind: Kind::Int(-2, i64::MAX),
        effect: "accepted; no tiered storage",
    },
    Def {
        name: "local.retention.bytes",
        default: "-2",
        kind: Kind::Int(-2, i64::MAX),
        effect: "accepted; no tiered storage",
    },
    Def {
        name: "table.topic.enable",
        default: "false",
        kind: Kind::Bool,
        effect: "materialize the topic as an Iceberg table",
    },
    Def {
        name: "table.topic.commit.interval.ms",
        default: "60000",
        kind: Kind::Int(1000, 900_000),
        effect: "how often the coordinator commits",
    },
    Def {
        name: "table.topic.namespace",
        default: "default",
        kind: Kind::Name,
        effect: "the table's namespace",
    },
    Def {
        name: "table.topic.table",
        default: "",
        kind: Kind::Name,
        effect: "the table's name; the topic name when empty",
    },
    Def {
        name: "table.topic.convert.value.type",
        default: "by_schema_id",
        kind: Kind::Choice(&["by_schema_id", "by_latest_schema", "string", "raw"]),
        effect: "how values are decoded",
    },
    Def {
        name: "table.topic.convert.key.type",
        default: "raw",
        kind: Kind::Choice(&["by_schema_id", "by_latest_schema", "string", "raw"]),
        effect: "how keys are decoded",
    },
    Def {
        name: "table.topic.transform.value.type",
        default: "none",
        kind: Kind::Choice(&["none", "flatten", "flatten_debezium"]),
        effect: "value transform before the table",
    },
    Def {
        name: "table.topic.id.columns",
        default: "",
        kind: Kind::Columns,
        effect: "primary key columns",
    },
    Def {
        name: "table.topic.upsert.enable",
        default: "false",
        kind: Kind::Bool,
        effect: "latest row per key wins",
    },
    Def {
        name: "table.topic.cdc.field",
        default: "",
        kind: Kind::Text,
        effect: "field holding the CDC operation",
    },
    Def {
        name: "table.topic.partition.by",
        default: "",
        kind: Kind::Transforms,
        effect: "Iceberg partition transforms",
    },
    Def {
        name: "table.topic.event.time.field",
        default: "",
        kind: Kind::Text,
        effect: "payload field used for watermarks",
    },
    Def {
        name: "table.topic.watermark.idle.ms",
        default: "-1",
        kind: Kind::Int(-1, i64::MAX),
        effect: "idle partitions stop holding the watermark; -1 is off",
    },
    Def {
        name: "table.topic.errors.tolerance",
        default: "none",
        kind: Kind::Choice(&["none", "all"]),
        effect: "reject bad batches, or route bad records to the DLQ table",
    },
    Def {
        name: "table.topic.lag.max.bytes",
        default: "4294967296",
        kind: Kind::Int(-1, i64::MAX),
        effect: "a partition whose stream holds this many bytes its table has not committed \
                 refuses produce (retriable) and makes /healthz unhealthy; -1 is no bound",
    },
    Def {
        name: "table.topic.target.file.size.bytes",
        default: "33554432",
        kind: Kind::Int(1 << 16, 1 << 30),
        effect: "Parquet bytes a data file is cut at",
    },
    Def {
        name: "table.topic.compaction.interval.ms",
        default: "0",
        kind: Kind::Int(-1, i64::MAX),
        effect:
            "least time between two compactions; 0 is 60 s (10 min for upsert tables), -1 is off",
    },
    Def {
        name: "table.topic.expire.snapshot.enable",
        default: "true",
        kind: Kind::Bool,
        effect: "expire old snapshots",
    },
    Def {
        name: "table.topic.expire.snapshot.older.than.hours",
        default: "24",
        kind: Kind::Int(1, 100_000),
        effect: "snapshot age before expiry",
    },
    Def {
        name: "table.topic.expire.snapshot.retain.last",
        default: "1",
        kind: Kind::Int(1, 100_000),
        effect: "snapshots always kept",
    },
    Def {
        name: "table.topic.expire.snapshot.max.count",
        default: "1440",
        kind: Kind::Int(1, 1_000_000),
        effect: "snapshots kept at most, whatever their age",
    },
];

const AUTOMQ_PREFIX: &str = "automq.";

/// The default value of a known topic config (empty for an unknown name).
pub(crate) fn default_of(name: &str) -> &'static str {
    def(name).map_or("", |d| d.default)
}

fn def(name: &str) -> Option<&'static Def> {
    DEFS.iter().find(|d| d.name == name)
}

/// The canonical name of a topic config, resolving AutoMQ aliases; `None` if unknown.
pub(crate) fn canonical_name(name: &str) -> Option<&'static str> {
    let name = match name.strip_prefix(AUTOMQ_PREFIX) {
        Some(rest) if rest.starts_with("table.topic.") => rest,
        _ => name,
    };
    def(name).map(|d| d.name)
}

/// Whether `name` is a config that only has meaning for the Iceberg side.
pub(crate) fn is_table_config(name: &str) -> bool {
    name.starts_with("table.topic.")
}

/// A table topic's `table.topic.*` settings, typed and read once: every crate that acts on
/// them (produce-time validation here, the node's coordinators and the table worker) reads
/// this, and each default comes from the one table of definitions above (`DEFS`), which
/// DescribeConfigs reports too. Values were validated when they were set
/// ([`TopicConfigs::parse`]), so reading them cannot fail; a value that does not parse anyway
/// (a stored config from an older version) reads as the default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableTopicConfig {
    /// `table.topic.namespace`.
    pub namespace: String,
    /// `table.topic.table`, or the topic's name when empty.
    pub table: String,
    /// `table.topic.commit.interval.ms`.
    pub commit_interval: Duration,
    /// `table.topic.convert.value.type`: `by_schema_id`, `by_latest_schema`, `string`, `raw`.
    pub convert_value: String,
    /// `table.topic.convert.key.type`, the same choices.
    pub convert_key: String,
    /// `table.topic.transform.value.type`: `none`, `flatten`, `flatten_debezium`.
    pub transform_value: String,
    /// `table.topic.id.columns`, parsed.
    pub id_columns: Vec<String>,
    /// `table.topic.upsert.enable`.
    pub upsert: bool,
    /// `table.topic.cdc.field`; None when empty.
    pub cdc_field: Option<String>,
    /// `table.topic.partition.by` as given (the table worker parses the transforms); None
    /// when empty.
    pub partition_by: Option<String>,
    /// `table.topic.event.time.field`; None when empty.
    pub event_time_field: Option<String>,
    /// `table.topic.watermark.idle.ms`; None when off (-1, the default, or 0).
    pub watermark_idle: Option<Duration>,
    /// `table.topic.errors.tolerance=all`.
    pub tolerate_errors: bool,
    /// `table.topic.target.file.size.bytes`.
    pub target_file_bytes: usize,
    /// `table.topic.compaction.interval.ms`.
    pub compaction: Compaction,
    /// `table.topic.expire.snapshot.*`; None when `enable=false`.
    pub expire: Option<ExpireConfig>,
    /// Every `table.topic.*` config with its effective value, by name: what a coordinator
    /// was started with.
    pub effective: Vec<(String, String)>,
}

impl TableTopicConfig {
    /// Whether rows are keyed (upsert or CDC): such a table's rounds carry position deletes
    /// from one primary-key index, so all its partitions convert on one node.
    pub fn keyed(&self) -> bool {
        self.upsert || self.cdc_field.is_some()
    }
}

/// `table.topic.compaction.interval.ms`: how often the table's small files are compacted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compaction {
    /// `0` (the default): the coordinator's default for the table's kind.
    Default,
    /// `-1`: never (another engine maintains the table).
    Off,
    /// At most once per this long.
    Every(Duration),
}

/// `table.topic.expire.snapshot.*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpireConfig {
    /// `older.than.hours`.
    pub older_than: Duration,
    /// `retain.last`.
    pub retain_last: usize,
    /// `max.count`.
    pub max_snapshots: usize,
}

impl TableTopicConfig {
    /// The settings of table topic `topic`, whose explicit configs `get` answers (the topic's,
    /// then the broker's topic defaults); None when `table.topic.enable` is not `true`.
    pub fn from_topic<'a>(topic: &str, get: impl Fn(&str) -> Option<&'a str>) -> Option<Self> {
        let value = |name: &str| -> String {
            get(name)
                .or_else(|| def(name).map(|d| d.default))
                .unwrap_or("")
                .trim()
                .to_string()
        };
        let number = |name: &str| -> i64 {
            value(name).parse().unwrap_or_else(|_| {
                def(name)
                    .and_then(|d| d.default.parse().ok())
                    .unwrap_or_default()
            })
        };
        let text = |name: &str| Some(value(name)).filter(|v| !v.is_empty());
        if value("table.topic.enable") != "true" {
            return None;
        }
        let effective = DEFS
            .iter()
            .filter(|d| is_table_config(d.name))
            .map(|d| (d.name.to_string(), value(d.name)))
            .collect();
        let idle = number("table.topic.watermark.idle.ms");
        let compaction = match number("table.topic.compaction.interval.ms") {
            0 => Compaction::Default,
            n if n < 0 => Compaction::Off,
            n => Compaction::Every(Duration::from_millis(n as u64)),
        };
        Some(TableTopicConfig {
            namespace: value("table.topic.namespace"),
            table: text("table.topic.table").unwrap_or_else(|| topic.to_string()),
            commit_interval: Duration::from_millis(
                number("table.topic.commit.interval.ms").max(1) as u64
            ),
            convert_value: value("table.topic.convert.value.type"),
            convert_key: value("table.topic.convert.key.type"),
            transform_value: value("table.topic.transform.value.type"),
            id_columns: parse_list(&value("table.topic.id.columns")),
            upsert: value("table.topic.upsert.enable") == "true",
            cdc_field: text("table.topic.cdc.field"),
            partition_by: text("table.topic.partition.by"),
            event_time_field: text("table.topic.event.time.field"),
            watermark_idle: (idle > 0).then(|| Duration::from_millis(idle as u64)),
            tolerate_errors: value("table.topic.errors.tolerance") == "all",
            target_file_bytes: number("table.topic.target.file.size.bytes").max(1) as usize,
            compaction,
            expire: (value("table.topic.expire.snapshot.enable") != "false").then(|| {
                ExpireConfig {
                    older_than: Duration::from_secs(
                        number("table.topic.expire.snapshot.older.than.hours").max(0) as u64 * 3600,
                    ),
                    retain_last: number("table.topic.expire.snapshot.retain.last").max(1) as usize,
                    max_snapshots: number("table.topic.expire.snapshot.max.count").max(1) as usize,
                }
            }),
            effective,
        })
    }
}

/// What a table topic's dead-letter table adds to its table's name (`<table>_dlq`, in the
/// same namespace); the table path's name for it is `inlet_table_worker::dead_letter::SUFFIX`.
pub(crate) const DEAD_LETTER_SUFFIX: &str = "_dlq";

/// A topic's explicitly set configs (canonical names, validated values).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicConfigs {
    pub(crate) set: BTreeMap<String, String>,
}

impl TopicConfigs {
    /// Validates configs given by name (aliases accepted); a null value means "default" and
    /// is skipped.
    pub fn parse(given: &BTreeMap<String, String>) -> Result<Self, KafkaError> {
        let mut set = BTreeMap::new();
        for (name, value) in given {
            let canonical = canonical_name(name).ok_or_else(|| {
                KafkaError::invalid_config(format!("unknown topic config {name:?}"))
            })?;
            let def = def(canonical).expect("canonical names are defined");
            let value = value.trim();
            validate(def, value)?;
            set.insert(canonical.to_string(), value.to_string());
        }
        Ok(TopicConfigs { set })
    }

    /// Restores configs that were validated before (from the metadata store).
    pub fn from_stored(set: BTreeMap<String, String>) -> Self {
        TopicConfigs { set }
    }

    pub fn explicit(&self) -> &BTreeMap<String, String> {
        &self.set
    }

    /// Adds `other`'s values over these.
    pub fn merge(&mut self, other: TopicConfigs) {
        self.set.extend(other.set);
    }

    pub fn remove(&mut self, name: &str) {
        self.set.remove(name);
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.set.get(name).map(String::as_str)
    }

    /// Checks rules between configs, on the effective set (`defaults` under these).
    pub fn check_combination(&self, defaults: &TopicConfigs) -> Result<(), KafkaError> {
        let get = |name: &str| {
            self.get(name)
                .or_else(|| defaults.get(name))
                .or_else(|| def(name).map(|d| d.default))
                .unwrap_or("")
        };
        let has_ids = !parse_list(get("table.topic.id.columns")).is_empty();
        if get("table.topic.enable").trim() == "true"
            && self.get("cleanup.policy").is_some_and(compacts)
        {
            return Err(KafkaError::invalid_config(
                "a table topic cannot be compacted (cleanup.policy with compact): its table keeps \
                 every record, and a keyed table keeps the latest row per key by itself \
                 (table.topic.upsert.enable=true with table.topic.id.columns)",
            ));
        }
        if get("table.topic.upsert.enable") == "true" && !has_ids {
            return Err(KafkaError::invalid_config(
                "table.topic.upsert.enable=true needs table.topic.id.columns",
            ));
        }
        if !get("table.topic.cdc.field").is_empty() && !has_ids {
            return Err(KafkaError::invalid_config(
                "table.topic.cdc.field needs table.topic.id.columns",
            ));
        }
        Ok(())
    }

    /// The topic's `cleanup.policy` under the broker's `defaults`. A table topic is never
    /// compacted: its own value may not say `compact` ([`TopicConfigs::check_combination`]),
    /// and a broker-wide default that does is read as `delete` for it.
    pub fn cleanup_policy<'a>(&'a self, defaults: &'a TopicConfigs) -> &'a str {
        if let Some(own) = self.get("cleanup.policy") {
            return own;
        }
        let default = defaults.get("cleanup.policy").unwrap_or("delete");
        if compacts(default) && self.table_topic("t", defaults).is_some() {
            "delete"
        } else {
            default
        }
    }

    /// The table a table topic named `topic` writes, as (namespace, table), with `defaults`
    /// under these configs; None when `table.topic.enable` is not `true`.
    pub fn table_of(&self, topic: &str, defaults: &TopicConfigs) -> Option<(String, String)> {
        self.table_topic(topic, defaults)
            .map(|c| (c.namespace, c.table))
    }

    /// The table topic settings of topic `topic`, with `defaults` under these configs; None
    /// when it is not a table topic.
    pub fn table_topic(&self, topic: &str, defaults: &TopicConfigs) -> Option<TableTopicConfig> {
        TableTopicConfig::from_topic(topic, |name| self.get(name).or_else(|| defaults.get(name)))
    }

    /// A table topic's `table.topic.lag.max.bytes`: the bytes a partition's stream may hold
    /// that its table has not committed before produce is refused. None: not a table topic,
    /// or no bound (-1).
    pub fn table_lag_bound(&self, defaults: &TopicConfigs) -> Option<u64> {
        let get = |name: &str| self.get(name).or_else(|| defaults.get(name));
        if get("table.topic.enable").map(str::trim) != Some("true") {
            return None;
        }
        let name = "table.topic.lag.max.bytes";
        let bound: i64 = get(name)
            .and_then(|v| v.trim().parse().ok())
            .or_else(|| def(name).and_then(|d| d.default.parse().ok()))?;
        u64::try_from(bound).ok()
    }
}

/// Where a described config's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    Topic,
    Broker,
    Default,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedConfig {
    pub name: &'static str,
    pub value: String,
    pub source: ConfigSource,
}

/// Whether a `cleanup.policy` value includes `compact`.
pub(crate) fn compacts(policy: &str) -> bool {
    policy.split(',').any(|p| p.trim() == "compact")
}

/// Whether a `cleanup.policy` value includes `delete` (retention by time and size).
pub(crate) fn deletes(policy: &str) -> bool {
    policy.split(',').any(|p| p.trim() == "delete")
}

/// Whether `name` is one of Kafka's comma-separated list configs (APPEND and SUBTRACT work on
/// their items).
pub(crate) fn is_comma_list(name: &str) -> bool {
    matches!(def(name).map(|d| &d.kind), Some(Kind::List(_)))
}

fn validate(def: &Def, value: &str) -> Result<(), KafkaError> {
    let bad = |why: String| {
        KafkaError::new(
            ResponseError::InvalidConfig,
            format!("invalid value {value:?} for {}: {why}", def.name),
        )
    };
    match def.kind {
        Kind::Bool => match value {
            "true" | "false" => Ok(()),
            _ => Err(bad("must be true or false".into())),
        },
        Kind::Int(min, max) => match value.parse::<i64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(()),
            Ok(_) => Err(bad(format!("must be between {min} and {max}"))),
            Err(_) => Err(bad("not an integer".into())),
        },
        Kind::Choice(choices) => {
            if choices.contains(&value) {
                Ok(())
            } else {
                Err(bad(format!("must be one of {}", choices.join(", "))))
            }
        }
        Kind::Name => {
            let ok = value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
                && value.len() <= 255;
            if ok && !(def.name == "table.topic.namespace" && value.is_empty()) {
                Ok(())
            } else {
                Err(bad(
                    "use letters, digits, '_', '-' and '.' (at most 255)".into()
                ))
            }
        }
        Kind::List(words) => {
            let items: Vec<&str> = value.split(',').map(str::trim).collect();
            if items.iter().all(|i| words.contains(i)) {
                Ok(())
            } else {
                Err(bad(format!(
                    "must be a comma-separated list of {}",
                    words.join(", ")
                )))
            }
        }
        Kind::Fraction => match value.parse::<f64>() {
            Ok(x) if (0.0..=1.0).contains(&x) => Ok(()),
            _ => Err(bad("must be a number from 0 to 1".into())),
        },
        Kind::Text => {
            if value.len() <= 255 && !value.chars().any(char::is_control) {
                Ok(())
            } else {
                Err(bad("at most 255 printable characters".into()))
            }
        }
        Kind::Columns => {
            check_bracketed(value).map_err(bad)?;
            for column in parse_list(value) {
                check_column(&column).map_err(bad)?;
            }
            Ok(())
        }
        Kind::Transforms => {
            check_bracketed(value).map_err(bad)?;
            for transform in split_top_level(value) {
                check_transform(&transform).map_err(bad)?;
            }
            Ok(())
        }
    }
}

fn check_bracketed(value: &str) -> Result<(), String> {
    if value.is_empty() || (value.starts_with('[') && value.ends_with(']')) {
        Ok(())
    } else {
        Err("write a list in brackets, e.g. [a, b]".into())
    }
}

fn check_column(column: &str) -> Result<(), String> {
    let ok = !column.is_empty()
        && column
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!("{column:?} is not a column name"))
    }
}

/// `[a, b]` → `["a", "b"]`; empty for an empty value.
pub(crate) fn parse_list(value: &str) -> Vec<String> {
    split_top_level(value)
}

/// Splits a bracketed list at commas outside parentheses.
fn split_top_level(value: &str) -> Vec<String> {
    let inner = value
        .trim()
        .strip_prefix('[')
        .and_then(|v| v.strip_suffix(']'))
        .unwrap_or("");
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut current = String::new();
    for c in inner.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(current.trim().to_string());
                current.clear();
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    if !current.trim().is_empty() || !out.is_empty() {
        out.push(current.trim().to_string());
    }
    out
}

/// `col`, `year(col)`, `month(col)`, `day(col)`, `hour(col)`, `bucket(col, N)`,
/// `truncate(col, W)`.
fn check_transform(transform: &str) -> Result<(), String> {
    let Some((func, rest)) = transform.split_once('(') else {
        return check_column(transform);
    };
    let args = rest
        .strip_suffix(')')
        .ok_or_else(|| format!("{transform:?}: missing ')'"))?;
    let args: Vec<&str> = args.split(',').map(str::trim).collect();
    match (func.trim(), args.as_slice()) {
        ("year" | "month" | "day" | "hour" | "identity", [col]) => check_column(col),
        ("bucket" | "truncate", [col, n]) => {
            check_column(col)?;
            match n.parse::<u32>() {
                Ok(n) if n > 0 => Ok(()),
                _ => Err(format!(
                    "{transform:?}: the width must be a positive integer"
                )),
            }
        }
        _ => Err(format!(
            "{transform:?} is not a partition transform (identity, year, month, day, hour, \
             bucket(col, N), truncate(col, W))"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<TopicConfigs, KafkaError> {
        TopicConfigs::parse(
            &pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn a_broker_wide_compact_default_does_not_reach_table_topics() {
        let defaults = parse(&[("cleanup.policy", "delete,compact")]).expect("valid");
        let plain = parse(&[]).expect("valid");
        let table = parse(&[("table.topic.enable", "true")]).expect("valid");
        let own = parse(&[("cleanup.policy", "compact")]).expect("valid");
        assert_eq!(plain.cleanup_policy(&defaults), "delete,compact");
        assert_eq!(table.cleanup_policy(&defaults), "delete");
        assert_eq!(own.cleanup_policy(&defaults), "compact");
        assert_eq!(plain.cleanup_policy(&TopicConfigs::default()), "delete");
        // So a table topic may still be created under such a default; its own compact is not.
        assert!(table.check_combination(&defaults).is_ok());
        let both = parse(&[
            ("table.topic.enable", "true"),
            ("cleanup.policy", "compact"),
        ])
        .expect("valid");
        assert!(both.check_combination(&defaults).is_err());
    }

    /// The typed settings take every default from the definitions DescribeConfigs reports,
    /// and the broker's topic defaults under the topic's own configs.
    #[test]
    fn table_topic_settings_are_typed_with_the_described_defaults() {
        let none = TopicConfigs::default();
        assert_eq!(parse(&[]).expect("empty").table_topic("t", &none), None);
        let on = parse(&[("table.topic.enable", "true")]).expect("on");
        let c = on.table_topic("orders", &none).expect("a table topic");
        assert_eq!(
            (c.namespace.as_str(), c.table.as_str()),
            ("default", "orders")
        );
        assert_eq!(c.commit_interval, Duration::from_secs(60));
        assert_eq!(
            (
                c.convert_value.as_str(),
                c.convert_key.as_str(),
                c.transform_value.as_str()
            ),
            ("by_schema_id", "raw", "none")
        );
        assert!(c.id_columns.is_empty() && !c.upsert && c.cdc_field.is_none());
        assert_eq!(
            (c.partition_by.clone(), c.event_time_field.clone()),
            (None, None)
        );
        assert_eq!(c.watermark_idle, None, "-1 is off");
        assert!(!c.tolerate_errors);
        assert_eq!(c.target_file_bytes, 32 << 20);
        assert_eq!(c.compaction, Compaction::Default);
        assert_eq!(
            c.expire,
            Some(ExpireConfig {
                older_than: Duration::from_secs(24 * 3600),
                retain_last: 1,
                max_snapshots: 1440,
            })
        );
        assert!(c
            .effective
            .iter()
            .any(|(k, v)| k == "table.topic.commit.interval.ms" && v == "60000"));
        // Every described default reads back as the typed default (DescribeConfigs' values
        // are accepted back, and mean the same).
        let described: Vec<(String, String)> = DEFS
            .iter()
            .filter(|d| is_table_config(d.name) && !d.default.is_empty())
            .map(|d| (d.name.to_string(), d.default.to_string()))
            .collect();
        let explicit = TopicConfigs::parse(&described.into_iter().collect()).expect("defaults");
        let mut back = explicit.table_topic("orders", &none);
        assert_eq!(
            back.as_ref().map(|b| b.commit_interval),
            None,
            "enable defaults to false"
        );
        let mut with_on = explicit.clone();
        with_on.merge(on.clone());
        back = with_on.table_topic("orders", &none);
        assert_eq!(back, Some(c));

        let broker = parse(&[("table.topic.commit.interval.ms", "5000")]).expect("defaults");
        let set = parse(&[
            ("table.topic.enable", "true"),
            ("table.topic.table", "o"),
            ("table.topic.id.columns", "[id, region]"),
            ("table.topic.cdc.field", "op"),
            ("table.topic.watermark.idle.ms", "30000"),
            ("table.topic.errors.tolerance", "all"),
            ("table.topic.expire.snapshot.enable", "false"),
            ("table.topic.target.file.size.bytes", "1048576"),
            ("table.topic.compaction.interval.ms", "5000"),
        ])
        .expect("valid");
        let c = set.table_topic("orders", &broker).expect("a table topic");
        assert_eq!(c.table, "o");
        assert_eq!(
            c.commit_interval,
            Duration::from_secs(5),
            "the broker's default"
        );
        assert_eq!(c.id_columns, vec!["id", "region"]);
        assert_eq!(c.cdc_field.as_deref(), Some("op"));
        assert_eq!(c.watermark_idle, Some(Duration::from_secs(30)));
        assert!(c.tolerate_errors);
        assert_eq!(c.expire, None);
        assert_eq!(c.target_file_bytes, 1 << 20);
        assert_eq!(c.compaction, Compaction::Every(Duration::from_secs(5)));
        let zero = parse(&[
            ("table.topic.enable", "true"),
            ("table.topic.watermark.idle.ms", "0"),
        ])
        .expect("valid");
        assert_eq!(
            zero.table_topic("t", &none).expect("table").watermark_idle,
            None,
            "0 is off too"
        );
    }

    #[test]
    fn aliases_resolve_and_values_are_checked() {
        let c = parse(&[
            ("automq.table.topic.enable", "true"),
            ("table.topic.partition.by", "[day(ts), bucket(id, 16)]"),
            ("table.topic.id.columns", "[id, region]"),
            ("retention.ms", "-1"),
        ])
        .expect("valid");
        assert_eq!(c.get("table.topic.enable"), Some("true"));
        assert_eq!(
            parse_list(c.get("table.topic.id.columns").unwrap()),
            ["id", "region"]
        );

        for (name, value) in [
            ("table.topic.enable", "yes"),
            ("table.topic.commit.interval.ms", "10"),
            ("table.topic.convert.value.type", "json"),
            ("table.topic.partition.by", "[week(ts)]"),
            ("table.topic.partition.by", "[bucket(id)]"),
            ("table.topic.id.columns", "id"),
            ("cleanup.policy", "compact,squash"),
            ("retention.ms", "soon"),
            ("no.such.config", "1"),
        ] {
            let err = parse(&[(name, value)]).expect_err(name);
            assert_eq!(err.code, ResponseError::InvalidConfig, "{name}={value}");
            assert!(err.message.contains(name), "{}", err.message);
        }
    }

    #[test]
    fn upsert_needs_id_columns() {
        let c = parse(&[("table.topic.upsert.enable", "true")]).expect("valid alone");
        assert!(c.check_combination(&TopicConfigs::default()).is_err());
        let c = parse(&[
            ("table.topic.upsert.enable", "true"),
            ("table.topic.id.columns", "[id]"),
        ])
        .expect("valid");
        c.check_combination(&TopicConfigs::default())
            .expect("combination ok");
    }
}
