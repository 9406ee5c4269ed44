//! How busy the machine was with other work while a run took its wall-clock timestamps.
//!
//! The paper's §5 figures are wall-clock measurements on a machine running nothing else
//! (an 8-core i7 for eight workers). A paced run here shares its cores with whatever else
//! runs, and a throughput ratio a few percent from 1 (Figure 8(a) at 8 warehouses) can
//! flip when another process takes a core. So every run records what the rest of the
//! machine used during it, from the kernel's CPU accounting (Linux `/proc/stat` and
//! `/proc/self/stat`, both in clock ticks):
//!
//! * **others' CPU**: busy time of all CPUs less this process's own, in cores;
//! * **steal**: time the hypervisor ran something else on this machine's virtual CPUs, in
//!   cores.
//!
//! Both are averages over the run; a report prints them beside each figure so that a
//! reader can tell a quiet run from a contended one. Elsewhere than Linux (no `/proc`)
//! nothing is recorded. A virtual-time run's figures do not depend on either.

use std::time::Instant;

/// The kernel's CPU counters at one instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuSample {
    /// Ticks every CPU spent busy (user, nice, system, irq, softirq), summed.
    busy: u64,
    /// Ticks the hypervisor stole, summed over the CPUs.
    steal: u64,
    /// Ticks of every kind (idle and iowait included), summed over the CPUs.
    total: u64,
    /// This process's user + system ticks.
    own: u64,
    /// CPUs counted (`cpuN` lines).
    cpus: usize,
    at: Instant,
}

/// What the rest of the machine used between two [`CpuSample`]s, averaged over them.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Contention {
    /// Cores' worth of CPU that other processes used (0 on an otherwise idle machine).
    pub others_cores: f64,
    /// Cores' worth of time the hypervisor stole from this machine's CPUs.
    pub steal_cores: f64,
    /// CPUs of the machine.
    pub cpus: usize,
}

impl CpuSample {
    /// The counters now; `None` where `/proc` cannot be read or parsed.
    pub fn now() -> Option<CpuSample> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let own = std::fs::read_to_string("/proc/self/stat").ok()?;
        CpuSample::parse(&stat, &own, Instant::now())
    }

    /// A sample from the texts of `/proc/stat` and `/proc/self/stat`.
    fn parse(stat: &str, self_stat: &str, at: Instant) -> Option<CpuSample> {
        let cpu = stat.lines().find(|l| l.starts_with("cpu "))?;
        let f: Vec<u64> = cpu
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().ok())
            .collect::<Option<_>>()?;
        // user nice system idle iowait irq softirq steal [guest guest_nice]; guest time
        // is already inside user and nice.
        if f.len() < 8 {
            return None;
        }
        let busy = f[0] + f[1] + f[2] + f[5] + f[6];
        let total = f[..8].iter().sum();
        let cpus = stat
            .lines()
            .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
            .count();
        // The command name (field 2) is in parentheses and may hold spaces: fields are
        // counted after its closing parenthesis, where field 3 (state) comes first.
        let rest = &self_stat[self_stat.rfind(')')? + 1..];
        let g: Vec<&str> = rest.split_whitespace().collect();
        // utime and stime are fields 14 and 15, i.e. 11 and 12 after the state.
        let own = g.get(11)?.parse::<u64>().ok()? + g.get(12)?.parse::<u64>().ok()?;
        Some(CpuSample {
            busy,
            steal: f[7],
            total,
            own,
            cpus: cpus.max(1),
            at,
        })
    }

    /// What the rest of the machine used from `self` to `later`; `None` when no tick
    /// passed (a run too short for the counters) or the counters went backwards.
    pub fn until(&self, later: &CpuSample) -> Option<Contention> {
        let total = later.total.checked_sub(self.total)?;
        if total == 0 || later.at < self.at {
            return None;
        }
        let busy = later.busy.checked_sub(self.busy)?;
        let own = later.own.checked_sub(self.own)?;
        let steal = later.steal.checked_sub(self.steal)?;
        let cores = |ticks: u64| ticks as f64 / total as f64 * later.cpus as f64;
        Some(Contention {
            others_cores: cores(busy.saturating_sub(own)),
            steal_cores: cores(steal),
            cpus: later.cpus,
        })
    }
}

/// What the rest of the machine used from `before` (a [`CpuSample::now`] taken when the
/// run started) until now; `None` when either sample is missing or no tick passed.
pub fn since(before: Option<CpuSample>) -> Option<Contention> {
    before.zip(CpuSample::now()).and_then(|(a, b)| a.until(&b))
}

