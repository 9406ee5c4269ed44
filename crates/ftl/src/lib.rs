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
//! Durability (batch-io §4–§7.2.7): every commit (one host write command after MDTS
//! splitting, one batch, or one GC victim's moves) first logs a redo descriptor (RDESC,
//! or GcMove records carrying the old location) in the recovery log, then programs its
//! pages with a TAG per sector (kind, LPID, commit sequence, CRC-32C), amends failed
//! programs with RDESCA records, installs the MAP updates and queues a done record that
//! rides with the next log write. The log is logically sequential and physically
//! scattered: each log page carries its LSN, a back link and a vector of forward links
//! (the next candidate pages), and a failed log write retries at the next link. Fuzzy
//! incremental checkpoints write the dirty MAP pages, dirty MAPS pages (their addresses,
//! MAPT, go in the record), WEAR, the bad-block table, the dirty pages of GBITV and
//! lifetime counters, then the checkpoint record (mirrored) at a well-known location,
//! and truncate the log. Opening reads the newest valid record and what it names; after a
//! clean shutdown that is all (O(metadata)); otherwise it redoes the log from the RSSP to
//! its end (a link that leads to an erased page or to a page of another LSN), verifies
//! commits without a done record by reading their sectors' TAGs and CRCs and applies
//! them all or not at all, and ends with a fresh checkpoint. The modules (`map`,
//! `provision`, `log`, `write`, `read`, `gc`, `checkpoint`, `recovery`, `health`) each
//! say which section they realize and the choices they make.
//!
//! Choices made here:
//! * The mapping unit is one sector (RBLOCK, 4 KiB in every preset), so an LBA of the
//!   block front end is one LPID. Pages (WBLOCKs) are filled from page buffers in
//!   controller DRAM. With the write-through cache (default) a command's data is logged
//!   and programmed before it completes, a partly filled page padded; with write-back a
//!   commit happens per stripe (one page per die) and on `flush`. MAP entries of buffered
//!   sectors point into the buffer (the paper's "cached" flag, §3.2.2); the old copy of a
//!   buffered sector stays live until the commit, and GC never runs while host sectors
//!   are buffered.
//! * Log pages live in chains of blocks of their own (not in the HOT stream's WBLOCKs as
//!   in OX), so that the forward links are exact. The log spreads over `K` chains on `K`
//!   distinct dies (the device config's `ftl.log_dies`; 1 unless a preset says otherwise,
//!   every die on `ox-westlake`, where OX's log follows the HOT stream over every chip):
//!   the page of LSN `n` goes to chain `n mod K` and links to the candidates of the chain
//!   of `n + 1`, so the log stays one logically sequential list that recovery follows
//!   page by page in LSN order, and the forces of concurrent write contexts program on `K`
//!   dies in parallel. A force completes when its pages and every log page before them are
//!   durable, so nothing acknowledged sits behind a page a cut could still tear. The
//!   on-flash format is unchanged (a page names only where the next page goes), so images
//!   written with any `K` open with any other. The cost of one log page per write
//!   context is the block interface's cost the paper measures in §8.2.1. Log blocks are
//!   never GC victims; a checkpoint frees them (§5.2).
//! * GBITV is checkpointed (its changed pages only), so opening loads it instead of
//!   reading every MAP page, and a redo keeps it with MAP. WEAR and the bad-block table
//!   are checkpointed too; erase counts since the last checkpoint are lost with a crash.
//! * The well-known checkpoint location is a ring of the first 8 good blocks rather than
//!   a fixed pair, in two halves that each get a copy of every record, so a checkpoint
//!   block that fails to erase is skipped and no single damaged block loses the newest
//!   record; within a half, records go to one block at a time and the next is erased only
//!   when the current one is full (double buffering).
//! * Every sector carries a TAG with a CRC-32C of its data, checked on every read (host
//!   reads, GC, metadata, recovery): damage is an error naming what it hit, never wrong
//!   data. Reads of uncorrectable sectors are retried; data GC cannot read is recorded as
//!   lost (its reads fail naming the LBA) and the block retired.
//! * A commit that fails is rolled back (MAP, cache and buffers agree afterwards); a
//!   drive that can no longer allocate blocks for writes turns read-only, as NVMe drives
//!   do at their end of life.
//! * The MAP cache is bounded by `map_cache_share` of controller DRAM and evicts with
//!   CLOCK, writing dirty MAP pages back to the META stream; during recovery it only
//!   evicts clean pages and may exceed its bound by the pages redone since the checkpoint.
//! * Over-provisioning follows `op = (physical - logical) / logical`, counted after the
//!   reserve that provisioning, GC and metadata need, so the figure is the spare space the
//!   GC actually works with (GC write amplification matches Hu et al.'s formula within
//!   2% at 7-28% OP).
//! * MAP entries may carry `ext_bytes` (0..=24) of extension, opaque to the FTL: FLIXR's
//!   per-page index entries (flixr §4). They live in the MAP pages (so GC and wear
//!   leveling, which move sectors but not LPIDs, carry them with the page), are logged
//!   (`Ext` records) and checkpointed with MAP, and a trim zeroes them. FLIXR §4.6's
//!   redo-log bit is [`Ftl::mark_ext_pending`]: a logged mark cleared by the next
//!   `set_ext` of the LPID; marks still set after a crash are listed by
//!   [`Ftl::ext_pending`] for the controller to recompute. The marks are kept as a sparse
//!   set (only commands in flight have them) in the log and in an optional section of
//!   the checkpoint body, together with the controller's own persistent metadata
//!   ([`Ftl::set_blob`]); a device that never uses them writes the same checkpoints as
//!   before, and older images read as having none.
//! * GC runs in the foreground of the command that finds free blocks short: its reads,
//!   programs and erases reserve dies and channels like any other operation, so they
//!   delay later commands in simulated time exactly as much as they occupy the array.

mod blocks;
mod checkpoint;
mod config;
mod ctrl;
mod error;
pub mod format;
mod ftl;
mod gc;
mod geo;
mod health;
mod inspect;
mod log;
mod map;
mod pagebuf;
mod provision;
mod read;
mod recovery;
mod scratch;
mod stats;
pub mod torture;
mod write;

pub use config::{FtlConfig, GcPolicy, WriteCache};
pub use error::{FtlError, RecoveryFailed, RecoveryReport};
pub use ftl::{Ftl, ReadOnlyReason};
pub use health::{Health, WARN_READ_ONLY, WARN_RELIABILITY, WARN_SPARE};
pub use pagebuf::PageBufferStats;
pub use read::{ALL_SECTORS, CrcPlan, InPlaceUnit, SectorCrcs, sector_needed};
pub use stats::{FtlStats, GcBytes};
pub use write::packet_contexts;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_health;
