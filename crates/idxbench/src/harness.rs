//! The experimental harness of the FD+tree paper, §5 ("Experimental set-up").
//!
//! A workload injection thread reads the pre-generated request list in order and puts
//! each request into one of two bounded FIFO queues: `Q_r` for lookups and `Q_w` for
//! insertions and deletions; when the target queue is full it blocks until a slot frees
//! up. The queue slots (paper: 5000 in total) are divided between `Q_r` and `Q_w` in the
//! ratio `W_l : (W_i + W_d)` of the generated workload (at least one slot each). `T_r`
//! reader threads serve `Q_r` and `T_w` writer threads serve `Q_w` (paper: 6 and 2).
//!
//! Per request the harness keeps four timestamps: when it arrived (the injector took it
//! from the request list and offered it to its queue), when it was placed in the queue,
//! when a worker dequeued it, and when the index call returned. From them, as §5 defines
//! them:
//! * `R_p` (processing time) = completion − dequeue,
//! * `R_q` (`R_p` plus the time spent waiting in the queue) = completion − placement,
//! * `R_o` ("the overall time between request arrival and completion") = completion −
//!   arrival: `R_q` plus the time the request waited for a free slot while its queue
//!   was full (the injector blocked on it);
//! * throughput = all requests / the run's wall time (first injection to last
//!   completion, `total_s`).
//!
//! Choices made:
//! * A request arrives when the injector reaches it in the list. The injector is one
//!   thread, so while it is blocked on a full queue the requests behind it have not
//!   arrived yet (a closed system, as the paper's injection thread is); the blocked time
//!   is charged to the request being offered, in its `R_o`. Keeping it out of `R_q`
//!   follows the paper's wording ("waiting in the queue"); `R_o − R_q` per request is
//!   exactly the back-pressure a full queue puts on arrivals.
//! * The first `warmup` requests (by generation order; paper: 10 K) are executed but not
//!   measured; throughput and `total_s` cover the whole run.
//! * Per-key order of writes: a write whose key was written earlier in the workload
//!   (see [`crate::Request::after`]) waits until that write has completed. The paper's
//!   100-request spacing makes this practically never happen; the rule makes the final
//!   index content exactly the sequential replay ([`crate::Workload::expected_final`]).
//!   Such waits are counted ([`crate::BenchResult::ordering_waits`]) and, being after
//!   dequeue, are part of `R_p`.
//! * The preload is one thread inserting the keys in ascending order before the clock of
//!   the run starts; its wall time is reported separately. On an index whose device is
//!   in virtual time then ([`BenchIndex::preload_start`]) it is an actor of virtual
//!   time, as are the merge threads it starts: the run starts from the same index every
//!   time.
//! * The first index error stops the run and is returned as [`BenchError::Index`].
//! * Time is the wall clock, or in a virtual timed run ([`BenchIndex::virtual_start`])
//!   modeled time: the injector and the workers then run as actors of virtual time
//!   ([`csd_host::actors`]; issue 30): each request is stamped with the clock of the
//!   actor that handles it, device commands reach the device in modeled-arrival order,
//!   and the run repeats bit for bit. The queues' latches and conditions are the
//!   actors' (plain `std` ones on ordinary threads). Host work between device commands
//!   costs no modeled time, as everywhere in virtual time: such a run measures the
//!   device and the index's concurrency control, not the host's CPU.
//! * After the last completion (clock stopped) the harness calls
//!   [`BenchIndex::quiesce`] so background merges finish
//!   before [`BenchIndex::extra_stats`] is read.

