//! `csd repro batch-io`: the evaluation of the batch-io paper (§8.2) with its key-value
//! store on both interfaces: Figure 11 (a–f: read- and write-heavy YCSB without
//! checkpoint or GC, with checkpoints only, with GC only, over host cache sizes, plus
//! In-Mem), Figure 12 (done log records), Figure 13 (checkpoints and GC together),
//! Figure 15 (host CPU spent in GC) and Tables 3 and 4 (user / GC bytes, RA, WA, GC
//! overhead), as a markdown report with PNG and SVG plots and a side-by-side table
//! against the paper's published figures.
//!
//! Every run is one `csd bench ycsb` configuration (crate `kvbench`): a fresh in-memory
//! device of the `ox-westlake` preset sized as §8.2.3 sizes the paper's (10x the dataset,
//! 30% over-provisioning; see `ycsb::device_config`), the records loaded, the cache set,
//! the workload run for a modeled duration: the paper's 300 s at `--scale paper` (10M
//! records), and at the default scale the smallest dataset that sizing allows on the
//! preset, run for one host checkpoint interval (3 s). The store's 1 MiB write buffer is one NVMe-oF/TCP command that crosses as
//! 17 packets; the block interface makes a write context per packet (§8.2.1).
//!
//! The runs of the sweep (and the two of each re-run) go side by side, one per core up to
//! four (`run_all`): each is a fresh device and a single-threaded store on its own
//! virtual clock, so the modeled figures are those of running them one after the other.
//! Figure 13's section names what bounds each run (host CPU or flash dies, from their busy
//! shares), so a ratio far from the paper's shows which resource set it.

use super::plot_err;
use crate::args::{JsonFlag, Seed};
use crate::util::progress_bar;
use crate::ycsb::parse_time_model;
use crate::ycsb::{self, BenchYcsbArgs, CacheSize, Outcome};
use crate::{Comparison, ReproError};
use clap::{Args, ValueEnum};
use csd_kv::Interface;
use csd_kv::ycsb::{KeyDist, Workload};
use csd_paper::PaperValue;
use csd_plot::{BarChart, LineChart, Series};
use csd_sim::events::TimeModel;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

/// Scale of `csd repro batch-io`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scale {
    /// The smallest dataset the paper's device sizing allows on ox-westlake (about 1M
    /// records), each run one host checkpoint interval (3 modeled s).
    Default,
    /// The paper's 10,000,000 records and 300 s per run, a device 10x the dataset.
    Paper,
}

/// Options of `csd repro batch-io`.
#[derive(Args)]
pub struct ReproBatchIoArgs {
    /// Report directory (markdown + PNG + SVG).
    #[arg(long, default_value = "repro/batch-io")]
    out: PathBuf,
    /// Scale: default (minutes here) or paper (10M records, 300 s per run).
    #[arg(long, value_enum, default_value = "default")]
    scale: Scale,
    /// Records (overrides the scale's).
    #[arg(long)]
    records: Option<u64>,
    /// Modeled seconds per run (overrides the scale's run length).
    #[arg(long, conflicts_with = "ops")]
    duration: Option<f64>,
    /// Operations per run (overrides the scale's run length).
    #[arg(long)]
    ops: Option<u64>,
    /// Device raw capacity, GiB (overrides the scale's).
    #[arg(long)]
    device_gib: Option<f64>,
    /// Host cache sizes, percent of the dataset.
    /// Default: the paper's Table 3/4 and Figure 13 points (add 100 for Figure 11's
    /// right end).
    #[arg(long, value_delimiter = ',', default_value = "20,50,80")]
    caches: Vec<f64>,
    /// Write buffers of the host store during a run (see `csd bench ycsb --write-buffers`;
    /// default 0: as many as the I/O queue lets go out; 1: the host waits for each write).
    #[arg(long, default_value_t = 0)]
    write_buffers: u64,
    /// How each run's commands are placed in modeled time: `calendar` or `events` (the
    /// event core: every resource first-come first-served in modeled-arrival order; see
    /// `csd bench ycsb --time-model`, docs/time-model.md).
    #[arg(long, default_value = csd_sim::events::TimeModel::default().name(), value_parser = parse_time_model)]
    time_model: TimeModel,
    /// Override a field of the ox-westlake preset, e.g. --set ftl.serial_contexts=true
    /// (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    #[command(flatten)]
    rng: Seed,
}

