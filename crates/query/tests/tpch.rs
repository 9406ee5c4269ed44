//! TPC-H Q1 and Q6 through the planner and the evaluator, page by page, for NSM and
//! PAX, against references computed here straight from `tpchgen`'s row structs (an
//! independent path: no csd-table row images, no evaluator), and against the official
//! SF 1 answers shipped with `tpchgen`.

use std::collections::BTreeMap;

use csd_query::{Evaluator, PartialResult, Plan, QueryResult, Value, WorkCounters, plan};
use csd_table::datagen::{TpchGenerator, TpchTable};
use csd_table::date::parse_date;
use csd_table::{Layout, PageView, Paginator};

/// The benchmark's own query texts with the validation parameters substituted.
fn q1_sql() -> String {
    tpchgen::q_and_a::queries::Q1.replace("':1'", "'90'")
}

fn q6_sql() -> String {
    tpchgen::q_and_a::queries::Q6
        .replace("':1'", "'1994-01-01'")
        .replace(":2", "0.06")
        .replace(":3", "24")
}

/// Runs `plans` over every page of LINEITEM at `sf` in `layout`, one evaluator and one
/// partial result per plan.
fn run(
    sf: f64,
    layout: Layout,
    page_size: usize,
    plans: &[&Plan],
) -> Vec<(QueryResult, WorkCounters)> {
    let schema = TpchTable::LineItem.schema();
    let mut evals: Vec<Evaluator> = plans.iter().map(|p| Evaluator::new(p)).collect();
    let mut parts: Vec<PartialResult> = plans.iter().map(|p| PartialResult::new(p)).collect();
    let mut pages = Paginator::new(
        TpchGenerator::new(TpchTable::LineItem, sf).expect("sf"),
        layout,
        page_size,
    )
    .expect("paginator");
    while let Some(page) = pages.next_page() {
        let view = PageView::parse(page, &schema).expect("valid page");
        for (e, p) in evals.iter_mut().zip(parts.iter_mut()) {
            e.eval_page(&view, p).expect("evaluates");
        }
    }
    assert!(pages.error().is_none());
    plans
        .iter()
        .zip(parts)
        .zip(&evals)
        .map(|((plan, part), e)| (part.finish(plan).expect("finishes"), e.totals()))
        .collect()
}

fn day(s: &str) -> i32 {
    parse_date(s).expect("date")
}

/// Q6 from tpchgen rows: (revenue at scale 4, qualifying rows, all rows).
fn q6_reference(sf: f64) -> (i128, u64, u64) {
    let (lo, hi) = (day("1994-01-01"), day("1995-01-01"));
    let (mut sum, mut hits, mut rows) = (0i128, 0u64, 0u64);
    for l in tpchgen::generators::LineItemGenerator::new(sf, 1, 1).iter() {
        rows += 1;
        let ship = l.l_shipdate.to_unix_epoch();
        let d = l.l_discount.0;
        if ship >= lo && ship < hi && (5..=7).contains(&d) && l.l_quantity < 24 {
            sum += i128::from(l.l_extendedprice.0) * i128::from(d);
            hits += 1;
        }
    }
    (sum, hits, rows)
}

#[derive(Default)]
struct Q1Group {
    qty: i128,
    base: i128,
    disc_price: i128,
    charge: i128,
    disc: i128,
    count: i128,
}

fn round_div(n: i128, d: i128) -> i128 {
    // half away from zero; all values here are non-negative
    (2 * n + d) / (2 * d)
}

