//! Join key sets for device scans: a hash join whose build side has more keys than
//! DataFusion lists in its runtime filter (`runtime::DEVICE_KEYS`) hands the device
//! scans below its probe side the build side's whole key set, which their program takes
//! as one `IN` term (a bitmap over the keys' span or a sorted list, see
//! [`csd_query::plan::ConstSet`]).
//!
//! Why: beyond `DEVICE_KEYS` keys DataFusion's runtime filter is a lookup in the join's
//! hash table (`hash_lookup`), which the device cannot evaluate, so a scan took only the
//! key bounds and streamed nearly the whole table to the host, where the join dropped
//! most rows (TPC-H Q3's lineitem scan handed over 3.2M rows to a join keeping 0.3M;
//! Q12's orders 1.5M for 31K lineitem keys). FLIXR (§4.5) hands a join's keys to the
//! device as a bitmap of its buckets; a Bloom filter does the same with false positives.
//! Here the set is exact: the program's `IN` term drops exactly the rows the join would
//! not match, and its cost is modeled as every predicate's (the device's cycles per
//! predicate evaluated, smart-ssd Table 2), so the modeled figures are those of the
//! program that ran, as for the shorter lists.
//!
//! How: [`JoinKeySets`], a physical optimizer rule run last, puts a [`KeyTapExec`] on
//! the build input of each such join: it passes the build rows on unchanged and keeps
//! their integer key values. The device scans on the probe side that hold the join's
//! dynamic filter get the [`KeySet`]. A scan waits for its joins' filters before it
//! starts (`runtime::wait_complete`), and a join completes its filter only after it
//! read its whole build input, so the set is complete when the scan reads it: what the
//! device takes never depends on thread timing.
//!
//! Choices:
//! * Only joins with a runtime filter (DataFusion makes one only where dropping probe
//!   rows without a match is correct), `NULL` never equal to `NULL`, and a key of
//!   integer type on the build side and `INT` (`INT32`/`INT64`) in the scan's program.
//!   Of several keys, the first such one (a superset of the matching rows: the host's
//!   filter and the join still check all).
//! * A set is taken when it fits the session arena as its lookup structure (bitmap or
//!   8 bytes a key, `isp.session_arena_kib`) and when it would drop rows: a set holding
//!   more than [`KEEP_PERCENT`] of the scanned column's distinct values (measured by the
//!   load) is not worth a predicate per row.
//! * The tap stops collecting beyond [`MAX_KEYS`] distinct keys (no device arena holds
//!   more); the set is then not offered.
//! * A join whose runtime filter no scan holds (its keys name columns of both sides of
//!   a join below it, TPC-H Q5's supplier join on `l_suppkey` and `c_nationkey`; or an
//!   aggregate's output, Q2's subquery joined on `ps_partkey` and `min(ps_supplycost)`)
//!   gives its first integer key's set to the scan that produces that key's column
//!   ([`ColumnKeySet`]), when every operator on the way passes rows on unchanged, joins
//!   them inner or groups them by that column; the scan waits for the join's filter as
//!   it would for one it held (and exposes it, so the join computes it). Q5 at SF 1: the
//!   orders-lineitem join sees 182K lineitem rows instead of 910K (same binary with and
//!   without, `csd bench tpch --sf 1 --repeat 3` on 2026-11-30: Q5 0.189 -> 0.144 s,
//!   total 3.22 -> 3.13 s); Q2's partsupp scan hands over 642 rows instead of 159K (Q2
//!   0.063-0.069 -> 0.033 s). Modeled device times unchanged.
//! * The optimizer estimates a scan below a probe side from what the set will leave
//!   ([`ExpectedKeySets`], run before DataFusion's join selection), so a join builds on
//!   the side that is small once the device dropped the rows without a match (TPC-H
//!   Q21's lineitem joined with one nation's suppliers, against 729K orders).
//! * `CSD_JOIN_KEY_SETS=off` in the environment turns both rules off (to measure what
//!   they change with one binary); `CSD_EXPECTED_KEY_SETS=off` the estimates alone.

