//! Tests of opening (clean and unclean, read-write and read-only), end-to-end checks,
//! lost data, end of life, the paper's metrics and the GC and checkpoint knobs.

use super::*;
use csd_nand::{Nand, PowerCut};
use csd_sim::{DeviceConfig, SimTime};
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::collections::HashMap;

fn tiny() -> DeviceConfig {
    DeviceConfig::preset("tiny").unwrap()
}

fn sector(ss: usize, tag: u64) -> Vec<u8> {
    (0..ss as u64)
        .map(|i| (i.wrapping_mul(13) ^ tag.wrapping_mul(0x9E37_79B9_7F4A)) as u8)
        .collect()
}

fn small_cfg() -> FtlConfig {
    FtlConfig {
        map_cache_share: 0.001,
        checkpoint_log_pages: 32,
        ..FtlConfig::default()
    }
}

/// Write `n` LBAs with tags `l ^ salt`, in commands of 1..4 LBAs.
fn fill(f: &mut Ftl, n: u64, salt: u64) {
    let ss = f.lba_size();
    let mut l = 0;
    while l < n {
        let k = (l % 4 + 1).min(n - l);
        let data: Vec<u8> = (l..l + k).flat_map(|x| sector(ss, x ^ salt)).collect();
        f.write(l, &data, SimTime::ZERO).unwrap();
        l += k;
    }
}

fn check(f: &mut Ftl, n: u64, salt: u64) {
    let ss = f.lba_size();
    let mut buf = vec![0u8; ss];
    for l in 0..n {
        f.read(l, &mut buf, SimTime::ZERO).unwrap();
        assert_eq!(buf, sector(ss, l ^ salt), "LBA {l}");
    }
}

fn media_writes(n: &Nand) -> (u64, u64) {
    (n.stats().programs, n.stats().erases)
}

#[test]
fn a_clean_open_reads_only_metadata_and_writes_nothing() {
    let mut f = Ftl::format(Nand::new_in_memory(tiny()).unwrap(), small_cfg()).unwrap();
    fill(&mut f, 900, 1);
    f.trim(5, 2, SimTime::ZERO).unwrap();
    let mut nand = f.shutdown(SimTime::ZERO).unwrap();
    nand.reset_counters();
    let mut g = Ftl::recover(nand, small_cfg()).unwrap();
    let r = g.last_recovery().unwrap();
    assert!(r.clean, "{r:?}");
    assert_eq!((r.log_pages, r.log_records), (0, 0), "{r:?}");
    assert_eq!(
        media_writes(g.nand()),
        (0, 0),
        "a clean open programmed or erased"
    );
    // No MAP page was read to rebuild GBITV (it is checkpointed).
    assert_eq!(g.stats().map_misses, 0);
    g.check_invariants().unwrap();
    let ss = g.lba_size();
    let mut buf = vec![0u8; ss];
    for l in 0..900 {
        g.read(l, &mut buf, SimTime::ZERO).unwrap();
        if (5..7).contains(&l) {
            assert!(buf.iter().all(|&b| b == 0));
        } else {
            assert_eq!(buf, sector(ss, l ^ 1), "LBA {l}");
        }
    }
    // The open blocks continue where they stopped: writing after a clean open opens no
    // new data block.
    let free = g.free_blocks();
    g.write(1000, &sector(ss, 7), SimTime::ZERO).unwrap();
    assert_eq!(g.free_blocks(), free);
    g.check_invariants().unwrap();
}

#[test]
fn an_unclean_open_replays_only_the_log_since_the_checkpoint() {
    let mut f = Ftl::format(Nand::new_in_memory(tiny()).unwrap(), small_cfg()).unwrap();
    fill(&mut f, 600, 2);
    f.checkpoint(SimTime::ZERO).unwrap();
    fill(&mut f, 40, 3);
    let nand = f.crash();
    let mut g = Ftl::recover(nand, small_cfg()).unwrap();
    let r = g.last_recovery().unwrap();
    assert!(!r.clean && r.log_pages > 0 && r.log_pages < 60, "{r:?}");
    check(&mut g, 40, 3);
    g.check_invariants().unwrap();
}

#[test]
fn a_read_only_open_never_writes_and_refuses_writes() {
    for clean in [true, false] {
        let mut f = Ftl::format(Nand::new_in_memory(tiny()).unwrap(), small_cfg()).unwrap();
        fill(&mut f, 500, 4);
        let mut nand = if clean {
            f.shutdown(SimTime::ZERO).unwrap()
        } else {
            f.crash()
        };
        nand.reset_counters();
        let mut g = Ftl::open_read_only(nand, small_cfg())
            .map_err(|e| e.error)
            .unwrap();
        check(&mut g, 500, 4);
        assert_eq!(media_writes(g.nand()), (0, 0), "clean={clean}");
        let ss = g.lba_size();
        let e = g.write(0, &sector(ss, 9), SimTime::ZERO).unwrap_err();
        assert_eq!(
            e,
            FtlError::ReadOnly {
                reason: ReadOnlyReason::Opened
            }
        );
        assert!(g.trim(0, 1, SimTime::ZERO).is_err());
        // Nothing written on the way out either.
        let mut nand = g.shutdown(SimTime::ZERO).unwrap();
        assert_eq!(media_writes(&nand), (0, 0), "clean={clean}");
        // The device opens read-write afterwards, with everything there.
        nand.reset_counters();
        let mut h = Ftl::recover(nand, small_cfg()).unwrap();
        check(&mut h, 500, 4);
        h.check_invariants().unwrap();
    }
}

#[test]
fn a_power_cut_during_the_clean_shutdown_loses_nothing() {
    let cfg = FtlConfig {
        write_cache: WriteCache::WriteBack,
        ..small_cfg()
    };
    for cut in [1u64, 2, 3, 5, 8, 13, 21, 34] {
        let mut f = Ftl::format(Nand::new_in_memory(tiny()).unwrap(), cfg).unwrap();
        fill(&mut f, 300, 5);
        f.flush(SimTime::ZERO).unwrap();
        f.nand_mut().arm_power_cut(PowerCut::AtOp(cut));
        let _ = f.close(SimTime::ZERO);
        let mut nand = f.crash();
        nand.power_on();
        let mut g = Ftl::recover(nand, cfg).unwrap();
        check(&mut g, 300, 5);
        g.check_invariants().unwrap();
    }
}

#[test]
fn checkpoints_are_also_taken_on_a_time_interval() {
    let cfg = FtlConfig {
        checkpoint_log_pages: 1_000_000,
        checkpoint_interval_ms: 5,
        ..FtlConfig::default()
    };
    let mut f = Ftl::format(Nand::new_in_memory(tiny()).unwrap(), cfg).unwrap();
    let ss = f.lba_size();
    let mut t = SimTime::ZERO;
    for i in 0..200u64 {
        // One write per modeled millisecond.
        t = SimTime::from_ns(i * 1_000_000);
        f.write(i, &sector(ss, i), t).unwrap();
    }
    let ck = f.stats().checkpoints;
    assert!(
        (20..=50).contains(&ck),
        "{ck} checkpoints in 200 ms at one per 5 ms"
    );
    let _ = t;
    let mut g = Ftl::format(Nand::new_in_memory(tiny()).unwrap(), FtlConfig::default()).unwrap();
    for i in 0..200u64 {
        g.write(i, &sector(ss, i), SimTime::from_ns(i * 1_000_000))
            .unwrap();
    }
    assert_eq!(g.stats().checkpoints, 0, "no interval: only by log size");
}

