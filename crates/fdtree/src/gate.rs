//! A merge gate: lets a caller hold a merge of any scheme before its next output block
//! and release it block by block, so that what each concurrency scheme of §3–§4 lets
//! through *during* a merge can be observed in a deterministic state (tests of the
//! paper's orderings, demonstrations), independent of timing.
//!
//! The merge passes the gate each time it completes a block of the data level it writes
//! (merge-execute's output, `L_m new`) and starts the next one, so a merge held at the
//! gate is always inside merge-execute's main loop, never at its end. With
//! FD+XM the gate is passed while the merging modification holds the tree's x-lock;
//! with FD+DS and FD+FC in the background merge thread, which then holds no tree lock
//! (so lookups and modifications proceed as far as the scheme allows). A gate that is
//! never installed costs one uncontended mutex per output block.

use crate::sync::{GateCondvar as Condvar, GateMutex as Mutex, GateMutexGuard as MutexGuard};
use std::time::{Duration, Instant};

/// Take the gate's latch, recovering from poisoning.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[derive(Debug)]
struct GateState {
    /// Blocks the merge may still pass; `None`: open.
    permits: Option<u64>,
    /// Blocks passed since the gate was made.
    passed: u64,
    /// A merge is waiting at the gate.
    waiting: bool,
}

/// A gate that a merge passes before each block it writes (see the module docs).
#[derive(Debug)]
pub struct MergeGate {
    state: Mutex<GateState>,
    cv: Condvar,
}

impl MergeGate {
    /// A closed gate: merges stop before their first output block.
    pub fn closed() -> MergeGate {
        MergeGate {
            state: Mutex::new(GateState {
                permits: Some(0),
                passed: 0,
                waiting: false,
            }),
            cv: Condvar::new(),
        }
    }

    /// Let `n` more blocks through, then stop again (on a closed gate).
    pub fn allow(&self, n: u64) {
        let mut s = lock(&self.state);
        if let Some(p) = s.permits.as_mut() {
            *p += n;
        }
        drop(s);
        self.cv.notify_all();
    }

    /// Open the gate for good: merges run freely.
    pub fn open(&self) {
        lock(&self.state).permits = None;
        self.cv.notify_all();
    }

    /// Blocks passed so far.
    pub fn passed(&self) -> u64 {
        lock(&self.state).passed
    }

    /// Wait until a merge stands at the gate with no permit left, at most `timeout`;
    /// returns whether it does (`false` also when the gate is open).
    pub fn wait_stopped(&self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        let mut s = lock(&self.state);
        loop {
            if s.waiting && s.permits == Some(0) {
                return true;
            }
            if s.permits.is_none() {
                return false;
            }
            let now = Instant::now();
            if now >= end {
                return false;
            }
            s = match self.cv.wait_timeout(s, end - now) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }

    /// Called by a merge before each output block: waits for a permit.
    pub(crate) fn pass(&self) {
        let mut s = lock(&self.state);
        loop {
            match s.permits {
                None => break,
                Some(p) if p > 0 => {
                    s.permits = Some(p - 1);
                    break;
                }
                Some(_) => {
                    if !s.waiting {
                        s.waiting = true;
                        self.cv.notify_all();
                    }
                    s = self.cv.wait(s).unwrap_or_else(|p| p.into_inner());
                }
            }
        }
        s.waiting = false;
        s.passed += 1;
    }
}

#[cfg(all(test, not(feature = "shuttle")))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn gate_counts_permits_and_reports_a_stopped_merge() {
        let g = Arc::new(MergeGate::closed());
        assert!(!g.wait_stopped(Duration::from_millis(1)));
        g.allow(2);
        let m = {
            let g = g.clone();
            std::thread::spawn(move || {
                for _ in 0..5 {
                    g.pass();
                }
            })
        };
        assert!(g.wait_stopped(Duration::from_secs(30)));
        assert_eq!(g.passed(), 2);
        g.allow(1);
        // The merge passes one more and stops again.
        while g.passed() < 3 {
            std::thread::yield_now();
        }
        assert!(g.wait_stopped(Duration::from_secs(30)));
        assert_eq!(g.passed(), 3);
        g.open();
        m.join().expect("merge thread");
        assert_eq!(g.passed(), 5);
        assert!(!g.wait_stopped(Duration::from_millis(1)));
    }
}
