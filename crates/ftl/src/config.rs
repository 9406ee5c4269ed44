//! FTL parameters.

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
