//! The node's side of the cluster: reading the inputs of the placement (`crate::placement`)
//! from the metadata store, acting on its answer (acquiring and releasing streams), the
//! topics' poll, the step-down on a lapsed lease, and measuring and publishing streams' loads.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use inlet_ingest::{Broker, BrokerAddr, ClusterView};
use inlet_storage::StreamId;
use sqlx::Row;
use std::sync::RwLock as StdRwLock;
use tokio_util::sync::CancellationToken;

use crate::members::{Member, Membership};
use crate::placement::*;

/// The streams' published weights, versioned with `MetaStore::migrate`.
const LOAD_MIGRATIONS: &[&str] = &["CREATE TABLE inlet_stream_load (
        stream_id BIGINT PRIMARY KEY,
        weight BIGINT NOT NULL,
        updated_ms BIGINT NOT NULL)"];

/// The cluster as this node last saw it: live nodes and every stream's owner.
#[derive(Debug)]
pub struct ClusterState {
    node_id: u64,
    view: StdRwLock<View>,
    /// `[cluster] load_unit_bytes`: produce bytes per second that weigh one partition.
    load_unit: u64,
    load: tokio::sync::Mutex<LoadMeters>,
    settled: std::sync::Mutex<Settled>,
    /// Whether the node's lease has lapsed by its own clock ([`follow_lease`]).
    lapsed: AtomicBool,
    /// Set when the lease lapses; cleared by the first pass run wholly under a held lease
    /// after it ([`assign_loop`]). Until then the node still stands down: what it owned may
    /// have been taken meanwhile, and only a pass tells.
    unchecked: AtomicBool,
}

#[derive(Debug, Default, Clone)]
struct View {
    members: Vec<Member>,
    /// Live node ids, sorted.
    live: Vec<u64>,
    /// Stream → (owner, epoch), for owned streams.
    owners: HashMap<StreamId, (u64, u64)>,
    /// Stream → weight, for streams whose owner published one (1 otherwise).
    weights: HashMap<StreamId, u64>,
}

impl ClusterState {
    /// The node `node_id`'s state; `load_unit` is `[cluster] load_unit_bytes`.
    pub fn new(node_id: u64, load_unit: u64) -> Arc<Self> {
        Arc::new(ClusterState {
            node_id,
            view: StdRwLock::new(View::default()),
            load_unit: load_unit.max(1),
            load: Default::default(),
            settled: Default::default(),
            lapsed: AtomicBool::new(false),
            unchecked: AtomicBool::new(false),
        })
    }

    /// Creates the table of published weights (once per metadata store).
    pub async fn migrate(meta: &inlet_storage::MetaStore) -> anyhow::Result<()> {
        meta.migrate("cluster.load", LOAD_MIGRATIONS).await?;
        Ok(())
    }

