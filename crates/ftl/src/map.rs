//! The MAP cache and GBITV (batch-io §3.2.2, §5.1).
//!
//! The page-level MAP lives in MAP pages on flash (their addresses are MAPS, whose page
//! addresses MAPT are in the checkpoint record); a bounded cache of MAP pages in
//! controller DRAM (`map_cache_share`) evicts with CLOCK and writes dirty pages back to
//! the META stream. A MAP page is read (and all its sectors' TAGs and CRCs checked)
//! before a cache slot is taken for it, so a page that cannot be read never leaves a
//! slot of unmapped entries in its place. When metadata may not be written (during
//! recovery, or read-only) eviction takes clean pages only and the cache may grow.
//! GBITV itself (a valid bit per sector with per-block counts and a dirty bit per GBITV
//! page) is kept by [`crate::blocks`]; this module marks the sectors MAP entries name.

use crate::FtlError;
use crate::format::{Kind, NONE, Record, TAG_BYTES, Tag, page_addr, page_unaddr, unpack};
use crate::ftl::*;
use crate::provision::Stream;
use crate::stats::Count;
use csd_nand::{BlockId, NandError, Ppa};
use csd_sim::SimTime;

/// One cached MAP page.
pub(crate) struct MapSlot {
    /// The MAP page it holds.
    pub(crate) page: u32,
    /// Its MAP entries (see [`Loc`]).
    pub(crate) entries: Vec<u64>,
    /// The entries' extension bytes.
    pub(crate) ext: Vec<u8>,
    /// Changed since it was last written to flash.
    pub(crate) dirty: bool,
    /// CLOCK's reference bit.
    pub(crate) referenced: bool,
}

/// The MAP: where each MAP page is on flash (MAPS), which MAPS pages changed since the
/// last checkpoint, and the bounded cache of MAP pages with its CLOCK hand. Only this
/// module changes it.
pub(crate) struct MapCache {
    /// MAPS: flash page address of each MAP page (`NONE` if never written).
    pages: Vec<u64>,
    /// Which MAPS pages changed since the last checkpoint.
    maps_dirty: Vec<bool>,
    /// Cache slot of each MAP page (`u32::MAX` when not cached).
    slot_of: Vec<u32>,
    /// The cached MAP pages.
    slots: Vec<MapSlot>,
    /// Bumped by every MAP entry change (see [`Ftl::content_epoch`]).
    epoch: u64,
    /// MAP pages the cache holds at most (outside recovery and read-only operation).
    capacity: usize,
    /// The CLOCK hand.
    hand: usize,
    /// During recovery the cache evicts clean pages only (no flash writes before the
    /// block classes are known); it may exceed its bound until the closing checkpoint.
    recovering: bool,
}

impl MapCache {
    /// `map_pages` MAP pages in `maps_pages` MAPS pages, none written, a cache of
    /// `capacity` pages.
    pub(crate) fn new(map_pages: usize, maps_pages: usize, capacity: usize) -> MapCache {
        MapCache {
            pages: vec![NONE; map_pages],
            maps_dirty: vec![false; maps_pages],
            slot_of: vec![u32::MAX; map_pages],
            slots: Vec::with_capacity(capacity),
            epoch: 0,
            capacity,
            hand: 0,
            recovering: false,
        }
    }

    /// Bumped by every MAP entry change.
    #[inline]
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// MAP pages the cache holds at most.
    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// MAPS: the flash address of each MAP page.
    #[inline]
    pub(crate) fn page_addrs(&self) -> &[u64] {
        &self.pages
    }

    /// Is MAP page `mp` in the cache?
    #[inline]
    pub(crate) fn is_cached(&self, mp: u32) -> bool {
        self.slot_of[mp as usize] != u32::MAX
    }

    /// The cached MAP pages.
    #[inline]
    pub(crate) fn slots(&self) -> &[MapSlot] {
        &self.slots
    }

    /// MAPS pages (each holding the addresses of `page_size / 8` MAP pages).
    pub(crate) fn maps_page_count(&self) -> usize {
        self.maps_dirty.len()
    }

    /// Did MAPS page `mi` change since the last checkpoint?
    pub(crate) fn maps_page_dirty(&self, mi: usize) -> bool {
        self.maps_dirty[mi]
    }

    /// MAPS pages changed since the last checkpoint.
    pub(crate) fn dirty_maps_pages(&self) -> usize {
        self.maps_dirty.iter().filter(|&&d| d).count()
    }

