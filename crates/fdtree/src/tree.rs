//! The FD+tree (§2) with the FD+XM and FD+DS schemes (§3) and crash safety.
//!
//! See the crate documentation for the choices made where the paper is silent.

use crate::cache::{Allocator, Cache};
use crate::format::{
    Block, Entry, Kind, LOG_RECORD_BYTES, LevelMeta, LogRecord, Manifest, entries_per_block,
};
use crate::sync::{Arc, AtomicU64, Condvar, Mutex, Ordering, RwLock, backoff, lock, thread};
use crate::{FdConfig, FdError, Invariant, Scheme};
use csd_host::{CommandIssuer, DeviceHandle, SharedDevice};
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};
use thread::JoinHandle;

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
        let rpl = lba_size / LOG_RECORD_BYTES as u64;
        let log_lbas = cfg.log_bytes as u64 / lba_size;
        // The log must hold two generations of L0 (DS) plus slack.
        let need_records = 4 * c0 + 2 * rpl;
        if rpl == 0 || log_lbas * rpl < need_records {
            return bad(format!(
                "log_bytes {} holds {} records; at least {} are needed (4 x the L0 entries); raise log_bytes",
                cfg.log_bytes,
                log_lbas * rpl,
                need_records
            ));
        }
        let manifest_bytes = Manifest::encoded_len(MAX_LEVELS, max_top_fences) as u64;
        let manifest_lbas = manifest_bytes.div_ceil(lba_size);
        let lbas_per_block = cfg.block_bytes as u64 / lba_size;
        let min_tree_blocks = 16 * l0_blocks.max(1);
        let need = 2 * manifest_lbas + log_lbas + min_tree_blocks * lbas_per_block;
        let have = match cfg.lba_count {
            Some(n) => n,
            None => id.lbas.saturating_sub(cfg.start_lba),
        };
        if cfg
            .start_lba
            .checked_add(have)
            .is_none_or(|end| end > id.lbas)
        {
            return bad(format!(
                "LBA range {}+{have} is beyond the device's {} LBAs",
                cfg.start_lba, id.lbas
            ));
        }
        if have < need {
            return Err(FdError::DeviceTooSmall {
                need_lbas: need,
                have_lbas: have,
            });
        }
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

/// A source of entries for the merge: a sorted run (L0's entries, or an old level
/// read block by block — m-stage buffers one block per level).
struct Source {
    /// Entries buffered (from L0 or the current block).
    buf: Vec<Entry>,
    pos: usize,
    next_block: Option<u64>,
    keep_fences: bool,
    /// Blocks read and not yet reclaimed, with the first key of the block after each
    /// (known once that block is read): Remark A.1's reclamation rule.
    pending: std::collections::VecDeque<(u64, Option<u64>)>,
    /// Blocks read ahead (consecutive ids), and the read-ahead size: doubled while the
    /// level's chain runs through consecutive ids, reset when it jumps.
    ahead: std::collections::VecDeque<(u64, Block)>,
    ra: u64,
}

/// One key's coalesced output of merge-execute.
struct Group {
    key: u64,
    entries: Vec<Entry>,
    has_fence: bool,
}

/// The inputs of a merge in key order (§2.3 merge-execute).
struct MergeInput {
    sources: Vec<Source>,
    bottom: bool,
    consumed: Vec<u64>,
    /// A source read a new block since the flag was last taken.
    refilled: bool,
    /// Last fence to the level below added to the output (p_last).
    p_last: Option<u64>,
    /// Last key processed.
    last_key: Option<u64>,
}

/// L0's data entries as a sorted run (with the top fences when the merge keeps them).
fn l0_entries(old: &L0, lv: &Levels, t: usize) -> Vec<Entry> {
    let mut v: Vec<Entry> = Vec::with_capacity(old.entries() as usize);
    for (&key, s) in &old.map {
        if s.del {
            v.push(Entry {
                key,
                kind: Kind::Delete,
                val: 0,
            });
        }
        if let Some(val) = s.ins {
            v.push(Entry {
                key,
                kind: Kind::Insert,
                val,
            });
        }
    }
    if t == 0 {
        v.extend(lv.top_fences.iter().map(|&(key, b)| Entry {
            key,
            kind: Kind::Fence,
            val: b,
        }));
        v.sort_unstable();
    }
    v
}

impl MergeInput {
    /// Merge L0's entries with the first `t` levels of `lv`.
    fn new(l0: Vec<Entry>, lv: &Levels, t: usize) -> MergeInput {
        let mut sources = vec![Source {
            buf: l0,
            pos: 0,
            next_block: None,
            keep_fences: t == 0,
            pending: Default::default(),
            ahead: Default::default(),
            ra: 1,
        }];
        for i in 0..t {
            sources.push(Source {
                buf: Vec::new(),
                pos: 0,
                next_block: Some(lv.levels[i].head),
                keep_fences: i + 1 == t,
                pending: Default::default(),
                ahead: Default::default(),
                ra: 1,
            });
        }
        let bottom = t == lv.levels.len();
        MergeInput {
            sources,
            bottom,
            consumed: Vec::new(),
            refilled: false,
            p_last: (!bottom).then(|| lv.levels[t].head),
            last_key: None,
        }
    }

    fn refill(&mut self, tree: &Inner, i: usize) -> Result<(), FdError> {
        let s = &mut self.sources[i];
        while s.pos >= s.buf.len() {
            let Some(id) = s.next_block else {
                return Ok(());
            };
            // The blocks are about to be freed: read them past the cache, several
            // consecutive ones per command while the chain is consecutive.
            let b = match s.ahead.pop_front() {
                Some((aid, b)) if aid == id => b,
                _ => {
                    if !s.ahead.is_empty() {
                        s.ahead.clear();
                        s.ra = 1;
                    }
                    let n = s.ra.min(tree.geo.tree_blocks.saturating_sub(id)).max(1);
                    let mut run = tree.cache.read_run(id, n)?.into_iter();
                    let Some((_, first)) = run.next() else {
                        return Err(FdError::Corrupt(format!("tree block {id} unreadable")));
                    };
                    // Keep the blocks that continue the chain; grow the read-ahead while
                    // all of it was useful, shrink it to what was.
                    let mut expect = first.next;
                    let mut kept = 0;
                    for (rid, rb) in run {
                        if expect != Some(rid) {
                            break;
                        }
                        expect = rb.next;
                        s.ahead.push_back((rid, rb));
                        kept += 1;
                    }
                    s.ra = if kept + 1 == n && first.next == Some(id + 1) {
                        (n * 2).min(READ_AHEAD)
                    } else {
                        kept + 1
                    };
                    first
                }
            };
            self.consumed.push(id);
            self.refilled = true;
            let first = b.entries.first().map_or(u64::MAX, |e| e.key);
            if let Some(back) = s.pending.back_mut() {
                back.1 = Some(first);
            }
            s.pending.push_back((id, None));
            s.buf = b.entries;
            s.pos = 0;
            s.next_block = b.next;
        }
        Ok(())
    }

    /// The next key's coalesced entries (fence to the level below, then the net
    /// delete/insert of §2.3), skipping keys whose entries cancel out.
    fn next_group(&mut self, tree: &Inner) -> Result<Option<Group>, FdError> {
        loop {
            let mut min: Option<u64> = None;
            for i in 0..self.sources.len() {
                self.refill(tree, i)?;
                let s = &self.sources[i];
                if let Some(e) = s.buf.get(s.pos) {
                    min = Some(min.map_or(e.key, |m: u64| m.min(e.key)));
                }
            }
            let Some(key) = min else { return Ok(None) };
            let mut fence = None;
            let mut groups: Vec<(bool, Option<u64>)> = Vec::with_capacity(self.sources.len());
            for i in 0..self.sources.len() {
                let mut g = (false, None);
                loop {
                    self.refill(tree, i)?;
                    let s = &mut self.sources[i];
                    let Some(&e) = s.buf.get(s.pos) else { break };
                    if e.key != key {
                        break;
                    }
                    s.pos += 1;
                    match e.kind {
                        Kind::Fence if s.keep_fences => fence = Some(e.val),
                        Kind::Fence => {}
                        Kind::Delete => g.0 = true,
                        Kind::Insert => g.1 = Some(e.val),
                    }
                }
                groups.push(g);
            }
            self.last_key = Some(key);
            // Apply the levels' operations bottom-up: a delete cancels the insert
            // below it, or one further down (then it stays, unless this is the bottom).
            let mut pending_del = false;
            let mut ins: Option<u64> = None;
            for &(d, i) in groups.iter().rev() {
                if d {
                    if ins.is_some() {
                        ins = None;
                    } else {
                        pending_del = true;
                    }
                }
                if i.is_some() {
                    ins = i;
                }
            }
            let mut out: Vec<Entry> = Vec::with_capacity(3);
            if let Some(b) = fence {
                out.push(Entry {
                    key,
                    kind: Kind::Fence,
                    val: b,
                });
                self.p_last = Some(b);
            }
            if pending_del && !self.bottom {
                out.push(Entry {
                    key,
                    kind: Kind::Delete,
                    val: 0,
                });
            }
            if let Some(v) = ins {
                out.push(Entry {
                    key,
                    kind: Kind::Insert,
                    val: v,
                });
            }
            if !out.is_empty() {
                return Ok(Some(Group {
                    key,
                    entries: out,
                    has_fence: fence.is_some(),
                }));
            }
        }
    }
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

