//! The FD+tree (§2) with the FD+XM and FD+DS schemes (§3), FD+FC (§4) and crash safety.
//!
//! This module holds the tree's state (geometry, L0, the levels, the shared state of an
//! FD+FC merge, counters) and its public API; each concern has its own module:
//! `lookup` (descent with fractional cascading, range scans, the wavefront choice),
//! `modify` (L0 updates, the redo log, merge triggers), `merge` (both merge pipelines,
//! reclamation, the manifest switch), `writer` (the level writer), `invariants` ((I1)–(I5))
//! and `open` (create, open, crash recovery). See the crate documentation for the
//! choices made where the paper is silent.

mod invariants;
mod lookup;
mod merge;
mod modify;
mod open;
mod writer;

use writer::LevelWriter;

use crate::cache::{Allocator, Cache};
use crate::format::{
    Block, Entry, Kind, LOG_RECORD_BYTES, LevelMeta, LogRecord, Manifest, entries_per_block,
};
use crate::sync::{Arc, AtomicU64, Condvar, JoinHandle, Mutex, Ordering, RwLock, backoff, lock};
use crate::{FdConfig, FdError, Invariant, Scheme};
use csd_host::{CommandIssuer, DeviceHandle, SharedDevice};
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

/// Most levels a manifest can describe.
const MAX_LEVELS: usize = 64;

/// Most blocks a merge reads ahead per level, and writes per command.
const READ_AHEAD: u64 = 32;
const WRITE_BATCH: usize = 32;

/// Sizes derived from the configuration and the device.
#[derive(Debug, Clone)]
struct Geo {
    lba_size: u64,
    lbas_per_block: u64,
    block_bytes: usize,
    /// Entries per block.
    epb: usize,
    /// L0 capacity in entries.
    c0: u64,
    /// L0 capacity in blocks (the unit of level classes).
    l0_blocks: u64,
    k: u64,
    /// Most fences kept in L0.
    max_top_fences: usize,
    manifest_lbas: u64,
    log_lbas: u64,
    /// Log records per LBA.
    rpl: u64,
    start_lba: u64,
    region_lbas: u64,
    log_lba: u64,
    tree_lba: u64,
    tree_blocks: u64,
}

impl Geo {
    fn new(dev: &SharedDevice, cfg: &FdConfig) -> Result<Geo, FdError> {
        let id = dev.identify();
        let lba_size = id.lba_size as u64;
        let bad = |s: String| Err(FdError::Config(s));
        let epb = Self::check_shape(cfg, lba_size)?;
        let k = cfg.size_ratio as u64;
        let c0 = (cfg.l0_bytes / 16) as u64;
        let l0_blocks = (cfg.l0_bytes / cfg.block_bytes) as u64;
        let max_top_fences = (c0 / 8) as usize;
        if l0_blocks * k > max_top_fences as u64 {
            return bad(format!(
                "size_ratio {k} x L0 blocks {l0_blocks} exceeds the fences L0 can hold ({max_top_fences}); lower size_ratio or raise l0_bytes relative to block_bytes"
            ));
        }
        if cfg.cache_bytes < 4 * cfg.block_bytes {
            return bad(format!("cache_bytes {} is below 4 blocks", cfg.cache_bytes));
        }
        let (rpl, log_lbas) = Self::log_size(cfg, lba_size, c0)?;
        let manifest_bytes = Manifest::encoded_len(MAX_LEVELS, max_top_fences) as u64;
        let manifest_lbas = manifest_bytes.div_ceil(lba_size);
        let lbas_per_block = cfg.block_bytes as u64 / lba_size;
        let min_tree_blocks = 16 * l0_blocks.max(1);
        let need = 2 * manifest_lbas + log_lbas + min_tree_blocks * lbas_per_block;
        let have = Self::region(cfg, id.lbas, need)?;
        let log_lba = cfg.start_lba + 2 * manifest_lbas;
        let tree_lba = log_lba + log_lbas;
        let tree_blocks = (cfg.start_lba + have - tree_lba) / lbas_per_block;
        Ok(Geo {
            lba_size,
            lbas_per_block,
            block_bytes: cfg.block_bytes,
            epb,
            c0,
            l0_blocks: l0_blocks.max(1),
            k,
            max_top_fences,
            manifest_lbas,
            log_lbas,
            rpl,
            start_lba: cfg.start_lba,
            region_lbas: have,
            log_lba,
            tree_lba,
            tree_blocks,
        })
    }