use crate::machine::CpuSample;
use crate::result::{BenchResult, OpResult};
use crate::stats::LatencyRecorder;
use crate::workload::{
    GrSpec, GtSpec, NO_PREDECESSOR, OpKind, Workload, WorkloadError, WorkloadSpec,
};
use crate::{BenchIndex, IndexError, Scheme};
use csd_host::actors::Actors;
use csd_host::actors::sync::{Condvar, Mutex as ActorMutex};
use csd_sim::SimTime;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Errors of a benchmark run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The configuration is unusable.
    #[error("invalid benchmark configuration: {0}")]
    Config(String),
    /// The workload spec is unusable.
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    /// The index failed during the preload.
    #[error("index '{scheme}' failed while preloading key {key}: {source}")]
    Preload {
        /// The index's scheme.
        scheme: Scheme,
        /// The key being inserted.
        key: u64,
        /// The index's error.
        source: IndexError,
    },
    /// The index failed a request; the run was stopped.
    #[error("index '{scheme}' failed {op} of key {key} (request {request}): {source}")]
    Index {
        /// The index's scheme.
        scheme: Scheme,
        /// Position of the request in the workload.
        request: u64,
        /// Its kind (printed as its name, e.g. `insert`).
        op: OpKind,
        /// Its key.
        key: u64,
        /// The index's error.
        source: IndexError,
    },
    /// The index failed to settle after the preload or to switch to the timed run.
    #[error("index '{scheme}' failed to start the run after the preload: {source}")]
    StartRun {
        /// The index's scheme.
        scheme: Scheme,
        /// The index's error.
        source: IndexError,
    },
    /// The index failed to finish its background work after the run.
    #[error("index '{scheme}' failed to quiesce after the run: {source}")]
    Quiesce {
        /// The index's scheme.
        scheme: Scheme,
        /// The index's error.
        source: IndexError,
    },
    /// A worker thread panicked (a bug in the index or the harness).
    #[error("a {0} thread panicked")]
    WorkerPanicked(&'static str),
    /// Writing a plot failed.
    #[error(transparent)]
    Plot(#[from] csd_plot::PlotError),
    /// Writing a report file failed.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// Benchmark parameters (§5 set-up). Serializable so reports can echo it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchConfig {
    /// Generator and its parameters.
    pub workload: WorkloadSpec,
    /// Seed of the generator.
    pub seed: u64,
    /// Reader threads `T_r` serving `Q_r` (paper: 6).
    pub readers: usize,
    /// Writer threads `T_w` serving `Q_w` (paper: 2).
    pub writers: usize,
    /// Total queue slots `|Q_r| + |Q_w|` (paper: 5000).
    pub queue_slots: usize,
    /// Requests executed before measuring starts (paper: 10 K).
    pub warmup: u64,
}

/// Default seed of the benchmark commands.
pub const DEFAULT_SEED: u64 = 42;

impl BenchConfig {
    /// The paper's Figure 6 set-up for lookup ratio `w_l`: G_R, 10 M preloaded keys,
    /// 10 M requests, 10 K warm-up, 5000 queue slots, `T_r = 6`, `T_w = 2`.
    pub fn paper(w_l: f64) -> Self {
        Self {
            workload: WorkloadSpec::Gr(GrSpec::with_lookup_ratio(w_l, 10_000_000, 10_000_000)),
            seed: DEFAULT_SEED,
            readers: 6,
            writers: 2,
            queue_slots: 5000,
            warmup: 10_000,
        }
    }

    /// The paper's Figure 8 set-up for `warehouses` warehouses: G_T with 10 districts,
    /// 3000 customers, 3 preloaded orders per customer. The paper does not give the
    /// G_T workload length; like Figure 7 ("workload size is set to be equal to the
    /// initial index size") it is set to the preload size here.
    pub fn paper_tpcc(warehouses: u32) -> Self {
        let preload = u64::from(warehouses) * 10 * 3000 * 3;
        Self {
            workload: WorkloadSpec::Gt(GtSpec::paper(warehouses, preload)),
            seed: DEFAULT_SEED,
            readers: 6,
            writers: 2,
            queue_slots: 5000,
            warmup: 10_000,
        }
    }

    /// A small G_R set-up that finishes in about a minute on 2 cores for an index doing
    /// tens of thousands of operations per second: 100 K preloaded keys, 100 K requests,
    /// 1 K warm-up; queues and threads as in the paper.
    pub fn small(w_l: f64) -> Self {
        Self {
            workload: WorkloadSpec::Gr(GrSpec::with_lookup_ratio(w_l, 100_000, 100_000)),
            seed: DEFAULT_SEED,
            readers: 6,
            writers: 2,
            queue_slots: 5000,
            warmup: 1_000,
        }
    }

    /// A small G_T set-up: `warehouses` warehouses with 10 districts of 300 customers
    /// (one tenth of TPC-C's), 3 preloaded orders each, 100 K requests.
    pub fn small_tpcc(warehouses: u32) -> Self {
        Self {
            workload: WorkloadSpec::Gt(GtSpec {
                customers_per_district: 300,
                ..GtSpec::paper(warehouses, 100_000)
            }),
            seed: DEFAULT_SEED,
            readers: 6,
            writers: 2,
            queue_slots: 5000,
            warmup: 1_000,
        }
    }

    /// The same configuration with G_R's lookup ratio set to `w_l` (insertions and
    /// deletions share the rest equally). Fails for a G_T configuration.
    pub fn with_lookup_ratio(&self, w_l: f64) -> Result<Self, BenchError> {
        match &self.workload {
            WorkloadSpec::Gr(g) => {
                let mut c = self.clone();
                c.workload = WorkloadSpec::Gr(GrSpec {
                    delete_min_age: g.delete_min_age,
                    ..GrSpec::with_lookup_ratio(w_l, g.requests, g.preload)
                });
                Ok(c)
            }
            WorkloadSpec::Gt(_) => Err(BenchError::Config(
                "a lookup-ratio sweep needs a G_R workload, not G_T".into(),
            )),
        }
    }

    fn validate(&self) -> Result<(), BenchError> {
        if self.readers == 0 || self.writers == 0 {
            return Err(BenchError::Config(format!(
                "need at least one reader and one writer thread (T_r = {}, T_w = {})",
                self.readers, self.writers
            )));
        }
        if self.queue_slots < 2 {
            return Err(BenchError::Config(format!(
                "queue_slots = {} but Q_r and Q_w need at least one slot each",
                self.queue_slots
            )));
        }
        Ok(())
    }
}

impl Default for BenchConfig {
    /// [`BenchConfig::small`] at `W_l = 0.8`.
    fn default() -> Self {
        Self::small(0.8)
    }
}

/// Phase of a run, for progress reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Inserting the preload keys.
    Preload,
    /// Running the measured workload.
    Run,
}

