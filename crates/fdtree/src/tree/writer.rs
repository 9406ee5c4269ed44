//! The level writer: merge-execute's output for one new level, written block by block
//! (with FD+FC, the block being filled is visible to lookups).

use super::*;

/// A finished level: the (first key, block) of each block, and its descriptor.
pub(super) type LevelOut = (Vec<(u64, u64)>, Option<LevelMeta>);

/// Writes one new level block by block (merge-execute's output for L_m new). With
/// `shared` (FD+FC) the block being filled is visible to lookups and completed blocks
/// are published as fences.
pub(super) struct LevelWriter {
    pub(super) cap: usize,
    pub(super) fenced: bool,
    pub(super) cur: Vec<Entry>,
    pub(super) cur_id: Option<u64>,
    pub(super) firsts: Vec<(u64, u64)>,
    pub(super) meta: LevelMeta,
    pub(super) shared: Option<Arc<FcShared>>,
    /// Completed blocks with consecutive ids not yet written (one command per run).
    pub(super) batch: Vec<(u64, Block)>,
    /// FD+FC: entries of `cur` already in the shared tail.
    pub(super) published: usize,
    /// Pass the merge gate after each completed block but the last (the data level of a
    /// merge).
    pub(super) gated: bool,
}

impl LevelWriter {
    pub(super) fn new(cap: usize, fenced: bool, shared: Option<Arc<FcShared>>) -> LevelWriter {
        LevelWriter {
            cap,
            fenced,
            cur: Vec::new(),
            cur_id: None,
            firsts: Vec::new(),
            meta: LevelMeta {
                index: 0,
                head: 0,
                blocks: 0,
                inserts: 0,
                deletes: 0,
                fences: 0,
            },
            shared,
            batch: Vec::new(),
            published: 0,
            gated: false,
        }
    }

    /// A completed block: publish it (FD+FC) and queue it for a batched write.
    pub(super) fn stage(
        &mut self,
        t: &Inner,
        h: &mut DeviceHandle,
        id: u64,
        first: u64,
        block: Block,
    ) -> Result<(), FdError> {
        if self
            .batch
            .last()
            .is_some_and(|(last, _)| *last + 1 != id || self.batch.len() >= WRITE_BATCH)
        {
            self.flush(t, h)?;
        }
        if let Some(fc) = &self.shared {
            let mut n = fc.new.write().unwrap_or_else(|e| e.into_inner());
            n.done.push((first, id));
            n.mem.insert(id, Arc::new(block.clone()));
            n.tail.clear();
        }
        self.published = 0;
        self.batch.push((id, block));
        Ok(())
    }

    /// FD+FC: make the entries appended to the block being filled visible to lookups
    /// (before m-delete moves the wavefront past them).
    pub(super) fn publish(&mut self) {
        let Some(fc) = &self.shared else { return };
        if self.published == self.cur.len() {
            return;
        }
        let mut n = fc.new.write().unwrap_or_else(|e| e.into_inner());
        if n.tail.is_empty() {
            n.tail_first = self.firsts.last().map_or(0, |f| f.0);
        }
        n.tail.extend_from_slice(&self.cur[self.published..]);
        self.published = self.cur.len();
    }

    /// Write the queued blocks.
    pub(super) fn flush(&mut self, t: &Inner, h: &mut DeviceHandle) -> Result<(), FdError> {
        let batch = std::mem::take(&mut self.batch);
        let ids: Vec<u64> = batch.iter().map(|b| b.0).collect();
        t.cache.put_run(h, batch)?;
        if let Some(fc) = &self.shared {
            let mut n = fc.new.write().unwrap_or_else(|e| e.into_inner());
            for id in ids {
                n.mem.remove(&id);
            }
        }
        Ok(())
    }

    /// Add one key's entries (never split across blocks). `p_last` is the block a
    /// block-start fence points to when `group` has no fence of its own.
    pub(super) fn push(
        &mut self,
        t: &Inner,
        h: &mut DeviceHandle,
        key: u64,
        group: Vec<Entry>,
        has_fence: bool,
        p_last: Option<u64>,
    ) -> Result<(), FdError> {
        let start_new = match self.cur_id {
            None => true,
            Some(_) => self.cur.len() + group.len() > self.cap,
        };
        let mut added = Vec::with_capacity(4);
        if start_new {
            let id = lock(&t.alloc).alloc()?;
            if let Some(prev) = self.cur_id {
                let entries = std::mem::take(&mut self.cur);
                let first = self.firsts.last().map_or(0, |f| f.0);
                self.stage(
                    t,
                    h,
                    prev,
                    first,
                    Block {
                        entries,
                        next: Some(id),
                    },
                )?;
            } else {
                self.meta.head = id;
            }
            self.cur_id = Some(id);
            self.meta.blocks += 1;
            if self.gated && self.meta.blocks > 1 {
                // A block is complete and the merge goes on (not its last block, which
                // `finish` writes): the merge gate's stopping point.
                t.pass_gate();
            }
            self.firsts.push((key, id));
            if self.fenced
                && !has_fence
                && let Some(p) = p_last
            {
                added.push(Entry {
                    key,
                    kind: Kind::Fence,
                    val: p,
                });
            }
        }
        added.extend(group);
        for e in &added {
            match e.kind {
                Kind::Fence => self.meta.fences += 1,
                Kind::Delete => self.meta.deletes += 1,
                Kind::Insert => self.meta.inserts += 1,
            }
        }
        self.cur.extend(added);
        Ok(())
    }

    pub(super) fn finish(mut self, t: &Inner, h: &mut DeviceHandle) -> Result<LevelOut, FdError> {
        match self.cur_id {
            None => Ok((Vec::new(), None)),
            Some(id) => {
                let entries = std::mem::take(&mut self.cur);
                let first = self.firsts.last().map_or(0, |f| f.0);
                self.stage(
                    t,
                    h,
                    id,
                    first,
                    Block {
                        entries,
                        next: None,
                    },
                )?;
                self.flush(t, h)?;
                Ok((self.firsts, Some(self.meta)))
            }
        }
    }
}
