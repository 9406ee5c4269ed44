//! DataFusion expressions → the device program's expressions ([`csd_query::plan::Expr`]).
//!
//! A filter is pushed into the device (`Exact`) only when the device computes *exactly*
//! what DataFusion would; anything else stays in DataFusion (`Unsupported`), so a
//! pushed-down query can never return a different answer. What translates:
//!
//! * columns of the table, literals of integer, decimal, `Date32` and string type;
//! * `=`, `<>`, `<`, `<=`, `>`, `>=` on numbers and dates; `=` / `<>` on strings (the
//!   device compares blank-padded `CHAR`, equal to DataFusion's comparison of trimmed
//!   strings for a literal without trailing blanks); `BETWEEN`, `IN (literals)`;
//! * `LIKE 'prefix%'` (no `_`, no escape, prefix not ending in a blank);
//! * `AND`, `OR`, `NOT`; `+`, `-`, `*` on numbers (exact decimal arithmetic on both
//!   sides: scales add under `*`); casts between integer widths, integer → decimal and
//!   decimal → larger scale (exact rescaling).
//!
//! * on the types of users' tables (nullable columns included: the device evaluates
//!   SQL's three-valued logic, see [`csd_query::plan`]): `IS [NOT] NULL`; a `BOOLEAN`
//!   column as a predicate, `NOT` of it, `= TRUE / FALSE`; `INT8`/`INT16` as integers;
//!   `TIMESTAMP` against timestamp literals; every comparison, `BETWEEN`, `IN` and
//!   `LIKE 'p%'` / `'%s'` / `'%s%'` on `VARCHAR` / `VARBINARY` (byte for byte, as Arrow
//!   compares strings: no padding, no trimming).
//!
//! * comparisons of `FLOAT32` / `FLOAT64` columns with float literals and with each
//!   other, as Arrow's comparison kernels order them (`-0.0 = 0.0`, NaNs equal and
//!   above `inf`), `CAST(f32 AS DOUBLE)` against a literal
//!   rewritten exactly to a `FLOAT32` constant; comparisons of `DECIMAL(p > 18)`
//!   columns with numeric literals (exact 128-bit values) and with columns of their
//!   scale.
//!
//! * a float compared with a decimal literal (`f64 > 1.5`: `1.5` is a `DECIMAL` in
//!   csd's SQL, and DataFusion compares `CAST(f64 AS DECIMAL(30, 15)) > 1.5`, its cast
//!   being `round(10^s * x)` in `f64`), also in `BETWEEN` and `IN`: the cast is monotone
//!   in the float, so the rows where it compares true are a range of the float's order,
//!   whose bounds [`csd_query::build::float_decimal_bounds`] finds by bisection over the
//!   order keys with the cast itself; the device compares keys with them. Exactly
//!   DataFusion's answer on every row it can cast; a NaN, an infinity or a value beyond
//!   the decimal's precision, on which DataFusion's cast (and so its query) fails, is
//!   compared in the float order (`inf` above every decimal, NaN above `inf`).
//! * float `IN` lists (`x IN (CAST('1.5' AS DOUBLE), ...)`: DataFusion keeps lists of
//!   more than 3 items as `IN`, matching bit for bit) without `0.0`, `-0.0` or NaN,
//!   where bit equality and the device's key equality are the same.
//!
//! Not translated: division (DataFusion's decimal quotient scale differs from the
//! device's), ordering comparisons of `CHAR` strings (padding and bytes below the
//! blank), float arithmetic, float `IN` lists holding `0.0`, `-0.0` or NaN, functions,
//! `CASE`, other `LIKE` patterns.

use csd_query::BuildError;
use csd_query::build::{self, BinaryArith};
use csd_query::plan::{CmpOp, Const, Expr as DevExpr};
use csd_query::types::DataType as DevType;
use csd_table::schema::Schema;
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::expr::{BinaryExpr, InList, Like};
use datafusion::logical_expr::{Expr, Operator};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions as pe;
use std::sync::Arc;

/// Why an expression is not pushed into the device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotPushed {
    /// A construct the device program cannot express exactly.
    #[error("the device does not evaluate {0} exactly")]
    Unsupported(String),
    /// The device program's builder refused it.
    #[error(transparent)]
    Query(#[from] BuildErrorText),
}

/// A [`BuildError`] kept as text (it is not `Clone`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BuildErrorText(pub String);

