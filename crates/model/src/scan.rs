//! The analytic performance model of a table scan inside and outside an SSD:
//! the scan paper §4 (equations 1–9; docs/papers.md), with the device parameters of its
//! Table 1 taken from a [`DeviceConfig`] and the measured per-record costs of its Table 2.
//!
//! This is the paper's model, not the simulator's: it is kept apart so that the
//! simulation (which reserves dies, channels, DRAM, host link and CPUs operation by
//! operation) can be *checked against* it. Nothing here is used to produce a simulated
//! figure.
//!
//! # The equations as implemented
//!
//! Symbols: `N_ch` channels, `N_way` interleaved dies per channel, `t_R` array read time,
//! `L_page` page bytes, `B_ch` channel bytes/s, `B_dram` DRAM bytes/s, `B_host` host-link
//! bytes/s, `N` records of `L` bytes (`N·L` table bytes), `σ` selectivity, `f` the clock
//! at which Table 2's cycles are counted (see *cycles* below).
//!
//! ```text
//! (1) t_flash_read(P)   = ⌈P / L_page⌉ · (t_R / N_way + L_page / B_ch)     P = bytes on one channel
//! (2) t_FMC→DRAM        = max(t_flash_read(⌈N·L / N_ch⌉), t_DRAM_write(N·L))
//! (3) t_DRAM→Host(B)    = max(t_Host_write(B), t_DRAM_read(B))
//! (4) t_Host→DRAM(B)    = max(t_Host_read(B),  t_DRAM_write(B))
//!     t_DRAM_write(B) = t_DRAM_read(B) = B / B_dram,  t_Host_write(B) = t_Host_read(B) = B / B_host
//! (5) t_scan_cpu        = N · (t_comp + σ · t_result) / f
//! (6) cpu-ISP  t_scan   = t_FMC→DRAM  ⊕ t_scan_cpu ⊕ t_DRAM→Host(σ·N·L)
//! (7) t^S_FMC→DRAM      = max(t_flash_read(⌈N·L / N_ch⌉), t_DRAM_write(σ·N·L))
//! (8) hw-ISP   t^S_scan = t^S_FMC→DRAM ⊕ t_DRAM→Host(σ·N·L)
//! (9) IHP      t_IHP    = t_FMC→DRAM  ⊕ t_DRAM→Host(N·L) ⊕ N · t_IHP_scan_cpu
//! ```
//!
//! `⊕` is `max` under [`Composition::Pipelined`] (the default) and `+` under
//! [`Composition::Summed`] (the equations as printed).
//!
//! # Choices made (the paper leaves them open or is ambiguous)
//!
//! * **Pipelined, not summed.** Equations 6, 8 and 9 are printed as sums of "three
//!   sequential steps", but §4.2 runs those steps chunk by chunk ("the table is partially
//!   read … repeated until the entire table is examined") and §5's figures only hold for
//!   overlapped steps, where the slowest stage sets the rate:
//!   - §5.2.2: baseline ISP and IHP "remain virtually unchanged" as the NAND speed goes
//!     from 100 to 400 Mbps. Pipelined they are exactly constant; summed, IHP-ch8 rises
//!     by 29% and cpu-ch8 by 34%.
//!   - §5.2.4: hardware ISP "converges to IHP as the selectivity approaches 1 over all
//!     host interface types", and with PCIe "flash memory bandwidth turns out to be the
//!     performance bottleneck". Pipelined both hold exactly; summed, at σ = 1 with PCIe
//!     hw-ISP is still 28% faster than IHP and no single term bounds IHP.
//!   - Table 4 and §5.2.2's "441 MB/s < 743 MB/s, so the CPU cannot satisfy the
//!     computation requirement" reason with per-component rates, i.e. bottlenecks.
//!
//!   The summed form is kept ([`Composition::Summed`]) for comparison; it is an upper
//!   bound of the pipelined time.
//! * **Cycles are bus cycles (100 MHz for the paper's 200 MHz ARM9).** Table 1 gives
//!   "clock frequencies of processor/bus (MHz) 200/100"; §5.2.2 says the CPU needs "about
//!   29 bus cycles to process a 128-byte record … 441 MB/s". `t_comp + σ·t_result =
//!   24 + 0.013·403 = 29.24` cycles, and 128 B / (29 cycles / 100 MHz) = 441 MB/s; Table 4's
//!   embedded-CPU rate 2.34e5 records/s is 100 MHz / (24 + 403) cycles (σ = 1). At
//!   200 MHz neither figure holds. So [`ScanParams::cycle_hz`] is the CPU clock of the
//!   config divided by [`CPU_TO_BUS_CLOCK_RATIO`] = 2.
//! * **The DRAM side of equation 2 sees the whole table.** Equation 2 is written per
//!   channel's `P`, but all channels' DMA lands in the one DRAM, so its write term is
//!   `N·L / B_dram` (equation 7: `σ·N·L`). This is what makes §5.2.3 hold: 16 channels of
//!   200 MHz flash (2,776 MB/s) are limited by DDR2-667 (2,664 MB/s), and
//!   `t_FMC→DRAM` is the same at 200 and 400 Mbps.
//! * **DRAM read and write are independent**, as equations 2 and 3 take them. A
//!   simulation that puts both DMA directions on one DRAM bus is slower whenever DRAM
//!   is near the bottleneck (e.g. IHP over PCIe: `2·N·L` crosses the DRAM).
//! * **A pipelining FMC is an extension.** The scan paper's FMC sequences array reads
//!   serially (its presets set `channel.serial_read_sequencing`); for the other presets
//!   ([`ScanParams::fmc_pipelined`]) a channel's time per page is
//!   `max(L_page / B_ch, (t_R + L_page / B_ch) / N_way)`, which is what the simulation
//!   reaches there. [`ScanParams::seq_read_bytes_per_s`] is csd's one analytic bandwidth
//!   formula (`csd config list`, `csd device info`, the demo print it).
//! * **Equation 1 as printed**: whole pages (`⌈P / L_page⌉`), each charged the amortized
//!   `t_R / N_way` plus its bus transfer; `N_way` = ways × dies per chip (interleaved
//!   dies on a channel); `t_R` is the mean of the config's per-page-type read times.
//!   This gives §5.2.2's 743 MB/s for 8 ch × 100 Mbps (the simulator, which hides `t_R`
//!   entirely under interleaving, reaches 800 MB/s there; expect that 7% gap when
//!   checking the simulation against this model).
//! * **Even layout**: records are packed back to back and the table is spread evenly
//!   over the channels (§4.2); the busiest channel holds `⌈N·L / N_ch⌉` bytes.
//! * **Rates are exact** from the config (`MT/s × width / 8`, `MB/s × 10^6`), not the
//!   simulator's picosecond-rounded [`csd_sim::Rate`].
//! * **What the paper's model leaves out, so do we**: the host link's per-command
//!   overhead, more than one embedded core, more than one host core. `t_IHP_scan_cpu` is
//!   the measured time per record on the paper's 2.26 GHz Xeon, not scaled to the
//!   config's host clock.
//! * The default table is TPC-H lineitem at scale factor 1 (6,001,215 rows; §5.1 profiles
//!   Q6 at SF 1.0) of 128-byte records (§5.2.2).
//!
//! # Reproduced figures
//!
//! | paper | model | note |
//! |---|---|---|
//! | §5.2.2: flash stream ≥ 743 MB/s (8 ch × 100 Mbps) | 743.3 MB/s | eq. 1 |
//! | §5.2.3: 2,776 MB/s (16 ch × 200 Mbps) | 2,776.4 MB/s | eq. 1 |
//! | §5.2.2: "about 29 bus cycles … 441 MB/s" | 29.24 cycles, 437.8 MB/s | paper rounds to 29 cycles first (441.4) |
//! | Table 4: host CPU 7.06e7 rec/s | 7.04e7 | `1/0.0142 µs`; Table 2 rounds 0.01416 µs |
//! | Table 4: embedded CPU 2.34e5 rec/s | 2.342e5 | only at σ = 1 (3.42e6 at σ = 0.013) |
//! | Table 4: hardware ISP 3.83e7 rec/s | 3.831e7 | 16 ch × 400 Mbps, eq. 1 |
//! | Table 4: SATA 2 / SATA 3 / PCIe 2.93e6 / 5.86e6 / 6.25e7 | 2.930e6 / 5.859e6 / 6.250e7 | host-link rate of 128-B records; IHP's total is 2.93e6 / 5.86e6 / 3.83e7 (flash-bound on PCIe) |
//! | §5.2.2: hw-ISP "up to 13.9×" over baseline ISP and IHP | 13.07× over IHP, 11.20× over cpu-ISP (summed: 13.21×, 11.29×) | not reproducible, see below |
//! | Table 3: model cycles 297,282 (baseline) / 16,827 (hw) | — | absolute counts not derivable (below); `csd repro scan-paper` reproduces the table as this model against csd's simulation per configuration (all within 2.7%, paper ≤ 6.4%) |
//!
//! Where the paper's own numbers disagree with its equations and parameters:
//! * **13.9×** (§5.2.2, Figure 5): the largest hw/IHP ratio over the Figure 5 grid (16 ch
//!   × 400 Mbps, DDR2-667, SATA 3 Gbps, Table 2 costs) is 3.83e7 / 2.93e6 = 13.07 pipelined
//!   and 13.21 summed; hw/cpu-ISP is 11.2–11.3. No combination of the paper's stated
//!   parameters gives 13.9 (it would need e.g. a 300 MB/s SATA link with σ·N·L host
//!   traffic added to hw-ISP). The figure's data are not printed, so we keep 13.07 and
//!   test it within 6.5%.
//! * **Table 3** gives absolute cycle counts of a table whose size is not stated, so they
//!   cannot be derived. Their ratio (297,282 / 16,827 = 17.7) is also far from what
//!   Table 2's costs give for 128-byte records at 8 ch × 100 Mbps (cpu-ISP / hw-ISP =
//!   1.70 pipelined, 2.66 summed); fitting both counts with the summed model needs
//!   ≈12.7-byte records (≈9,600 records), which suggests the cycle-accurate run scanned
//!   something else than Table 2's 128-byte rows.
//! * 441 MB/s vs 29.24 cycles and 7.06e7 vs 0.0142 µs are rounding in the paper (within
//!   0.8% and 0.3%).

