//! Device configuration: geometry, flash timing, buses, controller, host, energy and
//! faults, as one TOML document, plus the built-in presets of the papers' platforms.
//!
//! Choices made here:
//! * Human units in the file (µs, MT/s, MB/s, µJ, pJ/B, mW); exact integer units
//!   (ns, ps/B) inside, converted once by the accessors.
//! * Flash latencies are lists indexed by page type (`page % len`), so SLC gives one
//!   value and TLC may give LSB/CSB/MSB values (asymmetric program and read times).
//! * DRAM bandwidth is `rate_mt_s × bus_width_bits / 8`, the convention of the
//!   in-storage-scan paper §3 (a "667 MHz" 32-bit DDR2 bus is 2.67 GB/s).
//! * A preset is a TOML file under `crates/sim/presets/`, whose comments cite the paper
//!   table each number comes from; `--set key.path=value` overrides any field, which is
//!   how the scan paper's design space (NAND speed, DRAM clock, host link) is swept.

use crate::time::Rate;
use serde::{Deserialize, Serialize};
use std::fmt;
use thiserror::Error;

/// Errors from loading or validating a device configuration.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ConfigError {
    /// The TOML text does not parse or does not match the schema.
    #[error("device config does not parse: {0}")]
    Parse(String),
    /// No preset has this name.
    #[error("unknown preset `{name}`; known presets: {known}")]
    UnknownPreset {
        /// The name asked for.
        name: String,
        /// Comma-separated list of valid names.
        known: String,
    },
    /// A `--set` override is malformed or names a field that does not exist.
    #[error("bad override `{spec}`: {reason}")]
    BadOverride {
        /// The override as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The configuration parses but breaks one or more rules.
    #[error("invalid device config:\n  - {}", .problems.join("\n  - "))]
    Invalid {
        /// One line per broken rule, naming the field.
        problems: Vec<String>,
    },
}

/// The flash array's shape (batch-io paper §2.1 and Table 1; scan paper §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Geometry {
    /// Independent channel buses (scan paper `N_ch`).
    pub channels: u32,
    /// Chips (ways) per channel (scan paper `N_way`).
    pub ways: u32,
    /// Dies per chip; each die executes one array operation at a time.
    pub dies_per_chip: u32,
    /// Planes per die (addressing only; multi-plane operations are not modeled).
    pub planes_per_die: u32,
    /// Erase blocks per plane.
    pub blocks_per_plane: u32,
    /// Pages (write units, WBLOCK) per erase block.
    pub pages_per_block: u32,
    /// Bytes of user data per page.
    pub page_size: u32,
    /// Bytes per sector, the read unit (RBLOCK).
    pub sector_size: u32,
    /// Out-of-band bytes per sector available to the controller (the TAG).
    pub oob_per_sector: u32,
}

impl Geometry {
    /// Total dies in the array.
    pub fn dies(&self) -> u32 {
        self.channels * self.ways * self.dies_per_chip
    }
    /// Erase blocks per die.
    pub fn blocks_per_die(&self) -> u32 {
        self.planes_per_die * self.blocks_per_plane
    }
    /// Erase blocks in the array.
    pub fn total_blocks(&self) -> u64 {
        self.dies() as u64 * self.blocks_per_die() as u64
    }
    /// Pages in the array.
    pub fn total_pages(&self) -> u64 {
        self.total_blocks() * self.pages_per_block as u64
    }
    /// Sectors per page.
    pub fn sectors_per_page(&self) -> u32 {
        self.page_size / self.sector_size.max(1)
    }
    /// OOB bytes per page.
    pub fn oob_per_page(&self) -> u32 {
        self.sectors_per_page() * self.oob_per_sector
    }
    /// Bytes of user data per erase block.
    pub fn block_bytes(&self) -> u64 {
        self.page_size as u64 * self.pages_per_block as u64
    }
    /// Raw user capacity of the array in bytes (no spare area, no OOB).
    pub fn raw_capacity(&self) -> u64 {
        self.total_pages() * self.page_size as u64
    }

    fn check(&self, p: &mut Vec<String>) {
        let nz = [
            ("geometry.channels", self.channels),
            ("geometry.ways", self.ways),
            ("geometry.dies_per_chip", self.dies_per_chip),
            ("geometry.planes_per_die", self.planes_per_die),
            ("geometry.blocks_per_plane", self.blocks_per_plane),
            ("geometry.pages_per_block", self.pages_per_block),
            ("geometry.page_size", self.page_size),
            ("geometry.sector_size", self.sector_size),
        ];
        for (k, v) in nz {
            if v == 0 {
                p.push(format!("{k} must be at least 1"));
            }
        }
        if self.sector_size != 0 && !self.page_size.is_multiple_of(self.sector_size) {
            p.push(format!(
                "geometry.page_size ({}) must be a multiple of geometry.sector_size ({})",
                self.page_size, self.sector_size
            ));
        }
        if self.sector_size != 0 && !self.sector_size.is_multiple_of(512) {
            p.push(format!(
                "geometry.sector_size ({}) must be a multiple of 512",
                self.sector_size
            ));
        }
        if self.sectors_per_page() > 64 {
            p.push(format!(
                "geometry: at most 64 sectors per page (got {})",
                self.sectors_per_page()
            ));
        }
        if self.pages_per_block > 65_536 {
            p.push("geometry.pages_per_block must be at most 65536".into());
        }
        if self.oob_per_sector > 1024 {
            p.push("geometry.oob_per_sector must be at most 1024".into());
        }
        if self.total_blocks() > u32::MAX as u64 / 2 {
            p.push(format!(
                "geometry: too many blocks ({})",
                self.total_blocks()
            ));
        }
    }
}

impl fmt::Display for Geometry {
    /// `8ch x 4way x 2die x 2pl x 128blk x 384pg x 16384B (sector 4096B, OOB 16B)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}ch x {}way x {}die x {}pl x {}blk x {}pg x {}B (sector {}B, OOB {}B)",
            self.channels,
            self.ways,
            self.dies_per_chip,
            self.planes_per_die,
            self.blocks_per_plane,
            self.pages_per_block,
            self.page_size,
            self.sector_size,
            self.oob_per_sector
        )
    }
}

