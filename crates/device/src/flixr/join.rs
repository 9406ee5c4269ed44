//! FLIXR joins (flixr §4.5): SEND_TIDX_ENC registers a per-table join-key index (a
//! bitmap over bucket split points in device DRAM, the TIRA); READ_IDX_JOIN1 is READ_IDX
//! that also ORs into it the bucket of the join key of every row satisfying the rule;
//! SEND_TIDX_ICR pairs a second table, whose per-page index must be a bitmap over the
//! same split points; READ_IDX_JOIN2 reads only that table's pages sharing a bucket.
//!
//! Choices made here: join bitmaps are query state a host releases (DROP_TIDX_ENC frees
//! an index and the join rules over it, DROP_TIDX_ICR one rule); ids are reused only
//! once free; an index is at most `MAX_TABLE_INDEX_BYTES` (the paper used 8).

use super::entry::bucket;
use super::*;

impl Flixr {
    /// DropTidxEnc: release per-table index `tia` and the join rules comparing with it.
    pub fn drop_table_index(&mut self, tia: u16) -> Result<(), FlixrError> {
        self.table_indexes
            .remove(&tia)
            .ok_or(FlixrError::UnknownTableIndex(tia))?;
        self.join_rules.retain(|_, (t, _)| *t != tia);
        Ok(())
    }

    /// DropTidxIcr: release join rule `(table, rule)`.
    pub fn drop_join_rule(&mut self, table: u8, rule: u16) -> Result<(), FlixrError> {
        self.join_rules
            .remove(&(table, rule))
            .map(|_| ())
            .ok_or(FlixrError::UnknownJoinRule { table, rule })
    }

    /// Per-table indexes and join rules held (the TIRA's occupancy).
    pub fn join_state(&self) -> (usize, usize) {
        (self.table_indexes.len(), self.join_rules.len())
    }

    /// A free id for a per-table index or join rule (they share one id space).
    pub(super) fn fresh_join_id(&mut self) -> u16 {
        let mut id = self.next_tia;
        while self.table_indexes.contains_key(&id) || self.join_rules.keys().any(|k| k.1 == id) {
            id = id.wrapping_add(1).max(1);
        }
        self.next_tia = id.wrapping_add(1).max(1);
        id
    }

    /// SEND_TIDX_ENC (§4.5): register a per-table join-key index over `spec.column` of
    /// `table` (a bitmap over `spec.bounds` buckets); returns its id (tiaID).
    pub fn register_table_index(
        &mut self,
        dev: &BlockDevice,
        table: u8,
        spec: JoinIndexSpec,
    ) -> Result<u16, FlixrError> {
        Self::need_ext(dev, 8)?;
        let t = self
            .tables
            .get(&table)
            .ok_or(FlixrError::UnknownTable(table))?;
        let col = t.schema.column_index(&spec.column).map_err(|_| {
            FlixrError::BadEncoding(format!(
                "table {:?} has no column {:?}",
                t.format.name, spec.column
            ))
        })?;
        if !t.format.columns[col].ty.is_numeric() {
            return Err(FlixrError::BadEncoding(format!(
                "join key {:?} is not numeric",
                spec.column
            )));
        }
        if spec.bounds.is_empty()
            || spec.bounds.len() + 1 > 8 * MAX_TABLE_INDEX_BYTES
            || spec.bounds.windows(2).any(|w| w[0] >= w[1])
        {
            return Err(FlixrError::BadEncoding(format!(
                "a per-table index has 2..={} buckets from strictly increasing split points",
                8 * MAX_TABLE_INDEX_BYTES
            )));
        }
        if self.table_indexes.len() >= MAX_RULES_PER_TABLE * 4 {
            return Err(FlixrError::Full(format!(
                "the TIRA is full ({} per-table indexes): release one with DropTidxEnc",
                MAX_RULES_PER_TABLE * 4
            )));
        }
        let id = self.fresh_join_id();
        let bits = vec![0u8; (spec.bounds.len() + 1).div_ceil(8)];
        self.table_indexes.insert(
            id,
            TableIndex {
                table,
                column: col,
                bounds: spec.bounds,
                bits,
            },
        );
        Ok(id)
    }

    /// SEND_TIDX_ICR (§4.5): a join rule comparing the per-page bitmap entries of `table`
    /// with per-table index `tia`; both must bucket values alike. Returns the rule id.
    pub fn register_join_rule(&mut self, table: u8, tia: u16) -> Result<u16, FlixrError> {
        let ti = self
            .table_indexes
            .get(&tia)
            .ok_or(FlixrError::UnknownTableIndex(tia))?;
        let t = self
            .tables
            .get(&table)
            .ok_or(FlixrError::UnknownTable(table))?;
        let Some(col) = t.keys.iter().find_map(|(c, e)| match e {
            IndexEncoding::Bitmap { bounds } if *bounds == ti.bounds => Some(*c),
            _ => None,
        }) else {
            return Err(FlixrError::BadRule(format!(
                "table {table} needs a per-page bitmap index with the split points of per-table index {tia}"
            )));
        };
        if self.join_rules.len() >= MAX_RULES_PER_TABLE * 4 {
            return Err(FlixrError::Full(format!(
                "the join rule table is full ({} rules): release one with DropTidxIcr",
                MAX_RULES_PER_TABLE * 4
            )));
        }
        // Join rules have their own ids (READ_IDX_JOIN2 only).
        let id = self.fresh_join_id();
        self.join_rules.insert((table, id), (tia, col));
        Ok(id)
    }

