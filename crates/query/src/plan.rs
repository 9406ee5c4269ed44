//! The device program: what the SQL front end (`csd-sql`, from DataFusion's plan) pushes
//! into a scan and what [`crate::Evaluator`] runs, on the host (IHP) or in the device
//! (smart-ssd-query-processing §3–4: selection, projection and aggregation next to the
//! data; in-storage-scan-processing §4: the same work placed on another processor).
//!
//! A [`Plan`] is one table, an optional filter, and either a projection list or a
//! partial aggregation (grouping columns and aggregates; the host finishes it).
//! Expressions ([`Expr`]) carry their result type; the front end and the builder
//! ([`crate::build`]) have already:
//!
//! * resolved names to column indices and checked every type;
//! * made both operands of `+`, `-` and of every numeric comparison the same decimal
//!   scale (a [`ExprKind::Rescale`] multiplies the lower-scale side by a power of ten);
//! * rewritten comparisons with a constant so that the constant is at the other
//!   side's scale, exactly: `l_discount < 0.065` on a scale-2 column becomes
//!   `l_discount < 7` in units of 0.01 (`x*10 < 65  <=>  x < ceil(65/10)`), and
//!   `l_discount = 0.065` becomes `FALSE`. No floating point, no rounding;
//! * folded constant sub-expressions (`1 - 0.05` is one decimal) with the evaluator's
//!   own arithmetic;
//! * pushed `NOT` into comparisons, `IN`, `LIKE`, `IS NULL` and boolean columns, and
//!   through `AND` / `OR` (De Morgan), which is exact under SQL's three-valued logic
//!   too; the front end turns `BETWEEN` into two comparisons.
//!
//! # NULLs (three-valued logic)
//!
//! A nullable column's NULL makes every comparison, `IN`, `LIKE` and arithmetic that
//! reads it UNKNOWN; `AND` / `OR` / `NOT` follow Kleene's logic; a filter keeps the rows
//! where it is TRUE. The evaluator computes only the TRUE set of every node: a leaf
//! (comparison, `IN`, `LIKE`) runs on the selected rows whose columns are not NULL, `AND`
//! and `OR` combine TRUE sets (exact in Kleene logic), and `NOT` never reaches a node
//! that may be UNKNOWN because [`crate::build::negate`] pushes it down to leaves that
//! have exact negations (`NOT a < b` is `a >= b`, both UNKNOWN on a NULL). A comparison
//! the builder decides from the constant alone (`x = 0.065` on a scale-2 column) is not
//! folded to `FALSE` when `x` may be NULL but becomes [`ExprKind::Known`] (FALSE, or
//! UNKNOWN on a NULL), whose negation is UNKNOWN on a NULL too.

use std::fmt;
use std::sync::Arc;

use csd_table::Schema;
use csd_table::date::DisplayDate;

use crate::types::{DataType, format_units};

/// A typed expression node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expr {
    /// What the node computes.
    pub kind: ExprKind,
    /// Its result type.
    pub ty: DataType,
}

