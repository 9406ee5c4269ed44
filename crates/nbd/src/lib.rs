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

pub use server::{Listener, Server, ServerConfig};
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
