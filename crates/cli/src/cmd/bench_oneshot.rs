//! `csd bench oneshot`: what a user's first query on an image costs, beside DuckDB.
//!
//! A user's first command is one process: `csd query --image IMG q6`. This bench starts
//! that process `--repeat` times per query and strategy and measures, from outside, its
//! wall time and peak resident memory (`wait4`'s `ru_maxrss`), and, from its JSON report,
//! the scan's own wall time and the modeled time. The warm figure is the same query run
//! a second time inside one process on the same image (process, page cache and DataFusion
//! warm): the ratio of the one-shot scan to it is what the first touch of the image costs.
//! Every measured query runs in a child; this process stays small, because a child's
//! `ru_maxrss` starts from its parent's peak (the parent's memory until `exec`).
//! With `--compare duckdb`, the peer is a fresh Python process running DuckDB over a
//! Parquet file of the same rows (written from the image by `csd sql --output`), also
//! measured from outside (`scripts/duckdb_oneshot.py`); its answer must equal csd's.
//! The runs are made in `--repeat` rounds: each round starts every strategy's process and
//! DuckDB's once (DuckDB first in even rounds, last in odd ones), and the ratio csd /
//! DuckDB is the median of the rounds' ratios with their range ([`crate::rounds`]): on
//! this shared machine one engine's wall time moves by a third from one minute to the
//! next, and runs made minutes apart compared the minutes as much as the engines.
//! Modeled figures are the device's and do not depend on any of this.

use super::bench_tpch::{CompareArg, json_rows, same};
use super::query::{expand_tpch, run_sql, sql_error};
use crate::args::{JsonFlag, LayoutArg, StrategySel};
use crate::rounds::Ratio;
use crate::{CliError, report};
use clap::Args;
use csd_device::NvmeDevice;
use csd_host::{Client, Strategy};
use csd_sql::{Choice, SqlSession};
use serde::Serialize;
use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// `csd bench oneshot`: one-shot query processes on an image, the warm figure, and
/// DuckDB's fresh process over Parquet of the same rows.
#[derive(Args)]
pub(crate) struct BenchOneshotArgs {
    /// Image holding TPC-H lineitem (`csd load tpch --tables lineitem`). Without it,
    /// lineitem at `--sf` is loaded into a temporary image on the default device.
    #[arg(long)]
    image: Option<PathBuf>,
    /// Scale factor of the lineitem loaded when no `--image` is given.
    #[arg(long, default_value_t = 1.0)]
    sf: f64,
    /// Layout of the lineitem loaded when no `--image` is given.
    #[arg(long, value_enum, default_value_t = LayoutArg::Pax)]
    layout: LayoutArg,
    /// Queries over lineitem: `q1`, `q6` or SQL text, comma-separated.
    #[arg(long, value_delimiter = ',', default_values = ["q1", "q6"])]
    queries: Vec<String>,
    /// Strategies (as `csd query --strategy`), comma-separated; `all` is the three.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "all")]
    strategy: Vec<StrategySel>,
    /// Rounds: fresh processes per query and strategy (and per DuckDB query), one of
    /// each per round; the best wall time is reported, with the largest peak RSS, and
    /// the ratio to DuckDB as the median of the rounds' ratios (1 to 100).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Also run `duckdb` (a fresh Python process per run, over Parquet of the same rows).
    #[arg(long, value_enum, value_delimiter = ',')]
    compare: Vec<CompareArg>,
    /// Cold runs: before every timed process, the image's pages (and the Parquet
    /// file's, for DuckDB) leave the host's page cache (`posix_fadvise(DONTNEED)`), as
    /// after a reboot: the first query then reads the image from the host's disk.
    #[arg(long)]
    cold: bool,
    #[command(flatten)]
    report: JsonFlag,
    /// Internal: print the warm scan wall time of the one query and strategy given, as
    /// JSON (run in a child process, so that this process's memory never grows: a
    /// child's `ru_maxrss` starts from its parent's peak).
    #[arg(long, hide = true, requires = "image")]
    warm_probe: bool,
}

/// One measured child process.
struct Child {
    wall_s: f64,
    peak_rss_mib: f64,
    stdout: Vec<u8>,
}

