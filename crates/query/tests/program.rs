//! The evaluator on device programs built with the typed builder, over a small hand-made
//! table in both layouts: exact decimal comparisons, blank-padded strings, boolean logic,
//! runtime errors only on selected rows, the work counters a cost model charges, and
//! pages of another table. (Selection semantics through SQL, against a naive reference,
//! are a property test in csd-sql.)

mod common;

use common::{agg, aggregation, arith, cmp, col, num, pages, text};
use csd_query::build::{self, BinaryArith};
use csd_query::{AccView, AggFunc, CmpOp, EvalError, Evaluator, Expr, PartialResult, Plan};
use csd_table::{Column, ColumnType, Layout, PageView, Schema, Value as TValue};

const MODES: [&str; 5] = ["MAIL", "SHIP", "AIR", "REG AIR", "TRUCK"];
const FLAGS: [&str; 3] = ["A", "N", "R"];
const N: i64 = 300;

fn schema() -> Schema {
    Schema::new(
        "t",
        vec![
            Column::new("id", ColumnType::Int32),
            Column::new("big", ColumnType::Int64),
            Column::new("price", ColumnType::Decimal { scale: 2 }),
            Column::new("disc", ColumnType::Decimal { scale: 2 }),
            Column::new("flag", ColumnType::Char(1)),
            Column::new("mode", ColumnType::Char(10)),
        ],
    )
    .expect("schema")
}

struct Row {
    id: i64,
    disc: i64,
    flag: &'static str,
    mode: &'static str,
}

fn row(i: i64) -> Row {
    Row {
        id: i,
        disc: i % 11,
        flag: FLAGS[(i % 3) as usize],
        mode: MODES[(i % 5) as usize],
    }
}

fn values() -> Vec<Vec<TValue>> {
    (0..N)
        .map(|i| {
            let r = row(i);
            vec![
                TValue::Int32(i as i32),
                TValue::Int64(i * 1_000_000_007 - 5_000_000_000),
                TValue::Decimal((i * 12_347) % 100_000 + 1),
                TValue::Decimal(r.disc),
                TValue::Char(r.flag.as_bytes().to_vec()),
                TValue::Char(r.mode.as_bytes().to_vec()),
            ]
        })
        .collect()
}

/// Evaluates `p` over the table's pages in `layout`: the partial result and the work.
fn eval(p: &Plan, layout: Layout) -> Result<(PartialResult, csd_query::WorkCounters), EvalError> {
    eval_sized(p, layout, 256)
}

/// [`eval`] with pages of `page_bytes`.
fn eval_sized(
    p: &Plan,
    layout: Layout,
    page_bytes: usize,
) -> Result<(PartialResult, csd_query::WorkCounters), EvalError> {
    let s = schema();
    let mut e = Evaluator::new(p);
    let mut part = PartialResult::new(p);
    for pg in pages(&s, &values(), layout, page_bytes) {
        e.eval_page(&PageView::parse(&pg, &s).expect("page"), &mut part)?;
    }
    Ok((part, e.totals()))
}

/// Rows `filter` selects, the same in both layouts.
fn count(filter: Expr) -> i64 {
    let s = schema();
    let p = aggregation(&s, &[], vec![agg(AggFunc::CountStar, None)], Some(filter));
    let counts = [Layout::Nsm, Layout::Pax].map(|l| match eval(&p, l).expect("runs").0 {
        PartialResult::Aggregate(st) => st.group_rows()[0] as i64,
        PartialResult::Rows(_) => panic!("rows"),
    });
    assert_eq!(counts[0], counts[1], "layouts agree");
    counts[0]
}

fn reference(pred: impl Fn(&Row) -> bool) -> i64 {
    (0..N).map(row).filter(|r| pred(r)).count() as i64
}

fn c(name: &str) -> Expr {
    col(&schema(), name)
}

