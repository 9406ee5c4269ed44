//! YCSB for the store and its peers (batch-io §8.1.3).
//!
//! The paper's dataset is N records of an 8-byte key and a 100-byte value; its two
//! workloads interleave operations deterministically: **read-heavy** is 19 reads then 1
//! update, repeated; **write-heavy** is 19 updates then 1 read. Keys are drawn from the
//! existing records with a Zipfian distribution. The standard YCSB core workloads A–F
//! are here too (A 50/50 read/update, B 95/5, C read only, D 95% reads of the latest
//! records / 5% inserts, E 95% short scans / 5% inserts, F 50% reads / 50%
//! read-modify-writes), drawn at random per operation as YCSB does.
//!
//! Choices:
//! * Record `i`'s key is `fnv1a64(i)` big-endian (YCSB hashes record numbers into keys
//!   too), so the load inserts in random key order and the tree fills as it would under
//!   YCSB's loader; scans walk hashed order.
//! * Zipfian is YCSB's scrambled zipfian (`csd_sim::dist`, theta 0.99 by default);
//!   workload D's "latest" draws a zipfian distance back from the newest record.
//! * A run stops after an operation count, a modeled duration (the target's virtual
//!   clock; only targets with one) or a wall-clock duration.
//! * Latencies go into HDR histograms: modeled (the store's own clock: submission to
//!   completion of each operation, queueing for the host thread included) and wall.

use crate::{KvError, Store};
use csd_host::CommandIssuer;
use csd_sim::dist::{Dist, Sampler, fnv1a64};
use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::time::Instant;

/// Value bytes of a record (paper: 100).
pub const VALUE_LEN: usize = 100;

/// A YCSB workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// The paper's read-heavy mix: 19 reads, then 1 update, repeated (95/5).
    ReadHeavy,
    /// The paper's write-heavy mix: 19 updates, then 1 read, repeated (5/95).
    WriteHeavy,
    /// YCSB A: 50% reads, 50% updates.
    A,
    /// YCSB B: 95% reads, 5% updates.
    B,
    /// YCSB C: reads only.
    C,
    /// YCSB D: 95% reads of recent records, 5% inserts.
    D,
    /// YCSB E: 95% scans of 1..=100 records, 5% inserts.
    E,
    /// YCSB F: 50% reads, 50% read-modify-writes.
    F,
}

impl Workload {
    /// Every workload, in order.
    pub const ALL: [Workload; 8] = [
        Workload::ReadHeavy,
        Workload::WriteHeavy,
        Workload::A,
        Workload::B,
        Workload::C,
        Workload::D,
        Workload::E,
        Workload::F,
    ];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Workload::ReadHeavy => "read-heavy",
            Workload::WriteHeavy => "write-heavy",
            Workload::A => "a",
            Workload::B => "b",
            Workload::C => "c",
            Workload::D => "d",
            Workload::E => "e",
            Workload::F => "f",
        }
    }
}

impl std::str::FromStr for Workload {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!("workload `{s}`: use read-heavy, write-heavy or a, b, c, d, e, f")
            })
    }
}

/// Key popularity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyDist {
    /// YCSB's scrambled zipfian with this theta (paper and YCSB: 0.99).
    Zipfian(f64),
    /// Every record equally likely.
    Uniform,
}

impl std::str::FromStr for KeyDist {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "zipfian" | "zipf" => Ok(KeyDist::Zipfian(0.99)),
            "uniform" => Ok(KeyDist::Uniform),
            _ => match s.strip_prefix("zipf:").map(str::parse::<f64>) {
                Some(Ok(t)) if t > 0.0 && t.is_finite() => Ok(KeyDist::Zipfian(t)),
                _ => Err(format!(
                    "key distribution `{s}`: use zipfian, zipf:THETA or uniform"
                )),
            },
        }
    }
}

/// When a run stops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Limit {
    /// After this many operations.
    Ops(u64),
    /// After this much modeled time (seconds; targets with a virtual clock).
    ModeledSecs(f64),
    /// After this much wall-clock time (seconds).
    WallSecs(f64),
}