#[test]
fn a_corrupted_sector_is_an_error_naming_its_lba_and_gc_records_it_lost() {
    let cfg = FtlConfig {
        op: 0.3,
        ..small_cfg()
    };
    let mut f = Ftl::format(Nand::new_in_memory(tiny()).unwrap(), cfg).unwrap();
    let n = f.lbas() / 2;
    fill(&mut f, n, 6);
    let victim_lba = 37;
    let (ppa, s) = f.location_of_lba(victim_lba).unwrap();
    let ss = f.lba_size();
    let mut buf = vec![0u8; ss];
    // Read it once first: a sector whose CRC matched is not hashed again while its
    // bytes are unchanged, and the corruption below must still be found.
    f.read(victim_lba, &mut buf, SimTime::ZERO).unwrap();
    assert!(f.nand().sector_checked(ppa, s));
    f.nand_mut().corrupt(ppa, s, 100, 0x10).unwrap();
    assert_eq!(
        f.read(victim_lba, &mut buf, SimTime::ZERO),
        Err(FtlError::Uncorrectable { lba: victim_lba })
    );
    assert_eq!(f.stats().integrity_errors, 1);
    // A multi-LBA read spanning it names it too.
    assert_eq!(
        f.read(victim_lba - 2, &mut vec![0u8; 4 * ss], SimTime::ZERO),
        Err(FtlError::Uncorrectable { lba: victim_lba })
    );
    // Overwrite everything else in that block until GC collects it.
    let bad_before = f.bad_blocks();
    let mut rng = SmallRng::seed_from_u64(3);
    let mut round = 0;
    while f.lifetime_stats().lost_sectors == 0 {
        round += 1;
        assert!(round < 40, "GC never collected the damaged block");
        for l in 0..n {
            if l != victim_lba && rng.random_bool(0.5) {
                f.write(l, &sector(ss, l ^ 6), SimTime::ZERO).unwrap();
            }
        }
    }
    assert_eq!(f.lifetime_stats().lost_sectors, 1);
    assert_eq!(
        f.bad_blocks(),
        bad_before + 1,
        "the damaged block is retired"
    );
    assert_eq!(
        f.read(victim_lba, &mut buf, SimTime::ZERO),
        Err(FtlError::Uncorrectable { lba: victim_lba })
    );
    f.check_invariants().unwrap();
    // Lost survives a crash (it was logged before the block was retired) ...
    let mut g = Ftl::recover(f.crash(), cfg).unwrap();
    assert_eq!(
        g.read(victim_lba, &mut buf, SimTime::ZERO),
        Err(FtlError::Uncorrectable { lba: victim_lba })
    );
    for l in (0..n).filter(|&l| l != victim_lba) {
        g.read(l, &mut buf, SimTime::ZERO).unwrap();
        assert_eq!(buf, sector(ss, l ^ 6), "LBA {l}");
    }
    // ... and a rewrite heals it.
    g.write(victim_lba, &sector(ss, 99), SimTime::ZERO).unwrap();
    g.read(victim_lba, &mut buf, SimTime::ZERO).unwrap();
    assert_eq!(buf, sector(ss, 99));
    g.check_invariants().unwrap();
    assert!(g.health().critical_warning & WARN_RELIABILITY != 0);
}

#[test]
fn read_amplification_of_random_reads_is_one_and_gc_figures_follow_the_paper() {
    for preset in ["tiny", "ox-westlake"] {
        let mut dev = DeviceConfig::preset(preset).unwrap();
        dev.geometry.blocks_per_plane = dev.geometry.blocks_per_plane.min(64);
        let mut f = Ftl::format(Nand::new_in_memory(dev).unwrap(), small_cfg()).unwrap();
        fill(&mut f, 256, 1);
        f.reset_stats();
        let ss = f.lba_size();
        let mut buf = vec![0u8; ss];
        let mut rng = SmallRng::seed_from_u64(1);
        for _ in 0..2000 {
            f.read(rng.random_range(0..256), &mut buf, SimTime::ZERO)
                .unwrap();
        }
        let b = f.stats().gc_bytes(f.page_size() as u64, ss as u64);
        assert_eq!(b.read_amplification(), 1.0, "{preset}");
        assert_eq!(b.user_read, 2000 * ss as u64);
    }
    // With GC: the figures are the paper's formulas over the counters.
    let cfg = FtlConfig {
        write_cache: WriteCache::WriteBack,
        op: 0.2,
        ..small_cfg()
    };
    let mut f = Ftl::format(Nand::new_in_memory(tiny()).unwrap(), cfg).unwrap();
    let n = f.lbas();
    let ss = f.lba_size();
    let mut rng = SmallRng::seed_from_u64(2);
    for i in 0..3 * n {
        if let Err(e) = f.write(rng.random_range(0..n), &sector(ss, i), SimTime::ZERO) {
            panic!("write {i}: {e}; {}", f.block_census());
        }
    }
    let s = *f.stats();
    let page = f.page_size() as u64;
    let b = s.gc_bytes(page, ss as u64);
    assert!(s.gc_reads > 0 && s.gc_programs > 0);
    assert_eq!(b.gc_read, s.gc_reads * page);
    assert_eq!(b.gc_write, s.gc_programs * page);
    let wa = (s.host_write_sectors * ss as u64 + s.gc_programs * page) as f64
        / (s.host_write_sectors * ss as u64) as f64;
    assert!((b.write_amplification() - wa).abs() < 1e-12);
    let ovh = (s.gc_reads + s.gc_programs) as f64 * page as f64
        / (s.gc_reclaimed_sectors * ss as u64) as f64;
    assert!((b.gc_overhead() - ovh).abs() < 1e-12);
    assert!(b.write_amplification() > 1.0 && b.gc_overhead() > 0.0);
}

/// A write-back FTL on the tiny device with op 0.6 and GC starting at `start` used.
fn write_back_ftl_op_06(start: Option<f64>) -> Ftl {
    let cfg = FtlConfig {
        op: 0.6,
        gc_start_used: start,
        write_cache: WriteCache::WriteBack,
        ..small_cfg()
    };
    Ftl::format(Nand::new_in_memory(tiny()).unwrap(), cfg).unwrap()
}

