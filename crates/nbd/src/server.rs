//! The server: the shared device, the listener and its accept loop, connection threads,
//! SMART and statistics, shutdown.

use crate::state::{DeviceState, ServerStats};
use crate::{NbdError, proto, session};
use csd_device::{Command, Completion, IoTarget, LogPage, NvmeDevice, Payload, QueueId, SmartLog};
use csd_sim::events::{Counters, TimeModel};
use csd_sim::net::{Event, Listen, accept_until};
use csd_sim::{ClockMode, Pacer, SimTime};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How the export is offered.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The export's name (clients may also use the empty default name).
    pub export_name: String,
    /// A human-readable description (`NBD_INFO_DESCRIPTION`, `NBD_OPT_LIST`).
    pub description: String,
    /// Refuse writes, trims and write-zeroes with `EPERM`, and say so in the flags.
    pub read_only: bool,
    /// Virtual (reply at once) or paced (reply at the modeled completion).
    pub clock: ClockMode,
    /// How commands are placed in modeled time: calendars, or issue 30's event core
    /// (every connection's commands booked at each resource in modeled-arrival order;
    /// in paced mode a reply waits until the core has fixed its completion by the wall
    /// clock's instant).
    pub time_model: TimeModel,
    /// Commands submitted on a connection's queue pair at once (1..=65535).
    pub queue_depth: u32,
    /// Most connections in transmission at once: each holds one of the device's queue
    /// pairs (64; one is the server's own, for SMART and Identify). A client that asks
    /// to enter transmission while all are taken gets `NBD_REP_ERR_POLICY` with a
    /// message (and may ask again); connections still in the handshake hold no slot.
    pub max_connections: usize,
    /// Most connections in the handshake at once. A connection accepted beyond it
    /// drops the oldest connection still in the handshake, so that clients that never
    /// finish it cannot lock others out (a real client needs a few round trips).
    pub max_handshakes: usize,
    /// Time from accepting a connection to its entering transmission; a connection
    /// that takes longer is dropped (counted in [`ServerStats::handshake_timeouts`]).
    /// Must be above zero.
    ///
    /// [`ServerStats::handshake_timeouts`]: crate::ServerStats::handshake_timeouts
    pub handshake_timeout: Duration,
    /// Close a connection in transmission that has had no request in flight for this
    /// long (`None`: never). The server shuts down its reading side, so a request that
    /// already arrived is still answered; the client sees the connection end.
    pub idle_timeout: Option<Duration>,
    /// Print connection events and protocol violations to stderr.
    pub verbose: bool,
}

/// The default [`ServerConfig::handshake_timeout`]: qemu-nbd's default handshake limit.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The default [`ServerConfig::max_handshakes`].
pub const DEFAULT_MAX_HANDSHAKES: usize = 64;

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            export_name: String::new(),
            description: String::new(),
            read_only: false,
            clock: ClockMode::Virtual,
            time_model: TimeModel::default(),
            queue_depth: 64,
            max_connections: 63,
            max_handshakes: DEFAULT_MAX_HANDSHAKES,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            idle_timeout: None,
            verbose: false,
        }
    }
}

/// What the export looks like on the wire.
pub(crate) struct Export {
    pub name: String,
    pub description: String,
    pub size: u64,
    pub flags: u16,
    pub read_only: bool,
    pub preferred_block: u32,
}

impl Export {
    /// Does a client asking for `name` mean this export?
    pub fn answers_to(&self, name: &[u8]) -> bool {
        name.is_empty() || name == self.name.as_bytes()
    }
}

