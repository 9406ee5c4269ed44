//! The two clock modes of docs/architecture.md: **virtual** (the simulated clock jumps; runs are as
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

    /// Block the calling thread until simulated instant `t` is due (paced mode); returns
    /// at once in virtual mode or when `t` is already past.
    ///
    /// Sleeps until [`SLEEP_MARGIN`] before the deadline, then yields the core until it:
    /// short device waits (a 100 µs flash read) stay accurate to a few microseconds,
    /// yet a thread waiting for the device leaves the core to threads with work (many
    /// paced threads on few cores would otherwise spin each other out of time slices,
    /// and a benchmark would measure the host's cores instead of the device). On Linux
    /// the thread's timer slack is lowered once to 1 ns, so that a sleep ends within
    /// tens of microseconds of its target instead of the default ~50–80 µs late.
    pub fn wait_until(&self, t: SimTime) {
        let Some(deadline) = self.wall_deadline(t) else {
            return;
        };
        precise_timer_slack();
        loop {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            let left = deadline - now;
            if left > SLEEP_MARGIN {
                std::thread::sleep(left - SLEEP_MARGIN);
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// How long before a paced deadline a waiting thread stops sleeping and yields instead:
/// more than a sleep's typical lateness once the timer slack is 1 ns (measured ~35–45 µs
/// on a virtual machine, p99), so the deadline itself is rarely overshot.
#[cfg(target_os = "linux")]
pub const SLEEP_MARGIN: Duration = Duration::from_micros(50);
/// How long before a paced deadline a waiting thread stops sleeping and yields instead
/// (the default timer slack of other systems is not adjusted).
#[cfg(not(target_os = "linux"))]
pub const SLEEP_MARGIN: Duration = Duration::from_micros(100);

/// Lower this thread's timer slack to 1 ns, once per thread (Linux only).
fn precise_timer_slack() {
    #[cfg(target_os = "linux")]
    {
        thread_local! {
            static DONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        }
        DONE.with(|d| {
            if !d.get() {
                d.set(true);
                // SAFETY: PR_SET_TIMERSLACK takes plain integers (no pointers) and only
                // changes the calling thread's timer slack, a scheduling hint; it cannot
                // affect memory safety. On failure (e.g. an old kernel) the default slack
                // stays and waits are merely less precise, so the result is ignored.
                let _ = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1u64, 0u64, 0u64, 0u64) };
            }
        });
    }
}

/// CPU time (user + system) the calling thread has used, in seconds.
pub fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a pointer to a live local;
    // CLOCK_THREAD_CPUTIME_ID is always supported on Linux. On failure `ts` stays zero.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_cpu_time_grows_with_work_not_with_sleep() {
        let t0 = thread_cpu_s();
        let mut x = 1u64;
        let w0 = std::time::Instant::now();
        while w0.elapsed() < std::time::Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let t1 = thread_cpu_s();
        assert!(t1 > t0, "busy work used no CPU time");
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(thread_cpu_s() - t1 < 0.04, "sleeping counted as CPU time");
    }

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
        p.wait_until(SimTime::from_ns(10_000_000_000));
        assert!(t0.elapsed() < Duration::from_millis(50));
        assert_eq!(p.now_sim(), None);
    }

    #[test]
    fn paced_waits_end_at_the_deadline_never_before() {
        // A wait never ends before its deadline (every wait of every round). How late
        // it ends depends on the machine: the median wait of a round ends within 200 µs
        // of its deadline (typically a few µs), but a loaded 2-core machine (a test
        // suite beside compilers) can deschedule a whole round. So up to five rounds:
        // one with a median under 200 µs passes, and a pacer that is late by design (a
        // coarse sleep or poll) fails all five.
        let mut medians = Vec::new();
        for _round in 0..5 {
            let p = Pacer::new(ClockMode::Paced { scale: 1.0 }, SimTime::ZERO);
            let mut late = Vec::new();
            for i in 1..=200u64 {
                // Waits from 30 µs to 600 µs, the range of flash reads and programs.
                let t = p
                    .now_sim()
                    .unwrap_or(SimTime::ZERO)
                    .after(30_000 + i * 3_000);
                p.wait_until(t);
                let now = p.now_sim().unwrap_or(SimTime::ZERO);
                assert!(now >= t, "woke {} ns early", t.ns() - now.ns());
                late.push(now.ns() - t.ns());
            }
            late.sort_unstable();
            let median = late[late.len() / 2];
            if median < 200_000 {
                return;
            }
            medians.push(median);
        }
        panic!("median lateness of every round at or above 200 µs: {medians:?} ns");
    }
}
