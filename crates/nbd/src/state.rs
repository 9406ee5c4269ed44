//! The device behind the server and the translation of NBD requests into device
//! commands: splitting at the device's transfer limit (MDTS), read-modify-write of
//! partial LBAs, FUA as a trailing Flush, and the per-command-type counters.

use crate::proto::{self, Request};
use csd_device::{Command, Completion, NvmeDevice, Payload, QueueId, Status};
use csd_sim::SimTime;
use csd_sim::events::{self, Counters, Graph};
use std::ops::Range;

/// Counters of one NBD command type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpStats {
    /// Requests executed.
    pub count: u64,
    /// Bytes they covered.
    pub bytes: u64,
    /// Requests that got an error reply.
    pub errors: u64,
    /// Sum of their modeled latencies (completion - submission), ns.
    pub modeled_ns: u64,
}

impl OpStats {
    /// Mean modeled latency in microseconds (0 if none ran).
    pub fn mean_modeled_us(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.modeled_ns as f64 / self.count as f64 / 1e3
        }
    }

    fn add(&mut self, bytes: u64, error: bool, latency_ns: u64) {
        self.count += 1;
        self.bytes += bytes;
        self.errors += error as u64;
        self.modeled_ns += latency_ns;
    }
}

/// What the server has done since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ServerStats {
    /// Connections accepted.
    pub connections_total: u64,
    /// Connections open now.
    pub connections_open: u64,
    /// Connections dropped for a protocol violation.
    pub protocol_errors: u64,
    /// Connections in the handshake now (they hold no queue pair), as the accept loop
    /// last counted them.
    pub handshakes_pending: u64,
    /// Connections dropped for not finishing the handshake within the handshake timeout.
    pub handshake_timeouts: u64,
    /// Connections dropped in the handshake because a new one arrived while the
    /// handshake limit was reached (the oldest goes).
    pub handshakes_evicted: u64,
    /// Requests to enter transmission refused because every transmission slot was
    /// taken (`NBD_REP_ERR_POLICY`, or a hang-up after `NBD_OPT_EXPORT_NAME`).
    pub refused_busy: u64,
    /// Connections closed after the idle timeout.
    pub idle_closed: u64,
    /// READ requests.
    pub reads: OpStats,
    /// WRITE requests.
    pub writes: OpStats,
    /// FLUSH requests.
    pub flushes: OpStats,
    /// TRIM requests.
    pub trims: OpStats,
    /// WRITE_ZEROES requests.
    pub zeroes: OpStats,
    /// Requests refused before reaching the device (bad range, flags, size, read-only).
    pub refused: u64,
    /// The server's modeled clock: the latest completion of any request.
    pub modeled_now: SimTime,
}

/// The result of one request.
pub(crate) struct Outcome {
    /// NBD error value (0 on success).
    pub error: u32,
    /// For a successful READ: a buffer and the range of it to send.
    pub data: Option<(Vec<u8>, Range<usize>)>,
    /// Modeled completion (on the event core in paced mode, a lower bound until the
    /// core fixes it: see `ticket`).
    pub done: SimTime,
    /// On the event core in paced mode: the request's place among those whose completion
    /// the core has not fixed yet ([`DeviceState::fix`]).
    pub ticket: Option<usize>,
}

/// A request executed on the event core whose completion is not fixed yet (paced): what
/// its accounting needs once it is.
struct Waiting {
    done: SimTime,
    at: SimTime,
    /// The NBD command; `None` for the server's own admin command (not in the request
    /// statistics).
    kind: Option<u16>,
    bytes: u64,
    error: bool,
}

/// The event core of a server (issue 30): the graph every connection's commands record
/// into, and the requests waiting for their completions.
pub(crate) struct Core {
    /// `None` only while a request records into it.
    graph: Option<Graph>,
    waiting: Vec<Option<Waiting>>,
    /// The latest submission instant (paced): submissions reach the core in order.
    last_at: SimTime,
    /// Requests executed: the order key of their stages.
    seq: u64,
}

