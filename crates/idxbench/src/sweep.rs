//! Parameter sweeps and the Figure-6-style report of the FD+tree paper (§5, Figures 6
//! and 8): one run per lookup ratio `W_l` (G_R) or per warehouse count (G_T) and per
//! scheme, then plots of throughput and of average / worst / standard deviation of
//! `R_p` and `R_q` against the swept parameter, one solid series per scheme, with the
//! paper's absolute numbers (see [`crate::paper`]) as dashed series, and a markdown
//! report with side-by-side tables, the paper-vs-measured comparison, the configuration,
//! the seed and the command that reproduces it.
//!
//! Choices made: every run gets a fresh index from `make_index` and the same seed, so
//! schemes see identical request streams; a paper value with no lookup ratio is drawn as
//! a dashed horizontal line across the sweep; latency plots use a log y axis when all
//! values are positive (worst cases span seconds to microseconds) and a linear one
//! otherwise.
//!
//! Layout: [`sweep`] / [`sweep_configs`] run; [`write_report_on`] renders, through a
//! `Report` (the results, the paper's statements, the swept values) with one function
//! per plot family (per-metric lines with the paper's dashed values, percentile
//! distributions) and per markdown section (intro, result tables, paper vs measured,
//! runs, plots, reproduce), then writes the files.

use crate::harness::{BenchConfig, BenchError, Progress, run_with_progress};
use crate::paper::{Metric, PaperRef, PaperValue, Stat};
use crate::result::{BenchResult, Latency, fmt_ms, latency_chart};
use crate::workload::{Generator, OpKind, WorkloadSpec};
use crate::{BenchIndex, IndexError, Scheme};
use csd_plot::{LineChart, PlotFiles, Series};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Runs `cfg` (a G_R configuration) once per lookup ratio in `lookup_ratios`, each time
/// on a fresh index from `make_index(w_l)`. Insertions and deletions share `1 - W_l`
/// equally, as in Figure 6.
pub fn sweep(
    lookup_ratios: &[f64],
    make_index: impl Fn(f64) -> Result<Arc<dyn BenchIndex>, IndexError>,
    cfg: &BenchConfig,
    progress: &(dyn Fn(f64, Progress) + Sync),
) -> Result<Vec<BenchResult>, BenchError> {
    let mut out = Vec::with_capacity(lookup_ratios.len());
    for &w in lookup_ratios {
        if !(0.0..=1.0).contains(&w) {
            return Err(BenchError::Config(format!(
                "lookup ratio {w} is outside [0, 1]"
            )));
        }
        let c = cfg.with_lookup_ratio(w)?;
        let index = make_index(w).map_err(|e| {
            BenchError::Config(format!("cannot create the index for W_l = {w}: {e}"))
        })?;
        out.push(run_with_progress(&*index, &c, &|p| progress(w, p))?);
    }
    Ok(out)
}

/// Runs each configuration on a fresh index from `make_index(cfg)` (e.g. a G_T
/// warehouse sweep for Figure 8).
pub fn sweep_configs(
    cfgs: &[BenchConfig],
    make_index: impl Fn(&BenchConfig) -> Result<Arc<dyn BenchIndex>, IndexError>,
    progress: &(dyn Fn(usize, Progress) + Sync),
) -> Result<Vec<BenchResult>, BenchError> {
    let mut out = Vec::with_capacity(cfgs.len());
    for (i, c) in cfgs.iter().enumerate() {
        let index = make_index(c)
            .map_err(|e| BenchError::Config(format!("cannot create the index for run {i}: {e}")))?;
        out.push(run_with_progress(&*index, c, &|p| progress(i, p))?);
    }
    Ok(out)
}

/// Files written by [`write_report`].
#[derive(Debug, Clone)]
pub struct ReportFiles {
    /// The markdown report.
    pub markdown: PathBuf,
    /// All results as a JSON array.
    pub json: PathBuf,
    /// The plots.
    pub plots: Vec<PlotFiles>,
}

