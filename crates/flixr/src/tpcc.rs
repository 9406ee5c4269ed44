//! TPC-C NewOrder and Payment over the row store (flixr §6.2, Figure 10: "we tested the
//! NewOrder and Payment transactions in the TPC-C benchmark ... \[they\] include frequent
//! database writes and updates").
//!
//! All nine tables (WAREHOUSE, DISTRICT, CUSTOMER, HISTORY, NEW_ORDER, ORDERS,
//! ORDER_LINE, ITEM, STOCK), each keyed on its primary key packed into one INT64:
//! district `w*10 + d`; customer `district*CMAX + c`; order and new-order
//! `district*OMAX + o`; order line `order*16 + number`; stock `w*IMAX + i`; item `i`;
//! history a sequence number. Columns are those the two transactions and the consistency
//! conditions touch, plus CHAR fillers that bring rows near the specification's widths
//! (CUSTOMER ~ 650 B, STOCK ~ 320 B), so pages hold as many rows as in a real database.
//!
//! Population follows the specification (§4.3.3.1) per warehouse: 100,000 ITEM and
//! STOCK rows, 3,000 CUSTOMER rows per district and as many initial ORDERS, the last 900
//! of them in NEW_ORDER, 5..15 ORDER_LINEs per order, W_YTD 300,000.00 and D_YTD
//! 30,000.00 ([`Scale::spec`], `Population::Spec`, the default). [`Scale::reduced`]
//! (`Population::Reduced`: 10,000 items, 300 customers per district, the last 30% of the
//! orders new) keeps the same rules at a tenth of the rows for quick runs and tests.
//!
//! Keys are drawn as the specification draws them (§2.1.6): the customer of NewOrder
//! and Payment by `NURand(1023, 1, customers)`, NewOrder's items by
//! `NURand(8191, 1, items)`, with run-time constants `C` chosen once per run from the
//! seed (§2.1.6.1); warehouses, districts and counts uniformly.
//!
//! Transactions (spec §2.4 and §2.5, without the 1% NewOrder rollbacks and with Payment
//! selecting the customer by id, not by last name): NewOrder reads WAREHOUSE, DISTRICT
//! (and bumps D_NEXT_O_ID), CUSTOMER, inserts ORDERS and NEW_ORDER, and per line reads
//! ITEM, updates STOCK and inserts the ORDER_LINEs; 1% of lines are supplied by another
//! warehouse when there are several. Payment updates WAREHOUSE, DISTRICT and CUSTOMER
//! (15% of customers from another warehouse when there are several) and inserts HISTORY.
//! Every read and update is an index lookup of the primary key through the store's
//! access path. After a run the consistency conditions 1–4 (spec §3.3.2) are checked
//! on the tables' contents and the whole database's digest is the run's answer.

use crate::{EvalError, Measure, Rng, Setup, Workload, digest, measure};
use csd_host::rowstore::{IndexKind, KeyEncoding, RowStore, TableDef, TableId};
use csd_table::{ColumnType, Value};
use std::collections::BTreeMap;

/// Customers per district key space.
const CMAX: i64 = 1 << 16;
/// Orders per district key space.
const OMAX: i64 = 1 << 24;
/// Items per warehouse key space.
const IMAX: i64 = 1 << 20;

/// The two transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Txn {
    /// NewOrder.
    NewOrder,
    /// Payment.
    Payment,
}

/// Population size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scale {
    /// Warehouses.
    pub warehouses: i64,
    /// Items (and stock rows per warehouse).
    pub items: i64,
    /// Customers (and initial orders) per district.
    pub customers: i64,
}

impl Scale {
    /// The specification's population for `warehouses` (§4.3.3.1).
    pub fn spec(warehouses: u32) -> Scale {
        Scale {
            warehouses: warehouses as i64,
            items: 100_000,
            customers: 3_000,
        }
    }

    /// This population's size against the paper's (100 warehouses at the
    /// specification's rows): warehouses over 100 times customers per district over
    /// 3,000 (customers, orders, order lines and history grow with both).
    pub fn paper_fraction(&self) -> f64 {
        self.warehouses as f64 / 100.0 * self.customers as f64 / 3_000.0
    }

