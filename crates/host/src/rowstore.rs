//! A small row store on the device with the access paths of FLIXR's evaluation (flixr §4,
//! §5, §6): tables of NSM slotted pages with INSERT, DELETE and UPDATE, a free-space map,
//! page rewrites through WRITE_IDX so the per-page index entries stay current, and scans
//! and joins through one of six index configurations:
//!
//! | [`IndexKind`] | access path |
//! |---|---|
//! | `NoIndex` | the host reads every page of the table and filters (no index to keep) |
//! | `HostBtree` | a per-row B+tree on the key column, nodes on the device, LRU node cache in host DRAM; the host traverses it (each missing node a dependent Read) and writes the nodes it changes |
//! | `HostBtreeIdeal` | the same tree with every node in host memory (never read back; changed nodes still written) |
//! | `SsdBtree` | the same tree kept by the firmware (`SsdIdxCreate/Update/Read`): traversal on the embedded cores, hot nodes in device DRAM |
//! | `FlixrS` | per-page index only: READ_IDX over the table under a rule (`SEND_IDX_ICR`) |
//! | `FlixrHS` | FLIXR-S plus a tiny host B+tree over per-page ranges learnt through UPDATE_HOST_INDEX after every WRITE_IDX; the host narrows the pages, the device checks the entries |
//!
//! Choices made here (the paper leaves them open):
//! * One configuration per store (the paper's configurations are whole systems). Every
//!   table has one index key column; its FLIXR encoding is a range (min/max) or a bitmap
//!   over split points ([`KeyEncoding`]). Under the B+tree kinds the index maps `key` to
//!   the row's page (a non-unique per-row index: one entry per row).
//! * One table page per 4 KiB LBA (the FTL's mapping unit), in a fixed extent of
//!   `max_pages` LBAs per table, followed by the table's B+tree node region. Rows are
//!   fixed-width NSM rows; a page holds `capacity_for(schema, Nsm, 4096)` rows.
//! * The free-space map is a free-row count per page plus the set of pages with room;
//!   INSERT fills the lowest-numbered page with room (as a heap's FSM does), so keys
//!   inserted after deletes land among old keys and widen those pages' ranges, the
//!   coarse-grain effect of §6.3.
//! * There is no buffer pool: a modification reads the page (a Read), changes it on the
//!   host and writes it back whole (WRITE_IDX under FLIXR, Write otherwise). DELETE
//!   compacts the page (NSM pages keep rows packed), so a [`RowId`] is valid until its
//!   page is next modified; scans return fresh ids.
//! * Host CPU: every row examined costs `isp.host_cycles_per_record`, every page
//!   `isp.host_cycles_per_page`, every B+tree node visited [`StoreOptions::host_node_cycles`]
//!   plus [`StoreOptions::host_compare_cycles`] per key comparison, every command
//!   [`StoreOptions::host_io_cycles`] (the OS path of direct I/O), all at the host clock
//!   and not overlapped with I/O. Independent commands (data page runs, node writes) are
//!   kept [`StoreOptions::qd`] deep; dependent ones (node reads, resumed READ_IDX) wait.
//! * FLIXR-HS's tiny tree keeps `(min, page) -> max` for every page (learnt from
//!   UPDATE_HOST_INDEX, which returns both): a range `lo..=hi` visits the entries with
//!   `min <= hi` and sends READ_IDX for the pages whose `max >= lo` (runs of consecutive
//!   pages together); the device compares the entries again. Its entries are charged as
//!   host compares, and it never touches the device to be read (§5: all in host DRAM).
//! * A FLIXR rule is registered per query and released after (`DropIdxIcr`). Filtered
//!   reads are cut into pieces of [`FILTER_CHUNK_MDTS`] × MDTS LBAs kept `qd` deep, a
//!   piece stopped by the transfer limit resuming in the next wave.
//! * The B+tree configurations have an optimizer: a range covering more than
//!   [`FULL_SCAN_FRACTION`] of the key span seen so far is read by a full scan.
//! * Changed B+tree nodes are written by a background writer: the host does not wait
//!   for their completion (the device stays busy with them); the firmware's in-SSD tree
//!   likewise goes on once a node is handed to the FTL. Data pages are written
//!   synchronously in every configuration.
//! * Joins ([`RowStore::join`]): under FLIXR both tables' pages are read with
//!   READ_IDX_JOIN1 (outer, filtered by the outer key range, building the per-table
//!   join-key bitmap) and READ_IDX_JOIN2 (inner, whose per-page index must be a bitmap
//!   over the same split points); under the B+tree kinds a batched index nested-loop
//!   join ([`RowStore::lookup_many`]) looks each distinct outer join key up in the inner
//!   table's index and reads the pages found once; without an index
//!   both tables are scanned. The host then hash-joins the rows it received.
//! * Secondary keys (flixr §3.1, §6.4; [`RowStore::add_secondary`], before the table is
//!   loaded): under FLIXR a further SEND_IDX_ENC (the device packs every key into the
//!   one per-page entry, refused when they do not fit) and [`RowStore::scan_keys`] reads
//!   under one rule with a term per key (FLIXR-HS still narrows by the primary key on the
//!   host); under the host B+tree kinds a second per-row B+tree over the column, in its
//!   own node region, bulk-loaded with the table: a scan intersects the pages the trees
//!   name (both trees' nodes read and counted as index traffic). A table with secondary
//!   host trees is read-only here (INSERT, DELETE and UPDATE refuse: the trees would
//!   need their maintenance too); under FLIXR the device keeps every key on every
//!   WRITE_IDX. The in-SSD B+tree and the no-index store use the primary key only.

use crate::client::{Client, CommandIssuer, HostError};
use csd_device::btree::{BtreeError, LruSet, NODE_BYTES, PagedBtree, Touch};
use csd_device::{
    Command, Completion, HostIndexValue, IndexEncoding, IndexRule, IndexSpec, JoinIndexSpec,
    NvmeDevice, Payload, TableFormat,
};
use csd_sim::SimTime;
use csd_table::{Column, ColumnType, Layout, PageView, Schema, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use thiserror::Error;

/// Bytes of a table page (one LBA).
pub const PAGE: usize = 4096;

/// Share of a table's key span above which the B+tree configurations scan the table
/// instead of walking the index (a cost-based optimizer's choice for unselective ranges).
pub const FULL_SCAN_FRACTION: f64 = 0.25;

/// Filtered reads (READ_IDX and the joins) in flight examine this many MDTS-sized
/// pieces each (1: a piece never stops at the transfer limit, and as many pieces are in
/// flight as Reads of a full scan would be).
pub const FILTER_CHUNK_MDTS: u64 = 1;

/// Errors of the row store.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum StoreError {
    /// A device command failed.
    #[error(transparent)]
    Host(#[from] HostError),
    /// A table definition or a request that cannot be served; nothing changed.
    #[error("{0}")]
    Invalid(String),
    /// The table's extent has no page with room.
    #[error("table {table:?} is full ({pages} pages): create it with a larger max_pages")]
    Full {
        /// Table name.
        table: String,
        /// Its pages.
        pages: u64,
    },
    /// A B+tree region is full.
    #[error(transparent)]
    Btree(#[from] BtreeError),
}

/// Which index configuration the store runs (flixr §5/§6's five plus the ideal host index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IndexKind {
    /// No index: full scans.
    NoIndex,
    /// Host-side per-row B+tree, nodes on the device, LRU node cache in host DRAM.
    HostBtree,
    /// The host-side B+tree with every node in host memory.
    HostBtreeIdeal,
    /// The per-row B+tree kept and traversed by the firmware.
    SsdBtree,
    /// FLIXR per-page indexes only.
    FlixrS,
    /// FLIXR per-page indexes and the tiny host B+tree over per-page ranges.
    FlixrHS,
}

impl IndexKind {
    /// Every kind, in report order.
    pub const ALL: [IndexKind; 6] = [
        IndexKind::NoIndex,
        IndexKind::HostBtree,
        IndexKind::HostBtreeIdeal,
        IndexKind::SsdBtree,
        IndexKind::FlixrS,
        IndexKind::FlixrHS,
    ];

    /// Its name in reports (`host-index` is the paper's "host-side index").
    pub fn name(self) -> &'static str {
        match self {
            IndexKind::NoIndex => "no-index",
            IndexKind::HostBtree => "host-index",
            IndexKind::HostBtreeIdeal => "host-index-ideal",
            IndexKind::SsdBtree => "in-ssd-btree",
            IndexKind::FlixrS => "flixr-s",
            IndexKind::FlixrHS => "flixr-hs",
        }
    }

    /// The kind named `s`.
    pub fn parse(s: &str) -> Option<IndexKind> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }

    fn flixr(self) -> bool {
        matches!(self, IndexKind::FlixrS | IndexKind::FlixrHS)
    }

    fn host_tree(self) -> bool {
        matches!(self, IndexKind::HostBtree | IndexKind::HostBtreeIdeal)
    }
}

/// How FLIXR's per-page index summarizes a table's key column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyEncoding {
    /// Min and max per page.
    Range,
    /// One bit per bucket of these strictly increasing split points.
    Bitmap(Vec<i64>),
}

