//! One connection: the fixed-newstyle negotiation, then the transmission phase. With the
//! virtual clock one thread reads, executes and answers each request, and flushes the
//! replies only when no further request is already buffered (pipelined requests then
//! cost no thread switch each); with the paced clock a scoped writer thread holds each
//! reply until the wall clock reaches its modeled completion.
//!
//! Everything read from the peer goes through [`read_full`] / [`read_payload`] /
//! [`discard`], which stop at end of stream, and through the parsers of
//! [`crate::proto`]; lengths taken from the wire never size an allocation beyond
//! [`MAX_OPTION_BYTES`] or [`MAX_PAYLOAD_BYTES`]. A finite input therefore always ends the
//! session, whatever it holds.

use crate::NbdError;
use crate::proto::{self, *};
use crate::server::{Conn, QueuePair, Refusal, Shared};
use csd_sim::{Pacer, SimTime};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, BufReader, BufWriter, IoSlice, Read, Write};
use std::ops::Range;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::time::{Duration, Instant};

/// Read exactly `buf.len()` bytes; `Ok(false)` if the stream ends first (before or in
/// the middle: either way the peer is gone and nothing partial is acted on).
pub(crate) fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => return Ok(false),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Read `len` bytes of payload into `out`; `Ok(false)` if the stream ends first. The
/// buffer grows with the data actually received, so a peer that announces a large
/// payload and sends little costs little.
pub(crate) fn read_payload(r: &mut impl Read, len: u32, out: &mut Vec<u8>) -> io::Result<bool> {
    out.clear();
    out.reserve((len as usize).min(1 << 20));
    let got = r.take(len as u64).read_to_end(out)?;
    Ok(got == len as usize)
}

/// Skip `len` bytes; `Ok(false)` if the stream ends first.
pub(crate) fn discard(r: &mut impl Read, len: u64) -> io::Result<bool> {
    let got = io::copy(&mut r.take(len), &mut io::sink())?;
    Ok(got == len)
}

/// Serve one connection until the peer disconnects, aborts, or breaks the protocol.
pub(crate) fn run<R: Read, W: Write + Send>(
    shared: &Shared,
    conn: &Conn,
    r: R,
    w: W,
) -> Result<(), NbdError> {
    let mut r = BufReader::with_capacity(256 << 10, r);
    let mut w = BufWriter::with_capacity(256 << 10, w);
    let Some(q) = negotiate(shared, conn, &mut r, &mut w)? else {
        return Ok(());
    };
    if shared.pacer.wall_deadline(SimTime::ZERO).is_none() {
        let mut sink = Direct {
            w,
            conn,
            pending: Vec::new(),
            pending_bytes: 0,
        };
        let read = read_requests(shared, conn, &q, &mut r, &mut sink);
        let flushed = sink.idle();
        read?;
        return Ok(flushed?);
    }
    transmission(shared, conn, &q, r, w)
}

/// Where the reader puts replies.
trait Sink {
    /// Take a reply; `Ok(false)` when the peer no longer takes replies.
    fn put(&mut self, reply: Reply) -> io::Result<bool>;
    /// The reader is about to wait for input: send what is pending.
    fn idle(&mut self) -> io::Result<()>;
}

/// Virtual clock: replies are gathered and written together, each header and each
/// READ's data straight from the buffer the device filled (one vectored write, no copy
/// into the connection's buffer: at 4 KiB random reads that copy was a tenth of the
/// server thread's time).
struct Direct<'c, W: Write> {
    /// The connection (its buffer holds only what the handshake left).
    w: BufWriter<W>,
    conn: &'c Conn,
    /// Replies not written yet, in order.
    pending: Vec<Reply>,
    /// Their bytes on the wire.
    pending_bytes: usize,
}

/// Replies gathered at most before they are written (two slices each, within the
/// system's limit of 1024 per vectored write), and bytes.
const PENDING_REPLIES: usize = 256;
const PENDING_BYTES: usize = 256 << 10;

impl<W: Write> Direct<'_, W> {
    /// Write the gathered replies, in order.
    fn send(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.w.flush()?;
        let heads: Vec<[u8; SIMPLE_REPLY_BYTES]> = self
            .pending
            .iter()
            .map(|r| proto::simple_reply(r.error, r.cookie))
            .collect();
        let mut iov = Vec::with_capacity(2 * heads.len());
        for (r, h) in self.pending.iter().zip(&heads) {
            iov.push(IoSlice::new(h));
            if let Some(d) = reply_data(r) {
                iov.push(IoSlice::new(d));
            }
        }
        write_all_vectored(self.w.get_mut(), &mut iov)?;
        for _ in self.pending.drain(..) {
            self.conn.request_done();
        }
        self.pending_bytes = 0;
        Ok(())
    }
}

