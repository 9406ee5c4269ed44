//! Building a device: media, FTL and controller, in memory or on an image file. Every
//! tool that opens a device goes through here, so that creating, opening, recovering,
//! formatting and closing follow one set of rules:
//!
//! * **Read-only means read-only.** [`Access::ReadOnly`] opens the image under a shared
//!   lock with a copy-on-write mapping and recovers without writing (an unclean log is
//!   replayed in memory only): the file keeps every byte. Commands that only read use it,
//!   so running the same query twice leaves the image byte-identical.
//! * **Never format implicitly.** The FTL is formatted only when the image is created
//!   ([`create_image`], or [`open_image`] with [`OpenOptions::create`] on a missing file)
//!   or on request ([`OpenOptions::format`]). An image with no FTL is an error on every
//!   open, read-only or read-write: one whose flash holds data names the way out (`csd
//!   device check`, or formatting on request, which destroys the data); one with no block
//!   ever written (a creation that did not finish, a zeroed block table) names
//!   `--format`. (Before, a read-write open formatted such an image unasked, and a zeroed
//!   block table over real data then let the format write into the old blocks.)
//! * **Only regular files are images.** A FIFO, socket, directory or device node given
//!   as the image is refused before anything opens it (opening a FIFO would block until
//!   a writer appears).
//! * **A failed creation leaves nothing behind.** When formatting or syncing a newly
//!   created image fails (an FTL config refused, a full file system), the file is removed,
//!   so a retry does not meet "File exists".
//! * **Opening costs O(metadata)** (see `csd_ftl` recovery): after a clean shutdown
//!   nothing is replayed and nothing written.
//! * **Closing is a clean shutdown**: buffered writes committed, a checkpoint marked clean,
//!   the image forced to disk.

use crate::workload::IoTarget;
use crate::{BlockDevice, DeviceError};
use csd_ftl::{Ftl, FtlConfig, FtlError, RecoveryReport};
use csd_nand::{Access, BlockId, Nand, NandError};
use csd_sim::{DeviceConfig, Geometry};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Why a device could not be opened, with what to do about it.
#[derive(Debug, Error)]
pub enum OpenError {
    /// The media layer refused the image (missing, locked, corrupt header, geometry).
    #[error(transparent)]
    Nand(#[from] NandError),
    /// The FTL refused the configuration or its metadata.
    #[error(transparent)]
    Ftl(#[from] FtlError),
    /// The image holds data but no FTL checkpoint could be found.
    #[error(
        "{path} has no FTL checkpoint that can be read, but {written} of its blocks hold data: \
         run `csd device check --image {path}` to see what is readable, or format it on \
         request (`--format`), which destroys that data"
    )]
    NoFtl {
        /// The image.
        path: PathBuf,
        /// Blocks the media says were programmed or erased.
        written: u64,
    },
    /// The image has no FTL: no block was ever written (a creation that did not finish,
    /// or a zeroed block table). Opens never format implicitly.
    #[error(
        "{path} holds no FTL: it was never formatted (a `csd device create` that did not \
         finish, or a zeroed block table). Nothing was written. Format it on request with \
         `--format` (`csd io`, `csd serve`, `csd kv serve`), or delete it and run `csd device \
         create --image {path}`"
    )]
    Unformatted {
        /// The image.
        path: PathBuf,
    },
    /// The path is not a regular file (a FIFO, socket, directory or device node).
    #[error(
        "{path} is a {kind}, not a regular file: a csd image is a regular file (make one \
         with `csd device create --image PATH`); nothing was opened"
    )]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
}

impl From<OpenError> for DeviceError {
    fn from(e: OpenError) -> Self {
        match e {
            OpenError::Nand(n) => DeviceError::Nand(n),
            other => DeviceError::BadRequest(other.to_string()),
        }
    }
}

/// How to open an image.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// Read-write (default) or read-only.
    pub access: Access,
    /// FTL parameters (the format-time ones apply only when the image is formatted).
    pub ftl: FtlConfig,
    /// The image's geometry must equal this (when the user named a preset or config).
    pub expect: Option<Geometry>,
    /// Create the image with this config when the file does not exist.
    pub create: Option<DeviceConfig>,
    /// Format the FTL (destroys the data on the image); read-write only.
    pub format: bool,
}

impl OpenOptions {
    /// Read-write with default FTL parameters.
    pub fn read_write() -> OpenOptions {
        OpenOptions::default()
    }

    /// Read-only with default FTL parameters.
    pub fn read_only() -> OpenOptions {
        OpenOptions {
            access: Access::ReadOnly,
            ..OpenOptions::default()
        }
    }
}

/// What opening did.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct OpenReport {
    /// The image file was created.
    pub created: bool,
    /// The FTL was formatted (a created image, or on request).
    pub formatted: bool,
    /// The recovery, when an existing FTL was opened.
    pub recovery: Option<RecoveryReport>,
}

impl OpenReport {
    /// A line for stderr when the open was not routine: a recovery that replayed a log
    /// after an unclean shutdown, a format, a creation. `None` after a clean shutdown.
    pub fn notice(&self, path: &Path) -> Option<String> {
        if self.created {
            return Some(format!("created {}", path.display()));
        }
        if self.formatted {
            return Some(format!("formatted the FTL on {}", path.display()));
        }
        let r = self.recovery?;
        (!r.clean || r.log_records > 0).then(|| {
            format!(
                "recovering from an unclean shutdown: {} log records in {} log pages replayed \
                 ({} commits redone, {} verified, {} discarded); {:.3} ms modeled, {:.3} ms wall-clock",
                r.log_records,
                r.log_pages,
                r.commits_redone,
                r.commits_verified,
                r.commits_discarded,
                r.modeled_s * 1e3,
                r.wall_s * 1e3
            )
        })
    }
}

