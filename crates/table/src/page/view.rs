//! [`PageView`]: a validated, zero-copy view of a page; [`ColumnView`]: one column of it
//! as a strided slice of the page bytes (contiguous for PAX).

use super::{
    HEADER_LEN, Layout, PageError, PageHeader, capacity_for, column_start, column_stride,
    page_checksum, read_u16, slot_offset,
};
use crate::schema::{ColumnType, Schema, Value, decode_numeric, value_from_bytes};

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
        let stride = column_stride(self.header.layout, self.schema.row_width(), width);
        let start = column_start(self.header.layout, self.capacity, off);
        let len = if self.rows == 0 {
            0
        } else {
            (self.rows - 1) * stride + width
        };
        // In range by construction (capacity math); `get` keeps it panic-free anyway.
        let data = self.page.get(start..start + len).unwrap_or(&[]);
        let rows = if data.len() == len { self.rows } else { 0 };
        Ok(ColumnView {
            data,
            stride,
            width,
            rows,
            ty: col.ty,
            index,
            schema: self.schema,
        })
    }

    /// PAX only: the bytes column `index`'s minipage occupies on a full page of this
    /// table (the same range on every page of the table's schema, layout and page size:
    /// minipages start at fixed offsets for the page's capacity); `None` for NSM.
    pub fn column_extent(&self, index: usize) -> Option<std::ops::Range<usize>> {
        if self.header.layout != Layout::Pax {
            return None;
        }
        let width = self.schema.column(index).ok()?.ty.width();
        let start = column_start(Layout::Pax, self.capacity, self.schema.offsets()[index]);
        Some(start..(start + self.capacity * width).min(self.page.len()))
    }

    /// A view of the column called `name`.
    pub fn column_by_name(&self, name: &str) -> Result<ColumnView<'a>, PageError> {
        self.column(self.schema.column_index(name)?)
    }

    /// NSM only: row `i`'s row image, borrowed from the page (`None` for PAX or an
    /// out-of-range row).
    pub fn row_bytes(&self, i: usize) -> Option<&'a [u8]> {
        if self.header.layout != Layout::Nsm || i >= self.rows {
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

    /// The stored bytes of value `i` (`width()` bytes; `CHAR` keeps its padding).
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

    /// Value `i` as a typed value (allocates for `CHAR`).
    pub fn value(&self, i: usize) -> Option<Value> {
        Some(value_from_bytes(self.ty, self.raw(i)?))
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
                    out.extend(
                        self.data
                            .chunks_exact(4)
                            .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
                    );
                } else {
                    out.extend(
                        self.iter_raw()
                            .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
                    );
                }
            }
            ColumnType::Int64 | ColumnType::Decimal { .. } => {
                let conv =
                    |c: &[u8]| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
                if self.stride == 8 {
                    out.extend(self.data.chunks_exact(8).map(conv));
                } else {
                    out.extend(self.iter_raw().map(conv));
                }
            }
            ColumnType::Char(_) => return Err(self.not_numeric()),
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
            out.extend(self.data.chunks_exact(4).map(conv));
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