#[test]
fn decimal_constants_compare_exactly_against_scaled_columns() {
    // 0.065 at scale 3 against a scale-2 column: no rounding either way.
    let k = || num(65, 3);
    assert_eq!(
        count(cmp(CmpOp::Lt, c("disc"), k())),
        reference(|r| r.disc <= 6)
    );
    assert_eq!(
        count(cmp(CmpOp::Le, c("disc"), k())),
        reference(|r| r.disc <= 6)
    );
    assert_eq!(
        count(cmp(CmpOp::Gt, c("disc"), k())),
        reference(|r| r.disc >= 7)
    );
    assert_eq!(
        count(cmp(CmpOp::Ge, c("disc"), k())),
        reference(|r| r.disc >= 7)
    );
    assert_eq!(count(cmp(CmpOp::Eq, c("disc"), k())), 0);
    assert_eq!(count(cmp(CmpOp::Ne, c("disc"), k())), N);
    assert_eq!(
        count(cmp(CmpOp::Eq, c("disc"), num(60, 3))),
        reference(|r| r.disc == 6)
    );
    // the constant on the left is flipped
    assert_eq!(
        count(cmp(CmpOp::Gt, num(65, 3), c("disc"))),
        reference(|r| r.disc <= 6)
    );
    // IN drops constants that cannot be equal at the column's scale
    let list = build::in_list(
        c("disc"),
        vec![num(5, 2), num(65, 3), num(700, 4)],
        false,
        "in",
    )
    .expect("in");
    assert_eq!(count(list), reference(|r| r.disc == 5 || r.disc == 7));
    // arithmetic rescales exactly: disc + 0.005 > 0.1  <=>  disc >= 0.1
    let sum = arith(BinaryArith::Add, c("disc"), num(5, 3));
    assert_eq!(
        count(cmp(CmpOp::Gt, sum, num(1, 1))),
        reference(|r| r.disc >= 10)
    );
}

#[test]
fn strings_compare_blank_padded() {
    let by_mode = |f: &dyn Fn(&str) -> bool| reference(|r| f(r.mode));
    let eq = |s: &str| count(cmp(CmpOp::Eq, c("mode"), text(s)));
    assert_eq!(eq("AIR"), by_mode(&|m| m == "AIR"));
    assert_eq!(eq("AIR      "), by_mode(&|m| m == "AIR"));
    assert_eq!(eq("AIR            X"), 0);
    assert_eq!(
        count(cmp(CmpOp::Lt, c("mode"), text("MAIL"))),
        by_mode(&|m| m < "MAIL")
    );
    let like = |p: &str, neg: bool| {
        count(build::like(c("mode"), p.as_bytes().to_vec(), neg).expect("like"))
    };
    assert_eq!(like("REG", false), by_mode(&|m| m.starts_with("REG")));
    assert_eq!(like("REG AIR   ", false), by_mode(&|m| m == "REG AIR"));
    assert_eq!(like("S", true), by_mode(&|m| !m.starts_with('S')));
    assert_eq!(like("", false), N);
    let in_list = build::in_list(
        c("mode"),
        vec![text("MAIL"), text("SHIP"), text("NONE")],
        false,
        "in",
    )
    .expect("in");
    assert_eq!(count(in_list), by_mode(&|m| m == "MAIL" || m == "SHIP"));
    assert_eq!(
        count(cmp(CmpOp::Gt, c("mode"), c("flag"))),
        reference(|r| r.mode > r.flag)
    );
}

#[test]
fn boolean_logic() {
    let flag = |f: &str| cmp(CmpOp::Eq, c("flag"), text(f));
    let id_lt = |v: i64| cmp(CmpOp::Lt, c("id"), num(v, 0));
    let e = build::and(vec![
        build::or(vec![flag("A"), cmp(CmpOp::Eq, c("disc"), num(1, 1))]),
        build::negate(id_lt(50)),
    ]);
    assert_eq!(
        count(e),
        reference(|r| (r.flag == "A" || r.disc == 10) && r.id >= 50)
    );
    let e = build::or(vec![flag("A"), flag("N"), id_lt(10)]);
    assert_eq!(
        count(e),
        reference(|r| r.flag == "A" || r.flag == "N" || r.id < 10)
    );
    let t = build::like(c("mode"), b"T".to_vec(), false).expect("like");
    let e = build::negate(build::and(vec![flag("A"), build::or(vec![id_lt(100), t])]));
    assert_eq!(
        count(e),
        reference(|r| !(r.flag == "A" && (r.id < 100 || r.mode.starts_with('T'))))
    );
    assert_eq!(count(Expr::boolean(true)), N);
    assert_eq!(
        count(build::or(vec![
            Expr::boolean(false),
            cmp(CmpOp::Eq, c("id"), num(7, 0))
        ])),
        1
    );
}

