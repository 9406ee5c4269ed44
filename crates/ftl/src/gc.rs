//! Garbage collection and wear leveling (batch-io §5, §6.2.3, §7.2.8).
//!
//! Choices made here:
//! * GC runs when the free pool falls below its low-water mark; also (batch-io §7.2.8)
//!   when a channel has no free block left, on that channel's blocks, and (§8.2.3) when
//!   the share of used blocks reaches `gc_start_used`, a bounded number of victims per
//!   trigger so that one command's latency stays bounded.
//! * A victim's sectors are read a page at a time with read retries; a page that stays
//!   uncorrectable is read sector by sector, and a sector that still cannot be read (or
//!   whose data does not match its CRC) is recorded as lost: its MAP entry becomes
//!   `Lost` through a logged GC move, so that reads of that LBA fail naming it and every
//!   other sector moves on. The LPID of an unreadable sector comes from the page's OOB
//!   (the spare area has its own ECC), or, when that is gone too, from a scan of the MAP.
//!   A block that lost data is retired instead of erased (a grown bad block).

use crate::format::{Entry, Kind, Record, TAG_BYTES, Tag, pack};
use crate::ftl::*;
use crate::provision::Stream;
use crate::read::read_with_retries;
use crate::stats::Count;
use crate::{FtlError, GcPolicy};
use csd_nand::{BlockId, NandError, Ppa};
use csd_sim::SimTime;
use std::collections::HashMap;

/// A valid sector of a GC victim on its way out.
struct Moving {
    lpid: u64,
    /// Its sector address in the victim.
    old: u64,
    /// Where its data is in the relocation buffer; `None` when it could not be read.
    at_byte: Option<usize>,
    /// It was read, but its data did not match its CRC.
    checksum_failed: bool,
}

/// Whether GC runs (no nested GC), and the erase count at which static wear leveling
/// last looked. Only this module changes it.
#[derive(Debug, Default)]
pub(crate) struct GcState {
    /// GC or a relocation is running.
    in_gc: bool,
    /// Erase count of the current counter window at which static wear leveling last
    /// looked (it looks again only after an erase).
    wear_checked_at_erases: u64,
}

impl GcState {
    /// Is GC (or a relocation) running?
    #[inline]
    pub(crate) fn running(&self) -> bool {
        self.in_gc
    }

    /// The counters start a new window (their erase count restarts at 0).
    pub(crate) fn new_window(&mut self) {
        self.wear_checked_at_erases = 0;
    }
}

impl Ftl {
    /// The GC a commit triggers: the free-pool low-water mark, then per-channel and
    /// used-share triggers.
    pub(crate) fn collect_garbage(&mut self, at: SimTime) -> Result<(), FtlError> {
        self.collect_garbage_to(self.gc_low_water(), at)?;
        if self.cfg.per_channel_gc {
            self.gc.in_gc = true;
            let r = self.collect_starved_channels(at);
            self.gc.in_gc = false;
            r?;
        }
        if let Some(share) = self.cfg.gc_start_used {
            self.gc.in_gc = true;
            let r = self.collect_used_above(share, at);
            self.gc.in_gc = false;
            r?;
        }
        Ok(())
    }

    /// A channel whose dies have no free block collects on its own blocks (batch-io
    /// §7.2.8), even while other channels have room.
    fn collect_starved_channels(&mut self, at: SimTime) -> Result<(), FtlError> {
        let channels = self.nand.geometry().channels;
        let channel_of = |f: &Ftl, die: u32| f.nand.addr().channel_of(csd_nand::DieId(die));
        for ch in 0..channels {
            for _ in 0..self.geo.dies() {
                let free: u32 = (0..self.geo.dies())
                    .filter(|&d| channel_of(self, d) == ch)
                    .map(|d| self.blocks.free_per_die()[d as usize])
                    .sum();
                if free > 0 {
                    break;
                }
                let Some(victim) =
                    self.pick_victim_where(|f, b| channel_of(f, b / f.geo.blocks_per_die()) == ch)
                else {
                    break;
                };
                self.collect_victim(victim, at)?;
            }
        }
        Ok(())
    }