    /// A tenth of the specification's rows for `warehouses` (quick runs and tests).
    pub fn reduced(warehouses: u32) -> Scale {
        Scale {
            warehouses: warehouses as i64,
            items: 10_000,
            customers: 300,
        }
    }

    /// The scale `p` gives for `warehouses`.
    pub fn of(p: Population, warehouses: u32) -> Scale {
        match p {
            Population::Spec => Scale::spec(warehouses),
            Population::Reduced => Scale::reduced(warehouses),
        }
    }
}

/// Which population a run loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Population {
    /// The specification's rows per warehouse ([`Scale::spec`]).
    Spec,
    /// A tenth of them ([`Scale::reduced`]).
    Reduced,
}

/// The run-time constants `C` of NURand (spec §2.1.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NuRand {
    /// `C` for customer ids (`A` = 1023).
    pub c_id: i64,
    /// `C` for item ids (`A` = 8191).
    pub ol_i_id: i64,
}

impl NuRand {
    /// Constants drawn once from `rng` (§2.1.6.1: `C` uniform in `0..=A`).
    pub fn new(rng: &mut Rng) -> NuRand {
        NuRand {
            c_id: rng.range(0, 1023),
            ol_i_id: rng.range(0, 8191),
        }
    }

    /// `NURand(A, x, y) = (((random(0, A) | random(x, y)) + C) % (y - x + 1)) + x`.
    pub fn draw(rng: &mut Rng, a: i64, c: i64, x: i64, y: i64) -> i64 {
        (((rng.range(0, a) | rng.range(x, y)) + c) % (y - x + 1)) + x
    }

    /// A customer id in `1..=customers`.
    pub fn customer(&self, rng: &mut Rng, customers: i64) -> i64 {
        Self::draw(rng, 1023, self.c_id, 1, customers)
    }

    /// An item id in `1..=items`.
    pub fn item(&self, rng: &mut Rng, items: i64) -> i64 {
        Self::draw(rng, 8191, self.ol_i_id, 1, items)
    }
}

fn dec(v: i64) -> Value {
    Value::Decimal(v)
}
fn i32v(v: i64) -> Value {
    Value::Int32(v as i32)
}
fn i64v(v: i64) -> Value {
    Value::Int64(v)
}
fn chars(n: usize, seed: u64) -> Value {
    let mut r = Rng::new(seed);
    Value::Char((0..n).map(|_| b'a' + (r.next_u64() % 26) as u8).collect())
}
fn get(v: &[Value], c: usize) -> i64 {
    v.get(c).and_then(Value::as_i64).unwrap_or(0)
}

fn def(name: &str, cols: &[(&str, ColumnType)], rows: i64, page: usize) -> TableDef {
    let columns: Vec<(String, ColumnType)> =
        cols.iter().map(|(n, t)| (n.to_string(), *t)).collect();
    let width: usize = cols.iter().map(|(_, t)| t.width()).sum();
    let per = ((page - 24) / (width + 2)).max(1) as i64;
    TableDef {
        name: name.into(),
        key: cols[0].0.into(),
        columns,
        encoding: KeyEncoding::Range,
        max_pages: ((rows.max(1) + per - 1) / per) as u64 * 2 + 16,
    }
}

const DEC: ColumnType = ColumnType::Decimal { scale: 2 };

/// The nine tables' handles.
struct Db {
    warehouse: TableId,
    district: TableId,
    customer: TableId,
    history: TableId,
    new_order: TableId,
    orders: TableId,
    order_line: TableId,
    item: TableId,
    stock: TableId,
    next_history: i64,
}

/// The columns of WAREHOUSE (the key first).
const WAREHOUSE_COLUMNS: &[(&str, ColumnType)] = &[
    ("w_id", ColumnType::Int64),
    ("w_ytd", DEC),
    ("w_tax", DEC),
    ("w_name", ColumnType::Char(10)),
    ("w_address", ColumnType::Char(70)),
];

