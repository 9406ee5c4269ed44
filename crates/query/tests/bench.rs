//! Evaluator speed (wall clock of the emulator, not modeled time): the device programs
//! of TPC-H Q6, Q1 and a selective projection over LINEITEM at SF 0.1 in PAX and NSM
//! pages.
//!
//! Ignored by default; run in release:
//!
//! ```text
//! cargo test --release -p csd-query --test bench -- --ignored --nocapture
//! ```
//!
//! Pages are generated into memory first (not timed); each query is then timed over
//! all pages, best of several runs, for two cases: evaluation of already parsed pages,
//! and `PageView::parse_unverified` + evaluation (what a device does per page after an
//! ECC-checked read).

use std::time::{Duration, Instant};

mod common;

use csd_query::{CmpOp, Evaluator, PartialResult, Plan};
use csd_table::datagen::{TpchGenerator, TpchTable};
use csd_table::{Layout, PageView, Paginator, Schema};

const SF: f64 = 0.1;
const RUNS: usize = 5;

fn pages(layout: Layout) -> Vec<Vec<u8>> {
    let mut p = Paginator::new(
        TpchGenerator::new(TpchTable::LineItem, SF).expect("sf"),
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

fn best(mut f: impl FnMut() -> u64) -> (Duration, u64) {
    let mut best = Duration::MAX;
    let mut check = 0;
    for _ in 0..RUNS {
        let t = Instant::now();
        check = f();
        best = best.min(t.elapsed());
    }
    (best, check)
}

fn time_parsed(p: &Plan, views: &[PageView<'_>]) -> (Duration, u64) {
    best(|| {
        let mut e = Evaluator::new(p);
        let mut part = PartialResult::new(p);
        for v in views {
            e.eval_page(v, &mut part).expect("evaluates");
        }
        std::hint::black_box(part.len());
        e.totals().rows_selected
    })
}

fn time_with_parse(p: &Plan, schema: &Schema, pages: &[Vec<u8>]) -> (Duration, u64) {
    best(|| {
        let mut e = Evaluator::new(p);
        let mut part = PartialResult::new(p);
        for pg in pages {
            let v = PageView::parse_unverified(pg, schema).expect("page");
            e.eval_page(&v, &mut part).expect("evaluates");
        }
        std::hint::black_box(part.len());
        e.totals().rows_selected
    })
}

#[test]
#[ignore = "benchmark: run in release with --ignored --nocapture"]
fn evaluator_rows_per_second_pax_vs_nsm() {
    let schema = TpchTable::LineItem.schema();
    // sel 1%: l_orderkey, l_extendedprice WHERE l_quantity < 1.5
    let sel = Plan::projection(
        "lineitem",
        &schema,
        &[
            schema.column_index("l_orderkey").expect("column"),
            schema.column_index("l_extendedprice").expect("column"),
        ],
        Some(common::cmp(
            CmpOp::Lt,
            common::col(&schema, "l_quantity"),
            common::num(15, 1),
        )),
    )
    .expect("columns");
    let queries = [
        ("Q6", common::q6(&schema)),
        ("Q1", common::q1(&schema)),
        ("sel 1%", sel),
    ];
    println!(
        "LINEITEM SF {SF}, 8 KiB pages, best of {RUNS} runs; Mrows/s = rows on the pages per second"
    );
    println!(
        "{:<7} {:<4} {:>7} {:>9} {:>10} {:>12} {:>10} {:>14}",
        "query", "lay", "pages", "rows", "selected", "eval ms", "Mrows/s", "+parse Mrows/s"
    );
    for layout in [Layout::Pax, Layout::Nsm] {
        let pg = pages(layout);
        let views: Vec<PageView<'_>> = pg
            .iter()
            .map(|p| PageView::parse(p, &schema).expect("page"))
            .collect();
        let rows: u64 = views.iter().map(|v| v.row_count() as u64).sum();
        for (name, p) in &queries {
            let (t, selected) = time_parsed(p, &views);
            let (t2, _) = time_with_parse(p, &schema, &pg);
            println!(
                "{:<7} {:<4} {:>7} {:>9} {:>10} {:>12.2} {:>10.1} {:>14.1}",
                name,
                layout,
                pg.len(),
                rows,
                selected,
                t.as_secs_f64() * 1e3,
                rows as f64 / t.as_secs_f64() / 1e6,
                rows as f64 / t2.as_secs_f64() / 1e6
            );
        }
    }
}
