//! Opening devices for CLI commands: the device layer's one constructor
//! (`csd_device::stack`) plus the CLI's options and rules — the FTL options shared by
//! `csd io` and `csd serve`, format-time options refused on an image that already holds an
//! FTL, notices on stderr when an open was not routine, and output paths that never
//! overwrite an image or a file csd did not write.
//!
//! **A device config given for an existing image** (`--preset`, `--config`, `--set`):
//! the image keeps the config it was created with (it is recorded in its header, and
//! the media, the controller and the energy model all read it from there), so a setting
//! cannot be changed by opening it with another. The geometry must match (the media
//! layer's check shows both). A `--set KEY=VALUE` that differs from the image's value
//! is an error naming each such key with both values: the user asked for that value
//! explicitly, and running with another one would report figures of a device they did
//! not ask for. `--set` alone is taken relative to the image's own config (restating a
//! value is fine). Non-geometry fields in which a whole `--preset`/`--config` differs from
//! the image's config get a warning naming them (a preset's numbers may have been revised
//! since the image was made; that is no reason to refuse the image).

use crate::{CliError, ConfigSource};
use clap::{Args, ValueEnum};
use csd_device::BlockDevice;
use csd_device::stack::{self, OpenOptions, OpenReport};
use csd_ftl::{FtlConfig, GcPolicy, WriteCache};
use csd_nand::Access;
use csd_sim::DeviceConfig;
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
}

/// Open the block device on `path` read-write: created from `src` if `create` and the
/// file does not exist, formatted only then or on request (`--format`); an image without
/// an FTL is an error naming `--format`. Format-time options on an existing image without
/// `--format` are an error, and so is a `--set` the image's config does not have (see the
/// module documentation). A non-routine open is reported on stderr unless `quiet`.
pub(crate) fn open_rw(
    path: &Path,
    src: &ConfigSource,
    ftl: &FtlArgs,
    create: bool,
    quiet: bool,
) -> Result<BlockDevice, CliError> {
    let exists = path.exists();
    if exists && ftl.op.is_some() && !ftl.format {
        return Err(CliError::Usage(format!(
            "--op applies when the FTL is formatted (a new image, or --format), and {} \
             exists: drop --op, or add --format to format it anew (destroys its data)",
            path.display()
        )));
    }
    let (sector, expect, create_cfg) = if exists {
        let requested = requested_config(src)?;
        let nand = stack::open_media(
            path,
            &OpenOptions {
                expect: requested.as_ref().map(|c| c.geometry),
                ..OpenOptions::read_only()
            },
        )?;
        check_config_source(path, src, requested.as_ref(), nand.config())?;
        (
            nand.geometry().sector_size,
            requested.map(|c| c.geometry),
            None,
        )
    } else if create {
        let cfg = src.load()?;
        (cfg.geometry.sector_size, None, Some(cfg))
    } else {
        // Missing and not to be created: the media layer says so.
        let nand = stack::open_media(path, &OpenOptions::read_only())?;
        (nand.geometry().sector_size, None, None)
    };
    let opts = OpenOptions {
        access: Access::ReadWrite,
        ftl: ftl.config(sector)?,
        expect,
        create: create_cfg,
        format: ftl.format,
    };
    let (dev, rep) = stack::open_image(path, &opts)?;
    notice(path, &rep, quiet);
    Ok(dev)
}

/// The config `--preset` / `--config` name (with the `--set` overrides), when one of them
/// is given; `None` for `--set` alone, which an existing image takes relative to its own
/// config ([`check_config_source`]).
pub(crate) fn requested_config(src: &ConfigSource) -> Result<Option<DeviceConfig>, CliError> {
    if src.preset.is_some() || src.config.is_some() {
        Ok(Some(src.load()?))
    } else {
        Ok(None)
    }
}

/// The rule for a device config given for an existing image (see the module
/// documentation): every `--set` must restate the image's value (an error naming the
/// keys that differ otherwise); fields in which a `--preset`/`--config` (`requested`)
/// differs from the image's config `stored` get a warning on stderr. The geometry is the
/// media layer's check.
pub(crate) fn check_config_source(
    path: &Path,
    src: &ConfigSource,
    requested: Option<&DeviceConfig>,
    stored: &DeviceConfig,
) -> Result<(), CliError> {
    let mut set_keys = Vec::new();
    if !src.set.is_empty() {
        let with_set = DeviceConfig::from_toml_with_overrides(&stored.to_toml(), &src.set)?;
        let changed = config_diff(stored, &with_set);
        if !changed.is_empty() {
            let keys: Vec<String> = changed
                .iter()
                .map(|(k, was, asked)| format!("{k} is {was} there (--set asks for {asked})"))
                .collect();
            return Err(CliError::Usage(format!(
                "{} keeps the device config it was created with, and --set cannot change it \
                 on an existing image: {}. Nothing was opened for writing. Drop the --set (or \
                 restate the image's value), or create a new image with it (`csd device \
                 create ... --set KEY=VALUE --image NEW.img`); `csd device info --image {}` \
                 shows the image's config",
                path.display(),
                keys.join("; "),
                path.display()
            )));
        }
        set_keys = src
            .set
            .iter()
            .filter_map(|s| s.split_once('=').map(|(k, _)| k.trim().to_string()))
            .collect();
    }
    if let Some(req) = requested {
        let ignored: Vec<String> = config_diff(stored, req)
            .into_iter()
            .map(|(k, _, _)| k)
            .filter(|k| {
                !matches!(k.as_str(), "name" | "description" | "source")
                    && !k.starts_with("geometry.")
                    && !set_keys.contains(k)
            })
            .collect();
        if !ignored.is_empty() {
            eprintln!(
                "warning: {} keeps the device config it was created with ({}); the {} given \
                 differs in {} and is not applied to those fields (`csd device info --image {}` \
                 shows the image's config)",
                path.display(),
                stored.name,
                match (&src.preset, &src.config) {
                    (_, Some(c)) => format!("--config {}", c.display()),
                    (Some(p), None) => format!("--preset {p}"),
                    (None, None) => "config".into(),
                },
                ignored.join(", "),
                path.display()
            );
        }
    }
    Ok(())
}

