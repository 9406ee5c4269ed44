//! csd from Python: a thin PyO3 binding (the extension `csd._csd` of the Python package
//! `csd`) over the library calls the `csd` command makes. No logic of its own lives here:
//! devices come from `csd_device::stack`, workloads from `csd_device::workload`, tables
//! from `csd_host::Catalog` and `csd_sql::import`, SQL from `csd_sql::SqlSession`, the
//! key-value store and YCSB from `csd_kv`, plots from `csd_plot` — what the binding adds
//! is the conversion of arguments and results.
//!
//! Choices:
//! * **Results cross as Arrow** through the C stream interface ([`arrow`]), never row by
//!   row; figures (reports, SMART, config) cross as dicts built from the same JSON
//!   objects the CLI's `--json` prints ([`report`]).
//! * **One device, three uses** (block device, SQL session, key-value store), moved
//!   between on demand ([`device`]).
//! * **Long calls release the GIL and honour Ctrl-C** by running on a worker thread; an
//!   interrupted command finishes there and its result is dropped, so the device stays
//!   consistent ([`device::interruptible`]).
//! * **Errors are exceptions carrying csd's messages**, one class per family
//!   ([`error`]).
//! * **abi3** (CPython 3.10+): one build serves every interpreter; the extension is built
//!   in the workspace's dev profile with the workspace's features, so it reuses the
//!   DataFusion the test build compiled (Cargo.toml, `check_features.py`).

pub mod array;
pub mod arrow;
pub mod device;
pub mod error;
pub mod kv;
pub mod report;
pub mod sql;

use error::Error;
use pyo3::prelude::*;
use serde_json::Value;
use std::path::PathBuf;

/// A Python object (dicts, lists, numbers, strings, booleans, None) as JSON, through
/// Python's `json` module (which names what it cannot convert).
pub(crate) fn py_to_json(v: &Bound<'_, PyAny>) -> PyResult<Value> {
    let text: String = v
        .py()
        .import("json")?
        .call_method1("dumps", (v,))?
        .extract()?;
    serde_json::from_str(&text).map_err(|e| Error::Invalid(format!("not JSON data: {e}")).into())
}

/// JSON as Python objects, through Python's `json` module.
pub(crate) fn json_to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?.call_method1("loads", (v.to_string(),))
}

/// The two files of a plot, and its SVG for Jupyter.
#[pyclass(module = "csd._csd", name = "Plot", frozen)]
pub struct Plot {
    /// The PNG file.
    #[pyo3(get)]
    png: PathBuf,
    /// The SVG file.
    #[pyo3(get)]
    svg: PathBuf,
}

#[pymethods]
impl Plot {
    fn _repr_svg_(&self) -> PyResult<String> {
        std::fs::read_to_string(&self.svg).map_err(|e| {
            PyErr::from(Error::Invalid(format!(
                "reading {}: {e}",
                self.svg.display()
            )))
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "csd.Plot(png={}, svg={})",
            self.png.display(),
            self.svg.display()
        )
    }
}

/// A line chart (csd's own plots, `csd_plot::LineChart`) written as `dir/stem.png` and
/// `dir/stem.svg`: `series` maps each legend name (in order) to its `(x, y)` points.
#[pyfunction]
#[pyo3(signature = (dir, stem, series, *, title="", x_label="x", y_label="y", log_x=false, log_y=false))]
#[allow(clippy::too_many_arguments)]
fn plot_lines(
    py: Python<'_>,
    dir: PathBuf,
    stem: &str,
    series: &Bound<'_, pyo3::types::PyDict>,
    title: &str,
    x_label: &str,
    y_label: &str,
    log_x: bool,
    log_y: bool,
) -> PyResult<Plot> {
    let mut chart = csd_plot::LineChart::new(title, x_label, y_label);
    chart.log_x = log_x;
    chart.log_y = log_y;
    for (name, points) in series.iter() {
        let name: String = name.extract()?;
        let mut pts = Vec::new();
        for p in points.try_iter()? {
            pts.push(p?.extract::<(f64, f64)>()?);
        }
        chart = chart.with_series(csd_plot::Series::solid(name, pts));
    }
    let files = py.detach(|| chart.write(&dir, stem)).map_err(Error::from)?;
    Ok(Plot {
        png: files.png,
        svg: files.svg,
    })
}

/// `csd repro`'s command line, parsed by the reproductions' own options.
#[derive(clap::Parser)]
#[command(name = "csd repro")]
struct ReproLine {
    #[command(subcommand)]
    cmd: csd_repro::ReproCmd,
}

/// Runs one reproduction from its `csd repro` arguments (`["scan-paper", "--out",
/// DIR, "--scale", "0.001"]`) on a worker thread (Ctrl-C raises KeyboardInterrupt);
/// it writes its report and plots into its `--out` directory. `csd.repro` wraps it.
#[pyfunction]
fn run_repro(py: Python<'_>, args: Vec<String>) -> PyResult<()> {
    use clap::{CommandFactory, FromArgMatches};
    let mut cmd = ReproLine::command();
    let matches = cmd
        .try_get_matches_from_mut(std::iter::once("csd repro".to_string()).chain(args))
        .map_err(|e| Error::Invalid(e.render().to_string()))?;
    let line = ReproLine::from_arg_matches(&matches).map_err(|e| Error::Invalid(e.to_string()))?;
    // The report's `reproduce:` line is this call's, as `csd repro ...` would print it.
    let reproduce = csd_repro::reproduce::render(&cmd, &matches);
    device::on_worker(py, move || {
        csd_repro::reproduce::scoped(reproduce, || Ok(csd_repro::repro_cmd(&line.cmd)?))
    })
}

/// The extension module `csd._csd`.
#[pymodule]
fn _csd(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Scans evaluate pages on rayon's pool and on their own thread: one pool thread per
    // other core (`RAYON_NUM_THREADS` overrides).
    csd_device::size_scan_pool();
    let py = m.py();
    m.add("CsdError", py.get_type::<error::CsdError>())?;
    m.add("ConfigError", py.get_type::<error::ConfigError>())?;
    m.add("ImageError", py.get_type::<error::ImageError>())?;
    m.add("SqlError", py.get_type::<error::SqlError>())?;
    m.add("KvError", py.get_type::<error::KvError>())?;
    m.add("DeviceError", py.get_type::<error::DeviceError>())?;
    m.add_class::<device::Device>()?;
    m.add_class::<array::Array>()?;
    m.add_class::<sql::SqlResult>()?;
    m.add_class::<kv::KeyValue>()?;
    m.add_class::<report::Report>()?;
    m.add_class::<Plot>()?;
    m.add_function(wrap_pyfunction!(device::create, m)?)?;
    m.add_function(wrap_pyfunction!(device::open, m)?)?;
    m.add_function(wrap_pyfunction!(device::memory, m)?)?;
    m.add_function(wrap_pyfunction!(device::raw_io, m)?)?;
    m.add_function(wrap_pyfunction!(array::create_array, m)?)?;
    m.add_function(wrap_pyfunction!(array::open_array, m)?)?;
    m.add_function(wrap_pyfunction!(device::presets, m)?)?;
    m.add_function(wrap_pyfunction!(device::device_config, m)?)?;
    m.add_function(wrap_pyfunction!(plot_lines, m)?)?;
    m.add_function(wrap_pyfunction!(run_repro, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
