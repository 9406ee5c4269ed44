use crate::format::{
    Checkpoint, Entry, Kind, LOG_LINKS, LogPage, NONE, Record, TAG_BYTES, Tag, pack, page_addr,
    page_unaddr, unpack,
};
use csd_nand::{BlockId, DieId, Nand, NandError, Ppa};
use csd_sim::SimTime;
use std::collections::BTreeMap;
use std::time::Instant;
use thiserror::Error;

/// GC victim selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GcPolicy {
    /// The full block with the most garbage (fewest valid sectors).
    Greedy,
    /// The full block maximizing `(1 - u) / (2u) × age` (Rosenblum & Ousterhout's LFS).
    CostBenefit,
}

/// The controller's write cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteCache {
    /// Every write command is on flash (logged and programmed) before it completes.
    WriteThrough,
    /// Writes fill page buffers in DRAM, committed a stripe at a time; `flush` makes them durable.
    WriteBack,
}

/// FTL parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FtlConfig {
    /// Over-provisioning, `(physical - logical) / logical`, after the reserve.
    pub op: f64,
    /// GC runs while fewer free blocks than this remain.
    pub gc_free_blocks: u32,
    /// Victim choice.
    pub gc_policy: GcPolicy,
    /// Static wear leveling starts when max - min erase count exceeds this.
    pub wear_level_spread: u32,
    /// Maximum sectors per command (MDTS); larger host writes are split.
    pub mdts_sectors: u32,
    /// Write cache mode.
    pub write_cache: WriteCache,
    /// Bytes of metadata extension per MAP entry (0..=24), fixed at format time.
    pub ext_bytes: u32,
    /// Share of controller DRAM the MAP cache may use (0 < share <= 1).
    pub map_cache_share: f64,
    /// A checkpoint is taken after this many log pages.
    pub checkpoint_log_pages: u32,
    /// Maximum pages in one batch (`flush_batch`).
    pub max_batch_pages: u32,
}

impl Default for FtlConfig {
    fn default() -> Self {
        FtlConfig {
            op: 0.07,
            gc_free_blocks: 8,
            gc_policy: GcPolicy::Greedy,
            wear_level_spread: 200,
            mdts_sectors: 128,
            write_cache: WriteCache::WriteThrough,
            ext_bytes: 0,
            map_cache_share: 0.5,
            checkpoint_log_pages: 1024,
            max_batch_pages: 4096,
        }
    }
}

/// Errors of the FTL.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum FtlError {
    /// The LBA range is outside the logical capacity.
    #[error("LBA range {lba}..{end} is outside the device (capacity {capacity} LBAs)")]
    OutOfRange {
        /// First LBA.
        lba: u64,
        /// One past the last LBA.
        end: u64,
        /// LBAs of the device.
        capacity: u64,
    },
    /// A buffer is not a whole, non-zero number of LBAs.
    #[error("buffer of {got} bytes is not a non-zero multiple of the {lba_size}-byte LBA")]
    BadLength {
        /// Bytes given.
        got: usize,
        /// LBA size.
        lba_size: usize,
    },
    /// A read could not be corrected.
    #[error("uncorrectable read at LBA {lba}")]
    Uncorrectable {
        /// The LBA.
        lba: u64,
    },
    /// A batch buffer or descriptor is malformed.
    #[error("bad batch: {0}")]
    BadBatch(String),
    /// No free block could be found (over-provisioning exhausted by bad blocks).
    #[error("no free flash block left: too many bad blocks for the configured capacity")]
    NoSpace,
    /// The configuration cannot work on this geometry.
    #[error("FTL config: {0}")]
    Config(String),
    /// No valid checkpoint was found: the device was never formatted.
    #[error("no valid FTL checkpoint on the device: format it first")]
    NotFormatted,
    /// Recovery met metadata it cannot read.
    #[error("recovery failed: {0}")]
    Corrupt(String),
    /// The flash failed in a way the FTL does not handle (e.g. power loss).
    #[error(transparent)]
    Nand(#[from] NandError),
}

/// Counters of the FTL's work, in sectors unless named otherwise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FtlStats {
    /// Sectors written by the host.
    pub host_write_sectors: u64,
    /// Sectors read by the host.
    pub host_read_sectors: u64,
    /// Sectors trimmed by the host.
    pub host_trim_sectors: u64,
    /// Write commands (after MDTS splitting) and batches committed.
    pub commits: u64,
    /// Pages programmed for user data.
    pub user_programs: u64,
    /// Pages programmed by GC and wear leveling.
    pub gc_programs: u64,
    /// Pages programmed for metadata (log pages, MAP/MAPS/WEAR/BBT pages, checkpoints).
    pub meta_programs: u64,
    /// Log pages written.
    pub log_pages: u64,
    /// Page reads for user data.
    pub user_reads: u64,
    /// Page reads by GC and wear leveling.
    pub gc_reads: u64,
    /// Page reads of metadata (MAP pages on cache misses, recovery).
    pub meta_reads: u64,
    /// Block erases: user/GC blocks.
    pub erases: u64,
    /// Block erases of metadata and log blocks.
    pub meta_erases: u64,
    /// Sectors moved by GC and wear leveling.
    pub gc_moved_sectors: u64,
    /// Sectors reclaimed by GC (garbage in the erased victims).
    pub gc_reclaimed_sectors: u64,
    /// Padding sectors written to complete a page.
    pub padding_sectors: u64,
    /// GC victims collected.
    pub gc_victims: u64,
    /// Blocks relocated by static wear leveling.
    pub wear_level_moves: u64,
    /// Blocks retired after a program or erase failure.
    pub grown_bad_blocks: u64,
    /// Program failures handled.
    pub program_failures: u64,
    /// Erase failures handled.
    pub erase_failures: u64,
    /// MAP cache hits.
    pub map_hits: u64,
    /// MAP cache misses.
    pub map_misses: u64,
    /// Checkpoints completed.
    pub checkpoints: u64,
    /// Batches (`flush_batch`) committed.
    pub batches: u64,
}

macro_rules! stats_fields {
    ($m:ident) => {
        $m!(
            host_write_sectors,
            host_read_sectors,
            host_trim_sectors,
            commits,
            user_programs,
            gc_programs,
            meta_programs,
            log_pages,
            user_reads,
            gc_reads,
            meta_reads,
            erases,
            meta_erases,
            gc_moved_sectors,
            gc_reclaimed_sectors,
            padding_sectors,
            gc_victims,
            wear_level_moves,
            grown_bad_blocks,
            program_failures,
            erase_failures,
            map_hits,
            map_misses,
            checkpoints,
            batches
        )
    };
}

impl FtlStats {
    /// The counters as words, in a fixed order (for persistence).
    pub fn to_words(&self) -> Vec<u64> {
        macro_rules! w {
            ($($f:ident),*) => { vec![$(self.$f),*] };
        }
        stats_fields!(w)
    }

    /// Inverse of [`FtlStats::to_words`]; missing words are zero.
    pub fn from_words(words: &[u64]) -> FtlStats {
        let mut it = words.iter().copied();
        macro_rules! r {
            ($($f:ident),*) => { FtlStats { $($f: it.next().unwrap_or(0)),* } };
        }
        stats_fields!(r)
    }

    /// Field-wise sum.
    pub fn plus(&self, o: &FtlStats) -> FtlStats {
        macro_rules! p {
            ($($f:ident),*) => { FtlStats { $($f: self.$f + o.$f),* } };
        }
        stats_fields!(p)
    }
}

impl FtlStats {
    /// Flash sectors programmed (all streams, padding and metadata included) per host sector written.
    pub fn write_amplification(&self, sectors_per_page: u32) -> f64 {
        let flash =
            (self.user_programs + self.gc_programs + self.meta_programs) * sectors_per_page as u64;
        flash as f64 / self.host_write_sectors.max(1) as f64
    }
    /// `(host + GC-moved sectors) / host sectors`: the GC share of write amplification
    /// (0 when the host wrote nothing).
    pub fn gc_write_amplification(&self) -> f64 {
        if self.host_write_sectors == 0 {
            return 0.0;
        }
        (self.host_write_sectors + self.gc_moved_sectors) as f64
            / self.host_write_sectors.max(1) as f64
    }
    /// Flash pages read per host page read (sectors per page given).
    pub fn read_amplification(&self, sectors_per_page: u32) -> f64 {
        if self.host_read_sectors == 0 {
            return 0.0;
        }
        let flash = (self.user_reads + self.gc_reads + self.meta_reads) * sectors_per_page as u64;
        flash as f64 / self.host_read_sectors as f64
    }
    /// `(GC reads + GC writes) / reclaimed`, batch-io Tables 3 and 4.
    pub fn gc_overhead(&self) -> f64 {
        (2 * self.gc_moved_sectors) as f64 / self.gc_reclaimed_sectors.max(1) as f64
    }
    /// MAP cache hit rate.
    pub fn map_hit_rate(&self) -> f64 {
        self.map_hits as f64 / (self.map_hits + self.map_misses).max(1) as f64
    }
}

impl From<csd_sim::wire::DescError> for FtlError {
    fn from(e: csd_sim::wire::DescError) -> Self {
        FtlError::BadBatch(e.0)
    }
}

/// A failed recovery, with the flash array given back so that it can be tried again.
#[derive(Debug)]
pub struct RecoveryFailed {
    /// Why recovery failed.
    pub error: FtlError,
    /// The flash array.
    pub nand: Box<Nand>,
}

/// What the last recovery did and how long it took.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RecoveryReport {
    /// Checkpoint sequence recovered from.
    pub checkpoint_seq: u64,
    /// Log pages replayed.
    pub log_pages: u64,
    /// Commits redone.
    pub commits_redone: u64,
    /// Commits without a done record whose data verified and were applied.
    pub commits_verified: u64,
    /// Commits without a done record whose data did not verify and were discarded.
    pub commits_discarded: u64,
    /// Modeled recovery time in seconds.
    pub modeled_s: f64,
    /// Wall-clock recovery time in seconds.
    pub wall_s: f64,
}

/// Candidate blocks of the well-known checkpoint location.
const CKPT_RING: usize = 8;

/// Map entries with this bit point into a page buffer: `CACHED | buf << 8 | slot`.
const CACHED: u64 = 1 << 63;

