//! `csd repro smart-ssd`: the Smart SSD paper's experiments on the emulator — Figure 4
//! (selection at 0.1% by tuple size), Figures 5 and 6 (selection and aggregation on
//! Synthetic64 vs selectivity: time, entire-system and I/O-subsystem energy) and
//! Figure 7 (TPC-H Q6): the regular SSD (in-host processing over NSM pages, as SQL
//! Server stores rows) against the Smart SSD's embedded cores over NSM and PAX pages.
//!
//! Shaped sweep → checks → render: [`sweep`] loads each table as NSM and PAX on one
//! in-memory device and runs the three configurations; [`paper_checks`] sets the
//! figures beside the paper's; the render step writes the plots, `report.md` and the
//! terminal summary.
//!
//! Scale: §4.1.1's synthetic tables all hold 400M tuples (10, 30 and 110 GB); `--scale 1`
//! is that size, the default 0.001 finishes in seconds. Times are also shown scaled back
//! to the paper's size.

use super::{
    Bed, Comparison, PaperValue, check_memory, checks_md, md_table, plot_err, preset, print_checks,
    progress, write_report,
};
use crate::ReproError;
use crate::args::Seed;
use csd_sim::events::TimeModel;

/// The paper's name in comparisons and the scoreboard.
pub const PAPER: &str = "smart-ssd";
use crate::util::{self as report, ConfigSource};
use clap::Args;
use csd_host::{QueryReport, Strategy, TableInfo};
use csd_plot::{BarChart, LineChart, Series};
use csd_sim::DeviceConfig;
use csd_table::page::Layout;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Options of `csd repro smart-ssd`.
#[derive(Args)]
pub struct SmartSsdArgs {
    /// Report directory (markdown + PNG + SVG).
    #[arg(long, default_value = "repro/smart-ssd")]
    out: PathBuf,
    /// Table size relative to the paper's (400M rows per synthetic table = 1, as §4.1.1
    /// gives Synthetic4, 16 and 64 equal rows: 10, 30 and 110 GB).
    #[arg(long, default_value_t = 0.001)]
    scale: f64,
    /// TPC-H scale factor of lineitem for Figure 7.
    #[arg(long, default_value_t = 0.1)]
    sf: f64,
    /// How each scan's commands are placed in modeled time: `calendar` or `events` (the
    /// event core: every resource first-come first-served in modeled-arrival order;
    /// docs/time-model.md).
    #[arg(long, default_value = csd_sim::events::TimeModel::default().name(), value_parser = crate::ycsb::parse_time_model)]
    time_model: TimeModel,
    #[command(flatten)]
    rng: Seed,
    #[command(flatten)]
    src: ConfigSource,
}

/// Tuples of every synthetic table in the paper (smart-ssd §4.1.1: Synthetic4, 16 and 64
/// each hold 400M tuples: 10, 30 and 110 GB).
const PAPER_TABLE_ROWS: f64 = 400e6;

/// Tuples per page of the paper's tables (smart-ssd §4.2.1 and §4.2.3: SQL Server pages).
const PAPER_ROWS_PER_PAGE: [(&str, f64); 4] = [
    ("Synthetic4", 323.0),
    ("Synthetic16", 109.0),
    ("Synthetic64", 29.0),
    ("lineitem", 51.0),
];

/// Bytes a SQL Server data row holds besides its values and its 2-byte slot (the
/// paper's pages, smart-ssd §4.1.1): 2 bytes of status bits, 2 of fixed-length size, 2 of
/// column count and a null bitmap of one bit per column. It gives the paper's densities
/// exactly (8096 usable bytes: Synthetic4 8096 / (16 + 7 + 2) = 323 rows, Synthetic16
/// 109, Synthetic64 29); csd's NSM row is its values and a slot.
fn sql_server_row_overhead(columns: usize) -> u16 {
    (6 + columns.div_ceil(8)) as u16
}

struct SmartRun {
    label: String,
    ssd: QueryReport,
    nsm: QueryReport,
    pax: QueryReport,
}

