//! Recovery (batch-io §4, §6, §7.2.7): opening the FTL that is on a flash array.
//!
//! Recovery reads the newest valid checkpoint record and what it names (WEAR, the block
//! table, MAPS, GBITV), then looks at the log at the redo scan start point (RSSP):
//! * **Clean** (nothing was logged after the record, as after a clean shutdown): the
//!   state is the checkpoint's. Open blocks continue filling where they stopped, the log
//!   continues at the RSSP, and nothing is written: opening costs O(metadata).
//! * **Unclean**: the log is redone from the RSSP to its end (a link that leads to an
//!   erased page or to a page of another LSN), keeping MAP and GBITV together; commits
//!   without a done record are verified by reading their sectors' TAGs and CRCs and
//!   applied only if every sector verifies (so a batch is all-or-nothing) — except those
//!   an Abort record or a later commit shows failed, which are discarded. Only blocks
//!   the media says were written since the checkpoint, and the blocks open at the
//!   checkpoint, need classifying; the work grows with the log written since the
//!   checkpoint, not with capacity. A read-write recovery then erases written blocks with
//!   nothing live, starts a new log segment and takes a checkpoint.
//!
//! A read-only recovery ([`Ftl::open_read_only`], or an image opened read-only) never
//! writes: an unclean log is replayed into memory only (the MAP cache may exceed its
//! bound), and the FTL refuses writes.
//!
//! `ring.rs` finds the checkpoint record to start from (and refuses a damaged ring);
//! this file rebuilds the state from it and redoes the log.

use crate::provision::Stream;
use crate::stats::Count;

mod ring;

use crate::format::{
    CKPT_CLEAN, CKPT_SPARE_EXHAUSTED, CKPT_WORN_OUT, Checkpoint, Entry, Kind, LOG_LINKS, LogPage,
    NONE, Record, RecordHead, TAG_BYTES, Tag, page_unaddr, unpack, unpack_open,
};
use crate::ftl::*;
use crate::read::read_with_retries;
use crate::{FtlConfig, FtlError, FtlStats, RecoveryFailed, RecoveryReport};
use csd_nand::{Access, BlockId, Nand, NandError, Ppa};
use csd_sim::SimTime;
use std::collections::BTreeMap;
use std::time::Instant;

/// What recovery knows of a block from the checkpoint and the media, before the redo.
const BT_FREE: u8 = 0;
const BT_USED: u8 = 1;
const BT_LOG: u8 = 2;
const BT_CKPT: u8 = 3;
const BT_BAD: u8 = 4;
/// `BT_OPEN + s`: open for stream `s` (HOT, COLD, META) at the checkpoint.
const BT_OPEN: u8 = 8;

/// The newest checkpoint record found, with where it was and how long finding it took.
struct Found {
    ck: Checkpoint,
    rssp_links: [u64; LOG_LINKS],
    active: usize,
    /// The newest record sequence each ring block names.
    newest_in: Vec<Option<u64>>,
    ckpt_blocks: Vec<u32>,
    t0: SimTime,
    t: SimTime,
}

/// What the redo of the log found.
#[derive(Default)]
struct Redo {
    /// Blocks holding log pages at or after the RSSP, with their highest LSN.
    live_log: Vec<(u32, u64)>,
    /// Commits logged without a done record: (is GC, entries).
    pending: BTreeMap<u64, (bool, Vec<Entry>)>,
    /// Highest commit sequence logged.
    max_seq: u64,
}

/// The report of the recovery that opened this FTL (`None` after format). Set only by
/// this module, when a recovery completes.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct LastRecovery(Option<RecoveryReport>);

impl LastRecovery {
    /// The report, if this FTL was recovered.
    pub(crate) fn get(&self) -> Option<RecoveryReport> {
        self.0
    }
}

impl Ftl {
    /// Rebuild the FTL from flash after a crash or a clean shutdown; see the module
    /// documentation. Read-write unless the flash array's image was opened read-only.
    pub fn recover(nand: Nand, cfg: FtlConfig) -> Result<Ftl, FtlError> {
        Self::try_recover(nand, cfg).map_err(|f| f.error)
    }