/// A published curve: workload, interface, (cache %, ops/s) points.
type PaperCurve = (&'static str, Interface, [(f64, f64); 2]);

/// The paper's Figure 13 end points (ops/s at 20% and 80% cache, §8.2.4).
const PAPER_FIG13: [PaperCurve; 4] = [
    (
        "read-heavy",
        Interface::Block,
        [(20.0, 92e3), (80.0, 366e3)],
    ),
    (
        "read-heavy",
        Interface::Batch,
        [(20.0, 240e3), (80.0, 497e3)],
    ),
    (
        "write-heavy",
        Interface::Block,
        [(20.0, 35e3), (80.0, 119e3)],
    ),
    (
        "write-heavy",
        Interface::Batch,
        [(20.0, 95e3), (80.0, 201e3)],
    ),
];

/// Table 3 (GB: user read, user write, GC read, GC write, reclaimed) and Table 4 (RA,
/// WA, GC overhead) of the paper, write-heavy with aggressive GC, by cache size.
const PAPER_T34: [(f64, Interface, [f64; 5], [f64; 3]); 6] = [
    (
        20.0,
        Interface::Block,
        [19.96, 28.08, 28.78, 3.74, 25.97],
        [2.442, 1.133, 1.252],
    ),
    (
        20.0,
        Interface::Batch,
        [45.89, 57.28, 22.93, 7.54, 56.86],
        [1.500, 1.132, 0.536],
    ),
    (
        50.0,
        Interface::Block,
        [13.16, 22.99, 23.48, 3.58, 19.90],
        [2.784, 1.156, 1.359],
    ),
    (
        50.0,
        Interface::Batch,
        [25.13, 40.96, 17.07, 5.21, 42.16],
        [1.679, 1.127, 0.528],
    ),
    (
        80.0,
        Interface::Block,
        [6.09, 17.58, 17.37, 2.83, 14.07],
        [3.850, 1.161, 1.435],
    ),
    (
        80.0,
        Interface::Batch,
        [10.80, 25.74, 9.84, 3.86, 25.44],
        [1.911, 1.150, 0.538],
    ),
];

/// How long each run of the repro is.
#[derive(Clone, Copy, PartialEq)]
enum RunLength {
    /// This many operations.
    Ops(u64),
    /// This many modeled seconds.
    Secs(f64),
}

impl std::fmt::Display for RunLength {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunLength::Ops(n) => write!(f, "{n} operations"),
            RunLength::Secs(s) => write!(f, "{s} modeled seconds"),
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Durability {
    None,
    CheckpointOnly,
    GcOnly,
    Both,
}

impl Durability {
    fn flags(self) -> (bool, bool) {
        match self {
            Durability::None => (false, false),
            Durability::CheckpointOnly => (true, false),
            Durability::GcOnly => (false, true),
            Durability::Both => (true, true),
        }
    }
    fn label(self) -> &'static str {
        match self {
            Durability::None => "no checkpoint / GC",
            Durability::CheckpointOnly => "checkpoint only",
            Durability::GcOnly => "GC only",
            Durability::Both => "checkpoint + GC",
        }
    }
}

struct Run {
    workload: Workload,
    dur: Durability,
    interface: Interface,
    cache: CacheSize,
    out: Outcome,
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

/// `csd repro batch-io`.
pub fn repro_batch_io(a: &ReproBatchIoArgs) -> Result<Vec<Comparison>, ReproError> {
    let started = Instant::now();
    let (records, length, gib) = sizes(a)?;
    csd_plot::guard_output(&a.out.join("report.md"), &["md"])
        .map_err(|e| ReproError::Usage(e.to_string()))?;
    let gib = match gib {
        Some(g) => g,
        None => paper_device_gib(dataset_bytes(a, records)?),
    };
    let base = base_args(a, records, length, gib);
    let (runs, failed) = sweep(&base, plan(&a.caches))?;
    let cs = explain_misses(&base, &runs, comparisons(&runs, &a.caches))?;
    let wall = started.elapsed().as_secs_f64();
    let mut md = report(a, &runs, &failed, records, length, gib, wall)?;
    let _ = writeln!(
        md,
        "\n## Headlines against the paper\n\n{}",
        csd_paper::markdown(&cs)
    );
    let path = a.out.join("report.md");
    std::fs::write(&path, md).map_err(|source| ReproError::Io {
        path: path.clone(),
        source,
    })?;
    println!("{}", summary(&runs));
    println!(
        "report: {} ({} runs, {:.0} s wall)",
        path.display(),
        runs.len(),
        wall
    );
    Ok(cs)
}

/// The headlines of §8.2 as comparisons, from this run's counters: Figure 11a/11d's
/// batch-over-block ranges at each cache size, Figure 13's end points (ratios of the
/// paper's curves), Table 4's order (block's RA and GC overhead above batch's) and
/// §8.2.1's done records per MiB (about 17x on block).
fn comparisons(runs: &[Run], caches: &[f64]) -> Vec<(Comparison, Option<Key>)> {
    const P: &str = "batch-io";
    let ratio = |w, d, c: f64| {
        let b = find(runs, w, d, Interface::Block, CacheSize::Percent(c))?.modeled_ops();
        let t = find(runs, w, d, Interface::Batch, CacheSize::Percent(c))?.modeled_ops();
        Some(t / b.max(1e-9))
    };
    let mut cs = Vec::new();
    for &c in caches {
        for (w, fig, lo, hi) in [
            (Workload::ReadHeavy, "11a", 1.11, 1.91),
            (Workload::WriteHeavy, "11d", 1.14, 1.68),
        ] {
            if let Some(r) = ratio(w, Durability::None, c) {
                cs.push((
                    Comparison::new(
                        P,
                        format!(
                            "{} batch/block, no ckpt/GC, cache {c}% (Fig. {fig})",
                            w.name()
                        ),
                        PaperValue::range(lo, hi),
                        r,
                    ),
                    Some((w, Durability::None, c)),
                ));
            }
        }
    }
    for (name, _, points) in PAPER_FIG13
        .iter()
        .filter(|(_, i, _)| *i == Interface::Block)
    {
        let batch = PAPER_FIG13
            .iter()
            .find(|(n, i, _)| n == name && *i == Interface::Batch)
            .map(|(_, _, p)| *p);
        let w = if *name == "read-heavy" {
            Workload::ReadHeavy
        } else {
            Workload::WriteHeavy
        };
        for (k, &(c, block_ops)) in points.iter().enumerate() {
            let (Some(r), Some(b)) = (ratio(w, Durability::Both, c), batch) else {
                continue;
            };
            cs.push((
                Comparison::new(
                    P,
                    format!("{name} batch/block, ckpt+GC, cache {c}% (Fig. 13)"),
                    PaperValue::value(b[k].1 / block_ops),
                    r,
                ),
                Some((w, Durability::Both, c)),
            ));
        }
    }
    for &c in caches {
        let f = |i| {
            find(
                runs,
                Workload::WriteHeavy,
                Durability::Both,
                i,
                CacheSize::Percent(c),
            )
            .map(Outcome::paper)
        };
        if let (Some(b), Some(t)) = (f(Interface::Block), f(Interface::Batch)) {
            cs.push((
                Comparison::new(
                    P,
                    format!("RA block/batch, write-heavy, cache {c}% (Table 4)"),
                    PaperValue::above(1.0),
                    b.ra / t.ra.max(1e-9),
                ),
                None,
            ));
            cs.push((
                Comparison::new(
                    P,
                    format!("GC overhead block/batch, write-heavy, cache {c}% (Table 4)"),
                    PaperValue::above(1.0),
                    b.gc_overhead / t.gc_overhead.max(1e-9),
                ),
                None,
            ));
        }
    }
    let per_mib = |i| {
        let (done, bytes) = runs
            .iter()
            .filter(|r| {
                r.interface == i && r.workload == Workload::WriteHeavy && r.dur == Durability::None
            })
            .fold((0u64, 0u64), |(d, b), r| {
                (d + r.out.done_records, b + r.out.dev.host_written)
            });
        (bytes > 0).then(|| done as f64 / mib(bytes))
    };
    if let (Some(b), Some(t)) = (per_mib(Interface::Block), per_mib(Interface::Batch)) {
        cs.push((
            Comparison::new(
                P,
                "done records per MiB, block/batch (§8.2.1)",
                PaperValue::value(17.0),
                b / t.max(1e-9),
            ),
            None,
        ));
    }
    cs
}

/// The runs a batch-over-block headline compares: workload, durability, cache percent.
type Key = (Workload, Durability, f64);

/// A parameter of this run that differs from the paper's platform, re-run at the paper's
/// setting to measure how much of a miss it accounts for.
#[derive(Clone, Copy)]
enum Rerun {
    /// The paper's drive has 8 channels x 8 ways x 2 dies (128 dies); the shrunk device
    /// keeps one die per way and fewer ways (§8.2.3's 10x capacity leaves few blocks per
    /// die otherwise). Used for the runs without GC, whose device size does not matter.
    Parallelism,
    /// The paper runs 300 s on 10M records; this many modeled seconds give the paper's
    /// operations per record (host GC and checkpoints reach their steady state).
    RunLength(f64),
    /// §8.2.1's write path as the paper's text reads: a write's packet contexts one at a
    /// time (`ftl.serial_contexts`) and one host write buffer, whose write the host waits
    /// for (`--write-buffers 1`). Neither is csd's default (docs/ox-log.md).
    WritePath,
}

/// The `--set` that runs a write's packet contexts one at a time.
const SERIAL_CONTEXTS: &str = "ftl.serial_contexts=true";

/// Every headline more than 20% off whose runs can be re-run with one parameter at the
/// paper's setting gets that re-run's figure (csd-paper's "explained" when it lands
/// within): Figure 11's runs without GC at the paper's parallelism, Figure 13's at the
/// paper's operations per record and, one at a time, with §8.2.1's write path as the
/// paper's text reads (contexts one at a time, one write buffer).
fn explain_misses(
    base: &BenchYcsbArgs,
    runs: &[Run],
    cs: Vec<(Comparison, Option<Key>)>,
) -> Result<Vec<Comparison>, ReproError> {
    let paper_len = PAPER_SECS * base.records as f64 / PAPER_RECORDS as f64;
    let mut out = Vec::new();
    for (c, key) in cs {
        let Some((w, d, cache)) = key else {
            out.push(c);
            continue;
        };
        if c.status() != csd_paper::Status::Miss {
            out.push(c);
            continue;
        }
        let mut reruns = Vec::new();
        match d {
            Durability::None => reruns.push(Rerun::Parallelism),
            _ => {
                if base.duration.is_some_and(|s| s < paper_len) {
                    reruns.push(Rerun::RunLength(paper_len));
                }
                let paper_path =
                    base.write_buffers == 1 && base.set.iter().any(|o| o == SERIAL_CONTEXTS);
                if !paper_path {
                    reruns.push(Rerun::WritePath);
                }
            }
        }
        let mut c = c;
        for rerun in reruns {
            if let Some((parameter, setting, r)) = rerun_ratio(base, runs, (w, d, cache), rerun)? {
                c = c.explain(parameter, setting, r);
            }
        }
        out.push(c);
    }
    Ok(out)
}

/// Batch over block for `key`'s runs again with `rerun`'s parameter at the paper's setting,
/// as (parameter, setting, ratio); `None` when a re-run ran out of space.
fn rerun_ratio(
    base: &BenchYcsbArgs,
    runs: &[Run],
    (w, d, c): Key,
    rerun: Rerun,
) -> Result<Option<(String, String, f64)>, ReproError> {
    let cfg = csd_sim::DeviceConfig::preset(&base.preset)?;
    let Some(orig) = find(runs, w, d, Interface::Block, CacheSize::Percent(c)) else {
        return Ok(None);
    };
    let mut args = orig.args.clone();
    let (parameter, setting) = match rerun {
        Rerun::Parallelism => {
            let g = &cfg.geometry;
            args.ways = Some(g.ways);
            args.dies = Some(g.dies_per_chip);
            args.device_gib = 1e6;
            (
                "dies (parallelism)".to_string(),
                format!(
                    "{} channels x {} ways x {} dies, the paper's drive",
                    g.channels, g.ways, g.dies_per_chip
                ),
            )
        }
        Rerun::RunLength(secs) => {
            args.duration = Some(secs);
            args.ops = None;
            (
                "run length".to_string(),
                format!("{secs:.1} modeled s, the paper's operations per record"),
            )
        }
        Rerun::WritePath => {
            args.write_buffers = 1;
            args.set.push(SERIAL_CONTEXTS.to_string());
            (
                "write path".to_string(),
                "contexts one at a time and one write buffer, §8.2.1 as read".to_string(),
            )
        }
    };
    let jobs: Vec<BenchYcsbArgs> = [Interface::Block, Interface::Batch]
        .into_iter()
        .map(|i| {
            eprintln!(
                "re-run: {} {} {} cache {c}% with {parameter} = {setting}",
                w.name(),
                i.name(),
                d.label()
            );
            BenchYcsbArgs {
                interface: i,
                ..args.clone()
            }
        })
        .collect();
    let mut ops = [0.0; 2];
    for (k, r) in run_all(&jobs, |_, _, _| {}).into_iter().enumerate() {
        match r {
            Ok(o) => ops[k] = o.modeled_ops(),
            Err(ReproError::OutOfSpace(why)) => {
                eprintln!("re-run failed: out of space ({why})");
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Some((parameter, setting, ops[1] / ops[0].max(1e-9))))
}

/// Bytes of one record of the paper's dataset: an 8-byte key and a 100-byte value (§8.1.2).
const RECORD_BYTES: u64 = 8 + csd_kv::ycsb::VALUE_LEN as u64;
/// The paper's dataset (§8.1.2) and run length (§8.1.2: 300 s per run).
const PAPER_RECORDS: u64 = 10_000_000;
const PAPER_SECS: f64 = 300.0;
/// §8.2.3: "the SSD capacity was limited to 10 times larger than the dataset size with an
/// over-provisioning of 30%". Read here as raw capacity = 10x the dataset as the store
/// keeps it on the device (its pages after the load), of which the FTL keeps 30% over
/// the logical capacity (`op` 0.30).
const DEVICE_PER_DATASET: u64 = 10;
/// The paper's over-provisioning (§8.2.3).
pub const PAPER_OP: f64 = 0.30;

/// Raw device GiB for a dataset of `bytes` by §8.2.3.
fn paper_device_gib(bytes: u64) -> f64 {
    (bytes * DEVICE_PER_DATASET) as f64 / (1u64 << 30) as f64
}

/// The dataset's size as the store keeps it on the device: its tree pages after loading
/// `records` (measured by a load on a large device before the sweep; 4 KiB pages hold
/// about 24 records, so this is about 1.5x the records' bytes).
fn dataset_bytes(a: &ReproBatchIoArgs, records: u64) -> Result<u64, ReproError> {
    let probe = BenchYcsbArgs {
        interface: Interface::Block,
        checkpoint: false,
        gc: false,
        ops: Some(0),
        duration: None,
        device_gib: 16.0,
        ..base_args(a, records, RunLength::Ops(0), 16.0)
    };
    let out = ycsb::run_once(&probe, &indicatif::ProgressBar::hidden())?;
    Ok(out.dataset_pages * csd_kv::page::PAGE as u64)
}

/// The default scale's records, by a stated rule: the smallest dataset for which the
/// paper's device sizing (10x the dataset, §8.2.3; here the records' own bytes, a lower
/// bound of what the store keeps) gives the ox-westlake preset at least
/// [`ycsb::MIN_BLOCKS_PER_DIE`] erase blocks on every die (the smallest device the
/// shrunk preset can have: one die per channel). Smaller datasets would need a device
/// larger than 10x, i.e. another ratio of live data to free space than the paper's.
fn default_records() -> Result<u64, ReproError> {
    let cfg = csd_sim::DeviceConfig::preset("ox-westlake")?;
    let smallest = ycsb::smallest_device_bytes(&cfg);
    Ok(smallest.div_ceil(RECORD_BYTES * DEVICE_PER_DATASET))
}

/// The default scale's run length, by a stated rule: one host checkpoint interval (the
/// paper's most aggressive, 3 s, §8.2.2), the shortest run in which every durability
/// mechanism Figure 11 compares acts at least once. (Scaling the paper's 300 s by the
/// dataset's share, i.e. the paper's operations per record, gives 29.8 s: 1-2 minutes
/// of wall time per run here, hours for the sweep; `--duration 29.8` runs it.)
fn host_checkpoint_secs() -> f64 {
    csd_kv::StoreConfig::default()
        .checkpoint_interval_ns
        .map_or(3.0, |ns| ns as f64 / 1e9)
}

/// Records, run length and device size: the scale's defaults unless given. Both scales
/// size the device as §8.2.3 does (10x the dataset, 30% over-provisioning) and run each
/// configuration for a modeled duration: the paper's 300 s at `--scale paper`, one host
/// checkpoint interval at the default scale ([`host_checkpoint_secs`]).
fn sizes(a: &ReproBatchIoArgs) -> Result<(u64, RunLength, Option<f64>), ReproError> {
    let records = match (a.records, a.scale) {
        (Some(r), _) => r,
        (None, Scale::Paper) => PAPER_RECORDS,
        (None, Scale::Default) => default_records()?,
    };
    if records == 0 {
        return Err(ReproError::Usage(
            "--records 0: load at least one record".into(),
        ));
    }
    let default_secs = match a.scale {
        Scale::Paper => PAPER_SECS,
        Scale::Default => host_checkpoint_secs(),
    };
    let length = match (a.ops, a.duration) {
        (Some(n), _) => RunLength::Ops(n),
        (_, Some(d)) => RunLength::Secs(d),
        _ => RunLength::Secs(default_secs),
    };
    let gib = a.device_gib;
    for &c in &a.caches {
        if !(c > 0.0 && c <= 100.0) {
            return Err(ReproError::Usage(format!(
                "--caches {c}: each cache size is a percentage in (0, 100]"
            )));
        }
    }
    Ok((records, length, gib))
}

/// The YCSB options every run starts from (each run sets interface, workload, cache and
/// durability).
fn base_args(a: &ReproBatchIoArgs, records: u64, length: RunLength, gib: f64) -> BenchYcsbArgs {
    BenchYcsbArgs {
        interface: Interface::Batch,
        workload: Workload::ReadHeavy,
        records,
        cache: CacheSize::Percent(20.0),
        checkpoint: true,
        gc: true,
        gc_start: 0.5,
        dist: KeyDist::Zipfian(0.99),
        ops: match length {
            RunLength::Ops(n) => Some(n),
            RunLength::Secs(_) => None,
        },
        duration: match length {
            RunLength::Secs(d) => Some(d),
            RunLength::Ops(_) => None,
        },
        wall_duration: None,
        preset: "ox-westlake".into(),
        set: a.set.clone(),
        device_gib: gib,
        ways: None,
        dies: None,
        op: PAPER_OP,
        queue_depth: 64,
        time_model: a.time_model,
        write_buffers: a.write_buffers,
        rng: a.rng,
        compare: Vec::new(),
        report: JsonFlag::default(),
    }
}

/// The runs: Figure 11 (three durability settings) and Figure 13 (both) per workload,
/// interface and cache size, and the in-memory store per workload.
fn plan(caches: &[f64]) -> Vec<(Workload, Durability, Interface, CacheSize)> {
    let mut plan: Vec<(Workload, Durability, Interface, CacheSize)> = Vec::new();
    for w in [Workload::ReadHeavy, Workload::WriteHeavy] {
        for d in [
            Durability::None,
            Durability::CheckpointOnly,
            Durability::GcOnly,
            Durability::Both,
        ] {
            for i in [Interface::Block, Interface::Batch] {
                for &c in caches {
                    plan.push((w, d, i, CacheSize::Percent(c)));
                }
            }
        }
        plan.push((w, Durability::None, Interface::Batch, CacheSize::InMemory));
    }
    plan
}

/// The device of the runs without GC, as (GiB, ways): §8.2.3 limits the capacity to 10x
/// the dataset only to make GC run; without GC the paper's drive was its full 2 TB, and
/// a host log that may not be reclaimed must hold every write of the run. So those runs
/// get the largest device the shrunk preset has at the same ways per channel as the GC
/// runs' (the same parallelism; in memory only written pages take room).
fn no_gc_device(gc_gib: f64) -> Result<(f64, u32), ReproError> {
    let cfg = csd_sim::DeviceConfig::preset("ox-westlake")?;
    let ways = ycsb::shrink_config(cfg.clone(), gc_gib)?.geometry.ways;
    let full = ycsb::shrink_config_ways(cfg, 1e6, Some(ways))?;
    Ok((
        full.geometry.raw_capacity() as f64 / (1u64 << 30) as f64,
        ways,
    ))
}

/// Runs of a sweep that go at once, at most: one per core up to this many (each run holds
/// its own in-memory device, so this bounds the memory of the sweep).
const MAX_PARALLEL_RUNS: usize = 4;

/// Peak resident bytes of one run per record loaded, to size how many runs go at once:
/// the in-memory device keeps every page written until its GC reclaims it, so a run
/// holds up to its device (10x the dataset) in memory. Measured 2026-12-01 (release,
/// ox-westlake, 20% cache, 3 modeled s): 1M records, 1.5 GiB device, 1.27-1.34 GB;
/// 10M records, 16 GiB device (the paper's scale), 19.8-21.9 GB. The larger per record.
const RUN_BYTES_PER_RECORD: f64 = 2_200.0;

/// How many runs go at once: one per core, at most [`MAX_PARALLEL_RUNS`] and `jobs`,
/// and no more than the memory available holds at `per_run` bytes each (at least one).
fn parallel_runs(cores: usize, jobs: usize, avail: Option<f64>, per_run: f64) -> usize {
    let by_memory = avail.map_or(usize::MAX, |a| (a / per_run.max(1.0)) as usize);
    cores
        .clamp(1, MAX_PARALLEL_RUNS)
        .min(jobs.max(1))
        .min(by_memory)
        .max(1)
}

/// Run every configuration of `jobs`, as many at once as there are cores (at most
/// [`MAX_PARALLEL_RUNS`], and as many as the memory available holds: see
/// [`parallel_runs`]); the results come back in `jobs`' order. Each run is a fresh
/// device and a single-threaded store on its own virtual clock, so running runs side by
/// side changes no modeled figure, only the wall time of the sweep. `done` is called as
/// each run ends, with its index, result and wall seconds.
fn run_all(
    jobs: &[BenchYcsbArgs],
    done: impl Fn(usize, &Result<Outcome, ReproError>, f64) + Sync,
) -> Vec<Result<Outcome, ReproError>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Mutex, PoisonError};
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Result<Outcome, ReproError>>>> =
        jobs.iter().map(|_| Mutex::new(None)).collect();
    let per_run = jobs
        .iter()
        .map(|a| a.records as f64 * RUN_BYTES_PER_RECORD)
        .fold(0.0, f64::max);
    let workers = parallel_runs(
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        jobs.len(),
        crate::available_memory(),
        per_run,
    );
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                let bar = indicatif::ProgressBar::hidden();
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some(a) = jobs.get(k) else { break };
                    let t0 = Instant::now();
                    let r = ycsb::run_once(a, &bar);
                    done(k, &r, t0.elapsed().as_secs_f64());
                    *slots[k].lock().unwrap_or_else(PoisonError::into_inner) = Some(r);
                }
            });
        }
    });
    slots
        .into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(PoisonError::into_inner)
                .unwrap_or_else(|| Err(ReproError::Usage("a run of the sweep did not end".into())))
        })
        .collect()
}

