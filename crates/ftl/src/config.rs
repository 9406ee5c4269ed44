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
    /// GC also starts when this fraction of the usable blocks is in use (batch-io §8.2.3's
    /// "aggressive" 0.5 and "non-aggressive" 0.7), besides the free-block low-water mark.
    /// `None`: only the low-water mark.
    pub gc_start_used: Option<f64>,
    /// A channel with no free block collects garbage on that channel even when the others
    /// have room (batch-io §7.2.8's per-channel GC).
    pub per_channel_gc: bool,
    /// A checkpoint is also taken when this many modeled milliseconds passed since the
    /// last one (0: only by log size).
    pub checkpoint_interval_ms: u64,
    /// Reads of an uncorrectable sector are retried this many times (read retry with
    /// shifted references; each retry is a new array read) before the error is reported.
    pub read_retries: u32,
    /// SMART's available-spare threshold, percent: below it the spare warning is raised.
    pub spare_threshold_pct: u32,
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
            gc_start_used: None,
            per_channel_gc: true,
            checkpoint_interval_ms: 0,
            read_retries: 3,
            spare_threshold_pct: 10,
        }
    }
}
