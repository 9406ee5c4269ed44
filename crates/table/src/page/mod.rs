//! Page layouts: NSM (slotted rows) and PAX (one minipage per column), smart-ssd §4.1.1.
//!
//! The paper stores its tables "in slotted pages using the traditional N-ary Storage
//! Model (NSM)" and, for the Smart SSD, also in "the PAX layout in which all the values
//! of a column are grouped together within a page". Both are realized here for a page of
//! `P` bytes, `P` being the flash page size (a parameter, [`MIN_PAGE_SIZE`] ..=
//! [`MAX_PAGE_SIZE`]). A page is written by [`PageBuilder`] and read in place, without
//! copying, by [`PageView`]; both share the capacity and offset math of this module.
//!
//! # Byte format (all integers little-endian)
//!
//! Every page starts with a 24-byte header:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `b"CSDP"` |
//! | 4 | 1 | layout: 1 = NSM, 2 = PAX |
//! | 5 | 1 | format version, currently 1 |
//! | 6 | 2 | header length, 24 |
//! | 8 | 4 | page size `P` in bytes |
//! | 12 | 4 | schema fingerprint ([`crate::Schema::fingerprint`]) |
//! | 16 | 4 | row count `n` |
//! | 20 | 4 | CRC-32C of the whole page with this field taken as zero |
//!
//! Let `W` be the schema's row width, `w_c` / `off_c` the width / row-image offset of
//! column `c`, and `H` = 24.
//!
//! **NSM** (classic slotted page): row `i` is stored as its row image at
//! `H + i*W` (rows packed upward from the header, in slot order); the slot array grows
//! downward from the end of the page, slot `i` being a `u16` at `P - 2*(i+1)` that holds
//! the byte offset of row `i`. Capacity: `floor((P - H) / (W + 2))`. Rows are fixed
//! width and never deleted in place, so a valid page always has
//! `slot[i] == H + i*W`; [`PageView`] checks this, which lets it read a column with a
//! fixed stride `W` starting at `H + off_c`. The 2-byte slots bound `P` to 64 KiB.
//!
//! **PAX**: with capacity `C = floor((P - H) / W)`, column `c`'s minipage starts at
//! `H + C*off_c` and holds its `n` values back to back (`w_c` bytes each), followed by
//! `C - n` unused value slots. Minipage positions depend only on the schema and `P`
//! (as in Ailamaki et al.'s PAX, minipages are sized for a full page), so a builder
//! writes every value in place as the row arrives, and a reader finds a minipage
//! without a directory. A PAX page therefore has no per-row overhead: it holds
//! `floor((P-H)/W)` rows against NSM's `floor((P-H)/(W+2))`.
//!
//! Unused bytes are zero. The CRC makes a torn or bit-flipped page a typed error
//! ([`PageError::Checksum`]); the fingerprint makes a page of another table a typed
//! error ([`PageError::SchemaMismatch`]); every offset is bounds-checked, so no byte
//! string, however malformed, makes the parser panic.
//!
//! # Format version 2: NULLs and variable-length values
//!
//! A page of an *extended* schema ([`crate::Schema::is_extended`]: a nullable or a
//! VARCHAR/VARBINARY column) has version 2 in its header; pages of every other schema
//! keep version 1 and the layout above byte for byte (so a table written before
//! version 2 existed reads as it always did, and TPC-H pages are unchanged). A reader
//! refuses a version-1 page for an extended schema and a version-2 page for a fixed one
//! ([`PageError::VersionForSchema`]), never misreading either. A variable-length
//! value's slot holds the `u16` page offset and `u16` length of its bytes, which lie in
//! the page's *heap*; a NULL's slot is zero. With `W` the schema's row width (null
//! bitmap plus slots), `Wf` the slots alone and `n` the row count:
//!
//! **NSM v2**: row `i`'s fixed record (its row image's null bitmap and slots, `W` bytes)
//! at `H + i*W`; the heap grows downward from the end of the page (the first row's
//! values last). No slot array: the records have a fixed stride, so a slot would only
//! repeat `H + i*W`. A row fits while `H + n*W + heap <= P`.
//!
//! **PAX v2**: minipages are sized for the page's own `n` rows (the builder keeps a
//! page's rows until it is finished): column `c`'s minipage at `H + n*off_c'` (`off_c'`
//! its slot's offset among the slots), then one validity bitmap of `ceil(n/8)` bytes per
//! nullable column in column order (bit `i % 8` of byte `i / 8` set when row `i` is
//! NULL), then the heap, values in row order. A row fits while
//! `H + n*Wf + nullable*ceil(n/8) + heap <= P`.
//!
//! A row (its fixed part and its values) must fit one page: there are no overflow
//! pages, so a VARCHAR value is at most a page less its header and slots
//! ([`PageError::RowTooLarge`]).
//!
//! Tuples per 8 KiB page here are: lineitem (148 B) NSM 54 / PAX 55, Synthetic4 NSM 453
//! / PAX 510, Synthetic16 123 / 127, Synthetic64 31 / 31. The paper's SQL Server pages
//! hold fewer (51, 323, 109, 29) because of its 96-byte page header and per-row headers,
//! which this format does not have.

