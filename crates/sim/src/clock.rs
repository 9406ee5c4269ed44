//! The two clock modes of DESIGN.md: **virtual** (the simulated clock jumps; runs are as
//! fast as the host allows and bit-for-bit reproducible) and **paced** (a caller waits
//! until the wall clock reaches the modeled completion, times a scale factor, so real
//! threads feel real device latency).

use crate::time::SimTime;
use std::time::{Duration, Instant};

/// How simulated time relates to wall-clock time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ClockMode {
    /// The clock jumps; nothing waits.
    Virtual,
    /// Completions are delivered when `wall = start + modeled * scale`.
    Paced {
        /// Wall seconds per simulated second (1.0 = real time, 0.1 = ten times faster).
        scale: f64,
    },
}

impl ClockMode {
    /// Parse `virtual`, `paced` or `paced:SCALE`.
    pub fn parse(s: &str) -> Option<ClockMode> {
        match s {
            "virtual" => Some(ClockMode::Virtual),
            "paced" => Some(ClockMode::Paced { scale: 1.0 }),
            _ => {
                let scale: f64 = s.strip_prefix("paced:")?.parse().ok()?;
                (scale.is_finite() && scale > 0.0).then_some(ClockMode::Paced { scale })
            }
        }
    }
}

/// Delivers simulated instants at the matching wall-clock instants in paced mode, and
/// does nothing in virtual mode.
#[derive(Debug, Clone)]
pub struct Pacer {
    mode: ClockMode,
    origin: Instant,
    origin_sim: SimTime,
}

impl Pacer {
    /// A pacer whose simulated `origin_sim` corresponds to the wall-clock instant now.
    pub fn new(mode: ClockMode, origin_sim: SimTime) -> Pacer {
        Pacer {
            mode,
            origin: Instant::now(),
            origin_sim,
        }
    }

    /// The clock mode.
    pub fn mode(&self) -> ClockMode {
        self.mode
    }

    /// The wall-clock instant at which simulated instant `t` is due.
    pub fn wall_deadline(&self, t: SimTime) -> Option<Instant> {
        match self.mode {
            ClockMode::Virtual => None,
            ClockMode::Paced { scale } => {
                let secs = t.since(self.origin_sim) as f64 / 1e9 * scale;
                Some(self.origin + Duration::from_secs_f64(secs))
            }
        }
    }

    /// The simulated instant that corresponds to the wall clock now (paced mode), or
    /// `None` in virtual mode.
    pub fn now_sim(&self) -> Option<SimTime> {
        match self.mode {
            ClockMode::Virtual => None,
            ClockMode::Paced { scale } => {
                let wall = self.origin.elapsed().as_secs_f64() / scale;
                Some(self.origin_sim.after((wall * 1e9) as u64))
            }
        }
    }

    /// Block the calling thread until simulated instant `t` is due (paced mode). Sleeps
    /// for the bulk of the wait and yields for the last 100 µs so that short waits are
    /// accurate without taking a core from the threads that have work (many paced
    /// threads on few cores would otherwise delay each other by whole time slices);
    /// returns at once in virtual mode or when `t` is already past.
    pub fn wait_until(&self, t: SimTime) {
        let Some(deadline) = self.wall_deadline(t) else {
            return;
        };
        loop {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            let left = deadline - now;
            if left > Duration::from_micros(200) {
                std::thread::sleep(left - Duration::from_micros(100));
            } else {
                std::thread::yield_now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_modes() {
        assert_eq!(ClockMode::parse("virtual"), Some(ClockMode::Virtual));
        assert_eq!(
            ClockMode::parse("paced"),
            Some(ClockMode::Paced { scale: 1.0 })
        );
        assert_eq!(
            ClockMode::parse("paced:0.5"),
            Some(ClockMode::Paced { scale: 0.5 })
        );
        assert_eq!(ClockMode::parse("paced:-1"), None);
        assert_eq!(ClockMode::parse("fast"), None);
    }

    #[test]
    fn virtual_never_waits() {
        let p = Pacer::new(ClockMode::Virtual, SimTime::ZERO);
        let t0 = Instant::now();
        p.wait_until(SimTime(10_000_000_000));
        assert!(t0.elapsed() < Duration::from_millis(50));
        assert_eq!(p.now_sim(), None);
    }
}