/// State shared by every connection.
pub(crate) struct Shared {
    dev: Mutex<DeviceState>,
    pub export: Export,
    pub pacer: Pacer,
    admin: QueueId,
    queue_depth: u32,
    max_connections: usize,
    max_handshakes: usize,
    handshake_timeout: Duration,
    idle_timeout: Option<Duration>,
    verbose: bool,
    stopping: AtomicBool,
    open: AtomicU64,
    total: AtomicU64,
    protocol_errors: AtomicU64,
    refused: AtomicU64,
    /// Connections in transmission (each holds a queue pair).
    transmitting: AtomicUsize,
    /// Connections in the handshake, as the accept loop last counted them.
    handshakes: AtomicU64,
    handshake_timeouts: AtomicU64,
    handshakes_evicted: AtomicU64,
    refused_busy: AtomicU64,
    idle_closed: AtomicU64,
}

/// Phases of a connection ([`Conn::phase`]).
const HANDSHAKE: u8 = 0;
const TRANSMISSION: u8 = 1;
/// The accept loop closed the connection (handshake timeout, eviction, idle timeout).
const CLOSED: u8 = 2;

/// What the accept loop knows of a connection, and what its session tells it: the
/// phase (which the session and the accept loop change only by compare-and-swap, so that
/// a connection times out in the handshake or enters transmission, never both), and in
/// transmission the requests in flight and the last activity.
pub(crate) struct Conn {
    phase: AtomicU8,
    opened: Instant,
    in_flight: AtomicU64,
    /// Milliseconds from `opened` to the last request received or reply sent.
    last_ms: AtomicU64,
}

impl Conn {
    fn new() -> Conn {
        Conn {
            phase: AtomicU8::new(HANDSHAKE),
            opened: Instant::now(),
            in_flight: AtomicU64::new(0),
            last_ms: AtomicU64::new(0),
        }
    }

    fn phase(&self) -> u8 {
        self.phase.load(Ordering::Acquire)
    }