/// Does a MAP entry point into a page buffer (rather than at flash, or nowhere)?
#[inline]
fn is_cached(e: u64) -> bool {
    e != NONE && e & CACHED != 0
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Use {
    Free,
    /// Open for a data stream (0 HOT, 1 COLD) or META (2).
    Open(u8),
    /// Full of user/GC data.
    Full,
    /// Full metadata block (MAP/MAPS/WEAR/BBT pages).
    Meta,
    /// Holds log pages.
    Log,
    /// One of the two checkpoint blocks.
    Ckpt,
    Bad,
}

#[derive(Debug, Clone, Copy)]
struct Blk {
    state: Use,
    valid: u32,
    pe: u32,
    stamp: u64,
    /// Live metadata pages (META blocks).
    meta_live: u32,
    /// Highest LSN of a log page in the block (log blocks).
    max_lsn: u64,
}

const HOT: usize = 0;
const COLD: usize = 1;
const META: usize = 2;

/// A page being assembled in DRAM.
struct PageBuf {
    data: Vec<u8>,
    lpids: Vec<u64>,
    /// The durable location each LPID had before this write (invalidated at commit).
    olds: Vec<u64>,
    fill: u32,
}

struct MapSlot {
    page: u32,
    entries: Vec<u64>,
    ext: Vec<u8>,
    dirty: bool,
    referenced: bool,
}

struct LogState {
    next_lsn: u64,
    prev: u64,
    block: u32,
    page: u32,
    next_block: Option<u32>,
    pending: Vec<Record>,
    pending_bytes: usize,
    since_ckpt: u32,
}

/// The FTL over one flash array.
pub struct Ftl {
    nand: Nand,
    cfg: FtlConfig,
    spp: u32,
    ss: usize,
    ppb: u32,
    bpd: u32,
    dies: u32,
    page_size: usize,
    oob_sector: usize,
    lbas: u64,
    epp: u64,
    /// MAPS: flash page address of each MAP page (NONE if never written).
    maps: Vec<u64>,
    maps_dirty: Vec<bool>,
    /// MAPT: page addresses of the MAPS pages as of the last checkpoint.
    mapt: Vec<u64>,
    slot_of: Vec<u32>,
    slots: Vec<MapSlot>,
    slot_cap: usize,
    hand: usize,
    blocks: Vec<Blk>,
    valid: Vec<u64>,
    free_count: u32,
    open: [Vec<Option<(u32, u32)>>; 3],
    rr: [u32; 3],
    bufs: Vec<PageBuf>,
    /// Index in `bufs` of the page being filled per data stream.
    filling: [Option<usize>; 2],
    log: LogState,
    commit_seq: u64,
    /// The well-known checkpoint location: a ring of candidate blocks.
    ckpt_blocks: Vec<u32>,
    ckpt_active: usize,
    ckpt_seq: u64,
    wear_pages: Vec<u64>,
    bbt_pages: Vec<u64>,
    seq: u64,
    stats: FtlStats,
    oob_scratch: Vec<u8>,
    to_relocate: Vec<u32>,
    wl_checked_at: u64,
    recovery: Option<RecoveryReport>,
    in_gc: bool,
    /// Blocks currently holding (or reserved for) log pages.
    log_blocks: u32,
    /// Page buffers kept for reuse (no allocation per commit on the data path).
    buf_pool: Vec<PageBuf>,
    /// Scratch page for log pages and metadata pages.
    page_scratch: Vec<u8>,
    /// Lifetime counters up to the start of the current `stats` window.
    life_base: FtlStats,
    /// During recovery the MAP cache evicts clean pages only (no flash writes before the
    /// block classes are known); it may exceed its bound until the closing checkpoint.
    recovering: bool,
}

/// CRC of an LPID's data and the TAG bytes for a page of sectors.
fn tags_for(
    oob: &mut [u8],
    oob_sector: usize,
    ss: usize,
    data: &[u8],
    kind: Kind,
    ids: &[u64],
    seq: u64,
) {
    oob.fill(0xFF);
    for (k, id) in ids.iter().enumerate() {
        let (kind, id) = if *id == NONE {
            (Kind::Pad, 0)
        } else {
            (kind, *id)
        };
        let crc = crc32c::crc32c(&data[k * ss..(k + 1) * ss]);
        Tag {
            kind,
            id,
            seq: seq as u32,
            crc,
        }
        .write(&mut oob[k * oob_sector..k * oob_sector + TAG_BYTES]);
    }
}

impl Ftl {
    // ----------------------------------------------------------------- construction

    fn skeleton(nand: Nand, cfg: FtlConfig, lbas: u64) -> Ftl {
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
        Ftl {
            spp,
            ss: g.sector_size as usize,
            ppb: g.pages_per_block,
            bpd,
            dies,
            page_size,
            oob_sector: g.oob_per_sector as usize,
            lbas,
            epp,
            maps: vec![NONE; n_map_pages],
            maps_dirty: vec![false; n_maps_pages],
            mapt: vec![NONE; n_maps_pages],
            slot_of: vec![u32::MAX; n_map_pages],
            slots: Vec::with_capacity(slot_cap),
            slot_cap,
            hand: 0,
            blocks: vec![
                Blk {
                    state: Use::Free,
                    valid: 0,
                    pe: 0,
                    stamp: 0,
                    meta_live: 0,
                    max_lsn: 0
                };
                nblocks
            ],
            valid: vec![0u64; (nblocks as u64 * spb).div_ceil(64) as usize],
            free_count: 0,
            open: [
                vec![None; dies as usize],
                vec![None; dies as usize],
                vec![None; dies as usize],
            ],
            rr: [0; 3],
            bufs: Vec::new(),
            filling: [None, None],
            log: LogState {
                next_lsn: 1,
                prev: NONE,
                block: 0,
                page: 0,
                next_block: None,
                pending: Vec::new(),
                pending_bytes: 0,
                since_ckpt: 0,
            },
            commit_seq: 1,
            ckpt_blocks: Vec::new(),
            ckpt_active: 0,
            ckpt_seq: 0,
            wear_pages: Vec::new(),
            bbt_pages: Vec::new(),
            seq: 0,
            stats: FtlStats::default(),
            oob_scratch: vec![0u8; g.oob_per_page() as usize],
            to_relocate: Vec::new(),
            wl_checked_at: 0,
            recovery: None,
            in_gc: false,
            log_blocks: 0,
            recovering: false,
            life_base: FtlStats::default(),
            buf_pool: Vec::new(),
            page_scratch: vec![0u8; page_size],
            nand,
            cfg,
        }
    }

    fn check_config(nand: &Nand, cfg: &FtlConfig) -> Result<(), FtlError> {
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
        Ok(())
    }

    /// The well-known checkpoint location: the first `CKPT_RING` blocks not marked bad at
    /// the factory. Records go to one of them at a time; when it is full the next one is
    /// erased and used (so the newest record always survives the erase), and a block whose
    /// erase fails is skipped for good.
    fn well_known_ckpt_blocks(nand: &Nand) -> Result<Vec<u32>, FtlError> {
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
        // Reserve: open blocks of HOT, COLD and META on every die, two log blocks, two
        // checkpoint blocks, the GC threshold, and room for the metadata itself.
        let dies = g.dies() as u64;
        let fixed = 3 * dies + 4 + cfg.gc_free_blocks as u64 + 2 * dies + 2;
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
        f.ckpt_blocks = Self::well_known_ckpt_blocks(&f.nand)?;
        for (b, blk) in f.blocks.iter_mut().enumerate() {
            if bad[b] {
                blk.state = Use::Bad;
            }
            blk.pe = f.nand.block_info(BlockId(b as u32))?.pe_cycles;
        }
        for &c in &f.ckpt_blocks {
            f.blocks[c as usize].state = Use::Ckpt;
        }
        f.free_count = f.blocks.iter().filter(|b| b.state == Use::Free).count() as u32;
        f.start_log()?;
        f.checkpoint(SimTime::ZERO)?;
        f.stats = FtlStats::default();
        f.life_base = FtlStats::default();
        Ok(f)
    }

    // ----------------------------------------------------------------- accessors

    /// Logical capacity in LBAs.
    pub fn lbas(&self) -> u64 {
        self.lbas
    }
    /// LBA size in bytes.
    pub fn lba_size(&self) -> usize {
        self.ss
    }
    /// Counters.
    pub fn stats(&self) -> &FtlStats {
        &self.stats
    }
    /// Forget counters (a new measurement window).
    pub fn reset_stats(&mut self) {
        self.life_base = self.life_base.plus(&self.stats);
        self.stats = FtlStats::default();
        self.wl_checked_at = 0;
    }
    /// Sectors per flash page.
    pub fn sectors_per_page(&self) -> u32 {
        self.spp
    }
    /// The configuration.
    pub fn config(&self) -> &FtlConfig {
        &self.cfg
    }
    /// The flash array.
    pub fn nand(&self) -> &Nand {
        &self.nand
    }
    /// The flash array, mutably (fault injection, inspection).
    pub fn nand_mut(&mut self) -> &mut Nand {
        &mut self.nand
    }
    /// Free blocks.
    pub fn free_blocks(&self) -> u32 {
        self.free_count
    }
    /// Blocks retired (factory and grown bad).
    pub fn bad_blocks(&self) -> u32 {
        self.blocks.iter().filter(|b| b.state == Use::Bad).count() as u32
    }
    /// Counters over the device's life (persisted with each checkpoint; counts since the
    /// last checkpoint before a crash are lost with the crash).
    pub fn lifetime_stats(&self) -> FtlStats {
        self.life_base.plus(&self.stats)
    }

    /// The last recovery, if this FTL was recovered.
    pub fn last_recovery(&self) -> Option<RecoveryReport> {
        self.recovery
    }
    /// MAP pages the cache holds at most.
    pub fn map_cache_pages(&self) -> usize {
        self.slot_cap
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

    /// Clean shutdown: commit buffered writes, write a checkpoint, return the flash array.
    pub fn shutdown(mut self, at: SimTime) -> Result<Nand, FtlError> {
        let t = self.flush(at)?;
        self.checkpoint(t)?;
        Ok(self.nand)
    }

    fn check_range(&self, lba: u64, n: u64) -> Result<(), FtlError> {
        if n == 0 || lba.checked_add(n).is_none_or(|e| e > self.lbas) {
            return Err(FtlError::OutOfRange {
                lba,
                end: lba.saturating_add(n),
                capacity: self.lbas,
            });
        }
        Ok(())
    }

    fn sectors_of(&self, len: usize) -> Result<u64, FtlError> {
        if len == 0 || !len.is_multiple_of(self.ss) {
            return Err(FtlError::BadLength {
                got: len,
                lba_size: self.ss,
            });
        }
        Ok((len / self.ss) as u64)
    }

    // ----------------------------------------------------------------- GBITV

    #[inline]
    fn gidx(&self, block: u32, page: u32, sector: u32) -> usize {
        ((block as usize * self.ppb as usize + page as usize) * self.spp as usize) + sector as usize
    }

    #[inline]
    fn set_valid(&mut self, a: u64, on: bool) {
        if a == NONE || is_cached(a) {
            return;
        }
        let (b, p, s) = unpack(a);
        let i = self.gidx(b, p, s);
        let bit = 1u64 << (i % 64);
        let w = &mut self.valid[i / 64];
        let was = *w & bit != 0;
        if on && !was {
            *w |= bit;
            self.blocks[b as usize].valid += 1;
        } else if !on && was {
            *w &= !bit;
            self.blocks[b as usize].valid -= 1;
        }
    }

    #[inline]
    fn is_valid(&self, block: u32, page: u32, sector: u32) -> bool {
        let i = self.gidx(block, page, sector);
        self.valid[i / 64] & (1u64 << (i % 64)) != 0
    }

    // ----------------------------------------------------------------- MAP cache

    /// The cache slot holding MAP page `mp`, loading it (and evicting) as needed.
    fn map_slot(&mut self, mp: u32, at: SimTime) -> Result<(usize, SimTime), FtlError> {
        let s = self.slot_of[mp as usize];
        if s != u32::MAX {
            self.stats.map_hits += 1;
            self.slots[s as usize].referenced = true;
            return Ok((s as usize, at));
        }
        self.stats.map_misses += 1;
        let mut t = at;
        let epp = self.epp as usize;
        let ext = self.cfg.ext_bytes as usize;
        let all_dirty = self.recovering && self.slots.iter().all(|s| s.dirty);
        let idx = if self.slots.len() < self.slot_cap || all_dirty {
            self.slots.push(MapSlot {
                page: mp,
                entries: vec![NONE; epp],
                ext: vec![0u8; epp * ext],
                dirty: false,
                referenced: true,
            });
            self.slots.len() - 1
        } else {
            // CLOCK: skip referenced slots once.
            loop {
                let h = self.hand;
                self.hand = (self.hand + 1) % self.slots.len();
                if self.slots[h].referenced {
                    self.slots[h].referenced = false;
                } else if !(self.recovering && self.slots[h].dirty) {
                    break;
                }
            }
            let victim = (self.hand + self.slots.len() - 1) % self.slots.len();
            if self.slots[victim].dirty {
                t = t.max(self.write_map_page(victim, at)?);
            }
            let old = self.slots[victim].page;
            self.slot_of[old as usize] = u32::MAX;
            self.slots[victim].page = mp;
            self.slots[victim].dirty = false;
            self.slots[victim].referenced = true;
            victim
        };
        self.slot_of[mp as usize] = idx as u32;
        let addr = self.maps[mp as usize];
        if addr == NONE {
            self.slots[idx].entries.fill(NONE);
            self.slots[idx].ext.fill(0);
        } else {
            let mut page = vec![0u8; self.page_size];
            t = t.max(self.read_meta_page(addr, Kind::Map, mp as u64, &mut page, at)?);
            let slot = &mut self.slots[idx];
            for (i, e) in slot.entries.iter_mut().enumerate() {
                *e = u64::from_le_bytes(page[i * 8..i * 8 + 8].try_into().unwrap_or([0xFF; 8]));
            }
            slot.ext
                .copy_from_slice(&page[epp * 8..epp * 8 + epp * ext]);
        }
        Ok((idx, t))
    }

    /// Drop clean slots until the cache is within its bound again (after recovery).
    fn shrink_cache(&mut self) {
        let mut i = 0;
        while self.slots.len() > self.slot_cap && i < self.slots.len() {
            if self.slots[i].dirty {
                i += 1;
                continue;
            }
            let page = self.slots[i].page;
            self.slot_of[page as usize] = u32::MAX;
            self.slots.swap_remove(i);
            if i < self.slots.len() {
                let moved = self.slots[i].page;
                self.slot_of[moved as usize] = i as u32;
            }
        }
        self.hand = 0;
    }

    fn write_map_page(&mut self, slot: usize, at: SimTime) -> Result<SimTime, FtlError> {
        let mut page = vec![0u8; self.page_size];
        let epp = self.epp as usize;
        let s = &self.slots[slot];
        for (i, e) in s.entries.iter().enumerate() {
            page[i * 8..i * 8 + 8].copy_from_slice(&e.to_le_bytes());
        }
        page[epp * 8..epp * 8 + s.ext.len()].copy_from_slice(&s.ext);
        let mp = s.page;
        let (addr, t) = self.write_meta_page(Kind::Map, mp as u64, &page, at)?;
        let old = std::mem::replace(&mut self.maps[mp as usize], addr);
        self.release_meta_page(old);
        self.maps_dirty[mp as usize / (self.page_size / 8)] = true;
        self.slots[slot].dirty = false;
        Ok(t)
    }

    fn map_get(&mut self, lpid: u64, at: SimTime) -> Result<(u64, SimTime), FtlError> {
        let (s, t) = self.map_slot((lpid / self.epp) as u32, at)?;
        Ok((self.slots[s].entries[(lpid % self.epp) as usize], t))
    }

    fn map_set(&mut self, lpid: u64, v: u64, at: SimTime) -> Result<SimTime, FtlError> {
        let (s, t) = self.map_slot((lpid / self.epp) as u32, at)?;
        let slot = &mut self.slots[s];
        slot.entries[(lpid % self.epp) as usize] = v;
        slot.dirty = true;
        Ok(t)
    }

    /// The metadata extension bytes of `lpid` (zeros unless set).
    pub fn ext(&mut self, lpid: u64, at: SimTime) -> Result<(Vec<u8>, SimTime), FtlError> {
        self.check_range(lpid, 1)?;
        let ext = self.cfg.ext_bytes as usize;
        let (s, t) = self.map_slot((lpid / self.epp) as u32, at)?;
        let o = (lpid % self.epp) as usize * ext;
        Ok((self.slots[s].ext[o..o + ext].to_vec(), t))
    }

    /// Set the metadata extension bytes of `lpid` (logged; durable at the next flush).
    pub fn set_ext(&mut self, lpid: u64, bytes: &[u8], at: SimTime) -> Result<SimTime, FtlError> {
        self.check_range(lpid, 1)?;
        let ext = self.cfg.ext_bytes as usize;
        if bytes.len() != ext {
            return Err(FtlError::Config(format!(
                "extension is {ext} bytes, got {}",
                bytes.len()
            )));
        }
        let (s, t) = self.map_slot((lpid / self.epp) as u32, at)?;
        let o = (lpid % self.epp) as usize * ext;
        self.slots[s].ext[o..o + ext].copy_from_slice(bytes);
        self.slots[s].dirty = true;
        self.log_append(Record::Ext {
            lpid,
            bytes: bytes.to_vec(),
        });
        Ok(t)
    }

    // ----------------------------------------------------------------- metadata pages

    fn read_meta_page(
        &mut self,
        addr: u64,
        kind: Kind,
        id: u64,
        out: &mut [u8],
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        let (b, p) = page_unaddr(addr);
        let mut oob = vec![0u8; self.oob_scratch.len()];
        let r = self
            .nand
            .read(Ppa::new(BlockId(b), p), 0, out, &mut oob, at);
        self.stats.meta_reads += 1;
        let r = match r {
            Ok(r) => r,
            Err(NandError::PowerLoss) => return Err(NandError::PowerLoss.into()),
            Err(e) => {
                return Err(FtlError::Corrupt(format!(
                    "{kind:?} page {id} at block {b} page {p}: {e}"
                )));
            }
        };
        match Tag::read(&oob[..TAG_BYTES]) {
            Some(t) if t.kind == kind && t.id == id && t.crc == crc32c::crc32c(&out[..self.ss]) => {
                Ok(r.done)
            }
            _ => Err(FtlError::Corrupt(format!(
                "{kind:?} page {id} at block {b} page {p} has a wrong TAG"
            ))),
        }
    }

    /// Write one metadata page to the META stream; returns its page address.
    fn write_meta_page(
        &mut self,
        kind: Kind,
        id: u64,
        data: &[u8],
        at: SimTime,
    ) -> Result<(u64, SimTime), FtlError> {
        let ids = vec![id; self.spp as usize];
        let mut oob = std::mem::take(&mut self.oob_scratch);
        tags_for(
            &mut oob,
            self.oob_sector,
            self.ss,
            data,
            kind,
            &ids,
            self.commit_seq,
        );
        let r = self.program_stream(META, data, &oob, at);
        self.oob_scratch = oob;
        let (b, p, t) = r?;
        self.stats.meta_programs += 1;
        self.blocks[b as usize].meta_live += 1;
        Ok((page_addr(b, p), t))
    }

    /// A metadata page is no longer referenced by the current state.
    fn release_meta_page(&mut self, addr: u64) {
        if addr == NONE {
            return;
        }
        let (b, _) = page_unaddr(addr);
        let blk = &mut self.blocks[b as usize];
        blk.meta_live = blk.meta_live.saturating_sub(1);
    }

    // ----------------------------------------------------------------- provisioning

    /// Program one page of stream `s` (HOT, COLD or META) at the next provisioned
    /// address, retiring blocks whose program fails. Returns (block, page, done).
    fn program_stream(
        &mut self,
        s: usize,
        data: &[u8],
        oob: &[u8],
        at: SimTime,
    ) -> Result<(u32, u32, SimTime), FtlError> {
        for _ in 0..self.blocks.len() {
            let (block, page) = self.provision(s)?;
            let r = self
                .nand
                .program(Ppa::new(BlockId(block), page), data, oob, at);
            self.seq += 1;
            match r {
                Ok(done) => {
                    self.advance(s, block, page);
                    return Ok((block, page, done));
                }
                Err(NandError::ProgramFailed { done, .. }) => {
                    self.stats.program_failures += 1;
                    let die = block / self.bpd;
                    self.open[s][die as usize] = None;
                    self.retire(block);
                    let _ = done;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(FtlError::NoSpace)
    }

    fn advance(&mut self, s: usize, block: u32, page: u32) {
        let die = block / self.bpd;
        if page + 1 == self.ppb {
            self.open[s][die as usize] = None;
            self.blocks[block as usize].state = if s == META { Use::Meta } else { Use::Full };
        } else {
            self.open[s][die as usize] = Some((block % self.bpd, page + 1));
        }
        self.blocks[block as usize].stamp = self.seq;
    }

    /// The next (block, page) for stream `s`: channel round robin over dies, opening the
    /// least-worn free block of a die when needed.
    ///
    /// When free blocks are scarce (no more than one per die, as after repeated power
    /// cuts that struck before GC could refill the pool), the stream first fills the
    /// blocks it already has open and opens at most one new block at a time, trading
    /// channel parallelism for the headroom GC needs to make progress.
    fn provision(&mut self, s: usize) -> Result<(u32, u32), FtlError> {
        let scarce = self.free_count <= self.dies;
        // Pass 1: the next die in turn with an open block (or, unless scarce, a free one);
        // pass 2 (scarce only): the next die in turn with a free block.
        for open_new in [!scarce, true] {
            for _ in 0..self.dies {
                let die = self.rr[s];
                self.rr[s] = (die + 1) % self.dies;
                if let Some((b, p)) = self.open[s][die as usize] {
                    return Ok((die * self.bpd + b, p));
                }
                if open_new && let Some(b) = self.open_block(s, die) {
                    return Ok((b, 0));
                }
            }
        }
        Err(FtlError::NoSpace)
    }

    /// Open the least-worn free block of `die` for stream `s`; its global index.
    fn open_block(&mut self, s: usize, die: u32) -> Option<u32> {
        let b = self.take_free_block(die)?;
        self.blocks[(die * self.bpd + b) as usize].state = Use::Open(s as u8);
        self.open[s][die as usize] = Some((b, 0));
        Some(die * self.bpd + b)
    }

    fn take_free_block(&mut self, die: u32) -> Option<u32> {
        let base = (die * self.bpd) as usize;
        let best = (0..self.bpd)
            .filter(|&i| self.blocks[base + i as usize].state == Use::Free)
            .min_by_key(|&i| self.blocks[base + i as usize].pe)?;
        self.blocks[base + best as usize].state = Use::Open(u8::MAX);
        self.free_count -= 1;
        Some(best)
    }

    fn take_any_free_block(&mut self) -> Result<u32, FtlError> {
        for k in 0..self.dies {
            let die = (self.rr[META] + k) % self.dies;
            if let Some(b) = self.take_free_block(die) {
                return Ok(die * self.bpd + b);
            }
        }
        Err(FtlError::NoSpace)
    }

    /// Retire a block after a failure; its live data moves after the current commit.
    fn retire(&mut self, block: u32) {
        let b = &mut self.blocks[block as usize];
        if b.state == Use::Free {
            self.free_count -= 1;
        }
        b.state = Use::Bad;
        self.stats.grown_bad_blocks += 1;
        if b.valid > 0 {
            self.to_relocate.push(block);
        }
    }

    // ----------------------------------------------------------------- the log

    fn start_log(&mut self) -> Result<(), FtlError> {
        let b = self.take_any_free_block()?;
        self.blocks[b as usize].state = Use::Log;
        self.log_blocks += 1;
        self.log.block = b;
        self.log.page = 0;
        self.log.next_block = None;
        self.log.prev = NONE;
        Ok(())
    }

    /// The next `LOG_LINKS` candidate page addresses of the log, from its cursor.
    fn log_candidates(&mut self) -> Result<[u64; LOG_LINKS], FtlError> {
        // A page written at the cursor links to the LOG_LINKS pages after it, which reach
        // into the next block once this many pages or fewer are left.
        if self.ppb - self.log.page <= LOG_LINKS as u32 && self.log.next_block.is_none() {
            let b = self.take_any_free_block()?;
            self.blocks[b as usize].state = Use::Log;
            self.log_blocks += 1;
            self.log.next_block = Some(b);
        }
        let mut c = [NONE; LOG_LINKS];
        let (mut b, mut p) = (self.log.block, self.log.page);
        for slot in c.iter_mut() {
            if p == self.ppb {
                b = self.log.next_block.unwrap_or(b);
                p = 0;
            }
            *slot = page_addr(b, p);
            p += 1;
        }
        Ok(c)
    }

    fn log_append(&mut self, r: Record) {
        self.log.pending_bytes += r.size();
        self.log.pending.push(r);
    }

    /// Append entry records of one kind, split so that each fits a log page.
    fn log_entries(&mut self, make: fn(u64, Vec<Entry>) -> Record, seq: u64, entries: Vec<Entry>) {
        let per = (LogPage::capacity(self.page_size) - 32) / 24;
        for chunk in entries.chunks(per.max(1)) {
            self.log_append(make(seq, chunk.to_vec()));
        }
    }

    /// Write every pending record to the log (the WAL force). Returns when durable.
    fn force_log(&mut self, at: SimTime) -> Result<SimTime, FtlError> {
        let mut t = at;
        let cap = LogPage::capacity(self.page_size);
        while !self.log.pending.is_empty() {
            let mut used = 0;
            let mut n = 0;
            for r in &self.log.pending {
                if used + r.size() > cap {
                    break;
                }
                used += r.size();
                n += 1;
            }
            let n = n.max(1);
            let records: Vec<Record> = self.log.pending.drain(..n).collect();
            self.log.pending_bytes -= used;
            t = t.max(self.write_log_page(records, at)?);
        }
        self.log.pending_bytes = 0;
        Ok(t)
    }

    fn write_log_page(&mut self, records: Vec<Record>, at: SimTime) -> Result<SimTime, FtlError> {
        let mut page = std::mem::take(&mut self.page_scratch);
        page.resize(self.page_size, 0);
        let mut oob = std::mem::take(&mut self.oob_scratch);
        let result = (|| {
            for _attempt in 0..(4 * self.ppb) {
                let cands = self.log_candidates()?;
                let (b, p) = page_unaddr(cands[0]);
                // Links of this page: the candidates after it.
                let mut links = [NONE; LOG_LINKS];
                {
                    let (mut lb, mut lp) = (b, p + 1);
                    for l in links.iter_mut() {
                        if lp == self.ppb {
                            lb = self.log.next_block.unwrap_or(lb);
                            lp = 0;
                        }
                        *l = page_addr(lb, lp);
                        lp += 1;
                    }
                }
                let lp = LogPage {
                    lsn: self.log.next_lsn,
                    prev: self.log.prev,
                    links,
                    records: records.clone(),
                };
                lp.encode(&mut page);
                let ids = vec![self.log.next_lsn; self.spp as usize];
                tags_for(
                    &mut oob,
                    self.oob_sector,
                    self.ss,
                    &page,
                    Kind::Log,
                    &ids,
                    self.commit_seq,
                );
                let r = self.nand.program(Ppa::new(BlockId(b), p), &page, &oob, at);
                self.stats.meta_programs += 1;
                // The cursor moves past this candidate whatever happened.
                self.log.page = p + 1;
                if b != self.log.block {
                    self.log.block = b;
                    self.log.next_block = None;
                }
                if self.log.page == self.ppb
                    && let Some(nb) = self.log.next_block.take()
                {
                    self.log.block = nb;
                    self.log.page = 0;
                }
                match r {
                    Ok(done) => {
                        let blk = &mut self.blocks[b as usize];
                        blk.max_lsn = blk.max_lsn.max(self.log.next_lsn);
                        self.log.prev = page_addr(b, p);
                        self.log.next_lsn += 1;
                        self.log.since_ckpt += 1;
                        self.stats.log_pages += 1;
                        return Ok(done);
                    }
                    Err(NandError::ProgramFailed { .. }) => {
                        // Retry at the next link (batch-io §4.3); the block stays a log block.
                        self.stats.program_failures += 1;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Err(FtlError::NoSpace)
        })();
        self.oob_scratch = oob;
        self.page_scratch = page;
        result
    }

    // ----------------------------------------------------------------- host commands

    /// Write `data` (whole LBAs) at `lba`, submitted at `at`; returns the completion.
    /// Host writes larger than MDTS are split into MDTS-sized commands, each with its own
    /// write context, log record and done record (batch-io §8.2.1).
    pub fn write(&mut self, lba: u64, data: &[u8], at: SimTime) -> Result<SimTime, FtlError> {
        let n = self.sectors_of(data.len())?;
        self.check_range(lba, n)?;
        let mut done = at;
        let mdts = self.cfg.mdts_sectors as usize * self.ss;
        for (i, cmd) in data.chunks(mdts).enumerate() {
            let l = lba + (i * self.cfg.mdts_sectors as usize) as u64;
            done = done.max(self.write_command(l, cmd, at)?);
        }
        Ok(done)
    }

    fn write_command(&mut self, lba: u64, data: &[u8], at: SimTime) -> Result<SimTime, FtlError> {
        let mut t = at;
        let mut done = at;
        for (i, sector) in data.chunks(self.ss).enumerate() {
            t = t.max(self.buffer_sector(HOT, lba + i as u64, sector, NONE, at)?);
            if self.cfg.write_cache == WriteCache::WriteBack
                && self.filling[HOT].is_none()
                && self.bufs.len() >= self.dies as usize
            {
                done = done.max(self.commit(t)?);
            }
        }
        self.stats.host_write_sectors += data.len() as u64 / self.ss as u64;
        if self.cfg.write_cache == WriteCache::WriteThrough {
            done = done.max(self.commit(t)?);
        }
        Ok(done.max(t))
    }

    /// Put one sector into stream `s`'s filling page buffer and point MAP at it.
    /// `old_hint` is the durable location for GC moves (NONE for host writes: read MAP).
    fn buffer_sector(
        &mut self,
        s: usize,
        lpid: u64,
        sector: &[u8],
        old_hint: u64,
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        let (cur, t) = self.map_get(lpid, at)?;
        let durable_old = if old_hint != NONE {
            old_hint
        } else if is_cached(cur) {
            // Rewritten while still buffered: the earlier slot dies, its durable old carries over.
            let (b, k) = (((cur >> 8) & 0xFF_FFFF) as usize, (cur & 0xFF) as usize);
            self.bufs[b].lpids[k] = NONE;
            self.bufs[b].olds[k]
        } else {
            cur
        };
        let bi = match self.filling[s] {
            Some(b) => b,
            None => {
                let buf = self.buf_pool.pop().unwrap_or_else(|| PageBuf {
                    data: vec![0u8; self.page_size],
                    lpids: vec![NONE; self.spp as usize],
                    olds: vec![NONE; self.spp as usize],
                    fill: 0,
                });
                self.bufs.push(buf);
                let b = self.bufs.len() - 1;
                self.filling[s] = Some(b);
                b
            }
        };
        let buf = &mut self.bufs[bi];
        let k = buf.fill as usize;
        buf.data[k * self.ss..(k + 1) * self.ss].copy_from_slice(sector);
        buf.lpids[k] = lpid;
        buf.olds[k] = durable_old;
        buf.fill += 1;
        if buf.fill == self.spp {
            self.filling[s] = None;
        }
        self.map_set(lpid, CACHED | ((bi as u64) << 8) | k as u64, at)?;
        Ok(t)
    }

    /// Commit every buffered page: log RDESC (or GC moves), program, amend failures with
    /// RDESCA, install the MAP updates, queue the done record. GC commits (`gc`) log
    /// GcMove records, whose redo applies only where MAP still points at the old copy.
    fn commit_inner(&mut self, gc: bool, at: SimTime) -> Result<SimTime, FtlError> {
        if self.bufs.is_empty() {
            return Ok(at);
        }
        self.filling = [None, None];
        let seq = self.commit_seq;
        self.commit_seq += 1;
        self.stats.commits += 1;
        let stream = if gc { COLD } else { HOT };
        // Pad partial pages.
        for b in &mut self.bufs {
            if b.fill < self.spp {
                self.stats.padding_sectors += (self.spp - b.fill) as u64;
                b.data[b.fill as usize * self.ss..].fill(0);
            }
        }
        // 1. Provision addresses (as the program order will use them).
        let mut addrs: Vec<(u32, u32)> = Vec::with_capacity(self.bufs.len());
        let plan = self.plan_addresses(stream, self.bufs.len())?;
        addrs.extend(plan);
        // 2. Log the redo descriptor before any data is written.
        let entries = self.entries_for(&addrs);
        let make: fn(u64, Vec<Entry>) -> Record = if gc {
            |seq, entries| Record::GcMove { seq, entries }
        } else {
            |seq, entries| Record::Rdesc { seq, entries }
        };
        self.log_entries(make, seq, entries);
        let t_log = self.force_log(at)?;
        // 3. Program the data pages; failures get new addresses and an RDESCA.
        let mut done = t_log;
        let mut todo: Vec<usize> = (0..self.bufs.len()).collect();
        let mut rounds = 0;
        while !todo.is_empty() {
            rounds += 1;
            if rounds > 64 {
                return Err(FtlError::NoSpace);
            }
            let mut failed = Vec::new();
            let mut oob = std::mem::take(&mut self.oob_scratch);
            for &i in &todo {
                let (b, p) = addrs[i];
                if self.blocks[b as usize].state == Use::Bad {
                    // Planned into a block retired during this commit: re-plan it.
                    failed.push(i);
                    continue;
                }
                tags_for(
                    &mut oob,
                    self.oob_sector,
                    self.ss,
                    &self.bufs[i].data,
                    Kind::Data,
                    &self.bufs[i].lpids,
                    seq,
                );
                let r = self
                    .nand
                    .program(Ppa::new(BlockId(b), p), &self.bufs[i].data, &oob, t_log);
                self.seq += 1;
                match r {
                    Ok(d) => {
                        done = done.max(d);
                        if gc {
                            self.stats.gc_programs += 1;
                        } else {
                            self.stats.user_programs += 1;
                        }
                    }
                    Err(NandError::ProgramFailed { .. }) => {
                        self.stats.program_failures += 1;
                        self.open[stream][(b / self.bpd) as usize] = None;
                        self.retire(b);
                        failed.push(i);
                    }
                    Err(e) => {
                        self.oob_scratch = oob;
                        return Err(e.into());
                    }
                }
            }
            self.oob_scratch = oob;
            if failed.is_empty() {
                break;
            }
            let replan = self.plan_addresses(stream, failed.len())?;
            for (&i, a) in failed.iter().zip(replan) {
                addrs[i] = a;
            }
            let amended: Vec<(u32, u32)> = failed.iter().map(|&i| addrs[i]).collect();
            let mut am = Vec::new();
            for (&i, &(b, p)) in failed.iter().zip(&amended) {
                for (k, &lpid) in self.bufs[i].lpids.iter().enumerate() {
                    if lpid != NONE {
                        am.push(Entry {
                            lpid,
                            new: pack(b, p, k as u32),
                            old: self.bufs[i].olds[k],
                        });
                    }
                }
            }
            let make: fn(u64, Vec<Entry>) -> Record = if gc {
                |seq, entries| Record::GcMove { seq, entries }
            } else {
                |seq, entries| Record::Rdesca { seq, entries }
            };
            self.log_entries(make, seq, am);
            done = done.max(self.force_log(done)?);
            todo = failed;
        }
        // 4. Install the MAP updates.
        let bufs = std::mem::take(&mut self.bufs);
        for (i, buf) in bufs.iter().enumerate() {
            let (b, p) = addrs[i];
            for k in 0..self.spp as usize {
                let lpid = buf.lpids[k];
                if lpid == NONE {
                    continue;
                }
                let new = pack(b, p, k as u32);
                let (cur, _) = self.map_get(lpid, at)?;
                if cur == CACHED | ((i as u64) << 8) | k as u64 {
                    self.map_set(lpid, new, at)?;
                    self.set_valid(new, true);
                    self.set_valid(buf.olds[k], false);
                }
            }
        }
        // Page buffers go back to the pool, cleared.
        for mut b in bufs {
            b.fill = 0;
            b.lpids.fill(NONE);
            b.olds.fill(NONE);
            self.buf_pool.push(b);
        }
        // 5. The done record rides with the next log write.
        self.log_append(Record::Done { seq });
        if self.log.pending_bytes > LogPage::capacity(self.page_size) / 2 {
            done = done.max(self.force_log(done)?);
        }
        while let Some(b) = self.to_relocate.pop() {
            self.relocate(b, done)?;
        }
        Ok(done)
    }

    /// Top up the free pool before work that needs `extra` more blocks than a normal
    /// commit. GC only runs when no host sector is buffered (a buffered sector's old copy
    /// must stay where the durable MAP says it is).
    fn ensure_free(&mut self, extra: u32, at: SimTime) -> Result<(), FtlError> {
        if !self.in_gc && self.bufs.is_empty() && self.free_count < self.gc_low_water() + extra {
            self.collect_garbage_to(self.gc_low_water() + extra, at)?;
        }
        Ok(())
    }

    fn commit(&mut self, at: SimTime) -> Result<SimTime, FtlError> {
        let done = self.commit_inner(false, at)?;
        if !self.in_gc {
            self.collect_garbage(done)?;
            // Checkpoint on the interval, or early when the log takes too much of the device.
            let log_budget = (self.blocks.len() as u32 / 32).max(3);
            if self.log.since_ckpt >= self.cfg.checkpoint_log_pages || self.log_blocks > log_budget
            {
                self.checkpoint(done)?;
            }
        }
        Ok(done)
    }

    /// Reserve the next `n` pages of `stream` in provisioning order (channel round robin);
    /// the programs of a commit then follow this plan in order.
    fn plan_addresses(&mut self, stream: usize, n: usize) -> Result<Vec<(u32, u32)>, FtlError> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let (b, p) = self.provision(stream)?;
            self.advance(stream, b, p);
            out.push((b, p));
        }
        Ok(out)
    }

    fn entries_for(&self, addrs: &[(u32, u32)]) -> Vec<Entry> {
        let mut v = Vec::new();
        for (i, buf) in self.bufs.iter().enumerate() {
            let (b, p) = addrs[i];
            for (k, &lpid) in buf.lpids.iter().enumerate() {
                if lpid != NONE {
                    v.push(Entry {
                        lpid,
                        new: pack(b, p, k as u32),
                        old: buf.olds[k],
                    });
                }
            }
        }
        v
    }

    /// Make every buffered write and logged change durable.
    pub fn flush(&mut self, at: SimTime) -> Result<SimTime, FtlError> {
        let t = self.commit(at)?;
        self.force_log(t)
    }

    /// Unmap LBAs (logged before it completes); reads return zeros afterwards.
    pub fn trim(&mut self, lba: u64, n: u64, at: SimTime) -> Result<SimTime, FtlError> {
        self.check_range(lba, n)?;
        // Buffered writes to these LBAs are committed first so that the order is kept.
        let t = self.commit(at)?;
        self.log_append(Record::Trim { lpid: lba, n });
        let t = self.force_log(t)?;
        for l in lba..lba + n {
            let (cur, _) = self.map_get(l, t)?;
            self.set_valid(cur, false);
            self.map_set(l, NONE, t)?;
        }
        self.stats.host_trim_sectors += n;
        Ok(t)
    }

    /// Write a batch (batch-io §3): `buf` is a DESC block followed by the pages it
    /// describes. The batch is atomic (one commit: one redo descriptor, verified as a whole
    /// at recovery), ordered after everything written before it, and within it a later
    /// entry for the same LPID wins. A malformed buffer is refused before anything changes.
    ///
    /// Reads are served between commands, never inside one, so a read concurrent with a
    /// batch sees none or all of it: an (empty or full) time-ordered prefix, which meets
    /// the visibility rules (a)-(d) of §3.1.
    pub fn flush_batch(&mut self, buf: &[u8], at: SimTime) -> Result<SimTime, FtlError> {
        let ss = self.ss;
        if buf.len() < 2 * ss || !buf.len().is_multiple_of(ss) {
            return Err(FtlError::BadBatch(format!(
                "a batch buffer is a DESC block and at least one {ss}-byte page; got {} bytes",
                buf.len()
            )));
        }
        let desc = crate::batch::BatchDesc::decode(&buf[..ss])?;
        let pages = buf.len() / ss - 1;
        let max = (self.cfg.max_batch_pages as usize).min(crate::batch::BatchDesc::capacity(ss));
        if desc.entries.len() > max {
            return Err(FtlError::BadBatch(format!(
                "{} pages exceed the batch limit of {max}",
                desc.entries.len()
            )));
        }
        for &(lpid, off) in &desc.entries {
            if off == 0 || off as usize > pages {
                return Err(FtlError::BadBatch(format!(
                    "DESC offset {off} is outside the buffer's pages 1..={pages}"
                )));
            }
            if lpid >= self.lbas {
                return Err(FtlError::BadBatch(format!(
                    "LPID {lpid} is outside the device ({} LPIDs)",
                    self.lbas
                )));
            }
        }
        // Earlier buffered writes come first; then room for the whole batch.
        let mut t = self.commit_inner(false, at)?;
        let blocks_needed = (desc.entries.len() as u32).div_ceil(self.spp * self.ppb) + 1;
        self.ensure_free(blocks_needed, t)?;
        for &(lpid, off) in &desc.entries {
            let page = &buf[off as usize * ss..(off as usize + 1) * ss];
            t = t.max(self.buffer_sector(HOT, lpid, page, NONE, t)?);
        }
        self.stats.host_write_sectors += desc.entries.len() as u64;
        self.stats.batches += 1;
        self.commit(t)
    }

    /// Read one logical page (batch interface `readLPID`).
    pub fn read_lpid(
        &mut self,
        lpid: u64,
        buf: &mut [u8],
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        if buf.len() != self.ss {
            return Err(FtlError::BadLength {
                got: buf.len(),
                lba_size: self.ss,
            });
        }
        self.read(lpid, buf, at)
    }

    /// Read many logical pages at once into consecutive pages of `out`; the reads are
    /// issued together so they overlap across dies.
    pub fn read_lpids(
        &mut self,
        lpids: &[u64],
        out: &mut [u8],
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        if out.len() != lpids.len() * self.ss || lpids.is_empty() {
            return Err(FtlError::BadLength {
                got: out.len(),
                lba_size: self.ss,
            });
        }
        if let Some(&l) = lpids.iter().find(|&&l| l >= self.lbas) {
            return Err(FtlError::OutOfRange {
                lba: l,
                end: l + 1,
                capacity: self.lbas,
            });
        }
        let mut done = at;
        for (i, &l) in lpids.iter().enumerate() {
            done = done.max(self.read(l, &mut out[i * self.ss..(i + 1) * self.ss], at)?);
        }
        Ok(done)
    }

    /// Read LBAs into `buf`, submitted at `at`; returns the completion. Unwritten LBAs
    /// read as zeros.
    pub fn read(&mut self, lba: u64, buf: &mut [u8], at: SimTime) -> Result<SimTime, FtlError> {
        let n = self.sectors_of(buf.len())?;
        self.check_range(lba, n)?;
        let ss = self.ss;
        let mut done = at;
        let mut i = 0u64;
        while i < n {
            let l = lba + i;
            let (e, t) = self.map_get(l, at)?;
            let out = &mut buf[i as usize * ss..];
            if e == NONE {
                out[..ss].fill(0);
                i += 1;
                continue;
            }
            if is_cached(e) {
                let b = &self.bufs[((e >> 8) & 0xFF_FFFF) as usize];
                let k = (e & 0xFF) as usize;
                out[..ss].copy_from_slice(&b.data[k * ss..(k + 1) * ss]);
                i += 1;
                continue;
            }
            let (b, p, s) = unpack(e);
            let mut run = 1u64;
            while i + run < n && s + (run as u32) < self.spp {
                let (next, _) = self.map_get(l + run, at)?;
                if next != e + run {
                    break;
                }
                run += 1;
            }
            match self.nand.read(
                Ppa::new(BlockId(b), p),
                s,
                &mut out[..run as usize * ss],
                &mut [],
                t,
            ) {
                Ok(r) => done = done.max(r.done),
                Err(NandError::Uncorrectable { sector, .. }) => {
                    return Err(FtlError::Uncorrectable {
                        lba: l + (sector - s) as u64,
                    });
                }
                Err(e) => return Err(e.into()),
            }
            self.stats.user_reads += 1;
            i += run;
        }
        self.stats.host_read_sectors += n;
        Ok(done)
    }

    // ----------------------------------------------------------------- GC and wear leveling

    fn collect_garbage(&mut self, at: SimTime) -> Result<(), FtlError> {
        self.collect_garbage_to(self.gc_low_water(), at)
    }

    fn collect_garbage_to(&mut self, target: u32, at: SimTime) -> Result<(), FtlError> {
        self.in_gc = true;
        let r = self.collect_garbage_inner(target, at);
        self.in_gc = false;
        r
    }

    fn collect_garbage_inner(&mut self, target: u32, at: SimTime) -> Result<(), FtlError> {
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
            let spb = self.spp * self.ppb;
            self.stats.gc_reclaimed_sectors += (spb - self.blocks[victim as usize].valid) as u64;
            self.stats.gc_victims += 1;
            self.relocate(victim, at)?;
            self.erase_block(victim, at)?;
        }
        if self.stats.erases == self.wl_checked_at {
            return Ok(());
        }
        self.wl_checked_at = self.stats.erases;
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
        self.wl_checked_at = self.stats.erases;
        Ok(())
    }

    /// Whether a checkpoint now would free at least one block more than it writes: the
    /// blocks it reclaims (metadata blocks with no live page, log blocks other than the
    /// current one) against the pages it programs (dirty MAP pages, MAPS, WEAR, BBT and
    /// the record). With a small MAP cache every eviction writes a MAP page, and without
    /// this GC would churn through nearly-full data blocks while dead metadata piles up.
    fn checkpoint_pays(&self) -> bool {
        let dead = self
            .blocks
            .iter()
            .filter(|b| b.state == Use::Meta && b.meta_live == 0)
            .count() as u64
            + u64::from(self.log_blocks.saturating_sub(1));
        if dead == 0 {
            return false;
        }
        let cost = self.slots.iter().filter(|s| s.dirty).count() as u64
            + self.maps_dirty.iter().filter(|&&d| d).count() as u64
            + self.wear_pages.len() as u64
            + self.bbt_pages.len() as u64
            + 2;
        dead * u64::from(self.ppb) >= cost + u64::from(self.ppb)
    }

    /// GC keeps this many blocks free: the configured threshold plus what may be taken
    /// between two GC runs (a HOT block per die for one commit, a META block per die for
    /// a checkpoint, two log blocks).
    pub(crate) fn gc_low_water(&self) -> u32 {
        self.cfg.gc_free_blocks + 2 * self.dies + 2
    }

    fn pick_victim(&self) -> Option<u32> {
        let spb = (self.spp * self.ppb) as f64;
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
                    let age = (self.seq - blk.stamp) as f64 + 1.0;
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
    fn relocate(&mut self, block: u32, at: SimTime) -> Result<(), FtlError> {
        if self.blocks[block as usize].valid == 0 {
            return Ok(());
        }
        let was_in_gc = self.in_gc;
        self.in_gc = true;
        let saved = std::mem::take(&mut self.bufs);
        let saved_filling = std::mem::take(&mut self.filling);
        let r = self.relocate_inner(block, at);
        self.bufs = saved;
        self.filling = saved_filling;
        self.in_gc = was_in_gc;
        r
    }

    fn relocate_inner(&mut self, block: u32, at: SimTime) -> Result<(), FtlError> {
        let mut data = vec![0u8; self.spp as usize * self.ss];
        let mut oob = vec![0u8; self.oob_sector * self.spp as usize];
        for page in 0..self.ppb {
            if !(0..self.spp).any(|s| self.is_valid(block, page, s)) {
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
            for s in 0..self.spp {
                if !self.is_valid(block, page, s) {
                    continue;
                }
                let o = s as usize * self.oob_sector;
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
                let sector = data[s as usize * self.ss..(s as usize + 1) * self.ss].to_vec();
                self.buffer_sector(COLD, lpid, &sector, old, at)?;
                self.stats.gc_moved_sectors += 1;
            }
        }
        self.commit_inner(true, at)?;
        Ok(())
    }

    fn erase_block(&mut self, block: u32, at: SimTime) -> Result<(), FtlError> {
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

    // ----------------------------------------------------------------- checkpoints

    /// Take a fuzzy incremental checkpoint (batch-io §6): note the redo scan start point,
    /// write dirty MAP pages, dirty MAPS pages, WEAR and the bad-block table, then the
    /// checkpoint record at the well-known double-buffered location; finally reclaim log
    /// blocks before the RSSP and metadata blocks with no live page.
    pub fn checkpoint(&mut self, at: SimTime) -> Result<SimTime, FtlError> {
        // Top up the free pool first (only possible while nothing is buffered; otherwise
        // the low-water mark already covers one commit plus the metadata pages).
        if !self.recovering {
            self.ensure_free(0, at)?;
        }
        let mut t = self.commit_inner(false, at)?;
        t = t.max(self.force_log(t)?);
        let rssp_lsn = self.log.next_lsn;
        let rssp_links = self.log_candidates()?;
        // Dirty MAP pages.
        for s in 0..self.slots.len() {
            if self.slots[s].dirty {
                t = t.max(self.write_map_page(s, t)?);
            }
        }
        // Dirty MAPS pages.
        let per = self.page_size / 8;
        for mi in 0..self.maps_dirty.len() {
            if !self.maps_dirty[mi] && self.mapt[mi] != NONE {
                continue;
            }
            let mut page = vec![0xFFu8; self.page_size];
            for (k, a) in self.maps.iter().skip(mi * per).take(per).enumerate() {
                page[k * 8..k * 8 + 8].copy_from_slice(&a.to_le_bytes());
            }
            let (addr, tt) = self.write_meta_page(Kind::Maps, mi as u64, &page, t)?;
            t = t.max(tt);
            let old = std::mem::replace(&mut self.mapt[mi], addr);
            self.release_meta_page(old);
            self.maps_dirty[mi] = false;
        }
        // WEAR and the bad-block table, whole (they are small).
        let mut wear_bytes = Vec::with_capacity(self.blocks.len() * 4);
        let mut bbt_bytes = vec![0u8; self.blocks.len().div_ceil(8)];
        for (b, blk) in self.blocks.iter().enumerate() {
            wear_bytes.extend_from_slice(&blk.pe.to_le_bytes());
            if blk.state == Use::Bad {
                bbt_bytes[b / 8] |= 1 << (b % 8);
            }
        }
        let mut new_wear = Vec::new();
        for (i, chunk) in wear_bytes.chunks(self.page_size).enumerate() {
            let mut page = vec![0u8; self.page_size];
            page[..chunk.len()].copy_from_slice(chunk);
            let (addr, tt) = self.write_meta_page(Kind::Wear, i as u64, &page, t)?;
            t = t.max(tt);
            new_wear.push(addr);
        }
        let mut new_bbt = Vec::new();
        for (i, chunk) in bbt_bytes.chunks(self.page_size).enumerate() {
            let mut page = vec![0u8; self.page_size];
            page[..chunk.len()].copy_from_slice(chunk);
            let (addr, tt) = self.write_meta_page(Kind::Bbt, i as u64, &page, t)?;
            t = t.max(tt);
            new_bbt.push(addr);
        }
        let record = Checkpoint {
            seq: self.ckpt_seq + 1,
            rssp_lsn,
            rssp_addr: rssp_links[0],
            next_commit: self.commit_seq,
            lbas: self.lbas,
            ext_bytes: self.cfg.ext_bytes,
            rr: [self.rr[0], self.rr[1], self.rr[2]],
            mapt: self.mapt.clone(),
            wear: new_wear.clone(),
            bbt: new_bbt.clone(),
            // This checkpoint's own record program and reclaim erases count after it.
            lifetime: self
                .lifetime_stats()
                .plus(&FtlStats {
                    checkpoints: 1,
                    ..FtlStats::default()
                })
                .to_words(),
            last_recovery_ns: self.recovery.map_or([0, 0], |r| {
                [(r.modeled_s * 1e9) as u64, (r.wall_s * 1e9) as u64]
            }),
        };
        t = t.max(self.write_checkpoint_record(&record, rssp_links, t)?);
        // The new tables are durable: the old WEAR/BBT pages are dead.
        for a in std::mem::replace(&mut self.wear_pages, new_wear) {
            self.release_meta_page(a);
        }
        for a in std::mem::replace(&mut self.bbt_pages, new_bbt) {
            self.release_meta_page(a);
        }
        self.ckpt_seq = record.seq;
        self.log.since_ckpt = 0;
        self.stats.checkpoints += 1;
        // Reclaim: log blocks wholly before the RSSP, metadata blocks with nothing live.
        let cur_log = [Some(self.log.block), self.log.next_block];
        for b in 0..self.blocks.len() as u32 {
            let blk = self.blocks[b as usize];
            let dead_log =
                blk.state == Use::Log && blk.max_lsn < rssp_lsn && !cur_log.contains(&Some(b));
            let dead_meta = blk.state == Use::Meta && blk.meta_live == 0;
            if dead_log || dead_meta {
                self.blocks[b as usize].valid = 0;
                self.erase_block(b, t)?;
            }
        }
        Ok(t)
    }

    fn write_checkpoint_record(
        &mut self,
        c: &Checkpoint,
        rssp_links: [u64; LOG_LINKS],
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        let mut page = vec![0u8; self.page_size];
        c.encode(&mut page)?;
        // The candidate links of the RSSP go after the record so recovery can skip a failed page.
        let tail = page.len() - 8 * LOG_LINKS;
        for (i, l) in rssp_links.iter().enumerate() {
            page[tail + 8 * i..tail + 8 * i + 8].copy_from_slice(&l.to_le_bytes());
        }
        for _ in 0..4 * CKPT_RING {
            let b = self.ckpt_blocks[self.ckpt_active];
            let info = self.nand.block_info(BlockId(b))?;
            if info.next_page >= self.ppb || self.blocks[b as usize].state == Use::Bad {
                // Move to the next good candidate, erased first; the newest record stays
                // where it is until a newer one is written.
                let n = self.ckpt_blocks.len();
                let next = (1..n)
                    .map(|k| (self.ckpt_active + k) % n)
                    .find(|&i| self.blocks[self.ckpt_blocks[i] as usize].state != Use::Bad);
                let Some(next) = next else { break };
                let nb = self.ckpt_blocks[next];
                self.stats.meta_erases += 1;
                match self.nand.erase(BlockId(nb), at) {
                    Ok(_) => {
                        self.blocks[nb as usize].pe += 1;
                        self.ckpt_active = next;
                    }
                    Err(NandError::EraseFailed { .. }) => {
                        self.stats.erase_failures += 1;
                        self.stats.grown_bad_blocks += 1;
                        self.blocks[nb as usize].state = Use::Bad;
                    }
                    Err(e) => return Err(e.into()),
                }
                continue;
            }
            let ids = vec![c.seq; self.spp as usize];
            let mut oob = std::mem::take(&mut self.oob_scratch);
            tags_for(
                &mut oob,
                self.oob_sector,
                self.ss,
                &page,
                Kind::Ckpt,
                &ids,
                c.seq,
            );
            let r = self
                .nand
                .program(Ppa::new(BlockId(b), info.next_page), &page, &oob, at);
            self.oob_scratch = oob;
            self.stats.meta_programs += 1;
            match r {
                Ok(done) => return Ok(done),
                Err(NandError::ProgramFailed { .. }) => {
                    self.stats.program_failures += 1;
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(FtlError::Corrupt(
            "cannot write the checkpoint record".into(),
        ))
    }

    // ----------------------------------------------------------------- recovery

    /// Rebuild the FTL from flash after a crash or a clean shutdown (batch-io §4, §6,
    /// §7.2.7): the newest valid checkpoint record, then redo from the RSSP to the end of
    /// the log; commits without a done record are verified by reading their sectors'
    /// TAGs and CRCs and applied only if every sector verifies (so a batch is
    /// all-or-nothing). Ends with a fresh checkpoint.
    pub fn recover(nand: Nand, cfg: FtlConfig) -> Result<Ftl, FtlError> {
        Self::try_recover(nand, cfg).map_err(|f| f.error)
    }

    /// [`Ftl::recover`], giving the flash array back when recovery fails (for example
    /// when power is cut during recovery), so that it can be tried again.
    pub fn try_recover(nand: Nand, cfg: FtlConfig) -> Result<Ftl, RecoveryFailed> {
        let mut nand = nand;
        let fail = |error, nand| RecoveryFailed {
            error,
            nand: Box::new(nand),
        };
        let found = match Self::find_checkpoint(&mut nand, &cfg) {
            Ok(x) => x,
            Err(e) => return Err(fail(e, nand)),
        };
        let (ck, rssp_links, active, ckpt_blocks, t0, t) = found;
        if ck.ext_bytes != cfg.ext_bytes {
            let e = FtlError::Config(format!(
                "the device was formatted with {} extension bytes per MAP entry, not {}",
                ck.ext_bytes, cfg.ext_bytes
            ));
            return Err(fail(e, nand));
        }
        let mut f = Ftl::skeleton(nand, cfg, ck.lbas);
        match f.recover_from(ck, rssp_links, active, ckpt_blocks, t0, t) {
            Ok(()) => Ok(f),
            Err(e) => Err(fail(e, f.nand)),
        }
    }

    #[allow(clippy::type_complexity)]
    fn find_checkpoint(
        nand: &mut Nand,
        cfg: &FtlConfig,
    ) -> Result<
        (
            Checkpoint,
            [u64; LOG_LINKS],
            usize,
            Vec<u32>,
            SimTime,
            SimTime,
        ),
        FtlError,
    > {
        Self::check_config(nand, cfg)?;
        let ckpt_blocks = Self::well_known_ckpt_blocks(nand)?;
        let page_size = nand.geometry().page_size as usize;
        let ppb = nand.geometry().pages_per_block;
        let t0 = nand.now();
        // 1. The newest valid checkpoint record.
        let mut best: Option<(Checkpoint, [u64; LOG_LINKS], usize)> = None;
        let mut page = vec![0u8; page_size];
        let mut t = t0;
        for (ci, &b) in ckpt_blocks.iter().enumerate() {
            for p in 0..ppb {
                match nand.read(Ppa::new(BlockId(b), p), 0, &mut page, &mut [], t0) {
                    Ok(r) if r.erased => break,
                    Ok(r) => {
                        t = t.max(r.done);
                        if let Some(c) = Checkpoint::decode(&page) {
                            let tail = page.len() - 8 * LOG_LINKS;
                            let mut links = [NONE; LOG_LINKS];
                            for (i, l) in links.iter_mut().enumerate() {
                                *l = u64::from_le_bytes(
                                    page[tail + 8 * i..tail + 8 * i + 8]
                                        .try_into()
                                        .unwrap_or([0xFF; 8]),
                                );
                            }
                            if best.as_ref().is_none_or(|(bc, _, _)| c.seq > bc.seq) {
                                best = Some((c, links, ci));
                            }
                        }
                    }
                    Err(NandError::Uncorrectable { .. }) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        let (ck, rssp_links, active) = best.ok_or(FtlError::NotFormatted)?;
        Ok((ck, rssp_links, active, ckpt_blocks, t0, t))
    }

    fn recover_from(
        &mut self,
        ck: Checkpoint,
        rssp_links: [u64; LOG_LINKS],
        active: usize,
        ckpt_blocks: Vec<u32>,
        t0: SimTime,
        mut t: SimTime,
    ) -> Result<(), FtlError> {
        let wall0 = Instant::now();
        let f = self;
        f.recovering = true;
        let page_size = f.page_size;
        let ppb = f.ppb;
        let mut page = vec![0u8; page_size];
        f.ckpt_blocks = ckpt_blocks;
        f.ckpt_active = active;
        f.ckpt_seq = ck.seq;
        f.commit_seq = ck.next_commit;
        f.life_base = FtlStats::from_words(&ck.lifetime);
        f.rr = ck.rr;
        // 2. WEAR and bad blocks.
        for (i, &a) in ck.wear.iter().enumerate() {
            t = t.max(f.read_meta_page(a, Kind::Wear, i as u64, &mut page, t0)?);
            for k in 0..page_size / 4 {
                let b = i * page_size / 4 + k;
                if b < f.blocks.len() {
                    f.blocks[b].pe =
                        u32::from_le_bytes(page[k * 4..k * 4 + 4].try_into().unwrap_or([0; 4]));
                }
            }
        }
        for (i, &a) in ck.bbt.iter().enumerate() {
            t = t.max(f.read_meta_page(a, Kind::Bbt, i as u64, &mut page, t0)?);
            for k in 0..page_size * 8 {
                let b = i * page_size * 8 + k;
                if b < f.blocks.len() && page[k / 8] & (1 << (k % 8)) != 0 {
                    f.blocks[b].state = Use::Bad;
                }
            }
        }
        f.wear_pages = ck.wear.clone();
        f.bbt_pages = ck.bbt.clone();
        // 3. MAPT -> MAPS.
        let per = page_size / 8;
        for (mi, &a) in ck.mapt.iter().enumerate() {
            f.mapt[mi] = a;
            if a == NONE {
                continue;
            }
            t = t.max(f.read_meta_page(a, Kind::Maps, mi as u64, &mut page, t0)?);
            for k in 0..per {
                let idx = mi * per + k;
                if idx < f.maps.len() {
                    f.maps[idx] =
                        u64::from_le_bytes(page[k * 8..k * 8 + 8].try_into().unwrap_or([0xFF; 8]));
                }
            }
        }
        // 4. Block states for allocation during redo: erased blocks are free, anything
        //    written is provisionally full (classified after redo).
        for b in 0..f.blocks.len() {
            if f.blocks[b].state == Use::Bad {
                continue;
            }
            if f.ckpt_blocks.contains(&(b as u32)) {
                f.blocks[b].state = Use::Ckpt;
                continue;
            }
            let info = f.nand.block_info(BlockId(b as u32))?;
            f.blocks[b].state = if info.next_page == 0 {
                Use::Free
            } else {
                Use::Full
            };
        }
        f.free_count = f.blocks.iter().filter(|b| b.state == Use::Free).count() as u32;
        let mut live_log_blocks: Vec<(u32, u64)> = Vec::new();
        // 5. Redo from the RSSP.
        let mut rep = RecoveryReport {
            checkpoint_seq: ck.seq,
            ..RecoveryReport::default()
        };
        let mut pending: BTreeMap<u64, (bool, Vec<Entry>)> = BTreeMap::new();
        let mut links = rssp_links;
        let mut expect = ck.rssp_lsn;
        let mut oob = vec![0u8; f.oob_scratch.len()];
        'log: loop {
            let mut found = None;
            for &cand in links.iter() {
                if cand == NONE {
                    break;
                }
                let (b, p) = page_unaddr(cand);
                if b as usize >= f.blocks.len() || p >= ppb {
                    break;
                }
                match f
                    .nand
                    .read(Ppa::new(BlockId(b), p), 0, &mut page, &mut oob, t)
                {
                    Ok(r) if r.erased => break,
                    Ok(r) => {
                        t = t.max(r.done);
                        f.stats.meta_reads += 1;
                        if let Some(lp) = LogPage::decode(&page)
                            && lp.lsn == expect
                        {
                            found = Some((lp, b));
                            break;
                        }
                    }
                    Err(NandError::Uncorrectable { .. }) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            let Some((lp, b)) = found else { break 'log };
            rep.log_pages += 1;
            live_log_blocks.push((b, lp.lsn));
            for r in lp.records {
                match r {
                    Record::Rdesc { seq, entries } => pending
                        .entry(seq)
                        .or_insert((false, Vec::new()))
                        .1
                        .extend(entries),
                    Record::GcMove { seq, entries } => {
                        let e = pending.entry(seq).or_insert((true, Vec::new()));
                        e.0 = true;
                        e.1.extend(entries);
                    }
                    Record::Rdesca { seq, entries } => pending
                        .entry(seq)
                        .or_insert((false, Vec::new()))
                        .1
                        .extend(entries),
                    Record::Done { seq } => {
                        if let Some((gc, entries)) = pending.remove(&seq) {
                            t = t.max(f.redo(gc, &entries, t)?);
                            rep.commits_redone += 1;
                        }
                    }
                    Record::Trim { lpid, n } => {
                        for l in lpid..lpid.saturating_add(n).min(f.lbas) {
                            t = t.max(f.map_set(l, NONE, t)?);
                        }
                    }
                    Record::Ext { lpid, bytes } => {
                        if lpid < f.lbas && bytes.len() == f.cfg.ext_bytes as usize {
                            let ext = bytes.len();
                            let (s, tt) = f.map_slot((lpid / f.epp) as u32, t)?;
                            let o = (lpid % f.epp) as usize * ext;
                            f.slots[s].ext[o..o + ext].copy_from_slice(&bytes);
                            f.slots[s].dirty = true;
                            t = t.max(tt);
                        }
                    }
                }
            }
            links = lp.links;
            expect += 1;
            f.log.next_lsn = expect;
        }
        if f.log.next_lsn < ck.rssp_lsn {
            f.log.next_lsn = ck.rssp_lsn;
        }
        // 6. Commits without a done record: verify every sector, apply all or nothing.
        for (seq, (gc, entries)) in pending {
            let (ok, tt) = f.verify(seq, &entries, t)?;
            t = t.max(tt);
            if ok {
                t = t.max(f.redo(gc, &entries, t)?);
                rep.commits_verified += 1;
            } else {
                rep.commits_discarded += 1;
            }
            f.commit_seq = f.commit_seq.max(seq + 1);
        }
        // 7. Rebuild GBITV and block classes from the recovered MAP and tables.
        for mp in 0..f.maps.len() as u32 {
            // A MAP page never written and not touched by the redo maps nothing.
            if f.maps[mp as usize] == NONE && f.slot_of[mp as usize] == u32::MAX {
                continue;
            }
            let (s, tt) = f.map_slot(mp, t)?;
            t = t.max(tt);
            for i in 0..f.slots[s].entries.len() {
                let e = f.slots[s].entries[i];
                if e != NONE && e & CACHED == 0 {
                    let (b, _, _) = unpack(e);
                    if (b as usize) < f.blocks.len() {
                        f.set_valid(e, true);
                    }
                }
            }
        }
        let live_meta: Vec<u64> = f
            .maps
            .iter()
            .chain(f.mapt.iter())
            .chain(f.wear_pages.iter())
            .chain(f.bbt_pages.iter())
            .copied()
            .filter(|&a| a != NONE)
            .collect();
        for a in live_meta {
            let (b, _) = page_unaddr(a);
            let blk = &mut f.blocks[b as usize];
            blk.meta_live += 1;
            if blk.state == Use::Full {
                blk.state = Use::Meta;
            }
        }
        for (b, lsn) in live_log_blocks {
            let blk = &mut f.blocks[b as usize];
            if blk.state == Use::Full {
                blk.state = Use::Log;
                f.log_blocks += 1;
            }
            if blk.state == Use::Log {
                blk.max_lsn = blk.max_lsn.max(lsn);
            }
        }
        // Metadata written during this recovery (MAP evictions) sits in open META blocks.
        for s in 0..3 {
            for die in 0..f.dies as usize {
                if let Some((bi, _)) = f.open[s][die] {
                    let b = (die as u32 * f.bpd + bi) as usize;
                    f.blocks[b].state = if s == META { Use::Meta } else { Use::Full };
                }
                f.open[s][die] = None;
            }
        }
        // 8. Erase every written block with nothing live (data blocks open at the crash,
        //    log blocks before the RSSP, superseded metadata), then start a new log segment
        //    and take a checkpoint that makes it the redo start.
        for b in 0..f.blocks.len() as u32 {
            let blk = f.blocks[b as usize];
            if blk.state == Use::Full && blk.valid == 0 {
                f.erase_block(b, t)?;
            }
        }
        f.start_log()?;
        f.log.since_ckpt = 0;
        t = f.checkpoint(t)?;
        f.recovering = false;
        f.shrink_cache();
        rep.modeled_s = t.since(t0) as f64 / 1e9;
        rep.wall_s = wall0.elapsed().as_secs_f64();
        f.recovery = Some(rep);
        f.reset_stats();
        // 9. Refill the free pool before the first command. Every crash leaves the blocks
        //    that were open partly written; without this, cuts that keep striking before
        //    the first GC would drain the pool one recovery at a time. The GC here is
        //    ordinary post-recovery work (counted in the new stats, crash-safe like any
        //    GC); a device that is simply full stays readable.
        match f.ensure_free(0, t) {
            Ok(()) | Err(FtlError::NoSpace) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn redo(&mut self, gc: bool, entries: &[Entry], at: SimTime) -> Result<SimTime, FtlError> {
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
            if e.lpid >= self.lbas {
                continue;
            }
            if gc {
                let (cur, tt) = self.map_get(e.lpid, t)?;
                t = t.max(tt);
                if cur != e.old {
                    continue;
                }
            }
            t = t.max(self.map_set(e.lpid, e.new, t)?);
        }
        Ok(t)
    }

    /// Does every sector of a commit hold what its descriptor says (TAG LPID, sequence and CRC)?
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
        let mut data = vec![0u8; self.ss];
        let mut oob = vec![0u8; self.oob_sector];
        for (&lpid, &new) in &last {
            let (b, p, s) = unpack(new);
            if b as usize >= self.blocks.len() || p >= self.ppb || s >= self.spp {
                return Ok((false, t));
            }
            match self
                .nand
                .read(Ppa::new(BlockId(b), p), s, &mut data, &mut oob, at)
            {
                Ok(r) if !r.erased => {
                    t = t.max(r.done);
                    self.stats.meta_reads += 1;
                    match Tag::read(&oob[..TAG_BYTES]) {
                        Some(tag)
                            if tag.kind == Kind::Data
                                && tag.id == lpid
                                && tag.seq == seq as u32
                                && tag.crc == crc32c::crc32c(&data) => {}
                        _ => return Ok((false, t)),
                    }
                }
                Ok(_) | Err(NandError::Uncorrectable { .. }) => return Ok((false, t)),
                Err(e) => return Err(e.into()),
            }
        }
        Ok((true, t))
    }

    // ----------------------------------------------------------------- inspection

    /// The die of LBA `lba`'s current copy, if it is on flash (for tests and tools).
    pub fn die_of_lba(&mut self, lba: u64) -> Option<DieId> {
        let (e, _) = self.map_get(lba, SimTime::ZERO).ok()?;
        if e == NONE || is_cached(e) {
            return None;
        }
        Some(self.nand.addr().die_of(BlockId(unpack(e).0)))
    }

    /// Block counts per state, for diagnostics: free, open, full, meta, log, ckpt, bad,
    /// and the valid sectors in full blocks.
    pub fn block_census(&self) -> String {
        let mut c = [0u32; 7];
        let mut valid_full = 0u64;
        let mut meta_live = 0u64;
        for b in &self.blocks {
            let i = match b.state {
                Use::Free => 0,
                Use::Open(_) => 1,
                Use::Full => {
                    valid_full += b.valid as u64;
                    2
                }
                Use::Meta => {
                    meta_live += b.meta_live as u64;
                    3
                }
                Use::Log => 4,
                Use::Ckpt => 5,
                Use::Bad => 6,
            };
            c[i] += 1;
        }
        format!(
            "free {} open {} full {} (valid sectors {valid_full}) meta {} (live pages {meta_live}) log {} ckpt {} bad {}; lbas {} map pages {} cache {}/{}",
            c[0],
            c[1],
            c[2],
            c[3],
            c[4],
            c[5],
            c[6],
            self.lbas,
            self.maps.len(),
            self.slots.len(),
            self.slot_cap
        )
    }

    /// Check internal invariants (valid counts agree with the bitmap and MAP); for tests.
    pub fn check_invariants(&mut self) -> Result<(), String> {
        let mut counts = vec![0u32; self.blocks.len()];
        for mp in 0..self.maps.len() as u32 {
            let (s, _) = self
                .map_slot(mp, SimTime::ZERO)
                .map_err(|e| e.to_string())?;
            for (i, &e) in self.slots[s].entries.iter().enumerate() {
                // A buffered (write-back) sector keeps its durable old copy live until commit.
                let e = if is_cached(e) {
                    let (b, k) = (((e >> 8) & 0xFF_FFFF) as usize, (e & 0xFF) as usize);
                    self.bufs.get(b).map_or(NONE, |buf| buf.olds[k])
                } else {
                    e
                };
                if e == NONE {
                    continue;
                }
                let (b, p, sec) = unpack(e);
                if !self.is_valid(b, p, sec) {
                    return Err(format!(
                        "LBA {} maps to a sector not marked valid",
                        mp as u64 * self.epp + i as u64
                    ));
                }
                counts[b as usize] += 1;
            }
        }
        for (b, blk) in self.blocks.iter().enumerate() {
            if blk.valid != counts[b] {
                return Err(format!(
                    "block {b} ({:?}): valid count {} but {} mapped sectors",
                    blk.state, blk.valid, counts[b]
                ));
            }
            if blk.state == Use::Free && blk.valid != 0 {
                return Err(format!("free block {b} holds valid data"));
            }
        }
        let free = self.blocks.iter().filter(|b| b.state == Use::Free).count() as u32;
        if free != self.free_count {
            return Err(format!(
                "free count {} but {free} free blocks",
                self.free_count
            ));
        }
        Ok(())
    }
}
