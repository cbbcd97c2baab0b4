//! A recent history of named numeric series (the console's charts start from it), held in a
//! byte budget.
//!
//! Invariants:
//! - samples are kept in the order they were recorded, and none older than the window before
//!   the newest;
//! - the bytes charged never exceed the budget: the oldest samples go first, and a sample that
//!   alone exceeds the budget is not kept. A point is charged as if it held its own copy of its
//!   series' name (names are shared, so this is an upper bound of the memory held).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use std::sync::Mutex;

/// One series' value at one time.
pub type Point = (u64, f64);

/// A bounded history of samples, each a set of named values at one time.
#[derive(Debug)]
pub struct History {
    budget_bytes: u64,
    window_ms: u64,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    samples: VecDeque<Sample>,
    bytes: u64,
}

#[derive(Debug)]
struct Sample {
    at_ms: u64,
    values: Vec<(Arc<str>, f64)>,
}

impl Sample {
    fn bytes(&self) -> u64 {
        let fixed = std::mem::size_of::<Sample>() as u64;
        let per_value = std::mem::size_of::<(Arc<str>, f64)>() as u64;
        fixed
            + self
                .values
                .iter()
                .map(|(name, _)| per_value + name.len() as u64)
                .sum::<u64>()
    }
}

impl History {
    /// A history of at most `budget_bytes` that keeps `window_ms` of samples.
    pub fn new(budget_bytes: u64, window_ms: u64) -> Self {
        History {
            budget_bytes,
            window_ms,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Records `values` at `at_ms` (not before the last sample's time: a clock that stepped
    /// back records at the last time), then drops what falls out of the window or the budget.
    pub fn record(&self, at_ms: u64, values: Vec<(Arc<str>, f64)>) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let at_ms = inner.samples.back().map_or(at_ms, |s| s.at_ms.max(at_ms));
        let sample = Sample { at_ms, values };
        inner.bytes += sample.bytes();
        inner.samples.push_back(sample);
        let oldest = at_ms.saturating_sub(self.window_ms);
        while let Some(first) = inner.samples.front() {
            if first.at_ms >= oldest && inner.bytes <= self.budget_bytes {
                break;
            }
            let bytes = first.bytes();
            inner.bytes -= bytes;
            inner.samples.pop_front();
        }
    }

    /// Every series whose name starts with `prefix` (and passes `keep`), oldest point first.
    pub fn series(
        &self,
        prefix: &str,
        keep: impl Fn(&str) -> bool,
    ) -> BTreeMap<String, Vec<Point>> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: BTreeMap<String, Vec<Point>> = BTreeMap::new();
        let mut kept: BTreeMap<&str, bool> = BTreeMap::new();
        for sample in &inner.samples {
            for (name, value) in &sample.values {
                if !name.starts_with(prefix) {
                    continue;
                }
                if !*kept.entry(name).or_insert_with(|| keep(name)) {
                    continue;
                }
                out.entry(name.to_string())
                    .or_default()
                    .push((sample.at_ms, *value));
            }
        }
        out
    }

    /// The bytes charged for what is kept.
    pub fn bytes(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).bytes
    }

    /// The byte budget.
    pub fn budget_bytes(&self) -> u64 {
        self.budget_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(pairs: &[(&str, f64)]) -> Vec<(Arc<str>, f64)> {
        pairs.iter().map(|(n, v)| (Arc::from(*n), *v)).collect()
    }

    #[test]
    fn series_come_back_by_prefix_in_time_order() {
        let h = History::new(1 << 20, 60_000);
        h.record(1_000, values(&[("table:a:behind", 5.0), ("node:in", 1.0)]));
        h.record(2_000, values(&[("table:a:behind", 3.0), ("node:in", 2.0)]));
        h.record(3_000, values(&[("table:b:behind", 7.0)]));
        let tables = h.series("table:", |_| true);
        assert_eq!(
            tables,
            BTreeMap::from([
                (
                    "table:a:behind".to_string(),
                    vec![(1_000, 5.0), (2_000, 3.0)]
                ),
                ("table:b:behind".to_string(), vec![(3_000, 7.0)]),
            ])
        );
        let only_b = h.series("table:", |name| name.starts_with("table:b"));
        assert_eq!(only_b.keys().collect::<Vec<_>>(), vec!["table:b:behind"]);
        assert_eq!(h.series("node:", |_| true)["node:in"].len(), 2);
    }

    #[test]
    fn samples_older_than_the_window_are_dropped() {
        let h = History::new(1 << 20, 10_000);
        for t in 0..30u64 {
            h.record(t * 1_000, values(&[("x", t as f64)]));
        }
        let x = &h.series("", |_| true)["x"];
        assert_eq!(x.first(), Some(&(19_000, 19.0)));
        assert_eq!(x.last(), Some(&(29_000, 29.0)));
        assert_eq!(x.len(), 11);
    }

    #[test]
    fn the_budget_drops_the_oldest_samples_and_is_never_exceeded() {
        let one = Sample {
            at_ms: 0,
            values: values(&[("series", 0.0)]),
        }
        .bytes();
        let h = History::new(one * 5 + one / 2, u64::MAX);
        for t in 0..100u64 {
            h.record(t, values(&[("series", t as f64)]));
            assert!(
                h.bytes() <= h.budget_bytes(),
                "{} > {}",
                h.bytes(),
                h.budget_bytes()
            );
        }
        let kept: Vec<u64> = h.series("", |_| true)["series"]
            .iter()
            .map(|p| p.0)
            .collect();
        assert_eq!(kept, vec![95, 96, 97, 98, 99]);
        // A sample larger than the whole budget is not kept at all.
        let big: Vec<(Arc<str>, f64)> = (0..100)
            .map(|i| (Arc::from(format!("s{i}")), 1.0))
            .collect();
        h.record(100, big);
        assert_eq!(h.bytes(), 0);
        assert!(h.series("", |_| true).is_empty());
    }

    #[test]
    fn a_clock_that_steps_back_keeps_the_order() {
        let h = History::new(1 << 20, 60_000);
        h.record(5_000, values(&[("x", 1.0)]));
        h.record(4_000, values(&[("x", 2.0)]));
        assert_eq!(
            h.series("x", |_| true)["x"],
            vec![(5_000, 1.0), (5_000, 2.0)]
        );
    }
}
