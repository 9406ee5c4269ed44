//! `csd.Device`: one device, in memory or on an image file, and what runs on it.
//!
//! A device is in one of three uses at a time, and moves between them on demand:
//! the bare block device (workloads, SMART), a SQL session over its tables, or the
//! key-value store. Moving from one to the next goes through the same objects the CLI
//! uses (`csd_device::stack`, `csd_host::Client`, `csd_sql::SqlSession`,
//! `csd_kv::Store`); leaving the key-value store syncs it and takes a checkpoint first.
//!
//! **Long calls** (workloads, loads, queries, YCSB) run on a worker thread while the
//! calling thread waits without the GIL and checks for signals every 50 ms. Ctrl-C raises
//! `KeyboardInterrupt` at once; the command already under way finishes on the worker
//! thread, as a submitted command finishes on a real device, and its result is dropped.
//! The device stays consistent: every later call on it (closing included) waits for that
//! command first, so nothing ever sees a half-done statement or load. csd's library
//! calls have no cancellation points of their own, which is why the binding abandons the
//! result rather than stopping the work.
//!
//! **Closing** (`close()`, the end of a `with` block, or the object going away) is the
//! CLI's clean shutdown: the key-value store synced, buffered writes committed, a
//! checkpoint marked clean, the image forced to disk. A read-only device writes nothing.

use crate::arrow::from_pyarrow;
use crate::error::{Error, Result};
use crate::report::{Report, load_json};
use crate::sql::SqlResult;
use crate::{json_to_py, py_to_json};
use csd_device::stack::{self, OpenOptions};
use csd_device::workload::{self, Rw, WorkloadSpec};
use csd_device::{BlockDevice, Command, IoTarget, LogPage, NvmeDevice, Payload, RawDevice};
use csd_ftl::FtlConfig;
use csd_host::{Catalog, Client};
use csd_kv::{Interface, Store, StoreConfig};
use csd_sim::{DeviceConfig, SimTime};
use csd_sql::{Choice, ScanSettings, SqlSession};
use csd_table::datagen::{SyntheticGenerator, SyntheticSpec, TpchGenerator, TpchTable};
use csd_table::page::Layout;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the device is being used as.
pub(crate) enum State {
    /// The FTL's block device.
    Block(Box<BlockDevice>),
    /// A SQL session over its tables.
    Sql(Box<SqlSession>),
    /// The key-value store.
    Kv(Box<Store<Client>>),
    /// Closed (or lost to a failure while moving between uses).
    Closed,
}

/// A device and how it was opened; shared by the `Device` and its `KeyValue` handles.
pub(crate) struct Inner {
    pub(crate) state: State,
    pub(crate) config: DeviceConfig,
    pub(crate) image: Option<PathBuf>,
    pub(crate) read_only: bool,
    /// The key-value store's parameters, when it was opened.
    pub(crate) kv: Option<StoreConfig>,
}

impl Inner {
    /// The block device, whatever the device was used as (the SQL session ends; the
    /// key-value store is synced and checkpointed first). `Closed` is left behind.
    fn take_block(&mut self) -> Result<BlockDevice> {
        match std::mem::replace(&mut self.state, State::Closed) {
            State::Block(d) => Ok(*d),
            State::Sql(s) => match s.into_client() {
                Some(c) => Ok(c.into_device().into_block()),
                None => Err(Error::Invalid(
                    "a query plan still holds the device (this is a bug)".into(),
                )),
            },
            State::Kv(mut store) => {
                let synced = if self.read_only {
                    Ok(())
                } else {
                    store.sync().and_then(|_| store.checkpoint())
                };
                let dev = store.into_device().into_device().into_block();
                match synced {
                    Ok(()) => Ok(dev),
                    Err(e) => {
                        self.state = State::Block(Box::new(dev));
                        Err(e.into())
                    }
                }
            }
            State::Closed => Err(Error::Closed),
        }
    }

    /// The block device.
    pub(crate) fn block(&mut self) -> Result<&mut BlockDevice> {
        if !matches!(self.state, State::Block(_)) {
            let d = self.take_block()?;
            self.state = State::Block(Box::new(d));
        }
        match &mut self.state {
            State::Block(d) => Ok(d),
            _ => Err(Error::Closed),
        }
    }

