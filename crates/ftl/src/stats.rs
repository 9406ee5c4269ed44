//! Counters of the FTL's work.

/// Counters of the FTL's work, in sectors unless named otherwise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FtlStats {
    /// Sectors written by the host.
    pub host_write_sectors: u64,
    /// Sectors read by the host.
    pub host_read_sectors: u64,
    /// Sectors trimmed by the host.
    pub host_trim_sectors: u64,
    /// Write commands (after MDTS splitting) and batches committed.
    pub commits: u64,
    /// Pages programmed for user data.
    pub user_programs: u64,
    /// Pages programmed by GC and wear leveling.
    pub gc_programs: u64,
    /// Pages programmed for metadata (log pages, MAP/MAPS/WEAR/BBT pages, checkpoints).
    pub meta_programs: u64,
    /// Log pages written.
    pub log_pages: u64,
    /// Page reads for user data.
    pub user_reads: u64,
    /// Page reads by GC and wear leveling.
    pub gc_reads: u64,
    /// Page reads of metadata (MAP pages on cache misses, recovery).
    pub meta_reads: u64,
    /// Block erases: user/GC blocks.
    pub erases: u64,
    /// Block erases of metadata and log blocks.
    pub meta_erases: u64,
    /// Sectors moved by GC and wear leveling.
    pub gc_moved_sectors: u64,
    /// Sectors reclaimed by GC (garbage in the erased victims).
    pub gc_reclaimed_sectors: u64,
    /// Padding sectors written to complete a page.
    pub padding_sectors: u64,
    /// GC victims collected.
    pub gc_victims: u64,
    /// Blocks relocated by static wear leveling.
    pub wear_level_moves: u64,
    /// Blocks retired after a program or erase failure.
    pub grown_bad_blocks: u64,
    /// Program failures handled.
    pub program_failures: u64,
    /// Erase failures handled.
    pub erase_failures: u64,
    /// MAP cache hits.
    pub map_hits: u64,
    /// MAP cache misses.
    pub map_misses: u64,
    /// Checkpoints completed.
    pub checkpoints: u64,
    /// Batches (`flush_batch`) committed.
    pub batches: u64,
    /// Read retries (each a new array read of a sector that was uncorrectable).
    pub read_retries: u64,
    /// Host reads that failed: uncorrectable after retries, checksum or TAG mismatch, a
    /// mapped page found erased, or an LBA lost earlier (SMART media errors).
    pub media_errors: u64,
    /// Sectors whose data did not match the CRC-32C or TAG kept with it (SMART data
    /// integrity errors).
    pub integrity_errors: u64,
    /// Sectors GC could not read and recorded as lost.
    pub lost_sectors: u64,
    /// Commits that failed and were rolled back.
    pub aborted_commits: u64,
    /// Sectors the host read that were never written (or were trimmed): answered with
    /// zeros from the MAP alone, without a flash read.
    pub unwritten_read_sectors: u64,
}

macro_rules! stats_fields {
    ($m:ident) => {
        $m!(
            host_write_sectors,
            host_read_sectors,
            host_trim_sectors,
            commits,
            user_programs,
            gc_programs,
            meta_programs,
            log_pages,
            user_reads,
            gc_reads,
            meta_reads,
            erases,
            meta_erases,
            gc_moved_sectors,
            gc_reclaimed_sectors,
            padding_sectors,
            gc_victims,
            wear_level_moves,
            grown_bad_blocks,
            program_failures,
            erase_failures,
            map_hits,
            map_misses,
            checkpoints,
            batches,
            read_retries,
            media_errors,
            integrity_errors,
            lost_sectors,
            aborted_commits,
            unwritten_read_sectors
        )
    };
}

impl FtlStats {
    /// The counters as words, in a fixed order (for persistence).
    pub fn to_words(&self) -> Vec<u64> {
        macro_rules! w {
            ($($f:ident),*) => { vec![$(self.$f),*] };
        }
        stats_fields!(w)
    }