/// The kinds of expression node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExprKind {
    /// A column of the table.
    Column {
        /// Index in the table's schema.
        index: usize,
        /// The column's name (for messages).
        name: String,
        /// The column may hold NULLs (it is declared nullable).
        nullable: bool,
    },
    /// A constant of the node's type.
    Const(Const),
    /// `-e` on a number.
    Neg(Box<Expr>),
    /// `e * 10^by`: brings a number to a larger decimal scale.
    Rescale {
        /// The operand.
        expr: Box<Expr>,
        /// The power of ten.
        by: u8,
    },
    /// Binary arithmetic on integers held as `i64` (numbers of equal scale for
    /// `Add`/`Sub`, days for dates).
    Arith {
        /// The operator.
        op: ArithOp,
        /// Left operand.
        left: Box<Expr>,
        /// Right operand.
        right: Box<Expr>,
    },
    /// A comparison of two numbers of equal scale, two dates or two strings.
    Cmp {
        /// The operator.
        op: CmpOp,
        /// Left operand.
        left: Box<Expr>,
        /// Right operand.
        right: Box<Expr>,
    },
    /// `e [NOT] IN (constants)`, the constants already at `e`'s scale.
    InList {
        /// The tested expression.
        expr: Box<Expr>,
        /// The distinct constants (integer lists indexed for lookups, see [`ConstSet`]).
        list: ConstSet,
        /// `NOT IN`.
        negated: bool,
    },
    /// `e [NOT] LIKE 'prefix%'` on a string (stored bytes, padding included).
    Like {
        /// The tested string.
        expr: Box<Expr>,
        /// The prefix.
        prefix: Vec<u8>,
        /// `NOT LIKE`.
        negated: bool,
    },
    /// `e [NOT] LIKE pattern` on a variable-length string for the patterns `'%s'`
    /// (suffix) and `'%s%'` (contains), without `_` or escapes; bytes compared as
    /// stored (prefix patterns are [`ExprKind::Like`]).
    LikeAny {
        /// The tested string.
        expr: Box<Expr>,
        /// The literal part of the pattern.
        needle: Vec<u8>,
        /// `'%s'` (true) or `'%s%'` (false).
        suffix: bool,
        /// `NOT LIKE`.
        negated: bool,
    },
    /// `e IS [NOT] NULL`: TRUE or FALSE, never UNKNOWN.
    IsNull {
        /// The tested expression.
        expr: Box<Expr>,
        /// `IS NOT NULL`.
        negated: bool,
    },
    /// A predicate the builder decided from its constants alone on an expression that
    /// may be NULL: `value` where `expr` is not NULL, UNKNOWN where it is.
    Known {
        /// The expression whose NULLs make it UNKNOWN.
        expr: Box<Expr>,
        /// The predicate's value on the other rows.
        value: bool,
    },
    /// A `BOOLEAN` expression used as a predicate: TRUE where `expr` is `value`, FALSE
    /// where it is not, UNKNOWN where it is NULL (`WHERE flag` is `value = true`,
    /// `WHERE NOT flag` is `value = false`).
    Truth {
        /// The boolean expression (a `BOOLEAN` column).
        expr: Box<Expr>,
        /// The value that makes the predicate TRUE.
        value: bool,
    },
    /// Conjunction (evaluated left to right, each term on the rows still selected).
    And(Vec<Expr>),
    /// Disjunction (each term on the rows not yet selected).
    Or(Vec<Expr>),
    /// Negation of a predicate that could not be pushed down.
    Not(Box<Expr>),
}

/// A constant value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Const {
    /// A truth value.
    Bool(bool),
    /// An integer, a decimal in units of its scale, a date in days, a timestamp in
    /// microseconds, or a float's total-order key ([`crate::types::float_key`]), per
    /// the node's type.
    Int(i64),
    /// A byte string.
    Char(Vec<u8>),
    /// A numeric literal that does not fit an `i64` at its scale, or has more than 18
    /// digits after the point (up to 38). While building, the builder
    /// ([`crate::build`]) turns a comparison or `IN` against it into an exact comparison
    /// with an `i64` constant (or a truth value), and rejects it in arithmetic; a
    /// finished [`Plan`] holds one only as the constant side of a comparison with a
    /// `DECIMAL(p, s)` (128-bit) value, at that value's scale.
    Wide(i128),
}

/// The distinct constants of an `IN` list, in the order written, with integer lists
/// also kept sorted for lookups: a join's runtime filter pushed into the device
/// (`csd_sql`'s runtime filters) is an `IN` of up to thousands of keys, tested on every
/// row of a scan, where a scan of the list per row would cost more than the whole
/// scan. A list whose values span few enough integers gets a bitmap (one bit per
/// integer from the least to the greatest: up to [`ConstSet::DENSE_BITS`] bits, or up to
/// [`ConstSet::BITMAP_BITS`] where at least one in [`ConstSet::SPARSEST`] integers of
/// the span is in the set, such as TPC-H Q12's 31,000 order keys among 6 million, whose
/// bisection was most of the orders scan's filtering: 15 dependent loads a row against
/// one); any other integer list is searched by bisection.
#[derive(Debug, Clone, Default)]
pub struct ConstSet {
    /// Shared: a plan is cloned into every evaluator of a scan, and a join's key list
    /// may hold thousands of keys. Empty for a set of integers made sorted
    /// ([`ConstSet::of_sorted_ints`]): its constants are `sorted`'s (a join's 729,000
    /// order keys are not copied into 23 MB of constants).
    items: Arc<[Const]>,
    /// The integer items sorted (empty unless every item is an integer).
    sorted: Arc<[i64]>,
    /// Bit `v - least` of the items' bitmap, when there is one.
    bits: Arc<[u64]>,
}

impl ConstSet {
    /// A bitmap of up to this many bits (32 KiB) is kept whatever the density.
    pub const DENSE_BITS: u64 = 1 << 18;
    /// The largest bitmap kept (1 MiB).
    pub const BITMAP_BITS: u64 = 1 << 23;
    /// Integer keys up to which a list is searched linearly rather than by bisection.
    pub(crate) const LINEAR_KEYS: usize = 8;
    /// A bitmap beyond [`ConstSet::DENSE_BITS`] needs a key in this many integers (at
    /// most 1 MiB, it stays in a core's second-level cache here, where a bisection of
    /// the keys would take a dozen loads a row).
    pub const SPARSEST: u64 = 1024;

