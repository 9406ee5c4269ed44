//! The raw (open-channel style) device: the flash array exposed page by page through the
//! controller, with no mapping and no garbage collection.
//!
//! Addressing: byte offsets map to *striped* physical pages: raw page `r` lives on die
//! `r % dies` (dies are numbered channel-first), at page `q % pages_per_block` of block
//! `q / pages_per_block` of that die, with `q = r / dies`. Sequential offsets therefore
//! walk across channels, then ways, the way a striping controller reads an array.
//!
//! Reads may be any whole number of sectors (RBLOCKs). Writes must be whole pages and
//! follow the NAND rules the way an open-channel host would: a write to raw page `r`
//! programs the next free page of die `r % dies` (each die keeps a write cursor, its
//! blocks used in turn, erased just before reuse, factory-bad blocks skipped, a block
//! whose program fails is abandoned). So the *die* of a write follows its offset, which is
//! what makes sequential writes stripe and random writes scatter, but a later read of the
//! same offset reads whatever the striped address holds; use the FTL's block device for
//! read-your-writes semantics.
//!
//! Per command, the controller path is modeled in order: a read reserves die (tR) →
//! channel → DRAM → host link; a write reserves host link → DRAM → channel → die (tPROG),
//! plus tBERS when a block is erased before reuse.

use crate::DeviceError;
use crate::controller::Controller;
use crate::workload::IoTarget;
use csd_nand::{DieId, Nand, NandError, Ppa};
use csd_sim::events::ResourceId;
use csd_sim::{DeviceConfig, EnergyCounters, SimTime, Utilization};

/// Counters of the raw device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RawStats {
    /// Reads that returned an error: uncorrectable, or of a factory-bad block.
    pub read_errors: u64,
    /// Of `read_errors`, the reads of factory-bad blocks (the raw array does not map
    /// around them; an FTL never addresses them).
    pub bad_block_reads: u64,
    /// Programs that failed (the page was retried elsewhere).
    pub program_failures: u64,
    /// Blocks erased before reuse.
    pub erases: u64,
    /// Erases that failed (the block was skipped).
    pub erase_failures: u64,
}

#[derive(Debug, Clone, Copy)]
struct Cursor {
    block: u32,
    page: u32,
}

/// The flash array behind a controller, addressed page by page.
pub struct RawDevice {
    nand: Nand,
    ctrl: Controller,
    dies: u32,
    ppb: u32,
    bpd: u32,
    page: u64,
    sector: u64,
    cursors: Vec<Cursor>,
    stats: RawStats,
}

impl RawDevice {
    /// A raw device over `nand`.
    pub fn new(nand: Nand) -> RawDevice {
        let g = *nand.geometry();
        let ctrl = Controller::new(nand.config());
        RawDevice {
            dies: g.dies(),
            ppb: g.pages_per_block,
            bpd: g.blocks_per_die(),
            page: g.page_size as u64,
            sector: g.sector_size as u64,
            cursors: vec![Cursor { block: 0, page: 0 }; g.dies() as usize],
            stats: RawStats::default(),
            ctrl,
            nand,
        }
    }

    /// The flash array.
    pub fn nand(&self) -> &Nand {
        &self.nand
    }

    /// The flash array, mutably (power cuts, inspection).
    pub fn nand_mut(&mut self) -> &mut Nand {
        &mut self.nand
    }

    /// The controller.
    pub fn controller(&self) -> &Controller {
        &self.ctrl
    }

    /// Raw-device counters.
    pub fn stats(&self) -> &RawStats {
        &self.stats
    }

    /// The striped physical page of raw page `r`.
    #[inline]
    pub fn striped(&self, r: u64) -> Ppa {
        let die = (r % self.dies as u64) as u32;
        let q = r / self.dies as u64;
        let blk = (q / self.ppb as u64) as u32;
        let pg = (q % self.ppb as u64) as u32;
        Ppa::new(self.nand.addr().block_of_die(DieId(die), blk), pg)
    }