use crate::exec::{only_child, recompute};
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use csd_query::plan::{ConstSet, Expr as DevExpr, ExprKind};
use csd_query::types::DataType as DevType;
use datafusion::arrow::array::{Array, Int64Array, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::JoinType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, NullEquality, Result, Statistics};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlanProperties;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties,
    RecordBatchStream, ReplaceChildrenOptions, SendableRecordBatchStream, StatisticsArgs,
    StatisticsContext,
};
use futures::Stream;

use crate::array::ArrayScanExec;
use crate::exec::DeviceScanExec;
use crate::translate::{self, Columns};

/// The most distinct keys a tap keeps (a 1 MiB bitmap's bits; no session arena of a
/// preset holds more).
pub(crate) const MAX_KEYS: usize = 1 << 23;

/// A set holding more than this share (percent) of the scanned column's distinct values
/// is not taken (the host's runtime filters give up at the same share).
pub(crate) const KEEP_PERCENT: usize = 75;

/// The build keys of one hash join, filled by its [`KeyTapExec`] and read by the device
/// scans below its probe side.
#[derive(Debug)]
pub(crate) struct KeySet {
    /// The expression id of the join's dynamic filter.
    pub(crate) filter: u64,
    /// Which of the join's `on` pairs the keys are of.
    pub(crate) on: usize,
    /// How many `on` pairs the join has (a set of the only key is the whole filter).
    pub(crate) keys_in_join: usize,
    /// The build input's partitions: the set is complete when each of them ended.
    parts: usize,
    state: Mutex<TapState>,
}

/// A join's key set given to a device scan that does not hold the join's runtime filter
/// but produces the column the join probes with, through operators that pass its rows
/// on unchanged, join them inner or group them by it (see [`JoinKeySets`]): the scan takes
/// `column IN (the set)` and, as for a filter it holds, waits for `filter` (the join's
/// dynamic filter, complete once the build side was read) before it starts.
#[derive(Debug, Clone)]
pub(crate) struct ColumnKeySet {
    /// The join's keys.
    pub(crate) set: Arc<KeySet>,
    /// The scan's output column the join's probe key comes from.
    pub(crate) column: usize,
    /// The join's dynamic filter, to wait for.
    pub(crate) filter: Arc<dyn PhysicalExpr>,
}

#[derive(Debug, Default)]
struct TapState {
    /// Keys merged from the partitions that ended (sorted and distinct once all did).
    keys: Vec<i64>,
    /// Build partitions executed, and those whose input ended.
    started: usize,
    ended: usize,
    /// More than [`MAX_KEYS`] keys, a value that is not an integer, or an input error:
    /// the set is not offered.
    given_up: bool,
    /// The complete set, once asked for.
    done: Option<Arc<[i64]>>,
}

