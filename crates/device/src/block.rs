//! The block device: the FTL's block and batch front ends behind the controller.
//!
//! This file is the one place where the controller path of an FTL command is modeled;
//! the workload engine (through [`IoTarget`]) and the NVMe command interface
//! (`nvme/`) both run their commands through the methods below. Per command, in order:
//! * read ([`BlockDevice::read_lbas`]): the FTL's flash reads, then the data is staged
//!   through DRAM and sent over the host link (with the per-command overhead);
//! * readLPID ([`BlockDevice::read_lpids`]): the LPID list (8 bytes each) crosses the
//!   host link with the command, then as a read;
//! * write ([`BlockDevice::write_lbas`]) and batch ([`BlockDevice::flush_batch`]): the
//!   data crosses the host link, is staged in DRAM, then the FTL programs it (and runs
//!   any GC the write triggers, in the foreground);
//! * trim and flush: the command crosses the host link (overhead only), then the FTL
//!   logs the trim or commits its buffers.
//!
//! A command the FTL refuses (LBA range, buffer length, malformed batch) has changed
//! nothing, because the FTL checks its arguments before acting; the controller then also
//! undoes the command's link and DRAM staging, so a refused command completes at its
//! submission instant and leaves every counter as it was. A read that hits an
//! uncorrectable error still moves its buffer to the host and is counted in
//! [`IoTarget::error_count`].
//!
//! LBAs are the FTL's sectors (4 KiB in every preset).

use crate::DeviceError;
use crate::controller::Controller;
use crate::workload::IoTarget;
use csd_ftl::{Ftl, FtlError};
use csd_sim::events::ResourceId;
use csd_sim::{DeviceConfig, EnergyCounters, SimTime, Utilization};
use thiserror::Error;

/// An FTL-managed block device.
pub struct BlockDevice {
    ftl: Ftl,
    ctrl: Controller,
    lba: u64,
    read_errors: u64,
}

/// A command that the FTL refused or failed, and when its completion is posted.
#[derive(Debug, Clone, PartialEq, Error)]
#[error("{error}")]
pub struct CommandError {
    /// What went wrong.
    pub error: FtlError,
    /// When the command completed: its submission instant if it was refused.
    pub done: SimTime,
}

/// Errors the FTL returns from its argument checks, before it changes anything.
fn is_refusal(e: &FtlError) -> bool {
    matches!(
        e,
        FtlError::OutOfRange { .. }
            | FtlError::BadLength { .. }
            | FtlError::BadBatch(_)
            | FtlError::Config(_)
    )
}

impl BlockDevice {
    /// A block device over `ftl`.
    pub fn new(ftl: Ftl) -> BlockDevice {
        let ctrl = Controller::new(ftl.nand().config());
        let lba = ftl.lba_size() as u64;
        BlockDevice {
            ftl,
            ctrl,
            lba,
            read_errors: 0,
        }
    }

    /// The FTL.
    pub fn ftl(&self) -> &Ftl {
        &self.ftl
    }

    /// Give the FTL back (for a clean shutdown or a simulated crash).
    pub fn into_ftl(self) -> Ftl {
        self.ftl
    }

    /// The FTL, mutably.
    pub fn ftl_mut(&mut self) -> &mut Ftl {
        &mut self.ftl
    }

    /// The controller.
    pub fn controller(&self) -> &Controller {
        &self.ctrl
    }

    /// Read whole LBAs from `lba` into `buf`, submitted at `at`; returns the completion.
    pub fn read_lbas(
        &mut self,
        lba: u64,
        buf: &mut [u8],
        at: SimTime,
    ) -> Result<SimTime, CommandError> {
        let r = self.ftl.read(lba, buf, at);
        self.deliver(r, buf.len() as u64, at, true)
    }

