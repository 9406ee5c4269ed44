//! `csd bench serve`: `csd serve` against real peers in the same run. fio's nbd engine
//! drives `csd serve` (an image of the chosen device, virtual clock), `csd serve
//! --memory` (the same device in memory), `nbdkit memory` (a RAM disk behind the same
//! protocol: the like-for-like peer of the device in memory) and `nbdkit file` (a file on
//! the same file system as the image: the fair peer for durability, since both sync to
//! disk on FLUSH) and `nbdkit null` (nbdkit keeping nothing, reading zeros: what its
//! request handling and the client allow with no storage behind them, so what no
//! server of nbdkit's design can pass) with the same jobs — 4 KiB random writes, random writes with a FLUSH after every 32 (fio
//! `--fsync=32`), and random reads, queue depth 32 — and the table gives IOPS side by
//! side and the ratios. The emulator's own speed is what is measured: the device model
//! runs in virtual time. `csd serve --memory` starts afresh before every writing run (in
//! memory its FTL turns read-only once it wrote as many blocks as its memory limit
//! holds); a fio job that fails fails the bench rather than show 0 IOPS.
//!
//! On a shared machine a server's IOPS moves by 2x or more from one minute to the next
//! (other tenants), more than the differences measured. So each job runs in `--rounds`
//! rounds; a round runs the five servers back to back, each round in another order
//! (round `r` starts with server `r mod 5`) so that drift falls on every server alike.
//! Ratios are taken within a round (the servers ran under the same load); the table
//! gives each server's median IOPS, the median of the rounds' ratios and their range.

use crate::args::JsonFlag;
use crate::rounds::{Ratio, median};
use crate::{CliError, ConfigSource, report};
use clap::Args;
use csd_sim::DeviceConfig;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Arguments of `csd bench serve`.
#[derive(Args)]
pub(crate) struct BenchServeArgs {
    #[command(flatten)]
    src: ConfigSource,
    /// Write cache of the served device.
    #[arg(long, value_enum, default_value_t = crate::image::CacheArg::WriteBack)]
    write_cache: crate::image::CacheArg,
    /// Time model of the served device (`csd serve --time-model`): `calendar` or
    /// `events` (issue 30's event core).
    #[arg(long, default_value = csd_sim::events::TimeModel::default().name(), value_parser = super::io::parse_time_model)]
    time_model: csd_sim::events::TimeModel,
    /// Seconds per fio job.
    #[arg(long, default_value_t = 10)]
    runtime: u64,
    /// Region the jobs address (e.g. 2g).
    #[arg(long, default_value = "2g", value_parser = crate::units::parse_size)]
    size: u64,
    /// fio queue depth.
    #[arg(long, default_value_t = 32)]
    iodepth: u32,
    /// Rounds per job: each round runs every server once, in a rotated order; figures
    /// are medians over the rounds, ratios taken within a round.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=99))]
    rounds: u32,
    /// Directory for the image and sockets (default: the system's temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    #[command(flatten)]
    report: JsonFlag,
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the pid of a child we spawned.
        unsafe {
            libc::kill(self.0.id() as i32, libc::SIGTERM);
        }
        let _ = self.0.wait();
    }
}

fn need(tool: &str) -> Result<(), CliError> {
    let ok = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Ok(())
    } else {
        Err(CliError::Usage(format!(
            "`{tool}` is needed for this benchmark (Debian: apt-get install fio nbdkit)"
        )))
    }
}

