//! Partial results from any split of the pages (per page, per "device", in any order
//! or merge tree) merge into exactly the one-pass result: what lets a device hand its
//! aggregation over in chunks, and several channels or devices scan one table.

mod common;

use common::{agg, aggregation, arith, canon, cmp, col, date, lineitem_pages, num, text};
use csd_query::build::{self, BinaryArith};
use csd_query::{AggFunc, CmpOp, EvalError, Evaluator, PartialResult, Plan};
use csd_table::datagen::TpchTable;
use csd_table::{Layout, PageView, Schema};

fn one_pass(p: &Plan, schema: &Schema, pages: &[Vec<u8>]) -> PartialResult {
    let mut e = Evaluator::new(p);
    let mut part = PartialResult::new(p);
    for pg in pages {
        e.eval_page(&PageView::parse(pg, schema).expect("page"), &mut part)
            .expect("evaluates");
    }
    part
}

fn per_page(p: &Plan, schema: &Schema, pages: &[Vec<u8>]) -> Vec<PartialResult> {
    let mut e = Evaluator::new(p);
    pages
        .iter()
        .map(|pg| {
            let mut part = PartialResult::new(p);
            e.eval_page(&PageView::parse(pg, schema).expect("page"), &mut part)
                .expect("evaluates");
            part
        })
        .collect()
}

fn merge_all(p: &Plan, parts: impl IntoIterator<Item = PartialResult>) -> PartialResult {
    let mut acc = PartialResult::new(p);
    for x in parts {
        acc.merge(x).expect("merges");
    }
    acc
}

/// Merges pairwise, like a reduction tree across channels or devices.
fn merge_tree(mut parts: Vec<PartialResult>) -> PartialResult {
    while parts.len() > 1 {
        let mut next = Vec::with_capacity(parts.len().div_ceil(2));
        let mut it = parts.into_iter();
        while let Some(mut a) = it.next() {
            if let Some(b) = it.next() {
                a.merge(b).expect("merges");
            }
            next.push(a);
        }
        parts = next;
    }
    parts.pop().expect("at least one part")
}

/// A fixed pseudo-random permutation (xorshift), so the test is deterministic.
fn shuffle<T>(v: &mut [T], mut seed: u64) {
    for i in (1..v.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        v.swap(i, (seed % (i as u64 + 1)) as usize);
    }
}

/// The aggregations (what csd-sql pushes into the device for these queries).
fn agg_programs(s: &Schema) -> Vec<Plan> {
    use AggFunc::*;
    let c = |n: &str| col(s, n);
    vec![
        // TPC-H Q1 shape: 2-byte packed keys
        aggregation(
            s,
            &["l_returnflag", "l_linestatus"],
            vec![
                agg(Sum, Some(c("l_quantity"))),
                agg(
                    Sum,
                    Some(arith(
                        BinaryArith::Mul,
                        arith(
                            BinaryArith::Mul,
                            c("l_extendedprice"),
                            arith(BinaryArith::Sub, num(1, 0), c("l_discount")),
                        ),
                        arith(BinaryArith::Add, num(1, 0), c("l_tax")),
                    )),
                ),
                agg(Avg, Some(c("l_discount"))),
                agg(CountStar, None),
                agg(Min, Some(c("l_shipdate"))),
                agg(Max, Some(c("l_comment"))),
                agg(Min, Some(c("l_extendedprice"))),
            ],
            Some(cmp(CmpOp::Le, c("l_shipdate"), date("1998-09-02"))),
        ),
        // a 10-byte key
        aggregation(
            s,
            &["l_shipmode"],
            vec![
                agg(Count, Some(c("l_orderkey"))),
                agg(Avg, Some(c("l_quantity"))),
                agg(Max, Some(c("l_receiptdate"))),
            ],
            Some(cmp(CmpOp::Lt, c("l_quantity"), num(30, 0))),
        ),
        // a 25 + 10 byte key (hash-map path) with many groups
        aggregation(
            s,
            &["l_shipinstruct", "l_shipmode"],
            vec![
                agg(Sum, Some(c("l_tax"))),
                agg(Min, Some(c("l_linenumber"))),
            ],
            None,
        ),
        // more than 16 groups with a packed key (hash-map lookup of packed keys)
        aggregation(
            s,
            &["l_linenumber", "l_returnflag", "l_discount"],
            vec![agg(CountStar, None)],
            None,
        ),
        // global aggregate
        aggregation(
            s,
            &[],
            vec![
                agg(
                    Sum,
                    Some(arith(
                        BinaryArith::Mul,
                        c("l_extendedprice"),
                        c("l_discount"),
                    )),
                ),
                agg(CountStar, None),
                agg(Avg, Some(c("l_extendedprice"))),
                agg(Min, Some(c("l_shipmode"))),
            ],
            Some(build::and(vec![
                cmp(CmpOp::Ge, c("l_shipdate"), date("1994-01-01")),
                cmp(CmpOp::Lt, c("l_shipdate"), date("1995-01-01")),
            ])),
        ),
    ]
}

