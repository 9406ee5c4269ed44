//! `csd.KeyValue`: the batch-io paper's key-value store (`csd_kv::Store`) on a device,
//! over the batch or the block interface, and YCSB runs against it (`csd bench ycsb`'s
//! driver, `csd_kv::ycsb`).
//!
//! The handle shares its device with the `Device` it came from: when the device was
//! used for something else since (SQL, a workload), the store is opened again with the
//! same parameters on the next call. Keys and values are `bytes` (a `str` is taken as
//! UTF-8). Single operations are short and run without the GIL on the calling thread;
//! `put_batch` and `ycsb` are long calls (interruptible, see [`crate::device`]).

use crate::device::{Inner, interruptible, short};
use crate::error::{Error, Result};
use crate::report::Report;
use csd_kv::StoreConfig;
use csd_kv::ycsb::{self, KeyDist, Limit, PhaseResult, Workload, YcsbConfig};
use csd_sim::events::{Recording, TimeModel};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// Bytes of a key or value given as `bytes`, `bytearray` or `str`.
fn bytes_of(v: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(s) = v.extract::<String>() {
        return Ok(s.into_bytes());
    }
    v.extract::<Vec<u8>>()
}

/// The key-value store on a device.
#[pyclass(module = "csd._csd", name = "KeyValue")]
pub struct KeyValue {
    inner: Arc<Mutex<Inner>>,
    cfg: StoreConfig,
}

impl KeyValue {
    pub(crate) fn new(inner: Arc<Mutex<Inner>>, cfg: StoreConfig) -> KeyValue {
        KeyValue { inner, cfg }
    }
}

/// The store, reopened with `cfg` if the device was used otherwise since.
fn store<'a>(
    i: &'a mut Inner,
    cfg: &StoreConfig,
) -> Result<&'a mut csd_kv::Store<csd_host::Client>> {
    if i.kv.as_ref() != Some(cfg) {
        i.block()?;
        i.kv = Some(cfg.clone());
    }
    i.store()
}

