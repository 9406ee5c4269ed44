//! Lookups and range scans (§2.2): a descent through the levels with fractional
//! cascading, and, during an FD+FC merge (§4.3), the choice between old and new levels
//! by the wavefront fence.

use super::*;

impl Inner {
    // ----------------------------------------------------------------- lookup (§2.2)

    /// Descend `levels` top-down for `key` with fractional cascading, entering the
    /// first level at block `first` (its head when `None`).
    pub(super) fn descend(
        &self,
        levels: &[LevelMeta],
        heads: Option<&[u64]>,
        first: Option<u64>,
        key: u64,
    ) -> Result<Probe, FdError> {
        if levels.is_empty() {
            return Ok(Probe::Absent);
        }
        let head = |i: usize| level_head(levels, heads, i);
        let mut target = first.unwrap_or(head(0));
        for i in 0..levels.len() {
            let b = self.cache.get(target)?;
            let (p, f) = scan_entries(&b.entries, key);
            if let Some(p) = p {
                return Ok(p);
            }
            if i + 1 < levels.len() {
                target = f.unwrap_or(head(i + 1));
            }
        }
        Ok(Probe::Absent)
    }

    /// Search the levels below L0.
    pub(super) fn probe_levels(&self, lv: &Levels, key: u64) -> Result<Probe, FdError> {
        self.descend(
            &lv.levels,
            None,
            fence_le(lv.top_fences.iter().copied(), key),
            key,
        )
    }

    /// Where a lookup for `key > wave` enters the old levels of an FD+FC merge: the
    /// largest old top fence above the wavefront and not above `key`, else the
    /// wavefront fence (the current head of the first old level).
    pub(super) fn fc_old_entry(
        fc: &FcShared,
        wave: Option<u64>,
        heads: &[u64],
        key: u64,
    ) -> Option<u64> {
        let lv = &fc.old;
        if fc.t == 0 {
            return fence_le(lv.top_fences.iter().copied(), key);
        }
        fence_le(
            lv.top_fences
                .iter()
                .copied()
                .filter(|(k, _)| wave.is_none_or(|w| *k > w)),
            key,
        )
        .or(heads.first().copied())
    }

    /// Search below L0 new during an FD+FC merge (§4.3): keys at or below the
    /// wavefront through the new level, others through the old levels.
    pub(super) fn probe_fc(
        &self,
        fc: &FcShared,
        wave: Option<u64>,
        heads: &[u64],
        key: u64,
    ) -> Result<Probe, FdError> {
        let below = &fc.old.levels[fc.t..];
        if wave.is_some_and(|w| key <= w) {
            let (p, f, blk) = {
                let n = fc.new.read().unwrap_or_else(|e| e.into_inner());
                if !n.tail.is_empty() && n.tail_first <= key {
                    let (p, f) = scan_entries(&n.tail, key);
                    (p, f, None)
                } else {
                    let b = fence_le(n.done.iter().copied(), key);
                    (None, None, b.map(|b| (b, n.mem.get(&b).cloned())))
                }
            };
            let (p, f) = match blk {
                Some((_, Some(mem))) => scan_entries(&mem.entries, key),
                Some((b, None)) => scan_entries(&self.cache.get(b)?.entries, key),
                None => (p, f),
            };
            if let Some(p) = p {
                return Ok(p);
            }
            return self.descend(below, None, f, key);
        }
        self.descend(
            &fc.old.levels,
            Some(heads),
            Self::fc_old_entry(fc, wave, heads, key),
            key,
        )
    }

    /// Take a snapshot of what lies below L0 (or below L0 and L0 old), answering from
    /// L0 (unless `skip_l0`) and L0 old directly.
    pub(super) fn snapshot(
        &self,
        key: Option<u64>,
        skip_l0: bool,
    ) -> Result<Result<Snap, Option<u64>>, FdError> {
        let mut top = lock(&self.top);
        Self::check_usable(&top)?;
        if top.merging {
            self.counters
                .reads_during_merge
                .fetch_add(1, Ordering::Relaxed);
        }
        if let Some(key) = key {
            if !skip_l0 && let Some(s) = top.l0.map.get(&key) {
                return Ok(Err(s.ins));
            }
            let past_wave = top.wave.is_none_or(|w| key > w);
            if (top.fc.is_none() || past_wave)
                && let Some(old) = &top.l0_old
                && let Some(s) = old.map.get(&key)
            {
                return Ok(Err(s.ins));
            }
        }
        Ok(Ok(match top.fc.clone() {
            None => {
                let ticket = (self.cfg.scheme == Scheme::Fc).then(|| {
                    let t = top.next_ticket;
                    top.next_ticket += 1;
                    top.tickets.insert(t);
                    t
                });
                Snap::Plain(top.levels.clone(), ticket)
            }
            Some(fc) => {
                let ticket = top.next_ticket;
                top.next_ticket += 1;
                top.tickets.insert(ticket);
                Snap::Fc {
                    fc,
                    wave: top.wave,
                    heads: top.wave_heads.clone(),
                    ticket,
                }
            }
        }))
    }

