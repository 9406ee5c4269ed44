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
//! DRAM), every node modified half a node of entries shifted (`FANOUT / 2` DRAM
//! accesses); all bus cycles × `cycle_clock_divisor` on the embedded cores, like every
//! firmware cost here. Every node modified is written through the FTL without waiting
//! for its program (write-back, as the host-side baseline's background writer does).
//! The node cache is an LRU of whole nodes, 16 MiB by default (the paper's
//! "predetermined space"), shared by all indexes.
//!
//! Choices: the firmware's node contents are its parsed copy of what it programmed
//! (the bytes written are [`PagedBtree::node_bytes`]); a region must lie inside the
//! device and not overlap another index's; indexes are query-time state of this
//! emulation and are not persisted across power cycles (the host rebuilds them).

use crate::block::{BlockDevice, CommandError};
use crate::btree::{FANOUT, LruSet, NODE_BYTES, PagedBtree, Touch};
use crate::flixr::IndexRead;
use csd_ftl::FtlError;
use csd_sim::SimTime;
use std::collections::BTreeMap;

/// Default node cache in device DRAM: 16 MiB.
pub const DEFAULT_NODE_CACHE_BYTES: u64 = 16 << 20;
/// Most in-SSD indexes at once.
pub const MAX_SSD_INDEXES: usize = 64;
/// Most pairs one create or update command carries.
pub const MAX_PAIRS_PER_COMMAND: usize = 1 << 20;

/// Counters of the in-SSD B+tree firmware.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SsdBtreeStats {
    /// Nodes visited.
    pub nodes_visited: u64,
    /// Node-cache misses (flash reads of nodes).
    pub node_reads: u64,
    /// Nodes programmed.
    pub node_writes: u64,
    /// Data pages read for hosts.
    pub pages_read: u64,
}

/// The in-SSD B+tree firmware state.
#[derive(Debug)]
pub struct SsdBtree {
    indexes: BTreeMap<u16, PagedBtree>,
    next: u16,
    cache: LruSet,
    cache_bytes: u64,
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
        SsdBtree {
            indexes: BTreeMap::new(),
            next: 1,
            cache: LruSet::new((cache_bytes / NODE_BYTES as u64) as usize),
            cache_bytes,
            stats: SsdBtreeStats::default(),
        }
    }

    /// Resize the node cache (it starts empty).
    pub fn set_cache_bytes(&mut self, bytes: u64) {
        self.cache = LruSet::new((bytes / NODE_BYTES as u64) as usize);
        self.cache_bytes = bytes;
    }

    /// The node cache size.
    pub fn cache_bytes(&self) -> u64 {
        self.cache_bytes
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
        touch: &Touch,
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        let isp = dev.ftl().nand().config().isp;
        let mut t = at;
        let mut buf = vec![0u8; NODE_BYTES];
        for &l in &touch.read {
            self.stats.nodes_visited += 1;
            if !self.cache.touch(l) {
                // A dependent read: the child's LBA is known once the parent is parsed.
                let r = dev.ftl_mut().read(l, &mut buf, t)?;
                t = dev.controller_mut().dram(r, NODE_BYTES as u64);
                self.stats.node_reads += 1;
                self.cache.insert(l);
            }
        }
        // Each comparison loads its key from DRAM (the cores have no data cache worth
        // counting); a modified node shifts half a node of entries in DRAM.
        let cycles = core_cycles(
            dev,
            touch.read.len() as f64 * isp.page_cycles
                + touch.compares as f64 * (isp.comp_cycles_per_record + isp.dram_access_cycles)
                + touch.written.len() as f64 * (FANOUT / 2) as f64 * isp.dram_access_cycles,
        );
        Ok(dev.controller_mut().cpu(t, cycles))
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
        for &l in &touch.written {
            if let Some(b) = tree.node_bytes(l) {
                t = dev.controller_mut().dram(t, NODE_BYTES as u64);
                // Written back: the firmware goes on once the node is handed to the FTL
                // (the program keeps its die busy; later flash work queues behind it).
                dev.ftl_mut().write(l, &b, t)?;
                self.stats.node_writes += 1;
                self.cache.insert(l);
            }
        }
        Ok(t)
    }

    /// `SsdIdxCreate`: a new index over `first..first + lbas` bulk-loaded from `pairs`;
    /// returns its id and when its nodes are programmed.
    pub fn create(
        &mut self,
        dev: &mut BlockDevice,
        first: u64,
        lbas: u64,
        pairs: Vec<(i64, u64)>,
        at: SimTime,
    ) -> Result<(u16, SimTime), CommandError> {
        let cap = dev.ftl().lbas();
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
        let n = pairs.len() as f64;
        let mut tree = PagedBtree::new(first, lbas).map_err(|e| refusal(e.to_string(), at))?;
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
        let mut t = dev.receive(at, 16 * (insert.len() + remove.len()) as u64 + 32);
        for touch in &touches {
            t = self
                .charge_visit(dev, touch, t)
                .map_err(|error| CommandError { error, done: t })?;
            t = self
                .program(dev, id, touch, t)
                .map_err(|error| CommandError { error, done: t })?;
        }
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
        let mut touch = Touch::default();
        let mut pages = tree.range(lo, hi, &mut touch);
        // Parameters fit the command; its link cost is charged with the reply.
        let t = at;
        let t = self
            .charge_visit(dev, &touch, t)
            .map_err(|error| CommandError { error, done: t })?;
        pages.sort_unstable();
        pages.dedup();
        let cap = dev.ftl().lbas();
        pages.retain(|&p| p >= from && p < cap);
        let mdts = dev.ftl().config().mdts_sectors as usize;
        let mut reply = IndexRead::default();
        if pages.len() > mdts {
            reply.resume_at = Some(pages[mdts]);
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
        let c = run(
            &mut d,
            q,
            Command::SsdIdxCreate {
                first: 100,
                lbas: 50,
                pairs,
            },
        );
        let Payload::SsdIndex(id) = c.payload else {
            panic!("{:?}", c.status)
        };
        assert!(c.acct.flash_programs > 0 || d.ssd_btree().stats().node_writes > 0);
        // Overlapping region, region past the end, unknown index: refused, nothing made.
        for bad in [
            Command::SsdIdxCreate {
                first: 120,
                lbas: 10,
                pairs: vec![],
            },
            Command::SsdIdxCreate {
                first: u64::MAX - 1,
                lbas: 10,
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
}
