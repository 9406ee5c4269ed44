//! A paged B+tree over `(key, value)` pairs whose nodes occupy LBAs of a device: the
//! per-row index of FLIXR's baselines (flixr §5, §6: "host-side index" and "in-SSD
//! B+-tree"). The same tree serves both: the host's copy issues Read/Write commands for
//! the nodes it touches ([`Touch`]), the firmware's copy reads and programs them through
//! the FTL with its own DRAM cache ([`crate::ssd_btree`]).
//!
//! Choices:
//! * Entries are `(key, value)` pairs ordered by both (a non-unique index: the value is
//!   the row's page, so equal keys are allowed), 24-byte entries (`key`, `value`,
//!   `child`) after a 16-byte header. A node has a size (its page: [`NODE_BYTES`], 4 KiB,
//!   unless made with [`PagedBtree::with_node_bytes`]) and so a fan-out, [`FANOUT`] (170)
//!   for 4 KiB, 682 for the 16 KiB of an InnoDB index page ([`fanout_of`]); the caller
//!   places one node per LBA, at its start.
//! * Inner entries hold the smallest pair of their child's subtree; a search for
//!   `(k, v)` descends into the last child whose separator is `<= (k, v)`.
//! * A node that overflows splits in half (its upper half moves to a new LBA); a root
//!   split adds a level. A leaf emptied by deletions is unlinked from its parent and its
//!   LBA reused; under-full nodes are not merged (as in PostgreSQL's nbtree, which only
//!   reclaims empty pages).
//! * Range scans walk down from the root into every child that can hold the range (no
//!   sibling links), so every node read is a dependent read of its parent.
//! * The node contents are also kept in memory (the tree's own copy, which a real DBMS
//!   would keep in its buffer pool); [`PagedBtree::node_bytes`] serializes a node for
//!   the page written to the device, and [`Touch`] lists which nodes an operation read
//!   and wrote so the caller charges those I/Os.

use std::collections::HashMap;
use thiserror::Error;

/// Bytes of a node made by [`PagedBtree::new`], and the smallest node
/// [`PagedBtree::with_node_bytes`] takes.
pub const NODE_BYTES: usize = 4096;
/// Entries per node of [`NODE_BYTES`]: `(4096 - 16) / 24`.
pub const FANOUT: usize = fanout_of(NODE_BYTES);

/// Entries a node of `node_bytes` holds: its 16-byte header, then 24 bytes an entry.
pub const fn fanout_of(node_bytes: usize) -> usize {
    node_bytes.saturating_sub(16) / 24
}

/// A B+tree that cannot grow.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BtreeError {
    /// Every LBA of the tree's region holds a node.
    #[error("the B+tree's region of {lbas} LBAs is full: give the index a larger region")]
    Full {
        /// LBAs of the region.
        lbas: u64,
    },
    /// A region too small for a root.
    #[error("a B+tree needs a region of at least 1 LBA (got {0})")]
    Region(u64),
    /// A node size smaller than [`NODE_BYTES`] or not a multiple of 8 bytes.
    #[error(
        "a B+tree node is at least {NODE_BYTES} bytes and a multiple of 8 (got {0}): give \
         its page size, e.g. 16384"
    )]
    NodeBytes(usize),
}

/// The nodes an operation read and wrote, and the key comparisons it made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Touch {
    /// Node LBAs read, in order (each a dependent read of the previous level).
    pub read: Vec<u64>,
    /// Node LBAs written (modified or new), deduplicated.
    pub written: Vec<u64>,
    /// Node LBAs freed (emptied leaves).
    pub freed: Vec<u64>,
    /// Key comparisons (binary searches and entries scanned).
    pub compares: u64,
}

impl Touch {
    fn wrote(&mut self, lba: u64) {
        if !self.written.contains(&lba) {
            self.written.push(lba);
        }
    }

