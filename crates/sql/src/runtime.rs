//! Runtime filters: DataFusion's hash joins and top-K sorts push *dynamic* filters down
//! to the scans below them (the build side's keys once it is built, the K-th best value
//! so far) in its post-optimization filter pushdown.
//!
//! **In the device.** When a device scan ([`crate::exec::DeviceScanExec`]) starts, the
//! conjuncts of its complete filters that the device evaluates exactly go into its
//! program, first (`for_device`): a join's key bounds, and its keys as an `IN` list
//! when the build side has at most `DEVICE_KEYS` distinct keys (DataFusion is asked for
//! lists that long). This is the semi-join reduction storage systems do with a join's
//! keys (a Bloom-join): the device hands over only rows, or aggregates only groups, the
//! join can match. TPC-H Q17's lineitem aggregate keeps 204 of 200,000 parts' groups,
//! Q21's lineitem scan the 400 suppliers of one nation. The modeled figures are those
//! of the program that ran (the report prints the terms taken): a filter taken changes
//! them, as it changes what the device does. A join's filter is complete before the
//! join probes, but a scan under a `CoalescePartitionsExec` starts as soon as the plan
//! runs, so a scan first waits for the joins' filters it holds (`wait_complete`):
//! what the device takes never depends on thread timing, and every run of a query
//! models the same work (`csd bench tpch` checks this on every repeat). `IN` lists are
//! sorted, so even their order is the same in every run.
//!
//! **In the host.** The rest (a join's hash-table lookup beyond `DEVICE_KEYS` keys, a
//! top-K bound, which moves until the sort ends) is applied in the host to every batch
//! the device hands over, before any operator above sees it: TPC-H Q18's joins see the
//! orders of the 57 keys its subquery found, not 1.5 million. A filter not yet complete
//! is `true` and keeps every row. The memory session's scans ([`crate::memory`]) do the
//! same in the host.
//!
//! Choice: a filter is worth applying in the host only where it prunes rows before work
//! that would otherwise see them. A scan whose rows go straight to the join that made
//! the filter (through repartitions, projections, coalescing) would have the join probe
//! each row twice, once in the filter and once in its hash table:
//! [`RedundantRuntimeFilters`] takes such filters off the host's side again (the
//! measurements are in README, `csd bench tpch`); a device scan keeps them for its
//! program. And a filter that keeps most rows
//! (Q9's suppliers: all of them) is given up after a sample (`RuntimeFilters::apply`).

use crate::exec::recompute;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use csd_query::plan::{Expr as DevExpr, ExprKind};
use csd_query::types::DataType as DevType;
use datafusion::arrow::array::{Array, BooleanArray, RecordBatch};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::{DataFusionError, Result};
use datafusion::physical_expr::expressions::DynamicFilterPhysicalExpr;
use datafusion::physical_expr::utils::split_conjunction;
use datafusion::physical_expr::{DynamicFilterTracking, PhysicalExpr};
use datafusion::physical_expr_common::physical_expr::snapshot_physical_expr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::filter_pushdown::{
    ChildPushdownResult, FilterPushdownPhase, FilterPushdownPropagation, PushedDown,
};
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};
use futures::StreamExt;
use std::time::Duration;

use crate::translate::{self, Columns};

/// A scan's runtime filters and the count of rows they removed.
#[derive(Clone)]
pub(crate) struct RuntimeFilters {
    exprs: Vec<Arc<dyn PhysicalExpr>>,
    /// Per filter: what it did since it was complete (shared by a stream's clones).
    tally: Arc<Vec<Tally>>,
    /// Rows removed (`None`: not counted).
    pruned: Option<datafusion::physical_plan::metrics::Count>,
}

/// Rows a complete filter saw and kept, and whether it was given up.
#[derive(Debug, Default)]
struct Tally {
    seen: AtomicUsize,
    kept: AtomicUsize,
    off: AtomicBool,
}

