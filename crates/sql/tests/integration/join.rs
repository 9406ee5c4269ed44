//! FLIXR join bitmaps through SQL (flixr §4.5): the build side of a hash join between two
//! device tables reads with READ_IDX_JOIN1, the probe side with READ_IDX_JOIN2.
//!
//! * TPC-H (SF 0.01): Q4 and Q14 return the same rows with bitmap indexes on their join
//!   keys (sharing split points) as without any index, and their scans ran the join
//!   reads; a Q4-shaped query on a range of the clustered o_orderkey skips lineitem
//!   pages, and EXPLAIN ANALYZE shows it on the probe scan.
//! * Property: small random tables with clustered join keys, random ranges on the build
//!   table's key, inner and semi joins: the same rows as computed directly and as with
//!   `csd.use_index = false`; a narrow range skips probe pages.

use crate::common::{Rows, client, load, session};
use csd_host::{Catalog, Strategy as Scan};
use csd_sql::{Answer, Choice, SqlSession};
use csd_table::Layout;
use csd_table::datagen::{TpchGenerator, TpchTable};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const IHP: Choice = Choice::Fixed(Scan::Ihp);
const CPU: Choice = Choice::Fixed(Scan::CpuIsp);

fn run(s: &mut SqlSession, sql: &str, choices: &[Choice]) -> Vec<(Choice, Answer)> {
    s.run_strategies(sql, choices)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

fn sorted_rows(a: &Answer) -> Vec<Vec<String>> {
    let mut r = a.rows().expect("rows");
    r.sort();
    r
}

/// The scan of `table` in `a`'s log.
fn scan<'a>(a: &'a Answer, table: &str) -> &'a csd_sql::ScanRecord {
    a.scans
        .iter()
        .find(|s| s.table == table)
        .unwrap_or_else(|| panic!("no scan of {table}"))
}

fn join_read(a: &Answer, table: &str, which: &str) -> bool {
    scan(a, table)
        .report
        .index
        .as_deref()
        .is_some_and(|i| i.contains(which))
}

#[test]
fn tpch_q4_q14_identical_with_join_bitmaps_and_clustered_keys_skip_probe_pages() {
    let (mut c, cfg) = client("nvme-tlc");
    for t in [TpchTable::LineItem, TpchTable::Orders, TpchTable::Part] {
        let g = TpchGenerator::new(t, 0.01).expect("generator");
        Catalog::load(&mut c, t.name(), g, Layout::Pax, &mut |_| {}).expect("load");
    }
    let mut s = session(c, cfg);
    let q = |n: usize| csd_sql::tpch::QUERIES[n - 1].to_string();
    // (Every lineitem of the orders, not only late ones: so lineitem's side stays the
    // larger in DataFusion's estimates and orders builds.)
    let q4_clustered = "select o_orderpriority, count(*) as order_count
         from orders
         where o_orderkey < 3000
           and exists (select * from lineitem where l_orderkey = o_orderkey)
         group by o_orderpriority
         order by o_orderpriority";
    let plain: Vec<_> = [q(4), q(14), q4_clustered.to_string()]
        .iter()
        .map(|x| run(&mut s, x, &[IHP, CPU]))
        .collect();

    // Q4: orders builds (its filter keeps fewer rows), lineitem probes.
    run(
        &mut s,
        "CREATE INDEX o_key ON orders (o_orderkey) USING bitmap",
        &[IHP],
    );
    run(
        &mut s,
        "CREATE INDEX l_okey ON lineitem (l_orderkey) USING bitmap WITH (share = 'o_key')",
        &[IHP],
    );
    for (ch, a) in run(&mut s, &q(4), &[IHP, CPU]) {
        let b = &plain[0]
            .iter()
            .find(|(c, _)| *c == ch)
            .expect("same choice")
            .1;
        assert_eq!(sorted_rows(&a), sorted_rows(b), "{ch:?}: Q4");
        assert!(join_read(&a, "orders", "READ_IDX_JOIN1"), "{:?}", a.scans);
        assert!(join_read(&a, "lineitem", "READ_IDX_JOIN2"), "{:?}", a.scans);
    }

    // The same join on a range of the clustered o_orderkey: JOIN1 reads under the
    // range rule, so the bitmap holds few buckets and lineitem pages are skipped.
    for (ch, a) in run(&mut s, q4_clustered, &[IHP, CPU]) {
        let b = &plain[2]
            .iter()
            .find(|(c, _)| *c == ch)
            .expect("same choice")
            .1;
        assert_eq!(sorted_rows(&a), sorted_rows(b), "{ch:?}: clustered Q4");
        let li = scan(&a, "lineitem");
        let lb = scan(b, "lineitem");
        assert!(join_read(&a, "lineitem", "READ_IDX_JOIN2"));
        assert!(li.report.pages_skipped > 0, "{ch:?}: nothing skipped");
        assert!(li.report.flash_reads < lb.report.flash_reads);
        let line = a
            .explained
            .lines()
            .find(|l| l.contains("DeviceScanExec") && l.contains("lineitem"))
            .expect("probe scan line");
        assert!(line.contains("READ_IDX_JOIN2"), "{line}");
        assert!(line.contains("pages_skipped="), "{line}");
    }
    // Turned off: plain scans, same rows.
    run(&mut s, "SET csd.use_index = false", &[IHP]);
    let off = run(&mut s, q4_clustered, &[IHP]);
    assert_eq!(sorted_rows(&off[0].1), sorted_rows(&plain[2][0].1));
    assert!(scan(&off[0].1, "lineitem").report.index.is_none());
    run(&mut s, "SET csd.use_index = true", &[IHP]);

    // Q14: the month of lineitem (722 rows, estimated from l_shipdate's bounds) builds,
    // part (bitmap on p_partkey; lineitem's on l_partkey shares its split points) probes.
    run(&mut s, "DROP INDEX l_okey", &[IHP]);
    run(
        &mut s,
        "CREATE INDEX p_key ON part (p_partkey) USING bitmap",
        &[IHP],
    );
    run(
        &mut s,
        "CREATE INDEX l_pkey ON lineitem (l_partkey) USING bitmap WITH (share = 'p_key')",
        &[IHP],
    );
    for (ch, a) in run(&mut s, &q(14), &[IHP, CPU]) {
        let b = &plain[1]
            .iter()
            .find(|(c, _)| *c == ch)
            .expect("same choice")
            .1;
        assert_eq!(sorted_rows(&a), sorted_rows(b), "{ch:?}: Q14");
        assert!(join_read(&a, "lineitem", "READ_IDX_JOIN1"), "{:?}", a.scans);
        assert!(join_read(&a, "part", "READ_IDX_JOIN2"), "{:?}", a.scans);
    }
}