    /// Inverse of [`FtlStats::to_words`]; missing words are zero.
    pub fn from_words(words: &[u64]) -> FtlStats {
        let mut it = words.iter().copied();
        macro_rules! r {
            ($($f:ident),*) => { FtlStats { $($f: it.next().unwrap_or(0)),* } };
        }
        stats_fields!(r)
    }

    /// Field-wise sum.
    pub fn plus(&self, o: &FtlStats) -> FtlStats {
        macro_rules! p {
            ($($f:ident),*) => { FtlStats { $($f: self.$f + o.$f),* } };
        }
        stats_fields!(p)
    }
}

/// One counter of [`FtlStats`]: what [`Counters::add`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Count {
    /// [`FtlStats::host_write_sectors`].
    HostWriteSectors,
    /// [`FtlStats::host_read_sectors`].
    HostReadSectors,
    /// [`FtlStats::host_trim_sectors`].
    HostTrimSectors,
    /// [`FtlStats::commits`].
    Commits,
    /// [`FtlStats::user_programs`].
    UserPrograms,
    /// [`FtlStats::gc_programs`].
    GcPrograms,
    /// [`FtlStats::meta_programs`].
    MetaPrograms,
    /// [`FtlStats::log_pages`].
    LogPages,
    /// [`FtlStats::user_reads`].
    UserReads,
    /// [`FtlStats::gc_reads`].
    GcReads,
    /// [`FtlStats::meta_reads`].
    MetaReads,
    /// [`FtlStats::erases`].
    Erases,
    /// [`FtlStats::meta_erases`].
    MetaErases,
    /// [`FtlStats::gc_moved_sectors`].
    GcMovedSectors,
    /// [`FtlStats::gc_reclaimed_sectors`].
    GcReclaimedSectors,
    /// [`FtlStats::padding_sectors`].
    PaddingSectors,
    /// [`FtlStats::gc_victims`].
    GcVictims,
    /// [`FtlStats::wear_level_moves`].
    WearLevelMoves,
    /// [`FtlStats::grown_bad_blocks`].
    GrownBadBlocks,
    /// [`FtlStats::program_failures`].
    ProgramFailures,
    /// [`FtlStats::erase_failures`].
    EraseFailures,
    /// [`FtlStats::map_hits`].
    MapHits,
    /// [`FtlStats::map_misses`].
    MapMisses,
    /// [`FtlStats::checkpoints`].
    Checkpoints,
    /// [`FtlStats::batches`].
    Batches,
    /// [`FtlStats::read_retries`].
    ReadRetries,
    /// [`FtlStats::media_errors`].
    MediaErrors,
    /// [`FtlStats::integrity_errors`].
    IntegrityErrors,
    /// [`FtlStats::lost_sectors`].
    LostSectors,
    /// [`FtlStats::aborted_commits`].
    AbortedCommits,
    /// [`FtlStats::unwritten_read_sectors`].
    UnwrittenReadSectors,
}

/// The FTL's counters: the current measurement window and the lifetime counts before it.
/// Modules count events through [`Counters::add`]; only this module changes the values.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Counters of the current measurement window.
    window: FtlStats,
    /// Lifetime counters up to the start of the current window.
    life_base: FtlStats,
}

