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
    pub fn new(max_entries: usize, max_bytes: usize) -> Self {
        SchemaCache {
            inner: Mutex::new(Inner::default()),
            max_entries,
            max_bytes,
        }
    }

    pub fn get(&self, id: u32) -> Option<Arc<StoredSchema>> {
        self.inner.lock().map.get(&id).cloned()
    }

    /// Inserts `schema`, evicting the oldest entries past the budget. A schema larger than the
    /// whole budget is not cached.
    pub fn insert(&self, schema: Arc<StoredSchema>) {
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
    pub fn usage(&self) -> (usize, usize) {
        let inner = self.inner.lock();
        (inner.map.len(), inner.bytes)
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
}
