//! The FD+tree invariants (I1)–(I5) of §2.1, checked on a quiescent tree.
//!
//! One pass from L0 down: L0's counters and size (I3), then each level walked block by
//! block (entry order, I2's leading fence, the descriptor's counts), its blocks against
//! the fences of the level above (I1), its size class (I3, I4), and at the end the
//! delete/insert balance (I5).

use super::*;

/// A violated invariant, with what was found.
fn inv<T>(inv: Invariant, detail: String) -> Result<T, FdError> {
    Err(FdError::Invariant { inv, detail })
}

/// What walking one level found.
struct LevelWalk {
    /// Each block's first key and id, in chain order.
    blocks: Vec<(u64, u64)>,
    /// The level's fences `(key, block below)`, in order.
    fences: Vec<(u64, u64)>,
    ins: u64,
    del: u64,
    fen: u64,
}

impl Inner {
    pub(super) fn check_invariants(self: &Arc<Self>) -> Result<(), FdError> {
        self.settle()?;
        let _g = (self.cfg.scheme == Scheme::Xm)
            .then(|| self.xm.read().unwrap_or_else(|p| p.into_inner()));
        let (l0, lv) = {
            let top = lock(&self.top);
            Self::check_usable(&top)?;
            (top.l0.clone(), top.levels.clone())
        };
        self.check_l0(&l0, &lv)?;
        let n = lv.levels.len();
        let mut expected: Vec<(u64, u64)> = lv.top_fences.clone();
        let mut np = l0.ins;
        let mut nm = l0.del;
        for (i, m) in lv.levels.iter().enumerate() {
            let bottom = i + 1 == n;
            let w = self.walk_level(i, m, bottom)?;
            check_fenced(i, m, &expected, &w.blocks)?;
            self.check_level_size(i, m, &lv, bottom)?;
            np += w.ins;
            nm += w.del;
            expected = w.fences;
        }
        if !expected.is_empty() && n > 0 {
            return inv(Invariant::Order, "bottom level has fences".into());
        }
        if 2 * nm > np {
            return inv(
                Invariant::I5NoUnderflow,
                format!("N- = {nm} > N+/2 = {}", np / 2),
            );
        }
        Ok(())
    }

    /// L0's counters, and I3 for L0 (its entries and the top fences fit its budget).
    fn check_l0(&self, l0: &L0, lv: &Levels) -> Result<(), FdError> {
        let (mut li, mut ld) = (0, 0);
        for s in l0.map.values() {
            li += u64::from(s.ins.is_some());
            ld += u64::from(s.del);
        }
        if (li, ld) != (l0.ins, l0.del) {
            return inv(
                Invariant::Counters,
                format!("L0 counts {li}/{ld} but counters say {}/{}", l0.ins, l0.del),
            );
        }
        if l0.entries() + lv.top_fences.len() as u64 > self.geo.c0 {
            return inv(
                Invariant::I3MaxSize,
                format!(
                    "L0 holds {} entries + {} fences > {}",
                    l0.entries(),
                    lv.top_fences.len(),
                    self.geo.c0
                ),
            );
        }
        Ok(())
    }