    /// The block size against the LBA size, the merge trigger, L0 and the size ratio;
    /// the entries per block.
    fn check_shape(cfg: &FdConfig, lba_size: u64) -> Result<usize, FdError> {
        let bad = |s: String| Err(FdError::Config(s));
        if lba_size == 0 {
            return bad("device reports an LBA size of 0".into());
        }
        if cfg.block_bytes == 0 || !(cfg.block_bytes as u64).is_multiple_of(lba_size) {
            return bad(format!(
                "block_bytes {} must be a positive multiple of the device LBA size {lba_size}",
                cfg.block_bytes
            ));
        }
        if cfg.block_bytes > 64 * 1024 * 17 {
            return bad(format!(
                "block_bytes {} too large (entry count is 16-bit)",
                cfg.block_bytes
            ));
        }
        let epb = entries_per_block(cfg.block_bytes);
        if epb < 8 {
            return bad(format!(
                "block_bytes {} holds fewer than 8 entries",
                cfg.block_bytes
            ));
        }
        if !(0.5..=1.0).contains(&cfg.merge_at) {
            return bad(format!(
                "merge_at {} is outside 0.5..=1 (the fraction of L0 at which a merge starts)",
                cfg.merge_at
            ));
        }
        if cfg.l0_bytes < cfg.block_bytes {
            return bad(format!(
                "l0_bytes {} is smaller than one block ({} bytes); L0 must hold at least a block of entries",
                cfg.l0_bytes, cfg.block_bytes
            ));
        }
        let k = cfg.size_ratio as u64;
        if k < 2 || k as usize >= epb - 4 {
            return bad(format!(
                "size_ratio {k} must be at least 2 and below the entries per block minus 4 ({})",
                epb - 4
            ));
        }
        Ok(epb)
    }

    /// Log records per LBA and the log's LBAs; the log must hold two generations of L0
    /// (DS) plus slack.
    fn log_size(cfg: &FdConfig, lba_size: u64, c0: u64) -> Result<(u64, u64), FdError> {
        let rpl = lba_size / LOG_RECORD_BYTES as u64;
        let log_lbas = cfg.log_bytes as u64 / lba_size;
        let need_records = 4 * c0 + 2 * rpl;
        if rpl == 0 || log_lbas * rpl < need_records {
            return Err(FdError::Config(format!(
                "log_bytes {} holds {} records; at least {} are needed (4 x the L0 entries); raise log_bytes",
                cfg.log_bytes,
                log_lbas * rpl,
                need_records
            )));
        }
        Ok((rpl, log_lbas))
    }

    /// The LBAs of the tree's region (the configured count, or the rest of the device),
    /// at least `need` and within the device's `device_lbas`.
    fn region(cfg: &FdConfig, device_lbas: u64, need: u64) -> Result<u64, FdError> {
        let have = match cfg.lba_count {
            Some(n) => n,
            None => device_lbas.saturating_sub(cfg.start_lba),
        };
        if cfg
            .start_lba
            .checked_add(have)
            .is_none_or(|end| end > device_lbas)
        {
            return Err(FdError::Config(format!(
                "LBA range {}+{have} is beyond the device's {} LBAs",
                cfg.start_lba, device_lbas
            )));
        }
        if have < need {
            return Err(FdError::DeviceTooSmall {
                need_lbas: need,
                have_lbas: have,
            });
        }
        Ok(have)
    }

    /// Maximum blocks of level class `i` (I3).
    fn cap(&self, i: u32) -> u64 {
        let mut c = self.l0_blocks;
        for _ in 0..i {
            c = c.saturating_mul(self.k);
        }
        c
    }

    /// Smallest class >= 1 that holds `blocks`.
    fn class_for(&self, blocks: u64) -> u32 {
        let mut i = 1;
        while self.cap(i) < blocks {
            i += 1;
        }
        i
    }
}

