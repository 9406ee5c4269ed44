//! The YCSB run of the batch-io paper's key-value store (the core of `csd bench ycsb`
//! and of `csd repro batch-io`).
//!
//! The store (§8.1.2, crate csd-kv) under YCSB (§8.1.3) on an in-memory device in virtual time, through either interface.
//!
//! One run: format a fresh device (the `ox-westlake` preset by default, shrunk to
//! `--device-gib`), load the records with an unbounded cache, sync, shrink the cache to
//! `--cache` percent of the tree's pages (or keep everything in memory with `--cache
//! in-mem`: nothing is written during the run, the paper's In-Mem line), reset the
//! counters and run the workload. Every figure printed comes from counters the store and
//! the device keep (the device's through its SMART log page, read before and after the
//! run):
//! * modeled ops/s: operations over the store's modeled clock; wall ops/s: over the
//!   emulator's wall time;
//! * latency percentiles from HDR histograms (modeled and wall);
//! * Table 3: user and GC bytes read and written, space GC reclaimed (host GC on the block
//!   interface plus the device's GC on either), and Table 4's read / write amplification
//!   `(user + GC) / user` and GC overhead `(GC read + GC write) / reclaimed`;
//! * host CPU: the modeled busy share of the host thread and the part of it spent in host
//!   GC and checkpoints (Figure 15).
//!
//! `--checkpoint off` turns off host checkpoints (block) and makes device checkpoints
//! rare (every 2^30 log pages); `--gc off` turns off host GC (block). The device's own GC
//! cannot be turned off (it runs only when the device runs short of free blocks): its
//! bytes are printed apart so a reader sees whether it ran.

use crate::ReproError;
use crate::args::{JsonFlag, Seed};

use clap::Args;
use csd_device::{IoTarget, NvmeDevice};
use csd_ftl::{Ftl, FtlConfig};
use csd_host::Client;
use csd_kv::ycsb::{self, KeyDist, Limit, PhaseResult, Workload, YcsbConfig};
use csd_kv::{BlockOptions, CpuSplit, Interface, IoStats, Store, StoreConfig};
use csd_nand::Nand;
use csd_sim::events::{Counters, Recording, TimeModel};
use csd_sim::{DeviceConfig, ResourceClass};
use serde_json::json;

/// Options of `csd bench ycsb`.
#[derive(Args, Clone)]
pub struct BenchYcsbArgs {
    /// Storage interface: block (host log structuring) or batch (in the device).
    #[arg(long, default_value = "batch", value_parser = parse_interface)]
    pub interface: Interface,
    /// Workload: read-heavy, write-heavy (the paper's) or a..f (YCSB's).
    #[arg(long, default_value = "read-heavy", value_parser = parse_workload)]
    pub workload: Workload,
    /// Records loaded (8-byte keys, 100-byte values).
    #[arg(long, default_value_t = 200_000)]
    pub records: u64,
    /// Host cache: a percentage of the tree's pages (`20%`) or `in-mem` (no I/O at all).
    #[arg(long, default_value = "20%", value_parser = parse_cache)]
    pub cache: CacheSize,
    /// Checkpoints: host (block) and device.
    // `action = Set`: a `bool` field is otherwise a bare flag, which refused
    // `--checkpoint off` (and `on`).
    #[arg(long, default_value = "on", value_parser = parse_on_off, action = clap::ArgAction::Set)]
    pub checkpoint: bool,
    /// Host GC (block interface).
    #[arg(long, default_value = "on", value_parser = parse_on_off, action = clap::ArgAction::Set)]
    pub gc: bool,
    /// Host GC starts at this used share of the host log (paper: 0.5 aggressive, 0.7).
    #[arg(long, default_value_t = 0.5)]
    pub gc_start: f64,
    /// Key distribution: zipfian (theta 0.99), zipf:THETA or uniform.
    #[arg(long, default_value = "zipfian", value_parser = parse_dist)]
    pub dist: KeyDist,
    /// Run this many operations (default 200000 when no duration is given).
    #[arg(long, conflicts_with_all = ["duration", "wall_duration"])]
    pub ops: Option<u64>,
    /// Run this many modeled seconds.
    #[arg(long, conflicts_with = "wall_duration")]
    pub duration: Option<f64>,
    /// Run this many wall-clock seconds.
    #[arg(long)]
    pub wall_duration: Option<f64>,
    /// Device preset.
    #[arg(long, default_value = "ox-westlake")]
    pub preset: String,
    /// Override a field of the preset, e.g. --set ftl.serial_contexts=true (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Shrink the preset to about this raw capacity, GiB (in-memory: only written pages
    /// take memory).
    #[arg(long, default_value_t = 2.0)]
    pub device_gib: f64,
    /// Ways per channel of the shrunk device (default: 2, or 1 when 2 would leave fewer
    /// than 16 blocks per die).
    #[arg(long)]
    pub ways: Option<u32>,
    /// Dies per way of the shrunk device (default 1; the preset's own count, e.g. 2 on
    /// ox-westlake, gives the paper's parallelism with `--ways 8`).
    #[arg(long)]
    pub dies: Option<u32>,
    /// Over-provisioning of the device, (physical - logical) / logical.
    #[arg(long, default_value_t = RUN_OP)]
    pub op: f64,
    /// Host I/O queue depth.
    #[arg(long, default_value_t = 64)]
    pub queue_depth: usize,
    /// How the run's commands are placed in modeled time: `calendar` (each resource books
    /// an operation when code asks) or `events` (the event core: every resource serves in
    /// modeled-arrival order; docs/time-model.md). The load always runs on calendars.
    #[arg(long, default_value = csd_sim::events::TimeModel::default().name(), value_parser = parse_time_model)]
    pub time_model: TimeModel,
    /// Write buffers of the host (LLAMA's flush buffers) during the run: with all of them
    /// sealed and unacknowledged the host thread waits for the earliest acknowledgement
    /// (1: for every write it seals, the paper's one 1 MB buffer read as synchronous).
    /// Default 0: as many as the I/O queue lets go out (§8.1.2: the queue "is never
    /// starved"). The load always runs with 0.
    #[arg(long, default_value_t = 0)]
    pub write_buffers: u64,
    #[command(flatten)]
    pub rng: Seed,
    /// Peers to run the same workload against on a real file (wall ops/s): redb, fjall.
    #[arg(long, value_delimiter = ',')]
    pub compare: Vec<String>,
    #[command(flatten)]
    pub report: JsonFlag,
}

