//! The write path of the block and batch front ends and the commit path (batch-io §3,
//! §4, §8.2.1).
//!
//! Choices made here:
//! * A commit that fails (no block left to write into, a full image file system, a
//!   metadata read error) is rolled back before the error returns: every MAP entry that
//!   points into one of its page buffers gets its durable old location back, the
//!   buffers are dropped, and a best-effort Abort record tells recovery not to apply
//!   it. So MAP, MAP cache and write buffers agree after any failure, and a command that
//!   reported an error is never partly applied.
//! * Running out of blocks for a write (spare blocks used up by grown bad blocks, or
//!   nothing left to reclaim) or of room in the image's file system turns the device
//!   read-only (`FtlError::ReadOnly`), as NVMe drives do at end of life: writes are
//!   refused, reads keep working, and everything acknowledged stays readable.

use crate::format::{Entry, Kind, LogPage, NONE, Record, pack};
use crate::ftl::*;
use crate::provision::Stream;
use crate::stats::Count;
use crate::{FtlError, WriteCache};
use csd_nand::{BlockId, NandError, Ppa};
use csd_sim::SimTime;

/// A page being assembled in DRAM.
pub(crate) struct PageBuf {
    /// The page's bytes.
    pub(crate) data: Vec<u8>,
    /// The LPID of each sector (`NONE` for padding or a sector written again since).
    pub(crate) lpids: Vec<u64>,
    /// The durable location each LPID had before this write (invalidated at commit).
    pub(crate) olds: Vec<u64>,
    /// Sectors filled.
    pub(crate) fill: u32,
}

/// The commit being assembled: its page buffers (MAP entries of buffered sectors point
/// into them), the buffer each data stream fills, buffers kept for reuse, and the
/// sequence number of the next commit. Only this module changes it.
#[derive(Default)]
pub(crate) struct CommitState {
    /// Page buffers of the commit being assembled.
    bufs: Vec<PageBuf>,
    /// Index in `bufs` of the page being filled per data stream.
    filling: [Option<usize>; 2],
    /// Page buffers kept for reuse (no allocation per commit on the data path).
    pool: Vec<PageBuf>,
    /// Sequence number of the next commit.
    next_seq: u64,
}

/// Page buffers set aside while GC relocates a block (see [`CommitState::set_aside`]).
pub(crate) struct SetAside {
    bufs: Vec<PageBuf>,
    filling: [Option<usize>; 2],
}

impl CommitState {
    /// No buffers; the first commit gets sequence number 1.
    pub(crate) fn new() -> CommitState {
        CommitState {
            next_seq: 1,
            ..CommitState::default()
        }
    }

    /// Sequence number of the next commit.
    #[inline]
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Take the next commit sequence number.
    pub(crate) fn take_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// Continue numbering at `seq` (the checkpoint's next commit).
    pub(crate) fn restore_seq(&mut self, seq: u64) {
        self.next_seq = seq;
    }

    /// Number commits after `seq` (recovery found a commit with that number).
    pub(crate) fn seq_after(&mut self, seq: u64) {
        self.next_seq = self.next_seq.max(seq + 1);
    }

    /// Page buffer `i`, if there is one.
    #[inline]
    pub(crate) fn buf(&self, i: usize) -> Option<&PageBuf> {
        self.bufs.get(i)
    }

    /// Set the buffered commit aside (GC commits its moves on its own), to be put back
    /// with [`CommitState::put_back`].
    pub(crate) fn set_aside(&mut self) -> SetAside {
        SetAside {
            bufs: std::mem::take(&mut self.bufs),
            filling: std::mem::take(&mut self.filling),
        }
    }

    /// Put back what [`CommitState::set_aside`] took.
    pub(crate) fn put_back(&mut self, saved: SetAside) {
        self.bufs = saved.bufs;
        self.filling = saved.filling;
    }
}