impl Core {
    /// Keep `w` until its completion is fixed; its ticket.
    fn wait(&mut self, w: Waiting) -> usize {
        match self.waiting.iter().position(Option::is_none) {
            Some(i) => {
                self.waiting[i] = Some(w);
                i
            }
            None => {
                self.waiting.push(Some(w));
                self.waiting.len() - 1
            }
        }
    }

    /// A core with an empty graph.
    pub(crate) fn new() -> Core {
        Core {
            graph: Some(Graph::new()),
            waiting: Vec::new(),
            last_at: SimTime::ZERO,
            seq: 0,
        }
    }
}

/// The device and what goes with it, behind the server's mutex.
pub(crate) struct DeviceState {
    pub nvme: NvmeDevice,
    /// Latest modeled completion of a request (the virtual clock).
    pub clock: SimTime,
    /// Bytes per LBA.
    pub lba: u64,
    /// Largest transfer of one Read or Write command, in LBAs.
    pub mdts: u64,
    /// Commands submitted on a queue pair before they are processed and reaped.
    pub depth: usize,
    pub stats: ServerStats,
    /// The device's first refusal of a write (it turned read-only: worn out, spares
    /// used up, image file system full, memory limit) was logged on stderr.
    pub refusal_noted: bool,
    /// The event core (time model `events`); `None` on calendars.
    pub core: Option<Core>,
}

/// Map a device status to an NBD error value.
pub(crate) fn errno(s: &Status) -> u32 {
    match s {
        Status::Success => 0,
        Status::InvalidField(_) | Status::LbaOutOfRange(_) | Status::InvalidOpcode(_) => {
            proto::EINVAL
        }
        Status::CapacityExceeded(_) => proto::ENOSPC,
        // A read-only namespace (opened so, or a drive at its end of life): NBD's answer
        // to a write on a read-only export.
        Status::WriteProtected(_) => proto::EPERM,
        _ => proto::EIO,
    }
}

impl DeviceState {
    /// Submit `cmds` on `qid` at `at`, `depth` at a time, process and reap them; `each`
    /// sees every completion in order. Stops at the first failure. Returns the first
    /// failure (if any) and the latest completion.
    fn run(
        &mut self,
        qid: QueueId,
        cmds: impl IntoIterator<Item = Command>,
        at: SimTime,
        mut each: impl FnMut(Completion),
    ) -> (Option<Status>, SimTime) {
        let mut it = cmds.into_iter();
        let mut done = at;
        let mut failed = None;
        while failed.is_none() {
            let mut n = 0;
            for cmd in it.by_ref() {
                match self.nvme.submit(qid, cmd, at) {
                    Ok(_) => n += 1,
                    Err(s) => {
                        failed = Some(s);
                        break;
                    }
                }
                if n == self.depth {
                    break;
                }
            }
            if n == 0 {
                break;
            }
            self.nvme.process();
            for _ in 0..n {
                let Some(c) = self.nvme.poll(qid) else {
                    failed.get_or_insert(Status::InternalError("a completion is missing".into()));
                    break;
                };
                done = done.max(c.acct.completed);
                if !c.status.is_success() {
                    failed.get_or_insert(c.status.clone());
                }
                each(c);
            }
        }
        (failed, done)
    }

    /// Read whole LBAs `first..end` into one buffer.
    fn read_lbas(
        &mut self,
        qid: QueueId,
        first: u64,
        end: u64,
        at: SimTime,
    ) -> (Result<Vec<u8>, Status>, SimTime) {
        let mdts = self.mdts;
        let cmds = (first..end)
            .step_by(mdts as usize)
            .map(move |l| Command::Read {
                lba: l,
                blocks: (end - l).min(mdts) as u32,
            });
        let mut out: Option<Vec<u8>> = None;
        let bytes = ((end - first) * self.lba) as usize;
        let (failed, done) = self.run(qid, cmds, at, |c| {
            if let Payload::Data(d) = c.payload {
                match &mut out {
                    None => out = Some(d),
                    Some(o) => {
                        o.reserve(bytes.saturating_sub(o.len()));
                        o.extend_from_slice(&d)
                    }
                }
            }
        });
        match (failed, out) {
            (Some(s), _) => (Err(s), done),
            (None, Some(d)) if d.len() == bytes => (Ok(d), done),
            (None, _) => (
                Err(Status::InternalError("a read returned no data".into())),
                done,
            ),
        }
    }