    /// The SQL session over the device's tables (opened on first use; its catalog is
    /// read first, so a device whose catalog cannot be read stays usable otherwise).
    pub(crate) fn session(&mut self) -> Result<&mut SqlSession> {
        if !matches!(self.state, State::Sql(_)) {
            let dev = self.take_block()?;
            let mut client = Client::new(NvmeDevice::from_block(dev))?;
            let catalog = match Catalog::read(&mut client) {
                Ok(c) => c,
                Err(e) => {
                    self.state = State::Block(Box::new(client.into_device().into_block()));
                    return Err(e.into());
                }
            };
            let s = SqlSession::with_tables(
                client,
                self.config.clone(),
                ScanSettings::new(Choice::Auto),
                catalog.tables,
            )?;
            self.state = State::Sql(Box::new(s));
        }
        match &mut self.state {
            State::Sql(s) => Ok(s),
            _ => Err(Error::Closed),
        }
    }

    /// The key-value store (opened, or formatted on an empty device, on first use with
    /// the parameters last given to `Device.kv`).
    pub(crate) fn store(&mut self) -> Result<&mut Store<Client>> {
        if !matches!(self.state, State::Kv(_)) {
            let cfg = self.kv.clone().unwrap_or_default();
            let dev = self.take_block()?;
            let client = Client::new(NvmeDevice::from_block(dev))?;
            match Store::open(client, cfg) {
                Ok(s) => self.state = State::Kv(Box::new(s)),
                Err(f) => {
                    let f = *f;
                    self.state = State::Block(Box::new(f.dev.into_device().into_block()));
                    return Err(f.error.into());
                }
            }
        }
        match &mut self.state {
            State::Kv(s) => Ok(s),
            _ => Err(Error::Closed),
        }
    }

    /// Clean shutdown (see the module documentation); closing twice is fine.
    pub(crate) fn close(&mut self) -> Result<()> {
        if matches!(self.state, State::Closed) {
            return Ok(());
        }
        let mut dev = self.take_block()?;
        if self.image.is_some() {
            stack::close(&mut dev)?;
        }
        Ok(())
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // A device dropped without close() is closed cleanly as well; nothing to report
        // it to but stderr (as the CLI does).
        if let Err(e) = self.close() {
            eprintln!("csd: closing the device: {e}");
        }
    }
}

/// Runs `f` on the device on a worker thread while this thread waits without the GIL,
/// checking for Ctrl-C (see the module documentation).
pub(crate) fn interruptible<T: Send + 'static>(
    py: Python<'_>,
    inner: &Arc<Mutex<Inner>>,
    f: impl FnOnce(&mut Inner) -> Result<T> + Send + 'static,
) -> PyResult<T> {
    let inner = inner.clone();
    on_worker(py, move || match inner.lock() {
        Ok(mut g) => f(&mut g),
        Err(_) => Err(Error::Panicked("an earlier call failed".into())),
    })
}

/// Runs `f` on a worker thread while this thread waits without the GIL, checking for
/// signals every 50 ms: Ctrl-C raises `KeyboardInterrupt` at once and the worker's
/// result, when it comes, is dropped.
pub(crate) fn on_worker<T: Send + 'static>(
    py: Python<'_>,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> PyResult<T> {
    let (tx, rx) = channel();
    std::thread::Builder::new()
        .name("csd-call".into())
        .spawn(move || {
            // The caller may have gone (Ctrl-C): the result is dropped.
            let _ = tx.send(f());
        })
        .map_err(|e| Error::Invalid(format!("starting a worker thread: {e}")))?;
    let mut rx = rx;
    loop {
        // (The receiver is not Sync: it moves into the GIL-free section and back.)
        let (got, back) = py.detach(move || (rx.recv_timeout(Duration::from_millis(50)), rx));
        rx = back;
        match got {
            Ok(r) => return r.map_err(PyErr::from),
            Err(RecvTimeoutError::Timeout) => py.check_signals()?,
            Err(RecvTimeoutError::Disconnected) => {
                return Err(Error::Panicked("the call panicked".into()).into());
            }
        }
    }
}

/// Runs a short call on the device without the GIL.
pub(crate) fn short<T: Send>(
    py: Python<'_>,
    inner: &Arc<Mutex<Inner>>,
    f: impl FnOnce(&mut Inner) -> Result<T> + Send,
) -> PyResult<T> {
    py.detach(|| match inner.lock() {
        Ok(mut g) => f(&mut g),
        Err(_) => Err(Error::Panicked("an earlier call failed".into())),
    })
    .map_err(PyErr::from)
}