impl KeySet {
    /// An empty set of the join's `on`-th key over a build input of `parts` partitions.
    pub(crate) fn new(filter: u64, on: usize, keys_in_join: usize, parts: usize) -> KeySet {
        KeySet {
            filter,
            on,
            keys_in_join,
            parts,
            state: Mutex::new(TapState::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, TapState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A build partition starts. A plan's key set serves its first run: executed again,
    /// the set is given up (a scan of the second run could read the first run's keys).
    fn partition_started(&self) {
        let mut s = self.state();
        s.started += 1;
        if s.started > self.parts {
            s.given_up = true;
            s.keys = Vec::new();
            s.done = None;
        }
    }

    /// Adds one build partition's keys (`None`: that partition gave up).
    fn partition_ended(&self, keys: Option<Vec<i64>>) {
        let mut s = self.state();
        s.ended += 1;
        match keys {
            Some(k) if !s.given_up => {
                s.keys.extend(k);
                if s.keys.len() > MAX_KEYS {
                    s.keys.sort_unstable();
                    s.keys.dedup();
                    if s.keys.len() > MAX_KEYS {
                        s.given_up = true;
                        s.keys = Vec::new();
                    }
                }
            }
            _ => {
                s.given_up = true;
                s.keys = Vec::new();
            }
        }
    }

    /// The distinct keys in ascending order, once every build partition ended; `None`
    /// before, or when the tap gave up.
    pub(crate) fn keys(&self) -> Option<Arc<[i64]>> {
        let mut s = self.state();
        if s.given_up || s.ended < self.parts {
            return None;
        }
        if s.done.is_none() {
            let mut k = std::mem::take(&mut s.keys);
            k.sort_unstable();
            k.dedup();
            s.done = Some(k.into());
        }
        s.done.clone()
    }

    /// The device term `key IN (the set)` for a scan whose output is `columns` of
    /// `schema`'s table, where `key` is the scan's side of the join's key (the dynamic
    /// filter's `on`-th child, `filter`); `None` when the set is not complete, the key
    /// is not an `INT` the device evaluates, the set does not fit `arena_bytes`, or it
    /// would keep more than [`KEEP_PERCENT`] of the column's `distinct` values.
    pub(crate) fn device_term(
        &self,
        filter: &Arc<dyn PhysicalExpr>,
        columns: &Columns,
        schema: &csd_table::Schema,
        arena_bytes: usize,
        distinct: impl Fn(usize) -> Option<usize>,
    ) -> Option<DevExpr> {
        let child = filter.children().get(self.on).copied()?.clone();
        let key = translate::physical(&child, columns, schema).ok()?;
        self.term_for_key(key, arena_bytes, distinct)
    }

    /// The device term `key IN (the set)` for the scan's column `key` (an `INT` the
    /// device evaluates); `None` when the set is not complete, does not fit
    /// `arena_bytes`, or would keep more than [`KEEP_PERCENT`] of the column's
    /// `distinct` values.
    pub(crate) fn term_for_key(
        &self,
        key: DevExpr,
        arena_bytes: usize,
        distinct: impl Fn(usize) -> Option<usize>,
    ) -> Option<DevExpr> {
        if key.ty != DevType::Int {
            return None;
        }
        let keys = self.keys()?;
        if let ExprKind::Column { index, .. } = key.kind
            && let Some(d) = distinct(index)
            && keys.len() * 100 > d * KEEP_PERCENT
        {
            return None;
        }
        let list = ConstSet::of_sorted_ints(keys);
        if list.lookup_bytes() > arena_bytes {
            return None;
        }
        Some(DevExpr::new(
            ExprKind::InList {
                expr: Box::new(key),
                list,
                negated: false,
            },
            DevType::Bool,
        ))
    }
}

/// The environment variable that turns the rule off (`off`) for a comparison; `on`
/// (the default when unset) keeps it.
pub const SWITCH: &str = "CSD_JOIN_KEY_SETS";

/// The environment variable that turns [`ExpectedKeySets`] alone off (`off`), to
/// measure what its estimates change; [`SWITCH`] turns it off with the key sets.
pub const EXPECT_SWITCH: &str = "CSD_EXPECTED_KEY_SETS";

/// Whether the rule runs, from [`SWITCH`]'s value (`None`: unset); another value than
/// `on` / `off` is an error naming the variable.
fn enabled(value: Option<&str>) -> Result<bool> {
    switch(SWITCH, value)
}

/// Whether the switch `name` is on, from its value (`None`: unset, on); another value
/// than `on` / `off` is an error naming the variable.
pub(crate) fn switch(name: &str, value: Option<&str>) -> Result<bool> {
    match value {
        None | Some("on") => Ok(true),
        Some("off") => Ok(false),
        Some(v) => Err(DataFusionError::Configuration(format!(
            "environment variable {name}={v}: use on or off"
        ))),
    }
}

/// Whether a build key of type `t` is kept (integers that fit an `i64`).
fn integer_key(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
    )
}

/// Gives the device scans below hash joins' probe sides their joins' key sets (see the
/// [module docs](self)). Runs last, once every filter is in place.
#[derive(Debug, Default)]
pub struct JoinKeySets;

impl PhysicalOptimizerRule for JoinKeySets {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !enabled(std::env::var(SWITCH).ok().as_deref())? {
            return Ok(plan);
        }
        plan.transform_up(|node| {
            let Some(join) = node.downcast_ref::<HashJoinExec>() else {
                return Ok(Transformed::no(node));
            };
            if join.null_equality() != NullEquality::NullEqualsNothing {
                return Ok(Transformed::no(node));
            }
            let ids: Vec<u64> = join
                .dynamic_expressions_produced()
                .iter()
                .filter_map(|e| e.expression_id())
                .collect();
            let &[id] = ids.as_slice() else {
                return Ok(Transformed::no(node));
            };
            let left_schema = join.left().schema();
            let Some(on) = join
                .on()
                .iter()
                .position(|(l, _)| l.data_type(&left_schema).is_ok_and(|t| integer_key(&t)))
            else {
                return Ok(Transformed::no(node));
            };
            let parts = join.left().output_partitioning().partition_count();
            let set = Arc::new(KeySet::new(id, on, join.on().len(), parts));
            let mut given = 0usize;
            let right = join
                .right()
                .clone()
                .transform_down(|n| {
                    if n.downcast_ref::<ArrayScanExec>().is_some() {
                        return Ok(Transformed::new(n, false, TreeNodeRecursion::Jump));
                    }
                    match n
                        .downcast_ref::<DeviceScanExec>()
                        .and_then(|s| s.with_key_set(&set))
                    {
                        Some(s) => {
                            given += 1;
                            Ok(Transformed::yes(Arc::new(s) as Arc<dyn ExecutionPlan>))
                        }
                        None => Ok(Transformed::no(n)),
                    }
                })
                .data()?;
            let mut right = right;
            if given == 0 {
                // No scan holds the filter (e.g. a key of two sides of a join below):
                // the scan that produces the probe key's column takes the set.
                let filter = join
                    .dynamic_expressions_produced()
                    .into_iter()
                    .find(|e| e.expression_id() == Some(id));
                let probe = join.on()[on].1.downcast_ref::<Column>().map(Column::index);
                if let (Some(filter), Some(col)) = (filter, probe) {
                    let cks = ColumnKeySet {
                        set: set.clone(),
                        column: col,
                        filter,
                    };
                    if let Some(r) = attach_column_set(&right, &cks)? {
                        right = r;
                        given = 1;
                    }
                }
            }
            if given == 0 {
                return Ok(Transformed::no(node));
            }
            let key = join.on()[on].0.clone();
            let left: Arc<dyn ExecutionPlan> = Arc::new(KeyTapExec {
                input: join.left().clone(),
                key,
                set,
            });
            let joined = node.clone().replace_children(
                vec![left, right],
                ReplaceChildrenOptions::new(ChildrenPropertiesMode::Keep),
            )?;
            Ok(Transformed::yes(joined))
        })
        .data()
    }

    fn name(&self) -> &str {
        "csd_join_key_sets"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Row estimates that count the key sets of joins (see the [module docs](self)): runs
/// just before DataFusion's join selection, which builds each hash table on the side
/// it estimates smaller. A device scan below a join's probe side will take the build
/// side's keys and drop the rows without a match, but its estimate knew only its own
/// filter, so a join's side that the device shrinks at run time looked as large as its
/// table. TPC-H Q21: lineitem joined with the suppliers of one nation (the nation's
/// key set reaches the supplier scan, the suppliers' the lineitem scan) hands over
/// 76K rows, estimated at millions, so the join with 729K orders built its table on
/// the orders.
///
/// For each inner hash join, top down, the side join selection will build on (the
/// smaller by DataFusion's own rule: bytes, else rows) is taken as the build side; the
/// device scan that produces the probe side's first integer key (through the
/// operators [`attach_column_set`] passes) is estimated to keep `build keys / its
/// distinct keys` of its rows, where the build keys are the build side's distinct
/// values of its key (at most its rows). Only when that share is at most
/// [`KEEP_PERCENT`], where [`JoinKeySets`] and the host's runtime filters give a
/// scan the set, and only when the probe side stays the larger one (else join
/// selection would build on it, and no set would reach it). Estimates change; what a
/// scan runs does not ([`EXPECT_SWITCH`] turns this rule off alone, [`SWITCH`] with
/// the key sets).
#[derive(Debug, Default)]
pub struct ExpectedKeySets;

impl PhysicalOptimizerRule for ExpectedKeySets {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !enabled(std::env::var(SWITCH).ok().as_deref())?
            || !switch(EXPECT_SWITCH, std::env::var(EXPECT_SWITCH).ok().as_deref())?
        {
            return Ok(plan);
        }
        plan.transform_down(|node| {
            let Some(join) = node.downcast_ref::<HashJoinExec>() else {
                return Ok(Transformed::no(node));
            };
            if *join.join_type() != JoinType::Inner
                || join.null_equality() != NullEquality::NullEqualsNothing
            {
                return Ok(Transformed::no(node));
            }
            let Some(build_left) = builds_left(join.left(), join.right())? else {
                return Ok(Transformed::no(node));
            };
            let (build, probe) = if build_left {
                (join.left(), join.right())
            } else {
                (join.right(), join.left())
            };
            let build_schema = build.schema();
            let pair = join.on().iter().find_map(|(l, r)| {
                let (b, p) = if build_left { (l, r) } else { (r, l) };
                let integer = b.data_type(&build_schema).is_ok_and(|t| integer_key(&t));
                let b = b.downcast_ref::<Column>()?.index();
                let p = p.downcast_ref::<Column>()?.index();
                integer.then_some((b, p))
            });
            let Some((b, p)) = pair else {
                return Ok(Transformed::no(node));
            };
            let stats = stats_of(build.as_ref())?;
            let Some(&rows) = stats.num_rows.get_value() else {
                return Ok(Transformed::no(node));
            };
            let keys = stats
                .column_statistics
                .get(b)
                .and_then(|c| c.distinct_count.get_value().copied())
                .unwrap_or(rows)
                .min(rows);
            let shrunk = at_column_scan(probe, p, &mut |scan, column| {
                let st = stats_of(scan).ok()?;
                let distinct = *st
                    .column_statistics
                    .get(column)?
                    .distinct_count
                    .get_value()?;
                let share = keys as f64 / distinct.max(1) as f64;
                (share * 100.0 <= KEEP_PERCENT as f64).then(|| scan.with_expected_share(share))
            })?;
            let Some(probe) = shrunk else {
                return Ok(Transformed::no(node));
            };
            // The build side stays the one chosen on the sides' own sizes: a probe side
            // estimated smaller than the build side after its key set would make join
            // selection build on it, and then no set reaches it (TPC-H Q16's partsupp).
            // (`builds_left` of the sides in the join's order: the same answer as before.)
            let still = if build_left {
                builds_left(build, &probe)?
            } else {
                builds_left(&probe, build)?
            };
            if still != Some(build_left) {
                return Ok(Transformed::no(node));
            }
            let kids = if build_left {
                vec![join.left().clone(), probe]
            } else {
                vec![probe, join.right().clone()]
            };
            let joined = node.clone().replace_children(
                kids,
                ReplaceChildrenOptions::new(ChildrenPropertiesMode::Keep),
            )?;
            Ok(Transformed::yes(joined))
        })
        .data()
    }

    fn name(&self) -> &str {
        "csd_expected_key_sets"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `plan`'s estimated statistics, as DataFusion's optimizer rules compute them.
fn stats_of(plan: &dyn ExecutionPlan) -> Result<Arc<Statistics>> {
    StatisticsContext::new().compute(plan, &StatisticsArgs::new())
}

/// Whether DataFusion's join selection will build a join of `left` and `right` on
/// `left` (it swaps the sides when left's estimated bytes, else rows, are more than
/// right's); `None` when neither is known.
fn builds_left(
    left: &Arc<dyn ExecutionPlan>,
    right: &Arc<dyn ExecutionPlan>,
) -> Result<Option<bool>> {
    let (l, r) = (stats_of(left.as_ref())?, stats_of(right.as_ref())?);
    Ok(
        match (l.total_byte_size.get_value(), r.total_byte_size.get_value()) {
            (Some(a), Some(b)) => Some(a <= b),
            _ => match (l.num_rows.get_value(), r.num_rows.get_value()) {
                (Some(a), Some(b)) => Some(a <= b),
                _ => None,
            },
        },
    )
}

/// `plan` with `cks` given to the device scan whose output column `cks.column` of
/// `plan`'s output comes from, when every operator on the way passes rows on unchanged
/// (repartitions, coalescing, filters, projections of plain columns, key taps), joins
/// them inner (a row dropped there can only make output rows the join above drops) or
/// groups them by the column (a row dropped there only drops a group the join drops);
/// `None` otherwise.
fn attach_column_set(
    plan: &Arc<dyn ExecutionPlan>,
    cks: &ColumnKeySet,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    at_column_scan(plan, cks.column, &mut |scan, column| {
        scan.with_column_key_set(&ColumnKeySet {
            column,
            ..cks.clone()
        })
    })
}

/// `plan` with `change` applied to the device scan whose output column `idx` of
/// `plan`'s output comes from and to that column's index in the scan's output, along
/// the path [`attach_column_set`] describes; `None` where there is no such path or
/// `change` declines.
fn at_column_scan(
    plan: &Arc<dyn ExecutionPlan>,
    idx: usize,
    change: &mut dyn FnMut(&DeviceScanExec, usize) -> Option<DeviceScanExec>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if let Some(scan) = plan.downcast_ref::<DeviceScanExec>() {
        return Ok(change(scan, idx).map(|s| Arc::new(s) as Arc<dyn ExecutionPlan>));
    }
    // The child the column comes from, and its index there.
    let next: Option<(usize, usize)> = if plan.downcast_ref::<RepartitionExec>().is_some()
        || plan.downcast_ref::<CoalescePartitionsExec>().is_some()
        || plan.downcast_ref::<KeyTapExec>().is_some()
    {
        Some((0, idx))
    } else if let Some(f) = plan.downcast_ref::<FilterExec>() {
        match f.projection() {
            Some(p) => p.get(idx).map(|&i| (0, i)),
            None => Some((0, idx)),
        }
    } else if let Some(p) = plan.downcast_ref::<ProjectionExec>() {
        p.expr()
            .get(idx)
            .and_then(|e| e.expr.downcast_ref::<Column>())
            .map(|c| (0, c.index()))
    } else if let Some(a) = plan.downcast_ref::<AggregateExec>() {
        // A grouping column: rows dropped below drop only groups the join drops.
        let g = a.group_expr();
        if g.is_single() {
            g.expr()
                .get(idx)
                .and_then(|(e, _)| e.downcast_ref::<Column>())
                .map(|c| (0, c.index()))
        } else {
            None
        }
    } else if let Some(j) = plan.downcast_ref::<HashJoinExec>() {
        if *j.join_type() != JoinType::Inner {
            None
        } else {
            let i = match &j.projection {
                Some(p) => p.get(idx).copied(),
                None => Some(idx),
            };
            let left = j.left().schema().fields().len();
            i.map(|i| if i < left { (0, i) } else { (1, i - left) })
        }
    } else {
        None
    };
    let Some((child, column)) = next else {
        return Ok(None);
    };
    let mut kids: Vec<Arc<dyn ExecutionPlan>> = plan.children().into_iter().cloned().collect();
    let Some(c) = kids.get(child) else {
        return Ok(None);
    };
    let Some(new_child) = at_column_scan(c, column, change)? else {
        return Ok(None);
    };
    kids[child] = new_child;
    plan.clone()
        .replace_children(
            kids,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Keep),
        )
        .map(Some)
}

/// A hash join's build input, passed on unchanged, whose key values it keeps for the
/// device scans below the join's probe side (see the [module docs](self)).
pub struct KeyTapExec {
    input: Arc<dyn ExecutionPlan>,
    /// The join's key on the build side (an expression over `input`'s rows).
    key: Arc<dyn PhysicalExpr>,
    set: Arc<KeySet>,
}

impl fmt::Debug for KeyTapExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyTapExec({})", self.key)
    }
}

impl DisplayAs for KeyTapExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "KeyTapExec: keys of {} for the device scans of the probe side",
            self.key
        )
    }
}