    fn check(&self, what: &str, offset: u64, len: usize, unit: u64) -> Result<(), DeviceError> {
        if len == 0 || !offset.is_multiple_of(unit) || !(len as u64).is_multiple_of(unit) {
            return Err(DeviceError::BadRequest(format!(
                "raw {what} of {len} bytes at offset {offset}: offset and length must be non-zero multiples of {unit} bytes"
            )));
        }
        let cap = self.capacity_bytes();
        if offset.checked_add(len as u64).is_none_or(|end| end > cap) {
            return Err(DeviceError::BadRequest(format!(
                "raw {what} of {len} bytes at offset {offset} runs past the end of the device ({cap} bytes)"
            )));
        }
        Ok(())
    }

    /// Program one page on die `die` at its write cursor, erasing and skipping blocks as
    /// needed. Returns the completion instant.
    fn program_on_die(
        &mut self,
        die: u32,
        data: &[u8],
        at: SimTime,
    ) -> Result<SimTime, DeviceError> {
        let mut tries = 0u32;
        loop {
            tries += 1;
            if tries > 2 * self.bpd + 2 {
                return Err(DeviceError::BadRequest(format!(
                    "die {die} has no usable block left"
                )));
            }
            let c = self.cursors[die as usize];
            let blk = self.nand.addr().block_of_die(DieId(die), c.block);
            let advance_block = |cur: &mut Cursor, bpd: u32| {
                cur.block = (cur.block + 1) % bpd;
                cur.page = 0;
            };
            let info = self.nand.block_info(blk)?;
            if info.factory_bad {
                advance_block(&mut self.cursors[die as usize], self.bpd);
                continue;
            }
            let mut t = at;
            if c.page == 0 && info.next_page != 0 {
                self.stats.erases += 1;
                match self.nand.erase(blk, at) {
                    Ok(done) => t = done,
                    Err(NandError::EraseFailed { .. }) => {
                        self.stats.erase_failures += 1;
                        advance_block(&mut self.cursors[die as usize], self.bpd);
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            let result = self.nand.program(Ppa::new(blk, c.page), data, &[], t);
            let cur = &mut self.cursors[die as usize];
            match result {
                Ok(done) => {
                    cur.page += 1;
                    if cur.page == self.ppb {
                        advance_block(cur, self.bpd);
                    }
                    return Ok(done);
                }
                Err(NandError::ProgramFailed { .. }) => {
                    self.stats.program_failures += 1;
                    advance_block(cur, self.bpd);
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl IoTarget for RawDevice {
    fn config(&self) -> &DeviceConfig {
        self.nand.config()
    }

    fn capacity_bytes(&self) -> u64 {
        self.nand.geometry().raw_capacity()
    }

    fn io_unit(&self, write: bool) -> u64 {
        if write { self.page } else { self.sector }
    }

    fn read(&mut self, offset: u64, buf: &mut [u8], at: SimTime) -> Result<SimTime, DeviceError> {
        self.check("read", offset, buf.len(), self.sector)?;
        let mut end = at;
        let mut off = offset;
        let mut first = true;
        for chunk in chunks_by_page(buf, offset, self.page) {
            let r = off / self.page;
            let sector = ((off % self.page) / self.sector) as u32;
            off += chunk.len() as u64;
            let ppa = self.striped(r);
            let done = match self.nand.read(ppa, sector, chunk, &mut [], at) {
                Ok(d) => d.done,
                Err(NandError::Uncorrectable { done, .. }) => {
                    self.stats.read_errors += 1;
                    done
                }
                // A factory-bad block answers with an error status at once.
                Err(NandError::BadBlock { .. }) => {
                    self.stats.read_errors += 1;
                    self.stats.bad_block_reads += 1;
                    at
                }
                Err(e) => return Err(e.into()),
            };
            let n = chunk.len() as u64;
            let d = self.ctrl.dram(done, n);
            end = end.max(self.ctrl.host_link(d, n, first));
            first = false;
        }
        Ok(end)
    }

    fn write(&mut self, offset: u64, data: &[u8], at: SimTime) -> Result<SimTime, DeviceError> {
        self.check("write", offset, data.len(), self.page)?;
        let n = data.len() as u64;
        let link = self.ctrl.host_link(at, n, true);
        let staged = self.ctrl.dram(link, n);
        let mut end = staged;
        for (i, page) in data.chunks(self.page as usize).enumerate() {
            let r = offset / self.page + i as u64;
            let die = (r % self.dies as u64) as u32;
            end = end.max(self.program_on_die(die, page, staged)?);
        }
        Ok(end)
    }

    fn now(&self) -> SimTime {
        self.nand.now().max(self.ctrl.now())
    }

    fn utilization(&self, window_ns: u64) -> Vec<Utilization> {
        let mut v = self.nand.utilization(window_ns).to_vec();
        v.extend(self.ctrl.utilization(window_ns));
        v
    }

    fn energy_counters(&self) -> EnergyCounters {
        let mut c = self.nand.energy_counters();
        c += self.ctrl.counters();
        c
    }

    fn error_count(&self) -> u64 {
        self.stats.read_errors + self.stats.program_failures
    }

    fn bad_block_reads(&self) -> u64 {
        self.stats.bad_block_reads
    }

    fn reset_counters(&mut self) {
        self.nand.reset_counters();
        self.ctrl.reset_counters();
        self.stats = RawStats::default();
    }

    fn event_core(&self) -> bool {
        true
    }

    fn reserve_now(&mut self, id: ResourceId, at: SimTime, ns: u64) -> Option<SimTime> {
        crate::controller::reserve_now(&mut self.nand, &mut self.ctrl, id, at, ns)
    }
}

/// Split `buf` (which starts at byte `offset` of the device) at page boundaries.
fn chunks_by_page(buf: &mut [u8], offset: u64, page: u64) -> impl Iterator<Item = &mut [u8]> {
    let mut rest = buf;
    let mut off = offset;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let room = (page - off % page) as usize;
        let take = room.min(rest.len());
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(take);
        rest = tail;
        off += take as u64;
        Some(head)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev() -> RawDevice {
        RawDevice::new(Nand::new_in_memory(DeviceConfig::preset("tiny").unwrap()).unwrap())
    }

    #[test]
    fn striping_walks_channels_then_ways() {
        let d = dev();
        let a = d.nand().addr();
        let dies: Vec<u32> = (0..5).map(|r| a.die_of(d.striped(r).block).0).collect();
        assert_eq!(dies, vec![0, 1, 2, 3, 0]);
        assert_eq!(d.striped(4).page, 1);
    }

    #[test]
    fn bad_requests_are_refused_without_effect() {
        let mut d = dev();
        let cap = d.capacity_bytes();
        let mut buf = vec![0u8; 4096];
        assert!(d.read(1, &mut buf, SimTime::ZERO).is_err());
        assert!(d.read(cap, &mut buf, SimTime::ZERO).is_err());
        assert!(d.read(0, &mut [], SimTime::ZERO).is_err());
        assert!(
            d.write(0, &buf, SimTime::ZERO).is_err(),
            "raw writes are whole pages"
        );
        assert_eq!(d.nand().op_count(), 0);
        assert_eq!(d.controller().commands(), 0);
    }

    #[test]
    fn writes_follow_nand_rules_across_wraparound() {
        let mut d = dev();
        let g = *d.nand().geometry();
        let page = vec![7u8; g.page_size as usize];
        // Write the whole device twice over on die 0: blocks get erased before reuse.
        let per_die = g.blocks_per_die() as u64 * g.pages_per_block as u64;
        let mut t = SimTime::ZERO;
        for _ in 0..2 * per_die {
            t = d.write(0, &page, t).unwrap();
        }
        assert_eq!(d.stats().erases, g.blocks_per_die() as u64);
        assert_eq!(d.nand().stats().programs, 2 * per_die);
    }

    #[test]
    fn read_spans_pages_and_counts_link_once() {
        let mut d = dev();
        let g = *d.nand().geometry();
        let mut buf = vec![0u8; 3 * g.sector_size as usize];
        // Starts at sector 1 of page 0, runs into page 1 (another die).
        let t = d
            .read(g.sector_size as u64, &mut buf, SimTime::ZERO)
            .unwrap();
        assert!(t > SimTime::ZERO);
        assert_eq!(d.nand().stats().page_reads, 2);
        assert_eq!(d.controller().commands(), 1);
        assert!(buf.iter().all(|&b| b == 0xFF));
    }
}
