//! The store: a B-tree of fixed 4 KiB pages updated in place (batch-io §8.1.2, the
//! BwTree "modified ... to perform updates in-place without creating delta chains"), over
//! a host page cache, a write buffer and one of two storage back ends ([`Interface`]).
//!
//! Durability (a choice the paper leaves open): an operation changes pages in the cache;
//! a changed (dirty) page reaches the device when it is evicted, when it has been dirty
//! for `max_dirty_age_ns` of modeled time, or on [`Store::sync`]. Pages go out in sealed
//! write buffers (one log chunk or one batch, each all-or-nothing on a crash). A put or
//! delete gets a sequence number; [`Store::acked`] is the highest number such that every
//! change up to it is on the device, which is what a client may be told is durable.
//! A page split changes several pages at once (the two halves, the parent, perhaps a new
//! root and the superpage): all of them are put into the same write buffer together, and
//! the buffer always keeps room for the pages one operation can add, so a split is never
//! torn by a crash. Deleting leaves pages under-full (no merges), as many B-trees do.
//!
//! Modeled time: see [`crate::cost`]. An operation's latency runs from when the host
//! thread starts it to when its last page arrived and its CPU work is done; background
//! work (sealing, host GC, host checkpoints) runs on the same thread between operations.
//!
//! Where things are: this file holds the types ([`Interface`], [`StoreConfig`],
//! [`StoreStats`], [`Store`], [`Activity`]) and the accessors; `open` opens a store
//! (format detection, formatting, recovery of the block interface's host log); `pages`
//! reaches pages through the host cache (fetch, eviction, pinning, dirty marking, descent)
//! and brackets an operation's modeled time; `ops` holds the operations (get, put,
//! put_all, delete, scan, clear, len) and page splits; `durability` sealing, sync,
//! background work and host checkpoints; `figures` the counters, knobs and self-checks;
//! `timing` the event core's bookkeeping (operation latencies, compaction, settling).

mod durability;
mod figures;
mod open;
mod ops;
mod pages;
mod timing;

use crate::KvError;
use crate::batch;
use crate::block::{self, BlockLog, BlockOptions, Collected};
use crate::cache::{Cache, WriteBuffer, copy};
use crate::cost::{CpuSplit, HostClock, HostCosts, Work};
use crate::io::{Io, IoStats};
use crate::page::{self, Kind, MAX_KEY, MAX_VALUE, NO_PAGE, PAGE, Page, Super};
use csd_device::{Command, Payload};
use csd_host::CommandIssuer;
use csd_sim::SimTime;
use std::collections::{HashMap, VecDeque};

/// Page bytes after the fields a seal stamps (CRC at 12..16, sequence at 24..32).
const HEADER_SKIP: usize = 32;

/// A key and its value.
pub type Entry = (Vec<u8>, Vec<u8>);

/// Which storage interface the store uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interface {
    /// Block interface, host log structuring (Figure 9a).
    Block,
    /// Batch interface, log structuring in the device (Figure 9b).
    Batch,
}

impl Interface {
    fn tag(self) -> u8 {
        match self {
            Interface::Block => 1,
            Interface::Batch => 2,
        }
    }

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Interface::Block => "block",
            Interface::Batch => "batch",
        }
    }
}

impl std::str::FromStr for Interface {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "block" => Ok(Interface::Block),
            "batch" => Ok(Interface::Batch),
            _ => Err(format!("interface `{s}`: use block or batch")),
        }
    }
}

