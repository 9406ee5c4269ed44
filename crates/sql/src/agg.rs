//! Aggregate pushdown: [`DeviceAggregatePushdown`], a physical optimizer rule that
//! replaces a `Partial` `AggregateExec` over a device scan by a device partial
//! aggregation (smart-ssd-query-processing §3–4: aggregation inside the device; the
//! scan paper's strategies decide where it runs), whose states DataFusion's `Final`
//! aggregate merges. A `Single` aggregate (one input partition) is first split into
//! `Partial` and `Final`, so that what the device does does not depend on the host's
//! core count.
//!
//! The rule looks through `RepartitionExec`, `CoalesceBatchesExec`, `CooperativeExec` and
//! `ProjectionExec` (DataFusion's common-subexpression projection, e.g. Q1's
//! `l_extendedprice * (1 - l_discount)`) down to a [`DeviceScanExec`] that returns rows.
//! Over an array ([`ArrayScanExec`], one device scan per partition) every device runs
//! the same partial aggregation. It pushes only when everything translates exactly: grouping keys that are table
//! columns; `COUNT`, `SUM`, `AVG`, `MIN`, `MAX` without `DISTINCT` or `FILTER`, whose
//! arguments are column arithmetic the device computes exactly (`+ - *`, exact casts).
//! Otherwise the plan is left as it was. An argument may be NULL: the device skips its
//! NULL rows and counts the values it folded (`COUNT(x)`, `AVG(x)`'s count, a `SUM(x)`
//! of no values is NULL), as DataFusion does. `DECIMAL(p, s)` (128-bit) `SUM`, `AVG`,
//! `MIN`, `MAX` run in the device in `i128` (`AVG` as count and sum, which DataFusion
//! divides as for its own; a sum beyond `i128` is an overflow error in the device where
//! DataFusion's wraps around), and so do `MIN`/`MAX` of `VARCHAR` and `VARBINARY`, byte
//! for byte (UTF-8 byte order is Arrow's string order). Float aggregates stay
//! DataFusion's: a float `SUM`/`AVG` depends on the order of its additions (DataFusion's
//! batches and partitions), which the device does not reproduce bit for bit, and a
//! float `MIN`/`MAX` among `-0.0`/`0.0` or NaNs on the order rows are seen.
//! Grouping keys must be NOT NULL columns.
//!
//! The device's states (exact `i128` sums, row counts, extremes) become DataFusion's
//! partial-state columns (`sum`, `count` + `sum` for `AVG`, the value for `MIN`/`MAX`)
//! through Arrow casts from an exact `Decimal128(38, s)`, so the final aggregate computes
//! what it would have from its own partial aggregate. `AVG` of an integer column, which
//! DataFusion computes over `CAST(x AS Float64)` (the smart-ssd paper's aggregation
//! query, `SELECT AVG(c2) FROM SyntheticN WHERE c1 < v`, §4.2.2), is pushed too: the
//! device sums the integers exactly and hands the sum over as the nearest `Float64`.
//! That is exactly DataFusion's own sum whenever its running `Float64` sums stay below
//! 2^53 (any `INT32` column of up to 2^22 rows, and far more in practice); beyond, the
//! device's is the correctly rounded one, while DataFusion's depends on its batching. The pushdown runs with every
//! strategy: under IHP the host's evaluator aggregates (as `csd query` always did),
//! under cpu-isp / hw-isp the device does, and only states cross the host link.

use std::sync::Arc;

use csd_query::plan::{AggFunc, Aggregate, Aggregation, Expr as DevExpr, ExprKind, Plan};
use csd_query::types::DataType as DevType;
use csd_query::{AccView, AggState};
use csd_table::schema::{ColumnType, Schema, decode_numeric};
use datafusion::arrow::array::{
    ArrayRef, BinaryArray, Decimal128Array, Float64Array, Int64Array, RecordBatch,
    RecordBatchOptions, StringBuilder, UInt64Array,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::{DataFusionError, Result};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::{CastExpr, Literal};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};

use crate::array::ArrayScanExec;
use crate::exec::{DeviceScanExec, HostPartial, ScanOutput};
use crate::schema::{DECIMAL_PRECISION, column_array};
use crate::translate::{Columns, physical};

