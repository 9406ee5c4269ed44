use csd_nand::{BlockId, DieId, Nand, NandError, Ppa};
use csd_sim::SimTime;
use thiserror::Error;

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
    /// Every write command is on flash before it completes.
    WriteThrough,
    /// Writes fill page buffers in DRAM; `flush` makes them durable.
    WriteBack,
}

/// FTL parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FtlConfig {
    /// Over-provisioning, `(physical - logical) / logical`, after the reserve.
    pub op: f64,
    /// GC runs while fewer free blocks than this remain (on top of the open blocks).
    pub gc_free_blocks: u32,
    /// Victim choice.
    pub gc_policy: GcPolicy,
    /// Static wear leveling starts when max - min erase count exceeds this.
    pub wear_level_spread: u32,
    /// Maximum sectors per command (MDTS); larger host writes are split.
    pub mdts_sectors: u32,
    /// Write cache mode.
    pub write_cache: WriteCache,
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
        }
    }
}

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
    /// A read could not be corrected.
    #[error("uncorrectable read at LBA {lba}")]
    Uncorrectable {
        /// The LBA.
        lba: u64,
    },
    /// No free block could be found (over-provisioning exhausted by bad blocks).
    #[error("no free flash block left: too many bad blocks for the configured capacity")]
    NoSpace,
    /// The configuration cannot work on this geometry.
    #[error("FTL config: {0}")]
    Config(String),
    /// The flash failed in a way the FTL does not handle (e.g. power loss).
    #[error(transparent)]
    Nand(#[from] NandError),
}

/// Counters of the FTL's work, in sectors unless named otherwise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FtlStats {
    /// Sectors written by the host.
    pub host_write_sectors: u64,
    /// Sectors read by the host.
    pub host_read_sectors: u64,
    /// Sectors trimmed by the host.
    pub host_trim_sectors: u64,
    /// Pages programmed for user data.
    pub user_programs: u64,
    /// Pages programmed by GC and wear leveling.
    pub gc_programs: u64,
    /// Pages programmed for metadata (log, checkpoints, MAP pages).
    pub meta_programs: u64,
    /// Page reads for user data.
    pub user_reads: u64,
    /// Page reads by GC and wear leveling.
    pub gc_reads: u64,
    /// Block erases.
    pub erases: u64,
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
}

impl FtlStats {
    /// Flash sectors programmed (all streams, padding included) per host sector written.
    pub fn write_amplification(&self, sectors_per_page: u32) -> f64 {
        let flash =
            (self.user_programs + self.gc_programs + self.meta_programs) * sectors_per_page as u64;
        flash as f64 / self.host_write_sectors.max(1) as f64
    }
    /// `(host + GC-moved sectors) / host sectors`: the GC share of write amplification.
    pub fn gc_write_amplification(&self) -> f64 {
        (self.host_write_sectors + self.gc_moved_sectors) as f64
            / self.host_write_sectors.max(1) as f64
    }
    /// `(GC reads + GC writes) / reclaimed`, batch-io Tables 3 and 4.
    pub fn gc_overhead(&self) -> f64 {
        (2 * self.gc_moved_sectors) as f64 / self.gc_reclaimed_sectors.max(1) as f64
    }
}

const UNMAPPED: u64 = u64::MAX;
/// Entries with this bit point into a stream's page buffer: `CACHED | stream << 8 | slot`.
const CACHED: u64 = 1 << 63;
const TAG_DATA: u8 = 1;
const TAG_BYTES: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Use {
    Free,
    Open,
    Full,
    Bad,
}

#[derive(Debug, Clone, Copy)]
struct Blk {
    state: Use,
    valid: u32,
    pe: u32,
    /// Write sequence when the block was last written (for cost-benefit age).
    stamp: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    Hot = 0,
    Cold = 1,
}

struct StreamState {
    /// Open block per die: (block index in die, next page).
    open: Vec<Option<(u32, u32)>>,
    rr: u32,
    buf: Vec<u8>,
    lpids: Vec<u64>,
    fill: u32,
}

