//! Where the flash contents live: in memory (sparse: a block costs memory only once it
//! has been programmed) or in an image file (sparse on disk, memory-mapped).
//!
//! Both backends share one layout per erase block ([`Layout`]): `pages_per_block`
//! page-state bytes (padded to 64), then every page's OOB bytes back to back, then, from
//! the next 4 KiB boundary, every page's data. A read looks at a page's state byte and
//! its sectors' TAGs in the OOB bytes before (or instead of) its data; kept together at
//! the block's start, they share one TLB entry and few cache lines, where a page slot of
//! `page_size + OOB` bytes (the layout of image versions 1 to 3, still read) put the
//! TAGs megabytes away from the state byte: two TLB misses per random read, whose page
//! walks stalled the emulator's random reads (`csd-device`'s `randread` example: 1.6M
//! reads/s with the slots, 3.4M with this layout, same modeled figures). Data pages
//! also start on file-system block boundaries, so storing one covers whole blocks. The
//! page-state byte is the commit point of a program: data is copied first, the state is
//! set after, so a process killed in between leaves the page reading as erased. The
//! image file adds a header (magic, version, geometry, the device config as TOML) and a
//! table of per-block metadata (P/E count, write pointer, flags) before the blocks.
//! Because the image is a shared memory mapping, every completed store survives the
//! process being killed (the kernel's page cache holds it).
//!
//! Surviving the *host* losing power is a separate promise: the kernel writes dirty pages
//! of the mapping back in any order and at any time, so only what was synced is known to
//! be on disk. [`Store::persist`] (`fdatasync` of the file, which writes back the pages
//! dirtied through the mapping) is called by the layers above before they acknowledge
//! anything as durable; the media itself syncs before every erase (an erase destroys
//! durable contents, so everything that superseded them must be on disk first). The
//! header records whether a writer has the image open (cleared by a clean close): an
//! image opened after a host crash or a killed process gets its write pointers
//! recomputed from the page states, whichever of the two reached the disk. Version 3
//! gives every block-table entry a CRC-32C (bound to its block number), so a zeroed or
//! overwritten table is refused instead of read as a fresh device.

use crate::NandError;
use crate::imagemap::{Mapped, Placement};
use bytemuck::{Pod, Zeroable};
use csd_sim::{DeviceConfig, Geometry};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// Page state: never programmed since the last erase.
pub const PAGE_ERASED: u8 = 0;
/// Page state: programmed completely.
pub const PAGE_PROGRAMMED: u8 = 1;
/// Page state: a program failed (status fail); contents unreliable.
pub const PAGE_PROGRAM_FAILED: u8 = 0xFD;
/// Page state: an erase of this block was interrupted; contents unreliable.
pub const PAGE_ERASE_TORN: u8 = 0xFE;
/// Page states `PAGE_TORN_BASE + k` mean a program was cut by power loss after `k`
/// sectors were programmed completely.
pub const PAGE_TORN_BASE: u8 = 2;

/// Block flag: marked bad at the factory.
pub const BLOCK_FACTORY_BAD: u32 = 1;

/// Per-block metadata, as stored in the image file.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable, PartialEq, Eq)]
pub struct BlockMeta {
    /// Program/erase cycles so far.
    pub pe_cycles: u32,
    /// Next page that may be programmed (pages are programmed in order).
    pub next_page: u32,
    /// `BLOCK_*` flags.
    pub flags: u32,
    /// In an image file (version 3): CRC-32C of the other fields and the block number
    /// (see `entry_crc`); zero in memory.
    pub reserved: u32,
}

/// The checksum a version-3 block-table entry carries in `reserved`: CRC-32C of the
/// block number and the entry's first 12 bytes, never zero (so a zeroed entry fails).
fn entry_crc(b: usize, m: &BlockMeta) -> u32 {
    let head = crc32c::crc32c(&(b as u64).to_le_bytes());
    crc32c::crc32c_append(head, &bytemuck::bytes_of(m)[..12]).max(1)
}

/// Byte layout of one erase block: the page states, then either every page's OOB bytes
/// and, 4 KiB aligned, every page's data (split: image version 4 and memory), or one
/// slot of data followed by OOB bytes per page (image versions 1 to 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    pub pages: usize,
    pub states: usize,
    pub block_bytes: usize,
    page_bytes: usize,
    oob_page: usize,
    /// Split layout: where the first page's data starts. `None`: page slots.
    data_base: Option<usize>,
}

impl Layout {
    /// The layout of memory stores and new images: states, OOB area, data.
    pub fn new(g: &Geometry) -> Layout {
        let pages = g.pages_per_block as usize;
        let states = pages.next_multiple_of(64);
        let oob_page = g.oob_per_page() as usize;
        let data_base = (states + pages * oob_page).next_multiple_of(4096);
        Layout {
            pages,
            states,
            block_bytes: data_base + pages * g.page_size as usize,
            page_bytes: g.page_size as usize,
            oob_page,
            data_base: Some(data_base),
        }
    }

    /// The layout of image versions 1 to 3: states, then a slot of data and OOB bytes per
    /// page.
    pub fn slots(g: &Geometry) -> Layout {
        let pages = g.pages_per_block as usize;
        let states = pages.next_multiple_of(64);
        let slot = (g.page_size + g.oob_per_page()) as usize;
        Layout {
            pages,
            states,
            block_bytes: states + pages * slot,
            page_bytes: g.page_size as usize,
            oob_page: g.oob_per_page() as usize,
            data_base: None,
        }
    }

    /// The layout of an image of format `version`.
    fn of_version(g: &Geometry, version: u32) -> Layout {
        if version >= SPLIT_VERSION {
            Layout::new(g)
        } else {
            Layout::slots(g)
        }
    }

    /// Whether the OOB bytes are apart from the data (the layout of [`Layout::new`]).
    #[inline]
    pub fn is_split(&self) -> bool {
        self.data_base.is_some()
    }

    /// Offset in the block of page `page`'s data.
    #[inline]
    pub fn data_start(&self, page: u32) -> usize {
        match self.data_base {
            Some(d) => d + page as usize * self.page_bytes,
            None => self.states + page as usize * (self.page_bytes + self.oob_page),
        }
    }

    /// Offset in the block of page `page`'s OOB bytes.
    #[inline]
    pub fn oob_start(&self, page: u32) -> usize {
        match self.data_base {
            Some(_) => self.states + page as usize * self.oob_page,
            None => self.data_start(page) + self.page_bytes,
        }
    }

    /// Page `page`'s data bytes.
    #[inline]
    pub fn data_range(&self, page: u32) -> std::ops::Range<usize> {
        let s = self.data_start(page);
        s..s + self.page_bytes
    }

    /// Page `page`'s OOB bytes.
    #[inline]
    pub fn oob_range(&self, page: u32) -> std::ops::Range<usize> {
        let s = self.oob_start(page);
        s..s + self.oob_page
    }

    /// The bytes a read of page `page` maps in, as one range: its data, and in page
    /// slots the OOB bytes after it (so that consecutive slots form one run).
    #[inline]
    pub fn read_range(&self, page: u32) -> std::ops::Range<usize> {
        match self.data_base {
            Some(_) => self.data_range(page),
            None => self.data_start(page)..self.oob_range(page).end,
        }
    }

    /// The bytes a program of page `page` stores end before this offset.
    #[inline]
    pub fn page_end(&self, page: u32) -> usize {
        self.data_range(page).end.max(self.oob_range(page).end)
    }
}

const MAGIC: [u8; 8] = *b"CSDNAND\0";
/// Version 2 adds a CRC-32C over the header and the recorded config, and the rule that a
/// program moves the block's write pointer before its commit point (so no repair scan is
/// needed at open). Version 3 adds a CRC-32C to every block-table entry and the header's
/// open flag. Version 1 and 2 images are still opened (version 1 with a one-time repair
/// scan); a read-write open upgrades them to version 3. Version 4 changes the block
/// layout ([`Layout`]: OOB bytes beside the page states, data 4 KiB aligned); new images
/// are version 4, older ones keep their layout (and version 3 at most).
const VERSION: u32 = 4;
/// The first version with the split block layout.
const SPLIT_VERSION: u32 = 4;
/// Header state bit: a writer has the image open (set, synced, before the first change
/// after an open or a clean close; cleared by a clean close).
const STATE_OPEN: u32 = 1;
const HEADER_BYTES: usize = 64 * 1024;

#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct HeaderV1 {
    magic: [u8; 8],
    version: u32,
    header_bytes: u32,
    geo: [u32; 9],
    config_len: u32,
    block_bytes: u64,
    meta_offset: u64,
    blocks_offset: u64,
    blocks: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct Header {
    v1: HeaderV1,
    /// CRC-32C of this header (with `crc` zero) followed by the config text.
    crc: u32,
    /// `STATE_*` bits (version 3; zero before).
    state: u32,
}

impl Header {
    fn crc_of(mut self, config: &[u8]) -> u32 {
        self.crc = 0;
        let h = crc32c::crc32c(bytemuck::bytes_of(&self));
        crc32c::crc32c_append(h, config)
    }
}

fn geo_words(g: &Geometry) -> [u32; 9] {
    [
        g.channels,
        g.ways,
        g.dies_per_chip,
        g.planes_per_die,
        g.blocks_per_plane,
        g.pages_per_block,
        g.page_size,
        g.sector_size,
        g.oob_per_sector,
    ]
}

