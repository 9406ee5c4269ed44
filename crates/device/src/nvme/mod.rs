//! The queue machinery of the command interface (docs/architecture.md, "command interface (the NVMe
//! boundary)"): the host submits typed [`Command`]s on queue pairs, the controller
//! executes them over the FTL block device, and each comes back as a typed
//! [`Completion`]. The vocabulary (commands, statuses, payloads, accounting) is in
//! [`crate::command`]; this module owns the queues and the executor.
//!
//! What it realizes:
//! * OX's NVMe front end (batch-io §7.1, §7.1.1): host and controller are decoupled by
//!   pairs of submission and completion queues.
//!
//! Where things are:
//! * `mod.rs`: queue pairs, submission, round-robin processing, polling, and the
//!   accounting around each command ([`NvmeDevice`]).
//! * `run.rs`: the dispatch from a command to its executor (the one place a new command
//!   variant is wired in), the admin and in-storage session commands, and the argument
//!   checks shared by the families.
//! * `io.rs`: block I/O (Read, Write, Trim, Flush) and the batch interface (FlushBatch,
//!   ReadLpids).
//! * `index.rs`: the FLIXR registry and index-read commands and the in-SSD B+tree.
//!
//! Choices made here:
//! * One `match` dispatches commands to the block device, whose methods model each
//!   command's timing (block.rs, shared with the workload engine).
//! * Queue pairs: at most [`MAX_QUEUE_PAIRS`], ids 1..=64, a freed id is reused. NVMe's
//!   admin queue 0 is not modeled separately: Identify and Get Log Page are accepted on
//!   every pair. A pair's depth (1..=[`MAX_QUEUE_DEPTH`]) bounds the commands outstanding
//!   on it, submitted and not yet reaped by [`NvmeDevice::poll`]; so a completion queue
//!   never overflows, and command ids (per pair, counting up and wrapping at 2^16) are
//!   unique among outstanding commands. A full pair refuses a submission with
//!   [`Status::QueueFull`]; NVMe has no such status, because a host driver tracks the
//!   queue head itself, so it is reported as "Command Interrupted" (0x21: retry later).
//! * Arbitration (issue 30: commands served in modeled-arrival order):
//!   [`NvmeDevice::process`] executes pending commands one at a time in the order of
//!   their modeled arrival (submission instant), whatever order the host code submitted
//!   them in; a pair's commands stay in submission order (a submission queue is FIFO:
//!   only its head can be fetched). Among heads that arrived at the same instant, NVMe's
//!   arbitration picks: round robin across pairs (the default, one command per pair per
//!   turn), or weighted round robin with an urgent class ([`Arbitration`],
//!   [`QueuePriority`]; NVMe 2.0 §3.4.4): urgent pairs first, then high, medium and low
//!   in proportion to their weights. The model's front end fetches every command on
//!   arrival (the firmware's per-command time, `cpu.command_us`, is a core resource
//!   booked in arrival order), so arbitration decides only among simultaneous
//!   arrivals. The execution order decides what a command sees; its modeled times come
//!   from the resources it reserves from its own arrival, and every resource places it
//!   in the earliest idle interval that holds it (csd-sim's calendar), so commands
//!   overlap in simulated time and an early arrival executed later is not queued
//!   behind later arrivals.
//! * Batch visibility: a command runs to its end before the next starts, so a read
//!   concurrent with a batch sees none or all of it, the empty or the full time-ordered
//!   prefix. This meets the rules (a)-(d) of batch-io §3.1.
//! * Bad input (an LBA out of range, zero blocks, data that is not whole LBAs, a transfer
//!   over MDTS, a malformed DESC) gets an error status, completes at its submission
//!   instant with zero accounting, and changes nothing: the FTL checks its arguments
//!   before acting and the controller undoes the staging of a refused command.
//! * Transfer limit: Read, Write and ReadLpids move at most MDTS blocks (the FTL's
//!   `mdts_sectors`); larger ones get Invalid Field, as NVMe prescribes. This also bounds
//!   the buffer a read allocates. A batch is bounded by the batch page limit instead.
//! * Deleting a pair aborts its pending commands unexecuted and drops completions not
//!   reaped.
//! * Accounting: the flash array's and the controller's counters are read around each
//!   command ([`Accounting`]); in-storage sessions advance in the background up to the
//!   command's arrival first, and that work is not charged to the command.

