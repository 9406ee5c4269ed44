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

use csd_sim::events::{self, ResourceId};
use csd_sim::{DeviceConfig, EnergyCounters, Rate, Resource, ResourceClass, SimTime, Utilization};

/// The counters a command's staging changes, saved so that the staging of a command the
/// FTL then refuses can be undone (a refused command costs nothing). The bookings made
/// since the mark are kept in the controller's journal.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mark {
    counters: EnergyCounters,
    commands: u64,
}

/// Which controller resource a journaled booking was made on.
#[derive(Debug, Clone, Copy)]
enum Slot {
    Dram,
    Link,
    Core(usize),
    HostCpu(usize),
}

/// The controller's resources and counters.
#[derive(Debug, Clone)]
pub struct Controller {
    dram_rate: Rate,
    link_rate: Rate,
    link_overhead_ns: u64,
    latency_ns: u64,
    packet_bytes: u64,
    firmware_ns: u64,
    cpu_hz: f64,
    host_hz: f64,
    dram: Resource,
    host_link: Resource,
    cores: Vec<Resource>,
    host_cpu: Vec<Resource>,
    counters: EnergyCounters,
    commands: u64,
    /// Bookings made since [`Controller::mark`], while a command's staging may still be
    /// refused.
    journal: Option<Vec<(Slot, SimTime, SimTime)>>,
}

impl Controller {
    /// The controller of device `cfg`.
    pub fn new(cfg: &DeviceConfig) -> Controller {
        Controller {
            dram_rate: cfg.dram.rate(),
            link_rate: cfg.host_link.rate(),
            link_overhead_ns: cfg.host_link.command_overhead_ns(),
            latency_ns: cfg.host_link.command_latency_ns(),
            packet_bytes: u64::from(cfg.host_link.packet_bytes),
            firmware_ns: cfg.cpu.command_ns(),
            cpu_hz: cfg.cpu.clock_mhz * 1e6,
            host_hz: cfg.host.clock_mhz * 1e6,
            dram: Resource::with_id(ResourceId::new(ResourceClass::Dram, 0)),
            host_link: Resource::with_id(ResourceId::new(ResourceClass::HostLink, 0)),
            cores: (0..cfg.cpu.cores)
                .map(|i| Resource::with_id(ResourceId::new(ResourceClass::EmbeddedCpu, i)))
                .collect(),
            host_cpu: (0..cfg.host.cores)
                .map(|i| Resource::with_id(ResourceId::new(ResourceClass::HostCpu, i)))
                .collect(),
            counters: EnergyCounters::default(),
            commands: 0,
            journal: None,
        }
    }

    fn book(&mut self, slot: Slot, at: SimTime, ns: u64) -> SimTime {
        let (start, end) = match slot {
            // While the event core records, a pool's member is chosen when the core books
            // the stage (in arrival order), not from calendars it has not filled yet.
            Slot::Core(_) if events::recording() => {
                events::record_stage(ResourceId::pool(ResourceClass::EmbeddedCpu), at, ns)
            }
            Slot::HostCpu(_) if events::recording() => {
                events::record_stage(ResourceId::pool(ResourceClass::HostCpu), at, ns)
            }
            Slot::Dram => self.dram.reserve(at, ns),
            Slot::Link => self.host_link.reserve(at, ns),
            Slot::Core(i) => self.cores[i].reserve(at, ns),
            Slot::HostCpu(i) => self.host_cpu[i].reserve(at, ns),
        };
        if let Some(j) = self.journal.as_mut() {
            j.push((slot, start, end));
        }
        end
    }

    /// Stage `bytes` through DRAM, starting no earlier than `at`; returns the end.
    #[inline]
    pub fn dram(&mut self, at: SimTime, bytes: u64) -> SimTime {
        self.counters.dram_bytes += bytes;
        self.book(Slot::Dram, at, self.dram_rate.transfer_ns(bytes))
    }

    /// Move `bytes` over the host link, starting no earlier than `at`. `new_command`
    /// marks the booking that carries a host command itself (once per command): the
    /// firmware first spends `cpu.command_us` on an embedded core handling it (occupancy
    /// of that core), the link then also carries the command's protocol frames
    /// (`host_link.command_overhead_us`, occupancy of the link), and the command's fixed
    /// latency (`host_link.command_latency_us`: transport round trip, doorbell,
    /// interrupt) is added to the returned instant without occupying anything, so it
    /// overlaps with every other command in flight. Returns the end.
    #[inline]
    pub fn host_link(&mut self, at: SimTime, bytes: u64, new_command: bool) -> SimTime {
        self.counters.host_link_bytes += bytes;
        let mut ns = self.link_rate.transfer_ns(bytes);
        let mut t = at;
        if new_command {
            if self.firmware_ns > 0 {
                t = self.firmware(t);
            }
            ns += self.link_overhead_ns;
            self.commands += 1;
        }
        let end = self.book(Slot::Link, t, ns);
        if new_command {
            end.after(self.latency_ns)
        } else {
            end
        }
    }

    /// Move a write's `data_bytes` from the host as the transport's packets
    /// (`host_link.packet_bytes`), starting no earlier than `at`; returns each packet's
    /// arrival in controller DRAM. The first packet carries the command (and its
    /// per-command costs, as [`Controller::host_link`] books them); the others stream
    /// behind it on the link and reach the device one transport latency after they left.
    /// Call only when [`Controller::packet_bytes`] is not 0.
    pub fn packets_in(&mut self, at: SimTime, data_bytes: u64) -> Vec<SimTime> {
        let pb = self.packet_bytes.max(1);
        let mut arrivals = Vec::with_capacity(data_bytes.div_ceil(pb) as usize);
        let mut sent = 0;
        while sent < data_bytes {
            let len = pb.min(data_bytes - sent);
            let on_wire = if sent == 0 {
                self.host_link(at, len, true)
            } else {
                self.host_link(at, len, false).after(self.latency_ns)
            };
            arrivals.push(self.dram(on_wire, len));
            sent += len;
        }
        arrivals
    }

