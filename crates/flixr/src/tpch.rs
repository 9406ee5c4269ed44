//! TPC-H data for the FLIXR workloads and Q1, Q4, Q6, Q14 as access-path workloads
//! (flixr §6.2, Figure 10).
//!
//! Data: `tpchgen` rows (the generator of `csd load tpch`) in csd's fixed-width schemas
//! (`csd_table::datagen::tpch`). Each query runs on the physical design that suits it
//! (§6.4: "we can use the items in the l_shipdate column ... as the primary key"):
//! * Q1, Q6: LINEITEM clustered and keyed on `l_shipdate` (range entries);
//! * Q14: the same LINEITEM ⋈ PART keyed on `p_partkey` (a bitmap under FLIXR, so that
//!   READ_IDX_JOIN2 prunes PART with the per-table bitmap JOIN1 builds from the LINEITEM
//!   rows of the month);
//! * Q4: ORDERS clustered and keyed on `o_orderdate` (range) ⋈ LINEITEM keyed on
//!   `l_orderkey` (bitmap; clustered as generated).
//!
//! Each query runs `--queries` times with substitution parameters drawn from the seed
//! within the specification's ranges (Q1 DELTA 60..120; Q4 a month of 1993-01..1997-10;
//! Q6 a year of 1993..1997, DISCOUNT 0.02..0.09, QUANTITY 24..25; Q14 a month of
//! 1993..1997). Operators on the host: hash aggregation for Q1, Q6 and Q14's sums, a
//! semi-join for Q4's EXISTS. Every answer is also computed from the generated rows in
//! memory and must equal the store's.

use crate::{EvalError, Measure, Rng, Setup, Workload, digest, measure};
use csd_host::rowstore::{IndexKind, KeyEncoding, RowStore, TableDef, TableId};
use csd_table::datagen::{TpchGenerator, TpchTable};
use csd_table::{ColumnType, RowSource, Schema, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, OnceLock};

/// The TPC-H scale factor of the paper's runs (§5: "a scale factor of 10").
pub const PAPER_SF: f64 = 10.0;

/// The four queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Query {
    /// Pricing summary report.
    Q1,
    /// Order priority checking.
    Q4,
    /// Forecasting revenue change.
    Q6,
    /// Promotion effect.
    Q14,
}

/// Rows of `table` at `sf` as values.
pub fn rows(table: TpchTable, sf: f64) -> Result<Vec<Vec<Value>>, EvalError> {
    let mut g = TpchGenerator::new(table, sf).map_err(|e| EvalError::Usage(e.to_string()))?;
    let schema = table.schema();
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while g.next_row(&mut buf) {
        out.push(
            schema
                .decode_row(&buf)
                .map_err(|e| EvalError::Check(e.to_string()))?,
        );
    }
    Ok(out)
}

/// The columns of `table` for a [`TableDef`].
pub fn columns(schema: &Schema) -> Vec<(String, ColumnType)> {
    schema
        .columns()
        .iter()
        .map(|c| (c.name.clone(), c.ty))
        .collect()
}

/// `n - 1` split points cutting `lo..=hi` into `n` equal buckets.
pub fn bounds(lo: i64, hi: i64, n: usize) -> Vec<i64> {
    let span = (hi - lo + 1).max(n as i64);
    let mut v: Vec<i64> = (1..n as i64).map(|i| lo + span * i / n as i64).collect();
    v.dedup();
    v
}

/// Buckets of a bitmap entry with 24 extension bytes: 160 bits.
pub const BITMAP_BUCKETS: usize = 160;

/// A table definition for `t` keyed on `key`.
pub fn def(t: TpchTable, key: &str, encoding: KeyEncoding, rows: usize, page: usize) -> TableDef {
    let schema = t.schema();
    let cap = csd_table::page::capacity_for(&schema, csd_table::Layout::Nsm, page).unwrap_or(1);
    TableDef {
        name: t.name().into(),
        columns: columns(&schema),
        key: key.into(),
        encoding,
        max_pages: (rows.div_ceil(cap.max(1)) as u64) * 2 + 64,
    }
}

/// Column `name`'s index in `t`'s schema.
pub fn col(t: TpchTable, name: &str) -> usize {
    t.schema().column_index(name).unwrap_or(0)
}