impl ExecutionPlan for KeyTapExec {
    fn name(&self) -> &'static str {
        "KeyTapExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        f(&self.key)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(KeyTapExec {
            input: only_child(children, "KeyTapExec")?,
            key: self.key.clone(),
            set: self.set.clone(),
        }))
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
        let input = self.input.execute(partition, context)?;
        self.set.partition_started();
        Ok(Box::pin(TapStream {
            schema: input.schema(),
            input,
            key: self.key.clone(),
            set: self.set.clone(),
            keys: Some(Vec::new()),
            deduped: 0,
            ended: false,
        }))
    }
}

/// A build partition's stream: its batches, unchanged, and their keys kept.
struct TapStream {
    input: SendableRecordBatchStream,
    schema: SchemaRef,
    key: Arc<dyn PhysicalExpr>,
    set: Arc<KeySet>,
    /// The keys so far (`None`: given up).
    keys: Option<Vec<i64>>,
    /// Length of `keys` after its last deduplication.
    deduped: usize,
    ended: bool,
}

impl TapStream {
    /// Keeps `batch`'s non-null keys; gives up on a key that is not an integer or
    /// beyond [`MAX_KEYS`] distinct keys.
    fn keep(&mut self, batch: &RecordBatch) {
        if self.keys.is_none() {
            return;
        }
        let values = self
            .key
            .evaluate(batch)
            .and_then(|v| v.into_array(batch.num_rows()))
            .and_then(|a| Ok(cast(&a, &DataType::Int64)?));
        let ints = values
            .ok()
            .and_then(|a| a.as_any().downcast_ref::<Int64Array>().cloned());
        let Some(ints) = ints else {
            self.keys = None;
            return;
        };
        let Some(keys) = self.keys.as_mut() else {
            return;
        };
        if ints.null_count() == 0 {
            keys.extend_from_slice(ints.values());
        } else {
            keys.extend(ints.iter().flatten());
        }
        if keys.len() > 2 * self.deduped.max(1 << 16) {
            keys.sort_unstable();
            keys.dedup();
            self.deduped = keys.len();
            if self.deduped > MAX_KEYS {
                self.keys = None;
            }
        }
    }