/// The columns of DISTRICT (the key first).
const DISTRICT_COLUMNS: &[(&str, ColumnType)] = &[
    ("d_key", ColumnType::Int64),
    ("d_w_id", ColumnType::Int32),
    ("d_id", ColumnType::Int32),
    ("d_ytd", DEC),
    ("d_tax", DEC),
    ("d_next_o_id", ColumnType::Int32),
    ("d_address", ColumnType::Char(70)),
];

/// The columns of CUSTOMER (the key first).
const CUSTOMER_COLUMNS: &[(&str, ColumnType)] = &[
    ("c_key", ColumnType::Int64),
    ("c_w_id", ColumnType::Int32),
    ("c_d_id", ColumnType::Int32),
    ("c_id", ColumnType::Int32),
    ("c_balance", DEC),
    ("c_ytd_payment", DEC),
    ("c_payment_cnt", ColumnType::Int32),
    ("c_discount", DEC),
    ("c_credit", ColumnType::Char(2)),
    ("c_last", ColumnType::Char(16)),
    ("c_data", ColumnType::Char(560)),
];

/// The columns of HISTORY (the key first).
const HISTORY_COLUMNS: &[(&str, ColumnType)] = &[
    ("h_key", ColumnType::Int64),
    ("h_c_key", ColumnType::Int64),
    ("h_d_key", ColumnType::Int64),
    ("h_amount", DEC),
    ("h_date", ColumnType::Date),
    ("h_data", ColumnType::Char(24)),
];

/// The columns of NEW_ORDER (the key first).
const NEW_ORDER_COLUMNS: &[(&str, ColumnType)] = &[
    ("no_key", ColumnType::Int64),
    ("no_d_key", ColumnType::Int64),
    ("no_o_id", ColumnType::Int32),
];

/// The columns of ORDERS (the key first).
const ORDERS_COLUMNS: &[(&str, ColumnType)] = &[
    ("o_key", ColumnType::Int64),
    ("o_d_key", ColumnType::Int64),
    ("o_id", ColumnType::Int32),
    ("o_c_id", ColumnType::Int32),
    ("o_entry_d", ColumnType::Date),
    ("o_carrier_id", ColumnType::Int32),
    ("o_ol_cnt", ColumnType::Int32),
    ("o_all_local", ColumnType::Int32),
];

/// The columns of ORDER_LINE (the key first).
const ORDER_LINE_COLUMNS: &[(&str, ColumnType)] = &[
    ("ol_key", ColumnType::Int64),
    ("ol_d_key", ColumnType::Int64),
    ("ol_o_id", ColumnType::Int32),
    ("ol_number", ColumnType::Int32),
    ("ol_i_id", ColumnType::Int32),
    ("ol_supply_w_id", ColumnType::Int32),
    ("ol_quantity", ColumnType::Int32),
    ("ol_amount", DEC),
    ("ol_delivery_d", ColumnType::Date),
    ("ol_dist_info", ColumnType::Char(24)),
];

/// The columns of ITEM (the key first).
const ITEM_COLUMNS: &[(&str, ColumnType)] = &[
    ("i_id", ColumnType::Int64),
    ("i_im_id", ColumnType::Int32),
    ("i_price", DEC),
    ("i_name", ColumnType::Char(24)),
    ("i_data", ColumnType::Char(50)),
];

/// The columns of STOCK (the key first).
const STOCK_COLUMNS: &[(&str, ColumnType)] = &[
    ("s_key", ColumnType::Int64),
    ("s_w_id", ColumnType::Int32),
    ("s_i_id", ColumnType::Int32),
    ("s_quantity", ColumnType::Int32),
    ("s_ytd", ColumnType::Int64),
    ("s_order_cnt", ColumnType::Int32),
    ("s_remote_cnt", ColumnType::Int32),
    ("s_dist", ColumnType::Char(240)),
    ("s_data", ColumnType::Char(50)),
];

