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
//! * A table page is one LBA (the FTL's mapping unit, 4 KiB in every preset) or, for
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
//!   page without rows an "empty" entry that every rule skips. Index columns are numeric
//!   (INT32, INT64, DATE, DECIMAL as their `i64`); CHAR columns are refused.
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
//!   power, as the host re-sends them. An encoding cannot be replaced once set.
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
//!   row; comparing an entry with a rule costs `comp_cycles_per_record`. Creation runs
//!   concurrently with the flash program (§4.3) on the embedded cores.

use crate::block::{BlockDevice, CommandError};
use csd_ftl::FtlError;
use csd_sim::SimTime;
use csd_table::{Column, ColumnType, Layout, PageView, Schema};
use std::collections::{BTreeMap, HashMap};
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

const ENTRY_V1: u8 = 0xF1;
const ENTRY_V2: u8 = 0xF2;
const ST_PENDING: u8 = 0;
const ST_INDEXED: u8 = 1;
const ST_EMPTY: u8 = 2;
const ST_OPAQUE: u8 = 3;
const KIND_RANGE: u8 = 1;
const KIND_BITMAP: u8 = 2;
const BLOB_MAGIC: &[u8; 4] = b"FXR1";
const BLOB_MAGIC_V2: &[u8; 4] = b"FXR2";
const BLOB_MAGIC_V3: &[u8; 4] = b"FXR3";

/// A table's row format, as SEND_TBL_COL carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableFormat {
    /// Table name (part of the page's schema fingerprint).
    pub name: String,
    /// Columns in row order.
    pub columns: Vec<(String, ColumnType)>,
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
            .map(|(c, _)| self.format.columns[*c].0.as_str())
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

/// Where one key sits in a table's entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySlot {
    /// The column (schema index).
    pub column: usize,
    /// Its encoding.
    pub encoding: IndexEncoding,
    /// Byte offset in the entry's payload (after the 4 header bytes).
    pub offset: usize,
    /// Bytes of the slot.
    pub width: usize,
    /// A range stored as two `i32` (4-byte columns, version 2 only).
    pub narrow: bool,
}

/// How a table's keys are laid out in its entries (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLayout {
    /// The table id.
    pub table: u8,
    /// The generation (0: version-1 entries, one key).
    pub generation: u8,
    /// The keys, in entry order.
    pub slots: Vec<KeySlot>,
}

/// One key's part of an entry, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyEntry {
    /// The page's values of the column span `min..=max`.
    Range {
        /// Smallest value.
        min: i64,
        /// Largest value.
        max: i64,
    },
    /// Bucket bits of the page's values (bit `i % 8` of byte `i / 8`: bucket `i`).
    Bitmap(Vec<u8>),
}

fn key_may_match(k: &KeyEntry, enc: &IndexEncoding, rule: &IndexRule) -> bool {
    match (k, enc) {
        (KeyEntry::Range { min, max }, _) => match rule {
            IndexRule::Between { lo, hi } => lo <= max && hi >= min,
            IndexRule::In(vs) => vs.iter().any(|v| min <= v && v <= max),
        },
        (KeyEntry::Bitmap(bits), IndexEncoding::Bitmap { bounds }) => {
            let set = |i: usize| bits.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) != 0);
            match rule {
                IndexRule::Between { lo, hi } => {
                    lo <= hi && (bucket(bounds, *lo)..=bucket(bounds, *hi)).any(set)
                }
                IndexRule::In(vs) => vs.iter().any(|&v| set(bucket(bounds, v))),
            }
        }
        _ => true,
    }
}

fn narrow_type(ty: ColumnType) -> bool {
    matches!(ty, ColumnType::Int32 | ColumnType::Date)
}

impl KeyLayout {
    fn of(table: u8, t: &TableEntry) -> KeyLayout {
        let v1 = t.generation == 0;
        let mut offset = 0;
        let slots = t
            .keys
            .iter()
            .map(|(col, enc)| {
                let narrow = !v1
                    && matches!(enc, IndexEncoding::Range)
                    && t.format.columns.get(*col).is_some_and(|c| narrow_type(c.1));
                let width = match enc {
                    IndexEncoding::Range if narrow => 8,
                    IndexEncoding::Range => 16,
                    IndexEncoding::Bitmap { bounds } => (bounds.len() + 1).div_ceil(8),
                };
                let s = KeySlot {
                    column: *col,
                    encoding: enc.clone(),
                    offset,
                    width,
                    narrow,
                };
                offset += width;
                s
            })
            .collect();
        KeyLayout {
            table,
            generation: t.generation,
            slots,
        }
    }

    /// Bytes the entry needs, header included.
    pub fn entry_bytes(&self) -> usize {
        4 + self.slots.iter().map(|s| s.width).sum::<usize>()
    }

    /// The key parts of `e`, slot by slot, if `e` is an indexed entry of this table and
    /// generation (otherwise the entry says nothing about the keys).
    pub fn keys(&self, e: &Entry) -> Option<Vec<KeyEntry>> {
        match e {
            Entry::Range { table, min, max }
                if *table == self.table && self.generation == 0 && self.slots.len() == 1 =>
            {
                Some(vec![KeyEntry::Range {
                    min: *min,
                    max: *max,
                }])
            }
            Entry::Bitmap { table, bits }
                if *table == self.table && self.generation == 0 && self.slots.len() == 1 =>
            {
                Some(vec![KeyEntry::Bitmap(bits.clone())])
            }
            Entry::Packed {
                table,
                generation,
                bytes,
            } if *table == self.table && *generation == self.generation && self.generation != 0 => {
                let mut out = Vec::with_capacity(self.slots.len());
                for s in &self.slots {
                    let b = bytes.get(s.offset..s.offset + s.width)?;
                    out.push(match (&s.encoding, s.narrow) {
                        (IndexEncoding::Range, true) => KeyEntry::Range {
                            min: i32::from_le_bytes(b[0..4].try_into().ok()?) as i64,
                            max: i32::from_le_bytes(b[4..8].try_into().ok()?) as i64,
                        },
                        (IndexEncoding::Range, false) => KeyEntry::Range {
                            min: i64::from_le_bytes(b[0..8].try_into().ok()?),
                            max: i64::from_le_bytes(b[8..16].try_into().ok()?),
                        },
                        (IndexEncoding::Bitmap { .. }, _) => KeyEntry::Bitmap(b.to_vec()),
                    });
                }
                Some(out)
            }
            _ => None,
        }
    }

    /// Can a page with entry `e` hold a row satisfying every term of `terms` (column,
    /// predicate)? Conservative: `true` unless some term's key proves otherwise.
    pub fn may_match(&self, e: &Entry, terms: &[(usize, IndexRule)]) -> bool {
        if e.table() != Some(self.table) {
            return true;
        }
        if matches!(e, Entry::Empty(_)) {
            return false;
        }
        let Some(keys) = self.keys(e) else {
            return true;
        };
        terms.iter().all(
            |(col, r)| match self.slots.iter().position(|s| s.column == *col) {
                Some(i) => key_may_match(&keys[i], &self.slots[i].encoding, r),
                None => true,
            },
        )
    }

    /// The entry of a page with `values[i]` the values of slot `i`'s column (all the
    /// same length, at least one row).
    fn build(&self, values: &[Vec<i64>]) -> Entry {
        let parts: Vec<KeyEntry> = self
            .slots
            .iter()
            .zip(values)
            .map(|(s, vals)| match &s.encoding {
                IndexEncoding::Range => KeyEntry::Range {
                    min: vals.iter().copied().min().unwrap_or(0),
                    max: vals.iter().copied().max().unwrap_or(0),
                },
                IndexEncoding::Bitmap { bounds } => {
                    let mut bits = vec![0u8; (bounds.len() + 1).div_ceil(8)];
                    for &v in vals {
                        let b = bucket(bounds, v);
                        bits[b / 8] |= 1 << (b % 8);
                    }
                    KeyEntry::Bitmap(bits)
                }
            })
            .collect();
        let table = self.table;
        if self.generation == 0 {
            return match parts.into_iter().next() {
                Some(KeyEntry::Range { min, max }) => Entry::Range { table, min, max },
                Some(KeyEntry::Bitmap(bits)) => Entry::Bitmap { table, bits },
                None => Entry::None,
            };
        }
        let mut bytes = vec![0u8; self.entry_bytes() - 4];
        for (s, k) in self.slots.iter().zip(parts) {
            let o = s.offset;
            match k {
                KeyEntry::Range { min, max } if s.narrow => {
                    let c = |v: i64| v.clamp(i32::MIN as i64, i32::MAX as i64) as i32;
                    bytes[o..o + 4].copy_from_slice(&c(min).to_le_bytes());
                    bytes[o + 4..o + 8].copy_from_slice(&c(max).to_le_bytes());
                }
                KeyEntry::Range { min, max } => {
                    bytes[o..o + 8].copy_from_slice(&min.to_le_bytes());
                    bytes[o + 8..o + 16].copy_from_slice(&max.to_le_bytes());
                }
                KeyEntry::Bitmap(bits) => {
                    let n = bits.len().min(s.width);
                    bytes[o..o + n].copy_from_slice(&bits[..n]);
                }
            }
        }
        Entry::Packed {
            table,
            generation: self.generation,
            bytes,
        }
    }
}