    /// While at least `share` of the usable blocks are in use, collect the victims with
    /// at least a page of garbage, at most one per die per trigger. Not while the share
    /// is out of reach: when the blocks GC cannot collect (open, log and metadata blocks)
    /// plus the full blocks' valid data packed into whole blocks already make `share` of
    /// the usable blocks, no collection brings the used share below it, and collecting
    /// anyway compacts the device again after every commit, each victim a page of
    /// garbage and the rest copied (a user who set the threshold at 0.25 on a device whose
    /// open blocks alone are a fifth of it saw no user I/O for 31 modeled seconds while GC
    /// moved 12.7 GB; in the unit test 15.4 GC programs per write against 0.21 without a
    /// threshold). The free-pool low-water mark still collects when space runs out.
    fn collect_used_above(&mut self, share: f64, at: SimTime) -> Result<(), FtlError> {
        let min_garbage = self.geo.sectors_per_page();
        let spb = self.geo.sectors_per_page() * self.geo.pages_per_block();
        for _ in 0..self.geo.dies() {
            // (usable blocks, blocks GC cannot collect, valid sectors of full blocks)
            let (usable, fixed, full_valid) = self
                .blocks
                .iter()
                .filter(|b| b.state != Use::Bad && b.state != Use::Ckpt)
                .fold((0u64, 0u64, 0u64), |(n, f, v), b| match b.state {
                    Use::Free => (n + 1, f, v),
                    Use::Full => (n + 1, f, v + u64::from(b.valid)),
                    _ => (n + 1, f + 1, v),
                });
            let usable = usable as f64;
            let used = usable - self.blocks.free_count() as f64;
            let least = fixed as f64 + (full_valid as f64 / f64::from(spb)).ceil();
            if usable == 0.0 || used / usable < share || least >= share * usable {
                break;
            }
            let Some(victim) =
                self.pick_victim_where(|f, b| spb - f.blocks[b as usize].valid >= min_garbage)
            else {
                break;
            };
            self.collect_victim(victim, at)?;
        }
        Ok(())
    }

    /// Move a victim's live data and reclaim it (erase, or retire if it lost data).
    fn collect_victim(&mut self, victim: u32, at: SimTime) -> Result<(), FtlError> {
        let spb = self.geo.sectors_per_page() * self.geo.pages_per_block();
        self.counters.add(
            Count::GcReclaimedSectors,
            (spb - self.blocks[victim as usize].valid) as u64,
        );
        self.counters.add(Count::GcVictims, 1);
        let damaged = self.relocate(victim, at)?;
        if damaged {
            self.retire_emptied(victim);
            Ok(())
        } else {
            self.erase_block(victim, at)
        }
    }

    /// Retire a block GC emptied because it lost data: it joins the bad blocks unerased.
    fn retire_emptied(&mut self, block: u32) {
        if self.blocks[block as usize].state == Use::Bad {
            return;
        }
        self.blocks.set_state(block, Use::Bad);
        self.counters.add(Count::GrownBadBlocks, 1);
        self.check_wear();
    }

    pub(crate) fn collect_garbage_to(&mut self, target: u32, at: SimTime) -> Result<(), FtlError> {
        self.gc.in_gc = true;
        let r = self.collect_garbage_inner(target, at);
        self.gc.in_gc = false;
        r
    }

    pub(crate) fn collect_garbage_inner(
        &mut self,
        target: u32,
        at: SimTime,
    ) -> Result<(), FtlError> {
        self.reclaim_to(target, at)?;
        // Wear leveling moves data into the COLD stream, which may open blocks: top the
        // pool up again after it.
        if self.wear_level(at)? {
            self.reclaim_to(target, at)?;
        }
        Ok(())
    }

    /// Collect victims until `target` blocks are free.
    fn reclaim_to(&mut self, target: u32, at: SimTime) -> Result<(), FtlError> {
        let mut guard = 0;
        let mut just_checkpointed = false;
        while self.blocks.free_count() < target {
            guard += 1;
            if guard > self.blocks.len() {
                return Err(FtlError::NoSpace);
            }
            // Superseded MAP pages and log pages before the redo start are only freed
            // by a checkpoint; whenever that frees more than it writes, it comes first
            // (with a small MAP cache, moving a victim's data writes MAP pages too).
            if !just_checkpointed && self.checkpoint_pays() {
                just_checkpointed = true;
                self.checkpoint(at)?;
                continue;
            }
            just_checkpointed = false;
            let Some(victim) = self.pick_victim() else {
                // Only metadata is left to reclaim: a checkpoint truncates log and old MAP pages.
                self.checkpoint(at)?;
                if self.blocks.free_count() < target && self.pick_victim().is_none() {
                    return Err(FtlError::NoSpace);
                }
                continue;
            };
            self.collect_victim(victim, at)?;
        }
        Ok(())
    }

