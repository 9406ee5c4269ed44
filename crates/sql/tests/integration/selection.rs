//! Selection semantics through SQL: for random predicates over random Synthetic rows,
//! DataFusion's plan with the predicate pushed into the device program (translator,
//! builder, evaluator; every strategy, NSM and PAX) selects exactly the rows that a
//! naive row-by-row evaluator written here selects. The naive evaluator works on the
//! generator's decoded rows in `i128` with the decimal literals as (units, scale)
//! pairs, so it shares no code with csd. Also: a projection and aggregations (with `OR`,
//! `NOT`, `BETWEEN`, `IN` and arithmetic; `AVG` of an integer column) identical across
//! strategies and layouts, equal to a reference and computed in the device.

use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

use csd_device::NvmeDevice;
use csd_ftl::{Ftl, FtlConfig};
use csd_host::{Catalog, Client, Strategy as Scan};
use csd_nand::Nand;
use csd_sim::DeviceConfig;
use csd_sql::{Choice, ScanSettings, SqlSession};
use csd_table::datagen::{SyntheticGenerator, SyntheticSpec};
use csd_table::{Layout, RowSource, Value as TValue};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

#[derive(Debug, Clone, Copy)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Op {
    fn sql(self) -> &'static str {
        match self {
            Op::Eq => "=",
            Op::Ne => "<>",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        }
    }
    fn test(self, a: i128, b: i128) -> bool {
        match self {
            Op::Eq => a == b,
            Op::Ne => a != b,
            Op::Lt => a < b,
            Op::Le => a <= b,
            Op::Gt => a > b,
            Op::Ge => a >= b,
        }
    }
}

/// A numeric literal `units * 10^-scale`.
#[derive(Debug, Clone, Copy)]
struct Lit {
    units: i64,
    scale: u8,
}

impl Lit {
    fn sql(self) -> String {
        let s = usize::from(self.scale);
        let abs = self.units.unsigned_abs().to_string();
        let sign = if self.units < 0 { "-" } else { "" };
        if s == 0 {
            format!("{sign}{abs}")
        } else {
            let padded = format!("{abs:0>width$}", width = s + 1);
            let (i, f) = padded.split_at(padded.len() - s);
            format!("{sign}{i}.{f}")
        }
    }
}

/// Compares an integer `v` with a literal exactly: `v * 10^s  op  units`.
fn cmp_lit(v: i128, op: Op, l: Lit) -> bool {
    op.test(v * 10i128.pow(u32::from(l.scale)), i128::from(l.units))
}

#[derive(Debug, Clone)]
enum Term {
    Col(usize),
    Add(usize, usize),
    Sub(usize, usize),
    MulK(usize, i64),
    Neg(usize),
}

impl Term {
    fn sql(&self) -> String {
        match self {
            Term::Col(a) => format!("c{}", a + 1),
            // INT32 + INT32 is INT32 in DataFusion, which wraps on overflow (c2..cN reach
            // i32::MAX); the widened sum is what the naive evaluator computes.
            Term::Add(a, b) => format!("CAST(c{} AS BIGINT) + c{}", a + 1, b + 1),
            Term::Sub(a, b) => format!("(c{} - c{})", a + 1, b + 1),
            Term::MulK(a, k) => format!("c{} * {k}", a + 1),
            Term::Neg(a) => format!("-c{}", a + 1),
        }
    }
    fn eval(&self, row: &[i128]) -> i128 {
        match *self {
            Term::Col(a) => row[a],
            Term::Add(a, b) => row[a] + row[b],
            Term::Sub(a, b) => row[a] - row[b],
            Term::MulK(a, k) => row[a] * i128::from(k),
            Term::Neg(a) => -row[a],
        }
    }
}

#[derive(Debug, Clone)]
enum Pred {
    Cmp(Term, Op, Lit),
    ColCol(usize, Op, usize),
    Between(Term, Lit, Lit, bool),
    In(usize, Vec<Lit>, bool),
    And(Box<Pred>, Box<Pred>),
    Or(Box<Pred>, Box<Pred>),
    Not(Box<Pred>),
}

