//! Typed construction of device-program expressions: the rules that make an
//! [`Expr`] exact (no float, no rounding) whoever builds it — the SQL front end
//! (`csd-sql`, from DataFusion's expressions) or a test.
//!
//! * `+`/`-` operands are brought to one decimal scale ([`ExprKind::Rescale`]), `*` adds
//!   scales (at most [`MAX_SCALE`]), `/` truncates integers and rounds decimals half away
//!   from zero at scale `max(6, s_left, s_right)`;
//! * a comparison with a constant is rewritten to the other side's scale exactly
//!   (`x < 0.065` on a scale-2 column is `x < 7`; `x = 0.065` is `FALSE`);
//! * constant sub-expressions are folded with the evaluator's own operator code;
//! * `NOT` is pushed into comparisons, `IN` and `LIKE` (exact: no value is NULL).
//!
//! Every function takes a `whole` text naming the expression for error messages.

use std::cmp::Ordering;

use csd_table::decimal::pow10;

use crate::error::BuildError;
use crate::kernels::cmp_padded;
use crate::plan::{ArithOp, CmpOp, Const, ConstSet, Expr, ExprKind};
use crate::types::{DataType, MAX_SCALE};

/// Outcome of comparing a scale-`s` expression with a constant of another scale.
pub(crate) enum Normalized {
    /// `expr op c` with `c` now at the expression's scale.
    Cmp(CmpOp, i64),
    /// The comparison has this value on every row.
    Always(bool),
}

/// The value of a numeric constant (`Int` or `Wide`).
pub(crate) fn num_const(e: &Expr) -> Option<i128> {
    match e.as_const()? {
        Const::Int(v) => Some(i128::from(*v)),
        Const::Wide(v) => Some(*v),
        _ => None,
    }
}

/// Rejects a [`Const::Wide`] left where a value must be computed with.
pub(crate) fn reject_wide(e: &Expr) -> Result<(), BuildError> {
    let mut err = Ok(());
    visit(e, &mut |x| {
        if let ExprKind::Const(Const::Wide(_)) = x.kind
            && err.is_ok()
        {
            err = Err(BuildError::Literal {
                text: x.to_string(),
                reason: "a number this large or this precise can only be compared with, not \
                         computed with or returned (at most 18 digits after the point and 19 \
                         significant digits)"
                    .into(),
            });
        }
    });
    err
}

pub(crate) fn visit(e: &Expr, f: &mut dyn FnMut(&Expr)) {
    f(e);
    match &e.kind {
        ExprKind::Column { .. } | ExprKind::Const(_) => {}
        ExprKind::Neg(x)
        | ExprKind::Not(x)
        | ExprKind::Rescale { expr: x, .. }
        | ExprKind::InList { expr: x, .. }
        | ExprKind::Like { expr: x, .. }
        | ExprKind::LikeAny { expr: x, .. }
        | ExprKind::IsNull { expr: x, .. }
        | ExprKind::Known { expr: x, .. }
        | ExprKind::Truth { expr: x, .. } => visit(x, f),
        ExprKind::Arith { left, right, .. } | ExprKind::Cmp { left, right, .. } => {
            visit(left, f);
            visit(right, f);
        }
        ExprKind::And(es) | ExprKind::Or(es) => es.iter().for_each(|x| visit(x, f)),
    }
}

/// A binary arithmetic operator of the builder ([`arith`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryArith {
    /// `+`.
    Add,
    /// `-`.
    Sub,
    /// `*`.
    Mul,
    /// `/`.
    Div,
}

/// Types `l op r` and inserts the rescaling that makes `+`/`-` operands equal in scale.
pub fn arith(op: BinaryArith, l: Expr, r: Expr, whole: &str) -> Result<Expr, BuildError> {
    reject_wide(&l)?;
    reject_wide(&r)?;
    let sym = match op {
        BinaryArith::Add => "+",
        BinaryArith::Sub => "-",
        BinaryArith::Mul => "*",
        BinaryArith::Div => "/",
    };
    let err = BuildError::Arithmetic {
        op: sym,
        left: l.ty,
        right: r.ty,
    };
    let make = |op: ArithOp, l: Expr, r: Expr, ty: DataType| {
        fold(
            Expr::new(
                ExprKind::Arith {
                    op,
                    left: Box::new(l),
                    right: Box::new(r),
                },
                ty,
            ),
            whole,
        )
    };
    match (l.ty.scale(), r.ty.scale()) {
        (Some(sl), Some(sr)) => {
            let both_int = l.ty == DataType::Int && r.ty == DataType::Int;
            let number = |s: u8| {
                if both_int {
                    DataType::Int
                } else {
                    DataType::Decimal { scale: s }
                }
            };
            match op {
                BinaryArith::Add | BinaryArith::Sub => {
                    let s = sl.max(sr);
                    let l = rescale(l, s - sl, whole)?;
                    let r = rescale(r, s - sr, whole)?;
                    let aop = if matches!(op, BinaryArith::Add) {
                        ArithOp::Add
                    } else {
                        ArithOp::Sub
                    };
                    make(aop, l, r, number(s))
                }
                BinaryArith::Mul => {
                    let s = u32::from(sl) + u32::from(sr);
                    if s > u32::from(MAX_SCALE) {
                        return Err(BuildError::Scale {
                            expr: whole.to_string(),
                            scale: s,
                        });
                    }
                    // s <= 18 was just checked
                    make(ArithOp::Mul, l, r, number(s as u8))
                }
                BinaryArith::Div => {
                    if both_int {
                        make(ArithOp::IntDiv, l, r, DataType::Int)
                    } else {
                        let s = sl.max(sr).max(6);
                        let shift = s - sl + sr;
                        make(
                            ArithOp::DecDiv { shift },
                            l,
                            r,
                            DataType::Decimal { scale: s },
                        )
                    }
                }
            }
        }
        _ => match (op, l.ty, r.ty) {
            (BinaryArith::Add, DataType::Date, DataType::Int)
            | (BinaryArith::Add, DataType::Int, DataType::Date) => {
                make(ArithOp::Add, l, r, DataType::Date)
            }
            (BinaryArith::Sub, DataType::Date, DataType::Int) => {
                make(ArithOp::Sub, l, r, DataType::Date)
            }
            (BinaryArith::Sub, DataType::Date, DataType::Date) => {
                make(ArithOp::Sub, l, r, DataType::Int)
            }
            _ => Err(err),
        },
    }
}

