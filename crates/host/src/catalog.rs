//! Tables on the device: the catalog and the bulk loader.
//!
//! The catalog lives in the first [`CATALOG_LBAS`] LBAs of the device and is rewritten
//! whole, as ONE batch (batch-io §3: a batch is atomic), so a power cut during a load or
//! a catalog update leaves either the old catalog or the new one, never a mix. A table is
//! an extent of LBAs holding pages of the device's flash-page size (so a page read by the
//! device is one flash page), NSM or PAX (smart-ssd §4.1.1), built by `csd-table`.
//! The loader writes the pages with MDTS-sized write commands, flushes, and only then
//! publishes the table in the catalog; replacing a table allocates a new extent and trims
//! the old one after the new catalog is durable. Extents are allocated append-only after
//! the last table (space of dropped tables is trimmed but not reused: simple and
//! adequate for a research device that is reloaded rather than managed). An extent may
//! hold more pages than the table uses (`TableInfo::capacity`: room INSERT grows into,
//! [`crate::dml`]); tables end below the statement log at the top of the LBAs.
//!
//! Catalog format (little-endian): magic `CCAT`, version u16, table count u16, sequence
//! u64, body length u32, CRC-32C of the body u32, then the body: per table its name,
//! layout code, page bytes, first LBA, page count, row count and schema (name, columns
//! with name, type code and parameter). Version 2 (written only when some table has a
//! FLIXR index, so catalogs without one keep their version-1 bytes) adds per table a
//! flag and, when set, its per-page index ([`TableIndex`]): name, column, encoding
//! (range, or bitmap with its split points) and the device's FLIXR table id. Version 3
//! (written only when some table has secondary keys, flixr §6.4) adds after an index its
//! secondary keys: a u16 count, then name, column and encoding of each. Version 4
//! (written only once a table was changed by INSERT / UPDATE / DELETE, so catalogs of
//! loaded tables keep their bytes) is version 3 followed by an extension section: per
//! table its extent's capacity in pages and its free-space hints (pages that may have
//! room, at most [`MAX_FREE_HINTS`]), then the LBAs of the statement log at the top of
//! the device and the redo record of a statement being applied, if any ([`Redo`], see
//! [`crate::dml`]). Version 5 (written once some table has column statistics, which
//! every load since measures) is version 4 followed by per table a flag and, when set,
//! a u16 column count and each column's estimated distinct values (u64): what the
//! loader's HyperLogLog sketches ([`cardinality_estimator`], about 1.6% error) saw, for
//! the SQL planner's join and aggregate estimates. INSERT / UPDATE / DELETE keep them
//! (estimates, never used for a result). Version 6 (written only once some table has a
//! column the original format cannot describe: a type beyond INT32, INT64, DATE,
//! DECIMAL and CHAR, a nullable column or a time zone; its pages are format 2 when it
//! has NULLs or strings, [`csd_table::page`]) is version 5 with, after each column's
//! type code and parameter, a flags byte (bit 0 nullable, bit 1 a time zone follows)
//! and the time zone's name. A build that predates version 6 refuses such a catalog
//! ("unsupported catalog version") rather than misreading its tables. Version 7
//! (written once some table has column bounds, which every load since measures) is
//! version 6 followed by per table a flag and, when set, a u16 column count and per
//! column a flag and, when set, its least and greatest value as `i64` (the stored
//! integer of a numeric column: days, scaled decimals, microseconds): the SQL planner
//! estimates a range filter's share of the rows from them. Older catalogs stay
//! readable.
//!
//! **The catalog area is only ever written over a csd catalog or zeros.** A device whose
//! first [`CATALOG_LBAS`] LBAs read as zeros never held a catalog (or anything else
//! there) and starts with an empty one. Anything else without the catalog's magic (data
//! a client wrote through `csd serve` / NBD, `csd io` or `csd kv serve`) is not a
//! catalog: [`Catalog::read`] refuses it, and since every catalog update (a load, DDL,
//! INSERT / UPDATE / DELETE, an index) reads the catalog first, nothing is written over
//! it. Giving such a device over to tables takes consent: [`Catalog::take_over`]
//! (`csd load ... --force`) writes an empty catalog over the area and trims the rest.

use crate::client::{CommandIssuer, HostError};
use csd_table::datagen::RowSource;
use csd_table::page::{Layout, Paginator};
use csd_table::schema::{Column, ColumnType, Schema};
use std::time::Instant;

/// LBAs reserved for the catalog at the start of the device.
pub const CATALOG_LBAS: u64 = 64;
const MAGIC: u32 = 0x5441_4343; // "CCAT"
const VERSION: u16 = 1;
const VERSION_INDEXED: u16 = 2;
const VERSION_MULTI_KEY: u16 = 3;
const VERSION_DML: u16 = 4;
const VERSION_STATS: u16 = 5;
const VERSION_TYPES: u16 = 6;
const VERSION_BOUNDS: u16 = 7;
/// Free-space hints a table keeps in the catalog (pages that may have room for a row).
pub const MAX_FREE_HINTS: usize = 1024;
const HEADER: usize = 4 + 2 + 2 + 8 + 4 + 4;

