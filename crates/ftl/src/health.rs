//! Device health as NVMe's SMART / Health log reports it, and the end of life of a drive:
//! the spare blocks left, the life used, and the read-only state a drive enters when it
//! can no longer allocate blocks for writes.
//!
//! Choices made here:
//! * Spare blocks are the usable blocks beyond the reserve set aside at format
//!   (provisioning, GC headroom, metadata) and beyond the blocks the logical capacity
//!   needs. Available spare (NVMe "Available Spare", percent) is what is left of the
//!   spare at format; grown bad blocks use it up.
//! * The device turns read-only when a write finds no block to allocate (spare used up
//!   by bad blocks, or nothing left to reclaim) or the image's file system is full:
//!   writes then fail with [`FtlError::ReadOnly`] naming why, reads keep working, and
//!   everything acknowledged stays readable. A device whose spare is exhausted comes
//!   back read-only after a restart (the state is in the checkpoint and follows from the
//!   bad-block table anyway).
//! * Percentage used (NVMe "Percentage Used") is the mean erase count over the rated
//!   endurance, which may pass 100 (capped at 255 as NVMe does).

use crate::FtlError;
use crate::ftl::*;
use csd_nand::NandError;

/// NVMe critical-warning bit: available spare is below the threshold.
pub const WARN_SPARE: u8 = 1 << 0;
/// NVMe critical-warning bit: reliability degraded (media or data-integrity errors, data
/// lost).
pub const WARN_RELIABILITY: u8 = 1 << 2;
/// NVMe critical-warning bit: the media is in read-only mode.
pub const WARN_READ_ONLY: u8 = 1 << 3;

/// The health figures of NVMe's SMART / Health log that the FTL knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Health {
    /// Available spare, percent of the spare at format (0..=100).
    pub available_spare_pct: u32,
    /// The threshold below which [`WARN_SPARE`] is raised, percent.
    pub spare_threshold_pct: u32,
    /// Life used: mean erase count over the rated endurance, percent (0..=255).
    pub percentage_used: u32,
    /// Critical-warning bits (`WARN_*`).
    pub critical_warning: u8,
    /// Why the media is read-only (end of life), if it is; an image merely opened
    /// read-only is not reported here.
    pub read_only: Option<ReadOnlyReason>,
    /// Spare blocks left (may be negative when bad blocks ate into the reserve).
    pub spare_blocks: i64,
}

impl Ftl {
    /// Spare blocks left: good blocks beyond the reserve and the logical capacity (the
    /// checkpoint ring counts as good blocks, as when the capacity was set at format).
    pub fn spare_blocks(&self) -> i64 {
        let usable = self.blocks.iter().filter(|b| b.state != Use::Bad).count() as i64;
        let spb = self.sectors_per_page as u64 * self.pages_per_block as u64;
        usable - self.reserve_blocks as i64 - self.lbas.div_ceil(spb) as i64
    }

    /// The device's health (SMART figures the FTL keeps).
    pub fn health(&self) -> Health {
        let spare = self.spare_blocks();
        let available_spare_pct = if self.initial_spare == 0 {
            0
        } else {
            (spare.max(0) * 100 / self.initial_spare as i64).min(100) as u32
        };
        let (_, mean, _) = self.erase_counts();
        let endurance = self.nand.config().flash.endurance.max(1) as f64;
        let percentage_used = (mean * 100.0 / endurance).round().min(255.0) as u32;
        let life = self.lifetime_stats();
        let mut warn = 0;
        if available_spare_pct < self.cfg.spare_threshold_pct {
            warn |= WARN_SPARE;
        }
        if life.media_errors + life.integrity_errors + life.lost_sectors > 0 {
            warn |= WARN_RELIABILITY;
        }
        let media_read_only = self.read_only.filter(|r| *r != ReadOnlyReason::Opened);
        if media_read_only.is_some() {
            warn |= WARN_READ_ONLY;
        }
        Health {
            available_spare_pct,
            spare_threshold_pct: self.cfg.spare_threshold_pct,
            percentage_used,
            critical_warning: warn,
            read_only: media_read_only,
            spare_blocks: spare,
        }
    }

    /// Why the device is read-only, if it is.
    pub fn read_only(&self) -> Option<ReadOnlyReason> {
        self.read_only
    }

    /// Refuse a write when the device is read-only.
    pub(crate) fn check_writable(&self) -> Result<(), FtlError> {
        match self.read_only {
            Some(reason) => Err(FtlError::ReadOnly { reason }),
            None => Ok(()),
        }
    }

    /// Is `e` an end-of-life failure (no block to write into, or no room in the image's
    /// file system), and why?
    pub(crate) fn end_of_life(&self, e: &FtlError) -> Option<ReadOnlyReason> {
        match e {
            FtlError::NoSpace if self.spare_blocks() <= 0 => Some(ReadOnlyReason::SpareExhausted),
            FtlError::NoSpace => Some(ReadOnlyReason::OutOfSpace),
            FtlError::Nand(NandError::ImageFull { .. }) => Some(ReadOnlyReason::ImageFull),
            FtlError::ReadOnly { reason } => Some(*reason),
            _ => None,
        }
    }

    /// Stop accepting writes (the first reason sticks).
    pub(crate) fn enter_read_only(&mut self, reason: ReadOnlyReason) {
        if self.read_only.is_none() {
            self.read_only = Some(reason);
        }
    }
}