/// A YCSB run's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct YcsbConfig {
    /// Records loaded.
    pub records: u64,
    /// Operation mix.
    pub workload: Workload,
    /// Key popularity.
    pub dist: KeyDist,
    /// When the run stops.
    pub limit: Limit,
    /// Seed of every random choice.
    pub seed: u64,
}

/// What the driver needs of a key-value store.
pub trait KvTarget {
    /// Its name in reports.
    fn label(&self) -> String;
    /// The value of `key`.
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, KvError>;
    /// Set `key` to `value`.
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvError>;
    /// Read up to `n` records from `start` on; returns how many.
    fn scan(&mut self, start: &[u8], n: usize) -> Result<usize, KvError>;
    /// Make everything written so far durable.
    fn sync(&mut self) -> Result<(), KvError>;
    /// The modeled clock in ns, for targets that have one.
    fn modeled_now(&self) -> Option<u64> {
        None
    }
    /// Hand the modeled latency (ns) of each operation to `f`, once, when it is known
    /// (targets with a modeled clock; the event core fixes some only later).
    fn drain_modeled_latencies(&mut self, f: &mut dyn FnMut(u64)) {
        let _ = f;
    }
    /// The phase is over: fix every modeled instant (the event core books what it has
    /// recorded), so that every latency can be drained.
    fn finish_modeled(&mut self) {}
}

impl<I: CommandIssuer> KvTarget for Store<I> {
    fn label(&self) -> String {
        format!("csd {}", self.config().interface.name())
    }
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        Store::get(self, key)
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        Store::put(self, key, value).map(|_| ())
    }
    fn scan(&mut self, start: &[u8], n: usize) -> Result<usize, KvError> {
        Store::scan(self, start, n).map(|v| v.len())
    }
    fn sync(&mut self) -> Result<(), KvError> {
        Store::sync(self).map(|_| ())
    }
    fn modeled_now(&self) -> Option<u64> {
        Some(self.now().ns())
    }
    fn drain_modeled_latencies(&mut self, f: &mut dyn FnMut(u64)) {
        self.drain_latencies(f);
    }
    fn finish_modeled(&mut self) {
        self.settle_events();
    }
}

/// The 8-byte key of record `i`.
pub fn record_key(i: u64) -> [u8; 8] {
    fnv1a64(i).to_be_bytes()
}

/// The 100-byte value of record `i` at version `v` (deterministic, so a reader can check it).
pub fn record_value(i: u64, v: u64) -> [u8; VALUE_LEN] {
    let mut out = [0u8; VALUE_LEN];
    let mut x = fnv1a64(i ^ v.rotate_left(32));
    for chunk in out.chunks_mut(8) {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    out
}

/// Operations a run did, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpCounts {
    /// Reads.
    pub reads: u64,
    /// Reads that found no record (a bug for existing keys: counted so reports show it).
    pub read_misses: u64,
    /// Updates.
    pub updates: u64,
    /// Inserts.
    pub inserts: u64,
    /// Scans.
    pub scans: u64,
    /// Read-modify-writes.
    pub rmws: u64,
}

impl OpCounts {
    /// All operations.
    pub fn total(&self) -> u64 {
        self.reads + self.updates + self.inserts + self.scans + self.rmws
    }
}

/// Figures of a load or run phase.
#[derive(Debug, Clone)]
pub struct PhaseResult {
    /// Operations by kind.
    pub ops: OpCounts,
    /// Wall-clock seconds.
    pub wall_s: f64,
    /// Modeled seconds (targets with a virtual clock).
    pub modeled_s: Option<f64>,
    /// Modeled latency per operation, ns (empty for targets without a clock).
    pub modeled_latency: Histogram<u64>,
    /// Wall latency per operation, ns.
    pub wall_latency: Histogram<u64>,
}

impl PhaseResult {
    /// Operations per modeled second.
    pub fn modeled_ops_per_s(&self) -> Option<f64> {
        self.modeled_s
            .filter(|&s| s > 0.0)
            .map(|s| self.ops.total() as f64 / s)
    }

