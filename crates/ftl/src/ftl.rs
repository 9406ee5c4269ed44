//! The FTL's state: the [`Ftl`] struct, construction (format) and accessors.
//!
//! `Ftl` wires parts that each own their state, with private fields changed only by
//! the module that defines them, through narrow methods that keep the part's invariants
//! (checked with `debug_assert!` where a change could break them):
//! [`crate::geo`] (fixed dimensions), [`crate::blocks`] (block states, GBITV, free
//! pool), [`crate::map`] (MAPS, MAP cache), [`crate::provision`] (streams, open blocks,
//! reserves), [`crate::write`] (the commit being assembled), [`crate::log`] (the
//! recovery log), [`crate::checkpoint`] (the checkpoint ring), [`crate::gc`],
//! [`crate::health`] (read-only state), [`crate::ctrl`] (the controller's persistent
//! state), [`crate::stats`] (counters), [`crate::scratch`] (buffers) and
//! [`crate::recovery`] (the last recovery's report). The work that spans parts is split
//! by concern over the same modules, each with its own `impl Ftl`.

use crate::blocks::BlockTable;
pub(crate) use crate::blocks::Use;
use crate::checkpoint::CkptState;
use crate::ctrl::CtrlMeta;
use crate::format::{Kind, LOG_LINKS, NONE, TAG_BYTES, Tag};
use crate::gc::GcState;
use crate::geo::Geo;
use crate::health::HealthState;
use crate::log::Log;
use crate::map::MapCache;
use crate::provision::Provision;
use crate::recovery::LastRecovery;
use crate::scratch::Scratch;
use crate::stats::Counters;
use crate::write::CommitState;
use crate::{FtlConfig, FtlError, FtlStats, RecoveryReport};
use csd_nand::{BlockId, Nand, NandError};
use csd_sim::SimTime;

/// Candidate blocks of the well-known checkpoint location: two halves of 4, each record
/// written to both.
pub(crate) const CKPT_RING: usize = 8;

/// Map entries with this bit point into a page buffer: `CACHED | buf << 8 | slot`.
const CACHED: u64 = 1 << 63;
/// The MAP entry of an LPID whose data GC could not read (it reads as an error).
const LOST: u64 = 1 << 62;

/// Where a MAP entry says an LPID's data is. MAP entries are `u64`s, in the cache and in
/// MAP pages on flash; this is their one encoding: `NONE` (unmapped), `LOST`, a flash
/// sector address ([`crate::format::pack`], below 2^56), or `CACHED | buf << 8 | slot`
/// for a sector still in a page buffer (controller DRAM only; never on flash once its
/// commit completes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Loc {
    /// Never written, or trimmed: reads as zeros.
    Unmapped,
    /// GC could not read it (uncorrectable): reads fail naming the LBA until rewritten.
    Lost,
    /// On flash at this sector address.
    Flash(u64),
    /// In page buffer `buf`, sector `slot`.
    Buffered {
        /// Index in the commit's page buffers.
        buf: usize,
        /// Sector within the page.
        slot: usize,
    },
}

impl Loc {
    /// Decode a MAP entry.
    #[inline]
    pub(crate) fn of(e: u64) -> Loc {
        if e == NONE {
            Loc::Unmapped
        } else if e & CACHED != 0 {
            Loc::Buffered {
                buf: ((e >> 8) & 0xFF_FFFF) as usize,
                slot: (e & 0xFF) as usize,
            }
        } else if e == LOST {
            Loc::Lost
        } else {
            Loc::Flash(e)
        }
    }

    /// Encode as a MAP entry.
    #[inline]
    pub(crate) fn entry(self) -> u64 {
        match self {
            Loc::Unmapped => NONE,
            Loc::Lost => LOST,
            Loc::Flash(a) => a,
            Loc::Buffered { buf, slot } => CACHED | ((buf as u64) << 8) | slot as u64,
        }
    }
}

/// The flash sector address a MAP entry names, if it names one.
#[inline]
pub(crate) fn flash_of(e: u64) -> Option<u64> {
    match Loc::of(e) {
        Loc::Flash(a) => Some(a),
        _ => None,
    }
}

/// Why the device accepts no more writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOnlyReason {
    /// The image was opened read-only (or the file is not writable).
    Opened,
    /// Grown bad blocks used up the spare blocks: no block can be allocated for writes.
    SpareExhausted,
    /// The file system holding the image file is full.
    ImageFull,
    /// An in-memory device reached its memory limit (see `csd_nand::Nand::memory_limit`).
    MemoryFull,
    /// No free block could be found or reclaimed (every block holds live data).
    OutOfSpace,
    /// The mean erase count of the blocks reached the rated endurance (NVMe "Percentage
    /// Used" 100): see [`crate::health`].
    WornOut,
}

