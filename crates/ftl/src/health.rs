//! Device health as NVMe's SMART / Health log reports it, and the end of life of a drive:
//! the spare blocks left, the life used, and the read-only state a drive enters when it
//! can no longer be trusted with writes.
//!
//! The fields follow the NVM Express Base Specification (revision 2.0, Get Log Page,
//! "SMART / Health Information (Log Page Identifier 02h)"):
//! * **Critical Warning** (byte 0), the current state: bit 0, available spare below its
//!   threshold ([`WARN_SPARE`]); bit 2, NVM subsystem reliability degraded by significant
//!   media-related errors or an internal error ([`WARN_RELIABILITY`]); bit 3, the media
//!   placed in read-only mode ([`WARN_READ_ONLY`]). Bits 1 (temperature), 4 (volatile
//!   memory backup) and 5 (persistent memory region) have nothing to model and stay 0.
//! * **Available Spare** (byte 3): the remaining spare capacity as a normalized 0-100%;
//!   **Available Spare Threshold** (byte 4): below it bit 0 is raised.
//! * **Percentage Used** (byte 5): a vendor-specific estimate of the life used from the
//!   actual usage and the predicted life of the NVM; 100 means the estimated endurance is
//!   consumed (not necessarily a failure); it may exceed 100, and values above 254 are
//!   reported as 255.
//! * **Media and Data Integrity Errors** (bytes 175:160): unrecovered data-integrity
//!   errors (uncorrectable ECC, CRC or tag mismatch) over the life of the controller,
//!   like every counter of the log: they survive power cycles.
//!
//! Rules chosen here:
//! * **Spare.** Spare blocks are the usable blocks beyond the reserve set aside at format
//!   (provisioning, GC headroom, metadata) and beyond the blocks the logical capacity
//!   needs. Available Spare is what is left of the spare at format (floor of the
//!   percentage); grown bad blocks use it up, among them the blocks past their endurance
//!   that the media fails (the flash model's "worn" failure probabilities). The spare
//!   warning is raised below `FtlConfig::spare_threshold_pct`.
//! * **Life used.** Percentage Used is the mean erase (P/E) count of the usable blocks,
//!   the checkpoint ring aside ([`Ftl::erase_counts`]), over the preset's rated endurance
//!   (`flash.endurance`), as a floor: 100 exactly when the mean reaches the endurance.
//!   Capped at 255.
//! * **Wear ends life.** When the mean P/E count reaches the rated endurance (Percentage
//!   Used 100), the endurance of the media is consumed: the device sets the reliability
//!   bit and turns read-only ([`ReadOnlyReason::WornOut`]), whatever spare is left: a
//!   conservative choice (many drives write on past 100 and fail later), taken while
//!   everything stored is still readable. The rule is evaluated after every erase, before
//!   every host write, trim and batch, and at every open (cheaply: the erase counts are
//!   looked at only once enough erases and retirements happened for the mean to reach
//!   the endurance, see `Ftl::check_wear`). So the erase (or the retirement of a
//!   little-worn block) that brings the mean to the endurance ends the life: the command
//!   during which it happens completes (its GC and checkpoints included), and every
//!   later write is refused. A worn-out device is read-only after every later open too
//!   (the erase counts are in the checkpoint's WEAR, and its record says so), and keeps
//!   reporting itself worn out with Percentage Used at least 100 even when a worn block
//!   retired afterwards (its erase failed) takes the mean of the rest back under the
//!   endurance (found by the end-of-life property test: 99% and "not worn out" on a
//!   device read-only for wear).
//! * **Read-only.** The device also turns read-only when a write finds no block to
//!   allocate (spare used up by bad blocks, or nothing left to reclaim) or the image's
//!   file system is full: writes then fail with [`FtlError::ReadOnly`] naming why, reads
//!   keep working, and everything acknowledged stays readable. A device whose spare is
//!   exhausted comes back read-only after a restart (the state is in the checkpoint and
//!   follows from the bad-block table anyway).
//! * **Reliability.** The reliability bit is also raised once any media error, data
//!   integrity error or lost sector was counted in the device's life.
//! * **Persistence.** The counters are lifetime counters kept in every checkpoint record,
//!   and a read-only (end-of-life) device still writes its closing checkpoint into blocks
//!   reserved for it ([`crate::provision`]), so a reopened device reports what happened
//!   before, and a clean close is clean (nothing replayed at the next open). Counts since
//!   the last checkpoint are lost with a crash, and a device opened read-only (its image
//!   not writable) writes nothing, so what happened during such a session is not kept.

