//! Whether one filter implies another: every row on which the first is TRUE makes the
//! second TRUE too. `csd-sql` asks it to serve a device scan from the rows an earlier
//! scan of the same table kept (`csd_sql::reuse`): TPC-H Q2 reads PARTSUPP for the
//! parts of one size and type, then again, in its subquery, for the suppliers of one
//! region and a subset of those parts (the join's runtime key set); the second scan's
//! rows are among the first's.
//!
//! The test is conservative (a `false` means "not shown", never "does not hold"): a
//! conjunction implies another when each of the other's terms is implied by one of its
//! own terms, and a term implies another when they are equal or when both bound the
//! same integer-ordered column (an integer, a decimal in units of its scale, a date, a
//! timestamp) and the first's values are among the second's: `c IN S` implies
//! `c IN T` when S ⊆ T and `c >= lo` when every key of S is at least `lo`; a range
//! implies a wider range. A term TRUE on a row reads a column that is not NULL there,
//! so NULLs need no care.

use crate::plan::{CmpOp, Const, Expr, ExprKind};
use crate::types::DataType;

/// Whether every row on which `a` is TRUE has `b` TRUE (see the [module docs](self)).
pub fn implies(a: &Expr, b: &Expr) -> bool {
    let (mut have, mut want) = (Vec::new(), Vec::new());
    conjuncts(a, &mut have);
    conjuncts(b, &mut want);
    want.iter().all(|w| have.iter().any(|h| term_implies(h, w)))
}

/// The terms of a conjunction (nested ones flattened); any other expression is one term.
fn conjuncts<'a>(e: &'a Expr, out: &mut Vec<&'a Expr>) {
    match &e.kind {
        ExprKind::And(terms) => terms.iter().for_each(|t| conjuncts(t, out)),
        _ => out.push(e),
    }
}

/// The values of one integer-ordered column a term keeps.
#[derive(Debug, PartialEq)]
enum Values<'a> {
    /// `lo..=hi`.
    Range(i64, i64),
    /// The keys of an `IN` list (ascending, distinct).
    Keys(&'a [i64]),
}

/// The column a term bounds (its node) and the values it keeps there, for a comparison
/// with an integer constant or an integer `IN` list on an integer-ordered column.
fn bound(e: &Expr) -> Option<(&Expr, Values<'_>)> {
    let ordered = |c: &Expr| {
        matches!(c.kind, ExprKind::Column { .. })
            && matches!(
                c.ty,
                DataType::Int | DataType::Decimal { .. } | DataType::Date | DataType::Timestamp
            )
    };
    match &e.kind {
        ExprKind::Cmp { op, left, right } => {
            let (col, op, v) = match (&left.kind, &right.kind) {
                (_, ExprKind::Const(Const::Int(v))) if ordered(left) => (&**left, *op, *v),
                (ExprKind::Const(Const::Int(v)), _) if ordered(right) => (&**right, op.flip(), *v),
                _ => return None,
            };
            let range = match op {
                CmpOp::Eq => (v, v),
                CmpOp::Lt => (i64::MIN, v.checked_sub(1)?),
                CmpOp::Le => (i64::MIN, v),
                CmpOp::Gt => (v.checked_add(1)?, i64::MAX),
                CmpOp::Ge => (v, i64::MAX),
                CmpOp::Ne => return None,
            };
            Some((col, Values::Range(range.0, range.1)))
        }
        ExprKind::InList {
            expr,
            list,
            negated: false,
        } if ordered(expr) => Some((&**expr, Values::Keys(list.ints()?))),
        _ => None,
    }
}

/// Whether term `h` implies term `w`.
fn term_implies(h: &Expr, w: &Expr) -> bool {
    if h == w {
        return true;
    }
    let (Some((hc, hv)), Some((wc, wv))) = (bound(h), bound(w)) else {
        return false;
    };
    let same_column = match (&hc.kind, &wc.kind) {
        (ExprKind::Column { index: i, .. }, ExprKind::Column { index: j, .. }) => {
            i == j && hc.ty == wc.ty
        }
        _ => false,
    };
    if !same_column {
        return false;
    }
    match (hv, wv) {
        (Values::Range(a, b), Values::Range(lo, hi)) => a > b || (lo <= a && b <= hi),
        // An empty list keeps no row: it implies anything.
        (Values::Keys(k), Values::Range(lo, hi)) => match (k.first(), k.last()) {
            (Some(&a), Some(&b)) => lo <= a && b <= hi,
            _ => true,
        },
        (Values::Keys(k), Values::Keys(s)) => subset(k, s),
        // A range of a few integers is a list of them.
        (Values::Range(a, b), Values::Keys(s)) => {
            a > b
                || (b.checked_sub(a).is_some_and(|n| n < 64)
                    && (a..=b).all(|v| s.binary_search(&v).is_ok()))
        }
    }
}

