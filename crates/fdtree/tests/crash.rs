//! Crash tests: power cuts at random NAND operation counts (often in the middle of a
//! merge), then `open`; the tree must hold exactly the acknowledged state (the one
//! modification in flight at the cut may or may not have happened) and its invariants.
mod common;

use csd_fdtree::{FdConfig, FdTree, Scheme};
use csd_nand::PowerCut;
use rand::{RngExt, SeedableRng, rngs::SmallRng};
use std::collections::BTreeMap;

fn arm(dev: &csd_host::SharedDevice, ops: u64) {
    dev.lock()
        .block_mut()
        .ftl_mut()
        .nand_mut()
        .arm_power_cut(PowerCut::AtOp(ops));
}

fn crash_round(scheme: Scheme, seed: u64) -> (bool, u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let dev = common::device();
    let cfg = FdConfig::small().with_scheme(scheme);
    let t = FdTree::create(dev.clone(), cfg.clone()).unwrap();
    let mut model: BTreeMap<u64, u64> = BTreeMap::new();
    let keys = 3_000u64;
    // Warm up so the tree has levels.
    let warm = rng.random_range(500..4_000u64);
    for i in 0..warm {
        let k = rng.random_range(0..keys);
        if rng.random_range(0..4) == 0 {
            t.delete(k).unwrap();
            model.remove(&k);
        } else {
            t.insert(k, i).unwrap();
            model.insert(k, i);
        }
    }
    let merges_before = t.stats().merges;
    arm(&dev, rng.random_range(1..2_500u64));
    let mut in_flight = None;
    for i in 0..20_000u64 {
        let k = rng.random_range(0..keys);
        let del = rng.random_range(0..4) == 0;
        let r = if del {
            t.delete(k).map(|_| ())
        } else {
            t.insert(k, warm + i)
        };
        if r.is_err() {
            in_flight = Some((k, if del { None } else { Some(warm + i) }));
            break;
        }
        if del {
            model.remove(&k);
        } else {
            model.insert(k, warm + i);
        }
    }
    let _ = merges_before;
    // A merge interrupted by the cut leaves the tree refusing work.
    t.wait_for_merges().ok();
    let merged = t.lookup(0).is_err();
    drop(t);
    let dev = common::crash_and_recover(dev);
    let t = FdTree::open(dev, cfg).unwrap_or_else(|e| panic!("seed {seed}: open: {e}"));
    t.check_invariants()
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let got: BTreeMap<u64, u64> = t.range(0, u64::MAX).unwrap().into_iter().collect();
    let mut alt = model.clone();
    if let Some((k, v)) = in_flight {
        match v {
            Some(v) => alt.insert(k, v),
            None => alt.remove(&k),
        };
    }
    assert!(
        got == model || got == alt,
        "seed {seed} {scheme:?}: recovered state differs: {} keys vs {} acknowledged (in flight {in_flight:?})",
        got.len(),
        model.len()
    );
    for k in 0..keys {
        assert_eq!(
            t.lookup(k).unwrap(),
            got.get(&k).copied(),
            "seed {seed} key {k}"
        );
    }
    // The reopened tree keeps working.
    for k in 0..600u64 {
        t.insert(k, 1).unwrap();
    }
    t.check_invariants().unwrap();
    (merged, t.stats().merges)
}

/// Crash rounds of `scheme` for `seeds`. Mid-merge cuts are guaranteed by
/// `power_cut_inside_a_merge`; here they happen by chance, and are counted.
fn crash_rounds(scheme: Scheme, seeds: std::ops::Range<u64>) {
    let mid_merge: u64 = seeds.map(|s| u64::from(crash_round(scheme, s).0)).sum();
    eprintln!("{scheme:?}: {mid_merge} of the cuts interrupted a merge");
}

#[test]
fn power_cuts_restore_the_acknowledged_state_xm() {
    crash_rounds(Scheme::Xm, 0..14);
}

#[test]
fn power_cuts_restore_the_acknowledged_state_ds() {
    crash_rounds(Scheme::Ds, 100..114);
}

#[test]
fn power_cuts_restore_the_acknowledged_state_fc() {
    crash_rounds(Scheme::Fc, 200..214);
}