    /// Walk level `i`'s chain: no cycle, no empty block, a fence first in every block
    /// but the bottom level's (I2), entries strictly ordered, no deletes or fences at the
    /// bottom, and counts equal to the descriptor's.
    fn walk_level(&self, i: usize, m: &LevelMeta, bottom: bool) -> Result<LevelWalk, FdError> {
        let mut w = LevelWalk {
            blocks: Vec::new(),
            fences: Vec::new(),
            ins: 0,
            del: 0,
            fen: 0,
        };
        let mut next = Some(m.head);
        let mut prev: Option<Entry> = None;
        while let Some(id) = next {
            if w.blocks.len() as u64 > self.geo.tree_blocks {
                return inv(Invariant::Counters, format!("level {i} has a cycle"));
            }
            let b = self.cache.get(id)?;
            let Some(first) = b.entries.first() else {
                return inv(Invariant::Order, format!("level {i} block {id} is empty"));
            };
            w.blocks.push((first.key, id));
            if !bottom && first.kind != Kind::Fence {
                return inv(
                    Invariant::I2FenceFirst,
                    format!("level {i} block {id} starts with {first:?}"),
                );
            }
            for e in b.entries.iter() {
                if let Some(p) = prev
                    && (p.key, p.kind) >= (e.key, e.kind)
                {
                    return inv(
                        Invariant::Order,
                        format!("level {i} block {id}: {p:?} then {e:?}"),
                    );
                }
                prev = Some(*e);
                match e.kind {
                    Kind::Insert => w.ins += 1,
                    Kind::Delete => w.del += 1,
                    Kind::Fence => {
                        w.fen += 1;
                        w.fences.push((e.key, e.val));
                    }
                }
            }
            next = b.next;
        }
        let (ins, del, fen) = (w.ins, w.del, w.fen);
        if bottom && (del > 0 || fen > 0) {
            return inv(
                Invariant::Order,
                format!("bottom level {i} has {del} deletes and {fen} fences"),
            );
        }
        if (w.blocks.len() as u64, ins, del, fen) != (m.blocks, m.inserts, m.deletes, m.fences) {
            return inv(
                Invariant::Counters,
                format!(
                    "level {i}: blocks/ins/del/fences {}/{ins}/{del}/{fen} but descriptor {m:?}",
                    w.blocks.len()
                ),
            );
        }
        Ok(w)
    }

    /// I3 and I4 for level `i`: within its class's capacity, classes increasing, and the
    /// bottom level larger than the class below its own.
    fn check_level_size(
        &self,
        i: usize,
        m: &LevelMeta,
        lv: &Levels,
        bottom: bool,
    ) -> Result<(), FdError> {
        if m.blocks > self.geo.cap(m.index) {
            return inv(
                Invariant::I3MaxSize,
                format!(
                    "level {i} (class {}) has {} blocks > {}",
                    m.index,
                    m.blocks,
                    self.geo.cap(m.index)
                ),
            );
        }
        if i > 0 && lv.levels[i - 1].index >= m.index {
            return inv(
                Invariant::I3MaxSize,
                format!("level classes not increasing at level {i}"),
            );
        }
        if bottom && m.index >= 2 && m.blocks <= self.geo.cap(m.index - 1) {
            return inv(
                Invariant::I4MinSize,
                format!(
                    "bottom level (class {}) has {} blocks <= {}",
                    m.index,
                    m.blocks,
                    self.geo.cap(m.index - 1)
                ),
            );
        }
        Ok(())
    }
}

/// I1: the fences of the level above (`expected`) point at exactly level `i`'s blocks,
/// in order, with keys no greater than each block's first key.
fn check_fenced(
    i: usize,
    m: &LevelMeta,
    expected: &[(u64, u64)],
    blocks: &[(u64, u64)],
) -> Result<(), FdError> {
    let targets: Vec<u64> = expected.iter().map(|f| f.1).collect();
    let ids: Vec<u64> = blocks.iter().map(|b| b.1).collect();
    let mut dedup = targets.clone();
    dedup.dedup();
    if dedup != ids {
        return inv(
            Invariant::I1AllBlocksFenced,
            format!("level {i}: fences above point at {dedup:?}, blocks are {ids:?}"),
        );
    }
    // The first fence to each block carries the block's first key; later ones
    // (block-start fences `(key, p_last)`) carry larger keys.
    let first_key: std::collections::HashMap<u64, u64> =
        blocks.iter().map(|&(k, id)| (id, k)).collect();
    let mut prev_target = None;
    for &(fk, target) in expected {
        let bk = first_key.get(&target).copied().unwrap_or(u64::MAX);
        // The level's head may be reached first by a block-start fence
        // `(key, p_last)` whose `p_last` is still the head (§2.3).
        let ok = if target == m.head {
            true
        } else if prev_target == Some(target) {
            fk > bk
        } else {
            fk == bk
        };
        if !ok {
            return inv(
                Invariant::I1AllBlocksFenced,
                format!("level {i}: fence key {fk} to block {target} starting at {bk}"),
            );
        }
        prev_target = Some(target);
    }
    Ok(())
}
