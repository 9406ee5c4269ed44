//! `csd repro flixr`: FLIXR's evaluation (flixr §6, Figures 9, 10 and 11, the
//! index-cache sweep) through `csd_flixr::repro`: every workload under the five
//! configurations and the ideal host index, a markdown report with PNG and SVG plots, a
//! side-by-side table against the paper, and `--json`.

use crate::ReproError;
use crate::args::{IndexSeed, JsonFlag};
use crate::util::progress_bar;
use clap::Args;
use csd_flixr::{Setup, Workload};
use std::path::PathBuf;

/// Options of `csd repro flixr`.
#[derive(Args, Debug, Clone)]
#[command(mut_arg("json", |a| a.help("Print JSON (snake_case keys) instead of the report's tables")))]
pub struct ReproFlixrArgs {
    /// Report directory (markdown + PNG + SVG).
    #[arg(long, default_value = "repro/flixr")]
    out: PathBuf,
    /// Device preset (the paper's Table 2 platform).
    #[arg(long, default_value = "cosmos-openssd")]
    preset: String,
    /// TPC-H scale factor of the microbenchmark and TPC-H data (paper: 10).
    #[arg(long, default_value_t = 0.01)]
    sf: f64,
    /// Operations per microbenchmark and TPC-H query.
    #[arg(long, default_value_t = 20)]
    queries: u32,
    /// Fraction of LINEITEM one Scan or Join query selects.
    #[arg(long, default_value_t = 0.01)]
    selectivity: f64,
    /// TPC-C warehouses (paper: 100).
    #[arg(long, default_value_t = 1)]
    warehouses: u32,
    /// TPC-C rows per warehouse: the specification's (spec) or a tenth (reduced).
    #[arg(long, value_enum, default_value = "spec")]
    tpcc_population: Population,
    /// TPC-C transactions per run.
    #[arg(long, default_value_t = 100)]
    tpcc_txns: u32,
    #[command(flatten)]
    rng: IndexSeed,
    /// Host DRAM for the host B+tree's nodes, KiB (default: the paper's setting, the
    /// trees' inner levels; see csd_flixr::HostCache).
    #[arg(long)]
    host_cache_kib: Option<u64>,
    /// FLIXR index cache in device DRAM, MiB (paper: 16).
    #[arg(long, default_value_t = 16)]
    index_cache_mib: u64,
    /// In-SSD B+tree node cache in device DRAM, an LRU of this many MiB (default: the
    /// trees' inner levels, what the paper's 16 MiB holds at its scale; see
    /// csd_flixr::NodeCache).
    #[arg(long)]
    node_cache_mib: Option<u64>,
    /// Share of controller DRAM for the FTL's MAP cache.
    #[arg(long, default_value_t = 0.5)]
    map_cache_share: f64,
    /// Commands the host keeps in flight.
    #[arg(long, default_value_t = 8)]
    qd: usize,
    /// Bytes of a table page, KiB: the device's LBA, so one FTL entry and one per-page
    /// index per page (paper: 16, the InnoDB page of its MySQL setup and the Cosmos+
    /// firmware's mapping slice; see csd_flixr::Setup::page_kib). Default: 16, or the
    /// preset's flash page where that is smaller.
    #[arg(long)]
    page_kib: Option<u64>,
    /// How each measured run's commands are placed in modeled time: `calendar` or
    /// `events` (the event core: every resource first-come first-served in
    /// modeled-arrival order; docs/time-model.md). Loading stays on calendars.
    #[arg(long, default_value = csd_sim::events::TimeModel::default().name(), value_parser = crate::ycsb::parse_time_model)]
    time_model: csd_sim::events::TimeModel,
    /// Workloads (default all): scan, join, insert, delete, tpcc-neworder,
    /// tpcc-payment, tpch-q1, tpch-q4, tpch-q6, tpch-q14.
    #[arg(long, value_delimiter = ',', value_parser = parse_workload)]
    workloads: Vec<Workload>,
    /// Index-cache sizes (KiB) for the sweep of Scan under FLIXR; given with no value
    /// (`--cache-sweep-kib` alone): no sweep.
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "4,64,16384")]
    cache_sweep_kib: Vec<u64>,
    /// Further TPC-H scale factors for the scale trend (the microbenchmarks and TPC-H
    /// re-run at each; the largest one's figure is each headline's measured re-run in the
    /// side-by-side table, every scale's in the trend table); given with no value: no
    /// trend. Default by a stated rule: one decade above the default SF 0.01 in
    /// half-decade steps (0.03, 0.1).
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "0.03,0.1")]
    trend_sf: Vec<f64>,
    /// Further TPC-C warehouse counts for the scale trend (NewOrder and Payment re-run at
    /// each, a measured re-run of `--warehouses` per headline); given with no value: no
    /// warehouse trend. Default by a stated rule: half-decade steps above the default
    /// 1 warehouse, as `--trend-sf` steps, up to the largest whose re-run keeps `csd repro
    /// all` within its 30-minute aim on a 2-core machine: 3 (README, `csd repro flixr`,
    /// has the cost of 3 and 10).
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "3")]
    trend_warehouses: Vec<u32>,
    /// Host B+tree caches to sweep under the host index, a parameter the paper does not
    /// report: `none` (nothing cached) or a percentage of the leaves kept beside the
    /// inner levels. Default by a stated rule: none and quarters of the leaves up to
    /// all; given with no value: no sweep. Sweep points never change a status (see
    /// `csd_flixr::repro::Sensitivity`).
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "none,25,50,75,100", value_parser = parse_host_cache_point)]
    sweep_host_cache: Vec<HostCachePoint>,
    /// Multiples of the preset's firmware line fill (`isp.dram_access_cycles`, an
    /// assumption of the preset) to sweep under the in-SSD B+tree, FLIXR-S and FLIXR-HS.
    /// Default by a stated rule: a quarter to four times, in factors of two; given with
    /// no value: no sweep.
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "0.25,0.5,2,4")]
    sweep_dram_factor: Vec<f64>,
    /// The B+tree configurations' optimizer for this run: a range over this percentage of
    /// a table's key span is read by a full scan instead of through the index (csd's
    /// choice, 25); `off`: every range through the index (the paper describes no
    /// optimizer, §5).
    #[arg(long, default_value = "25", value_parser = parse_full_scan_point)]
    full_scan: FullScanPoint,
    /// Optimizer settings to sweep under the host index, the ideal host index and the
    /// in-SSD B+tree (percentages as `--full-scan`, or `off`). Default by a stated rule:
    /// csd's quarter of the key span doubled to the whole span, where no range scans (50,
    /// off); given with no value: no sweep.
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "50,off", value_parser = parse_full_scan_point)]
    sweep_full_scan: Vec<FullScanPoint>,
    /// KiB of a host and in-SSD B+tree node, 4 up to the table page (`--page-kib`); by
    /// default a node is a table page (16 KiB: InnoDB keeps index nodes in pages of its
    /// table page size; fan-out 682).
    #[arg(long)]
    node_kib: Option<u32>,
    /// Node sizes, KiB, to sweep under the host index, the ideal host index and the
    /// in-SSD B+tree. Default by a stated rule: the smallest node, 4 KiB (csd's until
    /// 2026-12-07; the paper states no node size); given with no value: no sweep.
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "4")]
    sweep_node_kib: Vec<u32>,
    #[command(flatten)]
    report: JsonFlag,
}

