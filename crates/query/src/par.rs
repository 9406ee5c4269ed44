//! Pages evaluated on several host threads, each page into its own partial result
//! (issue 12: "scans use all cores"). Used by the device's ISP look-ahead
//! (`csd_device`'s `ahead` module) and by in-host processing (`csd_host::scan`).
//!
//! A page's evaluation depends on nothing but its bytes and the program, and partial
//! results merge exactly (rows append in page order; aggregation states are exact folds
//! whose new groups enter in first-seen order, see [`crate::agg`]). So a caller that
//! merges the pages' results in page order, and charges their work counters in page
//! order, gets exactly what evaluating the pages one by one into one result gives:
//! the same rows, states, counters and modeled figures.
//!
//! Choices made:
//! * Evaluators (and their scratch buffers) are kept between batches in a pool, one
//!   taken per piece.
//! * A batch is cut into four pieces per thread, which the threads take in turn (an
//!   atomic counter): the calling thread works too, and on a machine whose cores are
//!   busy with other work it simply takes more pieces instead of waiting for a pool
//!   thread the OS has not scheduled.
//! * Two ways to run a batch: [`ParEval::eval`] returns when every page is evaluated
//!   (the caller works meanwhile); [`ParEval::submit`] returns at once, so a caller with
//!   sequential work of its own (a device stepping its modeled reads) overlaps it with
//!   the evaluation of the next pages, and evaluates pieces itself only when it gets to
//!   one no thread has started. Such a batch reads its pages through [`SharedPages`],
//!   which tells a reader when the bytes changed since they were handed over.
//! * The state of an aggregation without `GROUP BY` travels inline ([`PageOut::Scalar`],
//!   a [`ScalarState`]): each evaluator folds its pages into one reusable state and hands
//!   over a copy, where a cloned state was allocated on one thread and freed on another
//!   (about 15% of TPC-H Q6's CPU).
//! * The groups of an aggregation with `GROUP BY` whose keys and accumulators allow it
//!   travel in one buffer ([`PageOut::Groups`], a [`PageGroups`]), the evaluator folding
//!   each page into a state of its own, cleared per page: a page's whole state crossed
//!   between cores twice (evaluated on one, merged from and cleared on the other), and
//!   TPC-H Q15's merging thread, its critical one, spent 27% of its samples on merging
//!   and giving back page states (12% with their groups; see [`PageGroups`]).
//! * Cache hints: with the caller's hint (`prefetcht2` from the device and host scans)
//!   one page ahead, and a first-level hint when a page's evaluation starts; of the
//!   minipages the program would wait on, measured per column on the pages evaluated so
//!   far ([`MinipageHints::dense_columns`]).
//! * A page that does not parse or fails to evaluate gets `None`: the caller evaluates
//!   it on its own thread and reports the error with its own context.
//! * Threads: [`scan_threads`], the machine's cores unless [`set_scan_threads`] or the
//!   `CSD_SCAN_THREADS` environment variable say otherwise. An emulator setting: it
//!   never changes a result or a modeled figure. The pool behind them is rayon's global
//!   one, which a process sizes with [`size_scan_pool`] at one thread fewer (the caller
//!   is the other one).

use crate::agg::{PageGroups, ScalarState};
use crate::error::EvalError;
use crate::eval::{Evaluator, WorkCounters};
use crate::plan::Plan;
use crate::result::PartialResult;
use csd_table::{Layout, PageView, Schema};
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// Threads set by [`set_scan_threads`] (0: not set).
static SCAN_THREADS: AtomicUsize = AtomicUsize::new(0);

/// Host threads a scan evaluates pages on: [`set_scan_threads`]'s value, else the
/// `CSD_SCAN_THREADS` environment variable, else the machine's available parallelism.
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

/// Sets the host threads of scans started from now on (0 restores the default of
/// [`scan_threads`]; 1 evaluates every page on the scanning thread).
pub fn set_scan_threads(n: usize) {
    SCAN_THREADS.store(n, Ordering::Relaxed);
}

/// Sizes rayon's global pool, where scans' pages are evaluated, at [`scan_threads`]
/// minus one threads (at least one), unless the `RAYON_NUM_THREADS` environment variable
/// sizes it: the thread that runs a scan evaluates pieces too (see the module's
/// choices), so a pool of as many threads as cores puts one more busy thread on the
/// machine than it has cores (rayon's idle threads also spin in `sched_yield` before
/// they sleep: 80% of an in-host one-shot's context switches on 2 cores). Measured on
/// 2 cores: TPC-H at SF 1 2-7% faster with the smaller pool (README, "The scan pool has
/// one thread fewer than the cores").
/// A process calls it once, before its first scan; later calls, or one after the pool
/// started, change nothing. Returns the pool's threads.
pub fn size_scan_pool() -> usize {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        let n = scan_threads().saturating_sub(1).max(1);
        // An error means the global pool exists already: it keeps its size.
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global();
    }
    rayon::current_num_threads()
}

/// One page's evaluation: its work counters, its rows or group state, and its layout.
#[derive(Debug)]
pub struct PageResult {
    /// The page's work counters.
    pub work: WorkCounters,
    /// The page's rows or aggregation state (without a group bound).
    pub out: PageOut,
    /// The page's layout.
    pub layout: Layout,
}

