//! Merges (§2.3 merge-prepare / merge-execute / merge-finalize) for the three schemes:
//! FD+XM and FD+DS (§3) build the new levels off to the side and switch them in with
//! the manifest; FD+FC (§4) moves a wavefront through the old levels while lookups and
//! modifications go on, reclaiming blocks as it passes. Both pipelines share their
//! failure handling (`merged`), their durable tail (`manifest_tail`) and the trimming of
//! block runs (`trim_runs`).

use super::*;

/// A source of entries for the merge: a sorted run (L0's entries, or an old level
/// read block by block — m-stage buffers one block per level).
pub(super) struct Source {
    /// Entries buffered (from L0 or the current block).
    pub(super) buf: Vec<Entry>,
    pub(super) pos: usize,
    pub(super) next_block: Option<u64>,
    pub(super) keep_fences: bool,
    /// Blocks read and not yet reclaimed, with the first key of the block after each
    /// (known once that block is read): Remark A.1's reclamation rule.
    pub(super) pending: std::collections::VecDeque<(u64, Option<u64>)>,
    /// Blocks read ahead (consecutive ids), and the read-ahead size: doubled while the
    /// level's chain runs through consecutive ids, reset when it jumps.
    pub(super) ahead: std::collections::VecDeque<(u64, Block)>,
    pub(super) ra: u64,
}

/// One key's coalesced output of merge-execute.
pub(super) struct Group {
    pub(super) key: u64,
    pub(super) entries: Vec<Entry>,
    pub(super) has_fence: bool,
}

/// The inputs of a merge in key order (§2.3 merge-execute).
pub(super) struct MergeInput {
    pub(super) sources: Vec<Source>,
    pub(super) bottom: bool,
    pub(super) consumed: Vec<u64>,
    /// A source read a new block since the flag was last taken.
    pub(super) refilled: bool,
    /// Last fence to the level below added to the output (p_last).
    pub(super) p_last: Option<u64>,
    /// Last key processed.
    pub(super) last_key: Option<u64>,
}

/// L0's data entries as a sorted run (with the top fences when the merge keeps them).
pub(super) fn l0_entries(old: &L0, lv: &Levels, t: usize) -> Vec<Entry> {
    let mut v: Vec<Entry> = Vec::with_capacity(old.entries() as usize);
    for (&key, s) in &old.map {
        if s.del {
            v.push(Entry {
                key,
                kind: Kind::Delete,
                val: 0,
            });
        }
        if let Some(val) = s.ins {
            v.push(Entry {
                key,
                kind: Kind::Insert,
                val,
            });
        }
    }
    if t == 0 {
        v.extend(lv.top_fences.iter().map(|&(key, b)| Entry {
            key,
            kind: Kind::Fence,
            val: b,
        }));
        v.sort_unstable();
    }
    v
}

impl MergeInput {
    /// Merge L0's entries with the first `t` levels of `lv`.
    pub(super) fn new(l0: Vec<Entry>, lv: &Levels, t: usize) -> MergeInput {
        let mut sources = vec![Source {
            buf: l0,
            pos: 0,
            next_block: None,
            keep_fences: t == 0,
            pending: Default::default(),
            ahead: Default::default(),
            ra: 1,
        }];
        for i in 0..t {
            sources.push(Source {
                buf: Vec::new(),
                pos: 0,
                next_block: Some(lv.levels[i].head),
                keep_fences: i + 1 == t,
                pending: Default::default(),
                ahead: Default::default(),
                ra: 1,
            });
        }
        let bottom = t == lv.levels.len();
        MergeInput {
            sources,
            bottom,
            consumed: Vec::new(),
            refilled: false,
            p_last: (!bottom).then(|| lv.levels[t].head),
            last_key: None,
        }
    }