    /// MAPS page `mi` was written by a checkpoint.
    pub(crate) fn maps_page_written(&mut self, mi: usize) {
        self.maps_dirty[mi] = false;
    }

    /// The checkpoint's MAPS page says MAP page `mp` is at `addr` (recovery); ignored
    /// beyond the MAP.
    pub(crate) fn restore_page_addr(&mut self, mp: usize, addr: u64) {
        if let Some(e) = self.pages.get_mut(mp) {
            *e = addr;
        }
    }

    /// Is recovery running (the cache evicts clean pages only)?
    #[inline]
    pub(crate) fn recovering(&self) -> bool {
        self.recovering
    }

    /// Recovery starts or ends.
    pub(crate) fn set_recovering(&mut self, on: bool) {
        self.recovering = on;
    }

    /// The cache's invariant for slot `s`: the page it holds names it back.
    #[inline]
    fn check_slot(&self, s: usize) {
        debug_assert_eq!(
            self.slot_of[self.slots[s].page as usize], s as u32,
            "MAP cache: slot {s} holds MAP page {} whose slot is recorded as {}",
            self.slots[s].page, self.slot_of[self.slots[s].page as usize]
        );
    }
}

impl Ftl {
    #[inline]
    pub(crate) fn gidx(&self, block: u32, page: u32, sector: u32) -> usize {
        ((block as usize * self.geo.pages_per_block() as usize + page as usize)
            * self.geo.sectors_per_page() as usize)
            + sector as usize
    }

    /// Mark the sector a MAP entry names valid or not (entries that name no flash sector
    /// are ignored), keeping the block's valid count and the GBITV page's dirty bit. When
    /// the last valid sector of a page goes, the page's data will not be read again
    /// before its block's erase: the NAND layer is told ([`csd_nand::Nand::page_stale`],
    /// a hint that changes no state, counter or modeled time; an image drops the page
    /// from the host's page cache).
    #[inline]
    pub(crate) fn set_valid(&mut self, e: u64, on: bool) {
        let Some(a) = flash_of(e) else {
            return;
        };
        let (b, p, s) = unpack(a);
        let i = self.gidx(b, p, s);
        if self.blocks.set_valid_bit(b, i, on) && !on {
            let spp = self.geo.sectors_per_page() as usize;
            if self.blocks.none_valid(i - s as usize, spp) {
                self.nand.page_stale(Ppa::new(BlockId(b), p));
            }
        }
    }

    /// May the FTL write metadata now? Not while recovering (block classes unknown) nor
    /// when read-only; the MAP cache then evicts clean pages only and may grow.
    #[inline]
    pub(crate) fn may_write_meta(&self) -> bool {
        !self.map.recovering && self.health.read_only().is_none()
    }

    #[inline]
    pub(crate) fn is_valid(&self, block: u32, page: u32, sector: u32) -> bool {
        let i = self.gidx(block, page, sector);
        self.blocks.valid_bit(i)
    }

