//! Partial results from any split of the pages (per page, per "device", in any order
//! or merge tree) merge into exactly the one-pass result.

use csd_query::{EvalError, Evaluator, PartialResult, Plan, QueryResult, plan};
use csd_table::datagen::{TpchGenerator, TpchTable};
use csd_table::{Layout, PageView, Paginator, Schema};

fn lineitem_pages(sf: f64, layout: Layout) -> Vec<Vec<u8>> {
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

fn one_pass(p: &Plan, schema: &Schema, pages: &[Vec<u8>]) -> QueryResult {
    let mut e = Evaluator::new(p);
    let mut part = PartialResult::new(p);
    for pg in pages {
        e.eval_page(&PageView::parse(pg, schema).expect("page"), &mut part)
            .expect("evaluates");
    }
    part.finish(p).expect("finishes")
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

const AGG_QUERIES: &[&str] = &[
    // TPC-H Q1 shape: 2-byte packed keys
    "SELECT l_returnflag, l_linestatus, SUM(l_quantity), SUM(l_extendedprice * (1 - l_discount) * (1 + l_tax)), \
            AVG(l_discount), COUNT(*), MIN(l_shipdate), MAX(l_comment), MIN(l_extendedprice) \
     FROM lineitem WHERE l_shipdate <= DATE '1998-12-01' - INTERVAL '90' DAY \
     GROUP BY l_returnflag, l_linestatus ORDER BY l_returnflag, l_linestatus",
    // a 10-byte key, no ORDER BY
    "SELECT l_shipmode, COUNT(l_orderkey), AVG(l_quantity), MAX(l_receiptdate) FROM lineitem \
     WHERE l_quantity < 30 GROUP BY l_shipmode",
    // a 25 + 10 byte key (hash-map path) with many groups
    "SELECT l_shipinstruct, l_shipmode, SUM(l_tax), MIN(l_linenumber) FROM lineitem GROUP BY l_shipinstruct, l_shipmode",
    // more than 16 groups with a packed key (hash-map lookup of packed keys)
    "SELECT l_linenumber, l_returnflag, l_discount, COUNT(*) FROM lineitem GROUP BY l_linenumber, l_returnflag, l_discount",
    // global aggregate
    "SELECT SUM(l_extendedprice * l_discount), COUNT(*), AVG(l_extendedprice), MIN(l_shipmode) FROM lineitem \
     WHERE l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01'",
];

#[test]
fn aggregate_partials_merge_into_the_one_pass_result() {
    let schema = TpchTable::LineItem.schema();
    for layout in [Layout::Nsm, Layout::Pax] {
        let pages = lineitem_pages(0.01, layout);
        assert!(pages.len() > 1000);
        for sql in AGG_QUERIES {
            let p = plan(sql, &schema).expect("plans");
            let want = one_pass(&p, &schema, &pages);
            assert!(!want.rows.is_empty());
            // forward, reverse, shuffled, tree-shaped
            let forward = merge_all(&p, per_page(&p, &schema, &pages));
            assert_eq!(forward.finish(&p).expect("finish"), want, "{sql}");
            let mut rev = per_page(&p, &schema, &pages);
            rev.reverse();
            assert_eq!(
                merge_all(&p, rev).finish(&p).expect("finish"),
                want,
                "{sql}"
            );
            let mut shuffled = per_page(&p, &schema, &pages);
            shuffle(&mut shuffled, 0x9E37_79B9_7F4A_7C15);
            assert_eq!(
                merge_tree(shuffled).finish(&p).expect("finish"),
                want,
                "{sql}"
            );
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
            assert_eq!(a.finish(&p).expect("finish"), want, "{sql}");
            let total = evals[0].totals() + evals[1].totals();
            assert_eq!(total.pages, pages.len() as u64);
        }
    }
}

#[test]
fn projection_chunks_concatenate() {
    let schema = TpchTable::LineItem.schema();
    let pages = lineitem_pages(0.01, Layout::Pax);
    let p = plan(
        "SELECT l_orderkey, l_linenumber, l_extendedprice * (1 - l_discount) AS net, l_shipdate, l_shipmode \
         FROM lineitem WHERE l_discount = 0.1 AND l_shipmode IN ('AIR', 'RAIL')",
        &schema,
    )
    .expect("plans");
    let want = one_pass(&p, &schema, &pages);
    assert!(want.rows.len() > 100);
    let got = merge_all(&p, per_page(&p, &schema, &pages));
    assert_eq!(got.len(), want.rows.len());
    assert_eq!(got.finish(&p).expect("finish"), want);
}

#[test]
fn group_limit_is_enforced() {
    let schema = TpchTable::LineItem.schema();
    let pages = lineitem_pages(0.001, Layout::Pax);
    let p = plan(
        "SELECT l_shipmode, COUNT(*) FROM lineitem GROUP BY l_shipmode",
        &schema,
    )
    .expect("plans");
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
