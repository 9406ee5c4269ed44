//! Tests of the registry blob (versions 1 to 3) and of entry encoding and comparison.

use super::entry::*;
use super::registry::*;
use super::*;

fn entry(name: &str, page_lbas: u32) -> TableEntry {
    let columns = vec![Column::new("k", ColumnType::Int64)];
    TableEntry {
        schema: Schema::new(name, vec![Column::new("k", ColumnType::Int64)]).expect("schema"),
        format: TableFormat {
            name: name.into(),
            columns,
            layout: Layout::Pax,
            page_lbas,
        },
        keys: vec![(0, IndexEncoding::Bitmap { bounds: vec![3, 9] })],
        generation: 0,
        rules: BTreeMap::new(),
        next_rule: 1,
    }
}

#[test]
fn registry_keeps_lbas_per_page_and_old_bytes_for_one_lba_pages() {
    let one: BTreeMap<u8, TableEntry> = [(1, entry("a", 1))].into();
    let b = encode_registry(&one);
    assert_eq!(
        &b[..4],
        BLOB_MAGIC,
        "version 1 bytes when every page is one LBA"
    );
    assert_eq!(decode_registry(&b), Some(one));
    let multi: BTreeMap<u8, TableEntry> = [(1, entry("a", 1)), (2, entry("b", 4))].into();
    let b = encode_registry(&multi);
    assert_eq!(&b[..4], BLOB_MAGIC_V2);
    assert_eq!(decode_registry(&b), Some(multi));
    assert_eq!(decode_registry(&b[..b.len() - 1]), None, "truncated");
}

#[test]
fn registry_keeps_several_keys_and_the_generation() {
    let mut t = entry("m", 2);
    t.format.columns.push(Column::new("d", ColumnType::Date));
    t.schema = Schema::new(
        "m",
        vec![
            Column::new("k", ColumnType::Int64),
            Column::new("d", ColumnType::Date),
        ],
    )
    .expect("schema");
    t.keys.push((1, IndexEncoding::Range));
    t.generation = 3;
    let tables: BTreeMap<u8, TableEntry> = [(1, t.clone()), (2, entry("a", 1))].into();
    let b = encode_registry(&tables);
    assert_eq!(&b[..4], BLOB_MAGIC_V3);
    assert_eq!(decode_registry(&b), Some(tables));
    assert_eq!(decode_registry(&b[..b.len() - 2]), None, "truncated");
    // The layout: bitmap of 3 buckets (1 byte), then the DATE range as two i32.
    let l = KeyLayout::of(1, &t);
    assert_eq!(
        l.slots
            .iter()
            .map(|s| (s.offset, s.width, s.narrow))
            .collect::<Vec<_>>(),
        vec![(0, 1, false), (1, 8, true)]
    );
    assert_eq!(l.entry_bytes(), 13);
    let e = l.build(&[vec![0, 5, 12], vec![-3, 40, 7]]);
    let bytes = e.encode(24);
    assert_eq!(bytes[0], ENTRY_V2);
    let back = Entry::decode(&bytes);
    assert_eq!(
        l.keys(&back),
        Some(vec![
            KeyEntry::Bitmap(vec![0b111]),
            KeyEntry::Range { min: -3, max: 40 }
        ])
    );
    let between = |lo, hi| IndexRule::Between { lo, hi };
    assert!(l.may_match(&back, &[(0, between(3, 3)), (1, between(40, 50))]));
    assert!(!l.may_match(&back, &[(0, between(3, 3)), (1, between(41, 50))]));
    assert!(
        l.may_match(&back, &[(7, between(0, 0))]),
        "no key: no verdict"
    );
    // Another generation says nothing.
    let mut old = t.clone();
    old.generation = 2;
    assert_eq!(KeyLayout::of(1, &old).keys(&back), None);
    assert!(KeyLayout::of(1, &old).may_match(&back, &[(1, between(41, 50))]));
}