    /// Forget everything (reuse the buffers).
    pub fn clear(&mut self) {
        self.read.clear();
        self.written.clear();
        self.freed.clear();
        self.compares = 0;
    }
}

#[derive(Debug, Clone)]
struct Node {
    leaf: bool,
    /// Leaves: `((key, value), 0)`; inner: `((min pair of child), child LBA)`.
    entries: Vec<((i64, u64), u64)>,
}

/// Runs of consecutive sorted LBAs, each at most `max` long: `(first, length)`.
pub fn runs(lbas: &[u64], max: u64) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = Vec::new();
    for &p in lbas {
        match v.last_mut() {
            Some((f, n)) if *f + *n == p && *n < max => *n += 1,
            _ => v.push((p, 1)),
        }
    }
    v
}

/// The B+tree: a region of LBAs `first..first + lbas` holding its nodes.
#[derive(Debug, Clone)]
pub struct PagedBtree {
    nodes: HashMap<u64, Node>,
    root: u64,
    first: u64,
    lbas: u64,
    next: u64,
    free: Vec<u64>,
    len: u64,
    fanout: usize,
    node_bytes: usize,
}

fn log2c(n: usize) -> u64 {
    (usize::BITS - n.max(1).leading_zeros()) as u64
}

impl PagedBtree {
    /// An empty tree (one empty leaf as root) of [`NODE_BYTES`] nodes in LBAs
    /// `first..first + lbas`.
    pub fn new(first: u64, lbas: u64) -> Result<PagedBtree, BtreeError> {
        Self::with_fanout(first, lbas, FANOUT)
    }

    /// An empty tree whose nodes are `node_bytes` (at least [`NODE_BYTES`], a multiple
    /// of 8), with the fan-out [`fanout_of`] gives.
    pub fn with_node_bytes(
        first: u64,
        lbas: u64,
        node_bytes: usize,
    ) -> Result<PagedBtree, BtreeError> {
        if node_bytes < NODE_BYTES || !node_bytes.is_multiple_of(8) {
            return Err(BtreeError::NodeBytes(node_bytes));
        }
        let mut t = Self::with_fanout(first, lbas, FANOUT)?;
        t.node_bytes = node_bytes;
        t.fanout = fanout_of(node_bytes);
        Ok(t)
    }

    /// An empty tree of [`NODE_BYTES`] nodes with a smaller fan-out (tests; at least 4,
    /// at most [`FANOUT`]).
    pub fn with_fanout(first: u64, lbas: u64, fanout: usize) -> Result<PagedBtree, BtreeError> {
        if lbas == 0 {
            return Err(BtreeError::Region(lbas));
        }
        let mut nodes = HashMap::new();
        nodes.insert(
            first,
            Node {
                leaf: true,
                entries: Vec::new(),
            },
        );
        Ok(PagedBtree {
            nodes,
            root: first,
            first,
            lbas,
            next: first + 1,
            free: Vec::new(),
            len: 0,
            fanout: fanout.clamp(4, FANOUT),
            node_bytes: NODE_BYTES,
        })
    }

    /// Bytes of a node (the page [`PagedBtree::node_bytes`] serializes).
    pub fn node_size(&self) -> usize {
        self.node_bytes
    }

    /// Entries a node holds.
    pub fn fanout(&self) -> usize {
        self.fanout
    }

    /// Entries in the tree.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the tree has no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Nodes in the tree.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// The region: first LBA and length.
    pub fn region(&self) -> (u64, u64) {
        (self.first, self.lbas)
    }

    /// The root's LBA.
    pub fn root(&self) -> u64 {
        self.root
    }

    /// LBAs of every node.
    pub fn node_lbas(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.nodes.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// LBAs of the nodes above the leaves (the levels a host keeps in DRAM, flixr §3
    /// Figure 1), sorted.
    pub fn inner_node_lbas(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .nodes
            .iter()
            .filter(|(_, n)| !n.leaf)
            .map(|(l, _)| *l)
            .collect();
        v.sort_unstable();
        v
    }

    /// LBAs of the tree's leaves, in no particular order.
    pub fn leaf_lbas(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.leaf)
            .map(|(l, _)| *l)
            .collect()
    }