/// TPC-C population (csd_flixr::tpcc::Population).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Population {
    /// The specification's rows per warehouse.
    Spec,
    /// A tenth of them.
    Reduced,
}

/// A point of `--sweep-host-cache`: `None` caches nothing, `Some(p)` keeps `p`% of the
/// leaves beside the inner levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostCachePoint(Option<u32>);

/// `keyword` (`None`) or a percentage 0..=100 of `what` (`Some`), `%` allowed.
fn percent_or(keyword: &str, what: &str, v: &str) -> Result<Option<u32>, String> {
    if v.eq_ignore_ascii_case(keyword) {
        return Ok(None);
    }
    match v.trim_end_matches('%').parse::<u32>() {
        Ok(p) if p <= 100 => Ok(Some(p)),
        _ => Err(format!(
            "`{keyword}` or a percentage of {what}, 0 to 100 (got {v:?})"
        )),
    }
}

/// `none` or a percentage 0..=100.
fn parse_host_cache_point(v: &str) -> Result<HostCachePoint, String> {
    percent_or("none", "the leaves", v).map(HostCachePoint)
}

/// A `--full-scan` setting: `Some(p)` scans a range over `p`% of the key span, `None`
/// (`off`) never does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FullScanPoint(Option<u32>);

impl FullScanPoint {
    /// As [`csd_flixr::Setup::full_scan_fraction`].
    fn fraction(self) -> Option<f64> {
        self.0.map(|p| f64::from(p) / 100.0)
    }
}