use csd_sim::DeviceConfig;
use serde::{Deserialize, Serialize};
use std::fmt;
use thiserror::Error;

/// Table 2: embedded-CPU cycles to examine one record (`t_comp`), counted at
/// [`ScanParams::cycle_hz`].
pub const T_COMP_CYCLES: f64 = 24.0;
/// Table 2: embedded-CPU cycles to write one matching record (or update an aggregate) to
/// DRAM (`t_result`), counted at [`ScanParams::cycle_hz`].
pub const T_RESULT_CYCLES: f64 = 403.0;
/// Table 2: host-CPU time to scan one record (`t_IHP_scan_cpu` = 0.0142 µs, measured on
/// the paper's 2.26 GHz Xeon), in seconds.
pub const T_IHP_SCAN_CPU_S: f64 = 0.0142e-6;
/// Table 2: scan selectivity of the profiled query (TPC-H Q6).
pub const DEFAULT_SELECTIVITY: f64 = 0.013;
/// §5.2.2: "a 128-byte record".
pub const DEFAULT_RECORD_BYTES: u64 = 128;
/// Rows of TPC-H lineitem at scale factor 1, the table profiled in §5.1.
pub const DEFAULT_RECORDS: u64 = 6_001_215;
/// Table 1: "Clock frequencies of processor/bus (MHz) 200/100"; Table 2's cycles are bus
/// cycles, so the cycle clock is the CPU clock divided by this ratio.
pub const CPU_TO_BUS_CLOCK_RATIO: f64 = 2.0;

/// Errors for parameters the model cannot evaluate. Every variant names the parameter
/// (and, for the CLI, the flag) to fix.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ModelError {
    /// Selectivity is a fraction of records.
    #[error("selectivity must be in [0, 1] (got {0}); use --selectivity")]
    Selectivity(f64),
    /// An empty table has no scan time or throughput.
    #[error("the table needs at least one record (got 0); use --records")]
    ZeroRecords,
    /// Records need at least one byte.
    #[error("the record length must be at least 1 byte (got 0); use --record-bytes")]
    ZeroRecordBytes,
    /// `records × record_bytes` does not fit in 64 bits.
    #[error("a table of {records} records of {record_bytes} B overflows a 64-bit byte count")]
    TableTooLarge {
        /// Records asked for.
        records: u64,
        /// Bytes per record asked for.
        record_bytes: u64,
    },
    /// A count (channels, ways, page bytes) is zero.
    #[error("{name} must be at least 1")]
    ZeroCount {
        /// The parameter.
        name: &'static str,
    },
    /// A rate or clock is zero, negative or not finite.
    #[error("{name} must be a positive finite number (got {value})")]
    NotPositive {
        /// The parameter.
        name: &'static str,
        /// Its value.
        value: f64,
    },
    /// A time or cost is negative or not finite.
    #[error("{name} must be a finite number >= 0 (got {value})")]
    Negative {
        /// The parameter.
        name: &'static str,
        /// Its value.
        value: f64,
    },
}

/// How the phases of equations 6, 8 and 9 combine (see the module documentation for
/// why pipelined is the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Composition {
    /// Phases overlap chunk by chunk; the slowest one sets the time (`max`).
    #[default]
    Pipelined,
    /// Phases run one after the other, as the equations are printed (`+`).
    Summed,
}