/// The device config a preset name or a config dict names, with `overrides`
/// (`{"channel.rate_mt_s": 400}`, csd's `--set`) applied and the result validated.
pub(crate) fn load_config(
    preset: Option<&str>,
    config: Option<&Bound<'_, PyDict>>,
    overrides: Option<&Bound<'_, PyDict>>,
) -> PyResult<DeviceConfig> {
    let text = match (config, preset) {
        (Some(d), _) => {
            let v = py_to_json(d.as_any())?;
            let t = toml::Value::try_from(v)
                .map_err(|e| Error::Invalid(format!("config dict: {e}")))?;
            toml::to_string(&t).map_err(|e| Error::Invalid(format!("config dict: {e}")))?
        }
        (None, p) => DeviceConfig::preset_toml(p.unwrap_or(csd_sim::config::DEFAULT_PRESET))
            .map_err(Error::from)?
            .to_string(),
    };
    let mut sets = Vec::new();
    if let Some(o) = overrides {
        for (k, v) in o.iter() {
            let key: String = k.extract()?;
            let value = match py_to_json(&v)? {
                Value::String(s) => serde_json::to_string(&s).unwrap_or(s),
                other => other.to_string(),
            };
            sets.push(format!("{key}={value}"));
        }
    }
    Ok(DeviceConfig::from_toml_with_overrides(&text, &sets).map_err(Error::from)?)
}

pub(crate) fn layout(s: &str) -> Result<Layout> {
    match s.to_ascii_lowercase().as_str() {
        "nsm" => Ok(Layout::Nsm),
        "pax" => Ok(Layout::Pax),
        _ => Err(Error::Invalid(format!("layout `{s}`: use nsm or pax"))),
    }
}

/// One device: in memory or on an image file. Made by `csd.create`, `csd.open` or
/// `csd.memory`; a context manager that closes the device at the end of the block.
#[pyclass(module = "csd._csd", name = "Device")]
pub struct Device {
    pub(crate) inner: Arc<Mutex<Inner>>,
    name: String,
    image: Option<PathBuf>,
    read_only: bool,
}

impl Device {
    pub(crate) fn new(
        dev: BlockDevice,
        config: DeviceConfig,
        image: Option<PathBuf>,
        read_only: bool,
    ) -> Device {
        Device {
            name: config.name.clone(),
            image: image.clone(),
            read_only,
            inner: Arc::new(Mutex::new(Inner {
                state: State::Block(Box::new(dev)),
                config,
                image,
                read_only,
                kv: None,
            })),
        }
    }
}

#[pymethods]
impl Device {
    /// The device config's name (a preset's name unless a config dict renamed it).
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The image file (`None` in memory).
    #[getter]
    fn image(&self) -> Option<PathBuf> {
        self.image.clone()
    }

    /// Whether the device was opened read-only.
    #[getter]
    fn read_only(&self) -> bool {
        self.read_only
    }

    /// Whether the device is closed.
    #[getter]
    fn closed(&self, py: Python<'_>) -> PyResult<bool> {
        short(py, &self.inner, |i| Ok(matches!(i.state, State::Closed)))
    }