    fn touch(&self) {
        let ms = self.opened.elapsed().as_millis().min(u64::MAX as u128) as u64;
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// Leave the handshake; `false` if the accept loop has closed the connection first.
    fn enter_transmission(&self) -> bool {
        self.touch();
        self.phase
            .compare_exchange(HANDSHAKE, TRANSMISSION, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// A request header has arrived.
    pub fn request_started(&self) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.touch();
    }

    /// A request's reply has been handed to the connection's writer.
    pub fn request_done(&self) {
        self.touch();
        let _ = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// How long the connection has had nothing in flight (`None` while it has).
    fn idle_for(&self, now: Instant) -> Option<Duration> {
        if self.in_flight.load(Ordering::Acquire) != 0 {
            return None;
        }
        let last = self.opened + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        Some(now.saturating_duration_since(last))
    }

    /// Take the connection from phase `from` to closed; `false` if it is no longer there.
    fn close_from(&self, from: u8) -> bool {
        self.phase
            .compare_exchange(from, CLOSED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// Why a connection cannot enter transmission.
pub(crate) enum Refusal {
    /// Every transmission slot is taken (the message says so); the client may retry.
    Busy(String),
    /// The device gave no queue pair (the message says why).
    Device(String),
    /// The accept loop closed the connection (handshake timeout or eviction).
    Closed,
}

/// A connection's transmission slot and queue pair, released when the connection ends.
pub(crate) struct QueuePair<'a> {
    shared: &'a Shared,
    pub qid: QueueId,
}

impl Drop for QueuePair<'_> {
    fn drop(&mut self) {
        // Every command of the pair has been reaped; nothing is aborted.
        let _ = self.shared.lock().nvme.delete_queue_pair(self.qid);
        self.shared.transmitting.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Shared {
    /// The device. A panic elsewhere cannot leave a request half done (each request
    /// finishes its device commands before the lock is released), so a poisoned lock
    /// is taken over.
    pub fn lock(&self) -> MutexGuard<'_, DeviceState> {
        self.dev.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    pub fn count_protocol_error(&self) {
        self.protocol_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub fn count_refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// A transmission slot and a queue pair for connection `conn`, which then leaves
    /// the handshake.
    pub fn open_queue(&self, conn: &Conn) -> Result<QueuePair<'_>, Refusal> {
        let max = self.max_connections;
        let slot = self
            .transmitting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            });
        if slot.is_err() {
            self.refused_busy.fetch_add(1, Ordering::Relaxed);
            return Err(Refusal::Busy(format!(
                "server busy: all {max} connection slots are in use; try again later"
            )));
        }
        let qid = match self.lock().nvme.create_queue_pair(self.queue_depth) {
            Ok(qid) => qid,
            Err(s) => {
                self.transmitting.fetch_sub(1, Ordering::AcqRel);
                return Err(Refusal::Device(format!(
                    "no queue pair for this connection: {s}"
                )));
            }
        };
        let q = QueuePair { shared: self, qid };
        if !conn.enter_transmission() {
            return Err(Refusal::Closed); // `q` goes back
        }
        Ok(q)
    }

    /// Run one admin command on the server's own queue pair.
    fn admin(&self, cmd: Command) -> Result<Completion, NbdError> {
        let mut d = self.lock();
        if d.core.is_some() {
            let (mut c, ticket) = d
                .admin_on_core(self.admin, cmd, self.pacer.now_sim())
                .map_err(NbdError::Device)?;
            drop(d);
            if let Some(ticket) = ticket {
                // Paced: wait until the core has fixed the completion by the wall clock.
                c.acct.completed = loop {
                    let now = self.pacer.now_sim().unwrap_or(SimTime::ZERO);
                    match self.lock().fix(ticket, now) {
                        Ok(done) => break done,
                        Err(lower) if lower > now => self.pacer.wait_until(lower),
                        Err(_) => std::thread::sleep(Duration::from_micros(10)),
                    }
                };
            }
            if !c.status.is_success() {
                return Err(NbdError::Device(c.status));
            }
            return Ok(c);
        }
        let at = self.pacer.now_sim().unwrap_or(d.clock);
        d.nvme
            .submit(self.admin, cmd, at)
            .map_err(NbdError::Device)?;
        d.nvme.process();
        let c = d.nvme.poll(self.admin).ok_or_else(|| {
            NbdError::Device(csd_device::Status::InternalError(
                "admin completion missing".into(),
            ))
        })?;
        if !c.status.is_success() {
            return Err(NbdError::Device(c.status));
        }
        Ok(c)
    }
}

/// Where the server listens.
pub enum Listener {
    /// A Unix-domain socket (removed when the listener is dropped).
    Unix {
        /// The socket.
        listener: UnixListener,
        /// Its path.
        path: PathBuf,
    },
    /// A TCP socket.
    Tcp(TcpListener),
}

impl Listener {
    /// Listen on a Unix socket at `path`. A stale socket file (nothing listening) is
    /// replaced; a live one, or a file that is not a socket, is an error.
    pub fn unix(path: &Path) -> Result<Listener, NbdError> {
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if !meta.file_type().is_socket() {
                return Err(NbdError::Config(format!(
                    "{} exists and is not a socket: choose another --socket path",
                    path.display()
                )));
            }
            if UnixStream::connect(path).is_ok() {
                return Err(NbdError::Config(format!(
                    "{}: another server is listening on this socket",
                    path.display()
                )));
            }
            std::fs::remove_file(path).map_err(|e| {
                NbdError::Config(format!("{}: cannot replace: {e}", path.display()))
            })?;
        }
        let listener = UnixListener::bind(path)
            .map_err(|e| NbdError::Config(format!("{}: cannot listen: {e}", path.display())))?;
        Ok(Listener::Unix {
            listener,
            path: path.to_path_buf(),
        })
    }

    /// Listen on TCP `addr`. Anything but a loopback address exposes the device to the
    /// network, without authentication or TLS, and needs `allow_remote`.
    pub fn tcp(addr: SocketAddr, allow_remote: bool) -> Result<Listener, NbdError> {
        if !addr.ip().is_loopback() && !allow_remote {
            return Err(NbdError::Config(format!(
                "{addr} is not a loopback address: NBD has no authentication here, so serving \
                 to the network needs --allow-remote (or listen on 127.0.0.1 / a Unix socket)"
            )));
        }
        let l = TcpListener::bind(addr)
            .map_err(|e| NbdError::Config(format!("{addr}: cannot listen: {e}")))?;
        Ok(Listener::Tcp(l))
    }

    /// The NBD URI of `export` on this listener (as libnbd tools take it).
    pub fn uri(&self, export: &str) -> String {
        match self {
            Listener::Unix { path, .. } => {
                format!("nbd+unix:///{export}?socket={}", path.display())
            }
            Listener::Tcp(l) => match l.local_addr() {
                Ok(a) => format!("nbd://{a}/{export}"),
                Err(_) => "nbd://?".into(),
            },
        }
    }

    /// The local TCP address (for `--listen 127.0.0.1:0`).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match self {
            Listener::Tcp(l) => l.local_addr().ok(),
            Listener::Unix { .. } => None,
        }
    }
}

/// The listener as the shared accept loop polls it (a private view, since the streams it
/// yields are private).
struct Accepting<'a>(&'a Listener);