/// Rows a complete filter is watched over before it may be given up.
const SAMPLE_ROWS: usize = 65_536;
/// A filter keeping more than this share of its rows (in percent) is given up: probing
/// every row costs about what the join above would, and it saves little.
const GIVE_UP_KEEP_PERCENT: usize = 75;

impl RuntimeFilters {
    /// `exprs`, counting the rows they remove as `runtime_filtered_rows` in `metrics`
    /// (when there are filters and metrics).
    pub(crate) fn new(
        exprs: Vec<Arc<dyn PhysicalExpr>>,
        metrics: Option<&ExecutionPlanMetricsSet>,
    ) -> RuntimeFilters {
        let pruned = metrics
            .filter(|_| !exprs.is_empty())
            .map(|m| MetricBuilder::new(m).global_counter("runtime_filtered_rows"));
        let tally = Arc::new(exprs.iter().map(|_| Tally::default()).collect());
        RuntimeFilters {
            exprs,
            tally,
            pruned,
        }
    }

    /// `stream`'s batches with the rows the filters keep; batches left empty are
    /// dropped.
    pub(crate) fn wrap(&self, stream: SendableRecordBatchStream) -> SendableRecordBatchStream {
        if self.exprs.is_empty() {
            return stream;
        }
        let schema = stream.schema();
        let me = self.clone();
        let filtered = stream.filter_map(move |item| {
            let r = item.and_then(|b| me.apply(b));
            std::future::ready(match r {
                Ok(b) if b.num_rows() == 0 => None,
                r => Some(r),
            })
        });
        Box::pin(RecordBatchStreamAdapter::new(schema, filtered))
    }

    /// The rows of `batch` every filter keeps (a null verdict drops the row). A filter
    /// that, once complete, kept more than [`GIVE_UP_KEEP_PERCENT`] of its first
    /// [`SAMPLE_ROWS`] rows is given up for the rest of the scan.
    pub(crate) fn apply(&self, mut batch: RecordBatch) -> Result<RecordBatch> {
        for (f, t) in self.exprs.iter().zip(self.tally.iter()) {
            if t.off.load(Ordering::Relaxed) {
                continue;
            }
            let complete = matches!(
                DynamicFilterTracking::classify(f),
                DynamicFilterTracking::AllComplete
            );
            let rows = batch.num_rows();
            let verdict = f.evaluate(&batch)?.into_array(rows)?;
            let Some(mask) = verdict.as_any().downcast_ref::<BooleanArray>() else {
                return Err(DataFusionError::Internal(format!(
                    "runtime filter {f} is not a predicate"
                )));
            };
            let kept = if mask.null_count() == 0 {
                mask.true_count()
            } else {
                mask.iter().filter(|v| *v == Some(true)).count()
            };
            if complete {
                let seen = t.seen.fetch_add(rows, Ordering::Relaxed) + rows;
                let kept_all = t.kept.fetch_add(kept, Ordering::Relaxed) + kept;
                if seen >= SAMPLE_ROWS && kept_all * 100 > seen * GIVE_UP_KEEP_PERCENT {
                    t.off.store(true, Ordering::Relaxed);
                }
            }
            if kept == rows {
                continue;
            }
            batch = filter_record_batch(&batch, mask)?;
            if let Some(p) = &self.pruned {
                p.add(rows - batch.num_rows());
            }
        }
        Ok(batch)
    }

    /// The `i`-th filter is in the device's program whole: the host does not apply it.
    pub(crate) fn taken_by_device(&self, i: usize) {
        if let Some(t) = self.tally.get(i) {
            t.off.store(true, Ordering::Relaxed);
        }
    }
}

/// The most keys of a join's runtime filter DataFusion is asked to list (an `IN` list,
/// a hash-table lookup beyond; see `crate::new_context`). DataFusion makes a list of
/// literal expressions, one per key, for every probe partition, and evaluates it where
/// the device does not take it, so a longer list costs every probe partition; 4,096 was
/// the fastest of the sizes measured (README, `csd bench tpch`). A device takes a list
/// only if its session arena holds the keys too (`for_device`'s `max_keys`).
pub(crate) const DEVICE_KEYS: usize = 4096;

