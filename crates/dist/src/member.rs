//! [`MemberScanExec`]: one device's share of an array scan, the leaf a task of a
//! distributed plan runs, and [`MemberCodec`], the `PhysicalExtensionCodec` that carries
//! it between coordinator and worker as plain data ([`WireMember`]).
//!
//! The coordinator plans as a local array does; its [`ArrayScanExec`] (one partition per
//! device) becomes one task per device ([`crate::coordinator`]), each task's leaf a
//! `MemberScanExec` of that device. What travels is the table provider's request
//! (projection, filters as DataFusion's protobuf expressions, limit), the scan settings
//! and, for a pushed partial aggregation, the partial aggregate it replaced. The worker
//! builds the device scan again from them with the same code (`DeviceTable::scan`, then
//! `DeviceAggregatePushdown`), next to its device: the device program is the one the
//! coordinator planned, made from its catalog entry, which the worker checks against
//! the manifest's (rows, pages, layout). The scan's records (modeled reports) go back as
//! a labelled metric of the task, which the engine streams to the coordinator.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use csd_host::TableInfo;
use csd_sql::datafusion::arrow::array::{Array, RecordBatch};
use csd_sql::datafusion::catalog::TableProvider;
use csd_sql::datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use csd_sql::datafusion::common::{DataFusionError, Result};
use csd_sql::datafusion::execution::{SessionStateBuilder, TaskContext};
use csd_sql::datafusion::logical_expr::Expr;
use csd_sql::datafusion::physical_expr::PhysicalExpr;
use csd_sql::datafusion::physical_optimizer::PhysicalOptimizerRule;
use csd_sql::datafusion::physical_plan::metrics::{
    ExecutionPlanMetricsSet, Label, MetricBuilder, MetricsSet,
};
use csd_sql::datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use csd_sql::datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use csd_sql::{ArrayScanExec, Device, DeviceAggregatePushdown, DeviceTable, ScanLog, ScanRequest};
use datafusion_proto::bytes::{
    physical_plan_from_bytes_with_extension_codec, physical_plan_to_bytes_with_extension_codec,
};
use datafusion_proto::logical_plan::DefaultLogicalExtensionCodec;
use datafusion_proto::logical_plan::from_proto::parse_exprs;
use datafusion_proto::logical_plan::to_proto::serialize_exprs;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use datafusion_proto::protobuf::LogicalExprList;
use futures::{FutureExt, StreamExt};
use prost::Message;

pub use crate::wire::MemberDesc;
use crate::wire::{WIRE_VERSION, WireMember, WireRecord, WireScan, WireSettings};

/// Name of the metric that carries a task's scan records back to the coordinator.
pub const RECORDS_METRIC: &str = "csd_scans";
/// Its label holding the member scans' output and records, JSON of `Vec<WireScan>`.
pub const RECORDS_LABEL: &str = "csd_records";

/// One device's scan of an array table: see the [module docs](self).
pub struct MemberScanExec {
    desc: MemberDesc,
    request: Arc<ScanRequest>,
    /// Coordinator: the partial aggregate this scan computes, over a row member scan of
    /// the same device (encoded with the member).
    partial: Option<Arc<dyn ExecutionPlan>>,
    /// The single-device [`ArrayScanExec`] that runs the scan.
    inner: Arc<dyn ExecutionPlan>,
    /// Worker: where the rebuilt scan logs its records (`None` on the coordinator, which
    /// never runs a member scan itself).
    log: Option<ScanLog>,
    /// Worker: the output and records of the scans that finished, for the task's
    /// metrics.
    records: Arc<Mutex<Vec<WireScan>>>,
}

impl fmt::Debug for MemberScanExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MemberScanExec({} on {} at {})",
            self.desc.table, self.desc.device, self.desc.worker
        )
    }
}