impl SmartRun {
    fn speedup(&self) -> f64 {
        self.ssd.modeled_s() / self.pax.modeled_s()
    }
}

/// Figures 5 and 6's selectivities.
const SIGMAS: [f64; 6] = [0.001, 0.01, 0.1, 0.25, 0.5, 1.0];

/// The header of the figures' tables.
const HEADER: [&str; 8] = [
    "run",
    "SSD s",
    "Smart NSM s",
    "Smart PAX s",
    "SSD / PAX",
    "system J (SSD / NSM / PAX)",
    "I/O J (SSD / NSM / PAX)",
    "bottleneck (SSD / NSM / PAX)",
];

/// Every run of the reproduction.
struct Sweep {
    /// Figure 4: Synthetic4, 16 and 64 at 0.1%.
    fig4: Vec<SmartRun>,
    /// Figure 4's Synthetic4 again with SQL Server's row overhead
    /// ([`sql_server_row_overhead`]): the paper's page density, as a measured re-run.
    fig4_paper_rows: SmartRun,
    /// Figures 5 (selection, `false`) and 6 (aggregation, `true`) per selectivity.
    fig56: Vec<(bool, f64, SmartRun)>,
    /// Figure 7: TPC-H Q6.
    fig7: SmartRun,
}

/// `csd repro smart-ssd`: sweep, checks, render.
/// Returns the comparisons with the paper.
pub fn run(a: &SmartSsdArgs) -> Result<Vec<Comparison>, ReproError> {
    if !(a.scale > 0.0 && a.scale <= 1.0) {
        return Err(ReproError::Usage(format!(
            "--scale {} is outside (0, 1]",
            a.scale
        )));
    }
    let mut cfg = a.src.load()?;
    if a.src.preset.is_none() && a.src.config.is_none() {
        cfg = preset("smart-ssd-sas", &a.src.set)?;
    }
    // Equal rows, as in §4.1.1: every synthetic table holds `scale` x 400M tuples.
    let rows = ((PAPER_TABLE_ROWS * a.scale) as u64).max(10_000);
    // The factor that scales a time measured here to the paper's 400M tuples.
    let to_paper = PAPER_TABLE_ROWS / rows as f64;
    // Each experiment holds an NSM and a PAX copy in an in-memory device (Synthetic64's
    // rows are 256 bytes).
    check_memory(2.2 * rows as f64 * 256.0, "--scale", a.scale)?;
    let wall0 = std::time::Instant::now();
    let sw = sweep(a, &cfg, rows)?;
    let wall = wall0.elapsed().as_secs_f64();

    write_plots(&a.out, &sw)?;
    let checks = paper_checks(&sw, to_paper);

    let cmd = crate::reproduce::line();
    let md = report_md(a, &cfg, rows, to_paper, wall, &sw, &checks, &cmd);
    let path = write_report(&a.out, "report.md", &md)?;
    print_checks(&checks);
    println!(
        "report: {} (plots beside it), {wall:.1} s wall",
        path.display()
    );
    println!("seed {}; reproduce: {cmd}", a.rng.seed);
    Ok(checks)
}

/// The time model of every run in words (with the event core's counters over them).
fn time_model(a: &SmartSsdArgs, sw: &Sweep) -> String {
    let runs = sw.fig4.iter().chain([&sw.fig4_paper_rows, &sw.fig7]);
    let runs = runs.chain(sw.fig56.iter().map(|r| &r.2));
    let runs = runs.flat_map(|r| [&r.ssd, &r.nsm, &r.pax]);
    crate::util::time_model_text(a.time_model, runs).0
}

/// The three runs of one experiment on one device: the regular SSD (IHP over the NSM
/// table), the Smart SSD over NSM and over PAX.
fn three(
    pb: &indicatif::ProgressBar,
    bed: &mut Bed,
    nsm: &TableInfo,
    pax: &TableInfo,
    sql_of: &dyn Fn(&str) -> String,
    label: String,
) -> Result<SmartRun, ReproError> {
    let ssd = bed.run(nsm, &sql_of(&nsm.name), Strategy::Ihp)?;
    pb.inc(1);
    let n = bed.run(nsm, &sql_of(&nsm.name), Strategy::CpuIsp)?;
    pb.inc(1);
    let p = bed.run(pax, &sql_of(&pax.name), Strategy::CpuIsp)?;
    pb.inc(1);
    Ok(SmartRun {
        label,
        ssd,
        nsm: n,
        pax: p,
    })
}

