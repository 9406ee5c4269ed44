//! [`DeviceScanExec`]: the physical operator that runs one device program (filter,
//! projection and possibly a partial aggregation) over one device table with one of
//! the scan paper's strategies, through `csd_host::run_scan`, so the scan keeps its
//! modeled report (time per stage, bytes per link, pages read, energy).
//!
//! Choices: the device is serial (one command at a time, as in `csd-host`), so a scan
//! is one DataFusion partition and runs under the device's lock; scans of a join run
//! one after the other, each with its own report in the [`ScanLog`]. The scan starts
//! when its stream is first polled. Per-scan figures are DataFusion metrics too, so
//! `EXPLAIN ANALYZE` shows them next to the operator.
//!
//! A scan given a side of a FLIXR join ([`crate::join`]) registers what its side needs
//! (SEND_TIDX_ENC / SEND_TIDX_ICR, once per plan) under the device's lock, then reads
//! in-host with READ_IDX_JOIN1 or READ_IDX_JOIN2; the probe side checks that its build
//! side finished in this run and otherwise scans plainly (said in the scan's "why"), and
//! releases both registrations when it is done. Their modeled time is the scan's setup
//! time (`QueryReport::setup_ns`, in its modeled total).
//!
//! A scan takes the runtime (dynamic) filters of the joins above it into its device
//! program where the device evaluates them exactly, and applies the rest (and top-K
//! sorts' bounds) to what the device hands over ([`crate::runtime`]).

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use csd_device::{Command, Payload};
use csd_host::{CommandIssuer, JoinRead, QueryReport, ScanOptions, Strategy, TableInfo, run_scan};
use csd_query::plan::Expr as DevExpr;
use csd_query::{Output, PartialResult, Plan};
use datafusion::arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result, Statistics};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::filter_pushdown::{
    ChildPushdownResult, FilterPushdownPhase, FilterPushdownPropagation,
};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning,
    PlanProperties, ReplaceChildrenOptions, SendableRecordBatchStream, StatisticsArgs,
};
use futures::StreamExt;

use crate::agg::AggOutputSpec;
use crate::device::{Device, ScanSettings};
use crate::join::{JoinRole, JoinSide};
use crate::keyset::{ColumnKeySet, KeySet};
use crate::reuse::ReuseSlot;
use crate::runtime::{self, FilteringScan, RuntimeFilters};
use crate::schema::column_array_of;
use crate::translate::Columns;

/// What one device scan did: the table, the strategy, what ran in the device, why the
/// strategy was chosen and the modeled report.
#[derive(Debug, Clone)]
pub struct ScanRecord {
    /// The table scanned.
    pub table: String,
    /// The strategy that ran.
    pub strategy: Strategy,
    /// Why that strategy (`--strategy auto`) or "chosen by the user".
    pub why: String,
    /// The device program in words: filter, columns, aggregation.
    pub program: String,
    /// The modeled report of the scan.
    pub report: QueryReport,
}

/// Every device scan a session ran, in the order they ran.
#[derive(Debug, Clone, Default)]
pub struct ScanLog(Arc<Mutex<Vec<ScanRecord>>>);

impl ScanLog {
    /// Appends a record.
    pub fn push(&self, r: ScanRecord) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(r);
    }

    /// Takes the records so far (the log is left empty).
    pub fn take(&self) -> Vec<ScanRecord> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// What the scan hands to DataFusion.
#[derive(Debug, Clone)]
pub enum ScanOutput {
    /// Rows of the projected table columns (schema indices), in this order.
    Rows(Vec<usize>),
    /// Partial aggregation states in DataFusion's partial-aggregate layout.
    Partial(Arc<AggOutputSpec>),
}

/// Children replaced with the node's properties computed again (what
/// `with_new_children` asks of every operator here).
pub(crate) fn recompute() -> ReplaceChildrenOptions {
    ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute)
}

/// The only child among a one-input operator's new `children`, or an internal error
/// naming the operator (`name`).
pub(crate) fn only_child(
    mut children: Vec<Arc<dyn ExecutionPlan>>,
    name: &str,
) -> Result<Arc<dyn ExecutionPlan>> {
    match children.pop() {
        Some(child) if children.is_empty() => Ok(child),
        _ => Err(DataFusionError::Internal(format!("{name} takes one child"))),
    }
}

/// A device scan's plan properties for output `schema`: one partition, emitted as the
/// device produces it, bounded.
fn scan_properties(schema: &SchemaRef) -> Arc<PlanProperties> {
    Arc::new(PlanProperties::new(
        EquivalenceProperties::new(schema.clone()),
        Partitioning::UnknownPartitioning(1),
        EmissionType::Incremental,
        Boundedness::Bounded,
    ))
}

/// The columns at positions `at` of kept `batches`, as batches of `schema`.
fn columns_of(
    batches: &[RecordBatch],
    at: &[usize],
    schema: &SchemaRef,
) -> Result<Vec<RecordBatch>> {
    batches
        .iter()
        .map(|b| {
            let columns = at.iter().map(|&i| b.column(i).clone()).collect();
            RecordBatch::try_new(schema.clone(), columns).map_err(DataFusionError::from)
        })
        .collect()
}

/// DataFusion's own partial aggregate that a device partial aggregation replaced
/// ([`crate::agg`]), kept so that the same states can be computed in the host over rows
/// another scan of the plan already read with the same program ([`crate::reuse`]).
#[derive(Debug, Clone)]
pub(crate) struct HostPartial {
    /// The partial `AggregateExec` (its input is replaced when it runs).
    pub(crate) aggregate: Arc<dyn ExecutionPlan>,
    /// The projections between it and the scan of rows it read, top first.
    pub(crate) projections: Vec<Arc<dyn ExecutionPlan>>,
    /// The table columns of those rows, in their order.
    pub(crate) columns: Vec<usize>,
    /// Their schema (that scan's).
    pub(crate) schema: SchemaRef,
}

