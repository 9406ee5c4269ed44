//! Prints the FTL's modeled figures for a fixed workload: random writes (write-through and
//! write-back) that fill the device several times over so GC and wear leveling run,
//! random reads, trims, flushes, checkpoints, a power cut and its recovery, on the `tiny`
//! preset and on `nvme-tlc` shrunk to a few blocks per plane (same timings), and a short
//! fault torture. Everything printed comes from the run's counters and modeled clocks
//! (wall-clock times are left out), so two builds that model the same behaviour print
//! the same bytes:
//!
//! ```sh
//! cargo run --release -p csd-ftl --example modeled > before.txt
//! # change the FTL
//! cargo run --release -p csd-ftl --example modeled > after.txt && diff before.txt after.txt
//! ```

use csd_ftl::torture::{TortureConfig, torture};
use csd_ftl::{Ftl, FtlConfig, FtlError, WriteCache};
use csd_nand::Nand;
use csd_sim::{DeviceConfig, SimTime};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::error::Error;

/// The bytes of version `v` of `lba`.
fn pattern(lba: u64, v: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (lba.wrapping_mul(31) ^ v.wrapping_mul(131) ^ (i as u64 * 7)) as u8;
    }
}

/// Print everything the FTL reports about itself.
fn report(label: &str, ftl: &mut Ftl, t: SimTime) -> Result<(), Box<dyn Error>> {
    println!("[{label}] t={t:?}");
    println!("  stats    {:?}", ftl.stats());
    println!("  lifetime {:?}", ftl.lifetime_stats());
    println!(
        "  free={} bad={} spare={} erase={:?} read_only={:?}",
        ftl.free_blocks(),
        ftl.bad_blocks(),
        ftl.spare_blocks(),
        ftl.erase_counts(),
        ftl.read_only()
    );
    println!("  health   {:?}", ftl.health());
    println!("  census   {}", ftl.block_census().replace('\n', " | "));
    println!("  epoch    {:?}", ftl.content_epoch());
    ftl.check_invariants()
        .map_err(|e| format!("{label}: invariants: {e}"))?;
    Ok(())
}

