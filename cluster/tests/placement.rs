//! A seeded simulation of the cluster's placement (`inlet_cluster::{assign, decide}`, the code
//! every node's pass runs) over a model of the metadata store's stream ownership (acquire: a
//! new epoch, granted when the stream is free, already the node's, or owned by a node that is
//! not live; release; commits fenced by the epoch). Nodes join, leave, crash, pause and come
//! back, and streams' weights change, in a random order drawn from a printed seed. Checked at
//! every step:
//! - at most one node's commit to a stream is accepted (a paused node that comes back
//!   commits with the epoch it had, and must be refused once another node took over);
//! - epochs only grow, and grow at every change of owner;
//! - once the cluster is quiet (every live node has run two passes since the last event),
//!   each stream is owned by the node the assignment names, and only that node serves it.
//!
//! `INLET_SIM_SEEDS` sets how many schedules run (100 by default); a failure prints the seed
//! to run again with `INLET_SIM_SEED`. With fencing switched off in the model, the checker
//! finds a double commit: the simulation can fail.
#![allow(clippy::unwrap_used, clippy::panic)] // a test: a failed step fails it

use std::collections::{BTreeMap, BTreeSet, HashMap};

use inlet_cluster::{assign, decide, Seen, Step};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The model of the metadata store's ownership rows.
#[derive(Debug, Default)]
struct Store {
    /// Stream → (owner, epoch).
    rows: BTreeMap<String, (Option<u64>, u64)>,
    /// Whether commits are fenced by the epoch (off: the check must catch it).
    fenced: bool,
}

impl Store {
    fn acquire(&mut self, stream: &str, node: u64, live: &[u64]) -> Option<u64> {
        let (owner, epoch) = self.rows.get_mut(stream).unwrap();
        let free = match *owner {
            None => true,
            Some(o) => o == node || !live.contains(&o),
        };
        if !free {
            return None;
        }
        *owner = Some(node);
        *epoch += 1;
        Some(*epoch)
    }

    fn release(&mut self, stream: &str, node: u64) {
        let (owner, _) = self.rows.get_mut(stream).unwrap();
        if *owner == Some(node) {
            *owner = None;
        }
    }

    /// Whether a commit by `node` holding `epoch` is accepted.
    fn commit(&self, stream: &str, node: u64, epoch: u64) -> bool {
        let (owner, current) = self.rows[stream];
        if !self.fenced {
            return true;
        }
        owner == Some(node) && current == epoch
    }
}

#[derive(Debug)]
struct Node {
    /// Streams it serves, with the epoch it acquired them under.
    mine: BTreeMap<String, u64>,
    paused: bool,
    /// Passes run since the last event.
    passes: u32,
}

struct Sim {
    rng: StdRng,
    store: Store,
    nodes: BTreeMap<u64, Node>,
    next_id: u64,
    weights: BTreeMap<String, usize>,
}

impl Sim {
    fn live(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .filter(|(_, n)| !n.paused)
            .map(|(id, _)| *id)
            .collect()
    }

    fn pass(&mut self, me: u64) {
        let live = self.live();
        let assignment = assign(&self.weights, &live);
        let streams: Vec<String> = self.store.rows.keys().cloned().collect();
        let mut handovers = Vec::new();
        for stream in streams {
            let node = &self.nodes[&me];
            let seen = Seen {
                me,
                mine: node.mine.contains_key(&stream),
                owner: self.store.rows[&stream].0,
                want: assignment.get(&stream).copied(),
                live: &live,
                lapsed: node.paused,
            };
            match decide(&seen) {
                Step::Nothing => {}
                Step::Forget => {
                    self.nodes.get_mut(&me).unwrap().mine.remove(&stream);
                }
                Step::Take => {
                    if let Some(epoch) = self.store.acquire(&stream, me, &live) {
                        self.nodes.get_mut(&me).unwrap().mine.insert(stream, epoch);
                    }
                }
                Step::HandOver => handovers.push(stream),
                Step::Free => {
                    if self.store.acquire(&stream, me, &live).is_some() {
                        self.store.release(&stream, me);
                    }
                }
            }
        }
        for stream in handovers {
            self.store.release(&stream, me);
            self.nodes.get_mut(&me).unwrap().mine.remove(&stream);
        }
        self.nodes.get_mut(&me).unwrap().passes += 1;
    }

