//! `csd bench open`: how long opening an image takes, and how much memory, on a device
//! of real size: freshly created, after writing G GiB and a clean shutdown, and after
//! a crash with G GiB written (the log since the last checkpoint replayed).
//!
//! Each open is measured in a child process (`csd bench open --probe`), so the figures
//! are those a user's command pays: wall time of the open and the process's peak
//! resident memory (`VmHWM`).

use crate::args::JsonFlag;
use crate::{CliError, ConfigSource, report};
use clap::Args;
use csd_device::stack::{self, OpenOptions};
use csd_device::workload::IoTarget;
use csd_ftl::FtlConfig;
use csd_nand::Access;
use csd_sim::SimTime;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Arguments of `csd bench open`.
#[derive(Args)]
pub(crate) struct BenchOpenArgs {
    #[command(flatten)]
    src: ConfigSource,
    /// Directory for the image (default: the system's temporary directory); it needs
    /// free space for the largest amount written.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// GiB written before the clean-shutdown measurement.
    #[arg(long, default_value_t = 4)]
    clean_gib: u64,
    /// GiB written before each crash measurement (comma-separated).
    #[arg(long, default_value = "1,16", value_delimiter = ',')]
    crash_gib: Vec<u64>,
    /// 512 KiB write commands after each crash measurement's GiB (so the crash falls
    /// inside a checkpoint interval: they are the log recovery replays).
    #[arg(long, default_value_t = 512)]
    tail_commands: u64,
    #[command(flatten)]
    report: JsonFlag,
    /// Internal: open this image once and print the measurement.
    #[arg(long, hide = true)]
    probe: Option<PathBuf>,
    /// Internal: with --probe, open read-write.
    #[arg(long, hide = true)]
    probe_rw: bool,
}

/// How an image is opened for a probe (serialized as `read-only` / `read-write`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
enum OpenAccess {
    /// Opened read-only.
    ReadOnly,
    /// Opened read-write.
    ReadWrite,
}

impl OpenAccess {
    /// The access of `--probe-rw`.
    fn of(rw: bool) -> OpenAccess {
        if rw {
            OpenAccess::ReadWrite
        } else {
            OpenAccess::ReadOnly
        }
    }

    /// The device stack's access mode.
    fn access(self) -> Access {
        match self {
            OpenAccess::ReadOnly => Access::ReadOnly,
            OpenAccess::ReadWrite => Access::ReadWrite,
        }
    }

    /// The name in the report (as serialized).
    fn name(self) -> &'static str {
        match self {
            OpenAccess::ReadOnly => "read-only",
            OpenAccess::ReadWrite => "read-write",
        }
    }
}

/// One measured open.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Probe {
    /// The image's state: an open-ended label ("N GiB written, clean shutdown", "crash
    /// after N GiB written"), so it stays a string.
    case: String,
    access: OpenAccess,
    open_wall_s: f64,
    peak_rss_mib: f64,
    log_pages_replayed: u64,
    clean: bool,
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn probe(path: &Path, rw: bool) -> Result<(), CliError> {
    let opts = OpenOptions {
        access: OpenAccess::of(rw).access(),
        ..OpenOptions::default()
    };
    let t0 = std::time::Instant::now();
    let (mut dev, rep) = stack::open_image(path, &opts)?;
    let wall = t0.elapsed().as_secs_f64();
    let rec = rep.recovery.unwrap_or_default();
    let p = Probe {
        case: String::new(),
        access: OpenAccess::of(rw),
        open_wall_s: wall,
        peak_rss_mib: peak_rss_mib(),
        log_pages_replayed: rec.log_pages,
        clean: rec.clean,
    };
    stack::close(&mut dev)?;
    println!("{}", serde_json::to_string(&p).unwrap_or_default());
    Ok(())
}

