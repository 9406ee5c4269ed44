//! FLIXR: per-page indexes kept in the FTL's mapping entries (flixr §4, Table 1).
//!
//! What it realizes:
//! * The registries of §4.2 and §4.4: the table structure information array (TSIA,
//!   [`Command::SendTblCol`](crate::Command::SendTblCol)), the index encoding rule array
//!   (IERA, up to [`MAX_KEYS`] encodings per table, `SendIdxEnc`, released one at a time
//!   with `DropIdxEnc`) and the index comparison rules (`SendIdxIcr` on the first key,
//!   `SendIdxIcrKeys` over several keys, identified by `(tblID, icrID)`).
//! * Multi-key per-page indexes (§3.1, §6.4): a table's encodings are packed into one
//!   entry (e.g. a range on `l_shipdate` and bitmaps on `l_discount` and `l_quantity`),
//!   each at its byte offset ([`Flixr::key_layout`]); WRITE_IDX computes all of them,
//!   trim clears them, GC and recovery keep them as the opaque bytes they are. A rule is
//!   a conjunction of per-column terms, and READ_IDX skips a page when any term's key
//!   rules it out (a term on a column without a key rules nothing out).
//! * The per-page index entry of §4.1 and §4.8 in the FTL's MAP-entry extension bytes
//!   (`FtlConfig::ext_bytes`, 8 to 24): a range entry (min and max of the indexed column)
//!   or a bitmap entry (one bit per registered value bucket), computed by firmware from
//!   the buffered page on every WRITE_IDX (§4.3), with embedded-CPU time charged.
//! * The redo-log bit of §4.6: before the page write, the entry is replaced by a stub
//!   naming the table and the FTL's redo bit is cleared (`Ftl::mark_ext_pending`; logged
//!   with, or before, the write's redo descriptor); once the data is durable the new
//!   entry is installed, which sets the bit. After a crash every entry still pending is
//!   recomputed from the data that survived, when the device is assembled
//!   ([`Flixr::recover`]).
//! * READ_IDX (§4.4): the entries of the requested pages are compared with a registered
//!   rule; only pages whose entry can match are read from flash and sent, and the host
//!   gets the list of pages skipped.
//! * UPDATE_HOST_INDEX (§4.1, §4.2): the min and max of a page's range entry, for
//!   FLIXR-HS's tiny host B+tree.
//! * Joins (§4.5): SEND_TIDX_ENC registers a per-table join-key index (a bitmap over
//!   bucket split points, kept in device DRAM: the TIRA); READ_IDX_JOIN1 is READ_IDX that
//!   also ORs into it the bucket of the join key of every row that satisfies the rule on
//!   the pages read; SEND_TIDX_ICR pairs a second table, whose per-page index must be a
//!   bitmap over the same split points, with that per-table index, and READ_IDX_JOIN2
//!   reads only the second table's pages sharing a bucket with it.
//! * The index cache of §4.3/§4.8: an LRU of index pages (the extension bytes of one MAP
//!   page) in controller DRAM, 16 MiB by default; a miss loads the MAP page through the
//!   FTL (a MAP-page read when the FTL's MAP cache does not hold it) and stages it in DRAM.
//!
//! Choices made here (the paper leaves them open):
//! * A table page is one LBA (the FTL's mapping unit: 4 KiB in every preset; FLIXR's
//!   evaluation formats the device with the paper's 16 KiB, `csd_flixr::Setup`) or, for
//!   tables whose pages are flash pages (`TableFormat::page_lbas` > 1, the catalog's
//!   tables), an aligned run of LBAs: WRITE_IDX then computes one entry over the whole
//!   page and stores it in the MAP entry of each of its LBAs, so READ_IDX keeps or skips
//!   the page's LBAs together. A plain write of part of such a page makes the LBAs it
//!   wrote "opaque" (always read); recovery recomputes over the aligned page.
//! * SEND_TBL_COL can be undone (`DropTblCol`, a vendor command of this realization):
//!   the table, its encoding and rules leave the TSIA; entries naming it stay in the
//!   MAP but no rule compares them (a page with such an entry is always read).
//! * An ISP session may carry a rule (`IspOpen::index`): the firmware compares the
//!   entries of the session's table pages with it at OPEN and streams only the pages
//!   that may match (the same comparison as READ_IDX, charged alike).
//! * Rows are the csd-table NSM or PAX pages (`csd_table::PageView`); a page that does not
//!   parse as a page of the table gets an "opaque" entry and is always read, and a valid
//!   page without rows an "empty" entry that every rule skips. An entry summarizes each
//!   key column's *keys* ([`KeyKind`]): integers, DATE, TIMESTAMP and DECIMAL(p <= 18) as
//!   their `i64`, floats as the evaluator's order keys, strings (CHAR, VARCHAR,
//!   VARBINARY) as their first 8 bytes; NULLs are left out (a key whose every value on
//!   the page is NULL is a range with min > max or a bitmap without bits, which no rule
//!   matches: rules come from predicates NULL never satisfies). BOOLEAN and
//!   DECIMAL(p > 18) columns are refused. The table format carries each column's
//!   nullability and time zone, which the page's schema fingerprint covers.
//! * Entry bytes: `[0xF1 (format v1), table id, state, kind, payload...]`; range payload is
//!   `min, max` as little-endian `i64` (needs 20 extension bytes), bitmap payload is
//!   `(ext_bytes - 4) * 8` bits at most. All zeros is "no entry": such a page is read.
//!   Version 1 is kept for a table whose only encoding is its first one (older images
//!   and their entries stay valid). Once a table's encodings change (a second key, or a
//!   key dropped) its *generation* goes up and its entries are written in version 2:
//!   `[0xF2, table id, state, generation, key slots...]`, slots in encoding order, a
//!   range of a 4-byte column (INT32, DATE) as two `i32` (8 bytes), of an 8-byte column
//!   as two `i64` (16 bytes), a bitmap as `ceil(buckets / 8)` bytes. An entry of another
//!   generation (or of version 1 after a change) is not compared: its page is read until
//!   it is rewritten (the host rewrites the table through WRITE_IDX after a change).
//!   When the slots do not fit `ext_bytes - 4`, SEND_IDX_ENC is refused naming the sizes.
//!   The generation is a byte (1..=255, wrapping to 1): an entry 255 changes old could be
//!   taken for a current one, which a host that rewrites after each change never leaves.
//! * Join bitmaps are query state a host releases: `DropTidxEnc` frees a per-table index
//!   (and the join rules over it), `DropTidxIcr` a join rule; ids are reused only once
//!   free.
//! * A bitmap encoding is `k` strictly increasing split points making `k + 1` buckets:
//!   bucket `i` holds the values `v` with `i` split points `<= v`.
//! * A plain Write or FlushBatch over pages that have entries goes through the same
//!   pending/recompute path (the entry names its table); Trim clears entries (FTL).
//! * Tables and encodings persist (the controller metadata blob of the FTL, logged and
//!   checkpointed) so recovery can recompute; rules are query state and are lost with
//!   power, as the host re-sends them. An encoding cannot be replaced once set. A
//!   registry blob this build cannot decode (a newer version) registers nothing: no
//!   entry is compared (every page is read) and every registry change is refused with
//!   [`FlixrError::UnreadableRegistry`], so the blob is never overwritten or misread.
//! * A filtered read examines up to [`MAX_INDEX_SCAN`] LBAs in one command (the
//!   comparisons happen in the device) but returns at most MDTS pages; when that limit
//!   stops it early the reply names the LBA to resume at.
//! * An index-cache miss loads the index page through the FTL's MAP cache: a flash read
//!   of the MAP page when the FTL does not hold it, a DRAM copy when it does (a device
//!   with a large MAP cache, like the 1 GB Cosmos+ board, rarely reads index pages).
//! * With a write-back cache WRITE_IDX flushes before installing its entries, so an entry
//!   never describes data that is not yet durable.
//! * CPU cost (bus cycles × `isp.cycle_clock_divisor`, like the ISP runtime): creating an
//!   entry costs `isp.page_cycles` plus `comp_cycles_per_record + dram_access_cycles` per
//!   row; comparing an entry with a rule costs `comp_cycles_per_record +
//!   dram_access_cycles` (the entry is loaded from DRAM, then compared). Creation runs
//!   concurrently with the flash program (§4.3) on the embedded cores.
//!
//! Where things are:
//! * `mod.rs`: the command argument and reply types, the firmware state ([`Flixr`]) and
//!   its limits;
//! * `entry.rs`: the per-page entry's bytes, key layout and comparison (§4.1, §4.8);
//! * `cache.rs`: the index cache (§4.3, §4.8);
//! * `registry.rs`: SEND_TBL_COL, SEND_IDX_ENC, SEND_IDX_ICR and their drops, and the
//!   registry's controller blob (§4.2);
//! * `write.rs`: WRITE_IDX, plain writes, trims and recovery of pending entries (§4.3,
//!   §4.6);
//! * `read.rs`: READ_IDX, an ISP session's page selection, UPDATE_HOST_INDEX (§4.4);
//! * `join.rs`: the per-table join indexes and READ_IDX_JOIN1/2 (§4.5).

