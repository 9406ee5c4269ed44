//! Index maintenance (flixr §5's baselines and FLIXR-HS): bulk-loading the host
//! B+trees and the in-SSD tree, FLIXR-HS's tiny host tree learnt through
//! UPDATE_HOST_INDEX, writing and reading B+tree nodes (the background node writer, the
//! host node cache), per-row index updates on modification, and the checks tests use.
//!
//! Choices made here: changed nodes are written in the background (the host does not
//! wait for them); a node read is a dependent Read; the in-SSD tree is driven through
//! `SsdIdxCreate/Update` and its node traffic is the firmware's.

use super::*;
use csd_device::ssd_btree::MAX_PAIRS_PER_COMMAND;

/// A `(key, page)` entry of a per-row B+tree.
type Pair = (i64, u64);

impl RowStore {
    pub(super) fn index_bulk(
        &mut self,
        t: TableId,
        pairs: Vec<(i64, u64)>,
        pages: u64,
    ) -> Result<(), StoreError> {
        match self.kind {
            IndexKind::HostBtree | IndexKind::HostBtreeIdeal => {
                let mut touch = Touch::default();
                let tree = self.tables[t.0]
                    .tree
                    .as_mut()
                    .ok_or_else(|| StoreError::Invalid("no tree".into()))?;
                tree.bulk_load(pairs, 0.7, &mut touch)?;
                let n = touch.written.len() as f64;
                self.host_cpu(n * self.opts.host_node_cycles);
                self.write_nodes(t, &touch)?;
            }
            IndexKind::SsdBtree => self.ssd_create(t, pairs)?,
            IndexKind::FlixrHS => {
                let first = self.tables[t.0].first;
                // The host loaded the rows: it knows every page's key range.
                let mut ranges: BTreeMap<u64, (i64, i64)> = BTreeMap::new();
                for &(k, p) in &pairs {
                    let r = ranges.entry(p).or_insert((k, k));
                    *r = (r.0.min(k), r.1.max(k));
                }
                let mut by_min: Vec<(i64, u64, i64)> =
                    ranges.iter().map(|(&p, &(a, b))| (a, p, b)).collect();
                by_min.sort_unstable();
                let hs = &mut self.tables[t.0].hs;
                hs.clustered = by_min.windows(2).all(|w| w[0].2 <= w[1].0);
                hs.top = by_min.iter().map(|r| r.2).max();
                for p in 0..pages {
                    self.learn_page(t, first + p)?;
                }
            }
            IndexKind::NoIndex | IndexKind::FlixrS => {}
        }
        Ok(())
    }

    /// SsdIdxCreate over `t`'s node region from `pairs`. A command carries at most
    /// [`Self::ssd_chunk`] pairs: a larger table's pairs are sorted, the lowest
    /// bulk-loaded by the create and the rest added in key order by SsdIdxUpdates of that
    /// many pairs each (what a host driver does with a bounded command payload).
    pub(super) fn ssd_create(
        &mut self,
        t: TableId,
        mut pairs: Vec<(i64, u64)>,
    ) -> Result<(), StoreError> {
        let (first, lbas) = self.tables[t.0].tree_region;
        if self.tables[t.0].ssd.is_some() {
            return Err(StoreError::Invalid(
                "the table's in-SSD index exists already".into(),
            ));
        }
        let chunk = self.ssd_chunk();
        let rest = if pairs.len() > chunk {
            pairs.sort_unstable();
            pairs.split_off(chunk)
        } else {
            Vec::new()
        };
        let (c, meta) = self.sync(Command::SsdIdxCreate {
            first,
            lbas,
            node_bytes: self.node as u32,
            pairs,
        })?;
        self.traffic.index_pages_written += c.acct.flash_programs;
        self.traffic.map_flash_reads += meta;
        let id = match c.payload {
            Payload::SsdIndex(id) => id,
            p => return Err(StoreError::Invalid(format!("SsdIdxCreate answered {p:?}"))),
        };
        self.tables[t.0].ssd = Some(id);
        if rest.is_empty() {
            return Ok(());
        }
        self.ssd_update(id, &rest, &[])
    }

    /// Pairs one in-SSD B+tree command carries: the store's option within the device's
    /// limit.
    fn ssd_chunk(&self) -> usize {
        self.opts
            .ssd_pairs_per_command
            .clamp(1, MAX_PAIRS_PER_COMMAND)
    }

