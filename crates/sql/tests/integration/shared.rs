//! Identical device scans of one plan run once (`csd_sql::shared`): a view read twice
//! (TPC-H Q15's shape) scans its table once and answers as two scans would, while scans
//! that differ still run each on their own (scans that hand over rows are left to
//! `csd_sql::reuse`).

use crate::common::{Rows, client, load, session};
use csd_host::Strategy;
use csd_sql::{Choice, ScanSettings, SqlSession};
use csd_table::Layout;

/// 5,000 rows of 37 keys.
fn rows() -> Vec<(i64, i32)> {
    (0..5000i64)
        .map(|i| (i % 37, i32::try_from(i * 7 % 101).expect("small")))
        .collect()
}

fn device(strategy: Strategy) -> SqlSession {
    let (mut c, cfg) = client("nvme-tlc");
    load(&mut c, Rows::new("t", rows()), Layout::Pax);
    let mut s = session(c, cfg);
    s.set_settings(ScanSettings::new(Choice::Fixed(strategy)))
        .expect("settings");
    s
}

/// The keys whose sum of `v > min_v` is the largest, computed here.
fn reference(min_v: i32) -> Vec<Vec<String>> {
    let mut sums = std::collections::BTreeMap::<i64, i64>::new();
    for (k, v) in rows() {
        if v > min_v {
            *sums.entry(k).or_default() += i64::from(v);
        }
    }
    let max = sums.values().copied().max().expect("groups");
    sums.into_iter()
        .filter(|&(_, t)| t == max)
        .map(|(k, t)| vec![k.to_string(), t.to_string()])
        .collect()
}

const VIEW_TWICE: &str = "with r as (select k, sum(v) as total from t where v > 10 group by k)
    select k, total from r where total = (select max(total) from r) order by k";

#[test]
fn a_view_read_twice_is_scanned_once_in_the_device() {
    for strategy in [Strategy::CpuIsp, Strategy::HwIsp] {
        let s = device(strategy);
        let a = s.run(VIEW_TWICE).expect("query");
        assert_eq!(a.rows().expect("rows"), reference(10), "{strategy:?}");
        assert_eq!(a.scans.len(), 1, "{strategy:?}: one device scan");
        assert!(a.explained.contains("SharedScanExec"), "{}", a.explained);
        // Run again: a new plan, a new scan, the same answer and modeled work.
        let b = s.run(VIEW_TWICE).expect("again");
        assert_eq!(b.rows().expect("rows"), reference(10));
        assert_eq!(b.scans.len(), 1);
        assert_eq!(b.scans[0].report.modeled_ns, a.scans[0].report.modeled_ns);
    }
}

#[test]
fn scans_that_differ_or_hand_over_rows_are_not_shared() {
    // The two readers filter differently: two programs, two scans.
    let s = device(Strategy::CpuIsp);
    let q = "with r as (select k, sum(v) as total from t where v > 10 group by k),
                  q as (select k, sum(v) as total from t where v > 20 group by k)
             select k, total from r where total = (select max(total) from q) order by k";
    let a = s.run(q).expect("query");
    assert_eq!(a.scans.len(), 2);
    assert!(!a.explained.contains("SharedScanExec"), "{}", a.explained);
    // Two identical scans that hand over rows: not one shared node (a scan of rows
    // could be a whole table, kept until both had it); the second takes the rows the
    // first left (`csd_sql::reuse`, at most 64 MiB of them), so the device scans once.
    let q = "select k from t where v > 90 union all select k from t where v > 90";
    let a = s.run(q).expect("query");
    let want = 2 * rows().iter().filter(|r| r.1 > 90).count();
    assert_eq!(a.rows().expect("rows").len(), want);
    assert_eq!(a.scans.len(), 1);
    assert!(!a.explained.contains("SharedScanExec"), "{}", a.explained);
    assert!(a.explained.contains("reused_rows="), "{}", a.explained);
}
