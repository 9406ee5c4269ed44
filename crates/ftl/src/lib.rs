//! The csd flash translation layer (FTL): turns the raw flash array into an SSD.
//!
//! Realizes the FTL core of the batch-io paper (§3.2.2, §5, §7.2): a page-level MAP from
//! logical pages (LPIDs; the block front end's LBAs) to physical sectors (RBLOCKs),
//! block provisioning over per-die open blocks with channel round robin and separate
//! HOT (user) and COLD (GC) streams (§7.2.3), a per-sector garbage bitmap GBITV with
//! per-block valid counts (§5.1), reverse mapping from the TAG in each sector's OOB area
//! (§5.1), greedy or cost-benefit victim choice triggered by a free-block threshold
//! (§7.2.8) with the optimistic MAP update so that a user write racing the GC wins, the
//! erase counts WEAR (§6.2.3) with dynamic wear leveling (the least-worn free block is
//! used first) and static wear leveling (when the spread of erase counts passes a
//! threshold, the least-worn full block is relocated), and bad-block handling (factory bad
//! blocks never provisioned; a failed program or erase retires the block to the
//! bad-block table and its live data is relocated).
//!
//! Choices made here:
//! * The mapping unit is one sector (RBLOCK, 4 KiB in every preset), so an LBA of the
//!   block front end is one LPID. Pages (WBLOCKs) are filled from a per-stream page
//!   buffer in controller DRAM. With the write-through cache (default) a command's data
//!   is programmed before it completes, a partly filled page padded; with write-back the
//!   page buffer fills across commands and `flush` programs it. MAP entries of sectors
//!   still in a page buffer point into the buffer (the paper's "cached" flag, §3.2.2).
//! * Over-provisioning follows `op = (physical - logical) / logical`, counted after the
//!   reserve that provisioning and GC need (open blocks of both streams on every die plus
//!   the GC threshold), so the figure is the spare space the GC actually works with.
//! * GC runs in the foreground of the write that finds free blocks short: its reads,
//!   programs and erases reserve dies and channels like any other operation, so they
//!   delay later commands in simulated time exactly as much as they occupy the array.
//!
//! Not yet here (the FTL issue continues): the recovery log (RDESC/RDESCA/done), fuzzy
//! incremental checkpoints and recovery; MAP paging through a bounded map cache; the
//! batch front end. The MAP lives in controller DRAM as a flat table until then.

pub mod batch;
pub mod format;
mod ftl;
pub mod torture;

pub use ftl::{
    Ftl, FtlConfig, FtlError, FtlStats, GcPolicy, RecoveryFailed, RecoveryReport, WriteCache,
};

#[cfg(test)]
mod tests;