    /// The set of `items` (distinct, as written).
    pub fn new(items: Vec<Const>) -> ConstSet {
        let ints: Option<Vec<i64>> = items
            .iter()
            .map(|c| match c {
                Const::Int(v) => Some(*v),
                _ => None,
            })
            .collect();
        let mut sorted = ints.unwrap_or_default();
        sorted.sort_unstable();
        sorted.dedup();
        ConstSet {
            items: items.into(),
            bits: Self::bitmap(&sorted).into(),
            sorted: sorted.into(),
        }
    }

    /// The set of the integers `sorted` (ascending and distinct, as a join's key set
    /// is kept), sharing them: no constant is copied.
    pub fn of_sorted_ints(sorted: Arc<[i64]>) -> ConstSet {
        debug_assert!(
            sorted.windows(2).all(|w| w[0] < w[1]),
            "ascending, distinct"
        );
        ConstSet {
            items: Arc::from([]),
            bits: Self::bitmap(&sorted).into(),
            sorted,
        }
    }

    /// The bitmap of `sorted` (ascending, distinct) when it is dense enough (see the
    /// type's docs), else empty.
    fn bitmap(sorted: &[i64]) -> Vec<u64> {
        let mut bits = Vec::new();
        if let (Some(&lo), Some(&hi)) = (sorted.first(), sorted.last()) {
            let span = (hi as i128 - lo as i128) as u128 + 1;
            let n = sorted.len() as u128;
            let dense = span <= u128::from(Self::DENSE_BITS)
                || (span <= u128::from(Self::BITMAP_BITS)
                    && span <= n * u128::from(Self::SPARSEST));
            if sorted.len() > 4 && dense {
                bits = vec![0u64; (span as usize).div_ceil(64)];
                for &v in sorted {
                    let o = (v - lo) as usize;
                    bits[o / 64] |= 1 << (o % 64);
                }
            }
        }
        bits
    }

    /// Number of constants.
    pub fn len(&self) -> usize {
        if self.items.is_empty() {
            self.sorted.len()
        } else {
            self.items.len()
        }
    }

    /// Whether the set has no constant.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `i`-th constant as written (the `i`-th least of a set made sorted).
    pub fn get(&self, i: usize) -> Option<Const> {
        if self.items.is_empty() {
            self.sorted.get(i).map(|&v| Const::Int(v))
        } else {
            self.items.get(i).cloned()
        }
    }

    /// The constants, as written.
    pub fn iter(&self) -> impl Iterator<Item = Const> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// The string constants, as written.
    pub fn chars(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.items.iter().filter_map(|c| match c {
            Const::Char(b) => Some(b.as_slice()),
            _ => None,
        })
    }

    /// The same set with its constants in ascending order (a list whose order is an
    /// accident, such as a join's keys, reads the same every time).
    pub fn into_sorted(self) -> ConstSet {
        if self.items.is_empty() {
            return self;
        }
        let mut items = self.items.to_vec();
        items.sort_unstable();
        ConstSet::new(items)
    }

    /// Bytes of the structure a lookup reads: the bitmap, or 8 bytes a key of the
    /// sorted integers (what a device's session arena must hold).
    pub fn lookup_bytes(&self) -> usize {
        if self.bits.is_empty() {
            self.sorted.len() * 8
        } else {
            self.bits.len() * 8
        }
    }

    /// The set's integers, ascending and distinct, when every constant is an integer
    /// (`None` for a set holding another kind of constant).
    pub fn ints(&self) -> Option<&[i64]> {
        (self.sorted.len() == self.len()).then_some(&self.sorted[..])
    }

    /// The integers of a set searched by bisection (no bitmap), sorted; `None` for a
    /// set with a bitmap or of other constants.
    pub(crate) fn bisected_ints(&self) -> Option<&[i64]> {
        (self.bits.is_empty() && !self.sorted.is_empty()).then_some(&self.sorted[..])
    }

    /// The set's bitmap, when it has one: its least integer and its words (bit
    /// `v - least`; the bits past the greatest integer are zero).
    pub(crate) fn bitmap_words(&self) -> Option<(i64, &[u64])> {
        match (self.bits.is_empty(), self.sorted.first()) {
            (false, Some(&lo)) => Some((lo, &self.bits[..])),
            _ => None,
        }
    }