/// The L0 entries of one key: an optional delete entry followed by an optional insert.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Slot {
    del: bool,
    ins: Option<u64>,
}

impl Slot {
    fn is_empty(&self) -> bool {
        !self.del && self.ins.is_none()
    }
    /// The slot of a single L0 that replaces `self` (older) followed by `newer` whose
    /// entries were computed with `self` counted as part of the levels below.
    fn compose(self, newer: Slot) -> Slot {
        if newer.del {
            if self.ins.is_some() {
                Slot {
                    del: self.del,
                    ins: newer.ins,
                }
            } else {
                Slot {
                    del: true,
                    ins: newer.ins,
                }
            }
        } else if newer.ins.is_some() {
            Slot {
                del: self.del,
                ins: newer.ins,
            }
        } else {
            self
        }
    }
}

/// The in-memory top level's data entries.
#[derive(Debug, Clone, Default)]
struct L0 {
    map: BTreeMap<u64, Slot>,
    ins: u64,
    del: u64,
}

impl L0 {
    fn entries(&self) -> u64 {
        self.ins + self.del
    }
    /// Drop the entries with keys `<= key` (FD+FC m-delete).
    fn remove_upto(&mut self, key: u64) {
        let rest = match key.checked_add(1) {
            Some(k) => self.map.split_off(&k),
            None => BTreeMap::new(),
        };
        for s in self.map.values() {
            self.ins -= u64::from(s.ins.is_some());
            self.del -= u64::from(s.del);
        }
        self.map = rest;
    }
    fn set(&mut self, key: u64, slot: Slot) {
        if let Some(old) = self.map.get(&key) {
            self.ins -= u64::from(old.ins.is_some());
            self.del -= u64::from(old.del);
        }
        if slot.is_empty() {
            self.map.remove(&key);
        } else {
            self.ins += u64::from(slot.ins.is_some());
            self.del += u64::from(slot.del);
            self.map.insert(key, slot);
        }
    }
}

/// The levels below L0 and the fences into the first of them (which live in L0).
#[derive(Debug, Clone, Default)]
struct Levels {
    top_fences: Vec<(u64, u64)>,
    levels: Vec<LevelMeta>,
}

impl Levels {
    fn inserts(&self) -> u64 {
        self.levels.iter().map(|l| l.inserts).sum()
    }
    fn deletes(&self) -> u64 {
        self.levels.iter().map(|l| l.deletes).sum()
    }
}

/// What a level says about a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    Found(u64),
    Deleted,
    Absent,
}

/// What a reader holds while it searches below L0.
enum Snap {
    /// No FD+FC merge: the level set (kept alive by the reference; under FD+FC also
    /// a ticket, since a merge that starts meanwhile reclaims blocks of this set).
    Plain(Arc<Levels>, Option<u64>),
    /// During an FD+FC merge: the merge's shared state, the wavefront seen, and the
    /// reader's ticket (blocks reclaimed after it was issued stay readable).
    Fc {
        fc: Arc<FcShared>,
        wave: Option<u64>,
        heads: Vec<u64>,
        ticket: u64,
    },
}

/// The state of an FD+FC merge that readers share.
struct FcShared {
    /// The level set at the start of the merge (old upper levels `[0, t)` and the
    /// levels below the merge `[t..]`).
    old: Arc<Levels>,
    /// Old upper levels merged.
    t: usize,
    /// The new last level as written so far.
    new: RwLock<NewLevel>,
}

/// The new last level of an FD+FC merge: fences to its completed blocks (on the
/// device) and the block m-insert is filling (in memory).
#[derive(Default)]
struct NewLevel {
    done: Vec<(u64, u64)>,
    /// Completed blocks not yet on the device (batched writes).
    mem: std::collections::HashMap<u64, Arc<Block>>,
    tail: Vec<Entry>,
    tail_first: u64,
}

