//! An array of smart SSDs (smart-ssd-query-processing §4.3: several devices, each
//! scanning its share of a table next to the data, the host merging): a table's pages
//! are striped across N device images, each device is one DataFusion partition, and
//! the device scans run in parallel on host threads.
//!
//! * [`Manifest`] (`csd-array.toml` in the array's directory, versioned): the device
//!   images, and per table its [`Placement`] (layout, stripe unit in pages, rows and
//!   pages per device). Each device image is an ordinary csd image whose catalog holds
//!   its stripe of the table under the table's name, so every single-device tool works
//!   on one member; the manifest is what makes them one table.
//! * [`load_striped`]: one row source, page `k` of the table (in units of
//!   `stripe_pages`) to device `k mod N`. Rows are dealt out in whole pages (rows per
//!   page are fixed for a fixed-width schema, so each device's loader packs exactly the
//!   pages it was dealt), the devices load in parallel, one thread each. The manifest is
//!   written (atomically: a new file renamed over the old) only after every device
//!   published its stripe.
//! * [`ArraySession`]: a DataFusion context whose tables are [`ArrayScanExec`]s: one
//!   [`DeviceScanExec`] per device (its pushed filter, projection, limit and partial
//!   aggregation: [`crate::agg`] pushes the aggregation into every member), one
//!   partition each. DataFusion's own operators (final aggregation, joins, sorts) run
//!   on the host over the union of the partitions.
//!
//! Modeled time of an array: each device has its own clock, so the array's modeled time
//! is the largest per-device time (the sum of that device's scans, each of which
//! includes the host-side work on its stream in the device's timeline); DataFusion's
//! host operators above the scans are not modeled (wall time only). The per-device
//! figures are kept ([`ArrayAnswer::devices`]).
//!
//! Choices: striping by pages keeps the device program unchanged (each member scans a
//! normal table); a stripe unit of one page balances a table within one page per
//! device. See `docs/array.md` for how the partitions could be scheduled on several
//! machines.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use csd_host::{Catalog, Client, CommandIssuer, HostError, LoadReport, TableInfo};
use csd_table::datagen::RowSource;
use csd_table::page::{Layout, rows_per_page};
use csd_table::schema::Schema;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::TableType;
use datafusion::execution::{SessionStateBuilder, TaskContext};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use datafusion::prelude::SessionContext;
use serde::{Deserialize, Serialize};

use crate::device::{Choice, Device, ScanSettings};
use crate::exec::{DeviceScanExec, ScanLog, ScanRecord};
use crate::provider::DeviceTable;
use crate::{Answer, SameRows, SqlError, execute, new_context};

/// File name of the manifest in an array's directory.
pub const MANIFEST_FILE: &str = "csd-array.toml";
/// The manifest format this code writes and reads.
pub const MANIFEST_VERSION: u32 = 1;
const MANIFEST_FORMAT: &str = "csd-array";

/// Why an array's manifest cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ArrayError {
    /// Reading or writing the manifest failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The manifest is not a valid array manifest.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// The devices of the array in `dir` (its `manifest`), each opened by `open` (read-only
/// for queries), as command clients, with the config they share. Every device must have
/// the first one's geometry, and an array has at least one device.
pub fn open_clients<E>(
    manifest: &Manifest,
    dir: &Path,
    mut open: impl FnMut(&Path) -> Result<csd_device::BlockDevice, E>,
) -> Result<(Vec<Client>, csd_sim::DeviceConfig), E>
where
    E: From<ArrayError> + From<HostError>,
{
    let mut clients = Vec::with_capacity(manifest.devices.len());
    let mut cfg: Option<csd_sim::DeviceConfig> = None;
    for p in manifest.device_paths(dir) {
        let dev = open(&p)?;
        let c = dev.ftl().nand().config().clone();
        if let Some(first) = &cfg
            && first.geometry != c.geometry
        {
            return Err(ArrayError::Invalid {
                path: p,
                message: "its geometry differs from the array's first device".into(),
            }
            .into());
        }
        cfg.get_or_insert(c);
        clients.push(Client::new(csd_device::NvmeDevice::from_block(dev))?);
    }
    let cfg = cfg.ok_or_else(|| ArrayError::Invalid {
        path: Manifest::path(dir),
        message: "the array has no devices".into(),
    })?;
    Ok((clients, cfg))
}

/// Where one table's pages are on the array.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// Table name.
    pub name: String,
    /// Page layout (saved as `nsm` or `pax`).
    pub layout: Layout,
    /// Stripe unit: consecutive table pages that go to one device.
    pub stripe_pages: u64,
    /// Rows in the table.
    pub rows: u64,
    /// Pages in the table.
    pub pages: u64,
    /// Rows on each device, in device order.
    pub device_rows: Vec<u64>,
    /// Pages on each device, in device order.
    pub device_pages: Vec<u64>,
}