/// The nine tables on pages of `page` bytes, sized for scale `sc` plus `txns`
/// transactions' growth.
fn defs(sc: Scale, txns: i64, page: usize) -> Vec<TableDef> {
    let w = sc.warehouses;
    let d = w * 10;
    let growth = txns + 16;
    vec![
        def("warehouse", WAREHOUSE_COLUMNS, w, page),
        def("district", DISTRICT_COLUMNS, d, page),
        def("customer", CUSTOMER_COLUMNS, d * sc.customers, page),
        def("history", HISTORY_COLUMNS, d * sc.customers + growth, page),
        def(
            "new_order",
            NEW_ORDER_COLUMNS,
            d * sc.customers + growth,
            page,
        ),
        def("orders", ORDERS_COLUMNS, d * sc.customers + growth, page),
        def(
            "order_line",
            ORDER_LINE_COLUMNS,
            (d * sc.customers + growth) * 15,
            page,
        ),
        def("item", ITEM_COLUMNS, sc.items, page),
        def("stock", STOCK_COLUMNS, w * sc.items, page),
    ]
}

/// LBAs of `page` bytes the database needs.
fn lbas(defs: &[TableDef], page: usize) -> u64 {
    defs.iter()
        .map(|d| {
            let w: usize = d.columns.iter().map(|c| c.1.width()).sum();
            let per = ((page - 24) / (w + 2)).max(1) as u64;
            d.max_pages + crate::tree_lbas(d.max_pages * per)
        })
        .sum()
}

/// Generate and load the database.
fn populate(st: &mut RowStore, sc: Scale, txns: i64, seed: u64) -> Result<Db, EvalError> {
    let mut ids = Vec::new();
    for d in defs(sc, txns, st.page_bytes()) {
        ids.push(st.create_table(d)?);
    }
    let mut rng = Rng::new(seed ^ 0xC0C0);
    let db = Db {
        warehouse: ids[0],
        district: ids[1],
        customer: ids[2],
        history: ids[3],
        new_order: ids[4],
        orders: ids[5],
        order_line: ids[6],
        item: ids[7],
        stock: ids[8],
        next_history: 0,
    };
    let i_rows = item_rows(sc, &mut rng);
    let mut rows = Rows::default();
    for w in 1..=sc.warehouses {
        rows.warehouse(w, sc, &mut rng);
    }
    st.load(db.warehouse, &rows.w)?;
    st.load(db.district, &rows.d)?;
    st.load(db.customer, &rows.c)?;
    st.load(db.history, &rows.h)?;
    st.load(db.new_order, &rows.no)?;
    st.load(db.orders, &rows.o)?;
    st.load(db.order_line, &rows.ol)?;
    st.load(db.item, &i_rows)?;
    st.load(db.stock, &rows.s)?;
    Ok(Db {
        next_history: rows.history_key,
        ..db
    })
}

/// The ITEM rows.
fn item_rows(sc: Scale, rng: &mut Rng) -> Vec<Vec<Value>> {
    (1..=sc.items)
        .map(|i| {
            vec![
                i64v(i),
                i32v(rng.range(1, 10_000)),
                dec(rng.range(100, 10_000)),
                chars(24, i as u64),
                chars(50, i as u64 ^ 7),
            ]
        })
        .collect()
}

/// The generated rows of every table but ITEM. Generated warehouse by warehouse and
/// district by district, drawing from one random stream in a fixed order.
#[derive(Default)]
struct Rows {
    w: Vec<Vec<Value>>,
    d: Vec<Vec<Value>>,
    c: Vec<Vec<Value>>,
    h: Vec<Vec<Value>>,
    no: Vec<Vec<Value>>,
    o: Vec<Vec<Value>>,
    ol: Vec<Vec<Value>>,
    s: Vec<Vec<Value>>,
    /// The last HISTORY key used.
    history_key: i64,
}