#[test]
fn a_gc_threshold_under_the_valid_share_does_not_compact_after_every_write() {
    // op 0.6: the LBA space is about 40% of the blocks; all of it written, then
    // overwritten at random. A threshold of 0.25 cannot be reached (the valid data alone
    // holds more); it must cost no more GC than no threshold at all, where it used to
    // compact the device after every commit (a victim per page of garbage).
    let gc_programs_per_write = |start: Option<f64>| {
        let mut f = write_back_ftl_op_06(start);
        let n = f.lbas();
        let ss = f.lba_size();
        for l in 0..n {
            f.write(l, &sector(ss, l), SimTime::ZERO).unwrap();
        }
        let before = f.stats().gc_programs;
        let mut rng = SmallRng::seed_from_u64(5);
        for i in 0..2 * n {
            f.write(rng.random_range(0..n), &sector(ss, i), SimTime::ZERO)
                .unwrap();
        }
        f.flush(SimTime::ZERO).unwrap();
        f.check_invariants().unwrap();
        (f.stats().gc_programs - before) as f64 / (2 * n) as f64
    };
    let lazy = gc_programs_per_write(None);
    let unreachable = gc_programs_per_write(Some(0.25));
    assert!(
        unreachable <= lazy * 1.05 + 0.01,
        "GC programs per write with gc_start_used 0.25: {unreachable:.3}, without: {lazy:.3}"
    );
}

#[test]
fn gc_start_used_keeps_the_used_share_near_its_threshold() {
    let used_share = |start: Option<f64>| {
        let mut f = write_back_ftl_op_06(start);
        let n = f.lbas() / 2;
        let ss = f.lba_size();
        let mut rng = SmallRng::seed_from_u64(4);
        for i in 0..4 * n {
            f.write(rng.random_range(0..n), &sector(ss, i), SimTime::ZERO)
                .unwrap();
        }
        f.flush(SimTime::ZERO).unwrap();
        f.check_invariants().unwrap();
        let usable = f
            .blocks
            .iter()
            .filter(|b| b.state != crate::ftl::Use::Bad)
            .count();
        1.0 - f.free_blocks() as f64 / usable as f64
    };
    let lazy = used_share(None);
    let eager = used_share(Some(0.5));
    assert!(
        eager < lazy - 0.1,
        "with gc_start_used 0.5: {eager:.2}, without: {lazy:.2}"
    );
    assert!(eager < 0.62, "{eager:.2}");
}

#[test]
fn a_starved_channel_collects_on_its_own_blocks() {
    let mut f = Ftl::format(Nand::new_in_memory(tiny()).unwrap(), small_cfg()).unwrap();
    let n = f.lbas() / 2;
    fill(&mut f, n, 1);
    fill(&mut f, n / 2, 2);
    // Take every free block of channel 0 away (as if its dies had filled up) and let a
    // commit's GC run: it must reclaim a block on channel 0.
    let ch0: Vec<u32> = (0..f.blocks.len() as u32)
        .filter(|&b| {
            f.blocks[b as usize].state == crate::ftl::Use::Free
                && f.nand()
                    .addr()
                    .channel_of(csd_nand::DieId(b / f.geo.blocks_per_die()))
                    == 0
        })
        .collect();
    for &b in &ch0 {
        f.blocks.set_state(b, crate::ftl::Use::Open(None));
    }
    let ss = f.lba_size();
    f.write(0, &sector(ss, 3), SimTime::ZERO).unwrap();
    let ch0_free = (0..f.geo.dies())
        .filter(|&d| f.nand().addr().channel_of(csd_nand::DieId(d)) == 0)
        .map(|d| f.blocks.free_per_die()[d as usize])
        .sum::<u32>();
    assert!(ch0_free > 0, "channel 0 still has no free block");
    assert!(f.stats().gc_victims > 0);
}

#[test]
fn end_of_life_turns_the_device_read_only_and_keeps_every_acknowledged_write() {
    let mut dev = tiny();
    dev.geometry.blocks_per_plane = 40;
    dev.geometry.pages_per_block = 8;
    dev.faults.seed = 11;
    dev.faults.program_fail_prob = 0.01;
    dev.faults.erase_fail_prob = 0.01;
    let cfg = FtlConfig {
        op: 0.4,
        ..small_cfg()
    };
    let mut f = Ftl::format(Nand::new_in_memory(dev).unwrap(), cfg).unwrap();
    let spare0 = f.health().available_spare_pct;
    assert_eq!(spare0, 100);
    let n = f.lbas();
    let ss = f.lba_size();
    let mut model: HashMap<u64, u64> = HashMap::new();
    let mut rng = SmallRng::seed_from_u64(5);
    let mut spare_seen = vec![spare0];
    let mut i = 0u64;
    let reason = loop {
        i += 1;
        assert!(i < 2_000_000, "the device never wore out");
        let l = rng.random_range(0..n);
        match f.write(l, &sector(ss, i), SimTime::ZERO) {
            Ok(_) => {
                model.insert(l, i);
            }
            Err(FtlError::ReadOnly { reason }) => break reason,
            Err(e) => panic!("write {i}: {e}; {}", f.block_census()),
        }
        if i.is_multiple_of(500) {
            spare_seen.push(f.health().available_spare_pct);
        }
    };
    assert_eq!(reason, ReadOnlyReason::SpareExhausted);
    assert!(
        spare_seen.windows(2).all(|w| w[1] <= w[0]),
        "{spare_seen:?}"
    );
    let h = f.health();
    assert_eq!(h.read_only, Some(ReadOnlyReason::SpareExhausted));
    assert!(h.critical_warning & WARN_SPARE != 0 && h.critical_warning & WARN_READ_ONLY != 0);
    assert!(h.percentage_used > 0 || f.erase_counts().1 > 0.0);
    let verify = |f: &mut Ftl| {
        let mut buf = vec![0u8; ss];
        for (&l, &v) in &model {
            f.read(l, &mut buf, SimTime::ZERO).unwrap();
            assert_eq!(buf, sector(ss, v), "LBA {l}");
        }
    };
    verify(&mut f);
    assert!(matches!(
        f.trim(0, 1, SimTime::ZERO),
        Err(FtlError::ReadOnly { .. })
    ));
    f.flush(SimTime::ZERO).unwrap();
    // Read-only survives a restart.
    let mut g = Ftl::recover(f.crash(), cfg).unwrap();
    assert_eq!(g.read_only(), Some(ReadOnlyReason::SpareExhausted));
    verify(&mut g);
    assert!(g.write(0, &sector(ss, 1), SimTime::ZERO).is_err());
}

#[test]
fn a_too_small_over_provisioning_is_refused_with_the_minimum_that_works() {
    for op in [0.0, 0.01, 0.02] {
        let e = Ftl::format(
            Nand::new_in_memory(tiny()).unwrap(),
            FtlConfig {
                op,
                ..FtlConfig::default()
            },
        )
        .err()
        .unwrap();
        let m = e.to_string();
        assert!(m.contains("use op >= "), "{m}");
        let min: f64 = m.rsplit(">= ").next().unwrap().parse().unwrap();
        let f = Ftl::format(
            Nand::new_in_memory(tiny()).unwrap(),
            FtlConfig {
                op: min,
                ..FtlConfig::default()
            },
        );
        assert!(f.is_ok(), "the minimum {min} it names must work");
    }
}

