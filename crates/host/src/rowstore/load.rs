//! Creating and loading tables (flixr §5, §6 set-up): CREATE TABLE with its index
//! configuration (SEND_TBL_COL and SEND_IDX_ENC under FLIXR, a B+tree node region under
//! the tree kinds), bulk loading through WRITE_IDX or Write with the indexes built
//! alongside, and secondary keys (flixr §3.1, §6.4).
//!
//! Choices made here: a table is a fixed extent of `max_pages` LBAs followed by its
//! B+tree node region; pages are filled to capacity on load; a table with secondary
//! host trees is read-only (its modifications would need the trees' maintenance too).

use super::*;

impl RowStore {
    /// Create a table (registers its format and encoding with the device under FLIXR).
    pub fn create_table(&mut self, def: TableDef) -> Result<TableId, StoreError> {
        if self.table_id(&def.name).is_some() {
            return Err(StoreError::Invalid(format!(
                "table {:?} exists already",
                def.name
            )));
        }
        let (schema, key, cap) = Self::table_schema(&def, self.page)?;
        // Node region: one leaf per ~half-full node of entries, and inner levels.
        let entries = def.max_pages * cap as u64;
        let tree_lbas = if self.kind.host_tree() || self.kind == IndexKind::SsdBtree {
            super::tree_region_lbas(entries, self.node)
        } else {
            0
        };
        let first = self.next_lba;
        let end = first + def.max_pages + tree_lbas;
        let lbas = self.client.identify().lbas;
        if end > lbas {
            return Err(StoreError::Invalid(format!(
                "table {:?} needs LBAs {first}..{end}, the device has {lbas}",
                def.name
            )));
        }
        let dev_id = if self.kind.flixr() {
            self.register_flixr(&def)?
        } else {
            0
        };
        let tree_region = (first + def.max_pages, tree_lbas);
        let tree = if self.kind.host_tree() {
            Some(PagedBtree::with_node_bytes(
                tree_region.0,
                tree_region.1,
                self.node,
            )?)
        } else {
            None
        };
        // The in-SSD index is created by the first load or insert.
        let ssd = None;
        self.next_lba = end;
        self.tables.push(Table {
            free: vec![cap as u16; def.max_pages as usize],
            def,
            schema,
            key,
            dev_id,
            first,
            used: 0,
            room: BTreeSet::new(),
            cap: cap as u16,
            rows: 0,
            tree,
            ssd,
            tree_region,
            hs: HsTree::default(),
            tia: HashMap::new(),
            join_rules: HashMap::new(),
            keys: None,
            secondary: Vec::new(),
        });
        Ok(TableId(self.tables.len() - 1))
    }

    /// A table definition's schema, key column and rows per page; refused when the key
    /// is not numeric, a row does not fit a page or `max_pages` is 0.
    fn table_schema(def: &TableDef, page: usize) -> Result<(Schema, usize, usize), StoreError> {
        let schema = Schema::new(
            def.name.clone(),
            def.columns
                .iter()
                .map(|(n, t)| Column::new(n.clone(), *t))
                .collect(),
        )
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
        let key = schema
            .column_index(&def.key)
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        if !def.columns[key].1.is_numeric() {
            return Err(StoreError::Invalid(format!(
                "key column {:?} must be numeric",
                def.key
            )));
        }
        let cap = csd_table::page::capacity_for(&schema, Layout::Nsm, page)
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        if def.max_pages == 0 || cap == 0 {
            return Err(StoreError::Invalid(format!(
                "table {:?}: max_pages must be at least 1 and a row must fit a page",
                def.name
            )));
        }
        Ok((schema, key, cap))
    }