impl BenchYcsbArgs {
    /// The store's write-buffer limit of the run (`None`: unbounded, `--write-buffers 0`).
    pub fn write_buffer_limit(&self) -> Option<usize> {
        (self.write_buffers > 0).then_some(self.write_buffers as usize)
    }
}

/// The host cache of a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CacheSize {
    /// This percentage of the tree's pages.
    Percent(f64),
    /// Everything in memory, nothing written (the paper's In-Mem).
    InMemory,
}

impl CacheSize {
    pub fn label(self) -> String {
        match self {
            CacheSize::Percent(p) => format!("{p}%"),
            CacheSize::InMemory => "in-mem".into(),
        }
    }
}

/// `--time-model`'s value.
pub fn parse_time_model(s: &str) -> Result<TimeModel, String> {
    TimeModel::parse(s).ok_or_else(|| format!("time model `{s}`: use calendar or events"))
}
fn parse_interface(s: &str) -> Result<Interface, String> {
    s.parse()
}
fn parse_workload(s: &str) -> Result<Workload, String> {
    s.parse()
}
fn parse_dist(s: &str) -> Result<KeyDist, String> {
    s.parse()
}
fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("`{s}`: use on or off")),
    }
}
pub fn parse_cache(s: &str) -> Result<CacheSize, String> {
    if s == "in-mem" || s == "inmem" {
        return Ok(CacheSize::InMemory);
    }
    match s.trim_end_matches('%').parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 100.0 => Ok(CacheSize::Percent(p)),
        _ => Err(format!(
            "cache `{s}`: use a percentage of the dataset in (0, 100] (e.g. 20%) or in-mem"
        )),
    }
}

/// Device-side counters from the SMART log (bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DeviceBytes {
    pub host_read: u64,
    pub host_written: u64,
    pub gc_read: u64,
    pub gc_written: u64,
    pub reclaimed: u64,
}

impl DeviceBytes {
    fn of(s: &csd_device::SmartLog) -> DeviceBytes {
        DeviceBytes {
            host_read: s.host_read_bytes,
            host_written: s.host_written_bytes,
            gc_read: s.gc_read_bytes,
            gc_written: s.gc_written_bytes,
            reclaimed: s.reclaimed_bytes,
        }
    }
    fn minus(self, o: DeviceBytes) -> DeviceBytes {
        DeviceBytes {
            host_read: self.host_read.saturating_sub(o.host_read),
            host_written: self.host_written.saturating_sub(o.host_written),
            gc_read: self.gc_read.saturating_sub(o.gc_read),
            gc_written: self.gc_written.saturating_sub(o.gc_written),
            reclaimed: self.reclaimed.saturating_sub(o.reclaimed),
        }
    }
}

