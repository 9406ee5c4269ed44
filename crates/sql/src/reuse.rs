//! One device scan for rows that two parts of a plan ask of the device alike.
//!
//! TPC-H Q11 sums the stock value of one nation's suppliers twice: once per part and
//! once in all (the `HAVING` threshold's scalar subquery). DataFusion plans two copies
//! of the join, so the device scans PARTSUPP twice with the same program: no static
//! filter, and the same runtime key set of 396 suppliers from two identical build
//! sides. [`ReusedDeviceScans`] groups the device scans of a plan that hand over rows
//! of one table with one static filter, lets each read the union of the group's
//! columns (a scan's own columns keep their positions; a projection above gives its
//! parent the schema it had), and gives the group one [`ReuseSlot`]. At run time,
//! once a scan's runtime filters are complete and its device program is final, it
//! looks in the slot: a scan of the group that already ran the *same* program (equal
//! filter expression, runtime terms included) left its rows there, and this scan hands
//! those over instead of scanning again, as a database that keeps an intermediate
//! result would. Otherwise it scans and leaves its rows for the others. The modeled
//! figures are those of the scans that ran (a reused scan reads no page and adds no
//! report to the scan log).
//!
//! A partial aggregation the device would run over the same rows joins a group too
//! (TPC-H Q17: lineitem's rows of 204 parts go to a join with part, and lineitem
//! grouped by `l_partkey` over the same parts goes to a semi join above it): if a scan
//! of the group has already read its program's rows, DataFusion's own partial
//! aggregate, kept beside the device's ([`crate::exec::HostPartial`]), computes the
//! same states over them in the host, and the device scans lineitem once. Only
//! aggregations that always run after such a scan take part (the probe side of a hash
//! join whose build side holds it: see [`aggregations_after_rows`]), so which scans
//! ran, and every modeled figure, does not depend on the threads' timing.
//!
//! A scan whose filter *implies* the filter of a scan that always ran before it takes
//! that scan's rows too, filtered again in the host by its own program (TPC-H Q2: the
//! outer query reads PARTSUPP for 747 parts of one size and type; its subquery, for
//! one region's suppliers and the 460 parts the outer joins kept, read all of
//! PARTSUPP again, 10,811 pages for 642 rows). "Implies" is
//! [`csd_query::imply::implies`] (conservative: equal terms, a key set within a key
//! set or a range, a range within a range); "always ran before" is the order of a hash
//! join, as for aggregations (the earlier scan on the build side, the later one under
//! the probe side), so which scan ran, and every modeled figure, does not depend on
//! the threads' timing. The host filter ([`HostFilter`]) evaluates comparisons of
//! integer-ordered columns with constants or each other and integer `[NOT] IN` lists,
//! with SQL's NULL semantics; a program with any other term scans as before. Such a
//! scan may even have another static filter than the earlier one, when its own implies
//! the earlier's: it then joins the earlier scan's group, and the earlier scan also
//! reads the columns that filter reads (within [`MAX_WIDEN`]). TPC-H Q21 reads
//! LINEITEM for EXISTS (the late orders' keys) and again for NOT EXISTS (lines with
//! `l_receiptdate > l_commitdate` of a subset of those keys): the first also reads the
//! two dates, and the second takes its rows filtered (247,700 of 356,800).
//!
//! Choices:
//! * What is compared is the device program itself ([`csd_query::plan::Expr`]'s
//!   equality, or implication as above), so two scans whose runtime filters hold
//!   unrelated keys never share; filters applied in the host stay each reader's own
//!   (applied above the rows).
//! * Scans are widened only where each member lacks at most [`MAX_WIDEN`] of the
//!   union's columns (Q11: one), so a group that never shares (different runtime keys)
//!   costs little; scans with a limit or a side of a FLIXR join never join a group.
//! * Rows are kept until the query ends, up to [`KEEP_BYTES`] per scan; a larger
//!   output is not kept (the other scans then scan as before).
//! * Which scan runs first is the plan's order (a scalar subquery runs before the plan
//!   that reads its value); two scans running at once both scan.
//! * `CSD_SCAN_REUSE=off` turns the rule off (for a comparison).

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use csd_query::DataType as QueryType;
use csd_query::plan::{CmpOp, ConstSet, Expr, ExprKind};
use datafusion::arrow::array::{Array, AsArray, BooleanArray, Int64Array, RecordBatch};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Int8Type, Int16Type, Int32Type, Int64Type, TimeUnit,
    TimestampMicrosecondType,
};
use datafusion::arrow::error::ArrowError;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::projection::ProjectionExec;

