//! The FD+tree of *"A Practical Concurrent Index for Solid-State Drives"* (FD+tree in
//! docs/papers.md) on the emulated SSD, reached only through the
//! command interface ([`csd_host::SharedDevice`] / [`csd_host::DeviceHandle`]).
//!
//! | module | paper |
//! |---|---|
//! | [`cache`] | the main-memory buffer cache of §5 (15 MB default), CLOCK; block allocator |
//! | [`format`](mod@format) | block layout of levels (§2.1 data and fence entries); manifest; redo log records |
//! | [`tree`] | §2: L0, levels, invariants I1–I5, lookup with fractional cascading (§2.2), range scan, one-pass multi-level merge (§2.3: merge-prepare, merge-execute, merge-finalize with level skipping and tightening, underflow-triggered merges); §3: FD+XM and FD+DS; §4: FD+FC (wavefront, m-stage/m-insert/m-delete, Remark A.1, memory sharing); crash safety (left open by the paper, §7) |
//! | [`gate`] | a gate that holds a merge block by block: what each scheme of §3–§4 lets through during a merge, observed in a deterministic state (the ordering tests) |
//! | [`btree`] | the baseline of §1: a B+tree updated in place through the same cache |
//! | `sync` (private) | std or `shuttle` synchronization (feature `shuttle`, for randomized schedule tests) |
//!
//! # Choices where the paper is silent
//!
//! * **Entries**: 16-byte key/payload plus a kind byte (17 bytes on the device, 239 per
//!   4 KiB block); L0's capacity counts 16 bytes per entry, as the paper does.
//! * **Unique keys and updates**: the paper assumes inserts of new keys. Here
//!   `insert` of an existing key is an update: if L0 holds no data entry for the key,
//!   the tree first checks whether a lower level holds it, and if so L0 gets a delete
//!   entry followed by an insert entry (case 4 of §2.2), so that every delete entry
//!   cancels exactly one insert below it and N+ − N− stays the true count. `delete`
//!   does the same check to answer whether the key existed.
//! * **Fences and level skipping**: levels are kept as a top-down list of
//!   *materialized* levels, each with a capacity class i (max size `l0_blocks * k^i`
//!   blocks); a fence points into the next materialized level. Merge-execute writes the
//!   data level first, then fence-only levels bottom-up, and stops materializing as soon
//!   as the fences fit in L0 (at most `C0/8` "top fences", kept beside L0's data and
//!   counted in its capacity). Hence the chains of one-block levels of Figure 4 never
//!   exist (level skipping), and a full merge places the result in the smallest class
//!   that holds it (level tightening, so I4 holds). A merge may also put L0 alone into a
//!   new level above the first materialized one when that fits (the cheapest merge).
//! * **Block-start fences**: when a new block of the last merged level starts without a
//!   fence at hand, it begins with `(key, p_last)` (§2.3); a lookup therefore always
//!   reaches the one block of each level whose first key is the largest not above the
//!   searched key, and goes to the level's head when there is none.
//! * **I5** is `2 * N- <= N+` (delete entries never exceed half the insert entries);
//!   breaking it triggers a full (underflow) merge.
//! * **FD+DS** (§3): the merge runs in a background thread and writes the new levels
//!   beside the old ones; L0 moves to an immutable "L0 old" and modifications (inserts
//!   *and* deletes, computed against L0 old + old levels, which is the same logical
//!   content as the new levels) go to a fresh L0. L0 old and new share the `l0_bytes`
//!   budget, and L0 old is freed only when the merge ends, so modifications during a
//!   DS merge use the slack left when it started and then wait (§3's drawback).
//!   Overflow merges of every scheme start when L0 reaches 15/16 of its budget.
//!   Lookups read L0, L0 old and the old levels. Old blocks are reclaimed when the
//!   last reader of the old level set has left (reference count of the level set, the
//!   paper's counting semaphore).
//! * **FD+FC** (§4): merges run in a background thread. Merge-prepare runs when L0
//!   becomes L0 old, so lookups know the merge's shape at once. The main loop is
//!   m-stage (one buffered block per old level; a batch ends when a level needs its
//!   next block), m-insert (groups appended to the new last level; its completed blocks
//!   are published as in-memory fences — readable from memory until their batched
//!   write is done — and the block being filled is published before each m-delete,
//!   under one `RwLock`: the only mutable block, the x-lock of §4.4) and m-delete (under the L0 mutex: advance the wavefront key, drop processed
//!   entries from L0 old — L0 old and L0 new share one `l0_bytes` budget and waiting
//!   writers are woken — and reclaim the head blocks of old levels by Remark A.1's
//!   rule). Lookups compare their key with the wavefront: at or below it they search
//!   L0 new, the new level and the levels below the merge; above it L0 new, L0 old and
//!   the old levels, entering the first old level by the largest old fence above the
//!   wavefront or else the wavefront fence (current head), and falling back to each
//!   old level's *current* head. Choices: (a) the new last level is reached during
//!   the merge through in-memory fences (16 bytes per written block), and the fence-only
//!   levels above it are written in merge-finalize; (b) instead of a readers-writer
//!   lock per block with lock coupling (§4.5), device blocks are immutable and a
//!   reclaimed block is reused only after every reader that started before
//!   its reclamation has finished (each reader holds a ticket; "grace period") — the
//!   same guarantee that no lookup reads a reused block, without a lock per visited
//!   block; (c) with `durable` the physical reuse of reclaimed blocks additionally
//!   waits for the manifest switch (the durable manifest still points at them), so the
//!   O(h) extra-space property holds only with `durable = false`
//!   ([`FdStats::early_reclaimed`] counts blocks freed for reuse during their merge).
//!   Blocks freed during a merge go back to the allocator at once, but their trims are
//!   one batch at the end of the merge (only those not reused by then): a trim command
//!   per m-delete step made FC merges twice as long as DS's.
//! * **Merge I/O**: merges read old levels with an adaptive read-ahead of up to 32
//!   consecutive blocks per command (while a level's chain runs through consecutive
//!   ids) and write new blocks in runs of up to 32 consecutive blocks per command; the
//!   allocator is next-fit (the block after the last one, else a free run of 32, else
//!   fresh space, else any free block), so a level being written gets consecutive ids
//!   even while single blocks are being freed around it.
//!   `open` reads every block once to rebuild the free list.
//! * **Crash safety**: each modification appends a redo record (the key's full L0 slot
//!   after the change, tagged with the L0 generation) to a circular log region and is
//!   acknowledged after the write and a device `Flush`. A merge writes the new levels,
//!   flushes, writes the manifest (two alternating CRC-protected slots, higher sequence
//!   wins) and flushes again; only then are old blocks trimmed and reused, and the log
//!   start moves to the first record of the L0 generation that is not merged (the log
//!   is truncated to what L0 still needs). `open` takes the newest valid manifest,
//!   rebuilds the allocator by walking the levels, and replays the log: records of one
//!   generation overwrite, generations compose. If a cut interrupted a DS or FC merge
//!   (two generations in the log) open finishes with a merge before returning. Writers
//!   are serialized by the log mutex (one record, one write, one flush each; no group
//!   commit), which FD+FC's single L0 mutex serializes anyway.
//! * **Tests**: `cargo test -p csd-fdtree` runs unit, model (proptest), concurrency,
//!   paced-device and power-cut tests, and the directions of the paper's results
//!   (`tests/orderings.rs`: with a [`MergeGate`] holding a merge, FD+XM lets no lookup or
//!   modification through, FD+DS lets lookups through and modifications only into the
//!   slack L0 had, FD+FC lets lookups through and frees L0 as the wavefront moves); the `shuttle` schedule tests need the feature:
//!   `cargo test -p csd-fdtree --features shuttle --test shuttle`.
//! * **On-device region**: `[start_lba, start_lba + lba_count)` holds manifest slot A,
//!   slot B, the log, then the tree blocks.

