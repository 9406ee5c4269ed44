//! A plain B+tree updated in place — the baseline the paper argues against (§1): every
//! modification rewrites its leaf (and, on a split, the parents) on the device through
//! the same buffer cache ([`crate::cache::Cache`], write-through) and block format as
//! the FD+tree.
//!
//! Choices: one readers-writer lock for the tree (lookups and scans share it,
//! modifications take it exclusively); nodes are tree blocks whose kind follows from
//! their depth (internal nodes hold fence entries `(separator, child)`, leaves hold
//! insert entries and are chained by `next` for range scans); a child is found by the
//! largest separator not above the key, else the first child; deletes remove the entry
//! and never merge underfull nodes (as many production B+trees do); the root and
//! height live in memory only — the baseline has no crash recovery.

use crate::cache::{Allocator, Cache};
use crate::format::{Block, Entry, Kind, entries_per_block};
use crate::sync::{RwLock, lock};
use crate::{FdError, sync::Mutex};
use csd_host::SharedDevice;
use std::collections::HashSet;

/// Configuration of the B+tree baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct BTreeConfig {
    /// Buffer cache capacity in bytes (paper: 15 MB).
    pub cache_bytes: usize,
    /// Node size in bytes (a multiple of the LBA size).
    pub block_bytes: usize,
    /// First LBA of the tree's region.
    pub start_lba: u64,
    /// LBAs of the region (`None`: to the end of the device).
    pub lba_count: Option<u64>,
}

impl Default for BTreeConfig {
    /// 15 MB cache, 4 KiB nodes, the whole device.
    fn default() -> BTreeConfig {
        BTreeConfig {
            cache_bytes: 15 * 1024 * 1024,
            block_bytes: 4096,
            start_lba: 0,
            lba_count: None,
        }
    }
}

struct Shape {
    root: u64,
    /// Levels of nodes; 1 = the root is a leaf.
    height: u32,
}

/// A B+tree updated in place on a shared device. `Send + Sync`.
pub struct BTree {
    cache: Cache,
    alloc: Mutex<Allocator>,
    shape: RwLock<Shape>,
    cap: usize,
}

impl BTree {
    /// Create an empty tree in the configured LBA range.
    pub fn create(dev: SharedDevice, cfg: BTreeConfig) -> Result<BTree, FdError> {
        let lba = dev.identify().lba_size as u64;
        if lba == 0 || cfg.block_bytes == 0 || !(cfg.block_bytes as u64).is_multiple_of(lba) {
            return Err(FdError::Config(format!(
                "block_bytes {} must be a positive multiple of the device LBA size {lba}",
                cfg.block_bytes
            )));
        }
        let cap = entries_per_block(cfg.block_bytes);
        if !(4..=u16::MAX as usize).contains(&cap) {
            return Err(FdError::Config(format!(
                "block_bytes {} gives {cap} entries per node",
                cfg.block_bytes
            )));
        }
        let lbas = dev.identify().lbas;
        let have = cfg.lba_count.unwrap_or(lbas.saturating_sub(cfg.start_lba));
        if cfg.start_lba.checked_add(have).is_none_or(|e| e > lbas) {
            return Err(FdError::Config(format!(
                "LBA range {}+{have} is beyond the device's {lbas} LBAs",
                cfg.start_lba
            )));
        }
        let per = cfg.block_bytes as u64 / lba;
        let blocks = have / per;
        if blocks < 4 {
            return Err(FdError::DeviceTooSmall {
                need_lbas: 4 * per,
                have_lbas: have,
            });
        }
        let cache = Cache::new(
            dev,
            cfg.start_lba,
            cfg.block_bytes,
            cfg.cache_bytes.max(4 * cfg.block_bytes),
        );
        let mut alloc = Allocator::new(blocks, &HashSet::new());
        let root = alloc.alloc()?;
        {
            let mut h = cache.handle()?;
            cache.put(
                h.get(),
                root,
                Block {
                    entries: Vec::new(),
                    next: None,
                },
            )?;
        }
        Ok(BTree {
            cache,
            alloc: Mutex::new(alloc),
            shape: RwLock::new(Shape { root, height: 1 }),
            cap,
        })
    }