use crate::FtlError;
use crate::ftl::*;
use crate::stats::Count;
use csd_nand::NandError;

/// NVMe critical-warning bit 0: available spare is below the threshold.
pub const WARN_SPARE: u8 = 1 << 0;
/// NVMe critical-warning bit 2: reliability degraded (media or data-integrity errors,
/// data lost, or the rated endurance consumed).
pub const WARN_RELIABILITY: u8 = 1 << 2;
/// NVMe critical-warning bit 3: the media is in read-only mode.
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
    /// The rated endurance, P/E cycles per block (the preset's `flash.endurance`).
    pub rated_endurance: u32,
    /// The rated endurance is consumed (mean erase count at or past it).
    pub worn_out: bool,
}

impl Ftl {
    /// Spare blocks left: good blocks beyond the reserve and the logical capacity (the
    /// checkpoint ring counts as good blocks, as when the capacity was set at format).
    pub fn spare_blocks(&self) -> i64 {
        let usable = self.blocks.iter().filter(|b| b.state != Use::Bad).count() as i64;
        let spb = self.geo.sectors_per_page() as u64 * self.geo.pages_per_block() as u64;
        usable - self.prov.reserve_blocks() as i64 - self.geo.lbas().div_ceil(spb) as i64
    }

    /// The rated endurance of the media, P/E cycles per block (at least 1).
    fn rated_endurance(&self) -> u64 {
        self.nand.config().flash.endurance.max(1) as u64
    }

    /// (sum of erase counts, blocks) over the blocks [`Ftl::erase_counts`] averages.
    fn wear_totals(&self) -> (u64, u64) {
        self.blocks
            .iter()
            .filter(|b| b.state != Use::Bad && b.state != Use::Ckpt)
            .fold((0, 0), |(s, n), b| (s + b.pe as u64, n + 1))
    }

    /// Percentage Used and whether the endurance is consumed, from the erase counts.
    fn life_used(&self) -> (u32, bool) {
        let (sum, n) = self.wear_totals();
        if n == 0 {
            return (0, false);
        }
        let rated = n * self.rated_endurance();
        ((sum * 100 / rated).min(255) as u32, sum >= rated)
    }

