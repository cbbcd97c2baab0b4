//! Topics and their partitions. A topic's row (name, id, partition count, explicitly set
//! configs) lives in the metadata store; each partition is a stream named
//! `kafka/<topic id>/<partition>`, so a topic deleted and created again never meets the old
//! data.
//!
//! Invariants:
//! - Changes (create, delete, add partitions, alter configs) are serialized by one lock and
//!   commit the metadata row before the in-memory map changes; the map is a cache of the rows.
//! - The row is written before partition streams are created and removed before they are
//!   deleted, so opening the registry repairs a crash between the two: missing streams are
//!   created and streams of topics without a row are deleted.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use inlet_common::Clock;
use inlet_storage::{MetaStore, StreamId, StreamStore};
use kafka_protocol::ResponseError;
use parking_lot::RwLock;
use sqlx::Row;

use crate::config::BrokerConfig;
use crate::dynamic_config::LiveConfig;
use crate::error::{KafkaError, Result};
use crate::producer_image::ProducerImage;
use crate::producers::PartitionProducers;
use crate::topic_config::TopicConfigs;

const MIGRATIONS: &[&str] = &["CREATE TABLE inlet_topics (
        name VARCHAR(249) PRIMARY KEY,
        topic_id VARCHAR(36) NOT NULL,
        partitions INTEGER NOT NULL,
        configs TEXT NOT NULL,
        created_ms BIGINT NOT NULL)"];

/// Prefix of partition stream names.
const STREAM_PREFIX: &str = "kafka/";

/// One partition: its stream and the state produce requests serialize on.
#[derive(Debug)]
pub struct Partition {
    pub index: i32,
    pub stream: StreamId,
    /// Idempotent producers' sequence state; the lock also orders appends to the stream.
    pub producers: tokio::sync::Mutex<PartitionProducers>,
    /// The producer state as the durable batches define it, with the ownership epoch it was
    /// built under: what the snapshot task saves (`producer_image`). Empty until the
    /// partition is produced to on this node.
    pub(crate) image: Arc<tokio::sync::Mutex<Option<(u64, ProducerImage)>>>,
    /// Its open and aborted transactions (`txn::partition`): the last stable offset and what
    /// `read_committed` readers skip. Changed under the `producers` lock, read without it.
    pub(crate) txns: parking_lot::Mutex<crate::txn::PartitionTxns>,
}

/// A topic as the broker sees it; replaced as a whole when it changes.
#[derive(Debug)]
pub struct Topic {
    pub name: String,
    pub id: uuid::Uuid,
    pub partitions: Vec<Arc<Partition>>,
    pub configs: TopicConfigs,
}

impl Topic {
    pub fn partition(&self, index: i32) -> Option<&Arc<Partition>> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.partitions.get(i))
    }
}

/// The registry of topics.
pub struct Topics {
    store: Arc<StreamStore>,
    meta: MetaStore,
    config: Arc<LiveConfig>,
    clock: Arc<dyn Clock>,
    by_name: RwLock<HashMap<String, Arc<Topic>>>,
    changes: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Topics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Topics").finish_non_exhaustive()
    }
}

fn stream_name(id: &uuid::Uuid, partition: i32) -> String {
    format!("{STREAM_PREFIX}{id}/{partition}")
}

