//! The FTL on an image file: recover the one that is there or format a new one, and
//! shut it down cleanly. Shared by `csd io` (block mode) and `csd serve`.

use crate::CliError;
use csd_device::{BlockDevice, IoTarget};
use csd_ftl::{Ftl, FtlConfig, FtlError};
use csd_nand::Nand;

/// The FTL of an image's flash array: recovered from its last checkpoint and log
/// (after a clean shutdown or a crash alike), or formatted when the image holds none
/// or `format` is set. Progress goes to stderr unless `quiet`.
pub(crate) fn recover_or_format(
    nand: Nand,
    cfg: FtlConfig,
    format: bool,
    quiet: bool,
) -> Result<Ftl, CliError> {
    if format {
        return Ok(Ftl::format(nand, cfg)?);
    }
    match Ftl::try_recover(nand, cfg) {
        Ok(f) => {
            if let (Some(r), false) = (f.last_recovery(), quiet) {
                eprintln!(
                    "recovered the FTL from checkpoint {}: {} log pages replayed, {:.3} ms modeled, {:.3} ms wall-clock",
                    r.checkpoint_seq,
                    r.log_pages,
                    r.modeled_s * 1e3,
                    r.wall_s * 1e3
                );
            }
            Ok(f)
        }
        Err(failed) if matches!(failed.error, FtlError::NotFormatted) => {
            if !quiet {
                eprintln!("formatting the FTL on this image (no FTL found)");
            }
            Ok(Ftl::format(*failed.nand, cfg)?)
        }
        Err(failed) => Err(failed.error.into()),
    }
}

/// Clean shutdown of a block device on an image: commit buffered writes, write a
/// checkpoint (so the next start replays no log), and force the image to disk.
pub(crate) fn clean_shutdown(b: &mut BlockDevice) -> Result<(), CliError> {
    let now = b.now();
    let t = b.ftl_mut().flush(now)?;
    b.ftl_mut().checkpoint(t)?;
    b.ftl_mut().nand_mut().sync()?;
    Ok(())
}