impl Ftl {
    /// Write `data` (whole LBAs) at `lba`, submitted at `at`; returns the completion.
    /// Host writes larger than MDTS are split into MDTS-sized commands, each with its own
    /// write context, log record and done record (batch-io §8.2.1).
    pub fn write(&mut self, lba: u64, data: &[u8], at: SimTime) -> Result<SimTime, FtlError> {
        let n = self.sectors_of(data.len())?;
        self.write_contexts(lba, data, std::iter::once((n, at)))
    }

    /// Write `data` at `lba` as it arrived over a packet-switched transport: packet `k`
    /// carried bytes `k × packet_bytes ..` and reached the controller at `arrivals[k]`.
    /// The block interface knows no logical relationship among the packets, so each makes
    /// its own write context (log record, programs, done record) of the sectors whose
    /// last byte it brought (batch-io §8.2.1: OXBlock makes 17 contexts for a 1 MiB write
    /// over NVMe-oF/TCP, OXBatch one). A context larger than MDTS is split as
    /// [`Ftl::write`] splits. Returns the completion of the last context.
    pub fn write_packets(
        &mut self,
        lba: u64,
        data: &[u8],
        packet_bytes: usize,
        arrivals: &[SimTime],
    ) -> Result<SimTime, FtlError> {
        self.sectors_of(data.len())?;
        let packets = data.len().div_ceil(packet_bytes.max(1));
        if packet_bytes < self.geo.sector_size() || arrivals.len() != packets {
            return Err(FtlError::Config(format!(
                "a write of {} bytes in packets of {packet_bytes} bytes needs {packets} arrival instants (got {}) and packets of at least one {}-byte LBA",
                data.len(),
                arrivals.len(),
                self.geo.sector_size()
            )));
        }
        let contexts = packet_contexts(data.len(), self.geo.sector_size(), packet_bytes);
        debug_assert_eq!(contexts.len(), packets);
        self.write_contexts(
            lba,
            data,
            contexts.into_iter().zip(arrivals.iter().copied()),
        )
    }

    /// Write `data` at `lba` as consecutive write contexts `(sectors, arrival)`, each
    /// split further at MDTS; the range and the device's state are checked before
    /// anything is written.
    fn write_contexts(
        &mut self,
        lba: u64,
        data: &[u8],
        contexts: impl Iterator<Item = (u64, SimTime)>,
    ) -> Result<SimTime, FtlError> {
        let n = self.sectors_of(data.len())?;
        self.check_range(lba, n)?;
        self.check_writable()?;
        let mdts = u64::from(self.cfg.mdts_sectors);
        let ss = self.geo.sector_size();
        let serial = self.nand.config().ftl.serial_contexts;
        let mut done = SimTime::ZERO;
        let mut first = 0u64;
        for (sectors, arrived) in contexts {
            // One at a time (`ftl.serial_contexts`): a context starts once the one before
            // it has committed.
            let at = if serial { arrived.max(done) } else { arrived };
            done = done.max(at);
            let end = (first + sectors).min(n);
            let mut s = first;
            while s < end {
                let e = (s + mdts).min(end);
                let cmd = &data[s as usize * ss..e as usize * ss];
                let r = self.write_command(lba + s, cmd, at);
                done = done.max(self.host_result(r)?);
                s = e;
            }
            first = end;
        }
        debug_assert_eq!(first, n, "write contexts cover the whole write");
        if self.cfg.write_cache == WriteCache::WriteThrough {
            self.persist_acknowledged()?;
        }
        Ok(done)
    }

    /// Before a command that promises durability completes (a write-through write, a
    /// flush, a trim, a batch): what it made durable on the flash is on the host's disk
    /// too (`csd_nand::Nand::persist`; nothing for an in-memory device). No modeled time.
    pub(crate) fn persist_acknowledged(&mut self) -> Result<(), FtlError> {
        Ok(self.nand.persist()?)
    }