/// A fresh in-memory device with a formatted FTL.
pub fn in_memory(cfg: DeviceConfig, ftl: FtlConfig) -> Result<BlockDevice, OpenError> {
    let nand = Nand::new_in_memory(cfg)?;
    Ok(BlockDevice::new(Ftl::format(nand, ftl)?))
}

/// Create a new image file (it must not exist) and format its FTL. On any failure after
/// the file was made (the FTL config refused, a full file system while formatting or
/// syncing) the file is removed: nothing is left behind.
pub fn create_image(
    path: &Path,
    cfg: DeviceConfig,
    ftl: FtlConfig,
) -> Result<BlockDevice, OpenError> {
    // The media layer removes the file itself when making it fails.
    let nand = Nand::create_image(path, cfg)?;
    let formatted = Ftl::format(nand, ftl)
        .map_err(OpenError::from)
        .and_then(|mut ftl| {
            ftl.nand_mut().sync()?;
            Ok(ftl)
        });
    match formatted {
        Ok(ftl) => Ok(BlockDevice::new(ftl)),
        Err(e) => {
            // The media (and its lock and mapping) went with the failed format; the file
            // is ours, made by `create_image` above with `create_new`.
            let _ = std::fs::remove_file(path);
            Err(e)
        }
    }
}

/// Refuses a path that is not a regular file (following symlinks), before anything
/// opens it: opening a FIFO blocks until a writer appears, and a directory, socket or
/// device node is no image. A missing path passes (the open reports it).
pub fn check_image_path(path: &Path) -> Result<(), OpenError> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(());
    };
    let t = meta.file_type();
    let kind = if t.is_file() {
        return Ok(());
    } else if t.is_dir() {
        "directory"
    } else if t.is_fifo() {
        "FIFO (named pipe)"
    } else if t.is_socket() {
        "socket"
    } else if t.is_block_device() {
        "block device (not supported as an image)"
    } else if t.is_char_device() {
        "character device"
    } else {
        "special file"
    };
    Err(OpenError::NotAFile {
        path: path.to_path_buf(),
        kind,
    })
}

/// Open the media of an image (no FTL), for raw access and inspection.
pub fn open_media(path: &Path, opts: &OpenOptions) -> Result<Nand, OpenError> {
    check_image_path(path)?;
    Ok(Nand::open_image_with(
        path,
        opts.expect.as_ref(),
        opts.access,
    )?)
}

/// Open (or create) the device on an image file; see the module documentation.
pub fn open_image(path: &Path, opts: &OpenOptions) -> Result<(BlockDevice, OpenReport), OpenError> {
    let mut rep = OpenReport::default();
    if !path.exists()
        && let Some(cfg) = &opts.create
    {
        if opts.access == Access::ReadOnly {
            return Err(OpenError::Nand(NandError::Image {
                path: path.to_path_buf(),
                reason: "no such file (a read-only open does not create images)".into(),
            }));
        }
        rep.created = true;
        rep.formatted = true;
        return Ok((create_image(path, cfg.clone(), opts.ftl)?, rep));
    }
    let nand = open_media(path, opts)?;
    if opts.format {
        if opts.access == Access::ReadOnly {
            return Err(OpenError::Ftl(FtlError::Config(
                "cannot format an image opened read-only".into(),
            )));
        }
        rep.formatted = true;
        return Ok((BlockDevice::new(Ftl::format(nand, opts.ftl)?), rep));
    }
    let recovered = match opts.access {
        Access::ReadWrite => Ftl::try_recover(nand, opts.ftl),
        Access::ReadOnly => Ftl::open_read_only(nand, opts.ftl),
    };
    match recovered {
        Ok(ftl) => {
            rep.recovery = ftl.last_recovery();
            Ok((BlockDevice::new(ftl), rep))
        }
        Err(failed) if matches!(failed.error, FtlError::NotFormatted) => {
            let written = written_blocks(&failed.nand);
            if written > 0 {
                return Err(OpenError::NoFtl {
                    path: path.to_path_buf(),
                    written,
                });
            }
            // Never formatted implicitly (see the module documentation).
            Err(OpenError::Unformatted {
                path: path.to_path_buf(),
            })
        }
        Err(failed) => Err(failed.error.into()),
    }
}

/// Blocks the media says were ever programmed or erased (0 for a fresh image).
pub fn written_blocks(nand: &Nand) -> u64 {
    (0..nand.addr().blocks())
        .filter_map(|b| nand.block_info(BlockId(b)).ok())
        .filter(|i| !i.factory_bad && (i.next_page > 0 || i.pe_cycles > 0))
        .count() as u64
}

/// Clean shutdown: commit buffered writes, write a checkpoint marked clean (the next
/// open replays nothing) and force the image to disk. A read-only device writes nothing.
pub fn close(dev: &mut BlockDevice) -> Result<(), OpenError> {
    let now = dev.now();
    dev.ftl_mut().close(now)?;
    dev.ftl_mut().nand_mut().sync()?;
    Ok(())
}
