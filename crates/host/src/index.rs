//! FLIXR per-page indexes on catalog tables (flixr §4.1–§4.4): what `CREATE INDEX` in
//! `csd sql` and `csd index create` do, and the rule a scan derives from its filter.
//!
//! Creating an index on `table (column)`:
//! 1. checks everything on the host first (the table and column exist, the column's
//!    type has an index key ([`KeyKind`]: numbers, dates, timestamps, floats, strings;
//!    NULLs are left out), no index has that name, the column has no index yet, the
//!    table has fewer than [`csd_device::flixr::MAX_KEYS`] keys), so bad input
//!    registers nothing;
//! 2. SEND_TBL_COL registers the table's row format (its schema, layout and LBAs per
//!    page: a catalog page is one flash page), then SEND_IDX_ENC the encoding;
//! 3. rewrites every page of the table in place through WRITE_IDX (MDTS-sized Reads,
//!    each followed by the WRITE_IDX of the same bytes), so the firmware computes each
//!    page's entry as it would on any write (§4.3). This is the paper's only path to
//!    an entry (entries are built on write); its cost — the table read once and
//!    programmed once, plus the entry computation on the embedded cores — is measured
//!    and reported as the creation's modeled time;
//! 4. records the index in the catalog (one atomic catalog batch), so it survives a
//!    reopen. A failure after step 2 sends DropTblCol, leaving the table as it was
//!    (its data is unchanged in any case: the rewrite writes the same bytes).
//!
//! A table that already has an index gets the new one as a *secondary key* (flixr §3.1,
//! §6.4): SEND_IDX_ENC adds it to the table's registration, the device packs every key
//! into the one per-page entry (refused, naming the sizes, when they do not fit the
//! extension bytes: nothing changes), and the table is rewritten through WRITE_IDX as
//! above (a failure sends DropIdxEnc). The catalog records it under the table's first
//! index ([`TableIndex::secondary`]). A scan's filter on several indexed columns
//! becomes one rule with a term per column (SEND_IDX_ICR over several keys).
//!
//! Bitmap split points come from the column's values: an equi-depth histogram over a
//! sample of up to [`SAMPLE_PAGES`] pages spread evenly over the table (every row of
//! those pages), with duplicates removed so the points are strictly increasing (a very
//! frequent value gets a bucket of its own rather than several). A second bitmap index
//! may reuse another bitmap index's split points (`share`), which the join commands
//! (READ_IDX_JOIN1/2, §4.5) require of the two join columns.
//!
//! Dropping a table's only index sends DropTblCol (the table leaves the device's
//! registries) and removes it from the catalog; the entries left in the MAP name a table
//! no rule compares, so the pages are simply read. Dropping one key of several sends
//! DropIdxEnc (the first remaining key becomes the table's first index) and rewrites the
//! table through WRITE_IDX, since the device does not compare entries of the layout
//! before the change.

use crate::catalog::{Catalog, TableIndex, TableInfo, same_name};
use crate::client::{CommandIssuer, HostError};
use csd_device::flixr::KeyKind;
use csd_device::{Command, IndexEncoding, IndexRule, IndexSpec, Payload, TableFormat};
use csd_query::plan::{CmpOp, Const, Expr, ExprKind};
use csd_table::PageView;
use std::time::Instant;

/// Pages read to choose bitmap split points.
pub const SAMPLE_PAGES: u64 = 256;
/// Buckets of a bitmap index when none are asked for (at most 160 fit 24 extension
/// bytes: `(24 - 4) * 8`).
pub const DEFAULT_BUCKETS: usize = 128;

/// How to encode a new index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexKindSpec {
    /// Min/max per page.
    Range,
    /// Bucket bitmap per page.
    Bitmap {
        /// Buckets wanted (split points = buckets - 1; fewer when values repeat).
        buckets: usize,
        /// Take the split points of this existing bitmap index instead.
        share: Option<String>,
    },
}

/// A `CREATE INDEX` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateIndex {
    /// Index name.
    pub name: String,
    /// Table name (case-insensitive).
    pub table: String,
    /// Column name (case-insensitive).
    pub column: String,
    /// Encoding.
    pub kind: IndexKindSpec,
}

/// What creating an index did.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexReport {
    /// The table, as now in the catalog.
    pub table: TableInfo,
    /// The index.
    pub index: TableIndex,
    /// Table pages rewritten through WRITE_IDX.
    pub pages_rewritten: u64,
    /// Modeled seconds of the creation (sample, registration, rewrite, catalog).
    pub modeled_s: f64,
    /// Wall-clock seconds.
    pub wall_s: f64,
}

