//! The table watermark rule (docs/architecture.md, "Watermarks").
//!
//! A partition's watermark is the largest event time committed from it. The table's is the
//! minimum over the partitions that count:
//! - a partition that has never held a record does not count;
//! - with `table.topic.watermark.idle.ms`, a partition that has had no new records for that
//!   long does not count (Flink's idleness); when every partition with a watermark is idle,
//!   nothing holds the table back and its watermark is the largest partition watermark;
//! - the table watermark never goes back: a partition that comes back from idleness with older
//!   records does not pull it down (those records are late for times already announced).

use std::collections::BTreeMap;

/// What decides a table's watermark.
#[derive(Debug, Clone, Default)]
pub(crate) struct Watermarks {
    /// Each partition's watermark (epoch ms).
    pub partitions: BTreeMap<i32, i64>,
    /// When each partition last had new records (epoch ms, the coordinator's clock).
    pub last_active_ms: BTreeMap<i32, i64>,
    /// The table watermark announced last.
    pub table: Option<i64>,
}

impl Watermarks {
    /// Records that `partition` had new records at `now_ms`, the largest of them at event time
    /// `max_event_ms` (None: none had an event time).
    pub(crate) fn observe(&mut self, partition: i32, max_event_ms: Option<i64>, now_ms: i64) {
        self.last_active_ms.insert(partition, now_ms);
        if let Some(ts) = max_event_ms {
            let w = self.partitions.entry(partition).or_insert(ts);
            *w = (*w).max(ts);
        }
    }

    /// The table watermark at `now_ms` with idleness `idle_ms` (None: off); remembered as the
    /// last announced one.
    pub(crate) fn advance(&mut self, now_ms: i64, idle_ms: Option<i64>) -> Option<i64> {
        let active = |p: &i32| match idle_ms {
            None => true,
            // A partition not seen since the coordinator started counts as active from then.
            Some(idle) => self
                .last_active_ms
                .get(p)
                .is_none_or(|&t| now_ms.saturating_sub(t) < idle),
        };
        let holding = self
            .partitions
            .iter()
            .filter(|(p, _)| active(p))
            .map(|(_, &w)| w)
            .min();
        let computed = holding.or_else(|| self.partitions.values().max().copied());
        self.table = match (self.table, computed) {
            (Some(old), Some(new)) => Some(old.max(new)),
            (old, new) => new.or(old),
        };
        self.table
    }

    /// Marks every partition active at `now_ms` (a restarted coordinator has no history).
    pub(crate) fn start(&mut self, partitions: impl IntoIterator<Item = i32>, now_ms: i64) {
        for p in partitions {
            self.last_active_ms.insert(p, now_ms);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_minimum_over_written_partitions() {
        let mut w = Watermarks::default();
        w.start([0, 1, 2], 0);
        w.observe(0, Some(100), 10);
        w.observe(1, Some(50), 10);
        // Partition 2 never held a record: it does not count.
        assert_eq!(w.advance(10, None), Some(50));
        w.observe(1, Some(120), 20);
        assert_eq!(w.advance(20, None), Some(100));
        // A partition's watermark is its largest event time: an older record does not lower it.
        w.observe(0, Some(10), 30);
        assert_eq!(w.partitions[&0], 100);
        assert_eq!(w.advance(30, None), Some(100));
    }

    #[test]
    fn no_records_no_watermark() {
        let mut w = Watermarks::default();
        w.start([0, 1], 0);
        w.observe(0, None, 5);
        assert_eq!(w.advance(5, Some(1000)), None);
    }

    #[test]
    fn an_idle_partition_stops_holding_the_watermark_back() {
        let mut w = Watermarks::default();
        w.start([0, 1], 0);
        w.observe(0, Some(100), 0);
        w.observe(1, Some(40), 0);
        // Without idleness the silent partition 1 holds the table at 40 forever.
        assert_eq!(w.clone().advance(10_000, None), Some(40));
        // Partition 0 keeps receiving; partition 1 is silent for 5 s.
        w.observe(0, Some(200), 4_000);
        assert_eq!(w.advance(4_000, Some(5_000)), Some(40), "not idle yet");
        w.observe(0, Some(300), 6_000);
        assert_eq!(
            w.advance(6_000, Some(5_000)),
            Some(300),
            "partition 1 is idle"
        );
        // Partition 1 comes back with an old record: the table watermark does not go back,
        // and partition 1 holds it from here on.
        w.observe(1, Some(50), 7_000);
        assert_eq!(w.advance(7_000, Some(5_000)), Some(300));
        w.observe(0, Some(900), 8_000);
        w.observe(1, Some(400), 8_000);
        assert_eq!(w.advance(8_000, Some(5_000)), Some(400));
    }

    #[test]
    fn all_idle_means_complete_up_to_the_latest() {
        let mut w = Watermarks::default();
        w.start([0, 1], 0);
        w.observe(0, Some(100), 0);
        w.observe(1, Some(40), 0);
        assert_eq!(w.advance(60_000, Some(1_000)), Some(100));
    }

    #[test]
    fn a_restart_counts_partitions_active_from_then() {
        let mut w = Watermarks {
            partitions: BTreeMap::from([(0, 100), (1, 40)]),
            table: Some(40),
            ..Watermarks::default()
        };
        w.start([0, 1], 1_000_000);
        w.observe(0, Some(150), 1_000_100);
        assert_eq!(w.advance(1_000_100, Some(5_000)), Some(40));
        assert_eq!(w.advance(1_006_000, Some(5_000)), Some(150));
    }
}