impl Composition {
    /// Parse `pipelined` or `summed`.
    pub fn parse(s: &str) -> Option<Composition> {
        match s {
            "pipelined" => Some(Composition::Pipelined),
            "summed" => Some(Composition::Summed),
            _ => None,
        }
    }

    /// The lowercase name (`pipelined` / `summed`).
    pub fn key(self) -> &'static str {
        match self {
            Composition::Pipelined => "pipelined",
            Composition::Summed => "summed",
        }
    }

    /// Combine phase times.
    fn combine(self, phases: &[f64]) -> f64 {
        match self {
            Composition::Pipelined => phases.iter().copied().fold(0.0, f64::max),
            Composition::Summed => phases.iter().sum(),
        }
    }
}

impl fmt::Display for Composition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// The three ways to scan a table that §4 models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// In-host processing: the whole table crosses the host link, the host CPU filters
    /// (§4.4, equation 9).
    Ihp,
    /// Baseline ISP: the whole table lands in controller DRAM and the embedded CPU
    /// filters it (§4.2, equation 6).
    CpuIsp,
    /// Hardware ISP: per-channel filter logic in each flash memory controller drops
    /// non-matching records before DRAM (§4.3, equations 7 and 8).
    HwIsp,
}

impl Strategy {
    /// All strategies, in the order the paper's figures list them.
    pub const ALL: [Strategy; 3] = [Strategy::Ihp, Strategy::CpuIsp, Strategy::HwIsp];

    /// snake_case key for JSON (`ihp`, `cpu_isp`, `hw_isp`).
    pub fn key(self) -> &'static str {
        match self {
            Strategy::Ihp => "ihp",
            Strategy::CpuIsp => "cpu_isp",
            Strategy::HwIsp => "hw_isp",
        }
    }

    /// The CLI name (`ihp`, `cpu-isp`, `hw-isp`), as `Display` prints it.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Ihp => "ihp",
            Strategy::CpuIsp => "cpu-isp",
            Strategy::HwIsp => "hw-isp",
        }
    }

    /// Parse a CLI name (`ihp`, `cpu-isp`, `hw-isp`).
    pub fn parse(s: &str) -> Option<Strategy> {
        Strategy::ALL.into_iter().find(|x| x.name() == s)
    }

    /// The equation that models it.
    pub fn equation(self) -> &'static str {
        match self {
            Strategy::Ihp => "eq. 9",
            Strategy::CpuIsp => "eq. 6",
            Strategy::HwIsp => "eq. 8",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The resource whose term is the largest, i.e. the one that bounds a pipelined scan
/// (and contributes most to a summed one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bottleneck {
    /// The flash array and channels (equation 1).
    FlashArray,
    /// Controller DRAM, on the FMC→DRAM write side or the DRAM→host read side.
    Dram,
    /// The embedded CPU (equation 5).
    EmbeddedCpu,
    /// The host link (the host side of equation 3).
    HostLink,
    /// The host CPU (equation 9's last term).
    HostCpu,
}

impl Bottleneck {
    /// snake_case key for JSON.
    pub fn key(self) -> &'static str {
        match self {
            Bottleneck::FlashArray => "flash_array",
            Bottleneck::Dram => "dram",
            Bottleneck::EmbeddedCpu => "embedded_cpu",
            Bottleneck::HostLink => "host_link",
            Bottleneck::HostCpu => "host_cpu",
        }
    }
}

impl fmt::Display for Bottleneck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Bottleneck::FlashArray => "flash array",
            Bottleneck::Dram => "DRAM",
            Bottleneck::EmbeddedCpu => "embedded CPU",
            Bottleneck::HostLink => "host link",
            Bottleneck::HostCpu => "host CPU",
        })
    }
}

/// Inputs of the model: Table 1's device parameters, Table 2's costs and the table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScanParams {
    /// `N_ch`: flash channels, each with its own FMC.
    pub channels: u32,
    /// `N_way`: interleaved dies per channel (ways × dies per chip).
    pub ways: u32,
    /// `t_R`: array read time of a page, seconds.
    pub t_r_s: f64,
    /// `L_page`: bytes per flash page.
    pub page_bytes: u64,
    /// Channel (NAND interface) rate, bytes/s.
    pub channel_bytes_per_s: f64,
    /// Controller DRAM rate, bytes/s.
    pub dram_bytes_per_s: f64,
    /// Host link rate, bytes/s.
    pub host_link_bytes_per_s: f64,
    /// Clock at which `t_comp` / `t_result` are counted, Hz (the embedded bus clock).
    pub cycle_hz: f64,
    /// `t_comp`: cycles to examine one record.
    pub t_comp_cycles: f64,
    /// `t_result`: cycles to write one matching record to DRAM.
    pub t_result_cycles: f64,
    /// `t_IHP_scan_cpu`: host-CPU seconds to scan one record.
    pub t_ihp_scan_cpu_s: f64,
    /// `L_rec`: bytes per record.
    pub record_bytes: u64,
    /// `N_rec`: records in the table.
    pub records: u64,
    /// `σ`: fraction of records that match.
    pub selectivity: f64,
    /// How the phases combine.
    pub composition: Composition,
    /// The FMC overlaps a die's array read with other dies' transfers on the bus (a
    /// pipelining FMC, `channel.serial_read_sequencing = false`): per page a channel is
    /// bound by `max(L_page / B_ch, (t_R + L_page / B_ch) / N_way)` instead of equation
    /// 1's `t_R / N_way + L_page / B_ch`. The scan paper's FMC (its presets) sequences
    /// reads serially; this extension lets the model follow the other presets.
    #[serde(default)]
    pub fmc_pipelined: bool,
}

impl ScanParams {
    /// Device parameters from `cfg` (channels, ways × dies per chip, mean tR, page size,
    /// channel, DRAM and host-link rates, embedded clock / [`CPU_TO_BUS_CLOCK_RATIO`]);
    /// Table 2's costs and the default table (TPC-H SF 1 lineitem, 128-byte records,
    /// σ = 0.013), pipelined.
    pub fn from_device(cfg: &DeviceConfig) -> ScanParams {
        let g = &cfg.geometry;
        let t_read = &cfg.flash.t_read_us;
        let t_r_us = t_read.iter().sum::<f64>() / t_read.len().max(1) as f64;
        ScanParams {
            channels: g.channels,
            ways: g.ways.saturating_mul(g.dies_per_chip),
            t_r_s: t_r_us / 1e6,
            page_bytes: g.page_size as u64,
            channel_bytes_per_s: cfg.channel.rate_mt_s * 1e6 * cfg.channel.bus_width_bits as f64
                / 8.0,
            dram_bytes_per_s: cfg.dram.rate_mt_s * 1e6 * cfg.dram.bus_width_bits as f64 / 8.0,
            host_link_bytes_per_s: cfg.host_link.bandwidth_mb_s * 1e6,
            cycle_hz: cfg.cpu.clock_mhz * 1e6 / CPU_TO_BUS_CLOCK_RATIO,
            t_comp_cycles: T_COMP_CYCLES,
            t_result_cycles: T_RESULT_CYCLES,
            t_ihp_scan_cpu_s: T_IHP_SCAN_CPU_S,
            record_bytes: DEFAULT_RECORD_BYTES,
            records: DEFAULT_RECORDS,
            selectivity: DEFAULT_SELECTIVITY,
            composition: Composition::Pipelined,
            fmc_pipelined: !cfg.channel.serial_read_sequencing,
        }
    }