mod cache;
mod entry;
mod join;
mod read;
mod registry;
#[cfg(test)]
mod tests;
mod write;

pub use entry::{EMPTY_RANGE, Entry, KeyEntry, KeyKind, KeyLayout, KeySlot, may_match, prefix_key};

use cache::IndexCache;
use registry::decode_registry;

use crate::block::{BlockDevice, CommandError};
use csd_ftl::FtlError;
use csd_sim::SimTime;
use csd_table::{Column, ColumnType, Layout, PageView, Schema};
use std::collections::BTreeMap;
use thiserror::Error;

/// Index cache size when none is set: 16 MiB (flixr §4.3).
pub const DEFAULT_INDEX_CACHE_BYTES: u64 = 16 << 20;
/// Tables the TSIA holds.
pub const MAX_TABLES: usize = 255;
/// Comparison rules per table.
pub const MAX_RULES_PER_TABLE: usize = 64;
/// Values an `In` rule may list.
pub const MAX_RULE_VALUES: usize = 256;
/// Extension bytes a range entry needs (4 header bytes, min, max).
pub const RANGE_ENTRY_BYTES: u32 = 20;
/// Per-page encodings (keys) one table may have (a primary and secondary keys, §6.4).
pub const MAX_KEYS: usize = 4;
/// Terms a multi-key rule may have.
pub const MAX_RULE_TERMS: usize = 8;

