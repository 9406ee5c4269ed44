//! The one evaluator: a [`Plan`] over a page of tuples, column at a time.
//!
//! [`Evaluator::eval_page`] takes a parsed page ([`PageView`], NSM or PAX) and
//!
//! 1. starts with every row selected (selection vector `0..n`);
//! 2. evaluates the filter: each comparison/`IN`/`LIKE` reads only its column(s) for
//!    the rows still selected and writes the survivors; `AND` narrows the selection
//!    term by term (so later terms touch fewer rows), `OR` evaluates each term on the
//!    rows no earlier term selected, `NOT` takes the complement within the selection;
//! 3. evaluates the projection expressions (appending to a [`RowChunk`](crate::RowChunk))
//!    or the aggregate arguments and folds them into the
//!    [`AggState`](crate::AggState).
//!
//! Columns are read where they lie: a PAX minipage is read in place; an NSM column is
//! decoded once per page into a reusable `Vec<i64>` when at least a quarter of the rows
//! need it, else read strided from the rows. Intermediate vectors come from a pool that
//! lives as long as the evaluator, so a long scan allocates nothing per page.
//!
//! The same code runs for the host-side scan (IHP) and inside the device (embedded-CPU
//! ISP and the hardware-ISP filter stage): the strategies differ only in *where* pages
//! are evaluated and in how the [`WorkCounters`] it returns are charged (host or device
//! cycle costs), never in what a predicate means. That is why every strategy returns
//! identical results.

use std::ops::{Add, AddAssign};

use csd_table::{ColumnType, ColumnView, Layout, PageView};

use crate::agg::{AggInput, GroupScratch};
use crate::error::EvalError;
use crate::kernels::{self, NumCol, Operand, cmp_padded, filter_by};
use crate::plan::{AggFunc, CmpOp, Const, ConstSet, Expr, ExprKind, Output, Plan};
use crate::result::{ChunkColumn, PartialResult};
use crate::types::DataType;

/// Work done by the evaluator, for a cost model to charge cycles on.
///
/// All counts are exact and deterministic (they depend only on the plan and the page
/// contents), so modeled time computed from them is reproducible.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct WorkCounters {
    /// Pages evaluated.
    pub pages: u64,
    /// Rows on those pages (each is examined by the filter, or passed through).
    pub records_examined: u64,
    /// Predicate evaluations: for every comparison, `IN` and `LIKE`, the number of rows
    /// it was evaluated on.
    pub predicates_evaluated: u64,
    /// Bytes of column values read from the pages: a PAX minipage value counts each
    /// time it is read, an NSM column decoded for a page counts all its values once
    /// (sparse NSM reads count per value read).
    pub bytes_touched: u64,
    /// Column values read from the pages (the accesses behind `bytes_touched`; a device
    /// core without caches pays a DRAM access per NSM value).
    pub values_touched: u64,
    /// Arithmetic results computed (one per row per operator).
    pub values_computed: u64,
    /// Rows that passed the filter.
    pub rows_selected: u64,
    /// Result rows written by a projection (one per selected row).
    pub results_written: u64,
    /// Bytes of those result rows (fixed-width encoding).
    pub result_bytes: u64,
    /// Aggregate accumulator updates (selected rows × aggregates).
    pub agg_updates: u64,
    /// Bytes of variable-length (VARCHAR / VARBINARY) values that comparisons, `IN` and
    /// `LIKE` actually compared (a comparison stops at the first differing byte, a
    /// prefix test at the prefix); already part of `bytes_touched`. A hardware compare
    /// logic reads these from the page's heap, apart from the fixed-width stream; 0 for
    /// fixed-width columns (CHAR, numbers, dates).
    pub var_bytes_compared: u64,
    /// Bytes of the variable-length values (every `VARCHAR` / `VARBINARY` column, a NULL
    /// 0) of the rows a projection selected: what a filter that forwards whole records
    /// (`hw-isp`) sends besides their fixed-width slots. 0 for aggregations and for
    /// tables of fixed-width columns.
    pub selected_var_bytes: u64,
}

impl WorkCounters {
    /// Count `values` column values of `width` bytes read.
    #[inline]
    fn touch(&mut self, values: usize, width: usize) {
        self.values_touched += values as u64;
        self.bytes_touched += (values * width) as u64;
    }
}

impl AddAssign for WorkCounters {
    fn add_assign(&mut self, o: WorkCounters) {
        self.pages += o.pages;
        self.records_examined += o.records_examined;
        self.predicates_evaluated += o.predicates_evaluated;
        self.bytes_touched += o.bytes_touched;
        self.values_touched += o.values_touched;
        self.values_computed += o.values_computed;
        self.rows_selected += o.rows_selected;
        self.results_written += o.results_written;
        self.result_bytes += o.result_bytes;
        self.agg_updates += o.agg_updates;
        self.var_bytes_compared += o.var_bytes_compared;
        self.selected_var_bytes += o.selected_var_bytes;
    }
}

impl Add for WorkCounters {
    type Output = WorkCounters;
    fn add(mut self, o: WorkCounters) -> WorkCounters {
        self += o;
        self
    }
}

/// Evaluates one plan over pages; owns reusable buffers. Create one per scan (or per
/// device session) and feed it every page.
#[derive(Debug)]
pub struct Evaluator {
    plan: Plan,
    scratch: Scratch,
    totals: WorkCounters,
    /// Per aggregate of an aggregation plan: the first earlier aggregate with the same
    /// input ([`shared_inputs`]), whose values it takes instead of computing them again.
    same: Vec<Option<usize>>,
}

/// Per aggregate of an aggregation plan, the first earlier aggregate whose input is the
/// same values:
/// the same numeric argument (not `DECIMAL(p, s)`, not NULL anywhere), both needing its
/// values (TPC-H Q1's `SUM(l_quantity)` and `AVG(l_quantity)`). The page's values are
/// computed once and both fold them; the work counters still count each aggregate's
/// evaluation, so a device's modeled cost is that of evaluating every aggregate.
fn shared_inputs(plan: &Plan) -> Vec<Option<usize>> {
    let Output::Aggregate(agg) = &plan.output else {
        return Vec::new();
    };
    let shareable = |a: &crate::plan::Aggregate| {
        !matches!(a.func, AggFunc::CountStar | AggFunc::Count)
            && a.arg.as_ref().is_some_and(|e| {
                !e.may_be_null()
                    && (e.ty.is_integer_backed() || e.ty.is_float())
                    && !matches!(e.ty, DataType::Decimal128 { .. })
            })
    };
    let aggs = &agg.aggregates;
    (0..aggs.len())
        .map(|i| {
            if !shareable(&aggs[i]) {
                return None;
            }
            (0..i).find(|&j| shareable(&aggs[j]) && aggs[j].arg == aggs[i].arg)
        })
        .collect()
}

