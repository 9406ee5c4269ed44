//! The in-SSD B+tree of FLIXR's evaluation (flixr §5: "the SSD controllers traverse the
//! indices once a request arrives ... this scheme automatically accesses flash pages
//! where the indices are stored. Also, the SSD controller keeps hot B+-tree nodes into a
//! predetermined space inside the DRAM buffer in the SSD").
//!
//! The firmware keeps per-row indexes ([`PagedBtree`], the same tree the host-side
//! baseline uses) whose nodes live in an LBA region the host assigns. Three vendor
//! commands use it: `SsdIdxCreate` (bulk-load from the host's `(key, page)` pairs; the
//! firmware programs every node), `SsdIdxUpdate` (insert and remove pairs: the firmware
//! traverses, modifies and programs the nodes) and `SsdIdxRead` (traverse for
//! `lo..=hi`, read the data pages the entries name and send them, at most MDTS per
//! command, with the page to resume at).
//!
//! Costs, all modeled: a node not in the DRAM node cache is a flash read of its LBA
//! through the FTL, staged in DRAM; every node visited costs `isp.page_cycles`, every key
//! comparison `comp_cycles_per_record + dram_access_cycles` (the key is loaded from
//! DRAM), every node modified half a node of entries shifted (half its fan-out in DRAM
//! accesses); all bus cycles × `cycle_clock_divisor` on the embedded cores, like every
//! firmware cost here. Every node modified is written through the FTL without waiting
//! for its program (write-back, as the host-side baseline's background writer does).
//! The node cache ([`NodeCache`]) is an LRU of whole nodes, 16 MiB by default (the
//! paper's "predetermined space"), shared by all indexes; or exactly the trees' inner
//! levels ([`NodeCache::InnerLevels`]), which is what 16 MiB holds at the paper's scale
//! (see there) and what the host-side baseline's cache holds. Within one command, a
//! node read stays in DRAM for the rest of the command. The leaves a traversal needs
//! are named by inner nodes already parsed, so their flash reads are issued together
//! (the dies work on them in parallel); inner nodes are dependent reads, one level
//! after the other. A request whose pages exceed MDTS takes several `SsdIdxRead`
//! commands; the controller traverses the index once per request ("once a request
//! arrives", §5): its first command traverses and keeps the request's sorted page list in
//! DRAM, the command that continues it (same index and range, `from` at the reply's
//! resume point) sends the next pages without traversing again; a change to the index in
//! between, or any other read, ends the request.
//!
//! Choices: the firmware's node contents are its parsed copy of what it programmed
//! (the bytes written are [`PagedBtree::node_bytes`]); a node is the size the create
//! command names (0: one LBA, as the host's nodes are one table page), at the start of
//! its LBA, so an LRU of bytes holds fewer nodes when they are larger; a region must lie inside the
//! device and not overlap another index's; indexes are query-time state of this
//! emulation and are not persisted across power cycles (the host rebuilds them).

use crate::block::{BlockDevice, CommandError};
use crate::btree::{LruSet, NODE_BYTES, PagedBtree, Touch, runs};
use crate::flixr::IndexRead;
use csd_ftl::FtlError;
use csd_sim::SimTime;
use std::collections::{BTreeMap, HashSet};

/// Default node cache in device DRAM: 16 MiB.
pub const DEFAULT_NODE_CACHE_BYTES: u64 = 16 << 20;

/// What the in-SSD B+tree keeps of its nodes in controller DRAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeCache {
    /// An LRU of whole nodes of this many bytes, shared by all indexes.
    Bytes(u64),
    /// Exactly the trees' inner nodes, whichever they are as the trees change; every
    /// leaf a command needs is read from flash. At the paper's scale (TPC-H SF 10:
    /// 60M LINEITEM rows) LINEITEM's per-row index alone has, at a bulk load's 70% fill,
    /// about 126K leaves (2 GB) and 265 inner nodes (4.1 MiB) of 16 KiB (fan-out 682),
    /// or 504K leaves (2 GB) and 4,300 inner nodes (17 MiB) of 4 KiB
    /// ([`crate::btree::FANOUT`]): the 16 MiB "predetermined space" holds about its
    /// inner levels and no share of its leaves worth counting (under 1%).
    /// This keeps that split at any scale (at SF 0.01 the 16 MiB holds every node, so
    /// the tree would never read flash); it is also the host-side baseline's cache.
    InnerLevels,
}