/// A page's rows or aggregation state, as evaluated on another thread.
// The scalar variant is inline on purpose: boxing it would bring back the per-page
// allocation it exists to avoid; a page result is moved twice on its way.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum PageOut {
    /// Rows, or the groups of an aggregation.
    Partial(PartialResult),
    /// The one group of an aggregation without `GROUP BY`, inline (no allocation: see
    /// [`ScalarState`]).
    Scalar(ScalarState),
    /// The groups of an aggregation with `GROUP BY`, in one buffer (see [`PageGroups`]).
    Groups(PageGroups),
}

impl PageOut {
    /// Rows (projection) or groups (aggregation) held.
    pub fn len(&self) -> usize {
        match self {
            PageOut::Partial(p) => p.len(),
            PageOut::Scalar(_) => 1,
            PageOut::Groups(g) => g.len(),
        }
    }

    /// True if [`PageOut::len`] is 0.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Hints the lines of what [`PageOut::merge_to`] reads first into the cache: the
    /// groups of a [`PageOut::Groups`] (written on the evaluating core). Nothing else.
    pub fn prefetch(&self) {
        if let PageOut::Groups(g) = self {
            g.prefetch();
        }
    }

    /// Whether this is an aggregation's state (else rows).
    pub fn is_aggregate(&self) -> bool {
        !matches!(self, PageOut::Partial(PartialResult::Rows(_)))
    }

    /// Merges this page's rows or state into `into`, a result of the same program
    /// (rows go after its own).
    pub fn merge_into(self, into: &mut PartialResult) -> Result<(), EvalError> {
        self.merge_to(into)
    }

    /// [`PageOut::merge_into`] leaving this page's result as it was, so its buffers can
    /// go back to the evaluators ([`ParEval::recycle`]).
    pub fn merge_to(&self, into: &mut PartialResult) -> Result<(), EvalError> {
        match (self, into) {
            (PageOut::Partial(p), into) => into.merge_from(p),
            (PageOut::Scalar(s), PartialResult::Aggregate(a)) => a.merge_scalar(s),
            (PageOut::Groups(g), PartialResult::Aggregate(a)) => a.merge_groups(g),
            (PageOut::Scalar(_) | PageOut::Groups(_), PartialResult::Rows(_)) => Err(
                EvalError::PlanMismatch("a projection's rows and an aggregation's state".into()),
            ),
        }
    }
}

/// Whether merging pages evaluated elsewhere costs the merging thread about what
/// evaluating them would have, judged on the pages merged so far: on average more than 16
/// groups (past the linear group lookup) of fewer than 4 selected rows each, or more than
/// 16 rows making up over a quarter of the rows examined (appending them is a copy of what
/// the evaluation wrote). A scan whose pages look like this gains nothing from evaluating
/// them elsewhere. Averaged over at least [`MergeTally::PAGES`] pages, so one page of many
/// groups (TPC-H Q15's 17 matching rows on one page among pages of about 4) does not turn
/// the look-ahead off for the whole scan.
#[derive(Debug, Clone, Copy, Default)]
pub struct MergeTally {
    pages: u64,
    out: u64,
    /// Rows the results stand for: selected rows of aggregation states, rows examined
    /// of projected rows.
    basis: u64,
}

impl MergeTally {
    /// Pages seen before the tally judges.
    pub const PAGES: u64 = 32;

    /// Counts a page's result.
    pub fn add(&mut self, r: &PageResult) {
        let basis = if r.out.is_aggregate() {
            r.work.rows_selected
        } else {
            r.work.records_examined
        };
        self.count(r.out.len() as u64, basis);
    }

    /// Counts a page of `out` groups or rows standing for `basis` rows.
    fn count(&mut self, out: u64, basis: u64) {
        self.pages += 1;
        self.out += out;
        self.basis += basis;
    }

    /// Whether the pages so far merge like evaluating (see the type's docs).
    pub fn merges_like_evaluating(&self) -> bool {
        self.pages >= Self::PAGES
            && self.out > 16 * self.pages
            && self.out.saturating_mul(4) > self.basis
    }
}

/// Evaluates batches of pages of one program on several threads; see the
/// [module docs](self).
#[derive(Debug)]
pub struct ParEval {
    common: Arc<Common>,
    threads: usize,
    /// Batches submitted for the pool ([`ParEval::submit`]).
    queue: Arc<Mutex<Queue>>,
    /// Results given back and not yet handed to the pools ([`ParEval::recycle`]).
    returned: Vec<PageOut>,
}

/// What every thread evaluating a program's pages shares.
#[derive(Debug)]
struct Common {
    plan: Plan,
    empty: PartialResult,
    /// The columns whose minipages are hinted one page ahead until an evaluator has
    /// measured which the program reads densely ([`MinipageHints::columns`],
    /// [`MinipageHints::dense_columns`]).
    columns: Vec<usize>,
    /// A CPU cache hint over bytes about to be read (none: no hints).
    hint: Option<Hint>,
    /// Whether pages' states are [`PageOut::Scalar`]: an aggregation without `GROUP BY`
    /// whose state [`ScalarState`] holds.
    scalar: bool,
    /// Whether pages' states are [`PageOut::Groups`]: an aggregation with `GROUP BY`
    /// whose groups [`PageGroups`] holds.
    grouped: bool,
    /// Evaluators not in use (their scratch buffers are reused from batch to batch), each
    /// with the state its pages are evaluated into when they are scalar or grouped.
    idle: Mutex<Vec<(Evaluator, Option<PartialResult>)>>,
    /// Emptied page results whose buffers the next pages are evaluated into
    /// ([`ParEval::recycle`]): a page's rows or groups otherwise cost a clone of `empty`
    /// and its buffers' growth, freed again on the merging thread (about a sixth of
    /// TPC-H Q15's scan went to the allocator).
    spare: Mutex<Vec<PartialResult>>,
    /// Emptied buffers of [`PageOut::Groups`], for the next pages' groups (as `spare`).
    spare_groups: Mutex<Vec<Vec<u128>>>,
}