/// Progress of a run: `done` of `total` items of `phase`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Current phase.
    pub phase: Phase,
    /// Items finished.
    pub done: u64,
    /// Items in the phase.
    pub total: u64,
}

/// Generates the workload of `cfg`, preloads `index` and runs the workload against it.
pub fn run(index: &dyn BenchIndex, cfg: &BenchConfig) -> Result<BenchResult, BenchError> {
    run_with_progress(index, cfg, &|_| {})
}

/// [`run`] reporting progress about five times a second.
pub fn run_with_progress(
    index: &dyn BenchIndex,
    cfg: &BenchConfig,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<BenchResult, BenchError> {
    cfg.validate()?;
    let workload = cfg.workload.generate(cfg.seed)?;
    run_workload(index, &workload, cfg, progress)
}

/// Inserts the workload's preload into `index`, single-threaded, in key order.
/// Returns the wall time it took.
pub fn preload(
    index: &dyn BenchIndex,
    workload: &Workload,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<Duration, BenchError> {
    let t0 = Instant::now();
    let total = workload.preload.len();
    let mut last = Instant::now();
    for (n, (k, v)) in workload.preload.iter().enumerate() {
        index.insert(k, v).map_err(|source| BenchError::Preload {
            scheme: index.scheme(),
            key: k,
            source,
        })?;
        if n % 4096 == 0 && last.elapsed() >= Duration::from_millis(200) {
            last = Instant::now();
            progress(Progress {
                phase: Phase::Preload,
                done: n as u64,
                total,
            });
        }
    }
    progress(Progress {
        phase: Phase::Preload,
        done: total,
        total,
    });
    Ok(t0.elapsed())
}

/// Preloads `index` and runs an already generated `workload` (the generator fields of
/// `cfg` are only echoed in the result; threads, queues and warm-up are used).
pub fn run_workload(
    index: &dyn BenchIndex,
    workload: &Workload,
    cfg: &BenchConfig,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<BenchResult, BenchError> {
    cfg.validate()?;
    let preload_time = match index.preload_start() {
        // One actor, joined by the merge threads it starts; `run` returns once they
        // all finished.
        Some(start) => Actors::new()
            .run(1, start, |_| preload(index, workload, progress))
            .pop()
            .unwrap_or(Ok(Duration::ZERO))?,
        None => preload(index, workload, progress)?,
    };
    // The run starts from a settled index: merges the preload triggered finish first.
    index
        .quiesce()
        .and_then(|()| index.start_run())
        .map_err(|source| BenchError::StartRun {
            scheme: index.scheme(),
            source,
        })?;
    let before = CpuSample::now();
    let out = execute(index, workload, cfg, progress)?;
    let machine = crate::machine::since(before);
    index.quiesce().map_err(|source| BenchError::Quiesce {
        scheme: index.scheme(),
        source,
    })?;
    Ok(BenchResult::assemble(
        index,
        workload,
        cfg,
        preload_time,
        out,
        machine,
    ))
}

/// The run's clock: the wall clock, or the acting actor's modeled clock (a virtual run).
#[derive(Clone, Copy)]
enum Clock {
    Wall(Instant),
    Virtual(SimTime),
}

impl Clock {
    /// Time since the run's start: wall, or the calling actor's modeled clock.
    fn now(self) -> Duration {
        match self {
            Clock::Wall(t0) => t0.elapsed(),
            Clock::Virtual(start) => {
                Duration::from_nanos(Actors::current().map_or(0, |a| a.now().since(start)))
            }
        }
    }

    /// Let other threads act before testing a condition again (an actor lets 1 µs of
    /// modeled time pass, which passes the turn on).
    fn pause(self) {
        match self {
            Clock::Wall(_) => std::thread::yield_now(),
            Clock::Virtual(_) => {
                if let Some(a) = Actors::current() {
                    let _ = Actors::wait_until(a.now().after(1_000));
                }
            }
        }
    }
}

/// A queued request: its position, arrival and placement times (since the run's start).
type Queued = (u32, Duration, Duration);

/// A bounded FIFO queue of request positions, stamping each with its placement time.
struct Queue {
    state: ActorMutex<QState>,
    not_empty: Condvar,
    not_full: Condvar,
    cap: usize,
}

struct QState {
    buf: VecDeque<Queued>,
    closed: bool,
}

impl Queue {
    fn new(cap: usize) -> Self {
        Self {
            state: ActorMutex::new(QState {
                buf: VecDeque::with_capacity(cap),
                closed: false,
            }),
            not_empty: Condvar::new(),
            not_full: Condvar::new(),
            cap,
        }
    }

    /// Blocks while full; false if the queue was closed. `arrived` is when the injector
    /// offered the request.
    fn push(&self, idx: u32, arrived: Duration, clock: Clock) -> bool {
        let mut s = self.state.lock();
        while s.buf.len() >= self.cap && !s.closed {
            s = self.not_full.wait(s);
        }
        if s.closed {
            return false;
        }
        s.buf.push_back((idx, arrived, clock.now()));
        drop(s);
        self.not_empty.notify_one();
        true
    }

    /// Blocks while empty; `None` once closed and drained.
    fn pop(&self) -> Option<Queued> {
        let mut s = self.state.lock();
        loop {
            if let Some(item) = s.buf.pop_front() {
                drop(s);
                self.not_full.notify_one();
                return Some(item);
            }
            if s.closed {
                return None;
            }
            s = self.not_empty.wait(s);
        }
    }

    fn close(&self) {
        self.state.lock().closed = true;
        self.not_empty.notify_all();
        self.not_full.notify_all();
    }
}

/// Per request kind: `[R_p, R_q, R_o]` recorders.
pub(crate) type Recorders = [[LatencyRecorder; 3]; 3];

/// What the worker threads measured.
pub(crate) struct RunOutput {
    pub rec: Recorders,
    pub total: Duration,
    pub virtual_time: bool,
    pub q_r_slots: usize,
    pub q_w_slots: usize,
    pub lookup_hits: u64,
    pub delete_misses: u64,
    pub ordering_waits: u64,
    pub not_executed_once: u64,
}

#[derive(Default)]
struct WorkerOut {
    rec: Recorders,
    lookup_hits: u64,
    delete_misses: u64,
    ordering_waits: u64,
    /// The worker's last completion (since the run's start).
    last: Duration,
}

/// Shared state of one run.
struct Shared<'a> {
    index: &'a dyn BenchIndex,
    workload: &'a Workload,
    warmup: u64,
    executed: Vec<AtomicU8>,
    completed: AtomicU64,
    abort: AtomicBool,
    first_error: Mutex<Option<BenchError>>,
    live: AtomicUsize,
    qr: Queue,
    qw: Queue,
    clock: Clock,
}

/// Closes the queues and flags the run as aborted if a worker unwinds.
struct PanicGuard<'a, 'b>(&'b Shared<'a>);

impl Drop for PanicGuard<'_, '_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.abort.store(true, Ordering::SeqCst);
            self.0.qr.close();
            self.0.qw.close();
        }
        self.0.live.fetch_sub(1, Ordering::SeqCst);
    }
}