/// One table stored on the device.
#[derive(Debug, Clone, PartialEq)]
pub struct TableInfo {
    /// Table name (unique).
    pub name: String,
    /// Row schema.
    pub schema: Schema,
    /// Page layout.
    pub layout: Layout,
    /// Bytes per table page (the device's flash page).
    pub page_bytes: u32,
    /// First LBA of the extent.
    pub first_lba: u64,
    /// Pages in the table.
    pub pages: u64,
    /// Rows in the table.
    pub rows: u64,
    /// The table's FLIXR per-page index, if it has one (`CREATE INDEX`, `csd index`).
    pub index: Option<TableIndex>,
    /// Pages the extent holds (at least `pages`): room reserved for INSERT to grow the
    /// table in place.
    pub capacity: u64,
    /// Free-space hints: pages (sorted, below `pages`) that may have room for a row,
    /// left by DELETE; INSERT reads them first. A hint, not the truth: the page's own
    /// row count decides.
    pub free_hints: Vec<u64>,
    /// Estimated distinct values of each column (schema order), measured while the
    /// table was loaded (see the [module docs](self)); `None` for a table loaded before
    /// csd measured them. An estimate for the planner: never used for a result.
    pub distinct: Option<Vec<u64>>,
    /// Least and greatest value of each column (schema order; `None` for a column that
    /// is not numeric or holds no value), measured while the table was loaded and
    /// widened by INSERT / UPDATE (never narrowed: DELETE leaves them); `None` for a
    /// table loaded before csd measured them. An estimate for the planner (a range
    /// filter's share of the rows): never used for a result.
    pub bounds: Option<Vec<Option<(i64, i64)>>>,
}

/// The redo record of an INSERT / UPDATE / DELETE being applied ([`crate::dml`]): the
/// new images of the table's pages `pages` (runs of page numbers, in order) are in the
/// statement log from its first LBA on, one page after the other. It is part of the
/// catalog that commits the statement; applying it (again) writes those images in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redo {
    /// The table changed.
    pub table: String,
    /// Runs `(first page, pages)` of the table pages to overwrite, in log order.
    pub pages: Vec<(u64, u64)>,
}

impl Redo {
    /// The table pages to overwrite, in log order.
    pub fn page_list(&self) -> impl Iterator<Item = u64> + '_ {
        self.pages.iter().flat_map(|&(p, n)| p..p + n)
    }

    /// Pages in the record.
    pub fn len(&self) -> u64 {
        self.pages.iter().map(|r| r.1).sum()
    }

    /// No pages.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A FLIXR per-page index on a catalog table (flixr §4.2): the table's row format is
/// registered with the device (SEND_TBL_COL, id `flixr_table`) with this encoding
/// (SEND_IDX_ENC), and every page of the table was written through WRITE_IDX.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableIndex {
    /// Index name (unique over the catalog, case-insensitive).
    pub name: String,
    /// The indexed column.
    pub column: String,
    /// The encoding: min/max or bucket bitmap.
    pub encoding: csd_device::IndexEncoding,
    /// The table id the device's FLIXR registry gave the table.
    pub flixr_table: u8,
    /// Secondary keys (flixr §3.1, §6.4): indexes on other columns of the same table,
    /// packed by the device into the same per-page entry, each with its own name (their
    /// own `secondary` is empty; `flixr_table` is this one's).
    pub secondary: Vec<TableIndex>,
}

impl TableIndex {
    /// This index and its secondary keys, in the device's entry order.
    pub fn keys(&self) -> impl Iterator<Item = &TableIndex> {
        std::iter::once(self).chain(self.secondary.iter())
    }

    /// `range` or `bitmap(N buckets)`.
    pub fn kind(&self) -> String {
        match &self.encoding {
            csd_device::IndexEncoding::Range => "range".into(),
            csd_device::IndexEncoding::Bitmap { bounds } => {
                format!("bitmap ({} buckets)", bounds.len() + 1)
            }
        }
    }
}

impl TableInfo {
    /// LBAs per table page on a device with `lba_size`-byte LBAs.
    pub fn lbas_per_page(&self, lba_size: u32) -> u64 {
        (self.page_bytes / lba_size.max(1)) as u64
    }

    /// One past the last LBA of the extent (its capacity, reserved room included).
    pub fn end_lba(&self, lba_size: u32) -> u64 {
        self.first_lba + self.pages.max(self.capacity) * self.lbas_per_page(lba_size)
    }

    /// Bytes of table data.
    pub fn bytes(&self) -> u64 {
        self.pages * self.page_bytes as u64
    }
}

