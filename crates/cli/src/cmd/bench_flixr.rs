//! `csd bench flixr`: FLIXR's "Scan with filtering" microbenchmark (flixr §6.1, Figure 9
//! and Figure 11's traffic split) on an emulated device, one line per configuration.
//!
//! It is the Scan workload of `csd repro flixr` ([`csd_flixr::micro::scan`] over the row
//! store of [`csd_host::rowstore`]), run alone: TPC-H LINEITEM at `--sf` keyed on
//! `l_orderkey`, the same random range queries (from `--seed`) under each configuration
//! of [`IndexKind`] (no index, the host-side B+tree and its ideal all-in-memory form, the
//! in-SSD B+tree, FLIXR-S and FLIXR-HS), every configuration's answers checked equal. The
//! device, the host costs and the host B+tree cache are those of [`csd_flixr::Setup`]; the
//! figures are the row store's counters over the queries.

use crate::CliError;
use crate::args::{IndexSeed, JsonFlag};
use clap::{Args, ValueEnum};
use csd_flixr::{HostCache, Measure, Setup, Workload};
use csd_host::rowstore::IndexKind;

/// A configuration of flixr §6 (the row store's [`IndexKind`]).
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Config {
    /// No index: full scans.
    NoIndex,
    /// Host-side per-row B+tree, nodes on the device, LRU node cache in host DRAM.
    HostIndex,
    /// The host-side B+tree with every node in host memory.
    HostIndexIdeal,
    /// The per-row B+tree kept and traversed by the firmware.
    InSsdBtree,
    /// FLIXR per-page indexes only.
    FlixrS,
    /// FLIXR per-page indexes and the tiny host B+tree.
    FlixrHs,
}

impl Config {
    /// The row store's configuration.
    pub fn kind(self) -> IndexKind {
        match self {
            Config::NoIndex => IndexKind::NoIndex,
            Config::HostIndex => IndexKind::HostBtree,
            Config::HostIndexIdeal => IndexKind::HostBtreeIdeal,
            Config::InSsdBtree => IndexKind::SsdBtree,
            Config::FlixrS => IndexKind::FlixrS,
            Config::FlixrHs => IndexKind::FlixrHS,
        }
    }
}

/// Arguments of `csd bench flixr`.
#[derive(Args, Debug, Clone)]
pub struct BenchFlixrArgs {
    /// Device preset (the paper's platform: cosmos-openssd), shrunk to fit the table.
    #[arg(long, default_value = "cosmos-openssd")]
    pub preset: String,
    /// TPC-H scale factor of LINEITEM (SF 0.01 is about 60,000 rows).
    #[arg(long, default_value_t = 0.03)]
    pub sf: f64,
    /// Queries per configuration.
    #[arg(long, default_value_t = 20)]
    pub queries: u32,
    /// Fraction of the rows each query selects (a range of `l_orderkey`).
    #[arg(long, default_value_t = 0.01)]
    pub selectivity: f64,
    #[command(flatten)]
    pub rng: IndexSeed,
    /// Host DRAM for the host B+tree's node cache, KiB (default: the paper's setting,
    /// the tree's inner levels; see csd_flixr::HostCache).
    #[arg(long)]
    pub host_cache_kib: Option<u64>,
    /// FLIXR index cache in device DRAM, MiB.
    #[arg(long, default_value_t = 16)]
    pub index_cache_mib: u64,
    /// Share of controller DRAM the FTL's MAP cache may use (index-cache misses read MAP
    /// pages from flash only when this cache does not hold them).
    #[arg(long, default_value_t = 0.5)]
    pub map_cache_share: f64,
    /// Commands the host keeps in flight.
    #[arg(long, default_value_t = 8)]
    pub qd: usize,
    /// Bytes of a table page, KiB: the device's LBA, one FTL entry and one per-page
    /// index per page (paper: 16; see csd_flixr::Setup::page_kib). Default: 16, or the
    /// preset's flash page where that is smaller.
    #[arg(long)]
    pub page_kib: Option<u64>,
    /// KiB of a host and in-SSD B+tree node, 4 up to the table page (see
    /// csd_flixr::Setup::node_kib). Default: a node is a table page (InnoDB's index pages).
    #[arg(long)]
    pub node_kib: Option<u32>,
    /// Configurations to run (default: all six).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub configs: Vec<Config>,
    #[command(flatten)]
    pub report: JsonFlag,
}