/// Byte offsets of the image layout for `nblocks` blocks of `layout`: (meta table,
/// blocks, total file length), or `None` if they overflow.
fn image_offsets(nblocks: u64, layout: &Layout) -> Option<(u64, u64, u64)> {
    let meta = HEADER_BYTES as u64;
    let blocks = meta
        .checked_add(nblocks.checked_mul(std::mem::size_of::<BlockMeta>() as u64)?)?
        .checked_next_multiple_of(4096)?;
    let total = blocks.checked_add(nblocks.checked_mul(layout.block_bytes as u64)?)?;
    Some((meta, blocks, total))
}

/// How an image file is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Access {
    /// Read and write; the image is locked for exclusive use.
    #[default]
    ReadWrite,
    /// Never write the file: it is opened read-only under a shared lock and mapped
    /// copy-on-write, so any change (a recovery replayed in memory, say) stays in this
    /// process's memory and the file keeps every byte it had.
    ReadOnly,
}

/// The bytes of one erase block of the memory backend: an anonymous mapping, zero (all
/// pages erased) until written, on 4 KiB pages: it is advised `MADV_NOHUGEPAGE`, so the
/// kernel never backs it with transparent huge pages, whatever the system's setting.
///
/// Why not huge pages (they were used until 2026-12-03, for fewer TLB misses on random
/// reads): on a virtual machine that hands free memory back to its host (virtio-balloon
/// free page reporting, as on this one), the kernel's free 2 MiB blocks are the memory it
/// reported, so a huge page's first touch waits for the host to back all of it. Measured
/// there (release builds, one process each, the machine idle 30 s before):
/// `csd io --rw randwrite --bs 4k --size 2g --ops 300000 --write-cache write-back` took
/// 19.4 s with huge pages (15.2 s of it zeroing memory in the kernel), 0.66 s with huge
/// pages run again at once (memory still backed), and 1.7 s on 4 KiB pages; `csd serve
/// --memory` took 6–23K fio randwrite IOPS with huge pages and 48–82K without. Random
/// reads gained nothing measurable from them (`csd-device`'s randread example, 2 GiB, 3M
/// reads: 1.55 / 2.36M wall reads/s with, 1.58 / 2.46M without).
pub(crate) struct AnonBlock(Mapped);

/// The memory limit a new in-memory store starts with: `CSD_MEMORY_LIMIT` (a size such as
/// `8g`; `off` for none) when set and valid, else three quarters of the memory the machine
/// has available now (`MemAvailable`), so that a device larger than memory turns
/// read-only with [`NandError::MemoryFull`] before the kernel's out-of-memory killer
/// ends the process; `None` where neither is known.
pub(crate) fn default_memory_limit() -> Option<usize> {
    if let Ok(v) = std::env::var("CSD_MEMORY_LIMIT") {
        match memory_limit_setting(&v) {
            Some(limit) => return limit,
            None => tracing::warn!(
                "CSD_MEMORY_LIMIT={v:?} is not a size (examples: 8g, 512m, off); using three quarters of the available memory"
            ),
        }
    }
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    available_from_meminfo(&info).map(|a| usize::try_from(a / 4 * 3).unwrap_or(usize::MAX))
}

/// `CSD_MEMORY_LIMIT`'s value: `Some(None)` for no limit, `Some(Some(bytes))`, or `None`
/// when it is not a size.
fn memory_limit_setting(v: &str) -> Option<Option<usize>> {
    match v.trim().to_ascii_lowercase().as_str() {
        "off" | "none" | "unlimited" => Some(None),
        s => csd_sim::units::parse_size(s)
            .ok()
            .map(|b| Some(usize::try_from(b).unwrap_or(usize::MAX))),
    }
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
fn available_from_meminfo(info: &str) -> Option<u64> {
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

impl AnonBlock {
    pub(crate) fn new(len: usize) -> Option<AnonBlock> {
        let mapped = len.next_multiple_of(4096);
        // SAFETY: an anonymous private mapping with no fixed address; `from_raw` checks
        // the result for MAP_FAILED and owns it from here on.
        let map = unsafe {
            let raw = libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            );
            Mapped::from_raw(raw, len, mapped)?
        };
        map.no_huge_pages();
        Some(AnonBlock(map))
    }

    /// Fault every page of the mapping in for writing now (the kernel zeroes them), so
    /// that the device's first program of the block takes no page fault
    /// ([`crate::ready`]). Contents stay all zero.
    pub(crate) fn populate(&mut self) {
        if !self.0.populate_write() {
            // A kernel before 5.14: touch one byte a page (writing the zero it holds).
            for off in (0..self.0.mapped()).step_by(4096) {
                // SAFETY: `off < mapped`, inside the mapping owned by `self`; a volatile
                // write keeps the store that faults the page in.
                unsafe { self.0.as_mut_ptr().add(off).write_volatile(0) };
            }
        }
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.0
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

/// The storage backend behind a [`crate::Nand`].
// One per device, so the variants' sizes cost nothing worth a `Box`, whose indirection
// every page access of an image file would pay.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Store {
    Mem(MemStore),
    File(FileStore),
}

pub(crate) struct MemStore {
    meta: Vec<BlockMeta>,
    blocks: Vec<Option<AnonBlock>>,
    layout: Layout,
    /// Memory the blocks allocated so far take once written, in 4 KiB pages (blocks are
    /// never given back).
    held: usize,
    /// The most `held` may reach (`None`: no limit).
    limit: Option<usize>,
    /// Blocks made ready ahead of need ([`Store::keep_memory_ready`]).
    ready: Option<crate::ready::Ready>,
}

pub(crate) struct FileStore {
    map: Mapped,
    // Held for the lock and for `fallocate`; the mapping keeps the file open on its own.
    file: File,
    path: PathBuf,
    meta_offset: usize,
    blocks_offset: usize,
    layout: Layout,
    nblocks: usize,
    access: Access,
    /// Bytes at the start of each block known to be allocated in the file.
    reserved: Vec<u32>,
    /// Format version of the file (3 after any read-write open).
    version: u32,
    /// Something changed since the last [`Store::persist`].
    dirty: bool,
    /// The header's open flag is set and on disk (changes may go ahead).
    marked_open: bool,
    /// A copy of what is known to be on disk, kept for host-crash tests.
    shadow: Option<crate::hostcrash::Shadow>,
    /// Sync before acknowledging (`CSD_HOST_SYNC=off` turns it off: see [`host_sync`]).
    host_sync: bool,
    /// Dirty pages handed to the disk ahead of the next sync ([`crate::writeback`]).
    writeback: crate::writeback::Writeback,
    /// Blocks written through the mapping since their pages were last released from this
    /// process (see [`FileStore::note_touched`]), each once.
    touched: Vec<usize>,
    /// Which blocks are in `touched` (sized on first use).
    touched_mark: Vec<bool>,
    /// Bytes of touched blocks that trigger a release ([`RELEASE_WRITTEN_BYTES`] unless
    /// set).
    release_bytes: usize,
    /// Bytes of slots read after which they are released (see
    /// [`crate::Nand::set_release_read_bytes`]); `None`: reads keep their pages.
    release_read_bytes: Option<usize>,
    /// Slots read since the last read release: (block, start, end) in the mapping.
    read_window: Vec<(usize, usize, usize)>,
    /// Bytes of the slots in `read_window`.
    read_window_bytes: usize,
    /// All-`0xFF` spare bytes for pages programmed without OOB (sized on first use).
    ff: Vec<u8>,
    /// Read-only (copy-on-write) opens: blocks this process stored into, whose changed
    /// pages live only in private memory and so are never released (sized on first use).
    private_mark: Vec<bool>,
    /// Per erase block, the offset in it up to which [`FileStore::will_need`] has
    /// probed or asked for its bytes (a hint only: a stale one costs a read-ahead).
    ahead: Vec<std::sync::atomic::AtomicU32>,
    /// Per erase block, the last page read and how many reads in a row before it were
    /// of the page before (see [`FileStore::note_read`]).
    runs: Vec<(u32, u8)>,
}

/// Bytes of blocks written through an image's mapping after which their pages are
/// released from the process (`MADV_DONTNEED`): a load of a table larger than memory
/// keeps its resident set bounded instead of growing one for one with the image. The
/// data stays in the host's page cache (and is written back by the kernel or the next
/// sync); the process re-reads it from there if it touches the block again.
const RELEASE_WRITTEN_BYTES: usize = 256 << 20;

/// Bytes of a block that [`FileStore::will_need`] takes as cached after one probe found
/// a page of them cached.
const AHEAD_PROBE_STRIDE: usize = 1 << 20;

/// Reads in a row of one block's consecutive pages after which the rest of the block is
/// read ahead ([`FileStore::note_read`]).
const SEQUENTIAL_RUN: u8 = 2;

/// [`FileStore::runs`] of a block with no read yet.
const NO_PAGE: u32 = u32::MAX;

/// The host's memory page size (`sysconf(_SC_PAGESIZE)`, 4 KiB if it cannot be read).
fn os_page() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf reads a constant of the system; no memory is involved.
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(n)
            .ok()
            .filter(|&n| n.is_power_of_two())
            .unwrap_or(4096)
    })
}

