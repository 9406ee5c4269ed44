//! `csd io`: fio-style workloads on the raw flash array or the FTL's block device, with
//! the modeled figures (IOPS, bandwidth, latency percentiles, utilization, energy) next
//! to the emulator's wall-clock speed (docs/architecture.md's time model: modeled time is the
//! simulation's, wall time only says how fast the emulator ran). The workload engine is
//! `csd_device::workload`; this module only opens the device and prints.

use crate::args::{JsonFlag, Seed};
use crate::args::{parse_clock, parse_rw};
use crate::{CliError, ConfigSource, image, report, units};
use clap::Args;
use csd_device::stack::{self, OpenOptions};
use csd_device::workload::{self, IoReport, Rw, WorkloadSpec};
use csd_device::{BlockDevice, IoTarget, RawDevice};
use csd_nand::Nand;
use csd_sim::ClockMode;
use csd_sim::events::TimeModel;
use std::path::PathBuf;

/// Which interface `csd io` drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum ModeArg {
    /// The FTL's block device (4 KiB LBAs).
    #[default]
    Block,
    /// The raw flash array, page by page (open-channel style).
    Raw,
}

impl std::fmt::Display for ModeArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ModeArg::Block => "block",
            ModeArg::Raw => "raw",
        })
    }
}

/// Options of `csd io`.
#[derive(Args)]
pub(crate) struct IoArgs {
    /// Run on this image file (otherwise a fresh in-memory device).
    #[arg(long)]
    image: Option<PathBuf>,
    #[command(flatten)]
    src: ConfigSource,
    /// Device interface: `block` (the FTL's LBA interface) or `raw` (the flash array page
    /// by page, open-channel style).
    #[arg(long, value_enum, default_value_t)]
    mode: ModeArg,
    #[command(flatten)]
    ftl: image::FtlArgs,
    /// Offsets of random I/O: uniform, zipf[:THETA] (scrambled zipfian, theta 0.99 by
    /// default, as YCSB), or hotcold:H/C (H% of the I/O to C% of the region).
    #[arg(long, default_value = "uniform", value_parser = csd_sim::dist::Dist::parse)]
    dist: csd_sim::dist::Dist,
    /// Access pattern: read, write, randread, randwrite, randrw.
    #[arg(long, default_value = "randread", value_parser = parse_rw)]
    rw: Rw,
    /// Percent reads in randrw.
    #[arg(long, default_value_t = 70)]
    rwmixread: u32,
    /// Bytes per I/O (4k, 16k, 128k ...). Raw writes need whole pages.
    #[arg(long, default_value = "4k", value_parser = units::parse_size)]
    bs: u64,
    /// Region addressed, from offset 0 (default: the whole device).
    #[arg(long, value_parser = units::parse_size)]
    size: Option<u64>,
    /// Commands kept in flight.
    #[arg(long, default_value_t = 32)]
    iodepth: u32,
    /// Operations to run (default 200000 unless --runtime is given).
    #[arg(long)]
    ops: Option<u64>,
    /// Stop after this much modeled time (e.g. 500ms, 2s).
    #[arg(long, value_parser = units::parse_duration_ns)]
    runtime: Option<u64>,
    #[command(flatten)]
    rng: Seed,
    /// Clock: virtual (default, as fast as possible) or paced[:SCALE] (wall time follows modeled time).
    #[arg(long, default_value = "virtual", value_parser = parse_clock)]
    clock: ClockMode,
    /// Block mode: issue writes as batches of N pages (batch-io §3 `flush_batch`).
    #[arg(long, default_value_t = 0)]
    batch: u32,
    /// Time model: `events` (the default: the event core serves every resource
    /// first-come first-served in modeled arrival order; docs/time-model.md) or
    /// `calendar` (each resource books an operation when code asks for it).
    #[arg(long, default_value = csd_sim::events::TimeModel::default().name(), value_parser = parse_time_model)]
    time_model: TimeModel,
    /// Before measuring, write the whole region once (sequential page writes, queue
    /// depth 64) so that reads hit programmed pages.
    #[arg(long)]
    precondition: bool,
    #[command(flatten)]
    report: JsonFlag,
    /// Raw mode on an image: write even though its flash holds data (an FTL and what was
    /// stored through it), which the raw writes destroy.
    #[arg(long)]
    force: bool,
}