/// The FTL over one flash array.
pub struct Ftl {
    nand: Nand,
    cfg: FtlConfig,
    spp: u32,
    ss: usize,
    ppb: u32,
    bpd: u32,
    dies: u32,
    oob_sector: usize,
    lbas: u64,
    map: Vec<u64>,
    blocks: Vec<Blk>,
    valid: Vec<u64>,
    free_count: u32,
    streams: [StreamState; 2],
    seq: u64,
    stats: FtlStats,
    oob_scratch: Vec<u8>,
    /// Retired blocks whose live data still has to move (done after the current program).
    to_relocate: Vec<u32>,
    /// `stats.erases` when the wear spread was last checked.
    wl_checked_at: u64,
}

#[inline]
fn pack(block: u32, page: u32, sector: u32) -> u64 {
    ((block as u64) << 24) | ((page as u64) << 8) | sector as u64
}

#[inline]
fn unpack(a: u64) -> (u32, u32, u32) {
    (
        (a >> 24) as u32,
        ((a >> 8) & 0xFFFF) as u32,
        (a & 0xFF) as u32,
    )
}

impl Ftl {
    /// Format a fresh FTL over `nand`: every block that holds anything is erased, and
    /// all logical pages start unmapped.
    pub fn format(mut nand: Nand, cfg: FtlConfig) -> Result<Ftl, FtlError> {
        let g = *nand.geometry();
        if g.oob_per_sector < TAG_BYTES as u32 {
            return Err(FtlError::Config(format!(
                "the FTL keeps a {TAG_BYTES}-byte TAG per sector; this device has {} OOB bytes per sector",
                g.oob_per_sector
            )));
        }
        if !(0.0..=10.0).contains(&cfg.op) || !cfg.op.is_finite() {
            return Err(FtlError::Config(format!(
                "op {} must be between 0 and 10",
                cfg.op
            )));
        }
        if cfg.mdts_sectors == 0 {
            return Err(FtlError::Config("mdts_sectors must be at least 1".into()));
        }
        let dies = g.dies();
        let bpd = g.blocks_per_die();
        let nblocks = (dies * bpd) as usize;
        let mut blocks = vec![
            Blk {
                state: Use::Free,
                valid: 0,
                pe: 0,
                stamp: 0
            };
            nblocks
        ];
        let mut usable = 0u64;
        for (b, blk) in blocks.iter_mut().enumerate() {
            let mut info = nand.block_info(BlockId(b as u32))?;
            if !info.factory_bad && info.next_page != 0 {
                if let Err(e) = nand.erase(BlockId(b as u32), SimTime::ZERO) {
                    match e {
                        NandError::EraseFailed { .. } => {
                            blk.state = Use::Bad;
                            continue;
                        }
                        other => return Err(other.into()),
                    }
                }
                info = nand.block_info(BlockId(b as u32))?;
            }
            blk.pe = info.pe_cycles;
            if info.factory_bad {
                blk.state = Use::Bad;
            } else {
                usable += 1;
            }
        }
        let spp = g.sectors_per_page();
        let spb = (spp * g.pages_per_block) as u64;
        // Provisioning keeps one open block per stream per die; GC keeps `gc_free_blocks`.
        let reserve = 2 * dies as u64 + cfg.gc_free_blocks as u64;
        if usable <= reserve + 1 {
            return Err(FtlError::Config(format!(
                "{usable} usable blocks cannot cover the reserve of {reserve}"
            )));
        }
        let lbas = (((usable - reserve) * spb) as f64 / (1.0 + cfg.op)).floor() as u64;
        let page = g.page_size as usize;
        let mk_stream = || StreamState {
            open: vec![None; dies as usize],
            rr: 0,
            buf: vec![0u8; page],
            lpids: vec![UNMAPPED; spp as usize],
            fill: 0,
        };
        Ok(Ftl {
            spp,
            ss: g.sector_size as usize,
            ppb: g.pages_per_block,
            bpd,
            dies,
            oob_sector: g.oob_per_sector as usize,
            lbas,
            map: vec![UNMAPPED; lbas as usize],
            valid: vec![0u64; (nblocks as u64 * spb).div_ceil(64) as usize],
            free_count: usable as u32,
            blocks,
            streams: [mk_stream(), mk_stream()],
            seq: 0,
            stats: FtlStats::default(),
            oob_scratch: vec![0u8; g.oob_per_page() as usize],
            to_relocate: Vec::new(),
            wl_checked_at: 0,
            nand,
            cfg,
        })
    }