    /// Write whole LBAs from `first`: `buf` holds a whole number of them.
    fn write_lbas(
        &mut self,
        qid: QueueId,
        first: u64,
        mut buf: Vec<u8>,
        at: SimTime,
    ) -> (Option<Status>, SimTime) {
        let chunk = (self.mdts * self.lba) as usize;
        if buf.len() <= chunk {
            return self.run(
                qid,
                [Command::Write {
                    lba: first,
                    data: buf,
                }],
                at,
                drop,
            );
        }
        // Split from the back so that each chunk is moved out of `buf` once.
        let n = buf.len().div_ceil(chunk);
        let mut cmds = Vec::with_capacity(n);
        for i in (0..n).rev() {
            let start = i * chunk;
            cmds.push(Command::Write {
                lba: first + start as u64 / self.lba,
                data: buf.split_off(start),
            });
        }
        cmds.reverse();
        self.run(qid, cmds, at, drop)
    }

    /// Write `data` at byte `offset`, reading and merging partial edge LBAs first.
    fn write_bytes(
        &mut self,
        qid: QueueId,
        offset: u64,
        data: Vec<u8>,
        at: SimTime,
    ) -> (Option<Status>, SimTime) {
        let ls = self.lba;
        let len = data.len() as u64;
        let (first, end) = (offset / ls, (offset + len).div_ceil(ls));
        let head = (offset % ls) as usize;
        if head == 0 && len.is_multiple_of(ls) {
            return self.write_lbas(qid, first, data, at);
        }
        // Read the LBAs the write only partly covers, merge, write whole LBAs.
        let mut buf = vec![0u8; ((end - first) * ls) as usize];
        let mut edges = vec![first];
        if end - 1 != first {
            edges.push(end - 1);
        }
        let covered = |l: u64| offset <= l * ls && (l + 1) * ls <= offset + len;
        let mut t = at;
        for l in edges.into_iter().filter(|&l| !covered(l)) {
            let (r, done) = self.read_lbas(qid, l, l + 1, at);
            t = t.max(done);
            match r {
                Ok(d) => {
                    let at_buf = ((l - first) * ls) as usize;
                    buf[at_buf..at_buf + ls as usize].copy_from_slice(&d);
                }
                Err(s) => return (Some(s), t),
            }
        }
        buf[head..head + data.len()].copy_from_slice(&data);
        self.write_lbas(qid, first, buf, t)
    }

    /// Unmap the whole LBAs `first..end` (nothing if empty).
    fn trim_lbas(
        &mut self,
        qid: QueueId,
        first: u64,
        end: u64,
        at: SimTime,
    ) -> (Option<Status>, SimTime) {
        if first >= end {
            return (None, at);
        }
        let cmd = Command::Trim {
            lba: first,
            blocks: end - first,
        };
        self.run(qid, [cmd], at, drop)
    }