impl IoArgs {
    /// Whether the run (or its preconditioning) writes.
    fn writes(&self) -> bool {
        self.precondition || !matches!(self.rw, Rw::Read | Rw::RandRead)
    }
}

/// Open the raw flash array an `io` run drives: in memory, or an image's media —
/// read-only when the run only reads, and for writes only when no block of the image
/// holds data (an FTL included) unless `--force`: raw programs and erases would destroy
/// it.
fn open_media(a: &IoArgs) -> Result<Nand, CliError> {
    let Some(path) = &a.image else {
        return Ok(Nand::new_in_memory(a.src.load()?)?);
    };
    let requested = image::requested_config(&a.src)?;
    let opts = OpenOptions {
        expect: requested.as_ref().map(|c| c.geometry),
        ..if a.writes() {
            OpenOptions::read_write()
        } else {
            OpenOptions::read_only()
        }
    };
    let nand = stack::open_media(path, &opts)?;
    image::check_config_source(path, &a.src, requested.as_ref(), nand.config())?;
    let written = stack::written_blocks(&nand);
    if a.writes() && written > 0 && !a.force {
        return Err(CliError::Usage(format!(
            "refusing raw-mode writes on {}: {written} of its blocks hold data (its FTL's \
             metadata and the data stored through it), which raw page writes and block \
             erases would destroy; nothing was written. Measure raw writes on a new image \
             (`csd device create ... --image NEW.img`) or in memory (no --image), read it \
             with `--rw read|randread`, or add --force to overwrite it anyway",
            path.display()
        )));
    }
    Ok(nand)
}

/// `csd io`: precondition if asked, run the workload, print the report, sync the image.
pub(crate) fn run(a: &IoArgs) -> Result<(), CliError> {
    let mut holder = open(a)?;
    let dev: &mut dyn IoTarget = match &mut holder {
        Dev::Raw(d) => d,
        Dev::Block(d) => d,
    };
    if a.precondition {
        precondition(dev, a)?;
    }
    let r = run_with_progress(dev, &spec(a), !a.report.json)?;
    print_report(&holder, &r, a);
    if let (Dev::Block(b), false) = (&holder, a.report.json)
        && let Some(note) = unwritten_note(b.ftl().stats())
    {
        println!("{note}");
    }
    if let Some(path) = &a.image {
        match &mut holder {
            Dev::Block(b) => image::close(b)?,
            Dev::Raw(d) => d.nand_mut().sync()?,
        }
        if !a.report.json {
            let how = if matches!(holder, Dev::Raw(_)) && !a.writes() {
                "opened read-only: unchanged"
            } else {
                "synced"
            };
            println!("image {} {how}", path.display());
        }
    }
    Ok(())
}

/// A warning when at least a tenth of the sectors read were never written: the FTL
/// answers those from its MAP with zeros, so the run measured no flash reads for them
/// (as fio on a fresh SSD would). `None` otherwise.
fn unwritten_note(st: &csd_ftl::FtlStats) -> Option<String> {
    let (read, unwritten) = (st.host_read_sectors, st.unwritten_read_sectors);
    (read > 0 && unwritten * 10 >= read).then(|| {
        format!(
            "note: {unwritten} of the {read} sectors read ({:.0}%) were never written: the FTL answered them with zeros from its MAP, without a flash read. Write the region first (--precondition, or a write run on an image) to measure flash reads.",
            unwritten as f64 * 100.0 / read as f64
        )
    })
}

/// The device the run drives: the raw array, or the FTL's block device (on an image,
/// the FTL that is there, recovered, unless asked to format).
fn open(a: &IoArgs) -> Result<Dev, CliError> {
    if a.force && (a.mode != ModeArg::Raw || a.image.is_none()) {
        return Err(CliError::Usage(
            "--force applies to raw-mode writes on an image (`--mode raw --image PATH`); \
             block mode formats its FTL anew only with --format"
                .into(),
        ));
    }
    Ok(match (a.mode, &a.image) {
        (ModeArg::Raw, _) => Dev::Raw(RawDevice::new(open_media(a)?)),
        (ModeArg::Block, Some(path)) => {
            Dev::Block(image::open_rw(path, &a.src, &a.ftl, false, a.report.json)?)
        }
        (ModeArg::Block, None) => {
            let cfg = a.src.load()?;
            let ftl = a.ftl.config(cfg.geometry.sector_size)?;
            let dev = csd_device::stack::in_memory(cfg, ftl)?;
            // A run that writes may reach the limit; one that only reads never does.
            if a.rw != Rw::Read
                && a.rw != Rw::RandRead
                && let Some(n) = report::memory_limit_notice(dev.ftl().nand())
            {
                eprintln!("{n}");
            }
            Dev::Block(dev)
        }
    })
}

