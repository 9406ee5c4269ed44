//! Simulated time: a `u64` count of nanoseconds, and transfer rates kept as exact
//! picoseconds-per-byte so that a transfer's duration is integer arithmetic.

use std::fmt;

/// An instant of simulated time, in nanoseconds since the device was powered on for this run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SimTime(u64);

impl SimTime {
    /// The start of simulated time.
    pub const ZERO: SimTime = SimTime(0);

    /// The instant `ns` nanoseconds after time zero.
    #[inline]
    pub const fn from_ns(ns: u64) -> SimTime {
        SimTime(ns)
    }

    /// Nanoseconds since time zero.
    #[inline]
    pub fn ns(self) -> u64 {
        self.0
    }

    /// This instant plus `ns` nanoseconds (saturating).
    #[inline]
    #[must_use]
    pub fn after(self, ns: u64) -> SimTime {
        SimTime(self.0.saturating_add(ns))
    }

    /// Nanoseconds from `earlier` to `self` (zero if `earlier` is later).
    #[inline]
    pub fn since(self, earlier: SimTime) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    /// Seconds since time zero, for reports.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0;
        if ns >= 1_000_000_000 {
            write!(f, "{:.3} s", ns as f64 / 1e9)
        } else if ns >= 1_000_000 {
            write!(f, "{:.3} ms", ns as f64 / 1e6)
        } else if ns >= 1_000 {
            write!(f, "{:.3} us", ns as f64 / 1e3)
        } else {
            write!(f, "{ns} ns")
        }
    }
}

/// A transfer rate, stored as picoseconds per byte so that durations are exact integers.
///
/// 100 MB/s is 10,000 ps/B; 8 GB/s is 125 ps/B. Rates are rounded to the nearest
/// picosecond per byte, which is an error below 0.04% for every rate up to 16 GB/s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    ps_per_byte: u64,
}

impl Rate {
    /// A rate of `bytes_per_s` bytes per second. Zero or negative rates become the
    /// slowest representable rate; configs are validated before they get here.
    pub fn from_bytes_per_s(bytes_per_s: f64) -> Rate {
        let ps = if bytes_per_s > 0.0 {
            (1e12 / bytes_per_s).round()
        } else {
            u64::MAX as f64
        };
        Rate {
            ps_per_byte: (ps as u64).max(1),
        }
    }

    /// A rate of `mb_s` decimal megabytes (10^6 B) per second.
    pub fn from_mb_s(mb_s: f64) -> Rate {
        Rate::from_bytes_per_s(mb_s * 1e6)
    }

    /// Nanoseconds to move `bytes` bytes at this rate (rounded up).
    #[inline]
    pub fn transfer_ns(self, bytes: u64) -> u64 {
        (bytes.saturating_mul(self.ps_per_byte)).div_ceil(1000)
    }

    /// The rate in bytes per second.
    pub fn bytes_per_s(self) -> f64 {
        1e12 / self.ps_per_byte as f64
    }

    /// Picoseconds per byte.
    pub fn ps_per_byte(self) -> u64 {
        self.ps_per_byte
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_exact_for_round_numbers() {
        let r = Rate::from_mb_s(100.0);
        assert_eq!(r.ps_per_byte(), 10_000);
        assert_eq!(r.transfer_ns(8192), 81_920);
        let r = Rate::from_mb_s(400.0);
        assert_eq!(r.transfer_ns(8192), 20_480);
        assert!((Rate::from_mb_s(375.0).bytes_per_s() / 375e6 - 1.0).abs() < 1e-3);
    }

    #[test]
    fn display_picks_units() {
        assert_eq!(SimTime(12).to_string(), "12 ns");
        assert_eq!(SimTime(1_500).to_string(), "1.500 us");
        assert_eq!(SimTime(2_000_000_000).to_string(), "2.000 s");
        assert_eq!(SimTime(5).since(SimTime(9)), 0);
    }
}