/// The modeled network between a distributed array's workers and its coordinator
/// (the manifest's `[network]` section): each worker has one link to the coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Network {
    /// Bandwidth of a worker's link to the coordinator, GB/s (10^9 bytes per second).
    pub bandwidth_gb_s: f64,
    /// Latency of a transfer, µs (paid once per worker and query).
    pub latency_us: f64,
}

impl Default for Network {
    /// 10 Gbit/s Ethernet (1.25 GB/s) with 50 µs of latency.
    fn default() -> Network {
        Network {
            bandwidth_gb_s: 1.25,
            latency_us: 50.0,
        }
    }
}

impl Network {
    /// Modeled nanoseconds to send `bytes` over one link: latency plus bytes over the
    /// bandwidth (nothing to send costs nothing).
    pub fn transfer_ns(&self, bytes: u64) -> u64 {
        if bytes == 0 {
            return 0;
        }
        (self.latency_us * 1e3 + bytes as f64 / self.bandwidth_gb_s).round() as u64
    }

    /// Checks the figures (the field is named).
    pub fn check(&self) -> Result<(), String> {
        if !(self.bandwidth_gb_s.is_finite() && self.bandwidth_gb_s > 0.0) {
            return Err(format!(
                "network.bandwidth_gb_s = {}: a positive number of GB/s",
                self.bandwidth_gb_s
            ));
        }
        if !(self.latency_us.is_finite() && self.latency_us >= 0.0) {
            return Err(format!(
                "network.latency_us = {}: zero or a positive number of µs",
                self.latency_us
            ));
        }
        Ok(())
    }
}

/// An array's manifest (`csd-array.toml`): see the [module docs](self).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always `csd-array`.
    pub format: String,
    /// [`MANIFEST_VERSION`] when written by this code.
    pub version: u32,
    /// How the devices were created (e.g. `--preset tiny`), for people.
    pub device_config: String,
    /// Device image files, relative to the array's directory, in partition order.
    pub devices: Vec<String>,
    /// The worker serving each device (`http://HOST:PORT` of a `csd worker`), in
    /// device order; empty: every image is local and the array runs in process.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<String>,
    /// The modeled network between the workers and the coordinator (`None`: the
    /// [`Network::default`]); used only when `workers` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
    /// Tables, with their placement.
    #[serde(default)]
    pub tables: Vec<Placement>,
}

impl Manifest {
    /// A manifest of `n` devices named `dev0.img` … and no tables.
    pub fn new(n: usize, device_config: &str) -> Manifest {
        Manifest {
            format: MANIFEST_FORMAT.into(),
            version: MANIFEST_VERSION,
            device_config: device_config.into(),
            devices: (0..n).map(|i| format!("dev{i}.img")).collect(),
            workers: Vec::new(),
            network: None,
            tables: Vec::new(),
        }
    }