#[derive(Debug, Clone)]
enum Step {
    Write {
        lba: u64,
        n: u64,
    },
    Trim {
        lba: u64,
        n: u64,
    },
    Batch {
        lpids: Vec<u64>,
    },
    Read {
        lba: u64,
    },
    Flush,
    Checkpoint,
    /// Cut power during the next operations, this many media operations in.
    Cut {
        after: u64,
    },
}

fn steps(lbas: u64) -> impl Strategy<Value = Vec<Step>> {
    let s = prop_oneof![
        8 => (0..lbas, 1u64..6).prop_map(|(lba, n)| Step::Write { lba, n }),
        1 => (0..lbas, 1u64..4).prop_map(|(lba, n)| Step::Trim { lba, n }),
        1 => proptest::collection::vec(0..lbas, 1..8).prop_map(|lpids| Step::Batch { lpids }),
        3 => (0..lbas).prop_map(|lba| Step::Read { lba }),
        1 => Just(Step::Flush),
        1 => Just(Step::Checkpoint),
        1 => (1u64..300).prop_map(|after| Step::Cut { after }),
    ];
    proptest::collection::vec(s, 1..600)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]
    /// Random operations against a reference model with program and erase failures,
    /// bit errors beyond a weak ECC (read retries, reads that may fail) and power cuts
    /// striking anywhere: in writes, flushes, batches, GC, checkpoints and recovery. After
    /// every step MAP, GBITV and the free counts agree; live reads return the latest
    /// write; after every recovery every acknowledged write reads back (or the read fails
    /// as uncorrectable, which the FTL then counts) and a command in flight is all old or
    /// all new; a device that wears out turns read-only and keeps everything.
    #[test]
    fn faults_and_cuts_at_every_step_keep_the_model(
        plan in steps(600),
        seed in any::<u64>(),
        wb in any::<bool>(),
    ) {
        faults_and_cuts_keep_the_model(plan, seed, wb, 1)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4))]
    /// The same with the log spread over the 4 dies of the device (batch-io §4.3): a
    /// cut that tears a log page on one chain loses nothing acknowledged on the others.
    #[test]
    fn faults_and_cuts_keep_the_model_with_the_log_over_four_dies(
        plan in steps(600),
        seed in any::<u64>(),
        wb in any::<bool>(),
    ) {
        faults_and_cuts_keep_the_model(plan, seed, wb, 4)?;
    }
}

/// The body of the crash property tests: `plan` against the reference model on a device
/// whose log spreads over `log_dies` dies.
fn faults_and_cuts_keep_the_model(
    plan: Vec<Step>,
    seed: u64,
    wb: bool,
    log_dies: u32,
) -> Result<(), TestCaseError> {
    let mut dev = tiny();
    dev.ftl.log_dies = log_dies;
    dev.geometry.blocks_per_plane = 32;
    dev.geometry.pages_per_block = 8;
    dev.faults.seed = seed;
    dev.faults.program_fail_prob = 0.003;
    dev.faults.erase_fail_prob = 0.003;
    dev.faults.ecc_bits_per_sector = 2;
    dev.faults.rber_fresh = 2.5e-5;
    dev.faults.rber_end_of_life = 2.5e-5;
    let cfg = FtlConfig {
        op: 0.3,
        gc_free_blocks: 4,
        wear_level_spread: 6,
        mdts_sectors: 3,
        map_cache_share: 0.0005,
        checkpoint_log_pages: 24,
        write_cache: if wb {
            WriteCache::WriteBack
        } else {
            WriteCache::WriteThrough
        },
        ..FtlConfig::default()
    };
    let mut f = Ftl::format(Nand::new_in_memory(dev).unwrap(), cfg).unwrap();
    let cap = f.lbas();
    let ss = f.lba_size();
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut m = Model::default();
    let mut version = 1u64;
    let mut read_only = false;
    for step in plan {
        if let Step::Cut { after } = step {
            f.nand_mut().arm_power_cut(PowerCut::AtOp(after));
            continue;
        }
        // (LBA, version; 0 = trimmed) this command changes, and whether it is a write
        // that write-back only buffers.
        let mut changes: Vec<(u64, u64)> = Vec::new();
        let mut buffered = false;
        let is_read = matches!(step, Step::Read { .. });
        let r = match step {
            Step::Write { .. } | Step::Trim { .. } | Step::Batch { .. } if read_only => continue,
            Step::Write { lba, n } => {
                let lba = lba % cap;
                let n = n.min(cap - lba);
                let mut data = Vec::new();
                for l in lba..lba + n {
                    changes.push((l, version));
                    data.extend_from_slice(&sector(ss, l ^ version));
                    version += 1;
                }
                buffered = wb;
                f.write(lba, &data, SimTime::ZERO)
            }
            Step::Trim { lba, n } => {
                let lba = lba % cap;
                let n = n.min(cap - lba);
                changes.extend((lba..lba + n).map(|l| (l, 0)));
                f.trim(lba, n, SimTime::ZERO)
            }
            Step::Batch { lpids } => {
                let mut pages = Vec::new();
                for l in lpids {
                    let l = l % cap;
                    pages.push((l, sector(ss, l ^ version)));
                    changes.push((l, version));
                    version += 1;
                }
                let refs: Vec<(u64, &[u8])> =
                    pages.iter().map(|(l, p)| (*l, p.as_slice())).collect();
                let buf = csd_sim::wire::build_batch(&refs, ss).unwrap();
                f.flush_batch(&buf, SimTime::ZERO)
            }
            Step::Read { lba } => {
                let l = lba % cap;
                let mut buf = vec![0u8; ss];
                match f.read(l, &mut buf, SimTime::ZERO) {
                    Ok(t) => {
                        prop_assert!(
                            m.could_read(ss, l, &buf),
                            "live read of LBA {} disagrees",
                            l
                        );
                        Ok(t)
                    }
                    Err(FtlError::Uncorrectable { .. }) => Ok(SimTime::ZERO),
                    Err(e) => Err(e),
                }
            }
            Step::Flush => f.flush(SimTime::ZERO),
            Step::Checkpoint => f.checkpoint(SimTime::ZERO),
            Step::Cut { .. } => unreachable!(),
        };
        match r {
            Ok(_) if buffered => m.buffer(&changes),
            Ok(_) => {
                // Trims, batches, flushes and checkpoints commit every buffered write
                // first; then their own changes are durable.
                if !is_read {
                    m.commit_buffered();
                }
                m.durable(&changes);
            }
            Err(FtlError::Nand(csd_nand::NandError::PowerLoss)) => {
                m.uncertain(&changes);
                let mut nand = f.crash();
                // Recovery itself may be cut once more.
                if rng.random_bool(0.3) {
                    nand.arm_power_cut(PowerCut::AtOp(rng.random_range(1..200)));
                }
                f = loop {
                    nand.power_on();
                    match Ftl::try_recover(nand, cfg) {
                        Ok(mut g) => {
                            g.nand_mut().disarm_power_cut();
                            break g;
                        }
                        Err(failed)
                            if matches!(
                                failed.error,
                                FtlError::Nand(csd_nand::NandError::PowerLoss)
                            ) =>
                        {
                            nand = *failed.nand
                        }
                        Err(failed) => {
                            return Err(TestCaseError::fail(format!("recovery: {}", failed.error)));
                        }
                    }
                };
                read_only = f.read_only().is_some();
                m.settle(&mut f)?;
            }
            Err(FtlError::ReadOnly { .. }) => {
                read_only = true;
                m.uncertain(&changes);
                m.settle(&mut f)?;
            }
            Err(e) => return Err(TestCaseError::fail(format!("{e}; {}", f.block_census()))),
        }
        f.check_invariants().map_err(TestCaseError::fail)?;
    }
    Ok(())
}