use crate::array::ArrayScanExec;
use crate::exec::{DeviceScanExec, ScanOutput};

/// The environment variable that turns [`ReusedDeviceScans`] off (`off`); `on` (the
/// default when unset) keeps it.
pub const SWITCH: &str = "CSD_SCAN_REUSE";

/// Most columns a scan of a group reads beyond its own.
pub const MAX_WIDEN: usize = 2;

/// Most bytes of one scan's rows kept for the others (64 MiB).
pub const KEEP_BYTES: usize = 64 << 20;

/// Groups device scans that may share their rows (see the [module docs](self)).
#[derive(Debug, Default)]
pub struct ReusedDeviceScans;

/// The rows one scan of a group handed over: its table's first LBA, its device
/// program's filter, the table columns of its rows, the rows, and the scan's place in
/// its group.
struct Kept {
    first_lba: u64,
    filter: Option<csd_query::plan::Expr>,
    columns: Vec<usize>,
    batches: Arc<Vec<RecordBatch>>,
    owner: usize,
}

/// Rows found for a scan: the kept batches and the positions of its columns in them.
pub(crate) type Found = (Arc<Vec<RecordBatch>>, Vec<usize>);

/// Where the scans of one group leave their rows for each other, and which of them
/// always runs before which (by their places in the group).
#[derive(Default)]
pub struct ReuseSlot {
    kept: Mutex<Vec<Kept>>,
    /// `(earlier, later)`: `earlier` is on the build side of a hash join whose probe
    /// side holds `later`, so it has ended (and left its rows) before `later` starts.
    ordered: Vec<(usize, usize)>,
}

impl fmt::Debug for ReuseSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self
            .kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        write!(f, "ReuseSlot({n} kept, {} ordered)", self.ordered.len())
    }
}

impl ReuseSlot {
    /// A slot whose members run in the order `ordered` gives (`(earlier, later)` pairs).
    pub(crate) fn new(ordered: Vec<(usize, usize)>) -> ReuseSlot {
        ReuseSlot {
            kept: Mutex::default(),
            ordered,
        }
    }

    /// Rows for group member `member`, a scan of table `first_lba` with program filter
    /// `filter` and columns `columns`, as the kept rows and the positions of `columns`
    /// in them: the rows of an earlier scan that ran the same filter, or else of one
    /// that always runs before `member` and whose filter `filter` implies
    /// ([`csd_query::imply`]), filtered again here by `filter` (when this host filter
    /// can evaluate it: [`HostFilter`]).
    pub(crate) fn find(
        &self,
        first_lba: u64,
        filter: &Option<csd_query::plan::Expr>,
        columns: &[usize],
        member: usize,
    ) -> Result<Option<Found>> {
        let positions = |k: &Kept, cols: &[usize]| -> Option<Vec<usize>> {
            cols.iter()
                .map(|c| k.columns.iter().position(|x| x == c))
                .collect()
        };
        let (batches, at, residual) = {
            let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
            let same = kept
                .iter()
                .filter(|k| k.first_lba == first_lba && &k.filter == filter)
                .find_map(|k| Some((k.batches.clone(), positions(k, columns)?)));
            if let Some((batches, at)) = same {
                return Ok(Some((batches, at)));
            }
            let Some(f) = filter else {
                return Ok(None);
            };
            let wider = kept.iter().find_map(|k| {
                let before = self.ordered.contains(&(k.owner, member));
                let implied = match &k.filter {
                    Some(g) => csd_query::imply::implies(f, g),
                    None => true,
                };
                if k.first_lba != first_lba || !before || !implied {
                    return None;
                }
                let at = positions(k, columns)?;
                Some((k.batches.clone(), at, HostFilter::new(f, &k.columns)?))
            });
            let Some(found) = wider else {
                return Ok(None);
            };
            found
        };
        let mut filtered = Vec::with_capacity(batches.len());
        for b in batches.iter() {
            match residual.apply(b)? {
                Some(b) if b.num_rows() > 0 => filtered.push(b),
                Some(_) => {}
                // A column of a type it does not read: the scan runs on the device.
                None => return Ok(None),
            }
        }
        Ok(Some((Arc::new(filtered), at)))
    }

    /// Leaves the rows of group member `owner` for the others.
    pub(crate) fn keep(
        &self,
        first_lba: u64,
        filter: Option<csd_query::plan::Expr>,
        columns: Vec<usize>,
        batches: Vec<RecordBatch>,
        owner: usize,
    ) {
        self.kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Kept {
                first_lba,
                filter,
                columns,
                batches: Arc::new(batches),
                owner,
            });
    }
}

