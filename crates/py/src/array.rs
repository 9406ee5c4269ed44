//! `csd.Array`: an array of smart SSDs (smart-ssd-query-processing §4.3) as
//! `csd array create` and `csd load|query --array DIR` build and query it — a table's
//! pages striped across N device images listed in the array's manifest
//! (`csd-array.toml`, [`csd_sql::array`]), one DataFusion partition per device, the
//! device scans in parallel on host threads.
//!
//! Loads open every device read-write, stripe the table over them, record the
//! placement in the manifest and close the devices cleanly (the CLI's `csd load
//! --array`). Queries open the devices read-only, as `csd query --array`, and keep that
//! session for the queries that follow until the next load. An array whose manifest
//! lists workers (`csd worker`) runs its scans in this process here, as
//! `csd query --array DIR --in-process` does.

use crate::device::{layout, load_config, on_worker, parse_choices, parse_time_model, rows_from};
use crate::error::{Error, Result};
use crate::json_to_py;
use crate::report::{Report, load_json};
use crate::sql::SqlResult;
use csd_device::NvmeDevice;
use csd_device::stack::{self, OpenOptions};
use csd_ftl::FtlConfig;
use csd_host::{Client, LoadReport};
use csd_sql::array::{Manifest, load_striped};
use csd_sql::{ArraySession, Choice, ScanSettings};
use csd_table::datagen::{RowSource, SyntheticGenerator, SyntheticSpec, TpchGenerator};
use csd_table::page::Layout;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Devices an array may have (as `csd array create`).
const MAX_DEVICES: usize = 64;

/// The open read-only session of an array, kept between queries.
struct Open {
    session: ArraySession,
}

/// An array of devices in a directory. Made by `csd.create_array` or `csd.open_array`.
#[pyclass(module = "csd._csd", name = "Array")]
pub struct Array {
    dir: PathBuf,
    state: Arc<Mutex<Option<Open>>>,
}

fn lock(state: &Mutex<Option<Open>>) -> Result<std::sync::MutexGuard<'_, Option<Open>>> {
    state
        .lock()
        .map_err(|_| Error::Panicked("an earlier call on the array failed".into()))
}

/// Loads `source` as table `name` striped over the array in `dir` (every device opened
/// read-write and closed cleanly afterwards; the manifest records the placement).
fn load_into(
    dir: &Path,
    name: &str,
    source: impl RowSource,
    layout: Layout,
    stripe_pages: u64,
) -> Result<LoadReport> {
    if stripe_pages == 0 {
        return Err(Error::Invalid(
            "stripe_pages 0: a stripe unit is at least one page".into(),
        ));
    }
    let mut manifest = Manifest::read(dir)?;
    let mut clients = Vec::with_capacity(manifest.devices.len());
    for p in manifest.device_paths(dir) {
        let (dev, _) = stack::open_image(&p, &OpenOptions::read_write())?;
        clients.push(Client::new(NvmeDevice::from_block(dev))?);
    }
    let wall = std::time::Instant::now();
    let loaded = load_striped(&mut clients, name, source, layout, stripe_pages, &|_| {});
    // Every device is closed cleanly, whether the load went through or not.
    let mut closed = Ok(());
    for c in clients {
        let mut b = c.into_device().into_block();
        if let Err(e) = stack::close(&mut b) {
            closed = closed.and(Err(e));
        }
    }
    let (reports, placement) = loaded?;
    closed?;
    manifest.put(placement.clone());
    manifest.write(dir)?;
    let first = reports
        .first()
        .ok_or_else(|| Error::Invalid("the array has no devices".into()))?;
    let mut table = first.table.clone();
    table.rows = placement.rows;
    table.pages = placement.pages;
    Ok(LoadReport {
        table,
        replaced: first.replaced.clone(),
        wall_s: wall.elapsed().as_secs_f64(),
        modeled_s: reports.iter().map(|r| r.modeled_s).fold(0.0, f64::max),
    })
}

/// The array in `dir` opened read-only for queries, on `threads` host threads.
fn open_session(dir: &Path, threads: usize) -> Result<Open> {
    let manifest = Manifest::read(dir)?;
    let (clients, cfg) = csd_sql::array::open_clients(&manifest, dir, |p| {
        Ok::<_, Error>(stack::open_image(p, &OpenOptions::read_only())?.0)
    })?;
    let session = ArraySession::new(
        clients,
        cfg,
        ScanSettings::new(Choice::Auto),
        threads,
        &manifest.tables,
    )?;
    Ok(Open { session })
}