/// Runs `cmd` to its end with stdout captured; its wall time from spawn to exit and its
/// peak resident set (`ru_maxrss` of this child alone, from `wait4`).
fn run_child(cmd: &mut Command, what: &str) -> Result<Child, CliError> {
    let t0 = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| CliError::Usage(format!("starting {what}: {e}")))?;
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let (mut out, mut err) = (child.stdout.take(), child.stderr.take());
    let err_reader = std::thread::spawn(move || {
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_end(&mut stderr);
        }
        stderr
    });
    if let Some(o) = out.as_mut() {
        o.read_to_end(&mut stdout)
            .map_err(|e| CliError::Usage(format!("reading {what}'s output: {e}")))?;
    }
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero `rusage` is a valid value of this plain C struct of integers.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own child, not yet reaped (`Child::wait` is never called on
    // it), and both pointers point to live, writable values of the types wait4 expects.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let wall_s = t0.elapsed().as_secs_f64();
    let stderr = err_reader.join().unwrap_or_default();
    if r != pid {
        return Err(CliError::Usage(format!(
            "waiting for {what}: {}",
            std::io::Error::last_os_error()
        )));
    }
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        return Err(CliError::Usage(format!(
            "{what} failed: {}",
            String::from_utf8_lossy(&stderr).trim()
        )));
    }
    Ok(Child {
        wall_s,
        peak_rss_mib: usage.ru_maxrss as f64 / 1024.0,
        stdout,
    })
}

/// Drop the clean pages of file `path` from the host's page cache (written-back first),
/// so that the next process reads it from the disk.
fn evict(path: &Path) -> Result<(), CliError> {
    use std::os::fd::AsRawFd;
    let io = |e| CliError::Io {
        path: path.to_path_buf(),
        source: e,
    };
    let f = std::fs::File::open(path).map_err(io)?;
    f.sync_data().map_err(io)?;
    // SAFETY: advice on a file descriptor we own, over the whole file; no memory is
    // involved.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(io(std::io::Error::from_raw_os_error(rc)));
    }
    Ok(())
}

/// The best (shortest) of the runs, with the largest peak RSS among them.
fn best<T>(runs: Vec<(Child, T)>) -> Result<(Child, T), CliError> {
    let rss = runs.iter().map(|r| r.0.peak_rss_mib).fold(0.0, f64::max);
    let (mut c, t) = runs
        .into_iter()
        .min_by(|a, b| a.0.wall_s.total_cmp(&b.0.wall_s))
        .ok_or_else(|| CliError::Usage("no run".into()))?;
    c.peak_rss_mib = rss;
    Ok((c, t))
}

/// What `csd query --json` reported: rows, the scans' summed wall and modeled time.
struct QueryJson {
    rows: Vec<Vec<String>>,
    scan_wall_s: f64,
    modeled_s: f64,
}

fn parse_query_json(bytes: &[u8]) -> Result<QueryJson, CliError> {
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| CliError::Usage(format!("csd query --json output: {e}")))?;
    let rows = json_rows(&v["rows"]);
    let scans = v["runs"][0]["scans"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let sum = |k: &str| scans.iter().filter_map(|s| s[k].as_f64()).sum::<f64>();
    Ok(QueryJson {
        rows,
        scan_wall_s: sum("wall_s"),
        modeled_s: sum("modeled_time_s"),
    })
}

/// One query and strategy: the one-shot process, the warm figure, the peer.
#[derive(Serialize)]
struct Row {
    query: String,
    strategy: String,
    oneshot_wall_s: f64,
    oneshot_peak_rss_mib: f64,
    oneshot_scan_wall_s: f64,
    warm_scan_wall_s: f64,
    scan_over_warm: f64,
    modeled_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    duckdb_wall_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    duckdb_query_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    duckdb_peak_rss_mib: Option<f64>,
    /// The median over the rounds of each round's csd / DuckDB wall-time ratio.
    #[serde(skip_serializing_if = "Option::is_none")]
    oneshot_over_duckdb: Option<f64>,
    /// The smallest and largest round's ratio.
    #[serde(skip_serializing_if = "Option::is_none")]
    oneshot_over_duckdb_min: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    oneshot_over_duckdb_max: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    answers_equal: Option<bool>,
}

/// The whole report (`--json`).
#[derive(Serialize)]
struct Report {
    image: String,
    image_generated: bool,
    repeat: usize,
    cold: bool,
    duckdb_version: Option<String>,
    rows: Vec<Row>,
    command: String,
}

/// What DuckDB's fresh process reported: its own query time, the rows, its version.
struct Duck {
    query_s: f64,
    rows: Vec<Vec<String>>,
    version: String,
}

fn scripts_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts")
}