/// Everything one run measured.
pub struct Outcome {
    pub args: BenchYcsbArgs,
    pub load: PhaseResult,
    pub run: PhaseResult,
    pub dataset_pages: u64,
    pub cache_pages: Option<usize>,
    pub host: IoStats,
    pub cpu: CpuSplit,
    pub dev: DeviceBytes,
    /// FTL commits during the run: each appends one "done" record (§4.2.2, Figure 12).
    pub done_records: u64,
    /// The device's flash work during the run (log pages, programs by purpose).
    pub flash: FlashWork,
    /// The event core's counters of the run (`--time-model events`).
    pub events: Option<Counters>,
}

/// Flash work of a run, from the FTL's counters and the dies' calendars.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FlashWork {
    /// Log pages programmed (redo descriptors and done records, batch-io §4.2).
    pub log_pages: u64,
    /// Metadata programs (log, MAP, checkpoints).
    pub meta_programs: u64,
    /// Programs of host data.
    pub user_programs: u64,
    /// Busy time of the dies, summed, ns.
    pub die_busy_ns: u64,
    /// Busy time of the busiest die, ns.
    pub max_die_busy_ns: u64,
    /// Dies of the device.
    pub dies: u32,
    /// Per resource class (in `ResourceClass::ALL`'s order: dies, channels, DRAM, host
    /// link, embedded cores, host cores), the bookings made and, of them, those that
    /// waited behind an operation which arrived later but was booked first
    /// (`csd_sim::Resource::inversions`: where the calendar is not first-come
    /// first-served, docs/time-model.md).
    pub by_class: [Bookings; 6],
}

impl FlashWork {
    /// The counters so far, with each die's busy time.
    fn of(s: &mut Store<Client>) -> (FlashWork, Vec<u64>) {
        let util = s.device().device().block().utilization(1);
        let ftl = s.device().device().block().ftl();
        let st = ftl.stats();
        let dies: Vec<u64> = ftl.nand().dies().iter().map(|d| d.busy_ns()).collect();
        let mut by_class = [Bookings::default(); 6];
        for u in &util {
            if let Some(i) = ResourceClass::ALL.iter().position(|&c| c == u.class) {
                let b = &mut by_class[i];
                b.ops += u.ops;
                b.inversions += u.inversions;
                b.inversion_wait_ns += u.inversion_ns.0;
                b.inversion_busy_ns += u.inversion_ns.1;
                b.wait_ns += u.wait_ns;
            }
        }
        let w = FlashWork {
            by_class,
            log_pages: st.log_pages,
            meta_programs: st.meta_programs,
            user_programs: st.user_programs,
            die_busy_ns: dies.iter().sum(),
            max_die_busy_ns: dies.iter().copied().max().unwrap_or(0),
            dies: dies.len() as u32,
        };
        (w, dies)
    }

    /// The work between `earlier` and now.
    fn since(s: &mut Store<Client>, (earlier, dies0): &(FlashWork, Vec<u64>)) -> FlashWork {
        let (now, dies) = FlashWork::of(s);
        FlashWork {
            log_pages: now.log_pages.saturating_sub(earlier.log_pages),
            meta_programs: now.meta_programs.saturating_sub(earlier.meta_programs),
            user_programs: now.user_programs.saturating_sub(earlier.user_programs),
            die_busy_ns: now.die_busy_ns.saturating_sub(earlier.die_busy_ns),
            max_die_busy_ns: dies
                .iter()
                .zip(dies0)
                .map(|(a, b)| a.saturating_sub(*b))
                .max()
                .unwrap_or(0),
            dies: now.dies,
            by_class: std::array::from_fn(|i| now.by_class[i].minus(earlier.by_class[i])),
        }
    }

    /// Bookings of every resource of the device.
    pub fn bookings(&self) -> u64 {
        self.by_class.iter().map(|c| c.ops).sum()
    }

    /// Of [`FlashWork::bookings`], those that waited behind a later arrival booked first.
    pub fn inversions(&self) -> u64 {
        self.by_class.iter().map(|c| c.inversions).sum()
    }

    /// Share of the bookings that waited behind a later arrival.
    pub fn inversion_share(&self) -> f64 {
        self.inversions() as f64 / self.bookings().max(1) as f64
    }

    /// Of all waiting on the dies, the share that bookings waiting behind a later
    /// arrival did.
    pub fn die_inversion_wait_share(&self) -> f64 {
        let d = &self.by_class[0];
        debug_assert_eq!(ResourceClass::ALL[0], ResourceClass::Die);
        d.inversion_wait_share()
    }