#[test]
fn entries_roundtrip_and_rules_are_conservative() {
    for e in [
        Entry::None,
        Entry::Pending(3),
        Entry::Empty(4),
        Entry::Opaque(5),
        Entry::Range {
            table: 1,
            min: -5,
            max: 9,
        },
        Entry::Bitmap {
            table: 2,
            bits: [vec![0b101], vec![0; 19]].concat(),
        },
    ] {
        assert_eq!(Entry::decode(&e.encode(24)), e.clone());
    }
    let r = Entry::Range {
        table: 1,
        min: 10,
        max: 20,
    };
    let between = |lo, hi| IndexRule::Between { lo, hi };
    assert!(may_match(&r, 1, &IndexEncoding::Range, &between(20, 30)));
    assert!(!may_match(&r, 1, &IndexEncoding::Range, &between(21, 30)));
    assert!(!may_match(
        &r,
        1,
        &IndexEncoding::Range,
        &IndexRule::In(vec![1, 21])
    ));
    assert!(
        may_match(&r, 2, &IndexEncoding::Range, &between(21, 30)),
        "other table: read"
    );
    let bounds = vec![10, 20, 30]; // buckets (..10) [10,20) [20,30) [30..)
    let enc = IndexEncoding::Bitmap {
        bounds: bounds.clone(),
    };
    let b = Entry::Bitmap {
        table: 1,
        bits: vec![0b0100],
    }; // only [20,30)
    assert!(may_match(&b, 1, &enc, &between(25, 25)));
    assert!(!may_match(&b, 1, &enc, &between(0, 19)));
    assert!(!may_match(&b, 1, &enc, &IndexRule::In(vec![5, 35])));
    assert!(!may_match(
        &Entry::Empty(1),
        1,
        &enc,
        &between(i64::MIN, i64::MAX)
    ));
    assert!(may_match(&Entry::Opaque(1), 1, &enc, &between(0, 0)));
    assert!(may_match(&Entry::None, 1, &enc, &between(0, 0)));
}

/// A table of a nullable INT32 key, a VARCHAR and a TIMESTAMP with a time zone.
fn typed_entry(name: &str) -> TableEntry {
    let columns = vec![
        Column::new("k", ColumnType::Int32).with_nullable(true),
        Column::new("s", ColumnType::Varchar).with_nullable(true),
        Column::new("ts", ColumnType::Timestamp).with_tz(Some("Europe/Paris".into())),
    ];
    TableEntry {
        schema: Schema::new(name, columns.clone()).expect("schema"),
        format: TableFormat {
            name: name.into(),
            columns,
            layout: Layout::Pax,
            page_lbas: 2,
        },
        keys: vec![(1, IndexEncoding::Range)],
        generation: 0,
        rules: BTreeMap::new(),
        next_rule: 1,
    }
}

#[test]
fn registry_version_4_keeps_nullability_and_time_zones_and_old_tables_keep_their_bytes() {
    // Tables of NOT NULL columns without a time zone keep the bytes of versions 1-3.
    let old: BTreeMap<u8, TableEntry> = [(1, entry("a", 1))].into();
    let old_bytes = encode_registry(&old);
    assert_eq!(&old_bytes[..4], BLOB_MAGIC);
    // The version-1 layout as documented, byte for byte: magic, count, id, name,
    // layout, columns (name, tag, param), kind 2 (bitmap), column, bounds.
    let mut want = b"FXR1".to_vec();
    want.extend_from_slice(&[
        1,
        1,
        1,
        0,
        b'a',
        Layout::Pax.code(),
        1,
        0,
        1,
        0,
        b'k',
        2,
        0,
        0,
    ]);
    want.extend_from_slice(&[2, 0, 0, 2, 0]);
    want.extend_from_slice(&3i64.to_le_bytes());
    want.extend_from_slice(&9i64.to_le_bytes());
    assert_eq!(old_bytes, want);

    let tables: BTreeMap<u8, TableEntry> = [(1, entry("a", 1)), (7, typed_entry("t"))].into();
    let b = encode_registry(&tables);
    assert_eq!(&b[..4], BLOB_MAGIC_V4);
    let back = decode_registry(&b).expect("decodes");
    assert_eq!(back, tables);
    let t = &back[&7];
    assert!(t.schema.columns()[0].nullable && t.schema.columns()[1].nullable);
    assert_eq!(t.schema.columns()[2].tz.as_deref(), Some("Europe/Paris"));
    assert_eq!(
        t.schema.fingerprint(),
        typed_entry("t").schema.fingerprint(),
        "the device's schema is the host's: its pages parse"
    );
    for cut in [1, 2, 5, 20] {
        assert_eq!(
            decode_registry(&b[..b.len() - cut]),
            None,
            "truncated by {cut}"
        );
    }
    // An unknown column flag is not guessed at.
    let flag_at = b
        .windows(3)
        .position(|w| w == [13, 0, 0])
        .expect("the VARCHAR column's tag and parameter")
        + 3;
    let mut bad = b.clone();
    bad[flag_at] |= 0x80;
    assert_eq!(decode_registry(&bad), None);
    let mut future = b.clone();
    future[3] = b'9';
    assert_eq!(decode_registry(&future), None, "a later version");
}

