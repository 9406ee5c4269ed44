//! `csd bench recovery`: FTL recovery time after a power cut at steady state (batch-io
//! §7's crash consistency, measured): a device of about the asked logical size is filled,
//! overwritten at random, cut, and recovered from its checkpoint and log.

use crate::args::{JsonFlag, Seed};
use crate::{CliError, report};
use clap::Args;
use csd_ftl::{Ftl, FtlConfig, RecoveryReport, WriteCache};
use csd_nand::Nand;
use csd_sim::config::DEFAULT_PRESET;
use csd_sim::{DeviceConfig, SimTime};

/// Options of `csd bench recovery`.
#[derive(Args)]
pub(crate) struct RecoveryArgs {
    /// Logical capacity to aim for, GiB (the nvme-tlc preset is shrunk to fit).
    #[arg(long, default_value_t = 4)]
    logical_gib: u64,
    /// Random overwrites after the sequential fill, as a multiple of the capacity.
    #[arg(long, default_value_t = 1.0)]
    overwrite: f64,
    #[command(flatten)]
    rng: Seed,
    #[command(flatten)]
    report: JsonFlag,
}

/// `csd bench recovery`: fill a device to steady state, cut the power, time recovery.
pub(crate) fn run(a: &RecoveryArgs) -> Result<(), CliError> {
    let cfg = FtlConfig {
        write_cache: WriteCache::WriteBack,
        ..FtlConfig::default()
    };
    let (mut ftl, dev, bpp) = sized_device(a.logical_gib, cfg)?;
    let t = fill_to_steady_state(&mut ftl, a)?;
    let lbas = ftl.lbas();
    let ss = ftl.lba_size();
    let since_ckpt_pages = ftl.stats().log_pages;
    let nand = ftl.crash();
    let wall0 = std::time::Instant::now();
    let mut g = Ftl::recover(nand, cfg)?;
    let wall = wall0.elapsed().as_secs_f64();
    let r = g.last_recovery().unwrap_or_default();
    // Spot-check that the data is there.
    let mut buf = vec![0u8; ss];
    g.read(0, &mut buf, t)?;
    let cmd = crate::reproduce::line();
    let logical = lbas * ss as u64;
    if a.report.json {
        let v = serde_json::json!({
            "logical_bytes": logical,
            "blocks_per_plane": bpp,
            "recovery_wall_s": wall,
            "recovery_modeled_s": r.modeled_s,
            "checkpoint_seq": r.checkpoint_seq,
            "log_pages_replayed": r.log_pages,
            "commits_redone": r.commits_redone,
            "commits_verified": r.commits_verified,
            "commits_discarded": r.commits_discarded,
            "log_pages_written_before_cut": since_ckpt_pages,
            "seed": a.rng.seed,
            "command": cmd,
        });
        println!("{v}");
    } else {
        let device = format!(
            "{} with {bpp} blocks/plane: {} logical",
            dev.name,
            report::bytes(logical)
        );
        print_table(&device, wall, &r);
        println!("seed: {}  reproduce: {cmd}", a.rng.seed);
    }
    Ok(())
}

/// nvme-tlc, shrunk in blocks per plane until the logical capacity is about
/// `logical_gib`: the formatted FTL, its device config and the blocks per plane.
fn sized_device(logical_gib: u64, cfg: FtlConfig) -> Result<(Ftl, DeviceConfig, u64), CliError> {
    let text = DeviceConfig::preset_toml(DEFAULT_PRESET)?;
    let mut bpp = 8u64;
    loop {
        let dev = DeviceConfig::from_toml_with_overrides(
            text,
            &[format!("geometry.blocks_per_plane={bpp}")],
        )?;
        let f = Ftl::format(Nand::new_in_memory(dev.clone())?, cfg)?;
        if f.lbas() * f.lba_size() as u64 >= logical_gib << 30 || bpp >= 1024 {
            return Ok((f, dev, bpp));
        }
        bpp += (bpp / 4).max(1);
    }
}

/// Writes every LBA once in order, then `--overwrite` x the capacity at random (seeded
/// xorshift), then flushes; the modeled time at the end.
fn fill_to_steady_state(ftl: &mut Ftl, a: &RecoveryArgs) -> Result<SimTime, CliError> {
    let lbas = ftl.lbas();
    let ss = ftl.lba_size();
    let total = lbas + (lbas as f64 * a.overwrite) as u64;
    let bar = (!a.report.json).then(|| {
        let pb = report::progress_bar(Some(total), "LBAs");
        pb.set_message("filling to steady state");
        pb
    });
    let mut data = vec![0u8; ss * 64];
    let mut t = SimTime::ZERO;
    let mut l = 0u64;
    while l < lbas {
        let n = (lbas - l).min(64);
        data.iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = (i as u64 ^ l) as u8);
        t = ftl.write(l, &data[..n as usize * ss], t)?;
        l += n;
        if let Some(pb) = &bar {
            pb.set_position(l);
        }
    }
    let mut x = a.rng.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for i in 0..total - lbas {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        t = ftl.write(x % lbas, &data[..ss], t)?;
        if let Some(pb) = &bar
            && i % 4096 == 0
        {
            pb.set_position(lbas + i);
        }
    }
    t = ftl.flush(t)?;
    if let Some(pb) = bar {
        pb.finish_and_clear();
    }
    Ok(t)
}

/// The recovery figures as a table.
fn print_table(device: &str, wall: f64, r: &RecoveryReport) {
    let mut tb = report::table(&["recovery at steady state", "value"]);
    for (k, v) in [
        ("device", device.to_string()),
        ("wall-clock recovery", format!("{:.3} s", wall)),
        ("modeled recovery", format!("{:.3} s", r.modeled_s)),
        ("checkpoint recovered from", r.checkpoint_seq.to_string()),
        ("log pages replayed", r.log_pages.to_string()),
        (
            "commits redone / verified / discarded",
            format!(
                "{} / {} / {}",
                r.commits_redone, r.commits_verified, r.commits_discarded
            ),
        ),
    ] {
        tb.add_row(vec![k.to_string(), v]);
    }
    println!("{tb}");
}
