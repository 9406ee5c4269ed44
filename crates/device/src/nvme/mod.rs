//! The queue machinery of the command interface (DESIGN.md, "command interface (the NVMe
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
//! * Arbitration: [`NvmeDevice::process`] executes pending commands one at a time, round
//!   robin across pairs (one command per pair per turn, NVMe's default arbitration), in
//!   submission order within a pair. The execution order decides what a command sees;
//!   its modeled times come from the resources it reserves from its own submission
//!   instant, so commands still overlap in simulated time.
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

use crate::block::BlockDevice;
use crate::command::{Accounting, Cid, Command, Completion, Payload, QueueId, Status};
use crate::flixr::{DEFAULT_INDEX_CACHE_BYTES, Flixr};
use crate::isp::Runtime;
use crate::ssd_btree::SsdBtree;
use csd_ftl::Ftl;
use csd_sim::SimTime;
use std::collections::VecDeque;

/// Queue pairs one device offers.
pub const MAX_QUEUE_PAIRS: u16 = 64;
/// Largest depth of a queue pair (NVMe's maximum queue entries).
pub const MAX_QUEUE_DEPTH: u32 = 65_535;

struct Submission {
    cid: Cid,
    cmd: Command,
    at: SimTime,
}

struct QueuePair {
    depth: u32,
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
}

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

    /// Resize the FLIXR index cache in controller DRAM (it starts empty again).
    pub fn set_index_cache_bytes(&mut self, bytes: u64) {
        self.flixr.set_cache_bytes(&self.dev, bytes);
    }

    /// Give the block device back; pending commands and completions are dropped.
    pub fn into_block(self) -> BlockDevice {
        self.dev
    }

    /// Create a queue pair of `depth` (1..=[`MAX_QUEUE_DEPTH`]) outstanding commands.
    pub fn create_queue_pair(&mut self, depth: u32) -> Result<QueueId, Status> {
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

    /// Execute every pending command, one at a time, round robin across queue pairs;
    /// returns how many ran. Their completions wait in the pairs' completion queues.
    pub fn process(&mut self) -> usize {
        let mut ran = 0;
        let n = self.queues.len();
        loop {
            let start = self.next;
            let Some(slot) = (0..n)
                .map(|k| (start + k) % n)
                .find(|&i| self.queues[i].as_ref().is_some_and(|q| !q.sq.is_empty()))
            else {
                return ran;
            };
            self.next = (slot + 1) % n;
            let Some(sub) = self.queues[slot].as_mut().and_then(|q| q.sq.pop_front()) else {
                return ran;
            };
            let c = self.execute(sub);
            if let Some(q) = self.queues[slot].as_mut() {
                q.cq.push_back(c);
            }
            ran += 1;
        }
    }

    /// Take the oldest completion of queue pair `qid` (`None` if there is none, or no
    /// such pair).
    pub fn poll(&mut self, qid: QueueId) -> Option<Completion> {
        self.queue(qid).ok()?.cq.pop_front()
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
            self.isp.advance(&mut self.dev, sub.at);
        }
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