impl Listen for Accepting<'_> {
    type Stream = Stream;

    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self.0 {
            Listener::Unix { listener, .. } => listener.set_nonblocking(on),
            Listener::Tcp(l) => l.set_nonblocking(on),
        }
    }

    fn accept_stream(&self) -> io::Result<Stream> {
        Ok(match self.0 {
            Listener::Unix { listener, .. } => Stream::Unix(listener.accept()?.0),
            Listener::Tcp(l) => {
                let s = l.accept()?.0;
                s.set_nodelay(true)?;
                Stream::Tcp(s)
            }
        })
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix { path, .. } = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// An accepted connection.
enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
        })
    }

    fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.shutdown(how),
            Stream::Tcp(s) => s.shutdown(how),
        }
    }

    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_nonblocking(on),
            Stream::Tcp(s) => s.set_nonblocking(on),
        }
    }

    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_write_timeout(t),
            Stream::Tcp(s) => s.set_write_timeout(t),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(buf),
            Stream::Tcp(s) => s.write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        // The sockets' own (one `writev`); the trait's default writes the first slice.
        match self {
            Stream::Unix(s) => s.write_vectored(bufs),
            Stream::Tcp(s) => s.write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.flush(),
            Stream::Tcp(s) => s.flush(),
        }
    }
}

/// A connection the accept loop watches.
struct Live {
    id: u64,
    handle: JoinHandle<()>,
    /// A handle on the socket, to shut it down.
    stream: Stream,
    conn: Arc<Conn>,
}

/// How long a reply may wait for a client that does not read (then the connection is
/// dropped), and the same while the server shuts down.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
const SHUTDOWN_WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// An NBD server over one device. Cheap to clone (the clones share the device).
#[derive(Clone)]
pub struct Server {
    shared: Arc<Shared>,
}