#[test]
fn a_key_without_values_matches_no_rule() {
    let mut t = typed_entry("t");
    t.keys = vec![
        (0, IndexEncoding::Range),
        (1, IndexEncoding::Bitmap { bounds: vec![0, 9] }),
    ];
    t.generation = 1;
    let l = KeyLayout::of(4, &t);
    assert!(l.slots[0].narrow, "INT32 range as two i32");
    // Every row's k NULL; s has values.
    let e = Entry::decode(&l.build(&[vec![], vec![3, 12]]).encode(24));
    let keys = l.keys(&e).expect("keys");
    assert_eq!(
        keys[0],
        KeyEntry::Range {
            min: i32::MAX as i64,
            max: i32::MIN as i64
        }
    );
    let between = |lo, hi| IndexRule::Between { lo, hi };
    for r in [
        between(i64::MIN, i64::MAX),
        between(0, 0),
        IndexRule::In(vec![0, i64::MAX]),
    ] {
        assert!(
            !l.may_match(&e, &[(0, r.clone())]),
            "{r:?} on an all-NULL key"
        );
    }
    assert!(
        l.may_match(&e, &[(1, between(12, 12))]),
        "the other key decides alone"
    );
    assert!(!l.may_match(&e, &[(1, between(-5, -1))]));
    // One key, version 1: the same.
    let mut one = typed_entry("t");
    one.keys = vec![(1, IndexEncoding::Range)];
    let l1 = KeyLayout::of(4, &one);
    let e1 = Entry::decode(&l1.build(&[vec![]]).encode(24));
    assert_eq!(
        e1,
        Entry::Range {
            table: 4,
            min: EMPTY_RANGE.0,
            max: EMPTY_RANGE.1
        }
    );
    assert!(!may_match(
        &e1,
        4,
        &IndexEncoding::Range,
        &between(i64::MIN, i64::MAX)
    ));
    let bm = IndexEncoding::Bitmap { bounds: vec![5] };
    let mut lb = typed_entry("t");
    lb.keys = vec![(1, bm.clone())];
    let eb = KeyLayout::of(4, &lb).build(&[vec![]]);
    assert!(!may_match(&eb, 4, &bm, &between(i64::MIN, i64::MAX)));
}

proptest::proptest! {
    /// String keys keep the order: `a <= b` gives `key(a) <= key(b)`, byte for byte for
    /// VARCHAR, padded with blanks for CHAR (as `cmp_padded` orders them); the keys of
    /// the strings starting with a prefix lie in its `prefix_range`.
    #[test]
    fn string_keys_are_monotone(
        a in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..12),
        b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..12),
        n in 0usize..12,
    ) {
        let (ka, kb) = (prefix_key(&a, 0), prefix_key(&b, 0));
        if a <= b {
            proptest::prop_assert!(ka <= kb);
        }
        let (pa, pb) = (prefix_key(&a, b' '), prefix_key(&b, b' '));
        if csd_query::cmp_padded(&a, &b).is_le() {
            proptest::prop_assert!(pa <= pb);
        }
        let p = &a[..n.min(a.len())];
        let (lo, hi) = KeyKind::prefix_range(p);
        proptest::prop_assert!(lo <= ka && ka <= hi);
        proptest::prop_assert!(lo <= pa && pa <= hi);
    }
}
