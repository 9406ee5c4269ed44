//! The server: the shared device, the listener and its accept loop, connection threads,
//! SMART and statistics, shutdown.

use crate::state::{DeviceState, ServerStats};
use crate::{NbdError, proto, session};
use csd_device::{Command, Completion, IoTarget, LogPage, NvmeDevice, Payload, QueueId, SmartLog};
use csd_sim::{ClockMode, Pacer, SimTime};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

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
    /// Commands submitted on a connection's queue pair at once (1..=65535).
    pub queue_depth: u32,
    /// Most connections open at once (the device offers 64 queue pairs; one is the
    /// server's own, for SMART and Identify).
    pub max_connections: usize,
    /// Print connection events and protocol violations to stderr.
    pub verbose: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            export_name: String::new(),
            description: String::new(),
            read_only: false,
            clock: ClockMode::Virtual,
            queue_depth: 64,
            max_connections: 63,
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
    verbose: bool,
    stopping: AtomicBool,
    open: AtomicU64,
    total: AtomicU64,
    protocol_errors: AtomicU64,
    refused: AtomicU64,
}

/// A connection's queue pair, deleted when the connection ends.
pub(crate) struct QueuePair<'a> {
    shared: &'a Shared,
    pub qid: QueueId,
}

impl Drop for QueuePair<'_> {
    fn drop(&mut self) {
        // Every command of the pair has been reaped; nothing is aborted.
        let _ = self.shared.lock().nvme.delete_queue_pair(self.qid);
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

    /// A queue pair for a connection entering transmission.
    pub fn open_queue(&self) -> Result<QueuePair<'_>, String> {
        let qid = self
            .lock()
            .nvme
            .create_queue_pair(self.queue_depth)
            .map_err(|s| format!("no queue pair for this connection: {s}"))?;
        Ok(QueuePair { shared: self, qid })
    }

    /// Run one admin command on the server's own queue pair.
    fn admin(&self, cmd: Command) -> Result<Completion, NbdError> {
        let mut d = self.lock();
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

    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Listener::Unix { listener, .. } => listener.set_nonblocking(on),
            Listener::Tcp(l) => l.set_nonblocking(on),
        }
    }

    fn accept(&self) -> io::Result<Stream> {
        Ok(match self {
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

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.flush(),
            Stream::Tcp(s) => s.flush(),
        }
    }
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
                verbose: cfg.verbose,
                stopping: AtomicBool::new(false),
                open: AtomicU64::new(0),
                total: AtomicU64::new(0),
                protocol_errors: AtomicU64::new(0),
                refused: AtomicU64::new(0),
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
    /// also serves in-memory streams (tests, fuzzing).
    pub fn serve_connection<R: Read, W: Write + Send>(&self, r: R, w: W) -> Result<(), NbdError> {
        let sh = &*self.shared;
        sh.total.fetch_add(1, Ordering::Relaxed);
        sh.open.fetch_add(1, Ordering::Relaxed);
        let r = session::run(sh, r, w);
        sh.open.fetch_sub(1, Ordering::Relaxed);
        r
    }

    /// Accept and serve connections until `stop` is set; then stop reading requests,
    /// let each connection send the replies it owes, and return once all have ended.
    /// The device is left as the last request left it (see [`Server::into_device`]).
    pub fn serve(&self, listener: &Listener, stop: &AtomicBool) -> Result<(), NbdError> {
        listener.set_nonblocking(true)?;
        let mut conns: Vec<(JoinHandle<()>, Stream)> = Vec::new();
        let mut next_id = 0u64;
        let result = loop {
            if stop.load(Ordering::Relaxed) {
                break Ok(());
            }
            conns.retain(|(h, _)| !h.is_finished());
            match listener.accept() {
                Ok(s) => {
                    next_id += 1;
                    if conns.len() >= self.shared.max_connections {
                        if self.shared.verbose {
                            eprintln!("connection {next_id}: refused, too many connections");
                        }
                        continue; // dropping `s` closes it
                    }
                    match self.spawn_connection(next_id, s) {
                        Ok(c) => conns.push(c),
                        Err(e) => eprintln!("connection {next_id}: {e}"),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted
                            | io::ErrorKind::ConnectionAborted
                            | io::ErrorKind::ConnectionReset
                    ) => {}
                Err(e) => break Err(NbdError::Io(e)),
            }
        };
        self.shared.stopping.store(true, Ordering::Relaxed);
        for (_, s) in &conns {
            let _ = s.set_write_timeout(Some(SHUTDOWN_WRITE_TIMEOUT));
            let _ = s.shutdown(Shutdown::Read);
        }
        for (h, _) in conns {
            let _ = h.join();
        }
        result
    }

    fn spawn_connection(&self, id: u64, s: Stream) -> io::Result<(JoinHandle<()>, Stream)> {
        s.set_nonblocking(false)?;
        s.set_write_timeout(Some(WRITE_TIMEOUT))?;
        let handle = s.try_clone()?;
        let w = s.try_clone()?;
        let server = self.clone();
        let verbose = self.shared.verbose;
        let h = std::thread::Builder::new()
            .name(format!("nbd-conn-{id}"))
            .spawn(move || {
                if verbose {
                    eprintln!("connection {id}: open");
                }
                match server.serve_connection(s, w) {
                    Ok(()) if verbose => eprintln!("connection {id}: closed"),
                    Ok(()) => {}
                    Err(e) => {
                        if verbose {
                            eprintln!("connection {id}: dropped: {e}");
                        }
                    }
                }
            })?;
        Ok((h, handle))
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
        s
    }

    /// Run `f` on the device (inspection; requests wait meanwhile).
    pub fn with_device<T>(&self, f: impl FnOnce(&mut NvmeDevice) -> T) -> T {
        f(&mut self.shared.lock().nvme)
    }

    /// Give the device back once every clone of the server and every connection is
    /// gone; otherwise the server is returned.
    pub fn into_device(self) -> Result<NvmeDevice, Server> {
        match Arc::try_unwrap(self.shared) {
            Ok(sh) => {
                let mut st = sh.dev.into_inner().unwrap_or_else(PoisonError::into_inner);
                let _ = st.nvme.delete_queue_pair(sh.admin);
                Ok(st.nvme)
            }
            Err(shared) => Err(Server { shared }),
        }
    }
}