    /// Check every parameter; the first problem found is returned.
    pub fn validate(&self) -> Result<(), ModelError> {
        if !(0.0..=1.0).contains(&self.selectivity) {
            return Err(ModelError::Selectivity(self.selectivity));
        }
        if self.records == 0 {
            return Err(ModelError::ZeroRecords);
        }
        if self.record_bytes == 0 {
            return Err(ModelError::ZeroRecordBytes);
        }
        for (name, v) in [
            ("channels", self.channels as u64),
            ("ways", self.ways as u64),
            ("page_bytes", self.page_bytes),
        ] {
            if v == 0 {
                return Err(ModelError::ZeroCount { name });
            }
        }
        for (name, value) in [
            ("channel_bytes_per_s", self.channel_bytes_per_s),
            ("dram_bytes_per_s", self.dram_bytes_per_s),
            ("host_link_bytes_per_s", self.host_link_bytes_per_s),
            ("cycle_hz", self.cycle_hz),
        ] {
            if !value.is_finite() || value <= 0.0 {
                return Err(ModelError::NotPositive { name, value });
            }
        }
        for (name, value) in [
            ("t_r_s", self.t_r_s),
            ("t_comp_cycles", self.t_comp_cycles),
            ("t_result_cycles", self.t_result_cycles),
            ("t_ihp_scan_cpu_s", self.t_ihp_scan_cpu_s),
        ] {
            if !value.is_finite() || value < 0.0 {
                return Err(ModelError::Negative { name, value });
            }
        }
        self.table_bytes().map(|_| ())
    }

    /// `N·L`: bytes in the table.
    pub fn table_bytes(&self) -> Result<u64, ModelError> {
        self.records
            .checked_mul(self.record_bytes)
            .ok_or(ModelError::TableTooLarge {
                records: self.records,
                record_bytes: self.record_bytes,
            })
    }

    /// `⌈N·L / N_ch⌉`: bytes on the busiest channel when the table is spread evenly.
    pub fn bytes_per_channel(&self) -> Result<u64, ModelError> {
        Ok(self.table_bytes()?.div_ceil(self.channels.max(1) as u64))
    }

    /// Time to move one page over a channel, `L_page / B_ch`, seconds.
    pub fn t_page_transfer_s(&self) -> f64 {
        self.page_bytes as f64 / self.channel_bytes_per_s
    }

    /// Equation 1: seconds to read `bytes_per_channel` bytes of one channel from its
    /// flash chips into the FMC, `⌈P / L_page⌉ · (t_R / N_way + L_page / B_ch)`. All
    /// channels work in parallel, so this is also the array's time for `N_ch` times as
    /// much data.
    pub fn t_flash_read(&self, bytes_per_channel: u64) -> f64 {
        let pages = bytes_per_channel.div_ceil(self.page_bytes.max(1)) as f64;
        pages * self.t_page_s()
    }

    /// A channel's time per page: equation 1's `t_R / N_way + L_page / B_ch`, or with a
    /// pipelining FMC ([`ScanParams::fmc_pipelined`]) the larger of the bus transfer and
    /// a die's read-plus-transfer shared by the `N_way` dies.
    pub fn t_page_s(&self) -> f64 {
        let ways = self.ways.max(1) as f64;
        let xfer = self.t_page_transfer_s();
        if self.fmc_pipelined {
            xfer.max((self.t_r_s + xfer) / ways)
        } else {
            self.t_r_s / ways + xfer
        }
    }

    /// Equation 1 as a rate: bytes per second the whole flash array delivers to the
    /// FMCs, `N_ch · L_page / (t_R / N_way + L_page / B_ch)` (see
    /// [`ScanParams::t_page_s`] for a pipelining FMC).
    pub fn flash_bytes_per_s(&self) -> f64 {
        self.channels as f64 * self.page_bytes as f64 / self.t_page_s()
    }

    /// The model's sustained sequential read to the host (equations 1–3 as rates): the
    /// flash array, the controller DRAM and the host link, whichever is slowest. This is
    /// the one analytic bandwidth formula in csd; the simulation's figure is what a run
    /// through its timing model measures.
    pub fn seq_read_bytes_per_s(&self) -> f64 {
        self.flash_bytes_per_s()
            .min(self.dram_bytes_per_s)
            .min(self.host_link_bytes_per_s)
    }

    /// `t_DRAM_write`: seconds to write `bytes` into controller DRAM.
    pub fn t_dram_write(&self, bytes: f64) -> f64 {
        bytes / self.dram_bytes_per_s
    }

    /// `t_DRAM_read`: seconds to read `bytes` from controller DRAM.
    pub fn t_dram_read(&self, bytes: f64) -> f64 {
        bytes / self.dram_bytes_per_s
    }

    /// `t_Host_write`: seconds to send `bytes` from the device to the host over the link.
    pub fn t_host_write(&self, bytes: f64) -> f64 {
        bytes / self.host_link_bytes_per_s
    }

    /// `t_Host_read`: seconds to receive `bytes` from the host over the link.
    pub fn t_host_read(&self, bytes: f64) -> f64 {
        bytes / self.host_link_bytes_per_s
    }

    /// Equations 2 and 7: FMC→DRAM DMA, `max(t_flash_read(P), t_DRAM_write(B))`, where
    /// `P = bytes_per_channel` is read on every channel in parallel and `B =
    /// bytes_to_dram` is what all channels together write into DRAM (the whole table
    /// for equation 2, `σ·N·L` for the hardware ISP's equation 7).
    pub fn t_fmc_to_dram(&self, bytes_per_channel: u64, bytes_to_dram: f64) -> f64 {
        self.t_flash_read(bytes_per_channel)
            .max(self.t_dram_write(bytes_to_dram))
    }

    /// Equation 3: DRAM→host DMA of `bytes`, `max(t_Host_write, t_DRAM_read)`.
    pub fn t_dram_to_host(&self, bytes: f64) -> f64 {
        self.t_host_write(bytes).max(self.t_dram_read(bytes))
    }

    /// Equation 4: host→DRAM DMA of `bytes`, `max(t_Host_read, t_DRAM_write)` (not
    /// used by a scan; here for completeness of §4.1).
    pub fn t_host_to_dram(&self, bytes: f64) -> f64 {
        self.t_host_read(bytes).max(self.t_dram_write(bytes))
    }

