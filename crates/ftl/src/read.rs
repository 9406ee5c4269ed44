//! The read path of the block and batch front ends (batch-io §3, `readLPID`), with the
//! end-to-end check of every sector read from flash.
//!
//! Choices made here:
//! * Each sector carries a TAG in its OOB bytes (kind, LPID, commit sequence, CRC-32C of
//!   the data); every host read checks that the sector is user data of the LBA asked for
//!   and that its bytes match the CRC, as a drive's ECC and protection information do.
//!   A mismatch, or a mapped page found erased, is an uncorrectable error naming the LBA
//!   (SMART counts it as a data-integrity error), never silently wrong data. The check
//!   costs no modeled time (the spare bytes travel with the ECC codeword; see
//!   `Nand::read_with_tags`).
//! * An uncorrectable read is retried `read_retries` times (read retry with shifted
//!   reference voltages: each retry is a new array read, with its own bit errors) before
//!   the error is reported (SMART media errors).
//! * An LBA whose data GC could not move (`Lost`) reads as uncorrectable until rewritten
//!   or trimmed.

use crate::FtlError;
use crate::format::{Kind, TAG_BYTES, Tag, unpack};
use crate::ftl::*;
use crate::stats::{Count, Counters};
use csd_nand::{BlockId, NandError, Ppa};
use csd_sim::SimTime;

/// Metadata pages (MAP, log, checkpoint, tables) get this many times the read retries
/// of user data: a controller keeps its own metadata with the strongest protection it has
/// (SLC mode, the deepest read-retry table), and losing it loses the drive.
pub(crate) const META_RETRY_FACTOR: u32 = 4;

/// Read with read retries: an uncorrectable read caused by bit errors is tried again up
/// to `retries` more times (each a new array read with its own bit errors); a torn or
/// failed page fails at once. Each retry is counted in `counters`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn read_with_retries(
    nand: &mut csd_nand::Nand,
    ppa: Ppa,
    first_sector: u32,
    data: &mut [u8],
    oob: &mut [u8],
    at: SimTime,
    retries: u32,
    counters: &mut Counters,
) -> Result<csd_nand::ReadDone, NandError> {
    let mut attempt = 0;
    loop {
        match nand.read(ppa, first_sector, data, oob, at) {
            Err(NandError::Uncorrectable { bit_errors, .. })
                if bit_errors != u32::MAX && attempt < retries =>
            {
                attempt += 1;
                counters.add(Count::ReadRetries, 1);
            }
            r => return r,
        }
    }
}

impl Ftl {
    /// Read many logical pages at once into consecutive pages of `out`; the reads are
    /// issued together so they overlap across dies.
    pub fn read_lpids(
        &mut self,
        lpids: &[u64],
        out: &mut [u8],
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        if out.len() != lpids.len() * self.geo.sector_size() || lpids.is_empty() {
            return Err(FtlError::BadLength {
                got: out.len(),
                lba_size: self.geo.sector_size(),
            });
        }
        if let Some(&l) = lpids.iter().find(|&&l| l >= self.geo.lbas()) {
            return Err(FtlError::OutOfRange {
                lba: l,
                end: l + 1,
                capacity: self.geo.lbas(),
            });
        }
        let ss = self.geo.sector_size();
        let mut done = at;
        for (i, &l) in lpids.iter().enumerate() {
            done = done.max(self.read(l, &mut out[i * ss..(i + 1) * ss], at)?);
        }
        Ok(done)
    }

    /// Read LBAs into `buf`, submitted at `at`; returns the completion. Unwritten LBAs
    /// read as zeros. Sectors of one flash page that hold consecutive LBAs are read with
    /// one array read.
    pub fn read(&mut self, lba: u64, buf: &mut [u8], at: SimTime) -> Result<SimTime, FtlError> {
        self.read_walk(lba, buf, at, Place::Copy, ALL_SECTORS)
            .map(|(done, _)| done)
    }