    /// Static wear leveling: move the data of the least-worn full blocks (cold data pins
    /// them) so that they rejoin the free pool. Returns whether it moved anything.
    fn wear_level(&mut self, at: SimTime) -> Result<bool, FtlError> {
        if self.counters.window().erases == self.gc.wear_checked_at_erases {
            return Ok(false);
        }
        self.gc.wear_checked_at_erases = self.counters.window().erases;
        let mut moved = false;
        for _ in 0..4 {
            let (_, _, mx) = self.erase_counts();
            let coldest = (0..self.blocks.len() as u32)
                .filter(|&b| self.blocks[b as usize].state == Use::Full)
                .min_by_key(|&b| self.blocks[b as usize].pe);
            match coldest {
                Some(b) if mx - self.blocks[b as usize].pe > self.cfg.wear_level_spread => {
                    self.counters.add(Count::WearLevelMoves, 1);
                    moved = true;
                    if self.relocate(b, at)? {
                        self.retire_emptied(b);
                    } else {
                        self.erase_block(b, at)?;
                    }
                }
                _ => break,
            }
        }
        self.gc.wear_checked_at_erases = self.counters.window().erases;
        Ok(moved)
    }

    /// Whether a checkpoint now would free at least one block more than it writes: the
    /// blocks it reclaims (metadata blocks with no live page, log blocks other than the
    /// log chains' current ones) against the pages it programs (dirty MAP pages, MAPS, WEAR, BBT and
    /// the record). With a small MAP cache every eviction writes a MAP page, and without
    /// this GC would churn through nearly-full data blocks while dead metadata piles up.
    pub(crate) fn checkpoint_pays(&self) -> bool {
        let dead = self
            .blocks
            .iter()
            .filter(|b| b.state == Use::Meta && b.meta_live == 0)
            .count() as u64
            + u64::from(self.log.blocks().saturating_sub(self.log.chains()));
        if dead == 0 {
            return false;
        }
        let cost = self.map.slots().iter().filter(|s| s.dirty).count() as u64
            + self.map.dirty_maps_pages() as u64
            + self.blocks.dirty_gbitv_pages() as u64
            + self.ckpt.wear_pages().len() as u64
            + self.ckpt.bbt_pages().len() as u64
            + 2;
        dead * u64::from(self.geo.pages_per_block()) >= cost + u64::from(self.geo.pages_per_block())
    }

    /// GC keeps this many blocks free: the configured threshold plus what may be taken
    /// between two GC runs (a HOT block per die for one commit, a META block per die for
    /// a checkpoint, two log blocks).
    pub(crate) fn gc_low_water(&self) -> u32 {
        // Above the checkpoint reserve by a commit's worth of blocks (`crate::provision`).
        (self.cfg.gc_free_blocks + 2 * self.geo.dies() + 2)
            .max(self.prov.meta_reserve() + self.geo.dies() + 2)
    }

    pub(crate) fn pick_victim(&self) -> Option<u32> {
        self.pick_victim_where(|_, _| true)
    }