/// Figure 4's three tables (Figures 5 and 6 on the Synthetic64 pair), then Figure 7's
/// lineitem pair.
fn sweep(a: &SmartSsdArgs, cfg: &DeviceConfig, rows: u64) -> Result<Sweep, ReproError> {
    let pb = progress((4 * 3 + 2 * SIGMAS.len() * 3 + 3) as u64, "smart ssd");
    // Figure 4: tuple size at 0.1%.
    let mut fig4 = Vec::new();
    let mut fig56: Vec<(bool, f64, SmartRun)> = Vec::new();
    for cols in [4usize, 16, 64] {
        let mut bed = Bed::new(cfg.clone(), a.time_model)?;
        let (nsm, spec) = bed.load_synthetic("s_nsm", cols, rows, a.rng.seed, Layout::Nsm)?;
        let (pax, _) = bed.load_synthetic("s_pax", cols, rows, a.rng.seed, Layout::Pax)?;
        let v = spec
            .threshold(0.001)
            .map_err(|e| ReproError::Usage(e.to_string()))?;
        let sel = move |t: &str| format!("SELECT c2 FROM {t} WHERE c1 < {v}");
        fig4.push(three(
            &pb,
            &mut bed,
            &nsm,
            &pax,
            &sel,
            format!("Synthetic{cols}"),
        )?);
        if cols == 64 {
            // Figures 5 and 6 on the same Synthetic64 tables.
            for agg in [false, true] {
                for &sg in &SIGMAS {
                    let v = spec
                        .threshold(sg)
                        .map_err(|e| ReproError::Usage(e.to_string()))?;
                    let q = move |t: &str| {
                        if agg {
                            format!("SELECT AVG(c2) FROM {t} WHERE c1 < {v}")
                        } else {
                            format!("SELECT c2 FROM {t} WHERE c1 < {v}")
                        }
                    };
                    fig56.push((
                        agg,
                        sg,
                        three(&pb, &mut bed, &nsm, &pax, &q, format!("{sg}"))?,
                    ));
                }
            }
        }
    }
    // Synthetic4 at the paper's density: each row padded by SQL Server's row overhead.
    let fig4_paper_rows = {
        let mut bed = Bed::new(cfg.clone(), a.time_model)?;
        let pad = sql_server_row_overhead(4);
        let (nsm, spec) =
            bed.load_synthetic_padded("p_nsm", 4, rows, a.rng.seed, Layout::Nsm, pad)?;
        let (pax, _) = bed.load_synthetic_padded("p_pax", 4, rows, a.rng.seed, Layout::Pax, pad)?;
        let v = spec
            .threshold(0.001)
            .map_err(|e| ReproError::Usage(e.to_string()))?;
        let sel = move |t: &str| format!("SELECT c2 FROM {t} WHERE c1 < {v}");
        three(
            &pb,
            &mut bed,
            &nsm,
            &pax,
            &sel,
            "Synthetic4 (SQL Server rows)".into(),
        )?
    };
    // Figure 7: TPC-H Q6 (the paper's form: 0.05 < discount < 0.07, σ ≈ 0.6%).
    let mut bed = Bed::new(cfg.clone(), a.time_model)?;
    let nsm = bed.load_lineitem("li_nsm", a.sf, Layout::Nsm)?;
    let pax = bed.load_lineitem("li_pax", a.sf, Layout::Pax)?;
    let q6 = |t: &str| {
        format!(
            "SELECT SUM(l_extendedprice * l_discount) FROM {t} WHERE l_shipdate >= DATE '1994-01-01' \
             AND l_shipdate < DATE '1995-01-01' AND l_discount > 0.05 AND l_discount < 0.07 \
             AND l_quantity < 24"
        )
    };
    let fig7 = three(&pb, &mut bed, &nsm, &pax, &q6, "TPC-H Q6".into())?;
    pb.finish_and_clear();
    Ok(Sweep {
        fig4,
        fig4_paper_rows,
        fig56,
        fig7,
    })
}

