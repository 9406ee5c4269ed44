//! Table pages of an in-storage scan evaluated ahead of the modeled scan, on all of the
//! host's cores (issue 12: "scans use all cores"; the modeled device is unchanged).
//!
//! The ISP runtime ([`crate::isp`]) steps a session one page at a time in modeled-time
//! order: each step reads the page through the FTL (flash timing, MAP cache, counters),
//! evaluates the device program on it and charges the work to the FMC logic or the
//! embedded cores. Only the read and the charging are sequential by nature: the
//! evaluation of a page depends on nothing but its stored bytes and the program. So
//! when a session is about to step a page that has not been evaluated yet, the next
//! pages' stored bytes are looked up without a modeled read ([`Ftl::peek_in_place`],
//! nothing counted or charged) and evaluated in parallel, each worker with its own
//! [`Evaluator`] and one partial result per page. The step then takes the page's work
//! counters and rows or group states from here instead of evaluating it, and does
//! everything else exactly as before: the same read, the same seal decisions between
//! pages, the same charges. Because a page's partial result merged into the session's
//! chunk is the chunk the sequential evaluation would have built (rows append in page
//! order; aggregation states are exact and merge in page order, new groups in first-seen
//! order), results, counters and every modeled figure are identical; the property test
//! `crates/device/tests/isp_parallel.rs` checks it against the sequential path.
//!
//! Choices made:
//! * Work is reused only while the device's content epoch ([`Ftl::content_epoch`]) is
//!   the one it was evaluated under: any write, trim, relocation, erase, injected
//!   corruption or power cut in between drops it. A page whose bytes are not one run
//!   in flash (buffered writes, a MAP page not cached), does not parse or fails to
//!   evaluate is left to the sequential step, which then reports what it finds.
//! * Batches grow from 16 pages per thread to 256 as a session keeps stepping, so a
//!   short scan or an early CLOSE wastes little, and a long scan wakes the workers
//!   rarely. The calling thread evaluates one share itself.
//! * Threads: [`scan_threads`], the machine's cores unless [`set_scan_threads`] (or the
//!   `CSD_SCAN_THREADS` environment variable) says otherwise; 1 turns the look-ahead off.

use csd_ftl::Ftl;
use csd_query::{Evaluator, PartialResult, Plan, WorkCounters};
use csd_table::{Layout, PageView, Schema};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Threads set by [`set_scan_threads`] (0: not set).
static SCAN_THREADS: AtomicUsize = AtomicUsize::new(0);

/// Pages per thread in a session's first batch, and at most.
const FIRST_BATCH: usize = 16;
const MAX_BATCH: usize = 256;

/// Host threads an ISP scan evaluates pages on: [`set_scan_threads`]'s value, else the
/// `CSD_SCAN_THREADS` environment variable, else the machine's available parallelism.
/// An emulator setting: it never changes a result or a modeled figure.
pub fn scan_threads() -> usize {
    match SCAN_THREADS.load(Ordering::Relaxed) {
        0 => std::env::var("CSD_SCAN_THREADS")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        n => n,
    }
}

/// Sets the host threads of ISP scans opened from now on (0 restores the default of
/// [`scan_threads`]; 1 evaluates every page on the stepping thread).
pub fn set_scan_threads(n: usize) {
    SCAN_THREADS.store(n, Ordering::Relaxed);
}

/// One page evaluated ahead: its work counters and its rows or group state.
pub(crate) struct Done {
    pub(crate) work: WorkCounters,
    pub(crate) out: PartialResult,
    pub(crate) layout: Layout,
}

/// A session's pages evaluated ahead; see the [module docs](self).
pub(crate) struct Ahead {
    threads: usize,
    /// The content epoch the pages were evaluated under.
    epoch: (u64, u64),
    /// Session order index of `pages[0]`.
    first: u64,
    pages: VecDeque<Option<Done>>,
    /// One evaluator per thread.
    workers: Vec<Evaluator>,
    /// Pages per thread of the next batch.
    batch: usize,
}