    /// The classes with any inversion, as `class n of m: mean service S us, mean wait W
    /// us, P% of the class's waiting` parts: the inverted bookings' mean service time
    /// tells which operations waited, their share of all waiting how much of the class's
    /// queueing the booking order accounts for at most.
    pub fn inversions_by_class(&self) -> Vec<String> {
        ResourceClass::ALL
            .iter()
            .zip(&self.by_class)
            .filter(|(_, b)| b.inversions > 0)
            .map(|(c, b)| {
                let n = b.inversions as f64 * 1e3;
                format!(
                    "{} {} of {}: mean service {:.1} us, mean wait {:.1} us, {:.1}% of the class's waiting",
                    c.key(),
                    b.inversions,
                    b.ops,
                    b.inversion_busy_ns as f64 / n,
                    b.inversion_wait_ns as f64 / n,
                    100.0 * b.inversion_wait_share()
                )
            })
            .collect()
    }
}

/// One resource class's bookings over a run (see [`FlashWork::by_class`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bookings {
    /// Bookings made.
    pub ops: u64,
    /// Of them, those that waited behind a later arrival booked first.
    pub inversions: u64,
    /// The inverted bookings' waits (start minus arrival), summed, ns.
    pub inversion_wait_ns: u64,
    /// The inverted bookings' service times, summed, ns.
    pub inversion_busy_ns: u64,
    /// Every booking's wait, summed, ns (what `inversion_wait_ns` is a part of).
    pub wait_ns: u64,
}

impl Bookings {
    /// Of all waiting, the share that bookings waiting behind a later arrival did (0 when
    /// nothing waited).
    pub fn inversion_wait_share(&self) -> f64 {
        self.inversion_wait_ns as f64 / self.wait_ns.max(1) as f64
    }

    /// What `self` gained since `earlier`.
    fn minus(self, earlier: Bookings) -> Bookings {
        Bookings {
            ops: self.ops.saturating_sub(earlier.ops),
            inversions: self.inversions.saturating_sub(earlier.inversions),
            inversion_wait_ns: self
                .inversion_wait_ns
                .saturating_sub(earlier.inversion_wait_ns),
            inversion_busy_ns: self
                .inversion_busy_ns
                .saturating_sub(earlier.inversion_busy_ns),
            wait_ns: self.wait_ns.saturating_sub(earlier.wait_ns),
        }
    }
}

/// Table 3 and Table 4 figures of a run (host GC and device GC together).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PaperFigures {
    pub user_read: u64,
    pub user_write: u64,
    pub gc_read: u64,
    pub gc_write: u64,
    pub reclaimed: u64,
    pub ra: f64,
    pub wa: f64,
    pub gc_overhead: f64,
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

impl Outcome {
    /// Table 3 / Table 4 with the paper's formulas.
    pub fn paper(&self) -> PaperFigures {
        let h = &self.host;
        let user_read = h.user_read_bytes;
        let user_write = h.user_write_bytes;
        let gc_read = h.gc_read_bytes + self.dev.gc_read;
        let gc_write = h.gc_write_bytes + self.dev.gc_written;
        let reclaimed = h.gc_reclaimed_bytes + self.dev.reclaimed;
        PaperFigures {
            user_read,
            user_write,
            gc_read,
            gc_write,
            reclaimed,
            ra: ratio(user_read + gc_read, user_read),
            wa: ratio(user_write + gc_write, user_write),
            gc_overhead: ratio(gc_read + gc_write, reclaimed),
        }
    }

    /// Modeled ops/s of the run.
    pub fn modeled_ops(&self) -> f64 {
        self.run.modeled_ops_per_s().unwrap_or(0.0)
    }

    /// Share of the modeled run the host thread was busy, and the shares of that spent
    /// in host GC and in host checkpoints.
    pub fn cpu_shares(&self) -> (f64, f64, f64) {
        let run_ns = self.run.modeled_s.unwrap_or(0.0) * 1e9;
        let total = self.cpu.total_ns() as f64;
        let busy = if run_ns > 0.0 { total / run_ns } else { 0.0 };
        let part = |x: u64| if total > 0.0 { x as f64 / total } else { 0.0 };
        (busy, part(self.cpu.gc_ns), part(self.cpu.checkpoint_ns))
    }

    /// Share of the modeled run the host thread waited for a free write buffer.
    pub fn buffer_wait_share(&self) -> f64 {
        let run_ns = self.run.modeled_s.unwrap_or(0.0) * 1e9;
        if run_ns > 0.0 {
            self.host.buffer_wait_ns as f64 / run_ns
        } else {
            0.0
        }
    }