    /// SsdIdxUpdate of index `id`: one command when `insert` and `remove` fit in
    /// [`Self::ssd_chunk`] pairs together, else commands of that many (removals first,
    /// then insertions).
    fn ssd_update(
        &mut self,
        id: u16,
        insert: &[(i64, u64)],
        remove: &[(i64, u64)],
    ) -> Result<(), StoreError> {
        let chunk = self.ssd_chunk();
        let chunks = remove
            .chunks(chunk)
            .map(|r| (&[][..], r))
            .chain(insert.chunks(chunk).map(|i| (i, &[][..])));
        let single = insert.len() + remove.len() <= chunk;
        let commands: Vec<(&[Pair], &[Pair])> = if single {
            vec![(insert, remove)]
        } else {
            chunks.collect()
        };
        for (insert, remove) in commands {
            let (c, meta) = self.sync(Command::SsdIdxUpdate {
                index: id,
                insert: insert.to_vec(),
                remove: remove.to_vec(),
            })?;
            self.traffic.index_flash_reads += c.acct.flash_reads.saturating_sub(meta);
            self.traffic.map_flash_reads += meta;
            self.traffic.index_pages_written += c.acct.flash_programs;
        }
        Ok(())
    }

    /// UPDATE_HOST_INDEX for page `lba`: the tiny host tree learns its range.
    pub(super) fn learn_page(&mut self, t: TableId, lba: u64) -> Result<(), StoreError> {
        let dev_id = self.tables[t.0].dev_id;
        let v = match self
            .sync(Command::UpdateHostIndex { table: dev_id, lba })?
            .0
            .payload
        {
            Payload::HostIndex(v) => v,
            p => {
                return Err(StoreError::Invalid(format!(
                    "UpdateHostIndex answered {p:?}"
                )));
            }
        };
        let hs = &mut self.tables[t.0].hs;
        if let Some((mn, _)) = hs.range.remove(&lba) {
            hs.by_min.remove(&(mn, lba));
        }
        let depth = (hs.by_min.len().max(2) as f64).log2();
        match v {
            HostIndexValue::Range { min, max } => {
                hs.by_min.insert((min, lba), max);
                hs.range.insert(lba, (min, max));
            }
            HostIndexValue::Unknown => {
                hs.clustered = false;
                hs.by_min.insert((i64::MIN, lba), i64::MAX);
                hs.range.insert(lba, (i64::MIN, i64::MAX));
            }
            HostIndexValue::Empty => {}
        }
        self.host_cpu(self.opts.host_node_cycles + depth * self.opts.host_compare_cycles);
        Ok(())
    }

    /// FLIXR-HS: before the tiny tree learns page `lba`'s new min, check with the keys
    /// the host wrote to it (`keys`: their range, `None` for an empty page) that the
    /// table stays clustered: the page keeps its place among the mins (its new keys lie
    /// between its old min and the next page's min, either end included; a new page's
    /// keys lie at or above every key written before). A page that leaves its place (an insert below its min or
    /// beyond the next page's) ends the clustering for good.
    pub(super) fn keep_clustered(&mut self, t: TableId, lba: u64, keys: Option<(i64, i64)>) {
        let hs = &mut self.tables[t.0].hs;
        let Some((kmin, kmax)) = keys else {
            return;
        };
        if hs.clustered {
            hs.clustered = match hs.range.get(&lba) {
                Some(&(old_min, _)) => {
                    let next = hs
                        .by_min
                        .range((old_min, lba + 1)..)
                        .next()
                        .map(|(&(m, _), _)| m);
                    // A page's max may equal the next page's min (a key's rows across
                    // a page boundary): the search starts below `lo`, so it stays exact,
                    // as the load's check allows (`index_bulk`).
                    kmin >= old_min && next.is_none_or(|m| kmax <= m)
                }
                None => hs.top.is_none_or(|top| kmin >= top),
            };
        }
        hs.top = Some(hs.top.map_or(kmax, |top| top.max(kmax)));
    }

    /// Write the nodes `touch` changed (host B+tree), pipelined.
    pub(super) fn write_nodes(&mut self, t: TableId, touch: &Touch) -> Result<(), StoreError> {
        self.write_nodes_of(t, None, touch)
    }

