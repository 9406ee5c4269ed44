//! Durability (batch-io §8.1.2, a choice the paper leaves open): which change numbers are
//! on the device ([`Store::acked`]), sealing write buffers (one log chunk or one batch,
//! all-or-nothing on a crash), [`Store::sync`], the background work between operations
//! (dirty pages past their age, host GC, periodic host checkpoints) and host checkpoints.
//!
//! Choices: a dirty page reaches the device on eviction, past `max_dirty_age_ns` or on
//! sync; host GC and checkpoints (block interface) run on the host thread between
//! operations, where their CPU time is charged.

use super::*;

impl<I: CommandIssuer> Store<I> {
    /// The highest change sequence number such that it and every earlier change are on
    /// the device (acknowledged as durable).
    pub fn acked(&mut self) -> u64 {
        if !self.cfg.persist {
            return 0;
        }
        while let Some(&(lsn, _, id)) = self.fifo.front() {
            if self.dirty.get(&id).map(|d| d.0) == Some(lsn) {
                return lsn - 1;
            }
            self.fifo.pop_front();
        }
        self.lsn
    }

    /// The sequence number of the latest change.
    pub fn last_change(&self) -> u64 {
        self.lsn
    }

    /// Write the buffer as one sealed unit (log chunk or batch).
    pub(super) fn seal(&mut self) -> Result<(), KvError> {
        if self.buf.is_empty() || !self.cfg.persist {
            return Ok(());
        }
        let seq = match &self.log {
            Some(l) => l.next_seq(),
            None => {
                self.batch_seq += 1;
                self.batch_seq
            }
        };
        if self.buf.len() > 255 {
            // Checked before the buffer is drained, so its pages stay staged.
            return Err(KvError::Corrupt(format!(
                "write buffer overflow: {} pages in one seal",
                self.buf.len()
            )));
        }
        let ready = self.buf.ready_at;
        let entries = self.buf.drain();
        let c = self.clock.costs;
        let mut pages = Vec::with_capacity(entries.len());
        let (mut user, mut gc) = (0u64, 0u64);
        let mut t = self.clock.cpu;
        for (id, img, reloc) in entries {
            let mut p = match img {
                Some(p) => p,
                None => copy(self.frame(id)?),
            };
            page::seal(&mut p[..], seq);
            if reloc {
                gc += 1;
                self.clock.charge(Work::Gc, c.gc_move, &mut t);
            } else {
                user += 1;
                self.clock.charge(Work::User, c.buffer_page, &mut t);
            }
            pages.push((id, p));
        }
        self.io.user_write_bytes += user * PAGE as u64;
        self.io.gc_write_bytes += gc * PAGE as u64;
        self.io.gc_pages_moved += gc;
        self.io.seals += 1;
        let work = if gc > user { Work::Gc } else { Work::User };
        let at = self.clock.cpu.max(ready);
        let mut io = Io {
            dev: &mut self.dev,
            clock: &mut self.clock,
            stats: &mut self.io,
        };
        self.activity = Activity::Seal;
        let done = match &mut self.log {
            Some(log) => log.write(&mut io, work, &pages, at)?,
            None => batch::write(&mut io, work, &pages, at)?,
        };
        if let Some(n) = self.cfg.write_buffers {
            // The host needs a free buffer to stage the next pages into: with every one of
            // its `n` buffers sealed and unacknowledged it waits for the earliest
            // acknowledgement (here, at once, rather than at the next page staged, which
            // on these workloads comes within tens of operations).
            self.buf.sealed(done);
            let now = self.clock.cpu;
            let free = if self.dev.event_core() && csd_sim::events::recording() {
                let dev = &mut self.dev;
                self.buf.free_at_events(n, now, &mut |ts| dev.earliest(ts))
            } else {
                self.buf.free_at(n, now)
            };
            if free > now {
                self.io.buffer_waits += 1;
                self.io.buffer_wait_ns += free.ns() - now.ns();
                self.clock.cpu = free;
                self.buffer_free = free;
            }
        }
        for (id, _) in &pages {
            self.dirty.remove(id);
        }
        self.activity = Activity::Idle;
        Ok(())
    }

    /// Write every dirty page and wait for the device: afterwards [`Store::acked`] equals
    /// [`Store::last_change`]. Returns the modeled instant it was all durable.
    pub fn sync(&mut self) -> Result<SimTime, KvError> {
        if !self.cfg.persist {
            return Ok(self.clock.cpu);
        }
        let ids: Vec<u64> = self.fifo.iter().map(|&(_, _, id)| id).collect();
        for id in ids {
            self.stage_dirty(id)?;
        }
        self.seal()?;
        let mut io = Io {
            dev: &mut self.dev,
            clock: &mut self.clock,
            stats: &mut self.io,
        };
        let at = io.clock.cpu;
        io.submit(Work::User, Command::Flush, at)?;
        Ok(self.wait_drained())
    }