    /// The manifest's path in `dir`.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(MANIFEST_FILE)
    }

    /// The device image paths, in partition order.
    pub fn device_paths(&self, dir: &Path) -> Vec<PathBuf> {
        self.devices.iter().map(|d| dir.join(d)).collect()
    }

    /// Reads and checks the manifest of the array in `dir`.
    pub fn read(dir: &Path) -> Result<Manifest, ArrayError> {
        let path = Manifest::path(dir);
        let text = std::fs::read_to_string(&path).map_err(|e| ArrayError::Io {
            path: path.clone(),
            source: e,
        })?;
        let invalid = |message: String| ArrayError::Invalid {
            path: path.clone(),
            message,
        };
        let m: Manifest =
            toml::from_str(&text).map_err(|e| invalid(format!("not an array manifest: {e}")))?;
        m.check().map_err(invalid)?;
        Ok(m)
    }

    /// Checks the manifest's invariants.
    pub fn check(&self) -> Result<(), String> {
        if self.format != MANIFEST_FORMAT {
            return Err(format!(
                "format is `{}`, not `{MANIFEST_FORMAT}`",
                self.format
            ));
        }
        if self.version != MANIFEST_VERSION {
            return Err(format!(
                "manifest version {} (this csd reads version {MANIFEST_VERSION})",
                self.version
            ));
        }
        if self.devices.is_empty() {
            return Err("the array has no devices".into());
        }
        for d in &self.devices {
            let p = Path::new(d);
            if p.is_absolute() || p.components().count() != 1 {
                return Err(format!(
                    "device `{d}`: images are file names inside the array's directory"
                ));
            }
        }
        self.check_workers()?;
        if let Some(n) = &self.network {
            n.check()?;
        }
        for t in &self.tables {
            let n = self.devices.len();
            if t.device_rows.len() != n || t.device_pages.len() != n {
                return Err(format!(
                    "table {}: placement lists {} / {} devices, the array has {n}",
                    t.name,
                    t.device_rows.len(),
                    t.device_pages.len()
                ));
            }
            for (field, per_device, total, of) in [
                ("device_rows", &t.device_rows, t.rows, "rows"),
                ("device_pages", &t.device_pages, t.pages, "pages"),
            ] {
                let sum = per_device.iter().sum::<u64>();
                if sum != total {
                    return Err(format!(
                        "table {}: {field} add up to {sum}, not its {of} = {total} (the \
                         placement per device does not add up)",
                        t.name
                    ));
                }
            }
            if t.stripe_pages == 0 {
                return Err(format!(
                    "table {}: stripe_pages = 0 (a stripe unit is at least one page)",
                    t.name
                ));
            }
        }
        Ok(())
    }

    /// Checks the `workers` list: empty, or one `http://HOST:PORT` per device.
    fn check_workers(&self) -> Result<(), String> {
        if self.workers.is_empty() {
            return Ok(());
        }
        if self.workers.len() != self.devices.len() {
            return Err(format!(
                "workers: {} listed, the array has {} devices (one worker address per device)",
                self.workers.len(),
                self.devices.len()
            ));
        }
        for (i, w) in self.workers.iter().enumerate() {
            let rest = w.strip_prefix("http://").ok_or_else(|| {
                format!("workers[{i}] = `{w}`: a worker address is http://HOST:PORT")
            })?;
            let port = rest.trim_end_matches('/').rsplit_once(':').map(|(_, p)| p);
            if port.is_none_or(|p| p.parse::<u16>().is_err()) {
                return Err(format!(
                    "workers[{i}] = `{w}`: a worker address is http://HOST:PORT"
                ));
            }
        }
        if self.devices.len() < 2 {
            return Err(
                "workers: an array served by workers needs at least two devices (one device is \
                 one task, which the engine runs in the coordinator)"
                    .into(),
            );
        }
        Ok(())
    }

    /// Writes the manifest into `dir` atomically (a temporary file renamed over it).
    pub fn write(&self, dir: &Path) -> Result<(), ArrayError> {
        let path = Manifest::path(dir);
        let io = |e: std::io::Error| ArrayError::Io {
            path: path.clone(),
            source: e,
        };
        let text = toml::to_string_pretty(self).map_err(|e| ArrayError::Invalid {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let tmp = dir.join(format!("{MANIFEST_FILE}.tmp"));
        std::fs::write(&tmp, text).map_err(io)?;
        std::fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(io)?;
        std::fs::rename(&tmp, &path).map_err(io)
    }

    /// Records (or replaces) a table's placement.
    pub fn put(&mut self, p: Placement) {
        self.tables
            .retain(|t| !csd_host::same_name(&t.name, &p.name));
        self.tables.push(p);
    }
}

/// A stripe unit of rows dealt to one device: their row images back to back, and where
/// each ends (row images of a schema with variable-length values differ in length).
#[derive(Default)]
struct Unit {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Unit {
    fn push(&mut self, row: &[u8]) {
        self.bytes.extend_from_slice(row);
        self.ends.push(self.bytes.len());
    }
}

/// The rows dealt to one device, arriving over a channel in stripe units.
struct Dealt {
    schema: Schema,
    rx: std::sync::mpsc::Receiver<Unit>,
    unit: Unit,
    next: usize,
}

impl RowSource for Dealt {
    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn next_row(&mut self, row: &mut Vec<u8>) -> bool {
        while self.next >= self.unit.ends.len() {
            match self.rx.recv() {
                Ok(u) => {
                    self.unit = u;
                    self.next = 0;
                }
                Err(_) => return false,
            }
        }
        let start = match self.next {
            0 => 0,
            i => self.unit.ends[i - 1],
        };
        row.clear();
        row.extend_from_slice(&self.unit.bytes[start..self.unit.ends[self.next]]);
        self.next += 1;
        true
    }
}

/// Whether a stripe unit holding `rows` rows of `bytes` row-image bytes is complete: a
/// unit is `stripe_pages` pages of rows, `unit_rows` of them for fixed-width rows (the
/// rows a page holds times the pages) or, where row images vary in length
/// (variable-length values), as many as fill `unit_bytes` (that many pages' bytes),
/// whichever comes first. Fixed-width rows always reach `unit_rows` first (a page's
/// header takes some of its bytes). Every array load (in process and through workers)
/// deals by this rule.
pub fn unit_is_full(rows: usize, bytes: usize, unit_rows: usize, unit_bytes: usize) -> bool {
    rows >= unit_rows || bytes >= unit_bytes
}

/// Loads `source` as table `name` striped over `clients` (see the [module
/// docs](self)): units of `stripe_pages` pages go round robin, the devices load in
/// parallel. `progress` sees the rows dealt so far. Returns each device's load report
/// and the table's placement (for the manifest).
pub fn load_striped(
    clients: &mut [Client],
    name: &str,
    mut source: impl RowSource,
    layout: Layout,
    stripe_pages: u64,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(Vec<LoadReport>, Placement), HostError> {
    csd_host::check_table_name(name)?;
    let n = clients.len();
    if n == 0 || stripe_pages == 0 {
        return Err(HostError::Invalid(
            "an array load needs at least one device and a stripe unit of at least one page".into(),
        ));
    }
    let id = clients[0].identify().clone();
    let page_bytes = id.flash_page_bytes.max(id.lba_size) as usize;
    let schema = source.schema().clone();
    let width = schema.row_width();
    let per_page = rows_per_page(layout, width, page_bytes);
    if per_page == 0 {
        return Err(HostError::Invalid(format!(
            "a {width}-byte row of table {name} does not fit a {page_bytes}-byte {layout} page"
        )));
    }
    let unit_rows = per_page * stripe_pages as usize;
    let results: Vec<Result<LoadReport, HostError>> = std::thread::scope(|s| {
        let mut txs = Vec::with_capacity(n);
        let mut handles = Vec::with_capacity(n);
        for client in clients.iter_mut() {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Unit>(4);
            txs.push(tx);
            let src = Dealt {
                schema: schema.clone(),
                rx,
                unit: Unit::default(),
                next: 0,
            };
            handles.push(s.spawn(move || Catalog::load(client, name, src, layout, &mut |_| {})));
        }
        let unit_bytes = stripe_pages as usize * page_bytes;
        let mut row = Vec::with_capacity(width);
        let mut unit = Unit::default();
        let mut k = 0usize;
        let mut rows = 0u64;
        let mut alive = true;
        while source.next_row(&mut row) {
            unit.push(&row);
            rows += 1;
            if unit_is_full(unit.ends.len(), unit.bytes.len(), unit_rows, unit_bytes) {
                let full = std::mem::take(&mut unit);
                // A device whose load failed dropped its receiver: stop dealing.
                if txs[k % n].send(full).is_err() {
                    alive = false;
                    break;
                }
                k += 1;
                progress(rows);
            }
        }
        if alive && !unit.ends.is_empty() {
            let _ = txs[k % n].send(unit);
        }
        drop(txs);
        progress(rows);
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(HostError::Invalid("a device loader thread panicked".into()))
                })
            })
            .collect()
    });
    let reports = results.into_iter().collect::<Result<Vec<_>, _>>()?;
    let placement = Placement {
        name: name.to_string(),
        layout,
        stripe_pages,
        rows: reports.iter().map(|r| r.table.rows).sum(),
        pages: reports.iter().map(|r| r.table.pages).sum(),
        device_rows: reports.iter().map(|r| r.table.rows).collect(),
        device_pages: reports.iter().map(|r| r.table.pages).collect(),
    };
    Ok((reports, placement))
}