fn worker(sh: &Shared<'_>, q: &Queue) -> WorkerOut {
    let _guard = PanicGuard(sh);
    let mut out = WorkerOut::default();
    let reqs = &sh.workload.requests;
    let clock = sh.clock;
    while let Some((idx, t_arr, t_enq)) = q.pop() {
        let t_deq = clock.now();
        if sh.abort.load(Ordering::Relaxed) {
            break;
        }
        let r = reqs[idx as usize];
        if r.after != NO_PREDECESSOR && sh.executed[r.after as usize].load(Ordering::Acquire) == 0 {
            out.ordering_waits += 1;
            while sh.executed[r.after as usize].load(Ordering::Acquire) == 0
                && !sh.abort.load(Ordering::Relaxed)
            {
                clock.pause();
            }
        }
        let res = match r.op {
            OpKind::Insert => sh.index.insert(r.key, r.value).map(|()| true),
            OpKind::Delete => sh.index.delete(r.key),
            OpKind::Lookup => sh.index.lookup(r.key).map(|v| v.is_some()),
        };
        let t_done = clock.now();
        out.last = out.last.max(t_done);
        sh.executed[idx as usize].fetch_add(1, Ordering::Release);
        sh.completed.fetch_add(1, Ordering::Relaxed);
        match res {
            Ok(found) => match r.op {
                OpKind::Lookup if found => out.lookup_hits += 1,
                OpKind::Delete if !found => out.delete_misses += 1,
                _ => {}
            },
            Err(source) => {
                let mut e = sh
                    .first_error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if e.is_none() {
                    *e = Some(BenchError::Index {
                        scheme: sh.index.scheme(),
                        request: u64::from(idx),
                        op: r.op,
                        key: r.key,
                        source,
                    });
                }
                sh.abort.store(true, Ordering::SeqCst);
                sh.qr.close();
                sh.qw.close();
                break;
            }
        }
        if u64::from(idx) >= sh.warmup {
            let k = r.op.index();
            out.rec[k][0].record(t_done.saturating_sub(t_deq).as_nanos() as u64);
            out.rec[k][1].record(t_done.saturating_sub(t_enq).as_nanos() as u64);
            out.rec[k][2].record(t_done.saturating_sub(t_arr).as_nanos() as u64);
        }
    }
    out
}

