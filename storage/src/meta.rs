//! The metadata store: SQL through sqlx, SQLite in the data dir by default, PostgreSQL in a
//! cluster. All SQL here is written once and runs on both (numbered `$N` parameters, `BIGINT`
//! columns, no autoincrement: ids come from the `inlet_counters` table).
//!
//! The stream store keeps here what must survive a crash besides the WAL: streams (name, start
//! offset, the end offset committed in objects, retention) and the object index (every object,
//! its state, and the stream ranges it holds). Other crates reuse the same store through
//! [`MetaStore::pool`] and keep their own tables, versioned with [`MetaStore::migrate`].
//!
//! Object lifecycle: `PREPARED` (row written before the upload; an orphan if the node dies) →
//! `COMMITTED` (ranges indexed, in the same transaction) → `DELETING` (no ranges left; deleted
//! from the object store after a grace period) → row removed.

use std::collections::HashSet;
use std::str::FromStr;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};

use crate::error::{Error, Result};
use crate::pg_link::PgLink;

/// Which SQL engine is behind the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A connection pool to the metadata store.
#[derive(Debug, Clone)]
pub struct MetaStore {
    pool: AnyPool,
    backend: Backend,
    /// Object ids taken from the counter and not handed out yet: `(next, end)`.
    object_ids: std::sync::Arc<tokio::sync::Mutex<(u64, u64)>>,
    /// The URL this store connected with, through `link` for PostgreSQL.
    url: String,
    /// The relay PostgreSQL connections go through (`crate::pg_link`); it lives as long as
    /// any clone of the store.
    _link: Option<std::sync::Arc<PgLink>>,
}

/// Every PostgreSQL session's bounds, so that no node, paused or cut off, can hold another
/// one up for long (docs/architecture.md, "Cluster"):
/// - `lock_timeout`: a statement waits at most this long for a row lock (a takeover waiting on
///   a paused owner's transaction fails and the pass moves on to the other streams);
/// - `idle_in_transaction_session_timeout`: a session idle inside a transaction this long
///   (its node paused or gone between two statements) is ended by the server, which releases
///   its locks and rolls its transaction back;
/// - `statement_timeout`: no statement runs longer;
/// - TCP keepalives: the server notices a peer that vanished without closing.
///
/// `migrate` lifts the lock bound while it waits for another node's migrations.
const POSTGRES_SESSION: &str = "SELECT set_config('lock_timeout', '3s', false), \
     set_config('idle_in_transaction_session_timeout', '3s', false), \
     set_config('statement_timeout', '30s', false), \
     set_config('tcp_keepalives_idle', '5', false), \
     set_config('tcp_keepalives_interval', '2', false), \
     set_config('tcp_keepalives_count', '3', false)";

/// How long a pooled PostgreSQL connection may take to answer a ping before it is dropped
/// as dead ([`checked`]).
const PING_WITHIN: Duration = Duration::from_secs(2);

/// A pooled connection idle for less than this is handed out without a ping: it answered one
/// when it was returned.
const PING_IF_IDLE_FOR: Duration = Duration::from_secs(1);

/// How long a node waits for the metadata store to answer a call that holds something up
/// while it waits (the WAL's prepares and commits and the question whether a commit landed,
/// the producer snapshots, whose partitions' images stay locked meanwhile) before it takes
/// the call as failed in transit: longer than the session bounds give any healthy statement
/// (a 3 s lock wait), short enough that a connection gone silent holds nothing up for long. A
/// WAL commit so given up is resolved as any commit whose reply was lost (`crate::objwal`).
pub const CALL_WAIT: Duration = Duration::from_secs(10);

/// `call`, given up after [`CALL_WAIT`] with a retryable error (dropped: a transaction in it
/// rolls back, and the pool checks its connection before using it again).
pub async fn bounded<T>(call: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    tokio::time::timeout(CALL_WAIT, call)
        .await
        .unwrap_or_else(|_| {
            Err(Error::Meta(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the metadata store did not answer within {CALL_WAIT:?}"),
            ))))
        })
}

/// Whether `conn` answers a ping within [`PING_WITHIN`]; an error (the pool then drops the
/// connection without the closing handshake) when it does not. A connection whose path went
/// silent (no FIN, no RST: a lost route, a firewall that forgot its state) otherwise hangs
/// every statement sent on it until the kernel gives up on it, a quarter of an hour later; the
/// pool checks every connection returned to it (one dropped in the middle of a statement by a
/// caller's timeout among them) and every one it hands out after an idle second.
async fn checked(conn: &mut sqlx::AnyConnection) -> std::result::Result<bool, sqlx::Error> {
    use sqlx::Connection;
    match tokio::time::timeout(PING_WITHIN, conn.ping()).await {
        Ok(Ok(())) => Ok(true),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer to a ping within {PING_WITHIN:?}"),
        ))),
    }
}

/// The options of a pool of connections to a PostgreSQL metadata database: this store's, and
/// any other a node opens on the same database (the catalog's table pointers). Statements
/// are bounded by the session's settings ([`POSTGRES_SESSION`]); a connection idle for over
/// [`PING_IF_IDLE_FOR`] must answer a ping within [`PING_WITHIN`] before it is handed out, and
/// every connection returned must answer one, so a connection whose path went silent is
/// dropped instead of hanging its next statement until the relay (`crate::pg_link`) cuts it.
pub fn postgres_pool_options(max_connections: u32) -> AnyPoolOptions {
    AnyPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(30))
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for < PING_IF_IDLE_FOR {
                    return Ok(true);
                }
                checked(conn).await
            })
        })
        .after_release(|conn, _| Box::pin(checked(conn)))
        .after_connect(|conn, _| {
            Box::pin(async move {
                sqlx::query(POSTGRES_SESSION).execute(&mut *conn).await?;
                Ok(())
            })
        })
}

