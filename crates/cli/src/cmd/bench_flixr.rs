//! `csd bench flixr`: FLIXR's "Scan with filtering" microbenchmark (flixr §6.1, Figure 9
//! and Figure 11's traffic split) on an emulated device, through the command interface.
//!
//! One table of NSM pages (one page per 4 KiB LBA) is loaded with WRITE_IDX, which builds
//! a range entry per page on `l_orderkey`; the same random range queries (from `--seed`)
//! then run under each configuration:
//! * `no-index`: the host reads every page (Read, MDTS at a time) and filters;
//! * `host-index`: a per-row B+tree on `l_orderkey` stored on the device (4 KiB nodes
//!   written after the table), an LRU node cache in host DRAM of `--host-cache-kib`; the
//!   host traverses it (each missing node one dependent Read), then reads the data pages;
//! * `host-index-ideal`: the same tree with every node in host memory (the paper's upper
//!   reference);
//! * `flixr-s`: READ_IDX over the whole table under the query's rule: only pages whose
//!   entry can match cross the host link;
//! * `flixr-hs`: a tiny host B+tree over the per-page minimum (kept in host memory, learnt
//!   through UPDATE_HOST_INDEX at load) narrows the page range, then READ_IDX.
//!
//! Choices: the host keeps `--qd` commands in flight; a query's modeled time is from its
//! first submission to its last completion, plus the host CPU time of filtering the rows
//! it received (`isp.host_cycles_per_record` at the host clock, not overlapped). Traffic
//! is counted from each completion's accounting and the FTL's metadata-read counter:
//! flash page reads of index pages (B+tree nodes; MAP pages read for index-cache misses),
//! of data pages, and of the MAP pages the FTL read to translate data LBAs (with the
//! default MAP cache of half the controller DRAM there are none). Every configuration's row
//! count is checked against the truth; a difference is an error.

use crate::CliError;
use clap::Args;
use csd_device::btree::LruSet;
use csd_device::{
    Command, Completion, IndexEncoding, IndexRule, IndexSpec, NvmeDevice, Payload, QueueId, Status,
    TableFormat,
};
use csd_ftl::{Ftl, FtlConfig};
use csd_nand::Nand;
use csd_sim::{DeviceConfig, SimTime};
use csd_table::{ColumnType, Layout, PageBuilder, PageView, Schema, Value};
use std::collections::{HashMap, VecDeque};

/// Arguments of `csd bench flixr`.
#[derive(Args, Debug, Clone)]
pub struct BenchFlixrArgs {
    /// Device preset (the paper's platform: cosmos-openssd), shrunk to fit the table.
    #[arg(long, default_value = "cosmos-openssd")]
    pub preset: String,
    /// Rows of the table.
    #[arg(long, default_value_t = 200_000)]
    pub rows: u64,
    /// Queries per configuration.
    #[arg(long, default_value_t = 20)]
    pub queries: u32,
    /// Fraction of the rows each query selects (a range of `l_orderkey`).
    #[arg(long, default_value_t = 0.01)]
    pub selectivity: f64,
    /// Seed of the query ranges and the non-key columns.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Host DRAM for the B+tree node cache, KiB.
    #[arg(long, default_value_t = 256)]
    pub host_cache_kib: u64,
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
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Figures of one configuration over all queries.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ConfigFigures {
    /// Configuration name.
    pub config: String,
    /// Mean modeled time per query, ms.
    pub mean_query_ms: f64,
    /// Queries per minute of modeled time.
    pub queries_per_minute: f64,
    /// Throughput relative to `host-index`.
    pub speedup_over_host_index: f64,
    /// Flash page reads of index pages per query.
    pub index_page_reads: f64,
    /// Flash page reads of data pages per query.
    pub data_page_reads: f64,
    /// Flash reads of MAP pages the FTL needed to translate data LBAs, per query.
    pub map_page_reads: f64,
    /// Bytes over the host link per query.
    pub host_link_bytes: f64,
    /// Rows matched per query (identical across configurations).
    pub rows_matched: f64,
}

const LBA: usize = 4096;

fn format() -> TableFormat {
    TableFormat {
        name: "lineitem_s".into(),
        columns: vec![
            ("l_orderkey".into(), ColumnType::Int64),
            ("l_quantity".into(), ColumnType::Int32),
            ("l_comment".into(), ColumnType::Char(96)),
        ],
        layout: Layout::Nsm,
        page_lbas: 1,
    }
}

fn schema() -> Result<Schema, CliError> {
    let f = format();
    Schema::new(
        f.name,
        f.columns
            .into_iter()
            .map(|(n, t)| csd_table::Column::new(n, t))
            .collect(),
    )
    .map_err(|e| CliError::Usage(e.to_string()))
}

/// xorshift64*, seeded (the bench's only randomness).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// The host side of one device: a queue pair, a clock, and `qd` commands in flight.
struct Host {
    d: NvmeDevice,
    q: QueueId,
    qd: usize,
    inflight: VecDeque<SimTime>,
    now: SimTime,
    index_reads: u64,
    data_reads: u64,
    /// MAP pages the FTL read to translate data LBAs (not index lookups).
    map_reads: u64,
    link_bytes: u64,
}

impl Host {
    /// Run `cmd` submitted at `at`; returns the completion (an error status is an error).
    fn exec(&mut self, cmd: Command, at: SimTime) -> Result<(Completion, u64), CliError> {
        let name = cmd.name();
        let meta0 = self.d.block().ftl().stats().meta_reads;
        self.d
            .submit(self.q, cmd, at)
            .map_err(|s| CliError::Nvme(s.to_string()))?;
        self.d.process();
        let c = self
            .d
            .poll(self.q)
            .ok_or_else(|| CliError::Nvme(format!("{name}: no completion")))?;
        if c.status != Status::Success {
            return Err(CliError::Nvme(format!("{name}: {}", c.status)));
        }
        self.link_bytes += c.acct.host_link_bytes;
        let meta = self
            .d
            .block()
            .ftl()
            .stats()
            .meta_reads
            .saturating_sub(meta0);
        Ok((c, meta))
    }

