//! Controller resources: the DRAM bus, the host link (bandwidth plus a fixed per-command
//! overhead), the embedded cores and the host CPU, each a [`Resource`] of the timing
//! model, with the byte and cycle counters that energy is charged on.
//!
//! Modeling choice (scan paper eq. 2–4): DMA transfers are pipelined, so a transfer
//! between two buses takes the longer of the two. The DRAM bus is therefore charged once
//! per byte staged through it (flash→DRAM on reads, host→DRAM on writes); the opposite
//! DMA (DRAM→host, DRAM→flash) streams concurrently with the link or channel transfer
//! that bounds it. This makes the sequential-read bandwidth of the whole device
//! `min(channels × channel rate, DRAM, host link)`, the model of the scan paper.

use csd_sim::{DeviceConfig, EnergyCounters, Rate, Resource, ResourceClass, SimTime, Utilization};

/// The state a command's host-link and DRAM staging changes, saved so that the staging
/// of a command the FTL then refuses can be undone (a refused command costs nothing).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mark {
    dram: Resource,
    host_link: Resource,
    counters: EnergyCounters,
    commands: u64,
}

/// The controller's resources and counters.
#[derive(Debug, Clone)]
pub struct Controller {
    dram_rate: Rate,
    link_rate: Rate,
    link_overhead_ns: u64,
    cpu_hz: f64,
    host_hz: f64,
    dram: Resource,
    host_link: Resource,
    cores: Vec<Resource>,
    host_cpu: Vec<Resource>,
    counters: EnergyCounters,
    commands: u64,
}

impl Controller {
    /// The controller of device `cfg`.
    pub fn new(cfg: &DeviceConfig) -> Controller {
        Controller {
            dram_rate: cfg.dram.rate(),
            link_rate: cfg.host_link.rate(),
            link_overhead_ns: cfg.host_link.command_overhead_ns(),
            cpu_hz: cfg.cpu.clock_mhz * 1e6,
            host_hz: cfg.host.clock_mhz * 1e6,
            dram: Resource::new(),
            host_link: Resource::new(),
            cores: vec![Resource::new(); cfg.cpu.cores as usize],
            host_cpu: vec![Resource::new(); cfg.host.cores as usize],
            counters: EnergyCounters::default(),
            commands: 0,
        }
    }

    /// Stage `bytes` through DRAM, starting no earlier than `at`; returns the end.
    #[inline]
    pub fn dram(&mut self, at: SimTime, bytes: u64) -> SimTime {
        self.counters.dram_bytes += bytes;
        self.dram.reserve(at, self.dram_rate.transfer_ns(bytes)).1
    }

    /// Move `bytes` over the host link, starting no earlier than `at`. `new_command`
    /// adds the per-command overhead (once per host command). Returns the end.
    #[inline]
    pub fn host_link(&mut self, at: SimTime, bytes: u64, new_command: bool) -> SimTime {
        self.counters.host_link_bytes += bytes;
        let mut ns = self.link_rate.transfer_ns(bytes);
        if new_command {
            ns += self.link_overhead_ns;
            self.commands += 1;
        }
        self.host_link.reserve(at, ns).1
    }

    /// Run `cycles` embedded-CPU cycles on the core that frees up first; returns the end.
    pub fn cpu(&mut self, at: SimTime, cycles: u64) -> SimTime {
        self.counters.cpu_cycles += cycles;
        let ns = (cycles as f64 / self.cpu_hz * 1e9).ceil() as u64;
        let core = self
            .cores
            .iter_mut()
            .min_by_key(|c| c.free_at())
            .expect("at least one core");
        core.reserve(at, ns).1
    }

