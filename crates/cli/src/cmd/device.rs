//! `csd device create | smart | check | info`: device image files (docs/architecture.md's
//! nand layer: a sparse file holding the flash array, its block table and the FTL). `smart`
//! goes through the NVMe-style command interface as a host tool would; `check` lives in
//! [`super::check`].

use super::{check, serve};
use crate::args::{ImageFile, JsonFlag};
use crate::{CliError, ConfigSource, report};
use clap::Subcommand;
use csd_device::stack;
use csd_device::{Command, LogPage, NvmeDevice, Payload};
use csd_ftl::FtlConfig;
use csd_nand::NandError;
use csd_sim::SimTime;
use std::path::{Path, PathBuf};

/// `csd device` subcommands.
#[derive(Subcommand)]
pub(crate) enum DeviceCmd {
    /// Create an image file holding a fresh device.
    ///
    /// Example: csd device create --preset nvme-tlc --image dev.img
    Create {
        #[command(flatten)]
        src: ConfigSource,
        /// Image file to create (must not exist; sparse on disk).
        #[arg(long)]
        image: PathBuf,
        /// Over-provisioning of the FTL formatted on it, (physical - logical) / logical.
        #[arg(long, default_value_t = 0.07)]
        op: f64,
        /// Extension bytes per MAP entry for FLIXR per-page indexes (0..=24; a range
        /// index needs 20, a bitmap of up to 160 buckets 24).
        #[arg(long, default_value_t = 0)]
        ext_bytes: u32,
    },
    /// Read the SMART / health log page from an image (through the command interface),
    /// opened read-only: the image is not changed.
    ///
    /// Example: csd device smart --image dev.img --json
    Smart {
        #[command(flatten)]
        image: ImageFile,
        #[command(flatten)]
        report: JsonFlag,
    },
    /// Check an image without changing it: header, block table, FTL checkpoint and log,
    /// and (unless --quick) a read of every mapped LBA; reports what is readable.
    ///
    /// Example: csd device check --image dev.img
    Check(check::CheckArgs),
    /// Print an image's device config, geometry and wear summary.
    ///
    /// Example: csd device info --image dev.img --json
    Info {
        #[command(flatten)]
        image: ImageFile,
        #[command(flatten)]
        report: JsonFlag,
    },
}

/// `csd device ...`.
pub(crate) fn run(d: DeviceCmd) -> Result<(), CliError> {
    match d {
        DeviceCmd::Create {
            src,
            image,
            op,
            ext_bytes,
        } => create(&src, &image, op, ext_bytes),
        DeviceCmd::Smart { image, report: out } => smart(image.path(), out.json),
        DeviceCmd::Info { image, report: out } => {
            let nand = stack::open_media(image.path(), &stack::OpenOptions::read_only())?;
            report::device_info(image.path(), &nand, out.json);
            Ok(())
        }
        DeviceCmd::Check(a) => check::run(&a),
    }
}

/// `csd device create`: a fresh device with a formatted FTL in a sparse image file.
fn create(src: &ConfigSource, image: &Path, op: f64, ext_bytes: u32) -> Result<(), CliError> {
    let cfg = src.load()?;
    let ftl = FtlConfig {
        op,
        ext_bytes,
        ..FtlConfig::default()
    };
    let dev = stack::create_image(image, cfg, ftl)?;
    let f = dev.ftl();
    println!("created {} ({})", image.display(), f.nand().config());
    println!(
        "FTL formatted: {} logical ({} LBAs of {} B), over-provisioning {op}",
        report::bytes(f.lbas() * f.lba_size() as u64),
        f.lbas(),
        f.lba_size()
    );
    let on_disk = std::fs::metadata(image).map(|m| m.len()).unwrap_or(0);
    println!(
        "image size {} (sparse: blocks take disk space once programmed)",
        report::bytes(on_disk)
    );
    Ok(())
}

/// `csd device smart`: the SMART / health log page, read through the command interface
/// (GET LOG PAGE) of the image opened read-only, or a live server's stats file.
fn smart(image: &Path, json: bool) -> Result<(), CliError> {
    let dev = match crate::image::open_ro(image, json) {
        // A live `csd serve` holds the image: show its stats file.
        Err(CliError::Open(stack::OpenError::Nand(NandError::Locked { .. }))) => {
            return serve::print_live_smart(image, json);
        }
        r => r?,
    };
    let mut dev = NvmeDevice::from_block(dev);
    let q = dev
        .create_queue_pair(4)
        .map_err(|s| CliError::Nvme(s.to_string()))?;
    dev.submit(q, Command::GetLogPage(LogPage::Smart), SimTime::ZERO)
        .map_err(|s| CliError::Nvme(s.to_string()))?;
    dev.process();
    let c = dev
        .poll(q)
        .ok_or_else(|| CliError::Nvme("no completion".into()))?;
    let Payload::Smart(log) = c.payload else {
        return Err(CliError::Nvme(format!(
            "SMART log page failed: {}",
            c.status
        )));
    };
    report::print_smart(image, &log, json);
    Ok(())
}
