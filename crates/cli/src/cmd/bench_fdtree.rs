//! `csd bench fdtree`: the FD+tree paper's §5 harness (one scheme, one workload) on an
//! emulated SSD in paced mode (merges take real time, so threads feel them), through the
//! csd-idxbench harness.
//!
//! Each index gets a fresh in-memory device. The preload (one thread, keys in order)
//! runs in virtual time, so that building a multi-million-key index costs only CPU
//! time; the harness then waits for the preload's merges and the device switches to the
//! `--clock` mode (paced by default) for the timed run, whose latencies and throughput
//! are measured on the wall clock.

use crate::args::comma_list;
use crate::{CliError, ConfigSource};
use clap::{Args, ValueEnum};
use csd_device::NvmeDevice;
use csd_fdtree::{BTree, BTreeConfig, FdConfig, FdTree, Scheme};
use csd_ftl::{Ftl, FtlConfig};
use csd_host::SharedDevice;
use csd_idxbench::harness::{BenchConfig, Phase, Progress};
use csd_idxbench::result::BenchResult;
use csd_idxbench::{BenchIndex, IndexError, repro};
use csd_sim::ClockMode;
use std::path::PathBuf;
use std::sync::Arc;

/// An index under test, as the harness sees it, with its device and the clock the
/// timed run uses (the preload runs in virtual time).
struct FdBench {
    tree: FdTree,
    name: &'static str,
    run_clock: RunClock,
}

/// The device of an index under test and the clock mode of its timed run.
struct RunClock {
    dev: SharedDevice,
    mode: ClockMode,
}

impl RunClock {
    fn start(&self) -> Result<(), IndexError> {
        self.dev.set_clock(self.mode);
        Ok(())
    }
}

pub(crate) fn ie(e: impl std::fmt::Display) -> IndexError {
    IndexError::new(e.to_string())
}

impl BenchIndex for FdBench {
    fn insert(&self, k: u64, v: u64) -> Result<(), IndexError> {
        self.tree.insert(k, v).map_err(ie)
    }
    fn delete(&self, k: u64) -> Result<bool, IndexError> {
        self.tree.delete(k).map_err(ie)
    }
    fn lookup(&self, k: u64) -> Result<Option<u64>, IndexError> {
        self.tree.lookup(k).map_err(ie)
    }
    fn name(&self) -> String {
        self.name.into()
    }
    fn quiesce(&self) -> Result<(), IndexError> {
        self.tree.wait_for_merges().map_err(ie)
    }
    fn start_run(&self) -> Result<(), IndexError> {
        self.tree.reset_peaks();
        self.run_clock.start()
    }
    fn extra_stats(&self) -> Vec<(String, f64)> {
        self.tree.stats().bench_figures()
    }
}

/// The baseline the paper argues against: a B+tree updated in place on the same device.
struct BTreeBench(BTree, RunClock);

impl BenchIndex for BTreeBench {
    fn insert(&self, k: u64, v: u64) -> Result<(), IndexError> {
        self.0.insert(k, v).map_err(ie)
    }
    fn delete(&self, k: u64) -> Result<bool, IndexError> {
        self.0.delete(k).map_err(ie)
    }
    fn lookup(&self, k: u64) -> Result<Option<u64>, IndexError> {
        self.0.lookup(k).map_err(ie)
    }
    fn name(&self) -> String {
        "B+tree".into()
    }
    fn start_run(&self) -> Result<(), IndexError> {
        self.1.start()
    }
    fn extra_stats(&self) -> Vec<(String, f64)> {
        let (r, w) = self.0.io_counts();
        vec![
            ("height".into(), f64::from(self.0.height())),
            ("blocks_read".into(), r as f64),
            ("blocks_written".into(), w as f64),
        ]
    }
}

/// Options shared by the bench and the repro: the device and the tree.
#[derive(Args, Clone)]
pub(crate) struct TreeOpts {
    /// Clock of the timed run: paced (real time, the paper's set-up), paced:SCALE (wall =
    /// modeled x SCALE) or virtual (no waiting; merges cost no wall time). The preload
    /// always runs in virtual time.
    #[arg(long, default_value = "paced", value_parser = crate::args::parse_clock)]
    clock: ClockMode,
    /// Top level L0 in KiB (paper: 256).
    #[arg(long, default_value_t = repro::L0_KIB)]
    l0_kib: usize,
    /// Size ratio k between levels (paper: 24).
    #[arg(long, default_value_t = repro::SIZE_RATIO)]
    size_ratio: u32,
    /// Fraction of L0 at which a merge starts (paper: "close to (but below) full").
    #[arg(long, default_value_t = repro::MERGE_AT)]
    merge_at: f64,
    /// Buffer cache in MiB (paper: 15; the default keeps the paper's ratio of index to
    /// cache for the default index sizes, so lookups read the device).
    #[arg(long, default_value_t = repro::CACHE_MIB)]
    cache_mib: usize,
    /// Log every modification of L0 to the device before acknowledging it (crash
    /// safety; the paper's tree had no redo log, so its figures are without it).
    #[arg(long)]
    durable: bool,
    #[command(flatten)]
    src: ConfigSource,
}