    /// Count a data read's flash work: data pages, and the MAP pages the FTL needed.
    fn data_read(&mut self, c: &Completion, meta: u64) {
        self.data_reads += c.acct.flash_reads.saturating_sub(meta);
        self.map_reads += meta;
    }

    /// Submit `cmd` when a queue slot is free (pipelined); returns its completion and the
    /// MAP-page reads of the FTL it caused.
    fn pipelined(&mut self, cmd: Command) -> Result<(Completion, u64), CliError> {
        let at = if self.inflight.len() >= self.qd {
            self.inflight.pop_front().unwrap_or(self.now)
        } else {
            self.now
        };
        let (c, meta) = self.exec(cmd, at.max(self.now))?;
        self.inflight.push_back(c.acct.completed);
        Ok((c, meta))
    }

    /// Wait for everything in flight; returns the time.
    fn drain(&mut self) -> SimTime {
        while let Some(t) = self.inflight.pop_front() {
            self.now = self.now.max(t);
        }
        self.now
    }

    /// A dependent command: submitted now, waited for.
    /// One B+tree node through the host's node cache: a dependent Read on a miss.
    fn read_node(&mut self, cache: &mut LruSet, node: u64) -> Result<(), CliError> {
        if !cache.touch(node) {
            let (c, meta) = self.sync(Command::Read {
                lba: node,
                blocks: 1,
            })?;
            self.index_reads += c.acct.flash_reads.saturating_sub(meta);
            self.map_reads += meta;
            cache.insert(node);
        }
        Ok(())
    }

