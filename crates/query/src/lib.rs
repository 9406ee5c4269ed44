//! The query layer shared by host and device: a SQL subset parsed with `sqlparser`
//! into a small typed [`Plan`], and **one** vectorized evaluator ([`Evaluator`]) that
//! runs that plan over NSM or PAX pages ([`csd_table::PageView`]).
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
//! This crate depends on no device or FTL crate.
//!
//! ```
//! use csd_query::{plan, Evaluator, PartialResult};
//! use csd_table::datagen::{TpchGenerator, TpchTable};
//! use csd_table::{Layout, PageView, Paginator};
//!
//! let schema = TpchTable::LineItem.schema();
//! let q6 = plan("SELECT SUM(l_extendedprice * l_discount) AS revenue FROM lineitem \
//!                WHERE l_shipdate >= DATE '1994-01-01' \
//!                  AND l_shipdate < DATE '1994-01-01' + INTERVAL '1' YEAR \
//!                  AND l_discount BETWEEN 0.06 - 0.01 AND 0.06 + 0.01 \
//!                  AND l_quantity < 24", &schema).unwrap();
//! let mut eval = Evaluator::new(&q6);
//! let mut partial = PartialResult::new(&q6);
//! let rows = TpchGenerator::new(TpchTable::LineItem, 0.001).unwrap();
//! let mut pages = Paginator::new(rows, Layout::Pax, 8192).unwrap();
//! while let Some(page) = pages.next_page() {
//!     eval.eval_page(&PageView::parse(page, &schema).unwrap(), &mut partial).unwrap();
//! }
//! let result = partial.finish(&q6).unwrap();
//! println!("{result}");
//! assert_eq!(result.rows.len(), 1);
//! ```
//!
//! # The SQL subset
//!
//! ```text
//! query      := SELECT item {, item} FROM table [[AS] alias]
//!               [WHERE cond] [GROUP BY column {, column}]
//!               [ORDER BY key [ASC|DESC] {, key [ASC|DESC]}] [;]
//! item       := * | expr [[AS] name] | agg [[AS] name]
//! agg        := COUNT(*) | COUNT(expr) | SUM(expr) | AVG(expr) | MIN(expr) | MAX(expr)
//! key        := output name or alias | output position (1-based) | select-list text
//! cond       := cond AND cond | cond OR cond | NOT cond | (cond) | TRUE | FALSE
//!             | expr cmp expr | expr [NOT] BETWEEN expr AND expr
//!             | expr [NOT] IN (literal {, literal}) | expr [NOT] LIKE 'prefix%'
//! cmp        := = | <> | != | < | <= | > | >=
//! expr       := column | table.column | literal | (expr) | - expr | + expr
//!             | expr + expr | expr - expr | expr * expr | expr / expr
//!             | expr ± INTERVAL 'n' DAY|WEEK   (expr a DATE)
//!             | DATE-literal ± INTERVAL 'n' MONTH|YEAR
//! literal    := 123 | 0.06 | 'text' | DATE 'YYYY-MM-DD'
//! ```
//!
//! With `GROUP BY` or an aggregate in the select list, every item must be a grouping
//! column or an aggregate call. Anything else — joins, subqueries, `HAVING`,
//! `DISTINCT`, `LIMIT`, `CASE`, `CAST`, functions other than the five aggregates,
//! `NULL`, other `LIKE` patterns, expressions over aggregates — is a [`QueryError`]
//! naming the construct ("JOIN is not supported: ...", "unknown column l_foo in table
//! lineitem; columns: ...", "cannot compare DATE with CHAR(1)").
//!
//! # Choices
//!
//! * **Types.** `INT32`/`INT64` columns and integer literals are `INT`; `DECIMAL(s)`
//!   columns and literals with `s` fractional digits are scaled integers; `DATE` is
//!   days; `CHAR(n)` compares blank-padded (`'A' = 'A  '`). Every value is an `i64`
//!   while computing; overflow is an [`EvalError::Overflow`], never a wrapped value.
//! * **Exact decimals.** `+`/`-` rescale to the larger scale, `*` adds scales (at most
//!   18, else a [`QueryError::Scale`]), so `SUM(l_extendedprice * (1 - l_discount) *
//!   (1 + l_tax))` is exact at scale 6. Comparisons against constants are rewritten at
//!   plan time to the column's scale with floor/ceil (`x < 0.065` on scale 2 is `x < 7`
//!   in cents), so no literal is ever rounded and no float is ever used.
//! * **Division.** `INT / INT` truncates toward zero (PostgreSQL). With a decimal
//!   operand the result has scale `max(6, s_left, s_right)`, rounded half away from
//!   zero from the exact `i128` quotient. Division by zero on a selected row is an
//!   [`EvalError::DivisionByZero`].
//! * **Aggregates.** `SUM` of `INT` is `INT`, of `DECIMAL(s)` is `DECIMAL(s)`, summed in
//!   `i128`. `AVG` keeps the exact sum and count and rounds once at the end to scale
//!   `max(6, s)`, half away from zero ([`plan::avg_scale`]). `COUNT(x)` equals
//!   `COUNT(*)` (no NULLs). `SUM`/`AVG`/`MIN`/`MAX` over no rows are `NULL`.
//! * **Dates.** `DATE ± INTERVAL 'n' DAY` works on any date expression; `MONTH`/`YEAR`
//!   intervals are calendar arithmetic on date literals only, folded at plan time (the
//!   day is clamped to the month's end, as in PostgreSQL). `DATE - DATE` is `INT` days.
//! * **Order.** Without `ORDER BY`, groups come out in ascending key order (so the
//!   result never depends on how pages were split across channels or devices) and
//!   projected rows in page order. `ORDER BY` is a stable sort on output columns;
//!   `NULL` sorts last.
//! * **Names.** Table and column names match ASCII case-insensitively.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod agg;
pub mod build;
pub mod error;
pub mod eval;
mod kernels;
pub mod plan;
pub mod planner;
pub mod result;
pub mod types;

pub use agg::{AccView, AggState};
pub use error::{EvalError, QueryError};
pub use eval::{Evaluator, WorkCounters};
pub use kernels::cmp_padded;
pub use plan::{
    AggFunc, AggOutput, Aggregate, Aggregation, ArithOp, CmpOp, Const, Expr, ExprKind, Output,
    OutputColumn, Plan, SortKey,
};
pub use planner::{Catalog, plan};
pub use result::{ColumnData, PartialResult, QueryResult, RowChunk};
pub use types::{DataType, Value};
