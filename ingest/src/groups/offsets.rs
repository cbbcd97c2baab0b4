//! Committed consumer offsets: durable in the metadata store, cached in memory.
//!
//! Invariants:
//! - a commit is written in one metadata-store transaction before [`OffsetStore::commit`]
//!   returns, and only then enters the cache; the cache never holds an offset the store lacks;
//! - writes to one group are serialized, so the cache and the store agree on the last write to
//!   each partition even when commits of one group race;
//! - the cache is loaded whole at open, so a restarted node answers OffsetFetch for every group
//!   that committed before.
//!
//! One row per (group, topic, partition); SQL that runs on SQLite and PostgreSQL alike.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use inlet_storage::{MetaStore, Result};
use parking_lot::{Mutex, RwLock};
use sqlx::Row;

/// Kafka's `offset.metadata.max.bytes` default.
pub(crate) const MAX_METADATA_BYTES: usize = 4096;

const MIGRATIONS: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS inlet_group_offsets (
        group_id VARCHAR(1024) NOT NULL,
        topic VARCHAR(1024) NOT NULL,
        partition_index BIGINT NOT NULL,
        committed_offset BIGINT NOT NULL,
        leader_epoch BIGINT NOT NULL,
        metadata TEXT NOT NULL,
        commit_ms BIGINT NOT NULL,
        PRIMARY KEY (group_id, topic, partition_index))",
    "CREATE INDEX IF NOT EXISTS inlet_group_offsets_topic ON inlet_group_offsets (topic)",
];

/// One committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_ms: u64,
}

/// (topic, partition) → offset, ordered so that fetches answer in a stable order.
pub(crate) type GroupOffsets = BTreeMap<(String, i32), CommittedOffset>;