    /// [`Ftl::read`] of `buf.len()` bytes from `lba`, leaving in place every `unit`-byte
    /// unit of `buf` (from its start) whose LBAs sit in consecutive sectors of one flash
    /// page: those units of `buf` are not written, and the returned list names them
    /// (unit index, flash address, sectors) for [`Ftl::pin_in_place`]; every other unit
    /// is copied into `buf` as `read` copies it. An emulator shortcut for a host that
    /// evaluates the pages it reads where the medium keeps them (an in-host scan of a
    /// read-only image): the modeled time, the MAP-cache traffic, the checks and every
    /// counter are exactly those of [`Ftl::read`] of the same LBAs. A `unit` that is not
    /// a multiple of the LBA size leaves nothing in place.
    ///
    /// `check` names the sectors of each unit left in place that the host looks at (bit
    /// k: the unit's k-th sector; [`ALL_SECTORS`]: all), as [`Ftl::read_ref_checking`]'s
    /// mask does for one page: every sector's TAG is checked, only the named sectors'
    /// bytes are hashed against their CRC, and the host must not use the others' bytes
    /// (an in-host scan of PAX pages reads the minipages of its program's columns). Units
    /// copied into `buf` are checked whole.
    pub fn read_units_in_place(
        &mut self,
        lba: u64,
        buf: &mut [u8],
        unit: usize,
        check: u64,
        at: SimTime,
    ) -> Result<(SimTime, Vec<InPlaceUnit>), FtlError> {
        let ss = self.geo.sector_size();
        let mut units = Vec::new();
        let mode = if unit >= ss && unit.is_multiple_of(ss) {
            Place::Units {
                sectors: (unit / ss) as u64,
                check,
                out: &mut units,
            }
        } else {
            Place::Copy
        };
        let (done, _) = self.read_walk(lba, buf, at, mode, ALL_SECTORS)?;
        Ok((done, units))
    }

    /// The stored bytes of `units` (as [`Ftl::read_units_in_place`] just named them,
    /// with no change to the array since), pinned for other threads to read
    /// ([`csd_nand::PinnedPages`], one page per unit, in the order given); `None` if a
    /// unit's bytes are not stored (nothing pinned).
    pub fn pin_in_place(&self, units: &[InPlaceUnit]) -> Option<csd_nand::PinnedPages> {
        let mut pages = Vec::with_capacity(units.len());
        for u in units {
            let (b, p, s) = unpack(u.addr);
            let (data, _) = self
                .nand
                .stored_sectors(Ppa::new(BlockId(b), p), s, u.sectors)?;
            pages.push(data);
        }
        // SAFETY: every slice comes from `Nand::stored_sectors` of this FTL's array,
        // under this one shared borrow of it (`pin_pages`' contract).
        Some(unsafe { self.nand.pin_pages(&pages) })
    }

    /// [`Ftl::read`] of `bytes` bytes from `lba` without copying when it can: when the
    /// LBAs sit in consecutive sectors of one flash page, the returned slice is that
    /// page's stored bytes (an emulator shortcut for the firmware's own scans, which look
    /// at a page where it lies); otherwise the bytes are gathered into a buffer the FTL
    /// keeps for this. Either way the modeled time, the MAP-cache traffic, the checks and
    /// every counter are exactly those of [`Ftl::read`] of the same LBAs.
    pub fn read_ref(
        &mut self,
        lba: u64,
        bytes: usize,
        at: SimTime,
    ) -> Result<(SimTime, &[u8]), FtlError> {
        self.read_ref_checking(lba, bytes, at, ALL_SECTORS)
    }

