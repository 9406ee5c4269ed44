//! Page I/O of the row store: whole-page writes (WRITE_IDX under FLIXR, Write
//! otherwise) and reads kept `qd` deep, and FLIXR's filtered reads (flixr §4.4): the
//! page runs a read covers, the per-query rule (SEND_IDX_ICR, released after with
//! DROP_IDX_ICR), and READ_IDX cut into pieces of `FILTER_CHUNK_MDTS` × MDTS LBAs, a
//! piece stopped by the transfer limit resuming in the next wave.

use super::*;

impl RowStore {
    /// Write whole pages `(lba, bytes)` of `t` (WRITE_IDX under FLIXR), pipelined; then
    /// FLIXR-HS learns their new ranges.
    pub(super) fn write_pages(
        &mut self,
        t: TableId,
        pages: Vec<(u64, Vec<u8>)>,
    ) -> Result<(), StoreError> {
        let dev_id = self.tables[t.0].dev_id;
        let n = pages.len() as u64;
        let lbas: Vec<u64> = pages.iter().map(|p| p.0).collect();
        // The key range of every page, as the host built it (FLIXR-HS's clustering check).
        let ranges: Vec<Option<(i64, i64)>> = if self.kind == IndexKind::FlixrHS {
            let tb = &self.tables[t.0];
            pages
                .iter()
                .map(|(_, b)| {
                    Self::parse_rows(&tb.schema, b)
                        .iter()
                        .filter_map(|r| r.get(tb.key).and_then(value_i64))
                        .fold(None, |a: Option<(i64, i64)>, k| {
                            Some(a.map_or((k, k), |(x, y)| (x.min(k), y.max(k))))
                        })
                })
                .collect()
        } else {
            Vec::new()
        };
        let cmds = pages
            .into_iter()
            .map(|(lba, data)| {
                if self.kind.flixr() {
                    Command::WriteIdx {
                        table: dev_id,
                        lba,
                        data,
                    }
                } else {
                    Command::Write { lba, data }
                }
            })
            .collect();
        self.host_cpu(n as f64 * self.cycles_per_page);
        let done = self.pipelined(cmds)?;
        if let Some(e) = SimTime::latest(done.iter().map(|c| c.0.acct.completed)) {
            self.client.wait_until(e);
        }
        self.traffic.data_pages_written += n;
        if self.kind == IndexKind::FlixrHS {
            for (l, keys) in lbas.into_iter().zip(ranges) {
                self.keep_clustered(t, l, keys);
                self.learn_page(t, l)?;
            }
        }
        Ok(())
    }