    /// Register a table with FLIXR: SEND_TBL_COL, then SEND_IDX_ENC on its key; returns
    /// the device's table id.
    fn register_flixr(&mut self, def: &TableDef) -> Result<u8, StoreError> {
        let c = self.sync(Command::SendTblCol(TableFormat {
            name: def.name.clone(),
            columns: def
                .columns
                .iter()
                .map(|(n, t)| Column::new(n.clone(), *t))
                .collect(),
            layout: Layout::Nsm,
            page_lbas: 1,
        }))?;
        let id = match c.0.payload {
            Payload::FlixrTable(id) => id,
            p => return Err(StoreError::Invalid(format!("SendTblCol answered {p:?}"))),
        };
        let encoding = match &def.encoding {
            KeyEncoding::Range => IndexEncoding::Range,
            KeyEncoding::Bitmap(b) => IndexEncoding::Bitmap { bounds: b.clone() },
        };
        self.sync(Command::SendIdxEnc {
            table: id,
            spec: IndexSpec {
                column: def.key.clone(),
                encoding,
            },
        })?;
        Ok(id)
    }

    /// Check `values` against `t`'s schema and get its key.
    pub(super) fn row_key(tb: &Table, values: &[Value]) -> Result<i64, StoreError> {
        tb.schema
            .encode_row_vec(values)
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        values
            .get(tb.key)
            .and_then(value_i64)
            .ok_or_else(|| StoreError::Invalid("row has no numeric key".into()))
    }

    pub(super) fn build_page(
        schema: &Schema,
        page: usize,
        rows: &[Vec<Value>],
    ) -> Result<Vec<u8>, StoreError> {
        crate::slotted::build_page(schema, Layout::Nsm, page, rows)
            .map_err(|e| StoreError::Invalid(e.to_string()))
    }

    pub(super) fn parse_rows(schema: &Schema, page: &[u8]) -> Vec<Vec<Value>> {
        crate::slotted::parse_rows(schema, page)
    }

    /// Bulk-load `rows` into an empty table `t`: pages packed in order, written MDTS at a
    /// time, then the index built (B+tree bulk load, or UPDATE_HOST_INDEX per page).
    pub fn load(&mut self, t: TableId, rows: &[Vec<Value>]) -> Result<(), StoreError> {
        let tb = self.table(t)?;
        if tb.used != 0 {
            return Err(StoreError::Invalid(format!(
                "load needs an empty table; {:?} has pages",
                tb.def.name
            )));
        }
        let cap = tb.cap as usize;
        let pages = rows.len().div_ceil(cap) as u64;
        if pages > tb.def.max_pages {
            return Err(StoreError::Full {
                table: tb.def.name.clone(),
                pages: tb.def.max_pages,
            });
        }
        let mut keys = Vec::with_capacity(rows.len());
        for r in rows {
            keys.push(Self::row_key(tb, r)?);
        }
        let (first, schema, dev_id) = (tb.first, tb.schema.clone(), tb.dev_id);
        let mdts = self.client.identify().mdts_blocks as usize;
        let mut cmds = Vec::new();
        for (ci, chunk) in rows.chunks(cap * mdts).enumerate() {
            let mut data = Vec::with_capacity(mdts * self.page);
            for p in chunk.chunks(cap) {
                data.extend(Self::build_page(&schema, self.page, p)?);
            }
            let lba = first + (ci * mdts) as u64;
            cmds.push(if self.kind.flixr() {
                Command::WriteIdx {
                    table: dev_id,
                    lba,
                    data,
                }
            } else {
                Command::Write { lba, data }
            });
        }
        self.host_cpu(rows.len() as f64 * self.cycles_per_record);
        let done = self.pipelined(cmds)?;
        let end = done.iter().map(|c| c.0.acct.completed).max();
        if let Some(e) = end {
            self.client.wait_until(e);
        }
        self.traffic.data_pages_written += pages;
        let tb = &mut self.tables[t.0];
        tb.used = pages;
        tb.rows = rows.len() as u64;
        for p in 0..pages {
            let n = rows.len().saturating_sub(p as usize * cap).min(cap);
            tb.free[p as usize] = (cap - n) as u16;
            if n < cap {
                tb.room.insert(p);
            }
        }
        self.saw_keys(t, keys.iter().copied());
        let pairs: Vec<(i64, u64)> = keys
            .iter()
            .enumerate()
            .map(|(i, &k)| (k, first + (i / cap) as u64))
            .collect();
        self.index_bulk(t, pairs, pages)?;
        // Secondary host trees over their columns.
        for si in 0..self.tables[t.0].secondary.len() {
            let col = self.tables[t.0].secondary[si].0;
            let mut pairs: Vec<(i64, u64)> = rows
                .iter()
                .enumerate()
                .filter_map(|(i, r)| {
                    Some((r.get(col).and_then(value_i64)?, first + (i / cap) as u64))
                })
                .collect();
            pairs.sort_unstable();
            let mut touch = Touch::default();
            let Some(tree) = self.tables[t.0].secondary[si].1.as_mut() else {
                continue;
            };
            tree.bulk_load(pairs, 0.7, &mut touch)?;
            let n = touch.written.len() as f64;
            self.host_cpu(n * self.opts.host_node_cycles);
            self.write_nodes_of(t, Some(si), &touch)?;
        }
        Ok(())
    }

