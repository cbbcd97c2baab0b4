//! Coordinator epochs: at most one live coordinator per table, fenced through the metadata
//! store (SQLite on one node, PostgreSQL in a cluster).
//!
//! A table's row in `inlet_table_leases` holds its current epoch, the holder (a node id) and
//! when the lease expires. A coordinator starts by taking the lease ([`Leases::acquire`]),
//! which always bumps the epoch; it renews the lease before every commit
//! ([`Leases::renew`]), and every round it commits carries its epoch
//! ([`crate::commit::EPOCH`]).
//!
//! Why a stale coordinator cannot do harm, in three layers:
//! - **The lease.** Another holder can take a table only once its lease has expired by the
//!   metadata store's answers to the taker, or, in a cluster, once the holder has left the
//!   membership ([`Leases::with_liveness`]); the same holder (a coordinator restarted on one
//!   node, or the next one after a reconfiguration) takes it at once. Each take bumps the
//!   epoch with a compare-and-swap on the row, so two takers never get one epoch. A renewal
//!   succeeds only while the epoch is still the renewer's, so a coordinator that was paused
//!   past its lease and then taken over finds out before its next commit, and stops.
//! - **The table.** A round is refused when the table's newest Inlet progress on `main` carries
//!   a higher epoch ([`crate::commit::CommitError::Fenced`]). The check and the commit are
//!   atomic through the commit's `assert-ref-snapshot-id`: once a newer coordinator has
//!   committed, no older one ever commits again, whatever its clock or its pauses.
//! - **Continuity.** Between a takeover and the new coordinator's first commit, a stale
//!   round that passed its renewal may still land: it starts where the table's progress ends
//!   (or it is refused, [`crate::commit::CommitError::NotContinuous`]), so it is a correct
//!   round, and the new coordinator's first round is then refused and converted again from
//!   it. No record is lost or committed twice.
//!
//! Invariants:
//! - Epochs of a table only grow, and each is handed out once.
//! - A coordinator commits only rounds of its own epoch, and only after a renewal that
//!   found the epoch still its own.

use std::sync::Arc;
use std::time::Duration;

use inlet_common::Clock;
use inlet_storage::MetaStore;
use sqlx::Row;

/// The lease table, versioned with [`MetaStore::migrate`].
const MIGRATIONS: &[&str] = &["CREATE TABLE inlet_table_leases (
        table_name VARCHAR(512) PRIMARY KEY,
        epoch BIGINT NOT NULL,
        holder VARCHAR(255) NOT NULL,
        expires_ms BIGINT NOT NULL)"];

/// How long a lease lasts without a renewal, unless configured otherwise.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// A lease error: the metadata store failed, or the lease row changed under the call.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("coordinator lease: the metadata store: {0}")]
    Meta(#[from] sqlx::Error),
    #[error("coordinator lease: {0}")]
    Storage(#[from] inlet_storage::Error),
    /// The row was deleted between this call's read and its write.
    #[error("coordinator lease: the lease row of {table} vanished")]
    Vanished { table: String },
}

impl LeaseError {
    /// Which kind of failure this is: the store's own, or retryable for a row that vanished
    /// (the next attempt finds the table free).
    pub fn kind(&self) -> inlet_common::ErrorKind {
        match self {
            LeaseError::Meta(e) => inlet_storage::meta_error_kind(e),
            LeaseError::Storage(e) => e.kind(),
            LeaseError::Vanished { .. } => inlet_common::ErrorKind::Retryable,
        }
    }
}

/// A lease held: the table and its epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub table: String,
    pub epoch: i64,
}

/// Whether a lease holder (a node id) is still a live member of the cluster.
pub type Liveness = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// The node's handle on the lease table.
#[derive(Clone)]
pub struct Leases {
    meta: MetaStore,
    holder: String,
    ttl: Duration,
    clock: Arc<dyn Clock>,
    /// In a cluster: a lease whose holder left the cluster is taken at once, not after its
    /// ttl ([`Leases::with_liveness`]).
    liveness: Option<Liveness>,
}

impl std::fmt::Debug for Leases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leases")
            .field("holder", &self.holder)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

/// Who holds a table's lease, when it is not the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldBy {
    pub holder: String,
    pub epoch: i64,
    pub expires_ms: i64,
}

impl Leases {
    /// The lease table in `meta` (created the first time), for leases held by `holder` (the
    /// node's id) that last `ttl` past each renewal, by `clock`.
    pub async fn open(
        meta: MetaStore,
        holder: impl Into<String>,
        ttl: Duration,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, LeaseError> {
        meta.migrate("table-coordinator.leases", MIGRATIONS).await?;
        Ok(Leases {
            meta,
            holder: holder.into(),
            ttl,
            clock,
            liveness: None,
        })
    }

    /// Lets `acquire` take a lease whose holder is no longer a live member of the cluster
    /// before it expires, so a table's coordinator moves with its partitions when a node dies.
    /// Safety does not rest on the lease (see the module doc: the table refuses a stale
    /// epoch's round), only how soon the next coordinator may start.
    pub fn with_liveness(mut self, liveness: Liveness) -> Self {
        self.liveness = Some(liveness);
        self
    }

    /// How long a lease lasts past a renewal.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn expires(&self) -> i64 {
        self.clock.now_ms() as i64 + self.ttl.as_millis() as i64
    }

