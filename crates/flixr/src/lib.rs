//! FLIXR's evaluation (flixr §5–§6) as workloads over the row store
//! ([`csd_host::rowstore`]): the microbenchmarks of §6.1 (Scan with filtering, Join
//! lineitem ⋈ part, Insert, Delete), TPC-C NewOrder and Payment (§6.2, all nine tables)
//! and TPC-H Q1, Q4, Q6 and Q14 (§6.2) as access-path workloads, each run under the five
//! configurations of §6 and the ideal host index, on the same data and the same random
//! operations, with every configuration's answers checked equal.
//!
//! How a run is measured: every (workload, configuration) gets a fresh device (the
//! preset, its blocks per plane cut to fit about four times the data), its tables are
//! loaded, then the workload's operations run one after another; the figures are the
//! modeled time from the first operation's start to the last one's end (the row store's
//! host clock, which includes host CPU charged by the store) and the traffic counters of
//! the store ([`csd_host::rowstore::Traffic`]) over that span. Loading is not measured.
//!
//! Choices (the paper leaves them open or its scale does not fit here):
//! * Data: TPC-H rows from `tpchgen` (as `csd load tpch`), LINEITEM/ORDERS/PART at
//!   `--sf`; TPC-C rows from this crate's generator ([`tpcc`]) at `--warehouses`, the
//!   specification's population per warehouse by default (documented there).
//! * Physical design per workload: each table has one index key (the paper's primary
//!   key per query, §6.4): microbenchmarks key LINEITEM on `l_orderkey` (as generated,
//!   clustered) and PART on `p_partkey` (a bitmap under FLIXR, the join's second table);
//!   TPC-H Q1/Q6/Q14 cluster and key LINEITEM on `l_shipdate`, Q4 keys ORDERS on
//!   `o_orderdate` and LINEITEM on `l_orderkey` (bitmap, the join's second table);
//!   TPC-C keys every table on its primary key packed into one INT64.
//! * Queries are computed by hand-written host operators over the store's access paths
//!   (scan, join, insert, delete, update); SQL is not involved.
//! * Device writes are acknowledged from the controller's write buffer under every
//!   configuration (`csd_ftl::WriteCache::WriteBack`), as on the paper's platform (§4.3:
//!   "the SSD firmware first buffers data in the SSD DRAM as it does by default. Then the
//!   firmware issues the page write command"; §5: 16 MB of DRAM page buffers; Cosmos+
//!   GreedyFTL-3.0.0 marks a written slice's data-buffer entry dirty and programs it when
//!   the entry is evicted). WRITE_IDX is acknowledged from the buffer too: the new
//!   entries are staged (READ_IDX judges buffered pages by them) and logged once their
//!   data is committed (`csd_device` FLIXR, write path), so every configuration's writes
//!   cost the same. Until 2026-11-30 every configuration wrote through, because
//!   WRITE_IDX flushed under write-back.
//! * The host index's missing inner nodes are dependent reads, one after the other; the
//!   leaves a traversal needs are named by their parents in host DRAM and read together
//!   before the data pages (§3, Figure 1: "the first (and second) level index in the
//!   DRAM will point to leaf nodes (third level index pages) that need to be accessed");
//!   its node writes go out in the background (the host does not wait for them). The
//!   paper states no read-ahead or prefetch beyond that (§5: "some of the layers in the
//!   tree are cached on host DRAM on demand").
//! * FLIXR-HS's host search starts at the last page whose min is below the range when
//!   the host knows its pages' ranges are disjoint (§4.1: "once an indexed search for a
//!   query reaches a leaf node ..."; see `csd_host::rowstore`).

pub mod micro;
pub mod repro;
pub mod tpcc;
pub mod tpch;

pub use csd_device::NodeCache;
use csd_device::NvmeDevice;
use csd_ftl::{Ftl, FtlConfig};
use csd_host::rowstore::{IndexKind, RowStore, StoreError, StoreOptions, Traffic};
use csd_nand::Nand;
use csd_sim::DeviceConfig;
use csd_sim::events::{Counters, Recording, TimeModel};
use std::hash::{Hash, Hasher};
use thiserror::Error;

/// Errors of a FLIXR evaluation run.
#[derive(Debug, Error)]
pub enum EvalError {
    /// The row store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Bad arguments.
    #[error("{0}")]
    Usage(String),
    /// Configurations disagree on a workload's answer.
    #[error("{workload}: {config} answered {got:#x}, {base} answered {want:#x}: results differ")]
    Mismatch {
        /// Workload.
        workload: Workload,
        /// Configuration that differs.
        config: IndexKind,
        /// Its answer digest.
        got: u64,
        /// The first configuration.
        base: IndexKind,
        /// Its answer digest.
        want: u64,
    },
    /// A workload's own check failed (TPC-C consistency, reference answers).
    #[error("{0}")]
    Check(String),
    /// Device set-up failed.
    #[error("device: {0}")]
    Device(String),
}