    /// Read pages `lbas` (sorted) of a table with Reads of consecutive runs, pipelined.
    pub(super) fn read_pages(&mut self, lbas: &[u64]) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        let mdts = self.client.identify().mdts_blocks as u64;
        let rs = runs(lbas, mdts);
        let cmds = rs
            .iter()
            .map(|&(lba, n)| Command::Read {
                lba,
                blocks: n as u32,
            })
            .collect();
        let done = self.pipelined(cmds)?;
        let mut out = Vec::with_capacity(lbas.len());
        let mut end = self.client.now();
        for ((first, n), (c, meta)) in rs.into_iter().zip(done) {
            end = end.max(c.acct.completed);
            self.traffic.data_flash_reads += c.acct.flash_reads.saturating_sub(meta);
            self.traffic.map_flash_reads += meta;
            self.traffic.data_pages_to_host += n;
            let d = Self::payload_data(c);
            for (i, p) in d.chunks(self.page).enumerate() {
                out.push((first + i as u64, p.to_vec()));
            }
        }
        self.client.wait_until(end);
        Ok(out)
    }

    /// Count a FLIXR filtered read's reply; returns its pages and where to resume.
    pub(super) fn take_index_read(
        &mut self,
        c: Completion,
        meta: u64,
        out: &mut Vec<(u64, Vec<u8>)>,
    ) -> Option<u64> {
        let flash = c.acct.flash_reads;
        match c.payload {
            Payload::IndexRead(r) => {
                self.traffic.index_flash_reads += r.index_page_reads;
                self.traffic.map_flash_reads += meta.saturating_sub(r.index_page_reads);
                self.traffic.data_flash_reads += flash.saturating_sub(meta);
                self.traffic.data_pages_to_host += r.lbas.len() as u64;
                self.traffic.pages_skipped += r.skipped.len() as u64;
                for (l, p) in r.lbas.iter().zip(r.data.chunks(self.page)) {
                    out.push((*l, p.to_vec()));
                }
                r.resume_at
            }
            _ => None,
        }
    }

    /// The page runs a FLIXR read covers for the range `lo..=hi` of `t`: the whole
    /// extent (FLIXR-S) or the tiny host tree's candidates (FLIXR-HS: the pages whose
    /// min is at most `hi`, from the last one whose min is below `lo` when the table is
    /// clustered, as flixr §4.1 splits the work: the host traverses its tree by the min
    /// values, the device compares each requested page's max).
    pub(super) fn flixr_runs(&mut self, t: TableId, lo: i64, hi: i64) -> Vec<(u64, u64)> {
        let tb = &self.tables[t.0];
        if self.kind == IndexKind::FlixrHS {
            let mut pages: Vec<u64> = Vec::new();
            let mut seen = 0u64;
            // §4.1: the host tree is keyed by the pages' min values ("the DBMS already
            // traversed the host-side index created by the min value"); the device
            // compares each requested page's max (READ_IDX). A search for `lo..=hi`
            // reaches the leaf entry of the last page whose min is below `lo` ("once an
            // indexed search for a query reaches a leaf node, FLIXR traverses all the
            // records on the corresponding page") and goes on to the pages whose min is
            // at most `hi`. That is exact while the pages' ranges are disjoint and
            // ordered like their mins (`clustered`, known from the rows the host wrote);
            // otherwise every page whose min is at most `hi` is named.
            let start = if tb.hs.clustered {
                tb.hs
                    .by_min
                    .range(..(lo, 0))
                    .next_back()
                    .map_or((i64::MIN, 0), |(&k, _)| k)
            } else {
                (i64::MIN, 0)
            };
            for &(_, p) in tb
                .hs
                .by_min
                .range(start..)
                .map(|(k, _)| k)
                .take_while(|&&(mn, _)| mn <= hi)
            {
                seen += 1;
                pages.push(p);
            }
            pages.sort_unstable();
            let depth = (tb.hs.by_min.len().max(2) as f64).log2();
            let cycles =
                depth * self.opts.host_node_cycles + seen as f64 * self.opts.host_compare_cycles;
            self.host_cpu(cycles);
            runs(&pages, csd_device::flixr::MAX_INDEX_SCAN)
        } else if tb.used == 0 {
            Vec::new()
        } else {
            vec![(tb.first, tb.used)]
        }
    }

    /// Register a rule for `lo..=hi` on `t`.
    pub(super) fn rule(&mut self, t: TableId, rule: IndexRule) -> Result<u16, StoreError> {
        let dev_id = self.tables[t.0].dev_id;
        match self
            .sync(Command::SendIdxIcr {
                table: dev_id,
                rule,
            })?
            .0
            .payload
        {
            Payload::FlixrRule(r) => Ok(r),
            p => Err(StoreError::Invalid(format!("SendIdxIcr answered {p:?}"))),
        }
    }

    pub(super) fn drop_rule(&mut self, t: TableId, rule: u16) -> Result<(), StoreError> {
        let dev_id = self.tables[t.0].dev_id;
        self.sync(Command::DropIdxIcr {
            table: dev_id,
            rule,
        })?;
        Ok(())
    }

    /// Run resumable filtered reads over `runs` (`mk(lba, blocks, first)` builds each
    /// command): the runs are cut into pieces of [`FILTER_CHUNK_MDTS`] × MDTS LBAs
    /// kept `qd` deep; a piece that hit the transfer limit continues in the next wave.
    pub(super) fn filtered(
        &mut self,
        runs: Vec<(u64, u64)>,
        mut mk: impl FnMut(u64, u32, bool) -> Command,
    ) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        let piece = (self.client.identify().mdts_blocks as u64 * FILTER_CHUNK_MDTS)
            .clamp(1, csd_device::flixr::MAX_INDEX_SCAN);
        let mut pending: Vec<(u64, u64)> = Vec::new();
        for (start, n) in runs {
            let mut l = start;
            while l < start + n {
                let m = (start + n - l).min(piece);
                pending.push((l, l + m));
                l += m;
            }
        }
        let mut out = Vec::new();
        let mut first = true;
        while !pending.is_empty() {
            let cmds: Vec<Command> = pending
                .iter()
                .map(|&(l, e)| {
                    let c = mk(l, (e - l) as u32, first);
                    first = false;
                    c
                })
                .collect();
            let done = self.pipelined(cmds)?;
            let mut next = Vec::new();
            let mut end = self.client.now();
            for ((_, e), (c, meta)) in pending.iter().zip(done) {
                end = end.max(c.acct.completed);
                if let Some(r) = self.take_index_read(c, meta, &mut out) {
                    next.push((r, *e));
                }
            }
            self.client.wait_until(end);
            pending = next;
        }
        out.sort_by_key(|p| p.0);
        Ok(out)
    }
}
