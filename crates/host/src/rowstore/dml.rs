//! INSERT, DELETE and UPDATE (flixr §6.3): the free-space map picks the page an insert
//! fills (the lowest-numbered page with room, as a heap's FSM does), a modification
//! reads the page, changes it on the host and writes it back whole (WRITE_IDX under
//! FLIXR, so the page's entry is recomputed), and the per-row indexes follow.
//!
//! Choices made here: there is no buffer pool; DELETE compacts the page, so a row id is
//! valid until its page is next modified.

use super::*;

/// The rows of pages being modified, by LBA (`None`: a row deleted).
type PageRows = HashMap<u64, Vec<Option<Vec<Value>>>>;

/// Per-row index entries, `(key, page)`.
type IndexEntries = Vec<(i64, u64)>;

impl RowStore {
    /// Insert `rows` into `t`; returns their ids (valid until their pages change).
    pub fn insert(&mut self, t: TableId, rows: &[Vec<Value>]) -> Result<Vec<RowId>, StoreError> {
        self.statement(|s| s.insert_stmt(t, rows))
    }

    /// [`Self::insert`] within the statement under way.
    fn insert_stmt(&mut self, t: TableId, rows: &[Vec<Value>]) -> Result<Vec<RowId>, StoreError> {
        self.check_mutable(t)?;
        let tb = self.table(t)?;
        let mut keys = Vec::with_capacity(rows.len());
        for r in rows {
            keys.push(Self::row_key(tb, r)?);
        }
        // Plan: pages with room, lowest first, then new pages; refuse before any I/O.
        let candidates = tb.room.iter().map(|&p| {
            let free = if p < tb.used {
                tb.free[p as usize] as usize
            } else {
                tb.cap as usize
            };
            (p, free)
        });
        let plan = crate::slotted::plan_insert(
            candidates,
            rows.len(),
            tb.cap as usize,
            tb.used,
            tb.def.max_pages,
        )
        .ok_or_else(|| StoreError::Full {
            table: tb.def.name.clone(),
            pages: tb.def.max_pages,
        })?;
        let (first, used, schema) = (tb.first, tb.used, tb.schema.clone());
        let old: Vec<u64> = plan
            .iter()
            .filter(|(p, _)| *p < used)
            .map(|(p, _)| first + p)
            .collect();
        let mut current: HashMap<u64, Vec<Vec<Value>>> = HashMap::new();
        let mut sorted_old = old.clone();
        sorted_old.sort_unstable();
        for (lba, bytes) in self.read_pages(&sorted_old)? {
            current.insert(lba, Self::parse_rows(&schema, &bytes));
        }
        let mut ids = Vec::with_capacity(rows.len());
        let mut writes = Vec::with_capacity(plan.len());
        let mut pairs = Vec::with_capacity(rows.len());
        let mut i = 0;
        for &(p, n) in &plan {
            let lba = first + p;
            let mut page = current.remove(&lba).unwrap_or_default();
            for _ in 0..n {
                ids.push(RowId {
                    page: lba,
                    slot: page.len() as u16,
                });
                pairs.push((keys[i], lba));
                page.push(rows[i].clone());
                i += 1;
            }
            writes.push((
                lba,
                Self::build_page(&schema, self.page, &page)?,
                page.len(),
            ));
        }
        self.host_cpu(rows.len() as f64 * self.cycles_per_record);
        self.saw_keys(t, keys.iter().copied());
        let tb = &mut self.tables[t.0];
        for (lba, _, len) in &writes {
            let p = lba - first;
            tb.free[p as usize] = tb.cap - *len as u16;
            if (*len as u16) < tb.cap {
                tb.room.insert(p);
            } else {
                tb.room.remove(&p);
            }
            tb.used = tb.used.max(p + 1);
        }
        tb.rows += rows.len() as u64;
        self.write_pages(t, writes.into_iter().map(|(l, b, _)| (l, b)).collect())?;
        self.index_update(t, &pairs, &[])?;
        Ok(ids)
    }

    /// Apply per-page changes: `del` slots removed, `upd` slots replaced. Ids must come
    /// from a scan after the pages' last change.
    pub(super) fn modify(
        &mut self,
        t: TableId,
        del: &[RowId],
        upd: &[(RowId, Vec<Value>)],
    ) -> Result<u64, StoreError> {
        let tb = self.table(t)?;
        let pages = Self::touched_pages(tb, del, upd)?;
        let (schema, key, first, cap) = (tb.schema.clone(), tb.key, tb.first, tb.cap);
        // Check every id first: nothing changes on a bad id.
        let ids = del.iter().chain(upd.iter().map(|u| &u.0));
        let mut contents = self.page_rows(&schema, &pages, ids)?;
        let (remove, insert, changed) = Self::change_rows(&mut contents, key, del, upd);
        let ndel = del.len() as u64;
        self.saw_keys(t, insert.iter().map(|p| p.0));
        let mut writes = Vec::new();
        let page_bytes = self.page;
        let tb = &mut self.tables[t.0];
        for lba in pages {
            let rows: Vec<Vec<Value>> = contents
                .remove(&lba)
                .unwrap_or_default()
                .into_iter()
                .flatten()
                .collect();
            let p = lba - first;
            tb.free[p as usize] = cap - rows.len() as u16;
            if (rows.len() as u16) < cap {
                tb.room.insert(p);
            }
            writes.push((lba, Self::build_page(&schema, page_bytes, &rows)?));
        }
        tb.rows -= ndel.min(tb.rows);
        self.host_cpu(changed as f64 * self.cycles_per_record);
        self.write_pages(t, writes)?;
        self.index_update(t, &insert, &remove)?;
        Ok(changed)
    }