/// Store parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreConfig {
    /// Storage interface.
    pub interface: Interface,
    /// Cache size in pages (`None`: unbounded).
    pub cache_pages: Option<usize>,
    /// Write buffer bytes (paper: 1 MiB), the descriptor block included.
    pub write_buffer_bytes: usize,
    /// I/O queue depth.
    pub queue_depth: usize,
    /// Write buffers of the host (LLAMA's flush buffers): a sealed buffer is busy until
    /// the device acknowledges its write, and once all are sealed and unacknowledged the
    /// host thread waits for one to be free (with one buffer: for every write it seals).
    /// `None`: as many as the I/O queue lets go out.
    pub write_buffers: Option<usize>,
    /// Host CPU costs.
    pub costs: HostCosts,
    /// A dirty page is written at the latest this long (modeled ns) after it was changed.
    pub max_dirty_age_ns: u64,
    /// Host log structuring options (block interface).
    pub block: BlockOptions,
    /// Host checkpoint interval in modeled ns (block interface; `None`: only when host
    /// GC needs one and at recovery).
    pub checkpoint_interval_ns: Option<u64>,
    /// Write to the device at all (`false`: the paper's In-Mem configuration; nothing is
    /// durable).
    pub persist: bool,
    /// Format an empty device (otherwise opening one is an error).
    pub create: bool,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            interface: Interface::Batch,
            cache_pages: None,
            write_buffer_bytes: 1 << 20,
            queue_depth: 64,
            write_buffers: None,
            costs: HostCosts::default(),
            max_dirty_age_ns: 1_000_000_000,
            block: BlockOptions::default(),
            checkpoint_interval_ns: Some(3_000_000_000),
            persist: true,
            create: true,
        }
    }
}

/// Counters of the store's work.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StoreStats {
    /// Device I/O by purpose.
    pub io: IoStats,
    /// Host CPU time by purpose.
    pub cpu: CpuSplit,
    /// Gets.
    pub gets: u64,
    /// Puts.
    pub puts: u64,
    /// Deletes.
    pub deletes: u64,
    /// Range scans.
    pub scans: u64,
    /// Page splits.
    pub splits: u64,
    /// Cache lookups that hit.
    pub cache_hits: u64,
    /// Cache lookups that missed.
    pub cache_misses: u64,
    /// Pages evicted.
    pub evictions: u64,
    /// Time the host thread waited for a free I/O queue slot (ns).
    pub queue_full_wait_ns: u64,
}

/// A store that could not be opened, with the device given back.
pub struct OpenFailed<I> {
    /// Why.
    pub error: KvError,
    /// The device.
    pub dev: I,
}

impl<I> std::fmt::Debug for OpenFailed<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OpenFailed({})", self.error)
    }
}

/// The key-value store over a device reached through `I`.
pub struct Store<I: CommandIssuer> {
    dev: I,
    cfg: StoreConfig,
    clock: HostClock,
    io: IoStats,
    cache: Cache,
    buf: WriteBuffer,
    dirty: HashMap<u64, (u64, SimTime)>,
    fifo: VecDeque<(u64, SimTime, u64)>,
    sup: Super,
    lsn: u64,
    batch_seq: u64,
    log: Option<BlockLog>,
    modifying: bool,
    /// Pages changed by the crash-atomic group under way ([`Store::put_all`]).
    group: Option<Vec<u64>>,
    last_ckpt: SimTime,
    lbas: u64,
    counts: StoreStats,
    op_start: SimTime,
    op_done: SimTime,
    /// Modeled start and end of operations not yet reported ([`Store::drain_latencies`]):
    /// the last of each interval between two reports, kept until the event core fixes its
    /// end (at once on calendars).
    op_times: Vec<(SimTime, SimTime)>,
    /// Whether an operation was noted since the last [`Store::drain_latencies`].
    op_noted: bool,
    /// The latest instant the host thread waited until for a free write buffer: an
    /// operation during which it waited ends no earlier.
    buffer_free: SimTime,
    recovered: bool,
    activity: Activity,
}

/// What the store was doing (for crash tests: where a power cut struck).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Activity {
    /// Serving an operation (reads of pages).
    Idle,
    /// Writing a sealed write buffer.
    Seal,
    /// Host GC reading a victim.
    Gc,
    /// Writing a host checkpoint (block interface).
    Checkpoint,
    /// Recovering.
    Recovery,
}

impl<I: CommandIssuer> Store<I> {
    /// What the store is doing now (after an error: what it was doing when it failed).
    pub fn activity(&self) -> Activity {
        self.activity
    }

    /// Was an existing store recovered (rather than a new one formatted)?
    pub fn recovered(&self) -> bool {
        self.recovered
    }

    /// The configuration.
    pub fn config(&self) -> &StoreConfig {
        &self.cfg
    }

    /// The device client.
    pub fn device(&mut self) -> &mut I {
        &mut self.dev
    }

    /// Give the device back (nothing is flushed: call [`Store::sync`] first for that).
    pub fn into_device(self) -> I {
        self.dev
    }
}