    // ----------------------------------------------------------------- lookup (§2.2)

    /// Descend `levels` top-down for `key` with fractional cascading, entering the
    /// first level at block `first` (its head when `None`).
    fn descend(
        &self,
        levels: &[LevelMeta],
        heads: Option<&[u64]>,
        first: Option<u64>,
        key: u64,
    ) -> Result<Probe, FdError> {
        if levels.is_empty() {
            return Ok(Probe::Absent);
        }
        let head = |i: usize| {
            heads
                .and_then(|h| h.get(i).copied())
                .unwrap_or(levels[i].head)
        };
        let mut target = first.unwrap_or(head(0));
        for i in 0..levels.len() {
            let b = self.cache.get(target)?;
            let (p, f) = scan_entries(&b.entries, key);
            if let Some(p) = p {
                return Ok(p);
            }
            if i + 1 < levels.len() {
                target = f.unwrap_or(head(i + 1));
            }
        }
        Ok(Probe::Absent)
    }

    /// Search the levels below L0.
    fn probe_levels(&self, lv: &Levels, key: u64) -> Result<Probe, FdError> {
        self.descend(
            &lv.levels,
            None,
            fence_le(lv.top_fences.iter().copied(), key),
            key,
        )
    }

    /// Where a lookup for `key > wave` enters the old levels of an FD+FC merge: the
    /// largest old top fence above the wavefront and not above `key`, else the
    /// wavefront fence (the current head of the first old level).
    fn fc_old_entry(fc: &FcShared, wave: Option<u64>, heads: &[u64], key: u64) -> Option<u64> {
        let lv = &fc.old;
        if fc.t == 0 {
            return fence_le(lv.top_fences.iter().copied(), key);
        }
        fence_le(
            lv.top_fences
                .iter()
                .copied()
                .filter(|(k, _)| wave.is_none_or(|w| *k > w)),
            key,
        )
        .or(heads.first().copied())
    }

    /// Search below L0 new during an FD+FC merge (§4.3): keys at or below the
    /// wavefront through the new level, others through the old levels.
    fn probe_fc(
        &self,
        fc: &FcShared,
        wave: Option<u64>,
        heads: &[u64],
        key: u64,
    ) -> Result<Probe, FdError> {
        let below = &fc.old.levels[fc.t..];
        if wave.is_some_and(|w| key <= w) {
            let (p, f, blk) = {
                let n = fc.new.read().unwrap_or_else(|e| e.into_inner());
                if !n.tail.is_empty() && n.tail_first <= key {
                    let (p, f) = scan_entries(&n.tail, key);
                    (p, f, None)
                } else {
                    let b = fence_le(n.done.iter().copied(), key);
                    (None, None, b.map(|b| (b, n.mem.get(&b).cloned())))
                }
            };
            let (p, f) = match blk {
                Some((_, Some(mem))) => scan_entries(&mem.entries, key),
                Some((b, None)) => scan_entries(&self.cache.get(b)?.entries, key),
                None => (p, f),
            };
            if let Some(p) = p {
                return Ok(p);
            }
            return self.descend(below, None, f, key);
        }
        self.descend(
            &fc.old.levels,
            Some(heads),
            Self::fc_old_entry(fc, wave, heads, key),
            key,
        )
    }

    /// Take a snapshot of what lies below L0 (or below L0 and L0 old), answering from
    /// L0 (unless `skip_l0`) and L0 old directly.
    fn snapshot(
        &self,
        key: Option<u64>,
        skip_l0: bool,
    ) -> Result<Result<Snap, Option<u64>>, FdError> {
        let mut top = lock(&self.top);
        Self::check_usable(&top)?;
        if top.merging {
            self.counters
                .reads_during_merge
                .fetch_add(1, Ordering::Relaxed);
        }
        if let Some(key) = key {
            if !skip_l0 && let Some(s) = top.l0.map.get(&key) {
                return Ok(Err(s.ins));
            }
            let past_wave = top.wave.is_none_or(|w| key > w);
            if (top.fc.is_none() || past_wave)
                && let Some(old) = &top.l0_old
                && let Some(s) = old.map.get(&key)
            {
                return Ok(Err(s.ins));
            }
        }
        Ok(Ok(match top.fc.clone() {
            None => {
                let ticket = (self.cfg.scheme == Scheme::Fc).then(|| {
                    let t = top.next_ticket;
                    top.next_ticket += 1;
                    top.tickets.insert(t);
                    t
                });
                Snap::Plain(top.levels.clone(), ticket)
            }
            Some(fc) => {
                let ticket = top.next_ticket;
                top.next_ticket += 1;
                top.tickets.insert(ticket);
                Snap::Fc {
                    fc,
                    wave: top.wave,
                    heads: top.wave_heads.clone(),
                    ticket,
                }
            }
        }))
    }

    fn release(&self, snap: Snap) {
        match snap {
            Snap::Fc { ticket, .. } | Snap::Plain(_, Some(ticket)) => {
                lock(&self.top).tickets.remove(&ticket);
            }
            Snap::Plain(_, None) => {}
        }
    }

    /// Lookup without the XM lock; with `skip_l0`, what lies below L0 (new).
    fn lookup_inner(&self, key: u64, skip_l0: bool) -> Result<Option<u64>, FdError> {
        let snap = match self.snapshot(Some(key), skip_l0)? {
            Ok(s) => s,
            Err(v) => return Ok(v),
        };
        let p = match &snap {
            Snap::Plain(lv, _) => self.probe_levels(lv, key),
            Snap::Fc {
                fc, wave, heads, ..
            } => self.probe_fc(fc, *wave, heads, key),
        };
        self.release(snap);
        Ok(match p? {
            Probe::Found(v) => Some(v),
            _ => None,
        })
    }

    fn lookup(&self, key: u64) -> Result<Option<u64>, FdError> {
        let _g = (self.cfg.scheme == Scheme::Xm)
            .then(|| self.xm.read().unwrap_or_else(|p| p.into_inner()));
        self.lookup_inner(key, false)
    }

    /// Scan `levels` for keys in `[lo, hi]`, entering the first level at `first`;
    /// the first level holding data entries for a key decides it (`seen` keeps the
    /// decisions of levels above).
    fn scan_levels(
        &self,
        levels: &[LevelMeta],
        heads: Option<&[u64]>,
        first: Option<u64>,
        lo: u64,
        hi: u64,
        seen: &mut BTreeMap<u64, Option<u64>>,
    ) -> Result<(), FdError> {
        if levels.is_empty() {
            return Ok(());
        }
        let head = |i: usize| {
            heads
                .and_then(|h| h.get(i).copied())
                .unwrap_or(levels[i].head)
        };
        let mut target = first.unwrap_or(head(0));
        for i in 0..levels.len() {
            let mut found = BTreeMap::new();
            let mut blk = Some(target);
            let mut first = true;
            while let Some(id) = blk {
                let b = self.cache.get(id)?;
                if first {
                    first = false;
                    if i + 1 < levels.len() {
                        target = scan_entries(&b.entries, lo).1.unwrap_or(head(i + 1));
                    }
                }
                if collect(&b.entries, lo, hi, &mut found) {
                    break;
                }
                blk = b.next;
            }
            for (k, v) in found {
                seen.entry(k).or_insert(v);
            }
        }
        Ok(())
    }

    fn range(&self, lo: u64, hi: u64) -> Result<Vec<(u64, u64)>, FdError> {
        if lo > hi {
            return Ok(Vec::new());
        }
        let _g = (self.cfg.scheme == Scheme::Xm)
            .then(|| self.xm.read().unwrap_or_else(|p| p.into_inner()));
        // Newest first: the first level that has data entries for a key decides.
        let mut seen: BTreeMap<u64, Option<u64>> = BTreeMap::new();
        {
            let top = lock(&self.top);
            Self::check_usable(&top)?;
            for (&k, s) in top.l0.map.range(lo..=hi) {
                seen.insert(k, s.ins);
            }
            if let Some(old) = &top.l0_old {
                for (&k, s) in old.map.range(lo..=hi) {
                    if top.fc.is_none() || top.wave.is_none_or(|w| k > w) {
                        seen.entry(k).or_insert(s.ins);
                    }
                }
            }
        }
        // (A modification between the two critical sections is linearized after the
        // scan of L0 and may be missed below L0 only if it is in L0 — never lost.)
        let snap = self
            .snapshot(None, true)?
            .unwrap_or_else(|_| unreachable!("no key given"));
        let r = self.range_below(&snap, lo, hi, &mut seen);
        self.release(snap);
        r?;
        Ok(seen
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect())
    }