/// How one aggregate's device state becomes DataFusion state columns.
#[derive(Debug, Clone, Copy, PartialEq)]
enum StateKind {
    /// `count`: the group's rows.
    Count,
    /// `sum` at scale `s`.
    Sum(u8),
    /// `avg`: count then sum at scale `s`.
    Avg(u8),
    /// `avg` of an integer, which DataFusion averages as `Float64`: count then the
    /// device's exact sum as the nearest `Float64`.
    AvgFloat,
    /// `min` / `max` of a value of this device type.
    Extreme(DevType),
}

/// The layout of a device partial aggregation's output (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct AggOutputSpec {
    group_types: Vec<ColumnType>,
    kinds: Vec<StateKind>,
    text: String,
}

impl AggOutputSpec {
    /// The aggregation in words.
    pub fn describe(&self) -> &str {
        &self.text
    }

    /// The device state as a batch of DataFusion's partial-aggregate `schema`.
    pub fn to_batch(&self, st: &AggState, schema: &SchemaRef) -> Result<RecordBatch> {
        let n = st.group_count();
        let rows = st.group_rows();
        let mut cols: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        for (i, &ty) in self.group_types.iter().enumerate() {
            let arr = match ty {
                ColumnType::Char(w) => {
                    let w = w as usize;
                    let mut bytes = Vec::with_capacity(n * w);
                    for g in 0..n {
                        bytes.extend_from_slice(st.key_bytes(g, i));
                    }
                    column_array(
                        ty,
                        csd_query::ColumnData::Char {
                            width: w,
                            bytes: &bytes,
                        },
                    )?
                }
                _ => {
                    let v: Vec<i64> = (0..n)
                        .map(|g| decode_numeric(ty, st.key_bytes(g, i)).unwrap_or(0))
                        .collect();
                    column_array(ty, csd_query::ColumnData::Num(&v))?
                }
            };
            cols.push(arr);
        }
        // The values each aggregate folded per group: the group's rows, or the rows
        // where a nullable argument was not NULL (a SUM of no values is NULL).
        let values = |a: usize| -> Result<&[u64]> {
            st.value_rows(a).ok_or_else(|| {
                DataFusionError::Internal(format!("the device state has no aggregate {a}"))
            })
        };
        let sums = |a: usize, s: u8| -> Result<ArrayRef> {
            let Some(AccView::Sum(v)) = st.accumulator(a) else {
                return Err(DataFusionError::Internal(format!(
                    "aggregate {a} is not a sum"
                )));
            };
            let arr = Decimal128Array::from_iter(
                v.iter()
                    .zip(values(a)?)
                    .map(|(&x, &r)| (r > 0).then_some(x)),
            )
            .with_precision_and_scale(38, s as i8)?;
            Ok(Arc::new(arr))
        };
        for (a, kind) in self.kinds.iter().enumerate() {
            match *kind {
                StateKind::Count => cols.push(Arc::new(Int64Array::from_iter_values(
                    values(a)?.iter().map(|&r| r as i64),
                ))),
                StateKind::Sum(s) => cols.push(sums(a, s)?),
                StateKind::Avg(s) => {
                    cols.push(Arc::new(UInt64Array::from(values(a)?.to_vec())));
                    cols.push(sums(a, s)?);
                }
                StateKind::AvgFloat => {
                    let Some(AccView::Sum(v)) = st.accumulator(a) else {
                        return Err(DataFusionError::Internal(format!(
                            "aggregate {a} is not a sum"
                        )));
                    };
                    let n = values(a)?;
                    cols.push(Arc::new(UInt64Array::from(n.to_vec())));
                    cols.push(Arc::new(Float64Array::from_iter(
                        v.iter().zip(n).map(|(&x, &r)| (r > 0).then_some(x as f64)),
                    )));
                }
                StateKind::Extreme(ty) => cols.push(extremes(st, a, ty, rows)?),
            }
        }
        let fields = schema.fields();
        if fields.len() != cols.len() {
            return Err(DataFusionError::Internal(format!(
                "device partial aggregate has {} columns, DataFusion expects {}",
                cols.len(),
                fields.len()
            )));
        }
        let cols = cols
            .into_iter()
            .zip(fields.iter())
            .map(|(c, f)| {
                if c.data_type() == f.data_type() {
                    Ok(c)
                } else {
                    cast(&c, f.data_type()).map_err(DataFusionError::from)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let opts = RecordBatchOptions::new().with_row_count(Some(n));
        Ok(RecordBatch::try_new_with_options(
            schema.clone(),
            cols,
            &opts,
        )?)
    }
}

fn extremes(st: &AggState, a: usize, ty: DevType, rows: &[u64]) -> Result<ArrayRef> {
    Ok(match st.accumulator(a) {
        Some(AccView::MinMax { val, seen }) => {
            let ok = |g: usize| seen.get(g).copied().unwrap_or(false) && rows[g] > 0;
            match ty {
                DevType::Decimal { scale } => Arc::new(
                    Decimal128Array::from_iter(
                        val.iter()
                            .enumerate()
                            .map(|(g, &x)| ok(g).then_some(i128::from(x))),
                    )
                    .with_precision_and_scale(DECIMAL_PRECISION, scale as i8)?,
                ),
                DevType::Date => Arc::new(datafusion::arrow::array::Date32Array::from_iter(
                    val.iter()
                        .enumerate()
                        .map(|(g, &x)| if ok(g) { i32::try_from(x).ok() } else { None }),
                )),
                _ => Arc::new(Int64Array::from_iter(
                    val.iter().enumerate().map(|(g, &x)| ok(g).then_some(x)),
                )),
            }
        }
        Some(AccView::MinMaxChar { val, seen }) => {
            let ok = |g: usize| seen.get(g).copied().unwrap_or(false) && rows[g] > 0;
            match ty {
                // A VARBINARY extreme: the bytes.
                DevType::Varbinary => Arc::new(BinaryArray::from_iter(
                    val.iter()
                        .enumerate()
                        .map(|(g, v)| ok(g).then_some(v.as_slice())),
                )),
                _ => {
                    let mut b = StringBuilder::new();
                    for (g, v) in val.iter().enumerate() {
                        if !ok(g) {
                            b.append_null();
                        } else if ty == DevType::Varchar {
                            // A VARCHAR value as stored: UTF-8, neither padded nor trimmed.
                            let text = std::str::from_utf8(v).map_err(|e| {
                                DataFusionError::Internal(format!(
                                    "the device's extreme of a VARCHAR is not UTF-8: {e}"
                                ))
                            })?;
                            b.append_value(text);
                        } else {
                            b.append_value(String::from_utf8_lossy(csd_table::schema::trim_char(
                                v,
                            )));
                        }
                    }
                    Arc::new(b.finish())
                }
            }
        }
        Some(AccView::MinMaxWide { val, seen }) => {
            let DevType::Decimal128 { precision, scale } = ty else {
                return Err(DataFusionError::Internal(format!(
                    "aggregate {a}: a 128-bit extreme of {ty}"
                )));
            };
            let ok = |g: usize| seen.get(g).copied().unwrap_or(false) && rows[g] > 0;
            Arc::new(
                Decimal128Array::from_iter(
                    val.iter().enumerate().map(|(g, &x)| ok(g).then_some(x)),
                )
                .with_precision_and_scale(precision, scale as i8)?,
            )
        }
        _ => {
            return Err(DataFusionError::Internal(format!(
                "aggregate {a} is not MIN/MAX"
            )));
        }
    })
}

/// The physical optimizer rule: see the [module docs](self).
#[derive(Debug, Default)]
pub struct DeviceAggregatePushdown;

impl PhysicalOptimizerRule for DeviceAggregatePushdown {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_down(|node| {
            let Some(agg) = node.downcast_ref::<AggregateExec>() else {
                return Ok(Transformed::no(node));
            };
            match agg.mode() {
                AggregateMode::Partial => {
                    if let Some(new) = push(agg, &node) {
                        return Ok(Transformed::yes(ArrayScanExec::record_pushdown(new, &node)));
                    }
                }
                AggregateMode::Single => {
                    if let Some(new) = split_single(agg)? {
                        return Ok(Transformed::yes(new));
                    }
                }
                _ => {}
            }
            Ok(Transformed::no(node))
        })
        .data()
    }

    fn name(&self) -> &str {
        "csd_device_aggregate_pushdown"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// A `Single` aggregate over a device scan, split as DataFusion's planner splits an
/// aggregate: its partial half pushed into the device ([`push`]) under a `Final`
/// aggregate. DataFusion plans `Single` where its input has one partition (one target
/// partition: a one-core host, `taskset`, `DATAFUSION_EXECUTION_TARGET_PARTITIONS=1`),
/// combining the `Partial` and `Final` it planned; without the split, the device
/// returned every row there and aggregated nothing, so the device's work and every
/// modeled figure of the query depended on the host's core count (TPC-H Q1 0.166 s
/// modeled on one partition against 0.070 s on two). `None` (the plan stays) when the
/// partial half does not push or the aggregate has a limit.
fn split_single(agg: &AggregateExec) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if agg.limit_options().is_some() {
        return Ok(None);
    }
    let partial: Arc<dyn ExecutionPlan> = Arc::new(AggregateExec::try_new(
        AggregateMode::Partial,
        agg.group_expr().clone(),
        agg.aggr_expr().to_vec(),
        agg.filter_expr().to_vec(),
        agg.input().clone(),
        agg.input_schema(),
    )?);
    let Some(pushed) = partial
        .downcast_ref::<AggregateExec>()
        .and_then(|a| push(a, &partial))
    else {
        return Ok(None);
    };
    let mut states = ArrayScanExec::record_pushdown(pushed, &partial);
    if states.output_partitioning().partition_count() > 1 {
        // An array: one device per partition; `Final` merges one partition.
        states = Arc::new(CoalescePartitionsExec::new(states));
    }
    let fin = AggregateExec::try_new(
        AggregateMode::Final,
        agg.group_expr().as_final(),
        agg.aggr_expr().to_vec(),
        agg.filter_expr().to_vec(),
        states,
        agg.input_schema(),
    )?;
    Ok(Some(Arc::new(fin)))
}

/// The device partial aggregation replacing `agg` (the plan node `agg_node`), if it pushes.
fn push(agg: &AggregateExec, agg_node: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    if agg.filter_expr().iter().any(Option::is_some)
        || agg.aggr_expr().iter().any(|a| a.is_distinct())
        || !agg.group_expr().is_single()
    {
        return None;
    }
    // Down to the scan, remembering the projections on the way.
    let mut node = agg.input().clone();
    let mut projections: Vec<Arc<dyn ExecutionPlan>> = Vec::new();
    let scan_node = loop {
        if node.downcast_ref::<DeviceScanExec>().is_some()
            || node.downcast_ref::<ArrayScanExec>().is_some()
        {
            break node;
        }
        // `CooperativeExec` (DataFusion's cooperative-yield wrapper over a leaf where no
        // repartition does it, e.g. with one target partition) only passes batches on.
        let next = if node.downcast_ref::<RepartitionExec>().is_some()
            || node.name() == "CoalesceBatchesExec"
            || node.name() == "CooperativeExec"
        {
            node.children().first().map(|c| (*c).clone())?
        } else if let Some(p) = node.downcast_ref::<ProjectionExec>() {
            projections.push(node.clone());
            p.input().clone()
        } else {
            return None;
        };
        node = next;
    };
    if let Some(array) = scan_node.downcast_ref::<ArrayScanExec>() {
        // An array: the same device aggregation on every device (one partition each).
        let scans = array
            .scans()
            .iter()
            .map(|s| push_scan(agg, &projections, s.downcast_ref::<DeviceScanExec>()?))
            .collect::<Option<Vec<_>>>()?;
        let scans = scans.into_iter().map(|s| Arc::new(s) as _).collect();
        return ArrayScanExec::try_new(scans).ok().map(|a| Arc::new(a) as _);
    }
    let scan = scan_node.downcast_ref::<DeviceScanExec>()?;
    let pushed = push_scan(agg, &projections, scan)?;
    // DataFusion's own partial aggregate stays beside it: over rows of the same
    // program another scan of the plan already read, it computes the same states in
    // the host (`crate::reuse`).
    let ScanOutput::Rows(columns) = &scan.output else {
        return Some(Arc::new(pushed));
    };
    Some(Arc::new(pushed.with_host_partial(HostPartial {
        aggregate: agg_node.clone(),
        projections,
        columns: columns.clone(),
        schema: scan.schema.clone(),
    })))
}

/// The device partial aggregation replacing `agg` over `scan` (through `projections`,
/// top first).
fn push_scan(
    agg: &AggregateExec,
    projections: &[Arc<dyn ExecutionPlan>],
    scan: &DeviceScanExec,
) -> Option<DeviceScanExec> {
    if !scan.settings.aggregate_pushdown || scan.limit.is_some() {
        return None;
    }
    let ScanOutput::Rows(cols) = &scan.output else {
        return None;
    };
    let schema = &scan.table.schema;
    let mut columns: Columns = cols.iter().map(|&c| DevExpr::column(schema, c)).collect();
    for p in projections.iter().rev() {
        let p = p.downcast_ref::<ProjectionExec>()?;
        columns = p
            .expr()
            .iter()
            .map(|pe| physical(&pe.expr, &columns, schema).ok())
            .collect();
    }
    // Grouping keys: table columns.
    let mut group_by = Vec::new();
    let mut group_types = Vec::new();
    let mut text_groups = Vec::new();
    for (e, name) in agg.group_expr().expr() {
        let d = physical(e, &columns, schema).ok()?;
        let ExprKind::Column { index, .. } = d.kind else {
            return None;
        };
        group_by.push(index);
        group_types.push(schema.columns().get(index)?.ty);
        text_groups.push(name.clone());
    }
    let input_schema = agg.input_schema();
    let mut aggregates = Vec::new();
    let mut kinds = Vec::new();
    let mut text_aggs = Vec::new();
    for a in agg.aggr_expr() {
        let (aggregate, kind) = device_aggregate(a, &columns, schema, &input_schema)?;
        text_aggs.push(a.name().to_string());
        aggregates.push(aggregate);
        kinds.push(kind);
    }
    // The device groups by NOT NULL columns of the original types, and aggregates
    // INT and DECIMAL values (DECIMAL(p, s) too, in 128 bits), MIN/MAX of dates,
    // timestamps and strings (CHAR; VARCHAR and VARBINARY byte for byte, Arrow's
    // order), COUNT of anything, skipping NULLs as SQL does; anything else (a nullable
    // or newer-type key, float aggregates) is DataFusion's.
    let key_ok = |&g: &usize| {
        schema
            .columns()
            .get(g)
            .is_some_and(|c| !c.nullable && c.ty.is_classic())
    };
    let arg_ok = |a: &Aggregate| {
        a.arg.as_ref().is_none_or(|e| match a.func {
            AggFunc::Count | AggFunc::CountStar => true,
            AggFunc::Min | AggFunc::Max => matches!(
                e.ty,
                DevType::Int
                    | DevType::Decimal { .. }
                    | DevType::Decimal128 { .. }
                    | DevType::Date
                    | DevType::Char(_)
                    | DevType::Varchar
                    | DevType::Varbinary
                    | DevType::Timestamp
            ),
            AggFunc::Sum | AggFunc::Avg => matches!(
                e.ty,
                DevType::Int | DevType::Decimal { .. } | DevType::Decimal128 { .. }
            ),
        })
    };
    if !group_by.iter().all(key_ok) || !aggregates.iter().all(arg_ok) {
        return None;
    }
    let program = Plan::aggregation(
        &scan.table.name,
        schema,
        Aggregation {
            group_by,
            aggregates,
        },
        scan.program.filter.clone(),
    );
    let text = if text_groups.is_empty() {
        format!("[{}]", text_aggs.join(", "))
    } else {
        format!(
            "[{}] group by [{}]",
            text_aggs.join(", "),
            text_groups.join(", ")
        )
    };
    let spec = AggOutputSpec {
        group_types,
        kinds,
        text,
    };
    Some(DeviceScanExec::new(
        scan.table.clone(),
        scan.device.clone(),
        scan.settings,
        scan.log.clone(),
        program,
        ScanOutput::Partial(Arc::new(spec)),
        agg.schema(),
        None,
        scan.filter_text.clone(),
    ))
}

/// The device aggregate (and how its DataFusion state columns read) for one of
/// DataFusion's partial aggregates, or `None` where the device cannot compute it exactly.
fn device_aggregate(
    a: &AggregateFunctionExpr,
    columns: &Columns,
    schema: &Schema,
    input_schema: &SchemaRef,
) -> Option<(Aggregate, StateKind)> {
    let args = a.expressions();
    let fname = a.fun().name().to_ascii_lowercase();
    let arg = match args.as_slice() {
        [] => None,
        [x] => Some(x),
        _ => return None,
    };
    // AVG of an integer: DataFusion averages `CAST(x AS Float64)`; the device sums
    // the integers exactly and hands over the sum as the nearest Float64.
    let float_avg = match arg {
        Some(x) if fname == "avg" => x
            .downcast_ref::<CastExpr>()
            .filter(|c| *c.cast_type() == DataType::Float64)
            .map(|c| c.expr().clone()),
        _ => None,
    };
    let dev_arg = match (arg, &float_avg) {
        (_, Some(inner)) => {
            let d = physical(inner, columns, schema).ok()?;
            if d.ty != DevType::Int {
                return None;
            }
            Some(d)
        }
        (Some(x), None) if x.downcast_ref::<Literal>().is_some() && fname == "count" => None,
        (Some(x), None) => Some(physical(x, columns, schema).ok()?),
        (None, None) => None,
    };
    let df_scale = arg
        .and_then(|x| x.data_type(input_schema).ok())
        .and_then(|t| match t {
            DataType::Decimal128(_, s) => u8::try_from(s).ok(),
            _ => None,
        })
        .unwrap_or(0);
    let (func, ty, kind) =
        device_function(&fname, dev_arg.as_ref(), float_avg.is_some(), df_scale)?;
    // One DataFusion state column per device value, in the expected order.
    let want = match kind {
        StateKind::Avg(_) | StateKind::AvgFloat => 2,
        _ => 1,
    };
    if a.state_fields().ok()?.len() != want {
        return None;
    }
    Some((
        Aggregate {
            func,
            arg: dev_arg,
            ty,
        },
        kind,
    ))
}

/// The device function, its result type and its DataFusion state layout for the
/// aggregate `fname` over `dev_arg` (`float_avg`: AVG of an integer cast to Float64;
/// `df_scale`: DataFusion's decimal scale of the argument).
fn device_function(
    fname: &str,
    dev_arg: Option<&DevExpr>,
    float_avg: bool,
    df_scale: u8,
) -> Option<(AggFunc, DevType, StateKind)> {
    let triple = match (fname, dev_arg) {
        ("count", None) => (AggFunc::CountStar, DevType::Int, StateKind::Count),
        ("count", Some(_)) => (AggFunc::Count, DevType::Int, StateKind::Count),
        ("avg", Some(_)) if float_avg => (
            AggFunc::Avg,
            DevType::Decimal {
                scale: csd_query::plan::avg_scale(0),
            },
            StateKind::AvgFloat,
        ),
        ("sum" | "avg", Some(d)) => {
            let s = match d.ty {
                DevType::Int => 0,
                DevType::Decimal { scale } | DevType::Decimal128 { scale, .. } => scale,
                _ => return None,
            };
            // The device's sum must be at DataFusion's argument scale.
            if s != df_scale {
                return None;
            }
            let avg_ty = match d.ty {
                // The 128-bit sum and the count go to DataFusion, which divides as it
                // does for its own AVG of a DECIMAL(p, s).
                DevType::Decimal128 { .. } => DevType::Decimal128 {
                    precision: 38,
                    scale: csd_query::plan::avg_scale(s),
                },
                _ => DevType::Decimal {
                    scale: csd_query::plan::avg_scale(s),
                },
            };
            if fname == "sum" {
                (AggFunc::Sum, d.ty, StateKind::Sum(s))
            } else {
                (AggFunc::Avg, avg_ty, StateKind::Avg(s))
            }
        }
        ("min" | "max", Some(d)) if d.ty != DevType::Bool => (
            if fname == "min" {
                AggFunc::Min
            } else {
                AggFunc::Max
            },
            d.ty,
            StateKind::Extreme(d.ty),
        ),
        _ => return None,
    };
    Some(triple)
}
