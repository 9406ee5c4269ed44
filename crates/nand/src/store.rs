//! Where the flash contents live: in memory (sparse: a block costs memory only once it
//! has been programmed) or in an image file (sparse on disk, memory-mapped).
//!
//! Both backends share one layout per erase block: `pages_per_block` page-state bytes
//! (padded to 64), then `pages_per_block` page slots of `page_size + OOB` bytes. The
//! page-state byte is the commit point of a program: data is copied first, the state is
//! set after, so a process killed in between leaves the page reading as erased. The
//! image file adds a header (magic, version, geometry, the device config as TOML) and a
//! table of per-block metadata (P/E count, write pointer, flags) before the blocks.
//! Because the image is a shared memory mapping, every completed store survives the
//! process being killed (the kernel's page cache holds it); `sync` forces it to disk.

use crate::NandError;
use bytemuck::{Pod, Zeroable};
use csd_sim::{DeviceConfig, Geometry};
use memmap2::{Advice, MmapMut, MmapOptions};
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
    /// Reserved, zero.
    pub reserved: u32,
}

/// Byte layout of one erase block.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    pub pages: usize,
    pub slot: usize,
    pub states: usize,
    pub block_bytes: usize,
}

impl Layout {
    pub fn new(g: &Geometry) -> Layout {
        let pages = g.pages_per_block as usize;
        let slot = (g.page_size + g.oob_per_page()) as usize;
        let states = pages.next_multiple_of(64);
        Layout {
            pages,
            slot,
            states,
            block_bytes: states + pages * slot,
        }
    }
    #[inline]
    pub fn slot_range(&self, page: u32) -> std::ops::Range<usize> {
        let s = self.states + page as usize * self.slot;
        s..s + self.slot
    }
}

const MAGIC: [u8; 8] = *b"CSDNAND\0";
/// Version 2 adds a CRC-32C over the header and the recorded config, and the rule that a
/// program moves the block's write pointer before its commit point (so no repair scan is
/// needed at open). Version 1 images are still opened (with a one-time repair scan).
const VERSION: u32 = 2;
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
    reserved: u32,
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
/// pages erased) until written, backed by transparent huge pages where the kernel offers
/// them (random reads over a large device then miss the TLB far less often).
pub(crate) struct AnonBlock {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    mapped: usize,
}

/// Huge-page size the mappings are rounded to.
const HUGE: usize = 2 << 20;