    /// Hands the partition's keys to the set (once).
    fn end(&mut self, ok: bool) {
        if !self.ended {
            self.ended = true;
            let keys = self.keys.take().filter(|_| ok);
            self.set.partition_ended(keys);
        }
    }
}

impl Stream for TapStream {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.input.as_mut().poll_next(cx);
        match &polled {
            Poll::Ready(Some(Ok(batch))) => self.keep(batch),
            Poll::Ready(Some(Err(_))) => self.end(false),
            Poll::Ready(None) => self.end(true),
            Poll::Pending => {}
        }
        polled
    }
}

impl RecordBatchStream for TapStream {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

impl Drop for TapStream {
    /// A partition dropped before its end gave no complete set.
    fn drop(&mut self) {
        self.end(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_take_on_or_off_and_name_the_variable_otherwise() {
        assert!(switch(EXPECT_SWITCH, None).expect("unset"));
        assert!(switch(EXPECT_SWITCH, Some("on")).expect("on"));
        assert!(!switch(EXPECT_SWITCH, Some("off")).expect("off"));
        let e = switch(EXPECT_SWITCH, Some("no")).expect_err("neither");
        assert!(e.to_string().contains("CSD_EXPECTED_KEY_SETS=no"), "{e}");
    }

    #[test]
    fn a_set_is_complete_when_every_partition_ended_and_gives_up_on_failure() {
        let set = KeySet::new(7, 0, 1, 2);
        set.partition_started();
        set.partition_started();
        set.partition_ended(Some(vec![5, 3, 5]));
        assert!(set.keys().is_none(), "one of two partitions ended");
        set.partition_ended(Some(vec![1, 3]));
        assert_eq!(set.keys().as_deref(), Some(&[1, 3, 5][..]));
        // Read twice: the same set.
        assert_eq!(set.keys().as_deref(), Some(&[1, 3, 5][..]));

        // Executed again: given up.
        set.partition_started();
        assert!(set.keys().is_none(), "a second run");

        let failed = KeySet::new(7, 0, 1, 2);
        failed.partition_ended(Some(vec![1]));
        failed.partition_ended(None);
        assert!(failed.keys().is_none(), "a partition gave up");
    }

    #[test]
    fn the_device_term_is_the_complete_set_when_it_fits_and_drops_rows() {
        use csd_table::schema::{Column as TableColumn, ColumnType};
        use datafusion::physical_expr::expressions::{Column, DynamicFilterPhysicalExpr, lit};
        let table = csd_table::Schema::new(
            "t",
            vec![
                TableColumn::new("k", ColumnType::Int64),
                TableColumn::new("c", ColumnType::Char(4)),
            ],
        )
        .expect("schema");
        let columns: Columns = vec![DevExpr::column(&table, 0), DevExpr::column(&table, 1)];
        let on = |i: usize, name: &str| {
            let k: Arc<dyn PhysicalExpr> = Arc::new(Column::new(name, i));
            Arc::new(DynamicFilterPhysicalExpr::new(vec![k], lit(true))) as Arc<dyn PhysicalExpr>
        };
        let filter = on(0, "k");
        let set = KeySet::new(1, 0, 1, 1);
        let any = |_: usize| None;
        assert!(
            set.device_term(&filter, &columns, &table, 1 << 20, any)
                .is_none(),
            "not complete"
        );
        set.partition_started();
        set.partition_ended(Some(vec![9, 3, 5, 3]));
        let term = set
            .device_term(&filter, &columns, &table, 1 << 20, any)
            .expect("taken");
        assert_eq!(term.to_string(), "k IN (3, 5, 9)");
        // Three keys of 8 bytes do not fit 16 bytes of arena.
        assert!(
            set.device_term(&filter, &columns, &table, 16, any)
                .is_none()
        );
        // The column has 4 distinct values: the set keeps 75% of them, still taken; of 3
        // it keeps them all: not worth a predicate per row.
        assert!(
            set.device_term(&filter, &columns, &table, 1 << 20, |_| Some(4))
                .is_some()
        );
        assert!(
            set.device_term(&filter, &columns, &table, 1 << 20, |_| Some(3))
                .is_none()
        );
        // A key the program holds as a string is not an integer set's.
        assert!(
            set.device_term(&on(1, "c"), &columns, &table, 1 << 20, any)
                .is_none()
        );
    }

    #[test]
    fn the_switch_takes_on_and_off_only() {
        assert!(enabled(None).expect("unset"));
        assert!(enabled(Some("on")).expect("on"));
        assert!(!enabled(Some("off")).expect("off"));
        let e = enabled(Some("no")).expect_err("a bad value");
        assert!(e.to_string().contains("CSD_JOIN_KEY_SETS=no"), "{e}");
    }

    #[test]
    fn too_many_distinct_keys_give_the_set_up() {
        let set = KeySet::new(1, 0, 1, 1);
        set.partition_ended(Some((0..=MAX_KEYS as i64).collect()));
        assert!(set.keys().is_none());
        let dup = KeySet::new(1, 0, 1, 1);
        dup.partition_ended(Some(vec![4; MAX_KEYS + 1]));
        assert_eq!(dup.keys().as_deref(), Some(&[4][..]));
    }
}
