//! The transaction coordinator's state: one row per transactional id in the metadata store
//! (`inlet_transactions`), cached by the node that coordinates the id.
//!
//! Invariants:
//! - Every change of a transactional id's state is durable before the request that made it
//!   is answered, and is a compare-and-swap on the row's `version`: a node whose cached row is
//!   stale (another node coordinated the id meanwhile, in a cluster) writes nothing, drops its
//!   cache and answers `NOT_COORDINATOR`, and the client finds the coordinator again.
//! - One transactional id's requests are handled one at a time ([`Transactions::lock`]), so
//!   the state machine sees each transition whole.
//! - Memory: the cache keeps ids with a transaction open or deciding; the sweep drops the
//!   others ([`Transactions::evict_idle`]), which are read again when next asked for. The
//!   rows themselves go `transactional.id.expiration.ms` after their last change.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use inlet_storage::MetaStore;
use sqlx::Row;

use crate::error::{KafkaError, Result};

const MIGRATIONS: &[&str] = &["CREATE TABLE inlet_transactions (
        transactional_id VARCHAR(1024) PRIMARY KEY,
        producer_id BIGINT NOT NULL,
        producer_epoch BIGINT NOT NULL,
        state VARCHAR(32) NOT NULL,
        timeout_ms BIGINT NOT NULL,
        partitions TEXT NOT NULL,
        groups_json TEXT NOT NULL,
        started_ms BIGINT NOT NULL,
        updated_ms BIGINT NOT NULL,
        version BIGINT NOT NULL)"];

/// Kafka's transaction states (their names are what DescribeTransactions and
/// ListTransactions report).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
}

impl TxnState {
    pub(crate) fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
        }
    }

    fn parse(s: &str) -> Option<TxnState> {
        [
            TxnState::Empty,
            TxnState::Ongoing,
            TxnState::PrepareCommit,
            TxnState::PrepareAbort,
            TxnState::CompleteCommit,
            TxnState::CompleteAbort,
        ]
        .into_iter()
        .find(|t| t.name() == s)
    }

    /// A decision was made and its markers may not all be written yet.
    pub(crate) fn is_prepared(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }
}

/// One transactional id's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TxnMeta {
    pub(crate) producer_id: i64,
    pub(crate) epoch: i16,
    pub(crate) state: TxnState,
    pub(crate) timeout_ms: i64,
    /// The partitions the open (or deciding) transaction wrote to, as (topic, partition).
    pub(crate) partitions: BTreeSet<(String, i32)>,
    /// The groups whose offsets it commits.
    pub(crate) groups: BTreeSet<String>,
    /// When the open transaction started (broker clock, epoch ms).
    pub(crate) started_ms: u64,
    pub(crate) updated_ms: u64,
    /// The row's version (0: no row yet).
    version: i64,
}

impl TxnMeta {
    pub(crate) fn new(producer_id: i64, epoch: i16, timeout_ms: i64, now_ms: u64) -> Self {
        TxnMeta {
            producer_id,
            epoch,
            state: TxnState::Empty,
            timeout_ms,
            partitions: BTreeSet::new(),
            groups: BTreeSet::new(),
            started_ms: now_ms,
            updated_ms: now_ms,
            version: 0,
        }
    }
}

/// A transactional id's slot: its cached state, loaded on first use.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    loaded: bool,
    pub(crate) meta: Option<TxnMeta>,
}

/// The coordinator's rows and their cache.
#[derive(Debug)]
pub(crate) struct Transactions {
    meta: MetaStore,
    slots: parking_lot::Mutex<HashMap<String, Arc<tokio::sync::Mutex<Slot>>>>,
}

fn store_error(e: impl Into<inlet_storage::Error>) -> KafkaError {
    let e: inlet_storage::Error = e.into();
    tracing::warn!(error = %e, "the transaction state store failed");
    KafkaError::new(
        kafka_protocol::ResponseError::CoordinatorNotAvailable,
        format!("the transaction state could not be read or written: {e}"),
    )
}

impl Transactions {
    pub(crate) async fn open(meta: MetaStore) -> Result<Self> {
        meta.migrate("ingest.transactions", MIGRATIONS).await?;
        Ok(Transactions {
            meta,
            slots: parking_lot::Mutex::new(HashMap::new()),
        })
    }

    /// Locks `id`'s slot for one request, loading its row on first use.
    pub(crate) async fn lock(&self, id: &str) -> Result<tokio::sync::OwnedMutexGuard<Slot>> {
        let slot = self.slots.lock().entry(id.to_string()).or_default().clone();
        let mut guard = slot.lock_owned().await;
        if !guard.loaded {
            guard.meta = self.read(id).await?;
            guard.loaded = true;
        }
        Ok(guard)
    }

    /// Drops what this node cached of `id` (another node coordinates it now).
    pub(crate) fn forget(&self, id: &str) {
        self.slots.lock().remove(id);
    }

    /// Drops the cached rows of ids with no transaction open or deciding (and no request in
    /// flight): the cache holds what the sweep and the requests of open transactions need,
    /// not every id ever seen. A dropped id is read again at its next request.
    pub(crate) fn evict_idle(&self) -> usize {
        let mut slots = self.slots.lock();
        let before = slots.len();
        slots.retain(|_, slot| match slot.try_lock() {
            Ok(s) => s
                .meta
                .as_ref()
                .is_some_and(|m| m.state == TxnState::Ongoing || m.state.is_prepared()),
            Err(_) => true,
        });
        before - slots.len()
    }

    /// The ids this node has cached.
    pub(crate) fn cached(&self) -> Vec<String> {
        self.slots.lock().keys().cloned().collect()
    }