/// Q1 from tpchgen rows, as result rows.
fn q1_reference(sf: f64) -> (Vec<Vec<Value>>, u64) {
    let cutoff = day("1998-12-01") - 90;
    let mut groups: BTreeMap<(String, String), Q1Group> = BTreeMap::new();
    let mut hits = 0;
    for l in tpchgen::generators::LineItemGenerator::new(sf, 1, 1).iter() {
        if l.l_shipdate.to_unix_epoch() > cutoff {
            continue;
        }
        hits += 1;
        let g = groups
            .entry((l.l_returnflag.to_string(), l.l_linestatus.to_string()))
            .or_default();
        let (price, disc, tax) = (
            i128::from(l.l_extendedprice.0),
            i128::from(l.l_discount.0),
            i128::from(l.l_tax.0),
        );
        g.qty += i128::from(l.l_quantity) * 100;
        g.base += price;
        g.disc_price += price * (100 - disc);
        g.charge += price * (100 - disc) * (100 + tax);
        g.disc += disc;
        g.count += 1;
    }
    let dec = |units, scale| Value::Decimal { units, scale };
    let rows = groups
        .into_iter()
        .map(|((rf, ls), g)| {
            vec![
                Value::Char(rf.into_bytes()),
                Value::Char(ls.into_bytes()),
                dec(g.qty, 2),
                dec(g.base, 2),
                dec(g.disc_price, 4),
                dec(g.charge, 6),
                // AVG of scale-2 values: scale 6, i.e. sum * 10^4 / count
                dec(round_div(g.qty * 10_000, g.count), 6),
                dec(round_div(g.base * 10_000, g.count), 6),
                dec(round_div(g.disc * 10_000, g.count), 6),
                Value::Int(g.count),
            ]
        })
        .collect();
    (rows, hits)
}

#[test]
fn q6_and_q1_at_sf_001_match_references_in_both_layouts() {
    let schema = TpchTable::LineItem.schema();
    let q6 = plan(&q6_sql(), &schema).expect("Q6 plans");
    let q1 = plan(&q1_sql(), &schema).expect("Q1 plans");
    let (q6_sum, q6_hits, rows) = q6_reference(0.01);
    let (q1_rows, q1_hits) = q1_reference(0.01);
    assert!(q6_hits > 0 && q1_rows.len() == 4);
    for (layout, page_size) in [
        (Layout::Nsm, 8192),
        (Layout::Pax, 8192),
        (Layout::Pax, 16384),
    ] {
        let out = run(0.01, layout, page_size, &[&q6, &q1]);
        let (r6, c6) = &out[0];
        assert_eq!(
            r6.rows,
            vec![vec![Value::Decimal {
                units: q6_sum,
                scale: 4
            }]],
            "{layout}"
        );
        assert_eq!(r6.columns[0].name, "revenue");
        assert_eq!(c6.records_examined, rows);
        assert_eq!(c6.rows_selected, q6_hits);
        assert_eq!(c6.agg_updates, q6_hits);
        let (r1, c1) = &out[1];
        assert_eq!(r1.rows, q1_rows, "{layout}");
        assert_eq!(c1.rows_selected, q1_hits);
        let names: Vec<&str> = r1.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "l_returnflag",
                "l_linestatus",
                "sum_qty",
                "sum_base_price",
                "sum_disc_price",
                "sum_charge",
                "avg_qty",
                "avg_price",
                "avg_disc",
                "count_order"
            ]
        );
    }
}

/// Parses a TBL answer (`a|b|c` lines after a header) into rows of trimmed strings.
fn answer_rows(num: i32) -> Vec<Vec<String>> {
    let text = tpchgen::q_and_a::answers_sf1::answer(num).expect("answer");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .skip(1)
        .map(|l| l.split('|').map(|c| c.trim().to_string()).collect())
        .collect()
}

/// A value rounded to two decimals, the way the official answers print.
fn cents(v: &Value) -> String {
    match v {
        Value::Decimal { units, scale } => {
            let p = 10i128.pow(u32::from(*scale) - 2);
            let c = (units + p / 2) / p;
            format!("{}.{:02}", c / 100, c % 100)
        }
        other => other.to_string(),
    }
}

/// TPC-H at SF 1 (6 001 215 rows through 8 KiB PAX pages): Q6 equals the official
/// 123141078.23 and every Q1 cell equals the official answer (rounded to cents).
#[test]
fn sf1_q6_and_q1_match_official_answers() {
    let schema = TpchTable::LineItem.schema();
    let q6 = plan(&q6_sql(), &schema).expect("Q6 plans");
    let q1 = plan(&q1_sql(), &schema).expect("Q1 plans");
    let out = run(1.0, Layout::Pax, 8192, &[&q6, &q1]);
    let revenue = &out[0].0.rows[0][0];
    assert_eq!(cents(revenue), "123141078.23");
    assert_eq!(answer_rows(6), vec![vec!["123141078.23".to_string()]]);
    let expected = answer_rows(1);
    let got: Vec<Vec<String>> = out[1]
        .0
        .rows
        .iter()
        .map(|r| r.iter().map(cents).collect())
        .collect();
    assert_eq!(got, expected);
    assert_eq!(out[0].1.records_examined, 6_001_215);
}