    fn sync(&mut self, cmd: Command) -> Result<(Completion, u64), CliError> {
        self.drain();
        let (c, meta) = self.exec(cmd, self.now)?;
        self.now = self.now.max(c.acct.completed);
        Ok((c, meta))
    }
}

fn data(c: Completion) -> Vec<u8> {
    match c.payload {
        Payload::Data(d) => d,
        Payload::IndexRead(r) => r.data,
        _ => Vec::new(),
    }
}

/// Rows of `pages` whose key is in `lo..=hi`, and rows examined.
fn filter(schema: &Schema, pages: &[u8], lo: i64, hi: i64) -> (u64, u64) {
    let (mut hit, mut seen) = (0, 0);
    let mut keys = Vec::new();
    for p in pages.chunks(LBA) {
        let Ok(v) = PageView::parse(p, schema) else {
            continue;
        };
        keys.clear();
        if let Ok(c) = v.column(0)
            && c.decode_i64_into(&mut keys).is_ok()
        {
            seen += keys.len() as u64;
            hit += keys.iter().filter(|&&k| lo <= k && k <= hi).count() as u64;
        }
    }
    (hit, seen)
}

/// The per-row B+tree: node LBAs by level (root last) and the nodes' contents.
struct BTree {
    /// Per node LBA: sorted (first key, child LBA) for inner nodes, (key, page LBA) for leaves.
    nodes: HashMap<u64, (bool, Vec<(i64, u64)>)>,
    root: u64,
    /// Leaf LBAs in key order.
    leaves: Vec<u64>,
}

const NODE_ENTRIES: usize = 255;

fn node_bytes(leaf: bool, entries: &[(i64, u64)]) -> Vec<u8> {
    let mut v = vec![0u8; LBA];
    v[0] = leaf as u8;
    v[8..16].copy_from_slice(&(entries.len() as u64).to_le_bytes());
    for (i, (k, p)) in entries.iter().enumerate() {
        let o = 16 + 16 * i;
        v[o..o + 8].copy_from_slice(&k.to_le_bytes());
        v[o + 8..o + 16].copy_from_slice(&p.to_le_bytes());
    }
    v
}

/// The five configurations, in the order they run and print.
const CONFIGS: [&str; 5] = [
    "no-index",
    "host-index",
    "host-index-ideal",
    "flixr-s",
    "flixr-hs",
];

/// A loaded device: the host driving it, the table's FLIXR handle, the per-row B+tree
/// written after the table, and what the host learnt at load.
struct Bench {
    h: Host,
    s: Schema,
    table: u8,
    pages: u64,
    mdts: u64,
    tree: BTree,
    /// FLIXR-HS's host tree: the minimum key of each page.
    page_min: Vec<i64>,
    /// Modeled time when the load (table, tree, flush) was done.
    load_done: SimTime,
}

/// Run the benchmark; prints a table (or JSON).
pub fn run(a: &BenchFlixrArgs) -> Result<(), CliError> {
    if !(a.selectivity > 0.0 && a.selectivity <= 1.0) || a.rows == 0 || a.queries == 0 || a.qd == 0
    {
        return Err(CliError::Usage(
            "--selectivity must be in (0, 1], --rows, --queries and --qd at least 1".into(),
        ));
    }
    let wall0 = std::time::Instant::now();
    let s = schema()?;
    let per_page = csd_table::page::capacity_for(&s, Layout::Nsm, LBA)
        .map_err(|e| CliError::Usage(e.to_string()))? as u64;
    let pages = a.rows.div_ceil(per_page);
    let leaves = a.rows.div_ceil(NODE_ENTRIES as u64);
    let (cfg, bpp, h) = device(a, pages, leaves)?;
    let mut rng = Rng(a.seed | 1);
    let mut bench = load(h, s, a, pages, &mut rng)?;

    // Queries.
    let span = ((a.rows as f64 * a.selectivity).round() as i64).max(1);
    let ranges: Vec<(i64, i64)> = (0..a.queries)
        .map(|_| {
            let lo = (rng.next() % (a.rows as i64 - span + 1).max(1) as u64) as i64;
            (lo, lo + span - 1)
        })
        .collect();
    let mut out: Vec<ConfigFigures> = Vec::new();
    let mut truth: Option<u64> = None;
    for name in CONFIGS {
        let (f, matched) = bench.run_config(name, &ranges, a, &cfg)?;
        match truth {
            None => truth = Some(matched),
            Some(t) if t != matched => {
                return Err(CliError::Usage(format!(
                    "{name} matched {matched} rows, no-index {t}: results differ"
                )));
            }
            _ => {}
        }
        out.push(f);
    }
    let base_qpm = out
        .iter()
        .find(|c| c.config == "host-index")
        .map_or(1.0, |c| c.queries_per_minute);
    for c in &mut out {
        c.speedup_over_host_index = c.queries_per_minute / base_qpm;
    }
    let wall = wall0.elapsed().as_secs_f64();
    print_figures(a, &bench, &out, &cfg, bpp, wall);
    Ok(())
}

/// The device: the preset with its blocks per plane cut so that the table, the tree and
/// the spare space fit in about four times the data; the FTL with 24 extension bytes per
/// MAP entry (a range entry needs 20) and 25% over-provisioning (the shrunk array of a
/// many-die preset needs more spare blocks than the default 7% gives GC).
fn device(
    a: &BenchFlixrArgs,
    pages: u64,
    leaves: u64,
) -> Result<(DeviceConfig, u64, Host), CliError> {
    let base = DeviceConfig::preset(&a.preset)?;
    let g = &base.geometry;
    let block = g.block_bytes() * (g.dies() as u64);
    let need = 4 * (pages + 2 * leaves) * LBA as u64;
    let bpp = need.div_ceil(block).clamp(32, g.blocks_per_plane as u64);
    let cfg = DeviceConfig::from_toml_with_overrides(
        DeviceConfig::preset_toml(&a.preset)?,
        &[format!("geometry.blocks_per_plane={bpp}")],
    )?;
    let fcfg = FtlConfig {
        ext_bytes: 24,
        op: 0.25,
        map_cache_share: a.map_cache_share,
        ..FtlConfig::default()
    };
    let ftl = Ftl::format(Nand::new_in_memory(cfg.clone())?, fcfg)?;
    let mut d = NvmeDevice::new(ftl);
    d.set_index_cache_bytes(a.index_cache_mib << 20);
    let q = d
        .create_queue_pair(1024)
        .map_err(|e| CliError::Nvme(e.to_string()))?;
    let h = Host {
        d,
        q,
        qd: a.qd,
        inflight: VecDeque::new(),
        now: SimTime::ZERO,
        index_reads: 0,
        data_reads: 0,
        map_reads: 0,
        link_bytes: 0,
    };
    if pages + 2 * leaves + 8 > h.d.block().ftl().lbas() {
        return Err(CliError::Usage(format!(
            "{} rows need {} LBAs; the {} preset holds {}",
            a.rows,
            pages + 2 * leaves,
            a.preset,
            h.d.block().ftl().lbas()
        )));
    }
    Ok((cfg, bpp, h))
}

/// Load: register the table and its range index, WRITE_IDX the pages, learn the
/// per-page minimum (FLIXR-HS), then write the per-row B+tree after the table.
fn load(
    mut h: Host,
    s: Schema,
    a: &BenchFlixrArgs,
    pages: u64,
    rng: &mut Rng,
) -> Result<Bench, CliError> {
    let mdts = h.d.block().ftl().config().mdts_sectors as u64;
    let table = match h.sync(Command::SendTblCol(format()))?.0.payload {
        Payload::FlixrTable(t) => t,
        p => return Err(CliError::Nvme(format!("SendTblCol answered {p:?}"))),
    };
    h.sync(Command::SendIdxEnc {
        table,
        spec: IndexSpec {
            column: "l_orderkey".into(),
            encoding: IndexEncoding::Range,
        },
    })?;
    let leaf_entries = write_table(&mut h, &s, table, a.rows, mdts, rng)?;
    let page_min = page_minimums(&mut h, table, pages)?;
    let tree = BTree::build(&leaf_entries, pages);
    let mut lbas: Vec<u64> = tree.nodes.keys().copied().collect();
    lbas.sort_unstable();
    for run in lbas.chunks(mdts as usize) {
        let mut data = Vec::with_capacity(run.len() * LBA);
        for l in run {
            let (leaf, e) = &tree.nodes[l];
            data.extend(node_bytes(*leaf, e));
        }
        h.pipelined(Command::Write { lba: run[0], data })?;
    }
    h.drain();
    h.d.block_mut().ftl_mut().flush(h.now)?;
    let load_done = h.now;
    Ok(Bench {
        h,
        s,
        table,
        pages,
        mdts,
        tree,
        page_min,
        load_done,
    })
}

/// The table's rows (keys 0.., a random quantity, a fixed comment) in NSM pages, MDTS
/// pages per WRITE_IDX; the leaf entries (key, page LBA) of the per-row B+tree.
fn write_table(
    h: &mut Host,
    s: &Schema,
    table: u8,
    rows: u64,
    mdts: u64,
    rng: &mut Rng,
) -> Result<Vec<(i64, u64)>, CliError> {
    let mut b = PageBuilder::new(s.clone(), Layout::Nsm, LBA)
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let mut buf = Vec::with_capacity(mdts as usize * LBA);
    let mut next_lba = 0u64;
    let mut leaf_entries: Vec<(i64, u64)> = Vec::with_capacity(rows as usize);
    let comment = vec![b'c'; 96];
    for key in 0..rows as i64 {
        let row = s
            .encode_row_vec(&[
                Value::Int64(key),
                Value::Int32((rng.next() % 50) as i32 + 1),
                Value::Char(comment.clone()),
            ])
            .map_err(|e| CliError::Usage(e.to_string()))?;
        b.push_row(&row)
            .map_err(|e| CliError::Usage(e.to_string()))?;
        leaf_entries.push((key, next_lba + (buf.len() / LBA) as u64));
        if b.is_full() || key + 1 == rows as i64 {
            buf.extend_from_slice(b.finish());
            b.reset();
            if buf.len() / LBA == mdts as usize || key + 1 == rows as i64 {
                let n = (buf.len() / LBA) as u64;
                h.pipelined(Command::WriteIdx {
                    table,
                    lba: next_lba,
                    data: std::mem::take(&mut buf),
                })?;
                next_lba += n;
            }
        }
    }
    h.drain();
    Ok(leaf_entries)
}

/// Every page's minimum key, through UPDATE_HOST_INDEX.
fn page_minimums(h: &mut Host, table: u8, pages: u64) -> Result<Vec<i64>, CliError> {
    let mut page_min = Vec::with_capacity(pages as usize);
    for p in 0..pages {
        match h
            .sync(Command::UpdateHostIndex { table, lba: p })?
            .0
            .payload
        {
            Payload::HostIndex(csd_device::HostIndexValue::Range { min, .. }) => page_min.push(min),
            other => {
                return Err(CliError::Nvme(format!(
                    "UpdateHostIndex of page {p} answered {other:?}"
                )));
            }
        }
    }
    Ok(page_min)
}

impl BTree {
    /// Leaves of `NODE_ENTRIES` entries from LBA `first` on, then each inner level above
    /// them, the root last.
    fn build(leaf_entries: &[(i64, u64)], first: u64) -> BTree {
        let mut tree = BTree {
            nodes: HashMap::new(),
            root: 0,
            leaves: Vec::new(),
        };
        let mut level: Vec<(i64, u64)> = Vec::new();
        let mut node_lba = first;
        for chunk in leaf_entries.chunks(NODE_ENTRIES) {
            tree.nodes.insert(node_lba, (true, chunk.to_vec()));
            tree.leaves.push(node_lba);
            level.push((chunk[0].0, node_lba));
            node_lba += 1;
        }
        while level.len() > 1 {
            let mut up = Vec::new();
            for chunk in level.chunks(NODE_ENTRIES) {
                tree.nodes.insert(node_lba, (false, chunk.to_vec()));
                up.push((chunk[0].0, node_lba));
                node_lba += 1;
            }
            level = up;
        }
        tree.root = level[0].1;
        tree
    }
}

impl Bench {
    /// Every query range under one configuration; its figures per query and the rows
    /// matched in all.
    fn run_config(
        &mut self,
        name: &str,
        ranges: &[(i64, i64)],
        a: &BenchFlixrArgs,
        cfg: &DeviceConfig,
    ) -> Result<(ConfigFigures, u64), CliError> {
        let isp = cfg.isp;
        let host_hz = cfg.host.clock_mhz * 1e6;
        let mut cache = LruSet::new(if name == "host-index-ideal" {
            usize::MAX
        } else {
            (a.host_cache_kib * 1024 / LBA as u64) as usize
        });
        if name == "host-index-ideal" {
            for l in self.tree.nodes.keys() {
                cache.insert(*l);
            }
        }
        let h = &mut self.h;
        h.drain();
        h.now = h.now.max(h.d.block().ftl().nand().now());
        let (i0, d0, b0, m0) = (h.index_reads, h.data_reads, h.link_bytes, h.map_reads);
        let (mut total_ns, mut matched) = (0u64, 0u64);
        for &(lo, hi) in ranges {
            let start = self.h.now;
            let got = match name {
                "no-index" => self.scan_all()?,
                "host-index" | "host-index-ideal" => self.via_host_tree(&mut cache, lo, hi)?,
                _ => self.via_flixr(name == "flixr-hs", lo, hi)?,
            };
            let end = self.h.drain();
            let (hit, seen) = filter(&self.s, &got, lo, hi);
            let cpu_ns = (seen as f64 * isp.host_cycles_per_record / host_hz * 1e9) as u64;
            self.h.now = end.after(cpu_ns);
            total_ns += self.h.now.since(start);
            matched += hit;
        }
        let h = &self.h;
        let nq = a.queries as f64;
        let mean = total_ns as f64 / nq;
        let figures = ConfigFigures {
            config: name.into(),
            mean_query_ms: mean / 1e6,
            queries_per_minute: 60e9 / mean.max(1.0),
            speedup_over_host_index: 0.0,
            index_page_reads: (h.index_reads - i0) as f64 / nq,
            data_page_reads: (h.data_reads - d0) as f64 / nq,
            map_page_reads: (h.map_reads - m0) as f64 / nq,
            host_link_bytes: (h.link_bytes - b0) as f64 / nq,
            rows_matched: matched as f64 / nq,
        };
        Ok((figures, matched))
    }