    /// Whether the set holds the integer `v` (only integer sets hold any).
    #[inline]
    pub fn contains_int(&self, v: i64) -> bool {
        let (Some(&lo), Some(&hi)) = (self.sorted.first(), self.sorted.last()) else {
            return false;
        };
        if v < lo || v > hi {
            return false;
        }
        if !self.bits.is_empty() {
            let o = (v - lo) as usize;
            return self.bits[o / 64] >> (o % 64) & 1 == 1;
        }
        if self.sorted.len() <= Self::LINEAR_KEYS {
            return self.sorted.contains(&v);
        }
        self.sorted.binary_search(&v).is_ok()
    }
}

/// Sets are equal when their constants are, in order (the index follows from them).
impl PartialEq for ConstSet {
    fn eq(&self, o: &ConstSet) -> bool {
        match (self.items.is_empty(), o.items.is_empty()) {
            (false, false) => self.items == o.items,
            (true, true) => self.sorted == o.sorted,
            _ => self.len() == o.len() && self.iter().eq(o.iter()),
        }
    }
}

impl Eq for ConstSet {}

/// Arithmetic operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArithOp {
    /// `+`.
    Add,
    /// `-`.
    Sub,
    /// `*` (the result scale is the sum of the operand scales).
    Mul,
    /// `/` on two integers: truncates toward zero.
    IntDiv,
    /// `/` with a decimal operand: `round(left * 10^shift / right)`, halves away from
    /// zero, computed in `i128` (the result scale is documented at the crate root).
    DecDiv {
        /// Power of ten applied to the dividend.
        shift: u8,
    },
}

impl ArithOp {
    /// The SQL operator symbol.
    pub fn symbol(self) -> &'static str {
        match self {
            ArithOp::Add => "+",
            ArithOp::Sub => "-",
            ArithOp::Mul => "*",
            ArithOp::IntDiv | ArithOp::DecDiv { .. } => "/",
        }
    }

    /// Applies the operator to one pair of values: `Ok(v)`, or `Err(true)` for
    /// division by zero, `Err(false)` for overflow. The vectorized kernels and the
    /// builder's constant folding both call this, so they cannot disagree.
    #[inline(always)]
    pub fn apply(self, a: i64, b: i64) -> Result<i64, bool> {
        match self {
            ArithOp::Add => a.checked_add(b).ok_or(false),
            ArithOp::Sub => a.checked_sub(b).ok_or(false),
            ArithOp::Mul => a.checked_mul(b).ok_or(false),
            ArithOp::IntDiv => {
                if b == 0 {
                    Err(true)
                } else {
                    a.checked_div(b).ok_or(false)
                }
            }
            ArithOp::DecDiv { shift } => {
                if b == 0 {
                    return Err(true);
                }
                let n = 10i128
                    .checked_pow(u32::from(shift))
                    .and_then(|p| i128::from(a).checked_mul(p))
                    .ok_or(false)?;
                let q = crate::types::div_round_half_away(n, i128::from(b)).ok_or(false)?;
                i64::try_from(q).map_err(|_| false)
            }
        }
    }
}

/// Comparison operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `=`.
    Eq,
    /// `<>`.
    Ne,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
}

impl CmpOp {
    /// Every operator.
    pub const ALL: [CmpOp; 6] = [
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Gt,
        CmpOp::Ge,
    ];

    /// The operator with its operands swapped (`a < b` ⇔ `b > a`).
    pub fn flip(self) -> CmpOp {
        match self {
            CmpOp::Eq => CmpOp::Eq,
            CmpOp::Ne => CmpOp::Ne,
            CmpOp::Lt => CmpOp::Gt,
            CmpOp::Le => CmpOp::Ge,
            CmpOp::Gt => CmpOp::Lt,
            CmpOp::Ge => CmpOp::Le,
        }
    }

    /// The complementary operator (`NOT a < b` ⇔ `a >= b`).
    pub fn negate(self) -> CmpOp {
        match self {
            CmpOp::Eq => CmpOp::Ne,
            CmpOp::Ne => CmpOp::Eq,
            CmpOp::Lt => CmpOp::Ge,
            CmpOp::Le => CmpOp::Gt,
            CmpOp::Gt => CmpOp::Le,
            CmpOp::Ge => CmpOp::Lt,
        }
    }

