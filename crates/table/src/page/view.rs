//! [`PageView`]: a validated, zero-copy view of a page; [`ColumnView`]: one column of it
//! as a strided slice of the page bytes (contiguous for PAX), with its NULLs
//! ([`Validity`]) and, for VARCHAR / VARBINARY, the page's heap.

use super::{
    HEADER_LEN, Layout, PAGE_VERSION, PAGE_VERSION_EXTENDED, PageError, PageHeader, capacity_for,
    column_start, column_stride, extended_fixed_bytes, page_checksum, read_u16, slot_offset,
};
use crate::schema::{ColumnType, Schema, Value, decode_numeric, value_from_bytes, var_slot};

/// A parsed page borrowed from its bytes. Construction validates everything that the
/// accessors rely on, so accessors never panic and never copy unless asked to.
#[derive(Debug, Clone, Copy)]
pub struct PageView<'a> {
    page: &'a [u8],
    schema: &'a Schema,
    header: PageHeader,
    capacity: usize,
    rows: usize,
}

impl<'a> PageView<'a> {
    /// Parses `page` (one whole page, `P` bytes) as a page of `schema`, verifying the
    /// header, the CRC-32C, the schema fingerprint, the row count and (NSM) the slots.
    pub fn parse(page: &'a [u8], schema: &'a Schema) -> Result<Self, PageError> {
        Self::parse_inner(page, schema, true)
    }

    /// Like [`PageView::parse`] but skips the CRC (for media that already guarantee
    /// integrity, e.g. behind an ECC-checked read). All structural checks remain, so a
    /// corrupt page still cannot cause a panic or an out-of-page read; it can only yield
    /// wrong values.
    pub fn parse_unverified(page: &'a [u8], schema: &'a Schema) -> Result<Self, PageError> {
        Self::parse_inner(page, schema, false)
    }

    fn parse_inner(page: &'a [u8], schema: &'a Schema, verify: bool) -> Result<Self, PageError> {
        let header = PageHeader::read(page)?;
        if verify {
            let computed = page_checksum(page);
            if computed != header.checksum {
                return Err(PageError::Checksum {
                    stored: header.checksum,
                    computed,
                });
            }
        }
        if header.schema_fingerprint != schema.fingerprint() {
            return Err(PageError::SchemaMismatch {
                table: schema.name().to_string(),
                expected: schema.fingerprint(),
                found: header.schema_fingerprint,
            });
        }
        let capacity = capacity_for(schema, header.layout, page.len())?;
        if header.row_count as usize > capacity {
            return Err(PageError::RowCount {
                rows: header.row_count,
                capacity,
            });
        }
        let rows = header.row_count as usize;
        let expected = if schema.is_extended() {
            PAGE_VERSION_EXTENDED
        } else {
            PAGE_VERSION
        };
        if header.version != expected {
            return Err(PageError::VersionForSchema {
                table: schema.name().to_string(),
                expected,
                found: header.version,
            });
        }
        let view = PageView {
            page,
            schema,
            header,
            capacity,
            rows,
        };
        if schema.is_extended() {
            view.check_var_slots()?;
            return Ok(view);
        }
        if header.layout == Layout::Nsm {
            for i in 0..rows {
                let found = read_u16(page, slot_offset(page.len(), i));
                let expected = HEADER_LEN + i * schema.row_width();
                if usize::from(found) != expected {
                    return Err(PageError::BadSlot {
                        slot: i,
                        found,
                        expected,
                    });
                }
            }
        }
        Ok(PageView {
            page,
            schema,
            header,
            capacity,
            rows,
        })
    }

    /// Version-2 pages: every variable-length value lies in the page, past the fixed
    /// part (so a damaged slot is an error, never a read of the header or the slots).
    fn check_var_slots(&self) -> Result<(), PageError> {
        let fixed_end = HEADER_LEN + extended_fixed_bytes(self.schema, self.layout(), self.rows);
        for &c in self.schema.variable_columns() {
            let col = self.column(c)?;
            for i in 0..self.rows {
                let Some(slot) = col.raw(i) else { continue };
                let (start, len) = var_slot(slot, 0);
                if len == 0 {
                    continue;
                }
                let end = start + len;
                if start < fixed_end || end > self.page.len() {
                    return Err(PageError::BadValueSlot {
                        row: i,
                        column: c,
                        start,
                        end,
                    });
                }
            }
        }
        Ok(())
    }

