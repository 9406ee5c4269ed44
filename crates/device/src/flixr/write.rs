//! Keeping entries honest on writes (flixr §4.3, §4.6): WRITE_IDX (compute a page's
//! entry from the buffered page, concurrently with the program), plain writes and
//! batches over indexed pages, trims, and recovery of the entries a crash left pending.
//!
//! Choices made here: before the page write the entry is replaced by a stub naming the
//! table and the FTL's redo bit is cleared; once the data is durable the new entry is
//! installed. With a write-back cache the write is acknowledged from the page buffer, as
//! on the paper's platform (§4.3: "the SSD firmware first buffers data in the SSD DRAM
//! as it does by default"): the new entry is staged (seen at once, not logged, the redo
//! bit still clear) and logged once the data's commit is in the log. A page that does
//! not parse as a page of the table gets an "opaque" entry (always read); a page without
//! rows an "empty" one (always skipped). After a crash every pending entry is recomputed
//! from the data that survived when the device is assembled.

use super::*;

impl Flixr {
    /// Check that WRITE_IDX may write pages of `table`.
    pub fn check_writable(&self, dev: &BlockDevice, table: u8) -> Result<(), FlixrError> {
        let t = self
            .tables
            .get(&table)
            .ok_or(FlixrError::UnknownTable(table))?;
        if t.keys.is_empty() {
            return Err(FlixrError::NoEncoding(table));
        }
        Self::need_ext(dev, 8)?;
        Ok(())
    }

    /// The entry of one page of `table` (and the rows parsed: the counted work): every
    /// key of the table, packed as its [`KeyLayout`] says.
    pub fn compute(&self, table: u8, page: &[u8]) -> (Entry, usize) {
        let Some(t) = self.tables.get(&table) else {
            return (Entry::None, 0);
        };
        if t.keys.is_empty() {
            return (Entry::None, 0);
        }
        let Ok(view) = PageView::parse(page, &t.schema) else {
            return (Entry::Opaque(table), 0);
        };
        if view.layout() != t.format.layout {
            return (Entry::Opaque(table), 0);
        }
        let rows = view.row_count();
        if rows == 0 {
            return (Entry::Empty(table), 0);
        }
        let mut values = Vec::with_capacity(t.keys.len());
        for (col, _) in &t.keys {
            let Ok(c) = view.column(*col) else {
                return (Entry::Opaque(table), 0);
            };
            let Some(vals) = page_keys(&c) else {
                return (Entry::Opaque(table), 0);
            };
            values.push(vals);
        }
        (KeyLayout::of(table, t).build(&values), rows * t.keys.len())
    }

    /// Bus cycles of building entries over `rows` rows of `pages` pages.
    pub(super) fn build_cycles(dev: &BlockDevice, pages: usize, rows: usize) -> f64 {
        let isp = dev.ftl().nand().config().isp;
        pages as f64 * isp.page_cycles
            + rows as f64 * (isp.comp_cycles_per_record + isp.dram_access_cycles)
    }

    pub(super) fn install(
        &mut self,
        dev: &mut BlockDevice,
        lba: u64,
        bytes: &[u8],
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        let t = dev.ftl_mut().set_ext(lba, bytes, at)?;
        self.cache_entry(dev, lba, bytes);
        Ok(t)
    }

    /// The index cache's copy of `lba`'s entry becomes `bytes` (the MAP's was set).
    fn cache_entry(&mut self, dev: &BlockDevice, lba: u64, bytes: &[u8]) {
        let epp = dev.ftl().map_entries_per_page();
        self.cache
            .update(lba / epp, (lba % epp) as usize * bytes.len(), bytes);
    }