    /// [`Ftl::recover`], giving the flash array back when recovery fails (for example
    /// when power is cut during recovery), so that it can be tried again.
    pub fn try_recover(nand: Nand, cfg: FtlConfig) -> Result<Ftl, RecoveryFailed> {
        let read_only = nand.access() == Access::ReadOnly;
        Self::open_with(nand, cfg, read_only)
    }

    /// Open the FTL without writing anything to the flash array: an unclean log is
    /// replayed in memory only, and writes are refused with
    /// [`FtlError::ReadOnly`](crate::FtlError::ReadOnly).
    pub fn open_read_only(nand: Nand, cfg: FtlConfig) -> Result<Ftl, RecoveryFailed> {
        Self::open_with(nand, cfg, true)
    }

    fn open_with(mut nand: Nand, cfg: FtlConfig, read_only: bool) -> Result<Ftl, RecoveryFailed> {
        let fail = |error, nand| RecoveryFailed {
            error,
            nand: Box::new(nand),
        };
        let found = match Self::find_checkpoint(&mut nand, &cfg) {
            Ok(x) => x,
            Err(e) => return Err(fail(e, nand)),
        };
        // Extension bytes are a format-time property: a caller that asks for none (the
        // default) opens the device with what it was formatted with.
        let cfg = if cfg.ext_bytes == 0 {
            FtlConfig {
                ext_bytes: found.ck.ext_bytes,
                ..cfg
            }
        } else {
            cfg
        };
        if found.ck.ext_bytes != cfg.ext_bytes {
            let e = FtlError::Config(format!(
                "the device was formatted with {} extension bytes per MAP entry, not {}",
                found.ck.ext_bytes, cfg.ext_bytes
            ));
            return Err(fail(e, nand));
        }
        let mut f = Ftl::skeleton(nand, cfg, found.ck.lbas);
        match f.recover_from(found, read_only) {
            Ok(()) => Ok(f),
            Err(e) => Err(fail(e, f.nand)),
        }
    }