/// Whether the ascending, distinct `k` are all in the ascending, distinct `s` (one merge).
fn subset(k: &[i64], s: &[i64]) -> bool {
    if k.len() > s.len() {
        return false;
    }
    let mut rest = s;
    for &v in k {
        let at = rest.partition_point(|&x| x < v);
        if rest.get(at) != Some(&v) {
            return false;
        }
        rest = &rest[at + 1..];
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::ConstSet;
    use proptest::prelude::*;
    use std::sync::Arc;

    fn col(index: usize, ty: DataType) -> Expr {
        Expr::new(
            ExprKind::Column {
                index,
                name: format!("c{index}"),
                nullable: false,
            },
            ty,
        )
    }

    fn cmp(op: CmpOp, index: usize, v: i64) -> Expr {
        Expr::new(
            ExprKind::Cmp {
                op,
                left: Box::new(col(index, DataType::Int)),
                right: Box::new(Expr::constant(Const::Int(v), DataType::Int)),
            },
            DataType::Bool,
        )
    }

    fn keys(index: usize, mut k: Vec<i64>, negated: bool) -> Expr {
        k.sort_unstable();
        k.dedup();
        Expr::new(
            ExprKind::InList {
                expr: Box::new(col(index, DataType::Int)),
                list: ConstSet::of_sorted_ints(Arc::from(k)),
                negated,
            },
            DataType::Bool,
        )
    }

    fn and(t: Vec<Expr>) -> Expr {
        Expr::new(ExprKind::And(t), DataType::Bool)
    }

    /// TPC-H Q2's two PARTSUPP scans: the subquery's keys are among the first scan's.
    #[test]
    fn a_runtime_key_subset_with_more_terms_implies_the_wider_scan() {
        let first = and(vec![
            cmp(CmpOp::Ge, 0, 249),
            cmp(CmpOp::Le, 0, 199_723),
            keys(0, vec![249, 323, 1015, 199_723], false),
        ]);
        let second = and(vec![
            cmp(CmpOp::Ge, 1, 7),
            cmp(CmpOp::Le, 1, 10_000),
            keys(1, vec![7, 16, 10_000], false),
            keys(0, vec![249, 1015], false),
        ]);
        assert!(implies(&second, &first));
        assert!(!implies(&first, &second));
        // One key outside the first scan's set: not implied.
        let wider = and(vec![
            keys(1, vec![7], false),
            keys(0, vec![249, 250], false),
        ]);
        assert!(!implies(&wider, &first));
    }

    #[test]
    fn other_columns_types_and_negations_are_not_implied() {
        assert!(!implies(&cmp(CmpOp::Ge, 1, 5), &cmp(CmpOp::Ge, 0, 5)));
        let on_decimal = Expr::new(
            ExprKind::Cmp {
                op: CmpOp::Ge,
                left: Box::new(col(0, DataType::Decimal { scale: 2 })),
                right: Box::new(Expr::constant(
                    Const::Int(5),
                    DataType::Decimal { scale: 2 },
                )),
            },
            DataType::Bool,
        );
        assert!(!implies(&on_decimal, &cmp(CmpOp::Ge, 0, 5)));
        assert!(!implies(
            &keys(0, vec![1, 2], true),
            &keys(0, vec![1, 2, 3], false)
        ));
        assert!(!implies(&cmp(CmpOp::Ne, 0, 3), &cmp(CmpOp::Ne, 0, 4)));
        assert!(implies(&cmp(CmpOp::Ne, 0, 3), &cmp(CmpOp::Ne, 0, 3)));
    }

    /// A random term over two columns: a comparison with a small constant or a small
    /// `IN` list (possibly negated).
    fn term() -> impl Strategy<Value = Expr> {
        let ops = prop::sample::select(CmpOp::ALL.to_vec());
        prop_oneof![
            (ops, 0usize..2, -3i64..12).prop_map(|(op, c, v)| cmp(op, c, v)),
            (
                0usize..2,
                prop::collection::vec(-3i64..12, 0..6),
                prop::bool::weighted(0.2)
            )
                .prop_map(|(c, k, n)| keys(c, k, n)),
        ]
    }

    fn filter() -> impl Strategy<Value = Expr> {
        prop::collection::vec(term(), 1..4).prop_map(and)
    }

    /// The reference: the filter's truth on one row, by the predicate's definition.
    fn holds(e: &Expr, row: [i64; 2]) -> bool {
        match &e.kind {
            ExprKind::And(t) => t.iter().all(|t| holds(t, row)),
            ExprKind::Cmp { op, left, right } => {
                let (ExprKind::Column { index, .. }, Some(v)) = (&left.kind, right.as_int_const())
                else {
                    unreachable!("the generator's comparisons")
                };
                op.test(row[*index], v)
            }
            ExprKind::InList {
                expr,
                list,
                negated,
            } => {
                let ExprKind::Column { index, .. } = expr.kind else {
                    unreachable!("the generator's lists")
                };
                list.contains_int(row[index]) != *negated
            }
            _ => unreachable!("the generator's terms"),
        }
    }

    proptest! {
        /// Soundness against the definition: when `implies` says so, no row of the
        /// whole small domain keeps `a` without `b`.
        #[test]
        fn implied_filters_hold_on_every_row(a in filter(), b in filter()) {
            if implies(&a, &b) {
                for x in -5i64..14 {
                    for y in -5i64..14 {
                        prop_assert!(!holds(&a, [x, y]) || holds(&b, [x, y]),
                            "row ({x}, {y}) keeps {a:?} but not {b:?}");
                    }
                }
            }
        }

        /// A filter implies itself and each of its own terms; adding a term to a
        /// filter keeps the implication.
        #[test]
        fn a_filter_implies_itself_and_its_terms(a in filter(), t in term()) {
            prop_assert!(implies(&a, &a));
            if let ExprKind::And(terms) = &a.kind {
                for x in terms {
                    prop_assert!(implies(&a, x));
                }
                let mut more = terms.clone();
                more.push(t);
                prop_assert!(implies(&and(more), &a));
            }
        }
    }
}