/// What an array table's provider was asked for: with it, the same device scans can be
/// built again next to the devices (a worker of a distributed array, `csd-dist`).
#[derive(Debug, Clone)]
pub struct ScanRequest {
    /// The table.
    pub table: String,
    /// Columns asked for (`None`: all).
    pub projection: Option<Vec<usize>>,
    /// The filters pushed into the device program.
    pub filters: Vec<Expr>,
    /// The limit pushed into each scan.
    pub limit: Option<usize>,
    /// How the scans run.
    pub settings: ScanSettings,
}

/// The scan of an array table: one [`DeviceScanExec`] per device, one partition each.
#[derive(Debug)]
pub struct ArrayScanExec {
    scans: Vec<Arc<dyn ExecutionPlan>>,
    /// The array's device index of each scan.
    devices: Vec<usize>,
    /// What the table provider was asked for (`None`: built by hand).
    request: Option<Arc<ScanRequest>>,
    /// For scans that compute a pushed partial aggregation: the plan they replaced
    /// (the partial `AggregateExec` over the row scan), see [`ArrayScanExec::pushed_from`].
    pushed_from: Option<Arc<dyn ExecutionPlan>>,
    cache: Arc<PlanProperties>,
}

impl ArrayScanExec {
    /// An array scan over `scans` (device scans of one schema, one partition each).
    pub fn try_new(scans: Vec<Arc<dyn ExecutionPlan>>) -> Result<ArrayScanExec> {
        let Some(first) = scans.first() else {
            return Err(DataFusionError::Plan("an array scan needs a device".into()));
        };
        let schema = first.schema();
        for s in &scans {
            if s.downcast_ref::<DeviceScanExec>().is_none()
                || s.properties().partitioning.partition_count() != 1
                || s.schema() != schema
            {
                return Err(DataFusionError::Plan(
                    "an array scan is made of device scans of one schema".into(),
                ));
            }
        }
        let cache = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(scans.len()),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Ok(ArrayScanExec {
            devices: (0..scans.len()).collect(),
            scans,
            request: None,
            pushed_from: None,
            cache,
        })
    }

