//! csd-idxbench: the benchmark harness of the FD+tree paper (§5, "Experimental
//! evaluation"), generic over the index under test.
//!
//! * [`workload`] — generators G_R (Remark A.2) and G_T (Remark A.3), seeded and
//!   deterministic, with a preload phase.
//! * [`harness`] — the workload injection thread, the bounded queues `Q_r` / `Q_w`,
//!   `T_r` reader and `T_w` writer threads, and the per-request timestamps that give
//!   `R_p`, `R_q` and `R_o`.
//! * [`stats`] / [`result`] — exact mean / standard deviation / worst case plus HDR
//!   percentiles per request kind; [`BenchResult`] prints as a table, serializes to flat
//!   JSON and draws its latency distribution with csd-plot.
//! * [`mod@sweep`] — lookup-ratio (Figure 6) and configuration (Figure 8) sweeps and the
//!   markdown + plots report.
//! * [`paper`] — the paper's Figure 6–9 numbers as stated in its text.
//! * [`machine`] — what other processes used of the machine's CPUs during a run, so a
//!   report can tell a quiet wall-clock run from a contended one.
//! * [`repro`] — the defaults of `csd repro fd-tree` and the checks of the paper's
//!   orderings (which scheme stalls, which has the best throughput).
//!
//! Any index plugs in by implementing [`BenchIndex`] as one of the paper's [`Scheme`]s;
//! the FD+tree schemes (FD+XM, FD+DS, FD+FC) and a B+tree baseline are adapted to it by
//! the CLI.
//!
//! ```
//! use csd_idxbench::{BenchConfig, BenchIndex, GrSpec, IndexError, Scheme, WorkloadSpec, run};
//! use std::collections::BTreeMap;
//! use std::sync::RwLock;
//!
//! struct Map(RwLock<BTreeMap<u64, u64>>);
//! impl BenchIndex for Map {
//!     fn insert(&self, k: u64, v: u64) -> Result<(), IndexError> {
//!         self.0.write().map_err(|e| IndexError::new(e.to_string()))?.insert(k, v);
//!         Ok(())
//!     }
//!     fn delete(&self, k: u64) -> Result<bool, IndexError> {
//!         Ok(self.0.write().map_err(|e| IndexError::new(e.to_string()))?.remove(&k).is_some())
//!     }
//!     fn lookup(&self, k: u64) -> Result<Option<u64>, IndexError> {
//!         Ok(self.0.read().map_err(|e| IndexError::new(e.to_string()))?.get(&k).copied())
//!     }
//!     fn scheme(&self) -> Scheme {
//!         // An ordered map updated in place stands in for the B+tree baseline here.
//!         Scheme::BTree
//!     }
//! }
//!
//! let mut cfg = BenchConfig::small(0.8);
//! cfg.workload = WorkloadSpec::Gr(GrSpec::with_lookup_ratio(0.8, 2_000, 1_000));
//! let r = run(&Map(RwLock::new(BTreeMap::new())), &cfg).unwrap();
//! assert_eq!(r.requests, 2_000);
//! println!("{}", r.report_text("csd bench fdtree --seed 42"));
//! ```

pub mod harness;
pub mod machine;
pub mod paper;
pub mod repro;
pub mod result;
pub mod scheme;
pub mod stats;
pub mod sweep;
pub mod workload;

pub use harness::{
    BenchConfig, BenchError, DEFAULT_SEED, Phase, Progress, preload, run, run_with_progress,
    run_workload,
};
pub use result::{BenchResult, Latency, OpResult, latency_chart};
pub use scheme::Scheme;
pub use stats::LatencySummary;
pub use sweep::{ReportFiles, sweep, sweep_configs, write_report};
pub use workload::{
    Generator, GrSpec, GtSpec, OpKind, Preload, Request, TpccMix, Workload, WorkloadError,
    WorkloadSpec, generate_gr, generate_gt, tpcc_key, tpcc_key_parts,
};

/// An error reported by an index under test: a message, so that any index crate can
/// convert its own error type (`IndexError::new(e.to_string())` or `From<String>`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct IndexError(pub String);

impl IndexError {
    /// An error with message `msg`.
    pub fn new(msg: impl Into<String>) -> Self {
        Self(msg.into())
    }
}

