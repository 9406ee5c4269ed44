//! FLIXR per-page indexes through SQL (flixr §4.2–§4.4): `CREATE INDEX` on a catalog
//! table, filters on the indexed column read through READ_IDX (IHP) or an ISP session
//! under the rule (cpu-isp, hw-isp), `SET csd.use_index = false` for comparison.
//!
//! * Property: for random rows (clustered or unclustered keys), random range / IN /
//!   equality filters on the indexed column (ANDed with a filter on another column),
//!   range and bitmap indexes, NSM and PAX, every strategy returns the same rows with
//!   and without the index; the index never makes the scan read more data pages, and on
//!   clustered keys a selective range reads strictly fewer.
//! * TPC-H (SF 0.01): Q4, Q6, Q14 identical with indexes on l_shipdate, o_orderdate and
//!   the join keys; EXPLAIN ANALYZE names pages_skipped.
//! * Bad input (unknown table or column, duplicate name, second index on a
//!   column, a secondary key that does not fit the entry): a clear error, nothing
//!   registered, the table still queryable.
//! * Multi-key (§6.4): with 0, 1, 2 and 3 indexes on one table (packed in one entry) the
//!   results are identical and each key added never reads more pages; DROP INDEX
//!   removes one key; secondary keys survive a reload.
//! * The index survives a power cut and recovery of the device.

use crate::common::{Rows, client, load, session};
use csd_device::NvmeDevice;
use csd_ftl::{Ftl, FtlConfig};
use csd_host::{Catalog, Client, Strategy as Scan};
use csd_nand::Nand;
use csd_sim::DeviceConfig;
use csd_sql::{Answer, Choice, SqlSession};
use csd_table::Layout;
use csd_table::datagen::{TpchGenerator, TpchTable};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const ALL: [Choice; 3] = [
    Choice::Fixed(Scan::Ihp),
    Choice::Fixed(Scan::CpuIsp),
    Choice::Fixed(Scan::HwIsp),
];

