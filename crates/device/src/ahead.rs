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
//! nothing counted or charged) and evaluated in parallel ([`ParEval`]: one evaluator
//! per thread, one partial result per page). The step then takes the page's work
//! counters and rows or group states from here instead of evaluating it, and does
//! everything else exactly as before: the same read, the same seal decisions between
//! pages, the same charges. Because a page's partial result merged into the session's
//! chunk is the chunk the sequential evaluation would have built (rows append in page
//! order; aggregation states are exact and merge in page order, new groups in first-seen
//! order), results, counters and every modeled figure are identical; the property test
//! `crates/host/tests/scan_parallel.rs` checks it against the sequential path.
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
//! * A page's result is merged into the session's chunk by the stepping thread. With
//!   few groups or rows (TPC-H Q1's four groups, Q6's one, a selective projection) that
//!   is nearly free; with many groups of few rows (a `GROUP BY` on a key: Q17, Q18, Q20)
//!   or most of a page's rows (Q13's orders) it costs about what evaluating the page
//!   did, so the first such page ([`PageResult::merges_like_evaluating`]) turns the
//!   look-ahead off for the rest of its session (measured at SF 1 with two threads:
//!   Q17 3x slower without this rule, Q18 1.25x, Q13 1.3x).
//! * Threads: [`csd_query::scan_threads`] (1 turns the look-ahead off).

use csd_ftl::Ftl;
use csd_query::{PageResult, ParEval, Plan};
use csd_table::Schema;
use std::collections::VecDeque;

/// Pages per thread in a session's first batch, and at most.
const FIRST_BATCH: usize = 16;
const MAX_BATCH: usize = 256;

/// One page evaluated ahead.
pub(crate) type Done = PageResult;

/// A session's pages evaluated ahead; see the [module docs](self).
pub(crate) struct Ahead {
    eval: ParEval,
    /// The content epoch the pages were evaluated under.
    epoch: (u64, u64),
    /// Session order index of `pages[0]`.
    first: u64,
    pages: VecDeque<Option<Done>>,
    /// Pages per thread of the next batch.
    batch: usize,
    /// Off for the rest of the session (see [`PageResult::merges_like_evaluating`]).
    off: bool,
}

impl Ahead {
    /// Look-ahead for `plan` on `threads` threads (1: none).
    pub(crate) fn new(plan: &Plan, threads: usize) -> Ahead {
        Ahead {
            eval: ParEval::new(plan, threads).with_hint(csd_nand::prefetch_lines),
            epoch: (0, 0),
            first: 0,
            pages: VecDeque::new(),
            batch: FIRST_BATCH,
            off: threads <= 1,
        }
    }

    /// Whether this session evaluates ahead at all.
    pub(crate) fn enabled(&self) -> bool {
        !self.off
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
        if d.as_ref().is_some_and(Done::merges_like_evaluating) {
            // The stepping thread would spend on merging what evaluating costs it: the
            // rest of the scan is evaluated in its steps.
            self.off = true;
            self.pages.clear();
        }
        d
    }

    /// Whether the `i`-th page's slot is known (evaluated, or known to need the step).
    pub(crate) fn has(&self, i: u64, epoch: (u64, u64)) -> bool {
        epoch == self.epoch && self.first == i && !self.pages.is_empty()
    }

    /// Pages to look up for the next batch.
    pub(crate) fn batch_pages(&self) -> usize {
        self.batch * self.eval.threads()
    }

    /// Evaluates `pages` (the stored bytes of the session's pages `i`, `i + 1`, …) in
    /// parallel under `epoch`.
    pub(crate) fn fill(&mut self, i: u64, epoch: (u64, u64), pages: &[&[u8]], schema: &Schema) {
        self.epoch = epoch;
        self.first = i;
        self.batch = (self.batch * 2).min(MAX_BATCH);
        self.pages.clear();
        self.pages.extend(self.eval.eval(schema, pages));
    }
}

/// The stored bytes of `n` table pages from the session's `i`-th on, as far as they are
/// in place (see [`Ftl::peek_in_place`]): the batch stops at the first that is not.
pub(crate) fn peek_pages(
    ftl: &Ftl,
    page_bytes: usize,
    n: usize,
    mut lba_of: impl FnMut(u64) -> Option<u64>,
    i: u64,
) -> Vec<&[u8]> {
    let mut v = Vec::with_capacity(n);
    for k in 0..n as u64 {
        let Some(b) = lba_of(i + k).and_then(|lba| ftl.peek_in_place(lba, page_bytes)) else {
            break;
        };
        v.push(b);
    }
    v
}