    pub(super) fn refill(&mut self, tree: &Inner, i: usize) -> Result<(), FdError> {
        let s = &mut self.sources[i];
        while s.pos >= s.buf.len() {
            let Some(id) = s.next_block else {
                return Ok(());
            };
            // The blocks are about to be freed: read them past the cache, several
            // consecutive ones per command while the chain is consecutive.
            let b = match s.ahead.pop_front() {
                Some((aid, b)) if aid == id => b,
                _ => {
                    if !s.ahead.is_empty() {
                        s.ahead.clear();
                        s.ra = 1;
                    }
                    let n = s.ra.min(tree.geo.tree_blocks.saturating_sub(id)).max(1);
                    let mut run = tree.cache.read_run(id, n)?.into_iter();
                    let Some((_, first)) = run.next() else {
                        return Err(FdError::Corrupt(format!("tree block {id} unreadable")));
                    };
                    // Keep the blocks that continue the chain; grow the read-ahead while
                    // all of it was useful, shrink it to what was.
                    let mut expect = first.next;
                    let mut kept = 0;
                    for (rid, rb) in run {
                        if expect != Some(rid) {
                            break;
                        }
                        expect = rb.next;
                        s.ahead.push_back((rid, rb));
                        kept += 1;
                    }
                    s.ra = if kept + 1 == n && first.next == Some(id + 1) {
                        (n * 2).min(READ_AHEAD)
                    } else {
                        kept + 1
                    };
                    first
                }
            };
            self.consumed.push(id);
            self.refilled = true;
            let first = b.entries.first().map_or(u64::MAX, |e| e.key);
            if let Some(back) = s.pending.back_mut() {
                back.1 = Some(first);
            }
            s.pending.push_back((id, None));
            s.buf = b.entries;
            s.pos = 0;
            s.next_block = b.next;
        }
        Ok(())
    }

    /// The next key's coalesced entries (fence to the level below, then the net
    /// delete/insert of §2.3), skipping keys whose entries cancel out.
    pub(super) fn next_group(&mut self, tree: &Inner) -> Result<Option<Group>, FdError> {
        loop {
            let mut min: Option<u64> = None;
            for i in 0..self.sources.len() {
                self.refill(tree, i)?;
                let s = &self.sources[i];
                if let Some(e) = s.buf.get(s.pos) {
                    min = Some(min.map_or(e.key, |m: u64| m.min(e.key)));
                }
            }
            let Some(key) = min else { return Ok(None) };
            let mut fence = None;
            let mut groups: Vec<(bool, Option<u64>)> = Vec::with_capacity(self.sources.len());
            for i in 0..self.sources.len() {
                let mut g = (false, None);
                loop {
                    self.refill(tree, i)?;
                    let s = &mut self.sources[i];
                    let Some(&e) = s.buf.get(s.pos) else { break };
                    if e.key != key {
                        break;
                    }
                    s.pos += 1;
                    match e.kind {
                        Kind::Fence if s.keep_fences => fence = Some(e.val),
                        Kind::Fence => {}
                        Kind::Delete => g.0 = true,
                        Kind::Insert => g.1 = Some(e.val),
                    }
                }
                groups.push(g);
            }
            self.last_key = Some(key);
            // Apply the levels' operations bottom-up: a delete cancels the insert
            // below it, or one further down (then it stays, unless this is the bottom).
            let mut pending_del = false;
            let mut ins: Option<u64> = None;
            for &(d, i) in groups.iter().rev() {
                if d {
                    if ins.is_some() {
                        ins = None;
                    } else {
                        pending_del = true;
                    }
                }
                if i.is_some() {
                    ins = i;
                }
            }
            let mut out: Vec<Entry> = Vec::with_capacity(3);
            if let Some(b) = fence {
                out.push(Entry {
                    key,
                    kind: Kind::Fence,
                    val: b,
                });
                self.p_last = Some(b);
            }
            if pending_del && !self.bottom {
                out.push(Entry {
                    key,
                    kind: Kind::Delete,
                    val: 0,
                });
            }
            if let Some(v) = ins {
                out.push(Entry {
                    key,
                    kind: Kind::Insert,
                    val: v,
                });
            }
            if !out.is_empty() {
                return Ok(Some(Group {
                    key,
                    entries: out,
                    has_fence: fence.is_some(),
                }));
            }
        }
    }
}

/// Marks the tree failed and its merge over when the merge unwinds (a panic in it, e.g.
/// a deadlock of actors reported), so that nobody waits for it forever (`wait_merge`,
/// a modification waiting for room in L0).
struct MergeUnwind<'a>(&'a Inner);