/// A device scan: see the [module docs](self).
#[derive(Debug)]
pub struct DeviceScanExec {
    pub(crate) table: TableInfo,
    pub(crate) device: Arc<Device>,
    pub(crate) settings: ScanSettings,
    pub(crate) log: ScanLog,
    pub(crate) program: Plan,
    pub(crate) output: ScanOutput,
    pub(crate) schema: SchemaRef,
    pub(crate) limit: Option<usize>,
    /// Text of the pushed filter (for display).
    pub(crate) filter_text: Option<String>,
    /// The scan's side of a FLIXR join bitmap ([`crate::join`]), if any.
    pub(crate) join: Option<JoinRole>,
    /// Dynamic filters from operators above, applied in the host to the device's
    /// output unless the device's program takes them (see the [module docs](self)).
    runtime_filters: Vec<Arc<dyn PhysicalExpr>>,
    /// Dynamic filters the device's program may take, not worth applying in the host
    /// (the join that made them probes the scan's rows next; see
    /// [`crate::runtime::RedundantRuntimeFilters`]).
    device_filters: Vec<Arc<dyn PhysicalExpr>>,
    /// Expression ids of those filters that hash joins make: the scan waits for them to
    /// be complete before it starts (see [`runtime::wait_complete`]).
    join_filters: Vec<u64>,
    /// The build keys of hash joins whose runtime filter is a hash-table lookup, for
    /// the program to take as `IN` terms ([`crate::keyset`]).
    key_sets: Vec<Arc<KeySet>>,
    /// Key sets of joins above whose filter the scan does not hold, on one of its
    /// output columns ([`ColumnKeySet`]).
    column_key_sets: Vec<ColumnKeySet>,
    /// Share of the rows the scan's own filter keeps that the key sets of joins above
    /// are expected to keep (1 without any), for the optimizer's estimates only
    /// ([`crate::keyset::ExpectedKeySets`]).
    expected_share: f64,
    /// Where the scans of its group leave their rows for each other
    /// ([`crate::reuse::ReusedDeviceScans`]) and its place in the group, if it is in one.
    reuse: Option<(Arc<ReuseSlot>, usize)>,
    /// A partial aggregation's host counterpart, for rows of its group ([`HostPartial`]).
    host_partial: Option<Arc<HostPartial>>,
    metrics: ExecutionPlanMetricsSet,
    cache: Arc<PlanProperties>,
}