    /// Logical capacity in LBAs.
    pub fn lbas(&self) -> u64 {
        self.lbas
    }

    /// LBA size in bytes.
    pub fn lba_size(&self) -> usize {
        self.ss
    }

    /// Counters.
    pub fn stats(&self) -> &FtlStats {
        &self.stats
    }

    /// Forget counters (a new measurement window).
    pub fn reset_stats(&mut self) {
        self.stats = FtlStats::default();
        self.wl_checked_at = 0;
    }

    /// Sectors per flash page.
    pub fn sectors_per_page(&self) -> u32 {
        self.spp
    }

    /// The configuration.
    pub fn config(&self) -> &FtlConfig {
        &self.cfg
    }

    /// The flash array.
    pub fn nand(&self) -> &Nand {
        &self.nand
    }

    /// The flash array, mutably (fault injection, inspection).
    pub fn nand_mut(&mut self) -> &mut Nand {
        &mut self.nand
    }

    /// Free blocks.
    pub fn free_blocks(&self) -> u32 {
        self.free_count
    }

    /// Blocks retired (factory and grown bad).
    pub fn bad_blocks(&self) -> u32 {
        self.blocks.iter().filter(|b| b.state == Use::Bad).count() as u32
    }

    /// (min, mean, max) erase count over usable blocks.
    pub fn erase_counts(&self) -> (u32, f64, u32) {
        let mut it = self
            .blocks
            .iter()
            .filter(|b| b.state != Use::Bad)
            .map(|b| b.pe);
        let first = it.next().unwrap_or(0);
        let (mut mn, mut mx, mut sum, mut n) = (first, first, first as u64, 1u64);
        for pe in it {
            mn = mn.min(pe);
            mx = mx.max(pe);
            sum += pe as u64;
            n += 1;
        }
        (mn, sum as f64 / n as f64, mx)
    }

    fn check_range(&self, lba: u64, n: u64) -> Result<(), FtlError> {
        if n == 0 || lba.checked_add(n).is_none_or(|e| e > self.lbas) {
            return Err(FtlError::OutOfRange {
                lba,
                end: lba.saturating_add(n),
                capacity: self.lbas,
            });
        }
        Ok(())
    }

    fn sectors_of(&self, len: usize) -> Result<u64, FtlError> {
        if len == 0 || !len.is_multiple_of(self.ss) {
            return Err(FtlError::BadLength {
                got: len,
                lba_size: self.ss,
            });
        }
        Ok((len / self.ss) as u64)
    }

    #[inline]
    fn gidx(&self, block: u32, page: u32, sector: u32) -> usize {
        ((block as usize * self.ppb as usize + page as usize) * self.spp as usize) + sector as usize
    }

    #[inline]
    fn set_valid(&mut self, a: u64, on: bool) {
        let (b, p, s) = unpack(a);
        let i = self.gidx(b, p, s);
        let bit = 1u64 << (i % 64);
        let w = &mut self.valid[i / 64];
        let was = *w & bit != 0;
        if on && !was {
            *w |= bit;
            self.blocks[b as usize].valid += 1;
        } else if !on && was {
            *w &= !bit;
            self.blocks[b as usize].valid -= 1;
        }
    }

    #[inline]
    fn is_valid(&self, block: u32, page: u32, sector: u32) -> bool {
        let i = self.gidx(block, page, sector);
        self.valid[i / 64] & (1u64 << (i % 64)) != 0
    }

    /// Point `lpid` at `new` (physical or cached), retiring whatever it pointed at.
    fn remap(&mut self, lpid: u64, new: u64) {
        let old = self.map[lpid as usize];
        if old != UNMAPPED {
            if old & CACHED != 0 {
                let st = ((old >> 8) & 0xFF) as usize;
                self.streams[st].lpids[(old & 0xFF) as usize] = UNMAPPED;
            } else {
                self.set_valid(old, false);
            }
        }
        self.map[lpid as usize] = new;
    }

