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
//! * One table page per LBA (the FTL's mapping unit, so one FTL entry and one FLIXR
//!   per-page index per page): 4 KiB on most devices, 16 KiB in FLIXR's runs (the paper's
//!   InnoDB pages and the Cosmos+ firmware's 16 KiB mapping slice, `csd_flixr::Setup`);
//!   any multiple of [`MIN_PAGE`]. Pages lie in a fixed extent of `max_pages` LBAs per
//!   table, followed by the table's B+tree node region. Rows are fixed-width NSM rows; a
//!   page holds `capacity_for(schema, Nsm, LBA size)` rows. A B+tree
//!   node fills its LBA (a page, as InnoDB's index pages are its table pages: fan-out 682
//!   at 16 KiB), or `StoreOptions::node_kib` of entries at the LBA's start.
//! * The free-space map is a free-row count per page plus the set of pages with room;
//!   INSERT fills the lowest-numbered page with room (as a heap's FSM does), so keys
//!   inserted after deletes land among old keys and widen those pages' ranges, the
//!   coarse-grain effect of §6.3.
//! * There is no buffer pool: a modification reads the page (a Read), changes it on the
//!   host and writes it back whole (WRITE_IDX under FLIXR, Write otherwise). DELETE
//!   compacts the page (NSM pages keep rows packed), so a [`RowId`] is valid until its
//!   page is next modified; scans return fresh ids.
//! * Host B+tree nodes are kept for the statement that read or wrote them (as a buffer
//!   pool keeps the pages a statement fixed): a DELETE of rows whose entries share a
//!   leaf reads it once, for its scan, not once more per entry it removes; between
//!   statements the host cache alone decides ([`RowStore::set_host_cache_inner_levels`]:
//!   no leaf). Until 2026-11-30 a statement re-read a leaf per entry it changed (21
//!   leaf reads for a 20-row DELETE), which made FLIXR-HS 3.7x the host index on §6.1's
//!   Delete (paper 1.30x).
//! * Host CPU: every row examined costs `isp.host_cycles_per_record`, every page
//!   `isp.host_cycles_per_page`, every B+tree node visited [`StoreOptions::host_node_cycles`]
//!   plus [`StoreOptions::host_compare_cycles`] per key comparison, every command
//!   [`StoreOptions::host_io_cycles`] (the OS path of direct I/O), all at the host clock
//!   and not overlapped with I/O. Independent commands (data page runs, node writes) are
//!   kept [`StoreOptions::qd`] deep; dependent ones (inner B+tree nodes missing from the
//!   host cache, resumed READ_IDX) wait. The leaves a host B+tree traversal needs are
//!   named by their parents in host DRAM, so they are read together, runs of
//!   consecutive leaves in one Read, `qd` deep, before the data pages they name (flixr
//!   §3, Figure 1: "the first (and second) level index in the DRAM will point to leaf
//!   nodes (third level index pages) that need to be accessed").
//! * FLIXR-HS's tiny tree is keyed by every page's min (learnt from UPDATE_HOST_INDEX;
//!   the max it also returns is kept only to check the tree against the device): as
//!   flixr §4.1 splits the work, the host's search for `lo..=hi` reaches the entry of the
//!   last page whose min is below `lo` and goes on through the entries with
//!   `min <= hi`, sending READ_IDX for those pages (runs of consecutive pages together);
//!   the device compares each page's max with `lo` (the rule's comparison). Starting
//!   there is exact while the table is *clustered* (pages' key ranges disjoint and
//!   ordered like their mins): known from the rows the host itself loaded and wrote
//!   (a page that leaves its place among the mins ends it), never from the device's
//!   max. An unclustered table is searched from its first entry. Its entries are
//!   charged as host compares, and it never touches the device to be read (§5: all in
//!   host DRAM).
//! * A FLIXR rule is registered per query and released after (`DropIdxIcr`). Filtered
//!   reads are cut into pieces of [`FILTER_CHUNK_MDTS`] × MDTS LBAs kept `qd` deep, a
//!   piece stopped by the transfer limit resuming in the next wave.
//! * The B+tree configurations have an optimizer: a range covering more than
//!   [`FULL_SCAN_FRACTION`] of the key span seen so far is read by a full scan
//!   ([`StoreOptions::full_scan_fraction`]; `None` turns it off).
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
//!
//! Where things are:
//! * `mod.rs`: the public types (index kinds, table definitions, options, row ids,
//!   traffic counters), the store's state and its command issue helpers;
//! * `load.rs`: CREATE TABLE, bulk loading, secondary keys;
//! * `index.rs`: B+tree, in-SSD tree and FLIXR-HS maintenance, node I/O, checks;
//! * `pages.rs`: page reads and writes and FLIXR's filtered reads;
//! * `scan.rs`: range scans per configuration and batched lookups;
//! * `dml.rs`: INSERT, DELETE, UPDATE;
//! * `join.rs`: joins.