    /// [`Ftl::read_ref`] for a reader that looks only at some sectors of what it reads
    /// (a firmware scan of PAX pages reads the minipages of its program's columns):
    /// `crc` names them (see [`sector_needed`]). Every sector's TAG is checked as
    /// always (it is user data of its LBA, from the page the MAP names); only the named
    /// sectors' bytes are hashed against their CRC and remembered as matching. The
    /// other sectors' bytes are returned unverified: the caller must not use them. The
    /// modeled time and every counter are those of [`Ftl::read`].
    pub fn read_ref_checking(
        &mut self,
        lba: u64,
        bytes: usize,
        at: SimTime,
        crc: u64,
    ) -> Result<(SimTime, &[u8]), FtlError> {
        let mut scratch = self.scratch.take_read();
        if scratch.len() < bytes {
            scratch.resize(bytes, 0);
        }
        let r = self.read_walk(lba, &mut scratch[..bytes], at, Place::Whole, crc);
        self.scratch.put_read(scratch);
        let (done, in_place) = r?;
        let data = match in_place {
            Some(addr) => {
                let (b, p, s) = unpack(addr);
                let n = (bytes / self.geo.sector_size()) as u32;
                self.nand
                    .stored_sectors(Ppa::new(BlockId(b), p), s, n)
                    .map(|(data, _)| data)
                    .ok_or_else(|| {
                        FtlError::Corrupt(format!(
                            "LBA {lba}: flash page read in place holds no bytes"
                        ))
                    })?
            }
            None => &self.scratch.read()[..bytes],
        };
        Ok((done, data))
    }

    /// The walk of [`Ftl::read`]: MAP entries in LBA order, runs of consecutive sectors
    /// of one flash page read together. With `in_place`, a request that is one such run
    /// is read without a copy and its flash address returned (`buf` is then untouched).
    fn read_walk(
        &mut self,
        lba: u64,
        buf: &mut [u8],
        at: SimTime,
        mut mode: Place<'_>,
        crc: u64,
    ) -> Result<(SimTime, Option<u64>), FtlError> {
        let n = self.sectors_of(buf.len())?;
        self.check_range(lba, n)?;
        let ss = self.geo.sector_size();
        let mut done = at;
        let mut i = 0u64;
        let mut place = None;
        while i < n {
            let l = lba + i;
            let (e, t) = self.map_get(l, at)?;
            let out = &mut buf[i as usize * ss..];
            match Loc::of(e) {
                Loc::Unmapped => {
                    out[..ss].fill(0);
                    self.counters.add(Count::UnwrittenReadSectors, 1);
                    i += 1;
                }
                Loc::Lost => {
                    self.counters.add(Count::MediaErrors, 1);
                    return Err(FtlError::Uncorrectable { lba: l });
                }
                Loc::Buffered { buf: b, slot: k } => {
                    let data = self
                        .commit
                        .buf(b)
                        .filter(|pb| pb.lpids[k] == l)
                        .map(|pb| &pb.data[k * ss..(k + 1) * ss])
                        .ok_or_else(|| {
                            FtlError::Corrupt(format!(
                                "MAP entry of LBA {l} names page buffer {b} which does not hold it"
                            ))
                        })?;
                    out[..ss].copy_from_slice(data);
                    i += 1;
                }
                Loc::Flash(a) => {
                    let s = unpack(a).2;
                    let mut run = 1u64;
                    while i + run < n && s + (run as u32) < self.geo.sectors_per_page() {
                        let (next, _) = self.map_get(l + run, at)?;
                        if next != a + run {
                            break;
                        }
                        run += 1;
                    }
                    let crc = sectors_from(crc, i);
                    let whole = matches!(mode, Place::Whole) && i == 0 && run == n;
                    let unit = match &mut mode {
                        Place::Units {
                            sectors,
                            check,
                            out,
                        } if i.is_multiple_of(*sectors) && run == *sectors => {
                            Some((out, *sectors, *check))
                        }
                        _ => None,
                    };
                    let r = if whole {
                        place = Some(a);
                        self.read_verified_in_place(l, a, run as u32, t, crc)?
                    } else if let Some((units, sectors, check)) = unit {
                        units.push(InPlaceUnit {
                            unit: (i / sectors) as usize,
                            addr: a,
                            sectors: run as u32,
                        });
                        // The unit starts at its run's first sector: its mask is the
                        // run's.
                        self.read_verified_in_place(l, a, run as u32, t, check)?
                    } else {
                        self.read_verified(l, a, &mut out[..run as usize * ss], t, crc)?
                    };
                    done = done.max(r);
                    i += run;
                }
            }
        }
        self.counters.add(Count::HostReadSectors, n);
        Ok((done, place))
    }