    /// Write `data` (whole LBAs) at `lba`, submitted at `at`; returns the completion.
    /// Host writes larger than MDTS are split into MDTS-sized commands.
    pub fn write(&mut self, lba: u64, data: &[u8], at: SimTime) -> Result<SimTime, FtlError> {
        let n = self.sectors_of(data.len())?;
        self.check_range(lba, n)?;
        let mut done = at;
        let mdts = self.cfg.mdts_sectors as usize * self.ss;
        for (i, cmd) in data.chunks(mdts).enumerate() {
            let l = lba + (i * self.cfg.mdts_sectors as usize) as u64;
            done = done.max(self.write_command(l, cmd, at)?);
        }
        Ok(done)
    }

    fn write_command(&mut self, lba: u64, data: &[u8], at: SimTime) -> Result<SimTime, FtlError> {
        let mut done = at;
        for (i, sector) in data.chunks(self.ss).enumerate() {
            let lpid = lba + i as u64;
            let st = &mut self.streams[Stream::Hot as usize];
            let slot = st.fill as usize;
            st.buf[slot * self.ss..(slot + 1) * self.ss].copy_from_slice(sector);
            st.lpids[slot] = lpid;
            st.fill += 1;
            self.remap(lpid, CACHED | ((Stream::Hot as u64) << 8) | slot as u64);
            self.stats.host_write_sectors += 1;
            if self.streams[Stream::Hot as usize].fill == self.spp {
                done = done.max(self.flush_stream(Stream::Hot, at)?);
            }
        }
        if self.cfg.write_cache == WriteCache::WriteThrough
            && self.streams[Stream::Hot as usize].fill > 0
        {
            done = done.max(self.flush_stream(Stream::Hot, at)?);
        }
        Ok(done)
    }

    /// Make every buffered write durable.
    pub fn flush(&mut self, at: SimTime) -> Result<SimTime, FtlError> {
        let mut done = at;
        for s in [Stream::Hot, Stream::Cold] {
            if self.streams[s as usize].fill > 0 {
                done = done.max(self.flush_stream(s, at)?);
            }
        }
        Ok(done)
    }

    /// Unmap LBAs; reads return zeros afterwards.
    pub fn trim(&mut self, lba: u64, n: u64) -> Result<(), FtlError> {
        self.check_range(lba, n)?;
        for l in lba..lba + n {
            self.remap(l, UNMAPPED);
        }
        self.stats.host_trim_sectors += n;
        Ok(())
    }

    /// Read LBAs into `buf`, submitted at `at`; returns the completion. Unwritten LBAs
    /// read as zeros.
    pub fn read(&mut self, lba: u64, buf: &mut [u8], at: SimTime) -> Result<SimTime, FtlError> {
        let n = self.sectors_of(buf.len())?;
        self.check_range(lba, n)?;
        let ss = self.ss;
        let mut done = at;
        let mut i = 0u64;
        while i < n {
            let l = lba + i;
            let e = self.map[l as usize];
            let out = &mut buf[i as usize * ss..];
            if e == UNMAPPED {
                out[..ss].fill(0);
                i += 1;
                continue;
            }
            if e & CACHED != 0 {
                let st = &self.streams[((e >> 8) & 0xFF) as usize];
                let slot = (e & 0xFF) as usize;
                out[..ss].copy_from_slice(&st.buf[slot * ss..(slot + 1) * ss]);
                i += 1;
                continue;
            }
            // Extend the run over consecutive sectors of the same page.
            let (b, p, s) = unpack(e);
            let mut run = 1u64;
            while i + run < n
                && s + (run as u32) < self.spp
                && self.map[(l + run) as usize] == e + run
            {
                run += 1;
            }
            let ppa = Ppa::new(BlockId(b), p);
            match self
                .nand
                .read(ppa, s, &mut out[..run as usize * ss], &mut [], at)
            {
                Ok(r) => done = done.max(r.done),
                Err(NandError::Uncorrectable { sector, .. }) => {
                    return Err(FtlError::Uncorrectable {
                        lba: l + (sector - s) as u64,
                    });
                }
                Err(e) => return Err(e.into()),
            }
            self.stats.user_reads += 1;
            i += run;
        }
        self.stats.host_read_sectors += n;
        Ok(done)
    }