impl Server {
    /// A server over `dev`. It takes one queue pair of its own, identifies the device
    /// through it (capacity, LBA size, transfer limit), and starts its clocks at the
    /// device's current modeled instant.
    pub fn new(mut dev: NvmeDevice, cfg: ServerConfig) -> Result<Server, NbdError> {
        let depth = cfg.queue_depth.clamp(1, csd_device::nvme::MAX_QUEUE_DEPTH);
        let admin = dev.create_queue_pair(4).map_err(NbdError::Device)?;
        let origin = dev.block().now();
        dev.submit(admin, Command::Identify, origin)
            .map_err(NbdError::Device)?;
        dev.process();
        let id = match dev.poll(admin) {
            Some(Completion {
                payload: Payload::Identify(id),
                ..
            }) => id,
            Some(c) => return Err(NbdError::Device(c.status)),
            None => {
                return Err(NbdError::Config("Identify did not complete".into()));
            }
        };
        let lba = id.lba_size as u64;
        let size = id
            .lbas
            .checked_mul(lba)
            .ok_or_else(|| NbdError::Config(format!("{} LBAs of {lba} bytes overflow", id.lbas)))?;
        let mut flags = proto::TFLAG_HAS_FLAGS
            | proto::TFLAG_SEND_FLUSH
            | proto::TFLAG_SEND_FUA
            | proto::TFLAG_SEND_TRIM
            | proto::TFLAG_SEND_WRITE_ZEROES
            | proto::TFLAG_CAN_MULTI_CONN;
        if cfg.read_only {
            flags |= proto::TFLAG_READ_ONLY;
        }
        if cfg.handshake_timeout.is_zero() {
            return Err(NbdError::Config(
                "the handshake timeout must be above zero".into(),
            ));
        }
        if cfg.idle_timeout.is_some_and(|t| t.is_zero()) {
            return Err(NbdError::Config(
                "the idle timeout must be above zero (or none)".into(),
            ));
        }
        if cfg.export_name.len() > proto::MAX_NAME_BYTES {
            return Err(NbdError::Config(format!(
                "export name of {} bytes is longer than NBD's {}",
                cfg.export_name.len(),
                proto::MAX_NAME_BYTES
            )));
        }
        let description = if cfg.description.is_empty() {
            format!("csd emulated SSD ({})", id.name)
        } else {
            cfg.description.clone()
        };
        let state = DeviceState {
            nvme: dev,
            clock: origin,
            lba,
            mdts: id.mdts_blocks.max(1) as u64,
            depth: depth as usize,
            stats: ServerStats {
                modeled_now: origin,
                ..Default::default()
            },
            refusal_noted: false,
            core: (cfg.time_model == TimeModel::Events).then(crate::state::Core::new),
        };
        Ok(Server {
            shared: Arc::new(Shared {
                dev: Mutex::new(state),
                export: Export {
                    name: cfg.export_name.clone(),
                    description,
                    size,
                    flags,
                    read_only: cfg.read_only,
                    preferred_block: (lba as u32).clamp(512, proto::MAX_PAYLOAD_BYTES),
                },
                pacer: Pacer::new(cfg.clock, origin),
                admin,
                queue_depth: depth,
                max_connections: cfg.max_connections.max(1),
                max_handshakes: cfg.max_handshakes.max(1),
                handshake_timeout: cfg.handshake_timeout,
                idle_timeout: cfg.idle_timeout,
                verbose: cfg.verbose,
                stopping: AtomicBool::new(false),
                open: AtomicU64::new(0),
                total: AtomicU64::new(0),
                protocol_errors: AtomicU64::new(0),
                refused: AtomicU64::new(0),
                transmitting: AtomicUsize::new(0),
                handshakes: AtomicU64::new(0),
                handshake_timeouts: AtomicU64::new(0),
                handshakes_evicted: AtomicU64::new(0),
                refused_busy: AtomicU64::new(0),
                idle_closed: AtomicU64::new(0),
            }),
        })
    }

    /// The export's size in bytes.
    pub fn export_size(&self) -> u64 {
        self.shared.export.size
    }

    /// The export's name.
    pub fn export_name(&self) -> &str {
        &self.shared.export.name
    }

    /// Serve one connection over `r` (requests) and `w` (replies) until the client
    /// disconnects, aborts or breaks the protocol. The listener's threads call this; it
    /// also serves in-memory streams (tests, fuzzing). The handshake and idle timeouts
    /// and the handshake limit are kept by [`Server::serve`]'s accept loop, so they do
    /// not apply to a connection served here directly.
    pub fn serve_connection<R: Read, W: Write + Send>(&self, r: R, w: W) -> Result<(), NbdError> {
        self.serve_conn(&Conn::new(), r, w)
    }

    fn serve_conn<R: Read, W: Write + Send>(
        &self,
        conn: &Conn,
        r: R,
        w: W,
    ) -> Result<(), NbdError> {
        let sh = &*self.shared;
        sh.total.fetch_add(1, Ordering::Relaxed);
        sh.open.fetch_add(1, Ordering::Relaxed);
        let r = session::run(sh, conn, r, w);
        sh.open.fetch_sub(1, Ordering::Relaxed);
        r
    }

