//! Fuzzy incremental checkpoints (batch-io §6, §7.2.7).
//!
//! A checkpoint notes the redo scan start point (RSSP), writes the dirty MAP pages, the
//! dirty MAPS pages, the dirty pages of the valid-sector bitmap GBITV, WEAR and the
//! bad-block table to the META stream, then the record (its body pages, then its head) to
//! the well-known location, and finally reclaims log blocks before the RSSP and metadata
//! blocks with nothing live.
//!
//! Choices made here:
//! * GBITV is checkpointed (only its changed pages, and an all-zero page is not written
//!   at all), so recovery loads it instead of reading every MAP page; the per-block
//!   valid counts follow from it by popcount.
//! * The record names the open blocks of the three streams, captured after every other
//!   metadata page of the checkpoint is written, so they are exactly the open blocks
//!   when the record is durable. Which other blocks hold data follows from the media's
//!   per-block write pointers and from GBITV and the live metadata pages. After a clean
//!   shutdown, opening the device reads the record, WEAR, the bad-block table, MAPS and
//!   GBITV and the write pointers: O(metadata), not O(capacity), and the open blocks
//!   continue filling where they stopped.
//! * A record is its body (the variable-length lists, as many pages as they need) and a
//!   head page that names the body pages and carries the body's CRC; both go to one ring
//!   block at a time (the next block is erased only when the current one is full), so the
//!   newest record always survives the erase (double buffering over a ring of 8 good
//!   blocks).
//! * A device read-only at the end of its life still checkpoints: it moves no data (no
//!   GC first), and its metadata pages and log pages go to the free blocks the data
//!   streams leave for them (the checkpoint reserve, [`crate::provision`]). Its clean
//!   close is therefore clean, and its lifetime counters (SMART) are kept. The record
//!   says why it is read-only (spare exhausted, worn out), so it reopens read-only.
//! * A close that cannot write its checkpoint fails with
//!   [`FtlError::NotCheckpointed`]; it never reports success. An image opened read-only
//!   is closed without writing anything.

use crate::format::{
    CKPT_CLEAN, CKPT_SPARE_EXHAUSTED, CKPT_WORN_OUT, Checkpoint, Kind, LOG_LINKS, NONE, pack_open,
    page_addr, page_unaddr,
};
use crate::ftl::*;
use crate::provision::Stream;
use crate::stats::Count;
use crate::{FtlError, FtlStats, ReadOnlyReason};
use csd_nand::{BlockId, NandError, Ppa};
use csd_sim::SimTime;

/// The indices in `ckpt_blocks` of ring half `half` (0 or 1).
pub(crate) fn ring_half(blocks: usize, half: usize) -> std::ops::Range<usize> {
    let mid = blocks / 2;
    if half == 0 { 0..mid } else { mid..blocks }
}

/// The well-known checkpoint location and what the last checkpoint wrote: the ring of
/// candidate blocks, the block each half writes to, the record's sequence number, the
/// table pages it names (MAPT, WEAR, bad-block table, GBITV), when it was taken, and why
/// no checkpoint can be written, if none can. Only this module changes it (recovery
/// restores it through [`CkptState::resume`] and [`CkptState::restore_tables`]).
#[derive(Debug)]
pub(crate) struct CkptState {
    /// The ring of candidate blocks (see [`Ftl::well_known_ckpt_blocks`]).
    ring: Vec<u32>,
    /// Index in `ring` of the block each half of the ring writes to now.
    active: [usize; 2],
    /// Sequence number of the last checkpoint record.
    seq: u64,
    /// MAPT: page addresses of the MAPS pages as of the last checkpoint.
    maps_pages: Vec<u64>,
    /// Page addresses of the WEAR pages of the last checkpoint.
    wear_pages: Vec<u64>,
    /// Page addresses of the bad-block-table pages of the last checkpoint.
    bbt_pages: Vec<u64>,
    /// GBITV pages (page addresses) of the last checkpoint; `NONE` for an all-zero page.
    gbitv_pages: Vec<u64>,
    /// Why no checkpoint can be written (the closing checkpoint of a recovery found no
    /// room): [`Ftl::close`] reports it instead of trying.
    blocked: Option<String>,
    /// Modeled instant of the last checkpoint (for interval checkpoints).
    last_at: SimTime,
}

