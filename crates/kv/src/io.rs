//! Commands to the device, timed on the host clock and counted by purpose (batch-io
//! Table 3's user / GC split, plus the host's own metadata: log summaries, DESC blocks
//! and checkpoints). Every command crosses the typed command interface
//! (`csd_host::CommandIssuer`); nothing here reaches into the device.

use crate::KvError;
use crate::cost::{HostClock, Work};
use csd_device::{Command, Completion, Payload};
use csd_host::CommandIssuer;
use csd_sim::SimTime;

/// Bytes and commands the store moved, by purpose.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Pages read for user operations (cache misses), bytes.
    pub user_read_bytes: u64,
    /// Pages written because users changed them (dirty pages), bytes.
    pub user_write_bytes: u64,
    /// Bytes host GC read (whole victim segments, block interface).
    pub gc_read_bytes: u64,
    /// Bytes host GC wrote (live pages relocated).
    pub gc_write_bytes: u64,
    /// Bytes of host log space host GC reclaimed (victim bytes minus live bytes moved).
    pub gc_reclaimed_bytes: u64,
    /// Bytes of log segments freed without copying (every page in them overwritten).
    pub free_reclaimed_bytes: u64,
    /// Bytes of host metadata written: log chunk summaries, batch DESC blocks, checkpoints.
    pub meta_write_bytes: u64,
    /// Bytes read by recovery (checkpoint and log).
    pub recovery_read_bytes: u64,
    /// Read commands (Read and ReadLpids).
    pub read_commands: u64,
    /// Write commands (Write and FlushBatch).
    pub write_commands: u64,
    /// Trim commands (host log segments freed).
    pub trim_commands: u64,
    /// Flush commands.
    pub flush_commands: u64,
    /// Write units sealed (log chunks or batches).
    pub seals: u64,
    /// Seals that waited for a free write buffer (see `StoreConfig::write_buffers`).
    pub buffer_waits: u64,
    /// Host thread time spent waiting for a free write buffer, ns.
    pub buffer_wait_ns: u64,
    /// Host checkpoints written (block interface).
    pub checkpoints: u64,
    /// Host checkpoints that host GC forced (no periodic checkpoint freed space in time).
    pub gc_forced_checkpoints: u64,
    /// Host GC victims collected.
    pub gc_victims: u64,
    /// Pages host GC relocated.
    pub gc_pages_moved: u64,
}

/// The device and the host clock, for one piece of work.
pub struct Io<'a, I: CommandIssuer> {
    /// The device.
    pub dev: &'a mut I,
    /// The host thread and its I/O queue.
    pub clock: &'a mut HostClock,
    /// Counters.
    pub stats: &'a mut IoStats,
}

impl<I: CommandIssuer> Io<'_, I> {
    /// Submit `cmd` for `work` no earlier than `at` (waiting for a queue slot, charging
    /// the submission and completion to the host CPU); returns the completion.
    pub fn submit(&mut self, work: Work, cmd: Command, at: SimTime) -> Result<Completion, KvError> {
        let mut t = self.slot(at.max(self.clock.cpu));
        let c = self.clock.costs;
        self.clock.charge(work, c.submit, &mut t);
        match &cmd {
            Command::Read { .. } | Command::ReadLpids { .. } => self.stats.read_commands += 1,
            Command::Write { .. } | Command::FlushBatch { .. } => self.stats.write_commands += 1,
            Command::Trim { .. } => self.stats.trim_commands += 1,
            Command::Flush => self.stats.flush_commands += 1,
            _ => {}
        }
        let done = self.dev.exec_at(cmd, t)?;
        self.clock.hold(done.acct.completed);
        let mut t2 = done.acct.completed;
        self.clock.charge(work, c.complete, &mut t2);
        Ok(done)
    }

    /// A queue slot for a command to submit no earlier than `at` ([`HostClock::slot`]).
    /// While the event core records, completions are instants it may not have fixed:
    /// the earliest is asked of it (it books only as far as it must), and whether that
    /// is before `at` too (booking nothing after the completion). The same decisions as
    /// the calendar's, on final values: the thread waits only when the queue is still full
    /// at `at`.
    fn slot(&mut self, at: SimTime) -> SimTime {
        if !(self.dev.event_core() && csd_sim::events::recording()) {
            return self.clock.slot(at);
        }
        let depth = self.clock.depth();
        if self.clock.pending().len() < depth {
            return at;
        }
        let Some((i, c)) = self.dev.earliest(self.clock.pending.as_slice()) else {
            return at;
        };
        self.clock.pending.swap_remove(i);
        // `at` before `c`: the queue is full until `c`, and the thread waits for it.
        let full = c.ns() > 0 && self.dev.at_or_before(at, SimTime::from_ns(c.ns() - 1));
        if !full {
            return at;
        }
        let cpu = self.clock.cpu;
        debug_assert!(cpu.is_final(), "the host thread's clock is final");
        if c.ns() > cpu.ns() {
            self.clock.queue_full_wait_ns += c.ns() - cpu.ns();
            self.clock.cpu = c;
        }
        c
    }

    /// Read `blocks` LBAs from `lba` (as many commands as MDTS needs); returns the data and
    /// when the last part arrived.
    pub fn read_lbas(
        &mut self,
        work: Work,
        lba: u64,
        blocks: u64,
        at: SimTime,
    ) -> Result<(Vec<u8>, SimTime), KvError> {
        let mdts = (self.dev.identify().mdts_blocks as u64).max(1);
        let mut out = Vec::with_capacity(blocks as usize * crate::page::PAGE);
        let mut done = at;
        let mut l = lba;
        while l < lba + blocks {
            let n = mdts.min(lba + blocks - l);
            let c = self.submit(
                work,
                Command::Read {
                    lba: l,
                    blocks: n as u32,
                },
                at,
            )?;
            done = done.max(c.acct.completed);
            match c.payload {
                Payload::Data(d) => out.extend_from_slice(&d),
                _ => return Err(KvError::Corrupt("Read returned no data".into())),
            }
            l += n;
        }
        Ok((out, done))
    }

    /// Write whole LBAs at `lba` with commands of at most MDTS blocks, all submitted at
    /// `at` (they are independent commands to the device, batch-io §8.2.1); returns when
    /// the last completed.
    pub fn write_lbas(
        &mut self,
        work: Work,
        lba: u64,
        data: &[u8],
        at: SimTime,
    ) -> Result<SimTime, KvError> {
        let id = self.dev.identify();
        let bs = id.lba_size as usize;
        let chunk = (id.mdts_blocks as usize).max(1) * bs;
        let mut done = at;
        for (i, part) in data.chunks(chunk).enumerate() {
            let c = self.submit(
                work,
                Command::Write {
                    lba: lba + (i * chunk / bs) as u64,
                    data: part.to_vec(),
                },
                at,
            )?;
            done = done.max(c.acct.completed);
        }
        Ok(done)
    }
}