impl MemberScanExec {
    /// The member scan of `array`'s `i`-th scan (coordinator side). `desc` names the
    /// device and its worker.
    pub fn of_array(array: &ArrayScanExec, i: usize, desc: MemberDesc) -> Result<MemberScanExec> {
        let request = array.request().cloned().ok_or_else(|| {
            DataFusionError::Plan(
                "an array scan built without a table request cannot be distributed".into(),
            )
        })?;
        let scan =
            array.scans().get(i).cloned().ok_or_else(|| {
                DataFusionError::Internal(format!("array scan has no member {i}"))
            })?;
        let inner = ArrayScanExec::try_new(vec![scan])?.with_origin(
            vec![desc.index],
            Some(request.clone()),
            None,
        )?;
        let partial = match array.pushed_from() {
            None => None,
            Some(sub) => {
                // The partial aggregate over a row scan of this member only.
                let d = desc.clone();
                let sub = sub
                    .clone()
                    .transform_up(|n| {
                        let Some(rows) = n.downcast_ref::<ArrayScanExec>() else {
                            return Ok(Transformed::no(n));
                        };
                        let m = MemberScanExec::of_array(rows, i, d.clone())?;
                        Ok(Transformed::yes(Arc::new(m) as Arc<dyn ExecutionPlan>))
                    })?
                    .data;
                Some(sub)
            }
        };
        Ok(MemberScanExec {
            desc,
            request,
            partial,
            inner: Arc::new(inner),
            log: None,
            records: Arc::default(),
        })
    }

    /// The device and worker of this scan.
    pub fn desc(&self) -> &MemberDesc {
        &self.desc
    }

    /// The plain-data description of this scan (what the codec ships).
    fn wire(&self, codec: &MemberCodec) -> Result<WireMember> {
        let filters = serialize_exprs(&self.request.filters, &DefaultLogicalExtensionCodec {})
            .map_err(|e| DataFusionError::Plan(format!("filters of {}: {e}", self.desc.table)))?;
        let filters = LogicalExprList { expr: filters }.encode_to_vec();
        let partial = match &self.partial {
            None => None,
            Some(p) => {
                Some(physical_plan_to_bytes_with_extension_codec(p.clone(), codec)?.to_vec())
            }
        };
        Ok(WireMember {
            version: WIRE_VERSION.to_string(),
            member: self.desc.clone(),
            projection: self.request.projection.clone(),
            filters,
            limit: self.request.limit,
            settings: WireSettings::of(&self.request.settings),
            partial,
            schema: schema_text(&self.inner),
        })
    }

    /// The device scan's metrics (the inner device scan's).
    fn scan_metrics(&self) -> Option<MetricsSet> {
        let mut out: Option<MetricsSet> = None;
        let _ = self.inner.apply(|n| {
            if n.name() == "DeviceScanExec"
                && let Some(m) = n.metrics()
            {
                let set = out.get_or_insert_with(MetricsSet::new);
                for x in m.iter() {
                    set.push(x.clone());
                }
            }
            Ok(TreeNodeRecursion::Continue)
        });
        out
    }
}

fn schema_text(p: &Arc<dyn ExecutionPlan>) -> Vec<String> {
    p.schema()
        .fields()
        .iter()
        .map(|f| format!("{}: {}", f.name(), f.data_type()))
        .collect()
}

impl DisplayAs for MemberScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "MemberScanExec: table={} device={} (array device {}) worker={}{}",
            self.desc.table,
            self.desc.device,
            self.desc.index,
            self.desc.worker,
            if self.partial.is_some() || self.inner_is_partial() {
                ", partial aggregate in the device"
            } else {
                ""
            }
        )
    }
}

impl MemberScanExec {
    fn inner_is_partial(&self) -> bool {
        self.inner
            .downcast_ref::<ArrayScanExec>()
            .is_some_and(|a| a.pushed_from().is_some())
    }
}