impl CkptState {
    /// No checkpoint yet, for `maps_pages` MAPS pages and `gbitv_pages` GBITV pages.
    pub(crate) fn new(maps_pages: usize, gbitv_pages: usize) -> CkptState {
        CkptState {
            ring: Vec::new(),
            active: [0, CKPT_RING / 2],
            seq: 0,
            maps_pages: vec![NONE; maps_pages],
            wear_pages: Vec::new(),
            bbt_pages: Vec::new(),
            gbitv_pages: vec![NONE; gbitv_pages],
            blocked: None,
            last_at: SimTime::ZERO,
        }
    }

    /// A fresh device's ring (format).
    pub(crate) fn use_ring(&mut self, ring: Vec<u32>) {
        self.ring = ring;
        self.check();
    }

    /// Continue the ring of an opened device: each half writes to block `active[half]`
    /// next; the newest record found has sequence number `seq`.
    pub(crate) fn resume(&mut self, ring: Vec<u32>, active: [usize; 2], seq: u64) {
        self.ring = ring;
        self.active = active;
        self.seq = seq;
        self.check();
    }

    /// The table pages the checkpoint `ck` names. Fails (changing nothing) when its
    /// GBITV does not fit this geometry.
    pub(crate) fn restore_tables(&mut self, ck: &Checkpoint) -> Result<(), FtlError> {
        if ck.gbitv.len() != self.gbitv_pages.len() {
            return Err(FtlError::Corrupt(format!(
                "the checkpoint lists {} GBITV pages; this geometry has {}",
                ck.gbitv.len(),
                self.gbitv_pages.len()
            )));
        }
        self.gbitv_pages.copy_from_slice(&ck.gbitv);
        for (mine, &a) in self.maps_pages.iter_mut().zip(&ck.mapt) {
            *mine = a;
        }
        self.wear_pages = ck.wear.clone();
        self.bbt_pages = ck.bbt.clone();
        Ok(())
    }

    /// No checkpoint can be written, for `why`: [`Ftl::close`] reports it.
    pub(crate) fn block(&mut self, why: String) {
        self.blocked = Some(why);
    }

    /// The device's state as of `t` is what the last checkpoint holds (the closing
    /// checkpoint of a recovery, or a clean open).
    pub(crate) fn taken_at(&mut self, t: SimTime) {
        self.last_at = t;
    }

    /// The blocks of the ring.
    pub(crate) fn ring(&self) -> &[u32] {
        &self.ring
    }

    /// Replace the last checkpoint's instant by `settle(instant)` ([`crate::Ftl::settle_instants`]).
    pub(crate) fn settle_last_at(&mut self, settle: &mut dyn FnMut(SimTime) -> SimTime) {
        self.last_at = settle(self.last_at);
    }

    /// Modeled instant of the last checkpoint.
    pub(crate) fn last_at(&self) -> SimTime {
        self.last_at
    }

    /// MAPT of the last checkpoint.
    pub(crate) fn maps_pages(&self) -> &[u64] {
        &self.maps_pages
    }

    /// WEAR pages of the last checkpoint.
    pub(crate) fn wear_pages(&self) -> &[u64] {
        &self.wear_pages
    }

    /// Bad-block-table pages of the last checkpoint.
    pub(crate) fn bbt_pages(&self) -> &[u64] {
        &self.bbt_pages
    }

    /// GBITV pages of the last checkpoint.
    pub(crate) fn gbitv_pages(&self) -> &[u64] {
        &self.gbitv_pages
    }

    /// The ring's invariant: each half writes to a block of its own half.
    #[inline]
    fn check(&self) {
        debug_assert!(
            self.ring.is_empty()
                || (0..2).all(|h| ring_half(self.ring.len(), h).contains(&self.active[h])),
            "checkpoint ring: active blocks {:?} outside their halves of {} blocks",
            self.active,
            self.ring.len()
        );
    }
}