#[derive(Debug, Default)]
struct Scratch {
    /// Per schema column: its values on the current page (NSM dense access).
    decoded: Vec<Vec<i64>>,
    /// Per schema column: the page serial `decoded` holds (0 = none).
    decoded_at: Vec<u64>,
    serial: u64,
    nums: Vec<Vec<i64>>,
    sels: Vec<Vec<u32>>,
    group: GroupScratch,
    /// Per schema column: values read over every page so far
    /// ([`Evaluator::column_reads`]).
    reads: Vec<u64>,
}

impl Scratch {
    /// Notes `rows` values read of the column `e` is, if it is one.
    fn note(&mut self, e: &Expr, rows: usize) {
        if let ExprKind::Column { index, .. } = e.kind {
            self.note_col(index, rows);
        }
    }

    /// Notes `rows` values read of column `index`.
    fn note_col(&mut self, index: usize, rows: usize) {
        if let Some(r) = self.reads.get_mut(index) {
            *r += rows as u64;
        }
    }
}

impl Evaluator {
    /// An evaluator for `plan` (the plan is copied, so the evaluator can live in a
    /// device session on its own).
    pub fn new(plan: &Plan) -> Evaluator {
        let ncols = plan.schema.len();
        Evaluator {
            plan: plan.clone(),
            scratch: Scratch {
                decoded: vec![Vec::new(); ncols],
                decoded_at: vec![0; ncols],
                ..Scratch::default()
            },
            totals: WorkCounters::default(),
            same: shared_inputs(plan),
        }
    }

    /// Whether aggregates with the same input take its values computed once per page
    /// (the default: `true`); `false` computes every aggregate's input on its own, for
    /// comparison. Results and work counters are the same either way.
    pub fn share_inputs(mut self, on: bool) -> Evaluator {
        self.same = if on {
            shared_inputs(&self.plan)
        } else {
            Vec::new()
        };
        self
    }

    /// The plan being evaluated.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The sum of the counters of every page evaluated so far.
    pub fn totals(&self) -> WorkCounters {
        self.totals
    }

    /// Values read per schema column over every page evaluated so far: how densely the
    /// program reads each column's minipage (a cache hint ahead of the next page is
    /// judged on it: [`crate::MinipageHints::dense_columns`]).
    pub fn column_reads(&self) -> &[u64] {
        &self.scratch.reads
    }

    fn check_page(&self, page: &PageView<'_>) -> Result<(), EvalError> {
        let found = page.schema();
        if found.fingerprint() != self.plan.schema.fingerprint() {
            return Err(EvalError::WrongTable {
                expected: self.plan.table.clone(),
                expected_fingerprint: self.plan.schema.fingerprint(),
                found: found.name().to_string(),
                found_fingerprint: found.fingerprint(),
            });
        }
        Ok(())
    }

    /// Checks that `page` belongs to the plan's table and opens its work counters.
    fn start_page(&self, page: &PageView<'_>) -> Result<WorkCounters, EvalError> {
        self.check_page(page)?;
        Ok(WorkCounters {
            pages: 1,
            records_examined: page.row_count() as u64,
            ..WorkCounters::default()
        })
    }

    /// Evaluates only the filter: the ascending indices of the page's rows that pass
    /// it go to `sel` (what a hardware filter stage forwards to DRAM).
    pub fn select(
        &mut self,
        page: &PageView<'_>,
        sel: &mut Vec<u32>,
    ) -> Result<WorkCounters, EvalError> {
        let mut c = self.start_page(page)?;
        let Evaluator { plan, scratch, .. } = self;
        let mut run = Run::start(page, scratch, &mut c);
        run.selection(plan.filter.as_ref(), sel)?;
        c.rows_selected = sel.len() as u64;
        c.selected_var_bytes = selected_var_bytes(page, sel)?;
        self.totals += c;
        Ok(c)
    }

