//! Property: for random predicates over random Synthetic rows, the planner plus the
//! vectorized evaluator (random layout and page size) select exactly the rows that a
//! naive row-by-row evaluator written here selects. The naive evaluator works on the
//! generator's decoded rows in `i128` with the decimal literals as (units, scale)
//! pairs, so it shares no code with the crate.

use csd_query::{Value, plan};
use csd_table::datagen::{SyntheticGenerator, SyntheticSpec};
use csd_table::{Layout, PageView, Paginator, RowSource, Value as TValue};
use proptest::prelude::*;

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
            Term::Add(a, b) => format!("c{} + c{}", a + 1, b + 1),
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

fn case() -> impl Strategy<Value = (usize, u64, u64, Pred, bool, usize)> {
    prop_oneof![Just(4usize), Just(16usize)].prop_flat_map(|cols| {
        (
            Just(cols),
            0u64..1_500,
            any::<u64>(),
            pred(cols),
            any::<bool>(),
            prop_oneof![Just(128usize), Just(512), Just(4096)],
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn evaluator_selects_what_a_naive_evaluator_selects(
        (cols, rows, seed, p, pax, page_size) in case()
    ) {
        let spec = SyntheticSpec::new(cols, rows, seed).expect("spec");
        let schema = spec.schema();
        // naive: decoded rows, i128, row by row
        let mut g = SyntheticGenerator::new(spec).expect("generator");
        let mut image = Vec::new();
        let mut want = Vec::new();
        while g.next_row(&mut image) {
            let row: Vec<i128> = schema
                .decode_row(&image)
                .expect("row")
                .iter()
                .map(|v| match v {
                    TValue::Int32(x) => i128::from(*x),
                    other => panic!("{other:?}"),
                })
                .collect();
            if p.holds(&row) {
                want.push(Value::Int(row[0]));
            }
        }
        // the crate: plan, then every page in the chosen layout
        let sql = format!("SELECT c1 FROM {} WHERE {}", schema.name(), p.sql());
        let q = plan(&sql, &schema).map_err(|e| TestCaseError::fail(format!("{sql}: {e}")))?;
        let layout = if pax { Layout::Pax } else { Layout::Nsm };
        let mut pages = Paginator::new(SyntheticGenerator::new(spec).expect("generator"), layout, page_size)
            .expect("paginator");
        let mut eval = csd_query::Evaluator::new(&q);
        let mut part = csd_query::PartialResult::new(&q);
        while let Some(page) = pages.next_page() {
            let view = PageView::parse(page, &schema).expect("page");
            eval.eval_page(&view, &mut part).map_err(|e| TestCaseError::fail(format!("{sql}: {e}")))?;
        }
        let got: Vec<Value> = part.finish(&q).expect("finish").rows.into_iter().map(|mut r| r.remove(0)).collect();
        prop_assert_eq!(got, want, "{}", sql);
        prop_assert_eq!(eval.totals().records_examined, rows);
    }
}