/// The catalog of tables on a device.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Catalog {
    /// Incremented by every update.
    pub seq: u64,
    /// The tables.
    pub tables: Vec<TableInfo>,
    /// LBAs of the statement log at the top of the device (`lbas - log_lbas..lbas`;
    /// 0 before the first INSERT / UPDATE / DELETE). Tables never reach into it.
    pub log_lbas: u64,
    /// The statement being applied, if a power cut interrupted it (replayed by
    /// [`Catalog::read`] on a writable device).
    pub redo: Option<Redo>,
}

/// What a load did.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadReport {
    /// The table as published.
    pub table: TableInfo,
    /// The table it replaced: one of the same name under [`same_name`] (which may
    /// differ in case), whose pages were trimmed.
    pub replaced: Option<TableInfo>,
    /// Wall-clock seconds.
    pub wall_s: f64,
    /// Modeled seconds (host clock advance).
    pub modeled_s: f64,
}

/// The one rule for table (and column) names, SQL's for unquoted identifiers: names
/// match when they are equal ignoring ASCII case. `Syn` and `syn` name one table, so
/// loading `syn` replaces `Syn`, and `SELECT ... FROM SYN` finds it.
pub fn same_name(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

/// Checks a table name before anything is written: 1 to 64 ASCII letters, digits or `_`.
pub fn check_table_name(name: &str) -> Result<(), HostError> {
    if name.is_empty()
        || name.len() > 64
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(HostError::Invalid(format!(
            "table name `{name}`: use 1 to 64 letters, digits or _"
        )));
    }
    Ok(())
}

fn put_encoding(v: &mut Vec<u8>, e: &csd_device::IndexEncoding) {
    match e {
        csd_device::IndexEncoding::Range => v.push(1),
        csd_device::IndexEncoding::Bitmap { bounds } => {
            v.push(2);
            v.extend_from_slice(&(bounds.len() as u16).to_le_bytes());
            for b in bounds {
                v.extend_from_slice(&b.to_le_bytes());
            }
        }
    }
}

fn get_encoding(r: &mut Reader<'_>) -> Result<csd_device::IndexEncoding, HostError> {
    Ok(match r.u8()? {
        1 => csd_device::IndexEncoding::Range,
        2 => {
            let n = r.u16()? as usize;
            let mut bounds = Vec::with_capacity(n);
            for _ in 0..n {
                bounds.push(r.u64()? as i64);
            }
            csd_device::IndexEncoding::Bitmap { bounds }
        }
        k => {
            return Err(HostError::Catalog(format!("unknown index kind {k}")));
        }
    })
}

fn put_str(v: &mut Vec<u8>, s: &str) {
    v.extend_from_slice(&(s.len() as u16).to_le_bytes());
    v.extend_from_slice(s.as_bytes());
}

struct Reader<'a> {
    b: &'a [u8],
    p: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], HostError> {
        let s = self
            .b
            .get(self.p..self.p + n)
            .ok_or_else(|| HostError::Catalog("truncated catalog".into()))?;
        self.p += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, HostError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, HostError> {
        let s = self.take(2)?;
        Ok(u16::from_le_bytes([s[0], s[1]]))
    }
    fn u32(&mut self) -> Result<u32, HostError> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self) -> Result<u64, HostError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    fn str(&mut self) -> Result<String, HostError> {
        let n = self.u16()? as usize;
        String::from_utf8(self.take(n)?.to_vec())
            .map_err(|_| HostError::Catalog("name is not UTF-8".into()))
    }
}

/// What a catalog area without the catalog's magic holds, in a few words.
fn foreign_summary(b: &[u8]) -> String {
    let nonzero = b.iter().filter(|&&x| x != 0).count();
    let head: String = b.iter().take(8).map(|x| format!("{x:02x}")).collect();
    format!("data that is not a csd catalog ({nonzero} non-zero bytes, starting {head})")
}

/// Why a catalog area that is neither zeros nor a csd catalog is refused, and the ways on.
fn foreign_area(b: &[u8]) -> String {
    format!(
        "LBAs 0 to {} (the catalog area) hold {}: the device holds something else, such \
         as data a client wrote through `csd serve` (NBD), `csd io` or `csd kv serve`. No \
         table is read from it and nothing is written over it. To keep that data, use \
         another image for tables; to make this device a table store anyway (overwrites \
         the catalog area and the LBAs tables are loaded to), load with `csd load ... \
         --force`",
        CATALOG_LBAS - 1,
        foreign_summary(b)
    )
}

fn type_of(code: u8, param: u16, version: u16) -> Result<ColumnType, HostError> {
    match ColumnType::from_tag(code, param) {
        // Catalogs before VERSION_TYPES hold only the five original types.
        Some(t) if version >= VERSION_TYPES || t.is_classic() => Ok(t),
        _ => Err(HostError::Catalog(format!(
            "unknown column type code {code} in a version-{version} catalog: the catalog is \
             damaged or was written by a newer csd"
        ))),
    }
}