    /// The cache slot holding MAP page `mp`, loading it (and evicting) as needed.
    pub(crate) fn map_slot(&mut self, mp: u32, at: SimTime) -> Result<(usize, SimTime), FtlError> {
        let s = self.map.slot_of[mp as usize];
        if s != u32::MAX {
            self.counters.add(Count::MapHits, 1);
            self.map.slots[s as usize].referenced = true;
            return Ok((s as usize, at));
        }
        self.counters.add(Count::MapMisses, 1);
        let mut t = at;
        let epp = self.geo.map_entries_per_page() as usize;
        let ext = self.cfg.ext_bytes as usize;
        // Read the page before taking a slot for it: a page that cannot be read leaves
        // the cache as it was (never a slot of unmapped entries standing in for it).
        let addr = self.map.pages[mp as usize];
        let mut page = Vec::new();
        if addr != NONE {
            page = vec![0u8; self.geo.page_size()];
            t = t.max(self.read_meta_page(addr, Kind::Map, mp as u64, &mut page, at)?);
        }
        let no_writes = !self.may_write_meta();
        let all_dirty = no_writes && self.map.slots.iter().all(|s| s.dirty);
        let idx = if self.map.slots.len() < self.map.capacity || all_dirty {
            self.map.slots.push(MapSlot {
                page: mp,
                entries: vec![NONE; epp],
                ext: vec![0u8; epp * ext],
                dirty: false,
                referenced: true,
            });
            self.map.slots.len() - 1
        } else {
            // CLOCK: skip referenced slots once.
            loop {
                let h = self.map.hand;
                self.map.hand = (self.map.hand + 1) % self.map.slots.len();
                if self.map.slots[h].referenced {
                    self.map.slots[h].referenced = false;
                } else if !(no_writes && self.map.slots[h].dirty) {
                    break;
                }
            }
            let victim = (self.map.hand + self.map.slots.len() - 1) % self.map.slots.len();
            if self.map.slots[victim].dirty {
                match self.write_map_page(victim, at) {
                    Ok(done) => t = t.max(done),
                    Err(e) => {
                        // No room for the MAP page: the device turns read-only and the
                        // cache keeps its dirty pages (they are redone from the log).
                        let reason = self.end_of_life(&e).ok_or(e)?;
                        self.enter_read_only(reason);
                        self.map.slot_of[mp as usize] = u32::MAX;
                        self.counters.undo(Count::MapMisses);
                        return self.map_slot(mp, at);
                    }
                }
            }
            let old = self.map.slots[victim].page;
            self.map.slot_of[old as usize] = u32::MAX;
            self.map.slots[victim].page = mp;
            self.map.slots[victim].dirty = false;
            self.map.slots[victim].referenced = true;
            victim
        };
        self.map.slot_of[mp as usize] = idx as u32;
        self.map.check_slot(idx);
        if addr == NONE {
            self.map.slots[idx].entries.fill(NONE);
            self.map.slots[idx].ext.fill(0);
        } else {
            let slot = &mut self.map.slots[idx];
            for (i, e) in slot.entries.iter_mut().enumerate() {
                *e = u64::from_le_bytes(page[i * 8..i * 8 + 8].try_into().unwrap_or([0xFF; 8]));
            }
            slot.ext
                .copy_from_slice(&page[epp * 8..epp * 8 + epp * ext]);
        }
        Ok((idx, t))
    }

    /// Drop clean slots until the cache is within its bound again (after recovery).
    pub(crate) fn shrink_cache(&mut self) {
        let mut i = 0;
        while self.map.slots.len() > self.map.capacity && i < self.map.slots.len() {
            if self.map.slots[i].dirty {
                i += 1;
                continue;
            }
            let page = self.map.slots[i].page;
            self.map.slot_of[page as usize] = u32::MAX;
            self.map.slots.swap_remove(i);
            if i < self.map.slots.len() {
                let moved = self.map.slots[i].page;
                self.map.slot_of[moved as usize] = i as u32;
            }
        }
        self.map.hand = 0;
    }

    pub(crate) fn write_map_page(&mut self, slot: usize, at: SimTime) -> Result<SimTime, FtlError> {
        let mut page = vec![0u8; self.geo.page_size()];
        let epp = self.geo.map_entries_per_page() as usize;
        let s = &self.map.slots[slot];
        for (i, e) in s.entries.iter().enumerate() {
            page[i * 8..i * 8 + 8].copy_from_slice(&e.to_le_bytes());
        }
        page[epp * 8..epp * 8 + s.ext.len()].copy_from_slice(&s.ext);
        let mp = s.page;
        let (addr, t) = self.write_meta_page(Kind::Map, mp as u64, &page, at)?;
        let old = std::mem::replace(&mut self.map.pages[mp as usize], addr);
        self.release_meta_page(old);
        self.map.maps_dirty[mp as usize / (self.geo.page_size() / 8)] = true;
        self.map.slots[slot].dirty = false;
        Ok(t)
    }

    /// First stage of a cache hint for a read of `lpid` the caller will issue soon: bring
    /// its MAP entry into the CPU caches if its MAP page is cached. No state, counter or
    /// modeled time changes (see [`Ftl::prefetch_flash`] for the second stage).
    #[inline]
    pub fn prefetch_map(&self, lpid: u64) {
        if let Some(e) = self.cached_entry(lpid) {
            csd_nand::prefetch_value(e);
        }
    }

    /// Second stage of the cache hint, a little before the read itself: if `lpid`'s
    /// cached MAP entry names a flash address, hint the page's state, OOB bytes and
    /// checked marks, and its data when `data` (a read that copies it, [`Ftl::read`];
    /// [`Ftl::read_ref`] checks in place and touches the data only to hash a sector not
    /// yet checked) ([`csd_nand::Nand::prefetch`]). Issued one command ahead, the memory
    /// misses of the next read overlap the current one's work.
    #[inline]
    pub fn prefetch_flash(&self, lpid: u64, data: bool) {
        let Some(&entry) = self.cached_entry(lpid) else {
            return;
        };
        if let Loc::Flash(a) = Loc::of(entry) {
            let (b, p, s) = unpack(a);
            self.nand.prefetch(Ppa::new(BlockId(b), p), s, 1, data);
        }
    }

