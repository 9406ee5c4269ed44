//! The one implementation of row-level changes to a table page (flixr §4.3, §6.1
//! Insert/Delete): parse a page's rows, rebuild the page from rows, and plan where new
//! rows go given the free space of candidate pages. Used by the FLIXR row store
//! ([`crate::rowstore`]: 4 KiB NSM pages) and by INSERT / UPDATE / DELETE on catalog
//! tables ([`crate::dml`]: NSM or PAX pages of the device's flash-page size).
//!
//! Choices: a page is changed by rebuilding it whole from its rows (csd-table's NSM pages
//! keep their rows packed, `slot[i] == H + i*W`, so a deletion compacts the page; PAX
//! pages are rebuilt the same way), and the caller writes it back whole. Free space is a
//! free-row count per page; [`plan_insert`] fills candidate pages in the order given
//! (lowest page first, as a heap's free-space map does) and then opens new pages.

use csd_table::{Layout, PageBuilder, PageView, Schema, Value};

/// The rows of `page` as values (none when the page does not parse as a page of
/// `schema`, e.g. an LBA never written).
pub fn parse_rows(schema: &Schema, page: &[u8]) -> Vec<Vec<Value>> {
    let Ok(v) = PageView::parse(page, schema) else {
        return Vec::new();
    };
    (0..v.row_count())
        .filter_map(|i| v.row_values(i).ok())
        .collect()
}

/// A page of `page_bytes` in `layout` holding `rows` (checked against `schema`).
pub fn build_page(
    schema: &Schema,
    layout: Layout,
    page_bytes: usize,
    rows: &[Vec<Value>],
) -> Result<Vec<u8>, csd_table::page::PageError> {
    let mut b = PageBuilder::new(schema.clone(), layout, page_bytes)?;
    for r in rows {
        b.push_values(r)?;
    }
    Ok(b.finish().to_vec())
}

/// Where `n` new rows go: `(page, rows)` in order, filling the candidate pages
/// `(page, free rows)` in the order given, then new pages `next_new, next_new + 1, ...`
/// of `cap` rows each, up to `max_pages` pages in all. `None` when they do not fit.
pub fn plan_insert(
    candidates: impl IntoIterator<Item = (u64, usize)>,
    n: usize,
    cap: usize,
    next_new: u64,
    max_pages: u64,
) -> Option<Vec<(u64, usize)>> {
    let mut plan = Vec::new();
    let mut left = n;
    let mut candidates = candidates.into_iter();
    let mut next_new = next_new;
    while left > 0 {
        let (p, free) = match candidates.next() {
            Some((_, 0)) => continue,
            Some(c) => c,
            None => {
                if next_new >= max_pages || cap == 0 {
                    return None;
                }
                next_new += 1;
                (next_new - 1, cap)
            }
        };
        let k = free.min(left);
        plan.push((p, k));
        left -= k;
    }
    Some(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use csd_table::{Column, ColumnType};

    fn schema() -> Schema {
        Schema::new(
            "t",
            vec![
                Column::new("k", ColumnType::Int64),
                Column::new("s", ColumnType::Char(4)),
            ],
        )
        .unwrap()
    }

    #[test]
    fn pages_round_trip_in_both_layouts_and_empty_pages_parse() {
        let s = schema();
        let rows = vec![
            vec![Value::Int64(1), Value::Char(b"ab  ".to_vec())],
            vec![Value::Int64(-7), Value::Char(b"wxyz".to_vec())],
        ];
        for layout in Layout::ALL {
            let p = build_page(&s, layout, 512, &rows).unwrap();
            assert_eq!(parse_rows(&s, &p), rows);
            let e = build_page(&s, layout, 512, &[]).unwrap();
            assert!(parse_rows(&s, &e).is_empty());
            assert!(PageView::parse(&e, &s).is_ok());
        }
        assert!(parse_rows(&s, &[0u8; 512]).is_empty());
    }

    #[test]
    fn plan_fills_candidates_in_order_then_new_pages() {
        let p = plan_insert([(3, 2), (5, 0), (1, 4)], 9, 4, 10, 12).unwrap();
        assert_eq!(p, vec![(3, 2), (1, 4), (10, 3)]);
        assert_eq!(plan_insert([], 9, 4, 10, 12), None);
        assert_eq!(plan_insert([], 0, 4, 10, 10), Some(vec![]));
    }
}
