//! The hardware filter's charge for string predicates (issue 34): the compare logic pays
//! per byte of a variable-length value it actually compared, and a fixed-width column
//! (CHAR, numbers) costs what the stream costs whatever the predicate.

use crate::common;

use std::sync::Arc;

use csd_device::NvmeDevice;
use csd_ftl::{Ftl, FtlConfig};
use csd_host::{Catalog, Client, Strategy as Scan};
use csd_nand::Nand;
use csd_sim::DeviceConfig;
use csd_sql::{Choice, ScanSettings, SqlSession};
use csd_table::datagen::RowSource;
use csd_table::{Column, ColumnType, Layout, Schema};
use datafusion::arrow::array::{ArrayRef, Int32Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{Field, Schema as ArrowSchema};

/// The value of row `i`: `len` times one of `a`, `b`, `c`.
fn value(i: usize, len: usize) -> String {
    let c = (b'a' + (i % 3) as u8) as char;
    c.to_string().repeat(len)
}

/// Rows `(id INT32, s CHAR(len))`: the fixed-width table.
struct Fixed {
    schema: Schema,
    n: usize,
    len: usize,
    next: usize,
}

impl RowSource for Fixed {
    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn next_row(&mut self, row: &mut Vec<u8>) -> bool {
        if self.next >= self.n {
            return false;
        }
        row.clear();
        row.extend_from_slice(&(self.next as i32).to_le_bytes());
        row.extend_from_slice(value(self.next, self.len).as_bytes());
        self.next += 1;
        true
    }

    fn remaining_rows(&self) -> Option<u64> {
        Some((self.n - self.next) as u64)
    }
}

/// A session over table `v` (VARCHAR `s`, `n` rows of `len`-byte strings, none of which
/// contains `z`) and table `f` (the same rows with `s` as CHAR(`len`), a fixed-width
/// table), both in `layout`.
fn session(n: usize, len: usize, layout: Layout) -> SqlSession {
    let ids: ArrayRef = Arc::new(Int32Array::from((0..n as i32).collect::<Vec<_>>()));
    let strs: ArrayRef = Arc::new(StringArray::from(
        (0..n).map(|i| value(i, len)).collect::<Vec<_>>(),
    ));
    let schema = Arc::new(ArrowSchema::new(vec![
        Field::new("id", datafusion::arrow::datatypes::DataType::Int32, false),
        Field::new("s", datafusion::arrow::datatypes::DataType::Utf8, false),
    ]));
    let batch = RecordBatch::try_new(schema.clone(), vec![ids, strs]).expect("batch");
    let cfg = DeviceConfig::preset("tiny").expect("preset");
    let nand = Nand::new_in_memory(cfg.clone()).expect("nand");
    let ftl = Ftl::format(nand, FtlConfig::default()).expect("format");
    let mut c = Client::new(NvmeDevice::new(ftl)).expect("client");
    common::load_arrow(&mut c, "v", &schema, &batch, layout);
    let fixed = Fixed {
        schema: Schema::new(
            "f",
            vec![
                Column::new("id", ColumnType::Int32),
                Column::new("s", ColumnType::Char(len as u16)),
            ],
        )
        .expect("schema"),
        n,
        len,
        next: 0,
    };
    Catalog::load(&mut c, "f", fixed, layout, &mut |_| {}).expect("load f");
    SqlSession::new(c, cfg, ScanSettings::new(Choice::Fixed(Scan::HwIsp))).expect("session")
}

/// Modeled time of the scan of `sql` (one device scan) and the bytes it compared.
fn scan(s: &SqlSession, sql: &str) -> (u64, u64) {
    let r = s.run(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    assert_eq!(r.scans.len(), 1, "{sql}: one scan");
    let sc = &r.scans[0];
    assert!(
        sc.program.contains("filter"),
        "{sql}: not pushed: {}",
        sc.program
    );
    assert_eq!(r.rows().expect("rows")[0][0], "0", "{sql}: no row matches");
    (sc.report.modeled_ns, sc.report.work.var_bytes_compared)
}

#[test]
fn a_longer_string_compare_costs_more_on_hw_isp_and_a_fixed_width_one_the_same() {
    for layout in [Layout::Nsm, Layout::Pax] {
        let s = session(3000, 200, layout);
        // One byte of each value (the prefix) against the whole value (a search).
        let (short_ns, short_b) = scan(&s, "SELECT count(*) FROM v WHERE s LIKE 'z%'");
        let (long_ns, long_b) = scan(&s, "SELECT count(*) FROM v WHERE s LIKE '%z%'");
        assert_eq!(short_b, 3000, "{layout:?}: one byte per value");
        assert_eq!(long_b, 3000 * 200, "{layout:?}: every byte of every value");
        assert!(
            long_ns > short_ns,
            "{layout:?}: searching 200 bytes ({long_ns} ns) must cost more than 1 ({short_ns} ns)"
        );
        // Equality stops at the first difference: 'a…' vs 'ab' reads 2 bytes, 'b…'
        // and 'c…' differ at the first.
        let (_, eq_b) = scan(&s, "SELECT count(*) FROM v WHERE s = 'ab'");
        assert_eq!(eq_b, 1000 * 2 + 2000, "{layout:?}");
        // A longer prefix reads more of each value.
        let long_prefix = format!(
            "SELECT count(*) FROM {{t}} WHERE s LIKE '{}%'",
            "z".repeat(150)
        );
        let (prefix_ns, prefix_b) = scan(&s, &long_prefix.replace("{t}", "v"));
        assert_eq!(prefix_b, 3000 * 150, "{layout:?}");
        assert!(
            prefix_ns > short_ns,
            "{layout:?}: {prefix_ns} vs {short_ns} ns"
        );
        // The CHAR copy: the compare logic sees the attribute in the stream.
        let (f_short, fb) = scan(&s, "SELECT count(*) FROM f WHERE s LIKE 'z%'");
        let (f_long, fb2) = scan(&s, &long_prefix.replace("{t}", "f"));
        assert_eq!((fb, fb2), (0, 0), "{layout:?}: no variable-length bytes");
        assert_eq!(
            f_short, f_long,
            "{layout:?}: a fixed-width compare costs the same"
        );
    }
}

/// The modeled link bytes and the strings' bytes of `SELECT id, s FROM v WHERE id < k`
/// on hw-isp (one device scan).
fn projection(s: &SqlSession, k: usize) -> (u64, u64, u64) {
    let sql = format!("SELECT id, s FROM v WHERE id < {k}");
    let r = s.run(&sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    assert_eq!(r.scans.len(), 1, "{sql}: one scan");
    let sc = &r.scans[0];
    assert!(sc.program.contains("filter"), "{sql}: {}", sc.program);
    let rows = r.rows().expect("rows");
    assert_eq!(rows.len(), k, "{sql}");
    let strings: u64 = rows.iter().map(|row| row[1].len() as u64).sum();
    (
        sc.report.host_link_bytes,
        sc.report.work.selected_var_bytes,
        strings,
    )
}

/// hw-isp forwards whole records: a projection of VARCHAR rows sends their strings
/// (counted from the values sent, not from the fixed-width slot), so the same rows with
/// longer strings cost that many more link bytes; the work counter equals the bytes of
/// the strings returned.
#[test]
fn a_hw_isp_projection_of_varchar_rows_sends_the_strings() {
    let k = 400;
    for layout in [Layout::Nsm, Layout::Pax] {
        let short = session(3000, 10, layout);
        let long = session(3000, 300, layout);
        let (link_s, var_s, str_s) = projection(&short, k);
        let (link_l, var_l, str_l) = projection(&long, k);
        assert_eq!(var_s, str_s, "{layout:?}: the strings' bytes");
        assert_eq!(var_l, str_l, "{layout:?}: the strings' bytes");
        assert_eq!(str_l - str_s, (k * 290) as u64, "{layout:?}");
        assert!(
            link_l >= link_s + (str_l - str_s),
            "{layout:?}: {link_l} link bytes with 300-byte strings vs {link_s} with 10-byte \
             ones: the longer strings' {} bytes are not sent",
            str_l - str_s
        );
    }
}
