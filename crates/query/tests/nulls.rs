//! The device evaluator on users' types (issue 34), against a plain model: filters on
//! nullable FLOAT32 / FLOAT64 columns as Arrow compares floats (zeros equal, NaNs equal
//! and greatest) and on a nullable 128-bit DECIMAL column, and aggregates that skip
//! NULLs (`COUNT(x)`, `SUM`, `AVG`'s count, `MIN`/`MAX`), over NSM and PAX pages split
//! at random.

use csd_query::build;
use csd_query::plan::{AggFunc, Aggregate, Aggregation, CmpOp, Const, Expr};
use csd_query::types::{DataType, f32_key, f64_key};
use csd_query::{AccView, Evaluator, PartialResult, Plan};
use csd_table::{Column, ColumnType, Layout, PageBuilder, PageView, Schema, Value};
use proptest::prelude::*;

/// `(id INT32, x INT64 NULL, f FLOAT32 NULL, g FLOAT64 NULL, d DECIMAL(30, 2) NULL)`.
fn schema() -> Schema {
    Schema::new(
        "t",
        vec![
            Column::new("id", ColumnType::Int32),
            Column::new("x", ColumnType::Int64).with_nullable(true),
            Column::new("f", ColumnType::Float32).with_nullable(true),
            Column::new("g", ColumnType::Float64).with_nullable(true),
            Column::new(
                "d",
                ColumnType::Decimal128 {
                    precision: 30,
                    scale: 2,
                },
            )
            .with_nullable(true),
        ],
    )
    .expect("schema")
}

#[derive(Debug, Clone)]
struct Row {
    x: Option<i64>,
    f: Option<f32>,
    g: Option<f64>,
    d: Option<i128>,
}

fn float32() -> impl Strategy<Value = f32> {
    prop_oneof![
        Just(0.0f32),
        Just(-0.0),
        Just(f32::NAN),
        Just(-f32::NAN),
        Just(f32::INFINITY),
        Just(f32::NEG_INFINITY),
        Just(0.1),
        (-3i32..3).prop_map(|v| v as f32 * 0.5),
    ]
}

fn float64() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(0.0f64),
        Just(-0.0),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(0.1),
        (-3i32..3).prop_map(|v| f64::from(v) * 0.5),
    ]
}

fn row() -> impl Strategy<Value = Row> {
    (
        proptest::option::weighted(0.7, -5i64..5),
        proptest::option::weighted(0.7, float32()),
        proptest::option::weighted(0.7, float64()),
        proptest::option::weighted(
            0.7,
            prop_oneof![Just(i128::MAX / 3), Just(-(i128::MAX / 3)), (-500i128..500),],
        ),
    )
        .prop_map(|(x, f, g, d)| Row { x, f, g, d })
}

/// The rows as pages of at most `per_page` rows.
fn pages(rows: &[Row], layout: Layout, per_page: usize) -> Vec<Vec<u8>> {
    let s = schema();
    rows.chunks(per_page.max(1))
        .map(|chunk| {
            let mut b = PageBuilder::new(s.clone(), layout, 8192).expect("builder");
            for (i, r) in chunk.iter().enumerate() {
                let v = vec![
                    Value::Int32(i as i32),
                    r.x.map_or(Value::Null, Value::Int64),
                    r.f.map_or(Value::Null, |f| Value::Float32(f.to_bits())),
                    r.g.map_or(Value::Null, |g| Value::Float64(g.to_bits())),
                    r.d.map_or(Value::Null, Value::Decimal128),
                ];
                b.push_values(&v).expect("push");
            }
            b.finish().to_vec()
        })
        .collect()
}

/// Which rows a filter keeps, by the model.
type Model = Box<dyn Fn(&Row) -> bool>;

/// Arrow's float order (measured with DataFusion): zeros equal, NaNs equal and greatest.
fn arrow_cmp(a: f64, b: f64) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

fn col(i: usize) -> Expr {
    Expr::column(&schema(), i).expect("column")
}