    /// Add a secondary key on `column` of the empty table `t` (see the module docs):
    /// under FLIXR a further per-page encoding of the table (refused, nothing changed,
    /// when the device cannot pack it), under the host B+tree kinds a second tree.
    pub fn add_secondary(
        &mut self,
        t: TableId,
        column: &str,
        encoding: KeyEncoding,
    ) -> Result<(), StoreError> {
        let tb = self.table(t)?;
        if tb.used != 0 {
            return Err(StoreError::Invalid(format!(
                "add secondary keys to {:?} before loading it",
                tb.def.name
            )));
        }
        let col = tb
            .schema
            .column_index(column)
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        if col == tb.key || tb.secondary.iter().any(|(c, _)| *c == col) {
            return Err(StoreError::Invalid(format!(
                "{:?} already has a key on {column:?}",
                tb.def.name
            )));
        }
        if !tb.def.columns[col].1.is_numeric() {
            return Err(StoreError::Invalid(format!(
                "secondary key column {column:?} must be numeric"
            )));
        }
        let (dev_id, max_pages, cap) = (tb.dev_id, tb.def.max_pages, tb.cap as u64);
        let tree = if self.kind.flixr() {
            let encoding = match encoding {
                KeyEncoding::Range => IndexEncoding::Range,
                KeyEncoding::Bitmap(b) => IndexEncoding::Bitmap { bounds: b },
            };
            self.sync(Command::SendIdxEnc {
                table: dev_id,
                spec: IndexSpec {
                    column: column.to_string(),
                    encoding,
                },
            })?;
            None
        } else if self.kind.host_tree() {
            let lbas = super::tree_region_lbas(max_pages * cap, self.node);
            let first = self.next_lba;
            let end = first + lbas;
            let have = self.client.identify().lbas;
            if end > have {
                return Err(StoreError::Invalid(format!(
                    "the secondary tree needs LBAs {first}..{end}, the device has {have}"
                )));
            }
            self.next_lba = end;
            Some(PagedBtree::with_node_bytes(first, lbas, self.node)?)
        } else {
            None
        };
        self.tables[t.0].secondary.push((col, tree));
        Ok(())
    }

    /// Refuse row changes on a table whose secondary keys are host trees.
    pub(super) fn check_mutable(&self, t: TableId) -> Result<(), StoreError> {
        let tb = self.table(t)?;
        if tb.secondary.iter().any(|(_, tr)| tr.is_some()) {
            return Err(StoreError::Invalid(format!(
                "{:?} has secondary host B+trees, kept for bulk-loaded tables only: INSERT, DELETE and UPDATE are refused",
                tb.def.name
            )));
        }
        Ok(())
    }
}
