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
use csd_nand::{BlockId, NandError, Ppa};
use csd_sim::SimTime;

/// Metadata pages (MAP, log, checkpoint, tables) get this many times the read retries
/// of user data: a controller keeps its own metadata with the strongest protection it has
/// (SLC mode, the deepest read-retry table), and losing it loses the drive.
pub(crate) const META_RETRY_FACTOR: u32 = 4;

/// Read with read retries: an uncorrectable read caused by bit errors is tried again up
/// to `retries` more times (each a new array read with its own bit errors); a torn or
/// failed page fails at once. `retried` counts the retries.
#[allow(clippy::too_many_arguments)]
pub(crate) fn read_with_retries(
    nand: &mut csd_nand::Nand,
    ppa: Ppa,
    first_sector: u32,
    data: &mut [u8],
    oob: &mut [u8],
    at: SimTime,
    retries: u32,
    retried: &mut u64,
) -> Result<csd_nand::ReadDone, NandError> {
    let mut attempt = 0;
    loop {
        match nand.read(ppa, first_sector, data, oob, at) {
            Err(NandError::Uncorrectable { bit_errors, .. })
                if bit_errors != u32::MAX && attempt < retries =>
            {
                attempt += 1;
                *retried += 1;
            }
            r => return r,
        }
    }
}

impl Ftl {
    /// Read one logical page (batch interface `readLPID`).
    pub fn read_lpid(
        &mut self,
        lpid: u64,
        buf: &mut [u8],
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        if buf.len() != self.sector_size {
            return Err(FtlError::BadLength {
                got: buf.len(),
                lba_size: self.sector_size,
            });
        }
        self.read(lpid, buf, at)
    }

    /// Read many logical pages at once into consecutive pages of `out`; the reads are
    /// issued together so they overlap across dies.
    pub fn read_lpids(
        &mut self,
        lpids: &[u64],
        out: &mut [u8],
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        if out.len() != lpids.len() * self.sector_size || lpids.is_empty() {
            return Err(FtlError::BadLength {
                got: out.len(),
                lba_size: self.sector_size,
            });
        }
        if let Some(&l) = lpids.iter().find(|&&l| l >= self.lbas) {
            return Err(FtlError::OutOfRange {
                lba: l,
                end: l + 1,
                capacity: self.lbas,
            });
        }
        let ss = self.sector_size;
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
        let n = self.sectors_of(buf.len())?;
        self.check_range(lba, n)?;
        let ss = self.sector_size;
        let mut done = at;
        let mut i = 0u64;
        while i < n {
            let l = lba + i;
            let (e, t) = self.map_get(l, at)?;
            let out = &mut buf[i as usize * ss..];
            match Loc::of(e) {
                Loc::Unmapped => {
                    out[..ss].fill(0);
                    i += 1;
                }
                Loc::Lost => {
                    self.stats.media_errors += 1;
                    return Err(FtlError::Uncorrectable { lba: l });
                }
                Loc::Buffered { buf: b, slot: k } => {
                    let data = self
                        .page_bufs
                        .get(b)
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
                    while i + run < n && s + (run as u32) < self.sectors_per_page {
                        let (next, _) = self.map_get(l + run, at)?;
                        if next != a + run {
                            break;
                        }
                        run += 1;
                    }
                    let r = self.read_verified(l, a, &mut out[..run as usize * ss], t)?;
                    done = done.max(r);
                    self.stats.user_reads += 1;
                    i += run;
                }
            }
        }
        self.stats.host_read_sectors += n;
        Ok(done)
    }

    /// Read the sectors at flash address `addr` (and the ones after it in the same page)
    /// holding LBAs `lba..`, with read retries and the TAG/CRC check of each sector.
    fn read_verified(
        &mut self,
        lba: u64,
        addr: u64,
        out: &mut [u8],
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        let (b, p, s) = unpack(addr);
        let ss = self.sector_size;
        let n = out.len() / ss;
        let ob = self.oob_per_sector;
        let oob = &mut self.oob_scratch[..n * ob];
        let mut attempt = 0;
        let r = loop {
            match self
                .nand
                .read_with_tags(Ppa::new(BlockId(b), p), s, out, oob, at)
            {
                Err(NandError::Uncorrectable { bit_errors, .. })
                    if bit_errors != u32::MAX && attempt < self.cfg.read_retries =>
                {
                    attempt += 1;
                    self.stats.read_retries += 1;
                }
                r => break r,
            }
        };
        match r {
            Ok(r) if r.erased => {
                // The MAP names a page the flash says was never programmed (a zeroed or
                // replaced region of the image): never return 0xFF as data.
                self.stats.integrity_errors += 1;
                self.stats.media_errors += 1;
                Err(FtlError::Uncorrectable { lba })
            }
            Ok(r) => {
                let ppa = Ppa::new(BlockId(b), p);
                for k in 0..n {
                    let tag = Tag::read(&oob[k * ob..k * ob + TAG_BYTES]);
                    let sector = s + k as u32;
                    // The CRC of a sector whose bytes have not changed since it last
                    // matched is not recomputed (`Nand::sector_checked`).
                    let ok = matches!(tag, Some(t) if t.kind == Kind::Data
                        && t.id == lba + k as u64
                        && (self.nand.sector_checked(ppa, sector)
                            || t.crc == crc32c::crc32c(&out[k * ss..(k + 1) * ss])));
                    if ok {
                        self.nand.mark_sector_checked(ppa, sector);
                    } else {
                        self.stats.integrity_errors += 1;
                        self.stats.media_errors += 1;
                        return Err(FtlError::Uncorrectable {
                            lba: lba + k as u64,
                        });
                    }
                }
                Ok(r.done)
            }
            Err(NandError::Uncorrectable { sector, .. }) => {
                self.stats.media_errors += 1;
                Err(FtlError::Uncorrectable {
                    lba: lba + sector.saturating_sub(s) as u64,
                })
            }
            Err(e) => Err(e.into()),
        }
    }
}