#[test]
fn runtime_errors_only_on_selected_rows() {
    let s = schema();
    let quotient = || arith(BinaryArith::Div, c("price"), c("disc"));
    let all = Plan::projection("t", &s, &[], None).expect("plan");
    let divide = |filter: Option<Expr>| Plan {
        output: csd_query::Output::Project(vec![quotient()]),
        filter,
        ..all.clone()
    };
    let e = eval(&divide(None), Layout::Pax).unwrap_err();
    assert!(matches!(e, EvalError::DivisionByZero { .. }), "{e}");
    assert_eq!(e.to_string(), "division by zero in (price / disc)");
    let nonzero = cmp(CmpOp::Ne, c("disc"), num(0, 0));
    assert!(eval(&divide(Some(nonzero)), Layout::Nsm).is_ok());
    // OR evaluates its second term only on the rows the first did not select
    let guarded = build::or(vec![
        cmp(CmpOp::Eq, c("disc"), num(0, 0)),
        cmp(CmpOp::Gt, quotient(), num(1, 0)),
    ]);
    let p = aggregation(&s, &[], vec![agg(AggFunc::CountStar, None)], Some(guarded));
    assert!(eval(&p, Layout::Pax).is_ok());
    // i64 overflow is an error, never a wrapped value; sums are i128
    let square = Plan {
        output: csd_query::Output::Project(vec![arith(BinaryArith::Mul, c("big"), c("big"))]),
        ..all.clone()
    };
    let e = eval(&square, Layout::Nsm).unwrap_err();
    assert_eq!(e.to_string(), "arithmetic overflow in (big * big)");
    let big = arith(BinaryArith::Mul, c("big"), num(10_000_000, 0));
    let p = aggregation(
        &s,
        &[],
        vec![agg(AggFunc::Sum, Some(big))],
        Some(cmp(CmpOp::Gt, c("big"), num(0, 0))),
    );
    let PartialResult::Aggregate(st) = eval(&p, Layout::Pax).expect("sums in i128").0 else {
        panic!("aggregate")
    };
    let Some(AccView::Sum(sum)) = st.accumulator(0) else {
        panic!("sum")
    };
    assert!(sum[0] > i128::from(i64::MAX));
}

#[test]
fn counters_follow_the_narrowing_selection() {
    let s = schema();
    let filter = build::and(vec![
        cmp(CmpOp::Lt, c("id"), num(10, 0)),
        cmp(CmpOp::Eq, c("disc"), num(5, 2)),
    ]);
    let p = aggregation(&s, &[], vec![agg(AggFunc::CountStar, None)], Some(filter));
    for layout in [Layout::Nsm, Layout::Pax] {
        let (r, w) = eval(&p, layout).expect("runs");
        assert_eq!(r.len(), 1);
        assert_eq!(w.records_examined, N as u64);
        // the second term only sees the 10 rows the first one kept
        assert_eq!(w.predicates_evaluated, N as u64 + 10);
        assert_eq!(w.rows_selected, 1);
        assert_eq!(w.agg_updates, 1);
        assert!(w.bytes_touched >= N as u64 * 4);
    }
    let id_mode = Plan::projection("t", &s, &[0, 5], Some(cmp(CmpOp::Lt, c("id"), num(10, 0))))
        .expect("plan");
    let (r, w) = eval(&id_mode, Layout::Pax).expect("runs");
    assert_eq!(r.len(), 10);
    assert_eq!(w.results_written, 10);
    assert_eq!(w.result_bytes, 10 * (8 + 10));
    assert_eq!(r.wire_bytes(), w.result_bytes);
    // the filter alone (a hardware filter stage): row indices within each page
    let p = Plan::projection(
        "t",
        &s,
        &[0],
        Some(build::or(vec![
            cmp(CmpOp::Lt, c("id"), num(3, 0)),
            cmp(CmpOp::Ge, c("id"), num(298, 0)),
        ])),
    )
    .expect("plan");
    let mut e = Evaluator::new(&p);
    let mut got = Vec::new();
    let mut sel = Vec::new();
    let mut base = 0u32;
    for pg in pages(&s, &values(), Layout::Pax, 4096) {
        let view = PageView::parse(&pg, &s).expect("page");
        let w = e.select(&view, &mut sel).expect("selects");
        assert_eq!(w.rows_selected, sel.len() as u64);
        got.extend(sel.iter().map(|i| base + i));
        base += view.row_count() as u32;
    }
    assert_eq!(got, vec![0, 1, 2, 298, 299]);
    assert_eq!(e.totals().records_examined, N as u64);
}