/// NAND cell technology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CellType {
    /// One bit per cell.
    Slc,
    /// Two bits per cell.
    Mlc,
    /// Three bits per cell.
    Tlc,
    /// Four bits per cell.
    Qlc,
}

/// Flash array timing and endurance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlashConfig {
    /// Cell technology (documentation; the latencies below are what the model uses).
    pub cell: CellType,
    /// Array read time tR in µs, per page type (`page % len`: LSB, CSB, MSB ...).
    pub t_read_us: Vec<f64>,
    /// Array program time tPROG in µs, per page type.
    pub t_prog_us: Vec<f64>,
    /// Block erase time tBERS in µs.
    pub t_erase_us: f64,
    /// Rated program/erase cycles per block.
    pub endurance: u32,
}

impl FlashConfig {
    /// tR in ns for page index `page` within its block.
    #[inline]
    pub fn t_read_ns(&self, page: u32) -> u64 {
        us_to_ns(self.t_read_us[page as usize % self.t_read_us.len()])
    }
    /// tPROG in ns for page index `page` within its block.
    #[inline]
    pub fn t_prog_ns(&self, page: u32) -> u64 {
        us_to_ns(self.t_prog_us[page as usize % self.t_prog_us.len()])
    }
    /// tBERS in ns.
    pub fn t_erase_ns(&self) -> u64 {
        us_to_ns(self.t_erase_us)
    }
}

/// A flash channel bus.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelConfig {
    /// NAND interface speed in mega-transfers per second (the scan paper's "Mbps").
    pub rate_mt_s: f64,
    /// Bus width in bits (8 for ONFI/Toggle).
    pub bus_width_bits: u32,
    /// The flash memory controller sequences way-interleaved reads without overlapping
    /// them with transfers, as the scan paper's FMC does (its equation 1: each page costs
    /// the channel `t_R / N_way` plus its transfer; 743 MB/s for 8 ch x 100 MT/s). When
    /// false (default), array reads on other ways hide entirely behind transfers.
    #[serde(default)]
    pub serial_read_sequencing: bool,
}

impl ChannelConfig {
    /// The channel's transfer rate.
    pub fn rate(&self) -> Rate {
        Rate::from_bytes_per_s(self.rate_mt_s * 1e6 * self.bus_width_bits as f64 / 8.0)
    }
}

/// Controller DRAM.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DramConfig {
    /// Capacity in MiB (bounds the FTL map cache and in-storage session memory).
    pub size_mib: u64,
    /// Transfers per second in millions (the scan paper's "DDR2 clock").
    pub rate_mt_s: f64,
    /// Bus width in bits.
    pub bus_width_bits: u32,
    /// Page buffer, KiB of flash pages kept in DRAM with least-recently-used
    /// replacement: every flash page the host reads or the FTL programs for it enters the
    /// buffer, and a later host read of a page still in it is served from DRAM without
    /// an array read (the Cosmos+ OpenSSD firmware's data buffer: FLIXR §5, "OpenSSD
    /// assigns 16 MB DRAM space as page buffers", and Table 2, "Page cache replacement:
    /// LRU"). 0 (the default): no such buffer; reads of data the write cache still holds
    /// are served from it either way.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub page_buffer_kib: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl DramConfig {
    /// The DRAM bus's transfer rate.
    pub fn rate(&self) -> Rate {
        Rate::from_bytes_per_s(self.rate_mt_s * 1e6 * self.bus_width_bits as f64 / 8.0)
    }
}

/// The host link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostLinkConfig {
    /// Kind, for reports ("sata3", "sas2", "pcie-gen4-x4", ...).
    pub kind: String,
    /// Effective payload bandwidth in MB/s (10^6 B/s).
    pub bandwidth_mb_s: f64,
    /// Link time per command, in µs: the protocol frames a command puts on the link
    /// besides its data (SQE/CQE and doorbell TLPs on PCIe, the FIS exchange of SATA).
    /// *Occupancy*: it serializes on the link with every other command's bytes.
    pub command_overhead_us: f64,
    /// Fixed delay per command, in µs: transport round trip, doorbell and interrupt
    /// (docs/architecture.md "Time": latency is not occupancy). *Latency*: it delays the command
    /// and overlaps with every other command in flight; it occupies nothing.
    #[serde(default)]
    pub command_latency_us: f64,
    /// Payload bytes per transport packet of a packet-switched transport (NVMe-oF/TCP
    /// carries a write's data in IP datagrams of at most 65,532 bytes, batch-io §8.2.1),
    /// 0 for a link that moves a command's data as one transfer. A block-interface write
    /// larger than a packet reaches the FTL packet by packet: the device, which knows no
    /// logical relationship among the packets, makes one write context (with its log and
    /// done records) per packet, as the paper's OXBlock does; a batch buffer stays one
    /// context. Per-packet framing is inside `bandwidth_mb_s` (payload rate).
    #[serde(default)]
    pub packet_bytes: u32,
}

impl HostLinkConfig {
    /// The link's transfer rate.
    pub fn rate(&self) -> Rate {
        Rate::from_mb_s(self.bandwidth_mb_s)
    }
    /// Per-command link occupancy in ns.
    pub fn command_overhead_ns(&self) -> u64 {
        us_to_ns(self.command_overhead_us)
    }
    /// Per-command latency in ns.
    pub fn command_latency_ns(&self) -> u64 {
        us_to_ns(self.command_latency_us)
    }
}

/// Policies of the FTL firmware that a platform fixes (as opposed to
/// `csd_ftl::FtlConfig`, which a run chooses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FtlPolicy {
    /// Dies the recovery log is spread over (batch-io §4.3: the log is "logically
    /// sequential" but "not required to be physically sequential"): log pages go to `K`
    /// chains of blocks on `K` distinct dies in turn, so the log forces of concurrent
    /// write contexts program in parallel instead of queueing on one die. `0` means every
    /// die of the array (OX writes its log pages into the HOT stream's WBLOCKs, which are
    /// striped over every channel and chip, §5.2 and §7.2.3); a value above the dies of
    /// the array is capped at them. Default 1: one chain (csd's behaviour before this
    /// setting, kept by every preset but `ox-westlake` and `nvme-tlc`).
    #[serde(default = "one")]
    pub log_dies: u32,
    /// The write contexts of one command run one at a time: a context starts when the one
    /// before it has committed (its data programmed and its "done" record forced), not
    /// when its data has arrived. Batch-io §8.2.1 on the block interface's 17 contexts per
    /// 1 MiB: "the maximum size of an internal write of BwTree Block is bounded by the
    /// packet size, which is not big enough to leverage all flash channels at once",
    /// which holds only if the contexts of a write do not overlap. Only a command that
    /// makes several contexts (the packets of a packet-switched link) is affected.
    /// Default `false`: contexts overlap as far as the flash allows.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub serial_contexts: bool,
}

