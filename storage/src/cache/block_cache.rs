//! An LRU cache of object blocks and parsed object indexes with a byte budget.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::objects::format::BlockIndex;

/// `(object id, block position)`; an object's index uses position `u64::MAX`.
pub(crate) type BlockKey = (u64, u64);

#[derive(Debug, Clone)]
pub(crate) enum Cached {
    Block(Bytes),
    Index(Arc<Vec<BlockIndex>>),
}

#[derive(Debug, Default)]
struct Lru {
    entries: HashMap<BlockKey, (Cached, u64, u64)>,
    order: BTreeMap<u64, BlockKey>,
    used: u64,
    tick: u64,
}

#[derive(Debug)]
pub(crate) struct BlockCache {
    budget: u64,
    lru: Mutex<Lru>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl BlockCache {
    pub(crate) fn new(budget: u64) -> Self {
        BlockCache {
            budget,
            lru: Mutex::default(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub(crate) fn get(&self, key: BlockKey) -> Option<Cached> {
        let mut lru = self.lru.lock();
        lru.tick += 1;
        let tick = lru.tick;
        let found = match lru.entries.get_mut(&key) {
            Some((value, last, _)) => {
                let old = std::mem::replace(last, tick);
                Some((value.clone(), old))
            }
            None => None,
        };
        match found {
            Some((value, old)) => {
                lru.order.remove(&old);
                lru.order.insert(tick, key);
                self.hits.fetch_add(1, Ordering::Relaxed);
                Some(value)
            }
            None => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Caches `value`, charging `size` bytes, evicting the least recently used entries to stay
    /// within budget. A value larger than the whole budget is not cached.
    pub(crate) fn insert(&self, key: BlockKey, value: Cached, size: u64) {
        if size > self.budget {
            return;
        }
        let mut lru = self.lru.lock();
        if let Some((_, last, old_size)) = lru.entries.remove(&key) {
            lru.order.remove(&last);
            lru.used -= old_size;
        }
        while lru.used + size > self.budget {
            let Some((_, victim)) = lru.order.pop_first() else {
                break;
            };
            if let Some((_, _, victim_size)) = lru.entries.remove(&victim) {
                lru.used -= victim_size;
            }
        }
        lru.tick += 1;
        let tick = lru.tick;
        lru.order.insert(tick, key);
        lru.entries.insert(key, (value, tick, size));
        lru.used += size;
    }

    /// Drops everything cached for an object (it was deleted).
    pub(crate) fn forget_object(&self, object_id: u64) {
        let mut lru = self.lru.lock();
        let keys: Vec<BlockKey> = lru
            .entries
            .keys()
            .filter(|k| k.0 == object_id)
            .copied()
            .collect();
        for key in keys {
            if let Some((_, last, size)) = lru.entries.remove(&key) {
                lru.order.remove(&last);
                lru.used -= size;
            }
        }
    }

    pub(crate) fn used(&self) -> u64 {
        self.lru.lock().used
    }

    pub(crate) fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    pub(crate) fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(n: usize) -> Cached {
        Cached::Block(Bytes::from(vec![0u8; n]))
    }

    #[test]
    fn stays_within_budget_and_evicts_least_recently_used() {
        let cache = BlockCache::new(100);
        cache.insert((1, 0), block(40), 40);
        cache.insert((1, 1), block(40), 40);
        assert!(cache.get((1, 0)).is_some()); // (1, 1) is now the least recently used
        cache.insert((1, 2), block(40), 40);
        assert!(cache.used() <= 100);
        assert!(cache.get((1, 1)).is_none(), "LRU entry evicted");
        assert!(cache.get((1, 0)).is_some());
        assert!(cache.get((1, 2)).is_some());
        cache.insert((2, 0), block(500), 500);
        assert!(
            cache.get((2, 0)).is_none(),
            "larger than the budget: not cached"
        );
        cache.forget_object(1);
        assert_eq!(cache.used(), 0);
    }
}