    /// [`BlockDevice::read_lbas`] leaving in place every `unit`-byte unit of `buf` that
    /// lies in one flash page ([`Ftl::read_units_in_place`]: those units of `buf` are
    /// not written and are named in the list returned; of each, only the sectors
    /// `check` names are hashed against their CRC, see the FTL's doc). Modeled as
    /// `read_lbas`.
    pub fn read_lbas_in_place(
        &mut self,
        lba: u64,
        buf: &mut [u8],
        unit: usize,
        check: u64,
        at: SimTime,
    ) -> Result<(SimTime, Vec<csd_ftl::InPlaceUnit>), CommandError> {
        let mut units = Vec::new();
        let r = self
            .ftl
            .read_units_in_place(lba, buf, unit, check, at)
            .map(|(t, u)| {
                units = u;
                t
            });
        let t = self.deliver(r, buf.len() as u64, at, true)?;
        Ok((t, units))
    }

    /// Read the logical pages `lpids` into consecutive LBA-sized pages of `out`
    /// (batch-io `readLPID`), submitted at `at`; returns the completion.
    pub fn read_lpids(
        &mut self,
        lpids: &[u64],
        out: &mut [u8],
        at: SimTime,
    ) -> Result<SimTime, CommandError> {
        // The LPID list travels host to device, the data device to host: the link
        // is reserved once, at delivery, for both (as a Read's command is), so that
        // the list of a later command does not queue behind the data of an earlier one
        // whose flash read is still under way (that serialized every ReadLpids).
        let mark = self.ctrl.mark();
        let list_bytes = 8 * lpids.len() as u64;
        match self.ftl.read_lpids(lpids, out, at) {
            Err(error) if is_refusal(&error) => {
                self.ctrl.rewind(mark);
                Err(CommandError { error, done: at })
            }
            r => {
                self.ctrl.settle();
                self.deliver(r, out.len() as u64 + list_bytes, at, true)
            }
        }
    }

    /// Write whole LBAs `data` at `lba`, submitted at `at`; returns the completion. Over a
    /// packet-switched link (`host_link.packet_bytes`) a write larger than a packet makes
    /// one write context per packet ([`Ftl::write_packets`]).
    pub fn write_lbas(
        &mut self,
        lba: u64,
        data: &[u8],
        at: SimTime,
    ) -> Result<SimTime, CommandError> {
        let pb = self.ctrl.packet_bytes();
        if pb == 0 || data.len() as u64 <= pb {
            return self.staged(data.len() as u64, at, |ftl, t| ftl.write(lba, data, t));
        }
        // A packet-switched transport (batch-io §8.2.1): the data arrives packet by
        // packet and each packet becomes its own write context.
        let mark = self.ctrl.mark();
        let arrivals = self.ctrl.packets_in(at, data.len() as u64);
        match self.ftl.write_packets(lba, data, pb as usize, &arrivals) {
            Ok(done) => {
                self.ctrl.settle();
                Ok(done)
            }
            Err(error) if is_refusal(&error) => {
                self.ctrl.rewind(mark);
                Err(CommandError { error, done: at })
            }
            Err(error) => {
                self.ctrl.settle();
                let done = arrivals.last().copied().unwrap_or(at);
                Err(CommandError { error, done })
            }
        }
    }

    /// Write a batch buffer (a DESC block and its pages, batch-io §3), submitted at `at`.
    pub fn flush_batch(&mut self, buf: &[u8], at: SimTime) -> Result<SimTime, CommandError> {
        self.staged(buf.len() as u64, at, |ftl, t| ftl.flush_batch(buf, t))
    }

    /// Unmap `n` LBAs from `lba`, submitted at `at`.
    pub fn trim_lbas(&mut self, lba: u64, n: u64, at: SimTime) -> Result<SimTime, CommandError> {
        self.staged(0, at, |ftl, t| ftl.trim(lba, n, t))
    }

    /// Make every buffered write durable, submitted at `at`.
    pub fn flush(&mut self, at: SimTime) -> Result<SimTime, CommandError> {
        self.staged(0, at, |ftl, t| ftl.flush(t))
    }