/// Whether a table needs `VERSION_TYPES`: a column type, NULL or time zone the original
/// format cannot say.
fn needs_types(schema: &Schema) -> bool {
    schema
        .columns()
        .iter()
        .any(|c| !c.ty.is_classic() || c.nullable || c.tz.is_some())
}

impl Catalog {
    /// Whether the catalog needs the version-4 extension section.
    fn changed_by_dml(&self) -> bool {
        self.log_lbas != 0
            || self.redo.is_some()
            || self
                .tables
                .iter()
                .any(|t| t.capacity != t.pages || !t.free_hints.is_empty())
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let bounds = self.tables.iter().any(|t| t.bounds.is_some());
        let types = bounds || self.tables.iter().any(|t| needs_types(&t.schema));
        let stats = types || self.tables.iter().any(|t| t.distinct.is_some());
        let dml = stats || self.changed_by_dml();
        let indexed = dml || self.tables.iter().any(|t| t.index.is_some());
        let multi = dml
            || self
                .tables
                .iter()
                .any(|t| t.index.as_ref().is_some_and(|i| !i.secondary.is_empty()));
        let mut body = Vec::new();
        for t in &self.tables {
            put_str(&mut body, &t.name);
            body.push(t.layout.code());
            body.extend_from_slice(&t.page_bytes.to_le_bytes());
            body.extend_from_slice(&t.first_lba.to_le_bytes());
            body.extend_from_slice(&t.pages.to_le_bytes());
            body.extend_from_slice(&t.rows.to_le_bytes());
            put_str(&mut body, t.schema.name());
            body.extend_from_slice(&(t.schema.columns().len() as u16).to_le_bytes());
            for c in t.schema.columns() {
                put_str(&mut body, &c.name);
                body.push(c.ty.tag());
                body.extend_from_slice(&c.ty.param().to_le_bytes());
                if types {
                    body.push(u8::from(c.nullable) | u8::from(c.tz.is_some()) << 1);
                    if let Some(tz) = &c.tz {
                        put_str(&mut body, tz);
                    }
                }
            }
            if indexed {
                match &t.index {
                    None => body.push(0),
                    Some(ix) => {
                        body.push(1);
                        put_str(&mut body, &ix.name);
                        put_str(&mut body, &ix.column);
                        body.push(ix.flixr_table);
                        put_encoding(&mut body, &ix.encoding);
                        if multi {
                            body.extend_from_slice(&(ix.secondary.len() as u16).to_le_bytes());
                            for k in &ix.secondary {
                                put_str(&mut body, &k.name);
                                put_str(&mut body, &k.column);
                                put_encoding(&mut body, &k.encoding);
                            }
                        }
                    }
                }
            }
        }
        if dml {
            for t in &self.tables {
                body.extend_from_slice(&t.capacity.to_le_bytes());
                let hints = &t.free_hints[..t.free_hints.len().min(MAX_FREE_HINTS)];
                body.extend_from_slice(&(hints.len() as u32).to_le_bytes());
                for h in hints {
                    body.extend_from_slice(&h.to_le_bytes());
                }
            }
            body.extend_from_slice(&self.log_lbas.to_le_bytes());
            match &self.redo {
                None => body.push(0),
                Some(r) => {
                    body.push(1);
                    put_str(&mut body, &r.table);
                    body.extend_from_slice(&(r.pages.len() as u32).to_le_bytes());
                    for &(p, n) in &r.pages {
                        body.extend_from_slice(&p.to_le_bytes());
                        body.extend_from_slice(&n.to_le_bytes());
                    }
                }
            }
        }
        if stats {
            self.encode_stats(&mut body);
        }
        if bounds {
            self.encode_bounds(&mut body);
        }
        let version = if bounds {
            VERSION_BOUNDS
        } else if types {
            VERSION_TYPES
        } else if stats {
            VERSION_STATS
        } else if dml {
            VERSION_DML
        } else if multi {
            VERSION_MULTI_KEY
        } else if indexed {
            VERSION_INDEXED
        } else {
            VERSION
        };
        let mut v = Vec::with_capacity(HEADER + body.len());
        v.extend_from_slice(&MAGIC.to_le_bytes());
        v.extend_from_slice(&version.to_le_bytes());
        v.extend_from_slice(&(self.tables.len() as u16).to_le_bytes());
        v.extend_from_slice(&self.seq.to_le_bytes());
        v.extend_from_slice(&(body.len() as u32).to_le_bytes());
        v.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        v.extend_from_slice(&body);
        v
    }

