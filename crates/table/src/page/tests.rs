use super::*;
use crate::datagen::{RowSource, SyntheticGenerator, SyntheticSpec, TpchTable, synthetic};
use crate::schema::{Column, ColumnType, Schema, Value};
use proptest::prelude::*;

fn small_schema() -> Schema {
    Schema::new(
        "small",
        vec![
            Column::new("k", ColumnType::Int64),
            Column::new("v", ColumnType::Int32),
            Column::new("d", ColumnType::Date),
            Column::new("p", ColumnType::Decimal { scale: 2 }),
            Column::new("s", ColumnType::Char(3)),
        ],
    )
    .expect("valid")
}

fn small_row(i: i64) -> Vec<Value> {
    vec![
        Value::Int64(i * 1_000_000_007),
        Value::Int32(-(i as i32)),
        Value::Date(8035 + i as i32),
        Value::Decimal(i * 100 + 5),
        Value::Char(format!("{}", i % 1000).into_bytes()),
    ]
}

fn build(schema: &Schema, layout: Layout, page_size: usize, rows: usize) -> Vec<u8> {
    let mut b = PageBuilder::new(schema.clone(), layout, page_size).expect("builder");
    for i in 0..rows {
        b.push_values(&small_row(i as i64)).expect("push");
    }
    b.finish().to_vec()
}

#[test]
fn capacity_math() {
    let li = TpchTable::LineItem.schema().row_width();
    assert_eq!(li, 148);
    let s4 = synthetic::schema(4).row_width();
    let s16 = synthetic::schema(16).row_width();
    let s64 = synthetic::schema(64).row_width();
    assert_eq!((s4, s16, s64), (16, 64, 256));
    // (row width, page size, NSM rows, PAX rows)
    let cases = [
        (li, 8192, 54, 55),
        (li, 16384, 109, 110),
        (li, 32768, 218, 221),
        (s4, 8192, 453, 510),
        (s4, 16384, 908, 1022),
        (s4, 32768, 1819, 2046),
        (s16, 8192, 123, 127),
        (s16, 16384, 247, 255),
        (s16, 32768, 496, 511),
        (s64, 8192, 31, 31),
        (s64, 16384, 63, 63),
        (s64, 32768, 126, 127),
    ];
    for (w, p, nsm, pax) in cases {
        assert_eq!(rows_per_page(Layout::Nsm, w, p), nsm, "NSM w={w} P={p}");
        assert_eq!(rows_per_page(Layout::Pax, w, p), pax, "PAX w={w} P={p}");
        // the formula: nothing more fits
        assert!(HEADER_LEN + nsm * (w + 2) <= p && HEADER_LEN + (nsm + 1) * (w + 2) > p);
        assert!(HEADER_LEN + pax * w <= p && HEADER_LEN + (pax + 1) * w > p);
    }
    assert_eq!(rows_per_page(Layout::Nsm, 16, 64), 0);
    assert_eq!(rows_per_page(Layout::Pax, 16, MAX_PAGE_SIZE + 1), 0);
    assert_eq!(rows_per_page(Layout::Pax, 0, 8192), 0);
}