    /// Evaluates the plan over one page and adds the page's rows or aggregates to
    /// `out` (which must come from [`PartialResult::new`] for the same plan). Returns
    /// the page's work counters (also added to [`Evaluator::totals`]).
    ///
    /// On error the query must be abandoned: `out` may hold part of the page.
    pub fn eval_page(
        &mut self,
        page: &PageView<'_>,
        out: &mut PartialResult,
    ) -> Result<WorkCounters, EvalError> {
        let mut c = self.start_page(page)?;
        let Evaluator {
            plan,
            scratch,
            same,
            ..
        } = self;
        let mut run = Run::start(page, scratch, &mut c);
        let mut sel = run.take_sel();
        run.selection(plan.filter.as_ref(), &mut sel)?;
        run.c.rows_selected = sel.len() as u64;
        match (&plan.output, out) {
            (Output::Project(exprs), PartialResult::Rows(chunk)) => {
                run.project(exprs, &sel, chunk)?;
                run.c.selected_var_bytes = selected_var_bytes(page, &sel)?;
            }
            (Output::Aggregate(agg), PartialResult::Aggregate(state)) => {
                let nullable_key = agg.group_by.iter().any(|&g| {
                    plan.schema
                        .columns()
                        .get(g)
                        .is_some_and(|c| c.nullable || !c.ty.is_classic())
                });
                if nullable_key || !agg.aggregates.iter().all(device_aggregate) {
                    return Err(EvalError::PlanMismatch(
                        "the device groups by NOT NULL columns of the fixed types and \
                         aggregates INT, DECIMAL, DATE and TIMESTAMP values (MIN/MAX of \
                         strings too), NULLs skipped: leave this aggregate to the host"
                            .into(),
                    ));
                }
                // Per aggregate: its values (numbers, float keys) and, for an argument
                // that may be NULL, which selected rows it is not NULL on.
                let mut bufs: Vec<Option<Vec<i64>>> = Vec::with_capacity(agg.aggregates.len());
                let mut valid: Vec<Option<Vec<bool>>> = Vec::with_capacity(agg.aggregates.len());
                for (i, a) in agg.aggregates.iter().enumerate() {
                    let needs_values = !matches!(a.func, AggFunc::CountStar | AggFunc::Count);
                    if let (Some(_), Some(e)) = (same.get(i).copied().flatten(), &a.arg) {
                        // Its values are an earlier aggregate's: counted, not computed.
                        run.count_num(e, sel.len())?;
                        bufs.push(None);
                        valid.push(None);
                        continue;
                    }
                    let ok = match &a.arg {
                        Some(e) if e.may_be_null() && a.func != AggFunc::CountStar => {
                            let mut nn = run.take_sel();
                            run.non_null(e, &sel, &mut nn)?;
                            run.c.predicates_evaluated += sel.len() as u64;
                            let mut flags = Vec::with_capacity(sel.len());
                            let mut it = nn.iter().peekable();
                            for &i in &sel {
                                let hit = it.peek() == Some(&&i);
                                if hit {
                                    it.next();
                                }
                                flags.push(hit);
                            }
                            if needs_values && (e.ty.is_integer_backed() || e.ty.is_float()) {
                                let mut vals = run.take_num();
                                run.eval_num(e, &nn, &mut vals)?;
                                let mut b = run.take_num();
                                let mut it = vals.iter();
                                b.extend(flags.iter().map(|&f| {
                                    if f {
                                        it.next().copied().unwrap_or(0)
                                    } else {
                                        0
                                    }
                                }));
                                run.s.nums.push(vals);
                                bufs.push(Some(b));
                            } else {
                                bufs.push(None);
                            }
                            run.s.sels.push(nn);
                            Some(flags)
                        }
                        Some(e)
                            if needs_values && (e.ty.is_integer_backed() || e.ty.is_float()) =>
                        {
                            let mut b = run.take_num();
                            run.eval_num(e, &sel, &mut b)?;
                            bufs.push(Some(b));
                            None
                        }
                        _ => {
                            bufs.push(None);
                            None
                        }
                    };
                    valid.push(ok);
                }
                // DECIMAL(p, s) arguments: their 128-bit values per selected row (0 on
                // a NULL row, which the accumulator skips).
                let mut wides: Vec<Option<Vec<i128>>> = Vec::with_capacity(bufs.len());
                for a in &agg.aggregates {
                    wides.push(match &a.arg {
                        Some(e)
                            if matches!(e.ty, DataType::Decimal128 { .. })
                                && !matches!(a.func, AggFunc::CountStar | AggFunc::Count) =>
                        {
                            let cv = wide_column(run.view, e)?;
                            run.s.note(e, sel.len());
                            run.c.touch(sel.len(), cv.width());
                            Some(sel.iter().map(|&i| wide_at(&cv, i as usize)).collect())
                        }
                        _ => None,
                    });
                }
                let mut inputs = Vec::with_capacity(bufs.len());
                for (i, (((a, b), ok), w)) in agg
                    .aggregates
                    .iter()
                    .zip(&bufs)
                    .zip(&valid)
                    .zip(&wides)
                    .enumerate()
                {
                    let b = match same.get(i).copied().flatten() {
                        Some(j) => bufs.get(j).unwrap_or(b),
                        None => b,
                    };
                    inputs.push(match (b, ok, &a.arg) {
                        _ if w.is_some() => {
                            AggInput::Wide(w.as_deref().unwrap_or(&[]), ok.as_deref())
                        }
                        (Some(v), Some(f), _) => AggInput::NumValid(v, f),
                        (Some(v), None, _) => AggInput::Num(v),
                        (None, _, Some(e))
                            if !matches!(a.func, AggFunc::CountStar | AggFunc::Count) =>
                        {
                            let cv = char_column(run.view, e)?;
                            run.s.note(e, sel.len());
                            if cv.column_type().is_variable() {
                                // The values' own bytes, each read (and compared) once.
                                let bytes: usize = sel
                                    .iter()
                                    .filter_map(|&i| cv.bytes(i as usize))
                                    .map(<[u8]>::len)
                                    .sum();
                                run.c.values_touched += sel.len() as u64;
                                run.c.bytes_touched += bytes as u64;
                                run.c.var_bytes_compared += bytes as u64;
                            } else {
                                run.c.touch(sel.len(), cv.width());
                            }
                            AggInput::Char(cv)
                        }
                        (None, Some(f), _) => AggInput::Valid(f),
                        _ => AggInput::Rows,
                    });
                }
                let key_bytes: usize = agg
                    .group_by
                    .iter()
                    .filter_map(|&g| plan.schema.columns().get(g))
                    .map(|col| col.ty.width())
                    .sum();
                for &g in &agg.group_by {
                    run.s.note_col(g, sel.len());
                }
                run.c.values_touched += (sel.len() * agg.group_by.len()) as u64;
                run.c.bytes_touched += (sel.len() * key_bytes) as u64;
                let page = run.view;
                run.c.agg_updates += state.update(page, &sel, &inputs, same, &mut run.s.group)?;
                drop(inputs);
                for b in bufs.into_iter().flatten() {
                    run.s.nums.push(b);
                }
            }
            _ => {
                return Err(EvalError::PlanMismatch(
                    "the partial result is not of this plan's kind".into(),
                ));
            }
        }
        run.s.sels.push(sel);
        self.totals += c;
        Ok(c)
    }
}

/// Bytes of the variable-length values of the rows `sel` of `page`
/// ([`WorkCounters::selected_var_bytes`]).
fn selected_var_bytes(page: &PageView<'_>, sel: &[u32]) -> Result<u64, EvalError> {
    let mut n = 0u64;
    for (c, col) in page.schema().columns().iter().enumerate() {
        if col.ty.is_variable() {
            let cv = page.column(c)?;
            n += sel
                .iter()
                .map(|&i| cv.bytes(i as usize).map_or(0, <[u8]>::len) as u64)
                .sum::<u64>();
        }
    }
    Ok(n)
}

/// Whether the device computes aggregate `a` exactly: `COUNT(*)`; `COUNT(x)`; `SUM`,
/// `AVG`, `MIN`, `MAX` of `INT`, `DECIMAL`, `DATE` (and `TIMESTAMP`) values; `MIN`/`MAX`
/// of `CHAR`. An argument may be NULL (its NULL rows are skipped); float aggregates are
/// the host's (a sum depends on the order of the additions, an extreme among equal
/// zeros or NaNs too).
fn device_aggregate(a: &crate::plan::Aggregate) -> bool {
    let Some(e) = &a.arg else {
        return true;
    };
    match a.func {
        AggFunc::CountStar | AggFunc::Count => true,
        AggFunc::Sum | AggFunc::Avg => {
            e.ty.is_integer_backed() || matches!(e.ty, DataType::Decimal128 { .. })
        }
        // Not floats: Arrow's order has -0.0 = 0.0 and NaNs equal, so which of equal
        // values an extreme returns depends on the order rows are seen in. Strings
        // compare byte for byte (UTF-8 byte order is code point order, Arrow's order).
        AggFunc::Min | AggFunc::Max => {
            e.ty.is_integer_backed()
                || matches!(
                    e.ty,
                    DataType::Char(_)
                        | DataType::Varchar
                        | DataType::Varbinary
                        | DataType::Decimal128 { .. }
                )
        }
    }
}

/// The string column (`CHAR`, `VARCHAR`, `VARBINARY`) an expression reads (the builder
/// only makes string expressions of columns and constants; constants are folded away
/// where a column is needed).
fn char_column<'a>(view: &PageView<'a>, e: &Expr) -> Result<ColumnView<'a>, EvalError> {
    match &e.kind {
        ExprKind::Column { index, .. } => Ok(view.column(*index)?),
        _ => Err(EvalError::PlanMismatch(format!("{e} is not a CHAR column"))),
    }
}

/// The `DECIMAL(p, s)` (128-bit) column an expression reads.
fn wide_column<'a>(view: &PageView<'a>, e: &Expr) -> Result<ColumnView<'a>, EvalError> {
    match &e.kind {
        ExprKind::Column { index, .. } if matches!(e.ty, DataType::Decimal128 { .. }) => {
            Ok(view.column(*index)?)
        }
        _ => Err(EvalError::PlanMismatch(format!(
            "{e} is not a DECIMAL(p, s) column"
        ))),
    }
}