#[test]
fn pages_of_another_table_are_rejected() {
    let s = schema();
    let other = Schema::new("u", vec![Column::new("id", ColumnType::Int32)]).expect("schema");
    let p = aggregation(&other, &[], vec![agg(AggFunc::CountStar, None)], None);
    let pg = pages(&s, &values(), Layout::Pax, 4096);
    let view = PageView::parse(&pg[0], &s).expect("page");
    let mut e = Evaluator::new(&p);
    let mut part = PartialResult::new(&p);
    let err = e.eval_page(&view, &mut part).unwrap_err();
    assert!(matches!(err, EvalError::WrongTable { .. }), "{err}");
    assert!(err.to_string().contains("belongs to table 't'"));
    // a partial result of another program is refused too
    let rows = Plan::projection("t", &s, &[0], None).expect("plan");
    let mut wrong = PartialResult::new(&rows);
    let counting = aggregation(&s, &[], vec![agg(AggFunc::CountStar, None)], None);
    let mut e = Evaluator::new(&counting);
    assert!(matches!(
        e.eval_page(&view, &mut wrong),
        Err(EvalError::PlanMismatch(_))
    ));
    assert!(PartialResult::new(&counting).merge(wrong).is_err());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(96))]

    /// Two comparisons bounding one column from both sides run as one pass in the
    /// evaluator; the rows it keeps and every work counter (what the device cost model
    /// charges) must equal evaluating the two in turn. A constant TRUE between them keeps
    /// them apart (it neither selects nor counts), giving the reference.
    #[test]
    fn a_range_pair_selects_and_counts_as_its_two_comparisons(
        column in 0usize..4,
        op1 in 0usize..4,
        op2 in 0usize..4,
        a in -40i64..340,
        b in -40i64..340,
        third in proptest::prelude::any::<bool>(),
        page_bytes in proptest::prop_oneof![proptest::strategy::Just(256usize), proptest::strategy::Just(4096)],
    ) {
        let s = schema();
        let ops = [CmpOp::Ge, CmpOp::Gt, CmpOp::Lt, CmpOp::Le];
        let (name, k): (&str, fn(i64) -> Expr) = match column {
            0 => ("id", |v| num(v, 0)),
            1 => ("big", |v| num(v * 1_000_000_007 - 5_000_000_000, 0)),
            2 => ("price", |v| num(v * 300, 2)),
            _ => ("disc", |v| num(v / 30, 2)),
        };
        let t1 = cmp(ops[op1], c(name), k(a));
        let t2 = cmp(ops[op2], c(name), k(b));
        let t3 = cmp(CmpOp::Lt, c("id"), num(200, 0));
        let apart = Expr::constant(csd_query::Const::Bool(true), csd_query::DataType::Bool);
        let mut fused = vec![t1.clone(), t2.clone()];
        let mut split = vec![t1, apart, t2];
        if third {
            fused.push(t3.clone());
            split.push(t3);
        }
        let plans = |f: Expr| {
            [
                aggregation(&s, &[], vec![agg(AggFunc::CountStar, None)], Some(f.clone())),
                Plan::projection("t", &s, &[0, 2], Some(f)).expect("plan"),
            ]
        };
        // (`build::and` would drop the constant: the conjunction is built as it is.)
        let and = |t: Vec<Expr>| Expr::new(csd_query::ExprKind::And(t), csd_query::DataType::Bool);
        for (pf, ps) in plans(and(fused)).iter().zip(plans(and(split)).iter()) {
            for layout in [Layout::Nsm, Layout::Pax] {
                let (rf, wf) = eval_sized(pf, layout, page_bytes).expect("fused runs");
                let (rs, ws) = eval_sized(ps, layout, page_bytes).expect("split runs");
                proptest::prop_assert_eq!(&rf, &rs, "{:?} {} rows", layout, page_bytes);
                proptest::prop_assert_eq!(wf, ws, "{:?} {} counters", layout, page_bytes);
            }
        }
    }
}