/// Emptied page results kept for reuse at most ([`ParEval::recycle`]).
const SPARE_RESULTS: usize = 1024;

/// Results given back ([`ParEval::recycle`]) that reach the evaluators' pools at once.
pub const RECYCLE_BATCH: usize = 32;

/// A spare result whose buffers grew past this many rows or groups is dropped rather
/// than kept (one unusual page must not pin its memory for the rest of the scan).
const SPARE_MAX_LEN: usize = 1 << 14;

/// `m` locked, also after a thread panicked holding it (what it guards, pools of spares
/// and evaluators and the batches' results, stays usable: a page whose evaluation
/// panicked has no result and is evaluated again by the caller).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Takes up to `n` spares from the end of `pool` (the ones given back last).
fn take_spares<T>(pool: &Mutex<Vec<T>>, n: usize) -> Vec<T> {
    let mut all = lock(pool);
    let keep = all.len().saturating_sub(n);
    all.split_off(keep)
}

impl Common {
    /// Evaluates `pages` on an idle evaluator (or a new one), hinting ahead.
    fn eval_pages(&self, schema: &Schema, pages: &[&[u8]]) -> Vec<Option<PageResult>> {
        let popped = lock(&self.idle).pop();
        let (mut ev, mut scratch) = popped.unwrap_or_else(|| {
            let scratch = (self.scalar || self.grouped).then(|| self.empty.clone());
            (Evaluator::new(&self.plan), scratch)
        });
        let mut res = Vec::with_capacity(pages.len());
        let (mut spares, mut buffers) = match (self.scalar, self.grouped) {
            (false, false) => (take_spares(&self.spare, pages.len()), Vec::new()),
            (_, true) => (Vec::new(), take_spares(&self.spare_groups, pages.len())),
            (true, false) => (Vec::new(), Vec::new()),
        };
        // The minipages' places, from the first page that parses (none for NSM).
        let mut minipages: Option<Option<MinipageHints>> = None;
        for (j, b) in pages.iter().enumerate() {
            if let Some(h) = self.hint {
                if let Some(b2) = pages.get(j + 2) {
                    h(&b2[..b2.len().min(128)]);
                }
                if minipages.is_none()
                    && let Ok(v) = PageView::parse_unverified(b, schema)
                {
                    let measured = MinipageHints::dense_columns(&ev, &v);
                    let columns = measured.as_deref().unwrap_or(&self.columns);
                    minipages = Some(MinipageHints::of(&v, columns));
                }
                if let (Some(Some(m)), Some(b1)) = (&minipages, pages.get(j + 1)) {
                    m.hint(h, b1);
                }
                // Second stage: this page's lines, hinted towards the outer caches one
                // page ago, into the first level now (quick fills that keep few miss
                // buffers busy).
                if let Some(Some(m)) = &minipages {
                    m.hint(csd_sim::prefetch::lines, b);
                }
            }
            let out = scratch
                .is_none()
                .then(|| spares.pop().unwrap_or_else(|| self.empty.clone()));
            debug_assert!(
                out.as_ref().is_none_or(|o| *o == self.empty),
                "a page is evaluated into an empty result"
            );
            let buffer = self.grouped.then(|| buffers.pop().unwrap_or_default());
            res.push(eval_one(&mut ev, scratch.as_mut(), out, buffer, schema, b));
        }
        let idle = (ev, scratch);
        lock(&self.idle).push(idle);
        res
    }
}

/// A CPU cache hint: brings the lines of some bytes towards the core; no other effect.
pub type Hint = fn(&[u8]);

/// Where a program's minipages lie on every PAX page of a table, so the next page's can
/// be hinted without parsing it (parsing touches the page's header, which is the very
/// first-touch stall the hint is meant to hide).
#[derive(Debug, Clone)]
pub struct MinipageHints {
    ranges: Vec<Range<usize>>,
    page_len: usize,
}

impl MinipageHints {
    /// The columns of `plan` whose minipages are worth hinting ahead before any page
    /// was measured ([`MinipageHints::dense_columns`]): the filter's (its
    /// first term reads every row), or every column the program reads when it has no
    /// filter. The columns read after the filter are left to the core: hinting them as
    /// well kept the core's line-fill buffers full of lines mostly never read (TPC-H Q6
    /// reads the price of 2 rows a page). A device session that evaluates in its steps
    /// (the look-ahead off) still hints every column it reads: there, hinting only the
    /// filter's was slower (README, `csd bench tpch`, has the measurements).
    pub fn columns(plan: &Plan) -> Vec<usize> {
        let filter = plan.filter_columns();
        if filter.is_empty() {
            plan.referenced_columns()
        } else {
            filter
        }
    }

    /// Pages an evaluator must have seen before [`MinipageHints::dense_columns`] judges.
    pub const MEASURED_PAGES: u64 = 8;

