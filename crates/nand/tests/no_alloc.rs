//! The read path allocates nothing per operation (a counting global allocator checks it).

use csd_nand::{BlockId, Nand, Ppa};
use csd_sim::{DeviceConfig, SimTime};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);

std::thread_local! {
    /// Only allocations of the test's own thread count: the harness's other threads
    /// (output capture, timers) allocate whenever they like.
    static COUNTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

// SAFETY: delegates every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if COUNTED.with(|c| c.get()) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn reads_and_programs_do_not_allocate() {
    let mut cfg = DeviceConfig::preset("tiny").unwrap();
    cfg.faults.rber_fresh = 1e-6; // exercise the bit-error path too
    let mut n = Nand::new_in_memory(cfg.clone()).unwrap();
    let g = cfg.geometry;
    let data = vec![0x5Au8; g.page_size as usize];
    let mut buf = vec![0u8; g.page_size as usize];
    let mut oob = vec![0u8; g.oob_per_page() as usize];
    // Warm up: touch the blocks once (first program allocates the block, by design).
    for b in 0..8 {
        n.program(Ppa::new(BlockId(b), 0), &data, &[], SimTime::ZERO)
            .unwrap();
    }
    COUNTED.with(|c| c.set(true));
    let before = ALLOCS.load(Ordering::Relaxed);
    for i in 0..100_000u32 {
        let b = BlockId(i % 8);
        n.read(
            Ppa::new(b, 0),
            0,
            &mut buf,
            &mut oob,
            SimTime::from_ns(i as u64),
        )
        .unwrap();
        n.read(
            Ppa::new(b, 1),
            0,
            &mut buf,
            &mut [],
            SimTime::from_ns(i as u64),
        )
        .unwrap(); // erased page
    }
    for p in 1..4 {
        for b in 0..8 {
            n.program(Ppa::new(BlockId(b), p), &data, &[], SimTime::ZERO)
                .unwrap();
        }
    }
    let after = ALLOCS.load(Ordering::Relaxed);
    COUNTED.with(|c| c.set(false));
    assert_eq!(after - before, 0, "allocations on the data path");
}