/// Every planned run, each on a fresh device.
fn sweep(
    base: &BenchYcsbArgs,
    plan: Vec<(Workload, Durability, Interface, CacheSize)>,
) -> Result<(Vec<Run>, Vec<String>), ReproError> {
    let mut failed = Vec::new();
    let no_gc = no_gc_device(base.device_gib)?;
    let outer = progress_bar(Some(plan.len() as u64), "runs");
    let jobs: Vec<BenchYcsbArgs> = plan
        .iter()
        .map(|&(w, d, i, c)| {
            let (checkpoint, gc) = d.flags();
            BenchYcsbArgs {
                interface: i,
                workload: w,
                cache: c,
                checkpoint,
                gc,
                device_gib: if gc { base.device_gib } else { no_gc.0 },
                ways: Some(no_gc.1),
                ..base.clone()
            }
        })
        .collect();
    let what = |&(w, d, i, c): &(Workload, Durability, Interface, CacheSize)| {
        format!(
            "{} {} {} cache {}",
            w.name(),
            i.name(),
            d.label(),
            c.label()
        )
    };
    let finished = std::sync::atomic::AtomicUsize::new(0);
    let results = run_all(&jobs, |k, r, secs| {
        let n = finished.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        outer.set_message(what(&plan[k]));
        outer.inc(1);
        if let Ok(out) = r
            && !std::io::IsTerminal::is_terminal(&std::io::stderr())
        {
            eprintln!(
                "run {n}/{}: {}: {:.0} modeled ops/s ({secs:.1} s)",
                plan.len(),
                what(&plan[k]),
                out.modeled_ops(),
            );
        }
    });
    let mut runs = Vec::new();
    for (&(w, d, i, c), r) in plan.iter().zip(results) {
        let out = match r {
            Ok(out) => out,
            // A configuration the store cannot sustain on its device is a result of the
            // run (reported), not a reason to lose the others.
            Err(ReproError::OutOfSpace(why)) => {
                let what = format!("{}: out of space ({why})", what(&(w, d, i, c)));
                eprintln!("run failed: {what}");
                failed.push(what);
                continue;
            }
            Err(e) => return Err(e),
        };
        runs.push(Run {
            workload: w,
            dur: d,
            interface: i,
            cache: c,
            out,
        });
    }
    outer.finish_and_clear();
    if runs.is_empty() && !failed.is_empty() {
        return Err(ReproError::OutOfSpace(failed.join("; ")));
    }
    Ok((runs, failed))
}