    /// Cycles the embedded CPU spends per record, `t_comp + σ·t_result`.
    pub fn cycles_per_record(&self) -> f64 {
        self.t_comp_cycles + self.selectivity * self.t_result_cycles
    }

    /// Equation 5: embedded-CPU seconds to scan the table, `N·(t_comp + σ·t_result) / f`.
    pub fn t_scan_cpu(&self) -> f64 {
        self.records as f64 * self.cycles_per_record() / self.cycle_hz
    }

    /// Host-CPU seconds to scan the table, `N · t_IHP_scan_cpu` (equation 9's last term).
    pub fn t_host_scan_cpu(&self) -> f64 {
        self.records as f64 * self.t_ihp_scan_cpu_s
    }

    /// The terms of one strategy's equation.
    pub fn breakdown(&self, strategy: Strategy) -> Result<Breakdown, ModelError> {
        self.validate()?;
        let table = self.table_bytes()? as f64;
        let per_channel = self.bytes_per_channel()?;
        let matched = self.selectivity * table;
        let (to_dram, to_host, cpu, host_cpu) = match strategy {
            Strategy::Ihp => (table, table, 0.0, self.t_host_scan_cpu()),
            Strategy::CpuIsp => (table, matched, self.t_scan_cpu(), 0.0),
            Strategy::HwIsp => (matched, matched, 0.0, 0.0),
        };
        Ok(Breakdown {
            flash_array_s: self.t_flash_read(per_channel),
            dram_write_s: self.t_dram_write(to_dram),
            flash_to_dram_s: self.t_fmc_to_dram(per_channel, to_dram),
            embedded_cpu_s: cpu,
            host_link_s: self.t_host_write(to_host),
            dram_read_s: self.t_dram_read(to_host),
            dram_to_host_s: self.t_dram_to_host(to_host),
            host_cpu_s: host_cpu,
        })
    }

    /// Equation 6: seconds for the baseline (embedded-CPU) ISP to scan the table.
    pub fn t_scan_baseline_isp(&self) -> Result<f64, ModelError> {
        Ok(self.breakdown(Strategy::CpuIsp)?.total_s(self.composition))
    }

    /// Equations 7 and 8: seconds for the hardware ISP to scan the table.
    pub fn t_scan_hw_isp(&self) -> Result<f64, ModelError> {
        Ok(self.breakdown(Strategy::HwIsp)?.total_s(self.composition))
    }

    /// Equation 9: seconds for in-host processing to scan the table.
    pub fn t_scan_ihp(&self) -> Result<f64, ModelError> {
        Ok(self.breakdown(Strategy::Ihp)?.total_s(self.composition))
    }
}

/// The terms of one strategy's equation, in seconds. The five phases of the paper are
/// `flash_array_s`, `flash_to_dram_s`, `embedded_cpu_s`, `dram_to_host_s` and
/// `host_cpu_s`; the other three are the sides of the two DMA `max`es.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Breakdown {
    /// Equation 1 for the busiest channel's share of the table.
    pub flash_array_s: f64,
    /// The DRAM write side of the FMC→DRAM DMA (whole table, or `σ·N·L` for hw-ISP).
    pub dram_write_s: f64,
    /// Equation 2 (7 for hw-ISP): `max(flash_array_s, dram_write_s)`.
    pub flash_to_dram_s: f64,
    /// Equation 5 (cpu-ISP only; zero otherwise).
    pub embedded_cpu_s: f64,
    /// The host-link side of the DRAM→host DMA.
    pub host_link_s: f64,
    /// The DRAM read side of the DRAM→host DMA.
    pub dram_read_s: f64,
    /// Equation 3: `max(host_link_s, dram_read_s)`.
    pub dram_to_host_s: f64,
    /// `N · t_IHP_scan_cpu` (IHP only; zero otherwise).
    pub host_cpu_s: f64,
}

impl Breakdown {
    /// The strategy's time: its four phases combined by `composition`.
    pub fn total_s(&self, composition: Composition) -> f64 {
        composition.combine(&[
            self.flash_to_dram_s,
            self.embedded_cpu_s,
            self.dram_to_host_s,
            self.host_cpu_s,
        ])
    }

    /// The resource with the largest term (first of equals in data-path order).
    pub fn bottleneck(&self) -> Bottleneck {
        let candidates = [
            (Bottleneck::FlashArray, self.flash_array_s),
            (Bottleneck::Dram, self.dram_write_s),
            (Bottleneck::EmbeddedCpu, self.embedded_cpu_s),
            (Bottleneck::HostLink, self.host_link_s),
            (Bottleneck::Dram, self.dram_read_s),
            (Bottleneck::HostCpu, self.host_cpu_s),
        ];
        let mut best = candidates[0];
        for c in &candidates[1..] {
            if c.1 > best.1 {
                best = *c;
            }
        }
        best.0
    }

    /// Every term with its snake_case key (unit suffix `_s`), in data-path order.
    pub fn terms(&self) -> [(&'static str, f64); 8] {
        [
            ("flash_array_s", self.flash_array_s),
            ("dram_write_s", self.dram_write_s),
            ("flash_to_dram_s", self.flash_to_dram_s),
            ("embedded_cpu_s", self.embedded_cpu_s),
            ("host_link_s", self.host_link_s),
            ("dram_read_s", self.dram_read_s),
            ("dram_to_host_s", self.dram_to_host_s),
            ("host_cpu_s", self.host_cpu_s),
        ]
    }
}

/// One strategy's modeled scan.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StrategyResult {
    /// Which strategy.
    pub strategy: Strategy,
    /// Modeled time to scan the whole table, seconds.
    pub time_s: f64,
    /// Records scanned per second.
    pub records_per_s: f64,
    /// Table bytes scanned per second, in MB/s (10^6 B).
    pub table_mb_per_s: f64,
    /// The equation's terms.
    pub breakdown: Breakdown,
    /// The resource with the largest term.
    pub bottleneck: Bottleneck,
}

/// The model evaluated for all three strategies.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScanModel {
    /// The inputs.
    pub params: ScanParams,
    /// `N·L`, bytes.
    pub table_bytes: u64,
    /// In-host processing (equation 9).
    pub ihp: StrategyResult,
    /// Baseline ISP on the embedded CPU (equation 6).
    pub cpu_isp: StrategyResult,
    /// Hardware ISP in the FMCs (equations 7 and 8).
    pub hw_isp: StrategyResult,
}

impl ScanModel {
    /// Evaluate equations 1–9 for `params`.
    pub fn evaluate(params: &ScanParams) -> Result<ScanModel, ModelError> {
        params.validate()?;
        let table_bytes = params.table_bytes()?;
        let one = |strategy: Strategy| -> Result<StrategyResult, ModelError> {
            let breakdown = params.breakdown(strategy)?;
            let time_s = breakdown.total_s(params.composition);
            Ok(StrategyResult {
                strategy,
                time_s,
                records_per_s: params.records as f64 / time_s,
                table_mb_per_s: table_bytes as f64 / time_s / 1e6,
                breakdown,
                bottleneck: breakdown.bottleneck(),
            })
        };
        Ok(ScanModel {
            params: params.clone(),
            table_bytes,
            ihp: one(Strategy::Ihp)?,
            cpu_isp: one(Strategy::CpuIsp)?,
            hw_isp: one(Strategy::HwIsp)?,
        })
    }

