//! `csd repro all`: the five reproductions at their default scale, one after the other,
//! each writing its own report under `--out/<paper>` (batch-io at the paper's Figure 13
//! cache points only, [`BATCH_IO_CACHES`]), then one scoreboard of every
//! headline ([`csd_paper::Comparison`]): `scoreboard.md`, `scoreboard.json` and
//! `scoreboard.png`/`.svg` (headlines per paper by status). A reproduction that fails is
//! marked in the scoreboard with its error; the others still run, and the command then
//! fails naming it.

use crate::util::progress_bar;
use crate::{
    Comparison, ReproError, Status, batch_io, fd_tree, flixr, reproduce, scan_paper, smart_ssd,
};
use clap::{Args, FromArgMatches, ValueEnum};
use csd_idxbench::machine::{Contention, CpuSample};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// A reproduction `csd repro all` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Paper {
    /// In-storage scan paper.
    ScanPaper,
    /// Smart SSD paper.
    SmartSsd,
    /// FD+tree paper.
    FdTree,
    /// Batch-io paper.
    BatchIo,
    /// FLIXR paper.
    Flixr,
}

impl Paper {
    /// Every reproduction, in the order `csd repro all` runs them.
    pub const ALL: [Paper; 5] = [
        Paper::ScanPaper,
        Paper::SmartSsd,
        Paper::FdTree,
        Paper::BatchIo,
        Paper::Flixr,
    ];

    /// The subcommand's name (`csd repro <name>`) and the report's directory.
    pub fn name(self) -> &'static str {
        match self {
            Paper::ScanPaper => "scan-paper",
            Paper::SmartSsd => "smart-ssd",
            Paper::FdTree => "fd-tree",
            Paper::BatchIo => "batch-io",
            Paper::Flixr => "flixr",
        }
    }
}

/// Options of `csd repro all`.
#[derive(Args, Debug, Clone)]
pub struct ReproAllArgs {
    /// Directory of the scoreboard; each reproduction writes its report in a
    /// subdirectory named after it.
    #[arg(long, default_value = "repro/all")]
    pub out: PathBuf,
    /// Reproductions to run (default: all five).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub papers: Vec<Paper>,
    /// How every reproduction places commands in modeled time (each one's
    /// `--time-model`): `calendar` or `events` (issue 30's event core).
    #[arg(long, default_value = csd_sim::events::TimeModel::default().name(), value_parser = crate::ycsb::parse_time_model)]
    pub time_model: csd_sim::events::TimeModel,
}

/// The host cache sizes (percent of the dataset) of batch-io inside `csd repro all`:
/// the points at which the paper gives every batch-io figure. Figure 13 has values at
/// 20% and 80% only; `csd repro batch-io` alone also runs 50% (Figure 11's middle point),
/// a third of its runs (its default sweep took ~20 min here, more than the whole
/// scoreboard's aim of 30 min). Chosen by where the paper reports, not by any result.
pub const BATCH_IO_CACHES: [u32; 2] = [20, 80];

/// The arguments of one reproduction (`name`, e.g. `flixr`) from command-line options,
/// as `csd repro <name> ARGS...` would parse them (for callers without a command line:
/// the Python package, tests).
pub fn parse_args<A: Args + FromArgMatches>(name: &str, args: &[&str]) -> Result<A, ReproError> {
    parse_with_line(name, args).map(|(a, _)| a)
}

/// [`parse_args`], and the `reproduce:` line of those arguments (`csd repro <name> ...`,
/// defaults spelled out).
pub fn parse_with_line<A: Args + FromArgMatches>(
    name: &str,
    args: &[&str],
) -> Result<(A, String), ReproError> {
    let cmd = A::augment_args(clap::Command::new("csd-repro"));
    let m = cmd
        .clone()
        .try_get_matches_from(std::iter::once(name).chain(args.iter().copied()))
        .map_err(|e| ReproError::Usage(format!("csd repro {name}: {e}")))?;
    let line = reproduce::render_as(&format!("csd repro {name}"), &cmd, &m);
    let a =
        A::from_arg_matches(&m).map_err(|e| ReproError::Usage(format!("csd repro {name}: {e}")))?;
    Ok((a, line))
}

/// Parses one reproduction's arguments and runs it with their `reproduce:` line (not
/// `csd repro all`'s).
fn run_parsed<A: Args + FromArgMatches, T>(
    name: &str,
    args: &[&str],
    run: impl FnOnce(&A) -> Result<T, ReproError>,
) -> Result<T, ReproError> {
    let (a, line) = parse_with_line::<A>(name, args)?;
    reproduce::scoped(line, || run(&a))
}