    /// The device scans, in device order.
    pub fn scans(&self) -> &[Arc<dyn ExecutionPlan>] {
        &self.scans
    }

    /// The array's device index of each scan.
    pub fn devices(&self) -> &[usize] {
        &self.devices
    }

    /// What the table provider was asked for, if this scan came from one.
    pub fn request(&self) -> Option<&Arc<ScanRequest>> {
        self.request.as_ref()
    }

    /// For scans computing a pushed partial aggregation: the partial `AggregateExec`
    /// plan (over an array row scan) they replaced. A worker rebuilds the row scan from
    /// its [`ScanRequest`] and pushes the aggregation again with the same rule, so the
    /// device program is the one the coordinator planned.
    pub fn pushed_from(&self) -> Option<&Arc<dyn ExecutionPlan>> {
        self.pushed_from.as_ref()
    }

    /// `self` with its provenance: the array devices of its scans, the request, the
    /// plan it replaced.
    pub fn with_origin(
        mut self,
        devices: Vec<usize>,
        request: Option<Arc<ScanRequest>>,
        pushed_from: Option<Arc<dyn ExecutionPlan>>,
    ) -> Result<ArrayScanExec> {
        if devices.len() != self.scans.len() {
            return Err(DataFusionError::Plan(format!(
                "an array scan of {} devices given {} device indices",
                self.scans.len(),
                devices.len()
            )));
        }
        self.devices = devices;
        self.request = request;
        self.pushed_from = pushed_from;
        Ok(self)
    }

    /// Records in `new` (the aggregate pushdown's replacement of `old`) the plan it
    /// replaced, when both are array scans.
    pub(crate) fn record_pushdown(
        new: Arc<dyn ExecutionPlan>,
        old: &Arc<dyn ExecutionPlan>,
    ) -> Arc<dyn ExecutionPlan> {
        let Some(a) = new.downcast_ref::<ArrayScanExec>() else {
            return new;
        };
        let mut rows = None;
        let _ = old.apply(|n| {
            if let Some(r) = n.downcast_ref::<ArrayScanExec>() {
                rows = Some((r.devices.clone(), r.request.clone()));
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        });
        let Some((devices, request)) = rows else {
            return new;
        };
        match ArrayScanExec::try_new(a.scans.clone())
            .and_then(|x| x.with_origin(devices, request, Some(old.clone())))
        {
            Ok(x) => Arc::new(x),
            Err(_) => new,
        }
    }
}

impl DisplayAs for ArrayScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "ArrayScanExec: {} devices, one partition each",
            self.scans.len()
        )
    }
}

impl ExecutionPlan for ArrayScanExec {
    fn name(&self) -> &'static str {
        "ArrayScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.cache
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        self.scans.iter().collect()
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
        Ok(Arc::new(ArrayScanExec::try_new(children)?.with_origin(
            self.devices.clone(),
            self.request.clone(),
            self.pushed_from.clone(),
        )?))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let scan = self.scans.get(partition).ok_or_else(|| {
            DataFusionError::Internal(format!(
                "ArrayScanExec has {} partitions, not {}",
                self.scans.len(),
                partition + 1
            ))
        })?;
        scan.execute(0, context)
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false; self.scans.len()]
    }
}

/// A table of the array: one [`DeviceTable`] per device.
#[derive(Debug)]
struct ArrayTable {
    name: String,
    parts: Vec<DeviceTable>,
    settings: ScanSettings,
}

#[async_trait]
impl TableProvider for ArrayTable {
    fn schema(&self) -> SchemaRef {
        self.parts[0].schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        self.parts[0].supports_filters_pushdown(filters)
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let mut scans = Vec::with_capacity(self.parts.len());
        for p in &self.parts {
            scans.push(p.scan(state, projection, filters, limit).await?);
        }
        let request = ScanRequest {
            table: self.name.clone(),
            projection: projection.cloned(),
            filters: filters.to_vec(),
            limit,
            settings: self.settings,
        };
        let n = scans.len();
        Ok(Arc::new(ArrayScanExec::try_new(scans)?.with_origin(
            (0..n).collect(),
            Some(Arc::new(request)),
            None,
        )?))
    }
}