impl std::fmt::Display for NodeCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeCache::Bytes(b) if b % (1 << 20) == 0 => write!(f, "{} MiB", b >> 20),
            NodeCache::Bytes(b) => write!(f, "{} KiB", b >> 10),
            NodeCache::InnerLevels => f.write_str("the trees' inner levels"),
        }
    }
}
/// Most in-SSD indexes at once.
pub const MAX_SSD_INDEXES: usize = 64;
/// Most pairs one create or update command carries.
pub const MAX_PAIRS_PER_COMMAND: usize = 1 << 20;

/// Counters of the in-SSD B+tree firmware.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SsdBtreeStats {
    /// Nodes visited.
    pub nodes_visited: u64,
    /// Node-cache misses (nodes read from flash).
    pub node_reads: u64,
    /// Flash array reads those node reads took (consecutive nodes of one flash page
    /// share one; the MAP reads they caused are not counted).
    pub node_flash_reads: u64,
    /// `SsdIdxRead` commands that continued a request's traversal (no new traversal).
    pub continued_reads: u64,
    /// Nodes programmed.
    pub node_writes: u64,
    /// Data pages read for hosts.
    pub pages_read: u64,
}

/// An `SsdIdxRead` request whose pages exceed one command.
#[derive(Debug)]
struct Request {
    /// Index, and the key range `lo..=hi`.
    index: u16,
    lo: i64,
    hi: i64,
    /// The page the next command starts at (the last reply's resume point).
    resume_at: u64,
    /// Every page the request names, sorted.
    pages: Vec<u64>,
}

/// The in-SSD B+tree firmware state.
#[derive(Debug)]
pub struct SsdBtree {
    indexes: BTreeMap<u16, PagedBtree>,
    next: u16,
    cache: LruSet,
    mode: NodeCache,
    /// Nodes read by the command being executed (in DRAM until it ends).
    staged: HashSet<u64>,
    /// The last `SsdIdxRead` request with more to send, kept in DRAM until its next
    /// command (or a change to its index).
    request: Option<Request>,
    stats: SsdBtreeStats,
}

fn refusal(msg: String, at: SimTime) -> CommandError {
    CommandError {
        error: FtlError::Config(msg),
        done: at,
    }
}

fn core_cycles(dev: &BlockDevice, bus_cycles: f64) -> u64 {
    let isp = dev.ftl().nand().config().isp;
    (bus_cycles * isp.cycle_clock_divisor).round() as u64
}

impl Default for SsdBtree {
    fn default() -> Self {
        SsdBtree::new(DEFAULT_NODE_CACHE_BYTES)
    }
}

impl SsdBtree {
    /// No indexes, a node cache of `cache_bytes`.
    pub fn new(cache_bytes: u64) -> SsdBtree {
        let mut b = SsdBtree {
            indexes: BTreeMap::new(),
            next: 1,
            cache: LruSet::new(0),
            mode: NodeCache::Bytes(cache_bytes),
            staged: HashSet::new(),
            request: None,
            stats: SsdBtreeStats::default(),
        };
        b.set_cache(NodeCache::Bytes(cache_bytes));
        b
    }

    /// Resize the node cache to an LRU of `bytes` (it starts empty).
    pub fn set_cache_bytes(&mut self, bytes: u64) {
        self.set_cache(NodeCache::Bytes(bytes));
    }

    /// Set what the node cache holds (an LRU starts empty).
    pub fn set_cache(&mut self, mode: NodeCache) {
        self.cache = LruSet::new(self.cached_nodes(mode));
        self.mode = mode;
    }

    /// Nodes an LRU of `mode`'s bytes holds: of the largest node of any index (4 KiB
    /// without one).
    fn cached_nodes(&self, mode: NodeCache) -> usize {
        let node = self
            .indexes
            .values()
            .map(PagedBtree::node_size)
            .max()
            .unwrap_or(NODE_BYTES);
        match mode {
            NodeCache::Bytes(b) => (b / node as u64) as usize,
            NodeCache::InnerLevels => 0,
        }
    }

    /// What the node cache holds.
    pub fn cache(&self) -> NodeCache {
        self.mode
    }

    /// Whether node `l` is in DRAM: staged by this command, or cached.
    fn cached(&mut self, l: u64) -> bool {
        if self.staged.contains(&l) {
            return true;
        }
        match self.mode {
            NodeCache::Bytes(_) => self.cache.touch(l),
            NodeCache::InnerLevels => self.indexes.values().any(|t| t.is_leaf(l) == Some(false)),
        }
    }

