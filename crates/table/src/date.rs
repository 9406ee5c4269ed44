//! Dates as `i32` days since 1970-01-01 (proleptic Gregorian calendar), as smart-ssd
//! §4.1.1 stores TPC-H dates ("converted to the numbers of days since the last epoch").
//!
//! The conversions are exact integer arithmetic (H. Hinnant's `days_from_civil` /
//! `civil_from_days`), with no time zones and no floating point. Text is strict ISO 8601
//! `YYYY-MM-DD` with a four-digit year in `0000..=9999`; that range round-trips exactly
//! through [`parse_date`] and [`format_date`].

use std::fmt;

/// Errors from parsing or building dates.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DateError {
    /// Text that is not `YYYY-MM-DD`.
    #[error("'{text}' is not a date: write dates as YYYY-MM-DD, e.g. 1994-01-01")]
    Format {
        /// The rejected text.
        text: String,
    },
    /// Month not in 1..=12 or day not in the month.
    #[error(
        "{year:04}-{month:02}-{day:02} is not a calendar date (month 1-12, day within the month)"
    )]
    NotADate {
        /// Year.
        year: i32,
        /// Month.
        month: u32,
        /// Day.
        day: u32,
    },
    /// Year outside `0..=9999`.
    #[error("year {year} is out of range: dates must be within 0000-01-01 ..= 9999-12-31")]
    YearRange {
        /// The rejected year.
        year: i32,
    },
}

/// Days since 1970-01-01 of `0000-01-01`.
pub const MIN_DAYS: i32 = -719_528;
/// Days since 1970-01-01 of `9999-12-31`.
pub const MAX_DAYS: i32 = 2_932_896;

/// True for Gregorian leap years.
pub const fn is_leap_year(year: i32) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

/// Number of days in `month` (1..=12) of `year`; 0 for an invalid month.
pub const fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap_year(year) => 29,
        2 => 28,
        _ => 0,
    }
}

/// Days since 1970-01-01 of the date `year-month-day`, validated
/// (year 0..=9999, month 1..=12, day within the month).
pub fn days_from_ymd(year: i32, month: u32, day: u32) -> Result<i32, DateError> {
    if !(0..=9999).contains(&year) {
        return Err(DateError::YearRange { year });
    }
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return Err(DateError::NotADate { year, month, day });
    }
    Ok(days_from_civil(year, month, day))
}

/// Hinnant's `days_from_civil` for valid dates of years 0..=9999 (no overflow there).
const fn days_from_civil(year: i32, month: u32, day: u32) -> i32 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = (if y >= 0 { y } else { y - 399 }) / 400;
    let yoe = y - era * 400; // [0, 399]
    let m = month as i32;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day as i32 - 1; // [0, 365]
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy; // [0, 146096]
    era * 146_097 + doe - 719_468
}

/// The `(year, month, day)` of `days` since 1970-01-01. Exact for every `i32`.
pub const fn ymd_from_days(days: i32) -> (i32, u32, u32) {
    let z = days as i64 + 719_468;
    let era = (if z >= 0 { z } else { z - 146_096 }) / 146_097;
    let doe = z - era * 146_097; // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11]
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32; // [1, 31]
    let m = (if mp < 10 { mp + 3 } else { mp - 9 }) as u32; // [1, 12]
    let y = if m <= 2 { y + 1 } else { y };
    (y as i32, m, d)
}

/// Parses strict `YYYY-MM-DD` (exactly 10 ASCII characters) into days since 1970-01-01.
pub fn parse_date(text: &str) -> Result<i32, DateError> {
    let b = text.as_bytes();
    let format_err = || DateError::Format {
        text: text.to_string(),
    };
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return Err(format_err());
    }
    let num = |range: std::ops::Range<usize>| -> Result<u32, DateError> {
        b[range].iter().try_fold(0u32, |acc, &c| {
            if c.is_ascii_digit() {
                Ok(acc * 10 + u32::from(c - b'0'))
            } else {
                Err(format_err())
            }
        })
    };
    let year = num(0..4)?;
    let month = num(5..7)?;
    let day = num(8..10)?;
    // year < 10000, so the cast is exact
    days_from_ymd(year as i32, month, day)
}