/// A device program's filter evaluated in the host over rows an earlier scan kept
/// (Arrow batches of its columns): a conjunction of comparisons of an integer-ordered
/// column (an integer, a decimal in units of its scale, a date, a timestamp) with an
/// integer constant or with another such column, and integer `[NOT] IN` lists, as the
/// device would: a row is kept where every term is TRUE (a NULL makes a term UNKNOWN).
/// Any other filter is not evaluated here (the scan then runs on the device).
#[derive(Debug)]
struct HostFilter(Vec<HostTerm>);

/// One term of a [`HostFilter`], on positions of the kept rows' columns.
#[derive(Debug)]
enum HostTerm {
    /// `column op constant`.
    Const(usize, CmpOp, i64),
    /// `column op column`.
    Columns(usize, CmpOp, usize),
    /// `column [NOT] IN keys`.
    In(usize, ConstSet, bool),
}

impl HostFilter {
    /// The filter `f` over rows whose columns are the table columns `columns`; `None`
    /// when a term is of another kind or reads a column the rows lack.
    fn new(f: &Expr, columns: &[usize]) -> Option<HostFilter> {
        let at = |e: &Expr| match &e.kind {
            ExprKind::Column { index, .. }
                if matches!(
                    e.ty,
                    QueryType::Int
                        | QueryType::Decimal { .. }
                        | QueryType::Date
                        | QueryType::Timestamp
                ) =>
            {
                columns.iter().position(|c| c == index)
            }
            _ => None,
        };
        let mut terms = Vec::new();
        let mut todo = vec![f];
        while let Some(e) = todo.pop() {
            match &e.kind {
                ExprKind::And(t) => todo.extend(t.iter()),
                ExprKind::Cmp { op, left, right } => {
                    terms.push(match (left.as_int_const(), right.as_int_const()) {
                        (None, Some(v)) => HostTerm::Const(at(left)?, *op, v),
                        (Some(v), None) => HostTerm::Const(at(right)?, op.flip(), v),
                        (None, None) if left.ty == right.ty => {
                            HostTerm::Columns(at(left)?, *op, at(right)?)
                        }
                        _ => return None,
                    })
                }
                ExprKind::InList {
                    expr,
                    list,
                    negated,
                } if list.ints().is_some() => {
                    terms.push(HostTerm::In(at(expr)?, list.clone(), *negated))
                }
                _ => return None,
            }
        }
        Some(HostFilter(terms))
    }

    /// The rows of `batch` the filter keeps; `None` when a column it reads is of an
    /// Arrow type it does not read.
    fn apply(&self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        let mut keep = vec![true; batch.num_rows()];
        for term in &self.0 {
            let col = |i: usize| int_values(batch.column(i).as_ref());
            match term {
                HostTerm::Const(c, op, v) => {
                    let Some(a) = col(*c) else { return Ok(None) };
                    for (k, x) in keep.iter_mut().zip(a.iter()) {
                        *k &= x.is_some_and(|x| op.test(x, *v));
                    }
                }
                HostTerm::Columns(l, op, r) => {
                    let (Some(a), Some(b)) = (col(*l), col(*r)) else {
                        return Ok(None);
                    };
                    for ((k, x), y) in keep.iter_mut().zip(a.iter()).zip(b.iter()) {
                        *k &= matches!((x, y), (Some(x), Some(y)) if op.test(x, y));
                    }
                }
                HostTerm::In(c, set, negated) => {
                    let Some(a) = col(*c) else { return Ok(None) };
                    for (k, x) in keep.iter_mut().zip(a.iter()) {
                        *k &= x.is_some_and(|x| set.contains_int(x) != *negated);
                    }
                }
            }
        }
        let mask = BooleanArray::from(keep);
        Ok(Some(filter_record_batch(batch, &mask)?))
    }
}

/// An integer-ordered Arrow column's values as `i64` (NULLs kept): integers, dates in
/// days, timestamps in microseconds and decimals in units of their scale, as the device
/// holds them; `None` for another type or a decimal beyond `i64`.
fn int_values(a: &dyn Array) -> Option<Int64Array> {
    Some(match a.data_type() {
        DataType::Int8 => a.as_primitive::<Int8Type>().unary(i64::from),
        DataType::Int16 => a.as_primitive::<Int16Type>().unary(i64::from),
        DataType::Int32 => a.as_primitive::<Int32Type>().unary(i64::from),
        DataType::Int64 => a.as_primitive::<Int64Type>().clone(),
        DataType::Date32 => a.as_primitive::<Date32Type>().unary(i64::from),
        DataType::Timestamp(TimeUnit::Microsecond, _) => a
            .as_primitive::<TimestampMicrosecondType>()
            .reinterpret_cast::<Int64Type>(),
        DataType::Decimal128(_, _) => a
            .as_primitive::<Decimal128Type>()
            .try_unary(|v| {
                i64::try_from(v).map_err(|_| ArrowError::ComputeError("beyond i64".into()))
            })
            .ok()?,
        _ => return None,
    })
}