    /// Whether node `l` is a leaf of some index (a freed node counts as one).
    fn is_leaf(&self, l: u64) -> bool {
        !self.indexes.values().any(|t| t.is_leaf(l) == Some(false))
    }

    /// Counters.
    pub fn stats(&self) -> SsdBtreeStats {
        self.stats
    }

    /// The tree of index `id` (inspection).
    pub fn index(&self, id: u16) -> Option<&PagedBtree> {
        self.indexes.get(&id)
    }

    /// Charge the nodes `touch` visited and read (misses), from `at`; returns the end.
    fn charge_visit(
        &mut self,
        dev: &mut BlockDevice,
        id: u16,
        touch: &Touch,
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        let isp = dev.ftl().nand().config().isp;
        let (node, fanout) = self
            .indexes
            .get(&id)
            .map_or((NODE_BYTES, crate::btree::FANOUT), |t| {
                (t.node_size(), t.fanout())
            });
        let mut t = at;
        // A node takes an LBA, at its start (a node smaller than the LBA leaves the rest
        // unused).
        let slot = dev.ftl().lba_size();
        let mut buf = vec![0u8; slot];
        let mut leaves = Vec::new();
        for &l in &touch.read {
            self.stats.nodes_visited += 1;
            if self.cached(l) {
                continue;
            }
            self.stats.node_reads += 1;
            self.staged.insert(l);
            self.cache.insert(l);
            if self.is_leaf(l) {
                leaves.push(l);
                continue;
            }
            // A dependent read: the child's LBA is known once the parent is parsed.
            let r = self.read_nodes(dev, l, &mut buf, t)?;
            t = dev.controller_mut().dram(r, node as u64);
        }
        // The missing leaves, named by parents already in DRAM: issued together, runs of
        // consecutive LBAs as one read (their sectors of one flash page share its array
        // read), as the host-side baseline reads them.
        leaves.sort_unstable();
        leaves.dedup();
        let issued = t;
        for (first, n) in runs(&leaves, u64::MAX) {
            let bytes = n as usize * slot;
            buf.resize(bytes, 0);
            let r = self.read_nodes(dev, first, &mut buf, issued)?;
            t = t.max(dev.controller_mut().dram(r, bytes as u64));
        }
        // Each comparison loads its key from DRAM (the cores have no data cache worth
        // counting); a modified node shifts half a node of entries in DRAM.
        let cycles = core_cycles(
            dev,
            touch.read.len() as f64 * isp.page_cycles
                + touch.compares as f64 * (isp.comp_cycles_per_record + isp.dram_access_cycles)
                + touch.written.len() as f64 * (fanout / 2) as f64 * isp.dram_access_cycles,
        );
        Ok(dev.controller_mut().cpu(t, cycles))
    }

    /// Read the nodes from `lba` on into `buf` (one LBA each) through the FTL, counting
    /// the flash array reads they take.
    fn read_nodes(
        &mut self,
        dev: &mut BlockDevice,
        lba: u64,
        buf: &mut [u8],
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        let reads0 = dev.ftl().nand().stats().page_reads;
        let meta0 = dev.ftl().stats().meta_reads;
        let done = dev.ftl_mut().read(lba, buf, at)?;
        let reads = dev.ftl().nand().stats().page_reads - reads0;
        let meta = dev.ftl().stats().meta_reads - meta0;
        self.stats.node_flash_reads += reads.saturating_sub(meta);
        Ok(done)
    }

    /// Program the nodes `touch` wrote (in `tree`), from `at`; returns the end.
    fn program(
        &mut self,
        dev: &mut BlockDevice,
        id: u16,
        touch: &Touch,
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        let mut t = at;
        for &l in &touch.freed {
            self.cache.remove(l);
        }
        let Some(tree) = self.indexes.get(&id) else {
            return Ok(t);
        };
        let slot = dev.ftl().lba_size();
        for &l in &touch.written {
            if let Some(mut b) = tree.node_bytes(l) {
                t = dev.controller_mut().dram(t, tree.node_size() as u64);
                // Written back: the firmware goes on once the node is handed to the FTL
                // (the program keeps its die busy; later flash work queues behind it). A
                // node fills the start of its LBA.
                b.resize(slot.max(b.len()), 0);
                dev.ftl_mut().write(l, &b, t)?;
                self.stats.node_writes += 1;
                self.cache.insert(l);
            }
        }
        Ok(t)
    }