fn find(runs: &[Run], w: Workload, d: Durability, i: Interface, c: CacheSize) -> Option<&Outcome> {
    runs.iter()
        .find(|r| r.workload == w && r.dur == d && r.interface == i && r.cache == c)
        .map(|r| &r.out)
}

fn in_mem(runs: &[Run], w: Workload) -> Option<f64> {
    runs.iter()
        .find(|r| r.workload == w && r.cache == CacheSize::InMemory)
        .map(|r| r.out.modeled_ops())
}

/// The Figure 13 table printed at the end of the run (and in the report).
fn summary(runs: &[Run]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| workload | cache | block ops/s | batch ops/s | batch / block | paper block | paper batch | paper ratio |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
    for w in [Workload::ReadHeavy, Workload::WriteHeavy] {
        let caches: Vec<CacheSize> = runs
            .iter()
            .filter(|r| {
                r.workload == w && r.dur == Durability::Both && r.interface == Interface::Block
            })
            .map(|r| r.cache)
            .collect();
        for c in caches {
            let b = find(runs, w, Durability::Both, Interface::Block, c).map(Outcome::modeled_ops);
            let t = find(runs, w, Durability::Both, Interface::Batch, c).map(Outcome::modeled_ops);
            let pct = match c {
                CacheSize::Percent(p) => p,
                CacheSize::InMemory => 100.0,
            };
            let paper = |i: Interface| {
                PAPER_FIG13
                    .iter()
                    .find(|(n, pi, _)| *n == w.name() && *pi == i)
                    .and_then(|(_, _, pts)| pts.iter().find(|(x, _)| *x == pct))
                    .map(|(_, y)| *y)
            };
            let (pb, pt) = (paper(Interface::Block), paper(Interface::Batch));
            let f = |v: Option<f64>| v.map_or("–".into(), |v| format!("{:.0}", v));
            let r = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(a), Some(b)) if a > 0.0 => format!("{:.2}x", b / a),
                _ => "–".into(),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                w.name(),
                c.label(),
                f(b),
                f(t),
                r(b, t),
                f(pb),
                f(pt),
                r(pb, pt)
            );
        }
    }
    s
}