    /// Program the stream's page buffer (padded) to the next provisioned page.
    fn flush_stream(&mut self, s: Stream, at: SimTime) -> Result<SimTime, FtlError> {
        let si = s as usize;
        let fill = self.streams[si].fill;
        if fill < self.spp {
            self.stats.padding_sectors += (self.spp - fill) as u64;
            let st = &mut self.streams[si];
            st.buf[fill as usize * self.ss..].fill(0);
            for l in &mut st.lpids[fill as usize..] {
                *l = UNMAPPED;
            }
        }
        // TAGs: kind, LPID and a CRC of the sector, for reverse mapping and recovery.
        let mut oob = std::mem::take(&mut self.oob_scratch);
        oob.fill(0xFF);
        for k in 0..self.spp as usize {
            let lpid = self.streams[si].lpids[k];
            let t = &mut oob[k * self.oob_sector..k * self.oob_sector + TAG_BYTES];
            t[0] = if lpid == UNMAPPED { 0 } else { TAG_DATA };
            t[1..4].fill(0);
            t[4..12].copy_from_slice(&lpid.to_le_bytes());
            let crc = crc32c::crc32c(&self.streams[si].buf[k * self.ss..(k + 1) * self.ss]);
            t[12..16].copy_from_slice(&crc.to_le_bytes());
        }
        let result = self.program_page(s, &oob, at);
        self.oob_scratch = oob;
        let (block, page, done) = result?;
        for k in 0..self.spp {
            let lpid = self.streams[si].lpids[k as usize];
            if lpid == UNMAPPED {
                continue;
            }
            let a = pack(block, page, k);
            // The entry still points at this buffer slot unless a later write replaced it.
            if self.map[lpid as usize] == CACHED | ((si as u64) << 8) | k as u64 {
                self.map[lpid as usize] = a;
                self.set_valid(a, true);
            }
        }
        let st = &mut self.streams[si];
        st.fill = 0;
        st.lpids.fill(UNMAPPED);
        match s {
            Stream::Hot => self.stats.user_programs += 1,
            Stream::Cold => self.stats.gc_programs += 1,
        }
        while let Some(b) = self.to_relocate.pop() {
            self.relocate(b, done)?;
        }
        if s == Stream::Hot {
            self.collect_garbage(done)?;
        }
        Ok(done)
    }