impl Drop for MergeUnwind<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let mut top = lock(&self.0.top);
            top.failed
                .get_or_insert_with(|| "a merge panicked (see its message)".into());
            top.merging = false;
            drop(top);
            self.0.cv.notify_all();
        }
    }
}

impl Inner {
    // ------------------------------------------------------------- merges (§2.3, §3)

    /// Begin a merge of the current L0: XM runs it here, DS and FC in a background
    /// thread.
    pub(super) fn start_merge(self: &Arc<Self>, log: &LogState) -> Result<(), FdError> {
        let start_lsn = log.next_lsn;
        let (old, levels, underflow, generation, fc) = {
            let mut top = lock(&self.top);
            if top.merging {
                return Ok(());
            }
            let underflow = self.underflow(&top);
            let l0 = std::mem::take(&mut top.l0);
            let old = Arc::new(l0);
            top.l0_old = Some(old.clone());
            top.generation += 1;
            top.merging = true;
            let levels = top.levels.clone();
            let fc = (self.cfg.scheme == Scheme::Fc).then(|| {
                // Merge-prepare happens here so that lookups know the merge's shape
                // from the moment L0 becomes L0 old.
                let t = self.prepare(&old, &levels, underflow);
                let fc = Arc::new(FcShared {
                    old: levels.clone(),
                    t,
                    new: RwLock::new(NewLevel::default()),
                });
                top.fc = Some(fc.clone());
                top.wave = None;
                top.wave_heads = levels.levels.iter().map(|l| l.head).collect();
                fc
            });
            (old, levels, underflow, top.generation, fc)
        };
        if self.cfg.scheme == Scheme::Xm {
            return self.merge_and_install(old, levels, underflow, generation, start_lsn);
        }
        // The previous merge thread has switched its levels (merging was false) and may
        // still be reclaiming old blocks: the new merge thread waits for it, not the
        // modification that triggered the merge (which would otherwise see the
        // reclamation's device time as its own latency).
        let prev = lock(&self.merge_thread).take();
        let join_prev = move || {
            if let Some(t) = prev {
                let _ = t.join();
            }
        };
        let me = self.clone();
        let body: Box<dyn FnOnce() + Send> = match fc {
            Some(fc) => {
                let entries = l0_entries(&old, &levels, fc.t);
                // m-delete removes processed entries from L0 old in place: the thread
                // keeps no reference to it.
                drop(old);
                drop(levels);
                Box::new(move || {
                    join_prev();
                    let _ = me.merge_fc_and_install(fc, entries, underflow, generation, start_lsn);
                })
            }
            None => Box::new(move || {
                join_prev();
                let _ = me.merge_and_install(old, levels, underflow, generation, start_lsn);
            }),
        };
        let t = crate::sync::spawn("fdtree-merge", body)
            .map_err(|e| FdError::Failed(format!("cannot start the merge thread: {e}")))?;
        *lock(&self.merge_thread) = Some(t);
        Ok(())
    }

    /// FD+FC merge (§4.4): the main loop of m-stage (read the next blocks of the old
    /// levels), m-insert (append to the new level, visible to lookups below the
    /// wavefront) and m-delete (advance the wavefront, drop processed entries from L0
    /// old so modifications can use the space, reclaim old blocks by Remark A.1's
    /// rule); then merge-finalize, the durable switch, and reclamation of the last
    /// blocks.
    pub(super) fn merge_fc_and_install(
        &self,
        fc: Arc<FcShared>,
        entries: Vec<Entry>,
        underflow: bool,
        generation: u64,
        start_lsn: u64,
    ) -> Result<(), FdError> {
        let _unwind = MergeUnwind(self);
        let t0 = Instant::now();
        let mut early: Vec<u64> = Vec::new();
        let r = self.merge_fc_durably(&fc, entries, generation, start_lsn, &mut early);
        let out = self.merged(r)?;
        // Delete the wavefront fence, make L0 new the L0: the old levels are no longer
        // reachable by new lookups.
        let stamp = {
            let mut top = lock(&self.top);
            top.levels = Arc::new(out.levels);
            top.l0_old = None;
            top.fc = None;
            top.wave = None;
            top.wave_heads = Vec::new();
            top.merging = false;
            top.next_ticket
        };
        self.cv.notify_all();
        self.log_start.store(start_lsn, Ordering::Release);
        drop(fc);
        // Reclaim the rest once every lookup that could still be in the old levels
        // (ticket below the stamp) has finished.
        self.wait_tickets(stamp);
        let early_list = early.clone();
        let early: HashSet<u64> = early.into_iter().collect();
        let rest: Vec<u64> = out
            .consumed
            .into_iter()
            .filter(|b| !early.contains(b))
            .collect();
        let r = self
            .reclaim(&rest)
            .and_then(|()| self.trim_free(&early_list));
        self.finish_merge(t0, underflow, r)
    }

