//! `csd device check`: what an image holds and what of it is readable, without changing
//! it. The image is opened read-only (a damaged or unclean image is replayed in memory
//! only), so this is the safe first step after a crash or a suspected corruption, and
//! before deciding to format. An image another process holds (its lock taken by a
//! `csd serve`, say) is reported as in use, with no advice to format it; an image that
//! was never formatted is a problem (no command can use it without `--format`).

use crate::args::{ImageFile, JsonFlag};
use crate::{CliError, report};
use clap::Args;
use csd_device::stack::{self, OpenError, OpenOptions};
use csd_ftl::FtlError;
use csd_nand::NandError;
use csd_sim::SimTime;

/// Arguments of `csd device check`.
#[derive(Args)]
pub(crate) struct CheckArgs {
    #[command(flatten)]
    image: ImageFile,
    /// Skip reading every mapped LBA (only the metadata is checked).
    #[arg(long)]
    quick: bool,
    #[command(flatten)]
    report: JsonFlag,
}

/// What the check found.
#[derive(Default, serde::Serialize)]
struct Findings {
    image: String,
    header: String,
    device: Option<String>,
    written_blocks: u64,
    ftl: String,
    recovery: Option<String>,
    read_only: Option<String>,
    lbas: u64,
    lbas_read: u64,
    lbas_unreadable: u64,
    first_unreadable: Vec<u64>,
    /// Another process holds the image (its lock): nothing was checked.
    in_use: bool,
    ok: bool,
}

/// Run `csd device check`.
pub(crate) fn run(a: &CheckArgs) -> Result<(), CliError> {
    let mut f = Findings {
        image: a.image.path().display().to_string(),
        ..Findings::default()
    };
    let nand = match stack::open_media(a.image.path(), &OpenOptions::read_only()) {
        Ok(n) => n,
        Err(OpenError::Nand(NandError::Locked { .. })) => return in_use(a, f),
        Err(e) => {
            f.header = format!("unusable: {e}");
            return finish(a, f);
        }
    };
    f.header = "valid".into();
    f.device = Some(format!("{} ({})", nand.config().name, nand.geometry()));
    f.written_blocks = stack::written_blocks(&nand);
    drop(nand);
    let mut dev = match stack::open_image(a.image.path(), &OpenOptions::read_only()) {
        Ok((dev, rep)) => {
            f.recovery = rep
                .notice(a.image.path())
                .or(Some("clean shutdown: nothing to replay".into()));
            dev
        }
        Err(OpenError::Nand(NandError::Locked { .. })) => return in_use(a, f),
        Err(OpenError::Unformatted { .. }) => {
            f.ftl = "none: never formatted (a creation that did not finish, or a zeroed \
                     block table); opens refuse it until it is formatted with --format"
                .into();
            return finish(a, f);
        }
        Err(e @ OpenError::NoFtl { .. }) | Err(e @ OpenError::Ftl(FtlError::Corrupt(_))) => {
            f.ftl = format!("unreadable: {e}");
            return finish(a, f);
        }
        Err(e) => {
            f.ftl = format!("cannot be opened: {e}");
            return finish(a, f);
        }
    };
    let ftl = dev.ftl_mut();
    f.ftl = format!(
        "checkpoint {} found; {} of capacity",
        ftl.last_recovery().map_or(0, |r| r.checkpoint_seq),
        report::bytes(ftl.lbas() * ftl.lba_size() as u64)
    );
    f.read_only = ftl
        .read_only()
        .filter(|r| *r != csd_ftl::ReadOnlyReason::Opened)
        .map(|r| r.to_string());
    f.lbas = ftl.lbas();
    if !a.quick {
        let bar = (!a.report.json).then(|| {
            let pb = report::progress_bar(Some(f.lbas), "LBAs");
            pb.set_message("reading every LBA");
            pb
        });
        let ss = ftl.lba_size();
        let chunk = 64u64;
        let mut buf = vec![0u8; ss * chunk as usize];
        let mut l = 0;
        while l < f.lbas {
            let n = chunk.min(f.lbas - l);
            if ftl
                .read(l, &mut buf[..n as usize * ss], SimTime::ZERO)
                .is_err()
            {
                // Find the unreadable ones one by one.
                for x in l..l + n {
                    match ftl.read(x, &mut buf[..ss], SimTime::ZERO) {
                        Ok(_) => f.lbas_read += 1,
                        Err(_) => {
                            f.lbas_unreadable += 1;
                            if f.first_unreadable.len() < 16 {
                                f.first_unreadable.push(x);
                            }
                        }
                    }
                }
            } else {
                f.lbas_read += n;
            }
            l += n;
            if let Some(pb) = &bar
                && l % (chunk * 256) == 0
            {
                pb.set_position(l);
            }
        }
        if let Some(pb) = bar {
            pb.finish_and_clear();
        }
    }
    f.ok = f.lbas_unreadable == 0;
    finish(a, f)
}

/// Another process holds the image's lock: say so (there is nothing to format).
fn in_use(a: &CheckArgs, mut f: Findings) -> Result<(), CliError> {
    f.header = "in use: another process holds the image (its lock); not checked".into();
    f.in_use = true;
    finish(a, f)
}

fn finish(a: &CheckArgs, f: Findings) -> Result<(), CliError> {
    if a.report.json {
        println!("{}", serde_json::to_value(&f).unwrap_or_default());
    } else {
        let mut t = report::table(&["check", "finding"]);
        let unreadable = if f.first_unreadable.is_empty() {
            f.lbas_unreadable.to_string()
        } else {
            format!(
                "{} (first: {})",
                f.lbas_unreadable,
                f.first_unreadable
                    .iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        for (k, v) in [
            ("image", f.image.clone()),
            ("header", f.header.clone()),
            ("device", f.device.clone().unwrap_or_else(|| "-".into())),
            ("blocks holding data", f.written_blocks.to_string()),
            ("FTL", f.ftl.clone()),
            ("open", f.recovery.clone().unwrap_or_else(|| "-".into())),
            (
                "read-only",
                f.read_only.clone().unwrap_or_else(|| "no".into()),
            ),
            (
                "LBAs read / unreadable",
                if a.quick {
                    "not read (--quick)".into()
                } else {
                    format!("{} / {unreadable}", f.lbas_read)
                },
            ),
        ] {
            t.add_row(vec![k.to_string(), v]);
        }
        println!("{t}");
        if f.in_use {
            println!(
                "{} is in use by another process (a `csd serve`, `csd kv serve` or another \
                 command that writes holds its lock): nothing was checked or written. Stop \
                 that process or let it finish, then check again; `csd device smart --image \
                 {}` shows a live `csd serve`'s counters",
                a.image.path().display(),
                a.image.path().display()
            );
        } else if f.device.is_none() {
            println!("the file is not a usable csd image: nothing was written");
        } else {
            println!(
                "the image was opened read-only: nothing was written{}",
                if f.ok {
                    ""
                } else {
                    "; to start over, format it on request (e.g. `csd io --image IMAGE --format`), which destroys its data"
                }
            );
        }
    }
    if f.in_use {
        Err(CliError::Usage(format!(
            "{}: in use by another process (locked); not checked",
            a.image.path().display()
        )))
    } else if f.ok {
        Ok(())
    } else {
        Err(CliError::Usage(format!(
            "{}: problems found (see above)",
            a.image.path().display()
        )))
    }
}
