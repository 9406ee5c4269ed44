//! Model-based property test of the row store (flixr §4–§6 access paths): random
//! inserts, deletes, updates, scans and joins under every index configuration against a
//! Vec reference; results must be equal, FLIXR entries must bound their pages' keys, the
//! tiny host tree must agree with the device, and the B+trees must hold exactly one
//! `(key, page)` entry per row.

use csd_device::NvmeDevice;
use csd_ftl::{Ftl, FtlConfig};
use csd_host::CommandIssuer as _;
use csd_host::rowstore::{IndexKind, KeyEncoding, RowStore, StoreOptions, TableDef};
use csd_nand::Nand;
use csd_sim::DeviceConfig;
use csd_table::{ColumnType, Value};
use proptest::prelude::*;

fn store(kind: IndexKind) -> RowStore {
    store_on(kind, 4096).unwrap()
}

/// A store under `kind` on a `tiny` device whose LBAs (so table pages) are `lba` bytes.
fn store_on(kind: IndexKind, lba: u32) -> Result<RowStore, csd_host::rowstore::StoreError> {
    store_with(kind, lba, |_| {})
}

/// As [`store_on`], with `opts` changed by `set` first.
fn store_with(
    kind: IndexKind,
    lba: u32,
    set: impl FnOnce(&mut StoreOptions),
) -> Result<RowStore, csd_host::rowstore::StoreError> {
    let mut cfg = DeviceConfig::preset("tiny").unwrap();
    cfg.geometry.sector_size = lba;
    let fcfg = FtlConfig {
        ext_bytes: 24,
        ..FtlConfig::default()
    };
    let dev = NvmeDevice::new(Ftl::format(Nand::new_in_memory(cfg).unwrap(), fcfg).unwrap());
    let mut opts = StoreOptions {
        host_cache_kib: 8,
        // In-SSD B+tree loads and statements of more pairs than this go in several
        // commands (the device's limit is 2^20): the model checks that path too.
        ssd_pairs_per_command: 16,
        ..StoreOptions::default()
    };
    set(&mut opts);
    RowStore::new(dev, kind, opts)
}

fn def(name: &str, key: &str, enc: KeyEncoding) -> TableDef {
    TableDef {
        name: name.into(),
        columns: vec![
            ("k".into(), ColumnType::Int64),
            ("v".into(), ColumnType::Int32),
            ("j".into(), ColumnType::Int64),
            ("pad".into(), ColumnType::Char(200)),
        ],
        key: key.into(),
        encoding: enc,
        max_pages: 120,
    }
}

fn row(k: i64, v: i32, j: i64) -> Vec<Value> {
    vec![
        Value::Int64(k),
        Value::Int32(v),
        Value::Int64(j),
        Value::Char(b"x".to_vec()),
    ]
}

/// The reference: (k, v, j) triples.
type Model = Vec<(i64, i32, i64)>;

fn triples(rows: &[csd_host::rowstore::Row]) -> Vec<(i64, i32, i64)> {
    let mut v: Vec<_> = rows
        .iter()
        .map(|r| {
            (
                r.values[0].as_i64().unwrap(),
                r.values[1].as_i64().unwrap() as i32,
                r.values[2].as_i64().unwrap(),
            )
        })
        .collect();
    v.sort_unstable();
    v
}

#[derive(Debug, Clone)]
enum Op {
    Insert(Vec<(i64, i32, i64)>),
    Delete(i64, i64),
    Update(i64, i64, i64),
    Scan(i64, i64),
    Join(i64, i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => proptest::collection::vec((0i64..1000, 0i32..100, 0i64..50), 1..40).prop_map(Op::Insert),
        1 => (0i64..1000, 0i64..80).prop_map(|(l, w)| Op::Delete(l, l + w)),
        1 => (0i64..1000, 0i64..80, -50i64..50).prop_map(|(l, w, d)| Op::Update(l, l + w, d)),
        2 => (0i64..1000, 0i64..200).prop_map(|(l, w)| Op::Scan(l, l + w)),
        1 => (0i64..1000, 0i64..200).prop_map(|(l, w)| Op::Join(l, l + w)),
    ]
}