    fn recover_from(&mut self, found: Found, read_only: bool) -> Result<(), FtlError> {
        let wall0 = Instant::now();
        let Found {
            ck,
            rssp_links,
            active,
            newest_in,
            ckpt_blocks,
            t0,
            mut t,
        } = found;
        self.map.set_recovering(true);
        // Each half of the ring continues in its block with the newest record (the
        // record's own block for its half).
        let mut ring_active = [0; 2];
        for (half, a) in ring_active.iter_mut().enumerate() {
            let range = crate::checkpoint::ring_half(ckpt_blocks.len(), half);
            *a = if range.contains(&active) {
                active
            } else {
                range
                    .clone()
                    .max_by_key(|&i| newest_in.get(i).copied().flatten())
                    .unwrap_or(range.start)
            };
        }
        self.ckpt.resume(ckpt_blocks, ring_active, ck.seq);
        self.commit.restore_seq(ck.next_commit);
        self.counters
            .restore_lifetime(FtlStats::from_words(&ck.lifetime));
        self.prov.restore_round_robin(ck.rr);
        self.prov.set_reserve_blocks(ck.reserve_blocks);
        self.prov.set_initial_spare(ck.initial_spare);
        t = t.max(self.load_tables(&ck, t0)?);
        self.ctrl.restore(&ck.ext_pending, &ck.blob);
        let mut rep = RecoveryReport {
            checkpoint_seq: ck.seq,
            ..RecoveryReport::default()
        };
        // The media's write pointers: which blocks hold anything.
        let mut written = vec![false; self.blocks.len()];
        for (b, w) in written.iter_mut().enumerate() {
            *w = self.nand.block_info(BlockId(b as u32))?.next_page > 0;
        }
        let (table, tt) = self.block_codes(&ck, &written, t0)?;
        t = t.max(tt);
        let (log_empty, tt) = self.log_untouched(&rssp_links, t)?;
        t = t.max(tt);
        if log_empty {
            self.open_clean(&table, &written, &rssp_links, ck.rssp_lsn);
            rep.clean = ck.flags & CKPT_CLEAN != 0;
        } else {
            t = t.max(self.replay(&table, &written, &rssp_links, &ck, &mut rep, t)?);
        }
        // The end of life the record names comes first (the first reason sticks), then
        // what the tables show.
        if ck.flags & CKPT_WORN_OUT != 0 {
            self.enter_read_only(crate::ReadOnlyReason::WornOut);
        }
        if ck.flags & CKPT_SPARE_EXHAUSTED != 0 || self.spare_blocks() <= 0 {
            self.enter_read_only(crate::ReadOnlyReason::SpareExhausted);
        }
        self.check_wear();
        if read_only {
            self.health.open_read_only();
        }
        // A device read-only at the end of its life still closes its recovery (into the
        // checkpoint reserve), so that its next open is clean. If even that fails for
        // room, it stays open read-only on the replayed state and its close says that it
        // could not checkpoint.
        if !log_empty && !read_only {
            match self.close_recovery(t) {
                Ok(tt) => t = t.max(tt),
                Err(e) => match self.end_of_life(&e) {
                    Some(reason) => {
                        self.enter_read_only(reason);
                        self.ckpt.block(e.to_string());
                    }
                    None => return Err(e),
                },
            }
        }
        self.map.set_recovering(false);
        self.shrink_cache();
        rep.ext_pending = self.ctrl.pending_count() as u64;
        rep.modeled_s = t.since(t0) as f64 / 1e9;
        rep.wall_s = wall0.elapsed().as_secs_f64();
        self.recovery = LastRecovery(Some(rep));
        self.ckpt.taken_at(t);
        self.reset_stats();
        if self.health.read_only().is_some() {
            return Ok(());
        }
        // Refill the free pool before the first command. Every crash leaves the blocks
        // that were open partly written; without this, cuts that keep striking before the
        // first GC would drain the pool one recovery at a time. The GC here is ordinary
        // post-recovery work (counted in the new stats, crash-safe like any GC); a device
        // that is simply full stays readable.
        match self.ensure_free(0, t) {
            Ok(()) => Ok(()),
            Err(e) => match self.end_of_life(&e) {
                Some(reason) => {
                    self.enter_read_only(reason);
                    Ok(())
                }
                None => Err(e),
            },
        }
    }

    /// WEAR, MAPS and GBITV of the checkpoint; the valid counts follow from GBITV.
    fn load_tables(&mut self, ck: &Checkpoint, t0: SimTime) -> Result<SimTime, FtlError> {
        let page_size = self.geo.page_size();
        let mut page = vec![0u8; page_size];
        let mut t = t0;
        for (i, &a) in ck.wear.iter().enumerate() {
            t = t.max(self.read_meta_page(a, Kind::Wear, i as u64, &mut page, t0)?);
            for (k, pe) in page.chunks_exact(4).enumerate() {
                self.blocks.set_pe(
                    i * page_size / 4 + k,
                    u32::from_le_bytes([pe[0], pe[1], pe[2], pe[3]]),
                );
            }
        }
        let per = page_size / 8;
        for (mi, &a) in ck.mapt.iter().enumerate() {
            if mi >= self.ckpt.maps_pages().len() {
                break;
            }
            if a == NONE {
                continue;
            }
            t = t.max(self.read_meta_page(a, Kind::Maps, mi as u64, &mut page, t0)?);
            for (k, w) in page.chunks_exact(8).enumerate() {
                self.map.restore_page_addr(
                    mi * per + k,
                    u64::from_le_bytes(w.try_into().unwrap_or([0xFF; 8])),
                );
            }
        }
        self.ckpt.restore_tables(ck)?;
        for (i, &a) in ck.gbitv.iter().enumerate() {
            if a == NONE {
                continue;
            }
            t = t.max(self.read_meta_page(a, Kind::Gbitv, i as u64, &mut page, t0)?);
            for (k, w) in page.chunks_exact(8).enumerate() {
                self.blocks.restore_gbitv_word(
                    i * per + k,
                    u64::from_le_bytes(w.try_into().unwrap_or([0; 8])),
                );
            }
        }
        // Valid counts per block, from the bitmap.
        self.blocks.recount_valid();
        // Live metadata pages per block.
        let live: Vec<u64> = self
            .map
            .page_addrs()
            .iter()
            .chain(self.ckpt.maps_pages())
            .chain(self.ckpt.wear_pages())
            .chain(&ck.bbt)
            .chain(self.ckpt.gbitv_pages())
            .copied()
            .filter(|&a| a != NONE)
            .collect();
        for a in live {
            let (b, _) = page_unaddr(a);
            self.blocks.meta_page_added(b);
        }
        Ok(t)
    }

