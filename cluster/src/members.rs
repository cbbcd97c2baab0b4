//! Membership: the nodes that share a metadata store, each holding a lease on its row of
//! `inlet_nodes` (its id, its data directory's identity, its advertised Kafka and HTTP
//! addresses, when it started and when its lease ends).
//!
//! Nodes whose WAL is in the object store (`[storage] wal = "object"`, the default with a
//! PostgreSQL metadata store) form a cluster: they share the streams, each owning some
//! (`crate::node`). A node refuses to start, with a message that says why, while another
//! node's lease is live on its metadata store and:
//! - it has the same `--node-id` from another data directory: "node id N is live";
//! - either of the two keeps its WAL on local disk: what such a node acknowledged lives on its
//!   disk alone until uploaded, so its streams cannot move to another node without loss.
//!
//! A node restarting on its own data directory (after a crash, or a kill -9) takes its row at
//! once, whatever the lease says: the row carries the identity kept in
//! `<data_dir>/node-identity`, written at the node's first start. A clean stop deletes the
//! row, so the next node may start at once; a crashed node's row blocks others until its
//! lease ends (`[cluster] lease_ms`, 30 s).
//!
//! Lease times (`started_ms`, `expires_ms`) are the metadata store's clock, never a node's:
//! a lease is written as the store's now plus the ttl, and read as live against the store's
//! now ([`Membership::members`]), so a node whose clock is off by any amount neither keeps a
//! dead node alive nor declares a live one dead (docs/architecture.md, "Cluster").
//!
//! Invariants:
//! - At most one row is live at a time, and only its identity renews it: the check and the
//!   write of a join are one transaction, under PostgreSQL's advisory lock or SQLite's write
//!   lock, so two nodes starting together cannot both pass.
//! - A node whose renewal finds its row gone or taken (it was paused past its lease and
//!   another node joined) stops: it reports [`Membership::lost`].

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use inlet_common::Clock;
use inlet_storage::{Backend, MetaStore, WalKind};
use serde::Serialize;
use sqlx::Row;
use tokio_util::sync::CancellationToken;

/// The membership table, versioned with [`MetaStore::migrate`].
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE inlet_nodes (
        node_id BIGINT PRIMARY KEY,
        identity VARCHAR(64) NOT NULL,
        kafka_addr VARCHAR(255) NOT NULL,
        http_addr VARCHAR(255) NOT NULL,
        started_ms BIGINT NOT NULL,
        expires_ms BIGINT NOT NULL)",
    // Where the node's WAL is: `local` or `object` (only `object` nodes share a store).
    "ALTER TABLE inlet_nodes ADD COLUMN wal VARCHAR(16) NOT NULL DEFAULT 'local'",
    // Every Kafka listener's advertised address, `NAME://HOST:PORT,…` (Kafka's
    // `advertised.listeners`); empty: `kafka_addr` serves every listener.
    "ALTER TABLE inlet_nodes ADD COLUMN listeners VARCHAR(2048) NOT NULL DEFAULT ''",
];

/// The metadata store's clock, epoch milliseconds, as SQL: the one clock every node's lease
/// is written and read against.
fn store_now(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
        Backend::Sqlite => "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
    }
}

/// The metadata store's clock now, epoch milliseconds.
async fn read_store_now<'e>(
    meta: &MetaStore,
    conn: impl sqlx::Executor<'e, Database = sqlx::Any>,
) -> anyhow::Result<i64> {
    let row = sqlx::query(&format!("SELECT {} AS now_ms", store_now(meta.backend())))
        .fetch_one(conn)
        .await?;
    Ok(row.try_get::<i64, _>("now_ms")?)
}

/// The PostgreSQL advisory lock that joins hold (one per metadata store).
const JOIN_LOCK: i64 = 7_243_508;

/// The file in the data directory that names it: a node restarted on it is the same node.
const IDENTITY_FILE: &str = "node-identity";