struct Top {
    /// FD+FC merge in progress.
    fc: Option<Arc<FcShared>>,
    /// FD+FC wavefront key (`None`: nothing processed yet).
    wave: Option<u64>,
    /// FD+FC: the current head (first unreclaimed block) of every level of the merge's
    /// level set; the first is the wavefront fence's block.
    wave_heads: Vec<u64>,
    /// Tickets of FD+FC readers in flight.
    tickets: std::collections::BTreeSet<u64>,
    next_ticket: u64,
    l0: L0,
    /// FD+DS: L0 being merged (immutable).
    l0_old: Option<Arc<L0>>,
    levels: Arc<Levels>,
    /// Generation of `l0`.
    generation: u64,
    merging: bool,
    failed: Option<String>,
    closed: bool,
}

struct LogState {
    next_lsn: u64,
    /// Contents of the LBA that holds `next_lsn`.
    tail: Vec<u8>,
}

#[derive(Default)]
struct Counters {
    merges: AtomicU64,
    merge_wall_ns: AtomicU64,
    max_merge_wall_ns: AtomicU64,
    merge_modeled_ns: AtomicU64,
    blocks_reclaimed: AtomicU64,
    log_records: AtomicU64,
    underflow_merges: AtomicU64,
    reads_during_merge: AtomicU64,
    early_reclaimed: AtomicU64,
    /// Modifications waiting for room in L0 now.
    waiting: AtomicU64,
    /// Modifications that waited for room in L0, and the longest such wait (ns).
    room_waits: AtomicU64,
    max_room_wait_ns: AtomicU64,
    /// Latest simulated instant a tree command completed at (ns).
    clock: AtomicU64,
}

struct Inner {
    cfg: FdConfig,
    geo: Geo,
    cache: Cache,
    alloc: Mutex<Allocator>,
    top: Mutex<Top>,
    cv: Condvar,
    xm: RwLock<()>,
    log: Mutex<LogState>,
    log_start: AtomicU64,
    manifest_seq: Mutex<(u64, u64)>,
    merge_thread: Mutex<Option<JoinHandle<()>>>,
    counters: Counters,
    /// Gate that merges pass before each output block ([`FdTree::set_merge_gate`]).
    gate: Mutex<Option<std::sync::Arc<crate::MergeGate>>>,
}

/// Counters of a tree.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FdStats {
    /// Merges completed (since create/open).
    pub merges: u64,
    /// A merge is running now.
    pub merging: bool,
    /// Of which underflow-triggered.
    pub underflow_merges: u64,
    /// Wall-clock time spent in merges.
    pub merge_wall: Duration,
    /// Longest merge, wall clock.
    pub max_merge_wall: Duration,
    /// Modeled device time of merges (sum over merges of the merge handle's clock advance).
    pub merge_modeled_ns: u64,
    /// Tree blocks read from the device.
    pub blocks_read: u64,
    /// Tree blocks written.
    pub blocks_written: u64,
    /// Tree blocks freed (and trimmed).
    pub blocks_reclaimed: u64,
    /// Tree blocks in use now.
    pub blocks_in_use: u64,
    /// Materialized levels below L0.
    pub levels: usize,
    /// Blocks per level, top-down.
    pub level_blocks: Vec<u64>,
    /// Data entries in L0 (and L0 old during a DS merge).
    pub l0_entries: u64,
    /// Insert entries in the tree (N+).
    pub n_plus: u64,
    /// Delete entries in the tree (N-).
    pub n_minus: u64,
    /// Keys indexed (N+ - N-).
    pub entries: u64,
    /// Buffer cache hits.
    pub cache_hits: u64,
    /// Buffer cache misses.
    pub cache_misses: u64,
    /// Redo-log records written.
    pub log_records: u64,
    /// Lookups, range scans and existence checks that ran while a merge was in
    /// progress (FD+DS, FD+FC).
    pub reads_during_merge: u64,
    /// FD+FC: old blocks reclaimed *and reused* during their merge (only without
    /// crash safety; with it, reuse waits for the manifest switch).
    pub early_reclaimed: u64,
    /// Modifications waiting now for a merge to make room in L0 (FD+DS, FD+FC; an
    /// FD+XM modification waits for the tree's x-lock instead).
    pub waiting_modifications: u64,
    /// Modifications that had to wait for a merge to make room in L0 (FD+DS, FD+FC).
    pub room_waits: u64,
    /// The longest such wait, wall clock: how long a merge held a modification up for
    /// lack of room in L0 (FD+DS: until the merge ends; FD+FC: until the wavefront
    /// passes enough entries of L0 old).
    pub max_room_wait: Duration,
    /// Entries charged to the L0 budget now: L0, L0 old during a merge, the fences kept
    /// in L0 and two reserved slots. A modification waits while it exceeds
    /// [`FdStats::l0_capacity`].
    pub l0_charge: u64,
    /// The L0 budget in entries (`l0_bytes / 16`).
    pub l0_capacity: u64,
}

