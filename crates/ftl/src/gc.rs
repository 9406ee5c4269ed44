//! Garbage collection and wear leveling (batch-io §5, §6.2.3, §7.2.8).

use crate::format::{Kind, TAG_BYTES, Tag, pack};
use crate::ftl::*;
use crate::{FtlError, GcPolicy};
use csd_nand::{BlockId, NandError, Ppa};
use csd_sim::SimTime;

impl Ftl {
    pub(crate) fn collect_garbage(&mut self, at: SimTime) -> Result<(), FtlError> {
        self.collect_garbage_to(self.gc_low_water(), at)
    }

    pub(crate) fn collect_garbage_to(&mut self, target: u32, at: SimTime) -> Result<(), FtlError> {
        self.in_gc = true;
        let r = self.collect_garbage_inner(target, at);
        self.in_gc = false;
        r
    }

    pub(crate) fn collect_garbage_inner(
        &mut self,
        target: u32,
        at: SimTime,
    ) -> Result<(), FtlError> {
        let mut guard = 0;
        let mut checkpointed = false;
        while self.free_count < target {
            guard += 1;
            if guard > self.blocks.len() {
                return Err(FtlError::NoSpace);
            }
            // Superseded MAP pages and log pages before the redo start are only freed
            // by a checkpoint; when that frees more than it writes, it comes first.
            if !checkpointed && self.checkpoint_pays() {
                checkpointed = true;
                self.checkpoint(at)?;
                continue;
            }
            let Some(victim) = self.pick_victim() else {
                // Only metadata is left to reclaim: a checkpoint truncates log and old MAP pages.
                self.checkpoint(at)?;
                if self.free_count < target && self.pick_victim().is_none() {
                    return Err(FtlError::NoSpace);
                }
                continue;
            };
            let spb = self.sectors_per_page * self.pages_per_block;
            self.stats.gc_reclaimed_sectors += (spb - self.blocks[victim as usize].valid) as u64;
            self.stats.gc_victims += 1;
            self.relocate(victim, at)?;
            self.erase_block(victim, at)?;
        }
        if self.stats.erases == self.wear_checked_at_erases {
            return Ok(());
        }
        self.wear_checked_at_erases = self.stats.erases;
        // Static wear leveling: move the data of the least-worn full blocks (cold data
        // pins them) so that they rejoin the free pool.
        for _ in 0..4 {
            let (_, _, mx) = self.erase_counts();
            let coldest = (0..self.blocks.len() as u32)
                .filter(|&b| self.blocks[b as usize].state == Use::Full)
                .min_by_key(|&b| self.blocks[b as usize].pe);
            match coldest {
                Some(b) if mx - self.blocks[b as usize].pe > self.cfg.wear_level_spread => {
                    self.stats.wear_level_moves += 1;
                    self.relocate(b, at)?;
                    self.erase_block(b, at)?;
                }
                _ => break,
            }
        }
        self.wear_checked_at_erases = self.stats.erases;
        Ok(())
    }

    /// Whether a checkpoint now would free at least one block more than it writes: the
    /// blocks it reclaims (metadata blocks with no live page, log blocks other than the
    /// current one) against the pages it programs (dirty MAP pages, MAPS, WEAR, BBT and
    /// the record). With a small MAP cache every eviction writes a MAP page, and without
    /// this GC would churn through nearly-full data blocks while dead metadata piles up.
    pub(crate) fn checkpoint_pays(&self) -> bool {
        let dead = self
            .blocks
            .iter()
            .filter(|b| b.state == Use::Meta && b.meta_live == 0)
            .count() as u64
            + u64::from(self.log_blocks.saturating_sub(1));
        if dead == 0 {
            return false;
        }
        let cost = self.map_slots.iter().filter(|s| s.dirty).count() as u64
            + self.maps_page_dirty.iter().filter(|&&d| d).count() as u64
            + self.wear_pages.len() as u64
            + self.bbt_pages.len() as u64
            + 2;
        dead * u64::from(self.pages_per_block) >= cost + u64::from(self.pages_per_block)
    }

    /// GC keeps this many blocks free: the configured threshold plus what may be taken
    /// between two GC runs (a HOT block per die for one commit, a META block per die for
    /// a checkpoint, two log blocks).
    pub(crate) fn gc_low_water(&self) -> u32 {
        self.cfg.gc_free_blocks + 2 * self.dies + 2
    }