#[test]
fn builders_fill_exactly_to_capacity() {
    for (spec, page_size) in [
        (SyntheticSpec::synthetic4(5000, 1).expect("valid"), 8192),
        (SyntheticSpec::synthetic16(5000, 1).expect("valid"), 16384),
        (SyntheticSpec::synthetic64(5000, 1).expect("valid"), 32768),
    ] {
        for layout in Layout::ALL {
            let mut b = PageBuilder::new(spec.schema(), layout, page_size).expect("builder");
            let mut g = SyntheticGenerator::new(spec).expect("valid");
            let mut row = Vec::new();
            let mut n = 0;
            while g.next_row(&mut row) {
                match b.push_row(&row) {
                    Ok(()) => n += 1,
                    Err(PageError::PageFull { capacity }) => {
                        assert_eq!(capacity, n);
                        break;
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            assert_eq!(
                n,
                rows_per_page(layout, spec.schema().row_width(), page_size)
            );
            assert!(b.is_full());
            assert_eq!(b.finish().len(), page_size);
        }
    }
}

#[test]
fn lineitem_pages_hold_the_paper_tuples() {
    let schema = TpchTable::LineItem.schema();
    for layout in Layout::ALL {
        let mut pages = Paginator::new(
            crate::datagen::TpchGenerator::new(TpchTable::LineItem, 0.001).expect("sf"),
            layout,
            8192,
        )
        .expect("paginator");
        let cap = pages.capacity();
        assert_eq!(cap, rows_per_page(layout, 148, 8192));
        let mut counts = Vec::new();
        while let Some(p) = pages.next_page() {
            assert_eq!(p.len(), 8192);
            let v = PageView::parse(p, &schema).expect("valid page");
            counts.push(v.row_count());
        }
        let rows: usize = counts.iter().sum();
        assert_eq!(rows as u64, pages.rows());
        assert_eq!(counts.len() as u64, pages.pages());
        assert!(pages.error().is_none());
        // every page but the last is full
        let (last, full) = counts.split_last().expect("pages");
        assert!(full.iter().all(|&n| n == cap) && *last >= 1 && *last <= cap);
    }
}

/// A source whose rows are one byte too short for its schema.
struct BrokenSource(Schema, usize);

impl RowSource for BrokenSource {
    fn schema(&self) -> &Schema {
        &self.0
    }
    fn next_row(&mut self, row: &mut Vec<u8>) -> bool {
        self.1 += 1;
        row.clear();
        row.resize(self.0.row_width() - usize::from(self.1 > 3), 0);
        self.1 < 10
    }
}

#[test]
fn paginator_reports_a_broken_source() {
    let mut p = Paginator::new(BrokenSource(small_schema(), 0), Layout::Nsm, 4096).expect("ok");
    let page = p.next_page().expect("the three good rows").to_vec();
    assert_eq!(
        PageView::parse(&page, &small_schema())
            .expect("valid")
            .row_count(),
        3
    );
    assert!(p.next_page().is_none());
    assert!(matches!(p.error(), Some(PageError::Schema(_))));
}

#[test]
fn header_bytes_are_as_documented() {
    let s = small_schema();
    let page = build(&s, Layout::Nsm, 4096, 3);
    assert_eq!(&page[0..4], b"CSDP");
    assert_eq!(page[4], 1);
    assert_eq!(page[5], PAGE_VERSION);
    assert_eq!(u16::from_le_bytes([page[6], page[7]]), 24);
    assert_eq!(u32::from_le_bytes(page[8..12].try_into().expect("4")), 4096);
    assert_eq!(
        u32::from_le_bytes(page[12..16].try_into().expect("4")),
        s.fingerprint()
    );
    assert_eq!(u32::from_le_bytes(page[16..20].try_into().expect("4")), 3);
    assert_eq!(
        u32::from_le_bytes(page[20..24].try_into().expect("4")),
        page_checksum(&page)
    );
    // NSM: row 1 at 24 + W, slot 1 at P - 4
    let w = s.row_width();
    let row1 = s.encode_row_vec(&small_row(1)).expect("row");
    assert_eq!(&page[24 + w..24 + 2 * w], &row1[..]);
    assert_eq!(
        u16::from_le_bytes([page[4092], page[4093]]) as usize,
        24 + w
    );
    // PAX: column v (offset 8, width 4) of row 2 at 24 + C*8 + 2*4
    let page = build(&s, Layout::Pax, 4096, 3);
    assert_eq!(page[4], 2);
    let cap = rows_per_page(Layout::Pax, w, 4096);
    let at = 24 + cap * 8 + 2 * 4;
    assert_eq!(
        i32::from_le_bytes(page[at..at + 4].try_into().expect("4")),
        -2
    );
    let h = PageHeader::read(&page).expect("header");
    assert_eq!(h.layout, Layout::Pax);
    assert_eq!(h.row_count, 3);
}

#[test]
fn view_accessors_both_layouts() {
    let s = small_schema();
    for layout in Layout::ALL {
        let page = build(&s, layout, 1024, 20);
        let v = PageView::parse(&page, &s).expect("valid");
        assert_eq!(v.layout(), layout);
        assert_eq!(v.row_count(), 20);
        let k = v.column_by_name("k").expect("col");
        assert_eq!(k.len(), 20);
        assert_eq!(k.get_i64(7), Some(7 * 1_000_000_007));
        assert_eq!(k.get_i64(20), None);
        let mut ints = Vec::new();
        v.column(1)
            .expect("col")
            .decode_i64_into(&mut ints)
            .expect("numeric");
        assert_eq!(ints, (0..20).map(|i: i64| -i).collect::<Vec<_>>());
        let mut i32s = Vec::new();
        v.column(2)
            .expect("col")
            .decode_i32_into(&mut i32s)
            .expect("int32");
        assert_eq!(i32s, (0..20).map(|i| 8035 + i).collect::<Vec<_>>());
        assert!(matches!(
            v.column(0).expect("col").decode_i32_into(&mut i32s),
            Err(PageError::NotInt32 { .. })
        ));
        let s_col = v.column(4).expect("col");
        assert!(matches!(
            s_col.decode_i64_into(&mut ints),
            Err(PageError::Schema(crate::SchemaError::NotNumeric { .. }))
        ));
        assert_eq!(s_col.get_i64(0), None);
        let mut bytes = Vec::new();
        s_col.decode_bytes_into(&mut bytes);
        assert_eq!(bytes.len(), 60);
        assert_eq!(&bytes[3 * 12..3 * 13], b"12 ");
        assert_eq!(s_col.raw(12), Some(&b"12 "[..]));
        assert_eq!(s_col.iter_raw().count(), 20);
        assert_eq!(s_col.contiguous().is_some(), layout == Layout::Pax);
        assert_eq!(v.row_bytes(0).is_some(), layout == Layout::Nsm);
        assert_eq!(v.row_values(5).expect("row")[3], Value::Decimal(505));
        assert!(matches!(
            v.copy_row(20, &mut bytes),
            Err(PageError::RowIndex { .. })
        ));
        assert!(matches!(
            v.column_by_name("nope"),
            Err(PageError::Schema(crate::SchemaError::UnknownColumn { .. }))
        ));
        assert!(v.column(5).is_err());
    }
}

#[test]
fn empty_page_round_trips() {
    let s = small_schema();
    for layout in Layout::ALL {
        let page = build(&s, layout, 512, 0);
        let v = PageView::parse(&page, &s).expect("valid");
        assert_eq!(v.row_count(), 0);
        let c = v.column(0).expect("col");
        assert!(c.is_empty());
        let mut out = vec![1];
        c.decode_i64_into(&mut out).expect("numeric");
        assert!(out.is_empty());
    }
}

#[test]
fn builder_errors() {
    let s = small_schema();
    assert!(matches!(
        PageBuilder::new(s.clone(), Layout::Nsm, 100),
        Err(PageError::PageSize { .. })
    ));
    assert!(matches!(
        PageBuilder::new(s.clone(), Layout::Nsm, MAX_PAGE_SIZE + 1),
        Err(PageError::PageSize { .. })
    ));
    let wide = Schema::new("wide", vec![Column::new("x", ColumnType::Char(200))]).expect("valid");
    assert!(matches!(
        PageBuilder::new(wide, Layout::Pax, 128),
        Err(PageError::RowTooWide { .. })
    ));
    let mut b = PageBuilder::new(s.clone(), Layout::Nsm, 128).expect("builder");
    assert!(matches!(b.push_row(&[0u8; 3]), Err(PageError::Schema(_))));
    assert!(matches!(
        b.push_values(&[Value::Int32(1)]),
        Err(PageError::Schema(_))
    ));
    assert!(b.is_empty());
    while !b.is_full() {
        b.push_values(&small_row(1)).expect("push");
    }
    assert!(matches!(
        b.push_values(&small_row(1)),
        Err(PageError::PageFull { .. })
    ));
    assert!(matches!(
        b.push_row(&vec![0u8; s.row_width()]),
        Err(PageError::PageFull { .. })
    ));
    b.reset();
    assert!(b.is_empty());
    assert_eq!("PAX".parse::<Layout>(), Ok(Layout::Pax));
    assert!(matches!(
        "row".parse::<Layout>(),
        Err(PageError::UnknownLayoutName { .. })
    ));
}

#[test]
fn corrupt_and_foreign_pages_are_typed_errors() {
    let s = small_schema();
    let page = build(&s, Layout::Nsm, 1024, 10);

    assert!(matches!(
        PageView::parse(&page[..10], &s),
        Err(PageError::TooShort { .. })
    ));
    assert!(matches!(
        PageView::parse(&page[..1000], &s),
        Err(PageError::PageSizeMismatch { .. })
    ));
    let mut longer = page.clone();
    longer.extend_from_slice(&[0; 24]);
    assert!(matches!(
        PageView::parse(&longer, &s),
        Err(PageError::PageSizeMismatch { .. })
    ));
    assert!(matches!(
        PageView::parse(&[0u8; 1024], &s),
        Err(PageError::BadMagic { .. })
    ));

    let mut p = page.clone();
    p[5] = 9;
    assert!(matches!(
        PageView::parse(&p, &s),
        Err(PageError::UnsupportedVersion { .. })
    ));
    let mut p = page.clone();
    p[4] = 7;
    assert!(matches!(
        PageView::parse(&p, &s),
        Err(PageError::UnknownLayout { code: 7 })
    ));
    let mut p = page.clone();
    p[6] = 25;
    assert!(matches!(
        PageView::parse(&p, &s),
        Err(PageError::HeaderLen { .. })
    ));
    let mut p = page.clone();
    p[500] ^= 0x10;
    assert!(matches!(
        PageView::parse(&p, &s),
        Err(PageError::Checksum { .. })
    ));
    assert!(PageView::parse_unverified(&p, &s).is_ok());

    // a page of another table (valid CRC) is a schema mismatch
    let other = synthetic::schema(4);
    assert!(matches!(
        PageView::parse(&page, &other),
        Err(PageError::SchemaMismatch { .. })
    ));
    let mut b = PageBuilder::new(other.clone(), Layout::Pax, 1024).expect("builder");
    b.push_row(&[0u8; 16]).expect("push");
    assert!(matches!(
        PageView::parse(b.finish(), &s),
        Err(PageError::SchemaMismatch { .. })
    ));

    // structural damage with a recomputed CRC is still caught
    let fix_crc = |p: &mut Vec<u8>| {
        let crc = page_checksum(p);
        p[20..24].copy_from_slice(&crc.to_le_bytes());
    };
    let mut p = page.clone();
    p[16..20].copy_from_slice(&10_000u32.to_le_bytes());
    fix_crc(&mut p);
    assert!(matches!(
        PageView::parse(&p, &s),
        Err(PageError::RowCount { .. })
    ));
    let mut p = page.clone();
    p[1024 - 6] ^= 1; // slot 2
    fix_crc(&mut p);
    assert!(matches!(
        PageView::parse(&p, &s),
        Err(PageError::BadSlot { slot: 2, .. })
    ));
}

#[test]
fn errors_have_actionable_messages() {
    let s = small_schema();
    let page = build(&s, Layout::Nsm, 1024, 1);
    let err = PageView::parse(&page, &synthetic::schema(4)).unwrap_err();
    assert!(err.to_string().contains("another table"), "{err}");
    let err = PageView::parse(&page[..100], &s).unwrap_err();
    assert!(err.to_string().contains("whole pages"), "{err}");
}

// ---------- property tests ----------

fn arb_type() -> impl Strategy<Value = ColumnType> {
    prop_oneof![
        Just(ColumnType::Int32),
        Just(ColumnType::Int64),
        Just(ColumnType::Date),
        (0u8..=18).prop_map(|scale| ColumnType::Decimal { scale }),
        (1u16..=40).prop_map(ColumnType::Char),
    ]
}

fn arb_schema() -> impl Strategy<Value = Schema> {
    prop::collection::vec(arb_type(), 1..12).prop_map(|types| {
        let cols = types
            .into_iter()
            .enumerate()
            .map(|(i, t)| Column::new(format!("col{i}"), t))
            .collect();
        Schema::new("prop", cols).expect("valid")
    })
}

fn arb_value(ty: ColumnType) -> BoxedStrategy<Value> {
    match ty {
        ColumnType::Int32 => any::<i32>().prop_map(Value::Int32).boxed(),
        ColumnType::Int64 => any::<i64>().prop_map(Value::Int64).boxed(),
        ColumnType::Date => any::<i32>().prop_map(Value::Date).boxed(),
        ColumnType::Decimal { .. } => any::<i64>().prop_map(Value::Decimal).boxed(),
        // arbitrary bytes, full width, so decode returns exactly what was encoded
        ColumnType::Char(n) => prop::collection::vec(any::<u8>(), usize::from(n))
            .prop_map(Value::Char)
            .boxed(),
        // The classic types only (see tests_extended for the others).
        other => unreachable!("arb_type yields no {other}"),
    }
}

fn arb_table() -> impl Strategy<Value = (Schema, Vec<Vec<Value>>, usize)> {
    (arb_schema(), 128usize..4096).prop_flat_map(|(schema, page_size)| {
        let row = schema
            .columns()
            .iter()
            .map(|c| arb_value(c.ty))
            .collect::<Vec<_>>();
        (
            Just(schema),
            prop::collection::vec(row, 0..300),
            Just(page_size),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn rows_round_trip_through_both_layouts((schema, rows, page_size) in arb_table()) {
        let images: Vec<Vec<u8>> =
            rows.iter().map(|r| schema.encode_row_vec(r).expect("encodes")).collect();
        for layout in Layout::ALL {
            let Ok(mut b) = PageBuilder::new(schema.clone(), layout, page_size) else {
                prop_assert!(rows_per_page(layout, schema.row_width(), page_size) == 0);
                continue;
            };
            let mut pages = Vec::new();
            for img in &images {
                if b.is_full() {
                    pages.push(b.finish().to_vec());
                    b.reset();
                }
                b.push_row(img).expect("fits");
            }
            if !b.is_empty() || pages.is_empty() {
                pages.push(b.finish().to_vec());
            }
            let mut back = Vec::new();
            let mut row = Vec::new();
            let mut numeric = Vec::new();
            for p in &pages {
                prop_assert_eq!(p.len(), page_size);
                let v = PageView::parse(p, &schema).expect("valid page");
                prop_assert_eq!(v.capacity(), b.capacity());
                let first = back.len();
                for i in 0..v.row_count() {
                    v.copy_row(i, &mut row).expect("row");
                    back.push(row.clone());
                }
                // column views agree with the row images
                for (c, &off) in schema.offsets().iter().enumerate() {
                    let col = v.column(c).expect("col");
                    let w = col.width();
                    for (i, raw) in col.iter_raw().enumerate() {
                        prop_assert_eq!(raw, &images[first + i][off..off + w]);
                    }
                    if col.column_type().is_numeric() {
                        col.decode_i64_into(&mut numeric).expect("numeric");
                        for (i, &x) in numeric.iter().enumerate() {
                            prop_assert_eq!(Some(x), rows[first + i][c].as_i64());
                        }
                    }
                }
            }
            prop_assert_eq!(&back, &images);
            for (img, vals) in back.iter().zip(&rows) {
                prop_assert_eq!(&schema.decode_row(img).expect("decodes"), vals);
            }
        }
    }

    #[test]
    fn building_is_deterministic((schema, rows, page_size) in arb_table()) {
        for layout in Layout::ALL {
            let make = || -> Option<Vec<u8>> {
                let mut b = PageBuilder::new(schema.clone(), layout, page_size).ok()?;
                for r in &rows {
                    if b.push_values(r).is_err() { break; }
                }
                Some(b.finish().to_vec())
            };
            prop_assert_eq!(make(), make());
        }
    }

    #[test]
    fn damaged_pages_never_panic(
        (schema, rows, page_size) in arb_table(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        for layout in Layout::ALL {
            let Ok(mut b) = PageBuilder::new(schema.clone(), layout, page_size) else { continue };
            for r in &rows {
                if b.push_values(r).is_err() { break; }
            }
            let page = b.finish().to_vec();
            let mut bad = page.clone();
            for (idx, x) in &flips {
                let i = idx.index(bad.len());
                bad[i] ^= x;
            }
            // any byte flip is caught by the CRC (or an earlier header check)
            if bad != page {
                prop_assert!(PageView::parse(&bad, &schema).is_err());
            }
            // without the CRC, parsing may succeed but must never panic
            if let Ok(v) = PageView::parse_unverified(&bad, &schema) {
                exercise(&v)?;
            }
            // truncated pages are typed errors
            let short = &page[..cut.index(page.len())];
            prop_assert!(PageView::parse(short, &schema).is_err());
            prop_assert!(PageView::parse_unverified(short, &schema).is_err());
            // another schema's view of this page is a typed error
            let other = synthetic::schema(3);
            let foreign = matches!(
                PageView::parse(&page, &other),
                Err(PageError::SchemaMismatch { .. })
            );
            prop_assert!(foreign);
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048), magic in any::<bool>()) {
        let schema = synthetic::schema(2);
        let mut bytes = bytes;
        if magic && bytes.len() >= HEADER_LEN {
            bytes[0..4].copy_from_slice(&PAGE_MAGIC);
            bytes[4] = 1 + (bytes[4] & 1);
            bytes[5] = PAGE_VERSION;
            bytes[6..8].copy_from_slice(&(HEADER_LEN as u16).to_le_bytes());
            let len = bytes.len() as u32;
            bytes[8..12].copy_from_slice(&len.to_le_bytes());
            bytes[12..16].copy_from_slice(&schema.fingerprint().to_le_bytes());
        }
        let _ = PageHeader::read(&bytes);
        prop_assert!(PageView::parse(&bytes, &schema).is_err() || magic);
        if let Ok(v) = PageView::parse_unverified(&bytes, &schema) {
            exercise(&v)?;
        }
    }
}

/// Touches every accessor of a view (the point is that none panics).
fn exercise(v: &PageView<'_>) -> Result<(), TestCaseError> {
    let mut ints = Vec::new();
    let mut i32s = Vec::new();
    let mut bytes = Vec::new();
    for c in 0..v.schema().len() {
        let col = v
            .column(c)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let _ = col.decode_i64_into(&mut ints);
        let _ = col.decode_i32_into(&mut i32s);
        col.decode_bytes_into(&mut bytes);
        prop_assert_eq!(bytes.len(), col.len() * col.width());
        for i in 0..=col.len() {
            let _ = col.get_i64(i);
            let _ = col.value(i);
        }
    }
    for i in 0..=v.row_count() {
        let _ = v.row_values(i);
        let _ = v.row_bytes(i);
    }
    Ok(())
}

/// A PAX column's extent is the same on every page of a table and holds the column's
/// values whatever the page's row count; NSM pages have none.
#[test]
fn column_extents_hold_the_values_on_every_pax_page() {
    let s = small_schema();
    let cap = capacity_for(&s, Layout::Pax, 4096).expect("capacity");
    let full = build(&s, Layout::Pax, 4096, cap);
    let full_view = PageView::parse(&full, &s).expect("page");
    for rows in [0, 1, 7, cap] {
        let page = build(&s, Layout::Pax, 4096, rows);
        let v = PageView::parse(&page, &s).expect("page");
        for c in 0..s.len() {
            let ext = v.column_extent(c).expect("PAX");
            assert_eq!(
                Some(ext.clone()),
                full_view.column_extent(c),
                "same on every page"
            );
            let data = v.column(c).expect("column").contiguous().expect("PAX");
            let start = data.as_ptr() as usize - page.as_ptr() as usize;
            assert!(
                ext.start <= start && start + data.len() <= ext.end,
                "{rows} rows, column {c}"
            );
        }
    }
    let nsm = build(&s, Layout::Nsm, 4096, 3);
    let v = PageView::parse(&nsm, &s).expect("page");
    assert_eq!(v.column_extent(0), None);
}

/// `pieces_read` names the pieces holding the header and the columns' minipages, the
/// same on a full page and a part-filled one of a PAX table (minipages lie by capacity),
/// and nothing it cannot place: NSM pages, a zero piece, pieces past the 64th.
#[test]
fn pieces_read_names_the_header_and_the_columns_minipages() {
    let s = small_schema();
    let cap = capacity_for(&s, Layout::Pax, 4096).expect("capacity");
    let full = build(&s, Layout::Pax, 4096, cap);
    let part = build(&s, Layout::Pax, 4096, 3);
    for page in [&full, &part] {
        let v = PageView::parse(page, &s).expect("page");
        let mut want = 0u64;
        for r in std::iter::once(0..HEADER_LEN)
            .chain([3usize, 1].map(|c| v.column_extent(c).expect("PAX")))
        {
            for k in r.start / 512..=(r.end - 1) / 512 {
                want |= 1 << k;
            }
        }
        assert_eq!(v.pieces_read(&[3, 1], 512), Some(want));
        assert_eq!(want & 1, 1, "the header's piece");
        assert_eq!(v.pieces_read(&[], 4096), Some(1));
        assert_eq!(v.pieces_read(&[0], 0), None);
        assert_eq!(v.pieces_read(&[4], 32), None, "past the 64th piece");
    }
    let nsm = build(&s, Layout::Nsm, 4096, 3);
    let v = PageView::parse(&nsm, &s).expect("page");
    assert_eq!(v.pieces_read(&[0], 512), None);
}