impl<W: Write> Sink for Direct<'_, W> {
    fn put(&mut self, reply: Reply) -> io::Result<bool> {
        self.pending_bytes += SIMPLE_REPLY_BYTES + reply_data(&reply).map_or(0, <[u8]>::len);
        self.pending.push(reply);
        if self.pending.len() >= PENDING_REPLIES || self.pending_bytes >= PENDING_BYTES {
            self.send()?;
        }
        Ok(true)
    }
    fn idle(&mut self) -> io::Result<()> {
        self.send()?;
        self.w.flush()
    }
}

/// The data a reply carries on the wire (a successful READ's).
fn reply_data(r: &Reply) -> Option<&[u8]> {
    match (r.error, &r.data) {
        (0, Some((buf, range))) => Some(buf.get(range.clone()).unwrap_or_default()),
        _ => None,
    }
}

/// Write every byte of `iov` (vectored writes, continued after short ones).
fn write_all_vectored(w: &mut impl Write, mut iov: &mut [IoSlice<'_>]) -> io::Result<()> {
    while !iov.is_empty() {
        match w.write_vectored(iov) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut iov, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Paced clock: replies go to the writer thread, which holds them for their deadlines.
struct ToWriter<'s> {
    tx: SyncSender<Reply>,
    /// Where a reply the writer no longer takes hands back its ticket (event core).
    shared: &'s Shared,
}

impl Sink for ToWriter<'_> {
    fn put(&mut self, reply: Reply) -> io::Result<bool> {
        match self.tx.send(reply) {
            Ok(()) => Ok(true),
            Err(mpsc::SendError(reply)) => {
                if let Some(ticket) = reply.ticket {
                    self.shared.lock().abandon(ticket);
                }
                Ok(false)
            }
        }
    }
    fn idle(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn opt_reply(w: &mut impl Write, option: u32, reply: u32, data: &[u8]) -> io::Result<()> {
    w.write_all(&proto::option_reply(option, reply, data))
}

/// The handshake and option haggling. Returns the connection's queue pair when the
/// client enters transmission, `None` when the session ends here.
fn negotiate<'s, R: Read, W: Write>(
    shared: &'s Shared,
    conn: &Conn,
    r: &mut R,
    w: &mut W,
) -> Result<Option<QueuePair<'s>>, NbdError> {
    w.write_all(&proto::greeting())?;
    w.flush()?;
    let mut b4 = [0u8; 4];
    if !read_full(r, &mut b4)? {
        return Ok(None);
    }
    let cflags = proto::parse_client_flags(&b4)?;
    let fixed = cflags & FLAG_C_FIXED_NEWSTYLE != 0;
    let no_zeroes = cflags & FLAG_C_NO_ZEROES != 0;
    let mut data = Vec::new();
    loop {
        let mut hb = [0u8; OPTION_HEADER_BYTES];
        if !read_full(r, &mut hb)? {
            return Ok(None);
        }
        let h = OptionHeader::parse(&hb)?;
        let opt = h.option;
        if h.length > MAX_OPTION_BYTES {
            if !discard(r, h.length as u64)? || opt == OPT_EXPORT_NAME {
                // EXPORT_NAME cannot be answered with an error: end the session.
                return Ok(None);
            }
            let msg = format!("option data of {} bytes is too long", h.length);
            opt_reply(w, opt, REP_ERR_TOO_BIG, msg.as_bytes())?;
            w.flush()?;
            continue;
        }
        if !read_payload(r, h.length, &mut data)? {
            return Ok(None);
        }
        if !fixed && opt != OPT_EXPORT_NAME {
            // Plain newstyle knows no other option, and no way to refuse one.
            return Ok(None);
        }
        if shared.stopping() && opt != OPT_ABORT {
            if opt == OPT_EXPORT_NAME {
                return Ok(None);
            }
            opt_reply(w, opt, REP_ERR_SHUTDOWN, b"the server is shutting down")?;
            w.flush()?;
            continue;
        }
        match answer_option(shared, conn, w, opt, &data, no_zeroes)? {
            Next::Continue => w.flush()?,
            Next::End => return Ok(None),
            Next::Transmit(q) => return Ok(Some(q)),
        }
    }
}

/// What answering one option did to the negotiation.
enum Next<'s> {
    /// Wait for the next option.
    Continue,
    /// The session ends here.
    End,
    /// The client enters transmission on this queue pair.
    Transmit(QueuePair<'s>),
}

/// Answer option `opt` with its data (the server is not stopping, the data is read).
fn answer_option<'s, W: Write>(
    shared: &'s Shared,
    conn: &Conn,
    w: &mut W,
    opt: u32,
    data: &[u8],
    no_zeroes: bool,
) -> Result<Next<'s>, NbdError> {
    let ex = &shared.export;
    match opt {
        OPT_EXPORT_NAME => {
            if !ex.answers_to(data) {
                return Ok(Next::End);
            }
            // No error reply is possible here: a refused client is hung up on.
            let Ok(q) = shared.open_queue(conn) else {
                return Ok(Next::End);
            };
            w.write_all(&proto::export_name_reply(ex.size, ex.flags, no_zeroes))?;
            w.flush()?;
            return Ok(Next::Transmit(q));
        }
        OPT_ABORT => {
            // The client may already have closed; the reply is a courtesy.
            let _ = opt_reply(w, opt, REP_ACK, &[]).and_then(|_| w.flush());
            return Ok(Next::End);
        }
        OPT_LIST if !data.is_empty() => {
            opt_reply(w, opt, REP_ERR_INVALID, b"NBD_OPT_LIST takes no data")?;
        }
        OPT_LIST => {
            let mut d = (ex.name.len() as u32).to_be_bytes().to_vec();
            d.extend_from_slice(ex.name.as_bytes());
            d.extend_from_slice(ex.description.as_bytes());
            opt_reply(w, opt, REP_SERVER, &d)?;
            opt_reply(w, opt, REP_ACK, &[])?;
        }
        OPT_INFO | OPT_GO => return answer_info(shared, conn, w, opt, data),
        OPT_STRUCTURED_REPLY => {
            let msg = b"structured replies are not supported: this server sends simple replies";
            opt_reply(w, opt, REP_ERR_UNSUP, msg)?;
        }
        _ => {
            let msg = format!("option {opt} is not supported");
            opt_reply(w, opt, REP_ERR_UNSUP, msg.as_bytes())?;
        }
    }
    Ok(Next::Continue)
}