impl From<String> for IndexError {
    fn from(s: String) -> Self {
        Self(s)
    }
}

impl From<&str> for IndexError {
    fn from(s: &str) -> Self {
        Self(s.to_string())
    }
}

/// A key-value index the harness can drive from several threads at once.
///
/// Keys and values are `u64`. Implementations do their own concurrency control (that is
/// what is being measured): the harness calls these methods concurrently from `T_r`
/// reader threads (only [`lookup`](BenchIndex::lookup)) and `T_w` writer threads
/// ([`insert`](BenchIndex::insert) and [`delete`](BenchIndex::delete)).
pub trait BenchIndex: Send + Sync {
    /// Inserts `k -> v`, replacing an existing value.
    fn insert(&self, k: u64, v: u64) -> Result<(), IndexError>;
    /// Deletes `k`; returns whether it was present (an index that cannot tell cheaply,
    /// like an FD+tree inserting a delete entry, may return `true`).
    fn delete(&self, k: u64) -> Result<bool, IndexError>;
    /// Looks `k` up.
    fn lookup(&self, k: u64) -> Result<Option<u64>, IndexError>;
    /// The paper's scheme this index is (named in reports, matched with the paper's
    /// series).
    fn scheme(&self) -> Scheme;
    /// The index's own counters after a run (merges, blocks read/written, device time…),
    /// printed with the results.
    fn extra_stats(&self) -> Vec<(String, f64)> {
        vec![]
    }
    /// Called once after the last request completed, outside the timed run and before
    /// [`extra_stats`](BenchIndex::extra_stats): an index with background work (e.g. an
    /// FD+DS / FD+FC merge thread) waits for it here so its counters are final.
    fn quiesce(&self) -> Result<(), IndexError> {
        Ok(())
    }
    /// Called once after the preload (and its [`quiesce`](BenchIndex::quiesce)), right
    /// before the timed run: e.g. to switch the device from virtual to paced time, so
    /// that the preload costs no wall-clock time while the run feels real latency.
    fn start_run(&self) -> Result<(), IndexError> {
        Ok(())
    }
    /// Called after [`start_run`](BenchIndex::start_run): `Some(start)` when the timed
    /// run is in virtual time (the index's device on a virtual clock, now at `start`).
    /// The harness then runs its injector and workers as actors of virtual time
    /// ([`csd_host::actors`]; background threads the index starts from them, such as a
    /// merge thread, are actors too): every device command reaches the device in
    /// modeled-arrival order, a run repeats bit for bit, and every timestamp is the
    /// acting thread's modeled clock. `None` (the default): wall-clock timestamps.
    fn virtual_start(&self) -> Option<csd_sim::SimTime> {
        None
    }
    /// Called before the preload: `Some(start)` when the index's device is on a
    /// virtual clock during the preload (now at `start`). The harness then preloads
    /// from one actor of virtual time, so the threads the index starts meanwhile (merge
    /// threads) are actors too: the preload's commands reach the device in
    /// modeled-arrival order and the index the run starts from is the same from one
    /// execution to the next (with plain threads, how far a merge got while the preload
    /// went on inserting was up to the operating system). `None` (the default): plain
    /// threads.
    fn preload_start(&self) -> Option<csd_sim::SimTime> {
        None
    }
}

impl<T: BenchIndex + ?Sized> BenchIndex for std::sync::Arc<T> {
    fn insert(&self, k: u64, v: u64) -> Result<(), IndexError> {
        (**self).insert(k, v)
    }
    fn delete(&self, k: u64) -> Result<bool, IndexError> {
        (**self).delete(k)
    }
    fn lookup(&self, k: u64) -> Result<Option<u64>, IndexError> {
        (**self).lookup(k)
    }
    fn scheme(&self) -> Scheme {
        (**self).scheme()
    }
    fn extra_stats(&self) -> Vec<(String, f64)> {
        (**self).extra_stats()
    }
    fn quiesce(&self) -> Result<(), IndexError> {
        (**self).quiesce()
    }
    fn start_run(&self) -> Result<(), IndexError> {
        (**self).start_run()
    }
    fn virtual_start(&self) -> Option<csd_sim::SimTime> {
        (**self).virtual_start()
    }
    fn preload_start(&self) -> Option<csd_sim::SimTime> {
        (**self).preload_start()
    }
}