/// Whether image files sync to the host's disk before anything is acknowledged durable:
/// yes, unless the environment says `CSD_HOST_SYNC=off` — the equivalent of QEMU's
/// `cache=unsafe`, for throwaway experiments and for measuring what syncing costs. With
/// it off, a host crash may lose acknowledged writes (a killed process still loses
/// nothing: the page cache keeps every store) and a clean close still syncs.
pub(crate) fn host_sync() -> bool {
    std::env::var("CSD_HOST_SYNC").map_or(true, |v| v != "off")
}

impl FileStore {
    fn io_error(&self, what: &str, e: std::io::Error) -> NandError {
        image_error(&self.path, format!("{what}: {e}"))
    }

    /// Set or clear the header's open flag and make it durable (with every change
    /// before it). Opening for writing sets it before the first change; a clean close
    /// clears it after everything else is on disk.
    fn set_open_flag(&mut self, open: bool) -> Result<(), NandError> {
        debug_assert_eq!(self.access, Access::ReadWrite);
        if self.version == 1 {
            // No room for the flag before the config text: version 1 always repairs.
            return self.persist();
        }
        let fixed = std::mem::size_of::<Header>();
        let mut h: Header = bytemuck::pod_read_unaligned(&self.map[..fixed]);
        // Versions 2 and 3 become 3 (their block layout stays); 4 stays 4.
        let version = if self.version >= SPLIT_VERSION {
            self.version
        } else {
            3
        };
        h.v1.version = version;
        h.state = if open {
            h.state | STATE_OPEN
        } else {
            h.state & !STATE_OPEN
        };
        let clen = h.v1.config_len as usize;
        h.crc = h.crc_of(&self.map[fixed..fixed + clen]);
        self.map[..fixed].copy_from_slice(bytemuck::bytes_of(&h));
        self.version = version;
        if let Some(s) = &mut self.shadow {
            s.header = true;
        }
        self.dirty = true;
        self.persist()?;
        self.marked_open = open;
        Ok(())
    }

    /// Before the first change after an open or a clean close: the header says a writer
    /// has the image open, on disk, so a crash from here on is seen at the next open.
    #[inline]
    fn begin_change(&mut self) -> Result<(), NandError> {
        if self.marked_open || self.access == Access::ReadOnly {
            return Ok(());
        }
        self.set_open_flag(true)
    }

    /// Block `b` is about to be written through the mapping. Once the blocks touched since
    /// the last release reach the release size, their pages leave this process's
    /// resident set (not the page cache); `b` starts the next round.
    fn note_written(&mut self, b: usize) {
        // A read-only open maps copy-on-write: its changes live only in private pages,
        // which MADV_DONTNEED would discard. Such a block is never released.
        if self.access != Access::ReadWrite {
            if self.private_mark.len() != self.nblocks {
                self.private_mark = vec![false; self.nblocks];
            }
            self.private_mark[b] = true;
            return;
        }
        self.note_touched(b);
    }

    /// Page `page` of block `b` is about to be read through the mapping: with a read
    /// release size set, its slot joins the read window, and once the window holds that
    /// many bytes its pages leave this process (see [`FileStore::release_reads`]).
    #[inline]
    fn note_read(&mut self, b: usize, page: u32) {
        if let Some(run) = self.runs.get_mut(b) {
            // Reads of one block's pages in order (a scan, wherever it comes from: the
            // look-ahead's pinned batches are read ahead already) are read ahead once
            // the third in a row arrives; random reads almost never make such a run.
            let seq = run.0 != NO_PAGE && page == run.0 + 1;
            *run = (page, if seq { run.1.saturating_add(1) } else { 0 });
            if run.1 == SEQUENTIAL_RUN {
                let slot = self.layout.read_range(page);
                let o = self.blocks_offset + b * self.layout.block_bytes;
                self.ahead_from(o + slot.start, o + slot.end);
            }
        }
        let Some(limit) = self.release_read_bytes else {
            return;
        };
        let slot = self.layout.read_range(page);
        let o = self.blocks_offset + b * self.layout.block_bytes;
        self.read_window.push((b, o + slot.start, o + slot.end));
        self.read_window_bytes += slot.len();
        if self.read_window_bytes >= limit {
            self.release_reads();
        }
    }

    /// Release the memory pages of the slots read since the last release but the newest
    /// quarter: the window's slots merged per block into runs (a scan reads each die's pages in order, so a
    /// window holds a few runs per block: a few `madvise` calls, not one per page),
    /// each rounded inward to whole memory pages, except in blocks this process stored
    /// into under a copy-on-write mapping.
    fn release_reads(&mut self) {
        // The newest quarter stays: pages just read may still be evaluated on other
        // threads (pinned), and would only fault back in.
        let keep = self.read_window.len() / 4;
        let kept = self.read_window.split_off(self.read_window.len() - keep);
        let mut w = std::mem::replace(&mut self.read_window, kept);
        self.read_window_bytes = self.read_window.iter().map(|&(_, s, e)| e - s).sum();
        w.sort_unstable();
        let mut i = 0;
        while i < w.len() {
            let (b, start, mut end) = w[i];
            i += 1;
            while i < w.len() && w[i].0 == b && w[i].1 <= end {
                end = end.max(w[i].2);
                i += 1;
            }
            if !self.private_mark.get(b).copied().unwrap_or(false) {
                self.release_range(start, end);
            }
        }
    }

    /// Release every memory page of every block read since the open or the last call,
    /// whole blocks (data, spare bytes and page states), except blocks this process
    /// stored into under a copy-on-write mapping; with no read release size set
    /// (reads keep their pages), nothing. The read window's slots are not the whole of
    /// what a scan leaves mapped: the host's kernel maps a large page-cache folio whole
    /// on the first touch of any page in it (Linux 6.18 maps up to 2 MiB at once), so a
    /// scan that stops leaves each block's folio ahead of its last read mapped, and a
    /// following scan of the same blocks maps its own on top (see
    /// [`crate::Nand::release_read_pages`]).
    fn release_read_blocks(&mut self) {
        if self.release_read_bytes.is_none() {
            return;
        }
        self.read_window.clear();
        self.read_window_bytes = 0;
        let bb = self.layout.block_bytes;
        for b in 0..self.runs.len() {
            if std::mem::replace(&mut self.runs[b], (NO_PAGE, 0)).0 == NO_PAGE
                || self.private_mark.get(b).copied().unwrap_or(false)
            {
                continue;
            }
            let start = self.blocks_offset + b * bb;
            self.release_range(start, start + bb);
        }
    }

    /// Count block `b` toward the next release (once per round).
    fn note_touched(&mut self, b: usize) {
        if self.touched.last() == Some(&b) {
            return;
        }
        // Accesses alternate between the blocks of every die: each block counts once.
        if self.touched_mark.len() != self.nblocks {
            self.touched_mark = vec![false; self.nblocks];
        }
        if std::mem::replace(&mut self.touched_mark[b], true) {
            return;
        }
        if self.touched.len() * self.layout.block_bytes >= self.release_bytes {
            self.release_touched();
        }
        self.touched.push(b);
    }

    /// Release the pages of the blocks touched since the last release.
    fn release_touched(&mut self) {
        let blocks = std::mem::take(&mut self.touched);
        let bb = self.layout.block_bytes;
        for b in blocks {
            self.touched_mark[b] = false;
            if self.private_mark.get(b).copied().unwrap_or(false) {
                continue;
            }
            self.release_range(
                self.blocks_offset + b * bb,
                self.blocks_offset + (b + 1) * bb,
            );
        }
    }

    /// Drop this process's page-table entries for the memory pages wholly inside
    /// `[start, end)` of the mapping, which lies inside one block that holds no bytes
    /// private to this process (callers check `private_mark`).
    fn release_range(&mut self, start: usize, end: usize) {
        // Only whole memory pages: a page shared with a neighbouring block (blocks and
        // slots are not page-aligned) may hold that block's private bytes. The mapping
        // starts page-aligned, so offsets align like addresses.
        let page = os_page();
        let (start, end) = (start.next_multiple_of(page), end / page * page);
        if end <= start {
            return;
        }
        // SAFETY: the released range holds no page whose bytes exist only in this
        // process: a read-write open maps the image shared (MADV_DONTNEED drops this
        // process's page-table entries; dirty pages keep their data in the page cache),
        // and a read-only open maps it copy-on-write but never releases a page of a
        // block it stored into (`private_mark`; only pages wholly inside one block), so
        // the range's pages are the page cache's own, which no csd process changes while
        // we hold the image's lock. Either way every later access faults in the very same
        // bytes, so any slice into the range, and any reader on another thread
        // (`crate::pins`), sees its bytes unchanged. A failure only leaves the pages
        // resident: ignored.
        unsafe { self.map.dont_need(start, end - start) };
    }