proptest! {
    /// A comparison of a float or DECIMAL(30, 2) column with a constant selects the rows
    /// whose value is not NULL and compares as `total_cmp` / exact integers do.
    #[test]
    fn float_and_wide_decimal_filters_match_the_model(
        rows in proptest::collection::vec(row(), 0..200),
        per_page in 1usize..80,
        layout in prop_oneof![Just(Layout::Nsm), Just(Layout::Pax)],
        op in prop_oneof![Just(CmpOp::Eq), Just(CmpOp::Ne), Just(CmpOp::Lt),
                          Just(CmpOp::Le), Just(CmpOp::Gt), Just(CmpOp::Ge)],
        cf in float32(),
        cg in float64(),
        cd in -600i128..600,
    ) {
        let s = schema();
        let filters: Vec<(Expr, Model)> = vec![
            (
                build::compare(op, col(2), Expr::constant(Const::Int(f32_key(cf)), DataType::Float32), "f").expect("f"),
                Box::new(move |r: &Row| r.f.is_some_and(|v| op.holds(arrow_cmp(f64::from(v), f64::from(cf))))),
            ),
            (
                build::compare(op, col(3), Expr::constant(Const::Int(f64_key(cg)), DataType::Float64), "g").expect("g"),
                Box::new(move |r: &Row| r.g.is_some_and(|v| op.holds(arrow_cmp(v, cg)))),
            ),
            (
                // d op cd / 10 (a constant of scale 1 against a scale-2 column).
                build::compare(op, col(4), Expr::constant(Const::Int(cd as i64), DataType::Decimal { scale: 1 }), "d").expect("d"),
                Box::new(move |r: &Row| r.d.is_some_and(|v| op.holds(v.cmp(&(cd * 10))))),
            ),
        ];
        let mut filters = filters;
        // CAST(f AS DOUBLE) op g-constant: rewritten to a FLOAT32 constant; a NaN
        // constant is refused (left to the host).
        let widened = build::compare(op, col(2), Expr::constant(Const::Int(f64_key(cg)), DataType::Float64), "f2");
        if cg.is_nan() {
            prop_assert!(widened.is_err(), "a NaN constant against FLOAT32 is refused");
        } else {
            filters.push((
                widened.expect("f2"),
                Box::new(move |r: &Row| r.f.is_some_and(|v| op.holds(arrow_cmp(f64::from(v), cg)))),
            ));
        }
        for (filter, model) in &filters {
            let plan = Plan::projection("t", &s, &[0], Some(filter.clone())).expect("plan");
            let mut ev = Evaluator::new(&plan);
            let mut got = Vec::new();
            let mut base = 0;
            for p in pages(&rows, layout, per_page) {
                let view = PageView::parse(&p, &s).expect("page");
                let mut sel = Vec::new();
                ev.select(&view, &mut sel).expect("select");
                got.extend(sel.iter().map(|&i| base + i as usize));
                base += view.row_count();
            }
            let want: Vec<usize> = (0..rows.len()).filter(|&i| model(&rows[i])).collect();
            prop_assert_eq!(got, want, "filter {}", filter);
        }
    }

    /// COUNT(*), COUNT(x), SUM(x), MIN/MAX(x) skip NULLs: equal to the model
    /// whatever the page split, and the states of two halves merge into the whole.
    #[test]
    fn aggregates_skip_nulls_as_the_model(
        rows in proptest::collection::vec(row(), 0..200),
        per_page in 1usize..80,
        layout in prop_oneof![Just(Layout::Nsm), Just(Layout::Pax)],
    ) {
        let s = schema();
        let agg = |func, arg: Option<Expr>, ty| Aggregate { func, arg, ty };
        let aggregation = Aggregation {
            group_by: vec![],
            aggregates: vec![
                agg(AggFunc::CountStar, None, DataType::Int),
                agg(AggFunc::Count, Some(col(1)), DataType::Int),
                agg(AggFunc::Sum, Some(col(1)), DataType::Int),
                agg(AggFunc::Min, Some(col(1)), DataType::Int),
                agg(AggFunc::Max, Some(col(1)), DataType::Int),
                agg(AggFunc::Count, Some(col(4)), DataType::Int),
            ],
        };
        let plan = Plan::aggregation("t", &s, aggregation, None);
        let all = pages(&rows, layout, per_page);
        let half = all.len() / 2;
        let mut parts = Vec::new();
        for part in [&all[..half], &all[half..]] {
            let mut ev = Evaluator::new(&plan);
            let mut out = PartialResult::new(&plan);
            for p in part {
                ev.eval_page(&PageView::parse(p, &s).expect("page"), &mut out).expect("eval");
            }
            parts.push(out);
        }
        let (PartialResult::Aggregate(mut st), PartialResult::Aggregate(b)) =
            (parts.remove(0), parts.remove(0)) else {
            panic!("not an aggregation");
        };
        st.merge(*b).expect("merge");
        let xs: Vec<i64> = rows.iter().filter_map(|r| r.x).collect();
        prop_assert_eq!(st.value_rows(0).expect("count(*)"), &[rows.len() as u64][..]);
        prop_assert_eq!(st.value_rows(1).expect("count(x)"), &[xs.len() as u64][..]);
        prop_assert_eq!(st.value_rows(2).expect("sum(x) values"), &[xs.len() as u64][..]);
        match st.accumulator(2) {
            Some(AccView::Sum(v)) => prop_assert_eq!(v[0], xs.iter().map(|&x| i128::from(x)).sum::<i128>()),
            other => prop_assert!(false, "sum: {:?}", other),
        }
        for (a, want) in [(3, xs.iter().min()), (4, xs.iter().max())] {
            match st.accumulator(a) {
                Some(AccView::MinMax { val, seen }) => {
                    prop_assert_eq!(seen[0].then(|| val[0]), want.copied())
                }
                other => prop_assert!(false, "min/max(x): {:?}", other),
            }
        }
        let nd = rows.iter().filter(|r| r.d.is_some()).count() as u64;
        prop_assert_eq!(st.value_rows(5).expect("count(d)"), &[nd][..]);
    }
}

