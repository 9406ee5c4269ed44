//! Memory made ready ahead of the programs that will need it: a pool of erase-block
//! mappings whose pages a background thread has already faulted in, for a device in
//! memory that keeps writing into blocks it never used (an emulator-only concern; no
//! modeled figure depends on it).
//!
//! Why: the emulated SSD is log-structured, so every write lands in flash that was never
//! programmed before until the FTL's garbage collector starts reusing blocks, and on the
//! default device (about 100 GB raw) a workload of a few GiB never gets there. In memory,
//! each such block is a fresh anonymous mapping whose pages the kernel zeroes at their
//! first touch; under `fio` random writes to `csd serve --memory` that zeroing was 44% of
//! the server thread's CPU (perf, 2026-12-03: `clear_page_erms` under
//! `do_anonymous_page`), and the server's write rate fell as its memory grew. The same
//! work done by another thread, ahead of need, leaves the request path only the copy of
//! the data: FEMU and NVMeVirt allocate their whole backing memory when they start;
//! csd's devices are larger than memory, so it keeps a bounded pool ready instead.
//!
//! Choices: the pool is an opt-in of the caller ([`crate::Nand::keep_memory_ready`]),
//! since most in-memory devices (tests, loads, short `csd io` runs) would only pay a
//! thread for it; its blocks are handed out in any order (a fresh block's contents are
//! all zero, whichever mapping backs it); the pool plus the device's own blocks stay
//! within the device's memory limit (at most one block over while the device takes a
//! fresh block of its own as the filler makes one), so the limit keeps its meaning; and
//! the filler thread ends when the store is dropped.

use crate::store::AnonBlock;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// What the device and the filler share.
struct Shared {
    state: Mutex<State>,
    /// Signalled when a block is taken, the limit or the device's memory changes, or the
    /// pool is stopped.
    wake: Condvar,
    /// Bytes of one block's mapping (its length before rounding to 4 KiB pages).
    block_len: usize,
    /// Blocks to keep ready.
    wanted: usize,
}

struct State {
    ready: Vec<AnonBlock>,
    /// Blocks being made ready now (0 or 1).
    making: usize,
    /// The device's own block memory (its `held`), mirrored for the limit.
    held: usize,
    /// The device's memory limit (`None`: none).
    limit: Option<usize>,
    /// The device's blocks that never had memory: the pool never makes more than these.
    fresh: usize,
    /// The filler failed to map memory: stop making blocks.
    failed: bool,
    /// The filler's thread id, once it runs (for tests of its scheduling policy).
    filler_tid: Option<libc::pid_t>,
    stop: bool,
    /// Blocks handed to the device from the pool, and blocks the device had to map
    /// itself because the pool was empty.
    taken: u64,
    missed: u64,
}

impl State {
    /// Whether the filler may make one more block of `size` bytes.
    fn may_make(&self, wanted: usize, size: usize) -> bool {
        let pooled = (self.ready.len() + self.making) * size;
        let have = self.ready.len() + self.making;
        !self.failed
            && have < wanted
            && have < self.fresh
            && self
                .limit
                .is_none_or(|l| self.held.saturating_add(pooled).saturating_add(size) <= l)
    }
}

/// Counters of a [`Ready`] pool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadyStats {
    /// Fresh blocks the device took from the pool.
    pub taken: u64,
    /// Fresh blocks the device mapped itself because the pool was empty.
    pub missed: u64,
    /// Blocks ready now.
    pub ready: u64,
}

/// A pool of erase-block mappings made ready by a background thread.
pub(crate) struct Ready {
    shared: Arc<Shared>,
    filler: Option<JoinHandle<()>>,
}

