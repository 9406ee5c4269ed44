//! [`PageBuilder`]: appends row images to a page until it is full, then serializes it to
//! exactly `P` bytes; [`Paginator`]: cuts a [`RowSource`] into pages.
//!
//! A fixed schema's rows are written in place as they arrive. An extended schema's rows
//! (format version 2) are kept as row images until [`PageBuilder::finish`] lays the page
//! out, because PAX minipages are sized for the page's own row count and a row's fit
//! depends on its variable-length values.

use super::{
    HEADER_LEN, Layout, PAGE_VERSION, PAGE_VERSION_EXTENDED, PageError, PageHeader, capacity_for,
    column_start, extended_fixed_bytes, page_checksum, slot_offset,
};
use crate::datagen::RowSource;
use crate::schema::{Schema, Value, row_is_null, var_slot};

/// Builds one page at a time. Values are written in place into a `P`-byte buffer as
/// rows arrive (row images for NSM, minipage slots for PAX); [`PageBuilder::finish`]
/// only fills in the header and checksum.
#[derive(Debug, Clone)]
pub struct PageBuilder {
    schema: Schema,
    layout: Layout,
    capacity: usize,
    rows: usize,
    buf: Vec<u8>,
    scratch: Vec<u8>,
    /// Extended schemas: the rows' images back to back, and where each starts.
    images: Vec<u8>,
    starts: Vec<usize>,
    /// Extended schemas: heap bytes of the rows kept so far.
    heap: usize,
}

impl PageBuilder {
    /// A builder for pages of `page_size` bytes holding rows of `schema` in `layout`.
    /// Fails if the page size is unsupported or not even one row fits.
    pub fn new(schema: Schema, layout: Layout, page_size: usize) -> Result<Self, PageError> {
        let capacity = capacity_for(&schema, layout, page_size)?;
        Ok(PageBuilder {
            scratch: vec![0; schema.row_width()],
            schema,
            layout,
            capacity,
            rows: 0,
            buf: vec![0; page_size],
            images: Vec::new(),
            starts: Vec::new(),
            heap: 0,
        })
    }

    /// The schema rows must follow.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// The page layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The page size `P` in bytes.
    pub fn page_size(&self) -> usize {
        self.buf.len()
    }

    /// Maximum rows per page.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Rows appended since the last reset.
    pub fn len(&self) -> usize {
        self.rows
    }

    /// True if no row has been appended since the last reset.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// True if the page holds `capacity()` rows (for an extended schema: if not even a
    /// row with empty variable-length values would fit any more).
    pub fn is_full(&self) -> bool {
        if self.schema.is_extended() {
            !self.fits(self.rows + 1, self.heap)
        } else {
            self.rows == self.capacity
        }
    }

    /// Whether `rows` rows with `heap` bytes of variable-length values fit the page.
    fn fits(&self, rows: usize, heap: usize) -> bool {
        rows <= self.capacity
            && HEADER_LEN + extended_fixed_bytes(&self.schema, self.layout, rows) + heap
                <= self.buf.len()
    }

    /// Appends one row image (checked by [`Schema::check_row`]). Errors, leaving the
    /// page unchanged, if the row is malformed or does not fit: [`PageError::PageFull`]
    /// when the page holds rows (start the next page with it),
    /// [`PageError::RowTooLarge`] when it would not fit even an empty page.
    pub fn push_row(&mut self, row: &[u8]) -> Result<(), PageError> {
        self.schema.check_row(row)?;
        if self.schema.is_extended() {
            let heap = row.len() - self.schema.row_width();
            if !self.fits(self.rows + 1, self.heap + heap) {
                if self.rows == 0 {
                    return Err(PageError::RowTooLarge {
                        table: self.schema.name().to_string(),
                        row_bytes: HEADER_LEN
                            + extended_fixed_bytes(&self.schema, self.layout, 1)
                            + heap,
                        page_size: self.buf.len(),
                    });
                }
                return Err(PageError::PageFull {
                    capacity: self.rows,
                });
            }
            self.starts.push(self.images.len());
            self.images.extend_from_slice(row);
            self.heap += heap;
            self.rows += 1;
            return Ok(());
        }
        if self.is_full() {
            return Err(PageError::PageFull {
                capacity: self.capacity,
            });
        }
        self.write_row(row);
        Ok(())
    }