    /// The host thread waits for every command in flight: its clock moves to the last
    /// completion (fixed by the event core while it records); returns it.
    pub(super) fn wait_drained(&mut self) -> SimTime {
        let done = self.dev.resolve(self.clock.drained());
        self.clock.cpu = done;
        done
    }

    /// Put dirty page `id` into the write buffer (sealing a full buffer first).
    pub(super) fn stage_dirty(&mut self, id: u64) -> Result<(), KvError> {
        if !self.dirty.contains_key(&id) || self.buf.contains(id) {
            return Ok(());
        }
        if self.buf.len() >= self.buf.cap {
            self.seal()?;
        }
        if self.cache.index.contains_key(&id) {
            self.buf.add(id, None);
        }
        Ok(())
    }

    /// Work between operations: age-based flushing, sealing a full buffer, host GC and
    /// host checkpoints.
    pub(super) fn background(&mut self) -> Result<(), KvError> {
        if !self.cfg.persist || self.group.is_some() {
            return Ok(());
        }
        let now = self.clock.cpu;
        let age = self.cfg.max_dirty_age_ns;
        // A page's dirty instant may be one the event core has not fixed (an operation
        // that waited for a read): the device decides, booking nothing past `now`.
        let dev = &mut self.dev;
        if now.ns() >= age
            && self.fifo.front().is_some_and(|&(_, since, _)| {
                dev.at_or_before(since, SimTime::from_ns(now.ns() - age))
            })
        {
            let cut = SimTime::from_ns(now.ns().saturating_sub(age / 2));
            let old: Vec<u64> = self
                .fifo
                .iter()
                .take_while(|&&(_, since, _)| dev.at_or_before(since, cut))
                .map(|&(_, _, id)| id)
                .collect();
            for id in old {
                self.stage_dirty(id)?;
            }
            self.seal()?;
            self.acked();
        }
        if self.buf.len() + self.reserve() > self.buf.cap {
            self.seal()?;
        }
        if self.log.is_some() {
            self.host_maintenance()?;
        }
        Ok(())
    }

    fn host_maintenance(&mut self) -> Result<(), KvError> {
        let now = self.clock.cpu;
        if let Some(iv) = self.cfg.checkpoint_interval_ns
            && self.last_ckpt.after(iv) <= now
        {
            self.checkpoint()?;
        }
        let Some(log) = &self.log else {
            return Ok(());
        };
        if log.checkpoint_frees_space() {
            self.io.gc_forced_checkpoints += 1;
            self.checkpoint()?;
        }
        let wanted = self.log.as_ref().is_some_and(BlockLog::gc_wanted);
        // One victim per call (per operation) while the log is at its threshold: the
        // cleaner keeps pace with any write rate. (One victim per sealed buffer, as
        // before, fell behind whenever a victim's pages spilled into a second buffer:
        // a write-heavy run filled the log with segments 79% dead.)
        if wanted {
            let dirty = &self.dirty;
            let is_dirty = |id: u64| dirty.contains_key(&id);
            let mut io = Io {
                dev: &mut self.dev,
                clock: &mut self.clock,
                stats: &mut self.io,
            };
            let at = io.clock.cpu;
            let Some(log) = self.log.as_mut() else {
                return Ok(());
            };
            self.activity = Activity::Gc;
            let got = log.collect(&mut io, &is_dirty, at)?;
            self.activity = Activity::Idle;
            if let Some(Collected {
                pages,
                dirty,
                ready,
            }) = got
            {
                for (id, p) in pages {
                    if self.buf.contains(id) {
                        continue;
                    }
                    if self.buf.len() >= self.buf.cap {
                        self.seal()?;
                    }
                    self.buf.ready_at = self.buf.ready_at.max(ready);
                    self.buf.add(id, Some(p));
                    self.buf.relocated.insert(id, ());
                }
                // The victim's dirty pages go out with the relocated ones (as an age
                // flush would, later): the victim is free once they are written.
                for id in dirty {
                    self.stage_dirty(id)?;
                }
            }
        }
        Ok(())
    }

    /// Write a host checkpoint now (block interface; a no-op on the batch interface).
    pub fn checkpoint(&mut self) -> Result<(), KvError> {
        let mut io = Io {
            dev: &mut self.dev,
            clock: &mut self.clock,
            stats: &mut self.io,
        };
        let at = io.clock.cpu;
        if let Some(log) = self.log.as_mut() {
            let was = std::mem::replace(&mut self.activity, Activity::Checkpoint);
            log.checkpoint(&mut io, at)?;
            self.activity = was;
            self.last_ckpt = self.clock.cpu;
        }
        Ok(())
    }
}