    /// What the checkpoint and the media say of each block (`BT_*`): bad (the bad-block
    /// table), the checkpoint ring, open for a stream at the checkpoint, else used or free
    /// by the media's write pointer.
    fn block_codes(
        &mut self,
        ck: &Checkpoint,
        written: &[bool],
        t0: SimTime,
    ) -> Result<(Vec<u8>, SimTime), FtlError> {
        let mut table: Vec<u8> = written
            .iter()
            .map(|&w| if w { BT_USED } else { BT_FREE })
            .collect();
        let mut page = vec![0u8; self.geo.page_size()];
        let mut t = t0;
        for (i, &a) in ck.bbt.iter().enumerate() {
            t = t.max(self.read_meta_page(a, Kind::Bbt, i as u64, &mut page, t0)?);
            for (k, byte) in page.iter().enumerate() {
                for bit in 0..8 {
                    let b = (i * self.geo.page_size() + k) * 8 + bit;
                    if byte & (1 << bit) != 0 && b < table.len() {
                        table[b] = BT_BAD;
                    }
                }
            }
        }
        for &x in &ck.open {
            let (s, b, _) = unpack_open(x);
            if s < 3 && (b as usize) < table.len() && table[b as usize] != BT_BAD {
                table[b as usize] = BT_OPEN + s;
            }
        }
        // A ring block that went bad stays bad (the ring skips it).
        for &b in self.ckpt.ring() {
            if table[b as usize] != BT_BAD {
                table[b as usize] = BT_CKPT;
            }
        }
        Ok((table, t))
    }

    /// Was nothing written to the log after the checkpoint: is the RSSP's first
    /// candidate page erased, with its block's write pointer right there? (A torn or
    /// failed log write there is not nothing, and neither is a log block that an
    /// interrupted recovery already erased: the log is then replayed, which also starts a
    /// new log segment.)
    fn log_untouched(
        &mut self,
        links: &[u64; LOG_LINKS],
        at: SimTime,
    ) -> Result<(bool, SimTime), FtlError> {
        let Some((b, p)) = self.page_in_device(links[0]) else {
            return Ok((false, at));
        };
        let mut page = vec![0u8; self.geo.page_size()];
        let r = read_with_retries(
            &mut self.nand,
            Ppa::new(BlockId(b), p),
            0,
            &mut page,
            &mut [],
            at,
            self.cfg.read_retries * crate::read::META_RETRY_FACTOR,
            &mut self.counters,
        );
        let pointer_there = self.nand.block_info(BlockId(b))?.next_page == p;
        match r {
            Ok(r) => Ok((r.erased && pointer_there, r.done)),
            Err(NandError::Uncorrectable { done, .. }) => Ok((false, done)),
            Err(e) => Err(e.into()),
        }
    }

    fn page_in_device(&self, addr: u64) -> Option<(u32, u32)> {
        if addr == NONE {
            return None;
        }
        let (b, p) = page_unaddr(addr);
        ((b as usize) < self.blocks.len() && p < self.geo.pages_per_block()).then_some((b, p))
    }