    /// The stored bytes of `bytes` bytes from `lpid` on, when they are one run of sectors
    /// of one flash page and every MAP entry is cached: what [`Ftl::read_ref`] would
    /// return in place. Nothing is read, checked, counted or charged: a cache hint's view
    /// (e.g. which lines of the next table page a scan will touch), never data to use.
    pub fn peek_in_place(&self, lpid: u64, bytes: usize) -> Option<&[u8]> {
        self.peek_page_in_place(lpid, bytes).map(|(data, _)| data)
    }

    /// [`Ftl::peek_in_place`] with the sectors' OOB bytes (their TAGs, which a read
    /// checks): the same cache hint's view, never data to use.
    pub fn peek_page_in_place(&self, lpid: u64, bytes: usize) -> Option<(&[u8], &[u8])> {
        self.peek_located(lpid, bytes)
            .map(|(_, data, oob)| (data, oob))
    }

    /// [`Ftl::peek_page_in_place`] with the flash address of its first sector (packed as
    /// the MAP stores it), for callers that go on to plan the read's checks.
    pub(crate) fn peek_located(&self, lpid: u64, bytes: usize) -> Option<(u64, &[u8], &[u8])> {
        let n = bytes.div_ceil(self.geo.sector_size().max(1)) as u64;
        let Loc::Flash(a) = Loc::of(*self.cached_entry(lpid)?) else {
            return None;
        };
        for k in 1..n {
            match Loc::of(*self.cached_entry(lpid + k)?) {
                Loc::Flash(b) if b == a + k => {}
                _ => return None,
            }
        }
        let (b, p, s) = unpack(a);
        let (data, oob) = self
            .nand
            .stored_sectors(Ppa::new(BlockId(b), p), s, n as u32)?;
        Some((a, data.get(..bytes)?, oob))
    }

    /// `lpid`'s MAP entry when its MAP page is cached.
    #[inline]
    pub(crate) fn cached_entry(&self, lpid: u64) -> Option<&u64> {
        if lpid >= self.geo.lbas() {
            return None;
        }
        let s = *self
            .map
            .slot_of
            .get((lpid / self.geo.map_entries_per_page()) as usize)?;
        let slot = self.map.slots.get(s as usize)?;
        slot.entries
            .get((lpid % self.geo.map_entries_per_page()) as usize)
    }

    pub(crate) fn map_get(&mut self, lpid: u64, at: SimTime) -> Result<(u64, SimTime), FtlError> {
        let (s, t) = self.map_slot((lpid / self.geo.map_entries_per_page()) as u32, at)?;
        Ok((
            self.map.slots[s].entries[(lpid % self.geo.map_entries_per_page()) as usize],
            t,
        ))
    }

    pub(crate) fn map_set(&mut self, lpid: u64, v: u64, at: SimTime) -> Result<SimTime, FtlError> {
        let (s, t) = self.map_slot((lpid / self.geo.map_entries_per_page()) as u32, at)?;
        let slot = &mut self.map.slots[s];
        slot.entries[(lpid % self.geo.map_entries_per_page()) as usize] = v;
        slot.dirty = true;
        self.map.epoch += 1;
        Ok(t)
    }

    /// The metadata extension bytes of `lpid` (zeros unless set).
    pub fn ext(&mut self, lpid: u64, at: SimTime) -> Result<(Vec<u8>, SimTime), FtlError> {
        self.check_range(lpid, 1)?;
        let ext = self.cfg.ext_bytes as usize;
        let (s, t) = self.map_slot((lpid / self.geo.map_entries_per_page()) as u32, at)?;
        let o = (lpid % self.geo.map_entries_per_page()) as usize * ext;
        Ok((self.map.slots[s].ext[o..o + ext].to_vec(), t))
    }

    /// Whether `bytes` may become the extension of `lpid`: an LPID of the device,
    /// exactly the configured extension size, and a device that takes writes.
    fn check_ext(&mut self, lpid: u64, bytes: &[u8]) -> Result<(), FtlError> {
        self.check_range(lpid, 1)?;
        let ext = self.cfg.ext_bytes as usize;
        if bytes.len() != ext {
            return Err(FtlError::Config(format!(
                "extension is {ext} bytes, got {}",
                bytes.len()
            )));
        }
        self.check_writable()
    }

