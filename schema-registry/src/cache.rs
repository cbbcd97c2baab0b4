//! Parsed schemas by id, bounded by a count and an estimated byte budget (FIFO eviction: ids
//! are immutable, so an entry is never stale, only evicted).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::schema::StoredSchema;

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<u32, Arc<StoredSchema>>,
    order: VecDeque<u32>,
    bytes: usize,
}

/// A bounded cache of parsed schemas.
#[derive(Debug)]
pub(crate) struct SchemaCache {
    inner: Mutex<Inner>,
    max_entries: usize,
    max_bytes: usize,
}

impl SchemaCache {
    pub(crate) fn new(max_entries: usize, max_bytes: usize) -> Self {
        SchemaCache {
            inner: Mutex::new(Inner::default()),
            max_entries,
            max_bytes,
        }
    }

    pub(crate) fn get(&self, id: u32) -> Option<Arc<StoredSchema>> {
        self.inner.lock().map.get(&id).cloned()
    }

    /// Inserts `schema`, evicting the oldest entries past the budget. A schema larger than the
    /// whole budget is not cached.
    pub(crate) fn insert(&self, schema: Arc<StoredSchema>) {
        let size = schema.estimated_bytes();
        if size > self.max_bytes || self.max_entries == 0 {
            return;
        }
        let mut inner = self.inner.lock();
        if inner.map.contains_key(&schema.id) {
            return;
        }
        while inner.map.len() >= self.max_entries || inner.bytes + size > self.max_bytes {
            let Some(old) = inner.order.pop_front() else {
                break;
            };
            if let Some(s) = inner.map.remove(&old) {
                inner.bytes -= s.estimated_bytes();
            }
        }
        inner.bytes += size;
        inner.order.push_back(schema.id);
        inner.map.insert(schema.id, schema);
    }

    /// (entries, estimated bytes).
    pub(crate) fn usage(&self) -> (usize, usize) {
        let inner = self.inner.lock();
        (inner.map.len(), inner.bytes)
    }
}

/// Ids found unknown, each remembered for a short time so that a stream of records naming an
/// unknown id costs one store lookup per `ttl`, not one per record. Bounded by a count: when
/// full, the oldest entry goes. An id registered on this node is forgotten at once
/// ([`UnknownIds::forget`]); another node's registration is seen within `ttl`.
#[derive(Debug)]
pub(crate) struct UnknownIds {
    inner: Mutex<(HashMap<u32, tokio::time::Instant>, VecDeque<u32>)>,
    max_entries: usize,
    ttl: std::time::Duration,
}

impl UnknownIds {
    pub(crate) fn new(max_entries: usize, ttl: std::time::Duration) -> Self {
        UnknownIds {
            inner: Mutex::new((HashMap::new(), VecDeque::new())),
            max_entries,
            ttl,
        }
    }

    /// Whether `id` was found unknown less than `ttl` ago.
    pub(crate) fn contains(&self, id: u32) -> bool {
        let mut inner = self.inner.lock();
        match inner.0.get(&id) {
            Some(at) if at.elapsed() < self.ttl => true,
            Some(_) => {
                inner.0.remove(&id);
                false
            }
            None => false,
        }
    }

    pub(crate) fn insert(&self, id: u32) {
        if self.max_entries == 0 || self.ttl.is_zero() {
            return;
        }
        let mut inner = self.inner.lock();
        while inner.0.len() >= self.max_entries {
            let Some(old) = inner.1.pop_front() else {
                break;
            };
            inner.0.remove(&old);
        }
        if inner.0.insert(id, tokio::time::Instant::now()).is_none() {
            inner.1.push_back(id);
        }
        // Keep the order queue bounded too (ids removed on expiry leave stale slots).
        let (map, order) = &mut *inner;
        if order.len() > 2 * self.max_entries {
            order.retain(|i| map.contains_key(i));
        }
    }

    pub(crate) fn forget(&self, id: u32) {
        self.inner.lock().0.remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::ParsedSchema;

    fn schema(id: u32) -> Arc<StoredSchema> {
        let avro = crate::avro::parse(r#""string""#).expect("valid");
        Arc::new(StoredSchema::new(id, ParsedSchema::Avro(avro), Vec::new()))
    }

    #[test]
    fn stays_within_count_and_byte_budgets() {
        let cache = SchemaCache::new(3, 10_000);
        for id in 1..=5 {
            cache.insert(schema(id));
        }
        assert_eq!(cache.usage().0, 3);
        assert!(cache.get(1).is_none() && cache.get(5).is_some());
        let one = schema(1).estimated_bytes();
        let cache = SchemaCache::new(100, one * 2);
        for id in 1..=5 {
            cache.insert(schema(id));
        }
        assert_eq!(cache.usage(), (2, one * 2));
    }

    #[test]
    fn unknown_ids_are_remembered_briefly_and_bounded() {
        let unknown = UnknownIds::new(2, std::time::Duration::from_secs(60));
        unknown.insert(1);
        unknown.insert(2);
        assert!(unknown.contains(1) && unknown.contains(2));
        unknown.insert(3);
        assert!(!unknown.contains(1), "the oldest is evicted at the bound");
        assert!(unknown.contains(3));
        unknown.forget(3);
        assert!(!unknown.contains(3));
        let brief = UnknownIds::new(10, std::time::Duration::ZERO);
        brief.insert(5);
        assert!(!brief.contains(5), "a zero ttl caches nothing");
    }
}