    /// Zero `len` bytes at `offset`: partial edges by read-modify-write, whole LBAs by
    /// trim (they read as zeros) or, with `no_hole`, by writing zeros.
    fn zero_bytes(
        &mut self,
        qid: QueueId,
        offset: u64,
        len: u64,
        no_hole: bool,
        at: SimTime,
    ) -> (Option<Status>, SimTime) {
        let ls = self.lba;
        let end = offset + len;
        let (full_first, full_end) = (offset.div_ceil(ls), end / ls);
        if full_first >= full_end {
            // No whole LBA inside: at most two partial ones.
            return self.write_bytes(qid, offset, vec![0; len as usize], at);
        }
        let mut t = at;
        let mut pieces = Vec::new();
        if offset < full_first * ls {
            pieces.push((offset, full_first * ls - offset));
        }
        if full_end * ls < end {
            pieces.push((full_end * ls, end - full_end * ls));
        }
        for (o, n) in pieces {
            let (f, done) = self.write_bytes(qid, o, vec![0; n as usize], at);
            t = t.max(done);
            if f.is_some() {
                return (f, t);
            }
        }
        let (f, done) = if no_hole {
            let mdts = self.mdts;
            let cmds = (full_first..full_end)
                .step_by(mdts as usize)
                .map(move |l| Command::Write {
                    lba: l,
                    data: vec![0; ((full_end - l).min(mdts) * ls) as usize],
                });
            self.run(qid, cmds, at, drop)
        } else {
            self.trim_lbas(qid, full_first, full_end, at)
        };
        (f, t.max(done))
    }

    /// Execute a request that passed the session's checks. `payload` is a WRITE's data;
    /// `at` is the submission instant in paced mode (`None`: the virtual clock). On the
    /// event core in virtual mode the completion is fixed at once (requests run one at
    /// a time in modeled time); in paced mode it is left to [`DeviceState::fix`], since
    /// the core may book only what arrives by the wall clock's instant.
    ///
    /// `next`, the offset of the request that follows in the connection's buffer, hints
    /// the CPU caches with that byte's MAP entry first, so that its miss overlaps this
    /// request's work: a write looks up the MAP entry of every LBA it replaces, and on
    /// random offsets that load missed the caches (9% of `csd serve`'s thread under fio
    /// randwrite, perf 2026-12-07). A hint changes no state, counter or modeled time.
    pub fn execute(
        &mut self,
        qid: QueueId,
        req: &Request,
        payload: Vec<u8>,
        at: Option<SimTime>,
        next: Option<u64>,
    ) -> Outcome {
        if let Some(offset) = next {
            use csd_device::IoTarget;
            self.nvme
                .block()
                .prefetch_read(offset, csd_device::PrefetchStage::Map);
        }
        if self.core.is_none() {
            let at = at.unwrap_or(self.clock);
            let (failed, done, data) = self.run_request(qid, req, payload, at);
            return self.account(req.kind, req.length as u64, failed, at, done, data);
        }
        let paced = at.is_some();
        let (failed, at, done, data, ticket) = self.on_core(|st, core| {
            // Paced submissions are taken in order of their instants.
            let at = at.map_or(st.clock, |a| a.max(core.last_at));
            core.last_at = at;
            core.seq += 1;
            events::set_order(core.seq);
            let (failed, done, data) = st.run_request(qid, req, payload, at);
            if paced {
                let ticket = core.wait(Waiting {
                    done,
                    at,
                    kind: Some(req.kind),
                    bytes: req.length as u64,
                    error: failed.is_some(),
                });
                (failed, at, SimTime::from_ns(done.ns()), data, Some(ticket))
            } else {
                let done = st.nvme.resolve(done);
                (failed, at, done, data, None)
            }
        });
        if let Some(ticket) = ticket {
            self.note_refusal(&failed);
            let error = failed.as_ref().map_or(0, errno);
            return Outcome {
                error,
                data: if error == 0 { data } else { None },
                done,
                ticket: Some(ticket),
            };
        }
        self.account(req.kind, req.length as u64, failed, at, done, data)
    }

    /// Whether the completion of the request with `ticket` ends by `now` (paced, on the
    /// event core): its final value (the request then counts in the statistics), or a
    /// lower bound of it (at least `now`) as the error.
    pub fn fix(&mut self, ticket: usize, now: SimTime) -> Result<SimTime, SimTime> {
        let fixed = self.on_core(|st, core| {
            // Later submissions are taken at or after the instant booked up to.
            core.last_at = core.last_at.max(now);
            let Some(w) = core.waiting.get_mut(ticket).and_then(Option::take) else {
                debug_assert!(false, "no waiting request {ticket}");
                return Ok((now, None));
            };
            if st.nvme.at_or_before(w.done, now) {
                let done = st.nvme.resolve(w.done);
                Ok((done, Some(w)))
            } else {
                let lower = SimTime::from_ns(w.done.ns().max(now.ns()));
                core.waiting[ticket] = Some(w);
                Err(lower)
            }
        })?;
        if let (done, Some(w)) = fixed
            && let Some(kind) = w.kind
        {
            self.count(kind, w.bytes, w.error, w.at, done);
        }
        Ok(fixed.0)
    }

