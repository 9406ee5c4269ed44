//! The device program shared by host and device: a small typed IR ([`Plan`]: a filter,
//! a projection or a partial aggregation over one table), its typed builder
//! ([`build`]), and **one** vectorized evaluator ([`Evaluator`]) that runs it over NSM
//! or PAX pages ([`csd_table::PageView`]). SQL is DataFusion's (`csd-sql`): its table
//! providers and physical optimizer rule translate what the device can run exactly into
//! this IR; joins, sorts, final aggregates and everything else run in DataFusion.
//!
//! # What it realizes
//!
//! * smart-ssd-query-processing §3–4: the selection, projection and aggregation
//!   operators that the Smart SSD runs next to the data (its Synthetic selection
//!   `SELECT c2 FROM SyntheticN WHERE c1 < v`, its aggregation, TPC-H Q6), over NSM and
//!   PAX pages, with PAX minipages read in place (§4.1.1, §4.2.1);
//! * in-storage-scan-processing §4: the per-record filter and aggregate work that the
//!   IHP, embedded-CPU ISP and hardware-ISP strategies place on different processors.
//!   The evaluator counts that work ([`WorkCounters`]: records examined, predicates
//!   evaluated, bytes touched, results written) and a device or host cost model
//!   charges cycles on the counts (scan paper Table 2: 24 cycles per record, 403 per
//!   result).
//!
//! The *same* code serves the host-side scan and the device runtime: a strategy
//! decides where pages are evaluated and whose cycle costs apply, never what a
//! predicate means, so all strategies and both layouts return identical results.
//! This crate depends on no device, FTL or SQL crate.
//!
//! ```
//! use csd_query::build::{self, BinaryArith};
//! use csd_query::{
//!     AggFunc, Aggregate, Aggregation, CmpOp, Const, DataType, Evaluator, Expr,
//!     PartialResult, Plan,
//! };
//! use csd_table::datagen::{TpchGenerator, TpchTable};
//! use csd_table::date::parse_date;
//! use csd_table::{Layout, PageView, Paginator};
//!
//! // TPC-H Q6's device program: its filter and SUM(l_extendedprice * l_discount).
//! let schema = TpchTable::LineItem.schema();
//! let col = |name: &str| Expr::column(&schema, schema.column_index(name).unwrap()).unwrap();
//! let date = |d: &str| Expr::constant(Const::Int(parse_date(d).unwrap().into()), DataType::Date);
//! let cents = |v: i64| Expr::constant(Const::Int(v), DataType::Decimal { scale: 2 });
//! let filter = build::and(vec![
//!     build::compare(CmpOp::Ge, col("l_shipdate"), date("1994-01-01"), "q6").unwrap(),
//!     build::compare(CmpOp::Lt, col("l_shipdate"), date("1995-01-01"), "q6").unwrap(),
//!     build::compare(CmpOp::Ge, col("l_discount"), cents(5), "q6").unwrap(),
//!     build::compare(CmpOp::Le, col("l_discount"), cents(7), "q6").unwrap(),
//!     build::compare(CmpOp::Lt, col("l_quantity"), Expr::constant(Const::Int(24), DataType::Int), "q6")
//!         .unwrap(),
//! ]);
//! let revenue = build::arith(BinaryArith::Mul, col("l_extendedprice"), col("l_discount"), "q6").unwrap();
//! let ty = revenue.ty; // DECIMAL with scale 4: scales add under `*`
//! let agg = Aggregation {
//!     group_by: vec![],
//!     aggregates: vec![Aggregate { func: AggFunc::Sum, arg: Some(revenue), ty }],
//! };
//! let q6 = Plan::aggregation("lineitem", &schema, agg, Some(filter));
//! let mut eval = Evaluator::new(&q6);
//! let mut partial = PartialResult::new(&q6);
//! let rows = TpchGenerator::new(TpchTable::LineItem, 0.001).unwrap();
//! let mut pages = Paginator::new(rows, Layout::Pax, 8192).unwrap();
//! while let Some(page) = pages.next_page() {
//!     eval.eval_page(&PageView::parse(page, &schema).unwrap(), &mut partial).unwrap();
//! }
//! assert_eq!(partial.len(), 1); // one group: the global aggregate
//! assert!(eval.totals().rows_selected > 0);
//! println!("{q6}");
//! ```
//!
//! # Choices
//!
//! * **Types.** `INT32`/`INT64` columns and integer constants are `INT`; `DECIMAL(s)`
//!   columns and constants with `s` fractional digits are scaled integers; `DATE` is
//!   days; `CHAR(n)` compares blank-padded (`'A' = 'A  '`). Every value is an `i64`
//!   while computing; overflow is an [`EvalError::Overflow`], never a wrapped value.
//! * **Exact decimals.** `+`/`-` rescale to the larger scale, `*` adds scales (at most
//!   18, else a [`BuildError::Scale`]), so `SUM(l_extendedprice * (1 - l_discount) *
//!   (1 + l_tax))` is exact at scale 6. Comparisons against constants are rewritten
//!   when the program is built to the column's scale with floor/ceil (`x < 0.065` on
//!   scale 2 is `x < 7` in cents), so no constant is ever rounded and no float is ever
//!   used.
//! * **Users' types and NULLs** (tables in page format 2): `INT8`/`INT16` read as `INT`,
//!   `TIMESTAMP` as microseconds, `BOOLEAN` columns are predicates; `VARCHAR` /
//!   `VARBINARY` compare byte for byte (no padding), with `LIKE 'p%'`, `'%s'`, `'%s%'`
//!   ([`ExprKind::LikeAny`]); `FLOAT32/64` and `DECIMAL(p, s)` (128-bit) are read and
//!   returned, not computed. NULLs follow SQL's three-valued logic (see
//!   [`plan`]): a leaf runs on the rows where its columns are not NULL, `NOT`
//!   is pushed to leaves with exact negations. A projection of such a table returns its
//!   columns as stored ([`ColumnData::Stored`]: validity, values, strings' bytes). The
//!   device aggregates only NOT NULL fixed-type values (an aggregate reading a nullable
//!   or newer-type column is refused: the host's SQL engine computes it).
//! * **Division.** `INT / INT` truncates toward zero (PostgreSQL). With a decimal
//!   operand the result has scale `max(6, s_left, s_right)`, rounded half away from
//!   zero from the exact `i128` quotient. Division by zero on a selected row is an
//!   [`EvalError::DivisionByZero`]. (csd-sql does not push division: DataFusion's
//!   decimal quotient has another scale.)
//! * **Aggregates** are partial: per group the row count and, per aggregate, an exact
//!   `i128` sum (`SUM`, `AVG`) or the extreme value (`MIN`, `MAX`); states of any split
//!   of the pages merge into the state of all of them ([`PartialResult::merge`]), and
//!   the host's final aggregate finishes them (DataFusion's, fed by csd-sql).
//! * **Order.** Projected rows come out in page order; groups in the order they were
//!   first seen.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod agg;
pub mod build;
pub mod error;
pub mod eval;
pub mod imply;
mod kernels;
pub mod par;
pub mod plan;
pub mod result;
pub mod types;

pub use agg::{AccView, AggState, PageGroups, SCALAR_ACCS, ScalarState};
pub use error::{BuildError, EvalError};
pub use eval::{Evaluator, WorkCounters};
pub use kernels::cmp_padded;
pub use par::{
    Batch, Hint, MergeTally, MinipageHints, PageOut, PageResult, ParEval, SharedPages,
    scan_threads, set_scan_threads, size_scan_pool,
};
pub use plan::{
    AggFunc, Aggregate, Aggregation, ArithOp, CmpOp, Const, ConstSet, Expr, ExprKind, Output, Plan,
};
pub use result::{ColumnData, PartialResult, RowChunk};
pub use types::DataType;