    /// The controller, mutably (the in-storage runtime reserves DRAM and cores).
    pub(crate) fn controller_mut(&mut self) -> &mut Controller {
        &mut self.ctrl
    }

    /// A command carrying `bytes` of parameters arrives over the host link (with the
    /// per-command overhead) and is staged in DRAM; returns when it is there.
    pub(crate) fn receive(&mut self, at: SimTime, bytes: u64) -> SimTime {
        let t = self.ctrl.host_link(at, bytes, true);
        if bytes > 0 {
            self.ctrl.dram(t, bytes)
        } else {
            t
        }
    }

    /// Send a `header`-byte status record followed by `payload` bytes already staged in
    /// DRAM (in-storage results), for a command that arrived through
    /// [`BlockDevice::receive`] (which carried its per-command costs): only the host link
    /// is booked. The payload crossed the DRAM bus when the program wrote it, and its DMA to
    /// the host streams concurrently with the link (scan paper eq. 3); the status record
    /// is written by the controller with the completion. Booking the DRAM bus here would
    /// make a GET wait behind the DRAM bookings that a running session has already made
    /// for pages completing in the future (its pinned pages are in flight up to a few
    /// hundred µs ahead): a GET for nothing took 0.48 ms at 16 channels.
    pub(crate) fn respond_with(&mut self, at: SimTime, header: u64, payload: u64) -> SimTime {
        self.ctrl.host_link(at, header + payload, false)
    }

    /// Send a `bytes`-long response built in controller DRAM (an admin data structure)
    /// to the host, for a command that arrived through [`BlockDevice::receive`] (which
    /// carried its per-command costs: one command, one set of them); returns the
    /// completion.
    pub(crate) fn respond(&mut self, at: SimTime, bytes: u64) -> SimTime {
        let staged = self.ctrl.dram(at, bytes);
        self.ctrl.host_link(staged, bytes, false)
    }

    /// Send a `bytes`-long reply built in controller DRAM for a command that carried no
    /// parameters and whose only link booking is this reply (its per-command costs are
    /// charged here, as a Read's are at delivery); returns the completion.
    pub(crate) fn reply(&mut self, at: SimTime, bytes: u64) -> SimTime {
        let staged = self.ctrl.dram(at, bytes);
        self.ctrl.host_link(staged, bytes, true)
    }

    /// Host → device path for controller work that drives the FTL itself (FLIXR): `bytes`
    /// cross the host link and are staged in DRAM, then `op` runs from that instant. A
    /// refusal undoes the staging and completes at `at`.
    pub(crate) fn staged_with(
        &mut self,
        bytes: u64,
        at: SimTime,
        op: impl FnOnce(&mut BlockDevice, SimTime) -> Result<SimTime, CommandError>,
    ) -> Result<SimTime, CommandError> {
        let mark = self.ctrl.mark();
        let mut t = self.ctrl.host_link(at, bytes, true);
        if bytes > 0 {
            t = self.ctrl.dram(t, bytes);
        }
        match op(self, t) {
            Ok(done) => {
                self.ctrl.settle();
                Ok(done)
            }
            Err(e) if is_refusal(&e.error) => {
                self.ctrl.rewind(mark);
                Err(CommandError {
                    error: e.error,
                    done: at,
                })
            }
            Err(e) => {
                self.ctrl.settle();
                Err(e)
            }
        }
    }

