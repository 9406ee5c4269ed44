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
use memmap2::MmapMut;
use std::fs::{File, OpenOptions};
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
const VERSION: u32 = 1;
const HEADER_BYTES: usize = 64 * 1024;

#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct Header {
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

/// The storage backend behind a [`crate::Nand`].
pub(crate) enum Store {
    Mem(MemStore),
    File(FileStore),
}

pub(crate) struct MemStore {
    meta: Vec<BlockMeta>,
    blocks: Vec<Option<Box<[u8]>>>,
    layout: Layout,
}

pub(crate) struct FileStore {
    map: MmapMut,
    // Held for the exclusive lock; the mapping keeps the file open on its own.
    _file: File,
    path: PathBuf,
    meta_offset: usize,
    blocks_offset: usize,
    layout: Layout,
    nblocks: usize,
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
        let meta_offset = HEADER_BYTES;
        let blocks_offset =
            (meta_offset + nblocks * std::mem::size_of::<BlockMeta>()).next_multiple_of(4096);
        let total = blocks_offset as u64 + nblocks as u64 * layout.block_bytes as u64;
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
        let header = Header {
            magic: MAGIC,
            version: VERSION,
            header_bytes: HEADER_BYTES as u32,
            geo: geo_words(&cfg.geometry),
            config_len: toml.len() as u32,
            block_bytes: layout.block_bytes as u64,
            meta_offset: meta_offset as u64,
            blocks_offset: blocks_offset as u64,
            blocks: nblocks as u64,
        };
        map[..hdr_fixed].copy_from_slice(bytemuck::bytes_of(&header));
        map[hdr_fixed..hdr_fixed + toml.len()].copy_from_slice(toml.as_bytes());
        map[meta_offset..meta_offset + nblocks * 16].copy_from_slice(bytemuck::cast_slice(&meta));
        map.flush().map_err(io)?;
        Ok(Store::File(FileStore {
            map,
            _file: file,
            path: path.to_path_buf(),
            meta_offset,
            blocks_offset,
            layout,
            nblocks,
        }))
    }

    /// Open an existing image; returns the store and the config recorded in it.
    pub fn open_file(path: &Path) -> Result<(Store, DeviceConfig), NandError> {
        let bad = |reason: String| NandError::Image {
            path: path.to_path_buf(),
            reason,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| bad(e.to_string()))?;
        file.try_lock().map_err(|_| NandError::Locked {
            path: path.to_path_buf(),
        })?;
        let len = file.metadata().map_err(|e| bad(e.to_string()))?.len();
        if len < HEADER_BYTES as u64 {
            return Err(bad(format!(
                "file is {len} bytes, too short to be a csd image"
            )));
        }
        // SAFETY: as in `create_file`: we hold the exclusive lock for the mapping's life
        // and never truncate the file while it is mapped.
        let map = unsafe { MmapMut::map_mut(&file) }.map_err(|e| bad(e.to_string()))?;
        let hdr_fixed = std::mem::size_of::<Header>();
        let header: Header = bytemuck::pod_read_unaligned(&map[..hdr_fixed]);
        if header.magic != MAGIC {
            return Err(bad("not a csd image (bad magic)".into()));
        }
        if header.version != VERSION {
            return Err(bad(format!(
                "image version {} is not supported (expected {VERSION})",
                header.version
            )));
        }
        let clen = header.config_len as usize;
        if hdr_fixed + clen > HEADER_BYTES {
            return Err(bad("corrupt header (config length)".into()));
        }
        let text = std::str::from_utf8(&map[hdr_fixed..hdr_fixed + clen])
            .map_err(|_| bad("corrupt header (config is not UTF-8)".into()))?;
        let cfg =
            DeviceConfig::from_toml(text).map_err(|e| bad(format!("recorded config: {e}")))?;
        let layout = Layout::new(&cfg.geometry);
        let nblocks = cfg.geometry.total_blocks() as usize;
        if header.geo != geo_words(&cfg.geometry)
            || header.block_bytes != layout.block_bytes as u64
            || header.blocks != nblocks as u64
        {
            return Err(bad(
                "corrupt header (geometry disagrees with recorded config)".into(),
            ));
        }
        let need = header.blocks_offset + header.blocks * header.block_bytes;
        if len < need {
            return Err(bad(format!(
                "file is {len} bytes but the geometry needs {need}"
            )));
        }
        let store = FileStore {
            map,
            _file: file,
            path: path.to_path_buf(),
            meta_offset: header.meta_offset as usize,
            blocks_offset: header.blocks_offset as usize,
            layout,
            nblocks,
        };
        Ok((Store::File(store), cfg))
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

    /// The bytes of block `b`, or `None` if it was never touched (memory backend).
    #[inline]
    pub fn block(&self, b: usize) -> Option<&[u8]> {
        match self {
            Store::Mem(m) => m.blocks[b].as_deref(),
            Store::File(f) => {
                let o = f.blocks_offset + b * f.layout.block_bytes;
                Some(&f.map[o..o + f.layout.block_bytes])
            }
        }
    }

    /// The bytes of block `b`, allocating it (zeroed: all pages erased) if needed.
    #[inline]
    pub fn block_mut(&mut self, b: usize) -> &mut [u8] {
        match self {
            Store::Mem(m) => {
                let n = m.layout.block_bytes;
                m.blocks[b].get_or_insert_with(|| vec![0u8; n].into_boxed_slice())
            }
            Store::File(f) => {
                let o = f.blocks_offset + b * f.layout.block_bytes;
                &mut f.map[o..o + f.layout.block_bytes]
            }
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
            Store::Mem(m) => m.blocks.iter().flatten().map(|b| b.len() as u64).sum(),
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
            Store::File(f) => f.map.flush().map_err(|e| NandError::Image {
                path: f.path.clone(),
                reason: e.to_string(),
            }),
        }
    }
}