/// Queue sizes in the ratio lookups : writes of the generated workload, >= 1 each.
fn queue_sizes(slots: usize, lookups: u64, writes: u64) -> (usize, usize) {
    let total = (lookups + writes).max(1) as f64;
    let qr = ((slots as f64) * lookups as f64 / total).round() as usize;
    let qr = qr.clamp(1, slots - 1);
    (qr, slots - qr)
}

/// Run `workload` on `index`: the injector and the worker threads (see the module
/// doc), then the merged measurements; the first index error, or a panicked thread,
/// fails the run.
fn execute(
    index: &dyn BenchIndex,
    workload: &Workload,
    cfg: &BenchConfig,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<RunOutput, BenchError> {
    let n = workload.requests.len();
    if n >= NO_PREDECESSOR as usize {
        return Err(BenchError::Config(format!(
            "{n} requests is too many: a workload holds fewer than 2^32 - 1"
        )));
    }
    let c = workload.counts();
    let (q_r_slots, q_w_slots) =
        queue_sizes(cfg.queue_slots, c[OpKind::Lookup.index()], c[0] + c[1]);
    let t0 = Instant::now();
    let clock = index
        .virtual_start()
        .map_or(Clock::Wall(t0), Clock::Virtual);
    let sh = Shared {
        index,
        workload,
        warmup: cfg.warmup,
        executed: (0..n).map(|_| AtomicU8::new(0)).collect(),
        completed: AtomicU64::new(0),
        abort: AtomicBool::new(false),
        first_error: Mutex::new(None),
        live: AtomicUsize::new(cfg.readers + cfg.writers),
        qr: Queue::new(q_r_slots),
        qw: Queue::new(q_w_slots),
        clock,
    };
    let (outs, panicked) = run_threads(&sh, cfg, progress);
    let total = match clock {
        Clock::Wall(t0) => t0.elapsed(),
        Clock::Virtual(_) => outs.iter().map(|o| o.last).max().unwrap_or_default(),
    };
    if let Some(kind) = panicked {
        return Err(BenchError::WorkerPanicked(kind));
    }
    if let Some(e) = sh
        .first_error
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
    {
        return Err(e);
    }
    progress(Progress {
        phase: Phase::Run,
        done: n as u64,
        total: n as u64,
    });
    let merged = merge_outputs(&outs);
    let not_once = sh
        .executed
        .iter()
        .filter(|e| e.load(Ordering::Relaxed) != 1)
        .count() as u64;
    Ok(RunOutput {
        rec: merged.rec,
        total,
        virtual_time: matches!(clock, Clock::Virtual(_)),
        q_r_slots,
        q_w_slots,
        lookup_hits: merged.lookup_hits,
        delete_misses: merged.delete_misses,
        ordering_waits: merged.ordering_waits,
        not_executed_once: not_once,
    })
}

/// The injector, the readers and the writers on scoped threads (in a virtual run, actors
/// of one group: actor 0 the injector, then the readers, then the writers), with
/// progress reports every 200 ms until every worker has stopped. Returns the workers'
/// outputs and the kind of a thread that panicked.
fn run_threads(
    sh: &Shared<'_>,
    cfg: &BenchConfig,
    progress: &(dyn Fn(Progress) + Sync),
) -> (Vec<WorkerOut>, Option<&'static str>) {
    let n = sh.workload.requests.len();
    let inject = move || {
        for (i, r) in sh.workload.requests.iter().enumerate() {
            let q = if r.op.is_write() { &sh.qw } else { &sh.qr };
            if !q.push(i as u32, sh.clock.now(), sh.clock) {
                break;
            }
        }
        sh.qr.close();
        sh.qw.close();
    };
    let work = move |i: usize| {
        if i < cfg.readers {
            ("reader", worker(sh, &sh.qr))
        } else {
            ("writer", worker(sh, &sh.qw))
        }
    };
    let report = || {
        let mut last = Instant::now();
        while sh.live.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(Duration::from_millis(20));
            if last.elapsed() >= Duration::from_millis(200) {
                last = Instant::now();
                progress(Progress {
                    phase: Phase::Run,
                    done: sh.completed.load(Ordering::Relaxed),
                    total: n as u64,
                });
            }
        }
    };
    let workers = cfg.readers + cfg.writers;
    std::thread::scope(|s| {
        if let Clock::Virtual(start) = sh.clock {
            s.spawn(report);
            let group = Actors::new();
            // A panicking actor's panic is resumed by `run` once the others finished;
            // catch it to report the run as failed.
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                group.run(1 + workers, start, |a| {
                    if a == 0 {
                        inject();
                        None
                    } else {
                        Some(work(a - 1).1)
                    }
                })
            }));
            return match ran {
                Ok(outs) => (outs.into_iter().flatten().collect(), None),
                Err(_) => (Vec::new(), Some("actor")),
            };
        }
        let injector = s.spawn(inject);
        let handles: Vec<_> = (0..workers).map(|i| s.spawn(move || work(i))).collect();
        report();
        let mut panicked = None;
        if injector.join().is_err() {
            panicked = Some("injector");
        }
        let mut outs = Vec::new();
        for (i, h) in handles.into_iter().enumerate() {
            match h.join() {
                Ok((_, o)) => outs.push(o),
                Err(_) => panicked = Some(if i < cfg.readers { "reader" } else { "writer" }),
            }
        }
        (outs, panicked)
    })
}