    /// The outcome of a host write-path operation: on failure, buffered sectors are
    /// rolled back, and an end-of-life failure turns the device read-only and becomes
    /// [`FtlError::ReadOnly`].
    pub(crate) fn host_result(
        &mut self,
        r: Result<SimTime, FtlError>,
    ) -> Result<SimTime, FtlError> {
        let e = match r {
            Ok(t) => return Ok(t),
            Err(e) => e,
        };
        if matches!(e, FtlError::Nand(NandError::PowerLoss)) {
            return Err(e);
        }
        self.drop_buffers(None);
        match self.end_of_life(&e) {
            Some(reason) => {
                self.enter_read_only(reason);
                Err(FtlError::ReadOnly { reason })
            }
            None => Err(e),
        }
    }

    /// Roll back every buffered sector: its MAP entry gets the durable old location
    /// back (where it still points into the buffer), and the buffers return to the pool.
    /// With `aborted` set, that commit's Abort record is logged if the log can take it.
    pub(crate) fn drop_buffers(&mut self, aborted: Option<u64>) {
        let bufs = std::mem::take(&mut self.commit.bufs);
        self.commit.filling = [None, None];
        for (i, buf) in bufs.iter().enumerate() {
            for (k, &lpid) in buf.lpids.iter().enumerate() {
                if lpid == NONE {
                    continue;
                }
                let here = Loc::Buffered { buf: i, slot: k }.entry();
                // A MAP page that cannot be read leaves nothing to restore: its entry
                // is on flash as it was before the commit.
                if let Ok((cur, _)) = self.map_get(lpid, SimTime::ZERO)
                    && cur == here
                {
                    let _ = self.map_set(lpid, buf.olds[k], SimTime::ZERO);
                }
            }
        }
        for b in bufs {
            self.recycle(b);
        }
        if let Some(seq) = aborted {
            self.counters.add(Count::AbortedCommits, 1);
            if self.may_write_meta() {
                self.log_append(Record::Abort { seq });
                let _ = self.force_log(SimTime::ZERO);
            }
        }
    }

    /// A page buffer goes back to the pool, cleared.
    fn recycle(&mut self, mut b: PageBuf) {
        b.fill = 0;
        b.lpids.fill(NONE);
        b.olds.fill(NONE);
        self.commit.pool.push(b);
    }

    pub(crate) fn write_command(
        &mut self,
        lba: u64,
        data: &[u8],
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        let mut t = at;
        let mut done = at;
        for (i, sector) in data.chunks(self.geo.sector_size()).enumerate() {
            t = t.max(self.buffer_sector(Stream::Hot, lba + i as u64, sector, NONE, at)?);
            if self.cfg.write_cache == WriteCache::WriteBack
                && self.commit.filling[Stream::Hot.index()].is_none()
                && self.commit.bufs.len() >= self.geo.dies() as usize
            {
                done = done.max(self.commit(t)?);
            }
        }
        self.counters.add(
            Count::HostWriteSectors,
            data.len() as u64 / self.geo.sector_size() as u64,
        );
        if self.cfg.write_cache == WriteCache::WriteThrough {
            done = done.max(self.commit(t)?);
        }
        Ok(done.max(t))
    }