/// Figures of one configuration over all queries (from the row store's counters).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ConfigFigures {
    /// Configuration (serialized as its name).
    pub config: IndexKind,
    /// Mean modeled time per query, ms.
    pub mean_query_ms: f64,
    /// Queries per minute of modeled time.
    pub queries_per_minute: f64,
    /// Throughput relative to `host-index` (1.0 when it was not run).
    pub speedup_over_host_index: f64,
    /// Index pages (host B+tree nodes) fetched to the host per query.
    pub index_pages_to_host: f64,
    /// Data pages fetched to the host per query.
    pub data_pages_to_host: f64,
    /// Flash reads of index pages per query.
    pub index_flash_reads: f64,
    /// Flash reads of data pages per query.
    pub data_flash_reads: f64,
    /// Flash reads of MAP pages the FTL needed to translate LBAs, per query.
    pub map_flash_reads: f64,
    /// Pages FLIXR skipped per query.
    pub pages_skipped: f64,
    /// Bytes over the host link per query.
    pub host_link_bytes: f64,
    /// Host CPU per query, ms.
    pub host_cpu_ms: f64,
}

impl ConfigFigures {
    /// Per-query figures of `m`.
    fn of(m: &Measure) -> ConfigFigures {
        let q = m.ops.max(1) as f64;
        let t = &m.traffic;
        ConfigFigures {
            config: m.config,
            mean_query_ms: m.modeled_ns as f64 / 1e6 / q,
            queries_per_minute: m.ops_per_minute,
            speedup_over_host_index: m.speedup_over_host_index,
            index_pages_to_host: t.index_pages_to_host as f64 / q,
            data_pages_to_host: t.data_pages_to_host as f64 / q,
            index_flash_reads: t.index_flash_reads as f64 / q,
            data_flash_reads: t.data_flash_reads as f64 / q,
            map_flash_reads: t.map_flash_reads as f64 / q,
            pages_skipped: t.pages_skipped as f64 / q,
            host_link_bytes: t.link_bytes as f64 / q,
            host_cpu_ms: t.host_cpu_ns as f64 / 1e6 / q,
        }
    }
}

impl BenchFlixrArgs {
    /// The evaluation set-up these arguments describe.
    fn setup(&self) -> Setup {
        Setup {
            preset: self.preset.clone(),
            sf: self.sf,
            queries: self.queries,
            selectivity: self.selectivity,
            seed: self.rng.seed,
            host_cache: self
                .host_cache_kib
                .map_or(HostCache::InnerLevels, HostCache::Kib),
            index_cache_kib: self.index_cache_mib << 10,
            map_cache_share: self.map_cache_share,
            qd: self.qd,
            page_kib: self.page_kib,
            node_kib: self.node_kib,
            ..Setup::default()
        }
    }

    /// The configurations to run, in report order.
    fn kinds(&self) -> Vec<IndexKind> {
        if self.configs.is_empty() {
            return IndexKind::ALL.to_vec();
        }
        IndexKind::ALL
            .into_iter()
            .filter(|k| self.configs.iter().any(|c| c.kind() == *k))
            .collect()
    }
}

/// `csd bench flixr --json`: the set-up and the figures per configuration.
#[derive(Debug, serde::Serialize)]
struct BenchFlixrReport<'a> {
    /// Device preset.
    preset: &'a str,
    /// TPC-H scale factor of LINEITEM.
    sf: f64,
    /// Queries per configuration.
    queries: u32,
    /// Fraction of the rows each query selects.
    selectivity: f64,
    /// Seed of the queries.
    seed: u64,
    /// The host B+tree's node cache.
    host_cache: HostCache,
    /// Bytes of a table page (an LBA).
    page_bytes: usize,
    /// Bytes of a B+tree node.
    node_bytes: usize,
    /// The figures, in report order.
    configs: &'a [ConfigFigures],
}

/// Run the benchmark: the figures per configuration.
pub fn figures(a: &BenchFlixrArgs) -> Result<Vec<ConfigFigures>, CliError> {
    let s = a.setup();
    s.check().map_err(|e| CliError::Usage(e.to_string()))?;
    let ms = csd_flixr::run_all(&s, &[Workload::Scan], &a.kinds(), |_| {})
        .map_err(|e| CliError::Usage(e.to_string()))?;
    Ok(ms.iter().map(ConfigFigures::of).collect())
}

