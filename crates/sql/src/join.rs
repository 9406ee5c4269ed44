//! FLIXR join bitmaps from SQL (flixr §4.5): [`DeviceJoinBitmap`], a physical optimizer
//! rule that pairs the two device scans of an equi-join so the build side's scan reads
//! its table with READ_IDX_JOIN1 (building a per-table bitmap of its join keys' buckets
//! in the device) and the probe side's with READ_IDX_JOIN2 (reading only the pages whose
//! bitmap entry shares a bucket with it).
//!
//! Choices made here:
//! * The seam is `HashJoinExec`, after DataFusion's join selection (the rule runs last):
//!   its left input is the build side, collected entirely before the right (probe) input
//!   is polled, whatever the SQL's table order. So the left scan is JOIN1's and the right
//!   scan JOIN2's. Between the join and each scan only operators that keep column
//!   positions or map them plainly are crossed (projections of columns, repartitions,
//!   coalescing, filters, cooperative wrappers); a limit on the probe side would pick
//!   other rows if pages were skipped, so it stops the rule.
//! * When: one `on` pair whose two sides are plain columns of the two scans; the probe
//!   table has a bitmap index on its join column; the build table has a FLIXR index
//!   (any kind, on any column: JOIN1 reads under that index's rule, the filter's when it
//!   constrains the indexed column, else one matching every value) and its join column is
//!   numeric of the same type. The per-table bitmap takes the probe index's split points,
//!   so both bucket keys alike (`CREATE INDEX ... USING bitmap WITH (share = 'idx')` gives
//!   both tables the same ones). Only join types whose output does not depend on probe
//!   rows without a match: inner, left outer, left semi/anti/mark and right semi.
//! * The bitmap is a superset of the build rows' keys (all rows that satisfy the index
//!   rule, not only the filter's), so pages skipped never hold a matching row.
//! * Join reads return pages to the host: both scans run in-host (ihp), whatever the
//!   strategy setting; `SET csd.use_index = false` (or `--no-index`) turns the rule off.
//! * The probe scan checks that the build scan of the same run finished and left the
//!   bitmap; if not (or if registering the per-table index failed), both fall back to
//!   plain scans, said in the scan's "why".
//! * Releasing: the device's tables of per-table indexes and join rules are small (256
//!   entries each), so a join gives back what it registered. The probe scan, once it
//!   finished (or fell back), releases the join rule (DropTidxIcr) and the per-table
//!   index (DropTidxEnc); when the probe scan never runs (DataFusion does not poll the
//!   probe side of an empty build side) the link releases them when the plan is dropped.
//!   Each run registers afresh, so a session may run any number of joins.
//! * The modeled time of these commands (SEND_TIDX_ENC on the build scan; SEND_TIDX_ICR
//!   and both releases on the probe scan) is the scan's setup time: in its report
//!   (`setup_ns`, counted in `modeled_ns` and `commands`), `--json` and EXPLAIN ANALYZE.

use crate::exec::recompute;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use csd_device::{Command, IndexEncoding, JoinIndexSpec};
use csd_host::{Client, CommandIssuer, TableInfo};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::{JoinType, Result};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;

use crate::device::Device;
use crate::exec::{DeviceScanExec, ScanOutput};

/// Which side of a FLIXR join a scan reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinSide {
    /// The build side: READ_IDX_JOIN1.
    Build,
    /// The probe side: READ_IDX_JOIN2.
    Probe,
}

/// What the device holds for one join of a plan.
#[derive(Debug, Default)]
struct LinkState {
    /// The per-table index (SEND_TIDX_ENC), once registered.
    tia: Option<u16>,
    /// The join rule (SEND_TIDX_ICR), once registered.
    rule: Option<u16>,
    /// The build scan of the current run finished: the bitmap is complete.
    ready: bool,
    /// The device the registrations live on (to release them when the plan is dropped).
    device: Option<Weak<Device>>,
}

/// The link between the two scans of one join: the build scan fills the device's
/// per-table index, the probe scan reads under it.
#[derive(Debug)]
pub struct JoinLink {
    /// The build side's join key column (its table's column name).
    pub build_key: String,
    /// The split points (the probe index's).
    pub bounds: Vec<i64>,
    /// The probe table's FLIXR table id.
    pub probe_table: u8,
    state: Mutex<LinkState>,
}