    /// Put one sector into stream `s`'s filling page buffer and point MAP at it.
    /// `old_hint` is the durable location for GC moves (NONE for host writes: read MAP).
    pub(crate) fn buffer_sector(
        &mut self,
        s: Stream,
        lpid: u64,
        sector: &[u8],
        old_hint: u64,
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        let (cur, t) = self.map_get(lpid, at)?;
        let durable_old = match Loc::of(cur) {
            _ if old_hint != NONE => old_hint,
            // Rewritten while still buffered: the earlier slot dies, its durable old
            // carries over.
            Loc::Buffered { buf: b, slot: k } => {
                self.commit.bufs[b].lpids[k] = NONE;
                self.commit.bufs[b].olds[k]
            }
            _ => cur,
        };
        let bi = match self.commit.filling[s.index()] {
            Some(b) => b,
            None => {
                let buf = self.commit.pool.pop().unwrap_or_else(|| PageBuf {
                    data: vec![0u8; self.geo.page_size()],
                    lpids: vec![NONE; self.geo.sectors_per_page() as usize],
                    olds: vec![NONE; self.geo.sectors_per_page() as usize],
                    fill: 0,
                });
                self.commit.bufs.push(buf);
                let b = self.commit.bufs.len() - 1;
                self.commit.filling[s.index()] = Some(b);
                b
            }
        };
        let buf = &mut self.commit.bufs[bi];
        let k = buf.fill as usize;
        buf.data[k * self.geo.sector_size()..(k + 1) * self.geo.sector_size()]
            .copy_from_slice(sector);
        buf.lpids[k] = lpid;
        buf.olds[k] = durable_old;
        buf.fill += 1;
        if buf.fill == self.geo.sectors_per_page() {
            self.commit.filling[s.index()] = None;
        }
        self.map_set(lpid, Loc::Buffered { buf: bi, slot: k }.entry(), at)?;
        Ok(t)
    }

    /// Commit every buffered page: log RDESC (or GC moves), program, amend failures with
    /// RDESCA, install the MAP updates, queue the done record. GC commits (`gc`) log
    /// GcMove records, whose redo applies only where MAP still points at the old copy.
    ///
    /// A commit that fails before its MAP updates are installed is rolled back (see the
    /// module documentation); power loss leaves everything to recovery.
    pub(crate) fn commit_inner(&mut self, gc: bool, at: SimTime) -> Result<SimTime, FtlError> {
        if self.commit.bufs.is_empty() {
            return Ok(at);
        }
        self.commit.filling = [None, None];
        let seq = self.commit.take_seq();
        self.counters.add(Count::Commits, 1);
        let (addrs, done) = match self.write_commit_pages(gc, seq, at) {
            Ok(x) => x,
            Err(e) => {
                if !matches!(e, FtlError::Nand(NandError::PowerLoss)) {
                    self.drop_buffers(Some(seq));
                }
                return Err(e);
            }
        };
        self.install_commit(&addrs, at)?;
        let mut done = done;
        // 5. The done record rides with the next log write.
        self.log_append(Record::Done { seq });
        if self.log.pending_bytes() > LogPage::capacity(self.geo.page_size()) / 2 {
            done = done.max(self.force_log(done)?);
        }
        while let Some(b) = self.prov.next_retired() {
            self.relocate(b, done)?;
        }
        Ok(done)
    }

    /// Steps 1-3 of a commit: provision, log the redo descriptor, program (re-planning
    /// failed programs with an RDESCA). Returns the final address of each buffer.
    fn write_commit_pages(
        &mut self,
        gc: bool,
        seq: u64,
        at: SimTime,
    ) -> Result<(Vec<(u32, u32)>, SimTime), FtlError> {
        let stream = if gc { Stream::Cold } else { Stream::Hot };
        self.pad_page_bufs();
        // 1. Provision addresses (as the program order will use them).
        let mut addrs: Vec<(u32, u32)> = Vec::with_capacity(self.commit.bufs.len());
        let plan = self.plan_addresses(stream, self.commit.bufs.len())?;
        addrs.extend(plan);
        // 2. Log the redo descriptor before any data is written.
        let entries = self.entries_for(&addrs);
        let make: fn(u64, Vec<Entry>) -> Record = if gc {
            |seq, entries| Record::GcMove { seq, entries }
        } else {
            |seq, entries| Record::Rdesc { seq, entries }
        };
        self.log_entries(make, seq, entries);
        let t_log = self.force_log(at)?;
        // 3. Program the data pages; failures get new addresses and an RDESCA.
        let mut done = t_log;
        let mut todo: Vec<usize> = (0..self.commit.bufs.len()).collect();
        let mut rounds = 0;
        while !todo.is_empty() {
            rounds += 1;
            if rounds > 64 {
                return Err(FtlError::NoSpace);
            }
            let failed = self.program_round(&todo, &addrs, (gc, seq), t_log, &mut done)?;
            if failed.is_empty() {
                break;
            }
            let replan = self.plan_addresses(stream, failed.len())?;
            for (&i, a) in failed.iter().zip(replan) {
                addrs[i] = a;
            }
            self.log_amendment(&failed, &addrs, gc, seq);
            done = done.max(self.force_log(done)?);
            todo = failed;
        }
        Ok((addrs, done))
    }