    /// Set the metadata extension bytes of `lpid` (logged; durable at the next flush).
    pub fn set_ext(&mut self, lpid: u64, bytes: &[u8], at: SimTime) -> Result<SimTime, FtlError> {
        self.check_ext(lpid, bytes)?;
        let t = self.store_ext(lpid, bytes, at)?;
        self.ctrl.settle(lpid);
        self.log_append(Record::Ext {
            lpid,
            bytes: bytes.to_vec(),
        });
        Ok(t)
    }

    /// Put `bytes` into the MAP entry extension of `lpid` for the running device only:
    /// not logged, and its redo-log bit (FLIXR §4.6, [`Ftl::mark_ext_pending`]) left as
    /// it is. For an extension describing data still in a write-back buffer: the
    /// controller sees it at once, and logs it with [`Ftl::set_ext`] once the data is
    /// committed ([`Ftl::is_buffered`]); a crash before that finds the LPID pending (its
    /// mark was logged before the write) and the controller recomputes the extension
    /// from the data that survived. Returns when the MAP page is in the cache.
    pub fn set_ext_volatile(
        &mut self,
        lpid: u64,
        bytes: &[u8],
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        self.check_ext(lpid, bytes)?;
        debug_assert!(
            self.ctrl.is_pending(lpid),
            "a volatile extension only over a pending mark"
        );
        self.store_ext(lpid, bytes, at)
    }

    /// Whether the newest data of `lpid` is in a write-back page buffer, not yet
    /// committed to flash (its commit's records not yet in the log).
    pub fn is_buffered(&self, lpid: u64) -> bool {
        self.cached_entry(lpid)
            .is_some_and(|&e| matches!(Loc::of(e), Loc::Buffered { .. }))
    }

    /// Put `bytes` into the MAP entry extension of `lpid` (not logged: the caller logs
    /// it, or redoes a logged record). Returns when the MAP page is in the cache.
    pub(crate) fn store_ext(
        &mut self,
        lpid: u64,
        bytes: &[u8],
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        let ext = bytes.len();
        let (s, t) = self.map_slot((lpid / self.geo.map_entries_per_page()) as u32, at)?;
        let o = (lpid % self.geo.map_entries_per_page()) as usize * ext;
        self.map.slots[s].ext[o..o + ext].copy_from_slice(bytes);
        self.map.slots[s].dirty = true;
        Ok(t)
    }

    /// Zero the extension of `lpid` and drop its pending mark (trim; not logged: the
    /// caller's own record — Trim — says it).
    pub(crate) fn clear_ext(&mut self, lpid: u64, at: SimTime) -> Result<SimTime, FtlError> {
        let ext = self.cfg.ext_bytes as usize;
        let (s, t) = self.map_slot((lpid / self.geo.map_entries_per_page()) as u32, at)?;
        let o = (lpid % self.geo.map_entries_per_page()) as usize * ext;
        self.map.slots[s].ext[o..o + ext].fill(0);
        self.map.slots[s].dirty = true;
        self.ctrl.settle(lpid);
        Ok(t)
    }

    /// Clear the redo-log bit of FLIXR §4.6 for LPIDs `lpid..lpid+n`: their extensions are
    /// about to be recomputed (a write is on its way). The mark is logged (it reaches
    /// flash with, or before, the redo descriptor of the write that follows) and kept in
    /// checkpoints; [`Ftl::set_ext`] sets the bit again. After a crash the LPIDs still
    /// marked are listed by [`Ftl::ext_pending`], so that the controller recomputes their
    /// extensions from the data that survived.
    pub fn mark_ext_pending(
        &mut self,
        lpid: u64,
        n: u64,
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        self.check_range(lpid, n)?;
        if self.cfg.ext_bytes == 0 {
            return Err(FtlError::Config(
                "this device was formatted without MAP-entry extensions (ext_bytes = 0)".into(),
            ));
        }
        self.check_writable()?;
        self.ctrl.mark_pending(lpid..lpid + n);
        self.log_append(Record::ExtPending { lpid, n });
        Ok(at)
    }

    /// Is the extension of `lpid` pending (redo-log bit 0: not to be trusted)?
    pub fn is_ext_pending(&self, lpid: u64) -> bool {
        self.ctrl.is_pending(lpid)
    }

    /// Every LPID whose extension is pending, in order.
    pub fn ext_pending(&self) -> Vec<u64> {
        self.ctrl.pending().collect()
    }

    /// MAP entries per MAP page (the unit in which extensions are loaded and cached).
    pub fn map_entries_per_page(&self) -> u64 {
        self.geo.map_entries_per_page()
    }