mod dml;
mod index;
mod join;
mod load;
mod pages;
mod scan;

use crate::client::{Client, CommandIssuer, HostError};
use csd_device::btree::{BtreeError, LruSet, NODE_BYTES, PagedBtree, Touch, fanout_of};
use csd_device::{
    Command, Completion, HostIndexValue, IndexEncoding, IndexRule, IndexSpec, JoinIndexSpec,
    NvmeDevice, Payload, TableFormat,
};
use csd_sim::SimTime;
use csd_table::{Column, ColumnType, Layout, PageView, Schema, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use thiserror::Error;

/// The smallest LBA (and so table page) the store takes: one host B+tree node
/// ([`NODE_BYTES`]); a larger LBA holds a node at its start.
pub const MIN_PAGE: usize = NODE_BYTES;

/// LBAs a table's B+tree region gets for `entries` index entries in nodes of
/// `node_bytes`: one node per LBA, nodes about half full, twice that for growth, plus room
/// for the inner levels.
pub fn tree_region_lbas(entries: u64, node_bytes: usize) -> u64 {
    (entries * 2).div_ceil(fanout_of(node_bytes).max(1) as u64) * 2 + 16
}

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

/// Its report name ([`IndexKind::name`]), padded as the format asks.
impl std::fmt::Display for IndexKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

/// Serialized as its report name ([`IndexKind::name`]), e.g. `"host-index"`.
impl serde::Serialize for IndexKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
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
    /// `(key, page)` pairs one in-SSD B+tree command carries (`SsdBtree`), at most the
    /// device's [`csd_device::ssd_btree::MAX_PAIRS_PER_COMMAND`] (larger values act as it):
    /// a table or statement with more pairs is sent in several commands.
    pub ssd_pairs_per_command: usize,
    /// The B+tree configurations' optimizer: a range covering more than this share of a
    /// table's key span is read by a full scan instead of through the index
    /// ([`FULL_SCAN_FRACTION`] by default); `None` walks the index for every range (flixr
    /// §5 describes no optimizer: its no-indexing configuration is the one that searches
    /// every record).
    pub full_scan_fraction: Option<f64>,
    /// KiB of a B+tree node (host and in-SSD trees), at the start of its LBA: `None`, the
    /// default, for the whole LBA (a node is a page, as InnoDB's index pages are its table
    /// pages: 16 KiB on FLIXR's runs, fan-out 682); `Some(k)` for `k` KiB, 4 up to the LBA
    /// (4: fan-out 170, the store's nodes until 2026-12-07).
    pub node_kib: Option<u32>,
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
            ssd_pairs_per_command: csd_device::ssd_btree::MAX_PAIRS_PER_COMMAND,
            full_scan_fraction: Some(FULL_SCAN_FRACTION),
            node_kib: None,
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

/// What the store's commands moved and cost, cumulative (or over a span: see
/// [`Traffic::since`]); serialized with these field names in reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
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

impl Traffic {
    /// What moved between `earlier` (a snapshot of the same store) and `self`.
    pub fn since(self, earlier: Traffic) -> Traffic {
        Traffic {
            index_pages_to_host: self.index_pages_to_host - earlier.index_pages_to_host,
            data_pages_to_host: self.data_pages_to_host - earlier.data_pages_to_host,
            index_flash_reads: self.index_flash_reads - earlier.index_flash_reads,
            data_flash_reads: self.data_flash_reads - earlier.data_flash_reads,
            map_flash_reads: self.map_flash_reads - earlier.map_flash_reads,
            index_pages_written: self.index_pages_written - earlier.index_pages_written,
            data_pages_written: self.data_pages_written - earlier.data_pages_written,
            link_bytes: self.link_bytes - earlier.link_bytes,
            host_cpu_ns: self.host_cpu_ns - earlier.host_cpu_ns,
            commands: self.commands - earlier.commands,
            pages_skipped: self.pages_skipped - earlier.pages_skipped,
        }
    }

    /// Pages fetched from storage to the host in FLIXR's Figure 11 sense: index pages
    /// (host B+tree nodes) and data pages.
    pub fn storage_pages(&self) -> (u64, u64) {
        (self.index_pages_to_host, self.data_pages_to_host)
    }
}

#[derive(Debug, Clone, Default)]
struct HsTree {
    /// `(min, page) -> max` of every page with rows.
    by_min: BTreeMap<(i64, u64), i64>,
    /// Page -> its current `(min, max)`.
    range: HashMap<u64, (i64, i64)>,
    /// The host knows (from the rows it wrote) that the pages' key ranges are disjoint
    /// and ordered like their mins: every page's keys lie between its min and the next
    /// page's min. Then a search starts at the last page whose min is below the range.
    clustered: bool,
    /// The largest key the host has written to the table.
    top: Option<i64>,
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
    /// The host keeps exactly the trees' inner nodes in DRAM (whichever they are as the
    /// trees change), and `cache` holds leaves only: none by default, every leaf is read
    /// from storage ([`RowStore::set_host_cache_inner_levels`],
    /// [`RowStore::set_host_cache_inner_levels_and_leaves`]).
    inner_levels: bool,
    /// Host B+tree nodes in host memory for the statement under way (read or written by
    /// it): a statement reads a leaf once, however many of its entries it changes
    /// ([`RowStore::statement`]).
    stmt_nodes: HashSet<u64>,
    /// Statements nested in the one under way (`delete_where` runs a scan and a delete).
    stmt_depth: u32,
    traffic: Traffic,
    /// Bytes of a table page: the device's LBA.
    page: usize,
    /// Bytes of a B+tree node ([`StoreOptions::node_kib`]).
    node: usize,
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
        if let Some(f) = opts.full_scan_fraction
            && (f.is_nan() || f < 0.0)
        {
            return Err(StoreError::Invalid(format!(
                "the full-scan fraction is a share of the key span, 0 or more (None: the \
                 optimizer off), not {f}"
            )));
        }
        let cfg = dev.block().ftl().nand().config().clone();
        let client = Client::new(dev)?;
        let page = client.identify().lba_size as usize;
        if page < MIN_PAGE || !page.is_multiple_of(MIN_PAGE) {
            return Err(StoreError::Invalid(format!(
                "the row store needs LBAs of a multiple of {MIN_PAGE} bytes (a table page is \
                 one LBA), the device has {page}"
            )));
        }
        let node = opts.node_kib.map_or(page, |k| k as usize * 1024);
        if node < NODE_BYTES || node > page {
            return Err(StoreError::Invalid(format!(
                "a B+tree node is 4 KiB up to the LBA ({} KiB), not {} KiB",
                page / 1024,
                node / 1024
            )));
        }
        let cache = match kind {
            IndexKind::HostBtreeIdeal => LruSet::new(usize::MAX),
            _ => LruSet::new((opts.host_cache_kib * 1024 / node as u64) as usize),
        };
        Ok(RowStore {
            client,
            kind,
            opts,
            tables: Vec::new(),
            next_lba: opts.first_lba,
            cache,
            inner_levels: false,
            stmt_nodes: HashSet::new(),
            stmt_depth: 0,
            traffic: Traffic::default(),
            page,
            node,
            host_hz: cfg.host.clock_mhz * 1e6,
            cycles_per_record: cfg.isp.host_cycles_per_record,
            cycles_per_page: cfg.isp.host_cycles_per_page,
        })
    }

    /// Bytes of a table page: the device's LBA.
    pub fn page_bytes(&self) -> usize {
        self.page
    }

    /// Bytes of a B+tree node (at the start of its LBA).
    pub fn node_bytes(&self) -> usize {
        self.node
    }

    /// Run `f` as one statement: the host B+tree nodes it reads or writes stay in host
    /// memory until it ends, as a database's buffer pool keeps the pages a statement has
    /// fixed, whatever the cache keeps between statements (with
    /// [`RowStore::set_host_cache_inner_levels`], no leaf). A statement run inside
    /// another one (a scan inside `delete_where`) is part of it.
    pub(super) fn statement<R>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        if self.stmt_depth == 0 {
            self.stmt_nodes.clear();
        }
        self.stmt_depth += 1;
        let r = f(self);
        self.stmt_depth -= 1;
        if self.stmt_depth == 0 {
            self.stmt_nodes.clear();
        }
        r
    }

    /// The configuration.
    pub fn kind(&self) -> IndexKind {
        self.kind
    }

    /// The host's modeled clock.
    pub fn now(&self) -> SimTime {
        self.client.now()
    }

    /// Make every write so far durable (a FLUSH: a write-back buffer is committed, as a
    /// database makes a load durable before it serves) and wait until the device is
    /// idle (background writes done): the start of a measurement, whatever the device's
    /// write cache.
    pub fn quiesce(&mut self) -> Result<(), StoreError> {
        self.client.exec(Command::Flush)?;
        let c = self
            .client
            .exec(Command::GetLogPage(csd_device::LogPage::Telemetry))?;
        if let Payload::Telemetry(t) = c.payload {
            self.client.wait_until(t.now);
        }
        Ok(())
    }

    /// While the event core records (`csd_sim::events::Recording`): book everything it
    /// recorded for this store's device and give the instants the client and the device
    /// hold their final values (the end of a measured run). Nothing outside a recording.
    /// The store itself keeps no instant between commands; it never compares one either
    /// (dependent commands wait on the clock, pipelined ones on the oldest in flight).
    pub fn settle_events(&mut self) {
        if csd_sim::events::recording() {
            self.client.run_events();
            self.client.settle_instants(&mut csd_sim::events::value);
        }
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

    /// LBAs of the inner nodes (every level above the leaves) of every host B+tree of
    /// the store, primary and secondary; empty unless the kind keeps host trees.
    pub fn host_inner_nodes(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .host_trees()
            .flat_map(PagedBtree::inner_node_lbas)
            .collect();
        v.sort_unstable();
        v
    }

    /// Every host B+tree of the store, primary and secondary.
    fn host_trees(&self) -> impl Iterator<Item = &PagedBtree> {
        self.tables.iter().flat_map(|tb| {
            tb.tree
                .iter()
                .chain(tb.secondary.iter().filter_map(|(_, t)| t.as_ref()))
        })
    }

    /// Resize the host B+tree node cache (`HostBtree`; the ideal kind keeps every node)
    /// to `nodes` nodes, warm with `warm` (the first `nodes` of them; most recently used
    /// last). Earlier contents are dropped. `nodes` is at least 1.
    pub fn set_host_cache(&mut self, nodes: usize, warm: &[u64]) {
        if self.kind == IndexKind::HostBtreeIdeal {
            return;
        }
        let nodes = nodes.max(1);
        self.cache = LruSet::new(nodes);
        for &l in warm.iter().take(nodes) {
            self.cache.insert(l);
        }
    }

    /// The host B+tree cache (`HostBtree`) holds exactly the inner nodes of every tree,
    /// the levels above the leaves, as the trees change (splits add inner nodes), and
    /// every leaf a traversal needs comes from storage (flixr §3, Figure 1: "the first
    /// (and second) level index in the DRAM will point to leaf nodes (third level index
    /// pages) that need to be accessed. These lower-level indices are read from the
    /// storage"). Leaves never displace inner nodes, as they would in an LRU of as many
    /// nodes as the trees have inner ones. No effect on the ideal host index.
    pub fn set_host_cache_inner_levels(&mut self) {
        self.set_host_cache_inner_levels_and_leaves(0, &[]);
    }

    /// As [`RowStore::set_host_cache_inner_levels`], and beside the inner levels an LRU
    /// of at most `leaves` leaves, warm with `warm` (the first `leaves` of them, most
    /// recently used last): "some of the layers in the tree are cached on host DRAM on
    /// demand" (flixr §5) and "storing recently used index pages" (§3). A leaf read from
    /// storage or written stays until `leaves` more recent ones push it out; inner nodes
    /// never compete with leaves for the room. Earlier cache contents are dropped. No
    /// effect on the ideal host index.
    pub fn set_host_cache_inner_levels_and_leaves(&mut self, leaves: usize, warm: &[u64]) {
        if self.kind == IndexKind::HostBtree {
            self.inner_levels = true;
            self.cache = LruSet::new(leaves);
            for &l in warm.iter().take(leaves) {
                self.cache.insert(l);
            }
        }
    }

    /// LBAs of the leaves of every host B+tree of the store (primary and secondary),
    /// sorted; empty unless the kind keeps host trees.
    pub fn host_leaf_nodes(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.host_trees().flat_map(PagedBtree::leaf_lbas).collect();
        v.sort_unstable();
        v
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

    /// While the event core records and its graph is due for compaction: compact it,
    /// renaming the instants the client and the device hold. Called where the store
    /// holds no other instant (before a dependent or a pipelined batch of commands).
    fn compact_events(&mut self) {
        if !csd_sim::events::compact_due() {
            return;
        }
        let mut roots = Vec::new();
        self.client.settle_instants(&mut |t| {
            roots.push(t);
            t
        });
        if let Some(remap) = csd_sim::events::compact(&roots) {
            self.client.settle_instants(&mut |t| remap.apply(t));
        }
    }

    /// A dependent command: issued at the clock, waited for.
    fn sync(&mut self, cmd: Command) -> Result<(Completion, u64), StoreError> {
        self.compact_events();
        self.host_cpu(self.opts.host_io_cycles);
        let at = self.client.now();
        let out = self.issue(cmd, at);
        // The host waited for it: its clock is final (the event core books up to it).
        self.client.settle_now();
        out
    }

    /// Independent commands kept `qd` deep; the clock ends at the last completion.
    fn pipelined(&mut self, cmds: Vec<Command>) -> Result<Vec<(Completion, u64)>, StoreError> {
        self.compact_events();
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
        self.client.settle_now();
        Ok(out)
    }

    fn payload_data(c: Completion) -> Vec<u8> {
        match c.payload {
            Payload::Data(d) => d,
            Payload::IndexRead(r) => r.data,
            _ => Vec::new(),
        }
    }
}

/// Runs of consecutive sorted LBAs, each at most `max` long: `(first, length)` (the
/// device's firmware groups its node reads the same way).
pub use csd_device::btree::runs;
