//! `csd bench serve`: `csd serve` against real peers in the same run. fio's nbd engine
//! drives `csd serve` (an image of the chosen device, virtual clock), `nbdkit memory` (a
//! RAM disk behind the same protocol) and `nbdkit file` (a file on the same file system
//! as the image: the fair peer for durability, since both sync to disk on FLUSH) with the
//! same jobs — 4 KiB random writes, random writes with a FLUSH after every 32 (fio
//! `--fsync=32`), and random reads, queue depth 32 — and the table gives IOPS side by
//! side and the ratios. The emulator's own speed is what is measured: the device model
//! runs in virtual time.

use crate::args::JsonFlag;
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
    /// Seconds per fio job.
    #[arg(long, default_value_t = 10)]
    runtime: u64,
    /// Region the jobs address (e.g. 2g).
    #[arg(long, default_value = "2g", value_parser = crate::units::parse_size)]
    size: u64,
    /// fio queue depth.
    #[arg(long, default_value_t = 32)]
    iodepth: u32,
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
                serde_json::json!({
                    "job": r.job,
                    "csd_iops": r.csd,
                    "nbdkit_memory_iops": r.memory,
                    "nbdkit_file_iops": r.file,
                    "ratio_memory": r.csd / r.memory.max(1.0),
                    "ratio_file": r.csd / r.file.max(1.0),
                })
            })
            .collect();
        println!("{}", serde_json::json!({"jobs": v, "command": cmd}));
        return Ok(());
    }
    let mut t = report::table(&[
        "fio job (4 KiB, nbd)",
        "csd serve IOPS",
        "nbdkit memory IOPS",
        "nbdkit file IOPS",
        "csd / memory",
        "csd / file",
    ]);
    for r in &rows {
        t.add_row(vec![
            r.job.to_string(),
            format!("{:.0}", r.csd),
            format!("{:.0}", r.memory),
            format!("{:.0}", r.file),
            format!("{:.2}x", r.csd / r.memory.max(1.0)),
            format!("{:.2}x", r.csd / r.file.max(1.0)),
        ]);
    }
    println!("{t}");
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

/// One job's IOPS on each server.
struct Row {
    job: &'static str,
    csd: f64,
    memory: f64,
    file: f64,
}

/// `csd serve` on a fresh image, `nbdkit memory` and `nbdkit file` side by side in
/// `dir`, each job of fio on all three.
fn measure(a: &BenchServeArgs, cfg: &DeviceConfig, dir: &Path) -> Result<Vec<Row>, CliError> {
    let image = dir.join("dev.img");
    let csd_sock = dir.join("csd.sock");
    let peer_sock = dir.join("peer.sock");
    let exe = std::env::current_exe().map_err(|e| CliError::Io {
        path: PathBuf::from("csd"),
        source: e,
    })?;
    let mut serve = Command::new(exe);
    serve
        .args(["serve", "--image"])
        .arg(&image)
        .arg("--socket")
        .arg(&csd_sock)
        .args([
            "--write-cache",
            &a.write_cache.to_string(),
            "--stats-interval",
            "0",
        ]);
    for s in a.src.describe().split_whitespace() {
        serve.arg(s);
    }
    let _csd = Killed(
        serve
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| CliError::Usage(format!("csd serve: {e}")))?,
    );
    wait_for(&csd_sock)?;
    let bytes = cfg.geometry.raw_capacity();
    let _peer = Killed(
        Command::new("nbdkit")
            .args(["--foreground", "-U"])
            .arg(&peer_sock)
            .args(["memory", &bytes.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| CliError::Usage(format!("nbdkit: {e}")))?,
    );
    wait_for(&peer_sock)?;
    let file_sock = dir.join("file.sock");
    let file = dir.join("peer.raw");
    std::fs::File::create(&file)
        .and_then(|f| f.set_len(bytes))
        .map_err(|e| CliError::Io {
            path: file.clone(),
            source: e,
        })?;
    let _file_peer = Killed(
        Command::new("nbdkit")
            .args(["--foreground", "-U"])
            .arg(&file_sock)
            .arg("file")
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| CliError::Usage(format!("nbdkit: {e}")))?,
    );
    wait_for(&file_sock)?;
    let uri = |s: &Path| format!("nbd+unix:///?socket={}", s.display());
    let out = dir.join("fio.json");
    let mut rows = Vec::new();
    for (job, rw, fsync) in JOBS {
        if !a.report.json {
            eprintln!(
                "fio {job} on csd serve, nbdkit memory and nbdkit file ({} s each)",
                a.runtime
            );
        }
        rows.push(Row {
            job,
            csd: fio(&uri(&csd_sock), (rw, fsync), a, &out)?,
            memory: fio(&uri(&peer_sock), (rw, fsync), a, &out)?,
            file: fio(&uri(&file_sock), (rw, fsync), a, &out)?,
        });
    }
    Ok(rows)
}