/// A table cell for a run's contention: its [`Display`](std::fmt::Display), or `-` when
/// it was not recorded.
pub fn cell(c: Option<Contention>) -> String {
    c.map_or_else(|| "-".to_string(), |c| c.to_string())
}

impl std::fmt::Display for Contention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.2} of {} cores (steal {:.2})",
            self.others_cores, self.cpus, self.steal_cores
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const STAT0: &str = "cpu  1000 10 500 8000 50 5 5 20 0 0\n\
        cpu0 500 5 250 4000 25 3 2 10 0 0\n\
        cpu1 500 5 250 4000 25 2 3 10 0 0\n\
        intr 12345\nctxt 999\n";
    // 400 ticks later over the 2 CPUs: 145 busy, 10 stolen, 245 idle.
    const STAT1: &str = "cpu  1100 10 545 8245 50 5 5 30 0 0\n\
        cpu0 550 5 273 4122 25 3 2 15 0 0\n\
        cpu1 550 5 272 4123 25 2 3 15 0 0\n";

    fn own(utime: u64, stime: u64) -> String {
        // A command name with a space and a parenthesis, as `/proc` may show it.
        format!(
            "4242 (csd (x) y) S 1 4242 4242 0 -1 4194304 100 0 0 0 {utime} {stime} 0 0 20 0 9 0"
        )
    }

    #[test]
    fn others_are_the_busy_ticks_less_our_own() {
        let t0 = Instant::now();
        let a = CpuSample::parse(STAT0, &own(300, 100), t0).expect("parses");
        assert_eq!((a.busy, a.steal, a.cpus, a.own), (1520, 20, 2, 400));
        let b =
            CpuSample::parse(STAT1, &own(345, 150), t0 + Duration::from_secs(2)).expect("parses");
        let c = a.until(&b).expect("ticks passed");
        // Busy +145, own +95: others 50 ticks of 400 over 2 CPUs; steal 10 of 400.
        assert_eq!(b.total - a.total, 400);
        assert_eq!(c.cpus, 2);
        assert!((c.others_cores - 0.25).abs() < 1e-12, "{c:?}");
        assert!((c.steal_cores - 0.05).abs() < 1e-12, "{c:?}");
        assert_eq!(format!("{c}"), "0.25 of 2 cores (steal 0.05)");
    }

    #[test]
    fn a_busy_process_of_our_own_is_not_counted_as_others() {
        let t0 = Instant::now();
        let a = CpuSample::parse(STAT0, &own(0, 0), t0).expect("parses");
        let b = CpuSample::parse(STAT1, &own(145, 0), t0).expect("parses");
        let c = a.until(&b).expect("ticks passed");
        assert_eq!(c.others_cores, 0.0);
        // More of our own than the machine's busy time (counters read at slightly
        // different instants) gives 0, not a wrap-around.
        let b = CpuSample::parse(STAT1, &own(500, 0), t0).expect("parses");
        assert_eq!(a.until(&b).expect("ticks passed").others_cores, 0.0);
    }

    #[test]
    fn unreadable_or_stalled_counters_give_nothing() {
        let t0 = Instant::now();
        assert!(CpuSample::parse("intr 1\n", &own(1, 1), t0).is_none());
        assert!(CpuSample::parse("cpu  1 2 3\n", &own(1, 1), t0).is_none());
        assert!(CpuSample::parse(STAT0, "4242 (csd) S 1 2", t0).is_none());
        assert!(CpuSample::parse(STAT0, "no parenthesis", t0).is_none());
        let a = CpuSample::parse(STAT0, &own(1, 1), t0).expect("parses");
        // No tick passed, and counters that went backwards.
        assert!(a.until(&a).is_none());
        let b = CpuSample::parse(STAT1, &own(1, 1), t0).expect("parses");
        assert!(b.until(&a).is_none());
    }

    #[test]
    fn this_machine_reads_its_own_counters() {
        // Linux CI and the dev machine have `/proc`; elsewhere `now` is `None`.
        if let Some(a) = CpuSample::now() {
            let spin = Instant::now();
            let mut x = 0u64;
            while spin.elapsed() < Duration::from_millis(50) {
                x = x.wrapping_add(std::hint::black_box(1));
            }
            std::hint::black_box(x);
            let b = CpuSample::now().expect("readable once readable");
            if let Some(c) = a.until(&b) {
                assert!(c.cpus >= 1);
                assert!(c.others_cores >= 0.0 && c.others_cores <= c.cpus as f64 + 1e-9);
                assert!(c.steal_cores >= 0.0);
            }
        }
    }
}