    /// `SsdIdxCreate`: a new index of `node_bytes` nodes (0: one LBA) over `first..first
    /// + lbas` bulk-loaded from `pairs`; returns its id and when its nodes are programmed.
    pub fn create(
        &mut self,
        dev: &mut BlockDevice,
        (first, lbas): (u64, u64),
        node_bytes: u32,
        pairs: Vec<(i64, u64)>,
        at: SimTime,
    ) -> Result<(u16, SimTime), CommandError> {
        let cap = dev.ftl().lbas();
        let slot = dev.ftl().lba_size();
        let node = match node_bytes as usize {
            0 => slot,
            n => n,
        };
        if node > slot {
            return Err(refusal(
                format!(
                    "SsdIdxCreate nodes of {node} bytes do not fit the device's {slot}-byte LBAs"
                ),
                at,
            ));
        }
        if lbas == 0 || first.checked_add(lbas).is_none_or(|e| e > cap) {
            return Err(refusal(
                format!("SsdIdxCreate region {first}+{lbas} is not inside the device's {cap} LBAs"),
                at,
            ));
        }
        if let Some((id, t)) = self.indexes.iter().find(|(_, t)| {
            let (f, n) = t.region();
            first < f + n && f < first + lbas
        }) {
            let (f, n) = t.region();
            return Err(refusal(
                format!("SsdIdxCreate region {first}+{lbas} overlaps index {id} at {f}+{n}"),
                at,
            ));
        }
        if self.indexes.len() >= MAX_SSD_INDEXES || pairs.len() > MAX_PAIRS_PER_COMMAND {
            return Err(refusal(
                format!(
                    "at most {MAX_SSD_INDEXES} in-SSD indexes and {MAX_PAIRS_PER_COMMAND} pairs per command"
                ),
                at,
            ));
        }
        let mut tree = PagedBtree::with_node_bytes(first, lbas, node)
            .map_err(|e| refusal(e.to_string(), at))?;
        self.staged.clear();
        self.request = None;
        let n = pairs.len() as f64;
        let mut touch = Touch::default();
        tree.bulk_load(pairs, 0.7, &mut touch)
            .map_err(|e| refusal(e.to_string(), at))?;
        let t = dev.receive(at, 16 * n as u64 + 64);
        // Sorting the pairs: n log n comparisons.
        let isp = dev.ftl().nand().config().isp;
        let cycles = core_cycles(
            dev,
            n * (n.max(2.0)).log2() * isp.comp_cycles_per_record
                + touch.written.len() as f64 * isp.page_cycles,
        );
        let t = dev.controller_mut().cpu(t, cycles);
        let id = self.next;
        self.next = self.next.wrapping_add(1).max(1);
        self.indexes.insert(id, tree);
        // A larger node leaves room for fewer in the same bytes.
        let fits = self.cached_nodes(self.mode);
        self.cache.set_cap(fits);
        let t = self
            .program(dev, id, &touch, t)
            .map_err(|error| CommandError { error, done: t })?;
        Ok((id, dev.respond(t, 16)))
    }