impl Rows {
    /// Warehouse `w`: its row, its STOCK rows, then its ten districts.
    fn warehouse(&mut self, w: i64, sc: Scale, rng: &mut Rng) {
        self.w.push(vec![
            i64v(w),
            dec(30_000_000),
            dec(rng.range(0, 2000)),
            chars(10, w as u64),
            chars(70, w as u64 ^ 3),
        ]);
        for i in 1..=sc.items {
            self.s.push(vec![
                i64v(w * IMAX + i),
                i32v(w),
                i32v(i),
                i32v(rng.range(10, 100)),
                i64v(0),
                i32v(0),
                i32v(0),
                chars(240, (w * IMAX + i) as u64),
                chars(50, i as u64 ^ 11),
            ]);
        }
        for d in 1..=10 {
            self.district(w, d, sc, rng);
        }
    }

    /// District `d` of warehouse `w`: its row, its customers (each with a HISTORY row)
    /// and its initial orders.
    fn district(&mut self, w: i64, d: i64, sc: Scale, rng: &mut Rng) {
        let n = sc.customers;
        let dk = w * 10 + d;
        self.d.push(vec![
            i64v(dk),
            i32v(w),
            i32v(d),
            dec(3_000_000),
            dec(rng.range(0, 2000)),
            i32v(n + 1),
            chars(70, dk as u64),
        ]);
        for c in 1..=n {
            self.c.push(vec![
                i64v(dk * CMAX + c),
                i32v(w),
                i32v(d),
                i32v(c),
                dec(-1000),
                dec(1000),
                i32v(1),
                dec(rng.range(0, 5000)),
                Value::Char(if rng.range(0, 9) == 0 { b"BC" } else { b"GC" }.to_vec()),
                chars(16, (dk * CMAX + c) as u64),
                chars(560, (dk * CMAX + c) as u64 ^ 5),
            ]);
            self.history_key += 1;
            let h = self.history_key;
            self.h.push(vec![
                i64v(h),
                i64v(dk * CMAX + c),
                i64v(dk),
                dec(1000),
                Value::Date(9000),
                chars(24, h as u64),
            ]);
        }
        for o in 1..=n {
            self.order(w, dk, o, sc, rng);
        }
    }

    /// Initial order `o` of district key `dk`, its lines, and a NEW-ORDER row for the
    /// last 30 % (the undelivered ones).
    fn order(&mut self, w: i64, dk: i64, o: i64, sc: Scale, rng: &mut Rng) {
        let n = sc.customers;
        let ok = dk * OMAX + o;
        let cnt = rng.range(5, 15);
        let delivered = o <= n - n * 3 / 10;
        self.o.push(vec![
            i64v(ok),
            i64v(dk),
            i32v(o),
            i32v(rng.range(1, n)),
            Value::Date(9000),
            i32v(if delivered { rng.range(1, 10) } else { 0 }),
            i32v(cnt),
            i32v(1),
        ]);
        if !delivered {
            self.no.push(vec![i64v(ok), i64v(dk), i32v(o)]);
        }
        for l in 1..=cnt {
            self.ol.push(vec![
                i64v(ok * 16 + l),
                i64v(dk),
                i32v(o),
                i32v(l),
                i32v(rng.range(1, sc.items)),
                i32v(w),
                i32v(5),
                dec(if delivered { 0 } else { rng.range(1, 999_999) }),
                Value::Date(if delivered { 9000 } else { 0 }),
                chars(24, (ok * 16 + l) as u64),
            ]);
        }
    }
}

/// One row by primary key (an error if it is missing).
fn lookup(st: &mut RowStore, t: TableId, k: i64) -> Result<Vec<Value>, EvalError> {
    st.scan(t, k, k)?
        .into_iter()
        .next()
        .map(|r| r.values)
        .ok_or_else(|| EvalError::Check(format!("TPC-C: no row with key {k}")))
}