/// Figures 4, 5, 6 (time and both energies) and 7.
fn write_plots(out: &Path, sw: &Sweep) -> Result<(), ReproError> {
    let Sweep {
        fig4, fig56, fig7, ..
    } = sw;
    let cats: Vec<String> = fig4.iter().map(|r| r.label.clone()).collect();
    let col = |f: &dyn Fn(&SmartRun) -> f64, runs: &[&SmartRun]| {
        runs.iter().map(|r| f(r)).collect::<Vec<_>>()
    };
    let fig4_refs: Vec<&SmartRun> = fig4.iter().collect();
    BarChart::new(
        "Figure 4: selection at 0.1% by tuple size",
        "modeled time (s)",
        cats.clone(),
    )
    .with_group("regular SSD", col(&|r| r.ssd.modeled_s(), &fig4_refs))
    .with_group("Smart SSD (NSM)", col(&|r| r.nsm.modeled_s(), &fig4_refs))
    .with_group("Smart SSD (PAX)", col(&|r| r.pax.modeled_s(), &fig4_refs))
    .write(out, "fig4")
    .map_err(plot_err)?;
    for (agg, fig) in [(false, "fig5"), (true, "fig6")] {
        let runs: Vec<&(bool, f64, SmartRun)> = fig56.iter().filter(|x| x.0 == agg).collect();
        let title = if agg {
            "Figure 6: aggregation"
        } else {
            "Figure 5: selection"
        };
        for (what, f) in [
            (
                "time",
                (&|r: &QueryReport| r.modeled_s()) as &dyn Fn(&QueryReport) -> f64,
            ),
            ("energy", &|r: &QueryReport| r.energy.total_j()),
            ("io-energy", &|r: &QueryReport| r.energy.device_j()),
        ] {
            let pts = |g: &dyn Fn(&SmartRun) -> &QueryReport| {
                runs.iter()
                    .map(|(_, sg, r)| (*sg * 100.0, f(g(r))))
                    .collect::<Vec<_>>()
            };
            let mut chart = LineChart::new(
                format!("{title} on Synthetic64: {what}"),
                "selectivity (%)",
                match what {
                    "time" => "modeled time (s)",
                    "energy" => "entire system energy (J)",
                    _ => "I/O subsystem energy (J)",
                },
            );
            chart.log_x = true;
            chart = chart
                .with_series(Series::solid("regular SSD", pts(&|r| &r.ssd)))
                .with_series(Series::solid("Smart SSD (NSM)", pts(&|r| &r.nsm)))
                .with_series(Series::solid("Smart SSD (PAX)", pts(&|r| &r.pax)));
            chart
                .write(out, &format!("{fig}-{what}"))
                .map_err(plot_err)?;
        }
    }
    BarChart::new("Figure 7: TPC-H Q6", "modeled time (s)", vec!["Q6".into()])
        .with_group("regular SSD", vec![fig7.ssd.modeled_s()])
        .with_group("Smart SSD (NSM)", vec![fig7.nsm.modeled_s()])
        .with_group("Smart SSD (PAX)", vec![fig7.pax.modeled_s()])
        .write(out, "fig7")
        .map_err(plot_err)?;
    Ok(())
}

/// The side-by-side lines, each with what explains a difference.
fn paper_checks(sw: &Sweep, to_paper: f64) -> Vec<Comparison> {
    let mut checks = Vec::new();
    fig4_checks(&mut checks, &sw.fig4, &sw.fig4_paper_rows, to_paper);
    fig56_checks(&mut checks, &sw.fig56);
    fig7_checks(&mut checks, &sw.fig7);
    checks
}