    /// Forget cached entries of `lba..lba+n` (after a trim, the FTL zeroed them).
    pub fn trimmed(&mut self, dev: &BlockDevice, lba: u64, n: u64) {
        // Staged entries of trimmed LBAs describe data that is gone (and zeroed).
        self.unsettled
            .retain(|&l, _| l < lba || l >= lba.saturating_add(n));
        let ext = dev.ftl().config().ext_bytes as usize;
        if ext == 0 {
            return;
        }
        let zero = vec![0u8; ext];
        let epp = dev.ftl().map_entries_per_page();
        if n > 4 * epp * self.cache.len() as u64 {
            self.cache.clear();
            return;
        }
        for l in lba..lba.saturating_add(n) {
            self.cache.update(l / epp, (l % epp) as usize * ext, &zero);
        }
    }

    /// Write `data` at `lba` through `op` (the FTL write of a Write, WRITE_IDX or batch),
    /// maintaining the entries of `pages` (LBA, table, page data): stubs and redo bits
    /// first, the write, then the new entries once the data is durable. Entry creation is
    /// charged on the embedded cores from `staged` on, concurrently with the write.
    pub(super) fn write_with_entries(
        &mut self,
        dev: &mut BlockDevice,
        pages: &[(u64, u8, &[u8])],
        staged: SimTime,
        op: impl FnOnce(&mut BlockDevice, SimTime) -> Result<SimTime, CommandError>,
    ) -> Result<SimTime, CommandError> {
        let ext = dev.ftl().config().ext_bytes as usize;
        let fail = |error: FtlError, done| CommandError { error, done };
        // Old entries (for a failed write) and new ones (computed from the buffered
        // pages, one per table page, stored in each of its LBAs).
        let ls = dev.ftl().lba_size().max(1);
        let lbas = |l: u64, data: &[u8]| l..l + (data.len() / ls).max(1) as u64;
        let mut t = staged;
        let mut olds = Vec::with_capacity(pages.len());
        let mut news = Vec::with_capacity(pages.len());
        let mut rows = 0;
        for &(l0, table, data) in pages {
            for l in lbas(l0, data) {
                let (old, _, tt) = self.lookup(dev, l, staged).map_err(|e| fail(e, staged))?;
                t = t.max(tt);
                olds.push((l, old));
            }
            let (e, r) = self.compute(table, data);
            rows += r;
            news.push(e.encode(ext));
        }
        // Redo bit to 0, with a stub naming the table, before the data's redo descriptor.
        // A staged entry of the LBA (over earlier data still buffered) is superseded.
        let mut was_staged = std::collections::BTreeSet::new();
        for &(l0, table, data) in pages {
            for l in lbas(l0, data) {
                if self.unsettled.remove(&l).is_some() {
                    was_staged.insert(l);
                }
                self.install(dev, l, &Entry::Pending(table).encode(ext), t)
                    .map_err(|e| fail(e, t))?;
                dev.ftl_mut()
                    .mark_ext_pending(l, 1, t)
                    .map_err(|e| fail(e, t))?;
            }
        }
        let cycles = core_cycles(dev, Self::build_cycles(dev, pages.len(), rows));
        let cpu_done = dev.controller_mut().cpu(t, cycles);
        self.stats.entries_built += pages.len() as u64;
        let done = match op(dev, t) {
            Ok(d) => d,
            Err(e) => {
                // The data is as it was: so are its entries (unless power failed, when
                // recovery recomputes them).
                // A failed write rolled every buffered sector back to its durable data:
                // an entry that was staged over buffered data describes data that is
                // gone, and becomes opaque (its pages always read).
                if !matches!(e.error, FtlError::Nand(csd_nand::NandError::PowerLoss)) {
                    for (l, old) in &olds {
                        let old = if was_staged.contains(l) {
                            opaque(old, ext)
                        } else {
                            old.clone()
                        };
                        let _ = self.install(dev, *l, &old, e.done);
                    }
                    self.drop_staged(dev, e.done);
                }
                return Err(e);
            }
        };
        let mut done = done.max(cpu_done);
        // With a write-back cache the data may still be in a page buffer (acknowledged
        // from DRAM, as the paper's platform does, §4.3): its entry is staged (seen at
        // once, logged once the data is committed); committed data gets its entry now.
        let write_back = dev.ftl().config().write_cache == csd_ftl::WriteCache::WriteBack;
        for (&(l0, _, data), new) in pages.iter().zip(&news) {
            for l in lbas(l0, data) {
                let t = if write_back && dev.ftl().is_buffered(l) {
                    self.stage(dev, l, new, done)
                } else {
                    self.install(dev, l, new, done)
                };
                done = done.max(t.map_err(|e| fail(e, done))?);
            }
        }
        if write_back {
            done = done.max(self.settle(dev, done).map_err(|e| fail(e, done))?);
        }
        Ok(done)
    }

