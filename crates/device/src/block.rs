//! The block device: the FTL's block front end behind the controller.
//!
//! Per command the controller path is modeled in order around the FTL: a read runs the
//! FTL's flash reads, then stages the data through DRAM and sends it over the host link;
//! a write crosses the host link, is staged in DRAM, then the FTL programs it (and runs
//! any GC the write triggers, in the foreground). LBAs are the FTL's sectors (4 KiB in
//! every preset).

use crate::DeviceError;
use crate::controller::Controller;
use crate::workload::IoTarget;
use csd_ftl::{Ftl, FtlError};
use csd_sim::{DeviceConfig, EnergyCounters, SimTime, Utilization};

/// An FTL-managed block device.
pub struct BlockDevice {
    ftl: Ftl,
    ctrl: Controller,
    lba: u64,
    read_errors: u64,
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

    /// The FTL, mutably.
    pub fn ftl_mut(&mut self) -> &mut Ftl {
        &mut self.ftl
    }

    /// The controller.
    pub fn controller(&self) -> &Controller {
        &self.ctrl
    }
}

fn ftl_err(e: FtlError) -> DeviceError {
    match e {
        FtlError::Nand(n) => DeviceError::Nand(n),
        other => DeviceError::BadRequest(other.to_string()),
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
        if !offset.is_multiple_of(self.lba) {
            return Err(DeviceError::BadRequest(format!(
                "offset {offset} is not a multiple of the {}-byte LBA",
                self.lba
            )));
        }
        let done = match self.ftl.read(offset / self.lba, buf, at) {
            Ok(t) => t,
            Err(FtlError::Uncorrectable { .. }) => {
                self.read_errors += 1;
                at
            }
            Err(e) => return Err(ftl_err(e)),
        };
        let n = buf.len() as u64;
        let staged = self.ctrl.dram(done, n);
        Ok(self.ctrl.host_link(staged, n, true))
    }

    fn write(&mut self, offset: u64, data: &[u8], at: SimTime) -> Result<SimTime, DeviceError> {
        if !offset.is_multiple_of(self.lba) {
            return Err(DeviceError::BadRequest(format!(
                "offset {offset} is not a multiple of the {}-byte LBA",
                self.lba
            )));
        }
        let n = data.len() as u64;
        let link = self.ctrl.host_link(at, n, true);
        let staged = self.ctrl.dram(link, n);
        self.ftl
            .write(offset / self.lba, data, staged)
            .map_err(ftl_err)
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
                .write_amplification(d.ftl().sectors_per_page())
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

    #[test]
    fn misaligned_requests_are_refused() {
        let mut d = dev();
        let mut buf = vec![0u8; 4096];
        assert!(d.read(100, &mut buf, SimTime::ZERO).is_err());
        assert!(d.write(100, &buf, SimTime::ZERO).is_err());
        assert!(d.write(0, &buf[..100], SimTime::ZERO).is_err());
        assert_eq!(d.ftl().stats().host_write_sectors, 0);
    }
}
