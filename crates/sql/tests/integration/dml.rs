//! INSERT, UPDATE and DELETE on device tables through SQL (issue 13; flixr §4.3, §4.6,
//! §6.1 Insert/Delete).
//!
//! * Model: random INSERT / DELETE / UPDATE sequences against a `Vec` of rows; after
//!   each statement `SELECT *` equals the model, and at the end every strategy (ihp,
//!   cpu-isp, hw-isp) returns the model's rows and aggregates, with and without a FLIXR
//!   index on the key (range or bitmap), NSM and PAX; with the index, filtered reads
//!   (READ_IDX / sessions under a rule) return what `csd.use_index = false` returns, so
//!   no page holding a matching row is skipped after updates moved keys. A second table
//!   loaded after the first makes it grow by relocation.
//! * Crash: power is cut at a random flash operation during a statement (and sometimes
//!   again while the next open finishes it); after recovery the table is the old one or
//!   the new one, the catalog's row count agrees with the pages, and the index with the
//!   data.
//! * Bad input: unknown table or column, NULL, a string too long for its CHAR, a decimal
//!   out of range: a clear error naming the column, and no flash page programmed.

use crate::common::{Rows, client, load, session};
use csd_device::{Command, NvmeDevice, Payload};
use csd_ftl::{Ftl, FtlConfig};
use csd_host::{Catalog, Client, CommandIssuer, Strategy as Scan};
use csd_nand::PowerCut;
use csd_sql::{Answer, Choice, SqlSession};
use csd_table::Layout;
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

/// `(k, v)` of every row, sorted.
fn rows_of(s: &mut SqlSession, choice: Choice) -> Vec<(i64, i32)> {
    let a = run(s, "SELECT k, v FROM t", &[choice]);
    let mut out: Vec<(i64, i32)> = a[0]
        .1
        .rows()
        .expect("rows")
        .iter()
        .map(|r| (r[0].parse().expect("k"), r[1].parse().expect("v")))
        .collect();
    out.sort_unstable();
    out
}

fn sorted(mut v: Vec<(i64, i32)>) -> Vec<(i64, i32)> {
    v.sort_unstable();
    v
}

#[derive(Debug, Clone)]
enum Op {
    Insert(Vec<(i64, i32)>),
    DeleteRange(i64, i64),
    DeleteV(i32),
    AddV(i64, i64, i32),
    MoveK(i32, i64),
}