impl Ahead {
    /// Look-ahead on `threads` threads (1: none).
    pub(crate) fn new(threads: usize) -> Ahead {
        Ahead {
            threads: threads.max(1),
            epoch: (0, 0),
            first: 0,
            pages: VecDeque::new(),
            workers: Vec::new(),
            batch: FIRST_BATCH,
        }
    }

    /// Whether this session evaluates ahead at all.
    pub(crate) fn enabled(&self) -> bool {
        self.threads > 1
    }

    /// The evaluation of the session's `i`-th page if it was evaluated ahead under
    /// `epoch`; `None` means: evaluate it in the step.
    pub(crate) fn take(&mut self, i: u64, epoch: (u64, u64)) -> Option<Done> {
        if epoch != self.epoch || self.first != i {
            self.pages.clear();
            return None;
        }
        let d = self.pages.pop_front()?;
        self.first += 1;
        d
    }

    /// Whether the `i`-th page's slot is known (evaluated, or known to need the step).
    pub(crate) fn has(&self, i: u64, epoch: (u64, u64)) -> bool {
        epoch == self.epoch && self.first == i && !self.pages.is_empty()
    }

    /// Pages to look up for the next batch.
    pub(crate) fn batch_pages(&self) -> usize {
        self.batch * self.threads
    }

    /// Evaluates `pages` (the stored bytes of the session's pages `i`, `i + 1`, …) in
    /// parallel under `epoch`.
    pub(crate) fn fill(
        &mut self,
        plan: &Plan,
        i: u64,
        epoch: (u64, u64),
        pages: &[&[u8]],
        schema: &Schema,
        empty: &PartialResult,
    ) {
        self.pages.clear();
        self.epoch = epoch;
        self.first = i;
        self.batch = (self.batch * 2).min(MAX_BATCH);
        if pages.is_empty() {
            return;
        }
        let threads = self.threads.min(pages.len());
        while self.workers.len() < threads {
            self.workers.push(Evaluator::new(plan));
        }
        let share = pages.len().div_ceil(threads);
        let mut outs: Vec<Vec<Option<Done>>> = (0..threads).map(|_| Vec::new()).collect();
        let mut parts = pages
            .chunks(share)
            .zip(self.workers.iter_mut())
            .zip(outs.iter_mut());
        let Some(((mine, my_eval), my_out)) = parts.next() else {
            return;
        };
        rayon::in_place_scope(|sc| {
            for ((part, ev), out) in parts {
                sc.spawn(move |_| eval_all(ev, schema, empty, part, out));
            }
            eval_all(my_eval, schema, empty, mine, my_out);
        });
        for out in outs {
            self.pages.extend(out);
        }
    }
}

fn eval_all(
    ev: &mut Evaluator,
    schema: &Schema,
    empty: &PartialResult,
    pages: &[&[u8]],
    out: &mut Vec<Option<Done>>,
) {
    out.reserve(pages.len());
    for b in pages {
        out.push(eval_one(ev, schema, empty, b));
    }
}

/// One page's evaluation into its own partial result (without the session's group
/// bound: one page's groups always fit, and the bound applies when it is merged).
fn eval_one(ev: &mut Evaluator, schema: &Schema, empty: &PartialResult, b: &[u8]) -> Option<Done> {
    // The FTL checks every sector's end-to-end CRC when the step reads the page; a page
    // that fails it never uses this result.
    let view = PageView::parse_unverified(b, schema).ok()?;
    let mut out = empty.clone();
    out.lift_group_limit();
    let work = ev.eval_page(&view, &mut out).ok()?;
    Some(Done {
        work,
        out,
        layout: view.layout(),
    })
}

/// The stored bytes of `n` table pages from the session's `i`-th on, as far as they are
/// in place (see [`Ftl::peek_in_place`]): the batch stops at the first that is not.
pub(crate) fn peek_pages<'a>(
    ftl: &'a Ftl,
    page_bytes: usize,
    n: usize,
    mut lba_of: impl FnMut(u64) -> Option<u64>,
    i: u64,
) -> Vec<&'a [u8]> {
    let mut v = Vec::with_capacity(n);
    for k in 0..n as u64 {
        let Some(b) = lba_of(i + k).and_then(|lba| ftl.peek_in_place(lba, page_bytes)) else {
            break;
        };
        v.push(b);
    }
    v
}
