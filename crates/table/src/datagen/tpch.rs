//! The eight TPC-H tables (LINEITEM, ORDERS, PART, CUSTOMER, SUPPLIER, PARTSUPP, NATION,
//! REGION) from the `tpchgen` crate, stored
//! the way smart-ssd §4.1.1 stores them:
//!
//! 1. variable-length strings become fixed-length `CHAR(n)` columns, space padded;
//! 2. every decimal is multiplied by 100 and stored as an integer
//!    ([`ColumnType::Decimal`] with scale 2, an `i64`), `L_QUANTITY` included;
//! 3. every date is stored as days since 1970-01-01 ([`ColumnType::Date`]).
//!
//! The paper says these changes give 148-byte LINEITEM tuples but does not list the
//! column widths. This module's LINEITEM, 148 bytes exactly:
//!
//! | column | type | bytes | offset |
//! |---|---|---|---|
//! | l_orderkey | INT64 | 8 | 0 |
//! | l_partkey | INT32 | 4 | 8 |
//! | l_suppkey | INT32 | 4 | 12 |
//! | l_linenumber | INT32 | 4 | 16 |
//! | l_quantity | DECIMAL x100 | 8 | 20 |
//! | l_extendedprice | DECIMAL x100 | 8 | 28 |
//! | l_discount | DECIMAL x100 | 8 | 36 |
//! | l_tax | DECIMAL x100 | 8 | 44 |
//! | l_returnflag | CHAR(1) | 1 | 52 |
//! | l_linestatus | CHAR(1) | 1 | 53 |
//! | l_shipdate | DATE | 4 | 54 |
//! | l_commitdate | DATE | 4 | 58 |
//! | l_receiptdate | DATE | 4 | 62 |
//! | l_shipinstruct | CHAR(25) | 25 | 66 |
//! | l_shipmode | CHAR(10) | 10 | 91 |
//! | l_comment | CHAR(47) | 47 | 101 |
//!
//! Reasoning: keys take the narrowest integer that holds them at every supported scale
//! factor (order keys are sparse and pass `i32::MAX` near SF 360, so `INT64`; part,
//! supplier and customer keys fit `INT32` up to SF 10 000, the largest accepted here);
//! `CHAR` columns keep the widths of the TPC-H specification; L_COMMENT gets the
//! remaining 47 bytes, which is at least the specification's VARCHAR(44) and above the
//! longest comment the generator makes (43 bytes), so no comment is cut.
//!
//! ORDERS (138 B), PART (164 B), CUSTOMER (223 B), SUPPLIER (197 B), PARTSUPP (219 B),
//! NATION (185 B) and REGION (181 B) use the same rules with the specification's widths
//! (e.g. O_COMMENT CHAR(79), P_NAME CHAR(55), C_COMMENT CHAR(117), PS_COMMENT CHAR(199));
//! the generator's strings all fit, and [`TpchGenerator::truncated_values`] counts any
//! value that would not (tests check it stays 0).
//!
//! Row counts and values are those of `tpchgen` 4 (which matches the official `dbgen`):
//! at SF 0.01 LINEITEM has 60 175 rows, ORDERS 15 000, PART 2 000, CUSTOMER 1 500.

use std::fmt::{self, Write as _};

use tpchgen::generators::{
    CustomerGenerator, CustomerGeneratorIterator, LineItemGenerator, LineItemGeneratorIterator,
    NationGenerator, NationGeneratorIterator, OrderGenerator, OrderGeneratorIterator,
    PartGenerator, PartGeneratorIterator, PartSuppGenerator, PartSuppGeneratorIterator,
    RegionGenerator, RegionGeneratorIterator, SupplierGenerator, SupplierGeneratorIterator,
};

use super::{GenError, RowSource};
use crate::schema::{Column, ColumnType, Schema};

/// Largest accepted scale factor (`INT32` part and customer keys hold up to SF ~10 700).
pub const MAX_SCALE_FACTOR: f64 = 10_000.0;