/// The most keys a device whose session arena is `arena_kib` KiB takes into a program
/// (8 bytes per key, smart-ssd §3.2's fixed arena).
pub(crate) fn arena_keys(arena_kib: u32) -> usize {
    arena_kib as usize * 1024 / 8
}

/// What of a device scan's runtime filters its program takes (see the [module docs](self)).
#[derive(Debug, Default)]
pub(crate) struct InDevice {
    /// The device predicates taken, one per conjunct, in the filters' order.
    pub(crate) terms: Vec<DevExpr>,
    /// Per filter: whether every conjunct of it was taken.
    pub(crate) whole: Vec<bool>,
}

/// The conjuncts of `filters` complete when a device scan starts that the device
/// evaluates exactly over the scan's output `columns` (of `schema`'s table): bounds and
/// `IN` lists of at most `max_keys` keys; a join's hash-table lookup and a top-K
/// bound still moving stay in the host. The scan waited for its joins' filters first
/// ([`wait_complete`]), so what is taken (and every modeled figure) is the same in every
/// run.
pub(crate) fn for_device(
    filters: &[Arc<dyn PhysicalExpr>],
    columns: &Columns,
    schema: &csd_table::Schema,
    max_keys: usize,
) -> InDevice {
    let mut out = InDevice::default();
    for f in filters {
        let complete = matches!(
            DynamicFilterTracking::classify(f),
            DynamicFilterTracking::AllComplete
        );
        let snap = complete
            .then(|| snapshot_physical_expr(f.clone()).ok())
            .flatten();
        let Some(snap) = snap else {
            out.whole.push(false);
            continue;
        };
        let mut whole = true;
        for term in split_conjunction(&snap) {
            match translate::physical(term, columns, schema) {
                Ok(d) if d.ty == DevType::Bool && longest_list(&d) <= max_keys => {
                    out.terms.push(sorted_lists(d))
                }
                _ => whole = false,
            }
        }
        out.whole.push(whole);
    }
    out
}

/// How long a device scan waits at most for a join's runtime filter: a join finishes
/// its filter once it built and all its partitions reported, which does not depend on
/// the scans below its probe side; the bound only keeps an unforeseen plan from hanging
/// (the scan then starts with what is complete, as its report says).
const JOIN_FILTER_WAIT: Duration = Duration::from_secs(30);

/// Waits until the hash joins' runtime filters `filters` are complete (see
/// [`JOIN_FILTER_WAIT`]); false if one was not in time. A scan the plan starts early
/// (under a `CoalescePartitionsExec`, which runs its inputs as soon as it is executed)
/// would otherwise take a join's keys into the device in one run and not in the next:
/// the modeled figures must not depend on thread timing.
pub(crate) async fn wait_complete(filters: &[Arc<dyn PhysicalExpr>]) -> bool {
    let mut in_time = true;
    for f in filters {
        let mut dynamic = Vec::new();
        let _ = f.apply(|e| {
            if e.downcast_ref::<DynamicFilterPhysicalExpr>().is_some() {
                dynamic.push(e.clone());
            }
            Ok(TreeNodeRecursion::Continue)
        });
        for d in dynamic {
            if let Some(d) = d.downcast_ref::<DynamicFilterPhysicalExpr>() {
                in_time &= tokio::time::timeout(JOIN_FILTER_WAIT, d.wait_complete())
                    .await
                    .is_ok();
            }
        }
    }
    in_time
}

/// `e` with its `IN` lists in ascending order: a join's keys come in the order its
/// build side's partitions finished, and the program (and its text in the report) must
/// not depend on thread timing.
fn sorted_lists(e: DevExpr) -> DevExpr {
    let ty = e.ty;
    let kind = match e.kind {
        ExprKind::InList {
            expr,
            list,
            negated,
        } => ExprKind::InList {
            expr,
            list: list.into_sorted(),
            negated,
        },
        ExprKind::And(es) => ExprKind::And(es.into_iter().map(sorted_lists).collect()),
        ExprKind::Or(es) => ExprKind::Or(es.into_iter().map(sorted_lists).collect()),
        ExprKind::Not(x) => ExprKind::Not(Box::new(sorted_lists(*x))),
        k => k,
    };
    DevExpr::new(kind, ty)
}

