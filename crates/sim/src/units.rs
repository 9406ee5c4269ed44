//! Parsing of human sizes (`4k`, `16KiB`, `1g`) and durations (`500ms`, `2s`), shared by the
//! command line and the settings read from the environment (`CSD_MEMORY_LIMIT`).

/// Parse a byte size: a number with an optional binary suffix (k, m, g, t, with or
/// without `iB`/`B`; all powers of 1024, as fio reads them).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let digits_end = lower
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(lower.len());
    let (num, suffix) = lower.split_at(digits_end);
    let mult: u64 = match suffix.trim() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => {
            return Err(format!(
                "unknown size suffix `{other}` in `{t}` (use k, m, g or t)"
            ));
        }
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{t}` is not a size (examples: 4096, 4k, 128KiB, 1g)"))?;
    let bytes = v * mult as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("size `{t}` is out of range"));
    }
    Ok(bytes.round() as u64)
}

/// Parse a duration in seconds unless suffixed (`ns`, `us`, `ms`, `s`, `m`); returns ns.
pub fn parse_duration_ns(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let digits_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(digits_end);
    let mult = match suffix {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "" | "s" => 1e9,
        "m" | "min" => 60e9,
        other => {
            return Err(format!(
                "unknown time unit `{other}` in `{s}` (use ns, us, ms, s, m)"
            ));
        }
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (examples: 500ms, 2s)"))?;
    let ns = v * mult;
    if !ns.is_finite() || ns < 0.0 || ns > u64::MAX as f64 {
        return Err(format!("duration `{s}` is out of range"));
    }
    Ok(ns.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("16KiB"), Ok(16384));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("1.5m"), Ok(3 << 19));
        assert!(parse_size("4x").is_err());
        assert!(parse_size("k").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ns("2"), Ok(2_000_000_000));
        assert_eq!(parse_duration_ns("500ms"), Ok(500_000_000));
        assert_eq!(parse_duration_ns("3us"), Ok(3_000));
        assert!(parse_duration_ns("3 weeks").is_err());
    }
}