/// The host buffer cache of the host-side B+tree (`host-index`; the ideal host index
/// keeps every node).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostCache {
    /// The paper's setting: the levels above the leaves of every index are cached in host
    /// DRAM and leaves come from storage (flixr §3 and Figure 1: "the first (and second)
    /// level index in the DRAM will point to leaf nodes (third level index pages) that
    /// need to be accessed. These lower-level indices are read from the storage"; §5:
    /// "some of the layers in the tree are cached on host DRAM on demand", LRU as in
    /// Table 2). Realized as exactly the trees' inner nodes, whichever they are as the
    /// trees change ([`RowStore::set_host_cache_inner_levels`]): every leaf a traversal
    /// needs is read from storage and never displaces an inner node (an LRU of as many
    /// nodes as the trees have inner ones, as before, lost inner nodes to the leaves
    /// read and read them again), so it scales with the index.
    InnerLevels,
    /// The inner levels and an LRU of this percentage of the trees' leaves, warm at the
    /// start of a measurement with a seeded random choice of them (what an LRU holds at
    /// steady state under uniform keys): how much more of the tree the paper's host kept
    /// is not reported, so `csd repro flixr` sweeps it.
    InnerLevelsAndLeaves(u32),
    /// A fixed LRU of this many KiB of nodes.
    Kib(u64),
}

impl std::fmt::Display for HostCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostCache::InnerLevels => f.write_str("the trees' inner levels (paper)"),
            HostCache::InnerLevelsAndLeaves(p) => {
                write!(f, "the trees' inner levels and {p}% of their leaves")
            }
            HostCache::Kib(k) => write!(f, "{k} KiB"),
        }
    }
}

/// LBAs to set aside for the B+tree nodes over `rows` rows: the row store's own rule.
pub(crate) fn tree_lbas(rows: u64) -> u64 {
    // Sized for the smallest node: enough for any node size `Setup::node_kib` takes.
    csd_host::rowstore::tree_region_lbas(rows, csd_device::btree::NODE_BYTES)
}

/// The paper's table page, KiB ([`Setup::page_kib`]).
pub const PAPER_PAGE_KIB: u64 = 16;

/// Parameters of an evaluation run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Setup {
    /// Device preset (the paper's platform: `cosmos-openssd`).
    pub preset: String,
    /// TPC-H scale factor of the microbenchmark and TPC-H data.
    pub sf: f64,
    /// Operations per microbenchmark (queries, inserted rows, deletes).
    pub queries: u32,
    /// Fraction of LINEITEM one Scan or Join query selects.
    pub selectivity: f64,
    /// TPC-C warehouses.
    pub warehouses: u32,
    /// TPC-C transactions per run (NewOrder and Payment each).
    pub tpcc_txns: u32,
    /// TPC-C rows per warehouse (the specification's by default).
    pub tpcc_population: tpcc::Population,
    /// Seed of every random choice.
    pub seed: u64,
    /// Host DRAM for the host-side B+tree's nodes.
    pub host_cache: HostCache,
    /// FLIXR index cache in device DRAM, KiB.
    pub index_cache_kib: u64,
    /// In-SSD B+tree node cache in device DRAM (default: the trees' inner levels, what
    /// the paper's 16 MiB holds at its scale; see [`NodeCache::InnerLevels`]).
    pub node_cache: NodeCache,
    /// Share of controller DRAM for the FTL's MAP cache.
    pub map_cache_share: f64,
    /// Commands the host keeps in flight.
    pub qd: usize,
    /// Bytes of a table page, KiB: the device's LBA, so one FTL entry (and one per-page
    /// index) per page. Paper: 16 — the InnoDB pages of the MySQL setup it emulates (§5),
    /// the 16 KiB mapping slice of the Cosmos+ firmware (GreedyFTL
    /// `BYTES_PER_DATA_REGION_OF_SLICE`), and §4.8's 8–24 index bytes per page being
    /// 0.05–0.15% of the space (8 / 16384 and 24 / 16384). `None`: the paper's, or the
    /// preset's flash page where that is smaller (a table page never spans flash pages).
    pub page_kib: Option<u64>,
    /// How each measured run's commands are placed in modeled time (loading stays on
    /// calendars): `Events` books every resource in modeled-arrival order
    /// (docs/time-model.md).
    pub time_model: TimeModel,
    /// Preset fields to override, `key=value` (e.g. `isp.dram_access_cycles=200`), after
    /// the row store's own (geometry, page buffer).
    pub overrides: Vec<String>,
    /// The B+tree configurations' optimizer (host index, ideal host index, in-SSD
    /// B+tree): a range over this share of a table's key span is read by a full scan
    /// ([`csd_host::rowstore::FULL_SCAN_FRACTION`], csd's choice); `None` walks the index
    /// for every range. The paper has no optimizer in its description (§5: the
    /// no-indexing configuration is the one that searches every record), nor a word of
    /// how its host-side index reads a range covering most of a table, so `csd repro
    /// flixr` sweeps it.
    pub full_scan_fraction: Option<f64>,
    /// KiB of a host and in-SSD B+tree node ([`StoreOptions::node_kib`]): `None`, the
    /// default, for a node of one table page (the paper's 16 KiB: MySQL's InnoDB keeps its
    /// index nodes in pages of its table page size; §3's Figure 1 has three levels, the
    /// depth of a per-row index of SF 10's 60M LINEITEM rows at that fan-out, 682, where
    /// 4 KiB nodes, fan-out 170, need four); `Some(k)` for `k` KiB of entries at the
    /// start of the page's LBA (4: csd's nodes until 2026-12-07).
    pub node_kib: Option<u32>,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            preset: "cosmos-openssd".into(),
            sf: 0.01,
            queries: 20,
            selectivity: 0.01,
            warehouses: 1,
            tpcc_txns: 100,
            tpcc_population: tpcc::Population::Spec,
            seed: 42,
            host_cache: HostCache::InnerLevels,
            index_cache_kib: 16 << 10,
            node_cache: NodeCache::InnerLevels,
            map_cache_share: 0.5,
            qd: 8,
            page_kib: None,
            time_model: TimeModel::default(),
            overrides: Vec::new(),
            full_scan_fraction: Some(csd_host::rowstore::FULL_SCAN_FRACTION),
            node_kib: None,
        }
    }
}

