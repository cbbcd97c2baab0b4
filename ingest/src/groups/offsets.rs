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
//! - every group has an owner and an epoch in `inlet_group_owners`. A node serves a group only
//!   under a claim ([`OffsetStore::claim`]): taking it raises the epoch and then reads the
//!   group's offsets afresh, and every write of the group (commit, delete) is conditional on
//!   the epoch in the same transaction, which holds the owner row until it ends. So a node
//!   that lost the group (paused past its lease, or with a clock that made it think it still
//!   coordinates) can neither write over the new coordinator's offsets nor answer from its old
//!   cache once it checks its claim, which it does on every group call but Heartbeat.
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
    // Ownership (issue 40): the node that coordinates the group and the epoch it does so
    // under; every write of the group's offsets is conditional on the epoch.
    "CREATE TABLE IF NOT EXISTS inlet_group_owners (
        group_id VARCHAR(1024) PRIMARY KEY,
        owner_node BIGINT NOT NULL,
        epoch BIGINT NOT NULL)",
    // Transactions (issue 41): offsets a transactional producer committed for the group
    // (TxnOffsetCommit), pending until its transaction ends (`groups::txn_offsets`).
    "CREATE TABLE IF NOT EXISTS inlet_txn_offsets (
        group_id VARCHAR(1024) NOT NULL,
        producer_id BIGINT NOT NULL,
        topic VARCHAR(1024) NOT NULL,
        partition_index BIGINT NOT NULL,
        committed_offset BIGINT NOT NULL,
        leader_epoch BIGINT NOT NULL,
        metadata TEXT NOT NULL,
        commit_ms BIGINT NOT NULL,
        PRIMARY KEY (group_id, producer_id, topic, partition_index))",
];

/// What [`OffsetStore::claim`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    /// This node's claim is the group's current one: its cached state is the group's.
    Held,
    /// The group was another node's, or this node's under an older epoch: it is this node's
    /// now, its offsets were read afresh, and any membership state kept from before is stale.
    Taken,
}

/// A write of a group this node no longer owns under the epoch it claimed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("group {group:?} is coordinated by another node now (this node's claim, epoch {epoch:?}, is not current)")]
pub(crate) struct Fenced {
    pub group: String,
    pub epoch: Option<u64>,
}

/// Why a write of a group failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WriteError {
    #[error(transparent)]
    Fenced(#[from] Fenced),
    #[error(transparent)]
    Store(#[from] inlet_storage::Error),
}

impl From<sqlx::Error> for WriteError {
    fn from(e: sqlx::Error) -> Self {
        WriteError::Store(e.into())
    }
}

/// One committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_ms: u64,
}

/// One partition's offset of an OffsetCommit or TxnOffsetCommit: queued on `accepted` when
/// the request is `allowed` and its metadata fits; the partition's error otherwise.
pub(crate) fn accept(
    allowed: Result<(), kafka_protocol::ResponseError>,
    (topic, partition): (&str, i32),
    (offset, leader_epoch, metadata): (i64, i32, &str),
    now_ms: u64,
    accepted: &mut Vec<((String, i32), CommittedOffset)>,
) -> Option<kafka_protocol::ResponseError> {
    match allowed {
        Err(e) => Some(e),
        Ok(()) if metadata.len() > MAX_METADATA_BYTES => {
            Some(kafka_protocol::ResponseError::OffsetMetadataTooLarge)
        }
        Ok(()) => {
            accepted.push((
                (topic.to_string(), partition),
                CommittedOffset {
                    offset,
                    leader_epoch,
                    metadata: metadata.to_string(),
                    commit_ms: now_ms,
                },
            ));
            None
        }
    }
}

/// (topic, partition) → offset, ordered so that fetches answer in a stable order.
pub(crate) type GroupOffsets = BTreeMap<(String, i32), CommittedOffset>;