    /// The page's header.
    pub fn header(&self) -> &PageHeader {
        &self.header
    }

    /// The page layout.
    pub fn layout(&self) -> Layout {
        self.header.layout
    }

    /// Number of rows on the page.
    pub fn row_count(&self) -> usize {
        self.rows
    }

    /// Maximum rows a page of this size, layout and schema holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The schema the page was checked against.
    pub fn schema(&self) -> &'a Schema {
        self.schema
    }

    /// The whole page.
    pub fn bytes(&self) -> &'a [u8] {
        self.page
    }

    /// A view of column `index`.
    // Inlined: returned through memory, the view was reloaded with wider loads than it
    // was stored with (a store-forwarding stall on every column a program reads).
    #[inline]
    pub fn column(&self, index: usize) -> Result<ColumnView<'a>, PageError> {
        let col = self.schema.column(index)?;
        let off = self.schema.offsets()[index];
        let width = col.ty.width();
        let layout = self.header.layout;
        let stride = column_stride(layout, self.schema.row_width(), width);
        let extended = self.schema.is_extended();
        let start = if extended && layout == Layout::Pax {
            HEADER_LEN + self.rows * (off - self.schema.null_bytes())
        } else {
            column_start(layout, self.capacity, off)
        };
        let len = if self.rows == 0 {
            0
        } else {
            (self.rows - 1) * stride + width
        };
        // In range by construction (capacity math); `get` keeps it panic-free anyway.
        let data = self.page.get(start..start + len).unwrap_or(&[]);
        let rows = if data.len() == len { self.rows } else { 0 };
        let validity = if extended && col.nullable {
            self.validity(index)
        } else {
            Validity::AllValid
        };
        Ok(ColumnView {
            data,
            stride,
            width,
            rows,
            ty: col.ty,
            index,
            schema: self.schema,
            validity,
            page: self.page,
        })
    }

    /// Where the NULL flags of nullable column `index` of a version-2 page lie.
    fn validity(&self, index: usize) -> Validity<'a> {
        let n = self.rows;
        match self.header.layout {
            Layout::Nsm => {
                let w = self.schema.row_width();
                let data = self.page.get(HEADER_LEN..HEADER_LEN + n * w).unwrap_or(&[]);
                Validity::Rows {
                    data,
                    stride: w,
                    byte: index / 8,
                    mask: 1 << (index % 8),
                }
            }
            Layout::Pax => {
                let slots = self.schema.row_width() - self.schema.null_bytes();
                let k = self.schema.columns()[..index]
                    .iter()
                    .filter(|c| c.nullable)
                    .count();
                let start = HEADER_LEN + n * slots + k * n.div_ceil(8);
                Validity::Bitmap(self.page.get(start..start + n.div_ceil(8)).unwrap_or(&[]))
            }
        }
    }

    /// PAX only: the bytes column `index`'s minipage occupies on a full page of this
    /// table (the same range on every page of the table's schema, layout and page size:
    /// minipages start at fixed offsets for the page's capacity); `None` for NSM.
    /// Version-2 pages (whose minipages move with the row count) give `None` as well.
    pub fn column_extent(&self, index: usize) -> Option<std::ops::Range<usize>> {
        if self.header.layout != Layout::Pax || self.schema.is_extended() {
            return None;
        }
        let width = self.schema.column(index).ok()?.ty.width();
        let start = column_start(Layout::Pax, self.capacity, self.schema.offsets()[index]);
        Some(start..(start + self.capacity * width).min(self.page.len()))
    }

    /// The `piece`-byte pieces of pages like this one that a reader of `columns` looks
    /// at, as a bit set (bit k: the page's bytes `k * piece .. (k + 1) * piece`): those
    /// holding the page header and the minipages of the columns. Only PAX pages of
    /// fixed-width schemas place their minipages at the same offsets on every page of a
    /// table (by capacity, not row count), so only for them; `None` otherwise (NSM rows
    /// spread over the page, extended pages place minipages by row count), or when a
    /// piece past the 64th would be named, or for a zero `piece`. A reader that checks
    /// only these pieces of each page (an end-to-end check by sector) must read no other
    /// byte: a scan of TPC-H Q6 or Q1 reads no byte of lineitem's three text columns,
    /// half of each page.
    pub fn pieces_read(&self, columns: &[usize], piece: usize) -> Option<u64> {
        if piece == 0 {
            return None;
        }
        let mut mask = 0u64;
        let mut add = |r: std::ops::Range<usize>| -> Option<()> {
            if r.is_empty() {
                return Some(());
            }
            let (a, b) = (r.start / piece, (r.end - 1) / piece);
            if b >= 64 {
                return None;
            }
            for k in a..=b {
                mask |= 1 << k;
            }
            Some(())
        };
        add(0..HEADER_LEN)?;
        for &c in columns {
            add(self.column_extent(c)?)?;
        }
        Some(mask)
    }

    /// A view of the column called `name`.
    pub fn column_by_name(&self, name: &str) -> Result<ColumnView<'a>, PageError> {
        self.column(self.schema.column_index(name)?)
    }

    /// NSM only: row `i`'s row image, borrowed from the page (`None` for PAX or an
    /// out-of-range row).
    /// Version-2 pages give `None` (their rows' values lie in the heap: use
    /// [`PageView::copy_row`]).
    pub fn row_bytes(&self, i: usize) -> Option<&'a [u8]> {
        if self.header.layout != Layout::Nsm || self.schema.is_extended() || i >= self.rows {
            return None;
        }
        let w = self.schema.row_width();
        let start = HEADER_LEN + i * w;
        self.page.get(start..start + w)
    }

    /// Copies row `i`'s row image into `out` (resized to the row width); works for both
    /// layouts (PAX gathers the row from the minipages).
    pub fn copy_row(&self, i: usize, out: &mut Vec<u8>) -> Result<(), PageError> {
        if i >= self.rows {
            return Err(PageError::RowIndex {
                row: i,
                rows: self.rows,
            });
        }
        out.clear();
        out.resize(self.schema.row_width(), 0);
        if self.schema.is_extended() {
            for (c, &off) in self.schema.offsets().iter().enumerate() {
                let col = self.column(c)?;
                match col.bytes(i) {
                    None => out[c / 8] |= 1 << (c % 8),
                    Some(v) if col.ty.is_variable() => {
                        let start = out.len();
                        out.extend_from_slice(v);
                        // A row fits a page, so both fit a u16.
                        out[off..off + 2].copy_from_slice(&(start as u16).to_le_bytes());
                        out[off + 2..off + 4].copy_from_slice(&(v.len() as u16).to_le_bytes());
                    }
                    Some(v) => out[off..off + v.len()].copy_from_slice(v),
                }
            }
            return Ok(());
        }
        if let Some(row) = self.row_bytes(i) {
            out.copy_from_slice(row);
            return Ok(());
        }
        for (c, &off) in self.schema.offsets().iter().enumerate() {
            let col = self.column(c)?;
            if let Some(v) = col.raw(i) {
                out[off..off + v.len()].copy_from_slice(v);
            }
        }
        Ok(())
    }

    /// Row `i` as typed values (convenience; allocates).
    pub fn row_values(&self, i: usize) -> Result<Vec<Value>, PageError> {
        let mut row = Vec::new();
        self.copy_row(i, &mut row)?;
        Ok(self.schema.decode_row(&row)?)
    }
}