    /// Pad the partial pages of the buffers with zeros.
    fn pad_page_bufs(&mut self) {
        for b in &mut self.commit.bufs {
            if b.fill < self.geo.sectors_per_page() {
                self.counters.add(
                    Count::PaddingSectors,
                    (self.geo.sectors_per_page() - b.fill) as u64,
                );
                b.data[b.fill as usize * self.geo.sector_size()..].fill(0);
            }
        }
    }

    /// Program buffers `todo` at their planned addresses from `t_log` (`done` moves to
    /// the last program's end). Returns the buffers to re-plan: a program failure
    /// retires the block, and a page planned into a block retired during this commit
    /// is not programmed.
    fn program_round(
        &mut self,
        todo: &[usize],
        addrs: &[(u32, u32)],
        (gc, seq): (bool, u64),
        t_log: SimTime,
        done: &mut SimTime,
    ) -> Result<Vec<usize>, FtlError> {
        let stream = if gc { Stream::Cold } else { Stream::Hot };
        let mut failed = Vec::new();
        let mut oob = self.scratch.take_oob();
        for &i in todo {
            let (b, p) = addrs[i];
            if self.blocks[b as usize].state == Use::Bad {
                failed.push(i);
                continue;
            }
            let pe = self.nand.block_info(BlockId(b))?.pe_cycles;
            tags_for(
                &mut oob,
                (self.geo.oob_per_sector(), self.geo.sector_size()),
                &self.commit.bufs[i].data,
                Kind::Data,
                &self.commit.bufs[i].lpids,
                seq,
                Some((b, p, pe)),
            );
            let r = self.nand.program(
                Ppa::new(BlockId(b), p),
                &self.commit.bufs[i].data,
                &oob,
                t_log,
            );
            self.prov.programmed();
            match r {
                Ok(d) => {
                    *done = (*done).max(d);
                    if gc {
                        self.counters.add(Count::GcPrograms, 1);
                    } else {
                        self.counters.add(Count::UserPrograms, 1);
                        // Host data sat in the page buffer before its program.
                        self.pagebuf.insert(b, p, pe);
                    }
                }
                Err(NandError::ProgramFailed { .. }) => {
                    self.counters.add(Count::ProgramFailures, 1);
                    self.prov
                        .close(stream, (b / self.geo.blocks_per_die()) as usize);
                    self.retire(b);
                    failed.push(i);
                }
                Err(e) => {
                    self.scratch.put_oob(oob);
                    return Err(e.into());
                }
            }
        }
        self.scratch.put_oob(oob);
        Ok(failed)
    }

    /// Log the new addresses of the re-planned buffers `failed` (an RDESCA, or a GC
    /// move for a GC commit).
    fn log_amendment(&mut self, failed: &[usize], addrs: &[(u32, u32)], gc: bool, seq: u64) {
        let mut am = Vec::new();
        for &i in failed {
            let (b, p) = addrs[i];
            for (k, &lpid) in self.commit.bufs[i].lpids.iter().enumerate() {
                if lpid != NONE {
                    am.push(Entry {
                        lpid,
                        new: pack(b, p, k as u32),
                        old: self.commit.bufs[i].olds[k],
                    });
                }
            }
        }
        let make: fn(u64, Vec<Entry>) -> Record = if gc {
            |seq, entries| Record::GcMove { seq, entries }
        } else {
            |seq, entries| Record::Rdesca { seq, entries }
        };
        self.log_entries(make, seq, am);
    }