    /// Whether the node at `lba` is a leaf; `None` if no node is there.
    pub fn is_leaf(&self, lba: u64) -> Option<bool> {
        self.nodes.get(&lba).map(|n| n.leaf)
    }

    /// Levels from the root to the leaves.
    pub fn height(&self) -> usize {
        let mut h = 1;
        let mut n = &self.nodes[&self.root];
        while !n.leaf {
            h += 1;
            n = &self.nodes[&n.entries[0].1];
        }
        h
    }

    fn alloc(&mut self) -> Result<u64, BtreeError> {
        if let Some(l) = self.free.pop() {
            return Ok(l);
        }
        if self.next >= self.first + self.lbas {
            return Err(BtreeError::Full { lbas: self.lbas });
        }
        self.next += 1;
        Ok(self.next - 1)
    }

    /// Bulk-load sorted-or-not `entries` into an empty tree (leaves filled to
    /// `fill` of the fan-out, as CREATE INDEX does); every node is reported written.
    pub fn bulk_load(
        &mut self,
        mut entries: Vec<(i64, u64)>,
        fill: f64,
        touch: &mut Touch,
    ) -> Result<(), BtreeError> {
        entries.sort_unstable();
        let per = ((self.fanout as f64 * fill.clamp(0.1, 1.0)) as usize).max(2);
        let need = {
            let mut n = entries.len().div_ceil(per).max(1) as u64;
            let mut total = n;
            while n > 1 {
                n = n.div_ceil(per as u64);
                total += n;
            }
            total
        };
        if need > self.lbas {
            return Err(BtreeError::Full { lbas: self.lbas });
        }
        self.nodes.clear();
        self.free.clear();
        self.next = self.first;
        self.len = entries.len() as u64;
        let mut level: Vec<((i64, u64), u64)> = Vec::new();
        if entries.is_empty() {
            let l = self.alloc()?;
            self.nodes.insert(
                l,
                Node {
                    leaf: true,
                    entries: Vec::new(),
                },
            );
            touch.wrote(l);
            self.root = l;
            return Ok(());
        }
        for chunk in entries.chunks(per) {
            let l = self.alloc()?;
            self.nodes.insert(
                l,
                Node {
                    leaf: true,
                    entries: chunk.iter().map(|&e| (e, 0)).collect(),
                },
            );
            touch.wrote(l);
            level.push((chunk[0], l));
        }
        while level.len() > 1 {
            let mut up = Vec::new();
            for chunk in level.chunks(per) {
                let l = self.alloc()?;
                self.nodes.insert(
                    l,
                    Node {
                        leaf: false,
                        entries: chunk.to_vec(),
                    },
                );
                touch.wrote(l);
                up.push((chunk[0].0, l));
            }
            level = up;
        }
        self.root = level[0].1;
        Ok(())
    }

    /// Index of the child of inner `n` to descend into for `k`.
    fn child_at(n: &Node, k: (i64, u64)) -> usize {
        n.entries.partition_point(|e| e.0 <= k).saturating_sub(1)
    }

