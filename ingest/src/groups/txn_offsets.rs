//! Offsets committed inside a transaction (TxnOffsetCommit, KIP-98 and KIP-447): the group
//! coordinator keeps them pending, per producer id, until the transaction ends; a commit makes
//! them the group's committed offsets, an abort drops them.
//!
//! Invariants:
//! - Pending offsets are durable (`inlet_txn_offsets`) before TxnOffsetCommit answers, so a
//!   transaction whose commit was decided makes them the group's even after a kill -9: the
//!   transaction coordinator completes the decision again ([`GroupCoordinator::end_txn_offsets`]
//!   is idempotent: it applies and then deletes the rows).
//! - While a group has pending offsets for a partition, an OffsetFetch that asks for stable
//!   offsets (`require_stable`, what `read_committed` consumers send) answers
//!   `UNSTABLE_OFFSET_COMMIT` for it, so the consumer waits instead of starting from an offset
//!   about to change.

use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};
use kafka_protocol::ResponseError;
use sqlx::Row;

use super::offsets::CommittedOffset;
use super::GroupCoordinator;

impl GroupCoordinator {
    /// TxnOffsetCommit v0–4: stages the offsets for the producer's transaction.
    pub(crate) async fn txn_offset_commit(
        &self,
        req: TxnOffsetCommitRequest,
        version: i16,
    ) -> TxnOffsetCommitResponse {
        let group_id = req.group_id.to_string();
        let allowed = match self.own(&group_id).await {
            Ok(()) => self.check_txn_commit(&req, version),
            Err(e) => Err(e),
        };
        let now_ms = self.now_ms();
        let mut staged = Vec::new();
        let mut errors = Vec::new();
        for t in &req.topics {
            for p in &t.partitions {
                let metadata = p.committed_metadata.as_deref().unwrap_or_default();
                errors.push(super::offsets::accept(
                    allowed,
                    (t.name.as_str(), p.partition_index),
                    (p.committed_offset, p.committed_leader_epoch, metadata),
                    now_ms,
                    &mut staged,
                ));
            }
        }
        if let Err(e) = self.stage(&group_id, req.producer_id.0, &staged).await {
            tracing::warn!(group = group_id, error = %e, "staging transactional offsets failed");
            for error in errors.iter_mut() {
                error.get_or_insert(ResponseError::CoordinatorNotAvailable);
            }
        }
        let mut errors = errors.into_iter();
        let topics = req
            .topics
            .iter()
            .map(|t| {
                TxnOffsetCommitResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                TxnOffsetCommitResponsePartition::default()
                                    .with_partition_index(p.partition_index)
                                    .with_error_code(
                                        errors.next().flatten().map_or(0, |e| e.code()),
                                    )
                            })
                            .collect(),
                    )
            })
            .collect();
        TxnOffsetCommitResponse::default().with_topics(topics)
    }

    /// Kafka's checks of a TxnOffsetCommit: from v3 the member and generation are checked as
    /// an OffsetCommit's are (KIP-447), when the producer names them.
    fn check_txn_commit(
        &self,
        req: &TxnOffsetCommitRequest,
        version: i16,
    ) -> Result<(), ResponseError> {
        if req.group_id.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        if version < 3 || req.generation_id < 0 {
            return Ok(());
        }
        let mut groups = self.inner.groups.lock();
        match groups.get_mut(req.group_id.as_str()) {
            Some(group) => group.check_commit(
                req.member_id.as_str(),
                req.group_instance_id.as_deref(),
                req.generation_id,
                self.now_ms(),
            ),
            None => Err(ResponseError::IllegalGeneration),
        }
    }

    async fn stage(
        &self,
        group: &str,
        producer_id: i64,
        offsets: &[((String, i32), CommittedOffset)],
    ) -> Result<(), inlet_storage::Error> {
        if offsets.is_empty() {
            return Ok(());
        }
        let meta = self.inner.offsets.meta();
        let mut tx = meta.pool().begin().await?;
        for ((topic, partition), o) in offsets {
            sqlx::query(
                "INSERT INTO inlet_txn_offsets
                    (group_id, producer_id, topic, partition_index, committed_offset,
                     leader_epoch, metadata, commit_ms)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                 ON CONFLICT (group_id, producer_id, topic, partition_index) DO UPDATE SET
                    committed_offset = excluded.committed_offset,
                    leader_epoch = excluded.leader_epoch,
                    metadata = excluded.metadata,
                    commit_ms = excluded.commit_ms",
            )
            .bind(group)
            .bind(producer_id)
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
        Ok(())
    }

    /// Ends `producer_id`'s transaction in `group`: its pending offsets become the group's
    /// committed offsets (`commit`) or are dropped. Idempotent.
    pub(crate) async fn end_txn_offsets(
        &self,
        group: &str,
        producer_id: i64,
        commit: bool,
    ) -> Result<(), ResponseError> {
        self.own(group).await?;
        let meta = self.inner.offsets.meta();
        let failed = |e: inlet_storage::Error| {
            tracing::warn!(group, producer_id, error = %e, "ending transactional offsets failed");
            ResponseError::CoordinatorNotAvailable
        };
        if commit {
            let rows = sqlx::query(
                "SELECT topic, partition_index, committed_offset, leader_epoch, metadata, commit_ms
                 FROM inlet_txn_offsets WHERE group_id = $1 AND producer_id = $2",
            )
            .bind(group)
            .bind(producer_id)
            .fetch_all(meta.pool())
            .await
            .map_err(|e| failed(e.into()))?;
            let mut offsets = Vec::with_capacity(rows.len());
            for row in rows {
                let read = || -> Result<_, sqlx::Error> {
                    Ok((
                        (
                            row.try_get::<String, _>("topic")?,
                            row.try_get::<i64, _>("partition_index")? as i32,
                        ),
                        CommittedOffset {
                            offset: row.try_get("committed_offset")?,
                            leader_epoch: row.try_get::<i64, _>("leader_epoch")? as i32,
                            metadata: row.try_get("metadata")?,
                            commit_ms: row.try_get::<i64, _>("commit_ms")? as u64,
                        },
                    ))
                };
                offsets.push(read().map_err(|e| failed(e.into()))?);
            }
            if let Err(e) = self.inner.offsets.commit(group, offsets).await {
                return Err(self.write_failed(group, "transactional offset commit", &e));
            }
        }
        sqlx::query("DELETE FROM inlet_txn_offsets WHERE group_id = $1 AND producer_id = $2")
            .bind(group)
            .bind(producer_id)
            .execute(meta.pool())
            .await
            .map_err(|e| failed(e.into()))?;
        Ok(())
    }

    /// The groups with offsets pending in `producer_id`'s transaction.
    pub(crate) async fn groups_with_pending(
        &self,
        producer_id: i64,
    ) -> Result<Vec<String>, ResponseError> {
        let rows = sqlx::query(
            "SELECT DISTINCT group_id FROM inlet_txn_offsets WHERE producer_id = $1",
        )
        .bind(producer_id)
        .fetch_all(self.inner.offsets.meta().pool())
        .await
        .map_err(|e| {
            tracing::warn!(producer_id, error = %e, "reading pending transactional offsets failed");
            ResponseError::CoordinatorNotAvailable
        })?;
        rows.iter()
            .map(|row| row.try_get::<String, _>("group_id"))
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(|_| ResponseError::CoordinatorNotAvailable)
    }

    /// The partitions of `group` with offsets pending in an open transaction.
    pub(crate) async fn pending_txn_offsets(
        &self,
        group: &str,
    ) -> Result<Vec<(String, i32)>, ResponseError> {
        let rows = sqlx::query(
            "SELECT DISTINCT topic, partition_index FROM inlet_txn_offsets WHERE group_id = $1",
        )
        .bind(group)
        .fetch_all(self.inner.offsets.meta().pool())
        .await
        .map_err(|e| {
            tracing::warn!(group, error = %e, "reading pending transactional offsets failed");
            ResponseError::CoordinatorNotAvailable
        })?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get::<String, _>("topic")?,
                    row.try_get::<i64, _>("partition_index")? as i32,
                ))
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(|_| ResponseError::CoordinatorNotAvailable)
    }
}