impl JoinLink {
    fn state(&self) -> std::sync::MutexGuard<'_, LinkState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The registered per-table index, if any.
    pub(crate) fn tia(&self) -> Option<u16> {
        self.state().tia
    }

    /// Remembers the per-table index registered for this join.
    pub(crate) fn set_tia(&self, tia: u16) {
        self.state().tia = Some(tia);
    }

    /// The registered join rule, if any.
    pub(crate) fn rule(&self) -> Option<u16> {
        self.state().rule
    }

    /// Remembers the join rule registered for this join.
    pub(crate) fn set_rule(&self, rule: u16) {
        self.state().rule = Some(rule);
    }

    /// Marks the bitmap complete (`true`, the build scan finished) or not.
    pub(crate) fn set_ready(&self, ready: bool) {
        self.state().ready = ready;
    }

    /// Takes the "bitmap complete" mark (the probe scan uses it once).
    pub(crate) fn take_ready(&self) -> bool {
        std::mem::take(&mut self.state().ready)
    }

    /// Remembers the device the registrations are made on.
    pub(crate) fn set_device(&self, device: &Arc<Device>) {
        self.state().device = Some(Arc::downgrade(device));
    }

    /// Releases the join rule and the per-table index this link registered (DropTidxIcr,
    /// DropTidxEnc); returns the modeled nanoseconds and the commands it took. A refused
    /// release (the device lost them with power) is nothing left to release.
    pub(crate) fn release(&self, c: &mut Client) -> (u64, u64) {
        let (rule, tia) = {
            let mut st = self.state();
            (st.rule.take(), st.tia.take())
        };
        let t0 = c.now();
        let mut commands = 0;
        if let Some(rule) = rule {
            let _ = c.exec(Command::DropTidxIcr {
                table: self.probe_table,
                rule,
            });
            commands += 1;
        }
        if let Some(tia) = tia {
            let _ = c.exec(Command::DropTidxEnc { tia });
            commands += 1;
        }
        (c.now().since(t0), commands)
    }
}

impl Drop for JoinLink {
    fn drop(&mut self) {
        let device = {
            let st = self.state();
            if st.rule.is_none() && st.tia.is_none() {
                return;
            }
            st.device.as_ref().and_then(Weak::upgrade)
        };
        if let Some(d) = device {
            let mut c = d.lock();
            self.release(&mut c);
        }
    }
}

/// A scan's role in a FLIXR join.
#[derive(Debug, Clone)]
pub struct JoinRole {
    /// Build or probe.
    pub side: JoinSide,
    /// Shared with the other side's scan.
    pub link: Arc<JoinLink>,
}

/// The physical optimizer rule: see the [module docs](self).
#[derive(Debug, Default)]
pub struct DeviceJoinBitmap;