impl From<BuildError> for NotPushed {
    fn from(e: BuildError) -> Self {
        NotPushed::Query(BuildErrorText(e.to_string()))
    }
}

fn unsupported<T>(what: impl std::fmt::Display) -> Result<T, NotPushed> {
    Err(NotPushed::Unsupported(what.to_string()))
}

/// Translates a predicate over `schema`'s columns into a device predicate.
pub fn predicate(e: &Expr, schema: &Schema) -> Result<DevExpr, NotPushed> {
    let t = Translator { schema };
    let d = t.expr(e)?;
    if d.ty != DevType::Bool {
        return unsupported(format!("{e} (not a predicate)"));
    }
    Ok(d)
}

/// Translates a value expression (an aggregate's argument or a grouping key).
pub fn value(e: &Expr, schema: &Schema) -> Result<DevExpr, NotPushed> {
    let t = Translator { schema };
    let d = t.expr(e)?;
    if d.ty == DevType::Bool {
        return unsupported(format!("{e} (a predicate, not a value)"));
    }
    Ok(d)
}

struct Translator<'a> {
    schema: &'a Schema,
}

/// A literal as a device constant (`None`: a type the device does not hold).
pub fn literal(v: &ScalarValue) -> Option<DevExpr> {
    let int = |x: i64| Some(DevExpr::constant(Const::Int(x), DevType::Int));
    match v {
        ScalarValue::Int8(Some(x)) => int(i64::from(*x)),
        ScalarValue::Int16(Some(x)) => int(i64::from(*x)),
        ScalarValue::Int32(Some(x)) => int(i64::from(*x)),
        ScalarValue::Int64(Some(x)) => int(*x),
        ScalarValue::UInt8(Some(x)) => int(i64::from(*x)),
        ScalarValue::UInt16(Some(x)) => int(i64::from(*x)),
        ScalarValue::UInt32(Some(x)) => int(i64::from(*x)),
        ScalarValue::UInt64(Some(x)) => int(i64::try_from(*x).ok()?),
        ScalarValue::Decimal128(Some(x), _, s) => {
            let scale = u8::try_from(*s).ok()?;
            let ty = if scale == 0 {
                DevType::Int
            } else {
                DevType::Decimal { scale }
            };
            let c = match i64::try_from(*x) {
                Ok(v) => Const::Int(v),
                Err(_) => Const::Wide(*x),
            };
            Some(DevExpr::constant(c, ty))
        }
        ScalarValue::Date32(Some(d)) => {
            Some(DevExpr::constant(Const::Int(i64::from(*d)), DevType::Date))
        }
        ScalarValue::TimestampMicrosecond(Some(t), _) => {
            Some(DevExpr::constant(Const::Int(*t), DevType::Timestamp))
        }
        ScalarValue::Boolean(Some(b)) => Some(DevExpr::boolean(*b)),
        // Floats as total-order keys: compared as Arrow's kernels compare them.
        ScalarValue::Float32(Some(x)) => Some(DevExpr::constant(
            Const::Int(csd_query::types::f32_key(*x)),
            DevType::Float32,
        )),
        ScalarValue::Float64(Some(x)) => Some(DevExpr::constant(
            Const::Int(csd_query::types::f64_key(*x)),
            DevType::Float64,
        )),
        ScalarValue::Binary(Some(b))
        | ScalarValue::BinaryView(Some(b))
        | ScalarValue::LargeBinary(Some(b)) => {
            u16::try_from(b.len()).ok()?;
            Some(DevExpr::constant(
                Const::Char(b.clone()),
                DevType::Varbinary,
            ))
        }
        ScalarValue::Utf8(Some(s))
        | ScalarValue::Utf8View(Some(s))
        | ScalarValue::LargeUtf8(Some(s)) => {
            let len = u16::try_from(s.len()).ok()?;
            Some(DevExpr::constant(
                Const::Char(s.as_bytes().to_vec()),
                DevType::Char(len),
            ))
        }
        _ => None,
    }
}

fn cmp_op(op: Operator) -> Option<CmpOp> {
    Some(match op {
        Operator::Eq => CmpOp::Eq,
        Operator::NotEq => CmpOp::Ne,
        Operator::Lt => CmpOp::Lt,
        Operator::LtEq => CmpOp::Le,
        Operator::Gt => CmpOp::Gt,
        Operator::GtEq => CmpOp::Ge,
        _ => return None,
    })
}