    /// The state is the checkpoint's: block states from the table, open blocks where
    /// the media's write pointers say, the log continuing at the RSSP.
    fn open_clean(
        &mut self,
        table: &[u8],
        written: &[bool],
        rssp_links: &[u64; LOG_LINKS],
        rssp_lsn: u64,
    ) {
        for b in 0..self.blocks.len() {
            let code = table[b];
            let state = match code {
                BT_BAD => Use::Bad,
                BT_CKPT => Use::Ckpt,
                _ if self.ckpt.ring().contains(&(b as u32)) => Use::Ckpt,
                c if (BT_OPEN..BT_OPEN + 3).contains(&c) && written[b] => {
                    let s = Stream::from_index((c - BT_OPEN) as usize)
                        .unwrap_or_else(|| unreachable!("code {c} is in the open range"));
                    let next = self
                        .nand
                        .block_info(BlockId(b as u32))
                        .map_or(self.geo.pages_per_block(), |i| i.next_page);
                    if next < self.geo.pages_per_block() {
                        let die = b / self.geo.blocks_per_die() as usize;
                        let bi = (b % self.geo.blocks_per_die() as usize) as u32;
                        self.prov.reopen(s, die, (bi, next));
                        Use::Open(Some(s))
                    } else {
                        self.settled_state(b, written[b])
                    }
                }
                BT_LOG if written[b] => Use::Log,
                _ => self.settled_state(b, written[b]),
            };
            self.blocks.set_state(b as u32, state);
        }
        self.blocks.check_free_counts();
        self.log
            .set_block_count(self.blocks.iter().filter(|b| b.state == Use::Log).count() as u32);
        // The log continues at the RSSP's first candidate.
        let (b, p) = self.page_in_device(rssp_links[0]).unwrap_or((0, 0));
        let next_block = rssp_links
            .iter()
            .filter_map(|&a| self.page_in_device(a))
            .map(|(lb, _)| lb)
            .find(|&lb| lb != b);
        self.log.resume((b, p), next_block, rssp_lsn);
        for lb in self.log.current_blocks() {
            if self.blocks[lb as usize].state != Use::Log {
                self.blocks.set_state(lb, Use::Log);
                self.log.block_added();
            }
        }
        self.blocks.check_free_counts();
    }

    /// The state of a closed block from what it holds: valid data (Full), live metadata
    /// (Meta), nothing and never written (Free), or nothing live (Full: garbage for GC).
    fn settled_state(&self, b: usize, written: bool) -> Use {
        let blk = &self.blocks[b];
        if blk.valid > 0 {
            Use::Full
        } else if blk.meta_live > 0 {
            Use::Meta
        } else if !written {
            Use::Free
        } else {
            Use::Full
        }
    }