/// The parameter a sweep varies, which sets the report's x axis and figure number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Axis {
    /// `W_l` of G_R runs (Figure 6).
    LookupRatio,
    /// Warehouses of G_T runs (Figure 8).
    Warehouses,
    /// Keys preloaded, with the workload as long as the index (Figure 7).
    IndexSize,
}

impl Axis {
    /// The axis implied by the results' generator: warehouses for G_T, `W_l` otherwise.
    pub fn of(results: &[BenchResult]) -> Axis {
        match results.first() {
            Some(r) if r.generator == Generator::Gt => Axis::Warehouses,
            _ => Axis::LookupRatio,
        }
    }

    /// The swept value of a result.
    pub fn x(self, r: &BenchResult) -> f64 {
        match self {
            Axis::LookupRatio => r.w_lookup,
            Axis::Warehouses => match &r.config.workload {
                WorkloadSpec::Gt(g) => f64::from(g.warehouses),
                WorkloadSpec::Gr(_) => r.w_lookup,
            },
            Axis::IndexSize => r.preload_keys as f64,
        }
    }

    /// The paper figure this axis reproduces.
    pub fn figure(self) -> &'static str {
        match self {
            Axis::LookupRatio => "6",
            Axis::Warehouses => "8",
            Axis::IndexSize => "7",
        }
    }

    /// The x-axis label.
    pub fn label(self) -> &'static str {
        match self {
            Axis::LookupRatio => "lookup ratio W_l",
            Axis::Warehouses => "warehouses",
            Axis::IndexSize => "initial index size (keys)",
        }
    }
}

/// Schemes in order of first appearance.
fn schemes(results: &[BenchResult]) -> Vec<Scheme> {
    let mut v: Vec<Scheme> = Vec::new();
    for r in results {
        if !v.contains(&r.scheme) {
            v.push(r.scheme);
        }
    }
    v
}

/// The plotted metrics with the paper panel they correspond to (`None`: not in the
/// paper; it gives `R_o` only in its technical report).
fn plotted_metrics() -> Vec<(Metric, Option<&'static str>)> {
    use Latency::{Ro, Rp, Rq};
    use OpKind::{Insert, Lookup};
    vec![
        (Metric::Throughput, Some("a")),
        (Metric::lat(Insert, Rp, Stat::Avg), Some("b")),
        (Metric::lat(Lookup, Rp, Stat::Avg), Some("c")),
        (Metric::lat(Insert, Rp, Stat::Max), Some("d")),
        (Metric::lat(Lookup, Rp, Stat::Max), Some("e")),
        (Metric::lat(Insert, Rp, Stat::Std), Some("g")),
        (Metric::lat(Insert, Rq, Stat::Avg), Some("h-l")),
        (Metric::lat(Lookup, Rq, Stat::Avg), Some("h-l")),
        (Metric::lat(Insert, Rq, Stat::Max), Some("h-l")),
        (Metric::lat(Lookup, Rq, Stat::Max), Some("h-l")),
        (Metric::lat(Insert, Rq, Stat::Std), Some("h-l")),
        (Metric::lat(Lookup, Rq, Stat::Std), Some("h-l")),
        (Metric::lat(Insert, Ro, Stat::Avg), None),
        (Metric::lat(Lookup, Ro, Stat::Avg), None),
        (Metric::lat(Insert, Ro, Stat::Max), None),
        (Metric::lat(Lookup, Ro, Stat::Max), None),
    ]
}

/// The sentence under the runs table that says how busy the machine was during the
/// wall-clock runs (nothing for virtual runs, whose figures do not depend on it).
fn md_machine(md: &mut String, results: &[BenchResult]) {
    let wall: Vec<&crate::machine::Contention> = results
        .iter()
        .filter(|r| !r.virtual_time)
        .filter_map(|r| r.machine.as_ref())
        .collect();
    let Some(worst) = wall
        .iter()
        .max_by(|a, b| a.others_cores.total_cmp(&b.others_cores))
    else {
        return;
    };
    let steal = wall.iter().map(|c| c.steal_cores).fold(0.0, f64::max);
    let _ = writeln!(
        md,
        "Wall-clock runs: other processes used at most {:.2} of the {} cores during a run, and the hypervisor stole at most {steal:.2} (`/proc/stat`, less this process's own CPU). The paper measured on a machine running nothing else.\n",
        worst.others_cores, worst.cpus
    );
}

