//! Range scans through each index configuration (flixr §5, §6.2, §6.4): the B+tree
//! lookups (with the optimizer that prefers a full scan for wide ranges), the in-SSD
//! tree, FLIXR-S and FLIXR-HS, scans over several keys, and the batched lookups joins
//! use.
//!
//! Choices made here: the host filters every row it receives (the device's per-page
//! answer is conservative); key statistics seen so far drive the optimizer.

use super::*;

impl RowStore {
    /// Rows of `t` with `lo <= key <= hi` and `tlo <= column <= thi` for every
    /// `(column, tlo, thi)` of `terms` (columns with a secondary key narrow the pages
    /// read) that satisfy `pred`.
    pub fn scan_keys(
        &mut self,
        t: TableId,
        (lo, hi): (i64, i64),
        terms: &[(usize, i64, i64)],
        pred: &dyn Fn(&[Value]) -> bool,
    ) -> Result<Vec<Row>, StoreError> {
        self.statement(|s| s.scan_keys_stmt(t, (lo, hi), terms, pred))
    }

    /// [`Self::scan_keys`] within the statement under way.
    fn scan_keys_stmt(
        &mut self,
        t: TableId,
        (lo, hi): (i64, i64),
        terms: &[(usize, i64, i64)],
        pred: &dyn Fn(&[Value]) -> bool,
    ) -> Result<Vec<Row>, StoreError> {
        if lo > hi || terms.iter().any(|(_, a, b)| a > b) {
            return Ok(Vec::new());
        }
        let tb = self.table(t)?;
        let keyed: Vec<(usize, usize, i64, i64)> = terms
            .iter()
            .filter_map(|&(c, a, b)| {
                tb.secondary
                    .iter()
                    .position(|(sc, _)| *sc == c)
                    .map(|si| (si, c, a, b))
            })
            .collect();
        let all = |r: &[Value]| {
            terms.iter().all(|&(c, a, b)| {
                r.get(c)
                    .and_then(value_i64)
                    .is_some_and(|v| a <= v && v <= b)
            }) && pred(r)
        };
        if keyed.is_empty() {
            return self.scan_where(t, lo, hi, &all);
        }
        let pages = match self.kind {
            IndexKind::FlixrS | IndexKind::FlixrHS => {
                let rs = self.flixr_runs(t, lo, hi);
                if rs.is_empty() {
                    return Ok(Vec::new());
                }
                let tb = &self.tables[t.0];
                let name = |c: usize| tb.def.columns[c].0.clone();
                let mut rule_terms = vec![csd_device::RuleTerm {
                    column: name(tb.key),
                    rule: IndexRule::Between { lo, hi },
                }];
                for &(_, c, a, b) in &keyed {
                    rule_terms.push(csd_device::RuleTerm {
                        column: name(c),
                        rule: IndexRule::Between { lo: a, hi: b },
                    });
                }
                let dev_id = tb.dev_id;
                let rule = match self
                    .sync(Command::SendIdxIcrKeys {
                        table: dev_id,
                        terms: rule_terms,
                    })?
                    .0
                    .payload
                {
                    Payload::FlixrRule(r) => r,
                    p => {
                        return Err(StoreError::Invalid(format!(
                            "SendIdxIcrKeys answered {p:?}"
                        )));
                    }
                };
                let out = self.filtered(rs, |lba, blocks, _| Command::ReadIdx {
                    table: dev_id,
                    rule,
                    lba,
                    blocks,
                });
                self.drop_rule(t, rule)?;
                out?
            }
            IndexKind::HostBtree | IndexKind::HostBtreeIdeal if !self.prefers_scan(t, lo, hi) => {
                let mut touch = Touch::default();
                let tb = &self.tables[t.0];
                let tree = tb
                    .tree
                    .as_ref()
                    .ok_or_else(|| StoreError::Invalid("no tree".into()))?;
                let mut pages: BTreeSet<u64> = tree.range(lo, hi, &mut touch).into_iter().collect();
                for &(si, _, a, b) in &keyed {
                    if let Some(tr) = tb.secondary[si].1.as_ref() {
                        let other: BTreeSet<u64> = tr.range(a, b, &mut touch).into_iter().collect();
                        pages = pages.intersection(&other).copied().collect();
                    }
                }
                self.read_nodes(&touch)?;
                let pages: Vec<u64> = pages.into_iter().collect();
                self.read_pages(&pages)?
            }
            _ => self.candidate_pages(t, lo, hi)?,
        };
        Ok(self.filter_rows(t, &pages, lo, hi, &all))
    }