impl DeviceScanExec {
    /// A scan of `table` running `program`, handing `output` (of `schema`) to DataFusion.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        table: TableInfo,
        device: Arc<Device>,
        settings: ScanSettings,
        log: ScanLog,
        program: Plan,
        output: ScanOutput,
        schema: SchemaRef,
        limit: Option<usize>,
        filter_text: Option<String>,
    ) -> DeviceScanExec {
        let cache = scan_properties(&schema);
        DeviceScanExec {
            table,
            device,
            settings,
            log,
            program,
            output,
            schema,
            limit,
            filter_text,
            join: None,
            runtime_filters: Vec::new(),
            device_filters: Vec::new(),
            join_filters: Vec::new(),
            key_sets: Vec::new(),
            column_key_sets: Vec::new(),
            expected_share: 1.0,
            reuse: None,
            host_partial: None,
            metrics: ExecutionPlanMetricsSet::new(),
            cache,
        }
    }

    /// A copy that also reads the table columns `extra` (after its own, which keep
    /// their places) and shares its rows through `slot`
    /// ([`crate::reuse::ReusedDeviceScans`]) as its group's `member`. Only for a scan of
    /// rows.
    pub(crate) fn widened(
        &self,
        extra: &[usize],
        slot: Arc<ReuseSlot>,
        member: usize,
    ) -> Result<DeviceScanExec> {
        let ScanOutput::Rows(own) = &self.output else {
            return Err(DataFusionError::Internal(
                "only a scan of rows reads more columns".into(),
            ));
        };
        let mut s = self.clone_for_run();
        s.reuse = Some((slot, member));
        if extra.is_empty() {
            return Ok(s);
        }
        let cols: Vec<usize> = own.iter().chain(extra).copied().collect();
        s.program =
            crate::provider::projection_program(&self.table, &cols, self.program.filter.clone())?;
        let all = crate::schema::arrow_schema(&self.table.schema);
        let mut fields: Vec<_> = self.schema.fields().iter().cloned().collect();
        fields.extend(extra.iter().map(|&c| Arc::new(all.field(c).clone())));
        s.schema = Arc::new(datafusion::arrow::datatypes::Schema::new(fields));
        s.output = ScanOutput::Rows(cols);
        s.cache = scan_properties(&s.schema);
        Ok(s)
    }

    /// This partial aggregation with its host counterpart `host` ([`HostPartial`]).
    pub(crate) fn with_host_partial(mut self, host: HostPartial) -> DeviceScanExec {
        debug_assert!(matches!(self.output, ScanOutput::Partial(_)));
        self.host_partial = Some(Arc::new(host));
        self
    }

    /// The table columns a partial aggregation would read as rows to compute its states
    /// in the host, if it can ([`HostPartial`]).
    pub(crate) fn host_partial_columns(&self) -> Option<&[usize]> {
        match &self.output {
            ScanOutput::Partial(_) => self.host_partial.as_ref().map(|h| &h.columns[..]),
            ScanOutput::Rows(_) => None,
        }
    }

    /// A copy of this partial aggregation that looks in `slot` for rows of its program
    /// ([`crate::reuse::ReusedDeviceScans`]) as its group's `member`.
    pub(crate) fn with_reuse(&self, slot: Arc<ReuseSlot>, member: usize) -> DeviceScanExec {
        let mut s = self.clone_for_run();
        s.reuse = Some((slot, member));
        s
    }

    /// A partial aggregation's states computed in the host by DataFusion's own partial
    /// aggregate over the rows an earlier scan of its group read with this scan's
    /// program (same table, same filter with the same runtime terms, so the same rows),
    /// if there are such rows: the device does no work (see [`crate::reuse`]).
    fn aggregate_kept_rows(
        &self,
        host: &RuntimeFilters,
        context: Arc<TaskContext>,
    ) -> Result<Option<SendableRecordBatchStream>> {
        let (Some((slot, member)), Some(hp)) = (&self.reuse, &self.host_partial) else {
            return Ok(None);
        };
        let (program, _) = self.program_for_run(host);
        let Some((batches, at)) =
            slot.find(self.table.first_lba, &program.filter, &hp.columns, *member)?
        else {
            return Ok(None);
        };
        let rows = columns_of(&batches, &at, &hp.schema)?;
        let n: usize = rows.iter().map(RecordBatch::num_rows).sum();
        let mut input: Arc<dyn ExecutionPlan> =
            MemorySourceConfig::try_new_exec(&[rows], hp.schema.clone(), None)?;
        for p in hp.projections.iter().rev() {
            input = p.clone().replace_children(vec![input], recompute())?;
        }
        let aggregate = hp
            .aggregate
            .clone()
            .replace_children(vec![input], recompute())?;
        if aggregate.schema() != self.schema {
            debug_assert!(false, "a host partial aggregate of another schema");
            return Ok(None);
        }
        MetricBuilder::new(&self.metrics)
            .global_counter("reused_rows")
            .add(n);
        let groups = MetricBuilder::new(&self.metrics).output_rows(0);
        let stream = aggregate.execute(0, context)?.inspect(move |b| {
            if let Ok(b) = b {
                groups.add(b.num_rows());
            }
        });
        Ok(Some(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            stream,
        ))))
    }

    /// The rows an earlier scan of its group handed over for the same program, or for a
    /// program whose filter this one's implies (those rows filtered again), as this
    /// scan's batches (see [`crate::reuse`]).
    fn reused(&self, program: &Plan) -> Result<Option<Vec<RecordBatch>>> {
        let (Some((slot, member)), ScanOutput::Rows(cols)) = (&self.reuse, &self.output) else {
            return Ok(None);
        };
        let Some((batches, at)) =
            slot.find(self.table.first_lba, &program.filter, cols, *member)?
        else {
            return Ok(None);
        };
        columns_of(&batches, &at, &self.schema).map(Some)
    }

    /// The device program this scan runs.
    pub fn program(&self) -> &Plan {
        &self.program
    }

    /// The table scanned.
    pub fn table(&self) -> &TableInfo {
        &self.table
    }

    /// The program in words, for `EXPLAIN` and the report.
    pub fn describe(&self) -> String {
        let cols = |idx: &[usize]| {
            idx.iter()
                .filter_map(|&i| self.table.schema.columns().get(i).map(|c| c.name.clone()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut s = match &self.output {
            ScanOutput::Rows(idx) => format!("columns [{}]", cols(idx)),
            ScanOutput::Partial(spec) => format!("partial aggregate {}", spec.describe()),
        };
        if let Some(f) = &self.filter_text {
            s.push_str(&format!(", filter {f}"));
        }
        if let Some(l) = self.limit {
            s.push_str(&format!(", limit {l}"));
        }
        match self.join.as_ref().map(|j| j.side) {
            Some(JoinSide::Build) => {
                s.push_str(", FLIXR join build side (READ_IDX_JOIN1, in-host)")
            }
            Some(JoinSide::Probe) => {
                s.push_str(", FLIXR join probe side (READ_IDX_JOIN2, in-host)")
            }
            None => {}
        }
        s
    }

    /// This scan as `role`'s side of a FLIXR join (fresh metrics).
    pub(crate) fn with_join(&self, role: JoinRole) -> DeviceScanExec {
        let mut s = self.clone_for_run();
        s.join = Some(role);
        s.metrics = ExecutionPlanMetricsSet::new();
        s
    }

    /// Registers what this scan's side of a FLIXR join needs (SEND_TIDX_ENC on the
    /// build side, SEND_TIDX_ICR on the probe side, once per run: the probe scan
    /// releases both) and returns how it reads; `Err` says why it falls back to a plain
    /// scan.
    fn prepare_join(&self, c: &mut csd_host::Client) -> std::result::Result<JoinRead, String> {
        let Some(role) = &self.join else {
            return Err(String::new());
        };
        let link = &role.link;
        link.set_device(&self.device);
        let ix = self
            .table
            .index
            .as_ref()
            .ok_or_else(|| format!("table {} has no FLIXR index", self.table.name))?;
        let id_of = |p: Payload, what: &str| match p {
            Payload::FlixrRule(id) => Ok(id),
            _ => Err(format!("{what} returned no id")),
        };
        match role.side {
            JoinSide::Build => {
                link.set_ready(false);
                if self.table.pages == 0 {
                    return Err("the build table is empty".into());
                }
                let tia = match link.tia() {
                    Some(t) => t,
                    None => {
                        let comp = c
                            .exec(Command::SendTidxEnc {
                                table: ix.flixr_table,
                                spec: crate::join::spec(link),
                            })
                            .map_err(|e| format!("SEND_TIDX_ENC refused: {e}"))?;
                        let t = id_of(comp.payload, "SEND_TIDX_ENC")?;
                        link.set_tia(t);
                        t
                    }
                };
                Ok(JoinRead::Build { tia })
            }
            JoinSide::Probe => {
                if !link.take_ready() {
                    return Err("the build side's join bitmap is not ready".into());
                }
                let tia = link
                    .tia()
                    .ok_or_else(|| "the build side registered no per-table index".to_string())?;
                let rule = match link.rule() {
                    Some(r) => r,
                    None => {
                        let comp = c
                            .exec(Command::SendTidxIcr {
                                table: link.probe_table,
                                tia,
                            })
                            .map_err(|e| format!("SEND_TIDX_ICR refused: {e}"))?;
                        let r = id_of(comp.payload, "SEND_TIDX_ICR")?;
                        link.set_rule(r);
                        r
                    }
                };
                Ok(JoinRead::Probe { rule })
            }
        }
    }

    /// What makes this scan the same as another for [`crate::shared`]: its device,
    /// table, settings, program and output, when it hands over partial aggregation states and holds no
    /// runtime filter, limit or FLIXR join side (`None` otherwise: not shared).
    pub(crate) fn share_key(&self) -> Option<String> {
        let shareable = matches!(self.output, ScanOutput::Partial(_))
            && self.column_key_sets.is_empty()
            && self.limit.is_none()
            && self.join.is_none()
            && self.runtime_filters.is_empty()
            && self.device_filters.is_empty();
        shareable.then(|| {
            format!(
                "{:p}\n{}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
                Arc::as_ptr(&self.device),
                self.table.name,
                self.settings,
                self.program,
                self.output,
                self.schema,
                self.filter_text
            )
        })
    }

    /// The same scan knowing which of its runtime filters hash joins make (`ids`), if
    /// that changes anything.
    pub(crate) fn with_join_filters(&self, ids: &[u64]) -> Option<DeviceScanExec> {
        let mine: Vec<u64> = self
            .all_filters()
            .filter_map(|e| e.expression_id())
            .filter(|id| ids.contains(id))
            .collect();
        if mine == self.join_filters {
            return None;
        }
        let mut s = self.clone_for_run();
        s.join_filters = mine;
        Some(s)
    }

    /// The same scan with `set`'s keys for its program, if it holds that join's runtime
    /// filter (and has no limit, which takes no runtime filter into the program).
    pub(crate) fn with_key_set(&self, set: &Arc<KeySet>) -> Option<DeviceScanExec> {
        let holds = self
            .all_filters()
            .any(|e| e.expression_id() == Some(set.filter));
        if !holds || self.limit.is_some() || self.key_sets.iter().any(|k| Arc::ptr_eq(k, set)) {
            return None;
        }
        let mut s = self.clone_for_run();
        s.key_sets.push(set.clone());
        Some(s)
    }

    /// The same scan with a key set of a join above on its output column `cks.column`
    /// (see [`ColumnKeySet`]); `None` with a limit (no runtime filter is taken then), for
    /// a column it does not output, or when it has that set already.
    pub(crate) fn with_column_key_set(&self, cks: &ColumnKeySet) -> Option<DeviceScanExec> {
        if self.limit.is_some()
            || cks.column >= self.output_columns().len()
            || self
                .column_key_sets
                .iter()
                .any(|k| Arc::ptr_eq(&k.set, &cks.set))
        {
            return None;
        }
        let mut s = self.clone_for_run();
        s.column_key_sets.push(cks.clone());
        Some(s)
    }

    /// The same scan, estimated to hand over `share` (0 to 1) of what it estimated
    /// before: a join above will give it a key set keeping that share of its rows
    /// ([`crate::keyset::ExpectedKeySets`]). Changes estimates only.
    pub(crate) fn with_expected_share(&self, share: f64) -> DeviceScanExec {
        debug_assert!((0.0..=1.0).contains(&share), "a share: {share}");
        let mut s = self.clone_for_run();
        s.expected_share = (self.expected_share * share).clamp(0.0, 1.0);
        s
    }

    /// Every runtime filter the scan holds: those the host applies, then the device-only
    /// ones.
    fn all_filters(&self) -> impl Iterator<Item = &Arc<dyn PhysicalExpr>> {
        self.runtime_filters.iter().chain(&self.device_filters)
    }

    /// The runtime filters hash joins make.
    fn join_filter_exprs(&self) -> Vec<Arc<dyn PhysicalExpr>> {
        self.all_filters()
            .filter(|e| {
                e.expression_id()
                    .is_some_and(|id| self.join_filters.contains(&id))
            })
            .cloned()
            .collect()
    }

    /// The scan's output columns in device terms: a projection's columns, a partial
    /// aggregation's grouping columns (its states are not columns of the table).
    fn output_columns(&self) -> Columns {
        let schema = &self.table.schema;
        match (&self.output, &self.program.output) {
            (ScanOutput::Rows(idx), _) => idx.iter().map(|&c| DevExpr::column(schema, c)).collect(),
            (ScanOutput::Partial(_), Output::Aggregate(a)) => a
                .group_by
                .iter()
                .map(|&c| DevExpr::column(schema, c))
                .collect(),
            (ScanOutput::Partial(_), _) => Vec::new(),
        }
    }

    /// The program this run executes: the planned one, with the conjuncts of the
    /// runtime filters that are complete now and that the device evaluates exactly put
    /// first (a join's key bounds and key list: the device hands over only rows, or
    /// aggregates only groups, that the join can match). Filters taken whole are not
    /// applied again in the host (`host`). Returns the taken terms' text too.
    fn program_for_run(&self, host: &RuntimeFilters) -> (Plan, Option<String>) {
        if self.limit.is_some() {
            return (self.program.clone(), None);
        }
        let filters: Vec<_> = self.all_filters().cloned().collect();
        let columns = self.output_columns();
        let mut taken = runtime::for_device(
            &filters,
            &columns,
            &self.table.schema,
            runtime::arena_keys(self.device.config.isp.session_arena_kib),
        );
        // A join's hash-table lookup the device cannot take: its key set instead.
        let arena_bytes = self.device.config.isp.session_arena_kib as usize * 1024;
        let distinct = |c: usize| {
            let d = *self.table.distinct.as_ref()?.get(c)?;
            usize::try_from(d).ok()
        };
        for set in &self.key_sets {
            let Some(j) = filters
                .iter()
                .position(|f| f.expression_id() == Some(set.filter))
            else {
                continue;
            };
            if taken.whole[j] {
                continue;
            }
            if let Some(term) = set.device_term(
                &filters[j],
                &columns,
                &self.table.schema,
                arena_bytes,
                distinct,
            ) {
                taken.terms.push(term);
                // The only key's set is the whole filter (its bounds hold for the set).
                taken.whole[j] = set.keys_in_join == 1;
            }
        }
        for k in &self.column_key_sets {
            if let Some(term) = columns
                .get(k.column)
                .cloned()
                .flatten()
                .and_then(|key| k.set.term_for_key(key, arena_bytes, distinct))
            {
                taken.terms.push(term);
            }
        }
        for (i, whole) in taken
            .whole
            .iter()
            .enumerate()
            .take(self.runtime_filters.len())
        {
            if *whole {
                host.taken_by_device(i);
            }
        }
        if taken.terms.is_empty() {
            return (self.program.clone(), None);
        }
        let text = taken
            .terms
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(" AND ");
        let mut program = self.program.clone();
        program.filter = Some(csd_query::build::and(
            taken
                .terms
                .into_iter()
                .chain(program.filter.take())
                .collect(),
        ));
        (program, Some(text))
    }

    /// Runs the scan, handing every batch to `emit` as the device produces it.
    /// `in_time`: the joins' runtime filters were complete when it started.
    fn run(
        &self,
        host: &RuntimeFilters,
        in_time: bool,
        emit: &mut dyn FnMut(RecordBatch),
    ) -> Result<()> {
        let (program, runtime_text) = self.program_for_run(host);
        // Rows kept for the other scans of its group (up to KEEP_BYTES).
        let mut kept = self
            .reuse
            .as_ref()
            .filter(|_| matches!(self.output, ScanOutput::Rows(_)))
            .map(|_| (Vec::new(), 0usize));
        let mut emit_and_keep = |b: RecordBatch| {
            if let Some((batches, bytes)) = kept.as_mut() {
                *bytes += b.get_array_memory_size();
                if *bytes > crate::reuse::KEEP_BYTES {
                    kept = None;
                } else {
                    batches.push(b.clone());
                }
            }
            emit(b);
        };
        let emit: &mut dyn FnMut(RecordBatch) = &mut emit_and_keep;
        let (mut strategy, mut why) = self.settings.choose(&self.table, &program, &self.device);
        if !in_time {
            why.push_str("; a join's runtime filter was not complete in time: started without it");
        }
        let mut opts = ScanOptions {
            strategy,
            ..self.settings.options
        };
        let mut out = ScanSink {
            exec: self,
            rows_out: 0,
            pending: Vec::new(),
            pending_rows: 0,
        };
        let mut report = {
            // A host thread slot first, then the device (always in this order).
            let _slot = self.device.scan_slot();
            let mut client = self.device.lock();
            // Under the device's lock, so that a scan of its group that ran before has
            // left its rows (`crate::reuse`).
            if let Some(batches) = self.reused(&program)? {
                drop(client);
                // Another scan of this plan ran this program: its rows, no device work.
                let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
                MetricBuilder::new(&self.metrics).output_rows(0).add(rows);
                MetricBuilder::new(&self.metrics)
                    .global_counter("reused_rows")
                    .add(rows);
                batches.into_iter().for_each(emit);
                return Ok(());
            }
            // The join's registrations (and the probe side's releases) are this scan's
            // setup: modeled time and commands.
            let (mut setup_ns, mut setup_commands) = (0u64, 0u64);
            if self.join.is_some() {
                let (t0, c0) = (client.now(), client.totals().commands);
                let prepared = self.prepare_join(&mut client);
                setup_ns += client.now().since(t0);
                setup_commands += client.totals().commands - c0;
                match prepared {
                    Ok(j) => {
                        opts.join = Some(j);
                        opts.strategy = Strategy::Ihp;
                        strategy = Strategy::Ihp;
                        why = format!("FLIXR join read (pages go to the host; otherwise: {why})");
                    }
                    Err(e) => why = format!("{why}; no FLIXR join read: {e}, plain scan"),
                }
            }
            let ran = run_scan(
                &mut *client,
                &self.table,
                &program,
                &self.device.config,
                &opts,
                &mut |chunk| out.take(chunk, emit).map_err(host_error),
            );
            let ran = ran.and_then(|r| out.flush(emit).map(|()| r).map_err(host_error));
            if let Some(role) = &self.join
                && role.side == JoinSide::Probe
            {
                let (ns, n) = role.link.release(&mut client);
                setup_ns += ns;
                setup_commands += n;
            }
            let mut r = ran.map_err(|e| DataFusionError::External(Box::new(e)))?;
            // Still under the lock: the next scan of its group finds the rows.
            if let (Some((slot, member)), Some((batches, _)), ScanOutput::Rows(cols)) =
                (&self.reuse, kept.take(), &self.output)
            {
                slot.keep(
                    self.table.first_lba,
                    program.filter.clone(),
                    cols.clone(),
                    batches,
                    *member,
                );
            }
            r.setup_ns = setup_ns;
            r.modeled_ns += setup_ns;
            r.commands += setup_commands;
            r
        };
        // The scan's result is what it hands to DataFusion: rows of a projection (up to
        // its limit), or the groups of every partial-aggregation chunk (a device may hand
        // one group over in several chunks; the final aggregate merges them).
        let rows_out = out.rows_out;
        report.result_rows = rows_out as u64;
        if let (Some(role), Some(JoinRead::Build { .. })) = (&self.join, opts.join) {
            role.link.set_ready(true);
        }
        self.record_metrics(&report, rows_out);
        let mut text = self.describe();
        if let Some(t) = runtime_text {
            text.push_str(&format!(", runtime filter {t}"));
        }
        self.log.push(ScanRecord {
            table: self.table.name.clone(),
            strategy,
            why,
            program: text,
            report,
        });
        Ok(())
    }

    fn record_metrics(&self, r: &QueryReport, rows: usize) {
        let m = &self.metrics;
        MetricBuilder::new(m).output_rows(0).add(rows);
        let c = |name: &'static str, v: u64| {
            MetricBuilder::new(m)
                .global_counter(name)
                .add(usize::try_from(v).unwrap_or(usize::MAX));
        };
        c("pages_read", r.flash_reads);
        c("host_link_bytes", r.host_link_bytes);
        c("channel_bytes", r.channel_bytes);
        c("rows_selected", r.work.rows_selected);
        c("device_time_ns", r.modeled_ns);
        c("commands", r.commands);
        // Only scans that read through a FLIXR index carry these (plans over tables
        // without one print as before).
        if r.index.is_some() {
            c("pages_skipped", r.pages_skipped);
            c("index_cache_misses", r.index_misses);
        }
        // Only join scans have setup (SEND_TIDX_* registrations and their release).
        if r.setup_ns > 0 {
            c("setup_ns", r.setup_ns);
        }
    }
}

/// Rows projected by the device before they go to DataFusion in one batch: chunks up
/// to this many (DataFusion's default batch size).
const BATCH_ROWS: usize = 8192;

/// Where a scan's device chunks go: projected rows wait until a batch of DataFusion's
/// size is full (device chunks are small, one result chunk of the device's buffer, and
/// every batch costs each operator above its own overhead), up to the scan's limit;
/// each partial-aggregation chunk goes on at once.
struct ScanSink<'a> {
    exec: &'a DeviceScanExec,
    /// Rows (or partial groups) handed to DataFusion so far, the limit applied.
    rows_out: usize,
    pending: Vec<csd_query::RowChunk>,
    /// Rows of `pending` to hand over (the last chunk may be cut by the limit).
    pending_rows: usize,
}

