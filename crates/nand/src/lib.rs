//! Emulated NAND flash media: the bottom layer of csd.
//!
//! Realizes the flash model of the batch-io paper §2.1 and Table 1 (pages made of
//! sectors, each sector with an out-of-band TAG; erase per block, program per page, read
//! per sector) and the array side of the in-storage-scan paper §3–§4.1 (channels × ways,
//! tR overlapped by interleaving over the ways, the channel bus as the transfer path).
//!
//! What it enforces, each with a typed [`NandError`]:
//! * a page is programmed only when erased, pages of a block in order, erase per block;
//! * reading an erased page returns the erased pattern (`0xFF`) and says so;
//! * factory bad blocks refuse every operation; P/E cycles are counted per block and a
//!   block past its rated endurance uses the "worn" failure probabilities;
//! * program and erase failures, raw bit errors with an ECC that corrects up to N bits
//!   per sector (beyond that a typed uncorrectable error naming the sector);
//! * a power cut armed at the N-th operation or at a simulated instant: the operation in
//!   flight is torn (a program keeps only its first k sectors; the rest read back as
//!   uncorrectable, which is how a controller detects it), and every later operation fails
//!   with [`NandError::PowerLoss`] until [`Nand::power_on`].
//!
//! Timing: each operation reserves its die and its channel in path order (read: die for
//! tR, then the channel for the transfer out; program: channel in, then die for tPROG;
//! erase: die for tBERS) and returns its completion instant. The die is held for tR only
//! (cache read: the page register is free for the next array read while the previous page
//! is still on the bus), which is what lets interleaving over ways hide tR. Multi-plane
//! operations are not modeled: a die runs one array operation at a time.
//!
//! Choices: fault decisions are counter-based hashes of (seed, operation number), so a
//! run is reproducible from its seed; bit errors are drawn per sector from a Poisson law
//! with mean `bits × RBER(P/E)`, RBER growing linearly from `rber_fresh` to
//! `rber_end_of_life` at the rated endurance. Reads move only the requested sectors, plus
//! their OOB bytes only when the caller asks for them.

pub mod addr;
mod fault;
mod store;

pub use addr::{AddrMap, BlockId, DieId, PhysAddr, Ppa};
pub use store::{Access, BlockMeta};

use csd_sim::config::FaultConfig;
use csd_sim::{
    DeviceConfig, EnergyCounters, Geometry, Rate, Resource, ResourceClass, SimTime, Utilization,
};
use fault::{mix, poisson, salt, uniform};
use std::path::{Path, PathBuf};
use store::{
    BLOCK_FACTORY_BAD, Layout, PAGE_ERASE_TORN, PAGE_ERASED, PAGE_PROGRAM_FAILED, PAGE_PROGRAMMED,
    PAGE_TORN_BASE, Store,
};
use thiserror::Error;

/// Errors of the flash media.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum NandError {
    /// An address or index is outside the geometry.
    #[error("{what} {value} is out of range (the device has {limit})")]
    OutOfRange {
        /// Which part of the address.
        what: &'static str,
        /// The value given.
        value: u64,
        /// The number of valid values.
        limit: u64,
    },
    /// A buffer has the wrong length.
    #[error("{what} buffer is {got} bytes; expected {expected}")]
    BufferSize {
        /// Which buffer.
        what: &'static str,
        /// Bytes expected.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// Program of a page that is not erased.
    #[error("cannot program {ppa}: the page is not erased (erase the block first)")]
    ProgramNotErased {
        /// The page.
        ppa: Ppa,
    },
    /// Program out of page order.
    #[error(
        "cannot program {ppa}: pages of a block are programmed in order; next is page {expected}"
    )]
    ProgramOutOfOrder {
        /// The page.
        ppa: Ppa,
        /// The page that must be programmed next.
        expected: u32,
    },
    /// The block is marked bad.
    #[error("{block} is a bad block")]
    BadBlock {
        /// The block.
        block: BlockId,
    },
    /// The program failed (status fail); the page's contents are unreliable.
    #[error("program of {ppa} failed")]
    ProgramFailed {
        /// The page.
        ppa: Ppa,
        /// When the failed operation completed.
        done: SimTime,
    },
    /// The erase failed; the block should be retired.
    #[error("erase of {block} failed")]
    EraseFailed {
        /// The block.
        block: BlockId,
        /// When the failed operation completed.
        done: SimTime,
    },
    /// More bit errors than the ECC corrects (or a torn/failed page).
    #[error("uncorrectable read at {ppa} sector {sector} ({bit_errors} bit errors)")]
    Uncorrectable {
        /// The page.
        ppa: Ppa,
        /// The first failing sector (index within the page).
        sector: u32,
        /// Bit errors found (u32::MAX for torn or failed pages).
        bit_errors: u32,
        /// When the failed read completed.
        done: SimTime,
    },
    /// Power was cut; nothing works until `power_on`.
    #[error("power loss: the device is off")]
    PowerLoss,
    /// The image file cannot be used.
    #[error("image {path}: {reason}")]
    Image {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The file system holding the image has no room for a block about to be written.
    #[error(
        "image file system is full: {path} cannot store block {block} (free space on that file system or move the image); the device stays readable"
    )]
    ImageFull {
        /// The file.
        path: PathBuf,
        /// The block that could not be stored.
        block: u32,
    },
    /// Another process holds the image.
    #[error("image {path} is in use by another process")]
    Locked {
        /// The file.
        path: PathBuf,
    },
    /// The image was made with another geometry.
    #[error(
        "image {path} has geometry {image}, not the requested {requested}; use a matching preset or omit it"
    )]
    GeometryMismatch {
        /// The file.
        path: PathBuf,
        /// Geometry recorded in the image.
        image: String,
        /// Geometry asked for.
        requested: String,
    },
    /// The device config is invalid.
    #[error(transparent)]
    Config(#[from] csd_sim::ConfigError),
}