/// `off` or a percentage 0..=100.
fn parse_full_scan_point(v: &str) -> Result<FullScanPoint, String> {
    percent_or("off", "the key span", v).map(FullScanPoint)
}

/// A `--workloads` name: one of [`Workload::ALL`].
fn parse_workload(name: &str) -> Result<Workload, String> {
    Workload::parse(name)
        .ok_or_else(|| format!("one of {}", Workload::ALL.map(|w| w.name()).join(", ")))
}

/// `csd repro flixr`.
/// Returns the comparisons with the paper.
pub fn repro_flixr(a: &ReproFlixrArgs) -> Result<Vec<csd_paper::Comparison>, ReproError> {
    let workloads: Vec<Workload> = if a.workloads.is_empty() {
        Workload::ALL.to_vec()
    } else {
        a.workloads.clone()
    };
    if a.cache_sweep_kib.contains(&0) {
        return Err(ReproError::Usage(
            "--cache-sweep-kib sizes are KiB, at least 1".into(),
        ));
    }
    let setup = Setup {
        preset: a.preset.clone(),
        sf: a.sf,
        queries: a.queries,
        selectivity: a.selectivity,
        warehouses: a.warehouses,
        tpcc_txns: a.tpcc_txns,
        tpcc_population: match a.tpcc_population {
            Population::Spec => csd_flixr::tpcc::Population::Spec,
            Population::Reduced => csd_flixr::tpcc::Population::Reduced,
        },
        seed: a.rng.seed,
        host_cache: a
            .host_cache_kib
            .map_or(csd_flixr::HostCache::InnerLevels, csd_flixr::HostCache::Kib),
        index_cache_kib: a.index_cache_mib << 10,
        node_cache: a
            .node_cache_mib
            .map_or(csd_flixr::NodeCache::InnerLevels, |m| {
                csd_flixr::NodeCache::Bytes(m << 20)
            }),
        map_cache_share: a.map_cache_share,
        qd: a.qd,
        page_kib: a.page_kib,
        time_model: a.time_model,
        overrides: Vec::new(),
        full_scan_fraction: a.full_scan.fraction(),
        node_kib: a.node_kib,
    };
    if let Some(f) = a
        .sweep_dram_factor
        .iter()
        .find(|f| !(f.is_finite() && **f > 0.0))
    {
        return Err(ReproError::Usage(format!(
            "--sweep-dram-factor {f}: a multiple above 0"
        )));
    }
    let sens = csd_flixr::repro::Sensitivity {
        host_cache: a.sweep_host_cache.iter().map(|p| p.0).collect(),
        dram_factor: a.sweep_dram_factor.clone(),
        full_scan: a.sweep_full_scan.iter().map(|p| p.0).collect(),
        node_kib: a.sweep_node_kib.clone(),
    };
    setup
        .check()
        .map_err(|e| ReproError::Usage(e.to_string()))?;
    for &k in &a.sweep_node_kib {
        Setup {
            node_kib: Some(k),
            ..setup.clone()
        }
        .check()
        .map_err(|e| ReproError::Usage(format!("--sweep-node-kib: {e}")))?;
    }
    csd_plot::guard_output(&a.out.join("report.md"), &["md"])
        .map_err(|e| ReproError::Usage(e.to_string()))?;
    let scaled = workloads.iter().filter(|w| !w.is_tpcc()).count();
    let by_sf = a.trend_sf.iter().filter(|&&sf| sf != a.sf).count();
    let by_w = a
        .trend_warehouses
        .iter()
        .filter(|&&w| w != a.warehouses)
        .count();
    let runs = (workloads.len() * 6
        + a.cache_sweep_kib.len() * 2
        + workloads.len() * (sens.host_cache.len() + sens.dram_factor.len() * 3)
        + by_sf * scaled * 6
        + by_w * (workloads.len() - scaled) * 6) as u64;
    let pb = if a.report.json {
        indicatif::ProgressBar::hidden()
    } else {
        progress_bar(Some(runs), "runs")
    };
    for &sf in &a.trend_sf {
        Setup {
            sf,
            ..setup.clone()
        }
        .check()
        .map_err(|e| ReproError::Usage(format!("--trend-sf {sf}: {e}")))?;
    }
    for &warehouses in &a.trend_warehouses {
        Setup {
            warehouses,
            ..setup.clone()
        }
        .check()
        .map_err(|e| ReproError::Usage(format!("--trend-warehouses {warehouses}: {e}")))?;
    }
    let trend = csd_flixr::repro::Trend {
        sf: a.trend_sf.clone(),
        warehouses: a.trend_warehouses.clone(),
    };
    let r = csd_flixr::repro::run(
        &setup,
        &workloads,
        &a.cache_sweep_kib,
        &trend,
        &sens,
        crate::reproduce::line(),
        |msg| {
            pb.inc(1);
            pb.set_message(msg.to_string());
        },
    )
    .map_err(|e| ReproError::Usage(e.to_string()))?;
    pb.finish_and_clear();
    let md =
        csd_flixr::repro::write_report(&r, &a.out).map_err(|e| ReproError::Usage(e.to_string()))?;
    if a.report.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&csd_flixr::repro::json(&r)).unwrap_or_default()
        );
    } else {
        println!("{md}");
        println!("report: {}", a.out.join("report.md").display());
    }
    Ok(r.comparison)
}