impl ScanSink<'_> {
    /// Takes one device chunk.
    fn take(&mut self, chunk: PartialResult, emit: &mut dyn FnMut(RecordBatch)) -> Result<()> {
        let x = self.exec;
        match (&x.output, chunk) {
            (ScanOutput::Rows(_), PartialResult::Rows(rows)) => {
                if x.limit.is_some_and(|l| self.rows_out >= l) {
                    return Ok(());
                }
                let keep = x.limit.map_or(rows.len(), |l| {
                    rows.len().min(l.saturating_sub(self.rows_out))
                });
                self.rows_out += keep;
                self.pending_rows += keep;
                self.pending.push(rows);
                if self.pending_rows >= BATCH_ROWS {
                    self.flush(emit)?;
                }
            }
            (ScanOutput::Partial(spec), PartialResult::Aggregate(state)) => {
                // Each device chunk goes to DataFusion's final aggregate as it is: groups
                // the device had to hand over early (its arena bounded each chunk, not
                // their union) meet again there, in DataFusion's vectorized, partitioned
                // merge rather than in one host hash table.
                let b = spec.to_batch(&state, &x.schema)?;
                self.rows_out += b.num_rows();
                emit(b);
            }
            _ => {
                return Err(DataFusionError::Execution(
                    "the device returned another kind of result than planned".into(),
                ));
            }
        }
        Ok(())
    }

    /// Hands the waiting rows over as one batch.
    fn flush(&mut self, emit: &mut dyn FnMut(RecordBatch)) -> Result<()> {
        if let (false, ScanOutput::Rows(idx)) = (self.pending.is_empty(), &self.exec.output) {
            let x = self.exec;
            let b = rows_batch(&x.table, idx, &x.schema, &self.pending)?;
            emit(b.slice(0, self.pending_rows.min(b.num_rows())));
        }
        self.pending.clear();
        self.pending_rows = 0;
        Ok(())
    }
}