impl Setup {
    /// Check the parameters.
    pub fn check(&self) -> Result<(), EvalError> {
        if !(self.sf > 0.0 && self.sf <= 10.0) {
            return Err(EvalError::Usage("--sf must be in (0, 10]".into()));
        }
        if !(self.selectivity > 0.0 && self.selectivity <= 1.0) {
            return Err(EvalError::Usage("--selectivity must be in (0, 1]".into()));
        }
        if self.queries == 0 || self.qd == 0 || self.warehouses == 0 || self.tpcc_txns == 0 {
            return Err(EvalError::Usage(
                "--queries, --qd, --warehouses and --tpcc-txns must be at least 1".into(),
            ));
        }
        if !(self.map_cache_share > 0.0 && self.map_cache_share <= 1.0) {
            return Err(EvalError::Usage(
                "--map-cache-share must be in (0, 1]".into(),
            ));
        }
        let cfg =
            DeviceConfig::preset(&self.preset).map_err(|e| EvalError::Device(e.to_string()))?;
        let flash_kib = u64::from(cfg.geometry.page_size) / 1024;
        if let Some(k) = self.page_kib
            && (k < 4 || !k.is_power_of_two() || k > flash_kib)
        {
            return Err(EvalError::Usage(format!(
                "--page-kib must be a power of two from 4 to the {} preset's flash page ({flash_kib} KiB), got {k}",
                self.preset
            )));
        }
        let page_kib = self.page_bytes() / 1024;
        if let Some(k) = self.node_kib
            && (k < 4 || k as usize > page_kib)
        {
            return Err(EvalError::Usage(format!(
                "--node-kib must be from 4 to the table page ({page_kib} KiB), got {k}"
            )));
        }
        Ok(())
    }

    /// Bytes of a B+tree node: [`Setup::node_kib`], by default a table page.
    pub fn node_bytes(&self) -> usize {
        self.node_kib
            .map_or_else(|| self.page_bytes(), |k| k as usize * 1024)
    }

    /// The B+tree node as reports name it, e.g. `16 KiB (fan-out 682)`.
    pub fn node_label(&self) -> String {
        let n = self.node_bytes();
        format!(
            "{} KiB (fan-out {})",
            n / 1024,
            csd_device::btree::fanout_of(n)
        )
    }

    /// Bytes of a table page (and of the device's LBA): [`Setup::page_kib`], by default
    /// the paper's 16 KiB or the preset's flash page where that is smaller.
    pub fn page_bytes(&self) -> usize {
        let kib = self.page_kib.unwrap_or_else(|| {
            DeviceConfig::preset(&self.preset).map_or(PAPER_PAGE_KIB, |c| {
                (u64::from(c.geometry.page_size) / 1024).clamp(4, PAPER_PAGE_KIB)
            })
        });
        (kib * 1024) as usize
    }

    /// A fresh store under `kind` on a device with room for `lbas` LBAs of tables, whose
    /// data is `paper_fraction` of the paper's (TPC-H: `sf / 10`; TPC-C: see
    /// [`tpcc::Scale::paper_fraction`]).
    ///
    /// The device's page buffer (`dram.page_buffer_kib`: 16 MiB on `cosmos-openssd`,
    /// §5) keeps the paper's ratio of buffer to data, like the host and node caches: the
    /// preset's size times `paper_fraction`, at least one flash page. At the paper's
    /// scale it is the preset's; at SF 0.01 one 16 KiB page (16 MiB against SF 10's
    /// ~10 GiB would hold all of SF 0.01's ~10 MiB, which the paper's buffer never did).
    pub fn store(
        &self,
        kind: IndexKind,
        lbas: u64,
        paper_fraction: f64,
    ) -> Result<RowStore, EvalError> {
        let dev = |e: &dyn std::fmt::Display| EvalError::Device(e.to_string());
        let base = DeviceConfig::preset(&self.preset).map_err(|e| dev(&e))?;
        let g = &base.geometry;
        let block = g.block_bytes() * (g.dies() as u64);
        let page = self.page_bytes() as u64;
        let need = 4 * lbas * page;
        let bpp = need.div_ceil(block).clamp(32, g.blocks_per_plane as u64);
        let toml = DeviceConfig::preset_toml(&self.preset).map_err(|e| dev(&e))?;
        let mut sets = vec![
            format!("geometry.blocks_per_plane={bpp}"),
            // A table page is one LBA (the row store's rule) and one FTL entry.
            format!("geometry.sector_size={page}"),
            format!(
                "dram.page_buffer_kib={}",
                scaled_page_buffer_kib(&base, paper_fraction)
            ),
        ];
        sets.extend(self.overrides.iter().cloned());
        let cfg = DeviceConfig::from_toml_with_overrides(toml, &sets).map_err(|e| dev(&e))?;
        let fcfg = FtlConfig {
            ext_bytes: 24,
            op: 0.25,
            map_cache_share: self.map_cache_share,
            write_cache: csd_ftl::WriteCache::WriteBack,
            ..FtlConfig::default()
        };
        let nand = Nand::new_in_memory(cfg).map_err(|e| dev(&e))?;
        let ftl = Ftl::format(nand, fcfg).map_err(|e| dev(&e))?;
        if ftl.lbas() < lbas + 16 {
            return Err(EvalError::Usage(format!(
                "the data needs {lbas} LBAs; the {} preset holds {}: lower --sf or --warehouses",
                self.preset,
                ftl.lbas()
            )));
        }
        let mut d = NvmeDevice::new(ftl);
        d.set_index_cache_bytes(self.index_cache_kib << 10);
        d.set_node_cache(self.node_cache);
        Ok(RowStore::new(
            d,
            kind,
            StoreOptions {
                qd: self.qd,
                host_cache_kib: match self.host_cache {
                    HostCache::Kib(k) => k,
                    // Sized once the tables are loaded ([`measure`]).
                    HostCache::InnerLevels | HostCache::InnerLevelsAndLeaves(_) => {
                        StoreOptions::default().host_cache_kib
                    }
                },
                full_scan_fraction: self.full_scan_fraction,
                node_kib: self.node_kib,
                ..StoreOptions::default()
            },
        )?)
    }
}