    /// [`Self::write_nodes`] of the primary tree (`None`) or secondary tree `Some(i)`.
    pub(super) fn write_nodes_of(
        &mut self,
        t: TableId,
        sec: Option<usize>,
        touch: &Touch,
    ) -> Result<(), StoreError> {
        for &l in &touch.freed {
            self.cache.remove(l);
            self.stmt_nodes.remove(&l);
        }
        let mut lbas = touch.written.clone();
        lbas.sort_unstable();
        let mdts = self.client.identify().mdts_blocks as u64;
        let tb = &self.tables[t.0];
        let tree = match sec {
            None => tb.tree.as_ref(),
            Some(i) => tb.secondary.get(i).and_then(|(_, tr)| tr.as_ref()),
        }
        .ok_or_else(|| StoreError::Invalid("no tree".into()))?;
        let mut cmds = Vec::new();
        for (first, n) in runs(&lbas, mdts) {
            let mut data = vec![0u8; n as usize * self.page];
            for (l, slot) in (first..first + n).zip(data.chunks_mut(self.page)) {
                if let Some(node) = tree.node_bytes(l) {
                    slot[..node.len()].copy_from_slice(&node);
                }
            }
            cmds.push(Command::Write { lba: first, data });
        }
        for &l in &lbas {
            // With the inner levels kept apart, the LRU holds leaves only.
            if !self.inner_levels || self.is_leaf(l) {
                self.cache.insert(l);
            }
            self.stmt_nodes.insert(l);
        }
        self.traffic.index_pages_written += lbas.len() as u64;
        // A background writer: the host goes on, the device stays busy with them.
        self.host_cpu(cmds.len() as f64 * self.opts.host_io_cycles);
        let at = self.client.now();
        for cmd in cmds {
            let c = self.client.exec_detached(cmd, at)?;
            self.traffic.link_bytes += c.acct.host_link_bytes;
            self.traffic.commands += 1;
        }
        Ok(())
    }

    /// Charge a host B+tree traversal: CPU per node; missing inner nodes read one after
    /// the other (each names the next level), then the missing leaves the traversal
    /// needs, all named by their parents in host DRAM, read together: runs of
    /// consecutive LBAs in one Read, kept `qd` deep (flixr §3, Figure 1: "the first (and
    /// second) level index in the DRAM will point to leaf nodes (third level index
    /// pages) that need to be accessed. These lower-level indices are read from the
    /// storage to finally identify the target data pages").
    pub(super) fn read_nodes(&mut self, touch: &Touch) -> Result<(), StoreError> {
        let mut leaves = Vec::new();
        for &l in &touch.read {
            let cached = if self.inner_levels {
                // Inner nodes always; a leaf if the leaf LRU (empty by default) holds it.
                !self.is_leaf(l) || self.cache.touch(l)
            } else {
                self.cache.touch(l)
            };
            let hit = cached || self.stmt_nodes.contains(&l);
            if !hit {
                if self.is_leaf(l) {
                    leaves.push(l);
                    continue;
                }
                let (c, meta) = self.sync(Command::Read { lba: l, blocks: 1 })?;
                self.traffic.index_pages_to_host += 1;
                self.traffic.index_flash_reads += c.acct.flash_reads.saturating_sub(meta);
                self.traffic.map_flash_reads += meta;
                self.cache.insert(l);
                self.stmt_nodes.insert(l);
            }
        }
        if !leaves.is_empty() {
            leaves.sort_unstable();
            leaves.dedup();
            let mdts = self.client.identify().mdts_blocks as u64;
            let rs = runs(&leaves, mdts);
            let cmds = rs
                .iter()
                .map(|&(lba, n)| Command::Read {
                    lba,
                    blocks: n as u32,
                })
                .collect();
            let done = self.pipelined(cmds)?;
            let mut end = self.client.now();
            for ((_, n), (c, meta)) in rs.into_iter().zip(done) {
                end = end.max(c.acct.completed);
                self.traffic.index_pages_to_host += n;
                self.traffic.index_flash_reads += c.acct.flash_reads.saturating_sub(meta);
                self.traffic.map_flash_reads += meta;
            }
            self.client.wait_until(end);
            for l in leaves {
                self.cache.insert(l);
                self.stmt_nodes.insert(l);
            }
        }
        self.host_cpu(
            touch.read.len() as f64 * self.opts.host_node_cycles
                + touch.compares as f64 * self.opts.host_compare_cycles,
        );
        Ok(())
    }

