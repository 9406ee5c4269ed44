//! `csd serve`: the emulated SSD as a Network Block Device server, so that real programs
//! (fio's `nbd` engine, qemu-img, libnbd's `nbdinfo` and `nbdcopy`, the Linux nbd
//! driver) can use it.
//!
//! The server speaks to the device only through the typed command interface
//! ([`csd_device::NvmeDevice`]): every NBD request becomes one or more [`Command`]s on
//! the connection's own queue pair, and every reply comes from their [`Completion`]s.
//!
//! # Protocol choices
//!
//! * **Handshake**: fixed newstyle only (the server sets `NBD_FLAG_FIXED_NEWSTYLE` and
//!   `NBD_FLAG_NO_ZEROES`; oldstyle is not offered). A client that does not set
//!   `NBD_FLAG_C_FIXED_NEWSTYLE` may only send `NBD_OPT_EXPORT_NAME`.
//! * **Options**: `NBD_OPT_GO`, `NBD_OPT_INFO` (reply `NBD_INFO_EXPORT`, always
//!   `NBD_INFO_BLOCK_SIZE`, and `NBD_INFO_NAME` / `NBD_INFO_DESCRIPTION` when asked),
//!   `NBD_OPT_LIST`, `NBD_OPT_ABORT` and `NBD_OPT_EXPORT_NAME`. Everything else, among it
//!   `NBD_OPT_STRUCTURED_REPLY`, `NBD_OPT_STARTTLS`, the metadata-context options and
//!   extended headers, is answered with `NBD_REP_ERR_UNSUP`; libnbd (and so nbdinfo,
//!   nbdcopy and fio's nbd engine) then goes on with simple replies. One export is
//!   served; it answers to its name (`--export`, empty by default) and to the empty
//!   default name.
//! * **Replies**: simple replies only. A READ that fails gets an error reply without
//!   payload, as the protocol asks of simple replies.
//! * **Commands**: READ, WRITE (with `NBD_CMD_FLAG_FUA`: the write is followed by a
//!   device Flush before the reply), FLUSH, TRIM (with FUA), WRITE_ZEROES (with FUA and
//!   `NBD_CMD_FLAG_NO_HOLE`) and DISC. CACHE, BLOCK_STATUS and unknown commands get
//!   `EINVAL`. Transmission flags advertised: `HAS_FLAGS`, `SEND_FLUSH`, `SEND_FUA`,
//!   `SEND_TRIM`, `SEND_WRITE_ZEROES`, `CAN_MULTI_CONN` (one device instance behind every
//!   connection, so a flush on one connection covers writes acknowledged on all), and
//!   `READ_ONLY` for `--read-only` exports.
//! * **Block sizes**: `NBD_INFO_BLOCK_SIZE` advertises minimum 1, preferred 4096 (the
//!   FTL's LBA) and maximum 32 MiB. Unaligned requests are served, not refused: a write
//!   that covers part of an LBA reads that edge LBA, merges, and writes whole LBAs, all
//!   under the device lock so that two unaligned writes into one LBA cannot lose each
//!   other's bytes; an unaligned read reads the covering LBAs and returns the slice.
//!   This keeps every libnbd client working (nbdcopy of a file whose size is not a
//!   multiple of 4 KiB writes a short tail; qemu and the kernel use 512-byte sectors),
//!   at the cost of a read-modify-write that the modeled figures show. TRIM is a hint:
//!   only the LBAs it covers completely are unmapped. WRITE_ZEROES unmaps the whole LBAs
//!   it covers (they read as zeros) or writes zeros with `NO_HOLE`, and zeroes partial
//!   edges by read-modify-write.
//! * **Errors** (simple-reply error values): requests beyond the end of the export get
//!   `ENOSPC` for WRITE and WRITE_ZEROES and `EINVAL` otherwise; READ or WRITE over
//!   [`proto::MAX_PAYLOAD_BYTES`] get `EINVAL` (an oversized WRITE's payload is read and
//!   discarded so that the stream stays in step); unknown or inapplicable flags, FLUSH
//!   with a non-zero offset or length, and unsupported commands get `EINVAL`; writes to
//!   a read-only export get `EPERM`; device failures get `EIO` (`ENOSPC` when the device
//!   is out of space); requests that arrive while the server shuts down get `ESHUTDOWN`.
//!   A request with the wrong magic number is a protocol violation: the connection is
//!   dropped (the protocol's hard disconnect), the server goes on.
//! * **Disconnects**: a request is executed only once it has been received completely,
//!   payload included, so a client that goes away mid-request leaves the device as it
//!   was before that request. Each request runs under the device lock from its first to
//!   its last device command, so every connection sees the device in a consistent state.
//!
//! # Misbehaving clients
//!
//! * **Handshake timeout** ([`ServerConfig::handshake_timeout`], default
//!   [`DEFAULT_HANDSHAKE_TIMEOUT`] = 10 s, qemu-nbd's default handshake limit): a
//!   connection that has not entered transmission that long after it was accepted is
//!   dropped (both directions shut down), however busily it sends options, and counted
//!   in [`ServerStats::handshake_timeouts`]. The clock runs from the accept, so a client
//!   cannot extend it by trickling bytes. Entering transmission and timing out are
//!   decided by one compare-and-swap, so a client that got its `NBD_OPT_GO` ACK is
//!   never dropped for the handshake.
//! * **Handshake limit** ([`ServerConfig::max_handshakes`], default
//!   [`DEFAULT_MAX_HANDSHAKES`] = 64): connections in the handshake hold no queue pair
//!   and no transmission slot. A connection accepted while that many are in the
//!   handshake drops the oldest of them ([`ServerStats::handshakes_evicted`]): a flood
//!   of connections that never speak then costs a well-behaved client nothing unless
//!   the flood opens 64 connections during that client's own few round trips, whereas
//!   refusing the newcomer would lock every client out until the flood times out.
//! * **Transmission slots** ([`ServerConfig::max_connections`], default 63: the
//!   device's 64 queue pairs minus the server's own): a slot and a queue pair are taken
//!   only when a client enters transmission. When all are taken, `NBD_OPT_GO` is
//!   answered with `NBD_REP_ERR_POLICY` and a message saying the server is busy (the
//!   protocol has no "busy" error; the client may retry or abort), and
//!   `NBD_OPT_EXPORT_NAME`, which has no error reply, is hung up on; both count in
//!   [`ServerStats::refused_busy`].
//! * **Idle timeout** ([`ServerConfig::idle_timeout`], default none): a connection in
//!   transmission with no request in flight (from its header to its reply being handed
//!   to the socket) for that long is closed ([`ServerStats::idle_closed`]): the server
//!   shuts down its reading side, answers a request that may have arrived meanwhile,
//!   and closes. Off by default because NBD clients legitimately sit idle for hours
//!   (the kernel's nbd driver under an unused mounted filesystem does, and it does not
//!   reconnect by itself), as qemu-nbd and nbdkit have no idle limit either; a
//!   transmission slot is held only by a client that finished the handshake.
//! * **Replies not read**: a reply waits at most 30 s for a client that does not read
//!   (then the connection is dropped).
//!
//! These limits are kept by [`Server::serve`]'s accept loop; a connection served
//! directly with [`Server::serve_connection`] (in-memory streams) has none of them.
//!
//! # Concurrency
//!
//! One device instance behind a mutex; per connection a reader thread (parses requests,
//! executes them on the connection's queue pair under the lock) and a writer thread
//! (sends replies). Requests in flight on one connection are received back to back, and
//! replies may be sent out of order (in paced mode, in order of modeled completion).
//!
//! # Time
//!
//! * **virtual** (default): replies are sent as soon as a request has executed. The
//!   server executes one request at a time, so in modeled time each request is submitted
//!   when the previous one (on any connection) completed: the modeled figures the server
//!   reports (mean modeled latency per command type, SMART counters) are those of a host
//!   that keeps one command in flight, whatever the client's queue depth.
//! * **paced\[:scale\]**: a request is submitted at the simulated instant that corresponds
//!   to its arrival on the wall clock, and its reply is held until the wall clock reaches
//!   the command's modeled completion (times the scale). Requests that overlap on the
//!   wall clock then overlap in the model, so fio's latencies and IOPS reflect the
//!   device model under the client's real queue depth (as long as the emulator itself
//!   keeps up).
//!
//! [`Command`]: csd_device::Command
//! [`Completion`]: csd_device::Completion

pub mod proto;
mod server;
mod session;
mod state;

pub use server::{
    DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_MAX_HANDSHAKES, Listener, Server, ServerConfig,
};
pub use state::{OpStats, ServerStats};

use thiserror::Error;

/// Errors of the NBD server.
#[derive(Debug, Error)]
pub enum NbdError {
    /// A socket or stream failed.
    #[error("network: {0}")]
    Io(#[from] std::io::Error),
    /// The peer broke the protocol; its connection is dropped.
    #[error("protocol violation: {0}")]
    Protocol(#[from] proto::ProtoError),
    /// The device refused a command the server itself issued (setup, SMART, flush).
    #[error("device: {0}")]
    Device(csd_device::Status),
    /// The server cannot be set up as asked.
    #[error("{0}")]
    Config(String),
}