/// Value `i` of a `DECIMAL(p, s)` column (the caller skips NULL rows, whose slot is 0).
#[inline]
fn wide_at(c: &ColumnView<'_>, i: usize) -> i128 {
    c.raw(i)
        .and_then(|b| <[u8; 16]>::try_from(b).ok())
        .map_or(0, i128::from_le_bytes)
}

/// A `CHAR` operand: a column or a constant.
enum CharOp<'x> {
    Col(ColumnView<'x>),
    Const(&'x [u8]),
}

impl<'x> CharOp<'x> {
    fn of(view: &PageView<'x>, e: &'x Expr) -> Result<CharOp<'x>, EvalError> {
        match &e.kind {
            ExprKind::Const(Const::Char(b)) => Ok(CharOp::Const(b)),
            _ => char_column(view, e).map(CharOp::Col),
        }
    }

    /// Value `i`: a `CHAR` column's stored bytes (padding included), a variable-length
    /// column's own bytes (empty for a NULL: callers skip NULL rows), or the constant.
    #[inline]
    fn at(&self, i: usize) -> &'x [u8] {
        match self {
            CharOp::Col(c) if c.column_type().is_variable() => c.bytes(i).unwrap_or(&[]),
            CharOp::Col(c) => c.raw(i).unwrap_or(&[]),
            CharOp::Const(b) => b,
        }
    }

    /// True for a VARCHAR / VARBINARY column.
    fn is_variable(&self) -> bool {
        matches!(self, CharOp::Col(c) if c.column_type().is_variable())
    }

    fn width(&self) -> usize {
        match self {
            CharOp::Col(c) => c.width(),
            CharOp::Const(_) => 0,
        }
    }

    /// A column's values back to back (a PAX minipage) and their width.
    fn minipage(&self) -> Option<(&'x [u8], usize)> {
        match self {
            CharOp::Col(c) if c.column_type().is_variable() => None,
            CharOp::Col(c) => c.contiguous().map(|d| (d, c.width())),
            CharOp::Const(_) => None,
        }
    }
}

enum Opnd {
    Buf(Vec<i64>),
    Const(i64),
}

impl Opnd {
    fn as_operand(&self) -> Operand<'_> {
        match self {
            Opnd::Buf(b) => Operand::Vec(b),
            Opnd::Const(c) => Operand::Const(*c),
        }
    }
}

/// Evaluation of one page.
struct Run<'r, 'a> {
    view: &'r PageView<'a>,
    n: usize,
    s: &'r mut Scratch,
    c: &'r mut WorkCounters,
}

impl<'r, 'a> Run<'r, 'a> {
    fn start(view: &'r PageView<'a>, s: &'r mut Scratch, c: &'r mut WorkCounters) -> Self {
        s.serial += 1;
        if s.decoded.len() < view.schema().len() {
            s.decoded.resize(view.schema().len(), Vec::new());
            s.decoded_at.resize(view.schema().len(), 0);
        }
        if s.reads.len() < view.schema().len() {
            s.reads.resize(view.schema().len(), 0);
        }
        Run {
            n: view.row_count(),
            view,
            s,
            c,
        }
    }

    fn take_sel(&mut self) -> Vec<u32> {
        let mut v = self.s.sels.pop().unwrap_or_default();
        v.clear();
        v
    }

    fn take_num(&mut self) -> Vec<i64> {
        let mut v = self.s.nums.pop().unwrap_or_default();
        v.clear();
        v
    }

    fn release(&mut self, o: Opnd) {
        if let Opnd::Buf(b) = o {
            self.s.nums.push(b);
        }
    }

    /// The rows passing `filter` (all rows without one).
    fn selection(&mut self, filter: Option<&Expr>, out: &mut Vec<u32>) -> Result<(), EvalError> {
        let mut all = self.take_sel();
        all.extend(0..self.n as u32);
        match filter {
            None => std::mem::swap(out, &mut all),
            Some(f) => self.filter(f, &all, out)?,
        }
        self.s.sels.push(all);
        Ok(())
    }