/// When to cut power.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerCut {
    /// During the n-th media operation from now (1 = the next one).
    AtOp(u64),
    /// During the first operation that would complete after this instant.
    AtTime(SimTime),
}

/// What a successful read returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadDone {
    /// When the data is in the controller.
    pub done: SimTime,
    /// Bit errors corrected by the ECC in this read.
    pub corrected_bits: u32,
    /// The page is erased (the buffer holds `0xFF`).
    pub erased: bool,
}

/// The state of one page, for inspection and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageState {
    /// Erased.
    Erased,
    /// Programmed.
    Programmed,
    /// A power cut tore the program after `good_sectors` complete sectors.
    Torn {
        /// Sectors programmed completely.
        good_sectors: u32,
    },
    /// The program failed.
    ProgramFailed,
    /// An erase of the block was interrupted.
    EraseTorn,
}

/// Per-block facts, for inspection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockInfo {
    /// Program/erase cycles so far.
    pub pe_cycles: u32,
    /// Next page to program.
    pub next_page: u32,
    /// Marked bad at the factory.
    pub factory_bad: bool,
}

/// Counters of the media's work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NandStats {
    /// Array page reads (tR), including those that failed.
    pub page_reads: u64,
    /// Sectors delivered by reads.
    pub sectors_read: u64,
    /// Reads of erased pages.
    pub erased_reads: u64,
    /// Page programs attempted.
    pub programs: u64,
    /// Block erases attempted.
    pub erases: u64,
    /// User bytes moved out by reads.
    pub bytes_read: u64,
    /// User bytes programmed.
    pub bytes_programmed: u64,
    /// Bytes over the channel buses (data and OOB).
    pub channel_bytes: u64,
    /// Bit errors corrected by the ECC.
    pub corrected_bits: u64,
    /// Reads that failed as uncorrectable.
    pub uncorrectable_reads: u64,
    /// Programs that failed.
    pub program_failures: u64,
    /// Erases that failed.
    pub erase_failures: u64,
    /// Power cuts taken.
    pub power_cuts: u64,
}

/// An emulated NAND flash array.
pub struct Nand {
    cfg: DeviceConfig,
    map: AddrMap,
    layout: Layout,
    sector_size: usize,
    sectors: u32,
    oob_sector: usize,
    ch_rate: Rate,
    /// Channel time per page read besides the transfer, per page type: `t_R / N_way`
    /// under serial read sequencing (scan paper eq. 1), else 0.
    read_seq_ns: Vec<u64>,
    t_read: Vec<u64>,
    t_prog: Vec<u64>,
    t_erase: u64,
    faults: FaultConfig,
    store: Store,
    dies: Vec<Resource>,
    channels: Vec<Resource>,
    stats: NandStats,
    op_seq: u64,
    /// Operations that may have changed stored bytes (programs, erases, injected
    /// corruption, power cycles): see [`Nand::content_epoch`].
    content_epoch: u64,
    powered: bool,
    cut: Option<PowerCut>,
    checked: CheckedSectors,
}

/// A memo of the FTL's end-to-end check (see [`Nand::sector_checked`]): one bit per
/// sector, set once the sector's bytes matched their CRC, cleared for a whole block
/// whenever any of its bytes may change (every path that writes a block's bytes goes
/// through [`Nand::block_bytes_mut`]). Allocated per block when first used.
struct CheckedSectors {
    words_per_block: usize,
    sectors_per_page: usize,
    bits: Vec<Option<Box<[u64]>>>,
}

impl CheckedSectors {
    fn new(blocks: usize, pages: usize, sectors_per_page: usize) -> CheckedSectors {
        CheckedSectors {
            words_per_block: (pages * sectors_per_page).div_ceil(64),
            sectors_per_page,
            bits: (0..blocks).map(|_| None).collect(),
        }
    }

    #[inline]
    fn index(&self, page: u32, sector: u32) -> (usize, u64) {
        let i = page as usize * self.sectors_per_page + sector as usize;
        (i / 64, 1u64 << (i % 64))
    }

    #[inline]
    fn get(&self, b: usize, page: u32, sector: u32) -> bool {
        let (w, m) = self.index(page, sector);
        self.bits
            .get(b)
            .and_then(Option::as_ref)
            .and_then(|v| v.get(w))
            .is_some_and(|x| x & m != 0)
    }

    fn set(&mut self, b: usize, page: u32, sector: u32) {
        let (w, m) = self.index(page, sector);
        let n = self.words_per_block;
        if let Some(slot) = self.bits.get_mut(b) {
            let v = slot.get_or_insert_with(|| vec![0u64; n].into_boxed_slice());
            if let Some(x) = v.get_mut(w) {
                *x |= m;
            }
        }
    }

    #[inline]
    fn clear_block(&mut self, b: usize) {
        if let Some(slot) = self.bits.get_mut(b) {
            *slot = None;
        }
    }
}

impl Nand {
    /// A fresh in-memory device (all blocks erased, factory bad blocks drawn from the
    /// fault seed). Memory is spent only on blocks that get programmed.
    pub fn new_in_memory(cfg: DeviceConfig) -> Result<Nand, NandError> {
        cfg.validate()?;
        let meta = factory_meta(&cfg);
        let store = Store::new_mem(&cfg.geometry, meta);
        Ok(Nand::with_store(cfg, store))
    }

    /// Create a new image file at `path` (it must not exist) holding a fresh device.
    pub fn create_image(path: &Path, cfg: DeviceConfig) -> Result<Nand, NandError> {
        cfg.validate()?;
        let meta = factory_meta(&cfg);
        let store = Store::create_file(path, &cfg, meta)?;
        Ok(Nand::with_store(cfg, store))
    }

    /// Open an image file. When `expect` is given, the image's geometry must equal it.
    ///
    /// The image is locked for exclusive use while open. Pages whose program had not
    /// committed when a previous process died read as erased; every completed program
    /// reads back intact.
    pub fn open_image(path: &Path, expect: Option<&Geometry>) -> Result<Nand, NandError> {
        Self::open_image_with(path, expect, Access::ReadWrite)
    }

