//! The filtered reads of flixr §4.4: READ_IDX (compare the entries of the requested
//! pages with a registered rule, read and send only the pages that may match, report
//! the pages skipped), the page selection of an ISP session under a rule, and
//! UPDATE_HOST_INDEX (a page's range entry for FLIXR-HS's host B+tree, §4.1).
//!
//! Choices made here: entries come through the index cache (a miss loads the MAP page
//! through the FTL); a read examines up to `MAX_INDEX_SCAN` LBAs but returns at most
//! MDTS pages, naming the LBA to resume at when that limit stops it; every entry
//! compared is charged `comp_cycles_per_record + dram_access_cycles` on the embedded
//! cores (the entry is loaded from controller DRAM, then compared: the same charge as a
//! key comparison of the in-SSD B+tree).

use super::*;

impl Flixr {
    /// The pages of an ISP session's table that rule `(table, rule)` may match: the
    /// entry of every LBA of `pages` table pages of `lpp` LBAs from `first_lba` is looked
    /// up through the index cache and compared (a page is kept when any of its LBAs is).
    /// Returns the kept page numbers, the index-cache misses and when the comparisons
    /// ended on the embedded cores.
    pub fn select_pages(
        &mut self,
        dev: &mut BlockDevice,
        (table, rule): (u8, u16),
        (first_lba, pages, lpp): (u64, u64, u64),
        at: SimTime,
    ) -> Result<(Vec<u64>, u64, SimTime), CommandError> {
        Self::need_ext(dev, 8).map_err(|e| refusal(e, at))?;
        let (layout, terms) = self.rule(table, rule).map_err(|e| refusal(e, at))?;
        let miss0 = self.cache.misses;
        let mut t = at;
        let mut kept = Vec::new();
        let lpp = lpp.max(1);
        for p in 0..pages {
            let mut keep = false;
            for l in first_lba + p * lpp..first_lba + (p + 1) * lpp {
                let (bytes, pending, tt) = self
                    .lookup(dev, l, at)
                    .map_err(|error| CommandError { error, done: at })?;
                t = t.max(tt);
                if pending || layout.may_match(&Entry::decode(&bytes), &terms) {
                    keep = true;
                }
            }
            if keep {
                kept.push(p);
            }
        }
        let examined = pages * lpp;
        let isp = dev.ftl().nand().config().isp;
        let cycles = core_cycles(
            dev,
            examined as f64 * (isp.comp_cycles_per_record + isp.dram_access_cycles),
        );
        let t = dev.controller_mut().cpu(t, cycles);
        self.stats.entries_compared += examined;
        self.stats.pages_read += kept.len() as u64 * lpp;
        self.stats.pages_skipped += (pages - kept.len() as u64) * lpp;
        Ok((kept, self.cache.misses - miss0, t))
    }

    /// The key layout and the terms of rule `(table, rule)`.
    pub(super) fn rule(
        &self,
        table: u8,
        rule: u16,
    ) -> Result<(KeyLayout, Vec<(usize, IndexRule)>), FlixrError> {
        let t = self
            .tables
            .get(&table)
            .ok_or(FlixrError::UnknownTable(table))?;
        if t.keys.is_empty() {
            return Err(FlixrError::NoEncoding(table));
        }
        let r = t
            .rules
            .get(&rule)
            .ok_or(FlixrError::UnknownRule { table, rule })?;
        Ok((KeyLayout::of(table, t), r.clone()))
    }

    /// The entry bytes of `lba` through the index cache; returns them, whether they
    /// cannot be trusted (the FTL holds them pending and they are not an entry staged
    /// over buffered data, which describes what a read of the LBA returns), and when
    /// they are in DRAM.
    pub(super) fn lookup(
        &mut self,
        dev: &mut BlockDevice,
        lba: u64,
        at: SimTime,
    ) -> Result<(Vec<u8>, bool, SimTime), FtlError> {
        let ext = dev.ftl().config().ext_bytes as usize;
        let epp = dev.ftl().map_entries_per_page();
        let (mp, o) = (lba / epp, (lba % epp) as usize * ext);
        let pending = dev.ftl().is_ext_pending(lba) && !self.unsettled.contains_key(&lba);
        if let Some(b) = self.cache.touch(mp) {
            return Ok((b[o..o + ext].to_vec(), pending, at));
        }
        self.cache.misses += 1;
        let (bytes, t) = dev.ftl_mut().ext_page(mp, at)?;
        let t = dev.controller_mut().dram(t, bytes.len() as u64);
        let e = bytes[o..o + ext].to_vec();
        self.cache.insert(mp, bytes);
        Ok((e, pending, t))
    }