    /// Read the sectors at flash address `addr` (and the ones after it in the same page)
    /// holding LBAs `lba..`, with read retries and the TAG/CRC check of each sector.
    fn read_verified(
        &mut self,
        lba: u64,
        addr: u64,
        out: &mut [u8],
        at: SimTime,
        crc: u64,
    ) -> Result<SimTime, FtlError> {
        let (b, p, s) = unpack(addr);
        let ppa = Ppa::new(BlockId(b), p);
        let n = out.len() / self.geo.sector_size();
        let pe = self.buffered_pe(b)?;
        if let Some(pe) = pe
            && self.pagebuf.lookup(b, p, pe)
        {
            return self.read_from_page_buffer(lba, ppa, s, n as u32, Some(out), at, crc);
        }
        let mut oob = self.scratch.take_oob();
        let ob = self.geo.oob_per_sector();
        let mut attempt = 0;
        let r = loop {
            match self
                .nand
                .read_with_tags(ppa, s, out, &mut oob[..n * ob], at)
            {
                Err(NandError::Uncorrectable { bit_errors, .. })
                    if bit_errors != u32::MAX && attempt < self.cfg.read_retries =>
                {
                    attempt += 1;
                    self.counters.add(Count::ReadRetries, 1);
                }
                r => break r,
            }
        };
        let ss = self.geo.sector_size();
        let r = check_sectors(
            &self.nand,
            &mut self.counters,
            (lba, ppa, s),
            r,
            out,
            &oob[..n * ob],
            (ss, crc),
        );
        self.scratch.put_oob(oob);
        self.flash_read_done(ppa, (s, n as u32), pe, r, crc)
    }

    /// The end of a host read of sectors `s..s + n` of `ppa` from flash, checked (`r`):
    /// the page enters the page buffer (`pe`: the block's erase count, with one), the
    /// hashed sectors are remembered, and the array read is counted.
    fn flash_read_done(
        &mut self,
        ppa: Ppa,
        (s, n): (u32, u32),
        pe: Option<u32>,
        r: Result<SimTime, FtlError>,
        crc: u64,
    ) -> Result<SimTime, FtlError> {
        self.keep_in_page_buffer(ppa, pe, &r);
        let r = self.mark_checked(ppa, s, n, r, crc);
        if r.is_ok() {
            // An array read (a page-buffer hit is not one).
            self.counters.add(Count::UserReads, 1);
        }
        r
    }

    /// With a page buffer: the erase count of block `b` (what its buffered pages were
    /// kept under); `None` without one.
    #[inline]
    fn buffered_pe(&self, b: u32) -> Result<Option<u32>, FtlError> {
        if !self.pagebuf.enabled() {
            return Ok(None);
        }
        Ok(Some(self.nand.block_info(BlockId(b))?.pe_cycles))
    }

    /// A host read of page `ppa` from flash that passed its checks: the page is now in
    /// the page buffer (when there is one: `pe` is then the block's erase count).
    #[inline]
    fn keep_in_page_buffer(&mut self, ppa: Ppa, pe: Option<u32>, r: &Result<SimTime, FtlError>) {
        if let (Some(pe), Ok(_)) = (pe, r) {
            self.pagebuf.insert(ppa.block.0, ppa.page, pe);
        }
    }