/// A per-page index entry, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// No entry: the page must be read.
    None,
    /// Being recomputed (redo bit 0): the page must be read.
    Pending(u8),
    /// A page of the table without rows.
    Empty(u8),
    /// Data that is not a page of the table: always read.
    Opaque(u8),
    /// The page's values span `min..=max`.
    Range {
        /// Table id.
        table: u8,
        /// Smallest value.
        min: i64,
        /// Largest value.
        max: i64,
    },
    /// Bucket bits of the page's values.
    Bitmap {
        /// Table id.
        table: u8,
        /// Bit `i` of byte `i / 8`: bucket `i` occurs.
        bits: Vec<u8>,
    },
    /// Several keys packed (version 2): read with the table's [`KeyLayout`].
    Packed {
        /// Table id.
        table: u8,
        /// The table's layout generation when the entry was built.
        generation: u8,
        /// The key slots (the bytes after the header).
        bytes: Vec<u8>,
    },
}

impl Entry {
    /// Decode extension bytes (anything unrecognized is `None`: read the page).
    pub fn decode(b: &[u8]) -> Entry {
        if b.len() < 4 || (b[0] != ENTRY_V1 && b[0] != ENTRY_V2) {
            return Entry::None;
        }
        let t = b[1];
        if b[0] == ENTRY_V2 {
            return match b[2] {
                ST_PENDING => Entry::Pending(t),
                ST_EMPTY => Entry::Empty(t),
                ST_OPAQUE => Entry::Opaque(t),
                ST_INDEXED => Entry::Packed {
                    table: t,
                    generation: b[3],
                    bytes: b[4..].to_vec(),
                },
                _ => Entry::None,
            };
        }
        match (b[2], b[3]) {
            (ST_PENDING, _) => Entry::Pending(t),
            (ST_EMPTY, _) => Entry::Empty(t),
            (ST_OPAQUE, _) => Entry::Opaque(t),
            (ST_INDEXED, KIND_RANGE) if b.len() >= 20 => Entry::Range {
                table: t,
                min: i64::from_le_bytes(b[4..12].try_into().unwrap_or([0; 8])),
                max: i64::from_le_bytes(b[12..20].try_into().unwrap_or([0; 8])),
            },
            (ST_INDEXED, KIND_BITMAP) => Entry::Bitmap {
                table: t,
                bits: b[4..].to_vec(),
            },
            _ => Entry::None,
        }
    }

    /// Encode into `ext` extension bytes.
    pub fn encode(&self, ext: usize) -> Vec<u8> {
        let mut v = vec![0u8; ext];
        let head = |v: &mut [u8], t: u8, st: u8, kind: u8| {
            v[0] = ENTRY_V1;
            v[1] = t;
            v[2] = st;
            v[3] = kind;
        };
        match self {
            Entry::None => {}
            Entry::Pending(t) => head(&mut v, *t, ST_PENDING, 0),
            Entry::Empty(t) => head(&mut v, *t, ST_EMPTY, 0),
            Entry::Opaque(t) => head(&mut v, *t, ST_OPAQUE, 0),
            Entry::Range { table, min, max } => {
                head(&mut v, *table, ST_INDEXED, KIND_RANGE);
                v[4..12].copy_from_slice(&min.to_le_bytes());
                v[12..20].copy_from_slice(&max.to_le_bytes());
            }
            Entry::Bitmap { table, bits } => {
                head(&mut v, *table, ST_INDEXED, KIND_BITMAP);
                let n = bits.len().min(ext - 4);
                v[4..4 + n].copy_from_slice(&bits[..n]);
            }
            Entry::Packed {
                table,
                generation,
                bytes,
            } => {
                head(&mut v, *table, ST_INDEXED, *generation);
                v[0] = ENTRY_V2;
                let n = bytes.len().min(ext - 4);
                v[4..4 + n].copy_from_slice(&bytes[..n]);
            }
        }
        v
    }

    /// The table the entry names, if any.
    pub fn table(&self) -> Option<u8> {
        match self {
            Entry::None => None,
            Entry::Pending(t) | Entry::Empty(t) | Entry::Opaque(t) => Some(*t),
            Entry::Range { table, .. }
            | Entry::Bitmap { table, .. }
            | Entry::Packed { table, .. } => Some(*table),
        }
    }
}

fn bucket(bounds: &[i64], v: i64) -> usize {
    bounds.partition_point(|&b| b <= v)
}

/// Can a page with entry `e` hold a row of table `table` satisfying `rule`? Conservative:
/// `true` unless the entry proves otherwise.
pub fn may_match(e: &Entry, table: u8, enc: &IndexEncoding, rule: &IndexRule) -> bool {
    if e.table() != Some(table) {
        return true;
    }
    match e {
        Entry::Empty(_) => false,
        Entry::Range { min, max, .. } => key_may_match(
            &KeyEntry::Range {
                min: *min,
                max: *max,
            },
            enc,
            rule,
        ),
        Entry::Bitmap { bits, .. } => key_may_match(&KeyEntry::Bitmap(bits.clone()), enc, rule),
        _ => true,
    }
}

/// The index cache: LRU of index pages (one MAP page's extension bytes each).
#[derive(Debug)]
struct IndexCache {
    capacity: usize,
    pages: HashMap<u64, (Vec<u8>, u64)>,
    lru: BTreeMap<u64, u64>,
    tick: u64,
    hits: u64,
    misses: u64,
}

impl IndexCache {
    fn new(capacity: usize) -> IndexCache {
        IndexCache {
            capacity: capacity.max(1),
            pages: HashMap::new(),
            lru: BTreeMap::new(),
            tick: 0,
            hits: 0,
            misses: 0,
        }
    }

    fn touch(&mut self, mp: u64) -> Option<&[u8]> {
        self.tick += 1;
        let tick = self.tick;
        let (bytes, t) = self.pages.get_mut(&mp)?;
        self.hits += 1;
        self.lru.remove(t);
        *t = tick;
        self.lru.insert(tick, mp);
        Some(bytes)
    }

    fn insert(&mut self, mp: u64, bytes: Vec<u8>) {
        while self.pages.len() >= self.capacity {
            let Some((_, victim)) = self.lru.pop_first() else {
                break;
            };
            self.pages.remove(&victim);
        }
        self.tick += 1;
        self.lru.insert(self.tick, mp);
        self.pages.insert(mp, (bytes, self.tick));
    }

    /// Keep a cached copy in step with an entry the device just set.
    fn update(&mut self, mp: u64, offset: usize, entry: &[u8]) {
        if let Some((bytes, _)) = self.pages.get_mut(&mp) {
            bytes[offset..offset + entry.len()].copy_from_slice(entry);
        }
    }