    /// Whether `ord` (the ordering of left against right) satisfies the operator.
    #[inline(always)]
    pub fn holds(self, ord: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::*;
        match self {
            CmpOp::Eq => ord == Equal,
            CmpOp::Ne => ord != Equal,
            CmpOp::Lt => ord == Less,
            CmpOp::Le => ord != Greater,
            CmpOp::Gt => ord == Greater,
            CmpOp::Ge => ord != Less,
        }
    }

    /// `a op b` on integers.
    #[inline(always)]
    pub fn test(self, a: i64, b: i64) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }

    /// The SQL operator symbol.
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "=",
            CmpOp::Ne => "<>",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }
}

/// Aggregate functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AggFunc {
    /// `COUNT(*)`.
    CountStar,
    /// `COUNT(e)` (equal to `COUNT(*)`: values are never NULL).
    Count,
    /// `SUM(e)`: exact, in `i128`, at `e`'s scale.
    Sum,
    /// `AVG(e)`: exact sum and count, rounded once at the end to scale
    /// [`avg_scale`]`(e's scale)`, halves away from zero.
    Avg,
    /// `MIN(e)`.
    Min,
    /// `MAX(e)`.
    Max,
}

impl AggFunc {
    /// The SQL name.
    pub fn name(self) -> &'static str {
        match self {
            AggFunc::CountStar | AggFunc::Count => "COUNT",
            AggFunc::Sum => "SUM",
            AggFunc::Avg => "AVG",
            AggFunc::Min => "MIN",
            AggFunc::Max => "MAX",
        }
    }
}

/// Result scale of `AVG` over a number of scale `s`: `max(s, 6)`.
pub const fn avg_scale(s: u8) -> u8 {
    if s > 6 { s } else { 6 }
}

/// One aggregate of an aggregation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aggregate {
    /// The function.
    pub func: AggFunc,
    /// Its argument (`None` for `COUNT(*)`).
    pub arg: Option<Expr>,
    /// The result type.
    pub ty: DataType,
}

/// A grouped (or global) aggregation: the state per group of the grouping columns'
/// values, one accumulator per aggregate ([`crate::AggState`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aggregation {
    /// Grouping columns (indices into the schema), in `GROUP BY` order.
    pub group_by: Vec<usize>,
    /// The aggregates to compute.
    pub aggregates: Vec<Aggregate>,
}

/// What the program returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// One output row per selected row: these expressions.
    Project(Vec<Expr>),
    /// Aggregation states, one per group (one in all without grouping columns).
    Aggregate(Aggregation),
}

/// A device program: see the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The table name (as the catalog spells it).
    pub table: String,
    /// The table's schema; pages must carry its fingerprint.
    pub schema: Schema,
    /// The predicate (`None`: every row).
    pub filter: Option<Expr>,
    /// Projection or aggregation.
    pub output: Output,
}

impl Plan {
    /// The columns `columns` (schema indices, in this order) of the rows of `table`
    /// (with `schema`) that pass `filter`; `None` if a column is out of range.
    pub fn projection(
        table: &str,
        schema: &Schema,
        columns: &[usize],
        filter: Option<Expr>,
    ) -> Option<Plan> {
        let exprs = columns
            .iter()
            .map(|&c| Expr::column(schema, c))
            .collect::<Option<Vec<_>>>()?;
        Some(Plan {
            table: table.to_string(),
            schema: schema.clone(),
            filter,
            output: Output::Project(exprs),
        })
    }

    /// The partial aggregation `aggregation` of the rows of `table` (with `schema`)
    /// that pass `filter`.
    pub fn aggregation(
        table: &str,
        schema: &Schema,
        aggregation: Aggregation,
        filter: Option<Expr>,
    ) -> Plan {
        Plan {
            table: table.to_string(),
            schema: schema.clone(),
            filter,
            output: Output::Aggregate(aggregation),
        }
    }

    /// True for aggregations.
    pub fn is_aggregate(&self) -> bool {
        matches!(self.output, Output::Aggregate(_))
    }

    /// The schema indices of every column the plan reads (filter, outputs, grouping),
    /// ascending: what a device must bring from flash, or a column store would read.
    pub fn referenced_columns(&self) -> Vec<usize> {
        let mut cols = Vec::new();
        if let Some(f) = &self.filter {
            f.collect_columns(&mut cols);
        }
        match &self.output {
            Output::Project(exprs) => exprs.iter().for_each(|e| e.collect_columns(&mut cols)),
            Output::Aggregate(a) => {
                cols.extend_from_slice(&a.group_by);
                for agg in &a.aggregates {
                    if let Some(e) = &agg.arg {
                        e.collect_columns(&mut cols);
                    }
                }
            }
        }
        cols.sort_unstable();
        cols.dedup();
        cols
    }