/// A query's answer on an array: the answer (all scans, in the order they finished),
/// each device's scans and, on a distributed array, what crossed the network.
#[derive(Debug)]
pub struct ArrayAnswer {
    /// The answer; its `scans` are every device's.
    pub answer: Answer,
    /// Per device (partition order), its scans.
    pub devices: Vec<Vec<ScanRecord>>,
    /// On a distributed array, each device's scan outputs sent to the coordinator.
    pub network: Option<NetworkFigures>,
}

/// What a distributed array's scans sent to the coordinator, per device, and the
/// network that carried it.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkFigures {
    /// The modeled network.
    pub network: Network,
    /// Per device (array order): the worker that serves it.
    pub workers: Vec<String>,
    /// Per device: bytes of its scans' output batches (Arrow buffers).
    pub bytes: Vec<u64>,
    /// Per device: rows of its scans' output batches.
    pub rows: Vec<u64>,
}

/// One worker's figures in a distributed array's query.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerFigures {
    /// The worker's address.
    pub worker: String,
    /// Its devices (array indices).
    pub devices: Vec<usize>,
    /// Bytes its devices' scans sent to the coordinator.
    pub bytes: u64,
    /// Rows its devices' scans sent.
    pub rows: u64,
    /// Modeled nanoseconds of the transfer over its link (latency + bytes / bandwidth).
    pub transfer_ns: u64,
    /// Modeled nanoseconds of the worker: its slowest device, then the transfer of all
    /// its devices' outputs over its one link.
    pub modeled_ns: u64,
}

impl NetworkFigures {
    /// Modeled nanoseconds of device `d`'s output alone over its worker's link.
    pub fn device_transfer_ns(&self, d: usize) -> u64 {
        self.network
            .transfer_ns(self.bytes.get(d).copied().unwrap_or(0))
    }

    /// Per worker (in order of first device), given each device's modeled nanoseconds.
    pub fn per_worker(&self, device_ns: &[u64]) -> Vec<WorkerFigures> {
        let mut out: Vec<WorkerFigures> = Vec::new();
        for (d, w) in self.workers.iter().enumerate() {
            let i = match out.iter().position(|f| f.worker == *w) {
                Some(i) => i,
                None => {
                    out.push(WorkerFigures {
                        worker: w.clone(),
                        devices: Vec::new(),
                        bytes: 0,
                        rows: 0,
                        transfer_ns: 0,
                        modeled_ns: 0,
                    });
                    out.len() - 1
                }
            };
            let f = &mut out[i];
            f.devices.push(d);
            f.bytes += self.bytes.get(d).copied().unwrap_or(0);
            f.rows += self.rows.get(d).copied().unwrap_or(0);
            f.modeled_ns = f.modeled_ns.max(device_ns.get(d).copied().unwrap_or(0));
        }
        for f in &mut out {
            f.transfer_ns = self.network.transfer_ns(f.bytes);
            f.modeled_ns += f.transfer_ns;
        }
        out
    }
}

/// Modeled nanoseconds of each device (the sum of its scans), from each device's scans.
pub fn device_ns(devices: &[Vec<ScanRecord>]) -> Vec<u64> {
    devices
        .iter()
        .map(|d| d.iter().map(|s| s.report.modeled_ns).sum())
        .collect()
}

/// Modeled nanoseconds of an array from each device's scans: the slowest device (see
/// the [module docs](self)).
pub fn array_ns(devices: &[Vec<ScanRecord>]) -> u64 {
    device_ns(devices).into_iter().max().unwrap_or(0)
}

/// Modeled nanoseconds of an array: the slowest device or, distributed
/// (`network` given), the slowest worker: its slowest device, then its devices' outputs
/// over its link.
pub fn modeled_ns(devices: &[Vec<ScanRecord>], network: Option<&NetworkFigures>) -> u64 {
    match network {
        None => array_ns(devices),
        Some(n) => n
            .per_worker(&device_ns(devices))
            .iter()
            .map(|w| w.modeled_ns)
            .max()
            .unwrap_or(0),
    }
}

/// Each device's scans of one query and, distributed, its network figures: what the
/// array's report is made of.
#[derive(Debug, Clone, Default)]
pub struct ArrayFigures {
    /// Per device (partition order), its scans.
    pub devices: Vec<Vec<ScanRecord>>,
    /// On a distributed array, what crossed the network.
    pub network: Option<NetworkFigures>,
}

impl ArrayFigures {
    /// Modeled nanoseconds of each device: the sum of its scans.
    pub fn device_ns(&self) -> Vec<u64> {
        device_ns(&self.devices)
    }

