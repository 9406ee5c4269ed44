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
