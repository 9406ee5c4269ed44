//! `csd.SqlResult`: one statement's answer. The batches stay in Rust until asked for;
//! `to_arrow()` hands them to pyarrow through the C stream interface (no copy, see
//! [`crate::arrow`]), `to_pandas()` converts that table. `reports` are the device scans'
//! modeled reports (one dict per scan, per strategy run), `explain` the plan after the
//! run with its metrics and `[device]` / `[host]` marks (EXPLAIN ANALYZE).

use crate::arrow::{rows_of, to_pyarrow};
use crate::json_to_py;
use crate::report::{html_escape, scan_json};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use csd_sql::{Answer, ArrayAnswer, Choice};
use pyo3::prelude::*;
use pyo3::types::PyList;
use serde_json::{Value, json};

/// A statement's result.
#[pyclass(module = "csd._csd", name = "SqlResult", frozen)]
pub struct SqlResult {
    query: String,
    strategy: String,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    explained: String,
    scans: Vec<Value>,
    wall_s: f64,
    dml: Option<String>,
    array: Option<Value>,
}

impl SqlResult {
    /// The result of `runs` (one per strategy; their rows agree: `run_strategies`
    /// checked it). The first run's rows and plan are kept, every run's scans.
    pub fn new(query: String, runs: Vec<(Choice, Answer)>) -> SqlResult {
        let scans = runs
            .iter()
            .flat_map(|(c, a)| a.scans.iter().map(|s| scan_json(c.name(), s)))
            .collect();
        SqlResult::with_scans(query, runs, scans, None)
    }

    /// The result of `runs` over an array: each scan's report names its `device`, and
    /// `array` holds the first run's array figures (modeled time: the slowest device).
    pub fn from_array(query: String, runs: Vec<(Choice, ArrayAnswer)>) -> SqlResult {
        let mut scans = Vec::new();
        let mut array = None;
        let mut answers = Vec::with_capacity(runs.len());
        for (
            c,
            ArrayAnswer {
                answer, devices, ..
            },
        ) in runs
        {
            for (d, list) in devices.iter().enumerate() {
                for s in list {
                    let mut v = scan_json(c.name(), s);
                    v["device"] = json!(d);
                    scans.push(v);
                }
            }
            if array.is_none() {
                let device_ns = csd_sql::array::device_ns(&devices);
                array = Some(json!({
                    "strategy": c.name(),
                    "devices": devices.len(),
                    "modeled_time_s": csd_sql::array::array_ns(&devices) as f64 / 1e9,
                    "device_modeled_time_s": device_ns.iter().map(|n| *n as f64 / 1e9).collect::<Vec<_>>(),
                }));
            }
            answers.push((c, answer));
        }
        SqlResult::with_scans(query, answers, scans, array)
    }

    fn with_scans(
        query: String,
        runs: Vec<(Choice, Answer)>,
        scans: Vec<Value>,
        array: Option<Value>,
    ) -> SqlResult {
        let strategy = runs
            .iter()
            .map(|(c, _)| c.name())
            .collect::<Vec<_>>()
            .join(",");
        let (schema, batches, explained, wall_s, dml) = match runs.into_iter().next() {
            Some((_, a)) => (
                a.schema,
                a.batches,
                a.explained,
                a.wall_s,
                a.dml.map(|d| format!("{} in {}", d.summary(), d.table)),
            ),
            None => (
                std::sync::Arc::new(arrow::datatypes::Schema::empty()),
                Vec::new(),
                String::new(),
                0.0,
                None,
            ),
        };
        SqlResult {
            query,
            strategy,
            schema,
            batches,
            explained,
            scans,
            wall_s,
            dml,
            array,
        }
    }
}

#[pymethods]
impl SqlResult {
    /// The SQL that ran (`q6` expanded).
    #[getter]
    fn query(&self) -> &str {
        &self.query
    }

    /// The strategies that ran, comma-separated.
    #[getter]
    fn strategy(&self) -> &str {
        &self.strategy
    }

    /// The result as a `pyarrow.Table` (the buffers cross without a copy).
    fn to_arrow<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_pyarrow(py, self.schema.clone(), self.batches.clone())
    }

    /// The result as a pandas DataFrame.
    fn to_pandas<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.to_arrow(py)?.call_method0("to_pandas")
    }

    /// The device scans' modeled reports, one dict per scan (key `run`: the strategy
    /// run it belongs to).
    #[getter]
    fn reports<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for s in &self.scans {
            out.append(json_to_py(py, s)?)?;
        }
        Ok(out)
    }

    /// The scans' reports as a pandas DataFrame (one row per scan).
    fn reports_frame<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let r = self.reports(py)?;
        py.import("pandas")?.getattr("DataFrame")?.call1((r,))
    }

    /// Over an array (`Array.sql`): the first strategy run's array figures as a dict
    /// (`modeled_time_s` of the array, the slowest device; `device_modeled_time_s` per
    /// device); `None` on one device.
    #[getter]
    fn array<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.array.as_ref().map(|v| json_to_py(py, v)).transpose()
    }

    /// The plan after the run, with per-operator metrics (EXPLAIN ANALYZE).
    #[getter]
    fn explain(&self) -> &str {
        &self.explained
    }

    /// Wall-clock seconds of planning and running (the first strategy's run).
    #[getter]
    fn wall_s(&self) -> f64 {
        self.wall_s
    }

    /// For INSERT / UPDATE / DELETE: what the statement changed.
    #[getter]
    fn dml(&self) -> Option<&str> {
        self.dml.as_deref()
    }

    /// Result rows.
    fn __len__(&self) -> usize {
        rows_of(&self.batches)
    }

    fn __repr__(&self) -> String {
        format!(
            "csd.SqlResult({} rows × {} columns, strategy {}, {} device scans)",
            rows_of(&self.batches),
            self.schema.fields().len(),
            self.strategy,
            self.scans.len()
        )
    }

    fn _repr_html_(&self, py: Python<'_>) -> PyResult<String> {
        let head = self
            .to_pandas(py)?
            .call_method1("head", (50,))?
            .call_method0("to_html")?
            .extract::<String>()?;
        let mut s = format!(
            "<div><p>{} rows; strategy {}; {:.3} s wall</p>{head}",
            rows_of(&self.batches),
            html_escape(&self.strategy),
            self.wall_s
        );
        if !self.scans.is_empty() {
            s.push_str("<table><tr><th>run</th><th>table</th><th>strategy</th><th>modeled s</th><th>flash reads</th><th>host-link bytes</th><th>energy J</th></tr>");
            for r in &self.scans {
                let f = |k: &str| r.get(k).map(|v| v.to_string()).unwrap_or_default();
                s.push_str(&format!(
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    html_escape(&f("run")),
                    html_escape(&f("table")),
                    html_escape(&f("strategy")),
                    f("modeled_time_s"),
                    f("flash_reads"),
                    f("host_link_bytes"),
                    f("energy_j")
                ));
            }
            s.push_str("</table>");
        }
        s.push_str("</div>");
        Ok(s)
    }
}