/// The page buffer of `base` scaled to data `paper_fraction` of the paper's, KiB: at
/// least one flash page when the preset has a buffer, none when it has none.
pub fn scaled_page_buffer_kib(base: &DeviceConfig, paper_fraction: f64) -> u64 {
    let full = base.dram.page_buffer_kib;
    if full == 0 {
        return 0;
    }
    let page_kib = (base.geometry.page_size as u64).div_ceil(1024).max(1);
    let scaled = (full as f64 * paper_fraction.clamp(0.0, 1.0)).round() as u64;
    scaled.div_ceil(page_kib).max(1) * page_kib
}

/// What one workload did under one configuration.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Measure {
    /// Workload (serialized as its name, e.g. `tpcc-neworder`).
    pub workload: Workload,
    /// Configuration (serialized as its name, e.g. `host-index`).
    pub config: IndexKind,
    /// Operations (queries or transactions).
    pub ops: u64,
    /// Modeled time of all operations, ns.
    pub modeled_ns: u64,
    /// Operations per minute of modeled time.
    pub ops_per_minute: f64,
    /// Throughput over the host-side index's on the same workload.
    pub speedup_over_host_index: f64,
    /// Traffic and costs over the run.
    pub traffic: Traffic,
    /// Digest of the answers (equal across configurations).
    pub answer: u64,
    /// Busy time of the device's resources over the run.
    pub busy: Busy,
    /// The event core's counters over the run ([`Setup::time_model`] `Events`).
    pub event_core: Option<Counters>,
}

/// Busy time of the device's resources over a run, ns, each summed over the class's
/// members (so flash dies working in parallel add up): where the modeled time of a
/// configuration goes, beside [`Traffic::host_cpu_ns`] for the host CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Busy {
    /// Flash array operations (tR, tPROG, tBERS), summed over the dies.
    pub flash_die_ns: u64,
    /// Flash channel transfers, summed over the channels.
    pub flash_channel_ns: u64,
    /// The host link (PCIe).
    pub link_ns: u64,
    /// Firmware on the embedded cores (command handling, FLIXR entries, in-SSD B+tree),
    /// summed over the cores.
    pub firmware_ns: u64,
}

impl Busy {
    /// The device's busy times so far.
    fn of(store: &mut RowStore) -> Busy {
        use csd_device::workload::IoTarget as _;
        use csd_sim::resource::ResourceClass as C;
        let mut b = Busy::default();
        for u in store.client().device().block().utilization(1) {
            match u.class {
                C::Die => b.flash_die_ns += u.busy_ns,
                C::Channel => b.flash_channel_ns += u.busy_ns,
                C::HostLink => b.link_ns += u.busy_ns,
                C::EmbeddedCpu => b.firmware_ns += u.busy_ns,
                C::Dram | C::HostCpu => {}
            }
        }
        b
    }

    /// What was busy between `earlier` and `self`.
    fn since(self, earlier: Busy) -> Busy {
        Busy {
            flash_die_ns: self.flash_die_ns.saturating_sub(earlier.flash_die_ns),
            flash_channel_ns: self
                .flash_channel_ns
                .saturating_sub(earlier.flash_channel_ns),
            link_ns: self.link_ns.saturating_sub(earlier.link_ns),
            firmware_ns: self.firmware_ns.saturating_sub(earlier.firmware_ns),
        }
    }
}

/// A stable digest of an answer.
pub fn digest<T: Hash>(v: &T) -> u64 {
    // FNV-1a's constants over 8-byte words, so digests do not depend on the standard
    // library's hasher. A whole TPC-C database is hashed after every run: a byte at a
    // time, that was a sixth of the run's wall time (perf, 1 warehouse).
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    v.hash(&mut h);
    h.finish()
}

struct Fnv(u64);
impl Fnv {
    /// Mix one word in: FNV-1a's xor and multiply, then a rotation so that the word's
    /// high bits reach the low bits of the state too.
    fn mix(&mut self, w: u64) {
        self.0 = (self.0 ^ w).wrapping_mul(0x0100_0000_01b3).rotate_left(29);
    }
}
impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            self.mix(u64::from_le_bytes(b));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            // The length keeps a short tail of zeros apart from no tail.
            self.mix(u64::from_le_bytes(b) ^ ((rest.len() as u64) << 59));
        }
    }
}