/// FD+DS and FD+FC merge in a background thread: find the insert that starts a merge
/// and the NAND operations until the merge is done (nothing else runs meanwhile), then
/// replay and cut at points spread over them.
#[test]
fn power_cut_inside_a_background_merge() {
    for scheme in [Scheme::Ds, Scheme::Fc] {
        let cfg = FdConfig::small().with_scheme(scheme);
        let key = |i: u64| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % 5_000;
        // Every insert is followed by waiting for any merge it started, so the tree
        // state after each insert does not depend on thread timing.
        let serial = |t: &FdTree, model: &mut BTreeMap<u64, u64>, i: u64| {
            t.insert(key(i), i).unwrap();
            model.insert(key(i), i);
            t.wait_for_merges().unwrap();
        };
        // Probe: the insert that starts the 7th merge is `at`.
        let dev = common::device();
        let t = FdTree::create(dev.clone(), cfg.clone()).unwrap();
        let mut at = 0;
        loop {
            let merges = t.stats().merges;
            t.insert(key(at), at).unwrap();
            t.wait_for_merges().unwrap();
            if merges >= 6 && t.stats().merges > merges {
                break;
            }
            at += 1;
        }
        drop(t);
        let dev = common::device();
        let t = FdTree::create(dev.clone(), cfg.clone()).unwrap();
        let mut model = BTreeMap::new();
        for i in 0..at {
            serial(&t, &mut model, i);
        }
        let before = nand_ops(&dev);
        let merges = t.stats().merges;
        t.insert(key(at), at).unwrap();
        t.wait_for_merges().unwrap();
        assert_eq!(t.stats().merges, merges + 1, "insert {at} starts a merge");
        let ops = nand_ops(&dev) - before;
        drop(t);
        assert!(ops >= 4, "{scheme:?}: a merge takes {ops} NAND operations");
        let mut interrupted = 0;
        for j in 0..10u64 {
            let cut = 1 + j * (ops - 1) / 9;
            let dev = common::device();
            let t = FdTree::create(dev.clone(), cfg.clone()).unwrap();
            let mut model = BTreeMap::new();
            for i in 0..at {
                serial(&t, &mut model, i);
            }
            arm(&dev, cut);
            let acked = t.insert(key(at), at).is_ok();
            if acked {
                model.insert(key(at), at);
            }
            let _ = t.wait_for_merges();
            interrupted += u64::from(t.lookup(0).is_err());
            drop(t);
            let dev = common::crash_and_recover(dev);
            let t = FdTree::open(dev, cfg.clone()).unwrap();
            t.check_invariants().unwrap();
            let got: BTreeMap<u64, u64> = t.range(0, u64::MAX).unwrap().into_iter().collect();
            let mut alt = model.clone();
            alt.insert(key(at), at);
            assert!(
                got == model || got == alt,
                "{scheme:?} cut {cut} of {ops}: {} vs {}",
                got.len(),
                model.len()
            );
        }
        assert!(
            interrupted >= 5,
            "{scheme:?}: only {interrupted} cuts hit the merge"
        );
    }
}

fn nand_ops(dev: &csd_host::SharedDevice) -> u64 {
    dev.lock().block_mut().ftl_mut().nand_mut().op_count()
}

/// FD+XM merges inside the inserting thread, deterministically: find the insert that
/// runs a merge and how many NAND operations it takes, then replay the same workload
/// and cut at points spread over that insert (log write, merge reads and writes,
/// flush, manifest).
#[test]
fn power_cut_inside_an_xm_merge() {
    let cfg = FdConfig::small();
    let key = |i: u64| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % 5_000;
    // Probe run.
    let dev = common::device();
    let t = FdTree::create(dev.clone(), cfg.clone()).unwrap();
    let mut i = 0u64;
    let (at, ops) = loop {
        let m = t.stats().merges;
        let before = nand_ops(&dev);
        t.insert(key(i), i).unwrap();
        let ops = nand_ops(&dev) - before;
        if t.stats().merges > m && m >= 6 {
            break (i, ops);
        }
        i += 1;
    };
    drop(t);
    assert!(ops >= 4, "a merge takes {ops} NAND operations");
    let mut interrupted = 0;
    for j in 0..10u64 {
        let cut = 1 + j * (ops - 1) / 9;
        let dev = common::device();
        let t = FdTree::create(dev.clone(), cfg.clone()).unwrap();
        let mut model = BTreeMap::new();
        for i in 0..at {
            t.insert(key(i), i).unwrap();
            model.insert(key(i), i);
        }
        arm(&dev, cut);
        assert!(
            t.insert(key(at), at).is_err(),
            "cut {cut} of {ops} must hit the insert"
        );
        interrupted += u64::from(t.lookup(0).is_err());
        drop(t);
        let dev = common::crash_and_recover(dev);
        let t = FdTree::open(dev, cfg.clone()).unwrap();
        t.check_invariants().unwrap();
        let got: BTreeMap<u64, u64> = t.range(0, u64::MAX).unwrap().into_iter().collect();
        let mut alt = model.clone();
        alt.insert(key(at), at);
        assert!(
            got == model || got == alt,
            "cut {cut} of {ops}: {} vs {}",
            got.len(),
            model.len()
        );
    }
    assert!(interrupted >= 5, "only {interrupted} cuts hit the merge");
}