/// `(id INT32, d DECIMAL(30, 2) NULL, s VARCHAR NULL)`.
fn wide_schema() -> Schema {
    Schema::new(
        "w",
        vec![
            Column::new("id", ColumnType::Int32),
            Column::new(
                "d",
                ColumnType::Decimal128 {
                    precision: 30,
                    scale: 2,
                },
            )
            .with_nullable(true),
            Column::new("s", ColumnType::Varchar).with_nullable(true),
        ],
    )
    .expect("schema")
}

/// Pages of `(d, s)` rows, at most `per_page` each.
fn wide_pages(
    rows: &[(Option<i128>, Option<String>)],
    layout: Layout,
    per_page: usize,
) -> Vec<Vec<u8>> {
    let s = wide_schema();
    rows.chunks(per_page.max(1))
        .map(|chunk| {
            let mut b = PageBuilder::new(s.clone(), layout, 8192).expect("builder");
            for (i, (d, t)) in chunk.iter().enumerate() {
                let v = vec![
                    Value::Int32(i as i32),
                    d.map_or(Value::Null, Value::Decimal128),
                    t.clone().map_or(Value::Null, Value::Varchar),
                ];
                b.push_values(&v).expect("push");
            }
            b.finish().to_vec()
        })
        .collect()
}

/// The aggregation of `plan` over `pages`, split in two halves merged.
fn aggregate(plan: &Plan, pages: &[Vec<u8>]) -> Result<csd_query::AggState, csd_query::EvalError> {
    let s = &plan.schema;
    let half = pages.len() / 2;
    let mut parts = Vec::new();
    for part in [&pages[..half], &pages[half..]] {
        let mut ev = Evaluator::new(plan);
        let mut out = PartialResult::new(plan);
        for p in part {
            ev.eval_page(&PageView::parse(p, s).expect("page"), &mut out)?;
        }
        parts.push(out);
    }
    let (PartialResult::Aggregate(mut st), PartialResult::Aggregate(b)) =
        (parts.remove(0), parts.remove(0))
    else {
        panic!("not an aggregation");
    };
    st.merge(*b)?;
    Ok(*st)
}

