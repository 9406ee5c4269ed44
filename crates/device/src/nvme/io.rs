//! Block I/O and the batch interface (batch-io §3): Read, Write, Trim and Flush over the
//! FTL block device, FlushBatch (a DESC block and the pages it describes, written
//! atomically, §3.1 and §3.2.2) and ReadLpids (`readLPID` of many logical pages).
//!
//! Choices made here: on a device with FLIXR tables registered, a plain write or batch
//! that lands on table pages goes through FLIXR (`Flixr::plain_write`), which marks the
//! pages' index entries so a later READ_IDX does not skip them on stale entries; every
//! other write goes straight to the block device.

use super::NvmeDevice;
use super::run::{Ran, failed};
use crate::block::CommandError;
use crate::command::{Payload, Status};
use csd_sim::SimTime;
use csd_sim::wire::BatchDesc;

impl NvmeDevice {
    /// Read `blocks` LBAs at `lba` (at most MDTS).
    pub(super) fn read(&mut self, lba: u64, blocks: u32, at: SimTime) -> Ran {
        self.check_transfer("Read", blocks as u64, at)?;
        let ls = self.dev.ftl().lba_size();
        let mut buf = self.read_buffer(blocks as usize * ls);
        let t = self.dev.read_lbas(lba, &mut buf, at).map_err(failed)?;
        Ok((Payload::Data(buf), t))
    }

    /// ReadPinned: a Read whose units that lie in one flash page stay in place, pinned,
    /// on an image opened read-only (whose stored bytes nothing changes while the host
    /// holds them); anywhere else, for a read that is not whole units, or when no unit
    /// lies so, a Read's data. `check`: the sectors of each unit left in place whose
    /// bytes the host reads (see the command).
    pub(super) fn read_pinned(
        &mut self,
        lba: u64,
        blocks: u32,
        unit: usize,
        check: u64,
        at: SimTime,
    ) -> Ran {
        let ls = self.dev.ftl().lba_size();
        let bytes = blocks as usize * ls;
        if self.dev.ftl().nand().access() != csd_nand::Access::ReadOnly
            || unit == 0
            || !bytes.is_multiple_of(unit)
        {
            return self.read(lba, blocks, at);
        }
        self.check_transfer("Read", blocks as u64, at)?;
        if unit.is_multiple_of(ls) {
            let lpu = (unit / ls) as u64;
            self.crc_ahead.before_read(
                self.dev.ftl_mut(),
                (lba, blocks as u64 / lpu),
                (unit, lpu),
                check,
            );
        }
        let mut buf = self.read_buffer(bytes);
        let (t, units) = self
            .dev
            .read_lbas_in_place(lba, &mut buf, unit, check, at)
            .map_err(failed)?;
        if units.is_empty() {
            return Ok((Payload::Data(buf), t));
        }
        let ftl = self.dev.ftl();
        let Some(pins) = ftl.pin_in_place(&units) else {
            // A unit the FTL read in place but whose bytes the array does not hold:
            // the array's own inconsistency, reported as a read's failure would be.
            return Err((
                Status::from(csd_ftl::FtlError::Corrupt(format!(
                    "Read at LBA {lba}: a page read in place holds no stored bytes"
                ))),
                t,
            ));
        };
        let in_place: Vec<usize> = units.iter().map(|u| u.unit).collect();
        Ok((
            Payload::Pinned(crate::command::PinnedRead::new(unit, buf, pins, &in_place)),
            t,
        ))
    }

    /// Write `data` at `lba`; zero or partial LBAs are the FTL's to refuse (Invalid
    /// Field), a transfer over MDTS is refused here.
    pub(super) fn write(&mut self, lba: u64, data: Vec<u8>, at: SimTime) -> Ran {
        let ls = self.dev.ftl().lba_size();
        let mdts = self.mdts();
        if data.len() > mdts as usize * ls {
            return Err((
                Status::InvalidField(format!(
                    "Write of {} bytes: a transfer is at most {mdts} blocks of {ls} bytes (MDTS)",
                    data.len()
                )),
                at,
            ));
        }
        let t = if self.flixr_writes(lba, data.len()) {
            let pages: Vec<(u64, &[u8])> = data
                .chunks(ls)
                .enumerate()
                .map(|(i, p)| (lba + i as u64, p))
                .collect();
            self.flixr
                .plain_write(&mut self.dev, &pages, data.len() as u64, at, |d, t| {
                    d.ftl_mut()
                        .write(lba, &data, t)
                        .map_err(|error| CommandError { error, done: t })
                })
                .map_err(failed)?
        } else {
            self.dev.write_lbas(lba, &data, at).map_err(failed)?
        };
        Ok((Payload::None, t))
    }

