use super::*;
use crate::client::Client;
use csd_device::NvmeDevice;
use csd_ftl::{Ftl, FtlConfig, FtlError};
use csd_nand::{Nand, PowerCut};
use csd_sim::DeviceConfig;
use csd_table::datagen::{SyntheticGenerator, SyntheticSpec};
use csd_table::page::PageView;

fn device() -> DeviceConfig {
    DeviceConfig::preset("tiny").unwrap()
}

fn client(nand: Nand, format: bool) -> Client {
    let ftl = if format {
        Ftl::format(nand, FtlConfig::default()).unwrap()
    } else {
        Ftl::recover(nand, FtlConfig::default()).unwrap()
    };
    Client::new(NvmeDevice::new(ftl)).unwrap()
}

fn rows_on_device(c: &mut Client, t: &TableInfo) -> u64 {
    let mut n = 0;
    for i in 0..t.pages {
        let page = Catalog::read_page(c, t, i).unwrap();
        let v = PageView::parse(&page, &t.schema).unwrap();
        n += v.row_count() as u64;
    }
    n
}

#[test]
fn load_survives_restart_and_replace_trims() {
    let mut c = client(Nand::new_in_memory(device()).unwrap(), true);
    assert_eq!(
        Catalog::read(&mut c).unwrap(),
        Catalog::default(),
        "fresh device: empty catalog"
    );
    let spec = SyntheticSpec::synthetic16(5_000, 1).unwrap();
    let r = Catalog::load(
        &mut c,
        "s16",
        SyntheticGenerator::new(spec).unwrap(),
        Layout::Pax,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(r.table.rows, 5_000);
    assert!(r.modeled_s > 0.0);
    let spec4 = SyntheticSpec::synthetic4(3_000, 2).unwrap();
    Catalog::load(
        &mut c,
        "s4",
        SyntheticGenerator::new(spec4).unwrap(),
        Layout::Nsm,
        &mut |_| {},
    )
    .unwrap();
    // Restart: clean shutdown, recover, the catalog and the data are there.
    let ftl = c.into_device().into_block().into_ftl();
    let nand = ftl.shutdown(csd_sim::SimTime::ZERO).unwrap();
    let mut c = client(nand, false);
    let cat = Catalog::read(&mut c).unwrap();
    assert_eq!(cat.tables.len(), 2);
    let t = cat.get("s16").unwrap().clone();
    assert_eq!((t.layout, t.rows), (Layout::Pax, 5_000));
    assert_eq!(rows_on_device(&mut c, &t), 5_000);
    let t4 = cat.get("s4").unwrap().clone();
    assert_eq!(rows_on_device(&mut c, &t4), 3_000);
    // Replacing a table publishes a new extent.
    let spec = SyntheticSpec::synthetic16(1_000, 3).unwrap();
    Catalog::load(
        &mut c,
        "s16",
        SyntheticGenerator::new(spec).unwrap(),
        Layout::Nsm,
        &mut |_| {},
    )
    .unwrap();
    let cat2 = Catalog::read(&mut c).unwrap();
    assert_eq!(cat2.tables.len(), 2);
    assert_eq!(cat2.get("s16").unwrap().rows, 1_000);
    assert!(cat2.seq > cat.seq);
}

#[test]
fn bad_loads_are_refused_and_change_nothing() {
    let mut c = client(Nand::new_in_memory(device()).unwrap(), true);
    let spec = SyntheticSpec::synthetic4(100, 1).unwrap();
    for bad in ["", "no spaces", "x;drop"] {
        assert!(
            Catalog::load(
                &mut c,
                bad,
                SyntheticGenerator::new(spec).unwrap(),
                Layout::Pax,
                &mut |_| {}
            )
            .is_err()
        );
    }
    // Too big for the 64 MiB device.
    let huge = SyntheticSpec::synthetic64(2_000_000, 1).unwrap();
    let e = Catalog::load(
        &mut c,
        "huge",
        SyntheticGenerator::new(huge).unwrap(),
        Layout::Pax,
        &mut |_| {},
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("does not fit") || e.to_string().contains("LBA"),
        "{e}"
    );
    assert_eq!(Catalog::read(&mut c).unwrap(), Catalog::default());
}

/// A power cut anywhere during a load leaves the old catalog or the new one.
#[test]
fn power_cut_during_load_leaves_old_or_new_catalog() {
    let mut seen_old = 0;
    let mut seen_new = 0;
    for cut in [5u64, 40, 120, 300, 700, 1500, 2500, 4000] {
        let mut c = client(Nand::new_in_memory(device()).unwrap(), true);
        let spec = SyntheticSpec::synthetic16(2_000, 9).unwrap();
        Catalog::load(
            &mut c,
            "first",
            SyntheticGenerator::new(spec).unwrap(),
            Layout::Pax,
            &mut |_| {},
        )
        .unwrap();
        let before = Catalog::read(&mut c).unwrap();
        c.device()
            .block_mut()
            .ftl_mut()
            .nand_mut()
            .arm_power_cut(PowerCut::AtOp(cut));
        let spec = SyntheticSpec::synthetic16(20_000, 10).unwrap();
        let r = Catalog::load(
            &mut c,
            "second",
            SyntheticGenerator::new(spec).unwrap(),
            Layout::Nsm,
            &mut |_| {},
        );
        let ftl = c.into_device().into_block().into_ftl();
        let nand = ftl.crash();
        let mut c = client(nand, false);
        let after = Catalog::read(&mut c).unwrap();
        if after == before {
            seen_old += 1;
            assert!(r.is_err(), "a load that completed must be in the catalog");
        } else {
            seen_new += 1;
            let t = after
                .get("second")
                .expect("new catalog has the table")
                .clone();
            assert_eq!(rows_on_device(&mut c, &t), 20_000);
            assert_eq!(after.get("first"), before.get("first"));
        }
        let _ = FtlError::NoSpace;
    }
    assert!(
        seen_old > 0 && seen_new > 0,
        "old {seen_old} new {seen_new}"
    );
}

/// The reproducer: `Syn` (1,000 rows) then `syn` (2,000 rows) is one table of
/// 2,000 rows, found under any case, and the old extent is trimmed.
#[test]
fn table_names_ignore_case_everywhere() {
    let mut c = client(Nand::new_in_memory(device()).unwrap(), true);
    let load = |c: &mut Client, name: &str, rows: u64| {
        let spec = SyntheticSpec::synthetic4(rows, 1).unwrap();
        Catalog::load(
            c,
            name,
            SyntheticGenerator::new(spec).unwrap(),
            Layout::Nsm,
            &mut |_| {},
        )
        .unwrap()
    };
    let first = load(&mut c, "Syn", 1_000);
    assert!(first.replaced.is_none());
    let second = load(&mut c, "syn", 2_000);
    let old = second.replaced.expect("`syn` replaces `Syn`");
    assert_eq!((old.name.as_str(), old.rows), ("Syn", 1_000));
    let cat = Catalog::read(&mut c).unwrap();
    assert_eq!(cat.tables.len(), 1, "{:?}", cat.tables);
    for name in ["syn", "Syn", "SYN"] {
        let t = cat.get(name).unwrap().clone();
        assert_eq!((t.name.as_str(), t.rows), ("syn", 2_000));
        assert_eq!(rows_on_device(&mut c, &t), 2_000);
    }
    assert!(same_name("lineitem", "LINEITEM") && !same_name("s4", "s44"));
}

/// Each column's least and greatest value as stored in `t`'s pages (numeric columns).
fn exact_bounds(c: &mut Client, t: &TableInfo) -> Vec<Option<(i64, i64)>> {
    let mut b = vec![None; t.schema.len()];
    for p in 0..t.pages {
        let page = Catalog::read_page(c, t, p).unwrap();
        for row in crate::slotted::parse_rows(&t.schema, &page) {
            for (k, v) in row.iter().enumerate() {
                if let Some(x) = v.as_i64() {
                    crate::stats::widen(&mut b[k], x);
                }
            }
        }
    }
    b
}

#[test]
fn dml_fields_round_trip_and_catalogs_without_them_keep_their_bytes() {
    let mut c = client(Nand::new_in_memory(device()).unwrap(), true);
    let spec = SyntheticSpec::synthetic4(3_000, 2).unwrap();
    Catalog::load(
        &mut c,
        "s4",
        SyntheticGenerator::new(spec).unwrap(),
        Layout::Nsm,
        &mut |_| {},
    )
    .unwrap();
    let loaded = Catalog::read(&mut c).unwrap();
    // The load measured each column's distinct values (synthetic4: a key column and
    // three uniform ones), and a catalog with them is version 5.
    let d = loaded.tables[0]
        .distinct
        .clone()
        .expect("the load measured statistics");
    assert_eq!(d.len(), 4);
    assert!(d.iter().all(|&n| n > 0 && n <= 3_000), "{d:?}");
    // ... and each column's bounds, exact: the key column holds 3,000 consecutive keys.
    let b = loaded.tables[0]
        .bounds
        .clone()
        .expect("the load measured bounds");
    let exact = exact_bounds(&mut c, &loaded.tables[0]);
    assert_eq!(b, exact);
    let (lo, hi) = b[0].expect("the key column is numeric");
    assert_eq!(hi - lo, 2_999, "{b:?}");
    let with_bounds = loaded.encode();
    assert_eq!(
        u16::from_le_bytes([with_bounds[4], with_bounds[5]]),
        VERSION_BOUNDS
    );
    assert_eq!(Catalog::decode(&with_bounds).unwrap(), loaded);
    // Bounds for another number of columns than the schema's, or a least value above
    // the greatest, are refused.
    let mut bad = loaded.clone();
    bad.tables[0].bounds = Some(vec![None; 3]);
    let err = Catalog::decode(&bad.encode()).unwrap_err().to_string();
    assert!(err.contains("bounds for 3 columns"), "{err}");
    bad.tables[0].bounds = Some(vec![Some((5, 4)), None, None, None]);
    let err = Catalog::decode(&bad.encode()).unwrap_err().to_string();
    assert!(
        err.contains("least value 5 is above its greatest 4"),
        "{err}"
    );
    // Without bounds (a table loaded before csd measured them) it keeps version 5.
    let mut stats_only = loaded.clone();
    stats_only.tables[0].bounds = None;
    let stats = stats_only.encode();
    assert_eq!(u16::from_le_bytes([stats[4], stats[5]]), VERSION_STATS);
    assert_eq!(Catalog::decode(&stats).unwrap(), stats_only);
    // Without either it keeps version 1.
    let mut cat = stats_only.clone();
    cat.tables[0].distinct = None;
    let plain = cat.encode();
    assert_eq!(u16::from_le_bytes([plain[4], plain[5]]), VERSION);
    assert_eq!(Catalog::decode(&plain).unwrap(), cat);
    let mut grown = cat.clone();
    grown.tables[0].capacity = grown.tables[0].pages * 2;
    grown.tables[0].free_hints = vec![0, 3];
    grown.log_lbas = 512;
    grown.redo = Some(Redo {
        table: "s4".into(),
        pages: vec![(0, 2), (5, 1)],
    });
    let bytes = grown.encode();
    assert_eq!(u16::from_le_bytes([bytes[4], bytes[5]]), VERSION_DML);
    let back = Catalog::decode(&bytes).unwrap();
    assert_eq!(back, grown);
    assert_eq!(
        back.redo.as_ref().unwrap().page_list().collect::<Vec<_>>(),
        vec![0, 1, 5]
    );
    // The extent includes the reserved room: a load goes after it.
    let t = &grown.tables[0];
    assert_eq!(grown.next_free_lba(4096), t.end_lba(4096));
    assert!(t.end_lba(4096) > t.first_lba + t.pages * t.lbas_per_page(4096));
    // Truncated extension bytes are a clear error, not a panic.
    for cut in [bytes.len() - 1, bytes.len() - 9] {
        let mut b = bytes[..cut].to_vec();
        let body = (b.len() - HEADER) as u32;
        b[16..20].copy_from_slice(&body.to_le_bytes());
        let crc = crc32c::crc32c(&b[HEADER..]);
        b[20..24].copy_from_slice(&crc.to_le_bytes());
        assert!(Catalog::decode(&b).is_err());
    }
    // DML state and statistics together round-trip; statistics for another number of
    // columns than the schema's are refused.
    grown.tables[0].distinct = Some(vec![3_000, 7, 1, 2]);
    let both = grown.encode();
    assert_eq!(u16::from_le_bytes([both[4], both[5]]), VERSION_STATS);
    assert_eq!(Catalog::decode(&both).unwrap(), grown);
    grown.tables[0].distinct = Some(vec![1, 2, 3]);
    let err = Catalog::decode(&grown.encode()).unwrap_err().to_string();
    assert!(err.contains("statistics for 3 columns"), "{err}");
}

/// Data that is not a catalog in the catalog area (a client's, written through NBD) is
/// never taken for an empty catalog: reads and loads refuse it and write nothing; only
/// `take_over` (the consent path) gives the area to tables.
#[test]
fn foreign_data_in_the_catalog_area_is_refused_until_taken_over() {
    let mut c = client(Nand::new_in_memory(device()).unwrap(), true);
    let lba = c.identify().lba_size as usize;
    let data: Vec<u8> = (0..lba * 3).map(|i| (i % 251) as u8 + 1).collect();
    c.write(2, &data).unwrap();
    let e = Catalog::read(&mut c).expect_err("client data is no catalog");
    let m = e.to_string();
    assert!(
        m.contains("not a csd catalog") && m.contains("--force"),
        "{m}"
    );
    let spec = SyntheticSpec::synthetic4(100, 1).unwrap();
    let e = Catalog::load(
        &mut c,
        "s4",
        SyntheticGenerator::new(spec).unwrap(),
        Layout::Pax,
        &mut |_| {},
    )
    .expect_err("a load over client data");
    assert!(e.to_string().contains("not a csd catalog"), "{e}");
    assert_eq!(
        c.read(2, 3).unwrap(),
        data,
        "the client's data is untouched"
    );

    let why = Catalog::take_over(&mut c).unwrap();
    assert!(
        why.as_deref()
            .is_some_and(|w| w.contains("not a csd catalog")),
        "{why:?}"
    );
    assert_eq!(Catalog::read(&mut c).unwrap().tables, Vec::new());
    assert!(c.read(2, 3).unwrap().iter().all(|&b| b == 0), "trimmed");
    assert_eq!(Catalog::take_over(&mut c).unwrap(), None, "a catalog now");
    Catalog::load(
        &mut c,
        "s4",
        SyntheticGenerator::new(spec).unwrap(),
        Layout::Pax,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(Catalog::read(&mut c).unwrap().tables.len(), 1);
}

/// Rows of an extended schema for [`extended_tables_load_and_read_back`].
struct ExtRows(Schema, u64);

impl RowSource for ExtRows {
    fn schema(&self) -> &Schema {
        &self.0
    }
    fn next_row(&mut self, row: &mut Vec<u8>) -> bool {
        use csd_table::Value;
        if self.1 == 2_000 {
            return false;
        }
        let i = self.1;
        self.1 += 1;
        let values = [
            Value::Int64(i as i64),
            if i.is_multiple_of(3) {
                Value::Null
            } else {
                Value::Varchar(format!("row {i} ").repeat((i % 7) as usize))
            },
            Value::Float64((i as f64 * 0.5).to_bits()),
            if i.is_multiple_of(5) {
                Value::Null
            } else {
                Value::Timestamp(i as i64 * 1_000)
            },
        ];
        self.0.encode_row_into(&values, row).is_ok()
    }
}

#[test]
fn extended_tables_load_and_read_back() {
    let schema = Schema::new(
        "ext",
        vec![
            Column::new("id", ColumnType::Int64),
            Column::new("name", ColumnType::Varchar).with_nullable(true),
            Column::new("x", ColumnType::Float64),
            Column::new("ts", ColumnType::Timestamp)
                .with_nullable(true)
                .with_tz(Some("Europe/Paris".into())),
        ],
    )
    .unwrap();
    let mut c = client(Nand::new_in_memory(device()).unwrap(), true);
    for layout in [Layout::Nsm, Layout::Pax] {
        let r = Catalog::load(
            &mut c,
            "ext",
            ExtRows(schema.clone(), 0),
            layout,
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(r.table.rows, 2_000);
        let cat = Catalog::read(&mut c).unwrap();
        let t = cat.get("ext").unwrap();
        assert_eq!(t.schema, schema, "nullability and time zone kept");
        let bytes = cat.encode();
        assert_eq!(u16::from_le_bytes([bytes[4], bytes[5]]), VERSION_BOUNDS);
        // Bounds of the integer-valued columns only, NULLs skipped (row 0's timestamp
        // is NULL, so the least is row 1's).
        let b = t.bounds.clone().expect("measured");
        assert_eq!(
            b,
            vec![Some((0, 1_999)), None, None, Some((1_000, 1_999_000))]
        );
        let mut expect = ExtRows(schema.clone(), 0);
        let (mut want, mut got) = (Vec::new(), Vec::new());
        for p in 0..t.pages {
            let page = Catalog::read_page(&mut c, t, p).unwrap();
            let v = PageView::parse(&page, &t.schema).unwrap();
            for i in 0..v.row_count() {
                v.copy_row(i, &mut got).unwrap();
                assert!(expect.next_row(&mut want));
                assert_eq!(got, want);
            }
        }
        assert!(!expect.next_row(&mut want), "every row read back");
        // Distinct values skip NULLs and see strings' bytes (estimates within 2%).
        let names: std::collections::HashSet<String> = (0..2_000u64)
            .filter(|i| i % 3 != 0)
            .map(|i| format!("row {i} ").repeat((i % 7) as usize))
            .collect();
        let d = t.distinct.clone().unwrap();
        let near = |est: u64, exact: usize| est.abs_diff(exact as u64) * 50 <= exact as u64;
        assert!(near(d[0], 2_000) && near(d[1], names.len()), "{d:?}");
    }
}

#[test]
fn new_type_codes_in_an_older_catalog_version_are_refused() {
    let schema = Schema::new("t", vec![Column::new("b", ColumnType::Bool)]).unwrap();
    let mut cat = Catalog::default();
    cat.tables.push(TableInfo {
        name: "t".into(),
        schema,
        layout: Layout::Nsm,
        page_bytes: 4096,
        first_lba: CATALOG_LBAS,
        pages: 0,
        rows: 0,
        index: None,
        capacity: 0,
        free_hints: Vec::new(),
        distinct: Some(vec![0]),
        bounds: None,
    });
    let mut b = cat.encode();
    assert_eq!(u16::from_le_bytes([b[4], b[5]]), VERSION_TYPES);
    assert_eq!(Catalog::decode(&b).unwrap(), cat);
    // The same bytes labelled version 5 (a catalog that cannot hold a BOOLEAN): refused.
    b[4..6].copy_from_slice(&VERSION_STATS.to_le_bytes());
    let err = Catalog::decode(&b).unwrap_err().to_string();
    assert!(err.contains("unknown column type code 6"), "{err}");
    // A version from the future: refused with the versions this build reads.
    b[4..6].copy_from_slice(&8u16.to_le_bytes());
    let err = Catalog::decode(&b).unwrap_err().to_string();
    assert!(err.contains("unsupported catalog version 8"), "{err}");
}