    fn decode(b: &[u8]) -> Result<Catalog, HostError> {
        let mut r = Reader { b, p: 0 };
        if r.u32()? != MAGIC {
            // A device that never held a catalog reads as zeros; anything else there is
            // someone's data, never to be taken for an empty catalog and overwritten.
            if b.iter().all(|&x| x == 0) {
                return Ok(Catalog::default());
            }
            return Err(HostError::Catalog(foreign_area(b)));
        }
        let version = r.u16()?;
        if !(VERSION..=VERSION_BOUNDS).contains(&version) {
            return Err(HostError::Catalog(format!(
                "unsupported catalog version {version} (this build reads versions \
                 {VERSION} ..= {VERSION_BOUNDS}): the image was written by a newer csd"
            )));
        }
        let n = r.u16()? as usize;
        let seq = r.u64()?;
        let len = r.u32()? as usize;
        let crc = r.u32()?;
        let body = r.take(len)?;
        if crc32c::crc32c(body) != crc {
            return Err(HostError::Catalog("checksum mismatch".into()));
        }
        let mut r = Reader { b: body, p: 0 };
        let mut tables = Vec::with_capacity(n);
        for _ in 0..n {
            tables.push(Self::decode_table(&mut r, version)?);
        }
        let (log_lbas, redo) = if version >= VERSION_DML {
            Self::decode_dml(&mut r, &mut tables)?
        } else {
            (0, None)
        };
        if version >= VERSION_STATS {
            Self::decode_stats(&mut r, &mut tables)?;
        }
        if version >= VERSION_BOUNDS {
            Self::decode_bounds(&mut r, &mut tables)?;
        }
        Ok(Catalog {
            seq,
            tables,
            log_lbas,
            redo,
        })
    }

    /// One table's entry: name, layout, extent, schema and (from `VERSION_INDEXED`) its
    /// FLIXR index.
    fn decode_table(r: &mut Reader<'_>, version: u16) -> Result<TableInfo, HostError> {
        let name = r.str()?;
        let layout = Layout::from_code(r.u8()?)
            .ok_or_else(|| HostError::Catalog("unknown layout".into()))?;
        let page_bytes = r.u32()?;
        let first_lba = r.u64()?;
        let pages = r.u64()?;
        let rows = r.u64()?;
        let sname = r.str()?;
        let ncols = r.u16()? as usize;
        let mut cols = Vec::with_capacity(ncols);
        for _ in 0..ncols {
            let cname = r.str()?;
            let code = r.u8()?;
            let param = r.u16()?;
            let mut col = Column::new(cname, type_of(code, param, version)?);
            if version >= VERSION_TYPES {
                let flags = r.u8()?;
                col.nullable = flags & 1 != 0;
                if flags & 2 != 0 {
                    col.tz = Some(r.str()?);
                }
            }
            cols.push(col);
        }
        let schema = Schema::new(sname, cols)
            .map_err(|e| HostError::Catalog(format!("table {name}: {e}")))?;
        let index = if version >= VERSION_INDEXED && r.u8()? == 1 {
            Some(Self::decode_index(r, version)?)
        } else {
            None
        };
        Ok(TableInfo {
            name,
            schema,
            layout,
            page_bytes,
            first_lba,
            pages,
            rows,
            index,
            capacity: pages,
            free_hints: Vec::new(),
            distinct: None,
            bounds: None,
        })
    }

    /// Appends the column bounds section (`VERSION_BOUNDS`) to `body`: per table a
    /// flag and, when set, a u16 column count and per column a flag and, when set, its
    /// least and greatest value (i64 each).
    fn encode_bounds(&self, body: &mut Vec<u8>) {
        for t in &self.tables {
            let Some(b) = &t.bounds else {
                body.push(0);
                continue;
            };
            body.push(1);
            body.extend_from_slice(&(b.len() as u16).to_le_bytes());
            for c in b {
                match c {
                    None => body.push(0),
                    Some((lo, hi)) => {
                        body.push(1);
                        body.extend_from_slice(&lo.to_le_bytes());
                        body.extend_from_slice(&hi.to_le_bytes());
                    }
                }
            }
        }
    }

    /// The column bounds (`VERSION_BOUNDS`, see [`Catalog::encode_bounds`]).
    fn decode_bounds(r: &mut Reader<'_>, tables: &mut [TableInfo]) -> Result<(), HostError> {
        for t in tables.iter_mut() {
            let Some(n) = Self::section_columns(r, t, "bounds")? else {
                continue;
            };
            let mut b = Vec::with_capacity(n);
            for c in 0..n {
                b.push(match r.u8()? {
                    0 => None,
                    _ => {
                        let (lo, hi) = (r.u64()? as i64, r.u64()? as i64);
                        if lo > hi {
                            return Err(HostError::Catalog(format!(
                                "table {}: column {c}'s least value {lo} is above its \
                                 greatest {hi}",
                                t.name
                            )));
                        }
                        Some((lo, hi))
                    }
                });
            }
            t.bounds = Some(b);
        }
        Ok(())
    }