/// A table's row format, as SEND_TBL_COL carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableFormat {
    /// Table name (part of the page's schema fingerprint).
    pub name: String,
    /// Columns in row order: name, type, nullability and a timestamp's time zone (all
    /// part of the page's schema fingerprint).
    pub columns: Vec<Column>,
    /// Page layout of the table's pages.
    pub layout: Layout,
    /// LBAs per table page (1: one page per LBA, as the paper's row store; a catalog
    /// table's page is one flash page, e.g. 4 LBAs of 4 KiB on a 16 KiB-page device).
    /// Every LBA of a page carries the entry computed over the whole page.
    pub page_lbas: u32,
}

/// How a per-page index summarizes a column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexEncoding {
    /// The min and max value on the page.
    Range,
    /// One bit per value bucket; `bounds` are the strictly increasing split points.
    Bitmap {
        /// Split points: `bounds.len() + 1` buckets.
        bounds: Vec<i64>,
    },
}

/// A per-page index: which column and how (SEND_IDX_ENC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexSpec {
    /// The indexed column's name.
    pub column: String,
    /// The encoding.
    pub encoding: IndexEncoding,
}

/// An index comparison rule (SEND_IDX_ICR): a predicate on the indexed column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexRule {
    /// `lo <= value <= hi` (use `i64::MIN` / `i64::MAX` for one-sided bounds).
    Between {
        /// Lower bound, inclusive.
        lo: i64,
        /// Upper bound, inclusive.
        hi: i64,
    },
    /// `value IN (values)`.
    In(Vec<i64>),
}

