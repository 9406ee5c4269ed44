//! Partial results: [`RowChunk`] (projected rows, columnar) and the mergeable
//! [`PartialResult`] a device session or a host scan accumulates and hands to the host
//! (smart-ssd-query-processing §3.1: a session's results come back in chunks through
//! GET; csd-sql turns them into Arrow batches and DataFusion's partial-aggregate states).

use csd_table::{ColumnType, ColumnView};

use crate::agg::AggState;
use crate::error::EvalError;
use crate::plan::{Output, Plan};
use crate::types::DataType;

/// No limit on the number of groups (see [`PartialResult::with_group_limit`]).
pub const NO_GROUP_LIMIT: usize = usize::MAX;

/// Projected rows, stored column by column as the evaluator produced them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowChunk {
    types: Vec<DataType>,
    columns: Vec<ChunkColumn>,
    rows: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ChunkColumn {
    /// `INT`, `DECIMAL` or `DATE` values.
    Num(Vec<i64>),
    /// `CHAR(width)` values back to back, padding included.
    Char { width: usize, bytes: Vec<u8> },
    /// A column of a table with NULLs or the newer types, returned as stored.
    Stored(StoredColumn),
}

/// A column returned as stored (a table with a nullable or new-type column): validity,
/// fixed-width values as stored (a NULL's are zero), and variable-length values' bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredColumn {
    ty: ColumnType,
    valid: Vec<bool>,
    /// Fixed-width types: `width` bytes per row.
    fixed: Vec<u8>,
    /// Variable-length types: where each row's bytes start in `heap`.
    starts: Vec<usize>,
    heap: Vec<u8>,
}

impl StoredColumn {
    fn new(ty: ColumnType) -> StoredColumn {
        StoredColumn {
            ty,
            valid: Vec::new(),
            fixed: Vec::new(),
            starts: Vec::new(),
            heap: Vec::new(),
        }
    }

    /// Appends the rows `sel` of `cv`; returns the bytes read from the page and the
    /// variable-length bytes appended.
    pub(crate) fn push_rows(&mut self, cv: &ColumnView<'_>, sel: &[u32]) -> (usize, usize) {
        let nulls = cv.may_have_nulls();
        let mut touched = 0;
        let heap0 = self.heap.len();
        for &i in sel {
            let i = i as usize;
            let null = nulls && cv.is_null(i);
            self.valid.push(!null);
            if self.ty.is_variable() {
                self.starts.push(self.heap.len());
                if let Some(b) = cv.bytes(i) {
                    self.heap.extend_from_slice(b);
                    touched += b.len();
                }
            } else {
                let w = self.ty.width();
                match cv.raw(i) {
                    Some(b) if !null => self.fixed.extend_from_slice(b),
                    _ => self.fixed.resize(self.fixed.len() + w, 0),
                }
                touched += w;
            }
        }
        (touched, self.heap.len() - heap0)
    }

    fn clear(&mut self) {
        self.valid.clear();
        self.fixed.clear();
        self.starts.clear();
        self.heap.clear();
    }

    fn append(&mut self, o: &StoredColumn) {
        let base = self.heap.len();
        self.valid.extend_from_slice(&o.valid);
        self.fixed.extend_from_slice(&o.fixed);
        self.starts.extend(o.starts.iter().map(|s| s + base));
        self.heap.extend_from_slice(&o.heap);
    }
}
impl RowChunk {
    /// An empty chunk for the outputs `exprs` of a plan over `schema`: a table with a
    /// nullable or new-type column returns its columns as stored ([`ColumnData::Stored`]).
    pub fn for_outputs(exprs: &[crate::plan::Expr], schema: &csd_table::Schema) -> RowChunk {
        let types: Vec<DataType> = exprs.iter().map(|e| e.ty).collect();
        let mut chunk = RowChunk::new(&types);
        if schema.is_extended() {
            for (col, e) in chunk.columns.iter_mut().zip(exprs) {
                if let crate::plan::ExprKind::Column { index, .. } = e.kind
                    && let Some(c) = schema.columns().get(index)
                {
                    *col = ChunkColumn::Stored(StoredColumn::new(c.ty));
                }
            }
        }
        chunk
    }