impl PhysicalOptimizerRule for DeviceJoinBitmap {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            if let Some(join) = node.downcast_ref::<HashJoinExec>()
                && let Some(new) = pair(&node, join)?
            {
                return Ok(Transformed::yes(new));
            }
            Ok(Transformed::no(node))
        })
        .data()
    }

    fn name(&self) -> &str {
        "csd_flixr_join_bitmap"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Join types whose output does not change when probe rows without a match are left out.
fn prunable(t: JoinType) -> bool {
    matches!(
        t,
        JoinType::Inner
            | JoinType::Left
            | JoinType::LeftSemi
            | JoinType::LeftAnti
            | JoinType::LeftMark
            | JoinType::RightSemi
    )
}

/// Follows output column `col` of `plan` down to a device scan; returns the scan and the
/// table column (schema index) it is.
fn trace(plan: &Arc<dyn ExecutionPlan>, col: usize) -> Option<(&DeviceScanExec, usize)> {
    if let Some(scan) = plan.downcast_ref::<DeviceScanExec>() {
        return match &scan.output {
            ScanOutput::Rows(idx) if scan.join.is_none() => Some((scan, *idx.get(col)?)),
            _ => None,
        };
    }
    if let Some(p) = plan.downcast_ref::<ProjectionExec>() {
        let c = p.expr().get(col)?.expr.downcast_ref::<Column>()?.index();
        return trace(p.input(), c);
    }
    if let Some(f) = plan.downcast_ref::<FilterExec>() {
        let c = match f.projection() {
            Some(p) => *p.get(col)?,
            None => col,
        };
        return trace(f.input(), c);
    }
    let passes = plan.downcast_ref::<RepartitionExec>().is_some()
        || matches!(
            plan.name(),
            "CoalesceBatchesExec" | "CoalescePartitionsExec" | "CooperativeExec"
        );
    match plan.children().as_slice() {
        [child] if passes && child.schema().fields().len() == plan.schema().fields().len() => {
            trace(child, col)
        }
        _ => None,
    }
}

/// `plan` with the device scan at its bottom (the one [`trace`] found) given `role`.
fn with_role(plan: &Arc<dyn ExecutionPlan>, role: &JoinRole) -> Result<Arc<dyn ExecutionPlan>> {
    if let Some(scan) = plan.downcast_ref::<DeviceScanExec>() {
        return Ok(Arc::new(scan.with_join(role.clone())));
    }
    let children: Vec<Arc<dyn ExecutionPlan>> = plan.children().into_iter().cloned().collect();
    let new = children
        .iter()
        .map(|c| with_role(c, role))
        .collect::<Result<Vec<_>>>()?;
    plan.clone().replace_children(new, recompute())
}

fn numeric_key(t: &TableInfo, col: usize) -> Option<csd_table::schema::ColumnType> {
    let ty = t.schema.columns().get(col)?.ty;
    ty.is_numeric().then_some(ty)
}

/// The join with its two scans paired, if the join qualifies.
fn pair(
    node: &Arc<dyn ExecutionPlan>,
    join: &HashJoinExec,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if !prunable(*join.join_type()) {
        return Ok(None);
    }
    for (l, r) in join.on() {
        let (Some(lc), Some(rc)) = (l.downcast_ref::<Column>(), r.downcast_ref::<Column>()) else {
            continue;
        };
        let (Some((build, bcol)), Some((probe, pcol))) = (
            trace(join.left(), lc.index()),
            trace(join.right(), rc.index()),
        ) else {
            continue;
        };
        if !build.settings.options.use_index
            || !probe.settings.options.use_index
            || probe.limit.is_some()
            || build.table.index.is_none()
        {
            continue;
        }
        let Some(pix) = &probe.table.index else {
            continue;
        };
        let Some(pname) = probe
            .table
            .schema
            .columns()
            .get(pcol)
            .map(|c| c.name.clone())
        else {
            continue;
        };
        // The probe table's bitmap key on its join column: its first index or a
        // secondary key.
        let Some(bounds) = pix.keys().find_map(|k| match &k.encoding {
            IndexEncoding::Bitmap { bounds } if csd_host::same_name(&pname, &k.column) => {
                Some(bounds)
            }
            _ => None,
        }) else {
            continue;
        };
        let (Some(bt), Some(pt)) = (
            numeric_key(&build.table, bcol),
            numeric_key(&probe.table, pcol),
        ) else {
            continue;
        };
        if bt != pt {
            continue;
        }
        let Some(build_key) = build
            .table
            .schema
            .columns()
            .get(bcol)
            .map(|c| c.name.clone())
        else {
            continue;
        };
        let link = Arc::new(JoinLink {
            build_key,
            bounds: bounds.clone(),
            probe_table: pix.flixr_table,
            state: Mutex::new(LinkState::default()),
        });
        let left = with_role(
            join.left(),
            &JoinRole {
                side: JoinSide::Build,
                link: link.clone(),
            },
        )?;
        let right = with_role(
            join.right(),
            &JoinRole {
                side: JoinSide::Probe,
                link,
            },
        )?;
        return Ok(Some(
            node.clone()
                .replace_children(vec![left, right], recompute())?,
        ));
    }
    Ok(None)
}

/// The per-table index spec a build scan registers.
pub(crate) fn spec(link: &JoinLink) -> JoinIndexSpec {
    JoinIndexSpec {
        column: link.build_key.clone(),
        bounds: link.bounds.clone(),
    }
}