    /// The entry of `lba`, whose data is still in a write-back page buffer: in the MAP
    /// extension and the index cache at once (READ_IDX reads the buffered data, so it
    /// must judge it by its entry), logged by [`Flixr::settle`] once the data is
    /// committed. Until then the LBA stays pending (its mark was logged before the
    /// write), so a crash recomputes its entry from the data that survived.
    fn stage(
        &mut self,
        dev: &mut BlockDevice,
        lba: u64,
        bytes: &[u8],
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        let t = dev.ftl_mut().set_ext_volatile(lba, bytes, at)?;
        self.cache_entry(dev, lba, bytes);
        self.unsettled.insert(lba, bytes.to_vec());
        Ok(t)
    }

    /// Log the staged entries whose data has been committed since they were staged:
    /// their records follow the commit's in the log, so no crash keeps an entry
    /// without the data it describes. The others wait for a later command.
    pub(crate) fn settle(
        &mut self,
        dev: &mut BlockDevice,
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        let ready: Vec<u64> = self
            .unsettled
            .keys()
            .copied()
            .filter(|&l| !dev.ftl().is_buffered(l))
            .collect();
        let mut t = at;
        for l in ready {
            if let Some(bytes) = self.unsettled.remove(&l) {
                t = t.max(self.install(dev, l, &bytes, at)?);
            }
        }
        Ok(t)
    }

    /// After a failed write, which rolled every buffered sector back to its durable
    /// data: the staged entries described data that is gone, so each becomes an opaque
    /// entry of its table (its pages always read: never a wrong skip).
    fn drop_staged(&mut self, dev: &mut BlockDevice, at: SimTime) {
        let ext = dev.ftl().config().ext_bytes as usize;
        for (l, bytes) in std::mem::take(&mut self.unsettled) {
            let _ = self.install(dev, l, &opaque(&bytes, ext), at);
        }
    }

    /// WRITE_IDX: write pages of `table` at `lba` and build their entries.
    pub fn write_idx(
        &mut self,
        dev: &mut BlockDevice,
        table: u8,
        lba: u64,
        data: &[u8],
        at: SimTime,
    ) -> Result<SimTime, CommandError> {
        let ls = dev.ftl().lba_size();
        let k = self.page_lbas(table).unwrap_or(1).max(1) as usize;
        let pages: Vec<(u64, u8, &[u8])> = data
            .chunks(ls * k)
            .enumerate()
            .map(|(i, p)| (lba + (i * k) as u64, table, p))
            .collect();
        dev.staged_with(data.len() as u64, at, |dev, t| {
            self.write_with_entries(dev, &pages, t, |dev, t| {
                dev.ftl_mut()
                    .write(lba, data, t)
                    .map_err(|error| CommandError { error, done: t })
            })
        })
    }