    /// READ_IDX_JOIN1 (§4.5 step 1): READ_IDX under rule `(table, rule)` that also ORs
    /// the join keys of the matching rows on every page read into per-table index `tia`
    /// (cleared first when `reset`).
    #[allow(clippy::too_many_arguments)]
    pub fn read_idx_join1(
        &mut self,
        dev: &mut BlockDevice,
        table: u8,
        rule: u16,
        tia: u16,
        reset: bool,
        lba: u64,
        blocks: u32,
        at: SimTime,
    ) -> Result<(IndexRead, SimTime), CommandError> {
        let (layout, terms) = self.rule(table, rule).map_err(|e| refusal(e, at))?;
        let ti = self
            .table_indexes
            .get(&tia)
            .ok_or_else(|| refusal(FlixrError::UnknownTableIndex(tia), at))?;
        if ti.table != table {
            return Err(refusal(
                FlixrError::BadRule(format!(
                    "per-table index {tia} is built over table {}, not {table}",
                    ti.table
                )),
                at,
            ));
        }
        let Some(t) = self.tables.get(&table) else {
            return Err(refusal(FlixrError::NoEncoding(table), at));
        };
        let (schema, page_layout, kcol) = (t.schema.clone(), t.format.layout, ti.column);
        let k = t.format.page_lbas.max(1) as usize;
        let (reply, done, from) =
            self.filtered_read(dev, lba, blocks, at, |e| layout.may_match(e, &terms))?;
        let ls = dev.ftl().lba_size();
        let mut rows = 0usize;
        let mut bits = std::mem::take(&mut self.table_indexes.get_mut(&tia).expect("checked").bits);
        if reset {
            bits.fill(0);
        }
        let bounds = self.table_indexes[&tia].bounds.clone();
        let mut kv = Vec::new();
        let mut tv: Vec<Vec<i64>> = vec![Vec::new(); terms.len()];
        // A table page is `k` aligned LBAs: the LBAs returned are grouped by page. A page
        // only partly returned (the command's range cut it) cannot be parsed: its keys
        // are unknown, so every bucket is set (JOIN2 then skips nothing, never a match).
        let mut pages: Vec<&[u8]> = Vec::with_capacity(reply.lbas.len() / k + 1);
        let mut i = 0;
        while i < reply.lbas.len() {
            let first = reply.lbas[i];
            let whole = first % k as u64 == 0
                && i + k <= reply.lbas.len()
                && (0..k).all(|j| reply.lbas[i + j] == first + j as u64);
            if whole {
                pages.push(&reply.data[i * ls..(i + k) * ls]);
                i += k;
            } else {
                bits.fill(0xFF);
                i += 1;
            }
        }
        for p in pages {
            let Ok(view) = PageView::parse(p, &schema) else {
                continue;
            };
            if view.layout() != page_layout {
                continue;
            }
            let Ok(k) = view.column(kcol) else {
                continue;
            };
            kv.clear();
            if k.decode_i64_into(&mut kv).is_err() {
                continue;
            }
            let mut parsed = true;
            for ((col, _), v) in terms.iter().zip(tv.iter_mut()) {
                v.clear();
                parsed &= view
                    .column(*col)
                    .is_ok_and(|c| c.decode_i64_into(v).is_ok() && v.len() == kv.len());
            }
            if !parsed {
                continue;
            }
            rows += kv.len() * (1 + terms.len());
            for (i, key) in kv.iter().enumerate() {
                if terms.iter().zip(&tv).all(|((_, r), v)| r.matches(v[i])) {
                    let b = bucket(&bounds, *key);
                    bits[b / 8] |= 1 << (b % 8);
                }
            }
        }
        if let Some(ti) = self.table_indexes.get_mut(&tia) {
            ti.bits = bits;
        }
        // The scan of the pages read runs on the embedded cores as they arrive.
        let c = core_cycles(dev, Self::build_cycles(dev, reply.lbas.len(), rows));
        let cpu = dev.controller_mut().cpu(from, c);
        Ok((reply, done.max(cpu)))
    }

    /// READ_IDX_JOIN2 (§4.5 step 2): read the pages of `table` whose bitmap entry shares a
    /// bucket with the per-table index of join rule `(table, rule)`.
    pub fn read_idx_join2(
        &mut self,
        dev: &mut BlockDevice,
        table: u8,
        rule: u16,
        lba: u64,
        blocks: u32,
        at: SimTime,
    ) -> Result<(IndexRead, SimTime), CommandError> {
        let (tia, col) = *self
            .join_rules
            .get(&(table, rule))
            .ok_or_else(|| refusal(FlixrError::UnknownRule { table, rule }, at))?;
        let layout = self
            .key_layout(table)
            .ok_or_else(|| refusal(FlixrError::UnknownTable(table), at))?;
        let slot = layout.slots.iter().position(|s| s.column == col);
        let want = self
            .table_indexes
            .get(&tia)
            .map(|t| t.bits.clone())
            .ok_or_else(|| refusal(FlixrError::UnknownTableIndex(tia), at))?;
        let (reply, done, _) = self.filtered_read(dev, lba, blocks, at, |e| match e {
            Entry::Empty(x) if *x == table => false,
            _ => match (slot, layout.keys(e)) {
                (Some(i), Some(keys)) => match &keys[i] {
                    KeyEntry::Bitmap(bits) => bits.iter().zip(&want).any(|(a, b)| a & b != 0),
                    KeyEntry::Range { .. } => true,
                },
                _ => true,
            },
        })?;
        Ok((reply, done))
    }

    /// The bits of per-table index `tia` (bucket `i` is bit `i % 8` of byte `i / 8`).
    pub fn table_index_bits(&self, tia: u16) -> Option<&[u8]> {
        self.table_indexes.get(&tia).map(|t| t.bits.as_slice())
    }
}
