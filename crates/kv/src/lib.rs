//! csd-kv: the key-value store of the batch-io paper (§8.1.2), on both storage
//! interfaces, with the YCSB workloads of its evaluation (§8.1.3).
//!
//! * [`store::Store`]: a B-tree-style index of fixed 4 KiB pages updated in place (the
//!   paper's BwTree without delta chains), a host page cache bounded in pages, a 1 MiB
//!   write buffer, an asynchronous I/O queue of configurable depth and a host CPU cost
//!   model ([`cost`]). One code base, two back ends ([`store::Interface`]):
//!   - **Block** ([`block`]): host log structuring on LBAs (LLAMA's mapping table page id
//!     → LBA, append-only log of chunks, host GC with victim choice, host checkpoints of
//!     the mapping table, roll-forward recovery) — Figure 9a;
//!   - **Batch** ([`batch`]): `FlushBatch` with a DESC block and `ReadLpids`; the device
//!     does placement, GC and checkpoints — Figure 9b.
//! * [`ycsb`]: YCSB load and run phases (the paper's read-heavy / write-heavy mixes and
//!   the standard workloads A–F; scrambled zipfian or uniform keys), by operation count
//!   or modeled / wall-clock duration, against any [`ycsb::KvTarget`].
//!
//! * [`resp`] and [`server`]: the Redis protocol (RESP2) in front of one store, for
//!   `csd kv serve` and real clients (`redis-cli`, `redis-benchmark`); a write is
//!   acknowledged only once it is durable.
//!
//! Where things are: [`store`] is a directory: its `mod.rs` holds the types and
//! accessors, `open` the format detection, formatting and block-log recovery, `pages`
//! page access through the host cache and the descent, `ops` the operations (get, put,
//! put_all, delete, scan, clear, len) and splits, `durability` sealing, sync, background
//! work and host checkpoints, `figures` the counters, knobs and self-checks. [`server`]
//! is one too: `mod.rs` the configuration, sessions and the dispatcher with its group
//! commit, `keys` the commands on keys and SCAN cursors, `admin` the start-up commands
//! of Redis clients and INFO, `conn` the TCP accept and connection loops. [`block`] is
//! the host log (segments, chunks, host GC, checkpoints, recovery), [`batch`] the batch
//! interface back end, [`page`] the page format, [`cost`] the host CPU model.
//!
//! The store reaches the device only through `csd_host::CommandIssuer` (docs/architecture.md's
//! command-interface rule).

pub mod batch;
pub mod block;
mod cache;
pub mod cost;
mod error;
pub mod io;
pub mod page;
pub mod resp;
pub mod server;
pub mod store;
pub mod ycsb;

pub use block::{BlockOptions, VictimPolicy};
pub use cost::{CpuSplit, HostCosts};
pub use error::KvError;
pub use io::IoStats;
pub use server::{Server, ServerConfig, ServerStats, Session};
pub use store::{Activity, Entry, Interface, OpenFailed, Store, StoreConfig, StoreStats};