/// One device and write-cache mode through the whole workload.
fn run(name: &str, dev: DeviceConfig, cache: WriteCache, seed: u64) -> Result<(), Box<dyn Error>> {
    let cfg = FtlConfig {
        write_cache: cache,
        op: 0.15,
        checkpoint_log_pages: 64,
        ..FtlConfig::default()
    };
    let nand = Nand::new_in_memory(dev)?;
    let mut ftl = Ftl::format(nand, cfg)?;
    let label = format!("{name} {cache:?}");
    let ss = ftl.lba_size();
    let lbas = ftl.lbas();
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut t = SimTime::ZERO;
    let mut buf = vec![0u8; 8 * ss];
    let mut version = vec![0u64; lbas as usize];
    let mut v = 0u64;
    report(&format!("{label} formatted"), &mut ftl, t)?;
    // Random writes of 1..=8 sectors, three times the capacity, with a trim, a flush and
    // a checkpoint now and then.
    let mut written = 0u64;
    let mut ops = 0u64;
    while written < 3 * lbas {
        let n = rng.random_range(1..=8u64).min(lbas);
        let lba = rng.random_range(0..=lbas - n);
        v += 1;
        for k in 0..n {
            pattern(lba + k, v, &mut buf[k as usize * ss..(k as usize + 1) * ss]);
            version[(lba + k) as usize] = v;
        }
        t = ftl.write(lba, &buf[..n as usize * ss], t)?;
        written += n;
        ops += 1;
        if ops.is_multiple_of(97) {
            let tl = rng.random_range(0..lbas - 4);
            t = ftl.trim(tl, 4, t)?;
            for k in tl..tl + 4 {
                version[k as usize] = 0;
            }
        }
        if ops.is_multiple_of(211) {
            t = ftl.flush(t)?;
        }
        if ops.is_multiple_of(1499) {
            t = ftl.checkpoint(t)?;
        }
    }
    t = ftl.flush(t)?;
    report(&format!("{label} after writes"), &mut ftl, t)?;
    // Random reads, checked.
    ftl.reset_stats();
    let mut one = vec![0u8; ss];
    let mut want = vec![0u8; ss];
    for _ in 0..4 * lbas.min(20_000) {
        let lba = rng.random_range(0..lbas);
        t = ftl.read(lba, &mut one, t)?;
        match version[lba as usize] {
            0 => want.fill(0),
            v => pattern(lba, v, &mut want),
        }
        if one != want {
            return Err(format!("{label}: LBA {lba} read back wrong").into());
        }
    }
    report(&format!("{label} after reads"), &mut ftl, t)?;
    // Some unflushed writes, a power cut, recovery.
    for _ in 0..50 {
        let lba = rng.random_range(0..lbas);
        v += 1;
        pattern(lba, v, &mut buf[..ss]);
        t = ftl.write(lba, &buf[..ss], t)?;
        if cache == WriteCache::WriteThrough {
            version[lba as usize] = v;
        }
    }
    let nand = ftl.crash();
    let mut ftl = Ftl::recover(nand, cfg)?;
    let rec = ftl
        .last_recovery()
        .ok_or_else(|| format!("{label}: no recovery report"))?;
    println!(
        "[{label} recovered] ckpt_seq={} log_pages={} redone={} verified={} discarded={} records={} ext_pending={} clean={} modeled_s={}",
        rec.checkpoint_seq,
        rec.log_pages,
        rec.commits_redone,
        rec.commits_verified,
        rec.commits_discarded,
        rec.log_records,
        rec.ext_pending,
        rec.clean,
        rec.modeled_s
    );
    let mut t = SimTime::ZERO;
    for _ in 0..2_000 {
        let lba = rng.random_range(0..lbas);
        t = ftl.read(lba, &mut one, t)?;
        if cache == WriteCache::WriteThrough {
            match version[lba as usize] {
                0 => want.fill(0),
                v => pattern(lba, v, &mut want),
            }
            if one != want {
                return Err(format!("{label}: LBA {lba} lost by recovery").into());
            }
        }
    }
    report(&format!("{label} after recovery"), &mut ftl, t)?;
    let t = ftl.close(t)?;
    println!("[{label} closed] t={t:?}");
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let tiny = DeviceConfig::preset("tiny")?;
    let mut tlc = DeviceConfig::preset("nvme-tlc")?;
    tlc.geometry.blocks_per_plane = 8;
    for (name, dev) in [("tiny", &tiny), ("nvme-tlc/8", &tlc)] {
        for (k, cache) in [WriteCache::WriteThrough, WriteCache::WriteBack]
            .into_iter()
            .enumerate()
        {
            match run(name, dev.clone(), cache, 7 + k as u64) {
                Ok(()) => {}
                Err(e) => match e.downcast_ref::<FtlError>() {
                    Some(f) => println!("[{name} {cache:?}] stopped: {f}"),
                    None => return Err(e),
                },
            }
        }
    }
    for (name, cfg) in [
        ("small", TortureConfig::small(60, 11)),
        ("faults", TortureConfig::with_faults(60, 12)),
        ("weak-ecc", TortureConfig::with_weak_ecc(40, 13)),
    ] {
        let r = torture(&cfg, &mut |_| {})?;
        println!(
            "[torture {name}] cuts={} recovery_cuts={} acked={} checked={} lost={} torn={} inflight_applied={} discarded={} recovery_modeled_s={}",
            r.cuts,
            r.recovery_cuts,
            r.acked_commands,
            r.writes_checked,
            r.lost,
            r.torn,
            r.inflight_applied,
            r.recovery_discarded,
            r.recovery_modeled_s
        );
    }
    Ok(())
}