fn new_order(
    st: &mut RowStore,
    db: &Db,
    sc: Scale,
    nu: NuRand,
    rng: &mut Rng,
) -> Result<(), EvalError> {
    let w = rng.range(1, sc.warehouses);
    let d = rng.range(1, 10);
    let dk = w * 10 + d;
    let c = nu.customer(rng, sc.customers);
    let ol_cnt = rng.range(5, 15);
    lookup(st, db.warehouse, w)?;
    // SELECT D_NEXT_O_ID, then UPDATE it (two lookups, as a DBMS without a cursor
    // update would do).
    let dist = lookup(st, db.district, dk)?;
    let o_id = get(&dist, 5);
    st.update_where(db.district, dk, dk, &|_| true, &|r| {
        r[5] = i32v(get(r, 5) + 1);
    })?;
    lookup(st, db.customer, dk * CMAX + c)?;
    let ok = dk * OMAX + o_id;
    let mut lines = Vec::new();
    let mut all_local = 1;
    for l in 1..=ol_cnt {
        let i = nu.item(rng, sc.items);
        let supply = if sc.warehouses > 1 && rng.range(1, 100) == 1 {
            all_local = 0;
            let mut o = rng.range(1, sc.warehouses - 1);
            if o >= w {
                o += 1;
            }
            o
        } else {
            w
        };
        let qty = rng.range(1, 10);
        let item = lookup(st, db.item, i)?;
        let sk = supply * IMAX + i;
        let remote = (supply != w) as i64;
        st.update_where(db.stock, sk, sk, &|_| true, &|r| {
            let q = get(r, 3);
            r[3] = i32v(if q >= qty + 10 { q - qty } else { q - qty + 91 });
            r[4] = i64v(get(r, 4) + qty);
            r[5] = i32v(get(r, 5) + 1);
            r[6] = i32v(get(r, 6) + remote);
        })?;
        lines.push(vec![
            i64v(ok * 16 + l),
            i64v(dk),
            i32v(o_id),
            i32v(l),
            i32v(i),
            i32v(supply),
            i32v(qty),
            dec(qty * get(&item, 2)),
            Value::Date(0),
            chars(24, (ok * 16 + l) as u64),
        ]);
    }
    st.insert(
        db.orders,
        &[vec![
            i64v(ok),
            i64v(dk),
            i32v(o_id),
            i32v(c),
            Value::Date(9100),
            i32v(0),
            i32v(ol_cnt),
            i32v(all_local),
        ]],
    )?;
    st.insert(db.new_order, &[vec![i64v(ok), i64v(dk), i32v(o_id)]])?;
    st.insert(db.order_line, &lines)?;
    Ok(())
}

fn payment(
    st: &mut RowStore,
    db: &mut Db,
    sc: Scale,
    nu: NuRand,
    rng: &mut Rng,
) -> Result<(), EvalError> {
    let w = rng.range(1, sc.warehouses);
    let d = rng.range(1, 10);
    let dk = w * 10 + d;
    let (cw, cd) = if sc.warehouses > 1 && rng.range(1, 100) <= 15 {
        let mut o = rng.range(1, sc.warehouses - 1);
        if o >= w {
            o += 1;
        }
        (o, rng.range(1, 10))
    } else {
        (w, d)
    };
    let ck = (cw * 10 + cd) * CMAX + nu.customer(rng, sc.customers);
    let amount = rng.range(100, 500_000);
    st.update_where(db.warehouse, w, w, &|_| true, &|r| {
        r[1] = dec(get(r, 1) + amount);
    })?;
    st.update_where(db.district, dk, dk, &|_| true, &|r| {
        r[3] = dec(get(r, 3) + amount);
    })?;
    st.update_where(db.customer, ck, ck, &|_| true, &|r| {
        r[4] = dec(get(r, 4) - amount);
        r[5] = dec(get(r, 5) + amount);
        r[6] = i32v(get(r, 6) + 1);
    })?;
    db.next_history += 1;
    st.insert(
        db.history,
        &[vec![
            i64v(db.next_history),
            i64v(ck),
            i64v(dk),
            dec(amount),
            Value::Date(9100),
            chars(24, db.next_history as u64),
        ]],
    )?;
    Ok(())
}