fn report(
    a: &ReproBatchIoArgs,
    runs: &[Run],
    failed: &[String],
    records: u64,
    length: RunLength,
    gib: f64,
    wall: f64,
) -> Result<String, ReproError> {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# batch-io §8: the key-value store on the block and batch interfaces\n"
    );
    let _ = writeln!(
        md,
        "{records} records (8-byte keys, 100-byte values), {length} per run, scrambled zipfian (theta 0.99), \
         the ox-westlake preset cut to about {gib} GiB in memory (see Configuration). Figures are modeled ops/s from the \
         store's virtual clock; every number comes from counters the store and the device kept during the run.\n"
    );
    let c = Ctx {
        a,
        runs,
        failed,
        records,
        length,
        gib,
        wall,
    };
    figure11(&mut md, &c)?;
    figure12(&mut md, &c)?;
    flash_time(&mut md, &c)?;
    figure13(&mut md, &c)?;
    figure15(&mut md, &c)?;
    tables34(&mut md, &c)?;
    differences(&mut md, &c)?;
    configuration(&mut md, &c)?;
    Ok(md)
}

/// What every section of the report reads: the options and the runs.
#[derive(Clone, Copy)]
struct Ctx<'a> {
    a: &'a ReproBatchIoArgs,
    runs: &'a [Run],
    /// Configurations that ran out of space, with the store's message.
    failed: &'a [String],
    records: u64,
    length: RunLength,
    gib: f64,
    wall: f64,
}

/// Figure 11: throughput by host cache size, per panel (a-f), block against batch,
/// with the in-memory store for reference.
fn figure11(md: &mut String, c: &Ctx) -> Result<(), ReproError> {
    let Ctx { a, runs, .. } = *c;
    let pcts: Vec<f64> = a.caches.clone();
    let _ = writeln!(md, "## Figure 11: throughput by host cache size\n");
    let panels = [
        ("a", Workload::ReadHeavy, Durability::None),
        ("b", Workload::ReadHeavy, Durability::CheckpointOnly),
        ("c", Workload::ReadHeavy, Durability::GcOnly),
        ("d", Workload::WriteHeavy, Durability::None),
        ("e", Workload::WriteHeavy, Durability::CheckpointOnly),
        ("f", Workload::WriteHeavy, Durability::GcOnly),
    ];
    let _ = writeln!(
        md,
        "| panel | workload | setting | cache | block ops/s | batch ops/s | batch / block |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|");
    for (p, w, d) in panels {
        let mut chart = LineChart::new(
            format!("Figure 11{p}: {} YCSB, {}", w.name(), d.label()),
            "host cache, % of the dataset",
            "modeled ops/s",
        );
        for (k, i) in [Interface::Block, Interface::Batch].into_iter().enumerate() {
            let pts: Vec<(f64, f64)> = pcts
                .iter()
                .filter_map(|&c| {
                    find(runs, w, d, i, CacheSize::Percent(c)).map(|o| (c, o.modeled_ops()))
                })
                .collect();
            // A configuration whose runs all failed (reported below) has no curve.
            if !pts.is_empty() {
                chart = chart
                    .with_series(Series::solid(format!("BwTree {}", i.name()), pts).with_color(k));
            }
        }
        if let Some(m) = in_mem(runs, w) {
            let lo = pcts.iter().cloned().fold(f64::INFINITY, f64::min);
            let hi = pcts.iter().cloned().fold(0.0, f64::max);
            chart =
                chart.with_series(Series::dashed("In-Mem", vec![(lo, m), (hi, m)]).with_color(2));
        }
        let stem = format!("fig11{p}");
        chart.write(&a.out, &stem).map_err(plot_err)?;
        for &c in &pcts {
            let b =
                find(runs, w, d, Interface::Block, CacheSize::Percent(c)).map(Outcome::modeled_ops);
            let t =
                find(runs, w, d, Interface::Batch, CacheSize::Percent(c)).map(Outcome::modeled_ops);
            if let (Some(b), Some(t)) = (b, t) {
                let _ = writeln!(
                    md,
                    "| 11{p} | {} | {} | {c}% | {b:.0} | {t:.0} | {:.2}x |",
                    w.name(),
                    d.label(),
                    t / b.max(1e-9)
                );
            }
        }
    }
    for w in [Workload::ReadHeavy, Workload::WriteHeavy] {
        if let Some(m) = in_mem(runs, w) {
            let _ = writeln!(
                md,
                "| – | {} | In-Mem | – | {m:.0} | {m:.0} | – |",
                w.name()
            );
        }
    }
    let _ = writeln!(md);
    for p in ["a", "b", "c", "d", "e", "f"] {
        let _ = writeln!(md, "![Figure 11{p}](fig11{p}.png)");
    }
    let _ = writeln!(md);
    Ok(())
}

/// Figure 12: done log records (one per FTL commit) and bytes written, write-heavy
/// without checkpoint or GC.
fn figure12(md: &mut String, c: &Ctx) -> Result<(), ReproError> {
    let Ctx { a, runs, .. } = *c;
    let pcts: Vec<f64> = a.caches.clone();
    let _ = writeln!(
        md,
        "## Figure 12: done log records (one per FTL commit, §4.2.2)\n\n\
         Write-heavy, no checkpoint / GC, per host cache size. The store flushes its 1 MiB write buffer as one \
         command; over NVMe-oF/TCP it crosses as packets of `host_link.packet_bytes`, and the block interface \
         makes one write context, hence one done record, per packet (§8.2.1: 17 per MiB); a batch commits once. \
         The paper reports the counts only as a figure; its text gives the ratio, about 17x per MiB written.\n"
    );
    let cats: Vec<String> = pcts.iter().map(|c| format!("{c}%")).collect();
    let mut bars = BarChart::new("Figure 12: done log records", "done records", cats.clone());
    let _ = writeln!(
        md,
        "| cache | block done records | batch done records | block MiB written | batch MiB written | done records per MiB, block / batch |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|");
    let mut groups: Vec<(String, Vec<f64>)> = Vec::new();
    for i in [Interface::Block, Interface::Batch] {
        let v: Vec<f64> = pcts
            .iter()
            .map(|&c| {
                find(
                    runs,
                    Workload::WriteHeavy,
                    Durability::None,
                    i,
                    CacheSize::Percent(c),
                )
                .map_or(0.0, |o| o.done_records as f64)
            })
            .collect();
        groups.push((format!("BwTree {}", i.name()), v));
    }
    for (k, &c) in pcts.iter().enumerate() {
        let o = |i| {
            find(
                runs,
                Workload::WriteHeavy,
                Durability::None,
                i,
                CacheSize::Percent(c),
            )
        };
        let wb = o(Interface::Block).map_or(0.0, |o| {
            mib(o.host.user_write_bytes + o.host.meta_write_bytes + o.host.gc_write_bytes)
        });
        let wt = o(Interface::Batch).map_or(0.0, |o| {
            mib(o.host.user_write_bytes + o.host.meta_write_bytes + o.host.gc_write_bytes)
        });
        let (db, dt) = (groups[0].1[k], groups[1].1[k]);
        let ratio = (db / wb.max(1e-9)) / (dt / wt.max(1e-9)).max(1e-9);
        let _ = writeln!(
            md,
            "| {c}% | {db:.0} | {dt:.0} | {wb:.0} | {wt:.0} | {ratio:.1}x |"
        );
    }
    for (n, v) in groups {
        bars = bars.with_group(n, v);
    }
    bars.write(&a.out, "fig12").map_err(plot_err)?;
    let _ = writeln!(md, "\n![Figure 12](fig12.png)\n");
    Ok(())
}