/// Figure 4 (and Figure 5's 0.1% point on the same Synthetic64 run): speedups, the
/// NSM / PAX ratio, times scaled to the paper's 400M rows, and Synthetic4's slowdown.
/// Synthetic4's two misses at csd's density carry the re-run at the paper's
/// (`paper_rows`, [`sql_server_row_overhead`]).
fn fig4_checks(
    checks: &mut Vec<Comparison>,
    fig4: &[SmartRun],
    paper_rows: &SmartRun,
    to_paper: f64,
) {
    if let Some(s64) = fig4.iter().find(|r| r.label == "Synthetic64") {
        checks.push(Comparison::new(
            PAPER,
            "Fig. 4/5: selection 0.1%, Synthetic64, SSD / Smart PAX (x)",
            PaperValue::value(2.6),
            s64.speedup(),
        ));
        checks.push(Comparison::new(
            PAPER,
            "Fig. 5: NSM / PAX time on the Smart SSD, 0.1% (115 s / 78 s)",
            PaperValue::value(115.0 / 78.0),
            s64.nsm.modeled_s() / s64.pax.modeled_s(),
        ));
        checks.push(Comparison::new(
            PAPER,
            "Fig. 5: Smart PAX time scaled to the paper's 400M rows (s)",
            PaperValue::value(78.0),
            s64.pax.modeled_s() * to_paper,
        ));
        checks.push(Comparison::new(
            PAPER,
            "Fig. 5: regular SSD time scaled to the paper's 400M rows (s)",
            PaperValue::value(207.0),
            s64.ssd.modeled_s() * to_paper,
        ));
    }
    if let Some(s4) = fig4.iter().find(|r| r.label == "Synthetic4") {
        checks.push(Comparison::new(
            PAPER,
            "Fig. 4: Synthetic4 at 0.1%: SSD / Smart PAX < 1 (Smart SSD slower)",
            PaperValue::below(1.0),
            s4.speedup(),
        ));
        let param = "row format";
        let setting = format!(
            "SQL Server's (+{} B a row: {:.0} rows/page NSM, paper 323)",
            sql_server_row_overhead(4),
            paper_rows.nsm.rows as f64 / paper_rows.nsm.pages.max(1) as f64
        );
        checks.push(
            Comparison::new(
                PAPER,
                "Fig. 4: Synthetic4, SSD / Smart PAX (x, \"22% slower\")",
                PaperValue::value(1.0 / 1.22),
                s4.speedup(),
            )
            .explain(param, &setting, paper_rows.speedup()),
        );
        checks.push(
            Comparison::new(
                PAPER,
                "Fig. 4: Synthetic4, SSD / Smart NSM (x, \"2.6x slower\")",
                PaperValue::value(1.0 / 2.6),
                s4.ssd.modeled_s() / s4.nsm.modeled_s(),
            )
            .explain(
                param,
                &setting,
                paper_rows.ssd.modeled_s() / paper_rows.nsm.modeled_s(),
            ),
        );
    }
}