proptest! {
    /// SUM / MIN / MAX of a nullable DECIMAL(30, 2) in 128 bits and MIN / MAX of a
    /// nullable VARCHAR byte for byte (unicode, trailing blanks, empty strings) skip
    /// NULLs as the model does, whatever the page split and layout.
    #[test]
    fn wide_decimal_and_varchar_aggregates_match_the_model(
        rows in proptest::collection::vec((
            proptest::option::weighted(0.7, prop_oneof![
                -10i128.pow(27)..10i128.pow(27),
                -500i128..500,
            ]),
            proptest::option::weighted(0.7, "[a-c é日🙂 ]{0,6}"),
        ), 0..150),
        per_page in 1usize..60,
        layout in prop_oneof![Just(Layout::Nsm), Just(Layout::Pax)],
    ) {
        let s = wide_schema();
        let c = |i| Expr::column(&s, i).expect("column");
        let wide = DataType::Decimal128 { precision: 30, scale: 2 };
        let agg = |func, i: usize, ty| Aggregate { func, arg: Some(c(i)), ty };
        let plan = Plan::aggregation("w", &s, Aggregation {
            group_by: vec![],
            aggregates: vec![
                agg(AggFunc::Sum, 1, wide),
                agg(AggFunc::Min, 1, wide),
                agg(AggFunc::Max, 1, wide),
                agg(AggFunc::Min, 2, DataType::Varchar),
                agg(AggFunc::Max, 2, DataType::Varchar),
            ],
        }, None);
        let st = aggregate(&plan, &wide_pages(&rows, layout, per_page)).expect("aggregate");
        let ds: Vec<i128> = rows.iter().filter_map(|r| r.0).collect();
        let ss: Vec<&[u8]> = rows.iter().filter_map(|r| r.1.as_deref().map(str::as_bytes)).collect();
        prop_assert_eq!(st.value_rows(0).expect("sum values"), &[ds.len() as u64][..]);
        match st.accumulator(0) {
            Some(AccView::Sum(v)) => prop_assert_eq!(v[0], ds.iter().sum::<i128>()),
            other => prop_assert!(false, "sum: {:?}", other),
        }
        for (a, want) in [(1, ds.iter().min()), (2, ds.iter().max())] {
            match st.accumulator(a) {
                Some(AccView::MinMaxWide { val, seen }) => {
                    prop_assert_eq!(seen[0].then(|| val[0]), want.copied())
                }
                other => prop_assert!(false, "min/max(d): {:?}", other),
            }
        }
        for (a, want) in [(3, ss.iter().min()), (4, ss.iter().max())] {
            match st.accumulator(a) {
                Some(AccView::MinMaxChar { val, seen }) => {
                    prop_assert_eq!(seen[0].then(|| val[0].as_slice()), want.copied())
                }
                other => prop_assert!(false, "min/max(s): {:?}", other),
            }
        }
    }
}

/// A SUM of DECIMAL(p, s) values beyond 128 bits is an overflow error (DataFusion's
/// would wrap around), never a wrong sum.
#[test]
fn a_wide_sum_beyond_128_bits_is_an_overflow() {
    let s = wide_schema();
    let wide = DataType::Decimal128 {
        precision: 30,
        scale: 2,
    };
    let plan = Plan::aggregation(
        "w",
        &s,
        Aggregation {
            group_by: vec![],
            aggregates: vec![Aggregate {
                func: AggFunc::Sum,
                arg: Some(Expr::column(&s, 1).expect("column")),
                ty: wide,
            }],
        },
        None,
    );
    let big = Some(i128::MAX / 2 + 1);
    let rows = vec![(big, None), (big, None)];
    let e = aggregate(&plan, &wide_pages(&rows, Layout::Pax, 8)).expect_err("overflow");
    assert!(matches!(e, csd_query::EvalError::Overflow { .. }), "{e}");
}