/// One node's row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Member {
    pub node_id: u64,
    pub kafka_addr: String,
    pub http_addr: String,
    pub started_ms: i64,
    pub expires_ms: i64,
    /// Where the node's WAL is: `local` or `object`.
    pub wal: String,
    /// Its Kafka listeners' advertised addresses, `NAME://HOST:PORT,…` (empty: `kafka_addr`
    /// serves every listener).
    pub listeners: String,
    #[serde(skip)]
    identity: String,
}

/// This node's membership: its row, kept alive by [`Membership::run`].
#[derive(Debug, Clone)]
pub struct Membership {
    meta: MetaStore,
    node_id: u64,
    identity: String,
    ttl: Duration,
    clock: Arc<dyn Clock>,
    lost: CancellationToken,
    /// Whether this node's lease has lapsed by its own clock ([`Membership::lapsed`]).
    lapsed: Arc<tokio::sync::watch::Sender<bool>>,
}

/// `<data_dir>/node-identity`, created with a new random identity on the first start.
fn identity(data_dir: &Path) -> anyhow::Result<String> {
    let path = data_dir.join(IDENTITY_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) if !text.trim().is_empty() => return Ok(text.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    }
    #[allow(clippy::disallowed_methods)] // an identity: unique is all it must be
    let fresh = uuid::Uuid::new_v4().simple().to_string();
    let staging = data_dir.join(format!("{IDENTITY_FILE}.tmp"));
    std::fs::write(&staging, &fresh)
        .and_then(|()| std::fs::File::open(&staging)?.sync_all())
        .and_then(|()| std::fs::rename(&staging, &path))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(fresh)
}