const DEC2: ColumnType = ColumnType::Decimal { scale: 2 };

/// Column indices of LINEITEM (see the module table).
pub mod lineitem {
    /// `l_orderkey`, INT64.
    pub const L_ORDERKEY: usize = 0;
    /// `l_partkey`, INT32.
    pub const L_PARTKEY: usize = 1;
    /// `l_suppkey`, INT32.
    pub const L_SUPPKEY: usize = 2;
    /// `l_linenumber`, INT32.
    pub const L_LINENUMBER: usize = 3;
    /// `l_quantity`, DECIMAL x100.
    pub const L_QUANTITY: usize = 4;
    /// `l_extendedprice`, DECIMAL x100.
    pub const L_EXTENDEDPRICE: usize = 5;
    /// `l_discount`, DECIMAL x100.
    pub const L_DISCOUNT: usize = 6;
    /// `l_tax`, DECIMAL x100.
    pub const L_TAX: usize = 7;
    /// `l_returnflag`, CHAR(1).
    pub const L_RETURNFLAG: usize = 8;
    /// `l_linestatus`, CHAR(1).
    pub const L_LINESTATUS: usize = 9;
    /// `l_shipdate`, DATE.
    pub const L_SHIPDATE: usize = 10;
    /// `l_commitdate`, DATE.
    pub const L_COMMITDATE: usize = 11;
    /// `l_receiptdate`, DATE.
    pub const L_RECEIPTDATE: usize = 12;
    /// `l_shipinstruct`, CHAR(25).
    pub const L_SHIPINSTRUCT: usize = 13;
    /// `l_shipmode`, CHAR(10).
    pub const L_SHIPMODE: usize = 14;
    /// `l_comment`, CHAR(47).
    pub const L_COMMENT: usize = 15;
    /// Row width in bytes (smart-ssd §4.1.1).
    pub const ROW_WIDTH: usize = 148;
}

const LINEITEM_COLUMNS: &[(&str, ColumnType)] = &[
    ("l_orderkey", ColumnType::Int64),
    ("l_partkey", ColumnType::Int32),
    ("l_suppkey", ColumnType::Int32),
    ("l_linenumber", ColumnType::Int32),
    ("l_quantity", DEC2),
    ("l_extendedprice", DEC2),
    ("l_discount", DEC2),
    ("l_tax", DEC2),
    ("l_returnflag", ColumnType::Char(1)),
    ("l_linestatus", ColumnType::Char(1)),
    ("l_shipdate", ColumnType::Date),
    ("l_commitdate", ColumnType::Date),
    ("l_receiptdate", ColumnType::Date),
    ("l_shipinstruct", ColumnType::Char(25)),
    ("l_shipmode", ColumnType::Char(10)),
    ("l_comment", ColumnType::Char(47)),
];

const ORDERS_COLUMNS: &[(&str, ColumnType)] = &[
    ("o_orderkey", ColumnType::Int64),
    ("o_custkey", ColumnType::Int32),
    ("o_orderstatus", ColumnType::Char(1)),
    ("o_totalprice", DEC2),
    ("o_orderdate", ColumnType::Date),
    ("o_orderpriority", ColumnType::Char(15)),
    ("o_clerk", ColumnType::Char(15)),
    ("o_shippriority", ColumnType::Int32),
    ("o_comment", ColumnType::Char(79)),
];

const PART_COLUMNS: &[(&str, ColumnType)] = &[
    ("p_partkey", ColumnType::Int32),
    ("p_name", ColumnType::Char(55)),
    ("p_mfgr", ColumnType::Char(25)),
    ("p_brand", ColumnType::Char(10)),
    ("p_type", ColumnType::Char(25)),
    ("p_size", ColumnType::Int32),
    ("p_container", ColumnType::Char(10)),
    ("p_retailprice", DEC2),
    ("p_comment", ColumnType::Char(23)),
];

