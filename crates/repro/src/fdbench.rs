//! The FD+tree paper's indexes under the csd-idxbench harness (the core of `csd bench
//! fdtree` and of `csd repro fd-tree`): each index on a fresh in-memory device whose
//! preload runs in virtual time and whose timed run uses the `--clock` mode.

use crate::ReproError;
use crate::util::ConfigSource;
use clap::{Args, ValueEnum};
use csd_device::NvmeDevice;
use csd_fdtree::{BTree, BTreeConfig, FdConfig, FdTree};
use csd_ftl::{Ftl, FtlConfig};
use csd_host::SharedDevice;
use csd_idxbench::harness::{Phase, Progress};
use csd_idxbench::result::BenchResult;
use csd_idxbench::{BenchIndex, IndexError, Scheme, repro};
use csd_sim::ClockMode;
use csd_sim::events::TimeModel;
use std::sync::Arc;

/// An index under test, as the harness sees it, with its device and the clock the
/// timed run uses (the preload runs in virtual time).
struct FdBench {
    tree: FdTree,
    scheme: Scheme,
    run_clock: RunClock,
}

/// The device of an index under test and the clock mode of its timed run.
struct RunClock {
    dev: SharedDevice,
    mode: ClockMode,
    /// The event core's counters when the timed run started (the preload's).
    at_start: std::sync::Mutex<Option<csd_sim::events::Counters>>,
    /// The instant the timed run started at.
    start: std::sync::Mutex<csd_sim::SimTime>,
}

impl RunClock {
    fn new(dev: SharedDevice, mode: ClockMode) -> RunClock {
        RunClock {
            dev,
            mode,
            at_start: std::sync::Mutex::new(None),
            start: std::sync::Mutex::new(csd_sim::SimTime::ZERO),
        }
    }

    fn start(&self) -> Result<(), IndexError> {
        self.dev.set_clock(self.mode);
        *self
            .start
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = self.dev.latest_instant();
        *self
            .at_start
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = self.dev.event_counters();
        Ok(())
    }

    /// A virtual timed run's start (its threads run as actors of virtual time).
    fn virtual_start(&self) -> Option<csd_sim::SimTime> {
        (self.mode == ClockMode::Virtual).then(|| {
            *self
                .start
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        })
    }

    /// The preload's start: the device is on a virtual clock until the timed run
    /// starts, whatever the run's mode.
    fn preload_start(&self) -> Option<csd_sim::SimTime> {
        Some(self.dev.latest_instant())
    }

    /// The event core's counters over the timed run (none on calendars): stages booked
    /// and late arrivals (threads that submitted behind what the core had booked: 0 in
    /// paced runs by construction; the preload, in virtual time, is not counted).
    fn core_figures(&self) -> Vec<(String, f64)> {
        let Some(c) = self.dev.event_counters() else {
            return Vec::new();
        };
        let s = self
            .at_start
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .unwrap_or_default();
        vec![
            ("event_core_stages".into(), (c.booked - s.booked) as f64),
            (
                "event_core_late_arrivals".into(),
                (c.late_arrivals - s.late_arrivals) as f64,
            ),
            (
                "event_core_unfixed_decisions".into(),
                (c.unfixed_comparisons - s.unfixed_comparisons) as f64,
            ),
        ]
    }
}