    /// Encodes typed values and appends them as one row (see
    /// [`Schema::encode_row_into`] and [`PageBuilder::push_row`]).
    pub fn push_values(&mut self, values: &[Value]) -> Result<(), PageError> {
        if self.is_full() {
            return Err(PageError::PageFull {
                capacity: self.rows,
            });
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        let result = self.schema.encode_row_into(values, &mut scratch);
        let result = match result {
            Ok(()) => self.push_row(&scratch),
            Err(e) => Err(e.into()),
        };
        self.scratch = scratch;
        result
    }

    /// Writes a row known to be `row_width` bytes into a page known not to be full
    /// (fixed schemas).
    pub(crate) fn write_row(&mut self, row: &[u8]) {
        let i = self.rows;
        let width = self.schema.row_width();
        match self.layout {
            Layout::Nsm => {
                let start = HEADER_LEN + i * width;
                self.buf[start..start + width].copy_from_slice(row);
                let slot = slot_offset(self.buf.len(), i);
                // start < P <= 65536 - 2 for every slotted row, so it fits a u16
                self.buf[slot..slot + 2].copy_from_slice(&(start as u16).to_le_bytes());
            }
            Layout::Pax => {
                for (col, &off) in self.schema.columns().iter().zip(self.schema.offsets()) {
                    let w = col.ty.width();
                    let dst = column_start(Layout::Pax, self.capacity, off) + i * w;
                    self.buf[dst..dst + w].copy_from_slice(&row[off..off + w]);
                }
            }
        }
        self.rows += 1;
    }

    /// Lays out the kept rows of an extended schema (format version 2, see the module
    /// docs of [`crate::page`]) into `buf`, which is zero.
    fn lay_out_extended(&mut self) {
        let schema = &self.schema;
        let n = self.rows;
        let nb = schema.null_bytes();
        let w = schema.row_width();
        let page = &mut self.buf;
        let row = |i: usize| {
            let end = self.starts.get(i + 1).copied().unwrap_or(self.images.len());
            &self.images[self.starts[i]..end]
        };
        match self.layout {
            Layout::Nsm => {
                let mut heap_end = page.len();
                for i in 0..n {
                    let img = row(i);
                    let rec = HEADER_LEN + i * w;
                    page[rec..rec + w].copy_from_slice(&img[..w]);
                    for &c in schema.variable_columns() {
                        if row_is_null(img, c) {
                            continue;
                        }
                        let (o, l) = var_slot(img, schema.offsets()[c]);
                        heap_end -= l;
                        page[heap_end..heap_end + l].copy_from_slice(&img[o..o + l]);
                        write_slot(page, rec + schema.offsets()[c], heap_end, l);
                    }
                }
            }
            Layout::Pax => {
                let mut bitmap = HEADER_LEN + n * (w - nb);
                let mut nulls = Vec::new();
                for (c, col) in schema.columns().iter().enumerate() {
                    if col.nullable {
                        nulls.push((c, bitmap));
                        bitmap += n.div_ceil(8);
                    }
                }
                let mut heap = bitmap;
                for (c, col) in schema.columns().iter().enumerate() {
                    let off = schema.offsets()[c];
                    let width = col.ty.width();
                    let mini = HEADER_LEN + n * (off - nb);
                    let bits = nulls.iter().find(|&&(k, _)| k == c).map(|&(_, at)| at);
                    for i in 0..n {
                        let img = row(i);
                        let dst = mini + i * width;
                        if row_is_null(img, c) {
                            if let Some(at) = bits {
                                page[at + i / 8] |= 1 << (i % 8);
                            }
                            continue;
                        }
                        if col.ty.is_variable() {
                            let (o, l) = var_slot(img, off);
                            page[heap..heap + l].copy_from_slice(&img[o..o + l]);
                            write_slot(page, dst, heap, l);
                            heap += l;
                        } else {
                            page[dst..dst + width].copy_from_slice(&img[off..off + width]);
                        }
                    }
                }
            }
        }
    }

    /// Writes the header and checksum and returns the finished page: exactly
    /// `page_size()` bytes. The builder keeps its rows; call [`PageBuilder::reset`] to
    /// start the next page.
    pub fn finish(&mut self) -> &[u8] {
        let version = if self.schema.is_extended() {
            self.buf.fill(0);
            self.lay_out_extended();
            PAGE_VERSION_EXTENDED
        } else {
            PAGE_VERSION
        };
        let mut header = PageHeader {
            layout: self.layout,
            version,
            page_size: self.buf.len() as u32,
            schema_fingerprint: self.schema.fingerprint(),
            // rows <= capacity <= 65536
            row_count: self.rows as u32,
            checksum: 0,
        };
        header.write(&mut self.buf);
        header.checksum = page_checksum(&self.buf);
        header.write(&mut self.buf);
        &self.buf
    }

    /// Empties the page (all bytes zero, no rows).
    pub fn reset(&mut self) {
        self.buf.fill(0);
        self.rows = 0;
        self.images.clear();
        self.starts.clear();
        self.heap = 0;
    }
}

/// Writes a variable-length slot: `u16` offset and `u16` length (both fit: they are
/// within a page of at most 64 KiB, and a value's offset is past the header).
/// An empty value is written as offset 0 (its place is immaterial).
fn write_slot(page: &mut [u8], at: usize, offset: usize, len: usize) {
    let offset = if len == 0 { 0 } else { offset };
    page[at..at + 2].copy_from_slice(&(offset as u16).to_le_bytes());
    page[at + 2..at + 4].copy_from_slice(&(len as u16).to_le_bytes());
}

/// Cuts the rows of a [`RowSource`] into finished pages, reusing one page buffer and
/// one row buffer: a streaming loader that never holds more than one page.
pub struct Paginator<S> {
    source: S,
    builder: PageBuilder,
    row: Vec<u8>,
    /// `row` holds a row that did not fit the previous page.
    pending: bool,
    done: bool,
    error: Option<PageError>,
    pages: u64,
    rows: u64,
}

impl<S: RowSource> Paginator<S> {
    /// Pages of `page_size` bytes in `layout` for the rows of `source`.
    pub fn new(source: S, layout: Layout, page_size: usize) -> Result<Self, PageError> {
        let builder = PageBuilder::new(source.schema().clone(), layout, page_size)?;
        Ok(Paginator {
            source,
            builder,
            row: Vec::new(),
            pending: false,
            done: false,
            error: None,
            pages: 0,
            rows: 0,
        })
    }