    /// Operations per wall-clock second.
    pub fn wall_ops_per_s(&self) -> f64 {
        if self.wall_s > 0.0 {
            self.ops.total() as f64 / self.wall_s
        } else {
            0.0
        }
    }
}

fn histogram() -> Histogram<u64> {
    // 1 ns .. 100 s, 3 significant digits; the bounds are constants, so this cannot fail.
    Histogram::new_with_bounds(1, 100_000_000_000, 3).unwrap_or_else(|_| {
        Histogram::new(3).unwrap_or_else(|_| unreachable!("3 significant digits are valid"))
    })
}

/// Load `records` records in record order (random key order); `progress` gets the count
/// done now and then. Ends with a sync.
pub fn load<T: KvTarget + ?Sized>(
    t: &mut T,
    records: u64,
    progress: &mut dyn FnMut(u64),
) -> Result<PhaseResult, KvError> {
    let wall = Instant::now();
    let m0 = t.modeled_now();
    let mut ops = OpCounts::default();
    let mut ml = histogram();
    let mut wl = histogram();
    for i in 0..records {
        let w = Instant::now();
        t.put(&record_key(i), &record_value(i, 0))?;
        record(&mut ml, &mut wl, t, w);
        ops.inserts += 1;
        if i.is_multiple_of(4096) {
            progress(i);
        }
    }
    t.sync()?;
    t.finish_modeled();
    drain(&mut ml, t);
    progress(records);
    Ok(PhaseResult {
        ops,
        wall_s: wall.elapsed().as_secs_f64(),
        modeled_s: m0.and_then(|a| t.modeled_now().map(|b| b.saturating_sub(a) as f64 / 1e9)),
        modeled_latency: ml,
        wall_latency: wl,
    })
}

fn record<T: KvTarget + ?Sized>(
    ml: &mut Histogram<u64>,
    wl: &mut Histogram<u64>,
    t: &mut T,
    w: Instant,
) {
    let _ = wl.record((w.elapsed().as_nanos() as u64).max(1));
    drain(ml, t);
}

/// Record the modeled latencies `t` has fixed since the last call.
fn drain<T: KvTarget + ?Sized>(ml: &mut Histogram<u64>, t: &mut T) {
    t.drain_modeled_latencies(&mut |ns| {
        let _ = ml.record(ns.max(1));
    });
}

#[derive(Clone, Copy)]
enum Op {
    Read,
    Update,
    Insert,
    Scan,
    Rmw,
}

/// The run phase: operations of `cfg.workload` over the loaded records until the limit;
/// `progress` gets the share done (0..=1) now and then.
pub fn run<T: KvTarget + ?Sized>(
    t: &mut T,
    cfg: &YcsbConfig,
    progress: &mut dyn FnMut(f64),
) -> Result<PhaseResult, KvError> {
    if cfg.records == 0 {
        return Err(KvError::Config("YCSB needs at least one record".into()));
    }
    if matches!(cfg.limit, Limit::ModeledSecs(_)) && t.modeled_now().is_none() {
        return Err(KvError::Config(format!(
            "{} has no modeled clock: limit the run by operations or wall time",
            t.label()
        )));
    }
    let dist = match cfg.dist {
        KeyDist::Zipfian(theta) => Dist::Zipf { theta },
        KeyDist::Uniform => Dist::Uniform,
    };
    let mut r = Runner {
        workload: cfg.workload,
        sampler: dist.sampler(cfg.records),
        rng: SmallRng::seed_from_u64(cfg.seed),
        inserted: cfg.records,
        version: 1,
        ops: OpCounts::default(),
    };
    let wall = Instant::now();
    let m0 = t.modeled_now().unwrap_or(0);
    let mut ml = histogram();
    let mut wl = histogram();
    let mut n = 0u64;
    loop {
        let done = match cfg.limit {
            Limit::Ops(k) => n as f64 / k.max(1) as f64,
            Limit::ModeledSecs(s) => {
                (t.modeled_now().unwrap_or(0).saturating_sub(m0)) as f64 / 1e9 / s
            }
            Limit::WallSecs(s) => wall.elapsed().as_secs_f64() / s,
        };
        if done >= 1.0 {
            break;
        }
        if n.is_multiple_of(1024) {
            progress(done);
        }
        let op = choose(cfg.workload, n, &mut r.rng);
        let w = Instant::now();
        r.one(t, op)?;
        record(&mut ml, &mut wl, t, w);
        n += 1;
    }
    t.finish_modeled();
    drain(&mut ml, t);
    progress(1.0);
    let wall_s = wall.elapsed().as_secs_f64();
    Ok(PhaseResult {
        ops: r.ops,
        wall_s,
        modeled_s: t.modeled_now().map(|b| b.saturating_sub(m0) as f64 / 1e9),
        modeled_latency: ml,
        wall_latency: wl,
    })
}