    /// Open an image file for `access`. Opening costs O(metadata): the header and the
    /// per-block table are read and checked, no block is touched (a version-1 image gets
    /// one scan of its page states, whose write pointers could lag a committed page).
    /// With [`Access::ReadOnly`] the file is never written: changes stay in memory.
    pub fn open_image_with(
        path: &Path,
        expect: Option<&Geometry>,
        access: Access,
    ) -> Result<Nand, NandError> {
        let (store, cfg, legacy) = Store::open_file(path, access)?;
        if let Some(g) = expect
            && *g != cfg.geometry
        {
            return Err(NandError::GeometryMismatch {
                path: path.to_path_buf(),
                image: geo_string(&cfg.geometry),
                requested: geo_string(g),
            });
        }
        let mut n = Nand::with_store(cfg, store);
        if legacy {
            n.repair_write_pointers();
        }
        Ok(n)
    }

    fn with_store(cfg: DeviceConfig, store: Store) -> Nand {
        let g = cfg.geometry;
        let map = AddrMap::new(g);
        let layout = *store.layout();
        Nand {
            map,
            layout,
            sector_size: g.sector_size as usize,
            sectors: g.sectors_per_page(),
            oob_sector: g.oob_per_sector as usize,
            ch_rate: cfg.channel.rate(),
            read_seq_ns: (0..cfg.flash.t_read_us.len() as u32)
                .map(|i| {
                    if cfg.channel.serial_read_sequencing {
                        cfg.flash.t_read_ns(i) / (g.ways * g.dies_per_chip).max(1) as u64
                    } else {
                        0
                    }
                })
                .collect(),
            t_read: (0..cfg.flash.t_read_us.len() as u32)
                .map(|i| cfg.flash.t_read_ns(i))
                .collect(),
            t_prog: (0..cfg.flash.t_prog_us.len() as u32)
                .map(|i| cfg.flash.t_prog_ns(i))
                .collect(),
            t_erase: cfg.flash.t_erase_ns(),
            faults: cfg.faults,
            dies: vec![Resource::new(); g.dies() as usize],
            channels: vec![Resource::new(); g.channels as usize],
            stats: NandStats::default(),
            op_seq: 0,
            content_epoch: 0,
            powered: true,
            cut: None,
            checked: CheckedSectors::new(
                store.blocks(),
                g.pages_per_block as usize,
                g.sectors_per_page() as usize,
            ),
            store,
            cfg,
        }
    }

    /// The bytes of block `b` for writing (see `Store::block_mut`). Every change to a
    /// block's bytes comes through here, which forgets the block's checked sectors.
    #[inline]
    fn block_bytes_mut(&mut self, b: usize, upto: usize) -> Result<&mut [u8], NandError> {
        self.checked.clear_block(b);
        self.store.block_mut(b, upto)
    }

    /// True if sector `sector` of page `p` was marked by [`Nand::mark_sector_checked`]
    /// and no byte of its block has changed since. An emulator shortcut for the FTL's
    /// end-to-end check (TAG CRC of the data): its outcome cannot differ while the bytes
    /// are the same, so a sector is hashed once per program, not once per read. It has
    /// no modeled effect (the check costs no modeled time either way) and starts empty
    /// at every open, so damage done to an image between runs is still found.
    #[inline]
    pub fn sector_checked(&self, p: Ppa, sector: u32) -> bool {
        self.checked.get(p.block.0 as usize, p.page, sector)
    }

    /// Record that sector `sector` of page `p` matched its CRC (see
    /// [`Nand::sector_checked`]); out-of-range addresses are ignored.
    pub fn mark_sector_checked(&mut self, p: Ppa, sector: u32) {
        if p.page < self.layout.pages as u32 && sector < self.sectors {
            self.checked.set(p.block.0 as usize, p.page, sector);
        }
    }

    /// Version-1 images moved a block's write pointer after the page's commit point, so
    /// after a crash of the process it may lag the last committed page; recompute it from
    /// the page states. (Version 2 moves the pointer first: it never lags.)
    fn repair_write_pointers(&mut self) {
        for b in 0..self.store.blocks() {
            let Some(bytes) = self.store.block(b) else {
                continue;
            };
            let states = &bytes[..self.layout.pages];
            let next = states
                .iter()
                .rposition(|&s| s != PAGE_ERASED)
                .map_or(0, |i| i + 1) as u32;
            let mut m = self.store.meta(b);
            if m.next_page != next {
                m.next_page = next;
                self.store.set_meta(b, m);
            }
        }
    }

    /// The device configuration.
    pub fn config(&self) -> &DeviceConfig {
        &self.cfg
    }

