//! Expiry of committed offsets (`offsets.retention.minutes`), as Kafka expires them (KIP-211):
//! - a group without members (`Empty`, or known only by its offsets) loses each offset once
//!   the group has been empty, and the offset uncommitted, for the retention;
//! - a consumer group with members loses only the offsets of topics no member subscribes to,
//!   retention after they were committed;
//! - other groups with members keep theirs.
//!
//! When a group became empty is known for groups this node saw empty; for a group it only
//! knows by its offsets (after a restart or a failover, before its members rejoin), it counts
//! from when this node first swept the group. So an offset never expires sooner than Kafka
//! would expire it, and a restart or a move never expires one early. Each sweep works on the
//! groups this node coordinates, under its claim (a deletion is conditional on the claim's
//! epoch like any write).

use std::collections::HashSet;

use super::*;

/// From when a group's offsets count toward their expiry.
enum CountsFrom {
    /// The group has been empty since this time: each offset from the later of it and its
    /// commit.
    EmptySince(u64),
    /// Its members subscribe to these topics: the other topics' offsets from their commit,
    /// these never.
    Unsubscribed(HashSet<String>),
}

impl CountsFrom {
    fn of(&self, topic: &str, committed_ms: u64) -> Option<u64> {
        match self {
            CountsFrom::EmptySince(since) => Some(committed_ms.max(*since)),
            CountsFrom::Unsubscribed(subscribed) => {
                (!subscribed.contains(topic)).then_some(committed_ms)
            }
        }
    }
}

impl GroupCoordinator {
    /// Deletes the offsets that have expired under `retention_ms` in the groups `coordinates`
    /// says this node coordinates. Returns how many were deleted.
    pub(crate) async fn expire_offsets(
        &self,
        retention_ms: u64,
        coordinates: impl Fn(&str) -> bool,
    ) -> usize {
        let now = self.now_ms();
        let groups = self.inner.offsets.groups();
        {
            // Only groups that still have offsets are remembered.
            let mut seen = self.inner.offsets_seen.lock();
            seen.retain(|g, _| groups.contains(g));
        }
        let mut deleted = 0;
        for group_id in groups {
            if !coordinates(&group_id) || self.is_shut_down() {
                continue;
            }
            let first_seen = *self
                .inner
                .offsets_seen
                .lock()
                .entry(group_id.clone())
                .or_insert(now);
            // The cache answers first, so that only a group with something to expire is
            // claimed (a query); once claimed its offsets are current, and it is asked again.
            if self
                .expired(&group_id, first_seen, now, retention_ms)
                .is_empty()
                || self.own(&group_id).await.is_err()
            {
                continue;
            }
            let expired = self.expired(&group_id, first_seen, now, retention_ms);
            if expired.is_empty() {
                continue;
            }
            match self
                .inner
                .offsets
                .delete_partitions(&group_id, &expired)
                .await
            {
                Ok(()) => {
                    tracing::info!(
                        group = group_id,
                        partitions = expired.len(),
                        retention_ms,
                        "committed offsets expired (offsets.retention.minutes)"
                    );
                    deleted += expired.len();
                }
                Err(e) => {
                    let _ = self.write_failed(&group_id, "expiring committed offsets", &e);
                }
            }
        }
        deleted
    }

    /// The offsets of `group_id` expired at `now`, by what this node holds of the group (its
    /// membership and its cached offsets); `first_seen` is when the sweep first saw it.
    fn expired(
        &self,
        group_id: &str,
        first_seen: u64,
        now: u64,
        retention_ms: u64,
    ) -> Vec<(String, i32)> {
        // From when each offset counts, by the group's membership.
        let counts_from = {
            let groups = self.inner.groups.lock();
            match groups.get(group_id) {
                None => CountsFrom::EmptySince(first_seen),
                Some(g) => match g.empty_since() {
                    Some(since) => CountsFrom::EmptySince(since.max(first_seen)),
                    None => match g.offset_delete_guard() {
                        Ok(Some(subscribed)) => CountsFrom::Unsubscribed(subscribed),
                        _ => return Vec::new(),
                    },
                },
            }
        };
        self.inner
            .offsets
            .all(group_id)
            .into_iter()
            .filter(|((topic, _), o)| {
                counts_from
                    .of(topic, o.commit_ms)
                    .is_some_and(|from| now.saturating_sub(from) >= retention_ms)
            })
            .map(|(key, _)| key)
            .collect()
    }
}