mod builder;
mod view;

pub use builder::{PageBuilder, Paginator};
pub use view::{ColumnView, PageView, Validity};

use crate::schema::SchemaError;
use std::fmt;
use std::str::FromStr;

/// Page magic, bytes 0..4 of every page.
pub const PAGE_MAGIC: [u8; 4] = *b"CSDP";
/// Page format version of fixed schemas (the original format).
pub const PAGE_VERSION: u8 = 1;
/// Page format version of extended schemas (NULLs, variable-length values).
pub const PAGE_VERSION_EXTENDED: u8 = 2;
/// Header length in bytes.
pub const HEADER_LEN: usize = 24;
/// Bytes per NSM slot.
pub const NSM_SLOT_LEN: usize = 2;
/// Smallest supported page size.
pub const MIN_PAGE_SIZE: usize = 128;
/// Largest supported page size (NSM slots are 16-bit offsets).
pub const MAX_PAGE_SIZE: usize = 65_536;

const OFF_LAYOUT: usize = 4;
const OFF_VERSION: usize = 5;
const OFF_HEADER_LEN: usize = 6;
const OFF_PAGE_SIZE: usize = 8;
const OFF_SCHEMA: usize = 12;
const OFF_ROWS: usize = 16;
const OFF_CRC: usize = 20;

/// How rows are laid out inside a page (serialized as its name, `nsm` or `pax`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// N-ary storage model: whole rows, slotted page.
    Nsm,
    /// Partition attributes across: one minipage per column.
    Pax,
}

impl Layout {
    /// Both layouts, NSM first.
    pub const ALL: [Layout; 2] = [Layout::Nsm, Layout::Pax];

    /// The header byte of this layout.
    pub const fn code(self) -> u8 {
        match self {
            Layout::Nsm => 1,
            Layout::Pax => 2,
        }
    }

    /// The layout of a header byte, if any.
    pub const fn from_code(code: u8) -> Option<Layout> {
        match code {
            1 => Some(Layout::Nsm),
            2 => Some(Layout::Pax),
            _ => None,
        }
    }

    /// Bytes one row costs in a page of this layout (row image, plus a slot for NSM).
    pub const fn bytes_per_row(self, row_width: usize) -> usize {
        match self {
            Layout::Nsm => row_width + NSM_SLOT_LEN,
            Layout::Pax => row_width,
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layout::Nsm => "nsm",
            Layout::Pax => "pax",
        })
    }
}

impl FromStr for Layout {
    type Err = PageError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "nsm" => Ok(Layout::Nsm),
            "pax" => Ok(Layout::Pax),
            _ => Err(PageError::UnknownLayoutName {
                name: s.to_string(),
            }),
        }
    }
}