/// Object ids taken from the shared counter at a time: a cluster's nodes would otherwise
/// queue on the counter's row lock for every WAL object.
const OBJECT_ID_BLOCK: u64 = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ObjectKind {
    /// Many streams' data, written by an upload or a merge.
    StreamSet = 0,
    /// One stream's data, written by compaction.
    Stream = 1,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ObjectState {
    Prepared = 0,
    Committed = 1,
    Deleting = 2,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StreamRow {
    pub id: u64,
    pub name: String,
    pub start_offset: u64,
    pub committed_end: u64,
    pub retention_ms: Option<i64>,
    pub retention_bytes: Option<i64>,
    /// The node that owns the stream (appends to it and commits its metadata), if any.
    pub owner_node: Option<u64>,
    /// Raised by every change of owner: a metadata commit for the stream names the epoch it
    /// was owned under and fails when it is no longer the stream's.
    pub epoch: u64,
    /// A table topic's stream: the table's committed progress, below which retention may
    /// expire ranges (see [`MetaStore::hold_for_table`]). None: retention alone decides.
    pub table_floor: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ObjectRow {
    pub id: u64,
    pub kind: ObjectKind,
    pub state: ObjectState,
    pub node_id: u64,
    pub size: u64,
    pub index_position: u64,
    pub index_len: u64,
    pub created_ms: u64,
    pub deleted_ms: Option<u64>,
}

/// One stream's contiguous offsets inside one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RangeRow {
    pub object_id: u64,
    pub stream_id: u64,
    pub start_offset: u64,
    pub end_offset: u64,
    pub position: u64,
    pub size: u64,
    pub max_timestamp_ms: u64,
}

/// What a commit of a new object writes.
#[derive(Debug, Clone)]
pub(crate) struct NewObject {
    pub id: u64,
    pub size: u64,
    pub index_position: u64,
    pub index_len: u64,
    pub ranges: Vec<RangeRow>,
}

impl NewObject {
    /// The rows to commit for object `id`, built as `built`.
    pub(crate) fn new(id: u64, built: &crate::objects::format::BuiltObject) -> Self {
        NewObject {
            id,
            size: built.len,
            index_position: built.footer.index_position,
            index_len: built.footer.index_len as u64,
            ranges: built
                .ranges
                .iter()
                .map(|r| RangeRow {
                    object_id: id,
                    stream_id: r.stream_id,
                    start_offset: r.start_offset,
                    end_offset: r.end_offset,
                    position: r.position,
                    size: r.size,
                    max_timestamp_ms: r.max_timestamp_ms,
                })
                .collect(),
        }
    }
}

const STORAGE_MIGRATIONS: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS inlet_counters (
        name VARCHAR(64) PRIMARY KEY,
        value BIGINT NOT NULL)",
    "INSERT INTO inlet_counters (name, value) VALUES ('stream_id', 0), ('object_id', 0)",
    "CREATE TABLE IF NOT EXISTS inlet_streams (
        stream_id BIGINT PRIMARY KEY,
        name VARCHAR(1024) NOT NULL,
        start_offset BIGINT NOT NULL,
        committed_end BIGINT NOT NULL,
        retention_ms BIGINT,
        retention_bytes BIGINT,
        created_ms BIGINT NOT NULL,
        deleted_ms BIGINT)",
    "CREATE UNIQUE INDEX IF NOT EXISTS inlet_streams_live_name
        ON inlet_streams (name) WHERE deleted_ms IS NULL",
    "CREATE TABLE IF NOT EXISTS inlet_objects (
        object_id BIGINT PRIMARY KEY,
        kind BIGINT NOT NULL,
        state BIGINT NOT NULL,
        node_id BIGINT NOT NULL,
        size BIGINT NOT NULL,
        index_position BIGINT NOT NULL,
        index_len BIGINT NOT NULL,
        created_ms BIGINT NOT NULL,
        deleted_ms BIGINT)",
    "CREATE INDEX IF NOT EXISTS inlet_objects_state ON inlet_objects (state)",
    "CREATE TABLE IF NOT EXISTS inlet_object_ranges (
        stream_id BIGINT NOT NULL,
        start_offset BIGINT NOT NULL,
        end_offset BIGINT NOT NULL,
        object_id BIGINT NOT NULL,
        position BIGINT NOT NULL,
        size BIGINT NOT NULL,
        max_timestamp_ms BIGINT NOT NULL,
        PRIMARY KEY (stream_id, start_offset))",
    "CREATE INDEX IF NOT EXISTS inlet_object_ranges_object ON inlet_object_ranges (object_id)",
    // Ownership (issue 18): the node that may append to the stream, and the epoch every
    // metadata commit for the stream is conditional on.
    "ALTER TABLE inlet_streams ADD COLUMN owner_node BIGINT",
    "ALTER TABLE inlet_streams ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0",
    // Table hold (issue 40): a table topic's stream keeps every range that ends above this
    // offset (the table's committed progress), whatever its retention says. NULL: no hold.
    "ALTER TABLE inlet_streams ADD COLUMN table_floor BIGINT",
    // Moves (issue 44): who took or gave up a partition's stream or a group, and when, for
    // the console's cluster page; rows older than [`MOVES_KEPT_MS`] are deleted as new ones
    // come.
    "CREATE TABLE IF NOT EXISTS inlet_moves (
        at_ms BIGINT NOT NULL,
        kind VARCHAR(16) NOT NULL,
        name VARCHAR(1024) NOT NULL,
        stream_id BIGINT,
        from_node BIGINT,
        to_node BIGINT,
        epoch BIGINT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS inlet_moves_at ON inlet_moves (at_ms)",
];

/// How long the metadata store keeps a move ([`MetaStore::moves`]).
pub const MOVES_KEPT_MS: u64 = 60 * 60 * 1000;

/// A change of owner: a partition's stream or a consumer group taken by a node, or given up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub at_ms: u64,
    /// `"partition"` or `"group"`.
    pub kind: String,
    /// The stream's name, or the group's id.
    pub name: String,
    /// The partition's stream.
    pub stream_id: Option<u64>,
    /// The owner before: `None` when it had none (new, or given up).
    pub from_node: Option<u64>,
    /// The owner after: `None` when the owner gave it up for another node to take.
    pub to_node: Option<u64>,
    /// The ownership epoch after the move (for a release, the epoch given up).
    pub epoch: u64,
}