/// The length of the longest `IN` list in `e`.
fn longest_list(e: &DevExpr) -> usize {
    match &e.kind {
        ExprKind::InList { list, .. } => list.len(),
        ExprKind::And(es) | ExprKind::Or(es) => es.iter().map(longest_list).max().unwrap_or(0),
        ExprKind::Not(x) => longest_list(x),
        _ => 0,
    }
}

/// A scan that applies runtime filters (device and memory scans): it takes the dynamic
/// ones its parents offer and can give some up again.
pub(crate) trait FilteringScan {
    /// The runtime filters the scan applies.
    fn runtime_filters(&self) -> &[Arc<dyn PhysicalExpr>];

    /// The same scan applying `filters` instead.
    fn with_runtime_filters(&self, filters: Vec<Arc<dyn PhysicalExpr>>) -> Arc<dyn ExecutionPlan>;

    /// [`ExecutionPlan::handle_child_pushdown_result`] of such a scan: in the
    /// post-optimization phase, if the scan `accepts` filters at all, the dynamic filters
    /// among those its parents offer are answered `Yes` and taken (an updated scan), the
    /// others `No` (static filters reached the scan through its table provider).
    fn take_dynamic_filters(
        &self,
        phase: FilterPushdownPhase,
        offered: ChildPushdownResult,
        accepts: bool,
    ) -> FilterPushdownPropagation<Arc<dyn ExecutionPlan>> {
        let takes = accepts && phase == FilterPushdownPhase::Post;
        let mut filters = self.runtime_filters().to_vec();
        let before = filters.len();
        let verdicts = offered
            .parent_filters
            .into_iter()
            .map(|p| {
                if takes && DynamicFilterTracking::classify(&p.filter).contains_dynamic_filter() {
                    filters.push(p.filter);
                    PushedDown::Yes
                } else {
                    PushedDown::No
                }
            })
            .collect();
        let prop = FilterPushdownPropagation::with_parent_pushdown_result(verdicts);
        if filters.len() == before {
            return prop;
        }
        prop.with_updated_node(self.with_runtime_filters(filters))
    }

    /// This scan without the runtime filters whose expression ids are in `ids`, if it
    /// had any of them.
    fn without_runtime_filters(&self, ids: &[u64]) -> Option<Arc<dyn ExecutionPlan>> {
        let all = self.runtime_filters();
        let kept: Vec<_> = all
            .iter()
            .filter(|e| !e.expression_id().is_some_and(|id| ids.contains(&id)))
            .cloned()
            .collect();
        (kept.len() < all.len()).then(|| self.with_runtime_filters(kept))
    }
}

/// Takes a hash join's dynamic filter off the scan of its probe side when only
/// repartitions, projections and coalescing lie between them (see the
/// [module docs](self)); runs after DataFusion's post-optimization filter pushdown.
#[derive(Debug, Default)]
pub struct RedundantRuntimeFilters;