impl ExecutionPlan for MemberScanExec {
    fn name(&self) -> &'static str {
        "MemberScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.inner.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !children.is_empty() {
            return Err(DataFusionError::Internal("MemberScanExec is a leaf".into()));
        }
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let Some(log) = self.log.clone() else {
            return Err(DataFusionError::Execution(format!(
                "the scan of {} on device {} must run on its worker {}, not in the \
                 coordinator",
                self.desc.table, self.desc.device, self.desc.worker
            )));
        };
        let stream = self.inner.execute(partition, context)?;
        let schema = stream.schema();
        let records = self.records.clone();
        let (device, worker) = (self.desc.index, self.desc.worker.clone());
        // What the scan sends to the coordinator, counted as it goes.
        let sent = Arc::new(Mutex::new((0u64, 0u64)));
        let count = sent.clone();
        let stream = stream.inspect(move |b| {
            if let Ok(b) = b {
                let mut c = count.lock().unwrap_or_else(PoisonError::into_inner);
                c.0 += batch_bytes(b);
                c.1 += b.num_rows() as u64;
            }
        });
        // When the scan's stream ends, its output and records move to the task's
        // metrics.
        let tail = futures::stream::once(async move {
            let (output_bytes, output_rows) = *sent.lock().unwrap_or_else(PoisonError::into_inner);
            let scan = WireScan {
                device,
                worker,
                output_bytes,
                output_rows,
                records: log.take().iter().map(WireRecord::of).collect(),
            };
            records
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(scan);
            None
        })
        .filter_map(|x: Option<Result<_>>| async move { x });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            stream.chain(tail),
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        let mut set = self.scan_metrics().unwrap_or_default();
        let records = self
            .records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if !records.is_empty()
            && let Ok(json) = serde_json::to_string(&records)
        {
            let m = ExecutionPlanMetricsSet::new();
            MetricBuilder::new(&m)
                .with_label(Label::new(RECORDS_LABEL, json))
                .global_counter(RECORDS_METRIC)
                .add(records.len());
            for x in m.clone_inner().iter() {
                set.push(x.clone());
            }
        }
        Some(set)
    }
}

/// Bytes of `b`'s Arrow buffers (the sliced part of each column): what its Flight
/// message carries, less framing.
fn batch_bytes(b: &RecordBatch) -> u64 {
    b.columns()
        .iter()
        .map(|c| {
            let d = c.to_data();
            d.get_slice_memory_size()
                .unwrap_or_else(|_| c.get_array_memory_size()) as u64
        })
        .sum()
}

/// One device a worker serves: its image file name (as the array's manifest names it),
/// the device, and the catalog its scans are checked against (updated when a load
/// through this worker publishes a table, [`crate::load`]).
#[derive(Debug)]
pub struct ServedDevice {
    /// Image file name.
    pub file: String,
    /// The device (read-only, or read-write while a load runs).
    pub device: Arc<Device>,
    /// Its catalog's tables.
    pub catalog: Mutex<Vec<TableInfo>>,
    /// Why the device cannot serve (its image could not be reopened after a load).
    pub broken: Mutex<Option<String>>,
}

impl ServedDevice {
    /// A served device whose catalog holds `tables`.
    pub fn new(file: String, device: Arc<Device>, tables: Vec<TableInfo>) -> ServedDevice {
        ServedDevice {
            file,
            device,
            catalog: Mutex::new(tables),
            broken: Mutex::new(None),
        }
    }

    /// The catalog's entry of `table`.
    pub fn table(&self, table: &str) -> Option<TableInfo> {
        self.catalog
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|t| csd_host::same_name(&t.name, table))
            .cloned()
    }

    /// Records the catalog entry `t` (replacing the table of its name).
    pub fn publish(&self, t: TableInfo) {
        let mut c = self.catalog.lock().unwrap_or_else(PoisonError::into_inner);
        c.retain(|x| !csd_host::same_name(&x.name, &t.name));
        c.push(t);
    }
}

/// A worker's devices, in its session config: what [`MemberCodec`] builds scans on.
#[derive(Debug)]
pub struct WorkerDevices {
    /// The worker's name (its address), for records and messages.
    pub name: String,
    /// The devices.
    pub devices: Vec<ServedDevice>,
}