impl Counters {
    /// The counter `c` of the current window.
    #[inline]
    fn slot(&mut self, c: Count) -> &mut u64 {
        match c {
            Count::HostWriteSectors => &mut self.window.host_write_sectors,
            Count::HostReadSectors => &mut self.window.host_read_sectors,
            Count::HostTrimSectors => &mut self.window.host_trim_sectors,
            Count::Commits => &mut self.window.commits,
            Count::UserPrograms => &mut self.window.user_programs,
            Count::GcPrograms => &mut self.window.gc_programs,
            Count::MetaPrograms => &mut self.window.meta_programs,
            Count::LogPages => &mut self.window.log_pages,
            Count::UserReads => &mut self.window.user_reads,
            Count::GcReads => &mut self.window.gc_reads,
            Count::MetaReads => &mut self.window.meta_reads,
            Count::Erases => &mut self.window.erases,
            Count::MetaErases => &mut self.window.meta_erases,
            Count::GcMovedSectors => &mut self.window.gc_moved_sectors,
            Count::GcReclaimedSectors => &mut self.window.gc_reclaimed_sectors,
            Count::PaddingSectors => &mut self.window.padding_sectors,
            Count::GcVictims => &mut self.window.gc_victims,
            Count::WearLevelMoves => &mut self.window.wear_level_moves,
            Count::GrownBadBlocks => &mut self.window.grown_bad_blocks,
            Count::ProgramFailures => &mut self.window.program_failures,
            Count::EraseFailures => &mut self.window.erase_failures,
            Count::MapHits => &mut self.window.map_hits,
            Count::MapMisses => &mut self.window.map_misses,
            Count::Checkpoints => &mut self.window.checkpoints,
            Count::Batches => &mut self.window.batches,
            Count::ReadRetries => &mut self.window.read_retries,
            Count::MediaErrors => &mut self.window.media_errors,
            Count::IntegrityErrors => &mut self.window.integrity_errors,
            Count::LostSectors => &mut self.window.lost_sectors,
            Count::AbortedCommits => &mut self.window.aborted_commits,
            Count::UnwrittenReadSectors => &mut self.window.unwritten_read_sectors,
        }
    }

    /// Counter `c` of `s`.
    #[inline]
    fn get(s: &FtlStats, c: Count) -> u64 {
        match c {
            Count::HostWriteSectors => s.host_write_sectors,
            Count::HostReadSectors => s.host_read_sectors,
            Count::HostTrimSectors => s.host_trim_sectors,
            Count::Commits => s.commits,
            Count::UserPrograms => s.user_programs,
            Count::GcPrograms => s.gc_programs,
            Count::MetaPrograms => s.meta_programs,
            Count::LogPages => s.log_pages,
            Count::UserReads => s.user_reads,
            Count::GcReads => s.gc_reads,
            Count::MetaReads => s.meta_reads,
            Count::Erases => s.erases,
            Count::MetaErases => s.meta_erases,
            Count::GcMovedSectors => s.gc_moved_sectors,
            Count::GcReclaimedSectors => s.gc_reclaimed_sectors,
            Count::PaddingSectors => s.padding_sectors,
            Count::GcVictims => s.gc_victims,
            Count::WearLevelMoves => s.wear_level_moves,
            Count::GrownBadBlocks => s.grown_bad_blocks,
            Count::ProgramFailures => s.program_failures,
            Count::EraseFailures => s.erase_failures,
            Count::MapHits => s.map_hits,
            Count::MapMisses => s.map_misses,
            Count::Checkpoints => s.checkpoints,
            Count::Batches => s.batches,
            Count::ReadRetries => s.read_retries,
            Count::MediaErrors => s.media_errors,
            Count::IntegrityErrors => s.integrity_errors,
            Count::LostSectors => s.lost_sectors,
            Count::AbortedCommits => s.aborted_commits,
            Count::UnwrittenReadSectors => s.unwritten_read_sectors,
        }
    }

    /// Counter `c` over the device's life.
    #[inline]
    pub(crate) fn lifetime_of(&self, c: Count) -> u64 {
        Self::get(&self.life_base, c) + Self::get(&self.window, c)
    }

    /// Count `n` more of `c` in the current window.
    #[inline]
    pub(crate) fn add(&mut self, c: Count, n: u64) {
        *self.slot(c) += n;
    }

    /// Take back one count of `c` that [`Counters::add`] made for an operation that is
    /// retried from the start (it will count again).
    #[inline]
    pub(crate) fn undo(&mut self, c: Count) {
        let v = self.slot(c);
        debug_assert!(*v > 0, "undo of {c:?}, which was never counted");
        *v -= 1;
    }

