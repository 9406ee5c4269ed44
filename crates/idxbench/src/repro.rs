//! Defaults and checks of `csd repro fd-tree` (the FD+tree paper's §5, Figures 6–8), kept
//! here so that the CLI only reads them and a release build of this crate's
//! `fdtree_repro` example runs exactly the same configurations without the CLI.
//!
//! [`check_orderings`] states each ordering the paper reports and whether a set of runs
//! shows it.

use crate::harness::{BenchConfig, BenchError};
use crate::result::BenchResult;
use crate::workload::{GrSpec, WorkloadSpec};

/// Parameters of the reproduction: the workloads (Figures 6, 7, 8) and the tree.
#[derive(Debug, Clone, PartialEq)]
pub struct ReproParams {
    /// Keys preloaded for the Figure 6 sweep (paper: 10 M).
    pub preload: u64,
    /// Requests per Figure 6 run (paper: 10 M).
    pub requests: u64,
    /// Lookup ratios of the Figure 6 sweep.
    pub lookup_ratios: Vec<f64>,
    /// Initial index sizes of the Figure 7 runs (`W_l = 0.8`, as many requests as keys).
    pub sizes: Vec<u64>,
    /// Warehouses of the Figure 8 (G_T) runs.
    pub warehouses: Vec<u32>,
    /// FD+tree top level L0 in KiB (paper: 256).
    pub l0_kib: usize,
    /// Size ratio k (paper: 24).
    pub size_ratio: u32,
    /// Buffer cache in MiB (paper: 15).
    pub cache_mib: usize,
    /// Fraction of L0 at which a merge starts (paper: "close to full").
    pub merge_at: f64,
    /// Clock of the timed runs (`paced`, `paced:SCALE`, `virtual`).
    pub clock: String,
    /// Seed of the workloads.
    pub seed: u64,
}

impl Default for ReproParams {
    fn default() -> Self {
        Self {
            preload: 400_000,
            requests: 300_000,
            lookup_ratios: crate::paper::setup::FIG6_LOOKUP_RATIOS.to_vec(),
            sizes: vec![100_000, 200_000, 400_000],
            warehouses: vec![2, 4],
            l0_kib: 128,
            size_ratio: 8,
            cache_mib: 1,
            merge_at: 15.0 / 16.0,
            clock: "paced".into(),
            seed: crate::harness::DEFAULT_SEED,
        }
    }
}

impl ReproParams {
    /// Set one parameter from `key=value` text (the example's options).
    pub fn set(&mut self, key: &str, v: &str) -> Result<(), BenchError> {
        fn num<T: std::str::FromStr>(k: &str, v: &str) -> Result<T, BenchError> {
            v.trim()
                .parse()
                .map_err(|_| BenchError::Config(format!("{k}: `{v}` is not a number")))
        }
        fn list<T: std::str::FromStr>(k: &str, v: &str) -> Result<Vec<T>, BenchError> {
            v.split(',')
                .filter(|s| !s.trim().is_empty())
                .map(|s| num(k, s))
                .collect()
        }
        match key {
            "preload" => self.preload = num(key, v)?,
            "requests" => self.requests = num(key, v)?,
            "w" | "lookup_ratios" => self.lookup_ratios = list(key, v)?,
            "sizes" => self.sizes = list(key, v)?,
            "warehouses" => self.warehouses = list(key, v)?,
            "l0_kib" => self.l0_kib = num(key, v)?,
            "k" | "size_ratio" => self.size_ratio = num(key, v)?,
            "cache_mib" => self.cache_mib = num(key, v)?,
            "merge_at" => self.merge_at = num(key, v)?,
            "clock" => self.clock = v.to_string(),
            "seed" => self.seed = num(key, v)?,
            _ => {
                return Err(BenchError::Config(format!(
                    "unknown parameter `{key}`: use preload, requests, w, sizes, warehouses, l0_kib, k, cache_mib, merge_at, clock or seed"
                )));
            }
        }
        Ok(())
    }

    /// One line naming every parameter.
    pub fn describe(&self) -> String {
        let csv = |v: Vec<String>| v.join(",");
        format!(
            "preload={} requests={} w={} sizes={} warehouses={} l0_kib={} k={} cache_mib={} merge_at={} clock={} seed={}",
            self.preload,
            self.requests,
            csv(self.lookup_ratios.iter().map(f64::to_string).collect()),
            csv(self.sizes.iter().map(u64::to_string).collect()),
            csv(self.warehouses.iter().map(u32::to_string).collect()),
            self.l0_kib,
            self.size_ratio,
            self.cache_mib,
            self.merge_at,
            self.clock,
            self.seed
        )
    }
}

/// The Figure 6 configuration at lookup ratio `w_l`.
pub fn fig6_config(p: &ReproParams, w_l: f64) -> Result<BenchConfig, BenchError> {
    fig6_base(p).with_lookup_ratio(w_l)
}

/// The Figure 6 base configuration (G_R at `W_l = 0.8`, the repro's preload and
/// request count, threads and queues as in the paper); the sweep varies `W_l`.
pub fn fig6_base(p: &ReproParams) -> BenchConfig {
    let mut c = BenchConfig::small(0.8);
    c.workload = WorkloadSpec::Gr(GrSpec::with_lookup_ratio(0.8, p.requests, p.preload));
    c.seed = p.seed;
    c
}

/// The Figure 7 configuration for an initial index of `keys` keys: `W_l = 0.8`, the
/// workload as long as the initial index (as in the paper).
pub fn fig7_config(p: &ReproParams, keys: u64) -> BenchConfig {
    let mut c = fig6_base(p);
    c.workload = WorkloadSpec::Gr(GrSpec::with_lookup_ratio(0.8, keys, keys));
    c
}