fn i(v: &[Value], c: usize) -> i64 {
    v.get(c).and_then(Value::as_i64).unwrap_or(0)
}

fn chars(v: &[Value], c: usize) -> Vec<u8> {
    match v.get(c) {
        Some(Value::Char(b)) => b.clone(),
        _ => Vec::new(),
    }
}

fn day(y: i32, m: u32, d: u32) -> i64 {
    csd_table::date::days_from_ymd(y, m, d).unwrap_or(0) as i64
}

/// Add `months` to a date given as days.
fn plus_months(y: i32, m: u32, months: u32) -> (i32, u32) {
    let t = (m - 1) + months;
    (y + (t / 12) as i32, t % 12 + 1)
}

/// Q1's answer: per (returnflag, linestatus): sum qty, sum base price, sum disc price
/// (×100 ×100), sum charge (×100³), count.
type Q1Answer = BTreeMap<(Vec<u8>, Vec<u8>), (i128, i128, i128, i128, u64)>;

fn q1_fold(li: &[Vec<Value>], delta_hi: i64) -> Q1Answer {
    let (sd, rf, ls) = (
        col(TpchTable::LineItem, "l_shipdate"),
        col(TpchTable::LineItem, "l_returnflag"),
        col(TpchTable::LineItem, "l_linestatus"),
    );
    let (q, p, d, t) = (
        col(TpchTable::LineItem, "l_quantity"),
        col(TpchTable::LineItem, "l_extendedprice"),
        col(TpchTable::LineItem, "l_discount"),
        col(TpchTable::LineItem, "l_tax"),
    );
    let mut out = Q1Answer::new();
    for r in li {
        if i(r, sd) > delta_hi {
            continue;
        }
        let e = out.entry((chars(r, rf), chars(r, ls))).or_default();
        let (qq, pp, dd, tt) = (
            i(r, q) as i128,
            i(r, p) as i128,
            i(r, d) as i128,
            i(r, t) as i128,
        );
        e.0 += qq;
        e.1 += pp;
        e.2 += pp * (100 - dd);
        e.3 += pp * (100 - dd) * (100 + tt);
        e.4 += 1;
    }
    out
}

/// Q6's revenue, `SUM(l_extendedprice * l_discount)`, over the rows a configuration
/// returned.
fn q6_revenue(rows: &[csd_host::rowstore::Row]) -> i128 {
    let (p, d) = (
        col(TpchTable::LineItem, "l_extendedprice"),
        col(TpchTable::LineItem, "l_discount"),
    );
    rows.iter()
        .map(|r| i(&r.values, p) as i128 * i(&r.values, d) as i128)
        .sum()
}

/// The Q6 revenue of the rows a configuration selected, checked against the in-memory
/// reference.
fn q6_checked(
    name: Workload,
    config: IndexKind,
    rows: &[csd_host::rowstore::Row],
    li: &[Vec<Value>],
    (lo, hi, disc, qty): (i64, i64, i64, i64),
) -> Result<i128, EvalError> {
    let got = q6_revenue(rows);
    if got != q6_sum(li, lo, hi, disc, qty) {
        return Err(EvalError::Check(format!(
            "{name} under {config}: revenue {got} differs from the reference"
        )));
    }
    Ok(got)
}

fn q6_sum(li: &[Vec<Value>], lo: i64, hi: i64, disc: i64, qty: i64) -> i128 {
    let (sd, q, p, d) = (
        col(TpchTable::LineItem, "l_shipdate"),
        col(TpchTable::LineItem, "l_quantity"),
        col(TpchTable::LineItem, "l_extendedprice"),
        col(TpchTable::LineItem, "l_discount"),
    );
    li.iter()
        .filter(|r| {
            let s = i(r, sd);
            lo <= s && s <= hi && (disc - 1..=disc + 1).contains(&i(r, d)) && i(r, q) < qty
        })
        .map(|r| i(r, p) as i128 * i(r, d) as i128)
        .sum()
}

