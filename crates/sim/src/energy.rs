//! Energy accounting: dynamic energy from counters kept while working (array operations,
//! bytes per bus, CPU cycles) plus static energy from idle power over the modeled run.
//! The smart-ssd paper (§4.3) reports device and host energy side by side; reports here
//! give joules per component and the device / host / total sums.

use crate::config::EnergyConfig;
use std::ops::AddAssign;

/// Work counters that energy is charged on. Every layer adds to the counters of the work
/// it does; nothing here is estimated after the fact.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EnergyCounters {
    /// Array page reads (tR).
    pub page_reads: u64,
    /// Array page programs.
    pub page_programs: u64,
    /// Block erases.
    pub block_erases: u64,
    /// Bytes moved over flash channels.
    pub channel_bytes: u64,
    /// Bytes moved over the controller DRAM bus.
    pub dram_bytes: u64,
    /// Bytes moved over the host link.
    pub host_link_bytes: u64,
    /// Embedded CPU cycles.
    pub cpu_cycles: u64,
    /// Host CPU cycles.
    pub host_cpu_cycles: u64,
}

impl AddAssign for EnergyCounters {
    fn add_assign(&mut self, o: Self) {
        self.page_reads += o.page_reads;
        self.page_programs += o.page_programs;
        self.block_erases += o.block_erases;
        self.channel_bytes += o.channel_bytes;
        self.dram_bytes += o.dram_bytes;
        self.host_link_bytes += o.host_link_bytes;
        self.cpu_cycles += o.cpu_cycles;
        self.host_cpu_cycles += o.host_cpu_cycles;
    }
}

/// Joules per component over one run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EnergyReport {
    /// Flash array: reads, programs, erases, and array idle power.
    pub nand_j: f64,
    /// Flash channel buses.
    pub channel_j: f64,
    /// Controller DRAM traffic.
    pub dram_j: f64,
    /// Embedded CPU cycles.
    pub embedded_cpu_j: f64,
    /// Controller idle power (cores, DRAM refresh, PHYs).
    pub controller_idle_j: f64,
    /// Host link traffic and idle power.
    pub host_link_j: f64,
    /// Host CPU cycles and host idle power.
    pub host_j: f64,
}

impl EnergyReport {
    /// Charge `c` with the costs of `cfg` over a modeled run of `duration_ns`.
    pub fn compute(cfg: &EnergyConfig, c: &EnergyCounters, duration_ns: u64) -> EnergyReport {
        let s = duration_ns as f64 / 1e9;
        let idle = |mw: f64| mw / 1e3 * s;
        EnergyReport {
            nand_j: (c.page_reads as f64 * cfg.read_page_uj
                + c.page_programs as f64 * cfg.program_page_uj
                + c.block_erases as f64 * cfg.erase_block_uj)
                / 1e6
                + idle(cfg.nand_idle_mw),
            channel_j: c.channel_bytes as f64 * cfg.channel_pj_per_byte / 1e12,
            dram_j: c.dram_bytes as f64 * cfg.dram_pj_per_byte / 1e12,
            embedded_cpu_j: c.cpu_cycles as f64 * cfg.cpu_nj_per_cycle / 1e9,
            controller_idle_j: idle(cfg.controller_idle_mw),
            host_link_j: c.host_link_bytes as f64 * cfg.host_link_pj_per_byte / 1e12
                + idle(cfg.host_link_idle_mw),
            host_j: c.host_cpu_cycles as f64 * cfg.host_cpu_nj_per_cycle / 1e9
                + idle(cfg.host_idle_mw),
        }
    }

    /// Energy spent inside the device (everything but the host).
    pub fn device_j(&self) -> f64 {
        self.nand_j
            + self.channel_j
            + self.dram_j
            + self.embedded_cpu_j
            + self.controller_idle_j
            + self.host_link_j
    }

    /// Energy spent by the host.
    pub fn host_total_j(&self) -> f64 {
        self.host_j
    }

    /// Device plus host.
    pub fn total_j(&self) -> f64 {
        self.device_j() + self.host_j
    }

    /// (snake_case key, joules) for every component, for tables and JSON.
    pub fn components(&self) -> [(&'static str, f64); 7] {
        [
            ("nand_j", self.nand_j),
            ("channel_j", self.channel_j),
            ("dram_j", self.dram_j),
            ("embedded_cpu_j", self.embedded_cpu_j),
            ("controller_idle_j", self.controller_idle_j),
            ("host_link_j", self.host_link_j),
            ("host_j", self.host_j),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_counters_and_idle() {
        let cfg = EnergyConfig {
            read_page_uj: 1.0,
            program_page_uj: 10.0,
            erase_block_uj: 100.0,
            channel_pj_per_byte: 1.0,
            dram_pj_per_byte: 2.0,
            host_link_pj_per_byte: 3.0,
            cpu_nj_per_cycle: 1.0,
            host_cpu_nj_per_cycle: 2.0,
            nand_idle_mw: 1000.0,
            controller_idle_mw: 0.0,
            host_link_idle_mw: 0.0,
            host_idle_mw: 0.0,
        };
        let c = EnergyCounters {
            page_reads: 1_000_000,
            page_programs: 0,
            block_erases: 0,
            channel_bytes: 1_000_000_000_000,
            dram_bytes: 0,
            host_link_bytes: 0,
            cpu_cycles: 1_000_000_000,
            host_cpu_cycles: 0,
        };
        let r = EnergyReport::compute(&cfg, &c, 2_000_000_000);
        assert!((r.nand_j - (1.0 + 2.0)).abs() < 1e-9);
        assert!((r.channel_j - 1.0).abs() < 1e-9);
        assert!((r.embedded_cpu_j - 1.0).abs() < 1e-9);
        assert!((r.total_j() - 5.0).abs() < 1e-9);
    }
}