    /// A numeric column's values on this page, for `demand` selected rows. Inlined for
    /// the reason [`PageView::column`] is.
    #[inline(always)]
    fn num_col(&mut self, index: usize, demand: usize) -> Result<NumCol<'_>, EvalError> {
        let cv = self.view.column(index)?;
        self.s.note_col(index, demand);
        let w = cv.width();
        if matches!(cv.column_type(), ColumnType::Float32 | ColumnType::Float64) {
            // Floats as total-order keys, decoded once per page.
            let serial = self.s.serial;
            if self.s.decoded_at.get(index) != Some(&serial) {
                let buf = self
                    .s
                    .decoded
                    .get_mut(index)
                    .ok_or_else(|| EvalError::PlanMismatch("column out of range".into()))?;
                buf.clear();
                buf.extend(cv.iter_raw().map(|b| {
                    let mut le = [0u8; 8];
                    le[..w.min(8)].copy_from_slice(&b[..w.min(8)]);
                    crate::types::float_key(u64::from_le_bytes(le), w)
                }));
                self.s.decoded_at[index] = serial;
                self.c.touch(self.n, w);
            }
            return Ok(NumCol::Decoded(&self.s.decoded[index]));
        }
        if !cv.column_type().is_numeric() {
            return Err(EvalError::PlanMismatch(format!(
                "column {index} is {}, not numeric",
                cv.column_type()
            )));
        }
        if self.view.layout() == Layout::Pax
            && cv.stride() == w
            && (w == 4 || w == 8)
            && let Some(d) = cv.contiguous()
        {
            self.c.touch(demand, w);
            return Ok(if w == 4 {
                NumCol::Le4(d)
            } else {
                NumCol::Le8(d)
            });
        }
        let serial = self.s.serial;
        if self.s.decoded_at.get(index) == Some(&serial) {
            return Ok(NumCol::Decoded(&self.s.decoded[index]));
        }
        if demand * 4 >= self.n {
            let buf = self
                .s
                .decoded
                .get_mut(index)
                .ok_or_else(|| EvalError::PlanMismatch("column out of range".into()))?;
            cv.decode_i64_into(buf)?;
            self.s.decoded_at[index] = serial;
            self.c.touch(self.n, w);
            return Ok(NumCol::Decoded(&self.s.decoded[index]));
        }
        self.c.touch(demand, w);
        Ok(NumCol::Strided(cv))
    }

    fn operand(&mut self, e: &Expr, sel: &[u32]) -> Result<Opnd, EvalError> {
        if let Some(c) = e.as_int_const() {
            return Ok(Opnd::Const(c));
        }
        let mut b = self.take_num();
        self.eval_num(e, sel, &mut b)?;
        Ok(Opnd::Buf(b))
    }

    /// Counts what evaluating the numeric expression `e` on `rows` selected rows again
    /// would (it was just evaluated on them): the same column reads through
    /// [`Run::num_col`], whose counters know what this page already decoded, and one
    /// computed value a row per operator, as [`Run::eval_num`] counts them.
    fn count_num(&mut self, e: &Expr, rows: usize) -> Result<(), EvalError> {
        match &e.kind {
            ExprKind::Column { index, .. } => {
                self.num_col(*index, rows)?;
            }
            ExprKind::Const(Const::Int(_)) => {}
            ExprKind::Neg(x) => {
                self.count_num(x, rows)?;
                self.c.values_computed += rows as u64;
            }
            ExprKind::Rescale { expr, .. } => {
                self.count_operand(expr, rows)?;
                self.c.values_computed += rows as u64;
            }
            ExprKind::Arith { left, right, .. } => {
                self.count_operand(left, rows)?;
                self.count_operand(right, rows)?;
                self.c.values_computed += rows as u64;
            }
            _ => {
                return Err(EvalError::PlanMismatch(format!(
                    "{e} ({}) is not a numeric expression",
                    e.ty
                )));
            }
        }
        Ok(())
    }

    /// [`Run::count_num`] of an operand ([`Run::operand`]: a constant reads nothing).
    fn count_operand(&mut self, e: &Expr, rows: usize) -> Result<(), EvalError> {
        if e.as_int_const().is_some() {
            return Ok(());
        }
        self.count_num(e, rows)
    }

    /// Values of a numeric (or date) expression for the selected rows, in order.
    fn eval_num(&mut self, e: &Expr, sel: &[u32], out: &mut Vec<i64>) -> Result<(), EvalError> {
        match &e.kind {
            ExprKind::Column { index, .. } => {
                let col = self.num_col(*index, sel.len())?;
                kernels::gather(col, sel, out);
            }
            ExprKind::Const(Const::Int(v)) => {
                out.clear();
                out.resize(sel.len(), *v);
            }
            ExprKind::Neg(x) => {
                self.eval_num(x, sel, out)?;
                kernels::negate(out).map_err(|()| EvalError::Overflow {
                    expr: e.to_string(),
                })?;
                self.c.values_computed += sel.len() as u64;
            }
            ExprKind::Rescale { expr, by } => {
                let f = csd_table::decimal::pow10(*by).ok_or_else(|| EvalError::Overflow {
                    expr: e.to_string(),
                })?;
                let x = self.operand(expr, sel)?;
                let r = kernels::arith(
                    crate::plan::ArithOp::Mul,
                    x.as_operand(),
                    Operand::Const(f),
                    sel.len(),
                    out,
                );
                self.release(x);
                r.map_err(|_| EvalError::Overflow {
                    expr: e.to_string(),
                })?;
                self.c.values_computed += sel.len() as u64;
            }
            ExprKind::Arith { op, left, right } => {
                let l = self.operand(left, sel)?;
                let r = match self.operand(right, sel) {
                    Ok(r) => r,
                    Err(err) => {
                        self.release(l);
                        return Err(err);
                    }
                };
                let res = kernels::arith(*op, l.as_operand(), r.as_operand(), sel.len(), out);
                self.release(l);
                self.release(r);
                res.map_err(|zero| {
                    if zero {
                        EvalError::DivisionByZero {
                            expr: e.to_string(),
                        }
                    } else {
                        EvalError::Overflow {
                            expr: e.to_string(),
                        }
                    }
                })?;
                self.c.values_computed += sel.len() as u64;
            }
            _ => {
                return Err(EvalError::PlanMismatch(format!(
                    "{e} ({}) is not a numeric expression",
                    e.ty
                )));
            }
        }
        Ok(())
    }

    /// The rows of `sel` where `e` is not NULL (none of its columns is), into `out`.
    fn non_null(&mut self, e: &Expr, sel: &[u32], out: &mut Vec<u32>) -> Result<(), EvalError> {
        out.clear();
        out.extend_from_slice(sel);
        let mut cols = Vec::new();
        e.collect_columns(&mut cols);
        cols.sort_unstable();
        cols.dedup();
        for c in cols {
            let cv = self.view.column(c)?;
            if cv.may_have_nulls() {
                out.retain(|&i| !cv.is_null(i as usize));
            }
        }
        Ok(())
    }

    /// The rows of `sel` for which the predicate `e` is TRUE (not FALSE, not UNKNOWN),
    /// into `out`. A leaf that reads a nullable column runs on the rows where it is not
    /// NULL only (it is UNKNOWN on the others).
    fn filter(&mut self, e: &Expr, sel: &[u32], out: &mut Vec<u32>) -> Result<(), EvalError> {
        out.clear();
        if sel.is_empty() {
            return Ok(());
        }
        let leaf = matches!(
            e.kind,
            ExprKind::Cmp { .. }
                | ExprKind::InList { .. }
                | ExprKind::Like { .. }
                | ExprKind::LikeAny { .. }
                | ExprKind::Truth { .. }
                | ExprKind::Known { .. }
                | ExprKind::Column { .. }
        );
        if leaf && e.may_be_null() {
            let mut nn = self.take_sel();
            self.non_null(e, sel, &mut nn)?;
            let r = self.filter_known(e, &nn, out);
            self.s.sels.push(nn);
            return r;
        }
        self.filter_known(e, sel, out)
    }

    /// [`Run::filter`] on rows where the leaf `e` reads no NULL.
    fn filter_known(&mut self, e: &Expr, sel: &[u32], out: &mut Vec<u32>) -> Result<(), EvalError> {
        out.clear();
        if sel.is_empty() {
            return Ok(());
        }
        match &e.kind {
            ExprKind::IsNull { expr, negated } => {
                self.c.predicates_evaluated += sel.len() as u64;
                let mut nn = self.take_sel();
                self.non_null(expr, sel, &mut nn)?;
                if *negated {
                    out.extend_from_slice(&nn);
                } else {
                    kernels::difference_into(sel, &nn, out);
                }
                self.s.sels.push(nn);
            }
            ExprKind::Known { value, .. } => {
                if *value {
                    out.extend_from_slice(sel);
                }
            }
            ExprKind::Column { index, .. } if e.ty == DataType::Bool => {
                self.filter_truth(*index, true, sel, out)?;
            }
            ExprKind::Truth { expr, value } => match &expr.kind {
                ExprKind::Column { index, .. } if expr.ty == DataType::Bool => {
                    self.filter_truth(*index, *value, sel, out)?;
                }
                _ => {
                    return Err(EvalError::PlanMismatch(format!(
                        "{e}: a truth test reads a BOOLEAN column"
                    )));
                }
            },
            ExprKind::LikeAny {
                expr,
                needle,
                suffix,
                negated,
            } => {
                self.c.predicates_evaluated += sel.len() as u64;
                let x = CharOp::of(self.view, expr)?;
                self.s.note(expr, sel.len());
                let neg = *negated;
                let mut compared = 0u64;
                {
                    let compared = &mut compared;
                    filter_by(sel, out, |_, i| {
                        let v = x.at(i);
                        // Bytes the compare logic reads: the value (a search) or its
                        // tail (a suffix).
                        *compared += if *suffix {
                            v.len().min(needle.len()) as u64
                        } else {
                            v.len() as u64
                        };
                        let hit = if *suffix {
                            v.ends_with(needle)
                        } else {
                            crate::build::contains(v, needle)
                        };
                        hit != neg
                    });
                }
                self.c.values_touched += sel.len() as u64;
                self.c.bytes_touched += compared;
                self.c.var_bytes_compared += compared;
            }
            ExprKind::Const(Const::Bool(b)) => {
                if *b {
                    out.extend_from_slice(sel);
                }
            }
            ExprKind::And(terms) => self.filter_and(terms, sel, out)?,
            ExprKind::Or(terms) => self.filter_or(terms, sel, out)?,
            ExprKind::Not(inner) => {
                let mut m = self.take_sel();
                self.filter(inner, sel, &mut m)?;
                kernels::difference_into(sel, &m, out);
                self.s.sels.push(m);
            }
            ExprKind::Cmp { op, left, right } => self.filter_cmp(*op, left, right, sel, out)?,
            ExprKind::InList {
                expr,
                list,
                negated,
            } => self.filter_in_list(expr, list, *negated, sel, out)?,
            ExprKind::Like {
                expr,
                prefix,
                negated,
            } => {
                self.c.predicates_evaluated += sel.len() as u64;
                let x = CharOp::of(self.view, expr)?;
                self.s.note(expr, sel.len());
                let neg = *negated;
                if x.is_variable() {
                    // Bytes actually compared: the prefix, or the whole of a shorter value.
                    let mut compared = 0u64;
                    {
                        let compared = &mut compared;
                        filter_by(sel, out, |_, i| {
                            let v = x.at(i);
                            *compared += v.len().min(prefix.len()) as u64;
                            v.starts_with(prefix) != neg
                        });
                    }
                    self.c.values_touched += sel.len() as u64;
                    self.c.bytes_touched += compared;
                    self.c.var_bytes_compared += compared;
                } else {
                    self.c.touch(sel.len(), x.width().min(prefix.len()));
                    filter_by(sel, out, |_, i| x.at(i).starts_with(prefix) != neg);
                }
            }
            _ => {
                return Err(EvalError::PlanMismatch(format!(
                    "{e} ({}) is not a condition",
                    e.ty
                )));
            }
        }
        Ok(())
    }

    /// A conjunction: each term on the rows the previous ones kept, stopping when none
    /// are left.
    #[inline]
    fn filter_and(
        &mut self,
        terms: &[Expr],
        sel: &[u32],
        out: &mut Vec<u32>,
    ) -> Result<(), EvalError> {
        let mut cur = self.take_sel();
        cur.extend_from_slice(sel);
        let mut next = self.take_sel();
        let mut i = 0;
        while i < terms.len() && !cur.is_empty() {
            // Two comparisons bounding one column from both sides run as one pass (same
            // rows, same counters as running them in turn).
            match terms.get(i + 1).and_then(|t2| RangePair::of(&terms[i], t2)) {
                Some(r) => {
                    self.filter_range(r, &cur, &mut next)?;
                    i += 2;
                }
                None => {
                    self.filter(&terms[i], &cur, &mut next)?;
                    i += 1;
                }
            }
            std::mem::swap(&mut cur, &mut next);
        }
        std::mem::swap(out, &mut cur);
        self.s.sels.push(cur);
        self.s.sels.push(next);
        Ok(())
    }

    /// A disjunction: each term on the rows not yet selected, stopping when none are
    /// left.
    #[inline]
    fn filter_or(
        &mut self,
        terms: &[Expr],
        sel: &[u32],
        out: &mut Vec<u32>,
    ) -> Result<(), EvalError> {
        if self.filter_or_char_eq(terms, sel, out)? {
            return Ok(());
        }
        let mut remaining = self.take_sel();
        remaining.extend_from_slice(sel);
        let mut matched = self.take_sel();
        let mut tmp = self.take_sel();
        for t in terms {
            if remaining.is_empty() {
                break;
            }
            self.filter(t, &remaining, &mut matched)?;
            if matched.is_empty() {
                continue;
            }
            kernels::union_into(out, &matched, &mut tmp);
            std::mem::swap(out, &mut tmp);
            kernels::difference_into(&remaining, &matched, &mut tmp);
            std::mem::swap(&mut remaining, &mut tmp);
        }
        self.s.sels.push(remaining);
        self.s.sels.push(matched);
        self.s.sels.push(tmp);
        Ok(())
    }

    /// A disjunction of equalities of one `CHAR` minipage column with constants (TPC-H
    /// Q12's `l_shipmode = 'MAIL' OR l_shipmode = 'SHIP'`, Q19's brands and containers)
    /// in one pass over the rows, with the rows and work counters of evaluating it term
    /// by term ([`Run::filter_or`]); `false` (nothing done) for any other disjunction.
    fn filter_or_char_eq(
        &mut self,
        terms: &[Expr],
        sel: &[u32],
        out: &mut Vec<u32>,
    ) -> Result<bool, EvalError> {
        if terms.len() < 2 || terms.len() > 8 {
            return Ok(false);
        }
        let mut col = None;
        let mut consts: [&[u8]; 8] = [&[]; 8];
        for (t, k) in terms.iter().zip(&mut consts) {
            let ExprKind::Cmp {
                op: CmpOp::Eq,
                left,
                right,
            } = &t.kind
            else {
                return Ok(false);
            };
            let (c, b) = match (&left.kind, &right.kind) {
                (ExprKind::Column { index, .. }, ExprKind::Const(Const::Char(b)))
                | (ExprKind::Const(Const::Char(b)), ExprKind::Column { index, .. }) => (*index, b),
                _ => return Ok(false),
            };
            let fixed_char = |e: &Expr| matches!(e.ty, DataType::Char(_));
            if t.may_be_null() || !fixed_char(left) || !fixed_char(right) {
                return Ok(false);
            }
            if col.is_some_and(|c0| c0 != c) {
                return Ok(false);
            }
            col = Some(c);
            *k = b.as_slice();
        }
        let Some(c) = col else {
            return Ok(false);
        };
        let minipage = CharOp::Col(self.view.column(c)?).minipage();
        let Some((data, w)) = minipage.filter(|&(_, w)| (1..=16).contains(&w)) else {
            return Ok(false);
        };
        let consts = &consts[..terms.len()];
        let mut first = [0u64; 8];
        kernels::filter_char_first_of(data, w, consts, sel, out, &mut first[..terms.len()]);
        // Term `j` ran on the rows no earlier term took, and not at all once none were
        // left; each such run counts as `filter_cmp` counts it.
        let mut left = sel.len();
        for taken in &first[..terms.len()] {
            if left == 0 {
                break;
            }
            self.c.predicates_evaluated += left as u64;
            self.s.note_col(c, left);
            self.c.touch(left, w);
            self.c.touch(left, 0);
            left -= *taken as usize;
        }
        Ok(true)
    }

    /// A comparison: of strings (padded), of a column with a constant (the column
    /// kernel), of an expression with a constant, or of two expressions.
    #[inline]
    fn filter_cmp(
        &mut self,
        op: CmpOp,
        left: &Expr,
        right: &Expr,
        sel: &[u32],
        out: &mut Vec<u32>,
    ) -> Result<(), EvalError> {
        self.c.predicates_evaluated += sel.len() as u64;
        if left.ty.is_variable() || right.ty.is_variable() {
            let (l, r) = (CharOp::of(self.view, left)?, CharOp::of(self.view, right)?);
            self.s.note(left, sel.len());
            self.s.note(right, sel.len());
            let mut compared = 0u64;
            {
                let compared = &mut compared;
                filter_by(sel, out, |_, i| {
                    let (a, b) = (l.at(i), r.at(i));
                    let ord = a.cmp(b);
                    // Bytes the compare logic reads: up to the first difference.
                    let same = a.iter().zip(b).take_while(|(x, y)| x == y).count();
                    *compared += (same + 1).min(a.len().max(b.len())) as u64;
                    op.holds(ord)
                });
            }
            self.c.values_touched += sel.len() as u64;
            self.c.bytes_touched += compared;
            self.c.var_bytes_compared += compared;
        } else if matches!(left.ty, DataType::Decimal128 { .. }) {
            self.filter_cmp_wide(op, left, right, sel, out)?;
        } else if let DataType::Char(_) = left.ty {
            let (l, r) = (CharOp::of(self.view, left)?, CharOp::of(self.view, right)?);
            self.s.note(left, sel.len());
            self.s.note(right, sel.len());
            self.c.touch(sel.len(), l.width());
            self.c.touch(sel.len(), r.width());
            // `column = 'x'` / `column <> 'x'` on a minipage: one fixed-width equality.
            let eq = match (op, &l, &r) {
                (CmpOp::Eq | CmpOp::Ne, CharOp::Col(_), CharOp::Const(c))
                | (CmpOp::Eq | CmpOp::Ne, CharOp::Const(c), CharOp::Col(_)) => {
                    let col = if matches!(l, CharOp::Col(_)) { &l } else { &r };
                    col.minipage().map(|(data, w)| (data, w, *c))
                }
                _ => None,
            };
            if let Some((data, w, c)) = eq {
                kernels::filter_char_in(data, w, &[c], op == CmpOp::Ne, sel, out);
            } else {
                filter_by(sel, out, |_, i| op.holds(cmp_padded(l.at(i), r.at(i))));
            }
        } else if let (ExprKind::Column { index, .. }, Some(c)) = (&left.kind, right.as_int_const())
        {
            let col = self.num_col(*index, sel.len())?;
            kernels::filter_col_const(col, sel, op, c, out);
        } else if let Some(c) = right.as_int_const() {
            let mut a = self.take_num();
            self.eval_num(left, sel, &mut a)?;
            kernels::filter_vec_const(&a, sel, op, c, out);
            self.s.nums.push(a);
        } else {
            let mut a = self.take_num();
            self.eval_num(left, sel, &mut a)?;
            let mut b = self.take_num();
            self.eval_num(right, sel, &mut b)?;
            kernels::filter_vec_vec(&a, &b, sel, op, out);
            self.s.nums.push(a);
            self.s.nums.push(b);
        }
        Ok(())
    }

    /// A comparison of `DECIMAL(p, s)` (128-bit) values: a column with a constant at its
    /// scale or with a column of the same scale (the builder makes no other).
    fn filter_cmp_wide(
        &mut self,
        op: CmpOp,
        left: &Expr,
        right: &Expr,
        sel: &[u32],
        out: &mut Vec<u32>,
    ) -> Result<(), EvalError> {
        let l = wide_column(self.view, left)?;
        self.s.note(left, sel.len());
        self.c.touch(sel.len(), 16);
        match &right.kind {
            ExprKind::Const(Const::Wide(c)) => {
                let c = *c;
                filter_by(sel, out, |_, i| op.holds(wide_at(&l, i).cmp(&c)));
            }
            ExprKind::Const(Const::Int(c)) => {
                let c = i128::from(*c);
                filter_by(sel, out, |_, i| op.holds(wide_at(&l, i).cmp(&c)));
            }
            _ => {
                let r = wide_column(self.view, right)?;
                self.s.note(right, sel.len());
                self.c.touch(sel.len(), 16);
                filter_by(sel, out, |_, i| {
                    op.holds(wide_at(&l, i).cmp(&wide_at(&r, i)))
                });
            }
        }
        Ok(())
    }

    /// `expr [NOT] IN (list)`: of strings (padded) or of numbers.
    #[inline]
    fn filter_in_list(
        &mut self,
        expr: &Expr,
        list: &ConstSet,
        neg: bool,
        sel: &[u32],
        out: &mut Vec<u32>,
    ) -> Result<(), EvalError> {
        self.c.predicates_evaluated += sel.len() as u64;
        if expr.ty.is_variable() {
            let x = CharOp::of(self.view, expr)?;
            self.s.note(expr, sel.len());
            let mut compared = 0u64;
            {
                let compared = &mut compared;
                filter_by(sel, out, |_, i| {
                    let v = x.at(i);
                    *compared += v.len() as u64;
                    let hit = list.chars().any(|b| v == b);
                    hit != neg
                });
            }
            self.c.values_touched += sel.len() as u64;
            self.c.bytes_touched += compared;
            self.c.var_bytes_compared += compared;
        } else if let DataType::Char(_) = expr.ty {
            let x = CharOp::of(self.view, expr)?;
            self.s.note(expr, sel.len());
            self.c.touch(sel.len(), x.width());
            if let Some((data, w)) = x.minipage() {
                let consts: Vec<&[u8]> = list.chars().collect();
                kernels::filter_char_in(data, w, &consts, neg, sel, out);
                return Ok(());
            }
            filter_by(sel, out, |_, i| {
                let v = x.at(i);
                let hit = list.chars().any(|b| cmp_padded(v, b).is_eq());
                hit != neg
            });
        } else if let ExprKind::Column { index, .. } = expr.kind {
            // A column straight from the page: what `eval_num` reads, without the copy.
            let col = self.num_col(index, sel.len())?;
            kernels::filter_col_in(col, sel, list, neg, out);
        } else {
            let mut a = self.take_num();
            self.eval_num(expr, sel, &mut a)?;
            filter_by(sel, out, |j, _| list.contains_int(a[j]) != neg);
            self.s.nums.push(a);
        }
        Ok(())
    }

    /// The rows of `sel` whose `BOOLEAN` column `index` is `value` (NULL rows were
    /// taken out by the caller).
    fn filter_truth(
        &mut self,
        index: usize,
        value: bool,
        sel: &[u32],
        out: &mut Vec<u32>,
    ) -> Result<(), EvalError> {
        self.c.predicates_evaluated += sel.len() as u64;
        let cv = self.view.column(index)?;
        self.s.note_col(index, sel.len());
        self.c.touch(sel.len(), 1);
        filter_by(sel, out, |_, i| {
            cv.raw(i)
                .is_some_and(|b| b.first().is_some_and(|&x| x != 0))
                == value
        });
        Ok(())
    }

    /// `lo <= column <= hi` over `sel` in one pass, with the counters of evaluating the
    /// pair's two comparisons one after the other: the first on every row of `sel`, the
    /// second on the rows the first kept (if any).
    fn filter_range(
        &mut self,
        r: RangePair,
        sel: &[u32],
        out: &mut Vec<u32>,
    ) -> Result<(), EvalError> {
        self.c.predicates_evaluated += sel.len() as u64;
        let col = self.num_col(r.index, sel.len())?;
        let first = kernels::filter_col_range(col, sel, r.lo, r.hi, r.first_lower, out);
        if first > 0 {
            self.c.predicates_evaluated += first as u64;
            // The second comparison's column read, as counted when it runs on its own.
            self.num_col(r.index, first)?;
        }
        Ok(())
    }

    /// Appends the projection of the selected rows to `chunk`. Every expression is
    /// evaluated before anything is appended, so an error leaves `chunk` unchanged.
    fn project(
        &mut self,
        exprs: &[Expr],
        sel: &[u32],
        chunk: &mut crate::result::RowChunk,
    ) -> Result<(), EvalError> {
        if chunk.types().len() != exprs.len()
            || chunk.types().iter().zip(exprs).any(|(t, e)| *t != e.ty)
        {
            return Err(EvalError::PlanMismatch(
                "the row chunk's columns differ from the projection".into(),
            ));
        }
        let view = self.view;
        let mut bufs: Vec<Option<Vec<i64>>> = Vec::with_capacity(exprs.len());
        let mut chars: Vec<Option<CharOp<'_>>> = Vec::with_capacity(exprs.len());
        let mut stored: Vec<Option<ColumnView<'_>>> = Vec::with_capacity(exprs.len());
        for (k, e) in exprs.iter().enumerate() {
            let is_stored = matches!(chunk.columns_mut().get(k), Some(ChunkColumn::Stored { .. }));
            if is_stored {
                let ExprKind::Column { index, .. } = &e.kind else {
                    bufs.into_iter().flatten().for_each(|b| self.s.nums.push(b));
                    return Err(EvalError::PlanMismatch(format!(
                        "{e}: a table with NULLs or new types returns columns, not expressions"
                    )));
                };
                let cv = view.column(*index)?;
                self.s.note(e, sel.len());
                stored.push(Some(cv));
                bufs.push(None);
                chars.push(None);
                continue;
            }
            stored.push(None);
            if e.may_be_null() {
                bufs.into_iter().flatten().for_each(|b| self.s.nums.push(b));
                return Err(EvalError::PlanMismatch(format!(
                    "{e} may be NULL: only plain columns of such a table are returned"
                )));
            }
            if let DataType::Char(_) = e.ty {
                let op = CharOp::of(view, e)?;
                self.s.note(e, sel.len());
                self.c.touch(sel.len(), op.width());
                chars.push(Some(op));
                bufs.push(None);
            } else {
                let mut b = self.take_num();
                if let Err(err) = self.eval_num(e, sel, &mut b) {
                    bufs.into_iter().flatten().for_each(|b| self.s.nums.push(b));
                    return Err(err);
                }
                bufs.push(Some(b));
                chars.push(None);
            }
        }
        let mut var_bytes = 0usize;
        for (k, col) in chunk.columns_mut().iter_mut().enumerate() {
            if let (ChunkColumn::Stored(st), Some(Some(cv))) = (&mut *col, stored.get(k)) {
                let (touched, heap) = st.push_rows(cv, sel);
                self.c.values_touched += sel.len() as u64;
                self.c.bytes_touched += touched as u64;
                var_bytes += heap;
                continue;
            }
            match (col, bufs.get(k), chars.get(k)) {
                (ChunkColumn::Num(v), Some(Some(b)), _) => v.extend_from_slice(b),
                (ChunkColumn::Char { width, bytes }, _, Some(Some(op))) => {
                    for &i in sel {
                        let v = op.at(i as usize);
                        let n = v.len().min(*width);
                        bytes.extend_from_slice(&v[..n]);
                        bytes.resize(bytes.len() + (*width - n), b' ');
                    }
                }
                _ => {
                    // types were checked above; keep the columns aligned regardless
                }
            }
        }
        chunk.add_rows(sel.len());
        self.c.results_written += sel.len() as u64;
        let row_bytes: usize = exprs.iter().map(|e| e.ty.wire_width()).sum();
        self.c.result_bytes += (sel.len() * row_bytes + var_bytes) as u64;
        for b in bufs.into_iter().flatten() {
            self.s.nums.push(b);
        }
        Ok(())
    }
}

