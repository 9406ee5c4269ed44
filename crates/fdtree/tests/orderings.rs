//! The directions of the paper's results (§3–§5, Figures 6–8), checked on states, not on
//! timings: a [`MergeGate`] holds a merge at a block boundary, and the test looks at
//! what each concurrency scheme lets through meanwhile.
//!
//! * FD+XM (§3): a merge x-locks the whole tree, so no lookup and no modification
//!   completes while the merge stands still (its worst insertion `R_p` is a merge).
//! * FD+DS (§3): lookups go on through the old levels; modifications fill the slack
//!   L0 had when the merge started, and then wait for the *end* of the merge, however
//!   far it has got ("FD+DS cannot free space in the old top level until after a merge
//!   completes").
//! * FD+FC (§4): lookups go on, on both sides of the wavefront; every stretch of merge
//!   progress frees L0 old entries, so a waiting modification goes on after a few
//!   blocks of the merge, not after all of it.
//!
//! Each assertion fails if the scheme's concurrency control is swapped for another one
//! (a waiting state is only asserted where the scheme guarantees it, so a slow machine
//! cannot make these tests fail; it can only make them slower).

mod common;

use csd_fdtree::{FdConfig, FdTree, MergeGate, Scheme};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Keys preloaded (even keys `2 * perm(i)`, spread over the key space).
const N: u64 = 4000;
/// A prime above `N`: `i -> i * 1237 mod P` permutes `0..P`.
const P: u64 = 4001;
/// Longest a test waits for a state the scheme guarantees to reach.
const PATIENCE: Duration = Duration::from_secs(60);

fn preloaded(scheme: Scheme) -> Arc<FdTree> {
    let cfg = FdConfig {
        durable: false,
        ..FdConfig::small().with_scheme(scheme)
    };
    let t = FdTree::create(common::device(), cfg).expect("create");
    for i in 0..N {
        let k = 2 * ((i * 1237) % P);
        t.insert(k, k + 1).expect("preload");
    }
    t.wait_for_merges().expect("settle");
    Arc::new(t)
}

/// The `i`th new (odd) key of the measured phase, spread over the preloaded range.
fn new_key(i: u64) -> u64 {
    2 * ((i * 7919) % P) + 1
}

/// Poll `cond` until it holds (at most [`PATIENCE`]).
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + PATIENCE;
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A writer thread inserting new keys until `stop`; counts completed insertions.
struct Writer {
    done: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<()>,
}

fn writer(t: &Arc<FdTree>) -> Writer {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let handle = {
        let (t, done, stop) = (t.clone(), done.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) && i < P {
                let k = new_key(i);
                t.insert(k, k + 1).expect("insert");
                i += 1;
                done.store(i, Ordering::SeqCst);
            }
        })
    };
    Writer { done, stop, handle }
}

impl Writer {
    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.join().expect("writer");
        self.done.load(Ordering::SeqCst)
    }
}

/// Run `f` on another thread; its result if it finishes within `within`.
fn completes<T: Send + 'static>(
    within: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(within).ok()
}

/// The writer waits for room in L0 and nothing will make room until the merge moves:
/// L0 (with L0 old) is over its budget and the merge stands at the gate.
fn writer_stuck(t: &FdTree, gate: &MergeGate) -> bool {
    let s = t.stats();
    s.waiting_modifications == 1 && s.l0_charge > s.l0_capacity && gate.wait_stopped(Duration::ZERO)
}

#[test]
fn xm_merge_blocks_every_lookup_and_insertion_until_it_ends() {
    let t = preloaded(Scheme::Xm);
    let gate = Arc::new(MergeGate::closed());
    t.set_merge_gate(Some(gate.clone()));
    let w = writer(&t);
    // The writer's insertion that fills L0 runs the merge itself, x-locked, and stands
    // at the gate.
    assert!(gate.wait_stopped(PATIENCE), "no merge started");
    let looked = Arc::new(AtomicBool::new(false));
    let inserted = Arc::new(AtomicBool::new(false));
    let l = {
        let (t, looked) = (t.clone(), looked.clone());
        std::thread::spawn(move || {
            let v = t.lookup(0).expect("lookup");
            looked.store(true, Ordering::SeqCst);
            v
        })
    };
    let i = {
        let (t, inserted) = (t.clone(), inserted.clone());
        std::thread::spawn(move || {
            t.insert(u64::MAX - 1, 7).expect("insert");
            inserted.store(true, Ordering::SeqCst);
        })
    };
    // Give them every chance; XM guarantees they cannot get past the x-lock. Nor do
    // they while the merge moves on block by block.
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..3 {
        gate.allow(1);
        assert!(gate.wait_stopped(PATIENCE));
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !looked.load(Ordering::SeqCst),
            "a lookup completed during an FD+XM merge"
        );
        assert!(
            !inserted.load(Ordering::SeqCst),
            "an insertion completed during an FD+XM merge"
        );
    }
    let before = w.done.load(Ordering::SeqCst);
    assert!(t.stats().merging, "the merge is still running");
    gate.open();
    assert_eq!(l.join().expect("lookup thread"), Some(1));
    i.join().expect("insert thread");
    let n = w.finish();
    assert!(n > before);
    t.set_merge_gate(None);
    assert_eq!(t.lookup(u64::MAX - 1).expect("lookup"), Some(7));
    t.check_invariants().expect("invariants");
}

