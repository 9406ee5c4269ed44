//! Simulated time: a `u64` count of nanoseconds, and transfer rates kept as exact
//! picoseconds-per-byte so that a transfer's duration is integer arithmetic.

use std::fmt;

/// An instant of simulated time, in nanoseconds since the device was powered on for this run.
///
/// While the event core records ([`crate::events::Recording`]), an instant can also name
/// a node of its graph: the end of an operation the core has not booked yet, an offset
/// of one, or a join. Its value ([`SimTime::ns`]) is then provisional, a lower bound of
/// the final value; [`SimTime::after`] and [`SimTime::max`] extend the graph, so device
/// code computes timing the same way in both modes. Equality, order and hashing look
/// only at the value; a comparison involving an unfixed instant is counted
/// ([`crate::events::Graph::unfixed_comparisons`]): code that decides on instants while
/// the core records asks the core instead ([`crate::events::at_or_before`]).
#[derive(Clone, Copy, Default)]
pub struct SimTime {
    ns: u64,
    /// 0: the value is final; else a node of the recording graph.
    node: u32,
}

impl PartialEq for SimTime {
    #[inline]
    fn eq(&self, other: &SimTime) -> bool {
        if (self.node | other.node) != 0 {
            crate::events::note_unfixed_comparison();
        }
        self.ns == other.ns
    }
}

impl Eq for SimTime {}

impl PartialOrd for SimTime {
    #[inline]
    fn partial_cmp(&self, other: &SimTime) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SimTime {
    #[inline]
    fn cmp(&self, other: &SimTime) -> std::cmp::Ordering {
        if (self.node | other.node) != 0 {
            crate::events::note_unfixed_comparison();
        }
        self.ns.cmp(&other.ns)
    }
}

impl std::hash::Hash for SimTime {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.ns.hash(state);
    }
}

impl fmt::Debug for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.node == 0 {
            write!(f, "SimTime({})", self.ns)
        } else {
            write!(f, "SimTime(>={} @{})", self.ns, self.node)
        }
    }
}

impl SimTime {
    /// The start of simulated time.
    pub const ZERO: SimTime = SimTime { ns: 0, node: 0 };

    /// The instant `ns` nanoseconds after time zero.
    #[inline]
    pub const fn from_ns(ns: u64) -> SimTime {
        SimTime { ns, node: 0 }
    }

    /// An instant named by node `node` of the recording graph, `ns` its lower bound.
    #[inline]
    pub(crate) const fn of_node(ns: u64, node: u32) -> SimTime {
        SimTime { ns, node }
    }

    /// The recording graph's node that names this instant (0: none, the value is final).
    #[inline]
    pub(crate) const fn node(self) -> u32 {
        self.node
    }

    /// Nanoseconds since time zero. For an instant the event core has not fixed yet
    /// ([`SimTime::is_final`] false), a lower bound of its final value.
    #[inline]
    pub const fn ns(self) -> u64 {
        self.ns
    }

    /// Whether the value is final (always, outside a recording of the event core).
    #[inline]
    pub const fn is_final(self) -> bool {
        self.node == 0
    }

    /// This instant plus `ns` nanoseconds (saturating).
    #[inline]
    #[must_use]
    pub fn after(self, ns: u64) -> SimTime {
        if self.node == 0 {
            SimTime::from_ns(self.ns.saturating_add(ns))
        } else {
            crate::events::offset(self, ns)
        }
    }

    /// The later of two instants: the instant at which both have passed (a join).
    /// Inherent, so `a.max(b)` on instants always means this, never `Ord::max`, and
    /// keeps what each instant waits for while the event core records.
    #[inline]
    #[must_use]
    pub fn max(self, other: SimTime) -> SimTime {
        if (self.node | other.node) == 0 {
            if other.ns > self.ns { other } else { self }
        } else {
            crate::events::join(self, other)
        }
    }

    /// The earlier of two instants (by value: while the event core records, by
    /// provisional value).
    #[inline]
    #[must_use]
    pub fn min(self, other: SimTime) -> SimTime {
        if (self.node | other.node) != 0 {
            crate::events::note_unfixed_comparison();
        }
        if other.ns < self.ns { other } else { self }
    }

    /// The latest of `instants` (the join of all of them), or `None` for none.
    #[inline]
    pub fn latest(instants: impl IntoIterator<Item = SimTime>) -> Option<SimTime> {
        instants.into_iter().reduce(SimTime::max)
    }

    /// Nanoseconds from `earlier` to `self` (zero if `earlier` is later), by value.
    #[inline]
    pub fn since(self, earlier: SimTime) -> u64 {
        self.ns.saturating_sub(earlier.ns)
    }

    /// Seconds since time zero, for reports.
    pub fn as_secs_f64(self) -> f64 {
        self.ns as f64 / 1e9
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.ns;
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
        assert_eq!(SimTime::from_ns(12).to_string(), "12 ns");
        assert_eq!(SimTime::from_ns(1_500).to_string(), "1.500 us");
        assert_eq!(SimTime::from_ns(2_000_000_000).to_string(), "2.000 s");
        assert_eq!(SimTime::from_ns(5).since(SimTime::from_ns(9)), 0);
    }
}
