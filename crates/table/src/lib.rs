//! Table vocabulary shared by the host and the device: schemas and fixed-width row
//! images, the NSM and PAX page layouts, and the data generators of the smart-ssd paper.
//!
//! This crate realizes smart-ssd-query-processing §4.1.1 ("Workloads") and the page
//! layouts its §4.2 experiments compare:
//!
//! * [`schema`]: column types (`INT32`, `INT64`, `DATE` as days since 1970-01-01,
//!   `DECIMAL` as a scaled `i64`, space-padded `CHAR(n)`; and for users' own tables
//!   `BOOLEAN`, `INT8/16`, IEEE `FLOAT32/64`, `TIMESTAMP` in µs, `DECIMAL(p ≤ 38, s)`,
//!   `VARCHAR` and `VARBINARY`, each nullable), named columns with fixed offsets, and
//!   little-endian row images (with a null bitmap and the strings' bytes for extended
//!   schemas). [`date`] and [`decimal`] convert text
//!   exactly (predicate constants such as `1994-01-01` or `0.05`).
//! * [`page`]: NSM slotted pages and PAX pages of `P` bytes (the flash page size), built
//!   by [`PageBuilder`] and read in place by [`PageView`] / [`ColumnView`], with a
//!   checksummed header that makes corrupt or foreign pages typed errors.
//! * [`datagen`]: streaming generators: TPC-H LINEITEM/ORDERS/PART/CUSTOMER via
//!   `tpchgen` with the paper's transformations (148-byte LINEITEM rows), and
//!   Synthetic4/16/64 with an exactly controllable selectivity on `c1`.
//!
//! Host-side access paths and the device's in-storage operators both read pages through
//! this crate, so a predicate sees the same bytes, and gives the same answer, on either
//! side of the command interface. The crate depends on no device or FTL crate.
//!
//! ```
//! use csd_table::{Layout, PageBuilder, PageView, RowSource};
//! use csd_table::datagen::{SyntheticGenerator, SyntheticSpec};
//!
//! let spec = SyntheticSpec::synthetic4(1000, 42).unwrap();
//! let mut rows = SyntheticGenerator::new(spec).unwrap();
//! let mut page = PageBuilder::new(spec.schema(), Layout::Pax, 8192).unwrap();
//! let mut row = Vec::new();
//! while !page.is_full() && rows.next_row(&mut row) {
//!     page.push_row(&row).unwrap();
//! }
//! let schema = spec.schema();
//! let view = PageView::parse(page.finish(), &schema).unwrap();
//! let c1 = view.column_by_name("c1").unwrap();
//! let mut values = Vec::new();
//! c1.decode_i64_into(&mut values).unwrap();
//! assert_eq!(values.len(), view.row_count());
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod datagen;
pub mod date;
pub mod decimal;
pub mod page;
pub mod schema;

pub use datagen::{GenError, RowSource};
pub use page::{
    ColumnView, Layout, PageBuilder, PageError, PageHeader, PageView, Paginator, Validity,
};
pub use schema::{Column, ColumnType, Schema, SchemaError, Value};