    /// Appends the column statistics section (`VERSION_STATS`) to `body`.
    fn encode_stats(&self, body: &mut Vec<u8>) {
        for t in &self.tables {
            match &t.distinct {
                None => body.push(0),
                Some(d) => {
                    body.push(1);
                    body.extend_from_slice(&(d.len() as u16).to_le_bytes());
                    for n in d {
                        body.extend_from_slice(&n.to_le_bytes());
                    }
                }
            }
        }
    }

    /// The start of `t`'s part of a per-column section (`what`: statistics, bounds): its
    /// flag and, when set, its column count, which must be the schema's.
    fn section_columns(
        r: &mut Reader<'_>,
        t: &TableInfo,
        what: &str,
    ) -> Result<Option<usize>, HostError> {
        if r.u8()? == 0 {
            return Ok(None);
        }
        let n = r.u16()? as usize;
        if n != t.schema.len() {
            return Err(HostError::Catalog(format!(
                "table {}: {what} for {n} columns, the schema has {}",
                t.name,
                t.schema.len()
            )));
        }
        Ok(Some(n))
    }

    /// The column statistics (`VERSION_STATS`): per table a flag and, when set, each
    /// column's estimated distinct values.
    fn decode_stats(r: &mut Reader<'_>, tables: &mut [TableInfo]) -> Result<(), HostError> {
        for t in tables.iter_mut() {
            let Some(n) = Self::section_columns(r, t, "statistics")? else {
                continue;
            };
            let mut d = Vec::with_capacity(n);
            for _ in 0..n {
                d.push(r.u64()?);
            }
            t.distinct = Some(d);
        }
        Ok(())
    }

    /// A table's FLIXR index and (from `VERSION_MULTI_KEY`) its secondary keys.
    fn decode_index(r: &mut Reader<'_>, version: u16) -> Result<TableIndex, HostError> {
        let iname = r.str()?;
        let column = r.str()?;
        let flixr_table = r.u8()?;
        let encoding = get_encoding(r)?;
        let mut secondary = Vec::new();
        if version >= VERSION_MULTI_KEY {
            for _ in 0..r.u16()? {
                let name = r.str()?;
                let column = r.str()?;
                let encoding = get_encoding(r)?;
                secondary.push(TableIndex {
                    name,
                    column,
                    encoding,
                    flixr_table,
                    secondary: Vec::new(),
                });
            }
        }
        Ok(TableIndex {
            name: iname,
            column,
            encoding,
            flixr_table,
            secondary,
        })
    }

    /// The DML state (`VERSION_DML`): each table's capacity and free-space hints, the
    /// statement log's size and the redo record, if any.
    fn decode_dml(
        r: &mut Reader<'_>,
        tables: &mut [TableInfo],
    ) -> Result<(u64, Option<Redo>), HostError> {
        for t in tables.iter_mut() {
            t.capacity = r.u64()?.max(t.pages);
            let n = r.u32()? as usize;
            if n > MAX_FREE_HINTS {
                return Err(HostError::Catalog(format!(
                    "table {}: {n} free-space hints (at most {MAX_FREE_HINTS})",
                    t.name
                )));
            }
            for _ in 0..n {
                t.free_hints.push(r.u64()?);
            }
        }
        let log_lbas = r.u64()?;
        let mut redo = None;
        if r.u8()? == 1 {
            let table = r.str()?;
            let n = r.u32()? as usize;
            let mut pages = Vec::with_capacity(n.min(1 << 16));
            for _ in 0..n {
                pages.push((r.u64()?, r.u64()?));
            }
            redo = Some(Redo { table, pages });
        }
        Ok((log_lbas, redo))
    }

    /// Read the catalog from the device (empty on a device that never held one). A
    /// statement committed but not fully applied when power failed (a redo record) is
    /// finished first ([`crate::dml::finish`]); on a device that refuses writes (opened
    /// read-only) that is an error saying how to finish it.
    pub fn read(client: &mut impl CommandIssuer) -> Result<Catalog, HostError> {
        let mut cat = Catalog::read_raw(client)?;
        if cat.redo.is_some() {
            crate::dml::finish(client, &mut cat)?;
        }
        Ok(cat)
    }

    /// Read the catalog as it is on the device, a redo record included.
    pub fn read_raw(client: &mut impl CommandIssuer) -> Result<Catalog, HostError> {
        Catalog::decode(&Catalog::read_area(client)?)
    }

    /// The bytes of the catalog area.
    fn read_area(client: &mut impl CommandIssuer) -> Result<Vec<u8>, HostError> {
        let lba = client.identify().lba_size as usize;
        let mdts = client.identify().mdts_blocks.max(1) as u64;
        let mut bytes = Vec::with_capacity(CATALOG_LBAS as usize * lba);
        let mut l = 0;
        while l < CATALOG_LBAS {
            let n = mdts.min(CATALOG_LBAS - l);
            bytes.extend_from_slice(&client.read(l, n as u32)?);
            l += n;
        }
        Ok(bytes)
    }

