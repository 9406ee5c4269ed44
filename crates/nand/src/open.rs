//! Making a flash array: in memory, or over an image file created or opened (with its
//! checks and the repair of write pointers after an unclean stop), the factory metadata
//! of a fresh array (its bad blocks drawn from the seed), and the media-level helpers
//! the image keeps (raw block bytes, the per-sector "ECC already checked" marks).
//!
//! Choices made here: an image names its geometry and is refused when opened with
//! another; factory bad blocks are a counter-based hash of the seed, so a fresh image
//! and an in-memory array of the same seed have the same bad blocks.

use super::*;
use csd_sim::ResourceClass;
use csd_sim::events::ResourceId;

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

    /// [`Nand::create_image`] in an older image format `version` (3: the block layout
    /// of page slots that csd wrote before version 4), so that tests can check such
    /// images are still read and written in their own layout.
    #[doc(hidden)]
    pub fn create_image_version(
        path: &Path,
        cfg: DeviceConfig,
        version: u32,
    ) -> Result<Nand, NandError> {
        cfg.validate()?;
        let meta = factory_meta(&cfg);
        let store = Store::create_file_version(path, &cfg, meta, version)?;
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
            n.opened_unclean = true;
            n.repair_write_pointers()?;
        }
        Ok(n)
    }

    pub(super) fn with_store(cfg: DeviceConfig, store: Store) -> Nand {
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
            last_law: None,
            dies: (0..g.dies())
                .map(|i| Resource::with_id(ResourceId::new(ResourceClass::Die, i)))
                .collect(),
            channels: (0..g.channels)
                .map(|i| Resource::with_id(ResourceId::new(ResourceClass::Channel, i)))
                .collect(),
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
            pins: Default::default(),
            store,
            cfg,
            opened_unclean: false,
            stale_hints: 0,
        }
    }

    /// The bytes of block `b` for writing (see `Store::block_mut`). Every change to a
    /// block's bytes comes through here, which forgets the block's checked sectors.
    #[inline]
    pub(super) fn block_bytes_mut(
        &mut self,
        b: usize,
        upto: usize,
    ) -> Result<&mut [u8], NandError> {
        // Readers on other threads leave (and no reader of older bytes enters) first.
        self.pins.0.exclude();
        self.checked.clear_block(b);
        self.store.block_mut(b, upto)
    }

    /// Make block `b` ready for a program whose slot ends at `upto` (see
    /// `Store::prepare_program`), with [`Nand::block_bytes_mut`]'s exclusion of readers
    /// on other threads and forgetting of the block's checked sectors.
    #[inline]
    pub(super) fn prepare_program(&mut self, b: usize, upto: usize) -> Result<(), NandError> {
        self.pins.0.exclude();
        self.checked.clear_block(b);
        self.store.prepare_program(b, upto)
    }

    /// Store a programmed page of block `b` (slot, then state byte: see
    /// [`Store::write_page`]). Like [`Nand::block_bytes_mut`], readers on other threads
    /// leave first and the block's checked sectors are forgotten.
    pub(super) fn store_page(
        &mut self,
        b: usize,
        page: u32,
        data: &[u8],
        oob: &[u8],
        state: u8,
    ) -> Result<(), NandError> {
        self.pins.0.exclude();
        self.checked.clear_block(b);
        self.store.write_page(b, page, data, oob, state)
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

    /// Recompute every block's write pointer from its page states: one past the last
    /// page that is not erased. Version-1 images moved the pointer after the page's
    /// commit point, so after a killed process it may lag the last committed page; after
    /// a host crash, the block table and the page states reach the disk independently,
    /// so the pointer may lag or lead. (Version 2 and later move the pointer first: after
    /// a killed process it never lags; it may lead by the page whose program was cut.)
    pub(super) fn repair_write_pointers(&mut self) -> Result<(), NandError> {
        self.store.begin_change()?;
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
        Ok(())
    }
}

pub(super) fn factory_meta(cfg: &DeviceConfig) -> Vec<BlockMeta> {
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

pub(super) fn geo_string(g: &Geometry) -> String {
    g.to_string()
}