/// `e * 10^by`, typed at the larger scale (folded when `e` is a constant).
pub fn rescale(e: Expr, by: u8, whole: &str) -> Result<Expr, BuildError> {
    if by == 0 {
        return Ok(e);
    }
    let ty = match e.ty {
        DataType::Int | DataType::Decimal { .. } => DataType::Decimal {
            scale: e.ty.scale().unwrap_or(0) + by,
        },
        other => other,
    };
    fold(
        Expr::new(
            ExprKind::Rescale {
                expr: Box::new(e),
                by,
            },
            ty,
        ),
        whole,
    )
}

/// Replaces a node whose operands are all constants by its value, computed with the
/// evaluator's own operator code ([`ArithOp::apply`]).
pub fn fold(e: Expr, whole: &str) -> Result<Expr, BuildError> {
    let fail = |zero: bool| BuildError::Constant {
        expr: whole.to_string(),
        source: if zero {
            crate::error::EvalError::DivisionByZero {
                expr: whole.to_string(),
            }
        } else {
            crate::error::EvalError::Overflow {
                expr: whole.to_string(),
            }
        },
    };
    let value = match &e.kind {
        ExprKind::Arith { op, left, right } => match (left.as_int_const(), right.as_int_const()) {
            (Some(a), Some(b)) => op.apply(a, b).map_err(fail)?,
            _ => return Ok(e),
        },
        ExprKind::Neg(x) => match x.as_int_const() {
            Some(a) => a.checked_neg().ok_or_else(|| fail(false))?,
            None => return Ok(e),
        },
        ExprKind::Rescale { expr, by } => match expr.as_int_const() {
            Some(a) => pow10(*by)
                .and_then(|p| a.checked_mul(p))
                .ok_or_else(|| fail(false))?,
            None => return Ok(e),
        },
        _ => return Ok(e),
    };
    Ok(Expr::constant(Const::Int(value), e.ty))
}

/// `expr op c`, `expr` (an `i64`) at scale `s`, `c` at scale `t`, rewritten exactly to
/// a comparison with an `i64` constant at scale `s`, or to a constant truth value.
pub(crate) fn normalize_const(op: CmpOp, s: u8, c: i128, t: u8) -> Normalized {
    match normalize_wide(op, s, c, t) {
        Normalized128::Always(b) => Normalized::Always(b),
        // beyond the i64 range the outcome is fixed
        Normalized128::Cmp(op, v) => match i64::try_from(v) {
            Ok(x) => Normalized::Cmp(op, x),
            Err(_) => Normalized::Always(op.holds(if v > 0 {
                Ordering::Less
            } else {
                Ordering::Greater
            })),
        },
    }
}

/// [`Normalized`] for an `i128` expression (a `DECIMAL(p, s)` column).
pub(crate) enum Normalized128 {
    /// `expr op c` with `c` now at the expression's scale.
    Cmp(CmpOp, i128),
    /// The comparison has this value on every row.
    Always(bool),
}

/// `expr op c`, `expr` (an `i128`) at scale `s`, `c` at scale `t`, rewritten exactly to
/// a comparison with an `i128` constant at scale `s`, or to a constant truth value.
pub(crate) fn normalize_wide(op: CmpOp, s: u8, c: i128, t: u8) -> Normalized128 {
    match t.cmp(&s) {
        Ordering::Equal => Normalized128::Cmp(op, c),
        Ordering::Less => match 10i128
            .checked_pow(u32::from(s - t))
            .and_then(|f| c.checked_mul(f))
        {
            Some(up) => Normalized128::Cmp(op, up),
            // |c * 10^(s-t)| > i128::MAX > every value: c != 0 here
            None => Normalized128::Always(op.holds(if c > 0 {
                Ordering::Less
            } else {
                Ordering::Greater
            })),
        },
        Ordering::Greater => {
            // expr * f  op  c, with f = 10^(t-s) (t <= 38): compare expr with
            // floor(c / f) or ceil(c / f)
            let f = 10i128.checked_pow(u32::from(t - s)).unwrap_or(i128::MAX);
            let floor = c.div_euclid(f);
            let exact = c.rem_euclid(f) == 0;
            let ceil = if exact { floor } else { floor + 1 };
            match op {
                CmpOp::Lt => Normalized128::Cmp(CmpOp::Lt, ceil),
                CmpOp::Le => Normalized128::Cmp(CmpOp::Le, floor),
                CmpOp::Gt => Normalized128::Cmp(CmpOp::Gt, floor),
                CmpOp::Ge => Normalized128::Cmp(CmpOp::Ge, ceil),
                CmpOp::Eq if exact => Normalized128::Cmp(CmpOp::Eq, floor),
                CmpOp::Ne if exact => Normalized128::Cmp(CmpOp::Ne, floor),
                CmpOp::Eq => Normalized128::Always(false),
                CmpOp::Ne => Normalized128::Always(true),
            }
        }
    }
}