    /// Per worker, on a distributed array (empty otherwise).
    pub fn workers(&self) -> Vec<WorkerFigures> {
        match &self.network {
            Some(n) => n.per_worker(&self.device_ns()),
            None => Vec::new(),
        }
    }

    /// Modeled nanoseconds of the array: the slowest device or, distributed, the
    /// slowest worker (its slowest device, then its devices' outputs over its link).
    pub fn modeled_ns(&self) -> u64 {
        modeled_ns(&self.devices, self.network.as_ref())
    }
}

impl ArrayAnswer {
    /// Modeled nanoseconds of each device: the sum of its scans.
    pub fn device_ns(&self) -> Vec<u64> {
        device_ns(&self.devices)
    }

    /// Modeled nanoseconds of the array (see [`ArrayFigures::modeled_ns`]).
    pub fn modeled_ns(&self) -> u64 {
        modeled_ns(&self.devices, self.network.as_ref())
    }

    /// The answer and the figures of the array's report.
    pub fn split(self) -> (Answer, ArrayFigures) {
        (
            self.answer,
            ArrayFigures {
                devices: self.devices,
                network: self.network,
            },
        )
    }
}

/// Runs an array session's queries somewhere else than in this process: the hook of a
/// distributed runner (`csd-dist`), which configured the session's DataFusion context
/// ([`ArraySession::distribute`]) and brings each device's scan records back.
pub trait ArrayRunner: Send + Sync {
    /// Plans and runs `sql` on `ctx`; the answer and each device's scans (array device
    /// order, `devices` of them).
    fn run(
        &self,
        ctx: &SessionContext,
        runtime: &tokio::runtime::Runtime,
        sql: &str,
        tables: &[String],
        devices: usize,
    ) -> Result<ArrayAnswer, SqlError>;
}

/// A SQL session over the tables of an array (see the [module docs](self)).
pub struct ArraySession {
    ctx: SessionContext,
    devices: Vec<Arc<Device>>,
    logs: Vec<ScanLog>,
    placements: Vec<Placement>,
    /// Per table (placement order), the catalog entry on each device.
    infos: Vec<Vec<TableInfo>>,
    settings: ScanSettings,
    runtime: tokio::runtime::Runtime,
    tables: Vec<String>,
    threads: usize,
    runner: Option<Arc<dyn ArrayRunner>>,
}

impl fmt::Debug for ArraySession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ArraySession({} devices, tables {:?}, {} threads)",
            self.devices.len(),
            self.tables,
            self.threads
        )
    }
}

impl ArraySession {
    /// A session over the tables of `placements` on `clients` (in partition order,
    /// devices of config `config`), running DataFusion and the device scans on
    /// `threads` host threads. Each device's catalog must hold its stripe as the
    /// placement says (else an error: the array is inconsistent).
    pub fn new(
        mut clients: Vec<Client>,
        config: csd_sim::DeviceConfig,
        settings: ScanSettings,
        threads: usize,
        placements: &[Placement],
    ) -> Result<ArraySession, SqlError> {
        let mut infos: Vec<Vec<TableInfo>> = vec![Vec::new(); placements.len()];
        for (d, client) in clients.iter_mut().enumerate() {
            let cat = Catalog::read(client)?;
            for (t, p) in placements.iter().enumerate() {
                let info = cat
                    .get(&p.name)
                    .filter(|i| {
                        p.device_rows.get(d) == Some(&i.rows)
                            && p.device_pages.get(d) == Some(&i.pages)
                            && i.layout == p.layout
                    })
                    .ok_or_else(|| {
                        HostError::Catalog(format!(
                            "device {d} does not hold table {}'s stripe as the array's manifest \
                             says (was a load interrupted? load the table again)",
                            p.name
                        ))
                    })?;
                infos[t].push(info.clone());
            }
        }
        // At most `threads` member scans at once: the array's host threads.
        let slots = crate::device::ScanSlots::new(threads);
        let devices: Vec<Arc<Device>> = clients
            .into_iter()
            .map(|c| Arc::new(Device::with_slots(c, config.clone(), slots.clone())))
            .collect();
        let logs = devices.iter().map(|_| ScanLog::default()).collect();
        let (ctx, runtime) = new_context(threads)?;
        let mut s = ArraySession {
            ctx,
            devices,
            logs,
            placements: placements.to_vec(),
            infos,
            settings,
            runtime,
            tables: Vec::new(),
            threads: threads.max(1),
            runner: None,
        };
        s.register()?;
        Ok(s)
    }