/// Records `m` inside `tx`, and forgets the moves older than [`MOVES_KEPT_MS`] before it.
pub async fn record_move(tx: &mut sqlx::Transaction<'_, sqlx::Any>, m: &Move) -> Result<()> {
    sqlx::query("DELETE FROM inlet_moves WHERE at_ms < $1")
        .bind(i(m.at_ms.saturating_sub(MOVES_KEPT_MS)))
        .execute(&mut **tx)
        .await?;
    sqlx::query(
        "INSERT INTO inlet_moves (at_ms, kind, name, stream_id, from_node, to_node, epoch)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(i(m.at_ms))
    .bind(&m.kind)
    .bind(&m.name)
    .bind(m.stream_id.map(i))
    .bind(m.from_node.map(i))
    .bind(m.to_node.map(i))
    .bind(i(m.epoch))
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Whether a stream's row still carries the epoch a commit was made under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    Yes,
    /// The stream is deleted: its ranges are skipped, as before ownership.
    Deleted,
}

fn i(v: u64) -> i64 {
    v as i64
}

/// Rows one batched statement reads, locks, inserts or updates at most (a commit of a WAL
/// object of many streams takes one statement per this many, not one per stream; 7 bound
/// values a row stay under both stores' limits on parameters).
const BATCH_ROWS: usize = 500;

/// `1, 2, 3`: integers formatted into a statement (the Any driver binds no arrays).
fn integer_list(values: &[u64]) -> String {
    values
        .iter()
        .map(|&v| i(v).to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn u(row: &AnyRow, col: &str) -> Result<u64> {
    Ok(row.try_get::<i64, _>(col)? as u64)
}

fn range_row(row: &AnyRow) -> Result<RangeRow> {
    Ok(RangeRow {
        object_id: u(row, "object_id")?,
        stream_id: u(row, "stream_id")?,
        start_offset: u(row, "start_offset")?,
        end_offset: u(row, "end_offset")?,
        position: u(row, "position")?,
        size: u(row, "size")?,
        max_timestamp_ms: u(row, "max_timestamp_ms")?,
    })
}

impl MetaStore {
    /// Connects to `sqlite://PATH` (created if missing) or `postgres://…`, and creates the
    /// stream store's tables.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, crate::pg_link::SILENCE_BOUND).await
    }

    /// [`connect`](Self::connect), with the relay's bound on a silent PostgreSQL server.
    pub(crate) async fn connect_with(url: &str, silence: Duration) -> Result<Self> {
        sqlx::any::install_default_drivers();
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Backend::Postgres
        } else {
            return Err(Error::Config(format!(
                "metadata store URL must start with sqlite: or postgres://, got {url:?}"
            )));
        };
        let url =
            if backend == Backend::Sqlite && !url.contains("mode=") && !url.contains(":memory:") {
                let sep = if url.contains('?') { '&' } else { '?' };
                format!("{url}{sep}mode=rwc")
            } else {
                url.to_string()
            };
        let link = match backend {
            Backend::Postgres => PgLink::start(&url, silence).await?.map(std::sync::Arc::new),
            Backend::Sqlite => None,
        };
        let url = link.as_ref().map_or(url, |link| link.url().to_string());
        let options = AnyConnectOptions::from_str(&url)
            .map_err(|e| Error::Config(format!("metadata store URL: {e}")))?;
        let pool = match backend {
            // One connection: SQLite serializes writers anyway, and a single connection rules
            // out lock-upgrade deadlocks between pooled connections.
            Backend::Sqlite => {
                AnyPoolOptions::new()
                    .max_connections(1)
                    .acquire_timeout(Duration::from_secs(60))
                    .after_connect(|conn, _| {
                        Box::pin(async move {
                            for pragma in [
                                "PRAGMA journal_mode = WAL",
                                "PRAGMA synchronous = FULL",
                                "PRAGMA busy_timeout = 10000",
                                "PRAGMA foreign_keys = ON",
                            ] {
                                sqlx::query(pragma).execute(&mut *conn).await?;
                            }
                            Ok(())
                        })
                    })
                    .connect_with(options)
                    .await?
            }
            Backend::Postgres => postgres_pool_options(8).connect_with(options).await?,
        };
        let store = MetaStore {
            pool,
            backend,
            object_ids: Default::default(),
            url,
            _link: link,
        };
        store.migrate("storage", STORAGE_MIGRATIONS).await?;
        Ok(store)
    }

    /// The pool, for crates that keep their own tables here.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// The URL other pools on the same database connect with (the catalog's): through this
    /// store's relay for PostgreSQL (`crate::pg_link`), so their connections are bounded the
    /// same way. Valid while this store (any clone) lives.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Applies the steps of `component` that were not applied yet, each in its own
    /// transaction together with the recorded version. Steps are append-only: never edit one
    /// that has shipped.
    pub async fn migrate(&self, component: &str, steps: &[&str]) -> Result<()> {
        // One connection for the lock, the steps and the unlock: PostgreSQL advisory locks
        // belong to a session.
        let mut conn = self.pool.acquire().await?;
        if self.backend == Backend::Postgres {
            // Nodes starting together must not apply the same steps twice; one waits for the
            // other's steps, however long they take.
            sqlx::query("SELECT set_config('lock_timeout', '0', false)")
                .fetch_optional(&mut *conn)
                .await?;
            sqlx::query("SELECT pg_advisory_lock(7243507)")
                .fetch_optional(&mut *conn)
                .await?;
        }
        let result = Self::apply_steps(&mut conn, component, steps).await;
        if self.backend == Backend::Postgres {
            sqlx::query("SELECT pg_advisory_unlock(7243507)")
                .fetch_optional(&mut *conn)
                .await?;
            sqlx::query(POSTGRES_SESSION)
                .fetch_optional(&mut *conn)
                .await?;
        }
        result
    }

    async fn apply_steps(
        conn: &mut sqlx::AnyConnection,
        component: &str,
        steps: &[&str],
    ) -> Result<()> {
        use sqlx::Connection;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS inlet_migrations (
                component VARCHAR(64) PRIMARY KEY,
                version BIGINT NOT NULL)",
        )
        .execute(&mut *conn)
        .await?;
        let applied: i64 = sqlx::query("SELECT version FROM inlet_migrations WHERE component = $1")
            .bind(component)
            .fetch_optional(&mut *conn)
            .await?
            .map(|row| row.try_get::<i64, _>("version"))
            .transpose()?
            .unwrap_or(0);
        for (n, step) in steps.iter().enumerate().skip(applied as usize) {
            let mut tx = conn.begin().await?;
            sqlx::query(step).execute(&mut *tx).await?;
            let version = n as i64 + 1;
            if version == 1 {
                sqlx::query("INSERT INTO inlet_migrations (component, version) VALUES ($1, $2)")
                    .bind(component)
                    .bind(version)
                    .execute(&mut *tx)
                    .await?;
            } else {
                sqlx::query("UPDATE inlet_migrations SET version = $2 WHERE component = $1")
                    .bind(component)
                    .bind(version)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
        }
        Ok(())
    }

    async fn next_id(&self, conn: &mut sqlx::AnyConnection, counter: &str) -> Result<u64> {
        let row = sqlx::query(
            "UPDATE inlet_counters SET value = value + 1 WHERE name = $1 RETURNING value",
        )
        .bind(counter)
        .fetch_one(&mut *conn)
        .await?;
        u(&row, "value")
    }

    fn stream_row(row: &AnyRow) -> Result<StreamRow> {
        Ok(StreamRow {
            id: u(row, "stream_id")?,
            name: row.try_get("name")?,
            start_offset: u(row, "start_offset")?,
            committed_end: u(row, "committed_end")?,
            retention_ms: row.try_get("retention_ms")?,
            retention_bytes: row.try_get("retention_bytes")?,
            owner_node: row
                .try_get::<Option<i64>, _>("owner_node")?
                .map(|v| v as u64),
            epoch: u(row, "epoch")?,
            table_floor: row
                .try_get::<Option<i64>, _>("table_floor")?
                .map(|v| v.max(0) as u64),
        })
    }

    /// Checks, inside `tx`, that `stream_id` is still owned under `epoch`, and locks its row
    /// until `tx` ends: an owner change (which raises the epoch) waits for `tx` and a commit
    /// after it fails. This is the fence of every metadata commit for a stream.
    async fn hold(
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        stream_id: u64,
        epoch: u64,
    ) -> Result<Held> {
        let held = sqlx::query(
            "UPDATE inlet_streams SET epoch = epoch
             WHERE stream_id = $1 AND epoch = $2 AND deleted_ms IS NULL",
        )
        .bind(i(stream_id))
        .bind(i(epoch))
        .execute(&mut **tx)
        .await?;
        if held.rows_affected() == 1 {
            return Ok(Held::Yes);
        }
        let row = sqlx::query("SELECT epoch, deleted_ms FROM inlet_streams WHERE stream_id = $1")
            .bind(i(stream_id))
            .fetch_optional(&mut **tx)
            .await?;
        match row {
            Some(row) if row.try_get::<Option<i64>, _>("deleted_ms")?.is_none() => {
                Err(Error::Fenced {
                    stream: stream_id,
                    epoch,
                    now: u(&row, "epoch")?,
                })
            }
            _ => Ok(Held::Deleted),
        }
    }

    /// [`MetaStore::hold`] for every stream in `epochs`, with one statement per
    /// [`BATCH_ROWS`] streams instead of one per stream: their rows are read and locked in
    /// stream id order (PostgreSQL's `FOR UPDATE` applies after the `ORDER BY`, so two commits
    /// never wait for each other's rows in opposite orders; SQLite has one connection, one
    /// writer). Returns the streams still alive; fails with [`Error::Fenced`] for the first
    /// stream owned under another epoch.
    async fn hold_all(
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        epochs: &std::collections::BTreeMap<u64, u64>,
        backend: Backend,
    ) -> Result<HashSet<u64>> {
        let mut live = HashSet::new();
        let ids: Vec<u64> = epochs.keys().copied().collect();
        let lock = if backend == Backend::Postgres {
            " FOR UPDATE"
        } else {
            ""
        };
        for chunk in ids.chunks(BATCH_ROWS) {
            // Stream ids are integers: the list is formatted, not bound (the Any driver has no
            // arrays).
            let sql = format!(
                "SELECT stream_id, epoch, deleted_ms FROM inlet_streams WHERE stream_id IN ({}) \
                 ORDER BY stream_id{lock}",
                integer_list(chunk)
            );
            let rows = sqlx::query(&sql)
                .persistent(false)
                .fetch_all(&mut **tx)
                .await?;
            for row in rows {
                if row.try_get::<Option<i64>, _>("deleted_ms")?.is_some() {
                    continue;
                }
                let (stream, now) = (u(&row, "stream_id")?, u(&row, "epoch")?);
                let epoch = epochs.get(&stream).copied().unwrap_or_default();
                if now != epoch {
                    return Err(Error::Fenced { stream, epoch, now });
                }
                live.insert(stream);
            }
        }
        Ok(live)
    }

    /// Makes `node_id` the owner of every live stream, each under a new epoch: a single node
    /// owns all its streams, and an older process of it is fenced.
    pub(crate) async fn claim_all(&self, node_id: u64) -> Result<()> {
        sqlx::query(
            "UPDATE inlet_streams SET owner_node = $1, epoch = epoch + 1 WHERE deleted_ms IS NULL",
        )
        .bind(i(node_id))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Takes `stream_id` for `node_id` under a new epoch, if it has no owner, is already this
    /// node's, or its owner is not in `live_nodes` (its lease ended). Returns the row as taken,
    /// or `None` when a live node holds it or the stream is gone. A take from another owner,
    /// or of a free stream, is recorded as a [`Move`] at `now_ms`.
    pub(crate) async fn acquire_stream(
        &self,
        stream_id: u64,
        node_id: u64,
        live_nodes: &[u64],
        now_ms: u64,
    ) -> Result<Option<StreamRow>> {
        // Node ids are integers: the list is formatted, not bound (the Any driver has no arrays).
        let others: Vec<String> = live_nodes
            .iter()
            .filter(|&&n| n != node_id)
            .map(|n| i(*n).to_string())
            .collect();
        let dead_owner = if others.is_empty() {
            "TRUE".to_string()
        } else {
            format!("owner_node NOT IN ({})", others.join(", "))
        };
        let lock = if self.backend == Backend::Postgres {
            " FOR UPDATE"
        } else {
            ""
        };
        let mut tx = self.pool.begin().await?;
        let before = sqlx::query(&format!(
            "SELECT owner_node FROM inlet_streams WHERE stream_id = $1{lock}"
        ))
        .bind(i(stream_id))
        .fetch_optional(&mut *tx)
        .await?
        .map(|row| row.try_get::<Option<i64>, _>("owner_node"))
        .transpose()?
        .flatten()
        .map(|n| n as u64);
        let sql = format!(
            "UPDATE inlet_streams SET owner_node = $2, epoch = epoch + 1
             WHERE stream_id = $1 AND deleted_ms IS NULL
             AND (owner_node IS NULL OR owner_node = $2 OR {dead_owner})
             RETURNING *"
        );
        let taken = sqlx::query(&sql)
            .bind(i(stream_id))
            .bind(i(node_id))
            .fetch_optional(&mut *tx)
            .await?
            .map(|row| Self::stream_row(&row))
            .transpose()?;
        if let Some(row) = taken.as_ref().filter(|_| before != Some(node_id)) {
            let taken = Move {
                at_ms: now_ms,
                kind: "partition".into(),
                name: row.name.clone(),
                stream_id: Some(stream_id),
                from_node: before,
                to_node: Some(node_id),
                epoch: row.epoch,
            };
            record_move(&mut tx, &taken).await?;
        }
        tx.commit().await?;
        Ok(taken)
    }

    /// Gives `stream_id` up, if `node_id` still owns it under `epoch`, recorded as a [`Move`]
    /// at `now_ms`.
    pub(crate) async fn release_stream(
        &self,
        stream_id: u64,
        node_id: u64,
        epoch: u64,
        now_ms: u64,
    ) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        let released = sqlx::query(
            "UPDATE inlet_streams SET owner_node = NULL
             WHERE stream_id = $1 AND owner_node = $2 AND epoch = $3
             RETURNING name",
        )
        .bind(i(stream_id))
        .bind(i(node_id))
        .bind(i(epoch))
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = released else {
            return Ok(false);
        };
        let given_up = Move {
            at_ms: now_ms,
            kind: "partition".into(),
            name: row.try_get::<String, _>("name")?,
            stream_id: Some(stream_id),
            from_node: Some(node_id),
            to_node: None,
            epoch,
        };
        record_move(&mut tx, &given_up).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// The moves since `since_ms`, oldest first (kept for [`MOVES_KEPT_MS`]).
    pub async fn moves(&self, since_ms: u64) -> Result<Vec<Move>> {
        let rows = sqlx::query(
            "SELECT at_ms, kind, name, stream_id, from_node, to_node, epoch FROM inlet_moves
             WHERE at_ms >= $1 ORDER BY at_ms, epoch",
        )
        .bind(i(since_ms))
        .fetch_all(&self.pool)
        .await?;
        let node = |row: &AnyRow, col: &str| -> Result<Option<u64>> {
            Ok(row.try_get::<Option<i64>, _>(col)?.map(|v| v as u64))
        };
        rows.iter()
            .map(|row| {
                Ok(Move {
                    at_ms: u(row, "at_ms")?,
                    kind: row.try_get("kind")?,
                    name: row.try_get("name")?,
                    stream_id: node(row, "stream_id")?,
                    from_node: node(row, "from_node")?,
                    to_node: node(row, "to_node")?,
                    epoch: u(row, "epoch")?,
                })
            })
            .collect()
    }

    /// Creates a stream; owned by `owner` under epoch 1 when given, unowned otherwise.
    pub(crate) async fn create_stream(
        &self,
        name: &str,
        now_ms: u64,
        owner: Option<u64>,
    ) -> Result<StreamRow> {
        let mut tx = self.pool.begin().await?;
        let exists = sqlx::query(
            "SELECT stream_id FROM inlet_streams WHERE name = $1 AND deleted_ms IS NULL",
        )
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
        if exists.is_some() {
            return Err(Error::StreamExists { name: name.into() });
        }
        let id = self.next_id(&mut tx, "stream_id").await?;
        let epoch = u64::from(owner.is_some());
        sqlx::query(
            "INSERT INTO inlet_streams
             (stream_id, name, start_offset, committed_end, created_ms, owner_node, epoch)
             VALUES ($1, $2, 0, 0, $3, $4, $5)",
        )
        .bind(i(id))
        .bind(name)
        .bind(i(now_ms))
        .bind(owner.map(i))
        .bind(i(epoch))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(StreamRow {
            id,
            name: name.into(),
            start_offset: 0,
            committed_end: 0,
            retention_ms: None,
            retention_bytes: None,
            owner_node: owner,
            epoch,
            table_floor: None,
        })
    }

    pub(crate) async fn live_streams(&self) -> Result<Vec<StreamRow>> {
        sqlx::query("SELECT * FROM inlet_streams WHERE deleted_ms IS NULL ORDER BY stream_id")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(Self::stream_row)
            .collect()
    }

    /// Marks the stream deleted, drops its ranges, and marks objects left without ranges for
    /// deletion.
    pub(crate) async fn delete_stream(&self, stream_id: u64, now_ms: u64) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "UPDATE inlet_streams SET deleted_ms = $2 WHERE stream_id = $1 AND deleted_ms IS NULL",
        )
        .bind(i(stream_id))
        .bind(i(now_ms))
        .execute(&mut *tx)
        .await?;
        let objects: Vec<u64> =
            sqlx::query("SELECT DISTINCT object_id FROM inlet_object_ranges WHERE stream_id = $1")
                .bind(i(stream_id))
                .fetch_all(&mut *tx)
                .await?
                .iter()
                .map(|r| u(r, "object_id"))
                .collect::<Result<_>>()?;
        sqlx::query("DELETE FROM inlet_object_ranges WHERE stream_id = $1")
            .bind(i(stream_id))
            .execute(&mut *tx)
            .await?;
        Self::retire_empty_objects(&mut tx, &objects, now_ms).await?;
        tx.commit().await?;
        Ok(())
    }

    pub(crate) async fn set_retention(
        &self,
        stream_id: u64,
        retention_ms: Option<i64>,
        retention_bytes: Option<i64>,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE inlet_streams SET retention_ms = $2, retention_bytes = $3 WHERE stream_id = $1",
        )
        .bind(i(stream_id))
        .bind(retention_ms)
        .bind(retention_bytes)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Holds a stream for a table (`hold`: its retention may expire only ranges the table's
    /// committed progress passed; the floor starts at 0 until the table reports progress) or
    /// ends the hold (`!hold`: retention alone decides again). A hold already on keeps its floor.
    pub(crate) async fn hold_for_table(&self, stream_id: u64, hold: bool) -> Result<()> {
        let sql = if hold {
            "UPDATE inlet_streams SET table_floor = COALESCE(table_floor, 0) WHERE stream_id = $1"
        } else {
            "UPDATE inlet_streams SET table_floor = NULL WHERE stream_id = $1"
        };
        sqlx::query(sql)
            .bind(i(stream_id))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Raises a held stream's table floor to `floor` (never lowers it; a stream not held stays
    /// so). Not fenced: any node may report a table's progress, and the floor only rises.
    pub(crate) async fn raise_table_floor(&self, stream_id: u64, floor: u64) -> Result<()> {
        sqlx::query(
            "UPDATE inlet_streams SET table_floor = $2
             WHERE stream_id = $1 AND table_floor IS NOT NULL AND table_floor < $2",
        )
        .bind(i(stream_id))
        .bind(i(floor))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The table floor of every live stream that is held for a table.
    pub(crate) async fn table_floors(&self) -> Result<std::collections::HashMap<u64, u64>> {
        sqlx::query(
            "SELECT stream_id, table_floor FROM inlet_streams
             WHERE deleted_ms IS NULL AND table_floor IS NOT NULL",
        )
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|r| Ok((u(r, "stream_id")?, u(r, "table_floor")?)))
        .collect()
    }

    /// Raises a stream's start offset, fenced by the owner's `epoch`.
    pub(crate) async fn set_start_offset(
        &self,
        stream_id: u64,
        epoch: u64,
        start: u64,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        if Self::hold(&mut tx, stream_id, epoch).await? == Held::Deleted {
            return Err(Error::UnknownStream(stream_id.to_string()));
        }
        sqlx::query(
            "UPDATE inlet_streams SET start_offset = $2 WHERE stream_id = $1 AND start_offset < $2",
        )
        .bind(i(stream_id))
        .bind(i(start))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Records an object about to be uploaded, and returns its id.
    pub(crate) async fn prepare_object(
        &self,
        kind: ObjectKind,
        node_id: u64,
        now_ms: u64,
    ) -> Result<u64> {
        let id = {
            let mut ids = self.object_ids.lock().await;
            if ids.0 >= ids.1 {
                // One short statement takes a block; ids of a block a node never uses are
                // skipped, never reused.
                let row = sqlx::query(
                    "UPDATE inlet_counters SET value = value + $1 WHERE name = 'object_id'
                     RETURNING value",
                )
                .bind(i(OBJECT_ID_BLOCK))
                .fetch_one(&self.pool)
                .await?;
                let end = u(&row, "value")?;
                *ids = (end - OBJECT_ID_BLOCK + 1, end + 1);
            }
            let id = ids.0;
            ids.0 += 1;
            id
        };
        sqlx::query(
            "INSERT INTO inlet_objects (object_id, kind, state, node_id, size, index_position, index_len, created_ms)
             VALUES ($1, $2, $3, $4, 0, 0, 0, $5)",
        )
        .bind(i(id))
        .bind(kind as i64)
        .bind(ObjectState::Prepared as i64)
        .bind(i(node_id))
        .bind(i(now_ms))
        .execute(&self.pool)
        .await?;
        Ok(id)
    }

    async fn commit_new_object(
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        object: &NewObject,
        live: &HashSet<u64>,
    ) -> Result<Vec<RangeRow>> {
        let updated = sqlx::query(
            "UPDATE inlet_objects SET state = $2, size = $3, index_position = $4, index_len = $5
             WHERE object_id = $1 AND state = $6",
        )
        .bind(i(object.id))
        .bind(ObjectState::Committed as i64)
        .bind(i(object.size))
        .bind(i(object.index_position))
        .bind(i(object.index_len))
        .bind(ObjectState::Prepared as i64)
        .execute(&mut **tx)
        .await?;
        if updated.rows_affected() != 1 {
            return Err(Error::InvalidArgument(format!(
                "object {} is no longer prepared (collected as an orphan?)",
                object.id
            )));
        }
        let inserted: Vec<RangeRow> = object
            .ranges
            .iter()
            .filter(|r| live.contains(&r.stream_id))
            .copied()
            .collect();
        for chunk in inserted.chunks(BATCH_ROWS) {
            let values: Vec<String> = (0..chunk.len())
                .map(|k| {
                    let b = k * 7;
                    format!(
                        "(${}, ${}, ${}, ${}, ${}, ${}, ${})",
                        b + 1,
                        b + 2,
                        b + 3,
                        b + 4,
                        b + 5,
                        b + 6,
                        b + 7
                    )
                })
                .collect();
            let sql = format!(
                "INSERT INTO inlet_object_ranges
                 (stream_id, start_offset, end_offset, object_id, position, size, max_timestamp_ms)
                 VALUES {}",
                values.join(", ")
            );
            let mut insert = sqlx::query(&sql).persistent(false);
            for r in chunk {
                insert = insert
                    .bind(i(r.stream_id))
                    .bind(i(r.start_offset))
                    .bind(i(r.end_offset))
                    .bind(i(object.id))
                    .bind(i(r.position))
                    .bind(i(r.size))
                    .bind(i(r.max_timestamp_ms));
            }
            insert.execute(&mut **tx).await?;
        }
        if inserted.is_empty() {
            // Every stream it held was deleted meanwhile: nothing refers to it.
            sqlx::query(
                "UPDATE inlet_objects SET state = $2, deleted_ms = created_ms WHERE object_id = $1",
            )
            .bind(i(object.id))
            .bind(ObjectState::Deleting as i64)
            .execute(&mut **tx)
            .await?;
        }
        Ok(inserted)
    }

    /// Commits an uploaded object: indexes its ranges (of streams still alive) and advances each
    /// stream's committed end, in one transaction. Fails with [`Error::Fenced`], changing
    /// nothing, if a stream is no longer owned under the epoch `epochs` gives it (every stream
    /// of `object` must be in `epochs`). Returns the ranges indexed.
    pub(crate) async fn commit_upload(
        &self,
        object: &NewObject,
        epochs: &std::collections::BTreeMap<u64, u64>,
    ) -> Result<Vec<RangeRow>> {
        let mut tx = self.pool.begin().await?;
        let live = Self::hold_all(&mut tx, epochs, self.backend).await?;
        let inserted = Self::commit_new_object(&mut tx, object, &live).await?;
        let mut ends: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
        for r in &inserted {
            let end = ends.entry(r.stream_id).or_default();
            *end = (*end).max(r.end_offset);
        }
        let ends: Vec<(u64, u64)> = ends.into_iter().collect();
        for chunk in ends.chunks(BATCH_ROWS) {
            // Integers only, formatted (see `hold_all`): one statement for the whole chunk.
            let cases: String = chunk
                .iter()
                .map(|&(stream, end)| format!(" WHEN {} THEN {}", i(stream), i(end)))
                .collect();
            let streams: Vec<u64> = chunk.iter().map(|&(stream, _)| stream).collect();
            let sql = format!(
                "UPDATE inlet_streams SET committed_end = CASE stream_id{cases} END
                 WHERE stream_id IN ({}) AND committed_end < CASE stream_id{cases} END",
                integer_list(&streams)
            );
            sqlx::query(&sql)
                .persistent(false)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(inserted)
    }

    /// Commits a compacted object in place of the ranges it copied. Fails without changing
    /// anything (returns `false`) if any of those ranges is gone meanwhile.
    pub(crate) async fn commit_compaction(
        &self,
        object: &NewObject,
        replaced: &[RangeRow],
        epochs: &std::collections::BTreeMap<u64, u64>,
        now_ms: u64,
    ) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        let live = Self::hold_all(&mut tx, epochs, self.backend).await?;
        for r in replaced {
            let deleted = sqlx::query(
                "DELETE FROM inlet_object_ranges WHERE stream_id = $1 AND start_offset = $2 AND object_id = $3",
            )
            .bind(i(r.stream_id))
            .bind(i(r.start_offset))
            .bind(i(r.object_id))
            .execute(&mut *tx)
            .await?;
            if deleted.rows_affected() != 1 {
                tx.rollback().await?;
                return Ok(false);
            }
        }
        Self::commit_new_object(&mut tx, object, &live).await?;
        let old: Vec<u64> = replaced.iter().map(|r| r.object_id).collect();
        Self::retire_empty_objects(&mut tx, &old, now_ms).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Drops ranges that retention or trimming expired and raises the stream's start offset,
    /// in one transaction.
    pub(crate) async fn expire_ranges(
        &self,
        stream_id: u64,
        epoch: u64,
        new_start: u64,
        expired: &[RangeRow],
        now_ms: u64,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        if Self::hold(&mut tx, stream_id, epoch).await? == Held::Deleted {
            return Ok(());
        }
        sqlx::query(
            "UPDATE inlet_streams SET start_offset = $2 WHERE stream_id = $1 AND start_offset < $2",
        )
        .bind(i(stream_id))
        .bind(i(new_start))
        .execute(&mut *tx)
        .await?;
        for r in expired {
            sqlx::query(
                "DELETE FROM inlet_object_ranges WHERE stream_id = $1 AND start_offset = $2",
            )
            .bind(i(r.stream_id))
            .bind(i(r.start_offset))
            .execute(&mut *tx)
            .await?;
        }
        let objects: Vec<u64> = expired.iter().map(|r| r.object_id).collect();
        Self::retire_empty_objects(&mut tx, &objects, now_ms).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn retire_empty_objects(
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        objects: &[u64],
        now_ms: u64,
    ) -> Result<()> {
        let unique: HashSet<u64> = objects.iter().copied().collect();
        for id in unique {
            sqlx::query(
                "UPDATE inlet_objects SET state = $2, deleted_ms = $3
                 WHERE object_id = $1 AND state = $4
                 AND NOT EXISTS (SELECT 1 FROM inlet_object_ranges WHERE object_id = $1)",
            )
            .bind(i(id))
            .bind(ObjectState::Deleting as i64)
            .bind(i(now_ms))
            .bind(ObjectState::Committed as i64)
            .execute(&mut **tx)
            .await?;
        }
        Ok(())
    }

    fn object_row(row: &AnyRow) -> Result<ObjectRow> {
        let kind = match row.try_get::<i64, _>("kind")? {
            0 => ObjectKind::StreamSet,
            1 => ObjectKind::Stream,
            k => {
                return Err(Error::corrupt(
                    "inlet_objects",
                    format!("unknown object kind {k}"),
                ))
            }
        };
        let state = match row.try_get::<i64, _>("state")? {
            0 => ObjectState::Prepared,
            1 => ObjectState::Committed,
            2 => ObjectState::Deleting,
            s => {
                return Err(Error::corrupt(
                    "inlet_objects",
                    format!("unknown object state {s}"),
                ))
            }
        };
        Ok(ObjectRow {
            id: u(row, "object_id")?,
            kind,
            state,
            node_id: u(row, "node_id")?,
            size: u(row, "size")?,
            index_position: u(row, "index_position")?,
            index_len: u(row, "index_len")?,
            created_ms: u(row, "created_ms")?,
            deleted_ms: row
                .try_get::<Option<i64>, _>("deleted_ms")?
                .map(|v| v as u64),
        })
    }

    pub(crate) async fn objects_in_state(&self, state: ObjectState) -> Result<Vec<ObjectRow>> {
        sqlx::query("SELECT * FROM inlet_objects WHERE state = $1 ORDER BY object_id")
            .bind(state as i64)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(Self::object_row)
            .collect()
    }

    /// An object's state, or `None` when it has no row.
    pub(crate) async fn object_state(&self, object_id: u64) -> Result<Option<ObjectState>> {
        sqlx::query("SELECT * FROM inlet_objects WHERE object_id = $1")
            .bind(i(object_id))
            .fetch_optional(&self.pool)
            .await?
            .map(|row| Self::object_row(&row).map(|o| o.state))
            .transpose()
    }

    /// Every range held by a committed object, by stream and offset.
    pub(crate) async fn committed_ranges(&self) -> Result<Vec<RangeRow>> {
        sqlx::query("SELECT * FROM inlet_object_ranges ORDER BY stream_id, start_offset")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(range_row)
            .collect()
    }

    /// Claims a prepared object for collection: moves it to `DELETING` only if it is still
    /// prepared, so an upload that commits meanwhile wins and its object is kept. Returns
    /// whether the claim succeeded.
    pub(crate) async fn claim_orphan(&self, object_id: u64, now_ms: u64) -> Result<bool> {
        let claimed = sqlx::query(
            "UPDATE inlet_objects SET state = $2, deleted_ms = $3 WHERE object_id = $1 AND state = $4",
        )
        .bind(i(object_id))
        .bind(ObjectState::Deleting as i64)
        .bind(i(now_ms))
        .bind(ObjectState::Prepared as i64)
        .execute(&self.pool)
        .await?;
        Ok(claimed.rows_affected() == 1)
    }

    /// Retires committed objects that hold no range: a safety net for races between deleting
    /// a stream and committing an object that PostgreSQL's READ COMMITTED lets through.
    /// Returns how many.
    pub(crate) async fn retire_rangeless_objects(&self, now_ms: u64) -> Result<u64> {
        let done = sqlx::query(
            "UPDATE inlet_objects SET state = $1, deleted_ms = $2
             WHERE state = $3
             AND NOT EXISTS (SELECT 1 FROM inlet_object_ranges r WHERE r.object_id = inlet_objects.object_id)",
        )
        .bind(ObjectState::Deleting as i64)
        .bind(i(now_ms))
        .bind(ObjectState::Committed as i64)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    /// A stream's committed end and its ranges in committed objects, with the object fields a
    /// reader needs: what the in-memory index is rebuilt from.
    pub(crate) async fn stream_index(
        &self,
        stream_id: u64,
    ) -> Result<Option<(u64, Vec<(RangeRow, ObjectKind, u64, u64)>)>> {
        let Some(row) = sqlx::query(
            "SELECT committed_end FROM inlet_streams WHERE stream_id = $1 AND deleted_ms IS NULL",
        )
        .bind(i(stream_id))
        .fetch_optional(&self.pool)
        .await?
        else {
            return Ok(None);
        };
        let committed_end = u(&row, "committed_end")?;
        let ranges = sqlx::query(
            "SELECT r.stream_id, r.start_offset, r.end_offset, r.object_id, r.position, r.size,
                    r.max_timestamp_ms, o.kind, o.index_position, o.index_len
             FROM inlet_object_ranges r JOIN inlet_objects o ON o.object_id = r.object_id
             WHERE r.stream_id = $1 AND o.state = $2 ORDER BY r.start_offset",
        )
        .bind(i(stream_id))
        .bind(ObjectState::Committed as i64)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|row| {
            let kind = if row.try_get::<i64, _>("kind")? == 1 {
                ObjectKind::Stream
            } else {
                ObjectKind::StreamSet
            };
            Ok((
                range_row(row)?,
                kind,
                u(row, "index_position")?,
                u(row, "index_len")?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
        Ok(Some((committed_end, ranges)))
    }

    /// Removes the row of an object that is gone from the object store.
    pub(crate) async fn forget_object(&self, object_id: u64) -> Result<()> {
        sqlx::query("DELETE FROM inlet_objects WHERE object_id = $1 AND state <> $2")
            .bind(i(object_id))
            .bind(ObjectState::Committed as i64)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    async fn sqlite(dir: &tempfile::TempDir) -> MetaStore {
        MetaStore::connect(&format!("sqlite://{}", dir.path().join("m.db").display()))
            .await
            .expect("connect")
    }

    fn one_range(object_id: u64, stream_id: u64, start: u64, end: u64) -> NewObject {
        NewObject {
            id: object_id,
            size: 10,
            index_position: 0,
            index_len: 0,
            ranges: vec![RangeRow {
                object_id,
                stream_id,
                start_offset: start,
                end_offset: end,
                position: 0,
                size: 10,
                max_timestamp_ms: 0,
            }],
        }
    }

    /// A stream taken by another node (its lease ended) raises the epoch: every commit the old
    /// owner makes under its epoch after that is refused and changes nothing, while the new
    /// owner's commits continue from the committed end.
    #[tokio::test]
    async fn a_commit_under_an_old_epoch_is_fenced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let meta = sqlite(&dir).await;
        let s = meta.create_stream("s", 0, None).await.expect("stream");
        let a = meta
            .acquire_stream(s.id, 1, &[1], 10)
            .await
            .expect("acquire")
            .expect("free");
        let a_epochs = BTreeMap::from([(s.id, a.epoch)]);
        let first = meta
            .prepare_object(ObjectKind::StreamSet, 1, 0)
            .await
            .expect("prepare");
        meta.commit_upload(&one_range(first, s.id, 0, 5), &a_epochs)
            .await
            .expect("the owner commits");
        assert!(
            meta.acquire_stream(s.id, 2, &[1, 2], 20)
                .await
                .expect("acquire")
                .is_none(),
            "a live owner keeps its stream"
        );
        let b = meta
            .acquire_stream(s.id, 2, &[2], 30)
            .await
            .expect("acquire")
            .expect("owner 1 is dead");
        assert!(b.epoch > a.epoch);
        assert_eq!(
            b.committed_end, 5,
            "the new owner continues at the committed end"
        );
        let late = meta
            .prepare_object(ObjectKind::StreamSet, 1, 0)
            .await
            .expect("prepare");
        let err = meta
            .commit_upload(&one_range(late, s.id, 5, 9), &a_epochs)
            .await
            .expect_err("the old owner is fenced");
        assert!(matches!(err, Error::Fenced { .. }), "{err}");
        assert_eq!(
            meta.object_state(late).await.expect("state"),
            Some(ObjectState::Prepared)
        );
        let err = meta
            .set_start_offset(s.id, a.epoch, 3)
            .await
            .expect_err("trim fenced");
        assert!(matches!(err, Error::Fenced { .. }), "{err}");
        let err = meta
            .expire_ranges(s.id, a.epoch, 5, &[], 0)
            .await
            .expect_err("retention fenced");
        assert!(matches!(err, Error::Fenced { .. }), "{err}");
        let (end, ranges) = meta.stream_index(s.id).await.expect("index").expect("live");
        assert_eq!(
            (end, ranges.len()),
            (5, 1),
            "nothing of the old owner landed"
        );
        let b_epochs = BTreeMap::from([(s.id, b.epoch)]);
        meta.commit_upload(&one_range(late, s.id, 5, 9), &b_epochs)
            .await
            .expect("the new owner commits");
        assert!(!meta
            .release_stream(s.id, 1, a.epoch, 40)
            .await
            .expect("release"));
        assert!(meta
            .release_stream(s.id, 2, b.epoch, 50)
            .await
            .expect("release"));
        let c = meta
            .acquire_stream(s.id, 1, &[1, 2], 60)
            .await
            .expect("acquire");
        assert_eq!(
            c.map(|c| c.committed_end),
            Some(9),
            "a released stream is free"
        );
        // Each take and each give-up is a move, with the owner before and after; the refused
        // take and the stale release are not.
        let moves: Vec<(u64, Option<u64>, Option<u64>)> = meta
            .moves(0)
            .await
            .expect("moves")
            .iter()
            .map(|m| (m.at_ms, m.from_node, m.to_node))
            .collect();
        assert_eq!(
            moves,
            vec![
                (10, None, Some(1)),
                (30, Some(1), Some(2)),
                (50, Some(2), None),
                (60, None, Some(1)),
            ]
        );
        assert_eq!(meta.moves(50).await.expect("moves").len(), 2);
    }

    #[tokio::test]
    async fn an_orphan_claim_loses_to_a_commit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let meta = MetaStore::connect(&format!("sqlite://{}", dir.path().join("m.db").display()))
            .await
            .expect("connect");
        let stream = meta.create_stream("s", 0, Some(0)).await.expect("stream");
        let epochs = BTreeMap::from([(stream.id, stream.epoch)]);
        let committed = meta
            .prepare_object(ObjectKind::StreamSet, 0, 0)
            .await
            .expect("prepare");
        let object = NewObject {
            id: committed,
            size: 10,
            index_position: 0,
            index_len: 0,
            ranges: vec![RangeRow {
                object_id: committed,
                stream_id: stream.id,
                start_offset: 0,
                end_offset: 1,
                position: 0,
                size: 10,
                max_timestamp_ms: 0,
            }],
        };
        meta.commit_upload(&object, &epochs).await.expect("commit");
        assert!(
            !meta.claim_orphan(committed, 1).await.expect("claim"),
            "committed objects stay"
        );
        let orphan = meta
            .prepare_object(ObjectKind::StreamSet, 0, 0)
            .await
            .expect("prepare");
        assert!(meta.claim_orphan(orphan, 1).await.expect("claim"));
        let late = NewObject {
            id: orphan,
            ..object
        };
        assert!(
            meta.commit_upload(&late, &epochs).await.is_err(),
            "a claimed object cannot commit"
        );
    }

    /// Statements in flight when the path to PostgreSQL goes silent (no FIN, no RST) fail
    /// within the relay's bound instead of holding their pooled connections until the kernel
    /// gives up, and the pool serves again, whole, once the path answers
    /// (`crate::pg_link`).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn statements_on_a_silent_postgresql_path_fail_within_the_bound_and_free_the_pool() {
        let Some(pg) = inlet_test_support::service_env("INLET_TEST_POSTGRES_URL") else {
            return;
        };
        let db = inlet_test_support::fresh_postgres_database(&pg).await;
        let parsed = url::Url::parse(&db).unwrap();
        let upstream = format!(
            "{}:{}",
            parsed.host_str().unwrap(),
            parsed.port().unwrap_or(5432)
        );
        let proxy = inlet_test_support::proxy::Proxy::start(&upstream);
        let silence = Duration::from_secs(2);
        let store = MetaStore::connect_with(&db.replacen(&upstream, &proxy.addr, 1), silence)
            .await
            .unwrap();
        let ask = |store: &MetaStore, sql: &'static str| {
            let pool = store.pool().clone();
            tokio::spawn(async move { sqlx::query(sql).fetch_one(&pool).await.map(|_| ()) })
        };
        let all = |tasks: Vec<tokio::task::JoinHandle<std::result::Result<(), sqlx::Error>>>| async {
            let mut results = Vec::new();
            for task in tasks {
                results.push(
                    tokio::time::timeout(Duration::from_secs(20), task)
                        .await
                        .expect("every statement ends within the relay's bound")
                        .unwrap(),
                );
            }
            results
        };
        // Every pooled connection at work: eight statements that take longer than the test
        // (the relay's bound counts from when each was sent).
        let asleep = "SELECT pg_sleep(20)";
        let asked = tokio::time::Instant::now();
        let stuck: Vec<_> = (0..8).map(|_| ask(&store, asleep)).collect();
        let running = format!(
            "SELECT count(*) - 7 FROM pg_stat_activity WHERE query = '{asleep}' AND state = 'active'"
        );
        assert!(
            inlet_test_support::postgres_until_positive(&db, &running, 20).await,
            "the eight statements run"
        );
        proxy.black_hole(true);
        let failed = all(stuck).await;
        assert!(failed.iter().all(|r| r.is_err()), "{failed:?}");
        assert!(asked.elapsed() >= silence, "{:?}", asked.elapsed());
        // The path answers again (the silent connections stay silent): more statements than
        // the pool holds all get an answer.
        proxy.black_hole(false);
        let answered = all((0..12).map(|_| ask(&store, "SELECT 1")).collect()).await;
        assert!(answered.iter().all(|r| r.is_ok()), "{answered:?}");
    }
}
