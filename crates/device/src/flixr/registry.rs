//! The FLIXR registries (flixr §4.2, §4.4): SEND_TBL_COL (the TSIA), SEND_IDX_ENC and
//! DROP_IDX_ENC (the IERA, up to `MAX_KEYS` encodings a table), the comparison rules
//! (SEND_IDX_ICR on one key, over several keys) and their drops, and the registry's
//! controller blob.
//!
//! Choices made here: tables and encodings persist in the FTL's controller blob (a log
//! force before the command completes) so recovery can recompute entries; rules are
//! query state and are lost with power. The blob keeps the bytes of older images:
//! version 1 when every page is one LBA and one key, version 2 with pages of several
//! LBAs, version 3 with several keys and the generation.

use super::*;

pub(super) const BLOB_MAGIC: &[u8; 4] = b"FXR1";

pub(super) const BLOB_MAGIC_V2: &[u8; 4] = b"FXR2";

pub(super) const BLOB_MAGIC_V3: &[u8; 4] = b"FXR3";

pub(super) const BLOB_MAGIC_V4: &[u8; 4] = b"FXR4";

/// A version-4 column flag: the column is nullable.
const COL_NULLABLE: u8 = 1;
/// A version-4 column flag: a time zone (a string) follows.
const COL_TZ: u8 = 2;

impl Flixr {
    pub(super) fn need_ext(dev: &BlockDevice, need: u32) -> Result<usize, FlixrError> {
        let have = dev.ftl().config().ext_bytes;
        if have < need {
            return Err(FlixrError::NoExtension { have, need });
        }
        Ok(have as usize)
    }

    /// Keep the registry in the FTL's controller blob, durable before the command
    /// completes: a log force (with whatever else the log held) from the command's
    /// instant ([`Flixr::begin_command`]), whose completion [`Flixr::durable_at`] gives.
    pub(super) fn persist(
        &mut self,
        dev: &mut BlockDevice,
        tables: &BTreeMap<u8, TableEntry>,
    ) -> Result<(), FlixrError> {
        if let Some(why) = &self.unreadable {
            return Err(FlixrError::UnreadableRegistry(why.clone()));
        }
        let blob = encode_registry(tables);
        let done = dev
            .ftl_mut()
            .set_blob(&blob)
            .and_then(|_| dev.ftl_mut().flush(self.cmd_at))
            .map_err(|e| FlixrError::Full(format!("cannot keep the FLIXR registry: {e}")))?;
        self.durable_at = self.durable_at.max(done);
        Ok(())
    }

    /// SEND_TBL_COL: register a table's row format; returns its table id.
    pub fn register_table(
        &mut self,
        dev: &mut BlockDevice,
        f: TableFormat,
    ) -> Result<u8, FlixrError> {
        Self::need_ext(dev, 8)?;
        let schema = Schema::new(f.name.clone(), f.columns.clone())
            .map_err(|e| FlixrError::BadTable(e.to_string()))?;
        if f.page_lbas == 0 || f.page_lbas > 64 {
            return Err(FlixrError::BadTable(format!(
                "a table page spans 1..=64 LBAs, not {}",
                f.page_lbas
            )));
        }
        let page = dev.ftl().lba_size() * f.page_lbas as usize;
        csd_table::page::capacity_for(&schema, f.layout, page)
            .map_err(|e| FlixrError::BadTable(format!("{e} (a table page is {page} bytes)")))?;
        if self.tables.values().any(|t| t.format.name == f.name) {
            return Err(FlixrError::BadTable(format!(
                "a table named {:?} is already registered",
                f.name
            )));
        }
        let Some(id) = (1..=MAX_TABLES as u8).find(|i| !self.tables.contains_key(i)) else {
            return Err(FlixrError::Full(format!(
                "the TSIA holds {MAX_TABLES} tables"
            )));
        };
        let mut next = self.tables.clone();
        next.insert(id, TableEntry::new(f, schema));
        self.persist(dev, &next)?;
        self.tables = next;
        Ok(id)
    }