impl FdStats {
    /// The figures a benchmark report adds per run (name, value): merges, the longest
    /// merge, blocks read and written, and waits for room in L0.
    pub fn bench_figures(&self) -> Vec<(String, f64)> {
        vec![
            ("merges".into(), self.merges as f64),
            (
                "max_merge_ms".into(),
                self.max_merge_wall.as_secs_f64() * 1e3,
            ),
            ("blocks_read".into(), self.blocks_read as f64),
            ("blocks_written".into(), self.blocks_written as f64),
            ("room_waits".into(), self.room_waits as f64),
            (
                "max_room_wait_ms".into(),
                self.max_room_wait.as_secs_f64() * 1e3,
            ),
        ]
    }
}

/// An FD+tree on a shared device. `Send + Sync`: share it with `Arc`.
pub struct FdTree {
    inner: Arc<Inner>,
}

/// Output of merge-execute and merge-finalize.
struct MergeOut {
    levels: Levels,
    /// Blocks of the old levels that the merge consumed.
    consumed: Vec<u64>,
}

impl Inner {
    fn check_usable(top: &Top) -> Result<(), FdError> {
        if top.closed {
            return Err(FdError::Closed);
        }
        if let Some(e) = &top.failed {
            return Err(FdError::Failed(e.clone()));
        }
        Ok(())
    }

    /// Pass the merge gate, if one is installed.
    fn pass_gate(&self) {
        let g = lock(&self.gate).clone();
        if let Some(g) = g {
            g.pass();
        }
    }

    fn wait_merge(&self) {
        let mut top = lock(&self.top);
        while top.merging {
            top = self.cv.wait(top).unwrap_or_else(|p| p.into_inner());
        }
        drop(top);
        if let Some(t) = lock(&self.merge_thread).take() {
            let _ = t.join();
        }
    }

    fn stats(&self) -> FdStats {
        let top = lock(&self.top);
        let c = &self.counters;
        let old_i = top.l0_old.as_ref().map_or(0, |o| o.ins);
        let old_d = top.l0_old.as_ref().map_or(0, |o| o.del);
        let np = top.l0.ins + old_i + top.levels.inserts();
        let nm = top.l0.del + old_d + top.levels.deletes();
        FdStats {
            merges: c.merges.load(Ordering::Relaxed),
            merging: top.merging,
            underflow_merges: c.underflow_merges.load(Ordering::Relaxed),
            merge_wall: Duration::from_nanos(c.merge_wall_ns.load(Ordering::Relaxed)),
            max_merge_wall: Duration::from_nanos(c.max_merge_wall_ns.load(Ordering::Relaxed)),
            merge_modeled_ns: c.merge_modeled_ns.load(Ordering::Relaxed),
            blocks_read: self.cache.counters.reads.load(Ordering::Relaxed),
            blocks_written: self.cache.counters.writes.load(Ordering::Relaxed),
            blocks_reclaimed: c.blocks_reclaimed.load(Ordering::Relaxed),
            blocks_in_use: lock(&self.alloc).used(),
            levels: top.levels.levels.len(),
            level_blocks: top.levels.levels.iter().map(|l| l.blocks).collect(),
            l0_entries: top.l0.entries() + old_i + old_d,
            n_plus: np,
            n_minus: nm,
            entries: np.saturating_sub(nm),
            cache_hits: self.cache.counters.hits.load(Ordering::Relaxed),
            cache_misses: self.cache.counters.misses.load(Ordering::Relaxed),
            log_records: c.log_records.load(Ordering::Relaxed),
            reads_during_merge: c.reads_during_merge.load(Ordering::Relaxed),
            early_reclaimed: c.early_reclaimed.load(Ordering::Relaxed),
            waiting_modifications: c.waiting.load(Ordering::Relaxed),
            room_waits: c.room_waits.load(Ordering::Relaxed),
            max_room_wait: Duration::from_nanos(c.max_room_wait_ns.load(Ordering::Relaxed)),
            l0_charge: self.l0_charge(&top),
            l0_capacity: self.geo.c0,
        }
    }
}