/// The generated data, shared by every configuration of one run.
pub struct Data {
    /// LINEITEM sorted by `l_shipdate`.
    pub lineitem_by_date: Vec<Vec<Value>>,
    /// LINEITEM as generated (by `l_orderkey`).
    pub lineitem: Vec<Vec<Value>>,
    /// ORDERS sorted by `o_orderdate`.
    pub orders_by_date: Vec<Vec<Value>>,
    /// PART as generated (by `p_partkey`).
    pub part: Vec<Vec<Value>>,
}

impl Data {
    /// Generate at `sf`.
    pub fn new(sf: f64) -> Result<Data, EvalError> {
        let lineitem = rows(TpchTable::LineItem, sf)?;
        let sd = col(TpchTable::LineItem, "l_shipdate");
        let mut lineitem_by_date = lineitem.clone();
        lineitem_by_date.sort_by_key(|r| i(r, sd));
        let od = col(TpchTable::Orders, "o_orderdate");
        let mut orders_by_date = rows(TpchTable::Orders, sf)?;
        orders_by_date.sort_by_key(|r| i(r, od));
        let part = rows(TpchTable::Part, sf)?;
        Ok(Data {
            lineitem_by_date,
            lineitem,
            orders_by_date,
            part,
        })
    }

    fn part_bounds(&self) -> Vec<i64> {
        let n = self.part.len() as i64;
        bounds(1, n.max(1), BITMAP_BUCKETS)
    }

    fn orderkey_bounds(&self) -> Vec<i64> {
        let k = col(TpchTable::LineItem, "l_orderkey");
        let max = self.lineitem.iter().map(|r| i(r, k)).max().unwrap_or(1);
        bounds(1, max, BITMAP_BUCKETS)
    }

    /// LBAs of `page` bytes the tables of `q` need (pages and index regions, generously).
    fn lbas(&self, q: Query, page: usize) -> u64 {
        let pages = |n: usize, w: usize| (n * (w + 2)).div_ceil(page - 96) as u64;
        let li = pages(self.lineitem.len(), 148) * 2 + 64;
        let tree = |n: usize| crate::tree_lbas(n as u64);
        match q {
            Query::Q1 | Query::Q6 => li + tree(self.lineitem.len()),
            Query::Q14 => {
                li + tree(self.lineitem.len())
                    + pages(self.part.len(), 164) * 2
                    + 64
                    + tree(self.part.len())
            }
            Query::Q4 => {
                li + tree(self.lineitem.len())
                    + pages(self.orders_by_date.len(), 138) * 2
                    + 64
                    + tree(self.orders_by_date.len())
            }
        }
    }
}

/// Generated data by scale factor bits.
type DataCache = Vec<(u64, Arc<Data>)>;

/// The data at `sf`, generated once per process and shared (every configuration of a
/// run loads the same rows).
pub fn data(sf: f64) -> Result<Arc<Data>, EvalError> {
    static CACHE: OnceLock<Mutex<DataCache>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(Vec::new()));
    let key = sf.to_bits();
    let mut g = cache
        .lock()
        .map_err(|_| EvalError::Check("TPC-H data cache poisoned".into()))?;
    if let Some((_, d)) = g.iter().find(|(k, _)| *k == key) {
        return Ok(d.clone());
    }
    let d = Arc::new(Data::new(sf)?);
    // Keep the latest scale only: a run uses one.
    g.clear();
    g.push((key, d.clone()));
    Ok(d)
}

/// Run query `q` `s.queries` times under `kind`.
pub fn run(s: &Setup, kind: IndexKind, q: Query) -> Result<Measure, EvalError> {
    let data = data(s.sf)?;
    run_on(s, kind, q, &data)
}

/// Run `q` on already generated `data`.
pub fn run_on(s: &Setup, kind: IndexKind, q: Query, data: &Data) -> Result<Measure, EvalError> {
    let mut st = s.store(kind, data.lbas(q, s.page_bytes()), s.sf / PAPER_SF)?;
    let mut rng = Rng::new(s.seed ^ 0x7C4);
    let st = &mut st;
    match q {
        Query::Q1 => run_q1(s, st, data, &mut rng),
        Query::Q4 => run_q4(s, st, data, &mut rng),
        Query::Q6 => run_q6(s, st, data, &mut rng),
        Query::Q14 => run_q14(s, st, data, &mut rng),
    }
}