fn measure(path: &Path, case: &str, rw: bool) -> Result<Probe, CliError> {
    let exe = std::env::current_exe().map_err(|e| CliError::Io {
        path: PathBuf::from("csd"),
        source: e,
    })?;
    let mut cmd = Command::new(exe);
    cmd.args(["bench", "open", "--probe"]).arg(path);
    if rw {
        cmd.arg("--probe-rw");
    }
    let out = cmd.output().map_err(|e| CliError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut p: Probe = serde_json::from_str(text.trim()).map_err(|_| {
        CliError::Usage(format!(
            "the open probe failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    })?;
    p.case = case.to_string();
    Ok(p)
}

/// Write `gib` GiB sequentially from LBA `from`, 512 KiB per command; returns the next LBA.
fn write_gib(
    dev: &mut csd_device::BlockDevice,
    from: u64,
    gib: u64,
    label: &str,
    show: bool,
) -> Result<u64, CliError> {
    let ss = dev.ftl().lba_size() as u64;
    let per = (512 * 1024) / ss;
    let n = (gib << 30) / ss;
    let cap = dev.ftl().lbas();
    let bar = show.then(|| {
        let pb = report::progress_bar(Some(n), "LBAs");
        pb.set_message(label.to_string());
        pb
    });
    let mut buf = vec![0u8; (per * ss) as usize];
    let mut t = dev.now();
    let mut done = 0;
    while done < n {
        let l = (from + done) % cap;
        let k = per.min(n - done).min(cap - l);
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (i as u64 ^ l) as u8;
        }
        t = dev
            .ftl_mut()
            .write(l, &buf[..(k * ss) as usize], t)
            .map_err(CliError::Ftl)?;
        done += k;
        if let Some(pb) = &bar
            && done % (per * 256) == 0
        {
            pb.set_position(done);
        }
    }
    if let Some(pb) = bar {
        pb.finish_and_clear();
    }
    let _ = SimTime::ZERO;
    Ok(from + n)
}

/// Run `csd bench open`.
pub(crate) fn run(a: &BenchOpenArgs) -> Result<(), CliError> {
    if let Some(p) = &a.probe {
        return probe(p, a.probe_rw);
    }
    let cfg = a.src.load()?;
    let dir = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    let path = dir.join(format!("csd-bench-open-{}.img", std::process::id()));
    let show = !a.report.json;
    let result = (|| -> Result<Vec<Probe>, CliError> {
        let mut probes = Vec::new();
        drop(stack::create_image(
            &path,
            cfg.clone(),
            FtlConfig::default(),
        )?);
        probes.push(measure(&path, "fresh", false)?);
        probes.push(measure(&path, "fresh", true)?);
        // Written, clean shutdown.
        let (mut dev, _) = stack::open_image(&path, &OpenOptions::read_write())?;
        let mut next = write_gib(&mut dev, 0, a.clean_gib, "writing", show)?;
        stack::close(&mut dev)?;
        drop(dev);
        let case = format!("{} GiB written, clean shutdown", a.clean_gib);
        probes.push(measure(&path, &case, false)?);
        probes.push(measure(&path, &case, true)?);
        // Crashes: write, then drop the device without a shutdown (the image holds what
        // a killed process leaves).
        for &g in &a.crash_gib {
            let (mut dev, _) = stack::open_image(&path, &OpenOptions::read_write())?;
            next = write_gib(&mut dev, next, g, "writing before the crash", show)?;
            // More commands, so the crash falls inside a checkpoint interval.
            let ss = dev.ftl().lba_size();
            let extra = vec![0x5Au8; 512 * 1024];
            for i in 0..a.tail_commands {
                let at = dev.now();
                let l = (next + i * (512 * 1024 / ss as u64)) % dev.ftl().lbas();
                dev.ftl_mut().write(l, &extra, at).map_err(CliError::Ftl)?;
            }
            drop(dev);
            let case = format!("crash after {g} GiB written");
            probes.push(measure(&path, &case, false)?);
            probes.push(measure(&path, &case, true)?);
        }
        Ok(probes)
    })();
    let _ = std::fs::remove_file(&path);
    let probes = result?;
    let cmd = crate::reproduce::line();
    if a.report.json {
        let v = serde_json::json!({ "device": cfg.name, "opens": probes, "command": cmd });
        println!("{v}");
        return Ok(());
    }
    let mut t = report::table(&[
        "image",
        "open",
        "wall s",
        "peak RSS MiB",
        "log pages replayed",
    ]);
    for p in &probes {
        t.add_row(vec![
            p.case.clone(),
            p.access.name().to_string(),
            format!("{:.3}", p.open_wall_s),
            format!("{:.1}", p.peak_rss_mib),
            p.log_pages_replayed.to_string(),
        ]);
    }
    println!("{t}");
    println!("device: {} ({})", cfg.name, cfg.geometry);
    println!("reproduce: {cmd}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probe's access keeps its JSON names, and a probe line parses back.
    #[test]
    fn open_access_serde_names() {
        for (a, name) in [
            (OpenAccess::ReadOnly, "read-only"),
            (OpenAccess::ReadWrite, "read-write"),
        ] {
            assert_eq!(a.name(), name);
            assert_eq!(
                serde_json::to_string(&a).expect("json"),
                format!("\"{name}\"")
            );
        }
        assert_eq!(OpenAccess::of(true).access(), Access::ReadWrite);
        assert_eq!(OpenAccess::of(false).access(), Access::ReadOnly);
        let line = r#"{"case":"","access":"read-write","open_wall_s":0.5,"peak_rss_mib":12.0,"log_pages_replayed":3,"clean":false}"#;
        let p: Probe = serde_json::from_str(line).expect("probe");
        assert_eq!(p.access, OpenAccess::ReadWrite);
        assert_eq!(serde_json::to_string(&p).expect("json"), line);
        assert!(serde_json::from_str::<Probe>(&line.replace("read-write", "rw")).is_err());
    }
}