/// xorshift64*, seeded.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeded (0 is mapped to a non-zero state).
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15 | 1)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        lo + (self.next_u64() % ((hi - lo) as u64 + 1)) as i64
    }
}

/// Measure `body` on `store`: modeled time and traffic between its start and end. The
/// host B+tree cache is sized by `s.host_cache` first (the tables are loaded by then).
pub fn measure(
    s: &Setup,
    workload: Workload,
    store: &mut RowStore,
    body: impl FnOnce(&mut RowStore) -> Result<(u64, u64), EvalError>,
) -> Result<Measure, EvalError> {
    if store.kind() == IndexKind::HostBtree {
        match s.host_cache {
            HostCache::InnerLevels => store.set_host_cache_inner_levels(),
            HostCache::InnerLevelsAndLeaves(p) => {
                let mut leaves = store.host_leaf_nodes();
                let n = leaves.len() * p.min(100) as usize / 100;
                // A seeded partial shuffle: the first `n` are a uniform random choice.
                let mut rng = Rng::new(s.seed ^ 0x1eaf);
                for i in 0..n {
                    let j = i + (rng.next_u64() % (leaves.len() - i) as u64) as usize;
                    leaves.swap(i, j);
                }
                store.set_host_cache_inner_levels_and_leaves(n, &leaves[..n]);
            }
            HostCache::Kib(_) => {}
        }
    }
    store.quiesce()?;
    let t0 = store.now();
    let tr0 = store.traffic();
    let busy0 = Busy::of(store);
    let rec = (s.time_model == TimeModel::Events)
        .then(Recording::start)
        .flatten();
    // Unit tests compact the core's graph often, so that every holder's renaming runs.
    #[cfg(test)]
    if let Some(r) = &rec {
        r.graph(|g| g.set_compact_nodes(1 << 12));
    }
    let out = body(store);
    // The core books what the run recorded; every instant gets its final value.
    let event_core = rec.map(|r| {
        store.settle_events();
        r.finish().counters()
    });
    let (ops, answer) = out?;
    let ns = store.now().since(t0);
    let traffic = store.traffic().since(tr0);
    let busy = Busy::of(store).since(busy0);
    Ok(Measure {
        workload,
        config: store.kind(),
        ops,
        modeled_ns: ns,
        ops_per_minute: ops as f64 * 60e9 / (ns.max(1)) as f64,
        speedup_over_host_index: 0.0,
        traffic,
        answer,
        busy,
        event_core,
    })
}

/// Check that every configuration of `ms` (one workload) answered alike and fill in the
/// speedups over `host-index`.
pub fn finish(ms: &mut [Measure]) -> Result<(), EvalError> {
    same_answers(ms.iter())?;
    let base = ms
        .iter()
        .find(|m| m.config == IndexKind::HostBtree)
        .map_or(1.0, |m| m.ops_per_minute);
    for m in ms.iter_mut() {
        m.speedup_over_host_index = m.ops_per_minute / base.max(f64::MIN_POSITIVE);
    }
    Ok(())
}

/// Check that every measure of `ms` answered as the first did
/// ([`EvalError::Mismatch`] names the first that did not).
pub fn same_answers<'a>(mut ms: impl Iterator<Item = &'a Measure>) -> Result<(), EvalError> {
    let Some(first) = ms.next() else {
        return Ok(());
    };
    match ms.find(|m| m.answer != first.answer) {
        Some(m) => Err(EvalError::Mismatch {
            workload: m.workload,
            config: m.config,
            got: m.answer,
            base: first.config,
            want: first.answer,
        }),
        None => Ok(()),
    }
}

/// A workload of the evaluation: the microbenchmarks of §6.1, TPC-C NewOrder and Payment,
/// TPC-H Q1, Q4, Q6 and Q14 (§6.2), and the two forms of Q6 of Figure 12 (§6.4).
/// Serialized and printed as its report name ([`Workload::name`], e.g. `tpcc-neworder`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Workload {
    /// §6.1 Scan with filtering.
    #[serde(rename = "scan")]
    Scan,
    /// §6.1 Join lineitem ⋈ part.
    #[serde(rename = "join")]
    Join,
    /// §6.1 Insert.
    #[serde(rename = "insert")]
    Insert,
    /// §6.1 Delete.
    #[serde(rename = "delete")]
    Delete,
    /// TPC-C NewOrder.
    #[serde(rename = "tpcc-neworder")]
    NewOrder,
    /// TPC-C Payment.
    #[serde(rename = "tpcc-payment")]
    Payment,
    /// TPC-H Q1.
    #[serde(rename = "tpch-q1")]
    Q1,
    /// TPC-H Q4.
    #[serde(rename = "tpch-q4")]
    Q4,
    /// TPC-H Q6.
    #[serde(rename = "tpch-q6")]
    Q6,
    /// TPC-H Q14.
    #[serde(rename = "tpch-q14")]
    Q14,
    /// Figure 12: TPC-H Q6 with the primary key `l_shipdate` only.
    #[serde(rename = "tpch-q6-primary")]
    Q6Primary,
    /// Figure 12: TPC-H Q6 with the secondary keys `l_discount` and `l_quantity` too.
    #[serde(rename = "tpch-q6-multi-key")]
    Q6MultiKey,
}

