//! The index cache of flixr §4.3 and §4.8: an LRU of index pages (the extension bytes
//! of one MAP page) in controller DRAM. Choices made here: capacity counts pages (the
//! cache's bytes over one index page's bytes, at least one); a hit refreshes the page's
//! recency, an insert evicts the least recent pages first; the device keeps a cached
//! copy in step when it sets an entry.

use std::collections::{BTreeMap, HashMap};

/// The index cache: LRU of index pages (one MAP page's extension bytes each).
#[derive(Debug)]
pub(super) struct IndexCache {
    capacity: usize,
    pages: HashMap<u64, (Vec<u8>, u64)>,
    lru: BTreeMap<u64, u64>,
    tick: u64,
    pub(super) hits: u64,
    pub(super) misses: u64,
}

impl IndexCache {
    /// Index pages cached.
    pub(super) fn len(&self) -> usize {
        self.pages.len()
    }

    pub(super) fn new(capacity: usize) -> IndexCache {
        IndexCache {
            capacity: capacity.max(1),
            pages: HashMap::new(),
            lru: BTreeMap::new(),
            tick: 0,
            hits: 0,
            misses: 0,
        }
    }

    pub(super) fn touch(&mut self, mp: u64) -> Option<&[u8]> {
        self.tick += 1;
        let tick = self.tick;
        let (bytes, t) = self.pages.get_mut(&mp)?;
        self.hits += 1;
        self.lru.remove(t);
        *t = tick;
        self.lru.insert(tick, mp);
        Some(bytes)
    }

    pub(super) fn insert(&mut self, mp: u64, bytes: Vec<u8>) {
        while self.pages.len() >= self.capacity {
            let Some((_, victim)) = self.lru.pop_first() else {
                break;
            };
            self.pages.remove(&victim);
        }
        self.tick += 1;
        self.lru.insert(self.tick, mp);
        self.pages.insert(mp, (bytes, self.tick));
    }

    /// Keep a cached copy in step with an entry the device just set.
    pub(super) fn update(&mut self, mp: u64, offset: usize, entry: &[u8]) {
        if let Some((bytes, _)) = self.pages.get_mut(&mp) {
            bytes[offset..offset + entry.len()].copy_from_slice(entry);
        }
    }

    pub(super) fn clear(&mut self) {
        self.pages.clear();
        self.lru.clear();
    }
}