/// The workers' recorders merged and their counts summed.
fn merge_outputs(outs: &[WorkerOut]) -> WorkerOut {
    let mut all = WorkerOut::default();
    for o in outs {
        for (k, pair) in all.rec.iter_mut().enumerate() {
            for (mine, theirs) in pair.iter_mut().zip(&o.rec[k]) {
                mine.merge(theirs);
            }
        }
        all.lookup_hits += o.lookup_hits;
        all.delete_misses += o.delete_misses;
        all.ordering_waits += o.ordering_waits;
    }
    all
}

impl OpResult {
    pub(crate) fn from_recorders(rec: &[LatencyRecorder; 3]) -> Self {
        Self {
            rp: rec[0].summary(),
            rq: rec[1].summary(),
            ro: rec[2].summary(),
            rp_distribution: rec[0].distribution(),
            rq_distribution: rec[1].distribution(),
            ro_distribution: rec[2].distribution(),
            rp_buckets_2_5ms: rec[0].equiwidth_buckets(2.5, 400),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_split_follows_ratio() {
        assert_eq!(queue_sizes(5000, 80, 20), (4000, 1000));
        assert_eq!(queue_sizes(5000, 0, 20), (1, 4999));
        assert_eq!(queue_sizes(5000, 20, 0), (4999, 1));
        assert_eq!(queue_sizes(2, 1, 1), (1, 1));
    }

    #[test]
    fn queue_is_fifo_and_closes() {
        let q = Queue::new(2);
        let clock = Clock::Wall(Instant::now());
        let t = clock.now();
        assert!(q.push(1, t, clock));
        assert!(q.push(2, t, clock));
        assert_eq!(q.pop().map(|x| x.0), Some(1));
        q.close();
        assert!(!q.push(3, t, clock));
        assert_eq!(q.pop().map(|x| x.0), Some(2));
        assert!(q.pop().is_none());
    }

    /// A request offered to a full queue arrives when offered and is placed only when a
    /// slot frees up: the wait shows in `R_o` (arrival) and not in `R_q` (placement).
    #[test]
    fn blocked_injection_counts_from_arrival() {
        let q = Queue::new(1);
        let clock = Clock::Wall(Instant::now());
        assert!(q.push(1, clock.now(), clock));
        let hold = Duration::from_millis(30);
        std::thread::scope(|s| {
            s.spawn(|| assert!(q.push(2, clock.now(), clock)));
            std::thread::sleep(hold);
            assert_eq!(q.pop().map(|x| x.0), Some(1));
        });
        let (idx, arrived, placed) = q.pop().expect("the blocked request was placed");
        assert_eq!(idx, 2);
        assert!(placed.saturating_sub(arrived) >= hold / 2);
    }
}