impl WorkerDevices {
    fn names(&self) -> String {
        self.devices
            .iter()
            .map(|d| d.file.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The device whose image is `file`, or an error naming what this worker serves.
    pub fn find(&self, file: &str, array: &str, index: usize) -> Result<&ServedDevice, String> {
        self.devices.iter().find(|d| d.file == file).ok_or_else(|| {
            format!(
                "manifest mismatch: device {file} (array {array} device {index}) is not served \
                 by worker {} (it serves {}); fix `workers` in the array's manifest",
                self.name,
                self.names()
            )
        })
    }
}

/// The codec of [`MemberScanExec`]: see the [module docs](self).
#[derive(Debug, Default, Clone, Copy)]
pub struct MemberCodec;

impl MemberCodec {
    fn decode_member(&self, m: WireMember, ctx: &TaskContext) -> Result<MemberScanExec> {
        if m.version != WIRE_VERSION {
            return Err(DataFusionError::Plan(format!(
                "version mismatch: the coordinator is {}, this worker is {WIRE_VERSION}; run \
                 the same csd on both",
                m.version
            )));
        }
        let Some(served) = ctx.session_config().get_extension::<WorkerDevices>() else {
            return Err(DataFusionError::Plan(format!(
                "the scan of device {} reached a process that serves no devices",
                m.member.device
            )));
        };
        let served_device = served
            .find(&m.member.device, &m.member.array, m.member.index)
            .map_err(DataFusionError::Plan)?;
        if let Some(why) = served_device
            .broken
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        {
            return Err(DataFusionError::Plan(format!(
                "device {} on worker {} cannot serve: {why}; restart the worker",
                m.member.device, served.name
            )));
        }
        let device = &served_device.device;
        let info = served_device.table(&m.member.table).ok_or_else(|| {
            DataFusionError::Plan(format!(
                "manifest mismatch: device {} on worker {} holds no table {}",
                m.member.device, served.name, m.member.table
            ))
        })?;
        if info.rows != m.member.rows
            || info.pages != m.member.pages
            || info.layout.to_string() != m.member.layout
        {
            return Err(DataFusionError::Plan(format!(
                "manifest mismatch: device {} on worker {} holds table {} with {} rows, {} \
                 pages ({}); the manifest says {} rows, {} pages ({}). Was the table loaded \
                 without this worker? Restart the worker after such a load",
                m.member.device,
                served.name,
                m.member.table,
                info.rows,
                info.pages,
                info.layout,
                m.member.rows,
                m.member.pages,
                m.member.layout
            )));
        }
        let settings = m
            .settings
            .settings()
            .map_err(|e| DataFusionError::Plan(e.to_string()))?;
        let desc = MemberDesc {
            worker: served.name.clone(),
            ..m.member.clone()
        };
        let filters = LogicalExprList::decode(m.filters.as_slice())
            .map_err(|e| DataFusionError::Plan(format!("filters: {e}")))?;
        let filters: Vec<Expr> = parse_exprs(&filters.expr, ctx, &DefaultLogicalExtensionCodec {})
            .map_err(|e| DataFusionError::Plan(format!("filters: {e}")))?;
        let request = Arc::new(ScanRequest {
            table: m.member.table.clone(),
            projection: m.projection.clone(),
            filters,
            limit: m.limit,
            settings,
        });
        let (inner, log): (Arc<dyn ExecutionPlan>, ScanLog) = match &m.partial {
            None => {
                let log = ScanLog::default();
                let table = DeviceTable::new(info.clone(), device.clone(), settings, log.clone());
                let state = SessionStateBuilder::new().build();
                let scan = table
                    .scan(
                        &state,
                        request.projection.as_ref(),
                        &request.filters,
                        request.limit,
                    )
                    .now_or_never()
                    .ok_or_else(|| {
                        DataFusionError::Internal("a device table scan waited".into())
                    })??;
                let a = ArrayScanExec::try_new(vec![scan])?.with_origin(
                    vec![m.member.index],
                    Some(request.clone()),
                    None,
                )?;
                (Arc::new(a), log)
            }
            Some(bytes) => {
                // The partial aggregate over this device's row scan, then the same
                // pushdown rule as in the coordinator.
                let sub = physical_plan_from_bytes_with_extension_codec(bytes, ctx, self)?;
                let mut log = None;
                let sub = sub
                    .transform_up(|n| match n.downcast_ref::<MemberScanExec>() {
                        Some(rows) => {
                            log = rows.log.clone();
                            Ok(Transformed::yes(rows.inner.clone()))
                        }
                        None => Ok(Transformed::no(n)),
                    })?
                    .data;
                let pushed =
                    DeviceAggregatePushdown.optimize(sub, ctx.session_config().options())?;
                let (Some(_), Some(log)) = (pushed.downcast_ref::<ArrayScanExec>(), log) else {
                    return Err(DataFusionError::Plan(format!(
                        "device {} on worker {}: the partial aggregation did not go into the \
                         device as the coordinator planned",
                        m.member.device, served.name
                    )));
                };
                (pushed, log)
            }
        };
        let got = schema_text(&inner);
        if got != m.schema {
            return Err(DataFusionError::Plan(format!(
                "device {} on worker {}: the scan's output is [{}], the coordinator planned [{}]",
                m.member.device,
                served.name,
                got.join(", "),
                m.schema.join(", ")
            )));
        }
        Ok(MemberScanExec {
            desc,
            request,
            partial: None,
            inner,
            log: Some(log),
            records: Arc::default(),
        })
    }
}

impl PhysicalExtensionCodec for MemberCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !inputs.is_empty() {
            return Err(DataFusionError::Internal(
                "a member scan has no inputs".into(),
            ));
        }
        let m: WireMember = serde_json::from_slice(buf)
            .map_err(|e| DataFusionError::Plan(format!("not a csd member scan: {e}")))?;
        Ok(Arc::new(self.decode_member(m, ctx)?))
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        let Some(m) = node.downcast_ref::<MemberScanExec>() else {
            return Err(DataFusionError::Internal(format!(
                "MemberCodec encodes member scans, not {}",
                node.name()
            )));
        };
        let wire = m.wire(self)?;
        serde_json::to_writer(buf, &wire)
            .map_err(|e| DataFusionError::Internal(format!("encoding a member scan: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_proto::physical_plan::DefaultPhysicalProtoConverter;

    fn member(version: &str) -> WireMember {
        WireMember {
            version: version.to_string(),
            member: MemberDesc {
                array: "arr".into(),
                device: "dev1.img".into(),
                index: 1,
                worker: "http://127.0.0.1:1".into(),
                table: "lineitem".into(),
                rows: 10,
                pages: 1,
                layout: "pax".into(),
            },
            projection: None,
            filters: Vec::new(),
            limit: None,
            settings: WireSettings::of(&csd_sql::ScanSettings::new(csd_sql::Choice::Fixed(
                csd_host::Strategy::HwIsp,
            ))),
            partial: None,
            schema: Vec::new(),
        }
    }

    fn decode(buf: &[u8]) -> String {
        MemberCodec
            .try_decode(
                buf,
                &[],
                &TaskContext::default(),
                &DefaultPhysicalProtoConverter {},
            )
            .map(|p| p.name().to_string())
            .unwrap_or_else(|e| e.to_string())
    }

    #[test]
    fn a_plan_of_another_version_is_refused_naming_both_versions() {
        let buf = serde_json::to_vec(&member("csd-0.0.1/wire-1")).expect("json");
        let e = decode(&buf);
        assert!(
            e.contains("version mismatch")
                && e.contains("csd-0.0.1/wire-1")
                && e.contains(WIRE_VERSION),
            "{e}"
        );
    }

    #[test]
    fn a_scan_reaching_a_process_without_devices_or_garbage_is_refused() {
        let buf = serde_json::to_vec(&member(WIRE_VERSION)).expect("json");
        let e = decode(&buf);
        assert!(
            e.contains("serves no devices") && e.contains("dev1.img"),
            "{e}"
        );
        let e = decode(b"{\"not\": \"a member\"}");
        assert!(e.contains("not a csd member scan"), "{e}");
    }

    #[test]
    fn batch_bytes_counts_the_slice_a_batch_holds() {
        use csd_sql::datafusion::arrow::array::Int64Array;
        let a: Arc<dyn Array> = Arc::new(Int64Array::from((0..1000).collect::<Vec<i64>>()));
        let b = RecordBatch::try_from_iter([("a", a)]).expect("batch");
        assert_eq!(batch_bytes(&b), 8000);
        assert_eq!(batch_bytes(&b.slice(0, 10)), 80);
    }
}