/// Errors from building or parsing pages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    /// A schema error (unknown column, wrong row width, ...).
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// Page size outside the supported range.
    #[error(
        "page size {page_size} is not supported: use {min} ..= {max} bytes",
        min = MIN_PAGE_SIZE,
        max = MAX_PAGE_SIZE
    )]
    PageSize {
        /// The rejected size.
        page_size: usize,
    },
    /// Not even one row fits.
    #[error(
        "a {layout} page of {page_size} bytes cannot hold one {row_width}-byte row of table \
         '{table}': use a larger page or a narrower schema"
    )]
    RowTooWide {
        /// The table name.
        table: String,
        /// The layout.
        layout: Layout,
        /// The page size.
        page_size: usize,
        /// The row width.
        row_width: usize,
    },
    /// The page already holds its capacity.
    #[error("the page is full ({capacity} rows): finish it and start a new page")]
    PageFull {
        /// The page's capacity in rows.
        capacity: usize,
    },
    /// Unknown layout name.
    #[error("'{name}' is not a page layout: use 'nsm' or 'pax'")]
    UnknownLayoutName {
        /// The rejected name.
        name: String,
    },
    /// The byte string is shorter than a page header.
    #[error("{len} bytes are too short for a page: a page header alone is {min} bytes")]
    TooShort {
        /// Bytes supplied.
        len: usize,
        /// Minimum length.
        min: usize,
    },
    /// Wrong magic: not a csd table page.
    #[error("not a csd table page: magic is {found:02x?}, expected \"CSDP\"")]
    BadMagic {
        /// The four bytes found.
        found: [u8; 4],
    },
    /// A page format version this code does not read.
    #[error(
        "page format version {found} is not supported (this build reads versions 1 ..= {supported})"
    )]
    UnsupportedVersion {
        /// Version found.
        found: u8,
        /// Version supported.
        supported: u8,
    },
    /// Unknown layout code in the header.
    #[error("page header names layout code {code}, which is neither NSM (1) nor PAX (2)")]
    UnknownLayout {
        /// The code found.
        code: u8,
    },
    /// Header length field is not 24.
    #[error("page header length field is {found}, expected {expected}: the page is corrupt")]
    HeaderLen {
        /// Value found.
        found: u16,
        /// Value expected.
        expected: u16,
    },
    /// The header's page size differs from the bytes supplied.
    #[error(
        "page header says the page is {header} bytes but {actual} bytes were supplied: \
         read whole pages of the size the table was written with"
    )]
    PageSizeMismatch {
        /// Size in the header.
        header: u32,
        /// Bytes supplied.
        actual: usize,
    },
    /// CRC-32C mismatch: the page is corrupt or torn.
    #[error(
        "page checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): the page is corrupt"
    )]
    Checksum {
        /// CRC stored in the header.
        stored: u32,
        /// CRC of the bytes.
        computed: u32,
    },
    /// The page belongs to a different schema.
    #[error(
        "page belongs to schema {found:#010x}, not to table '{table}' (schema {expected:#010x}): \
         it is a page of another table or of another version of this table"
    )]
    SchemaMismatch {
        /// The table the reader expected.
        table: String,
        /// The reader's schema fingerprint.
        expected: u32,
        /// The page's schema fingerprint.
        found: u32,
    },
    /// More rows than fit.
    #[error(
        "page header claims {rows} rows but a page of this size holds at most {capacity}: the page is corrupt"
    )]
    RowCount {
        /// Rows claimed.
        rows: u32,
        /// Capacity.
        capacity: usize,
    },
    /// An NSM slot that does not point at its row.
    #[error("NSM slot {slot} holds offset {found}, expected {expected}: the page is corrupt")]
    BadSlot {
        /// Slot index.
        slot: usize,
        /// Offset found.
        found: u16,
        /// Offset expected.
        expected: usize,
    },
    /// A row index past the page's last row.
    #[error("row {row} is out of range: the page has {rows} rows")]
    RowIndex {
        /// The rejected index.
        row: usize,
        /// The number of rows.
        rows: usize,
    },
    /// A page whose format version does not go with the schema it is read with.
    #[error(
        "page has format version {found} but table '{table}' is stored in version {expected} \
         pages: the page belongs to another version of the table"
    )]
    VersionForSchema {
        /// The table.
        table: String,
        /// The version the schema's pages have.
        expected: u8,
        /// The version found.
        found: u8,
    },
    /// A row too large for an empty page.
    #[error(
        "a row of {row_bytes} bytes (slots and values) cannot fit a {page_size}-byte page of \
         table '{table}': values longer than a page are not supported; use a larger page"
    )]
    RowTooLarge {
        /// The table.
        table: String,
        /// The row's bytes in the page.
        row_bytes: usize,
        /// The page size.
        page_size: usize,
    },
    /// A variable-length value whose offset and length leave the page or its heap.
    #[error(
        "row {row} of column {column} points at bytes {start}..{end} outside the page's heap: \
         the page is corrupt"
    )]
    BadValueSlot {
        /// The row.
        row: usize,
        /// The column index.
        column: usize,
        /// The start offset.
        start: usize,
        /// The end offset.
        end: usize,
    },
    /// A 4-byte decode asked of an 8-byte (or CHAR) column.
    #[error(
        "column '{column}' is {ty}: it cannot be decoded as 32-bit integers (use decode_i64_into)"
    )]
    NotInt32 {
        /// The column name.
        column: String,
        /// Its type.
        ty: crate::schema::ColumnType,
    },
}

