//! The device program's value type: [`DataType`] (what an expression yields), with exact
//! decimal formatting and comparison across scales.
//!
//! Every numeric value is an integer: `INT` is a plain integer, `DECIMAL(scale s)` is an
//! integer number of `10^-s` units (as the table stores it, [`csd_table::schema`]),
//! `DATE` is days since 1970-01-01. Nothing is ever converted to floating point, so a
//! predicate or an aggregate gives bit-identical answers on the host and in the device.

use std::cmp::Ordering;
use std::fmt;

use csd_table::ColumnType;

/// Largest decimal scale an expression may have: `10^18` is the largest power of ten in
/// an `i64`, the width every value is computed in.
pub const MAX_SCALE: u8 = 18;

/// The type of an expression or of a result column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataType {
    /// A predicate's truth value (only in `WHERE`; never stored or returned).
    Bool,
    /// An integer: `INT32` and `INT64` columns, integer literals, `COUNT`.
    Int,
    /// A fixed-point decimal with `scale` digits after the point, held as an integer
    /// number of `10^-scale` units.
    Decimal {
        /// Digits after the point.
        scale: u8,
    },
    /// A date: days since 1970-01-01.
    Date,
    /// A fixed-length byte string of `n` bytes (`CHAR(n)` columns, string literals).
    Char(u16),
    /// An instant: `i64` microseconds since 1970-01-01 00:00 UTC (`TIMESTAMP` columns).
    Timestamp,
    /// IEEE 754 single precision (`FLOAT32` columns: read and returned, not computed).
    Float32,
    /// IEEE 754 double precision (`FLOAT64` columns: read and returned, not computed).
    Float64,
    /// A 128-bit decimal (`DECIMAL(p, s)` columns with `p` up to 38: read and returned).
    Decimal128 {
        /// Total digits.
        precision: u8,
        /// Digits after the point.
        scale: u8,
    },
    /// Variable-length UTF-8 text (`VARCHAR` columns): compared byte for byte (UTF-8
    /// byte order is code point order), never padded or trimmed.
    Varchar,
    /// Variable-length bytes (`VARBINARY` columns): compared byte for byte.
    Varbinary,
}

impl DataType {
    /// The query type of a stored column type: `INT8/16/32/64` are `INT`, `BOOLEAN` is
    /// [`DataType::Bool`] (a column that is itself a predicate), every other type its
    /// own. (`Option` for callers written when some types had no query type.)
    pub fn of_column(ty: ColumnType) -> Option<DataType> {
        Some(match ty {
            ColumnType::Int8 | ColumnType::Int16 | ColumnType::Int32 | ColumnType::Int64 => {
                DataType::Int
            }
            ColumnType::Date => DataType::Date,
            ColumnType::Decimal { scale } => DataType::Decimal { scale },
            ColumnType::Char(n) => DataType::Char(n),
            ColumnType::Bool => DataType::Bool,
            ColumnType::Float32 => DataType::Float32,
            ColumnType::Float64 => DataType::Float64,
            ColumnType::Timestamp => DataType::Timestamp,
            ColumnType::Decimal128 { precision, scale } => {
                DataType::Decimal128 { precision, scale }
            }
            ColumnType::Varchar => DataType::Varchar,
            ColumnType::Varbinary => DataType::Varbinary,
        })
    }

    /// True for the variable-length string types (`VARCHAR`, `VARBINARY`).
    pub fn is_variable(self) -> bool {
        matches!(self, DataType::Varchar | DataType::Varbinary)
    }

    /// The decimal scale of a number type (`INT` is scale 0); `None` for the others.
    pub fn scale(self) -> Option<u8> {
        match self {
            DataType::Int => Some(0),
            DataType::Decimal { scale } => Some(scale),
            _ => None,
        }
    }

    /// True for `FLOAT32` and `FLOAT64`, which the evaluator holds as total-order keys
    /// ([`float_key`]): compared, never computed with.
    pub fn is_float(self) -> bool {
        matches!(self, DataType::Float32 | DataType::Float64)
    }

    /// True for `INT` and `DECIMAL`.
    pub fn is_number(self) -> bool {
        self.scale().is_some()
    }

    /// True for the types held as one `i64` per row (`INT`, `DECIMAL`, `DATE`,
    /// `TIMESTAMP`).
    pub fn is_integer_backed(self) -> bool {
        matches!(
            self,
            DataType::Int | DataType::Decimal { .. } | DataType::Date | DataType::Timestamp
        )
    }