    /// The columns whose minipages the program would wait on, judged on the pages `ev`
    /// evaluated so far (`None` before [`MinipageHints::MEASURED_PAGES`] pages): those
    /// of which it reads, on average, at least one cache line a page and at least an
    /// eighth of the lines, were the rows it read spread evenly (a column read on a
    /// fraction `p` of the rows, `k` values a line, touches `1 - (1 - p)^k` of its lines).
    /// Hinting every line of a column read on a few rows only keeps the memory system
    /// busy: TPC-H Q19 reads its ship instructions (43 lines a page) on 0.25% of the
    /// rows, 0.3 lines a page; Q6 reads its quantity (14 lines) on 4% of the rows, 3.9
    /// lines a page, and waited on them when they were not hinted.
    pub fn dense_columns(ev: &Evaluator, view: &PageView<'_>) -> Option<Vec<usize>> {
        let t = ev.totals();
        if t.pages < Self::MEASURED_PAGES || t.records_examined == 0 {
            return None;
        }
        let rows = t.records_examined as f64;
        let page_rows = rows / t.pages as f64;
        let waits_on = |c: usize, reads: u64| {
            let Ok(cv) = view.column(c) else {
                return false;
            };
            let w = cv.width().max(1) as f64;
            let per_line = (64.0 / w).max(1.0);
            let lines = (page_rows * w / 64.0).ceil();
            let p = (reads as f64 / rows).min(1.0);
            let touched = 1.0 - (1.0 - p).powf(per_line);
            touched >= 0.125 && touched * lines >= 1.0
        };
        let cols = ev.column_reads().iter().enumerate();
        Some(
            cols.filter(|&(c, &r)| r > 0 && waits_on(c, r))
                .map(|(c, _)| c)
                .collect(),
        )
    }

    /// The extents of `columns` on pages like `view` (`None` for NSM, whose rows are
    /// read whole).
    pub fn of(view: &PageView<'_>, columns: &[usize]) -> Option<MinipageHints> {
        let ranges = columns
            .iter()
            .map(|&c| view.column_extent(c))
            .collect::<Option<Vec<_>>>()?;
        Some(MinipageHints {
            ranges,
            page_len: view.bytes().len(),
        })
    }

    /// Hints the minipages on `page` (a page of the same table; a page of another size
    /// is left alone). No effect on results.
    pub fn hint(&self, hint: Hint, page: &[u8]) {
        if page.len() != self.page_len {
            return;
        }
        for r in &self.ranges {
            if let Some(b) = page.get(r.clone()) {
                hint(b);
            }
        }
    }
}

/// Pages that other threads may read while their owner goes on working (a device's
/// stored pages pinned against change): the source of a [`Batch`].
pub trait SharedPages: Send + Sync {
    /// Number of pages.
    fn len(&self) -> usize;

    /// Whether there are no pages.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` with pages `range` if they are still the bytes they were; `false`
    /// (and `f` not called) if they changed since.
    fn read(&self, range: Range<usize>, f: &mut dyn FnMut(&[&[u8]])) -> bool;
}

impl ParEval {
    /// Evaluation of `plan` on `threads` threads (at least 1).
    pub fn new(plan: &Plan, threads: usize) -> ParEval {
        let mut empty = PartialResult::new(plan);
        empty.lift_group_limit();
        let scalar = matches!(&empty, PartialResult::Aggregate(a) if a.scalar().is_some());
        let grouped = matches!(&empty, PartialResult::Aggregate(a) if a.has_page_groups());
        ParEval {
            common: Arc::new(Common {
                plan: plan.clone(),
                empty,
                columns: MinipageHints::columns(plan),
                hint: None,
                scalar,
                grouped,
                idle: Mutex::new(Vec::new()),
                spare: Mutex::new(Vec::new()),
                spare_groups: Mutex::new(Vec::new()),
            }),
            threads: threads.max(1),
            queue: Arc::default(),
            returned: Vec::new(),
        }
    }

    /// Hint each page's header two pages ahead and, one page ahead, the minipages the
    /// program would wait on ([`MinipageHints::dense_columns`]; its filter's until that
    /// is measured) with `hint`, and those minipages again into the first-level cache
    /// ([`csd_sim::prefetch::lines`]) when the page's evaluation starts (pages far apart
    /// in memory, which no hardware prefetcher predicts, cost a scan most of its time on
    /// their first touch).
    pub fn with_hint(mut self, hint: Hint) -> ParEval {
        if let Some(c) = Arc::get_mut(&mut self.common) {
            c.hint = Some(hint);
        }
        self
    }

    /// Gives a page's result back once merged ([`PageOut::merge_to`]): emptied, its
    /// buffers take a later page's rows or groups. Results of another program must not
    /// be given (they would be evaluated into); an unusually large one is dropped.
    /// They reach the evaluators [`RECYCLE_BATCH`] at a time, and whenever a batch is
    /// evaluated or submitted: one lock of the pools per batch of them, where a lock per
    /// page (shared with the evaluators taking spares) cost the merging thread of TPC-H
    /// Q15 about 3% of its time.
    pub fn recycle(&mut self, out: PageOut) {
        if matches!(out, PageOut::Scalar(_)) || out.len() > SPARE_MAX_LEN {
            return;
        }
        self.returned.push(out);
        if self.returned.len() >= RECYCLE_BATCH {
            self.flush_recycled();
        }
    }

    /// Hands the results given back so far to the evaluators' pools.
    fn flush_recycled(&mut self) {
        if self.returned.is_empty() {
            return;
        }
        let (mut results, mut buffers) = (None, None);
        for out in self.returned.drain(..) {
            match out {
                PageOut::Partial(mut p) => {
                    let pool = results.get_or_insert_with(|| lock(&self.common.spare));
                    if pool.len() < SPARE_RESULTS {
                        p.clear();
                        pool.push(p);
                    }
                }
                PageOut::Groups(g) => {
                    // Not emptied here: the evaluator that takes it writes it anyway,
                    // and this thread leaves the buffer's lines alone.
                    let pool = buffers.get_or_insert_with(|| lock(&self.common.spare_groups));
                    if pool.len() < SPARE_RESULTS {
                        pool.push(g.into_buffer());
                    }
                }
                PageOut::Scalar(_) => {}
            }
        }
    }

