//! Helpers shared by the integration tests: device programs over TPC-H lineitem built
//! with the typed builder (what csd-sql makes of DataFusion's plans), pages, and a
//! canonical form of aggregation states.

#![allow(dead_code)]

use csd_query::build::{self, BinaryArith};
use csd_query::plan::avg_scale;
use csd_query::{
    AccView, AggFunc, AggState, Aggregate, Aggregation, CmpOp, Const, DataType, Expr, Plan,
};
use csd_table::datagen::{TpchGenerator, TpchTable};
use csd_table::date::parse_date;
use csd_table::{Layout, PageBuilder, Paginator, Schema, Value as TValue};

/// Lineitem pages of 8 KiB at scale factor `sf`.
pub fn lineitem_pages(sf: f64, layout: Layout) -> Vec<Vec<u8>> {
    let mut p = Paginator::new(
        TpchGenerator::new(TpchTable::LineItem, sf).expect("sf"),
        layout,
        8192,
    )
    .expect("paginator");
    let mut out = Vec::new();
    while let Some(page) = p.next_page() {
        out.push(page.to_vec());
    }
    out
}

/// Pages (`page_size` bytes, `layout`) holding `rows` in order.
pub fn pages(
    schema: &Schema,
    rows: &[Vec<TValue>],
    layout: Layout,
    page_size: usize,
) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut b = PageBuilder::new(schema.clone(), layout, page_size).expect("builder");
    for r in rows {
        if b.is_full() {
            out.push(b.finish().to_vec());
            b.reset();
        }
        b.push_values(r).expect("row fits the schema");
    }
    if !b.is_empty() || out.is_empty() {
        out.push(b.finish().to_vec());
    }
    out
}

/// Column `name` of `schema`.
pub fn col(schema: &Schema, name: &str) -> Expr {
    let i = schema.column_index(name).expect("column");
    Expr::column(schema, i).expect("column")
}

/// The number `units * 10^-scale` (an `INT` at scale 0).
pub fn num(units: i64, scale: u8) -> Expr {
    let ty = if scale == 0 {
        DataType::Int
    } else {
        DataType::Decimal { scale }
    };
    Expr::constant(Const::Int(units), ty)
}

/// `DATE 'yyyy-mm-dd'`.
pub fn date(d: &str) -> Expr {
    Expr::constant(
        Const::Int(i64::from(parse_date(d).expect("date"))),
        DataType::Date,
    )
}

/// A string constant.
pub fn text(s: &str) -> Expr {
    let n = u16::try_from(s.len()).expect("short");
    Expr::constant(Const::Char(s.as_bytes().to_vec()), DataType::Char(n))
}

/// `l op r`.
pub fn cmp(op: CmpOp, l: Expr, r: Expr) -> Expr {
    build::compare(op, l, r, "test").expect("comparison")
}

/// `l op r`.
pub fn arith(op: BinaryArith, l: Expr, r: Expr) -> Expr {
    build::arith(op, l, r, "test").expect("arithmetic")
}

/// An aggregate typed as csd-sql types it.
pub fn agg(func: AggFunc, arg: Option<Expr>) -> Aggregate {
    let ty = match (&arg, func) {
        (_, AggFunc::Count | AggFunc::CountStar) | (None, _) => DataType::Int,
        (Some(a), AggFunc::Avg) => DataType::Decimal {
            scale: avg_scale(a.ty.scale().unwrap_or(0)),
        },
        (Some(a), _) => a.ty,
    };
    Aggregate { func, arg, ty }
}

/// An aggregation over `schema` grouped by the named columns.
pub fn aggregation(
    schema: &Schema,
    group_by: &[&str],
    aggregates: Vec<Aggregate>,
    filter: Option<Expr>,
) -> Plan {
    let group_by = group_by
        .iter()
        .map(|g| schema.column_index(g).expect("group column"))
        .collect();
    Plan::aggregation(
        schema.name(),
        schema,
        Aggregation {
            group_by,
            aggregates,
        },
        filter,
    )
}

/// One group of an aggregation state: key bytes, rows, each accumulator as text.
pub type Group = (Vec<u8>, u64, Vec<String>);

/// The state's groups in key order (the order groups were first seen depends on how
/// pages were split; the state does not).
pub fn canon(st: &AggState, aggregates: usize) -> Vec<Group> {
    let keys = st.group_columns().len();
    let mut out: Vec<Group> = (0..st.group_count())
        .map(|g| {
            let key: Vec<u8> = (0..keys)
                .flat_map(|i| st.key_bytes(g, i).to_vec())
                .collect();
            let accs = (0..aggregates)
                .map(|a| match st.accumulator(a).expect("aggregate") {
                    AccView::Count(r) => r[g].to_string(),
                    AccView::Sum(s) => s[g].to_string(),
                    AccView::MinMax { val, seen } => format!("{:?}", seen[g].then_some(val[g])),
                    AccView::MinMaxChar { val, seen } => {
                        format!("{:?}", seen[g].then_some(&val[g]))
                    }
                    AccView::MinMaxWide { val, seen } => {
                        format!("{:?}", seen[g].then_some(val[g]))
                    }
                })
                .collect();
            (key, st.group_rows()[g], accs)
        })
        .collect();
    out.sort();
    out
}

/// TPC-H Q6's device program (validation parameters): its filter and
/// `SUM(l_extendedprice * l_discount)`.
pub fn q6(s: &Schema) -> Plan {
    let c = |n: &str| col(s, n);
    aggregation(
        s,
        &[],
        vec![agg(
            AggFunc::Sum,
            Some(arith(
                BinaryArith::Mul,
                c("l_extendedprice"),
                c("l_discount"),
            )),
        )],
        Some(build::and(vec![
            cmp(CmpOp::Ge, c("l_shipdate"), date("1994-01-01")),
            cmp(CmpOp::Lt, c("l_shipdate"), date("1995-01-01")),
            cmp(CmpOp::Ge, c("l_discount"), num(5, 2)),
            cmp(CmpOp::Le, c("l_discount"), num(7, 2)),
            cmp(CmpOp::Lt, c("l_quantity"), num(24, 0)),
        ])),
    )
}

/// `l_extendedprice * (1 - l_discount)` of lineitem schema `s`.
pub fn disc_price(s: &Schema) -> Expr {
    arith(
        BinaryArith::Mul,
        col(s, "l_extendedprice"),
        arith(BinaryArith::Sub, num(1, 0), col(s, "l_discount")),
    )
}

/// TPC-H Q1's device program (validation parameters): the partial aggregation of its
/// eight aggregates per (l_returnflag, l_linestatus).
pub fn q1(s: &Schema) -> Plan {
    use AggFunc::*;
    let c = |n: &str| col(s, n);
    let disc_price = || disc_price(s);
    aggregation(
        s,
        &["l_returnflag", "l_linestatus"],
        vec![
            agg(Sum, Some(c("l_quantity"))),
            agg(Sum, Some(c("l_extendedprice"))),
            agg(Sum, Some(disc_price())),
            agg(
                Sum,
                Some(arith(
                    BinaryArith::Mul,
                    disc_price(),
                    arith(BinaryArith::Add, num(1, 0), c("l_tax")),
                )),
            ),
            agg(Avg, Some(c("l_quantity"))),
            agg(Avg, Some(c("l_extendedprice"))),
            agg(Avg, Some(c("l_discount"))),
            agg(CountStar, None),
        ],
        Some(cmp(CmpOp::Le, c("l_shipdate"), date("1998-09-02"))),
    )
}
