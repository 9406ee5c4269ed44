//! Harness tests against in-memory mock indexes: every request runs exactly once, the
//! final content equals the generator's prediction, a "merge" that sleeps under the
//! write lock shows up as worst-case insertion R_p and a lookup R_q tail, errors stop
//! the run, and results serialize, tabulate, plot and report.

use csd_idxbench::*;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// `RwLock<BTreeMap>`; every `merge_every`-th insertion sleeps `merge` under the write
/// lock (a stop-the-world merge, like FD+XM).
struct MapIndex {
    scheme: Scheme,
    map: RwLock<BTreeMap<u64, u64>>,
    merge_every: u64,
    merge: Duration,
    fail_key: Option<u64>,
    calls: [AtomicU64; 3],
    merges: AtomicU64,
    quiesced: AtomicU64,
    /// Requests of each kind seen when `start_run` was called, and how often it was.
    started: RwLock<Vec<[u64; 3]>>,
}

impl MapIndex {
    fn new(scheme: Scheme) -> Self {
        Self {
            scheme,
            map: RwLock::new(BTreeMap::new()),
            merge_every: 0,
            merge: Duration::ZERO,
            fail_key: None,
            calls: Default::default(),
            merges: AtomicU64::new(0),
            quiesced: AtomicU64::new(0),
            started: RwLock::new(Vec::new()),
        }
    }

    fn with_merges(mut self, every: u64, ms: u64) -> Self {
        self.merge_every = every;
        self.merge = Duration::from_millis(ms);
        self
    }

    fn content(&self) -> BTreeMap<u64, u64> {
        self.map.read().unwrap().clone()
    }
}