    /// Redo the log from the RSSP and settle every block.
    fn replay(
        &mut self,
        table: &[u8],
        written: &[bool],
        rssp_links: &[u64; LOG_LINKS],
        ck: &Checkpoint,
        rep: &mut RecoveryReport,
        mut t: SimTime,
    ) -> Result<SimTime, FtlError> {
        // Blocks for allocation during redo: erased blocks are free, anything written is
        // provisionally full (settled after the redo); open blocks are closed.
        for b in 0..self.blocks.len() {
            let state = match table[b] {
                BT_BAD => Use::Bad,
                BT_CKPT => Use::Ckpt,
                _ if self.ckpt.ring().contains(&(b as u32)) => Use::Ckpt,
                BT_FREE if !written[b] => Use::Free,
                _ if !written[b] && self.blocks[b].valid == 0 && self.blocks[b].meta_live == 0 => {
                    Use::Free
                }
                _ => Use::Full,
            };
            self.blocks.set_state(b as u32, state);
        }
        self.blocks.check_free_counts();
        let mut redo = Redo::default();
        t = t.max(self.redo_log(rssp_links, ck.rssp_lsn, &mut redo, rep, t)?);
        // Commits without a done record: one that an Abort or a later commit shows
        // failed is discarded; the last one is verified and applied all or nothing.
        for (seq, (gc, entries)) in std::mem::take(&mut redo.pending) {
            if seq < redo.max_seq {
                rep.commits_discarded += 1;
                continue;
            }
            let (ok, tt) = self.verify(seq, &entries, t)?;
            t = t.max(tt);
            if ok {
                t = t.max(self.redo(gc, &entries, t)?);
                rep.commits_verified += 1;
            } else {
                rep.commits_discarded += 1;
            }
            self.commit.seq_after(seq);
        }
        self.commit.seq_after(redo.max_seq);
        // Settle the blocks: live log, live data, live metadata, free or garbage.
        for (b, &w) in written.iter().enumerate() {
            if matches!(self.blocks[b].state, Use::Bad | Use::Ckpt) {
                continue;
            }
            let settled = self.settled_state(b, w);
            self.blocks.set_state(b as u32, settled);
        }
        for &(b, lsn) in &redo.live_log {
            let blk = self.blocks[b as usize];
            if blk.valid == 0 && blk.meta_live == 0 {
                self.blocks.set_state(b, Use::Log);
                self.blocks.log_page_written(b, lsn);
            }
        }
        // Metadata written during this recovery (MAP evictions) sits in open META blocks.
        for s in Stream::ALL {
            for die in 0..self.geo.dies() as usize {
                if let Some((bi, _)) = self.prov.close(s, die) {
                    let b = die * self.geo.blocks_per_die() as usize + bi as usize;
                    let full = if s == Stream::Meta {
                        Use::Meta
                    } else {
                        Use::Full
                    };
                    self.blocks.set_state(b as u32, full);
                }
            }
        }
        self.blocks.check_free_counts();
        self.log
            .set_block_count(self.blocks.iter().filter(|b| b.state == Use::Log).count() as u32);
        Ok(t)
    }