impl TreeOpts {
    /// A fresh in-memory device in virtual time (the preload); the timed run switches
    /// it to `--clock` (see [`RunClock`]).
    fn device(&self) -> Result<(SharedDevice, RunClock), CliError> {
        let cfg = if self.src.given() {
            self.src.load()?
        } else {
            csd_sim::DeviceConfig::preset("x25e-sata")?
        };
        let nand = csd_nand::Nand::new_in_memory(cfg)?;
        let ftl = Ftl::format(nand, FtlConfig::default())?;
        let dev = SharedDevice::new(NvmeDevice::new(ftl), ClockMode::Virtual)?;
        let run_clock = RunClock {
            dev: dev.clone(),
            mode: self.clock,
        };
        Ok((dev, run_clock))
    }

    pub(crate) fn make(&self, scheme: SchemeArg) -> Result<Arc<dyn BenchIndex>, CliError> {
        let (s, name) = match scheme {
            SchemeArg::Xm => (Scheme::Xm, "FD+XM"),
            SchemeArg::Ds => (Scheme::Ds, "FD+DS"),
            SchemeArg::Fc => (Scheme::Fc, "FD+FC"),
            SchemeArg::Btree => {
                let cfg = BTreeConfig {
                    cache_bytes: self.cache_mib << 20,
                    ..BTreeConfig::default()
                };
                let (dev, run_clock) = self.device()?;
                let t = BTree::create(dev, cfg).map_err(|e| CliError::Usage(e.to_string()))?;
                return Ok(Arc::new(BTreeBench(t, run_clock)));
            }
        };
        let cfg = FdConfig {
            scheme: s,
            l0_bytes: self.l0_kib * 1024,
            size_ratio: self.size_ratio,
            cache_bytes: self.cache_mib << 20,
            durable: self.durable,
            merge_at: self.merge_at,
            ..FdConfig::default()
        };
        let (dev, run_clock) = self.device()?;
        let tree = FdTree::create(dev, cfg).map_err(|e| CliError::Usage(e.to_string()))?;
        Ok(Arc::new(FdBench {
            tree,
            name,
            run_clock,
        }))
    }

    pub(crate) fn describe(&self) -> String {
        let clock = match self.clock {
            ClockMode::Virtual => "virtual".to_string(),
            ClockMode::Paced { scale: 1.0 } => "paced".to_string(),
            ClockMode::Paced { scale } => format!("paced:{scale}"),
        };
        format!(
            "--clock {clock} --l0-kib {} --size-ratio {} --merge-at {} --cache-mib {}{} {}",
            self.l0_kib,
            self.size_ratio,
            self.merge_at,
            self.cache_mib,
            if self.durable { " --durable" } else { "" },
            if self.src.given() {
                self.src.describe()
            } else {
                "--preset x25e-sata".into()
            }
        )
    }
}