impl Ftl {
    /// Take a fuzzy incremental checkpoint (batch-io §6); see the module documentation.
    pub fn checkpoint(&mut self, at: SimTime) -> Result<SimTime, FtlError> {
        self.checkpoint_with(at, 0)
    }

    /// A checkpoint whose record carries `flags` (`CKPT_CLEAN` for a clean shutdown).
    pub(crate) fn checkpoint_with(&mut self, at: SimTime, flags: u32) -> Result<SimTime, FtlError> {
        self.checkpoint_tables(at, flags).map(|(t, _)| t)
    }

    /// [`Ftl::checkpoint_with`], also saying whether a block went bad after the
    /// bad-block table was built (a failed program of the table's own pages, a failed
    /// erase in the ring or the reclaim): the table on flash then misses it until the
    /// next checkpoint.
    fn checkpoint_tables(&mut self, at: SimTime, flags: u32) -> Result<(SimTime, bool), FtlError> {
        if self.health.opened_read_only() {
            return Err(FtlError::ReadOnly {
                reason: ReadOnlyReason::Opened,
            });
        }
        if let Some(why) = &self.ckpt.blocked {
            return Err(FtlError::NotCheckpointed { why: why.clone() });
        }
        // Top up the free pool first (only possible while nothing is buffered; otherwise
        // the low-water mark already covers one commit plus the metadata pages). A
        // read-only device moves no data: its checkpoint goes to the checkpoint reserve.
        if !self.map.recovering() && self.health.read_only().is_none() {
            self.ensure_free(0, at)?;
        }
        let mut t = self.commit_inner(false, at)?;
        t = t.max(self.force_log(t)?);
        let rssp_lsn = self.log.next_lsn();
        let rssp_links = self.log_candidates()?;
        t = t.max(self.write_dirty_map_pages(t)?);
        t = t.max(self.write_dirty_maps_pages(t)?);
        t = t.max(self.write_dirty_gbitv(t)?);
        // WEAR and the bad-block table come last: what the reclaim after the record will
        // erase is known now, and WEAR counts those erases, so that the erase counts a
        // clean open finds are the ones at the close (Percentage Used does not step back).
        let reclaimed = self.to_reclaim(rssp_lsn);
        let (new_wear, tt) = self.write_wear(&reclaimed, t)?;
        t = t.max(tt);
        // Counted before the table is built: a program of the table's own pages that
        // fails retires its block after the table was built, which the table then misses.
        let bad_in_table = self.counters.window().grown_bad_blocks;
        let (new_bbt, tt) = self.write_bbt(t)?;
        t = t.max(tt);
        // Every other metadata page of this checkpoint is on flash: the open blocks are
        // now those the record will find.
        let open = self.open_list();
        let mut flags = flags;
        match self.health.read_only() {
            Some(ReadOnlyReason::SpareExhausted) => flags |= CKPT_SPARE_EXHAUSTED,
            Some(ReadOnlyReason::WornOut) => flags |= CKPT_WORN_OUT,
            _ => {}
        }
        let record = Checkpoint {
            seq: self.ckpt.seq + 1,
            rssp_lsn,
            rssp_addr: rssp_links[0],
            next_commit: self.commit.next_seq(),
            lbas: self.geo.lbas(),
            ext_bytes: self.cfg.ext_bytes,
            rr: self.prov.round_robin(),
            mapt: self.ckpt.maps_pages.clone(),
            wear: new_wear.clone(),
            bbt: new_bbt.clone(),
            gbitv: self.ckpt.gbitv_pages.clone(),
            open,
            flags,
            reserve_blocks: self.prov.reserve_blocks(),
            initial_spare: self.prov.initial_spare(),
            // This checkpoint's own record program and reclaim erases count after it.
            lifetime: self
                .lifetime_stats()
                .plus(&FtlStats {
                    checkpoints: 1,
                    ..FtlStats::default()
                })
                .to_words(),
            last_recovery_ns: self.recovery.get().map_or([0, 0], |r| {
                [(r.modeled_s * 1e9) as u64, (r.wall_s * 1e9) as u64]
            }),
            ext_pending: self.ctrl.pending().collect(),
            blob: self.ctrl.blob().to_vec(),
        };
        // The body reaches the host's disk before the record that names it, and the
        // record before anything relies on it (a host crash never finds a record whose
        // pages are missing).
        self.nand.persist()?;
        t = t.max(self.write_ring(&record, rssp_links, t)?);
        self.nand.persist()?;
        // The new tables are durable: the old WEAR and bad-block pages are dead.
        for a in std::mem::replace(&mut self.ckpt.wear_pages, new_wear) {
            self.release_meta_page(a);
        }
        for a in std::mem::replace(&mut self.ckpt.bbt_pages, new_bbt) {
            self.release_meta_page(a);
        }
        self.ckpt.seq = record.seq;
        self.log.checkpointed();
        self.ckpt.last_at = t;
        self.counters.add(Count::Checkpoints, 1);
        // Reclaim: log blocks wholly before the RSSP, metadata blocks with nothing live.
        let cur_log = self.log.current_blocks();
        for b in 0..self.blocks.len() as u32 {
            let blk = self.blocks[b as usize];
            let dead_log = blk.state == Use::Log && blk.max_lsn < rssp_lsn && !cur_log.contains(&b);
            let dead_meta = blk.state == Use::Meta && blk.meta_live == 0;
            if dead_log || dead_meta {
                self.blocks.clear_valid_count(b);
                self.erase_block(b, t)?;
            }
        }
        Ok((t, self.counters.window().grown_bad_blocks != bad_in_table))
    }