    /// The current window.
    #[inline]
    pub(crate) fn window(&self) -> &FtlStats {
        &self.window
    }

    /// Counts over the device's life: the base plus the current window.
    pub(crate) fn lifetime(&self) -> FtlStats {
        self.life_base.plus(&self.window)
    }

    /// Start a new measurement window (the current one joins the lifetime base).
    pub(crate) fn new_window(&mut self) {
        self.life_base = self.life_base.plus(&self.window);
        self.window = FtlStats::default();
    }

    /// Forget every count (a freshly formatted device).
    pub(crate) fn reset(&mut self) {
        *self = Counters::default();
    }

    /// Restore the lifetime counts a checkpoint recorded (a recovered device starts an
    /// empty window on top of them).
    pub(crate) fn restore_lifetime(&mut self, base: FtlStats) {
        self.life_base = base;
    }
}

/// The batch-io paper's Table 3 columns, in bytes: what the device read and wrote for
/// user requests and for GC, and the space GC reclaimed (§8.2.3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GcBytes {
    /// Bytes the host read.
    pub user_read: u64,
    /// Bytes the host wrote.
    pub user_write: u64,
    /// Bytes GC and wear leveling read from flash (whole pages).
    pub gc_read: u64,
    /// Bytes GC and wear leveling programmed (whole pages).
    pub gc_write: u64,
    /// Bytes of garbage in the blocks GC erased.
    pub reclaimed: u64,
}

impl GcBytes {
    /// `(user read + GC read) / user read` (batch-io §8.2.3); 0 when the host read nothing.
    pub fn read_amplification(&self) -> f64 {
        ratio(self.user_read + self.gc_read, self.user_read)
    }
    /// `(user write + GC write) / user write` (batch-io §8.2.3); 0 when the host wrote
    /// nothing.
    pub fn write_amplification(&self) -> f64 {
        ratio(self.user_write + self.gc_write, self.user_write)
    }
    /// `(GC read + GC write) / reclaimed space` (batch-io §8.2.3); 0 when nothing was
    /// reclaimed.
    pub fn gc_overhead(&self) -> f64 {
        ratio(self.gc_read + self.gc_write, self.reclaimed)
    }
}

fn ratio(num: u64, den: u64) -> f64 {
    if den == 0 {
        0.0
    } else {
        num as f64 / den as f64
    }
}

impl FtlStats {
    /// The paper's Table 3 columns for pages of `page_bytes` and sectors of
    /// `sector_bytes`.
    pub fn gc_bytes(&self, page_bytes: u64, sector_bytes: u64) -> GcBytes {
        GcBytes {
            user_read: self.host_read_sectors * sector_bytes,
            user_write: self.host_write_sectors * sector_bytes,
            gc_read: self.gc_reads * page_bytes,
            gc_write: self.gc_programs * page_bytes,
            reclaimed: self.gc_reclaimed_sectors * sector_bytes,
        }
    }
    /// Flash sectors programmed (all streams, padding and metadata included) per host
    /// sector written: the physical write amplification, which adds the FTL's own
    /// metadata and log to the paper's figure.
    pub fn physical_write_amplification(&self, sectors_per_page: u32) -> f64 {
        let flash =
            (self.user_programs + self.gc_programs + self.meta_programs) * sectors_per_page as u64;
        ratio(flash, self.host_write_sectors)
    }
    /// `(host + GC-moved sectors) / host sectors`: the GC share of write amplification
    /// counted in sectors moved (0 when the host wrote nothing).
    pub fn gc_write_amplification(&self) -> f64 {
        ratio(
            self.host_write_sectors + self.gc_moved_sectors,
            self.host_write_sectors,
        )
    }
    /// MAP cache hit rate.
    pub fn map_hit_rate(&self) -> f64 {
        ratio(self.map_hits, self.map_hits + self.map_misses)
    }
}