/// Checks a page size against [`MIN_PAGE_SIZE`] ..= [`MAX_PAGE_SIZE`].
pub fn check_page_size(page_size: usize) -> Result<(), PageError> {
    if (MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&page_size) {
        Ok(())
    } else {
        Err(PageError::PageSize { page_size })
    }
}

/// Rows of `row_width` bytes that fit in a `page_size`-byte page of `layout`
/// (0 if none fits or the page size is outside the supported range).
///
/// NSM: `floor((P - 24) / (W + 2))`; PAX: `floor((P - 24) / W)`.
pub const fn rows_per_page(layout: Layout, row_width: usize, page_size: usize) -> usize {
    if page_size < MIN_PAGE_SIZE || page_size > MAX_PAGE_SIZE || row_width == 0 {
        return 0;
    }
    (page_size - HEADER_LEN) / layout.bytes_per_row(row_width)
}

/// Bytes `n` rows of an extended schema take in a page of `layout`, their heap aside
/// (see the module docs: fixed records for NSM; minipages and validity bitmaps for PAX).
pub fn extended_fixed_bytes(schema: &crate::Schema, layout: Layout, n: usize) -> usize {
    match layout {
        Layout::Nsm => n * schema.row_width(),
        Layout::Pax => {
            let (slots, nullable) = pax_row_parts(schema);
            n * slots + nullable * n.div_ceil(8)
        }
    }
}

/// What a row of an extended schema takes in a PAX page besides its heap: the bytes of
/// its column slots, and the nullable columns (one validity bit each).
fn pax_row_parts(schema: &crate::Schema) -> (usize, usize) {
    let slots = schema.row_width() - schema.null_bytes();
    let nullable = schema.columns().iter().filter(|c| c.nullable).count();
    (slots, nullable)
}

/// Capacity of a page for `schema` (for an extended schema: rows whose
/// variable-length values are all empty), or [`PageError::RowTooWide`] /
/// [`PageError::PageSize`].
pub fn capacity_for(
    schema: &crate::Schema,
    layout: Layout,
    page_size: usize,
) -> Result<usize, PageError> {
    check_page_size(page_size)?;
    let rows = if schema.is_extended() {
        let room = page_size - HEADER_LEN;
        // The most rows whose fixed bytes fit: an upper bound, then down to what fits.
        // For PAX, n rows take `n * slots + k * ceil(n / 8)` bytes (k nullable columns),
        // at least `n * (8 * slots + k) / 8`, so `8 * room / (8 * slots + k)` bounds n
        // within a row or two of the answer (every page parse asks: a bound without the
        // bitmaps walked down one row at a time, recounting the nullable columns).
        let mut n = match layout {
            Layout::Nsm => room / schema.row_width(),
            Layout::Pax => {
                let (slots, nullable) = pax_row_parts(schema);
                (8 * room) / (8 * slots + nullable)
            }
        };
        while n > 0 && extended_fixed_bytes(schema, layout, n) > room {
            n -= 1;
        }
        n
    } else {
        rows_per_page(layout, schema.row_width(), page_size)
    };
    match rows {
        0 => Err(PageError::RowTooWide {
            table: schema.name().to_string(),
            layout,
            page_size,
            row_width: schema.row_width(),
        }),
        n => Ok(n),
    }
}

/// The decoded fixed header of a page (see the module docs for the byte format).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageHeader {
    /// The page layout.
    pub layout: Layout,
    /// Format version.
    pub version: u8,
    /// Page size in bytes.
    pub page_size: u32,
    /// Fingerprint of the schema the page was written with.
    pub schema_fingerprint: u32,
    /// Number of rows.
    pub row_count: u32,
    /// Stored CRC-32C.
    pub checksum: u32,
}