/// A table to create.
#[derive(Debug, Clone, PartialEq)]
pub struct TableDef {
    /// Name.
    pub name: String,
    /// Columns in row order.
    pub columns: Vec<(String, ColumnType)>,
    /// The indexed (numeric) column.
    pub key: String,
    /// Its per-page encoding under FLIXR.
    pub encoding: KeyEncoding,
    /// Pages of the table's extent (its most pages).
    pub max_pages: u64,
}

/// Knobs of the store.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StoreOptions {
    /// Commands kept in flight for independent I/O.
    pub qd: usize,
    /// Host DRAM for B+tree nodes (`HostBtree`), KiB.
    pub host_cache_kib: u64,
    /// Host cycles per B+tree node visited (latching, page-address computation).
    pub host_node_cycles: f64,
    /// Host cycles per key comparison in a node.
    pub host_compare_cycles: f64,
    /// Host cycles per command issued (system call and driver path of direct I/O).
    pub host_io_cycles: f64,
    /// First LBA the store uses.
    pub first_lba: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            qd: 8,
            host_cache_kib: 256,
            host_node_cycles: 200.0,
            host_compare_cycles: 20.0,
            host_io_cycles: 4000.0,
            first_lba: 0,
        }
    }
}

/// A table's handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TableId(pub usize);

/// Where a row is: its page's LBA and its slot (valid until the page changes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RowId {
    /// The page's LBA.
    pub page: u64,
    /// Slot on the page.
    pub slot: u16,
}

/// A row and where it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Its id.
    pub id: RowId,
    /// Its values.
    pub values: Vec<Value>,
}

/// What the store's commands moved and cost, cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Index pages sent to the host (host B+tree nodes read).
    pub index_pages_to_host: u64,
    /// Data pages sent to the host.
    pub data_pages_to_host: u64,
    /// Flash reads of index pages (B+tree nodes by host or firmware, MAP pages of
    /// FLIXR index-cache misses).
    pub index_flash_reads: u64,
    /// Flash reads of data pages.
    pub data_flash_reads: u64,
    /// Flash reads of MAP pages the FTL needed for data LBAs.
    pub map_flash_reads: u64,
    /// Index pages written (B+tree nodes).
    pub index_pages_written: u64,
    /// Data pages written.
    pub data_pages_written: u64,
    /// Bytes over the host link.
    pub link_bytes: u64,
    /// Host CPU time charged, ns.
    pub host_cpu_ns: u64,
    /// Commands issued.
    pub commands: u64,
    /// Pages the device skipped (FLIXR).
    pub pages_skipped: u64,
}

#[derive(Debug, Clone, Default)]
struct HsTree {
    /// `(min, page) -> max` of every page with rows.
    by_min: BTreeMap<(i64, u64), i64>,
    /// Page -> its current `(min, max)`.
    range: HashMap<u64, (i64, i64)>,
}

#[derive(Debug)]
struct Table {
    def: TableDef,
    schema: Schema,
    key: usize,
    dev_id: u8,
    first: u64,
    /// Pages in use (`first..first + used`).
    used: u64,
    /// Free rows per page (index from `first`).
    free: Vec<u16>,
    /// Pages (offsets) with room.
    room: BTreeSet<u64>,
    cap: u16,
    rows: u64,
    tree: Option<PagedBtree>,
    ssd: Option<u16>,
    tree_region: (u64, u64),
    hs: HsTree,
    /// Per-table join-key index ids by column (FLIXR joins).
    tia: HashMap<usize, u16>,
    /// Smallest and largest key ever stored (the optimizer's statistics).
    keys: Option<(i64, i64)>,
    /// Join rules against a per-table index: tia -> rule id.
    join_rules: HashMap<u16, u16>,
    /// Secondary keys: the column and, under the host B+tree kinds, its tree.
    secondary: Vec<(usize, Option<PagedBtree>)>,
}

/// The row store: tables on one device under one index configuration.
pub struct RowStore {
    client: Client,
    kind: IndexKind,
    opts: StoreOptions,
    tables: Vec<Table>,
    next_lba: u64,
    cache: LruSet,
    traffic: Traffic,
    host_hz: f64,
    cycles_per_record: f64,
    cycles_per_page: f64,
}

fn value_i64(v: &Value) -> Option<i64> {
    v.as_i64()
}

impl RowStore {
    /// A store on `dev` under `kind`.
    pub fn new(
        dev: NvmeDevice,
        kind: IndexKind,
        opts: StoreOptions,
    ) -> Result<RowStore, StoreError> {
        if opts.qd == 0 {
            return Err(StoreError::Invalid("qd must be at least 1".into()));
        }
        let cfg = dev.block().ftl().nand().config().clone();
        let client = Client::new(dev)?;
        if client.identify().lba_size as usize != PAGE {
            return Err(StoreError::Invalid(format!(
                "the row store needs {PAGE}-byte LBAs, the device has {}",
                client.identify().lba_size
            )));
        }
        let cache = match kind {
            IndexKind::HostBtreeIdeal => LruSet::new(usize::MAX),
            _ => LruSet::new((opts.host_cache_kib * 1024 / NODE_BYTES as u64) as usize),
        };
        Ok(RowStore {
            client,
            kind,
            opts,
            tables: Vec::new(),
            next_lba: opts.first_lba,
            cache,
            traffic: Traffic::default(),
            host_hz: cfg.host.clock_mhz * 1e6,
            cycles_per_record: cfg.isp.host_cycles_per_record,
            cycles_per_page: cfg.isp.host_cycles_per_page,
        })
    }

    /// The configuration.
    pub fn kind(&self) -> IndexKind {
        self.kind
    }

    /// The host's modeled clock.
    pub fn now(&self) -> SimTime {
        self.client.now()
    }

    /// Wait until the device is idle (background writes done): the start of a
    /// measurement.
    pub fn quiesce(&mut self) -> Result<(), StoreError> {
        let c = self
            .client
            .exec(Command::GetLogPage(csd_device::LogPage::Telemetry))?;
        if let Payload::Telemetry(t) = c.payload {
            self.client.wait_until(t.now);
        }
        Ok(())
    }

    /// Cumulative traffic and costs.
    pub fn traffic(&self) -> Traffic {
        self.traffic
    }

    /// The client (device inspection).
    pub fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    /// Give the device back.
    pub fn into_device(self) -> NvmeDevice {
        self.client.into_device()
    }

    /// The schema of `t`.
    pub fn schema(&self, t: TableId) -> Result<&Schema, StoreError> {
        Ok(&self.table(t)?.schema)
    }

    /// Rows in `t`.
    pub fn rows(&self, t: TableId) -> Result<u64, StoreError> {
        Ok(self.table(t)?.rows)
    }

    /// Pages in use by `t`.
    pub fn pages(&self, t: TableId) -> Result<u64, StoreError> {
        Ok(self.table(t)?.used)
    }

    /// Nodes of `t`'s B+tree (host or in-SSD), 0 without one.
    pub fn index_nodes(&mut self, t: TableId) -> Result<usize, StoreError> {
        let tb = self.table(t)?;
        if let Some(tr) = &tb.tree {
            return Ok(tr.nodes());
        }
        if let Some(id) = tb.ssd {
            return Ok(self
                .client
                .device()
                .ssd_btree()
                .index(id)
                .map_or(0, |t| t.nodes()));
        }
        Ok(0)
    }

    /// The table named `name`.
    pub fn table_id(&self, name: &str) -> Option<TableId> {
        self.tables
            .iter()
            .position(|t| t.def.name.eq_ignore_ascii_case(name))
            .map(TableId)
    }

    fn table(&self, t: TableId) -> Result<&Table, StoreError> {
        self.tables
            .get(t.0)
            .ok_or_else(|| StoreError::Invalid(format!("no table {}", t.0)))
    }

    /// Charge `cycles` of host CPU (the host clock moves on).
    fn host_cpu(&mut self, cycles: f64) {
        let ns = (cycles / self.host_hz * 1e9).round() as u64;
        self.traffic.host_cpu_ns += ns;
        let t = self.client.now().after(ns);
        self.client.wait_until(t);
    }

    /// One command at host instant `at`; counts its link bytes and the FTL's MAP reads.
    fn issue(&mut self, cmd: Command, at: SimTime) -> Result<(Completion, u64), StoreError> {
        let meta0 = self.client.device().block().ftl().stats().meta_reads;
        let c = self.client.exec_at(cmd, at)?;
        let meta = self
            .client
            .device()
            .block()
            .ftl()
            .stats()
            .meta_reads
            .saturating_sub(meta0);
        self.traffic.link_bytes += c.acct.host_link_bytes;
        self.traffic.commands += 1;
        Ok((c, meta))
    }

    /// A dependent command: issued at the clock, waited for.
    fn sync(&mut self, cmd: Command) -> Result<(Completion, u64), StoreError> {
        self.host_cpu(self.opts.host_io_cycles);
        let at = self.client.now();
        self.issue(cmd, at)
    }