/// LINEITEM keyed by `l_shipdate` (range encoding), loaded in date order.
fn lineitem_by_date(st: &mut RowStore, data: &Data) -> Result<TableId, EvalError> {
    let t = loaded(
        st,
        TpchTable::LineItem,
        "l_shipdate",
        KeyEncoding::Range,
        &data.lineitem_by_date,
    )?;
    Ok(t)
}

/// Table `t` keyed on `key`, created with room for `rows` and loaded with them.
fn loaded(
    st: &mut RowStore,
    t: TpchTable,
    key: &str,
    encoding: KeyEncoding,
    rows: &[Vec<Value>],
) -> Result<TableId, EvalError> {
    let id = st.create_table(def(t, key, encoding, rows.len(), st.page_bytes()))?;
    st.load(id, rows)?;
    Ok(id)
}

/// "{name} under {kind}: answer differs from the reference" and the like.
fn differs(name: Workload, st: &RowStore, what: String) -> EvalError {
    EvalError::Check(format!("{name} under {}: {what}", st.kind().name()))
}

/// Q1: a scan of the shipdates up to a random cut-off, folded into the pricing summary.
fn run_q1(s: &Setup, st: &mut RowStore, data: &Data, rng: &mut Rng) -> Result<Measure, EvalError> {
    let name = Workload::Q1;
    let li = lineitem_by_date(st, data)?;
    measure(s, name, st, |st| {
        let mut answers = Vec::new();
        for _ in 0..s.queries {
            let delta = rng.range(60, 120);
            let hi = day(1998, 12, 1) - delta;
            let rows = st.scan(li, i64::MIN, hi)?;
            let got = q1_fold(&rows.into_iter().map(|r| r.values).collect::<Vec<_>>(), hi);
            if got != q1_fold(&data.lineitem, hi) {
                return Err(differs(
                    name,
                    st,
                    "answer differs from the in-memory reference".into(),
                ));
            }
            answers.push(digest(&format!("{got:?}")));
        }
        Ok((s.queries as u64, digest(&answers)))
    })
}

/// Q6: a year of shipdates filtered on discount and quantity, summed into revenue.
fn run_q6(s: &Setup, st: &mut RowStore, data: &Data, rng: &mut Rng) -> Result<Measure, EvalError> {
    let name = Workload::Q6;
    let li = lineitem_by_date(st, data)?;
    let (q, d) = (
        col(TpchTable::LineItem, "l_quantity"),
        col(TpchTable::LineItem, "l_discount"),
    );
    measure(s, name, st, |st| {
        let mut answers = Vec::new();
        for _ in 0..s.queries {
            let y = rng.range(1993, 1997) as i32;
            let (lo, hi) = (day(y, 1, 1), day(y + 1, 1, 1) - 1);
            let disc = rng.range(2, 9);
            let qty = rng.range(24, 25) * 100;
            let rows = st.scan_where(li, lo, hi, &|r| {
                (disc - 1..=disc + 1).contains(&i(r, d)) && i(r, q) < qty
            })?;
            answers.push(q6_checked(
                name,
                st.kind(),
                &rows,
                &data.lineitem,
                (lo, hi, disc, qty),
            )?);
        }
        Ok((s.queries as u64, digest(&answers)))
    })
}

/// Q14: a month of LINEITEM joined with PART on `l_partkey`; promotion revenue over
/// all revenue.
fn run_q14(s: &Setup, st: &mut RowStore, data: &Data, rng: &mut Rng) -> Result<Measure, EvalError> {
    let name = Workload::Q14;
    let li = lineitem_by_date(st, data)?;
    let pt = loaded(
        st,
        TpchTable::Part,
        "p_partkey",
        KeyEncoding::Bitmap(data.part_bounds()),
        &data.part,
    )?;
    let (p, d) = (
        col(TpchTable::LineItem, "l_extendedprice"),
        col(TpchTable::LineItem, "l_discount"),
    );
    let ptype = col(TpchTable::Part, "p_type");
    let promo = q14_promo(data);
    measure(s, name, st, |st| {
        let mut answers = Vec::new();
        for _ in 0..s.queries {
            let y = rng.range(1993, 1997) as i32;
            let m = rng.range(1, 12) as u32;
            let (ny, nm) = plus_months(y, m, 1);
            let (lo, hi) = (day(y, m, 1), day(ny, nm, 1) - 1);
            let pairs = st.join(li, lo, hi, &|_| true, "l_partkey", pt)?;
            let (mut num, mut den) = (0i128, 0i128);
            for (l, pr) in &pairs {
                let rev = i(&l.values, p) as i128 * (100 - i(&l.values, d)) as i128;
                den += rev;
                if chars(&pr.values, ptype).starts_with(b"PROMO") {
                    num += rev;
                }
            }
            let (rn, rd) = q14_reference(data, &promo, lo, hi);
            if (num, den) != (rn, rd) {
                return Err(differs(
                    name,
                    st,
                    format!("({num}, {den}) differs from the reference ({rn}, {rd})"),
                ));
            }
            answers.push((num, den));
        }
        Ok((s.queries as u64, digest(&answers)))
    })
}