    /// Read `lpids` from `at` (the command already arrived) and send their data plus
    /// `extra` bytes of reply to the host (FLIXR's READ_IDX).
    pub(crate) fn read_for_host(
        &mut self,
        lpids: &[u64],
        out: &mut [u8],
        extra: u64,
        at: SimTime,
    ) -> Result<SimTime, CommandError> {
        // Consecutive LBAs are read together, so sectors of one flash page cost one
        // array read (as a Read of the run would).
        let ls = self.lba as usize;
        let mut r = Ok(at);
        if out.len() != lpids.len() * ls {
            r = Err(FtlError::BadLength {
                got: out.len(),
                lba_size: ls,
            });
        }
        let mut i = 0;
        while i < lpids.len() && r.is_ok() {
            let mut j = i + 1;
            while j < lpids.len() && lpids[j] == lpids[j - 1] + 1 {
                j += 1;
            }
            r = self
                .ftl
                .read(lpids[i], &mut out[i * ls..j * ls], at)
                .map(|t| t.max(r.clone().unwrap_or(at)));
            i = j;
        }
        // The command's cost on the link is charged here, once (see `read_lpids`).
        self.deliver(r, out.len() as u64 + extra, at, true)
    }

    /// Host → device path: `bytes` cross the host link and are staged in DRAM, then `op`
    /// runs in the FTL. A refusal undoes the staging.
    fn staged(
        &mut self,
        bytes: u64,
        at: SimTime,
        op: impl FnOnce(&mut Ftl, SimTime) -> Result<SimTime, FtlError>,
    ) -> Result<SimTime, CommandError> {
        let mark = self.ctrl.mark();
        let mut t = self.ctrl.host_link(at, bytes, true);
        if bytes > 0 {
            t = self.ctrl.dram(t, bytes);
        }
        match op(&mut self.ftl, t) {
            Ok(done) => {
                self.ctrl.settle();
                Ok(done)
            }
            Err(error) if is_refusal(&error) => {
                self.ctrl.rewind(mark);
                Err(CommandError { error, done: at })
            }
            Err(error) => {
                self.ctrl.settle();
                Err(CommandError { error, done: t })
            }
        }
    }

    /// Device → host path after the FTL's reads (result `r`, flash work from `at`): the
    /// `bytes` are staged in DRAM and sent over the host link.
    fn deliver(
        &mut self,
        r: Result<SimTime, FtlError>,
        bytes: u64,
        at: SimTime,
        new_command: bool,
    ) -> Result<SimTime, CommandError> {
        let (flash_done, failed) = match r {
            Ok(t) => (t, None),
            Err(e @ FtlError::Uncorrectable { .. }) => {
                self.read_errors += 1;
                (at, Some(e))
            }
            Err(error) => return Err(CommandError { error, done: at }),
        };
        let staged = self.ctrl.dram(flash_done, bytes);
        let done = self.ctrl.host_link(staged, bytes, new_command);
        match failed {
            None => Ok(done),
            Some(error) => Err(CommandError { error, done }),
        }
    }

    fn lba_of(&self, offset: u64) -> Result<u64, DeviceError> {
        if !offset.is_multiple_of(self.lba) {
            return Err(DeviceError::BadRequest(format!(
                "offset {offset} is not a multiple of the {}-byte LBA",
                self.lba
            )));
        }
        Ok(offset / self.lba)
    }
}

fn ftl_err(e: FtlError) -> DeviceError {
    match e {
        FtlError::Nand(n) => DeviceError::Nand(n),
        other => DeviceError::BadRequest(other.to_string()),
    }
}

/// A host read's outcome as the workload engine takes it: an uncorrectable read is
/// counted in `error_count` and the workload goes on.
fn workload_read(r: Result<SimTime, CommandError>) -> Result<SimTime, DeviceError> {
    match r {
        Ok(t) => Ok(t),
        Err(CommandError {
            error: FtlError::Uncorrectable { .. },
            done,
        }) => Ok(done),
        Err(e) => Err(ftl_err(e.error)),
    }
}

impl IoTarget for BlockDevice {
    fn config(&self) -> &DeviceConfig {
        self.ftl.nand().config()
    }

    fn capacity_bytes(&self) -> u64 {
        self.ftl.lbas() * self.lba
    }

    fn io_unit(&self, _write: bool) -> u64 {
        self.lba
    }

