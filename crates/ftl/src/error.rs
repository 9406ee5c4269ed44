//! Errors of the FTL.

use crate::ReadOnlyReason;
use csd_nand::{Nand, NandError};
use thiserror::Error;

/// Errors of the FTL.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum FtlError {
    /// The LBA range is outside the logical capacity.
    #[error("LBA range {lba}..{end} is outside the device (capacity {capacity} LBAs)")]
    OutOfRange {
        /// First LBA.
        lba: u64,
        /// One past the last LBA.
        end: u64,
        /// LBAs of the device.
        capacity: u64,
    },
    /// A buffer is not a whole, non-zero number of LBAs.
    #[error("buffer of {got} bytes is not a non-zero multiple of the {lba_size}-byte LBA")]
    BadLength {
        /// Bytes given.
        got: usize,
        /// LBA size.
        lba_size: usize,
    },
    /// A read could not be corrected (after read retries), its data does not match the
    /// checksum kept with it, or GC found it unreadable earlier.
    #[error("uncorrectable read at LBA {lba}")]
    Uncorrectable {
        /// The LBA.
        lba: u64,
    },
    /// The device accepts no more writes; reads keep working.
    #[error("device is read-only: {reason}")]
    ReadOnly {
        /// Why.
        reason: ReadOnlyReason,
    },
    /// A batch buffer or descriptor is malformed.
    #[error("bad batch: {0}")]
    BadBatch(String),
    /// No free block could be found or reclaimed for a write (the caller turns the device
    /// read-only and says why).
    #[error("no free flash block left to write into")]
    NoSpace,
    /// The configuration cannot work on this geometry.
    #[error("FTL config: {0}")]
    Config(String),
    /// No valid checkpoint was found: the device was never formatted.
    #[error("no valid FTL checkpoint on the device: format it first")]
    NotFormatted,
    /// Recovery met metadata it cannot read.
    #[error("recovery failed: {0}")]
    Corrupt(String),
    /// A clean close could not write its checkpoint: the device is not clean (the next
    /// open replays the log) and the counters since the last checkpoint are not kept.
    #[error(
        "the closing checkpoint could not be written ({why}): the device is not synced; its next open replays the log"
    )]
    NotCheckpointed {
        /// What failed.
        why: String,
    },
    /// The flash failed in a way the FTL does not handle (e.g. power loss).
    #[error(transparent)]
    Nand(#[from] NandError),
}

impl From<csd_sim::wire::DescError> for FtlError {
    fn from(e: csd_sim::wire::DescError) -> Self {
        FtlError::BadBatch(e.0)
    }
}

/// A failed recovery, with the flash array given back so that it can be tried again.
#[derive(Debug)]
pub struct RecoveryFailed {
    /// Why recovery failed.
    pub error: FtlError,
    /// The flash array.
    pub nand: Box<Nand>,
}

/// What the last recovery did and how long it took.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RecoveryReport {
    /// Checkpoint sequence recovered from.
    pub checkpoint_seq: u64,
    /// Log pages replayed.
    pub log_pages: u64,
    /// Commits redone.
    pub commits_redone: u64,
    /// Commits without a done record whose data verified and were applied.
    pub commits_verified: u64,
    /// Commits without a done record whose data did not verify, or that a later commit
    /// or an abort record shows failed, discarded.
    pub commits_discarded: u64,
    /// Log records replayed.
    pub log_records: u64,
    /// LPIDs whose extension is pending after recovery (FLIXR §4.6: the redo-log bit is
    /// still 0; the controller recomputes them, see [`crate::Ftl::ext_pending`]).
    pub ext_pending: u64,
    /// The device had been shut down cleanly: nothing was replayed or verified, and the
    /// state came straight from the checkpoint.
    pub clean: bool,
    /// Modeled recovery time in seconds.
    pub modeled_s: f64,
    /// Wall-clock recovery time in seconds.
    pub wall_s: f64,
}