    /// The JSON of the run.
    pub fn to_json(&self) -> serde_json::Value {
        let p = self.paper();
        let (busy, gc, ck) = self.cpu_shares();
        let a = &self.args;
        let mut v = json!({
            "interface": a.interface.name(),
            "workload": a.workload.name(),
            "records": a.records,
            "cache": a.cache.label(),
            "cache_pages": self.cache_pages,
            "dataset_pages": self.dataset_pages,
            "checkpoint": a.checkpoint,
            "gc": a.gc,
            "gc_start": a.gc_start,
            "dist": format!("{:?}", a.dist),
            "preset": a.preset,
            "set": a.set,
            "device_gib": a.device_gib,
            "op": a.op,
            "ways": a.ways,
            "seed": a.rng.seed,
            "load": phase_json(&self.load),
            "run": phase_json(&self.run),
            "user_read_bytes": p.user_read,
            "user_write_bytes": p.user_write,
            "gc_read_bytes": p.gc_read,
            "gc_write_bytes": p.gc_write,
            "reclaimed_bytes": p.reclaimed,
            "host_gc_read_bytes": self.host.gc_read_bytes,
            "host_gc_write_bytes": self.host.gc_write_bytes,
            "device_gc_read_bytes": self.dev.gc_read,
            "device_gc_write_bytes": self.dev.gc_written,
            "read_amplification": p.ra,
            "write_amplification": p.wa,
            "gc_overhead": p.gc_overhead,
            "host_cpu_busy_share": busy,
            "host_cpu_gc_share": gc,
            "host_cpu_checkpoint_share": ck,
            "host_checkpoints": self.host.checkpoints,
            "host_gc_victims": self.host.gc_victims,
            "done_records": self.done_records,
            "write_buffers": a.write_buffers,
            "seals": self.host.seals,
            "buffer_waits": self.host.buffer_waits,
            "buffer_wait_share": self.buffer_wait_share(),
        });
        // Set apart: one more key in the literal above passes `json!`'s recursion limit.
        v["device_bookings"] = json!(self.flash.bookings());
        v["order_inversions"] = json!(self.flash.inversions());
        v["time_model"] = json!(self.args.time_model.name());
        if let Some(e) = self.events {
            v["event_core"] = json!(e);
        }
        v["bookings_by_class"] = ResourceClass::ALL
            .iter()
            .zip(&self.flash.by_class)
            .map(|(c, b)| {
                let k = c.key().to_string();
                (
                    k,
                    json!({
                        "bookings": b.ops,
                        "order_inversions": b.inversions,
                        "order_inversion_wait_ns": b.inversion_wait_ns,
                        "order_inversion_busy_ns": b.inversion_busy_ns,
                        "wait_ns": b.wait_ns,
                    }),
                )
            })
            .collect::<serde_json::Map<_, _>>()
            .into();
        v
    }
}

pub fn pct(h: &hdrhistogram::Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1e3
}

pub fn phase_json(r: &PhaseResult) -> serde_json::Value {
    let lat = |h: &hdrhistogram::Histogram<u64>| {
        if h.is_empty() {
            serde_json::Value::Null
        } else {
            json!({"p50_us": pct(h, 0.5), "p95_us": pct(h, 0.95), "p99_us": pct(h, 0.99),
                   "p999_us": pct(h, 0.999), "max_us": h.max() as f64 / 1e3})
        }
    };
    json!({
        "ops": r.ops.total(),
        "reads": r.ops.reads,
        "updates": r.ops.updates,
        "inserts": r.ops.inserts,
        "scans": r.ops.scans,
        "rmws": r.ops.rmws,
        "read_misses": r.ops.read_misses,
        "wall_s": r.wall_s,
        "modeled_s": r.modeled_s,
        "modeled_ops_per_s": r.modeled_ops_per_s(),
        "wall_ops_per_s": r.wall_ops_per_s(),
        "modeled_latency": lat(&r.modeled_latency),
        "wall_latency": lat(&r.wall_latency),
    })
}

fn kv(e: csd_kv::KvError) -> ReproError {
    match e {
        csd_kv::KvError::NoSpace(why) => ReproError::OutOfSpace(why),
        e => ReproError::Usage(format!("key-value store: {e}")),
    }
}

/// The device of a run: the preset shrunk to about `gib` of raw capacity. Page and
/// block sizes, timings, the channel count and the host link stay the preset's; the ways
/// per channel are cut to 2 (1 below 2 GiB) and the dies per chip to 1, then the blocks
/// per die to fit (the in-memory backend keeps each erase block in its own mapping, so
/// the blocks keep the preset's size rather than shrink).
pub fn device_config(preset: &str, gib: f64) -> Result<DeviceConfig, ReproError> {
    shrink_config(DeviceConfig::preset(preset)?, gib)
}