    /// The columns the filter reads, ascending.
    pub fn filter_columns(&self) -> Vec<usize> {
        let mut cols = Vec::new();
        if let Some(f) = &self.filter {
            f.collect_columns(&mut cols);
        }
        cols.sort_unstable();
        cols.dedup();
        cols
    }
}

impl Expr {
    /// A node of `kind` typed `ty` (no checks: see [`crate::build`] for typed
    /// construction).
    pub fn new(kind: ExprKind, ty: DataType) -> Expr {
        Expr { kind, ty }
    }

    /// A constant of type `ty`.
    pub fn constant(c: Const, ty: DataType) -> Expr {
        Expr::new(ExprKind::Const(c), ty)
    }

    /// A truth value.
    pub fn boolean(b: bool) -> Expr {
        Expr::constant(Const::Bool(b), DataType::Bool)
    }

    /// Column `index` of `schema`, typed from its stored type ([`DataType::of_column`]),
    /// nullable as the column is; `None` out of range.
    pub fn column(schema: &Schema, index: usize) -> Option<Expr> {
        let col = schema.columns().get(index)?;
        Some(Expr::new(
            ExprKind::Column {
                index,
                name: col.name.clone(),
                nullable: col.nullable,
            },
            DataType::of_column(col.ty)?,
        ))
    }

    /// True if the expression may be NULL: it reads a nullable column.
    pub fn may_be_null(&self) -> bool {
        let mut any = false;
        crate::build::visit(self, &mut |e| {
            any |= matches!(e.kind, ExprKind::Column { nullable: true, .. });
        });
        any
    }

    /// The constant, if this node is one.
    pub fn as_const(&self) -> Option<&Const> {
        match &self.kind {
            ExprKind::Const(c) => Some(c),
            _ => None,
        }
    }

    /// The integer constant, if this node is one.
    pub fn as_int_const(&self) -> Option<i64> {
        match &self.kind {
            ExprKind::Const(Const::Int(v)) => Some(*v),
            _ => None,
        }
    }

    /// Appends the schema index of every column this expression reads.
    pub fn collect_columns(&self, out: &mut Vec<usize>) {
        match &self.kind {
            ExprKind::Column { index, .. } => out.push(*index),
            ExprKind::Const(_) => {}
            ExprKind::Neg(e)
            | ExprKind::Not(e)
            | ExprKind::Rescale { expr: e, .. }
            | ExprKind::InList { expr: e, .. }
            | ExprKind::Like { expr: e, .. }
            | ExprKind::LikeAny { expr: e, .. }
            | ExprKind::IsNull { expr: e, .. }
            | ExprKind::Known { expr: e, .. }
            | ExprKind::Truth { expr: e, .. } => e.collect_columns(out),
            ExprKind::Arith { left, right, .. } | ExprKind::Cmp { left, right, .. } => {
                left.collect_columns(out);
                right.collect_columns(out);
            }
            ExprKind::And(es) | ExprKind::Or(es) => es.iter().for_each(|e| e.collect_columns(out)),
        }
    }

    /// Number of predicate leaves (comparisons, `IN`, `LIKE`) in the expression.
    pub fn predicate_count(&self) -> usize {
        match &self.kind {
            ExprKind::Cmp { .. }
            | ExprKind::InList { .. }
            | ExprKind::Like { .. }
            | ExprKind::LikeAny { .. }
            | ExprKind::IsNull { .. }
            | ExprKind::Truth { .. } => 1,
            ExprKind::Not(e) => e.predicate_count(),
            ExprKind::And(es) | ExprKind::Or(es) => es.iter().map(Expr::predicate_count).sum(),
            _ => 0,
        }
    }
}

fn fmt_const(f: &mut fmt::Formatter<'_>, c: &Const, ty: DataType) -> fmt::Result {
    match (c, ty) {
        (Const::Bool(b), _) => f.write_str(if *b { "TRUE" } else { "FALSE" }),
        (Const::Int(v), DataType::Date) => match i32::try_from(*v) {
            Ok(d) => write!(f, "DATE '{}'", DisplayDate(d)),
            Err(_) => write!(f, "DATE(day {v})"),
        },
        (Const::Int(v), DataType::Decimal { scale }) => {
            f.write_str(&format_units(i128::from(*v), scale))
        }
        (Const::Int(k), DataType::Float64) => {
            write!(f, "{:?}", f64::from_bits(crate::types::float_bits(*k, 8)))
        }
        (Const::Int(k), DataType::Float32) => write!(
            f,
            "{:?}",
            f32::from_bits(crate::types::float_bits(*k, 4) as u32)
        ),
        (Const::Int(v), _) => write!(f, "{v}"),
        (Const::Char(b), _) => write!(f, "'{}'", String::from_utf8_lossy(b).replace('\'', "''")),
        (Const::Wide(v), DataType::Decimal { scale } | DataType::Decimal128 { scale, .. }) => {
            f.write_str(&format_units(*v, scale))
        }
        (Const::Wide(v), _) => write!(f, "{v}"),
    }
}

