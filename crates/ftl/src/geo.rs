//! The FTL's fixed dimensions: the flash geometry it works with and the logical capacity
//! chosen at format. Set once when the FTL is built and never changed afterwards, so the
//! fields are private and read through accessors.

/// Geometry and capacity of one FTL.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geo {
    sectors_per_page: u32,
    sector_size: usize,
    pages_per_block: u32,
    blocks_per_die: u32,
    dies: u32,
    page_size: usize,
    oob_per_sector: usize,
    lbas: u64,
    map_entries_per_page: u64,
}

impl Geo {
    /// Dimensions of an FTL over `g` with `lbas` logical sectors and MAP entries of
    /// `8 + ext_bytes` bytes.
    pub(crate) fn new(g: &csd_sim::Geometry, lbas: u64, ext_bytes: u32) -> Geo {
        let page_size = g.page_size as usize;
        Geo {
            sectors_per_page: g.sectors_per_page(),
            sector_size: g.sector_size as usize,
            pages_per_block: g.pages_per_block,
            blocks_per_die: g.blocks_per_die(),
            dies: g.dies(),
            page_size,
            oob_per_sector: g.oob_per_sector as usize,
            lbas,
            map_entries_per_page: (page_size / (8 + ext_bytes as usize)) as u64,
        }
    }
    /// Sectors (RBLOCKs, = LBAs) per flash page.
    #[inline]
    pub(crate) fn sectors_per_page(&self) -> u32 {
        self.sectors_per_page
    }
    /// Bytes per sector (the LBA size).
    #[inline]
    pub(crate) fn sector_size(&self) -> usize {
        self.sector_size
    }
    /// Pages per erase block.
    #[inline]
    pub(crate) fn pages_per_block(&self) -> u32 {
        self.pages_per_block
    }
    /// Erase blocks per die.
    #[inline]
    pub(crate) fn blocks_per_die(&self) -> u32 {
        self.blocks_per_die
    }
    /// Dies of the array.
    #[inline]
    pub(crate) fn dies(&self) -> u32 {
        self.dies
    }
    /// Bytes per flash page.
    #[inline]
    pub(crate) fn page_size(&self) -> usize {
        self.page_size
    }
    /// OOB bytes per sector (the TAG lives in the first [`crate::format::TAG_BYTES`]).
    #[inline]
    pub(crate) fn oob_per_sector(&self) -> usize {
        self.oob_per_sector
    }
    /// Logical capacity in LPIDs.
    #[inline]
    pub(crate) fn lbas(&self) -> u64 {
        self.lbas
    }
    /// MAP entries per MAP page (8 bytes + the extension bytes each).
    #[inline]
    pub(crate) fn map_entries_per_page(&self) -> u64 {
        self.map_entries_per_page
    }
}
