//! Opening devices for CLI commands: the device layer's one constructor
//! (`csd_device::stack`) plus the CLI's options and rules — the FTL options shared by
//! `csd io` and `csd serve`, format-time options refused on an image that already holds an
//! FTL, notices on stderr when an open was not routine, and output paths that never
//! overwrite an image or a file csd did not write.

use crate::{CliError, ConfigSource};
use clap::{Args, ValueEnum};
use csd_device::BlockDevice;
use csd_device::stack::{self, OpenOptions, OpenReport};
use csd_ftl::{FtlConfig, GcPolicy, WriteCache};
use csd_nand::Access;
use std::path::Path;

/// GC victim choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub(crate) enum GcArg {
    /// The full block with the most garbage.
    #[default]
    Greedy,
    /// Rosenblum & Ousterhout's cost-benefit `(1 - u) / 2u × age`.
    CostBenefit,
}

impl std::fmt::Display for GcArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GcArg::Greedy => "greedy",
            GcArg::CostBenefit => "cost-benefit",
        })
    }
}

/// The controller's write cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub(crate) enum CacheArg {
    /// Every acknowledged write is on flash.
    #[default]
    WriteThrough,
    /// Acknowledged writes are durable after a flush (or with FUA).
    WriteBack,
}

impl std::fmt::Display for CacheArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CacheArg::WriteThrough => "write-through",
            CacheArg::WriteBack => "write-back",
        })
    }
}

/// FTL options of commands that run the block device (`csd io`, `csd serve`).
#[derive(Args, Clone, Debug, Default)]
pub(crate) struct FtlArgs {
    /// Over-provisioning, (physical - logical) / logical, applied when the FTL is
    /// formatted (a new device, or --format); default 0.07. An error on an image that
    /// already holds an FTL.
    #[arg(long)]
    pub op: Option<f64>,
    /// GC victim policy.
    #[arg(long, value_enum, default_value_t)]
    pub gc: GcArg,
    /// Write cache.
    #[arg(long, value_enum, default_value_t)]
    pub write_cache: CacheArg,
    /// Maximum data transfer size of one command (e.g. 512k); larger writes are split
    /// into commands of this size (batch-io §8.2.1). Default 512 KiB.
    #[arg(long, value_parser = crate::units::parse_size)]
    pub mdts: Option<u64>,
    /// GC also starts when this share of the blocks is in use (e.g. 0.5, 0.7; batch-io
    /// §8.2.3), besides the free-block low-water mark.
    #[arg(long)]
    pub gc_start_used: Option<f64>,
    /// Also take a checkpoint every this many modeled milliseconds.
    #[arg(long)]
    pub checkpoint_interval_ms: Option<u64>,
    /// On an image: format the FTL even if the image holds one (destroys its data).
    #[arg(long)]
    pub format: bool,
    /// Extension bytes per MAP entry (0..=24) for FLIXR per-page indexes, applied when
    /// the FTL is formatted: a range index needs 20, a bitmap of up to 160 buckets 24.
    /// Default 0 (no per-page indexes).
    #[arg(long)]
    pub ext_bytes: Option<u32>,
}

impl FtlArgs {
    /// The FTL configuration these options ask for, for sectors of `sector_size` bytes.
    pub(crate) fn config(&self, sector_size: u32) -> Result<FtlConfig, CliError> {
        let d = FtlConfig::default();
        let mdts_sectors = match self.mdts {
            None => d.mdts_sectors,
            Some(b) if b == 0 || b % sector_size as u64 != 0 => {
                return Err(CliError::Usage(format!(
                    "--mdts {b} must be a non-zero multiple of the {sector_size}-byte sector"
                )));
            }
            Some(b) => u32::try_from(b / sector_size as u64)
                .map_err(|_| CliError::Usage(format!("--mdts {b} is too large")))?,
        };
        Ok(FtlConfig {
            op: self.op.unwrap_or(d.op),
            gc_policy: match self.gc {
                GcArg::Greedy => GcPolicy::Greedy,
                GcArg::CostBenefit => GcPolicy::CostBenefit,
            },
            write_cache: match self.write_cache {
                CacheArg::WriteThrough => WriteCache::WriteThrough,
                CacheArg::WriteBack => WriteCache::WriteBack,
            },
            mdts_sectors,
            gc_start_used: self.gc_start_used,
            checkpoint_interval_ms: self.checkpoint_interval_ms.unwrap_or(0),
            ext_bytes: self.ext_bytes.unwrap_or(d.ext_bytes),
            ..d
        })
    }