    /// Sectors `s..s + n` of page `ppa`, found in the page buffer: no array read and no
    /// flash time (done at `at`); their bytes (copied into `out` when given) pass the
    /// same TAG/CRC check as a flash read's.
    #[allow(clippy::too_many_arguments)]
    fn read_from_page_buffer(
        &mut self,
        lba: u64,
        ppa: Ppa,
        s: u32,
        n: u32,
        out: Option<&mut [u8]>,
        at: SimTime,
        crc: u64,
    ) -> Result<SimTime, FtlError> {
        let hit = Ok(csd_nand::ReadDone {
            done: at,
            corrected_bits: 0,
            erased: false,
        });
        let (data, oob) = self.nand.stored_sectors(ppa, s, n).ok_or_else(|| {
            FtlError::Corrupt(format!(
                "LBA {lba}: page {ppa:?} in the page buffer holds no bytes"
            ))
        })?;
        let ss = self.geo.sector_size();
        let data = match out {
            Some(out) => {
                out.copy_from_slice(data);
                &*out
            }
            None => data,
        };
        let r = check_sectors(
            &self.nand,
            &mut self.counters,
            (lba, ppa, s),
            hit,
            data,
            oob,
            (ss, crc),
        );
        self.mark_checked(ppa, s, n, r, crc)
    }

    /// Remember the sectors a successful check hashed (`Nand::sector_checked`): those
    /// of the `n` from `first` that `crc` names.
    fn mark_checked(
        &mut self,
        ppa: Ppa,
        first: u32,
        n: u32,
        r: Result<SimTime, FtlError>,
        crc: u64,
    ) -> Result<SimTime, FtlError> {
        if r.is_ok() {
            for k in 0..n {
                if sector_needed(crc, k as usize) {
                    self.nand.mark_sector_checked(ppa, first + k);
                }
            }
        }
        r
    }

    /// [`Ftl::read_verified`] of `n` sectors without copying them
    /// ([`csd_nand::Nand::read_in_place`]): the same retries and checks.
    fn read_verified_in_place(
        &mut self,
        lba: u64,
        addr: u64,
        n: u32,
        at: SimTime,
        crc: u64,
    ) -> Result<SimTime, FtlError> {
        let (b, p, s) = unpack(addr);
        let ppa = Ppa::new(BlockId(b), p);
        let pe = self.buffered_pe(b)?;
        if let Some(pe) = pe
            && self.pagebuf.lookup(b, p, pe)
        {
            return self.read_from_page_buffer(lba, ppa, s, n, None, at, crc);
        }
        let mut attempt = 0;
        let r = loop {
            match self.nand.read_in_place(ppa, s, n, at) {
                Err(NandError::Uncorrectable { bit_errors, .. })
                    if bit_errors != u32::MAX && attempt < self.cfg.read_retries =>
                {
                    attempt += 1;
                    self.counters.add(Count::ReadRetries, 1);
                }
                r => break r,
            }
        };
        let (data, oob) = match &r {
            Ok(d) if !d.erased => self.nand.stored_sectors(ppa, s, n).unwrap_or((&[], &[])),
            _ => (&[][..], &[][..]),
        };
        let ss = self.geo.sector_size();
        let r = check_sectors(
            &self.nand,
            &mut self.counters,
            (lba, ppa, s),
            r,
            data,
            oob,
            (ss, crc),
        );
        self.flash_read_done(ppa, (s, n), pe, r, crc)
    }
}

/// How [`Ftl::read_walk`] treats the flash runs it reads.
enum Place<'a> {
    /// Copy every run into the buffer.
    Copy,
    /// Leave the read in place when it is one run from its first LBA to its last.
    Whole,
    /// Leave in place every run that is exactly one unit of `sectors` sectors, aligned
    /// to units from the read's start, and name it in `out`; check only the sectors of
    /// such a unit that `check` names (see [`Ftl::read_units_in_place`]).
    Units {
        sectors: u64,
        check: u64,
        out: &'a mut Vec<InPlaceUnit>,
    },
}