impl std::fmt::Display for ReadOnlyReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReadOnlyReason::Opened => "opened read-only",
            ReadOnlyReason::SpareExhausted => "spare blocks exhausted",
            ReadOnlyReason::ImageFull => "image file system is full",
            ReadOnlyReason::MemoryFull => {
                "in-memory device reached its memory limit (CSD_MEMORY_LIMIT sets it; an image file keeps more)"
            }
            ReadOnlyReason::OutOfSpace => "no free block could be reclaimed",
            ReadOnlyReason::WornOut => "rated endurance reached (worn out)",
        })
    }
}

/// The FTL over one flash array.
pub struct Ftl {
    /// The flash array.
    pub(crate) nand: Nand,
    /// Parameters.
    pub(crate) cfg: FtlConfig,
    /// Fixed dimensions: geometry and logical capacity.
    pub(crate) geo: Geo,
    /// The block table: block states, GBITV and the free pool.
    pub(crate) blocks: BlockTable,
    /// The recovery log's cursor and pending records.
    pub(crate) log: Log,
    /// Read-only state and the wear-out clock.
    pub(crate) health: HealthState,
    /// GC and wear-leveling state.
    pub(crate) gc: GcState,
    /// The controller's persistent state: FLIXR §4.6's pending extension marks (see
    /// [`Ftl::mark_ext_pending`]) and its metadata blob; logged and checkpointed.
    pub(crate) ctrl: CtrlMeta,
    /// The checkpoint ring and the table pages of the last checkpoint.
    pub(crate) ckpt: CkptState,
    /// Page buffers of the commit being assembled, and the commit sequence.
    pub(crate) commit: CommitState,
    /// Provisioning: open blocks per stream and die, round robin, reserves.
    pub(crate) prov: Provision,
    /// The MAP: MAP page addresses (MAPS), the MAP cache and its CLOCK.
    pub(crate) map: MapCache,
    /// Reusable buffers.
    pub(crate) scratch: Scratch,
    /// The controller's page buffer of flash pages (a preset's `dram.page_buffer_kib`).
    pub(crate) pagebuf: crate::pagebuf::PageBuffer,
    /// Counters of the current measurement window and of the device's life.
    pub(crate) counters: Counters,
    /// The last recovery, if this FTL was recovered.
    pub(crate) recovery: LastRecovery,
}

/// CRC of an LPID's data and the TAG bytes for a page of sectors. `place` (block, page,
/// the block's P/E count) binds the CRCs of data sectors to where they are programmed
/// (see [`Tag::bound`]).
pub(crate) fn tags_for(
    oob: &mut [u8],
    (oob_sector, ss): (usize, usize),
    data: &[u8],
    kind: Kind,
    ids: &[u64],
    seq: u64,
    place: Option<(u32, u32, u32)>,
) {
    oob.fill(0xFF);
    for (k, id) in ids.iter().enumerate() {
        let (kind, id) = if *id == NONE {
            (Kind::Pad, 0)
        } else {
            (kind, *id)
        };
        let key = match place {
            Some((b, p, pe)) => crate::format::place_key(b, p, k as u32, pe),
            None => 0,
        };
        let crc = crate::format::sector_crc(&data[k * ss..(k + 1) * ss]) ^ key;
        Tag {
            kind,
            id,
            seq: seq as u32,
            crc,
            bound: place.is_some(),
        }
        .write(&mut oob[k * oob_sector..k * oob_sector + TAG_BYTES]);
    }
}