    fn read(&mut self, offset: u64, buf: &mut [u8], at: SimTime) -> Result<SimTime, DeviceError> {
        let lba = self.lba_of(offset)?;
        workload_read(self.read_lbas(lba, buf, at))
    }

    /// [`BlockDevice::read_lbas`] through [`Ftl::read_ref`]: a run of sectors of one
    /// flash page is checked and looked at where the flash keeps it (no copy); the flash
    /// reads, checks and counters are those of [`Ftl::read`], then the same delivery.
    fn read_look(
        &mut self,
        offset: u64,
        buf: &mut [u8],
        at: SimTime,
        look: &mut dyn FnMut(&[u8]),
    ) -> Result<SimTime, DeviceError> {
        let lba = self.lba_of(offset)?;
        let bytes = buf.len();
        let r = self.ftl.read_ref(lba, bytes, at).map(|(done, data)| {
            look(data);
            done
        });
        workload_read(self.deliver(r, bytes as u64, at, true))
    }

    fn write(&mut self, offset: u64, data: &[u8], at: SimTime) -> Result<SimTime, DeviceError> {
        let lba = self.lba_of(offset)?;
        self.write_lbas(lba, data, at).map_err(|e| ftl_err(e.error))
    }

    fn write_batch(
        &mut self,
        offsets: &[u64],
        data: &[u8],
        at: SimTime,
    ) -> Result<SimTime, DeviceError> {
        let ss = self.lba as usize;
        let mut pages = Vec::with_capacity(offsets.len());
        for (i, &o) in offsets.iter().enumerate() {
            let page = data.get(i * ss..(i + 1) * ss).ok_or_else(|| {
                DeviceError::BadRequest("batch data shorter than its offsets".into())
            })?;
            pages.push((self.lba_of(o)?, page));
        }
        let buf = csd_sim::wire::build_batch(&pages, ss).map_err(|e| ftl_err(e.into()))?;
        self.flush_batch(&buf, at).map_err(|e| ftl_err(e.error))
    }

    fn prefetch_read(&self, offset: u64, stage: crate::workload::PrefetchStage) {
        let lba = offset / self.lba;
        match stage {
            crate::workload::PrefetchStage::Map => self.ftl.prefetch_map(lba),
            // The workload engine reads through `read_look`: checked in place.
            crate::workload::PrefetchStage::Data => self.ftl.prefetch_flash(lba, false),
        }
    }

    fn now(&self) -> SimTime {
        self.ftl.nand().now().max(self.ctrl.now())
    }

    fn utilization(&self, window_ns: u64) -> Vec<Utilization> {
        let mut v = self.ftl.nand().utilization(window_ns).to_vec();
        v.extend(self.ctrl.utilization(window_ns));
        v
    }

    fn energy_counters(&self) -> EnergyCounters {
        let mut c = self.ftl.nand().energy_counters();
        c += self.ctrl.counters();
        c
    }

    fn error_count(&self) -> u64 {
        self.read_errors
    }

    fn reset_counters(&mut self) {
        self.ftl.nand_mut().reset_counters();
        self.ftl.reset_stats();
        self.ctrl.reset_counters();
        self.read_errors = 0;
    }

    fn event_core(&self) -> bool {
        true
    }

    fn reserve_now(&mut self, id: ResourceId, at: SimTime, ns: u64) -> Option<SimTime> {
        crate::controller::reserve_now(self.ftl.nand_mut(), &mut self.ctrl, id, at, ns)
    }

