//! Runtime filters: DataFusion's hash joins and top-K sorts push *dynamic* filters down
//! to the scans below them (the build side's keys once it is built, the K-th best value
//! so far) in its post-optimization filter pushdown. A device scan
//! ([`crate::exec::DeviceScanExec`]) takes them and applies them in the host to every
//! batch the device hands over, before any operator above sees it: the device program,
//! and so every modeled figure, stays what was planned; only the host's work above the
//! scan shrinks (TPC-H Q18's joins see the orders of the 57 keys its subquery found, not
//! 1.5 million). A filter not yet complete (the join still building) is `true` and keeps
//! every row. The memory session's scans ([`crate::memory`]) do the same, so both
//! sessions run the same plans.
//!
//! Choice: a filter is worth applying only where it prunes rows before work that would
//! otherwise see them. A scan whose rows go straight to the join that made the filter
//! (through repartitions, projections, coalescing) would have the join probe each row
//! twice, once in the filter and once in its hash table: [`RedundantRuntimeFilters`]
//! takes such filters off again (measured on an SF 1 image: Q4 0.092 s without the
//! filter, 0.13 s with it; Q22 0.035 s against 0.068 s), and the join then does not
//! build them at all. And a filter that keeps most rows (Q9's suppliers: all of them)
//! is given up after a sample ([`RuntimeFilters::apply`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use datafusion::arrow::array::{Array, BooleanArray, RecordBatch};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::{DataFusionError, Result};
use datafusion::physical_expr::{DynamicFilterTracking, PhysicalExpr};
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
use datafusion::physical_plan::{
    ChildrenPropertiesMode, ExecutionPlan, ReplaceChildrenOptions, SendableRecordBatchStream,
};
use futures::StreamExt;

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
        plan.transform_down(|node| {
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

/// Children replaced with the node's properties computed again.
fn recompute() -> ReplaceChildrenOptions {
    ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute)
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
}