/// NBD_OPT_INFO and NBD_OPT_GO: the export's size, flags, the name and description if
/// asked for, and the block sizes; GO then enters transmission.
fn answer_info<'s, W: Write>(
    shared: &'s Shared,
    conn: &Conn,
    w: &mut W,
    opt: u32,
    data: &[u8],
) -> Result<Next<'s>, NbdError> {
    let ex = &shared.export;
    let i = match InfoRequest::parse(data) {
        None => {
            let msg = b"malformed NBD_OPT_INFO/NBD_OPT_GO data";
            opt_reply(w, opt, REP_ERR_INVALID, msg)?;
            return Ok(Next::Continue);
        }
        Some(i) if !ex.answers_to(&i.name) => {
            let msg = format!(
                "no export named {:?}; this server has {:?} (or use the default, empty name)",
                String::from_utf8_lossy(&i.name),
                ex.name
            );
            opt_reply(w, opt, REP_ERR_UNKNOWN, msg.as_bytes())?;
            return Ok(Next::Continue);
        }
        Some(i) => i,
    };
    let q = if opt == OPT_GO {
        match shared.open_queue(conn) {
            Ok(q) => Some(q),
            Err(Refusal::Busy(msg) | Refusal::Device(msg)) => {
                // The client may ask again (or go away); the handshake timeout still runs.
                opt_reply(w, opt, REP_ERR_POLICY, msg.as_bytes())?;
                return Ok(Next::Continue);
            }
            Err(Refusal::Closed) => return Ok(Next::End),
        }
    } else {
        None
    };
    let info = |d: Vec<u8>| proto::option_reply(opt, REP_INFO, &d);
    w.write_all(&info(proto::info_export(ex.size, ex.flags)))?;
    if i.requests.contains(&INFO_NAME) {
        w.write_all(&info(proto::info_string(INFO_NAME, ex.name.as_bytes())))?;
    }
    if i.requests.contains(&INFO_DESCRIPTION) {
        let d = proto::info_string(INFO_DESCRIPTION, ex.description.as_bytes());
        w.write_all(&info(d))?;
    }
    w.write_all(&info(proto::info_block_size(
        1,
        ex.preferred_block,
        MAX_PAYLOAD_BYTES,
    )))?;
    opt_reply(w, opt, REP_ACK, &[])?;
    w.flush()?;
    Ok(q.map_or(Next::Continue, Next::Transmit))
}