pub mod btree;
pub mod cache;
pub mod format;
pub mod gate;
mod sync;
pub mod tree;

pub use btree::{BTree, BTreeConfig};
pub use gate::MergeGate;
pub use tree::{FdStats, FdTree};

use csd_host::HostError;
use thiserror::Error;

/// Which invariant a check found broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invariant {
    /// (I1) every block of a level below the first has a fence in the level above.
    I1AllBlocksFenced,
    /// (I2) the first entry of every block of a non-bottom level is a fence.
    I2FenceFirst,
    /// (I3) every level is within its maximum size (L0 included).
    I3MaxSize,
    /// (I4) the bottom level is larger than the class above it could hold.
    I4MinSize,
    /// (I5) delete entries do not exceed half the insert entries.
    I5NoUnderflow,
    /// Entries are sorted, at most one delete and one insert per key per level, and
    /// the bottom level has no deletes or fences.
    Order,
    /// Level descriptors and counters match the blocks.
    Counters,
}

/// Errors of the FD+tree.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum FdError {
    /// A device command failed.
    #[error("device: {0}")]
    Device(#[from] HostError),
    /// The configuration cannot work.
    #[error("bad FD+tree configuration: {0}")]
    Config(String),
    /// The LBA range is too small for the manifest, log and a minimal tree.
    #[error(
        "device too small: the FD+tree needs at least {need_lbas} LBAs from its start LBA, the range has {have_lbas}; shrink l0_bytes/log_bytes or give it more LBAs"
    )]
    DeviceTooSmall {
        /// LBAs needed.
        need_lbas: u64,
        /// LBAs available.
        have_lbas: u64,
    },
    /// Every block of the tree area is in use.
    #[error("tree area full: all {blocks} blocks are in use; give the tree a larger LBA range")]
    NoSpace {
        /// Blocks in the tree area.
        blocks: u64,
    },
    /// Something read from the device is not what the tree wrote.
    #[error("on-device data corrupt: {0}")]
    Corrupt(String),
    /// No manifest in the region.
    #[error("no FD+tree found at LBA {start_lba} (no valid manifest); use FdTree::create")]
    NotFound {
        /// Start LBA searched.
        start_lba: u64,
    },
    /// An invariant does not hold.
    #[error("invariant {inv:?} violated: {detail}")]
    Invariant {
        /// Which one.
        inv: Invariant,
        /// Where and how.
        detail: String,
    },
    /// A background merge failed; the tree refuses further work.
    #[error("a merge failed ({0}); close the tree and open it again to recover")]
    Failed(String),
    /// The tree was closed.
    #[error("the tree is closed")]
    Closed,
}