/// The Python that has duckdb (the venv of `scripts/duckdb_tpch.py`, created on first
/// use), asked once so that no venv re-exec is inside a timed run.
fn duckdb_python() -> Result<PathBuf, CliError> {
    let script = scripts_dir().join("duckdb_oneshot.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg("--python")
        .output()
        .map_err(|e| CliError::Usage(format!("running {}: {e}", script.display())))?;
    let py = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || py.is_empty() {
        return Err(CliError::Usage(format!(
            "{} --python failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(PathBuf::from(py))
}

/// One fresh DuckDB process over `parquet` running the query in `sql_file`.
fn duckdb_once(
    py: &Path,
    parquet: &Path,
    sql_file: &Path,
    cold: bool,
) -> Result<(Child, Duck), CliError> {
    let script = scripts_dir().join("duckdb_oneshot.py");
    if cold {
        evict(parquet)?;
    }
    let child = run_child(
        Command::new(py).arg(&script).arg(parquet).arg(sql_file),
        "DuckDB",
    )?;
    let v: Value = serde_json::from_slice(&child.stdout)
        .map_err(|e| CliError::Usage(format!("DuckDB script output: {e}")))?;
    let duck = Duck {
        query_s: v["query_s"].as_f64().unwrap_or(f64::NAN),
        rows: json_rows(&v["rows"]),
        version: v["version"].as_str().unwrap_or("?").to_string(),
    };
    Ok((child, duck))
}

/// One fresh `csd query` process running query `q` with `c` on `image`.
fn csd_once(
    exe: &Path,
    image: &Path,
    q: &str,
    c: Choice,
    cold: bool,
) -> Result<(Child, QueryJson), CliError> {
    if cold {
        evict(image)?;
    }
    let child = run_child(
        Command::new(exe)
            .args(["query", "--json", "--strategy", c.name(), "--image"])
            .arg(image)
            .arg(q),
        "csd query",
    )?;
    let parsed = parse_query_json(&child.stdout)?;
    Ok((child, parsed))
}

/// Rows equal cell for cell (numbers within 1e-9 relative, as `bench tpch` compares).
fn rows_equal(a: &[Vec<String>], b: &[Vec<String>]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q, 1e-6, 1e-9))
        })
}

/// The warm figure: the query run twice in this process on the image, opened as
/// `csd query` opens it; the second run's scan wall time.
fn warm_scan(image: &Path, sql: &str, choice: Choice) -> Result<f64, CliError> {
    let dev = crate::image::open_ro(image, true)?;
    let cfg = dev.ftl().nand().config().clone();
    let client = Client::new(NvmeDevice::from_block(dev))?;
    let settings = csd_sql::ScanSettings::new(choice);
    let mut session = SqlSession::new(client, cfg, settings).map_err(sql_error)?;
    let sel = [strategy_sel(choice)];
    let mut last = f64::NAN;
    for _ in 0..2 {
        let runs = run_sql(&mut session, sql, &sel)?;
        last = runs
            .iter()
            .flat_map(|(_, a)| a.scans.iter().map(|s| s.report.wall_s))
            .sum();
    }
    Ok(last)
}

fn strategy_sel(c: Choice) -> StrategySel {
    match c {
        Choice::Fixed(Strategy::Ihp) => StrategySel::Ihp,
        Choice::Fixed(Strategy::CpuIsp) => StrategySel::CpuIsp,
        Choice::Fixed(Strategy::HwIsp) => StrategySel::HwIsp,
        Choice::Auto => StrategySel::Auto,
    }
}

/// A temporary directory removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn exe() -> Result<PathBuf, CliError> {
    std::env::current_exe().map_err(|e| CliError::Io {
        path: PathBuf::from("csd"),
        source: e,
    })
}

/// The warm figure measured in a child process (`--warm-probe`).
#[derive(Serialize, serde::Deserialize)]
struct WarmProbe {
    warm_scan_wall_s: f64,
}

fn warm_in_child(exe: &Path, image: &Path, q: &str, c: Choice) -> Result<f64, CliError> {
    let child = run_child(
        Command::new(exe)
            .args(["bench", "oneshot", "--warm-probe", "--strategy", c.name()])
            .arg("--queries")
            .arg(q)
            .arg("--image")
            .arg(image),
        "the warm probe",
    )?;
    let p: WarmProbe = serde_json::from_slice(&child.stdout)
        .map_err(|e| CliError::Usage(format!("warm probe output: {e}")))?;
    Ok(p.warm_scan_wall_s)
}