/// A unit of a read left where the flash keeps it ([`Ftl::read_units_in_place`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InPlaceUnit {
    /// Index of the unit in the read.
    pub unit: usize,
    /// Flash address of its first sector (packed as the MAP keeps it).
    pub addr: u64,
    /// Sectors of the unit.
    pub sectors: u32,
}

/// Every sector of a read: its CRC is checked (the mask of [`Ftl::read_ref_checking`]).
pub const ALL_SECTORS: u64 = u64::MAX;

/// Whether the `k`-th sector of a read is among those mask `crc` names (bit `k`; a read
/// of more than 64 sectors checks every sector past the 64th).
#[inline]
pub fn sector_needed(crc: u64, k: usize) -> bool {
    k >= 64 || crc >> k & 1 == 1
}

/// Mask `crc` of a read, seen from its `i`-th sector on (sectors past the 64th named).
#[inline]
fn sectors_from(crc: u64, i: u64) -> u64 {
    match i {
        0 => crc,
        1..64 => crc >> i | !0u64 << (64 - i),
        _ => ALL_SECTORS,
    }
}

/// The end-to-end check of sectors read from flash (`at` = first LBA, page, first
/// sector): an erased page or a sector whose TAG is not user data of its LBA, or whose
/// bytes do not match the TAG's CRC, is an uncorrectable error naming the LBA (counted
/// as a media and integrity error); a sector whose bytes matched before and have not
/// changed since is not hashed again (`Nand::sector_checked`), nor is one the reader
/// does not look at (`crc`, see [`Ftl::read_ref_checking`]).
fn check_sectors(
    nand: &csd_nand::Nand,
    counters: &mut Counters,
    (lba, ppa, s): (u64, Ppa, u32),
    r: Result<csd_nand::ReadDone, NandError>,
    data: &[u8],
    oob: &[u8],
    (ss, crc): (usize, u64),
) -> Result<SimTime, FtlError> {
    match r {
        Ok(r) if r.erased || data.is_empty() => {
            // The MAP names a page the flash says was never programmed (a zeroed or
            // replaced region of the image): never return 0xFF as data.
            counters.add(Count::IntegrityErrors, 1);
            counters.add(Count::MediaErrors, 1);
            Err(FtlError::Uncorrectable { lba })
        }
        Ok(r) => {
            let n = data.len() / ss;
            let ob = oob.len() / n.max(1);
            for k in 0..n {
                let tag = Tag::read(&oob[k * ob..k * ob + TAG_BYTES]);
                let sector = s + k as u32;
                let ok = matches!(tag, Some(t) if t.kind == Kind::Data
                && t.id == lba + k as u64
                && (!sector_needed(crc, k)
                    || nand.sector_checked(ppa, sector)
                    || t.matches(&data[k * ss..(k + 1) * ss], || {
                        place_of(nand, ppa.block.0, ppa.page, sector)
                    })));
                if !ok {
                    counters.add(Count::IntegrityErrors, 1);
                    counters.add(Count::MediaErrors, 1);
                    return Err(FtlError::Uncorrectable {
                        lba: lba + k as u64,
                    });
                }
            }
            Ok(r.done)
        }
        Err(NandError::Uncorrectable { sector, .. }) => {
            counters.add(Count::MediaErrors, 1);
            Err(FtlError::Uncorrectable {
                lba: lba + sector.saturating_sub(s) as u64,
            })
        }
        Err(e) => Err(e.into()),
    }
}

/// The [`crate::format::place_key`] of a sector as the media stands now (its block's
/// P/E count is the one it was programmed under until the block's next erase).
pub(crate) fn place_of(nand: &csd_nand::Nand, block: u32, page: u32, sector: u32) -> u32 {
    let pe = nand
        .block_info(csd_nand::BlockId(block))
        .map_or(u32::MAX, |i| i.pe_cycles);
    crate::format::place_key(block, page, sector, pe)
}