fn check_indexes(s: &mut RowStore, t: csd_host::rowstore::TableId) {
    s.check_entries(t).unwrap();
    let mut want: Vec<(i64, u64)> = s
        .scan_all(t)
        .unwrap()
        .iter()
        .map(|r| (r.values[0].as_i64().unwrap(), r.id.page))
        .collect();
    want.sort_unstable();
    if let Some(e) = s.host_tree_entries(t).unwrap() {
        assert_eq!(e, want, "host B+tree entries");
    }
    if let Some(e) = s.ssd_tree_entries(t).unwrap() {
        assert_eq!(e, want, "in-SSD B+tree entries");
    }
}

fn run(
    kind: IndexKind,
    (lba, node_kib): (u32, Option<u32>),
    load: Vec<(i64, i32, i64)>,
    ops: Vec<Op>,
) -> Result<(), TestCaseError> {
    let mut s = store_with(kind, lba, |o| o.node_kib = node_kib).unwrap();
    prop_assert_eq!(s.page_bytes(), lba as usize);
    let t = s.create_table(def("t", "k", KeyEncoding::Range)).unwrap();
    // The inner table of joins: keyed (and bitmap-indexed) on j.
    let bounds: Vec<i64> = (1..25).map(|b| b * 2).collect();
    let u = s
        .create_table(def("u", "k", KeyEncoding::Bitmap(bounds)))
        .unwrap();
    let inner: Vec<Vec<Value>> = (0..50).map(|j| row(j, j as i32, 0)).collect();
    s.load(u, &inner).unwrap();
    let mut m: Model = load.clone();
    m.sort_unstable();
    s.load(
        t,
        &load
            .iter()
            .map(|&(k, v, j)| row(k, v, j))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    for o in ops {
        match o {
            Op::Insert(rs) => {
                let ids = s
                    .insert(
                        t,
                        &rs.iter().map(|&(k, v, j)| row(k, v, j)).collect::<Vec<_>>(),
                    )
                    .unwrap();
                prop_assert_eq!(ids.len(), rs.len());
                m.extend(rs);
            }
            Op::Delete(lo, hi) => {
                let n = s
                    .delete_where(t, lo, hi, &|r| r[1] != Value::Int32(7))
                    .unwrap();
                let before = m.len();
                m.retain(|&(k, v, _)| !(lo <= k && k <= hi && v != 7));
                prop_assert_eq!(n as usize, before - m.len());
            }
            Op::Update(lo, hi, d) => {
                let n = s
                    .update_where(t, lo, hi, &|_| true, &|r| {
                        if let Value::Int64(k) = r[0] {
                            r[0] = Value::Int64(k + d);
                        }
                        if let Value::Int32(v) = r[1] {
                            r[1] = Value::Int32(v + 1);
                        }
                    })
                    .unwrap();
                let mut c = 0;
                for e in m.iter_mut() {
                    if lo <= e.0 && e.0 <= hi {
                        e.0 += d;
                        e.1 += 1;
                        c += 1;
                    }
                }
                prop_assert_eq!(n, c);
            }
            Op::Scan(lo, hi) => {
                let got = triples(&s.scan(t, lo, hi).unwrap());
                let mut want: Model = m
                    .iter()
                    .copied()
                    .filter(|e| lo <= e.0 && e.0 <= hi)
                    .collect();
                want.sort_unstable();
                prop_assert_eq!(got, want);
            }
            Op::Join(lo, hi) => {
                let got = s.join(t, lo, hi, &|_| true, "j", u).unwrap();
                let mut g: Vec<(i64, i32, i64, i64)> = got
                    .iter()
                    .map(|(o, i)| {
                        (
                            o.values[0].as_i64().unwrap(),
                            o.values[1].as_i64().unwrap() as i32,
                            o.values[2].as_i64().unwrap(),
                            i.values[0].as_i64().unwrap(),
                        )
                    })
                    .collect();
                g.sort_unstable();
                let mut want: Vec<(i64, i32, i64, i64)> = m
                    .iter()
                    .filter(|e| lo <= e.0 && e.0 <= hi && e.2 < 50)
                    .map(|e| (e.0, e.1, e.2, e.2))
                    .collect();
                want.sort_unstable();
                prop_assert_eq!(g, want);
            }
        }
        m.sort_unstable();
        prop_assert_eq!(s.rows(t).unwrap(), m.len() as u64);
    }
    prop_assert_eq!(triples(&s.scan_all(t).unwrap()), m.clone());
    check_indexes(&mut s, t);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// Table pages of one 4 KiB LBA, or of the tiny preset's whole 8 KiB flash page (FLIXR
    /// runs use 16 KiB LBAs, the paper's pages): B+tree nodes fill their LBA or 4 KiB at
    /// its start, a page's rows and its per-page index scale with it.
    #[test]
    fn every_configuration_agrees_with_the_model(
        lba in prop_oneof![Just(4096u32), Just(8192u32)],
        node_kib in prop_oneof![Just(None), Just(Some(4u32))],
        load in proptest::collection::vec((0i64..1000, 0i32..100, 0i64..60), 0..300),
        ops in proptest::collection::vec(op(), 1..25),
    ) {
        let mut sorted = load.clone();
        sorted.sort_unstable();
        for kind in IndexKind::ALL {
            run(kind, (lba, node_kib), sorted.clone(), ops.clone())?;
        }
    }
}

/// A node is its LBA by default (the host and in-SSD trees alike): 8 KiB nodes hold
/// twice the entries of 4 KiB ones, so the host walk of a range reads about half the
/// leaves, for the same rows and data pages. A node larger than the LBA, or under 4 KiB,
/// is refused.
#[test]
fn a_node_fills_its_lba_unless_told_otherwise() {
    let mut got = Vec::new();
    for node_kib in [None, Some(4)] {
        let mut s = store_with(IndexKind::HostBtree, 8192, |o| {
            o.node_kib = node_kib;
            o.full_scan_fraction = None;
        })
        .unwrap();
        assert_eq!(s.node_bytes(), node_kib.map_or(8192, |k| k as usize * 1024));
        let t = s.create_table(def("t", "k", KeyEncoding::Range)).unwrap();
        let load: Vec<Vec<Value>> = (0..3_000).map(|k| row(k, 0, 0)).collect();
        s.load(t, &load).unwrap();
        s.set_host_cache_inner_levels();
        let before = s.traffic();
        let rows = triples(&s.scan(t, 0, 2_999).unwrap());
        let d = s.traffic().since(before);
        got.push((rows, d.index_pages_to_host, d.data_pages_to_host));
    }
    let ((big_rows, big_index, big_data), (small_rows, small_index, small_data)) =
        (&got[0], &got[1]);
    assert_eq!((big_rows.len(), big_rows), (3_000, small_rows));
    assert_eq!(big_data, small_data);
    assert!(
        big_index * 2 <= small_index + 1 && *big_index > 0,
        "8 KiB leaves: {big_index}, 4 KiB leaves: {small_index}"
    );
    for bad in [2, 16] {
        let e = store_with(IndexKind::SsdBtree, 8192, |o| o.node_kib = Some(bad))
            .err()
            .expect("refused");
        assert!(e.to_string().contains("B+tree node"), "{e}");
    }
}

#[test]
fn lbas_smaller_than_a_node_are_refused() {
    let e = store_on(IndexKind::HostBtree, 2048).err().expect("refused");
    assert!(e.to_string().contains("multiple of 4096"), "{e}");
}

/// The B+tree configurations' optimizer: a range over the full-scan share of the key
/// span is read by a full scan (every page, no index node); with the optimizer off the
/// same range goes through the index (the host index reads its leaves) and fetches
/// only the range's pages; the answers are the same. A share that is not one is refused.
#[test]
fn the_optimizer_scans_wide_ranges_and_off_walks_the_index() {
    for kind in [IndexKind::HostBtree, IndexKind::SsdBtree] {
        let mut got = Vec::new();
        for share in [Some(0.25), None] {
            let mut s = store_with(kind, 4096, |o| o.full_scan_fraction = share).unwrap();
            let t = s.create_table(def("t", "k", KeyEncoding::Range)).unwrap();
            let load: Vec<Vec<Value>> = (0..1_500).map(|k| row(k, 0, 0)).collect();
            s.load(t, &load).unwrap();
            s.set_host_cache_inner_levels();
            let before = s.traffic();
            // 80% of the key span.
            let rows = triples(&s.scan(t, 100, 1_299).unwrap());
            assert_eq!(rows.len(), 1_200);
            let d = s.traffic().since(before);
            got.push((
                rows,
                d.index_pages_to_host + d.index_flash_reads,
                d.data_pages_to_host,
            ));
        }
        let ((scan_rows, scan_index, scan_data), (walk_rows, walk_index, walk_data)) =
            (&got[0], &got[1]);
        assert_eq!(scan_rows, walk_rows, "{kind:?}");
        assert_eq!(*scan_index, 0, "{kind:?}: a full scan reads no index node");
        if kind == IndexKind::HostBtree {
            // (The in-SSD tree's few nodes stay in the device's node cache.)
            assert!(*walk_index > 0, "the host's walk reads its leaves");
        }
        assert!(
            walk_data < scan_data,
            "{kind:?}: the walk fetches the range's pages only: {walk_data} against {scan_data}"
        );
    }
    for bad in [-0.5, f64::NAN] {
        let e = store_with(IndexKind::HostBtree, 4096, |o| {
            o.full_scan_fraction = Some(bad)
        })
        .err()
        .expect("refused");
        assert!(e.to_string().contains("full-scan fraction"), "{e}");
    }
}

#[test]
fn bad_requests_change_nothing() {
    let mut s = store(IndexKind::FlixrS);
    let t = s.create_table(def("t", "k", KeyEncoding::Range)).unwrap();
    // Unknown key column, non-numeric key, duplicate name.
    assert!(
        s.create_table(def("x", "nope", KeyEncoding::Range))
            .is_err()
    );
    assert!(s.create_table(def("y", "pad", KeyEncoding::Range)).is_err());
    assert!(s.create_table(def("T", "k", KeyEncoding::Range)).is_err());
    s.insert(t, &[row(1, 1, 1)]).unwrap();
    // A row of the wrong shape, a stale id, a full table.
    assert!(s.insert(t, &[vec![Value::Int32(1)]]).is_err());
    let bad = csd_host::rowstore::RowId { page: 0, slot: 9 };
    assert!(s.delete(t, &[bad]).is_err());
    let many: Vec<Vec<Value>> = (0..100_000).map(|k| row(k, 0, 0)).collect();
    assert!(matches!(
        s.insert(t, &many),
        Err(csd_host::StoreError::Full { .. })
    ));
    assert_eq!(s.rows(t).unwrap(), 1);
    assert_eq!(triples(&s.scan(t, 0, 10).unwrap()), vec![(1, 1, 1)]);
}

/// Secondary keys (flixr §6.4): under every configuration a scan on the primary range
/// and ranges of the secondary columns returns the rows a full check does; under FLIXR
/// and the host B+trees the secondary keys never make it read more table pages (and
/// read fewer on a selective, page-correlated secondary range); a secondary host tree
/// makes the table read-only; bad requests change nothing.
#[test]
fn secondary_keys_answer_alike_and_narrow_the_pages_read() {
    // k clustered; v correlated with the page (k / 100), j spread.
    let rows: Vec<(i64, i32, i64)> = (0..1_500)
        .map(|i| (i, ((i / 100) % 10) as i32, (i * 7919) % 50))
        .collect();
    let queries = [
        ((0, 1_499), (3, 3), (0, 49)),
        ((200, 1_100), (4, 6), (10, 20)),
        ((0, 700), (9, 9), (0, 49)),
        ((500, 520), (0, 9), (5, 5)),
    ];
    let mut answers: Vec<Vec<Vec<(i64, i32, i64)>>> = Vec::new();
    for kind in IndexKind::ALL {
        let mut pages_read = Vec::new();
        for secondary in [false, true] {
            let mut s = store(kind);
            let t = s.create_table(def("t", "k", KeyEncoding::Range)).unwrap();
            if secondary {
                s.add_secondary(t, "v", KeyEncoding::Bitmap((1..10).collect()))
                    .unwrap();
                s.add_secondary(t, "j", KeyEncoding::Bitmap(vec![10, 20, 30, 40]))
                    .unwrap();
                // Bad requests: the key column again, a CHAR column, after the load.
                assert!(s.add_secondary(t, "k", KeyEncoding::Range).is_err());
                assert!(s.add_secondary(t, "v", KeyEncoding::Range).is_err());
                assert!(s.add_secondary(t, "pad", KeyEncoding::Range).is_err());
            }
            let load: Vec<Vec<Value>> = rows.iter().map(|&(k, v, j)| row(k, v, j)).collect();
            s.load(t, &load).unwrap();
            if secondary {
                assert!(s.add_secondary(t, "j", KeyEncoding::Range).is_err());
            }
            let mut got = Vec::new();
            let mut read = 0;
            for ((lo, hi), (vlo, vhi), (jlo, jhi)) in queries {
                let before = s.traffic().data_pages_to_host;
                let r = s
                    .scan_keys(t, (lo, hi), &[(1, vlo, vhi), (2, jlo, jhi)], &|_| true)
                    .unwrap();
                read += s.traffic().data_pages_to_host - before;
                let want: Vec<(i64, i32, i64)> = rows
                    .iter()
                    .copied()
                    .filter(|&(k, v, j)| {
                        (lo..=hi).contains(&k)
                            && (vlo..=vhi).contains(&(v as i64))
                            && (jlo..=jhi).contains(&j)
                    })
                    .collect();
                assert_eq!(triples(&r), want, "{} secondary={secondary}", kind.name());
                got.push(triples(&r));
            }
            answers.push(got);
            pages_read.push(read);
            let host_tree = matches!(kind, IndexKind::HostBtree | IndexKind::HostBtreeIdeal);
            if secondary && host_tree {
                let e = s.insert(t, &[row(9_999, 1, 1)]).unwrap_err();
                assert!(e.to_string().contains("secondary"), "{e}");
            } else {
                s.insert(t, &[row(9_999, 1, 1)]).unwrap();
            }
        }
        if matches!(
            kind,
            IndexKind::FlixrS
                | IndexKind::FlixrHS
                | IndexKind::HostBtree
                | IndexKind::HostBtreeIdeal
        ) {
            assert!(
                pages_read[1] < pages_read[0],
                "{}: {} pages with secondary keys, {} without",
                kind.name(),
                pages_read[1],
                pages_read[0]
            );
        }
    }
    assert!(answers.windows(2).all(|w| w[0] == w[1]));
    // Warm: a cache holding every leaf from the start reads none, even the first time.
    let mut s = store(IndexKind::HostBtree);
    let t = s.create_table(def("t", "k", KeyEncoding::Range)).unwrap();
    let load: Vec<Vec<Value>> = (0..1_500).map(|k| row(k, 0, 0)).collect();
    s.load(t, &load).unwrap();
    let leaves = s.host_leaf_nodes();
    s.set_host_cache_inner_levels_and_leaves(leaves.len(), &leaves);
    let before = s.traffic();
    assert_eq!(s.scan(t, 100, 399).unwrap().len(), 300);
    assert_eq!(s.traffic().since(before).index_pages_to_host, 0);
}

/// FLIXR-HS (flixr §4.1): on a clustered table the host's search by min starts at the
/// range, so a range near the end of the table sends READ_IDX for its few pages, not
/// for every page whose min is below it; once an insert puts a key far outside its
/// page's place among the mins, the search falls back to every such page and still
/// finds the row (a search that kept starting at the range would miss it).
#[test]
fn flixr_hs_search_starts_at_the_range_while_the_table_is_clustered() {
    let mut s = store(IndexKind::FlixrHS);
    let t = s.create_table(def("t", "k", KeyEncoding::Range)).unwrap();
    let load: Vec<Vec<Value>> = (0..1_500).map(|k| row(k, 0, 0)).collect();
    s.load(t, &load).unwrap();
    let pages = s.pages(t).unwrap();
    let skipped = |s: &mut RowStore, lo, hi| {
        let before = s.traffic().pages_skipped;
        let keys: Vec<i64> = triples(&s.scan(t, lo, hi).unwrap())
            .iter()
            .map(|r| r.0)
            .collect();
        (keys, s.traffic().pages_skipped - before)
    };
    let (keys, n) = skipped(&mut s, 1_400, 1_410);
    assert_eq!(keys, (1_400..=1_410).collect::<Vec<_>>());
    assert!(n <= 1, "clustered: {n} pages skipped of {pages}");
    // Deleting keeps the pages in place; page 0 gets room.
    assert_eq!(s.delete_where(t, 0, 3, &|_| true).unwrap(), 4);
    let (_, n) = skipped(&mut s, 1_400, 1_410);
    assert!(n <= 1, "still clustered after a delete: {n}");
    // Key 1,405 lands in page 0 (the lowest with room): its range now spans the table.
    s.insert(t, &[row(1_405, 1, 0)]).unwrap();
    let (keys, n) = skipped(&mut s, 1_400, 1_410);
    let mut want: Vec<i64> = (1_400..=1_410).collect();
    want.insert(6, 1_405);
    assert_eq!(keys, want, "the row in page 0 is found");
    assert!(
        n > pages / 2,
        "unclustered: every page with a smaller min: {n}"
    );
    s.check_entries(t).unwrap();
}

/// The host B+tree (flixr §3, Figure 1): with the inner levels in host DRAM the leaves
/// of a range are named by their parents and read together, runs of consecutive leaves
/// in one Read, not one dependent Read per leaf; the leaves come from storage every time
/// and never push an inner node out (the same scan again fetches the same pages).
#[test]
fn host_index_reads_the_leaves_of_a_range_together() {
    let mut s = store(IndexKind::HostBtree);
    let t = s.create_table(def("t", "k", KeyEncoding::Range)).unwrap();
    let load: Vec<Vec<Value>> = (0..1_500).map(|k| row(k, 0, 0)).collect();
    s.load(t, &load).unwrap();
    assert!(!s.host_inner_nodes().is_empty());
    s.set_host_cache_inner_levels();
    let mdts = s.client().identify().mdts_blocks as u64;
    let mut fetched = Vec::new();
    for _ in 0..2 {
        let before = s.traffic();
        // A fifth of the keys (the optimizer would scan the table above a quarter).
        assert_eq!(s.scan(t, 100, 399).unwrap().len(), 300);
        let d = s.traffic().since(before);
        // 300 entries at 70% of 170 per leaf: three leaves.
        assert!(d.index_pages_to_host >= 3, "{d:?}");
        let data_reads = d.data_pages_to_host.div_ceil(mdts);
        assert!(
            d.commands < d.index_pages_to_host + data_reads,
            "leaves read together: {d:?}"
        );
        fetched.push(d.index_pages_to_host);
    }
    assert_eq!(fetched[0], fetched[1], "inner nodes stay in DRAM");
}

/// Beside the inner levels the host may keep an LRU of leaves
/// (`set_host_cache_inner_levels_and_leaves`): with room for every leaf a repeated scan
/// reads no leaf again, with none it reads them all again (the inner levels alone), and
/// with room for some it reads the leaves pushed out; inner nodes never take a leaf's
/// room, so no round reads one. Point lookups in a row keep the leaves they read, and
/// the rows returned never depend on the cache.
#[test]
fn a_leaf_cache_beside_the_inner_levels_keeps_the_leaves_it_has_room_for() {
    let mut reads = Vec::new();
    let mut answers = Vec::new();
    for room in [None, Some(0usize), Some(2), Some(usize::MAX)] {
        let mut s = store(IndexKind::HostBtree);
        let t = s.create_table(def("t", "k", KeyEncoding::Range)).unwrap();
        let load: Vec<Vec<Value>> = (0..1_500).map(|k| row(k, 0, 0)).collect();
        s.load(t, &load).unwrap();
        let leaves = s.host_leaf_nodes().len();
        // 1,500 entries at 70% of 170 a leaf.
        assert!((10..=14).contains(&leaves), "{leaves}");
        match room {
            None => s.set_host_cache_inner_levels(),
            Some(n) => s.set_host_cache_inner_levels_and_leaves(n.min(leaves), &[]),
        }
        let mut per_round = Vec::new();
        for _ in 0..2 {
            let before = s.traffic();
            // Three leaves' worth of keys, then five point lookups in one of them.
            let mut got = s.scan(t, 100, 399).unwrap().len();
            for k in [120, 121, 122, 123, 124] {
                got += s.scan(t, k, k).unwrap().len();
            }
            assert_eq!(got, 305);
            per_round.push(s.traffic().since(before).index_pages_to_host);
        }
        reads.push(per_round);
        answers.push(triples(&s.scan_all(t).unwrap()));
    }
    let (inner, none, some, all) = (&reads[0], &reads[1], &reads[2], &reads[3]);
    assert_eq!(inner, none, "no room for leaves is the inner levels alone");
    assert!(none[0] >= 3 && none[1] == none[0], "{none:?}");
    // With room for every leaf the second round reads nothing; the first reads each of
    // its leaves once (the point lookups find theirs cached).
    assert_eq!(all[1], 0, "{all:?}");
    assert!(all[0] >= 3 && all[0] < none[0], "{all:?} {none:?}");
    // Room for two: the scan's leaves push each other out, the lookups' leaf stays.
    assert!(
        some[0] < none[0] && some[1] > 0 && some[1] < none[1],
        "{some:?} {none:?}"
    );
    assert!(answers.windows(2).all(|w| w[0] == w[1]));
}

/// A statement reads each host B+tree leaf once, however many of its entries it changes
/// (a buffer pool keeps the pages a statement fixed): with only the inner levels cached
/// between statements, a DELETE of 20 rows whose entries share one leaf fetched that
/// leaf 21 times (once for the scan, once per entry removed) before; the same DELETE on
/// the ideal host index (every node in DRAM) fetches none, and both delete the same rows.
#[test]
fn a_statement_reads_each_host_leaf_once() {
    let mut got = Vec::new();
    for kind in [IndexKind::HostBtree, IndexKind::HostBtreeIdeal] {
        let mut s = store(kind);
        let t = s.create_table(def("t", "k", KeyEncoding::Range)).unwrap();
        let load: Vec<Vec<Value>> = (0..1_500).map(|k| row(k, 0, 0)).collect();
        s.load(t, &load).unwrap();
        s.set_host_cache_inner_levels();
        let before = s.traffic();
        // 20 keys, far from a leaf boundary (170 entries a leaf at 70%: 119 per leaf).
        assert_eq!(s.delete_where(t, 130, 149, &|_| true).unwrap(), 20);
        let d = s.traffic().since(before);
        if kind == IndexKind::HostBtree {
            assert!(
                (1..=2).contains(&d.index_pages_to_host),
                "one leaf (two at most) for the whole statement: {d:?}"
            );
        } else {
            assert_eq!(d.index_pages_to_host, 0, "{d:?}");
        }
        // The next statement reads the leaf from storage again.
        let before = s.traffic();
        assert_eq!(s.scan(t, 150, 150).unwrap().len(), 1);
        let d = s.traffic().since(before);
        assert_eq!(
            d.index_pages_to_host,
            u64::from(kind == IndexKind::HostBtree),
            "{d:?}"
        );
        got.push(triples(&s.scan_all(t).unwrap()));
        assert_eq!(s.host_tree_entries(t).unwrap().unwrap().len(), 1_480);
    }
    assert_eq!(got[0], got[1]);
}

/// FLIXR-HS stays clustered when a page's max equals the next page's min (one key's rows
/// across a page boundary, as an order's lines in LINEITEM): the load allows it, and so
/// must a later write of such a page. Before, the first DELETE in the table ended the
/// clustering for good, and every later search named every page whose min is below its
/// range (about half the table a search).
#[test]
fn flixr_hs_stays_clustered_when_a_key_spans_a_page_boundary() {
    let mut s = store(IndexKind::FlixrHS);
    let t = s.create_table(def("t", "k", KeyEncoding::Range)).unwrap();
    // Each key on 7 rows, so that keys straddle the page boundaries.
    let load: Vec<Vec<Value>> = (0..1_505).map(|i| row(i / 7, 0, i)).collect();
    s.load(t, &load).unwrap();
    let pages = s.pages(t).unwrap();
    let skipped = |s: &mut RowStore, lo, hi| {
        let before = s.traffic().pages_skipped;
        let n = s.scan(t, lo, hi).unwrap().len();
        (n, s.traffic().pages_skipped - before)
    };
    let (n, before) = skipped(&mut s, 200, 201);
    assert_eq!(n, 14);
    assert!(before <= 2, "clustered after the load: {before} of {pages}");
    // Delete keys in several pages, each page keeping rows (its max is its successor's
    // min where a key straddles).
    for k in [3, 40, 77, 120, 150] {
        assert_eq!(s.delete_where(t, k, k, &|_| true).unwrap(), 7);
    }
    let (n, after) = skipped(&mut s, 200, 201);
    assert_eq!(n, 14);
    assert!(
        after <= 2,
        "still clustered after the deletes: {after} pages skipped of {pages}"
    );
    s.check_entries(t).unwrap();
}