/// `csd bench oneshot`.
pub(crate) fn run(a: &BenchOneshotArgs) -> Result<(), CliError> {
    if a.warm_probe {
        let choices = StrategySel::choices(&a.strategy);
        let (Some(image), [q], [c]) = (&a.image, a.queries.as_slice(), choices.as_slice()) else {
            return Err(CliError::Usage(
                "--warm-probe takes --image, one query and one strategy".into(),
            ));
        };
        let p = WarmProbe {
            warm_scan_wall_s: warm_scan(image, expand_tpch(q), *c)?,
        };
        println!("{}", serde_json::to_string(&p).unwrap_or_default());
        return Ok(());
    }
    if a.compare.contains(&CompareArg::Datafusion) {
        return Err(CliError::Usage(
            "bench oneshot compares with duckdb only (--compare duckdb)".into(),
        ));
    }
    if !(1..=100).contains(&a.repeat) {
        return Err(CliError::Usage(format!(
            "--repeat {}: give 1 to 100 rounds",
            a.repeat
        )));
    }
    let duck_on = a.compare.contains(&CompareArg::Duckdb);
    let choices = StrategySel::choices(&a.strategy);
    if choices.is_empty() || a.queries.is_empty() {
        return Err(CliError::Usage(
            "give at least one query and strategy".into(),
        ));
    }
    let tmp = TempDir(std::env::temp_dir().join(format!("csd-oneshot-{}", std::process::id())));
    std::fs::create_dir_all(&tmp.0).map_err(|e| CliError::Io {
        path: tmp.0.clone(),
        source: e,
    })?;
    let exe = exe()?;
    let (image, generated) = match &a.image {
        Some(i) => (i.clone(), false),
        None => {
            let img = tmp.0.join("lineitem.img");
            if !a.report.json {
                eprintln!(
                    "loading TPC-H lineitem at SF {} into {}",
                    a.sf,
                    img.display()
                );
            }
            run_child(
                Command::new(&exe)
                    .args(["load", "tpch", "--tables", "lineitem", "--sf"])
                    .arg(a.sf.to_string())
                    .arg("--layout")
                    .arg(a.layout.to_string())
                    .arg("--image")
                    .arg(&img),
                "csd load tpch",
            )?;
            (img, true)
        }
    };
    // The peer's data: the same rows as Parquet, written from the image.
    let duck = if duck_on {
        let parquet = tmp.0.join("lineitem.parquet");
        if !a.report.json {
            eprintln!("writing lineitem as Parquet for DuckDB");
        }
        run_child(
            Command::new(&exe)
                .args(["sql", "--strategy", "ihp", "--image"])
                .arg(&image)
                .arg("--output")
                .arg(&parquet)
                .arg("SELECT * FROM lineitem"),
            "csd sql --output",
        )?;
        Some((duckdb_python()?, parquet))
    } else {
        None
    };
    let runs = a.repeat;
    let bar = if a.report.json {
        indicatif::ProgressBar::hidden()
    } else {
        report::progress_bar(
            Some(
                (a.queries.len() * (runs * (choices.len() + usize::from(duck_on)) + choices.len()))
                    as u64,
            ),
            "fresh processes",
        )
    };
    let mut rows = Vec::new();
    let mut version = None;
    for q in &a.queries {
        let sql = expand_tpch(q);
        let peer = match &duck {
            Some((py, parquet)) => {
                let f = tmp.0.join("query.sql");
                std::fs::write(&f, sql).map_err(|e| CliError::Io {
                    path: f.clone(),
                    source: e,
                })?;
                Some((py, parquet, f))
            }
            None => None,
        };
        // Rounds: each starts every strategy's process and DuckDB's once, DuckDB first in
        // even rounds and last in odd ones, so that both sides of a round's ratio ran
        // within seconds of each other.
        let mut ducks: Vec<(Child, Duck)> = Vec::new();
        let mut csds: Vec<Vec<(Child, QueryJson)>> = choices.iter().map(|_| Vec::new()).collect();
        for r in 0..runs {
            let duck_run = |ducks: &mut Vec<(Child, Duck)>| -> Result<(), CliError> {
                if let Some((py, parquet, f)) = &peer {
                    ducks.push(duckdb_once(py, parquet, f, a.cold)?);
                    bar.inc(1);
                }
                Ok(())
            };
            if r % 2 == 0 {
                duck_run(&mut ducks)?;
            }
            for (&c, v) in choices.iter().zip(csds.iter_mut()) {
                v.push(csd_once(&exe, &image, q, c, a.cold)?);
                bar.inc(1);
            }
            if r % 2 == 1 {
                duck_run(&mut ducks)?;
            }
        }
        let duck_walls: Vec<f64> = ducks.iter().map(|d| d.0.wall_s).collect();
        let peer = if ducks.is_empty() {
            None
        } else {
            Some(best(ducks)?)
        };
        if let Some((_, d)) = &peer {
            version = Some(d.version.clone());
        }
        for (&c, v) in choices.iter().zip(csds) {
            let walls: Vec<f64> = v.iter().map(|r| r.0.wall_s).collect();
            let ratio =
                (!duck_walls.is_empty()).then(|| Ratio::within_rounds(&walls, &duck_walls, 1e-9));
            let (child, parsed) = best(v)?;
            let warm = warm_in_child(&exe, &image, q, c)?;
            bar.inc(1);
            rows.push(Row {
                query: q.clone(),
                strategy: c.name().to_string(),
                oneshot_wall_s: child.wall_s,
                oneshot_peak_rss_mib: child.peak_rss_mib,
                oneshot_scan_wall_s: parsed.scan_wall_s,
                warm_scan_wall_s: warm,
                scan_over_warm: parsed.scan_wall_s / warm,
                modeled_s: parsed.modeled_s,
                duckdb_wall_s: peer.as_ref().map(|d| d.0.wall_s),
                duckdb_query_s: peer.as_ref().map(|d| d.1.query_s),
                duckdb_peak_rss_mib: peer.as_ref().map(|d| d.0.peak_rss_mib),
                oneshot_over_duckdb: ratio.map(|r| r.median),
                oneshot_over_duckdb_min: ratio.map(|r| r.min),
                oneshot_over_duckdb_max: ratio.map(|r| r.max),
                answers_equal: peer.as_ref().map(|d| rows_equal(&parsed.rows, &d.1.rows)),
            });
        }
    }
    bar.finish_and_clear();
    let rep = Report {
        image: image.display().to_string(),
        image_generated: generated,
        repeat: a.repeat,
        cold: a.cold,
        duckdb_version: version,
        rows,
        command: crate::reproduce::line(),
    };
    if let Some(r) = rep.rows.iter().find(|r| r.answers_equal == Some(false)) {
        return Err(CliError::Usage(format!(
            "{} ({}): csd's answer differs from DuckDB's",
            r.query, r.strategy
        )));
    }
    if a.report.json {
        println!("{}", serde_json::to_string(&rep).unwrap_or_default());
        return Ok(());
    }
    print_report(&rep, duck_on);
    Ok(())
}

