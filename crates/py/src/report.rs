//! `csd.Report`: one run's figures (a workload, a load, a YCSB run) as a flat mapping
//! of snake_case keys with units in their names, as the CLI's `--json` prints them.
//! `to_dict()`, `to_pandas()` (one row; `csd.frame(reports)` stacks several), and an
//! HTML table in Jupyter.

use crate::json_to_py;
use csd_host::LoadReport;
use csd_sql::{ScanRecord, ScanRecordReport};
use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;
use serde_json::{Value, json};

/// A run's report.
#[pyclass(module = "csd._csd", name = "Report", frozen)]
pub struct Report {
    kind: &'static str,
    fields: serde_json::Map<String, Value>,
}

impl Report {
    /// A report of `kind` (`io`, `load`, `ycsb`) from a JSON object.
    pub fn new(kind: &'static str, v: Value) -> Report {
        let fields = match v {
            Value::Object(m) => m,
            other => {
                let mut m = serde_json::Map::new();
                m.insert("value".into(), other);
                m
            }
        };
        Report { kind, fields }
    }
}

#[pymethods]
impl Report {
    /// What ran: `io`, `load` or `ycsb`.
    #[getter]
    fn kind(&self) -> &'static str {
        self.kind
    }

    /// The figures as a dict.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        json_to_py(py, &Value::Object(self.fields.clone()))
    }

    /// The figures as a one-row pandas DataFrame.
    fn to_pandas<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let d = self.to_dict(py)?;
        py.import("pandas")?.getattr("DataFrame")?.call1((vec![d],))
    }

    fn keys(&self) -> Vec<String> {
        self.fields.keys().cloned().collect()
    }

    fn __getitem__<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyAny>> {
        match self.fields.get(key) {
            Some(v) => json_to_py(py, v),
            None => Err(PyKeyError::new_err(key.to_string())),
        }
    }

    fn __contains__(&self, key: &str) -> bool {
        self.fields.contains_key(key)
    }

    fn __len__(&self) -> usize {
        self.fields.len()
    }

    fn __repr__(&self) -> String {
        let shown: Vec<String> = self
            .fields
            .iter()
            .take(6)
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        format!("csd.Report({}: {}, ...)", self.kind, shown.join(", "))
    }

    fn _repr_html_(&self) -> String {
        let mut s = format!(
            "<table><caption>csd {} report</caption><tr><th>field</th><th>value</th></tr>",
            html_escape(self.kind)
        );
        for (k, v) in &self.fields {
            let v = match v {
                Value::String(t) => t.clone(),
                other => other.to_string(),
            };
            s.push_str(&format!(
                "<tr><td>{}</td><td>{}</td></tr>",
                html_escape(k),
                html_escape(&v)
            ));
        }
        s.push_str("</table>");
        s
    }
}

/// Escapes text for HTML.
pub fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A table load's figures (`csd load --json`'s keys).
pub fn load_json(r: &LoadReport) -> Value {
    json!({
        "table": r.table.name, "layout": r.table.layout.to_string(), "rows": r.table.rows,
        "pages": r.table.pages, "bytes": r.table.bytes(), "row_bytes": r.table.schema.row_width(),
        "wall_s": r.wall_s, "modeled_s": r.modeled_s,
        "replaced": r.replaced.as_ref().map(|t| t.name.clone()),
    })
}

/// One device scan's modeled report: csd-sql's [`ScanRecordReport`] (the keys of
/// `csd query --json`'s scans) plus `run`, the strategy run it belongs to.
pub fn scan_json(strategy: &str, s: &ScanRecord) -> Value {
    let mut v = json!(ScanRecordReport::from(s));
    v["run"] = json!(strategy);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_html() {
        assert_eq!(html_escape("<a & \"b\">"), "&lt;a &amp; &quot;b&quot;&gt;");
    }

    #[test]
    fn non_objects_are_wrapped() {
        let r = Report::new("io", json!(3));
        assert_eq!(r.fields.get("value"), Some(&json!(3)));
        assert_eq!(r.keys(), vec!["value".to_string()]);
    }
}
