//! The host side of the time model (docs/architecture.md "Time"; batch-io §8.1.2 and §8.3.1): one
//! host thread whose CPU work is charged as cycles of a cost table, and an asynchronous
//! I/O queue of bounded depth in front of the device.
//!
//! Choices:
//! * The store runs on one host thread (the paper's single-threaded BwTree). Its CPU is a
//!   clock that every piece of host work (an operation's tree walk, a page copied into the
//!   write buffer, a command submitted or completed, a page moved by host GC, a mapping
//!   entry checkpointed) advances by `cycles / host clock`. The cycle counts are
//!   [`HostCosts`]; their defaults are estimates for a 3.5 GHz Xeon of the paper's kind
//!   (§8.1.1), not fitted to the paper's figures, and can be changed per run.
//! * I/O is asynchronous (LLAMA's I/O queue, §8.1.2: "large enough that the queue is never
//!   starved"): a command is submitted at the thread's clock and completes at the modeled
//!   instant the device returns; the thread goes on. At most `depth` commands are in
//!   flight; a submission beyond that waits for the earliest completion. An operation that
//!   misses the cache waits for its page (its latency includes the read), while the
//!   thread starts the next operation, so up to `depth` operations overlap their reads.
//! * Functional execution is in program order (the emulated device executes a command
//!   when it is submitted), so what an operation sees is exactly the sequential result;
//!   only modeled time overlaps.
//! * CPU time is attributed to a [`Work`] class, so that the share spent in host GC
//!   (batch-io Figure 15b) is a counter, not an estimate.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use csd_sim::SimTime;

/// Host CPU cycles per unit of work.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostCosts {
    /// Host clock in MHz (paper: Xeon E5-1620, 3.5 GHz).
    pub clock_mhz: f64,
    /// Per operation: dispatch, key handling, result (YCSB client included).
    pub op: u64,
    /// Per tree level visited (binary search of a 4 KiB page, cache lookup).
    pub level: u64,
    /// Per entry written or removed in a leaf.
    pub modify: u64,
    /// Per page split (allocation, moving half the entries, parent update).
    pub split: u64,
    /// Per page brought into the cache (frame, eviction, hash table).
    pub cache_fill: u64,
    /// Per page copied into the write buffer (4 KiB copy and CRC).
    pub buffer_page: u64,
    /// Per command submitted to the device (driver and NVMe-oF/TCP host stack).
    pub submit: u64,
    /// Per command completed.
    pub complete: u64,
    /// Per page examined by host GC (mapping lookup for liveness).
    pub gc_examine: u64,
    /// Per page moved by host GC (copy into the write buffer, mapping update).
    pub gc_move: u64,
    /// Per mapping-table entry written by a host checkpoint.
    pub checkpoint_entry: u64,
    /// Per entry returned by a range scan.
    pub scan_entry: u64,
}

impl Default for HostCosts {
    fn default() -> Self {
        HostCosts {
            clock_mhz: 3500.0,
            op: 1200,
            level: 350,
            modify: 300,
            split: 6000,
            cache_fill: 1500,
            buffer_page: 1800,
            submit: 3500,
            complete: 1750,
            gc_examine: 150,
            gc_move: 2500,
            checkpoint_entry: 6,
            scan_entry: 60,
        }
    }
}

impl HostCosts {
    /// Nanoseconds of `cycles`.
    pub fn ns(&self, cycles: u64) -> u64 {
        (cycles as f64 * 1e3 / self.clock_mhz).ceil() as u64
    }
}

/// What host CPU time was spent on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// User operations (gets, puts, scans) and their I/O.
    User,
    /// Host garbage collection (block interface).
    Gc,
    /// Host checkpoints (block interface).
    Checkpoint,
}

/// Host CPU nanoseconds per [`Work`] class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuSplit {
    /// User operations.
    pub user_ns: u64,
    /// Host GC.
    pub gc_ns: u64,
    /// Host checkpoints.
    pub checkpoint_ns: u64,
}

impl CpuSplit {
    /// All of it.
    pub fn total_ns(&self) -> u64 {
        self.user_ns + self.gc_ns + self.checkpoint_ns
    }
}

/// The host thread's clock and the I/O queue.
#[derive(Debug, Clone)]
pub struct HostClock {
    /// Cost table.
    pub costs: HostCosts,
    /// When the thread is next free.
    pub cpu: SimTime,
    depth: usize,
    inflight: BinaryHeap<Reverse<u64>>,
    /// Completions of the commands in flight while the event core records (instants it
    /// may not have fixed yet: see `Io::submit`).
    pub(crate) pending: Vec<SimTime>,
    /// CPU time per class.
    pub split: CpuSplit,
    /// Longest wait of the thread for a free queue slot, summed (ns).
    pub queue_full_wait_ns: u64,
}