    /// Insert `(key, value)`.
    pub fn insert(&mut self, key: i64, value: u64, touch: &mut Touch) -> Result<(), BtreeError> {
        let k = (key, value);
        // Path from the root: (node, child index).
        let mut path: Vec<(u64, usize)> = Vec::new();
        let mut at = self.root;
        loop {
            touch.read.push(at);
            let n = &self.nodes[&at];
            touch.compares += log2c(n.entries.len());
            if n.leaf {
                break;
            }
            let i = Self::child_at(n, k);
            path.push((at, i));
            at = n.entries[i].1;
        }
        // Room check first, so a full region changes nothing: a split of every node on
        // the path (and a new root) is the most this insert can need.
        let mut splits = 0u64;
        if self.nodes[&at].entries.len() + 1 > self.fanout {
            splits += 1;
            for &(p, _) in path.iter().rev() {
                if self.nodes[&p].entries.len() + 1 > self.fanout {
                    splits += 1;
                } else {
                    break;
                }
            }
            if splits as usize > path.len() {
                splits += 1; // new root
            }
        }
        let room = self.free.len() as u64 + (self.first + self.lbas - self.next);
        if splits > room {
            return Err(BtreeError::Full { lbas: self.lbas });
        }
        let leaf = self.nodes.get_mut(&at).expect("leaf on path");
        let pos = leaf.entries.partition_point(|e| e.0 <= k);
        leaf.entries.insert(pos, (k, 0));
        touch.wrote(at);
        self.len += 1;
        if pos == 0 {
            self.fix_separators(&path, k, touch);
        }
        // Split upward while a node overflows.
        let mut node = at;
        let mut level = path.len();
        loop {
            if self.nodes[&node].entries.len() <= self.fanout {
                break;
            }
            let new = self.alloc()?;
            let n = self.nodes.get_mut(&node).expect("node on path");
            let upper = n.entries.split_off(n.entries.len() / 2);
            let leaf = n.leaf;
            let sep = upper[0].0;
            self.nodes.insert(
                new,
                Node {
                    leaf,
                    entries: upper,
                },
            );
            touch.wrote(node);
            touch.wrote(new);
            if level == 0 {
                let root = self.alloc()?;
                let low = self.nodes[&node].entries[0].0;
                self.nodes.insert(
                    root,
                    Node {
                        leaf: false,
                        entries: vec![(low, node), (sep, new)],
                    },
                );
                touch.wrote(root);
                self.root = root;
                break;
            }
            level -= 1;
            let (parent, i) = path[level];
            let p = self.nodes.get_mut(&parent).expect("parent on path");
            p.entries.insert(i + 1, (sep, new));
            touch.wrote(parent);
            node = parent;
        }
        Ok(())
    }

    /// After the smallest pair of a subtree became `k`, lower the separators on `path`.
    fn fix_separators(&mut self, path: &[(u64, usize)], k: (i64, u64), touch: &mut Touch) {
        for &(p, i) in path.iter().rev() {
            let n = self.nodes.get_mut(&p).expect("node on path");
            if n.entries[i].0 > k {
                n.entries[i].0 = k;
                touch.wrote(p);
            }
            if i != 0 {
                break;
            }
        }
    }

    /// The path to a leaf holding `k`: equal pairs may straddle a separator (and
    /// separators are lower bounds that deletions leave stale), so every child whose
    /// span can hold `k` is tried in order.
    fn find(
        &self,
        at: u64,
        k: (i64, u64),
        path: &mut Vec<(u64, usize)>,
        t: &mut Touch,
    ) -> Option<u64> {
        t.read.push(at);
        let n = &self.nodes[&at];
        t.compares += log2c(n.entries.len());
        if n.leaf {
            return n.entries.binary_search_by(|e| e.0.cmp(&k)).ok().map(|_| at);
        }
        let first = n.entries.partition_point(|e| e.0 < k).saturating_sub(1);
        let last = Self::child_at(n, k);
        for i in first..=last.max(first) {
            path.push((at, i));
            if let Some(l) = self.find(n.entries[i].1, k, path, t) {
                return Some(l);
            }
            path.pop();
        }
        None
    }