impl Op {
    fn sql(&self) -> String {
        match self {
            Op::Insert(rows) => format!(
                "INSERT INTO t VALUES {}",
                rows.iter()
                    .map(|(k, v)| format!("({k}, {v}, 'n{}')", k.rem_euclid(100)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Op::DeleteRange(a, b) => format!("DELETE FROM t WHERE k BETWEEN {a} AND {b}"),
            Op::DeleteV(v) => format!("DELETE FROM t WHERE v = {v}"),
            Op::AddV(a, b, d) => format!("UPDATE t SET v = v + {d} WHERE k >= {a} AND k < {b}"),
            Op::MoveK(v, d) => format!("UPDATE t SET k = k + {d}, note = 'mv' WHERE v = {v}"),
        }
    }

    fn apply(&self, m: &mut Vec<(i64, i32)>) -> u64 {
        let before = m.len();
        match self {
            Op::Insert(rows) => {
                m.extend(rows);
                rows.len() as u64
            }
            Op::DeleteRange(a, b) => {
                m.retain(|r| !(r.0 >= *a && r.0 <= *b));
                (before - m.len()) as u64
            }
            Op::DeleteV(v) => {
                m.retain(|r| r.1 != *v);
                (before - m.len()) as u64
            }
            Op::AddV(a, b, d) => {
                let mut n = 0;
                for r in m.iter_mut().filter(|r| r.0 >= *a && r.0 < *b) {
                    r.1 += d;
                    n += 1;
                }
                n
            }
            Op::MoveK(v, d) => {
                let mut n = 0;
                for r in m.iter_mut().filter(|r| r.1 == *v) {
                    r.0 += d;
                    n += 1;
                }
                n
            }
        }
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => prop::collection::vec((0i64..5000, 0i32..20), 1..400).prop_map(Op::Insert),
        2 => (0i64..5000, 0i64..800).prop_map(|(a, w)| Op::DeleteRange(a, a + w)),
        1 => (0i32..20).prop_map(Op::DeleteV),
        2 => (0i64..5000, 0i64..2000, -3i32..4).prop_map(|(a, w, d)| Op::AddV(a, a + w, d)),
        1 => (0i32..20, -3000i64..3000).prop_map(|(v, d)| Op::MoveK(v, d)),
    ]
}

/// Index on `k`: none, range or bitmap.
#[derive(Debug, Clone, Copy)]
enum Ix {
    None,
    Range,
    Bitmap,
}

fn check_case(
    initial: Vec<(i64, i32)>,
    ops: &[Op],
    ix: Ix,
    layout: Layout,
) -> Result<(), TestCaseError> {
    let (mut c, cfg) = client("tiny");
    load(&mut c, Rows::with_note("t", initial.clone()), layout);
    // A table after t: t grows by relocation.
    load(&mut c, Rows::new("u", vec![(1, 1)]), Layout::Nsm);
    let mut s = session(c, cfg);
    match ix {
        Ix::None => {}
        Ix::Range => {
            run(&mut s, "CREATE INDEX t_k ON t (k)", &ALL[..1]);
        }
        Ix::Bitmap => {
            run(
                &mut s,
                "CREATE INDEX t_k ON t (k) USING bitmap WITH (buckets = 16)",
                &ALL[..1],
            );
        }
    }
    let mut model = initial;
    for op in ops {
        let n = op.apply(&mut model);
        let a = run(&mut s, &op.sql(), &ALL[..1]);
        let d = a[0].1.dml.as_ref().expect("a DML report");
        prop_assert_eq!(d.rows, n, "{}", op.sql());
        prop_assert_eq!(d.table_rows, model.len() as u64);
        prop_assert_eq!(
            rows_of(&mut s, ALL[0]),
            sorted(model.clone()),
            "after {}",
            op.sql()
        );
    }
    let t = s
        .catalog()
        .iter()
        .find(|t| t.name == "t")
        .cloned()
        .expect("t");
    prop_assert_eq!(t.rows, model.len() as u64);
    prop_assert!(t.capacity >= t.pages);
    let u = s
        .catalog()
        .iter()
        .find(|t| t.name == "u")
        .cloned()
        .expect("u");
    let lpp = t.lbas_per_page(4096);
    prop_assert!(
        t.first_lba + t.capacity * lpp <= u.first_lba
            || u.first_lba + u.capacity * lpp <= t.first_lba,
        "extents overlap"
    );
    let model = sorted(model);
    for choice in ALL {
        prop_assert_eq!(rows_of(&mut s, choice), model.clone(), "{}", choice.name());
    }
    // Aggregates over ranges of the key, with and without the index.
    for (lo, hi) in [
        (0, 300),
        (1000, 1200),
        (-5000, 0),
        (4000, 9000),
        (2500, 2500),
    ] {
        let want: Vec<(i64, i32)> = model
            .iter()
            .copied()
            .filter(|r| r.0 >= lo && r.0 <= hi)
            .collect();
        let cnt = want.len();
        let sum: i64 = want.iter().map(|r| r.1 as i64).sum();
        let sql =
            format!("SELECT count(*), coalesce(sum(v), 0) FROM t WHERE k BETWEEN {lo} AND {hi}");
        for use_index in [true, false] {
            run(
                &mut s,
                &format!("SET csd.use_index = {use_index}"),
                &ALL[..1],
            );
            for (choice, a) in run(&mut s, &sql, &ALL) {
                prop_assert_eq!(
                    a.rows().expect("rows"),
                    vec![vec![cnt.to_string(), sum.to_string()]],
                    "{} {} index {}",
                    sql,
                    choice.name(),
                    use_index
                );
            }
        }
    }
    Ok(())
}

#[test]
fn random_dml_sequences_match_a_model_on_every_strategy_with_and_without_an_index() {
    let cases = std::env::var("DML_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let strat = (
        prop::collection::vec((0i64..5000, 0i32..20), 0..1200),
        prop::collection::vec(op(), 1..6),
        prop_oneof![Just(Ix::None), Just(Ix::Range), Just(Ix::Bitmap)],
        prop_oneof![Just(Layout::Nsm), Just(Layout::Pax)],
    );
    runner
        .run(&strat, |(initial, ops, ix, layout)| {
            check_case(initial, &ops, ix, layout)
        })
        .unwrap();
}

#[test]
fn growth_fills_free_space_then_appends_and_relocates_a_table_that_is_not_last() {
    let (mut c, cfg) = client("tiny");
    let rows: Vec<(i64, i32)> = (0..2000).map(|i| (i, (i % 10) as i32)).collect();
    load(&mut c, Rows::with_note("t", rows), Layout::Nsm);
    load(&mut c, Rows::new("u", vec![(1, 1)]), Layout::Nsm);
    let mut s = session(c, cfg);
    run(&mut s, "CREATE INDEX t_k ON t (k)", &ALL[..1]);
    let t0 = s.catalog()[0].clone();
    // Free space in existing pages is used before any page is appended.
    let d = run(&mut s, "DELETE FROM t WHERE v = 3", &ALL[..1])[0]
        .1
        .dml
        .clone()
        .expect("report");
    assert_eq!(d.rows, 200);
    assert_eq!(d.pages_rewritten, t0.pages);
    assert!(d.write_idx && d.log_pages == d.pages_rewritten);
    let d = run(
        &mut s,
        "INSERT INTO t SELECT k + 100000, 3, note FROM t WHERE k < 150",
        &ALL[..1],
    )[0]
    .1
    .dml
    .clone()
    .expect("report");
    assert_eq!((d.rows, d.pages_appended, d.pages_relocated), (135, 0, 0));
    assert_eq!(s.catalog()[0].pages, t0.pages);
    // Past the free space and the extent: t is not the last table, so it moves.
    let d = run(
        &mut s,
        "INSERT INTO t SELECT k + 200000, v, note FROM t",
        &ALL[..1],
    )[0]
    .1
    .dml
    .clone()
    .expect("report");
    assert!(
        d.pages_appended > 0 && d.pages_relocated == t0.pages,
        "{d:?}"
    );
    let t1 = s.catalog()[0].clone();
    assert!(t1.first_lba > s.catalog()[1].first_lba && t1.capacity >= 2 * t1.pages - 1);
    assert_eq!(t1.rows, 2 * (2000 - 200 + 135));
    // A DELETE whose WHERE constrains the indexed key reads only the pages that may match.
    let d = run(
        &mut s,
        "DELETE FROM t WHERE k BETWEEN 200000 AND 200009",
        &ALL[..1],
    )[0]
    .1
    .dml
    .clone()
    .expect("report");
    assert_eq!(d.rows, 9, "{d:?}"); // k = 200003 was deleted before the copy
    assert!(d.pages_skipped > 0 && d.pages_read < t1.pages, "{d:?}");
    run(
        &mut s,
        "INSERT INTO t VALUES (200003, 3, 'x'), (200000, 0, 'y'), (200001, 1, 'y'), (200002, 2, 'y'), (200004, 4, 'y'), (200005, 5, 'y'), (200006, 6, 'y'), (200007, 7, 'y'), (200008, 8, 'y'), (200009, 9, 'y')",
        &ALL[..1],
    );
    // The index still prunes: keys moved to a new range are found, old pages skipped.
    let a = run(&mut s, "SELECT count(*) FROM t WHERE k >= 200000", &ALL);
    for (_, a) in &a {
        assert_eq!(
            a.rows().expect("rows"),
            vec![vec![(2000 - 200 + 135 + 1).to_string()]]
        );
        assert!(a.scans[0].report.pages_skipped > 0);
    }
}

/// Flash programs so far (the device's telemetry).
fn programs(s: &SqlSession) -> u64 {
    let mut c = s.device().lock();
    match c
        .exec(Command::GetLogPage(csd_device::LogPage::Telemetry))
        .expect("telemetry")
        .payload
    {
        Payload::Telemetry(t) => t.counters.page_programs,
        _ => panic!("no telemetry"),
    }
}

#[test]
fn bad_statements_fail_clearly_and_program_nothing() {
    let (mut c, cfg) = client("tiny");
    let rows: Vec<(i64, i32)> = (0..500).map(|i| (i, (i % 10) as i32)).collect();
    load(&mut c, Rows::with_note("t", rows.clone()), Layout::Pax);
    let mut s = session(c, cfg);
    run(&mut s, "CREATE INDEX t_k ON t (k)", &ALL[..1]);
    let cat = s.catalog().to_vec();
    let p0 = programs(&s);
    for (sql, want) in [
        ("INSERT INTO nope VALUES (1, 2, 'a')", "nope"),
        ("DELETE FROM nope WHERE k = 1", "nope"),
        ("UPDATE t SET zz = 1", "zz"),
        ("DELETE FROM t WHERE zz = 1", "zz"),
        ("INSERT INTO t VALUES (1, 2, 'toolong')", "column note"),
        ("INSERT INTO t VALUES (NULL, 2, 'a')", "column k"),
        ("INSERT INTO t VALUES (1, 2)", "t"),
        ("UPDATE t SET note = 'abcdefgh' WHERE k = 3", "column note"),
        ("UPDATE t SET v = 99999999999 WHERE k = 3", "column v"),
        ("INSERT INTO t VALUES (1, 'x', 'a')", "Int32"),
    ] {
        let e = s
            .run_strategies(sql, &ALL[..1])
            .err()
            .unwrap_or_else(|| panic!("{sql} should fail"))
            .to_string();
        assert!(e.contains(want), "{sql}: {e}");
    }
    assert_eq!(programs(&s), p0, "a failed statement programmed flash");
    assert_eq!(s.catalog(), cat.as_slice());
    assert_eq!(rows_of(&mut s, ALL[0]), rows);
    // A decimal column refuses a value out of its range too.
    let (mut c, cfg) = client("tiny");
    let schema = csd_table::Schema::new(
        "d",
        vec![csd_table::Column::new(
            "x",
            csd_table::ColumnType::Decimal { scale: 2 },
        )],
    )
    .expect("schema");
    let src = OneRow {
        schema,
        done: false,
    };
    Catalog::load(&mut c, "d", src, Layout::Nsm, &mut |_| {}).expect("load");
    let mut s = session(c, cfg);
    let p0 = programs(&s);
    let e = s
        .run_strategies("INSERT INTO d VALUES (123456789012345678.25)", &ALL[..1])
        .expect_err("out of range")
        .to_string();
    assert!(e.contains("Decimal128") || e.contains("range"), "{e}");
    let e = s
        .run_strategies("UPDATE d SET x = x * 100000000000000000", &ALL[..1])
        .expect_err("out of range")
        .to_string();
    assert!(
        e.contains("x") && (e.contains("Decimal") || e.contains("range")),
        "{e}"
    );
    assert_eq!(programs(&s), p0);
    let a = run(&mut s, "INSERT INTO d VALUES (2.5), (0.01)", &ALL[..1]);
    assert_eq!(
        a[0].1.rows().expect("rows"),
        vec![vec!["2 rows inserted in d".to_string()]]
    );
    let a = run(&mut s, "SELECT sum(x) FROM d", &ALL);
    assert_eq!(a[0].1.rows().expect("rows"), vec![vec!["4.01".to_string()]]);
}

/// One row of one `DECIMAL(2)` column holding 1.50.
struct OneRow {
    schema: csd_table::Schema,
    done: bool,
}

impl csd_table::datagen::RowSource for OneRow {
    fn schema(&self) -> &csd_table::Schema {
        &self.schema
    }

    fn next_row(&mut self, row: &mut Vec<u8>) -> bool {
        if self.done {
            return false;
        }
        self.done = true;
        row.clear();
        row.extend_from_slice(&150i64.to_le_bytes());
        true
    }

    fn remaining_rows(&self) -> Option<u64> {
        Some(u64::from(!self.done))
    }
}

fn ftl_cfg() -> FtlConfig {
    FtlConfig {
        ext_bytes: 24,
        ..FtlConfig::default()
    }
}

fn arm(c: &mut Client, ops: u64) {
    c.device()
        .block_mut()
        .ftl_mut()
        .nand_mut()
        .arm_power_cut(PowerCut::AtOp(ops));
}

fn crash(c: Client) -> Client {
    let mut nand = c.into_device().into_block().into_ftl().crash();
    nand.disarm_power_cut();
    nand.power_on();
    let ftl = Ftl::try_recover(nand, ftl_cfg()).unwrap_or_else(|e| panic!("recovery: {}", e.error));
    Client::new(NvmeDevice::new(ftl)).expect("client")
}

/// A session on `c`, cut again `cut_at` flash operations into its open (the open
/// finishes a committed statement) when asked, until an open succeeds.
fn reopen(mut c: Client, cfg: &csd_sim::DeviceConfig, mut cut_at: Option<u64>) -> SqlSession {
    loop {
        if let Some(n) = cut_at.take() {
            arm(&mut c, n);
        }
        let tables = match Catalog::read(&mut c) {
            Ok(cat) => cat.tables,
            Err(e) => {
                assert!(
                    e.to_string().contains("power") || e.to_string().contains("Power"),
                    "{e}"
                );
                c = crash(c);
                continue;
            }
        };
        c.device()
            .block_mut()
            .ftl_mut()
            .nand_mut()
            .disarm_power_cut();
        return SqlSession::with_tables(
            c,
            cfg.clone(),
            csd_sql::ScanSettings::new(Choice::Fixed(Scan::Ihp)),
            tables,
        )
        .expect("session");
    }
}

#[test]
fn a_power_cut_during_a_statement_leaves_the_old_table_or_the_new_one() {
    let rounds: u64 = std::env::var("DML_CUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let (mut c, cfg) = client("tiny");
    let mut model: Vec<(i64, i32)> = (0..1500).map(|i| (i * 3, (i % 10) as i32)).collect();
    load(&mut c, Rows::with_note("t", model.clone()), Layout::Nsm);
    load(&mut c, Rows::new("u", vec![(1, 1)]), Layout::Nsm);
    let mut s = session(c, cfg.clone());
    run(&mut s, "CREATE INDEX t_k ON t (k)", &ALL[..1]);
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move |m: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % m.max(1)
    };
    let (mut old_seen, mut new_seen, mut finished) = (0, 0, 0);
    for round in 0..rounds {
        let op = match next(4) {
            0 => Op::Insert(
                (0..1 + next(300))
                    .map(|i| (10_000 + round as i64 * 1000 + i as i64, next(10) as i32))
                    .collect(),
            ),
            1 => Op::DeleteRange(next(5000) as i64, next(5000) as i64 + next(600) as i64),
            2 => Op::AddV(next(5000) as i64, 5000 + next(5000) as i64, 1),
            _ => Op::MoveK(next(10) as i32, next(2000) as i64 - 1000),
        };
        let mut new_model = model.clone();
        op.apply(&mut new_model);
        let mut c = s.into_client().expect("client");
        arm(&mut c, 1 + next(120));
        let tables = Catalog::read(&mut c).map(|cat| cat.tables);
        let outcome = match tables {
            Err(_) => Err(()),
            Ok(tables) => {
                let mut s = SqlSession::with_tables(
                    c,
                    cfg.clone(),
                    csd_sql::ScanSettings::new(Choice::Fixed(Scan::Ihp)),
                    tables,
                )
                .expect("session");
                let r = s.run_strategies(&op.sql(), &ALL[..1]);
                c = s.into_client().expect("client");
                r.map(|_| ()).map_err(|_| ())
            }
        };
        let acked = outcome.is_ok();
        // Power goes (the cut struck, or is pulled now), then the device recovers.
        let c = crash(c);
        let cut_again = (next(4) == 0).then(|| 1 + next(60));
        s = reopen(c, &cfg, cut_again);
        let got = rows_of(&mut s, ALL[0]);
        let old = sorted(model.clone());
        let new = sorted(new_model.clone());
        if got == new {
            new_seen += 1;
            finished += u64::from(!acked);
            model = new_model;
        } else {
            assert!(!acked, "round {round}: an acknowledged {op:?} was lost");
            assert_eq!(got, old, "round {round}: {op:?} left a mix of old and new");
            old_seen += 1;
        }
        let t = s
            .catalog()
            .iter()
            .find(|t| t.name == "t")
            .cloned()
            .expect("t");
        assert_eq!(
            t.rows,
            model.len() as u64,
            "round {round}: catalog row count"
        );
        // The index agrees with the data: every strategy under the rule finds what a
        // full scan finds.
        let (lo, hi) = (next(6000) as i64, next(6000) as i64 + 800);
        let want = model.iter().filter(|r| r.0 >= lo && r.0 <= hi).count();
        for (choice, a) in run(
            &mut s,
            &format!("SELECT count(*) FROM t WHERE k BETWEEN {lo} AND {hi}"),
            &ALL,
        ) {
            assert_eq!(
                a.rows().expect("rows"),
                vec![vec![want.to_string()]],
                "round {round} {}",
                choice.name()
            );
        }
    }
    eprintln!(
        "{rounds} cuts: {old_seen} left the old table, {new_seen} the new one \
         ({finished} of them cut after the commit and finished on open)"
    );
    assert!(
        old_seen > 0 && new_seen > 0,
        "cuts should land before and after commits: {old_seen} / {new_seen}"
    );
}