    /// The device's health (SMART figures the FTL keeps).
    pub fn health(&self) -> Health {
        let spare = self.spare_blocks();
        let available_spare_pct = if self.prov.initial_spare() == 0 {
            0
        } else {
            (spare.max(0) * 100 / self.prov.initial_spare() as i64).min(100) as u32
        };
        let (mut percentage_used, mut worn_out) = self.life_used();
        // The wear-out rule is sticky: a worn block that fails its erase after the mean
        // reached the endurance (in the command that reached it, or its GC) is retired,
        // and the mean of the blocks left can fall back under the endurance; the life
        // is over all the same, and the figures say so.
        if self.health.read_only == Some(ReadOnlyReason::WornOut) {
            worn_out = true;
            percentage_used = percentage_used.max(100);
        }
        debug_assert!(percentage_used <= 255 && (!worn_out || percentage_used >= 100));
        let life = self.lifetime_stats();
        let mut warn = 0;
        if available_spare_pct < self.cfg.spare_threshold_pct {
            warn |= WARN_SPARE;
        }
        if worn_out || life.media_errors + life.integrity_errors + life.lost_sectors > 0 {
            warn |= WARN_RELIABILITY;
        }
        let media_read_only = self
            .health
            .read_only
            .filter(|r| *r != ReadOnlyReason::Opened);
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
            rated_endurance: self.rated_endurance() as u32,
            worn_out,
        }
    }

    /// Why the device is read-only, if it is.
    pub fn read_only(&self) -> Option<ReadOnlyReason> {
        self.health.read_only
    }

    /// Refuse a write when the device is read-only (or has just worn out).
    pub(crate) fn check_writable(&mut self) -> Result<(), FtlError> {
        self.check_wear();
        match self.health.read_only {
            Some(reason) => Err(FtlError::ReadOnly { reason }),
            None => Ok(()),
        }
    }

    /// The wear-out rule (see the module documentation): turn read-only once the mean
    /// erase count reaches the rated endurance.
    ///
    /// The erase counts are looked at only when the mean may have reached it: the gap
    /// to it (`blocks × endurance − sum of erase counts`) shrinks by one per erase and by
    /// at most `endurance` per retired block, so after a look that found a gap `g`, no
    /// look is needed until `erases + endurance × grown bad blocks` grew by `g` (and,
    /// as a backstop, `blocks / 16` erases).
    pub(crate) fn check_wear(&mut self) {
        if self.health.read_only.is_some() {
            return;
        }
        let endurance = self.rated_endurance();
        // Lifetime counts, summed field by field (this runs before every host write).
        let c = &self.counters;
        let clock = c.lifetime_of(Count::Erases)
            + c.lifetime_of(Count::MetaErases)
            + endurance * c.lifetime_of(Count::GrownBadBlocks);
        if clock < self.health.next_wear_check {
            return;
        }
        let (sum, n) = self.wear_totals();
        let rated = n * endurance;
        if n > 0 && sum >= rated {
            self.enter_read_only(ReadOnlyReason::WornOut);
            return;
        }
        let step = rated
            .saturating_sub(sum)
            .clamp(1, (self.blocks.len() as u64 / 16).max(1));
        self.health.next_wear_check = clock + step;
        debug_assert!(self.health.next_wear_check > clock);
    }

    /// Is `e` an end-of-life failure (no block to write into, no room in the image's
    /// file system, or an in-memory device at its memory limit), and why? A device already read-only keeps its first reason (say, it
    /// wore out during the command that then found no block).
    pub(crate) fn end_of_life(&self, e: &FtlError) -> Option<ReadOnlyReason> {
        let why = match e {
            FtlError::NoSpace if self.spare_blocks() <= 0 => ReadOnlyReason::SpareExhausted,
            FtlError::NoSpace => ReadOnlyReason::OutOfSpace,
            FtlError::Nand(NandError::ImageFull { .. }) => ReadOnlyReason::ImageFull,
            FtlError::Nand(NandError::MemoryFull { .. }) => ReadOnlyReason::MemoryFull,
            FtlError::ReadOnly { reason } => *reason,
            _ => return None,
        };
        Some(self.health.read_only.unwrap_or(why))
    }

    /// Stop accepting writes (the first reason sticks).
    pub(crate) fn enter_read_only(&mut self, reason: ReadOnlyReason) {
        self.health.enter_read_only(reason);
    }
}

/// Whether the device takes writes, and when the wear-out rule looks at the erase counts
/// next. Only this module changes it.
#[derive(Debug, Default)]
pub(crate) struct HealthState {
    /// Set when the device accepts no more writes; reads keep working.
    read_only: Option<ReadOnlyReason>,
    /// The image was opened read-only: nothing may be written to it, not even at close.
    opened_read_only: bool,
    /// Lifetime erase count at which the wear-out rule is next evaluated.
    next_wear_check: u64,
}

impl HealthState {
    /// Why the device is read-only, if it is.
    #[inline]
    pub(crate) fn read_only(&self) -> Option<ReadOnlyReason> {
        self.read_only
    }

    /// Was the image opened read-only (nothing may be written to it)?
    #[inline]
    pub(crate) fn opened_read_only(&self) -> bool {
        self.opened_read_only
    }

    /// The image is opened read-only: no writes, not even at close.
    pub(crate) fn open_read_only(&mut self) {
        self.opened_read_only = true;
        self.enter_read_only(ReadOnlyReason::Opened);
    }

    /// Stop accepting writes (the first reason sticks).
    fn enter_read_only(&mut self, reason: ReadOnlyReason) {
        if self.read_only.is_none() {
            self.read_only = Some(reason);
        }
    }
}