/// " (cf. paper Fig. 6(b))" for a metric the paper plots, "" otherwise.
fn cf(fig: impl std::fmt::Display, panel: Option<&str>) -> String {
    panel
        .map(|p| format!(" (cf. paper Fig. {fig}({p}))"))
        .unwrap_or_default()
}

/// Writes the plots, `results.json` and `report.md` into `dir`. `paper` are the
/// reference statements to compare with (e.g. [`crate::paper::figure6`]); `reproduce`
/// is the command line printed at the end.
pub fn write_report(
    results: &[BenchResult],
    paper: &[PaperRef],
    dir: &Path,
    reproduce: &str,
) -> Result<ReportFiles, BenchError> {
    write_report_on(results, paper, dir, reproduce, Axis::of(results))
}

/// [`write_report`] with the swept parameter given (e.g. [`Axis::IndexSize`] for the
/// Figure 7 scaling runs, which are G_R runs like Figure 6's).
pub fn write_report_on(
    results: &[BenchResult],
    paper: &[PaperRef],
    dir: &Path,
    reproduce: &str,
    axis: Axis,
) -> Result<ReportFiles, BenchError> {
    if results.is_empty() {
        return Err(BenchError::Config("no results to report".into()));
    }
    std::fs::create_dir_all(dir).map_err(|source| BenchError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let rep = Report::new(results, paper, axis);
    let mut plots = rep.metric_plots(dir)?;
    plots.extend(rep.percentile_plots(dir)?);
    let mut md = String::new();
    rep.md_intro(&mut md);
    rep.md_tables(&mut md);
    rep.md_paper(&mut md);
    rep.md_runs(&mut md);
    md_plots(&mut md, &plots);
    rep.md_reproduce(&mut md, reproduce);
    let (markdown, json) = write_files(dir, &md, results)?;
    Ok(ReportFiles {
        markdown,
        json,
        plots,
    })
}

/// What every part of a sweep report needs: the results, the paper's statements, the
/// swept parameter and the values it takes.
struct Report<'a> {
    results: &'a [BenchResult],
    paper: &'a [PaperRef],
    axis: Axis,
    generator: Generator,
    fig: &'static str,
    x_label: &'static str,
    by_ratio: bool,
    schemes: Vec<Scheme>,
    /// The swept values, sorted, each once.
    xs: Vec<f64>,
    x_lo: f64,
    x_hi: f64,
}