impl PageHeader {
    /// Parses and sanity-checks the header of `page` without a schema and without
    /// verifying the checksum: magic, version, layout, header length, and that the
    /// header's page size equals `page.len()` and is supported. Useful to inspect an
    /// unknown page.
    pub fn read(page: &[u8]) -> Result<PageHeader, PageError> {
        if page.len() < HEADER_LEN {
            return Err(PageError::TooShort {
                len: page.len(),
                min: HEADER_LEN,
            });
        }
        let magic = [page[0], page[1], page[2], page[3]];
        if magic != PAGE_MAGIC {
            return Err(PageError::BadMagic { found: magic });
        }
        let version = page[OFF_VERSION];
        if version != PAGE_VERSION && version != PAGE_VERSION_EXTENDED {
            return Err(PageError::UnsupportedVersion {
                found: version,
                supported: PAGE_VERSION_EXTENDED,
            });
        }
        let code = page[OFF_LAYOUT];
        let layout = Layout::from_code(code).ok_or(PageError::UnknownLayout { code })?;
        let header_len = read_u16(page, OFF_HEADER_LEN);
        if usize::from(header_len) != HEADER_LEN {
            return Err(PageError::HeaderLen {
                found: header_len,
                expected: HEADER_LEN as u16,
            });
        }
        let page_size = read_u32(page, OFF_PAGE_SIZE);
        if page_size as usize != page.len() {
            return Err(PageError::PageSizeMismatch {
                header: page_size,
                actual: page.len(),
            });
        }
        check_page_size(page.len())?;
        Ok(PageHeader {
            layout,
            version,
            page_size,
            schema_fingerprint: read_u32(page, OFF_SCHEMA),
            row_count: read_u32(page, OFF_ROWS),
            checksum: read_u32(page, OFF_CRC),
        })
    }

    /// Writes this header into the first [`HEADER_LEN`] bytes of `page` (checksum
    /// included as stored in `self`).
    fn write(&self, page: &mut [u8]) {
        page[0..4].copy_from_slice(&PAGE_MAGIC);
        page[OFF_LAYOUT] = self.layout.code();
        page[OFF_VERSION] = self.version;
        page[OFF_HEADER_LEN..OFF_HEADER_LEN + 2]
            .copy_from_slice(&(HEADER_LEN as u16).to_le_bytes());
        page[OFF_PAGE_SIZE..OFF_PAGE_SIZE + 4].copy_from_slice(&self.page_size.to_le_bytes());
        page[OFF_SCHEMA..OFF_SCHEMA + 4].copy_from_slice(&self.schema_fingerprint.to_le_bytes());
        page[OFF_ROWS..OFF_ROWS + 4].copy_from_slice(&self.row_count.to_le_bytes());
        page[OFF_CRC..OFF_CRC + 4].copy_from_slice(&self.checksum.to_le_bytes());
    }
}

/// CRC-32C of a page with its checksum field taken as zero.
pub fn page_checksum(page: &[u8]) -> u32 {
    let head = page.get(..OFF_CRC).unwrap_or(page);
    let crc = crc32c::crc32c(head);
    let crc = crc32c::crc32c_append(crc, &[0u8; 4]);
    crc32c::crc32c_append(crc, page.get(HEADER_LEN..).unwrap_or(&[]))
}

/// Byte offset of the first value of column `col` (row-image offset `col_offset`).
const fn column_start(layout: Layout, capacity: usize, col_offset: usize) -> usize {
    match layout {
        Layout::Nsm => HEADER_LEN + col_offset,
        Layout::Pax => HEADER_LEN + capacity * col_offset,
    }
}

/// Distance in bytes between consecutive values of a column.
const fn column_stride(layout: Layout, row_width: usize, col_width: usize) -> usize {
    match layout {
        Layout::Nsm => row_width,
        Layout::Pax => col_width,
    }
}

/// Offset of NSM slot `i` in a page of `page_size` bytes.
const fn slot_offset(page_size: usize, i: usize) -> usize {
    page_size - NSM_SLOT_LEN * (i + 1)
}

fn read_u16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

fn read_u32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_extended;