/// `x op c` for a `FLOAT32` expression `x` and a `FLOAT64` constant `c` (DataFusion's
/// `CAST(x AS DOUBLE) op c`), rewritten exactly to a comparison of `x` with a `FLOAT32`
/// constant in the order of [`crate::types::float_key`]: `c` itself when it is a
/// `FLOAT32` value, else the largest `FLOAT32` below it (`x < c` is `x <= lower`, `x > c`
/// is `x > lower`, `x = c` never holds). A NaN constant is refused (NaNs' payloads do not
/// survive the widening alike).
fn compare_widened_f32(op: CmpOp, x: Expr, key: i64) -> Result<Expr, BuildError> {
    let c = f64::from_bits(crate::types::float_bits(key, 8));
    if c.is_nan() {
        return Err(BuildError::Compare {
            left: DataType::Float32,
            right: DataType::Float64,
            hint: ": a NaN constant against a FLOAT32 column".into(),
        });
    }
    let c32 = c as f32;
    let f32_const =
        |v: f32| Expr::constant(Const::Int(crate::types::f32_key(v)), DataType::Float32);
    if f64::from(c32).to_bits() == c.to_bits() {
        return Ok(cmp_node(op, x, f32_const(c32)));
    }
    let lower = if f64::from(c32) > c {
        c32.next_down()
    } else {
        c32
    };
    Ok(match op {
        CmpOp::Lt | CmpOp::Le => cmp_node(CmpOp::Le, x, f32_const(lower)),
        CmpOp::Gt | CmpOp::Ge => cmp_node(CmpOp::Gt, x, f32_const(lower)),
        CmpOp::Eq => known(x, false),
        CmpOp::Ne => known(x, true),
    })
}

/// Arrow's cast of one float to `DECIMAL(_, scale)` units (arrow-cast's
/// `single_float_to_decimal`, which DataFusion's `CAST(x AS DECIMAL(p, s))` runs):
/// `round(10^s * x)`, halves away from zero, in `f64`, then to `i128` as num-traits
/// converts (`None` for NaN and beyond `i128`; DataFusion's cast then fails, as it does
/// beyond `10^p`). `10^s` is exact for `s <= 22`, where [`float_decimal_bounds`] is used.
pub fn float_to_decimal_units(x: f64, scale: u8) -> Option<i128> {
    let v = (10_f64.powi(i32::from(scale)) * x).round();
    const LIMIT: f64 = 170_141_183_460_469_231_731_687_303_715_884_105_728.0; // 2^127
    (-LIMIT..LIMIT).contains(&v).then_some(v as i128)
}

/// Largest decimal scale whose power of ten an `f64` holds exactly (`5^22 < 2^53`).
pub const FLOAT_DECIMAL_MAX_SCALE: u8 = 22;

/// The float order keys ([`crate::types::float_key`], `width` 4 or 8 bytes) bounding
/// the floats `x` whose cast to `DECIMAL(_, scale)` ([`float_to_decimal_units`]) is at
/// least `c`, and greater than `c`: `(ge, gt)`, the least keys with
/// `cast(x) >= c` and `cast(x) > c`. The cast is monotone in `x` (a product with a
/// positive constant, correctly rounded, then rounded to an integer), so `cast(x) >= c`
/// holds exactly for the keys from `ge` on; a value beyond `i128` (`±inf` among them)
/// counts as beyond every `c`, and NaN, whose key is above `inf`'s, as above too (where
/// DataFusion's cast fails). `None` for a scale beyond [`FLOAT_DECIMAL_MAX_SCALE`].
pub fn float_decimal_bounds(width: usize, scale: u8, c: i128) -> Option<(i64, i64)> {
    if scale > FLOAT_DECIMAL_MAX_SCALE {
        return None;
    }
    let value = |k: i64| -> f64 {
        let bits = crate::types::float_bits(k, width);
        if width == 4 {
            f64::from(f32::from_bits(bits as u32))
        } else {
            f64::from_bits(bits)
        }
    };
    let ord = |k: i64| -> Ordering {
        let x = value(k);
        match float_to_decimal_units(x, scale) {
            Some(v) => v.cmp(&c),
            None if x > 0.0 => Ordering::Greater,
            None => Ordering::Less,
        }
    };
    let (lo, hi) = if width == 4 {
        (
            crate::types::f32_key(f32::NEG_INFINITY),
            crate::types::f32_key(f32::INFINITY),
        )
    } else {
        (
            crate::types::f64_key(f64::NEG_INFINITY),
            crate::types::f64_key(f64::INFINITY),
        )
    };
    // The least key in [lo, hi] where `holds` turns true (it is true at `hi`: inf is
    // beyond every c).
    let first = |holds: &dyn Fn(Ordering) -> bool| -> i64 {
        let (mut a, mut b) = (lo, hi);
        while a < b {
            let m = ((i128::from(a) + i128::from(b)) >> 1) as i64;
            if holds(ord(m)) {
                b = m;
            } else {
                a = m + 1;
            }
        }
        a
    };
    Some((
        first(&|o| o != Ordering::Less),
        first(&|o| o == Ordering::Greater),
    ))
}