/// One reproduction's part of the scoreboard.
#[derive(Debug, Clone)]
pub struct PaperRun {
    /// Which.
    pub paper: Paper,
    /// Its headlines.
    pub comparisons: Vec<Comparison>,
    /// Wall time, s.
    pub wall_s: f64,
    /// Its report directory.
    pub dir: PathBuf,
    /// The error that stopped it, if it failed (the others still run).
    pub error: Option<String>,
    /// What other processes used of the machine's CPUs while it ran
    /// ([`csd_idxbench::machine`]); it matters to fd-tree's paced wall-clock runs, not to
    /// the virtual-time figures of the others.
    pub machine: Option<Contention>,
}

/// Runs one reproduction at its defaults, its report in `dir`; its comparisons with the
/// paper.
fn run_one(
    p: Paper,
    dir: &Path,
    time_model: csd_sim::events::TimeModel,
) -> Result<Vec<Comparison>, ReproError> {
    let out = dir.display().to_string();
    let caches = BATCH_IO_CACHES.map(|c| c.to_string()).join(",");
    let mut args = vec!["--out", out.as_str(), "--time-model", time_model.name()];
    if p == Paper::BatchIo {
        args.extend(["--caches", caches.as_str()]);
    }
    let name = p.name();
    match p {
        Paper::ScanPaper => run_parsed(name, &args, scan_paper::run),
        Paper::SmartSsd => run_parsed(name, &args, smart_ssd::run),
        Paper::FdTree => run_parsed(name, &args, fd_tree::repro_fd_cmd),
        Paper::BatchIo => run_parsed(name, &args, batch_io::repro_batch_io),
        Paper::Flixr => run_parsed(name, &args, flixr::repro_flixr),
    }
}

/// `csd repro all`: the runs, then the scoreboard; the runs.
pub fn run(a: &ReproAllArgs) -> Result<Vec<PaperRun>, ReproError> {
    let papers: Vec<Paper> = if a.papers.is_empty() {
        Paper::ALL.to_vec()
    } else {
        a.papers.clone()
    };
    crate::util::guard_output(&a.out.join("scoreboard.md"), &["md"])?;
    crate::util::guard_output(&a.out.join("scoreboard.json"), &["json"])?;
    let t0 = Instant::now();
    let pb = progress_bar(Some(papers.len() as u64), "reproductions");
    let mut runs = Vec::new();
    for p in papers {
        pb.set_message(format!("csd repro {}", p.name()));
        let dir = a.out.join(p.name());
        let t = Instant::now();
        let before = CpuSample::now();
        // The reproduction draws its own progress bars; this one waits meanwhile.
        let (comparisons, error) = match pb.suspend(|| run_one(p, &dir, a.time_model)) {
            Ok(c) => (c, None),
            Err(e) => {
                pb.suspend(|| eprintln!("csd repro {} failed: {e}", p.name()));
                (Vec::new(), Some(e.to_string()))
            }
        };
        let machine = csd_idxbench::machine::since(before);
        runs.push(PaperRun {
            paper: p,
            comparisons,
            wall_s: t.elapsed().as_secs_f64(),
            dir,
            error,
            machine,
        });
        pb.inc(1);
    }
    pb.finish_and_clear();
    let wall = t0.elapsed().as_secs_f64();
    let cmd = reproduce::line();
    let md = scoreboard_md(&runs, wall, &cmd);
    crate::write_report(&a.out, "scoreboard.md", &md)?;
    let json = scoreboard_json(&runs, wall, &cmd);
    crate::write_report(
        &a.out,
        "scoreboard.json",
        &serde_json::to_string_pretty(&json).map_err(|e| ReproError::Usage(e.to_string()))?,
    )?;
    plot(&runs, &a.out)?;
    println!("{md}");
    println!("scoreboard: {}", a.out.join("scoreboard.md").display());
    let failed: Vec<&str> = runs
        .iter()
        .filter(|r| r.error.is_some())
        .map(|r| r.paper.name())
        .collect();
    if !failed.is_empty() {
        return Err(ReproError::Usage(format!(
            "reproductions failed: {} (see the scoreboard)",
            failed.join(", ")
        )));
    }
    Ok(runs)
}

/// Every headline of every run.
fn all_comparisons(runs: &[PaperRun]) -> Vec<Comparison> {
    runs.iter()
        .flat_map(|r| r.comparisons.iter().cloned())
        .collect()
}