    /// The leaf for `key` and the path of (node, child index) above it.
    fn path(&self, s: &Shape, key: u64) -> Result<(Vec<(u64, usize)>, u64), FdError> {
        let mut id = s.root;
        let mut path = Vec::with_capacity(s.height as usize);
        for _ in 1..s.height {
            let b = self.cache.get(id)?;
            let i = b
                .entries
                .partition_point(|e| e.key <= key)
                .saturating_sub(1);
            let child =
                b.entries.get(i).map(|e| e.val).ok_or_else(|| {
                    FdError::Corrupt(format!("B+tree internal node {id} is empty"))
                })?;
            path.push((id, i));
            id = child;
        }
        Ok((path, id))
    }

    /// The value of `key`.
    pub fn lookup(&self, key: u64) -> Result<Option<u64>, FdError> {
        let s = self.shape.read().unwrap_or_else(|e| e.into_inner());
        let (_, leaf) = self.path(&s, key)?;
        let b = self.cache.get(leaf)?;
        let i = b.entries.partition_point(|e| e.key < key);
        Ok(b.entries.get(i).filter(|e| e.key == key).map(|e| e.val))
    }

    /// All `(key, value)` with `lo <= key <= hi`, in key order.
    pub fn range(&self, lo: u64, hi: u64) -> Result<Vec<(u64, u64)>, FdError> {
        let mut out = Vec::new();
        if lo > hi {
            return Ok(out);
        }
        let s = self.shape.read().unwrap_or_else(|e| e.into_inner());
        let (_, mut leaf) = self.path(&s, lo)?;
        loop {
            let b = self.cache.get(leaf)?;
            let start = b.entries.partition_point(|e| e.key < lo);
            for e in &b.entries[start..] {
                if e.key > hi {
                    return Ok(out);
                }
                out.push((e.key, e.val));
            }
            match b.next {
                Some(n) => leaf = n,
                None => return Ok(out),
            }
        }
    }

    /// Insert or update `key`; the leaf is rewritten in place (splits propagate up).
    pub fn insert(&self, key: u64, val: u64) -> Result<(), FdError> {
        let mut s = self.shape.write().unwrap_or_else(|e| e.into_inner());
        let (mut path, leaf) = self.path(&s, key)?;
        let mut ph = self.cache.handle()?;
        let h = ph.get();
        let mut b = (*self.cache.get(leaf)?).clone();
        let i = b.entries.partition_point(|e| e.key < key);
        if b.entries.get(i).is_some_and(|e| e.key == key) {
            b.entries[i].val = val;
            return self.cache.put(h, leaf, b);
        }
        b.entries.insert(
            i,
            Entry {
                key,
                kind: Kind::Insert,
                val,
            },
        );
        let mut id = leaf;
        let mut node = b;
        loop {
            if node.entries.len() <= self.cap {
                return self.cache.put(h, id, node);
            }
            // Split: the upper half moves to a new node right of this one.
            let right_id = lock(&self.alloc).alloc()?;
            let upper = node.entries.split_off(node.entries.len() / 2);
            let sep = upper[0].key;
            let right = Block {
                entries: upper,
                next: node.next,
            };
            node.next = Some(right_id);
            self.cache.put(h, right_id, right)?;
            self.cache.put(h, id, node)?;
            let fence = Entry {
                key: sep,
                kind: Kind::Fence,
                val: right_id,
            };
            match path.pop() {
                Some((parent, idx)) => {
                    let mut p = (*self.cache.get(parent)?).clone();
                    p.entries.insert(idx + 1, fence);
                    id = parent;
                    node = p;
                }
                None => {
                    let root = lock(&self.alloc).alloc()?;
                    let left_key = self
                        .cache
                        .get(id)?
                        .entries
                        .first()
                        .map_or(0, |e| e.key)
                        .min(sep);
                    let r = Block {
                        entries: vec![
                            Entry {
                                key: left_key,
                                kind: Kind::Fence,
                                val: id,
                            },
                            fence,
                        ],
                        next: None,
                    };
                    self.cache.put(h, root, r)?;
                    s.root = root;
                    s.height += 1;
                    return Ok(());
                }
            }
        }
    }