/// The run phase's state between operations: the key chooser, the records inserted so
/// far, the version the next update writes, and the counts.
struct Runner {
    workload: Workload,
    sampler: Sampler,
    rng: SmallRng,
    inserted: u64,
    version: u64,
    ops: OpCounts,
}

impl Runner {
    /// A record that exists: by the key distribution, or for workload D counted back
    /// from the newest insert.
    #[inline]
    fn existing(&mut self) -> u64 {
        if self.workload == Workload::D {
            let back = self.sampler.sample(&mut self.rng) % self.inserted;
            self.inserted - 1 - back
        } else {
            self.sampler.sample(&mut self.rng).min(self.inserted - 1)
        }
    }

    /// Run one operation against `t` and count it.
    #[inline]
    fn one<T: KvTarget + ?Sized>(&mut self, t: &mut T, op: Op) -> Result<(), KvError> {
        match op {
            Op::Read => {
                let i = self.existing();
                if t.get(&record_key(i))?.is_none() {
                    self.ops.read_misses += 1;
                }
                self.ops.reads += 1;
            }
            Op::Update => {
                let i = self.existing();
                self.version += 1;
                t.put(&record_key(i), &record_value(i, self.version))?;
                self.ops.updates += 1;
            }
            Op::Insert => {
                let i = self.inserted;
                self.inserted += 1;
                t.put(&record_key(i), &record_value(i, 0))?;
                self.ops.inserts += 1;
            }
            Op::Scan => {
                let i = self.existing();
                let len = self.rng.random_range(1..=100usize);
                t.scan(&record_key(i), len)?;
                self.ops.scans += 1;
            }
            Op::Rmw => {
                let i = self.existing();
                let k = record_key(i);
                if t.get(&k)?.is_none() {
                    self.ops.read_misses += 1;
                }
                self.version += 1;
                t.put(&k, &record_value(i, self.version))?;
                self.ops.rmws += 1;
            }
        }
        Ok(())
    }
}