#[derive(Debug)]
pub(crate) struct OffsetStore {
    meta: MetaStore,
    cache: RwLock<HashMap<String, GroupOffsets>>,
    /// One write lock per group (see the module invariants).
    write_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl OffsetStore {
    /// Creates the table if needed and loads every committed offset.
    pub(super) async fn open(meta: MetaStore) -> Result<Self> {
        meta.migrate("groups", MIGRATIONS).await?;
        let rows = sqlx::query(
            "SELECT group_id, topic, partition_index, committed_offset, leader_epoch, metadata,
                    commit_ms
             FROM inlet_group_offsets",
        )
        .fetch_all(meta.pool())
        .await?;
        let mut cache: HashMap<String, GroupOffsets> = HashMap::new();
        for row in rows {
            let group: String = row.try_get("group_id")?;
            let topic: String = row.try_get("topic")?;
            let partition = row.try_get::<i64, _>("partition_index")? as i32;
            let offset = CommittedOffset {
                offset: row.try_get("committed_offset")?,
                leader_epoch: row.try_get::<i64, _>("leader_epoch")? as i32,
                metadata: row.try_get("metadata")?,
                commit_ms: row.try_get::<i64, _>("commit_ms")? as u64,
            };
            cache
                .entry(group)
                .or_default()
                .insert((topic, partition), offset);
        }
        Ok(OffsetStore {
            meta,
            cache: RwLock::new(cache),
            write_locks: Mutex::new(HashMap::new()),
        })
    }

    fn write_lock(&self, group: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.write_locks
            .lock()
            .entry(group.to_string())
            .or_default()
            .clone()
    }

    /// Writes `offsets` of `group` durably, all or nothing, then caches them.
    pub(super) async fn commit(
        &self,
        group: &str,
        offsets: Vec<((String, i32), CommittedOffset)>,
    ) -> Result<()> {
        if offsets.is_empty() {
            return Ok(());
        }
        let lock = self.write_lock(group);
        let _guard = lock.lock().await;
        let mut tx = self.meta.pool().begin().await?;
        for ((topic, partition), o) in &offsets {
            sqlx::query(
                "INSERT INTO inlet_group_offsets
                    (group_id, topic, partition_index, committed_offset, leader_epoch, metadata,
                     commit_ms)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (group_id, topic, partition_index) DO UPDATE SET
                    committed_offset = excluded.committed_offset,
                    leader_epoch = excluded.leader_epoch,
                    metadata = excluded.metadata,
                    commit_ms = excluded.commit_ms",
            )
            .bind(group)
            .bind(topic.as_str())
            .bind(i64::from(*partition))
            .bind(o.offset)
            .bind(i64::from(o.leader_epoch))
            .bind(o.metadata.as_str())
            .bind(o.commit_ms as i64)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        let mut cache = self.cache.write();
        let entry = cache.entry(group.to_string()).or_default();
        entry.extend(offsets);
        Ok(())
    }

    /// Reads `group`'s offsets from the metadata store again, in place of the cached ones: in
    /// a cluster another node may have coordinated the group (and taken its commits) since this
    /// node last did.
    pub(super) async fn load_group(&self, group: &str) -> Result<()> {
        let lock = self.write_lock(group);
        let _guard = lock.lock().await;
        let rows = sqlx::query(
            "SELECT topic, partition_index, committed_offset, leader_epoch, metadata, commit_ms
             FROM inlet_group_offsets WHERE group_id = $1",
        )
        .bind(group)
        .fetch_all(self.meta.pool())
        .await?;
        let mut offsets = GroupOffsets::new();
        for row in rows {
            let topic: String = row.try_get("topic")?;
            let partition = row.try_get::<i64, _>("partition_index")? as i32;
            offsets.insert(
                (topic, partition),
                CommittedOffset {
                    offset: row.try_get("committed_offset")?,
                    leader_epoch: row.try_get::<i64, _>("leader_epoch")? as i32,
                    metadata: row.try_get("metadata")?,
                    commit_ms: row.try_get::<i64, _>("commit_ms")? as u64,
                },
            );
        }
        self.cache.write().insert(group.to_string(), offsets);
        Ok(())
    }

    /// The committed offset of one partition.
    pub(super) fn get(&self, group: &str, topic: &str, partition: i32) -> Option<CommittedOffset> {
        self.cache
            .read()
            .get(group)
            .and_then(|offsets| offsets.get(&(topic.to_string(), partition)))
            .cloned()
    }

    /// Every committed offset of `group`.
    pub(super) fn all(&self, group: &str) -> GroupOffsets {
        self.cache.read().get(group).cloned().unwrap_or_default()
    }

    /// Whether `group` has committed offsets (such a group exists, `Empty`, with no members).
    pub(super) fn has_group(&self, group: &str) -> bool {
        self.cache.read().get(group).is_some_and(|o| !o.is_empty())
    }

    /// Every group with committed offsets.
    pub(super) fn groups(&self) -> Vec<String> {
        self.cache
            .read()
            .iter()
            .filter(|(_, offsets)| !offsets.is_empty())
            .map(|(group, _)| group.clone())
            .collect()
    }

    /// Deletes every offset of `group`.
    pub(super) async fn delete_group(&self, group: &str) -> Result<()> {
        let lock = self.write_lock(group);
        let _guard = lock.lock().await;
        sqlx::query("DELETE FROM inlet_group_offsets WHERE group_id = $1")
            .bind(group)
            .execute(self.meta.pool())
            .await?;
        self.cache.write().remove(group);
        Ok(())
    }

    /// Deletes the offsets of some partitions of `group`.
    pub(super) async fn delete_partitions(
        &self,
        group: &str,
        partitions: &[(String, i32)],
    ) -> Result<()> {
        if partitions.is_empty() {
            return Ok(());
        }
        let lock = self.write_lock(group);
        let _guard = lock.lock().await;
        let mut tx = self.meta.pool().begin().await?;
        for (topic, partition) in partitions {
            sqlx::query(
                "DELETE FROM inlet_group_offsets
                 WHERE group_id = $1 AND topic = $2 AND partition_index = $3",
            )
            .bind(group)
            .bind(topic.as_str())
            .bind(i64::from(*partition))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        let mut cache = self.cache.write();
        if let Some(offsets) = cache.get_mut(group) {
            for key in partitions {
                offsets.remove(key);
            }
            if offsets.is_empty() {
                cache.remove(group);
            }
        }
        Ok(())
    }

    /// Deletes the offsets of `topic` in every group.
    pub(super) async fn delete_topic(&self, topic: &str) -> Result<()> {
        sqlx::query("DELETE FROM inlet_group_offsets WHERE topic = $1")
            .bind(topic)
            .execute(self.meta.pool())
            .await?;
        let mut cache = self.cache.write();
        for offsets in cache.values_mut() {
            offsets.retain(|(t, _), _| t != topic);
        }
        cache.retain(|_, offsets| !offsets.is_empty());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offset(offset: i64, metadata: &str) -> CommittedOffset {
        CommittedOffset {
            offset,
            leader_epoch: 3,
            metadata: metadata.into(),
            commit_ms: 1000,
        }
    }

    #[tokio::test]
    async fn offsets_survive_a_reopen_and_deletes_are_durable_on_sqlite() {
        let dir = tempfile::tempdir().expect("tempdir");
        durability(&format!(
            "sqlite://{}",
            dir.path().join("meta.db").display()
        ))
        .await;
    }

    /// The same SQL on PostgreSQL, when `source scripts/test-env.sh` provides one.
    #[tokio::test]
    async fn offsets_survive_a_reopen_and_deletes_are_durable_on_postgres() {
        let Some(url) = inlet_test_support::service_env("INLET_TEST_POSTGRES_URL") else {
            return;
        };
        durability(&inlet_test_support::fresh_postgres_database(&url).await).await;
    }

    async fn durability(url: &str) {
        let url = url.to_string();
        {
            let store = OffsetStore::open(MetaStore::connect(&url).await.expect("connect"))
                .await
                .expect("open");
            store
                .commit(
                    "g",
                    vec![
                        (("t".into(), 0), offset(10, "a")),
                        (("t".into(), 1), offset(20, "")),
                        (("u".into(), 0), offset(5, "x")),
                    ],
                )
                .await
                .expect("commit");
            // An update of an existing row.
            store
                .commit("g", vec![(("t".into(), 0), offset(11, "b"))])
                .await
                .expect("commit");
            store
                .commit("h", vec![(("u".into(), 0), offset(7, ""))])
                .await
                .expect("commit");
            store.delete_topic("u").await.expect("delete topic");
            assert!(!store.has_group("h"));
        }
        let store = OffsetStore::open(MetaStore::connect(&url).await.expect("connect"))
            .await
            .expect("reopen");
        assert_eq!(store.get("g", "t", 0), Some(offset(11, "b")));
        assert_eq!(store.get("g", "t", 1), Some(offset(20, "")));
        assert_eq!(store.get("g", "u", 0), None);
        assert_eq!(store.groups(), vec!["g".to_string()]);
        store
            .delete_partitions("g", &[("t".into(), 1)])
            .await
            .expect("delete partitions");
        assert_eq!(store.all("g").len(), 1);
        store.delete_group("g").await.expect("delete group");
        assert!(!store.has_group("g"));
        drop(store);
        let store = OffsetStore::open(MetaStore::connect(&url).await.expect("connect"))
            .await
            .expect("reopen");
        assert!(store.groups().is_empty());
    }
}
