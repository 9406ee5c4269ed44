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

use crate::KvError;
use crate::batch;
use crate::block::{self, BlockLog, BlockOptions};
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
    /// Open the store on `dev`: recover the one there, or format an empty device when
    /// `cfg.create`. A device holding the other interface's store, or anything else, is
    /// an error that says so (and changes nothing).
    pub fn open(dev: I, cfg: StoreConfig) -> Result<Store<I>, Box<OpenFailed<I>>> {
        let id = dev.identify().clone();
        let now = dev.now();
        let cap = (cfg.write_buffer_bytes / PAGE).saturating_sub(1);
        let mut s = Store {
            clock: HostClock::new(cfg.costs, cfg.queue_depth, now),
            cache: Cache::new(cfg.cache_pages.unwrap_or(usize::MAX)),
            buf: WriteBuffer::new(cap.max(1)),
            dirty: HashMap::new(),
            fifo: VecDeque::new(),
            sup: Super {
                interface: cfg.interface.tag(),
                root: 1,
                next_id: 2,
                height: 1,
            },
            lsn: 0,
            batch_seq: 0,
            log: None,
            modifying: false,
            group: None,
            last_ckpt: now,
            lbas: id.lbas,
            counts: StoreStats::default(),
            op_start: now,
            op_done: now,
            io: IoStats::default(),
            recovered: false,
            activity: Activity::Recovery,
            dev,
            cfg,
        };
        match s.init(id.lba_size) {
            Ok(()) => {
                s.activity = Activity::Idle;
                Ok(s)
            }
            Err(error) => Err(Box::new(OpenFailed { error, dev: s.dev })),
        }
    }

    fn init(&mut self, lba_size: u32) -> Result<(), KvError> {
        if lba_size as usize != PAGE {
            return Err(KvError::Config(format!(
                "the store needs {PAGE}-byte LBAs; this device has {lba_size}"
            )));
        }
        if self.buf.cap < 16 || self.buf.cap > block::MAX_CHUNK_PAGES.min(255) {
            return Err(KvError::Config(format!(
                "write buffer of {} bytes: use 68 KiB to 1 MiB",
                self.cfg.write_buffer_bytes
            )));
        }
        if !self.cfg.persist {
            self.cache.capacity = usize::MAX;
            return self.format_in_memory();
        }
        let batch_limit = self.dev.identify().max_batch_pages as usize;
        if self.cfg.interface == Interface::Batch && self.buf.cap > batch_limit {
            self.buf.cap = batch_limit;
        }
        let at = self.clock.cpu;
        // What is on the device?
        let head = self.read_raw(0, at)?;
        let other_b = block::slot_b(self.lbas)
            .map(|b| self.read_raw(b, at))
            .transpose()?;
        let has_ckpt = block::is_checkpoint(&head)
            || other_b.as_ref().is_some_and(|b| block::is_checkpoint(b));
        let sup0 = page::get_super(&head).filter(|_| page::crc_ok(&head));
        let empty = head.iter().all(|&b| b == 0) && !has_ckpt;
        match self.cfg.interface {
            Interface::Batch => {
                if has_ckpt {
                    return Err(KvError::WrongFormat(
                        "this device holds a key-value store of the block interface (host log \
                         structuring): open it with --interface block"
                            .into(),
                    ));
                }
                match sup0 {
                    Some(s) if s.interface == Interface::Batch.tag() => {
                        self.sup = s;
                        self.recovered = true;
                        Ok(())
                    }
                    Some(s) => Err(KvError::WrongFormat(format!(
                        "the superpage at LPID 0 names interface tag {}: not a batch store",
                        s.interface
                    ))),
                    None if empty && self.cfg.create => self.format(),
                    None if empty => Err(KvError::WrongFormat(
                        "the device holds no key-value store (create one first)".into(),
                    )),
                    None => Err(KvError::WrongFormat(
                        "the device holds something other than a key-value store at LPID 0".into(),
                    )),
                }
            }
            Interface::Block => {
                if let Some(s) = sup0
                    && s.interface == Interface::Batch.tag()
                {
                    return Err(KvError::WrongFormat(
                        "this device holds a key-value store of the batch interface (log \
                         structuring in the device): open it with --interface batch"
                            .into(),
                    ));
                }
                if !has_ckpt {
                    return if empty && self.cfg.create {
                        self.format()
                    } else if empty {
                        Err(KvError::WrongFormat(
                            "the device holds no key-value store (create one first)".into(),
                        ))
                    } else {
                        Err(KvError::WrongFormat(
                            "the device holds something other than a key-value store at LBA 0"
                                .into(),
                        ))
                    };
                }
                let mut io = Io {
                    dev: &mut self.dev,
                    clock: &mut self.clock,
                    stats: &mut self.io,
                };
                let Some((log, t)) = BlockLog::recover(&mut io, self.lbas, self.cfg.block, at)?
                else {
                    return Err(KvError::WrongFormat("no host checkpoint found".into()));
                };
                self.log = Some(log);
                self.clock.cpu = self.clock.cpu.max(t);
                let mut t = self.clock.cpu;
                let (p, done) = self.read_page(0, &mut t)?;
                let s = page::get_super(&p[..]).ok_or_else(|| {
                    KvError::Corrupt("page 0 of the block store is not its superpage".into())
                })?;
                if s.interface != Interface::Block.tag() {
                    return Err(KvError::Corrupt("superpage names another interface".into()));
                }
                self.sup = s;
                self.clock.cpu = self.clock.cpu.max(done);
                // Pages a roll-forward found past the tree's last id belong to a tree
                // cleared before the cut: garbage.
                if let Some(log) = &mut self.log {
                    log.forget_from(s.next_id);
                }
                self.checkpoint()?;
                self.recovered = true;
                Ok(())
            }
        }
    }

    /// Read one LBA as raw bytes (format detection).
    fn read_raw(&mut self, lba: u64, at: SimTime) -> Result<Vec<u8>, KvError> {
        let mut io = Io {
            dev: &mut self.dev,
            clock: &mut self.clock,
            stats: &mut self.io,
        };
        let (d, _) = io.read_lbas(Work::Checkpoint, lba, 1, at)?;
        Ok(d)
    }

    fn format_in_memory(&mut self) -> Result<(), KvError> {
        let mut sp = page::blank();
        page::put_super(&mut sp, &self.sup);
        let mut root = page::blank();
        page::init(&mut root, 1, Kind::Leaf, 0);
        let t = self.clock.cpu;
        self.cache.insert(0, sp, t);
        self.cache.insert(1, root, t);
        Ok(())
    }

    fn format(&mut self) -> Result<(), KvError> {
        if self.cfg.interface == Interface::Block {
            self.log = Some(BlockLog::new(self.lbas, self.cfg.block)?);
            self.checkpoint()?;
        }
        self.format_in_memory()?;
        self.lsn += 1;
        let t = self.clock.cpu;
        self.mark_dirty(0, self.lsn, t);
        self.mark_dirty(1, self.lsn, t);
        self.buf.add(0, None);
        self.buf.add(1, None);
        self.seal()?;
        if self.cfg.interface == Interface::Block {
            self.checkpoint()?;
        }
        Ok(())
    }

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

    fn check_key(key: &[u8]) -> Result<(), KvError> {
        if key.is_empty() || key.len() > MAX_KEY {
            return Err(KvError::KeySize {
                len: key.len(),
                max: MAX_KEY,
            });
        }
        Ok(())
    }

    // ------------------------------------------------------------------ pages

    fn read_page(&mut self, id: u64, t: &mut SimTime) -> Result<(Page, SimTime), KvError> {
        let mut io = Io {
            dev: &mut self.dev,
            clock: &mut self.clock,
            stats: &mut self.io,
        };
        let (p, done) = match &self.log {
            Some(log) => log.read(&mut io, id, *t)?,
            None => batch::read(&mut io, id, *t)?,
        };
        self.io.user_read_bytes += PAGE as u64;
        if !(page::sane(&p[..]) && page::id(&p[..]) == id && page::crc_ok(&p[..])) {
            return Err(KvError::Corrupt(format!(
                "page {id} read back from the device does not verify (id {}, kind {:?})",
                page::id(&p[..]),
                page::kind(&p[..])
            )));
        }
        Ok((p, done))
    }

    /// Make room for one more frame: evict (a dirty page, or one the write buffer refers
    /// to, moves into the write buffer).
    fn make_room(&mut self) -> Result<(), KvError> {
        while self.cache.is_full() {
            let Some(i) = self.cache.victim() else {
                return Ok(());
            };
            let (id, data) = self.cache.remove(i);
            if self.buf.contains(id) {
                if self.buf.image(id).is_none() {
                    self.buf.add(id, Some(data));
                }
            } else if self.dirty.contains_key(&id) {
                self.buf.add(id, Some(data));
                if !self.modifying && self.group.is_none() && self.buf.len() >= self.buf.cap {
                    self.seal()?;
                }
            }
        }
        Ok(())
    }

    /// Bring page `id` into the cache; `t` is the operation's clock.
    fn fetch(&mut self, id: u64, t: &mut SimTime) -> Result<(), KvError> {
        let c = self.clock.costs;
        self.clock.charge(Work::User, c.level, t);
        if let Some(i) = self.cache.get(id) {
            self.cache.hits += 1;
            *t = (*t).max(self.cache.frames[i].ready_at);
            return Ok(());
        }
        self.cache.misses += 1;
        let (data, ready) = match self.buf.image(id) {
            Some(img) => (copy(img), *t),
            None => self.read_page(id, t)?,
        };
        self.make_room()?;
        let mut tt = ready.max(*t);
        self.clock.charge(Work::User, c.cache_fill, &mut tt);
        self.cache.insert(id, data, ready);
        *t = tt;
        Ok(())
    }

    fn frame(&mut self, id: u64) -> Result<&mut Page, KvError> {
        match self.cache.index.get(&id) {
            Some(&i) => Ok(&mut self.cache.frames[i].data),
            None => Err(KvError::Corrupt(format!(
                "page {id} left the cache while in use"
            ))),
        }
    }

    fn pin(&mut self, id: u64, by: i32) {
        if let Some(&i) = self.cache.index.get(&id) {
            let f = &mut self.cache.frames[i];
            f.pin = (f.pin as i32 + by).max(0) as u32;
        }
    }

    fn mark_dirty(&mut self, id: u64, lsn: u64, t: SimTime) {
        if let Some(g) = &mut self.group {
            g.push(id);
        }
        if let std::collections::hash_map::Entry::Vacant(e) = self.dirty.entry(id) {
            e.insert((lsn, t));
            self.fifo.push_back((lsn, t, id));
        }
        if self.buf.image(id).is_some() && self.cache.index.contains_key(&id) {
            self.buf.add(id, None);
        }
        self.buf.relocated.remove(&id);
    }

    /// Walk from the root to the leaf for `key`; returns the page ids on the way.
    fn descend(&mut self, key: &[u8], t: &mut SimTime, pin: bool) -> Result<Vec<u64>, KvError> {
        let mut path = Vec::with_capacity(self.sup.height as usize);
        let mut id = self.sup.root;
        loop {
            self.fetch(id, t)?;
            if pin {
                self.pin(id, 1);
            }
            path.push(id);
            let p = self.frame(id)?;
            match page::kind(&p[..]) {
                Some(Kind::Leaf) => return Ok(path),
                Some(Kind::Inner) if page::count(&p[..]) > 0 => {
                    let s = page::child_slot(&p[..], key);
                    id = page::child(&p[..], s);
                }
                k => {
                    return Err(KvError::Corrupt(format!(
                        "page {id} on the path to a key is {k:?}, not a tree node"
                    )));
                }
            }
            if path.len() > 64 {
                return Err(KvError::Corrupt("tree deeper than 64 levels".into()));
            }
        }
    }

    fn begin_op(&mut self) -> SimTime {
        let mut t = self.clock.cpu;
        self.op_start = t;
        let c = self.clock.costs.op;
        self.clock.charge(Work::User, c, &mut t);
        t
    }

    fn end_op(&mut self, t: SimTime) -> Result<(), KvError> {
        self.op_done = t;
        self.background()
    }

    /// Modeled start and end of the last operation.
    pub fn last_op(&self) -> (SimTime, SimTime) {
        (self.op_start, self.op_done)
    }

    // ------------------------------------------------------------------ operations

    /// The value of `key`.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        Self::check_key(key)?;
        let mut t = self.begin_op();
        self.counts.gets += 1;
        let path = self.descend(key, &mut t, false)?;
        let leaf = *path.last().unwrap_or(&self.sup.root);
        let p = self.frame(leaf)?;
        let v = page::search(&p[..], key)
            .ok()
            .map(|i| page::value(&p[..], i).to_vec());
        self.end_op(t)?;
        Ok(v)
    }

    /// Does `key` exist?
    pub fn contains(&mut self, key: &[u8]) -> Result<bool, KvError> {
        Ok(self.get(key)?.is_some())
    }

    /// Set `key` to `value`; returns the change's sequence number (see [`Store::acked`]).
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<u64, KvError> {
        Self::check_pair(key, value)?;
        self.counts.puts += 1;
        self.modify(key, Some(value)).map(|(lsn, _)| lsn)
    }

    /// Set every key to its value as one change a crash cannot tear (Redis's MSET):
    /// after a power cut either every pair or none of them reads back. Returns the
    /// sequence number of the last pair's change (see [`Store::acked`]).
    ///
    /// How: the pages the pairs will change are planned first (one more descent per
    /// key, charged like any): each distinct leaf, or for a leaf the pairs could
    /// overflow, the worst case of a split up to the root for each of its pairs.
    /// Every page dirty from earlier changes is sealed
    /// first, so evictions during the group can only move the group's own pages; the
    /// pairs are applied with sealing and background work held back, and all the pages
    /// they changed are sealed together as one write buffer, which is all-or-nothing on
    /// a crash. A command whose pages could exceed one buffer is refused before anything
    /// changes ([`KvError::GroupTooLarge`]); bad keys or values likewise. A failure of
    /// the device part-way (out of space, power loss) can leave the pairs applied so far
    /// in memory only, as for any unacknowledged change.
    pub fn put_all(&mut self, pairs: &[(&[u8], &[u8])]) -> Result<u64, KvError> {
        for &(k, v) in pairs {
            Self::check_pair(k, v)?;
        }
        if !self.cfg.persist {
            let mut lsn = self.lsn;
            for &(k, v) in pairs {
                lsn = self.put(k, v)?;
            }
            return Ok(lsn);
        }
        let pages = self.plan_group(pairs)?;
        if pages > self.buf.cap {
            return Err(KvError::GroupTooLarge {
                pairs: pairs.len(),
                pages,
                cap: self.buf.cap,
            });
        }
        let ids: Vec<u64> = self.fifo.iter().map(|&(_, _, id)| id).collect();
        for id in ids {
            self.stage_dirty(id)?;
        }
        self.seal()?;
        self.group = Some(Vec::new());
        let mut r = Ok(self.lsn);
        for &(k, v) in pairs {
            r = self.put(k, v);
            if r.is_err() {
                break;
            }
        }
        let touched = self.group.take().unwrap_or_default();
        let lsn = r?;
        for id in touched {
            if self.dirty.contains_key(&id)
                && !self.buf.contains(id)
                && self.cache.index.contains_key(&id)
            {
                self.buf.add(id, None);
            }
        }
        self.seal()?;
        self.background()?;
        Ok(lsn)
    }

    /// Pages a [`Store::put_all`] of `pairs` may change at worst: every distinct leaf,
    /// or the worst case of a split (up to the root) for each leaf whose free bytes cannot take its pairs'
    /// entries.
    fn plan_group(&mut self, pairs: &[(&[u8], &[u8])]) -> Result<usize, KvError> {
        // leaf -> (its used bytes when planned, bytes of the entries going to it, pairs)
        let mut need: HashMap<u64, (usize, usize, usize)> = HashMap::new();
        let mut t = self.clock.cpu;
        for &(k, v) in pairs {
            let path = self.descend(k, &mut t, false)?;
            let leaf = *path.last().unwrap_or(&self.sup.root);
            let used = page::used_bytes(&self.frame(leaf)?[..]);
            let e = need.entry(leaf).or_insert((used, 0, 0));
            e.1 += page::entry_bytes(k.len(), v.len());
            e.2 += 1;
        }
        // A leaf its pairs may overflow can split on every one of them, each split
        // reaching up to the root: two pages per level (the page and its new sibling),
        // a new root and the superpage; two levels more in case the group grows the
        // tree (a group within one buffer cannot grow it further).
        let split = 2 * (self.sup.height as usize + 2) + 2;
        Ok(need
            .values()
            .map(|&(used, bytes, n)| {
                if used + bytes <= PAGE {
                    1
                } else {
                    1 + n * split
                }
            })
            .sum())
    }

    /// A key and value a put accepts.
    fn check_pair(key: &[u8], value: &[u8]) -> Result<(), KvError> {
        Self::check_key(key)?;
        if value.len() > MAX_VALUE {
            return Err(KvError::ValueSize {
                len: value.len(),
                max: MAX_VALUE,
            });
        }
        Ok(())
    }

    /// Remove `key`; returns whether it existed.
    pub fn delete(&mut self, key: &[u8]) -> Result<bool, KvError> {
        Self::check_key(key)?;
        self.counts.deletes += 1;
        self.modify(key, None).map(|(_, existed)| existed)
    }

    fn reserve(&self) -> usize {
        4 * self.sup.height as usize + 8
    }

    fn modify(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(u64, bool), KvError> {
        if self.cfg.persist
            && self.group.is_none()
            && self.buf.len() + self.reserve() > self.buf.cap
        {
            self.seal()?;
        }
        let mut t = self.begin_op();
        let path = self.descend(key, &mut t, true)?;
        self.lsn += 1;
        let lsn = self.lsn;
        self.modifying = true;
        let r = self.apply(&path, key, value, lsn, &mut t);
        self.modifying = false;
        for &id in &path {
            self.pin(id, -1);
        }
        let existed = r?;
        self.end_op(t)?;
        Ok((lsn, existed))
    }

    fn apply(
        &mut self,
        path: &[u64],
        key: &[u8],
        value: Option<&[u8]>,
        lsn: u64,
        t: &mut SimTime,
    ) -> Result<bool, KvError> {
        let leaf = *path
            .last()
            .ok_or_else(|| KvError::Corrupt("empty path".into()))?;
        let c = self.clock.costs;
        self.clock.charge(Work::User, c.modify, t);
        let Some(value) = value else {
            let removed = page::remove(self.frame(leaf)?, key);
            if removed {
                self.mark_dirty(leaf, lsn, *t);
            }
            return Ok(removed);
        };
        let existed = page::search(&self.frame(leaf)?[..], key).is_ok();
        if page::upsert(self.frame(leaf)?, key, value) {
            self.mark_dirty(leaf, lsn, *t);
            return Ok(existed);
        }
        self.split_insert(path, key, value, lsn, t)?;
        Ok(existed)
    }

    fn alloc_id(&mut self) -> Result<u64, KvError> {
        let id = self.sup.next_id;
        let limit = match &self.log {
            Some(l) => l.page_capacity() * 9 / 10,
            None if self.cfg.persist => self.lbas,
            None => u64::MAX,
        };
        if id >= limit {
            return Err(KvError::NoSpace(format!(
                "the tree has {id} pages, the most this device holds for the {} interface",
                self.cfg.interface.name()
            )));
        }
        self.sup.next_id += 1;
        Ok(id)
    }

    fn install(&mut self, id: u64, data: Page, t: SimTime) -> Result<(), KvError> {
        self.make_room()?;
        self.cache.insert(id, data, t);
        self.pin(id, 1);
        Ok(())
    }

    fn split_insert(
        &mut self,
        path: &[u64],
        key: &[u8],
        value: &[u8],
        lsn: u64,
        t: &mut SimTime,
    ) -> Result<(), KvError> {
        let c = self.clock.costs;
        let mut group: Vec<u64> = Vec::new();
        let mut level = path.len() - 1;
        let mut ins_key = key.to_vec();
        let mut ins_val = value.to_vec();
        let mut new_pages = Vec::new();
        loop {
            let id = path[level];
            if page::upsert(self.frame(id)?, &ins_key, &ins_val) {
                group.push(id);
                break;
            }
            self.clock.charge(Work::User, c.split, t);
            self.counts.splits += 1;
            let (kind, lvl) = {
                let p = self.frame(id)?;
                (
                    page::kind(&p[..]).unwrap_or(Kind::Leaf),
                    page::level(&p[..]),
                )
            };
            let rid = self.alloc_id()?;
            let mut r = page::blank();
            page::init(&mut r, rid, kind, lvl);
            let left = self.frame(id)?;
            let sep = page::split_into(left, &mut r);
            if kind == Kind::Leaf {
                page::set_next(&mut r[..], page::next(&left[..]));
                page::set_next(&mut left[..], rid);
            }
            let fits = if ins_key >= sep {
                page::upsert(&mut r, &ins_key, &ins_val)
            } else {
                page::upsert(self.frame(id)?, &ins_key, &ins_val)
            };
            if !fits {
                return Err(KvError::Corrupt(
                    "an entry does not fit a freshly split page".into(),
                ));
            }
            self.install(rid, r, *t)?;
            new_pages.push(rid);
            group.push(id);
            group.push(rid);
            if level == 0 {
                let nid = self.alloc_id()?;
                let mut root = page::blank();
                page::init(&mut root, nid, Kind::Inner, lvl + 1);
                page::upsert(&mut root, &[], &id.to_le_bytes());
                page::upsert(&mut root, &sep, &rid.to_le_bytes());
                self.install(nid, root, *t)?;
                new_pages.push(nid);
                group.push(nid);
                self.sup.root = nid;
                self.sup.height = self.sup.height.saturating_add(1);
                break;
            }
            ins_key = sep;
            ins_val = rid.to_le_bytes().to_vec();
            level -= 1;
        }
        // The superpage records the allocation (and any new root).
        self.fetch(0, t)?;
        let sup = self.sup;
        page::put_super(self.frame(0)?, &sup);
        group.push(0);
        for &id in &group {
            self.mark_dirty(id, lsn, *t);
            if self.cfg.persist {
                self.buf.add(id, None);
            }
        }
        for id in new_pages {
            self.pin(id, -1);
        }
        Ok(())
    }

    /// Up to `limit` entries with keys at or after `start`, in key order.
    pub fn scan(&mut self, start: &[u8], limit: usize) -> Result<Vec<Entry>, KvError> {
        let mut t = self.begin_op();
        self.counts.scans += 1;
        let mut out = Vec::new();
        let path = self.descend(start, &mut t, false)?;
        let mut id = *path.last().unwrap_or(&self.sup.root);
        let mut from = {
            let p = self.frame(id)?;
            match page::search(&p[..], start) {
                Ok(i) | Err(i) => i,
            }
        };
        let per = self.clock.costs.scan_entry;
        loop {
            let p = self.frame(id)?;
            let n = page::count(&p[..]);
            for i in from..n {
                if out.len() >= limit {
                    break;
                }
                out.push((
                    page::key(&p[..], i).to_vec(),
                    page::value(&p[..], i).to_vec(),
                ));
            }
            let next = page::next(&p[..]);
            if out.len() >= limit || next == NO_PAGE {
                break;
            }
            id = next;
            from = 0;
            self.fetch(id, &mut t)?;
        }
        self.clock
            .charge(Work::User, per * out.len() as u64, &mut t);
        self.end_op(t)?;
        Ok(out)
    }

    // ------------------------------------------------------------------ durability

    /// The highest change sequence number such that it and every earlier change are on
    /// the device (acknowledged as durable).
    pub fn acked(&mut self) -> u64 {
        if !self.cfg.persist {
            return 0;
        }
        while let Some(&(lsn, _, id)) = self.fifo.front() {
            if self.dirty.get(&id).map(|d| d.0) == Some(lsn) {
                return lsn - 1;
            }
            self.fifo.pop_front();
        }
        self.lsn
    }

    /// The sequence number of the latest change.
    pub fn last_change(&self) -> u64 {
        self.lsn
    }

    /// Write the buffer as one sealed unit (log chunk or batch).
    fn seal(&mut self) -> Result<(), KvError> {
        if self.buf.is_empty() || !self.cfg.persist {
            return Ok(());
        }
        let seq = match &self.log {
            Some(l) => l.next_seq(),
            None => {
                self.batch_seq += 1;
                self.batch_seq
            }
        };
        if self.buf.len() > 255 {
            // Checked before the buffer is drained, so its pages stay staged.
            return Err(KvError::Corrupt(format!(
                "write buffer overflow: {} pages in one seal",
                self.buf.len()
            )));
        }
        let ready = self.buf.ready_at;
        let entries = self.buf.drain();
        let c = self.clock.costs;
        let mut pages = Vec::with_capacity(entries.len());
        let (mut user, mut gc) = (0u64, 0u64);
        let mut t = self.clock.cpu;
        for (id, img, reloc) in entries {
            let mut p = match img {
                Some(p) => p,
                None => copy(self.frame(id)?),
            };
            page::seal(&mut p[..], seq);
            if reloc {
                gc += 1;
                self.clock.charge(Work::Gc, c.gc_move, &mut t);
            } else {
                user += 1;
                self.clock.charge(Work::User, c.buffer_page, &mut t);
            }
            pages.push((id, p));
        }
        self.io.user_write_bytes += user * PAGE as u64;
        self.io.gc_write_bytes += gc * PAGE as u64;
        self.io.gc_pages_moved += gc;
        self.io.seals += 1;
        let work = if gc > user { Work::Gc } else { Work::User };
        let at = self.clock.cpu.max(ready);
        let mut io = Io {
            dev: &mut self.dev,
            clock: &mut self.clock,
            stats: &mut self.io,
        };
        self.activity = Activity::Seal;
        match &mut self.log {
            Some(log) => log.write(&mut io, work, &pages, at)?,
            None => batch::write(&mut io, work, &pages, at)?,
        };
        for (id, _) in &pages {
            self.dirty.remove(id);
        }
        self.activity = Activity::Idle;
        Ok(())
    }

    /// Write every dirty page and wait for the device: afterwards [`Store::acked`] equals
    /// [`Store::last_change`]. Returns the modeled instant it was all durable.
    pub fn sync(&mut self) -> Result<SimTime, KvError> {
        if !self.cfg.persist {
            return Ok(self.clock.cpu);
        }
        let ids: Vec<u64> = self.fifo.iter().map(|&(_, _, id)| id).collect();
        for id in ids {
            self.stage_dirty(id)?;
        }
        self.seal()?;
        let mut io = Io {
            dev: &mut self.dev,
            clock: &mut self.clock,
            stats: &mut self.io,
        };
        let at = io.clock.cpu;
        io.submit(Work::User, Command::Flush, at)?;
        let done = self.clock.drained();
        self.clock.cpu = done;
        Ok(done)
    }

    /// Put dirty page `id` into the write buffer (sealing a full buffer first).
    fn stage_dirty(&mut self, id: u64) -> Result<(), KvError> {
        if !self.dirty.contains_key(&id) || self.buf.contains(id) {
            return Ok(());
        }
        if self.buf.len() >= self.buf.cap {
            self.seal()?;
        }
        if self.cache.index.contains_key(&id) {
            self.buf.add(id, None);
        }
        Ok(())
    }

    /// Work between operations: age-based flushing, sealing a full buffer, host GC and
    /// host checkpoints.
    fn background(&mut self) -> Result<(), KvError> {
        if !self.cfg.persist || self.group.is_some() {
            return Ok(());
        }
        let now = self.clock.cpu;
        let age = self.cfg.max_dirty_age_ns;
        if self
            .fifo
            .front()
            .is_some_and(|&(_, since, _)| since.after(age) <= now)
        {
            let cut = SimTime(now.0.saturating_sub(age / 2));
            let old: Vec<u64> = self
                .fifo
                .iter()
                .take_while(|&&(_, since, _)| since <= cut)
                .map(|&(_, _, id)| id)
                .collect();
            for id in old {
                self.stage_dirty(id)?;
            }
            self.seal()?;
            self.acked();
        }
        if self.buf.len() + self.reserve() > self.buf.cap {
            self.seal()?;
        }
        if self.log.is_some() {
            self.host_maintenance()?;
        }
        Ok(())
    }

    fn host_maintenance(&mut self) -> Result<(), KvError> {
        let now = self.clock.cpu;
        if let Some(iv) = self.cfg.checkpoint_interval_ns
            && self.last_ckpt.after(iv) <= now
        {
            self.checkpoint()?;
        }
        let Some(log) = &self.log else {
            return Ok(());
        };
        if log.low_free() {
            self.io.gc_forced_checkpoints += 1;
            self.checkpoint()?;
        }
        let wanted = self.log.as_ref().is_some_and(BlockLog::gc_wanted);
        if wanted && self.buf.relocated.is_empty() {
            let dirty = &self.dirty;
            let is_dirty = |id: u64| dirty.contains_key(&id);
            let mut io = Io {
                dev: &mut self.dev,
                clock: &mut self.clock,
                stats: &mut self.io,
            };
            let at = io.clock.cpu;
            let Some(log) = self.log.as_mut() else {
                return Ok(());
            };
            self.activity = Activity::Gc;
            let got = log.collect(&mut io, &is_dirty, at)?;
            self.activity = Activity::Idle;
            if let Some((pages, ready)) = got {
                for (id, p) in pages {
                    if self.buf.contains(id) {
                        continue;
                    }
                    if self.buf.len() >= self.buf.cap {
                        self.seal()?;
                    }
                    self.buf.ready_at = self.buf.ready_at.max(ready);
                    self.buf.add(id, Some(p));
                    self.buf.relocated.insert(id, ());
                }
            }
        }
        Ok(())
    }

    /// Write a host checkpoint now (block interface; a no-op on the batch interface).
    pub fn checkpoint(&mut self) -> Result<(), KvError> {
        let mut io = Io {
            dev: &mut self.dev,
            clock: &mut self.clock,
            stats: &mut self.io,
        };
        let at = io.clock.cpu;
        if let Some(log) = self.log.as_mut() {
            let was = std::mem::replace(&mut self.activity, Activity::Checkpoint);
            log.checkpoint(&mut io, at)?;
            self.activity = was;
            self.last_ckpt = self.clock.cpu;
        }
        Ok(())
    }

    // ------------------------------------------------------------------ inspection

    /// Check the host log's bookkeeping and that every clean cached page equals what the
    /// device holds for it (block interface). For tests; reads through the device.
    pub fn check(&mut self) -> Result<(), String> {
        let Some(log) = &self.log else {
            return Ok(());
        };
        log.check()?;
        let clean: Vec<u64> = self
            .cache
            .index
            .keys()
            .copied()
            .filter(|id| !self.dirty.contains_key(id) && !self.buf.contains(*id))
            .collect();
        for id in clean {
            let mut t = self.clock.cpu;
            let (p, _) = self.read_page(id, &mut t).map_err(|e| e.to_string())?;
            let i = self.cache.index[&id];
            if p[HEADER_SKIP..] != self.cache.frames[i].data[HEADER_SKIP..] {
                return Err(format!(
                    "clean cached page {id} differs from the device's copy"
                ));
            }
        }
        Ok(())
    }

    /// Host log segments in all and free (block interface).
    pub fn host_log_segments(&self) -> Option<(u32, usize)> {
        self.log.as_ref().map(|l| (l.segments(), l.free_segments()))
    }

    /// Counters since the last [`Store::reset_stats`].
    pub fn stats(&self) -> StoreStats {
        StoreStats {
            io: self.io,
            cpu: self.clock.split,
            cache_hits: self.cache.hits,
            cache_misses: self.cache.misses,
            evictions: self.cache.evictions,
            queue_full_wait_ns: self.clock.queue_full_wait_ns,
            ..self.counts
        }
    }

    /// Start a new measurement window.
    pub fn reset_stats(&mut self) {
        self.io = IoStats::default();
        self.clock.split = CpuSplit::default();
        self.clock.queue_full_wait_ns = 0;
        self.cache.hits = 0;
        self.cache.misses = 0;
        self.cache.evictions = 0;
        self.counts = StoreStats::default();
    }

    /// The host thread's clock (modeled).
    pub fn now(&self) -> SimTime {
        self.clock.cpu
    }

    /// When every command issued so far has completed.
    pub fn drained(&self) -> SimTime {
        self.clock.drained()
    }

    /// Page ids the host log maps (block interface; `None` on batch).
    pub fn host_log_pages(&self) -> Option<u64> {
        self.log.as_ref().map(BlockLog::mapped_pages)
    }

    /// Pages in the tree (allocated page ids, the superpage included).
    pub fn pages(&self) -> u64 {
        self.sup.next_id
    }

    /// Tree height.
    pub fn height(&self) -> u8 {
        self.sup.height
    }

    /// Pages cached now.
    pub fn cached_pages(&self) -> usize {
        self.cache.frames.len()
    }

    /// Dirty pages now.
    pub fn dirty_pages(&self) -> usize {
        self.dirty.len()
    }

    /// Change the cache size (pages; `None` unbounded); shrinking evicts (writing dirty
    /// pages out).
    pub fn set_cache_pages(&mut self, pages: Option<usize>) -> Result<(), KvError> {
        self.cache.capacity = pages.unwrap_or(usize::MAX).max(self.reserve());
        self.make_room()?;
        self.seal()
    }

    /// Drop every cached page (after writing dirty ones): a cold cache.
    pub fn drop_cache(&mut self) -> Result<(), KvError> {
        if !self.cfg.persist {
            return Ok(());
        }
        self.sync()?;
        self.cache.clear();
        Ok(())
    }

    /// Change host GC and checkpoint options (block interface).
    pub fn set_host_log(&mut self, block: BlockOptions, checkpoint_interval_ns: Option<u64>) {
        self.cfg.block = block;
        self.cfg.checkpoint_interval_ns = checkpoint_interval_ns;
        if let Some(l) = self.log.as_mut() {
            l.set_options(block);
        }
        self.last_ckpt = self.clock.cpu;
    }

    /// Share of the host log in use (block interface).
    pub fn host_log_used(&self) -> Option<f64> {
        self.log.as_ref().map(BlockLog::used_share)
    }

    /// The device's SMART log, read through the command interface.
    pub fn smart(&mut self) -> Result<csd_device::SmartLog, KvError> {
        let at = self.clock.cpu;
        let c = self
            .dev
            .exec_at(Command::GetLogPage(csd_device::LogPage::Smart), at)?;
        match c.payload {
            Payload::Smart(s) => Ok(s),
            _ => Err(KvError::Corrupt("SMART log page missing".into())),
        }
    }

    /// Remove every key (FLUSHALL): a new empty tree whose pages reuse the ids from 1 on,
    /// and the old tree's pages given back to the storage.
    ///
    /// Order, for crash safety: every earlier change is made durable first; the new root
    /// and the superpage naming it go out in one sealed buffer (all-or-nothing: after a
    /// cut the store holds either the old tree or the empty one); only then are the old
    /// pages released: unmapped from the host log (block; they become garbage for host
    /// GC, and the log is checkpointed without them) or trimmed on the device (batch; its
    /// GC reclaims them). A cut between the two leaves old pages allocated until the next
    /// open (block: a roll-forward drops every id at or past the superpage's next id) or
    /// the next clear (batch). Returns the number of old pages released.
    pub fn clear(&mut self) -> Result<u64, KvError> {
        self.sync()?;
        self.cache.clear();
        let old_next = self.sup.next_id;
        let t = self.begin_op();
        self.modifying = true;
        let r: Result<(), KvError> = (|| {
            self.sup.next_id = 1;
            let id = self.alloc_id()?;
            let mut root = page::blank();
            page::init(&mut root, id, Kind::Leaf, 0);
            self.install(id, root, t)?;
            self.pin(id, -1);
            self.sup.root = id;
            self.sup.height = 1;
            self.fetch(0, &mut t.clone())?;
            let sup = self.sup;
            page::put_super(self.frame(0)?, &sup);
            self.lsn += 1;
            let lsn = self.lsn;
            for p in [id, 0] {
                self.mark_dirty(p, lsn, t);
                if self.cfg.persist {
                    self.buf.add(p, None);
                }
            }
            Ok(())
        })();
        self.modifying = false;
        r?;
        self.end_op(t)?;
        if !self.cfg.persist {
            return Ok(old_next.saturating_sub(2));
        }
        self.sync()?;
        let first = self.sup.next_id;
        let released = match &mut self.log {
            Some(log) => {
                let n = log.forget_from(first);
                self.checkpoint()?;
                n
            }
            None => {
                let n = old_next.saturating_sub(first);
                if n > 0 {
                    let mut io = Io {
                        dev: &mut self.dev,
                        clock: &mut self.clock,
                        stats: &mut self.io,
                    };
                    let at = io.clock.cpu;
                    io.submit(
                        Work::User,
                        Command::Trim {
                            lba: first,
                            blocks: n,
                        },
                        at,
                    )?;
                    self.clock.cpu = self.clock.drained();
                }
                n
            }
        };
        Ok(released)
    }

    /// Number of keys (walks every leaf).
    pub fn len(&mut self) -> Result<u64, KvError> {
        let mut n = 0u64;
        let mut t = self.clock.cpu;
        let mut id = self.sup.root;
        loop {
            self.fetch(id, &mut t)?;
            let p = self.frame(id)?;
            match page::kind(&p[..]) {
                Some(Kind::Inner) => id = page::child(&p[..], 0),
                _ => break,
            }
        }
        loop {
            self.fetch(id, &mut t)?;
            let p = self.frame(id)?;
            n += page::count(&p[..]) as u64;
            let next = page::next(&p[..]);
            if next == NO_PAGE {
                break;
            }
            id = next;
        }
        Ok(n)
    }

    /// Is the store empty?
    pub fn is_empty(&mut self) -> Result<bool, KvError> {
        Ok(self.len()? == 0)
    }
}