/// A DataFusion error inside the device scan's sink, as the host's error type.
fn host_error(e: DataFusionError) -> csd_host::HostError {
    csd_host::HostError::Invalid(e.to_string())
}

/// Projected device rows (several chunks, in order) as one record batch of `schema`.
fn rows_batch(
    table: &TableInfo,
    idx: &[usize],
    schema: &SchemaRef,
    chunks: &[csd_query::RowChunk],
) -> Result<RecordBatch> {
    let mut cols: Vec<ArrayRef> = Vec::with_capacity(idx.len());
    for (out, &i) in idx.iter().enumerate() {
        let ty = table
            .schema
            .columns()
            .get(i)
            .map(|c| c.ty)
            .ok_or_else(|| DataFusionError::Internal(format!("column {i} out of range")))?;
        let parts = chunks
            .iter()
            .map(|c| c.column(out))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| DataFusionError::Internal(format!("device output {out} missing")))?;
        let mut arr = column_array_of(ty, &parts)?;
        // A TIMESTAMP carries its column's time zone (the field's).
        if let DataType::Timestamp(_, tz @ Some(_)) = schema.field(out).data_type() {
            use datafusion::arrow::array::AsArray;
            use datafusion::arrow::datatypes::TimestampMicrosecondType;
            if let Some(a) = arr.as_primitive_opt::<TimestampMicrosecondType>() {
                arr = Arc::new(a.clone().with_timezone_opt(tz.clone()));
            }
        }
        cols.push(arr);
    }
    let rows = chunks.iter().map(csd_query::RowChunk::len).sum();
    let opts = RecordBatchOptions::new().with_row_count(Some(rows));
    Ok(RecordBatch::try_new_with_options(
        schema.clone(),
        cols,
        &opts,
    )?)
}

