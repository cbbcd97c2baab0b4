//! `CombinedSchemaDiff`: two `allOf`/`anyOf`/`oneOf` schemas. The criterion's change is a
//! difference of its own; the subschemas are paired by a maximum matching of the compatible
//! (writer, reader) pairs, so that their order does not matter.
//!
//! Invariants:
//! - Duplicate subschemas count once (Confluent collects them into a set).
//! - A combination too large to pair within the comparison's step bound gives up (the whole
//!   comparison reports `COMPARISON_TOO_COMPLEX`).

use std::collections::HashSet;

use super::difference::{Ctx, Difference, Kind};
use super::shape::{Crit, Sch};
use super::{Comparer, MAX_STEPS};
use crate::json_schema::canonical_text;

impl<'a> Comparer<'a> {
    pub(super) fn compare_combined(
        &mut self,
        ctx: &mut Ctx,
        oc: Crit,
        os: Vec<Sch<'a>>,
        uc: Crit,
        us: Vec<Sch<'a>>,
    ) {
        let criterion_change = match (oc == uc, uc) {
            (true, _) => None,
            (false, Crit::Any) => Some(Kind::COMBINED_TYPE_EXTENDED),
            (false, Crit::One) if os.len() == 1 => Some(Kind::COMBINED_TYPE_EXTENDED),
            (false, Crit::All) if os.len() == 1 && us.len() == 1 => {
                Some(Kind::COMBINED_TYPE_EXTENDED)
            }
            (false, _) => Some(Kind::COMBINED_TYPE_CHANGED),
        };
        if let Some(kind) = criterion_change {
            ctx.add(kind);
            if kind == Kind::COMBINED_TYPE_CHANGED {
                return;
            }
        }
        let os = dedup(os);
        let us = dedup(us);
        if os.len() < us.len() {
            ctx.add(if uc == Crit::All {
                Kind::PRODUCT_TYPE_EXTENDED
            } else {
                Kind::SUM_TYPE_EXTENDED
            });
        } else if os.len() > us.len() {
            ctx.add(if uc == Crit::All {
                Kind::PRODUCT_TYPE_NARROWED
            } else {
                Kind::SUM_TYPE_NARROWED
            });
        }
        if os.len().saturating_mul(us.len()) > MAX_STEPS {
            self.exhausted = true;
            return;
        }
        // Compatible (original, update) pairs, then a maximum matching over them.
        let mut edges: Vec<Vec<(usize, Vec<Difference>)>> = Vec::with_capacity(os.len());
        for (i, o) in os.iter().enumerate() {
            ctx.enter(oc.keyword());
            ctx.enter(&i.to_string());
            let mut compatible = Vec::new();
            for (j, u) in us.iter().enumerate() {
                if self.exhausted {
                    break;
                }
                let mut sub = ctx.sub();
                self.compare(&mut sub, Some(*o), Some(*u));
                if sub.is_compatible() {
                    compatible.push((j, sub.diffs));
                }
            }
            ctx.leave();
            ctx.leave();
            edges.push(compatible);
        }
        if self.exhausted {
            return;
        }
        let adjacency: Vec<Vec<usize>> = edges
            .iter()
            .map(|e| e.iter().map(|(j, _)| *j).collect())
            .collect();
        let matching = max_matching(&adjacency, us.len());
        for &(i, j) in &matching {
            if let Some((_, diffs)) = edges[i].iter().find(|(jj, _)| *jj == j) {
                ctx.diffs.extend(diffs.iter().cloned());
            }
        }
        if matching.len() < os.len().min(us.len()) {
            ctx.add(Kind::COMBINED_TYPE_SUBSCHEMAS_CHANGED);
        }
    }
}

/// Subschemas without duplicates (Confluent collects them into a set), in order.
fn dedup(subs: Vec<Sch<'_>>) -> Vec<Sch<'_>> {
    let mut seen = HashSet::new();
    subs.into_iter()
        .filter(|s| seen.insert((canonical_text(s.value), s.facet)))
        .collect()
}

/// A maximum matching of a bipartite graph (Kuhn's augmenting paths): `adjacency[i]` lists the
/// right vertices left vertex `i` may pair with. Returns the (left, right) pairs.
fn max_matching(adjacency: &[Vec<usize>], right: usize) -> Vec<(usize, usize)> {
    fn augment(
        left: usize,
        adjacency: &[Vec<usize>],
        seen: &mut [bool],
        owner: &mut [Option<usize>],
    ) -> bool {
        for &r in &adjacency[left] {
            if !seen[r] {
                seen[r] = true;
                if owner[r].is_none_or(|other| augment(other, adjacency, seen, owner)) {
                    owner[r] = Some(left);
                    return true;
                }
            }
        }
        false
    }
    let mut owner = vec![None; right];
    for left in 0..adjacency.len() {
        let mut seen = vec![false; right];
        augment(left, adjacency, &mut seen, &mut owner);
    }
    owner
        .iter()
        .enumerate()
        .filter_map(|(r, l)| l.map(|l| (l, r)))
        .collect()
}