impl Membership {
    /// Joins the metadata store's membership as `node_id`, or refuses with the reason: another
    /// node's lease is live (see the module doc). `addrs` are its Kafka address (its first
    /// listener's, which nodes call each other on), its HTTP address (what `inlet cluster
    /// status` shows) and every Kafka listener's (`NAME://HOST:PORT,…`).
    pub async fn join(
        meta: MetaStore,
        data_dir: &Path,
        node_id: u64,
        addrs: (String, String, String),
        wal: WalKind,
        ttl: Duration,
        clock: Arc<dyn Clock>,
    ) -> anyhow::Result<Membership> {
        let wal_name = match wal {
            WalKind::Local => "local",
            WalKind::Object => "object",
        };
        let identity = identity(data_dir)?;
        meta.migrate("node.members", MIGRATIONS)
            .await
            .context("creating the membership table")?;
        let id = i64::try_from(node_id).context("--node-id must fit in 63 bits")?;
        let mut conn = meta
            .pool()
            .acquire()
            .await
            .context("connecting to the metadata store")?;
        // The check and the write as one transaction that no other join can interleave with.
        let begin = match meta.backend() {
            Backend::Postgres => "BEGIN",
            Backend::Sqlite => "BEGIN IMMEDIATE",
        };
        sqlx::query(begin).execute(&mut *conn).await?;
        let outcome: anyhow::Result<()> = async {
            if meta.backend() == Backend::Postgres {
                sqlx::query("SELECT pg_advisory_xact_lock($1)")
                    .bind(JOIN_LOCK)
                    .execute(&mut *conn)
                    .await?;
            }
            let now = read_store_now(&meta, &mut *conn).await?;
            let rows = sqlx::query(
                "SELECT node_id, identity, kafka_addr, http_addr, started_ms, expires_ms, wal, listeners
                 FROM inlet_nodes",
            )
            .fetch_all(&mut *conn)
            .await?;
            for row in rows {
                let other = member(&row)?;
                let live = other.expires_ms > now;
                let mine = other.identity == identity;
                if !live || mine {
                    continue;
                }
                let left = Duration::from_millis((other.expires_ms - now) as u64);
                if other.node_id == node_id {
                    bail!(
                        "node id {node_id} is live on this metadata store (a node at {} from \
                         another data directory; its lease ends in {left:?}): start this node with \
                         another --node-id, or stop that one first",
                        other.kafka_addr
                    );
                }
                if wal == WalKind::Local {
                    bail!(
                        "another node is live on this metadata store (node id {} at {}; its \
                         lease ends in {left:?}), and this node's WAL is on local disk: in a \
                         cluster a node's acknowledged data must outlive the node, so every \
                         node needs `[storage] wal = \"object\"` (the default with a PostgreSQL \
                         metadata store; docs/architecture.md, \"Cluster\")",
                        other.node_id,
                        other.kafka_addr
                    );
                }
                if other.wal != "object" {
                    bail!(
                        "node id {} at {} is live on this metadata store with its WAL on local \
                         disk (its lease ends in {left:?}): it cannot share its streams. Stop it \
                         and start it with `[storage] wal = \"object\"` first",
                        other.node_id,
                        other.kafka_addr
                    );
                }
            }
            // This node's old rows, and rows whose lease ended.
            sqlx::query(
                "DELETE FROM inlet_nodes WHERE node_id = $1 OR identity = $2 OR expires_ms <= $3",
            )
            .bind(id)
            .bind(&identity)
            .bind(now)
            .execute(&mut *conn)
            .await?;
            sqlx::query(
                "INSERT INTO inlet_nodes
                 (node_id, identity, kafka_addr, http_addr, started_ms, expires_ms, wal, listeners)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(id)
            .bind(&identity)
            .bind(&addrs.0)
            .bind(&addrs.1)
            .bind(now)
            .bind(now + ttl.as_millis() as i64)
            .bind(wal_name)
            .bind(&addrs.2)
            .execute(&mut *conn)
            .await?;
            Ok(())
        }
        .await;
        let end = if outcome.is_ok() {
            "COMMIT"
        } else {
            "ROLLBACK"
        };
        sqlx::query(end).execute(&mut *conn).await?;
        outcome?;
        Ok(Membership {
            meta,
            node_id,
            identity,
            ttl,
            clock,
            lost: CancellationToken::new(),
            lapsed: Arc::new(tokio::sync::watch::Sender::new(false)),
        })
    }

    /// Cancelled when the node lost its row (see the module doc): it must stop.
    pub fn lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// True while this node's lease has lapsed by its own clock: no renewal has succeeded
    /// within a ttl of its start (the other nodes may take its streams and groups now); false
    /// again from the next renewal that succeeds.
    pub fn lapsed(&self) -> tokio::sync::watch::Receiver<bool> {
        self.lapsed.subscribe()
    }

    fn set_lapsed(&self, lapsed: bool) {
        // Receivers wake on a change only (a pass is given up when the lease changes).
        let changed = self.lapsed.send_if_modified(|was| {
            let changed = *was != lapsed;
            *was = lapsed;
            changed
        });
        if !changed {
            return;
        }
        if lapsed {
            tracing::error!(
                node_id = self.node_id,
                "this node could not renew its lease within it (is the metadata store \
                 reachable?): it stops leading partitions and coordinating groups until it \
                 renews"
            );
        } else {
            tracing::warn!(node_id = self.node_id, "this node renewed its lease again");
        }
    }

    /// Extends this node's lease by the ttl from now; false when its row is gone or another
    /// identity's.
    pub async fn renew(&self) -> anyhow::Result<bool> {
        let renewed = sqlx::query(&format!(
            "UPDATE inlet_nodes SET expires_ms = {} + $1 WHERE node_id = $2 AND identity = $3",
            store_now(self.meta.backend())
        ))
        .bind(self.ttl.as_millis() as i64)
        .bind(self.node_id as i64)
        .bind(&self.identity)
        .execute(self.meta.pool())
        .await?;
        Ok(renewed.rows_affected() == 1)
    }

    /// Renews the lease every third of its ttl until `stop`, then leaves (deletes the row).
    /// Stops early, cancelling [`Membership::lost`], when a renewal finds the row lost. Reports
    /// [`Membership::lapsed`] the moment a ttl has passed since the start of the last renewal
    /// that succeeded (or the join), renewal or not under way.
    pub async fn run(self, stop: CancellationToken) {
        let every = self.ttl / 3;
        let ttl_ms = self.ttl.as_millis() as u64;
        // When the lease ends unless renewed, as this node last set it (from about now: it
        // joined just before): by the shared clock, for the warning below, and by this
        // node's monotonic clock (never later than the store's end), for `lapsed`.
        let mut expires_ms = self.clock.now_ms() + ttl_ms;
        let mut holds_until = tokio::time::Instant::now() + self.ttl;
        loop {
            let lapsing = !*self.lapsed.borrow();
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(every) => {}
                _ = tokio::time::sleep_until(holds_until), if lapsing => self.set_lapsed(true),
            }
            let at_ms = self.clock.now_ms();
            let started = tokio::time::Instant::now();
            // Bounded: a renewal stuck on a connection that went silent would otherwise stop
            // every later one, and the node would never be live again.
            let renewal = tokio::time::timeout(every, self.renew());
            tokio::pin!(renewal);
            let renewed = loop {
                let lapsing = !*self.lapsed.borrow();
                tokio::select! {
                    r = &mut renewal => {
                        break r.unwrap_or_else(|_| Err(anyhow::anyhow!("no answer within {every:?}")))
                    }
                    _ = tokio::time::sleep_until(holds_until), if lapsing => self.set_lapsed(true),
                }
            };
            match renewed {
                Ok(true) => {
                    if at_ms > expires_ms {
                        // Its row was still its own, but for a while the other nodes saw it
                        // gone and may have taken its streams (their epochs fence it).
                        tracing::warn!(
                            node_id = self.node_id,
                            lapsed_ms = at_ms - expires_ms,
                            "this node renewed its lease after it had ended (was the node paused or starved of CPU?); other nodes may have taken its partitions and tables meanwhile"
                        );
                    }
                    expires_ms = at_ms + ttl_ms;
                    holds_until = started + self.ttl;
                    self.set_lapsed(false);
                }
                Ok(false) => {
                    tracing::error!(
                        node_id = self.node_id,
                        "this node's membership row is gone or another node's (was it paused \
                         past its lease?): stopping"
                    );
                    self.lost.cancel();
                    return;
                }
                Err(e) => tracing::warn!(error = %e, "could not renew the node's lease"),
            }
        }
        let left = sqlx::query("DELETE FROM inlet_nodes WHERE node_id = $1 AND identity = $2")
            .bind(self.node_id as i64)
            .bind(&self.identity)
            .execute(self.meta.pool())
            .await;
        if let Err(e) = left {
            tracing::warn!(error = %e, "could not leave the membership table; the lease will end");
        }
    }