impl DisplayAs for DeviceScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "DeviceScanExec: table={} ({}), in device: {}, strategy={}",
            self.table.name,
            self.table.layout,
            self.describe(),
            self.settings.describe()
        )?;
        for rf in &self.runtime_filters {
            write!(f, ", runtime filter {rf}")?;
        }
        for rf in &self.device_filters {
            write!(f, ", runtime filter (device only) {rf}")?;
        }
        let columns = self.schema.fields();
        for k in &self.column_key_sets {
            let name = columns.get(k.column).map_or("?", |c| c.name().as_str());
            write!(f, ", key set of {} for {name}", k.filter)?;
        }
        Ok(())
    }
}

impl ExecutionPlan for DeviceScanExec {
    fn name(&self) -> &'static str {
        "DeviceScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.cache
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        // The joins' filters a column key set waits for are visited too: a join computes
        // its filter only when its probe side holds it somewhere.
        let all: Vec<_> = self
            .all_filters()
            .chain(self.column_key_sets.iter().map(|k| &k.filter))
            .cloned()
            .collect();
        datafusion::physical_plan::apply_expression_roots(&all, f)
    }

    fn handle_child_pushdown_result(
        &self,
        phase: FilterPushdownPhase,
        child_pushdown_result: ChildPushdownResult,
        _config: &ConfigOptions,
    ) -> Result<FilterPushdownPropagation<Arc<dyn ExecutionPlan>>> {
        // Static filters reached the device program through the table provider. A scan
        // with a pushed limit takes no runtime filter: its limit counts the rows it
        // hands over, which a later filter could leave short.
        Ok(self.take_dynamic_filters(phase, child_pushdown_result, self.limit.is_none()))
    }

    fn replace_children(
        self: Arc<Self>,
        _: Vec<Arc<dyn ExecutionPlan>>,
        _: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
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
                "DeviceScanExec has one partition, not {partition}"
            )));
        }
        let me = self.clone_for_run();
        let schema = self.schema.clone();
        let filters = RuntimeFilters::new(self.runtime_filters.clone(), Some(&self.metrics));
        let host = filters.clone();
        // The scan runs on a blocking thread and hands each batch over as soon as the
        // device produced it, so DataFusion's operators above work on the other cores
        // meanwhile. The channel is unbounded: a scan never waits for its consumer, so
        // a consumer that needs another scan (holding the device's lock after this one)
        // before it drains this one cannot deadlock; memory is at most what collecting
        // the whole scan would take. The scan starts when the stream is first polled.
        let mut waits = self.join_filter_exprs();
        waits.extend(self.column_key_sets.iter().map(|k| k.filter.clone()));
        let stream = futures::stream::once(async move {
            let in_time = runtime::wait_complete(&waits).await;
            if in_time {
                // A partial aggregation whose rows another scan already read.
                match me.aggregate_kept_rows(&host, context) {
                    Ok(Some(s)) => return s.boxed(),
                    Ok(None) => {}
                    Err(e) => return futures::stream::once(async { Err(e) }).boxed(),
                }
            }
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Result<RecordBatch>>();
            let task = tokio::task::spawn_blocking(move || {
                // A closed receiver (the consumer stopped early) does not stop the scan:
                // its modeled report stays that of the whole scan, as before.
                let r = me.run(&host, in_time, &mut |b| {
                    let _ = tx.send(Ok(b));
                });
                if let Err(e) = r {
                    let _ = tx.send(Err(e));
                }
            });
            futures::stream::unfold((rx, Some(task)), |(mut rx, task)| async move {
                if let Some(item) = rx.recv().await {
                    return Some((item, (rx, task)));
                }
                // The channel closed: the scan ended or panicked; a panic is an error,
                // never a silently short result.
                match task?.await {
                    Ok(()) => None,
                    Err(e) => Some((Err(DataFusionError::External(Box::new(e))), (rx, None))),
                }
            })
            .boxed()
        })
        .flatten();
        Ok(filters.wrap(Box::pin(RecordBatchStreamAdapter::new(schema, stream))))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn supports_limit_pushdown(&self) -> bool {
        matches!(self.output, ScanOutput::Rows(_))
    }

    fn fetch(&self) -> Option<usize> {
        self.limit
    }

    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        Ok(Arc::new(self.estimate()))
    }
}