fn run(s: &mut SqlSession, sql: &str, choices: &[Choice]) -> Vec<(Choice, Answer)> {
    s.run_strategies(sql, choices)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

fn sorted_rows(a: &Answer) -> Vec<Vec<String>> {
    let mut r = a.rows().expect("rows");
    r.sort();
    r
}

#[derive(Debug, Clone)]
enum Filter {
    Between(i64, i64),
    Lt(i64),
    Ge(i64),
    Eq(i64),
    In(Vec<i64>),
}

impl Filter {
    fn sql(&self) -> String {
        match self {
            Filter::Between(a, b) => format!("k BETWEEN {a} AND {b}"),
            Filter::Lt(a) => format!("k < {a}"),
            Filter::Ge(a) => format!("{a} <= k"),
            Filter::Eq(a) => format!("k = {a}"),
            Filter::In(v) => format!(
                "k IN ({})",
                v.iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
    fn keep(&self, k: i64) -> bool {
        match self {
            Filter::Between(a, b) => *a <= k && k <= *b,
            Filter::Lt(a) => k < *a,
            Filter::Ge(a) => k >= *a,
            Filter::Eq(a) => k == *a,
            Filter::In(v) => v.contains(&k),
        }
    }
}

fn filter() -> impl Strategy<Value = Filter> {
    prop_oneof![
        (0i64..20_000, 0i64..3_000).prop_map(|(a, w)| Filter::Between(a, a + w)),
        (0i64..20_000).prop_map(Filter::Lt),
        (0i64..20_000).prop_map(Filter::Ge),
        (0i64..20_000).prop_map(Filter::Eq),
        prop::collection::vec(0i64..20_000, 1..6).prop_map(Filter::In),
    ]
}

/// One case: load, index, query with and without the index under every strategy.
fn check_case(
    clustered: bool,
    layout: Layout,
    bitmap: bool,
    f: &Filter,
    seed: u64,
) -> Result<(), TestCaseError> {
    let n = 12_000usize;
    let mut rows: Vec<(i64, i32)> = (0..n)
        .map(|i| {
            let x = (i as u64)
                .wrapping_mul(6364136223846793005)
                .wrapping_add(seed)
                >> 20;
            ((x % 20_000) as i64, (x % 97) as i32)
        })
        .collect();
    if clustered {
        rows.sort();
    }
    // tiny: 8 KiB flash pages of two 4 KiB LBAs (multi-LBA table pages).
    let (mut c, cfg) = client("tiny");
    load(&mut c, Rows::with_note("t", rows.clone()), layout);
    let mut s = session(c, cfg);
    let using = if bitmap { "bitmap" } else { "range" };
    run(
        &mut s,
        &format!("CREATE INDEX t_k ON t (k) USING {using}"),
        &ALL[..1],
    );
    let sql = format!("SELECT k, v FROM t WHERE {} AND v < 90", f.sql());
    let want = {
        let mut w: Vec<Vec<String>> = rows
            .iter()
            .filter(|(k, v)| f.keep(*k) && *v < 90)
            .map(|(k, v)| vec![k.to_string(), v.to_string()])
            .collect();
        w.sort();
        w
    };
    let with = run(&mut s, &sql, &ALL);
    run(&mut s, "SET csd.use_index = false", &ALL[..1]);
    let without = run(&mut s, &sql, &ALL);
    run(&mut s, "SET csd.use_index = true", &ALL[..1]);
    for ((ch, a), (_, b)) in with.iter().zip(&without) {
        prop_assert_eq!(sorted_rows(a), want.clone(), "{:?} with the index", ch);
        prop_assert_eq!(sorted_rows(b), want.clone(), "{:?} without", ch);
        let (ra, rb) = (&a.scans[0].report, &b.scans[0].report);
        prop_assert!(ra.index.is_some(), "the scan used the index");
        prop_assert!(rb.index.is_none() && rb.pages_skipped == 0);
        prop_assert!(
            ra.flash_reads <= rb.flash_reads + ra.index_misses,
            "{:?}: {} flash reads with the index, {} without",
            ch,
            ra.flash_reads,
            rb.flash_reads
        );
        let selective = matches!(f, Filter::Between(..) | Filter::Eq(..));
        if clustered && selective {
            prop_assert!(ra.pages_skipped > 0, "{:?}: nothing skipped", ch);
            prop_assert!(ra.flash_reads < rb.flash_reads);
        }
    }
    Ok(())
}

#[test]
fn indexed_filters_return_the_same_rows_and_read_no_more_pages() {
    let mut runner = TestRunner::new(Config {
        cases: 8,
        failure_persistence: None,
        ..Config::default()
    });
    let strat = (
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        filter(),
        any::<u64>(),
    );
    runner
        .run(&strat, |(clustered, pax, bitmap, f, seed)| {
            let layout = if pax { Layout::Pax } else { Layout::Nsm };
            check_case(clustered, layout, bitmap, &f, seed)
        })
        .expect("property");
}

#[test]
fn every_combination_once_on_clustered_keys() {
    for layout in [Layout::Nsm, Layout::Pax] {
        for bitmap in [false, true] {
            check_case(true, layout, bitmap, &Filter::Between(5_000, 5_400), 7).expect("case");
        }
    }
}

#[test]
fn bad_index_statements_fail_clearly_and_change_nothing() {
    let (mut c, cfg) = client("tiny");
    let rows: Vec<(i64, i32)> = (0..2000).map(|i| (i, (i % 10) as i32)).collect();
    load(&mut c, Rows::with_note("t", rows), Layout::Nsm);
    let mut s = session(c, cfg);
    let err = |s: &mut SqlSession, sql: &str| {
        s.run_strategies(sql, &ALL[..1])
            .err()
            .unwrap_or_else(|| panic!("{sql} should fail"))
            .to_string()
    };
    assert!(err(&mut s, "CREATE INDEX a ON nope (k)").contains("unknown table `nope`"));
    assert!(err(&mut s, "CREATE INDEX a ON t (zz)").contains("has no column `zz`"));
    assert!(err(&mut s, "CREATE INDEX a ON t (k) USING hash").contains("range"));
    assert!(err(&mut s, "DROP INDEX a").contains("no index named `a`"));
    assert!(
        s.catalog().iter().all(|t| t.index.is_none()),
        "nothing registered"
    );
    run(&mut s, "CREATE INDEX a ON t (k)", &ALL[..1]);
    assert!(err(&mut s, "CREATE INDEX a ON t (v)").contains("already exists"));
    assert!(err(&mut s, "CREATE INDEX b ON t (k)").contains("already has index `a`"));
    assert!(
        err(
            &mut s,
            "CREATE INDEX c ON t (v) USING bitmap WITH (share = 'zz')"
        )
        .contains("no index named `zz`")
    );
    // A secondary key that does not fit the entry (4 header bytes + a 16-byte range on
    // the INT64 k + an 8-byte range on the INT32 v > 24): refused naming the sizes,
    // nothing registered.
    let e = err(&mut s, "CREATE INDEX c ON t (v)");
    assert!(e.contains("would need 28 bytes") && e.contains("24"), "{e}");
    assert!(
        s.catalog()[0]
            .index
            .as_ref()
            .is_some_and(|i| i.secondary.is_empty()),
        "no secondary key registered"
    );
    // Still queryable, still indexed once.
    let a = run(&mut s, "SELECT count(*) FROM t WHERE k < 100", &ALL);
    assert_eq!(a[0].1.rows().expect("rows"), vec![vec!["100".to_string()]]);
    assert_eq!(
        s.catalog()[0].index.as_ref().map(|i| i.name.as_str()),
        Some("a")
    );
    // Drop, then index another column: the device registry was released.
    run(&mut s, "DROP INDEX a", &ALL[..1]);
    run(
        &mut s,
        "CREATE INDEX b ON t (v) USING bitmap WITH (buckets = 8)",
        &ALL[..1],
    );
    let a = run(&mut s, "SELECT count(*) FROM t WHERE v = 3", &ALL);
    assert_eq!(a[0].1.rows().expect("rows"), vec![vec!["200".to_string()]]);
    assert!(a[0].1.scans[0].report.index.is_some());
    // A device without extension bytes refuses, and nothing is left behind.
    let cfg = DeviceConfig::preset("tiny").expect("preset");
    let nand = Nand::new_in_memory(cfg.clone()).expect("nand");
    let mut c = Client::new(NvmeDevice::new(
        Ftl::format(nand, FtlConfig::default()).expect("format"),
    ))
    .expect("client");
    load(&mut c, Rows::with_note("t", vec![(1, 1)]), Layout::Nsm);
    let mut s = session(c, cfg);
    assert!(err(&mut s, "CREATE INDEX a ON t (k)").contains("extension bytes"));
    assert!(s.catalog()[0].index.is_none());
}

#[test]
fn the_index_survives_a_power_cut_and_is_used_after_recovery() {
    let (mut c, cfg) = client("tiny");
    let rows: Vec<(i64, i32)> = (0..6000).map(|i| (i, (i % 10) as i32)).collect();
    load(&mut c, Rows::with_note("t", rows), Layout::Pax);
    let mut s = session(c, cfg.clone());
    run(&mut s, "CREATE INDEX t_k ON t (k)", &ALL[..1]);
    let sql = "SELECT sum(v) FROM t WHERE k BETWEEN 100 AND 300";
    let before = run(&mut s, sql, &ALL);
    let c = s.into_client().expect("client");
    let nand = c.into_device().into_block().into_ftl().crash();
    let ftl = Ftl::try_recover(
        nand,
        FtlConfig {
            ext_bytes: 24,
            ..FtlConfig::default()
        },
    )
    .expect("recover");
    let mut s = session(Client::new(NvmeDevice::new(ftl)).expect("client"), cfg);
    assert_eq!(
        s.catalog()[0].index.as_ref().map(|i| i.name.as_str()),
        Some("t_k")
    );
    let after = run(&mut s, sql, &ALL);
    for ((_, a), (_, b)) in before.iter().zip(&after) {
        assert_eq!(a.rows().expect("rows"), b.rows().expect("rows"));
        assert!(b.scans[0].report.pages_skipped > 0);
        assert_eq!(
            a.scans[0].report.pages_skipped,
            b.scans[0].report.pages_skipped
        );
    }
}

#[test]
fn tpch_q4_q6_q14_identical_with_indexes_and_explain_analyze_shows_pages_skipped() {
    let (mut c, cfg) = client("nvme-tlc");
    for t in [TpchTable::LineItem, TpchTable::Orders, TpchTable::Part] {
        let g = TpchGenerator::new(t, 0.01).expect("generator");
        Catalog::load(&mut c, t.name(), g, Layout::Pax, &mut |_| {}).expect("load");
    }
    let mut s = session(c, cfg);
    let q = |n: usize| csd_sql::tpch::QUERIES[n - 1].to_string();
    let queries = [q(4), q(6), q(14)];
    let before: Vec<_> = queries.iter().map(|x| run(&mut s, x, &ALL)).collect();
    for ddl in [
        "CREATE INDEX li_ship ON lineitem (l_shipdate)",
        "CREATE INDEX o_date ON orders (o_orderdate) USING bitmap",
        "CREATE INDEX p_key ON part (p_partkey) USING bitmap",
    ] {
        run(&mut s, ddl, &ALL[..1]);
    }
    for (x, b) in queries.iter().zip(&before) {
        let a = run(&mut s, x, &ALL);
        for ((ch, a), (_, b)) in a.iter().zip(b) {
            assert_eq!(sorted_rows(a), sorted_rows(b), "{ch:?}: {x}");
        }
    }
    // A filter on a clustered column of a TPC-H table skips pages, and EXPLAIN ANALYZE
    // says how many (the per-scan metric).
    run(&mut s, "DROP INDEX p_key", &ALL[..1]);
    run(&mut s, "CREATE INDEX p_key ON part (p_partkey)", &ALL[..1]);
    let a = run(
        &mut s,
        "SELECT count(*) FROM part WHERE p_partkey BETWEEN 100 AND 300",
        &ALL,
    );
    for (_, x) in &a {
        assert_eq!(x.rows().expect("rows"), vec![vec!["201".to_string()]]);
        assert!(x.scans[0].report.pages_skipped > 0);
        let m = x
            .explained
            .lines()
            .find(|l| l.contains("DeviceScanExec"))
            .expect("scan line");
        assert!(m.contains("pages_skipped="), "{m}");
    }
}

// ---------------------------------------------------------------------------------------
// Multi-key per-page indexes (flixr §3.1, §6.4).

/// Rows `(k INT64, v INT32, w INT32)` of table `m`.
struct Rows3 {
    schema: csd_table::Schema,
    rows: Vec<(i64, i32, i32)>,
    next: usize,
}

impl csd_table::datagen::RowSource for Rows3 {
    fn schema(&self) -> &csd_table::Schema {
        &self.schema
    }

    fn next_row(&mut self, row: &mut Vec<u8>) -> bool {
        let Some(&(k, v, w)) = self.rows.get(self.next) else {
            return false;
        };
        self.next += 1;
        row.clear();
        row.extend_from_slice(&k.to_le_bytes());
        row.extend_from_slice(&v.to_le_bytes());
        row.extend_from_slice(&w.to_le_bytes());
        true
    }

    fn remaining_rows(&self) -> Option<u64> {
        Some((self.rows.len() - self.next) as u64)
    }
}

/// One case: rows with a clustered `k`, `v` and `w` correlated with the position; a
/// filter on all three columns; 0, 1, 2 and 3 indexes (range on k, bitmaps on v and w,
/// packed into one entry). Every strategy returns the rows computed directly whatever
/// the indexes, and each index added never makes a scan read more pages (a rule with
/// more terms skips at least the pages a rule with fewer does). Dropping one key keeps
/// the results and the other keys' skipping.
fn check_multi(
    seed: u64,
    (klo, kw): (i64, i64),
    (vlo, vw): (i32, i32),
    w: i32,
) -> Result<(), TestCaseError> {
    let n = 6_000usize;
    let mut rows: Vec<(i64, i32, i32)> = (0..n)
        .map(|i| {
            let x = (i as u64)
                .wrapping_mul(6364136223846793005)
                .wrapping_add(seed)
                >> 20;
            let k = (x % 20_000) as i64;
            (
                k,
                ((k / 200) as i32 + (x % 7) as i32) % 100,
                ((k / 1_500) as i32 + (x % 3) as i32) % 14,
            )
        })
        .collect();
    rows.sort();
    let schema = csd_table::Schema::new(
        "m",
        vec![
            csd_table::Column::new("k", csd_table::ColumnType::Int64),
            csd_table::Column::new("v", csd_table::ColumnType::Int32),
            csd_table::Column::new("w", csd_table::ColumnType::Int32),
        ],
    )
    .expect("schema");
    let (mut c, cfg) = client("tiny");
    Catalog::load(
        &mut c,
        "m",
        Rows3 {
            schema,
            rows: rows.clone(),
            next: 0,
        },
        Layout::Pax,
        &mut |_| {},
    )
    .expect("load");
    let mut s = session(c, cfg);
    let (khi, vhi) = (klo + kw, vlo + vw);
    let sql = format!(
        "SELECT k, v, w FROM m WHERE k BETWEEN {klo} AND {khi} AND v BETWEEN {vlo} AND {vhi} AND w = {w}"
    );
    let mut want: Vec<Vec<String>> = rows
        .iter()
        .filter(|(k, v, x)| (klo..=khi).contains(k) && (vlo..=vhi).contains(v) && *x == w)
        .map(|(k, v, x)| vec![k.to_string(), v.to_string(), x.to_string()])
        .collect();
    want.sort();
    let mut reads: Vec<Vec<u64>> = Vec::new();
    let steps = [
        None,
        Some("CREATE INDEX m_k ON m (k)"),
        Some("CREATE INDEX m_v ON m (v) USING bitmap WITH (buckets = 8)"),
        Some("CREATE INDEX m_w ON m (w) USING bitmap WITH (buckets = 16)"),
    ];
    for (i, step) in steps.iter().enumerate() {
        if let Some(ddl) = step {
            run(&mut s, ddl, &ALL[..1]);
        }
        let keys = s.catalog()[0]
            .index
            .as_ref()
            .map_or(0, |ix| ix.keys().count());
        prop_assert_eq!(keys, i);
        let got = run(&mut s, &sql, &ALL);
        let mut r = Vec::new();
        for (ch, a) in &got {
            prop_assert_eq!(sorted_rows(a), want.clone(), "{:?} with {} indexes", ch, i);
            let rep = &a.scans[0].report;
            prop_assert_eq!(rep.index.is_some(), i > 0);
            if i == 3 {
                let text = rep.index.as_deref().unwrap_or_default();
                prop_assert!(
                    text.contains("m_k") && text.contains("m_v") && text.contains("m_w"),
                    "{}",
                    text
                );
            }
            r.push(rep.flash_reads - rep.index_misses.min(rep.flash_reads));
        }
        reads.push(r);
    }
    for i in 1..reads.len() {
        for (j, (more, fewer)) in reads[i].iter().zip(&reads[i - 1]).enumerate() {
            prop_assert!(
                more <= fewer,
                "strategy {}: {} indexes read {} pages, {} read {}",
                j,
                i,
                more,
                i - 1,
                fewer
            );
        }
    }
    // DROP INDEX removes one key; the others keep working.
    run(&mut s, "DROP INDEX m_v", &ALL[..1]);
    let ix = s.catalog()[0].index.clone().expect("indexes left");
    prop_assert_eq!(
        ix.keys().map(|k| k.name.as_str()).collect::<Vec<_>>(),
        vec!["m_k", "m_w"]
    );
    for (ch, a) in run(&mut s, &sql, &ALL) {
        prop_assert_eq!(
            sorted_rows(&a),
            want.clone(),
            "{:?} after DROP INDEX m_v",
            ch
        );
    }
    run(&mut s, "DROP INDEX m_k", &ALL[..1]);
    let ix = s.catalog()[0].index.clone().expect("m_w left");
    prop_assert_eq!(ix.name.as_str(), "m_w");
    prop_assert!(ix.secondary.is_empty());
    for (ch, a) in run(&mut s, &sql, &ALL) {
        prop_assert_eq!(sorted_rows(&a), want.clone(), "{:?} with m_w only", ch);
    }
    Ok(())
}

#[test]
fn multi_key_indexes_return_the_same_rows_and_more_keys_never_read_more() {
    let mut runner = TestRunner::new(Config {
        cases: 6,
        failure_persistence: None,
        ..Config::default()
    });
    let strat = (
        any::<u64>(),
        (0..20_000i64, 0..6_000i64),
        (0..100i32, 0..40i32),
        0..14i32,
    );
    runner
        .run(&strat, |(seed, k, v, w)| check_multi(seed, k, v, w))
        .expect("property");
    // A selective case: each key added skips more.
    check_multi(3, (4_000, 3_000), (20, 8), 3).expect("case");
}

/// Secondary keys survive closing and reopening the session (the catalog's version 3).
#[test]
fn secondary_keys_are_in_the_catalog_after_a_reload() {
    let (mut c, cfg) = client("tiny");
    let rows: Vec<(i64, i32)> = (0..3000).map(|i| (i, (i % 50) as i32)).collect();
    load(&mut c, Rows::new("t", rows), Layout::Nsm);
    let mut s = session(c, cfg);
    run(&mut s, "CREATE INDEX t_k ON t (k)", &ALL[..1]);
    run(
        &mut s,
        "CREATE INDEX t_v ON t (v) USING bitmap WITH (buckets = 16)",
        &ALL[..1],
    );
    s.reload().expect("reload");
    let ix = s.catalog()[0].index.clone().expect("index");
    assert_eq!(ix.name, "t_k");
    assert_eq!(ix.secondary.len(), 1);
    assert_eq!(ix.secondary[0].name, "t_v");
    let a = run(
        &mut s,
        "SELECT count(*) FROM t WHERE k < 1000 AND v = 7",
        &ALL,
    );
    for (_, x) in &a {
        assert_eq!(x.rows().expect("rows"), vec![vec!["20".to_string()]]);
        assert!(
            x.scans[0]
                .report
                .index
                .as_deref()
                .is_some_and(|t| t.contains("t_v"))
        );
    }
}