    fn range_below(
        &self,
        snap: &Snap,
        lo: u64,
        hi: u64,
        seen: &mut BTreeMap<u64, Option<u64>>,
    ) -> Result<(), FdError> {
        let (fc, wave, heads) = match snap {
            Snap::Plain(lv, _) => {
                return self.scan_levels(
                    &lv.levels,
                    None,
                    fence_le(lv.top_fences.iter().copied(), lo),
                    lo,
                    hi,
                    seen,
                );
            }
            Snap::Fc {
                fc, wave, heads, ..
            } => (fc, *wave, heads.as_slice()),
        };
        // Keys at or below the wavefront: the new level, then the levels below the merge.
        if let Some(w) = wave
            && lo <= w
        {
            let hi_a = hi.min(w);
            let (blocks, tail, tail_first) = {
                let n = fc.new.read().unwrap_or_else(|e| e.into_inner());
                let start = n.done.partition_point(|d| d.0 <= lo).saturating_sub(1);
                let end = n.done.partition_point(|d| d.0 <= hi_a);
                let blocks: Vec<(u64, Option<Arc<Block>>)> = n.done[start..end.max(start)]
                    .iter()
                    .map(|d| (d.1, n.mem.get(&d.1).cloned()))
                    .collect();
                let tail = if !n.tail.is_empty() && n.tail_first <= hi_a {
                    n.tail.clone()
                } else {
                    Vec::new()
                };
                (blocks, tail, n.tail_first)
            };
            let mut found = BTreeMap::new();
            let mut below_start = None;
            let mut first = true;
            for (id, mem) in blocks {
                let b = match mem {
                    Some(b) => b,
                    None => self.cache.get(id)?,
                };
                if first {
                    first = false;
                    below_start = scan_entries(&b.entries, lo).1;
                }
                collect(&b.entries, lo, hi_a, &mut found);
            }
            if !tail.is_empty() {
                if first || tail_first <= lo {
                    below_start = scan_entries(&tail, lo).1.or(below_start);
                }
                collect(&tail, lo, hi_a, &mut found);
            }
            for (k, v) in found {
                seen.entry(k).or_insert(v);
            }
            self.scan_levels(&fc.old.levels[fc.t..], None, below_start, lo, hi_a, seen)?;
        }
        // Keys past the wavefront: the old levels (which lead to the levels below).
        let lo_b = match wave {
            Some(u64::MAX) => return Ok(()),
            Some(w) => lo.max(w + 1),
            None => lo,
        };
        if lo_b <= hi {
            let first = Self::fc_old_entry(fc, wave, heads, lo_b);
            self.scan_levels(&fc.old.levels, Some(heads), first, lo_b, hi, seen)?;
        }
        Ok(())
    }

    // ------------------------------------------------------- modifications (§2.2)

    /// Insert (`Some(v)`) or delete (`None`) `key`. Returns whether the key existed.
    fn modify(self: &Arc<Self>, key: u64, val: Option<u64>) -> Result<bool, FdError> {
        let _x = (self.cfg.scheme == Scheme::Xm)
            .then(|| self.xm.write().unwrap_or_else(|p| p.into_inner()));
        let mut log = lock(&self.log);
        // Wait for room in L0 and the log (a DS merge frees it when it ends).
        let (cur, generation) = loop {
            let mut top = lock(&self.top);
            Self::check_usable(&top)?;
            if !self.blocking(&top, &log) {
                break (top.l0.map.get(&key).copied(), top.generation);
            }
            if top.merging {
                top = self.cv.wait(top).unwrap_or_else(|p| p.into_inner());
                drop(top);
                continue;
            }
            drop(top);
            self.start_merge(&log)?;
        };
        // Whether the key exists below L0 (new). The levels may switch meanwhile (a
        // merge ends) but their content does not change, and no other modification
        // runs (the log mutex serializes them).
        let (slot, existed) = match (cur, val) {
            (Some(s), Some(v)) => (
                Slot {
                    del: s.del,
                    ins: Some(v),
                },
                s.ins.is_some(),
            ),
            (Some(s), None) => (
                Slot {
                    del: s.del,
                    ins: None,
                },
                s.ins.is_some(),
            ),
            (None, Some(v)) => {
                let b = self.lookup_inner(key, true)?.is_some();
                (
                    Slot {
                        del: b,
                        ins: Some(v),
                    },
                    b,
                )
            }
            (None, None) => {
                let b = self.lookup_inner(key, true)?.is_some();
                (Slot { del: b, ins: None }, b)
            }
        };
        if cur.unwrap_or_default() == slot {
            return Ok(existed);
        }
        if self.cfg.durable {
            self.append_log(&mut log, generation, key, slot)?;
        }
        let trigger = {
            let mut top = lock(&self.top);
            top.l0.set(key, slot);
            !top.merging && self.triggered(&top, &log)
        };
        if trigger {
            self.start_merge(&log)?;
        }
        Ok(existed)
    }

    fn log_used_lbas(&self, log: &LogState) -> u64 {
        let start = self.log_start.load(Ordering::Acquire);
        log.next_lsn / self.geo.rpl - start / self.geo.rpl + 1
    }

    /// Entries charged to the L0 budget: L0 (new), L0 old while a DS or FC merge runs
    /// (they share one `l0_bytes` budget; FC frees L0 old progressively, §4.4, DS only
    /// when the merge ends, §3), and the fences kept in L0.
    fn l0_charge(&self, top: &Top) -> u64 {
        let old = top.l0_old.as_ref().map_or(0, |o| o.entries());
        top.l0.entries() + old + top.levels.top_fences.len() as u64 + 2
    }

    /// A modification must wait (L0 or log full).
    fn blocking(&self, top: &Top, log: &LogState) -> bool {
        self.l0_charge(top) > self.geo.c0
            || (self.cfg.durable && self.log_used_lbas(log) + 1 >= self.geo.log_lbas)
    }

    /// A merge should start: L0 past `merge_at` of its budget (default 15/16, so that DS
    /// and FC can take modifications while it runs), underflow, or the log half full.
    fn triggered(&self, top: &Top, log: &LogState) -> bool {
        self.l0_charge(top) as f64 > self.geo.c0 as f64 * self.cfg.merge_at
            || self.blocking(top, log)
            || self.underflow(top)
            || (self.cfg.durable && self.log_used_lbas(log) * 2 >= self.geo.log_lbas)
    }

    fn underflow(&self, top: &Top) -> bool {
        let old_i = top.l0_old.as_ref().map_or(0, |o| o.ins);
        let old_d = top.l0_old.as_ref().map_or(0, |o| o.del);
        let np = top.l0.ins + old_i + top.levels.inserts();
        let nm = top.l0.del + old_d + top.levels.deletes();
        2 * nm > np
    }