impl Pred {
    fn sql(&self) -> String {
        match self {
            Pred::Cmp(t, op, l) => format!("{} {} {}", t.sql(), op.sql(), l.sql()),
            Pred::ColCol(a, op, b) => format!("c{} {} c{}", a + 1, op.sql(), b + 1),
            Pred::Between(t, lo, hi, neg) => format!(
                "{} {}BETWEEN {} AND {}",
                t.sql(),
                if *neg { "NOT " } else { "" },
                lo.sql(),
                hi.sql()
            ),
            Pred::In(a, list, neg) => format!(
                "c{} {}IN ({})",
                a + 1,
                if *neg { "NOT " } else { "" },
                list.iter().map(|l| l.sql()).collect::<Vec<_>>().join(", ")
            ),
            Pred::And(a, b) => format!("({} AND {})", a.sql(), b.sql()),
            Pred::Or(a, b) => format!("({} OR {})", a.sql(), b.sql()),
            Pred::Not(a) => format!("NOT ({})", a.sql()),
        }
    }

    /// The naive row-at-a-time evaluator.
    fn holds(&self, row: &[i128]) -> bool {
        match self {
            Pred::Cmp(t, op, l) => cmp_lit(t.eval(row), *op, *l),
            Pred::ColCol(a, op, b) => op.test(row[*a], row[*b]),
            Pred::Between(t, lo, hi, neg) => {
                let v = t.eval(row);
                (cmp_lit(v, Op::Ge, *lo) && cmp_lit(v, Op::Le, *hi)) != *neg
            }
            Pred::In(a, list, neg) => list.iter().any(|l| cmp_lit(row[*a], Op::Eq, *l)) != *neg,
            Pred::And(a, b) => a.holds(row) && b.holds(row),
            Pred::Or(a, b) => a.holds(row) || b.holds(row),
            Pred::Not(a) => !a.holds(row),
        }
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::Eq),
        Just(Op::Ne),
        Just(Op::Lt),
        Just(Op::Le),
        Just(Op::Gt),
        Just(Op::Ge)
    ]
}

fn lit() -> impl Strategy<Value = Lit> {
    (
        prop_oneof![-5i64..2_000, -3_000_000_000_000i64..3_000_000_000_000],
        0u8..=3,
    )
        .prop_map(|(units, scale)| Lit { units, scale })
}

fn pred(cols: usize) -> impl Strategy<Value = Pred> {
    // c1 (index 0) is a small permutation, so favour it for hits on small literals
    let col = prop_oneof![3 => Just(0usize), 2 => 0..cols];
    let term = prop_oneof![
        3 => col.clone().prop_map(Term::Col),
        1 => (col.clone(), col.clone()).prop_map(|(a, b)| Term::Add(a, b)),
        1 => (col.clone(), col.clone()).prop_map(|(a, b)| Term::Sub(a, b)),
        1 => (col.clone(), -3i64..=3).prop_map(|(a, k)| Term::MulK(a, k)),
        1 => col.clone().prop_map(Term::Neg),
    ];
    let leaf = prop_oneof![
        4 => (term.clone(), op(), lit()).prop_map(|(t, o, l)| Pred::Cmp(t, o, l)),
        1 => (col.clone(), op(), col.clone()).prop_map(|(a, o, b)| Pred::ColCol(a, o, b)),
        2 => (term, lit(), lit(), any::<bool>()).prop_map(|(t, a, b, n)| Pred::Between(t, a, b, n)),
        1 => (col, proptest::collection::vec(lit(), 1..4), any::<bool>())
            .prop_map(|(c, l, n)| Pred::In(c, l, n)),
    ];
    leaf.prop_recursive(3, 12, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Pred::And(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Pred::Or(Box::new(a), Box::new(b))),
            inner.prop_map(|a| Pred::Not(Box::new(a))),
        ]
    })
}