fn is_char(e: &DevExpr) -> bool {
    matches!(e.ty, DevType::Char(_))
}

/// A string constant with trailing blanks compares differently padded and trimmed.
fn trailing_blank(e: &DevExpr) -> bool {
    matches!(e.as_const(), Some(Const::Char(b)) if b.last() == Some(&b' '))
}

/// `l op r` for an operator the device has: AND, OR, arithmetic or a comparison
/// (string ordering and constants with trailing blanks are left to the host).
fn binary_op(op: Operator, l: DevExpr, r: DevExpr, whole: &str) -> Result<DevExpr, NotPushed> {
    match op {
        Operator::And => Ok(build::and(vec![l, r])),
        Operator::Or => Ok(build::or(vec![l, r])),
        Operator::Plus => Ok(build::arith(BinaryArith::Add, l, r, whole)?),
        Operator::Minus => Ok(build::arith(BinaryArith::Sub, l, r, whole)?),
        Operator::Multiply => Ok(build::arith(BinaryArith::Mul, l, r, whole)?),
        op => {
            let Some(c) = cmp_op(op) else {
                return unsupported(format!("the operator {op} in {whole}"));
            };
            let variable = l.ty.is_variable() || r.ty.is_variable();
            if !variable && (is_char(&l) || is_char(&r)) {
                if !matches!(c, CmpOp::Eq | CmpOp::Ne) {
                    return unsupported(format!("{whole} (string ordering)"));
                }
                if trailing_blank(&l) || trailing_blank(&r) {
                    return unsupported(format!("{whole} (trailing blanks)"));
                }
            }
            Ok(build::compare(c, l, r, whole)?)
        }
    }
}

/// `x [NOT] IN (values)`, each a literal (`None`: not one).
fn in_list_of<'v>(
    x: DevExpr,
    values: impl ExactSizeIterator<Item = Option<&'v ScalarValue>>,
    negated: bool,
    whole: &str,
) -> Result<DevExpr, NotPushed> {
    let mut items = Vec::with_capacity(values.len());
    for v in values {
        let Some(v) = v else {
            return unsupported(format!("{whole} (IN with a non-literal)"));
        };
        let d = literal(v).ok_or_else(|| NotPushed::Unsupported(format!("the literal {v}")))?;
        if x.ty.is_float() && float_in_ambiguous(v) {
            return unsupported(format!("{whole} (a float IN list with 0, -0 or NaN)"));
        }
        if !x.ty.is_variable() && trailing_blank(&d) {
            return unsupported(format!("{whole} (trailing blanks)"));
        }
        items.push(d);
    }
    Ok(build::in_list(x, items, negated, whole)?)
}

/// A decimal literal's value in units of `scale` (`None`: not a decimal literal, or
/// not exactly at that scale).
fn decimal_units(v: &ScalarValue, scale: u8) -> Option<i128> {
    let ScalarValue::Decimal128(Some(x), _, s) = v else {
        return None;
    };
    let s = u8::try_from(*s).ok()?;
    let up = scale.checked_sub(s)?;
    x.checked_mul(10i128.checked_pow(u32::from(up))?)
}

/// `CAST(x AS DECIMAL(_, scale)) op c` for a float `x` (see
/// [`build::compare_float_decimal`]).
fn float_decimal_cmp(
    op: CmpOp,
    x: DevExpr,
    scale: u8,
    c: &ScalarValue,
    whole: &str,
) -> Result<DevExpr, NotPushed> {
    let Some(units) = decimal_units(c, scale) else {
        return unsupported(format!("{whole} (a float against {c})"));
    };
    Ok(build::compare_float_decimal(op, x, scale, units, whole)?)
}