    fn append_log(
        &self,
        log: &mut LogState,
        generation: u64,
        key: u64,
        slot: Slot,
    ) -> Result<(), FdError> {
        let lsn = log.next_lsn;
        let i = (lsn % self.geo.rpl) as usize;
        if i == 0 {
            log.tail.iter_mut().for_each(|b| *b = 0);
        }
        LogRecord {
            lsn,
            generation,
            key,
            del: slot.del,
            ins: slot.ins,
        }
        .encode(&mut log.tail[i * LOG_RECORD_BYTES..(i + 1) * LOG_RECORD_BYTES]);
        let lba = self.geo.log_lba + (lsn / self.geo.rpl) % self.geo.log_lbas;
        let mut h = self.cache.handle()?;
        h.get().write(lba, &log.tail)?;
        h.get().flush()?;
        self.counters
            .clock
            .fetch_max(h.get().now().0, Ordering::Relaxed);
        log.next_lsn += 1;
        self.counters.log_records.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    // ------------------------------------------------------------- merges (§2.3, §3)

    /// Begin a merge of the current L0: XM runs it here, DS and FC in a background
    /// thread.
    fn start_merge(self: &Arc<Self>, log: &LogState) -> Result<(), FdError> {
        let start_lsn = log.next_lsn;
        let (old, levels, underflow, generation, fc) = {
            let mut top = lock(&self.top);
            if top.merging {
                return Ok(());
            }
            let underflow = self.underflow(&top);
            let l0 = std::mem::take(&mut top.l0);
            let old = Arc::new(l0);
            top.l0_old = Some(old.clone());
            top.generation += 1;
            top.merging = true;
            let levels = top.levels.clone();
            let fc = (self.cfg.scheme == Scheme::Fc).then(|| {
                // Merge-prepare happens here so that lookups know the merge's shape
                // from the moment L0 becomes L0 old.
                let t = self.prepare(&old, &levels, underflow);
                let fc = Arc::new(FcShared {
                    old: levels.clone(),
                    t,
                    new: RwLock::new(NewLevel::default()),
                });
                top.fc = Some(fc.clone());
                top.wave = None;
                top.wave_heads = levels.levels.iter().map(|l| l.head).collect();
                fc
            });
            (old, levels, underflow, top.generation, fc)
        };
        if self.cfg.scheme == Scheme::Xm {
            return self.merge_and_install(old, levels, underflow, generation, start_lsn);
        }
        // The previous merge thread has switched its levels (merging was false) and may
        // still be reclaiming old blocks: the new merge thread waits for it, not the
        // modification that triggered the merge (which would otherwise see the
        // reclamation's device time as its own latency).
        let prev = lock(&self.merge_thread).take();
        let join_prev = move || {
            if let Some(t) = prev {
                let _ = t.join();
            }
        };
        let me = self.clone();
        let body: Box<dyn FnOnce() + Send> = match fc {
            Some(fc) => {
                let entries = l0_entries(&old, &levels, fc.t);
                // m-delete removes processed entries from L0 old in place: the thread
                // keeps no reference to it.
                drop(old);
                drop(levels);
                Box::new(move || {
                    join_prev();
                    let _ = me.merge_fc_and_install(fc, entries, underflow, generation, start_lsn);
                })
            }
            None => Box::new(move || {
                join_prev();
                let _ = me.merge_and_install(old, levels, underflow, generation, start_lsn);
            }),
        };
        let t = thread::Builder::new()
            .name("fdtree-merge".into())
            .spawn(body)
            .map_err(|e| FdError::Failed(format!("cannot start the merge thread: {e}")))?;
        *lock(&self.merge_thread) = Some(t);
        Ok(())
    }

    /// FD+FC merge (§4.4): the main loop of m-stage (read the next blocks of the old
    /// levels), m-insert (append to the new level, visible to lookups below the
    /// wavefront) and m-delete (advance the wavefront, drop processed entries from L0
    /// old so modifications can use the space, reclaim old blocks by Remark A.1's
    /// rule); then merge-finalize, the durable switch, and reclamation of the last
    /// blocks.
    fn merge_fc_and_install(
        &self,
        fc: Arc<FcShared>,
        entries: Vec<Entry>,
        underflow: bool,
        generation: u64,
        start_lsn: u64,
    ) -> Result<(), FdError> {
        let t0 = Instant::now();
        let mut early: Vec<u64> = Vec::new();
        let r = self.merge_fc_durably(&fc, entries, generation, start_lsn, &mut early);
        let (out, modeled) = match r {
            Ok(x) => x,
            Err(e) => {
                let mut top = lock(&self.top);
                top.failed = Some(e.to_string());
                top.merging = false;
                drop(top);
                self.cv.notify_all();
                return Err(e);
            }
        };
        self.counters
            .merge_modeled_ns
            .fetch_add(modeled, Ordering::Relaxed);
        // Delete the wavefront fence, make L0 new the L0: the old levels are no longer
        // reachable by new lookups.
        let stamp = {
            let mut top = lock(&self.top);
            top.levels = Arc::new(out.levels);
            top.l0_old = None;
            top.fc = None;
            top.wave = None;
            top.wave_heads = Vec::new();
            top.merging = false;
            top.next_ticket
        };
        self.cv.notify_all();
        self.log_start.store(start_lsn, Ordering::Release);
        drop(fc);
        // Reclaim the rest once every lookup that could still be in the old levels
        // (ticket below the stamp) has finished.
        self.wait_tickets(stamp);
        let early_list = early.clone();
        let early: HashSet<u64> = early.into_iter().collect();
        let rest: Vec<u64> = out
            .consumed
            .into_iter()
            .filter(|b| !early.contains(b))
            .collect();
        let r = self
            .reclaim(&rest)
            .and_then(|()| self.trim_free(&early_list));
        self.finish_merge(t0, underflow, r)
    }

    /// Count a finished merge (started at `t0`) and record a failure of its last step.
    fn finish_merge(
        &self,
        t0: Instant,
        underflow: bool,
        r: Result<(), FdError>,
    ) -> Result<(), FdError> {
        let wall = t0.elapsed().as_nanos() as u64;
        self.counters.merges.fetch_add(1, Ordering::Relaxed);
        if underflow {
            self.counters
                .underflow_merges
                .fetch_add(1, Ordering::Relaxed);
        }
        self.counters
            .merge_wall_ns
            .fetch_add(wall, Ordering::Relaxed);
        self.counters
            .max_merge_wall_ns
            .fetch_max(wall, Ordering::Relaxed);
        if let Err(e) = &r {
            lock(&self.top).failed = Some(e.to_string());
        }
        r
    }

    /// Wait until no reader holds a ticket below `stamp`.
    fn wait_tickets(&self, stamp: u64) {
        loop {
            let ok = lock(&self.top).tickets.first().is_none_or(|&t| t >= stamp);
            if ok {
                return;
            }
            backoff();
        }
    }

    fn merge_fc_durably(
        &self,
        fc: &Arc<FcShared>,
        entries: Vec<Entry>,
        generation: u64,
        start_lsn: u64,
        early: &mut Vec<u64>,
    ) -> Result<(MergeOut, u64), FdError> {
        let mut ph = self.cache.handle()?;
        let h = ph.get();
        // Start the merge's clock at the latest instant the tree has seen, so its
        // modeled time is the merge's own span.
        h.wait_until(csd_sim::SimTime(
            self.counters.clock.load(Ordering::Relaxed),
        ));
        let m0 = h.now();
        let lv = fc.old.clone();
        let t = fc.t;
        let mut input = MergeInput::new(entries, &lv, t);
        let mut w = LevelWriter::new(self.geo.epb, !input.bottom, Some(fc.clone()));
        // Blocks reclaimed during the merge, with the ticket stamp of their reclamation.
        let mut limbo: Vec<(u64, u64)> = Vec::new();
        loop {
            // m-stage + m-insert: groups until a level needs its next block.
            let mut exhausted = true;
            while let Some(g) = input.next_group(self)? {
                w.push(self, h, g.key, g.entries, g.has_fence, input.p_last)?;
                if std::mem::take(&mut input.refilled) {
                    exhausted = false;
                    break;
                }
            }
            let Some(wk) = input.last_key else { break };
            w.publish();
            // m-delete.
            let mut reclaimed = Vec::new();
            let stamp = {
                let mut top = lock(&self.top);
                top.wave = Some(wk);
                if let Some(old) = top.l0_old.as_mut() {
                    Arc::make_mut(old).remove_upto(wk);
                }
                for (i, s) in input.sources.iter_mut().enumerate().skip(1) {
                    while s
                        .pending
                        .front()
                        .is_some_and(|p| p.1.is_some_and(|f| f <= wk))
                    {
                        if let Some((id, _)) = s.pending.pop_front() {
                            reclaimed.push(id);
                        }
                    }
                    if let Some(h) = s.pending.front().map(|p| p.0).or(s.next_block) {
                        top.wave_heads[i - 1] = h;
                    }
                }
                top.next_ticket
            };
            self.cv.notify_all();
            for id in reclaimed {
                self.cache.forget(id);
                limbo.push((stamp, id));
            }
            // Without crash safety, reclaimed blocks are reused during the merge (the
            // paper's O(h) extra blocks); with it they wait for the manifest switch,
            // because the durable manifest still points at them.
            if !self.cfg.durable && !limbo.is_empty() {
                let min = lock(&self.top).tickets.first().copied();
                let (ready, wait): (Vec<_>, Vec<_>) = limbo
                    .into_iter()
                    .partition(|(s, _)| min.is_none_or(|m| m >= *s));
                limbo = wait;
                let ready: Vec<u64> = ready.into_iter().map(|r| r.1).collect();
                // Free for reuse now; the trim of those not reused is one batch at the
                // end of the merge (a trim per step would cost a device command each).
                self.release_blocks(&ready);
                self.counters
                    .early_reclaimed
                    .fetch_add(ready.len() as u64, Ordering::Relaxed);
                early.extend(ready);
            }
            if exhausted {
                break;
            }
        }
        let (firsts, meta) = w.finish(self, h)?;
        let levels = self.finalize(h, firsts, meta, &lv, t)?;
        h.flush()?;
        let merges = {
            let mut s = lock(&self.manifest_seq);
            s.1 += 1;
            s.1
        };
        self.write_manifest(h, &levels, generation, start_lsn, merges)?;
        Ok((
            MergeOut {
                levels,
                consumed: input.consumed,
            },
            {
                self.counters.clock.fetch_max(h.now().0, Ordering::Relaxed);
                h.now().0.saturating_sub(m0.0)
            },
        ))
    }

    fn merge_and_install(
        &self,
        old: Arc<L0>,
        levels: Arc<Levels>,
        underflow: bool,
        generation: u64,
        start_lsn: u64,
    ) -> Result<(), FdError> {
        let t0 = Instant::now();
        let r = self.merge_durably(&old, &levels, underflow, generation, start_lsn);
        let out = match r {
            Ok((out, modeled)) => {
                self.counters
                    .merge_modeled_ns
                    .fetch_add(modeled, Ordering::Relaxed);
                out
            }
            Err(e) => {
                let mut top = lock(&self.top);
                top.failed = Some(e.to_string());
                top.merging = false;
                drop(top);
                self.cv.notify_all();
                return Err(e);
            }
        };
        // Switch (the manifest is durable): readers now see the new levels.
        {
            let mut top = lock(&self.top);
            top.levels = Arc::new(out.levels);
            top.l0_old = None;
            top.merging = false;
        }
        self.cv.notify_all();
        self.log_start.store(start_lsn, Ordering::Release);
        drop(old);
        // Reclaim the consumed blocks once no reader can still be in the old levels.
        let mut levels = levels;
        loop {
            match Arc::try_unwrap(levels) {
                Ok(_) => break,
                Err(l) => {
                    levels = l;
                    backoff();
                }
            }
        }
        let r = self.reclaim(&out.consumed);
        self.finish_merge(t0, underflow, r)
    }

    /// Merge, then make the result durable and switch the manifest. Returns the new
    /// levels and the modeled time the merge's handle spent.
    fn merge_durably(
        &self,
        old: &L0,
        levels: &Levels,
        underflow: bool,
        generation: u64,
        start_lsn: u64,
    ) -> Result<(MergeOut, u64), FdError> {
        let mut ph = self.cache.handle()?;
        let h = ph.get();
        // Start the merge's clock at the latest instant the tree has seen, so its
        // modeled time is the merge's own span.
        h.wait_until(csd_sim::SimTime(
            self.counters.clock.load(Ordering::Relaxed),
        ));
        let m0 = h.now();
        let out = self.merge(h, old, levels, underflow)?;
        h.flush()?;
        let merges = {
            let mut s = lock(&self.manifest_seq);
            s.1 += 1;
            s.1
        };
        self.write_manifest(h, &out.levels, generation, start_lsn, merges)?;
        self.counters.clock.fetch_max(h.now().0, Ordering::Relaxed);
        Ok((out, h.now().0.saturating_sub(m0.0)))
    }

    /// Give blocks back to the allocator without trimming them (they are trimmed later
    /// by [`Inner::trim_free`] if still free).
    fn release_blocks(&self, blocks: &[u64]) {
        let mut a = lock(&self.alloc);
        for &b in blocks {
            self.cache.forget(b);
            a.free(b);
        }
        self.counters
            .blocks_reclaimed
            .fetch_add(blocks.len() as u64, Ordering::Relaxed);
    }

    /// Trim those of `blocks` that are still free (released early by an FD+FC merge and
    /// not reused), in runs.
    fn trim_free(&self, blocks: &[u64]) -> Result<(), FdError> {
        let mut free: Vec<u64> = {
            let a = lock(&self.alloc);
            blocks.iter().copied().filter(|&b| a.is_free(b)).collect()
        };
        free.sort_unstable();
        let mut ph = self.cache.handle()?;
        let h = ph.get();
        let mut i = 0;
        while i < free.len() {
            let mut j = i + 1;
            while j < free.len() && free[j] == free[j - 1] + 1 {
                j += 1;
            }
            h.trim(
                self.cache.lba_of(free[i]),
                (j - i) as u64 * self.geo.lbas_per_block,
            )?;
            i = j;
        }
        Ok(())
    }

    fn reclaim(&self, blocks: &[u64]) -> Result<(), FdError> {
        let mut sorted = blocks.to_vec();
        sorted.sort_unstable();
        let mut ph = self.cache.handle()?;
        let h = ph.get();
        let mut i = 0;
        while i < sorted.len() {
            let mut j = i + 1;
            while j < sorted.len() && sorted[j] == sorted[j - 1] + 1 {
                j += 1;
            }
            h.trim(
                self.cache.lba_of(sorted[i]),
                (j - i) as u64 * self.geo.lbas_per_block,
            )?;
            i = j;
        }
        let mut a = lock(&self.alloc);
        for &b in &sorted {
            self.cache.forget(b);
            a.free(b);
        }
        self.counters
            .blocks_reclaimed
            .fetch_add(sorted.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn write_manifest(
        &self,
        h: &mut DeviceHandle,
        lv: &Levels,
        generation: u64,
        log_start: u64,
        merges: u64,
    ) -> Result<(), FdError> {
        if lv.levels.len() > MAX_LEVELS {
            return Err(FdError::Corrupt(format!(
                "{} levels exceed {MAX_LEVELS}",
                lv.levels.len()
            )));
        }
        let seq = {
            let mut s = lock(&self.manifest_seq);
            s.0 += 1;
            s.0
        };
        let m = Manifest {
            seq,
            block_bytes: self.geo.block_bytes as u32,
            start_lba: self.geo.start_lba,
            region_lbas: self.geo.region_lbas,
            log_lbas: self.geo.log_lbas,
            generation,
            log_start,
            merges,
            levels: lv.levels.clone(),
            top_fences: lv.top_fences.clone(),
        };
        let slot_bytes = (self.geo.manifest_lbas * self.geo.lba_size) as usize;
        let lba = self.geo.start_lba + (seq % 2) * self.geo.manifest_lbas;
        h.write(lba, &m.encode(slot_bytes))?;
        h.flush()?;
        Ok(())
    }

    /// Merge-prepare: how many materialized levels to merge (0 = L0 alone into a new
    /// level above the first), and the level class of the result.
    fn prepare(&self, old: &L0, lv: &Levels, underflow: bool) -> usize {
        let len = lv.levels.len();
        if underflow || len == 0 {
            return len;
        }
        let usable = (self.geo.epb - 3) as u64;
        let mut data = old.entries();
        for t in 0..=len {
            if t > 0 {
                data += lv.levels[t - 1].inserts + lv.levels[t - 1].deletes;
            }
            if t == len {
                return len;
            }
            let fences = if t == 0 {
                lv.top_fences.len() as u64
            } else {
                lv.levels[t - 1].fences
            };
            let bound = (data + fences).div_ceil(usable) + 1;
            if self.geo.class_for(bound) < lv.levels[t].index {
                return t;
            }
        }
        len
    }

    /// Merge-execute and merge-finalize (FD+XM, FD+DS, and open).
    fn merge(
        &self,
        h: &mut DeviceHandle,
        old: &L0,
        lv: &Levels,
        underflow: bool,
    ) -> Result<MergeOut, FdError> {
        let t = self.prepare(old, lv, underflow);
        let mut input = MergeInput::new(l0_entries(old, lv, t), lv, t);
        let mut w = LevelWriter::new(self.geo.epb, !input.bottom, None);
        while let Some(g) = input.next_group(self)? {
            w.push(self, h, g.key, g.entries, g.has_fence, input.p_last)?;
        }
        let (firsts, meta) = w.finish(self, h)?;
        let levels = self.finalize(h, firsts, meta, lv, t)?;
        Ok(MergeOut {
            levels,
            consumed: input.consumed,
        })
    }

    /// Merge-finalize: tighten the new last level to the smallest class that holds it,
    /// then build fence-only levels bottom-up until the fences fit in L0 (level
    /// skipping); the levels below the merge follow unchanged.
    fn finalize(
        &self,
        h: &mut DeviceHandle,
        firsts: Vec<(u64, u64)>,
        meta: Option<LevelMeta>,
        lv: &Levels,
        t: usize,
    ) -> Result<Levels, FdError> {
        let mut new_levels = Vec::new();
        let mut top_fences = firsts;
        if let Some(mut m) = meta {
            let mut idx = self.geo.class_for(m.blocks);
            if let Some(below) = lv.levels.get(t) {
                idx = idx.min(below.index.saturating_sub(1)).max(1);
            }
            m.index = idx;
            new_levels.push(m);
            while top_fences.len() > self.geo.max_top_fences && idx > 1 {
                idx -= 1;
                let mut fw = LevelWriter::new(self.geo.epb, true, None);
                for &(key, b) in &top_fences {
                    fw.push(
                        self,
                        h,
                        key,
                        vec![Entry {
                            key,
                            kind: Kind::Fence,
                            val: b,
                        }],
                        true,
                        Some(b),
                    )?;
                }
                let (f, fm) = fw.finish(self, h)?;
                let Some(mut fm) = fm else { break };
                fm.index = idx;
                new_levels.insert(0, fm);
                top_fences = f;
            }
        } else if t < lv.levels.len() {
            // Nothing left in the merged levels: L0 fences point at the level below.
            top_fences = Vec::new();
            let below = &lv.levels[t];
            let mut next = Some(below.head);
            while let Some(id) = next {
                let b = self.cache.get(id)?;
                if let Some(e) = b.entries.first() {
                    top_fences.push((e.key, id));
                }
                next = b.next;
            }
        }
        new_levels.extend_from_slice(&lv.levels[t..]);
        Ok(Levels {
            top_fences,
            levels: new_levels,
        })
    }

    // ---------------------------------------------------------------- invariants

    /// Wait for running merges, then (FD+DS) run the merges that modifications
    /// triggered while one was running, until none is due: a quiescent tree.
    fn settle(self: &Arc<Self>) -> Result<(), FdError> {
        loop {
            self.wait_merge();
            if self.cfg.scheme == Scheme::Xm {
                return Ok(());
            }
            let log = lock(&self.log);
            let due = {
                let top = lock(&self.top);
                Self::check_usable(&top)?;
                !top.merging && self.triggered(&top, &log)
            };
            if !due {
                return Ok(());
            }
            self.start_merge(&log)?;
        }
    }

    fn check_invariants(self: &Arc<Self>) -> Result<(), FdError> {
        self.settle()?;
        let _g = (self.cfg.scheme == Scheme::Xm)
            .then(|| self.xm.read().unwrap_or_else(|p| p.into_inner()));
        let (l0, lv) = {
            let top = lock(&self.top);
            Self::check_usable(&top)?;
            (top.l0.clone(), top.levels.clone())
        };
        let inv = |inv: Invariant, detail: String| Err(FdError::Invariant { inv, detail });
        // L0 counters and I3 for L0.
        let (mut li, mut ld) = (0, 0);
        for s in l0.map.values() {
            li += u64::from(s.ins.is_some());
            ld += u64::from(s.del);
        }
        if (li, ld) != (l0.ins, l0.del) {
            return inv(
                Invariant::Counters,
                format!("L0 counts {li}/{ld} but counters say {}/{}", l0.ins, l0.del),
            );
        }
        if l0.entries() + lv.top_fences.len() as u64 > self.geo.c0 {
            return inv(
                Invariant::I3MaxSize,
                format!(
                    "L0 holds {} entries + {} fences > {}",
                    l0.entries(),
                    lv.top_fences.len(),
                    self.geo.c0
                ),
            );
        }
        let n = lv.levels.len();
        let mut expected: Vec<(u64, u64)> = lv.top_fences.clone();
        let mut np = l0.ins;
        let mut nm = l0.del;
        for (i, m) in lv.levels.iter().enumerate() {
            let bottom = i + 1 == n;
            // I1: the fences of the level above point at exactly this level's blocks,
            // in order, with keys no greater than each block's first key.
            let mut blocks = Vec::new();
            let mut next = Some(m.head);
            let mut fences_here = Vec::new();
            let (mut ins, mut del, mut fen) = (0, 0, 0);
            let mut prev: Option<Entry> = None;
            while let Some(id) = next {
                if blocks.len() as u64 > self.geo.tree_blocks {
                    return inv(Invariant::Counters, format!("level {i} has a cycle"));
                }
                let b = self.cache.get(id)?;
                let Some(first) = b.entries.first() else {
                    return inv(Invariant::Order, format!("level {i} block {id} is empty"));
                };
                blocks.push((first.key, id));
                if !bottom && first.kind != Kind::Fence {
                    return inv(
                        Invariant::I2FenceFirst,
                        format!("level {i} block {id} starts with {first:?}"),
                    );
                }
                for e in b.entries.iter() {
                    if let Some(p) = prev
                        && (p.key, p.kind) >= (e.key, e.kind)
                    {
                        return inv(
                            Invariant::Order,
                            format!("level {i} block {id}: {p:?} then {e:?}"),
                        );
                    }
                    prev = Some(*e);
                    match e.kind {
                        Kind::Insert => ins += 1,
                        Kind::Delete => del += 1,
                        Kind::Fence => {
                            fen += 1;
                            fences_here.push((e.key, e.val));
                        }
                    }
                }
                next = b.next;
            }
            if bottom && (del > 0 || fen > 0) {
                return inv(
                    Invariant::Order,
                    format!("bottom level {i} has {del} deletes and {fen} fences"),
                );
            }
            if (blocks.len() as u64, ins, del, fen) != (m.blocks, m.inserts, m.deletes, m.fences) {
                return inv(
                    Invariant::Counters,
                    format!(
                        "level {i}: blocks/ins/del/fences {}/{ins}/{del}/{fen} but descriptor {m:?}",
                        blocks.len()
                    ),
                );
            }
            let targets: Vec<u64> = expected.iter().map(|f| f.1).collect();
            let ids: Vec<u64> = blocks.iter().map(|b| b.1).collect();
            let mut dedup = targets.clone();
            dedup.dedup();
            if dedup != ids {
                return inv(
                    Invariant::I1AllBlocksFenced,
                    format!("level {i}: fences above point at {dedup:?}, blocks are {ids:?}"),
                );
            }
            // The first fence to each block carries the block's first key; later ones
            // (block-start fences `(key, p_last)`) carry larger keys.
            let first_key: std::collections::HashMap<u64, u64> =
                blocks.iter().map(|&(k, id)| (id, k)).collect();
            let mut prev_target = None;
            for &(fk, target) in &expected {
                let bk = first_key.get(&target).copied().unwrap_or(u64::MAX);
                // The level's head may be reached first by a block-start fence
                // `(key, p_last)` whose `p_last` is still the head (§2.3).
                let ok = if target == m.head {
                    true
                } else if prev_target == Some(target) {
                    fk > bk
                } else {
                    fk == bk
                };
                if !ok {
                    return inv(
                        Invariant::I1AllBlocksFenced,
                        format!("level {i}: fence key {fk} to block {target} starting at {bk}"),
                    );
                }
                prev_target = Some(target);
            }
            if m.blocks > self.geo.cap(m.index) {
                return inv(
                    Invariant::I3MaxSize,
                    format!(
                        "level {i} (class {}) has {} blocks > {}",
                        m.index,
                        m.blocks,
                        self.geo.cap(m.index)
                    ),
                );
            }
            if i > 0 && lv.levels[i - 1].index >= m.index {
                return inv(
                    Invariant::I3MaxSize,
                    format!("level classes not increasing at level {i}"),
                );
            }
            if bottom && m.index >= 2 && m.blocks <= self.geo.cap(m.index - 1) {
                return inv(
                    Invariant::I4MinSize,
                    format!(
                        "bottom level (class {}) has {} blocks <= {}",
                        m.index,
                        m.blocks,
                        self.geo.cap(m.index - 1)
                    ),
                );
            }
            np += ins;
            nm += del;
            expected = fences_here;
        }
        if !expected.is_empty() && n > 0 {
            return inv(Invariant::Order, "bottom level has fences".into());
        }
        if 2 * nm > np {
            return inv(
                Invariant::I5NoUnderflow,
                format!("N- = {nm} > N+/2 = {}", np / 2),
            );
        }
        Ok(())
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
        }
    }
}

/// What one block (or tail) says about `key`: the data verdict if it has data
/// entries for the key, and the block its largest fence `<= key` points to.
fn scan_entries(entries: &[Entry], key: u64) -> (Option<Probe>, Option<u64>) {
    let start = entries.partition_point(|e| e.key < key);
    let mut del = false;
    for e in &entries[start..] {
        if e.key != key {
            break;
        }
        match e.kind {
            Kind::Insert => return (Some(Probe::Found(e.val)), None),
            Kind::Delete => del = true,
            Kind::Fence => {}
        }
    }
    if del {
        return (Some(Probe::Deleted), None);
    }
    let end = entries.partition_point(|e| e.key <= key);
    let f = entries[..end]
        .iter()
        .rev()
        .find(|e| e.kind == Kind::Fence)
        .map(|e| e.val);
    (None, f)
}

/// Collect the data entries of `entries` within `[lo, hi]` into `found` (an insert
/// overrides the delete before it). True when the scan of the level can stop.
fn collect(entries: &[Entry], lo: u64, hi: u64, found: &mut BTreeMap<u64, Option<u64>>) -> bool {
    let start = entries.partition_point(|e| e.key < lo);
    for e in &entries[start..] {
        if e.key > hi {
            return true;
        }
        match e.kind {
            Kind::Insert => {
                found.insert(e.key, Some(e.val));
            }
            Kind::Delete => {
                found.entry(e.key).or_insert(None);
            }
            Kind::Fence => {}
        }
    }
    false
}

/// Largest fence with key <= `key` in a sorted sequence; its block.
fn fence_le(fences: impl Iterator<Item = (u64, u64)>, key: u64) -> Option<u64> {
    let mut best = None;
    for (k, b) in fences {
        if k > key {
            break;
        }
        best = Some(b);
    }
    best
}

/// A finished level: the (first key, block) of each block, and its descriptor.
type LevelOut = (Vec<(u64, u64)>, Option<LevelMeta>);

/// Writes one new level block by block (merge-execute's output for L_m new). With
/// `shared` (FD+FC) the block being filled is visible to lookups and completed blocks
/// are published as fences.
struct LevelWriter {
    cap: usize,
    fenced: bool,
    cur: Vec<Entry>,
    cur_id: Option<u64>,
    firsts: Vec<(u64, u64)>,
    meta: LevelMeta,
    shared: Option<Arc<FcShared>>,
    /// Completed blocks with consecutive ids not yet written (one command per run).
    batch: Vec<(u64, Block)>,
    /// FD+FC: entries of `cur` already in the shared tail.
    published: usize,
}

impl LevelWriter {
    fn new(cap: usize, fenced: bool, shared: Option<Arc<FcShared>>) -> LevelWriter {
        LevelWriter {
            cap,
            fenced,
            cur: Vec::new(),
            cur_id: None,
            firsts: Vec::new(),
            meta: LevelMeta {
                index: 0,
                head: 0,
                blocks: 0,
                inserts: 0,
                deletes: 0,
                fences: 0,
            },
            shared,
            batch: Vec::new(),
            published: 0,
        }
    }

    /// A completed block: publish it (FD+FC) and queue it for a batched write.
    fn stage(
        &mut self,
        t: &Inner,
        h: &mut DeviceHandle,
        id: u64,
        first: u64,
        block: Block,
    ) -> Result<(), FdError> {
        if self
            .batch
            .last()
            .is_some_and(|(last, _)| *last + 1 != id || self.batch.len() >= WRITE_BATCH)
        {
            self.flush(t, h)?;
        }
        if let Some(fc) = &self.shared {
            let mut n = fc.new.write().unwrap_or_else(|e| e.into_inner());
            n.done.push((first, id));
            n.mem.insert(id, Arc::new(block.clone()));
            n.tail.clear();
        }
        self.published = 0;
        self.batch.push((id, block));
        Ok(())
    }

    /// FD+FC: make the entries appended to the block being filled visible to lookups
    /// (before m-delete moves the wavefront past them).
    fn publish(&mut self) {
        let Some(fc) = &self.shared else { return };
        if self.published == self.cur.len() {
            return;
        }
        let mut n = fc.new.write().unwrap_or_else(|e| e.into_inner());
        if n.tail.is_empty() {
            n.tail_first = self.firsts.last().map_or(0, |f| f.0);
        }
        n.tail.extend_from_slice(&self.cur[self.published..]);
        self.published = self.cur.len();
    }

    /// Write the queued blocks.
    fn flush(&mut self, t: &Inner, h: &mut DeviceHandle) -> Result<(), FdError> {
        let batch = std::mem::take(&mut self.batch);
        let ids: Vec<u64> = batch.iter().map(|b| b.0).collect();
        t.cache.put_run(h, batch)?;
        if let Some(fc) = &self.shared {
            let mut n = fc.new.write().unwrap_or_else(|e| e.into_inner());
            for id in ids {
                n.mem.remove(&id);
            }
        }
        Ok(())
    }

    /// Add one key's entries (never split across blocks). `p_last` is the block a
    /// block-start fence points to when `group` has no fence of its own.
    fn push(
        &mut self,
        t: &Inner,
        h: &mut DeviceHandle,
        key: u64,
        group: Vec<Entry>,
        has_fence: bool,
        p_last: Option<u64>,
    ) -> Result<(), FdError> {
        let start_new = match self.cur_id {
            None => true,
            Some(_) => self.cur.len() + group.len() > self.cap,
        };
        let mut added = Vec::with_capacity(4);
        if start_new {
            let id = lock(&t.alloc).alloc()?;
            if let Some(prev) = self.cur_id {
                let entries = std::mem::take(&mut self.cur);
                let first = self.firsts.last().map_or(0, |f| f.0);
                self.stage(
                    t,
                    h,
                    prev,
                    first,
                    Block {
                        entries,
                        next: Some(id),
                    },
                )?;
            } else {
                self.meta.head = id;
            }
            self.cur_id = Some(id);
            self.meta.blocks += 1;
            self.firsts.push((key, id));
            if self.fenced
                && !has_fence
                && let Some(p) = p_last
            {
                added.push(Entry {
                    key,
                    kind: Kind::Fence,
                    val: p,
                });
            }
        }
        added.extend(group);
        for e in &added {
            match e.kind {
                Kind::Fence => self.meta.fences += 1,
                Kind::Delete => self.meta.deletes += 1,
                Kind::Insert => self.meta.inserts += 1,
            }
        }
        self.cur.extend(added);
        Ok(())
    }

    fn finish(mut self, t: &Inner, h: &mut DeviceHandle) -> Result<LevelOut, FdError> {
        match self.cur_id {
            None => Ok((Vec::new(), None)),
            Some(id) => {
                let entries = std::mem::take(&mut self.cur);
                let first = self.firsts.last().map_or(0, |f| f.0);
                self.stage(
                    t,
                    h,
                    id,
                    first,
                    Block {
                        entries,
                        next: None,
                    },
                )?;
                self.flush(t, h)?;
                Ok((self.firsts, Some(self.meta)))
            }
        }
    }
}

impl FdTree {
    fn build(dev: SharedDevice, cfg: FdConfig) -> Result<(Arc<Inner>, Geo), FdError> {
        let geo = Geo::new(&dev, &cfg)?;
        let cache = Cache::new(dev, geo.tree_lba, geo.block_bytes, cfg.cache_bytes);
        let inner = Arc::new(Inner {
            alloc: Mutex::new(Allocator::new(geo.tree_blocks, &HashSet::new())),
            top: Mutex::new(Top {
                fc: None,
                wave: None,
                wave_heads: Vec::new(),
                tickets: Default::default(),
                next_ticket: 0,
                l0: L0::default(),
                l0_old: None,
                levels: Arc::new(Levels::default()),
                generation: 1,
                merging: false,
                failed: None,
                closed: false,
            }),
            cv: Condvar::new(),
            xm: RwLock::new(()),
            log: Mutex::new(LogState {
                next_lsn: 1,
                tail: vec![0u8; geo.lba_size as usize],
            }),
            log_start: AtomicU64::new(1),
            manifest_seq: Mutex::new((0, 0)),
            merge_thread: Mutex::new(None),
            counters: Counters::default(),
            cfg,
            geo: geo.clone(),
            cache,
        });
        Ok((inner, geo))
    }

    /// Create an empty tree in the configured LBA range (overwriting whatever is there).
    pub fn create(dev: SharedDevice, cfg: FdConfig) -> Result<FdTree, FdError> {
        let (inner, geo) = Self::build(dev, cfg)?;
        {
            let mut ph = inner.cache.handle()?;
            let h = ph.get();
            // Wipe the log so stale records of an earlier tree cannot replay.
            h.trim(geo.log_lba, geo.log_lbas)?;
            let zero = vec![0u8; (geo.log_lbas.min(64) * geo.lba_size) as usize];
            let mut lba = geo.log_lba;
            while lba < geo.log_lba + geo.log_lbas {
                let n = (geo.log_lba + geo.log_lbas - lba).min(64);
                h.write(lba, &zero[..(n * geo.lba_size) as usize])?;
                lba += n;
            }
            h.trim(geo.tree_lba, geo.tree_blocks * geo.lbas_per_block)?;
            // Both manifest slots, so an older tree's slot cannot win on open.
            inner.write_manifest(h, &Levels::default(), 1, 1, 0)?;
            inner.write_manifest(h, &Levels::default(), 1, 1, 0)?;
        }
        Ok(FdTree { inner })
    }

    /// Open the tree in the configured LBA range after a clean close, a crash or a
    /// power cut: the newest valid manifest, then the redo log. Restores exactly the
    /// acknowledged state.
    pub fn open(dev: SharedDevice, cfg: FdConfig) -> Result<FdTree, FdError> {
        let (inner, geo) = Self::build(dev, cfg)?;
        let mut ph = inner.cache.handle()?;
        let h = ph.get();
        let slot_bytes = (geo.manifest_lbas * geo.lba_size) as usize;
        let mut best: Option<Manifest> = None;
        for s in 0..2 {
            let data = h.read(
                geo.start_lba + s * geo.manifest_lbas,
                geo.manifest_lbas as u32,
            )?;
            if let Some(m) = Manifest::decode(&data[..slot_bytes])
                && best.as_ref().is_none_or(|b| m.seq > b.seq)
            {
                best = Some(m);
            }
        }
        let m = best.ok_or(FdError::NotFound {
            start_lba: geo.start_lba,
        })?;
        if m.block_bytes as usize != geo.block_bytes
            || m.start_lba != geo.start_lba
            || m.region_lbas != geo.region_lbas
            || m.log_lbas != geo.log_lbas
        {
            return Err(FdError::Config(format!(
                "the tree on the device has block_bytes {} over LBAs {}+{} with a log of {} LBAs; the configuration says {} over {}+{} with {}; open with the configuration it was created with",
                m.block_bytes,
                m.start_lba,
                m.region_lbas,
                m.log_lbas,
                geo.block_bytes,
                geo.start_lba,
                geo.region_lbas,
                geo.log_lbas
            )));
        }
        // Rebuild the allocator: every block reachable from the manifest is in use.
        let mut used = HashSet::new();
        for l in &m.levels {
            let mut next = Some(l.head);
            while let Some(id) = next {
                if id >= geo.tree_blocks || !used.insert(id) {
                    return Err(FdError::Corrupt(format!(
                        "block {id} out of range or reached twice"
                    )));
                }
                next = inner.cache.get(id)?.next;
            }
        }
        *lock(&inner.alloc) = Allocator::new(geo.tree_blocks, &used);
        *lock(&inner.manifest_seq) = (m.seq, m.merges);
        // Replay the log.
        let mut generations: Vec<(u64, L0)> = Vec::new();
        let mut lsn = m.log_start;
        let mut lba_data: Option<(u64, Vec<u8>)> = None;
        loop {
            let lba_no = lsn / geo.rpl;
            if lba_no >= m.log_start / geo.rpl + geo.log_lbas {
                break;
            }
            if lba_data.as_ref().is_none_or(|(n, _)| *n != lba_no) {
                let d = h.read(geo.log_lba + lba_no % geo.log_lbas, 1)?;
                lba_data = Some((lba_no, d));
            }
            let Some((_, d)) = &lba_data else { break };
            let i = (lsn % geo.rpl) as usize;
            let Some(r) = LogRecord::decode(&d[i * LOG_RECORD_BYTES..(i + 1) * LOG_RECORD_BYTES])
            else {
                break;
            };
            if r.lsn != lsn || r.generation < m.generation {
                break;
            }
            if generations.last().is_none_or(|g| g.0 != r.generation) {
                generations.push((r.generation, L0::default()));
            }
            if let Some(g) = generations.last_mut() {
                g.1.set(
                    r.key,
                    Slot {
                        del: r.del,
                        ins: r.ins,
                    },
                );
            }
            lsn += 1;
        }
        let mut tail = vec![0u8; geo.lba_size as usize];
        if lsn % geo.rpl != 0
            && let Some((n, d)) = lba_data
            && n == lsn / geo.rpl
        {
            let keep = (lsn % geo.rpl) as usize * LOG_RECORD_BYTES;
            tail[..keep].copy_from_slice(&d[..keep]);
        }
        let gen_count = generations.len();
        let last_gen = generations.last().map_or(m.generation, |g| g.0);
        let mut l0 = L0::default();
        for (_, g) in generations {
            if l0.map.is_empty() {
                l0 = g;
            } else {
                for (k, s) in g.map {
                    let c = l0.map.get(&k).copied().unwrap_or_default().compose(s);
                    l0.set(k, c);
                }
            }
        }
        drop(ph);
        inner.log_start.store(m.log_start, Ordering::Release);
        {
            let mut log = lock(&inner.log);
            log.next_lsn = lsn;
            log.tail = tail;
        }
        {
            let mut top = lock(&inner.top);
            top.l0 = l0;
            top.generation = last_gen;
            top.levels = Arc::new(Levels {
                top_fences: m.top_fences,
                levels: m.levels,
            });
        }
        let tree = FdTree { inner };
        // A cut during a DS merge leaves two generations: merge them now (inline) so the
        // log again holds a single generation; also merge if L0 is over its budget.
        let need = {
            let top = lock(&tree.inner.top);
            let log = lock(&tree.inner.log);
            gen_count > 1 || tree.inner.triggered(&top, &log)
        };
        if need {
            let log = lock(&tree.inner.log);
            let old = {
                let mut top = lock(&tree.inner.top);
                let underflow = tree.inner.underflow(&top);
                let l0 = Arc::new(std::mem::take(&mut top.l0));
                top.l0_old = Some(l0.clone());
                top.generation += 1;
                top.merging = true;
                (l0, top.levels.clone(), underflow, top.generation)
            };
            tree.inner
                .merge_and_install(old.0, old.1, old.2, old.3, log.next_lsn)?;
        }
        Ok(tree)
    }

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
mod tests {
    use super::*;

    fn dev() -> SharedDevice {
        crate::test_device()
    }

    #[test]
    fn compose_follows_the_cancel_rules() {
        let ins = |v| Slot {
            del: false,
            ins: Some(v),
        };
        let del = Slot {
            del: true,
            ins: None,
        };
        let both = |v| Slot {
            del: true,
            ins: Some(v),
        };
        // Inserted then deleted in the next generation: nothing remains.
        assert_eq!(ins(1).compose(del), Slot::default());
        // Deleted below, re-inserted above.
        assert_eq!(del.compose(ins(2)), both(2));
        // Update of a key that was inserted in the older generation.
        assert_eq!(ins(1).compose(both(2)), ins(2));
        // Unrelated older slot, delete of a key below both.
        assert_eq!(Slot::default().compose(del), del);
        assert_eq!(both(3).compose(Slot::default()), both(3));
    }

    #[test]
    fn check_invariants_names_the_broken_one() {
        let t = FdTree::create(dev(), FdConfig::small()).unwrap();
        for k in 0..1_000u64 {
            t.insert(k, k).unwrap();
        }
        t.check_invariants().unwrap();
        // Change the level descriptors in place, then expect the checker to name `inv`.
        let tamper = |f: &dyn Fn(&mut Levels)| {
            let mut top = lock(&t.inner.top);
            let mut lv = (*top.levels).clone();
            f(&mut lv);
            top.levels = Arc::new(lv);
        };
        let violates = |inv: Invariant| match t.check_invariants() {
            Err(FdError::Invariant { inv: got, .. }) => assert_eq!(got, inv),
            other => panic!("expected {inv:?} to be reported, got {other:?}"),
        };
        // A descriptor that disagrees with the blocks.
        tamper(&|lv: &mut Levels| {
            lv.levels[0].inserts += 1;
        });
        violates(Invariant::Counters);
        tamper(&|lv: &mut Levels| {
            lv.levels[0].inserts -= 1;
            // A level over its class's maximum size.
            let last = lv.levels.len() - 1;
            lv.levels[last].index = 0;
        });
        violates(Invariant::I3MaxSize);
        tamper(&|lv: &mut Levels| {
            let last = lv.levels.len() - 1;
            lv.levels[last].index = 40;
        });
        violates(Invariant::I4MinSize);
        tamper(&|lv: &mut Levels| {
            let last = lv.levels.len() - 1;
            lv.levels[last].index = t.inner.geo.class_for(lv.levels[last].blocks);
            // Drop a top fence: a block of the first level is no longer fenced.
            lv.top_fences.pop();
        });
        violates(Invariant::I1AllBlocksFenced);
    }

    #[test]
    fn geometry_is_validated() {
        let d = dev();
        let g = Geo::new(&d, &FdConfig::small()).unwrap();
        assert_eq!(g.epb, 239);
        assert_eq!(g.c0, 256);
        assert_eq!(g.cap(0), 1);
        assert_eq!(g.cap(2), 9);
        assert_eq!(g.class_for(10), 3);
        let mut c = FdConfig::small();
        c.size_ratio = 300;
        assert!(matches!(Geo::new(&d, &c), Err(FdError::Config(_))));
        let mut c = FdConfig::small();
        c.size_ratio = 40; // 1 x 40 fences > 256 / 8
        assert!(matches!(Geo::new(&d, &c), Err(FdError::Config(m)) if m.contains("fences")));
        let mut c = FdConfig::small();
        c.cache_bytes = 4096;
        assert!(matches!(Geo::new(&d, &c), Err(FdError::Config(_))));
    }
}
