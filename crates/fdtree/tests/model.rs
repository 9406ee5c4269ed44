//! Model-based tests: random operations against a `BTreeMap`, for each scheme.
mod common;

use csd_fdtree::{FdConfig, FdError, FdTree, Scheme};
use proptest::prelude::*;
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
enum Op {
    Insert(u64, u64),
    Delete(u64),
    Lookup(u64),
    Range(u64, u64),
}

fn op(keys: u64) -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..keys, any::<u64>()).prop_map(|(k, v)| Op::Insert(k, v)),
        3 => (0..keys).prop_map(Op::Delete),
        2 => (0..keys).prop_map(Op::Lookup),
        1 => (0..keys, 0..keys / 4).prop_map(|(a, w)| Op::Range(a, a + w)),
    ]
}

fn run(scheme: Scheme, ops: &[Op]) -> Result<(), TestCaseError> {
    let t = FdTree::create(common::device(), FdConfig::small().with_scheme(scheme)).unwrap();
    let mut m = BTreeMap::new();
    let mut merges = 0;
    for (i, o) in ops.iter().enumerate() {
        match *o {
            Op::Insert(k, v) => {
                t.insert(k, v).unwrap();
                m.insert(k, v);
            }
            Op::Delete(k) => prop_assert_eq!(
                t.delete(k).unwrap(),
                m.remove(&k).is_some(),
                "delete {} at {}",
                k,
                i
            ),
            Op::Lookup(k) => prop_assert_eq!(
                t.lookup(k).unwrap(),
                m.get(&k).copied(),
                "lookup {} at {}",
                k,
                i
            ),
            Op::Range(a, b) => {
                let want: Vec<_> = m.range(a..=b).map(|(&k, &v)| (k, v)).collect();
                prop_assert_eq!(t.range(a, b).unwrap(), want, "range {}..={} at {}", a, b, i);
            }
        }
        let s = t.stats();
        if s.merges != merges {
            merges = s.merges;
            t.check_invariants()
                .map_err(|e| TestCaseError::fail(format!("after op {i}: {e}")))?;
        }
    }
    t.check_invariants()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let all: Vec<_> = m.iter().map(|(&k, &v)| (k, v)).collect();
    prop_assert_eq!(t.range(0, u64::MAX).unwrap(), all);
    prop_assert_eq!(t.stats().entries, m.len() as u64);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn xm_matches_btreemap(ops in prop::collection::vec(op(1500), 600..2500)) {
        run(Scheme::Xm, &ops)?;
    }

    #[test]
    fn ds_matches_btreemap(ops in prop::collection::vec(op(1500), 600..2500)) {
        run(Scheme::Ds, &ops)?;
    }

    #[test]
    fn fc_matches_btreemap(ops in prop::collection::vec(op(1500), 600..2500)) {
        run(Scheme::Fc, &ops)?;
    }

    #[test]
    fn fc_small_key_space(ops in prop::collection::vec(op(40), 200..1200)) {
        run(Scheme::Fc, &ops)?;
    }

    #[test]
    fn xm_small_key_space(ops in prop::collection::vec(op(40), 200..1200)) {
        run(Scheme::Xm, &ops)?;
    }
}

/// Growth to several levels, then deletes that shrink the tree through underflow
/// merges and level tightening.
#[test]
fn grows_then_shrinks_with_underflow_merges() {
    for scheme in [Scheme::Xm, Scheme::Ds, Scheme::Fc] {
        let t = FdTree::create(common::device(), FdConfig::small().with_scheme(scheme)).unwrap();
        let n = 12_000u64;
        for k in 0..n {
            t.insert(k * 3, k).unwrap();
        }
        t.check_invariants().unwrap();
        let grown = t.stats();
        assert!(grown.levels >= 3, "{grown:?}");
        for k in 0..n - 100 {
            assert!(t.delete(k * 3).unwrap());
        }
        t.wait_for_merges().unwrap();
        t.check_invariants().unwrap();
        let shrunk = t.stats();
        assert!(shrunk.underflow_merges > 0, "{shrunk:?}");
        assert!(
            shrunk.blocks_in_use < grown.blocks_in_use / 4,
            "{grown:?} {shrunk:?}"
        );
        assert_eq!(shrunk.entries, 100);
        for k in n - 100..n {
            assert_eq!(t.lookup(k * 3).unwrap(), Some(k));
        }
        assert_eq!(t.lookup(3).unwrap(), None);
        assert_eq!(t.range(0, u64::MAX).unwrap().len(), 100);
    }
}