/// One column of a page: `len()` values of `width()` bytes, `stride()` bytes apart,
/// borrowed from the page. For PAX the stride equals the width and the values are one
/// contiguous slice (the minipage); for NSM the stride is the row width.
#[derive(Debug, Clone, Copy)]
pub struct ColumnView<'a> {
    data: &'a [u8],
    stride: usize,
    width: usize,
    rows: usize,
    ty: ColumnType,
    index: usize,
    schema: &'a Schema,
    validity: Validity<'a>,
    page: &'a [u8],
}

/// Where a column's NULL flags lie on a page (a set flag is a NULL).
#[derive(Debug, Clone, Copy)]
pub enum Validity<'a> {
    /// No value is NULL (a `NOT NULL` column, or a version-1 page).
    AllValid,
    /// PAX version 2: one bit per row, bit `i % 8` of byte `i / 8`.
    Bitmap(&'a [u8]),
    /// NSM version 2: in each row's null bitmap.
    Rows {
        /// The rows' fixed records, from the first row's start.
        data: &'a [u8],
        /// Bytes from one record to the next.
        stride: usize,
        /// Byte of the flag within a record.
        byte: usize,
        /// Bit of the flag within that byte.
        mask: u8,
    },
}

impl Validity<'_> {
    /// True if row `i` is NULL (rows out of range read as not NULL).
    #[inline]
    pub fn is_null(&self, i: usize) -> bool {
        match *self {
            Validity::AllValid => false,
            Validity::Bitmap(b) => b.get(i / 8).is_some_and(|x| x & (1 << (i % 8)) != 0),
            Validity::Rows {
                data,
                stride,
                byte,
                mask,
            } => data.get(i * stride + byte).is_some_and(|x| x & mask != 0),
        }
    }
}