/// `csd bench fdtree`.
#[derive(Args)]
pub(crate) struct BenchFdtreeArgs {
    /// Concurrency scheme: xm, ds or fc, or btree (the in-place B+tree baseline); a
    /// comma-separated list runs each on the same requests and compares them.
    #[arg(long, value_enum, value_delimiter = ',', num_args = 1.., default_value = "fc")]
    scheme: Vec<SchemeArg>,
    /// W_l: fraction of lookups (G_R); insertions and deletions share the rest.
    #[arg(long, default_value_t = 0.8)]
    lookup_ratio: f64,
    /// Keys loaded before the run (paper: 10 M).
    #[arg(long, default_value_t = 100_000)]
    preload: u64,
    /// Requests in the run (paper: 10 M).
    #[arg(long, default_value_t = 100_000)]
    requests: u64,
    /// G_T (TPC-C NewOrder index) with this many warehouses instead of G_R.
    #[arg(long)]
    tpcc: Option<u32>,
    /// Reader threads T_r (paper: 6).
    #[arg(long, default_value_t = 6)]
    readers: usize,
    /// Writer threads T_w (paper: 2).
    #[arg(long, default_value_t = 2)]
    writers: usize,
    /// Queue slots |Q_r| + |Q_w| (paper: 5000).
    #[arg(long, default_value_t = 5000)]
    slots: usize,
    /// Seed of the workload.
    #[arg(long, default_value_t = csd_idxbench::harness::DEFAULT_SEED)]
    seed: u64,
    #[command(flatten)]
    tree: TreeOpts,
    /// Directory of the latency plot.
    #[arg(long, default_value = "bench/fdtree")]
    out: PathBuf,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

pub(crate) fn bar(json: bool) -> Option<indicatif::ProgressBar> {
    (!json).then(|| crate::report::progress_bar(Some(0), "requests"))
}

pub(crate) fn on_progress(pb: &Option<indicatif::ProgressBar>, label: &str, p: Progress) {
    if let Some(pb) = pb {
        pb.set_length(p.total);
        pb.set_position(p.done);
        pb.set_message(format!(
            "{label} {}",
            match p.phase {
                Phase::Preload => "preload",
                Phase::Run => "run",
            }
        ));
    }
}

/// An index of the FD+tree benchmarks: an FD+tree concurrency scheme or the baseline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum SchemeArg {
    /// FD+XM: a merge x-locks the tree (§3).
    Xm,
    /// FD+DS: space-doubling merges beside lookups (§3).
    Ds,
    /// FD+FC: full concurrency with a wavefront (§4).
    Fc,
    /// The B+tree updated in place (the baseline).
    Btree,
}

impl std::fmt::Display for SchemeArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.to_possible_value() {
            Some(v) => f.write_str(v.get_name()),
            None => Ok(()),
        }
    }
}

pub(crate) fn bench_err(e: csd_idxbench::harness::BenchError) -> CliError {
    CliError::Usage(e.to_string())
}

/// `csd bench fdtree`: one run per scheme of the list, on the same request stream.
pub(crate) fn bench_fdtree_cmd(a: &BenchFdtreeArgs) -> Result<(), CliError> {
    // Fresh huge pages of the in-memory flash are zeroed inside device commands and
    // stalled every request for hundreds of ms (see the function's docs).
    csd_fdtree::disable_transparent_huge_pages();
    let schemes = &a.scheme;
    let mut cfg = match a.tpcc {
        Some(w) => BenchConfig::small_tpcc(w),
        None => {
            let mut c = BenchConfig::small(a.lookup_ratio);
            c.workload = csd_idxbench::workload::WorkloadSpec::Gr(
                csd_idxbench::workload::GrSpec::with_lookup_ratio(
                    a.lookup_ratio,
                    a.requests,
                    a.preload,
                ),
            );
            c
        }
    };
    cfg.seed = a.seed;
    cfg.readers = a.readers;
    cfg.writers = a.writers;
    cfg.queue_slots = a.slots;
    // Every index is made before the first run, so that a bad scheme name or tree
    // option fails at once rather than after minutes of runs.
    let indexes = schemes
        .iter()
        .map(|&s| a.tree.make(s))
        .collect::<Result<Vec<_>, _>>()?;
    let pb = bar(a.json);
    let mut runs = Vec::new();
    for (s, idx) in schemes.iter().zip(indexes) {
        let r = csd_idxbench::harness::run_with_progress(&*idx, &cfg, &|p| {
            on_progress(&pb, &s.to_string(), p)
        })
        .map_err(bench_err)?;
        drop(idx);
        let plot = r
            .histogram_chart()
            .write(&a.out, &format!("fdtree-{s}"))
            .map_err(|e| CliError::Usage(format!("writing the latency plot: {e}")))?;
        runs.push((r, plot));
    }
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    let cmd = format!(
        "csd bench fdtree --scheme {} --lookup-ratio {} --preload {} --requests {}{} --readers {} --writers {} --slots {} --seed {} {}",
        comma_list(schemes),
        a.lookup_ratio,
        a.preload,
        a.requests,
        a.tpcc.map_or(String::new(), |w| format!(" --tpcc {w}")),
        a.readers,
        a.writers,
        a.slots,
        a.seed,
        a.tree.describe()
    );
    let results: Vec<&BenchResult> = runs.iter().map(|(r, _)| r).collect();
    if a.json {
        let mut objs = Vec::new();
        for (r, plot) in &runs {
            let mut v = r.to_json();
            if let Some(m) = v.as_object_mut() {
                m.insert("command".into(), cmd.clone().into());
                m.insert("plot_png".into(), plot.png.display().to_string().into());
            }
            objs.push(v);
        }
        if objs.len() == 1 {
            println!("{}", objs.remove(0));
        } else {
            let mut m = serde_json::Map::new();
            m.insert("runs".into(), objs.into());
            for (k, _, v) in headline_ratios(&results) {
                m.insert(k.into(), v.into());
            }
            m.insert("command".into(), cmd.clone().into());
            println!("{}", serde_json::Value::Object(m));
        }
    } else {
        for (r, plot) in &runs {
            print!("{}", r.report_text(&cmd));
            println!("latency plot: {} (and .svg)\n", plot.png.display());
        }
        if runs.len() > 1 {
            print_comparison(&results);
            println!("seed {}; reproduce: {cmd}", a.seed);
        }
    }
    Ok(())
}