impl IndexRule {
    /// Does a row whose indexed column holds `v` satisfy the rule?
    pub fn matches(&self, v: i64) -> bool {
        match self {
            IndexRule::Between { lo, hi } => *lo <= v && v <= *hi,
            IndexRule::In(vs) => vs.contains(&v),
        }
    }
}

/// One term of a multi-key rule (SEND_IDX_ICR over several keys): a predicate on one
/// indexed column. A rule's terms are ANDed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleTerm {
    /// The indexed column's name.
    pub column: String,
    /// The predicate on it.
    pub rule: IndexRule,
}

/// What READ_IDX returns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IndexRead {
    /// The LBAs read and returned, in order.
    pub lbas: Vec<u64>,
    /// Their data, one LBA each, in the order of `lbas`.
    pub data: Vec<u8>,
    /// The LBAs of the range whose entry ruled them out (not read from flash).
    pub skipped: Vec<u64>,
    /// Index-cache misses this command had (index pages loaded through the FTL).
    pub index_misses: u64,
    /// MAP-page reads from flash those misses caused.
    pub index_page_reads: u64,
    /// When the pages to return reached the transfer limit (MDTS) before the end of the
    /// range: the first LBA not examined, where the host continues.
    pub resume_at: Option<u64>,
}

/// What UPDATE_HOST_INDEX returns for one page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostIndexValue {
    /// The page's rows span `min..=max` of the indexed column.
    Range {
        /// Smallest value on the page.
        min: i64,
        /// Largest value on the page.
        max: i64,
    },
    /// The page has no rows of the table.
    Empty,
    /// The page has no usable entry (never written with WRITE_IDX, not a page of the
    /// table, or a bitmap index): the host must treat it as covering every value.
    Unknown,
}

/// Bad FLIXR input or state: nothing was registered or written.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FlixrError {
    /// The device has no room for index entries in its MAP entries.
    #[error(
        "this device keeps {have} extension bytes per MAP entry, FLIXR needs {need}: format it with ext_bytes = {need}..=24"
    )]
    NoExtension {
        /// Bytes the FTL keeps.
        have: u32,
        /// Bytes needed.
        need: u32,
    },
    /// The table format is not valid.
    #[error("malformed table format: {0}")]
    BadTable(String),
    /// The encoding is not valid for this table or device.
    #[error("malformed index encoding: {0}")]
    BadEncoding(String),
    /// The rule is not valid.
    #[error("malformed index comparison rule: {0}")]
    BadRule(String),
    /// No table has this id.
    #[error("unknown table id {0}: register the table with SEND_TBL_COL first")]
    UnknownTable(u8),
    /// The table has no index encoding yet.
    #[error("table {0} has no index encoding: send SEND_IDX_ENC first")]
    NoEncoding(u8),
    /// The table already has an index encoding on that column.
    #[error(
        "table {0} already has an index encoding on this column (encodings cannot be replaced: drop it with DropIdxEnc first)"
    )]
    EncodingExists(u8),
    /// The table's encodings would not fit the MAP entry's extension bytes.
    #[error(
        "the per-page index entry would need {need} bytes ({detail}) but this device keeps {have} extension bytes per MAP entry: use fewer buckets or fewer keys (nothing was registered)"
    )]
    KeysDoNotFit {
        /// Bytes the packed entry needs (header included).
        need: u32,
        /// Extension bytes the FTL keeps.
        have: u32,
        /// The sizes, key by key.
        detail: String,
    },
    /// No rule has this id for this table.
    #[error("unknown rule id {rule} for table {table}: register it with SEND_IDX_ICR first")]
    UnknownRule {
        /// Table id.
        table: u8,
        /// Rule id.
        rule: u16,
    },
    /// A registry is full.
    #[error("{0}")]
    Full(String),
    /// No per-table index has this id.
    #[error("unknown per-table index id {0}: register it with SEND_TIDX_ENC first")]
    UnknownTableIndex(u16),
    /// The device's FLIXR registry was written in a format this build does not read
    /// (a newer one, or damaged): it is left as it is.
    #[error(
        "the FLIXR registry on this device is in a format this csd does not read ({0}): its per-page indexes are not used (pages are read in full) and it cannot be changed; open the image with the csd that wrote it"
    )]
    UnreadableRegistry(String),
    /// No join rule has this id for this table.
    #[error("unknown join rule id {rule} for table {table}: register it with SEND_TIDX_ICR first")]
    UnknownJoinRule {
        /// Table id.
        table: u8,
        /// Join rule id.
        rule: u16,
    },
}

