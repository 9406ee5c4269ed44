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
//! * One [`Evaluator`] per thread, kept between batches (its scratch buffers are reused).
//! * The batch is cut into four pieces per thread, which the threads take in turn (an
//!   atomic counter): the calling thread works too (`rayon::in_place_scope`), and on a
//!   machine whose cores are busy with other work it simply takes more pieces instead
//!   of waiting for a pool thread the OS has not scheduled.
//! * A page that does not parse or fails to evaluate gets `None`: the caller evaluates
//!   it on its own thread and reports the error with its own context.
//! * Threads: [`scan_threads`], the machine's cores unless [`set_scan_threads`] or the
//!   `CSD_SCAN_THREADS` environment variable say otherwise. An emulator setting: it
//!   never changes a result or a modeled figure.

use crate::eval::{Evaluator, WorkCounters};
use crate::plan::Plan;
use crate::result::PartialResult;
use csd_table::{Layout, PageView, Schema};
use std::sync::atomic::{AtomicUsize, Ordering};

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

/// One page's evaluation: its work counters, its rows or group state, and its layout.
#[derive(Debug)]
pub struct PageResult {
    /// The page's work counters.
    pub work: WorkCounters,
    /// The page's rows or aggregation state (without a group bound).
    pub out: PartialResult,
    /// The page's layout.
    pub layout: Layout,
}

impl PageResult {
    /// Whether merging this page's result into a scan's costs the merging thread about
    /// what evaluating the page would have: more than 16 groups (past the linear group
    /// lookup) of fewer than 4 selected rows each, or more than 16 rows making up over a
    /// quarter of the page (appending them is a copy of what the evaluation wrote). A
    /// scan whose pages look like this gains nothing from evaluating them elsewhere.
    pub fn merges_like_evaluating(&self) -> bool {
        let n = self.out.len() as u64;
        n > 16
            && match &self.out {
                PartialResult::Aggregate(_) => n.saturating_mul(4) > self.work.rows_selected,
                PartialResult::Rows(_) => n.saturating_mul(4) > self.work.records_examined,
            }
    }
}

/// Evaluates batches of pages of one program on several threads; see the
/// [module docs](self).
#[derive(Debug)]
pub struct ParEval {
    plan: Plan,
    empty: PartialResult,
    threads: usize,
    workers: Vec<Evaluator>,
    /// The columns the program reads.
    columns: Vec<usize>,
    /// A CPU cache hint over bytes about to be read (none: no hints).
    hint: Option<Hint>,
}

/// A CPU cache hint: brings the lines of some bytes towards the core; no other effect.
pub type Hint = fn(&[u8]);

/// Hints the minipages of `columns` on the page `page` (PAX: each column is one
/// contiguous run; NSM rows are read whole, so nothing is hinted). No effect on results.
pub fn hint_columns(hint: Hint, page: &[u8], schema: &Schema, columns: &[usize]) {
    let Ok(view) = PageView::parse_unverified(page, schema) else {
        return;
    };
    for &c in columns {
        if let Ok(cv) = view.column(c)
            && let Some(d) = cv.contiguous()
        {
            hint(d);
        }
    }
}

impl ParEval {
    /// Evaluation of `plan` on `threads` threads (at least 1).
    pub fn new(plan: &Plan, threads: usize) -> ParEval {
        let mut empty = PartialResult::new(plan);
        empty.lift_group_limit();
        ParEval {
            plan: plan.clone(),
            empty,
            threads: threads.max(1),
            workers: Vec::new(),
            columns: plan.referenced_columns(),
            hint: None,
        }
    }

    /// Hint each page's header two pages ahead and its program's minipages one page
    /// ahead with `hint` (pages far apart in memory, which no hardware prefetcher
    /// predicts, cost a scan most of its time on their first touch).
    pub fn with_hint(mut self, hint: Hint) -> ParEval {
        self.hint = Some(hint);
        self
    }