    /// `no-index`: every page, MDTS at a time.
    fn scan_all(&mut self) -> Result<Vec<u8>, CliError> {
        let (pages, mdts, h) = (self.pages, self.mdts, &mut self.h);
        let mut got = Vec::new();
        let mut l = 0;
        while l < pages {
            let n = (pages - l).min(mdts);
            let (c, meta) = h.pipelined(Command::Read {
                lba: l,
                blocks: n as u32,
            })?;
            h.data_read(&c, meta);
            got.extend(data(c));
            l += n;
        }
        Ok(got)
    }

    /// `host-index`: root to the leaf of `lo` (each node missing from the cache one
    /// dependent Read), along the leaves while keys <= hi, then the data pages in runs.
    fn via_host_tree(&mut self, cache: &mut LruSet, lo: i64, hi: i64) -> Result<Vec<u8>, CliError> {
        let (tree, mdts, h) = (&self.tree, self.mdts, &mut self.h);
        let mut node = tree.root;
        let mut data_pages: Vec<u64> = Vec::new();
        loop {
            h.read_node(cache, node)?;
            let (leaf, e) = &tree.nodes[&node];
            if *leaf {
                break;
            }
            let i = e.partition_point(|x| x.0 <= lo).saturating_sub(1);
            node = e[i].1;
        }
        let mut li = tree.leaves.iter().position(|&x| x == node).unwrap_or(0);
        loop {
            let n = tree.leaves[li];
            h.read_node(cache, n)?;
            let e = &tree.nodes[&n].1;
            for &(k, p) in e {
                if lo <= k && k <= hi && data_pages.last() != Some(&p) {
                    data_pages.push(p);
                }
            }
            li += 1;
            if li >= tree.leaves.len() || e.last().is_some_and(|x| x.0 >= hi) {
                break;
            }
        }
        let mut got = Vec::new();
        for run in runs(&data_pages, mdts) {
            let (c, meta) = h.pipelined(Command::Read {
                lba: run.0,
                blocks: run.1 as u32,
            })?;
            h.data_read(&c, meta);
            got.extend(data(c));
        }
        Ok(got)
    }