#[derive(Debug, Clone, PartialEq)]
struct TableEntry {
    format: TableFormat,
    schema: Schema,
    /// The per-page encodings in entry order: (column index, encoding).
    keys: Vec<(usize, IndexEncoding)>,
    /// Layout generation: 0 while the table has its first encoding only (version-1
    /// entries); bumped on every later change (version-2 entries carry it).
    generation: u8,
    /// Rules: their terms (column index, predicate), ANDed.
    rules: BTreeMap<u16, Vec<(usize, IndexRule)>>,
    next_rule: u16,
}

impl TableEntry {
    /// The indexed columns' names, comma-separated (for error messages).
    fn indexed_names(&self) -> String {
        self.keys
            .iter()
            .map(|(c, _)| self.format.columns[*c].name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn new(format: TableFormat, schema: Schema) -> TableEntry {
        TableEntry {
            format,
            schema,
            keys: Vec::new(),
            generation: 0,
            rules: BTreeMap::new(),
            next_rule: 1,
        }
    }
}

/// A per-table join-key index (§4.5): which table and key column, the buckets, the bits.
#[derive(Debug, Clone, PartialEq)]
struct TableIndex {
    table: u8,
    column: usize,
    bounds: Vec<i64>,
    bits: Vec<u8>,
}

/// A per-table join-key index (SEND_TIDX_ENC): the key column and its buckets, which
/// must be those of the other table's per-page bitmap index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinIndexSpec {
    /// The join key column of the first table.
    pub column: String,
    /// Strictly increasing split points (`bounds.len() + 1` buckets).
    pub bounds: Vec<i64>,
}

/// Most LBAs one READ_IDX (or join read) may examine; the pages it returns are bounded
/// by MDTS, the range only by this (the entries are compared in the device).
pub const MAX_INDEX_SCAN: u64 = 1 << 20;

/// Largest per-table index, bytes (the paper used 8).
pub const MAX_TABLE_INDEX_BYTES: usize = 64;

/// A refused FLIXR command: nothing changed, completed at submission.
fn refusal(e: FlixrError, at: SimTime) -> CommandError {
    CommandError {
        error: FtlError::Config(e.to_string()),
        done: at,
    }
}

/// Counters of the FLIXR firmware.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlixrStats {
    /// Entries computed (WRITE_IDX, overwrites, recovery).
    pub entries_built: u64,
    /// Entries compared with a rule.
    pub entries_compared: u64,
    /// Pages READ_IDX skipped.
    pub pages_skipped: u64,
    /// Pages READ_IDX read.
    pub pages_read: u64,
    /// Index-cache hits and misses.
    pub cache_hits: u64,
    /// Index-cache misses.
    pub cache_misses: u64,
    /// Entries recomputed at recovery (redo bit found 0).
    pub recovered_entries: u64,
}