    /// Delete `key`; returns whether it was present. The leaf is rewritten in place.
    pub fn delete(&self, key: u64) -> Result<bool, FdError> {
        let s = self.shape.write().unwrap_or_else(|e| e.into_inner());
        let (_, leaf) = self.path(&s, key)?;
        let mut b = (*self.cache.get(leaf)?).clone();
        let i = b.entries.partition_point(|e| e.key < key);
        if b.entries.get(i).is_none_or(|e| e.key != key) {
            return Ok(false);
        }
        b.entries.remove(i);
        let mut ph = self.cache.handle()?;
        self.cache.put(ph.get(), leaf, b)?;
        Ok(true)
    }

    /// Levels of nodes (1 = a single leaf).
    pub fn height(&self) -> u32 {
        self.shape.read().unwrap_or_else(|e| e.into_inner()).height
    }

    /// Nodes written to and read from the device so far.
    pub fn io_counts(&self) -> (u64, u64) {
        use crate::sync::Ordering;
        (
            self.cache.counters.writes.load(Ordering::Relaxed),
            self.cache.counters.reads.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn dev() -> SharedDevice {
        crate::test_device()
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u64),
        Delete(u64),
        Lookup(u64),
        Range(u64, u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            5 => (0..3000u64, any::<u64>()).prop_map(|(k, v)| Op::Insert(k, v)),
            2 => (0..3000u64).prop_map(Op::Delete),
            2 => (0..3000u64).prop_map(Op::Lookup),
            1 => (0..3000u64, 0..400u64).prop_map(|(a, w)| Op::Range(a, a + w)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]
        #[test]
        fn btree_matches_btreemap(ops in prop::collection::vec(op(), 500..3000)) {
            let cfg = BTreeConfig { cache_bytes: 64 * 1024, ..BTreeConfig::default() };
            let t = BTree::create(dev(), cfg).unwrap();
            let mut m = BTreeMap::new();
            for o in ops {
                match o {
                    Op::Insert(k, v) => { t.insert(k, v).unwrap(); m.insert(k, v); }
                    Op::Delete(k) => prop_assert_eq!(t.delete(k).unwrap(), m.remove(&k).is_some()),
                    Op::Lookup(k) => prop_assert_eq!(t.lookup(k).unwrap(), m.get(&k).copied()),
                    Op::Range(a, b) => {
                        let want: Vec<_> = m.range(a..=b).map(|(&k, &v)| (k, v)).collect();
                        prop_assert_eq!(t.range(a, b).unwrap(), want);
                    }
                }
            }
            let all: Vec<_> = m.iter().map(|(&k, &v)| (k, v)).collect();
            prop_assert_eq!(t.range(0, u64::MAX).unwrap(), all);
        }
    }

    #[test]
    fn grows_in_height_and_rejects_bad_config() {
        let t = BTree::create(
            dev(),
            BTreeConfig {
                cache_bytes: 64 * 1024,
                ..BTreeConfig::default()
            },
        )
        .unwrap();
        for k in 0..60_000u64 {
            t.insert(k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 16, k)
                .unwrap();
        }
        assert!(t.height() >= 3);
        for k in (0..60_000u64).step_by(11) {
            assert_eq!(
                t.lookup(k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 16)
                    .unwrap(),
                Some(k)
            );
        }
        let (w, _) = t.io_counts();
        assert!(w >= 60_000, "every insert rewrites its leaf in place: {w}");
        let bad = BTreeConfig {
            block_bytes: 1000,
            ..BTreeConfig::default()
        };
        assert!(matches!(BTree::create(dev(), bad), Err(FdError::Config(_))));
        let small = BTreeConfig {
            lba_count: Some(2),
            ..BTreeConfig::default()
        };
        assert!(matches!(
            BTree::create(dev(), small),
            Err(FdError::DeviceTooSmall { .. })
        ));
    }
}
