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
//! Choices:
//! * What is compared is the device program itself ([`csd_query::plan::Expr`]'s
//!   equality), so two scans whose runtime filters hold different keys never share;
//!   filters applied in the host stay each reader's own (applied above the rows).
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

use datafusion::arrow::array::RecordBatch;
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
/// program's filter, the table columns of its rows, and the rows.
struct Kept {
    first_lba: u64,
    filter: Option<csd_query::plan::Expr>,
    columns: Vec<usize>,
    batches: Arc<Vec<RecordBatch>>,
}

/// Where the scans of one group leave their rows for each other.
#[derive(Default)]
pub struct ReuseSlot(Mutex<Vec<Kept>>);

impl fmt::Debug for ReuseSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.lock().unwrap_or_else(PoisonError::into_inner).len();
        write!(f, "ReuseSlot({n} kept)")
    }
}

impl ReuseSlot {
    /// Rows of an earlier scan of table `first_lba` with program filter `filter` whose
    /// columns include `columns`, as positions of `columns` in its rows.
    pub(crate) fn find(
        &self,
        first_lba: u64,
        filter: &Option<csd_query::plan::Expr>,
        columns: &[usize],
    ) -> Option<(Arc<Vec<RecordBatch>>, Vec<usize>)> {
        let kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        kept.iter()
            .filter(|k| k.first_lba == first_lba && &k.filter == filter)
            .find_map(|k| {
                let at: Option<Vec<usize>> = columns
                    .iter()
                    .map(|c| k.columns.iter().position(|x| x == c))
                    .collect();
                Some((k.batches.clone(), at?))
            })
    }

    /// Leaves a scan's rows for the others.
    pub(crate) fn keep(
        &self,
        first_lba: u64,
        filter: Option<csd_query::plan::Expr>,
        columns: Vec<usize>,
        batches: Vec<RecordBatch>,
    ) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Kept {
                first_lba,
                filter,
                columns,
                batches: Arc::new(batches),
            });
    }
}

/// A scan of a group: the plan node, the columns it reads beyond its own, the slot.
type Member = (Arc<dyn ExecutionPlan>, Vec<usize>, Arc<ReuseSlot>);

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

/// The partial aggregations that always run after a scan of rows of the same table
/// and static filter: those on the probe side of a hash join whose build side holds
/// such a scan. A hash join polls its probe side only once its build side is
/// complete (collected whole, or, partitioned, a partition of a repartition that
/// ends only with its input), so that scan has ended, and left its rows, by then;
/// the aggregation finds them whatever the threads do, and the modeled figures stay
/// those of one order.
fn aggregations_after_rows(plan: &Arc<dyn ExecutionPlan>) -> Result<Vec<Arc<dyn ExecutionPlan>>> {
    let mut out: Vec<Arc<dyn ExecutionPlan>> = Vec::new();
    plan.apply(|node| {
        if node.downcast_ref::<ArrayScanExec>().is_some() {
            return Ok(TreeNodeRecursion::Jump);
        }
        let Some(j) = node.downcast_ref::<HashJoinExec>() else {
            return Ok(TreeNodeRecursion::Continue);
        };
        let rows = scans_under(j.left(), candidate)?;
        for a in scans_under(j.right(), aggregate_candidate)? {
            let Some(agg) = a.downcast_ref::<DeviceScanExec>() else {
                continue;
            };
            let after = rows.iter().any(|r| {
                r.downcast_ref::<DeviceScanExec>()
                    .is_some_and(|r| same_rows(r, agg))
            });
            if after && !out.iter().any(|o| Arc::ptr_eq(o, &a)) {
                out.push(a);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(out)
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
        let after_rows = aggregations_after_rows(&plan)?;
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
        // Each group of two or more with a scan of rows: the union of its columns, if
        // every scan of rows lacks at most MAX_WIDEN of them (an aggregation reads
        // none itself).
        let mut members: Vec<Member> = Vec::new();
        let has_rows = |g: &Vec<Arc<dyn ExecutionPlan>>| g.iter().any(|n| !is_aggregation(n));
        for g in groups.into_iter().filter(|g| g.len() > 1 && has_rows(g)) {
            let cols = |n: &Arc<dyn ExecutionPlan>| {
                n.downcast_ref::<DeviceScanExec>()
                    .and_then(|s| candidate(s).or_else(|| aggregate_candidate(s)))
                    .map(<[usize]>::to_vec)
                    .unwrap_or_default()
            };
            let mut union: Vec<usize> = Vec::new();
            for n in &g {
                for c in cols(n) {
                    if !union.contains(&c) {
                        union.push(c);
                    }
                }
            }
            let missing = |n: &Arc<dyn ExecutionPlan>| {
                if is_aggregation(n) {
                    return Vec::new();
                }
                let own = cols(n);
                union
                    .iter()
                    .copied()
                    .filter(|c| !own.contains(c))
                    .collect::<Vec<_>>()
            };
            if g.iter().any(|n| missing(n).len() > MAX_WIDEN) {
                continue;
            }
            let slot = Arc::new(ReuseSlot::default());
            for n in g {
                let extra = missing(&n);
                members.push((n, extra, slot.clone()));
            }
        }
        if members.is_empty() {
            return Ok(plan);
        }
        plan.transform_down(|node| {
            let Some((_, extra, slot)) = members.iter().find(|(n, _, _)| Arc::ptr_eq(n, &node))
            else {
                return Ok(Transformed::no(node));
            };
            let Some(scan) = node.downcast_ref::<DeviceScanExec>() else {
                return Ok(Transformed::no(node));
            };
            if matches!(scan.output, ScanOutput::Partial(_)) {
                let s: Arc<dyn ExecutionPlan> = Arc::new(scan.with_reuse(slot.clone()));
                return Ok(Transformed::new(s, true, TreeNodeRecursion::Jump));
            }
            let own = scan.schema.fields().len();
            let widened: Arc<dyn ExecutionPlan> = Arc::new(scan.widened(extra, slot.clone())?);
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
    use datafusion::arrow::array::{ArrayRef, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

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
        use csd_query::plan::{Const, Expr};
        use csd_query::types::DataType as DevType;
        let slot = ReuseSlot::default();
        let f = Some(Expr::constant(Const::Int(7), DevType::Int));
        slot.keep(64, f.clone(), vec![3, 1, 2], vec![batch(&[3, 1, 2])]);
        let (b, at) = slot.find(64, &f, &[1, 2]).expect("same program");
        assert_eq!(at, vec![1, 2]);
        assert_eq!(b.len(), 1);
        assert_eq!(
            slot.find(64, &f, &[2, 3, 1]).expect("reordered").1,
            vec![2, 0, 1]
        );
        assert!(slot.find(64, &f, &[0]).is_none(), "a column it lacks");
        assert!(slot.find(65, &f, &[1]).is_none(), "another table");
        let g = Some(Expr::constant(Const::Int(8), DevType::Int));
        assert!(slot.find(64, &g, &[1]).is_none(), "another filter");
        assert!(slot.find(64, &None, &[1]).is_none(), "no filter");
    }
}