/// Replies handed to a connection's writer and not yet taken by it.
const REPLIES_QUEUED: usize = 64;
/// Replies a paced writer holds for their deadlines; beyond this it takes no more from
/// the reader, which then waits.
const REPLIES_HELD: usize = 1024;

/// A reply on its way to the writer.
pub(crate) struct Reply {
    cookie: u64,
    error: u32,
    data: Option<(Vec<u8>, Range<usize>)>,
    /// Modeled completion (the wall-clock deadline in paced mode).
    done: SimTime,
    /// On the event core in paced mode: the completion is not fixed yet (`done` is a
    /// lower bound) and this is the request's ticket ([`DeviceState::fix`]).
    ///
    /// [`DeviceState::fix`]: crate::state::DeviceState::fix
    ticket: Option<usize>,
}

fn transmission<R: Read, W: Write + Send>(
    shared: &Shared,
    conn: &Conn,
    q: &QueuePair<'_>,
    mut r: BufReader<R>,
    w: W,
) -> Result<(), NbdError> {
    // Bounded: a client that sends requests without reading the replies stalls its own
    // reader instead of piling up replies (READ replies carry up to 32 MiB) here.
    let (tx, rx) = mpsc::sync_channel::<Reply>(REPLIES_QUEUED);
    let pacer = shared.pacer.clone();
    std::thread::scope(|s| {
        let writer = s.spawn(move || write_replies(w, rx, &pacer, conn, shared));
        let read = read_requests(shared, conn, q, &mut r, &mut ToWriter { tx, shared });
        let wrote = writer
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the reply writer panicked")));
        read?;
        wrote?;
        Ok(())
    })
}

/// The checks a request passes before it reaches the device; `Err` is its error value.
fn check(shared: &Shared, req: &Request) -> Result<(), u32> {
    let ex = &shared.export;
    let allowed = match req.kind {
        CMD_READ | CMD_FLUSH => 0,
        CMD_WRITE | CMD_TRIM => CMD_FLAG_FUA,
        CMD_WRITE_ZEROES => CMD_FLAG_FUA | CMD_FLAG_NO_HOLE,
        // CACHE and BLOCK_STATUS are not advertised; anything else is unknown.
        _ => return Err(EINVAL),
    };
    if req.flags & !allowed != 0 {
        return Err(EINVAL);
    }
    if shared.stopping() {
        return Err(ESHUTDOWN);
    }
    let writes = matches!(req.kind, CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES);
    if writes && ex.read_only {
        return Err(EPERM);
    }
    if req.kind == CMD_FLUSH {
        return if req.offset == 0 && req.length == 0 {
            Ok(())
        } else {
            Err(EINVAL)
        };
    }
    if matches!(req.kind, CMD_READ | CMD_WRITE) && req.length > MAX_PAYLOAD_BYTES {
        return Err(EINVAL);
    }
    let inside = req
        .offset
        .checked_add(req.length as u64)
        .is_some_and(|e| e <= ex.size);
    if !inside {
        return Err(if matches!(req.kind, CMD_WRITE | CMD_WRITE_ZEROES) {
            ENOSPC
        } else {
            EINVAL
        });
    }
    Ok(())
}