    /// Remove one `(key, value)`; returns whether it was there.
    pub fn remove(&mut self, key: i64, value: u64, touch: &mut Touch) -> bool {
        let k = (key, value);
        let mut path: Vec<(u64, usize)> = Vec::new();
        let Some(at) = self.find(self.root, k, &mut path, touch) else {
            return false;
        };
        let leaf = self.nodes.get_mut(&at).expect("leaf on path");
        let Ok(pos) = leaf.entries.binary_search_by(|e| e.0.cmp(&k)) else {
            return false;
        };
        leaf.entries.remove(pos);
        touch.wrote(at);
        self.len -= 1;
        // Unlink emptied nodes upward (never the root).
        let mut node = at;
        let mut level = path.len();
        while level > 0 && self.nodes[&node].entries.is_empty() {
            level -= 1;
            let (parent, i) = path[level];
            self.nodes.remove(&node);
            self.free.push(node);
            touch.freed.push(node);
            touch.written.retain(|&l| l != node);
            let p = self.nodes.get_mut(&parent).expect("parent on path");
            p.entries.remove(i);
            touch.wrote(parent);
            node = parent;
        }
        // An inner root left without children becomes an empty leaf; a root with one
        // child gives way to that child.
        if let Some(r) = self.nodes.get_mut(&self.root)
            && !r.leaf
            && r.entries.is_empty()
        {
            r.leaf = true;
        }
        loop {
            let r = &self.nodes[&self.root];
            if r.leaf || r.entries.len() != 1 {
                break;
            }
            let child = r.entries[0].1;
            let old = self.root;
            self.nodes.remove(&old);
            self.free.push(old);
            touch.freed.push(old);
            touch.written.retain(|&l| l != old);
            self.root = child;
        }
        true
    }

    /// Values of every entry with `lo <= key <= hi`, in `(key, value)` order.
    pub fn range(&self, lo: i64, hi: i64, touch: &mut Touch) -> Vec<u64> {
        let mut out = Vec::new();
        if lo <= hi {
            self.walk(self.root, (lo, 0), (hi, u64::MAX), touch, &mut out);
        }
        out
    }

    fn walk(&self, at: u64, lo: (i64, u64), hi: (i64, u64), t: &mut Touch, out: &mut Vec<u64>) {
        t.read.push(at);
        let n = &self.nodes[&at];
        t.compares += log2c(n.entries.len());
        if n.leaf {
            let s = n.entries.partition_point(|e| e.0 < lo);
            for e in &n.entries[s..] {
                t.compares += 1;
                if e.0 > hi {
                    break;
                }
                out.push(e.0.1);
            }
            return;
        }
        // The first child that can hold `lo` (equal pairs may straddle a separator).
        let s = n.entries.partition_point(|e| e.0 < lo).saturating_sub(1);
        for (i, e) in n.entries.iter().enumerate().skip(s) {
            if i > s && e.0 > hi {
                break;
            }
            self.walk(e.1, lo, hi, t, out);
        }
    }

    /// The node at `lba` serialized as its page: `[leaf u8, pad, count u64]` then
    /// `count` entries of `key i64, value u64, child u64`; `None` if no node is there.
    pub fn node_bytes(&self, lba: u64) -> Option<Vec<u8>> {
        let n = self.nodes.get(&lba)?;
        let mut v = vec![0u8; self.node_bytes];
        v[0] = n.leaf as u8;
        v[8..16].copy_from_slice(&(n.entries.len() as u64).to_le_bytes());
        for (i, ((k, val), c)) in n.entries.iter().enumerate() {
            let o = 16 + 24 * i;
            v[o..o + 8].copy_from_slice(&k.to_le_bytes());
            v[o + 8..o + 16].copy_from_slice(&val.to_le_bytes());
            v[o + 16..o + 24].copy_from_slice(&c.to_le_bytes());
        }
        Some(v)
    }

    /// Every entry in order (tests and checks).
    pub fn entries(&self) -> Vec<(i64, u64)> {
        let mut out = Vec::new();
        self.collect(self.root, &mut out);
        out
    }

    fn collect(&self, at: u64, out: &mut Vec<(i64, u64)>) {
        let n = &self.nodes[&at];
        if n.leaf {
            out.extend(n.entries.iter().map(|e| e.0));
        } else {
            for e in &n.entries {
                self.collect(e.1, out);
            }
        }
    }
}