/// The tables of the property test: (name, columns, rows, seed, layout).
const TABLES: [(&str, usize, u64, u64, Layout); 4] = [
    ("s4_nsm", 4, 1_200, 7, Layout::Nsm),
    ("s4_pax", 4, 900, 8, Layout::Pax),
    ("s16_nsm", 16, 1_500, 9, Layout::Nsm),
    ("s16_pax", 16, 700, 10, Layout::Pax),
];

/// A device (tiny preset, in memory) with `tables` loaded, and a session over it.
fn session(tables: &[(&str, usize, u64, u64, Layout)]) -> SqlSession {
    let cfg = DeviceConfig::preset("tiny").expect("preset");
    let nand = Nand::new_in_memory(cfg.clone()).expect("nand");
    let ftl = Ftl::format(nand, FtlConfig::default()).expect("format");
    let mut c = Client::new(NvmeDevice::new(ftl)).expect("client");
    for &(name, cols, rows, seed, layout) in tables {
        let spec = SyntheticSpec::new(cols, rows, seed).expect("spec");
        let g = SyntheticGenerator::new(spec).expect("generator");
        Catalog::load(&mut c, name, g, layout, &mut |_| {}).expect("load");
    }
    SqlSession::new(c, cfg, ScanSettings::new(Choice::Fixed(Scan::Ihp))).expect("session")
}

/// Every row of a synthetic table, decoded, as `i128`.
fn decoded_rows(cols: usize, rows: u64, seed: u64) -> Vec<Vec<i128>> {
    let spec = SyntheticSpec::new(cols, rows, seed).expect("spec");
    let schema = spec.schema();
    let mut g = SyntheticGenerator::new(spec).expect("generator");
    let mut image = Vec::new();
    let mut out = Vec::new();
    while g.next_row(&mut image) {
        out.push(
            schema
                .decode_row(&image)
                .expect("row")
                .iter()
                .map(|v| match v {
                    TValue::Int32(x) => i128::from(*x),
                    other => panic!("{other:?}"),
                })
                .collect(),
        );
    }
    out
}

fn scan_strategy() -> impl Strategy<Value = Scan> {
    prop_oneof![Just(Scan::Ihp), Just(Scan::CpuIsp), Just(Scan::HwIsp)]
}

