//! A node of a cluster (docs/architecture.md, "Cluster"): which node owns which stream, and
//! which coordinates which group, among the nodes whose leases are live (`crate::members`).
//!
//! Every node computes the same assignment from the same inputs, with no coordinator of its
//! own ([`assign`]): rendezvous hashing of each key over the live node ids, bounded so that
//! every node takes at most its fair share of the streams' weight. A stream's load is 1 plus
//! its produce rate over `[cluster] load_unit_bytes`; its weight is the load rounded to a
//! power of two, published by its owner when the load moved far from it ([`measure`]) and
//! taken in by the assignment once the published weights settle ([`Settled`]), so the nodes
//! balance bytes in, swings move nothing, and a new load does not move partitions back and
//! forth. A stream's key is its name, except that a table topic's control stream goes by the
//! topic's id ([`stream_key`]): the table's coordinator runs where it is owned, while the
//! table's partitions, keyed or not, spread and convert where they are owned. Control streams
//! are pinned to the rendezvous of their key ([`PINNED_PREFIX`]): a coordinator moves only when
//! the live nodes change, never for the partitions' weights, since a moved coordinator
//! reopens its table (and a keyed one rebuilds its index from the table's files). A group goes
//! to the rendezvous of its id.
//!
//! The assigner ([`run`]) reconciles the node with the assignment every `[cluster]
//! rebalance_ms` (and at once at start):
//! - streams assigned here that are free, or whose owner's lease ended, are acquired (a new
//!   epoch: the previous owner can commit nothing more, see `inlet_storage::StreamStore::acquire`);
//! - streams owned here but assigned to another live node are released, after their appends
//!   in flight finish; that node acquires them at its next pass. Nothing is copied.
//! - topics and streams other nodes created, deleted or reconfigured are picked up (also
//!   every [`TOPICS_POLL`] apart from the pass, so a change reaches every node within a
//!   second even while a pass waits on a takeover).
//!
//! Safety does not rest on the leases' timing: every metadata commit of a stream is fenced by
//! its epoch in PostgreSQL, and an append is acknowledged only after its commit. A node paused
//! past its lease (SIGSTOP) finds every commit refused when it runs again, so it acknowledges
//! nothing more. The lease only decides how soon another node may take over.
//!
//! A node whose lease lapsed by its own clock (no renewal answered within a ttl of its start:
//! the metadata store is unreachable, or the node was paused) stands down at once
//! ([`follow_lease`]): it leads no partition (Produce and Fetch answer `NOT_LEADER_OR_FOLLOWER`,
//! Metadata names no leader for what it holds) and coordinates no group until a renewal
//! succeeds; then it serves what it still owns. Clients so leave it within about its lease,
//! instead of waiting on requests it cannot acknowledge.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use inlet_ingest::{Broker, BrokerAddr, ClusterView};
use inlet_storage::StreamId;
use std::sync::RwLock as StdRwLock;
use tokio_util::sync::CancellationToken;

use crate::members::{Member, Membership};
use sqlx::Row;

/// Prefix of table topics' control streams, followed by the topic's name.
const CONTROL_PREFIX: &str = "table-control/";

/// Prefix of the assignment keys that [`assign`] pins to their rendezvous node: a table's
/// control stream (its coordinator), followed by the topic's id.
const PINNED_PREFIX: &str = "table:";

/// The streams' published weights, versioned with `MetaStore::migrate`.
const LOAD_MIGRATIONS: &[&str] = &["CREATE TABLE inlet_stream_load (
        stream_id BIGINT PRIMARY KEY,
        weight BIGINT NOT NULL,
        updated_ms BIGINT NOT NULL)"];