/// The scoreboard as markdown: totals per paper, then every headline.
pub fn scoreboard_md(runs: &[PaperRun], wall_s: f64, cmd: &str) -> String {
    let mut md = String::from("# csd reproductions: scoreboard\n\n");
    md.push_str(
        "Every headline of the five papers the reproductions compare, with the paper's value, \
         csd's in this run, the deviation and its status: within 20% of the paper, explained \
         (a re-run in this run with the named parameter at the paper's setting lands within \
         20%), or a miss. A miss may carry sweep points: the figure re-run with a parameter \
         the paper does not report set otherwise; they never change a status, and the \
         column \"miss met by a sweep\" counts the misses one of them brings within 20%.\n\n",
    );
    md.push_str("| paper | headlines | within 20% | explained | miss | miss met by a sweep | wall s | others' CPU, cores | report |\n|---|---|---|---|---|---|---|---|---|\n");
    for r in runs {
        let (w, e, m) = csd_paper::tally(&r.comparisons);
        let _ = writeln!(
            md,
            "| {} | {} | {w} | {e} | {m} | {} | {:.0} | {} | {} |",
            r.paper.name(),
            r.comparisons.len(),
            csd_paper::reached_by_sweeps(&r.comparisons),
            r.wall_s,
            r.machine.map_or("-".to_string(), |c| format!(
                "{:.2} of {}",
                c.others_cores, c.cpus
            )),
            r.dir.join("report.md").display()
        );
    }
    md.push_str(
        "\n\"Others' CPU\" is what other processes used of the machine's cores while a \
         reproduction ran (`/proc/stat` less this process's own, averaged). fd-tree's runs take \
         wall-clock timestamps, as the paper's did on a machine running nothing else; the \
         other four reproductions run in modeled time, and their figures do not depend on \
         it.\n",
    );
    let all = all_comparisons(runs);
    let _ = writeln!(md, "\n## Every headline\n");
    for r in runs {
        let _ = writeln!(md, "### {}\n", r.paper.name());
        if let Some(e) = &r.error {
            let _ = writeln!(md, "**Failed**: {e}\n");
        } else if r.comparisons.is_empty() {
            let _ = writeln!(md, "No comparisons handed back; see {}.\n", r.dir.display());
        } else {
            md.push_str(&csd_paper::markdown(&r.comparisons));
            md.push('\n');
        }
    }
    let (w, e, m) = csd_paper::tally(&all);
    let _ = writeln!(
        md,
        "## Totals\n\n{w} of {} headlines within 20%, {e} explained by a measured parameter, {m} missed ({} of the misses met by a sweep of a parameter the paper does not report).\n",
        all.len(),
        csd_paper::reached_by_sweeps(&all)
    );
    let _ = writeln!(
        md,
        "Configuration: each reproduction at its default scale, preset and seed (listed in its \
         report's reproduce line); batch-io at the host cache sizes where the paper reports \
         every figure ({}% of the dataset). Wall time {wall_s:.0} s.\n\nreproduce: `{cmd}`",
        BATCH_IO_CACHES.map(|c| c.to_string()).join("% and ")
    );
    md
}

/// The scoreboard as JSON.
pub fn scoreboard_json(runs: &[PaperRun], wall_s: f64, cmd: &str) -> serde_json::Value {
    let all = all_comparisons(runs);
    let (w, e, m) = csd_paper::tally(&all);
    serde_json::json!({
        "papers": runs.iter().map(|r| {
            let (w, e, m) = csd_paper::tally(&r.comparisons);
            serde_json::json!({
                "paper": r.paper.name(),
                "within": w, "explained": e, "miss": m,
                "miss_met_by_sweep": csd_paper::reached_by_sweeps(&r.comparisons),
                "wall_s": r.wall_s,
                "others_cpu_cores": r.machine.map(|c| c.others_cores),
                "report": r.dir.join("report.md").display().to_string(),
                "headlines": csd_paper::json(&r.comparisons),
                "error": r.error,
            })
        }).collect::<Vec<_>>(),
        "within": w,
        "explained": e,
        "miss": m,
        "miss_met_by_sweep": csd_paper::reached_by_sweeps(&all),
        "headlines": all.len(),
        "wall_s": wall_s,
        "command": cmd,
    })
}