    /// Run the server's own command `cmd` (SMART, the shutdown Flush) on queue pair
    /// `qid` on the event core, submitted like a request: at the wall clock's instant
    /// `at` (paced, in order with the requests; then a ticket to wait on with
    /// [`DeviceState::fix`]), or at the virtual clock, its completion fixed at once and
    /// the clock moved to it. Booking everything first instead
    /// ([`DeviceState::settle`]) would book past the wall clock's instant, and the
    /// requests that follow would arrive behind it (57 late arrivals in a 4 s paced fio
    /// run with the stats file written every second, before this).
    pub fn admin_on_core(
        &mut self,
        qid: QueueId,
        cmd: Command,
        at: Option<SimTime>,
    ) -> Result<(Completion, Option<usize>), Status> {
        let paced = at.is_some();
        let out = self.on_core(|st, core| {
            let at = at.map_or(st.clock, |a| a.max(core.last_at));
            core.last_at = at;
            core.seq += 1;
            events::set_order(core.seq);
            st.nvme.submit(qid, cmd, at)?;
            st.nvme.process();
            let mut c = st
                .nvme
                .poll(qid)
                .ok_or_else(|| Status::InternalError("admin completion missing".into()))?;
            if paced {
                let ticket = core.wait(Waiting {
                    done: c.acct.completed,
                    at,
                    kind: None,
                    bytes: 0,
                    error: false,
                });
                c.acct.completed = SimTime::from_ns(c.acct.completed.ns());
                Ok((c, Some(ticket)))
            } else {
                c.acct.completed = st.nvme.resolve(c.acct.completed);
                Ok((c, None))
            }
        });
        if let Ok((c, None)) = &out {
            self.clock = self.clock.max(c.acct.completed);
        }
        out
    }

    /// A waiting request whose reply will not be sent (its connection ended first): its
    /// completion fixed now, booking as far as needed (a later submission that arrives
    /// before what this books counts as a late arrival), and counted.
    pub fn abandon(&mut self, ticket: usize) {
        let fixed = self.on_core(|st, core| {
            let w = core.waiting.get_mut(ticket).and_then(Option::take)?;
            let done = st.nvme.resolve(w.done);
            Some((done, w))
        });
        if let Some((done, w)) = fixed
            && let Some(kind) = w.kind
        {
            self.count(kind, w.bytes, w.error, w.at, done);
        }
    }

    /// The event core's counters (`None` on calendars).
    pub fn event_counters(&self) -> Option<Counters> {
        self.core
            .as_ref()
            .and_then(|c| c.graph.as_ref())
            .map(Graph::counters)
    }

    /// Book every stage the event core holds and fix every instant the device and the
    /// waiting requests keep: before the device is used outside a request (admin
    /// commands, inspection, hand-back). Nothing on calendars.
    pub fn settle(&mut self) {
        if self.core.is_none() {
            return;
        }
        self.on_core(|st, core| {
            events::run_all(&mut st.nvme);
            st.nvme.settle_instants(&mut events::value);
            for w in core.waiting.iter_mut().flatten() {
                w.done = events::value(w.done);
            }
        });
    }

    /// Run `f` with this thread recording into the core's graph, compacting it after
    /// when due.
    fn on_core<T>(&mut self, f: impl FnOnce(&mut DeviceState, &mut Core) -> T) -> T {
        let mut core = self.core.take().expect("on the event core");
        let graph = core.graph.take().unwrap_or_default();
        let mut state = (&mut *self, &mut core);
        let (out, graph) = events::record_with(
            graph,
            &mut state,
            |(st, core)| f(st, core),
            |(st, core), rename| {
                st.nvme.settle_instants(rename);
                for w in core.waiting.iter_mut().flatten() {
                    w.done = rename(w.done);
                }
            },
        );
        core.graph = Some(graph);
        self.core = Some(core);
        out
    }