/// Share of a table's rows DataFusion assumes a filter keeps when it knows nothing
/// more (its `default_filter_selectivity`, 20%); used for scans with a pushed filter.
const FILTER_SELECTIVITY_PERCENT: usize = 20;

impl DeviceScanExec {
    /// What the optimizer may assume about this scan's output: the catalog's row count
    /// (exact without a filter; with one, its estimated selectivity given the columns'
    /// distinct values and bounds ([`crate::device::selectivity_with`]), or DataFusion's default
    /// selectivity for a table without statistics), capped by a
    /// pushed limit, bytes from the projected columns' widths, and each column's
    /// distinct values as the load measured them (at most the rows). A partial
    /// aggregate's groups are estimated as the product of its grouping columns'
    /// distinct values, at most the rows. Join selection uses these to build hash
    /// tables on the smaller side; nothing here is exact except an unfiltered row count.
    fn estimate(&self) -> Statistics {
        let mut st = Statistics::new_unknown(&self.schema);
        let all = usize::try_from(self.table.rows).unwrap_or(usize::MAX);
        let distinct = |c: usize| self.table.distinct.as_ref()?.get(c).copied();
        let bounds = |c: usize| *self.table.bounds.as_ref()?.get(c)?;
        let measured = self.table.distinct.is_some() || self.table.bounds.is_some();
        let mut rows = match (&self.program.filter, &self.filter_text) {
            (Some(f), _) if measured => {
                let facts = crate::device::ColumnFacts {
                    ndv: &distinct,
                    bounds: &bounds,
                };
                let kept = all as f64 * crate::device::selectivity_with(f, &facts);
                Precision::Inexact((kept.ceil() as usize).min(all))
            }
            (None, None) => Precision::Exact(all),
            _ => Precision::Inexact(all / 100 * FILTER_SELECTIVITY_PERCENT),
        };
        if self.expected_share < 1.0 {
            // Key sets of joins above will drop rows (`keyset::ExpectedKeySets`).
            rows = rows
                .map(|r| (r as f64 * self.expected_share).ceil() as usize)
                .to_inexact();
        }
        let cap = *rows.get_value().unwrap_or(&all);
        // Distinct values of table column `c` among `cap` rows (unknown: `None`).
        let ndv = |c: usize| {
            let d = distinct(c)?;
            (d > 0).then(|| usize::try_from(d).unwrap_or(usize::MAX).min(cap))
        };
        let columns: Vec<usize> = match (&self.output, &self.program.output) {
            (ScanOutput::Rows(cols), _) => cols.clone(),
            (ScanOutput::Partial(_), csd_query::Output::Aggregate(a)) => {
                let groups = a
                    .group_by
                    .iter()
                    .try_fold(1usize, |n, &c| Some(n.saturating_mul(ndv(c)?)));
                rows = Precision::Inexact(groups.unwrap_or(cap).min(cap));
                a.group_by.clone()
            }
            (ScanOutput::Partial(_), _) => return st,
        };
        for (cs, &c) in st.column_statistics.iter_mut().zip(&columns) {
            if let Some(d) = ndv(c) {
                cs.distinct_count = Precision::Inexact(d);
            }
        }
        if let Some(limit) = self.limit {
            rows = rows.min(&Precision::Exact(limit));
        }
        if matches!(self.output, ScanOutput::Rows(_)) {
            let width: usize = self
                .schema
                .fields()
                .iter()
                .map(|f| f.data_type().primitive_width().unwrap_or(16))
                .sum();
            st.total_byte_size = rows.multiply(&Precision::Exact(width)).to_inexact();
        }
        st.num_rows = rows;
        st
    }