    /// Step 4 of a commit: point MAP at the programmed sectors (where it still points
    /// into the buffer: a sector rewritten since is someone else's) and move the valid
    /// bits; the buffers go back to the pool. MAP writes cannot fail here for lack of
    /// room (the cache then keeps dirty pages and the device turns read-only).
    fn install_commit(&mut self, addrs: &[(u32, u32)], at: SimTime) -> Result<(), FtlError> {
        let bufs = std::mem::take(&mut self.commit.bufs);
        let mut result = Ok(());
        // In LPID order, so that each MAP page is loaded and dirtied once per commit
        // however small the MAP cache is. An entry whose MAP page cannot be read keeps
        // its old value on flash; the others are still installed, so that no MAP entry is
        // left pointing into a buffer that goes back to the pool.
        let mut order: Vec<(u64, usize, usize)> =
            Vec::with_capacity(bufs.len() * self.geo.sectors_per_page() as usize);
        for (i, buf) in bufs.iter().enumerate() {
            for (k, &lpid) in buf.lpids.iter().enumerate() {
                if lpid != NONE {
                    order.push((lpid, i, k));
                }
            }
        }
        order.sort_unstable();
        for (lpid, i, k) in order {
            let (b, p) = addrs[i];
            let new = pack(b, p, k as u32);
            let here = Loc::Buffered { buf: i, slot: k }.entry();
            let old = bufs[i].olds[k];
            let step = self.map_get(lpid, at).and_then(|(cur, _)| {
                if cur == here {
                    self.map_set(lpid, new, at)?;
                    self.set_valid(new, true);
                    self.set_valid(old, false);
                }
                Ok(())
            });
            if let Err(e) = step {
                let power_lost = matches!(e, FtlError::Nand(NandError::PowerLoss));
                if result.is_ok() {
                    result = Err(e);
                }
                if power_lost {
                    break;
                }
            }
        }
        for b in bufs {
            self.recycle(b);
        }
        result
    }

    /// Top up the free pool before work that needs `extra` more blocks than a normal
    /// commit. GC only runs when no host sector is buffered (a buffered sector's old copy
    /// must stay where the durable MAP says it is).
    pub(crate) fn ensure_free(&mut self, extra: u32, at: SimTime) -> Result<(), FtlError> {
        if !self.gc.running()
            && self.commit.bufs.is_empty()
            && self.blocks.free_count() < self.gc_low_water() + extra
        {
            self.collect_garbage_to(self.gc_low_water() + extra, at)?;
        }
        Ok(())
    }

    /// Commit the host's buffered sectors, then run the work a commit triggers: GC and
    /// checkpoints (by log size, log space or time). The commit is durable once
    /// `commit_inner` returns, so a GC or checkpoint that finds no room only turns the
    /// device read-only; the command still succeeds.
    pub(crate) fn commit(&mut self, at: SimTime) -> Result<SimTime, FtlError> {
        let done = self.commit_inner(false, at)?;
        if !self.gc.running()
            && let Err(e) = self.after_commit(done)
        {
            let reason = self.end_of_life(&e).ok_or(e)?;
            self.enter_read_only(reason);
        }
        Ok(done)
    }

    fn after_commit(&mut self, done: SimTime) -> Result<(), FtlError> {
        if self.health.read_only().is_some() {
            return Ok(());
        }
        self.collect_garbage(done)?;
        // Checkpoint by log size, early when the log takes too much of the device, or on
        // the time interval. Too much: more than `log_budget` log blocks with one chain;
        // with several, more than `log_budget - 1` blocks besides the chains' current
        // ones (a checkpoint cannot free those, and the chains reach their blocks' ends
        // together), so the log holds no more reclaimable blocks than one chain would.
        let log_budget = (self.blocks.len() as u32 / 32).max(3);
        let too_much_log = if self.log.chains() == 1 {
            self.log.blocks() > log_budget
        } else {
            self.log
                .blocks()
                .saturating_sub(self.log.current_block_count())
                >= log_budget
        };
        let interval = self.cfg.checkpoint_interval_ms.saturating_mul(1_000_000);
        if self.log.since_checkpoint() >= self.cfg.checkpoint_log_pages
            || too_much_log
            // A decision on modeled time (the audit's one exception in the FTL): on the
            // event core `done` may not be fixed yet, and the comparison is then counted
            // (`Graph::unfixed_comparisons`) so that a report shows it.
            || (interval > 0 && done >= self.ckpt.last_at().after(interval))
        {
            self.checkpoint(done)?;
        }
        Ok(())
    }