    /// Read-ahead that matches a scan. The mapping is advised random (a few state bytes
    /// of a sparse image must not pull in megabytes), so a scan of pages that left the
    /// page cache would fault them in one memory page at a time, each a synchronous
    /// read of the host's disk (measured: a one-shot TPC-H Q6 at SF 1 after its image
    /// left the page cache took 7.5 s, 220K major faults; with this, 1.0 s). The slices
    /// are merged into runs per erase block, since a scan reads each block's pages in
    /// order. Where a run passes what was handled before in its block
    /// ([`FileStore::ahead`]), one memory page is probed (`mincore`: page tables and
    /// page cache, no I/O): not cached, the rest of the block's bytes from there are
    /// asked for at once (`MADV_WILLNEED`: the kernel queues the reads and returns);
    /// cached, the next [`AHEAD_PROBE_STRIDE`] bytes are taken as cached too (pages
    /// leave the page cache in runs), so a warm scan pays a probe per stride per block.
    fn will_need(&self, slices: &[&[u8]]) {
        let base = self.map.as_ptr() as usize;
        for s in slices.iter().filter(|s| !s.is_empty()) {
            if let Some(start) = (s.as_ptr() as usize).checked_sub(base) {
                self.ahead_from(start, start + s.len());
            }
        }
    }

    /// [`FileStore::will_need`] for bytes `[start, end)` of the mapping (inside one
    /// block).
    fn ahead_from(&self, start: usize, end: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        let len = self.map.len();
        let bb = self.layout.block_bytes;
        if bb == 0 || start < self.blocks_offset || end > len || end <= start {
            return;
        }
        let b = (start - self.blocks_offset) / bb;
        let block = self.blocks_offset + b * bb;
        let Some(mark) = self.ahead.get(b) else {
            return;
        };
        let done = block + mark.load(Relaxed) as usize;
        if end <= done {
            return;
        }
        let block_end = (block + bb).min(len);
        let probe = start.max(done) / os_page() * os_page();
        let mut resident = [0u8; 1];
        // SAFETY: `mincore` reads the page tables and the page cache for one memory page
        // of our own mapping (`probe` is page-aligned and inside the mapping, which
        // starts page-aligned) and writes one byte into `resident`, which has room for
        // it. No memory is accessed through the address.
        let rc = unsafe {
            libc::mincore(
                (self.map.as_ptr() as usize + probe) as *mut libc::c_void,
                1,
                resident.as_mut_ptr(),
            )
        };
        let upto = if rc == 0 && resident[0] & 1 == 0 {
            self.map.will_need(probe, block_end - probe);
            block_end
        } else {
            (end + AHEAD_PROBE_STRIDE).min(block_end)
        };
        mark.fetch_max((upto - block) as u32, Relaxed);
    }