    /// Delete the rows `ids` (from a scan after their pages' last change).
    pub fn delete(&mut self, t: TableId, ids: &[RowId]) -> Result<u64, StoreError> {
        self.statement(|s| s.delete_stmt(t, ids))
    }

    /// [`Self::delete`] within the statement under way.
    fn delete_stmt(&mut self, t: TableId, ids: &[RowId]) -> Result<u64, StoreError> {
        self.check_mutable(t)?;
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        self.modify(t, &ids, &[])
    }

    /// Replace rows: `(id, new values)`.
    pub fn update(&mut self, t: TableId, rows: &[(RowId, Vec<Value>)]) -> Result<u64, StoreError> {
        self.statement(|s| s.update_stmt(t, rows))
    }

    /// [`Self::update`] within the statement under way.
    fn update_stmt(&mut self, t: TableId, rows: &[(RowId, Vec<Value>)]) -> Result<u64, StoreError> {
        self.check_mutable(t)?;
        self.modify(t, &[], rows)
    }

    /// DELETE ... WHERE lo <= key <= hi AND pred: returns rows deleted.
    pub fn delete_where(
        &mut self,
        t: TableId,
        lo: i64,
        hi: i64,
        pred: &dyn Fn(&[Value]) -> bool,
    ) -> Result<u64, StoreError> {
        self.statement(|s| {
            let rows = s.scan_where(t, lo, hi, pred)?;
            if rows.is_empty() {
                return Ok(0);
            }
            let ids: Vec<RowId> = rows.iter().map(|r| r.id).collect();
            s.delete(t, &ids)
        })
    }

    /// UPDATE ... SET f(row) WHERE lo <= key <= hi AND pred: returns rows updated.
    pub fn update_where(
        &mut self,
        t: TableId,
        lo: i64,
        hi: i64,
        pred: &dyn Fn(&[Value]) -> bool,
        f: &dyn Fn(&mut Vec<Value>),
    ) -> Result<u64, StoreError> {
        self.statement(|s| {
            let rows = s.scan_where(t, lo, hi, pred)?;
            if rows.is_empty() {
                return Ok(0);
            }
            let upd: Vec<(RowId, Vec<Value>)> = rows
                .into_iter()
                .map(|mut r| {
                    f(&mut r.values);
                    (r.id, r.values)
                })
                .collect();
            s.update(t, &upd)
        })
    }

    /// The pages `del` and `upd` name, sorted, each once; refused when an updated row
    /// does not encode or a page is not one of `tb`'s.
    fn touched_pages(
        tb: &Table,
        del: &[RowId],
        upd: &[(RowId, Vec<Value>)],
    ) -> Result<Vec<u64>, StoreError> {
        for (_, v) in upd {
            Self::row_key(tb, v)?;
        }
        let mut pages: Vec<u64> = del
            .iter()
            .map(|r| r.page)
            .chain(upd.iter().map(|r| r.0.page))
            .collect();
        pages.sort_unstable();
        pages.dedup();
        if let Some(bad) = pages
            .iter()
            .find(|&&p| p < tb.first || p >= tb.first + tb.used)
        {
            return Err(StoreError::Invalid(format!(
                "row id on page {bad} is not a page of table {:?}",
                tb.def.name
            )));
        }
        Ok(pages)
    }

    /// Read `pages` and their rows; refused (nothing changed) when one of `ids` names
    /// no row.
    fn page_rows<'a>(
        &mut self,
        schema: &Schema,
        pages: &[u64],
        ids: impl Iterator<Item = &'a RowId>,
    ) -> Result<PageRows, StoreError> {
        let read = self.read_pages(pages)?;
        let mut contents: PageRows = HashMap::new();
        for (lba, bytes) in read {
            contents.insert(
                lba,
                Self::parse_rows(schema, &bytes)
                    .into_iter()
                    .map(Some)
                    .collect(),
            );
        }
        for id in ids {
            let ok = contents
                .get(&id.page)
                .is_some_and(|rows| (id.slot as usize) < rows.len());
            if !ok {
                return Err(StoreError::Invalid(format!(
                    "row id {}:{} names no row (stale after a change to its page?)",
                    id.page, id.slot
                )));
            }
        }
        Ok(contents)
    }

    /// Apply `upd` and `del` to the rows in `contents` (a deleted row leaves `None`);
    /// returns the index entries to remove and to insert (`(key, page)`, key column
    /// `key`) and the rows changed.
    fn change_rows(
        contents: &mut PageRows,
        key: usize,
        del: &[RowId],
        upd: &[(RowId, Vec<Value>)],
    ) -> (IndexEntries, IndexEntries, u64) {
        let mut remove = Vec::new();
        let mut insert = Vec::new();
        let mut changed = 0u64;
        for (id, v) in upd {
            if let Some(slot) = contents
                .get_mut(&id.page)
                .and_then(|r| r.get_mut(id.slot as usize))
                && let Some(old) = slot.as_ref()
            {
                let ok = old.get(key).and_then(value_i64);
                let nk = v.get(key).and_then(value_i64);
                if ok != nk
                    && let (Some(a), Some(b)) = (ok, nk)
                {
                    remove.push((a, id.page));
                    insert.push((b, id.page));
                }
                *slot = Some(v.clone());
                changed += 1;
            }
        }
        for id in del {
            if let Some(slot) = contents
                .get_mut(&id.page)
                .and_then(|r| r.get_mut(id.slot as usize))
                && let Some(old) = slot.take()
            {
                if let Some(k) = old.get(key).and_then(value_i64) {
                    remove.push((k, id.page));
                }
                changed += 1;
            }
        }
        (remove, insert, changed)
    }
}
