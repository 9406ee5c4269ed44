//! What `csd repro fd-tree` runs, without the CLI (whose SQL front end pulls DataFusion
//! into a build): the same device (the `x25e-sata` preset, in memory), the same FD+tree
//! configuration and the same harness configurations, from the defaults in
//! [`csd_idxbench::repro`]; it prints one line per run, the Figure 6 comparison at
//! `W_l = 0.8` and the paper's orderings with a verdict each.
//!
//! ```text
//! cargo run --release -p csd-idxbench --example fdtree_repro            # the defaults
//! cargo run --release -p csd-idxbench --example fdtree_repro -- fig=6 w=0.8 schemes=xm,fc
//! ```
//!
//! Options (`key=value`): `schemes` (xm,ds,fc), `fig` (6, 7, 8 or all), `w` (Figure 6
//! lookup ratios), `preload`, `requests`, `sizes`, `warehouses`, `l0_kib`, `k`,
//! `cache_mib`, `merge_at`, `clock` (paced, paced:SCALE, virtual), `seed`, `threads`
//! (`T_r/T_w`; default from [`csd_idxbench::repro::scaled_threads`]).
//!
//! Diagnosis (environment): `DIAG=MS` lists requests slower than MS ms and the longest
//! merges of each run; with `GDB=1` as well, the first request in flight for over 40 ms
//! triggers one `gdb` stack dump of all threads into /tmp/fdtree_stall_bt.txt;
//! `FTL_CKPT_LOG_PAGES=N` sets the FTL's checkpoint interval (log pages).

use csd_device::NvmeDevice;
use csd_fdtree::{FdConfig, FdTree};
use csd_ftl::{Ftl, FtlConfig};
use csd_host::SharedDevice;
use csd_idxbench::repro::{self, ReproParams};
use csd_idxbench::{BenchConfig, BenchIndex, BenchResult, IndexError, Scheme};
use csd_sim::ClockMode;
use std::sync::Arc;
use std::time::Instant;

/// The CLI's adapter (crates/cli/src/fdbench.rs `FdBench`), line for line.
struct FdBench {
    tree: FdTree,
    scheme: Scheme,
    dev: SharedDevice,
    mode: ClockMode,
    diag: Option<Diag>,
}