impl<'a> Report<'a> {
    /// `results` must not be empty.
    fn new(results: &'a [BenchResult], paper: &'a [PaperRef], axis: Axis) -> Report<'a> {
        let mut xs: Vec<f64> = results.iter().map(|r| axis.x(r)).collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        let (x_lo, x_hi) = (xs[0], xs[xs.len() - 1]);
        Report {
            results,
            paper,
            axis,
            generator: results[0].generator,
            fig: axis.figure(),
            x_label: axis.label(),
            by_ratio: axis == Axis::LookupRatio,
            schemes: schemes(results),
            xs,
            x_lo,
            x_hi,
        }
    }

    fn x_of(&self, r: &BenchResult) -> f64 {
        self.axis.x(r)
    }

    /// The schemes' names joined by `sep`.
    fn scheme_names(&self, sep: &str) -> String {
        let names: Vec<&str> = self.schemes.iter().map(|s| s.label()).collect();
        names.join(sep)
    }

    /// One plot per metric: a solid series per scheme, the paper's values dashed.
    fn metric_plots(&self, dir: &Path) -> Result<Vec<PlotFiles>, BenchError> {
        let (fig, x_label) = (self.fig, self.x_label);
        let mut plots = Vec::new();
        for (metric, panel) in plotted_metrics() {
            let mut chart = LineChart::new(
                format!("{} vs {x_label}{}", metric.label(), cf(fig, panel)),
                x_label,
                metric.label(),
            );
            for (si, s) in self.schemes.iter().enumerate() {
                let mut pts: Vec<(f64, f64)> = self
                    .results
                    .iter()
                    .filter(|r| r.scheme == *s)
                    .filter_map(|r| metric.value(r).map(|v| (self.x_of(r), v)))
                    .collect();
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                if !pts.is_empty() {
                    chart
                        .series
                        .push(Series::solid(s.to_string(), pts).with_color(si));
                }
            }
            if chart.series.is_empty() {
                continue;
            }
            self.paper_lines(&mut chart, metric);
            let latency = matches!(metric, Metric::Latency { .. });
            chart.log_y = latency
                && chart
                    .series
                    .iter()
                    .all(|s| s.points.iter().all(|p| p.1 > 0.0));
            let stem = format!("fig{fig}_{}", metric.key());
            plots.push(chart.write(dir, &stem)?);
        }
        Ok(plots)
    }

    /// The paper's absolute values of `metric` as dashed horizontal lines over the part
    /// of the sweep each statement covers.
    fn paper_lines(&self, chart: &mut LineChart, metric: Metric) {
        let (x_lo, x_hi) = (self.x_lo, self.x_hi);
        for p in self
            .paper
            .iter()
            .filter(|p| p.generator == self.generator && p.metric == Some(metric))
        {
            let PaperValue::Absolute { low, high } = p.value else {
                continue;
            };
            let (a, b) = p.w_lookup.filter(|_| self.by_ratio).unwrap_or((x_lo, x_hi));
            let (a, b) = (a.max(x_lo), b.min(x_hi));
            if a > b {
                continue; // the statement is about a range this sweep does not cover
            }
            let color = self
                .schemes
                .iter()
                .position(|&s| Some(s) == p.scheme)
                .unwrap_or(self.schemes.len() + 1);
            let label = if low == high {
                format!(
                    "paper {} ({}): {}",
                    p.scheme_label(),
                    p.figure,
                    fmt_value(low, &metric)
                )
            } else {
                format!(
                    "paper {} ({}): {}-{}",
                    p.scheme_label(),
                    p.figure,
                    fmt_value(low, &metric),
                    fmt_value(high, &metric)
                )
            };
            let mid = (low + high) / 2.0;
            if mid > 0.0 || !matches!(metric, Metric::Latency { .. }) {
                chart
                    .series
                    .push(Series::dashed(label, vec![(a, mid), (b, mid)]).with_color(color));
            }
        }
    }

    /// Percentile distributions (cf. Figure 6(f)) at the write-bearing run with the
    /// largest swept value (G_R: largest W_l below 1).
    fn percentile_plots(&self, dir: &Path) -> Result<Vec<PlotFiles>, BenchError> {
        let pick = self
            .xs
            .iter()
            .rev()
            .copied()
            .find(|&x| !self.by_ratio || x < 1.0)
            .unwrap_or(self.x_hi);
        let at: Vec<BenchResult> = self
            .results
            .iter()
            .filter(|r| self.x_of(r) == pick)
            .cloned()
            .collect();
        let mut plots = Vec::new();
        for (op, which) in [
            (OpKind::Lookup, Latency::Rp),
            (OpKind::Lookup, Latency::Rq),
            (OpKind::Insert, Latency::Rp),
            (OpKind::Insert, Latency::Rq),
            (OpKind::Lookup, Latency::Ro),
            (OpKind::Insert, Latency::Ro),
        ] {
            let mut c = latency_chart(&at, op, which);
            if c.series.is_empty() {
                continue;
            }
            c.title = format!("{} ({} = {pick})", c.title, self.x_label);
            let stem = format!("fig{}_{}_{}_percentiles", self.fig, op.name(), which.key());
            plots.push(c.write(dir, &stem)?);
        }
        Ok(plots)
    }

    fn md_intro(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "# FD+tree paper §5 benchmark ({}, Figure {} style)\n",
            self.generator, self.fig
        );
        let _ = writeln!(
            md,
            "Schemes: {}. Every number below was measured by the csd-idxbench harness \
             (per-request timestamps; R_p = dequeue→done, R_q = placed in queue→done, R_o = arrival→done, which adds the wait for a slot in a full queue). \
             Dashed lines in the plots are the paper's numbers as stated in its text.\n",
            self.scheme_names(", ")
        );
    }

    /// Side-by-side tables: one per metric, rows = swept value, columns = schemes.
    fn md_tables(&self, md: &mut String) {
        let _ = writeln!(md, "## Results\n");
        for (metric, panel) in plotted_metrics() {
            let _ = writeln!(md, "### {}{}\n", metric.label(), cf(self.fig, panel));
            let _ = writeln!(md, "| {} | {} |", self.x_label, self.scheme_names(" | "));
            let _ = writeln!(md, "|---|{}", "---|".repeat(self.schemes.len()));
            for &x in &self.xs {
                let cells: Vec<String> = self
                    .schemes
                    .iter()
                    .map(|s| {
                        self.results
                            .iter()
                            .find(|r| r.scheme == *s && self.x_of(r) == x)
                            .and_then(|r| metric.value(r))
                            .map(|v| fmt_value(v, &metric))
                            .unwrap_or_else(|| "–".into())
                    })
                    .collect();
                let _ = writeln!(md, "| {x} | {} |", cells.join(" | "));
            }
            let _ = writeln!(md);
        }
    }

    /// The paper-vs-measured table: one row per statement of the paper.
    fn md_paper(&self, md: &mut String) {
        let _ = writeln!(md, "## Paper vs measured\n");
        let _ = writeln!(
            md,
            "The paper ran on an Intel X25-E SSD with 10 M-key indexes; absolute values are context, \
             ratios between schemes are the comparable part. \"–\" means the runs here do not cover it.\n"
        );
        let _ = writeln!(
            md,
            "| figure | scheme | metric | where | paper | measured here | paper says |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|");
        for p in self.paper.iter().filter(|p| p.generator == self.generator) {
            let metric_s = p.metric.map(|m| m.label()).unwrap_or_else(|| "–".into());
            let mut wher = match p.w_lookup {
                Some((a, b)) if a == b => format!("W_l = {a}"),
                Some((a, b)) => format!("W_l in [{a}, {b}]"),
                None => "all".into(),
            };
            if !p.condition.is_empty() {
                let _ = write!(wher, "; {}", p.condition);
            }
            let (paper_s, measured) = self.paper_vs_measured(p);
            let measured = if measured.is_empty() {
                "–".to_string()
            } else {
                measured.join("; ")
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} |",
                p.figure,
                p.scheme_label(),
                metric_s,
                wher,
                paper_s,
                measured,
                p.quote.replace('|', "/")
            );
        }
        let _ = writeln!(md);
    }

    /// The paper's value of statement `p` as text, and the measured values it applies
    /// to (`x: value`, or `x: ratio×` against the statement's baseline scheme).
    fn paper_vs_measured(&self, p: &PaperRef) -> (String, Vec<String>) {
        let applies = |r: &BenchResult| match p.w_lookup {
            Some((a, b)) if self.generator == Generator::Gr => {
                r.w_lookup >= a - 1e-9 && r.w_lookup <= b + 1e-9
            }
            _ => true,
        };
        let results = self.results;
        match (p.value, p.metric) {
            (PaperValue::Absolute { low, high }, Some(m)) => {
                let ps = if low == high {
                    fmt_value(low, &m)
                } else {
                    format!("{}–{}", fmt_value(low, &m), fmt_value(high, &m))
                };
                let vals: Vec<String> = results
                    .iter()
                    .filter(|r| Some(r.scheme) == p.scheme && applies(r))
                    .filter_map(|r| {
                        m.value(r)
                            .map(|v| format!("{}: {}", self.x_of(r), fmt_value(v, &m)))
                    })
                    .collect();
                (ps, vals)
            }
            (
                PaperValue::Ratio {
                    baseline,
                    low,
                    high,
                },
                Some(m),
            ) => {
                let ps = if low == high {
                    format!("{low:.2}× {baseline}")
                } else {
                    format!("{low:.2}–{high:.2}× {baseline}")
                };
                let vals: Vec<String> = results
                    .iter()
                    .filter(|r| Some(r.scheme) == p.scheme && applies(r))
                    .filter_map(|r| {
                        let base = results
                            .iter()
                            .find(|b| b.scheme == baseline && self.x_of(b) == self.x_of(r))?;
                        let (v, bv) = (m.value(r)?, m.value(base)?);
                        (bv > 0.0).then(|| format!("{}: {:.2}×", self.x_of(r), v / bv))
                    })
                    .collect();
                (ps, vals)
            }
            _ => ("(qualitative)".into(), Vec::new()),
        }
    }

    /// One row per run.
    fn md_runs(&self, md: &mut String) {
        let _ = writeln!(md, "## Runs\n");
        let _ = writeln!(
            md,
            "| scheme | {} | requests | l/i/d % | Q_r/Q_w | preload s | total s | throughput/s | order waits | not exactly once | others' CPU, cores |",
            self.x_label
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|");
        for r in self.results {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.1}/{:.1}/{:.1} | {}/{} | {:.2} | {:.3} | {:.0} | {} | {} | {} |",
                r.scheme,
                self.x_of(r),
                r.requests,
                r.fractions[0] * 100.0,
                r.fractions[1] * 100.0,
                r.fractions[2] * 100.0,
                r.q_r_slots,
                r.q_w_slots,
                r.preload_s,
                r.total_s,
                r.throughput_rps,
                r.ordering_waits,
                r.not_executed_once,
                crate::machine::cell(r.machine),
            );
        }
        let _ = writeln!(md);
        md_machine(md, self.results);
    }

    fn md_reproduce(&self, md: &mut String, reproduce: &str) {
        let cfg_json = serde_json::to_string(&self.results[0].config).unwrap_or_default();
        let _ = writeln!(md, "## Reproduce\n");
        let _ = writeln!(
            md,
            "config (first run; the swept parameter varies): `{cfg_json}`\n"
        );
        let _ = writeln!(md, "seed: {}\n", self.results[0].seed);
        let _ = writeln!(md, "reproduce: `{reproduce}`");
    }
}