    /// `SsdIdxUpdate`: remove `remove` then insert `insert` into index `id`.
    pub fn update(
        &mut self,
        dev: &mut BlockDevice,
        id: u16,
        insert: &[(i64, u64)],
        remove: &[(i64, u64)],
        at: SimTime,
    ) -> Result<SimTime, CommandError> {
        if !self.indexes.contains_key(&id) {
            return Err(refusal(format!("no in-SSD index {id}"), at));
        }
        if insert.len() + remove.len() > MAX_PAIRS_PER_COMMAND {
            return Err(refusal(
                format!("at most {MAX_PAIRS_PER_COMMAND} pairs per command"),
                at,
            ));
        }
        // Apply every change first (the firmware's parsed copy), so that a region that
        // fills up refuses the whole command: the changes made are undone and nothing
        // is charged or programmed.
        let mut touches = Vec::with_capacity(insert.len() + remove.len());
        let mut removed = Vec::new();
        let mut failed = None;
        {
            let tree = self.indexes.get_mut(&id).expect("checked above");
            for &(k, v) in remove {
                let mut t = Touch::default();
                if tree.remove(k, v, &mut t) {
                    removed.push((k, v));
                }
                touches.push(t);
            }
            for (n, &(k, v)) in insert.iter().enumerate() {
                let mut t = Touch::default();
                if let Err(e) = tree.insert(k, v, &mut t) {
                    failed = Some((n, e));
                    break;
                }
                touches.push(t);
            }
            if let Some((n, e)) = failed {
                let mut scratch = Touch::default();
                for &(k, v) in insert[..n].iter().rev() {
                    tree.remove(k, v, &mut scratch);
                }
                for &(k, v) in removed.iter().rev() {
                    // Removals only freed room: putting the pairs back fits.
                    let _ = tree.insert(k, v, &mut scratch);
                }
                return Err(refusal(format!("in-SSD index {id}: {e}"), at));
            }
        }
        self.staged.clear();
        if self.request.as_ref().is_some_and(|r| r.index == id) {
            self.request = None;
        }
        let mut t = dev.receive(at, 16 * (insert.len() + remove.len()) as u64 + 32);
        // Every change is applied to the parsed copy in DRAM, then each node the command
        // changed is programmed once (as the host-side baseline writes each node a
        // statement changed once): a leaf that takes several of the command's pairs is
        // one program, not one per pair.
        // The union, in first-written order; a node freed by the end has no bytes and
        // `program` skips it.
        let mut changed = Touch::default();
        let (mut written, mut freed) = (HashSet::new(), HashSet::new());
        for touch in &touches {
            t = self
                .charge_visit(dev, id, touch, t)
                .map_err(|error| CommandError { error, done: t })?;
            changed
                .written
                .extend(touch.written.iter().filter(|&&l| written.insert(l)));
            changed
                .freed
                .extend(touch.freed.iter().filter(|&&l| freed.insert(l)));
        }
        let t = self
            .program(dev, id, &changed, t)
            .map_err(|error| CommandError { error, done: t })?;
        Ok(dev.respond(t, 16))
    }

    /// `SsdIdxRead`: the data pages `>= from` that entries with `lo <= key <= hi` of
    /// index `id` name, at most MDTS of them, read and sent with the page to resume at.
    pub fn read(
        &mut self,
        dev: &mut BlockDevice,
        id: u16,
        lo: i64,
        hi: i64,
        from: u64,
        at: SimTime,
    ) -> Result<(IndexRead, SimTime), CommandError> {
        let Some(tree) = self.indexes.get(&id) else {
            return Err(refusal(format!("no in-SSD index {id}"), at));
        };
        // Parameters fit the command; its link cost is charged with the reply.
        let mut t = at;
        let continued = self
            .request
            .as_ref()
            .is_some_and(|r| (r.index, r.lo, r.hi, r.resume_at) == (id, lo, hi, from));
        let all = if continued {
            // The rest of a request whose first command traversed the tree (flixr §5:
            // the controller traverses the index "once a request arrives"); its pages
            // are still in DRAM.
            self.stats.continued_reads += 1;
            self.request.take().expect("checked above").pages
        } else {
            let mut touch = Touch::default();
            let mut pages = tree.range(lo, hi, &mut touch);
            self.staged.clear();
            t = self
                .charge_visit(dev, id, &touch, t)
                .map_err(|error| CommandError { error, done: t })?;
            pages.sort_unstable();
            pages.dedup();
            pages
        };
        let cap = dev.ftl().lbas();
        let mut pages: Vec<u64> = all
            .iter()
            .copied()
            .filter(|&p| p >= from && p < cap)
            .collect();
        let mdts = dev.ftl().config().mdts_sectors as usize;
        let mut reply = IndexRead::default();
        self.request = None;
        if pages.len() > mdts {
            reply.resume_at = Some(pages[mdts]);
            self.request = Some(Request {
                index: id,
                lo,
                hi,
                resume_at: pages[mdts],
                pages: all,
            });
            pages.truncate(mdts);
        }
        self.stats.pages_read += pages.len() as u64;
        let done = if pages.is_empty() {
            dev.reply(t, 16)
        } else {
            reply.data = vec![0u8; pages.len() * dev.ftl().lba_size()];
            dev.read_for_host(&pages, &mut reply.data, 16, t)?
        };
        reply.lbas = pages;
        Ok((reply, done))
    }
}

#[cfg(test)]
mod tests {
    use crate::{Command, NvmeDevice, Payload, Status};
    use csd_ftl::{Ftl, FtlConfig};
    use csd_nand::Nand;
    use csd_sim::{DeviceConfig, SimTime};

