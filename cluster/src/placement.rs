//! Where streams and groups go, computed the same on every node from the same inputs, with
//! no I/O (`crate::node` reads the inputs and acts on the answer): rendezvous hashing bounded
//! by each node's fair share ([`assign`]), the assignment key of a stream ([`stream_key`]),
//! and the weights that balance bytes in: a stream's load measured from its counter
//! ([`Meter`]), the weight published for it ([`weight`], [`weight_changed`]) and when the
//! assignment takes published weights in ([`Settled`]). `tests/placement.rs` drives these
//! through a seeded simulation of nodes joining, leaving and pausing.

use std::collections::{BTreeMap, HashMap};

use inlet_storage::StreamId;

/// Prefix of table topics' control streams, followed by the topic's name.
pub const CONTROL_PREFIX: &str = "table-control/";

/// Prefix of the assignment keys that [`assign`] pins to their rendezvous node: a table's
/// control stream (its coordinator), followed by the topic's id.
pub const PINNED_PREFIX: &str = "table:";

/// A stream's rate is averaged over about this long.
pub const LOAD_WINDOW_MS: f64 = 10_000.0;
/// A node measures a stream it took this long before publishing a weight for it.
pub const LOAD_WARMUP_MS: i64 = 10_000;
/// How often a node looks for weights to publish.
pub const LOAD_PUBLISH_EVERY_MS: i64 = 5_000;
/// The assignment takes in published weights once none changed for this long ([`Settled`]):
/// the nodes publish the weights of a new load within about two publish periods of each
/// other (each on its own clock, after its own warm-up), and balancing on half of them would
/// move partitions that the other half then moves back.
pub const WEIGHTS_SETTLE_MS: i64 = 2 * LOAD_PUBLISH_EVERY_MS;
/// ... or once the weights it uses are this old, so that loads that never stop changing
/// somewhere still get balanced.
pub const WEIGHTS_STALE_MS: i64 = 6 * LOAD_PUBLISH_EVERY_MS;

/// The weights the assignment uses: the published ones as they were when they last settled.
///
/// Published weights arrive a node at a time (each owner publishes its own streams' weights,
/// see `node::measure`), but the assignment weighs every stream against the others: a node that
/// took in one node's new weights before the rest would balance on them and move partitions,
/// then move them back as the rest arrive. So the assignment goes on with the weights it has
/// until the published ones have not changed for [`WEIGHTS_SETTLE_MS`] (or the ones it has
/// are [`WEIGHTS_STALE_MS`] old), then takes them in all at once. Every node sees the same
/// rows within a pass of the others, so they take them in within a pass of each other too.
/// Nothing else waits: a node joining or leaving, or a new topic, moves streams at once under
/// the weights in use.
#[derive(Debug, Default)]
pub struct Settled {
    /// The weights in use, and when they were taken in (`None` before the first pass).
    in_use: Option<(HashMap<StreamId, u64>, i64)>,
    /// The published weights as last read, and when they last changed.
    latest: HashMap<StreamId, u64>,
    changed_ms: i64,
}

impl Settled {
    /// Takes in the published weights read at `now` (ms); returns the weights to use.
    pub fn observe(
        &mut self,
        published: &HashMap<StreamId, u64>,
        now: i64,
    ) -> &HashMap<StreamId, u64> {
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
pub(crate) struct LoadMeters {
    pub(crate) meters: HashMap<StreamId, Meter>,
    pub(crate) published_ms: i64,
}

/// One stream's bytes counter as last read, and its averaged rate (bytes per second): the
/// plain average since the node took the stream for the first two windows, then a moving
/// average (so a stream that just moved is not taken for idle).
#[derive(Debug, Clone, Copy)]
pub struct Meter {
    bytes: u64,
    at_ms: i64,
    /// The averaged rate, bytes per second.
    pub rate: f64,
    /// When the node took the stream (ms).
    pub since_ms: i64,
    since_bytes: u64,
}

impl Meter {
    pub fn new(bytes: u64, now: i64) -> Meter {
        Meter {
            bytes,
            at_ms: now,
            rate: 0.0,
            since_ms: now,
            since_bytes: bytes,
        }
    }

    /// Takes in the stream's counter at `now` (ms).
    pub fn observe(&mut self, bytes: u64, now: i64) {
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

/// FNV-1a of `bytes`: stable across nodes, builds and platforms (unlike the standard hasher).
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// SplitMix64's finalizer: spreads `x` over all 64 bits.
pub(crate) fn mix(mut x: u64) -> u64 {
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
pub struct TableKey {
    pub id: String,
}

/// The assignment key of a stream. A table topic's control stream goes by its topic's id (its
/// coordinator runs where it is owned). A table topic's partitions, keyed (upsert or CDC) or
/// not, and any other stream, go by their name: they spread over the nodes and are converted
/// where they are owned (a keyed table's deletes are then made by its coordinator, see
/// `inlet_table_coordinator::convert`).
pub fn stream_key(name: &str, table_topics: &HashMap<String, TableKey>) -> String {
    if let Some(topic) = name.strip_prefix(CONTROL_PREFIX) {
        if let Some(t) = table_topics.get(topic) {
            return format!("{PINNED_PREFIX}{}", t.id);
        }
    }
    name.to_string()
}

/// What a node sees of one stream at a pass.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    /// The node.
    pub me: u64,
    /// Whether it serves the stream now (it holds it in memory).
    pub mine: bool,
    /// The stream's owner in the metadata store.
    pub owner: Option<u64>,
    /// The node [`assign`] gives the stream's key to.
    pub want: Option<u64>,
    /// The live nodes.
    pub live: &'a [u64],
    /// Whether the node's own lease lapsed by its clock.
    pub lapsed: bool,
}

/// What a node does with one stream at a pass ([`decide`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Nothing,
    /// Stop serving it: another node took it while this one was away (its commits are fenced
    /// already).
    Forget,
    /// Acquire it (a new epoch): it is assigned here and free, or its owner is not live.
    Take,
    /// Release it to the node it is assigned to, after the appends in flight.
    HandOver,
    /// It is still this node's in the metadata store from an earlier run, but assigned
    /// elsewhere: take it (fencing the earlier run) and release it at once.
    Free,
}

/// The decision of one pass for one stream. A node not in `live`, or whose lease lapsed,
/// takes nothing; a take needs the store's owner to be this node, nobody, or a node not live
/// (the store checks that again, under the stream's row lock).
pub fn decide(s: &Seen<'_>) -> Step {
    if s.mine && s.owner != Some(s.me) {
        return Step::Forget;
    }
    if !s.live.contains(&s.me) || s.lapsed {
        return Step::Nothing;
    }
    let Some(want) = s.want else {
        return Step::Nothing;
    };
    let owner_live = s.owner.is_some_and(|o| s.live.contains(&o));
    if want == s.me && !s.mine && (s.owner == Some(s.me) || !owner_live) {
        Step::Take
    } else if want != s.me && s.mine {
        Step::HandOver
    } else if want != s.me && s.owner == Some(s.me) {
        Step::Free
    } else {
        Step::Nothing
    }
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