#[derive(Debug)]
pub(crate) struct OffsetStore {
    meta: MetaStore,
    /// This node's id: the owner its claims write.
    node_id: u64,
    /// group → the epoch this node claimed it under (see the module invariants).
    claims: Mutex<HashMap<String, u64>>,
    cache: RwLock<HashMap<String, GroupOffsets>>,
    /// One write lock per group (see the module invariants).
    write_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl OffsetStore {
    /// Creates the tables if needed and loads every committed offset (served only once a
    /// group is claimed, which reads its offsets again).
    pub(super) async fn open(meta: MetaStore, node_id: u64) -> Result<Self> {
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
            node_id,
            claims: Mutex::new(HashMap::new()),
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

    /// Makes sure this node serves `group` under a current claim: if the owner row names this
    /// node under the epoch it claimed, nothing changes ([`Claim::Held`]); otherwise the node
    /// takes the group under a new epoch, which waits for any write of the group in flight
    /// and fences every later write under an older one, then reads its offsets afresh
    /// ([`Claim::Taken`]). Who should coordinate is the caller's decision (FindCoordinator's
    /// answer); this only keeps two coordinators from both writing.
    pub(super) async fn claim(&self, group: &str, now_ms: u64) -> Result<Claim> {
        let lock = self.write_lock(group);
        let _guard = lock.lock().await;
        let held = self.claims.lock().get(group).copied();
        let row =
            sqlx::query("SELECT owner_node, epoch FROM inlet_group_owners WHERE group_id = $1")
                .bind(group)
                .fetch_optional(self.meta.pool())
                .await?;
        let before = row
            .as_ref()
            .map(|row| row.try_get::<i64, _>("owner_node").map(|n| n as u64))
            .transpose()?;
        if let (Some(row), Some(epoch)) = (&row, held) {
            let current = row.try_get::<i64, _>("epoch")? as u64;
            if before == Some(self.node_id) && current == epoch {
                return Ok(Claim::Held);
            }
        }
        let mut tx = self.meta.pool().begin().await?;
        let row = sqlx::query(
            "INSERT INTO inlet_group_owners (group_id, owner_node, epoch) VALUES ($1, $2, 1)
             ON CONFLICT (group_id) DO UPDATE SET
                owner_node = excluded.owner_node, epoch = inlet_group_owners.epoch + 1
             RETURNING epoch",
        )
        .bind(group)
        .bind(self.node_id as i64)
        .fetch_one(&mut *tx)
        .await?;
        let epoch = row.try_get::<i64, _>("epoch")? as u64;
        // A group another node coordinated is a move (its first claim, or this node's own
        // again after a restart, is not).
        if let Some(from) = before.filter(|&n| n != self.node_id) {
            let moved = inlet_storage::Move {
                at_ms: now_ms,
                kind: "group".into(),
                name: group.to_string(),
                stream_id: None,
                from_node: Some(from),
                to_node: Some(self.node_id),
                epoch,
            };
            inlet_storage::record_move(&mut tx, &moved).await?;
        }
        tx.commit().await?;
        // After the epoch rose: every write under an older one landed before, or never will.
        let offsets = self.read_group(group).await?;
        self.cache.write().insert(group.to_string(), offsets);
        self.claims.lock().insert(group.to_string(), epoch);
        if held.is_some() {
            tracing::info!(group, epoch, "took the group again: another node coordinated it meanwhile; its offsets were read afresh");
        }
        Ok(Claim::Taken)
    }

    /// Every group's owner and epoch, as the metadata store has them, by group id.
    pub(super) async fn owners(&self) -> Result<Vec<(String, u64, u64)>> {
        let rows = sqlx::query(
            "SELECT group_id, owner_node, epoch FROM inlet_group_owners ORDER BY group_id",
        )
        .fetch_all(self.meta.pool())
        .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get::<String, _>("group_id")?,
                    row.try_get::<i64, _>("owner_node")? as u64,
                    row.try_get::<i64, _>("epoch")? as u64,
                ))
            })
            .collect()
    }

    /// The groups this node holds a claim on.
    pub(super) fn claimed(&self) -> Vec<String> {
        self.claims.lock().keys().cloned().collect()
    }

    /// Forgets `group`: its claim and cached offsets (the next call claims and reads again).
    pub(super) fn forget(&self, group: &str) {
        self.claims.lock().remove(group);
        self.cache.write().remove(group);
    }

    /// Inside `tx`: fails with [`Fenced`] unless `group` is still this node's under the epoch
    /// it claimed, and locks the owner row until `tx` ends (a new claim waits for `tx`).
    async fn check_claim(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        group: &str,
    ) -> std::result::Result<(), WriteError> {
        let epoch = self.claims.lock().get(group).copied();
        let fenced = || Fenced {
            group: group.to_string(),
            epoch,
        };
        let Some(epoch) = epoch else {
            return Err(fenced().into());
        };
        let done = sqlx::query(
            "UPDATE inlet_group_owners SET epoch = epoch
             WHERE group_id = $1 AND owner_node = $2 AND epoch = $3",
        )
        .bind(group)
        .bind(self.node_id as i64)
        .bind(epoch as i64)
        .execute(&mut **tx)
        .await?;
        if done.rows_affected() != 1 {
            self.forget(group);
            return Err(fenced().into());
        }
        Ok(())
    }

    pub(super) fn meta(&self) -> &MetaStore {
        &self.meta
    }

    /// Writes `offsets` of `group` durably, all or nothing, then caches them; fenced unless
    /// this node's claim on the group is current.
    pub(super) async fn commit(
        &self,
        group: &str,
        offsets: Vec<((String, i32), CommittedOffset)>,
    ) -> std::result::Result<(), WriteError> {
        if offsets.is_empty() {
            return Ok(());
        }
        let lock = self.write_lock(group);
        let _guard = lock.lock().await;
        let mut tx = self.meta.pool().begin().await?;
        self.check_claim(&mut tx, group).await?;
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
    async fn read_group(&self, group: &str) -> Result<GroupOffsets> {
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
        Ok(offsets)
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
    pub(super) async fn delete_group(&self, group: &str) -> std::result::Result<(), WriteError> {
        let lock = self.write_lock(group);
        let _guard = lock.lock().await;
        let mut tx = self.meta.pool().begin().await?;
        self.check_claim(&mut tx, group).await?;
        sqlx::query("DELETE FROM inlet_group_offsets WHERE group_id = $1")
            .bind(group)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        self.cache.write().remove(group);
        Ok(())
    }

    /// Deletes the offsets of some partitions of `group`.
    pub(super) async fn delete_partitions(
        &self,
        group: &str,
        partitions: &[(String, i32)],
    ) -> std::result::Result<(), WriteError> {
        if partitions.is_empty() {
            return Ok(());
        }
        let lock = self.write_lock(group);
        let _guard = lock.lock().await;
        let mut tx = self.meta.pool().begin().await?;
        self.check_claim(&mut tx, group).await?;
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
            let store = OffsetStore::open(MetaStore::connect(&url).await.expect("connect"), 1)
                .await
                .expect("open");
            assert_eq!(store.claim("g", 0).await.expect("claim"), Claim::Taken);
            assert_eq!(store.claim("g", 0).await.expect("claim"), Claim::Held);
            assert_eq!(store.claim("h", 0).await.expect("claim"), Claim::Taken);
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
        let store = OffsetStore::open(MetaStore::connect(&url).await.expect("connect"), 1)
            .await
            .expect("reopen");
        // A reopened node (a restart) claims again: the epoch rises.
        assert_eq!(store.claim("g", 0).await.expect("claim"), Claim::Taken);
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
        let store = OffsetStore::open(MetaStore::connect(&url).await.expect("connect"), 1)
            .await
            .expect("reopen");
        assert!(store.groups().is_empty());
    }

    #[tokio::test]
    async fn a_node_that_lost_a_group_neither_writes_it_nor_answers_from_its_cache_on_sqlite() {
        let dir = tempfile::tempdir().expect("tempdir");
        two_coordinators(&format!(
            "sqlite://{}",
            dir.path().join("meta.db").display()
        ))
        .await;
    }

    #[tokio::test]
    async fn a_node_that_lost_a_group_neither_writes_it_nor_answers_from_its_cache_on_postgres() {
        let Some(url) = inlet_test_support::service_env("INLET_TEST_POSTGRES_URL") else {
            return;
        };
        two_coordinators(&inlet_test_support::fresh_postgres_database(&url).await).await;
    }

    /// Node 1 coordinates `g` and commits 10; node 2 takes `g` over (node 1 paused past its
    /// lease) and commits 20. Node 1's late commit of 15 is fenced and changes nothing; when
    /// `g` comes back to node 1 it answers 20, not its cached 10; a group deleted through
    /// node 2 is gone for node 1 too.
    async fn two_coordinators(url: &str) {
        let meta = MetaStore::connect(url).await.expect("connect");
        let a = OffsetStore::open(meta.clone(), 1).await.expect("open a");
        let b = OffsetStore::open(meta.clone(), 2).await.expect("open b");
        let key = || ("t".to_string(), 0);
        assert_eq!(a.claim("g", 1).await.expect("claim"), Claim::Taken);
        a.commit("g", vec![(key(), offset(10, ""))])
            .await
            .expect("a commits");
        assert_eq!(b.claim("g", 2).await.expect("claim"), Claim::Taken);
        assert_eq!(
            b.get("g", "t", 0).map(|o| o.offset),
            Some(10),
            "b reads a's commit"
        );
        b.commit("g", vec![(key(), offset(20, ""))])
            .await
            .expect("b commits");
        match a.commit("g", vec![(key(), offset(15, ""))]).await {
            Err(WriteError::Fenced(f)) => assert_eq!(f.group, "g"),
            other => panic!("a's late commit must be fenced, got {other:?}"),
        }
        assert_eq!(b.get("g", "t", 0).map(|o| o.offset), Some(20));
        // The group comes back to a: a takes it again and reads what b committed.
        assert_eq!(a.claim("g", 3).await.expect("claim"), Claim::Taken);
        assert_eq!(a.get("g", "t", 0).map(|o| o.offset), Some(20));
        // b, still thinking it coordinates, is fenced on every write, and re-reads on a claim.
        assert!(matches!(
            b.commit("g", vec![(key(), offset(5, ""))]).await,
            Err(WriteError::Fenced(_))
        ));
        assert!(matches!(
            b.delete_group("g").await,
            Err(WriteError::Fenced(_))
        ));
        assert_eq!(a.get("g", "t", 0).map(|o| o.offset), Some(20));
        // A deletion through b (which takes the group back) is seen by a on its next claim.
        assert_eq!(b.claim("g", 4).await.expect("claim"), Claim::Taken);
        b.delete_group("g").await.expect("b deletes");
        assert_eq!(a.claim("g", 5).await.expect("claim"), Claim::Taken);
        assert_eq!(a.get("g", "t", 0), None);
        assert!(!a.has_group("g"));
        // Every take from the other coordinator is a move; the first claim is not.
        let moves: Vec<(u64, Option<u64>, Option<u64>)> = meta
            .moves(0)
            .await
            .expect("moves")
            .iter()
            .filter(|m| m.kind == "group" && m.name == "g")
            .map(|m| (m.at_ms, m.from_node, m.to_node))
            .collect();
        assert_eq!(
            moves,
            vec![
                (2, Some(1), Some(2)),
                (3, Some(2), Some(1)),
                (4, Some(1), Some(2)),
                (5, Some(2), Some(1)),
            ]
        );
    }
}