    /// Is the host B+tree node at `l` (of any table's tree) a leaf?
    fn is_leaf(&self, l: u64) -> bool {
        self.host_trees().any(|tr| tr.is_leaf(l) == Some(true))
    }

    /// Index maintenance for pairs removed and added.
    pub(super) fn index_update(
        &mut self,
        t: TableId,
        insert: &[(i64, u64)],
        remove: &[(i64, u64)],
    ) -> Result<(), StoreError> {
        if insert.is_empty() && remove.is_empty() {
            return Ok(());
        }
        match self.kind {
            IndexKind::HostBtree | IndexKind::HostBtreeIdeal => {
                let mut all = Touch::default();
                for (ins, &(k, v)) in remove
                    .iter()
                    .map(|p| (false, p))
                    .chain(insert.iter().map(|p| (true, p)))
                {
                    let mut touch = Touch::default();
                    let tree = self.tables[t.0]
                        .tree
                        .as_mut()
                        .ok_or_else(|| StoreError::Invalid("no tree".into()))?;
                    if ins {
                        tree.insert(k, v, &mut touch)?;
                    } else {
                        tree.remove(k, v, &mut touch);
                    }
                    self.read_nodes(&touch)?;
                    for l in touch.written {
                        if !all.written.contains(&l) {
                            all.written.push(l);
                        }
                    }
                    all.written.retain(|l| !touch.freed.contains(l));
                    all.freed.extend(touch.freed);
                }
                self.write_nodes(t, &all)?;
            }
            IndexKind::SsdBtree => {
                let Some(id) = self.tables[t.0].ssd else {
                    return self.ssd_create(t, insert.to_vec());
                };
                self.ssd_update(id, insert, remove)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Check that every page of `t` holds rows whose keys its FLIXR entry bounds (tests):
    /// returns the pages checked.
    pub fn check_entries(&mut self, t: TableId) -> Result<u64, StoreError> {
        if !self.kind.flixr() {
            return Ok(0);
        }
        let tb = self.table(t)?;
        let (first, used, dev_id, schema, key) =
            (tb.first, tb.used, tb.dev_id, tb.schema.clone(), tb.key);
        let range = matches!(tb.def.encoding, KeyEncoding::Range);
        for lba in first..first + used {
            let bytes = self.client.read(lba, 1)?;
            let keys: Vec<i64> = Self::parse_rows(&schema, &bytes)
                .iter()
                .filter_map(|r| r.get(key).and_then(value_i64))
                .collect();
            if !range {
                continue;
            }
            let v = match self
                .client
                .exec(Command::UpdateHostIndex { table: dev_id, lba })?
                .payload
            {
                Payload::HostIndex(v) => v,
                _ => HostIndexValue::Unknown,
            };
            let ok = match v {
                HostIndexValue::Range { min, max } => {
                    !keys.is_empty() && keys.iter().all(|&k| min <= k && k <= max)
                }
                HostIndexValue::Empty => keys.is_empty(),
                HostIndexValue::Unknown => false,
            };
            if !ok {
                return Err(StoreError::Invalid(format!(
                    "page {lba}: entry {v:?} does not bound its keys {keys:?}"
                )));
            }
            if self.kind == IndexKind::FlixrHS {
                let hs = self.tables[t.0].hs.range.get(&lba).copied();
                let want = match v {
                    HostIndexValue::Range { min, max } => Some((min, max)),
                    _ => None,
                };
                if hs != want {
                    return Err(StoreError::Invalid(format!(
                        "page {lba}: tiny host tree has {hs:?}, the device {want:?}"
                    )));
                }
            }
        }
        Ok(used)
    }

    /// The B+tree's entries of `t` (host tree), for checks.
    pub fn host_tree_entries(&self, t: TableId) -> Result<Option<Vec<(i64, u64)>>, StoreError> {
        Ok(self.table(t)?.tree.as_ref().map(|t| t.entries()))
    }

    /// The in-SSD tree's entries of `t`, for checks.
    pub fn ssd_tree_entries(&mut self, t: TableId) -> Result<Option<Vec<(i64, u64)>>, StoreError> {
        let Some(id) = self.table(t)?.ssd else {
            return Ok(None);
        };
        Ok(self
            .client
            .device()
            .ssd_btree()
            .index(id)
            .map(|t| t.entries()))
    }
}