mod index;
mod io;
mod run;
#[cfg(test)]
mod tests;

use crate::ahead::CrcAhead;
use crate::block::BlockDevice;
use crate::command::{Accounting, Cid, Command, Completion, Payload, QueueId, Status};
use crate::flixr::{DEFAULT_INDEX_CACHE_BYTES, Flixr};
use crate::isp::Runtime;
use crate::ssd_btree::SsdBtree;
use crate::workload::IoTarget;
use csd_ftl::Ftl;
use csd_sim::SimTime;
use csd_sim::events::{ResourceId, Resources};
use std::collections::VecDeque;

/// The device's resources, for the event core to book.
impl Resources for NvmeDevice {
    fn reserve(&mut self, id: ResourceId, arrival: SimTime, dur_ns: u64) -> SimTime {
        self.reserve_now(id, arrival, dur_ns).unwrap_or_else(|| {
            debug_assert!(false, "the device has no resource {id:?}");
            arrival
        })
    }
}

/// Queue pairs one device offers.
pub const MAX_QUEUE_PAIRS: u16 = 64;
/// Largest depth of a queue pair (NVMe's maximum queue entries).
pub const MAX_QUEUE_DEPTH: u32 = 65_535;

struct Submission {
    cid: Cid,
    cmd: Command,
    at: SimTime,
}

/// Arbitration among submission queues (NVMe 2.0 §3.4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Arbitration {
    /// Round robin: one command per pair per turn (NVMe's default).
    #[default]
    RoundRobin,
    /// Weighted round robin with an urgent class: urgent pairs strictly first, then
    /// high, medium and low pairs, each class taking up to its weight in commands per
    /// round (weights of at least 1).
    Weighted {
        /// Commands a high-priority class takes per round.
        high: u8,
        /// Commands a medium-priority class takes per round.
        medium: u8,
        /// Commands a low-priority class takes per round.
        low: u8,
    },
}

/// The priority class of a queue pair under weighted round robin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum QueuePriority {
    /// Served before every other class.
    Urgent,
    /// Weighted: high.
    High,
    /// Weighted: medium (the class of a pair created without one).
    #[default]
    Medium,
    /// Weighted: low.
    Low,
}

struct QueuePair {
    depth: u32,
    priority: QueuePriority,
    next_cid: u16,
    sq: VecDeque<Submission>,
    cq: VecDeque<Completion>,
}

/// A device behind the NVMe-style command interface: queue pairs in front of the
/// controller and the FTL block device.
pub struct NvmeDevice {
    dev: BlockDevice,
    isp: Runtime,
    flixr: Flixr,
    ssd_btree: SsdBtree,
    /// Slot `i` holds queue pair `i + 1`.
    queues: Vec<Option<QueuePair>>,
    /// The slot the round robin serves next.
    next: usize,
    /// How simultaneous arrivals are ordered.
    arbitration: Arbitration,
    /// Commands each weighted class (high, medium, low) may still take this round.
    credits: [u8; 3],
    /// Commands executed so far: the event core's order key among equal arrivals.
    executed: u64,
    /// Read payloads the host gave back ([`NvmeDevice::give_back`]), reused by later
    /// reads of the same length.
    spare: Vec<Vec<u8>>,
    /// CRCs of the units a stream of `ReadPinned` reads asks for next, hashed on the
    /// host's pool (see [`crate::ahead::CrcAhead`]).
    crc_ahead: CrcAhead,
}

/// Read payloads [`NvmeDevice::give_back`] keeps at most (an in-host scan holds about
/// a dozen of its reads' payloads at once).
const SPARE_READ_BUFFERS: usize = 16;

impl NvmeDevice {
    /// A device over `ftl`.
    pub fn new(ftl: Ftl) -> NvmeDevice {
        NvmeDevice::from_block(BlockDevice::new(ftl))
    }

