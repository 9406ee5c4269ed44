//! Streaming data generators for the tables of smart-ssd §4.1.1: TPC-H (via the
//! `tpchgen` crate, with the paper's fixed-width transformations) and the
//! Synthetic4/16/64 tables.
//!
//! Generators produce row images ([`crate::schema`]) one at a time through
//! [`RowSource::next_row`], reusing the caller's buffer, and never materialize a table.
//! Each generator is also an `Iterator<Item = Vec<u8>>` for convenience (one allocation
//! per row). Feed either into [`crate::page::Paginator`] to get pages.

pub mod synthetic;
pub mod tpch;

pub use synthetic::{SyntheticGenerator, SyntheticSpec};
pub use tpch::{TpchGenerator, TpchTable};

use crate::schema::Schema;

/// Errors from configuring a generator.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GenError {
    /// A TPC-H scale factor that is not a positive finite number (or absurdly large).
    #[error(
        "scale factor {0} is not usable: give a positive number such as 0.01, 0.1, 1 or 100 (at most 100000)"
    )]
    ScaleFactor(f64),
    /// A TPC-H partition that does not exist.
    #[error("partition {part} of {count} does not exist: partitions are numbered 1..={count}")]
    Partition {
        /// Requested partition (1-based).
        part: i32,
        /// Number of partitions.
        count: i32,
    },
    /// A synthetic table without columns or with too many.
    #[error("a synthetic table needs 1 ..= {max} INT32 columns, not {columns}", max = synthetic::MAX_COLUMNS)]
    SyntheticColumns {
        /// Requested column count.
        columns: usize,
    },
    /// A synthetic table too large for `c1` to be a permutation of `0..rows` in `i32`.
    #[error("a synthetic table holds at most {max} rows (c1 is a permutation of 0..rows in INT32), not {rows}", max = synthetic::MAX_ROWS)]
    SyntheticRows {
        /// Requested rows.
        rows: u64,
    },
    /// A row range outside the table.
    #[error("row range {start}..{end} is not within the table's {rows} rows")]
    RowRange {
        /// Range start.
        start: u64,
        /// Range end.
        end: u64,
        /// Table rows.
        rows: u64,
    },
    /// A table name that is not one of the generated TPC-H tables.
    #[error(
        "'{name}' is not a supported TPC-H table: use lineitem, orders, part, customer, supplier, partsupp, nation or region"
    )]
    UnknownTable {
        /// The rejected name.
        name: String,
    },
    /// A selectivity outside `0..=1`.
    #[error("selectivity {0} is not a fraction: give a number in 0..=1 (e.g. 0.001 for 0.1%)")]
    Selectivity(f64),
}

/// A stream of row images of one schema.
pub trait RowSource {
    /// The schema of the rows.
    fn schema(&self) -> &Schema;

    /// Writes the next row image into `row` (resized to the schema's row width) and
    /// returns true, or returns false when there are no more rows.
    fn next_row(&mut self, row: &mut Vec<u8>) -> bool;

    /// Rows still to come, if known exactly.
    fn remaining_rows(&self) -> Option<u64> {
        None
    }
}

impl<S: RowSource + ?Sized> RowSource for &mut S {
    fn schema(&self) -> &Schema {
        (**self).schema()
    }
    fn next_row(&mut self, row: &mut Vec<u8>) -> bool {
        (**self).next_row(row)
    }
    fn remaining_rows(&self) -> Option<u64> {
        (**self).remaining_rows()
    }
}

impl<S: RowSource + ?Sized> RowSource for Box<S> {
    fn schema(&self) -> &Schema {
        (**self).schema()
    }
    fn next_row(&mut self, row: &mut Vec<u8>) -> bool {
        (**self).next_row(row)
    }
    fn remaining_rows(&self) -> Option<u64> {
        (**self).remaining_rows()
    }
}

/// SplitMix64 finalizer: a fixed, dependency-free 64-bit mixer. Generated data must not
/// change when a dependency's RNG changes, so the generators use this instead of `rand`.
#[inline]
pub(crate) const fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