impl Array {
    /// Runs a load on a worker thread (the query session, if open, is ended first:
    /// its read-only opens would keep the images from being opened read-write).
    fn load_with(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Path) -> Result<LoadReport> + Send + 'static,
    ) -> PyResult<Report> {
        let state = self.state.clone();
        let dir = self.dir.clone();
        on_worker(py, move || {
            let mut g = lock(&state)?;
            *g = None;
            Ok(Report::new("load", load_json(&f(&dir)?)))
        })
    }
}

#[pymethods]
impl Array {
    /// The array's directory.
    #[getter]
    fn dir(&self) -> PathBuf {
        self.dir.clone()
    }

    /// The manifest as a dict: devices (image files), how they were created, workers,
    /// and each table's placement (rows and pages per device, stripe unit, layout).
    fn manifest<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let m = Manifest::read(&self.dir).map_err(Error::from)?;
        let v = serde_json::to_value(&m).map_err(|e| Error::Invalid(e.to_string()))?;
        json_to_py(py, &v)
    }

    /// Devices in the array.
    #[getter]
    fn devices(&self) -> PyResult<usize> {
        Ok(Manifest::read(&self.dir)
            .map_err(Error::from)?
            .devices
            .len())
    }

    /// The array's tables: name, layout, rows, pages, stripe unit, and rows / pages per
    /// device (`csd array info`).
    fn tables<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let m = Manifest::read(&self.dir).map_err(Error::from)?;
        let out = PyList::empty(py);
        for p in &m.tables {
            let v = serde_json::to_value(p).map_err(|e| Error::Invalid(e.to_string()))?;
            out.append(json_to_py(py, &v)?)?;
        }
        Ok(out)
    }

    /// Loads TPC-H tables striped over the devices (`csd load tpch --array DIR`), one
    /// load report per table (rows and pages of the whole table; modeled time of the
    /// slowest device).
    #[pyo3(signature = (sf=0.01, tables="lineitem", *, layout="pax", stripe_pages=1))]
    fn load_tpch(
        &self,
        py: Python<'_>,
        sf: f64,
        tables: &str,
        layout: &str,
        stripe_pages: u64,
    ) -> PyResult<Vec<Report>> {
        let layout = self::layout(layout)?;
        let mut out = Vec::new();
        for t in crate::device::tpch_tables(tables)? {
            let g = TpchGenerator::new(t, sf).map_err(|e| Error::Invalid(e.to_string()))?;
            out.push(self.load_with(py, move |dir| {
                load_into(dir, t.name(), g, layout, stripe_pages)
            })?);
        }
        Ok(out)
    }

    /// Loads a SyntheticN table striped over the devices (`csd load synthetic --array`).
    #[pyo3(signature = (columns=16, rows=100_000, *, seed=1, name=None, layout="pax", stripe_pages=1))]
    #[allow(clippy::too_many_arguments)]
    fn load_synthetic(
        &self,
        py: Python<'_>,
        columns: usize,
        rows: u64,
        seed: u64,
        name: Option<String>,
        layout: &str,
        stripe_pages: u64,
    ) -> PyResult<Report> {
        let layout = self::layout(layout)?;
        let spec =
            SyntheticSpec::new(columns, rows, seed).map_err(|e| Error::Invalid(e.to_string()))?;
        let name = name.unwrap_or_else(|| format!("synthetic{columns}"));
        self.load_with(py, move |dir| {
            let g = SyntheticGenerator::new(spec).map_err(|e| Error::Invalid(e.to_string()))?;
            load_into(dir, &name, g, layout, stripe_pages)
        })
    }

    /// Loads `data` (a pyarrow Table / RecordBatch / RecordBatchReader, or a Parquet or
    /// CSV path; a pandas DataFrame through the `csd` package) as table `table` striped
    /// over the devices, as `Device.load` does on one device.
    #[pyo3(signature = (table, data, *, layout="pax", stripe_pages=1, float_scale=None,
        header=true, delimiter=","))]
    #[allow(clippy::too_many_arguments)]
    fn load(
        &self,
        py: Python<'_>,
        table: String,
        data: &Bound<'_, PyAny>,
        layout: &str,
        stripe_pages: u64,
        float_scale: Option<u8>,
        header: bool,
        delimiter: &str,
    ) -> PyResult<Report> {
        let layout = self::layout(layout)?;
        let rows = rows_from(py, &table, data, float_scale, header, delimiter)?;
        self.load_with(py, move |dir| {
            load_into(dir, &table, rows, layout, stripe_pages)
        })
    }

    /// Runs `query` over the array (`csd query --array DIR`): one DataFusion partition
    /// per device, the device scans in parallel on `threads` host threads (default:
    /// the cores). The result's `reports` carry each scan's `device` (its index in the
    /// array); `array` has the array's modeled time (the slowest device) and each
    /// device's. Strategies as `Device.sql`.
    /// `time_model` as `Device.sql`'s.
    #[pyo3(signature = (query, *, strategy="auto", threads=None, aggregate_pushdown=true,
        use_index=true, queue_depth=32, time_model="events"))]
    #[allow(clippy::too_many_arguments)]
    fn sql(
        &self,
        py: Python<'_>,
        query: String,
        strategy: &str,
        threads: Option<usize>,
        aggregate_pushdown: bool,
        use_index: bool,
        queue_depth: usize,
        time_model: &str,
    ) -> PyResult<SqlResult> {
        let choices = parse_choices(strategy)?;
        let time_model = parse_time_model(time_model)?;
        let sql = csd_sql::tpch::expand(&query).to_string();
        let threads = threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1);
        let state = self.state.clone();
        let dir = self.dir.clone();
        on_worker(py, move || {
            let mut g = lock(&state)?;
            if g.as_ref().is_none_or(|o| o.session.threads() != threads) {
                *g = None;
                *g = Some(open_session(&dir, threads)?);
            }
            let Some(open) = g.as_mut() else {
                return Err(Error::Closed);
            };
            let s = &mut open.session;
            let mut settings = ScanSettings::new(Choice::Auto);
            settings.aggregate_pushdown = aggregate_pushdown;
            settings.options.use_index = use_index;
            settings.options.queue_depth = queue_depth.max(1);
            settings.options.time_model = time_model;
            s.set_settings(settings)?;
            let runs = s.run_strategies(&sql, &choices)?;
            Ok(SqlResult::from_array(sql, runs))
        })
    }

    /// Ends the query session (its read-only opens); the array stays usable.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let state = self.state.clone();
        py.detach(move || {
            *lock(&state)? = None;
            Ok::<_, Error>(())
        })?;
        Ok(())
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
        match Manifest::read(&self.dir) {
            Ok(m) => format!(
                "csd.Array({}: {} devices, {} tables)",
                self.dir.display(),
                m.devices.len(),
                m.tables.len()
            ),
            Err(_) => format!("csd.Array({}: unreadable manifest)", self.dir.display()),
        }
    }
}

