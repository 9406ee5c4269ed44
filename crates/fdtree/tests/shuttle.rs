//! Randomized concurrency tests of the tree's protocols with the `shuttle` crate:
//! `cargo test -p csd-fdtree --features shuttle --test shuttle`. Every schedule runs
//! a tiny tree that merges while writers modify and readers look up; no deadlock (a
//! deadlock fails the schedule), no lost or phantom key, and every lookup returns a
//! value that was current at some instant of the call.
#![cfg(feature = "shuttle")]

mod common;

use csd_fdtree::{FdConfig, FdTree, Scheme};
use shuttle::sync::Arc;
use shuttle::sync::atomic::{AtomicU64, Ordering};
use shuttle::thread;
use std::collections::BTreeMap;

fn scenario(dev: &csd_host::SharedDevice, scheme: Scheme, durable: bool) {
    let mut cfg = FdConfig::small().with_scheme(scheme);
    cfg.durable = durable;
    let t = Arc::new(FdTree::create(dev.clone(), cfg).unwrap());
    // Base keys: never modified afterwards, must always be found.
    for k in 0..500u64 {
        t.insert(k * 10, k).unwrap();
    }
    // Per writer key: 0 = not yet inserted, 1 = inserted (value k + 7), 2 = deleted.
    let state: Arc<Vec<AtomicU64>> = Arc::new((0..60).map(|_| AtomicU64::new(0)).collect());
    let mut hs = Vec::new();
    for w in 0..2u64 {
        let (t, state) = (t.clone(), state.clone());
        hs.push(thread::spawn(move || {
            for i in (w..60).step_by(2) {
                let k = 5 + i * 10;
                t.insert(k, k + 7).unwrap();
                state[i as usize].store(1, Ordering::SeqCst);
            }
            for i in (w..60).step_by(6) {
                let k = 5 + i * 10;
                state[i as usize].store(3, Ordering::SeqCst); // delete in flight
                assert!(t.delete(k).unwrap());
                state[i as usize].store(2, Ordering::SeqCst);
            }
        }));
    }
    {
        let (t, state) = (t.clone(), state.clone());
        hs.push(thread::spawn(move || {
            for r in 0..40u64 {
                let base = (r * 37 % 500) * 10;
                assert_eq!(
                    t.lookup(base).unwrap(),
                    Some(base / 10),
                    "base key {base} lost"
                );
                let i = (r * 13 % 60) as usize;
                let k = 5 + i as u64 * 10;
                let before = state[i].load(Ordering::SeqCst);
                let got = t.lookup(k).unwrap();
                let after = state[i].load(Ordering::SeqCst);
                match got {
                    Some(v) => {
                        assert_eq!(v, k + 7, "phantom value for {k}");
                        assert!(before != 2, "deleted key {k} read back");
                    }
                    None => assert!(before != 1 || after != 1, "inserted key {k} lost"),
                }
                if r % 10 == 0 {
                    let got = t.range(base, base + 100).unwrap();
                    assert!(
                        got.iter().any(|&(k, _)| k == base),
                        "range lost base key {base}"
                    );
                }
            }
        }));
    }
    for h in hs {
        h.join().unwrap();
    }
    t.check_invariants().unwrap();
    let mut want: BTreeMap<u64, u64> = (0..500u64).map(|k| (k * 10, k)).collect();
    for i in 0..60u64 {
        if i % 6 >= 2 {
            want.insert(5 + i * 10, 5 + i * 10 + 7);
        }
    }
    let got: BTreeMap<u64, u64> = t.range(0, u64::MAX).unwrap().into_iter().collect();
    assert_eq!(got, want);
    let st = t.stats();
    assert!(st.merges >= 2, "{st:?}");
    if std::env::var_os("FDTREE_SHUTTLE_VERBOSE").is_some() {
        eprintln!(
            "{scheme:?}: merges {} reads during merges {}",
            st.merges, st.reads_during_merge
        );
    }
}

#[test]
fn shuttle_fc() {
    let dev = common::device();
    shuttle::check_random(move || scenario(&dev, Scheme::Fc, false), 2000);
}

#[test]
fn shuttle_fc_durable() {
    let dev = common::device();
    shuttle::check_random(move || scenario(&dev, Scheme::Fc, true), 300);
}

#[test]
fn shuttle_ds() {
    let dev = common::device();
    shuttle::check_random(move || scenario(&dev, Scheme::Ds, false), 500);
}

#[test]
fn shuttle_xm() {
    let dev = common::device();
    shuttle::check_random(move || scenario(&dev, Scheme::Xm, false), 100);
}