/// `CAST(x AS DECIMAL(_, scale)) op c` for a `FLOAT32` / `FLOAT64` expression `x` and a
/// constant `c` in units of that scale (DataFusion's form of a float compared with a
/// decimal literal such as `1.5`), as comparisons of `x`'s order keys with the bounds of
/// [`float_decimal_bounds`]: exactly DataFusion's answer on every row whose cast
/// succeeds; a NaN or infinite value, or one beyond the decimal's precision, where
/// DataFusion's cast fails and the query with it, compares in the float order (`inf`
/// above every decimal, NaN above `inf`).
pub fn compare_float_decimal(
    op: CmpOp,
    x: Expr,
    scale: u8,
    c: i128,
    whole: &str,
) -> Result<Expr, BuildError> {
    let width = match x.ty {
        DataType::Float32 => 4,
        DataType::Float64 => 8,
        t => {
            return Err(BuildError::Compare {
                left: t,
                right: DataType::Decimal128 {
                    precision: 38,
                    scale,
                },
                hint: ": a float expression against a decimal constant".into(),
            });
        }
    };
    let Some((ge, gt)) = float_decimal_bounds(width, scale, c) else {
        return Err(BuildError::Scale {
            expr: whole.to_string(),
            scale: u32::from(scale),
        });
    };
    let ty = x.ty;
    let key = |k: i64| Expr::constant(Const::Int(k), ty);
    Ok(match op {
        CmpOp::Ge => cmp_node(CmpOp::Ge, x, key(ge)),
        CmpOp::Gt => cmp_node(CmpOp::Ge, x, key(gt)),
        CmpOp::Lt => cmp_node(CmpOp::Lt, x, key(ge)),
        CmpOp::Le => cmp_node(CmpOp::Lt, x, key(gt)),
        CmpOp::Eq | CmpOp::Ne if ge == gt => known(x, op == CmpOp::Ne),
        CmpOp::Eq | CmpOp::Ne if gt == ge + 1 => cmp_node(op, x, key(ge)),
        CmpOp::Eq => and(vec![
            cmp_node(CmpOp::Ge, x.clone(), key(ge)),
            cmp_node(CmpOp::Lt, x, key(gt)),
        ]),
        CmpOp::Ne => or(vec![
            cmp_node(CmpOp::Lt, x.clone(), key(ge)),
            cmp_node(CmpOp::Ge, x, key(gt)),
        ]),
    })
}

fn compare_hint(l: &Expr, r: &Expr) -> String {
    let char_const_vs_date =
        |a: &Expr, b: &Expr| a.ty == DataType::Date && matches!(b.as_const(), Some(Const::Char(_)));
    if char_const_vs_date(l, r) || char_const_vs_date(r, l) {
        ": write a date literal as DATE 'YYYY-MM-DD'".into()
    } else if (l.ty.is_number() && matches!(r.as_const(), Some(Const::Char(_))))
        || (r.ty.is_number() && matches!(l.as_const(), Some(Const::Char(_))))
    {
        ": write numbers without quotes".into()
    } else {
        String::new()
    }
}

fn cmp_node(op: CmpOp, l: Expr, r: Expr) -> Expr {
    Expr::new(
        ExprKind::Cmp {
            op,
            left: Box::new(l),
            right: Box::new(r),
        },
        DataType::Bool,
    )
}