fn one() -> u32 {
    1
}

impl Default for FtlPolicy {
    fn default() -> Self {
        FtlPolicy {
            log_dies: 1,
            serial_contexts: false,
        }
    }
}

impl FtlPolicy {
    /// The number of log chains on an array of geometry `g`: `log_dies`, with 0 meaning
    /// every die, capped at the dies of the array.
    pub fn log_chains(&self, g: &Geometry) -> u32 {
        match self.log_dies {
            0 => g.dies(),
            k => k.min(g.dies()),
        }
        .max(1)
    }

    fn is_default(&self) -> bool {
        *self == FtlPolicy::default()
    }
}

/// The controller's embedded CPU.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuConfig {
    /// Embedded cores available to firmware and in-storage programs.
    pub cores: u32,
    /// Core clock in MHz.
    pub clock_mhz: f64,
    /// Firmware time per host command on one embedded core, in µs (parsing the command,
    /// setting up its context and completion). *Occupancy* of a core: with `cores` cores
    /// the controller handles at most `cores / command_us` commands per µs, the
    /// controller's IOPS ceiling. 0 where the preset's source gives none.
    #[serde(default)]
    pub command_us: f64,
}

impl CpuConfig {
    /// Firmware time per command in ns.
    pub fn command_ns(&self) -> u64 {
        us_to_ns(self.command_us)
    }
}

/// The host machine's CPU (for in-host processing and energy).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    /// Host cores that run database work.
    pub cores: u32,
    /// Host core clock in MHz.
    pub clock_mhz: f64,
}

impl Default for HostConfig {
    fn default() -> Self {
        // The scan paper's profiling host: Xeon at 2.26 GHz (§5.1).
        HostConfig {
            cores: 1,
            clock_mhz: 2260.0,
        }
    }
}

/// Costs and limits of in-storage processing (smart-ssd §3, scan paper §4 Table 2).
///
/// Embedded-CPU work is charged as counted work × cycles, at the *bus* clock
/// (`cpu.clock_mhz / cycle_clock_divisor`): the scan paper's Table 2 cycles are bus
/// cycles (see csd-model's notes). Host work is charged at the host clock.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IspConfig {
    /// Cycles to examine one record against one predicate (`t_comp`, scan paper
    /// Table 2: 24); a record that meets several predicates pays once per predicate
    /// evaluated.
    pub comp_cycles_per_record: f64,
    /// Cycles to write one matching record to the result buffer (`t_result`, scan paper
    /// Table 2: 403).
    pub result_cycles_per_record: f64,
    /// Cycles to fold one value into an aggregate (an accumulator update in registers or
    /// SRAM, far cheaper than writing a result record).
    pub agg_cycles_per_update: f64,
    /// Cycles the runtime spends per page besides its records (event dispatch, pin and
    /// unpin, page header; smart-ssd §3.2).
    pub page_cycles: f64,
    /// CPU clock / this = the clock the cycles above are counted at (Table 1: 200/100).
    pub cycle_clock_divisor: f64,
    /// Cycles the cache-less embedded core stalls per DRAM access (smart-ssd §4.2.1:
    /// "the high DRAM latency in the SSD"). NSM: one access per value read plus one per
    /// record for its slot; PAX: one per `ldm_bytes` of a minipage (the LDM instruction).
    pub dram_access_cycles: f64,
    /// Bytes one multi-register load (ARM LDM) brings in from a PAX minipage.
    pub ldm_bytes: u32,
    /// Host cycles to scan one record (scan paper Table 2: 0.0142 µs on a 2.26 GHz Xeon
    /// = 32 cycles).
    pub host_cycles_per_record: f64,
    /// Host cycles per record that passed the filter (projection / aggregation).
    pub host_cycles_per_result: f64,
    /// Host cycles per table page the host scans (buffer management, page latching and
    /// row iteration of a real DBMS; 0 in the scan paper's model).
    pub host_cycles_per_page: f64,
    /// Sessions that can be open at once.
    pub max_sessions: u32,
    /// Fixed memory arena of one session in KiB (smart-ssd §3.2: no malloc).
    pub session_arena_kib: u32,
    /// Page buffers one session may have pinned in DRAM at once.
    pub max_pinned_pages: u32,
    /// DRAM the runtime may pin for all sessions together, in MiB.
    pub runtime_dram_mib: u32,
    /// Result chunk size: a projection's rows are cut into chunks of this size, in KiB.
    pub result_chunk_kib: u32,
    /// Most result bytes one GET transfers (ready chunks are merged up to it), in KiB.
    pub get_max_kib: u32,
}

impl Default for IspConfig {
    fn default() -> Self {
        IspConfig {
            comp_cycles_per_record: 24.0,
            result_cycles_per_record: 403.0,
            agg_cycles_per_update: 40.0,
            page_cycles: 0.0,
            cycle_clock_divisor: 2.0,
            dram_access_cycles: 20.0,
            ldm_bytes: 32,
            host_cycles_per_record: 32.1,
            host_cycles_per_result: 0.0,
            host_cycles_per_page: 0.0,
            max_sessions: 8,
            session_arena_kib: 1024,
            max_pinned_pages: 256,
            runtime_dram_mib: 64,
            result_chunk_kib: 64,
            get_max_kib: 2048,
        }
    }
}