/// The fields (dotted keys, as `--set` names them) in which two configs differ, with the
/// value in `a` and in `b`.
fn config_diff(a: &DeviceConfig, b: &DeviceConfig) -> Vec<(String, String, String)> {
    fn walk(
        prefix: &str,
        a: Option<&toml::Value>,
        b: Option<&toml::Value>,
        out: &mut Vec<(String, String, String)>,
    ) {
        let show =
            |v: Option<&toml::Value>| v.map_or_else(|| "unset".to_string(), |v| v.to_string());
        match (a, b) {
            (Some(toml::Value::Table(x)), Some(toml::Value::Table(y))) => {
                let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
                keys.sort();
                keys.dedup();
                for k in keys {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&key, x.get(k), y.get(k), out);
                }
            }
            (x, y) if x != y => out.push((prefix.to_string(), show(x), show(y))),
            _ => {}
        }
    }
    let (Ok(x), Ok(y)) = (toml::Value::try_from(a), toml::Value::try_from(b)) else {
        // Plain structs of numbers and strings always serialize; if not, no difference
        // can be named.
        return Vec::new();
    };
    let mut out = Vec::new();
    walk("", Some(&x), Some(&y), &mut out);
    out
}

/// Bytes of pages a read-only scanning command reads before it lets them go from the
/// process (they stay in the host's page cache): a query over a table larger than
/// memory, or the first query on an image, then has a resident set bounded by this, not
/// by the table. Rule: the largest power of two that keeps a one-shot TPC-H query at
/// SF 1 (`csd query --image sf1.img q6`, all three strategies; about 100 MB of heap and
/// the binary's pages besides) under 300 MB peak RSS; a larger window means fewer
/// release calls. Measured 2026-12-05 on the 2-core machine, after the image mapping
/// stopped letting the kernel map large page-cache folios whole (`csd_nand`'s
/// `imagemap`), three runs each on a freshly loaded image and on one whose page cache
/// held 2 MiB folios (peak RSS of q6): 32 MiB 164–197 MiB, 64 MiB 210–229 MiB, 128 MiB
/// 272–292 MiB (up to 306 MB); q1 at 64 MiB 205–217 MiB; ten more q6 runs at 64 MiB
/// 202–241 MiB; scan wall times equal within
/// the machine's noise. (Measured 2026-12-01, before that change, on an image whose page
/// cache held large folios: 64 MiB 297–306 MB, 32 MiB 282–284 MB.)
pub(crate) const SCAN_RESIDENT_BYTES: usize = 64 << 20;

/// Open the block device on `path` read-only: nothing is written to the image, even when
/// the FTL needs recovery (it is replayed in memory). Reported on stderr unless `quiet`.
/// Pages it reads leave the process's resident set every [`SCAN_RESIDENT_BYTES`]
/// (scans); [`open_ro_serving`] keeps them (random reads over a working set).
pub(crate) fn open_ro(path: &Path, quiet: bool) -> Result<BlockDevice, CliError> {
    let mut dev = open_ro_serving(path, quiet)?;
    dev.ftl_mut()
        .nand_mut()
        .set_release_read_bytes(Some(SCAN_RESIDENT_BYTES));
    Ok(dev)
}

/// [`open_ro_serving`] when `keep_pages` (a process of several statements), else
/// [`open_ro`].
pub(crate) fn open_ro_keeping(
    path: &Path,
    quiet: bool,
    keep_pages: bool,
) -> Result<BlockDevice, CliError> {
    if keep_pages {
        open_ro_serving(path, quiet)
    } else {
        open_ro(path, quiet)
    }
}

/// [`open_ro`] for a process that reads the same data again (random reads over a working
/// set in `csd serve`, statement after statement in `csd sql`'s shell, query after query in
/// `csd worker`): what was read stays mapped.
pub(crate) fn open_ro_serving(path: &Path, quiet: bool) -> Result<BlockDevice, CliError> {
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