    fn write_dirty_map_pages(&mut self, at: SimTime) -> Result<SimTime, FtlError> {
        let mut t = at;
        for s in 0..self.map.slots().len() {
            if self.map.slots()[s].dirty {
                t = t.max(self.write_map_page(s, at)?);
            }
        }
        Ok(t)
    }

    fn write_dirty_maps_pages(&mut self, at: SimTime) -> Result<SimTime, FtlError> {
        let mut t = at;
        let per = self.geo.page_size() / 8;
        for mi in 0..self.map.maps_page_count() {
            if !self.map.maps_page_dirty(mi) && self.ckpt.maps_pages[mi] != NONE {
                continue;
            }
            let mut page = vec![0xFFu8; self.geo.page_size()];
            for (k, a) in self
                .map
                .page_addrs()
                .iter()
                .skip(mi * per)
                .take(per)
                .enumerate()
            {
                page[k * 8..k * 8 + 8].copy_from_slice(&a.to_le_bytes());
            }
            let (addr, tt) = self.write_meta_page(Kind::Maps, mi as u64, &page, at)?;
            t = t.max(tt);
            let old = std::mem::replace(&mut self.ckpt.maps_pages[mi], addr);
            self.release_meta_page(old);
            self.map.maps_page_written(mi);
        }
        Ok(t)
    }

    /// The blocks the reclaim at the end of a checkpoint with redo start `rssp_lsn` will
    /// erase, once the WEAR and bad-block pages of the last checkpoint are released: log
    /// blocks wholly before the RSSP, and metadata blocks whose only live pages are those.
    fn to_reclaim(&self, rssp_lsn: u64) -> Vec<bool> {
        let mut old_tables = vec![0u32; self.blocks.len()];
        for &a in self.ckpt.wear_pages.iter().chain(&self.ckpt.bbt_pages) {
            if a != NONE
                && let Some(n) = old_tables.get_mut(page_unaddr(a).0 as usize)
            {
                *n += 1;
            }
        }
        let cur_log = self.log.current_blocks();
        self.blocks
            .iter()
            .enumerate()
            .map(|(b, blk)| {
                let dead_log = blk.state == Use::Log
                    && blk.max_lsn < rssp_lsn
                    && !cur_log.contains(&(b as u32));
                dead_log || (blk.state == Use::Meta && blk.meta_live <= old_tables[b])
            })
            .collect()
    }

