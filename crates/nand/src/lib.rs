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

//!
//! Where things are:
//! * `lib.rs`: the array's state ([`Nand`]), its counters and the per-block and
//!   per-page state a controller inspects;
//! * `error.rs`: [`NandError`];
//! * `open.rs`: in-memory arrays, image files (create, open, checks, repair) and the
//!   factory metadata;
//! * `read.rs`: reads, OOB reads, prefetch hints, the timed read path and ECC;
//! * `program.rs`: programs and erases;
//! * `power.rs`: power cuts, injected faults and the bit error rate;
//! * `addr.rs`: physical addresses and their layout over channels and ways;
//! * `store.rs`: the backing store (memory or an image file) and its layout;
//! * `fault.rs`: the counter-based hashes and draws behind every fault decision.

pub mod addr;
mod error;
mod fault;
pub mod hostcrash;
pub(crate) mod imagemap;
mod open;
mod pins;
mod power;
mod program;
mod read;
mod ready;
mod store;
mod writeback;

pub use addr::{AddrMap, BlockId, DieId, PhysAddr, Ppa};
pub use csd_sim::prefetch::{
    lines as prefetch_lines, lines_l2 as prefetch_lines_l2, value as prefetch_value,
};
pub use error::NandError;
pub use hostcrash::host_crash_image;
pub use pins::PinnedPages;
pub use ready::ReadyStats;
pub use store::{Access, BlockMeta};