    /// An empty chunk for outputs of these types.
    pub fn new(types: &[DataType]) -> RowChunk {
        RowChunk {
            types: types.to_vec(),
            columns: types
                .iter()
                .map(|t| match *t {
                    DataType::Char(n) => ChunkColumn::Char {
                        width: usize::from(n),
                        bytes: Vec::new(),
                    },
                    _ => ChunkColumn::Num(Vec::new()),
                })
                .collect(),
            rows: 0,
        }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows
    }

    /// True without rows.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// The column types.
    pub fn types(&self) -> &[DataType] {
        &self.types
    }

    /// Bytes the rows take on the wire to the host (fixed-width encoding:
    /// [`DataType::wire_width`] per value).
    pub fn wire_bytes(&self) -> u64 {
        let heaps: usize = self
            .columns
            .iter()
            .map(|c| match c {
                ChunkColumn::Stored(s) => s.heap.len(),
                _ => 0,
            })
            .sum();
        (self.rows * self.row_wire_bytes() + heaps) as u64
    }

    /// Column `c`'s values (`None` out of range).
    pub fn column(&self, c: usize) -> Option<ColumnData<'_>> {
        Some(match self.columns.get(c)? {
            ChunkColumn::Num(v) => ColumnData::Num(v),
            ChunkColumn::Char { width, bytes } => ColumnData::Char {
                width: *width,
                bytes,
            },
            ChunkColumn::Stored(s) => ColumnData::Stored {
                ty: s.ty,
                valid: &s.valid,
                fixed: &s.fixed,
                starts: &s.starts,
                heap: &s.heap,
            },
        })
    }

    pub(crate) fn columns_mut(&mut self) -> &mut [ChunkColumn] {
        &mut self.columns
    }

    pub(crate) fn add_rows(&mut self, n: usize) {
        self.rows += n;
    }

    /// Removes every row, keeping the buffers (for streaming chunks out of a session).
    pub fn clear(&mut self) {
        for c in &mut self.columns {
            match c {
                ChunkColumn::Num(v) => v.clear(),
                ChunkColumn::Char { bytes, .. } => bytes.clear(),
                ChunkColumn::Stored(s) => s.clear(),
            }
        }
        self.rows = 0;
    }

    /// Bytes one row takes on the wire ([`RowChunk::wire_bytes`] per row).
    pub fn row_wire_bytes(&self) -> usize {
        self.types.iter().map(|t| t.wire_width()).sum()
    }

    /// Makes room for `rows` more rows without reallocating (a chunk that fills row
    /// batch by row batch would otherwise be copied over as it grows).
    pub fn reserve(&mut self, rows: usize) {
        for c in &mut self.columns {
            match c {
                ChunkColumn::Num(v) => v.reserve(rows),
                ChunkColumn::Char { width, bytes } => bytes.reserve(rows.saturating_mul(*width)),
                ChunkColumn::Stored(s) => s.valid.reserve(rows),
            }
        }
    }

    /// Appends another chunk of the same column types.
    pub fn append(&mut self, other: &RowChunk) -> Result<(), EvalError> {
        if self.types != other.types {
            return Err(EvalError::PlanMismatch(
                "row chunks with different column types".into(),
            ));
        }
        for (a, b) in self.columns.iter_mut().zip(&other.columns) {
            match (a, b) {
                (ChunkColumn::Num(x), ChunkColumn::Num(y)) => x.extend_from_slice(y),
                (ChunkColumn::Char { bytes: x, .. }, ChunkColumn::Char { bytes: y, .. }) => {
                    x.extend_from_slice(y)
                }
                (ChunkColumn::Stored(x), ChunkColumn::Stored(y)) if x.ty == y.ty => x.append(y),
                _ => {
                    return Err(EvalError::PlanMismatch(
                        "row chunks with different column kinds".into(),
                    ));
                }
            }
        }
        self.rows += other.rows;
        Ok(())
    }
}