    /// FLIXR-S over the table; FLIXR-HS (`hs`) over the pages the tiny host tree names
    /// (last page with min <= lo .. last page with min <= hi). One READ_IDX examines the
    /// whole range; it returns at most MDTS pages and says where to resume (a dependent
    /// command).
    fn via_flixr(&mut self, hs: bool, lo: i64, hi: i64) -> Result<Vec<u8>, CliError> {
        let table = self.table;
        let h = &mut self.h;
        let rule = match h
            .sync(Command::SendIdxIcr {
                table,
                rule: IndexRule::Between { lo, hi },
            })?
            .0
            .payload
        {
            Payload::FlixrRule(r) => r,
            p => return Err(CliError::Nvme(format!("SendIdxIcr answered {p:?}"))),
        };
        let (first, end) = if hs {
            let f = self
                .page_min
                .partition_point(|&m| m <= lo)
                .saturating_sub(1);
            let e = self.page_min.partition_point(|&m| m <= hi);
            (f as u64, e as u64)
        } else {
            (0, self.pages)
        };
        let mut got = Vec::new();
        let mut l = first;
        while l < end {
            let n = (end - l).min(csd_device::flixr::MAX_INDEX_SCAN);
            let (c, meta) = h.sync(Command::ReadIdx {
                table,
                rule,
                lba: l,
                blocks: n as u32,
            })?;
            let flash = c.acct.flash_reads;
            l += n;
            if let Payload::IndexRead(r) = c.payload {
                h.index_reads += r.index_page_reads;
                h.map_reads += meta.saturating_sub(r.index_page_reads);
                h.data_reads += flash.saturating_sub(meta);
                got.extend(r.data);
                if let Some(next) = r.resume_at {
                    l = next;
                }
            }
        }
        Ok(got)
    }
}

/// The figures as JSON or a table, with the device's FLIXR counters.
fn print_figures(
    a: &BenchFlixrArgs,
    b: &Bench,
    out: &[ConfigFigures],
    cfg: &DeviceConfig,
    bpp: u64,
    wall: f64,
) {
    let cmd = format!(
        "csd bench flixr --preset {} --rows {} --queries {} --selectivity {} --seed {} --host-cache-kib {} --index-cache-mib {} --map-cache-share {} --qd {}",
        a.preset,
        a.rows,
        a.queries,
        a.selectivity,
        a.seed,
        a.host_cache_kib,
        a.index_cache_mib,
        a.map_cache_share,
        a.qd
    );
    let pages = b.pages;
    if a.json {
        let v = serde_json::json!({
            "preset": a.preset,
            "seed": a.seed,
            "rows": a.rows,
            "pages": pages,
            "btree_nodes": b.tree.nodes.len(),
            "load_modeled_s": b.load_done.ns() as f64 / 1e9,
            "configs": out,
            "wall_s": wall,
            "command": cmd,
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return;
    }
    println!(
        "FLIXR scan with filtering (flixr §6.1): {} rows in {pages} pages of {LBA} B, {} B+tree nodes, {} queries selecting {:.2}% each",
        a.rows,
        b.tree.nodes.len(),
        a.queries,
        a.selectivity * 100.0
    );
    let mut t = comfy_table::Table::new();
    t.set_header(vec![
        "config",
        "ms/query",
        "QpM",
        "vs host-index",
        "index pages/q",
        "data pages/q",
        "MAP pages/q",
        "link KiB/q",
        "rows/q",
    ]);
    for c in out {
        t.add_row(vec![
            c.config.clone(),
            format!("{:.3}", c.mean_query_ms),
            format!("{:.0}", c.queries_per_minute),
            format!("{:.2}x", c.speedup_over_host_index),
            format!("{:.1}", c.index_page_reads),
            format!("{:.1}", c.data_page_reads),
            format!("{:.1}", c.map_page_reads),
            format!("{:.0}", c.host_link_bytes / 1024.0),
            format!("{:.0}", c.rows_matched),
        ]);
    }
    println!("{t}");
    let st = b.h.d.flixr().stats();
    println!(
        "device: {} (blocks_per_plane {bpp}); FLIXR entries compared {}, pages skipped {}, index cache hits {} misses {}",
        cfg.name, st.entries_compared, st.pages_skipped, st.cache_hits, st.cache_misses
    );
    println!("seed {}; wall {:.1} s; rerun: {cmd}", a.seed, wall);
}

/// Contiguous runs of sorted page numbers, each at most `max` long: (first, length).
fn runs(pages: &[u64], max: u64) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = Vec::new();
    for &p in pages {
        match v.last_mut() {
            Some((f, n)) if *f + *n == p && *n < max => *n += 1,
            _ => v.push((p, 1)),
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_and_lru() {
        assert_eq!(
            runs(&[1, 2, 3, 7, 8, 10], 2),
            vec![(1, 2), (3, 1), (7, 2), (10, 1)]
        );
        let mut l = LruSet::new(2);
        l.insert(1);
        l.insert(2);
        assert!(l.touch(1));
        l.insert(3); // evicts 2
        assert!(l.touch(1) && l.touch(3) && !l.touch(2));
    }

    #[test]
    fn small_run_agrees_across_configurations() {
        let a = BenchFlixrArgs {
            preset: "tiny".into(),
            rows: 3000,
            queries: 3,
            selectivity: 0.02,
            seed: 7,
            host_cache_kib: 8,
            index_cache_mib: 1,
            map_cache_share: 0.5,
            qd: 4,
            json: true,
        };
        run(&a).unwrap();
    }
}