impl FdTree {
    /// Insert `key` with `val`; an existing key is updated. Acknowledged durable.
    pub fn insert(&self, key: u64, val: u64) -> Result<(), FdError> {
        self.inner.modify(key, Some(val)).map(|_| ())
    }

    /// Delete `key`; returns whether it was present.
    pub fn delete(&self, key: u64) -> Result<bool, FdError> {
        self.inner.modify(key, None)
    }

    /// The value of `key`.
    pub fn lookup(&self, key: u64) -> Result<Option<u64>, FdError> {
        self.inner.lookup(key)
    }

    /// All `(key, value)` with `lo <= key <= hi`, in key order.
    pub fn range(&self, lo: u64, hi: u64) -> Result<Vec<(u64, u64)>, FdError> {
        self.inner.range(lo, hi)
    }

    /// Check invariants I1–I5 and the counters over the whole tree (reads every
    /// block). Brings the tree to rest first ([`FdTree::wait_for_merges`]): during an
    /// FD+DS merge, I3 for L0 and I5 may be broken until the next merge.
    pub fn check_invariants(&self) -> Result<(), FdError> {
        self.inner.check_invariants()
    }

    /// Wait until no merge is running and none is due (FD+DS starts a merge that a
    /// modification triggered during the previous one only at the next modification;
    /// this runs it now).
    pub fn wait_for_merges(&self) -> Result<(), FdError> {
        self.inner.settle()
    }

    /// Install (or with `None` remove) a gate that every later merge passes before each
    /// block of its output data level: a caller can hold a merge at a block boundary and
    /// observe what the scheme lets through meanwhile (see [`crate::gate`]).
    pub fn set_merge_gate(&self, gate: Option<std::sync::Arc<crate::MergeGate>>) {
        *lock(&self.inner.gate) = gate;
    }

    /// Reset the peak counters ([`FdStats::max_merge_wall`], [`FdStats::max_room_wait`])
    /// so that they cover what follows, e.g. a benchmark's timed run after its preload.
    pub fn reset_peaks(&self) {
        let c = &self.inner.counters;
        c.max_merge_wall_ns.store(0, Ordering::Relaxed);
        c.max_room_wait_ns.store(0, Ordering::Relaxed);
    }

    /// Counters.
    pub fn stats(&self) -> FdStats {
        self.inner.stats()
    }

    /// The configuration.
    pub fn config(&self) -> &FdConfig {
        &self.inner.cfg
    }

    /// Clean shutdown: finish merges, flush the device, refuse work afterwards. Every
    /// acknowledged modification is already durable when `durable`; without the log,
    /// L0 is merged into the levels first so that a clean close loses nothing.
    pub fn close(&self) -> Result<(), FdError> {
        let settled = self.inner.settle();
        let _x = (self.inner.cfg.scheme == Scheme::Xm)
            .then(|| self.inner.xm.write().unwrap_or_else(|p| p.into_inner()));
        let log = lock(&self.inner.log);
        if settled.is_ok() && !self.inner.cfg.durable && !lock(&self.inner.top).l0.map.is_empty() {
            self.inner.start_merge(&log)?;
            self.inner.wait_merge();
        }
        let failed = {
            let mut top = lock(&self.inner.top);
            top.closed = true;
            top.failed.clone()
        };
        let mut ph = self.inner.cache.handle()?;
        ph.get().flush()?;
        match failed {
            Some(e) => Err(FdError::Failed(e)),
            None => settled,
        }
    }
}

impl Drop for FdTree {
    fn drop(&mut self) {
        self.inner.wait_merge();
    }
}

#[cfg(test)]
mod tests;