    /// The next page, full except possibly the last; `None` when the source is
    /// exhausted (or, see [`Paginator::error`], produced a malformed row). The slice is
    /// valid until the next call.
    pub fn next_page(&mut self) -> Option<&[u8]> {
        if self.done {
            return None;
        }
        self.builder.reset();
        while !self.builder.is_full() {
            if !self.pending && !self.source.next_row(&mut self.row) {
                self.done = true;
                break;
            }
            self.pending = false;
            match self.builder.push_row(&self.row) {
                Ok(()) => {}
                // A row of an extended schema that does not fit: it opens the next page.
                Err(PageError::PageFull { .. }) if !self.builder.is_empty() => {
                    self.pending = true;
                    break;
                }
                Err(e) => {
                    // A malformed row, or one too large for any page: stop rather than
                    // write a wrong page, and keep the error for `error()`.
                    self.error = Some(e);
                    self.done = true;
                    break;
                }
            }
        }
        if self.builder.is_empty() {
            return None;
        }
        self.pages += 1;
        self.rows += self.builder.len() as u64;
        Some(self.builder.finish())
    }

    /// Why pagination stopped early, if it did: a source that produced a row image of
    /// the wrong width for its own schema (a bug in that source). `None` after a normal
    /// end.
    pub fn error(&self) -> Option<&PageError> {
        self.error.as_ref()
    }

    /// Pages returned so far.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// Rows placed in the pages returned so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The page builder's capacity in rows.
    pub fn capacity(&self) -> usize {
        self.builder.capacity()
    }

    /// The row source.
    pub fn source(&self) -> &S {
        &self.source
    }
}