    /// Bytes one value of this type takes in a result chunk sent to the host
    /// (`INT`/`DECIMAL` 8, `DATE` 4, `CHAR(n)` n, `BOOLEAN` 1, `TIMESTAMP` and
    /// `FLOAT64` 8, `FLOAT32` 4, `DECIMAL128` 16; a variable-length value 4 for its
    /// length, its bytes counted apart).
    pub fn wire_width(self) -> usize {
        match self {
            DataType::Bool => 1,
            DataType::Int | DataType::Decimal { .. } | DataType::Timestamp => 8,
            DataType::Date | DataType::Float32 => 4,
            DataType::Float64 => 8,
            DataType::Decimal128 { .. } => 16,
            DataType::Char(n) => usize::from(n),
            DataType::Varchar | DataType::Varbinary => 4,
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataType::Bool => f.write_str("BOOLEAN"),
            DataType::Int => f.write_str("INT"),
            DataType::Decimal { scale } => write!(f, "DECIMAL(scale {scale})"),
            DataType::Date => f.write_str("DATE"),
            DataType::Char(n) => write!(f, "CHAR({n})"),
            DataType::Timestamp => f.write_str("TIMESTAMP"),
            DataType::Float32 => f.write_str("FLOAT32"),
            DataType::Float64 => f.write_str("FLOAT64"),
            DataType::Decimal128 { precision, scale } => {
                write!(f, "DECIMAL({precision}, {scale})")
            }
            DataType::Varchar => f.write_str("VARCHAR"),
            DataType::Varbinary => f.write_str("VARBINARY"),
        }
    }
}

/// The order key of an IEEE value's bits (`bits` of `width` bytes, 4 or 8): keys
/// compare as integers exactly as Arrow's comparison kernels (and so DataFusion) compare
/// floats, measured: `-0.0 = 0.0`, every `NaN` equal to every other and above `inf`,
/// otherwise IEEE order (the total order of [`f64::total_cmp`] once both zeros are
/// `0.0` and every NaN is the positive quiet NaN). A `FLOAT32` value's key is its own
/// 32-bit key widened, so keys of one type compare with keys of that type only.
#[inline]
pub fn float_key(bits: u64, width: usize) -> i64 {
    if width == 4 {
        let x = f32::from_bits(bits as u32);
        let x = if x == 0.0 {
            0.0
        } else if x.is_nan() {
            f32::NAN
        } else {
            x
        };
        let b = x.to_bits() as i32;
        i64::from(b ^ ((((b >> 31) as u32) >> 1) as i32))
    } else {
        let x = f64::from_bits(bits);
        let x = if x == 0.0 {
            0.0
        } else if x.is_nan() {
            f64::NAN
        } else {
            x
        };
        let b = x.to_bits() as i64;
        b ^ ((((b >> 63) as u64) >> 1) as i64)
    }
}

/// The IEEE bits (`width` bytes, 4 or 8) of a [`float_key`]: the value it stands for
/// (`0.0` for either zero, the positive quiet NaN for any NaN).
#[inline]
pub fn float_bits(key: i64, width: usize) -> u64 {
    if width == 4 {
        let k = key as i32;
        u64::from((k ^ ((((k >> 31) as u32) >> 1) as i32)) as u32)
    } else {
        (key ^ ((((key >> 63) as u64) >> 1) as i64)) as u64
    }
}

/// The key of an `f64` value ([`float_key`]).
pub fn f64_key(x: f64) -> i64 {
    float_key(x.to_bits(), 8)
}

/// The key of an `f32` value ([`float_key`]).
pub fn f32_key(x: f32) -> i64 {
    float_key(u64::from(x.to_bits()), 4)
}

/// Compares `x * 10^-sx` with `y * 10^-sy` exactly. If rescaling overflows `i128`
/// the larger-magnitude side decides, which is exact because the rescaled value is
/// then beyond anything an `i128` holds.
pub(crate) fn cmp_scaled(x: i128, sx: u8, y: i128, sy: u8) -> Ordering {
    let up =
        |v: i128, by: u8| -> Option<i128> { v.checked_mul(10i128.checked_pow(u32::from(by))?) };
    match sx.cmp(&sy) {
        Ordering::Equal => x.cmp(&y),
        Ordering::Less => match up(x, sy - sx) {
            Some(xs) => xs.cmp(&y),
            None => x.signum().cmp(&0),
        },
        Ordering::Greater => match up(y, sx - sy) {
            Some(ys) => x.cmp(&ys),
            None => 0.cmp(&y.signum()),
        },
    }
}

/// Formats `units * 10^-scale` with exactly `scale` digits after the point
/// (`12345, 2` → `123.45`; `-5, 2` → `-0.05`).
pub fn format_units(units: i128, scale: u8) -> String {
    let mut s = String::new();
    // Writing to a String cannot fail.
    let _ = write_units(&mut s, units, scale);
    s
}