/// `csd.create_array(dir, devices, preset=None, *, config=None, overrides=None,
/// op=0.07)`: a new array of `devices` fresh images (`dev0.img` ...) and its manifest
/// in `dir` (`csd array create`). Nothing is created when the config is refused, `dir`
/// already holds an array, or one of the images exists.
#[pyfunction]
#[pyo3(signature = (dir, devices, preset=None, *, config=None, overrides=None, op=0.07))]
pub fn create_array(
    py: Python<'_>,
    dir: PathBuf,
    devices: usize,
    preset: Option<&str>,
    config: Option<&Bound<'_, PyDict>>,
    overrides: Option<&Bound<'_, PyDict>>,
    op: f64,
) -> PyResult<Array> {
    if devices == 0 || devices > MAX_DEVICES {
        return Err(Error::Invalid(format!(
            "devices {devices}: an array has 1 to {MAX_DEVICES} devices"
        ))
        .into());
    }
    if Manifest::path(&dir).exists() {
        return Err(Error::Invalid(format!(
            "{} already holds an array (its {}); choose another directory",
            dir.display(),
            csd_sql::array::MANIFEST_FILE
        ))
        .into());
    }
    let cfg = load_config(preset, config, overrides)?;
    let described = match (preset, config) {
        (_, Some(_)) => format!("Python config dict `{}`", cfg.name),
        (p, None) => format!("--preset {}", p.unwrap_or(csd_sim::config::DEFAULT_PRESET)),
    };
    let m = Manifest::new(devices, &described);
    let paths = m.device_paths(&dir);
    if let Some(p) = paths.iter().find(|p| p.exists()) {
        return Err(Error::Invalid(format!(
            "{} exists: an array creates its own images",
            p.display()
        ))
        .into());
    }
    let ftl = FtlConfig {
        op,
        ..FtlConfig::default()
    };
    let d = dir.clone();
    py.detach(move || -> Result<()> {
        std::fs::create_dir_all(&d)
            .map_err(|e| Error::Invalid(format!("creating {}: {e}", d.display())))?;
        for p in &paths {
            let mut dev = stack::create_image(p, cfg.clone(), ftl)?;
            stack::close(&mut dev)?;
        }
        m.write(&d)?;
        Ok(())
    })?;
    Ok(Array {
        dir,
        state: Arc::new(Mutex::new(None)),
    })
}

/// `csd.open_array(dir)`: the array in `dir` (its manifest is read and checked now;
/// devices are opened when a load or query needs them).
#[pyfunction]
pub fn open_array(dir: PathBuf) -> PyResult<Array> {
    Manifest::read(&dir).map_err(Error::from)?;
    Ok(Array {
        dir,
        state: Arc::new(Mutex::new(None)),
    })
}