/// Check the consistency conditions 1–4 (spec §3.3.2.1–4); returns a digest of the
/// whole database.
fn consistency(st: &mut RowStore, db: &Db) -> Result<u64, EvalError> {
    let w = sorted_rows(st, db.warehouse)?;
    let d = sorted_rows(st, db.district)?;
    let no = sorted_rows(st, db.new_order)?;
    let o = sorted_rows(st, db.orders)?;
    let ol = sorted_rows(st, db.order_line)?;
    check_warehouse_ytd(&w, &d)?;
    check_districts(&d, &no, &o, &ol)?;
    let mut dig = Vec::new();
    for t in [
        db.warehouse,
        db.district,
        db.customer,
        db.history,
        db.new_order,
        db.orders,
        db.order_line,
        db.item,
        db.stock,
    ] {
        // The rows' own hash (`Value: Hash`), not their Debug text: formatting every row of
        // the nine tables was most of a TPC-C run's wall time (perf, 1 warehouse).
        dig.push(digest(&sorted_rows(st, t)?));
    }
    Ok(digest(&dig))
}

/// Every row of table `t`, in key order.
fn sorted_rows(st: &mut RowStore, t: TableId) -> Result<Vec<Vec<Value>>, EvalError> {
    let mut v: Vec<Vec<Value>> = st.scan_all(t)?.into_iter().map(|r| r.values).collect();
    v.sort_by_key(|r| get(r, 0));
    Ok(v)
}

/// Consistency condition `n` failed.
fn inconsistent(n: u32, what: String) -> EvalError {
    EvalError::Check(format!("TPC-C consistency {n}: {what}"))
}

/// Condition 1: W_YTD = sum(D_YTD) for every warehouse.
fn check_warehouse_ytd(w: &[Vec<Value>], d: &[Vec<Value>]) -> Result<(), EvalError> {
    for wr in w {
        let wid = get(wr, 0);
        let sum: i64 = d
            .iter()
            .filter(|r| get(r, 1) == wid)
            .map(|r| get(r, 3))
            .sum();
        if sum != get(wr, 1) {
            return Err(inconsistent(
                1,
                format!("warehouse {wid}: W_YTD {} != sum D_YTD {sum}", get(wr, 1)),
            ));
        }
    }
    Ok(())
}

/// Conditions 2–4 for every district, from the DISTRICT, NEW_ORDER, ORDERS and
/// ORDER_LINE rows.
fn check_districts(
    d: &[Vec<Value>],
    no: &[Vec<Value>],
    o: &[Vec<Value>],
    ol: &[Vec<Value>],
) -> Result<(), EvalError> {
    let mut max_o: BTreeMap<i64, i64> = BTreeMap::new();
    let mut ol_cnt: BTreeMap<i64, i64> = BTreeMap::new();
    for r in o {
        let e = max_o.entry(get(r, 1)).or_insert(0);
        *e = (*e).max(get(r, 2));
        *ol_cnt.entry(get(r, 1)).or_insert(0) += get(r, 6);
    }
    let mut no_stats: BTreeMap<i64, (i64, i64, i64)> = BTreeMap::new();
    for r in no {
        let e = no_stats.entry(get(r, 1)).or_insert((i64::MAX, 0, 0));
        e.0 = e.0.min(get(r, 2));
        e.1 = e.1.max(get(r, 2));
        e.2 += 1;
    }
    let mut lines: BTreeMap<i64, i64> = BTreeMap::new();
    for r in ol {
        *lines.entry(get(r, 1)).or_insert(0) += 1;
    }
    for dr in d {
        let dk = get(dr, 0);
        let next = get(dr, 5);
        let mo = max_o.get(&dk).copied().unwrap_or(0);
        let (nmin, nmax, ncount) = no_stats.get(&dk).copied().unwrap_or((0, 0, 0));
        // 2: D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID).
        if next - 1 != mo || mo != nmax {
            return Err(inconsistent(
                2,
                format!(
                    "district {dk}: D_NEXT_O_ID-1 {} max O_ID {mo} max NO_O_ID {nmax}",
                    next - 1
                ),
            ));
        }
        // 3: max(NO_O_ID) - min(NO_O_ID) + 1 = rows in NEW_ORDER.
        if nmax - nmin + 1 != ncount {
            return Err(inconsistent(
                3,
                format!("district {dk}: {nmax} - {nmin} + 1 != {ncount} rows"),
            ));
        }
        // 4: sum(O_OL_CNT) = rows in ORDER_LINE.
        let (s, c) = (
            ol_cnt.get(&dk).copied().unwrap_or(0),
            lines.get(&dk).copied().unwrap_or(0),
        );
        if s != c {
            return Err(inconsistent(
                4,
                format!("district {dk}: sum O_OL_CNT {s} != {c} order lines"),
            ));
        }
    }
    Ok(())
}