/// One case: a (build, few rows) and b (probe) with clustered keys; a range on a.k.
fn check_case(
    seed: u64,
    lo: i64,
    width: i64,
    (semi, pax, build_bitmap): (bool, bool, bool),
) -> Result<(), TestCaseError> {
    let rows_of = |n: usize, salt: u64, range: u64| -> Vec<(i64, i32)> {
        let mut r: Vec<(i64, i32)> = (0..n)
            .map(|i| {
                let x = (i as u64 ^ salt)
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(seed)
                    >> 20;
                ((x % range) as i64, (x % 97) as i32)
            })
            .collect();
        r.sort();
        r
    };
    // a.v is a.k / 10: a column correlated with the key, which DataFusion cannot carry
    // over to b (a filter on a.k it copies to b.k as a filter of b's own scan).
    let a: Vec<(i64, i32)> = rows_of(1_500, 7, 10_000)
        .into_iter()
        .map(|(k, _)| (k, (k / 10) as i32))
        .collect();
    let b = rows_of(8_000, 13, 10_000);
    let layout = if pax { Layout::Pax } else { Layout::Nsm };
    let (mut c, cfg) = client("tiny");
    load(&mut c, Rows::new("a", a.clone()), layout);
    load(&mut c, Rows::new("b", b.clone()), layout);
    let mut s = session(c, cfg);
    // The build table's index may be of either kind (JOIN1 reads under its rule); the
    // per-table bitmap takes the probe index's split points. (Two 128-bucket bitmaps do
    // not fit the tiny preset's controller metadata: 64 buckets.)
    run(
        &mut s,
        "CREATE INDEX b_k ON b (k) USING bitmap WITH (buckets = 64)",
        &[IHP],
    );
    let (build_index, col, (flo, fhi)) = if build_bitmap {
        let ix = "CREATE INDEX a_k ON a (k) USING bitmap WITH (share = 'b_k')";
        (ix, "k", (lo, lo + width))
    } else {
        // A range index on a.v: JOIN1 reads under the filter's rule on v and puts the
        // buckets of the keys of those rows in the bitmap; b has no filter at all, so
        // every page of b skipped is JOIN2's doing.
        let ix = "CREATE INDEX a_v ON a (v)";
        (ix, "v", (lo / 10, (lo + width) / 10))
    };
    let keep = |k: i64, v: i32| {
        let x = if build_bitmap { k } else { i64::from(v) };
        (flo..=fhi).contains(&x)
    };
    run(&mut s, build_index, &[IHP]);
    let (sql, want) = if semi {
        let sql = format!(
            "SELECT a.k, a.v FROM a WHERE a.{col} BETWEEN {flo} AND {fhi} AND EXISTS (SELECT 1 FROM b WHERE b.k = a.k)"
        );
        let w: Vec<Vec<String>> = a
            .iter()
            .filter(|(k, v)| keep(*k, *v) && b.iter().any(|(bk, _)| bk == k))
            .map(|(k, v)| vec![k.to_string(), v.to_string()])
            .collect();
        (sql, w)
    } else {
        let sql = format!(
            "SELECT a.k, a.v, b.v FROM a JOIN b ON a.k = b.k WHERE a.{col} BETWEEN {flo} AND {fhi}"
        );
        let mut w = Vec::new();
        for (k, v) in a.iter().filter(|(k, v)| keep(*k, *v)) {
            for (_, bv) in b.iter().filter(|(bk, _)| bk == k) {
                w.push(vec![k.to_string(), v.to_string(), bv.to_string()]);
            }
        }
        (sql, w)
    };
    let mut want = want;
    want.sort();
    let with = run(&mut s, &sql, &[IHP]);
    run(&mut s, "SET csd.use_index = false", &[IHP]);
    let without = run(&mut s, &sql, &[IHP]);
    let (wa, wo) = (&with[0].1, &without[0].1);
    prop_assert_eq!(
        sorted_rows(wa),
        want.clone(),
        "with the join bitmap: {}",
        sql
    );
    prop_assert_eq!(sorted_rows(wo), want, "without: {}", sql);
    if !a.iter().any(|(k, v)| keep(*k, *v)) {
        // An empty build side: DataFusion never polls the probe side.
        return Ok(());
    }
    prop_assert!(join_read(wa, "b", "READ_IDX_JOIN2"), "{:?}", wa.scans);
    prop_assert!(join_read(wa, "a", "READ_IDX_JOIN1"), "{:?}", wa.scans);
    let (pb, pn) = (&scan(wa, "b").report, &scan(wo, "b").report);
    prop_assert!(pb.flash_reads <= pn.flash_reads + pb.index_misses);
    if !build_bitmap {
        prop_assert!(pn.index.is_none() && scan(wa, "b").program.contains("columns"));
    }
    if width <= 500 {
        prop_assert!(pb.pages_skipped > 0, "nothing skipped: {}", sql);
        prop_assert!(pb.flash_reads < pn.flash_reads);
    }
    Ok(())
}