/// The CRC part of the end-to-end check of one page's sectors, taken while the page is
/// peeked in place ([`Ftl::peek_sector_crcs`]) so that another thread can hash the
/// stored bytes it holds pinned: the hash is nearly all of what the check costs the
/// emulator (a one-shot scan of a fresh image hashes every byte it reads once), and a
/// scan's look-ahead threads read those bytes anyway. When every CRC matched,
/// [`Ftl::note_crcs_matched`] records it as the read's own check would
/// ([`csd_nand::Nand::sector_checked`]), so the read does not hash them again; the read
/// still checks each TAG's kind and LBA. No modeled effect (the check costs no modeled
/// time either way).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectorCrcs {
    ppa: Ppa,
    first: u32,
    /// [`Ftl::content_epoch`] when taken: the CRCs hold only while nothing changed.
    epoch: (u64, u64),
    sector_size: usize,
    /// Per sector, the CRC-32C its bytes must have (the TAG's CRC with its place key
    /// taken out).
    want: Vec<u32>,
    /// The sectors hashed (see [`sector_needed`]); the others are left to the read.
    crc: u64,
}

impl SectorCrcs {
    /// Where the sectors are: their flash page and first sector.
    pub fn place(&self) -> (Ppa, u32) {
        (self.ppa, self.first)
    }

    /// Whether `data` (the sectors' stored bytes, as peeked) has the CRC of every
    /// sector the plan's mask names. Hashes; call it on any thread.
    pub fn matches(&self, data: &[u8]) -> bool {
        let ss = self.sector_size;
        ss > 0
            && data.len() == self.want.len() * ss
            && data
                .chunks_exact(ss)
                .zip(&self.want)
                .enumerate()
                .all(|(k, (s, &w))| {
                    !sector_needed(self.crc, k) || crate::format::sector_crc(s) == w
                })
    }
}

/// What the CRC part of one page's end-to-end check needs besides the stored bytes:
/// where the sectors are and each one's place key ([`Ftl::peek_crc_plan`]). Taken on the
/// thread that owns the FTL without touching the page's spare bytes; the TAGs are read
/// from them on the thread that hashes the page ([`CrcPlan::crcs`]), so a scan's first
/// touch of a fresh image's pages (the page faults of its mapping) falls on the
/// look-ahead threads, not on the one that steps the modeled reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrcPlan {
    lpid: u64,
    ppa: Ppa,
    first: u32,
    epoch: (u64, u64),
    sector_size: usize,
    /// Sectors in the read.
    n: u32,
    /// The block's P/E count now, for the sectors' place keys (see [`place_of`]).
    pe: u32,
    /// The sectors to hash (see [`sector_needed`]).
    crc: u64,
}

impl CrcPlan {
    /// The CRCs to compare, from the sectors' spare bytes `oob` as peeked with the plan
    /// (every TAG must be user data of its LBA, else `None`: the read checks it all).
    /// Reads only `oob`; call it on any thread.
    pub fn crcs(&self, oob: &[u8]) -> Option<SectorCrcs> {
        let n = self.n as usize;
        let ob = oob.len() / n.max(1);
        let mut want = Vec::with_capacity(n);
        for k in 0..n {
            let t = Tag::read(oob.get(k * ob..k * ob + TAG_BYTES)?)?;
            if t.kind != Kind::Data || t.id != self.lpid + k as u64 {
                return None;
            }
            let key = if t.bound {
                let (b, p) = (self.ppa.block.0, self.ppa.page);
                crate::format::place_key(b, p, self.first + k as u32, self.pe)
            } else {
                0
            };
            want.push(t.crc ^ key);
        }
        Some(SectorCrcs {
            ppa: self.ppa,
            first: self.first,
            epoch: self.epoch,
            sector_size: self.sector_size,
            want,
            crc: self.crc,
        })
    }
}