    fn clear(&mut self) {
        self.pages.clear();
        self.lru.clear();
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
        let tables = decode_registry(dev.ftl().blob()).unwrap_or_default();
        let mut f = Flixr {
            tables,
            table_indexes: BTreeMap::new(),
            next_tia: 1,
            join_rules: BTreeMap::new(),
            cache: IndexCache::new(1),
            cache_bytes,
            stats: FlixrStats::default(),
        };
        f.set_cache_bytes(dev, cache_bytes);
        f
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

    fn need_ext(dev: &BlockDevice, need: u32) -> Result<usize, FlixrError> {
        let have = dev.ftl().config().ext_bytes;
        if have < need {
            return Err(FlixrError::NoExtension { have, need });
        }
        Ok(have as usize)
    }

    /// Keep the registry in the FTL's controller blob, durable before the command
    /// completes (a log force, with whatever else the log held).
    fn persist(
        &self,
        dev: &mut BlockDevice,
        tables: &BTreeMap<u8, TableEntry>,
    ) -> Result<(), FlixrError> {
        let blob = encode_registry(tables);
        let now = dev.ftl().nand().now();
        dev.ftl_mut()
            .set_blob(&blob)
            .and_then(|_| dev.ftl_mut().flush(now))
            .map(|_| ())
            .map_err(|e| FlixrError::Full(format!("cannot keep the FLIXR registry: {e}")))
    }

    /// SEND_TBL_COL: register a table's row format; returns its table id.
    pub fn register_table(
        &mut self,
        dev: &mut BlockDevice,
        f: TableFormat,
    ) -> Result<u8, FlixrError> {
        Self::need_ext(dev, 8)?;
        let cols: Vec<Column> = f
            .columns
            .iter()
            .map(|(n, t)| Column::new(n.clone(), *t))
            .collect();
        let schema =
            Schema::new(f.name.clone(), cols).map_err(|e| FlixrError::BadTable(e.to_string()))?;
        if f.page_lbas == 0 || f.page_lbas > 64 {
            return Err(FlixrError::BadTable(format!(
                "a table page spans 1..=64 LBAs, not {}",
                f.page_lbas
            )));
        }
        let page = dev.ftl().lba_size() * f.page_lbas as usize;
        csd_table::page::capacity_for(&schema, f.layout, page)
            .map_err(|e| FlixrError::BadTable(format!("{e} (a table page is {page} bytes)")))?;
        if self.tables.values().any(|t| t.format.name == f.name) {
            return Err(FlixrError::BadTable(format!(
                "a table named {:?} is already registered",
                f.name
            )));
        }
        let Some(id) = (1..=MAX_TABLES as u8).find(|i| !self.tables.contains_key(i)) else {
            return Err(FlixrError::Full(format!(
                "the TSIA holds {MAX_TABLES} tables"
            )));
        };
        let mut next = self.tables.clone();
        next.insert(id, TableEntry::new(f, schema));
        self.persist(dev, &next)?;
        self.tables = next;
        Ok(id)
    }

    /// SEND_IDX_ENC: add a per-page index (key) on a column of table `table`. The first
    /// key keeps the version-1 entry format; a second or later one packs all keys into
    /// version-2 entries of a new generation (see the module docs). Refused, with nothing
    /// registered, when the column already has a key, the table has [`MAX_KEYS`], or the
    /// packed entry would not fit the device's extension bytes.
    pub fn register_encoding(
        &mut self,
        dev: &mut BlockDevice,
        table: u8,
        spec: IndexSpec,
    ) -> Result<(), FlixrError> {
        let t = self
            .tables
            .get(&table)
            .ok_or(FlixrError::UnknownTable(table))?;
        let col = t.schema.column_index(&spec.column).map_err(|_| {
            FlixrError::BadEncoding(format!(
                "table {:?} has no column {:?} (columns: {})",
                t.format.name,
                spec.column,
                t.format
                    .columns
                    .iter()
                    .map(|c| c.0.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        if t.keys.iter().any(|(c, _)| *c == col) {
            return Err(FlixrError::EncodingExists(table));
        }
        let ty = t.format.columns[col].1;
        if !ty.is_numeric() {
            return Err(FlixrError::BadEncoding(format!(
                "column {:?} is {ty}: per-page indexes cover numeric columns (INT32, INT64, DATE, DECIMAL)",
                spec.column
            )));
        }
        match &spec.encoding {
            IndexEncoding::Range => {
                Self::need_ext(dev, RANGE_ENTRY_BYTES)?;
            }
            IndexEncoding::Bitmap { bounds } => {
                let ext = Self::need_ext(dev, 5)?;
                let max = (ext - 4) * 8;
                if bounds.is_empty() || bounds.len() + 1 > max {
                    return Err(FlixrError::BadEncoding(format!(
                        "a bitmap has 2..={max} buckets on this device ({ext} extension bytes); {} split points make {}",
                        bounds.len(),
                        bounds.len() + 1
                    )));
                }
                if bounds.windows(2).any(|w| w[0] >= w[1]) {
                    return Err(FlixrError::BadEncoding(
                        "bitmap split points must be strictly increasing".into(),
                    ));
                }
            }
        }
        if t.keys.len() >= MAX_KEYS {
            return Err(FlixrError::Full(format!(
                "table {table} already has {MAX_KEYS} per-page index keys"
            )));
        }
        let mut e = t.clone();
        e.generation = if e.keys.is_empty() && e.generation == 0 {
            0
        } else {
            e.generation.wrapping_add(1).max(1)
        };
        e.keys.push((col, spec.encoding));
        let layout = KeyLayout::of(table, &e);
        let have = dev.ftl().config().ext_bytes;
        if layout.entry_bytes() > have as usize {
            let detail = std::iter::once("4 header".to_string())
                .chain(layout.slots.iter().map(|s| {
                    let kind = match &s.encoding {
                        IndexEncoding::Range => "range",
                        IndexEncoding::Bitmap { .. } => "bitmap",
                    };
                    format!("{} {kind} {}", e.format.columns[s.column].0, s.width)
                }))
                .collect::<Vec<_>>()
                .join(" + ");
            return Err(FlixrError::KeysDoNotFit {
                need: layout.entry_bytes() as u32,
                have,
                detail,
            });
        }
        let mut next = self.tables.clone();
        next.insert(table, e);
        self.persist(dev, &next)?;
        self.tables = next;
        Ok(())
    }

    /// DropIdxEnc: remove the key on `column` of `table` (durably). The table's entries
    /// get a new generation: pages keep being read until they are rewritten. Rule terms
    /// and join rules on the column then rule nothing out.
    pub fn drop_encoding(
        &mut self,
        dev: &mut BlockDevice,
        table: u8,
        column: &str,
    ) -> Result<(), FlixrError> {
        let t = self
            .tables
            .get(&table)
            .ok_or(FlixrError::UnknownTable(table))?;
        let pos = t
            .schema
            .column_index(column)
            .ok()
            .and_then(|c| t.keys.iter().position(|(k, _)| *k == c))
            .ok_or_else(|| {
                FlixrError::BadEncoding(format!(
                    "table {:?} has no per-page index on column {column:?} (indexed: {})",
                    t.format.name,
                    t.indexed_names()
                ))
            })?;
        let mut e = t.clone();
        e.keys.remove(pos);
        e.generation = e.generation.wrapping_add(1).max(1);
        let mut next = self.tables.clone();
        next.insert(table, e);
        self.persist(dev, &next)?;
        self.tables = next;
        Ok(())
    }

    /// The layout of `table`'s entries (which key at which offset), if it is registered.
    pub fn key_layout(&self, table: u8) -> Option<KeyLayout> {
        self.tables.get(&table).map(|t| KeyLayout::of(table, t))
    }

    fn check_rule(rule: &IndexRule) -> Result<(), FlixrError> {
        match rule {
            IndexRule::Between { lo, hi } if lo > hi => Err(FlixrError::BadRule(format!(
                "empty range: lo {lo} > hi {hi}"
            ))),
            IndexRule::In(vs) if vs.is_empty() || vs.len() > MAX_RULE_VALUES => {
                Err(FlixrError::BadRule(format!(
                    "an IN list has 1..={MAX_RULE_VALUES} values, got {}",
                    vs.len()
                )))
            }
            _ => Ok(()),
        }
    }

    fn add_rule(&mut self, table: u8, terms: Vec<(usize, IndexRule)>) -> Result<u16, FlixrError> {
        let t = self
            .tables
            .get_mut(&table)
            .ok_or(FlixrError::UnknownTable(table))?;
        if t.rules.len() >= MAX_RULES_PER_TABLE {
            return Err(FlixrError::Full(format!(
                "table {table} already has {MAX_RULES_PER_TABLE} rules"
            )));
        }
        let mut id = t.next_rule;
        while t.rules.contains_key(&id) {
            id = id.wrapping_add(1).max(1);
        }
        t.next_rule = id.wrapping_add(1).max(1);
        t.rules.insert(id, terms);
        Ok(id)
    }

    /// SEND_IDX_ICR: register a comparison rule on the first key of `table`; returns its
    /// rule id.
    pub fn register_rule(&mut self, table: u8, rule: IndexRule) -> Result<u16, FlixrError> {
        let t = self
            .tables
            .get(&table)
            .ok_or(FlixrError::UnknownTable(table))?;
        let Some((col, _)) = t.keys.first() else {
            return Err(FlixrError::NoEncoding(table));
        };
        let col = *col;
        Self::check_rule(&rule)?;
        self.add_rule(table, vec![(col, rule)])
    }

    /// SEND_IDX_ICR over several keys: a rule whose terms (one predicate per indexed
    /// column, ANDed) are compared with the matching keys of each entry; returns its id.
    pub fn register_rule_terms(
        &mut self,
        table: u8,
        terms: Vec<RuleTerm>,
    ) -> Result<u16, FlixrError> {
        let t = self
            .tables
            .get(&table)
            .ok_or(FlixrError::UnknownTable(table))?;
        if t.keys.is_empty() {
            return Err(FlixrError::NoEncoding(table));
        }
        if terms.is_empty() || terms.len() > MAX_RULE_TERMS {
            return Err(FlixrError::BadRule(format!(
                "a rule has 1..={MAX_RULE_TERMS} terms, got {}",
                terms.len()
            )));
        }
        let mut out = Vec::with_capacity(terms.len());
        for term in terms {
            let col = t
                .schema
                .column_index(&term.column)
                .ok()
                .filter(|c| t.keys.iter().any(|(k, _)| k == c))
                .ok_or_else(|| {
                    FlixrError::BadRule(format!(
                        "column {:?} of table {:?} has no per-page index (indexed: {})",
                        term.column,
                        t.format.name,
                        t.indexed_names()
                    ))
                })?;
            Self::check_rule(&term.rule)?;
            out.push((col, term.rule));
        }
        self.add_rule(table, out)
    }

    /// Release rule `(table, rule)`.
    pub fn drop_rule(&mut self, table: u8, rule: u16) -> Result<(), FlixrError> {
        let t = self
            .tables
            .get_mut(&table)
            .ok_or(FlixrError::UnknownTable(table))?;
        t.rules
            .remove(&rule)
            .map(|_| ())
            .ok_or(FlixrError::UnknownRule { table, rule })
    }

    /// DropTblCol: remove `table` (format, encoding, rules, join rules and per-table
    /// indexes over it) from the registries, durably.
    pub fn drop_table(&mut self, dev: &mut BlockDevice, table: u8) -> Result<(), FlixrError> {
        if !self.tables.contains_key(&table) {
            return Err(FlixrError::UnknownTable(table));
        }
        let mut next = self.tables.clone();
        next.remove(&table);
        self.persist(dev, &next)?;
        self.tables = next;
        let gone: Vec<u16> = self
            .table_indexes
            .iter()
            .filter(|(_, t)| t.table == table)
            .map(|(id, _)| *id)
            .collect();
        self.table_indexes.retain(|_, t| t.table != table);
        self.join_rules
            .retain(|(t, _), (tia, _)| *t != table && !gone.contains(tia));
        Ok(())
    }

    /// DropTidxEnc: release per-table index `tia` and the join rules comparing with it.
    pub fn drop_table_index(&mut self, tia: u16) -> Result<(), FlixrError> {
        self.table_indexes
            .remove(&tia)
            .ok_or(FlixrError::UnknownTableIndex(tia))?;
        self.join_rules.retain(|_, (t, _)| *t != tia);
        Ok(())
    }

    /// DropTidxIcr: release join rule `(table, rule)`.
    pub fn drop_join_rule(&mut self, table: u8, rule: u16) -> Result<(), FlixrError> {
        self.join_rules
            .remove(&(table, rule))
            .map(|_| ())
            .ok_or(FlixrError::UnknownJoinRule { table, rule })
    }

    /// Per-table indexes and join rules held (the TIRA's occupancy).
    pub fn join_state(&self) -> (usize, usize) {
        (self.table_indexes.len(), self.join_rules.len())
    }

    /// A free id for a per-table index or join rule (they share one id space).
    fn fresh_join_id(&mut self) -> u16 {
        let mut id = self.next_tia;
        while self.table_indexes.contains_key(&id) || self.join_rules.keys().any(|k| k.1 == id) {
            id = id.wrapping_add(1).max(1);
        }
        self.next_tia = id.wrapping_add(1).max(1);
        id
    }

    /// LBAs per page of `table`, if it is registered.
    pub fn page_lbas(&self, table: u8) -> Option<u32> {
        self.tables.get(&table).map(|t| t.format.page_lbas)
    }

    /// The pages of an ISP session's table that rule `(table, rule)` may match: the
    /// entry of every LBA of `pages` table pages of `lpp` LBAs from `first_lba` is looked
    /// up through the index cache and compared (a page is kept when any of its LBAs is).
    /// Returns the kept page numbers, the index-cache misses and when the comparisons
    /// ended on the embedded cores.
    pub fn select_pages(
        &mut self,
        dev: &mut BlockDevice,
        (table, rule): (u8, u16),
        (first_lba, pages, lpp): (u64, u64, u64),
        at: SimTime,
    ) -> Result<(Vec<u64>, u64, SimTime), CommandError> {
        Self::need_ext(dev, 8).map_err(|e| refusal(e, at))?;
        let (layout, terms) = self.rule(table, rule).map_err(|e| refusal(e, at))?;
        let miss0 = self.cache.misses;
        let mut t = at;
        let mut kept = Vec::new();
        let lpp = lpp.max(1);
        for p in 0..pages {
            let mut keep = false;
            for l in first_lba + p * lpp..first_lba + (p + 1) * lpp {
                let (bytes, pending, tt) = self
                    .lookup(dev, l, at)
                    .map_err(|error| CommandError { error, done: at })?;
                t = t.max(tt);
                if pending || layout.may_match(&Entry::decode(&bytes), &terms) {
                    keep = true;
                }
            }
            if keep {
                kept.push(p);
            }
        }
        let examined = pages * lpp;
        let isp = dev.ftl().nand().config().isp;
        let cycles = core_cycles(dev, examined as f64 * isp.comp_cycles_per_record);
        let t = dev.controller_mut().cpu(t, cycles);
        self.stats.entries_compared += examined;
        self.stats.pages_read += kept.len() as u64 * lpp;
        self.stats.pages_skipped += (pages - kept.len() as u64) * lpp;
        Ok((kept, self.cache.misses - miss0, t))
    }

    /// The key layout and the terms of rule `(table, rule)`.
    fn rule(
        &self,
        table: u8,
        rule: u16,
    ) -> Result<(KeyLayout, Vec<(usize, IndexRule)>), FlixrError> {
        let t = self
            .tables
            .get(&table)
            .ok_or(FlixrError::UnknownTable(table))?;
        if t.keys.is_empty() {
            return Err(FlixrError::NoEncoding(table));
        }
        let r = t
            .rules
            .get(&rule)
            .ok_or(FlixrError::UnknownRule { table, rule })?;
        Ok((KeyLayout::of(table, t), r.clone()))
    }

    /// Check that WRITE_IDX may write pages of `table`.
    pub fn check_writable(&self, dev: &BlockDevice, table: u8) -> Result<(), FlixrError> {
        let t = self
            .tables
            .get(&table)
            .ok_or(FlixrError::UnknownTable(table))?;
        if t.keys.is_empty() {
            return Err(FlixrError::NoEncoding(table));
        }
        Self::need_ext(dev, 8)?;
        Ok(())
    }

    /// The entry of one page of `table` (and the rows parsed: the counted work): every
    /// key of the table, packed as its [`KeyLayout`] says.
    pub fn compute(&self, table: u8, page: &[u8]) -> (Entry, usize) {
        let Some(t) = self.tables.get(&table) else {
            return (Entry::None, 0);
        };
        if t.keys.is_empty() {
            return (Entry::None, 0);
        }
        let Ok(view) = PageView::parse(page, &t.schema) else {
            return (Entry::Opaque(table), 0);
        };
        if view.layout() != t.format.layout {
            return (Entry::Opaque(table), 0);
        }
        let mut values = Vec::with_capacity(t.keys.len());
        for (col, _) in &t.keys {
            let Ok(c) = view.column(*col) else {
                return (Entry::Opaque(table), 0);
            };
            let mut vals = Vec::with_capacity(view.row_count());
            if c.decode_i64_into(&mut vals).is_err() {
                return (Entry::Opaque(table), 0);
            }
            values.push(vals);
        }
        let rows = values.first().map_or(0, Vec::len);
        if rows == 0 {
            return (Entry::Empty(table), 0);
        }
        (KeyLayout::of(table, t).build(&values), rows * t.keys.len())
    }

    /// Bus cycles of building entries over `rows` rows of `pages` pages.
    fn build_cycles(dev: &BlockDevice, pages: usize, rows: usize) -> f64 {
        let isp = dev.ftl().nand().config().isp;
        pages as f64 * isp.page_cycles
            + rows as f64 * (isp.comp_cycles_per_record + isp.dram_access_cycles)
    }

    /// The entry bytes of `lba` through the index cache; returns them, whether the FTL
    /// holds them pending, and when they are in DRAM.
    fn lookup(
        &mut self,
        dev: &mut BlockDevice,
        lba: u64,
        at: SimTime,
    ) -> Result<(Vec<u8>, bool, SimTime), FtlError> {
        let ext = dev.ftl().config().ext_bytes as usize;
        let epp = dev.ftl().map_entries_per_page();
        let (mp, o) = (lba / epp, (lba % epp) as usize * ext);
        let pending = dev.ftl().is_ext_pending(lba);
        if let Some(b) = self.cache.touch(mp) {
            return Ok((b[o..o + ext].to_vec(), pending, at));
        }
        self.cache.misses += 1;
        let (bytes, t) = dev.ftl_mut().ext_page(mp, at)?;
        let t = dev.controller_mut().dram(t, bytes.len() as u64);
        let e = bytes[o..o + ext].to_vec();
        self.cache.insert(mp, bytes);
        Ok((e, pending, t))
    }

    fn install(
        &mut self,
        dev: &mut BlockDevice,
        lba: u64,
        bytes: &[u8],
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        let t = dev.ftl_mut().set_ext(lba, bytes, at)?;
        let epp = dev.ftl().map_entries_per_page();
        self.cache
            .update(lba / epp, (lba % epp) as usize * bytes.len(), bytes);
        Ok(t)
    }

    /// Forget cached entries of `lba..lba+n` (after a trim, the FTL zeroed them).
    pub fn trimmed(&mut self, dev: &BlockDevice, lba: u64, n: u64) {
        let ext = dev.ftl().config().ext_bytes as usize;
        if ext == 0 {
            return;
        }
        let zero = vec![0u8; ext];
        let epp = dev.ftl().map_entries_per_page();
        if n > 4 * epp * self.cache.pages.len() as u64 {
            self.cache.clear();
            return;
        }
        for l in lba..lba.saturating_add(n) {
            self.cache.update(l / epp, (l % epp) as usize * ext, &zero);
        }
    }

    /// Write `data` at `lba` through `op` (the FTL write of a Write, WRITE_IDX or batch),
    /// maintaining the entries of `pages` (LBA, table, page data): stubs and redo bits
    /// first, the write, then the new entries once the data is durable. Entry creation is
    /// charged on the embedded cores from `staged` on, concurrently with the write.
    fn write_with_entries(
        &mut self,
        dev: &mut BlockDevice,
        pages: &[(u64, u8, &[u8])],
        staged: SimTime,
        op: impl FnOnce(&mut BlockDevice, SimTime) -> Result<SimTime, CommandError>,
    ) -> Result<SimTime, CommandError> {
        let ext = dev.ftl().config().ext_bytes as usize;
        let fail = |error: FtlError, done| CommandError { error, done };
        // Old entries (for a failed write) and new ones (computed from the buffered
        // pages, one per table page, stored in each of its LBAs).
        let ls = dev.ftl().lba_size().max(1);
        let lbas = |l: u64, data: &[u8]| l..l + (data.len() / ls).max(1) as u64;
        let mut t = staged;
        let mut olds = Vec::with_capacity(pages.len());
        let mut news = Vec::with_capacity(pages.len());
        let mut rows = 0;
        for &(l0, table, data) in pages {
            for l in lbas(l0, data) {
                let (old, _, tt) = self.lookup(dev, l, staged).map_err(|e| fail(e, staged))?;
                t = t.max(tt);
                olds.push((l, old));
            }
            let (e, r) = self.compute(table, data);
            rows += r;
            news.push(e.encode(ext));
        }
        // Redo bit to 0, with a stub naming the table, before the data's redo descriptor.
        for &(l0, table, data) in pages {
            for l in lbas(l0, data) {
                self.install(dev, l, &Entry::Pending(table).encode(ext), t)
                    .map_err(|e| fail(e, t))?;
                dev.ftl_mut()
                    .mark_ext_pending(l, 1, t)
                    .map_err(|e| fail(e, t))?;
            }
        }
        let cycles = core_cycles(dev, Self::build_cycles(dev, pages.len(), rows));
        let cpu_done = dev.controller_mut().cpu(t, cycles);
        self.stats.entries_built += pages.len() as u64;
        let done = match op(dev, t) {
            Ok(d) => d,
            Err(e) => {
                // The data is as it was: so are its entries (unless power failed, when
                // recovery recomputes them).
                if !matches!(e.error, FtlError::Nand(csd_nand::NandError::PowerLoss)) {
                    for (l, old) in &olds {
                        let _ = self.install(dev, *l, old, e.done);
                    }
                }
                return Err(e);
            }
        };
        let mut done = done.max(cpu_done);
        if dev.ftl().config().write_cache == csd_ftl::WriteCache::WriteBack {
            done = dev.ftl_mut().flush(done).map_err(|e| fail(e, done))?;
        }
        for (&(l0, _, data), new) in pages.iter().zip(&news) {
            for l in lbas(l0, data) {
                done = done.max(self.install(dev, l, new, done).map_err(|e| fail(e, done))?);
            }
        }
        Ok(done)
    }

    /// WRITE_IDX: write pages of `table` at `lba` and build their entries.
    pub fn write_idx(
        &mut self,
        dev: &mut BlockDevice,
        table: u8,
        lba: u64,
        data: &[u8],
        at: SimTime,
    ) -> Result<SimTime, CommandError> {
        let ls = dev.ftl().lba_size();
        let k = self.page_lbas(table).unwrap_or(1).max(1) as usize;
        let pages: Vec<(u64, u8, &[u8])> = data
            .chunks(ls * k)
            .enumerate()
            .map(|(i, p)| (lba + (i * k) as u64, table, p))
            .collect();
        dev.staged_with(data.len() as u64, at, |dev, t| {
            self.write_with_entries(dev, &pages, t, |dev, t| {
                dev.ftl_mut()
                    .write(lba, data, t)
                    .map_err(|error| CommandError { error, done: t })
            })
        })
    }

    /// A plain Write or batch of `(lba, page)` pairs: pages that had an entry get it
    /// recomputed for the table it named (the others stay without one).
    pub fn plain_write(
        &mut self,
        dev: &mut BlockDevice,
        pages: &[(u64, &[u8])],
        bytes: u64,
        at: SimTime,
        op: impl FnOnce(&mut BlockDevice, SimTime) -> Result<SimTime, CommandError>,
    ) -> Result<SimTime, CommandError> {
        dev.staged_with(bytes, at, |dev, t| {
            let mut indexed = Vec::new();
            let mut tt = t;
            let mut seen = std::collections::HashSet::new();
            for &(l, p) in pages.iter().rev() {
                if !seen.insert(l) {
                    continue; // a later page for the same LBA wins (batches)
                }
                let (old, _, x) = self
                    .lookup(dev, l, t)
                    .map_err(|error| CommandError { error, done: t })?;
                tt = tt.max(x);
                if let Some(table) = Entry::decode(&old).table() {
                    indexed.push((l, table, p));
                }
            }
            if indexed.is_empty() {
                return op(dev, tt);
            }
            indexed.reverse();
            self.write_with_entries(dev, &indexed, tt, op)
        })
    }

    /// READ_IDX: read the pages of `lba..lba+blocks` whose entry can match rule
    /// `(table, rule)`; returns the reply and the completion.
    pub fn read_idx(
        &mut self,
        dev: &mut BlockDevice,
        table: u8,
        rule: u16,
        lba: u64,
        blocks: u32,
        at: SimTime,
    ) -> Result<(IndexRead, SimTime), CommandError> {
        let (layout, terms) = self.rule(table, rule).map_err(|e| refusal(e, at))?;
        let (reply, t, _) =
            self.filtered_read(dev, lba, blocks, at, |e| layout.may_match(e, &terms))?;
        Ok((reply, t))
    }

    /// The common part of READ_IDX and the join reads: look up the entries of
    /// `lba..lba+blocks`, compare each with `keep` (pending entries are always kept), read
    /// the pages kept and send them with the skip list. Returns the reply, the completion
    /// and when the comparisons ended (the firmware may scan pages from then on).
    fn filtered_read(
        &mut self,
        dev: &mut BlockDevice,
        lba: u64,
        blocks: u32,
        at: SimTime,
        keep: impl Fn(&Entry) -> bool,
    ) -> Result<(IndexRead, SimTime, SimTime), CommandError> {
        Self::need_ext(dev, 8).map_err(|e| refusal(e, at))?;
        let n = blocks as u64;
        if lba.checked_add(n).is_none_or(|e| e > dev.ftl().lbas()) {
            return Err(CommandError {
                error: FtlError::OutOfRange {
                    lba,
                    end: lba.saturating_add(n),
                    capacity: dev.ftl().lbas(),
                },
                done: at,
            });
        }
        let meta0 = dev.ftl().stats().meta_reads;
        let miss0 = self.cache.misses;
        // The command carries no data: its per-command cost is charged once, with the
        // reply (as a Read's is), so a later command does not queue on the host link
        // behind this one's data.
        let t0 = at;
        let mut t = t0;
        let mut reply = IndexRead::default();
        let mdts = dev.ftl().config().mdts_sectors as usize;
        let mut examined = 0u64;
        for l in lba..lba + n {
            if reply.lbas.len() == mdts {
                reply.resume_at = Some(l);
                break;
            }
            examined += 1;
            let (bytes, pending, tt) = self
                .lookup(dev, l, t0)
                .map_err(|error| CommandError { error, done: t0 })?;
            t = t.max(tt);
            if pending || keep(&Entry::decode(&bytes)) {
                reply.lbas.push(l);
            } else {
                reply.skipped.push(l);
            }
        }
        let isp = dev.ftl().nand().config().isp;
        let cycles = core_cycles(dev, examined as f64 * isp.comp_cycles_per_record);
        let t = dev.controller_mut().cpu(t, cycles);
        self.stats.entries_compared += examined;
        self.stats.pages_read += reply.lbas.len() as u64;
        self.stats.pages_skipped += reply.skipped.len() as u64;
        let extra = 8 * reply.skipped.len() as u64 + 16;
        let done = if reply.lbas.is_empty() {
            dev.respond(t, extra)
        } else {
            reply.data = vec![0u8; reply.lbas.len() * dev.ftl().lba_size()];
            dev.read_for_host(&reply.lbas, &mut reply.data, extra, t)?
        };
        reply.index_misses = self.cache.misses - miss0;
        reply.index_page_reads = dev.ftl().stats().meta_reads - meta0;
        Ok((reply, done, t))
    }

    /// SEND_TIDX_ENC (§4.5): register a per-table join-key index over `spec.column` of
    /// `table` (a bitmap over `spec.bounds` buckets); returns its id (tiaID).
    pub fn register_table_index(
        &mut self,
        dev: &BlockDevice,
        table: u8,
        spec: JoinIndexSpec,
    ) -> Result<u16, FlixrError> {
        Self::need_ext(dev, 8)?;
        let t = self
            .tables
            .get(&table)
            .ok_or(FlixrError::UnknownTable(table))?;
        let col = t.schema.column_index(&spec.column).map_err(|_| {
            FlixrError::BadEncoding(format!(
                "table {:?} has no column {:?}",
                t.format.name, spec.column
            ))
        })?;
        if !t.format.columns[col].1.is_numeric() {
            return Err(FlixrError::BadEncoding(format!(
                "join key {:?} is not numeric",
                spec.column
            )));
        }
        if spec.bounds.is_empty()
            || spec.bounds.len() + 1 > 8 * MAX_TABLE_INDEX_BYTES
            || spec.bounds.windows(2).any(|w| w[0] >= w[1])
        {
            return Err(FlixrError::BadEncoding(format!(
                "a per-table index has 2..={} buckets from strictly increasing split points",
                8 * MAX_TABLE_INDEX_BYTES
            )));
        }
        if self.table_indexes.len() >= MAX_RULES_PER_TABLE * 4 {
            return Err(FlixrError::Full(format!(
                "the TIRA is full ({} per-table indexes): release one with DropTidxEnc",
                MAX_RULES_PER_TABLE * 4
            )));
        }
        let id = self.fresh_join_id();
        let bits = vec![0u8; (spec.bounds.len() + 1).div_ceil(8)];
        self.table_indexes.insert(
            id,
            TableIndex {
                table,
                column: col,
                bounds: spec.bounds,
                bits,
            },
        );
        Ok(id)
    }

    /// SEND_TIDX_ICR (§4.5): a join rule comparing the per-page bitmap entries of `table`
    /// with per-table index `tia`; both must bucket values alike. Returns the rule id.
    pub fn register_join_rule(&mut self, table: u8, tia: u16) -> Result<u16, FlixrError> {
        let ti = self
            .table_indexes
            .get(&tia)
            .ok_or(FlixrError::UnknownTableIndex(tia))?;
        let t = self
            .tables
            .get(&table)
            .ok_or(FlixrError::UnknownTable(table))?;
        let Some(col) = t.keys.iter().find_map(|(c, e)| match e {
            IndexEncoding::Bitmap { bounds } if *bounds == ti.bounds => Some(*c),
            _ => None,
        }) else {
            return Err(FlixrError::BadRule(format!(
                "table {table} needs a per-page bitmap index with the split points of per-table index {tia}"
            )));
        };
        if self.join_rules.len() >= MAX_RULES_PER_TABLE * 4 {
            return Err(FlixrError::Full(format!(
                "the join rule table is full ({} rules): release one with DropTidxIcr",
                MAX_RULES_PER_TABLE * 4
            )));
        }
        // Join rules have their own ids (READ_IDX_JOIN2 only).
        let id = self.fresh_join_id();
        self.join_rules.insert((table, id), (tia, col));
        Ok(id)
    }

    /// READ_IDX_JOIN1 (§4.5 step 1): READ_IDX under rule `(table, rule)` that also ORs
    /// the join keys of the matching rows on every page read into per-table index `tia`
    /// (cleared first when `reset`).
    #[allow(clippy::too_many_arguments)]
    pub fn read_idx_join1(
        &mut self,
        dev: &mut BlockDevice,
        table: u8,
        rule: u16,
        tia: u16,
        reset: bool,
        lba: u64,
        blocks: u32,
        at: SimTime,
    ) -> Result<(IndexRead, SimTime), CommandError> {
        let (layout, terms) = self.rule(table, rule).map_err(|e| refusal(e, at))?;
        let ti = self
            .table_indexes
            .get(&tia)
            .ok_or_else(|| refusal(FlixrError::UnknownTableIndex(tia), at))?;
        if ti.table != table {
            return Err(refusal(
                FlixrError::BadRule(format!(
                    "per-table index {tia} is built over table {}, not {table}",
                    ti.table
                )),
                at,
            ));
        }
        let Some(t) = self.tables.get(&table) else {
            return Err(refusal(FlixrError::NoEncoding(table), at));
        };
        let (schema, page_layout, kcol) = (t.schema.clone(), t.format.layout, ti.column);
        let k = t.format.page_lbas.max(1) as usize;
        let (reply, done, from) =
            self.filtered_read(dev, lba, blocks, at, |e| layout.may_match(e, &terms))?;
        let ls = dev.ftl().lba_size();
        let mut rows = 0usize;
        let mut bits = std::mem::take(&mut self.table_indexes.get_mut(&tia).expect("checked").bits);
        if reset {
            bits.fill(0);
        }
        let bounds = self.table_indexes[&tia].bounds.clone();
        let mut kv = Vec::new();
        let mut tv: Vec<Vec<i64>> = vec![Vec::new(); terms.len()];
        // A table page is `k` aligned LBAs: the LBAs returned are grouped by page. A page
        // only partly returned (the command's range cut it) cannot be parsed: its keys
        // are unknown, so every bucket is set (JOIN2 then skips nothing, never a match).
        let mut pages: Vec<&[u8]> = Vec::with_capacity(reply.lbas.len() / k + 1);
        let mut i = 0;
        while i < reply.lbas.len() {
            let first = reply.lbas[i];
            let whole = first % k as u64 == 0
                && i + k <= reply.lbas.len()
                && (0..k).all(|j| reply.lbas[i + j] == first + j as u64);
            if whole {
                pages.push(&reply.data[i * ls..(i + k) * ls]);
                i += k;
            } else {
                bits.fill(0xFF);
                i += 1;
            }
        }
        for p in pages {
            let Ok(view) = PageView::parse(p, &schema) else {
                continue;
            };
            if view.layout() != page_layout {
                continue;
            }
            let Ok(k) = view.column(kcol) else {
                continue;
            };
            kv.clear();
            if k.decode_i64_into(&mut kv).is_err() {
                continue;
            }
            let mut parsed = true;
            for ((col, _), v) in terms.iter().zip(tv.iter_mut()) {
                v.clear();
                parsed &= view
                    .column(*col)
                    .is_ok_and(|c| c.decode_i64_into(v).is_ok() && v.len() == kv.len());
            }
            if !parsed {
                continue;
            }
            rows += kv.len() * (1 + terms.len());
            for (i, key) in kv.iter().enumerate() {
                if terms.iter().zip(&tv).all(|((_, r), v)| r.matches(v[i])) {
                    let b = bucket(&bounds, *key);
                    bits[b / 8] |= 1 << (b % 8);
                }
            }
        }
        if let Some(ti) = self.table_indexes.get_mut(&tia) {
            ti.bits = bits;
        }
        // The scan of the pages read runs on the embedded cores as they arrive.
        let c = core_cycles(dev, Self::build_cycles(dev, reply.lbas.len(), rows));
        let cpu = dev.controller_mut().cpu(from, c);
        Ok((reply, done.max(cpu)))
    }

    /// READ_IDX_JOIN2 (§4.5 step 2): read the pages of `table` whose bitmap entry shares a
    /// bucket with the per-table index of join rule `(table, rule)`.
    pub fn read_idx_join2(
        &mut self,
        dev: &mut BlockDevice,
        table: u8,
        rule: u16,
        lba: u64,
        blocks: u32,
        at: SimTime,
    ) -> Result<(IndexRead, SimTime), CommandError> {
        let (tia, col) = *self
            .join_rules
            .get(&(table, rule))
            .ok_or_else(|| refusal(FlixrError::UnknownRule { table, rule }, at))?;
        let layout = self
            .key_layout(table)
            .ok_or_else(|| refusal(FlixrError::UnknownTable(table), at))?;
        let slot = layout.slots.iter().position(|s| s.column == col);
        let want = self
            .table_indexes
            .get(&tia)
            .map(|t| t.bits.clone())
            .ok_or_else(|| refusal(FlixrError::UnknownTableIndex(tia), at))?;
        let (reply, done, _) = self.filtered_read(dev, lba, blocks, at, |e| match e {
            Entry::Empty(x) if *x == table => false,
            _ => match (slot, layout.keys(e)) {
                (Some(i), Some(keys)) => match &keys[i] {
                    KeyEntry::Bitmap(bits) => bits.iter().zip(&want).any(|(a, b)| a & b != 0),
                    KeyEntry::Range { .. } => true,
                },
                _ => true,
            },
        })?;
        Ok((reply, done))
    }

    /// The bits of per-table index `tia` (bucket `i` is bit `i % 8` of byte `i / 8`).
    pub fn table_index_bits(&self, tia: u16) -> Option<&[u8]> {
        self.table_indexes.get(&tia).map(|t| t.bits.as_slice())
    }

    /// UPDATE_HOST_INDEX: the range entry of page `lba` of `table`.
    pub fn host_index(
        &mut self,
        dev: &mut BlockDevice,
        table: u8,
        lba: u64,
        at: SimTime,
    ) -> Result<(HostIndexValue, SimTime), CommandError> {
        let refuse = |e: FlixrError| CommandError {
            error: FtlError::Config(e.to_string()),
            done: at,
        };
        self.check_writable(dev, table).map_err(refuse)?;
        if lba >= dev.ftl().lbas() {
            return Err(CommandError {
                error: FtlError::OutOfRange {
                    lba,
                    end: lba + 1,
                    capacity: dev.ftl().lbas(),
                },
                done: at,
            });
        }
        let t = dev.receive(at, 0);
        let (bytes, pending, t) = self
            .lookup(dev, lba, t)
            .map_err(|error| CommandError { error, done: t })?;
        let layout = self.key_layout(table);
        let e = Entry::decode(&bytes);
        let first = layout
            .as_ref()
            .and_then(|l| l.keys(&e))
            .and_then(|k| k.into_iter().next());
        let v = match (e, first) {
            _ if pending => HostIndexValue::Unknown,
            (Entry::Empty(x), _) if x == table => HostIndexValue::Empty,
            (_, Some(KeyEntry::Range { min, max })) => HostIndexValue::Range { min, max },
            _ => HostIndexValue::Unknown,
        };
        Ok((v, dev.respond(t, 16)))
    }

    /// After a crash: recompute every entry the FTL still holds pending (§4.6) from the
    /// data that survived; an entry that cannot be recomputed is cleared (its page is then
    /// always read). Returns how many were recomputed.
    pub fn recover(&mut self, dev: &mut BlockDevice) -> u64 {
        let pending = dev.ftl().ext_pending();
        if pending.is_empty() || dev.ftl().read_only().is_some() {
            return 0;
        }
        let ext = dev.ftl().config().ext_bytes as usize;
        let ls = dev.ftl().lba_size();
        let mut t = dev.ftl().nand().now();
        let mut page = vec![0u8; ls];
        let mut n = 0;
        for l in pending {
            let Ok((bytes, tt)) = dev.ftl_mut().ext(l, t) else {
                continue;
            };
            t = t.max(tt);
            let entry = match Entry::decode(&bytes).table() {
                Some(table) => {
                    let k = self.page_lbas(table).unwrap_or(1).max(1) as u64;
                    let first = l - l % k;
                    page.resize(ls * k as usize, 0);
                    let read = if first + k <= dev.ftl().lbas() {
                        dev.ftl_mut().read(first, &mut page, t)
                    } else {
                        page.truncate(ls);
                        dev.ftl_mut().read(l, &mut page, t)
                    };
                    match read {
                        Ok(tt) => {
                            t = t.max(tt);
                            let (e, rows) = self.compute(table, &page);
                            let c = core_cycles(dev, Self::build_cycles(dev, 1, rows));
                            t = dev.controller_mut().cpu(t, c);
                            e
                        }
                        Err(_) => Entry::None,
                    }
                }
                None => Entry::None,
            };
            if dev.ftl_mut().set_ext(l, &entry.encode(ext), t).is_ok() {
                n += 1;
            }
        }
        let _ = dev.ftl_mut().flush(t);
        self.cache.clear();
        self.stats.recovered_entries += n;
        n
    }

    /// The registered table ids and names.
    pub fn tables(&self) -> Vec<(u8, String)> {
        self.tables
            .iter()
            .map(|(id, t)| (*id, t.format.name.clone()))
            .collect()
    }
}

// The registry as the controller blob: tables and encodings (rules are not kept).
fn encode_registry(tables: &BTreeMap<u8, TableEntry>) -> Vec<u8> {
    // Version 1 when every page is one LBA (the bytes stay those of older images);
    // version 2 adds each table's LBAs per page after its index; version 3 (a table with
    // several keys, or whose keys changed) has a key count, the keys and the generation
    // in place of the one index, then the LBAs per page.
    let v3 = tables
        .values()
        .any(|t| t.generation != 0 || t.keys.len() > 1);
    let v2 = !v3 && tables.values().any(|t| t.format.page_lbas != 1);
    let mut v = if v3 {
        BLOB_MAGIC_V3
    } else if v2 {
        BLOB_MAGIC_V2
    } else {
        BLOB_MAGIC
    }
    .to_vec();
    let key = |v: &mut Vec<u8>, col: usize, enc: &IndexEncoding| match enc {
        IndexEncoding::Range => {
            v.push(1);
            v.extend_from_slice(&(col as u16).to_le_bytes());
        }
        IndexEncoding::Bitmap { bounds } => {
            v.push(2);
            v.extend_from_slice(&(col as u16).to_le_bytes());
            v.extend_from_slice(&(bounds.len() as u16).to_le_bytes());
            for b in bounds {
                v.extend_from_slice(&b.to_le_bytes());
            }
        }
    };
    let s = |v: &mut Vec<u8>, x: &str| {
        v.extend_from_slice(&(x.len() as u16).to_le_bytes());
        v.extend_from_slice(x.as_bytes());
    };
    v.push(tables.len() as u8);
    for (id, t) in tables {
        v.push(*id);
        s(&mut v, &t.format.name);
        v.push(t.format.layout.code());
        v.extend_from_slice(&(t.format.columns.len() as u16).to_le_bytes());
        for (name, ty) in &t.format.columns {
            s(&mut v, name);
            let (tag, p) = match ty {
                ColumnType::Int32 => (1u8, 0u16),
                ColumnType::Int64 => (2, 0),
                ColumnType::Date => (3, 0),
                ColumnType::Decimal { scale } => (4, *scale as u16),
                ColumnType::Char(n) => (5, *n),
            };
            v.push(tag);
            v.extend_from_slice(&p.to_le_bytes());
        }
        if v3 {
            v.push(t.keys.len() as u8);
            for (col, enc) in &t.keys {
                key(&mut v, *col, enc);
            }
            v.push(t.generation);
        } else {
            match t.keys.first() {
                None => v.push(0),
                Some((col, enc)) => key(&mut v, *col, enc),
            }
        }
        if v2 || v3 {
            v.extend_from_slice(&t.format.page_lbas.to_le_bytes());
        }
    }
    v
}

fn decode_registry(b: &[u8]) -> Option<BTreeMap<u8, TableEntry>> {
    if b.is_empty() {
        return Some(BTreeMap::new());
    }
    let mut p = 0usize;
    let take = |p: &mut usize, n: usize| -> Option<&[u8]> {
        let s = b.get(*p..*p + n)?;
        *p += n;
        Some(s)
    };
    let version = match take(&mut p, 4)? {
        m if m == BLOB_MAGIC => 1,
        m if m == BLOB_MAGIC_V2 => 2,
        m if m == BLOB_MAGIC_V3 => 3,
        _ => return None,
    };
    let u8_ = |p: &mut usize| take(p, 1).map(|s| s[0]);
    let u16_ = |p: &mut usize| take(p, 2).map(|s| u16::from_le_bytes([s[0], s[1]]));
    let str_ = |p: &mut usize| {
        let n = u16_(p)? as usize;
        String::from_utf8(take(p, n)?.to_vec()).ok()
    };
    let n = u8_(&mut p)?;
    let mut out = BTreeMap::new();
    for _ in 0..n {
        let id = u8_(&mut p)?;
        let name = str_(&mut p)?;
        let layout = Layout::from_code(u8_(&mut p)?)?;
        let nc = u16_(&mut p)?;
        let mut columns = Vec::new();
        for _ in 0..nc {
            let cn = str_(&mut p)?;
            let tag = u8_(&mut p)?;
            let par = u16_(&mut p)?;
            let ty = match tag {
                1 => ColumnType::Int32,
                2 => ColumnType::Int64,
                3 => ColumnType::Date,
                4 => ColumnType::Decimal { scale: par as u8 },
                5 => ColumnType::Char(par),
                _ => return None,
            };
            columns.push((cn, ty));
        }
        let key = |p: &mut usize, kind: u8| -> Option<(usize, IndexEncoding)> {
            match kind {
                1 => Some((u16_(p)? as usize, IndexEncoding::Range)),
                2 => {
                    let col = u16_(p)? as usize;
                    let nb = u16_(p)?;
                    let mut bounds = Vec::new();
                    for _ in 0..nb {
                        bounds.push(i64::from_le_bytes(take(p, 8)?.try_into().ok()?));
                    }
                    Some((col, IndexEncoding::Bitmap { bounds }))
                }
                _ => None,
            }
        };
        let (keys, generation) = if version == 3 {
            let n = u8_(&mut p)?;
            let mut keys = Vec::new();
            for _ in 0..n {
                let kind = u8_(&mut p)?;
                keys.push(key(&mut p, kind)?);
            }
            (keys, u8_(&mut p)?)
        } else {
            match u8_(&mut p)? {
                0 => (Vec::new(), 0),
                kind => (vec![key(&mut p, kind)?], 0),
            }
        };
        if keys.iter().any(|(c, _)| *c >= columns.len()) {
            return None;
        }
        let page_lbas = if version >= 2 {
            u32::from_le_bytes(take(&mut p, 4)?.try_into().ok()?)
        } else {
            1
        };
        let cols: Vec<Column> = columns
            .iter()
            .map(|(n, t)| Column::new(n.clone(), *t))
            .collect();
        let schema = Schema::new(name.clone(), cols).ok()?;
        out.insert(
            id,
            TableEntry {
                format: TableFormat {
                    name,
                    columns,
                    layout,
                    page_lbas,
                },
                schema,
                keys,
                generation,
                rules: BTreeMap::new(),
                next_rule: 1,
            },
        );
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, page_lbas: u32) -> TableEntry {
        let columns = vec![("k".to_string(), ColumnType::Int64)];
        TableEntry {
            schema: Schema::new(name, vec![Column::new("k", ColumnType::Int64)]).expect("schema"),
            format: TableFormat {
                name: name.into(),
                columns,
                layout: Layout::Pax,
                page_lbas,
            },
            keys: vec![(0, IndexEncoding::Bitmap { bounds: vec![3, 9] })],
            generation: 0,
            rules: BTreeMap::new(),
            next_rule: 1,
        }
    }

    #[test]
    fn registry_keeps_lbas_per_page_and_old_bytes_for_one_lba_pages() {
        let one: BTreeMap<u8, TableEntry> = [(1, entry("a", 1))].into();
        let b = encode_registry(&one);
        assert_eq!(
            &b[..4],
            BLOB_MAGIC,
            "version 1 bytes when every page is one LBA"
        );
        assert_eq!(decode_registry(&b), Some(one));
        let multi: BTreeMap<u8, TableEntry> = [(1, entry("a", 1)), (2, entry("b", 4))].into();
        let b = encode_registry(&multi);
        assert_eq!(&b[..4], BLOB_MAGIC_V2);
        assert_eq!(decode_registry(&b), Some(multi));
        assert_eq!(decode_registry(&b[..b.len() - 1]), None, "truncated");
    }

    #[test]
    fn registry_keeps_several_keys_and_the_generation() {
        let mut t = entry("m", 2);
        t.format.columns.push(("d".into(), ColumnType::Date));
        t.schema = Schema::new(
            "m",
            vec![
                Column::new("k", ColumnType::Int64),
                Column::new("d", ColumnType::Date),
            ],
        )
        .expect("schema");
        t.keys.push((1, IndexEncoding::Range));
        t.generation = 3;
        let tables: BTreeMap<u8, TableEntry> = [(1, t.clone()), (2, entry("a", 1))].into();
        let b = encode_registry(&tables);
        assert_eq!(&b[..4], BLOB_MAGIC_V3);
        assert_eq!(decode_registry(&b), Some(tables));
        assert_eq!(decode_registry(&b[..b.len() - 2]), None, "truncated");
        // The layout: bitmap of 3 buckets (1 byte), then the DATE range as two i32.
        let l = KeyLayout::of(1, &t);
        assert_eq!(
            l.slots
                .iter()
                .map(|s| (s.offset, s.width, s.narrow))
                .collect::<Vec<_>>(),
            vec![(0, 1, false), (1, 8, true)]
        );
        assert_eq!(l.entry_bytes(), 13);
        let e = l.build(&[vec![0, 5, 12], vec![-3, 40, 7]]);
        let bytes = e.encode(24);
        assert_eq!(bytes[0], ENTRY_V2);
        let back = Entry::decode(&bytes);
        assert_eq!(
            l.keys(&back),
            Some(vec![
                KeyEntry::Bitmap(vec![0b111]),
                KeyEntry::Range { min: -3, max: 40 }
            ])
        );
        let between = |lo, hi| IndexRule::Between { lo, hi };
        assert!(l.may_match(&back, &[(0, between(3, 3)), (1, between(40, 50))]));
        assert!(!l.may_match(&back, &[(0, between(3, 3)), (1, between(41, 50))]));
        assert!(
            l.may_match(&back, &[(7, between(0, 0))]),
            "no key: no verdict"
        );
        // Another generation says nothing.
        let mut old = t.clone();
        old.generation = 2;
        assert_eq!(KeyLayout::of(1, &old).keys(&back), None);
        assert!(KeyLayout::of(1, &old).may_match(&back, &[(1, between(41, 50))]));
    }

    #[test]
    fn entries_roundtrip_and_rules_are_conservative() {
        for e in [
            Entry::None,
            Entry::Pending(3),
            Entry::Empty(4),
            Entry::Opaque(5),
            Entry::Range {
                table: 1,
                min: -5,
                max: 9,
            },
            Entry::Bitmap {
                table: 2,
                bits: [vec![0b101], vec![0; 19]].concat(),
            },
        ] {
            assert_eq!(Entry::decode(&e.encode(24)), e.clone());
        }
        let r = Entry::Range {
            table: 1,
            min: 10,
            max: 20,
        };
        let between = |lo, hi| IndexRule::Between { lo, hi };
        assert!(may_match(&r, 1, &IndexEncoding::Range, &between(20, 30)));
        assert!(!may_match(&r, 1, &IndexEncoding::Range, &between(21, 30)));
        assert!(!may_match(
            &r,
            1,
            &IndexEncoding::Range,
            &IndexRule::In(vec![1, 21])
        ));
        assert!(
            may_match(&r, 2, &IndexEncoding::Range, &between(21, 30)),
            "other table: read"
        );
        let bounds = vec![10, 20, 30]; // buckets (..10) [10,20) [20,30) [30..)
        let enc = IndexEncoding::Bitmap {
            bounds: bounds.clone(),
        };
        let b = Entry::Bitmap {
            table: 1,
            bits: vec![0b0100],
        }; // only [20,30)
        assert!(may_match(&b, 1, &enc, &between(25, 25)));
        assert!(!may_match(&b, 1, &enc, &between(0, 19)));
        assert!(!may_match(&b, 1, &enc, &IndexRule::In(vec![5, 35])));
        assert!(!may_match(
            &Entry::Empty(1),
            1,
            &enc,
            &between(i64::MIN, i64::MAX)
        ));
        assert!(may_match(&Entry::Opaque(1), 1, &enc, &between(0, 0)));
        assert!(may_match(&Entry::None, 1, &enc, &between(0, 0)));
    }
}