/// Checks a topic name as Kafka does: 1–249 of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub(crate) fn validate_name(name: &str) -> Result<()> {
    let bad = |why: &str| {
        KafkaError::new(
            ResponseError::InvalidTopicException,
            format!("invalid topic name {name:?}: {why}"),
        )
    };
    if name.is_empty() {
        return Err(bad("empty"));
    }
    if name == "." || name == ".." {
        return Err(bad("'.' and '..' are not allowed"));
    }
    if name.len() > 249 {
        return Err(bad("longer than 249 characters"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(bad("use only ASCII letters, digits, '.', '_' and '-'"));
    }
    Ok(())
}

/// A topic's row: name, id, partition count and explicit configs.
fn parse_row(row: &sqlx::any::AnyRow) -> Result<(String, uuid::Uuid, i32, TopicConfigs)> {
    let name: String = row.try_get("name").map_err(inlet_storage::Error::from)?;
    let id: String = row
        .try_get("topic_id")
        .map_err(inlet_storage::Error::from)?;
    let count: i32 = row
        .try_get("partitions")
        .map_err(inlet_storage::Error::from)?;
    let configs: String = row.try_get("configs").map_err(inlet_storage::Error::from)?;
    let id = uuid::Uuid::parse_str(&id).map_err(|e| {
        KafkaError::new(
            ResponseError::UnknownServerError,
            format!("topic {name:?} has a bad id in the metadata store: {e}"),
        )
    })?;
    let configs: BTreeMap<String, String> = serde_json::from_str(&configs).map_err(|e| {
        KafkaError::new(
            ResponseError::UnknownServerError,
            format!("topic {name:?} has bad configs in the metadata store: {e}"),
        )
    })?;
    Ok((name, id, count, TopicConfigs::from_stored(configs)))
}

impl Topics {
    /// Brings the topics up to date with the metadata store, for a node of a cluster: topics
    /// other nodes created, deleted, grew or reconfigured. Call
    /// [`StreamStore::refresh_streams`] first, so new partitions' streams are known. A topic
    /// whose streams are not all there yet (its creator is still creating them) is taken at
    /// the next refresh. Partitions that stay keep their state (idempotent producers).
    /// Returns whether every topic's streams were known (`false`: refresh the streams, then
    /// call again).
    pub async fn refresh(&self) -> Result<bool> {
        let _guard = self.changes.lock().await;
        let rows = sqlx::query("SELECT name, topic_id, partitions, configs FROM inlet_topics")
            .fetch_all(self.meta.pool())
            .await
            .map_err(inlet_storage::Error::from)?;
        let streams: HashMap<String, StreamId> = self
            .store
            .list_streams()
            .into_iter()
            .filter(|s| s.name.starts_with(STREAM_PREFIX))
            .map(|s| (s.name, s.id))
            .collect();
        let old = self.by_name.read().clone();
        let mut by_name = HashMap::new();
        let mut complete = true;
        for row in rows {
            let (name, id, count, configs) = parse_row(&row)?;
            let before = old.get(&name).filter(|t| t.id == id);
            if let Some(t) = before {
                if t.partitions.len() == count as usize && t.configs == configs {
                    by_name.insert(name, t.clone());
                    continue;
                }
            }
            let mut partitions = Vec::new();
            for p in 0..count {
                let kept = before.and_then(|t| t.partition(p)).cloned();
                let stream = streams.get(&stream_name(&id, p)).copied();
                match (kept, stream) {
                    (Some(kept), _) => partitions.push(kept),
                    (None, Some(stream)) => partitions.push(Arc::new(Partition {
                        index: p,
                        stream,
                        producers: Default::default(),
                        image: Default::default(),
                        txns: Default::default(),
                    })),
                    (None, None) => break,
                }
            }
            if partitions.len() != count as usize {
                complete = false;
                if let Some(t) = before {
                    by_name.insert(name, t.clone());
                }
                continue;
            }
            by_name.insert(
                name.clone(),
                Arc::new(Topic {
                    name,
                    id,
                    partitions,
                    configs,
                }),
            );
        }
        *self.by_name.write() = by_name;
        Ok(complete)
    }

    /// Loads the topics and repairs their streams (see the module invariants).
    pub async fn open(
        store: Arc<StreamStore>,
        config: Arc<LiveConfig>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self> {
        let meta = store.meta().clone();
        meta.migrate("ingest.topics", MIGRATIONS).await?;
        let rows = sqlx::query("SELECT name, topic_id, partitions, configs FROM inlet_topics")
            .fetch_all(meta.pool())
            .await
            .map_err(inlet_storage::Error::from)?;
        let mut streams: HashMap<String, StreamId> = store
            .list_streams()
            .into_iter()
            .filter(|s| s.name.starts_with(STREAM_PREFIX))
            .map(|s| (s.name, s.id))
            .collect();
        let mut by_name = HashMap::new();
        for row in rows {
            let (name, id, count, configs) = parse_row(&row)?;
            let mut partitions = Vec::new();
            for p in 0..count {
                let sname = stream_name(&id, p);
                let stream = match streams.remove(&sname) {
                    Some(s) => s,
                    None => {
                        let s = store.create_stream(&sname).await?.id;
                        Self::apply_retention(&store, &config.current(), &configs, s).await?;
                        s
                    }
                };
                partitions.push(Arc::new(Partition {
                    index: p,
                    stream,
                    producers: Default::default(),
                    image: Default::default(),
                    txns: Default::default(),
                }));
            }
            by_name.insert(
                name.clone(),
                Arc::new(Topic {
                    name,
                    id,
                    partitions,
                    configs,
                }),
            );
        }
        for (name, stream) in streams {
            tracing::info!(stream = name, "deleting the stream of a deleted topic");
            store.delete_stream(stream).await?;
        }
        Ok(Topics {
            store,
            meta,
            config,
            clock,
            by_name: RwLock::new(by_name),
            changes: tokio::sync::Mutex::new(()),
        })
    }

    pub fn get(&self, name: &str) -> Option<Arc<Topic>> {
        self.by_name.read().get(name).cloned()
    }

    pub fn by_id(&self, id: &uuid::Uuid) -> Option<Arc<Topic>> {
        self.by_name.read().values().find(|t| &t.id == id).cloned()
    }

    /// Every topic, sorted by name.
    pub fn list(&self) -> Vec<Arc<Topic>> {
        let mut out: Vec<_> = self.by_name.read().values().cloned().collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    async fn apply_retention(
        store: &StreamStore,
        broker: &BrokerConfig,
        configs: &TopicConfigs,
        stream: StreamId,
    ) -> Result<()> {
        let ms = configs
            .get("retention.ms")
            .and_then(|v| v.parse().ok())
            .unwrap_or(broker.log_retention_ms);
        let bytes = configs
            .get("retention.bytes")
            .and_then(|v| v.parse().ok())
            .unwrap_or(broker.log_retention_bytes);
        // A compact-only topic keeps everything compaction leaves (Kafka: no retention).
        let policy = configs.cleanup_policy(&broker.topic_defaults);
        let (ms, bytes) = if crate::topic_config::deletes(policy) {
            (ms, bytes)
        } else {
            (-1, -1)
        };
        if store.retention(stream)? != (Some(ms), Some(bytes)) {
            store.set_retention(stream, Some(ms), Some(bytes)).await?;
        }
        // A table topic's stream keeps what its table has not committed, whatever its
        // retention (docs/ingest.md, "Retention"); the table's coordinator raises the floor.
        // The topic's name does not change whether it is one, so any name serves here.
        let table = configs.table_topic("t", &broker.topic_defaults).is_some();
        store.hold_for_table(stream, table).await?;
        Ok(())
    }

    /// Sets every partition's stream retention again from the config in force: after the
    /// broker-wide defaults it derives from changed (`dynamic_config`), topics without their
    /// own value follow. Streams whose retention is already right are not written.
    pub(crate) async fn reapply_retention(&self) -> Result<()> {
        let _guard = self.changes.lock().await;
        let config = self.config.current();
        for topic in self.list() {
            for p in &topic.partitions {
                Self::apply_retention(&self.store, &config, &topic.configs, p.stream).await?;
            }
        }
        Ok(())
    }

    /// Checks what [`Topics::create`] would check, without creating anything.
    pub fn validate_create(
        &self,
        name: &str,
        partitions: i32,
        configs: &TopicConfigs,
    ) -> Result<()> {
        validate_name(name)?;
        if !(1..=10_000).contains(&partitions) {
            return Err(KafkaError::new(
                ResponseError::InvalidPartitions,
                format!("a topic needs 1 to 10000 partitions, not {partitions}"),
            ));
        }
        configs.check_combination(&self.config.current().topic_defaults)?;
        let map = self.by_name.read();
        self.check_total(&map, partitions as usize)?;
        self.check_table(&map, name, configs)?;
        if map.contains_key(name) {
            return Err(KafkaError::new(
                ResponseError::TopicAlreadyExists,
                format!("topic {name:?} already exists"),
            ));
        }
        let folded = name.replace('.', "_");
        if let Some(other) = map.keys().find(|k| k.replace('.', "_") == folded) {
            return Err(KafkaError::new(
                ResponseError::InvalidTopicException,
                format!("topic {name:?} collides with {other:?} ('.' and '_' are the same in metric names)"),
            ));
        }
        Ok(())
    }

    /// Creates a topic with `partitions` partitions; `configs` are its explicit configs.
    pub async fn create(
        &self,
        name: &str,
        partitions: i32,
        configs: TopicConfigs,
    ) -> Result<Arc<Topic>> {
        let _guard = self.changes.lock().await;
        self.validate_create(name, partitions, &configs)?;
        #[allow(clippy::disallowed_methods)] // a topic id: unique is all it must be
        let id = uuid::Uuid::new_v4();
        let json = serde_json::to_string(configs.explicit()).expect("a string map serializes");
        sqlx::query(
            "INSERT INTO inlet_topics (name, topic_id, partitions, configs, created_ms)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(name)
        .bind(id.to_string())
        .bind(partitions)
        .bind(json)
        .bind(self.clock.now_ms() as i64)
        .execute(self.meta.pool())
        .await
        .map_err(inlet_storage::Error::from)?;
        let mut parts = Vec::new();
        for p in 0..partitions {
            let created = async {
                let name = stream_name(&id, p);
                let stream = match self.store.create_stream(&name).await {
                    Ok(info) => info.id,
                    // Another node of a cluster, starting meanwhile, repaired the topic by
                    // creating its missing streams: they are this topic's.
                    Err(inlet_storage::Error::StreamExists { .. }) => {
                        self.store.refresh_streams().await?;
                        self.store.open_stream(&name)?.id
                    }
                    Err(e) => return Err(e.into()),
                };
                Self::apply_retention(&self.store, &self.config.current(), &configs, stream)
                    .await?;
                Ok::<_, KafkaError>(stream)
            }
            .await;
            match created {
                Ok(stream) => parts.push(Arc::new(Partition {
                    index: p,
                    stream,
                    producers: Default::default(),
                    image: Default::default(),
                    txns: Default::default(),
                })),
                Err(e) => {
                    // Leave nothing behind: the streams made so far, then the row (startup
                    // repairs the same if this node dies here).
                    self.undo_create(name, &parts).await;
                    return Err(e);
                }
            }
        }
        let topic = Arc::new(Topic {
            name: name.to_string(),
            id,
            partitions: parts,
            configs,
        });
        self.by_name.write().insert(name.to_string(), topic.clone());
        tracing::info!(topic = name, partitions, "created topic");
        Ok(topic)
    }

    /// Creates `name` with the broker's defaults if it does not exist and auto-creation is
    /// on; returns the topic either way, or `None`.
    pub async fn get_or_auto_create(&self, name: &str) -> Result<Option<Arc<Topic>>> {
        if let Some(t) = self.get(name) {
            return Ok(Some(t));
        }
        if !self.config.current().auto_create_topics {
            return Ok(None);
        }
        match self
            .create(
                name,
                self.config.current().num_partitions,
                TopicConfigs::default(),
            )
            .await
        {
            Ok(t) => Ok(Some(t)),
            Err(e) if e.code == ResponseError::TopicAlreadyExists => Ok(self.get(name)),
            Err(e) => Err(e),
        }
    }

    /// Deletes a topic and its partitions' data.
    pub async fn delete(&self, name: &str) -> Result<Arc<Topic>> {
        let _guard = self.changes.lock().await;
        let topic = self
            .get(name)
            .ok_or_else(|| KafkaError::unknown_topic(name))?;
        sqlx::query("DELETE FROM inlet_topics WHERE name = $1")
            .bind(name)
            .execute(self.meta.pool())
            .await
            .map_err(inlet_storage::Error::from)?;
        self.by_name.write().remove(name);
        for p in &topic.partitions {
            self.store.delete_stream(p.stream).await?;
        }
        tracing::info!(topic = name, "deleted topic");
        Ok(topic)
    }

    /// Grows a topic to `total` partitions.
    /// Refuses `more` partitions when the node would then hold over `inlet.max.partitions`.
    fn check_total(&self, map: &HashMap<String, Arc<Topic>>, more: usize) -> Result<()> {
        let held: usize = map.values().map(|t| t.partitions.len()).sum();
        let cap = self.config.current().max_partitions as usize;
        if held + more > cap {
            return Err(KafkaError::new(
                ResponseError::InvalidPartitions,
                format!(
                    "{more} more partitions would make {} on this node, over inlet.max.partitions ({cap})",
                    held + more
                ),
            ));
        }
        Ok(())
    }

    /// Removes a topic whose creation failed part-way: its streams, then its row.
    async fn undo_create(&self, name: &str, parts: &[Arc<Partition>]) {
        for p in parts {
            if let Err(e) = self.store.delete_stream(p.stream).await {
                tracing::warn!(topic = name, error = %e, "undoing a failed create: deleting a stream failed; startup repairs it");
            }
        }
        if let Err(e) = sqlx::query("DELETE FROM inlet_topics WHERE name = $1")
            .bind(name)
            .execute(self.meta.pool())
            .await
        {
            tracing::warn!(topic = name, error = %e, "undoing a failed create: deleting the row failed; startup repairs it");
        }
    }

    pub async fn add_partitions(&self, name: &str, total: i32, validate_only: bool) -> Result<()> {
        let _guard = self.changes.lock().await;
        let topic = self
            .get(name)
            .ok_or_else(|| KafkaError::unknown_topic(name))?;
        let current = topic.partitions.len() as i32;
        if total <= current {
            return Err(KafkaError::new(
                ResponseError::InvalidPartitions,
                format!("topic {name:?} has {current} partitions; the new count must be larger, not {total}"),
            ));
        }
        if total > 10_000 {
            return Err(KafkaError::new(
                ResponseError::InvalidPartitions,
                "a topic may have at most 10000 partitions",
            ));
        }
        self.check_total(&self.by_name.read(), (total - current) as usize)?;
        if validate_only {
            return Ok(());
        }
        sqlx::query("UPDATE inlet_topics SET partitions = $2 WHERE name = $1")
            .bind(name)
            .bind(total)
            .execute(self.meta.pool())
            .await
            .map_err(inlet_storage::Error::from)?;
        let mut partitions = topic.partitions.clone();
        for p in current..total {
            let stream = self
                .store
                .create_stream(&stream_name(&topic.id, p))
                .await?
                .id;
            Self::apply_retention(&self.store, &self.config.current(), &topic.configs, stream)
                .await?;
            partitions.push(Arc::new(Partition {
                index: p,
                stream,
                producers: Default::default(),
                image: Default::default(),
                txns: Default::default(),
            }));
        }
        self.replace(Topic {
            name: topic.name.clone(),
            id: topic.id,
            partitions,
            configs: topic.configs.clone(),
        });
        Ok(())
    }

    /// Replaces a topic's explicit configs.
    pub async fn set_configs(
        &self,
        name: &str,
        configs: TopicConfigs,
        validate_only: bool,
    ) -> Result<()> {
        let _guard = self.changes.lock().await;
        let topic = self
            .get(name)
            .ok_or_else(|| KafkaError::unknown_topic(name))?;
        configs.check_combination(&self.config.current().topic_defaults)?;
        self.check_table(&self.by_name.read(), name, &configs)?;
        if validate_only {
            return Ok(());
        }
        let json = serde_json::to_string(configs.explicit()).expect("a string map serializes");
        sqlx::query("UPDATE inlet_topics SET configs = $2 WHERE name = $1")
            .bind(name)
            .bind(json)
            .execute(self.meta.pool())
            .await
            .map_err(inlet_storage::Error::from)?;
        for p in &topic.partitions {
            Self::apply_retention(&self.store, &self.config.current(), &configs, p.stream).await?;
        }
        self.replace(Topic {
            name: topic.name.clone(),
            id: topic.id,
            partitions: topic.partitions.clone(),
            configs,
        });
        Ok(())
    }

    /// Refuses a table topic `name` with `configs` whose table is another table topic's, or
    /// is another's dead-letter table (`<table>_dlq`), or has another's table as its own
    /// dead-letter table: two coordinators would commit to one table.
    fn check_table(
        &self,
        map: &HashMap<String, Arc<Topic>>,
        name: &str,
        configs: &TopicConfigs,
    ) -> Result<()> {
        use crate::topic_config::DEAD_LETTER_SUFFIX as DLQ;
        let config = self.config.current();
        let defaults = &config.topic_defaults;
        let Some((namespace, table)) = configs.table_of(name, defaults) else {
            return Ok(());
        };
        let mine = format!("{namespace}.{table}");
        let my_dlq = format!("{mine}{DLQ}");
        for other in map.values().filter(|t| t.name != name) {
            let Some((ns, t)) = other.configs.table_of(&other.name, defaults) else {
                continue;
            };
            let theirs = format!("{ns}.{t}");
            let their_dlq = format!("{theirs}{DLQ}");
            let clash = if theirs == mine {
                format!(
                    "table topic {:?} already writes the table {mine}",
                    other.name
                )
            } else if their_dlq == mine {
                format!(
                    "{mine} is the dead-letter table of table topic {:?}",
                    other.name
                )
            } else if theirs == my_dlq {
                format!(
                    "this topic's dead-letter table {my_dlq} is the table of table topic {:?}",
                    other.name
                )
            } else {
                continue;
            };
            return Err(KafkaError::invalid_config(format!(
                "{clash}; set table.topic.namespace or table.topic.table to another table"
            )));
        }
        Ok(())
    }

    fn replace(&self, topic: Topic) {
        self.by_name
            .write()
            .insert(topic.name.clone(), Arc::new(topic));
    }
}