    /// Reserve the next `n` pages of `stream` in provisioning order (channel round robin);
    /// the programs of a commit then follow this plan in order.
    pub(crate) fn plan_addresses(
        &mut self,
        stream: Stream,
        n: usize,
    ) -> Result<Vec<(u32, u32)>, FtlError> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let (b, p) = self.provision(stream)?;
            self.advance(stream, b, p);
            out.push((b, p));
        }
        Ok(out)
    }

    pub(crate) fn entries_for(&self, addrs: &[(u32, u32)]) -> Vec<Entry> {
        let mut v = Vec::new();
        for (i, buf) in self.commit.bufs.iter().enumerate() {
            let (b, p) = addrs[i];
            for (k, &lpid) in buf.lpids.iter().enumerate() {
                if lpid != NONE {
                    v.push(Entry {
                        lpid,
                        new: pack(b, p, k as u32),
                        old: buf.olds[k],
                    });
                }
            }
        }
        v
    }

    /// Make every buffered write and logged change durable.
    pub fn flush(&mut self, at: SimTime) -> Result<SimTime, FtlError> {
        if self.health.read_only().is_some() && self.commit.bufs.is_empty() {
            // Nothing buffered and nothing may be written: everything acknowledged is
            // already durable.
            return Ok(at);
        }
        let r = self.commit(at).and_then(|t| self.force_log(t));
        let t = self.host_result(r)?;
        self.persist_acknowledged()?;
        Ok(t)
    }

    /// Unmap LBAs (logged before it completes); reads return zeros afterwards.
    pub fn trim(&mut self, lba: u64, n: u64, at: SimTime) -> Result<SimTime, FtlError> {
        self.check_range(lba, n)?;
        self.check_writable()?;
        // Buffered writes to these LBAs are committed first so that the order is kept.
        let r = self.commit(at).and_then(|t| {
            self.log_append(Record::Trim { lpid: lba, n });
            self.force_log(t)
        });
        let t = self.host_result(r)?;
        // Logged: from here on the trim is durable; MAP writes cannot fail for room.
        for l in lba..lba + n {
            let (cur, _) = self.map_get(l, t)?;
            self.set_valid(cur, false);
            self.map_set(l, NONE, t)?;
            // An unmapped LPID has no rows: its extension (a FLIXR index entry) goes
            // with its data. Devices without extensions skip this (no MAP work).
            if self.cfg.ext_bytes > 0 {
                self.clear_ext(l, t)?;
            }
        }
        self.counters.add(Count::HostTrimSectors, n);
        self.persist_acknowledged()?;
        Ok(t)
    }

    /// Write a batch (batch-io §3): `buf` is a DESC block followed by the pages it
    /// describes. The batch is atomic (one commit: one redo descriptor, verified as a whole
    /// at recovery), ordered after everything written before it, and within it a later
    /// entry for the same LPID wins. A malformed buffer is refused before anything changes.
    ///
    /// Reads are served between commands, never inside one, so a read concurrent with a
    /// batch sees none or all of it: an (empty or full) time-ordered prefix, which meets
    /// the visibility rules (a)-(d) of §3.1.
    pub fn flush_batch(&mut self, buf: &[u8], at: SimTime) -> Result<SimTime, FtlError> {
        let ss = self.geo.sector_size();
        if buf.len() < 2 * ss || !buf.len().is_multiple_of(ss) {
            return Err(FtlError::BadBatch(format!(
                "a batch buffer is a DESC block and at least one {ss}-byte page; got {} bytes",
                buf.len()
            )));
        }
        let desc = csd_sim::wire::BatchDesc::decode(&buf[..ss])?;
        let pages = buf.len() / ss - 1;
        let max = (self.cfg.max_batch_pages as usize).min(csd_sim::wire::BatchDesc::capacity(ss));
        if desc.entries.len() > max {
            return Err(FtlError::BadBatch(format!(
                "{} pages exceed the batch limit of {max}",
                desc.entries.len()
            )));
        }
        for &(lpid, off) in &desc.entries {
            if off == 0 || off as usize > pages {
                return Err(FtlError::BadBatch(format!(
                    "DESC offset {off} is outside the buffer's pages 1..={pages}"
                )));
            }
            if lpid >= self.geo.lbas() {
                return Err(FtlError::BadBatch(format!(
                    "LPID {lpid} is outside the device ({} LPIDs)",
                    self.geo.lbas()
                )));
            }
        }
        self.check_writable()?;
        let r = self.batch_commit(&desc, buf, at);
        let t = self.host_result(r)?;
        self.persist_acknowledged()?;
        Ok(t)
    }

    fn batch_commit(
        &mut self,
        desc: &csd_sim::wire::BatchDesc,
        buf: &[u8],
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        let ss = self.geo.sector_size();
        // Earlier buffered writes come first; then room for the whole batch.
        let mut t = self.commit_inner(false, at)?;
        let blocks_needed = (desc.entries.len() as u32)
            .div_ceil(self.geo.sectors_per_page() * self.geo.pages_per_block())
            + 1;
        self.ensure_free(blocks_needed, t)?;
        for &(lpid, off) in &desc.entries {
            let page = &buf[off as usize * ss..(off as usize + 1) * ss];
            t = t.max(self.buffer_sector(Stream::Hot, lpid, page, NONE, t)?);
        }
        self.counters
            .add(Count::HostWriteSectors, desc.entries.len() as u64);
        self.counters.add(Count::Batches, 1);
        self.commit(t)
    }
}

