//! One device scan for every part of a plan that reads the same thing.
//!
//! A query that names one view or common table expression twice (TPC-H Q15's
//! `revenue0`: once for the suppliers' revenue, once for its maximum) is planned by
//! DataFusion as two copies of the same subtree, so the device would scan lineitem and
//! aggregate it twice. [`SharedDeviceScans`] finds device scans that run the same
//! program over the same table and hand over the same output, and makes them one scan
//! whose output every reader gets ([`SharedScanExec`]): the device scans once, as a
//! database that materializes the expression once would. The modeled figures are those
//! of the one scan that ran (one report in the scan log).
//!
//! Choices: only scans that hand over partial aggregation states are shared (their
//! output is the groups, small next to the rows they read); a scan's whole output is
//! kept until every reader has it, and a scan of rows could be a whole table (scans of
//! rows share what they handed over through [`crate::reuse`], up to a bound). Scans
//! holding runtime filters, a limit or a FLIXR join side are never shared: what they
//! return depends on operators that are not the same for both readers. Scans of
//! different devices never are, and an array scan's members are left as they are (the
//! array scan runs them). The rule runs
//! last, after every other rule has placed its filters on the scans.

use crate::exec::{only_child, recompute};
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, ReplaceChildrenOptions,
    SendableRecordBatchStream,
};
use futures::StreamExt;
use tokio::sync::OnceCell;

use crate::array::ArrayScanExec;
use crate::exec::DeviceScanExec;

/// Makes identical device scans of one plan one scan (see the [module docs](self)).
#[derive(Debug, Default)]
pub struct SharedDeviceScans;

impl PhysicalOptimizerRule for SharedDeviceScans {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // The first scan seen of each shareable kind, and how many there are.
        let mut seen: Vec<(String, Arc<dyn ExecutionPlan>, usize)> = Vec::new();
        plan.apply(|node| {
            if node.downcast_ref::<ArrayScanExec>().is_some() {
                return Ok(TreeNodeRecursion::Jump);
            }
            if let Some(key) = node
                .downcast_ref::<DeviceScanExec>()
                .and_then(DeviceScanExec::share_key)
            {
                match seen.iter_mut().find(|(k, _, _)| *k == key) {
                    Some((_, _, n)) => *n += 1,
                    None => seen.push((key, node.clone(), 1)),
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        let shared: Vec<(String, Arc<SharedScanExec>)> = seen
            .into_iter()
            .filter(|(_, _, n)| *n > 1)
            .map(|(key, scan, _)| (key, Arc::new(SharedScanExec::new(scan))))
            .collect();
        if shared.is_empty() {
            return Ok(plan);
        }
        plan.transform_down(|node| {
            if node.downcast_ref::<ArrayScanExec>().is_some() {
                return Ok(Transformed::new(node, false, TreeNodeRecursion::Jump));
            }
            let key = node
                .downcast_ref::<DeviceScanExec>()
                .and_then(DeviceScanExec::share_key);
            match key.and_then(|key| shared.iter().find(|(k, _)| *k == key)) {
                // Not into the shared node: its child is the scan it replaced.
                Some((_, s)) => Ok(Transformed::new(
                    s.clone() as Arc<dyn ExecutionPlan>,
                    true,
                    TreeNodeRecursion::Jump,
                )),
                None => Ok(Transformed::no(node)),
            }
        })
        .data()
    }

    fn name(&self) -> &str {
        "csd_shared_device_scans"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// What a shared scan handed over (or how it failed), once it ran.
type Output = std::result::Result<Arc<Vec<RecordBatch>>, Arc<DataFusionError>>;

/// A device scan read by several parts of a plan: the first reader runs it, every
/// reader gets all its batches (see the [module docs](self)).
pub struct SharedScanExec {
    scan: Arc<dyn ExecutionPlan>,
    output: Arc<OnceCell<Output>>,
}

impl SharedScanExec {
    /// `scan` (one partition), run once for all its readers.
    fn new(scan: Arc<dyn ExecutionPlan>) -> SharedScanExec {
        SharedScanExec {
            scan,
            output: Arc::new(OnceCell::new()),
        }
    }
}

/// `scan`'s batches: run by the first caller, the others wait for them in `output`.
async fn batches(
    scan: Arc<dyn ExecutionPlan>,
    output: Arc<OnceCell<Output>>,
    context: Arc<TaskContext>,
) -> Output {
    output
        .get_or_init(|| async {
            datafusion::physical_plan::collect(scan, context)
                .await
                .map(Arc::new)
                .map_err(Arc::new)
        })
        .await
        .clone()
}

impl fmt::Debug for SharedScanExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedScanExec({})", self.scan.name())
    }
}

impl DisplayAs for SharedScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "SharedScanExec: one device scan for every reader")
    }
}

impl ExecutionPlan for SharedScanExec {
    fn name(&self) -> &'static str {
        "SharedScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.scan.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.scan]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        // It owns no expression; its scan's are the scan's.
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let scan = only_child(children, "SharedScanExec")?;
        // The same scan: still the one shared output.
        if Arc::ptr_eq(&scan, &self.scan) {
            return Ok(self);
        }
        Ok(Arc::new(SharedScanExec::new(scan)))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(children, recompute())
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "SharedScanExec has one partition, not {partition}"
            )));
        }
        let schema = self.scan.schema();
        let stream =
            futures::stream::once(batches(self.scan.clone(), self.output.clone(), context))
                .flat_map(|out| {
                    let items: Vec<Result<RecordBatch>> = match out {
                        Ok(batches) => batches.iter().cloned().map(Ok).collect(),
                        Err(e) => vec![Err(DataFusionError::Shared(e))],
                    };
                    futures::stream::iter(items)
                });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}