    /// The device config as a dict (what `csd config show` prints as TOML).
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let cfg = short(py, &self.inner, |i| Ok(i.config.clone()))?;
        let v = serde_json::to_value(&cfg).map_err(|e| Error::Invalid(e.to_string()))?;
        json_to_py(py, &v)
    }

    /// Geometry, capacity and FTL figures as a dict.
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let v = short(py, &self.inner, |i| {
            let image = i.image.as_ref().map(|p| p.display().to_string());
            let read_only = i.read_only;
            let c = i.config.clone();
            let b = i.block()?;
            let f = b.ftl();
            let g = c.geometry;
            let mut v = json!({
                "device": c.name,
                "description": c.description,
                "image": image,
                "read_only": read_only,
                "channels": g.channels, "ways": g.ways, "dies_per_chip": g.dies_per_chip,
                "planes_per_die": g.planes_per_die, "blocks_per_plane": g.blocks_per_plane,
                "pages_per_block": g.pages_per_block, "page_size_bytes": g.page_size,
                "sector_size_bytes": g.sector_size,
                "raw_capacity_bytes": g.raw_capacity(),
                "blocks": g.total_blocks(),
                "lbas": f.lbas(),
                "lba_size_bytes": f.lba_size(),
                "logical_capacity_bytes": f.lbas() * f.lba_size() as u64,
            });
            v["op"] = json!(f.config().op);
            Ok(v)
        })?;
        json_to_py(py, &v)
    }

    /// The NVMe SMART / health log (with the batch-io paper's amplification figures),
    /// read through the command interface (GET LOG PAGE), as a dict.
    fn smart<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let v = short(py, &self.inner, |i| {
            let dev = i.take_block()?;
            let mut n = NvmeDevice::from_block(dev);
            let log = smart_log(&mut n);
            i.state = State::Block(Box::new(n.into_block()));
            serde_json::to_value(log?).map_err(|e| Error::Invalid(e.to_string()))
        })?;
        json_to_py(py, &v)
    }

    /// Runs an fio-style workload on the FTL's block device (`csd io --mode block`) and
    /// returns its report: IOPS, bandwidth, latency percentiles, utilization per
    /// resource, energy, wall-clock speed. `precondition=True` first writes the region
    /// once sequentially and overwrites it once at random (`csd io --precondition`), so
    /// that reads hit programmed pages and garbage collection is in steady state; only
    /// the measured run is reported.
    #[pyo3(signature = (rw="randread", *, bs=4096, iodepth=32, ops=None, runtime_s=None,
        size=None, rwmixread=70, seed=1, dist="uniform", batch=0, precondition=false,
        time_model="events"))]
    #[allow(clippy::too_many_arguments)]
    fn io(
        &self,
        py: Python<'_>,
        rw: &str,
        bs: u64,
        iodepth: u32,
        ops: Option<u64>,
        runtime_s: Option<f64>,
        size: Option<u64>,
        rwmixread: u32,
        seed: u64,
        dist: &str,
        batch: u32,
        precondition: bool,
        time_model: &str,
    ) -> PyResult<Report> {
        let spec = io_spec(
            rw, bs, iodepth, ops, runtime_s, size, rwmixread, seed, dist, batch, time_model,
        )?;
        interruptible(py, &self.inner, move |i| {
            if i.read_only && (precondition || writes(&spec)) {
                return Err(Error::Invalid(
                    "the device is open read-only: only read and randread run on it, \
                     without precondition"
                        .into(),
                ));
            }
            let b = i.block()?;
            run_io(b, &spec, precondition, true)
        })
    }

    /// Loads TPC-H tables (tpchgen, with the smart-ssd paper's transformations) onto
    /// the device, as `csd load tpch`; one load report per table.
    #[pyo3(signature = (sf=0.01, tables="lineitem", *, layout="pax"))]
    fn load_tpch(
        &self,
        py: Python<'_>,
        sf: f64,
        tables: &str,
        layout: &str,
    ) -> PyResult<Vec<Report>> {
        let layout = self::layout(layout)?;
        let wanted = tpch_tables(tables)?;
        interruptible(py, &self.inner, move |i| {
            let mut out = Vec::new();
            for t in wanted {
                let g = TpchGenerator::new(t, sf).map_err(|e| Error::Invalid(e.to_string()))?;
                out.push(load_rows(i, t.name(), g, layout)?);
            }
            Ok(out)
        })
    }

    /// Loads a SyntheticN table (N int32 columns; `c1 < v` selects a chosen
    /// fraction), as `csd load synthetic`.
    #[pyo3(signature = (columns=16, rows=100_000, *, seed=1, name=None, layout="pax"))]
    fn load_synthetic(
        &self,
        py: Python<'_>,
        columns: usize,
        rows: u64,
        seed: u64,
        name: Option<String>,
        layout: &str,
    ) -> PyResult<Report> {
        let layout = self::layout(layout)?;
        let spec =
            SyntheticSpec::new(columns, rows, seed).map_err(|e| Error::Invalid(e.to_string()))?;
        let name = name.unwrap_or_else(|| format!("synthetic{columns}"));
        interruptible(py, &self.inner, move |i| {
            let g = SyntheticGenerator::new(spec).map_err(|e| Error::Invalid(e.to_string()))?;
            load_rows(i, &name, g, layout)
        })
    }

    /// Loads `data` as table `table` (replacing a table of that name): a pyarrow
    /// Table / RecordBatch / RecordBatchReader (a pandas DataFrame is converted by the
    /// `csd` package first), or the path of a Parquet or CSV file (`.csv`, `.tsv`,
    /// `.txt` are CSV). The data is converted completely before the device is touched,
    /// so a bad type or value writes nothing (csd_sql::import's type mapping).
    #[pyo3(signature = (table, data, *, layout="pax", float_scale=None, header=true, delimiter=","))]
    #[allow(clippy::too_many_arguments)]
    fn load(
        &self,
        py: Python<'_>,
        table: String,
        data: &Bound<'_, PyAny>,
        layout: &str,
        float_scale: Option<u8>,
        header: bool,
        delimiter: &str,
    ) -> PyResult<Report> {
        let layout = self::layout(layout)?;
        let rows = rows_from(py, &table, data, float_scale, header, delimiter)?;
        interruptible(py, &self.inner, move |i| load_rows(i, &table, rows, layout))
    }

    /// The tables on the device: name, rows, pages, layout, columns (`csd tables`).
    fn tables<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let v = short(py, &self.inner, |i| {
            let s = i.session()?;
            Ok(s.catalog()
                .iter()
                .map(|t| {
                    json!({
                        "name": t.name, "rows": t.rows, "pages": t.pages,
                        "layout": t.layout.to_string(), "bytes": t.bytes(),
                        "row_bytes": t.schema.row_width(),
                        "columns": t.schema.columns().iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
                        "index": t.index.as_ref().map(|x| x.name.clone()),
                    })
                })
                .collect::<Vec<_>>())
        })?;
        let out = PyList::empty(py);
        for t in &v {
            out.append(json_to_py(py, t)?)?;
        }
        Ok(out)
    }

    /// Runs one SQL statement over the device's tables through DataFusion (`csd
    /// query`): SELECT (`q1` … `q22` stand for the TPC-H queries), INSERT / UPDATE /
    /// DELETE (the device must be writable), CREATE / DROP INDEX. `strategy` says where
    /// scans run: `auto` (per scan, from the analytic model), `ihp`, `cpu-isp`,
    /// `hw-isp`, or `all` (the three in turn; their results must agree).
    /// `time_model="events"` runs each scan on the event core (`csd query --time-model
    /// events`): every report then has `event_core`, the core's counters.
    #[pyo3(signature = (query, *, strategy="auto", aggregate_pushdown=true, use_index=true,
        queue_depth=32, time_model="events"))]
    #[allow(clippy::too_many_arguments)]
    fn sql(
        &self,
        py: Python<'_>,
        query: String,
        strategy: &str,
        aggregate_pushdown: bool,
        use_index: bool,
        queue_depth: usize,
        time_model: &str,
    ) -> PyResult<SqlResult> {
        let choices = parse_choices(strategy)?;
        let time_model = parse_time_model(time_model)?;
        let sql = csd_sql::tpch::expand(&query).to_string();
        interruptible(py, &self.inner, move |i| {
            let s = i.session()?;
            let mut settings = s.settings();
            settings.aggregate_pushdown = aggregate_pushdown;
            settings.options.use_index = use_index;
            settings.options.queue_depth = queue_depth.max(1);
            settings.options.time_model = time_model;
            s.set_settings(settings)?;
            let runs = s.run_strategies(&sql, &choices)?;
            Ok(SqlResult::new(sql, runs))
        })
    }

    /// The key-value store of the batch-io paper on this device, over the `batch`
    /// interface (log structuring in the device) or the `block` interface (host log
    /// structuring). An empty device is formatted for it.
    #[pyo3(signature = (interface="batch", *, cache_pages=None, queue_depth=64))]
    fn kv(
        &self,
        py: Python<'_>,
        interface: &str,
        cache_pages: Option<usize>,
        queue_depth: usize,
    ) -> PyResult<crate::kv::KeyValue> {
        let interface: Interface = interface.parse().map_err(Error::Invalid)?;
        let cfg = StoreConfig {
            interface,
            cache_pages,
            queue_depth: queue_depth.max(1),
            create: !self.read_only,
            ..StoreConfig::default()
        };
        let keep = cfg.clone();
        interruptible(py, &self.inner, move |i| {
            if i.kv.as_ref() != Some(&keep) && matches!(i.state, State::Kv(_)) {
                // Another store configuration: close the open one first.
                i.block()?;
            }
            i.kv = Some(keep);
            i.store().map(|_| ())
        })?;
        Ok(crate::kv::KeyValue::new(self.inner.clone(), cfg))
    }

    /// Closes the device cleanly (see the module documentation). Closing twice is fine.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        short(py, &self.inner, |i| i.close())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        match &self.image {
            Some(p) => format!(
                "csd.Device({}, image={}{})",
                self.name,
                p.display(),
                if self.read_only { ", read-only" } else { "" }
            ),
            None => format!("csd.Device({}, in memory)", self.name),
        }
    }
}