#[cfg(test)]
mod tests {
    use super::ReproFlixrArgs;
    use crate::all::parse_args;

    #[test]
    fn list_options_given_alone_are_empty_and_defaults_follow_their_rules() {
        let d: ReproFlixrArgs = parse_args("flixr", &[]).expect("defaults");
        assert_eq!(d.cache_sweep_kib, vec![4, 64, 16384]);
        assert_eq!(d.trend_sf, vec![0.03, 0.1]);
        assert_eq!(d.trend_warehouses, vec![3]);
        let none: ReproFlixrArgs = parse_args(
            "flixr",
            &["--cache-sweep-kib", "--trend-sf", "--trend-warehouses"],
        )
        .expect("no sweep, no trend");
        assert!(none.cache_sweep_kib.is_empty());
        assert!(none.trend_sf.is_empty());
        assert!(none.trend_warehouses.is_empty());
        use super::HostCachePoint as P;
        assert_eq!(
            d.sweep_host_cache,
            vec![P(None), P(Some(25)), P(Some(50)), P(Some(75)), P(Some(100))]
        );
        assert_eq!(d.sweep_dram_factor, vec![0.25, 0.5, 2.0, 4.0]);
        use super::FullScanPoint as F;
        assert_eq!(d.full_scan, F(Some(25)));
        assert_eq!(d.full_scan.fraction(), Some(0.25));
        assert_eq!(d.sweep_full_scan, vec![F(Some(50)), F(None)]);
        assert_eq!((d.node_kib, d.sweep_node_kib.as_slice()), (None, &[4][..]));
        let none: ReproFlixrArgs = parse_args(
            "flixr",
            &[
                "--sweep-host-cache",
                "--sweep-dram-factor",
                "--sweep-full-scan",
                "--sweep-node-kib",
            ],
        )
        .expect("no sweeps");
        assert!(
            none.sweep_host_cache.is_empty()
                && none.sweep_dram_factor.is_empty()
                && none.sweep_full_scan.is_empty()
                && none.sweep_node_kib.is_empty()
        );
        let off: ReproFlixrArgs = parse_args("flixr", &["--full-scan", "OFF"]).expect("off");
        assert_eq!(off.full_scan.fraction(), None);
        assert!(parse_args::<ReproFlixrArgs>("flixr", &["--full-scan", "101"]).is_err());
        assert!(parse_args::<ReproFlixrArgs>("flixr", &["--sweep-full-scan", "50,never"]).is_err());
        // Bad points are refused by the parser with the rule in the message.
        let bad = parse_args::<ReproFlixrArgs>("flixr", &["--sweep-host-cache", "120"]);
        assert!(bad.is_err());
        assert!(parse_args::<ReproFlixrArgs>("flixr", &["--sweep-host-cache", "none,50%"]).is_ok());
    }
}