/// The plots section: every plot's PNG, inline.
fn md_plots(md: &mut String, plots: &[PlotFiles]) {
    let _ = writeln!(md, "## Plots\n");
    for p in plots {
        let name = p
            .png
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let _ = writeln!(md, "![{name}]({name})");
    }
    let _ = writeln!(md);
}

/// Write `report.md` and `results.json` into `dir` (refusing to overwrite anything
/// that is not such a file).
fn write_files(
    dir: &Path,
    md: &str,
    results: &[BenchResult],
) -> Result<(PathBuf, PathBuf), BenchError> {
    let markdown = dir.join("report.md");
    let json = dir.join("results.json");
    for (p, ext) in [(&markdown, "md"), (&json, "json")] {
        csd_plot::guard_output(p, &[ext]).map_err(|e| BenchError::Config(e.to_string()))?;
    }
    std::fs::write(&markdown, md).map_err(|source| BenchError::Io {
        path: markdown.clone(),
        source,
    })?;
    let text = serde_json::to_string_pretty(results).unwrap_or_default();
    std::fs::write(&json, text).map_err(|source| BenchError::Io {
        path: json.clone(),
        source,
    })?;
    Ok((markdown, json))
}

fn fmt_value(v: f64, m: &Metric) -> String {
    match m {
        Metric::Throughput => format!("{v:.0}/s"),
        Metric::Latency { .. } => format!("{} ms", fmt_ms(v)),
    }
}