/// The measured workload (200,000 operations unless --ops or --runtime says otherwise).
fn spec(a: &IoArgs) -> WorkloadSpec {
    WorkloadSpec {
        rw: a.rw,
        rwmixread: a.rwmixread,
        bs: a.bs,
        size: a.size,
        iodepth: a.iodepth,
        ops: if a.ops.is_none() && a.runtime.is_none() {
            Some(200_000)
        } else {
            a.ops
        },
        runtime_ns: a.runtime,
        seed: a.rng.seed,
        clock: a.clock,
        batch: a.batch,
        dist: a.dist,
        time_model: a.time_model,
    }
}

/// `--time-model calendar|events`.
pub(crate) fn parse_time_model(s: &str) -> Result<TimeModel, String> {
    TimeModel::parse(s).ok_or_else(|| format!("unknown time model {s:?}: calendar or events"))
}

/// `--precondition`: write the region once sequentially; on the block device, then
/// overwrite it once at random so that GC reaches steady state.
fn precondition(dev: &mut dyn IoTarget, a: &IoArgs) -> Result<(), CliError> {
    let plan = workload::precondition_plan(dev, a.bs, a.size, a.rng.seed, a.mode == ModeArg::Block);
    for (i, spec) in plan.iter().enumerate() {
        if !a.report.json {
            let region = report::bytes(spec.size.unwrap_or(0));
            if i == 0 {
                eprintln!("preconditioning: writing {region} sequentially");
            } else {
                eprintln!("preconditioning: overwriting {region} at random to reach steady state");
            }
        }
        run_with_progress(dev, spec, !a.report.json)?;
    }
    Ok(())
}

/// The run's report (and the FTL's counters on the block device), as tables or JSON.
fn print_report(holder: &Dev, r: &IoReport, a: &IoArgs) {
    let cmd = crate::reproduce::line();
    if a.report.json {
        let mut v = report::io_json(r, &cmd);
        if let (Dev::Block(b), Some(m)) = (holder, v.as_object_mut()) {
            report::ftl_json(b.ftl(), m);
        }
        println!("{v}");
    } else {
        report::print_io(r, &cmd);
        if let Dev::Block(b) = holder {
            report::print_ftl(b.ftl());
        }
    }
}

/// The device an `io` run drives.
#[allow(clippy::large_enum_variant)] // one per run, never moved around
enum Dev {
    Raw(RawDevice),
    Block(BlockDevice),
}

/// Runs a workload with a progress bar on stderr (when `show`).
pub(crate) fn run_with_progress(
    dev: &mut dyn IoTarget,
    spec: &WorkloadSpec,
    show: bool,
) -> Result<IoReport, CliError> {
    let bar = if show {
        let pb = report::progress_bar(spec.ops, "ops");
        pb.set_message(format!("{} bs={} qd={}", spec.rw, spec.bs, spec.iodepth));
        Some(pb)
    } else {
        None
    };
    let mut cb = |n: u64| {
        if let Some(pb) = &bar {
            pb.set_position(n);
        }
    };
    let r = workload::run(dev, spec, &mut cb);
    if let Some(pb) = bar {
        pb.finish_and_clear();
    }
    Ok(r?)
}

#[cfg(test)]
mod tests {
    use super::unwritten_note;

    #[test]
    fn reads_of_unwritten_sectors_are_pointed_out_from_a_tenth_on() {
        let st = |read, unwritten| csd_ftl::FtlStats {
            host_read_sectors: read,
            unwritten_read_sectors: unwritten,
            ..Default::default()
        };
        assert_eq!(unwritten_note(&st(0, 0)), None);
        assert_eq!(unwritten_note(&st(100, 9)), None);
        let n = unwritten_note(&st(100, 10)).expect("a tenth");
        assert!(
            n.contains("10 of the 100") && n.contains("--precondition"),
            "{n}"
        );
        assert!(unwritten_note(&st(100, 100)).is_some());
    }
}