/// The part keys of promotion parts.
fn q14_promo(data: &Data) -> BTreeSet<i64> {
    let (ptype, ppk) = (
        col(TpchTable::Part, "p_type"),
        col(TpchTable::Part, "p_partkey"),
    );
    data.part
        .iter()
        .filter(|r| chars(r, ptype).starts_with(b"PROMO"))
        .map(|r| i(r, ppk))
        .collect()
}

/// Q14's (promotion revenue, revenue) of shipdates `lo..=hi`, from the generated rows
/// (`promo`: [`q14_promo`]).
fn q14_reference(data: &Data, promo: &BTreeSet<i64>, lo: i64, hi: i64) -> (i128, i128) {
    let (p, d, sd, lpk) = (
        col(TpchTable::LineItem, "l_extendedprice"),
        col(TpchTable::LineItem, "l_discount"),
        col(TpchTable::LineItem, "l_shipdate"),
        col(TpchTable::LineItem, "l_partkey"),
    );
    let (mut rn, mut rd) = (0i128, 0i128);
    for r in &data.lineitem {
        let sdv = i(r, sd);
        if lo <= sdv && sdv <= hi {
            let rev = i(r, p) as i128 * (100 - i(r, d)) as i128;
            rd += rev;
            if promo.contains(&i(r, lpk)) {
                rn += rev;
            }
        }
    }
    (rn, rd)
}

/// Q4: a quarter of ORDERS joined with LINEITEM on the order key; orders with a late
/// line, counted by priority.
fn run_q4(s: &Setup, st: &mut RowStore, data: &Data, rng: &mut Rng) -> Result<Measure, EvalError> {
    let name = Workload::Q4;
    let od = loaded(
        st,
        TpchTable::Orders,
        "o_orderdate",
        KeyEncoding::Range,
        &data.orders_by_date,
    )?;
    let li = loaded(
        st,
        TpchTable::LineItem,
        "l_orderkey",
        KeyEncoding::Bitmap(data.orderkey_bounds()),
        &data.lineitem,
    )?;
    let (cd, rd) = (
        col(TpchTable::LineItem, "l_commitdate"),
        col(TpchTable::LineItem, "l_receiptdate"),
    );
    let (ook, oprio) = (
        col(TpchTable::Orders, "o_orderkey"),
        col(TpchTable::Orders, "o_orderpriority"),
    );
    let late = q4_late(data);
    measure(s, name, st, |st| {
        let mut answers = Vec::new();
        for _ in 0..s.queries {
            let y = rng.range(1993, 1997) as i32;
            let m = if y == 1997 {
                rng.range(1, 10)
            } else {
                rng.range(1, 12)
            } as u32;
            let (ny, nm) = plus_months(y, m, 3);
            let (lo, hi) = (day(y, m, 1), day(ny, nm, 1) - 1);
            let pairs = st.join(od, lo, hi, &|_| true, "o_orderkey", li)?;
            let mut seen = BTreeSet::new();
            let mut got: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
            for (o, l) in &pairs {
                if i(&l.values, cd) < i(&l.values, rd) && seen.insert(i(&o.values, ook)) {
                    *got.entry(chars(&o.values, oprio)).or_default() += 1;
                }
            }
            if got != q4_reference(data, &late, lo, hi) {
                return Err(differs(
                    name,
                    st,
                    "answer differs from the reference".into(),
                ));
            }
            answers.push(digest(&format!("{got:?}")));
        }
        Ok((s.queries as u64, digest(&answers)))
    })
}