/// `CAST(x AS DECIMAL(_, scale)) [NOT] IN (decimals)` for a float `x`: per item the keys
/// `[ge, gt)` of [`build::float_decimal_bounds`] (one key: an `IN` item; several: a
/// range), ORed.
fn float_decimal_in<'v>(
    x: DevExpr,
    scale: u8,
    values: impl Iterator<Item = Option<&'v ScalarValue>>,
    negated: bool,
    whole: &str,
) -> Result<DevExpr, NotPushed> {
    let width = if x.ty == DevType::Float32 { 4 } else { 8 };
    let key = |k: i64| DevExpr::constant(Const::Int(k), x.ty);
    let (mut singles, mut terms) = (Vec::new(), Vec::new());
    for v in values {
        let units = v
            .and_then(|v| decimal_units(v, scale))
            .ok_or_else(|| NotPushed::Unsupported(format!("{whole} (IN with a non-decimal)")))?;
        let Some((ge, gt)) = build::float_decimal_bounds(width, scale, units) else {
            return unsupported(format!("{whole} (decimal scale {scale})"));
        };
        if gt == ge + 1 {
            singles.push(key(ge));
        } else if gt > ge {
            terms.push(build::and(vec![
                build::compare(CmpOp::Ge, x.clone(), key(ge), whole)?,
                build::compare(CmpOp::Lt, x.clone(), key(gt), whole)?,
            ]));
        }
    }
    if !singles.is_empty() {
        terms.push(build::in_list(x.clone(), singles, false, whole)?);
    }
    let any = if terms.is_empty() {
        build::known(x, false)
    } else {
        build::or(terms)
    };
    Ok(if negated { build::negate(any) } else { any })
}

/// A float literal `0.0`, `-0.0` or NaN: DataFusion's `IN` matches floats bit for bit
/// (`-0.0` is not in `(0.0)`), while its `=` and the device's keys take both zeros, and
/// all NaNs, as one value.
fn float_in_ambiguous(v: &ScalarValue) -> bool {
    match v {
        ScalarValue::Float32(Some(x)) => *x == 0.0 || x.is_nan(),
        ScalarValue::Float64(Some(x)) => *x == 0.0 || x.is_nan(),
        _ => false,
    }
}

/// A DataFusion physical expression's input columns in device terms (`None`: a column
/// the device does not hold, such as another aggregate's state).
pub(crate) type Columns = Vec<Option<DevExpr>>;

/// Translates a physical expression over `columns` (an operator's input, read from
/// `schema`'s table) into a device expression: the values an aggregate pushed into the
/// device reads, and the runtime filters (a join's key bounds and key list) a device scan
/// takes into its program. What translates is what [`predicate`] translates, with
/// dynamic filters read at their current value.
pub(crate) fn physical(
    e: &Arc<dyn PhysicalExpr>,
    columns: &Columns,
    schema: &Schema,
) -> Result<DevExpr, NotPushed> {
    let whole = e.to_string();
    let no = || NotPushed::Unsupported(whole.clone());
    let rec = |x: &Arc<dyn PhysicalExpr>| physical(x, columns, schema);
    if let Some(c) = e.downcast_ref::<pe::Column>() {
        return columns.get(c.index()).cloned().flatten().ok_or_else(no);
    }
    if let Some(l) = e.downcast_ref::<pe::Literal>() {
        if let ScalarValue::Boolean(Some(b)) = l.value() {
            return Ok(DevExpr::boolean(*b));
        }
        return literal(l.value()).ok_or_else(no);
    }
    // `CAST(f AS DECIMAL(p, s))` of a float (DataFusion's cast, which fails rather than
    // giving NULL): its float and `s`.
    let float_as_decimal = |x: &Arc<dyn PhysicalExpr>| -> Option<(DevExpr, u8)> {
        let c = x.downcast_ref::<pe::CastExpr>()?;
        let DataType::Decimal128(_, s) = c.cast_type() else {
            return None;
        };
        if c.cast_options().safe {
            return None;
        }
        let d = rec(c.expr()).ok()?;
        d.ty.is_float().then_some((d, u8::try_from(*s).ok()?))
    };
    fn lit(x: &Arc<dyn PhysicalExpr>) -> Option<&ScalarValue> {
        x.downcast_ref::<pe::Literal>().map(pe::Literal::value)
    }
    if let Some(b) = e.downcast_ref::<pe::BinaryExpr>() {
        if let Some(op) = cmp_op(*b.op()) {
            if let (Some((x, s)), Some(c)) = (float_as_decimal(b.left()), lit(b.right())) {
                return float_decimal_cmp(op, x, s, c, &whole);
            }
            if let (Some(c), Some((x, s))) = (lit(b.left()), float_as_decimal(b.right())) {
                return float_decimal_cmp(op.flip(), x, s, c, &whole);
            }
        }
        return binary_op(*b.op(), rec(b.left())?, rec(b.right())?, &whole);
    }
    if let Some(c) = e.downcast_ref::<pe::CastExpr>() {
        return cast(rec(c.expr())?, c.cast_type(), schema, &whole);
    }
    if let Some(c) = e.downcast_ref::<pe::TryCastExpr>() {
        return cast(rec(c.expr())?, c.cast_type(), schema, &whole);
    }
    if let Some(n) = e.downcast_ref::<pe::NegativeExpr>() {
        let zero = DevExpr::constant(Const::Int(0), DevType::Int);
        return Ok(build::arith(BinaryArith::Sub, zero, rec(n.arg())?, &whole)?);
    }
    if let Some(n) = e.downcast_ref::<pe::NotExpr>() {
        let d = rec(n.arg())?;
        if d.ty != DevType::Bool {
            return Err(no());
        }
        return Ok(build::negate(d));
    }
    if let Some(l) = e.downcast_ref::<pe::InListExpr>() {
        let values = l
            .list()
            .iter()
            .map(|i| i.downcast_ref::<pe::Literal>().map(pe::Literal::value));
        if let Some((x, s)) = float_as_decimal(l.expr()) {
            return float_decimal_in(x, s, values, l.negated(), &whole);
        }
        return in_list_of(rec(l.expr())?, values, l.negated(), &whole);
    }
    if let Some(n) = e.downcast_ref::<pe::IsNullExpr>() {
        return Ok(build::is_null(rec(n.arg())?, false));
    }
    if let Some(n) = e.downcast_ref::<pe::IsNotNullExpr>() {
        return Ok(build::is_null(rec(n.arg())?, true));
    }
    if let Some(d) = e.downcast_ref::<pe::DynamicFilterPhysicalExpr>() {
        return rec(&d.current().map_err(|_| no())?);
    }
    Err(no())
}