    /// Redo the log from the RSSP to its end.
    fn redo_log(
        &mut self,
        rssp_links: &[u64; LOG_LINKS],
        rssp_lsn: u64,
        redo: &mut Redo,
        rep: &mut RecoveryReport,
        mut t: SimTime,
    ) -> Result<SimTime, FtlError> {
        let mut page = vec![0u8; self.geo.page_size()];
        let mut oob = vec![0u8; self.scratch.oob_len()];
        let mut links = *rssp_links;
        let mut expect = rssp_lsn;
        self.log.replayed_to(rssp_lsn);
        loop {
            let mut found = None;
            for &cand in links.iter() {
                let Some((b, p)) = self.page_in_device(cand) else {
                    break;
                };
                let r = read_with_retries(
                    &mut self.nand,
                    Ppa::new(BlockId(b), p),
                    0,
                    &mut page,
                    &mut oob,
                    t,
                    self.cfg.read_retries * crate::read::META_RETRY_FACTOR,
                    &mut self.counters,
                );
                match r {
                    Ok(r) if r.erased => {
                        // The end of the log, unless the block's write pointer says a
                        // later page was programmed (then the log was erased after the
                        // fact).
                        if erased_is_damage(p, self.nand.block_info(BlockId(b))?.next_page) {
                            return Err(FtlError::Corrupt(format!(
                                "log page {expect} at block {b} page {p} reads as erased, but the block holds pages after it: \
                                 the log was damaged after it was written"
                            )));
                        }
                        break;
                    }
                    Ok(r) => {
                        t = t.max(r.done);
                        self.counters.add(Count::MetaReads, 1);
                        match LogPage::decode(&page) {
                            Some(lp) if lp.lsn == expect => {
                                found = Some((lp, b));
                                break;
                            }
                            Some(_) => {}
                            None => {
                                // Programmed completely as the log page we expect, but its
                                // bytes no longer check: damaged, not the end of the log.
                                // After an unclean stop of the image's host process
                                // (or a host crash), a page not yet synced may have
                                // reached the disk in part: the end of the log.
                                if let Some(tag) = Tag::read(&oob[..TAG_BYTES])
                                    && tag.kind == Kind::Log
                                    && tag.id == expect
                                    && !self.nand.opened_unclean()
                                {
                                    return Err(FtlError::Corrupt(format!(
                                        "log page {expect} at block {b} page {p} is damaged (its checksum fails)"
                                    )));
                                }
                            }
                        }
                    }
                    Err(NandError::Uncorrectable { .. }) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            let Some((lp, b)) = found else { break };
            rep.log_pages += 1;
            redo.live_log.push((b, lp.lsn));
            for r in lp.records {
                rep.log_records += 1;
                t = t.max(self.redo_record(r, redo, rep, t)?);
            }
            links = lp.links;
            expect += 1;
            self.log.replayed_to(expect);
        }
        Ok(t)
    }

    fn redo_record(
        &mut self,
        r: Record,
        redo: &mut Redo,
        rep: &mut RecoveryReport,
        t: SimTime,
    ) -> Result<SimTime, FtlError> {
        let mut t = t;
        match r {
            Record::Rdesc { seq, entries } | Record::Rdesca { seq, entries } => {
                redo.max_seq = redo.max_seq.max(seq);
                redo.pending
                    .entry(seq)
                    .or_insert((false, Vec::new()))
                    .1
                    .extend(entries);
            }
            Record::GcMove { seq, entries } => {
                redo.max_seq = redo.max_seq.max(seq);
                let e = redo.pending.entry(seq).or_insert((true, Vec::new()));
                e.0 = true;
                e.1.extend(entries);
            }
            Record::Done { seq } => {
                if let Some((gc, entries)) = redo.pending.remove(&seq) {
                    // After a host crash the done record may have reached the disk
                    // without the data it covers (the host writes pages back in any
                    // order): such a commit was never acknowledged (acknowledging syncs
                    // first), so it is verified like one without a done record.
                    if self.nand.opened_unclean() {
                        let (ok, tt) = self.verify(seq, &entries, t)?;
                        t = t.max(tt);
                        if !ok {
                            rep.commits_discarded += 1;
                            return Ok(t);
                        }
                    }
                    t = t.max(self.redo(gc, &entries, t)?);
                    rep.commits_redone += 1;
                }
            }
            Record::Abort { seq } => {
                if redo.pending.remove(&seq).is_some() {
                    rep.commits_discarded += 1;
                }
            }
            Record::Trim { lpid, n } => {
                for l in lpid..lpid.saturating_add(n).min(self.geo.lbas()) {
                    let (cur, tt) = self.map_get(l, t)?;
                    self.set_valid(cur, false);
                    t = t.max(tt).max(self.map_set(l, NONE, t)?);
                    if self.cfg.ext_bytes > 0 {
                        t = t.max(self.clear_ext(l, t)?);
                    }
                }
            }
            Record::ExtPending { lpid, n } => {
                self.ctrl
                    .mark_pending(lpid..lpid.saturating_add(n).min(self.geo.lbas()));
            }
            Record::Blob { bytes } => self.ctrl.set_blob(bytes),
            Record::Ext { lpid, bytes } => {
                if lpid < self.geo.lbas() && bytes.len() == self.cfg.ext_bytes as usize {
                    self.ctrl.settle(lpid);
                    let tt = self.store_ext(lpid, &bytes, t)?;
                    t = t.max(tt);
                }
            }
        }
        Ok(t)
    }

    /// After an unclean recovery (read-write): erase every written block with nothing
    /// live (data blocks open at the crash, log blocks before the RSSP, superseded
    /// metadata), start a new log segment and take a checkpoint that makes it the redo
    /// start.
    fn close_recovery(&mut self, at: SimTime) -> Result<SimTime, FtlError> {
        for b in 0..self.blocks.len() as u32 {
            let blk = self.blocks[b as usize];
            if blk.state == Use::Full && blk.valid == 0 {
                self.erase_block(b, at)?;
            }
        }
        self.start_log()?;
        self.log.checkpointed();
        self.checkpoint(at)
    }

    /// Apply a commit's mapping changes, keeping GBITV with MAP: user commits always,
    /// GC moves only where MAP still points at the old copy.
    pub(crate) fn redo(
        &mut self,
        gc: bool,
        entries: &[Entry],
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        // Amendments (later entries for the same LPID) supersede the first location; the
        // old location of GC moves is the first entry's.
        let mut order: Vec<Entry> = Vec::with_capacity(entries.len());
        let mut at_of: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
        for e in entries {
            match at_of.get(&e.lpid) {
                Some(&i) => order[i].new = e.new,
                None => {
                    at_of.insert(e.lpid, order.len());
                    order.push(*e);
                }
            }
        }
        let mut t = at;
        for e in &order {
            if e.lpid >= self.geo.lbas() || !self.entry_in_device(e.new) {
                continue;
            }
            let (cur, tt) = self.map_get(e.lpid, t)?;
            t = t.max(tt);
            if gc && cur != e.old {
                continue;
            }
            self.set_valid(cur, false);
            t = t.max(self.map_set(e.lpid, e.new, t)?);
            self.set_valid(e.new, true);
        }
        Ok(t)
    }

    /// Does a logged MAP entry name nothing, a lost LPID, or a sector of this device?
    fn entry_in_device(&self, e: u64) -> bool {
        match Loc::of(e) {
            Loc::Unmapped | Loc::Lost => true,
            Loc::Flash(a) => {
                let (b, p, s) = unpack(a);
                (b as usize) < self.blocks.len()
                    && p < self.geo.pages_per_block()
                    && s < self.geo.sectors_per_page()
            }
            Loc::Buffered { .. } => false,
        }
    }

    /// Does every sector of a commit hold what its descriptor says (TAG LPID, sequence
    /// and CRC)? A sector that reads uncorrectable is retried first (a bit error must not
    /// discard an acknowledged write whose done record had not reached the log).
    fn verify(
        &mut self,
        seq: u64,
        entries: &[Entry],
        at: SimTime,
    ) -> Result<(bool, SimTime), FtlError> {
        // Later entries for the same LPID (amendments) supersede earlier ones.
        let mut last: BTreeMap<u64, u64> = BTreeMap::new();
        for e in entries {
            last.insert(e.lpid, e.new);
        }
        let mut t = at;
        let mut data = vec![0u8; self.geo.sector_size()];
        let mut oob = vec![0u8; self.geo.oob_per_sector()];
        for (&lpid, &new) in &last {
            if Loc::of(new) == Loc::Lost {
                continue;
            }
            if !self.entry_in_device(new) || flash_of(new).is_none() {
                return Ok((false, t));
            }
            let (b, p, s) = unpack(new);
            let r = read_with_retries(
                &mut self.nand,
                Ppa::new(BlockId(b), p),
                s,
                &mut data,
                &mut oob,
                at,
                self.cfg.read_retries * crate::read::META_RETRY_FACTOR,
                &mut self.counters,
            );
            match r {
                Ok(r) if !r.erased => {
                    t = t.max(r.done);
                    self.counters.add(Count::MetaReads, 1);
                    match Tag::read(&oob[..TAG_BYTES]) {
                        Some(tag)
                            if tag.kind == Kind::Data
                                && tag.id == lpid
                                && tag.seq == seq as u32
                                && tag.matches(&data, || {
                                    crate::read::place_of(&self.nand, b, p, s)
                                }) => {}
                        _ => return Ok((false, t)),
                    }
                }
                Ok(_) | Err(NandError::Uncorrectable { .. }) => return Ok((false, t)),
                Err(e) => return Err(e.into()),
            }
        }
        Ok((true, t))
    }
}

/// Whether page `p` reading as erased in a block whose write pointer is `next_page` means
/// the block was damaged after it was written. The pointer moves before a program's
/// commit point (the page's state byte, `csd_nand`), so a process killed inside a program
/// leaves that one page erased just below the pointer: an interrupted write that was
/// never acknowledged, not damage. An erased page further below the pointer is.
fn erased_is_damage(p: u32, next_page: u32) -> bool {
    p.saturating_add(1) < next_page
}