impl fmt::Display for Expr {
    /// SQL-like text of the typed expression (rescaling is invisible, constants are
    /// shown at the scale they were normalized to).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ExprKind::Column { name, .. } => f.write_str(name),
            ExprKind::Const(c) => fmt_const(f, c, self.ty),
            ExprKind::Neg(e) => write!(f, "-{e}"),
            ExprKind::Rescale { expr, .. } => write!(f, "{expr}"),
            ExprKind::Arith { op, left, right } => write!(f, "({left} {} {right})", op.symbol()),
            ExprKind::Cmp { op, left, right } => write!(f, "{left} {} {right}", op.symbol()),
            ExprKind::InList {
                expr,
                list,
                negated,
            } => {
                write!(f, "{expr} {}IN (", if *negated { "NOT " } else { "" })?;
                // A long list (a join's keys) shows its first items and its length.
                const SHOWN: usize = 16;
                for (i, c) in list.iter().take(SHOWN).enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    fmt_const(f, &c, expr.ty)?;
                }
                if list.len() > SHOWN {
                    write!(f, ", … {} values", list.len())?;
                }
                f.write_str(")")
            }
            ExprKind::Like {
                expr,
                prefix,
                negated,
            } => write!(
                f,
                "{expr} {}LIKE '{}%'",
                if *negated { "NOT " } else { "" },
                String::from_utf8_lossy(prefix)
            ),
            ExprKind::And(es) | ExprKind::Or(es) => {
                let sep = if matches!(self.kind, ExprKind::And(_)) {
                    " AND "
                } else {
                    " OR "
                };
                f.write_str("(")?;
                for (i, e) in es.iter().enumerate() {
                    if i > 0 {
                        f.write_str(sep)?;
                    }
                    write!(f, "{e}")?;
                }
                f.write_str(")")
            }
            ExprKind::Not(e) => write!(f, "NOT ({e})"),
            ExprKind::LikeAny {
                expr,
                needle,
                suffix,
                negated,
            } => write!(
                f,
                "{expr} {}LIKE '%{}{}'",
                if *negated { "NOT " } else { "" },
                String::from_utf8_lossy(needle).replace('\'', "''"),
                if *suffix { "" } else { "%" }
            ),
            ExprKind::IsNull { expr, negated } => {
                write!(f, "{expr} IS {}NULL", if *negated { "NOT " } else { "" })
            }
            ExprKind::Known { expr, value } => write!(
                f,
                "{} (UNKNOWN if {expr} IS NULL)",
                if *value { "TRUE" } else { "FALSE" }
            ),
            ExprKind::Truth { expr, value } => {
                if *value {
                    write!(f, "{expr}")
                } else {
                    write!(f, "NOT {expr}")
                }
            }
        }
    }
}