/// Worst `R_p` over modifications (insertions and deletions: both insert an entry into
/// an FD+tree, and an FD+XM merge stalls whichever of them triggered it or waits
/// behind it), ms.
fn update_rp_max_ms(r: &BenchResult) -> f64 {
    r.insert.rp.max_ms.max(r.delete.rp.max_ms)
}

/// The paper's headline comparison (§5, Figure 6 at one lookup ratio): FD+FC's worst
/// insertion (and modification) `R_p` against FD+XM's and FD+DS's, and its throughput
/// against FD+DS's, where those runs are present: (JSON key, label with the paper's
/// value, ratio).
fn headline_ratios(results: &[&BenchResult]) -> Vec<(&'static str, &'static str, f64)> {
    let at = |name: &str| results.iter().find(|r| r.scheme == name);
    let ratio = |a: f64, b: f64| a / b.max(1e-9);
    let mut v = Vec::new();
    if let (Some(fc), Some(xm)) = (at("FD+FC"), at("FD+XM")) {
        v.push((
            "xm_over_fc_insert_rp_max",
            "FD+XM / FD+FC worst insertion R_p (paper: >= 20x)",
            ratio(xm.insert.rp.max_ms, fc.insert.rp.max_ms),
        ));
        v.push((
            "xm_over_fc_update_rp_max",
            "FD+XM / FD+FC worst insertion-or-deletion R_p (paper: >= 20x)",
            ratio(update_rp_max_ms(xm), update_rp_max_ms(fc)),
        ));
    }
    if let (Some(fc), Some(ds)) = (at("FD+FC"), at("FD+DS")) {
        v.push((
            "fc_over_ds_throughput",
            "FD+FC / FD+DS throughput (paper: 1.08-1.15)",
            ratio(fc.throughput_rps, ds.throughput_rps),
        ));
        v.push((
            "ds_over_fc_insert_rp_max",
            "FD+DS / FD+FC worst insertion R_p (paper: DS as bad as XM)",
            ratio(ds.insert.rp.max_ms, fc.insert.rp.max_ms),
        ));
    }
    v
}

/// A table of the schemes side by side, then the headline ratios against the paper's.
pub(crate) fn print_comparison(results: &[&BenchResult]) {
    let mut t = crate::report::table(&[
        "scheme",
        "W_l",
        "throughput req/s",
        "insert R_p max ms",
        "update R_p max ms",
        "insert R_p avg ms",
        "insert R_p std ms",
        "lookup R_p max ms",
        "lookup R_q avg ms",
        "lookup R_q max ms",
        "insert R_o max ms",
        "lookup R_o max ms",
    ]);
    for r in results {
        t.add_row(vec![
            r.scheme.clone(),
            format!("{:.2}", r.w_lookup),
            format!("{:.0}", r.throughput_rps),
            format!("{:.2}", r.insert.rp.max_ms),
            format!("{:.2}", update_rp_max_ms(r)),
            format!("{:.3}", r.insert.rp.avg_ms),
            format!("{:.3}", r.insert.rp.std_ms),
            format!("{:.2}", r.lookup.rp.max_ms),
            format!("{:.3}", r.lookup.rq.avg_ms),
            format!("{:.2}", r.lookup.rq.max_ms),
            format!("{:.2}", r.insert.ro.max_ms),
            format!("{:.2}", r.lookup.ro.max_ms),
        ]);
    }
    println!("{t}");
    for (_, label, v) in headline_ratios(results) {
        println!("{label}: {v:.2}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheme_names_round_trip_and_a_list_parses_once() {
        for s in SchemeArg::value_variants() {
            assert_eq!(SchemeArg::from_str(&s.to_string(), false), Ok(*s));
        }
        assert!(SchemeArg::from_str("fd+fc", false).is_err());
        assert_eq!(
            comma_list(&[SchemeArg::Xm, SchemeArg::Ds, SchemeArg::Fc]),
            "xm,ds,fc"
        );
    }
}