/// Run `s.tpcc_txns` transactions of `txn` under `kind`; consistency checked after.
pub fn run(s: &Setup, kind: IndexKind, txn: Txn) -> Result<Measure, EvalError> {
    run_scaled(s, kind, txn, Scale::of(s.tpcc_population, s.warehouses))
}

/// [`run`] at an explicit population size.
pub fn run_scaled(s: &Setup, kind: IndexKind, txn: Txn, sc: Scale) -> Result<Measure, EvalError> {
    let txns = s.tpcc_txns as i64;
    let page = s.page_bytes();
    let mut st = s.store(kind, lbas(&defs(sc, txns, page), page), sc.paper_fraction())?;
    let mut db = populate(&mut st, sc, txns, s.seed)?;
    consistency(&mut st, &db)?;
    let mut rng = Rng::new(s.seed ^ 0x7C);
    let nu = NuRand::new(&mut rng);
    let name = match txn {
        Txn::NewOrder => Workload::NewOrder,
        Txn::Payment => Workload::Payment,
    };
    let mut m = measure(s, name, &mut st, |st| {
        for _ in 0..txns {
            match txn {
                Txn::NewOrder => new_order(st, &db, sc, nu, &mut rng)?,
                Txn::Payment => payment(st, &mut db, sc, nu, &mut rng)?,
            }
        }
        Ok((txns as u64, 0))
    })?;
    m.answer = consistency(&mut st, &db)?;
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_tpcc_keeps_consistency_under_every_configuration() {
        let s = Setup {
            preset: "tiny".into(),
            tpcc_txns: 6,
            ..Setup::default()
        };
        let sc = Scale {
            warehouses: 2,
            items: 200,
            customers: 20,
        };
        let mut answers = Vec::new();
        for kind in IndexKind::ALL {
            for txn in [Txn::NewOrder, Txn::Payment] {
                let m = run_scaled(&s, kind, txn, sc).unwrap();
                assert_eq!(m.ops, 6);
                answers.push((txn == Txn::NewOrder, m.answer));
            }
        }
        for a in &answers {
            let first = answers.iter().find(|b| b.0 == a.0).unwrap();
            assert_eq!(a.1, first.1);
        }
    }

    #[test]
    fn nurand_stays_in_range_and_is_skewed() {
        let mut rng = Rng::new(7);
        let nu = NuRand::new(&mut rng);
        let mut hits = vec![0u32; 3001];
        for _ in 0..300_000 {
            let c = nu.customer(&mut rng, 3000);
            assert!((1..=3000).contains(&c));
            hits[c as usize] += 1;
        }
        // Uniform would give 100 per id; NURand's OR makes some ids several times as
        // likely as others (the spec's non-uniform access).
        let max = *hits.iter().max().unwrap();
        let min = *hits[1..].iter().min().unwrap();
        assert!(max > 3 * min.max(1), "max {max}, min {min}");
        for _ in 0..10_000 {
            let i = nu.item(&mut rng, 100_000);
            assert!((1..=100_000).contains(&i));
        }
        // Small populations (reduced scale, tests) stay in range too.
        for _ in 0..1000 {
            assert!((1..=20).contains(&nu.customer(&mut rng, 20)));
        }
    }

    #[test]
    fn spec_population_is_the_specification() {
        assert_eq!(
            Scale::spec(3),
            Scale {
                warehouses: 3,
                items: 100_000,
                customers: 3_000
            }
        );
        assert_eq!(Scale::of(Population::Reduced, 1).items, 10_000);
    }
}