/// Figures 5 and 6: energy ratios at 0.1%, selection at 100%, aggregation's speedup and
/// the claim that the Smart SSD stays faster at 100%.
fn fig56_checks(checks: &mut Vec<Comparison>, fig56: &[(bool, f64, SmartRun)]) {
    let sel = |agg: bool, sg: f64| fig56.iter().find(|x| x.0 == agg && x.1 == sg).map(|x| &x.2);
    if let Some(r) = sel(false, 0.001) {
        checks.push(Comparison::new(
            PAPER,
            "Fig. 5(b): entire-system energy SSD / Smart PAX, 0.1% (x)",
            PaperValue::value(3.0),
            r.ssd.energy.total_j() / r.pax.energy.total_j(),
        ));
        checks.push(Comparison::new(
            PAPER,
            "Fig. 5(c): I/O-subsystem energy SSD / Smart PAX, 0.1% (x)",
            PaperValue::value(2.0),
            r.ssd.energy.device_j() / r.pax.energy.device_j(),
        ));
    }
    if let Some(r) = sel(false, 1.0) {
        checks.push(Comparison::new(
            PAPER,
            "Fig. 5: selection 100%, Smart PAX / SSD time (x = 1.43: 43% slower)",
            PaperValue::value(1.43),
            r.pax.modeled_s() / r.ssd.modeled_s(),
        ));
    }
    if let Some(r) = sel(true, 0.001) {
        checks.push(Comparison::new(
            PAPER,
            "Fig. 6: aggregation 0.1%, SSD / Smart PAX (x)",
            PaperValue::value(2.7),
            r.speedup(),
        ));
        checks.push(Comparison::new(
            PAPER,
            "Fig. 6(b): entire-system energy, 0.1% (x)",
            PaperValue::value(2.9),
            r.ssd.energy.total_j() / r.pax.energy.total_j(),
        ));
        checks.push(Comparison::new(
            PAPER,
            "Fig. 6(c): I/O-subsystem energy, 0.1% (x)",
            PaperValue::value(1.9),
            r.ssd.energy.device_j() / r.pax.energy.device_j(),
        ));
    }
    if let Some(r) = sel(true, 1.0) {
        checks.push(Comparison::new(
            PAPER,
            "Fig. 6: aggregation at 100%: SSD / Smart PAX > 1 (Smart SSD still faster)",
            PaperValue::above(1.0),
            r.speedup(),
        ));
    }
}

/// Figure 7: TPC-H Q6's speedup and energy ratio.
fn fig7_checks(checks: &mut Vec<Comparison>, fig7: &SmartRun) {
    checks.push(Comparison::new(
        PAPER,
        "Fig. 7: TPC-H Q6, SSD / Smart PAX (x)",
        PaperValue::value(1.7),
        fig7.speedup(),
    ));
    checks.push(Comparison::new(
        PAPER,
        "Fig. 7: TPC-H Q6 entire-system energy (x)",
        PaperValue::value(2.0),
        fig7.ssd.energy.total_j() / fig7.pax.energy.total_j(),
    ));
}

/// One run as a row of the figures' tables.
fn smart_row(r: &SmartRun) -> Vec<String> {
    vec![
        r.label.clone(),
        format!("{:.4}", r.ssd.modeled_s()),
        format!("{:.4}", r.nsm.modeled_s()),
        format!("{:.4}", r.pax.modeled_s()),
        format!("{:.2}", r.speedup()),
        format!(
            "{:.2} / {:.2} / {:.2}",
            r.ssd.energy.total_j(),
            r.nsm.energy.total_j(),
            r.pax.energy.total_j()
        ),
        format!(
            "{:.3} / {:.3} / {:.3}",
            r.ssd.energy.device_j(),
            r.nsm.energy.device_j(),
            r.pax.energy.device_j()
        ),
        format!(
            "{} / {} / {}",
            r.ssd.bottleneck_name(),
            r.nsm.bottleneck_name(),
            r.pax.bottleneck_name()
        ),
    ]
}