    /// Accept and serve connections until `stop` is set; then stop reading requests,
    /// let each connection send the replies it owes, and return once all have ended.
    /// The device is left as the last request left it (see [`Server::into_device`]).
    ///
    /// Between accepts (at least every 10 ms) the loop enforces the handshake timeout
    /// and the idle timeout; a connection accepted while [`ServerConfig::max_handshakes`]
    /// are in the handshake drops the oldest of them.
    pub fn serve(&self, listener: &Listener, stop: &AtomicBool) -> Result<(), NbdError> {
        let mut conns: Vec<Live> = Vec::new();
        let mut next_id = 0u64;
        let mut handshaking = 0;
        let result = accept_until(&Accepting(listener), stop, |event| match event {
            Event::Poll => handshaking = self.watch(&mut conns),
            Event::Accepted(s) => {
                next_id += 1;
                if handshaking >= self.shared.max_handshakes {
                    self.evict_oldest_handshake(&conns, next_id);
                }
                match self.spawn_connection(next_id, s) {
                    Ok(c) => conns.push(c),
                    Err(e) => eprintln!("connection {next_id}: {e}"),
                }
            }
        })
        .map_err(NbdError::Io);
        self.shared.stopping.store(true, Ordering::Relaxed);
        for c in &conns {
            let _ = c.stream.set_write_timeout(Some(SHUTDOWN_WRITE_TIMEOUT));
            let _ = c.stream.shutdown(Shutdown::Read);
        }
        for c in conns {
            let _ = c.handle.join();
        }
        self.shared.handshakes.store(0, Ordering::Relaxed);
        result
    }

    /// Forget connections that have ended, close those past the handshake or idle
    /// timeout; the number still in the handshake.
    fn watch(&self, conns: &mut Vec<Live>) -> usize {
        let sh = &*self.shared;
        let now = Instant::now();
        conns.retain(|c| !c.handle.is_finished());
        let mut handshaking = 0;
        for c in conns.iter() {
            match c.conn.phase() {
                HANDSHAKE => {
                    let late = now.saturating_duration_since(c.conn.opened) >= sh.handshake_timeout;
                    if !late {
                        handshaking += 1;
                    } else if c.conn.close_from(HANDSHAKE) {
                        // Both ways: the session's next read ends, and so does a write
                        // to a client that does not read.
                        // Counted before the close, so a client that sees the
                        // close also sees the count (the stats are read after it).
                        sh.handshake_timeouts.fetch_add(1, Ordering::SeqCst);
                        let _ = c.stream.shutdown(Shutdown::Both);
                        if sh.verbose {
                            eprintln!(
                                "connection {}: dropped, no handshake within {:?}",
                                c.id, sh.handshake_timeout
                            );
                        }
                    }
                }
                TRANSMISSION => {
                    let idle = sh
                        .idle_timeout
                        .zip(c.conn.idle_for(now))
                        .is_some_and(|(limit, idle)| idle >= limit);
                    if idle && c.conn.close_from(TRANSMISSION) {
                        // Nothing is in flight: end the session's reading side; it
                        // answers what may have arrived meanwhile, then closes.
                        sh.idle_closed.fetch_add(1, Ordering::SeqCst);
                        let _ = c.stream.shutdown(Shutdown::Read);
                        if sh.verbose {
                            eprintln!("connection {}: closed, idle", c.id);
                        }
                    }
                }
                _ => {}
            }
        }
        sh.handshakes.store(handshaking as u64, Ordering::Relaxed);
        handshaking
    }