    /// WEAR, whole (it is small: 4 bytes a block), counting the erase of each block
    /// `reclaimed` marks.
    fn write_wear(
        &mut self,
        reclaimed: &[bool],
        at: SimTime,
    ) -> Result<(Vec<u64>, SimTime), FtlError> {
        debug_assert_eq!(reclaimed.len(), self.blocks.len());
        let mut t = at;
        let mut wear_bytes = Vec::with_capacity(self.blocks.len() * 4);
        for (blk, &r) in self.blocks.iter().zip(reclaimed) {
            wear_bytes.extend_from_slice(&(blk.pe + u32::from(r)).to_le_bytes());
        }
        let mut pages = Vec::new();
        for (i, chunk) in wear_bytes.chunks(self.geo.page_size()).enumerate() {
            let mut page = vec![0u8; self.geo.page_size()];
            page[..chunk.len()].copy_from_slice(chunk);
            let (addr, tt) = self.write_meta_page(Kind::Wear, i as u64, &page, at)?;
            t = t.max(tt);
            pages.push(addr);
        }
        Ok((pages, t))
    }

    /// The GBITV pages changed since the last checkpoint (a page of zeros is recorded as
    /// `NONE` and not written).
    fn write_dirty_gbitv(&mut self, at: SimTime) -> Result<SimTime, FtlError> {
        let mut t = at;
        let words = self.geo.page_size() / 8;
        for i in 0..self.ckpt.gbitv_pages.len() {
            if !self.blocks.gbitv_page_dirty(i) {
                continue;
            }
            let gbitv = self.blocks.gbitv();
            let lo = (i * words).min(gbitv.len());
            let hi = ((i + 1) * words).min(gbitv.len());
            let chunk = &gbitv[lo..hi];
            let new = if chunk.iter().all(|&w| w == 0) {
                NONE
            } else {
                let mut page = vec![0u8; self.geo.page_size()];
                for (k, w) in chunk.iter().enumerate() {
                    page[k * 8..k * 8 + 8].copy_from_slice(&w.to_le_bytes());
                }
                let (addr, tt) = self.write_meta_page(Kind::Gbitv, i as u64, &page, at)?;
                t = t.max(tt);
                addr
            };
            let old = std::mem::replace(&mut self.ckpt.gbitv_pages[i], new);
            self.release_meta_page(old);
            self.blocks.gbitv_page_written(i);
        }
        Ok(t)
    }

    /// The bad-block table, whole: a bit per block.
    fn write_bbt(&mut self, at: SimTime) -> Result<(Vec<u64>, SimTime), FtlError> {
        let mut t = at;
        let mut bits = vec![0u8; self.blocks.len().div_ceil(8)];
        for (b, blk) in self.blocks.iter().enumerate() {
            if blk.state == Use::Bad {
                bits[b / 8] |= 1 << (b % 8);
            }
        }
        let mut pages = Vec::new();
        for (i, chunk) in bits.chunks(self.geo.page_size()).enumerate() {
            let mut page = vec![0u8; self.geo.page_size()];
            page[..chunk.len()].copy_from_slice(chunk);
            let (addr, tt) = self.write_meta_page(Kind::Bbt, i as u64, &page, at)?;
            t = t.max(tt);
            pages.push(addr);
        }
        Ok((pages, t))
    }

    /// The open blocks of the three streams.
    fn open_list(&self) -> Vec<u64> {
        let mut v = Vec::new();
        for s in Stream::ALL {
            for (die, open) in self.prov.open(s).iter().enumerate() {
                if let Some((bi, page)) = *open {
                    v.push(pack_open(
                        s.index() as u8,
                        die as u32 * self.geo.blocks_per_die() + bi,
                        page,
                    ));
                }
            }
        }
        v
    }

    /// Write the record to both halves of the ring (a copy each, so that losing any one
    /// block of the well-known location never loses the newest record). The log is
    /// reclaimed only after both copies are written, so when a crash leaves one copy,
    /// the record before it is still complete with its log. A half without a good block
    /// left is skipped while the other works.
    fn write_ring(
        &mut self,
        record: &Checkpoint,
        rssp_links: [u64; LOG_LINKS],
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        let mut done = Vec::new();
        let mut last_err = None;
        for half in 0..2 {
            match self.write_ring_copy(half, record, rssp_links, at) {
                Ok(t) => done.push(t),
                Err(FtlError::Nand(NandError::PowerLoss)) => {
                    return Err(NandError::PowerLoss.into());
                }
                Err(e) => last_err = Some(e),
            }
        }
        match (SimTime::latest(done.iter().copied()), last_err) {
            (Some(t), _) => Ok(t),
            (None, Some(e)) => Err(e),
            (None, None) => Err(FtlError::Corrupt("no checkpoint copy written".into())),
        }
    }