impl HostClock {
    /// A clock starting at `now` with an I/O queue of `depth` (at least 1).
    pub fn new(costs: HostCosts, depth: usize, now: SimTime) -> HostClock {
        HostClock {
            costs,
            cpu: now,
            depth: depth.max(1),
            inflight: BinaryHeap::new(),
            pending: Vec::new(),
            split: CpuSplit::default(),
            queue_full_wait_ns: 0,
        }
    }

    /// Charge `cycles` of `work` to the thread; an operation's own clock `t` moves too.
    pub fn charge(&mut self, work: Work, cycles: u64, t: &mut SimTime) {
        let ns = self.costs.ns(cycles);
        match work {
            Work::User => self.split.user_ns += ns,
            Work::Gc => self.split.gc_ns += ns,
            Work::Checkpoint => self.split.checkpoint_ns += ns,
        }
        self.cpu = self.cpu.after(ns);
        *t = t.after(ns);
    }

    /// A queue slot for a command to submit no earlier than `at`: the instant it can go
    /// (later than `at` when `depth` commands are in flight; the thread waits then).
    pub fn slot(&mut self, at: SimTime) -> SimTime {
        while self.inflight.peek().is_some_and(|r| r.0 <= at.ns()) {
            self.inflight.pop();
        }
        if self.inflight.len() < self.depth {
            return at;
        }
        let Some(Reverse(c)) = self.inflight.pop() else {
            return at;
        };
        if c > self.cpu.ns() {
            self.queue_full_wait_ns += c - self.cpu.ns();
            self.cpu = SimTime::from_ns(c);
        }
        SimTime::from_ns(c)
    }

    /// A command submitted earlier completes at `done`: it holds its slot until then.
    pub fn hold(&mut self, done: SimTime) {
        if csd_sim::events::recording() {
            self.pending.push(done);
        } else {
            self.inflight.push(Reverse(done.ns()));
        }
    }

    /// While the event core records: the completions of every command that may be in
    /// flight, as instants (those held before the recording began come along).
    pub(crate) fn pending(&mut self) -> &mut Vec<SimTime> {
        self.pending.extend(
            self.inflight
                .drain()
                .map(|Reverse(ns)| SimTime::from_ns(ns)),
        );
        &mut self.pending
    }

    /// Commands in flight at the thread's clock (by provisional value while the event
    /// core records).
    pub fn in_flight(&self) -> usize {
        self.inflight.iter().filter(|r| r.0 > self.cpu.ns()).count()
            + self
                .pending
                .iter()
                .filter(|t| t.ns() > self.cpu.ns())
                .count()
    }

    /// The latest completion of any command in flight (or the CPU clock): a join of
    /// instants the event core may not have fixed yet.
    pub fn drained(&self) -> SimTime {
        let calendar = self
            .inflight
            .iter()
            .map(|r| SimTime::from_ns(r.0))
            .max()
            .unwrap_or(self.cpu)
            .max(self.cpu);
        SimTime::latest(self.pending.iter().copied()).map_or(calendar, |p| p.max(calendar))
    }

    /// Replace the instants the clock holds by `settle(instant)` (the event core's
    /// compaction and end of recording).
    pub(crate) fn settle_instants(&mut self, settle: &mut dyn FnMut(SimTime) -> SimTime) {
        self.cpu = settle(self.cpu);
        for t in &mut self.pending {
            *t = settle(*t);
        }
    }

    /// Queue depth.
    pub fn depth(&self) -> usize {
        self.depth
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_depth_bounds_commands_in_flight() {
        let mut c = HostClock::new(HostCosts::default(), 2, SimTime::ZERO);
        assert_eq!(c.slot(SimTime::from_ns(0)), SimTime::from_ns(0));
        c.hold(SimTime::from_ns(100));
        assert_eq!(c.slot(SimTime::from_ns(0)), SimTime::from_ns(0));
        c.hold(SimTime::from_ns(50));
        // Full: the third waits for the earliest completion (50), and so does the thread.
        assert_eq!(c.slot(SimTime::from_ns(10)), SimTime::from_ns(50));
        assert_eq!(c.cpu, SimTime::from_ns(50));
        c.hold(SimTime::from_ns(200));
        assert_eq!(c.slot(SimTime::from_ns(300)), SimTime::from_ns(300));
        let mut t = SimTime::from_ns(0);
        c.charge(Work::Gc, 3500, &mut t);
        assert_eq!((t, c.split.gc_ns), (SimTime::from_ns(1000), 1000));
    }
}