/// A scan of a group: the plan node, the columns it reads beyond its own, the slot and
/// its place in the group.
type Member = (Arc<dyn ExecutionPlan>, Vec<usize>, Arc<ReuseSlot>, usize);

/// A scan that may join a group: rows of a table, no limit, no FLIXR join side.
fn candidate(s: &DeviceScanExec) -> Option<&[usize]> {
    match &s.output {
        ScanOutput::Rows(cols) if s.limit.is_none() && s.join.is_none() => Some(cols),
        _ => None,
    }
}

/// A partial aggregation that may take a group's rows (computing its states in the
/// host): the columns it would read as rows.
fn aggregate_candidate(s: &DeviceScanExec) -> Option<&[usize]> {
    match &s.output {
        ScanOutput::Partial(_) if s.limit.is_none() && s.join.is_none() => s.host_partial_columns(),
        _ => None,
    }
}

/// Two scans of the same rows before their runtime filters: one table of one device,
/// one static filter.
fn same_rows(a: &DeviceScanExec, b: &DeviceScanExec) -> bool {
    a.table.first_lba == b.table.first_lba
        && Arc::ptr_eq(&a.device, &b.device)
        && a.program.filter == b.program.filter
}

/// Whether scan of rows `later` may take the rows scan of rows `earlier` kept, filtered,
/// though their static filters differ: one table of one device, `later`'s static filter
/// implies `earlier`'s and the host can evaluate it ([`HostFilter`]). Returns the table
/// columns that filter reads (which `earlier` must read too).
fn narrower_rows(earlier: &DeviceScanExec, later: &DeviceScanExec) -> Option<Vec<usize>> {
    candidate(earlier)?;
    candidate(later)?;
    let f = later.program.filter.as_ref()?;
    let implied = match &earlier.program.filter {
        Some(g) => csd_query::imply::implies(f, g),
        None => true,
    };
    if earlier.table.first_lba != later.table.first_lba
        || !Arc::ptr_eq(&earlier.device, &later.device)
        || !implied
    {
        return None;
    }
    let mut read = Vec::new();
    f.collect_columns(&mut read);
    read.sort_unstable();
    read.dedup();
    HostFilter::new(f, &read)?;
    Some(read)
}