    pub(crate) fn pick_victim(&self) -> Option<u32> {
        let spb = (self.sectors_per_page * self.pages_per_block) as f64;
        let full = (0..self.blocks.len() as u32).filter(|&b| {
            self.blocks[b as usize].state == Use::Full
                && (self.blocks[b as usize].valid as f64) < spb
        });
        match self.cfg.gc_policy {
            GcPolicy::Greedy => full.min_by_key(|&b| self.blocks[b as usize].valid),
            GcPolicy::CostBenefit => full
                .map(|b| {
                    let blk = &self.blocks[b as usize];
                    let u = blk.valid as f64 / spb;
                    let age = (self.program_seq - blk.stamp) as f64 + 1.0;
                    let score = if u == 0.0 {
                        f64::INFINITY
                    } else {
                        (1.0 - u) / (2.0 * u) * age
                    };
                    (b, score)
                })
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(b, _)| b),
        }
    }

    /// Move every valid sector of `block` to the COLD stream in one GC commit, using the
    /// TAG for the reverse mapping and the optimistic MAP update of batch-io §7.2.8.
    pub(crate) fn relocate(&mut self, block: u32, at: SimTime) -> Result<(), FtlError> {
        if self.blocks[block as usize].valid == 0 {
            return Ok(());
        }
        let was_in_gc = self.in_gc;
        self.in_gc = true;
        let saved = std::mem::take(&mut self.page_bufs);
        let saved_filling = std::mem::take(&mut self.filling);
        let r = self.relocate_inner(block, at);
        self.page_bufs = saved;
        self.filling = saved_filling;
        self.in_gc = was_in_gc;
        r
    }

    pub(crate) fn relocate_inner(&mut self, block: u32, at: SimTime) -> Result<(), FtlError> {
        let mut data = vec![0u8; self.sectors_per_page as usize * self.sector_size];
        let mut oob = vec![0u8; self.oob_per_sector * self.sectors_per_page as usize];
        for page in 0..self.pages_per_block {
            if !(0..self.sectors_per_page).any(|s| self.is_valid(block, page, s)) {
                continue;
            }
            let r = self
                .nand
                .read(Ppa::new(BlockId(block), page), 0, &mut data, &mut oob, at);
            self.stats.gc_reads += 1;
            match r {
                Ok(_) => {}
                Err(NandError::Uncorrectable { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
            for s in 0..self.sectors_per_page {
                if !self.is_valid(block, page, s) {
                    continue;
                }
                let o = s as usize * self.oob_per_sector;
                let old = pack(block, page, s);
                let tag = Tag::read(&oob[o..o + TAG_BYTES]);
                let lpid = match tag {
                    Some(t) if t.kind == Kind::Data && t.id < self.lbas => t.id,
                    _ => {
                        self.set_valid(old, false);
                        continue;
                    }
                };
                // Optimistic check: a user write that raced us wins.
                let (cur, _) = self.map_get(lpid, at)?;
                if cur != old {
                    self.set_valid(old, false);
                    continue;
                }
                let sector = data
                    [s as usize * self.sector_size..(s as usize + 1) * self.sector_size]
                    .to_vec();
                self.buffer_sector(COLD, lpid, &sector, old, at)?;
                self.stats.gc_moved_sectors += 1;
            }
        }
        self.commit_inner(true, at)?;
        Ok(())
    }

    pub(crate) fn erase_block(&mut self, block: u32, at: SimTime) -> Result<(), FtlError> {
        if self.blocks[block as usize].valid != 0 {
            return Err(FtlError::Corrupt(format!(
                "block {block} still holds live data"
            )));
        }
        match self.blocks[block as usize].state {
            Use::Meta => self.stats.meta_erases += 1,
            Use::Log => {
                self.stats.meta_erases += 1;
                self.log_blocks = self.log_blocks.saturating_sub(1);
            }
            _ => self.stats.erases += 1,
        }
        match self.nand.erase(BlockId(block), at) {
            Ok(_) => {
                let b = &mut self.blocks[block as usize];
                b.pe += 1;
                b.state = Use::Free;
                b.meta_live = 0;
                b.max_lsn = 0;
                self.free_count += 1;
                Ok(())
            }
            Err(NandError::EraseFailed { .. }) => {
                self.stats.erase_failures += 1;
                self.blocks[block as usize].state = Use::Bad;
                self.stats.grown_bad_blocks += 1;
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}