/// Erase blocks per die below which [`shrink_config`] does not cut a device (the FTL's
/// open blocks per stream, GC's free-block reserve and the metadata ring need room on
/// every die).
pub const MIN_BLOCKS_PER_DIE: u32 = 16;

/// The smallest raw capacity, in bytes, that [`shrink_config`] gives `cfg`: one die per
/// channel, [`MIN_BLOCKS_PER_DIE`] blocks each.
pub fn smallest_device_bytes(cfg: &DeviceConfig) -> u64 {
    let g = &cfg.geometry;
    g.channels as u64
        * g.planes_per_die as u64
        * MIN_BLOCKS_PER_DIE as u64
        * g.pages_per_block as u64
        * g.page_size as u64
}

/// [`device_config`] for any config: `cfg` shrunk to about `gib` of raw capacity.
pub fn shrink_config(cfg: DeviceConfig, gib: f64) -> Result<DeviceConfig, ReproError> {
    shrink_config_ways(cfg, gib, None)
}

/// [`shrink_config`] with the ways per channel given (at most the preset's), so that
/// devices of different sizes keep the same parallelism.
pub fn shrink_config_ways(
    cfg: DeviceConfig,
    gib: f64,
    ways: Option<u32>,
) -> Result<DeviceConfig, ReproError> {
    shrink_config_parallel(cfg, gib, ways, None)
}

/// [`shrink_config_ways`] with `dies` dies per way (default 1, at most the preset's).
pub fn shrink_config_parallel(
    mut cfg: DeviceConfig,
    gib: f64,
    ways: Option<u32>,
    dies: Option<u32>,
) -> Result<DeviceConfig, ReproError> {
    if ways == Some(0) {
        return Err(ReproError::Usage(
            "--ways 0: a channel has at least one way".into(),
        ));
    }
    if dies == Some(0) {
        return Err(ReproError::Usage(
            "--dies 0: a way has at least one die".into(),
        ));
    }
    if !(gib > 0.0 && gib.is_finite()) {
        return Err(ReproError::Usage(format!(
            "--device-gib {gib}: use a positive size"
        )));
    }
    let g = &mut cfg.geometry;
    g.dies_per_chip = dies.map_or(1, |d| d.min(g.dies_per_chip));
    let block = g.pages_per_block as u64 * g.page_size as u64;
    let want = gib * (1u64 << 30) as f64;
    let per_die = |ways: u32| {
        let dies =
            g.channels as u64 * ways as u64 * g.dies_per_chip as u64 * g.planes_per_die as u64;
        (want / (dies * block) as f64).round() as u64
    };
    // Two ways per channel, or one when two would leave fewer than the floor per die.
    let floor = MIN_BLOCKS_PER_DIE as u64;
    g.ways = match ways {
        Some(w) => w.min(g.ways),
        None if per_die(2) >= floor => g.ways.min(2),
        None => 1,
    };
    let b = per_die(g.ways);
    g.blocks_per_plane = (b.max(floor) as u32).min(g.blocks_per_plane.max(MIN_BLOCKS_PER_DIE));
    Ok(cfg)
}

/// Over-provisioning of a run's device: enough spare blocks for GC on a small device.
pub const RUN_OP: f64 = 0.25;