impl PhysicalOptimizerRule for RedundantRuntimeFilters {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let mut joins = Vec::new();
        let plan = plan
            .transform_down(|node| {
                let Some(join) = node.downcast_ref::<HashJoinExec>() else {
                    return Ok(Transformed::no(node));
                };
                let ids: Vec<u64> = join
                    .dynamic_expressions_produced()
                    .iter()
                    .filter_map(|e| e.expression_id())
                    .collect();
                if ids.is_empty() {
                    return Ok(Transformed::no(node));
                }
                joins.extend(ids.iter().copied());
                match strip(join.right(), &ids)? {
                    Some(right) => {
                        let left = join.left().clone();
                        Ok(Transformed::yes(
                            node.clone()
                                .replace_children(vec![left, right], recompute())?,
                        ))
                    }
                    None => Ok(Transformed::no(node)),
                }
            })
            .data()?;
        // Device scans learn which of their filters joins make (they wait for those).
        plan.transform_up(|node| {
            match node
                .downcast_ref::<crate::exec::DeviceScanExec>()
                .and_then(|s| s.with_join_filters(&joins))
            {
                Some(s) => Ok(Transformed::yes(Arc::new(s) as Arc<dyn ExecutionPlan>)),
                None => Ok(Transformed::no(node)),
            }
        })
        .data()
    }

    fn name(&self) -> &str {
        "csd_redundant_runtime_filters"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `node` with the filters `ids` taken off the scan it leads to through transparent
/// operators; `None` if there is no such scan holding one of them.
fn strip(node: &Arc<dyn ExecutionPlan>, ids: &[u64]) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if let Some(scan) = as_filtering_scan(node) {
        return Ok(scan.without_runtime_filters(ids));
    }
    let transparent = node.downcast_ref::<RepartitionExec>().is_some()
        || node.downcast_ref::<ProjectionExec>().is_some()
        || node.downcast_ref::<CoalescePartitionsExec>().is_some()
        || node.name() == "CooperativeExec"
        || node.name() == "CoalesceBatchesExec";
    let children = node.children();
    if !transparent || children.len() != 1 {
        return Ok(None);
    }
    match strip(children[0], ids)? {
        Some(child) => Ok(Some(
            node.clone().replace_children(vec![child], recompute())?,
        )),
        None => Ok(None),
    }
}