    /// Run `cycles` host-CPU cycles on the host core that frees up first; returns the end.
    pub fn host_cpu(&mut self, at: SimTime, cycles: u64) -> SimTime {
        self.counters.host_cpu_cycles += cycles;
        let ns = (cycles as f64 / self.host_hz * 1e9).ceil() as u64;
        let core = self
            .host_cpu
            .iter_mut()
            .min_by_key(|c| c.free_at())
            .expect("at least one host core");
        core.reserve(at, ns).1
    }

    /// Save the host-link and DRAM state (see [`Mark`]).
    pub(crate) fn mark(&self) -> Mark {
        Mark {
            dram: self.dram,
            host_link: self.host_link,
            counters: self.counters,
            commands: self.commands,
        }
    }

    /// Undo everything done to the host link and DRAM since `m` was taken.
    pub(crate) fn rewind(&mut self, m: Mark) {
        self.dram = m.dram;
        self.host_link = m.host_link;
        self.counters = m.counters;
        self.commands = m.commands;
    }

    /// Byte and cycle counters of the controller's work.
    pub fn counters(&self) -> EnergyCounters {
        self.counters
    }

    /// Host commands that crossed the link.
    pub fn commands(&self) -> u64 {
        self.commands
    }

    /// Utilization of DRAM, host link, embedded cores and host CPU over `window_ns`.
    pub fn utilization(&self, window_ns: u64) -> [Utilization; 4] {
        [
            Utilization::of(ResourceClass::Dram, [&self.dram], window_ns),
            Utilization::of(ResourceClass::HostLink, [&self.host_link], window_ns),
            Utilization::of(ResourceClass::EmbeddedCpu, &self.cores, window_ns),
            Utilization::of(ResourceClass::HostCpu, &self.host_cpu, window_ns),
        ]
    }

    /// The latest instant any controller resource is busy until.
    pub fn now(&self) -> SimTime {
        [&self.dram, &self.host_link]
            .into_iter()
            .chain(self.cores.iter())
            .chain(self.host_cpu.iter())
            .map(Resource::free_at)
            .max()
            .unwrap_or_default()
    }

    /// Forget counters and busy times (a new measurement window).
    pub fn reset_counters(&mut self) {
        self.counters = EnergyCounters::default();
        self.commands = 0;
        for r in [&mut self.dram, &mut self.host_link]
            .into_iter()
            .chain(self.cores.iter_mut())
            .chain(self.host_cpu.iter_mut())
        {
            r.reset_counters();
        }
    }

    /// After a power cycle every queue is empty; resources are free from `now`.
    pub fn power_cycle(&mut self, now: SimTime) {
        for r in [&mut self.dram, &mut self.host_link]
            .into_iter()
            .chain(self.cores.iter_mut())
            .chain(self.host_cpu.iter_mut())
        {
            r.power_cycle(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_overhead_once_per_command() {
        let cfg = DeviceConfig::preset("tiny").unwrap();
        let mut c = Controller::new(&cfg);
        let t1 = c.host_link(SimTime::ZERO, 4096, true);
        let xfer = cfg.host_link.rate().transfer_ns(4096);
        assert_eq!(t1.ns(), xfer + cfg.host_link.command_overhead_ns());
        let t2 = c.host_link(SimTime::ZERO, 4096, false);
        assert_eq!(t2.ns(), t1.ns() + xfer);
        assert_eq!(c.commands(), 1);
        assert_eq!(c.counters().host_link_bytes, 8192);
    }

    #[test]
    fn cpu_cycles_spread_over_cores() {
        let mut cfg = DeviceConfig::preset("tiny").unwrap();
        cfg.cpu.cores = 2;
        cfg.cpu.clock_mhz = 1000.0;
        let mut c = Controller::new(&cfg);
        assert_eq!(c.cpu(SimTime::ZERO, 1000).ns(), 1000);
        assert_eq!(c.cpu(SimTime::ZERO, 1000).ns(), 1000); // second core
        assert_eq!(c.cpu(SimTime::ZERO, 1000).ns(), 2000);
        assert_eq!(c.counters().cpu_cycles, 3000);
    }
}