impl Ready {
    /// Start a pool that keeps `bytes` of blocks of `block_len` bytes ready (at least one
    /// block, at most the device's `fresh` blocks that never had memory), within `limit`
    /// together with the device's `held` bytes. `None` when the
    /// thread cannot be started (the device then maps its blocks itself, as without a
    /// pool).
    pub fn start(
        block_len: usize,
        bytes: usize,
        fresh: usize,
        held: usize,
        limit: Option<usize>,
    ) -> Option<Ready> {
        let size = block_len.next_multiple_of(4096);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                ready: Vec::new(),
                making: 0,
                held,
                limit,
                fresh,
                failed: false,
                filler_tid: None,
                stop: false,
                taken: 0,
                missed: 0,
            }),
            wake: Condvar::new(),
            block_len,
            wanted: bytes.div_ceil(size).max(1),
        });
        let s = Arc::clone(&shared);
        let filler = std::thread::Builder::new()
            .name("csd-mem-ready".into())
            .spawn(move || fill(&s))
            .ok()?;
        Some(Ready {
            shared,
            filler: Some(filler),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.shared)
    }

    /// A ready block for the device, whose own memory becomes `held` once it has it;
    /// `None` when the pool is empty (the device maps one itself: counted as missed).
    pub fn take(&self, held: usize) -> Option<AnonBlock> {
        let mut st = self.lock();
        st.held = held;
        st.fresh = st.fresh.saturating_sub(1);
        let b = st.ready.pop();
        match b {
            Some(_) => st.taken += 1,
            None => st.missed += 1,
        }
        drop(st);
        self.shared.wake.notify_one();
        b
    }

    /// The device's memory limit changed.
    pub fn set_limit(&self, limit: Option<usize>) {
        let mut st = self.lock();
        st.limit = limit;
        // Blocks over a lowered limit go back to the kernel now.
        let size = self.shared.block_len.next_multiple_of(4096);
        while let Some(l) = st.limit {
            if st.ready.is_empty() || st.held + st.ready.len() * size <= l {
                break;
            }
            st.ready.pop();
        }
        drop(st);
        self.shared.wake.notify_one();
    }

    /// The pool's counters.
    pub fn stats(&self) -> ReadyStats {
        let st = self.lock();
        ReadyStats {
            taken: st.taken,
            missed: st.missed,
            ready: st.ready.len() as u64,
        }
    }

    /// Wait until the pool is as full as its size and the limit allow (or the filler
    /// gave up). For tests and benchmarks that want a known starting point.
    pub fn wait_full(&self) {
        let size = self.shared.block_len.next_multiple_of(4096);
        let mut st = self.lock();
        while !st.stop && (st.making > 0 || st.may_make(self.shared.wanted, size)) {
            st = self
                .shared
                .wake
                .wait(st)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

fn lock(s: &Shared) -> MutexGuard<'_, State> {
    // A poisoned lock means the filler panicked while holding it; the state is a pool
    // of whole mappings and counters, still consistent, so carry on.
    s.state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Run the calling thread only when a CPU would otherwise be idle (`SCHED_IDLE`), so
/// that refilling the pool takes only CPU time that neither the device's own work nor
/// its clients want. Measured on two cores (fio, 5-s random reads of `csd serve
/// --memory` just after a 2 GiB burst of writes, while the pool refills): one series
/// gave 125-132K IOPS with a filler at normal priority against 182-192K without a pool;
/// a later series of three alternations gave 85-172K for a normal-priority filler, an
/// idle one and none alike, so this machine's noise exceeds the effect and the policy is
/// kept on principle. A system that refuses it leaves the thread as it is.
fn idle_priority() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `sched_setscheduler` with pid 0 changes the calling thread only; `param` is
    // a valid, initialized `sched_param` that outlives the call.
    unsafe {
        libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
    }
}

/// The filler: make blocks ready while the pool is short of its size and the limit
/// allows, else wait.
fn fill(s: &Shared) {
    idle_priority();
    // SAFETY: `gettid` has no preconditions.
    lock(s).filler_tid = Some(unsafe { libc::gettid() });
    let size = s.block_len.next_multiple_of(4096);
    loop {
        let mut st = lock(s);
        while !st.stop && !st.may_make(s.wanted, size) {
            st = s
                .wake
                .wait(st)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        if st.stop {
            return;
        }
        st.making += 1;
        drop(st);
        let block = AnonBlock::new(s.block_len).map(|mut b| {
            b.populate();
            b
        });
        let mut st = lock(s);
        st.making -= 1;
        match block {
            // The limit may have gone down while the block was made (`set_limit` sees
            // only the blocks already in the pool): over it, the block goes back.
            Some(b)
                if st
                    .limit
                    .is_none_or(|l| st.held + (st.ready.len() + 1) * size <= l) =>
            {
                st.ready.push(b)
            }
            Some(_) => {}
            None => st.failed = true,
        }
        drop(st);
        // `wait_full` may be waiting for this block.
        s.wake.notify_all();
    }
}

impl Drop for Ready {
    fn drop(&mut self) {
        self.lock().stop = true;
        self.shared.wake.notify_all();
        if let Some(f) = self.filler.take() {
            // The filler only maps and touches memory; a panic there has nothing to
            // report to the device being dropped.
            let _ = f.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_fills_to_its_size_and_hands_out_zeroed_blocks() {
        let r = Ready::start(3 * 4096 + 100, 4 * 4 * 4096, 100, 0, None).expect("thread");
        r.wait_full();
        assert_eq!(r.stats().ready, 4);
        let b = r.take(4 * 4096).expect("a ready block");
        assert_eq!(b.as_slice().len(), 3 * 4096 + 100);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        r.wait_full();
        let s = r.stats();
        assert_eq!((s.taken, s.missed, s.ready), (1, 0, 4));
    }

    #[test]
    fn the_pool_and_the_device_stay_within_the_limit() {
        let size = 4 * 4096;
        // Room for 3 blocks in all, the device holding one: 2 ready, not the 5 asked.
        let r = Ready::start(size, 5 * size, 100, size, Some(3 * size)).expect("thread");
        r.wait_full();
        assert_eq!(r.stats().ready, 2);
        // The device takes one (now holding two): one left, none made.
        assert!(r.take(2 * size).is_some());
        r.wait_full();
        assert_eq!(r.stats().ready, 1);
        // A lower limit gives the excess back at once.
        r.set_limit(Some(2 * size));
        assert_eq!(r.stats().ready, 0);
        assert!(r.take(3 * size).is_none());
        assert_eq!(r.stats().missed, 1);
        // No limit: it fills to its size again.
        r.set_limit(None);
        r.wait_full();
        assert_eq!(r.stats().ready, 5);
    }

    #[test]
    fn the_pool_never_makes_more_blocks_than_the_device_has_left() {
        // A device with 3 blocks that never had memory, a pool asked for 10.
        let r = Ready::start(4096, 10 * 4096, 3, 0, None).expect("thread");
        r.wait_full();
        assert_eq!(r.stats().ready, 3);
        assert!(r.take(4096).is_some());
        r.wait_full();
        assert_eq!(r.stats().ready, 2);
    }

    #[test]
    fn takes_limit_changes_and_the_filler_interleave_within_the_limit() {
        // The device takes blocks as fast as it can while the filler makes them and the
        // limit moves; at every step the pool and the device stay within the limit (the
        // pool checks it before each block it makes) and every block handed out is zero.
        let size = 2 * 4096;
        let r = Ready::start(size, 8 * size, 10_000, 0, None).expect("thread");
        let mut held = 0;
        for i in 0..400usize {
            if i % 7 == 0 {
                let limit = (i % 3 != 0).then_some(held + (i % 11) * size);
                r.set_limit(limit);
                let st = r.lock();
                if let Some(l) = limit {
                    assert!(
                        st.held + st.ready.len() * size <= l.max(st.held),
                        "step {i}"
                    );
                }
            }
            let limit = r.lock().limit;
            if limit.is_none_or(|l| held + size <= l) {
                held += size;
                if let Some(b) = r.take(held) {
                    assert!(b.as_slice().iter().all(|&x| x == 0), "step {i}");
                }
            }
            let st = r.lock();
            if let Some(l) = st.limit {
                let pooled = (st.ready.len() + st.making) * size;
                assert!(
                    st.held + pooled <= l + size,
                    "step {i}: {} + {pooled} > {l}",
                    st.held
                );
            }
        }
        let s = r.stats();
        assert_eq!(s.taken + s.missed, held as u64 / size as u64);
    }

    #[test]
    fn the_filler_runs_only_on_idle_cpu_time() {
        let r = Ready::start(4096, 4 * 4096, 100, 0, None).expect("thread");
        r.wait_full();
        let tid = r.lock().filler_tid.expect("the filler ran");
        // SAFETY: a query of a thread's policy; no memory is passed.
        let policy = unsafe { libc::sched_getscheduler(tid) };
        assert_eq!(policy, libc::SCHED_IDLE);
    }

    #[test]
    fn dropping_the_pool_stops_its_thread() {
        let r = Ready::start(4096, 64 * 4096, 100, 0, None).expect("thread");
        drop(r); // joins the filler, full or not
    }
}