    /// Takes `table`'s lease with a new epoch, above `floor` (the highest epoch the table's
    /// snapshots record, so a metadata store that was replaced never hands out an epoch the
    /// table would refuse): when nobody holds it, when this holder does, or when the holder's
    /// lease has expired. Err(HeldBy) otherwise.
    pub async fn acquire(
        &self,
        table: &str,
        floor: i64,
    ) -> Result<Result<Lease, HeldBy>, LeaseError> {
        let pool = self.meta.pool();
        // Two tries: a first take races another node's insert only once.
        for _ in 0..2 {
            let row = sqlx::query(
                "SELECT epoch, holder, expires_ms FROM inlet_table_leases WHERE table_name = $1",
            )
            .bind(table)
            .fetch_optional(pool)
            .await?;
            let Some(row) = row else {
                let epoch = floor.max(0) + 1;
                let inserted = sqlx::query(
                    "INSERT INTO inlet_table_leases (table_name, epoch, holder, expires_ms)
                     VALUES ($1, $2, $3, $4) ON CONFLICT (table_name) DO NOTHING",
                )
                .bind(table)
                .bind(epoch)
                .bind(&self.holder)
                .bind(self.expires())
                .execute(pool)
                .await?;
                if inserted.rows_affected() == 1 {
                    return Ok(Ok(Lease {
                        table: table.to_string(),
                        epoch,
                    }));
                }
                continue;
            };
            let held = HeldBy {
                epoch: row.try_get("epoch")?,
                holder: row.try_get("holder")?,
                expires_ms: row.try_get("expires_ms")?,
            };
            let holder_live = self.liveness.as_ref().is_none_or(|live| live(&held.holder));
            if held.holder != self.holder
                && held.expires_ms > self.clock.now_ms() as i64
                && holder_live
            {
                return Ok(Err(held));
            }
            if held.holder != self.holder && !holder_live {
                tracing::info!(table, holder = %held.holder, "taking the coordinator lease of a node that left the cluster");
            }
            let epoch = held.epoch.max(floor) + 1;
            let taken = sqlx::query(
                "UPDATE inlet_table_leases SET epoch = $1, holder = $2, expires_ms = $3
                 WHERE table_name = $4 AND epoch = $5",
            )
            .bind(epoch)
            .bind(&self.holder)
            .bind(self.expires())
            .bind(table)
            .bind(held.epoch)
            .execute(pool)
            .await?;
            if taken.rows_affected() == 1 {
                return Ok(Ok(Lease {
                    table: table.to_string(),
                    epoch,
                }));
            }
        }
        // Someone else took it between our read and our write.
        match self.held_by(table).await? {
            Some(held) => Ok(Err(held)),
            None => Err(LeaseError::Vanished {
                table: table.to_string(),
            }),
        }
    }

    /// Extends `lease` by the ttl from now; false when its epoch is no longer the table's (a
    /// newer coordinator took over), and the coordinator must stop committing.
    pub async fn renew(&self, lease: &Lease) -> Result<bool, LeaseError> {
        let renewed = sqlx::query(
            "UPDATE inlet_table_leases SET expires_ms = $1
             WHERE table_name = $2 AND epoch = $3 AND holder = $4",
        )
        .bind(self.expires())
        .bind(&lease.table)
        .bind(lease.epoch)
        .bind(&self.holder)
        .execute(self.meta.pool())
        .await?;
        Ok(renewed.rows_affected() == 1)
    }

    /// Gives `lease` up (a coordinator that stops): another holder may take it at once.
    pub async fn release(&self, lease: &Lease) -> Result<(), LeaseError> {
        sqlx::query(
            "UPDATE inlet_table_leases SET expires_ms = 0
             WHERE table_name = $1 AND epoch = $2 AND holder = $3",
        )
        .bind(&lease.table)
        .bind(lease.epoch)
        .bind(&self.holder)
        .execute(self.meta.pool())
        .await?;
        Ok(())
    }