impl BenchIndex for MapIndex {
    fn insert(&self, k: u64, v: u64) -> Result<(), IndexError> {
        if self.fail_key == Some(k) {
            return Err(IndexError::new("device full"));
        }
        let n = self.calls[0].fetch_add(1, Ordering::SeqCst) + 1;
        let mut g = self.map.write().unwrap();
        g.insert(k, v);
        if self.merge_every > 0 && n.is_multiple_of(self.merge_every) {
            self.merges.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(self.merge);
        }
        Ok(())
    }
    fn delete(&self, k: u64) -> Result<bool, IndexError> {
        self.calls[1].fetch_add(1, Ordering::SeqCst);
        Ok(self.map.write().unwrap().remove(&k).is_some())
    }
    fn lookup(&self, k: u64) -> Result<Option<u64>, IndexError> {
        self.calls[2].fetch_add(1, Ordering::SeqCst);
        Ok(self.map.read().unwrap().get(&k).copied())
    }
    fn scheme(&self) -> Scheme {
        self.scheme
    }
    fn extra_stats(&self) -> Vec<(String, f64)> {
        vec![
            ("merges".into(), self.merges.load(Ordering::SeqCst) as f64),
            (
                "quiesced".into(),
                self.quiesced.load(Ordering::SeqCst) as f64,
            ),
        ]
    }
    fn quiesce(&self) -> Result<(), IndexError> {
        self.quiesced.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn start_run(&self) -> Result<(), IndexError> {
        let seen = [0, 1, 2].map(|i| self.calls[i].load(Ordering::SeqCst));
        self.started.write().unwrap().push(seen);
        Ok(())
    }
}

fn tiny(w_l: f64, requests: u64, preload: u64) -> BenchConfig {
    let mut c = BenchConfig::small(w_l);
    c.workload = WorkloadSpec::Gr(GrSpec::with_lookup_ratio(w_l, requests, preload));
    c.warmup = 100;
    c.queue_slots = 200;
    c
}

#[test]
fn every_request_once_and_final_content_predicted() {
    for (w_l, seed) in [(0.0, 1), (0.5, 2), (0.9, 3)] {
        let mut cfg = tiny(w_l, 30_000, 2_000);
        cfg.seed = seed;
        let w = cfg.workload.generate(cfg.seed).unwrap();
        let idx = MapIndex::new(Scheme::BTree);
        let r = run_workload(&idx, &w, &cfg, &|_| {}).unwrap();
        let c = w.counts();
        assert_eq!(r.not_executed_once, 0);
        assert_eq!(r.requests, 30_000);
        for (i, op) in OpKind::ALL.iter().enumerate() {
            assert_eq!(
                idx.calls[i].load(Ordering::SeqCst),
                c[i] + if i == 0 { 2_000 } else { 0 },
                "{op:?} calls"
            );
        }
        // Measured counts exclude the warm-up only.
        let measured: u64 = OpKind::ALL.iter().map(|&o| r.op(o).rp.count).sum();
        assert_eq!(measured, 30_000 - 100);
        assert_eq!(idx.content(), w.expected_final(), "W_l = {w_l}");
        // The run is started once, after the preload and before any request.
        assert_eq!(*idx.started.read().unwrap(), vec![[2_000, 0, 0]]);
        assert_eq!(r.delete_misses, 0);
        // Lookups pick keys present at generation time; a concurrent writer may delete
        // one before the lookup runs (Q_r and Q_w drain independently), so a few miss.
        let lookups = r.lookup.rp.count + count_warm_lookups(&w, 100);
        assert!(r.lookup_hits <= lookups && r.lookup_hits as f64 >= 0.95 * lookups as f64);
        assert!(r.throughput_rps > 0.0 && r.total_s > 0.0);
        // R_q includes R_p, R_o includes R_q (per request, so also on average).
        for o in OpKind::ALL {
            let s = r.op(o);
            assert_eq!(s.ro.count, s.rp.count);
            if s.rp.count > 0 {
                assert!(s.rq.avg_ms >= s.rp.avg_ms - 1e-9);
                assert!(s.rq.max_ms >= s.rp.max_ms * 0.999 - 1e-6 || s.rq.max_ms >= s.rp.p999_ms);
                assert!(s.ro.avg_ms >= s.rq.avg_ms - 1e-9);
                assert!(s.ro.max_ms >= s.rq.max_ms * 0.999 - 1e-6);
            }
        }
    }
}

fn count_warm_lookups(w: &Workload, warmup: usize) -> u64 {
    w.requests[..warmup]
        .iter()
        .filter(|r| r.op == OpKind::Lookup)
        .count() as u64
}

#[test]
fn merge_pauses_show_as_worst_insert_rp_and_lookup_rq_tail() {
    let cfg = tiny(0.6, 20_000, 5_000);
    let idx = MapIndex::new(Scheme::FdXm).with_merges(1_500, 50);
    let r = run(&idx, &cfg).unwrap();
    assert!(idx.merges.load(Ordering::SeqCst) >= 2);
    assert!(
        r.insert.rp.max_ms >= 50.0,
        "worst insert R_p {} ms",
        r.insert.rp.max_ms
    );
    assert!(r.insert.rq.max_ms >= 50.0);
    // With the writers stalled by a merge, Q_w fills and the injector blocks: the insert
    // offered to the full queue waits for a slot, which R_o counts and R_q does not.
    assert!(r.insert.ro.max_ms >= r.insert.rq.max_ms * 0.999);
    assert!(r.insert.ro.avg_ms >= r.insert.rq.avg_ms);
    // Lookups arriving during a merge wait for the write lock to be released.
    assert!(
        r.lookup.rq.max_ms >= 20.0,
        "worst lookup R_q {} ms",
        r.lookup.rq.max_ms
    );
    assert!(
        r.lookup.rq.max_ms > 10.0 * r.lookup.rq.p50_ms.max(0.001),
        "tail {:?}",
        r.lookup.rq
    );
    let merges = idx.merges.load(Ordering::SeqCst) as f64;
    // Quiesced twice: after the preload (the run starts from a settled index) and after
    // the run (final counters).
    assert_eq!(
        r.extra,
        vec![
            ("merges".to_string(), merges),
            ("quiesced".to_string(), 2.0)
        ]
    );
    assert_eq!(r.not_executed_once, 0);
}

#[test]
fn index_error_stops_the_run() {
    let cfg = tiny(0.5, 5_000, 100);
    let w = cfg.workload.generate(cfg.seed).unwrap();
    let victim = w
        .requests
        .iter()
        .find(|r| r.op == OpKind::Insert)
        .unwrap()
        .key;
    let mut idx = MapIndex::new(Scheme::BTree);
    idx.fail_key = Some(victim);
    let e = run_workload(&idx, &w, &cfg, &|_| {}).unwrap_err();
    assert!(
        matches!(
            e,
            BenchError::Index {
                op: OpKind::Insert,
                scheme: Scheme::BTree,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("device full"));
    assert!(
        e.to_string()
            .starts_with("index 'B+tree' failed insert of key"),
        "{e}"
    );
    // A failing preload is reported as such.
    let mut idx = MapIndex::new(Scheme::BTree);
    idx.fail_key = Some(1);
    assert!(matches!(
        run(&idx, &cfg).unwrap_err(),
        BenchError::Preload { key: 1, .. }
    ));
}

#[test]
fn bad_config_is_rejected() {
    let idx = MapIndex::new(Scheme::BTree);
    let mut c = tiny(0.5, 10, 10);
    c.readers = 0;
    assert!(matches!(run(&idx, &c), Err(BenchError::Config(_))));
    let mut c = tiny(0.5, 10, 10);
    c.queue_slots = 1;
    assert!(matches!(run(&idx, &c), Err(BenchError::Config(_))));
    let c = BenchConfig::small_tpcc(1);
    assert!(c.with_lookup_ratio(0.5).is_err());
}

#[test]
fn gt_workload_runs_and_matches() {
    let mut cfg = BenchConfig::small_tpcc(2);
    cfg.workload = WorkloadSpec::Gt(GtSpec {
        customers_per_district: 30,
        ..GtSpec::paper(2, 20_000)
    });
    let w = cfg.workload.generate(cfg.seed).unwrap();
    let idx = MapIndex::new(Scheme::BTree);
    let r = run_workload(&idx, &w, &cfg, &|_| {}).unwrap();
    assert_eq!(idx.content(), w.expected_final());
    assert_eq!(r.generator, Generator::Gt);
    assert_eq!(r.delete_misses, 0);
    assert!((r.fractions[0] - 8.0 / 93.0).abs() < 0.01);
    // Queues split by the lookup : write ratio.
    assert_eq!(r.q_r_slots + r.q_w_slots, cfg.queue_slots);
    assert!(r.q_r_slots < r.q_w_slots / 5);
}

#[test]
fn json_table_and_chart() {
    let cfg = tiny(0.5, 5_000, 500);
    let idx = MapIndex::new(Scheme::BTree);
    let r = run(&idx, &cfg).unwrap();
    let v = serde_json::to_value(&r).unwrap();
    for k in [
        "insert_rp_max_ms",
        "insert_rp_avg_ms",
        "lookup_rq_avg_ms",
        "lookup_rq_std_ms",
        "insert_ro_max_ms",
        "lookup_ro_avg_ms",
        "delete_rq_p999_ms",
        "throughput_rps",
        "total_s",
        "seed",
    ] {
        assert!(v.get(k).is_some_and(|x| !x.is_null()), "missing {k}");
    }
    assert_eq!(v["insert_count"].as_u64(), Some(r.insert.rp.count));
    assert!(
        v["distributions"]["lookup"]["rp_percentiles"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
    );
    let t = r.table().to_string();
    assert!(t.contains("R_p") && t.contains("lookup") && t.contains("p99.9"));
    let text = r.report_text("csd bench fdtree --seed 42");
    assert!(text.contains("seed: 42  reproduce: csd bench fdtree --seed 42"));
    let dir = tempfile::tempdir().unwrap();
    let f = r.histogram_chart().write(dir.path(), "dist").unwrap();
    assert!(std::fs::metadata(&f.png).unwrap().len() > 1000);
}

#[test]
fn sweep_and_report() {
    let cfg = tiny(0.5, 4_000, 500);
    let ratios = [0.0, 0.5, 0.9, 1.0];
    let mut all = Vec::new();
    for (name, every) in [(Scheme::FdFc, 0u64), (Scheme::FdXm, 400)] {
        let make = |_w: f64| -> Result<Arc<dyn BenchIndex>, IndexError> {
            Ok(Arc::new(MapIndex::new(name).with_merges(every, 5)))
        };
        let res = sweep(&ratios, make, &cfg, &|_, _| {}).unwrap();
        assert_eq!(res.len(), ratios.len());
        for (r, w) in res.iter().zip(ratios) {
            assert_eq!(r.w_lookup, w);
            assert_eq!(r.scheme, name);
        }
        all.extend(res);
    }
    // W_l = 1: no writes measured; W_l = 0: no lookups.
    assert_eq!(all[3].insert.rp.count, 0);
    assert_eq!(all[0].lookup.rp.count, 0);
    let dir = tempfile::tempdir().unwrap();
    let files = write_report(
        &all,
        &paper::figure6(),
        dir.path(),
        "csd repro fd-tree --small",
    )
    .unwrap();
    let md = std::fs::read_to_string(&files.markdown).unwrap();
    assert!(md.contains("reproduce: `csd repro fd-tree --small`"));
    assert!(md.contains("| lookup ratio W_l | FD+FC | FD+XM |"));
    assert!(md.contains("Paper vs measured"));
    assert!(md.contains("33000 ms–38000 ms"), "paper range present");
    assert!(files.plots.len() >= 12);
    for p in &files.plots {
        assert!(p.png.exists() && p.svg.exists());
    }
    let svg = std::fs::read_to_string(dir.path().join("fig6_insert_rp_max_ms.svg")).unwrap();
    assert!(
        svg.contains("paper FD+XM"),
        "dashed paper series in the worst-insert plot"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&files.json).unwrap()).unwrap();
    assert_eq!(json.as_array().map(|a| a.len()), Some(8));
    // Every wall-clock run says how busy the rest of the machine was (Linux: `/proc`).
    assert!(md.contains("| others' CPU, cores |"));
    assert!(json[0].get("others_cpu_cores").is_some());
    if std::path::Path::new("/proc/stat").exists() {
        assert!(all.iter().all(|r| r.machine.is_some()));
        assert!(md.contains("Wall-clock runs: other processes used at most"));
        assert!(
            json[0]["others_cpu_cores"]
                .as_f64()
                .is_some_and(|c| c >= 0.0)
        );
    }
    // A bad ratio is an error, not a panic.
    let make = |_w: f64| -> Result<Arc<dyn BenchIndex>, IndexError> {
        Ok(Arc::new(MapIndex::new(Scheme::BTree)))
    };
    assert!(sweep(&[1.5], make, &cfg, &|_, _| {}).is_err());
}

#[test]
fn paper_config_matches_setup() {
    let c = BenchConfig::paper(0.8);
    assert_eq!(
        (c.readers, c.writers, c.queue_slots, c.warmup),
        (6, 2, 5000, 10_000)
    );
    match &c.workload {
        WorkloadSpec::Gr(g) => {
            assert_eq!(
                (g.requests, g.preload, g.delete_min_age),
                (10_000_000, 10_000_000, 100)
            );
            assert!((g.w_insert - 0.1).abs() < 1e-12 && (g.w_delete - 0.1).abs() < 1e-12);
        }
        WorkloadSpec::Gt(_) => panic!("G_R expected"),
    }
    let t = BenchConfig::paper_tpcc(20);
    assert_eq!(cfg_preload(&t), 20 * 10 * 3000 * 3);
}

fn cfg_preload(c: &BenchConfig) -> u64 {
    c.workload.generate(1).map(|w| w.preload.len()).unwrap_or(0)
}

#[test]
fn tpcc_warehouse_sweep_report() {
    let cfgs: Vec<BenchConfig> = [1u32, 2]
        .iter()
        .map(|&w| {
            let mut c = BenchConfig::small_tpcc(w);
            c.workload = WorkloadSpec::Gt(GtSpec {
                customers_per_district: 20,
                ..GtSpec::paper(w, 3_000)
            });
            c.warmup = 100;
            c
        })
        .collect();
    let mut all = Vec::new();
    for name in [Scheme::FdFc, Scheme::FdDs] {
        let make = |_c: &BenchConfig| -> Result<Arc<dyn BenchIndex>, IndexError> {
            Ok(Arc::new(MapIndex::new(name)))
        };
        all.extend(sweep_configs(&cfgs, make, &|_, _| {}).unwrap());
    }
    let dir = tempfile::tempdir().unwrap();
    let files = write_report(
        &all,
        &paper::figure8(),
        dir.path(),
        "csd repro fd-tree --tpcc",
    )
    .unwrap();
    let md = std::fs::read_to_string(&files.markdown).unwrap();
    assert!(md.contains("| warehouses | FD+FC | FD+DS |"), "{md}");
    assert!(md.contains("1.14× FD+DS"));
    assert!(dir.path().join("fig8_throughput_rps.png").exists());
}