    /// Threads a batch is spread over.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Pages per piece of a batch of `n` pages: four pieces per thread, which the
    /// threads take in turn (a thread the OS keeps waiting takes fewer).
    fn piece(&self, n: usize) -> usize {
        n.div_ceil(self.threads * 4).max(1)
    }

    /// Evaluates `pages` (stored page bytes of a table of `schema`) in parallel; the
    /// results are in the pages' order.
    pub fn eval(&mut self, schema: &Schema, pages: &[&[u8]]) -> Vec<Option<PageResult>> {
        self.flush_recycled();
        if pages.is_empty() {
            return Vec::new();
        }
        let threads = self.threads.min(pages.len());
        let piece = self.piece(pages.len());
        let pieces = pages.len().div_ceil(piece);
        let next = AtomicUsize::new(0);
        let mut outs: Vec<Vec<(usize, Vec<Option<PageResult>>)>> =
            (0..threads).map(|_| Vec::new()).collect();
        let common = &*self.common;
        let work = |out: &mut Vec<(usize, Vec<Option<PageResult>>)>| loop {
            let k = next.fetch_add(1, Ordering::Relaxed);
            if k >= pieces {
                break;
            }
            let part = &pages[k * piece..((k + 1) * piece).min(pages.len())];
            out.push((k, common.eval_pages(schema, part)));
        };
        let mut parts = outs.iter_mut();
        if let Some(my_out) = parts.next() {
            let work = &work;
            // The calling thread works too: on a machine whose cores are busy it simply
            // takes more pieces instead of waiting for a pool thread.
            rayon::in_place_scope(|sc| {
                for out in parts {
                    sc.spawn(move |_| work(out));
                }
                work(my_out);
            });
        }
        let mut all: Vec<(usize, Vec<Option<PageResult>>)> = outs.into_iter().flatten().collect();
        all.sort_unstable_by_key(|p| p.0);
        all.into_iter().flat_map(|p| p.1).collect()
    }

    /// Starts evaluating `pages` on the pool's threads and returns at once: the caller
    /// goes on with its own work and takes the results piece by piece
    /// ([`Batch::take_piece`]), evaluating pieces no thread has started yet itself.
    /// With one thread nothing runs in the background.
    pub fn submit(&mut self, schema: &Schema, pages: Box<dyn SharedPages>) -> Batch {
        self.flush_recycled();
        let n = pages.len();
        let piece = self.piece(n);
        let pieces = n.div_ceil(piece);
        let shared = Arc::new(BatchShared {
            common: self.common.clone(),
            schema: schema.clone(),
            pages,
            piece,
            pieces,
            next: AtomicUsize::new(0),
            results: Mutex::new((0..pieces).map(|_| None).collect()),
            filled: Condvar::new(),
        });
        let mut q = lock(&self.queue);
        q.batches.push_back(shared.clone());
        // At most `threads - 1` pool threads work for this evaluation (the caller is
        // the other one): more would only take cores from the caller's own work.
        if q.workers + 1 < self.threads {
            q.workers += 1;
            let queue = self.queue.clone();
            rayon::spawn(move || work_queue(&queue));
        }
        Batch { shared }
    }
}

/// Batches submitted and not yet fully taken by a thread, and the pool threads working
/// on them.
#[derive(Debug, Default)]
struct Queue {
    batches: VecDeque<Arc<BatchShared>>,
    workers: usize,
}

/// A pool thread's work: the pieces of the queued batches, oldest first, until none is
/// left.
fn work_queue(queue: &Mutex<Queue>) {
    loop {
        let batch = {
            let mut q = lock(queue);
            loop {
                match q.batches.front() {
                    Some(b) if b.next.load(Ordering::Relaxed) < b.pieces => break b.clone(),
                    Some(_) => {
                        q.batches.pop_front();
                    }
                    None => {
                        q.workers -= 1;
                        return;
                    }
                }
            }
        };
        while batch.eval_next() {}
    }
}

/// A batch of pages being evaluated in the background ([`ParEval::submit`]). Dropping it
/// stops the pieces not started yet.
#[derive(Debug)]
pub struct Batch {
    shared: Arc<BatchShared>,
}

struct BatchShared {
    common: Arc<Common>,
    schema: Schema,
    pages: Box<dyn SharedPages>,
    piece: usize,
    pieces: usize,
    /// The next piece no thread has taken.
    next: AtomicUsize,
    /// Each piece's results once evaluated.
    results: Mutex<Vec<Option<Vec<Option<PageResult>>>>>,
    filled: Condvar,
}

impl std::fmt::Debug for BatchShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchShared")
            .field("pages", &self.pages.len())
            .field("pieces", &self.pieces)
            .finish_non_exhaustive()
    }
}