impl Translator<'_> {
    fn expr(&self, e: &Expr) -> Result<DevExpr, NotPushed> {
        let whole = || e.to_string();
        match e {
            Expr::Alias(a) => self.expr(&a.expr),
            Expr::Column(c) => {
                let Ok(i) = self.schema.column_index(&c.name) else {
                    return unsupported(format!(
                        "column {} (not in table {})",
                        c.name,
                        self.schema.name()
                    ));
                };
                DevExpr::column(self.schema, i)
                    .ok_or_else(|| NotPushed::Unsupported(format!("column {}", c.name)))
            }
            Expr::Literal(v, _) => {
                literal(v).ok_or_else(|| NotPushed::Unsupported(format!("the literal {v}")))
            }
            Expr::BinaryExpr(b) => self.binary(e, b),
            Expr::Not(x) => {
                let d = self.expr(x)?;
                if d.ty != DevType::Bool {
                    return unsupported(whole());
                }
                Ok(build::negate(d))
            }
            Expr::Between(b) if self.float_as_decimal(&b.expr).is_some() => {
                let w = whole();
                let both = build::and(vec![
                    self.compare(CmpOp::Ge, &b.expr, &b.low, &w)?,
                    self.compare(CmpOp::Le, &b.expr, &b.high, &w)?,
                ]);
                Ok(if b.negated { build::negate(both) } else { both })
            }
            Expr::Between(b) => {
                let x = self.expr(&b.expr)?;
                if is_char(&x) {
                    return unsupported(format!("{e} (string ordering)"));
                }
                let lo = self.expr(&b.low)?;
                let hi = self.expr(&b.high)?;
                let w = whole();
                let both = build::and(vec![
                    build::compare(CmpOp::Ge, x.clone(), lo, &w)?,
                    build::compare(CmpOp::Le, x, hi, &w)?,
                ]);
                Ok(if b.negated { build::negate(both) } else { both })
            }
            Expr::InList(l) => self.in_list(e, l),
            Expr::IsNull(x) => Ok(build::is_null(self.expr(x)?, false)),
            Expr::IsNotNull(x) => Ok(build::is_null(self.expr(x)?, true)),
            Expr::Like(l) => self.like(e, l),
            Expr::Cast(c) => cast(
                self.expr(&c.expr)?,
                c.field.data_type(),
                self.schema,
                &whole(),
            ),
            Expr::TryCast(c) => cast(
                self.expr(&c.expr)?,
                c.field.data_type(),
                self.schema,
                &whole(),
            ),
            Expr::Negative(x) => {
                let d = self.expr(x)?;
                let zero = DevExpr::constant(Const::Int(0), DevType::Int);
                Ok(build::arith(BinaryArith::Sub, zero, d, &whole())?)
            }
            _ => unsupported(whole()),
        }
    }

    /// A binary operator (see [`binary_op`]); a comparison of a float cast to a
    /// decimal with a decimal literal (see [`Translator::compare`]).
    fn binary(&self, e: &Expr, b: &BinaryExpr) -> Result<DevExpr, NotPushed> {
        if let Some(op) = cmp_op(b.op) {
            return self.compare(op, &b.left, &b.right, &e.to_string());
        }
        binary_op(
            b.op,
            self.expr(&b.left)?,
            self.expr(&b.right)?,
            &e.to_string(),
        )
    }

    /// `CAST(f AS DECIMAL(p, s))` of a `FLOAT32` / `FLOAT64` expression `f` (DataFusion's
    /// coercion of a float compared with a decimal literal such as `1.5`; its cast fails
    /// on a value it cannot convert): `f` and `s`.
    fn float_as_decimal(&self, e: &Expr) -> Option<(DevExpr, u8)> {
        let Expr::Cast(c) = e else {
            return None;
        };
        let DataType::Decimal128(_, s) = c.field.data_type() else {
            return None;
        };
        let x = self.expr(&c.expr).ok()?;
        x.ty.is_float().then_some((x, u8::try_from(*s).ok()?))
    }

    /// `l op r`: a float cast to a decimal against a decimal literal exactly in the
    /// float's order ([`build::compare_float_decimal`]), anything else by [`binary_op`].
    fn compare(&self, op: CmpOp, l: &Expr, r: &Expr, whole: &str) -> Result<DevExpr, NotPushed> {
        let lit = |e: &Expr| match e {
            Expr::Literal(v, _) => Some(v.clone()),
            _ => None,
        };
        if let (Some((x, s)), Some(c)) = (self.float_as_decimal(l), lit(r)) {
            return float_decimal_cmp(op, x, s, &c, whole);
        }
        if let (Some(c), Some((x, s))) = (lit(l), self.float_as_decimal(r)) {
            return float_decimal_cmp(op.flip(), x, s, &c, whole);
        }
        let operator = match op {
            CmpOp::Eq => Operator::Eq,
            CmpOp::Ne => Operator::NotEq,
            CmpOp::Lt => Operator::Lt,
            CmpOp::Le => Operator::LtEq,
            CmpOp::Gt => Operator::Gt,
            CmpOp::Ge => Operator::GtEq,
        };
        binary_op(operator, self.expr(l)?, self.expr(r)?, whole)
    }

    /// `x [NOT] IN (literals)`.
    fn in_list(&self, e: &Expr, l: &InList) -> Result<DevExpr, NotPushed> {
        let values = l.list.iter().map(|i| match i {
            Expr::Literal(v, _) => Some(v),
            _ => None,
        });
        if let Some((x, s)) = self.float_as_decimal(&l.expr) {
            return float_decimal_in(x, s, values, l.negated, &e.to_string());
        }
        in_list_of(self.expr(&l.expr)?, values, l.negated, &e.to_string())
    }

    /// `x [NOT] LIKE 'prefix%'` (case-sensitive, no escape).
    fn like(&self, e: &Expr, l: &Like) -> Result<DevExpr, NotPushed> {
        let whole = || e.to_string();
        if l.case_insensitive || l.escape_char.is_some() {
            return unsupported(whole());
        }
        let x = self.expr(&l.expr)?;
        let Expr::Literal(
            ScalarValue::Utf8(Some(p))
            | ScalarValue::Utf8View(Some(p))
            | ScalarValue::LargeUtf8(Some(p)),
            _,
        ) = l.pattern.as_ref()
        else {
            return unsupported(whole());
        };
        if x.ty.is_variable() {
            return like_variable(x, p, l.negated, e);
        }
        let Some(prefix) = p.strip_suffix('%') else {
            return unsupported(format!("{e} (only LIKE 'prefix%')"));
        };
        if prefix.contains(['%', '_', '\\']) || prefix.ends_with(' ') {
            return unsupported(format!("{e} (only LIKE 'prefix%')"));
        }
        Ok(build::like(x, prefix.as_bytes().to_vec(), l.negated)?)
    }

    fn column_type(&self, d: &DevExpr) -> Option<csd_table::ColumnType> {
        match &d.kind {
            csd_query::plan::ExprKind::Column { index, .. } => {
                self.schema.columns().get(*index).map(|c| c.ty)
            }
            _ => None,
        }
    }
}