    /// The geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.cfg.geometry
    }

    /// Address arithmetic.
    pub fn addr(&self) -> &AddrMap {
        &self.map
    }

    /// How the backing image was opened (read-write for the memory backend).
    pub fn access(&self) -> Access {
        self.store.access()
    }

    /// The image file, if this device is backed by one.
    pub fn image_path(&self) -> Option<&Path> {
        self.store.path()
    }

    /// Media counters.
    pub fn stats(&self) -> &NandStats {
        &self.stats
    }

    /// Energy-relevant counters of the media and channels.
    pub fn energy_counters(&self) -> EnergyCounters {
        EnergyCounters {
            page_reads: self.stats.page_reads,
            page_programs: self.stats.programs,
            block_erases: self.stats.erases,
            channel_bytes: self.stats.channel_bytes,
            ..EnergyCounters::default()
        }
    }

    /// Die resources (busy time, free instant).
    pub fn dies(&self) -> &[Resource] {
        &self.dies
    }

    /// Channel resources.
    pub fn channels(&self) -> &[Resource] {
        &self.channels
    }

    /// Utilization of dies and channels over a window of `window_ns`.
    pub fn utilization(&self, window_ns: u64) -> [Utilization; 2] {
        [
            Utilization::of(ResourceClass::Die, &self.dies, window_ns),
            Utilization::of(ResourceClass::Channel, &self.channels, window_ns),
        ]
    }

    /// Forget busy times and counters (not contents), to start a measurement window.
    pub fn reset_counters(&mut self) {
        self.stats = NandStats::default();
        self.dies.iter_mut().for_each(Resource::reset_counters);
        self.channels.iter_mut().for_each(Resource::reset_counters);
    }

    /// Bytes of memory (or mapped image) that hold block contents.
    pub fn resident_bytes(&self) -> u64 {
        self.store.resident_block_bytes()
    }

    /// Arm a power cut. Replaces any cut armed before.
    pub fn arm_power_cut(&mut self, cut: PowerCut) {
        self.cut = Some(match cut {
            PowerCut::AtOp(n) => PowerCut::AtOp(self.op_seq + n.max(1)),
            t => t,
        });
    }

    /// Fault injection: flip the bits of `mask` in byte `byte` of sector `sector` of page
    /// `p`, as data retention loss or a damaged image would, without going through a
    /// program (the page keeps its state; the ECC model does not see the change, so only
    /// an end-to-end checksum above the media can). Does nothing to an erased page.
    pub fn corrupt(&mut self, p: Ppa, sector: u32, byte: usize, mask: u8) -> Result<(), NandError> {
        self.check_ppa(p)?;
        if sector >= self.sectors || byte >= self.sector_size {
            return Err(NandError::OutOfRange {
                what: "sector byte",
                value: sector as u64 * self.sector_size as u64 + byte as u64,
                limit: self.sectors as u64 * self.sector_size as u64,
            });
        }
        if self.state_of(p) == PageState::Erased {
            return Ok(());
        }
        let range = self.layout.slot_range(p.page);
        let at = range.start + sector as usize * self.sector_size + byte;
        let bytes = self.block_bytes_mut(p.block.0 as usize, range.end)?;
        bytes[at] ^= mask;
        self.content_epoch += 1;
        Ok(())
    }

    /// Fault injection: as if the process died inside a program of `p` after the
    /// block's write pointer moved and before the page's commit point (its state byte;
    /// see [`Nand::program`]): the pointer is past `p` and the page stays erased. `p`
    /// must be the block's next page to program.
    pub fn interrupt_program(&mut self, p: Ppa) -> Result<(), NandError> {
        self.check_ppa(p)?;
        let b = p.block.0 as usize;
        let mut meta = self.store.meta(b);
        if p.page != meta.next_page || self.state_of(p) != PageState::Erased {
            return Err(NandError::ProgramOutOfOrder {
                ppa: p,
                expected: meta.next_page,
            });
        }
        meta.next_page = p.page + 1;
        self.store.set_meta(b, meta);
        self.content_epoch += 1;
        Ok(())
    }

    /// Disarm a pending power cut.
    pub fn disarm_power_cut(&mut self) {
        self.cut = None;
    }

    /// Whether the device has power.
    pub fn is_powered(&self) -> bool {
        self.powered
    }

    /// Cut power now (as if the plug were pulled between operations).
    pub fn power_off(&mut self) {
        self.content_epoch += 1;
        if self.powered {
            self.stats.power_cuts += 1;
        }
        self.powered = false;
        self.cut = None;
    }

    /// Restore power. Flash contents persist; queues are empty, so every resource is
    /// free from the latest instant any of them was busy until.
    pub fn power_on(&mut self) {
        let now = self.now();
        self.dies
            .iter_mut()
            .chain(self.channels.iter_mut())
            .for_each(|r| r.power_cycle(now));
        self.powered = true;
    }

    /// The latest instant any die or channel is busy until.
    pub fn now(&self) -> SimTime {
        self.dies
            .iter()
            .chain(self.channels.iter())
            .map(Resource::free_at)
            .max()
            .unwrap_or_default()
    }

    /// Media operations performed so far (the counter power cuts are armed against).
    pub fn op_count(&self) -> u64 {
        self.op_seq
    }

    /// A counter that moves whenever stored bytes may have changed: every program,
    /// erase, injected corruption and power cut (reads never move it). Bytes seen at
    /// one value are the stored bytes for as long as it keeps that value, which lets a
    /// caller reuse work done on them (e.g. pages evaluated ahead of a modeled scan).
    /// Not a statistic: [`Nand::reset_counters`] leaves it alone.
    pub fn content_epoch(&self) -> u64 {
        self.content_epoch
    }

    /// Force the image file to stable storage.
    pub fn sync(&mut self) -> Result<(), NandError> {
        self.store.sync()
    }

    /// Facts about one block.
    pub fn block_info(&self, b: BlockId) -> Result<BlockInfo, NandError> {
        self.check_block(b)?;
        let m = self.store.meta(b.0 as usize);
        Ok(BlockInfo {
            pe_cycles: m.pe_cycles,
            next_page: m.next_page,
            factory_bad: m.flags & BLOCK_FACTORY_BAD != 0,
        })
    }

    /// The state of one page.
    pub fn page_state(&self, p: Ppa) -> Result<PageState, NandError> {
        self.check_ppa(p)?;
        Ok(self.state_of(p))
    }

    fn state_of(&self, p: Ppa) -> PageState {
        let s = self
            .store
            .block(p.block.0 as usize)
            .map_or(PAGE_ERASED, |b| b[p.page as usize]);
        match s {
            PAGE_ERASED => PageState::Erased,
            PAGE_PROGRAMMED => PageState::Programmed,
            PAGE_PROGRAM_FAILED => PageState::ProgramFailed,
            PAGE_ERASE_TORN => PageState::EraseTorn,
            k => PageState::Torn {
                good_sectors: (k - PAGE_TORN_BASE) as u32,
            },
        }
    }

    #[inline]
    fn check_block(&self, b: BlockId) -> Result<(), NandError> {
        if b.0 >= self.map.blocks() {
            return Err(NandError::OutOfRange {
                what: "block",
                value: b.0 as u64,
                limit: self.map.blocks() as u64,
            });
        }
        Ok(())
    }

    #[inline]
    fn check_ppa(&self, p: Ppa) -> Result<(), NandError> {
        self.check_block(p.block)?;
        if p.page as usize >= self.layout.pages {
            return Err(NandError::OutOfRange {
                what: "page",
                value: p.page as u64,
                limit: self.layout.pages as u64,
            });
        }
        Ok(())
    }

    #[inline]
    fn check_power(&self) -> Result<(), NandError> {
        if self.powered {
            Ok(())
        } else {
            Err(NandError::PowerLoss)
        }
    }

    /// Does the armed cut strike the operation that just got number `self.op_seq` and
    /// would complete at `end`?
    #[inline]
    fn cut_strikes(&mut self, end: SimTime) -> bool {
        let hit = match self.cut {
            None => false,
            Some(PowerCut::AtOp(n)) => self.op_seq >= n,
            Some(PowerCut::AtTime(t)) => end > t,
        };
        if hit {
            self.power_off();
        }
        hit
    }

    #[inline]
    fn rber(&self, pe: u32) -> f64 {
        let f = &self.faults;
        if f.rber_fresh == 0.0 && f.rber_end_of_life == 0.0 {
            return 0.0;
        }
        let wear = pe as f64 / self.cfg.flash.endurance as f64;
        (f.rber_fresh + (f.rber_end_of_life - f.rber_fresh) * wear).clamp(0.0, 1.0)
    }

    #[inline]
    fn worn(&self, m: &BlockMeta) -> bool {
        m.pe_cycles >= self.cfg.flash.endurance
    }

    /// Read `data.len() / sector_size` sectors of page `p` starting at `first_sector`
    /// into `data`, and their OOB bytes into `oob` when it is not empty
    /// (`oob.len()` must then be `sectors × oob_per_sector`). The operation starts no
    /// earlier than `at`.
    pub fn read(
        &mut self,
        p: Ppa,
        first_sector: u32,
        data: &mut [u8],
        oob: &mut [u8],
        at: SimTime,
    ) -> Result<ReadDone, NandError> {
        self.read_impl(p, first_sector, data, oob, true, at)
    }

    /// Warm the CPU caches for a read of `sectors` sectors of page `p` from
    /// `first_sector` that the caller will issue soon: the page state, the block's
    /// metadata, the sectors' data and their OOB bytes. Only a hint to the host CPU: it
    /// changes no state, no counter and no modeled time, and an address out of range or
    /// a block never programmed is ignored. The emulator's random reads are bound by
    /// memory latency (the MAP entry, then the page); hinting the next command's lines
    /// while the current one runs overlaps those misses.
    #[inline]
    pub fn prefetch(&self, p: Ppa, first_sector: u32, sectors: u32) {
        let b = p.block.0 as usize;
        if b >= self.store.blocks()
            || p.page >= self.layout.pages as u32
            || first_sector.saturating_add(sectors) > self.sectors
        {
            return;
        }
        let Some(bytes) = self.store.block(b) else {
            return;
        };
        let ss = self.sector_size;
        let slot = &bytes[self.layout.slot_range(p.page)];
        let d0 = first_sector as usize * ss;
        let o0 = self.sectors as usize * ss + first_sector as usize * self.oob_sector;
        prefetch_lines(&bytes[p.page as usize..p.page as usize + 1]);
        prefetch_lines(&slot[d0..d0 + sectors as usize * ss]);
        prefetch_lines(&slot[o0..o0 + sectors as usize * self.oob_sector]);
        self.store.prefetch_meta(b);
    }

    /// [`Nand::read`] with the sectors' OOB bytes delivered alongside, as a controller's
    /// ECC engine sees them with each codeword (`oob` must be `sectors × oob_per_sector`
    /// bytes). Unlike an explicit OOB read, the spare bytes are not charged on the
    /// channel, just as the ECC parity that travels with every sector is not: the FTL's
    /// end-to-end check of each sector's TAG and CRC costs no modeled time.
    pub fn read_with_tags(
        &mut self,
        p: Ppa,
        first_sector: u32,
        data: &mut [u8],
        oob: &mut [u8],
        at: SimTime,
    ) -> Result<ReadDone, NandError> {
        if oob.is_empty() {
            return Err(NandError::BufferSize {
                what: "read OOB",
                expected: data.len() / self.sector_size.max(1) * self.oob_sector,
                got: 0,
            });
        }
        self.read_impl(p, first_sector, data, oob, false, at)
    }

    /// Read the OOB (spare) bytes of every sector of page `p` into `oob`
    /// (`oob_per_page` bytes), e.g. to recover the TAG of a sector whose data is
    /// uncorrectable. The spare area has its own, stronger ECC in this model (bit errors
    /// are drawn for data only), so this fails only for a torn or failed program or an
    /// interrupted erase. An erased page fills `oob` with `0xFF`. Costs tR and the
    /// transfer of the OOB bytes.
    pub fn read_oob(&mut self, p: Ppa, oob: &mut [u8], at: SimTime) -> Result<ReadDone, NandError> {
        self.check_power()?;
        self.check_ppa(p)?;
        let want = self.sectors as usize * self.oob_sector;
        if oob.len() != want {
            return Err(NandError::BufferSize {
                what: "read OOB",
                expected: want,
                got: oob.len(),
            });
        }
        let b = p.block.0 as usize;
        if self.store.meta(b).flags & BLOCK_FACTORY_BAD != 0 {
            return Err(NandError::BadBlock { block: p.block });
        }
        self.op_seq += 1;
        let die = self.map.die_of(p.block);
        let ch = self.map.channel_of(die) as usize;
        let kind = p.page as usize % self.t_read.len();
        let (_, die_end) = self.dies[die.0 as usize].reserve(at, self.t_read[kind]);
        let bus_ns = self.ch_rate.transfer_ns(want as u64) + self.read_seq_ns[kind];
        let (_, done) = self.channels[ch].reserve(die_end, bus_ns);
        if self.cut_strikes(done) {
            return Err(NandError::PowerLoss);
        }
        self.stats.page_reads += 1;
        self.stats.channel_bytes += want as u64;
        let state = self
            .store
            .block(b)
            .map_or(PAGE_ERASED, |bytes| bytes[p.page as usize]);
        if state == PAGE_ERASED {
            oob.fill(0xFF);
            self.stats.erased_reads += 1;
            return Ok(ReadDone {
                done,
                corrected_bits: 0,
                erased: true,
            });
        }
        if state != PAGE_PROGRAMMED {
            self.stats.uncorrectable_reads += 1;
            return Err(NandError::Uncorrectable {
                ppa: p,
                sector: 0,
                bit_errors: u32::MAX,
                done,
            });
        }
        let bytes = self.store.block(b).unwrap_or(&[]);
        let slot = &bytes[self.layout.slot_range(p.page)];
        let o0 = self.sectors as usize * self.sector_size;
        oob.copy_from_slice(&slot[o0..o0 + want]);
        Ok(ReadDone {
            done,
            corrected_bits: 0,
            erased: false,
        })
    }

    fn read_impl(
        &mut self,
        p: Ppa,
        first_sector: u32,
        data: &mut [u8],
        oob: &mut [u8],
        charge_oob: bool,
        at: SimTime,
    ) -> Result<ReadDone, NandError> {
        let ss = self.sector_size;
        if data.is_empty() || !data.len().is_multiple_of(ss) {
            return Err(NandError::BufferSize {
                what: "read data",
                expected: ss,
                got: data.len(),
            });
        }
        let n = (data.len() / ss) as u32;
        let want_oob = !oob.is_empty();
        if want_oob && oob.len() != n as usize * self.oob_sector {
            return Err(NandError::BufferSize {
                what: "read OOB",
                expected: n as usize * self.oob_sector,
                got: oob.len(),
            });
        }
        let (b, done) = self.begin_read(p, first_sector, n, want_oob && charge_oob, at)?;
        // Copy first and look at the page state after: the copy's memory traffic then
        // overlaps the state byte's (both are cache misses on a large device). Whatever
        // the state turns out to be, the caller sees only what it says.
        if let Some(bytes) = self.store.block(b) {
            let slot = &bytes[self.layout.slot_range(p.page)];
            let d0 = first_sector as usize * ss;
            // Ask for every line of the sectors at once, so that their cache misses
            // overlap instead of the copy meeting them one after the other.
            prefetch_lines(&bytes[p.page as usize..p.page as usize + 1]);
            prefetch_lines(&slot[d0..d0 + data.len()]);
            data.copy_from_slice(&slot[d0..d0 + data.len()]);
            if want_oob {
                let o0 = self.sectors as usize * ss + first_sector as usize * self.oob_sector;
                oob.copy_from_slice(&slot[o0..o0 + oob.len()]);
            }
        }
        let r = self.finish_read(p, first_sector, n, done);
        if matches!(r, Ok(ReadDone { erased: true, .. })) {
            data.fill(0xFF);
            oob.fill(0xFF);
        }
        r
    }

    /// [`Nand::read_with_tags`] without the copy: the same checks, modeled time, bit
    /// errors and counters, after which [`Nand::stored_sectors`] gives the sectors'
    /// data and OOB bytes where the medium keeps them. An emulator shortcut for readers
    /// that only look at the bytes (the device's own firmware scanning a page in place):
    /// it models exactly what a read with tags models.
    pub fn read_in_place(
        &mut self,
        p: Ppa,
        first_sector: u32,
        sectors: u32,
        at: SimTime,
    ) -> Result<ReadDone, NandError> {
        if sectors == 0 {
            return Err(NandError::BufferSize {
                what: "read data",
                expected: self.sector_size,
                got: 0,
            });
        }
        let (_, done) = self.begin_read(p, first_sector, sectors, false, at)?;
        self.finish_read(p, first_sector, sectors, done)
    }

    /// The stored data and OOB bytes of `sectors` sectors of page `p` from
    /// `first_sector`, as [`Nand::read_in_place`] read them; `None` for an address out
    /// of range or a block that holds no bytes (never programmed since erase). Only
    /// meaningful after a successful read of the same sectors: the bytes of an erased,
    /// torn or failed page are whatever the medium holds.
    pub fn stored_sectors(
        &self,
        p: Ppa,
        first_sector: u32,
        sectors: u32,
    ) -> Option<(&[u8], &[u8])> {
        let b = p.block.0 as usize;
        if b >= self.store.blocks()
            || p.page >= self.layout.pages as u32
            || first_sector
                .checked_add(sectors)
                .is_none_or(|e| e > self.sectors)
        {
            return None;
        }
        let bytes = self.store.block(b)?;
        let ss = self.sector_size;
        let slot = &bytes[self.layout.slot_range(p.page)];
        let d0 = first_sector as usize * ss;
        let o0 = self.sectors as usize * ss + first_sector as usize * self.oob_sector;
        Some((
            &slot[d0..d0 + sectors as usize * ss],
            &slot[o0..o0 + sectors as usize * self.oob_sector],
        ))
    }

    /// The part of a read before its bytes move: power, address and range checks, the
    /// die's tR and the channel transfer (with the OOB bytes when `charge_oob`), the
    /// power-cut check and the read counters. Returns the block index and completion.
    fn begin_read(
        &mut self,
        p: Ppa,
        first_sector: u32,
        n: u32,
        charge_oob: bool,
        at: SimTime,
    ) -> Result<(usize, SimTime), NandError> {
        self.check_power()?;
        self.check_ppa(p)?;
        if first_sector
            .checked_add(n)
            .is_none_or(|end| end > self.sectors)
        {
            return Err(NandError::OutOfRange {
                what: "sector",
                value: first_sector as u64 + n as u64 - 1,
                limit: self.sectors as u64,
            });
        }
        let b = p.block.0 as usize;
        if self.store.meta(b).flags & BLOCK_FACTORY_BAD != 0 {
            return Err(NandError::BadBlock { block: p.block });
        }
        self.op_seq += 1;
        // Timing: die for tR, then the channel for the transfer out.
        let die = self.map.die_of(p.block);
        let ch = self.map.channel_of(die) as usize;
        let data_bytes = n as usize * self.sector_size;
        let xfer_bytes = data_bytes
            + if charge_oob {
                n as usize * self.oob_sector
            } else {
                0
            };
        let kind = p.page as usize % self.t_read.len();
        let t_r = self.t_read[kind];
        let (_, die_end) = self.dies[die.0 as usize].reserve(at, t_r);
        let bus_ns = self.ch_rate.transfer_ns(xfer_bytes as u64) + self.read_seq_ns[kind];
        let (_, done) = self.channels[ch].reserve(die_end, bus_ns);
        if self.cut_strikes(done) {
            return Err(NandError::PowerLoss);
        }
        self.stats.page_reads += 1;
        self.stats.channel_bytes += xfer_bytes as u64;
        Ok((b, done))
    }

    /// The part of a read after its bytes moved: the page state (erased, torn, failed)
    /// and the sectors' bit errors against the ECC, with their counters.
    fn finish_read(
        &mut self,
        p: Ppa,
        first_sector: u32,
        n: u32,
        done: SimTime,
    ) -> Result<ReadDone, NandError> {
        let b = p.block.0 as usize;
        let ss = self.sector_size;
        let bytes_read = n as u64 * ss as u64;
        let state = self
            .store
            .block(b)
            .map_or(PAGE_ERASED, |bytes| bytes[p.page as usize]);
        if state == PAGE_ERASED {
            self.stats.erased_reads += 1;
            self.stats.sectors_read += n as u64;
            self.stats.bytes_read += bytes_read;
            return Ok(ReadDone {
                done,
                corrected_bits: 0,
                erased: true,
            });
        }
        let good_sectors = match state {
            PAGE_PROGRAMMED => self.sectors,
            PAGE_PROGRAM_FAILED | PAGE_ERASE_TORN => 0,
            k => (k - PAGE_TORN_BASE) as u32,
        };
        if first_sector + n > good_sectors {
            self.stats.uncorrectable_reads += 1;
            return Err(NandError::Uncorrectable {
                ppa: p,
                sector: first_sector.max(good_sectors),
                bit_errors: u32::MAX,
                done,
            });
        }
        // Bit errors per sector, drawn from the seed and this operation's number.
        let mut corrected = 0u32;
        let lambda = self.rber(self.store.meta(b).pe_cycles) * (ss * 8) as f64;
        if lambda > 0.0 {
            let seed = self.faults.seed ^ salt::BIT_ERRORS.wrapping_mul(0x9E37_79B9);
            for s in 0..n {
                let k = poisson(lambda, uniform(seed, self.op_seq, s as u64));
                if k > self.faults.ecc_bits_per_sector {
                    self.stats.uncorrectable_reads += 1;
                    return Err(NandError::Uncorrectable {
                        ppa: p,
                        sector: first_sector + s,
                        bit_errors: k,
                        done,
                    });
                }
                corrected += k;
            }
        }
        self.stats.corrected_bits += corrected as u64;
        self.stats.sectors_read += n as u64;
        self.stats.bytes_read += bytes_read;
        Ok(ReadDone {
            done,
            corrected_bits: corrected,
            erased: false,
        })
    }

    /// Program page `p` with `data` (one page) and `oob` (`oob_per_page` bytes, or empty
    /// for all-`0xFF`). Starts no earlier than `at`; returns the completion instant.
    pub fn program(
        &mut self,
        p: Ppa,
        data: &[u8],
        oob: &[u8],
        at: SimTime,
    ) -> Result<SimTime, NandError> {
        self.check_power()?;
        self.check_ppa(p)?;
        let page_size = self.sectors as usize * self.sector_size;
        if data.len() != page_size {
            return Err(NandError::BufferSize {
                what: "program data",
                expected: page_size,
                got: data.len(),
            });
        }
        let oob_page = self.sectors as usize * self.oob_sector;
        if !oob.is_empty() && oob.len() != oob_page {
            return Err(NandError::BufferSize {
                what: "program OOB",
                expected: oob_page,
                got: oob.len(),
            });
        }
        let b = p.block.0 as usize;
        let mut meta = self.store.meta(b);
        if meta.flags & BLOCK_FACTORY_BAD != 0 {
            return Err(NandError::BadBlock { block: p.block });
        }
        if self.state_of(p) != PageState::Erased {
            return Err(NandError::ProgramNotErased { ppa: p });
        }
        if p.page != meta.next_page {
            return Err(NandError::ProgramOutOfOrder {
                ppa: p,
                expected: meta.next_page,
            });
        }
        // Reserve the block's bytes before anything changes: a full file system is an
        // error and the page stays erased.
        let upto = self.layout.slot_range(p.page).end;
        self.block_bytes_mut(b, upto)?;
        self.op_seq += 1;
        self.content_epoch += 1;
        let die = self.map.die_of(p.block);
        let ch = self.map.channel_of(die) as usize;
        let xfer = (page_size + oob_page) as u64;
        let (_, ch_end) = self.channels[ch].reserve(at, self.ch_rate.transfer_ns(xfer));
        let t_p = self.t_prog[p.page as usize % self.t_prog.len()];
        let (_, done) = self.dies[die.0 as usize].reserve(ch_end, t_p);
        self.stats.programs += 1;
        self.stats.channel_bytes += xfer;
        let seq = self.op_seq;
        let slot_range = self.layout.slot_range(p.page);
        let sectors = self.sectors;
        let ss = self.sector_size;
        if self.cut_strikes(done) {
            // Torn: only the first k sectors made it; sector k holds garbage.
            let k = (mix(self.faults.seed, seq, salt::TORN) % sectors as u64) as usize;
            // The write pointer moves before the commit point (the state byte).
            meta.next_page = p.page + 1;
            self.store.set_meta(b, meta);
            let bytes = self.block_bytes_mut(b, upto)?;
            let slot = &mut bytes[slot_range];
            slot[..k * ss].copy_from_slice(&data[..k * ss]);
            for (i, x) in slot[k * ss..(k + 1) * ss].iter_mut().enumerate() {
                *x = data[k * ss + i] ^ 0xA5;
            }
            bytes[p.page as usize] = PAGE_TORN_BASE + k as u8;
            return Err(NandError::PowerLoss);
        }
        let fail_p = if self.worn(&meta) {
            self.faults.worn_program_fail_prob
        } else {
            self.faults.program_fail_prob
        };
        let failed = fail_p > 0.0 && uniform(self.faults.seed, seq, salt::PROGRAM_FAIL) < fail_p;
        // The write pointer moves before the commit point, so after a crash it is never
        // behind a committed page.
        meta.next_page = p.page + 1;
        self.store.set_meta(b, meta);
        let bytes = self.block_bytes_mut(b, upto)?;
        let slot = &mut bytes[slot_range];
        slot[..page_size].copy_from_slice(data);
        if oob.is_empty() {
            slot[page_size..].fill(0xFF);
        } else {
            slot[page_size..].copy_from_slice(oob);
        }
        bytes[p.page as usize] = if failed {
            PAGE_PROGRAM_FAILED
        } else {
            PAGE_PROGRAMMED
        };
        if failed {
            self.stats.program_failures += 1;
            return Err(NandError::ProgramFailed { ppa: p, done });
        }
        self.stats.bytes_programmed += page_size as u64;
        Ok(done)
    }

    /// Erase block `blk`. Starts no earlier than `at`; returns the completion instant.
    pub fn erase(&mut self, blk: BlockId, at: SimTime) -> Result<SimTime, NandError> {
        self.check_power()?;
        self.check_block(blk)?;
        let b = blk.0 as usize;
        let mut meta = self.store.meta(b);
        if meta.flags & BLOCK_FACTORY_BAD != 0 {
            return Err(NandError::BadBlock { block: blk });
        }
        self.op_seq += 1;
        self.content_epoch += 1;
        let die = self.map.die_of(blk);
        let (_, done) = self.dies[die.0 as usize].reserve(at, self.t_erase);
        self.stats.erases += 1;
        let seq = self.op_seq;
        let pages = self.layout.pages;
        let worn = self.worn(&meta);
        meta.pe_cycles = meta.pe_cycles.saturating_add(1);
        if self.cut_strikes(done) {
            self.store.set_meta(b, meta);
            if let Ok(bytes) = self.block_bytes_mut(b, pages) {
                bytes[..pages].fill(PAGE_ERASE_TORN);
            }
            meta.next_page = pages as u32;
            self.store.set_meta(b, meta);
            return Err(NandError::PowerLoss);
        }
        let fail_p = if worn {
            self.faults.worn_erase_fail_prob
        } else {
            self.faults.erase_fail_prob
        };
        let failed = fail_p > 0.0 && uniform(self.faults.seed, seq, salt::ERASE_FAIL) < fail_p;
        self.store.set_meta(b, meta);
        if failed {
            self.stats.erase_failures += 1;
            if let Ok(bytes) = self.block_bytes_mut(b, pages) {
                bytes[..pages].fill(PAGE_ERASE_TORN);
            }
            meta.next_page = pages as u32;
            self.store.set_meta(b, meta);
            return Err(NandError::EraseFailed { block: blk, done });
        }
        // Only the state bytes change: erased pages read as 0xFF whatever the slot holds.
        if let Some(bytes) = self.store.block(b)
            && bytes[..pages].iter().any(|&s| s != PAGE_ERASED)
        {
            self.block_bytes_mut(b, pages)?[..pages].fill(PAGE_ERASED);
        }
        meta.next_page = 0;
        self.store.set_meta(b, meta);
        Ok(done)
    }
}