    /// Give the catalog area to tables when it holds no readable catalog: data that is
    /// not a csd catalog (a client's, through NBD), or a damaged catalog. Writes a new,
    /// empty catalog (one atomic batch, as every catalog write) and trims the rest of the
    /// area. Destroys what was there: the consent path (`csd load --force`). Returns what
    /// the area held, or `None` when it held a readable catalog or zeros (nothing is
    /// written then).
    pub fn take_over(client: &mut impl CommandIssuer) -> Result<Option<String>, HostError> {
        let bytes = Catalog::read_area(client)?;
        let held = match Catalog::decode(&bytes) {
            Ok(_) => return Ok(None),
            Err(_) if !bytes.starts_with(&MAGIC.to_le_bytes()) => foreign_summary(&bytes),
            Err(e) => format!("a damaged csd catalog ({e}); its tables are forgotten"),
        };
        let fresh = Catalog::default();
        fresh.write(client)?;
        let lba = client.identify().lba_size as usize;
        let used = fresh.encode().len().div_ceil(lba) as u64;
        client.exec(csd_device::Command::Trim {
            lba: used,
            blocks: CATALOG_LBAS - used,
        })?;
        client.flush()?;
        Ok(Some(held))
    }

    /// First LBA of the statement log (tables end before it).
    pub fn log_first_lba(&self, lbas: u64) -> u64 {
        lbas.saturating_sub(self.log_lbas)
    }

    /// Write the catalog as one atomic batch.
    pub(crate) fn write(&self, client: &mut impl CommandIssuer) -> Result<(), HostError> {
        let lba = client.identify().lba_size as usize;
        let mut bytes = self.encode();
        if bytes.len() > CATALOG_LBAS as usize * lba {
            return Err(HostError::Invalid(format!(
                "the catalog ({} bytes) outgrew its {} LBAs",
                bytes.len(),
                CATALOG_LBAS
            )));
        }
        bytes.resize(bytes.len().div_ceil(lba) * lba, 0);
        let pages: Vec<(u64, &[u8])> = bytes
            .chunks(lba)
            .enumerate()
            .map(|(i, p)| (i as u64, p))
            .collect();
        let buffer = csd_sim::wire::build_batch(&pages, lba)
            .map_err(|e| HostError::Invalid(e.to_string()))?;
        client.flush_batch(buffer)
    }

    /// The table named `name` (under [`same_name`]: case does not matter).
    pub fn get(&self, name: &str) -> Option<&TableInfo> {
        self.tables.iter().find(|t| same_name(&t.name, name))
    }

    /// First LBA after every table (and after the catalog region).
    pub fn next_free_lba(&self, lba_size: u32) -> u64 {
        self.tables
            .iter()
            .map(|t| t.end_lba(lba_size))
            .max()
            .unwrap_or(CATALOG_LBAS)
            .max(CATALOG_LBAS)
    }

    /// Load rows from `source` as table `name` in `layout`; replaces a table of that name.
    /// Nothing is published until every page is durable.
    pub fn load<C: CommandIssuer>(
        client: &mut C,
        name: &str,
        source: impl RowSource,
        layout: Layout,
        progress: &mut dyn FnMut(u64),
    ) -> Result<LoadReport, HostError> {
        check_table_name(name)?;
        let wall0 = Instant::now();
        let t0 = client.now();
        let mut cat = Catalog::read(client)?;
        let id = client.identify().clone();
        let lba = id.lba_size;
        let page_bytes = id.flash_page_bytes.max(lba);
        let lpp = (page_bytes / lba) as u64;
        let first = cat.next_free_lba(lba).div_ceil(lpp) * lpp;
        let limit = cat.log_first_lba(id.lbas);
        let schema = source.schema().clone();
        let mut sketched = crate::stats::Sketched::new(source);
        let mut pages = Paginator::new(&mut sketched, layout, page_bytes as usize)?;
        let chunk_pages = ((id.mdts_blocks as u64 / lpp).max(1)) as usize;
        let mut buf: Vec<u8> = Vec::with_capacity(chunk_pages * page_bytes as usize);
        let mut next_lba = first;
        let mut written_pages = 0u64;
        let flush_buf = |client: &mut C,
                         buf: &mut Vec<u8>,
                         next_lba: &mut u64|
         -> Result<(), HostError> {
            if buf.is_empty() {
                return Ok(());
            }
            let n = buf.len() as u64 / lba as u64;
            if *next_lba + n > limit {
                return Err(HostError::Invalid(format!(
                    "table {name} does not fit: the device has {} LBAs for tables, the table needs more than {}",
                    limit,
                    *next_lba + n - first
                )));
            }
            client.write(*next_lba, buf)?;
            *next_lba += n;
            buf.clear();
            Ok(())
        };
        while let Some(p) = pages.next_page() {
            buf.extend_from_slice(p);
            written_pages += 1;
            if buf.len() >= chunk_pages * page_bytes as usize {
                flush_buf(client, &mut buf, &mut next_lba)?;
                progress(pages.rows());
            }
        }
        if let Some(e) = pages.error() {
            return Err(HostError::Page(e.clone()));
        }
        flush_buf(client, &mut buf, &mut next_lba)?;
        client.flush()?;
        let rows = pages.rows();
        drop(pages);
        let table = TableInfo {
            name: name.to_string(),
            schema,
            layout,
            page_bytes,
            first_lba: first,
            pages: written_pages,
            rows,
            index: None,
            capacity: written_pages,
            free_hints: Vec::new(),
            distinct: Some(sketched.distinct()),
            bounds: Some(sketched.bounds()),
        };
        let old = cat
            .tables
            .iter()
            .position(|t| same_name(&t.name, name))
            .map(|i| cat.tables.remove(i));
        cat.tables.push(table.clone());
        cat.seq += 1;
        cat.write(client)?;
        if let Some(old) = &old {
            Self::retire(client, old, lba)?;
        }
        progress(table.rows);
        Ok(LoadReport {
            table,
            replaced: old,
            wall_s: wall0.elapsed().as_secs_f64(),
            modeled_s: client.now().since(t0) as f64 / 1e9,
        })
    }