    /// The outcome of a merge's durable part, for both pipelines (FD+FC and FD+XM/DS):
    /// on success its modeled time is counted and the output returned; on failure the
    /// tree is marked failed (every later call reports it), the merge flag is cleared
    /// and waiting writers are woken to see it.
    pub(super) fn merged(&self, r: Result<(MergeOut, u64), FdError>) -> Result<MergeOut, FdError> {
        match r {
            Ok((out, modeled)) => {
                self.counters
                    .merge_modeled_ns
                    .fetch_add(modeled, Ordering::Relaxed);
                Ok(out)
            }
            Err(e) => {
                let mut top = lock(&self.top);
                top.failed = Some(e.to_string());
                top.merging = false;
                drop(top);
                self.cv.notify_all();
                Err(e)
            }
        }
    }

    /// Start a merge's device handle at the latest instant the tree has seen, so its
    /// modeled time is the merge's own span; returns that start.
    /// An actor of virtual time (csd_host::actors) starts at its own clock, the instant
    /// the merge was started: the tree's latest instant may be a completion another
    /// actor has not reached yet.
    pub(super) fn merge_clock_start(&self, h: &mut DeviceHandle) -> csd_sim::SimTime {
        if csd_host::actors::Actors::current().is_some() {
            return h.now();
        }
        h.wait_until(csd_sim::SimTime::from_ns(
            self.counters.clock.load(Ordering::Relaxed),
        ));
        h.now()
    }

    /// The durable tail of every merge: flush the new levels, write the manifest that
    /// switches to them (with the next merge count), advance the tree's clock; returns
    /// the modeled time since `m0`.
    pub(super) fn manifest_tail(
        &self,
        h: &mut DeviceHandle,
        levels: &Levels,
        generation: u64,
        start_lsn: u64,
        m0: csd_sim::SimTime,
    ) -> Result<u64, FdError> {
        h.flush()?;
        let merges = {
            let mut s = lock(&self.manifest_seq);
            s.1 += 1;
            s.1
        };
        self.write_manifest(h, levels, generation, start_lsn, merges)?;
        self.counters
            .clock
            .fetch_max(h.now().ns(), Ordering::Relaxed);
        Ok(h.now().ns().saturating_sub(m0.ns()))
    }

    /// Count a finished merge (started at `t0`) and record a failure of its last step.
    pub(super) fn finish_merge(
        &self,
        t0: Instant,
        underflow: bool,
        r: Result<(), FdError>,
    ) -> Result<(), FdError> {
        let wall = t0.elapsed().as_nanos() as u64;
        self.counters.merges.fetch_add(1, Ordering::Relaxed);
        if underflow {
            self.counters
                .underflow_merges
                .fetch_add(1, Ordering::Relaxed);
        }
        self.counters
            .merge_wall_ns
            .fetch_add(wall, Ordering::Relaxed);
        self.counters
            .max_merge_wall_ns
            .fetch_max(wall, Ordering::Relaxed);
        if let Err(e) = &r {
            lock(&self.top).failed = Some(e.to_string());
        }
        r
    }

    /// Wait until no reader holds a ticket below `stamp`.
    pub(super) fn wait_tickets(&self, stamp: u64) {
        loop {
            let ok = lock(&self.top).tickets.first().is_none_or(|&t| t >= stamp);
            if ok {
                return;
            }
            backoff();
        }
    }