    /// A plain Write or batch of `(lba, page)` pairs: pages that had an entry get it
    /// recomputed for the table it named (the others stay without one).
    pub fn plain_write(
        &mut self,
        dev: &mut BlockDevice,
        pages: &[(u64, &[u8])],
        bytes: u64,
        at: SimTime,
        op: impl FnOnce(&mut BlockDevice, SimTime) -> Result<SimTime, CommandError>,
    ) -> Result<SimTime, CommandError> {
        dev.staged_with(bytes, at, |dev, t| {
            let mut indexed = Vec::new();
            let mut tt = t;
            let mut seen = std::collections::HashSet::new();
            for &(l, p) in pages.iter().rev() {
                if !seen.insert(l) {
                    continue; // a later page for the same LBA wins (batches)
                }
                let (old, _, x) = self
                    .lookup(dev, l, t)
                    .map_err(|error| CommandError { error, done: t })?;
                tt = tt.max(x);
                if let Some(table) = Entry::decode(&old).table() {
                    indexed.push((l, table, p));
                }
            }
            if indexed.is_empty() {
                return op(dev, tt);
            }
            indexed.reverse();
            self.write_with_entries(dev, &indexed, tt, op)
        })
    }

    /// After a crash: recompute every entry the FTL still holds pending (§4.6) from the
    /// data that survived; an entry that cannot be recomputed is cleared (its page is then
    /// always read). Returns how many were recomputed.
    pub fn recover(&mut self, dev: &mut BlockDevice) -> u64 {
        // Staged entries were volatile: the crash took them with the buffered data.
        self.unsettled.clear();
        let pending = dev.ftl().ext_pending();
        if pending.is_empty() || dev.ftl().read_only().is_some() {
            return 0;
        }
        let ext = dev.ftl().config().ext_bytes as usize;
        let ls = dev.ftl().lba_size();
        let mut t = dev.ftl().nand().now();
        let mut page = vec![0u8; ls];
        let mut n = 0;
        for l in pending {
            let Ok((bytes, tt)) = dev.ftl_mut().ext(l, t) else {
                continue;
            };
            t = t.max(tt);
            let entry = match Entry::decode(&bytes).table() {
                Some(table) => {
                    let k = self.page_lbas(table).unwrap_or(1).max(1) as u64;
                    let first = l - l % k;
                    page.resize(ls * k as usize, 0);
                    let read = if first + k <= dev.ftl().lbas() {
                        dev.ftl_mut().read(first, &mut page, t)
                    } else {
                        page.truncate(ls);
                        dev.ftl_mut().read(l, &mut page, t)
                    };
                    match read {
                        Ok(tt) => {
                            t = t.max(tt);
                            let (e, rows) = self.compute(table, &page);
                            let c = core_cycles(dev, Self::build_cycles(dev, 1, rows));
                            t = dev.controller_mut().cpu(t, c);
                            e
                        }
                        Err(_) => Entry::None,
                    }
                }
                None => Entry::None,
            };
            if dev.ftl_mut().set_ext(l, &entry.encode(ext), t).is_ok() {
                n += 1;
            }
        }
        let _ = dev.ftl_mut().flush(t);
        self.cache.clear();
        self.stats.recovered_entries += n;
        n
    }
}

/// The keys ([`KeyKind`]) of a page column's non-NULL values, in row order; `None` when
/// the column's type has no key or a value is malformed.
pub(crate) fn page_keys(c: &csd_table::page::ColumnView<'_>) -> Option<Vec<i64>> {
    let ty = c.column_type();
    let kind = KeyKind::of(ty)?;
    let mut vals = Vec::with_capacity(c.len());
    if kind == KeyKind::Number && !c.may_have_nulls() {
        // The classic tables' path: every value, decoded in one pass.
        c.decode_i64_into(&mut vals).ok()?;
        return Some(vals);
    }
    for i in 0..c.len() {
        if let Some(b) = c.bytes(i) {
            vals.push(kind.key(ty, b)?);
        }
    }
    Some(vals)
}

/// The opaque entry (always read) of the table `bytes` names, or no entry.
fn opaque(bytes: &[u8], ext: usize) -> Vec<u8> {
    match Entry::decode(bytes).table() {
        Some(table) => Entry::Opaque(table),
        None => Entry::None,
    }
    .encode(ext)
}