    /// The best victim among full blocks with some garbage that `accept` takes.
    pub(crate) fn pick_victim_where(&self, accept: impl Fn(&Ftl, u32) -> bool) -> Option<u32> {
        let spb = (self.geo.sectors_per_page() * self.geo.pages_per_block()) as f64;
        let full = (0..self.blocks.len() as u32).filter(|&b| {
            self.blocks[b as usize].state == Use::Full
                && (self.blocks[b as usize].valid as f64) < spb
                && accept(self, b)
        });
        match self.cfg.gc_policy {
            GcPolicy::Greedy => full.min_by_key(|&b| self.blocks[b as usize].valid),
            GcPolicy::CostBenefit => full
                .map(|b| {
                    let blk = &self.blocks[b as usize];
                    let u = blk.valid as f64 / spb;
                    let age = (self.prov.program_seq() - blk.stamp) as f64 + 1.0;
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
    /// Returns whether the block lost data (sectors that could not be read).
    pub(crate) fn relocate(&mut self, block: u32, at: SimTime) -> Result<bool, FtlError> {
        if self.blocks[block as usize].valid == 0 {
            return Ok(false);
        }
        let was_in_gc = self.gc.in_gc;
        self.gc.in_gc = true;
        let saved = self.commit.set_aside();
        let r = self.relocate_inner(block, at);
        self.commit.put_back(saved);
        self.gc.in_gc = was_in_gc;
        r
    }

    fn relocate_inner(&mut self, block: u32, at: SimTime) -> Result<bool, FtlError> {
        let spp = self.geo.sectors_per_page() as usize;
        let ss = self.geo.sector_size();
        let ob = self.geo.oob_per_sector();
        let mut data = vec![0u8; spp * ss];
        let mut oob = vec![0u8; ob * spp];
        // 1. Read every page with valid sectors; note each sector's LPID (from its TAG,
        //    or from a MAP scan when the TAG is gone), where its data is, and whether it
        //    could be read.
        let mut moving: Vec<Moving> = Vec::new();
        let mut kept: Vec<u8> = Vec::new();
        let mut reverse: Option<HashMap<u64, u64>> = None;
        for page in 0..self.geo.pages_per_block() {
            let valid: Vec<u32> = (0..self.geo.sectors_per_page())
                .filter(|&s| self.is_valid(block, page, s))
                .collect();
            if valid.is_empty() {
                continue;
            }
            let unreadable = self.read_for_gc(block, page, &valid, &mut data, &mut oob, at)?;
            for &s in &valid {
                let old = pack(block, page, s);
                let o = s as usize * ob;
                let sector = &data[s as usize * ss..(s as usize + 1) * ss];
                let tag = Tag::read(&oob[o..o + TAG_BYTES])
                    .filter(|t| t.kind == Kind::Data && t.id < self.geo.lbas());
                let read_failed = unreadable.contains(&s);
                let readable = !read_failed
                    && tag.is_some_and(|t| {
                        t.matches(sector, || crate::read::place_of(&self.nand, block, page, s))
                    });
                let lpid = match tag {
                    Some(t) => Some(t.id),
                    None if readable => None,
                    None => {
                        if reverse.is_none() {
                            reverse = Some(self.lpids_mapped_into(block, at)?);
                        }
                        reverse.as_ref().and_then(|m| m.get(&old).copied())
                    }
                };
                let Some(lpid) = lpid else {
                    // Not user data any MAP entry names: nothing to move.
                    self.set_valid(old, false);
                    continue;
                };
                let at_byte = if readable {
                    kept.extend_from_slice(sector);
                    Some(kept.len() - ss)
                } else {
                    None
                };
                moving.push(Moving {
                    lpid,
                    old,
                    at_byte,
                    checksum_failed: !read_failed && !readable,
                });
            }
        }
        // 2. In LPID order (each MAP page is loaded once, however small the MAP cache):
        //    the optimistic check (a user write that raced us wins), then move or record
        //    as lost.
        moving.sort_unstable_by_key(|m| m.lpid);
        let mut lost: Vec<Entry> = Vec::new();
        for m in &moving {
            let (cur, _) = self.map_get(m.lpid, at)?;
            if cur != m.old {
                self.set_valid(m.old, false);
                continue;
            }
            match m.at_byte {
                Some(o) => {
                    self.buffer_sector(Stream::Cold, m.lpid, &kept[o..o + ss], m.old, at)?;
                    self.counters.add(Count::GcMovedSectors, 1);
                }
                None => {
                    if m.checksum_failed {
                        self.counters.add(Count::IntegrityErrors, 1);
                    }
                    lost.push(Entry {
                        lpid: m.lpid,
                        new: Loc::Lost.entry(),
                        old: m.old,
                    });
                }
            }
        }
        let damaged = !lost.is_empty();
        if damaged {
            self.record_lost(lost, at)?;
        }
        self.commit_inner(true, at)?;
        Ok(damaged)
    }

    /// Read a page for GC: the whole page with read retries, else sector by sector.
    /// Returns the valid sectors that stayed unreadable; their OOB comes from a read of
    /// the spare area when it can be read.
    fn read_for_gc(
        &mut self,
        block: u32,
        page: u32,
        valid: &[u32],
        data: &mut [u8],
        oob: &mut [u8],
        at: SimTime,
    ) -> Result<Vec<u32>, FtlError> {
        let ppa = Ppa::new(BlockId(block), page);
        let ss = self.geo.sector_size();
        let ob = self.geo.oob_per_sector();
        let retries = self.cfg.read_retries;
        self.counters.add(Count::GcReads, 1);
        let whole = read_with_retries(
            &mut self.nand,
            ppa,
            0,
            data,
            oob,
            at,
            retries,
            &mut self.counters,
        );
        match whole {
            Ok(r) if !r.erased => return Ok(Vec::new()),
            // Erased: every valid sector is gone (a zeroed or replaced region).
            Ok(_) => return Ok(valid.to_vec()),
            Err(NandError::Uncorrectable { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        let mut unreadable = Vec::new();
        for &s in valid {
            let (d, o) = (
                &mut data[s as usize * ss..(s as usize + 1) * ss],
                &mut oob[s as usize * ob..(s as usize + 1) * ob],
            );
            self.counters.add(Count::GcReads, 1);
            let r = read_with_retries(
                &mut self.nand,
                ppa,
                s,
                d,
                o,
                at,
                retries,
                &mut self.counters,
            );
            match r {
                Ok(r) if !r.erased => {}
                Ok(_) | Err(NandError::Uncorrectable { .. }) => unreadable.push(s),
                Err(e) => return Err(e.into()),
            }
        }
        if !unreadable.is_empty() {
            let mut spare = vec![0u8; oob.len()];
            match self.nand.read_oob(ppa, &mut spare, at) {
                Ok(r) if !r.erased => {
                    for &s in &unreadable {
                        let r = s as usize * ob..(s as usize + 1) * ob;
                        oob[r.clone()].copy_from_slice(&spare[r]);
                    }
                }
                Ok(_) | Err(NandError::Uncorrectable { .. }) => {
                    for &s in &unreadable {
                        oob[s as usize * ob..(s as usize + 1) * ob].fill(0xFF);
                    }
                }
                Err(e) => return Err(e.into()),
            }
            self.counters.add(Count::GcReads, 1);
        }
        Ok(unreadable)
    }

    /// Sector address → LPID for every MAP entry naming a sector of `block` (a scan of
    /// the whole MAP: only when a sector's TAG cannot be read).
    fn lpids_mapped_into(
        &mut self,
        block: u32,
        at: SimTime,
    ) -> Result<HashMap<u64, u64>, FtlError> {
        let mut out = HashMap::new();
        let epp = self.geo.map_entries_per_page();
        for mp in 0..self.map.page_addrs().len() as u32 {
            if self.map.page_addrs()[mp as usize] == crate::format::NONE && !self.map.is_cached(mp)
            {
                continue;
            }
            let (s, _) = self.map_slot(mp, at)?;
            for (i, &e) in self.map.slots()[s].entries.iter().enumerate() {
                if let Some(a) = flash_of(e)
                    && crate::format::unpack(a).0 == block
                {
                    out.insert(a, mp as u64 * epp + i as u64);
                }
            }
        }
        Ok(out)
    }

    /// Record LPIDs whose data could not be read as lost: logged as GC moves to `Lost`
    /// (applied at recovery only where MAP still names the old sector) before the block
    /// is reclaimed, then applied.
    fn record_lost(&mut self, lost: Vec<Entry>, at: SimTime) -> Result<(), FtlError> {
        let seq = self.commit.take_seq();
        self.log_entries(
            |seq, entries| Record::GcMove { seq, entries },
            seq,
            lost.clone(),
        );
        self.log_append(Record::Done { seq });
        self.force_log(at)?;
        for e in lost {
            self.map_set(e.lpid, e.new, at)?;
            self.set_valid(e.old, false);
            self.counters.add(Count::LostSectors, 1);
        }
        Ok(())
    }

    pub(crate) fn erase_block(&mut self, block: u32, at: SimTime) -> Result<(), FtlError> {
        let die = (block / self.geo.blocks_per_die()) as usize;
        let bi = block % self.geo.blocks_per_die();
        if Stream::ALL
            .iter()
            .any(|&s| matches!(self.prov.open(s)[die], Some((b, _)) if b == bi))
        {
            return Err(FtlError::Corrupt(format!(
                "block {block} ({:?}) is open for writing and cannot be erased",
                self.blocks[block as usize].state
            )));
        }
        if self.blocks[block as usize].valid != 0 {
            return Err(FtlError::Corrupt(format!(
                "block {block} still holds live data"
            )));
        }
        match self.blocks[block as usize].state {
            Use::Meta => self.counters.add(Count::MetaErases, 1),
            Use::Log => {
                self.counters.add(Count::MetaErases, 1);
                self.log.block_erased();
            }
            _ => self.counters.add(Count::Erases, 1),
        }
        match self.nand.erase(BlockId(block), at) {
            Ok(_) => {
                self.blocks.erased(block);
                // The erase that brings the mean to the rated endurance ends the life.
                self.check_wear();
                Ok(())
            }
            Err(NandError::EraseFailed { .. }) => {
                self.counters.add(Count::EraseFailures, 1);
                self.blocks.set_state(block, Use::Bad);
                self.counters.add(Count::GrownBadBlocks, 1);
                // Out of the wear mean, which may then reach the rated endurance.
                self.check_wear();
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}