const CUSTOMER_COLUMNS: &[(&str, ColumnType)] = &[
    ("c_custkey", ColumnType::Int32),
    ("c_name", ColumnType::Char(25)),
    ("c_address", ColumnType::Char(40)),
    ("c_nationkey", ColumnType::Int32),
    ("c_phone", ColumnType::Char(15)),
    ("c_acctbal", DEC2),
    ("c_mktsegment", ColumnType::Char(10)),
    ("c_comment", ColumnType::Char(117)),
];

const SUPPLIER_COLUMNS: &[(&str, ColumnType)] = &[
    ("s_suppkey", ColumnType::Int32),
    ("s_name", ColumnType::Char(25)),
    ("s_address", ColumnType::Char(40)),
    ("s_nationkey", ColumnType::Int32),
    ("s_phone", ColumnType::Char(15)),
    ("s_acctbal", DEC2),
    ("s_comment", ColumnType::Char(101)),
];

const PARTSUPP_COLUMNS: &[(&str, ColumnType)] = &[
    ("ps_partkey", ColumnType::Int32),
    ("ps_suppkey", ColumnType::Int32),
    ("ps_availqty", ColumnType::Int32),
    ("ps_supplycost", DEC2),
    ("ps_comment", ColumnType::Char(199)),
];

const NATION_COLUMNS: &[(&str, ColumnType)] = &[
    ("n_nationkey", ColumnType::Int32),
    ("n_name", ColumnType::Char(25)),
    ("n_regionkey", ColumnType::Int32),
    ("n_comment", ColumnType::Char(152)),
];

const REGION_COLUMNS: &[(&str, ColumnType)] = &[
    ("r_regionkey", ColumnType::Int32),
    ("r_name", ColumnType::Char(25)),
    ("r_comment", ColumnType::Char(152)),
];

/// The TPC-H tables this crate generates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TpchTable {
    /// LINEITEM (148-byte rows).
    LineItem,
    /// ORDERS.
    Orders,
    /// PART.
    Part,
    /// CUSTOMER.
    Customer,
    /// SUPPLIER.
    Supplier,
    /// PARTSUPP.
    PartSupp,
    /// NATION (25 rows at every scale factor).
    Nation,
    /// REGION (5 rows at every scale factor).
    Region,
}

impl TpchTable {
    /// Every supported table.
    pub const ALL: [TpchTable; 8] = [
        TpchTable::LineItem,
        TpchTable::Orders,
        TpchTable::Part,
        TpchTable::Customer,
        TpchTable::Supplier,
        TpchTable::PartSupp,
        TpchTable::Nation,
        TpchTable::Region,
    ];