/// `l op r`, typed: numbers brought to one scale (a constant side rewritten exactly to
/// the other side's scale, or to a truth value), dates with dates, strings with strings
/// (blank-padded); two constants fold to a truth value.
pub fn compare(op: CmpOp, l: Expr, r: Expr, whole: &str) -> Result<Expr, BuildError> {
    match (l.ty, r.ty) {
        (a, b) if a.is_number() && b.is_number() => {
            let (sl, sr) = (a.scale().unwrap_or(0), b.scale().unwrap_or(0));
            match (num_const(&l), num_const(&r)) {
                (Some(x), Some(y)) => {
                    let ord = crate::types::cmp_scaled(x, sl, y, sr);
                    Ok(Expr::boolean(op.holds(ord)))
                }
                (Some(_), None) => compare(op.flip(), r, l, whole),
                (None, Some(c)) => match normalize_const(op, sl, c, sr) {
                    Normalized::Always(b) => Ok(known(l, b)),
                    Normalized::Cmp(op, c) => {
                        let ty = l.ty;
                        Ok(cmp_node(op, l, Expr::constant(Const::Int(c), ty)))
                    }
                },
                (None, None) => {
                    let s = sl.max(sr);
                    let l = rescale(l, s - sl, whole)?;
                    let r = rescale(r, s - sr, whole)?;
                    Ok(cmp_node(op, l, r))
                }
            }
        }
        (DataType::Timestamp, DataType::Timestamp) => match (l.as_int_const(), r.as_int_const()) {
            (Some(x), Some(y)) => Ok(Expr::boolean(op.test(x, y))),
            (Some(_), None) => Ok(cmp_node(op.flip(), r, l)),
            _ => Ok(cmp_node(op, l, r)),
        },
        (a, b) if is_bytes(a) && is_bytes(b) && (a.is_variable() || b.is_variable()) => {
            // Variable-length strings compare byte for byte, neither padded nor trimmed.
            match (l.as_const(), r.as_const()) {
                (Some(Const::Char(x)), Some(Const::Char(y))) => {
                    Ok(Expr::boolean(op.holds(x.as_slice().cmp(y.as_slice()))))
                }
                (Some(_), None) => Ok(cmp_node(op.flip(), r, l)),
                _ => Ok(cmp_node(op, l, r)),
            }
        }
        (DataType::Bool, DataType::Bool) => {
            let value = |c: &Const| matches!(c, Const::Bool(true));
            match (l.as_const(), r.as_const()) {
                (Some(x), Some(y)) => Ok(Expr::boolean(op.holds(value(x).cmp(&value(y))))),
                (Some(_), None) => compare(op.flip(), r, l, whole),
                (None, Some(c)) if matches!(op, CmpOp::Eq | CmpOp::Ne) => {
                    let v = value(c) == (op == CmpOp::Eq);
                    Ok(truth(l, v))
                }
                _ => Err(BuildError::Compare {
                    left: l.ty,
                    right: r.ty,
                    hint: ": only = and <> with a constant".into(),
                }),
            }
        }
        (DataType::Date, DataType::Date) => match (l.as_int_const(), r.as_int_const()) {
            (Some(x), Some(y)) => Ok(Expr::boolean(op.test(x, y))),
            (Some(_), None) => Ok(cmp_node(op.flip(), r, l)),
            _ => Ok(cmp_node(op, l, r)),
        },
        (DataType::Char(_), DataType::Char(_)) => match (l.as_const(), r.as_const()) {
            (Some(Const::Char(x)), Some(Const::Char(y))) => {
                Ok(Expr::boolean(op.holds(cmp_padded(x, y))))
            }
            (Some(_), None) => Ok(cmp_node(op.flip(), r, l)),
            _ => Ok(cmp_node(op, l, r)),
        },
        // Floats compare as Arrow's kernels do (zeros equal, NaNs greatest; keys: see
        // `types::float_key`); a FLOAT32 column against a FLOAT64 constant is rewritten
        // to a FLOAT32 constant.
        (DataType::Float32, DataType::Float32) | (DataType::Float64, DataType::Float64) => {
            match (l.as_int_const(), r.as_int_const()) {
                (Some(x), Some(y)) => Ok(Expr::boolean(op.test(x, y))),
                (Some(_), None) => Ok(cmp_node(op.flip(), r, l)),
                _ => Ok(cmp_node(op, l, r)),
            }
        }
        (DataType::Float32, DataType::Float64) if l.as_const().is_none() => {
            match r.as_int_const() {
                Some(k) => compare_widened_f32(op, l, k),
                None => Err(BuildError::Compare {
                    left: l.ty,
                    right: r.ty,
                    hint: ": a FLOAT32 column against a FLOAT64 constant only".into(),
                }),
            }
        }
        (DataType::Float64, DataType::Float32) if r.as_const().is_none() => {
            compare(op.flip(), r, l, whole)
        }
        // DECIMAL(p, s) (128-bit) against a number constant: the constant at scale s.
        (DataType::Decimal128 { scale: s, .. }, b)
            if b.is_number() && l.as_const().is_none() && num_const(&r).is_some() =>
        {
            let c = num_const(&r).unwrap_or(0);
            match normalize_wide(op, s, c, b.scale().unwrap_or(0)) {
                Normalized128::Always(v) => Ok(known(l, v)),
                Normalized128::Cmp(op, v) => {
                    let ty = l.ty;
                    Ok(cmp_node(op, l, Expr::constant(Const::Wide(v), ty)))
                }
            }
        }
        (a, DataType::Decimal128 { .. })
            if a.is_number() && r.as_const().is_none() && num_const(&l).is_some() =>
        {
            compare(op.flip(), r, l, whole)
        }
        (DataType::Decimal128 { scale: s1, .. }, DataType::Decimal128 { scale: s2, .. })
            if s1 == s2 && l.as_const().is_none() && r.as_const().is_none() =>
        {
            Ok(cmp_node(op, l, r))
        }
        (a, b) => Err(BuildError::Compare {
            left: a,
            right: b,
            hint: compare_hint(&l, &r),
        }),
    }
}