    /// A device over an existing block device (its controller state carries on).
    pub fn from_block(dev: BlockDevice) -> NvmeDevice {
        let cfg = dev.ftl().nand().config();
        let isp = Runtime::new(cfg.isp, cfg.geometry.page_size as u64);
        let mut dev = dev;
        let mut flixr = Flixr::new(&dev, DEFAULT_INDEX_CACHE_BYTES);
        // FLIXR §4.6: entries whose redo bit is still 0 after a crash are rebuilt now.
        flixr.recover(&mut dev);
        NvmeDevice {
            dev,
            isp,
            flixr,
            ssd_btree: SsdBtree::default(),
            queues: Vec::new(),
            next: 0,
            arbitration: Arbitration::RoundRobin,
            credits: [0; 3],
            executed: 0,
            spare: Vec::new(),
            crc_ahead: CrcAhead::new(csd_query::scan_threads()),
        }
    }

    /// Units of `ReadPinned` reads whose CRCs were hashed on the host's pool ahead of
    /// their read and taken by it, since this device was made (an emulator figure: the
    /// reads' results and modeled figures are the same either way).
    pub fn crc_checks_ahead(&self) -> u64 {
        self.crc_ahead.taken()
    }

    /// Units of `ReadPinned` streams whose CRCs were hashed ahead, taken by a read or not
    /// (a stream that breaks off drops its windows: the units no thread had started are
    /// not hashed any more).
    #[doc(hidden)]
    pub fn crc_units_hashed_ahead(&self) -> u64 {
        self.crc_ahead.hashed()
    }

    /// Hashes on the calling thread what the pool has not started of the CRCs hashed
    /// ahead of a `ReadPinned` stream (for tests: the next read then takes every unit
    /// the pool would have checked by then, whatever the OS's scheduling).
    #[doc(hidden)]
    pub fn settle_crc_ahead(&self) {
        self.crc_ahead.settle();
    }

    /// Takes back a Read's payload the host is done with, for a later Read of the same
    /// length to fill instead of a new, zeroed allocation (zeroing 512 KiB per read
    /// was 11% of a one-shot in-host scan's stepping thread). Only exactly the bytes a
    /// Read returns are reused: a successful Read writes every byte of its payload
    /// (unwritten LBAs as zeros), so nothing of the earlier contents can show. Buffers
    /// over MDTS, or past [`SPARE_READ_BUFFERS`], are dropped.
    pub fn give_back(&mut self, buf: Vec<u8>) {
        let max = self.mdts() as usize * self.dev.ftl().lba_size();
        if self.spare.len() < SPARE_READ_BUFFERS && !buf.is_empty() && buf.len() <= max {
            self.spare.push(buf);
        }
    }

    /// A payload of `len` bytes for a Read to fill: a buffer given back of that length,
    /// else a new one.
    fn read_buffer(&mut self, len: usize) -> Vec<u8> {
        match self.spare.iter().rposition(|b| b.len() == len) {
            Some(i) => self.spare.swap_remove(i),
            None => vec![0u8; len],
        }
    }

    /// The block device, for device-side inspection (host code uses commands).
    pub fn block(&self) -> &BlockDevice {
        &self.dev
    }

    /// The block device, mutably (fault injection, power cuts).
    pub fn block_mut(&mut self) -> &mut BlockDevice {
        &mut self.dev
    }

    /// Release the memory pages of an image that scans read from this process
    /// ([`csd_nand::Nand::release_read_pages`]): between scans of a one-shot command, so
    /// that its resident set is one scan's, not the sum of them. No modeled effect.
    pub fn release_read_pages(&mut self) {
        self.dev.ftl_mut().nand_mut().release_read_pages();
    }

    /// The FLIXR firmware state (registries, index cache, counters).
    pub fn flixr(&self) -> &Flixr {
        &self.flixr
    }

    /// The in-SSD B+tree firmware state (indexes, node cache, counters).
    pub fn ssd_btree(&self) -> &SsdBtree {
        &self.ssd_btree
    }