/// Concurrency-control scheme (§3, §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// FD+XM: one readers-writer lock; the modifying thread that fills L0 merges
    /// while holding it exclusively.
    Xm,
    /// FD+DS: background merge writing new levels beside the old ones.
    Ds,
    /// FD+FC: wavefront merge in a background thread, L0 old and new sharing one
    /// budget, block-wise data movement, reclamation by Remark A.1.
    Fc,
}

/// Tree configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct FdConfig {
    /// Concurrency scheme.
    pub scheme: Scheme,
    /// Capacity of L0 in bytes (16 bytes per entry). Paper: 256 KB.
    pub l0_bytes: usize,
    /// Size ratio k between adjacent level classes. Paper: 24.
    pub size_ratio: u32,
    /// Buffer cache capacity in bytes. Paper: 15 MB.
    pub cache_bytes: usize,
    /// Tree block size in bytes (a multiple of the device LBA size). Paper: 4 KiB.
    pub block_bytes: usize,
    /// First LBA of the tree's region.
    pub start_lba: u64,
    /// LBAs of the region (`None`: to the end of the device).
    pub lba_count: Option<u64>,
    /// Bytes of the redo-log region.
    pub log_bytes: usize,
    /// Log every modification durably before acknowledging it (the paper's index has
    /// no log: `false` reproduces it, and L0 is lost on a crash).
    pub durable: bool,
    /// Fraction of the L0 budget at which an overflow merge starts (0.5..=1). The paper
    /// starts "when L0 is close to (but below) full" (15/16 here); DS and FC then take
    /// modifications into the rest of the budget while the merge runs, so an earlier
    /// start trades more, smaller merges for fewer stalls.
    pub merge_at: f64,
}

impl Default for FdConfig {
    /// The paper's values (§5): L0 256 KB, k = 24, cache 15 MB, 4 KiB blocks, FD+FC.
    fn default() -> FdConfig {
        FdConfig {
            scheme: Scheme::Fc,
            l0_bytes: 256 * 1024,
            size_ratio: 24,
            cache_bytes: 15 * 1024 * 1024,
            block_bytes: 4096,
            start_lba: 0,
            lba_count: None,
            log_bytes: 4 * 1024 * 1024,
            durable: true,
            merge_at: 15.0 / 16.0,
        }
    }
}

impl FdConfig {
    /// A tiny tree for tests that merges constantly: L0 of one block (256 entries),
    /// k = 3, a 64 KiB cache, a 64 KiB log, scheme XM.
    pub fn small() -> FdConfig {
        FdConfig {
            scheme: Scheme::Xm,
            l0_bytes: 4096,
            size_ratio: 3,
            cache_bytes: 64 * 1024,
            block_bytes: 4096,
            start_lba: 0,
            lba_count: None,
            log_bytes: 64 * 1024,
            durable: true,
            merge_at: 15.0 / 16.0,
        }
    }

    /// The same configuration with another scheme.
    pub fn with_scheme(mut self, scheme: Scheme) -> FdConfig {
        self.scheme = scheme;
        self
    }
}

/// A tiny in-memory device for the unit tests.
#[cfg(test)]
pub(crate) fn test_device() -> csd_host::SharedDevice {
    let cfg = csd_sim::DeviceConfig::preset("tiny").expect("tiny preset");
    let nand = csd_nand::Nand::new_in_memory(cfg).expect("nand");
    let ftl = csd_ftl::Ftl::format(nand, csd_ftl::FtlConfig::default()).expect("format");
    csd_host::SharedDevice::new(
        csd_device::NvmeDevice::new(ftl),
        csd_sim::ClockMode::Virtual,
    )
    .expect("share")
}
