//! Joins (flixr §4.5, §6.5): under FLIXR READ_IDX_JOIN1 over the outer table (building
//! the per-table join-key bitmap) and READ_IDX_JOIN2 over the inner one; under the
//! B+tree kinds a batched index nested-loop join; without an index both tables are
//! scanned. The host hash-joins the rows it received.

use super::*;

impl RowStore {
    /// `outer ⋈ inner` on `outer.outer_col = inner.key`, the outer side filtered to
    /// `lo <= outer.key <= hi` and `pred`: pairs of matching rows. The inner table's key
    /// is its join column (its index, and under FLIXR its bitmap encoding).
    pub fn join(
        &mut self,
        outer: TableId,
        lo: i64,
        hi: i64,
        pred: &dyn Fn(&[Value]) -> bool,
        outer_col: &str,
        inner: TableId,
    ) -> Result<Vec<(Row, Row)>, StoreError> {
        self.statement(|s| {
            let oc = s
                .table(outer)?
                .schema
                .column_index(outer_col)
                .map_err(|e| StoreError::Invalid(e.to_string()))?;
            let ik = s.table(inner)?.key;
            if lo > hi {
                return Ok(Vec::new());
            }
            let (outer_rows, inner_rows) = match s.kind {
                IndexKind::FlixrS | IndexKind::FlixrHS => {
                    s.flixr_join_rows(outer, (lo, hi), pred, oc, inner)?
                }
                IndexKind::NoIndex => {
                    let orows = s.scan_where(outer, lo, hi, pred)?;
                    let irows = if orows.is_empty() {
                        Vec::new()
                    } else {
                        s.scan_all(inner)?
                    };
                    (orows, irows)
                }
                _ => {
                    // Index nested loop, batched: each distinct outer key looked up in the
                    // inner index, the pages found read once (multi-range read).
                    let orows = s.scan_where(outer, lo, hi, pred)?;
                    let mut keys: Vec<i64> = orows
                        .iter()
                        .filter_map(|r| r.values.get(oc).and_then(value_i64))
                        .collect();
                    keys.sort_unstable();
                    keys.dedup();
                    let irows = s.lookup_many(inner, &keys)?;
                    (orows, irows)
                }
            };
            let out = hash_join(&outer_rows, oc, &inner_rows, ik);
            let n = (inner_rows.len() + out.len()) as f64;
            s.host_cpu(n * s.cycles_per_record);
            Ok(out)
        })
    }

    /// The rows a FLIXR join reads: the outer table's under READ_IDX_JOIN1 (filtered by
    /// its key range, building the per-table join-key bitmap of column `oc`), then, if
    /// any, the inner table's pages sharing a key bucket with them (READ_IDX_JOIN2). The
    /// inner table must be indexed with a bitmap.
    fn flixr_join_rows(
        &mut self,
        outer: TableId,
        (lo, hi): (i64, i64),
        pred: &dyn Fn(&[Value]) -> bool,
        oc: usize,
        inner: TableId,
    ) -> Result<(Vec<Row>, Vec<Row>), StoreError> {
        let bounds = match &self.tables[inner.0].def.encoding {
            KeyEncoding::Bitmap(b) => b.clone(),
            KeyEncoding::Range => {
                return Err(StoreError::Invalid(format!(
                    "a FLIXR join needs the inner table {:?} indexed with a bitmap",
                    self.tables[inner.0].def.name
                )));
            }
        };
        let tia = self.table_index(outer, oc, bounds)?;
        let rule = self.rule(outer, IndexRule::Between { lo, hi })?;
        let o_dev = self.tables[outer.0].dev_id;
        let rs = self.flixr_runs(outer, lo, hi);
        let pages = self.filtered(rs, |lba, blocks, reset| Command::ReadIdxJoin1 {
            table: o_dev,
            rule,
            tia,
            reset,
            lba,
            blocks,
        })?;
        self.drop_rule(outer, rule)?;
        let orows = self.filter_rows(outer, &pages, lo, hi, pred);
        let jrule = self.join_rule(inner, tia)?;
        let i_dev = self.tables[inner.0].dev_id;
        let tb = &self.tables[inner.0];
        let rs = if tb.used == 0 {
            Vec::new()
        } else {
            vec![(tb.first, tb.used)]
        };
        let ipages = if orows.is_empty() {
            Vec::new()
        } else {
            self.filtered(rs, |lba, blocks, _| Command::ReadIdxJoin2 {
                table: i_dev,
                rule: jrule,
                lba,
                blocks,
            })?
        };
        let irows = self.filter_rows(inner, &ipages, i64::MIN, i64::MAX, &|_| true);
        Ok((orows, irows))
    }

    /// The per-table join-key index of `t`'s column `col` over `bounds` (SEND_TIDX_ENC
    /// once per column).
    pub(super) fn table_index(
        &mut self,
        t: TableId,
        col: usize,
        bounds: Vec<i64>,
    ) -> Result<u16, StoreError> {
        if let Some(&id) = self.tables[t.0].tia.get(&col) {
            return Ok(id);
        }
        let dev_id = self.tables[t.0].dev_id;
        let column = self.tables[t.0].def.columns[col].0.clone();
        let id = match self
            .sync(Command::SendTidxEnc {
                table: dev_id,
                spec: JoinIndexSpec { column, bounds },
            })?
            .0
            .payload
        {
            Payload::FlixrRule(id) => id,
            p => return Err(StoreError::Invalid(format!("SendTidxEnc answered {p:?}"))),
        };
        self.tables[t.0].tia.insert(col, id);
        Ok(id)
    }

    pub(super) fn join_rule(&mut self, inner: TableId, tia: u16) -> Result<u16, StoreError> {
        if let Some(&r) = self.tables[inner.0].join_rules.get(&tia) {
            return Ok(r);
        }
        let dev_id = self.tables[inner.0].dev_id;
        let r = match self
            .sync(Command::SendTidxIcr { table: dev_id, tia })?
            .0
            .payload
        {
            Payload::FlixrRule(r) => r,
            p => return Err(StoreError::Invalid(format!("SendTidxIcr answered {p:?}"))),
        };
        self.tables[inner.0].join_rules.insert(tia, r);
        Ok(r)
    }
}

/// The host's hash join of `outer` (join column `oc`) with `inner` (key column `ik`):
/// the inner rows hashed by key, each outer row paired with every inner row of its key,
/// in outer order.
fn hash_join(outer: &[Row], oc: usize, inner: &[Row], ik: usize) -> Vec<(Row, Row)> {
    let mut ht: HashMap<i64, Vec<usize>> = HashMap::new();
    for (i, r) in inner.iter().enumerate() {
        if let Some(k) = r.values.get(ik).and_then(value_i64) {
            ht.entry(k).or_default().push(i);
        }
    }
    let mut out = Vec::new();
    for o in outer {
        let Some(k) = o.values.get(oc).and_then(value_i64) else {
            continue;
        };
        if let Some(is) = ht.get(&k) {
            for &i in is {
                out.push((o.clone(), inner[i].clone()));
            }
        }
    }
    out
}