impl std::fmt::Debug for Nand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nand")
            .field("device", &self.cfg.name)
            .field("image", &self.store.path())
            .field("ops", &self.op_seq)
            .field("powered", &self.powered)
            .finish()
    }
}

/// Hint the CPU to bring the cache line holding `v` into its caches (see
/// [`prefetch_lines`]).
#[inline(always)]
pub fn prefetch_value<T>(v: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as in `prefetch_lines`: a hint about the address of a live reference.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            (v as *const T).cast(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = v;
}

/// Hint the CPU to bring every cache line of `bytes` into its caches (x86-64
/// `prefetcht0`; nothing elsewhere). Changes no data, never faults, no effect on results.
#[inline(always)]
pub fn prefetch_lines(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for line in bytes.chunks(64) {
        // SAFETY: `_mm_prefetch` needs SSE, which every x86_64 CPU has; it only hints the
        // cache about an address inside `bytes` and never faults or changes data.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                line.as_ptr().cast(),
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

fn factory_meta(cfg: &DeviceConfig) -> Vec<BlockMeta> {
    let n = cfg.geometry.total_blocks() as usize;
    let ratio = cfg.faults.factory_bad_block_ratio;
    (0..n)
        .map(|b| {
            let bad = ratio > 0.0 && uniform(cfg.faults.seed, b as u64, salt::FACTORY_BAD) < ratio;
            BlockMeta {
                pe_cycles: 0,
                next_page: 0,
                flags: if bad { BLOCK_FACTORY_BAD } else { 0 },
                reserved: 0,
            }
        })
        .collect()
}

fn geo_string(g: &Geometry) -> String {
    g.to_string()
}

#[cfg(test)]
mod tests;