    fn settle_instants(&mut self, settle: &mut dyn FnMut(SimTime) -> SimTime) {
        self.ftl.settle_instants(settle);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{Rw, WorkloadSpec, run};
    use csd_ftl::FtlConfig;
    use csd_nand::Nand;

    fn dev() -> BlockDevice {
        let cfg = DeviceConfig::preset("tiny").unwrap();
        BlockDevice::new(
            Ftl::format(Nand::new_in_memory(cfg).unwrap(), FtlConfig::default()).unwrap(),
        )
    }

    #[test]
    fn random_writes_then_reads_run_through_the_ftl() {
        let mut d = dev();
        let w = WorkloadSpec {
            rw: Rw::RandWrite,
            bs: 4096,
            iodepth: 16,
            ops: Some(20_000),
            ..Default::default()
        };
        let r = run(&mut d, &w, &mut |_| {}).unwrap();
        assert_eq!(r.writes, 20_000);
        assert!(
            d.ftl().stats().gc_victims > 0,
            "the tiny device must garbage-collect"
        );
        assert!(
            d.ftl()
                .stats()
                .physical_write_amplification(d.ftl().sectors_per_page())
                > 1.0
        );
        let rd = WorkloadSpec {
            rw: Rw::RandRead,
            bs: 4096,
            iodepth: 16,
            ops: Some(5_000),
            ..Default::default()
        };
        let r = run(&mut d, &rd, &mut |_| {}).unwrap();
        assert_eq!(r.errors, 0);
        d.ftl_mut().check_invariants().unwrap();
    }

    /// A device of the tiny preset with a write-back cache and, with `faulty`, bit
    /// errors often beyond the ECC (uncorrectable reads and read retries).
    fn look_dev(faulty: bool) -> BlockDevice {
        let toml = DeviceConfig::preset_toml("tiny").unwrap();
        let o: Vec<String> = if faulty {
            ["faults.rber_fresh=0.0004", "faults.ecc_bits_per_sector=10"]
                .map(String::from)
                .to_vec()
        } else {
            Vec::new()
        };
        let cfg = DeviceConfig::from_toml_with_overrides(toml, &o).unwrap();
        let ftl = FtlConfig {
            write_cache: csd_ftl::WriteCache::WriteBack,
            ..FtlConfig::default()
        };
        BlockDevice::new(Ftl::format(Nand::new_in_memory(cfg).unwrap(), ftl).unwrap())
    }

    /// The faulty device of the property below does fail reads (else that half of it
    /// would compare nothing), and retries some.
    #[test]
    fn the_faulty_look_device_has_uncorrectable_reads() {
        let mut d = look_dev(true);
        let ss = d.lba as usize;
        let mut t = SimTime::ZERO;
        for lba in 0..64u64 {
            t = t.max(
                d.write(lba * ss as u64, &pattern(ss, lba as u8), t)
                    .unwrap(),
            );
        }
        t = d.flush(t).unwrap();
        let mut buf = vec![0u8; ss];
        for lba in 0..64u64 {
            d.read_look(lba * ss as u64, &mut buf, t, &mut |_| {})
                .unwrap();
        }
        assert!(d.error_count() > 0);
        assert!(d.error_count() < 64);
        assert!(d.ftl().stats().read_retries > 0);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
        /// `read_look` (checked in place, no copy) sees the bytes `read` copies and models
        /// exactly what it models: completions, errors, counters, energy. Reads of
        /// unwritten, buffered (write-back) and flash LBAs, runs within and across flash
        /// pages, repeated reads (the checked-sector memo) and uncorrectable reads.
        #[test]
        fn read_look_sees_and_models_what_read_does(
            faulty in proptest::bool::ANY,
            ops in proptest::collection::vec((proptest::bool::weighted(0.4), 0u64..96, 1usize..6), 1..160),
        ) {
            let (mut a, mut b) = (look_dev(faulty), look_dev(faulty));
            let ss = a.lba as usize;
            let mut t = SimTime::ZERO;
            for (i, &(write, lba, n)) in ops.iter().enumerate() {
                let off = lba * ss as u64;
                if write && lba % 16 == 15 {
                    // Commit the write-back buffers now and then, so reads meet flash.
                    let ra = a.flush(t).map_err(|e| e.to_string());
                    proptest::prop_assert_eq!(&ra, &b.flush(t).map_err(|e| e.to_string()));
                } else if write {
                    let data = pattern(n * ss, i as u8);
                    let ra = a.write(off, &data, t).map_err(|e| e.to_string());
                    let rb = b.write(off, &data, t).map_err(|e| e.to_string());
                    proptest::prop_assert_eq!(&ra, &rb);
                    if let Ok(done) = ra {
                        t = t.max(done);
                    }
                } else {
                    let mut copied = vec![0u8; n * ss];
                    let mut seen = Vec::new();
                    let ra = a.read(off, &mut copied, t).map_err(|e| e.to_string());
                    let rb = b
                        .read_look(off, &mut vec![0u8; n * ss], t, &mut |d| seen = d.to_vec())
                        .map_err(|e| e.to_string());
                    proptest::prop_assert_eq!(&ra, &rb, "read {} of {} LBAs", lba, n);
                    // An uncorrectable read delivers no bytes worth comparing.
                    if a.error_count() == b.error_count() && !seen.is_empty() {
                        proptest::prop_assert!(seen == copied, "bytes of LBA {} x{}", lba, n);
                    }
                }
                proptest::prop_assert_eq!(a.error_count(), b.error_count());
            }
            proptest::prop_assert_eq!(a.ftl().stats(), b.ftl().stats());
            proptest::prop_assert_eq!(a.energy_counters(), b.energy_counters());
            proptest::prop_assert_eq!(a.now(), b.now());
            proptest::prop_assert_eq!(
                format!("{:?}", a.utilization(1 << 30)),
                format!("{:?}", b.utilization(1 << 30))
            );
        }
    }

    #[test]
    fn misaligned_requests_are_refused() {
        let mut d = dev();
        let mut buf = vec![0u8; 4096];
        assert!(d.read(100, &mut buf, SimTime::ZERO).is_err());
        assert!(d.write(100, &buf, SimTime::ZERO).is_err());
        assert!(d.write(0, &buf[..100], SimTime::ZERO).is_err());
        assert_eq!(d.ftl().stats().host_write_sectors, 0);
    }

    fn packet_dev(packet_bytes: u32) -> BlockDevice {
        packet_dev_with(packet_bytes, false)
    }

    fn packet_dev_with(packet_bytes: u32, serial_contexts: bool) -> BlockDevice {
        let cfg = DeviceConfig::preset_toml("tiny").unwrap();
        let cfg = DeviceConfig::from_toml_with_overrides(
            cfg,
            &[
                format!("host_link.packet_bytes={packet_bytes}"),
                format!("ftl.serial_contexts={serial_contexts}"),
            ],
        )
        .unwrap();
        let ftl_cfg = FtlConfig {
            mdts_sectors: 256,
            ..FtlConfig::default()
        };
        BlockDevice::new(Ftl::format(Nand::new_in_memory(cfg).unwrap(), ftl_cfg).unwrap())
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    }

    #[test]
    fn a_packetized_write_makes_one_context_per_packet_and_reads_back() {
        // batch-io §8.2.1: 1 MiB over NVMe-oF/TCP is 17 packets, 17 contexts on the
        // block interface; without packets the same write is one context (MDTS 1 MiB).
        let data = pattern(1 << 20, 7);
        let mut commits = Vec::new();
        for pb in [0u32, 65_512] {
            let mut d = packet_dev(pb);
            let c0 = d.ftl().stats().commits;
            let done = d.write_lbas(8, &data, SimTime::ZERO).unwrap();
            assert!(done > SimTime::ZERO);
            commits.push(d.ftl().stats().commits - c0);
            let mut back = vec![0u8; data.len()];
            d.read_lbas(8, &mut back, done).unwrap();
            assert!(back == data, "packets {pb}: data read back differs");
            d.ftl_mut().check_invariants().unwrap();
        }
        assert_eq!(commits, vec![1, 17]);
        // A batch buffer of the same pages stays one context whatever the packets.
        let mut d = packet_dev(65_512);
        let pages: Vec<(u64, &[u8])> = data
            .chunks(4096)
            .enumerate()
            .map(|(i, p)| (i as u64, p))
            .collect();
        let buf = csd_sim::wire::build_batch(&pages, 4096).unwrap();
        let c0 = d.ftl().stats().commits;
        d.flush_batch(&buf, SimTime::ZERO).unwrap();
        assert_eq!(d.ftl().stats().commits - c0, 1);
    }

    #[test]
    fn packets_stream_behind_the_first_and_contexts_start_on_arrival() {
        let mut d = packet_dev(65_512);
        let t = d.ctrl.packets_in(SimTime::ZERO, 1 << 20);
        assert_eq!(t.len(), 17);
        assert!(t.windows(2).all(|w| w[0] <= w[1]), "{t:?}");
        // One command: the per-command costs once, the bytes once.
        assert_eq!(d.controller().commands(), 1);
        assert_eq!(d.controller().counters().host_link_bytes, 1 << 20);
    }

    #[test]
    fn serial_contexts_start_each_packet_after_the_one_before_commits() {
        // batch-io §8.2.1 (`ftl.serial_contexts`): the 17 contexts of a 1 MiB write run one
        // after another, so the write takes longer than with contexts that overlap, holds
        // the same data and makes the same commits; a one-context write is unchanged.
        let data = pattern(1 << 20, 3);
        let mut out = Vec::new();
        for (pb, serial) in [(65_512, false), (65_512, true), (0, false), (0, true)] {
            let mut d = packet_dev_with(pb, serial);
            let c0 = d.ftl().stats().commits;
            let done = d.write_lbas(8, &data, SimTime::ZERO).unwrap();
            let mut back = vec![0u8; data.len()];
            d.read_lbas(8, &mut back, done).unwrap();
            assert!(back == data, "packets {pb} serial {serial}: data differs");
            d.ftl_mut().check_invariants().unwrap();
            out.push((done, d.ftl().stats().commits - c0));
        }
        let (overlap, serial) = (out[0], out[1]);
        assert_eq!(overlap.1, serial.1, "the same 17 commits either way");
        // Each context waits for the one before: the write takes longer than when the 17
        // overlap on the tiny device's dies, and at least 17 flash programs back to back
        // (every commit programs a page).
        assert!(
            serial.0 > overlap.0,
            "serial {serial:?} against overlapping {overlap:?}"
        );
        let cfg = DeviceConfig::preset("tiny").unwrap();
        let t_prog = cfg
            .flash
            .t_prog_us
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min);
        assert!(
            serial.0.ns() as f64 >= 17.0 * t_prog * 1e3,
            "serial {serial:?}, tPROG {t_prog} us"
        );
        assert_eq!(out[2], out[3], "one context: nothing to serialize");
    }

    #[test]
    fn a_refused_packetized_write_books_nothing() {
        let mut d = packet_dev(65_512);
        let cap = d.ftl().lbas();
        let data = pattern(1 << 20, 1);
        let before = (d.controller().counters(), d.controller().commands());
        let link0: Vec<_> = d
            .controller()
            .utilization(1)
            .iter()
            .map(|u| u.busy_ns)
            .collect();
        let e = d.write_lbas(cap - 10, &data, SimTime::ZERO).unwrap_err();
        assert!(matches!(e.error, FtlError::OutOfRange { .. }), "{e:?}");
        assert_eq!(e.done, SimTime::ZERO);
        assert_eq!(
            (d.controller().counters(), d.controller().commands()),
            before
        );
        let link1: Vec<_> = d
            .controller()
            .utilization(1)
            .iter()
            .map(|u| u.busy_ns)
            .collect();
        assert_eq!(link0, link1);
        assert_eq!(d.ftl().stats().host_write_sectors, 0);
    }
}