use csd_sim::config::FaultConfig;
use csd_sim::{
    DeviceConfig, EnergyCounters, Geometry, Rate, Resource, ResourceClass, SimTime, Utilization,
};
use fault::{mix, poisson_from, salt, uniform};
use std::path::Path;
use store::{
    BLOCK_FACTORY_BAD, Layout, PAGE_ERASE_TORN, PAGE_ERASED, PAGE_PROGRAM_FAILED, PAGE_PROGRAMMED,
    PAGE_TORN_BASE, Store,
};

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
    /// The bit-error law of the last page read: its block's P/E count, the mean bit
    /// errors per sector and the chance of none (`exp(-mean)`), kept because the blocks
    /// read one after another mostly share a P/E count (the exponential was about 80
    /// instructions of a 4 KiB read's emulation); the same numbers as computed afresh.
    last_law: Option<(u32, f64, f64)>,
    /// Readers of stored bytes on other threads ([`Nand::pin_pages`]). Declared before
    /// `store` on purpose: fields drop in declaration order, and dropping this waits
    /// for every reader before the store's memory is unmapped.
    pins: pins::PinsHolder,
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
    /// The image was opened after its last writer stopped without a clean close (a
    /// killed process or a host crash): unsynced changes may be missing or partial.
    opened_unclean: bool,
    /// Pages named by [`Nand::page_stale`].
    stale_hints: u64,
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

    /// Hint the CPU cache about the word holding `sector`'s mark (see
    /// [`Nand::prefetch`]); nothing when the block has no marks.
    #[inline]
    fn prefetch(&self, b: usize, page: u32, sector: u32) {
        let (w, _) = self.index(page, sector);
        if let Some(x) = self
            .bits
            .get(b)
            .and_then(Option::as_ref)
            .and_then(|v| v.get(w))
        {
            prefetch_value(x);
        }
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

    /// The most memory an in-memory device's blocks may take (`None`: an image file, or
    /// no limit). A program that needs a new block past it fails with
    /// [`NandError::MemoryFull`] and changes nothing. A new in-memory device starts with
    /// `CSD_MEMORY_LIMIT` or three quarters of the machine's available memory.
    pub fn memory_limit(&self) -> Option<u64> {
        self.store.memory_limit()
    }

    /// Set [`Nand::memory_limit`]; `false` (nothing changes) on an image file.
    pub fn set_memory_limit(&mut self, limit: Option<u64>) -> bool {
        self.store.set_memory_limit(limit)
    }

    /// Keep about `bytes` of erase-block memory ready for an in-memory device's fresh
    /// blocks, faulted in by a background thread ahead of the programs that need it (the
    /// kernel's zeroing of fresh pages then leaves the write path; see the `ready`
    /// module). `0` stops it and gives the ready memory back. The ready memory counts
    /// toward [`Nand::memory_limit`]. No modeled figure changes. `false` (nothing
    /// changes) on an image file, or when the thread cannot be started.
    pub fn keep_memory_ready(&mut self, bytes: u64) -> bool {
        self.store.keep_memory_ready(bytes)
    }

    /// Counters of the memory kept ready ([`Nand::keep_memory_ready`]); `None` when
    /// none is.
    pub fn memory_ready_stats(&self) -> Option<ReadyStats> {
        self.store.memory_ready_stats()
    }

    /// Wait until the memory kept ready is as full as its size and the limit allow (for
    /// tests and benchmarks that want a known start); returns at once when none is kept.
    pub fn wait_memory_ready(&self) {
        self.store.wait_memory_ready();
    }

    /// Book die or channel `id` now, for the event core
    /// ([`csd_sim::events::Resources`]); `None` for an id that is not a die or channel
    /// of this array.
    pub fn reserve_now(
        &mut self,
        id: csd_sim::events::ResourceId,
        at: SimTime,
        ns: u64,
    ) -> Option<SimTime> {
        let i = id.index()? as usize;
        let r = match id.class() {
            csd_sim::ResourceClass::Die => self.dies.get_mut(i)?,
            csd_sim::ResourceClass::Channel => self.channels.get_mut(i)?,
            _ => return None,
        };
        Some(r.reserve_now(at, ns).0)
    }

    /// The latest instant any die or channel is busy until.
    pub fn now(&self) -> SimTime {
        SimTime::latest(
            self.dies
                .iter()
                .chain(self.channels.iter())
                .map(Resource::free_at),
        )
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

    /// Stored page bytes (slices [`Nand::stored_sectors`] returned) that other threads
    /// may read, through [`PinnedPages::read`], while this array goes on working: a
    /// reader finds them unchanged, or finds them gone if any stored byte changed since.
    ///
    /// # Safety
    /// Every slice of `pages` must come from [`Nand::stored_sectors`] of this array
    /// (directly or through a layer above, e.g. the FTL's `peek_in_place`), under the
    /// same borrow of the array as this call.
    pub unsafe fn pin_pages(&self, pages: &[&[u8]]) -> PinnedPages {
        // SAFETY: the caller's contract is `PinnedPages::new`'s.
        unsafe { PinnedPages::new(self.pins.0.clone(), pages) }
    }

    /// Stored bytes about to be read (slices handed out by [`Nand::stored_sectors`]):
    /// an image file starts reading what of them left the host's page cache, in the
    /// background, with the rest of each one's erase block (a scan's read-ahead; the
    /// mapping itself is advised random). No modeled time, nothing counted; no-op in
    /// memory.
    pub fn will_need(&self, slices: &[&[u8]]) {
        self.store.will_need(slices);
    }

    /// Page `p`'s data will not be read again before its block is erased: every sector
    /// it holds was superseded or trimmed. An image file drops the page's data from the
    /// host's page cache a little later, once its write-back has had time to finish (the
    /// stale ranges of the image's write-back thread, `crates/nand/src/writeback.rs`), so
    /// that under sustained writes the page cache holds the device's live data rather
    /// than everything ever written. The kernel drops only clean pages no process maps;
    /// the bytes on disk stay as they are, and a read of them anyway gets them back from
    /// the disk unchanged. Only a hint: no state, counter or modeled time changes, and an
    /// address out of range is ignored. No-op in memory, read-only or without host sync.
    #[inline]
    pub fn page_stale(&mut self, p: Ppa) {
        if (p.block.0 as usize) < self.store.blocks() && (p.page as usize) < self.layout.pages {
            self.stale_hints += 1;
            self.store.page_stale(p.block.0 as usize, p.page);
        }
    }

    /// Pages named by [`Nand::page_stale`] since this device was opened (a diagnostic
    /// for tests and profiles; not part of [`NandStats`]).
    pub fn stale_hints(&self) -> u64 {
        self.stale_hints
    }

    /// A clean close of the image file: everything on the host's disk, then the header
    /// marked closed (the next open skips the repair scan). No-op in memory.
    pub fn sync(&mut self) -> Result<(), NandError> {
        self.store.sync()
    }

    /// Release the pages of blocks written through an image's mapping from this process
    /// once this many bytes of blocks were written since the last release (default 256
    /// MiB; the data stays in the host's page cache). Loads larger than memory keep a
    /// bounded resident set this way; tests set it small. No-op in memory.
    pub fn set_release_written_bytes(&mut self, bytes: usize) {
        self.store.set_release_written_bytes(bytes);
    }

    /// Release the pages read through an image's mapping from this process once this
    /// many bytes of page slots were read since the last release (`None`, the default:
    /// what was read stays mapped, so random reads over a working set stay fast). A scan
    /// of a table larger than memory, or a one-shot query, then keeps a bounded resident
    /// set: what it read stays in the host's page cache, not in the process. No modeled
    /// effect; no-op in memory.
    pub fn set_release_read_bytes(&mut self, bytes: Option<usize>) {
        self.store.set_release_read_bytes(bytes);
    }

    /// With a read release size set ([`Nand::set_release_read_bytes`]), release from
    /// this process every memory page of every erase block read since the open or the
    /// last call — not only the slots read, which is all the read window releases — so
    /// that the next scan starts from the image's header and state alone. For a process
    /// that runs several scans one after the other (`csd query` with several
    /// strategies): the host's kernel maps a large page-cache folio (up to 2 MiB on
    /// Linux 6.18) whole at the first touch of any page of it, so each scan leaves
    /// folios of the blocks it read mapped past its last read, and the next scan's add
    /// to them. The data stays in the host's page cache; later reads fault it back in
    /// unchanged. No modeled effect; no-op in memory or without a release size.
    pub fn release_read_pages(&mut self) {
        self.store.release_read_pages();
    }

    /// Make every change so far durable on the host's disk before the caller
    /// acknowledges it (`fdatasync` of the image file; nothing when nothing changed,
    /// in memory, or read-only). Costs no modeled time: the host's disk is not part of
    /// the emulated device.
    pub fn persist(&mut self) -> Result<(), NandError> {
        self.store.persist()
    }

    /// Whether the image was opened after its last writer stopped without a clean close
    /// (killed, or the host lost power): changes it had not synced may be missing, or
    /// present in part, so the layer above should verify what it did not sync.
    pub fn opened_unclean(&self) -> bool {
        self.opened_unclean
    }

    /// Keep a copy of what is known to be on the host's disk at `path`, for host-crash
    /// tests (see [`hostcrash`]). Image files opened read-write only.
    pub fn track_durable_copy(&mut self, path: &Path) -> Result<(), NandError> {
        self.store.track_durable_copy(path)
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

#[cfg(test)]
mod tests;