#[test]
fn joins_on_clustered_keys_return_the_same_rows_and_skip_probe_pages() {
    let mut runner = TestRunner::new(Config {
        cases: 8,
        failure_persistence: None,
        ..Config::default()
    });
    let strat = (
        any::<u64>(),
        0i64..9_000,
        prop_oneof![0i64..500, 500i64..10_000],
        (any::<bool>(), any::<bool>(), any::<bool>()),
    );
    runner
        .run(&strat, |(seed, lo, width, flags)| {
            check_case(seed, lo, width, flags)
        })
        .expect("property");
}

/// The probe scan run alone (its build scan never ran, so the device holds no bitmap of
/// this run): it falls back to a plain scan and returns every row, never a short result.
#[test]
fn a_probe_scan_without_its_build_side_falls_back_to_a_plain_scan() {
    use csd_sql::datafusion::physical_plan::{ExecutionPlan, collect};
    use std::sync::Arc;

    let a: Vec<(i64, i32)> = (0..1_500).map(|i| (i * 6, (i * 6 / 10) as i32)).collect();
    let b: Vec<(i64, i32)> = (0..8_000).map(|i| (i, (i % 97) as i32)).collect();
    let (mut c, cfg) = client("tiny");
    load(&mut c, Rows::new("a", a), Layout::Nsm);
    load(&mut c, Rows::new("b", b), Layout::Nsm);
    let mut s = session(c, cfg);
    run(
        &mut s,
        "CREATE INDEX b_k ON b (k) USING bitmap WITH (buckets = 64)",
        &[IHP],
    );
    run(&mut s, "CREATE INDEX a_v ON a (v)", &[IHP]);
    let sql = "SELECT a.k, b.v FROM a JOIN b ON a.k = b.k WHERE a.v BETWEEN 100 AND 110";
    // The whole query: JOIN2 skips most of b.
    let whole = run(&mut s, sql, &[IHP]);
    assert!(scan(&whole[0].1, "b").report.pages_skipped > 0);

    fn probe(p: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
        if let Some(d) = p.downcast_ref::<csd_sql::DeviceScanExec>() {
            return d.describe().contains("READ_IDX_JOIN2").then(|| p.clone());
        }
        p.children().into_iter().find_map(probe)
    }
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let ctx = s.context().clone();
    let plan = rt
        .block_on(async { ctx.sql(sql).await?.create_physical_plan().await })
        .expect("plan");
    let p = probe(&plan).expect("a probe scan in the plan");
    let batches = rt
        .block_on(collect(p.clone(), ctx.task_ctx()))
        .expect("probe alone");
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, 8_000, "every row of b");
    let m = p.metrics().expect("metrics");
    assert!(
        m.sum_by_name("pages_skipped").is_none(),
        "a plain scan: {m:?}"
    );
}