    /// The extension bytes of every LPID of MAP page `mp` (LPIDs `mp * epp ..`), loading
    /// the MAP page into the MAP cache if needed (a MAP-page read on a miss); returns the
    /// bytes, `map_entries_per_page() * ext_bytes` of them, and when they are in DRAM.
    pub fn ext_page(&mut self, mp: u64, at: SimTime) -> Result<(Vec<u8>, SimTime), FtlError> {
        let pages = self.geo.lbas().div_ceil(self.geo.map_entries_per_page());
        if mp >= pages {
            let lba = mp.saturating_mul(self.geo.map_entries_per_page());
            return Err(FtlError::OutOfRange {
                lba,
                end: lba.saturating_add(1),
                capacity: self.geo.lbas(),
            });
        }
        let (s, t) = self.map_slot(mp as u32, at)?;
        Ok((self.map.slots[s].ext.clone(), t))
    }

    /// The controller's persistent metadata (empty until [`Ftl::set_blob`]).
    pub fn blob(&self) -> &[u8] {
        self.ctrl.blob()
    }

    /// Replace the controller's persistent metadata blob (logged; durable at the next
    /// log write, kept by checkpoints). At most a quarter of a flash page.
    pub fn set_blob(&mut self, bytes: &[u8]) -> Result<(), FtlError> {
        let max = self.geo.page_size() / 4;
        if bytes.len() > max {
            return Err(FtlError::Config(format!(
                "controller metadata of {} bytes exceeds the {max}-byte limit",
                bytes.len()
            )));
        }
        self.check_writable()?;
        self.ctrl.set_blob(bytes.to_vec());
        self.log_append(Record::Blob {
            bytes: bytes.to_vec(),
        });
        Ok(())
    }

    pub(crate) fn read_meta_page(
        &mut self,
        addr: u64,
        kind: Kind,
        id: u64,
        out: &mut [u8],
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        let (b, p) = page_unaddr(addr);
        let mut oob = vec![0u8; self.scratch.oob_len()];
        let r = crate::read::read_with_retries(
            &mut self.nand,
            Ppa::new(BlockId(b), p),
            0,
            out,
            &mut oob,
            at,
            self.cfg.read_retries * crate::read::META_RETRY_FACTOR,
            &mut self.counters,
        );
        self.counters.add(Count::MetaReads, 1);
        let r = match r {
            Ok(r) => r,
            Err(NandError::PowerLoss) => return Err(NandError::PowerLoss.into()),
            Err(e) => {
                return Err(FtlError::Corrupt(format!(
                    "{kind:?} page {id} at block {b} page {p}: {e}"
                )));
            }
        };
        // Every sector's TAG: the kind and id asked for, and the CRC of that sector.
        let ss = self.geo.sector_size();
        let ob = self.geo.oob_per_sector();
        let ok = (0..self.geo.sectors_per_page() as usize).all(|s| {
            matches!(Tag::read(&oob[s * ob..s * ob + TAG_BYTES]), Some(t) if t.kind == kind
                && t.id == id
                && t.crc == crate::format::sector_crc(&out[s * ss..(s + 1) * ss]))
        });
        if ok {
            Ok(r.done)
        } else {
            Err(FtlError::Corrupt(format!(
                "{kind:?} page {id} at block {b} page {p} does not match its checksums (damaged)"
            )))
        }
    }

    /// Write one metadata page to the META stream; returns its page address.
    pub(crate) fn write_meta_page(
        &mut self,
        kind: Kind,
        id: u64,
        data: &[u8],
        at: SimTime,
    ) -> Result<(u64, SimTime), FtlError> {
        let ids = vec![id; self.geo.sectors_per_page() as usize];
        let mut oob = self.scratch.take_oob();
        tags_for(
            &mut oob,
            (self.geo.oob_per_sector(), self.geo.sector_size()),
            data,
            kind,
            &ids,
            self.commit.next_seq(),
            None,
        );
        let r = self.program_stream(Stream::Meta, data, &oob, at);
        self.scratch.put_oob(oob);
        let (b, p, t) = r?;
        self.counters.add(Count::MetaPrograms, 1);
        self.blocks.meta_page_added(b);
        Ok((page_addr(b, p), t))
    }

    /// A metadata page is no longer referenced by the current state.
    pub(crate) fn release_meta_page(&mut self, addr: u64) {
        if addr == NONE {
            return;
        }
        let (b, _) = page_unaddr(addr);
        self.blocks.meta_page_released(b);
    }
}