fn wait_for(path: &Path) -> Result<(), CliError> {
    let t0 = Instant::now();
    while !path.exists() {
        if t0.elapsed() > Duration::from_secs(30) {
            return Err(CliError::Usage(format!(
                "{} did not appear: the server did not start",
                path.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Starts server `cmd` (named `name` in errors) with its output discarded, once its Unix
/// socket `sock` appears; stopped when the handle is dropped.
fn start_server(cmd: &mut Command, name: &str, sock: &Path) -> Result<Killed, CliError> {
    let k = Killed(
        cmd.stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| CliError::Usage(format!("{name}: {e}")))?,
    );
    wait_for(sock)?;
    Ok(k)
}

/// `nbdkit` in the foreground on the Unix socket `sock` with plugin arguments `plugin`.
fn nbdkit(sock: &Path, plugin: &[&std::ffi::OsStr]) -> Result<Killed, CliError> {
    start_server(
        Command::new("nbdkit")
            .args(["--foreground", "-U"])
            .arg(sock)
            .args(plugin),
        "nbdkit",
        sock,
    )
}

/// The fio jobs: (name, fio `--rw`, flush after every N writes).
const JOBS: [(&str, &str, u32); 3] = [
    ("randwrite", "randwrite", 0),
    ("randwrite+flush/32", "randwrite", 32),
    ("randread", "randread", 0),
];

/// Run one fio job on `uri`; returns its IOPS.
fn fio(
    uri: &str,
    (rw, fsync): (&str, u32),
    a: &BenchServeArgs,
    out: &Path,
) -> Result<f64, CliError> {
    let status = Command::new("fio")
        .args([
            "--name=csd",
            "--ioengine=nbd",
            &format!("--uri={uri}"),
            &format!("--rw={rw}"),
            "--bs=4k",
            &format!("--iodepth={}", a.iodepth),
            &format!("--size={}", a.size),
            &format!("--runtime={}", a.runtime),
            "--time_based",
            "--output-format=json",
        ])
        .args((fsync > 0).then(|| format!("--fsync={fsync}")))
        .arg(format!("--output={}", out.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| CliError::Usage(format!("fio: {e}")))?;
    let text = std::fs::read_to_string(out).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|_| CliError::Usage(format!("fio failed ({status}) on {uri}")))?;
    let job = &v["jobs"][0];
    if let Some(e) = job["error"].as_i64().filter(|&e| e != 0) {
        return Err(CliError::Usage(format!(
            "fio's job failed on {uri} (error {e}: {}); its IOPS would be meaningless",
            std::io::Error::from_raw_os_error(e as i32)
        )));
    }
    Ok(job["read"]["iops"].as_f64().unwrap_or(0.0) + job["write"]["iops"].as_f64().unwrap_or(0.0))
}

/// Run `csd bench serve`.
pub(crate) fn run(a: &BenchServeArgs) -> Result<(), CliError> {
    need("fio")?;
    need("nbdkit")?;
    let cfg = a.src.load()?;
    let base = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("csd-bench-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| CliError::Io {
        path: dir.clone(),
        source: e,
    })?;
    let result = measure(a, &cfg, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    let rows = result?;
    let cmd = crate::reproduce::line();
    if a.report.json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                let (memory, file) = (r.ratio(CSD, MEMORY), r.ratio(CSD, FILE));
                let in_memory = r.ratio(CSD_MEMORY, MEMORY);
                let (ceiling, memory_ceiling) = (r.ratio(CSD, NULL), r.ratio(MEMORY, NULL));
                serde_json::json!({
                    "job": r.job,
                    "csd_iops": r.median_iops(CSD),
                    "csd_memory_iops": r.median_iops(CSD_MEMORY),
                    "nbdkit_memory_iops": r.median_iops(MEMORY),
                    "nbdkit_file_iops": r.median_iops(FILE),
                    "nbdkit_null_iops": r.median_iops(NULL),
                    "ratio_memory": memory.median,
                    "ratio_memory_range": [memory.min, memory.max],
                    "ratio_file": file.median,
                    "ratio_file_range": [file.min, file.max],
                    "ratio_in_memory": in_memory.median,
                    "ratio_in_memory_range": [in_memory.min, in_memory.max],
                    "ratio_null": ceiling.median,
                    "ratio_null_range": [ceiling.min, ceiling.max],
                    "ratio_memory_null": memory_ceiling.median,
                    "rounds": r.rounds.iter().map(|x| serde_json::json!({
                        "csd_iops": x[CSD],
                        "csd_memory_iops": x[CSD_MEMORY],
                        "nbdkit_memory_iops": x[MEMORY],
                        "nbdkit_file_iops": x[FILE],
                        "nbdkit_null_iops": x[NULL],
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({"jobs": v, "rounds": a.rounds, "command": cmd})
        );
        return Ok(());
    }
    let mut t = report::table(&[
        "fio job (4 KiB, nbd)",
        "csd serve IOPS",
        "csd serve --memory IOPS",
        "nbdkit memory IOPS",
        "nbdkit file IOPS",
        "nbdkit null IOPS",
        "csd / memory",
        "csd / file",
        "csd --memory / memory",
        "csd / null",
        "memory / null",
    ]);
    for r in &rows {
        let shown = |x: Ratio| x.shown(r.rounds.len());
        t.add_row(vec![
            r.job.to_string(),
            format!("{:.0}", r.median_iops(CSD)),
            format!("{:.0}", r.median_iops(CSD_MEMORY)),
            format!("{:.0}", r.median_iops(MEMORY)),
            format!("{:.0}", r.median_iops(FILE)),
            format!("{:.0}", r.median_iops(NULL)),
            shown(r.ratio(CSD, MEMORY)),
            shown(r.ratio(CSD, FILE)),
            shown(r.ratio(CSD_MEMORY, MEMORY)),
            shown(r.ratio(CSD, NULL)),
            shown(r.ratio(MEMORY, NULL)),
        ]);
    }
    println!("{t}");
    println!(
        "{} round(s) of {} s per server and job, the servers' order rotated each round; IOPS: median over the rounds; ratios: median of the ratios within each round (range in brackets)",
        a.rounds, a.runtime
    );
    println!(
        "nbdkit null keeps nothing (writes dropped, reads of zeros): its IOPS are what nbdkit's request handling and the client allow with no storage behind them, a ceiling for nbdkit memory and file"
    );
    println!(
        "device: {} (virtual clock, write cache {}, host sync {})",
        cfg.name,
        a.write_cache,
        if std::env::var("CSD_HOST_SYNC").is_ok_and(|v| v == "off") {
            "off (CSD_HOST_SYNC=off)"
        } else {
            "on"
        }
    );
    println!("reproduce: {cmd}");
    Ok(())
}

/// Index of `csd serve` (on an image) in a round's IOPS.
const CSD: usize = 0;
/// Index of `nbdkit memory` in a round's IOPS.
const MEMORY: usize = 1;
/// Index of `nbdkit file` in a round's IOPS.
const FILE: usize = 2;
/// Index of `csd serve --memory` in a round's IOPS.
const CSD_MEMORY: usize = 3;
/// Index of `nbdkit null` (the ceiling) in a round's IOPS.
const NULL: usize = 4;
/// Servers in a round.
const N: usize = 5;
/// The servers' names, by index.
const SERVERS: [&str; N] = [
    "csd serve",
    "nbdkit memory",
    "nbdkit file",
    "csd serve --memory",
    "nbdkit null",
];

/// One job's IOPS on each server, per round.
struct Row {
    job: &'static str,
    /// Per round: the IOPS of [`CSD`], [`MEMORY`], [`FILE`], [`CSD_MEMORY`] and [`NULL`].
    rounds: Vec<[f64; N]>,
}

impl Row {
    /// Server `s`'s median IOPS over the rounds.
    fn median_iops(&self, s: usize) -> f64 {
        median(self.rounds.iter().map(|r| r[s]).collect())
    }

    /// Server `a`'s IOPS over server `b`'s, each taken within its round.
    fn ratio(&self, a: usize, b: usize) -> Ratio {
        let col = |s: usize| -> Vec<f64> { self.rounds.iter().map(|r| r[s]).collect() };
        Ratio::within_rounds(&col(a), &col(b), 1.0)
    }
}

/// The order in which round `r` runs the servers: a rotation starting at `r mod N`.
fn order(r: u32) -> [usize; N] {
    let k = r as usize % N;
    std::array::from_fn(|i| (k + i) % N)
}

/// `csd serve` on a fresh image and in memory, `nbdkit memory`, `nbdkit file` and
/// `nbdkit null` side by side in `dir`, each job of fio on all five.
fn measure(a: &BenchServeArgs, cfg: &DeviceConfig, dir: &Path) -> Result<Vec<Row>, CliError> {
    let image = dir.join("dev.img");
    let csd_sock = dir.join("csd.sock");
    let peer_sock = dir.join("peer.sock");
    let exe = std::env::current_exe().map_err(|e| CliError::Io {
        path: PathBuf::from("csd"),
        source: e,
    })?;
    let mem_sock = dir.join("csd-memory.sock");
    // `csd serve` on the image, then on the same device in memory.
    let start_csd = |device: &[&std::ffi::OsStr], sock: &Path| -> Result<Killed, CliError> {
        let mut serve = Command::new(&exe);
        serve
            .arg("serve")
            .args(device)
            .arg("--socket")
            .arg(sock)
            .args([
                "--write-cache",
                &a.write_cache.to_string(),
                "--time-model",
                a.time_model.name(),
                "--stats-interval",
                "0",
            ]);
        for s in a.src.describe().split_whitespace() {
            serve.arg(s);
        }
        start_server(&mut serve, "csd serve", sock)
    };
    let _csd = start_csd(&["--image".as_ref(), image.as_os_str()], &csd_sock)?;
    let mut csd_memory = Some(start_csd(&["--memory".as_ref()], &mem_sock)?);
    let bytes = cfg.geometry.raw_capacity();
    let _peer = nbdkit(&peer_sock, &["memory".as_ref(), bytes.to_string().as_ref()])?;
    let file_sock = dir.join("file.sock");
    let file = dir.join("peer.raw");
    std::fs::File::create(&file)
        .and_then(|f| f.set_len(bytes))
        .map_err(|e| CliError::Io {
            path: file.clone(),
            source: e,
        })?;
    let _file_peer = nbdkit(&file_sock, &["file".as_ref(), file.as_os_str()])?;
    let null_sock = dir.join("null.sock");
    let _null_peer = nbdkit(&null_sock, &["null".as_ref(), bytes.to_string().as_ref()])?;
    let uri = |s: &Path| format!("nbd+unix:///?socket={}", s.display());
    let out = dir.join("fio.json");
    let socks = [&csd_sock, &peer_sock, &file_sock, &mem_sock, &null_sock];
    let bar = if a.report.json {
        indicatif::ProgressBar::hidden()
    } else {
        report::progress_bar(
            Some((JOBS.len() * SERVERS.len()) as u64 * u64::from(a.rounds)),
            "fio runs",
        )
    };
    let mut rows = Vec::new();
    for (job, rw, fsync) in JOBS {
        let mut rounds = Vec::with_capacity(a.rounds as usize);
        for r in 0..a.rounds {
            let mut iops = [0.0; N];
            for s in order(r) {
                bar.set_message(format!(
                    "{job}, round {}/{}: {} ({} s)",
                    r + 1,
                    a.rounds,
                    SERVERS[s],
                    a.runtime
                ));
                if s == CSD_MEMORY && rw.contains("write") && (r, job) != (0, JOBS[0].0) {
                    // A fresh device in memory for every writing run after the first: in
                    // memory the log-structured FTL turns read-only once the blocks it
                    // wrote reach its memory limit, which the rounds' writes (tens of
                    // GiB) would pass (fio then failed and the table showed 0 IOPS).
                    // Reads run on what the last writing run left.
                    drop(csd_memory.take());
                    let _ = std::fs::remove_file(&mem_sock);
                    csd_memory = Some(start_csd(&["--memory".as_ref()], &mem_sock)?);
                }
                iops[s] = fio(&uri(socks[s]), (rw, fsync), a, &out)?;
                bar.inc(1);
            }
            rounds.push(iops);
        }
        rows.push(Row { job, rounds });
    }
    bar.finish_and_clear();
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::{CSD, CSD_MEMORY, FILE, MEMORY, N, NULL, Row, order};

    #[test]
    fn every_server_takes_every_place_in_as_many_rounds_as_servers() {
        let all: Vec<usize> = (0..N).collect();
        for place in 0..N {
            let mut seen: Vec<usize> = (0..N as u32).map(|r| order(r)[place]).collect();
            seen.sort_unstable();
            assert_eq!(seen, all, "place {place}");
        }
        for r in 0..2 * N as u32 {
            let mut o = order(r).to_vec();
            o.sort_unstable();
            assert_eq!(o, all, "round {r} runs each server once");
        }
    }

    #[test]
    fn ratios_are_taken_within_rounds() {
        // The load changes between rounds for every server alike: the ratios within
        // rounds are 2, 2 and 3 against memory, whatever the absolute IOPS.
        let row = Row {
            job: "randwrite",
            rounds: vec![
                [200.0, 100.0, 50.0, 300.0, 400.0],
                [100.0, 50.0, 50.0, 75.0, 125.0],
                [60.0, 20.0, 15.0, 40.0, 80.0],
            ],
        };
        let m = row.ratio(CSD, MEMORY);
        assert_eq!((m.median, m.min, m.max), (2.0, 2.0, 3.0));
        let f = row.ratio(CSD, FILE);
        assert_eq!((f.median, f.min, f.max), (4.0, 2.0, 4.0));
        let in_memory = row.ratio(CSD_MEMORY, MEMORY);
        assert_eq!(
            (in_memory.median, in_memory.min, in_memory.max),
            (2.0, 1.5, 3.0)
        );
        let n = row.ratio(CSD, NULL);
        assert_eq!((n.median, n.min, n.max), (0.75, 0.5, 0.8));
        assert_eq!(row.median_iops(NULL), 125.0);
        assert_eq!(row.median_iops(CSD), 100.0);
        assert_eq!(row.median_iops(MEMORY), 50.0);
    }
}