/// `x [NOT] IN (items)`: the constants at `x`'s scale (one that cannot be equal at that
/// scale is dropped), duplicates removed; folded when `x` is a constant.
pub fn in_list(x: Expr, items: Vec<Expr>, negated: bool, whole: &str) -> Result<Expr, BuildError> {
    let mut list: Vec<Const> = Vec::with_capacity(items.len());
    let mut seen = std::collections::HashSet::with_capacity(items.len());
    for item in &items {
        let c = match (x.ty, item.ty) {
            (a, b) if a.is_number() && b.is_number() => {
                let (s, t) = (a.scale().unwrap_or(0), b.scale().unwrap_or(0));
                let v = num_const(item).unwrap_or(0);
                match normalize_const(CmpOp::Eq, s, v, t) {
                    Normalized::Cmp(_, v) => Some(Const::Int(v)),
                    // not representable at x's scale: can never be equal
                    Normalized::Always(_) => None,
                }
            }
            (DataType::Date, DataType::Date)
            | (DataType::Timestamp, DataType::Timestamp)
            | (DataType::Float32, DataType::Float32)
            | (DataType::Float64, DataType::Float64)
            | (DataType::Char(_), DataType::Char(_)) => item.as_const().cloned(),
            // `CAST(f32 AS DOUBLE) IN (doubles)`: a double that is no FLOAT32 value
            // never equals one (dropped); NaN is refused, as in `compare`.
            (DataType::Float32, DataType::Float64) => {
                let c = item
                    .as_int_const()
                    .map(|k| f64::from_bits(crate::types::float_bits(k, 8)));
                match c {
                    Some(c) if !c.is_nan() => {
                        let c32 = c as f32;
                        (f64::from(c32).to_bits() == c.to_bits())
                            .then(|| Const::Int(crate::types::f32_key(c32)))
                    }
                    _ => {
                        return Err(BuildError::Compare {
                            left: x.ty,
                            right: item.ty,
                            hint: ": a FLOAT32 column against FLOAT64 constants (no NaN) only"
                                .into(),
                        });
                    }
                }
            }
            (a, b) if is_bytes(a) && is_bytes(b) && a.is_variable() => item.as_const().cloned(),
            (a, b) => {
                return Err(BuildError::Compare {
                    left: a,
                    right: b,
                    hint: compare_hint(&x, item),
                });
            }
        };
        if let Some(c) = c
            && seen.insert(c.clone())
        {
            list.push(c);
        }
    }
    if x.as_const().is_some() {
        // constant tested value: fold, comparing like `=` does
        let mut hit = false;
        for item in &items {
            let eq = compare(CmpOp::Eq, x.clone(), item.clone(), whole)?;
            hit |= matches!(eq.as_const(), Some(Const::Bool(true)));
        }
        return Ok(Expr::boolean(hit != negated));
    }
    if list.is_empty() {
        return Ok(known(x, negated));
    }
    Ok(Expr::new(
        ExprKind::InList {
            expr: Box::new(x),
            list: ConstSet::new(list),
            negated,
        },
        DataType::Bool,
    ))
}

/// `x [NOT] LIKE 'prefix%'`.
pub fn like(x: Expr, prefix: Vec<u8>, negated: bool) -> Result<Expr, BuildError> {
    if let Some(Const::Char(v)) = x.as_const() {
        return Ok(Expr::boolean(v.starts_with(&prefix) != negated));
    }
    if prefix.is_empty() {
        // 'x LIKE %' holds for every string (UNKNOWN for a NULL)
        return Ok(known(x, !negated));
    }
    Ok(Expr::new(
        ExprKind::Like {
            expr: Box::new(x),
            prefix,
            negated,
        },
        DataType::Bool,
    ))
}

/// `NOT e`, pushed into comparisons, `IN`, `LIKE` and (De Morgan) `AND`/`OR`; exact
/// because no value is NULL.
pub fn negate(e: Expr) -> Expr {
    let ty = e.ty;
    match e.kind {
        ExprKind::Const(Const::Bool(b)) => Expr::boolean(!b),
        ExprKind::Cmp { op, left, right } => Expr::new(
            ExprKind::Cmp {
                op: op.negate(),
                left,
                right,
            },
            ty,
        ),
        ExprKind::InList {
            expr,
            list,
            negated,
        } => Expr::new(
            ExprKind::InList {
                expr,
                list,
                negated: !negated,
            },
            ty,
        ),
        ExprKind::Like {
            expr,
            prefix,
            negated,
        } => Expr::new(
            ExprKind::Like {
                expr,
                prefix,
                negated: !negated,
            },
            ty,
        ),
        ExprKind::LikeAny {
            expr,
            needle,
            suffix,
            negated,
        } => Expr::new(
            ExprKind::LikeAny {
                expr,
                needle,
                suffix,
                negated: !negated,
            },
            ty,
        ),
        ExprKind::IsNull { expr, negated } => Expr::new(
            ExprKind::IsNull {
                expr,
                negated: !negated,
            },
            ty,
        ),
        ExprKind::Known { expr, value } => Expr::new(
            ExprKind::Known {
                expr,
                value: !value,
            },
            ty,
        ),
        ExprKind::Truth { expr, value } => Expr::new(
            ExprKind::Truth {
                expr,
                value: !value,
            },
            ty,
        ),
        kind @ ExprKind::Column { .. } if ty == DataType::Bool => truth(Expr::new(kind, ty), false),
        ExprKind::Not(inner) => *inner,
        ExprKind::And(es) => or(es.into_iter().map(negate).collect()),
        ExprKind::Or(es) => and(es.into_iter().map(negate).collect()),
        kind => Expr::new(ExprKind::Not(Box::new(Expr::new(kind, ty))), DataType::Bool),
    }
}