/// An LRU set of node LBAs: the node cache of either side (host DRAM or device DRAM).
#[derive(Debug, Clone)]
pub struct LruSet {
    cap: usize,
    tick: u64,
    at: HashMap<u64, u64>,
    order: std::collections::BTreeMap<u64, u64>,
}

impl LruSet {
    /// A set holding at most `cap` LBAs (`usize::MAX`: unbounded; 0: holds nothing).
    pub fn new(cap: usize) -> LruSet {
        LruSet {
            cap,
            tick: 0,
            at: HashMap::new(),
            order: std::collections::BTreeMap::new(),
        }
    }

    /// Is `k` cached? A hit makes it the most recently used.
    pub fn touch(&mut self, k: u64) -> bool {
        let Some(t) = self.at.get_mut(&k) else {
            return false;
        };
        self.order.remove(t);
        self.tick += 1;
        *t = self.tick;
        self.order.insert(self.tick, k);
        true
    }

    /// Cache `k`, evicting the least recently used beyond the capacity.
    pub fn insert(&mut self, k: u64) {
        if self.cap == 0 || self.touch(k) {
            return;
        }
        while self.at.len() >= self.cap {
            let Some((_, v)) = self.order.pop_first() else {
                break;
            };
            self.at.remove(&v);
        }
        self.tick += 1;
        self.at.insert(k, self.tick);
        self.order.insert(self.tick, k);
    }

    /// Hold at most `cap` LBAs from now on, evicting the least recently used beyond it.
    pub fn set_cap(&mut self, cap: usize) {
        self.cap = cap;
        while self.at.len() > cap {
            let Some((_, v)) = self.order.pop_first() else {
                break;
            };
            self.at.remove(&v);
        }
    }

    /// Drop `k` (a freed node).
    pub fn remove(&mut self, k: u64) {
        if let Some(t) = self.at.remove(&k) {
            self.order.remove(&t);
        }
    }