/// A long session: 1,000 joins (some with an empty build side, whose probe scan never
/// runs) never fall back to plain scans because the device's tables of per-table
/// indexes and join rules filled (they hold 256 each): every join releases what it
/// registered. The registrations' modeled time is the scans' setup time, in their
/// modeled total and in EXPLAIN ANALYZE.
#[test]
fn a_thousand_joins_in_one_session_never_fall_back_and_release_everything() {
    let a: Vec<(i64, i32)> = (0..200).map(|i| (i * 5, i as i32)).collect();
    let b: Vec<(i64, i32)> = (0..1_000).map(|i| (i, (i % 7) as i32)).collect();
    let (mut c, cfg) = client("tiny");
    load(&mut c, Rows::new("a", a), Layout::Pax);
    load(&mut c, Rows::new("b", b), Layout::Pax);
    let mut s = session(c, cfg);
    run(
        &mut s,
        "CREATE INDEX b_k ON b (k) USING bitmap WITH (buckets = 64)",
        &[IHP],
    );
    run(
        &mut s,
        "CREATE INDEX a_k ON a (k) USING bitmap WITH (share = 'b_k')",
        &[IHP],
    );
    let join_state = |s: &SqlSession| s.device().lock().device().flixr().join_state();
    for i in 0..1_000i64 {
        let lo = (i * 37) % 1_000;
        let (lo, hi) = if i % 10 == 9 {
            (-20, -10)
        } else {
            (lo, lo + 40)
        };
        // An empty build side: DataFusion never polls the probe side.
        let empty = !(lo..=hi).any(|k| k % 5 == 0 && (0..1_000).contains(&k));
        let sql =
            format!("SELECT a.k, b.v FROM a JOIN b ON a.k = b.k WHERE a.k BETWEEN {lo} AND {hi}");
        let ans = run(&mut s, &sql, &[IHP]).remove(0).1;
        let want = (lo..=hi)
            .filter(|k| k % 5 == 0 && (0..1_000).contains(k))
            .count();
        assert_eq!(ans.rows().expect("rows").len(), want, "join {i}: {sql}");
        let tables: Vec<&str> = ans.scans.iter().map(|x| x.table.as_str()).collect();
        assert!(
            tables.contains(&"a") && (empty || tables.contains(&"b")),
            "join {i}: {sql}: {:?}",
            ans.scans
        );
        assert!(
            join_read(&ans, "a", "READ_IDX_JOIN1"),
            "join {i}: {:?}",
            ans.scans
        );
        assert!(scan(&ans, "a").report.setup_ns > 0, "join {i}: build setup");
        if !empty {
            assert!(
                join_read(&ans, "b", "READ_IDX_JOIN2"),
                "join {i}: {:?}",
                ans.scans
            );
            let p = &scan(&ans, "b").report;
            assert!(
                p.setup_ns > 0 && p.modeled_ns > p.setup_ns,
                "join {i}: probe setup"
            );
        }
        drop(ans);
        assert_eq!(join_state(&s), (0, 0), "join {i} left registrations behind");
    }
    let ans = run(
        &mut s,
        "EXPLAIN ANALYZE SELECT a.k, b.v FROM a JOIN b ON a.k = b.k WHERE a.k BETWEEN 100 AND 140",
        &[IHP],
    )
    .remove(0)
    .1;
    let text = ans.rows().expect("rows").concat().join("\n");
    let line = text
        .lines()
        .find(|l| l.contains("DeviceScanExec") && l.contains("table=b"))
        .unwrap_or_else(|| panic!("probe scan line in {text}"));
    assert!(line.contains("setup_ns="), "{line}");
    assert_eq!(join_state(&s), (0, 0));
}
