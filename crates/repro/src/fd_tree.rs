//! `csd repro fd-tree`: the FD+tree paper's §5 experiments — the W_l sweep of Figure 6,
//! the index-size scaling of Figure 7 and the G_T runs of Figure 8 — for each
//! concurrency scheme on the x25e-sata preset in paced mode, through the csd-idxbench
//! harness (which also holds the paper's figures and the ordering checks). Shaped sweep
//! → checks → render: each figure's runs write their report as they finish, then the
//! paper's orderings are checked and written.

use crate::ReproError;
use crate::args::IndexSeed;
use crate::fdbench::{SchemeArg, TreeOpts, bar, bench_err, ie, on_progress, print_comparison};
use clap::Args;
use csd_idxbench::harness::BenchConfig;
use csd_idxbench::result::BenchResult;
use csd_idxbench::{paper, repro};
use std::path::PathBuf;

/// `csd repro fd-tree`.
#[derive(Args)]
pub struct ReproFdArgs {
    /// Report directory.
    #[arg(long, default_value = "repro/fd-tree")]
    out: PathBuf,
    /// Schemes to compare (xm, ds, fc, btree; the in-place B+tree baseline takes
    /// minutes per run on update-heavy points, so it is not in the default list).
    #[arg(long, value_enum, value_delimiter = ',', num_args = 1.., default_value = "xm,ds,fc")]
    schemes: Vec<SchemeArg>,
    /// Keys preloaded for the Figure 6 sweep (paper: 10 M).
    #[arg(long, default_value_t = repro::PRELOAD)]
    preload: u64,
    /// Requests per Figure 6 run (paper: 10 M).
    #[arg(long, default_value_t = repro::REQUESTS)]
    requests: u64,
    /// Lookup ratios of the Figure 6 sweep (the paper's: 0,0.2,0.4,0.6,0.8,0.9,1).
    #[arg(long, value_delimiter = ',', default_values_t = repro::LOOKUP_RATIOS.to_vec())]
    lookup_ratios: Vec<f64>,
    /// Initial index sizes (keys) of the Figure 7 scaling runs at W_l = 0.8, each with
    /// as many requests as keys (paper: up to 90 M); `--sizes` with no value skips them.
    #[arg(long, value_delimiter = ',', num_args = 0.., default_values_t = repro::SIZES.to_vec())]
    sizes: Vec<u64>,
    /// Warehouses of the Figure 8 (G_T) runs; `--warehouses` with no value skips them.
    #[arg(long, value_delimiter = ',', num_args = 0.., default_values_t = repro::WAREHOUSES.to_vec())]
    warehouses: Vec<u32>,
    #[command(flatten)]
    rng: IndexSeed,
    /// Worker threads READERS/WRITERS of every run (default: the paper's 6 readers and
    /// cores/4 writers, 1 to 2: 6/2 on the paper's 8 cores, 6/1 on 2 cores).
    #[arg(long, value_parser = parse_threads)]
    threads: Option<(usize, usize)>,
    #[command(flatten)]
    tree: TreeOpts,
}

/// `--threads R/W`, by the rule of the repro's own parameters.
fn parse_threads(s: &str) -> Result<(usize, usize), String> {
    let mut p = repro::ReproParams::default();
    p.set("threads", s).map_err(|e| e.to_string())?;
    Ok((p.readers, p.writers))
}

/// The worker threads of the run: `--threads` or the machine-scaled default.
fn threads(a: &ReproFdArgs) -> (usize, usize) {
    a.threads.unwrap_or_else(repro::machine_threads)
}

/// Every configuration for every scheme, each on a fresh index.
fn run_configs(
    schemes: &[SchemeArg],
    cfgs: &[BenchConfig],
    tree: &TreeOpts,
    pb: &Option<indicatif::ProgressBar>,
    what: &str,
) -> Result<Vec<BenchResult>, ReproError> {
    let mut out = Vec::new();
    for s in schemes {
        out.extend(
            csd_idxbench::sweep::sweep_configs(cfgs, |_| tree.make(*s).map_err(ie), &|i, p| {
                on_progress(pb, &format!("{s} {what} run {i}"), p)
            })
            .map_err(bench_err)?,
        );
    }
    Ok(out)
}