    /// Independent commands kept `qd` deep; the clock ends at the last completion.
    fn pipelined(&mut self, cmds: Vec<Command>) -> Result<Vec<(Completion, u64)>, StoreError> {
        let n = cmds.len() as f64;
        self.host_cpu(n * self.opts.host_io_cycles);
        let start = self.client.now();
        let mut window: std::collections::VecDeque<SimTime> = Default::default();
        let mut out = Vec::with_capacity(cmds.len());
        for cmd in cmds {
            let at = if window.len() >= self.opts.qd {
                window.pop_front().unwrap_or(start)
            } else {
                start
            };
            let (c, meta) = self.issue(cmd, at.max(start))?;
            window.push_back(c.acct.completed);
            out.push((c, meta));
        }
        Ok(out)
    }

    fn payload_data(c: Completion) -> Vec<u8> {
        match c.payload {
            Payload::Data(d) => d,
            Payload::IndexRead(r) => r.data,
            _ => Vec::new(),
        }
    }

    /// Create a table (registers its format and encoding with the device under FLIXR).
    pub fn create_table(&mut self, def: TableDef) -> Result<TableId, StoreError> {
        if self.table_id(&def.name).is_some() {
            return Err(StoreError::Invalid(format!(
                "table {:?} exists already",
                def.name
            )));
        }
        let schema = Schema::new(
            def.name.clone(),
            def.columns
                .iter()
                .map(|(n, t)| Column::new(n.clone(), *t))
                .collect(),
        )
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
        let key = schema
            .column_index(&def.key)
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        if !def.columns[key].1.is_numeric() {
            return Err(StoreError::Invalid(format!(
                "key column {:?} must be numeric",
                def.key
            )));
        }
        let cap = csd_table::page::capacity_for(&schema, Layout::Nsm, PAGE)
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        if def.max_pages == 0 || cap == 0 {
            return Err(StoreError::Invalid(format!(
                "table {:?}: max_pages must be at least 1 and a row must fit a page",
                def.name
            )));
        }
        // Node region: one leaf per ~half-full node of entries, and inner levels.
        let entries = def.max_pages * cap as u64;
        let tree_lbas = if self.kind.host_tree() || self.kind == IndexKind::SsdBtree {
            (entries * 2).div_ceil(csd_device::btree::FANOUT as u64) * 2 + 16
        } else {
            0
        };
        let first = self.next_lba;
        let end = first + def.max_pages + tree_lbas;
        let lbas = self.client.identify().lbas;
        if end > lbas {
            return Err(StoreError::Invalid(format!(
                "table {:?} needs LBAs {first}..{end}, the device has {lbas}",
                def.name
            )));
        }
        let dev_id = if self.kind.flixr() {
            let c = self.sync(Command::SendTblCol(TableFormat {
                name: def.name.clone(),
                columns: def.columns.clone(),
                layout: Layout::Nsm,
                page_lbas: 1,
            }))?;
            let id = match c.0.payload {
                Payload::FlixrTable(id) => id,
                p => return Err(StoreError::Invalid(format!("SendTblCol answered {p:?}"))),
            };
            let encoding = match &def.encoding {
                KeyEncoding::Range => IndexEncoding::Range,
                KeyEncoding::Bitmap(b) => IndexEncoding::Bitmap { bounds: b.clone() },
            };
            self.sync(Command::SendIdxEnc {
                table: id,
                spec: IndexSpec {
                    column: def.key.clone(),
                    encoding,
                },
            })?;
            id
        } else {
            0
        };
        let tree_region = (first + def.max_pages, tree_lbas);
        let tree = if self.kind.host_tree() {
            Some(PagedBtree::new(tree_region.0, tree_region.1)?)
        } else {
            None
        };
        // The in-SSD index is created by the first load or insert.
        let ssd = None;
        self.next_lba = end;
        self.tables.push(Table {
            free: vec![cap as u16; def.max_pages as usize],
            def,
            schema,
            key,
            dev_id,
            first,
            used: 0,
            room: BTreeSet::new(),
            cap: cap as u16,
            rows: 0,
            tree,
            ssd,
            tree_region,
            hs: HsTree::default(),
            tia: HashMap::new(),
            join_rules: HashMap::new(),
            keys: None,
            secondary: Vec::new(),
        });
        Ok(TableId(self.tables.len() - 1))
    }

    /// Check `values` against `t`'s schema and get its key.
    fn row_key(tb: &Table, values: &[Value]) -> Result<i64, StoreError> {
        tb.schema
            .encode_row_vec(values)
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        values
            .get(tb.key)
            .and_then(value_i64)
            .ok_or_else(|| StoreError::Invalid("row has no numeric key".into()))
    }

    fn build_page(schema: &Schema, rows: &[Vec<Value>]) -> Result<Vec<u8>, StoreError> {
        crate::slotted::build_page(schema, Layout::Nsm, PAGE, rows)
            .map_err(|e| StoreError::Invalid(e.to_string()))
    }

    fn parse_rows(schema: &Schema, page: &[u8]) -> Vec<Vec<Value>> {
        crate::slotted::parse_rows(schema, page)
    }

    /// Bulk-load `rows` into an empty table `t`: pages packed in order, written MDTS at a
    /// time, then the index built (B+tree bulk load, or UPDATE_HOST_INDEX per page).
    pub fn load(&mut self, t: TableId, rows: &[Vec<Value>]) -> Result<(), StoreError> {
        let tb = self.table(t)?;
        if tb.used != 0 {
            return Err(StoreError::Invalid(format!(
                "load needs an empty table; {:?} has pages",
                tb.def.name
            )));
        }
        let cap = tb.cap as usize;
        let pages = rows.len().div_ceil(cap) as u64;
        if pages > tb.def.max_pages {
            return Err(StoreError::Full {
                table: tb.def.name.clone(),
                pages: tb.def.max_pages,
            });
        }
        let mut keys = Vec::with_capacity(rows.len());
        for r in rows {
            keys.push(Self::row_key(tb, r)?);
        }
        let (first, schema, dev_id) = (tb.first, tb.schema.clone(), tb.dev_id);
        let mdts = self.client.identify().mdts_blocks as usize;
        let mut cmds = Vec::new();
        for (ci, chunk) in rows.chunks(cap * mdts).enumerate() {
            let mut data = Vec::with_capacity(mdts * PAGE);
            for p in chunk.chunks(cap) {
                data.extend(Self::build_page(&schema, p)?);
            }
            let lba = first + (ci * mdts) as u64;
            cmds.push(if self.kind.flixr() {
                Command::WriteIdx {
                    table: dev_id,
                    lba,
                    data,
                }
            } else {
                Command::Write { lba, data }
            });
        }
        self.host_cpu(rows.len() as f64 * self.cycles_per_record);
        let done = self.pipelined(cmds)?;
        let end = done.iter().map(|c| c.0.acct.completed).max();
        if let Some(e) = end {
            self.client.wait_until(e);
        }
        self.traffic.data_pages_written += pages;
        let tb = &mut self.tables[t.0];
        tb.used = pages;
        tb.rows = rows.len() as u64;
        for p in 0..pages {
            let n = rows.len().saturating_sub(p as usize * cap).min(cap);
            tb.free[p as usize] = (cap - n) as u16;
            if n < cap {
                tb.room.insert(p);
            }
        }
        self.saw_keys(t, keys.iter().copied());
        let pairs: Vec<(i64, u64)> = keys
            .iter()
            .enumerate()
            .map(|(i, &k)| (k, first + (i / cap) as u64))
            .collect();
        self.index_bulk(t, pairs, pages)?;
        // Secondary host trees over their columns.
        for si in 0..self.tables[t.0].secondary.len() {
            let col = self.tables[t.0].secondary[si].0;
            let mut pairs: Vec<(i64, u64)> = rows
                .iter()
                .enumerate()
                .filter_map(|(i, r)| {
                    Some((r.get(col).and_then(value_i64)?, first + (i / cap) as u64))
                })
                .collect();
            pairs.sort_unstable();
            let mut touch = Touch::default();
            let Some(tree) = self.tables[t.0].secondary[si].1.as_mut() else {
                continue;
            };
            tree.bulk_load(pairs, 0.7, &mut touch)?;
            let n = touch.written.len() as f64;
            self.host_cpu(n * self.opts.host_node_cycles);
            self.write_nodes_of(t, Some(si), &touch)?;
        }
        Ok(())
    }

    /// Add a secondary key on `column` of the empty table `t` (see the module docs):
    /// under FLIXR a further per-page encoding of the table (refused, nothing changed,
    /// when the device cannot pack it), under the host B+tree kinds a second tree.
    pub fn add_secondary(
        &mut self,
        t: TableId,
        column: &str,
        encoding: KeyEncoding,
    ) -> Result<(), StoreError> {
        let tb = self.table(t)?;
        if tb.used != 0 {
            return Err(StoreError::Invalid(format!(
                "add secondary keys to {:?} before loading it",
                tb.def.name
            )));
        }
        let col = tb
            .schema
            .column_index(column)
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        if col == tb.key || tb.secondary.iter().any(|(c, _)| *c == col) {
            return Err(StoreError::Invalid(format!(
                "{:?} already has a key on {column:?}",
                tb.def.name
            )));
        }
        if !tb.def.columns[col].1.is_numeric() {
            return Err(StoreError::Invalid(format!(
                "secondary key column {column:?} must be numeric"
            )));
        }
        let (dev_id, max_pages, cap) = (tb.dev_id, tb.def.max_pages, tb.cap as u64);
        let tree = if self.kind.flixr() {
            let encoding = match encoding {
                KeyEncoding::Range => IndexEncoding::Range,
                KeyEncoding::Bitmap(b) => IndexEncoding::Bitmap { bounds: b },
            };
            self.sync(Command::SendIdxEnc {
                table: dev_id,
                spec: IndexSpec {
                    column: column.to_string(),
                    encoding,
                },
            })?;
            None
        } else if self.kind.host_tree() {
            let lbas = (max_pages * cap * 2).div_ceil(csd_device::btree::FANOUT as u64) * 2 + 16;
            let first = self.next_lba;
            let end = first + lbas;
            let have = self.client.identify().lbas;
            if end > have {
                return Err(StoreError::Invalid(format!(
                    "the secondary tree needs LBAs {first}..{end}, the device has {have}"
                )));
            }
            self.next_lba = end;
            Some(PagedBtree::new(first, lbas)?)
        } else {
            None
        };
        self.tables[t.0].secondary.push((col, tree));
        Ok(())
    }