impl fmt::Display for Plan {
    /// The program as one line of SQL-like text (`EXPLAIN`-like).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |c: usize| {
            self.schema
                .columns()
                .get(c)
                .map_or("?", |c| c.name.as_str())
        };
        f.write_str("SELECT ")?;
        match &self.output {
            Output::Project(exprs) => {
                for (i, e) in exprs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{e}")?;
                }
            }
            Output::Aggregate(a) => {
                let groups = a.group_by.iter().map(|&c| name(c).to_string());
                let aggs = a.aggregates.iter().map(|agg| match &agg.arg {
                    Some(e) => format!("{}({e})", agg.func.name()),
                    None => "COUNT(*)".to_string(),
                });
                let items: Vec<String> = groups.chain(aggs).collect();
                f.write_str(&items.join(", "))?;
            }
        }
        write!(f, " FROM {}", self.table)?;
        if let Some(filter) = &self.filter {
            write!(f, " WHERE {filter}")?;
        }
        if let Output::Aggregate(a) = &self.output
            && !a.group_by.is_empty()
        {
            let groups: Vec<&str> = a.group_by.iter().map(|&c| name(c)).collect();
            write!(f, " GROUP BY {}", groups.join(", "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Lookups in an integer set (bitmap, bisection or a short scan, by its size and
        /// span) answer what a scan of its items does, for values in and around it.
        #[test]
        fn const_set_lookups_match_the_list(
            items in prop::collection::hash_set(
                prop_oneof![-300i64..300, any::<i64>(), Just(i64::MIN), Just(i64::MAX)],
                0..60,
            ),
            probes in prop::collection::vec(any::<i64>(), 0..40),
        ) {
            let items: Vec<i64> = items.into_iter().collect();
            let set = ConstSet::new(items.iter().map(|&v| Const::Int(v)).collect());
            prop_assert_eq!(set.len(), items.len());
            let near = items.iter().flat_map(|&v| [v.saturating_sub(1), v, v.saturating_add(1)]);
            for v in near.chain(probes).chain(-310..310) {
                prop_assert_eq!(set.contains_int(v), items.contains(&v), "value {}", v);
            }
        }
    }

    proptest! {
        /// A set made from sorted integers is the set `new` makes of them: equal, same
        /// length, constants, lookups, index size and display; nothing copied.
        #[test]
        fn sets_of_sorted_ints_are_sets_of_their_constants(
            items in prop::collection::btree_set(
                prop_oneof![-300i64..300, 0i64..1 << 24, any::<i64>()],
                0..400,
            ),
            probes in prop::collection::vec(any::<i64>(), 0..40),
        ) {
            let sorted: Arc<[i64]> = items.iter().copied().collect();
            let made = ConstSet::of_sorted_ints(Arc::clone(&sorted));
            let new = ConstSet::new(items.iter().map(|&v| Const::Int(v)).collect());
            prop_assert_eq!(&made, &new);
            prop_assert_eq!(&new, &made);
            prop_assert_eq!(made.len(), items.len());
            prop_assert_eq!(made.iter().collect::<Vec<_>>(), new.iter().collect::<Vec<_>>());
            prop_assert_eq!(made.lookup_bytes(), new.lookup_bytes());
            prop_assert!(Arc::ptr_eq(&made.sorted, &sorted));
            for v in items.iter().copied().chain(probes) {
                prop_assert_eq!(made.contains_int(v), new.contains_int(v));
            }
            let col = Expr::new(ExprKind::Column { index: 0, name: "k".into(), nullable: false }, DataType::Int);
            let show = |list: ConstSet| {
                Expr::new(
                    ExprKind::InList { expr: Box::new(col.clone()), list, negated: false },
                    DataType::Bool,
                )
                .to_string()
            };
            prop_assert_eq!(show(made.clone()), show(new.clone()));
            prop_assert!(made.clone().into_sorted() == new.into_sorted());
        }
    }

    #[test]
    fn dense_sets_get_a_bitmap_and_sparse_ones_do_not() {
        let dense = ConstSet::new((0..100).map(|v| Const::Int(v * 7)).collect());
        assert!(!dense.bits.is_empty());
        assert!(dense.contains_int(693) && !dense.contains_int(694));
        let sparse = ConstSet::new((0..100).map(|v| Const::Int(v << 40)).collect());
        assert!(sparse.bits.is_empty());
        // Past 2^18 integers a bitmap needs one key in 1024 of them: Q12's 31,000
        // order keys among 6 million have one.
        let wide = ConstSet::new((0..31_000).map(|v| Const::Int(v * 193)).collect());
        assert!(!wide.bits.is_empty());
        assert!(wide.contains_int(30_999 * 193) && !wide.contains_int(30_999 * 193 + 1));
        let thin = ConstSet::new((0..3_000).map(|v| Const::Int(v * 2_000)).collect());
        assert!(thin.bits.is_empty());
        assert!(thin.contains_int(5_998_000) && !thin.contains_int(5_998_001));
        assert!(sparse.contains_int(99 << 40) && !sparse.contains_int((99 << 40) + 1));
        // Strings hold no integer.
        let chars = ConstSet::new(vec![Const::Char(b"a".to_vec())]);
        assert!(!chars.contains_int(0));
    }

    #[test]
    fn a_long_list_shows_its_first_items_and_its_length() {
        let col = Expr::new(
            ExprKind::Column {
                index: 0,
                name: "k".into(),
                nullable: false,
            },
            DataType::Int,
        );
        let e = crate::build::in_list(
            col,
            (0..40)
                .map(|v| Expr::constant(Const::Int(v), DataType::Int))
                .collect(),
            false,
            "k IN (...)",
        )
        .expect("an IN list of integers");
        let text = e.to_string();
        assert!(text.starts_with("k IN (0, 1, 2"), "{text}");
        assert!(text.ends_with(", 15, … 40 values)"), "{text}");
    }
}
