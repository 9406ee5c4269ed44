//! Aggregates of the same input (TPC-H Q1's `SUM(l_quantity)` and `AVG(l_quantity)`)
//! take its values computed once per page: the results, the work counters a device's
//! cost model charges and the column reads are those of evaluating every aggregate's
//! input on its own, in both layouts, grouped by few groups, by many, and not grouped.

mod common;

use common::{agg, aggregation, cmp, col, date, disc_price, lineitem_pages, q1};
use csd_query::{AggFunc, CmpOp, Evaluator, PartialResult, Plan};
use csd_table::datagen::TpchTable;
use csd_table::{Layout, PageView, Schema};

fn plans(s: &Schema) -> Vec<Plan> {
    use AggFunc::*;
    let c = |n: &str| col(s, n);
    let disc_price = || disc_price(s);
    let shared = |group_by: &[&str]| {
        aggregation(
            s,
            group_by,
            vec![
                agg(Min, Some(c("l_quantity"))),
                agg(Sum, Some(c("l_quantity"))),
                agg(Avg, Some(c("l_quantity"))),
                agg(Max, Some(c("l_quantity"))),
                agg(Count, Some(c("l_quantity"))),
                agg(Avg, Some(disc_price())),
                agg(Sum, Some(disc_price())),
                agg(Sum, Some(c("l_discount"))),
                agg(Avg, Some(c("l_shipdate"))),
                agg(Sum, Some(c("l_shipdate"))),
            ],
            Some(cmp(CmpOp::Le, c("l_shipdate"), date("1997-09-02"))),
        )
    };
    vec![
        q1(s),
        shared(&["l_returnflag", "l_linestatus"]),
        shared(&[]),
        shared(&["l_partkey"]),
    ]
}

/// The partial result, work counters and column reads of one evaluator over `pages`.
fn run(mut e: Evaluator, p: &Plan, s: &Schema, pages: &[Vec<u8>]) -> (PartialResult, String) {
    let mut part = PartialResult::new(p);
    for pg in pages {
        e.eval_page(&PageView::parse(pg, s).expect("page"), &mut part)
            .expect("evaluates");
    }
    (part, format!("{:?} {:?}", e.totals(), e.column_reads()))
}

#[test]
fn shared_aggregate_inputs_give_every_result_and_counter_of_separate_ones() {
    let schema = TpchTable::LineItem.schema();
    for layout in [Layout::Pax, Layout::Nsm] {
        let pages = lineitem_pages(0.005, layout);
        for p in plans(&schema) {
            let (shared, shared_counters) = run(Evaluator::new(&p), &p, &schema, &pages);
            let (alone, alone_counters) =
                run(Evaluator::new(&p).share_inputs(false), &p, &schema, &pages);
            assert_eq!(shared, alone, "{layout:?}: results differ");
            assert_eq!(
                shared_counters, alone_counters,
                "{layout:?}: counters differ"
            );
            assert!(!shared.is_empty(), "{layout:?}: the test folds rows");
        }
    }
}