    /// Trim `blocks` LBAs at `lba`; FLIXR forgets the entries of the pages trimmed.
    pub(super) fn trim(&mut self, lba: u64, blocks: u64, at: SimTime) -> Ran {
        if blocks == 0 {
            return Err((Status::InvalidField("Trim of 0 blocks".into()), at));
        }
        let t = self.dev.trim_lbas(lba, blocks, at).map_err(failed)?;
        self.flixr.trimmed(&self.dev, lba, blocks);
        Ok((Payload::None, t))
    }

    /// Flush: make every acknowledged write durable, FLIXR entries staged over buffered
    /// data included (logged once their data is committed).
    pub(super) fn flush(&mut self, at: SimTime) -> Ran {
        let t = self.dev.flush(at).map_err(failed)?;
        let t = self
            .flixr
            .settle(&mut self.dev, t)
            .and_then(|t| self.dev.ftl_mut().flush(t))
            .map_err(|error| failed(CommandError { error, done: t }))?;
        Ok((Payload::None, t))
    }

    /// FlushBatch: a DESC block and the pages it describes, written atomically. A batch
    /// whose DESC is valid, on a device with FLIXR tables and extension bytes, goes
    /// through FLIXR so the entries of the pages it writes stay honest.
    pub(super) fn flush_batch(&mut self, buffer: Vec<u8>, at: SimTime) -> Ran {
        let ls = self.dev.ftl().lba_size();
        let desc = (self.flixr.active() && buffer.len() >= ls)
            .then(|| BatchDesc::decode(&buffer[..ls]).ok())
            .flatten()
            .filter(|d| {
                let pages = buffer.len() / ls;
                d.entries.iter().all(|&(l, off)| {
                    off >= 1 && (off as usize) < pages && l < self.dev.ftl().lbas()
                })
            });
        let t = match desc {
            Some(d) if self.dev.ftl().config().ext_bytes > 0 => {
                let pages: Vec<(u64, &[u8])> = d
                    .entries
                    .iter()
                    .map(|&(l, off)| (l, &buffer[off as usize * ls..(off as usize + 1) * ls]))
                    .collect();
                self.flixr
                    .plain_write(&mut self.dev, &pages, buffer.len() as u64, at, |d, t| {
                        d.ftl_mut()
                            .flush_batch(&buffer, t)
                            .map_err(|error| CommandError { error, done: t })
                    })
                    .map_err(failed)?
            }
            _ => self.dev.flush_batch(&buffer, at).map_err(failed)?,
        };
        Ok((Payload::None, t))
    }

    /// ReadLpids: read many logical pages at once (at most MDTS).
    pub(super) fn read_lpids(&mut self, lpids: Vec<u64>, at: SimTime) -> Ran {
        self.check_transfer("ReadLpids", lpids.len() as u64, at)?;
        let ls = self.dev.ftl().lba_size();
        let mut out = vec![0u8; lpids.len() * ls];
        let t = self.dev.read_lpids(&lpids, &mut out, at).map_err(failed)?;
        Ok((Payload::Data(out), t))
    }

    /// Must a plain write of `bytes` at `lba` look after FLIXR entries? Only on a device
    /// with extension bytes and registered tables, and only for a write the FTL will take
    /// (anything else it refuses unchanged).
    fn flixr_writes(&self, lba: u64, bytes: usize) -> bool {
        let ftl = self.dev.ftl();
        let ls = ftl.lba_size();
        self.flixr.active()
            && ftl.config().ext_bytes > 0
            && bytes > 0
            && bytes.is_multiple_of(ls)
            && lba
                .checked_add((bytes / ls) as u64)
                .is_some_and(|e| e <= ftl.lbas())
    }
}