/// `report.md`: table sizes and densities, the side-by-side table, each figure's table
/// and the command that reproduces the run.
#[allow(clippy::too_many_arguments)] // the run's inputs and results, each used once
fn report_md(
    a: &SmartSsdArgs,
    cfg: &DeviceConfig,
    rows: u64,
    to_paper: f64,
    wall: f64,
    sw: &Sweep,
    checks: &[Comparison],
    cmd: &str,
) -> String {
    let Sweep {
        fig4,
        fig4_paper_rows,
        fig56,
        fig7,
    } = sw;
    let fig4_rows: Vec<_> = fig4
        .iter()
        .chain(std::iter::once(fig4_paper_rows))
        .map(smart_row)
        .collect();
    let fig5_rows: Vec<_> = fig56
        .iter()
        .filter(|x| !x.0)
        .map(|x| smart_row(&x.2))
        .collect();
    let fig6_rows: Vec<_> = fig56
        .iter()
        .filter(|x| x.0)
        .map(|x| smart_row(&x.2))
        .collect();
    let mut md = String::new();
    let _ = writeln!(md, "# Smart SSD paper, reproduced\n");
    let _ = writeln!(
        md,
        "Device: `{}` ({}). Tables: Synthetic4/16/64 of {rows} rows each, as the paper's \
         tables all hold 400M tuples (scale {}); lineitem at SF {}. Regular SSD = in-host \
         processing over NSM pages; Smart SSD = the embedded cores (cpu-isp) over NSM or PAX \
         pages. Times are modeled seconds at this scale (\"scaled\" figures multiply by \
         {to_paper:.0}); wall-clock time of all runs: {wall:.1} s.\n",
        cfg.name,
        report::geometry_line(cfg),
        a.scale,
        a.sf
    );
    let mut dens = Vec::new();
    for r in fig4.iter().chain([fig4_paper_rows, fig7]) {
        let label = if r.label.starts_with("TPC-H") {
            "lineitem"
        } else {
            r.label.as_str()
        };
        // "Synthetic4 (SQL Server rows)" is Synthetic4's table.
        let table = label.split(' ').next().unwrap_or_default();
        let paper = PAPER_ROWS_PER_PAGE
            .iter()
            .find(|(n, _)| *n == table)
            .map_or(0.0, |x| x.1);
        dens.push(vec![
            label.to_string(),
            format!("{}", r.nsm.rows),
            format!("{:.1}", r.nsm.table_bytes as f64 / 1e6),
            format!("{:.1}", r.nsm.rows as f64 / r.nsm.pages.max(1) as f64),
            format!("{:.1}", r.pax.rows as f64 / r.pax.pages.max(1) as f64),
            format!("{paper}"),
        ]);
    }
    let _ = writeln!(
        md,
        "Table sizes and page densities (the paper's SQL Server pages hold fewer rows; the \
         embedded-CPU costs of the preset are derived at the paper's densities):\n\n{}",
        md_table(
            &[
                "table",
                "rows",
                "NSM MB",
                "rows/page NSM",
                "rows/page PAX",
                "paper rows/page"
            ],
            &dens
        )
    );
    let _ = writeln!(
        md,
        "## Side by side with the paper\n\n{}",
        checks_md(checks)
    );
    let _ = writeln!(
        md,
        "## Figure 4: tuple size (selection, 0.1%)\n\n![fig4](fig4.png)\n\n{}",
        md_table(&HEADER, &fig4_rows)
    );
    let _ = writeln!(
        md,
        "## Figure 5: selection on Synthetic64\n\n![t](fig5-time.png) ![e](fig5-energy.png) ![io](fig5-io-energy.png)\n\n{}",
        md_table(&HEADER, &fig5_rows)
    );
    let _ = writeln!(
        md,
        "## Figure 6: aggregation on Synthetic64\n\n![t](fig6-time.png) ![e](fig6-energy.png) ![io](fig6-io-energy.png)\n\n{}",
        md_table(&HEADER, &fig6_rows)
    );
    let _ = writeln!(
        md,
        "## Figure 7: TPC-H Q6\n\n![fig7](fig7.png)\n\n{}",
        md_table(&HEADER, &[smart_row(fig7)])
    );
    let _ = writeln!(
        md,
        "## Reproduce\n\n{}\n\nSeed {}.\n\n```\n{cmd}\n```",
        time_model(a, sw),
        a.rng.seed
    );
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SQL Server's row overhead gives the paper's densities: 8096 usable bytes of an
    /// 8 KiB page, rows of 4-byte values plus the overhead plus a 2-byte slot.
    #[test]
    fn sql_server_rows_give_the_papers_densities() {
        for (cols, paper) in [(4usize, 323.0), (16, 109.0), (64, 29.0)] {
            let row = cols * 4 + sql_server_row_overhead(cols) as usize + 2;
            assert_eq!((8096 / row) as f64, paper, "Synthetic{cols}");
            let listed = PAPER_ROWS_PER_PAGE
                .iter()
                .find(|(n, _)| *n == format!("Synthetic{cols}"))
                .map(|x| x.1);
            assert_eq!(listed, Some(paper));
        }
    }
}