    fn dev() -> (NvmeDevice, crate::QueueId) {
        let nand = Nand::new_in_memory(DeviceConfig::preset("tiny").unwrap()).unwrap();
        let mut d = NvmeDevice::new(Ftl::format(nand, FtlConfig::default()).unwrap());
        let q = d.create_queue_pair(16).unwrap();
        (d, q)
    }

    fn run(d: &mut NvmeDevice, q: crate::QueueId, c: Command) -> crate::Completion {
        d.submit(q, c, SimTime::ZERO).unwrap();
        d.process();
        d.poll(q).unwrap()
    }

    /// `SsdIdxCreate` over `first..first + lbas` from `pairs`, which must succeed: the
    /// index id and the completion.
    fn create(
        d: &mut NvmeDevice,
        q: crate::QueueId,
        first: u64,
        lbas: u64,
        pairs: Vec<(i64, u64)>,
    ) -> (u16, crate::Completion) {
        let c = run(
            d,
            q,
            Command::SsdIdxCreate {
                first,
                lbas,
                node_bytes: 0,
                pairs,
            },
        );
        let Payload::SsdIndex(id) = c.payload else {
            panic!("{:?}", c.status)
        };
        (id, c)
    }

    #[test]
    fn create_update_read_and_bad_input() {
        let (mut d, q) = dev();
        // Data pages 0..40 each holding its number.
        for p in 0..40u64 {
            let mut b = vec![0u8; 4096];
            b[..8].copy_from_slice(&p.to_le_bytes());
            assert!(
                run(&mut d, q, Command::Write { lba: p, data: b })
                    .status
                    .is_success()
            );
        }
        let pairs: Vec<(i64, u64)> = (0..400).map(|k| (k, (k / 10) as u64)).collect();
        let (id, c) = create(&mut d, q, 100, 50, pairs);
        assert!(c.acct.flash_programs > 0 || d.ssd_btree().stats().node_writes > 0);
        // Overlapping region, region past the end, nodes larger than an LBA or not a
        // node size, unknown index: refused, nothing made.
        let made = d.ssd_btree().stats();
        for bad in [
            Command::SsdIdxCreate {
                first: 300,
                lbas: 10,
                node_bytes: 8192,
                pairs: vec![(1, 1)],
            },
            Command::SsdIdxCreate {
                first: 300,
                lbas: 10,
                node_bytes: 100,
                pairs: vec![(1, 1)],
            },
            Command::SsdIdxCreate {
                first: 120,
                lbas: 10,
                node_bytes: 0,
                pairs: vec![],
            },
            Command::SsdIdxCreate {
                first: u64::MAX - 1,
                lbas: 10,
                node_bytes: 0,
                pairs: vec![],
            },
            Command::SsdIdxUpdate {
                index: 99,
                insert: vec![(1, 1)],
                remove: vec![],
            },
            Command::SsdIdxRead {
                index: id,
                lo: 5,
                hi: 1,
                from: 0,
            },
        ] {
            let c = run(&mut d, q, bad);
            assert!(
                matches!(c.status, Status::InvalidField(_)),
                "{:?}",
                c.status
            );
        }
        assert_eq!(d.ssd_btree().stats(), made);
        assert!(d.ssd_btree().index(id + 1).is_none());
        let c = run(
            &mut d,
            q,
            Command::SsdIdxUpdate {
                index: id,
                insert: vec![(1000, 39)],
                remove: vec![(15, 1), (16, 1)],
            },
        );
        assert!(c.status.is_success());
        let c = run(
            &mut d,
            q,
            Command::SsdIdxRead {
                index: id,
                lo: 10,
                hi: 25,
                from: 0,
            },
        );
        let Payload::IndexRead(r) = c.payload else {
            panic!()
        };
        assert_eq!(r.lbas, vec![1, 2]);
        assert_eq!(
            u64::from_le_bytes(r.data[4096..4104].try_into().unwrap()),
            2
        );
        let c = run(
            &mut d,
            q,
            Command::SsdIdxRead {
                index: id,
                lo: 1000,
                hi: 1000,
                from: 0,
            },
        );
        let Payload::IndexRead(r) = c.payload else {
            panic!()
        };
        assert_eq!(r.lbas, vec![39]);
        // A region too small for the inserts refuses the whole update.
        let c = run(
            &mut d,
            q,
            Command::SsdIdxCreate {
                first: 200,
                lbas: 1,
                node_bytes: 0,
                pairs: (0..10).map(|k| (k, 0)).collect(),
            },
        );
        let Payload::SsdIndex(small) = c.payload else {
            panic!()
        };
        let before = d.ssd_btree().index(small).unwrap().entries();
        let c = run(
            &mut d,
            q,
            Command::SsdIdxUpdate {
                index: small,
                insert: (100..400).map(|k| (k, 0)).collect(),
                remove: vec![(3, 0)],
            },
        );
        assert!(matches!(c.status, Status::InvalidField(_)));
        assert_eq!(d.ssd_btree().index(small).unwrap().entries(), before);
    }

