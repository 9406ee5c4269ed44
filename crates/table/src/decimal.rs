//! Fixed-point decimals stored as scaled `i64` (smart-ssd §4.1.1: "all decimal numbers
//! were multiplied by 100 and stored as integers"; TPC-H money uses scale 2).
//!
//! Parsing is exact (no floating point): `"0.05"` at scale 2 is `5`, `"-12.3"` at scale
//! 2 is `-1230`. Text with more fractional digits than the scale is rejected rather than
//! rounded, so a predicate constant never silently changes meaning.

/// Errors from parsing decimal text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecimalError {
    /// Text that is not `[-+]digits[.digits]`.
    #[error("'{text}' is not a decimal number: write e.g. 12.34, -0.05 or 7")]
    Format {
        /// The rejected text.
        text: String,
    },
    /// More fractional digits than the column's scale.
    #[error("'{text}' has more than {scale} digits after the point: the column's scale is {scale}")]
    TooPrecise {
        /// The rejected text.
        text: String,
        /// The scale.
        scale: u8,
    },
    /// The scaled value does not fit an `i64`, or the scale is above 18.
    #[error("'{text}' at scale {scale} does not fit a 64-bit scaled integer")]
    Overflow {
        /// The rejected text.
        text: String,
        /// The scale.
        scale: u8,
    },
}

/// `10^scale` as an `i64`, or `None` above scale 18.
pub const fn pow10(scale: u8) -> Option<i64> {
    if scale > 18 {
        return None;
    }
    let mut p: i64 = 1;
    let mut i = 0;
    while i < scale {
        p *= 10;
        i += 1;
    }
    Some(p)
}

/// Parses decimal text into an integer scaled by `10^scale`.
pub fn parse_decimal(text: &str, scale: u8) -> Result<i64, DecimalError> {
    let format_err = || DecimalError::Format {
        text: text.to_string(),
    };
    let overflow = || DecimalError::Overflow {
        text: text.to_string(),
        scale,
    };
    let factor = pow10(scale).ok_or_else(overflow)?;
    let (negative, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let (int_part, frac_part) = match body.split_once('.') {
        Some((i, f)) => (i, f),
        None => (body, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(format_err());
    }
    if !int_part
        .bytes()
        .chain(frac_part.bytes())
        .all(|c| c.is_ascii_digit())
    {
        return Err(format_err());
    }
    if frac_part.len() > usize::from(scale) {
        return Err(DecimalError::TooPrecise {
            text: text.to_string(),
            scale,
        });
    }
    // Accumulate as a negative number so i64::MIN is reachable.
    let mut acc: i64 = 0;
    for c in int_part.bytes() {
        acc = acc
            .checked_mul(10)
            .and_then(|a| a.checked_sub(i64::from(c - b'0')))
            .ok_or_else(overflow)?;
    }
    acc = acc.checked_mul(factor).ok_or_else(overflow)?;
    let mut frac: i64 = 0;
    for c in frac_part.bytes() {
        frac = frac * 10 + i64::from(c - b'0');
    }
    // frac_part.len() <= scale, so this power exists
    let frac_factor = pow10(scale - frac_part.len() as u8).ok_or_else(overflow)?;
    acc = acc.checked_sub(frac * frac_factor).ok_or_else(overflow)?;
    if negative {
        Ok(acc)
    } else {
        acc.checked_neg().ok_or_else(overflow)
    }
}

/// Formats a scaled integer with exactly `scale` fractional digits (`1234`, 2 → `"12.34"`).
/// Scales above 18 are clamped to 18.
pub fn format_decimal(value: i64, scale: u8) -> String {
    let scale = scale.min(18);
    let factor = pow10(scale).unwrap_or(1) as u64;
    let abs = value.unsigned_abs();
    let sign = if value < 0 { "-" } else { "" };
    if scale == 0 {
        return format!("{sign}{abs}");
    }
    format!(
        "{sign}{}.{:0width$}",
        abs / factor,
        abs % factor,
        width = usize::from(scale)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_exactly() {
        assert_eq!(parse_decimal("0.05", 2), Ok(5));
        assert_eq!(parse_decimal("0.07", 2), Ok(7));
        assert_eq!(parse_decimal("24", 2), Ok(2400));
        assert_eq!(parse_decimal("-12.3", 2), Ok(-1230));
        assert_eq!(parse_decimal("+.5", 2), Ok(50));
        assert_eq!(parse_decimal("7.", 2), Ok(700));
        assert_eq!(parse_decimal("123", 0), Ok(123));
        assert_eq!(parse_decimal("-9223372036854775808", 0), Ok(i64::MIN));
        assert_eq!(parse_decimal("9223372036854775807", 0), Ok(i64::MAX));
    }

    #[test]
    fn rejects() {
        for bad in ["", "-", ".", "1.2.3", "1e5", "abc", " 1", "1,5", "--1", "é"] {
            assert!(
                matches!(parse_decimal(bad, 2), Err(DecimalError::Format { .. })),
                "{bad}"
            );
        }
        assert!(matches!(
            parse_decimal("0.055", 2),
            Err(DecimalError::TooPrecise { .. })
        ));
        assert!(matches!(
            parse_decimal("9223372036854775808", 0),
            Err(DecimalError::Overflow { .. })
        ));
        assert!(matches!(
            parse_decimal("92233720368547759", 2),
            Err(DecimalError::Overflow { .. })
        ));
        assert!(matches!(
            parse_decimal("92233720368547758.08", 2),
            Err(DecimalError::Overflow { .. })
        ));
        assert_eq!(parse_decimal("-92233720368547758.08", 2), Ok(i64::MIN));
        assert!(matches!(
            parse_decimal("1", 19),
            Err(DecimalError::Overflow { .. })
        ));
    }

    #[test]
    fn formats() {
        assert_eq!(format_decimal(1234, 2), "12.34");
        assert_eq!(format_decimal(-5, 2), "-0.05");
        assert_eq!(format_decimal(0, 2), "0.00");
        assert_eq!(format_decimal(42, 0), "42");
        assert_eq!(format_decimal(i64::MIN, 2), "-92233720368547758.08");
        for v in [0, 1, -1, 99, -100, 123_456_789, i64::MAX, i64::MIN] {
            for s in [0u8, 2, 5, 18] {
                assert_eq!(
                    parse_decimal(&format_decimal(v, s), s),
                    Ok(v),
                    "{v} scale {s}"
                );
            }
        }
    }
}