/// The reader: parse requests, execute them, hand the replies to the sink (flushed
/// whenever no further request is buffered).
fn read_requests<R: Read>(
    shared: &Shared,
    conn: &Conn,
    q: &QueuePair<'_>,
    r: &mut BufReader<R>,
    sink: &mut impl Sink,
) -> Result<(), NbdError> {
    let mut hdr = [0u8; REQUEST_HEADER_BYTES];
    loop {
        if r.buffer().is_empty() {
            sink.idle()?;
        }
        if !read_full(r, &mut hdr)? {
            return Ok(());
        }
        let req = match Request::parse(&hdr) {
            Ok(req) => req,
            Err(e) => {
                shared.count_protocol_error();
                return Err(e.into());
            }
        };
        let arrived = shared.pacer.now_sim();
        if req.kind == CMD_DISC {
            // Replies to everything before it are sent by the writer as it drains.
            return Ok(());
        }
        // In flight (for the idle timeout) from its header to its reply.
        conn.request_started();
        let mut payload = Vec::new();
        if req.has_payload() {
            let complete = if req.length > MAX_PAYLOAD_BYTES {
                discard(r, req.length as u64)?
            } else {
                read_payload(r, req.length, &mut payload)?
            };
            if !complete {
                // The client went away mid-request: nothing of it is executed.
                return Ok(());
            }
        }
        let reply = match check(shared, &req) {
            Err(error) => {
                shared.count_refused();
                Reply {
                    cookie: req.cookie,
                    error,
                    data: None,
                    done: arrived.unwrap_or(SimTime::ZERO),
                    ticket: None,
                }
            }
            Ok(()) => {
                // The next request's offset, when its header is already buffered.
                let next = r
                    .buffer()
                    .get(..REQUEST_HEADER_BYTES)
                    .and_then(|h| Request::parse(h).ok())
                    .map(|n| n.offset);
                let o = shared.lock().execute(q.qid, &req, payload, arrived, next);
                Reply {
                    cookie: req.cookie,
                    error: o.error,
                    data: o.data,
                    done: o.done,
                    ticket: o.ticket,
                }
            }
        };
        if !sink.put(reply)? {
            // The writer is gone (the client stopped reading or closed).
            return Ok(());
        }
    }
}

fn write_reply(w: &mut impl Write, r: &Reply) -> io::Result<()> {
    w.write_all(&proto::simple_reply(r.error, r.cookie))?;
    if let Some(d) = reply_data(r) {
        w.write_all(d)?;
    }
    Ok(())
}

/// A reply waiting for its wall-clock deadline (paced mode).
struct Due {
    at: Instant,
    seq: u64,
    reply: Reply,
}

impl PartialEq for Due {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Due {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// The writer: in virtual mode send replies as they come; in paced mode hold each until
/// the wall clock reaches its modeled completion, sending them in that order. On the
/// event core a paced reply first waits until the core has fixed its completion by the
/// wall clock's instant (`unfixed`, asked again every [`RECHECK`]).
fn write_replies<W: Write>(
    w: W,
    rx: Receiver<Reply>,
    pacer: &Pacer,
    conn: &Conn,
    shared: &Shared,
) -> io::Result<()> {
    let mut unfixed: Vec<Reply> = Vec::new();
    let out = send_replies(w, &rx, pacer, conn, shared, &mut unfixed);
    // Replies the connection ended before: their requests ran, so the core fixes and
    // counts them (and forgets their tickets). Those still queued are taken too; one the
    // reader queues after this finds the channel closed and hands its ticket back itself
    // (`ToWriter::put`), except in the instant between the last `try_recv` and the drop.
    while let Ok(r) = rx.try_recv() {
        unfixed.push(r);
    }
    drop(rx);
    if !unfixed.is_empty() {
        let mut d = shared.lock();
        for r in unfixed {
            if let Some(ticket) = r.ticket {
                d.abandon(ticket);
            }
        }
    }
    out
}

/// [`write_replies`]' loop; `unfixed` holds the replies whose completion the core has not
/// fixed yet (what is left of them when it returns, the caller settles).
fn send_replies<W: Write>(
    w: W,
    rx: &Receiver<Reply>,
    pacer: &Pacer,
    conn: &Conn,
    shared: &Shared,
    unfixed: &mut Vec<Reply>,
) -> io::Result<()> {
    let mut w = w;
    if pacer.wall_deadline(SimTime::ZERO).is_none() {
        loop {
            let reply = match rx.try_recv() {
                Ok(r) => r,
                Err(TryRecvError::Empty) => {
                    w.flush()?;
                    match rx.recv() {
                        Ok(r) => r,
                        Err(_) => break,
                    }
                }
                Err(TryRecvError::Disconnected) => break,
            };
            write_reply(&mut w, &reply)?;
            conn.request_done();
        }
        return w.flush();
    }
    let mut heap: BinaryHeap<Reverse<Due>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut open = true;
    let mut push = |heap: &mut BinaryHeap<Reverse<Due>>, unfixed: &mut Vec<Reply>, reply: Reply| {
        if reply.ticket.is_some() {
            unfixed.push(reply);
            return;
        }
        let at = pacer.wall_deadline(reply.done).unwrap_or_else(Instant::now);
        seq += 1;
        heap.push(Reverse(Due { at, seq, reply }));
    };
    const SPIN: Duration = Duration::from_micros(200);
    loop {
        while open && heap.len() + unfixed.len() < REPLIES_HELD {
            match rx.try_recv() {
                Ok(r) => push(&mut heap, unfixed, r),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => open = false,
            }
        }
        // Replies whose completion the core fixes by the wall clock's instant now.
        let mut recheck = None;
        if !unfixed.is_empty() {
            let now_sim = pacer.now_sim().unwrap_or(SimTime::ZERO);
            let mut d = shared.lock();
            let mut k = 0;
            while k < unfixed.len() {
                let ticket = unfixed[k].ticket.unwrap_or_default();
                match d.fix(ticket, now_sim) {
                    Ok(done) => {
                        let mut r = unfixed.swap_remove(k);
                        r.done = done;
                        r.ticket = None;
                        push(&mut heap, unfixed, r);
                    }
                    Err(lower) => {
                        let at = pacer
                            .wall_deadline(lower)
                            .filter(|&t| t > Instant::now())
                            .unwrap_or_else(|| Instant::now() + RECHECK);
                        recheck = Some(recheck.map_or(at, |r: Instant| r.min(at)));
                        k += 1;
                    }
                }
            }
        }
        let now = Instant::now();
        let mut sent = false;
        while heap.peek().is_some_and(|d| d.0.at <= now) {
            if let Some(Reverse(d)) = heap.pop() {
                write_reply(&mut w, &d.reply)?;
                conn.request_done();
                sent = true;
            }
        }
        if sent {
            w.flush()?;
        }
        let next = match (heap.peek().map(|d| d.0.at), recheck) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let Some(next) = next else {
            if !open {
                break;
            }
            match rx.recv() {
                Ok(r) => push(&mut heap, unfixed, r),
                Err(_) => open = false,
            }
            continue;
        };
        let left = next.saturating_duration_since(Instant::now());
        if left > SPIN {
            let nap = left - SPIN / 2;
            if open && heap.len() + unfixed.len() < REPLIES_HELD {
                match rx.recv_timeout(nap) {
                    Ok(r) => push(&mut heap, unfixed, r),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => open = false,
                }
            } else {
                std::thread::sleep(nap);
            }
        } else if recheck.is_some_and(|r| r <= next) {
            std::thread::sleep(left.min(RECHECK));
        } else {
            std::hint::spin_loop();
        }
    }
    w.flush()
}

/// How long a paced writer waits before it asks the event core again whether a reply's
/// completion is fixed, when the core cannot tell a later instant.
const RECHECK: Duration = Duration::from_micros(10);

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that takes at most `max` bytes a call (from the first slice with any),
    /// and fails every third call with `Interrupted`, like a busy socket.
    struct Trickle {
        out: Vec<u8>,
        max: usize,
        calls: u32,
    }