    /// A copy sharing the device, the log and the metrics (what a stream runs).
    pub(crate) fn clone_for_run(&self) -> DeviceScanExec {
        DeviceScanExec {
            table: self.table.clone(),
            device: self.device.clone(),
            settings: self.settings,
            log: self.log.clone(),
            program: self.program.clone(),
            output: self.output.clone(),
            schema: self.schema.clone(),
            limit: self.limit,
            filter_text: self.filter_text.clone(),
            join: self.join.clone(),
            runtime_filters: self.runtime_filters.clone(),
            device_filters: self.device_filters.clone(),
            join_filters: self.join_filters.clone(),
            key_sets: self.key_sets.clone(),
            column_key_sets: self.column_key_sets.clone(),
            expected_share: self.expected_share,
            reuse: self.reuse.clone(),
            host_partial: self.host_partial.clone(),
            metrics: self.metrics.clone(),
            cache: self.cache.clone(),
        }
    }
}

impl FilteringScan for DeviceScanExec {
    fn runtime_filters(&self) -> &[Arc<dyn PhysicalExpr>] {
        &self.runtime_filters
    }

    fn with_runtime_filters(&self, filters: Vec<Arc<dyn PhysicalExpr>>) -> Arc<dyn ExecutionPlan> {
        let mut s = self.clone_for_run();
        s.runtime_filters = filters;
        Arc::new(s)
    }

    /// The filters `ids` are not applied in the host, but the device's program may still
    /// take them: evaluated next to the data they shrink what crosses the link.
    fn without_runtime_filters(&self, ids: &[u64]) -> Option<Arc<dyn ExecutionPlan>> {
        let (moved, kept): (Vec<_>, Vec<_>) = self
            .runtime_filters
            .iter()
            .cloned()
            .partition(|e| e.expression_id().is_some_and(|id| ids.contains(&id)));
        if moved.is_empty() {
            return None;
        }
        let mut s = self.clone_for_run();
        s.runtime_filters = kept;
        s.device_filters.extend(moved);
        Some(Arc::new(s))
    }
}
