//! Helpers shared by the integration tests: build pages from typed rows and run SQL
//! over them page by page.

#![allow(dead_code)]

use csd_query::{EvalError, Evaluator, PartialResult, Plan, QueryResult, WorkCounters, plan};
use csd_table::{Layout, PageBuilder, PageView, Schema, Value as TValue};

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

/// Evaluates `plan` over `pages`, one evaluator, one partial result.
pub fn eval(
    plan: &Plan,
    schema: &Schema,
    pages: &[Vec<u8>],
) -> Result<(QueryResult, WorkCounters), EvalError> {
    let mut e = Evaluator::new(plan);
    let mut part = PartialResult::new(plan);
    for p in pages {
        let view = PageView::parse(p, schema).expect("valid page");
        e.eval_page(&view, &mut part)?;
    }
    Ok((part.finish(plan)?, e.totals()))
}

/// Plans and runs `sql` over `rows` in both layouts (small pages, so several of
/// them), checks both layouts agree, and returns the result.
pub fn run(schema: &Schema, rows: &[Vec<TValue>], sql: &str) -> Result<QueryResult, EvalError> {
    let p = plan(sql, schema).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let mut results = Vec::new();
    for (layout, size) in [(Layout::Nsm, 256), (Layout::Pax, 256), (Layout::Pax, 4096)] {
        let pg = pages(schema, rows, layout, size);
        results.push(eval(&p, schema, &pg).map(|(r, _)| r));
    }
    let first = results.remove(0);
    for r in results {
        assert_eq!(r, first, "layouts disagree on {sql}");
    }
    first
}