#[test]
fn clean_close_and_open_keeps_everything() {
    for scheme in [Scheme::Xm, Scheme::Ds, Scheme::Fc] {
        let dev = common::device();
        let cfg = FdConfig::small().with_scheme(scheme);
        let t = FdTree::create(dev.clone(), cfg.clone()).unwrap();
        for k in 0..2_000u64 {
            t.insert(k, k + 1).unwrap();
        }
        for k in (0..2_000u64).step_by(7) {
            t.delete(k).unwrap();
        }
        t.close().unwrap();
        assert_eq!(t.insert(1, 1), Err(FdError::Closed));
        drop(t);
        let t = FdTree::open(dev, cfg).unwrap();
        t.check_invariants().unwrap();
        for k in 0..2_000u64 {
            let want = (k % 7 != 0).then_some(k + 1);
            assert_eq!(t.lookup(k).unwrap(), want, "key {k}");
        }
    }
}

#[test]
fn bad_configs_get_typed_errors() {
    let dev = common::device();
    let mut c = FdConfig::small();
    c.l0_bytes = 2048;
    assert!(
        matches!(FdTree::create(dev.clone(), c), Err(FdError::Config(m)) if m.contains("smaller than one block"))
    );
    let mut c = FdConfig::small();
    c.block_bytes = 1000;
    assert!(matches!(
        FdTree::create(dev.clone(), c),
        Err(FdError::Config(_))
    ));
    let mut c = FdConfig::small();
    c.size_ratio = 1;
    assert!(matches!(
        FdTree::create(dev.clone(), c),
        Err(FdError::Config(_))
    ));
    let mut c = FdConfig::small();
    c.lba_count = Some(20);
    assert!(matches!(
        FdTree::create(dev.clone(), c),
        Err(FdError::DeviceTooSmall { .. })
    ));
    let mut c = FdConfig::small();
    c.start_lba = u64::MAX - 5;
    c.lba_count = Some(100);
    assert!(matches!(
        FdTree::create(dev.clone(), c),
        Err(FdError::Config(_))
    ));
    let mut c = FdConfig::small();
    c.log_bytes = 4096;
    assert!(
        matches!(FdTree::create(dev.clone(), c), Err(FdError::Config(m)) if m.contains("log_bytes"))
    );
    // Opening where no tree was created.
    let mut c = FdConfig::small();
    c.start_lba = 8192;
    c.lba_count = Some(2048);
    assert!(matches!(
        FdTree::open(dev.clone(), c),
        Err(FdError::NotFound { .. })
    ));
    // The paper's defaults are valid for XM/DS on a device big enough.
    let c = FdConfig::default().with_scheme(Scheme::Xm);
    assert!(FdTree::create(dev, c).is_ok());
}

#[test]
fn tree_area_full_is_reported() {
    let dev = common::device();
    let mut c = FdConfig::small();
    c.lba_count = Some(2 * 2 + 16 + 16 + 4);
    let Ok(t) = FdTree::create(dev, c) else {
        panic!("tree should fit")
    };
    let mut err = None;
    for k in 0..100_000u64 {
        if let Err(e) = t.insert(k, k) {
            err = Some(e);
            break;
        }
    }
    assert!(
        matches!(
            err,
            Some(FdError::Failed(_)) | Some(FdError::NoSpace { .. })
        ),
        "{err:?}"
    );
}