/// A column, how a key becomes a constant of its type, and a row's key.
type InListCase = (&'static str, fn(i64) -> Expr, fn(&Row) -> i64);

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// A numeric `IN` list over a column (read straight from the page, without first
    /// gathering its values) selects the rows whose value is one of the constants, or,
    /// negated, the others; in both layouts, on 4- and 8-byte and decimal columns, with
    /// constants inside and outside the column's range.
    #[test]
    fn a_numeric_in_list_over_a_column_selects_its_rows(
        column in 0usize..3,
        items in proptest::collection::vec(-20i64..330, 1..12),
        neg in proptest::prelude::any::<bool>(),
    ) {
        let (name, k, of): InListCase = match column {
            0 => ("id", |v| num(v, 0), |r| r.id),
            1 => ("big", |v| num(v * 1_000_000_007 - 5_000_000_000, 0), |r| r.id),
            _ => ("disc", |v| num(v, 2), |r| r.disc),
        };
        let list = build::in_list(c(name), items.iter().map(|&v| k(v)).collect(), neg, "in")
            .expect("in");
        let want = reference(|r| items.contains(&of(r)) != neg);
        proptest::prop_assert_eq!(count(list), want);
    }
}

/// A disjunction of equalities of one `CHAR` column with constants, which a PAX page
/// evaluates in one pass over its minipage, selects the rows and counts the work of
/// evaluating it term by term, as an NSM page (no minipage) still does: each term on the
/// rows no earlier term took, none once every row is taken. Constants padded with blanks,
/// too long for the column, repeated, or on the left of `=` included.
#[test]
fn char_equalities_in_one_pass_count_as_term_by_term() {
    let s = schema();
    let c = |n: &str| col(&s, n);
    let lists: [&[&str]; 6] = [
        &["MAIL", "SHIP"],
        &["TRUCK", "AIR", "NONE"],
        &["MAIL", "MAIL", "AIR   "],
        &["REG AIR", "MAIL", "SHIP", "AIR", "TRUCK", "MAIL"],
        &["TRUCK      X", "SHIP"],
        &[
            "SHIP", "AIR", "TRUCK", "REG AIR", "MAIL", "RAIL", "FOB", "AIR",
        ],
    ];
    for (n, list) in lists.iter().enumerate() {
        let terms = list
            .iter()
            .enumerate()
            .map(|(k, m)| {
                if (n + k) % 3 == 2 {
                    cmp(CmpOp::Eq, text(m), c("mode"))
                } else {
                    cmp(CmpOp::Eq, c("mode"), text(m))
                }
            })
            .collect();
        let p = aggregation(
            &s,
            &[],
            vec![agg(AggFunc::CountStar, None)],
            Some(build::or(terms)),
        );
        let [(nsm, wn), (pax, wp)] = [Layout::Nsm, Layout::Pax].map(|l| eval(&p, l).expect("runs"));
        assert_eq!(nsm, pax, "{list:?}");
        let want = reference(|r| list.iter().any(|m| m.trim_end() == r.mode));
        assert_eq!(wp.rows_selected as i64, want, "{list:?}");
        assert_eq!(
            (wn.predicates_evaluated, wn.values_touched, wn.bytes_touched),
            (wp.predicates_evaluated, wp.values_touched, wp.bytes_touched),
            "{list:?}"
        );
        assert!(
            wp.predicates_evaluated > N as u64,
            "{list:?}: later terms ran"
        );
    }
}