fn write_units(f: &mut dyn fmt::Write, units: i128, scale: u8) -> fmt::Result {
    let sign = if units < 0 { "-" } else { "" };
    let abs = units.unsigned_abs();
    if scale == 0 {
        return write!(f, "{sign}{abs}");
    }
    let digits = abs.to_string();
    let scale = usize::from(scale);
    if digits.len() > scale {
        let (int, frac) = digits.split_at(digits.len() - scale);
        write!(f, "{sign}{int}.{frac}")
    } else {
        write!(f, "{sign}0.{digits:0>scale$}")
    }
}

/// Rounds `n / d` to the nearest integer, halves away from zero. `None` if `d == 0`
/// or the quotient overflows.
pub(crate) fn div_round_half_away(n: i128, d: i128) -> Option<i128> {
    if d == 0 {
        return None;
    }
    let q = n.checked_div(d)?;
    let r = n.checked_rem(d)?;
    // |2r| >= |d|  <=>  round away from zero
    let twice = r.unsigned_abs().checked_mul(2)?;
    if twice >= d.unsigned_abs() {
        if (n < 0) == (d < 0) {
            q.checked_add(1)
        } else {
            q.checked_sub(1)
        }
    } else {
        Some(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_units() {
        assert_eq!(format_units(12345, 2), "123.45");
        assert_eq!(format_units(-5, 2), "-0.05");
        assert_eq!(format_units(0, 3), "0.000");
        assert_eq!(format_units(7, 0), "7");
        assert_eq!(format_units(-100, 2), "-1.00");
        assert_eq!(
            format_units(i128::MIN, 2),
            "-1701411834604692317316873037158841057.28"
        );
        assert_eq!(format_units(1_231_410_782_283, 4), "123141078.2283");
    }

    #[test]
    fn compares_across_scales() {
        assert_eq!(cmp_scaled(5, 2, 50, 3), Ordering::Equal);
        assert_eq!(cmp_scaled(5, 2, 51, 3), Ordering::Less);
        assert_eq!(cmp_scaled(1, 0, 99, 2), Ordering::Greater);
        assert_eq!(
            cmp_scaled(i128::MAX, 0, 1, 30),
            Ordering::Greater,
            "overflowing rescale still orders"
        );
        assert_eq!(cmp_scaled(-1, 0, i128::MAX, 5), Ordering::Less);
    }

    /// Arrow's float order (measured with DataFusion): zeros equal, NaNs equal and
    /// greatest, IEEE otherwise.
    fn arrow_cmp64(a: f64, b: f64) -> Ordering {
        match (a.is_nan(), b.is_nan()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
        }
    }

    fn arrow_cmp32(a: f32, b: f32) -> Ordering {
        arrow_cmp64(f64::from(a), f64::from(b))
    }

    proptest::proptest! {
        /// Keys order floats as Arrow's kernels do (NaNs, infinities and both zeros
        /// included) and give back the value they stand for.
        #[test]
        fn float_keys_order_as_arrow(a in proptest::num::f64::ANY, b in proptest::num::f64::ANY,
                                     c in proptest::num::f32::ANY, d in proptest::num::f32::ANY) {
            proptest::prop_assert_eq!(f64_key(a).cmp(&f64_key(b)), arrow_cmp64(a, b));
            proptest::prop_assert_eq!(f32_key(c).cmp(&f32_key(d)), arrow_cmp32(c, d));
            let back = f64::from_bits(float_bits(f64_key(a), 8));
            proptest::prop_assert!(back == a || (back.is_nan() && a.is_nan()));
            let back = f32::from_bits(float_bits(f32_key(c), 4) as u32);
            proptest::prop_assert!(back == c || (back.is_nan() && c.is_nan()));
        }
    }

    #[test]
    fn float_keys_of_specials() {
        let order = [
            f64::NEG_INFINITY,
            -1.5,
            0.0,
            1e-300,
            2.0,
            f64::INFINITY,
            f64::NAN,
        ];
        for w in order.windows(2) {
            assert!(f64_key(w[0]) < f64_key(w[1]), "{} < {}", w[0], w[1]);
        }
        assert_eq!(f64_key(-f64::NAN), f64_key(f64::NAN));
        assert_eq!(f64_key(-0.0), f64_key(0.0));
        assert_eq!(f32_key(-0.0), f32_key(0.0));
    }

    #[test]
    fn rounding() {
        assert_eq!(div_round_half_away(5, 2), Some(3));
        assert_eq!(div_round_half_away(-5, 2), Some(-3));
        assert_eq!(div_round_half_away(4, 3), Some(1));
        assert_eq!(div_round_half_away(-4, 3), Some(-1));
        assert_eq!(div_round_half_away(5, -2), Some(-3));
        assert_eq!(div_round_half_away(1, 0), None);
        assert_eq!(div_round_half_away(i128::MIN, -1), None);
    }
}