/// A predicate decided from constants alone about `x`: `value`, or UNKNOWN where `x`
/// is NULL (a plain constant when `x` cannot be NULL).
pub fn known(x: Expr, value: bool) -> Expr {
    if x.as_const().is_some() || !x.may_be_null() {
        return Expr::boolean(value);
    }
    Expr::new(
        ExprKind::Known {
            expr: Box::new(x),
            value,
        },
        DataType::Bool,
    )
}

/// `x IS [NOT] NULL` (a constant where `x` cannot be NULL).
pub fn is_null(x: Expr, negated: bool) -> Expr {
    if x.as_const().is_some() || !x.may_be_null() {
        return Expr::boolean(negated);
    }
    Expr::new(
        ExprKind::IsNull {
            expr: Box::new(x),
            negated,
        },
        DataType::Bool,
    )
}

/// A `BOOLEAN` expression as a predicate: TRUE where it is `value` (UNKNOWN where NULL).
pub fn truth(x: Expr, value: bool) -> Expr {
    if let Some(Const::Bool(b)) = x.as_const() {
        return Expr::boolean(*b == value);
    }
    Expr::new(
        ExprKind::Truth {
            expr: Box::new(x),
            value,
        },
        DataType::Bool,
    )
}

/// `x [NOT] LIKE '%needle'` (`suffix`) or `'%needle%'` on a string: bytes as stored.
pub fn like_any(x: Expr, needle: Vec<u8>, suffix: bool, negated: bool) -> Result<Expr, BuildError> {
    if !is_bytes(x.ty) {
        return Err(BuildError::Compare {
            left: x.ty,
            right: DataType::Varchar,
            hint: ": LIKE needs a string".into(),
        });
    }
    if let Some(Const::Char(v)) = x.as_const() {
        let hit = if suffix {
            v.ends_with(&needle)
        } else {
            contains(v, &needle)
        };
        return Ok(Expr::boolean(hit != negated));
    }
    if needle.is_empty() {
        return Ok(known(x, !negated));
    }
    Ok(Expr::new(
        ExprKind::LikeAny {
            expr: Box::new(x),
            needle,
            suffix,
            negated,
        },
        DataType::Bool,
    ))
}

/// Whether `hay` contains `needle` (an empty needle is everywhere).
pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    let Some((&first, rest)) = needle.split_first() else {
        return true;
    };
    if hay.len() < needle.len() {
        return false;
    }
    let last_start = hay.len() - needle.len();
    let mut i = 0;
    while i <= last_start {
        match hay[i..=last_start].iter().position(|&b| b == first) {
            None => return false,
            Some(p) => {
                let at = i + p;
                if &hay[at + 1..at + needle.len()] == rest {
                    return true;
                }
                i = at + 1;
            }
        }
    }
    false
}

/// The byte-string types: `CHAR(n)` (constants), `VARCHAR`, `VARBINARY`.
fn is_bytes(t: DataType) -> bool {
    matches!(
        t,
        DataType::Char(_) | DataType::Varchar | DataType::Varbinary
    )
}

/// Flattened conjunction without constant terms.
pub fn and(terms: Vec<Expr>) -> Expr {
    let mut out = Vec::with_capacity(terms.len());
    for t in terms {
        match t.kind {
            ExprKind::Const(Const::Bool(true)) => {}
            ExprKind::Const(Const::Bool(false)) => return Expr::boolean(false),
            ExprKind::And(inner) => out.extend(inner),
            kind => out.push(Expr::new(kind, t.ty)),
        }
    }
    match out.len() {
        0 => Expr::boolean(true),
        1 => out.pop().unwrap_or_else(|| Expr::boolean(true)),
        _ => Expr::new(ExprKind::And(out), DataType::Bool),
    }
}