    /// Every node's row, by id, with the metadata store's clock as of the read: a member is
    /// live while its `expires_ms` is above it.
    pub async fn members(meta: &MetaStore) -> anyhow::Result<(Vec<Member>, i64)> {
        let rows = sqlx::query(&format!(
            "SELECT node_id, identity, kafka_addr, http_addr, started_ms, expires_ms, wal, listeners,
                    {} AS now_ms
             FROM inlet_nodes ORDER BY node_id",
            store_now(meta.backend())
        ))
        .fetch_all(meta.pool())
        .await?;
        let now = match rows.first() {
            Some(row) => row.try_get::<i64, _>("now_ms")?,
            None => read_store_now(meta, meta.pool()).await?,
        };
        Ok((rows.iter().map(member).collect::<anyhow::Result<_>>()?, now))
    }
}

fn member(row: &sqlx::any::AnyRow) -> anyhow::Result<Member> {
    Ok(Member {
        node_id: row.try_get::<i64, _>("node_id")? as u64,
        identity: row.try_get("identity")?,
        kafka_addr: row.try_get("kafka_addr")?,
        http_addr: row.try_get("http_addr")?,
        listeners: row.try_get("listeners")?,
        started_ms: row.try_get("started_ms")?,
        expires_ms: row.try_get("expires_ms")?,
        wal: row.try_get("wal")?,
    })
}
