//! Parsed table metadata by metadata location, within a byte budget: a table with hundreds
//! of snapshots has a `metadata.json` of hundreds of KiB, and loading it (every engine's
//! `loadTable`, every commit) would otherwise read and parse it again each time.
//!
//! Invariants:
//! - Keyed by metadata location, which names an immutable file (every commit writes a new
//!   one), so an entry is never stale: a table that moved on is looked up under its new
//!   location, and the old entry ages out.
//! - The entries' weights (the size of their `metadata.json`; the parsed form is a few times
//!   larger) never sum past the budget: the least recently used go first, and a file larger
//!   than the whole budget is not kept.

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::spec::TableMetadata;
use parking_lot::Mutex;

/// A bounded LRU of parsed table metadata; see the module docs.
#[derive(Debug)]
pub struct MetadataCache {
    budget: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    used: usize,
    /// Advances on every hit and insert; an entry's `last_used` orders evictions.
    clock: u64,
    hits: u64,
    misses: u64,
}

#[derive(Debug)]
struct Entry {
    metadata: Arc<TableMetadata>,
    weight: usize,
    last_used: u64,
}

impl MetadataCache {
    /// A cache holding up to `budget` bytes of metadata files (0: nothing is kept).
    pub fn new(budget: usize) -> Self {
        MetadataCache {
            budget,
            inner: Mutex::default(),
        }
    }

    /// The metadata of the file at `location`, if cached.
    pub fn get(&self, location: &str) -> Option<Arc<TableMetadata>> {
        let mut inner = self.inner.lock();
        inner.clock += 1;
        let now = inner.clock;
        match inner.entries.get_mut(location) {
            Some(entry) => {
                entry.last_used = now;
                let metadata = entry.metadata.clone();
                inner.hits += 1;
                Some(metadata)
            }
            None => {
                inner.misses += 1;
                None
            }
        }
    }

    /// Keeps the metadata parsed from the file at `location`, `weight` bytes long, evicting
    /// the least recently used entries to stay within the budget.
    pub fn insert(&self, location: &str, metadata: Arc<TableMetadata>, weight: usize) {
        if weight > self.budget {
            return;
        }
        let mut inner = self.inner.lock();
        inner.clock += 1;
        let now = inner.clock;
        if let Some(old) = inner.entries.remove(location) {
            inner.used -= old.weight;
        }
        while inner.used + weight > self.budget {
            let Some(oldest) = inner
                .entries
                .iter()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(evicted) = inner.entries.remove(&oldest) {
                inner.used -= evicted.weight;
            }
        }
        inner.used += weight;
        inner.entries.insert(
            location.to_string(),
            Entry {
                metadata,
                weight,
                last_used: now,
            },
        );
    }

    /// (hits, misses) so far.
    pub fn stats(&self) -> (u64, u64) {
        let inner = self.inner.lock();
        (inner.hits, inner.misses)
    }

    /// Bytes of metadata files held.
    pub fn used(&self) -> usize {
        self.inner.lock().used
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::{NestedField, PrimitiveType, Schema, TableMetadataBuilder, Type};

    fn metadata() -> Arc<TableMetadata> {
        let schema = Schema::builder()
            .with_fields(vec![Arc::new(NestedField::required(
                1,
                "id",
                Type::Primitive(PrimitiveType::Long),
            ))])
            .build()
            .unwrap();
        let creation = iceberg::TableCreation::builder()
            .name("t".into())
            .location("memory://t".into())
            .schema(schema)
            .build();
        Arc::new(
            TableMetadataBuilder::from_table_creation(creation)
                .unwrap()
                .build()
                .unwrap()
                .metadata,
        )
    }

    #[test]
    fn least_recently_used_entries_make_room_within_the_budget() {
        let cache = MetadataCache::new(100);
        let m = metadata();
        cache.insert("a", m.clone(), 40);
        cache.insert("b", m.clone(), 40);
        assert!(cache.get("a").is_some());
        cache.insert("c", m.clone(), 40);
        assert!(cache.get("b").is_none(), "b was least recently used");
        assert!(cache.get("a").is_some() && cache.get("c").is_some());
        assert_eq!(cache.used(), 80);
        cache.insert("huge", m.clone(), 101);
        assert!(cache.get("huge").is_none());
        cache.insert("a", m, 60);
        assert_eq!(cache.used(), 100);
        let (hits, misses) = cache.stats();
        assert_eq!((hits, misses), (3, 2));
        assert!(MetadataCache::new(0).get("a").is_none());
    }
}