/// Where each run's flash time goes: log pages and data programs per MiB the device
/// took from the host, and the dies' busy time (mean over the dies and the busiest die)
/// as shares of the modeled run, from the FTL's counters and the dies' calendars.
fn flash_time(md: &mut String, c: &Ctx) -> Result<(), ReproError> {
    let dcfg = ycsb::device_config("ox-westlake", c.gib)?;
    let chains = dcfg.ftl.log_chains(&dcfg.geometry);
    let _ = writeln!(
        md,
        "## Where the flash time goes\n\n\
         Per run: log pages (redo descriptors and done records) and data programs per MiB written by the \
         host, and the dies' busy time over the modeled run (mean over the dies, and the busiest die; a \
         share above 100% is work booked past the run's end). Every write context forces its redo \
         descriptor to the log before its data (§4.2.1). OX writes log pages into the HOT stream's \
         WBLOCKs, spread over the channels (§4.3: logically sequential, physically scattered); csd's log \
         pages go in turn to {chains} chains of log blocks on {chains} distinct dies (`ftl.log_dies`; \
         ox-westlake: every die; crates/ftl/src/log.rs), each page linked to the next.\n"
    );
    let _ = writeln!(
        md,
        "| workload | durability | interface | cache | log pages / MiB | data programs / MiB | dies busy, mean | busiest die |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|");
    for r in c.runs.iter().filter(|r| r.cache != CacheSize::InMemory) {
        let o = &r.out;
        let written = mib(o.dev.host_written).max(1e-9);
        let run_ns = o.run.modeled_s.unwrap_or(0.0) * 1e9;
        let dies = o.flash.dies.max(1) as f64;
        let share = |ns: f64| {
            if run_ns > 0.0 {
                format!("{:.0}%", 100.0 * ns / run_ns)
            } else {
                "-".into()
            }
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.2} | {:.2} | {} | {} |",
            r.workload.name(),
            r.dur.label(),
            r.interface.name(),
            r.cache.label(),
            o.flash.log_pages as f64 / written,
            o.flash.user_programs as f64 / written,
            share(o.flash.die_busy_ns as f64 / dies),
            share(o.flash.max_die_busy_ns as f64),
        );
    }
    let _ = writeln!(md);
    Ok(())
}

/// Figure 13: end to end (checkpoints and GC on) against the paper's curves, then the summary table.
fn figure13(md: &mut String, c: &Ctx) -> Result<(), ReproError> {
    let Ctx { a, runs, .. } = *c;
    let pcts: Vec<f64> = a.caches.clone();
    let _ = writeln!(
        md,
        "## Figure 13: end to end (checkpoints and GC on)\n\nPaper (§8.2.4): read-heavy block 92K–366K vs batch 240K–497K ops/s; write-heavy 35K–119K vs 95K–201K (20% and 80% cache).\n"
    );
    for (k, w) in [Workload::ReadHeavy, Workload::WriteHeavy]
        .into_iter()
        .enumerate()
    {
        let mut chart = LineChart::new(
            format!(
                "Figure 13{}: {} YCSB, checkpoint + GC",
                ["a", "b"][k],
                w.name()
            ),
            "host cache, % of the dataset",
            "modeled ops/s",
        );
        for (ci, i) in [Interface::Block, Interface::Batch].into_iter().enumerate() {
            let pts: Vec<(f64, f64)> = pcts
                .iter()
                .filter_map(|&c| {
                    find(runs, w, Durability::Both, i, CacheSize::Percent(c))
                        .map(|o| (c, o.modeled_ops()))
                })
                .collect();
            if !pts.is_empty() {
                chart = chart
                    .with_series(Series::solid(format!("csd {}", i.name()), pts).with_color(ci));
            }
            if let Some((_, _, p)) = PAPER_FIG13
                .iter()
                .find(|(n, pi, _)| *n == w.name() && *pi == i)
            {
                chart = chart.with_series(
                    Series::dashed(format!("paper {}", i.name()), p.to_vec()).with_color(ci),
                );
            }
        }
        chart
            .write(&a.out, &format!("fig13{}", ["a", "b"][k]))
            .map_err(plot_err)?;
    }
    md.push_str(&summary(runs));
    let _ = writeln!(
        md,
        "\n![Figure 13a](fig13a.png) ![Figure 13b](fig13b.png)\n"
    );
    bounds(md, runs);
    Ok(())
}

/// A resource busy for at least this share of a run's modeled time bounds its throughput
/// (a stated threshold for the report's "bound" column, not fitted to any figure).
const SATURATED: f64 = 0.8;

/// What bounds a run, from its counters: the host thread (busy share of the modeled run)
/// or the flash dies (mean busy share), whichever is busier, when it is at least
/// [`SATURATED`]; otherwise neither (the run waits on latency).
fn bound(host_busy: f64, dies_busy: f64) -> &'static str {
    if host_busy.max(dies_busy) < SATURATED {
        "neither (latency)"
    } else if dies_busy >= host_busy {
        "flash dies"
    } else {
        "host CPU"
    }
}

/// Figure 13's runs by what they spent: the host thread's busy share (and its GC and
/// checkpoint parts, Figure 15's split), the dies' mean and busiest busy share, and the
/// resource that bounds the run ([`bound`]). When both interfaces of a cache size are bound
/// by the same resource their ratio is that resource's work per operation, whatever the
/// rest of the write path costs.
fn bounds(md: &mut String, runs: &[Run]) {
    let _ = writeln!(
        md,
        "What bounds each run (checkpoint + GC; busy shares of the modeled run from the \
         host clock's and the dies' counters; bound = the busier of host CPU and dies when \
         at or above {:.0}%; the last two columns count the device's resource bookings that \
         waited behind an operation which arrived later but was booked first, where the \
         time model is not first-come first-served (docs/time-model.md), and the dies' share \
         of such waits in all their waiting):\n",
        SATURATED * 100.0
    );
    let _ = writeln!(
        md,
        "| workload | cache | interface | modeled ops/s | host CPU busy | of it GC | of it checkpoints | dies busy, mean | busiest die | bound | bookings behind a later arrival | their share of the dies' waiting |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in runs.iter().filter(|r| r.dur == Durability::Both) {
        let o = &r.out;
        let (busy, gc, ck) = o.cpu_shares();
        let run_ns = o.run.modeled_s.unwrap_or(0.0) * 1e9;
        let share = |ns: f64| if run_ns > 0.0 { ns / run_ns } else { 0.0 };
        let dies = share(o.flash.die_busy_ns as f64 / o.flash.dies.max(1) as f64);
        let _ = writeln!(
            md,
            "| {} | {} | {} | {:.0} | {:.0}% | {:.1}% | {:.1}% | {:.0}% | {:.0}% | {} | {} of {} ({:.3}%) | {:.0}% |",
            r.workload.name(),
            r.cache.label(),
            r.interface.name(),
            o.modeled_ops(),
            busy * 100.0,
            gc * 100.0,
            ck * 100.0,
            dies * 100.0,
            share(o.flash.max_die_busy_ns as f64) * 100.0,
            bound(busy, dies),
            o.flash.inversions(),
            o.flash.bookings(),
            o.flash.inversion_share() * 100.0,
            o.flash.die_inversion_wait_share() * 100.0,
        );
    }
    let _ = writeln!(md);
}

