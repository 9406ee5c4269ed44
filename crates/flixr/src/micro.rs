//! The microbenchmarks of flixr §6.1 (Figure 9): Scan with filtering, Join, Insert and
//! Delete on TPC-H LINEITEM (and PART for Join), "random queries with random conditions".
//!
//! Physical design: LINEITEM as generated (clustered on `l_orderkey`) and keyed on it
//! (range entries under FLIXR, a per-row B+tree under the baselines); PART keyed on
//! `p_partkey` (a bitmap of 160 buckets under FLIXR, the join's second table).
//! * Scan: `--queries` ranges of `l_orderkey` covering `--selectivity` of the key space.
//! * Join: the same kind of range on LINEITEM ⋈ PART on `l_partkey = p_partkey`
//!   (READ_IDX_JOIN1/2 under FLIXR, index nested loop under the B+trees, scans without).
//! * Insert: `--queries` single-row INSERTs of random LINEITEM rows (keys drawn from the
//!   table's key range).
//! * Delete: `--queries` DELETEs of the rows whose order key is in a random range of
//!   eight keys (order keys are sparse: that is one order, sometimes none or two).
//!
//! Answers (rows matched, joined pairs, and the table's contents after Insert and
//! Delete, checked by a full scan outside the measured span) are digested and compared
//! across configurations.

use crate::tpch::{self, BITMAP_BUCKETS, col};
use crate::{EvalError, Measure, Rng, Setup, Workload, digest, measure};
use csd_host::rowstore::{IndexKind, KeyEncoding, RowStore, TableId};
use csd_table::Value;
use csd_table::datagen::TpchTable;

struct Micro {
    store: RowStore,
    li: TableId,
    pt: TableId,
    max_key: i64,
}

fn key(v: &[Value], c: usize) -> i64 {
    v.get(c).and_then(Value::as_i64).unwrap_or(0)
}

fn setup(s: &Setup, kind: IndexKind, with_part: bool) -> Result<Micro, EvalError> {
    let data = tpch::data(s.sf)?;
    let li_rows = &data.lineitem;
    let part: &[Vec<Value>] = if with_part { &data.part } else { &[] };
    let mut li_def = tpch::def(
        TpchTable::LineItem,
        "l_orderkey",
        KeyEncoding::Range,
        li_rows.len(),
        s.page_bytes(),
    );
    li_def.max_pages += s.queries as u64;
    let tree = |n: usize| crate::tree_lbas(n as u64);
    let lbas = li_def.max_pages
        + tree(li_rows.len())
        + (part.len() as u64 / 20) * 2
        + 128
        + tree(part.len());
    let mut store = s.store(kind, lbas, s.sf / crate::tpch::PAPER_SF)?;
    let li = store.create_table(li_def)?;
    store.load(li, li_rows)?;
    let nparts = part.len().max(1) as i64;
    let pt = store.create_table(tpch::def(
        TpchTable::Part,
        "p_partkey",
        KeyEncoding::Bitmap(tpch::bounds(1, nparts, BITMAP_BUCKETS)),
        part.len().max(1),
        s.page_bytes(),
    ))?;
    if !part.is_empty() {
        store.load(pt, part)?;
    }
    let k = col(TpchTable::LineItem, "l_orderkey");
    let max_key = li_rows.iter().map(|r| key(r, k)).max().unwrap_or(1);
    Ok(Micro {
        store,
        li,
        pt,
        max_key,
    })
}

fn ranges(s: &Setup, max_key: i64, salt: u64) -> Vec<(i64, i64)> {
    let span = ((max_key as f64 * s.selectivity).round() as i64).max(1);
    let mut rng = Rng::new(s.seed ^ salt);
    (0..s.queries)
        .map(|_| {
            let lo = rng.range(1, (max_key - span + 1).max(1));
            (lo, lo + span - 1)
        })
        .collect()
}