    /// SEND_IDX_ENC: add a per-page index (key) on a column of table `table`. The first
    /// key keeps the version-1 entry format; a second or later one packs all keys into
    /// version-2 entries of a new generation (see the module docs). Refused, with nothing
    /// registered, when the column already has a key, the table has [`MAX_KEYS`], or the
    /// packed entry would not fit the device's extension bytes.
    pub fn register_encoding(
        &mut self,
        dev: &mut BlockDevice,
        table: u8,
        spec: IndexSpec,
    ) -> Result<(), FlixrError> {
        let t = self
            .tables
            .get(&table)
            .ok_or(FlixrError::UnknownTable(table))?;
        let col = t.schema.column_index(&spec.column).map_err(|_| {
            FlixrError::BadEncoding(format!(
                "table {:?} has no column {:?} (columns: {})",
                t.format.name,
                spec.column,
                t.format
                    .columns
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        if t.keys.iter().any(|(c, _)| *c == col) {
            return Err(FlixrError::EncodingExists(table));
        }
        let ty = t.format.columns[col].ty;
        if KeyKind::of(ty).is_none() {
            return Err(FlixrError::BadEncoding(format!(
                "column {:?} is {ty}: per-page indexes cover integers, DATE, TIMESTAMP, \
                 DECIMAL(p <= 18), floats and strings (CHAR, VARCHAR, VARBINARY)",
                spec.column
            )));
        }
        match &spec.encoding {
            IndexEncoding::Range => {
                Self::need_ext(dev, RANGE_ENTRY_BYTES)?;
            }
            IndexEncoding::Bitmap { bounds } => {
                let ext = Self::need_ext(dev, 5)?;
                let max = (ext - 4) * 8;
                if bounds.is_empty() || bounds.len() + 1 > max {
                    return Err(FlixrError::BadEncoding(format!(
                        "a bitmap has 2..={max} buckets on this device ({ext} extension bytes); {} split points make {}",
                        bounds.len(),
                        bounds.len() + 1
                    )));
                }
                if bounds.windows(2).any(|w| w[0] >= w[1]) {
                    return Err(FlixrError::BadEncoding(
                        "bitmap split points must be strictly increasing".into(),
                    ));
                }
            }
        }
        if t.keys.len() >= MAX_KEYS {
            return Err(FlixrError::Full(format!(
                "table {table} already has {MAX_KEYS} per-page index keys"
            )));
        }
        let mut e = t.clone();
        e.generation = if e.keys.is_empty() && e.generation == 0 {
            0
        } else {
            e.generation.wrapping_add(1).max(1)
        };
        e.keys.push((col, spec.encoding));
        let layout = KeyLayout::of(table, &e);
        let have = dev.ftl().config().ext_bytes;
        if layout.entry_bytes() > have as usize {
            let detail = std::iter::once("4 header".to_string())
                .chain(layout.slots.iter().map(|s| {
                    let kind = match &s.encoding {
                        IndexEncoding::Range => "range",
                        IndexEncoding::Bitmap { .. } => "bitmap",
                    };
                    format!("{} {kind} {}", e.format.columns[s.column].name, s.width)
                }))
                .collect::<Vec<_>>()
                .join(" + ");
            return Err(FlixrError::KeysDoNotFit {
                need: layout.entry_bytes() as u32,
                have,
                detail,
            });
        }
        let mut next = self.tables.clone();
        next.insert(table, e);
        self.persist(dev, &next)?;
        self.tables = next;
        Ok(())
    }

    /// DropIdxEnc: remove the key on `column` of `table` (durably). The table's entries
    /// get a new generation: pages keep being read until they are rewritten. Rule terms
    /// and join rules on the column then rule nothing out.
    pub fn drop_encoding(
        &mut self,
        dev: &mut BlockDevice,
        table: u8,
        column: &str,
    ) -> Result<(), FlixrError> {
        let t = self
            .tables
            .get(&table)
            .ok_or(FlixrError::UnknownTable(table))?;
        let pos = t
            .schema
            .column_index(column)
            .ok()
            .and_then(|c| t.keys.iter().position(|(k, _)| *k == c))
            .ok_or_else(|| {
                FlixrError::BadEncoding(format!(
                    "table {:?} has no per-page index on column {column:?} (indexed: {})",
                    t.format.name,
                    t.indexed_names()
                ))
            })?;
        let mut e = t.clone();
        e.keys.remove(pos);
        e.generation = e.generation.wrapping_add(1).max(1);
        let mut next = self.tables.clone();
        next.insert(table, e);
        self.persist(dev, &next)?;
        self.tables = next;
        Ok(())
    }

    /// The layout of `table`'s entries (which key at which offset), if it is registered.
    pub fn key_layout(&self, table: u8) -> Option<KeyLayout> {
        self.tables.get(&table).map(|t| KeyLayout::of(table, t))
    }

    pub(super) fn check_rule(rule: &IndexRule) -> Result<(), FlixrError> {
        match rule {
            IndexRule::Between { lo, hi } if lo > hi => Err(FlixrError::BadRule(format!(
                "empty range: lo {lo} > hi {hi}"
            ))),
            IndexRule::In(vs) if vs.is_empty() || vs.len() > MAX_RULE_VALUES => {
                Err(FlixrError::BadRule(format!(
                    "an IN list has 1..={MAX_RULE_VALUES} values, got {}",
                    vs.len()
                )))
            }
            _ => Ok(()),
        }
    }

    pub(super) fn add_rule(
        &mut self,
        table: u8,
        terms: Vec<(usize, IndexRule)>,
    ) -> Result<u16, FlixrError> {
        let t = self
            .tables
            .get_mut(&table)
            .ok_or(FlixrError::UnknownTable(table))?;
        if t.rules.len() >= MAX_RULES_PER_TABLE {
            return Err(FlixrError::Full(format!(
                "table {table} already has {MAX_RULES_PER_TABLE} rules"
            )));
        }
        let mut id = t.next_rule;
        while t.rules.contains_key(&id) {
            id = id.wrapping_add(1).max(1);
        }
        t.next_rule = id.wrapping_add(1).max(1);
        t.rules.insert(id, terms);
        Ok(id)
    }

    /// SEND_IDX_ICR: register a comparison rule on the first key of `table`; returns its
    /// rule id.
    pub fn register_rule(&mut self, table: u8, rule: IndexRule) -> Result<u16, FlixrError> {
        let t = self
            .tables
            .get(&table)
            .ok_or(FlixrError::UnknownTable(table))?;
        let Some((col, _)) = t.keys.first() else {
            return Err(FlixrError::NoEncoding(table));
        };
        let col = *col;
        Self::check_rule(&rule)?;
        self.add_rule(table, vec![(col, rule)])
    }

    /// SEND_IDX_ICR over several keys: a rule whose terms (one predicate per indexed
    /// column, ANDed) are compared with the matching keys of each entry; returns its id.
    pub fn register_rule_terms(
        &mut self,
        table: u8,
        terms: Vec<RuleTerm>,
    ) -> Result<u16, FlixrError> {
        let t = self
            .tables
            .get(&table)
            .ok_or(FlixrError::UnknownTable(table))?;
        if t.keys.is_empty() {
            return Err(FlixrError::NoEncoding(table));
        }
        if terms.is_empty() || terms.len() > MAX_RULE_TERMS {
            return Err(FlixrError::BadRule(format!(
                "a rule has 1..={MAX_RULE_TERMS} terms, got {}",
                terms.len()
            )));
        }
        let mut out = Vec::with_capacity(terms.len());
        for term in terms {
            let col = t
                .schema
                .column_index(&term.column)
                .ok()
                .filter(|c| t.keys.iter().any(|(k, _)| k == c))
                .ok_or_else(|| {
                    FlixrError::BadRule(format!(
                        "column {:?} of table {:?} has no per-page index (indexed: {})",
                        term.column,
                        t.format.name,
                        t.indexed_names()
                    ))
                })?;
            Self::check_rule(&term.rule)?;
            out.push((col, term.rule));
        }
        self.add_rule(table, out)
    }

    /// Release rule `(table, rule)`.
    pub fn drop_rule(&mut self, table: u8, rule: u16) -> Result<(), FlixrError> {
        let t = self
            .tables
            .get_mut(&table)
            .ok_or(FlixrError::UnknownTable(table))?;
        t.rules
            .remove(&rule)
            .map(|_| ())
            .ok_or(FlixrError::UnknownRule { table, rule })
    }

    /// DropTblCol: remove `table` (format, encoding, rules, join rules and per-table
    /// indexes over it) from the registries, durably.
    pub fn drop_table(&mut self, dev: &mut BlockDevice, table: u8) -> Result<(), FlixrError> {
        if !self.tables.contains_key(&table) {
            return Err(FlixrError::UnknownTable(table));
        }
        let mut next = self.tables.clone();
        next.remove(&table);
        self.persist(dev, &next)?;
        self.tables = next;
        let gone: Vec<u16> = self
            .table_indexes
            .iter()
            .filter(|(_, t)| t.table == table)
            .map(|(id, _)| *id)
            .collect();
        self.table_indexes.retain(|_, t| t.table != table);
        self.join_rules
            .retain(|(t, _), (tia, _)| *t != table && !gone.contains(tia));
        Ok(())
    }

    /// LBAs per page of `table`, if it is registered.
    pub fn page_lbas(&self, table: u8) -> Option<u32> {
        self.tables.get(&table).map(|t| t.format.page_lbas)
    }

    /// The registered table ids and names.
    pub fn tables(&self) -> Vec<(u8, String)> {
        self.tables
            .iter()
            .map(|(id, t)| (*id, t.format.name.clone()))
            .collect()
    }
}

// The registry as the controller blob: tables and encodings (rules are not kept).
pub(super) fn encode_registry(tables: &BTreeMap<u8, TableEntry>) -> Vec<u8> {
    // Version 1 when every page is one LBA (the bytes stay those of older images);
    // version 2 adds each table's LBAs per page after its index; version 3 (a table with
    // several keys, or whose keys changed) has a key count, the keys and the generation
    // in place of the one index, then the LBAs per page; version 4 (a nullable column,
    // or a time zone, which the page's schema fingerprint covers) is version 3 with a
    // flags byte after each column's type (1: nullable, 2: a time zone string follows).
    let v4 = tables.values().any(|t| {
        t.format
            .columns
            .iter()
            .any(|c| c.nullable || c.tz.is_some())
    });
    let v3 = v4
        || tables
            .values()
            .any(|t| t.generation != 0 || t.keys.len() > 1);
    let v2 = !v3 && tables.values().any(|t| t.format.page_lbas != 1);
    let mut v = if v4 {
        BLOB_MAGIC_V4
    } else if v3 {
        BLOB_MAGIC_V3
    } else if v2 {
        BLOB_MAGIC_V2
    } else {
        BLOB_MAGIC
    }
    .to_vec();
    let key = |v: &mut Vec<u8>, col: usize, enc: &IndexEncoding| match enc {
        IndexEncoding::Range => {
            v.push(1);
            v.extend_from_slice(&(col as u16).to_le_bytes());
        }
        IndexEncoding::Bitmap { bounds } => {
            v.push(2);
            v.extend_from_slice(&(col as u16).to_le_bytes());
            v.extend_from_slice(&(bounds.len() as u16).to_le_bytes());
            for b in bounds {
                v.extend_from_slice(&b.to_le_bytes());
            }
        }
    };
    let s = |v: &mut Vec<u8>, x: &str| {
        v.extend_from_slice(&(x.len() as u16).to_le_bytes());
        v.extend_from_slice(x.as_bytes());
    };
    v.push(tables.len() as u8);
    for (id, t) in tables {
        v.push(*id);
        s(&mut v, &t.format.name);
        v.push(t.format.layout.code());
        v.extend_from_slice(&(t.format.columns.len() as u16).to_le_bytes());
        for c in &t.format.columns {
            s(&mut v, &c.name);
            v.push(c.ty.tag());
            v.extend_from_slice(&c.ty.param().to_le_bytes());
            if v4 {
                let flags = if c.nullable { COL_NULLABLE } else { 0 }
                    | if c.tz.is_some() { COL_TZ } else { 0 };
                v.push(flags);
                if let Some(tz) = &c.tz {
                    s(&mut v, tz);
                }
            }
        }
        if v3 {
            v.push(t.keys.len() as u8);
            for (col, enc) in &t.keys {
                key(&mut v, *col, enc);
            }
            v.push(t.generation);
        } else {
            match t.keys.first() {
                None => v.push(0),
                Some((col, enc)) => key(&mut v, *col, enc),
            }
        }
        if v2 || v3 {
            v.extend_from_slice(&t.format.page_lbas.to_le_bytes());
        }
    }
    v
}

pub(super) fn decode_registry(b: &[u8]) -> Option<BTreeMap<u8, TableEntry>> {
    if b.is_empty() {
        return Some(BTreeMap::new());
    }
    let mut r = Blob { b, p: 0 };
    let version = match r.take(4)? {
        m if m == BLOB_MAGIC => 1,
        m if m == BLOB_MAGIC_V2 => 2,
        m if m == BLOB_MAGIC_V3 => 3,
        m if m == BLOB_MAGIC_V4 => 4,
        _ => return None,
    };
    let n = r.u8()?;
    let mut out = BTreeMap::new();
    for _ in 0..n {
        let id = r.u8()?;
        out.insert(id, r.table(version)?);
    }
    Some(out)
}

/// A cursor over the registry blob; every read is `None` past its end.
struct Blob<'a> {
    b: &'a [u8],
    p: usize,
}

impl Blob<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.b.get(self.p..self.p + n)?;
        self.p += n;
        Some(s)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|s| s[0])
    }

    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|s| u16::from_le_bytes([s[0], s[1]]))
    }

    fn string(&mut self) -> Option<String> {
        let n = self.u16()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }

    /// A column: name, type tag and parameter; from version 4 its flags (nullable, a
    /// time zone) and time zone.
    fn column(&mut self, version: u8) -> Option<Column> {
        let cn = self.string()?;
        let tag = self.u8()?;
        let par = self.u16()?;
        let c = Column::new(cn, ColumnType::from_tag(tag, par)?);
        if version < 4 {
            return Some(c);
        }
        let flags = self.u8()?;
        if flags & !(COL_NULLABLE | COL_TZ) != 0 {
            return None;
        }
        let tz = if flags & COL_TZ != 0 {
            Some(self.string()?)
        } else {
            None
        };
        Some(c.with_nullable(flags & COL_NULLABLE != 0).with_tz(tz))
    }

    /// A key of `kind` (1 range, 2 bitmap): its column and encoding.
    fn key(&mut self, kind: u8) -> Option<(usize, IndexEncoding)> {
        match kind {
            1 => Some((self.u16()? as usize, IndexEncoding::Range)),
            2 => {
                let col = self.u16()? as usize;
                let nb = self.u16()?;
                let mut bounds = Vec::new();
                for _ in 0..nb {
                    bounds.push(i64::from_le_bytes(self.take(8)?.try_into().ok()?));
                }
                Some((col, IndexEncoding::Bitmap { bounds }))
            }
            _ => None,
        }
    }

    /// A table's keys and generation: several and a generation in version 3, at most
    /// one (kind 0: none) before.
    fn keys(&mut self, version: u8) -> Option<(Vec<(usize, IndexEncoding)>, u8)> {
        if version >= 3 {
            let n = self.u8()?;
            let mut keys = Vec::new();
            for _ in 0..n {
                let kind = self.u8()?;
                keys.push(self.key(kind)?);
            }
            Some((keys, self.u8()?))
        } else {
            match self.u8()? {
                0 => Some((Vec::new(), 0)),
                kind => Some((vec![self.key(kind)?], 0)),
            }
        }
    }

    /// One table's entry of a blob of `version`.
    fn table(&mut self, version: u8) -> Option<TableEntry> {
        let name = self.string()?;
        let layout = Layout::from_code(self.u8()?)?;
        let nc = self.u16()?;
        let mut columns = Vec::new();
        for _ in 0..nc {
            columns.push(self.column(version)?);
        }
        let (keys, generation) = self.keys(version)?;
        if keys.iter().any(|(c, _)| *c >= columns.len()) {
            return None;
        }
        let page_lbas = if version >= 2 {
            u32::from_le_bytes(self.take(4)?.try_into().ok()?)
        } else {
            1
        };
        let schema = Schema::new(name.clone(), columns.clone()).ok()?;
        Some(TableEntry {
            format: TableFormat {
                name,
                columns,
                layout,
                page_lbas,
            },
            schema,
            keys,
            generation,
            rules: BTreeMap::new(),
            next_rule: 1,
        })
    }
}