    /// The device work of a request at `at`: its failure, completion and data.
    #[allow(clippy::type_complexity)]
    fn run_request(
        &mut self,
        qid: QueueId,
        req: &Request,
        payload: Vec<u8>,
        at: SimTime,
    ) -> (Option<Status>, SimTime, Option<(Vec<u8>, Range<usize>)>) {
        let ls = self.lba;
        let (off, len) = (req.offset, req.length as u64);
        let fua = req.flags & proto::CMD_FLAG_FUA != 0;
        let mut data = None;
        let (failed, mut done) = match req.kind {
            proto::CMD_READ if len == 0 => (None, at),
            proto::CMD_READ => {
                let (first, end) = (off / ls, (off + len).div_ceil(ls));
                match self.read_lbas(qid, first, end, at) {
                    (Ok(buf), t) => {
                        let start = (off - first * ls) as usize;
                        data = Some((buf, start..start + len as usize));
                        (None, t)
                    }
                    (Err(s), t) => (Some(s), t),
                }
            }
            proto::CMD_WRITE if len == 0 => (None, at),
            proto::CMD_WRITE => self.write_bytes(qid, off, payload, at),
            proto::CMD_FLUSH => self.run(qid, [Command::Flush], at, drop),
            proto::CMD_TRIM => self.trim_lbas(qid, off.div_ceil(ls), (off + len) / ls, at),
            proto::CMD_WRITE_ZEROES if len == 0 => (None, at),
            proto::CMD_WRITE_ZEROES => {
                let no_hole = req.flags & proto::CMD_FLAG_NO_HOLE != 0;
                self.zero_bytes(qid, off, len, no_hole, at)
            }
            _ => (
                Some(Status::InvalidOpcode(format!("NBD command {}", req.kind))),
                at,
            ),
        };
        let mut failed = failed;
        if failed.is_none() && fua && req.kind != proto::CMD_READ {
            let (f, t) = self.run(qid, [Command::Flush], done, drop);
            failed = f;
            done = done.max(t);
        }
        (failed, done, data)
    }

    /// Log the device's first refusal of writes.
    fn note_refusal(&mut self, failed: &Option<Status>) {
        if let Some(Status::WriteProtected(m)) = failed
            && !self.refusal_noted
        {
            // Clients only see EPERM; the server's log says why, once.
            self.refusal_noted = true;
            eprintln!("the device refuses writes from now on (reads go on): {m}");
        }
    }

    /// Count a request of `kind` over `bytes` submitted at `at` and completed at `done`
    /// (final) in the statistics and the clock.
    fn count(&mut self, kind: u16, bytes: u64, error: bool, at: SimTime, done: SimTime) {
        self.clock = self.clock.max(done);
        self.stats.modeled_now = self.clock;
        let lat = done.since(at);
        let s = &mut self.stats;
        let op = match kind {
            proto::CMD_READ => &mut s.reads,
            proto::CMD_WRITE => &mut s.writes,
            proto::CMD_FLUSH => &mut s.flushes,
            proto::CMD_TRIM => &mut s.trims,
            _ => &mut s.zeroes,
        };
        op.add(bytes, error, lat);
    }

    /// Account a request whose completion is final and make its outcome.
    fn account(
        &mut self,
        kind: u16,
        bytes: u64,
        failed: Option<Status>,
        at: SimTime,
        done: SimTime,
        data: Option<(Vec<u8>, Range<usize>)>,
    ) -> Outcome {
        self.note_refusal(&failed);
        let error = failed.as_ref().map_or(0, errno);
        self.count(kind, bytes, error != 0, at, done);
        Outcome {
            error,
            data: if error == 0 { data } else { None },
            done,
            ticket: None,
        }
    }
}