    pub(super) fn release(&self, snap: Snap) {
        match snap {
            Snap::Fc { ticket, .. } | Snap::Plain(_, Some(ticket)) => {
                lock(&self.top).tickets.remove(&ticket);
            }
            Snap::Plain(_, None) => {}
        }
    }

    /// Lookup without the XM lock; with `skip_l0`, what lies below L0 (new).
    pub(super) fn lookup_inner(&self, key: u64, skip_l0: bool) -> Result<Option<u64>, FdError> {
        let snap = match self.snapshot(Some(key), skip_l0)? {
            Ok(s) => s,
            Err(v) => return Ok(v),
        };
        let p = match &snap {
            Snap::Plain(lv, _) => self.probe_levels(lv, key),
            Snap::Fc {
                fc, wave, heads, ..
            } => self.probe_fc(fc, *wave, heads, key),
        };
        self.release(snap);
        Ok(match p? {
            Probe::Found(v) => Some(v),
            _ => None,
        })
    }

    pub(super) fn lookup(&self, key: u64) -> Result<Option<u64>, FdError> {
        let _g = (self.cfg.scheme == Scheme::Xm)
            .then(|| self.xm.read().unwrap_or_else(|p| p.into_inner()));
        self.lookup_inner(key, false)
    }

    /// Scan `levels` for keys in `[lo, hi]`, entering the first level at `first`;
    /// the first level holding data entries for a key decides it (`seen` keeps the
    /// decisions of levels above).
    pub(super) fn scan_levels(
        &self,
        levels: &[LevelMeta],
        heads: Option<&[u64]>,
        first: Option<u64>,
        lo: u64,
        hi: u64,
        seen: &mut BTreeMap<u64, Option<u64>>,
    ) -> Result<(), FdError> {
        if levels.is_empty() {
            return Ok(());
        }
        let head = |i: usize| level_head(levels, heads, i);
        let mut target = first.unwrap_or(head(0));
        for i in 0..levels.len() {
            let mut found = BTreeMap::new();
            let mut blk = Some(target);
            let mut first = true;
            while let Some(id) = blk {
                let b = self.cache.get(id)?;
                if first {
                    first = false;
                    if i + 1 < levels.len() {
                        target = scan_entries(&b.entries, lo).1.unwrap_or(head(i + 1));
                    }
                }
                if collect(&b.entries, lo, hi, &mut found) {
                    break;
                }
                blk = b.next;
            }
            for (k, v) in found {
                seen.entry(k).or_insert(v);
            }
        }
        Ok(())
    }

    pub(super) fn range(&self, lo: u64, hi: u64) -> Result<Vec<(u64, u64)>, FdError> {
        if lo > hi {
            return Ok(Vec::new());
        }
        let _g = (self.cfg.scheme == Scheme::Xm)
            .then(|| self.xm.read().unwrap_or_else(|p| p.into_inner()));
        // Newest first: the first level that has data entries for a key decides.
        let mut seen: BTreeMap<u64, Option<u64>> = BTreeMap::new();
        {
            let top = lock(&self.top);
            Self::check_usable(&top)?;
            for (&k, s) in top.l0.map.range(lo..=hi) {
                seen.insert(k, s.ins);
            }
            if let Some(old) = &top.l0_old {
                for (&k, s) in old.map.range(lo..=hi) {
                    if top.fc.is_none() || top.wave.is_none_or(|w| k > w) {
                        seen.entry(k).or_insert(s.ins);
                    }
                }
            }
        }
        // (A modification between the two critical sections is linearized after the
        // scan of L0 and may be missed below L0 only if it is in L0 — never lost.)
        let snap = self
            .snapshot(None, true)?
            .unwrap_or_else(|_| unreachable!("no key given"));
        let r = self.range_below(&snap, lo, hi, &mut seen);
        self.release(snap);
        r?;
        Ok(seen
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect())
    }