    /// Threads a batch is spread over.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Evaluates `pages` (stored page bytes of a table of `schema`) in parallel; the
    /// results are in the pages' order.
    pub fn eval(&mut self, schema: &Schema, pages: &[&[u8]]) -> Vec<Option<PageResult>> {
        if pages.is_empty() {
            return Vec::new();
        }
        let threads = self.threads.min(pages.len());
        while self.workers.len() < threads {
            self.workers.push(Evaluator::new(&self.plan));
        }
        // Small pieces taken in turn: a thread the OS keeps waiting takes fewer, and the
        // calling thread never idles while pieces are left.
        let piece = pages.len().div_ceil(threads * 4).max(1);
        let pieces = pages.len().div_ceil(piece);
        let next = AtomicUsize::new(0);
        let mut outs: Vec<Vec<(usize, Vec<Option<PageResult>>)>> =
            (0..threads).map(|_| Vec::new()).collect();
        let (empty, cols, hint) = (&self.empty, &self.columns[..], self.hint);
        let work = |ev: &mut Evaluator, out: &mut Vec<(usize, Vec<Option<PageResult>>)>| loop {
            let k = next.fetch_add(1, Ordering::Relaxed);
            if k >= pieces {
                break;
            }
            let part = &pages[k * piece..((k + 1) * piece).min(pages.len())];
            let mut res = Vec::with_capacity(part.len());
            for (j, b) in part.iter().enumerate() {
                if let Some(h) = hint {
                    if let Some(b2) = part.get(j + 2) {
                        h(&b2[..b2.len().min(128)]);
                    }
                    if let Some(b1) = part.get(j + 1) {
                        hint_columns(h, b1, schema, cols);
                    }
                }
                res.push(eval_one(ev, schema, empty, b));
            }
            out.push((k, res));
        };
        let mut parts = self.workers.iter_mut().zip(outs.iter_mut());
        if let Some((my_eval, my_out)) = parts.next() {
            let work = &work;
            rayon::in_place_scope(|sc| {
                for (ev, out) in parts {
                    sc.spawn(move |_| work(ev, out));
                }
                work(my_eval, my_out);
            });
        }
        let mut all: Vec<(usize, Vec<Option<PageResult>>)> = outs.into_iter().flatten().collect();
        all.sort_unstable_by_key(|p| p.0);
        all.into_iter().flat_map(|p| p.1).collect()
    }
}

/// One page into its own partial result. The page's checksum is not verified here:
/// callers hand over bytes the FTL checks against their end-to-end CRC before any
/// result is used.
fn eval_one(
    ev: &mut Evaluator,
    schema: &Schema,
    empty: &PartialResult,
    b: &[u8],
) -> Option<PageResult> {
    let view = PageView::parse_unverified(b, schema).ok()?;
    let mut out = empty.clone();
    let work = ev.eval_page(&view, &mut out).ok()?;
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

    #[test]
    fn parallel_pages_merge_into_the_sequential_result() {
        for layout in [Layout::Nsm, Layout::Pax] {
            let (schema, pages) = pages(layout);
            let c1 = crate::plan::Expr::column(&schema, 0).expect("c1");
            let c2 = crate::plan::Expr::column(&schema, 1).expect("c2");
            let plan = Plan::aggregation(
                "t",
                &schema,
                Aggregation {
                    group_by: vec![2],
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
            );
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
                let mut got = PartialResult::new(&plan);
                let mut work = WorkCounters::default();
                for r in par.eval(&schema, &refs) {
                    let r = r.expect("evaluated");
                    work += r.work;
                    got.merge(r.out).expect("merge");
                }
                assert_eq!(got, want, "{layout:?} {threads} threads");
                assert_eq!(work, want_work);
            }
            // A page that is not one of the table's is left to the caller.
            let mut par = ParEval::new(&plan, 2);
            let junk = vec![0u8; 4096];
            let r = par.eval(&schema, &[&pages[0], &junk]);
            assert!(r[0].is_some() && r[1].is_none());
        }
    }
}