/// Run one configuration; `bar` shows progress.
pub fn run_once(a: &BenchYcsbArgs, bar: &indicatif::ProgressBar) -> Result<Outcome, ReproError> {
    let in_mem = a.cache == CacheSize::InMemory;
    let mut s = open_store(a)?;
    bar.set_length(a.records);
    bar.set_position(0);
    bar.set_message(format!("{} load", a.interface.name()));
    // The load is not measured (the paper starts each run from a freshly loaded index):
    // its dirty pages go out when the cache or the write buffer needs it, not by age, so
    // what it writes does not depend on how fast the device is (a slow device would
    // otherwise seal many part-filled buffers and leave the host log full of garbage).
    let age = s.config().max_dirty_age_ns;
    s.set_max_dirty_age_ns(u64::MAX / 4);
    let load = ycsb::load(&mut s, a.records, &mut |n| bar.set_position(n)).map_err(kv)?;
    s.set_max_dirty_age_ns(age);
    let dataset_pages = s.pages();
    let cache_pages = match a.cache {
        CacheSize::Percent(p) => Some(((dataset_pages as f64 * p / 100.0).ceil() as usize).max(1)),
        CacheSize::InMemory => None,
    };
    if !in_mem {
        s.set_cache_pages(cache_pages).map_err(kv)?;
        s.sync().map_err(kv)?;
    }
    // The load (which the paper does not measure) ran with the I/O queue as the only
    // bound on writes in flight; the run uses the write buffers asked for.
    s.set_write_buffers(a.write_buffer_limit());
    let smart0 = if in_mem {
        None
    } else {
        Some(s.smart().map_err(kv)?)
    };
    let commits0 = s.device().device().block().ftl().stats().commits;
    let flash0 = FlashWork::of(&mut s);
    s.reset_stats();
    let cfg = ycsb_config(a);
    bar.set_length(1000);
    bar.set_position(0);
    bar.set_message(format!(
        "{} {} cache {}",
        a.interface.name(),
        a.workload.name(),
        a.cache.label()
    ));
    let rec = (a.time_model == TimeModel::Events)
        .then(Recording::start)
        .flatten();
    let run = ycsb::run(&mut s, &cfg, &mut |f| bar.set_position((f * 1000.0) as u64));
    // `ycsb::run` settled every instant (the store's and the device's) before returning.
    let events = rec.map(|r| r.finish().counters());
    let run = run.map_err(kv)?;
    let st = s.stats();
    let done_records = s
        .device()
        .device()
        .block()
        .ftl()
        .stats()
        .commits
        .saturating_sub(commits0);
    let dev = match smart0 {
        Some(s0) => DeviceBytes::of(&s.smart().map_err(kv)?).minus(DeviceBytes::of(&s0)),
        None => DeviceBytes::default(),
    };
    if run.ops.read_misses > 0 {
        return Err(ReproError::Usage(format!(
            "{} reads found no record: the store lost data",
            run.ops.read_misses
        )));
    }
    Ok(Outcome {
        args: a.clone(),
        load,
        run,
        dataset_pages,
        cache_pages,
        host: st.io,
        cpu: st.cpu,
        dev,
        done_records,
        flash: FlashWork::since(&mut s, &flash0),
        events,
    })
}

/// A fresh in-memory device (shrunk to `--device-gib`, GC and checkpoints as asked)
/// with the store formatted on it; the in-memory store does not persist.
fn open_store(a: &BenchYcsbArgs) -> Result<Store<Client>, ReproError> {
    let dcfg = shrink_config_parallel(
        crate::preset(&a.preset, &a.set)?,
        a.device_gib,
        a.ways,
        a.dies,
    )?;
    if !(a.op > 0.0 && a.op.is_finite()) {
        return Err(ReproError::Usage(format!(
            "--op {}: over-provisioning is a positive share, e.g. 0.3",
            a.op
        )));
    }
    let ftl_cfg = FtlConfig {
        op: a.op,
        // The store's write buffer (1 MiB) is one host command, as in the paper (§8.2.1: one
        // 1 MB NVMe-oF/TCP request, split into packets by the transport, not by the host).
        mdts_sectors: (StoreConfig::default().write_buffer_bytes
            / dcfg.geometry.sector_size as usize)
            .max(1) as u32,
        // GC on: the device's GC also starts at the used share host GC does (the paper's
        // aggressive 50%); GC off: it runs only when the device runs out of free blocks.
        gc_start_used: a.gc.then_some(a.gc_start),
        checkpoint_log_pages: if a.checkpoint {
            FtlConfig::default().checkpoint_log_pages
        } else {
            1 << 30
        },
        ..FtlConfig::default()
    };
    let nand = Nand::new_in_memory(dcfg)?;
    let client = Client::new(NvmeDevice::new(Ftl::format(nand, ftl_cfg)?))?;
    let in_mem = a.cache == CacheSize::InMemory;
    let scfg = StoreConfig {
        interface: a.interface,
        cache_pages: None,
        queue_depth: a.queue_depth,
        write_buffers: None,
        persist: !in_mem,
        block: BlockOptions {
            gc: a.gc,
            gc_start_used: a.gc_start,
            ..BlockOptions::default()
        },
        checkpoint_interval_ns: a
            .checkpoint
            .then_some(StoreConfig::default().checkpoint_interval_ns)
            .flatten(),
        ..StoreConfig::default()
    };
    Store::open(client, scfg).map_err(|f| kv(f.error))
}