    /// LBAs cached.
    pub fn len(&self) -> usize {
        self.at.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Ins(i64, u64),
        Del(usize),
        Range(i64, i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0i64..200, 0u64..8).prop_map(|(k, v)| Op::Ins(k, v)),
            2 => (0usize..10_000).prop_map(Op::Del),
            1 => (0i64..200, 0i64..60).prop_map(|(l, w)| Op::Range(l, l + w)),
        ]
    }

    proptest! {
        /// Random inserts, deletes and ranges against a sorted Vec.
        #[test]
        fn model(ops in proptest::collection::vec(op(), 1..400), bulk in proptest::collection::vec((0i64..200, 0u64..8), 0..100)) {
            let mut t = PagedBtree::with_fanout(100, 10_000, 4).unwrap();
            let mut m: Vec<(i64, u64)> = bulk.clone();
            m.sort_unstable();
            let mut touch = Touch::default();
            t.bulk_load(bulk, 0.7, &mut touch).unwrap();
            for o in ops {
                touch.clear();
                match o {
                    Op::Ins(k, v) => {
                        t.insert(k, v, &mut touch).unwrap();
                        let p = m.partition_point(|e| *e <= (k, v));
                        m.insert(p, (k, v));
                        prop_assert!(!touch.written.is_empty());
                    }
                    Op::Del(i) => {
                        if m.is_empty() {
                            prop_assert!(!t.remove(1, 1, &mut touch));
                        } else {
                            let e = m.remove(i % m.len());
                            prop_assert!(t.remove(e.0, e.1, &mut touch));
                        }
                    }
                    Op::Range(lo, hi) => {
                        let got = t.range(lo, hi, &mut touch);
                        let want: Vec<u64> = m.iter().filter(|e| lo <= e.0 && e.0 <= hi).map(|e| e.1).collect();
                        prop_assert_eq!(got, want);
                        prop_assert!(touch.read.len() >= t.height());
                    }
                }
                prop_assert_eq!(t.entries(), m.clone());
                prop_assert_eq!(t.len(), m.len() as u64);
                for l in t.node_lbas() {
                    prop_assert!((100..10_100).contains(&l));
                }
            }
        }
    }

    #[test]
    fn full_region_changes_nothing() {
        let mut t = PagedBtree::with_fanout(0, 1, 4).unwrap();
        let mut touch = Touch::default();
        for k in 0..4 {
            t.insert(k, 0, &mut touch).unwrap();
        }
        assert_eq!(
            t.insert(9, 0, &mut touch),
            Err(BtreeError::Full { lbas: 1 })
        );
        assert_eq!(t.len(), 4);
        assert_eq!(t.entries().len(), 4);
        assert!(PagedBtree::new(0, 0).is_err());
    }

    #[test]
    fn lru_set() {
        let mut l = LruSet::new(2);
        l.insert(1);
        l.insert(2);
        assert!(l.touch(1));
        l.insert(3); // evicts 2
        assert!(l.touch(1) && l.touch(3) && !l.touch(2));
        l.remove(3);
        assert_eq!(l.len(), 1);
        l.insert(4);
        l.insert(5); // evicts 1
        l.set_cap(1); // evicts 4
        assert!(l.touch(5) && !l.touch(4) && !l.touch(1));
        let mut z = LruSet::new(0);
        z.insert(1);
        assert!(z.is_empty());
    }

    #[test]
    fn node_bytes_round_trip_header() {
        let mut t = PagedBtree::new(5, 10).unwrap();
        let mut touch = Touch::default();
        t.insert(7, 3, &mut touch).unwrap();
        let b = t.node_bytes(5).unwrap();
        assert_eq!(b[0], 1);
        assert_eq!(u64::from_le_bytes(b[8..16].try_into().unwrap()), 1);
        assert_eq!(i64::from_le_bytes(b[16..24].try_into().unwrap()), 7);
        assert!(t.node_bytes(6).is_none());
    }

    #[test]
    fn a_larger_node_holds_more_entries_and_is_serialized_whole() {
        assert_eq!(fanout_of(16384), 682);
        let mut big = PagedBtree::with_node_bytes(0, 1000, 16384).unwrap();
        let mut small = PagedBtree::new(0, 1000).unwrap();
        let mut touch = Touch::default();
        let pairs: Vec<(i64, u64)> = (0..100_000).map(|k| (k, k as u64 / 100)).collect();
        big.bulk_load(pairs.clone(), 1.0, &mut touch).unwrap();
        small.bulk_load(pairs, 1.0, &mut touch).unwrap();
        // 100,000 entries: 147 leaves of 682 under one root, against 589 leaves of 170
        // under 4 inner nodes and a root.
        assert_eq!((big.height(), big.nodes()), (2, 148));
        assert_eq!((small.height(), small.nodes()), (3, 594));
        assert_eq!(big.entries(), small.entries());
        let b = big.node_bytes(big.leaf_lbas()[0]).unwrap();
        assert_eq!(b.len(), 16384);
        assert_eq!(u64::from_le_bytes(b[8..16].try_into().unwrap()), 682);
        touch.clear();
        let mut pages = big.range(1000, 1999, &mut touch);
        pages.dedup();
        assert_eq!(pages, (10..20).collect::<Vec<u64>>());
        assert_eq!(
            touch.read.len(),
            1 + 2,
            "the root and the two leaves of the range"
        );
        // Bad sizes are refused, naming the size.
        for bad in [0, 4095, 4100] {
            let e = PagedBtree::with_node_bytes(0, 10, bad).unwrap_err();
            assert_eq!(e, BtreeError::NodeBytes(bad));
            assert!(e.to_string().contains(&bad.to_string()));
        }
    }
}