    /// Every node that is not paused commits to each stream it serves; at most one may be
    /// accepted per stream.
    fn commits(&self) -> Result<(), String> {
        let mut accepted: HashMap<&str, u64> = HashMap::new();
        for (id, node) in &self.nodes {
            if node.paused {
                continue;
            }
            for (stream, epoch) in &node.mine {
                if self.store.commit(stream, *id, *epoch) {
                    if let Some(other) = accepted.insert(stream, *id) {
                        return Err(format!(
                            "{stream}: commits of nodes {other} and {id} both accepted"
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    fn event(&mut self) -> String {
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        let live = self.live();
        let pick = |rng: &mut StdRng, from: &[u64]| from[rng.random_range(0..from.len())];
        for n in self.nodes.values_mut() {
            n.passes = 0;
        }
        match self.rng.random_range(0..6) {
            0 if self.nodes.len() < 6 => {
                let id = self.next_id;
                self.next_id += 1;
                self.nodes.insert(
                    id,
                    Node {
                        mine: BTreeMap::new(),
                        paused: false,
                        passes: 0,
                    },
                );
                format!("node {id} joins")
            }
            1 if live.len() > 1 => {
                // A drain: releases what it serves, then leaves.
                let id = pick(&mut self.rng, &live);
                let node = self.nodes.remove(&id).unwrap();
                for stream in node.mine.keys() {
                    self.store.release(stream, id);
                }
                format!("node {id} leaves")
            }
            2 if live.len() > 1 => {
                // kill -9: its rows stay its own until the others see it is not live.
                let id = pick(&mut self.rng, &live);
                self.nodes.remove(&id);
                format!("node {id} is killed")
            }
            3 if live.len() > 1 => {
                let id = pick(&mut self.rng, &live);
                self.nodes.get_mut(&id).unwrap().paused = true;
                format!("node {id} pauses")
            }
            4 => {
                let paused: Vec<u64> = ids
                    .iter()
                    .copied()
                    .filter(|id| self.nodes[id].paused)
                    .collect();
                if paused.is_empty() {
                    return "nothing".into();
                }
                let id = pick(&mut self.rng, &paused);
                self.nodes.get_mut(&id).unwrap().paused = false;
                format!("node {id} comes back")
            }
            _ => {
                let streams: Vec<String> = self.weights.keys().cloned().collect();
                let s = streams[self.rng.random_range(0..streams.len())].clone();
                let w = 1 << self.rng.random_range(0..4);
                self.weights.insert(s.clone(), w);
                format!("{s} weighs {w}")
            }
        }
    }

    /// Quiet: every live node ran two passes since the last event. Then each stream is
    /// owned by its assigned node, which alone serves it.
    fn converged(&self) -> Result<(), String> {
        let live = self.live();
        if live.iter().any(|id| self.nodes[id].passes < 2) {
            return Ok(());
        }
        let assignment = assign(&self.weights, &live);
        for (stream, (owner, _)) in &self.store.rows {
            let want = assignment[stream];
            if *owner != Some(want) {
                return Err(format!(
                    "{stream}: owned by {owner:?} after the cluster settled, assigned to {want}"
                ));
            }
            let serving: BTreeSet<u64> = live
                .iter()
                .copied()
                .filter(|id| self.nodes[id].mine.contains_key(stream))
                .collect();
            if serving != BTreeSet::from([want]) {
                return Err(format!("{stream}: served by {serving:?}, owned by {want}"));
            }
        }
        Ok(())
    }
}

/// Runs one schedule; the step that broke an invariant, if any.
fn run(seed: u64, fenced: bool) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut weights = BTreeMap::new();
    for topic in 0..3 {
        for p in 0..rng.random_range(1..8) {
            weights.insert(format!("kafka/t{topic}/{p}"), 1);
        }
    }
    // Tables' control streams: pinned to their rendezvous node.
    weights.insert("table:a".into(), 1);
    weights.insert("table:b".into(), 1);
    let mut store = Store {
        fenced,
        ..Store::default()
    };
    for s in weights.keys() {
        store.rows.insert(s.clone(), (None, 0));
    }
    let nodes = (1..=3)
        .map(|id| {
            (
                id,
                Node {
                    mine: BTreeMap::new(),
                    paused: false,
                    passes: 0,
                },
            )
        })
        .collect();
    let mut sim = Sim {
        rng,
        store,
        nodes,
        next_id: 4,
        weights,
    };
    let mut epochs: BTreeMap<String, (Option<u64>, u64)> = sim.store.rows.clone();
    for step in 0..300 {
        let what = if sim.rng.random_bool(0.15) {
            sim.event()
        } else {
            "passes".into()
        };
        // A node back from a pause commits at once, with what it served before its pause,
        // before any pass of its own.
        sim.commits()
            .map_err(|e| format!("step {step} ({what}): {e}"))?;
        // The live nodes run their passes in a random order, committing between them;
        // paused ones do nothing.
        let mut order = sim.live();
        for i in (1..order.len()).rev() {
            order.swap(i, sim.rng.random_range(0..=i));
        }
        for id in order {
            sim.pass(id);
            sim.commits()
                .map_err(|e| format!("step {step} ({what}): {e}"))?;
        }
        for (stream, (owner, epoch)) in &sim.store.rows {
            let (was_owner, was_epoch) = epochs[stream];
            if *epoch < was_epoch || (was_owner != *owner && owner.is_some() && *epoch == was_epoch)
            {
                return Err(format!(
                    "step {step} ({what}): {stream} went from {was_owner:?}@{was_epoch} to {owner:?}@{epoch}"
                ));
            }
        }
        epochs = sim.store.rows.clone();
        sim.converged()
            .map_err(|e| format!("step {step} ({what}): {e}"))?;
    }
    Ok(())
}

fn seeds() -> Vec<u64> {
    if let Some(seed) = std::env::var("INLET_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return vec![seed];
    }
    let n: u64 = std::env::var("INLET_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    (0..n).collect()
}

#[test]
fn placement_keeps_one_owner_per_stream_through_joins_leaves_kills_and_pauses() {
    for seed in seeds() {
        if let Err(e) = run(seed, true) {
            panic!("seed {seed} (INLET_SIM_SEED={seed} runs it alone): {e}");
        }
    }
}

#[test]
fn without_fencing_the_checker_finds_a_double_commit() {
    let caught = (0..100).find(|&seed| {
        run(seed, false)
            .err()
            .is_some_and(|e| e.contains("both accepted"))
    });
    assert!(
        caught.is_some(),
        "no schedule of 100 caught a paused node's stale commit with fencing off"
    );
}
