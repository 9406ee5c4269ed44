//! `csd bench fdtree`: the FD+tree paper's §5 harness (one scheme, one workload) on an
//! emulated SSD in paced mode (merges take real time, so threads feel them), through the
//! csd-idxbench harness.
//!
//! Each index gets a fresh in-memory device. The preload (one thread, keys in order)
//! runs in virtual time, so that building a multi-million-key index costs only CPU
//! time; the harness then waits for the preload's merges and the device switches to the
//! `--clock` mode (paced by default) for the timed run, whose latencies and throughput
//! are measured on the wall clock; with `--clock virtual` the harness's threads run as
//! actors of virtual time and measure modeled time (issue 30, docs/time-model.md).

//!
//! The indexes and the comparison table live in the reproduction library
//! ([`csd_repro::fdbench`]), which `csd repro fd-tree` shares.

use crate::CliError;
use crate::args::{IndexSeed, JsonFlag};
use clap::Args;
use csd_idxbench::harness::BenchConfig;
use csd_idxbench::result::BenchResult;
use csd_repro::fdbench::{
    SchemeArg, TreeOpts, bar, bench_err, headline_ratios, on_progress, print_comparison,
};
use std::path::PathBuf;

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
    /// Reader threads T_r (default: the machine-scaled rule `csd repro fd-tree` uses, 6;
    /// paper: 6).
    #[arg(long)]
    readers: Option<usize>,
    /// Writer threads T_w (default: the machine-scaled rule `csd repro fd-tree` uses,
    /// cores / 4 within 1..=2; paper: 2 on its 8 cores).
    #[arg(long)]
    writers: Option<usize>,
    /// Queue slots |Q_r| + |Q_w| (paper: 5000).
    #[arg(long, default_value_t = 5000)]
    slots: usize,
    #[command(flatten)]
    rng: IndexSeed,
    #[command(flatten)]
    tree: TreeOpts,
    /// Directory of the latency plot.
    #[arg(long, default_value = "bench/fdtree")]
    out: PathBuf,
    #[command(flatten)]
    report: JsonFlag,
}

/// `csd bench fdtree`: one run per scheme of the list, on the same request stream.
pub(crate) fn bench_fdtree_cmd(a: &BenchFdtreeArgs) -> Result<(), CliError> {
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
    cfg.seed = a.rng.seed;
    let threads = Threads::of(a.readers, a.writers);
    (cfg.readers, cfg.writers) = (threads.readers, threads.writers);
    cfg.queue_slots = a.slots;
    // Every index is made before the first run, so that a bad scheme name or tree
    // option fails at once rather than after minutes of runs.
    let indexes = schemes
        .iter()
        .map(|&s| a.tree.make(s))
        .collect::<Result<Vec<_>, _>>()?;
    let pb = bar(a.report.json);
    let mut runs = Vec::new();
    for (s, idx) in schemes.iter().zip(indexes) {
        let r = csd_idxbench::harness::run_with_progress(&*idx, &cfg, &|p| {
            on_progress(&pb, &s.to_string(), p)
        })
        .map_err(bench_err)?;
        drop(idx);
        // A log-log chart cannot draw a latency of 0: in modeled time (`--clock virtual`)
        // a run whose requests never waited for the device has nothing to draw.
        let chart = r.histogram_chart();
        let plot = if chart.series.is_empty() {
            None
        } else {
            Some(
                chart
                    .write(&a.out, &format!("fdtree-{s}"))
                    .map_err(|e| CliError::Usage(format!("writing the latency plot: {e}")))?,
            )
        };
        runs.push((r, plot));
    }
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    let cmd = crate::reproduce::line();
    let results: Vec<&BenchResult> = runs.iter().map(|(r, _)| r).collect();
    if a.report.json {
        let mut objs = Vec::new();
        for (r, plot) in &runs {
            let mut v = r.to_json();
            if let Some(m) = v.as_object_mut() {
                m.insert("command".into(), cmd.clone().into());
                m.insert(
                    "plot_png".into(),
                    plot.as_ref().map(|p| p.png.display().to_string()).into(),
                );
                m.insert("threads_rule".into(), threads.rule.into());
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
            m.insert("threads_rule".into(), threads.rule.into());
            println!("{}", serde_json::Value::Object(m));
        }
    } else {
        println!("{}\n", threads.describe());
        for (r, plot) in &runs {
            print!("{}", r.report_text(&cmd));
            match plot {
                Some(p) => println!("latency plot: {} (and .svg)\n", p.png.display()),
                None => println!(
                    "latency plot: none (every latency was 0 ms: no request waited in modeled time)\n"
                ),
            }
        }
        if runs.len() > 1 {
            print_comparison(&results);
            println!("seed {}; reproduce: {cmd}", a.rng.seed);
        }
    }
    Ok(())
}

/// The worker threads of a run and the rule that chose them: one rule for `csd bench
/// fdtree` and `csd repro fd-tree` ([`csd_idxbench::repro::machine_threads`]), so the two
/// commands answer the same question the same way unless a flag overrides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Threads {
    readers: usize,
    writers: usize,
    /// `machine-scaled` or `flags`.
    rule: &'static str,
}

impl Threads {
    /// The machine-scaled split, with `--readers` / `--writers` overriding either part.
    fn of(readers: Option<usize>, writers: Option<usize>) -> Threads {
        let (r, w) = csd_idxbench::repro::machine_threads();
        let rule = if readers.is_some() || writers.is_some() {
            "flags"
        } else {
            "machine-scaled"
        };
        Threads {
            readers: readers.unwrap_or(r),
            writers: writers.unwrap_or(w),
            rule,
        }
    }

    /// One line for the text report.
    fn describe(&self) -> String {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        match self.rule {
            "flags" => format!(
                "threads: T_r = {}, T_w = {} (set by --readers/--writers)",
                self.readers, self.writers
            ),
            _ => format!(
                "threads: T_r = {}, T_w = {} (machine-scaled rule of `csd repro fd-tree` on {cores} cores: \
                 T_w = cores / 4 within 1..=2; the paper's 6 and 2 with --readers 6 --writers 2)",
                self.readers, self.writers
            ),
        }
    }
}

#[cfg(test)]
mod thread_tests {
    use super::Threads;

    #[test]
    fn the_default_split_is_the_reproductions_and_flags_override_it() {
        let d = Threads::of(None, None);
        assert_eq!(
            (d.readers, d.writers),
            csd_idxbench::repro::machine_threads()
        );
        assert_eq!(d.rule, "machine-scaled");
        let f = Threads::of(None, Some(2));
        assert_eq!((f.readers, f.writers, f.rule), (d.readers, 2, "flags"));
        assert!(f.describe().contains("--readers/--writers"));
    }
}