/// The canonical groups of an aggregation's partial result.
fn groups(p: &Plan, r: &PartialResult) -> Vec<common::Group> {
    let (PartialResult::Aggregate(st), csd_query::Output::Aggregate(a)) = (r, &p.output) else {
        panic!("not an aggregation")
    };
    canon(st, a.aggregates.len())
}

#[test]
fn aggregate_partials_merge_into_the_one_pass_result() {
    let schema = TpchTable::LineItem.schema();
    for layout in [Layout::Nsm, Layout::Pax] {
        let pages = lineitem_pages(0.01, layout);
        assert!(pages.len() > 1000);
        for p in agg_programs(&schema) {
            let sql = p.to_string();
            let want = groups(&p, &one_pass(&p, &schema, &pages));
            assert!(!want.is_empty());
            // forward, reverse, shuffled, tree-shaped
            let forward = merge_all(&p, per_page(&p, &schema, &pages));
            assert_eq!(groups(&p, &forward), want, "{sql}");
            let mut rev = per_page(&p, &schema, &pages);
            rev.reverse();
            assert_eq!(groups(&p, &merge_all(&p, rev)), want, "{sql}");
            let mut shuffled = per_page(&p, &schema, &pages);
            shuffle(&mut shuffled, 0x9E37_79B9_7F4A_7C15);
            assert_eq!(groups(&p, &merge_tree(shuffled)), want, "{sql}");
            // two "devices" scanning interleaved halves, merged on the host
            let mut dev: Vec<PartialResult> = (0..2).map(|_| PartialResult::new(&p)).collect();
            let mut evals: Vec<Evaluator> = (0..2).map(|_| Evaluator::new(&p)).collect();
            for (i, pg) in pages.iter().enumerate() {
                let view = PageView::parse(pg, &schema).expect("page");
                evals[i % 2]
                    .eval_page(&view, &mut dev[i % 2])
                    .expect("evaluates");
            }
            let b = dev.pop().expect("two");
            let mut a = dev.pop().expect("two");
            a.merge(b).expect("merges");
            assert_eq!(groups(&p, &a), want, "{sql}");
            let total = evals[0].totals() + evals[1].totals();
            assert_eq!(total.pages, pages.len() as u64);
        }
    }
}

#[test]
fn projection_chunks_concatenate() {
    let schema = TpchTable::LineItem.schema();
    let pages = lineitem_pages(0.01, Layout::Pax);
    // l_orderkey, l_linenumber, l_extendedprice * (1 - l_discount), l_shipdate,
    // l_shipmode WHERE l_discount = 0.1 AND l_shipmode IN ('AIR', 'RAIL')
    let c = |n: &str| col(&schema, n);
    let filter = build::and(vec![
        cmp(CmpOp::Eq, c("l_discount"), num(1, 1)),
        build::in_list(
            c("l_shipmode"),
            vec![text("AIR"), text("RAIL")],
            false,
            "in",
        )
        .expect("in"),
    ]);
    let net = arith(
        BinaryArith::Mul,
        c("l_extendedprice"),
        arith(BinaryArith::Sub, num(1, 0), c("l_discount")),
    );
    let p = Plan {
        table: "lineitem".into(),
        schema: schema.clone(),
        filter: Some(filter),
        output: csd_query::Output::Project(vec![
            c("l_orderkey"),
            c("l_linenumber"),
            net,
            c("l_shipdate"),
            c("l_shipmode"),
        ]),
    };
    let want = one_pass(&p, &schema, &pages);
    assert!(want.len() > 100);
    let got = merge_all(&p, per_page(&p, &schema, &pages));
    assert_eq!(got, want);
}

#[test]
fn group_limit_is_enforced() {
    let schema = TpchTable::LineItem.schema();
    let pages = lineitem_pages(0.001, Layout::Pax);
    let p = aggregation(
        &schema,
        &["l_shipmode"],
        vec![agg(AggFunc::CountStar, None)],
        None,
    );
    let mut e = Evaluator::new(&p);
    let mut part = PartialResult::with_group_limit(&p, 3);
    let mut err = None;
    for pg in &pages {
        if let Err(x) = e.eval_page(&PageView::parse(pg, &schema).expect("page"), &mut part) {
            err = Some(x);
            break;
        }
    }
    let err = err.expect("7 ship modes exceed 3 groups");
    assert_eq!(err, EvalError::TooManyGroups { limit: 3 });
    assert!(err.to_string().contains("more than 3 groups"));
}