/// Loads rows into table `name` through the SQL session's client, then reads the
/// catalog again so that queries see the table.
fn load_rows(
    i: &mut Inner,
    name: &str,
    source: impl csd_table::datagen::RowSource,
    layout: Layout,
) -> Result<Report> {
    if i.read_only {
        return Err(Error::Invalid(
            "the device is open read-only: open it read-write to load tables".into(),
        ));
    }
    let s = i.session()?;
    let r = {
        let mut client = s.device().lock();
        Catalog::load(&mut *client, name, source, layout, &mut |_| {})
    };
    s.reload()?;
    Ok(Report::new("load", load_json(&r?)))
}

/// The TPC-H tables a comma-separated list names.
pub(crate) fn tpch_tables(list: &str) -> Result<Vec<TpchTable>> {
    let mut wanted = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let t = TpchTable::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "unknown TPC-H table `{name}`; use {}",
                    TpchTable::ALL.map(|t| t.name()).join(", ")
                ))
            })?;
        wanted.push(t);
    }
    Ok(wanted)
}

/// The strategy choices `strategy` names (`all`: ihp, cpu-isp and hw-isp in turn).
pub(crate) fn parse_choices(strategy: &str) -> Result<Vec<Choice>> {
    if strategy == "all" {
        return Ok(["ihp", "cpu-isp", "hw-isp"]
            .iter()
            .filter_map(|s| Choice::parse(s))
            .collect());
    }
    Ok(vec![Choice::parse(strategy).ok_or_else(|| {
        Error::Invalid(format!(
            "strategy `{strategy}`: use auto, ihp, cpu-isp, hw-isp or all"
        ))
    })?])
}