impl BatchShared {
    /// Evaluates the next piece no thread has taken; `false` when none is left.
    fn eval_next(&self) -> bool {
        let k = self.next.fetch_add(1, Ordering::Relaxed);
        if k >= self.pieces {
            return false;
        }
        let range = k * self.piece..((k + 1) * self.piece).min(self.pages.len());
        let len = range.len();
        // Filled even if the evaluation panics, so no taker waits forever.
        let mut slot = Fill {
            batch: self,
            k,
            len,
            out: None,
        };
        let mut out = None;
        self.pages.read(range, &mut |pages| {
            out = Some(self.common.eval_pages(&self.schema, pages));
        });
        // Bytes that changed since they were pinned: the takers evaluate in their steps.
        slot.out = Some(out.unwrap_or_else(|| (0..len).map(|_| None).collect()));
        true
    }
}

/// Puts a piece's results in place when dropped (normally or while unwinding: then
/// every page of the piece is left to the taker, which stays aligned with its pages).
struct Fill<'a> {
    batch: &'a BatchShared,
    k: usize,
    len: usize,
    out: Option<Vec<Option<PageResult>>>,
}

impl Drop for Fill<'_> {
    fn drop(&mut self) {
        let len = self.len;
        let out = self
            .out
            .take()
            .unwrap_or_else(|| (0..len).map(|_| None).collect());
        let mut r = lock(&self.batch.results);
        if let Some(slot) = r.get_mut(self.k) {
            *slot = Some(out);
        }
        self.batch.filled.notify_all();
    }
}

impl Batch {
    /// Pages in the batch.
    pub fn len(&self) -> usize {
        self.shared.pages.len()
    }

    /// Whether the batch has no pages.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of pieces ([`Batch::take_piece`]).
    pub fn pieces(&self) -> usize {
        self.shared.pieces
    }

    /// Piece `k`'s page results, in page order (`None` for a page left to the caller:
    /// its bytes changed, it did not evaluate, or its evaluation panicked). Evaluates pieces
    /// no thread has started yet while piece `k` is not done, then waits for it.
    pub fn take_piece(&self, k: usize) -> Vec<Option<PageResult>> {
        let sh = &*self.shared;
        loop {
            {
                let mut r = lock(&sh.results);
                match r.get_mut(k) {
                    None => return Vec::new(),
                    Some(slot) if slot.is_some() => return slot.take().unwrap_or_default(),
                    Some(_) => {}
                }
            }
            if sh.eval_next() {
                continue;
            }
            // Every piece is taken: piece `k` is under way on another thread, which
            // never waits for anything.
            let mut r = lock(&sh.results);
            while r.get(k).is_some_and(Option::is_none) {
                r = sh.filled.wait(r).unwrap_or_else(|e| e.into_inner());
            }
        }
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        // Pieces not started are not started any more.
        self.shared
            .next
            .store(self.shared.pieces, Ordering::Relaxed);
    }
}