pub fn ie(e: impl std::fmt::Display) -> IndexError {
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
    fn scheme(&self) -> Scheme {
        self.scheme
    }
    fn quiesce(&self) -> Result<(), IndexError> {
        self.tree.wait_for_merges().map_err(ie)
    }
    fn start_run(&self) -> Result<(), IndexError> {
        self.tree.reset_peaks();
        self.run_clock.start()
    }
    fn virtual_start(&self) -> Option<csd_sim::SimTime> {
        self.run_clock.virtual_start()
    }
    fn preload_start(&self) -> Option<csd_sim::SimTime> {
        self.run_clock.preload_start()
    }
    fn extra_stats(&self) -> Vec<(String, f64)> {
        let mut v = self.tree.stats().bench_figures();
        v.extend(self.run_clock.core_figures());
        v
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
    fn scheme(&self) -> Scheme {
        Scheme::BTree
    }
    fn start_run(&self) -> Result<(), IndexError> {
        self.1.start()
    }
    fn virtual_start(&self) -> Option<csd_sim::SimTime> {
        self.1.virtual_start()
    }
    fn preload_start(&self) -> Option<csd_sim::SimTime> {
        self.1.preload_start()
    }
    fn extra_stats(&self) -> Vec<(String, f64)> {
        let (r, w) = self.0.io_counts();
        let mut v = vec![
            ("height".into(), f64::from(self.0.height())),
            ("blocks_read".into(), r as f64),
            ("blocks_written".into(), w as f64),
        ];
        v.extend(self.1.core_figures());
        v
    }
}

/// Options shared by the bench and the repro: the device and the tree.
#[derive(Args, Clone)]
pub struct TreeOpts {
    /// Clock of the timed run: paced (real time, the paper's set-up), paced:SCALE (wall =
    /// modeled x SCALE) or virtual (the threads run as actors of virtual time: commands
    /// in modeled-arrival order, modeled latencies, every run the same; host work costs
    /// no modeled time). The preload always runs in virtual time.
    #[arg(long, default_value = "paced", value_parser = crate::util::parse_clock)]
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
    /// How commands are placed in modeled time: `calendar` (each resource books an
    /// operation when code asks) or `events` (issue 30's event core: the device's one
    /// graph books every thread's stages in modeled-arrival order; paced runs book only
    /// up to the wall clock's instant, virtual runs' threads are actors that submit in
    /// modeled-arrival order; `event_core_late_arrivals` counts submissions behind what the
    /// core had booked).
    #[arg(long, default_value = csd_sim::events::TimeModel::default().name(), value_parser = crate::ycsb::parse_time_model)]
    time_model: TimeModel,
    #[command(flatten)]
    src: ConfigSource,
}

impl TreeOpts {
    /// A fresh in-memory device in virtual time (the preload); the timed run switches
    /// it to `--clock` (see [`RunClock`]).
    fn device(&self) -> Result<(SharedDevice, RunClock), ReproError> {
        let cfg = if self.src.given() {
            self.src.load()?
        } else {
            csd_sim::DeviceConfig::preset("x25e-sata")?
        };
        let nand = csd_nand::Nand::new_in_memory(cfg)?;
        let ftl = Ftl::format(nand, FtlConfig::default())?;
        let dev = SharedDevice::with_time_model(
            NvmeDevice::new(ftl),
            ClockMode::Virtual,
            self.time_model,
        )?;
        let run_clock = RunClock::new(dev.clone(), self.clock);
        Ok((dev, run_clock))
    }

    pub fn make(&self, scheme: SchemeArg) -> Result<Arc<dyn BenchIndex>, ReproError> {
        let s = match scheme {
            SchemeArg::Xm => csd_fdtree::Scheme::Xm,
            SchemeArg::Ds => csd_fdtree::Scheme::Ds,
            SchemeArg::Fc => csd_fdtree::Scheme::Fc,
            SchemeArg::Btree => {
                let cfg = BTreeConfig {
                    cache_bytes: self.cache_mib << 20,
                    ..BTreeConfig::default()
                };
                let (dev, run_clock) = self.device()?;
                let t = BTree::create(dev, cfg).map_err(|e| ReproError::Usage(e.to_string()))?;
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
        let tree = FdTree::create(dev, cfg).map_err(|e| ReproError::Usage(e.to_string()))?;
        Ok(Arc::new(FdBench {
            tree,
            scheme: scheme.scheme(),
            run_clock,
        }))
    }

    pub fn describe(&self) -> String {
        let clock = match self.clock {
            ClockMode::Virtual => "virtual".to_string(),
            ClockMode::Paced { scale: 1.0 } => "paced".to_string(),
            ClockMode::Paced { scale } => format!("paced:{scale}"),
        };
        format!(
            "--clock {clock} --time-model {} --l0-kib {} --size-ratio {} --merge-at {} --cache-mib {}{} {}",
            self.time_model.name(),
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

pub fn bar(json: bool) -> Option<indicatif::ProgressBar> {
    (!json).then(|| crate::util::progress_bar(Some(0), "requests"))
}

pub fn on_progress(pb: &Option<indicatif::ProgressBar>, label: &str, p: Progress) {
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
pub enum SchemeArg {
    /// FD+XM: a merge x-locks the tree (§3).
    Xm,
    /// FD+DS: space-doubling merges beside lookups (§3).
    Ds,
    /// FD+FC: full concurrency with a wavefront (§4).
    Fc,
    /// The B+tree updated in place (the baseline).
    Btree,
}

impl SchemeArg {
    /// The paper's scheme it runs.
    pub fn scheme(self) -> Scheme {
        match self {
            SchemeArg::Xm => Scheme::FdXm,
            SchemeArg::Ds => Scheme::FdDs,
            SchemeArg::Fc => Scheme::FdFc,
            SchemeArg::Btree => Scheme::BTree,
        }
    }
}

impl std::fmt::Display for SchemeArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.to_possible_value() {
            Some(v) => f.write_str(v.get_name()),
            None => Ok(()),
        }
    }
}

pub fn bench_err(e: csd_idxbench::harness::BenchError) -> ReproError {
    ReproError::Usage(e.to_string())
}

/// Worst `R_p` over modifications (insertions and deletions: both insert an entry into
/// an FD+tree, and an FD+XM merge stalls whichever of them triggered it or waits
/// behind it), ms.
pub fn update_rp_max_ms(r: &BenchResult) -> f64 {
    r.insert.rp.max_ms.max(r.delete.rp.max_ms)
}

/// The paper's headline comparison (§5, Figure 6 at one lookup ratio): FD+FC's worst
/// insertion (and modification) `R_p` against FD+XM's and FD+DS's, and its throughput
/// against FD+DS's, where those runs are present: (JSON key, label with the paper's
/// value, ratio).
pub fn headline_ratios(results: &[&BenchResult]) -> Vec<(&'static str, &'static str, f64)> {
    let at = |scheme: Scheme| results.iter().find(|r| r.scheme == scheme);
    let ratio = |a: f64, b: f64| a / b.max(1e-9);
    let mut v = Vec::new();
    if let (Some(fc), Some(xm)) = (at(Scheme::FdFc), at(Scheme::FdXm)) {
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
    if let (Some(fc), Some(ds)) = (at(Scheme::FdFc), at(Scheme::FdDs)) {
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
pub fn print_comparison(results: &[&BenchResult]) {
    let mut t = crate::util::table(&[
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
        "others' CPU, cores",
    ]);
    for r in results {
        t.add_row(vec![
            r.scheme.to_string(),
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
            csd_idxbench::machine::cell(r.machine),
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
    use crate::util::comma_list;
    use clap::Parser;
    use csd_idxbench::{BenchConfig, GrSpec, WorkloadSpec};

    /// An index whose timed run is not announced as virtual: the harness's threads run
    /// free, each with its own clock (what every virtual run did before actors).
    struct FreeRunning(Arc<dyn BenchIndex>);

    impl BenchIndex for FreeRunning {
        fn insert(&self, k: u64, v: u64) -> Result<(), IndexError> {
            self.0.insert(k, v)
        }
        fn delete(&self, k: u64) -> Result<bool, IndexError> {
            self.0.delete(k)
        }
        fn lookup(&self, k: u64) -> Result<Option<u64>, IndexError> {
            self.0.lookup(k)
        }
        fn scheme(&self) -> Scheme {
            self.0.scheme()
        }
        fn extra_stats(&self) -> Vec<(String, f64)> {
            self.0.extra_stats()
        }
        fn quiesce(&self) -> Result<(), IndexError> {
            self.0.quiesce()
        }
        fn start_run(&self) -> Result<(), IndexError> {
            self.0.start_run()
        }
    }

    fn extra(r: &BenchResult, name: &str) -> f64 {
        r.extra
            .iter()
            .find(|(n, _)| n == name)
            .map_or(f64::NAN, |e| e.1)
    }

    /// What a virtual run measured in modeled time (wall-clock figures left out).
    fn modeled(r: &BenchResult) -> String {
        let extra: Vec<_> = r
            .extra
            .iter()
            .filter(|(n, _)| !n.ends_with("_ms"))
            .collect();
        format!(
            "{} {:?} {:?} {:?} {} {} {} {extra:?}",
            r.total_s,
            r.insert,
            r.delete,
            r.lookup,
            r.lookup_hits,
            r.delete_misses,
            r.ordering_waits
        )
    }

    /// Issue 30 for the FD+tree: a virtual timed run's injector, workers and merge
    /// threads are actors of virtual time. Every scheme (and the B+tree) then submits
    /// every command at or after every command before it (0 late arrivals on the event
    /// core), runs every request once, and repeats bit for bit; the same threads running
    /// free submit behind commands that arrived later.
    #[test]
    fn virtual_runs_serve_in_arrival_order_and_repeat_exactly() {
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            tree: TreeOpts,
        }
        let opts = Cli::parse_from([
            "t",
            "--clock",
            "virtual",
            "--l0-kib",
            "8",
            "--cache-mib",
            "1",
        ])
        .tree;
        let cfg = BenchConfig {
            workload: WorkloadSpec::Gr(GrSpec::with_lookup_ratio(0.5, 20_000, 4_000)),
            seed: 7,
            readers: 3,
            writers: 2,
            queue_slots: 100,
            warmup: 200,
        };
        let mut free_late = 0.0;
        for &scheme in SchemeArg::value_variants() {
            let run = || {
                let index = opts.make(scheme).expect("index");
                csd_idxbench::run(&*index, &cfg).expect("run")
            };
            let a = run();
            assert!(a.virtual_time, "{scheme}");
            assert_eq!(a.not_executed_once, 0, "{scheme}");
            assert!(extra(&a, "event_core_stages") > 0.0, "{scheme}");
            assert_eq!(extra(&a, "event_core_late_arrivals"), 0.0, "{scheme}");
            assert!(a.total_s > 0.0 && a.lookup.rp.count > 0, "{scheme}");
            if scheme != SchemeArg::Btree {
                assert!(extra(&a, "merges") > 0.0, "{scheme}: no merge in the run");
            }
            assert_eq!(modeled(&run()), modeled(&a), "{scheme}: a rerun differs");
            let free = FreeRunning(opts.make(scheme).expect("index"));
            let f = csd_idxbench::run(&free, &cfg).expect("free run");
            assert!(!f.virtual_time);
            free_late += extra(&f, "event_core_late_arrivals");
        }
        assert!(free_late > 0.0, "free-running threads never arrived late");
    }

    #[test]
    fn scheme_names_round_trip_and_a_list_parses_once() {
        for s in SchemeArg::value_variants() {
            assert_eq!(SchemeArg::from_str(&s.to_string(), false), Ok(*s));
        }
        assert!(SchemeArg::from_str("fd+fc", false).is_err());
        let runs: Vec<Scheme> = SchemeArg::value_variants()
            .iter()
            .map(|s| s.scheme())
            .collect();
        assert_eq!(
            runs,
            [Scheme::FdXm, Scheme::FdDs, Scheme::FdFc, Scheme::BTree]
        );
        assert_eq!(
            comma_list(&[SchemeArg::Xm, SchemeArg::Ds, SchemeArg::Fc]),
            "xm,ds,fc"
        );
    }
}