fn expected(ss: usize, l: u64, v: u64) -> Vec<u8> {
    if v == 0 {
        vec![0u8; ss]
    } else {
        sector(ss, l ^ v)
    }
}

/// The reference: durable (acknowledged) versions, write-back writes not yet durable, and
/// versions that may or may not have survived a cut.
#[derive(Default)]
struct Model {
    durable: HashMap<u64, u64>,
    buffered: Vec<(u64, u64)>,
    maybe: HashMap<u64, Vec<u64>>,
}

impl Model {
    fn latest(&self, l: u64) -> u64 {
        self.buffered
            .iter()
            .rev()
            .find(|(x, _)| *x == l)
            .map_or_else(|| *self.durable.get(&l).unwrap_or(&0), |&(_, v)| v)
    }

    fn could_read(&self, ss: usize, l: u64, buf: &[u8]) -> bool {
        buf == expected(ss, l, self.latest(l))
    }

    fn buffer(&mut self, changes: &[(u64, u64)]) {
        self.buffered.extend_from_slice(changes);
    }

    fn commit_buffered(&mut self) {
        for (l, v) in std::mem::take(&mut self.buffered) {
            self.durable.insert(l, v);
        }
    }

    fn durable(&mut self, changes: &[(u64, u64)]) {
        for &(l, v) in changes {
            self.durable.insert(l, v);
        }
    }

    /// A cut (or a read-only transition) struck: buffered writes and the command in
    /// flight may or may not be there.
    fn uncertain(&mut self, changes: &[(u64, u64)]) {
        for (l, v) in std::mem::take(&mut self.buffered)
            .into_iter()
            .chain(changes.iter().copied())
        {
            self.maybe.entry(l).or_default().push(v);
        }
    }

    /// Read what is there: each uncertain LBA holds one of its versions or its durable
    /// one (adopted), and every durable LBA reads back.
    fn settle(&mut self, f: &mut Ftl) -> Result<(), TestCaseError> {
        let ss = f.lba_size();
        let mut buf = vec![0u8; ss];
        for (l, vs) in std::mem::take(&mut self.maybe) {
            let acked = *self.durable.get(&l).unwrap_or(&0);
            match f.read(l, &mut buf, SimTime::ZERO) {
                Ok(_) => {
                    let v = vs
                        .iter()
                        .copied()
                        .chain([acked])
                        .find(|&v| buf == expected(ss, l, v));
                    prop_assert!(v.is_some(), "LBA {} holds none of its versions", l);
                    self.durable.insert(l, v.unwrap_or(0));
                }
                Err(FtlError::Uncorrectable { .. }) => {
                    self.durable.remove(&l);
                }
                Err(e) => return Err(TestCaseError::fail(e.to_string())),
            }
        }
        self.durable.retain(|_, v| *v != 0);
        for (&l, &v) in self.durable.iter() {
            match f.read(l, &mut buf, SimTime::ZERO) {
                Ok(_) => prop_assert_eq!(&buf, &expected(ss, l, v), "LBA {}", l),
                Err(FtlError::Uncorrectable { .. }) => {
                    let s = f.lifetime_stats();
                    prop_assert!(s.media_errors + s.lost_sectors > 0);
                }
                Err(e) => return Err(TestCaseError::fail(e.to_string())),
            }
        }
        Ok(())
    }
}