/// `csd repro fd-tree`: the W_l sweep of Figure 6, the index-size scaling of Figure 7
/// and the G_T runs of Figure 8 for each scheme, as markdown reports with plots and the
/// paper's figures beside ours; then the paper's orderings checked.
/// Returns the comparisons with the paper (its orderings).
pub fn repro_fd_cmd(a: &ReproFdArgs) -> Result<Vec<csd_paper::Comparison>, ReproError> {
    let schemes = &a.schemes;
    // The workloads of the three figures, as idxbench's repro module defines them (its
    // `fdtree_repro` example runs the same without the CLI).
    let params = repro::ReproParams {
        preload: a.preload,
        requests: a.requests,
        lookup_ratios: a.lookup_ratios.clone(),
        sizes: a.sizes.clone(),
        warehouses: a.warehouses.clone(),
        seed: a.rng.seed,
        readers: threads(a).0,
        writers: threads(a).1,
        ..repro::ReproParams::default()
    };
    let pb = bar(false);
    let cmd = crate::reproduce::line();
    println!(
        "threads: T_r = {}, T_w = {} ({})",
        params.readers,
        params.writers,
        match a.threads {
            Some(_) => "set by --threads",
            None =>
                "machine-scaled rule, also `csd bench fdtree`'s default: T_w = cores / 4 within 1..=2",
        }
    );
    let results = figure6(a, schemes, &params, &pb, &cmd)?;
    let scaled = figure7(a, schemes, &params, &pb, &cmd)?;
    let gt = figure8(a, schemes, &params, &pb, &cmd)?;
    // The paper's orderings (who stalls, who has the best throughput), each with its
    // verdict; a Figure 7 stall ordering that fails is re-run with a merge below L1 in
    // the run (`repro::fig7_rerun_config`), and the re-run's figure goes beside it.
    let mut checks = repro::check_orderings(&results, &scaled, &gt);
    let cfgs: Vec<BenchConfig> = repro::failed_fig7_sizes(&checks, &a.sizes)
        .into_iter()
        .filter_map(|n| repro::fig7_rerun_config(&params, n))
        .collect();
    if !cfgs.is_empty() {
        let reruns = run_configs(schemes, &cfgs, &a.tree, &pb, "Figure 7 re-run")?;
        for r in &reruns {
            println!(
                "Figure 7 re-run, {} keys, {} requests: {} worst insertion R_p {:.3} ms",
                r.preload_keys, r.requests, r.scheme, r.insert.rp.max_ms
            );
        }
        repro::explain_fig7(&mut checks, &scaled, &reruns);
    }
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    // The headline of §5 / Figure 6 at W_l = 0.8.
    let at_08: Vec<&BenchResult> = results
        .iter()
        .filter(|r| (r.w_lookup - 0.8).abs() < 1e-9)
        .collect();
    if !at_08.is_empty() {
        print_comparison(&at_08);
    }
    crate::print_checks(&checks);
    let orderings = repro::write_orderings(&a.out, &checks, &cmd).map_err(bench_err)?;
    println!("orderings and findings: {}", orderings.display());
    println!("seed {}; reproduce: {cmd}", a.rng.seed);
    Ok(checks)
}

/// Figure 6: the W_l sweep for every scheme, and its report.
fn figure6(
    a: &ReproFdArgs,
    schemes: &[SchemeArg],
    params: &repro::ReproParams,
    pb: &Option<indicatif::ProgressBar>,
    cmd: &str,
) -> Result<Vec<BenchResult>, ReproError> {
    let base = repro::fig6_base(params);
    let mut results = Vec::new();
    for s in schemes {
        let label = s.to_string();
        let r = csd_idxbench::sweep::sweep(
            &a.lookup_ratios,
            |_| a.tree.make(*s).map_err(ie),
            &base,
            &|w, p| on_progress(pb, &format!("{label} W_l={w}"), p),
        )
        .map_err(bench_err)?;
        results.extend(r);
    }
    let files =
        csd_idxbench::sweep::write_report(&results, &paper::figure6(), &a.out.join("fig6"), cmd)
            .map_err(bench_err)?;
    println!("Figure 6 report: {}", files.markdown.display());
    Ok(results)
}

/// Figure 7: W_l = 0.8, the workload as long as the initial index, per index size
/// (none when `--sizes` is empty).
fn figure7(
    a: &ReproFdArgs,
    schemes: &[SchemeArg],
    params: &repro::ReproParams,
    pb: &Option<indicatif::ProgressBar>,
    cmd: &str,
) -> Result<Vec<BenchResult>, ReproError> {
    let cfgs: Vec<BenchConfig> = a
        .sizes
        .iter()
        .map(|&n| repro::fig7_config(params, n))
        .collect();
    let fig = Figure {
        number: 7,
        what: "size",
        paper: paper::figure7(),
        axis: csd_idxbench::sweep::Axis::IndexSize,
    };
    run_figure(a, schemes, &cfgs, fig, pb, cmd)
}

/// Figure 8: the G_T runs per warehouse count (none when `--warehouses` is empty).
fn figure8(
    a: &ReproFdArgs,
    schemes: &[SchemeArg],
    params: &repro::ReproParams,
    pb: &Option<indicatif::ProgressBar>,
    cmd: &str,
) -> Result<Vec<BenchResult>, ReproError> {
    let cfgs: Vec<BenchConfig> = a
        .warehouses
        .iter()
        .map(|&w| repro::fig8_config(params, w))
        .collect();
    let fig = Figure {
        number: 8,
        what: "G_T",
        paper: paper::figure8(),
        axis: csd_idxbench::sweep::Axis::Warehouses,
    };
    run_figure(a, schemes, &cfgs, fig, pb, cmd)
}

/// A figure of the repro run over a list of configurations.
struct Figure {
    number: u32,
    /// Progress label of a run.
    what: &'static str,
    paper: Vec<paper::PaperRef>,
    axis: csd_idxbench::sweep::Axis,
}

/// Runs `cfgs` for every scheme and writes the figure's report to `fig<N>/` (nothing
/// when `cfgs` is empty).
fn run_figure(
    a: &ReproFdArgs,
    schemes: &[SchemeArg],
    cfgs: &[BenchConfig],
    fig: Figure,
    pb: &Option<indicatif::ProgressBar>,
    cmd: &str,
) -> Result<Vec<BenchResult>, ReproError> {
    if cfgs.is_empty() {
        return Ok(Vec::new());
    }
    let results = run_configs(schemes, cfgs, &a.tree, pb, fig.what)?;
    let dir = a.out.join(format!("fig{}", fig.number));
    let files = csd_idxbench::sweep::write_report_on(&results, &fig.paper, &dir, cmd, fig.axis)
        .map_err(bench_err)?;
    println!("Figure {} report: {}", fig.number, files.markdown.display());
    Ok(results)
}
