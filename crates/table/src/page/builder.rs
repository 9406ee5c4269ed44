//! [`PageBuilder`]: appends row images to a page until it is full, then serializes it to
//! exactly `P` bytes; [`Paginator`]: cuts a [`RowSource`] into pages.

use super::{
    HEADER_LEN, Layout, PAGE_VERSION, PageError, PageHeader, capacity_for, column_start,
    page_checksum, slot_offset,
};
use crate::datagen::RowSource;
use crate::schema::{Schema, Value};

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

    /// True if the page holds `capacity()` rows.
    pub fn is_full(&self) -> bool {
        self.rows == self.capacity
    }

    /// Appends one row image (`schema().row_width()` bytes). Errors, leaving the page
    /// unchanged, if the row has the wrong width or the page is full.
    pub fn push_row(&mut self, row: &[u8]) -> Result<(), PageError> {
        self.schema.check_row(row)?;
        if self.is_full() {
            return Err(PageError::PageFull {
                capacity: self.capacity,
            });
        }
        self.write_row(row);
        Ok(())
    }

    /// Encodes typed values and appends them as one row (see [`Schema::encode_row`]).
    pub fn push_values(&mut self, values: &[Value]) -> Result<(), PageError> {
        if self.is_full() {
            return Err(PageError::PageFull {
                capacity: self.capacity,
            });
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        let result = self.schema.encode_row(values, &mut scratch);
        if result.is_ok() {
            self.write_row(&scratch);
        }
        self.scratch = scratch;
        Ok(result?)
    }

    /// Writes a row known to be `row_width` bytes into a page known not to be full.
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

    /// Writes the header and checksum and returns the finished page: exactly
    /// `page_size()` bytes. The builder keeps its rows; call [`PageBuilder::reset`] to
    /// start the next page.
    pub fn finish(&mut self) -> &[u8] {
        let mut header = PageHeader {
            layout: self.layout,
            version: PAGE_VERSION,
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
    }
}

/// Cuts the rows of a [`RowSource`] into finished pages, reusing one page buffer and
/// one row buffer: a streaming loader that never holds more than one page.
pub struct Paginator<S> {
    source: S,
    builder: PageBuilder,
    row: Vec<u8>,
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
            if !self.source.next_row(&mut self.row) {
                self.done = true;
                break;
            }
            if let Err(e) = self.builder.push_row(&self.row) {
                // A source whose rows do not match its own schema: stop rather than
                // write a wrong page, and keep the error for `error()`.
                self.error = Some(e);
                self.done = true;
                break;
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