#[pymethods]
impl KeyValue {
    /// The interface: `batch` or `block`.
    #[getter]
    fn interface(&self) -> &'static str {
        self.cfg.interface.name()
    }

    /// The value of `key`, or `None`.
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let k = bytes_of(key)?;
        let v = short(py, &self.inner, |i| Ok(store(i, &self.cfg)?.get(&k)?))?;
        Ok(v.map(|v| PyBytes::new(py, &v)))
    }

    /// Stores `value` under `key` (acknowledged once durable: see `sync`).
    fn put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (k, v) = (bytes_of(key)?, bytes_of(value)?);
        short(py, &self.inner, |i| {
            store(i, &self.cfg)?.put(&k, &v)?;
            Ok(())
        })
    }

    /// Deletes `key`; whether it was there.
    fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let k = bytes_of(key)?;
        short(py, &self.inner, |i| Ok(store(i, &self.cfg)?.delete(&k)?))
    }

    /// Up to `limit` pairs in key order from `start` on, as `(key, value)` tuples.
    #[pyo3(signature = (start=None, limit=100))]
    fn scan<'py>(
        &self,
        py: Python<'py>,
        start: Option<&Bound<'py, PyAny>>,
        limit: usize,
    ) -> PyResult<Bound<'py, PyList>> {
        let s = match start {
            Some(s) => bytes_of(s)?,
            None => Vec::new(),
        };
        let entries = short(py, &self.inner, |i| {
            Ok(store(i, &self.cfg)?.scan(&s, limit)?)
        })?;
        let out = PyList::empty(py);
        for (k, v) in entries {
            out.append(PyTuple::new(
                py,
                [PyBytes::new(py, &k), PyBytes::new(py, &v)],
            )?)?;
        }
        Ok(out)
    }

    /// Stores every pair of `pairs` (a dict or an iterable of `(key, value)`) as one
    /// crash-atomic group (`Store::put_all`): after a power cut all or none are there.
    fn put_batch(&self, py: Python<'_>, pairs: &Bound<'_, PyAny>) -> PyResult<u64> {
        let items = match pairs.cast::<pyo3::types::PyDict>() {
            Ok(d) => d.items().into_any(),
            Err(_) => pairs.clone(),
        };
        let mut owned: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for p in items.try_iter()? {
            let p = p?;
            let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = p.extract()?;
            owned.push((bytes_of(&k)?, bytes_of(&v)?));
        }
        let cfg = self.cfg.clone();
        interruptible(py, &self.inner, move |i| {
            let refs: Vec<(&[u8], &[u8])> = owned
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_slice()))
                .collect();
            Ok(store(i, &cfg)?.put_all(&refs)?)
        })
    }

    /// Keys in the store.
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        short(
            py,
            &self.inner,
            |i| Ok(store(i, &self.cfg)?.len()? as usize),
        )
    }

    fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let k = bytes_of(key)?;
        short(py, &self.inner, |i| Ok(store(i, &self.cfg)?.contains(&k)?))
    }

    /// Makes every write so far durable; the modeled time it completed, in seconds.
    fn sync(&self, py: Python<'_>) -> PyResult<f64> {
        short(py, &self.inner, |i| {
            Ok(store(i, &self.cfg)?.sync()?.ns() as f64 / 1e9)
        })
    }

    /// The store's counters: I/O by purpose, host CPU, cache hits and misses, splits.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let st = short(py, &self.inner, |i| Ok(store(i, &self.cfg)?.stats()))?;
        let v = json!({
            "gets": st.gets, "puts": st.puts, "deletes": st.deletes, "scans": st.scans,
            "splits": st.splits, "cache_hits": st.cache_hits, "cache_misses": st.cache_misses,
            "evictions": st.evictions, "queue_full_wait_ns": st.queue_full_wait_ns,
            "user_read_bytes": st.io.user_read_bytes, "user_write_bytes": st.io.user_write_bytes,
        });
        crate::json_to_py(py, &v)
    }

    /// A YCSB run (`csd bench ycsb`): `records` records loaded first (unless
    /// `load=False`), then `ops` operations of `workload` (`read-heavy`, `write-heavy`,
    /// or `a` … `f`) with keys drawn `zipfian` (θ 0.99), `zipf:THETA` or `uniform`.
    /// `time_model="events"` runs the operations on the event core (`csd bench ycsb
    /// --time-model events`: every resource first-come first-served in modeled-arrival
    /// order; the load stays on calendars); the report then has `event_core` counters.
    #[pyo3(signature = (workload="a", *, records=10_000, ops=10_000, dist="zipfian", seed=1, load=true, time_model="events"))]
    #[allow(clippy::too_many_arguments)]
    fn ycsb(
        &self,
        py: Python<'_>,
        workload: &str,
        records: u64,
        ops: u64,
        dist: &str,
        seed: u64,
        load: bool,
        time_model: &str,
    ) -> PyResult<Report> {
        let w: Workload = workload.parse().map_err(Error::Invalid)?;
        let tm = TimeModel::parse(time_model).ok_or_else(|| {
            Error::Invalid(format!("time_model `{time_model}`: use calendar or events"))
        })?;
        let d: KeyDist = dist.parse().map_err(Error::Invalid)?;
        let cfg = YcsbConfig {
            records,
            workload: w,
            dist: d,
            limit: Limit::Ops(ops),
            seed,
        };
        let scfg = self.cfg.clone();
        let dist_name = dist.to_string();
        interruptible(py, &self.inner, move |i| {
            let s = store(i, &scfg)?;
            let loaded = if load {
                Some(ycsb::load(s, records, &mut |_| {})?)
            } else {
                None
            };
            s.reset_stats();
            let rec = (tm == TimeModel::Events).then(Recording::start).flatten();
            let run = ycsb::run(s, &cfg, &mut |_| {});
            // `ycsb::run` settled every instant before returning.
            let graph = rec.map(Recording::finish);
            let run = run?;
            let mut v = json!({
                "interface": scfg.interface.name(),
                "workload": w.name(),
                "dist": dist_name,
                "records": records,
                "seed": seed,
                "time_model": tm.name(),
            });
            if let Some(g) = graph {
                v["event_core"] = json!(g.counters());
            }
            phase_json(&mut v, "run", &run);
            if let Some(l) = &loaded {
                phase_json(&mut v, "load", l);
            }
            Ok(Report::new("ycsb", v))
        })
    }

    fn __repr__(&self) -> String {
        format!("csd.KeyValue({} interface)", self.cfg.interface.name())
    }
}

/// A YCSB phase's figures under `prefix_`.
fn phase_json(v: &mut Value, prefix: &str, p: &PhaseResult) {
    let Some(m) = v.as_object_mut() else { return };
    let mut put = |k: &str, x: Value| {
        m.insert(format!("{prefix}_{k}"), x);
    };
    put("ops", json!(p.ops.total()));
    put("reads", json!(p.ops.reads));
    put("read_misses", json!(p.ops.read_misses));
    put("updates", json!(p.ops.updates));
    put("wall_s", json!(p.wall_s));
    put("wall_ops_per_s", json!(p.wall_ops_per_s()));
    put("modeled_s", json!(p.modeled_s));
    put("modeled_ops_per_s", json!(p.modeled_ops_per_s()));
    let h = &p.modeled_latency;
    if !h.is_empty() {
        put("latency_mean_us", json!(h.mean() / 1e3));
        for (q, name) in [(0.5, "p50"), (0.99, "p99"), (0.999, "p999")] {
            put(
                &format!("latency_{name}_us"),
                json!(h.value_at_quantile(q) as f64 / 1e3),
            );
        }
    }
}