    /// A block is erased or programmed: forget what [`FileStore::will_need`] handled in
    /// it.
    fn forget_ahead(&self, b: usize) {
        if let Some(m) = self.ahead.get(b) {
            m.store(0, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// `fdatasync` the file when anything changed since the last call: every page
    /// dirtied through the mapping (and the allocation metadata needed to read them) is
    /// on disk when this returns.
    fn persist(&mut self) -> Result<(), NandError> {
        if !self.dirty || self.access == Access::ReadOnly || !self.host_sync {
            return Ok(());
        }
        self.file
            .sync_data()
            .map_err(|e| self.io_error("cannot sync the image to disk", e))?;
        self.dirty = false;
        self.writeback.synced();
        if let Some(s) = &mut self.shadow {
            let (meta, blocks, bb) = (
                self.meta_offset,
                self.blocks_offset,
                self.layout.block_bytes,
            );
            s.absorb(&self.map, meta..meta + self.nblocks * 16, blocks, bb)
                .map_err(|e| image_error(&self.path, format!("durable copy: {e}")))?;
        }
        Ok(())
    }

    /// Check the per-block table whole: it is metadata the media trusts (16 bytes a
    /// block: a few hundred KiB at most).
    fn check_block_table(&self) -> Result<(), NandError> {
        let nblocks = self.nblocks;
        let layout = &self.layout;
        let table = &self.map[self.meta_offset..self.meta_offset + nblocks * 16];
        for (b, raw) in table.chunks_exact(16).enumerate() {
            let m: BlockMeta = bytemuck::pod_read_unaligned(raw);
            if self.version >= 3 && m.reserved != entry_crc(b, &m) {
                return Err(image_error(
                    &self.path,
                    format!(
                        "corrupt block table: the entry of block {b} fails its checksum (the table \
                         was overwritten or zeroed); the image cannot be trusted: restore it \
                         from a copy, or recreate it with `csd device create`"
                    ),
                ));
            }
            if m.next_page > layout.pages as u32 || m.flags & !BLOCK_FACTORY_BAD != 0 {
                return Err(image_error(
                    &self.path,
                    format!(
                        "corrupt block table: block {b} has write pointer {} (the block has {} pages) and flags {:#x}",
                        m.next_page, layout.pages, m.flags
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Make sure the file system holds the bytes of block `b` before the mapping writes
    /// to them: a write through a shared mapping into a hole of a full file system is a
    /// SIGBUS, which no error path can catch; `fallocate` turns it into `ENOSPC`. On a
    /// file system without `fallocate` (ext2, some network file systems) the range is
    /// rewritten with `pwrite` (its current bytes, read through the mapping: a hole reads
    /// as zeros), which allocates it or fails with `ENOSPC` just the same.
    ///
    /// Space is reserved as the block fills, a [`RESERVE_GRANULE`] at a time, so an
    /// image stays as sparse as what was written (open blocks do not pin whole erase
    /// blocks of disk space).
    fn reserve(&mut self, b: usize, upto: usize) -> Result<(), NandError> {
        let have = self.reserved[b] as usize;
        if self.access == Access::ReadOnly || have >= upto {
            return Ok(());
        }
        let end = upto
            .next_multiple_of(RESERVE_GRANULE)
            .min(self.layout.block_bytes);
        let start = self.blocks_offset + b * self.layout.block_bytes;
        allocate(
            &self.file,
            &self.map[start + have..start + end],
            (start + have) as u64,
        )
        .map_err(|err| self.space_error(b, err))?;
        self.reserved[b] = end as u32;
        Ok(())
    }

    /// [`Store::write_page`] on a read-write image: `pwrite` of the data (with the OOB
    /// bytes in one `pwritev` where they follow it, image versions 1 to 3; else stored
    /// through the mapping, whose OOB area beside the page states is mapped and reserved
    /// with them), then the state byte through the mapping.
    fn write_page(
        &mut self,
        b: usize,
        page: u32,
        data: &[u8],
        oob: &[u8],
        state: u8,
    ) -> Result<(), NandError> {
        self.begin_change()?;
        let layout = self.layout;
        self.reserve(b, layout.page_end(page))?;
        self.dirty = true;
        if let Some(s) = &mut self.shadow {
            s.mark_block(b);
        }
        let spare_len = layout.oob_range(page).len();
        let spare = if oob.is_empty() {
            if self.ff.len() < spare_len {
                self.ff = vec![0xFF; spare_len];
            }
            &self.ff[..spare_len]
        } else {
            oob
        };
        debug_assert_eq!(
            spare.len(),
            spare_len,
            "the spare bytes fill the page's OOB"
        );
        let base = self.blocks_offset + b * layout.block_bytes;
        let data_at = (base + layout.data_start(page)) as u64;
        let parts: &[&[u8]] = if layout.is_split() {
            &[data]
        } else {
            &[data, spare]
        };
        write_all_vectored_at(&self.file, parts, data_at).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) | Some(libc::EFBIG) => self.space_error(b, e),
            _ => self.io_error("cannot write a page to the image", e),
        })?;
        if self.host_sync {
            let written: usize = parts.iter().map(|p| p.len()).sum();
            self.writeback.wrote(&self.file, data_at, written);
        }
        if layout.is_split() {
            let o = base + layout.oob_start(page);
            self.map[o..o + spare_len].copy_from_slice(spare);
        }
        // The commit point, after the slot is in the page cache: a store through the
        // shared mapping (the same page cache), whose page of states is mapped already
        // (programs and reads look up page states there) and reserved in the file with
        // the slot, so no system call per program.
        self.map[base + page as usize] = state;
        Ok(())
    }

    /// Page `page` of block `b` will not be read before the block's erase: its data
    /// bytes go on the write-back thread's list of ranges to drop from the page cache
    /// (only on a read-write open that syncs: with `CSD_HOST_SYNC=off` nothing starts the
    /// pages' write-back, and dropping a dirty page would only start it; a copy-on-write
    /// open's changed pages are private to it).
    fn page_stale(&mut self, b: usize, page: u32) {
        if self.access != Access::ReadWrite || !self.host_sync {
            return;
        }
        let start = self.blocks_offset + b * self.layout.block_bytes + self.layout.data_start(page);
        self.writeback
            .stale(&self.file, start as u64, self.layout.data_range(page).len());
    }

    /// The error for space that could not be allocated for block `b`.
    fn space_error(&self, b: usize, err: std::io::Error) -> NandError {
        match err.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) | Some(libc::EFBIG) => NandError::ImageFull {
                path: self.path.clone(),
                block: b as u32,
            },
            _ => NandError::Image {
                path: self.path.clone(),
                reason: format!("cannot reserve the bytes of block {b}: {err}"),
            },
        }
    }
}

/// Allocate the file's bytes at `offset` whose current contents are `current` (as the
/// mapping shows them): `fallocate`, or where the file system has none, a `pwrite` of
/// those same bytes. Either fails with `ENOSPC` instead of leaving a hole that a store
/// through the mapping would turn into a SIGBUS.
fn allocate(file: &File, current: &[u8], offset: u64) -> std::io::Result<()> {
    // SAFETY: `fallocate` on a file descriptor we own, over a range inside the file's
    // length (checked when the image was opened or created); mode 0 only allocates.
    let r = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            0,
            offset as libc::off_t,
            current.len() as libc::off_t,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EOPNOTSUPP) {
        return Err(err);
    }
    use std::os::unix::fs::FileExt;
    file.write_all_at(current, offset)
}

/// Write `parts` one after the other at `offset` of `file` (`pwritev`, continued after
/// a short write).
fn write_all_vectored_at(file: &File, parts: &[&[u8]], mut offset: u64) -> std::io::Result<()> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let iov: Vec<libc::iovec> = parts
        .iter()
        .map(|p| libc::iovec {
            iov_base: p.as_ptr() as *mut libc::c_void,
            iov_len: p.len(),
        })
        .collect();
    // SAFETY: every iovec points to a live slice of `parts` of its length, which the
    // kernel only reads; the descriptor is owned by `file`.
    let n = unsafe {
        libc::pwritev(
            file.as_raw_fd(),
            iov.as_ptr(),
            iov.len() as libc::c_int,
            offset as libc::off_t,
        )
    };
    let mut done = usize::try_from(n).map_err(|_| std::io::Error::last_os_error())?;
    if done == total {
        return Ok(());
    }
    use std::os::unix::fs::FileExt;
    offset += done as u64;
    for p in parts {
        if done >= p.len() {
            done -= p.len();
            continue;
        }
        file.write_all_at(&p[done..], offset)?;
        offset += (p.len() - done) as u64;
        done = 0;
    }
    Ok(())
}

/// Fill `a` then `b` from `file` at `offset` (`preadv`, continued after a short read;
/// reading past the end of the file is an error).
fn read_all_vectored_at(
    file: &File,
    a: &mut [u8],
    b: &mut [u8],
    offset: u64,
) -> std::io::Result<()> {
    let iov = [
        libc::iovec {
            iov_base: a.as_mut_ptr() as *mut libc::c_void,
            iov_len: a.len(),
        },
        libc::iovec {
            iov_base: b.as_mut_ptr() as *mut libc::c_void,
            iov_len: b.len(),
        },
    ];
    // SAFETY: both iovecs point to live, exclusively borrowed slices of their lengths,
    // which the kernel writes within; the descriptor is owned by `file`.
    let n = unsafe { libc::preadv(file.as_raw_fd(), iov.as_ptr(), 2, offset as libc::off_t) };
    let done = usize::try_from(n).map_err(|_| std::io::Error::last_os_error())?;
    use std::os::unix::fs::FileExt;
    if done < a.len() {
        file.read_exact_at(&mut a[done..], offset + done as u64)?;
        file.read_exact_at(b, offset + a.len() as u64)
    } else if done < a.len() + b.len() {
        let k = done - a.len();
        file.read_exact_at(&mut b[k..], offset + done as u64)
    } else {
        Ok(())
    }
}

/// Bytes of an image file reserved at a time as a block fills.
const RESERVE_GRANULE: usize = 256 << 10;

/// A corrupt-header error naming the field.
fn corrupt(path: &Path, field: &str, found: impl std::fmt::Display, expected: String) -> NandError {
    NandError::Image {
        path: path.to_path_buf(),
        reason: format!("corrupt image header: {field} is {found}, expected {expected}"),
    }
}

/// An image that cannot be used, and why.
fn image_error(path: &Path, reason: String) -> NandError {
    NandError::Image {
        path: path.to_path_buf(),
        reason,
    }
}

/// Open the image file for `access` and take its lock (exclusive to write, shared to
/// read); returns the file and its length, refused when shorter than a header.
fn open_locked(path: &Path, access: Access) -> Result<(File, u64), NandError> {
    let bad = |reason: String| image_error(path, reason);
    let file = match access {
        Access::ReadWrite => OpenOptions::new().read(true).write(true).open(path),
        Access::ReadOnly => OpenOptions::new().read(true).open(path),
    }
    .map_err(|e| {
        if e.kind() == std::io::ErrorKind::PermissionDenied && access == Access::ReadWrite {
            bad(format!(
                "{e}: the file is not writable; commands that only read open it read-only, \
                 others need write permission"
            ))
        } else {
            bad(e.to_string())
        }
    })?;
    let locked = match access {
        Access::ReadWrite => file.try_lock(),
        Access::ReadOnly => file.try_lock_shared(),
    };
    locked.map_err(|_| NandError::Locked {
        path: path.to_path_buf(),
    })?;
    let len = file.metadata().map_err(|e| bad(e.to_string()))?.len();
    if len < HEADER_BYTES as u64 {
        return Err(bad(format!(
            "file is {len} bytes, too short to be a csd image"
        )));
    }
    Ok((file, len))
}

/// Read and check the header through the file before mapping anything: magic, version,
/// sizes, checksum (version 2) and the recorded device config.
fn read_header(path: &Path, file: &File) -> Result<(HeaderV1, DeviceConfig, u32), NandError> {
    let bad = |reason: String| image_error(path, reason);
    let mut head = vec![0u8; HEADER_BYTES];
    {
        use std::os::unix::fs::FileExt;
        file.read_exact_at(&mut head, 0)
            .map_err(|e| bad(format!("cannot read the header: {e}")))?;
    }
    let v1: HeaderV1 = bytemuck::pod_read_unaligned(&head[..std::mem::size_of::<HeaderV1>()]);
    if v1.magic != MAGIC {
        return Err(bad("not a csd image (bad magic)".into()));
    }
    let hdr_fixed = match v1.version {
        1 => std::mem::size_of::<HeaderV1>(),
        2..=VERSION => std::mem::size_of::<Header>(),
        v => {
            return Err(bad(format!(
                "image version {v} is not supported (this csd reads versions 1 to {VERSION})"
            )));
        }
    };
    if v1.header_bytes as usize != HEADER_BYTES {
        return Err(corrupt(
            path,
            "header_bytes",
            v1.header_bytes,
            HEADER_BYTES.to_string(),
        ));
    }
    let clen = v1.config_len as usize;
    if clen > HEADER_BYTES - hdr_fixed {
        return Err(corrupt(
            path,
            "config_len",
            clen,
            format!("at most {}", HEADER_BYTES - hdr_fixed),
        ));
    }
    let config = &head[hdr_fixed..hdr_fixed + clen];
    let mut state = 0;
    if v1.version >= 2 {
        let h: Header = bytemuck::pod_read_unaligned(&head[..hdr_fixed]);
        state = h.state;
        let want = h.crc_of(config);
        if h.crc != want {
            return Err(bad(format!(
                "corrupt image header: checksum is {:#010x}, expected {want:#010x} (the header or the recorded device config was changed)",
                h.crc
            )));
        }
    }
    let text = std::str::from_utf8(config)
        .map_err(|_| bad("corrupt image header: the recorded config is not UTF-8".into()))?;
    let cfg = DeviceConfig::from_toml(text)
        .map_err(|e| bad(format!("corrupt image header: recorded config: {e}")))?;
    Ok((v1, cfg, state))
}

/// Check the header's geometry, sizes and offsets against the recorded config and the
/// file's length `len`; returns the offsets of the block table and of the blocks.
fn check_geometry(
    path: &Path,
    v1: &HeaderV1,
    cfg: &DeviceConfig,
    layout: &Layout,
    len: u64,
) -> Result<(u64, u64), NandError> {
    let nblocks = cfg.geometry.total_blocks();
    let geo = geo_words(&cfg.geometry);
    if v1.geo != geo {
        return Err(corrupt(
            path,
            "geometry",
            format!("{:?}", v1.geo),
            format!("{geo:?} (from the recorded config)"),
        ));
    }
    if v1.block_bytes != layout.block_bytes as u64 {
        return Err(corrupt(
            path,
            "block_bytes",
            v1.block_bytes,
            layout.block_bytes.to_string(),
        ));
    }
    if v1.blocks != nblocks {
        return Err(corrupt(path, "blocks", v1.blocks, nblocks.to_string()));
    }
    let (meta_offset, blocks_offset, need) = image_offsets(nblocks, layout)
        .ok_or_else(|| image_error(path, "corrupt image header: the geometry overflows".into()))?;
    if v1.meta_offset != meta_offset {
        return Err(corrupt(
            path,
            "meta_offset",
            v1.meta_offset,
            meta_offset.to_string(),
        ));
    }
    if v1.blocks_offset != blocks_offset {
        return Err(corrupt(
            path,
            "blocks_offset",
            v1.blocks_offset,
            blocks_offset.to_string(),
        ));
    }
    if len < need {
        return Err(image_error(
            path,
            format!("image is truncated: the file is {len} bytes but the geometry needs {need}"),
        ));
    }
    Ok((meta_offset, blocks_offset))
}

impl Store {
    pub fn new_mem(g: &Geometry, meta: Vec<BlockMeta>) -> Store {
        let n = meta.len();
        Store::Mem(MemStore {
            meta,
            blocks: (0..n).map(|_| None).collect(),
            layout: Layout::new(g),
            held: 0,
            limit: default_memory_limit(),
            ready: None,
        })
    }

    /// Create a new image file at `path` (which must not exist).
    pub fn create_file(
        path: &Path,
        cfg: &DeviceConfig,
        meta: Vec<BlockMeta>,
    ) -> Result<Store, NandError> {
        Store::create_file_version(path, cfg, meta, VERSION)
    }

    /// [`Store::create_file`] in format `version` (3 or 4: the block layout of images
    /// made before version 4, to test that they are still read).
    pub fn create_file_version(
        path: &Path,
        cfg: &DeviceConfig,
        meta: Vec<BlockMeta>,
        version: u32,
    ) -> Result<Store, NandError> {
        if !(3..=VERSION).contains(&version) {
            return Err(image_error(
                path,
                format!("cannot create an image of version {version} (3 to {VERSION})"),
            ));
        }
        let layout = Layout::of_version(&cfg.geometry, version);
        let io = |e: std::io::Error| NandError::Image {
            path: path.to_path_buf(),
            reason: e.to_string(),
        };
        let toml = cfg.to_toml();
        let hdr_fixed = std::mem::size_of::<Header>();
        if hdr_fixed + toml.len() > HEADER_BYTES {
            return Err(NandError::Image {
                path: path.to_path_buf(),
                reason: "device config too large for the image header".into(),
            });
        }
        let nblocks = meta.len();
        let (meta_offset, blocks_offset, total) = image_offsets(nblocks as u64, &layout)
            .ok_or_else(|| NandError::Image {
                path: path.to_path_buf(),
                reason: "the geometry is too large for an image file".into(),
            })?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(io)?;
        // From here on the file is ours: any failure removes it, so a retry does not
        // meet "File exists" and a full file system keeps no half-made image.
        let made = (|| {
            file.try_lock().map_err(|_| NandError::Locked {
                path: path.to_path_buf(),
            })?;
            file.set_len(total).map_err(io)?;
            let mut header = Header {
                v1: HeaderV1 {
                    magic: MAGIC,
                    version,
                    header_bytes: HEADER_BYTES as u32,
                    geo: geo_words(&cfg.geometry),
                    config_len: toml.len() as u32,
                    block_bytes: layout.block_bytes as u64,
                    meta_offset,
                    blocks_offset,
                    blocks: nblocks as u64,
                },
                crc: 0,
                state: 0,
            };
            header.crc = header.crc_of(toml.as_bytes());
            // Header and block table are written with `pwrite` (not through a mapping):
            // a full file system is then ENOSPC, not a SIGBUS.
            let mut head = vec![0u8; blocks_offset as usize];
            head[..hdr_fixed].copy_from_slice(bytemuck::bytes_of(&header));
            head[hdr_fixed..hdr_fixed + toml.len()].copy_from_slice(toml.as_bytes());
            for (b, m) in meta.iter().enumerate() {
                let m = BlockMeta {
                    reserved: entry_crc(b, m),
                    ..*m
                };
                let o = meta_offset as usize + b * 16;
                head[o..o + 16].copy_from_slice(bytemuck::bytes_of(&m));
            }
            {
                use std::os::unix::fs::FileExt;
                file.write_all_at(&head, 0).map_err(io)?;
            }
            file.sync_all().map_err(io)?;
            // SAFETY: the file was just created by us with `create_new` and is held under
            // an exclusive advisory lock for the life of the mapping; csd never truncates
            // it while mapped. Modification by an unrelated process that ignores the lock
            // is outside the contract of an image file (documented in `Nand::open_image`).
            let map = unsafe {
                Mapped::map_file(&file, total as usize, false, Placement::Boundary, os_page())
            }
            .map_err(io)?;
            map.advise_random();
            Ok(map)
        })();
        let map = match made {
            Ok(map) => map,
            Err(e) => {
                drop(file);
                let _ = std::fs::remove_file(path);
                return Err(e);
            }
        };
        let mut store = FileStore {
            map,
            file,
            path: path.to_path_buf(),
            meta_offset: meta_offset as usize,
            blocks_offset: blocks_offset as usize,
            layout,
            nblocks,
            access: Access::ReadWrite,
            reserved: vec![0; nblocks],
            version,
            dirty: false,
            marked_open: false,
            shadow: None,
            host_sync: host_sync(),
            writeback: Default::default(),
            touched: Vec::new(),
            touched_mark: Vec::new(),
            release_bytes: RELEASE_WRITTEN_BYTES,
            release_read_bytes: None,
            read_window: Vec::new(),
            read_window_bytes: 0,
            private_mark: Vec::new(),
            ahead: (0..nblocks)
                .map(|_| std::sync::atomic::AtomicU32::new(0))
                .collect(),
            runs: vec![(NO_PAGE, 0); nblocks],
            ff: Vec::new(),
        };
        store.shadow_from_env()?;
        Ok(Store::File(store))
    }

    /// Open an existing image; returns the store, the config recorded in it and whether
    /// the image predates format version 2 (its write pointers need one repair scan).
    ///
    /// Every header field is checked against the file length and the others with checked
    /// arithmetic before anything is mapped or used; a mismatch is an error that names
    /// the field, never a panic.
    pub fn open_file(
        path: &Path,
        access: Access,
    ) -> Result<(Store, DeviceConfig, bool), NandError> {
        let (file, len) = open_locked(path, access)?;
        let (v1, cfg, state) = read_header(path, &file)?;
        let layout = Layout::of_version(&cfg.geometry, v1.version);
        let (meta_offset, blocks_offset) = check_geometry(path, &v1, &cfg, &layout, len)?;
        // SAFETY: as in `create_file`: we hold the lock (exclusive for read-write, shared
        // for read-only, so no csd process writes the file while it is mapped) and never
        // truncate the file while it is mapped. A read-only open maps copy-on-write
        // (`MAP_PRIVATE`): stores go to private memory, never to the file.
        let map = unsafe {
            Mapped::map_file(
                &file,
                len as usize,
                access == Access::ReadOnly,
                match access {
                    Access::ReadOnly => Placement::PastBoundary,
                    Access::ReadWrite => Placement::Boundary,
                },
                os_page(),
            )
        }
        .map_err(|e| image_error(path, e.to_string()))?;
        // Random access: no readahead storms when a few state bytes of a sparse image
        // are touched.
        map.advise_random();
        let nblocks = cfg.geometry.total_blocks() as usize;
        let unclean = state & STATE_OPEN != 0;
        let mut store = FileStore {
            map,
            file,
            path: path.to_path_buf(),
            meta_offset: meta_offset as usize,
            blocks_offset: blocks_offset as usize,
            layout,
            nblocks,
            access,
            reserved: vec![0; nblocks],
            version: v1.version,
            dirty: false,
            // Version 1 has no open flag: every open repairs.
            marked_open: unclean || v1.version == 1,
            shadow: None,
            host_sync: host_sync(),
            writeback: Default::default(),
            touched: Vec::new(),
            touched_mark: Vec::new(),
            release_bytes: RELEASE_WRITTEN_BYTES,
            release_read_bytes: None,
            read_window: Vec::new(),
            read_window_bytes: 0,
            private_mark: Vec::new(),
            ahead: (0..nblocks)
                .map(|_| std::sync::atomic::AtomicU32::new(0))
                .collect(),
            runs: vec![(NO_PAGE, 0); nblocks],
            ff: Vec::new(),
        };
        store.check_block_table()?;
        if access == Access::ReadWrite && store.version == 2 {
            store.upgrade()?;
        }
        if access == Access::ReadWrite {
            store.shadow_from_env()?;
        }
        Ok((Store::File(store), cfg, v1.version == 1 || unclean))
    }

    #[inline]
    pub fn layout(&self) -> &Layout {
        match self {
            Store::Mem(m) => &m.layout,
            Store::File(f) => &f.layout,
        }
    }

    #[inline]
    pub fn meta(&self, b: usize) -> BlockMeta {
        match self {
            Store::Mem(m) => m.meta[b],
            Store::File(f) => {
                let o = f.meta_offset + b * 16;
                bytemuck::pod_read_unaligned(&f.map[o..o + 16])
            }
        }
    }

    #[inline]
    pub fn set_meta(&mut self, b: usize, v: BlockMeta) {
        match self {
            Store::Mem(m) => m.meta[b] = v,
            Store::File(f) => {
                debug_assert!(f.marked_open || f.access == Access::ReadOnly);
                let v = BlockMeta {
                    reserved: entry_crc(b, &v),
                    ..v
                };
                let o = f.meta_offset + b * 16;
                f.map[o..o + 16].copy_from_slice(bytemuck::bytes_of(&v));
                f.dirty = true;
                if let Some(s) = &mut f.shadow {
                    s.meta = true;
                }
                if v.next_page == 0 {
                    // Erased: its pages will be new ones.
                    f.forget_ahead(b);
                }
            }
        }
    }

    /// Hint the CPU cache about block `b`'s metadata (see [`crate::Nand::prefetch`]).
    #[inline]
    pub fn prefetch_meta(&self, b: usize) {
        match self {
            Store::Mem(m) => {
                if let Some(v) = m.meta.get(b..b + 1) {
                    crate::prefetch_lines(bytemuck::cast_slice(v));
                }
            }
            Store::File(f) => {
                let o = f.meta_offset + b * 16;
                if let Some(v) = f.map.get(o..o + 16) {
                    crate::prefetch_lines(v);
                }
            }
        }
    }

    /// The bytes of block `b`, or `None` if it was never touched (memory backend).
    #[inline]
    pub fn block(&self, b: usize) -> Option<&[u8]> {
        match self {
            Store::Mem(m) => m.blocks[b].as_ref().map(|x| x.as_slice()),
            Store::File(f) => {
                let o = f.blocks_offset + b * f.layout.block_bytes;
                Some(&f.map[o..o + f.layout.block_bytes])
            }
        }
    }

    /// The bytes of block `b`, allocating it (zeroed: all pages erased) if needed, of
    /// which the caller will write the first `upto`. On an image file those bytes are
    /// reserved in the file system first, so a full file system is an
    /// [`NandError::ImageFull`] error rather than a SIGBUS.
    #[inline]
    pub fn block_mut(&mut self, b: usize, upto: usize) -> Result<&mut [u8], NandError> {
        match self {
            Store::Mem(m) => {
                let n = m.layout.block_bytes;
                if m.blocks[b].is_none() {
                    let size = n.next_multiple_of(4096);
                    if let Some(limit) = m.limit.filter(|&l| m.held.saturating_add(size) > l) {
                        return Err(NandError::MemoryFull {
                            block: b as u32,
                            used_bytes: m.held as u64,
                            limit_bytes: limit as u64,
                        });
                    }
                    let ready = m.ready.as_ref().and_then(|r| r.take(m.held + size));
                    m.blocks[b] = Some(ready.or_else(|| AnonBlock::new(n)).ok_or_else(|| {
                        NandError::Image {
                            path: PathBuf::from("(memory)"),
                            reason: format!("cannot allocate {n} bytes for block {b}"),
                        }
                    })?);
                    m.held += size;
                }
                Ok(m.blocks[b]
                    .as_mut()
                    .map_or(&mut [][..], |x| x.as_mut_slice()))
            }
            Store::File(f) => {
                f.begin_change()?;
                f.reserve(b, upto)?;
                f.note_written(b);
                f.dirty = true;
                if let Some(s) = &mut f.shadow {
                    s.mark_block(b);
                }
                let o = f.blocks_offset + b * f.layout.block_bytes;
                Ok(&mut f.map[o..o + f.layout.block_bytes])
            }
        }
    }

    /// Make block `b` ready for a program whose slot ends at `upto` ([`Store::write_page`]
    /// follows): on an image opened read-write, the header's open flag is on disk and
    /// the bytes are reserved in the file system, and nothing else happens: the program
    /// reaches the file with `pwritev`, not through the mapping, so the block does not
    /// count toward the release of blocks written through the mapping
    /// ([`FileStore::note_touched`]). Counting it made a device that writes round robin
    /// over more dies than the release size holds blocks (64 dies of 6 MiB blocks
    /// against 256 MiB) release every block it wrote to, one `madvise` per program, and
    /// fault the page states back in at the next program (csd serve randwrite: 5% of the
    /// server's CPU). Elsewhere this is [`Store::block_mut`].
    pub fn prepare_program(&mut self, b: usize, upto: usize) -> Result<(), NandError> {
        if let Store::File(f) = self
            && f.access == Access::ReadWrite
        {
            f.begin_change()?;
            return f.reserve(b, upto);
        }
        self.block_mut(b, upto).map(|_| ())
    }

    /// Store a programmed page of block `b`: its slot (`data`, then `oob` or all-`0xFF`
    /// spare bytes), then its state byte, in that order (the state byte is the commit
    /// point). The caller has made the block writable ([`Store::prepare_program`] up to
    /// the slot's end). On an image opened read-write the slot goes to the file with
    /// `pwritev`, not through the mapping: the shared mapping sees it at once (one page
    /// cache), and the process takes no page fault, dirties no page-table entry and
    /// keeps nothing resident for it; the state byte is stored through the mapping,
    /// whose page of states is resident anyway. Elsewhere everything is stored through
    /// memory (a read-only open's copy-on-write mapping keeps it private).
    pub fn write_page(
        &mut self,
        b: usize,
        page: u32,
        data: &[u8],
        oob: &[u8],
        state: u8,
    ) -> Result<(), NandError> {
        let layout = *self.layout();
        if let Store::File(f) = self
            && f.access == Access::ReadWrite
        {
            return f.write_page(b, page, data, oob, state);
        }
        let bytes = self.block_mut(b, layout.page_end(page))?;
        let d = layout.data_start(page);
        bytes[d..d + data.len()].copy_from_slice(data);
        let dst = &mut bytes[layout.oob_range(page)];
        if oob.is_empty() {
            dst.fill(0xFF);
        } else {
            dst.copy_from_slice(oob);
        }
        bytes[page as usize] = state;
        Ok(())
    }

    /// Copy bytes of block `b` into `data` and `oob` (each with its offset in the
    /// block) without the mapping, when reads are released (a scan: see
    /// [`crate::Nand::set_release_read_bytes`]) and the file holds this process's view
    /// of the block (a read-write open, or a block a read-only open never stored into):
    /// with `pread`, so a scan's copy neither faults pages into this process nor keeps
    /// them resident (they stay in the host's page cache). Returns false, copying
    /// nothing, otherwise: reads that keep their pages (a server's random reads over a
    /// working set) copy from the mapping, which is cheaper than a system call once the
    /// pages are mapped (csd serve randread: 4.9 µs of server CPU per read from the
    /// mapping against 6.8 µs with `pread`), and only the mapping has private bytes.
    pub fn read_into(
        &self,
        b: usize,
        (data_at, data): (usize, &mut [u8]),
        (oob_at, oob): (usize, &mut [u8]),
    ) -> Result<bool, NandError> {
        let Store::File(f) = self else {
            return Ok(false);
        };
        if f.release_read_bytes.is_none()
            || f.access == Access::ReadOnly && f.private_mark.get(b).copied().unwrap_or(false)
        {
            return Ok(false);
        }
        use std::os::unix::fs::FileExt;
        let base = (f.blocks_offset + b * f.layout.block_bytes) as u64;
        let r = if !oob.is_empty() && data_at + data.len() == oob_at {
            // A whole page: its sectors' spare bytes follow its data, one system call.
            read_all_vectored_at(&f.file, data, oob, base + data_at as u64)
        } else {
            f.file
                .read_exact_at(data, base + data_at as u64)
                .and_then(|()| {
                    if oob.is_empty() {
                        Ok(())
                    } else {
                        f.file.read_exact_at(oob, base + oob_at as u64)
                    }
                })
        };
        r.map_err(|e| f.io_error("cannot read a page of the image", e))?;
        Ok(true)
    }

    /// How the image was opened (read-write for the memory backend).
    pub fn access(&self) -> Access {
        match self {
            Store::Mem(_) => Access::ReadWrite,
            Store::File(f) => f.access,
        }
    }

    pub fn blocks(&self) -> usize {
        match self {
            Store::Mem(m) => m.meta.len(),
            Store::File(f) => f.nblocks,
        }
    }

    /// The memory limit of an in-memory store (`None` for an image file, or no limit).
    pub fn memory_limit(&self) -> Option<u64> {
        match self {
            Store::Mem(m) => m.limit.map(|l| l as u64),
            Store::File(_) => None,
        }
    }

    /// Set the memory limit of an in-memory store; `false` for an image file.
    pub fn set_memory_limit(&mut self, limit: Option<u64>) -> bool {
        match self {
            Store::Mem(m) => {
                m.limit = limit.map(|l| usize::try_from(l).unwrap_or(usize::MAX));
                if let Some(r) = &m.ready {
                    r.set_limit(m.limit);
                }
                true
            }
            Store::File(_) => false,
        }
    }

    /// Keep `bytes` of block memory ready (see [`crate::Nand::keep_memory_ready`]).
    pub fn keep_memory_ready(&mut self, bytes: u64) -> bool {
        let Store::Mem(m) = self else {
            return false;
        };
        // The pool before goes first (its thread joined, its memory unmapped).
        m.ready = None;
        if bytes == 0 {
            return true;
        }
        let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        let fresh = m.blocks.iter().filter(|b| b.is_none()).count();
        m.ready = crate::ready::Ready::start(m.layout.block_bytes, bytes, fresh, m.held, m.limit);
        m.ready.is_some()
    }

    /// Counters of the memory kept ready; `None` when none is.
    pub fn memory_ready_stats(&self) -> Option<crate::ReadyStats> {
        match self {
            Store::Mem(m) => m.ready.as_ref().map(|r| r.stats()),
            Store::File(_) => None,
        }
    }

    /// Wait until the memory kept ready is as full as it may be (tests, benchmarks).
    pub fn wait_memory_ready(&self) {
        if let Store::Mem(MemStore { ready: Some(r), .. }) = self {
            r.wait_full();
        }
    }

    /// Bytes of memory (or mapped file) actually holding block contents.
    pub fn resident_block_bytes(&self) -> u64 {
        match self {
            Store::Mem(m) => m
                .blocks
                .iter()
                .flatten()
                .map(|b| b.as_slice().len() as u64)
                .sum(),
            Store::File(f) => (f.nblocks * f.layout.block_bytes) as u64,
        }
    }

    pub fn path(&self) -> Option<&Path> {
        match self {
            Store::Mem(_) => None,
            Store::File(f) => Some(&f.path),
        }
    }

    /// Before a change that does not go through [`Store::block_mut`] (a block-table
    /// entry alone): on an image, the header's open flag is on disk first.
    pub fn begin_change(&mut self) -> Result<(), NandError> {
        match self {
            Store::Mem(_) => Ok(()),
            Store::File(f) => f.begin_change(),
        }
    }

    /// Blocks counted toward the next release of blocks written through the mapping.
    #[cfg(test)]
    pub(crate) fn touched_blocks(&self) -> usize {
        match self {
            Store::Mem(_) => 0,
            Store::File(f) => f.touched.len(),
        }
    }

    /// See [`crate::Nand::set_release_written_bytes`].
    pub fn set_release_written_bytes(&mut self, bytes: usize) {
        if let Store::File(f) = self {
            f.release_bytes = bytes;
        }
    }

    /// See [`crate::Nand::page_stale`]: page `page` of block `b` (in range) holds no
    /// data that will be read before the block's erase.
    #[inline]
    pub fn page_stale(&mut self, b: usize, page: u32) {
        if let Store::File(f) = self {
            f.page_stale(b, page);
        }
    }

    /// See [`crate::Nand::release_read_pages`].
    pub fn release_read_pages(&mut self) {
        if let Store::File(f) = self {
            f.release_read_blocks();
        }
    }

    /// See [`crate::Nand::set_release_read_bytes`].
    pub fn set_release_read_bytes(&mut self, bytes: Option<usize>) {
        if let Store::File(f) = self {
            f.release_read_bytes = bytes;
        }
    }

    /// Page `page` of block `b` is about to be read (see
    /// [`crate::Nand::set_release_read_bytes`]).
    #[inline]
    pub fn note_read(&mut self, b: usize, page: u32) {
        if let Store::File(f) = self {
            f.note_read(b, page);
        }
    }

    /// Stored bytes `slices` (slices of this store, as [`crate::Nand::stored_sectors`]
    /// hands them out) are about to be read: start reading from the host's disk, in the
    /// background, whatever of them is not in the page cache (see
    /// [`FileStore::will_need`]). No-op in memory.
    pub fn will_need(&self, slices: &[&[u8]]) {
        if let Store::File(f) = self {
            f.will_need(slices);
        }
    }

    /// How far into block `b` read-ahead has been handled (tests).
    #[cfg(test)]
    pub(crate) fn ahead_mark(&self, b: usize) -> u32 {
        match self {
            Store::Mem(_) => 0,
            Store::File(f) => f.ahead[b].load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Make every change so far durable on the host's disk (image file; no-op in memory
    /// and for a read-only open). Cheap when nothing changed since the last call.
    pub fn persist(&mut self) -> Result<(), NandError> {
        match self {
            Store::Mem(_) => Ok(()),
            Store::File(f) => f.persist(),
        }
    }

    /// A clean close: everything durable, then the header's open flag cleared (and
    /// durable), so the next open needs no repair scan. No-op in memory and read-only.
    pub fn sync(&mut self) -> Result<(), NandError> {
        match self {
            Store::Mem(_) => Ok(()),
            Store::File(f) if f.access == Access::ReadOnly => Ok(()),
            Store::File(f) => {
                let host_sync = std::mem::replace(&mut f.host_sync, true);
                let r = f.persist().and_then(|()| {
                    if f.marked_open {
                        f.set_open_flag(false)
                    } else {
                        Ok(())
                    }
                });
                f.host_sync = host_sync;
                r
            }
        }
    }

    /// Keep a copy of what is known to be on disk at `path` (see [`crate::hostcrash`]):
    /// the image as it is now (made durable first), then, at every persist, the blocks
    /// and tables changed since. Image files opened read-write only.
    pub fn track_durable_copy(&mut self, path: &Path) -> Result<(), NandError> {
        match self {
            Store::File(f) if f.access == Access::ReadWrite => {
                f.dirty = true;
                f.persist()?;
                f.shadow = Some(
                    crate::hostcrash::Shadow::create(path, &f.map, f.nblocks)
                        .map_err(|e| image_error(path, format!("durable copy: {e}")))?,
                );
                Ok(())
            }
            _ => Err(NandError::Image {
                path: path.to_path_buf(),
                reason: "a durable copy is kept only for an image opened read-write".into(),
            }),
        }
    }
}

impl FileStore {
    /// Version 2 images opened read-write become version 3: the block-table
    /// entries get their checksums first (durable), then the header says version 3.
    fn upgrade(&mut self) -> Result<(), NandError> {
        for b in 0..self.nblocks {
            let o = self.meta_offset + b * 16;
            let m: BlockMeta = bytemuck::pod_read_unaligned(&self.map[o..o + 16]);
            let m = BlockMeta {
                reserved: entry_crc(b, &m),
                ..m
            };
            self.map[o..o + 16].copy_from_slice(bytemuck::bytes_of(&m));
        }
        self.dirty = true;
        self.persist()?;
        // Sets the version with the open flag (a repair may follow).
        self.set_open_flag(true)
    }

    /// `CSD_DURABLE_COPY` set (to anything): keep the durable copy at `IMAGE.durable`,
    /// for host-crash tests of processes (`csd serve`, `csd kv serve`) run by a test.
    fn shadow_from_env(&mut self) -> Result<(), NandError> {
        if std::env::var_os("CSD_DURABLE_COPY").is_none() {
            return Ok(());
        }
        let mut p = self.path.clone().into_os_string();
        p.push(".durable");
        let p = PathBuf::from(p);
        self.dirty = true;
        self.persist()?;
        self.shadow = Some(
            crate::hostcrash::Shadow::create(&p, &self.map, self.nblocks)
                .map_err(|e| image_error(&p, format!("durable copy: {e}")))?,
        );
        Ok(())
    }
}

#[cfg(test)]
mod limit_tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn block_memory_is_never_on_huge_pages() {
        // Whatever the system's setting, the kernel reports the block's mapping as not
        // eligible for transparent huge pages, and none backs it once written.
        let mut b = AnonBlock::new(6 << 20).expect("map 6 MiB");
        b.as_mut_slice().fill(1);
        let at = b.as_slice().as_ptr() as usize;
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
        let mut lines = smaps.lines();
        let mut found = false;
        while let Some(l) = lines.next() {
            let Some((lo, hi)) = l.split_whitespace().next().and_then(|r| r.split_once('-')) else {
                continue;
            };
            let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            else {
                continue;
            };
            if !(lo..hi).contains(&at) {
                continue;
            }
            found = true;
            for f in lines
                .by_ref()
                .take_while(|f| !f.contains('-') || f.contains(':'))
            {
                if let Some(v) = f.strip_prefix("AnonHugePages:") {
                    assert_eq!(v.trim(), "0 kB", "{f}");
                }
                if let Some(v) = f.strip_prefix("THPeligible:") {
                    assert_eq!(v.trim(), "0", "{f}");
                }
                if f.starts_with("VmFlags:") {
                    break;
                }
            }
            break;
        }
        // Kernels without smaps (or a sandbox hiding it) have nothing to check.
        assert!(
            found || smaps.is_empty(),
            "the block's mapping is in /proc/self/smaps"
        );
    }

    #[test]
    fn memory_limit_settings_read_as_sizes_or_off() {
        assert_eq!(memory_limit_setting("8g"), Some(Some(8 << 30)));
        assert_eq!(memory_limit_setting(" 512MiB "), Some(Some(512 << 20)));
        assert_eq!(memory_limit_setting("off"), Some(None));
        assert_eq!(memory_limit_setting("None"), Some(None));
        assert_eq!(memory_limit_setting("lots"), None);
        assert_eq!(memory_limit_setting(""), None);
    }

    #[test]
    fn available_memory_comes_from_meminfo() {
        let info =
            "MemTotal:       24000000 kB\nMemFree:         1000 kB\nMemAvailable:   20000000 kB\n";
        assert_eq!(available_from_meminfo(info), Some(20_000_000 * 1024));
        assert_eq!(available_from_meminfo("MemTotal: 1 kB\n"), None);
        assert_eq!(available_from_meminfo("MemAvailable: many kB\n"), None);
    }

    #[test]
    fn a_block_past_the_limit_is_refused_and_changes_nothing() {
        let cfg = DeviceConfig::preset("tiny").unwrap();
        let n = cfg.geometry.total_blocks() as usize;
        let mut s = Store::new_mem(&cfg.geometry, vec![BlockMeta::zeroed(); n]);
        let mapped = s.layout().block_bytes.next_multiple_of(4096) as u64;
        assert!(s.set_memory_limit(Some(2 * mapped)));
        s.block_mut(0, 1).unwrap();
        s.block_mut(1, 1).unwrap();
        // Blocks already held take no more memory.
        s.block_mut(0, 1).unwrap();
        let e = s.block_mut(2, 1).unwrap_err();
        assert_eq!(
            e,
            NandError::MemoryFull {
                block: 2,
                used_bytes: 2 * mapped,
                limit_bytes: 2 * mapped
            }
        );
        assert!(s.block(2).is_none(), "the refused block was not allocated");
        assert_eq!(s.resident_block_bytes(), 2 * s.layout().block_bytes as u64);
        assert!(s.set_memory_limit(None));
        s.block_mut(2, 1).unwrap();
        assert_eq!(s.memory_limit(), None);
    }
}