/// Sectors per write context of a `len`-byte write carried in packets of `packet_bytes`:
/// a sector belongs to the packet that brings its last byte. Every packet completes at
/// least one sector when `packet_bytes >= sector_size`.
pub fn packet_contexts(len: usize, sector_size: usize, packet_bytes: usize) -> Vec<u64> {
    let packets = len.div_ceil(packet_bytes.max(1));
    let mut out = vec![0u64; packets];
    for i in 0..len / sector_size.max(1) {
        let last_byte = (i + 1) * sector_size - 1;
        out[last_byte / packet_bytes.max(1)] += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::packet_contexts;
    use proptest::prelude::*;

    #[test]
    fn a_mebibyte_crosses_nvmeof_tcp_as_the_papers_17_packets() {
        let c = packet_contexts(1 << 20, 4096, 65_512);
        assert_eq!(c.len(), 17);
        assert_eq!(c.iter().sum::<u64>(), 256);
        assert_eq!(c[0], 15, "65,512 bytes complete 15 sectors");
        assert_eq!(
            *c.last().unwrap(),
            1,
            "the 384-byte tail completes the last sector"
        );
    }

    proptest! {
        #[test]
        fn every_packet_completes_a_sector_and_every_sector_is_counted_once(
            sectors in 1usize..600,
            ss in prop::sample::select(vec![512usize, 4096]),
            extra in 0usize..70_000,
        ) {
            let len = sectors * ss;
            let pb = ss + extra;
            let c = packet_contexts(len, ss, pb);
            prop_assert_eq!(c.len(), len.div_ceil(pb));
            prop_assert_eq!(c.iter().sum::<u64>(), sectors as u64);
            prop_assert!(c.iter().all(|&n| n >= 1));
        }
    }
}