    /// Lower-case table name (`lineitem`, `orders`, `part`, `customer`, `supplier`,
    /// `partsupp`, `nation`, `region`).
    pub const fn name(self) -> &'static str {
        match self {
            TpchTable::LineItem => "lineitem",
            TpchTable::Orders => "orders",
            TpchTable::Part => "part",
            TpchTable::Customer => "customer",
            TpchTable::Supplier => "supplier",
            TpchTable::PartSupp => "partsupp",
            TpchTable::Nation => "nation",
            TpchTable::Region => "region",
        }
    }

    fn columns(self) -> &'static [(&'static str, ColumnType)] {
        match self {
            TpchTable::LineItem => LINEITEM_COLUMNS,
            TpchTable::Orders => ORDERS_COLUMNS,
            TpchTable::Part => PART_COLUMNS,
            TpchTable::Customer => CUSTOMER_COLUMNS,
            TpchTable::Supplier => SUPPLIER_COLUMNS,
            TpchTable::PartSupp => PARTSUPP_COLUMNS,
            TpchTable::Nation => NATION_COLUMNS,
            TpchTable::Region => REGION_COLUMNS,
        }
    }

    /// The table's fixed-width schema (see the module docs).
    pub fn schema(self) -> Schema {
        let cols = self
            .columns()
            .iter()
            .map(|&(n, t)| Column::new(n, t))
            .collect();
        // Static definitions with unique non-empty names; a unit test builds all four.
        Schema::new(self.name(), cols).expect("static TPC-H schema is valid")
    }

    /// Exact row count of the table (or of partition `part` of `count`) at
    /// `scale_factor`, where `tpchgen` knows it in advance (`None` for LINEITEM, whose
    /// 1-7 lines per order are drawn at random).
    pub fn row_count(self, scale_factor: f64, part: i32, count: i32) -> Option<u64> {
        let n = match self {
            TpchTable::LineItem => return None,
            TpchTable::Orders => OrderGenerator::calculate_row_count(scale_factor, part, count),
            TpchTable::Part => PartGenerator::calculate_row_count(scale_factor, part, count),
            TpchTable::Customer => {
                CustomerGenerator::calculate_row_count(scale_factor, part, count)
            }
            TpchTable::Supplier => {
                SupplierGenerator::calculate_row_count(scale_factor, part, count)
            }
            TpchTable::PartSupp => {
                PartSuppGenerator::calculate_row_count(scale_factor, part, count)
            }
            // One partition holds the fixed tables.
            TpchTable::Nation => i64::from(part == 1) * 25,
            TpchTable::Region => i64::from(part == 1) * 5,
        };
        u64::try_from(n).ok()
    }
}

impl fmt::Display for TpchTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for TpchTable {
    type Err = GenError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TpchTable::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| GenError::UnknownTable {
                name: s.to_string(),
            })
    }
}