    /// Publishes table `from` (a table loaded under a staging name) as `to`, replacing a
    /// table named `to` in one catalog write, then frees the replaced table's extent.
    /// Returns the published entry and the replaced one. Nothing changes when `from` is
    /// not in the catalog or `to` is not a valid name.
    pub fn rename(
        client: &mut impl CommandIssuer,
        from: &str,
        to: &str,
    ) -> Result<(TableInfo, Option<TableInfo>), HostError> {
        check_table_name(to)?;
        let mut cat = Catalog::read(client)?;
        let i = cat
            .tables
            .iter()
            .position(|t| same_name(&t.name, from))
            .ok_or_else(|| HostError::Catalog(format!("no table {from} to publish as {to}")))?;
        let mut table = cat.tables.remove(i);
        let old = cat
            .tables
            .iter()
            .position(|t| same_name(&t.name, to))
            .map(|i| cat.tables.remove(i));
        table.name = to.to_string();
        cat.tables.push(table.clone());
        cat.seq += 1;
        cat.write(client)?;
        if let Some(old) = &old {
            Self::retire(client, old, client.identify().lba_size)?;
        }
        Ok((table, old))
    }

    /// Removes table `name` from the catalog and frees its extent (a staging table of a
    /// load that was abandoned). Returns the removed entry (`None`: no such table, nothing
    /// written).
    pub fn drop_table(
        client: &mut impl CommandIssuer,
        name: &str,
    ) -> Result<Option<TableInfo>, HostError> {
        let mut cat = Catalog::read(client)?;
        let Some(i) = cat.tables.iter().position(|t| same_name(&t.name, name)) else {
            return Ok(None);
        };
        let old = cat.tables.remove(i);
        cat.seq += 1;
        cat.write(client)?;
        Self::retire(client, &old, client.identify().lba_size)?;
        Ok(Some(old))
    }

    /// Frees the extent of `old`, a table a load replaced (the new catalog is durable):
    /// trims its LBAs and drops its FLIXR registration.
    fn retire(client: &mut impl CommandIssuer, old: &TableInfo, lba: u32) -> Result<(), HostError> {
        let n = old.end_lba(lba) - old.first_lba;
        // A table with no pages (an array member dealt none of a small table's rows)
        // holds no LBAs: nothing to trim (a Trim of 0 blocks is refused).
        if n > 0 {
            client.exec(csd_device::Command::Trim {
                lba: old.first_lba,
                blocks: n,
            })?;
        }
        // The replaced table's index goes with it (its format leaves the registry).
        // Best effort: the new catalog is already durable, and a registration left
        // behind only makes a later CREATE INDEX on this table name fail.
        if let Some(ix) = &old.index {
            let _ = client.exec(csd_device::Command::DropTblCol {
                table: ix.flixr_table,
            });
        }
        Ok(())
    }

    /// Read page `i` of `table`.
    pub fn read_page(
        client: &mut impl CommandIssuer,
        table: &TableInfo,
        i: u64,
    ) -> Result<Vec<u8>, HostError> {
        if i >= table.pages {
            return Err(HostError::Invalid(format!(
                "table {} has {} pages, not {}",
                table.name,
                table.pages,
                i + 1
            )));
        }
        let lba = client.identify().lba_size;
        let lpp = table.lbas_per_page(lba);
        client.read(table.first_lba + i * lpp, lpp as u32)
    }
}

#[cfg(test)]
mod tests;
