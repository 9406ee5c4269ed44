//! Concurrent readers and writers on one tree, for each scheme. Writers own disjoint
//! key sets (key % WRITERS == writer), so the final state is known; every value a
//! writer stores encodes (key, version), and a reader checks that what it sees was
//! current at some instant during its call: the version is between the writer's last
//! acknowledged version before the call and the version it was working on after it.
mod common;

use csd_fdtree::{FdConfig, FdTree, Scheme};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const WRITERS: u64 = 2;
const READERS: usize = 3;
const KEYS: u64 = 2_500;
const ROUNDS: u64 = 3;

/// Value stored for `key` at `version` (version 0 = deleted).
fn value(key: u64, version: u64) -> u64 {
    key << 20 | version
}

fn run(scheme: Scheme, paced: bool, durable: bool) -> csd_fdtree::FdStats {
    let dev = if paced {
        common::paced_device(0.2)
    } else {
        common::device()
    };
    run_on(dev, scheme, paced, durable)
}

fn run_on(
    dev: csd_host::SharedDevice,
    scheme: Scheme,
    paced: bool,
    durable: bool,
) -> csd_fdtree::FdStats {
    let mut cfg = FdConfig::small().with_scheme(scheme);
    cfg.durable = durable;
    let t = Arc::new(FdTree::create(dev, cfg).unwrap());
    // Per key: the latest acknowledged version (0 = absent) and the version in flight.
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
    let started: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
    let done = Arc::new(AtomicBool::new(false));
    let mut finals: Vec<BTreeMap<u64, u64>> = Vec::new();
    std::thread::scope(|s| {
        let mut writers = Vec::new();
        for w in 0..WRITERS {
            let (t, acked, started) = (t.clone(), acked.clone(), started.clone());
            writers.push(s.spawn(move || {
                let mut mine = BTreeMap::new();
                let mut version = 0u64;
                for round in 0..ROUNDS {
                    for key in (w..KEYS).step_by(WRITERS as usize) {
                        version += 1;
                        let del = (key + round) % 5 == 0;
                        // Versions grow; a delete is version `version` with value absent.
                        started[key as usize].store(version, Ordering::SeqCst);
                        if del {
                            t.delete(key).unwrap();
                            mine.remove(&key);
                            acked[key as usize].store(version | 1 << 40, Ordering::SeqCst);
                        } else {
                            t.insert(key, value(key, version)).unwrap();
                            mine.insert(key, value(key, version));
                            acked[key as usize].store(version, Ordering::SeqCst);
                        }
                    }
                }
                mine
            }));
        }
        for r in 0..READERS {
            let (t, acked, started, done) =
                (t.clone(), acked.clone(), started.clone(), done.clone());
            s.spawn(move || {
                let mut i = r as u64;
                let mut checks = 0u64;
                while !done.load(Ordering::SeqCst) || checks < 200 {
                    i = i
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let key = (i >> 20) % KEYS;
                    let lo = acked[key as usize].load(Ordering::SeqCst);
                    let got = t.lookup(key).unwrap();
                    let hi = started[key as usize].load(Ordering::SeqCst);
                    let lo_v = lo & ((1 << 40) - 1);
                    match got {
                        Some(v) => {
                            assert_eq!(
                                v >> 20,
                                key,
                                "{scheme:?}: phantom value {v:#x} for key {key}"
                            );
                            let ver = v & ((1 << 20) - 1);
                            assert!(
                                ver >= lo_v && ver <= hi,
                                "{scheme:?}: key {key} version {ver} outside [{lo_v}, {hi}]"
                            );
                            // A version that was overwritten by a delete before the call
                            // must not come back.
                            assert!(
                                !(lo >> 40 == 1 && ver == lo_v),
                                "{scheme:?}: key {key} deleted at {lo_v} but read"
                            );
                        }
                        None => {
                            // Absent is fine if the key was never written, or a delete
                            // was acknowledged or in flight.
                            let deleted_lo = lo == 0 || lo >> 40 == 1;
                            assert!(
                                deleted_lo || hi > lo_v,
                                "{scheme:?}: key {key} (acked v{lo_v}) lost"
                            );
                        }
                    }
                    if checks.is_multiple_of(50) {
                        let a = key.saturating_sub(20);
                        for (k, v) in t.range(a, key + 20).unwrap() {
                            assert_eq!(v >> 20, k, "{scheme:?}: range returned a phantom");
                        }
                    }
                    checks += 1;
                }
            });
        }
        for w in writers {
            finals.push(w.join().unwrap());
        }
        done.store(true, Ordering::SeqCst);
    });
    t.check_invariants().unwrap();
    let want: BTreeMap<u64, u64> = finals.into_iter().flatten().collect();
    let got: BTreeMap<u64, u64> = t.range(0, u64::MAX).unwrap().into_iter().collect();
    assert_eq!(got, want, "{scheme:?}: final state");
    let st = t.stats();
    eprintln!("{scheme:?} paced {paced} durable {durable}: {st:?}");
    assert!(st.merges >= 5, "{st:?}");
    if scheme != Scheme::Xm {
        assert!(st.reads_during_merge > 0, "{st:?}");
    }
    if scheme == Scheme::Fc && !durable {
        assert!(st.early_reclaimed > 0, "{st:?}");
    }
    st
}

#[test]
fn concurrent_readers_and_writers_xm() {
    run(Scheme::Xm, false, true);
}

#[test]
fn concurrent_readers_and_writers_ds() {
    run(Scheme::Ds, false, true);
}

#[test]
fn concurrent_readers_and_writers_fc() {
    run(Scheme::Fc, false, true);
}

/// Paced device (real device latency): merges take milliseconds, so lookups and
/// modifications really run beside them, on both sides of the wavefront.
#[test]
fn paced_concurrency_ds_and_fc() {
    for scheme in [Scheme::Ds, Scheme::Fc] {
        let st = run(scheme, true, true);
        assert!(st.reads_during_merge > 100, "{scheme:?} {st:?}");
    }
    // Without the log, FD+FC reuses reclaimed blocks during the merge.
    run(Scheme::Fc, true, false);
}

/// The same workload on the event core: paced, every thread's commands are booked in
/// modeled-arrival order (no late arrival, no decision on an unfixed instant, a
/// first-come first-served trace); virtual, the data is the same and the late arrivals
/// of threads whose clocks are behind are counted.
#[test]
fn concurrency_on_the_event_core() {
    let dev = common::device_on_the_event_core(Some(0.2));
    dev.record_trace();
    let st = run_on(dev.clone(), Scheme::Fc, true, true);
    assert!(st.reads_during_merge > 100, "{st:?}");
    let k = dev.event_counters().expect("on the core");
    assert!(k.booked > 1000, "{}", k.sentence());
    assert_eq!(k.anomalies(), [0; 4], "{}", k.sentence());
    csd_sim::events::first_come_first_served(&dev.trace()).expect("arrival order");

    let dev = common::device_on_the_event_core(None);
    run_on(dev.clone(), Scheme::Xm, false, true);
    let k = dev.event_counters().expect("on the core");
    assert_eq!(
        (k.unrecorded, k.stale, k.unfixed_comparisons),
        (0, 0, 0),
        "{}",
        k.sentence()
    );
    eprintln!("virtual FD+XM on the event core: {}", k.sentence());
}