/// `diag=MS`: requests slower than MS ms, with their wall offset from the run's start,
/// and the merge intervals (a sampler polls the tree every 5 ms).
struct Diag {
    min_ms: f64,
    t0: std::sync::Mutex<Option<Instant>>,
    slow: std::sync::Mutex<Vec<(f64, f64, &'static str, u64)>>,
    /// Calls in flight: start instants (for the `GDB=1` stack dump of a stall).
    inflight: std::sync::Mutex<std::collections::HashMap<u64, Instant>>,
    next: std::sync::atomic::AtomicU64,
}

impl FdBench {
    fn timed<T>(&self, op: &'static str, f: impl FnOnce() -> T) -> T {
        let Some(d) = &self.diag else { return f() };
        let a = Instant::now();
        let Some(t0) = *d.t0.lock().unwrap() else {
            return f();
        };
        let m = 0;
        let id = d.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        d.inflight.lock().unwrap().insert(id, a);
        let r = f();
        d.inflight.lock().unwrap().remove(&id);
        let ms = a.elapsed().as_secs_f64() * 1e3;
        if ms >= d.min_ms {
            d.slow
                .lock()
                .unwrap()
                .push((a.duration_since(t0).as_secs_f64() * 1e3, ms, op, m));
        }
        r
    }
}

fn ie(e: impl std::fmt::Display) -> IndexError {
    IndexError::new(e.to_string())
}

impl BenchIndex for FdBench {
    fn insert(&self, k: u64, v: u64) -> Result<(), IndexError> {
        self.timed("ins", || self.tree.insert(k, v)).map_err(ie)
    }
    fn delete(&self, k: u64) -> Result<bool, IndexError> {
        self.timed("del", || self.tree.delete(k)).map_err(ie)
    }
    fn lookup(&self, k: u64) -> Result<Option<u64>, IndexError> {
        self.timed("look", || self.tree.lookup(k)).map_err(ie)
    }
    fn scheme(&self) -> Scheme {
        self.scheme
    }
    fn quiesce(&self) -> Result<(), IndexError> {
        self.tree.wait_for_merges().map_err(ie)
    }
    fn start_run(&self) -> Result<(), IndexError> {
        self.dev.set_clock(self.mode);
        self.tree.reset_peaks();
        if let Some(d) = &self.diag {
            *d.t0.lock().unwrap() = Some(Instant::now());
            let base = self.tree.stats().merges;
            d.slow.lock().unwrap().push((0.0, 0.0, "base", base));
        }
        Ok(())
    }
    fn extra_stats(&self) -> Vec<(String, f64)> {
        self.tree.stats().bench_figures()
    }
    fn virtual_start(&self) -> Option<csd_sim::SimTime> {
        (self.mode == ClockMode::Virtual).then(|| self.dev.latest_instant())
    }
    /// The device is virtual until the timed run starts.
    fn preload_start(&self) -> Option<csd_sim::SimTime> {
        Some(self.dev.latest_instant())
    }
}

fn make(p: &ReproParams, scheme: &str) -> Result<Arc<FdBench>, IndexError> {
    let (s, bench_scheme) = match scheme {
        "xm" => (csd_fdtree::Scheme::Xm, Scheme::FdXm),
        "ds" => (csd_fdtree::Scheme::Ds, Scheme::FdDs),
        "fc" => (csd_fdtree::Scheme::Fc, Scheme::FdFc),
        o => return Err(IndexError::new(format!("unknown scheme `{o}`"))),
    };
    let cfg = csd_sim::DeviceConfig::preset("x25e-sata").map_err(ie)?;
    let nand = csd_nand::Nand::new_in_memory(cfg).map_err(ie)?;
    let mut fcfg = FtlConfig::default();
    if let Ok(v) = std::env::var("FTL_CKPT_LOG_PAGES") {
        // Diagnosis: how often the FTL checkpoints inside a host write.
        fcfg.checkpoint_log_pages = v.parse().map_err(ie)?;
    }
    let ftl = Ftl::format(nand, fcfg).map_err(ie)?;
    let dev = SharedDevice::new(NvmeDevice::new(ftl), ClockMode::Virtual).map_err(ie)?;
    let fd = FdConfig {
        scheme: s,
        l0_bytes: p.l0_kib * 1024,
        size_ratio: p.size_ratio,
        cache_bytes: p.cache_mib << 20,
        durable: false,
        merge_at: p.merge_at,
        ..FdConfig::default()
    };
    let tree = FdTree::create(dev.clone(), fd).map_err(ie)?;
    let mode = ClockMode::parse(&p.clock).ok_or_else(|| ie(format!("bad clock {}", p.clock)))?;
    Ok(Arc::new(FdBench {
        tree,
        scheme: bench_scheme,
        dev,
        mode,
        diag: std::env::var("DIAG")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(|min_ms| Diag {
                min_ms,
                t0: Default::default(),
                slow: Default::default(),
                inflight: Default::default(),
                next: Default::default(),
            }),
    }))
}

fn extra(r: &BenchResult, k: &str) -> f64 {
    r.extra
        .iter()
        .find(|(n, _)| n == k)
        .map_or(f64::NAN, |e| e.1)
}

fn line(what: &str, r: &BenchResult) {
    println!(
        "{:6} {:>10} thr {:>7.0}/s  ins R_p max {:>8.1} ms avg {:>6.3}  upd max {:>8.1}  look R_p max {:>8.1} avg {:>6.3}  merges {:>3} max merge {:>7.1} ms  room waits {:>5} max {:>7.1} ms  run {:>5.1} s  others' CPU {}",
        r.scheme,
        what,
        r.throughput_rps,
        r.insert.rp.max_ms,
        r.insert.rp.avg_ms,
        r.insert.rp.max_ms.max(r.delete.rp.max_ms),
        r.lookup.rp.max_ms,
        r.lookup.rp.avg_ms,
        extra(r, "merges"),
        extra(r, "max_merge_ms"),
        extra(r, "room_waits"),
        extra(r, "max_room_wait_ms"),
        r.total_s,
        csd_idxbench::machine::cell(r.machine)
    );
}

fn run_all(
    p: &ReproParams,
    schemes: &[String],
    cfgs: &[(String, BenchConfig)],
) -> Result<Vec<BenchResult>, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    for (what, c) in cfgs {
        for s in schemes {
            let idx = make(p, s)?;
            let stop = std::sync::atomic::AtomicBool::new(false);
            let mut merges_iv: Vec<(f64, f64, Vec<u64>)> = Vec::new();
            let r = std::thread::scope(|sc| {
                let sampler = idx.diag.as_ref().map(|d| {
                    let (idx, stop) = (&idx, &stop);
                    sc.spawn(move || {
                        let mut iv = Vec::new();
                        let mut cur: Option<(f64, Vec<u64>)> = None;
                        let mut dumped = false;
                        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                            std::thread::sleep(std::time::Duration::from_millis(5));
                            let Some(t0) = *d.t0.lock().unwrap() else {
                                continue;
                            };
                            let oldest = d.inflight.lock().unwrap().values().min().copied();
                            if !dumped
                                && std::env::var("GDB").is_ok()
                                && oldest.is_some_and(|o| o.elapsed().as_millis() > 40)
                            {
                                dumped = true;
                                let pid = std::process::id().to_string();
                                let out = std::process::Command::new("gdb")
                                    .args(["-p", &pid, "-batch", "-ex", "thread apply all bt 16"])
                                    .output();
                                if let Ok(o) = out {
                                    let _ = std::fs::write("/tmp/fdtree_stall_bt.txt", o.stdout);
                                }
                            }
                            let st = idx.tree.stats();
                            let now = t0.elapsed().as_secs_f64() * 1e3;
                            match (&cur, st.merging) {
                                (None, true) => cur = Some((now, st.level_blocks.clone())),
                                (Some((a, lb)), false) => {
                                    iv.push((*a, now, lb.clone()));
                                    cur = None;
                                }
                                _ => {}
                            }
                        }
                        iv
                    })
                });
                let r = csd_idxbench::run(&*idx, c);
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                if let Some(h) = sampler {
                    merges_iv = h.join().unwrap();
                }
                r
            })?;
            line(what, &r);
            if let Some(d) = &idx.diag {
                let mut iv = merges_iv;
                iv.sort_by(|a, b| (b.1 - b.0).total_cmp(&(a.1 - a.0)));
                for (a, b, lb) in iv.iter().take(4) {
                    println!(
                        "    merge {a:>9.1}..{b:>9.1} ms ({:>6.1} ms) levels before {lb:?}",
                        b - a
                    );
                }
                let slow = d.slow.lock().unwrap();
                let mut v: Vec<_> = slow.iter().filter(|x| x.2 != "base").collect();
                v.sort_by(|a, b| b.1.total_cmp(&a.1));
                for (t, ms, op, m) in v.iter().take(8) {
                    let inside = iv.iter().any(|(a, b, _)| *t <= *b && t + ms >= *a);
                    println!(
                        "    slow {op:4} at {t:>9.1} ms took {ms:>7.1} ms (merges before {m}, overlaps merge {inside})"
                    );
                }
                let n_in = v
                    .iter()
                    .filter(|(t, ms, _, _)| iv.iter().any(|(a, b, _)| *t <= *b && t + ms >= *a))
                    .count();
                println!(
                    "    slow ops: {} ({} overlap a merge); merge intervals {}",
                    v.len(),
                    n_in,
                    iv.len()
                );
            }
            out.push(r);
        }
    }
    Ok(out)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut p = ReproParams::default();
    let mut schemes: Vec<String> = vec!["xm".into(), "ds".into(), "fc".into()];
    let mut fig = "all".to_string();
    for a in std::env::args().skip(1) {
        let Some((k, v)) = a.split_once('=') else {
            return Err(format!("argument `{a}` is not key=value").into());
        };
        match k {
            "schemes" => schemes = v.split(',').map(str::to_string).collect(),
            "fig" => fig = v.to_string(),
            _ => p.set(k, v)?,
        }
    }
    println!("{}; uptime: {}", p.describe(), uptime());
    let t0 = Instant::now();
    let mut fig6 = Vec::new();
    let mut fig7 = Vec::new();
    let mut fig8 = Vec::new();
    if fig == "all" || fig == "6" {
        let cfgs: Vec<(String, BenchConfig)> = p
            .lookup_ratios
            .iter()
            .map(|&w| Ok((format!("W_l={w}"), repro::fig6_config(&p, w)?)))
            .collect::<Result<_, csd_idxbench::BenchError>>()?;
        fig6 = run_all(&p, &schemes, &cfgs)?;
    }
    if fig == "all" || fig == "7" {
        let cfgs: Vec<(String, BenchConfig)> = p
            .sizes
            .iter()
            .map(|&n| (format!("N={n}"), repro::fig7_config(&p, n)))
            .collect();
        fig7 = run_all(&p, &schemes, &cfgs)?;
    }
    if fig == "all" || fig == "8" {
        let cfgs: Vec<(String, BenchConfig)> = p
            .warehouses
            .iter()
            .map(|&w| (format!("G_T w={w}"), repro::fig8_config(&p, w)))
            .collect();
        fig8 = run_all(&p, &schemes, &cfgs)?;
    }
    println!(
        "wall {:.1} s; uptime: {}",
        t0.elapsed().as_secs_f64(),
        uptime()
    );
    for c in repro::check_orderings(&fig6, &fig7, &fig8) {
        println!("{c}");
    }
    Ok(())
}

fn uptime() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