/// A long random workload over a large key space: deep trees with fence-only levels,
/// partial and full merges of several levels; invariants after every tenth merge, lookups and scans against the model throughout.
#[test]
fn deep_random_workload_all_schemes() {
    for scheme in [Scheme::Xm, Scheme::Ds, Scheme::Fc] {
        let t = FdTree::create(common::device(), FdConfig::small().with_scheme(scheme)).unwrap();
        let mut m = BTreeMap::new();
        let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ scheme as u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut merges = 0;
        let mut max_levels = 0;
        for i in 0..40_000u64 {
            let r = next();
            let k = r % 30_000;
            // Phases: grow, churn, shrink.
            let p_del = match i {
                0..15_000 => 10,
                15_000..30_000 => 45,
                _ => 90,
            };
            if r % 100 < p_del {
                assert_eq!(
                    t.delete(k).unwrap(),
                    m.remove(&k).is_some(),
                    "{scheme:?} delete {k} at {i}"
                );
            } else {
                t.insert(k, i).unwrap();
                m.insert(k, i);
            }
            if i % 97 == 0 {
                let q = next() % 30_000;
                assert_eq!(
                    t.lookup(q).unwrap(),
                    m.get(&q).copied(),
                    "{scheme:?} lookup {q} at {i}"
                );
            }
            if i % 1_999 == 0 {
                let a = next() % 30_000;
                let want: Vec<_> = m.range(a..=a + 500).map(|(&k, &v)| (k, v)).collect();
                assert_eq!(
                    t.range(a, a + 500).unwrap(),
                    want,
                    "{scheme:?} range at {i}"
                );
            }
            let s = t.stats();
            max_levels = max_levels.max(s.levels);
            if s.merges >= merges + 10 {
                merges = s.merges;
                t.check_invariants()
                    .unwrap_or_else(|e| panic!("{scheme:?} at {i}: {e}"));
            }
        }
        t.check_invariants().unwrap();
        let all: Vec<_> = m.iter().map(|(&k, &v)| (k, v)).collect();
        assert_eq!(t.range(0, u64::MAX).unwrap(), all);
        let s = t.stats();
        assert!(max_levels >= 3, "{scheme:?} {s:?}");
    }
}

/// Garbage in tree blocks is reported as `Corrupt`, never a panic or a wrong answer
/// passed off as data.
#[test]
fn corrupt_blocks_are_reported() {
    use csd_host::CommandIssuer;
    let dev = common::device();
    let t = FdTree::create(dev.clone(), FdConfig::small()).unwrap();
    for k in 0..12_000u64 {
        t.insert(k, k).unwrap();
    }
    // Small config: manifest slots at LBAs 0 and 1, log at 2..18, tree blocks from 18.
    let mut h = dev.handle().unwrap();
    let lba_size = dev.identify().lba_size as usize;
    // The allocator places levels anywhere in the area: overwrite the first 2048 blocks.
    let garbage: Vec<u8> = (0..lba_size * 2048).map(|i| (i * 7 + 3) as u8).collect();
    h.write(18, &garbage).unwrap();
    let mut corrupt = 0;
    for k in (0..12_000u64).step_by(13) {
        match t.lookup(k) {
            Ok(v) => assert!(v == Some(k), "wrong answer for {k}: {v:?}"),
            Err(FdError::Corrupt(_)) => corrupt += 1,
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert!(corrupt > 0);
    assert!(matches!(t.check_invariants(), Err(FdError::Corrupt(_))));
}

#[test]
fn trees_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<FdTree>();
    check::<csd_fdtree::BTree>();
}

#[test]
fn open_with_another_geometry_is_refused() {
    let dev = common::device();
    let t = FdTree::create(dev.clone(), FdConfig::small()).unwrap();
    t.insert(1, 2).unwrap();
    t.close().unwrap();
    drop(t);
    let mut c = FdConfig::small();
    c.log_bytes *= 2;
    assert!(
        matches!(FdTree::open(dev.clone(), c), Err(FdError::Config(m)) if m.contains("created with"))
    );
    let t = FdTree::open(dev, FdConfig::small()).unwrap();
    assert_eq!(t.lookup(1).unwrap(), Some(2));
}

#[test]
fn clean_close_without_log_keeps_l0() {
    for scheme in [Scheme::Xm, Scheme::Ds, Scheme::Fc] {
        let dev = common::device();
        let mut cfg = FdConfig::small().with_scheme(scheme);
        cfg.durable = false;
        let t = FdTree::create(dev.clone(), cfg.clone()).unwrap();
        for k in 0..1_000u64 {
            t.insert(k, k).unwrap();
        }
        assert!(t.stats().l0_entries > 0);
        t.close().unwrap();
        drop(t);
        let t = FdTree::open(dev, cfg).unwrap();
        t.check_invariants().unwrap();
        assert_eq!(t.range(0, u64::MAX).unwrap().len(), 1_000, "{scheme:?}");
    }
}