#[test]
fn every_preset_formats_and_reopens_from_its_checkpoint() {
    for (name, _) in csd_sim::config::PRESETS {
        let dev = DeviceConfig::preset(name).unwrap();
        let mut f = Ftl::format(Nand::new_in_memory(dev).unwrap(), FtlConfig::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let ss = f.lba_size();
        f.write(3, &sector(ss, 3), SimTime::ZERO).unwrap();
        let nand = f.shutdown(SimTime::ZERO).unwrap();
        let mut g =
            Ftl::recover(nand, FtlConfig::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(g.last_recovery().unwrap().clean, "{name}");
        let mut buf = vec![0u8; ss];
        g.read(3, &mut buf, SimTime::ZERO).unwrap();
        assert_eq!(buf, sector(ss, 3), "{name}");
    }
}

/// Fault rates and cut counts of three torture runs that pin two behaviours: a cached MAP
/// entry keeps its page buffer when a GC commit fails (seeds 3 and 5), and running out
/// of spare blocks ends the run read-only instead of aborting it (seed 777). Each run
/// finishes, or ends read-only at the end of life, with nothing lost or torn.
fn old_fault_rates(cuts: u64, seed: u64, write_back: bool) -> crate::torture::TortureConfig {
    let mut c = crate::torture::TortureConfig::with_faults(cuts, seed);
    c.device.faults.program_fail_prob = 0.0005;
    c.device.faults.erase_fail_prob = 0.0005;
    if write_back {
        c.ftl.write_cache = WriteCache::WriteBack;
    }
    c
}

fn run_clean(cfg: &crate::torture::TortureConfig) -> crate::torture::TortureReport {
    let r = crate::torture::torture(cfg, &mut |_| {}).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((r.lost, r.torn), (0, 0), "{r:?}");
    assert!(r.cuts >= cfg.cuts || r.read_only_at_cut.is_some(), "{r:?}");
    r
}

/// A failed GC commit under write-back leaves cached MAP entries readable.
#[test]
fn failed_gc_commit_keeps_cached_map_entries_write_back() {
    run_clean(&old_fault_rates(2028, 3, true));
}

/// Running out of spare blocks under faults ends the run read-only (spare blocks
/// exhausted) with every acknowledged write verified, never with "no free flash block".
#[test]
fn exhausted_spares_end_read_only_not_aborted() {
    let r = run_clean(&old_fault_rates(2018, 777, true));
    if let Some(why) = r.read_only_reason {
        assert_eq!(why, ReadOnlyReason::SpareExhausted, "{r:?}");
    }
}

/// A failed GC commit under write-through leaves cached MAP entries readable.
#[test]
fn failed_gc_commit_keeps_cached_map_entries_write_through() {
    run_clean(&old_fault_rates(2437, 5, false));
}

/// A shorter version of the long fault torture, across seeds and both cache modes.
#[test]
fn fault_torture_across_seeds() {
    for seed in 21..25 {
        for wb in [false, true] {
            let mut c = crate::torture::TortureConfig::with_faults(120, seed);
            if wb {
                c.ftl.write_cache = WriteCache::WriteBack;
            }
            run_clean(&c);
        }
    }
    let r = run_clean(&crate::torture::TortureConfig::with_weak_ecc(150, 31));
    assert!(r.writes_checked > 0);
}

// ---- End of life: wear, the closing checkpoint of a read-only device, SMART counters ----

/// A small array (128 blocks of 8 pages) rated for `endurance` P/E cycles.
fn worn_dev(endurance: u32) -> DeviceConfig {
    let mut dev = tiny();
    dev.geometry.blocks_per_plane = 32;
    dev.geometry.pages_per_block = 8;
    dev.flash.endurance = endurance;
    dev
}

fn eol_cfg() -> FtlConfig {
    FtlConfig {
        op: 0.3,
        ..small_cfg()
    }
}

/// The SMART counters that must survive a close and an open.
fn smart_counters(s: &FtlStats) -> [u64; 9] {
    [
        s.media_errors,
        s.integrity_errors,
        s.lost_sectors,
        s.read_retries,
        s.host_write_sectors,
        s.host_read_sectors,
        s.host_trim_sectors,
        s.grown_bad_blocks,
        s.user_programs + s.gc_programs,
    ]
}

/// Random single-LBA writes (noted in `model`) until one is refused; returns the error.
/// Every accepted write must find the device within its life.
fn write_until_refused(f: &mut Ftl, model: &mut HashMap<u64, u64>, seed: u64) -> FtlError {
    let n = f.lbas();
    let ss = f.lba_size();
    let mut rng = SmallRng::seed_from_u64(seed);
    for i in 1..1_000_000u64 {
        let l = rng.random_range(0..n);
        match f.write(l, &sector(ss, l ^ i), SimTime::ZERO) {
            Ok(_) => {
                model.insert(l, i);
            }
            Err(e) => return e,
        }
    }
    panic!("the device never reached its end of life");
}

fn verify_model(f: &mut Ftl, model: &HashMap<u64, u64>, skip: &[u64]) {
    let ss = f.lba_size();
    let mut buf = vec![0u8; ss];
    for (&l, &v) in model {
        if skip.contains(&l) {
            continue;
        }
        f.read(l, &mut buf, SimTime::ZERO).unwrap();
        assert_eq!(buf, sector(ss, l ^ v), "LBA {l}");
    }
}

/// Corrupt the stored copy of `lba` beyond the ECC.
fn corrupt_lba(f: &mut Ftl, lba: u64) {
    let (ppa, s) = f.location_of_lba(lba).unwrap();
    f.nand_mut().corrupt(ppa, s, 100, 0x10).unwrap();
}

/// Read a corrupted `lba` `times` times: each read is a media error.
fn make_media_errors(f: &mut Ftl, lba: u64, times: u32) {
    let mut buf = vec![0u8; f.lba_size()];
    for _ in 0..times {
        assert_eq!(
            f.read(lba, &mut buf, SimTime::ZERO),
            Err(FtlError::Uncorrectable { lba })
        );
    }
}

/// Open after a clean close: nothing replayed, nothing written.
fn reopen_clean(nand: Nand, cfg: FtlConfig) -> Ftl {
    let mut nand = nand;
    nand.reset_counters();
    let g = Ftl::recover(nand, cfg).unwrap();
    let r = g.last_recovery().unwrap();
    assert!(r.clean, "the close was not clean: {r:?}");
    assert_eq!((r.log_pages, r.log_records), (0, 0), "{r:?}");
    assert_eq!(media_writes(g.nand()), (0, 0), "a clean open wrote");
    g
}

#[test]
fn wear_alone_ends_life_at_the_rated_endurance() {
    let cfg = eol_cfg();
    let mut f = Ftl::format(Nand::new_in_memory(worn_dev(3)).unwrap(), cfg).unwrap();
    let n = f.lbas();
    let ss = f.lba_size();
    let mut model = HashMap::new();
    let mut rng = SmallRng::seed_from_u64(8);
    let mut last = f.health();
    let mut writes = 0u64;
    loop {
        let l = rng.random_range(0..n);
        let v = rng.random::<u64>() | 1;
        f.write(l, &sector(ss, l ^ v), SimTime::ZERO)
            .unwrap_or_else(|e| panic!("write {writes} within the life: {e}"));
        model.insert(l, v);
        writes += 1;
        let h = f.health();
        assert!(h.percentage_used >= last.percentage_used);
        last = h;
        if h.percentage_used >= 100 {
            break;
        }
        // While within its life the device writes and says it is healthy.
        assert_eq!(
            (h.critical_warning, h.read_only, h.worn_out),
            (0, None, false),
            "{h:?}"
        );
    }
    // The erase that brought the mean P/E count to the endurance ended the life: the
    // command it happened in completed, the next one is refused.
    let e = f
        .write(0, &sector(ss, 5), SimTime::ZERO)
        .expect_err("a worn-out device accepted a write");
    assert_eq!(
        e,
        FtlError::ReadOnly {
            reason: ReadOnlyReason::WornOut
        }
    );
    assert!(e.to_string().contains("rated endurance"), "{e}");
    let (_, mean, _) = f.erase_counts();
    assert!(
        (3.0..3.25).contains(&mean),
        "life ends at the endurance (mean P/E {mean})"
    );
    let h = f.health();
    assert!((100..=108).contains(&h.percentage_used), "{h:?}");
    assert!(h.worn_out);
    assert_eq!(h.read_only, Some(ReadOnlyReason::WornOut));
    assert_ne!(h.critical_warning & WARN_RELIABILITY, 0, "{h:?}");
    assert_ne!(h.critical_warning & WARN_READ_ONLY, 0, "{h:?}");
    assert_eq!(
        h.critical_warning & WARN_SPARE,
        0,
        "wear is not spare: {h:?}"
    );
    assert_eq!(h.available_spare_pct, 100);
    // Every write path refuses; reads keep working.
    assert!(matches!(
        f.trim(0, 1, SimTime::ZERO),
        Err(FtlError::ReadOnly {
            reason: ReadOnlyReason::WornOut
        })
    ));
    let batch = csd_sim::wire::build_batch(&[(1, &sector(ss, 1)[..])], ss).unwrap();
    assert!(matches!(
        f.flush_batch(&batch, SimTime::ZERO),
        Err(FtlError::ReadOnly { .. })
    ));
    verify_model(&mut f, &model, &[]);
    f.check_invariants().unwrap();
}

#[test]
fn a_worn_out_device_closes_cleanly_and_reopens_with_its_smart_counters() {
    let cfg = eol_cfg();
    let mut f = Ftl::format(Nand::new_in_memory(worn_dev(3)).unwrap(), cfg).unwrap();
    let mut model = HashMap::new();
    let e = write_until_refused(&mut f, &mut model, 9);
    assert_eq!(
        e,
        FtlError::ReadOnly {
            reason: ReadOnlyReason::WornOut
        }
    );
    // Media errors after the device turned read-only.
    let victim = *model.keys().min().unwrap();
    corrupt_lba(&mut f, victim);
    make_media_errors(&mut f, victim, 20);
    assert_eq!(f.lifetime_stats().media_errors, 20);
    f.close(SimTime::ZERO).unwrap();
    let (h, life, wear) = (f.health(), f.lifetime_stats(), f.erase_counts());
    // Power goes off after the close: the close alone made everything durable.
    let nand = f.crash();
    // The next open replays nothing and finds the same health and counters.
    let mut g = reopen_clean(nand, cfg);
    assert_eq!(g.read_only(), Some(ReadOnlyReason::WornOut));
    assert_eq!(g.health(), h);
    assert_eq!(g.erase_counts(), wear);
    assert_eq!(
        smart_counters(&g.lifetime_stats()),
        smart_counters(&life),
        "{:?}\n{life:?}",
        g.lifetime_stats()
    );
    assert_eq!(g.lifetime_stats().media_errors, 20);
    verify_model(&mut g, &model, &[victim]);
    let ss = g.lba_size();
    assert!(g.write(0, &sector(ss, 1), SimTime::ZERO).is_err());
    // A second session's errors are kept as well.
    make_media_errors(&mut g, victim, 3);
    g.check_invariants().unwrap();
    let nand = g.shutdown(SimTime::ZERO).unwrap();
    let g = reopen_clean(nand, cfg);
    assert_eq!(g.lifetime_stats().media_errors, 20 + 3);
    assert_eq!(g.read_only(), Some(ReadOnlyReason::WornOut));
    assert_ne!(g.health().critical_warning & WARN_RELIABILITY, 0);
}

/// Failing programs and erases eat the spare until no block can be allocated for data.
/// The data streams stop at the checkpoint reserve (at the higher failure rates the free
/// pool is down to it when the device turns read-only: without the reserve it would be
/// empty and the close could not checkpoint), so the close still writes a clean
/// checkpoint and the next open finds everything.
#[test]
fn a_device_out_of_spare_closes_cleanly_and_reopens_with_its_smart_counters() {
    for (p, seed) in [0.01, 0.03, 0.1]
        .into_iter()
        .flat_map(|p| (0..6u64).map(move |s| (p, s)))
    {
        let mut dev = tiny();
        dev.geometry.blocks_per_plane = 40;
        dev.geometry.pages_per_block = 8;
        dev.faults.seed = seed;
        dev.faults.program_fail_prob = p;
        dev.faults.erase_fail_prob = p;
        let cfg = FtlConfig {
            op: 0.4,
            ..small_cfg()
        };
        let mut f = Ftl::format(Nand::new_in_memory(dev).unwrap(), cfg).unwrap();
        let mut model = HashMap::new();
        let e = write_until_refused(&mut f, &mut model, seed);
        assert_eq!(
            e,
            FtlError::ReadOnly {
                reason: ReadOnlyReason::SpareExhausted
            },
            "p {p} seed {seed}"
        );
        let victim = *model.keys().max().unwrap();
        corrupt_lba(&mut f, victim);
        make_media_errors(&mut f, victim, 7);
        if let Err(e) = f.close(SimTime::ZERO) {
            panic!(
                "p {p} seed {seed}: a read-only device must still write its closing checkpoint: {e}; {}",
                f.block_census()
            );
        }
        let (h, life) = (f.health(), f.lifetime_stats());
        assert_ne!(h.critical_warning & WARN_SPARE, 0, "{h:?}");
        assert_ne!(h.critical_warning & WARN_READ_ONLY, 0, "{h:?}");
        assert_ne!(h.critical_warning & WARN_RELIABILITY, 0, "{h:?}");
        let mut g = reopen_clean(f.crash(), cfg);
        assert_eq!(g.read_only(), Some(ReadOnlyReason::SpareExhausted));
        assert_eq!(g.health(), h, "p {p} seed {seed}");
        assert_eq!(smart_counters(&g.lifetime_stats()), smart_counters(&life));
        assert_eq!(g.lifetime_stats().media_errors, 7);
        verify_model(&mut g, &model, &[victim]);
        g.check_invariants().unwrap();
    }
}

#[test]
fn a_close_that_cannot_checkpoint_says_so_and_the_next_open_replays() {
    let cfg = eol_cfg();
    let mut f = Ftl::format(Nand::new_in_memory(worn_dev(3)).unwrap(), cfg).unwrap();
    let mut model = HashMap::new();
    write_until_refused(&mut f, &mut model, 10);
    // Take every block the checkpoint could write into away (as if the reserve had been
    // used up): no free block, no open META block.
    for b in 0..f.blocks.len() as u32 {
        if f.blocks[b as usize].state == crate::ftl::Use::Free {
            f.blocks.set_state(b, crate::ftl::Use::Open(None));
        }
    }
    for die in 0..f.geo.dies() as usize {
        f.prov.close(crate::provision::Stream::Meta, die);
    }
    let e = f.close(SimTime::ZERO).unwrap_err();
    assert!(matches!(e, FtlError::NotCheckpointed { .. }), "{e:?}");
    assert!(e.to_string().contains("not synced"), "{e}");
    // Asking again does not pretend either.
    assert!(f.close(SimTime::ZERO).is_err());
    let mut g = Ftl::recover(f.crash(), cfg).unwrap();
    assert!(!g.last_recovery().unwrap().clean);
    assert_eq!(g.read_only(), Some(ReadOnlyReason::WornOut));
    verify_model(&mut g, &model, &[]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]
    /// Random writes, trims, batches, flushes, reads and corrupted sectors (media errors)
    /// against a reference model, on a small array rated for 2 to 5 P/E cycles, with or
    /// without program and erase failures, until the device turns read-only (worn out,
    /// spare exhausted or out of space). While it writes, its health is consistent (under
    /// 100% used, no wear-out); at the end the critical-warning bits say why; the close
    /// succeeds; and the next open replays nothing and finds the same health, SMART
    /// counters and data.
    #[test]
    fn end_of_life_closes_cleanly_and_keeps_health_counters_and_data(
        seed in any::<u64>(),
        endurance in 2u32..6,
        faults in prop_oneof![Just(0.0), Just(0.004), Just(0.03)],
        wb in any::<bool>(),
    ) {
        let mut dev = worn_dev(endurance);
        dev.faults.seed = seed;
        dev.faults.program_fail_prob = faults;
        dev.faults.erase_fail_prob = faults;
        let cfg = FtlConfig {
            write_cache: if wb { WriteCache::WriteBack } else { WriteCache::WriteThrough },
            ..eol_cfg()
        };
        let mut f = Ftl::format(Nand::new_in_memory(dev).unwrap(), cfg).unwrap();
        let (n, ss) = (f.lbas(), f.lba_size());
        let mut rng = SmallRng::seed_from_u64(seed);
        // Durable versions (0: trimmed), write-back versions not yet flushed, and LBAs
        // whose stored copy was corrupted (they may read as uncorrectable).
        let mut durable: HashMap<u64, u64> = HashMap::new();
        let mut buffered: Vec<(u64, u64)> = Vec::new();
        let mut corrupted: Vec<u64> = Vec::new();
        let mut media_errors = 0u64;
        let mut version = 1u64;
        let mut steps = 0u64;
        let reason = loop {
            steps += 1;
            prop_assert!(steps < 200_000, "the device never reached its end of life");
            let k = rng.random_range(0..100u32);
            let l = rng.random_range(0..n);
            let r = if k < 70 {
                version += 1;
                let r = f.write(l, &sector(ss, l ^ version), SimTime::ZERO);
                if r.is_ok() {
                    corrupted.retain(|&c| c != l);
                    if wb { buffered.push((l, version)) } else { durable.insert(l, version); }
                }
                r.map(|_| ())
            } else if k < 75 {
                let r = f.trim(l, 1, SimTime::ZERO);
                if r.is_ok() {
                    durable.extend(buffered.drain(..));
                    corrupted.retain(|&c| c != l);
                    durable.insert(l, 0);
                }
                r.map(|_| ())
            } else if k < 80 {
                version += 1;
                let l2 = (l + 1) % n;
                let pages = [(l, sector(ss, l ^ version)), (l2, sector(ss, l2 ^ version))];
                let refs: Vec<(u64, &[u8])> = pages.iter().map(|(x, p)| (*x, p.as_slice())).collect();
                let buf = csd_sim::wire::build_batch(&refs, ss).unwrap();
                let r = f.flush_batch(&buf, SimTime::ZERO);
                if r.is_ok() {
                    durable.extend(buffered.drain(..));
                    corrupted.retain(|&c| c != l && c != l2);
                    durable.insert(l, version);
                    durable.insert(l2, version);
                }
                r.map(|_| ())
            } else if k < 85 {
                let r = f.flush(SimTime::ZERO);
                if r.is_ok() {
                    durable.extend(buffered.drain(..));
                }
                r.map(|_| ())
            } else if k < 87 && durable.get(&l).is_some_and(|&v| v != 0)
                && !buffered.iter().any(|&(x, _)| x == l)
                && !corrupted.contains(&l)
            {
                // Damage the stored copy; reads of it are media errors from now on.
                if let Some((ppa, s)) = f.location_of_lba(l) {
                    f.nand_mut().corrupt(ppa, s, 100, 0x10).unwrap();
                    corrupted.push(l);
                }
                Ok(())
            } else {
                let mut buf = vec![0u8; ss];
                match f.read(l, &mut buf, SimTime::ZERO) {
                    Ok(_) => {
                        let v = buffered.iter().rev().find(|&&(x, _)| x == l).map(|&(_, v)| v)
                            .unwrap_or_else(|| *durable.get(&l).unwrap_or(&0));
                        let want = if v == 0 { vec![0u8; ss] } else { sector(ss, l ^ v) };
                        prop_assert!(buf == want, "LBA {} reads wrong", l);
                    }
                    Err(FtlError::Uncorrectable { lba }) => {
                        prop_assert!(corrupted.contains(&lba), "LBA {} uncorrectable", lba);
                        media_errors += 1;
                    }
                    Err(e) => return Err(TestCaseError::fail(e.to_string())),
                }
                Ok(())
            };
            match r {
                Ok(()) => {}
                Err(FtlError::ReadOnly { reason }) => break reason,
                Err(e) => return Err(TestCaseError::fail(format!("{e}; {}", f.block_census()))),
            }
            let h = f.health();
            if f.read_only().is_none() {
                prop_assert!(h.percentage_used < 100 && !h.worn_out, "{:?}", h);
                prop_assert_eq!(h.critical_warning & WARN_READ_ONLY, 0);
            } else {
                prop_assert_ne!(h.critical_warning & WARN_READ_ONLY, 0);
            }
            // Lost sectors retire their blocks: the spare may fall before the end.
            prop_assert_eq!(
                h.critical_warning & WARN_SPARE != 0,
                h.available_spare_pct < h.spare_threshold_pct
            );
            prop_assert_eq!(f.lifetime_stats().media_errors, media_errors);
        };
        // Why it ended shows in the critical warning.
        let h = f.health();
        prop_assert_eq!(h.read_only, Some(reason));
        prop_assert_ne!(h.critical_warning & WARN_READ_ONLY, 0);
        match reason {
            ReadOnlyReason::WornOut => {
                prop_assert!(h.worn_out && h.percentage_used >= 100, "{:?}", h);
                prop_assert_ne!(h.critical_warning & WARN_RELIABILITY, 0);
            }
            ReadOnlyReason::SpareExhausted => {
                prop_assert_ne!(h.critical_warning & WARN_SPARE, 0);
            }
            ReadOnlyReason::OutOfSpace => {}
            other => return Err(TestCaseError::fail(format!("ended {other}"))),
        }
        // Write-back sectors not yet flushed may or may not have survived the end: adopt
        // what the device holds (one of their versions or the durable one).
        let mut buf = vec![0u8; ss];
        for (l, v) in std::mem::take(&mut buffered) {
            match f.read(l, &mut buf, SimTime::ZERO) {
                Ok(_) if buf == sector(ss, l ^ v) => {
                    durable.insert(l, v);
                }
                Ok(_) => {}
                // Rolled back onto a copy that was damaged before the write.
                Err(FtlError::Uncorrectable { .. }) => {
                    media_errors += 1;
                    corrupted.push(l);
                }
                Err(e) => return Err(TestCaseError::fail(e.to_string())),
            }
        }
        // Media errors after the end of life count too.
        for &c in &corrupted {
            if f.read(c, &mut buf, SimTime::ZERO).is_err() {
                media_errors += 1;
            }
        }
        prop_assert_eq!(f.lifetime_stats().media_errors, media_errors);
        f.close(SimTime::ZERO).map_err(|e| TestCaseError::fail(format!("close: {e}")))?;
        let (h, life, wear) = (f.health(), f.lifetime_stats(), f.erase_counts());
        let persisted = reason != ReadOnlyReason::OutOfSpace;
        let mut g = if persisted {
            reopen_clean(f.crash(), cfg)
        } else {
            Ftl::recover(f.crash(), cfg).unwrap()
        };
        let r = g.last_recovery().unwrap();
        prop_assert!(r.clean && r.log_pages == 0, "{:?}", r);
        if persisted {
            prop_assert_eq!(g.read_only(), Some(reason));
            prop_assert_eq!(g.health(), h);
            prop_assert_eq!(g.erase_counts(), wear);
        }
        prop_assert_eq!(smart_counters(&g.lifetime_stats()), smart_counters(&life));
        for (&l, &v) in &durable {
            match g.read(l, &mut buf, SimTime::ZERO) {
                Ok(_) => {
                    let want = if v == 0 { vec![0u8; ss] } else { sector(ss, l ^ v) };
                    prop_assert!(buf == want, "LBA {} after reopening", l);
                }
                Err(FtlError::Uncorrectable { .. }) if corrupted.contains(&l) => {}
                Err(e) => return Err(TestCaseError::fail(format!("LBA {l}: {e}"))),
            }
        }
        g.check_invariants().map_err(TestCaseError::fail)?;
    }
}