    /// Payload bytes per transport packet (`host_link.packet_bytes`; 0: no packets).
    pub fn packet_bytes(&self) -> u64 {
        self.packet_bytes
    }

    /// Run `cycles` embedded-CPU cycles on the core that can start them first; returns
    /// the end.
    pub fn cpu(&mut self, at: SimTime, cycles: u64) -> SimTime {
        self.counters.cpu_cycles += cycles;
        let ns = (cycles as f64 / self.cpu_hz * 1e9).ceil() as u64;
        self.core(at, ns)
    }

    /// The firmware's handling of one command on an embedded core (counted as the
    /// cycles it takes at the core clock).
    fn firmware(&mut self, at: SimTime) -> SimTime {
        self.counters.cpu_cycles += (self.firmware_ns as f64 * self.cpu_hz / 1e9).round() as u64;
        self.core(at, self.firmware_ns)
    }

    /// `ns` on the embedded core that can start it first.
    fn core(&mut self, at: SimTime, ns: u64) -> SimTime {
        // While the event core records, the pool's member is its choice (see `book`).
        let core = if events::recording() {
            0
        } else {
            csd_sim::resource::first_start(&self.cores, at, ns)
        };
        self.book(Slot::Core(core), at, ns)
    }

    /// Run `cycles` host-CPU cycles on the host core that can start them first; returns
    /// the end.
    pub fn host_cpu(&mut self, at: SimTime, cycles: u64) -> SimTime {
        self.counters.host_cpu_cycles += cycles;
        let ns = (cycles as f64 / self.host_hz * 1e9).ceil() as u64;
        let core = if events::recording() {
            0
        } else {
            csd_sim::resource::first_start(&self.host_cpu, at, ns)
        };
        self.book(Slot::HostCpu(core), at, ns)
    }

    /// Start journaling bookings so that they can be undone (see [`Mark`]).
    pub(crate) fn mark(&mut self) -> Mark {
        match self.journal.as_mut() {
            Some(j) => j.clear(),
            None => self.journal = Some(Vec::new()),
        }
        Mark {
            counters: self.counters,
            commands: self.commands,
        }
    }

    /// Keep everything booked since the mark (the command was accepted).
    pub(crate) fn settle(&mut self) {
        self.journal = None;
    }

    /// Undo everything booked on the controller since `m` was taken.
    pub(crate) fn rewind(&mut self, m: Mark) {
        for (slot, start, end) in self.journal.take().unwrap_or_default().into_iter().rev() {
            // A stage the event core has not booked yet is cancelled instead.
            if !start.is_final() && events::cancel(start) {
                continue;
            }
            let r = match slot {
                Slot::Dram => &mut self.dram,
                Slot::Link => &mut self.host_link,
                Slot::Core(i) => &mut self.cores[i],
                Slot::HostCpu(i) => &mut self.host_cpu[i],
            };
            r.unbook(start, end);
        }
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

    /// Book controller resource (or pool) `id` now, for the event core
    /// ([`csd_sim::events::Resources`]): a pool takes the member that can start first.
    /// `None` for an id that is not the controller's.
    pub fn reserve_now(&mut self, id: ResourceId, at: SimTime, ns: u64) -> Option<SimTime> {
        let r = match (id.class(), id.index()) {
            (ResourceClass::Dram, _) => &mut self.dram,
            (ResourceClass::HostLink, _) => &mut self.host_link,
            (ResourceClass::EmbeddedCpu, None) => {
                let i = csd_sim::resource::first_start(&self.cores, at, ns);
                &mut self.cores[i]
            }
            (ResourceClass::EmbeddedCpu, Some(i)) => self.cores.get_mut(i as usize)?,
            (ResourceClass::HostCpu, None) => {
                let i = csd_sim::resource::first_start(&self.host_cpu, at, ns);
                &mut self.host_cpu[i]
            }
            (ResourceClass::HostCpu, Some(i)) => self.host_cpu.get_mut(i as usize)?,
            (ResourceClass::Die | ResourceClass::Channel, _) => return None,
        };
        Some(r.reserve_now(at, ns).0)
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
        SimTime::latest(
            [&self.dram, &self.host_link]
                .into_iter()
                .chain(self.cores.iter())
                .chain(self.host_cpu.iter())
                .map(Resource::free_at),
        )
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
        self.journal = None;
        for r in [&mut self.dram, &mut self.host_link]
            .into_iter()
            .chain(self.cores.iter_mut())
            .chain(self.host_cpu.iter_mut())
        {
            r.power_cycle(now);
        }
    }
}

/// Book resource (or pool) `id` of a device made of `nand` and `ctrl` now, for the event
/// core: dies and channels on the array, the rest on the controller.
pub(crate) fn reserve_now(
    nand: &mut csd_nand::Nand,
    ctrl: &mut Controller,
    id: ResourceId,
    at: SimTime,
    ns: u64,
) -> Option<SimTime> {
    match id.class() {
        ResourceClass::Die | ResourceClass::Channel => nand.reserve_now(id, at, ns),
        _ => ctrl.reserve_now(id, at, ns),
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