    /// Refuse row changes on a table whose secondary keys are host trees.
    fn check_mutable(&self, t: TableId) -> Result<(), StoreError> {
        let tb = self.table(t)?;
        if tb.secondary.iter().any(|(_, tr)| tr.is_some()) {
            return Err(StoreError::Invalid(format!(
                "{:?} has secondary host B+trees, kept for bulk-loaded tables only: INSERT, DELETE and UPDATE are refused",
                tb.def.name
            )));
        }
        Ok(())
    }

    /// Rows of `t` with `lo <= key <= hi` and `tlo <= column <= thi` for every
    /// `(column, tlo, thi)` of `terms` (columns with a secondary key narrow the pages
    /// read) that satisfy `pred`.
    pub fn scan_keys(
        &mut self,
        t: TableId,
        (lo, hi): (i64, i64),
        terms: &[(usize, i64, i64)],
        pred: &dyn Fn(&[Value]) -> bool,
    ) -> Result<Vec<Row>, StoreError> {
        if lo > hi || terms.iter().any(|(_, a, b)| a > b) {
            return Ok(Vec::new());
        }
        let tb = self.table(t)?;
        let keyed: Vec<(usize, usize, i64, i64)> = terms
            .iter()
            .filter_map(|&(c, a, b)| {
                tb.secondary
                    .iter()
                    .position(|(sc, _)| *sc == c)
                    .map(|si| (si, c, a, b))
            })
            .collect();
        let all = |r: &[Value]| {
            terms.iter().all(|&(c, a, b)| {
                r.get(c)
                    .and_then(value_i64)
                    .is_some_and(|v| a <= v && v <= b)
            }) && pred(r)
        };
        if keyed.is_empty() {
            return self.scan_where(t, lo, hi, &all);
        }
        let pages = match self.kind {
            IndexKind::FlixrS | IndexKind::FlixrHS => {
                let rs = self.flixr_runs(t, lo, hi);
                if rs.is_empty() {
                    return Ok(Vec::new());
                }
                let tb = &self.tables[t.0];
                let name = |c: usize| tb.def.columns[c].0.clone();
                let mut rule_terms = vec![csd_device::RuleTerm {
                    column: name(tb.key),
                    rule: IndexRule::Between { lo, hi },
                }];
                for &(_, c, a, b) in &keyed {
                    rule_terms.push(csd_device::RuleTerm {
                        column: name(c),
                        rule: IndexRule::Between { lo: a, hi: b },
                    });
                }
                let dev_id = tb.dev_id;
                let rule = match self
                    .sync(Command::SendIdxIcrKeys {
                        table: dev_id,
                        terms: rule_terms,
                    })?
                    .0
                    .payload
                {
                    Payload::FlixrRule(r) => r,
                    p => {
                        return Err(StoreError::Invalid(format!(
                            "SendIdxIcrKeys answered {p:?}"
                        )));
                    }
                };
                let out = self.filtered(rs, |lba, blocks, _| Command::ReadIdx {
                    table: dev_id,
                    rule,
                    lba,
                    blocks,
                });
                self.drop_rule(t, rule)?;
                out?
            }
            IndexKind::HostBtree | IndexKind::HostBtreeIdeal if !self.prefers_scan(t, lo, hi) => {
                let mut touch = Touch::default();
                let tb = &self.tables[t.0];
                let tree = tb
                    .tree
                    .as_ref()
                    .ok_or_else(|| StoreError::Invalid("no tree".into()))?;
                let mut pages: BTreeSet<u64> = tree.range(lo, hi, &mut touch).into_iter().collect();
                for &(si, _, a, b) in &keyed {
                    if let Some(tr) = tb.secondary[si].1.as_ref() {
                        let other: BTreeSet<u64> = tr.range(a, b, &mut touch).into_iter().collect();
                        pages = pages.intersection(&other).copied().collect();
                    }
                }
                self.read_nodes(&touch)?;
                let pages: Vec<u64> = pages.into_iter().collect();
                self.read_pages(&pages)?
            }
            _ => self.candidate_pages(t, lo, hi)?,
        };
        Ok(self.filter_rows(t, &pages, lo, hi, &all))
    }

    /// Widen `t`'s key statistics by `keys`.
    fn saw_keys(&mut self, t: TableId, keys: impl Iterator<Item = i64>) {
        let tb = &mut self.tables[t.0];
        for k in keys {
            tb.keys = Some(match tb.keys {
                None => (k, k),
                Some((a, b)) => (a.min(k), b.max(k)),
            });
        }
    }

    /// Would a B+tree configuration's optimizer scan `t` instead of using its index for
    /// `lo..=hi`? When the key statistics say the range covers more than
    /// [`FULL_SCAN_FRACTION`] of the key span (uniform keys assumed, as without a
    /// histogram).
    fn prefers_scan(&self, t: TableId, lo: i64, hi: i64) -> bool {
        let Some((a, b)) = self.tables[t.0].keys else {
            return false;
        };
        let span = (b as i128 - a as i128 + 1) as f64;
        let cover = (hi.min(b) as i128 - lo.max(a) as i128 + 1).max(0) as f64;
        cover / span > FULL_SCAN_FRACTION
    }

    fn index_bulk(
        &mut self,
        t: TableId,
        pairs: Vec<(i64, u64)>,
        pages: u64,
    ) -> Result<(), StoreError> {
        match self.kind {
            IndexKind::HostBtree | IndexKind::HostBtreeIdeal => {
                let mut touch = Touch::default();
                let tree = self.tables[t.0]
                    .tree
                    .as_mut()
                    .ok_or_else(|| StoreError::Invalid("no tree".into()))?;
                tree.bulk_load(pairs, 0.7, &mut touch)?;
                let n = touch.written.len() as f64;
                self.host_cpu(n * self.opts.host_node_cycles);
                self.write_nodes(t, &touch)?;
            }
            IndexKind::SsdBtree => self.ssd_create(t, pairs)?,
            IndexKind::FlixrHS => {
                let first = self.tables[t.0].first;
                for p in 0..pages {
                    self.learn_page(t, first + p)?;
                }
            }
            IndexKind::NoIndex | IndexKind::FlixrS => {}
        }
        Ok(())
    }

    /// SsdIdxCreate over `t`'s node region from `pairs`.
    fn ssd_create(&mut self, t: TableId, pairs: Vec<(i64, u64)>) -> Result<(), StoreError> {
        let (first, lbas) = self.tables[t.0].tree_region;
        if self.tables[t.0].ssd.is_some() {
            return Err(StoreError::Invalid(
                "the table's in-SSD index exists already".into(),
            ));
        }
        let (c, meta) = self.sync(Command::SsdIdxCreate { first, lbas, pairs })?;
        self.traffic.index_pages_written += c.acct.flash_programs;
        self.traffic.map_flash_reads += meta;
        match c.payload {
            Payload::SsdIndex(id) => self.tables[t.0].ssd = Some(id),
            p => return Err(StoreError::Invalid(format!("SsdIdxCreate answered {p:?}"))),
        }
        Ok(())
    }

    /// UPDATE_HOST_INDEX for page `lba`: the tiny host tree learns its range.
    fn learn_page(&mut self, t: TableId, lba: u64) -> Result<(), StoreError> {
        let dev_id = self.tables[t.0].dev_id;
        let v = match self
            .sync(Command::UpdateHostIndex { table: dev_id, lba })?
            .0
            .payload
        {
            Payload::HostIndex(v) => v,
            p => {
                return Err(StoreError::Invalid(format!(
                    "UpdateHostIndex answered {p:?}"
                )));
            }
        };
        let hs = &mut self.tables[t.0].hs;
        if let Some((mn, _)) = hs.range.remove(&lba) {
            hs.by_min.remove(&(mn, lba));
        }
        let depth = (hs.by_min.len().max(2) as f64).log2();
        match v {
            HostIndexValue::Range { min, max } => {
                hs.by_min.insert((min, lba), max);
                hs.range.insert(lba, (min, max));
            }
            HostIndexValue::Unknown => {
                hs.by_min.insert((i64::MIN, lba), i64::MAX);
                hs.range.insert(lba, (i64::MIN, i64::MAX));
            }
            HostIndexValue::Empty => {}
        }
        self.host_cpu(self.opts.host_node_cycles + depth * self.opts.host_compare_cycles);
        Ok(())
    }