    /// Hands the session's queries to `runner`: the DataFusion context is built again
    /// with `configure` applied to its state (a distributed planner, its codec and
    /// handlers) and the tables registered in it; planning is as before.
    pub fn distribute(
        &mut self,
        configure: impl FnOnce(SessionStateBuilder) -> SessionStateBuilder,
        runner: Arc<dyn ArrayRunner>,
    ) -> Result<(), SqlError> {
        let (ctx, runtime) = crate::new_context_with(self.threads, configure)?;
        self.ctx = ctx;
        self.runtime = runtime;
        self.tables.clear();
        self.runner = Some(runner);
        self.register()
    }

    /// The session's DataFusion runtime (a distributed runner's transport runs on it).
    pub fn runtime(&self) -> &tokio::runtime::Runtime {
        &self.runtime
    }

    fn register(&mut self) -> Result<(), SqlError> {
        for name in std::mem::take(&mut self.tables) {
            self.ctx
                .deregister_table(name.as_str())
                .map_err(|e| crate::query_error(e, &[]))?;
        }
        for (t, p) in self.placements.iter().enumerate() {
            let parts = self.infos[t]
                .iter()
                .zip(&self.devices)
                .zip(&self.logs)
                .map(|((info, dev), log)| {
                    DeviceTable::new(info.clone(), dev.clone(), self.settings, log.clone())
                })
                .collect();
            self.ctx
                .register_table(
                    p.name.as_str(),
                    Arc::new(ArrayTable {
                        name: p.name.clone(),
                        parts,
                        settings: self.settings,
                    }),
                )
                .map_err(|e| crate::query_error(e, &[]))?;
            self.tables.push(p.name.clone());
        }
        Ok(())
    }

    /// How the scans of the queries that follow run.
    pub fn set_settings(&mut self, settings: ScanSettings) -> Result<(), SqlError> {
        self.settings = settings;
        self.register()
    }

    /// The array's tables.
    pub fn tables(&self) -> &[String] {
        &self.tables
    }

    /// The tables' placements.
    pub fn placements(&self) -> &[Placement] {
        &self.placements
    }

    /// The whole table `name` as one catalog entry (rows and pages of every device;
    /// the first device's extent). A column's distinct values are the sum of the
    /// devices' (exact for a key striped across them, an overestimate for a column
    /// whose values repeat on every device), at most the rows.
    pub fn table_info(&self, name: &str) -> Option<TableInfo> {
        let t = self
            .placements
            .iter()
            .position(|p| csd_host::same_name(&p.name, name))?;
        let members = &self.infos[t];
        let mut info = members.first()?.clone();
        info.rows = self.placements[t].rows;
        info.pages = self.placements[t].pages;
        info.distinct = members
            .iter()
            .try_fold(vec![0u64; info.schema.len()], |mut sum, m| {
                for (s, d) in sum.iter_mut().zip(m.distinct.as_ref()?) {
                    *s = s.saturating_add(*d).min(info.rows);
                }
                Some(sum)
            });
        Some(info)
    }

    /// Host threads of the session.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Plans and runs `sql`; the scans' modeled reports come back per device.
    pub fn run(&self, sql: &str) -> Result<ArrayAnswer, SqlError> {
        for l in &self.logs {
            l.take();
        }
        if let Some(r) = &self.runner {
            return r.run(
                &self.ctx,
                &self.runtime,
                sql,
                &self.tables,
                self.devices.len(),
            );
        }
        let mut answer = execute(&self.ctx, &self.runtime, sql, &self.tables)?;
        let devices: Vec<Vec<ScanRecord>> = self.logs.iter().map(ScanLog::take).collect();
        answer.scans = devices.iter().flatten().cloned().collect();
        Ok(ArrayAnswer {
            answer,
            devices,
            network: None,
        })
    }

    /// [`crate::SqlSession::run_strategies`] on the array: `sql` once per choice, the
    /// rows checked equal.
    pub fn run_strategies(
        &mut self,
        sql: &str,
        choices: &[Choice],
    ) -> Result<Vec<(Choice, ArrayAnswer)>, SqlError> {
        let mut runs = Vec::with_capacity(choices.len());
        let mut check = SameRows::default();
        for &choice in choices {
            self.set_settings(ScanSettings {
                choice,
                ..self.settings
            })?;
            let a = self.run(sql)?;
            self.devices.iter().for_each(|d| d.release_read_pages());
            check.check(choice, &a.answer)?;
            runs.push((choice, a));
        }
        Ok(runs)
    }

    /// Ends the session and gives the devices' clients back (`None` if a plan of this
    /// session is still alive).
    pub fn into_clients(self) -> Option<Vec<Client>> {
        let ArraySession { ctx, devices, .. } = self;
        drop(ctx);
        devices.into_iter().map(Device::into_client).collect()
    }
}

#[cfg(test)]
mod tests;