    /// Write one copy of the record — its body pages, synced, then its head — into the
    /// current block of ring half `half` (moving to the half's next good block, erased first,
    /// when they do not fit).
    fn write_ring_copy(
        &mut self,
        half: usize,
        record: &Checkpoint,
        rssp_links: [u64; LOG_LINKS],
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        let body = record.body();
        let body_pages = body.len().div_ceil(self.geo.page_size()).max(1);
        let need = body_pages as u32 + 1;
        if need > self.geo.pages_per_block() {
            return Err(FtlError::Config(format!(
                "a checkpoint body of {} bytes does not fit one block of the checkpoint ring",
                body.len()
            )));
        }
        'attempt: for _ in 0..4 * CKPT_RING {
            let b = self.ckpt.ring[self.ckpt.active[half]];
            let next_page = self.nand.block_info(BlockId(b))?.next_page;
            if next_page + need > self.geo.pages_per_block()
                || self.blocks[b as usize].state == Use::Bad
            {
                self.next_ring_block(half, at)?;
                continue;
            }
            let mut t = at;
            let mut addrs = Vec::with_capacity(body_pages);
            let mut page = vec![0u8; self.geo.page_size()];
            for i in 0..body_pages {
                page.fill(0);
                let chunk = &body[(i * self.geo.page_size()).min(body.len())
                    ..((i + 1) * self.geo.page_size()).min(body.len())];
                page[..chunk.len()].copy_from_slice(chunk);
                let p = next_page + i as u32;
                match self.program_ring_page(
                    b,
                    p,
                    &page,
                    Kind::CkptBody,
                    record.seq,
                    record.seq,
                    at,
                ) {
                    Ok(done) => t = t.max(done),
                    // The rest of this block is unreliable for this record: start over
                    // in the next ring block.
                    Err(NandError::ProgramFailed { .. }) => {
                        self.next_ring_block(half, at)?;
                        continue 'attempt;
                    }
                    Err(e) => return Err(e.into()),
                }
                addrs.push(page_addr(b, p));
            }
            // The body reaches the host's disk before the head that names it: a host
            // crash may keep any mix of the pages changed since the last sync, and a head
            // kept with a body page lost would read as damage after the fact, which
            // recovery refuses (a lost head only leaves the record before it).
            self.nand.persist()?;
            record.encode_head(&body, &addrs, &mut page)?;
            // The candidate links of the RSSP go after the record so recovery can skip a
            // failed page.
            let tail = page.len() - 8 * LOG_LINKS;
            for (i, l) in rssp_links.iter().enumerate() {
                page[tail + 8 * i..tail + 8 * i + 8].copy_from_slice(&l.to_le_bytes());
            }
            let p = next_page + body_pages as u32;
            match self.program_ring_page(b, p, &page, Kind::Ckpt, record.seq, record.seq, at) {
                Ok(done) => return Ok(t.max(done)),
                Err(NandError::ProgramFailed { .. }) => {
                    self.next_ring_block(half, at)?;
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(FtlError::Corrupt(
            "cannot write the checkpoint record: every block of the checkpoint ring failed".into(),
        ))
    }

    #[allow(clippy::too_many_arguments)]
    fn program_ring_page(
        &mut self,
        b: u32,
        p: u32,
        page: &[u8],
        kind: Kind,
        id: u64,
        seq: u64,
        at: SimTime,
    ) -> Result<SimTime, NandError> {
        let ids = vec![id; self.geo.sectors_per_page() as usize];
        let mut oob = self.scratch.take_oob();
        tags_for(
            &mut oob,
            (self.geo.oob_per_sector(), self.geo.sector_size()),
            page,
            kind,
            &ids,
            seq,
            None,
        );
        let r = self.nand.program(Ppa::new(BlockId(b), p), page, &oob, at);
        self.scratch.put_oob(oob);
        self.counters.add(Count::MetaPrograms, 1);
        if matches!(r, Err(NandError::ProgramFailed { .. })) {
            self.counters.add(Count::ProgramFailures, 1);
        }
        r
    }

    /// Move ring half `half` to its next good block, erased first (the newest record
    /// stays where it is until a newer one is written); a block whose erase fails is
    /// skipped for good.
    fn next_ring_block(&mut self, half: usize, at: SimTime) -> Result<(), FtlError> {
        let range = ring_half(self.ckpt.ring.len(), half);
        let n = range.len();
        loop {
            let cur = self.ckpt.active[half] - range.start;
            let next = (1..n)
                .map(|k| range.start + (cur + k) % n)
                .find(|&i| self.blocks[self.ckpt.ring[i] as usize].state != Use::Bad);
            let Some(next) = next else {
                return Err(FtlError::Corrupt(
                    "cannot write the checkpoint record: no good block left in the checkpoint ring"
                        .into(),
                ));
            };
            let nb = self.ckpt.ring[next];
            self.counters.add(Count::MetaErases, 1);
            match self.nand.erase(BlockId(nb), at) {
                Ok(_) => {
                    self.blocks.ring_block_erased(nb);
                    self.ckpt.active[half] = next;
                    self.ckpt.check();
                    return Ok(());
                }
                Err(NandError::EraseFailed { .. }) => {
                    self.counters.add(Count::EraseFailures, 1);
                    self.counters.add(Count::GrownBadBlocks, 1);
                    self.blocks.set_state(nb, Use::Bad);
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Clean shutdown: commit buffered writes, write a checkpoint marked clean (the next
    /// open replays nothing), return the flash array. See [`Ftl::close`].
    pub fn shutdown(mut self, at: SimTime) -> Result<csd_nand::Nand, FtlError> {
        self.close(at)?;
        Ok(self.nand)
    }

    /// Clean shutdown in place: commit buffered writes and write a checkpoint marked
    /// clean, so the next open replays nothing and finds every counter.
    ///
    /// A device that turned read-only at the end of its life still writes it (into the
    /// checkpoint reserve, see [`crate::provision`]); when even that cannot be written
    /// the error says so ([`FtlError::NotCheckpointed`]) and the device is not clean:
    /// the next open replays the log. Only a device whose image was opened read-only
    /// writes nothing (nothing it holds changed).
    pub fn close(&mut self, at: SimTime) -> Result<SimTime, FtlError> {
        if self.health.opened_read_only() {
            return Ok(at);
        }
        let not_checkpointed = |e: FtlError| match e {
            FtlError::Nand(NandError::PowerLoss) | FtlError::NotCheckpointed { .. } => e,
            e => FtlError::NotCheckpointed { why: e.to_string() },
        };
        let mut t = self.flush(at).map_err(not_checkpointed)?;
        // A block that went bad after the bad-block table was built (a failed program of
        // the table's pages, a failed erase in the ring or the reclaim) is recorded by one
        // more checkpoint, so that the next open knows it (and reports the same
        // spare).
        for _ in 0..4 {
            let (done, stale) = self
                .checkpoint_tables(t, CKPT_CLEAN)
                .map_err(not_checkpointed)?;
            t = done;
            if !stale {
                break;
            }
        }
        Ok(t)
    }
}

#[cfg(test)]
impl Ftl {
    /// Tests: program, at the next page of ring half 0's block, a page tagged as the head
    /// of record `seq + ahead` whose bytes are zero (a head whose TAG reached the host's
    /// disk and whose data did not).
    pub(crate) fn program_undecodable_ring_head(
        &mut self,
        ahead: u64,
        at: SimTime,
    ) -> Result<(), FtlError> {
        let b = self.ckpt.ring[self.ckpt.active[0]];
        let p = self.nand.block_info(BlockId(b))?.next_page;
        let zeros = vec![0u8; self.geo.page_size()];
        let id = self.ckpt.seq + ahead;
        self.program_ring_page(b, p, &zeros, Kind::Ckpt, id, id, at)?;
        Ok(())
    }
}