/// `data` (a pyarrow table, batch or reader, or a Parquet / CSV path) converted into
/// table `table`'s device rows, completely, before any device is touched.
pub(crate) fn rows_from(
    py: Python<'_>,
    table: &str,
    data: &Bound<'_, PyAny>,
    float_scale: Option<u8>,
    header: bool,
    delimiter: &str,
) -> PyResult<csd_sql::import::RowImages> {
    csd_host::check_table_name(table).map_err(Error::from)?;
    let delimiter = match delimiter {
        "\\t" | "\t" | "tab" => b'\t',
        d if d.len() == 1 && d.is_ascii() => d.as_bytes()[0],
        d => {
            return Err(Error::Invalid(format!(
                "delimiter `{d}`: give one ASCII character (or \\t for a tab)"
            ))
            .into());
        }
    };
    let opts = csd_sql::import::ImportOptions {
        float_scale,
        header: Some(header),
        delimiter,
        csv_decimal: true,
    };
    let path: Option<PathBuf> = data.extract().ok();
    let rows = match path {
        Some(p) => {
            let csv = matches!(
                p.extension()
                    .and_then(|e| e.to_str())
                    .map(str::to_ascii_lowercase)
                    .as_deref(),
                Some("csv" | "tsv" | "txt")
            );
            py.detach(|| csd_sql::import::import_file(&p, table, csv, &opts))
                .map_err(Error::from)?
        }
        None => {
            let (schema, batches) = from_pyarrow(data)?;
            py.detach(|| {
                csd_sql::import::to_rows(
                    table,
                    &schema,
                    &batches,
                    &opts,
                    false,
                    Path::new("<arrow data>"),
                )
            })
            .map_err(Error::from)?
        }
    };
    Ok(rows)
}

/// Whether a workload writes.
fn writes(spec: &WorkloadSpec) -> bool {
    !matches!(spec.rw, Rw::Read | Rw::RandRead)
}

/// A workload from `io()`'s arguments (200,000 operations unless `ops` or `runtime_s`
/// says otherwise, as `csd io`).
#[allow(clippy::too_many_arguments)]
fn io_spec(
    rw: &str,
    bs: u64,
    iodepth: u32,
    ops: Option<u64>,
    runtime_s: Option<f64>,
    size: Option<u64>,
    rwmixread: u32,
    seed: u64,
    dist: &str,
    batch: u32,
    time_model: &str,
) -> Result<WorkloadSpec> {
    let time_model = parse_time_model(time_model)?;
    let rw = Rw::parse(rw).ok_or_else(|| {
        Error::Invalid(format!(
            "rw `{rw}`: use read, write, randread, randwrite or randrw"
        ))
    })?;
    let dist = csd_sim::dist::Dist::parse(dist).map_err(Error::Invalid)?;
    if let Some(t) = runtime_s
        && !(t.is_finite() && t > 0.0)
    {
        return Err(Error::Invalid(format!(
            "runtime_s {t}: give a positive number of modeled seconds"
        )));
    }
    Ok(WorkloadSpec {
        rw,
        rwmixread,
        bs,
        size,
        iodepth,
        ops: if ops.is_none() && runtime_s.is_none() {
            Some(200_000)
        } else {
            ops
        },
        runtime_ns: runtime_s.map(|s| (s * 1e9) as u64),
        seed,
        dist,
        batch,
        time_model,
        ..WorkloadSpec::default()
    })
}

/// Preconditions (if asked: `steady_state` on the block device) and runs `spec`.
fn run_io(
    dev: &mut dyn IoTarget,
    spec: &WorkloadSpec,
    precondition: bool,
    steady_state: bool,
) -> Result<Report> {
    if precondition {
        for p in workload::precondition_plan(dev, spec.bs, spec.size, spec.seed, steady_state) {
            workload::run(dev, &p, &mut |_| {})?;
        }
    }
    let r = workload::run(dev, spec, &mut |_| {})?;
    Ok(Report::new("io", r.to_json()))
}