    /// Write the nodes `touch` changed (host B+tree), pipelined.
    fn write_nodes(&mut self, t: TableId, touch: &Touch) -> Result<(), StoreError> {
        self.write_nodes_of(t, None, touch)
    }

    /// [`Self::write_nodes`] of the primary tree (`None`) or secondary tree `Some(i)`.
    fn write_nodes_of(
        &mut self,
        t: TableId,
        sec: Option<usize>,
        touch: &Touch,
    ) -> Result<(), StoreError> {
        for &l in &touch.freed {
            self.cache.remove(l);
        }
        let mut lbas = touch.written.clone();
        lbas.sort_unstable();
        let mdts = self.client.identify().mdts_blocks as u64;
        let tb = &self.tables[t.0];
        let tree = match sec {
            None => tb.tree.as_ref(),
            Some(i) => tb.secondary.get(i).and_then(|(_, tr)| tr.as_ref()),
        }
        .ok_or_else(|| StoreError::Invalid("no tree".into()))?;
        let mut cmds = Vec::new();
        for (first, n) in runs(&lbas, mdts) {
            let mut data = Vec::with_capacity(n as usize * PAGE);
            for l in first..first + n {
                data.extend(tree.node_bytes(l).unwrap_or_else(|| vec![0; PAGE]));
            }
            cmds.push(Command::Write { lba: first, data });
        }
        for &l in &lbas {
            self.cache.insert(l);
        }
        self.traffic.index_pages_written += lbas.len() as u64;
        // A background writer: the host goes on, the device stays busy with them.
        self.host_cpu(cmds.len() as f64 * self.opts.host_io_cycles);
        let at = self.client.now();
        for cmd in cmds {
            let c = self.client.exec_detached(cmd, at)?;
            self.traffic.link_bytes += c.acct.host_link_bytes;
            self.traffic.commands += 1;
        }
        Ok(())
    }

    /// Charge a host B+tree traversal: missing nodes read (dependent), CPU per node.
    fn read_nodes(&mut self, touch: &Touch) -> Result<(), StoreError> {
        for &l in &touch.read {
            if !self.cache.touch(l) {
                let (c, meta) = self.sync(Command::Read { lba: l, blocks: 1 })?;
                self.traffic.index_pages_to_host += 1;
                self.traffic.index_flash_reads += c.acct.flash_reads.saturating_sub(meta);
                self.traffic.map_flash_reads += meta;
                self.cache.insert(l);
            }
        }
        self.host_cpu(
            touch.read.len() as f64 * self.opts.host_node_cycles
                + touch.compares as f64 * self.opts.host_compare_cycles,
        );
        Ok(())
    }

    /// Index maintenance for pairs removed and added.
    fn index_update(
        &mut self,
        t: TableId,
        insert: &[(i64, u64)],
        remove: &[(i64, u64)],
    ) -> Result<(), StoreError> {
        if insert.is_empty() && remove.is_empty() {
            return Ok(());
        }
        match self.kind {
            IndexKind::HostBtree | IndexKind::HostBtreeIdeal => {
                let mut all = Touch::default();
                for (ins, &(k, v)) in remove
                    .iter()
                    .map(|p| (false, p))
                    .chain(insert.iter().map(|p| (true, p)))
                {
                    let mut touch = Touch::default();
                    let tree = self.tables[t.0]
                        .tree
                        .as_mut()
                        .ok_or_else(|| StoreError::Invalid("no tree".into()))?;
                    if ins {
                        tree.insert(k, v, &mut touch)?;
                    } else {
                        tree.remove(k, v, &mut touch);
                    }
                    self.read_nodes(&touch)?;
                    for l in touch.written {
                        if !all.written.contains(&l) {
                            all.written.push(l);
                        }
                    }
                    all.written.retain(|l| !touch.freed.contains(l));
                    all.freed.extend(touch.freed);
                }
                self.write_nodes(t, &all)?;
            }
            IndexKind::SsdBtree => {
                let Some(id) = self.tables[t.0].ssd else {
                    return self.ssd_create(t, insert.to_vec());
                };
                let (c, meta) = self.sync(Command::SsdIdxUpdate {
                    index: id,
                    insert: insert.to_vec(),
                    remove: remove.to_vec(),
                })?;
                self.traffic.index_flash_reads += c.acct.flash_reads.saturating_sub(meta);
                self.traffic.map_flash_reads += meta;
                self.traffic.index_pages_written += c.acct.flash_programs;
            }
            _ => {}
        }
        Ok(())
    }

    /// Write whole pages `(lba, bytes)` of `t` (WRITE_IDX under FLIXR), pipelined; then
    /// FLIXR-HS learns their new ranges.
    fn write_pages(&mut self, t: TableId, pages: Vec<(u64, Vec<u8>)>) -> Result<(), StoreError> {
        let dev_id = self.tables[t.0].dev_id;
        let n = pages.len() as u64;
        let lbas: Vec<u64> = pages.iter().map(|p| p.0).collect();
        let cmds = pages
            .into_iter()
            .map(|(lba, data)| {
                if self.kind.flixr() {
                    Command::WriteIdx {
                        table: dev_id,
                        lba,
                        data,
                    }
                } else {
                    Command::Write { lba, data }
                }
            })
            .collect();
        self.host_cpu(n as f64 * self.cycles_per_page);
        let done = self.pipelined(cmds)?;
        if let Some(e) = done.iter().map(|c| c.0.acct.completed).max() {
            self.client.wait_until(e);
        }
        self.traffic.data_pages_written += n;
        if self.kind == IndexKind::FlixrHS {
            for l in lbas {
                self.learn_page(t, l)?;
            }
        }
        Ok(())
    }