/// FD+DS and FD+FC: with the merge held half-way, lookups of every key answer at once
/// and correctly (FC: on both sides of the wavefront).
fn lookups_go_on_during_a_merge(scheme: Scheme) {
    let t = preloaded(scheme);
    let gate = Arc::new(MergeGate::closed());
    t.set_merge_gate(Some(gate.clone()));
    let w = writer(&t);
    assert!(gate.wait_stopped(PATIENCE), "no merge started");
    gate.allow(3);
    assert!(gate.wait_stopped(PATIENCE));
    assert!(t.stats().merging);
    let inserted = w.done.load(Ordering::SeqCst);
    let tt = t.clone();
    let answers = completes(PATIENCE, move || {
        let mut bad = Vec::new();
        for i in 0..N {
            let k = 2 * ((i * 1237) % P);
            if tt.lookup(k).expect("lookup") != Some(k + 1) {
                bad.push(k);
            }
        }
        for i in 0..inserted {
            let k = new_key(i);
            if tt.lookup(k).expect("lookup") != Some(k + 1) {
                bad.push(k);
            }
        }
        (bad, tt.stats().merging)
    });
    let (bad, still_merging) = answers
        .unwrap_or_else(|| panic!("{scheme:?}: lookups did not complete during a held merge"));
    assert!(bad.is_empty(), "{scheme:?}: wrong answers for {bad:?}");
    assert!(still_merging, "the lookups ran during the merge");
    gate.open();
    w.finish();
    t.set_merge_gate(None);
    t.check_invariants().expect("invariants");
}

#[test]
fn ds_lookups_go_on_during_a_merge() {
    lookups_go_on_during_a_merge(Scheme::Ds);
}

#[test]
fn fc_lookups_go_on_during_a_merge_on_both_sides_of_the_wavefront() {
    lookups_go_on_during_a_merge(Scheme::Fc);
}

/// Insertions completed by a writer that is stuck (waiting, L0 over budget, merge at
/// the gate), after the merge has passed `blocks` more blocks.
fn stuck_count(t: &FdTree, gate: &MergeGate, w: &Writer, blocks: u64) -> u64 {
    gate.allow(blocks);
    eventually("the writer waits for the held merge", || {
        writer_stuck(t, gate)
    });
    w.done.load(Ordering::SeqCst)
}

/// Insertions a writer completes during one merge held at block boundaries: when it is
/// first stuck, then after each of `steps` stretches of `blocks` merged blocks. Merges
/// too small for that many stretches end meanwhile; the counts then start over with
/// the next merge (the tree grows a level class every few merges).
fn progress_during_merge(scheme: Scheme, steps: usize, blocks: u64) -> Vec<u64> {
    let t = preloaded(scheme);
    let gate = Arc::new(MergeGate::closed());
    t.set_merge_gate(Some(gate.clone()));
    let w = writer(&t);
    let mut counts: Vec<u64> = Vec::new();
    let mut merge = None;
    for _ in 0..200 {
        let c = stuck_count(&t, &gate, &w, if counts.is_empty() { 0 } else { blocks });
        // Merges completed so far name the merge standing at the gate.
        let m = t.stats().merges;
        if merge == Some(m) {
            counts.push(c);
        } else {
            merge = Some(m);
            counts = vec![c];
        }
        if counts.len() > steps {
            break;
        }
    }
    assert!(
        counts.len() > steps,
        "no merge had {steps} x {blocks} blocks"
    );
    assert!(t.stats().merging, "the merge is still running");
    gate.open();
    // When the merge ends, the writer goes on (both schemes).
    let last = *counts.last().unwrap_or(&0);
    eventually("the writer goes on after the merge", || {
        w.done.load(Ordering::SeqCst) > last
    });
    w.finish();
    t.set_merge_gate(None);
    t.check_invariants().expect("invariants");
    counts
}

#[test]
fn ds_modifications_wait_for_the_end_of_the_merge() {
    let c = progress_during_merge(Scheme::Ds, 3, 2);
    eprintln!("FD+DS insertions done when stuck, per 2 merged blocks: {c:?}");
    // The slack L0 had when the merge started, and not one insertion more while the
    // merge moves on.
    assert!(c[0] > 0, "DS takes modifications into the slack: {c:?}");
    assert!(
        c.windows(2).all(|w| w[0] == w[1]),
        "FD+DS made room in L0 before its merge ended: {c:?}"
    );
}

#[test]
fn fc_modifications_go_on_as_the_wavefront_moves() {
    let c = progress_during_merge(Scheme::Fc, 3, 2);
    eprintln!("FD+FC insertions done when stuck, per 2 merged blocks: {c:?}");
    // The merge's progress frees L0 old entries that the waiting writer takes (memory
    // sharing, §4.2), long before the merge ends. (A single block may free none: the
    // wavefront moves when a merged level needs its next block.)
    assert!(
        c.windows(2).all(|w| w[1] >= w[0]) && c[c.len() - 1] > c[0],
        "FD+FC's waiting modification did not go on as the merge moved: {c:?}"
    );
}