impl AnonBlock {
    fn new(len: usize) -> Option<AnonBlock> {
        let mapped = len.next_multiple_of(HUGE);
        // Map one huge page more and trim, so that the block starts on a huge-page
        // boundary (transparent huge pages need aligned ranges).
        let over = mapped + HUGE;
        // SAFETY: an anonymous private mapping with no fixed address; the result is
        // checked for MAP_FAILED before use.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                over,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return None;
        }
        let start = (raw as usize).next_multiple_of(HUGE);
        let head = start - raw as usize;
        let tail = over - head - mapped;
        // SAFETY: unmapping the unaligned slack before and after [start, start + mapped),
        // both inside the mapping just made; then advice on the aligned range (failure,
        // e.g. no THP, is harmless).
        unsafe {
            if head > 0 {
                libc::munmap(raw, head);
            }
            if tail > 0 {
                libc::munmap((start + mapped) as *mut libc::c_void, tail);
            }
            libc::madvise(start as *mut libc::c_void, mapped, libc::MADV_HUGEPAGE);
        }
        Some(AnonBlock {
            ptr: std::ptr::NonNull::new(start as *mut u8)?,
            len,
            mapped,
        })
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` points to `mapped >= len` readable bytes mapped for the life of
        // `self` (unmapped only in `drop`); anonymous memory is zero-initialized.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AnonBlock {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the range `new` mapped; no slice outlives `self`.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.mapped);
        }
    }
}

// SAFETY: the mapping is owned memory like a `Box<[u8]>`: nothing else aliases it, so it
// may move to and be shared with other threads under the usual borrow rules.
unsafe impl Send for AnonBlock {}
// SAFETY: see `Send`; `&AnonBlock` gives only shared reads.
unsafe impl Sync for AnonBlock {}

/// The storage backend behind a [`crate::Nand`].
pub(crate) enum Store {
    Mem(MemStore),
    File(FileStore),
}

pub(crate) struct MemStore {
    meta: Vec<BlockMeta>,
    blocks: Vec<Option<AnonBlock>>,
    layout: Layout,
}

pub(crate) struct FileStore {
    map: MmapMut,
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
}

impl FileStore {
    /// Check the per-block table whole: it is metadata the media trusts (16 bytes a
    /// block: a few hundred KiB at most).
    fn check_block_table(&self) -> Result<(), NandError> {
        let nblocks = self.nblocks;
        let layout = &self.layout;
        let table = &self.map[self.meta_offset..self.meta_offset + nblocks * 16];
        for (b, raw) in table.chunks_exact(16).enumerate() {
            let m: BlockMeta = bytemuck::pod_read_unaligned(raw);
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
    /// SIGBUS, which no error path can catch; `fallocate` turns it into `ENOSPC`.
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
        let off = (self.blocks_offset + b * self.layout.block_bytes + have) as libc::off_t;
        let len = (end - have) as libc::off_t;
        // SAFETY: `fallocate` on a file descriptor we own, over a range inside the file's
        // length (checked when the image was opened or created); mode 0 only allocates.
        let r = unsafe { libc::fallocate(self.file.as_raw_fd(), 0, off, len) };
        if r != 0 {
            let err = std::io::Error::last_os_error();
            return Err(match err.raw_os_error() {
                Some(libc::ENOSPC) | Some(libc::EDQUOT) | Some(libc::EFBIG) => {
                    NandError::ImageFull {
                        path: self.path.clone(),
                        block: b as u32,
                    }
                }
                // File systems without fallocate: fall back to the mapping's own behavior.
                Some(libc::EOPNOTSUPP) => {
                    self.reserved[b] = self.layout.block_bytes as u32;
                    return Ok(());
                }
                _ => NandError::Image {
                    path: self.path.clone(),
                    reason: format!("cannot reserve the bytes of block {b}: {err}"),
                },
            });
        }
        self.reserved[b] = end as u32;
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
fn read_header(path: &Path, file: &File) -> Result<(HeaderV1, DeviceConfig), NandError> {
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
        VERSION => std::mem::size_of::<Header>(),
        v => {
            return Err(bad(format!(
                "image version {v} is not supported (this csd reads versions 1 and {VERSION})"
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
    if v1.version == VERSION {
        let h: Header = bytemuck::pod_read_unaligned(&head[..hdr_fixed]);
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
    Ok((v1, cfg))
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
        })
    }

    /// Create a new image file at `path` (which must not exist).
    pub fn create_file(
        path: &Path,
        cfg: &DeviceConfig,
        meta: Vec<BlockMeta>,
    ) -> Result<Store, NandError> {
        let layout = Layout::new(&cfg.geometry);
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
        file.try_lock().map_err(|_| NandError::Locked {
            path: path.to_path_buf(),
        })?;
        file.set_len(total).map_err(io)?;
        // SAFETY: the file was just created by us with `create_new` and is held under an
        // exclusive advisory lock for the life of the mapping; csd never truncates it while
        // mapped. Modification by an unrelated process that ignores the lock is outside
        // the contract of an image file (documented in `Nand::open_image`).
        let mut map = unsafe { MmapMut::map_mut(&file) }.map_err(io)?;
        let _ = map.advise(Advice::Random);
        let mut header = Header {
            v1: HeaderV1 {
                magic: MAGIC,
                version: VERSION,
                header_bytes: HEADER_BYTES as u32,
                geo: geo_words(&cfg.geometry),
                config_len: toml.len() as u32,
                block_bytes: layout.block_bytes as u64,
                meta_offset,
                blocks_offset,
                blocks: nblocks as u64,
            },
            crc: 0,
            reserved: 0,
        };
        header.crc = header.crc_of(toml.as_bytes());
        let (meta_offset, blocks_offset) = (meta_offset as usize, blocks_offset as usize);
        map[..hdr_fixed].copy_from_slice(bytemuck::bytes_of(&header));
        map[hdr_fixed..hdr_fixed + toml.len()].copy_from_slice(toml.as_bytes());
        map[meta_offset..meta_offset + nblocks * 16].copy_from_slice(bytemuck::cast_slice(&meta));
        map.flush().map_err(io)?;
        Ok(Store::File(FileStore {
            map,
            file,
            path: path.to_path_buf(),
            meta_offset,
            blocks_offset,
            layout,
            nblocks,
            access: Access::ReadWrite,
            reserved: vec![0; nblocks],
        }))
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
        let (v1, cfg) = read_header(path, &file)?;
        let layout = Layout::new(&cfg.geometry);
        let (meta_offset, blocks_offset) = check_geometry(path, &v1, &cfg, &layout, len)?;
        // SAFETY: as in `create_file`: we hold the lock (exclusive for read-write, shared
        // for read-only, so no csd process writes the file while it is mapped) and never
        // truncate the file while it is mapped. A read-only open maps copy-on-write
        // (`MAP_PRIVATE`): stores go to private memory, never to the file.
        let map = match access {
            Access::ReadWrite => unsafe { MmapMut::map_mut(&file) },
            Access::ReadOnly => unsafe { MmapOptions::new().no_reserve_swap().map_copy(&file) },
        }
        .map_err(|e| image_error(path, e.to_string()))?;
        // Random access: no readahead storms when a few state bytes of a sparse image
        // are touched.
        let _ = map.advise(Advice::Random);
        let nblocks = cfg.geometry.total_blocks() as usize;
        let store = FileStore {
            map,
            file,
            path: path.to_path_buf(),
            meta_offset: meta_offset as usize,
            blocks_offset: blocks_offset as usize,
            layout,
            nblocks,
            access,
            reserved: vec![0; nblocks],
        };
        store.check_block_table()?;
        Ok((Store::File(store), cfg, v1.version == 1))
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
                let o = f.meta_offset + b * 16;
                f.map[o..o + 16].copy_from_slice(bytemuck::bytes_of(&v));
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
                    m.blocks[b] = Some(AnonBlock::new(n).ok_or_else(|| NandError::Image {
                        path: PathBuf::from("(memory)"),
                        reason: format!("cannot allocate {n} bytes for block {b}"),
                    })?);
                }
                Ok(m.blocks[b]
                    .as_mut()
                    .map_or(&mut [][..], |x| x.as_mut_slice()))
            }
            Store::File(f) => {
                f.reserve(b, upto)?;
                let o = f.blocks_offset + b * f.layout.block_bytes;
                Ok(&mut f.map[o..o + f.layout.block_bytes])
            }
        }
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

    /// Bytes of memory (or mapped file) actually holding block contents.
    pub fn resident_block_bytes(&self) -> u64 {
        match self {
            Store::Mem(m) => m.blocks.iter().flatten().map(|b| b.len as u64).sum(),
            Store::File(f) => (f.nblocks * f.layout.block_bytes) as u64,
        }
    }

    pub fn path(&self) -> Option<&Path> {
        match self {
            Store::Mem(_) => None,
            Store::File(f) => Some(&f.path),
        }
    }

    /// Force everything to stable storage (image file); no-op in memory.
    pub fn sync(&mut self) -> Result<(), NandError> {
        match self {
            Store::Mem(_) => Ok(()),
            Store::File(f) if f.access == Access::ReadOnly => Ok(()),
            Store::File(f) => f.map.flush().map_err(|e| NandError::Image {
                path: f.path.clone(),
                reason: e.to_string(),
            }),
        }
    }
}