    /// A two-level index of `n` pairs (keys `0..n`, page `k / 170`) on a fresh device.
    fn indexed(n: i64, cache: super::NodeCache) -> (NvmeDevice, crate::QueueId, u16) {
        // Write-back, as FLIXR's evaluation runs it: the nodes, written in LBA order, fill
        // flash pages two LBAs at a time.
        let nand = Nand::new_in_memory(DeviceConfig::preset("tiny").unwrap()).unwrap();
        let cfg = FtlConfig {
            write_cache: csd_ftl::WriteCache::WriteBack,
            ..FtlConfig::default()
        };
        let mut d = NvmeDevice::new(Ftl::format(nand, cfg).unwrap());
        let q = d.create_queue_pair(16).unwrap();
        d.set_node_cache(cache);
        let pairs = (0..n).map(|k| (k, (k / 170) as u64)).collect();
        let (id, _) = create(&mut d, q, 1000, 200, pairs);
        (d, q, id)
    }

    /// Insert `(k, 7)` into index `id` with one `SsdIdxUpdate`, which must succeed.
    fn insert_one(d: &mut NvmeDevice, q: crate::QueueId, id: u16, k: i64) {
        let c = run(
            d,
            q,
            Command::SsdIdxUpdate {
                index: id,
                insert: vec![(k, 7)],
                remove: vec![],
            },
        );
        assert!(c.status.is_success(), "{:?}", c.status);
    }

    #[test]
    fn an_update_programs_each_node_it_changed_once() {
        use super::NodeCache;
        let (mut d, q, id) = indexed(10_000, NodeCache::InnerLevels);
        // Ten pairs of one key: one leaf changed, one program, whatever the pair count.
        let before = d.ssd_btree().stats();
        let c = run(
            &mut d,
            q,
            Command::SsdIdxUpdate {
                index: id,
                insert: (0..10).map(|i| (5_000, 100 + i)).collect(),
                remove: vec![],
            },
        );
        assert!(c.status.is_success(), "{:?}", c.status);
        let after = d.ssd_btree().stats();
        assert_eq!(after.node_writes - before.node_writes, 1);
        // Pairs spread over every leaf: each leaf written once (no split at 70% fill
        // with one more pair each).
        let tree = d.ssd_btree().index(id).unwrap();
        let leaves = (tree.nodes() - tree.inner_node_lbas().len()) as u64;
        let before = d.ssd_btree().stats();
        let c = run(
            &mut d,
            q,
            Command::SsdIdxUpdate {
                index: id,
                insert: (0..10_000).step_by(50).map(|k| (k, 9)).collect(),
                remove: vec![],
            },
        );
        assert!(c.status.is_success(), "{:?}", c.status);
        let written = d.ssd_btree().stats().node_writes - before.node_writes;
        assert!(written <= leaves, "{written} programs for {leaves} leaves");
        assert!(
            written >= leaves / 2,
            "{written} programs for {leaves} leaves"
        );
    }

    #[test]
    fn inner_levels_cache_reads_every_leaf_and_no_inner_node() {
        use super::NodeCache;
        // 10,000 pairs at 70% fill: about 84 leaves under one root.
        let (mut d, q, id) = indexed(10_000, NodeCache::InnerLevels);
        let tree = d.ssd_btree().index(id).unwrap();
        assert_eq!(tree.height(), 2);
        let leaves = (tree.nodes() - tree.inner_node_lbas().len()) as u64;
        // A point update: the leaf comes from flash, the root never does.
        let before = d.ssd_btree().stats();
        insert_one(&mut d, q, id, 5_000);
        let after = d.ssd_btree().stats();
        assert_eq!(after.nodes_visited - before.nodes_visited, 2);
        assert_eq!(after.node_reads - before.node_reads, 1);
        // The same update again: the leaf is read again (leaves are never kept).
        insert_one(&mut d, q, id, 5_001);
        assert_eq!(d.ssd_btree().stats().node_reads - after.node_reads, 1);
        // A range over every leaf: each read once, runs of consecutive leaves as one
        // read, so two leaves of one flash page (8 KiB on `tiny`) share its array read.
        let before = d.ssd_btree().stats();
        let c = run(
            &mut d,
            q,
            Command::SsdIdxRead {
                index: id,
                lo: 0,
                hi: 10_000,
                from: u64::MAX - 1,
            },
        );
        assert!(c.status.is_success(), "{:?}", c.status);
        let reads = d.ssd_btree().stats().node_reads - before.node_reads;
        assert!(
            (leaves..=leaves + 1).contains(&reads),
            "{reads} node reads of {leaves} leaves"
        );
        assert!(
            c.acct.flash_reads <= leaves.div_ceil(2) + 2,
            "{} flash reads for {leaves} leaves",
            c.acct.flash_reads
        );
    }