    /// Who holds `table`'s lease now (expired or not); None when nobody ever did.
    pub async fn held_by(&self, table: &str) -> Result<Option<HeldBy>, LeaseError> {
        let row = sqlx::query(
            "SELECT epoch, holder, expires_ms FROM inlet_table_leases WHERE table_name = $1",
        )
        .bind(table)
        .fetch_optional(self.meta.pool())
        .await?;
        row.map(|row| {
            Ok(HeldBy {
                epoch: row.try_get("epoch")?,
                holder: row.try_get("holder")?,
                expires_ms: row.try_get("expires_ms")?,
            })
        })
        .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use inlet_common::ManualClock;

    #[test]
    fn lease_errors_keep_their_kind() {
        use inlet_common::ErrorKind;
        assert_eq!(
            LeaseError::from(sqlx::Error::PoolTimedOut).kind(),
            ErrorKind::Retryable
        );
        assert_eq!(
            LeaseError::from(sqlx::Error::RowNotFound).kind(),
            ErrorKind::BadInput
        );
        let vanished = LeaseError::Vanished { table: "t".into() };
        assert_eq!(vanished.kind(), ErrorKind::Retryable);
        assert_eq!(
            vanished.to_string(),
            "coordinator lease: the lease row of t vanished"
        );
    }

    async fn meta(dir: &tempfile::TempDir) -> MetaStore {
        MetaStore::connect(&format!(
            "sqlite://{}",
            dir.path().join("meta.db").display()
        ))
        .await
        .expect("meta")
    }

    #[tokio::test]
    async fn epochs_grow_and_a_live_lease_is_not_taken() {
        let dir = tempfile::tempdir().expect("tempdir");
        epochs(meta(&dir).await).await;
    }

    /// The same SQL on PostgreSQL, when `source scripts/test-env.sh` provides one.
    #[tokio::test]
    async fn epochs_grow_and_a_live_lease_is_not_taken_on_postgres() {
        let Some(url) = inlet_test_support::service_env("INLET_TEST_POSTGRES_URL") else {
            return;
        };
        let url = inlet_test_support::fresh_postgres_database(&url).await;
        epochs(MetaStore::connect(&url).await.expect("meta")).await;
    }

    async fn epochs(meta: MetaStore) {
        let clock = Arc::new(ManualClock::new(1_000));
        let ttl = Duration::from_secs(10);
        let a = Leases::open(meta.clone(), "node-a", ttl, clock.clone())
            .await
            .expect("a");
        let b = Leases::open(meta, "node-b", ttl, clock.clone())
            .await
            .expect("b");

        let first = a.acquire("ns.t", 0).await.expect("acquire").expect("free");
        assert_eq!(first.epoch, 1);
        // The same holder takes it again at once (a restarted coordinator), fencing the first.
        let second = a.acquire("ns.t", 0).await.expect("acquire").expect("own");
        assert_eq!(second.epoch, 2);
        assert!(
            !a.renew(&first).await.expect("renew"),
            "the first is fenced"
        );
        assert!(a.renew(&second).await.expect("renew"));

        // Another holder waits for the lease to expire.
        let held = b
            .acquire("ns.t", 0)
            .await
            .expect("acquire")
            .expect_err("held");
        assert_eq!((held.holder.as_str(), held.epoch), ("node-a", 2));
        clock.advance(10_001);
        let taken = b
            .acquire("ns.t", 0)
            .await
            .expect("acquire")
            .expect("expired");
        assert_eq!(taken.epoch, 3);
        // A paused holder that comes back past its lease cannot renew, or take it back.
        assert!(!a.renew(&second).await.expect("renew"));
        assert!(a.acquire("ns.t", 0).await.expect("acquire").is_err());

        // A released lease is free at once.
        b.release(&taken).await.expect("release");
        assert_eq!(
            a.acquire("ns.t", 0)
                .await
                .expect("acquire")
                .expect("free")
                .epoch,
            4
        );
        // In a cluster, a live holder's lease waits for its expiry; one whose holder left the
        // membership is taken at once.
        let live: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
        let c = Leases::open(b.meta.clone(), "node-c", ttl, clock.clone())
            .await
            .expect("c")
            .with_liveness({
                let live = live.clone();
                Arc::new(move |holder: &str| live.lock().expect("live").iter().any(|h| h == holder))
            });
        live.lock().expect("live").push("node-a".into());
        let held = c
            .acquire("ns.t", 0)
            .await
            .expect("acquire")
            .expect_err("a is live");
        assert_eq!(held.epoch, 4);
        live.lock().expect("live").clear();
        assert_eq!(
            c.acquire("ns.t", 0)
                .await
                .expect("acquire")
                .expect("a left")
                .epoch,
            5
        );
        // Tables are independent.
        assert_eq!(
            b.acquire("ns.u", 0)
                .await
                .expect("acquire")
                .expect("free")
                .epoch,
            1
        );
        // A table whose snapshots record a higher epoch (a metadata store that was replaced)
        // gets an epoch above it, new row or not.
        assert_eq!(
            b.acquire("ns.v", 41)
                .await
                .expect("acquire")
                .expect("free")
                .epoch,
            42
        );
        assert_eq!(
            b.acquire("ns.u", 9)
                .await
                .expect("acquire")
                .expect("own")
                .epoch,
            10
        );
    }
}