    /// Resize the in-SSD B+tree node cache in controller DRAM (it starts empty again).
    pub fn set_node_cache_bytes(&mut self, bytes: u64) {
        self.ssd_btree.set_cache_bytes(bytes);
    }

    /// Set what the in-SSD B+tree keeps of its nodes in controller DRAM.
    pub fn set_node_cache(&mut self, cache: crate::ssd_btree::NodeCache) {
        self.ssd_btree.set_cache(cache);
    }

    /// Resize the FLIXR index cache in controller DRAM (it starts empty again).
    pub fn set_index_cache_bytes(&mut self, bytes: u64) {
        self.flixr.set_cache_bytes(&self.dev, bytes);
    }

    /// Give the block device back; pending commands and completions are dropped.
    pub fn into_block(self) -> BlockDevice {
        self.dev
    }

    /// Choose the arbitration among submission queues (round robin by default).
    pub fn set_arbitration(&mut self, arbitration: Arbitration) -> Result<(), Status> {
        if let Arbitration::Weighted { high, medium, low } = arbitration
            && [high, medium, low].contains(&0)
        {
            return Err(Status::InvalidField(format!(
                "weighted round robin weights must be at least 1 (got high {high}, medium {medium}, low {low})"
            )));
        }
        self.arbitration = arbitration;
        self.credits = [0; 3];
        Ok(())
    }

    /// Create a queue pair of `depth` (1..=[`MAX_QUEUE_DEPTH`]) outstanding commands.
    pub fn create_queue_pair(&mut self, depth: u32) -> Result<QueueId, Status> {
        self.create_queue_pair_with(depth, QueuePriority::default())
    }

    /// Create a queue pair of `depth` outstanding commands in priority class `priority`
    /// (it matters under [`Arbitration::Weighted`]).
    pub fn create_queue_pair_with(
        &mut self,
        depth: u32,
        priority: QueuePriority,
    ) -> Result<QueueId, Status> {
        if depth == 0 || depth > MAX_QUEUE_DEPTH {
            return Err(Status::InvalidQueueSize(format!(
                "depth {depth} is outside 1..={MAX_QUEUE_DEPTH}"
            )));
        }
        let slot = match self.queues.iter().position(Option::is_none) {
            Some(i) => i,
            None if self.queues.len() < MAX_QUEUE_PAIRS as usize => {
                self.queues.push(None);
                self.queues.len() - 1
            }
            None => {
                return Err(Status::InvalidQueueId(format!(
                    "all {MAX_QUEUE_PAIRS} queue pairs are in use: delete one first"
                )));
            }
        };
        self.queues[slot] = Some(QueuePair {
            depth,
            priority,
            next_cid: 0,
            sq: VecDeque::new(),
            cq: VecDeque::new(),
        });
        Ok(QueueId(slot as u16 + 1))
    }

    /// Delete a queue pair. Its pending commands are aborted unexecuted (their number is
    /// returned) and completions not yet polled are dropped.
    pub fn delete_queue_pair(&mut self, qid: QueueId) -> Result<usize, Status> {
        let slot = Self::slot(qid);
        match slot
            .and_then(|s| self.queues.get_mut(s))
            .and_then(Option::take)
        {
            Some(q) => Ok(q.sq.len()),
            None => Err(Self::no_queue(qid)),
        }
    }

    /// Submit `cmd` on queue pair `qid` at host time `at`; returns its command id. Fails
    /// if the pair does not exist or is full.
    pub fn submit(&mut self, qid: QueueId, cmd: Command, at: SimTime) -> Result<Cid, Status> {
        let q = self.queue(qid)?;
        if q.sq.len() + q.cq.len() >= q.depth as usize {
            return Err(Status::QueueFull {
                qid: qid.0,
                depth: q.depth,
            });
        }
        let cid = Cid(q.next_cid);
        q.next_cid = q.next_cid.wrapping_add(1);
        q.sq.push_back(Submission { cid, cmd, at });
        Ok(cid)
    }