enum Inner {
    LineItem(Box<LineItemGeneratorIterator<'static>>),
    Orders(Box<OrderGeneratorIterator<'static>>),
    Part(Box<PartGeneratorIterator<'static>>),
    Customer(Box<CustomerGeneratorIterator<'static>>),
    Supplier(Box<SupplierGeneratorIterator<'static>>),
    PartSupp(Box<PartSuppGeneratorIterator<'static>>),
    Nation(Box<NationGeneratorIterator<'static>>),
    Region(Box<RegionGeneratorIterator<'static>>),
    Empty,
}

/// Streams the rows of one TPC-H table as row images.
pub struct TpchGenerator {
    table: TpchTable,
    scale_factor: f64,
    schema: Schema,
    inner: Inner,
    total: Option<u64>,
    produced: u64,
    truncated: u64,
}

impl fmt::Debug for TpchGenerator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TpchGenerator")
            .field("table", &self.table)
            .field("scale_factor", &self.scale_factor)
            .field("produced", &self.produced)
            .field("truncated", &self.truncated)
            .finish_non_exhaustive()
    }
}

impl TpchGenerator {
    /// All rows of `table` at `scale_factor` (e.g. 0.01, 0.1, 1, 100).
    pub fn new(table: TpchTable, scale_factor: f64) -> Result<Self, GenError> {
        Self::partition(table, scale_factor, 1, 1)
    }

    /// Partition `part` (1-based) of `count` of the table, as `tpchgen` splits it, so
    /// a table can be generated in parallel; the partitions together are the table.
    pub fn partition(
        table: TpchTable,
        scale_factor: f64,
        part: i32,
        count: i32,
    ) -> Result<Self, GenError> {
        if !scale_factor.is_finite() || scale_factor <= 0.0 || scale_factor > MAX_SCALE_FACTOR {
            return Err(GenError::ScaleFactor(scale_factor));
        }
        if count < 1 || part < 1 || part > count {
            return Err(GenError::Partition { part, count });
        }
        let inner = match table {
            TpchTable::LineItem => Inner::LineItem(Box::new(
                LineItemGenerator::new(scale_factor, part, count).iter(),
            )),
            TpchTable::Orders => Inner::Orders(Box::new(
                OrderGenerator::new(scale_factor, part, count).iter(),
            )),
            TpchTable::Part => Inner::Part(Box::new(
                PartGenerator::new(scale_factor, part, count).iter(),
            )),
            TpchTable::Customer => Inner::Customer(Box::new(
                CustomerGenerator::new(scale_factor, part, count).iter(),
            )),
            TpchTable::Supplier => Inner::Supplier(Box::new(
                SupplierGenerator::new(scale_factor, part, count).iter(),
            )),
            TpchTable::PartSupp => Inner::PartSupp(Box::new(
                PartSuppGenerator::new(scale_factor, part, count).iter(),
            )),
            // NATION and REGION do not scale: the first partition has them all.
            TpchTable::Nation if part == 1 => Inner::Nation(Box::new(
                NationGenerator::new(scale_factor, part, count).iter(),
            )),
            TpchTable::Region if part == 1 => Inner::Region(Box::new(
                RegionGenerator::new(scale_factor, part, count).iter(),
            )),
            TpchTable::Nation | TpchTable::Region => Inner::Empty,
        };
        Ok(TpchGenerator {
            table,
            scale_factor,
            schema: table.schema(),
            inner,
            total: table.row_count(scale_factor, part, count),
            produced: 0,
            truncated: 0,
        })
    }

    /// The table.
    pub fn table(&self) -> TpchTable {
        self.table
    }

    /// The scale factor.
    pub fn scale_factor(&self) -> f64 {
        self.scale_factor
    }

    /// Rows produced so far.
    pub fn produced(&self) -> u64 {
        self.produced
    }

    /// String values so far that were longer than their `CHAR(n)` column and were cut
    /// to `n` bytes (0 for every table and scale factor tested).
    pub fn truncated_values(&self) -> u64 {
        self.truncated
    }
}

/// Appends fixed-width fields to a row image.
struct RowWriter<'a> {
    row: &'a mut Vec<u8>,
    truncated: u64,
}

impl RowWriter<'_> {
    fn i32(&mut self, v: i32) {
        self.row.extend_from_slice(&v.to_le_bytes());
    }

    fn i64(&mut self, v: i64) {
        self.row.extend_from_slice(&v.to_le_bytes());
    }

    /// A key stored as `INT32`; scale factors are limited so keys fit, but clamp
    /// rather than wrap if one ever did not.
    fn key32(&mut self, v: i64) {
        self.i32(i32::try_from(v).unwrap_or(i32::MAX));
    }

    fn chars(&mut self, s: &str, width: usize) {
        let b = s.as_bytes();
        let n = b.len().min(width);
        if b.len() > width {
            self.truncated += 1;
        }
        self.row.extend_from_slice(&b[..n]);
        self.row.resize(self.row.len() + (width - n), b' ');
    }

    fn display(&mut self, v: impl fmt::Display, width: usize) {
        let start = self.row.len();
        let mut w = FixedWriter {
            row: self.row,
            limit: start + width,
            truncated: false,
        };
        // FixedWriter never returns an error; the result carries no information.
        let _ = write!(w, "{v}");
        if w.truncated {
            self.truncated += 1;
        }
        self.row.resize(start + width, b' ');
    }
}

/// `fmt::Write` into a row image that keeps at most `limit` total bytes.
struct FixedWriter<'a> {
    row: &'a mut Vec<u8>,
    limit: usize,
    truncated: bool,
}

impl fmt::Write for FixedWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = self.limit.saturating_sub(self.row.len());
        let b = s.as_bytes();
        if b.len() > room {
            self.truncated = true;
        }
        self.row.extend_from_slice(&b[..b.len().min(room)]);
        Ok(())
    }
}

impl RowSource for TpchGenerator {
    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn next_row(&mut self, row: &mut Vec<u8>) -> bool {
        row.clear();
        let mut w = RowWriter { row, truncated: 0 };
        let produced = match &mut self.inner {
            Inner::LineItem(it) => it.next().map(|l| {
                w.i64(l.l_orderkey);
                w.key32(l.l_partkey);
                w.key32(l.l_suppkey);
                w.i32(l.l_linenumber);
                w.i64(l.l_quantity.saturating_mul(100));
                w.i64(l.l_extendedprice.0);
                w.i64(l.l_discount.0);
                w.i64(l.l_tax.0);
                w.chars(l.l_returnflag, 1);
                w.chars(l.l_linestatus, 1);
                w.i32(l.l_shipdate.to_unix_epoch());
                w.i32(l.l_commitdate.to_unix_epoch());
                w.i32(l.l_receiptdate.to_unix_epoch());
                w.chars(l.l_shipinstruct, 25);
                w.chars(l.l_shipmode, 10);
                w.chars(l.l_comment, 47);
            }),
            Inner::Orders(it) => it.next().map(|o| {
                w.i64(o.o_orderkey);
                w.key32(o.o_custkey);
                w.chars(o.o_orderstatus.as_str(), 1);
                w.i64(o.o_totalprice.0);
                w.i32(o.o_orderdate.to_unix_epoch());
                w.chars(o.o_orderpriority, 15);
                w.display(o.o_clerk, 15);
                w.i32(o.o_shippriority);
                w.chars(o.o_comment, 79);
            }),
            Inner::Part(it) => it.next().map(|p| {
                w.key32(p.p_partkey);
                w.display(&p.p_name, 55);
                w.display(p.p_mfgr, 25);
                w.display(p.p_brand, 10);
                w.chars(p.p_type, 25);
                w.i32(p.p_size);
                w.chars(p.p_container, 10);
                w.i64(p.p_retailprice.0);
                w.chars(p.p_comment, 23);
            }),
            Inner::Customer(it) => it.next().map(|c| {
                w.key32(c.c_custkey);
                w.display(c.c_name, 25);
                w.display(&c.c_address, 40);
                w.key32(c.c_nationkey);
                w.display(&c.c_phone, 15);
                w.i64(c.c_acctbal.0);
                w.chars(c.c_mktsegment, 10);
                w.chars(c.c_comment, 117);
            }),
            Inner::Supplier(it) => it.next().map(|s| {
                w.key32(s.s_suppkey);
                w.display(s.s_name, 25);
                w.display(&s.s_address, 40);
                w.key32(s.s_nationkey);
                w.display(&s.s_phone, 15);
                w.i64(s.s_acctbal.0);
                w.chars(&s.s_comment, 101);
            }),
            Inner::PartSupp(it) => it.next().map(|p| {
                w.key32(p.ps_partkey);
                w.key32(p.ps_suppkey);
                w.i32(p.ps_availqty);
                w.i64(p.ps_supplycost.0);
                w.chars(p.ps_comment, 199);
            }),
            Inner::Nation(it) => it.next().map(|n| {
                w.key32(n.n_nationkey);
                w.chars(n.n_name, 25);
                w.key32(n.n_regionkey);
                w.chars(n.n_comment, 152);
            }),
            Inner::Region(it) => it.next().map(|r| {
                w.key32(r.r_regionkey);
                w.chars(r.r_name, 25);
                w.chars(r.r_comment, 152);
            }),
            Inner::Empty => None,
        };
        self.truncated += w.truncated;
        if produced.is_some() {
            debug_assert_eq!(w.row.len(), self.schema.row_width());
            self.produced += 1;
            true
        } else {
            false
        }
    }

    fn remaining_rows(&self) -> Option<u64> {
        self.total.map(|t| t.saturating_sub(self.produced))
    }
}

impl Iterator for TpchGenerator {
    type Item = Vec<u8>;

    fn next(&mut self) -> Option<Vec<u8>> {
        let mut row = Vec::with_capacity(self.schema.row_width());
        self.next_row(&mut row).then_some(row)
    }
}