/// `csd.raw_io(path=None, preset=None, rw="randread", ...)`: an fio-style workload on
/// the raw flash array, page by page with no FTL (`csd io --mode raw`), in memory (a
/// fresh device of `preset` / `config`, `tiny` by default) or on an image's media.
///
/// An image is opened read-only when the run only reads. Raw page writes and block
/// erases destroy what an image holds (its FTL and the data stored through it), so a
/// writing run (or `precondition=True`) on an image whose blocks hold data is refused
/// with nothing written, unless `force=True`. An image carries its own config:
/// `preset`, `config` and `overrides` go with in-memory runs only.
#[pyfunction]
#[pyo3(signature = (path=None, preset=None, *, config=None, overrides=None, rw="randread",
    bs=4096, iodepth=32, ops=None, runtime_s=None, size=None, rwmixread=70, seed=1,
    dist="uniform", precondition=false, force=false, time_model="events"))]
#[allow(clippy::too_many_arguments)]
pub fn raw_io(
    py: Python<'_>,
    path: Option<PathBuf>,
    preset: Option<&str>,
    config: Option<&Bound<'_, PyDict>>,
    overrides: Option<&Bound<'_, PyDict>>,
    rw: &str,
    bs: u64,
    iodepth: u32,
    ops: Option<u64>,
    runtime_s: Option<f64>,
    size: Option<u64>,
    rwmixread: u32,
    seed: u64,
    dist: &str,
    precondition: bool,
    force: bool,
    time_model: &str,
) -> PyResult<Report> {
    let spec = io_spec(
        rw, bs, iodepth, ops, runtime_s, size, rwmixread, seed, dist, 0, time_model,
    )?;
    let write = precondition || writes(&spec);
    let nand = match &path {
        None => {
            if force {
                return Err(Error::Invalid(
                    "force applies to raw writes on an image (give a path)".into(),
                )
                .into());
            }
            let cfg = load_config(preset.or(Some("tiny")), config, overrides)?;
            py.detach(move || csd_nand::Nand::new_in_memory(cfg))
                .map_err(Error::from)?
        }
        Some(p) => {
            if preset.is_some() || config.is_some() || overrides.is_some() {
                return Err(Error::Invalid(format!(
                    "{}: an image carries its own config; preset, config and overrides \
                     go with in-memory runs (no path)",
                    p.display()
                ))
                .into());
            }
            let opts = if write {
                OpenOptions::read_write()
            } else {
                OpenOptions::read_only()
            };
            let p = p.clone();
            py.detach(move || -> Result<csd_nand::Nand> {
                let nand = stack::open_media(&p, &opts)?;
                let written = stack::written_blocks(&nand);
                if write && written > 0 && !force {
                    return Err(Error::Invalid(format!(
                        "refusing raw-mode writes on {}: {written} of its blocks hold data \
                         (its FTL's metadata and the data stored through it), which raw page \
                         writes and block erases would destroy; nothing was written. Run raw \
                         writes in memory (no path) or on a new image, read it with \
                         rw=\"read\" or \"randread\", or pass force=True to overwrite it",
                        p.display()
                    )));
                }
                Ok(nand)
            })?
        }
    };
    on_worker(py, move || {
        let mut dev = RawDevice::new(nand);
        let r = run_io(&mut dev, &spec, precondition, false)?;
        if path.is_some() && write {
            dev.nand_mut().sync()?;
        }
        Ok(r)
    })
}

/// The SMART log page through GET LOG PAGE.
fn smart_log(dev: &mut NvmeDevice) -> Result<csd_device::SmartLog> {
    let bad = |m: String| Error::Invalid(format!("SMART log page: {m}"));
    let q = dev.create_queue_pair(4).map_err(|s| bad(s.to_string()))?;
    dev.submit(q, Command::GetLogPage(LogPage::Smart), SimTime::ZERO)
        .map_err(|s| bad(s.to_string()))?;
    dev.process();
    let c = dev.poll(q).ok_or_else(|| bad("no completion".into()))?;
    let out = match c.payload {
        Payload::Smart(log) => Ok(log),
        _ => Err(bad(format!("failed: {}", c.status))),
    };
    // Queue pairs are few; give this one back (a failure to do so changes nothing).
    let _ = dev.delete_queue_pair(q);
    out
}