impl Workload {
    /// The workloads a run selects from (Figures 9 to 11), in report order. Figure 12's
    /// two forms of Q6 are run by [`repro::figure12`] when Q6 is selected.
    pub const ALL: [Workload; 10] = [
        Workload::Scan,
        Workload::Join,
        Workload::Insert,
        Workload::Delete,
        Workload::NewOrder,
        Workload::Payment,
        Workload::Q1,
        Workload::Q4,
        Workload::Q6,
        Workload::Q14,
    ];

    /// Report name (also its JSON form).
    pub fn name(self) -> &'static str {
        match self {
            Workload::Scan => "scan",
            Workload::Join => "join",
            Workload::Insert => "insert",
            Workload::Delete => "delete",
            Workload::NewOrder => "tpcc-neworder",
            Workload::Payment => "tpcc-payment",
            Workload::Q1 => "tpch-q1",
            Workload::Q4 => "tpch-q4",
            Workload::Q6 => "tpch-q6",
            Workload::Q14 => "tpch-q14",
            Workload::Q6Primary => "tpch-q6-primary",
            Workload::Q6MultiKey => "tpch-q6-multi-key",
        }
    }

    /// The workload of [`Workload::ALL`] named `name`.
    pub fn parse(name: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.name() == name)
    }

    /// A microbenchmark of §6.1 (Figure 9)?
    pub fn is_micro(self) -> bool {
        matches!(
            self,
            Workload::Scan | Workload::Join | Workload::Insert | Workload::Delete
        )
    }

    /// A TPC-C transaction (its data grows with the warehouses, not the scale factor)?
    pub fn is_tpcc(self) -> bool {
        matches!(self, Workload::NewOrder | Workload::Payment)
    }

    /// Run it under `kind`.
    pub fn run(self, s: &Setup, kind: IndexKind) -> Result<Measure, EvalError> {
        match self {
            Workload::Scan => micro::scan(s, kind),
            Workload::Join => micro::join(s, kind),
            Workload::Insert => micro::insert(s, kind),
            Workload::Delete => micro::delete(s, kind),
            Workload::NewOrder => tpcc::run(s, kind, tpcc::Txn::NewOrder),
            Workload::Payment => tpcc::run(s, kind, tpcc::Txn::Payment),
            Workload::Q1 => tpch::run(s, kind, tpch::Query::Q1),
            Workload::Q4 => tpch::run(s, kind, tpch::Query::Q4),
            Workload::Q6 => tpch::run(s, kind, tpch::Query::Q6),
            Workload::Q14 => tpch::run(s, kind, tpch::Query::Q14),
            Workload::Q6Primary | Workload::Q6MultiKey => tpch::run_q6_keys(
                s,
                kind,
                self == Workload::Q6MultiKey,
                tpch::data(s.sf)?.as_ref(),
            ),
        }
    }
}

/// Its report name ([`Workload::name`]), padded as the format asks.
impl std::fmt::Display for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