/// Flattened disjunction without constant terms.
pub fn or(terms: Vec<Expr>) -> Expr {
    let mut out = Vec::with_capacity(terms.len());
    for t in terms {
        match t.kind {
            ExprKind::Const(Const::Bool(false)) => {}
            ExprKind::Const(Const::Bool(true)) => return Expr::boolean(true),
            ExprKind::Or(inner) => out.extend(inner),
            kind => out.push(Expr::new(kind, t.ty)),
        }
    }
    match out.len() {
        0 => Expr::boolean(false),
        1 => out.pop().unwrap_or_else(|| Expr::boolean(false)),
        _ => Expr::new(ExprKind::Or(out), DataType::Bool),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{f32_key, f64_key};
    use proptest::prelude::*;

    /// Floats around the decimals compared with, the specials, and anything.
    fn any_f64() -> impl Strategy<Value = f64> {
        prop_oneof![
            proptest::num::f64::ANY,
            (-2_000i64..2_000, 0u32..6).prop_map(|(m, e)| m as f64 / 10f64.powi(e as i32)),
            Just(0.0),
            Just(-0.0),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(f64::NAN),
            Just(1e300),
            Just(5e-324),
        ]
    }

    /// `cast(x) op c` as the bounds decide it, for a value `x` of key `k`.
    fn by_bounds(op: CmpOp, k: i64, (ge, gt): (i64, i64)) -> bool {
        match op {
            CmpOp::Ge => k >= ge,
            CmpOp::Gt => k >= gt,
            CmpOp::Lt => k < ge,
            CmpOp::Le => k < gt,
            CmpOp::Eq => ge <= k && k < gt,
            CmpOp::Ne => k < ge || k >= gt,
        }
    }

    /// `cast(x) op c` computed with the cast itself (a failed cast ordered as the
    /// bounds order it: beyond every `c` for positive values and NaN).
    fn by_cast(op: CmpOp, x: f64, s: u8, c: i128) -> bool {
        let ord = match float_to_decimal_units(x, s) {
            Some(v) => v.cmp(&c),
            None if x > 0.0 || x.is_nan() => Ordering::Greater,
            None => Ordering::Less,
        };
        op.holds(ord)
    }

    const OPS: [CmpOp; 6] = CmpOp::ALL;

    proptest! {
        /// The bounds found by bisection split the floats exactly where the cast
        /// compares: every FLOAT64 and FLOAT32 value, both zeros, infinities and NaN.
        #[test]
        fn float_decimal_bounds_split_where_the_cast_compares(
            x in any_f64(),
            c in prop_oneof![-3_000i128..3_000, proptest::num::i128::ANY],
            s in 0u8..=FLOAT_DECIMAL_MAX_SCALE,
        ) {
            let b64 = float_decimal_bounds(8, s, c).expect("bounds");
            let b32 = float_decimal_bounds(4, s, c).expect("bounds");
            let x32 = x as f32;
            for op in OPS {
                prop_assert_eq!(by_bounds(op, f64_key(x), b64), by_cast(op, x, s, c),
                    "{} {:?} {} at scale {}", x, op, c, s);
                prop_assert_eq!(by_bounds(op, f32_key(x32), b32),
                    by_cast(op, f64::from(x32), s, c), "f32 {} {:?} {} at scale {}", x32, op, c, s);
            }
        }
    }

    #[test]
    fn float_decimal_comparisons_and_their_edges() {
        // 1.5 at scale 15: the doubles casting to 1.500000000000000 are a run of keys
        // around 1.5's, from `ge` up to `gt` (excluded).
        let c = 1_500_000_000_000_000;
        let (ge, gt) = float_decimal_bounds(8, 15, c).expect("bounds");
        let at = |k: i64| f64::from_bits(crate::types::float_bits(k, 8));
        assert!(ge < f64_key(1.5) && f64_key(1.5) < gt, "{ge} {gt}");
        assert_eq!(float_to_decimal_units(at(ge), 15), Some(c));
        assert_eq!(float_to_decimal_units(at(gt - 1), 15), Some(c));
        assert_eq!(float_to_decimal_units(at(ge - 1), 15), Some(c - 1));
        assert_eq!(float_to_decimal_units(at(gt), 15), Some(c + 1));
        // Beyond the scale a power of ten is exact for: not pushed.
        assert!(float_decimal_bounds(8, 23, 1).is_none());
        let col = Expr::new(
            ExprKind::Column {
                index: 0,
                name: "f".into(),
                nullable: true,
            },
            DataType::Float32,
        );
        let e = compare_float_decimal(CmpOp::Eq, col.clone(), 0, 1 << 100, "f = 2^100")
            .expect("compare");
        assert!(
            matches!(
                e.kind,
                ExprKind::Cmp { .. } | ExprKind::Known { .. } | ExprKind::And(_)
            ),
            "{e}"
        );
        assert!(
            compare_float_decimal(
                CmpOp::Lt,
                Expr::constant(Const::Int(0), DataType::Int),
                2,
                150,
                "i < 1.5"
            )
            .is_err()
        );
        // NaN and inf: above every decimal.
        for v in [f64::INFINITY, f64::NAN] {
            assert!(by_bounds(
                CmpOp::Gt,
                f64_key(v),
                float_decimal_bounds(8, 5, i128::MAX).expect("b")
            ));
        }
        assert!(by_bounds(
            CmpOp::Lt,
            f64_key(f64::NEG_INFINITY),
            float_decimal_bounds(8, 5, i128::MIN).expect("b")
        ));
    }

    /// `CAST(f32 AS DOUBLE) IN (doubles)`: a double that is no FLOAT32 value is dropped,
    /// a NaN refused.
    #[test]
    fn float_in_lists_take_float_keys() {
        let col = |ty| {
            Expr::new(
                ExprKind::Column {
                    index: 0,
                    name: "f".into(),
                    nullable: false,
                },
                ty,
            )
        };
        let d = |x: f64| Expr::constant(Const::Int(f64_key(x)), DataType::Float64);
        let e = in_list(
            col(DataType::Float32),
            vec![d(1.5), d(0.1), d(-2.25)],
            false,
            "w",
        )
        .expect("in");
        let ExprKind::InList { list, .. } = &e.kind else {
            panic!("{e}");
        };
        assert_eq!(
            list.iter().collect::<Vec<_>>(),
            vec![Const::Int(f32_key(1.5)), Const::Int(f32_key(-2.25))]
        );
        assert!(in_list(col(DataType::Float32), vec![d(f64::NAN)], false, "w").is_err());
        let e = in_list(col(DataType::Float64), vec![d(0.1), d(7.0)], true, "w").expect("in");
        assert!(
            matches!(e.kind, ExprKind::InList { negated: true, .. }),
            "{e}"
        );
    }
}