/// One plot: per paper, headlines within 20%, explained and missed.
fn plot(runs: &[PaperRun], out: &Path) -> Result<(), ReproError> {
    let cats: Vec<String> = runs.iter().map(|r| r.paper.name().to_string()).collect();
    let count = |s: Status| {
        runs.iter()
            .map(|r| r.comparisons.iter().filter(|c| c.status() == s).count() as f64)
            .collect::<Vec<_>>()
    };
    csd_plot::BarChart::new("csd reproductions: headlines by status", "headlines", cats)
        .with_group(Status::Within.label(), count(Status::Within))
        .with_group(Status::Explained.label(), count(Status::Explained))
        .with_group(Status::Miss.label(), count(Status::Miss))
        .write(out, "scoreboard")
        .map_err(crate::plot_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PaperValue;

    /// Parses `args` as reproduction `name`, renders its `reproduce:` line, parses the
    /// line again and checks it stands for the same arguments (renders the same line).
    fn round_trip<A: Args + FromArgMatches>(name: &str, args: &[&str]) -> String {
        let (_, line): (A, String) = parse_with_line(name, args).expect(name);
        let words = reproduce::words(&line).expect("balanced quotes");
        assert_eq!(words[..3], ["csd", "repro", name], "{line}");
        let again: Vec<&str> = words[3..].iter().map(String::as_str).collect();
        let (_, line2): (A, String) = parse_with_line(name, &again).expect(name);
        assert_eq!(line2, line);
        line
    }

    #[test]
    fn every_reproduction_parses_its_defaults_and_its_line_reruns_the_same_arguments() {
        let out = ["--out", "/tmp/x y"];
        round_trip::<scan_paper::ScanPaperArgs>("scan-paper", &out);
        round_trip::<smart_ssd::SmartSsdArgs>("smart-ssd", &out);
        round_trip::<fd_tree::ReproFdArgs>("fd-tree", &out);
        round_trip::<batch_io::ReproBatchIoArgs>("batch-io", &out);
        round_trip::<flixr::ReproFlixrArgs>("flixr", &out);
        round_trip::<ReproAllArgs>("all", &out);
        let line = round_trip::<batch_io::ReproBatchIoArgs>(
            "batch-io",
            &["--caches", "20,80", "--seed", "9", "--out", "o"],
        );
        assert!(
            line.contains("--caches 20,80") && line.contains("--seed 9"),
            "{line}"
        );
        assert!(line.contains("--out o"), "{line}");
        let line = round_trip::<flixr::ReproFlixrArgs>("flixr", &["--json", "--queries", "3"]);
        assert!(
            line.contains("--seed 42") && line.ends_with(" --json"),
            "{line}"
        );
        let line = round_trip::<smart_ssd::SmartSsdArgs>("smart-ssd", &["--set", "a=1"]);
        assert!(line.contains("--set a=1"), "{line}");
    }

    #[test]
    fn a_run_inside_repro_all_gets_its_own_line() {
        let line = run_parsed("fd-tree", &["--out", "d"], |_: &fd_tree::ReproFdArgs| {
            Ok(reproduce::line())
        })
        .expect("parses");
        assert!(line.starts_with("csd repro fd-tree --out d "), "{line}");
        assert_eq!(reproduce::line(), "csd", "restored after the run");
        let e = parse_args::<flixr::ReproFlixrArgs>("flixr", &["--seed", "x"]).expect_err("bad");
        assert!(e.to_string().contains("csd repro flixr"), "{e}");
    }

    #[test]
    fn scoreboard_counts_statuses_per_paper() {
        let runs = vec![PaperRun {
            paper: Paper::Flixr,
            comparisons: vec![
                Comparison::new("flixr", "a", PaperValue::value(1.0), 1.1),
                Comparison::new("flixr", "b", PaperValue::value(1.0), 3.0),
                // A miss that a sweep point meets stays a miss and is counted apart.
                Comparison::new("flixr", "c", PaperValue::value(1.0), 3.0).sweep("p", "s", 1.1),
            ],
            wall_s: 1.0,
            dir: PathBuf::from("x/flixr"),
            error: None,
            machine: Some(Contention {
                others_cores: 0.5,
                steal_cores: 0.0,
                cpus: 2,
            }),
        }];
        let md = scoreboard_md(&runs, 1.0, "csd repro all");
        assert!(
            md.contains("| flixr | 3 | 1 | 0 | 2 | 1 | 1 | 0.50 of 2 |"),
            "{md}"
        );
        assert!(
            md.contains("2 missed (1 of the misses met by a sweep"),
            "{md}"
        );
        assert!(md.contains("reproduce: `csd repro all`"));
        let j = scoreboard_json(&runs, 1.0, "c");
        assert_eq!(j["within"], 1);
        assert_eq!(j["miss"], 2);
        assert_eq!(j["miss_met_by_sweep"], 1);
        assert_eq!(j["papers"][0]["headlines"][1]["status"], "miss");
        assert_eq!(j["papers"][0]["others_cpu_cores"], 0.5);
    }
}