impl Ftl {
    pub(crate) fn skeleton(nand: Nand, cfg: FtlConfig, lbas: u64) -> Ftl {
        let g = *nand.geometry();
        let dies = g.dies();
        let bpd = g.blocks_per_die();
        let nblocks = (dies * bpd) as usize;
        let spp = g.sectors_per_page();
        let spb = (spp * g.pages_per_block) as u64;
        let page_size = g.page_size as usize;
        let epp = (page_size / (8 + cfg.ext_bytes as usize)) as u64;
        let n_map_pages = lbas.div_ceil(epp) as usize;
        let per_maps_page = page_size / 8;
        let n_maps_pages = n_map_pages.div_ceil(per_maps_page);
        let dram = nand.config().dram.size_mib as f64 * (1u64 << 20) as f64;
        let slot_cap =
            ((dram * cfg.map_cache_share) as usize / page_size).clamp(2, n_map_pages.max(2));
        let n_gbitv_pages = (nblocks as u64 * spb).div_ceil(8 * page_size as u64) as usize;
        let mut f = Ftl {
            geo: Geo::new(&g, lbas, cfg.ext_bytes),
            blocks: BlockTable::new(dies, bpd, spb as usize, page_size),
            log: Log::new(page_size, nand.config().ftl.log_chains(&g)),
            counters: Counters::default(),
            scratch: Scratch::new(g.oob_per_page() as usize),
            pagebuf: crate::pagebuf::PageBuffer::new(
                (nand.config().dram.page_buffer_kib << 10) as usize / page_size.max(1),
            ),
            map: MapCache::new(n_map_pages, n_maps_pages, slot_cap),
            prov: Provision::new(dies as usize),
            commit: CommitState::new(),
            ckpt: CkptState::new(n_maps_pages, n_gbitv_pages),
            ctrl: CtrlMeta::default(),
            gc: GcState::default(),
            health: HealthState::default(),
            recovery: LastRecovery::default(),
            nand,
            cfg,
        };
        let reserve = f.checkpoint_reserve();
        f.prov.set_meta_reserve(reserve);
        f
    }

    pub(crate) fn check_config(nand: &Nand, cfg: &FtlConfig) -> Result<(), FtlError> {
        let g = nand.geometry();
        if g.oob_per_sector < TAG_BYTES as u32 {
            return Err(FtlError::Config(format!(
                "the FTL keeps a {TAG_BYTES}-byte TAG per sector; this device has {} OOB bytes per sector",
                g.oob_per_sector
            )));
        }
        if !cfg.op.is_finite() || !(0.0..=10.0).contains(&cfg.op) {
            return Err(FtlError::Config(format!(
                "op {} must be between 0 and 10",
                cfg.op
            )));
        }
        if cfg.mdts_sectors == 0 {
            return Err(FtlError::Config("mdts_sectors must be at least 1".into()));
        }
        if cfg.ext_bytes > 24 {
            return Err(FtlError::Config(format!(
                "ext_bytes {} is above the maximum of 24",
                cfg.ext_bytes
            )));
        }
        if !(cfg.map_cache_share > 0.0 && cfg.map_cache_share <= 1.0) {
            return Err(FtlError::Config("map_cache_share must be in (0, 1]".into()));
        }
        if cfg.max_batch_pages == 0 || cfg.checkpoint_log_pages == 0 {
            return Err(FtlError::Config(
                "max_batch_pages and checkpoint_log_pages must be at least 1".into(),
            ));
        }
        if g.pages_per_block as usize <= LOG_LINKS {
            return Err(FtlError::Config(format!(
                "the log needs more than {LOG_LINKS} pages per block"
            )));
        }
        let table_pages = (g.total_blocks() as usize).div_ceil(g.page_size as usize);
        if table_pages + 1 > g.pages_per_block as usize {
            return Err(FtlError::Config(format!(
                "the checkpoint's block table ({table_pages} pages) and record must fit one block of {} pages",
                g.pages_per_block
            )));
        }
        if let Some(s) = cfg.gc_start_used
            && !(s > 0.0 && s <= 1.0)
        {
            return Err(FtlError::Config(format!(
                "gc_start_used {s} must be a share of the blocks in (0, 1]"
            )));
        }
        if cfg.spare_threshold_pct > 100 {
            return Err(FtlError::Config(format!(
                "spare_threshold_pct {} must be at most 100",
                cfg.spare_threshold_pct
            )));
        }
        Ok(())
    }

    /// The well-known checkpoint location: the first `CKPT_RING` blocks not marked bad at
    /// the factory. Records go to one of them at a time; when it is full the next one is
    /// erased and used (so the newest record always survives the erase), and a block whose
    /// erase fails is skipped for good.
    pub(crate) fn well_known_ckpt_blocks(nand: &Nand) -> Result<Vec<u32>, FtlError> {
        let mut found = Vec::with_capacity(CKPT_RING);
        for b in 0..nand.addr().blocks() {
            if !nand.block_info(BlockId(b))?.factory_bad {
                found.push(b);
                if found.len() == CKPT_RING {
                    return Ok(found);
                }
            }
        }
        Err(FtlError::NoSpace)
    }