/// Figure 15: the host CPU's share spent in GC and checkpoints, write-heavy at the cache
/// size closest to 50%.
fn figure15(md: &mut String, c: &Ctx) -> Result<(), ReproError> {
    let Ctx { a, runs, .. } = *c;
    let pcts: Vec<f64> = a.caches.clone();
    let _ = writeln!(
        md,
        "## Figure 15: host CPU spent in GC\n\nWrite-heavy, 50% cache (or the closest measured). Paper: durable throughput about 2/3 of the non-durable one on the block interface, and about 10% of the host CPU in GC, work the batch interface moves into the device.\n"
    );
    let c50 = pcts
        .iter()
        .cloned()
        .min_by(|x, y| (x - 50.0).abs().total_cmp(&(y - 50.0).abs()))
        .unwrap_or(50.0);
    let _ = writeln!(
        md,
        "| interface | setting | modeled ops/s | host busy | GC share of host CPU | checkpoint share |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|");
    let mut cats15 = Vec::new();
    let (mut user, mut gcs, mut cks) = (Vec::new(), Vec::new(), Vec::new());
    for i in [Interface::Block, Interface::Batch] {
        for d in [Durability::None, Durability::Both] {
            if let Some(o) = find(runs, Workload::WriteHeavy, d, i, CacheSize::Percent(c50)) {
                let (busy, g, ck) = o.cpu_shares();
                let _ = writeln!(
                    md,
                    "| {} | {} | {:.0} | {:.1}% | {:.1}% | {:.1}% |",
                    i.name(),
                    d.label(),
                    o.modeled_ops(),
                    busy * 100.0,
                    g * 100.0,
                    ck * 100.0
                );
                cats15.push(format!(
                    "{} {}",
                    i.name(),
                    if d == Durability::None {
                        "non-durable"
                    } else {
                        "durable"
                    }
                ));
                user.push((1.0 - g - ck) * 100.0);
                gcs.push(g * 100.0);
                cks.push(ck * 100.0);
            }
        }
    }
    if !cats15.is_empty() {
        BarChart::new(
            "Figure 15: host CPU by purpose (write-heavy)",
            "% of host CPU time",
            cats15,
        )
        .with_group("user operations", user)
        .with_group("host GC", gcs)
        .with_group("host checkpoints", cks)
        .write(&a.out, "fig15")
        .map_err(plot_err)?;
        let _ = writeln!(md, "\n![Figure 15](fig15.png)\n");
    }
    Ok(())
}

/// Tables 3 and 4: data moved, RA, WA and GC overhead beside the paper's.
fn tables34(md: &mut String, c: &Ctx) -> Result<(), ReproError> {
    let Ctx { runs, .. } = *c;
    let _ = writeln!(
        md,
        "## Tables 3 and 4: data moved, RA, WA and GC overhead\n\nWrite-heavy, checkpoint + GC (aggressive: 50%). GC = host GC + device GC. \
         RA (WA) = (user + GC read (write)) / user read (write); GC overhead = (GC read + GC write) / reclaimed. \
         The paper's GB are for 300 s at its throughput; compare the ratios.\n"
    );
    let _ = writeln!(
        md,
        "| cache | interface | user read MiB | user write MiB | GC read MiB | GC write MiB | reclaimed MiB | RA | WA | GC overhead | paper RA | paper WA | paper GC overhead |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for &(c, i, _, t4) in &PAPER_T34 {
        if let Some(o) = find(
            runs,
            Workload::WriteHeavy,
            Durability::Both,
            i,
            CacheSize::Percent(c),
        ) {
            let p = o.paper();
            let _ = writeln!(
                md,
                "| {c}% | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
                i.name(),
                mib(p.user_read),
                mib(p.user_write),
                mib(p.gc_read),
                mib(p.gc_write),
                mib(p.reclaimed),
                p.ra,
                p.wa,
                p.gc_overhead,
                t4[0],
                t4[1],
                t4[2]
            );
        }
    }
    let _ = writeln!(
        md,
        "\nPaper Table 3 (GB): user read, user write, GC read, GC write, reclaimed:\n"
    );
    for &(c, i, t3, _) in &PAPER_T34 {
        let _ = writeln!(
            md,
            "* {c}% {}: {} / {} / {} / {} / {}",
            i.name(),
            t3[0],
            t3[1],
            t3[2],
            t3[3],
            t3[4]
        );
    }
    Ok(())
}

/// Where the figures differ from the paper, and which parameters move them.
fn differences(md: &mut String, c: &Ctx) -> Result<(), ReproError> {
    let Ctx {
        runs,
        records,
        gib,
        length,
        ..
    } = *c;
    let _ = writeln!(md, "\n## Scale and mechanisms measured in this run\n");
    let raw = ycsb::device_config("ox-westlake", gib)?
        .geometry
        .raw_capacity();
    let pages = runs
        .iter()
        .map(|r| r.out.dataset_pages * csd_kv::page::PAGE as u64)
        .max()
        .unwrap_or(0);
    let _ = writeln!(
        md,
        "* **Scale.** {records} records ({:.1}% of the paper's 10M; {:.0} MiB of records, \
         {:.0} MiB of store pages after the load) on a {:.2} GiB device, {:.1}x the store's \
         pages (§8.2.3: 10x, over-provisioning {PAPER_OP}; asked {gib:.2} \
         GiB, the preset cut to whole blocks and at least {} per die); runs without GC on \
         {:.0} GiB at the same ways (the 10x limit is for GC runs; a host log that is never \
         reclaimed must hold the run); {length} per run (the paper: 300 s). Parameters: `--records`, `--device-gib`, `--duration` (`--scale \
         paper` sets the paper's values).",
        records as f64 * 100.0 / PAPER_RECORDS as f64,
        mib(records * RECORD_BYTES),
        mib(pages),
        raw as f64 / (1u64 << 30) as f64,
        raw as f64 / pages.max(1) as f64,
        ycsb::MIN_BLOCKS_PER_DIE,
        no_gc_device(gib)?.0,
    );
    // Mechanisms, summed over the runs of each interface (counters of this run).
    for i in [Interface::Block, Interface::Batch] {
        let of = |f: &dyn Fn(&Outcome) -> u64| -> u64 {
            runs.iter()
                .filter(|r| r.interface == i && r.cache != CacheSize::InMemory)
                .map(|r| f(&r.out))
                .sum()
        };
        let written = of(&|o| o.dev.host_written);
        let done = of(&|o| o.done_records);
        let _ = writeln!(
            md,
            "* **{}**: {done} done records for {:.0} MiB written by the host ({:.2} per MiB); \
             device GC read {:.0} MiB and wrote {:.0} MiB; host GC wrote {:.0} MiB; {} host \
             checkpoints.",
            i.name(),
            mib(written),
            done as f64 / mib(written).max(1e-9),
            mib(of(&|o| o.dev.gc_read)),
            mib(of(&|o| o.dev.gc_written)),
            mib(of(&|o| o.host.gc_write_bytes)),
            of(&|o| o.host.checkpoints),
        );
    }
    if !c.failed.is_empty() {
        let _ = writeln!(
            md,
            "* **Runs that ran out of space** ({}; their figures are missing above):",
            c.failed.len()
        );
        for f in c.failed {
            let _ = writeln!(md, "  * {f}");
        }
    }
    let _ = writeln!(
        md,
        "\nA figure more than 20% from the paper is explained only by a re-run with the named \
         parameter at the paper's value; this report runs one scale. `csd repro all` keeps the \
         scoreboard."
    );
    Ok(())
}