/// The order keys with a line received after its commit date.
fn q4_late(data: &Data) -> BTreeSet<i64> {
    let (cd, rd, lok) = (
        col(TpchTable::LineItem, "l_commitdate"),
        col(TpchTable::LineItem, "l_receiptdate"),
        col(TpchTable::LineItem, "l_orderkey"),
    );
    data.lineitem
        .iter()
        .filter(|r| i(r, cd) < i(r, rd))
        .map(|r| i(r, lok))
        .collect()
}

/// Q4's orders with a late line by priority, for order dates `lo..=hi`, from the
/// generated rows (`late`: [`q4_late`]).
fn q4_reference(data: &Data, late: &BTreeSet<i64>, lo: i64, hi: i64) -> BTreeMap<Vec<u8>, u64> {
    let (ook, odate, oprio) = (
        col(TpchTable::Orders, "o_orderkey"),
        col(TpchTable::Orders, "o_orderdate"),
        col(TpchTable::Orders, "o_orderpriority"),
    );
    let mut want: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    for r in &data.orders_by_date {
        let d0 = i(r, odate);
        if lo <= d0 && d0 <= hi && late.contains(&i(r, ook)) {
            *want.entry(chars(r, oprio)).or_default() += 1;
        }
    }
    want
}

/// Split points of the §6.4 secondary keys: `l_discount` (DECIMAL x100, 0.00..=0.10: a
/// bucket per value) and `l_quantity` (x100, 1..=50: 16 buckets).
pub fn secondary_bounds() -> (Vec<i64>, Vec<i64>) {
    ((1..=10).collect(), bounds(100, 5_000, 16))
}

/// TPC-H Q6 with `l_shipdate` as the primary key and, when `secondary`, `l_discount` and
/// `l_quantity` as secondary keys (flixr §6.4, Figure 12): under FLIXR bitmaps packed
/// with the primary range in the per-page entry and one rule over the three columns;
/// under the host B+tree kinds two more per-row B+trees whose page lists the host
/// intersects. The parameters are drawn as in [`run`]'s Q6 (same seed, same answers).
pub fn run_q6_keys(
    s: &Setup,
    kind: IndexKind,
    secondary: bool,
    data: &Data,
) -> Result<Measure, EvalError> {
    let mut st = s.store(
        kind,
        data.lbas(Query::Q6, s.page_bytes()) * 3,
        s.sf / PAPER_SF,
    )?;
    let name = if secondary {
        Workload::Q6MultiKey
    } else {
        Workload::Q6Primary
    };
    let li = st.create_table(def(
        TpchTable::LineItem,
        "l_shipdate",
        KeyEncoding::Range,
        data.lineitem.len(),
        st.page_bytes(),
    ))?;
    if secondary {
        let (db, qb) = secondary_bounds();
        st.add_secondary(li, "l_discount", KeyEncoding::Bitmap(db))?;
        st.add_secondary(li, "l_quantity", KeyEncoding::Bitmap(qb))?;
    }
    st.load(li, &data.lineitem_by_date)?;
    let (q, d) = (
        col(TpchTable::LineItem, "l_quantity"),
        col(TpchTable::LineItem, "l_discount"),
    );
    let mut rng = Rng::new(s.seed ^ 0x7C4);
    measure(s, name, &mut st, |st| {
        let mut answers = Vec::new();
        for _ in 0..s.queries {
            let y = rng.range(1993, 1997) as i32;
            let (lo, hi) = (day(y, 1, 1), day(y + 1, 1, 1) - 1);
            let disc = rng.range(2, 9);
            let qty = rng.range(24, 25) * 100;
            let rows = st.scan_keys(
                li,
                (lo, hi),
                &[(d, disc - 1, disc + 1), (q, i64::MIN, qty - 1)],
                &|_| true,
            )?;
            answers.push(q6_checked(
                name,
                st.kind(),
                &rows,
                &data.lineitem,
                (lo, hi, disc, qty),
            )?);
        }
        Ok((s.queries as u64, digest(&answers)))
    })
}