/// The device scans under `plan` (not into arrays) that `keep` accepts.
fn scans_under(
    plan: &Arc<dyn ExecutionPlan>,
    keep: fn(&DeviceScanExec) -> Option<&[usize]>,
) -> Result<Vec<Arc<dyn ExecutionPlan>>> {
    let mut out = Vec::new();
    plan.apply(|node| {
        if node.downcast_ref::<ArrayScanExec>().is_some() {
            return Ok(TreeNodeRecursion::Jump);
        }
        if node
            .downcast_ref::<DeviceScanExec>()
            .is_some_and(|s| keep(s).is_some())
        {
            out.push(node.clone());
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(out)
}

/// Pairs `[earlier, later]` of device scans where `earlier` is a scan of rows on the
/// build side of a hash join whose probe side holds `later` (a scan of rows or a
/// partial aggregation). A hash join polls its probe side only once its build side is
/// complete (collected whole, or, partitioned, a partition of a repartition that ends
/// only with its input), so `earlier` has ended, and left its rows, by then; `later`
/// finds them whatever the threads do, and the modeled figures stay those of one order.
fn ordered_scans(plan: &Arc<dyn ExecutionPlan>) -> Result<Vec<[Arc<dyn ExecutionPlan>; 2]>> {
    let mut out = Vec::new();
    plan.apply(|node| {
        if node.downcast_ref::<ArrayScanExec>().is_some() {
            return Ok(TreeNodeRecursion::Jump);
        }
        if let Some(j) = node.downcast_ref::<HashJoinExec>() {
            let earlier = scans_under(j.left(), candidate)?;
            let later = scans_under(j.right(), |s| {
                candidate(s).or_else(|| aggregate_candidate(s))
            })?;
            for e in &earlier {
                out.extend(later.iter().map(|l| [e.clone(), l.clone()]));
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(out)
}

/// The partial aggregations that always run after a scan of rows of the same table
/// and static filter ([`ordered_scans`]).
fn aggregations_after_rows(ordered: &[[Arc<dyn ExecutionPlan>; 2]]) -> Vec<Arc<dyn ExecutionPlan>> {
    let mut out: Vec<Arc<dyn ExecutionPlan>> = Vec::new();
    for [e, l] in ordered {
        let (Some(rows), Some(agg)) = (
            e.downcast_ref::<DeviceScanExec>(),
            l.downcast_ref::<DeviceScanExec>(),
        ) else {
            continue;
        };
        if aggregate_candidate(agg).is_some()
            && same_rows(rows, agg)
            && !out.iter().any(|o| Arc::ptr_eq(o, l))
        {
            out.push(l.clone());
        }
    }
    out
}

impl PhysicalOptimizerRule for ReusedDeviceScans {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let var = std::env::var(SWITCH).ok();
        if !crate::keyset::switch(SWITCH, var.as_deref())? {
            return Ok(plan);
        }
        // Candidate scans grouped by table and static filter, in plan order: scans of
        // rows, and partial aggregations that run after one of them.
        let ordered_scans = ordered_scans(&plan)?;
        let after_rows = aggregations_after_rows(&ordered_scans);
        let is_aggregation =
            |n: &Arc<dyn ExecutionPlan>| after_rows.iter().any(|a| Arc::ptr_eq(a, n));
        let mut groups: Vec<Vec<Arc<dyn ExecutionPlan>>> = Vec::new();
        plan.apply(|node| {
            if node.downcast_ref::<ArrayScanExec>().is_some() {
                return Ok(TreeNodeRecursion::Jump);
            }
            let Some(s) = node.downcast_ref::<DeviceScanExec>() else {
                return Ok(TreeNodeRecursion::Continue);
            };
            if candidate(s).is_none() && !is_aggregation(node) {
                return Ok(TreeNodeRecursion::Continue);
            }
            let same = |o: &Arc<dyn ExecutionPlan>| {
                o.downcast_ref::<DeviceScanExec>()
                    .is_some_and(|o| same_rows(o, s))
            };
            match groups.iter_mut().find(|g| g.first().is_some_and(same)) {
                Some(g) => g.push(node.clone()),
                None => groups.push(vec![node.clone()]),
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        // The columns of a scan of a group: what it hands over (an aggregation: the rows
        // it would read).
        let cols = |n: &Arc<dyn ExecutionPlan>| {
            n.downcast_ref::<DeviceScanExec>()
                .and_then(|s| candidate(s).or_else(|| aggregate_candidate(s)))
                .map(<[usize]>::to_vec)
                .unwrap_or_default()
        };
        // Each scan of rows of a group reads the union of the group's columns and those
        // the static filters of the scans that take its rows filtered (`needs`), if it
        // lacks at most MAX_WIDEN of them (an aggregation reads none itself): the
        // columns each reads beyond its own.
        let extras = |g: &[Arc<dyn ExecutionPlan>],
                      needs: &[(Arc<dyn ExecutionPlan>, Vec<usize>)]| {
            let mut union: Vec<usize> = Vec::new();
            for c in g.iter().flat_map(cols) {
                if !union.contains(&c) {
                    union.push(c);
                }
            }
            let mut out = Vec::with_capacity(g.len());
            for n in g {
                if is_aggregation(n) {
                    out.push(Vec::new());
                    continue;
                }
                let own = cols(n);
                let mut extra: Vec<usize> =
                    union.iter().copied().filter(|c| !own.contains(c)).collect();
                for (_, need) in needs.iter().filter(|(e, _)| Arc::ptr_eq(e, n)) {
                    for &c in need {
                        if !own.contains(&c) && !extra.contains(&c) {
                            extra.push(c);
                        }
                    }
                }
                if extra.len() > MAX_WIDEN {
                    return None;
                }
                out.push(extra);
            }
            Some(out)
        };
        // A scan of rows whose static filter implies that of a scan of rows of another
        // group that always runs before it joins that group, when the earlier scan can
        // also read the columns that filter reads and the host can evaluate it (TPC-H
        // Q21: lineitem for the orders' keys, then again with `l_receiptdate >
        // l_commitdate` for a subset of those keys).
        let mut needs: Vec<(Arc<dyn ExecutionPlan>, Vec<usize>)> = Vec::new();
        for [e, l] in &ordered_scans {
            let group_of = |n: &Arc<dyn ExecutionPlan>| {
                groups
                    .iter()
                    .position(|g| g.iter().any(|m| Arc::ptr_eq(m, n)))
            };
            let (Some(ge), Some(gl)) = (group_of(e), group_of(l)) else {
                continue;
            };
            let (Some(es), Some(ls)) = (
                e.downcast_ref::<DeviceScanExec>(),
                l.downcast_ref::<DeviceScanExec>(),
            ) else {
                continue;
            };
            let Some(read) = narrower_rows(es, ls) else {
                continue;
            };
            if ge == gl || is_aggregation(l) {
                continue;
            }
            let mut merged = groups[ge].clone();
            merged.extend(groups[gl].iter().cloned());
            let mut more = needs.clone();
            more.push((e.clone(), read));
            if extras(&merged, &more).is_some() {
                groups[ge] = merged;
                groups[gl].clear();
                needs = more;
            }
        }
        let mut members: Vec<Member> = Vec::new();
        let has_rows = |g: &Vec<Arc<dyn ExecutionPlan>>| g.iter().any(|n| !is_aggregation(n));
        for g in groups.into_iter().filter(|g| g.len() > 1 && has_rows(g)) {
            let Some(extra) = extras(&g, &needs) else {
                continue;
            };
            let mut ordered = Vec::new();
            for [e, l] in &ordered_scans {
                let place = |n: &Arc<dyn ExecutionPlan>| g.iter().position(|m| Arc::ptr_eq(m, n));
                if let (Some(e), Some(l)) = (place(e), place(l)) {
                    ordered.push((e, l));
                }
            }
            let slot = Arc::new(ReuseSlot::new(ordered));
            for (i, (n, extra)) in g.into_iter().zip(extra).enumerate() {
                members.push((n, extra, slot.clone(), i));
            }
        }
        if members.is_empty() {
            return Ok(plan);
        }
        plan.transform_down(|node| {
            let Some((_, extra, slot, member)) =
                members.iter().find(|(n, ..)| Arc::ptr_eq(n, &node))
            else {
                return Ok(Transformed::no(node));
            };
            let Some(scan) = node.downcast_ref::<DeviceScanExec>() else {
                return Ok(Transformed::no(node));
            };
            if matches!(scan.output, ScanOutput::Partial(_)) {
                let s: Arc<dyn ExecutionPlan> = Arc::new(scan.with_reuse(slot.clone(), *member));
                return Ok(Transformed::new(s, true, TreeNodeRecursion::Jump));
            }
            let own = scan.schema.fields().len();
            let widened: Arc<dyn ExecutionPlan> =
                Arc::new(scan.widened(extra, slot.clone(), *member)?);
            if extra.is_empty() {
                return Ok(Transformed::new(widened, true, TreeNodeRecursion::Jump));
            }
            // The parent sees the scan's own columns, in their places.
            let exprs = scan
                .schema
                .fields()
                .iter()
                .take(own)
                .enumerate()
                .map(|(i, f)| {
                    let e: Arc<dyn datafusion::physical_expr::PhysicalExpr> =
                        Arc::new(Column::new(f.name(), i));
                    (e, f.name().clone())
                })
                .collect::<Vec<_>>();
            let p = ProjectionExec::try_new(exprs, widened)
                .map_err(|e| DataFusionError::Internal(format!("reused scan: {e}")))?;
            Ok(Transformed::new(Arc::new(p), true, TreeNodeRecursion::Jump))
        })
        .data()
    }

    fn name(&self) -> &str {
        "csd_reused_device_scans"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use csd_query::plan::Const;
    use datafusion::arrow::array::ArrayRef;
    use datafusion::arrow::datatypes::{Field, Schema};
    use proptest::prelude::*;

    fn batch(cols: &[usize]) -> RecordBatch {
        let fields: Vec<Field> = cols
            .iter()
            .map(|c| Field::new(format!("c{c}"), DataType::Int64, false))
            .collect();
        let arrays: Vec<ArrayRef> = cols
            .iter()
            .map(|&c| Arc::new(Int64Array::from(vec![c as i64; 3])) as ArrayRef)
            .collect();
        RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).expect("batch")
    }

    /// A kept scan answers a reader of the same table and filter whose columns it holds,
    /// with their positions; another table, another filter or a missing column does not.
    #[test]
    fn kept_rows_answer_only_the_same_program_with_their_columns() {
        let slot = ReuseSlot::default();
        let f = Some(Expr::constant(Const::Int(7), QueryType::Int));
        slot.keep(64, f.clone(), vec![3, 1, 2], vec![batch(&[3, 1, 2])], 0);
        let found = |f: &Option<Expr>, cols: &[usize]| slot.find(64, f, cols, 1).expect("find");
        let (b, at) = found(&f, &[1, 2]).expect("same program");
        assert_eq!(at, vec![1, 2]);
        assert_eq!(b.len(), 1);
        assert_eq!(found(&f, &[2, 3, 1]).expect("reordered").1, vec![2, 0, 1]);
        assert!(found(&f, &[0]).is_none(), "a column it lacks");
        assert!(
            slot.find(65, &f, &[1], 1).expect("find").is_none(),
            "another table"
        );
        let g = Some(Expr::constant(Const::Int(8), QueryType::Int));
        assert!(found(&g, &[1]).is_none(), "another filter");
        assert!(found(&None, &[1]).is_none(), "no filter");
    }

    fn column(index: usize) -> Expr {
        Expr::new(
            ExprKind::Column {
                index,
                name: format!("c{index}"),
                nullable: true,
            },
            QueryType::Int,
        )
    }

    fn cmp(op: CmpOp, index: usize, v: i64) -> Expr {
        Expr::new(
            ExprKind::Cmp {
                op,
                left: Box::new(column(index)),
                right: Box::new(Expr::constant(Const::Int(v), QueryType::Int)),
            },
            QueryType::Bool,
        )
    }

    fn keys(index: usize, mut k: Vec<i64>, negated: bool) -> Expr {
        k.sort_unstable();
        k.dedup();
        Expr::new(
            ExprKind::InList {
                expr: Box::new(column(index)),
                list: ConstSet::of_sorted_ints(Arc::from(k)),
                negated,
            },
            QueryType::Bool,
        )
    }

    fn and(t: Vec<Expr>) -> Expr {
        Expr::new(ExprKind::And(t), QueryType::Bool)
    }

    /// Rows of table columns 4 (Int32), 2 (Date32) and 7 (Int64), nullable.
    fn rows(v: &[[Option<i64>; 3]]) -> RecordBatch {
        use datafusion::arrow::array::{Date32Array, Int32Array};
        let col = |j: usize| v.iter().map(move |r| r[j]);
        let fields = vec![
            Field::new("c4", DataType::Int32, true),
            Field::new("c2", DataType::Date32, true),
            Field::new("c7", DataType::Int64, true),
        ];
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from_iter(col(0).map(|x| x.map(|x| x as i32)))),
            Arc::new(Date32Array::from_iter(col(1).map(|x| x.map(|x| x as i32)))),
            Arc::new(Int64Array::from_iter(col(2))),
        ];
        RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).expect("batch")
    }

    /// TPC-H Q2's subquery: a later member whose filter implies the kept scan's takes
    /// its rows filtered by its own filter; one that is not known to run after it, or
    /// whose filter is not implied, does not.
    #[test]
    fn an_implied_filter_takes_the_kept_rows_filtered_only_after_the_scan() {
        let slot = ReuseSlot::new(vec![(0, 1)]);
        let kept = and(vec![cmp(CmpOp::Ge, 4, 1), keys(4, vec![1, 2, 3, 5], false)]);
        let data = rows(&[
            [Some(1), Some(10), Some(100)],
            [Some(2), Some(20), None],
            [Some(3), None, Some(300)],
            [Some(5), Some(50), Some(500)],
        ]);
        slot.keep(64, Some(kept), vec![4, 2, 7], vec![data], 0);
        let narrower = Some(and(vec![
            keys(4, vec![2, 3, 5], false),
            cmp(CmpOp::Lt, 7, 500),
        ]));
        let (b, at) = slot
            .find(64, &narrower, &[7, 4], 1)
            .expect("find")
            .expect("implied, after");
        assert_eq!(at, vec![2, 0]);
        let got: Vec<i64> = b
            .iter()
            .flat_map(|b| b.column(2).as_primitive::<Int64Type>().values().to_vec())
            .collect();
        // Key 2's c7 is NULL (UNKNOWN), key 5's is not below 500: only key 3's row.
        assert_eq!(got, vec![300]);
        assert!(
            slot.find(64, &narrower, &[7], 2).expect("find").is_none(),
            "not ordered"
        );
        let wider = Some(keys(4, vec![2, 4], false));
        assert!(
            slot.find(64, &wider, &[7], 1).expect("find").is_none(),
            "key 4 not kept"
        );
        let like = Some(Expr::new(
            ExprKind::Like {
                expr: Box::new(column(4)),
                prefix: b"x".to_vec(),
                negated: false,
            },
            QueryType::Bool,
        ));
        let both = Some(and(vec![
            keys(4, vec![1], false),
            like.clone().expect("like"),
        ]));
        assert!(
            slot.find(64, &both, &[7], 1).expect("find").is_none(),
            "LIKE: not here"
        );
    }

    /// Decimals (in units of their scale), timestamps and narrow integers read as the
    /// device holds them; floats, strings and decimals beyond `i64` are not read.
    #[test]
    fn the_host_filter_reads_integer_ordered_arrow_types_only() {
        use datafusion::arrow::array::{
            Decimal128Array, Float64Array, Int8Array, StringArray, TimestampMicrosecondArray,
        };
        let dec = Decimal128Array::from(vec![Some(1234), None, Some(-5)])
            .with_precision_and_scale(18, 2)
            .expect("decimal");
        let got = int_values(&dec).expect("decimal");
        assert_eq!(
            got.iter().collect::<Vec<_>>(),
            vec![Some(1234), None, Some(-5)]
        );
        let ts = TimestampMicrosecondArray::from(vec![Some(7_000_000)]).with_timezone("UTC");
        assert_eq!(int_values(&ts).expect("timestamp").value(0), 7_000_000);
        assert_eq!(
            int_values(&Int8Array::from(vec![-3]))
                .expect("int8")
                .value(0),
            -3
        );
        let wide = Decimal128Array::from(vec![i128::from(i64::MAX) + 1])
            .with_precision_and_scale(38, 0)
            .expect("decimal");
        assert!(int_values(&wide).is_none(), "beyond i64");
        assert!(int_values(&Float64Array::from(vec![1.0])).is_none());
        assert!(int_values(&StringArray::from(vec!["a"])).is_none());
    }

    /// A random term of the host filter's kinds over table columns 4, 2 and 7.
    fn term() -> impl Strategy<Value = Expr> {
        let ops = prop::sample::select(CmpOp::ALL.to_vec());
        let col = prop::sample::select(vec![4usize, 2, 7]);
        prop_oneof![
            (ops.clone(), col.clone(), -2i64..8).prop_map(|(op, c, v)| cmp(op, c, v)),
            (
                col.clone(),
                prop::collection::vec(-2i64..8, 0..5),
                any::<bool>()
            )
                .prop_map(|(c, k, n)| keys(c, k, n)),
            (ops, col.clone(), col).prop_map(|(op, l, r)| Expr::new(
                ExprKind::Cmp {
                    op,
                    left: Box::new(column(l)),
                    right: Box::new(column(r)),
                },
                QueryType::Bool,
            )),
        ]
    }

    /// The reference: a term's truth on one row (`None`: UNKNOWN).
    fn truth(e: &Expr, row: &[Option<i64>; 3]) -> Option<bool> {
        let v = |e: &Expr| match &e.kind {
            ExprKind::Column { index, .. } => row[[4, 2, 7].iter().position(|c| c == index)?],
            ExprKind::Const(Const::Int(v)) => Some(*v),
            _ => unreachable!("the generator's operands"),
        };
        match &e.kind {
            ExprKind::Cmp { op, left, right } => Some(op.test(v(left)?, v(right)?)),
            ExprKind::InList {
                expr,
                list,
                negated,
            } => Some(list.ints()?.contains(&v(expr)?) != *negated),
            _ => unreachable!("the generator's terms"),
        }
    }

    proptest! {
        /// The host filter keeps exactly the rows where every term is TRUE.
        #[test]
        fn the_host_filter_keeps_the_rows_every_term_makes_true(
            terms in prop::collection::vec(term(), 1..4),
            data in prop::collection::vec(
                prop::array::uniform3(prop::option::weighted(0.85, -2i64..8)), 0..40),
        ) {
            let f = and(terms.clone());
            let h = HostFilter::new(&f, &[4, 2, 7]).expect("supported terms");
            let got = h.apply(&rows(&data)).expect("apply").expect("supported types");
            let want: Vec<&[Option<i64>; 3]> = data
                .iter()
                .filter(|r| terms.iter().all(|t| truth(t, r) == Some(true)))
                .collect();
            prop_assert_eq!(got.num_rows(), want.len());
            let c7 = got.column(2).as_primitive::<Int64Type>();
            for (i, r) in want.iter().enumerate() {
                prop_assert_eq!(c7.is_null(i), r[2].is_none());
                if let Some(x) = r[2] {
                    prop_assert_eq!(c7.value(i), x);
                }
            }
        }
    }
}