/// The FLIXR firmware state of one device: registries, index cache, counters.
#[derive(Debug)]
pub struct Flixr {
    tables: BTreeMap<u8, TableEntry>,
    /// TIRA: per-table join-key indexes by tiaID (device DRAM; rebuilt by JOIN1).
    table_indexes: BTreeMap<u16, TableIndex>,
    next_tia: u16,
    /// Join rules: (table, rule id) → the per-table index they compare with and the
    /// table's bitmap-indexed column they compare.
    join_rules: BTreeMap<(u8, u16), (u16, usize)>,
    cache: IndexCache,
    cache_bytes: u64,
    stats: FlixrStats,
    /// Why the controller blob's registry could not be read, if it could not: no table
    /// is registered then, and the registry is never rewritten.
    unreadable: Option<String>,
    /// The instant the registry command being run arrived ([`Flixr::begin_command`]):
    /// the registry's log force starts there.
    cmd_at: SimTime,
    /// When the last registry change was durable (its log force done), or the command's
    /// instant when it changed nothing durable.
    durable_at: SimTime,
    /// Entries staged over data still in a write-back buffer, by LBA, to be logged once
    /// the data is committed ([`Flixr::settle`]); volatile.
    unsettled: BTreeMap<u64, Vec<u8>>,
}

/// Cycles (at the core clock) for counted work in bus cycles.
fn core_cycles(dev: &BlockDevice, bus_cycles: f64) -> u64 {
    let isp = dev.ftl().nand().config().isp;
    (bus_cycles * isp.cycle_clock_divisor).round() as u64
}

impl Flixr {
    /// FLIXR state for `dev`: registries from the FTL's controller blob (empty if none),
    /// an empty index cache of `cache_bytes`.
    pub fn new(dev: &BlockDevice, cache_bytes: u64) -> Flixr {
        let blob = dev.ftl().blob();
        let (tables, unreadable) = match decode_registry(blob) {
            Some(t) => (t, None),
            None => (
                BTreeMap::new(),
                Some(format!(
                    "{} bytes starting {:?}",
                    blob.len(),
                    String::from_utf8_lossy(&blob[..blob.len().min(4)])
                )),
            ),
        };
        let mut f = Flixr {
            tables,
            unreadable,
            table_indexes: BTreeMap::new(),
            next_tia: 1,
            join_rules: BTreeMap::new(),
            cache: IndexCache::new(1),
            cache_bytes,
            stats: FlixrStats::default(),
            cmd_at: SimTime::ZERO,
            durable_at: SimTime::ZERO,
            unsettled: BTreeMap::new(),
        };
        f.set_cache_bytes(dev, cache_bytes);
        f
    }

    /// A registry command arrived at `at`: a registry change it makes is forced to the
    /// log from there ([`Flixr::durable_at`] then says when it was durable).
    pub(crate) fn begin_command(&mut self, at: SimTime) {
        self.cmd_at = at;
        self.durable_at = at;
    }

    /// When the registry change of the command begun last was durable (its instant if
    /// it changed nothing durable): the command completes no earlier.
    pub(crate) fn durable_at(&self) -> SimTime {
        self.durable_at
    }

    /// Resize the index cache (emptied).
    pub fn set_cache_bytes(&mut self, dev: &BlockDevice, bytes: u64) {
        let ftl = dev.ftl();
        let page = ftl.map_entries_per_page() * ftl.config().ext_bytes.max(1) as u64;
        self.cache_bytes = bytes;
        self.cache = IndexCache::new((bytes / page.max(1)) as usize);
    }

    /// The index cache's size in bytes.
    pub fn cache_bytes(&self) -> u64 {
        self.cache_bytes
    }

    /// Counters since the device was assembled.
    pub fn stats(&self) -> FlixrStats {
        FlixrStats {
            cache_hits: self.cache.hits,
            cache_misses: self.cache.misses,
            ..self.stats
        }
    }

    /// Is any table registered (so plain writes must look after entries)?
    pub fn active(&self) -> bool {
        !self.tables.is_empty()
    }
}