    /// Drop the connection that has been in the handshake longest (for connection
    /// `new_id`, accepted beyond the handshake limit).
    fn evict_oldest_handshake(&self, conns: &[Live], new_id: u64) {
        let sh = &*self.shared;
        let oldest = conns
            .iter()
            .filter(|c| c.conn.phase() == HANDSHAKE)
            .min_by_key(|c| c.conn.opened);
        if let Some(c) = oldest
            && c.conn.close_from(HANDSHAKE)
        {
            sh.handshakes_evicted.fetch_add(1, Ordering::SeqCst);
            let _ = c.stream.shutdown(Shutdown::Both);
            if sh.verbose {
                eprintln!(
                    "connection {}: dropped in the handshake, {} handshakes pending \
                     (for connection {new_id})",
                    c.id, sh.max_handshakes
                );
            }
        }
    }

    fn spawn_connection(&self, id: u64, s: Stream) -> io::Result<Live> {
        s.set_nonblocking(false)?;
        s.set_write_timeout(Some(WRITE_TIMEOUT))?;
        let stream = s.try_clone()?;
        let w = s.try_clone()?;
        let server = self.clone();
        let conn = Arc::new(Conn::new());
        let c = conn.clone();
        let verbose = self.shared.verbose;
        let handle = std::thread::Builder::new()
            .name(format!("nbd-conn-{id}"))
            .spawn(move || {
                if verbose {
                    eprintln!("connection {id}: open");
                }
                match server.serve_conn(&c, s, w) {
                    Ok(()) if verbose => eprintln!("connection {id}: closed"),
                    Ok(()) => {}
                    Err(e) => {
                        if verbose {
                            eprintln!("connection {id}: dropped: {e}");
                        }
                    }
                }
            })?;
        Ok(Live {
            id,
            handle,
            stream,
            conn,
        })
    }

    /// The device's SMART / health log, read through the server's own queue pair.
    pub fn smart(&self) -> Result<SmartLog, NbdError> {
        match self
            .shared
            .admin(Command::GetLogPage(LogPage::Smart))?
            .payload
        {
            Payload::Smart(s) => Ok(s),
            _ => Err(NbdError::Config(
                "the SMART log page came back without its data".into(),
            )),
        }
    }

    /// Make every acknowledged write durable (a device Flush on the server's queue pair).
    pub fn flush(&self) -> Result<SimTime, NbdError> {
        Ok(self.shared.admin(Command::Flush)?.acct.completed)
    }

    /// What the server has done so far.
    pub fn stats(&self) -> ServerStats {
        let sh = &*self.shared;
        let mut s = sh.lock().stats;
        s.connections_open = sh.open.load(Ordering::Relaxed);
        s.connections_total = sh.total.load(Ordering::Relaxed);
        s.protocol_errors = sh.protocol_errors.load(Ordering::Relaxed);
        s.refused = sh.refused.load(Ordering::Relaxed);
        s.handshakes_pending = sh.handshakes.load(Ordering::Relaxed);
        s.handshake_timeouts = sh.handshake_timeouts.load(Ordering::Relaxed);
        s.handshakes_evicted = sh.handshakes_evicted.load(Ordering::Relaxed);
        s.refused_busy = sh.refused_busy.load(Ordering::Relaxed);
        s.idle_closed = sh.idle_closed.load(Ordering::Relaxed);
        s
    }

    /// Run `f` on the device (inspection; requests wait meanwhile).
    pub fn with_device<T>(&self, f: impl FnOnce(&mut NvmeDevice) -> T) -> T {
        let mut d = self.shared.lock();
        d.settle();
        f(&mut d.nvme)
    }

    /// The event core's counters so far (`None` on calendars): stages booked, late
    /// arrivals, decisions on unfixed instants.
    pub fn event_counters(&self) -> Option<Counters> {
        self.shared.lock().event_counters()
    }

    /// Give the device back once every clone of the server and every connection is
    /// gone; otherwise the server is returned.
    pub fn into_device(self) -> Result<NvmeDevice, Server> {
        match Arc::try_unwrap(self.shared) {
            Ok(sh) => {
                let mut st = sh.dev.into_inner().unwrap_or_else(PoisonError::into_inner);
                st.settle();
                let _ = st.nvme.delete_queue_pair(sh.admin);
                Ok(st.nvme)
            }
            Err(shared) => Err(Server { shared }),
        }
    }
}