fn invalid(s: String) -> HostError {
    HostError::Invalid(s)
}

/// Every index of the catalog, secondary keys included: `(table, index)`.
pub fn list(cat: &Catalog) -> Vec<(&TableInfo, &TableIndex)> {
    cat.tables
        .iter()
        .filter_map(|t| t.index.as_ref().map(|i| (t, i)))
        .flat_map(|(t, i)| i.keys().map(move |k| (t, k)))
        .collect()
}

/// Checks a request against the catalog; returns the table's position and column index.
fn check(cat: &Catalog, req: &CreateIndex) -> Result<(usize, usize), HostError> {
    crate::catalog::check_table_name(&req.name).map_err(|_| {
        invalid(format!(
            "index name `{}`: use 1 to 64 letters, digits or _",
            req.name
        ))
    })?;
    if let Some((t, _)) = list(cat)
        .into_iter()
        .find(|(_, i)| same_name(&i.name, &req.name))
    {
        return Err(invalid(format!(
            "an index named `{}` already exists (on table {}): choose another name or DROP INDEX it first",
            req.name, t.name
        )));
    }
    let pos = cat
        .tables
        .iter()
        .position(|t| same_name(&t.name, &req.table))
        .ok_or_else(|| {
            invalid(format!(
                "unknown table `{}`; tables on the device: {}",
                req.table,
                cat.tables
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
    let t = &cat.tables[pos];
    let col = t
        .schema
        .columns()
        .iter()
        .position(|c| same_name(&c.name, &req.column))
        .ok_or_else(|| {
            invalid(format!(
                "table {} has no column `{}` (columns: {})",
                t.name,
                req.column,
                t.schema
                    .columns()
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
    let ty = t.schema.columns()[col].ty;
    if KeyKind::of(ty).is_none() {
        return Err(invalid(format!(
            "column {}.{} is {ty}: FLIXR per-page indexes cover integers, DATE, TIMESTAMP, \
             DECIMAL(p <= 18), floats and strings (CHAR, VARCHAR, VARBINARY)",
            t.name,
            t.schema.columns()[col].name
        )));
    }
    if let Some(ix) = &t.index {
        let cname = &t.schema.columns()[col].name;
        if let Some(k) = ix.keys().find(|k| same_name(&k.column, cname)) {
            return Err(invalid(format!(
                "table {} already has index `{}` on {}: one per-page index per column; DROP INDEX {} first",
                t.name, k.name, k.column, k.name
            )));
        }
        if ix.keys().count() >= csd_device::flixr::MAX_KEYS {
            return Err(invalid(format!(
                "table {} already has {} indexes ({}): the device packs at most {} keys per page",
                t.name,
                ix.keys().count(),
                ix.keys()
                    .map(|k| k.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                csd_device::flixr::MAX_KEYS
            )));
        }
    }
    if let IndexKindSpec::Bitmap { buckets, share } = &req.kind
        && share.is_none()
        && *buckets < 2
    {
        return Err(invalid(format!(
            "a bitmap index needs at least 2 buckets, not {buckets}"
        )));
    }
    Ok((pos, col))
}

/// The split points of an equi-depth histogram with `buckets` buckets over `values`
/// (sorted here), strictly increasing; at least one point.
pub fn equi_depth(values: &mut [i64], buckets: usize) -> Vec<i64> {
    values.sort_unstable();
    let n = values.len();
    if n == 0 {
        return vec![0];
    }
    let mut out: Vec<i64> = Vec::with_capacity(buckets);
    for i in 1..buckets.max(2) {
        let v = values[(i * n / buckets.max(2)).min(n - 1)];
        // Bucket i holds values >= its point: the smallest value never starts one.
        if v > values[0] && out.last().is_none_or(|&l| v > l) {
            out.push(v);
        }
    }
    if out.is_empty() {
        out.push(values[0].saturating_add(1));
    }
    out
}

/// Keys ([`KeyKind`]) of the non-NULL values of column `col` on up to [`SAMPLE_PAGES`]
/// pages spread over `t`.
fn sample<C: CommandIssuer>(c: &mut C, t: &TableInfo, col: usize) -> Result<Vec<i64>, HostError> {
    let step = t.pages.div_ceil(SAMPLE_PAGES).max(1);
    let ty = t.schema.columns()[col].ty;
    let kind = KeyKind::of(ty).ok_or_else(|| invalid(format!("column {col} has no index key")))?;
    let (mut vals, mut one) = (Vec::new(), Vec::new());
    let mut page = 0;
    while page < t.pages {
        let bytes = Catalog::read_page(c, t, page)?;
        let view = PageView::parse_unverified(&bytes, &t.schema)?;
        let column = view.column(col)?;
        if kind == KeyKind::Number && !column.may_have_nulls() {
            column.decode_i64_into(&mut one)?; // clears `one` first
            vals.extend_from_slice(&one);
        } else {
            vals.extend(
                (0..column.len()).filter_map(|i| column.bytes(i).and_then(|b| kind.key(ty, b))),
            );
        }
        page += step;
    }
    Ok(vals)
}

/// `CREATE INDEX`: see the [module docs](self).
pub fn create<C: CommandIssuer>(c: &mut C, req: &CreateIndex) -> Result<IndexReport, HostError> {
    let wall = Instant::now();
    let t0 = c.now();
    let mut cat = Catalog::read(c)?;
    let (pos, col) = check(&cat, req)?;
    let t = cat.tables[pos].clone();
    let encoding = encoding_for(c, &cat, &t, col, req)?;
    let lba = c.identify().lba_size;
    let lpp = t.lbas_per_page(lba).max(1);
    let column = t.schema.columns()[col].name.clone();
    let (index, pages_rewritten) = match t.index.clone() {
        // A secondary key: added to the table's registration, packed with the others.
        Some(primary) => {
            let ix = TableIndex {
                name: req.name.clone(),
                column,
                encoding,
                flixr_table: primary.flixr_table,
                secondary: Vec::new(),
            };
            create_secondary(c, &mut cat, pos, ix, lpp)?
        }
        None => create_first(c, &mut cat, pos, (req, column, encoding), lpp)?,
    };
    Ok(IndexReport {
        table: cat.tables[pos].clone(),
        index,
        pages_rewritten,
        modeled_s: c.now().since(t0) as f64 / 1e9,
        wall_s: wall.elapsed().as_secs_f64(),
    })
}

/// The encoding `req` asks for on column `col` of `t`: a range, a bitmap over split
/// points shared with another bitmap index, or a bitmap over equi-depth split points of
/// a sample of the column.
fn encoding_for<C: CommandIssuer>(
    c: &mut C,
    cat: &Catalog,
    t: &TableInfo,
    col: usize,
    req: &CreateIndex,
) -> Result<IndexEncoding, HostError> {
    match &req.kind {
        IndexKindSpec::Range => Ok(IndexEncoding::Range),
        IndexKindSpec::Bitmap {
            share: Some(other), ..
        } => match list(cat)
            .into_iter()
            .find(|(_, i)| same_name(&i.name, other))
        {
            Some((
                _,
                TableIndex {
                    encoding: e @ IndexEncoding::Bitmap { .. },
                    ..
                },
            )) => Ok(e.clone()),
            Some(_) => Err(invalid(format!(
                "index `{other}` is a range index: only a bitmap index's split points can be shared"
            ))),
            None => Err(invalid(format!(
                "no index named `{other}` to share split points with"
            ))),
        },
        IndexKindSpec::Bitmap { buckets, .. } => {
            let mut vals = sample(c, t, col)?;
            Ok(IndexEncoding::Bitmap {
                bounds: equi_depth(&mut vals, *buckets),
            })
        }
    }
}

/// A secondary key on a table that has a FLIXR index: SEND_IDX_ENC, the pages rewritten,
/// the catalog published; on failure the encoding is dropped again. Returns the index
/// and the pages rewritten.
fn create_secondary<C: CommandIssuer>(
    c: &mut C,
    cat: &mut Catalog,
    pos: usize,
    index: TableIndex,
    lpp: u64,
) -> Result<(TableIndex, u64), HostError> {
    let t = cat.tables[pos].clone();
    let id = index.flixr_table;
    c.exec(Command::SendIdxEnc {
        table: id,
        spec: IndexSpec {
            column: index.column.clone(),
            encoding: index.encoding.clone(),
        },
    })?;
    let published = rewrite(c, &t, id, lpp).and_then(|n| {
        if let Some(p) = cat.tables[pos].index.as_mut() {
            p.secondary.push(index.clone());
        }
        cat.seq += 1;
        cat.write(c).map(|()| n)
    });
    match published {
        Ok(n) => Ok((index, n)),
        Err(e) => {
            let column = index.column;
            let _ = c.exec(Command::DropIdxEnc { table: id, column });
            Err(e)
        }
    }
}

/// A table's first FLIXR index: SEND_TBL_COL, SEND_IDX_ENC, the pages rewritten, the
/// catalog published; on failure the table's registration is dropped again. Returns the
/// index and the pages rewritten.
fn create_first<C: CommandIssuer>(
    c: &mut C,
    cat: &mut Catalog,
    pos: usize,
    (req, column, encoding): (&CreateIndex, String, IndexEncoding),
    lpp: u64,
) -> Result<(TableIndex, u64), HostError> {
    let t = cat.tables[pos].clone();
    let format = TableFormat {
        name: t.schema.name().to_string(),
        columns: t.schema.columns().to_vec(),
        layout: t.layout,
        page_lbas: lpp as u32,
    };
    let id = match c.exec(Command::SendTblCol(format))?.payload {
        Payload::FlixrTable(id) => id,
        _ => return Err(invalid("SendTblCol returned no table id".into())),
    };
    let rest = (|| -> Result<u64, HostError> {
        c.exec(Command::SendIdxEnc {
            table: id,
            spec: IndexSpec {
                column: column.clone(),
                encoding: encoding.clone(),
            },
        })?;
        rewrite(c, &t, id, lpp)
    })();
    let index = TableIndex {
        name: req.name.clone(),
        column,
        encoding,
        flixr_table: id,
        secondary: Vec::new(),
    };
    let published = rest.and_then(|n| {
        cat.tables[pos].index = Some(index.clone());
        cat.seq += 1;
        cat.write(c).map(|()| n)
    });
    match published {
        Ok(n) => Ok((index, n)),
        Err(e) => {
            let _ = c.exec(Command::DropTblCol { table: id });
            Err(e)
        }
    }
}

/// Rewrite every page of `t` in place through WRITE_IDX of FLIXR table `id`, MDTS (whole
/// pages) at a time, and flush; returns the pages rewritten.
fn rewrite<C: CommandIssuer>(c: &mut C, t: &TableInfo, id: u8, lpp: u64) -> Result<u64, HostError> {
    let mdts = c.identify().mdts_blocks.max(1) as u64;
    let per = (mdts / lpp).max(1);
    let mut page = 0;
    while page < t.pages {
        let n = per.min(t.pages - page);
        let at = t.first_lba + page * lpp;
        let data = c.read(at, (n * lpp) as u32)?;
        c.exec(Command::WriteIdx {
            table: id,
            lba: at,
            data,
        })?;
        page += n;
    }
    c.flush()?;
    Ok(t.pages)
}

/// `DROP INDEX name`: returns the table it was on and the index.
pub fn drop<C: CommandIssuer>(c: &mut C, name: &str) -> Result<(String, TableIndex), HostError> {
    let mut cat = Catalog::read(c)?;
    let pos = cat
        .tables
        .iter()
        .position(|t| {
            t.index
                .as_ref()
                .is_some_and(|i| i.keys().any(|k| same_name(&k.name, name)))
        })
        .ok_or_else(|| {
            let names: Vec<String> = list(&cat).iter().map(|(_, i)| i.name.clone()).collect();
            invalid(format!(
                "no index named `{name}`; indexes: {}",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ))
        })?;
    let Some(mut ix) = cat.tables[pos].index.take() else {
        return Err(invalid(format!("no index named `{name}`")));
    };
    if ix.secondary.is_empty() {
        cat.seq += 1;
        cat.write(c)?;
        // After the catalog no longer names it: a failure here leaves a registration
        // nothing uses (a later CREATE INDEX on the table reports it).
        c.exec(Command::DropTblCol {
            table: ix.flixr_table,
        })?;
        return Ok((cat.tables[pos].name.clone(), ix));
    }
    // One key of several: the others stay (the first left becomes the first index).
    let id = ix.flixr_table;
    let (gone, rest) = if same_name(&ix.name, name) {
        let mut rest = ix.secondary.remove(0);
        rest.secondary = std::mem::take(&mut ix.secondary);
        (ix, rest)
    } else {
        let i = ix
            .secondary
            .iter()
            .position(|k| same_name(&k.name, name))
            .ok_or_else(|| invalid(format!("no index named `{name}`")))?;
        let gone = ix.secondary.remove(i);
        (gone, ix)
    };
    c.exec(Command::DropIdxEnc {
        table: id,
        column: gone.column.clone(),
    })?;
    cat.tables[pos].index = Some(rest);
    cat.seq += 1;
    cat.write(c)?;
    // The device compares only entries of its new layout: rewrite them.
    let t = cat.tables[pos].clone();
    let lpp = t.lbas_per_page(c.identify().lba_size).max(1);
    rewrite(c, &t, id, lpp)?;
    Ok((t.name, gone))
}

/// The rule a device program's filter implies on column `col`: the conjuncts of the
/// filter that compare the column with a constant (`=`, `<`, `<=`, `>`, `>=`, and
/// `BETWEEN` as two of them) narrow a range; `IN` lists intersect; an `OR` whose every
/// disjunct constrains the column adds their union (the points of `=` / `IN`, else the
/// span of the ranges: a superset, which the device's exact filter then narrows); a
/// string column's `LIKE 'prefix%'` admits the keys of strings starting with the prefix.
/// `None` when the filter does not constrain the column (or contradicts itself: the scan
/// then runs without the index, and finds nothing anyway).
///
/// The rule is on the column's keys ([`KeyKind`]): a number or a float's order key (the
/// constant as the plan holds it), a string's 8-byte prefix key. A prefix key is not
/// one-to-one, so a strict bound on a string stays inclusive (`s < 'abc'` admits
/// `key <= key('abc')`). Every predicate read here is never TRUE on a NULL, so a page
/// whose keys are all NULL (an entry without keys) is rightly skipped.
pub fn rule_for(filter: Option<&Expr>, col: usize) -> Option<IndexRule> {
    let f = filter?;
    let mut terms = Vec::new();
    flatten(f, &mut terms);
    let mut b = Bounds {
        lo: i64::MIN,
        hi: i64::MAX,
        list: None,
        any: false,
    };
    let is_col = |e: &Expr| matches!(e.kind, ExprKind::Column { index, .. } if index == col);
    for t in terms {
        match &t.kind {
            ExprKind::Cmp { op, left, right } => {
                let Some((op, v, exact)) = column_vs_const(*op, left, right, col) else {
                    continue;
                };
                match cmp_range(op, v, exact) {
                    // A comparison no value satisfies (past the ends of i64).
                    None => return None,
                    Some(None) => continue,
                    Some(Some((l, h))) => b.narrow(l, h),
                }
            }
            // `k = 1 OR k = 5` (DataFusion writes short IN lists so) or ranges ORed:
            // the union of the disjuncts' rules, when every disjunct constrains `k`.
            ExprKind::Or(ds) => {
                let rules: Option<Vec<IndexRule>> =
                    ds.iter().map(|d| rule_for(Some(d), col)).collect();
                let Some(rules) = rules else { continue };
                b.union_of(&rules);
            }
            ExprKind::InList {
                expr,
                list: l,
                negated: false,
            } if is_col(expr) => {
                let Some(kind) = key_kind(expr) else { continue };
                let vals: Vec<i64> = l.iter().filter_map(|c| const_key(kind, &c)).collect();
                if vals.len() != l.len() {
                    continue;
                }
                b.values(vals);
            }
            ExprKind::Like {
                expr,
                prefix,
                negated: false,
            } if is_col(expr) && key_kind(expr).is_some_and(|k| !k.exact()) => {
                let (l, h) = KeyKind::prefix_range(prefix);
                b.narrow(l, h);
            }
            _ => {}
        }
    }
    b.rule()
}

/// The key kind of a column node's values (by its type), if an index can have one.
fn key_kind(e: &Expr) -> Option<KeyKind> {
    use csd_query::types::DataType;
    Some(match e.ty {
        DataType::Int | DataType::Decimal { .. } | DataType::Date | DataType::Timestamp => {
            KeyKind::Number
        }
        DataType::Float32 => KeyKind::Float { width: 4 },
        DataType::Float64 => KeyKind::Float { width: 8 },
        DataType::Char(_) => KeyKind::PaddedPrefix,
        DataType::Varchar | DataType::Varbinary => KeyKind::Prefix,
        DataType::Bool | DataType::Decimal128 { .. } => return None,
    })
}

/// The key of a constant compared with a column of `kind` (`None` for a constant of
/// another kind: no rule).
fn const_key(kind: KeyKind, c: &Const) -> Option<i64> {
    match (kind, c) {
        (KeyKind::Number | KeyKind::Float { .. }, Const::Int(v)) => Some(*v),
        (KeyKind::PaddedPrefix, Const::Char(b)) => Some(csd_device::flixr::prefix_key(b, b' ')),
        (KeyKind::Prefix, Const::Char(b)) => Some(csd_device::flixr::prefix_key(b, 0)),
        _ => None,
    }
}

/// A comparison of column `col` with a constant, as `(op, the constant's key, keys are
/// one-to-one)` with the column on the left (`None` for any other comparison).
fn column_vs_const(op: CmpOp, left: &Expr, right: &Expr, col: usize) -> Option<(CmpOp, i64, bool)> {
    let is_col = |e: &Expr| matches!(e.kind, ExprKind::Column { index, .. } if index == col);
    let konst = |c: &Expr, k: &Expr| {
        let kind = key_kind(c)?;
        match &k.kind {
            ExprKind::Const(v) => const_key(kind, v).map(|v| (v, kind.exact())),
            _ => None,
        }
    };
    if is_col(left) {
        konst(left, right).map(|(v, x)| (op, v, x))
    } else if is_col(right) {
        konst(right, left).map(|(v, x)| (op.flip(), v, x))
    } else {
        None
    }
}

/// The keys `column op v` admits as a range: `Some(None)` for no constraint (`<>`),
/// `None` when no value does (`< i64::MIN`, `> i64::MAX`). With keys that are not
/// one-to-one (`exact` false: string prefixes) a strict bound keeps its key.
fn cmp_range(op: CmpOp, v: i64, exact: bool) -> Option<Option<(i64, i64)>> {
    Some(Some(match op {
        CmpOp::Eq => (v, v),
        CmpOp::Lt if !exact => (i64::MIN, v),
        CmpOp::Gt if !exact => (v, i64::MAX),
        CmpOp::Lt => (i64::MIN, v.checked_sub(1)?),
        CmpOp::Le => (i64::MIN, v),
        CmpOp::Gt => (v.checked_add(1)?, i64::MAX),
        CmpOp::Ge => (v, i64::MAX),
        CmpOp::Ne => return Some(None),
    }))
}

/// What the conjuncts of a filter say about one column so far: a range, a list of
/// values (when some conjunct names them), and whether any conjunct spoke at all.
struct Bounds {
    lo: i64,
    hi: i64,
    list: Option<Vec<i64>>,
    any: bool,
}

impl Bounds {
    /// A conjunct admits `l..=h`.
    fn narrow(&mut self, l: i64, h: i64) {
        self.lo = self.lo.max(l);
        self.hi = self.hi.min(h);
        self.any = true;
    }

    /// A conjunct admits the values `vals`.
    fn values(&mut self, vals: Vec<i64>) {
        self.list = Some(match self.list.take() {
            None => vals,
            Some(prev) => prev.into_iter().filter(|v| vals.contains(v)).collect(),
        });
        self.any = true;
    }

    /// A disjunction of `rules` on the column: their points when every one is a list of
    /// points, else the span of all of them.
    fn union_of(&mut self, rules: &[IndexRule]) {
        let points: Option<Vec<i64>> = rules
            .iter()
            .map(|r| match r {
                IndexRule::Between { lo, hi } if lo == hi => Some(vec![*lo]),
                IndexRule::In(v) => Some(v.clone()),
                IndexRule::Between { .. } => None,
            })
            .collect::<Option<Vec<_>>>()
            .map(|v| v.concat());
        match points {
            Some(vals) => self.values(vals),
            None => {
                let span = |r: &IndexRule| match r {
                    IndexRule::Between { lo, hi } => (*lo, *hi),
                    IndexRule::In(v) => (
                        v.iter().copied().min().unwrap_or(i64::MAX),
                        v.iter().copied().max().unwrap_or(i64::MIN),
                    ),
                };
                let l = rules.iter().map(|r| span(r).0).min().unwrap_or(i64::MIN);
                let h = rules.iter().map(|r| span(r).1).max().unwrap_or(i64::MAX);
                self.narrow(l, h);
            }
        }
    }

    /// The rule: the listed values inside the range (a range over them when there are
    /// more than a rule may hold), else the range; `None` when nothing spoke or the
    /// conjuncts contradict each other.
    fn rule(self) -> Option<IndexRule> {
        let (lo, hi) = (self.lo, self.hi);
        if !self.any || lo > hi {
            return None;
        }
        match self.list {
            Some(mut vs) => {
                vs.retain(|v| lo <= *v && *v <= hi);
                vs.sort_unstable();
                vs.dedup();
                match (vs.first(), vs.last()) {
                    (None, _) | (_, None) => None,
                    (Some(&a), Some(&b)) if vs.len() > csd_device::flixr::MAX_RULE_VALUES => {
                        Some(IndexRule::Between { lo: a, hi: b })
                    }
                    _ => Some(IndexRule::In(vs)),
                }
            }
            None => Some(IndexRule::Between { lo, hi }),
        }
    }
}

fn flatten<'a>(e: &'a Expr, out: &mut Vec<&'a Expr>) {
    match &e.kind {
        ExprKind::And(v) => v.iter().for_each(|x| flatten(x, out)),
        _ => out.push(e),
    }
}

/// A rule in words, for reports (`l_shipdate in [8766, 9130]`).
pub fn describe_rule(column: &str, r: &IndexRule) -> String {
    match r {
        IndexRule::Between { lo, hi } => {
            let b = |v: i64| match v {
                i64::MIN => "-inf".to_string(),
                i64::MAX => "+inf".to_string(),
                v => v.to_string(),
            };
            format!("{column} in [{}, {}]", b(*lo), b(*hi))
        }
        IndexRule::In(vs) => format!("{column} in {{{} values}}", vs.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col() -> Expr {
        Expr {
            kind: ExprKind::Column {
                index: 0,
                name: "k".into(),
                nullable: false,
            },
            ty: csd_query::types::DataType::Int,
        }
    }

    fn cmp(op: CmpOp, v: i64) -> Expr {
        Expr {
            kind: ExprKind::Cmp {
                op,
                left: Box::new(col()),
                right: Box::new(Expr {
                    kind: ExprKind::Const(Const::Int(v)),
                    ty: csd_query::types::DataType::Int,
                }),
            },
            ty: csd_query::types::DataType::Bool,
        }
    }

    fn node(kind: ExprKind) -> Expr {
        Expr {
            kind,
            ty: csd_query::types::DataType::Bool,
        }
    }

    #[test]
    fn rules_follow_the_filter_on_the_indexed_column() {
        let and = |v: Vec<Expr>| node(ExprKind::And(v));
        let or = |v: Vec<Expr>| node(ExprKind::Or(v));
        let f = and(vec![cmp(CmpOp::Ge, 10), cmp(CmpOp::Lt, 20)]);
        assert_eq!(
            rule_for(Some(&f), 0),
            Some(IndexRule::Between { lo: 10, hi: 19 })
        );
        assert_eq!(rule_for(Some(&f), 1), None, "another column");
        let f = or(vec![cmp(CmpOp::Eq, 5), cmp(CmpOp::Eq, 1)]);
        assert_eq!(rule_for(Some(&f), 0), Some(IndexRule::In(vec![1, 5])));
        let f = or(vec![cmp(CmpOp::Lt, 5), cmp(CmpOp::Gt, 50)]);
        assert_eq!(
            rule_for(Some(&f), 0),
            Some(IndexRule::Between {
                lo: i64::MIN,
                hi: i64::MAX
            })
        );
        let f = and(vec![
            cmp(CmpOp::Gt, 7),
            or(vec![cmp(CmpOp::Eq, 5), cmp(CmpOp::Eq, 9)]),
        ]);
        assert_eq!(rule_for(Some(&f), 0), Some(IndexRule::In(vec![9])));
        let f = and(vec![cmp(CmpOp::Gt, 7), cmp(CmpOp::Lt, 3)]);
        assert_eq!(rule_for(Some(&f), 0), None, "contradiction: no rule");
        assert_eq!(rule_for(Some(&cmp(CmpOp::Ne, 3)), 0), None);
    }

    /// A string predicate on a page of strings, and whether a string satisfies it.
    #[derive(Debug, Clone)]
    enum StrPred {
        Cmp(CmpOp, Vec<u8>),
        Like(Vec<u8>),
        In(Vec<Vec<u8>>),
    }

    fn str_expr(p: &StrPred, ty: csd_query::types::DataType) -> Expr {
        let column = Expr {
            kind: ExprKind::Column {
                index: 0,
                name: "s".into(),
                nullable: true,
            },
            ty,
        };
        let konst = |b: &[u8]| Expr {
            kind: ExprKind::Const(Const::Char(b.to_vec())),
            ty,
        };
        node(match p {
            StrPred::Cmp(op, c) => ExprKind::Cmp {
                op: *op,
                left: Box::new(column),
                right: Box::new(konst(c)),
            },
            StrPred::Like(prefix) => ExprKind::Like {
                expr: Box::new(column),
                prefix: prefix.clone(),
                negated: false,
            },
            StrPred::In(vs) => ExprKind::InList {
                expr: Box::new(column),
                list: csd_query::plan::ConstSet::new(
                    vs.iter().map(|v| Const::Char(v.clone())).collect(),
                ),
                negated: false,
            },
        })
    }

    /// SQL's answer on a stored value: VARCHAR byte for byte, CHAR padded with spaces
    /// (the stored value keeps its padding for LIKE).
    fn str_holds(p: &StrPred, v: &[u8], padded: bool) -> bool {
        let cmp = |a: &[u8], b: &[u8]| {
            if padded {
                csd_query::cmp_padded(a, b)
            } else {
                a.cmp(b)
            }
        };
        match p {
            StrPred::Cmp(op, c) => op.holds(cmp(v, c)),
            StrPred::Like(prefix) => v.starts_with(prefix),
            StrPred::In(vs) => vs.iter().any(|c| cmp(v, c).is_eq()),
        }
    }

    fn bytes() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        prop_oneof![
            1 => "[a-c ]{0,10}".prop_map(String::into_bytes),
            1 => prop::collection::vec(
                prop_oneof![Just(0u8), Just(1u8), Just(b' '), Just(b'a'), Just(0xFFu8)],
                0..12
            ),
            // Longer than the key, sharing its 8 bytes.
            2 => "(abababab|aaaaaaaa)[ab ]{0,3}".prop_map(String::into_bytes),
        ]
    }

    fn str_pred() -> impl proptest::strategy::Strategy<Value = StrPred> {
        use proptest::prelude::*;
        let op = prop_oneof![
            Just(CmpOp::Eq),
            Just(CmpOp::Ne),
            Just(CmpOp::Lt),
            Just(CmpOp::Le),
            Just(CmpOp::Gt),
            Just(CmpOp::Ge)
        ];
        prop_oneof![
            (op, bytes()).prop_map(|(o, c)| StrPred::Cmp(o, c)),
            bytes()
                .prop_filter("a LIKE prefix", |b| !b.is_empty())
                .prop_map(StrPred::Like),
            proptest::collection::vec(bytes(), 1..4).prop_map(StrPred::In),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]
        /// The rule a string predicate implies never rules out a page holding a string
        /// that satisfies it, for VARCHAR (zero-padded keys) and CHAR(4) and CHAR(12)
        /// (stored padded, space-padded keys), range and bitmap entries, strings shorter and
        /// longer than the 8-byte key, with NUL, 0xFF and blank bytes.
        #[test]
        fn string_rules_never_rule_out_a_matching_page(
            page in proptest::collection::vec(bytes(), 1..5),
            pred in str_pred(),
            char_col in proptest::bool::ANY,
            width in proptest::prop_oneof![proptest::strategy::Just(4u16), proptest::strategy::Just(12u16)],
            split in proptest::collection::vec(bytes(), 1..6),
        ) {
            use csd_device::flixr::{Entry, may_match};
            use csd_query::types::DataType;
            let (ty, kind, col_ty) = if char_col {
                (DataType::Char(width), KeyKind::PaddedPrefix, csd_table::ColumnType::Char(width))
            } else {
                (DataType::Varchar, KeyKind::Prefix, csd_table::ColumnType::Varchar)
            };
            // What the page stores: CHAR values padded to 12 bytes.
            let stored: Vec<Vec<u8>> = page
                .iter()
                .map(|v| {
                    let mut v = v.clone();
                    if char_col {
                        v.truncate(width.into());
                        v.resize(width.into(), b' ');
                    }
                    v
                })
                .collect();
            let keys: Vec<i64> = stored.iter().map(|v| kind.key(col_ty, v).unwrap_or(0)).collect();
            let Some(rule) = rule_for(Some(&str_expr(&pred, ty)), 0) else {
                return Ok(());
            };
            let hit = stored.iter().any(|v| str_holds(&pred, v, char_col));
            let range = Entry::Range {
                table: 1,
                min: *keys.iter().min().unwrap_or(&0),
                max: *keys.iter().max().unwrap_or(&0),
            };
            let mut bounds: Vec<i64> = split.iter().map(|b| kind.key(col_ty, b).unwrap_or(0)).collect();
            bounds.sort_unstable();
            bounds.dedup();
            let mut bits = vec![0u8; (bounds.len() + 1).div_ceil(8)];
            for k in &keys {
                let b = bounds.partition_point(|x| x <= k);
                bits[b / 8] |= 1 << (b % 8);
            }
            let bitmap = Entry::Bitmap { table: 1, bits };
            if hit {
                proptest::prop_assert!(may_match(&range, 1, &IndexEncoding::Range, &rule), "range {range:?} {rule:?}");
                proptest::prop_assert!(
                    may_match(&bitmap, 1, &IndexEncoding::Bitmap { bounds: bounds.clone() }, &rule),
                    "bitmap {bounds:?} {rule:?}"
                );
            }
        }
    }

    #[test]
    fn equi_depth_points_are_strictly_increasing_and_split_the_sample() {
        let mut v: Vec<i64> = (0..1000).collect();
        let b = equi_depth(&mut v, 4);
        assert_eq!(b, vec![250, 500, 750]);
        let mut same = vec![7; 100];
        assert_eq!(equi_depth(&mut same, 8), vec![8]);
        let mut skew: Vec<i64> = std::iter::repeat_n(1, 90).chain(2..12).collect();
        let b = equi_depth(&mut skew, 10);
        assert!(b.windows(2).all(|w| w[0] < w[1]), "{b:?}");
        assert!(b[0] > 1);
        assert_eq!(equi_depth(&mut [], 4), vec![0]);
    }
}