/// `node` as a scan that applies runtime filters, if it is one.
fn as_filtering_scan(node: &Arc<dyn ExecutionPlan>) -> Option<&dyn FilteringScan> {
    if let Some(s) = node.downcast_ref::<crate::exec::DeviceScanExec>() {
        return Some(s);
    }
    crate::memory::as_filtering_scan(node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::logical_expr::Operator;
    use datafusion::physical_expr::expressions::{
        BinaryExpr, Column, DynamicFilterPhysicalExpr, lit,
    };

    /// A batch of `n` rows of `k` = `from`, `from + 1`, ….
    fn batch(from: i64, n: usize) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        let k = Int64Array::from_iter_values(from..from + n as i64);
        RecordBatch::try_new(schema, vec![Arc::new(k)]).expect("batch")
    }

    /// A dynamic filter `k < bound` on column 0, complete when `complete`.
    fn filter(bound: i64, complete: bool) -> Arc<dyn PhysicalExpr> {
        let k: Arc<dyn PhysicalExpr> = Arc::new(Column::new("k", 0));
        let f = DynamicFilterPhysicalExpr::new(vec![k.clone()], lit(true));
        f.update(Arc::new(BinaryExpr::new(k, Operator::Lt, lit(bound))))
            .expect("update");
        if complete {
            f.mark_complete();
        }
        Arc::new(f)
    }

    #[test]
    fn selective_filters_keep_filtering_and_loose_ones_are_given_up() {
        let metrics = ExecutionPlanMetricsSet::new();
        // Keeps 10 rows of each batch: never given up.
        let tight = RuntimeFilters::new(vec![filter(10, true)], Some(&metrics));
        for _ in 0..20 {
            let b = tight.apply(batch(0, 8192)).expect("apply");
            assert_eq!(b.num_rows(), 10);
        }
        assert!(!tight.tally[0].off.load(Ordering::Relaxed));
        // Keeps 90%: given up after the sample, then every row passes.
        let loose = RuntimeFilters::new(vec![filter(7_373, true)], None);
        let mut kept = 0;
        for _ in 0..20 {
            kept += loose.apply(batch(0, 8192)).expect("apply").num_rows();
        }
        assert!(loose.tally[0].off.load(Ordering::Relaxed));
        let sampled = SAMPLE_ROWS.div_ceil(8192);
        assert_eq!(kept, sampled * 7_373 + (20 - sampled) * 8192);
        // Not complete yet (its join still building): applied, never judged.
        let early = RuntimeFilters::new(vec![filter(7_373, false)], None);
        for _ in 0..20 {
            assert_eq!(
                early.apply(batch(0, 8192)).expect("apply").num_rows(),
                7_373
            );
        }
        assert_eq!(early.tally[0].seen.load(Ordering::Relaxed), 0);
        // The tight filter's removed rows are counted.
        let removed = metrics
            .clone_inner()
            .sum_by_name("runtime_filtered_rows")
            .map(|v| v.as_usize());
        assert_eq!(removed, Some(20 * (8192 - 10)));
    }

    /// A dynamic filter on column 0 whose current expression is `e` (built on the
    /// column), complete when `complete`.
    fn dynamic(
        e: impl Fn(Arc<dyn PhysicalExpr>) -> Arc<dyn PhysicalExpr>,
        complete: bool,
    ) -> Arc<dyn PhysicalExpr> {
        let k: Arc<dyn PhysicalExpr> = Arc::new(Column::new("k", 0));
        let f = DynamicFilterPhysicalExpr::new(vec![k.clone()], lit(true));
        f.update(e(k)).expect("update");
        if complete {
            f.mark_complete();
        }
        Arc::new(f)
    }

    #[test]
    fn the_device_takes_complete_bounds_and_key_lists_and_leaves_the_rest() {
        use csd_table::schema::{Column as TableColumn, ColumnType};
        let table = csd_table::Schema::new("t", vec![TableColumn::new("k", ColumnType::Int64)])
            .expect("schema");
        let columns: Columns = vec![DevExpr::column(&table, 0)];
        let and = |a, b| Arc::new(BinaryExpr::new(a, Operator::And, b)) as Arc<dyn PhysicalExpr>;
        let cmp = |k: &Arc<dyn PhysicalExpr>, op, v: i64| {
            Arc::new(BinaryExpr::new(k.clone(), op, lit(v))) as Arc<dyn PhysicalExpr>
        };
        let keys = |k: &Arc<dyn PhysicalExpr>, vals: &[i64]| {
            let list = vals.iter().map(|&v| lit(v)).collect();
            let schema = Schema::new(vec![Field::new("k", DataType::Int64, false)]);
            Arc::new(
                datafusion::physical_expr::expressions::InListExpr::try_new(
                    k.clone(),
                    list,
                    false,
                    &schema,
                )
                .expect("in list"),
            ) as Arc<dyn PhysicalExpr>
        };
        // A join's filter: bounds and keys (in the order its partitions finished).
        let join = |complete| {
            dynamic(
                |k| {
                    and(
                        and(cmp(&k, Operator::GtEq, 3), cmp(&k, Operator::LtEq, 9)),
                        keys(&k, &[9, 3, 5]),
                    )
                },
                complete,
            )
        };
        let taken = for_device(&[join(true)], &columns, &table, 8);
        assert_eq!(taken.whole, vec![true]);
        let text: Vec<String> = taken.terms.iter().map(ToString::to_string).collect();
        assert_eq!(text, ["k >= 3", "k <= 9", "k IN (3, 5, 9)"]);
        // Not complete: nothing taken, the host applies it.
        let early = for_device(&[join(false)], &columns, &table, 8);
        assert!(early.terms.is_empty());
        assert_eq!(early.whole, vec![false]);
        // More keys than the device holds: the bounds only.
        let small = for_device(&[join(true)], &columns, &table, 2);
        assert_eq!(small.terms.len(), 2);
        assert_eq!(small.whole, vec![false]);
        // A term the device cannot evaluate exactly (a modulo) stays in the host.
        let odd = dynamic(
            |k| {
                let m = Arc::new(BinaryExpr::new(k.clone(), Operator::Modulo, lit(2i64)));
                and(
                    cmp(&k, Operator::GtEq, 1),
                    Arc::new(BinaryExpr::new(m, Operator::Eq, lit(1i64))),
                )
            },
            true,
        );
        let part = for_device(&[odd, join(true)], &columns, &table, 8);
        assert_eq!(part.whole, vec![false, true]);
        assert_eq!(part.terms.len(), 4);
    }
}