    /// READ_IDX: read the pages of `lba..lba+blocks` whose entry can match rule
    /// `(table, rule)`; returns the reply and the completion.
    pub fn read_idx(
        &mut self,
        dev: &mut BlockDevice,
        table: u8,
        rule: u16,
        lba: u64,
        blocks: u32,
        at: SimTime,
    ) -> Result<(IndexRead, SimTime), CommandError> {
        let (layout, terms) = self.rule(table, rule).map_err(|e| refusal(e, at))?;
        let (reply, t, _) =
            self.filtered_read(dev, lba, blocks, at, |e| layout.may_match(e, &terms))?;
        Ok((reply, t))
    }

    /// The common part of READ_IDX and the join reads: look up the entries of
    /// `lba..lba+blocks`, compare each with `keep` (pending entries are always kept), read
    /// the pages kept and send them with the skip list. Returns the reply, the completion
    /// and when the comparisons ended (the firmware may scan pages from then on).
    pub(super) fn filtered_read(
        &mut self,
        dev: &mut BlockDevice,
        lba: u64,
        blocks: u32,
        at: SimTime,
        keep: impl Fn(&Entry) -> bool,
    ) -> Result<(IndexRead, SimTime, SimTime), CommandError> {
        Self::need_ext(dev, 8).map_err(|e| refusal(e, at))?;
        let n = blocks as u64;
        if lba.checked_add(n).is_none_or(|e| e > dev.ftl().lbas()) {
            return Err(CommandError {
                error: FtlError::OutOfRange {
                    lba,
                    end: lba.saturating_add(n),
                    capacity: dev.ftl().lbas(),
                },
                done: at,
            });
        }
        let meta0 = dev.ftl().stats().meta_reads;
        let miss0 = self.cache.misses;
        // The command carries no data: its per-command cost is charged once, with the
        // reply (as a Read's is), so a later command does not queue on the host link
        // behind this one's data.
        let t0 = at;
        let mut t = t0;
        let mut reply = IndexRead::default();
        let mdts = dev.ftl().config().mdts_sectors as usize;
        let mut examined = 0u64;
        for l in lba..lba + n {
            if reply.lbas.len() == mdts {
                reply.resume_at = Some(l);
                break;
            }
            examined += 1;
            let (bytes, pending, tt) = self
                .lookup(dev, l, t0)
                .map_err(|error| CommandError { error, done: t0 })?;
            t = t.max(tt);
            if pending || keep(&Entry::decode(&bytes)) {
                reply.lbas.push(l);
            } else {
                reply.skipped.push(l);
            }
        }
        let isp = dev.ftl().nand().config().isp;
        let cycles = core_cycles(
            dev,
            examined as f64 * (isp.comp_cycles_per_record + isp.dram_access_cycles),
        );
        let t = dev.controller_mut().cpu(t, cycles);
        self.stats.entries_compared += examined;
        self.stats.pages_read += reply.lbas.len() as u64;
        self.stats.pages_skipped += reply.skipped.len() as u64;
        let extra = 8 * reply.skipped.len() as u64 + 16;
        let done = if reply.lbas.is_empty() {
            dev.reply(t, extra)
        } else {
            reply.data = vec![0u8; reply.lbas.len() * dev.ftl().lba_size()];
            dev.read_for_host(&reply.lbas, &mut reply.data, extra, t)?
        };
        reply.index_misses = self.cache.misses - miss0;
        reply.index_page_reads = dev.ftl().stats().meta_reads - meta0;
        Ok((reply, done, t))
    }

    /// UPDATE_HOST_INDEX: the range entry of page `lba` of `table`.
    pub fn host_index(
        &mut self,
        dev: &mut BlockDevice,
        table: u8,
        lba: u64,
        at: SimTime,
    ) -> Result<(HostIndexValue, SimTime), CommandError> {
        let refuse = |e: FlixrError| CommandError {
            error: FtlError::Config(e.to_string()),
            done: at,
        };
        self.check_writable(dev, table).map_err(refuse)?;
        if lba >= dev.ftl().lbas() {
            return Err(CommandError {
                error: FtlError::OutOfRange {
                    lba,
                    end: lba + 1,
                    capacity: dev.ftl().lbas(),
                },
                done: at,
            });
        }
        let t = dev.receive(at, 0);
        let (bytes, pending, t) = self
            .lookup(dev, lba, t)
            .map_err(|error| CommandError { error, done: t })?;
        let layout = self.key_layout(table);
        let e = Entry::decode(&bytes);
        let first = layout
            .as_ref()
            .and_then(|l| l.keys(&e))
            .and_then(|k| k.into_iter().next());
        let v = match (e, first) {
            _ if pending => HostIndexValue::Unknown,
            (Entry::Empty(x), _) if x == table => HostIndexValue::Empty,
            // Every row's key NULL: no key value on the page.
            (_, Some(KeyEntry::Range { min, max })) if min > max => HostIndexValue::Empty,
            (_, Some(KeyEntry::Range { min, max })) => HostIndexValue::Range { min, max },
            _ => HostIndexValue::Unknown,
        };
        Ok((v, dev.respond(t, 16)))
    }
}