    pub(super) fn merge_fc_durably(
        &self,
        fc: &Arc<FcShared>,
        entries: Vec<Entry>,
        generation: u64,
        start_lsn: u64,
        early: &mut Vec<u64>,
    ) -> Result<(MergeOut, u64), FdError> {
        let mut ph = self.cache.handle()?;
        let h = ph.get();
        let m0 = self.merge_clock_start(h);
        let lv = fc.old.clone();
        let t = fc.t;
        let mut input = MergeInput::new(entries, &lv, t);
        let mut w = LevelWriter::new(self.geo.epb, !input.bottom, Some(fc.clone()));
        w.gated = true;
        // Blocks reclaimed during the merge, with the ticket stamp of their reclamation.
        let mut limbo: Vec<(u64, u64)> = Vec::new();
        loop {
            // m-stage + m-insert: groups until a level needs its next block.
            let mut exhausted = true;
            while let Some(g) = input.next_group(self)? {
                w.push(self, h, g.key, g.entries, g.has_fence, input.p_last)?;
                if std::mem::take(&mut input.refilled) {
                    exhausted = false;
                    break;
                }
            }
            let Some(wk) = input.last_key else { break };
            w.publish();
            // m-delete.
            let mut reclaimed = Vec::new();
            let stamp = {
                let mut top = lock(&self.top);
                top.wave = Some(wk);
                if let Some(old) = top.l0_old.as_mut() {
                    Arc::make_mut(old).remove_upto(wk);
                }
                for (i, s) in input.sources.iter_mut().enumerate().skip(1) {
                    while s
                        .pending
                        .front()
                        .is_some_and(|p| p.1.is_some_and(|f| f <= wk))
                    {
                        if let Some((id, _)) = s.pending.pop_front() {
                            reclaimed.push(id);
                        }
                    }
                    if let Some(h) = s.pending.front().map(|p| p.0).or(s.next_block) {
                        top.wave_heads[i - 1] = h;
                    }
                }
                top.next_ticket
            };
            self.cv.notify_all();
            for id in reclaimed {
                self.cache.forget(id);
                limbo.push((stamp, id));
            }
            // Without crash safety, reclaimed blocks are reused during the merge (the
            // paper's O(h) extra blocks); with it they wait for the manifest switch,
            // because the durable manifest still points at them.
            if !self.cfg.durable && !limbo.is_empty() {
                let min = lock(&self.top).tickets.first().copied();
                let (ready, wait): (Vec<_>, Vec<_>) = limbo
                    .into_iter()
                    .partition(|(s, _)| min.is_none_or(|m| m >= *s));
                limbo = wait;
                let ready: Vec<u64> = ready.into_iter().map(|r| r.1).collect();
                // Free for reuse now; the trim of those not reused is one batch at the
                // end of the merge (a trim per step would cost a device command each).
                self.release_blocks(&ready);
                self.counters
                    .early_reclaimed
                    .fetch_add(ready.len() as u64, Ordering::Relaxed);
                early.extend(ready);
            }
            if exhausted {
                break;
            }
        }
        let (firsts, meta) = w.finish(self, h)?;
        let levels = self.finalize(h, firsts, meta, &lv, t)?;
        let modeled = self.manifest_tail(h, &levels, generation, start_lsn, m0)?;
        Ok((
            MergeOut {
                levels,
                consumed: input.consumed,
            },
            modeled,
        ))
    }

    pub(super) fn merge_and_install(
        &self,
        old: Arc<L0>,
        levels: Arc<Levels>,
        underflow: bool,
        generation: u64,
        start_lsn: u64,
    ) -> Result<(), FdError> {
        let _unwind = MergeUnwind(self);
        let t0 = Instant::now();
        let r = self.merge_durably(&old, &levels, underflow, generation, start_lsn);
        let out = self.merged(r)?;
        // Switch (the manifest is durable): readers now see the new levels.
        {
            let mut top = lock(&self.top);
            top.levels = Arc::new(out.levels);
            top.l0_old = None;
            top.merging = false;
        }
        self.cv.notify_all();
        self.log_start.store(start_lsn, Ordering::Release);
        drop(old);
        // Reclaim the consumed blocks once no reader can still be in the old levels.
        let mut levels = levels;
        loop {
            match Arc::try_unwrap(levels) {
                Ok(_) => break,
                Err(l) => {
                    levels = l;
                    backoff();
                }
            }
        }
        let r = self.reclaim(&out.consumed);
        self.finish_merge(t0, underflow, r)
    }