/// The device, store and workload configuration, and the command that reproduces the
/// run.
fn configuration(md: &mut String, c: &Ctx) -> Result<(), ReproError> {
    let Ctx {
        a,
        runs,
        records,
        length,
        gib,
        wall,
        ..
    } = *c;
    let _ = writeln!(md, "\n## Configuration\n");
    let dcfg = ycsb::shrink_config(crate::preset("ox-westlake", &a.set)?, gib)?;
    let g = &dcfg.geometry;
    let contexts = if dcfg.ftl.serial_contexts {
        "a write's packet contexts one at a time (`ftl.serial_contexts`, §8.2.1)"
    } else {
        "a write's packet contexts overlapping"
    };
    let buffers = match a.write_buffers {
        0 => "as many write buffers in flight as the I/O queue allows".to_string(),
        1 => "one write buffer (the host waits for each write it seals to be acknowledged)"
            .to_string(),
        n => format!("{n} write buffers (the host waits when all are in flight)"),
    };
    let _ = writeln!(
        md,
        "* device: ox-westlake, {} channels x {} ways x {} dies, {} blocks of {} pages of {} KiB per die ({:.2} GiB raw), op {}, the log over {} dies, {contexts}, in memory, virtual clock\n\
         * store: 4 KiB pages, 1 MiB write buffer, {buffers} during the runs (the load: as many as the queue allows), queue depth 64, host checkpoint every 3 modeled s (block), host GC from 50% of the host log used, device GC from 50% used when GC is on\n\
         * YCSB: {records} records, {length} per run, zipfian theta 0.99, read-heavy = 19 reads then 1 update, write-heavy = 19 updates then 1 read\n\
         * time model: {} (the load on calendars)\n\
         * seed {}; wall time {wall:.0} s for {} runs\n\n\
         Reproduce: `{}`",
        g.channels,
        g.ways,
        g.dies_per_chip,
        g.blocks_per_plane,
        g.pages_per_block,
        g.page_size / 1024,
        g.raw_capacity() as f64 / (1u64 << 30) as f64,
        PAPER_OP,
        dcfg.ftl.log_chains(g),
        match a.time_model {
            TimeModel::Calendar => "calendar (each resource books an operation when code asks)",
            TimeModel::Events =>
                "events (every resource first-come first-served in modeled-arrival order)",
        },
        a.rng.seed,
        runs.len(),
        crate::reproduce::line(),
    );
    Ok(())
}

#[cfg(test)]
mod bound_tests {
    use super::{MAX_PARALLEL_RUNS, RUN_BYTES_PER_RECORD, bound, parallel_runs};

    #[test]
    fn runs_go_side_by_side_only_as_far_as_memory_holds_them() {
        let gb = 1e9;
        // The default scale (about 1M records) on this 2-core, 23 GB machine: one per core.
        assert_eq!(
            parallel_runs(2, 24, Some(23.0 * gb), 1e6 * RUN_BYTES_PER_RECORD),
            2
        );
        // The paper's 10M records: one at a time (two OOM-killed a run, 2026-12-01).
        assert_eq!(
            parallel_runs(2, 24, Some(23.0 * gb), 1e7 * RUN_BYTES_PER_RECORD),
            1
        );
        // Less memory than one run needs still runs one (the run itself may then fail).
        assert_eq!(parallel_runs(8, 24, Some(1.0 * gb), 22.0 * gb), 1);
        // Unknown memory: cores, at most MAX_PARALLEL_RUNS, at most the jobs.
        assert_eq!(parallel_runs(16, 24, None, 22.0 * gb), MAX_PARALLEL_RUNS);
        assert_eq!(parallel_runs(16, 3, None, 1.0), 3);
        assert_eq!(parallel_runs(0, 0, Some(0.0), 0.0), 1);
    }

    #[test]
    fn the_busier_resource_at_or_above_the_threshold_bounds_a_run() {
        // Counters of the default scale's read-heavy 20% runs (2026-11-29): host 31%, dies 94%.
        assert_eq!(bound(0.31, 0.94), "flash dies");
        // The same runs on 64 dies: host 88%, dies 32%.
        assert_eq!(bound(0.88, 0.32), "host CPU");
        assert_eq!(bound(0.85, 0.85), "flash dies");
        assert_eq!(bound(0.79, 0.5), "neither (latency)");
        assert_eq!(bound(0.8, 0.2), "host CPU");
    }
}

/// Direction tests at a small scale (virtual time, deterministic): each assertion is a
/// headline of the paper whose direction must not flip: batch beats block on write-heavy
/// YCSB (Figure 11d/13), the block interface makes about 17x more done log records per MiB
/// (§8.2.1, Figure 12), and block's read amplification and GC overhead are above batch's
/// (Table 4). (A unit-test module, so no test binary of its own is linked.)
#[cfg(test)]
mod direction_tests {
    use crate::ycsb::{BenchYcsbArgs, CacheSize, Outcome, run_once};
    use csd_kv::Interface;
    use csd_kv::ycsb::{KeyDist, Workload};

    /// One small run on ox-westlake: 60,000 records, `secs` modeled seconds, the paper's 1 MiB
    /// write command (so 17 packets per block write), host and device GC from `gc_start`.
    fn run(interface: Interface, workload: Workload, durable: bool, gc_start: f64) -> Outcome {
        let a = BenchYcsbArgs {
            interface,
            workload,
            records: 60_000,
            cache: CacheSize::Percent(20.0),
            checkpoint: durable,
            gc: durable,
            gc_start,
            dist: KeyDist::Zipfian(0.99),
            ops: None,
            duration: Some(0.3),
            wall_duration: None,
            preset: "ox-westlake".into(),
            set: Vec::new(),
            device_gib: 1.0,
            ways: Some(1),
            dies: None,
            op: 0.3,
            queue_depth: 64,
            time_model: csd_sim::events::TimeModel::default(),
            write_buffers: 0,
            rng: crate::args::Seed { seed: 7 },
            compare: Vec::new(),
            report: crate::args::JsonFlag::default(),
        };
        match run_once(&a, &indicatif::ProgressBar::hidden()) {
            Ok(o) => o,
            Err(e) => panic!("{interface:?} {workload:?} run failed: {e}"),
        }
    }

    #[test]
    fn batch_beats_block_write_heavy_with_17x_fewer_done_records_per_mib() {
        let block = run(Interface::Block, Workload::WriteHeavy, false, 0.5);
        let batch = run(Interface::Batch, Workload::WriteHeavy, false, 0.5);
        let ratio = batch.modeled_ops() / block.modeled_ops();
        assert!(
            ratio > 1.1,
            "write-heavy batch/block {ratio:.2} (paper 1.14-1.68x)"
        );
        let per_mib =
            |o: &Outcome| o.done_records as f64 / (o.dev.host_written as f64 / (1u64 << 20) as f64);
        let (b, t) = (per_mib(&block), per_mib(&batch));
        assert!(
            b / t > 10.0,
            "done records per MiB: block {b:.2}, batch {t:.2} (paper: about 17x)"
        );
        assert!(
            (14.0..=20.0).contains(&b),
            "block: one done record per 64 KiB packet, {b:.2}/MiB"
        );
        // Each write context forces its redo descriptor to the log before its data: a log
        // page per packet on block, per batch on batch (the cost "where the flash time
        // goes" in the report shows).
        let log_per_mib = |o: &Outcome| {
            o.flash.log_pages as f64 / (o.dev.host_written as f64 / (1u64 << 20) as f64)
        };
        let (lb, lt) = (log_per_mib(&block), log_per_mib(&batch));
        assert!(
            lb > 10.0 * lt && lb >= 0.9 * b,
            "log pages per MiB: block {lb:.2}, batch {lt:.2} (done records per MiB on block {b:.2})"
        );
        // The log is spread over every die (ox-westlake's ftl.log_dies, §4.3): no die is
        // much busier than the mean (with one log die: busiest 120% of the run, mean 44%).
        let f = &block.flash;
        let mean = f.die_busy_ns as f64 / f.dies.max(1) as f64;
        assert!(
            (f.max_die_busy_ns as f64) < 1.3 * mean,
            "block: busiest die {} ns against a mean of {mean:.0} ns",
            f.max_die_busy_ns
        );
    }

    #[test]
    fn block_reads_and_collects_more_than_batch_when_gc_runs() {
        // GC from 5% used so that host and device GC both act within a short run.
        let block = run(Interface::Block, Workload::WriteHeavy, true, 0.05);
        let batch = run(Interface::Batch, Workload::WriteHeavy, true, 0.05);
        let (b, t) = (block.paper(), batch.paper());
        assert!(b.gc_read > 0, "host GC ran on block: {:?}", block.host);
        assert!(
            b.ra > t.ra,
            "RA block {:.3} vs batch {:.3} (Table 4)",
            b.ra,
            t.ra
        );
        assert!(
            b.gc_overhead > t.gc_overhead,
            "GC overhead block {:.3} vs batch {:.3} (Table 4)",
            b.gc_overhead,
            t.gc_overhead
        );
        let ratio = batch.modeled_ops() / block.modeled_ops();
        assert!(
            ratio > 1.0,
            "durable write-heavy batch/block {ratio:.2} (paper 2.71x)"
        );
    }
}