/// A stream's rate is averaged over about this long.
const LOAD_WINDOW_MS: f64 = 10_000.0;
/// A node measures a stream it took this long before publishing a weight for it.
const LOAD_WARMUP_MS: i64 = 10_000;
/// How often a node looks for weights to publish.
const LOAD_PUBLISH_EVERY_MS: i64 = 5_000;
/// The assignment takes in published weights once none changed for this long ([`Settled`]):
/// the nodes publish the weights of a new load within about two publish periods of each
/// other (each on its own clock, after its own warm-up), and balancing on half of them would
/// move partitions that the other half then moves back.
const WEIGHTS_SETTLE_MS: i64 = 2 * LOAD_PUBLISH_EVERY_MS;
/// ... or once the weights it uses are this old, so that loads that never stop changing
/// somewhere still get balanced.
const WEIGHTS_STALE_MS: i64 = 6 * LOAD_PUBLISH_EVERY_MS;

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

/// The weights the assignment uses: the published ones as they were when they last settled.
///
/// Published weights arrive a node at a time (each owner publishes its own streams' weights,
/// see [`measure`]), but the assignment weighs every stream against the others: a node that
/// took in one node's new weights before the rest would balance on them and move partitions,
/// then move them back as the rest arrive. So the assignment goes on with the weights it has
/// until the published ones have not changed for [`WEIGHTS_SETTLE_MS`] (or the ones it has
/// are [`WEIGHTS_STALE_MS`] old), then takes them in all at once. Every node sees the same
/// rows within a pass of the others, so they take them in within a pass of each other too.
/// Nothing else waits: a node joining or leaving, or a new topic, moves streams at once under
/// the weights in use.
#[derive(Debug, Default)]
struct Settled {
    /// The weights in use, and when they were taken in (`None` before the first pass).
    in_use: Option<(HashMap<StreamId, u64>, i64)>,
    /// The published weights as last read, and when they last changed.
    latest: HashMap<StreamId, u64>,
    changed_ms: i64,
}

impl Settled {
    /// Takes in the published weights read at `now` (ms); returns the weights to use.
    fn observe(&mut self, published: &HashMap<StreamId, u64>, now: i64) -> &HashMap<StreamId, u64> {
        if *published != self.latest {
            self.latest = published.clone();
            self.changed_ms = now;
        }
        let take = match &self.in_use {
            // A node starting takes the weights as they are: the others' are the same or
            // about to be.
            None => true,
            Some((in_use, since)) => {
                *in_use != self.latest
                    && (now - self.changed_ms >= WEIGHTS_SETTLE_MS
                        || now - since >= WEIGHTS_STALE_MS)
            }
        };
        if take {
            self.in_use = Some((self.latest.clone(), now));
        }
        &self.in_use.as_ref().expect("taken in above").0
    }
}

/// The rates of the streams this node owns, and when it last published weights.
#[derive(Debug, Default)]
struct LoadMeters {
    meters: HashMap<StreamId, Meter>,
    published_ms: i64,
}

/// One stream's bytes counter as last read, and its averaged rate (bytes per second): the
/// plain average since the node took the stream for the first two windows, then a moving
/// average (so a stream that just moved is not taken for idle).
#[derive(Debug, Clone, Copy)]
struct Meter {
    bytes: u64,
    at_ms: i64,
    rate: f64,
    since_ms: i64,
    since_bytes: u64,
}

impl Meter {
    fn new(bytes: u64, now: i64) -> Meter {
        Meter {
            bytes,
            at_ms: now,
            rate: 0.0,
            since_ms: now,
            since_bytes: bytes,
        }
    }