    #[test]
    fn an_lru_node_cache_keeps_what_it_read() {
        use super::NodeCache;
        let (mut d, q, id) = indexed(10_000, NodeCache::Bytes(16 << 20));
        // Creating the index programmed every node and cached it: nothing is read.
        let before = d.ssd_btree().stats();
        for k in [5_000, 5_001, 12_000] {
            insert_one(&mut d, q, id, k);
        }
        assert_eq!(d.ssd_btree().stats().node_reads, before.node_reads);
        // No cache at all: root and leaf come from flash on every update.
        d.set_node_cache(NodeCache::Bytes(0));
        insert_one(&mut d, q, id, 5_002);
        assert_eq!(d.ssd_btree().stats().node_reads - before.node_reads, 2);
        assert_eq!(d.ssd_btree().cache(), NodeCache::Bytes(0));
    }

    #[test]
    fn a_request_over_many_pages_traverses_once() {
        use super::NodeCache;
        let (mut d, q) = dev();
        d.set_node_cache(NodeCache::InnerLevels);
        // 10,000 keys over 200 data pages: more than one command of MDTS (128) pages.
        let pairs = (0..10_000i64).map(|k| (k, (k / 50) as u64)).collect();
        let (id, _) = create(&mut d, q, 1000, 200, pairs);
        let read = |d: &mut NvmeDevice, from: u64| {
            let c = run(
                d,
                q,
                Command::SsdIdxRead {
                    index: id,
                    lo: 0,
                    hi: 9_999,
                    from,
                },
            );
            let Payload::IndexRead(r) = c.payload else {
                panic!("{:?}", c.status)
            };
            r
        };
        let s0 = d.ssd_btree().stats();
        let first = read(&mut d, 0);
        let s1 = d.ssd_btree().stats();
        assert_eq!(first.lbas.len(), 128);
        let resume = first.resume_at.expect("more pages");
        assert!(s1.node_reads > s0.node_reads);
        assert!(s1.node_flash_reads > s0.node_flash_reads);
        // The rest of the request: no traversal, no node read, every page once.
        let rest = read(&mut d, resume);
        let s2 = d.ssd_btree().stats();
        assert_eq!(rest.resume_at, None);
        assert_eq!(s2.node_reads, s1.node_reads);
        assert_eq!(s2.nodes_visited, s1.nodes_visited);
        assert_eq!(s2.continued_reads, s1.continued_reads + 1);
        let mut all = first.lbas.clone();
        all.extend(&rest.lbas);
        assert_eq!(all, (0..200).collect::<Vec<u64>>());
        // The request ended: the same range again traverses again.
        let again = read(&mut d, resume);
        assert_eq!(again.lbas, rest.lbas);
        assert!(d.ssd_btree().stats().nodes_visited > s2.nodes_visited);
        // A change to the index between a request's commands makes the next one
        // traverse (it sees the change).
        let first = read(&mut d, 0);
        let c = run(
            &mut d,
            q,
            Command::SsdIdxUpdate {
                index: id,
                insert: vec![(5_000, 150)],
                remove: vec![(9_999, 199)],
            },
        );
        assert!(c.status.is_success());
        let s3 = d.ssd_btree().stats();
        let rest = read(&mut d, first.resume_at.expect("more pages"));
        assert_eq!(d.ssd_btree().stats().continued_reads, s3.continued_reads);
        assert!(d.ssd_btree().stats().nodes_visited > s3.nodes_visited);
        assert_eq!(*rest.lbas.last().expect("pages"), 199);
    }
}