    /// The result of one strategy.
    pub fn get(&self, strategy: Strategy) -> &StrategyResult {
        match strategy {
            Strategy::Ihp => &self.ihp,
            Strategy::CpuIsp => &self.cpu_isp,
            Strategy::HwIsp => &self.hw_isp,
        }
    }

    /// All three results in [`Strategy::ALL`] order.
    pub fn results(&self) -> [&StrategyResult; 3] {
        [&self.ihp, &self.cpu_isp, &self.hw_isp]
    }

    /// How many times faster `a` scans than `b`.
    pub fn speedup(&self, a: Strategy, over: Strategy) -> f64 {
        self.get(over).time_s / self.get(a).time_s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `a` is within relative tolerance `tol` of `b`.
    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a / b - 1.0).abs() <= tol
    }

    fn preset_with(name: &str, sets: &[&str]) -> ScanParams {
        let text = DeviceConfig::preset_toml(name).unwrap();
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let cfg = DeviceConfig::from_toml_with_overrides(text, &sets)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        ScanParams::from_device(&cfg)
    }

    fn model(p: &ScanParams) -> ScanModel {
        ScanModel::evaluate(p).unwrap()
    }

    /// The Figure 5 / 6 grid: channels x NAND speed, DDR2-667, SATA 3 Gbps.
    fn figure5() -> Vec<(u32, u32, ScanModel)> {
        let mut out = Vec::new();
        for ch in [8, 16] {
            for mts in [100, 200, 400] {
                let p = preset_with(
                    &format!("isp-ch{ch}"),
                    &[&format!("channel.rate_mt_s={mts}")],
                );
                out.push((ch, mts, model(&p)));
            }
        }
        out
    }

    /// The Figure 7 / Table 4 device: 16 ch x 400 Mbps, DDR2-1333, host link of `mb_s`.
    fn figure7(mb_s: u32, selectivity: f64) -> ScanParams {
        let mut p = preset_with(
            "isp-ch16",
            &[
                "channel.rate_mt_s=400",
                "dram.rate_mt_s=1333",
                &format!("host_link.bandwidth_mb_s={mb_s}"),
            ],
        );
        p.selectivity = selectivity;
        p
    }

    #[test]
    fn from_device_maps_table1() {
        let p = preset_with("isp-ch8", &[]);
        assert_eq!((p.channels, p.ways, p.page_bytes), (8, 8, 8192));
        assert!(close(p.t_r_s, 50e-6, 1e-12));
        assert!(close(p.channel_bytes_per_s, 100e6, 1e-12));
        assert!(close(p.dram_bytes_per_s, 2668e6, 1e-12));
        assert!(close(p.host_link_bytes_per_s, 375e6, 1e-12));
        assert!(close(p.cycle_hz, 100e6, 1e-12), "200 MHz CPU, 100 MHz bus");
        assert_eq!((p.t_comp_cycles, p.t_result_cycles), (24.0, 403.0));
        assert_eq!((p.record_bytes, p.selectivity), (128, 0.013));
        assert_eq!(p.composition, Composition::Pipelined);
        p.validate().unwrap();
    }

    #[test]
    fn eq1_charges_whole_pages_with_amortized_tr() {
        let p = preset_with("isp-ch8", &[]);
        let page = 50e-6 / 8.0 + 8192.0 / 100e6; // 88.17 us
        assert_eq!(p.t_flash_read(0), 0.0);
        assert!(close(p.t_flash_read(1), page, 1e-12));
        assert!(close(p.t_flash_read(8192), page, 1e-12));
        assert!(close(p.t_flash_read(8193), 2.0 * page, 1e-12));
        assert!(close(p.t_flash_read(10 * 8192), 10.0 * page, 1e-12));
    }

    #[test]
    fn dma_equations_take_the_slower_side() {
        let p = preset_with("isp-ch16", &["channel.rate_mt_s=200"]);
        let mb = 1e6;
        // eq 3/4: the 375 MB/s link is slower than 2.67 GB/s DRAM.
        assert!(close(p.t_dram_to_host(mb), mb / 375e6, 1e-12));
        assert!(close(p.t_host_to_dram(mb), mb / 375e6, 1e-12));
        // eq 2: 16 ch x 200 Mbps (2,776 MB/s) out-runs DDR2-667, so DRAM decides.
        let table = 16 * 8192 * 100;
        let per_ch = table / 16;
        assert!(close(
            p.t_fmc_to_dram(per_ch, table as f64),
            table as f64 / 2668e6,
            1e-12
        ));
        // eq 7: with 1.3% of it reaching DRAM, the flash array decides.
        assert!(close(
            p.t_fmc_to_dram(per_ch, 0.013 * table as f64),
            p.t_flash_read(per_ch),
            1e-12
        ));
    }

    #[test]
    fn inbound_flash_stream_is_743_mb_s_and_2776_mb_s() {
        // §5.2.2: "inbound data stream from flash memory is at least 743 MB/s" (8 ch x 100).
        // The paper prints 3 digits: ±0.07%; the busiest channel's partial page adds <0.01%.
        let m = model(&preset_with("isp-ch8", &[]));
        let flash = m.table_bytes as f64 / m.hw_isp.breakdown.flash_array_s;
        assert!(close(flash, 743e6, 0.001), "{flash}");
        // hw-ISP streams at that rate: it is flash-bound.
        assert_eq!(m.hw_isp.bottleneck, Bottleneck::FlashArray);
        assert!(close(m.hw_isp.table_mb_per_s, 743.0, 0.001));
        // §5.2.3: "16 channels with 200 MHz flash chips amounts to 2,776 MB/s".
        let m = model(&preset_with("isp-ch16", &["channel.rate_mt_s=200"]));
        let flash = m.table_bytes as f64 / m.hw_isp.breakdown.flash_array_s;
        assert!(close(flash, 2776e6, 0.001), "{flash}");
    }

    #[test]
    fn embedded_cpu_needs_29_bus_cycles_per_record_and_manages_441_mb_s() {
        // §5.2.2: "about 29 bus cycles to process a 128-byte record on average, yielding a
        // data processing rate of 441 MB/s". 24 + 0.013 x 403 = 29.24; the paper rounds to 29
        // before dividing (128 B / 290 ns = 441.4 MB/s); unrounded it is 437.8 MB/s (0.8%).
        let p = preset_with("isp-ch8", &[]);
        assert!(close(p.cycles_per_record(), 29.0, 0.01));
        assert!(close(128.0 * p.cycle_hz / 29.0, 441e6, 0.001));
        let m = model(&p);
        let cpu = m.table_bytes as f64 / m.cpu_isp.breakdown.embedded_cpu_s;
        assert!(close(cpu, 441e6, 0.01), "{cpu}");
        // ... which is below the 743 MB/s inbound stream, so the CPU bounds cpu-ISP.
        assert!(cpu < m.table_bytes as f64 / m.cpu_isp.breakdown.flash_array_s);
        assert_eq!(m.cpu_isp.bottleneck, Bottleneck::EmbeddedCpu);
        assert!(close(m.cpu_isp.table_mb_per_s * 1e6, cpu, 1e-12));
    }

    #[test]
    fn table4_component_rates() {
        // Table 4 (16 ch x 400 Mbps, DDR2-1333), records/s of each component alone.
        // Printed with 3 digits (half a unit <= 0.25%); Table 2's 0.0142 us is itself a
        // 3-digit rounding of 1 / 7.06e7 = 0.01416 us (0.3%), hence 0.4%.
        let tol = 0.004;
        let m = model(&figure7(375, 1.0));
        let n = m.params.records as f64;
        let b = |s: Strategy| m.get(s).breakdown;
        assert!(close(n / b(Strategy::Ihp).host_cpu_s, 7.06e7, tol));
        // The embedded CPU's 2.34e5 is 100 MHz / (24 + 403) cycles: selectivity 1.
        assert!(close(n / b(Strategy::CpuIsp).embedded_cpu_s, 2.34e5, tol));
        assert!(close(n / b(Strategy::HwIsp).flash_array_s, 3.83e7, tol));
        for (mb_s, rate) in [(375, 2.93e6), (750, 5.86e6), (8000, 6.25e7)] {
            let m = model(&figure7(mb_s, 1.0));
            let link = m.params.records as f64 / m.ihp.breakdown.host_link_s;
            assert!(close(link, rate, tol), "{mb_s}: {link}");
        }
    }

    #[test]
    fn table4_ihp_throughput_per_host_link() {
        // §5.2.4: IHP is host-link bound on SATA (2.93e6 / 5.86e6 records/s) and, on PCIe
        // (whose own rate is 6.25e7), "flash memory bandwidth turns out to be the
        // performance bottleneck" (3.83e7).
        for (mb_s, rate, neck) in [
            (375, 2.93e6, Bottleneck::HostLink),
            (750, 5.86e6, Bottleneck::HostLink),
            (8000, 3.83e7, Bottleneck::FlashArray),
        ] {
            let m = model(&figure7(mb_s, DEFAULT_SELECTIVITY));
            assert!(close(m.ihp.records_per_s, rate, 0.004), "{mb_s}");
            assert_eq!(m.ihp.bottleneck, neck, "{mb_s}");
            // The host CPU (7.06e7) never bounds the scan.
            assert!(m.ihp.breakdown.host_cpu_s < m.ihp.time_s);
        }
    }

    #[test]
    fn hw_isp_converges_to_ihp_as_selectivity_approaches_1() {
        // §5.2.4 / Figure 7: "the performance of the hardware ISP converges to IHP as the
        // selectivity approaches 1 over all host interface types." Exact when pipelined;
        // the printed sums leave a gap (the host CPU term), widest on PCIe.
        for mb_s in [375, 750, 8000] {
            let mut p = figure7(mb_s, 1.0);
            let m = model(&p);
            assert!(close(m.hw_isp.time_s, m.ihp.time_s, 1e-12), "{mb_s}");
            // At low selectivity hw-ISP is faster, except on PCIe where the flash array
            // bounds both ends of the range.
            let low = model(&figure7(mb_s, DEFAULT_SELECTIVITY));
            if mb_s == 8000 {
                assert!(close(low.hw_isp.time_s, m.hw_isp.time_s, 1e-12));
            } else {
                assert!(low.hw_isp.time_s < m.hw_isp.time_s / 5.0);
            }
            p.composition = Composition::Summed;
            let s = model(&p);
            assert!(s.ihp.time_s > s.hw_isp.time_s);
            if mb_s == 8000 {
                let gap = s.speedup(Strategy::HwIsp, Strategy::Ihp);
                assert!(close(gap, 1.283, 0.002), "{gap}");
            }
        }
    }

    #[test]
    fn figure5_cpu_isp_and_ihp_do_not_change_with_nand_speed() {
        // §5.2.2: "the throughput of hardware ISP scales linearly with the NAND flash speed
        // while the baseline ISP and IHP remain virtually unchanged. In case of IHP, the
        // host interface appears to be the performance bottleneck."
        let grid = figure5();
        for ch in [8, 16] {
            let row: Vec<&ScanModel> = grid
                .iter()
                .filter(|(c, _, _)| *c == ch)
                .map(|(_, _, m)| m)
                .collect();
            for m in &row {
                assert!(close(m.ihp.time_s, row[0].ihp.time_s, 1e-12));
                assert!(close(m.cpu_isp.time_s, row[0].cpu_isp.time_s, 1e-12));
                assert_eq!(m.ihp.bottleneck, Bottleneck::HostLink);
                assert_eq!(m.cpu_isp.bottleneck, Bottleneck::EmbeddedCpu);
                assert_eq!(m.hw_isp.bottleneck, Bottleneck::FlashArray);
            }
            // hw: 4x the interface speed gives 3.3x (ch8) / 3.7x ... the amortized tR/N_way
            // keeps it from exactly 4x.
            let gain = row[2].hw_isp.records_per_s / row[0].hw_isp.records_per_s;
            assert!((3.2..4.0).contains(&gain), "ch{ch}: {gain}");
        }
        // IHP: 375 MB/s / 128 B; cpu-ISP: 100 MHz / 29.24 cycles.
        assert!(close(grid[0].2.ihp.records_per_s, 2.93e6, 0.001));
        assert!(close(grid[0].2.cpu_isp.records_per_s, 3.42e6, 0.001));
    }

    #[test]
    fn figure5_hw_isp_speedup_is_13_not_13_9() {
        // §5.2.2: "the throughput of the hardware IHP [sic] is up to 13.9 times higher over
        // both the baseline ISP and IHP." The model's largest ratio is at 16 ch x 400 Mbps:
        // 3.83e7 / 2.93e6 = 13.07 over IHP and 11.20 over cpu-ISP (summed: 13.21 / 11.29).
        // No reading of the paper's parameters yields 13.9 (see the module doc); the
        // 6.5% tolerance covers the gap and no more.
        let grid = figure5();
        let (ch, mts, best) = grid
            .iter()
            .max_by(|a, b| {
                let r = |m: &ScanModel| m.speedup(Strategy::HwIsp, Strategy::Ihp);
                r(&a.2).total_cmp(&r(&b.2))
            })
            .unwrap();
        assert_eq!((*ch, *mts), (16, 400));
        let over_ihp = best.speedup(Strategy::HwIsp, Strategy::Ihp);
        let over_cpu = best.speedup(Strategy::HwIsp, Strategy::CpuIsp);
        assert!(close(over_ihp, 13.9, 0.065), "{over_ihp}");
        assert!(close(over_ihp, 13.07, 0.002), "{over_ihp}");
        assert!(close(over_cpu, 11.20, 0.002), "{over_cpu}");
        let mut p = best.params.clone();
        p.composition = Composition::Summed;
        let s = model(&p);
        assert!(close(
            s.speedup(Strategy::HwIsp, Strategy::Ihp),
            13.21,
            0.002
        ));
        assert!(close(
            s.speedup(Strategy::HwIsp, Strategy::CpuIsp),
            11.29,
            0.002
        ));
    }

    #[test]
    fn figure6_fmc_to_dram_is_dram_bound_at_16_channels_above_100_mbps() {
        // §5.2.3: 2,776 MB/s of flash exceeds DDR2-667's 2,664 MB/s, "which explains why
        // the time for DRAM-FMC transfer remains the same in the underlying 16 channels with
        // both 200 Mbps and 400 Mbps flash chips"; hw-ISP does not suffer from it.
        let grid = figure5();
        let at = |ch, mts| &grid.iter().find(|g| g.0 == ch && g.1 == mts).unwrap().2;
        let (a, b) = (at(16, 200), at(16, 400));
        assert!(close(
            a.cpu_isp.breakdown.flash_to_dram_s,
            b.cpu_isp.breakdown.flash_to_dram_s,
            1e-12
        ));
        assert!(close(
            a.cpu_isp.breakdown.flash_to_dram_s,
            a.cpu_isp.breakdown.dram_write_s,
            1e-12
        ));
        assert!(b.hw_isp.breakdown.flash_to_dram_s < a.hw_isp.breakdown.flash_to_dram_s);
        // At 16 x 100 the flash array is still slower than DRAM.
        let c = at(16, 100);
        assert!(c.cpu_isp.breakdown.flash_array_s > c.cpu_isp.breakdown.dram_write_s);
    }

    #[test]
    fn summed_composition_is_the_printed_equations() {
        let mut p = preset_with("isp-ch8", &[]);
        p.composition = Composition::Summed;
        let n = p.records as f64;
        let table = n * 128.0;
        let per_ch = p.bytes_per_channel().unwrap();
        let flash = p.t_flash_read(per_ch);
        let eq6 = flash.max(table / 2668e6) + n * 29.239 / 100e6 + 0.013 * table / 375e6;
        let eq8 = flash.max(0.013 * table / 2668e6) + 0.013 * table / 375e6;
        let eq9 = flash.max(table / 2668e6) + table / 375e6 + n * 0.0142e-6;
        assert!(close(p.t_scan_baseline_isp().unwrap(), eq6, 1e-9));
        assert!(close(p.t_scan_hw_isp().unwrap(), eq8, 1e-9));
        assert!(close(p.t_scan_ihp().unwrap(), eq9, 1e-9));
        // Pipelined is never slower, and equals the largest term.
        p.composition = Composition::Pipelined;
        assert!(p.t_scan_baseline_isp().unwrap() < eq6);
        assert!(close(p.t_scan_ihp().unwrap(), table / 375e6, 1e-9));
    }

    #[test]
    fn table3_ratio_is_not_reproducible_with_table2_costs() {
        // Table 3 (200 MHz ARM, 8 ch x 8 way x 100 Mbps): model cycles 297,282 (baseline)
        // vs 16,827 (hardware), a ratio of 17.7. The table size is not given, so the
        // absolute counts cannot be derived; with Table 2's 128-byte records the ratio is
        // far smaller under either composition. This test pins that documented finding.
        let paper = 297_282.0 / 16_827.0;
        for c in [Composition::Pipelined, Composition::Summed] {
            let mut p = preset_with("isp-ch8", &[]);
            p.composition = c;
            let m = model(&p);
            let r = m.speedup(Strategy::HwIsp, Strategy::CpuIsp);
            assert!(r < 3.0 && r < paper / 5.0, "{c}: {r}");
        }
    }

    #[test]
    fn zero_selectivity_and_tiny_tables_evaluate() {
        let mut p = preset_with("isp-ch8", &[]);
        p.selectivity = 0.0;
        p.records = 1;
        let m = model(&p);
        // One record still reads one whole page per busy channel.
        assert!(close(m.hw_isp.time_s, p.t_flash_read(1), 1e-12));
        assert_eq!(m.hw_isp.breakdown.host_link_s, 0.0);
        assert!(m.results().iter().all(|r| r.records_per_s.is_finite()));
    }

    #[test]
    fn invalid_parameters_are_typed_errors() {
        let base = preset_with("isp-ch8", &[]);
        let err = |f: &dyn Fn(&mut ScanParams)| {
            let mut p = base.clone();
            f(&mut p);
            ScanModel::evaluate(&p).unwrap_err()
        };
        assert_eq!(
            err(&|p| p.selectivity = -0.1),
            ModelError::Selectivity(-0.1)
        );
        assert_eq!(err(&|p| p.selectivity = 1.5), ModelError::Selectivity(1.5));
        assert!(matches!(
            err(&|p| p.selectivity = f64::NAN),
            ModelError::Selectivity(_)
        ));
        assert_eq!(err(&|p| p.records = 0), ModelError::ZeroRecords);
        assert_eq!(err(&|p| p.record_bytes = 0), ModelError::ZeroRecordBytes);
        assert!(matches!(
            err(&|p| p.records = u64::MAX),
            ModelError::TableTooLarge { .. }
        ));
        assert_eq!(
            err(&|p| p.channels = 0),
            ModelError::ZeroCount { name: "channels" }
        );
        assert!(matches!(
            err(&|p| p.host_link_bytes_per_s = 0.0),
            ModelError::NotPositive {
                name: "host_link_bytes_per_s",
                ..
            }
        ));
        assert!(matches!(
            err(&|p| p.t_comp_cycles = -1.0),
            ModelError::Negative {
                name: "t_comp_cycles",
                ..
            }
        ));
        // Messages name what to change.
        assert!(
            err(&|p| p.selectivity = 2.0)
                .to_string()
                .contains("--selectivity")
        );
        assert!(base.t_scan_ihp().is_ok());
    }

    #[test]
    fn composition_and_names_parse() {
        assert_eq!(Composition::parse("summed"), Some(Composition::Summed));
        assert_eq!(
            Composition::parse("pipelined"),
            Some(Composition::Pipelined)
        );
        assert_eq!(Composition::parse("max"), None);
        let keys: Vec<&str> = Strategy::ALL.iter().map(|s| s.key()).collect();
        assert_eq!(keys, ["ihp", "cpu_isp", "hw_isp"]);
        assert_eq!(Strategy::CpuIsp.to_string(), "cpu-isp");
    }
}