    /// Merge, then make the result durable and switch the manifest. Returns the new
    /// levels and the modeled time the merge's handle spent.
    pub(super) fn merge_durably(
        &self,
        old: &L0,
        levels: &Levels,
        underflow: bool,
        generation: u64,
        start_lsn: u64,
    ) -> Result<(MergeOut, u64), FdError> {
        let mut ph = self.cache.handle()?;
        let h = ph.get();
        let m0 = self.merge_clock_start(h);
        let out = self.merge(h, old, levels, underflow)?;
        let modeled = self.manifest_tail(h, &out.levels, generation, start_lsn, m0)?;
        Ok((out, modeled))
    }

    /// Give blocks back to the allocator without trimming them (they are trimmed later
    /// by [`Inner::trim_free`] if still free).
    pub(super) fn release_blocks(&self, blocks: &[u64]) {
        let mut a = lock(&self.alloc);
        for &b in blocks {
            self.cache.forget(b);
            a.free(b);
        }
        self.counters
            .blocks_reclaimed
            .fetch_add(blocks.len() as u64, Ordering::Relaxed);
    }

    /// Trim those of `blocks` that are still free (released early by an FD+FC merge and
    /// not reused), in runs.
    pub(super) fn trim_free(&self, blocks: &[u64]) -> Result<(), FdError> {
        let free: Vec<u64> = {
            let a = lock(&self.alloc);
            blocks.iter().copied().filter(|&b| a.is_free(b)).collect()
        };
        self.trim_runs(free)?;
        Ok(())
    }

    /// Trim `blocks` and give them back to the allocator (a merge's consumed blocks,
    /// once no reader can reach them).
    pub(super) fn reclaim(&self, blocks: &[u64]) -> Result<(), FdError> {
        let sorted = self.trim_runs(blocks.to_vec())?;
        self.release_blocks(&sorted);
        Ok(())
    }

    /// Trim `blocks` with one device command per run of consecutive blocks; returns
    /// them sorted.
    pub(super) fn trim_runs(&self, mut blocks: Vec<u64>) -> Result<Vec<u64>, FdError> {
        blocks.sort_unstable();
        let mut ph = self.cache.handle()?;
        let h = ph.get();
        for run in blocks.chunk_by(|a, b| *b == *a + 1) {
            h.trim(
                self.cache.lba_of(run[0]),
                run.len() as u64 * self.geo.lbas_per_block,
            )?;
        }
        Ok(blocks)
    }

    pub(super) fn write_manifest(
        &self,
        h: &mut DeviceHandle,
        lv: &Levels,
        generation: u64,
        log_start: u64,
        merges: u64,
    ) -> Result<(), FdError> {
        if lv.levels.len() > MAX_LEVELS {
            return Err(FdError::Corrupt(format!(
                "{} levels exceed {MAX_LEVELS}",
                lv.levels.len()
            )));
        }
        let seq = {
            let mut s = lock(&self.manifest_seq);
            s.0 += 1;
            s.0
        };
        let m = Manifest {
            seq,
            block_bytes: self.geo.block_bytes as u32,
            start_lba: self.geo.start_lba,
            region_lbas: self.geo.region_lbas,
            log_lbas: self.geo.log_lbas,
            generation,
            log_start,
            merges,
            levels: lv.levels.clone(),
            top_fences: lv.top_fences.clone(),
        };
        let slot_bytes = (self.geo.manifest_lbas * self.geo.lba_size) as usize;
        let lba = self.geo.start_lba + (seq % 2) * self.geo.manifest_lbas;
        h.write(lba, &m.encode(slot_bytes))?;
        h.flush()?;
        Ok(())
    }