impl IspConfig {
    fn check(&self, p: &mut Vec<String>) {
        for (k, v) in [
            ("isp.comp_cycles_per_record", self.comp_cycles_per_record),
            (
                "isp.result_cycles_per_record",
                self.result_cycles_per_record,
            ),
            ("isp.agg_cycles_per_update", self.agg_cycles_per_update),
            ("isp.page_cycles", self.page_cycles),
            ("isp.dram_access_cycles", self.dram_access_cycles),
            ("isp.host_cycles_per_record", self.host_cycles_per_record),
            ("isp.host_cycles_per_result", self.host_cycles_per_result),
            ("isp.host_cycles_per_page", self.host_cycles_per_page),
        ] {
            if !v.is_finite() || v < 0.0 {
                p.push(format!("{k} must be finite and non-negative (got {v})"));
            }
        }
        if !self.cycle_clock_divisor.is_finite() || self.cycle_clock_divisor < 1.0 {
            p.push(format!(
                "isp.cycle_clock_divisor must be at least 1 (got {})",
                self.cycle_clock_divisor
            ));
        }
        for (k, v) in [
            ("isp.ldm_bytes", self.ldm_bytes),
            ("isp.max_sessions", self.max_sessions),
            ("isp.session_arena_kib", self.session_arena_kib),
            ("isp.max_pinned_pages", self.max_pinned_pages),
            ("isp.runtime_dram_mib", self.runtime_dram_mib),
            ("isp.result_chunk_kib", self.result_chunk_kib),
            ("isp.get_max_kib", self.get_max_kib),
        ] {
            if v == 0 {
                p.push(format!("{k} must be at least 1"));
            }
        }
    }
}

/// Energy costs. Dynamic energy is charged per operation or per byte from counters kept
/// while working; static energy is idle power times the modeled duration of the run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnergyConfig {
    /// Array read (tR) per page, µJ.
    pub read_page_uj: f64,
    /// Array program per page, µJ.
    pub program_page_uj: f64,
    /// Block erase, µJ.
    pub erase_block_uj: f64,
    /// Flash channel transfer, pJ per byte.
    pub channel_pj_per_byte: f64,
    /// Controller DRAM access, pJ per byte.
    pub dram_pj_per_byte: f64,
    /// Host link transfer, pJ per byte.
    pub host_link_pj_per_byte: f64,
    /// Embedded CPU, nJ per cycle.
    pub cpu_nj_per_cycle: f64,
    /// Host CPU, nJ per cycle.
    pub host_cpu_nj_per_cycle: f64,
    /// Idle power of the whole flash array, mW.
    pub nand_idle_mw: f64,
    /// Idle power of the controller (cores, DRAM, PHYs), mW.
    pub controller_idle_mw: f64,
    /// Idle power of the host link, mW.
    pub host_link_idle_mw: f64,
    /// Idle power of the host (CPU package and memory), mW.
    pub host_idle_mw: f64,
}

impl Default for EnergyConfig {
    fn default() -> Self {
        // Datasheet-class figures for a TLC drive; presets override them where a paper
        // gives its own. Sources: ONFI/Toggle I/O ~5-6 pJ/bit, LPDDR4 ~5 pJ/bit, PCIe Gen4
        // ~5 pJ/bit, array energy = array current (~25-50 mA at 3.3 V) x operation time.
        EnergyConfig {
            read_page_uj: 2.5,
            program_page_uj: 30.0,
            erase_block_uj: 150.0,
            channel_pj_per_byte: 45.0,
            dram_pj_per_byte: 40.0,
            host_link_pj_per_byte: 40.0,
            cpu_nj_per_cycle: 0.15,
            host_cpu_nj_per_cycle: 4.0,
            nand_idle_mw: 200.0,
            controller_idle_mw: 1500.0,
            host_link_idle_mw: 300.0,
            host_idle_mw: 30_000.0,
        }
    }
}

/// Fault injection. Every random decision is drawn from `seed` and the operation's
/// sequence number, so the same seed and the same operations give the same failures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FaultConfig {
    /// Seed of every fault decision.
    pub seed: u64,
    /// Fraction of blocks marked bad at the factory.
    pub factory_bad_block_ratio: f64,
    /// Probability that a page program fails (status fail) on a healthy block.
    pub program_fail_prob: f64,
    /// Probability that a block erase fails on a healthy block.
    pub erase_fail_prob: f64,
    /// Program-failure probability once a block is past its rated endurance.
    pub worn_program_fail_prob: f64,
    /// Erase-failure probability once a block is past its rated endurance.
    pub worn_erase_fail_prob: f64,
    /// Raw bit error rate of a fresh block (errors per bit read).
    pub rber_fresh: f64,
    /// Raw bit error rate at the rated endurance; grows linearly with P/E cycles in between
    /// and beyond.
    pub rber_end_of_life: f64,
    /// Bit errors per sector the ECC corrects; more is an uncorrectable read.
    pub ecc_bits_per_sector: u32,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            seed: 0x5eed_c5d0,
            factory_bad_block_ratio: 0.0,
            program_fail_prob: 0.0,
            erase_fail_prob: 0.0,
            worn_program_fail_prob: 0.0,
            worn_erase_fail_prob: 0.0,
            rber_fresh: 0.0,
            rber_end_of_life: 0.0,
            ecc_bits_per_sector: 40,
        }
    }
}

impl FaultConfig {
    fn check(&self, p: &mut Vec<String>) {
        let probs = [
            (
                "faults.factory_bad_block_ratio",
                self.factory_bad_block_ratio,
            ),
            ("faults.program_fail_prob", self.program_fail_prob),
            ("faults.erase_fail_prob", self.erase_fail_prob),
            ("faults.worn_program_fail_prob", self.worn_program_fail_prob),
            ("faults.worn_erase_fail_prob", self.worn_erase_fail_prob),
            ("faults.rber_fresh", self.rber_fresh),
            ("faults.rber_end_of_life", self.rber_end_of_life),
        ];
        for (k, v) in probs {
            if !(0.0..=1.0).contains(&v) {
                p.push(format!("{k} must be a probability in [0, 1] (got {v})"));
            }
        }
        if self.factory_bad_block_ratio > 0.5 {
            p.push("faults.factory_bad_block_ratio above 0.5 leaves no usable device".into());
        }
    }
}