fn print_report(rep: &Report, duck_on: bool) {
    let mut header = vec![
        "query",
        "strategy",
        "one-shot wall s",
        "peak RSS MiB",
        "scan wall s",
        "warm scan s",
        "scan / warm",
        "modeled s",
    ];
    if duck_on {
        header.extend([
            "duckdb wall s",
            "duckdb query s",
            "duckdb RSS MiB",
            "csd / duckdb (rounds)",
        ]);
    }
    let mut t = report::table(&header);
    for r in &rep.rows {
        let mut cells = vec![
            r.query.clone(),
            r.strategy.clone(),
            format!("{:.3}", r.oneshot_wall_s),
            format!("{:.0}", r.oneshot_peak_rss_mib),
            format!("{:.3}", r.oneshot_scan_wall_s),
            format!("{:.3}", r.warm_scan_wall_s),
            format!("{:.2}", r.scan_over_warm),
            format!("{:.4}", r.modeled_s),
        ];
        if let (Some(w), Some(q), Some(m), Some(median), Some(min), Some(max)) = (
            r.duckdb_wall_s,
            r.duckdb_query_s,
            r.duckdb_peak_rss_mib,
            r.oneshot_over_duckdb,
            r.oneshot_over_duckdb_min,
            r.oneshot_over_duckdb_max,
        ) {
            cells.extend([
                format!("{w:.3}"),
                format!("{q:.3}"),
                format!("{m:.0}"),
                Ratio { median, min, max }.shown(rep.repeat),
            ]);
        }
        t.add_row(cells);
    }
    println!("{t}");
    println!(
        "image: {}{}; best of {} fresh processes per row (peak RSS: the largest of them)",
        rep.image,
        if rep.image_generated {
            " (generated, removed)"
        } else {
            ""
        },
        rep.repeat
    );
    if rep.cold {
        println!(
            "cold: the image's (and the Parquet file's) pages left the page cache before every timed process; the warm scan is warm"
        );
    }
    if let Some(v) = &rep.duckdb_version {
        println!(
            "duckdb {v}: a fresh Python process per run over Parquet of the same rows; answers equal"
        );
        println!(
            "csd / duckdb: the median (and range) over {} rounds of each round's ratio; a round starts every strategy's process and DuckDB's once, DuckDB first in even rounds",
            rep.repeat
        );
    }
    println!("reproduce: {}", rep.command);
}