    impl Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.calls += 1;
            if self.calls.is_multiple_of(3) {
                return Err(io::ErrorKind::Interrupted.into());
            }
            let n = buf.len().min(self.max);
            self.out.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn vectored_replies_arrive_whole_and_in_order_through_short_writes() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let replies = [
            Reply {
                cookie: 1,
                error: 0,
                data: Some((data.clone(), 100..4196)),
                done: SimTime::ZERO,
                ticket: None,
            },
            Reply {
                cookie: 2,
                error: proto::EINVAL,
                data: Some((data.clone(), 0..10)),
                done: SimTime::ZERO,
                ticket: None,
            },
            Reply {
                cookie: 3,
                error: 0,
                data: None,
                done: SimTime::ZERO,
                ticket: None,
            },
        ];
        let mut want = Vec::new();
        for r in &replies {
            write_reply(&mut want, r).unwrap();
        }
        // The failed READ carries no data; the successful one its range.
        assert_eq!(want.len(), 3 * SIMPLE_REPLY_BYTES + 4096);
        for max in [1, 7, 16, 4096, 1 << 20] {
            let heads: Vec<_> = replies
                .iter()
                .map(|r| proto::simple_reply(r.error, r.cookie))
                .collect();
            let mut iov = Vec::new();
            for (r, h) in replies.iter().zip(&heads) {
                iov.push(IoSlice::new(h));
                if let Some(d) = reply_data(r) {
                    iov.push(IoSlice::new(d));
                }
            }
            let mut w = Trickle {
                out: Vec::new(),
                max,
                calls: 0,
            };
            write_all_vectored(&mut w, &mut iov).unwrap();
            assert_eq!(w.out, want, "at most {max} bytes a write");
        }
        // A writer that takes nothing is an error, not a loop.
        struct Full;
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Ok(0)
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let h = [0u8; 4];
        let e = write_all_vectored(&mut Full, &mut [IoSlice::new(&h)]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WriteZero);
    }
}