/// The Figure 8 (G_T) configuration for `warehouses` warehouses.
pub fn fig8_config(p: &ReproParams, warehouses: u32) -> BenchConfig {
    let mut c = BenchConfig::small_tpcc(warehouses);
    c.seed = p.seed;
    c
}

/// One ordering the paper reports, and whether runs show it.
#[derive(Debug, Clone, PartialEq)]
pub struct OrderingCheck {
    /// Figure and condition, e.g. `6, W_l = 0.8`.
    pub figure: String,
    /// The paper's statement.
    pub paper: &'static str,
    /// What the runs measured.
    pub measured: String,
    /// Whether the ordering holds in the runs.
    pub holds: bool,
}

impl std::fmt::Display for OrderingCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "[{}] Figure {}: {} — measured {}",
            if self.holds { "holds" } else { "FLIPPED" },
            self.figure,
            self.paper,
            self.measured
        )
    }
}

/// How much larger FD+DS's and FD+XM's worst insertion `R_p` must be than FD+FC's for
/// the check "they stall during merges" (the paper: ~33 s against ~1 s).
pub const STALL_FACTOR: f64 = 5.0;
/// The paper's headline: FD+XM over FD+FC worst insertion `R_p` (Figure 6(d)).
pub const XM_OVER_FC_MIN: f64 = 20.0;

fn by<'a>(rs: &[&'a BenchResult], scheme: &str) -> Option<&'a BenchResult> {
    rs.iter().copied().find(|r| r.scheme == scheme)
}

/// The paper's orderings over the Figure 6 runs (at `W_l = 0.8`, the headline point),
/// the Figure 7 runs (per index size) and the Figure 8 runs (per warehouse count).
/// Runs of a scheme that is missing are skipped.
pub fn check_orderings(
    fig6: &[BenchResult],
    fig7: &[BenchResult],
    fig8: &[BenchResult],
) -> Vec<OrderingCheck> {
    let mut out = Vec::new();
    let at08: Vec<&BenchResult> = fig6
        .iter()
        .filter(|r| (r.w_lookup - 0.8).abs() < 1e-9)
        .collect();
    insert_checks(&mut out, "6, W_l = 0.8".into(), &at08, true);
    let mut sizes: Vec<u64> = fig7.iter().map(|r| r.preload_keys).collect();
    sizes.dedup();
    for n in sizes {
        let rs: Vec<&BenchResult> = fig7.iter().filter(|r| r.preload_keys == n).collect();
        insert_checks(&mut out, format!("7, {n} keys"), &rs, false);
    }
    let mut whs: Vec<String> = fig8.iter().map(|r| r.workload.clone()).collect();
    whs.dedup();
    for w in whs {
        let rs: Vec<&BenchResult> = fig8.iter().filter(|r| r.workload == w).collect();
        let fc = by(&rs, "FD+FC");
        for other in ["FD+DS", "FD+XM"] {
            if let (Some(fc), Some(o)) = (fc, by(&rs, other)) {
                out.push(OrderingCheck {
                    figure: format!("8(a), {w}"),
                    paper: "FD+FC's throughput is higher than both FD+XM as well as FD+DS",
                    measured: format!(
                        "FD+FC {:.0} req/s, {other} {:.0} req/s ({:.2}x)",
                        fc.throughput_rps,
                        o.throughput_rps,
                        fc.throughput_rps / o.throughput_rps.max(1e-9)
                    ),
                    holds: fc.throughput_rps > o.throughput_rps,
                });
            }
        }
        if let (Some(fc), Some(ds)) = (fc, by(&rs, "FD+DS")) {
            out.push(OrderingCheck {
                figure: format!("8(c), {w}"),
                paper: "FD+FC has lower worst-case insertion R_p [than FD+DS]",
                measured: format!(
                    "FD+FC {:.1} ms, FD+DS {:.1} ms",
                    fc.insert.rp.max_ms, ds.insert.rp.max_ms
                ),
                holds: fc.insert.rp.max_ms < ds.insert.rp.max_ms,
            });
        }
    }
    out
}

fn insert_checks(
    out: &mut Vec<OrderingCheck>,
    figure: String,
    rs: &[&BenchResult],
    headline: bool,
) {
    let Some(fc) = by(rs, "FD+FC") else { return };
    let f = fc.insert.rp.max_ms;
    for other in ["FD+DS", "FD+XM"] {
        let Some(o) = by(rs, other) else { continue };
        let x = o.insert.rp.max_ms / f.max(1e-9);
        out.push(OrderingCheck {
            figure: figure.clone(),
            paper: if other == "FD+DS" {
                "FD+DS stalls during a merge: worst insertion R_p >> FD+FC's (33-38 s vs ~1 s)"
            } else {
                "FD+XM stalls during a merge: worst insertion R_p >> FD+FC's (33-38 s vs ~1 s)"
            },
            measured: format!(
                "{other} {:.1} ms, FD+FC {f:.1} ms ({x:.1}x)",
                o.insert.rp.max_ms
            ),
            holds: x >= STALL_FACTOR,
        });
        if headline && other == "FD+XM" {
            out.push(OrderingCheck {
                figure: figure.clone(),
                paper: "FD+XM / FD+FC worst insertion R_p >= 20x (33-38 s vs ~1 s)",
                measured: format!("{x:.1}x"),
                holds: x >= XM_OVER_FC_MIN,
            });
        }
    }
}