/// Two ANDed comparisons of one numeric column with integer constants that bound it from
/// both sides (`c >= a AND c < b`, in either order): evaluated in one pass.
#[derive(Clone, Copy, Debug)]
struct RangePair {
    index: usize,
    lo: i64,
    hi: i64,
    /// The first comparison is the lower bound.
    first_lower: bool,
}

impl RangePair {
    fn of(t1: &Expr, t2: &Expr) -> Option<RangePair> {
        let (i1, b1) = Self::bound(t1)?;
        let (i2, b2) = Self::bound(t2)?;
        if i1 != i2 {
            return None;
        }
        match (b1, b2) {
            (Bound::Lower(lo), Bound::Upper(hi)) => Some(RangePair {
                index: i1,
                lo,
                hi,
                first_lower: true,
            }),
            (Bound::Upper(hi), Bound::Lower(lo)) => Some(RangePair {
                index: i1,
                lo,
                hi,
                first_lower: false,
            }),
            _ => None,
        }
    }

    /// `column op constant` on a numeric column as an inclusive bound.
    fn bound(e: &Expr) -> Option<(usize, Bound)> {
        let ExprKind::Cmp { op, left, right } = &e.kind else {
            return None;
        };
        if !left.ty.is_integer_backed() || left.may_be_null() {
            return None;
        }
        let ExprKind::Column { index, .. } = &left.kind else {
            return None;
        };
        let c = right.as_int_const()?;
        let b = match op {
            CmpOp::Ge => Bound::Lower(c),
            CmpOp::Gt => Bound::Lower(c.checked_add(1)?),
            CmpOp::Le => Bound::Upper(c),
            CmpOp::Lt => Bound::Upper(c.checked_sub(1)?),
            CmpOp::Eq | CmpOp::Ne => return None,
        };
        Some((*index, b))
    }
}

/// One side of a range.
#[derive(Clone, Copy, Debug)]
enum Bound {
    Lower(i64),
    Upper(i64),
}