    /// The options as flags, for a `reproduce:` line.
    pub(crate) fn describe(&self) -> String {
        let mut s = format!(" --gc {} --write-cache {}", self.gc, self.write_cache);
        if let Some(op) = self.op {
            s.push_str(&format!(" --op {op}"));
        }
        if let Some(m) = self.mdts {
            s.push_str(&format!(" --mdts {}", crate::units::format_size(m)));
        }
        if let Some(g) = self.gc_start_used {
            s.push_str(&format!(" --gc-start-used {g}"));
        }
        if let Some(c) = self.checkpoint_interval_ms {
            s.push_str(&format!(" --checkpoint-interval-ms {c}"));
        }
        if let Some(e) = self.ext_bytes {
            s.push_str(&format!(" --ext-bytes {e}"));
        }
        if self.format {
            s.push_str(" --format");
        }
        s
    }
}

/// Open the block device on `path` read-write: created from `src` if `create` and the
/// file does not exist, formatted only if fresh or on request. Format-time options on an
/// image that holds an FTL are an error. A non-routine open is reported on stderr unless
/// `quiet`.
pub(crate) fn open_rw(
    path: &Path,
    src: &ConfigSource,
    ftl: &FtlArgs,
    create: bool,
    quiet: bool,
) -> Result<BlockDevice, CliError> {
    let exists = path.exists();
    let cfg = if create && !exists || src.given() {
        Some(src.load()?)
    } else {
        None
    };
    let sector = match &cfg {
        Some(c) => c.geometry.sector_size,
        None => {
            stack::open_media(path, &OpenOptions::read_only())?
                .geometry()
                .sector_size
        }
    };
    if exists && ftl.op.is_some() && !ftl.format {
        let nand = stack::open_media(path, &OpenOptions::read_only())?;
        if stack::written_blocks(&nand) > 0 {
            return Err(CliError::Usage(format!(
                "--op applies when the FTL is formatted, and {} already holds one: drop --op, \
                 or add --format to re-format it (destroys its data)",
                path.display()
            )));
        }
    }
    let opts = OpenOptions {
        access: Access::ReadWrite,
        ftl: ftl.config(sector)?,
        expect: if exists {
            cfg.as_ref().map(|c| c.geometry)
        } else {
            None
        },
        create: if create { cfg } else { None },
        format: ftl.format,
    };
    let (dev, rep) = stack::open_image(path, &opts)?;
    notice(path, &rep, quiet);
    Ok(dev)
}

/// Open the block device on `path` read-only: nothing is written to the image, even when
/// the FTL needs recovery (it is replayed in memory). Reported on stderr unless `quiet`.
pub(crate) fn open_ro(path: &Path, quiet: bool) -> Result<BlockDevice, CliError> {
    let (dev, rep) = stack::open_image(path, &OpenOptions::read_only())?;
    notice(path, &rep, quiet);
    Ok(dev)
}

fn notice(path: &Path, rep: &OpenReport, quiet: bool) {
    if let (Some(n), false) = (rep.notice(path), quiet) {
        eprintln!("{n}");
    }
}

/// Clean shutdown of a block device on an image (nothing is written when read-only).
pub(crate) fn close(dev: &mut BlockDevice) -> Result<(), CliError> {
    stack::close(dev)?;
    Ok(())
}

/// May csd write a report, plot or stats file at `path`? Never over a csd image, a
/// directory, or an existing file that is not of a kind csd writes (`extensions`, or a
/// stats file csd wrote when `stats` is set).
pub(crate) fn guard_output(path: &Path, extensions: &[&str], stats: bool) -> Result<(), CliError> {
    if !stats {
        return csd_plot::guard_output(path, extensions)
            .map_err(|e| CliError::Usage(e.to_string()));
    }
    csd_plot::guard_output(path, &["json"]).map_err(|e| CliError::Usage(e.to_string()))?;
    let ours = !path.exists()
        || std::fs::read_to_string(path)
            .ok()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
            .is_some_and(|v| {
                // (Stats files of csd before `written_by` have these two keys.)
                v.get("written_by").and_then(|w| w.as_str()) == Some("csd serve")
                    || (v.get("server").is_some() && v.get("image").is_some())
            });
    if ours {
        Ok(())
    } else {
        Err(CliError::Usage(format!(
            "refusing to write {}: it exists and is not a stats file csd serve wrote",
            path.display()
        )))
    }
}