    /// Merge-prepare: how many materialized levels to merge (0 = L0 alone into a new
    /// level above the first), and the level class of the result.
    pub(super) fn prepare(&self, old: &L0, lv: &Levels, underflow: bool) -> usize {
        let len = lv.levels.len();
        if underflow || len == 0 {
            return len;
        }
        let usable = (self.geo.epb - 3) as u64;
        let mut data = old.entries();
        for t in 0..=len {
            if t > 0 {
                data += lv.levels[t - 1].inserts + lv.levels[t - 1].deletes;
            }
            if t == len {
                return len;
            }
            let fences = if t == 0 {
                lv.top_fences.len() as u64
            } else {
                lv.levels[t - 1].fences
            };
            let bound = (data + fences).div_ceil(usable) + 1;
            if self.geo.class_for(bound) < lv.levels[t].index {
                return t;
            }
        }
        len
    }

    /// Merge-execute and merge-finalize (FD+XM, FD+DS, and open).
    pub(super) fn merge(
        &self,
        h: &mut DeviceHandle,
        old: &L0,
        lv: &Levels,
        underflow: bool,
    ) -> Result<MergeOut, FdError> {
        let t = self.prepare(old, lv, underflow);
        let mut input = MergeInput::new(l0_entries(old, lv, t), lv, t);
        let mut w = LevelWriter::new(self.geo.epb, !input.bottom, None);
        w.gated = true;
        while let Some(g) = input.next_group(self)? {
            w.push(self, h, g.key, g.entries, g.has_fence, input.p_last)?;
        }
        let (firsts, meta) = w.finish(self, h)?;
        let levels = self.finalize(h, firsts, meta, lv, t)?;
        Ok(MergeOut {
            levels,
            consumed: input.consumed,
        })
    }

    /// Merge-finalize: tighten the new last level to the smallest class that holds it,
    /// then build fence-only levels bottom-up until the fences fit in L0 (level
    /// skipping); the levels below the merge follow unchanged.
    pub(super) fn finalize(
        &self,
        h: &mut DeviceHandle,
        firsts: Vec<(u64, u64)>,
        meta: Option<LevelMeta>,
        lv: &Levels,
        t: usize,
    ) -> Result<Levels, FdError> {
        let mut new_levels = Vec::new();
        let mut top_fences = firsts;
        if let Some(mut m) = meta {
            let mut idx = self.geo.class_for(m.blocks);
            if let Some(below) = lv.levels.get(t) {
                idx = idx.min(below.index.saturating_sub(1)).max(1);
            }
            m.index = idx;
            new_levels.push(m);
            while top_fences.len() > self.geo.max_top_fences && idx > 1 {
                idx -= 1;
                let mut fw = LevelWriter::new(self.geo.epb, true, None);
                for &(key, b) in &top_fences {
                    fw.push(
                        self,
                        h,
                        key,
                        vec![Entry {
                            key,
                            kind: Kind::Fence,
                            val: b,
                        }],
                        true,
                        Some(b),
                    )?;
                }
                let (f, fm) = fw.finish(self, h)?;
                let Some(mut fm) = fm else { break };
                fm.index = idx;
                new_levels.insert(0, fm);
                top_fences = f;
            }
        } else if t < lv.levels.len() {
            // Nothing left in the merged levels: L0 fences point at the level below.
            top_fences = Vec::new();
            let below = &lv.levels[t];
            let mut next = Some(below.head);
            while let Some(id) = next {
                let b = self.cache.get(id)?;
                if let Some(e) = b.entries.first() {
                    top_fences.push((e.key, id));
                }
                next = b.next;
            }
        }
        new_levels.extend_from_slice(&lv.levels[t..]);
        Ok(Levels {
            top_fences,
            levels: new_levels,
        })
    }

    /// Wait for running merges, then (FD+DS) run the merges that modifications
    /// triggered while one was running, until none is due: a quiescent tree.
    pub(super) fn settle(self: &Arc<Self>) -> Result<(), FdError> {
        loop {
            self.wait_merge();
            if self.cfg.scheme == Scheme::Xm {
                return Ok(());
            }
            let log = lock(&self.log);
            let due = {
                let top = lock(&self.top);
                Self::check_usable(&top)?;
                !top.merging && self.triggered(&top, &log)
            };
            if !due {
                return Ok(());
            }
            self.start_merge(&log)?;
        }
    }
}