fn choose(w: Workload, n: u64, rng: &mut SmallRng) -> Op {
    let p: u32 = rng.random_range(0..100);
    match w {
        Workload::ReadHeavy => {
            if n % 20 == 19 {
                Op::Update
            } else {
                Op::Read
            }
        }
        Workload::WriteHeavy => {
            if n % 20 == 19 {
                Op::Read
            } else {
                Op::Update
            }
        }
        Workload::A => {
            if p < 50 {
                Op::Read
            } else {
                Op::Update
            }
        }
        Workload::B => {
            if p < 95 {
                Op::Read
            } else {
                Op::Update
            }
        }
        Workload::C => Op::Read,
        Workload::D => {
            if p < 95 {
                Op::Read
            } else {
                Op::Insert
            }
        }
        Workload::E => {
            if p < 95 {
                Op::Scan
            } else {
                Op::Insert
            }
        }
        Workload::F => {
            if p < 50 {
                Op::Read
            } else {
                Op::Rmw
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A reference target: a `BTreeMap`.
    #[derive(Default)]
    struct Map(BTreeMap<Vec<u8>, Vec<u8>>);

    impl KvTarget for Map {
        fn label(&self) -> String {
            "map".into()
        }
        fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
            Ok(self.0.get(key).cloned())
        }
        fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvError> {
            self.0.insert(key.to_vec(), value.to_vec());
            Ok(())
        }
        fn scan(&mut self, start: &[u8], n: usize) -> Result<usize, KvError> {
            Ok(self.0.range(start.to_vec()..).take(n).count())
        }
        fn sync(&mut self) -> Result<(), KvError> {
            Ok(())
        }
    }

    fn cfg(workload: Workload, ops: u64) -> YcsbConfig {
        YcsbConfig {
            records: 1000,
            workload,
            dist: KeyDist::Zipfian(0.99),
            limit: Limit::Ops(ops),
            seed: 7,
        }
    }

    #[test]
    fn paper_mixes_interleave_19_to_1() {
        let mut m = Map::default();
        load(&mut m, 1000, &mut |_| {}).unwrap();
        let r = run(&mut m, &cfg(Workload::ReadHeavy, 2000), &mut |_| {}).unwrap();
        assert_eq!(
            (r.ops.reads, r.ops.updates, r.ops.read_misses),
            (1900, 100, 0)
        );
        let r = run(&mut m, &cfg(Workload::WriteHeavy, 2000), &mut |_| {}).unwrap();
        assert_eq!((r.ops.reads, r.ops.updates), (100, 1900));
        assert_eq!(m.0.len(), 1000);
    }

    #[test]
    fn standard_workloads_have_their_mixes() {
        for w in Workload::ALL {
            let mut m = Map::default();
            load(&mut m, 1000, &mut |_| {}).unwrap();
            let r = run(&mut m, &cfg(w, 4000), &mut |_| {}).unwrap();
            assert_eq!(r.ops.total(), 4000, "{w:?}");
            assert_eq!(r.ops.read_misses, 0, "{w:?}");
            let share = |x: u64| x as f64 / 4000.0;
            match w {
                Workload::A => assert!((share(r.ops.updates) - 0.5).abs() < 0.05),
                Workload::C => assert_eq!(r.ops.reads, 4000),
                Workload::D => {
                    assert!((share(r.ops.inserts) - 0.05).abs() < 0.02);
                    assert_eq!(m.0.len() as u64, 1000 + r.ops.inserts);
                }
                Workload::E => assert!((share(r.ops.scans) - 0.95).abs() < 0.02),
                Workload::F => assert!((share(r.ops.rmws) - 0.5).abs() < 0.05),
                _ => {}
            }
        }
    }

    #[test]
    fn zipfian_is_skewed_and_uniform_is_not() {
        let count_top = |dist: KeyDist| {
            let mut rng = SmallRng::seed_from_u64(1);
            let d = match dist {
                KeyDist::Zipfian(theta) => Dist::Zipf { theta },
                KeyDist::Uniform => Dist::Uniform,
            };
            let s = d.sampler(10_000);
            let mut hits = vec![0u32; 10_000];
            for _ in 0..100_000 {
                hits[s.sample(&mut rng) as usize] += 1;
            }
            hits.sort_unstable_by(|a, b| b.cmp(a));
            hits[..100].iter().sum::<u32>()
        };
        assert!(count_top(KeyDist::Zipfian(0.99)) > 30_000);
        assert!(count_top(KeyDist::Uniform) < 3_000);
    }

    #[test]
    fn names_parse_back_and_bad_names_are_errors() {
        for w in Workload::ALL {
            assert_eq!(w.name().parse::<Workload>().unwrap(), w);
        }
        assert!("g".parse::<Workload>().is_err());
        assert_eq!("uniform".parse::<KeyDist>().unwrap(), KeyDist::Uniform);
        assert_eq!(
            "zipf:0.5".parse::<KeyDist>().unwrap(),
            KeyDist::Zipfian(0.5)
        );
        assert!("zipf:-1".parse::<KeyDist>().is_err());
    }
}