    /// `id`'s row as stored (no cache: another node may coordinate it).
    pub(crate) async fn read(&self, id: &str) -> Result<Option<TxnMeta>> {
        let row = sqlx::query(
            "SELECT producer_id, producer_epoch, state, timeout_ms, partitions, groups_json,
                    started_ms, updated_ms, version
             FROM inlet_transactions WHERE transactional_id = $1",
        )
        .bind(id)
        .fetch_optional(self.meta.pool())
        .await
        .map_err(store_error)?;
        row.map(|r| decode(&r)).transpose()
    }

    /// Writes `next` as `id`'s state if the row is still the one `slot` holds; on a lost race
    /// the slot is reloaded on next use and the caller answers `NOT_COORDINATOR`.
    pub(crate) async fn save(&self, id: &str, slot: &mut Slot, mut next: TxnMeta) -> Result<()> {
        let expected = slot.meta.as_ref().map_or(0, |m| m.version);
        next.version = expected + 1;
        let partitions: Vec<String> = next
            .partitions
            .iter()
            .map(|(t, p)| format!("{t}:{p}"))
            .collect();
        let groups = serde_json::to_string(&next.groups).map_err(|e| {
            KafkaError::new(
                kafka_protocol::ResponseError::UnknownServerError,
                format!("encoding a transaction's groups: {e}"),
            )
        })?;
        let done = if expected == 0 {
            sqlx::query(
                "INSERT INTO inlet_transactions
                    (transactional_id, producer_id, producer_epoch, state, timeout_ms, partitions,
                     groups_json, started_ms, updated_ms, version)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                 ON CONFLICT (transactional_id) DO NOTHING",
            )
        } else {
            sqlx::query(
                "UPDATE inlet_transactions SET producer_id = $2, producer_epoch = $3, state = $4,
                    timeout_ms = $5, partitions = $6, groups_json = $7, started_ms = $8,
                    updated_ms = $9, version = $10
                 WHERE transactional_id = $1 AND version = $11",
            )
        }
        .bind(id)
        .bind(next.producer_id)
        .bind(i64::from(next.epoch))
        .bind(next.state.name())
        .bind(next.timeout_ms)
        .bind(partitions.join(","))
        .bind(groups)
        .bind(next.started_ms as i64)
        .bind(next.updated_ms as i64)
        .bind(next.version)
        .bind(expected)
        .execute(self.meta.pool())
        .await
        .map_err(store_error)?;
        if done.rows_affected() != 1 {
            slot.loaded = false;
            slot.meta = None;
            return Err(KafkaError::new(
                kafka_protocol::ResponseError::NotCoordinator,
                format!(
                    "transactional id {id:?} changed on another node meanwhile: find its coordinator again"
                ),
            ));
        }
        slot.meta = Some(next);
        Ok(())
    }

    /// Deletes `id`'s row if it is still the one `slot` holds (an expired id).
    pub(crate) async fn delete(&self, id: &str, slot: &mut Slot) -> Result<()> {
        let Some(meta) = &slot.meta else {
            return Ok(());
        };
        sqlx::query("DELETE FROM inlet_transactions WHERE transactional_id = $1 AND version = $2")
            .bind(id)
            .bind(meta.version)
            .execute(self.meta.pool())
            .await
            .map_err(store_error)?;
        slot.meta = None;
        slot.loaded = false;
        Ok(())
    }

    /// Every transactional id with its state (ListTransactions, and the coordinator's sweep).
    pub(crate) async fn all(&self) -> Result<Vec<(String, TxnMeta)>> {
        let rows = sqlx::query(
            "SELECT transactional_id, producer_id, producer_epoch, state, timeout_ms, partitions,
                    groups_json, started_ms, updated_ms, version
             FROM inlet_transactions ORDER BY transactional_id",
        )
        .fetch_all(self.meta.pool())
        .await
        .map_err(store_error)?;
        rows.iter()
            .map(|r| {
                let id: String = r.try_get("transactional_id").map_err(store_error)?;
                Ok((id, decode(r)?))
            })
            .collect()
    }
}

fn decode(r: &sqlx::any::AnyRow) -> Result<TxnMeta> {
    let bad = |what: String| {
        KafkaError::new(
            kafka_protocol::ResponseError::UnknownServerError,
            format!("a stored transaction state does not read: {what}"),
        )
    };
    let state: String = r.try_get("state").map_err(store_error)?;
    let partitions: String = r.try_get("partitions").map_err(store_error)?;
    let groups: String = r.try_get("groups_json").map_err(store_error)?;
    let partitions = partitions
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| {
            let (topic, p) = s
                .rsplit_once(':')
                .ok_or_else(|| bad(format!("partition {s:?}")))?;
            let p = p.parse().map_err(|_| bad(format!("partition {s:?}")))?;
            Ok((topic.to_string(), p))
        })
        .collect::<Result<BTreeSet<_>>>()?;
    Ok(TxnMeta {
        producer_id: r.try_get("producer_id").map_err(store_error)?,
        epoch: r.try_get::<i64, _>("producer_epoch").map_err(store_error)? as i16,
        state: TxnState::parse(&state).ok_or_else(|| bad(format!("state {state:?}")))?,
        timeout_ms: r.try_get("timeout_ms").map_err(store_error)?,
        partitions,
        groups: serde_json::from_str(&groups).map_err(|e| bad(format!("groups: {e}")))?,
        started_ms: r.try_get::<i64, _>("started_ms").map_err(store_error)? as u64,
        updated_ms: r.try_get::<i64, _>("updated_ms").map_err(store_error)? as u64,
        version: r.try_get("version").map_err(store_error)?,
    })
}