    /// Format a fresh FTL over `nand`: every block that holds anything is erased, all
    /// logical pages start unmapped, and an initial checkpoint is written.
    pub fn format(mut nand: Nand, cfg: FtlConfig) -> Result<Ftl, FtlError> {
        Self::check_config(&nand, &cfg)?;
        let g = *nand.geometry();
        let nblocks = g.total_blocks() as u32;
        let mut bad = vec![false; nblocks as usize];
        let mut usable = 0u64;
        for b in 0..nblocks {
            let info = nand.block_info(BlockId(b))?;
            if info.factory_bad {
                bad[b as usize] = true;
                continue;
            }
            if info.next_page != 0 {
                match nand.erase(BlockId(b), SimTime::ZERO) {
                    Ok(_) => {}
                    Err(NandError::EraseFailed { .. }) => {
                        bad[b as usize] = true;
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            usable += 1;
        }
        let spb = (g.sectors_per_page() * g.pages_per_block) as u64;
        // Reserve: open blocks of HOT, COLD and META on every die, two log blocks per log
        // chain, two checkpoint blocks, the GC threshold, and room for the metadata itself.
        let dies = g.dies() as u64;
        let chains = nand.config().ftl.log_chains(&g) as u64;
        let fixed = 3 * dies + 2 + 2 * chains + cfg.gc_free_blocks as u64 + 2 * dies + 2;
        if usable <= fixed + 2 {
            return Err(FtlError::Config(format!(
                "{usable} usable blocks cannot cover the reserve of {fixed}"
            )));
        }
        let raw_lbas = ((usable - fixed) * spb) as f64 / (1.0 + cfg.op);
        // MAP, MAPS, WEAR and BBT pages need their own space: one copy live, one being written.
        let page = g.page_size as u64;
        let epp = page / (8 + cfg.ext_bytes as u64);
        let meta_pages =
            2 * ((raw_lbas as u64).div_ceil(epp) + 2 + (nblocks as u64 * 4).div_ceil(page) + 1);
        let meta_blocks = meta_pages.div_ceil(g.pages_per_block as u64) + dies;
        if usable <= fixed + meta_blocks + 2 {
            return Err(FtlError::Config("device too small for its metadata".into()));
        }
        let lbas = (((usable - fixed - meta_blocks) * spb) as f64 / (1.0 + cfg.op)).floor() as u64;
        let mut f = Ftl::skeleton(nand, cfg, lbas);
        f.ckpt.use_ring(Self::well_known_ckpt_blocks(&f.nand)?);
        for (b, &is_bad) in bad.iter().enumerate() {
            if is_bad {
                f.blocks.set_state(b as u32, Use::Bad);
            }
            let pe = f.nand.block_info(BlockId(b as u32))?.pe_cycles;
            f.blocks.set_pe(b, pe);
        }
        for &c in f.ckpt.ring() {
            f.blocks.set_state(c, Use::Ckpt);
        }
        f.blocks.check_free_counts();
        f.prov.set_reserve_blocks((fixed + meta_blocks) as u32);
        let initial_spare = f.spare_blocks().max(0) as u32;
        f.prov.set_initial_spare(initial_spare);
        // GC must be able to make progress at full logical occupancy: the spare blocks
        // (the garbage it can reclaim) must cover an open COLD block per die plus two.
        let need = dies + 2;
        if (f.prov.initial_spare() as u64) < need {
            let avail = (usable - fixed - meta_blocks) as f64;
            let min_op = need as f64 / (avail - need as f64).max(1.0);
            return Err(FtlError::Config(format!(
                "over-provisioning {} leaves {} spare blocks; GC needs at least {need} on a device with {dies} dies to make progress: use op >= {:.3}",
                cfg.op,
                f.prov.initial_spare(),
                (min_op * 1000.0).ceil() / 1000.0
            )));
        }
        f.start_log()?;
        f.checkpoint_with(SimTime::ZERO, crate::format::CKPT_CLEAN)?;
        f.counters.reset();
        Ok(f)
    }

    /// Logical capacity in LBAs.
    pub fn lbas(&self) -> u64 {
        self.geo.lbas()
    }
    /// LBA size in bytes.
    pub fn lba_size(&self) -> usize {
        self.geo.sector_size()
    }
    /// Counters.
    pub fn stats(&self) -> &FtlStats {
        self.counters.window()
    }
    /// Forget counters (a new measurement window).
    pub fn reset_stats(&mut self) {
        self.counters.new_window();
        self.gc.new_window();
    }
    /// Bytes per flash page.
    pub fn page_size(&self) -> usize {
        self.geo.page_size()
    }
    /// Sectors per flash page.
    pub fn sectors_per_page(&self) -> u32 {
        self.geo.sectors_per_page()
    }
    /// The configuration.
    pub fn config(&self) -> &FtlConfig {
        &self.cfg
    }
    /// The flash array.
    pub fn nand(&self) -> &Nand {
        &self.nand
    }
    /// A value that stays the same for as long as every LBA maps to the same stored
    /// bytes: it moves with every MAP entry change (a write, trim, relocation or
    /// recovery) and with every change of stored bytes ([`Nand::content_epoch`]).
    /// Reads never move it. Bytes [`Ftl::peek_in_place`] returned for an LBA are what
    /// [`Ftl::read_ref`] returns for it while the epoch holds.
    pub fn content_epoch(&self) -> (u64, u64) {
        (self.map.epoch(), self.nand.content_epoch())
    }
    /// Replace every instant the FTL keeps from one command to the next (when the log
    /// is durable, when the last checkpoint was taken) by `settle(instant)`: after a
    /// recording of the event core ([`csd_sim::events`]), their final values.
    pub fn settle_instants(&mut self, settle: &mut dyn FnMut(SimTime) -> SimTime) {
        self.log.durable = settle(self.log.durable);
        self.ckpt.settle_last_at(settle);
    }
    /// The flash array, mutably (fault injection, inspection).
    pub fn nand_mut(&mut self) -> &mut Nand {
        &mut self.nand
    }
    /// Free blocks.
    pub fn free_blocks(&self) -> u32 {
        self.blocks.free_count()
    }
    /// Blocks retired (factory and grown bad).
    pub fn bad_blocks(&self) -> u32 {
        self.blocks.iter().filter(|b| b.state == Use::Bad).count() as u32
    }
    /// Counters over the device's life (persisted with each checkpoint; counts since the
    /// last checkpoint before a crash are lost with the crash).
    pub fn lifetime_stats(&self) -> FtlStats {
        self.counters.lifetime()
    }

    /// The controller's page buffer (a preset's `dram.page_buffer_kib`): its size and
    /// its hits and misses on host reads since this FTL was opened.
    pub fn page_buffer(&self) -> crate::PageBufferStats {
        self.pagebuf.stats()
    }

    /// The last recovery, if this FTL was recovered.
    pub fn last_recovery(&self) -> Option<RecoveryReport> {
        self.recovery.get()
    }
    /// MAP pages the cache holds at most.
    pub fn map_cache_pages(&self) -> usize {
        self.map.capacity()
    }

    /// (min, mean, max) erase count over usable blocks, not counting the two checkpoint
    /// blocks (a fixed, well-known location cannot take part in wear leveling; real drives
    /// keep such blocks in SLC mode for the endurance).
    pub fn erase_counts(&self) -> (u32, f64, u32) {
        let mut it = self
            .blocks
            .iter()
            .filter(|b| b.state != Use::Bad && b.state != Use::Ckpt)
            .map(|b| b.pe);
        let first = it.next().unwrap_or(0);
        let (mut mn, mut mx, mut sum, mut n) = (first, first, first as u64, 1u64);
        for pe in it {
            mn = mn.min(pe);
            mx = mx.max(pe);
            sum += pe as u64;
            n += 1;
        }
        (mn, sum as f64 / n as f64, mx)
    }

    /// Simulate a power cut: everything in controller DRAM is lost; the flash array is
    /// returned for [`Ftl::recover`].
    pub fn crash(mut self) -> Nand {
        self.nand.power_off();
        self.nand.power_on();
        self.nand
    }

    pub(crate) fn check_range(&self, lba: u64, n: u64) -> Result<(), FtlError> {
        if n == 0 || lba.checked_add(n).is_none_or(|e| e > self.geo.lbas()) {
            return Err(FtlError::OutOfRange {
                lba,
                end: lba.saturating_add(n),
                capacity: self.geo.lbas(),
            });
        }
        Ok(())
    }

    pub(crate) fn sectors_of(&self, len: usize) -> Result<u64, FtlError> {
        if len == 0 || !len.is_multiple_of(self.geo.sector_size()) {
            return Err(FtlError::BadLength {
                got: len,
                lba_size: self.geo.sector_size(),
            });
        }
        Ok((len / self.geo.sector_size()) as u64)
    }
}