/// `csd.create(path, preset=..., config=..., overrides=..., op=0.07, ext_bytes=0)`:
/// a new image file holding a fresh device with a formatted FTL (`csd device create`).
#[pyfunction]
#[pyo3(signature = (path, preset=None, *, config=None, overrides=None, op=0.07, ext_bytes=0))]
pub fn create(
    py: Python<'_>,
    path: PathBuf,
    preset: Option<&str>,
    config: Option<&Bound<'_, PyDict>>,
    overrides: Option<&Bound<'_, PyDict>>,
    op: f64,
    ext_bytes: u32,
) -> PyResult<Device> {
    let cfg = load_config(preset, config, overrides)?;
    let ftl = FtlConfig {
        op,
        ext_bytes,
        ..FtlConfig::default()
    };
    let c = cfg.clone();
    let p = path.clone();
    let dev = py
        .detach(move || stack::create_image(&p, c, ftl))
        .map_err(Error::from)?;
    Ok(Device::new(dev, cfg, Some(path), false))
}

/// `csd.open(path, read_only=False)`: an existing image. Read-only opens take a shared
/// lock and a copy-on-write mapping (even a recovery is replayed in memory only), so
/// the file keeps every byte.
#[pyfunction]
#[pyo3(signature = (path, *, read_only=false))]
pub fn open(py: Python<'_>, path: PathBuf, read_only: bool) -> PyResult<Device> {
    let opts = if read_only {
        OpenOptions::read_only()
    } else {
        OpenOptions::read_write()
    };
    let p = path.clone();
    let (dev, rep) = py
        .detach(move || stack::open_image(&p, &opts))
        .map_err(Error::from)?;
    if let Some(n) = rep.notice(&path) {
        // Not routine (a recovery after a crash): Python's warnings show it.
        let warnings = py.import("warnings")?;
        warnings.call_method1("warn", (n,))?;
    }
    let cfg = dev.ftl().nand().config().clone();
    Ok(Device::new(dev, cfg, Some(path), read_only))
}

/// `csd.memory(preset="tiny", config=None, overrides=None, op=0.07)`: a device in
/// memory (nothing is kept when it is closed).
#[pyfunction]
#[pyo3(signature = (preset=None, *, config=None, overrides=None, op=0.07, ext_bytes=0))]
pub fn memory(
    py: Python<'_>,
    preset: Option<&str>,
    config: Option<&Bound<'_, PyDict>>,
    overrides: Option<&Bound<'_, PyDict>>,
    op: f64,
    ext_bytes: u32,
) -> PyResult<Device> {
    let cfg = load_config(preset.or(Some("tiny")), config, overrides)?;
    let ftl = FtlConfig {
        op,
        ext_bytes,
        ..FtlConfig::default()
    };
    let c = cfg.clone();
    let dev = py
        .detach(move || stack::in_memory(c, ftl))
        .map_err(Error::from)?;
    Ok(Device::new(dev, cfg, None, false))
}

/// The names of the built-in device presets.
#[pyfunction]
pub fn presets() -> Vec<&'static str> {
    csd_sim::config::PRESETS.iter().map(|(n, _)| *n).collect()
}

/// A preset's (or config dict's) device config as a dict, overrides applied and
/// validated (`csd config show`).
#[pyfunction]
#[pyo3(signature = (preset=None, *, config=None, overrides=None))]
pub fn device_config<'py>(
    py: Python<'py>,
    preset: Option<&str>,
    config: Option<&Bound<'py, PyDict>>,
    overrides: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let cfg = load_config(preset, config, overrides)?;
    let v = serde_json::to_value(&cfg).map_err(|e| Error::Invalid(e.to_string()))?;
    json_to_py(py, &v)
}

/// A `time_model` argument: `calendar` or `events`.
pub(crate) fn parse_time_model(s: &str) -> Result<csd_sim::events::TimeModel> {
    csd_sim::events::TimeModel::parse(s)
        .ok_or_else(|| Error::Invalid(format!("time_model `{s}`: use calendar or events")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_parse() {
        assert!(matches!(layout("PAX"), Ok(Layout::Pax)));
        assert!(matches!(layout("nsm"), Ok(Layout::Nsm)));
        assert!(layout("row").is_err());
    }

    /// The block device survives moving through the SQL session and back.
    #[test]
    fn uses_move_and_close() {
        let cfg = DeviceConfig::preset("tiny").unwrap();
        let dev = stack::in_memory(cfg.clone(), FtlConfig::default()).unwrap();
        let mut i = Inner {
            state: State::Block(Box::new(dev)),
            config: cfg,
            image: None,
            read_only: false,
            kv: None,
        };
        assert!(i.session().unwrap().tables().is_empty());
        let lbas = i.block().unwrap().ftl().lbas();
        assert!(lbas > 0);
        i.close().unwrap();
        assert!(matches!(i.block(), Err(Error::Closed)));
    }
}