/// One page into its own partial result: into `scalar` (emptied first) when the pages'
/// states are scalar, else into `out` (an empty result of the plan). The page's checksum is not verified
/// here: callers hand over bytes the FTL checks against their end-to-end CRC before any
/// result is used.
fn eval_one(
    ev: &mut Evaluator,
    scratch: Option<&mut PartialResult>,
    out: Option<PartialResult>,
    buffer: Option<Vec<u128>>,
    schema: &Schema,
    b: &[u8],
) -> Option<PageResult> {
    let view = PageView::parse_unverified(b, schema).ok()?;
    let (work, out) = match scratch {
        Some(st) => {
            if let PartialResult::Aggregate(a) = st {
                match buffer {
                    Some(_) => a.clear(),
                    None => a.reset_scalar(),
                }
            }
            let work = ev.eval_page(&view, st).ok()?;
            let PartialResult::Aggregate(a) = st else {
                return None;
            };
            let out = match buffer {
                Some(buffer) => PageOut::Groups(a.page_groups(buffer)?),
                None => PageOut::Scalar(a.scalar()?),
            };
            (work, out)
        }
        None => {
            let mut out = out?;
            let work = ev.eval_page(&view, &mut out).ok()?;
            (work, PageOut::Partial(out))
        }
    };
    Some(PageResult {
        work,
        out,
        layout: view.layout(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{AggFunc, Aggregate, Aggregation};

    #[test]
    fn merge_tally_judges_the_average_page_not_one() {
        // Q15-like: pages of about 4 groups, one of 17; never off.
        let mut t = MergeTally::default();
        for i in 0..200 {
            t.count(if i == 20 { 17 } else { 4 }, 4);
            assert!(!t.merges_like_evaluating(), "page {i}");
        }
        // Q17-like: 100 groups of one row a page; off once 32 pages are in.
        let mut t = MergeTally::default();
        for i in 1..=40 {
            t.count(100, 100);
            assert_eq!(
                t.merges_like_evaluating(),
                i >= MergeTally::PAGES,
                "page {i}"
            );
        }
        // Q1-like: 4 groups of many rows; and rows making up most of a page.
        let mut few = MergeTally::default();
        let mut rows = MergeTally::default();
        for _ in 0..64 {
            few.count(4, 108);
            rows.count(110, 110);
        }
        assert!(!few.merges_like_evaluating());
        assert!(rows.merges_like_evaluating());
        // Many groups of many rows each merge cheaply.
        let mut big = MergeTally::default();
        for _ in 0..64 {
            big.count(20, 110);
        }
        assert!(!big.merges_like_evaluating());
    }
    use crate::types::DataType;
    use csd_table::PageBuilder;
    use csd_table::datagen::{RowSource, SyntheticGenerator, SyntheticSpec};

    /// Pages of a synthetic table.
    fn pages(layout: Layout) -> (Schema, Vec<Vec<u8>>) {
        let spec = SyntheticSpec::synthetic16(3_000, 5).expect("spec");
        let mut g = SyntheticGenerator::new(spec).expect("gen");
        let schema = g.schema().clone();
        let mut b = PageBuilder::new(schema.clone(), layout, 4096).expect("builder");
        let mut out = Vec::new();
        let mut row = Vec::new();
        while g.next_row(&mut row) {
            if b.is_full() {
                out.push(b.finish().to_vec());
                b.reset();
            }
            b.push_row(&row).expect("row");
        }
        out.push(b.finish().to_vec());
        (schema, out)
    }

    /// `SUM(c1), MAX(c2) GROUP BY c3` over `schema`.
    fn agg_plan(schema: &Schema) -> Plan {
        agg_plan_by(schema, vec![2])
    }

    /// `SUM(c1), MAX(c2) GROUP BY` the columns `group_by` over `schema`.
    fn agg_plan_by(schema: &Schema, group_by: Vec<usize>) -> Plan {
        let c1 = crate::plan::Expr::column(schema, 0).expect("c1");
        let c2 = crate::plan::Expr::column(schema, 1).expect("c2");
        Plan::aggregation(
            "t",
            schema,
            Aggregation {
                group_by,
                aggregates: vec![
                    Aggregate {
                        func: AggFunc::Sum,
                        arg: Some(c1),
                        ty: DataType::Int,
                    },
                    Aggregate {
                        func: AggFunc::Max,
                        arg: Some(c2),
                        ty: DataType::Int,
                    },
                ],
            },
            None,
        )
    }

    /// Pages in memory as a batch's source; `changed` makes every read find them gone.
    struct Held {
        pages: Vec<Vec<u8>>,
        changed: bool,
    }

    impl SharedPages for Held {
        fn len(&self) -> usize {
            self.pages.len()
        }

        fn read(&self, range: Range<usize>, f: &mut dyn FnMut(&[&[u8]])) -> bool {
            if self.changed {
                return false;
            }
            let refs: Vec<&[u8]> = self.pages[range].iter().map(Vec::as_slice).collect();
            f(&refs);
            true
        }
    }

    /// A batch evaluated in the background gives, piece by piece, exactly what the
    /// synchronous evaluation gives; pages whose bytes changed come back as `None`, one
    /// per page; a batch dropped half taken leaves nothing waiting.
    #[test]
    fn submitted_batches_give_the_synchronous_results() {
        let (schema, pages) = pages(Layout::Pax);
        let plan = agg_plan(&schema);
        let refs: Vec<&[u8]> = pages.iter().map(Vec::as_slice).collect();
        let want = ParEval::new(&plan, 1).eval(&schema, &refs);
        for threads in [1, 2, 3] {
            let mut par = ParEval::new(&plan, threads);
            let held = Held {
                pages: pages.clone(),
                changed: false,
            };
            let b = par.submit(&schema, Box::new(held));
            let got: Vec<Option<PageResult>> =
                (0..b.pieces()).flat_map(|k| b.take_piece(k)).collect();
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                let (g, w) = (
                    g.as_ref().expect("evaluated"),
                    w.as_ref().expect("evaluated"),
                );
                assert_eq!((g.work, &g.out), (w.work, &w.out), "{threads} threads");
            }
            let gone = par.submit(
                &schema,
                Box::new(Held {
                    pages: pages.clone(),
                    changed: true,
                }),
            );
            let left: Vec<Option<PageResult>> = (0..gone.pieces())
                .flat_map(|k| gone.take_piece(k))
                .collect();
            assert_eq!(left.len(), pages.len());
            assert!(left.iter().all(Option::is_none));
            let half = par.submit(
                &schema,
                Box::new(Held {
                    pages: pages.clone(),
                    changed: false,
                }),
            );
            let _ = half.take_piece(0);
            drop(half);
        }
    }

    /// `SUM(c2), MAX(c3), MIN(c4), COUNT(*) WHERE c1 < below` over `schema`: an
    /// aggregation without `GROUP BY`.
    fn scalar_plan(schema: &Schema, below: i64) -> Plan {
        use crate::build;
        let col = |i| crate::plan::Expr::column(schema, i).expect("column");
        let arg = |func, i| Aggregate {
            func,
            arg: Some(col(i)),
            ty: DataType::Int,
        };
        let lit = crate::plan::Expr::constant(crate::plan::Const::Int(below), DataType::Int);
        let filter = build::compare(crate::plan::CmpOp::Lt, col(0), lit, "t").expect("filter");
        let aggregates = vec![
            arg(AggFunc::Sum, 1),
            arg(AggFunc::Max, 2),
            arg(AggFunc::Min, 3),
            Aggregate {
                func: AggFunc::CountStar,
                arg: None,
                ty: DataType::Int,
            },
        ];
        let agg = Aggregation {
            group_by: Vec::new(),
            aggregates,
        };
        Plan::aggregation("t", schema, agg, Some(filter))
    }

    /// How a test's pages hand over their results.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Out {
        /// Grouped, as [`PageOut::Groups`].
        Groups,
        /// Grouped by a key of 20 bytes, as whole states ([`PageOut::Partial`]).
        States,
        /// Without `GROUP BY`, as [`PageOut::Scalar`].
        Scalar,
    }

    /// Pages evaluated on any number of threads merge, in page order, into what one
    /// evaluator gives page by page: grouped states (handed over as their groups, or as
    /// whole states where the key is too wide), and states without `GROUP BY` (handed
    /// over inline); an evaluator's own state is emptied between its pages.
    #[test]
    fn parallel_pages_merge_into_the_sequential_result() {
        for (layout, kind) in [
            (Layout::Nsm, Out::Groups),
            (Layout::Pax, Out::Groups),
            (Layout::Pax, Out::States),
            (Layout::Nsm, Out::Scalar),
            (Layout::Pax, Out::Scalar),
        ] {
            let (schema, pages) = pages(layout);
            let plan = match kind {
                Out::Scalar => scalar_plan(&schema, 1_500),
                Out::Groups => agg_plan(&schema),
                Out::States => agg_plan_by(&schema, vec![2, 3, 4, 5, 6]),
            };
            let mut seq = Evaluator::new(&plan);
            let mut want = PartialResult::new(&plan);
            let mut want_work = WorkCounters::default();
            for p in &pages {
                let v = PageView::parse(p, &schema).expect("page");
                want_work += seq.eval_page(&v, &mut want).expect("eval");
            }
            for threads in [1, 2, 3] {
                let mut par = ParEval::new(&plan, threads);
                let refs: Vec<&[u8]> = pages.iter().map(Vec::as_slice).collect();
                // The second round evaluates into the first round's recycled results.
                for round in 0..2 {
                    let mut got = PartialResult::new(&plan);
                    let mut work = WorkCounters::default();
                    for r in par.eval(&schema, &refs) {
                        let r = r.expect("evaluated");
                        let got_kind = match r.out {
                            PageOut::Groups(_) => Out::Groups,
                            PageOut::Partial(_) => Out::States,
                            PageOut::Scalar(_) => Out::Scalar,
                        };
                        assert_eq!(got_kind, kind);
                        work += r.work;
                        r.out.merge_to(&mut got).expect("merge");
                        par.recycle(r.out);
                    }
                    assert_eq!(got, want, "{layout:?} {threads} threads round {round}");
                    assert_eq!(work, want_work);
                }
                let spares = par.common.spare.lock().map(|s| s.len()).unwrap_or(0);
                let buffers = par.common.spare_groups.lock().map(|s| s.len()).unwrap_or(0);
                assert_eq!(
                    (spares > 0, buffers > 0),
                    (kind == Out::States, kind == Out::Groups),
                    "grouped pages' results are reused"
                );
            }
            // A page that is not one of the table's is left to the caller.
            let mut par = ParEval::new(&plan, 2);
            let junk = vec![0u8; 4096];
            let r = par.eval(&schema, &[&pages[0], &junk]);
            assert!(r[0].is_some() && r[1].is_none());
        }
    }

    /// Results given back reach the evaluators' pools a batch at a time, or when the next
    /// batch of pages is evaluated; a scalar state's is not kept.
    #[test]
    fn given_back_results_reach_the_pools_in_batches() {
        let (schema, pages) = pages(Layout::Pax);
        let refs: Vec<&[u8]> = pages.iter().map(Vec::as_slice).collect();
        let pooled = |par: &ParEval| {
            let n = |m: &Mutex<Vec<_>>| lock(m).len();
            let g = lock(&par.common.spare_groups).len();
            (n(&par.common.spare), g)
        };
        let mut par = ParEval::new(&agg_plan(&schema), 2);
        let mut outs: Vec<PageOut> = (0..RECYCLE_BATCH + 1)
            .map(|k| par.eval(&schema, &refs[k % refs.len()..][..1]))
            .map(|r| r.into_iter().next().flatten().expect("evaluated").out)
            .collect();
        let before = pooled(&par).1;
        for (k, out) in outs.drain(..RECYCLE_BATCH).enumerate() {
            assert_eq!(
                pooled(&par).1,
                before,
                "nothing pooled before the batch, {k}"
            );
            par.recycle(out);
        }
        assert_eq!(pooled(&par), (0, before + RECYCLE_BATCH));
        par.recycle(outs.remove(0));
        assert_eq!(pooled(&par).1, before + RECYCLE_BATCH);
        let _ = par.eval(&schema, &refs[..0]);
        assert_eq!(
            pooled(&par).1,
            before + RECYCLE_BATCH + 1,
            "flushed by eval"
        );
        // A scalar state is inline: nothing to keep.
        let mut scalar = ParEval::new(&scalar_plan(&schema, 100), 2);
        for r in scalar.eval(&schema, &refs) {
            scalar.recycle(r.expect("evaluated").out);
        }
        assert!(scalar.returned.is_empty());
    }

    /// A column is hinted when the program reads at least an eighth of its lines and
    /// one line a page, judged after enough pages: the filter's column always, the
    /// summed column when half the rows pass, not when one in a hundred does.
    #[test]
    fn dense_columns_are_the_ones_the_program_waits_on() {
        let (schema, pages) = pages(Layout::Pax);
        let views: Vec<PageView<'_>> = pages
            .iter()
            .map(|p| PageView::parse(p, &schema).expect("page"))
            .collect();
        for (below, want) in [(1_500, vec![0, 1, 2, 3]), (30, vec![0])] {
            let plan = scalar_plan(&schema, below);
            let mut ev = Evaluator::new(&plan);
            let mut out = PartialResult::new(&plan);
            for (i, v) in views.iter().enumerate().take(12) {
                let judged = MinipageHints::dense_columns(&ev, v);
                assert_eq!(judged.is_some(), i as u64 >= MinipageHints::MEASURED_PAGES);
                ev.eval_page(v, &mut out).expect("eval");
            }
            assert_eq!(
                MinipageHints::dense_columns(&ev, &views[0]),
                Some(want),
                "c1 < {below}"
            );
        }
    }
}