    /// Program the stream buffer somewhere, retiring blocks whose program fails.
    fn program_page(
        &mut self,
        s: Stream,
        oob: &[u8],
        at: SimTime,
    ) -> Result<(u32, u32, SimTime), FtlError> {
        let si = s as usize;
        for _attempt in 0..(self.dies * self.bpd) {
            let (die, bidx, page) = self.provision(s)?;
            let block = die * self.bpd + bidx;
            let buf = std::mem::take(&mut self.streams[si].buf);
            let r = self
                .nand
                .program(Ppa::new(BlockId(block), page), &buf, oob, at);
            self.streams[si].buf = buf;
            self.seq += 1;
            let st = &mut self.streams[si];
            match r {
                Ok(done) => {
                    if page + 1 == self.ppb {
                        st.open[die as usize] = None;
                        self.blocks[block as usize].state = Use::Full;
                    } else {
                        st.open[die as usize] = Some((bidx, page + 1));
                    }
                    self.blocks[block as usize].stamp = self.seq;
                    return Ok((block, page, done));
                }
                Err(NandError::ProgramFailed { done, .. }) => {
                    self.stats.program_failures += 1;
                    st.open[die as usize] = None;
                    self.retire(block, done)?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(FtlError::NoSpace)
    }

    /// The next (die, block index, page) for stream `s`: channel round robin over dies,
    /// opening the least-worn free block of a die when needed.
    fn provision(&mut self, s: Stream) -> Result<(u32, u32, u32), FtlError> {
        let si = s as usize;
        for _ in 0..self.dies {
            let die = self.streams[si].rr;
            self.streams[si].rr = (die + 1) % self.dies;
            if let Some((b, p)) = self.streams[si].open[die as usize] {
                return Ok((die, b, p));
            }
            if let Some(b) = self.take_free_block(die) {
                self.streams[si].open[die as usize] = Some((b, 0));
                return Ok((die, b, 0));
            }
        }
        Err(FtlError::NoSpace)
    }

    fn take_free_block(&mut self, die: u32) -> Option<u32> {
        let base = (die * self.bpd) as usize;
        let best = (0..self.bpd)
            .filter(|&i| self.blocks[base + i as usize].state == Use::Free)
            .min_by_key(|&i| self.blocks[base + i as usize].pe)?;
        self.blocks[base + best as usize].state = Use::Open;
        self.free_count -= 1;
        Some(best)
    }

    /// Retire a block after a failure: move its live sectors, mark it bad.
    fn retire(&mut self, block: u32, at: SimTime) -> Result<(), FtlError> {
        if self.blocks[block as usize].state == Use::Free {
            self.free_count -= 1;
        }
        self.blocks[block as usize].state = Use::Bad;
        self.stats.grown_bad_blocks += 1;
        if self.blocks[block as usize].valid > 0 {
            self.to_relocate.push(block);
        }
        let _ = at;
        Ok(())
    }

    /// Run GC while free blocks are short, then static wear leveling if needed.
    fn collect_garbage(&mut self, at: SimTime) -> Result<(), FtlError> {
        let mut guard = 0;
        while self.free_count < self.cfg.gc_free_blocks {
            guard += 1;
            if guard > self.blocks.len() {
                return Err(FtlError::NoSpace);
            }
            let Some(victim) = self.pick_victim() else {
                return Err(FtlError::NoSpace);
            };
            let spb = self.spp * self.ppb;
            self.stats.gc_reclaimed_sectors += (spb - self.blocks[victim as usize].valid) as u64;
            self.stats.gc_victims += 1;
            self.relocate(victim, at)?;
            self.erase_block(victim, at)?;
        }
        // Erase counts change only on erase: check the spread only after erases.
        if self.stats.erases == self.wl_checked_at {
            return Ok(());
        }
        self.wl_checked_at = self.stats.erases;
        let (mn, _, mx) = self.erase_counts();
        if mx - mn > self.cfg.wear_level_spread {
            let coldest = (0..self.blocks.len() as u32)
                .filter(|&b| self.blocks[b as usize].state == Use::Full)
                .min_by_key(|&b| self.blocks[b as usize].pe);
            if let Some(b) = coldest
                && self.blocks[b as usize].pe == mn
            {
                self.stats.wear_level_moves += 1;
                self.relocate(b, at)?;
                self.erase_block(b, at)?;
            }
        }
        Ok(())
    }

    fn pick_victim(&self) -> Option<u32> {
        let spb = (self.spp * self.ppb) as f64;
        let full =
            (0..self.blocks.len() as u32).filter(|&b| self.blocks[b as usize].state == Use::Full);
        match self.cfg.gc_policy {
            GcPolicy::Greedy => full.min_by_key(|&b| self.blocks[b as usize].valid),
            GcPolicy::CostBenefit => full
                .map(|b| {
                    let blk = &self.blocks[b as usize];
                    let u = blk.valid as f64 / spb;
                    let age = (self.seq - blk.stamp) as f64 + 1.0;
                    let score = if u == 0.0 {
                        f64::INFINITY
                    } else {
                        (1.0 - u) / (2.0 * u) * age
                    };
                    (b, score)
                })
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(b, _)| b),
        }
    }

    /// Move every valid sector of `block` to the COLD stream, using the TAG for the
    /// reverse mapping and the optimistic MAP update of batch-io §7.2.8.
    fn relocate(&mut self, block: u32, at: SimTime) -> Result<(), FtlError> {
        // Own buffers: relocation can nest (a program failure while moving data retires
        // another block whose data moves next), so it cannot borrow a shared scratch page.
        let mut data = vec![0u8; self.spp as usize * self.ss];
        let mut oob = vec![0u8; self.oob_sector * self.spp as usize];

        (|| {
            for page in 0..self.ppb {
                if !(0..self.spp).any(|s| self.is_valid(block, page, s)) {
                    continue;
                }
                let r = self
                    .nand
                    .read(Ppa::new(BlockId(block), page), 0, &mut data, &mut oob, at);
                self.stats.gc_reads += 1;
                match r {
                    Ok(_) => {}
                    Err(NandError::Uncorrectable { .. }) => {
                        // Unreadable live data cannot be moved; its LBAs will read as errors.
                        continue;
                    }
                    Err(e) => return Err(FtlError::from(e)),
                }
                for s in 0..self.spp {
                    if !self.is_valid(block, page, s) {
                        continue;
                    }
                    let t = &oob
                        [s as usize * self.oob_sector..s as usize * self.oob_sector + TAG_BYTES];
                    let lpid = u64::from_le_bytes(t[4..12].try_into().unwrap_or([0xFF; 8]));
                    let old = pack(block, page, s);
                    // Optimistic update: only if MAP still points here (a racing user write wins).
                    if t[0] != TAG_DATA || lpid >= self.lbas || self.map[lpid as usize] != old {
                        self.set_valid(old, false);
                        continue;
                    }
                    let st = &mut self.streams[Stream::Cold as usize];
                    let slot = st.fill as usize;
                    st.buf[slot * self.ss..(slot + 1) * self.ss]
                        .copy_from_slice(&data[s as usize * self.ss..(s as usize + 1) * self.ss]);
                    st.lpids[slot] = lpid;
                    st.fill += 1;
                    self.remap(lpid, CACHED | ((Stream::Cold as u64) << 8) | slot as u64);
                    self.stats.gc_moved_sectors += 1;
                    if self.streams[Stream::Cold as usize].fill == self.spp {
                        self.flush_stream(Stream::Cold, at)?;
                    }
                }
            }
            Ok(())
        })()
    }

    fn erase_block(&mut self, block: u32, at: SimTime) -> Result<(), FtlError> {
        debug_assert_eq!(self.blocks[block as usize].valid, 0);
        self.stats.erases += 1;
        match self.nand.erase(BlockId(block), at) {
            Ok(_) => {
                let b = &mut self.blocks[block as usize];
                b.pe += 1;
                b.state = Use::Free;
                self.free_count += 1;
                Ok(())
            }
            Err(NandError::EraseFailed { .. }) => {
                self.stats.erase_failures += 1;
                self.blocks[block as usize].state = Use::Bad;
                self.stats.grown_bad_blocks += 1;
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The die of LBA `lba`'s current copy, if it is on flash (for tests and tools).
    pub fn die_of_lba(&self, lba: u64) -> Option<DieId> {
        let e = *self.map.get(lba as usize)?;
        if e == UNMAPPED || e & CACHED != 0 {
            return None;
        }
        Some(self.nand.addr().die_of(BlockId(unpack(e).0)))
    }

    /// Check internal invariants (valid counts agree with the bitmap and MAP); for tests.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut counts = vec![0u32; self.blocks.len()];
        for (l, &e) in self.map.iter().enumerate() {
            if e == UNMAPPED || e & CACHED != 0 {
                continue;
            }
            let (b, p, s) = unpack(e);
            if !self.is_valid(b, p, s) {
                return Err(format!("LBA {l} maps to a sector not marked valid"));
            }
            counts[b as usize] += 1;
        }
        for (b, blk) in self.blocks.iter().enumerate() {
            if blk.valid != counts[b] {
                return Err(format!(
                    "block {b}: valid count {} but {} mapped sectors",
                    blk.valid, counts[b]
                ));
            }
            if blk.state == Use::Free && blk.valid != 0 {
                return Err(format!("free block {b} holds valid data"));
            }
        }
        let free = self.blocks.iter().filter(|b| b.state == Use::Free).count() as u32;
        if free != self.free_count {
            return Err(format!(
                "free count {} but {free} free blocks",
                self.free_count
            ));
        }
        Ok(())
    }
}