    /// Every stream's weight as last read (streams without one weigh 1).
    pub fn weights(&self) -> HashMap<StreamId, u64> {
        self.read().weights.clone()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, View> {
        // A pass that panicked leaves a whole view behind (it is replaced in one write).
        self.view.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the node's lease has lapsed by its own clock: it leads and coordinates
    /// nothing ([`follow_lease`]).
    pub fn lapsed(&self) -> bool {
        self.lapsed.load(Ordering::Relaxed)
    }

    /// Whether the node stands down: its lease lapsed, or has held again but no pass has yet
    /// checked what the node still owns.
    fn standing_down(&self) -> bool {
        self.lapsed() || self.unchecked.load(Ordering::Relaxed)
    }

    /// The live nodes as last seen.
    pub fn live_members(&self) -> Vec<Member> {
        self.read().members.clone()
    }

    /// Every stream's owner and epoch as last seen.
    pub fn owners(&self) -> HashMap<StreamId, (u64, u64)> {
        self.read().owners.clone()
    }
}

impl ClusterView for ClusterState {
    fn brokers(&self) -> Vec<BrokerAddr> {
        self.read()
            .members
            .iter()
            .filter_map(|m| {
                let (host, port) = m.kafka_addr.rsplit_once(':')?;
                Some(BrokerAddr {
                    node_id: i32::try_from(m.node_id).ok()?,
                    host: host.to_string(),
                    port: port.parse().ok()?,
                    listeners: inlet_ingest::config::parse_listeners(&m.listeners)
                        .unwrap_or_default(),
                })
            })
            .collect()
    }

    fn leader(&self, stream: StreamId) -> Option<(i32, i32)> {
        let view = self.read();
        let &(node, epoch) = view.owners.get(&stream)?;
        if !view.live.contains(&node) || (node == self.node_id && self.standing_down()) {
            return None;
        }
        Some((
            i32::try_from(node).ok()?,
            i32::try_from(epoch).unwrap_or(i32::MAX),
        ))
    }

    fn stood_down(&self) -> bool {
        self.standing_down()
    }

    fn coordinator(&self, group_id: &str) -> Option<i32> {
        let view = self.read();
        rendezvous(&format!("group:{group_id}"), &view.live)
            .filter(|&n| n != self.node_id || !self.standing_down())
            .and_then(|n| i32::try_from(n).ok())
    }
}

/// How often a node reads the topics other nodes created, deleted or reconfigured, and the
/// dynamic broker configs (`inlet_ingest::dynamic_config`), apart from the assigner's pass
/// (which may wait on a takeover's replay): a change reaches every node within about this
/// long. Four small queries per poll (a row per topic, a row per dynamic config of the
/// cluster and of this node, the ACLs' version); the streams are read again only when a topic's partitions are
/// not all known.
const TOPICS_POLL: Duration = Duration::from_millis(250);

/// Runs the assigner, the topics' poll ([`TOPICS_POLL`]) and the step-down on a lapsed
/// lease ([`follow_lease`]), until `stop` (see the module doc).
pub async fn run(
    broker: Arc<Broker>,
    state: Arc<ClusterState>,
    every: Duration,
    lapsed: tokio::sync::watch::Receiver<bool>,
    stop: CancellationToken,
) {
    tokio::join!(
        assign_loop(&broker, &state, every, lapsed.clone(), &stop),
        poll_topics(&broker, lapsed.clone(), &stop),
        follow_lease(&broker, &state, lapsed, &stop)
    );
}

/// Runs `step` (a pass, or a poll of the topics) for at most [`PASS_WAIT`], and gives it up
/// the moment the node's lease lapses or holds again: a step that outlives either was waiting
/// on a metadata store the node could not reach, likely on a connection that went silent
/// (one the pool then drops), and the next step starts afresh. `None` when given up.
async fn bounded_step<T>(
    step: impl std::future::Future<Output = T>,
    lapsed: &mut tokio::sync::watch::Receiver<bool>,
) -> Option<T> {
    lapsed.borrow_and_update();
    tokio::select! {
        done = tokio::time::timeout(PASS_WAIT, step) => done.ok(),
        _ = lapsed.changed() => None,
    }
}

/// Brings the node's topics up to date every [`TOPICS_POLL`] until `stop`.
async fn poll_topics(
    broker: &Broker,
    mut lapsed: tokio::sync::watch::Receiver<bool>,
    stop: &CancellationToken,
) {
    loop {
        let refresh = async {
            match broker.topics().refresh().await {
                Ok(true) => Ok(()),
                Ok(false) => match broker.store().refresh_streams().await {
                    Ok(()) => broker.topics().refresh().await.map(drop),
                    Err(e) => Err(e.into()),
                },
                Err(e) => Err(e),
            }?;
            // Dynamic broker configs, ACLs and client quotas changed through other nodes.
            broker.reload_configs().await?;
            broker.reload_acls().await?;
            broker.reload_quotas().await
        };
        let refreshed = match bounded_step(refresh, &mut lapsed).await {
            Some(r) => r.map_err(|e| e.to_string()),
            None => Err("no answer from the metadata store".to_string()),
        };
        if let Err(e) = refreshed {
            tracing::warn!(error = %e, "reading the topics failed; trying again");
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(TOPICS_POLL) => {}
        }
    }
}

/// Stands the node down whenever its lease lapses by its own clock (`lapsed`, from
/// `crate::members::Membership::lapsed`), until `stop`: Produce, Fetch and ListOffsets answer
/// `NOT_LEADER_OR_FOLLOWER` (`Broker::check_standing`), Metadata and FindCoordinator name it
/// for nothing, its Kafka connections are closed and new ones turned away
/// (`Broker::stand_down`: its stale view would keep clients on partitions others took), and it
/// drops its groups' state. What it owns stays as it is (no word to the
/// metadata store, which it may not reach): appends in flight commit or are fenced under their
/// epochs. Once a renewal succeeds, its next pass lets go of what another node took meanwhile,
/// and only then does it serve again what it still owns: serving at once answered produce
/// from a producer state other nodes had moved past (`OUT_OF_ORDER_SEQUENCE_NUMBER`, fatal to
/// librdkafka) until the pass let the partition go.
async fn follow_lease(
    broker: &Broker,
    state: &ClusterState,
    mut lapsed: tokio::sync::watch::Receiver<bool>,
    stop: &CancellationToken,
) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            changed = lapsed.changed() => if changed.is_err() { return },
        }
        let now = *lapsed.borrow_and_update();
        if now {
            state.unchecked.store(true, Ordering::Relaxed);
        }
        state.lapsed.store(now, Ordering::Relaxed);
        // Standing up waits for a pass that checks what the node still owns (`assign_loop`).
        broker.stand_down(state.standing_down());
        if now {
            let groups = broker.forget_groups_elsewhere();
            tracing::warn!(
                groups = groups.len(),
                "standing down: this node leads no partition and coordinates no group until it renews its lease"
            );
        }
    }
}