    /// Widen `t`'s key statistics by `keys`.
    pub(super) fn saw_keys(&mut self, t: TableId, keys: impl Iterator<Item = i64>) {
        let tb = &mut self.tables[t.0];
        for k in keys {
            tb.keys = Some(match tb.keys {
                None => (k, k),
                Some((a, b)) => (a.min(k), b.max(k)),
            });
        }
    }

    /// Would a B+tree configuration's optimizer scan `t` instead of using its index for
    /// `lo..=hi`? When the key statistics say the range covers more than
    /// [`StoreOptions::full_scan_fraction`] of the key span (uniform keys assumed, as
    /// without a histogram); never when the optimizer is off.
    pub(super) fn prefers_scan(&self, t: TableId, lo: i64, hi: i64) -> bool {
        let Some(limit) = self.opts.full_scan_fraction else {
            return false;
        };
        let Some((a, b)) = self.tables[t.0].keys else {
            return false;
        };
        let span = (b as i128 - a as i128 + 1) as f64;
        let cover = (hi.min(b) as i128 - lo.max(a) as i128 + 1).max(0) as f64;
        cover / span > limit
    }

    /// The pages of `t` that may hold keys in `lo..=hi`, read through the configuration's
    /// access path.
    pub(super) fn candidate_pages(
        &mut self,
        t: TableId,
        lo: i64,
        hi: i64,
    ) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        self.table(t)?;
        match self.kind {
            IndexKind::NoIndex => {
                let tb = &self.tables[t.0];
                let lbas: Vec<u64> = (tb.first..tb.first + tb.used).collect();
                self.read_pages(&lbas)
            }
            IndexKind::HostBtree | IndexKind::HostBtreeIdeal | IndexKind::SsdBtree
                if self.prefers_scan(t, lo, hi) =>
            {
                let tb = &self.tables[t.0];
                let lbas: Vec<u64> = (tb.first..tb.first + tb.used).collect();
                self.read_pages(&lbas)
            }
            IndexKind::HostBtree | IndexKind::HostBtreeIdeal => {
                let mut touch = Touch::default();
                let tree = self.tables[t.0]
                    .tree
                    .as_ref()
                    .ok_or_else(|| StoreError::Invalid("no tree".into()))?;
                let mut pages = tree.range(lo, hi, &mut touch);
                self.read_nodes(&touch)?;
                pages.sort_unstable();
                pages.dedup();
                self.read_pages(&pages)
            }
            IndexKind::SsdBtree => {
                let id = self.tables[t.0]
                    .ssd
                    .ok_or_else(|| StoreError::Invalid("no in-SSD index".into()))?;
                let mut out = Vec::new();
                let mut from = 0u64;
                loop {
                    let nodes0 = self.client.device().ssd_btree().stats().node_flash_reads;
                    let (c, meta) = self.sync(Command::SsdIdxRead {
                        index: id,
                        lo,
                        hi,
                        from,
                    })?;
                    let nodes = self.client.device().ssd_btree().stats().node_flash_reads - nodes0;
                    let flash = c.acct.flash_reads;
                    let resume = match c.payload {
                        Payload::IndexRead(r) => {
                            self.traffic.index_flash_reads += nodes;
                            self.traffic.map_flash_reads += meta;
                            self.traffic.data_flash_reads +=
                                flash.saturating_sub(meta).saturating_sub(nodes);
                            self.traffic.data_pages_to_host += r.lbas.len() as u64;
                            for (l, p) in r.lbas.iter().zip(r.data.chunks(self.page)) {
                                out.push((*l, p.to_vec()));
                            }
                            r.resume_at
                        }
                        _ => None,
                    };
                    match resume {
                        Some(n) => from = n,
                        None => break,
                    }
                }
                Ok(out)
            }
            IndexKind::FlixrS | IndexKind::FlixrHS => {
                let rs = self.flixr_runs(t, lo, hi);
                if rs.is_empty() {
                    return Ok(Vec::new());
                }
                let rule = self.rule(t, IndexRule::Between { lo, hi })?;
                let dev_id = self.tables[t.0].dev_id;
                let out = self.filtered(rs, |lba, blocks, _| Command::ReadIdx {
                    table: dev_id,
                    rule,
                    lba,
                    blocks,
                });
                self.drop_rule(t, rule)?;
                out
            }
        }
    }

    /// Rows of `pages` whose key is in `lo..=hi` and that satisfy `pred`; charges the
    /// host CPU for every row examined.
    pub(super) fn filter_rows(
        &mut self,
        t: TableId,
        pages: &[(u64, Vec<u8>)],
        lo: i64,
        hi: i64,
        pred: &dyn Fn(&[Value]) -> bool,
    ) -> Vec<Row> {
        let tb = &self.tables[t.0];
        let mut out = Vec::new();
        let mut seen = 0u64;
        for (lba, p) in pages {
            let Ok(v) = PageView::parse(p, &tb.schema) else {
                continue;
            };
            seen += v.row_count() as u64;
            let Ok(col) = v.column(tb.key) else {
                continue;
            };
            for i in 0..v.row_count() {
                let Some(k) = col.get_i64(i) else { continue };
                if k < lo || k > hi {
                    continue;
                }
                let Ok(values) = v.row_values(i) else {
                    continue;
                };
                if pred(&values) {
                    out.push(Row {
                        id: RowId {
                            page: *lba,
                            slot: i as u16,
                        },
                        values,
                    });
                }
            }
        }
        let cycles =
            seen as f64 * self.cycles_per_record + pages.len() as f64 * self.cycles_per_page;
        self.host_cpu(cycles);
        out
    }

    /// Rows of `t` whose key is one of `keys` (sorted, distinct), through the B+tree:
    /// every key traversed (host) or one SsdIdxRead per key kept `qd` deep (in-SSD), the
    /// data pages read once; other configurations scan with the smallest covering range.
    pub fn lookup_many(&mut self, t: TableId, keys: &[i64]) -> Result<Vec<Row>, StoreError> {
        self.statement(|s| s.lookup_many_stmt(t, keys))
    }

    /// [`Self::lookup_many`] within the statement under way.
    fn lookup_many_stmt(&mut self, t: TableId, keys: &[i64]) -> Result<Vec<Row>, StoreError> {
        let (Some(&lo), Some(&hi)) = (keys.first(), keys.last()) else {
            return Ok(Vec::new());
        };
        let want: BTreeSet<i64> = keys.iter().copied().collect();
        let pages = match self.kind {
            IndexKind::HostBtree | IndexKind::HostBtreeIdeal if !self.prefers_scan(t, lo, hi) => {
                let mut touch = Touch::default();
                let mut pages = Vec::new();
                let tree = self.tables[t.0]
                    .tree
                    .as_ref()
                    .ok_or_else(|| StoreError::Invalid("no tree".into()))?;
                for &k in keys {
                    pages.extend(tree.range(k, k, &mut touch));
                }
                self.read_nodes(&touch)?;
                pages.sort_unstable();
                pages.dedup();
                self.read_pages(&pages)?
            }
            IndexKind::SsdBtree if !self.prefers_scan(t, lo, hi) => {
                let id = self.tables[t.0]
                    .ssd
                    .ok_or_else(|| StoreError::Invalid("no in-SSD index".into()))?;
                let cmds = keys
                    .iter()
                    .map(|&k| Command::SsdIdxRead {
                        index: id,
                        lo: k,
                        hi: k,
                        from: 0,
                    })
                    .collect();
                let nodes0 = self.client.device().ssd_btree().stats().node_flash_reads;
                let done = self.pipelined(cmds)?;
                let nodes = self.client.device().ssd_btree().stats().node_flash_reads - nodes0;
                let mut out: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
                let mut end = self.client.now();
                let mut flash = 0u64;
                let mut more = Vec::new();
                for (&k, (c, meta)) in keys.iter().zip(done) {
                    end = end.max(c.acct.completed);
                    flash += c.acct.flash_reads.saturating_sub(meta);
                    self.traffic.map_flash_reads += meta;
                    if let Payload::IndexRead(r) = c.payload {
                        self.traffic.data_pages_to_host += r.lbas.len() as u64;
                        for (l, p) in r.lbas.iter().zip(r.data.chunks(self.page)) {
                            out.insert(*l, p.to_vec());
                        }
                        if r.resume_at.is_some() {
                            more.push(k);
                        }
                    }
                }
                self.client.wait_until(end);
                self.traffic.index_flash_reads += nodes;
                self.traffic.data_flash_reads += flash.saturating_sub(nodes);
                // A key with more than MDTS pages: the rest through a resumed read.
                for k in more {
                    for (l, p) in self.candidate_pages(t, k, k)? {
                        out.insert(l, p);
                    }
                }
                out.into_iter().collect()
            }
            _ => self.candidate_pages(t, lo, hi)?,
        };
        let rows = self.filter_rows(t, &pages, lo, hi, &|_| true);
        let key = self.tables[t.0].key;
        Ok(rows
            .into_iter()
            .filter(|r| {
                r.values
                    .get(key)
                    .and_then(value_i64)
                    .is_some_and(|k| want.contains(&k))
            })
            .collect())
    }

    /// Rows of `t` with `lo <= key <= hi`, through the configuration's access path.
    pub fn scan(&mut self, t: TableId, lo: i64, hi: i64) -> Result<Vec<Row>, StoreError> {
        self.scan_where(t, lo, hi, &|_| true)
    }

    /// Rows of `t` with `lo <= key <= hi` that satisfy `pred` (a residual predicate the
    /// host evaluates).
    pub fn scan_where(
        &mut self,
        t: TableId,
        lo: i64,
        hi: i64,
        pred: &dyn Fn(&[Value]) -> bool,
    ) -> Result<Vec<Row>, StoreError> {
        self.statement(|s| s.scan_where_stmt(t, lo, hi, pred))
    }

    /// [`Self::scan_where`] within the statement under way.
    fn scan_where_stmt(
        &mut self,
        t: TableId,
        lo: i64,
        hi: i64,
        pred: &dyn Fn(&[Value]) -> bool,
    ) -> Result<Vec<Row>, StoreError> {
        if lo > hi {
            return Ok(Vec::new());
        }
        let pages = self.candidate_pages(t, lo, hi)?;
        Ok(self.filter_rows(t, &pages, lo, hi, pred))
    }

    /// Every row of `t` (a full scan under any configuration).
    pub fn scan_all(&mut self, t: TableId) -> Result<Vec<Row>, StoreError> {
        self.table(t)?;
        let tb = &self.tables[t.0];
        let lbas: Vec<u64> = (tb.first..tb.first + tb.used).collect();
        let pages = self.read_pages(&lbas)?;
        Ok(self.filter_rows(t, &pages, i64::MIN, i64::MAX, &|_| true))
    }
}
