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
            batches
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

impl FtlStats {
    /// Flash sectors programmed (all streams, padding and metadata included) per host sector written.
    pub fn write_amplification(&self, sectors_per_page: u32) -> f64 {
        let flash =
            (self.user_programs + self.gc_programs + self.meta_programs) * sectors_per_page as u64;
        flash as f64 / self.host_write_sectors.max(1) as f64
    }
    /// `(host + GC-moved sectors) / host sectors`: the GC share of write amplification
    /// (0 when the host wrote nothing).
    pub fn gc_write_amplification(&self) -> f64 {
        if self.host_write_sectors == 0 {
            return 0.0;
        }
        (self.host_write_sectors + self.gc_moved_sectors) as f64
            / self.host_write_sectors.max(1) as f64
    }
    /// Flash pages read per host page read (sectors per page given).
    pub fn read_amplification(&self, sectors_per_page: u32) -> f64 {
        if self.host_read_sectors == 0 {
            return 0.0;
        }
        let flash = (self.user_reads + self.gc_reads + self.meta_reads) * sectors_per_page as u64;
        flash as f64 / self.host_read_sectors as f64
    }
    /// `(GC reads + GC writes) / reclaimed`, batch-io Tables 3 and 4.
    pub fn gc_overhead(&self) -> f64 {
        (2 * self.gc_moved_sectors) as f64 / self.gc_reclaimed_sectors.max(1) as f64
    }
    /// MAP cache hit rate.
    pub fn map_hit_rate(&self) -> f64 {
        self.map_hits as f64 / (self.map_hits + self.map_misses).max(1) as f64
    }
}