    /// Takes in the stream's counter at `now` (ms).
    fn observe(&mut self, bytes: u64, now: i64) {
        let elapsed = now - self.at_ms;
        if bytes < self.bytes {
            // The stream was reopened: its counter started again.
            *self = Meter::new(bytes, now);
        } else if elapsed >= 500 {
            let owned_for = (now - self.since_ms) as f64;
            if owned_for <= 2.0 * LOAD_WINDOW_MS {
                self.rate = (bytes - self.since_bytes) as f64 * 1000.0 / owned_for;
            } else {
                let rate = (bytes - self.bytes) as f64 * 1000.0 / elapsed as f64;
                let alpha = 1.0 - (-(elapsed as f64) / LOAD_WINDOW_MS).exp();
                self.rate += alpha * (rate - self.rate);
            }
            self.bytes = bytes;
            self.at_ms = now;
        }
    }
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

/// FNV-1a of `bytes`: stable across nodes, builds and platforms (unlike the standard hasher).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// SplitMix64's finalizer: spreads `x` over all 64 bits.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The node `key` belongs to among `nodes` (highest random weight): when a node joins or
/// leaves, only the keys it gains or held move.
pub fn rendezvous(key: &str, nodes: &[u64]) -> Option<u64> {
    let h = fnv1a(key.as_bytes());
    nodes.iter().copied().max_by_key(|&n| (mix(h ^ mix(n)), n))
}

/// Which node each key goes to, for keys of `size` streams each. Pinned keys
/// ([`PINNED_PREFIX`]) go to their rendezvous node, whatever the sizes; the others fill
/// around them: every node takes at most its fair share of the total (over the live nodes,
/// rounded up), each key going to the node of highest rendezvous weight that still has room
/// (to the least loaded one when a key is larger than any room left). Keys are placed pinned
/// first, then largest first, then in name order, so every node that sees the same keys and
/// nodes computes the same answer.
pub fn assign(keys: &BTreeMap<String, usize>, nodes: &[u64]) -> HashMap<String, u64> {
    let mut out = HashMap::new();
    if nodes.is_empty() {
        return out;
    }
    let total: usize = keys.values().sum();
    let cap = total.div_ceil(nodes.len());
    let mut load: BTreeMap<u64, usize> = nodes.iter().map(|&n| (n, 0)).collect();
    let mut order: Vec<(&String, usize)> = keys.iter().map(|(k, s)| (k, *s)).collect();
    order.sort_by_key(|(k, s)| (!k.starts_with(PINNED_PREFIX), std::cmp::Reverse(*s), *k));
    for (key, size) in order {
        let node = if key.starts_with(PINNED_PREFIX) {
            rendezvous(key, nodes).expect("nodes is not empty")
        } else {
            let h = fnv1a(key.as_bytes());
            let mut ranked: Vec<u64> = nodes.to_vec();
            ranked.sort_by_key(|&n| std::cmp::Reverse((mix(h ^ mix(n)), n)));
            ranked
                .iter()
                .copied()
                .find(|n| load[n] + size <= cap)
                .unwrap_or_else(|| {
                    *load
                        .iter()
                        .min_by_key(|(n, l)| (**l, **n))
                        .map(|(n, _)| n)
                        .expect("nodes is not empty")
                })
        };
        *load.get_mut(&node).expect("a live node") += size;
        out.insert(key.clone(), node);
    }
    out
}

/// A table topic as the assignment sees it: its id.
#[derive(Debug, Clone)]
struct TableKey {
    id: String,
}

/// The assignment key of a stream. A table topic's control stream goes by its topic's id (its
/// coordinator runs where it is owned). A table topic's partitions, keyed (upsert or CDC) or
/// not, and any other stream, go by their name: they spread over the nodes and are converted
/// where they are owned (a keyed table's deletes are then made by its coordinator, see
/// `inlet_table_coordinator::convert`).
fn stream_key(name: &str, table_topics: &HashMap<String, TableKey>) -> String {
    if let Some(topic) = name.strip_prefix(CONTROL_PREFIX) {
        if let Some(t) = table_topics.get(topic) {
            return format!("{PINNED_PREFIX}{}", t.id);
        }
    }
    name.to_string()
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
pub(crate) async fn run(
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
pub(crate) async fn pass(broker: &Broker, state: &ClusterState) -> anyhow::Result<()> {
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
        let mine = store.owns(info.id);
        if mine && owner != Some(me) {
            // Taken while this node was away (paused past its lease): its commits are fenced
            // already; stop serving it from memory too.
            store.release(info.id).await?;
            continue;
        }
        if !live.contains(&me) || state.lapsed() {
            continue; // not a member (leaving, or lost its lease): take nothing
        }
        let Some(&want) = assignment.get(&stream_key(&info.name, &table_topics)) else {
            continue;
        };
        let owner_live = owner.is_some_and(|o| live.contains(&o));
        if want == me && !mine && (owner == Some(me) || !owner_live) {
            take(store, info.id, &live).await;
        } else if want != me && mine {
            handovers.push(info.id);
        } else if want != me && owner == Some(me) {
            // This node's from an earlier run: free it for its node.
            if take(store, info.id, &live).await {
                store.release(info.id).await?;
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
pub(crate) async fn load_weights(
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

/// The load of a stream produced to at `rate` bytes per second: 1 (what any partition costs)
/// plus one per `unit` bytes per second.
pub fn load(rate: f64, unit: u64) -> f64 {
    1.0 + rate.max(0.0) / unit as f64
}

/// The weight published for a load: the nearest power of two, so that partitions of about the
/// same load weigh the same and the assignment (which places heavier keys first) keeps them
/// where rendezvous put them.
pub fn weight(load: f64) -> u64 {
    1u64 << load.max(1.0).log2().round().min(62.0) as u32
}

/// Whether a measured load is far enough from the published weight to publish a new one:
/// 1.68× (three quarters of a power of two) or more either way, so swings around a weight
/// never move partitions back and forth.
pub fn weight_changed(published: u64, load: f64) -> bool {
    (load.max(1.0).log2() - (published.max(1) as f64).log2()).abs() >= 0.75
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
pub(crate) async fn release_all(broker: &Broker) {
    let owned = broker.store().owned_streams();
    let ids: Vec<StreamId> = owned.iter().map(|(info, _)| info.id).collect();
    inlet_ingest::producer_image::save_now(broker, &ids).await;
    for (info, _) in owned {
        if let Err(e) = broker.store().release(info.id).await {
            tracing::warn!(stream = info.id, error = %e, "could not hand a stream over; its lease will end");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn rendezvous_moves_only_what_a_joining_node_gains() {
        let keys: Vec<String> = (0..600).map(|i| format!("kafka/t/{i}")).collect();
        let before: Vec<u64> = keys
            .iter()
            .map(|k| rendezvous(k, &[1, 2, 3]).expect("a node"))
            .collect();
        for node in [1, 2, 3] {
            let n = before.iter().filter(|&&o| o == node).count();
            assert!((150..250).contains(&n), "node {node} holds {n} of 600");
        }
        let after: Vec<u64> = keys
            .iter()
            .map(|k| rendezvous(k, &[1, 2, 3, 4]).expect("a node"))
            .collect();
        let moved = before.iter().zip(&after).filter(|(b, a)| b != a).count();
        assert!(
            after.iter().zip(&before).all(|(a, b)| a == b || *a == 4),
            "keys move only to the new node"
        );
        assert!((100..200).contains(&moved), "{moved} of 600 moved");
        assert_eq!(rendezvous("x", &[]), None);
    }

    #[test]
    fn every_node_gets_a_fair_share_and_a_join_moves_few() {
        let keys: BTreeMap<String, usize> = (0..12).map(|i| (format!("kafka/t/{i}"), 1)).collect();
        let count = |a: &HashMap<String, u64>, n: u64| a.values().filter(|&&o| o == n).count();
        let three = assign(&keys, &[1, 2, 3]);
        for n in [1, 2, 3] {
            assert_eq!(count(&three, n), 4, "{three:?}");
        }
        let four = assign(&keys, &[1, 2, 3, 4]);
        for n in [1, 2, 3, 4] {
            assert_eq!(count(&four, n), 3, "{four:?}");
        }
        let moved = keys.keys().filter(|k| three[*k] != four[*k]).count();
        assert!(moved <= 6, "{moved} of 12 moved for one join");
        // A key of 6 streams stays whole; the rest fill around it.
        let mut mixed = keys.clone();
        mixed.insert("kafka/big".into(), 6);
        let a = assign(&mixed, &[1, 2, 3]);
        let loads: Vec<usize> = [1, 2, 3]
            .iter()
            .map(|&n| {
                mixed
                    .iter()
                    .filter(|(k, _)| a[*k] == n)
                    .map(|(_, s)| s)
                    .sum()
            })
            .collect();
        assert!(loads.iter().all(|&l| l == 6), "{loads:?}");
        assert!(assign(&keys, &[]).is_empty());
    }

    #[test]
    fn hot_partitions_spread_by_weight_and_small_swings_publish_nothing() {
        let unit = 256 * 1024;
        assert_eq!(weight(load(0.0, unit)), 1);
        assert_eq!(load(1024.0 * 1024.0, unit), 5.0);
        assert_eq!(weight(5.0), 4);
        assert_eq!(weight(21.0), 16);
        // Three hot partitions (5 MiB/s each) among nine idle ones, on three nodes: each
        // node takes one hot one, whatever rendezvous prefers.
        let mut keys: BTreeMap<String, usize> =
            (0..9).map(|i| (format!("kafka/t/{i}"), 1)).collect();
        for i in 9..12 {
            let w = weight(load(5.0 * 1048576.0, unit)) as usize;
            keys.insert(format!("kafka/t/{i}"), w);
        }
        let a = assign(&keys, &[1, 2, 3]);
        let hot: BTreeSet<u64> = (9..12).map(|i| a[&format!("kafka/t/{i}")]).collect();
        assert_eq!(hot.len(), 3, "{a:?}");
        for n in [1, 2, 3] {
            let on_node: usize = keys
                .iter()
                .filter(|(k, _)| a[*k] == n)
                .map(|(_, w)| w)
                .sum();
            assert_eq!(on_node, 16 + 3, "node {n}: {a:?}");
        }
        // Partitions of about the same load weigh the same: the assignment is the one by
        // count.
        let even: BTreeMap<String, usize> = (0..12)
            .map(|i| {
                (
                    format!("kafka/t/{i}"),
                    weight(12.0 + i as f64 * 0.8) as usize,
                )
            })
            .collect();
        let by_count: BTreeMap<String, usize> = even.keys().map(|k| (k.clone(), 1)).collect();
        assert_eq!(assign(&even, &[1, 2, 3]), assign(&by_count, &[1, 2, 3]));

        // Publishing: 1.68x apart or more, either way.
        assert!(weight_changed(1, 3.0));
        assert!(!weight_changed(1, 1.5));
        assert!(!weight_changed(16, 26.0));
        assert!(weight_changed(16, 27.0));
        assert!(!weight_changed(16, 9.6));
        assert!(weight_changed(16, 9.4));
    }

    #[test]
    fn weights_are_taken_in_once_they_settle_or_grow_stale() {
        let base: HashMap<StreamId, u64> = HashMap::from([(1, 4)]);
        let mut s = Settled::default();
        // A node starting takes the weights as they are.
        assert_eq!(s.observe(&base, 0), &base);
        // Publications at 1 s, 5 s and 9 s: the weights in use stay until 10 s after the last.
        let published = |now: i64| {
            let mut p = base.clone();
            for (stream, at) in [(2, 1_000), (3, 5_000), (4, 9_000)] {
                if now >= at {
                    p.insert(stream, 16);
                }
            }
            p
        };
        for now in (1_000..19_000).step_by(1_000) {
            assert_eq!(s.observe(&published(now), now), &base, "at {now} ms");
        }
        let last = published(19_000);
        assert_eq!(s.observe(&last, 19_000), &last);
        // Weights that never stop changing are taken in when the ones in use are 30 s old.
        let mut taken = Vec::new();
        for (i, t) in (19_000..=80_000).step_by(1_000).enumerate() {
            let mut published = last.clone();
            published.insert(9, 1 << (i / 4 % 2)); // changes every 4 s
            if s.observe(&published, t) == &published {
                taken.push(t);
            }
        }
        assert!(
            taken
                .first()
                .is_some_and(|&t| t >= 19_000 + WEIGHTS_STALE_MS),
            "{taken:?}"
        );
        assert!(taken.len() >= 2, "{taken:?}");
    }

    #[test]
    fn weights_published_a_node_at_a_time_move_each_partition_once() {
        // Three append-only table topics of 4 partitions on three nodes; each node publishes
        // its partitions' new weight (16) 3 s after the one before. Taking the weights in as
        // they come moves partitions back and forth; taking them in settled moves only what
        // the final weights want moved.
        let nodes = [1, 2, 3];
        let mut keys: BTreeMap<String, usize> = BTreeMap::new();
        for t in 0..3 {
            keys.insert(format!("table:t{t}"), 1);
            for p in 0..4 {
                keys.insert(format!("kafka/t{t}/{p}"), 1);
            }
        }
        let ids: BTreeMap<&String, StreamId> = keys.keys().zip(0..).collect();
        let first = assign(&keys, &nodes);
        let publish_at = |node: u64| 10_000 + 3_000 * node as i64;
        let published = |now: i64| -> HashMap<StreamId, u64> {
            keys.keys()
                .filter(|k| k.starts_with("kafka/") && publish_at(first[*k]) <= now)
                .map(|k| (ids[k], 16))
                .collect()
        };
        let run = |settle: bool| {
            let mut s = Settled::default();
            let (mut placed, mut moves) = (first.clone(), 0);
            for now in (0..60_000).step_by(1_000) {
                let latest = published(now);
                let in_use = if settle {
                    s.observe(&latest, now).clone()
                } else {
                    latest
                };
                let weighted: BTreeMap<String, usize> = keys
                    .keys()
                    .map(|k| {
                        (
                            k.clone(),
                            in_use.get(&ids[k]).copied().unwrap_or(1) as usize,
                        )
                    })
                    .collect();
                let a = assign(&weighted, &nodes);
                moves += keys.keys().filter(|k| a[*k] != placed[*k]).count();
                placed = a;
            }
            (moves, placed)
        };
        let finals: BTreeMap<String, usize> = keys
            .iter()
            .map(|(k, s)| (k.clone(), if k.starts_with("kafka/") { 16 } else { *s }))
            .collect();
        let wanted = assign(&finals, &nodes);
        let needed = keys.keys().filter(|k| first[*k] != wanted[*k]).count();
        let (settled_moves, settled_end) = run(true);
        let (eager_moves, _) = run(false);
        assert_eq!(settled_end, wanted);
        assert_eq!(settled_moves, needed, "settled");
        assert!(
            eager_moves > needed,
            "eager: {eager_moves} moves, {needed} needed"
        );
    }

    #[test]
    fn coordinators_stay_on_their_node_whatever_the_weights_and_move_only_with_the_nodes() {
        // Eight tables of 6 partitions on three nodes: the partitions' weights go from 1 to
        // 16, a few at a time; no control stream moves, though partitions do. A fourth node
        // takes only the control streams whose rendezvous it wins, and its leaving gives them
        // back.
        let nodes = [1, 2, 3];
        let mut keys: BTreeMap<String, usize> = BTreeMap::new();
        for t in 0..8 {
            keys.insert(format!("{PINNED_PREFIX}t{t}"), 1);
            for p in 0..6 {
                keys.insert(format!("kafka/t{t}/{p}"), 1);
            }
        }
        let pinned = |a: &HashMap<String, u64>| -> BTreeMap<String, u64> {
            a.iter()
                .filter(|(k, _)| k.starts_with(PINNED_PREFIX))
                .map(|(k, n)| (k.clone(), *n))
                .collect()
        };
        let first = assign(&keys, &nodes);
        let coordinators = pinned(&first);
        let (mut weighted, mut moved) = (keys.clone(), 0);
        let partitions: Vec<String> = keys
            .keys()
            .filter(|k| k.starts_with("kafka/"))
            .cloned()
            .collect();
        let mut last = first.clone();
        for batch in partitions.chunks(5) {
            for k in batch {
                weighted.insert(k.clone(), 16);
            }
            let a = assign(&weighted, &nodes);
            assert_eq!(pinned(&a), coordinators, "weights moved a coordinator");
            moved += partitions.iter().filter(|k| a[*k] != last[*k]).count();
            last = a;
        }
        assert!(moved > 0, "the weights moved no partition");
        for (k, n) in &coordinators {
            assert_eq!(Some(*n), rendezvous(k, &nodes), "{k}");
        }
        let four = pinned(&assign(&weighted, &[1, 2, 3, 4]));
        for (k, n) in &four {
            assert!(
                *n == coordinators[k] || *n == 4,
                "{k} moved to {n}, not to the new node"
            );
        }
        assert_eq!(pinned(&assign(&weighted, &nodes)), coordinators);
        // The nodes still share the weight fairly around the pinned keys.
        let a = assign(&weighted, &nodes);
        let total: usize = weighted.values().sum();
        for n in nodes {
            let on: usize = weighted
                .iter()
                .filter(|(k, _)| a[*k] == n)
                .map(|(_, w)| w)
                .sum();
            assert!(
                on <= total.div_ceil(3) + 16,
                "node {n} holds {on} of {total}"
            );
        }
    }

    #[test]
    fn a_meter_reads_a_steady_rate_at_once_and_follows_changes() {
        // 100 KiB/s, looked at every second: exact from the first look (the plain average).
        let mut m = Meter::new(5_000, 0);
        for s in 1..=10 {
            m.observe(5_000 + s * 102_400, s as i64 * 1000);
            assert!((m.rate - 102_400.0).abs() < 1.0, "at {s} s: {}", m.rate);
        }
        // Then moving: after 30 s idle, most of it is gone.
        let mut bytes = 5_000 + 40 * 102_400;
        for s in 11..=40 {
            m.observe(bytes.min(5_000 + s * 102_400), s as i64 * 1000);
        }
        let busy = m.rate;
        assert!((busy - 102_400.0).abs() < 1.0, "{busy}");
        for s in 41..=70 {
            m.observe(bytes, s * 1000);
        }
        assert!(m.rate < 0.1 * busy && m.rate > 0.0, "{}", m.rate);
        // A reopened stream (its counter starts again) starts over.
        bytes = 10;
        m.observe(bytes, 71_000);
        assert_eq!((m.rate, m.since_bytes), (0.0, 10));
    }

    #[test]
    fn a_tables_partitions_spread_and_its_control_stream_goes_by_its_id() {
        let key = |id: &str| TableKey { id: id.to_string() };
        let tables = HashMap::from([
            ("users".to_string(), key("abc")),
            ("orders".to_string(), key("ghi")),
        ]);
        assert_eq!(stream_key("kafka/abc/0", &tables), "kafka/abc/0");
        assert_eq!(stream_key("kafka/abc/5", &tables), "kafka/abc/5");
        assert_eq!(stream_key("table-control/users", &tables), "table:abc");
        assert_eq!(stream_key("kafka/ghi/0", &tables), "kafka/ghi/0");
        assert_eq!(stream_key("kafka/ghi/1", &tables), "kafka/ghi/1");
        assert_eq!(stream_key("table-control/orders", &tables), "table:ghi");
        assert_eq!(stream_key("kafka/def/0", &tables), "kafka/def/0");
    }
}