/// A read's CRC plan with the spare bytes of its sectors (their TAGs), as stored.
pub type PlannedCheck<'a> = (CrcPlan, &'a [u8]);

impl Ftl {
    /// The CRCs the read of `bytes` bytes from `lpid` would check, when those bytes are
    /// in place as [`Ftl::peek_in_place`] finds them, every sector's TAG is user data of
    /// its LBA and some sector is not known to match already (else `None`: the read
    /// checks what it must). Nothing is read or counted.
    pub fn peek_sector_crcs(&self, lpid: u64, bytes: usize) -> Option<SectorCrcs> {
        let (plan, oob) = self.peek_crc_plan(lpid, bytes, ALL_SECTORS)?;
        plan.crcs(oob)
    }

    /// [`Ftl::peek_sector_crcs`] in two parts: the plan (here, without reading the
    /// sectors' spare bytes) and those spare bytes as stored (for [`CrcPlan::crcs`] on
    /// the thread that hashes the page; pin them with the data), for the sectors mask
    /// `crc` names (as [`Ftl::read_ref_checking`] takes it). `None` when the bytes are
    /// not in place or every such sector is already known to match.
    pub fn peek_crc_plan(&self, lpid: u64, bytes: usize, crc: u64) -> Option<(CrcPlan, &[u8])> {
        self.peek_with_crc_plan(lpid, bytes, crc)?.1
    }

    /// [`Ftl::peek_in_place`] and [`Ftl::peek_crc_plan`] of the same bytes from one walk
    /// of the MAP (a scan pinning pages ahead asks for both of every page): `None` when
    /// the bytes are not in place; the plan `None` when every sector the mask names is
    /// already known to match.
    pub fn peek_with_crc_plan(
        &self,
        lpid: u64,
        bytes: usize,
        crc: u64,
    ) -> Option<(&[u8], Option<PlannedCheck<'_>>)> {
        let (a, data, oob) = self.peek_located(lpid, bytes)?;
        Some((data, self.crc_plan_at(lpid, a, data.len(), oob, crc)))
    }

    /// The plan of [`Ftl::peek_crc_plan`] for `len` bytes in place from the flash address
    /// `a` (as the MAP packs it), whose sectors' spare bytes are `oob`.
    fn crc_plan_at<'a>(
        &self,
        lpid: u64,
        a: u64,
        len: usize,
        oob: &'a [u8],
        crc: u64,
    ) -> Option<(CrcPlan, &'a [u8])> {
        let ss = self.geo.sector_size().max(1);
        let n = len.div_ceil(ss);
        let (b, p, s) = unpack(a);
        let ppa = Ppa::new(BlockId(b), p);
        if (0..n as u32)
            .all(|k| !sector_needed(crc, k as usize) || self.nand.sector_checked(ppa, s + k))
        {
            // Matched before and unchanged since: the read hashes nothing anyway.
            return None;
        }
        let pe = self
            .nand
            .block_info(BlockId(b))
            .map_or(u32::MAX, |i| i.pe_cycles);
        let plan = CrcPlan {
            lpid,
            ppa,
            first: s,
            epoch: self.content_epoch(),
            sector_size: ss,
            n: n as u32,
            pe,
            crc,
        };
        Some((plan, oob))
    }

    /// Record that the sectors of `crcs` matched their CRCs
    /// ([`SectorCrcs::matches`] returned true on their stored bytes), so a read checks
    /// only their TAGs. Ignored when anything was written, moved, erased or corrupted
    /// since `crcs` was taken (the bytes hashed may not be the ones stored now).
    pub fn note_crcs_matched(&mut self, crcs: &SectorCrcs) {
        if crcs.epoch != self.content_epoch() {
            return;
        }
        for k in 0..crcs.want.len() {
            if sector_needed(crcs.crc, k) {
                self.nand
                    .mark_sector_checked(crcs.ppa, crcs.first + k as u32);
            }
        }
    }
}