/// `csd bench flixr`.
pub fn run(a: &BenchFlixrArgs) -> Result<(), CliError> {
    let t0 = std::time::Instant::now();
    let figs = figures(a)?;
    if a.report.json {
        crate::report::print_json(&BenchFlixrReport {
            preset: &a.preset,
            sf: a.sf,
            queries: a.queries,
            selectivity: a.selectivity,
            seed: a.rng.seed,
            host_cache: a.setup().host_cache,
            page_bytes: a.setup().page_bytes(),
            node_bytes: a.setup().node_bytes(),
            configs: &figs,
        });
        return Ok(());
    }
    println!(
        "FLIXR Scan with filtering (§6.1): preset {}, TPC-H SF {} LINEITEM, {} queries of {}%, {} KiB table pages (one LBA each), B+tree nodes of {}, host B+tree cache {}, seed {}",
        a.preset,
        a.sf,
        a.queries,
        a.selectivity * 100.0,
        a.setup().page_bytes() / 1024,
        a.setup().node_label(),
        a.setup().host_cache,
        a.rng.seed
    );
    println!(
        "{:<17} {:>9} {:>9} {:>8} {:>10} {:>10} {:>10} {:>9} {:>9}",
        "configuration",
        "ms/query",
        "q/min",
        "speedup",
        "index pg",
        "data pg",
        "skipped",
        "map rd",
        "host ms"
    );
    for f in &figs {
        println!(
            "{:<17} {:>9.3} {:>9.0} {:>7.2}x {:>10.1} {:>10.1} {:>10.1} {:>9.1} {:>9.3}",
            f.config,
            f.mean_query_ms,
            f.queries_per_minute,
            f.speedup_over_host_index,
            f.index_pages_to_host,
            f.data_pages_to_host,
            f.pages_skipped,
            f.map_flash_reads,
            f.host_cpu_ms
        );
    }
    if let Some(h) = figs.iter().find(|f| f.config == IndexKind::HostBtree) {
        let total = h.index_pages_to_host + h.data_pages_to_host;
        if total > 0.0 {
            println!(
                "host-index: index pages are {:.1}% of its pages fetched from storage (paper §6.3: 36%)",
                100.0 * h.index_pages_to_host / total
            );
        }
    }
    println!(
        "wall {:.1} s; rerun: {}",
        t0.elapsed().as_secs_f64(),
        crate::reproduce::line()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> BenchFlixrArgs {
        BenchFlixrArgs {
            preset: "tiny".into(),
            sf: 0.002,
            queries: 3,
            selectivity: 0.02,
            rng: IndexSeed { seed: 7 },
            host_cache_kib: Some(8),
            index_cache_mib: 1,
            map_cache_share: 0.5,
            qd: 4,
            // The tiny preset's flash page.
            page_kib: None,
            node_kib: None,
            configs: Vec::new(),
            report: JsonFlag { json: true },
        }
    }

    #[test]
    fn every_configuration_runs_and_flixr_skips_pages() {
        let figs = figures(&tiny()).unwrap();
        assert_eq!(figs.len(), IndexKind::ALL.len());
        let get = |k: IndexKind| figs.iter().find(|f| f.config == k).unwrap();
        assert_eq!(get(IndexKind::HostBtree).speedup_over_host_index, 1.0);
        // Only the host index reads index pages; FLIXR skips pages the index rules out and
        // so fetches fewer data pages than the full scan.
        assert!(get(IndexKind::HostBtree).index_pages_to_host > 0.0);
        assert_eq!(get(IndexKind::HostBtreeIdeal).index_pages_to_host, 0.0);
        assert!(get(IndexKind::FlixrS).pages_skipped > 0.0);
        assert!(
            get(IndexKind::FlixrS).data_pages_to_host < get(IndexKind::NoIndex).data_pages_to_host
        );
    }

    #[test]
    fn configurations_are_chosen_by_enum_in_report_order() {
        let a = BenchFlixrArgs {
            configs: vec![Config::FlixrHs, Config::HostIndex],
            ..tiny()
        };
        assert_eq!(a.kinds(), vec![IndexKind::HostBtree, IndexKind::FlixrHS]);
        for c in Config::value_variants() {
            // Every clap name is the row store's report name.
            let name = c.to_possible_value().unwrap().get_name().to_string();
            assert_eq!(name, c.kind().name());
        }
    }

    #[test]
    fn bad_arguments_are_refused() {
        for a in [
            BenchFlixrArgs { sf: 0.0, ..tiny() },
            BenchFlixrArgs {
                selectivity: 0.0,
                ..tiny()
            },
            BenchFlixrArgs {
                preset: "nope".into(),
                ..tiny()
            },
            // Nodes are 4 KiB up to the table page (the tiny preset's 8 KiB).
            BenchFlixrArgs {
                node_kib: Some(2),
                ..tiny()
            },
            BenchFlixrArgs {
                node_kib: Some(16),
                ..tiny()
            },
        ] {
            assert!(matches!(figures(&a), Err(CliError::Usage(_))));
        }
    }
}