/// Run `workloads` under every configuration of `kinds`; answers checked equal per
/// workload. `progress` hears each finished measure.
pub fn run_all(
    s: &Setup,
    workloads: &[Workload],
    kinds: &[IndexKind],
    mut progress: impl FnMut(&Measure),
) -> Result<Vec<Measure>, EvalError> {
    s.check()?;
    let mut out = Vec::new();
    for &w in workloads {
        let mut ms = Vec::new();
        for &k in kinds {
            let m = w.run(s, k)?;
            progress(&m);
            ms.push(m);
        }
        finish(&mut ms)?;
        out.extend(ms);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_tells_answers_apart_by_any_byte_and_any_length() {
        use csd_table::Value;
        let row = |s: &[u8], n: i64| vec![Value::Char(s.to_vec()), Value::Int64(n)];
        let base = vec![row(b"BARBARABLE", 7), row(b"OUGHTPRI", 1 << 40)];
        assert_eq!(digest(&base), digest(&base.clone()));
        let mut seen = vec![digest(&base)];
        // One bit flipped anywhere (the high byte of a word, a tail byte, a length).
        let mut high = base.clone();
        high[1][1] = Value::Int64((1 << 40) ^ (1 << 63));
        let mut tail = base.clone();
        tail[0][0] = Value::Char(b"BARBARABLF".to_vec());
        let mut longer = base.clone();
        longer[0][0] = Value::Char(b"BARBARABLE\0".to_vec());
        let mut swapped = base.clone();
        swapped.swap(0, 1);
        for other in [high, tail, longer, swapped] {
            let d = digest(&other);
            assert!(!seen.contains(&d), "{other:?}");
            seen.push(d);
        }
        // Raw bytes: a tail of zeros is not the absence of one.
        let mut h = Fnv(1);
        h.write(&[0u8; 3]);
        let mut g = Fnv(1);
        g.write(&[]);
        assert_ne!(h.finish(), g.finish());
    }

    fn tiny() -> Setup {
        Setup {
            preset: "tiny".into(),
            tpcc_population: tpcc::Population::Reduced,
            sf: 0.001,
            queries: 3,
            tpcc_txns: 3,
            host_cache: HostCache::Kib(8),
            // 4 KiB table pages: the tiny device holds twice as many LBAs as of its 8 KiB
            // flash pages, room for every workload (the paper's 16 KiB pages run on
            // cosmos-openssd in `the_papers_page_is_one_lba_and_one_entry`).
            page_kib: Some(4),
            ..Setup::default()
        }
    }

    /// The default set-up (cosmos-openssd) takes the paper's 16 KiB table pages as its
    /// LBAs: every configuration gives the same answers, FLIXR compares one entry per
    /// page and reads whole pages; a smaller preset caps the page at its flash page, and
    /// a page the preset cannot hold is refused.
    #[test]
    fn the_papers_page_is_one_lba_and_one_entry() {
        let s = Setup {
            sf: 0.001,
            queries: 3,
            tpcc_txns: 3,
            tpcc_population: tpcc::Population::Reduced,
            ..Setup::default()
        };
        s.check().unwrap();
        assert_eq!(s.page_bytes(), 16384);
        let ms = run_all(
            &s,
            &[Workload::Scan, Workload::Delete, Workload::NewOrder],
            &IndexKind::ALL,
            |_| {},
        )
        .unwrap();
        for w in [Workload::Scan, Workload::Delete, Workload::NewOrder] {
            let of_w: Vec<&Measure> = ms.iter().filter(|m| m.workload == w).collect();
            assert_eq!(of_w.len(), IndexKind::ALL.len());
            assert!(of_w.iter().all(|m| m.answer == of_w[0].answer), "{w:?}");
        }
        let scan = |k| {
            ms.iter()
                .find(|m| m.workload == Workload::Scan && m.config == k)
                .unwrap()
        };
        // FLIXR-S skips pages by their entries; what it reads are whole 16 KiB pages.
        let fs = scan(IndexKind::FlixrS).traffic;
        assert!(fs.pages_skipped > 0, "{fs:?}");
        assert!(fs.data_pages_to_host > 0, "{fs:?}");
        let data = fs.data_pages_to_host * 16384;
        assert!(
            fs.link_bytes >= data && fs.link_bytes < data + 16384,
            "{fs:?}"
        );
        let tiny = Setup {
            preset: "tiny".into(),
            ..s.clone()
        };
        assert_eq!(tiny.page_bytes(), 8192);
        let too_big = Setup {
            page_kib: Some(16),
            ..tiny
        };
        assert!(too_big.check().is_err());
    }

    #[test]
    fn the_page_buffer_keeps_the_papers_ratio_to_the_data() {
        let cosmos = DeviceConfig::preset("cosmos-openssd").unwrap();
        assert_eq!(cosmos.dram.page_buffer_kib, 16 << 10, "FLIXR §5: 16 MB");
        // The paper's scale: the preset's buffer; SF 0.01: one 16 KiB page; never
        // less than a page, never more than the preset's.
        assert_eq!(scaled_page_buffer_kib(&cosmos, 1.0), 16 << 10);
        assert_eq!(scaled_page_buffer_kib(&cosmos, 0.01 / tpch::PAPER_SF), 16);
        assert_eq!(scaled_page_buffer_kib(&cosmos, 0.0), 16);
        assert_eq!(scaled_page_buffer_kib(&cosmos, 0.1), 1648);
        assert_eq!(scaled_page_buffer_kib(&cosmos, 3.0), 16 << 10);
        // A preset without a buffer gets none.
        let tiny = DeviceConfig::preset("tiny").unwrap();
        assert_eq!(scaled_page_buffer_kib(&tiny, 1.0), 0);
        assert_eq!(tpcc::Scale::spec(100).paper_fraction(), 1.0);
        assert_eq!(tpcc::Scale::reduced(10).paper_fraction(), 0.01);
    }

    #[test]
    fn configurations_serialize_and_print_as_their_names() {
        let json = serde_json::to_value(IndexKind::ALL).unwrap();
        let names: Vec<&str> = IndexKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(json, serde_json::json!(names));
        assert_eq!(
            json,
            serde_json::json!([
                "no-index",
                "host-index",
                "host-index-ideal",
                "in-ssd-btree",
                "flixr-s",
                "flixr-hs"
            ])
        );
        // Tables pad configuration names like the strings they were.
        assert_eq!(format!("[{:<11}]", IndexKind::FlixrS), "[flixr-s    ]");
        for k in IndexKind::ALL {
            assert_eq!(IndexKind::parse(&k.to_string()), Some(k));
        }
    }

    #[test]
    fn workloads_serialize_and_print_as_their_report_names() {
        let every = [
            Workload::ALL.as_slice(),
            &[Workload::Q6Primary, Workload::Q6MultiKey],
        ]
        .concat();
        for w in &every {
            assert_eq!(
                serde_json::to_value(w).unwrap(),
                serde_json::json!(w.name())
            );
            assert_eq!(w.to_string(), w.name());
        }
        assert_eq!(
            serde_json::to_value([Workload::NewOrder, Workload::Q6MultiKey]).unwrap(),
            serde_json::json!(["tpcc-neworder", "tpch-q6-multi-key"])
        );
        // Tables pad workload names like the strings they were.
        assert_eq!(format!("[{:<9}]", Workload::Q1), "[tpch-q1  ]");
        // A run selects from ALL; Figure 12's forms come with Q6, not by name.
        for w in Workload::ALL {
            assert_eq!(Workload::parse(w.name()), Some(w));
        }
        assert_eq!(Workload::parse("tpch-q6-primary"), None);
        assert_eq!(Workload::parse("Scan"), None);
        // Answers that differ name the workload as the report does.
        let e = EvalError::Mismatch {
            workload: Workload::Q6Primary,
            config: IndexKind::FlixrS,
            got: 1,
            base: IndexKind::NoIndex,
            want: 2,
        };
        assert!(
            e.to_string()
                .starts_with("tpch-q6-primary: flixr-s answered 0x1"),
            "{e}"
        );
    }

    #[test]
    fn the_first_differing_answer_is_named() {
        let m = |config, answer| Measure {
            workload: Workload::Q6MultiKey,
            config,
            ops: 1,
            modeled_ns: 1,
            ops_per_minute: 1.0,
            speedup_over_host_index: 0.0,
            traffic: Traffic::default(),
            answer,
            busy: Busy::default(),
            event_core: None,
        };
        let ms = [
            m(IndexKind::HostBtree, 7),
            m(IndexKind::FlixrS, 7),
            m(IndexKind::FlixrHS, 8),
            m(IndexKind::NoIndex, 9),
        ];
        assert!(same_answers(ms[..2].iter()).is_ok());
        assert!(same_answers(std::iter::empty()).is_ok());
        match same_answers(ms.iter()) {
            Err(EvalError::Mismatch {
                workload: Workload::Q6MultiKey,
                config: IndexKind::FlixrHS,
                got: 8,
                base: IndexKind::HostBtree,
                want: 7,
            }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn micro_and_tpch_agree_across_configurations() {
        let s = tiny();
        let ws = [
            Workload::Scan,
            Workload::Join,
            Workload::Insert,
            Workload::Delete,
            Workload::Q1,
            Workload::Q4,
            Workload::Q6,
            Workload::Q14,
        ];
        let ms = run_all(&s, &ws, &IndexKind::ALL, |_| {}).unwrap();
        assert_eq!(ms.len(), ws.len() * IndexKind::ALL.len());
        for m in &ms {
            assert!(m.modeled_ns > 0, "{} {}", m.workload, m.config);
            if m.config == IndexKind::HostBtree {
                assert_eq!(m.speedup_over_host_index, 1.0);
            }
        }
        // FLIXR skips pages on a 1% scan; the host index reads index pages.
        let scan = |c: IndexKind| {
            ms.iter()
                .find(|m| m.workload == Workload::Scan && m.config == c)
                .unwrap()
        };
        assert!(scan(IndexKind::FlixrS).traffic.pages_skipped > 0);
        assert!(scan(IndexKind::HostBtree).traffic.index_pages_to_host > 0);
        assert_eq!(
            scan(IndexKind::HostBtreeIdeal).traffic.index_pages_to_host,
            0
        );
        assert!(
            scan(IndexKind::NoIndex).traffic.data_pages_to_host
                > scan(IndexKind::FlixrHS).traffic.data_pages_to_host
        );
        // Busy times come from the device over the run: flash reads keep dies and
        // channels busy, commands the link (the tiny preset charges no per-command
        // firmware time); FLIXR-S compares every entry of the table in firmware, the
        // ideal host index none.
        for m in &ms {
            let b = m.busy;
            if m.traffic.data_flash_reads + m.traffic.index_flash_reads > 0 {
                assert!(b.flash_die_ns > 0 && b.flash_channel_ns > 0, "{m:?}");
            }
            if m.traffic.commands > 0 {
                assert!(b.link_ns > 0, "{m:?}");
            }
            assert!(b.link_ns <= m.modeled_ns, "one link: {m:?}");
        }
        assert!(
            scan(IndexKind::FlixrS).busy.firmware_ns
                > scan(IndexKind::HostBtreeIdeal).busy.firmware_ns
        );
    }

    /// Issue 30: every workload under every configuration runs on the event core with
    /// the calendars' answers and operation counts, no booking outside the core, no
    /// command behind a booking, no stale instant and no decision on an unfixed instant.
    #[test]
    fn every_workload_runs_on_the_event_core_with_the_calendars_answers() {
        let s = Setup {
            time_model: TimeModel::Calendar,
            ..tiny()
        };
        let ev = Setup {
            time_model: TimeModel::Events,
            ..s.clone()
        };
        let cal = run_all(&s, &Workload::ALL, &IndexKind::ALL, |_| {}).unwrap();
        let evs = run_all(&ev, &Workload::ALL, &IndexKind::ALL, |_| {}).unwrap();
        assert_eq!(cal.len(), evs.len());
        assert!(
            evs.iter()
                .filter_map(|m| m.event_core)
                .any(|k| k.forgotten > 0),
            "no run compacted the graph"
        );
        for (c, e) in cal.iter().zip(&evs) {
            let what = format!("{} {}", e.workload, e.config);
            assert_eq!(
                (c.workload, c.config, c.answer, c.ops),
                (e.workload, e.config, e.answer, e.ops),
                "{what}"
            );
            assert!(c.event_core.is_none(), "{what}");
            let k = e.event_core.expect("an events run has the core's counters");
            assert_eq!(k.anomalies(), [0; 4], "{what}");
            assert!(k.booked > 0 && e.modeled_ns > 0, "{what}");
        }
    }

    #[test]
    fn bad_setups_are_refused() {
        for s in [
            Setup { sf: 0.0, ..tiny() },
            Setup {
                selectivity: 2.0,
                ..tiny()
            },
            Setup {
                queries: 0,
                ..tiny()
            },
            Setup {
                preset: "nope".into(),
                ..tiny()
            },
        ] {
            assert!(s.check().is_err());
        }
    }
}