    /// Execute every pending command, one at a time, in modeled-arrival order (ties by
    /// the arbitration); returns how many ran. Their completions wait in the pairs'
    /// completion queues.
    pub fn process(&mut self) -> usize {
        let mut ran = 0;
        while let Some(slot) = self.arbitrate() {
            let Some(sub) = self.queues[slot].as_mut().and_then(|q| q.sq.pop_front()) else {
                break;
            };
            let c = self.execute(sub);
            if let Some(q) = self.queues[slot].as_mut() {
                q.cq.push_back(c);
            }
            ran += 1;
        }
        ran
    }

    /// The slot whose head command is served next: the earliest arrival; among heads
    /// that arrived at the same instant, the arbitration's choice.
    fn arbitrate(&mut self) -> Option<usize> {
        let n = self.queues.len();
        let head = |q: &Option<QueuePair>| q.as_ref().and_then(|q| q.sq.front()).map(|s| s.at);
        // One pending head (a synchronous host): no choice to make, and no comparison of
        // an instant the event core may not have fixed yet.
        let mut heads = (0..n).filter(|&i| head(&self.queues[i]).is_some());
        if let (Some(only), None) = (heads.next(), heads.next())
            && matches!(self.arbitration, Arbitration::RoundRobin)
        {
            self.next = (only + 1) % n;
            return Some(only);
        }
        let first = self.queues.iter().filter_map(head).min()?;
        // Candidates in round-robin order from `next`.
        let tied = (0..n)
            .map(|k| (self.next + k) % n)
            .filter(|&i| head(&self.queues[i]) == Some(first));
        let pick = match self.arbitration {
            Arbitration::RoundRobin => tied.take(1).next(),
            Arbitration::Weighted { high, medium, low } => {
                let tied: Vec<usize> = tied.collect();
                let class = |i: usize| {
                    self.queues[i]
                        .as_ref()
                        .map_or(QueuePriority::Low, |q| q.priority)
                };
                if let Some(&i) = tied.iter().find(|&&i| class(i) == QueuePriority::Urgent) {
                    Some(i)
                } else {
                    let weights = [high, medium, low];
                    let present = |c: usize| tied.iter().any(|&i| class(i) as usize == c + 1);
                    if !(0..3).any(|c| present(c) && self.credits[c] > 0) {
                        self.credits = weights;
                    }
                    let c = (0..3).find(|&c| present(c) && self.credits[c] > 0)?;
                    self.credits[c] -= 1;
                    tied.into_iter().find(|&i| class(i) as usize == c + 1)
                }
            }
        };
        if let Some(i) = pick {
            self.next = (i + 1) % n;
        }
        pick
    }

    /// Take the oldest completion of queue pair `qid` (`None` if there is none, or no
    /// such pair).
    pub fn poll(&mut self, qid: QueueId) -> Option<Completion> {
        self.queue(qid).ok()?.cq.pop_front()
    }

    /// Book resource (or pool) `id` for `ns` from `at`, now: the event core's booking
    /// ([`csd_sim::events::Resources`]); `None` for a resource the device does not have.
    pub fn reserve_now(&mut self, id: ResourceId, at: SimTime, ns: u64) -> Option<SimTime> {
        self.dev.reserve_now(id, at, ns)
    }

    /// Of `instants`, the earliest (the first of equal ones) and its final value, booking
    /// on the event core only as far as needed ([`csd_sim::events::earliest`]). While
    /// in-storage sessions are open, their background steps issued before it are recorded
    /// first (they may arrive before it at a resource). By value outside a recording.
    pub fn earliest(&mut self, instants: &[SimTime]) -> Option<(usize, SimTime)> {
        if csd_sim::events::recording() && self.isp.open_sessions() > 0 {
            return self.isp.advance_events(&mut self.dev, instants);
        }
        csd_sim::events::earliest(instants, self)
    }