/// A complete device description.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    /// Short name (the preset name for presets).
    pub name: String,
    /// One line about the device.
    pub description: String,
    /// Where the numbers come from.
    #[serde(default)]
    pub source: String,
    /// Array shape.
    pub geometry: Geometry,
    /// Array timing and endurance.
    pub flash: FlashConfig,
    /// Channel buses.
    pub channel: ChannelConfig,
    /// Controller DRAM.
    pub dram: DramConfig,
    /// Host link.
    pub host_link: HostLinkConfig,
    /// Embedded CPU.
    pub cpu: CpuConfig,
    /// Host CPU.
    #[serde(default)]
    pub host: HostConfig,
    /// Energy costs.
    #[serde(default)]
    pub energy: EnergyConfig,
    /// Fault injection.
    #[serde(default)]
    pub faults: FaultConfig,
    /// In-storage processing costs and runtime limits.
    #[serde(default)]
    pub isp: IspConfig,
    /// FTL firmware policies of the platform (absent from a file: the defaults, and a
    /// config with the defaults writes no `[ftl]` table, so images keep their bytes).
    #[serde(default, skip_serializing_if = "FtlPolicy::is_default")]
    pub ftl: FtlPolicy,
}

/// The built-in presets: name, TOML text (with comments citing the source).
pub const PRESETS: &[(&str, &str)] = &[
    ("nvme-tlc", include_str!("../presets/nvme-tlc.toml")),
    (
        "cosmos-openssd",
        include_str!("../presets/cosmos-openssd.toml"),
    ),
    (
        "smart-ssd-sas",
        include_str!("../presets/smart-ssd-sas.toml"),
    ),
    ("isp-ch8", include_str!("../presets/isp-ch8.toml")),
    ("isp-ch16", include_str!("../presets/isp-ch16.toml")),
    ("ox-westlake", include_str!("../presets/ox-westlake.toml")),
    ("x25e-sata", include_str!("../presets/x25e-sata.toml")),
    ("tiny", include_str!("../presets/tiny.toml")),
];

/// The preset used when none is named.
pub const DEFAULT_PRESET: &str = "nvme-tlc";

impl DeviceConfig {
    /// The TOML text of a built-in preset.
    pub fn preset_toml(name: &str) -> Result<&'static str, ConfigError> {
        PRESETS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| *t)
            .ok_or_else(|| ConfigError::UnknownPreset {
                name: name.to_string(),
                known: PRESETS
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// A built-in preset, validated.
    pub fn preset(name: &str) -> Result<DeviceConfig, ConfigError> {
        DeviceConfig::from_toml(Self::preset_toml(name)?)
    }

    /// Parse and validate a TOML document.
    pub fn from_toml(text: &str) -> Result<DeviceConfig, ConfigError> {
        Self::from_toml_with_overrides(text, &[])
    }

    /// Parse a TOML document, apply `key.path=value` overrides, then validate.
    pub fn from_toml_with_overrides(
        text: &str,
        overrides: &[String],
    ) -> Result<DeviceConfig, ConfigError> {
        let mut table: toml::Table =
            toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        for spec in overrides {
            apply_override(&mut table, spec)?;
        }
        let cfg: DeviceConfig = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Parse(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The configuration as TOML (without the presets' comments).
    pub fn to_toml(&self) -> String {
        // Serializing plain structs of numbers, strings and vectors cannot fail.
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# cannot serialize: {e}\n"))
    }

    /// Check every rule; report all broken ones at once.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut p = Vec::new();
        self.geometry.check(&mut p);
        self.isp.check(&mut p);
        let f = &self.flash;
        for (k, v) in [
            ("flash.t_read_us", &f.t_read_us),
            ("flash.t_prog_us", &f.t_prog_us),
        ] {
            if v.is_empty() || v.len() > 4 {
                p.push(format!("{k} needs 1 to 4 values (one per page type)"));
            }
            if v.iter().any(|x| !x.is_finite() || *x < 0.0) {
                p.push(format!("{k} values must be finite and non-negative"));
            }
        }
        if !f.t_erase_us.is_finite() || f.t_erase_us < 0.0 {
            p.push("flash.t_erase_us must be finite and non-negative".into());
        }
        if f.endurance == 0 {
            p.push("flash.endurance must be at least 1".into());
        }
        if self.dram.page_buffer_kib > self.dram.size_mib.saturating_mul(1024) {
            p.push(format!(
                "dram.page_buffer_kib {} is more than the DRAM's {} MiB",
                self.dram.page_buffer_kib, self.dram.size_mib
            ));
        }
        if self.dram.size_mib == 0 {
            p.push("dram.size_mib must be at least 1 (the controller keeps its MAP cache, write buffers and sessions in DRAM)".into());
        }
        let positive = [
            ("channel.rate_mt_s", self.channel.rate_mt_s),
            ("dram.rate_mt_s", self.dram.rate_mt_s),
            ("host_link.bandwidth_mb_s", self.host_link.bandwidth_mb_s),
            ("cpu.clock_mhz", self.cpu.clock_mhz),
            ("host.clock_mhz", self.host.clock_mhz),
        ];
        for (k, v) in positive {
            if !v.is_finite() || v <= 0.0 {
                p.push(format!("{k} must be a positive number (got {v})"));
            }
        }
        for (k, v) in [
            ("channel.bus_width_bits", self.channel.bus_width_bits),
            ("dram.bus_width_bits", self.dram.bus_width_bits),
            ("cpu.cores", self.cpu.cores),
            ("host.cores", self.host.cores),
        ] {
            if v == 0 {
                p.push(format!("{k} must be at least 1"));
            }
        }
        let pb = self.host_link.packet_bytes;
        if pb != 0 && (pb as u64) < self.geometry.sector_size as u64 {
            p.push(format!(
                "host_link.packet_bytes must be 0 (no packets) or at least one sector ({} bytes), got {pb}",
                self.geometry.sector_size
            ));
        }
        let (k, dies) = (self.ftl.log_dies, self.geometry.dies());
        if k > dies && dies > 0 {
            p.push(format!(
                "ftl.log_dies must be 0 (every die) or at most the array's {dies} dies, got {k}"
            ));
        }
        for (k, v) in [
            (
                "host_link.command_overhead_us",
                self.host_link.command_overhead_us,
            ),
            (
                "host_link.command_latency_us",
                self.host_link.command_latency_us,
            ),
            ("cpu.command_us", self.cpu.command_us),
        ] {
            if !v.is_finite() || v < 0.0 {
                p.push(format!("{k} must be finite and non-negative (got {v})"));
            }
        }
        let e = &self.energy;
        let energies = [
            e.read_page_uj,
            e.program_page_uj,
            e.erase_block_uj,
            e.channel_pj_per_byte,
            e.dram_pj_per_byte,
            e.host_link_pj_per_byte,
            e.cpu_nj_per_cycle,
            e.host_cpu_nj_per_cycle,
            e.nand_idle_mw,
            e.controller_idle_mw,
            e.host_link_idle_mw,
            e.host_idle_mw,
        ];
        if energies.iter().any(|x| !x.is_finite() || *x < 0.0) {
            p.push("energy.* values must be finite and non-negative".into());
        }
        self.faults.check(&mut p);
        if p.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid { problems: p })
        }
    }
}

impl fmt::Display for DeviceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} ({:.1} GiB raw), {} MT/s channels, {} {} MB/s",
            self.name,
            self.geometry,
            self.geometry.raw_capacity() as f64 / (1u64 << 30) as f64,
            self.channel.rate_mt_s,
            self.host_link.kind,
            self.host_link.bandwidth_mb_s
        )
    }
}