/// The YCSB run: `--ops`, else `--duration` (modeled), else `--wall-duration`, else
/// 200,000 operations.
fn ycsb_config(a: &BenchYcsbArgs) -> YcsbConfig {
    let limit = match (a.ops, a.duration, a.wall_duration) {
        (Some(n), _, _) => Limit::Ops(n),
        (_, Some(d), _) => Limit::ModeledSecs(d),
        (_, _, Some(w)) => Limit::WallSecs(w),
        _ => Limit::Ops(200_000),
    };
    YcsbConfig {
        records: a.records,
        workload: a.workload,
        dist: a.dist,
        limit,
        seed: a.rng.seed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: BenchYcsbArgs,
    }

    #[test]
    fn a_runs_bookings_and_inversions_are_counted_per_class_from_where_it_started() {
        let cfg = Cli::try_parse_from([
            "ycsb",
            "--records",
            "2000",
            "--ops",
            "2000",
            "--workload",
            "write-heavy",
        ])
        .unwrap()
        .a;
        let mut s = open_store(&cfg).unwrap();
        ycsb::load(&mut s, cfg.records, &mut |_| {}).unwrap();
        // A cache of a fifth of the tree, as `run_once` sets for `--cache 20%`.
        let pages = (s.pages() as usize).div_ceil(5).max(1);
        s.set_cache_pages(Some(pages)).unwrap();
        s.sync().unwrap();
        let before = FlashWork::of(&mut s);
        assert!(before.0.bookings() > 0, "the load booked resources");
        let run = ycsb::run(&mut s, &ycsb_config(&cfg), &mut |_| {}).unwrap();
        assert_eq!(run.ops.total(), 2000);
        let w = FlashWork::since(&mut s, &before);
        let (after, _) = FlashWork::of(&mut s);
        // The run's part is what the counters gained since the load, class by class.
        for i in 0..6 {
            assert_eq!(w.by_class[i], after.by_class[i].minus(before.0.by_class[i]));
            assert!(w.by_class[i].inversions <= w.by_class[i].ops);
            assert!(w.by_class[i].inversion_wait_ns <= w.by_class[i].wait_ns);
        }
        assert!(w.bookings() > 0 && w.bookings() < after.bookings());
        assert!((0.0..=1.0).contains(&w.inversion_share()));
        assert!((0.0..=1.0).contains(&w.die_inversion_wait_share()));
        assert_eq!(
            w.inversions_by_class().len(),
            w.by_class.iter().filter(|c| c.inversions > 0).count()
        );
    }

    /// Host GC keeps pace with batch-io's write-heavy run at 20% cache over the paper's
    /// operations per record (29.8 modeled s; the default scale's records and device,
    /// 751 segments of host log, 21% of them live). It collected one victim per sealed
    /// buffer and fell behind, and a victim waited for its dirty pages to age out before
    /// it was free: the log ran out of free segments with 79% of its pages dead (the
    /// batch-io re-run failed so).
    #[test]
    fn host_gc_keeps_pace_with_a_write_heavy_run() {
        let cfg = Cli::try_parse_from([
            "ycsb",
            "--interface",
            "block",
            "--workload",
            "write-heavy",
            "--records",
            "994206",
            "--cache",
            "20",
            "--gc-start",
            "0.5",
            "--duration",
            "29.8",
            "--device-gib",
            "1.5497970581054688",
            "--op",
            "0.3",
        ])
        .unwrap()
        .a;
        let out = match run_once(&cfg, &indicatif::ProgressBar::hidden()) {
            Ok(o) => o,
            Err(e) => panic!("the run failed: {e}"),
        };
        let h = &out.host;
        assert!(h.gc_victims > 1000, "{h:?}");
        assert!(
            h.user_write_bytes > 2 * 751 * (1 << 20),
            "the run writes the log over: {h:?}"
        );
        assert!(h.gc_write_bytes < h.user_write_bytes, "{h:?}");
    }

    #[test]
    fn checkpoint_and_gc_take_on_and_off() {
        let c = Cli::try_parse_from(["ycsb", "--checkpoint", "off", "--gc", "off"]).unwrap();
        assert!(!c.a.checkpoint && !c.a.gc);
        let c = Cli::try_parse_from(["ycsb", "--checkpoint=on"]).unwrap();
        assert!(c.a.checkpoint && c.a.gc, "both default to on");
        assert!(Cli::try_parse_from(["ycsb", "--gc", "maybe"]).is_err());
    }

    #[test]
    fn the_smallest_shrunk_device_has_the_floor_on_every_die() {
        let cfg = DeviceConfig::preset("ox-westlake").unwrap();
        let small = smallest_device_bytes(&cfg);
        let g = shrink_config(cfg, small as f64 / (1u64 << 30) as f64)
            .unwrap()
            .geometry;
        assert_eq!(
            (g.ways, g.dies_per_chip, g.blocks_per_plane),
            (1, 1, MIN_BLOCKS_PER_DIE)
        );
        assert_eq!(g.raw_capacity(), small);
    }
}