    /// Of `instants`, the earliest and its final value if it ends by `bound`, booking no
    /// stage that arrives after `bound` ([`csd_sim::events::earliest_by`]; sessions'
    /// steps issued by then are recorded first).
    pub fn earliest_by(
        &mut self,
        instants: &[SimTime],
        bound: SimTime,
    ) -> Option<(usize, SimTime)> {
        if csd_sim::events::recording() && self.isp.open_sessions() > 0 {
            self.isp.advance_events(&mut self.dev, &[bound]);
        }
        csd_sim::events::earliest_by(instants, bound, self)
    }

    /// The final value of `t`: the host waits for it ([`NvmeDevice::earliest`] of one).
    pub fn resolve(&mut self, t: SimTime) -> SimTime {
        if t.is_final() {
            return t;
        }
        self.earliest(&[t]).map_or(t, |(_, v)| v)
    }

    /// Whether `t` ends by `bound` (a final instant), booking only stages that arrive by
    /// `bound` ([`csd_sim::events::at_or_before`]; sessions' steps issued by then are
    /// recorded first).
    pub fn at_or_before(&mut self, t: SimTime, bound: SimTime) -> bool {
        if t.is_final() {
            return t.ns() <= bound.ns();
        }
        if csd_sim::events::recording() && self.isp.open_sessions() > 0 {
            self.isp.advance_events(&mut self.dev, &[bound]);
        }
        csd_sim::events::at_or_before(t, bound, self)
    }

    /// Replace every instant the device keeps between commands (the FTL's, and those of
    /// commands queued or completed but not polled) by `settle(instant)`: the event core
    /// renames them when it compacts and fixes them when a recording ends; and those of
    /// open in-storage sessions.
    pub fn settle_instants(&mut self, settle: &mut dyn FnMut(SimTime) -> SimTime) {
        self.isp.settle_instants(settle);
        self.dev.settle_instants(settle);
        for q in self.queues.iter_mut().flatten() {
            for sub in q.sq.iter_mut() {
                sub.at = settle(sub.at);
            }
            for c in q.cq.iter_mut() {
                c.acct.submitted = settle(c.acct.submitted);
                c.acct.completed = settle(c.acct.completed);
            }
        }
    }

    fn slot(qid: QueueId) -> Option<usize> {
        (qid.0 as usize).checked_sub(1)
    }

    fn no_queue(qid: QueueId) -> Status {
        Status::InvalidQueueId(format!(
            "queue pair {} does not exist (never created, or deleted)",
            qid.0
        ))
    }

    fn queue(&mut self, qid: QueueId) -> Result<&mut QueuePair, Status> {
        Self::slot(qid)
            .and_then(|s| self.queues.get_mut(s))
            .and_then(Option::as_mut)
            .ok_or_else(|| Self::no_queue(qid))
    }

    /// Run one command and account for it.
    fn execute(&mut self, sub: Submission) -> Completion {
        // In-storage sessions run in the background up to this command's arrival; their
        // work is not charged to the command.
        if self.isp.open_sessions() > 0 {
            // On the event core this also fixes the submission instant.
            self.isp.advance(&mut self.dev, sub.at);
        }
        csd_sim::events::set_order(self.executed);
        self.executed += 1;
        let nand0 = *self.dev.ftl().nand().stats();
        let ctrl0 = self.dev.controller().counters();
        let (status, payload, done) = match self.run(sub.cmd, sub.at) {
            Ok((payload, done)) => (Status::Success, payload, done),
            Err((status, done)) => (status, Payload::None, done),
        };
        let nand1 = self.dev.ftl().nand().stats();
        let ctrl1 = self.dev.controller().counters();
        let done = done.max(sub.at);
        Completion {
            cid: sub.cid,
            status,
            payload,
            acct: Accounting {
                submitted: sub.at,
                completed: done,
                latency_ns: done.since(sub.at),
                flash_reads: nand1.page_reads.saturating_sub(nand0.page_reads),
                flash_programs: nand1.programs.saturating_sub(nand0.programs),
                flash_erases: nand1.erases.saturating_sub(nand0.erases),
                host_link_bytes: ctrl1.host_link_bytes.saturating_sub(ctrl0.host_link_bytes),
                dram_bytes: ctrl1.dram_bytes.saturating_sub(ctrl0.dram_bytes),
            },
        }
    }
}