/// Microseconds (float, from a config file) to whole nanoseconds.
#[inline]
pub fn us_to_ns(us: f64) -> u64 {
    (us * 1000.0).round().max(0.0) as u64
}

fn apply_override(table: &mut toml::Table, spec: &str) -> Result<(), ConfigError> {
    let bad = |reason: &str| ConfigError::BadOverride {
        spec: spec.to_string(),
        reason: reason.into(),
    };
    let (path, raw) = spec
        .split_once('=')
        .ok_or_else(|| bad("expected key.path=value"))?;
    let keys: Vec<&str> = path.trim().split('.').collect();
    if keys.iter().any(|k| k.is_empty()) {
        return Err(bad("empty key in path"));
    }
    let raw = raw.trim();
    // Parse the value as TOML (numbers, booleans, arrays, quoted strings); a bare word
    // is taken as a string.
    let value = toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()));
    let (last, parents) = keys.split_last().ok_or_else(|| bad("empty path"))?;
    let mut cur = table;
    for k in parents {
        cur = cur
            .entry(k.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .ok_or_else(|| bad(&format!("`{k}` is not a table")))?;
    }
    // Keep integer fields integers when the user wrote 400 for a float field and vice versa:
    // serde accepts an integer for f64 but not a float for u32.
    let value = match (cur.get(*last), value) {
        (Some(toml::Value::Float(_)), toml::Value::Integer(i)) => toml::Value::Float(i as f64),
        (_, v) => v,
    };
    cur.insert(last.to_string(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_spreads_over_every_die_on_ox_westlake_and_nvme_tlc_only() {
        let striped = ["ox-westlake", "nvme-tlc"];
        for name in striped {
            let c = DeviceConfig::preset(name).unwrap();
            assert_eq!(c.ftl.log_dies, 0, "{name}");
            assert_eq!(c.ftl.log_chains(&c.geometry), c.geometry.dies(), "{name}");
        }
        let ox = DeviceConfig::preset("ox-westlake").unwrap();
        let mut shrunk = ox.geometry;
        shrunk.ways = 1;
        shrunk.dies_per_chip = 1;
        assert_eq!(ox.ftl.log_chains(&shrunk), 8);
        for (name, _) in PRESETS.iter().filter(|(n, _)| !striped.contains(n)) {
            let c = DeviceConfig::preset(name).unwrap();
            assert_eq!(c.ftl.log_chains(&c.geometry), 1, "{name}");
            // A config with the default policy writes no [ftl] table (image headers keep
            // their bytes) and reads back equal.
            let text = c.to_toml();
            assert!(!text.contains("[ftl]"), "{name}");
            assert_eq!(DeviceConfig::from_toml(&text).unwrap(), c, "{name}");
        }
        // No preset runs a write's contexts one at a time (see ox-westlake's comment); an
        // override does, and survives a round trip through TOML.
        for (name, _) in PRESETS.iter() {
            assert!(
                !DeviceConfig::preset(name).unwrap().ftl.serial_contexts,
                "{name}"
            );
        }
        let serial = DeviceConfig::from_toml_with_overrides(
            DeviceConfig::preset_toml("ox-westlake").unwrap(),
            &["ftl.serial_contexts=true".into()],
        )
        .unwrap();
        assert!(serial.ftl.serial_contexts);
        assert_eq!(DeviceConfig::from_toml(&serial.to_toml()).unwrap(), serial);
        let text = ox.to_toml();
        assert!(text.contains("[ftl]") && !text.contains("serial_contexts"));
        assert_eq!(DeviceConfig::from_toml(&text).unwrap(), ox);
        let tiny = DeviceConfig::preset_toml("tiny").unwrap();
        let four =
            DeviceConfig::from_toml_with_overrides(tiny, &["ftl.log_dies=4".into()]).unwrap();
        assert_eq!(four.ftl.log_chains(&four.geometry), 4);
        let e = DeviceConfig::from_toml_with_overrides(tiny, &["ftl.log_dies=5".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("ftl.log_dies") && e.contains("4 dies"), "{e}");
    }

    #[test]
    fn packets_are_the_papers_on_nvmeof_tcp_only_and_at_least_a_sector() {
        let ox = DeviceConfig::preset("ox-westlake").unwrap();
        assert_eq!(ox.host_link.packet_bytes, 65_512);
        assert_eq!((1u64 << 20).div_ceil(65_512), 17);
        for (name, _) in PRESETS.iter().filter(|(n, _)| *n != "ox-westlake") {
            assert_eq!(
                DeviceConfig::preset(name).unwrap().host_link.packet_bytes,
                0,
                "{name}"
            );
        }
        let tiny = DeviceConfig::preset_toml("tiny").unwrap();
        let e =
            DeviceConfig::from_toml_with_overrides(tiny, &["host_link.packet_bytes=100".into()])
                .unwrap_err()
                .to_string();
        assert!(e.contains("host_link.packet_bytes"), "{e}");
    }

    #[test]
    fn per_command_costs_are_latency_or_occupancy_by_source() {
        // A network round trip is latency; firmware handling is a core's occupancy;
        // frames calibrated in series with the link stay link occupancy.
        let ox = DeviceConfig::preset("ox-westlake").unwrap();
        assert_eq!(
            (
                ox.host_link.command_latency_ns(),
                ox.host_link.command_overhead_ns()
            ),
            (25_000, 0)
        );
        let cosmos = DeviceConfig::preset("cosmos-openssd").unwrap();
        assert_eq!(
            (
                cosmos.cpu.command_ns(),
                cosmos.host_link.command_overhead_ns()
            ),
            (10_000, 0)
        );
        for name in ["x25e-sata", "smart-ssd-sas", "tiny", "nvme-tlc"] {
            let c = DeviceConfig::preset(name).unwrap();
            assert!(c.host_link.command_overhead_ns() > 0, "{name}");
            assert_eq!(
                (c.host_link.command_latency_ns(), c.cpu.command_ns()),
                (0, 0),
                "{name}"
            );
        }
        // A config written before the split (no latency, no firmware time) still parses.
        let old = DeviceConfig::preset_toml("tiny").unwrap();
        assert!(!old.contains("command_latency_us") && !old.contains("command_us"));
        // Negative or non-finite costs are refused, naming the key.
        for bad in ["host_link.command_latency_us=-1", "cpu.command_us=-0.5"] {
            let e = DeviceConfig::from_toml_with_overrides(old, &[bad.to_string()]).unwrap_err();
            assert!(
                e.to_string().contains(bad.split('=').next().unwrap()),
                "{e}"
            );
        }
    }

    #[test]
    fn every_preset_parses_and_validates() {
        for (name, _) in PRESETS {
            let cfg = DeviceConfig::preset(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(&cfg.name, name);
            assert!(!cfg.source.is_empty(), "{name} must cite its source");
            // Round trip through TOML.
            let again = DeviceConfig::from_toml(&cfg.to_toml()).expect("round trip");
            assert_eq!(again, cfg);
        }
    }

    #[test]
    fn unknown_preset_lists_known_ones() {
        let e = DeviceConfig::preset("nope").unwrap_err().to_string();
        assert!(e.contains("nvme-tlc") && e.contains("isp-ch16"), "{e}");
    }

    #[test]
    fn overrides_change_fields_and_reject_nonsense() {
        let t = DeviceConfig::preset_toml("isp-ch8").unwrap();
        let c = DeviceConfig::from_toml_with_overrides(
            t,
            &[
                "channel.rate_mt_s=400".into(),
                "host_link.kind=\"sata6\"".into(),
            ],
        )
        .unwrap();
        assert_eq!(c.channel.rate_mt_s, 400.0);
        assert_eq!(c.host_link.kind, "sata6");
        assert!(DeviceConfig::from_toml_with_overrides(t, &["nonsense".into()]).is_err());
        assert!(DeviceConfig::from_toml_with_overrides(t, &["geometry.bogus=1".into()]).is_err());
        let e = DeviceConfig::from_toml_with_overrides(t, &["geometry.channels=0".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("geometry.channels"), "{e}");
    }

    #[test]
    fn validation_reports_every_problem() {
        let mut c = DeviceConfig::preset("tiny").unwrap();
        c.geometry.sector_size = 3000;
        c.faults.program_fail_prob = 2.0;
        c.channel.rate_mt_s = -1.0;
        let e = c.validate().unwrap_err().to_string();
        for k in ["sector_size", "program_fail_prob", "channel.rate_mt_s"] {
            assert!(e.contains(k), "{k} missing in {e}");
        }
    }

    #[test]
    fn scan_paper_dram_convention() {
        let c = DeviceConfig::preset("isp-ch8").unwrap();
        // 667 MT/s x 32 bit = 2.67 GB/s (scan paper §3).
        assert!((c.dram.rate().bytes_per_s() / 2.668e9 - 1.0).abs() < 0.01);
    }

    // ---- Paper-derived properties of the presets -------------------------------------

    // Bandwidths the presets deliver are measured through the simulation in
    // csd-device's tests/preset_bandwidth.rs; the scan paper's equation 1 is in csd-model.

    /// `a` is within relative tolerance `tol` of `b`.
    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a / b - 1.0).abs() <= tol
    }

    fn preset_with(name: &str, sets: &[&str]) -> DeviceConfig {
        let t = DeviceConfig::preset_toml(name).unwrap();
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        DeviceConfig::from_toml_with_overrides(t, &sets).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    #[test]
    fn every_preset_is_at_most_256_gib_raw() {
        for (name, _) in PRESETS {
            let c = DeviceConfig::preset(name).unwrap();
            assert!(c.geometry.raw_capacity() <= 256 << 30, "{name}: {c}");
        }
    }

    #[test]
    fn isp_presets_follow_scan_paper_table1() {
        for (name, ch) in [("isp-ch8", 8), ("isp-ch16", 16)] {
            let c = DeviceConfig::preset(name).unwrap();
            let g = &c.geometry;
            assert_eq!((g.channels, g.ways, g.dies_per_chip), (ch, 8, 1), "{name}");
            assert_eq!(g.page_size, 8192, "{name}");
            assert_eq!(c.flash.t_read_ns(0), 50_000, "{name}");
            assert_eq!(
                c.channel.rate_mt_s, 100.0,
                "{name}: default NAND speed (§5.2.2)"
            );
            assert_eq!(
                (c.cpu.cores, c.cpu.clock_mhz),
                (1, 200.0),
                "{name}: one 200 MHz ARM9"
            );
            assert_eq!(c.host.clock_mhz, 2260.0, "{name}: 2.26 GHz Xeon (§5.1)");
        }
    }

    #[test]
    fn isp_host_link_options_match_scan_paper_table4() {
        // Table 4: SATA 2.0 / SATA 3.0 / PCIe move 2.93e6 / 5.86e6 / 6.25e7 records of 128 B.
        for (mb_s, records) in [(375, 2.93e6), (750, 5.86e6), (8000, 6.25e7)] {
            let c = preset_with("isp-ch8", &[&format!("host_link.bandwidth_mb_s={mb_s}")]);
            assert!(
                close(c.host_link.rate().bytes_per_s() / 128.0, records, 0.005),
                "{mb_s}"
            );
        }
    }

    #[test]
    fn smart_ssd_energy_matches_the_papers_power_levels() {
        let c = DeviceConfig::preset("smart-ssd-sas").unwrap();
        let e = &c.energy;
        let idle_w = (e.nand_idle_mw + e.controller_idle_mw + e.host_link_idle_mw) / 1e3;
        let page = c.geometry.page_size as f64;
        let flash_j_per_b =
            e.read_page_uj * 1e-6 / page + (e.channel_pj_per_byte + e.dram_pj_per_byte) * 1e-12;
        // §4.2.1 / Table 2: regular SSD, 1,044 J over 207 s while streaming 110 GB to the host.
        let ssd_w = idle_w + 110e9 / 207.0 * (flash_j_per_b + e.host_link_pj_per_byte * 1e-12);
        assert!(close(ssd_w, 1044.0 / 207.0, 0.10), "{ssd_w}");
        // Smart SSD: 522 J over 78 s scanning 110 GB inside with all ARM cores busy.
        let cpu_w = c.cpu.cores as f64 * c.cpu.clock_mhz * 1e6 * e.cpu_nj_per_cycle * 1e-9;
        assert!(cpu_w < 5.0, "§4.3: the ARM cores draw less than 5 W");
        let smart_w = idle_w + 110e9 / 78.0 * flash_j_per_b + cpu_w;
        assert!(close(smart_w, 13e3 / 24.9 / 78.0, 0.10), "{smart_w}");
        // §4.3: host CPU about 65 W (all 8 cores busy); §4.1.2: 235 W idle system.
        let host_cpu_w =
            c.host.cores as f64 * c.host.clock_mhz * 1e6 * e.host_cpu_nj_per_cycle * 1e-9;
        assert!(close(host_cpu_w, 65.0, 0.05), "{host_cpu_w}");
        assert!(close(idle_w + e.host_idle_mw / 1e3, 235.0, 0.001));
    }

    #[test]
    fn cosmos_openssd_matches_flixr_table2_and_1_38_gb_s() {
        let c = DeviceConfig::preset("cosmos-openssd").unwrap();
        let g = &c.geometry;
        // Table 2: 8 channels x 8 ways, 16 KB pages, dual Cortex-A9 @ 1 GHz, 1 GB DDR3-1066.
        assert_eq!((g.channels, g.ways, g.page_size), (8, 8, 16384));
        assert_eq!((c.cpu.cores, c.cpu.clock_mhz), (2, 1000.0));
        assert_eq!((c.dram.size_mib, c.dram.rate_mt_s), (1024, 1066.0));
        assert_eq!((c.host.cores, c.host.clock_mhz), (4, 4000.0));
        // §5: PCIe Gen2 x8 "Max. 4GB/s" is above the 1.38 GB/s sequential read (checked
        // through the scan model's equation 1 in csd-model's tests/presets.rs).
        let link = c.host_link.rate().bytes_per_s();
        assert!(link <= 4e9 && link > 1.38e9);
        // Table 2's 2 TB MLC, cut to 1/16 in blocks per die.
        assert_eq!(g.raw_capacity() * 16, 2 << 40);
    }

    #[test]
    fn ox_westlake_uses_batch_io_table1_units_and_scales_the_2tb_example() {
        let c = DeviceConfig::preset("ox-westlake").unwrap();
        let g = &c.geometry;
        // Table 1: RBLOCK 4 KB, WBLOCK 32 KB, EBLOCK 8 MB, TAG 16 B per RBLOCK.
        assert_eq!(g.sector_size, 4096);
        assert_eq!(g.page_size, 32 << 10);
        assert_eq!(g.block_bytes(), 8 << 20);
        assert_eq!(g.oob_per_sector, 16);
        // §7.2.1: the 2 TB 8-channel device, at 1/8 of its capacity.
        assert_eq!(g.channels, 8);
        let scale = 8;
        assert_eq!(g.raw_capacity() * scale, 2 << 40);
        // §3.2.2 / §6.2: MAP 4 GB (8 B per 4 KiB LPAGE), GBITV 64 MB (1 bit per RBLOCK),
        // WEAR 1 MB (4 B per EBLOCK) for 2 TB -- all divided by the same scale here.
        let rblocks = g.raw_capacity() / g.sector_size as u64;
        assert_eq!(rblocks * 8 * scale, 4 << 30);
        assert_eq!(rblocks / 8 * scale, 64 << 20);
        assert_eq!(g.total_blocks() * 4 * scale, 1 << 20);
        // §8.1.1: Cortex-A72 at 1.8 GHz; Xeon E5-1620 at 3.5 GHz.
        assert_eq!(c.cpu.clock_mhz, 1800.0);
        assert_eq!(c.host.clock_mhz, 3500.0);
        // §7.2.1: MLC endurance 3,000 - 10,000 cycles.
        assert!((3000..=10_000).contains(&c.flash.endurance));
    }

    #[test]
    fn x25e_matches_intel_spec_behind_the_fd_plus_tree_setup() {
        let c = DeviceConfig::preset("x25e-sata").unwrap();
        let g = &c.geometry;
        // SLC, 10 channels, 4 KiB pages, 64 pages = 256 KiB per block, 100k P/E.
        assert_eq!(c.flash.cell, CellType::Slc);
        assert_eq!(g.channels, 10);
        assert_eq!(
            (g.page_size, g.pages_per_block, g.block_bytes()),
            (4096, 64, 256 << 10)
        );
        assert_eq!(c.flash.endurance, 100_000);
        // At least the 32 GB of user capacity.
        assert!(g.raw_capacity() >= 32_000_000_000);
        // SATA 3 Gb/s (its 250 MB/s sequential reads: csd-device's preset_bandwidth test).
        assert!(c.host_link.rate().bytes_per_s() <= 300e6);
        // 4 KiB random reads cap at the spec'd 35,000 IOPS on the link.
        let per_cmd_s = c.host_link.command_overhead_ns() as f64 / 1e9
            + 4096.0 / c.host_link.rate().bytes_per_s();
        assert!(
            close(1.0 / per_cmd_s, 35_000.0, 0.01),
            "{}",
            1.0 / per_cmd_s
        );
        // §5: i7 8-core 2.8 GHz host.
        assert_eq!((c.host.cores, c.host.clock_mhz), (8, 2800.0));
    }
}