#[test]
fn pushed_predicates_select_what_a_naive_evaluator_selects() {
    // `TestRunner::run` takes a `Fn`: the session changes settings per case.
    let s = std::cell::RefCell::new(session(&TABLES));
    let rows: Vec<Vec<Vec<i128>>> = TABLES
        .iter()
        .map(|&(_, cols, n, seed, _)| decoded_rows(cols, n, seed))
        .collect();
    let (cases, pushed) = (AtomicU64::new(0), AtomicU64::new(0));
    let case = (0..TABLES.len(), scan_strategy())
        .prop_flat_map(|(t, st)| (Just(t), Just(st), pred(TABLES[t].1)));
    let mut runner = TestRunner::new(Config {
        cases: 256,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&case, |(t, st, p)| {
            let name = TABLES[t].0;
            let sql = format!("SELECT c1 FROM {name} WHERE {}", p.sql());
            let mut want: Vec<i128> = rows[t]
                .iter()
                .filter(|r| p.holds(r))
                .map(|r| r[0])
                .collect();
            want.sort_unstable();
            let mut s = s.borrow_mut();
            s.set_settings(ScanSettings::new(Choice::Fixed(st)))
                .expect("settings");
            let a = s
                .run(&sql)
                .map_err(|e| TestCaseError::fail(format!("{sql}: {e}")))?;
            let mut got: Vec<i128> = a
                .rows()
                .expect("rows")
                .iter()
                .map(|r| r[0].parse().expect("integer"))
                .collect();
            got.sort_unstable();
            prop_assert_eq!(got, want, "{} ({})", sql, st.name());
            cases.fetch_add(1, AtomicOrdering::Relaxed);
            if a.scans.iter().any(|sc| sc.program.contains("filter")) {
                pushed.fetch_add(1, AtomicOrdering::Relaxed);
            }
            // DataFusion answers a predicate it folds to FALSE without scanning.
            prop_assert!(a.scans.len() <= 1);
            if let Some(sc) = a.scans.first() {
                prop_assert_eq!(sc.report.work.records_examined, TABLES[t].2);
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    // The property is about the device's evaluation: nearly every predicate must have
    // been pushed (DataFusion folds a few to constants or keeps what does not translate).
    let (n, p) = (cases.into_inner(), pushed.into_inner());
    eprintln!("{p} of {n} predicates ran in the device program");
    assert!(p * 10 >= n * 9, "only {p} of {n} predicates were pushed");
}

const ROWS: u64 = 20_000;

#[test]
fn projection_and_aggregation_identical_across_strategies_and_layouts() {
    let mut s = session(&[
        ("nsm", 16, ROWS, 7, Layout::Nsm),
        ("pax", 16, ROWS, 7, Layout::Pax),
    ]);
    let rows = decoded_rows(16, ROWS, 7);
    let v = 2_000; // c1 is a permutation of 0..ROWS: c1 < 2000 selects exactly 10%
    let mut want: Vec<Vec<String>> = rows
        .iter()
        .filter(|r| r[0] < v)
        .map(|r| vec![r[1].to_string(), r[0].to_string()])
        .collect();
    want.sort_by_key(|r| r[1].parse::<i128>().expect("integer"));
    let sel =
        |r: &Vec<i128>| (r[0] < v || (r[2] >= 100 && r[2] <= 5000)) && r[3] >= 1000 && r[4] != 42;
    let hits: Vec<&Vec<i128>> = rows.iter().filter(|r| sel(r)).collect();
    let agg_want = vec![vec![
        hits.len().to_string(),
        hits.iter()
            .map(|r| r[1] * 2 + r[5])
            .sum::<i128>()
            .to_string(),
        hits.iter().map(|r| r[6]).min().expect("rows").to_string(),
        hits.iter().map(|r| r[6]).max().expect("rows").to_string(),
    ]];
    let all: Vec<Choice> = Scan::ALL.into_iter().map(Choice::Fixed).collect();
    for table in ["nsm", "pax"] {
        let sql = format!("SELECT c2, c1 FROM {table} WHERE c1 < {v} ORDER BY c1");
        for (c, a) in s.run_strategies(&sql, &all).expect("projection") {
            assert_eq!(a.rows().expect("rows"), want, "{table} {}", c.name());
            assert!(
                a.scans[0].program.contains("filter"),
                "{}",
                a.scans[0].program
            );
        }
        let sql = format!(
            "SELECT COUNT(*), SUM(CAST(c2 AS BIGINT) * 2 + c6), MIN(c7), MAX(c7) FROM {table} \
             WHERE (c1 < {v} OR c3 BETWEEN 100 AND 5000) AND NOT (c4 < 1000) AND c5 NOT IN (42)"
        );
        for (c, a) in s.run_strategies(&sql, &all).expect("aggregation") {
            assert_eq!(a.rows().expect("rows"), agg_want, "{table} {}", c.name());
            let program = &a.scans[0].program;
            assert!(
                program.contains("partial aggregate") && program.contains("filter"),
                "{table} {}: {program}",
                c.name()
            );
        }
        // The smart-ssd paper's aggregation (§4.2.2, Figure 6): AVG of an INT32 column,
        // which DataFusion averages as Float64, still aggregates in the device.
        let sql = format!("SELECT AVG(c2) FROM {table} WHERE c1 < {v}");
        let hits: Vec<i128> = rows.iter().filter(|r| r[0] < v).map(|r| r[1]).collect();
        let mean = hits.iter().sum::<i128>() as f64 / hits.len() as f64;
        for (c, a) in s.run_strategies(&sql, &all).expect("avg") {
            let got: f64 = a.rows().expect("rows")[0][0].parse().expect("number");
            assert_eq!(got, mean, "{table} {}", c.name());
            let program = &a.scans[0].program;
            assert!(program.contains("partial aggregate"), "{program}");
            assert_eq!(a.scans[0].report.result_rows, 1);
        }
    }
}