/// One column of a [`RowChunk`], borrowed.
#[derive(Debug, Clone, Copy)]
pub enum ColumnData<'a> {
    /// `INT`, `DECIMAL` (units of the scale) or `DATE` (days) values.
    Num(&'a [i64]),
    /// `CHAR(width)` values back to back, padding included.
    Char {
        /// Bytes per value.
        width: usize,
        /// `len() * width` bytes.
        bytes: &'a [u8],
    },
    /// A column of a table with NULLs or the newer types, as stored: `valid[i]` is false
    /// for a NULL; a fixed-width type's value `i` is `fixed[i*w..(i+1)*w]` (its stored
    /// little-endian bytes, zero for a NULL); a variable-length value `i` is
    /// `heap[starts[i]..starts[i+1]]` (the last one ends at `heap.len()`).
    Stored {
        /// The stored column type.
        ty: ColumnType,
        /// Per row: not NULL.
        valid: &'a [bool],
        /// Fixed-width values.
        fixed: &'a [u8],
        /// Variable-length values' starts in `heap`.
        starts: &'a [usize],
        /// Variable-length values' bytes.
        heap: &'a [u8],
    },
}

/// What evaluating some pages of a plan has produced so far: projected rows, or an
/// aggregation state. Partial results of the same plan merge, in any grouping and
/// order, into the result of all their pages together.
#[derive(Debug, Clone, PartialEq)]
pub enum PartialResult {
    /// Projected rows, in page order.
    Rows(RowChunk),
    /// Aggregation state (boxed: it is much larger than a row chunk).
    Aggregate(Box<AggState>),
}

impl PartialResult {
    /// An empty partial result for `plan`.
    pub fn new(plan: &Plan) -> PartialResult {
        Self::with_group_limit(plan, NO_GROUP_LIMIT)
    }

    /// Like [`PartialResult::new`], but evaluation fails with
    /// [`EvalError::TooManyGroups`] beyond `limit` groups (a device session's memory
    /// bound).
    pub fn with_group_limit(plan: &Plan, limit: usize) -> PartialResult {
        match &plan.output {
            Output::Project(exprs) => {
                PartialResult::Rows(RowChunk::for_outputs(exprs, &plan.schema))
            }
            Output::Aggregate(a) => {
                PartialResult::Aggregate(Box::new(AggState::new(a, &plan.schema, limit)))
            }
        }
    }

    /// Lifts an aggregation state's group limit (see [`AggState::lift_group_limit`]);
    /// rows have none.
    pub fn lift_group_limit(&mut self) {
        if let PartialResult::Aggregate(a) = self {
            a.lift_group_limit();
        }
    }

    /// Merges `other` into `self` (rows are appended after `self`'s).
    pub fn merge(&mut self, other: PartialResult) -> Result<(), EvalError> {
        self.merge_from(&other)
    }

    /// Back to empty, as [`PartialResult::new`] made it, keeping every buffer.
    pub fn clear(&mut self) {
        match self {
            PartialResult::Rows(r) => r.clear(),
            PartialResult::Aggregate(a) => a.clear(),
        }
    }

    /// Merges `other` into `self` like [`PartialResult::merge`], leaving `other` as it
    /// was (so its buffers can be reused).
    pub fn merge_from(&mut self, other: &PartialResult) -> Result<(), EvalError> {
        match (self, other) {
            (PartialResult::Rows(a), PartialResult::Rows(b)) => a.append(b),
            (PartialResult::Aggregate(a), PartialResult::Aggregate(b)) => a.merge_from(b),
            _ => Err(EvalError::PlanMismatch(
                "a projection's rows and an aggregation's state".into(),
            )),
        }
    }

    /// Rows (projection) or groups (aggregation) held.
    pub fn len(&self) -> usize {
        match self {
            PartialResult::Rows(r) => r.len(),
            PartialResult::Aggregate(a) => a.group_count(),
        }
    }

    /// True if [`PartialResult::len`] is 0.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Makes room for `rows` more rows (a projection's; nothing for an aggregation).
    pub fn reserve_rows(&mut self, rows: usize) {
        if let PartialResult::Rows(r) = self {
            r.reserve(rows);
        }
    }

    /// Bytes this partial result takes on the wire to the host.
    pub fn wire_bytes(&self) -> u64 {
        match self {
            PartialResult::Rows(r) => r.wire_bytes(),
            PartialResult::Aggregate(a) => a.wire_bytes(),
        }
    }
}