/// `x [NOT] LIKE p` on a VARCHAR / VARBINARY: `'p%'`, `'%s'` and `'%s%'` whose literal
/// part has no `%`, `_` or `\\`.
fn like_variable(x: DevExpr, p: &str, negated: bool, e: &Expr) -> Result<DevExpr, NotPushed> {
    let plain = |t: &str| !t.contains(['%', '_', '\\']);
    let no = || unsupported(format!("{e} (only LIKE 'p%', '%s' and '%s%')"));
    if let Some(inner) = p.strip_prefix('%') {
        if let Some(mid) = inner.strip_suffix('%') {
            if plain(mid) {
                return Ok(build::like_any(x, mid.as_bytes().to_vec(), false, negated)?);
            }
        } else if plain(inner) {
            return Ok(build::like_any(
                x,
                inner.as_bytes().to_vec(),
                true,
                negated,
            )?);
        }
        return no();
    }
    match p.strip_suffix('%') {
        Some(prefix) if plain(prefix) => Ok(build::like(x, prefix.as_bytes().to_vec(), negated)?),
        _ => no(),
    }
}

/// A cast the device evaluates exactly, or `Unsupported`.
pub(crate) fn cast(
    d: DevExpr,
    to: &DataType,
    schema: &Schema,
    whole: &str,
) -> Result<DevExpr, NotPushed> {
    let t = Translator { schema };
    match (d.ty, to) {
        (
            DevType::Int,
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64,
        ) => {
            // Narrowing could wrap or fail in DataFusion: only widening of columns and
            // constants that fit stay exact; the device holds every integer as i64.
            if matches!(to, DataType::Int64) || d.as_const().is_some() {
                Ok(d)
            } else if let Some(c) = t.column_type(&d) {
                use csd_table::ColumnType as C;
                let fits = matches!(
                    (c, to),
                    (
                        C::Int8,
                        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64
                    ) | (
                        C::Int16,
                        DataType::Int16 | DataType::Int32 | DataType::Int64
                    ) | (C::Int32, DataType::Int32 | DataType::Int64)
                        | (C::Int64, DataType::Int64)
                );
                if fits { Ok(d) } else { unsupported(whole) }
            } else {
                unsupported(whole)
            }
        }
        (DevType::Int, DataType::Decimal128(_, s)) => {
            let s = u8::try_from(*s).or_else(|_| unsupported(whole))?;
            Ok(build::rescale(d, s, whole)?)
        }
        (DevType::Decimal { scale }, DataType::Decimal128(_, s)) => {
            let s = u8::try_from(*s).or_else(|_| unsupported(whole))?;
            if s < scale {
                return unsupported(whole);
            }
            Ok(build::rescale(d, s - scale, whole)?)
        }
        (DevType::Date, DataType::Date32) => Ok(d),
        (DevType::Char(_), DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8) => Ok(d),
        (DevType::Varchar, DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8) => Ok(d),
        (DevType::Varbinary, DataType::Binary | DataType::BinaryView | DataType::LargeBinary) => {
            Ok(d)
        }
        (DevType::Float32, DataType::Float32) | (DevType::Float64, DataType::Float64) => Ok(d),
        // `CAST(x AS DOUBLE)` of a FLOAT32 column stays a FLOAT32 expression: the builder
        // compares it with a FLOAT64 constant exactly (`build::compare`) and refuses
        // anything else; MIN/MAX of it is the FLOAT32 extreme, widened by the host.
        (DevType::Float32, DataType::Float64) if d.as_const().is_none() => Ok(d),
        // A wider precision at the same scale: the same 128-bit value.
        (DevType::Decimal128 { precision, scale }, DataType::Decimal128(p, s))
            if i16::from(*s) == i16::from(scale) && *p >= precision =>
        {
            Ok(d)
        }
        // A time zone is a label: the instant (UTC microseconds) is the same.
        (DevType::Timestamp, DataType::Timestamp(TimeUnit::Microsecond, _)) => Ok(d),
        _ => unsupported(whole),
    }
}