/// Formats days since 1970-01-01 as `YYYY-MM-DD`. Years outside `0..=9999` are
/// written with a sign and at least four digits (ISO 8601 expanded form, e.g.
/// `-0001-12-31`), which [`parse_date`] does not accept.
pub fn format_date(days: i32) -> String {
    DisplayDate(days).to_string()
}

/// `Display` adapter that formats days since 1970-01-01 like [`format_date`] without
/// allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DisplayDate(pub i32);

impl fmt::Display for DisplayDate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (y, m, d) = ymd_from_days(self.0);
        if (0..=9999).contains(&y) {
            write!(f, "{y:04}-{m:02}-{d:02}")
        } else {
            write!(f, "{y:+05}-{m:02}-{d:02}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(parse_date("1970-01-01"), Ok(0));
        assert_eq!(parse_date("1969-12-31"), Ok(-1));
        assert_eq!(parse_date("1992-01-01"), Ok(8035)); // tpchgen UNIX_EPOCH_OFFSET
        assert_eq!(parse_date("1994-01-01"), Ok(8766)); // TPC-H Q6 bounds
        assert_eq!(parse_date("1995-01-01"), Ok(9131));
        assert_eq!(parse_date("1995-05-19"), Ok(9269)); // tpchgen test value
        assert_eq!(parse_date("2000-02-29"), Ok(11016));
        assert_eq!(parse_date("2000-03-01"), Ok(11017));
        assert_eq!(parse_date("0000-01-01"), Ok(MIN_DAYS));
        assert_eq!(parse_date("9999-12-31"), Ok(MAX_DAYS));
        assert_eq!(format_date(9269), "1995-05-19");
        assert_eq!(format_date(-1), "1969-12-31");
        assert_eq!(format_date(MIN_DAYS - 1), "-0001-12-31");
    }

    #[test]
    fn rejects_bad_text() {
        for bad in [
            "",
            "1994-1-01",
            "1994/01/01",
            "94-01-01",
            "1994-01-01 ",
            "1994-0a-01",
            "+994-01-01",
            "1994-01-011",
        ] {
            assert!(
                matches!(parse_date(bad), Err(DateError::Format { .. })),
                "{bad}"
            );
        }
        for bad in [
            "1994-00-01",
            "1994-13-01",
            "1994-02-29",
            "1900-02-29",
            "1994-04-31",
            "1994-01-00",
        ] {
            assert!(
                matches!(parse_date(bad), Err(DateError::NotADate { .. })),
                "{bad}"
            );
        }
        assert!(parse_date("2000-02-29").is_ok());
        assert!(matches!(
            days_from_ymd(10_000, 1, 1),
            Err(DateError::YearRange { .. })
        ));
        assert!(matches!(
            days_from_ymd(-1, 1, 1),
            Err(DateError::YearRange { .. })
        ));
        // multi-byte UTF-8 must not panic on byte indexing
        assert!(parse_date("1994-01-0é").is_err());
        assert!(parse_date("é994-01-01").is_err());
    }

    #[test]
    fn round_trip_every_day_0000_to_9999() {
        let mut expected = (0, 1, 1);
        for days in MIN_DAYS..=MAX_DAYS {
            let ymd = ymd_from_days(days);
            assert_eq!(ymd, expected, "days {days}");
            assert_eq!(days_from_ymd(ymd.0, ymd.1, ymd.2), Ok(days));
            // next calendar day
            let (y, m, d) = expected;
            expected = if d < days_in_month(y, m) {
                (y, m, d + 1)
            } else if m < 12 {
                (y, m + 1, 1)
            } else {
                (y + 1, 1, 1)
            };
        }
    }

    #[test]
    fn text_round_trip_sampled() {
        for days in (MIN_DAYS..=MAX_DAYS).step_by(97) {
            assert_eq!(parse_date(&format_date(days)), Ok(days));
        }
    }

    #[test]
    fn extremes_do_not_overflow() {
        for d in [i32::MIN, i32::MIN + 1, -1, 0, i32::MAX - 1, i32::MAX] {
            let (_, m, day) = ymd_from_days(d);
            assert!((1..=12).contains(&m) && (1..=31).contains(&day));
            let _ = format_date(d);
        }
    }
}