impl<'a> ColumnView<'a> {
    /// Number of values (the page's row count).
    pub fn len(&self) -> usize {
        self.rows
    }

    /// True if the page has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// The column's type.
    pub fn column_type(&self) -> ColumnType {
        self.ty
    }

    /// The column's index in the schema.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Bytes per value.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Bytes from one value to the next.
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// The values as one contiguous slice of `len() * width()` bytes, if they are
    /// contiguous (always for PAX; for NSM only with a single column or at most one row).
    pub fn contiguous(&self) -> Option<&'a [u8]> {
        (self.stride == self.width || self.rows <= 1).then_some(self.data)
    }

    /// Where this column's NULL flags lie.
    pub fn validity(&self) -> Validity<'a> {
        self.validity
    }

    /// True if the column may hold NULLs on this page (it is nullable).
    pub fn may_have_nulls(&self) -> bool {
        !matches!(self.validity, Validity::AllValid)
    }

    /// True if value `i` is NULL.
    #[inline]
    pub fn is_null(&self, i: usize) -> bool {
        self.validity.is_null(i)
    }

    /// NULLs among the column's values on this page.
    pub fn null_count(&self) -> usize {
        if self.may_have_nulls() {
            (0..self.rows).filter(|&i| self.is_null(i)).count()
        } else {
            0
        }
    }

    /// Value `i`'s bytes: a variable-length value's own bytes (from the heap), any
    /// other value's stored bytes; `None` if the value is NULL or out of range.
    #[inline]
    pub fn bytes(&self, i: usize) -> Option<&'a [u8]> {
        if self.is_null(i) {
            return None;
        }
        let raw = self.raw(i)?;
        if self.ty.is_variable() {
            let (start, len) = var_slot(raw, 0);
            // Checked when the page was parsed; `get` keeps it panic-free anyway.
            Some(self.page.get(start..start + len).unwrap_or(&[]))
        } else {
            Some(raw)
        }
    }

    /// The stored bytes of value `i`'s slot (`width()` bytes; `CHAR` keeps its padding;
    /// a NULL's slot is zero; a variable-length value's slot is its offset and length:
    /// see [`ColumnView::bytes`]).
    #[inline]
    pub fn raw(&self, i: usize) -> Option<&'a [u8]> {
        if i >= self.rows {
            return None;
        }
        let start = i * self.stride;
        self.data.get(start..start + self.width)
    }

    /// Value `i` widened to `i64`; `None` if out of range or the column is `CHAR`.
    #[inline]
    pub fn get_i64(&self, i: usize) -> Option<i64> {
        decode_numeric(self.ty, self.raw(i)?)
    }

    /// Value `i` as a typed value (allocates for strings); [`Value::Null`] for a NULL.
    pub fn value(&self, i: usize) -> Option<Value> {
        if i >= self.rows {
            return None;
        }
        Some(match self.bytes(i) {
            None => Value::Null,
            Some(b) => value_from_bytes(self.ty, b),
        })
    }

    /// Iterates over the stored bytes of every value, in row order.
    pub fn iter_raw(&self) -> impl ExactSizeIterator<Item = &'a [u8]> + 'a {
        let (data, stride, width) = (self.data, self.stride, self.width);
        (0..self.rows).map(move |i| &data[i * stride..i * stride + width])
    }

    fn not_numeric(&self) -> PageError {
        let name = self
            .schema
            .column(self.index)
            .map(|c| c.name.clone())
            .unwrap_or_default();
        crate::schema::SchemaError::NotNumeric {
            column: name,
            ty: self.ty,
        }
        .into()
    }

    /// Decodes every value into `out` (cleared first) as `i64`, for vectorized
    /// evaluation with a reusable buffer. Errors for `CHAR` columns.
    pub fn decode_i64_into(&self, out: &mut Vec<i64>) -> Result<(), PageError> {
        out.clear();
        out.reserve(self.rows);
        match self.ty {
            ColumnType::Int32 | ColumnType::Date => {
                if self.stride == 4 {
                    // Fixed-size chunks: one load a value (a run-time chunk length
                    // took a bounds check and a load per byte).
                    let (values, _) = self.data.as_chunks::<4>();
                    out.extend(values.iter().map(|&c| i64::from(i32::from_le_bytes(c))));
                } else {
                    out.extend(
                        self.iter_raw()
                            .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
                    );
                }
            }
            ColumnType::Int64 | ColumnType::Decimal { .. } | ColumnType::Timestamp => {
                let conv =
                    |c: &[u8]| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
                if self.stride == 8 {
                    let (values, _) = self.data.as_chunks::<8>();
                    out.extend(values.iter().map(|&c| i64::from_le_bytes(c)));
                } else {
                    out.extend(self.iter_raw().map(conv));
                }
            }
            ColumnType::Int8 | ColumnType::Int16 => {
                out.extend(
                    self.iter_raw()
                        .map(|c| decode_numeric(self.ty, c).unwrap_or(0)),
                );
            }
            _ => return Err(self.not_numeric()),
        }
        Ok(())
    }

    /// Decodes every value of an `INT32` or `DATE` column into `out` (cleared first)
    /// as `i32`: half the memory traffic of [`ColumnView::decode_i64_into`].
    pub fn decode_i32_into(&self, out: &mut Vec<i32>) -> Result<(), PageError> {
        if !matches!(self.ty, ColumnType::Int32 | ColumnType::Date) {
            let column = self
                .schema
                .column(self.index)
                .map(|c| c.name.clone())
                .unwrap_or_default();
            return Err(PageError::NotInt32 {
                column,
                ty: self.ty,
            });
        }
        out.clear();
        out.reserve(self.rows);
        let conv = |c: &[u8]| i32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        if self.stride == 4 {
            let (values, _) = self.data.as_chunks::<4>();
            out.extend(values.iter().map(|&c| i32::from_le_bytes(c)));
        } else {
            out.extend(self.iter_raw().map(conv));
        }
        Ok(())
    }

    /// Copies every value's stored bytes, back to back, into `out` (cleared first):
    /// `len() * width()` bytes. Works for every type; for `CHAR(n)` value `i` is
    /// `out[i*n .. (i+1)*n]`. For PAX this is a single `memcpy` of the minipage.
    pub fn decode_bytes_into(&self, out: &mut Vec<u8>) {
        out.clear();
        if let Some(slice) = self.contiguous() {
            out.extend_from_slice(slice);
        } else {
            out.reserve(self.rows * self.width);
            for v in self.iter_raw() {
                out.extend_from_slice(v);
            }
        }
    }
}