async fn assign_loop(
    broker: &Broker,
    state: &ClusterState,
    every: Duration,
    mut lapsed: tokio::sync::watch::Receiver<bool>,
    stop: &CancellationToken,
) {
    // The lease as this loop saw it at a pass's start, to tell a pass run wholly under a held
    // lease (`bounded_step` marks the changes seen on `lapsed`).
    let mut lease = lapsed.clone();
    loop {
        let held = !*lease.borrow_and_update();
        match bounded_step(pass(broker, state), &mut lapsed).await {
            Some(Ok(())) => {
                let unchanged = !lease.has_changed().unwrap_or(true);
                if held && unchanged && state.unchecked.swap(false, Ordering::Relaxed) {
                    broker.stand_down(state.standing_down());
                    tracing::info!(
                        "serving again: a pass under the renewed lease let go of what other \
                         nodes took meanwhile"
                    );
                }
            }
            Some(Err(e)) => {
                tracing::warn!(error = %format!("{e:#}"), "cluster pass failed; trying again")
            }
            None => {
                tracing::warn!(
                    "cluster pass given up (the metadata store did not answer, or the lease \
                     changed meanwhile); trying again"
                );
                // At once (while the lease is followed at all): after a renewal, the node
                // serves again only once a pass has run.
                if lease.has_changed().is_ok() {
                    continue;
                }
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}

/// One reconciliation of this node with the assignment.
pub async fn pass(broker: &Broker, state: &ClusterState) -> anyhow::Result<()> {
    let store = broker.store();
    let me = state.node_id;
    let now = broker.clock().now_ms() as i64;
    // Live by the metadata store's clock, the one every lease was written with.
    let (members, store_now) = Membership::members(store.meta()).await?;
    let members: Vec<Member> = members
        .into_iter()
        .filter(|m| m.expires_ms > store_now)
        .collect();
    let live: Vec<u64> = members.iter().map(|m| m.node_id).collect();
    store.refresh_streams().await?;
    broker.topics().refresh().await?;
    let defaults = &broker.config().topic_defaults;
    let table_topics: HashMap<String, TableKey> = broker
        .topics()
        .list()
        .iter()
        .filter_map(|t| {
            t.configs.table_topic(&t.name, defaults)?;
            Some((
                t.name.clone(),
                TableKey {
                    id: t.id.to_string(),
                },
            ))
        })
        .collect();
    let rows = store.stream_owners().await?;
    let mut weights = load_weights(store.meta()).await?;
    forget_deleted(store.meta(), &mut weights, &rows).await?;
    let mut keys: BTreeMap<String, usize> = BTreeMap::new();
    {
        let mut settled = state.settled.lock().unwrap_or_else(|e| e.into_inner());
        let in_use = settled.observe(&weights, now);
        for (info, _, _) in &rows {
            *keys
                .entry(stream_key(&info.name, &table_topics))
                .or_default() += in_use.get(&info.id).copied().unwrap_or(1) as usize;
        }
    }
    let assignment = assign(&keys, &live);
    // Streams assigned to another live node: handed over after the loop, their producer
    // snapshots saved first in one transaction.
    let mut handovers = Vec::new();
    for (info, owner, _) in rows {
        let want = assignment
            .get(&stream_key(&info.name, &table_topics))
            .copied();
        let seen = Seen {
            me,
            mine: store.owns(info.id),
            owner,
            want,
            live: &live,
            lapsed: state.lapsed(),
        };
        match decide(&seen) {
            Step::Nothing => {}
            Step::Forget => store.release(info.id).await?,
            Step::Take => {
                take(store, info.id, &live).await;
            }
            Step::HandOver => handovers.push(info.id),
            Step::Free => {
                if take(store, info.id, &live).await {
                    store.release(info.id).await?;
                }
            }
        }
    }
    inlet_ingest::producer_image::save_now(broker, &handovers).await;
    for id in handovers {
        store.release(id).await?;
    }
    let owners = store
        .stream_owners()
        .await?
        .into_iter()
        .filter_map(|(info, owner, epoch)| Some((info.id, (owner?, epoch))))
        .collect();
    measure(broker, state, now, &weights).await?;
    *state.view.write().unwrap_or_else(|e| e.into_inner()) = View {
        members,
        live,
        owners,
        weights,
    };
    // Groups that moved to another node: their state here is stale from now on.
    let gone = broker.forget_groups_elsewhere();
    if !gone.is_empty() {
        tracing::info!(groups = ?gone, "groups coordinated by other nodes now: dropped their state here");
    }
    Ok(())
}

/// How long a pass (or a poll of the topics) may take in all before it is given up and started
/// again ([`bounded_step`]): a statement on a connection whose path went silent would
/// otherwise hang the pass, and with it every later one, until the kernel gives up on the
/// connection. The pool drops such a connection once the pass lets go of it
/// (`inlet_storage::meta`). Takes are bounded one by one too ([`TAKE_WAIT`]).
const PASS_WAIT: Duration = Duration::from_secs(30);

/// How long a pass waits to take one stream. A takeover waits for the stream's row lock, which
/// a paused or cut-off owner may hold inside a transaction until PostgreSQL ends its session
/// (`idle_in_transaction_session_timeout`); the metadata store bounds the wait too
/// (`lock_timeout`), this bounds it when the store does not answer at all.
const TAKE_WAIT: Duration = Duration::from_secs(5);

/// Takes stream `id` for this node if it is free or its owner is not live; returns whether it
/// did. A take that fails or waits past [`TAKE_WAIT`] is logged and left to the next pass, so
/// one stuck stream never holds up the others.
async fn take(store: &inlet_storage::StreamStore, id: StreamId, live: &[u64]) -> bool {
    match tokio::time::timeout(TAKE_WAIT, store.acquire(id, live)).await {
        Ok(Ok(taken)) => taken,
        Ok(Err(e)) => {
            tracing::warn!(stream = id, error = %e, "cannot take the stream; retrying at the next pass");
            false
        }
        Err(_) => {
            tracing::warn!(stream = id, wait_ms = TAKE_WAIT.as_millis() as u64, "taking the stream waited too long (its owner may hold its row); retrying at the next pass");
            false
        }
    }
}

/// The published weights (see [`measure`]).
pub async fn load_weights(
    meta: &inlet_storage::MetaStore,
) -> anyhow::Result<HashMap<StreamId, u64>> {
    let rows = sqlx::query("SELECT stream_id, weight FROM inlet_stream_load")
        .fetch_all(meta.pool())
        .await?;
    rows.iter()
        .map(|r| {
            let (id, w): (i64, i64) = (r.try_get("stream_id")?, r.try_get("weight")?);
            Ok((id as StreamId, w.max(1) as u64))
        })
        .collect()
}

/// Deletes the published weights of streams that are gone (their topic was deleted), which
/// every pass would read otherwise. Stream ids are never reused, and a weight is published only
/// for a stream owned for [`LOAD_WARMUP_MS`], so every weight of a live stream has its stream in
/// `streams`, read just before.
async fn forget_deleted(
    meta: &inlet_storage::MetaStore,
    weights: &mut HashMap<StreamId, u64>,
    streams: &[(inlet_storage::StreamInfo, Option<u64>, u64)],
) -> anyhow::Result<()> {
    let live: std::collections::HashSet<StreamId> = streams.iter().map(|(s, _, _)| s.id).collect();
    let mut gone: Vec<StreamId> = weights
        .keys()
        .copied()
        .filter(|id| !live.contains(id))
        .collect();
    if gone.is_empty() {
        return Ok(());
    }
    // In one order on every node, so that two nodes deleting at once cannot deadlock.
    gone.sort_unstable();
    let mut tx = meta.pool().begin().await?;
    for id in &gone {
        sqlx::query("DELETE FROM inlet_stream_load WHERE stream_id = $1")
            .bind(*id as i64)
            .execute(&mut *tx)
            .await?;
        weights.remove(id);
    }
    tx.commit().await?;
    tracing::info!(streams = ?gone, "forgot the weights of deleted streams");
    Ok(())
}

/// Measures the produce rate of the streams this node owns (averaged over about
/// [`LOAD_WINDOW_MS`], see [`Meter`]) and, every [`LOAD_PUBLISH_EVERY_MS`], publishes the weights that
/// changed enough ([`weight_changed`]) for streams it has measured for [`LOAD_WARMUP_MS`].
/// Every node reads the weights at its next pass, so the assignment balances bytes in, and
/// a stream keeps its weight when it moves.
async fn measure(
    broker: &Broker,
    state: &ClusterState,
    now: i64,
    published: &HashMap<StreamId, u64>,
) -> anyhow::Result<()> {
    let mut meters = state.load.lock().await;
    let counters = broker.store().owned_appended_bytes();
    let owned: std::collections::HashSet<StreamId> = counters.iter().map(|(id, _)| *id).collect();
    meters.meters.retain(|id, _| owned.contains(id));
    for (id, bytes) in counters {
        meters
            .meters
            .entry(id)
            .or_insert(Meter::new(bytes, now))
            .observe(bytes, now);
    }
    if now - meters.published_ms < LOAD_PUBLISH_EVERY_MS {
        return Ok(());
    }
    meters.published_ms = now;
    let changed: Vec<(StreamId, u64)> = meters
        .meters
        .iter()
        .filter(|(_, m)| now - m.since_ms >= LOAD_WARMUP_MS)
        .filter_map(|(id, m)| {
            let measured = load(m.rate, state.load_unit);
            let current = published.get(id).copied().unwrap_or(1);
            weight_changed(current, measured).then_some((*id, weight(measured)))
        })
        .collect();
    drop(meters);
    if changed.is_empty() {
        return Ok(());
    }
    let mut tx = broker.store().meta().pool().begin().await?;
    for (id, w) in &changed {
        sqlx::query(
            "INSERT INTO inlet_stream_load (stream_id, weight, updated_ms) VALUES ($1, $2, $3)
             ON CONFLICT (stream_id) DO UPDATE
             SET weight = excluded.weight, updated_ms = excluded.updated_ms",
        )
        .bind(*id as i64)
        .bind(*w as i64)
        .bind(now)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    tracing::info!(streams = changed.len(), weights = ?changed, "published stream weights (bytes in)");
    Ok(())
}

/// Hands every stream this node owns to the others (a drain): they take them at their next
/// pass, as this node has left the membership first. Nothing is copied.
pub async fn release_all(broker: &Broker) {
    let owned = broker.store().owned_streams();
    let ids: Vec<StreamId> = owned.iter().map(|(info, _)| info.id).collect();
    inlet_ingest::producer_image::save_now(broker, &ids).await;
    for (info, _) in owned {
        if let Err(e) = broker.store().release(info.id).await {
            tracing::warn!(stream = info.id, error = %e, "could not hand a stream over; its lease will end");
        }
    }
}