    pub(super) fn range_below(
        &self,
        snap: &Snap,
        lo: u64,
        hi: u64,
        seen: &mut BTreeMap<u64, Option<u64>>,
    ) -> Result<(), FdError> {
        let (fc, wave, heads) = match snap {
            Snap::Plain(lv, _) => {
                return self.scan_levels(
                    &lv.levels,
                    None,
                    fence_le(lv.top_fences.iter().copied(), lo),
                    lo,
                    hi,
                    seen,
                );
            }
            Snap::Fc {
                fc, wave, heads, ..
            } => (fc, *wave, heads.as_slice()),
        };
        // Keys at or below the wavefront: the new level, then the levels below the merge.
        if let Some(w) = wave
            && lo <= w
        {
            let hi_a = hi.min(w);
            let (blocks, tail, tail_first) = {
                let n = fc.new.read().unwrap_or_else(|e| e.into_inner());
                let start = n.done.partition_point(|d| d.0 <= lo).saturating_sub(1);
                let end = n.done.partition_point(|d| d.0 <= hi_a);
                let blocks: Vec<(u64, Option<Arc<Block>>)> = n.done[start..end.max(start)]
                    .iter()
                    .map(|d| (d.1, n.mem.get(&d.1).cloned()))
                    .collect();
                let tail = if !n.tail.is_empty() && n.tail_first <= hi_a {
                    n.tail.clone()
                } else {
                    Vec::new()
                };
                (blocks, tail, n.tail_first)
            };
            let mut found = BTreeMap::new();
            let mut below_start = None;
            let mut first = true;
            for (id, mem) in blocks {
                let b = match mem {
                    Some(b) => b,
                    None => self.cache.get(id)?,
                };
                if first {
                    first = false;
                    below_start = scan_entries(&b.entries, lo).1;
                }
                collect(&b.entries, lo, hi_a, &mut found);
            }
            if !tail.is_empty() {
                if first || tail_first <= lo {
                    below_start = scan_entries(&tail, lo).1.or(below_start);
                }
                collect(&tail, lo, hi_a, &mut found);
            }
            for (k, v) in found {
                seen.entry(k).or_insert(v);
            }
            self.scan_levels(&fc.old.levels[fc.t..], None, below_start, lo, hi_a, seen)?;
        }
        // Keys past the wavefront: the old levels (which lead to the levels below).
        let lo_b = match wave {
            Some(u64::MAX) => return Ok(()),
            Some(w) => lo.max(w + 1),
            None => lo,
        };
        if lo_b <= hi {
            let first = Self::fc_old_entry(fc, wave, heads, lo_b);
            self.scan_levels(&fc.old.levels, Some(heads), first, lo_b, hi, seen)?;
        }
        Ok(())
    }
}

/// What one block (or tail) says about `key`: the data verdict if it has data
/// entries for the key, and the block its largest fence `<= key` points to.
pub(super) fn scan_entries(entries: &[Entry], key: u64) -> (Option<Probe>, Option<u64>) {
    let start = entries.partition_point(|e| e.key < key);
    let mut del = false;
    for e in &entries[start..] {
        if e.key != key {
            break;
        }
        match e.kind {
            Kind::Insert => return (Some(Probe::Found(e.val)), None),
            Kind::Delete => del = true,
            Kind::Fence => {}
        }
    }
    if del {
        return (Some(Probe::Deleted), None);
    }
    let end = entries.partition_point(|e| e.key <= key);
    let f = entries[..end]
        .iter()
        .rev()
        .find(|e| e.kind == Kind::Fence)
        .map(|e| e.val);
    (None, f)
}

/// Collect the data entries of `entries` within `[lo, hi]` into `found` (an insert
/// overrides the delete before it). True when the scan of the level can stop.
pub(super) fn collect(
    entries: &[Entry],
    lo: u64,
    hi: u64,
    found: &mut BTreeMap<u64, Option<u64>>,
) -> bool {
    let start = entries.partition_point(|e| e.key < lo);
    for e in &entries[start..] {
        if e.key > hi {
            return true;
        }
        match e.kind {
            Kind::Insert => {
                found.insert(e.key, Some(e.val));
            }
            Kind::Delete => {
                found.entry(e.key).or_insert(None);
            }
            Kind::Fence => {}
        }
    }
    false
}

/// Largest fence with key <= `key` in a sorted sequence; its block.
pub(super) fn fence_le(fences: impl Iterator<Item = (u64, u64)>, key: u64) -> Option<u64> {
    let mut best = None;
    for (k, b) in fences {
        if k > key {
            break;
        }
        best = Some(b);
    }
    best
}

/// The block a descent enters level `i` at: its head, or during an FD+FC merge the
/// wavefront's head for that level when `heads` names one.
pub(super) fn level_head(levels: &[LevelMeta], heads: Option<&[u64]>, i: usize) -> u64 {
    heads
        .and_then(|h| h.get(i).copied())
        .unwrap_or(levels[i].head)
}