    /// Read pages `lbas` (sorted) of a table with Reads of consecutive runs, pipelined.
    fn read_pages(&mut self, lbas: &[u64]) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        let mdts = self.client.identify().mdts_blocks as u64;
        let rs = runs(lbas, mdts);
        let cmds = rs
            .iter()
            .map(|&(lba, n)| Command::Read {
                lba,
                blocks: n as u32,
            })
            .collect();
        let done = self.pipelined(cmds)?;
        let mut out = Vec::with_capacity(lbas.len());
        let mut end = self.client.now();
        for ((first, n), (c, meta)) in rs.into_iter().zip(done) {
            end = end.max(c.acct.completed);
            self.traffic.data_flash_reads += c.acct.flash_reads.saturating_sub(meta);
            self.traffic.map_flash_reads += meta;
            self.traffic.data_pages_to_host += n;
            let d = Self::payload_data(c);
            for (i, p) in d.chunks(PAGE).enumerate() {
                out.push((first + i as u64, p.to_vec()));
            }
        }
        self.client.wait_until(end);
        Ok(out)
    }

    /// Count a FLIXR filtered read's reply; returns its pages and where to resume.
    fn take_index_read(
        &mut self,
        c: Completion,
        meta: u64,
        out: &mut Vec<(u64, Vec<u8>)>,
    ) -> Option<u64> {
        let flash = c.acct.flash_reads;
        match c.payload {
            Payload::IndexRead(r) => {
                self.traffic.index_flash_reads += r.index_page_reads;
                self.traffic.map_flash_reads += meta.saturating_sub(r.index_page_reads);
                self.traffic.data_flash_reads += flash.saturating_sub(meta);
                self.traffic.data_pages_to_host += r.lbas.len() as u64;
                self.traffic.pages_skipped += r.skipped.len() as u64;
                for (l, p) in r.lbas.iter().zip(r.data.chunks(PAGE)) {
                    out.push((*l, p.to_vec()));
                }
                r.resume_at
            }
            _ => None,
        }
    }

    /// The page runs a FLIXR read covers for `lo..=hi` of `t`: the whole extent
    /// (FLIXR-S) or the tiny host tree's candidates (FLIXR-HS).
    fn flixr_runs(&mut self, t: TableId, lo: i64, hi: i64) -> Vec<(u64, u64)> {
        let tb = &self.tables[t.0];
        if self.kind == IndexKind::FlixrHS {
            let mut pages: Vec<u64> = Vec::new();
            let mut seen = 0u64;
            for (&(_, p), &mx) in tb.hs.by_min.range(..=(hi, u64::MAX)) {
                seen += 1;
                if mx >= lo {
                    pages.push(p);
                }
            }
            pages.sort_unstable();
            let depth = (tb.hs.by_min.len().max(2) as f64).log2();
            let cycles =
                depth * self.opts.host_node_cycles + seen as f64 * self.opts.host_compare_cycles;
            self.host_cpu(cycles);
            runs(&pages, csd_device::flixr::MAX_INDEX_SCAN)
        } else if tb.used == 0 {
            Vec::new()
        } else {
            vec![(tb.first, tb.used)]
        }
    }

    /// Register a rule for `lo..=hi` on `t`.
    fn rule(&mut self, t: TableId, rule: IndexRule) -> Result<u16, StoreError> {
        let dev_id = self.tables[t.0].dev_id;
        match self
            .sync(Command::SendIdxIcr {
                table: dev_id,
                rule,
            })?
            .0
            .payload
        {
            Payload::FlixrRule(r) => Ok(r),
            p => Err(StoreError::Invalid(format!("SendIdxIcr answered {p:?}"))),
        }
    }

    fn drop_rule(&mut self, t: TableId, rule: u16) -> Result<(), StoreError> {
        let dev_id = self.tables[t.0].dev_id;
        self.sync(Command::DropIdxIcr {
            table: dev_id,
            rule,
        })?;
        Ok(())
    }

    /// Run resumable filtered reads over `runs` (`mk(lba, blocks, first)` builds each
    /// command): the runs are cut into pieces of [`FILTER_CHUNK_MDTS`] × MDTS LBAs
    /// kept `qd` deep; a piece that hit the transfer limit continues in the next wave.
    fn filtered(
        &mut self,
        runs: Vec<(u64, u64)>,
        mut mk: impl FnMut(u64, u32, bool) -> Command,
    ) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        let piece = (self.client.identify().mdts_blocks as u64 * FILTER_CHUNK_MDTS)
            .clamp(1, csd_device::flixr::MAX_INDEX_SCAN);
        let mut pending: Vec<(u64, u64)> = Vec::new();
        for (start, n) in runs {
            let mut l = start;
            while l < start + n {
                let m = (start + n - l).min(piece);
                pending.push((l, l + m));
                l += m;
            }
        }
        let mut out = Vec::new();
        let mut first = true;
        while !pending.is_empty() {
            let cmds: Vec<Command> = pending
                .iter()
                .map(|&(l, e)| {
                    let c = mk(l, (e - l) as u32, first);
                    first = false;
                    c
                })
                .collect();
            let done = self.pipelined(cmds)?;
            let mut next = Vec::new();
            let mut end = self.client.now();
            for ((_, e), (c, meta)) in pending.iter().zip(done) {
                end = end.max(c.acct.completed);
                if let Some(r) = self.take_index_read(c, meta, &mut out) {
                    next.push((r, *e));
                }
            }
            self.client.wait_until(end);
            pending = next;
        }
        out.sort_by_key(|p| p.0);
        Ok(out)
    }

    /// The pages of `t` that may hold keys in `lo..=hi`, read through the configuration's
    /// access path.
    fn candidate_pages(
        &mut self,
        t: TableId,
        lo: i64,
        hi: i64,
    ) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        self.table(t)?;
        match self.kind {
            IndexKind::NoIndex => {
                let tb = &self.tables[t.0];
                let lbas: Vec<u64> = (tb.first..tb.first + tb.used).collect();
                self.read_pages(&lbas)
            }
            IndexKind::HostBtree | IndexKind::HostBtreeIdeal | IndexKind::SsdBtree
                if self.prefers_scan(t, lo, hi) =>
            {
                let tb = &self.tables[t.0];
                let lbas: Vec<u64> = (tb.first..tb.first + tb.used).collect();
                self.read_pages(&lbas)
            }
            IndexKind::HostBtree | IndexKind::HostBtreeIdeal => {
                let mut touch = Touch::default();
                let tree = self.tables[t.0]
                    .tree
                    .as_ref()
                    .ok_or_else(|| StoreError::Invalid("no tree".into()))?;
                let mut pages = tree.range(lo, hi, &mut touch);
                self.read_nodes(&touch)?;
                pages.sort_unstable();
                pages.dedup();
                self.read_pages(&pages)
            }
            IndexKind::SsdBtree => {
                let id = self.tables[t.0]
                    .ssd
                    .ok_or_else(|| StoreError::Invalid("no in-SSD index".into()))?;
                let mut out = Vec::new();
                let mut from = 0u64;
                loop {
                    let nodes0 = self.client.device().ssd_btree().stats().node_reads;
                    let (c, meta) = self.sync(Command::SsdIdxRead {
                        index: id,
                        lo,
                        hi,
                        from,
                    })?;
                    let nodes = self.client.device().ssd_btree().stats().node_reads - nodes0;
                    let flash = c.acct.flash_reads;
                    let resume = match c.payload {
                        Payload::IndexRead(r) => {
                            self.traffic.index_flash_reads += nodes;
                            self.traffic.map_flash_reads += meta;
                            self.traffic.data_flash_reads +=
                                flash.saturating_sub(meta).saturating_sub(nodes);
                            self.traffic.data_pages_to_host += r.lbas.len() as u64;
                            for (l, p) in r.lbas.iter().zip(r.data.chunks(PAGE)) {
                                out.push((*l, p.to_vec()));
                            }
                            r.resume_at
                        }
                        _ => None,
                    };
                    match resume {
                        Some(n) => from = n,
                        None => break,
                    }
                }
                Ok(out)
            }
            IndexKind::FlixrS | IndexKind::FlixrHS => {
                let rs = self.flixr_runs(t, lo, hi);
                if rs.is_empty() {
                    return Ok(Vec::new());
                }
                let rule = self.rule(t, IndexRule::Between { lo, hi })?;
                let dev_id = self.tables[t.0].dev_id;
                let out = self.filtered(rs, |lba, blocks, _| Command::ReadIdx {
                    table: dev_id,
                    rule,
                    lba,
                    blocks,
                });
                self.drop_rule(t, rule)?;
                out
            }
        }
    }

    /// Rows of `pages` whose key is in `lo..=hi` and that satisfy `pred`; charges the
    /// host CPU for every row examined.
    fn filter_rows(
        &mut self,
        t: TableId,
        pages: &[(u64, Vec<u8>)],
        lo: i64,
        hi: i64,
        pred: &dyn Fn(&[Value]) -> bool,
    ) -> Vec<Row> {
        let tb = &self.tables[t.0];
        let mut out = Vec::new();
        let mut seen = 0u64;
        for (lba, p) in pages {
            let Ok(v) = PageView::parse(p, &tb.schema) else {
                continue;
            };
            seen += v.row_count() as u64;
            let Ok(col) = v.column(tb.key) else {
                continue;
            };
            for i in 0..v.row_count() {
                let Some(k) = col.get_i64(i) else { continue };
                if k < lo || k > hi {
                    continue;
                }
                let Ok(values) = v.row_values(i) else {
                    continue;
                };
                if pred(&values) {
                    out.push(Row {
                        id: RowId {
                            page: *lba,
                            slot: i as u16,
                        },
                        values,
                    });
                }
            }
        }
        let cycles =
            seen as f64 * self.cycles_per_record + pages.len() as f64 * self.cycles_per_page;
        self.host_cpu(cycles);
        out
    }

    /// Rows of `t` whose key is one of `keys` (sorted, distinct), through the B+tree:
    /// every key traversed (host) or one SsdIdxRead per key kept `qd` deep (in-SSD), the
    /// data pages read once; other configurations scan with the smallest covering range.
    pub fn lookup_many(&mut self, t: TableId, keys: &[i64]) -> Result<Vec<Row>, StoreError> {
        let (Some(&lo), Some(&hi)) = (keys.first(), keys.last()) else {
            return Ok(Vec::new());
        };
        let want: BTreeSet<i64> = keys.iter().copied().collect();
        let pages = match self.kind {
            IndexKind::HostBtree | IndexKind::HostBtreeIdeal if !self.prefers_scan(t, lo, hi) => {
                let mut touch = Touch::default();
                let mut pages = Vec::new();
                let tree = self.tables[t.0]
                    .tree
                    .as_ref()
                    .ok_or_else(|| StoreError::Invalid("no tree".into()))?;
                for &k in keys {
                    pages.extend(tree.range(k, k, &mut touch));
                }
                self.read_nodes(&touch)?;
                pages.sort_unstable();
                pages.dedup();
                self.read_pages(&pages)?
            }
            IndexKind::SsdBtree if !self.prefers_scan(t, lo, hi) => {
                let id = self.tables[t.0]
                    .ssd
                    .ok_or_else(|| StoreError::Invalid("no in-SSD index".into()))?;
                let cmds = keys
                    .iter()
                    .map(|&k| Command::SsdIdxRead {
                        index: id,
                        lo: k,
                        hi: k,
                        from: 0,
                    })
                    .collect();
                let nodes0 = self.client.device().ssd_btree().stats().node_reads;
                let done = self.pipelined(cmds)?;
                let nodes = self.client.device().ssd_btree().stats().node_reads - nodes0;
                let mut out: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
                let mut end = self.client.now();
                let mut flash = 0u64;
                let mut more = Vec::new();
                for (&k, (c, meta)) in keys.iter().zip(done) {
                    end = end.max(c.acct.completed);
                    flash += c.acct.flash_reads.saturating_sub(meta);
                    self.traffic.map_flash_reads += meta;
                    if let Payload::IndexRead(r) = c.payload {
                        self.traffic.data_pages_to_host += r.lbas.len() as u64;
                        for (l, p) in r.lbas.iter().zip(r.data.chunks(PAGE)) {
                            out.insert(*l, p.to_vec());
                        }
                        if r.resume_at.is_some() {
                            more.push(k);
                        }
                    }
                }
                self.client.wait_until(end);
                self.traffic.index_flash_reads += nodes;
                self.traffic.data_flash_reads += flash.saturating_sub(nodes);
                // A key with more than MDTS pages: the rest through a resumed read.
                for k in more {
                    for (l, p) in self.candidate_pages(t, k, k)? {
                        out.insert(l, p);
                    }
                }
                out.into_iter().collect()
            }
            _ => self.candidate_pages(t, lo, hi)?,
        };
        let rows = self.filter_rows(t, &pages, lo, hi, &|_| true);
        let key = self.tables[t.0].key;
        Ok(rows
            .into_iter()
            .filter(|r| {
                r.values
                    .get(key)
                    .and_then(value_i64)
                    .is_some_and(|k| want.contains(&k))
            })
            .collect())
    }

    /// Rows of `t` with `lo <= key <= hi`, through the configuration's access path.
    pub fn scan(&mut self, t: TableId, lo: i64, hi: i64) -> Result<Vec<Row>, StoreError> {
        self.scan_where(t, lo, hi, &|_| true)
    }

    /// Rows of `t` with `lo <= key <= hi` that satisfy `pred` (a residual predicate the
    /// host evaluates).
    pub fn scan_where(
        &mut self,
        t: TableId,
        lo: i64,
        hi: i64,
        pred: &dyn Fn(&[Value]) -> bool,
    ) -> Result<Vec<Row>, StoreError> {
        if lo > hi {
            return Ok(Vec::new());
        }
        let pages = self.candidate_pages(t, lo, hi)?;
        Ok(self.filter_rows(t, &pages, lo, hi, pred))
    }

    /// Every row of `t` (a full scan under any configuration).
    pub fn scan_all(&mut self, t: TableId) -> Result<Vec<Row>, StoreError> {
        self.table(t)?;
        let tb = &self.tables[t.0];
        let lbas: Vec<u64> = (tb.first..tb.first + tb.used).collect();
        let pages = self.read_pages(&lbas)?;
        Ok(self.filter_rows(t, &pages, i64::MIN, i64::MAX, &|_| true))
    }

    /// Insert `rows` into `t`; returns their ids (valid until their pages change).
    pub fn insert(&mut self, t: TableId, rows: &[Vec<Value>]) -> Result<Vec<RowId>, StoreError> {
        self.check_mutable(t)?;
        let tb = self.table(t)?;
        let mut keys = Vec::with_capacity(rows.len());
        for r in rows {
            keys.push(Self::row_key(tb, r)?);
        }
        // Plan: pages with room, lowest first, then new pages; refuse before any I/O.
        let candidates = tb.room.iter().map(|&p| {
            let free = if p < tb.used {
                tb.free[p as usize] as usize
            } else {
                tb.cap as usize
            };
            (p, free)
        });
        let plan = crate::slotted::plan_insert(
            candidates,
            rows.len(),
            tb.cap as usize,
            tb.used,
            tb.def.max_pages,
        )
        .ok_or_else(|| StoreError::Full {
            table: tb.def.name.clone(),
            pages: tb.def.max_pages,
        })?;
        let (first, used, schema) = (tb.first, tb.used, tb.schema.clone());
        let old: Vec<u64> = plan
            .iter()
            .filter(|(p, _)| *p < used)
            .map(|(p, _)| first + p)
            .collect();
        let mut current: HashMap<u64, Vec<Vec<Value>>> = HashMap::new();
        let mut sorted_old = old.clone();
        sorted_old.sort_unstable();
        for (lba, bytes) in self.read_pages(&sorted_old)? {
            current.insert(lba, Self::parse_rows(&schema, &bytes));
        }
        let mut ids = Vec::with_capacity(rows.len());
        let mut writes = Vec::with_capacity(plan.len());
        let mut pairs = Vec::with_capacity(rows.len());
        let mut i = 0;
        for &(p, n) in &plan {
            let lba = first + p;
            let mut page = current.remove(&lba).unwrap_or_default();
            for _ in 0..n {
                ids.push(RowId {
                    page: lba,
                    slot: page.len() as u16,
                });
                pairs.push((keys[i], lba));
                page.push(rows[i].clone());
                i += 1;
            }
            writes.push((lba, Self::build_page(&schema, &page)?, page.len()));
        }
        self.host_cpu(rows.len() as f64 * self.cycles_per_record);
        self.saw_keys(t, keys.iter().copied());
        let tb = &mut self.tables[t.0];
        for (lba, _, len) in &writes {
            let p = lba - first;
            tb.free[p as usize] = tb.cap - *len as u16;
            if (*len as u16) < tb.cap {
                tb.room.insert(p);
            } else {
                tb.room.remove(&p);
            }
            tb.used = tb.used.max(p + 1);
        }
        tb.rows += rows.len() as u64;
        self.write_pages(t, writes.into_iter().map(|(l, b, _)| (l, b)).collect())?;
        self.index_update(t, &pairs, &[])?;
        Ok(ids)
    }

    /// Apply per-page changes: `del` slots removed, `upd` slots replaced. Ids must come
    /// from a scan after the pages' last change.
    fn modify(
        &mut self,
        t: TableId,
        del: &[RowId],
        upd: &[(RowId, Vec<Value>)],
    ) -> Result<u64, StoreError> {
        let tb = self.table(t)?;
        for (_, v) in upd {
            Self::row_key(tb, v)?;
        }
        let mut pages: Vec<u64> = del
            .iter()
            .map(|r| r.page)
            .chain(upd.iter().map(|r| r.0.page))
            .collect();
        pages.sort_unstable();
        pages.dedup();
        if let Some(bad) = pages
            .iter()
            .find(|&&p| p < tb.first || p >= tb.first + tb.used)
        {
            return Err(StoreError::Invalid(format!(
                "row id on page {bad} is not a page of table {:?}",
                tb.def.name
            )));
        }
        let (schema, key, first, cap) = (tb.schema.clone(), tb.key, tb.first, tb.cap);
        let read = self.read_pages(&pages)?;
        // Check every id first: nothing changes on a bad id.
        let mut contents: HashMap<u64, Vec<Option<Vec<Value>>>> = HashMap::new();
        for (lba, bytes) in read {
            contents.insert(
                lba,
                Self::parse_rows(&schema, &bytes)
                    .into_iter()
                    .map(Some)
                    .collect(),
            );
        }
        for id in del.iter().chain(upd.iter().map(|u| &u.0)) {
            let ok = contents
                .get(&id.page)
                .is_some_and(|rows| (id.slot as usize) < rows.len());
            if !ok {
                return Err(StoreError::Invalid(format!(
                    "row id {}:{} names no row (stale after a change to its page?)",
                    id.page, id.slot
                )));
            }
        }
        let mut remove = Vec::new();
        let mut insert = Vec::new();
        let mut changed = 0u64;
        for (id, v) in upd {
            if let Some(slot) = contents
                .get_mut(&id.page)
                .and_then(|r| r.get_mut(id.slot as usize))
                && let Some(old) = slot.as_ref()
            {
                let ok = old.get(key).and_then(value_i64);
                let nk = v.get(key).and_then(value_i64);
                if ok != nk
                    && let (Some(a), Some(b)) = (ok, nk)
                {
                    remove.push((a, id.page));
                    insert.push((b, id.page));
                }
                *slot = Some(v.clone());
                changed += 1;
            }
        }
        for id in del {
            if let Some(slot) = contents
                .get_mut(&id.page)
                .and_then(|r| r.get_mut(id.slot as usize))
                && let Some(old) = slot.take()
            {
                if let Some(k) = old.get(key).and_then(value_i64) {
                    remove.push((k, id.page));
                }
                changed += 1;
            }
        }
        let ndel = del.len() as u64;
        self.saw_keys(t, insert.iter().map(|p| p.0));
        let mut writes = Vec::new();
        let tb = &mut self.tables[t.0];
        for lba in pages {
            let rows: Vec<Vec<Value>> = contents
                .remove(&lba)
                .unwrap_or_default()
                .into_iter()
                .flatten()
                .collect();
            let p = lba - first;
            tb.free[p as usize] = cap - rows.len() as u16;
            if (rows.len() as u16) < cap {
                tb.room.insert(p);
            }
            writes.push((lba, Self::build_page(&schema, &rows)?));
        }
        tb.rows -= ndel.min(tb.rows);
        self.host_cpu(changed as f64 * self.cycles_per_record);
        self.write_pages(t, writes)?;
        self.index_update(t, &insert, &remove)?;
        Ok(changed)
    }

    /// Delete the rows `ids` (from a scan after their pages' last change).
    pub fn delete(&mut self, t: TableId, ids: &[RowId]) -> Result<u64, StoreError> {
        self.check_mutable(t)?;
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        self.modify(t, &ids, &[])
    }

    /// Replace rows: `(id, new values)`.
    pub fn update(&mut self, t: TableId, rows: &[(RowId, Vec<Value>)]) -> Result<u64, StoreError> {
        self.check_mutable(t)?;
        self.modify(t, &[], rows)
    }

    /// DELETE ... WHERE lo <= key <= hi AND pred: returns rows deleted.
    pub fn delete_where(
        &mut self,
        t: TableId,
        lo: i64,
        hi: i64,
        pred: &dyn Fn(&[Value]) -> bool,
    ) -> Result<u64, StoreError> {
        let rows = self.scan_where(t, lo, hi, pred)?;
        if rows.is_empty() {
            return Ok(0);
        }
        let ids: Vec<RowId> = rows.iter().map(|r| r.id).collect();
        self.delete(t, &ids)
    }

    /// UPDATE ... SET f(row) WHERE lo <= key <= hi AND pred: returns rows updated.
    pub fn update_where(
        &mut self,
        t: TableId,
        lo: i64,
        hi: i64,
        pred: &dyn Fn(&[Value]) -> bool,
        f: &dyn Fn(&mut Vec<Value>),
    ) -> Result<u64, StoreError> {
        let rows = self.scan_where(t, lo, hi, pred)?;
        if rows.is_empty() {
            return Ok(0);
        }
        let upd: Vec<(RowId, Vec<Value>)> = rows
            .into_iter()
            .map(|mut r| {
                f(&mut r.values);
                (r.id, r.values)
            })
            .collect();
        self.update(t, &upd)
    }

    /// `outer ⋈ inner` on `outer.outer_col = inner.key`, the outer side filtered to
    /// `lo <= outer.key <= hi` and `pred`: pairs of matching rows. The inner table's key
    /// is its join column (its index, and under FLIXR its bitmap encoding).
    pub fn join(
        &mut self,
        outer: TableId,
        lo: i64,
        hi: i64,
        pred: &dyn Fn(&[Value]) -> bool,
        outer_col: &str,
        inner: TableId,
    ) -> Result<Vec<(Row, Row)>, StoreError> {
        let oc = self
            .table(outer)?
            .schema
            .column_index(outer_col)
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        let ik = self.table(inner)?.key;
        if lo > hi {
            return Ok(Vec::new());
        }
        let (outer_rows, inner_rows) = match self.kind {
            IndexKind::FlixrS | IndexKind::FlixrHS => {
                let bounds = match &self.tables[inner.0].def.encoding {
                    KeyEncoding::Bitmap(b) => b.clone(),
                    KeyEncoding::Range => {
                        return Err(StoreError::Invalid(format!(
                            "a FLIXR join needs the inner table {:?} indexed with a bitmap",
                            self.tables[inner.0].def.name
                        )));
                    }
                };
                let tia = self.table_index(outer, oc, bounds)?;
                let rule = self.rule(outer, IndexRule::Between { lo, hi })?;
                let o_dev = self.tables[outer.0].dev_id;
                let rs = self.flixr_runs(outer, lo, hi);
                let pages = self.filtered(rs, |lba, blocks, reset| Command::ReadIdxJoin1 {
                    table: o_dev,
                    rule,
                    tia,
                    reset,
                    lba,
                    blocks,
                })?;
                self.drop_rule(outer, rule)?;
                let orows = self.filter_rows(outer, &pages, lo, hi, pred);
                let jrule = self.join_rule(inner, tia)?;
                let i_dev = self.tables[inner.0].dev_id;
                let tb = &self.tables[inner.0];
                let rs = if tb.used == 0 {
                    Vec::new()
                } else {
                    vec![(tb.first, tb.used)]
                };
                let ipages = if orows.is_empty() {
                    Vec::new()
                } else {
                    self.filtered(rs, |lba, blocks, _| Command::ReadIdxJoin2 {
                        table: i_dev,
                        rule: jrule,
                        lba,
                        blocks,
                    })?
                };
                let irows = self.filter_rows(inner, &ipages, i64::MIN, i64::MAX, &|_| true);
                (orows, irows)
            }
            IndexKind::NoIndex => {
                let orows = self.scan_where(outer, lo, hi, pred)?;
                let irows = if orows.is_empty() {
                    Vec::new()
                } else {
                    self.scan_all(inner)?
                };
                (orows, irows)
            }
            _ => {
                // Index nested loop, batched: each distinct outer key looked up in the
                // inner index, the pages found read once (multi-range read).
                let orows = self.scan_where(outer, lo, hi, pred)?;
                let mut keys: Vec<i64> = orows
                    .iter()
                    .filter_map(|r| r.values.get(oc).and_then(value_i64))
                    .collect();
                keys.sort_unstable();
                keys.dedup();
                let irows = self.lookup_many(inner, &keys)?;
                (orows, irows)
            }
        };
        // Host hash join.
        let mut ht: HashMap<i64, Vec<usize>> = HashMap::new();
        for (i, r) in inner_rows.iter().enumerate() {
            if let Some(k) = r.values.get(ik).and_then(value_i64) {
                ht.entry(k).or_default().push(i);
            }
        }
        let mut out = Vec::new();
        for o in outer_rows {
            let Some(k) = o.values.get(oc).and_then(value_i64) else {
                continue;
            };
            if let Some(is) = ht.get(&k) {
                for &i in is {
                    out.push((o.clone(), inner_rows[i].clone()));
                }
            }
        }
        let n = (inner_rows.len() + out.len()) as f64;
        self.host_cpu(n * self.cycles_per_record);
        Ok(out)
    }

    /// The per-table join-key index of `t`'s column `col` over `bounds` (SEND_TIDX_ENC
    /// once per column).
    fn table_index(&mut self, t: TableId, col: usize, bounds: Vec<i64>) -> Result<u16, StoreError> {
        if let Some(&id) = self.tables[t.0].tia.get(&col) {
            return Ok(id);
        }
        let dev_id = self.tables[t.0].dev_id;
        let column = self.tables[t.0].def.columns[col].0.clone();
        let id = match self
            .sync(Command::SendTidxEnc {
                table: dev_id,
                spec: JoinIndexSpec { column, bounds },
            })?
            .0
            .payload
        {
            Payload::FlixrRule(id) => id,
            p => return Err(StoreError::Invalid(format!("SendTidxEnc answered {p:?}"))),
        };
        self.tables[t.0].tia.insert(col, id);
        Ok(id)
    }

    fn join_rule(&mut self, inner: TableId, tia: u16) -> Result<u16, StoreError> {
        if let Some(&r) = self.tables[inner.0].join_rules.get(&tia) {
            return Ok(r);
        }
        let dev_id = self.tables[inner.0].dev_id;
        let r = match self
            .sync(Command::SendTidxIcr { table: dev_id, tia })?
            .0
            .payload
        {
            Payload::FlixrRule(r) => r,
            p => return Err(StoreError::Invalid(format!("SendTidxIcr answered {p:?}"))),
        };
        self.tables[inner.0].join_rules.insert(tia, r);
        Ok(r)
    }

    /// Check that every page of `t` holds rows whose keys its FLIXR entry bounds (tests):
    /// returns the pages checked.
    pub fn check_entries(&mut self, t: TableId) -> Result<u64, StoreError> {
        if !self.kind.flixr() {
            return Ok(0);
        }
        let tb = self.table(t)?;
        let (first, used, dev_id, schema, key) =
            (tb.first, tb.used, tb.dev_id, tb.schema.clone(), tb.key);
        let range = matches!(tb.def.encoding, KeyEncoding::Range);
        for lba in first..first + used {
            let bytes = self.client.read(lba, 1)?;
            let keys: Vec<i64> = Self::parse_rows(&schema, &bytes)
                .iter()
                .filter_map(|r| r.get(key).and_then(value_i64))
                .collect();
            if !range {
                continue;
            }
            let v = match self
                .client
                .exec(Command::UpdateHostIndex { table: dev_id, lba })?
                .payload
            {
                Payload::HostIndex(v) => v,
                _ => HostIndexValue::Unknown,
            };
            let ok = match v {
                HostIndexValue::Range { min, max } => {
                    !keys.is_empty() && keys.iter().all(|&k| min <= k && k <= max)
                }
                HostIndexValue::Empty => keys.is_empty(),
                HostIndexValue::Unknown => false,
            };
            if !ok {
                return Err(StoreError::Invalid(format!(
                    "page {lba}: entry {v:?} does not bound its keys {keys:?}"
                )));
            }
            if self.kind == IndexKind::FlixrHS {
                let hs = self.tables[t.0].hs.range.get(&lba).copied();
                let want = match v {
                    HostIndexValue::Range { min, max } => Some((min, max)),
                    _ => None,
                };
                if hs != want {
                    return Err(StoreError::Invalid(format!(
                        "page {lba}: tiny host tree has {hs:?}, the device {want:?}"
                    )));
                }
            }
        }
        Ok(used)
    }

    /// The B+tree's entries of `t` (host tree), for checks.
    pub fn host_tree_entries(&self, t: TableId) -> Result<Option<Vec<(i64, u64)>>, StoreError> {
        Ok(self.table(t)?.tree.as_ref().map(|t| t.entries()))
    }

    /// The in-SSD tree's entries of `t`, for checks.
    pub fn ssd_tree_entries(&mut self, t: TableId) -> Result<Option<Vec<(i64, u64)>>, StoreError> {
        let Some(id) = self.table(t)?.ssd else {
            return Ok(None);
        };
        Ok(self
            .client
            .device()
            .ssd_btree()
            .index(id)
            .map(|t| t.entries()))
    }
}

/// Runs of consecutive sorted LBAs, each at most `max` long: `(first, length)`.
pub fn runs(lbas: &[u64], max: u64) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = Vec::new();
    for &p in lbas {
        match v.last_mut() {
            Some((f, n)) if *f + *n == p && *n < max => *n += 1,
            _ => v.push((p, 1)),
        }
    }
    v
}