/// A digest of a table's whole contents (checked outside the measured span).
fn contents(st: &mut RowStore, t: TableId) -> Result<u64, EvalError> {
    let mut rows: Vec<String> = st
        .scan_all(t)?
        .into_iter()
        .map(|r| format!("{:?}", r.values))
        .collect();
    rows.sort_unstable();
    Ok(digest(&rows))
}

/// Scan with filtering.
pub fn scan(s: &Setup, kind: IndexKind) -> Result<Measure, EvalError> {
    let mut m = setup(s, kind, false)?;
    let qs = ranges(s, m.max_key, 1);
    let li = m.li;
    measure(s, Workload::Scan, &mut m.store, |st| {
        let mut hits = Vec::new();
        for &(lo, hi) in &qs {
            hits.push(st.scan(li, lo, hi)?.len() as u64);
        }
        Ok((qs.len() as u64, digest(&hits)))
    })
}

/// Join lineitem ⋈ part.
pub fn join(s: &Setup, kind: IndexKind) -> Result<Measure, EvalError> {
    let mut m = setup(s, kind, true)?;
    let qs = ranges(s, m.max_key, 2);
    let (li, pt) = (m.li, m.pt);
    let pk = col(TpchTable::Part, "p_partkey");
    let lk = col(TpchTable::LineItem, "l_orderkey");
    measure(s, Workload::Join, &mut m.store, |st| {
        let mut ans = Vec::new();
        for &(lo, hi) in &qs {
            let mut pairs: Vec<(i64, i64)> = st
                .join(li, lo, hi, &|_| true, "l_partkey", pt)?
                .iter()
                .map(|(l, p)| (key(&l.values, lk), key(&p.values, pk)))
                .collect();
            pairs.sort_unstable();
            ans.push(digest(&pairs));
        }
        Ok((qs.len() as u64, digest(&ans)))
    })
}

/// Insert random rows one at a time.
pub fn insert(s: &Setup, kind: IndexKind) -> Result<Measure, EvalError> {
    let mut m = setup(s, kind, false)?;
    let li = m.li;
    let mut rng = Rng::new(s.seed ^ 3);
    let template = m.store.scan(li, 1, 1)?;
    let Some(t) = template.first().map(|r| r.values.clone()) else {
        return Err(EvalError::Check("LINEITEM has no order 1".into()));
    };
    let (kc, qc, lc) = (
        col(TpchTable::LineItem, "l_orderkey"),
        col(TpchTable::LineItem, "l_quantity"),
        col(TpchTable::LineItem, "l_linenumber"),
    );
    let rows: Vec<Vec<Value>> = (0..s.queries)
        .map(|i| {
            let mut r = t.clone();
            r[kc] = Value::Int64(rng.range(1, m.max_key));
            r[qc] = Value::Decimal(rng.range(1, 50) * 100);
            r[lc] = Value::Int32(8 + i as i32);
            r
        })
        .collect();
    let mut me = measure(s, Workload::Insert, &mut m.store, |st| {
        for r in &rows {
            st.insert(li, std::slice::from_ref(r))?;
        }
        Ok((rows.len() as u64, 0))
    })?;
    me.answer = contents(&mut m.store, li)?;
    Ok(me)
}

/// Delete the rows of random order keys.
pub fn delete(s: &Setup, kind: IndexKind) -> Result<Measure, EvalError> {
    let mut m = setup(s, kind, false)?;
    let li = m.li;
    let mut rng = Rng::new(s.seed ^ 4);
    let keys: Vec<i64> = (0..s.queries).map(|_| rng.range(1, m.max_key)).collect();
    let mut me = measure(s, Workload::Delete, &mut m.store, |st| {
        let mut n = Vec::new();
        for &k in &keys {
            n.push(st.delete_where(li, k, k + 7, &|_| true)?);
        }
        Ok((keys.len() as u64, digest(&n)))
    })?;
    me.answer = digest(&(me.answer, contents(&mut m.store, li)?));
    Ok(me)
}
