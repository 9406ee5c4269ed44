//! FLIXR acceptance tests (issue 13): the Table 1 commands on the typed command
//! interface, bad input, and the model-based property test — after any sequence of
//! WRITE_IDX, plain writes, overwrites, trims, GC and power cuts, every page's entry
//! bounds its rows (range) or covers their buckets (bitmap), and READ_IDX never skips a
//! page holding a matching row (checked against a full scan).

use csd_device::flixr::{Entry, JoinIndexSpec, KeyEntry};
use csd_device::{
    BlockDevice, Command, Completion, HostIndexValue, IndexEncoding, IndexRead, IndexRule,
    IndexSpec, NvmeDevice, Payload, QueueId, RuleTerm, Status, TableFormat,
};
use csd_ftl::{Ftl, FtlConfig, WriteCache};
use csd_nand::{Nand, PowerCut};
use csd_sim::{DeviceConfig, SimTime};
use csd_table::{ColumnType, Layout, PageBuilder, PageView, Schema, Value};
use proptest::prelude::*;

const T0: SimTime = SimTime::ZERO;
const LBA: usize = 4096;

fn small_device() -> DeviceConfig {
    let mut d = DeviceConfig::preset("tiny").unwrap();
    d.geometry.blocks_per_plane = 24; // ~2,500 LBAs: GC runs after a few thousand writes
    d
}

fn ftl_cfg(ext: u32, wb: bool) -> FtlConfig {
    FtlConfig {
        ext_bytes: ext,
        map_cache_share: 0.0005,
        op: 0.15,
        write_cache: if wb {
            WriteCache::WriteBack
        } else {
            WriteCache::WriteThrough
        },
        ..FtlConfig::default()
    }
}

fn device(ext: u32, wb: bool) -> (NvmeDevice, QueueId) {
    let nand = Nand::new_in_memory(small_device()).unwrap();
    let mut d = NvmeDevice::new(Ftl::format(nand, ftl_cfg(ext, wb)).unwrap());
    let q = d.create_queue_pair(16).unwrap();
    (d, q)
}

fn run(d: &mut NvmeDevice, q: QueueId, cmd: Command) -> Completion {
    d.submit(q, cmd, T0).unwrap();
    d.process();
    d.poll(q).unwrap()
}

fn ok(c: &Completion) {
    assert_eq!(c.status, Status::Success, "{}", c.status);
}

fn orders_format(name: &str) -> TableFormat {
    TableFormat {
        name: name.into(),
        columns: vec![
            csd_table::Column::new("key", ColumnType::Int64),
            csd_table::Column::new("qty", ColumnType::Int32),
            csd_table::Column::new("note", ColumnType::Char(12)),
        ],
        layout: Layout::Nsm,
        page_lbas: 1,
    }
}

fn schema(f: &TableFormat) -> Schema {
    Schema::new(f.name.clone(), f.columns.clone()).unwrap()
}

/// A table page with `qty` values `vals`.
fn page(f: &TableFormat, vals: &[i32]) -> Vec<u8> {
    let s = schema(f);
    let mut b = PageBuilder::new(s.clone(), f.layout, LBA).unwrap();
    for (i, &v) in vals.iter().enumerate() {
        let row = s
            .encode_row_vec(&[
                Value::Int64(i as i64),
                Value::Int32(v),
                Value::Char(b"x".to_vec()),
            ])
            .unwrap();
        b.push_row(&row).unwrap();
    }
    b.finish().to_vec()
}

/// The `qty` values of a page, if it is a page of the table.
fn rows(f: &TableFormat, data: &[u8]) -> Option<Vec<i64>> {
    let s = schema(f);
    let v = PageView::parse(data, &s).ok()?;
    let mut out = Vec::new();
    v.column(1).ok()?.decode_i64_into(&mut out).ok()?;
    Some(out)
}

fn table_id(c: &Completion) -> u8 {
    ok(c);
    match c.payload {
        Payload::FlixrTable(id) => id,
        ref p => panic!("{p:?}"),
    }
}

fn rule_id(c: &Completion) -> u16 {
    ok(c);
    match c.payload {
        Payload::FlixrRule(id) => id,
        ref p => panic!("{p:?}"),
    }
}

fn index_read(c: Completion) -> IndexRead {
    ok(&c);
    match c.payload {
        Payload::IndexRead(r) => *r,
        p => panic!("{p:?}"),
    }
}

const BOUNDS: [i64; 7] = [100, 200, 300, 400, 500, 600, 700];

/// Register the range table "a" (qty) and the bitmap table "b" (qty, 8 buckets).
fn setup(d: &mut NvmeDevice, q: QueueId) -> (u8, u8) {
    let a = table_id(&run(d, q, Command::SendTblCol(orders_format("a"))));
    ok(&run(
        d,
        q,
        Command::SendIdxEnc {
            table: a,
            spec: IndexSpec {
                column: "qty".into(),
                encoding: IndexEncoding::Range,
            },
        },
    ));
    let b = table_id(&run(d, q, Command::SendTblCol(orders_format("b"))));
    ok(&run(
        d,
        q,
        Command::SendIdxEnc {
            table: b,
            spec: IndexSpec {
                column: "qty".into(),
                encoding: IndexEncoding::Bitmap {
                    bounds: BOUNDS.to_vec(),
                },
            },
        },
    ));
    (a, b)
}

#[test]
fn write_idx_read_idx_skip_pages_and_host_index_reports_ranges() {
    let (mut d, q) = device(24, false);
    let (a, _) = setup(&mut d, q);
    let fa = orders_format("a");
    // Page i holds qty values 100*i .. 100*i + 50.
    let mut data = Vec::new();
    for i in 0..8 {
        data.extend(page(&fa, &[100 * i, 100 * i + 50, 100 * i + 25]));
    }
    let c = run(
        &mut d,
        q,
        Command::WriteIdx {
            table: a,
            lba: 40,
            data: data.clone(),
        },
    );
    ok(&c);
    assert!(d.flixr().stats().entries_built == 8);
    let r = rule_id(&run(
        &mut d,
        q,
        Command::SendIdxIcr {
            table: a,
            rule: IndexRule::Between { lo: 220, hi: 330 },
        },
    ));
    let c = run(
        &mut d,
        q,
        Command::ReadIdx {
            table: a,
            rule: r,
            lba: 40,
            blocks: 8,
        },
    );
    let reads = c.acct.flash_reads;
    let got = index_read(c);
    assert_eq!(got.lbas, vec![42, 43]);
    assert_eq!(got.skipped, vec![40, 41, 44, 45, 46, 47]);
    assert_eq!(&got.data[..LBA], &data[2 * LBA..3 * LBA]);
    assert!(
        reads <= 2 + got.index_page_reads,
        "skipped pages are not read from flash"
    );
    // FLIXR-HS: the page's min and max.
    let c = run(&mut d, q, Command::UpdateHostIndex { table: a, lba: 43 });
    ok(&c);
    assert_eq!(
        c.payload,
        Payload::HostIndex(HostIndexValue::Range { min: 300, max: 350 })
    );
    // Overwrite page 41 so that it matches: recomputed (also through a plain Write).
    ok(&run(
        &mut d,
        q,
        Command::Write {
            lba: 41,
            data: page(&fa, &[250]),
        },
    ));
    let got = index_read(run(
        &mut d,
        q,
        Command::ReadIdx {
            table: a,
            rule: r,
            lba: 40,
            blocks: 8,
        },
    ));
    assert_eq!(got.lbas, vec![41, 42, 43]);
    // Trim clears: a trimmed page has no entry and reads as zeros (read, not skipped).
    ok(&run(&mut d, q, Command::Trim { lba: 42, blocks: 1 }));
    assert_eq!(d.block_mut().ftl_mut().ext(42, T0).unwrap().0, vec![0; 24]);
    let got = index_read(run(
        &mut d,
        q,
        Command::ReadIdx {
            table: a,
            rule: r,
            lba: 40,
            blocks: 8,
        },
    ));
    assert_eq!(got.lbas, vec![41, 42, 43]);
    // Empty pages are skipped by every rule.
    ok(&run(
        &mut d,
        q,
        Command::WriteIdx {
            table: a,
            lba: 60,
            data: page(&fa, &[]),
        },
    ));
    let all = rule_id(&run(
        &mut d,
        q,
        Command::SendIdxIcr {
            table: a,
            rule: IndexRule::Between {
                lo: i64::MIN,
                hi: i64::MAX,
            },
        },
    ));
    let got = index_read(run(
        &mut d,
        q,
        Command::ReadIdx {
            table: a,
            rule: all,
            lba: 60,
            blocks: 1,
        },
    ));
    assert_eq!(got.skipped, vec![60]);
}

/// One READ_IDX may examine far more pages than MDTS; it returns at most MDTS pages and
/// says where to resume.
#[test]
fn read_idx_scans_long_ranges_and_resumes_at_the_transfer_limit() {
    let (mut d, q) = device(24, false);
    let (a, _) = setup(&mut d, q);
    let fa = orders_format("a");
    for k in 0..3u64 {
        let data: Vec<u8> = (0..100)
            .flat_map(|i| page(&fa, &[(k * 100 + i) as i32]))
            .collect();
        ok(&run(
            &mut d,
            q,
            Command::WriteIdx {
                table: a,
                lba: 500 + 100 * k,
                data,
            },
        ));
    }
    let few = rule_id(&run(
        &mut d,
        q,
        Command::SendIdxIcr {
            table: a,
            rule: IndexRule::In(vec![7, 250]),
        },
    ));
    let got = index_read(run(
        &mut d,
        q,
        Command::ReadIdx {
            table: a,
            rule: few,
            lba: 500,
            blocks: 300,
        },
    ));
    assert_eq!(
        (got.lbas, got.resume_at, got.skipped.len()),
        (vec![507, 750], None, 298)
    );
    let all = rule_id(&run(
        &mut d,
        q,
        Command::SendIdxIcr {
            table: a,
            rule: IndexRule::Between { lo: 0, hi: 1000 },
        },
    ));
    let got = index_read(run(
        &mut d,
        q,
        Command::ReadIdx {
            table: a,
            rule: all,
            lba: 500,
            blocks: 300,
        },
    ));
    assert_eq!((got.lbas.len(), got.resume_at), (128, Some(628)));
    let c = run(
        &mut d,
        q,
        Command::ReadIdx {
            table: a,
            rule: all,
            lba: 0,
            blocks: 0,
        },
    );
    assert!(matches!(c.status, Status::InvalidField(_)));
}

#[test]
fn index_cache_misses_are_charged_and_hits_are_free() {
    let (mut d, q) = device(24, false);
    let (a, _) = setup(&mut d, q);
    let fa = orders_format("a");
    let mut data = Vec::new();
    for i in 0..64 {
        data.extend(page(&fa, &[i]));
    }
    for k in 0..8u64 {
        ok(&run(
            &mut d,
            q,
            Command::WriteIdx {
                table: a,
                lba: 300 * k,
                data: data[..8 * LBA].to_vec(),
            },
        ));
    }
    let r = rule_id(&run(
        &mut d,
        q,
        Command::SendIdxIcr {
            table: a,
            rule: IndexRule::Between { lo: -5, hi: -1 },
        },
    ));
    d.set_index_cache_bytes(0); // one index page
    let mut misses = 0;
    for k in 0..8u64 {
        let got = index_read(run(
            &mut d,
            q,
            Command::ReadIdx {
                table: a,
                rule: r,
                lba: 300 * k,
                blocks: 8,
            },
        ));
        assert_eq!(got.skipped.len(), 8);
        misses += got.index_misses;
    }
    assert_eq!(misses, 8, "a different index page each time");
    let got = index_read(run(
        &mut d,
        q,
        Command::ReadIdx {
            table: a,
            rule: r,
            lba: 2100,
            blocks: 8,
        },
    ));
    assert_eq!((got.index_misses, got.index_page_reads), (0, 0), "cached");
}

#[test]
fn bad_input_is_refused_registers_nothing_and_io_goes_on() {
    // A device without MAP-entry extensions.
    let (mut d, q) = device(0, false);
    let c = run(&mut d, q, Command::SendTblCol(orders_format("a")));
    assert!(
        matches!(c.status, Status::InvalidField(ref m) if m.contains("ext_bytes")),
        "{}",
        c.status
    );
    assert!(d.flixr().tables().is_empty());

    let (mut d, q) = device(24, false);
    let bad_tables = [
        TableFormat {
            name: String::new(),
            ..orders_format("x")
        },
        TableFormat {
            columns: vec![],
            ..orders_format("x")
        },
        TableFormat {
            columns: vec![
                csd_table::Column::new("k", ColumnType::Int32),
                csd_table::Column::new("k", ColumnType::Int64),
            ],
            ..orders_format("x")
        },
        TableFormat {
            columns: vec![csd_table::Column::new("c", ColumnType::Char(0))],
            ..orders_format("x")
        },
        TableFormat {
            columns: vec![csd_table::Column::new("c", ColumnType::Char(5000))],
            ..orders_format("x")
        },
    ];
    for f in bad_tables {
        let c = run(&mut d, q, Command::SendTblCol(f.clone()));
        assert!(
            matches!(c.status, Status::InvalidField(ref m) if m.contains("malformed table")),
            "{f:?}: {}",
            c.status
        );
        assert_eq!(c.acct.host_link_bytes, 0);
    }
    assert!(d.flixr().tables().is_empty(), "nothing registered");
    let a = table_id(&run(&mut d, q, Command::SendTblCol(orders_format("a"))));
    let dup = run(&mut d, q, Command::SendTblCol(orders_format("a")));
    assert!(!dup.status.is_success());
    let enc = |column: &str, encoding: IndexEncoding| Command::SendIdxEnc {
        table: a,
        spec: IndexSpec {
            column: column.into(),
            encoding,
        },
    };
    for (cmd, want) in [
        (enc("nope", IndexEncoding::Range), "no column"),
        (
            enc("qty", IndexEncoding::Bitmap { bounds: vec![] }),
            "buckets",
        ),
        (
            enc("qty", IndexEncoding::Bitmap { bounds: vec![5, 5] }),
            "increasing",
        ),
        (
            enc(
                "qty",
                IndexEncoding::Bitmap {
                    bounds: (0..200).collect(),
                },
            ),
            "buckets",
        ),
        (
            Command::SendIdxEnc {
                table: 99,
                spec: IndexSpec {
                    column: "qty".into(),
                    encoding: IndexEncoding::Range,
                },
            },
            "unknown table",
        ),
        (
            Command::SendIdxIcr {
                table: a,
                rule: IndexRule::Between { lo: 0, hi: 1 },
            },
            "no index encoding",
        ),
        (
            Command::WriteIdx {
                table: a,
                lba: 0,
                data: vec![0; LBA],
            },
            "no index encoding",
        ),
    ] {
        let c = run(&mut d, q, cmd);
        assert!(
            matches!(c.status, Status::InvalidField(ref m) if m.contains(want)),
            "want {want}: {}",
            c.status
        );
    }
    // A BOOLEAN column has no index key (CHAR, VARCHAR and floats do).
    let flags = TableFormat {
        columns: vec![
            csd_table::Column::new("k", ColumnType::Int64),
            csd_table::Column::new("flag", ColumnType::Bool).with_nullable(true),
        ],
        ..orders_format("flags")
    };
    let f = table_id(&run(&mut d, q, Command::SendTblCol(flags)));
    let c = run(
        &mut d,
        q,
        Command::SendIdxEnc {
            table: f,
            spec: IndexSpec {
                column: "flag".into(),
                encoding: IndexEncoding::Range,
            },
        },
    );
    assert!(
        matches!(c.status, Status::InvalidField(ref m) if m.contains("BOOLEAN")),
        "{}",
        c.status
    );
    ok(&run(&mut d, q, Command::DropTblCol { table: f }));
    ok(&run(&mut d, q, enc("qty", IndexEncoding::Range)));
    let again = run(&mut d, q, enc("qty", IndexEncoding::Range));
    assert!(matches!(again.status, Status::InvalidField(ref m) if m.contains("already")));
    for (cmd, want) in [
        (
            Command::SendIdxIcr {
                table: a,
                rule: IndexRule::Between { lo: 2, hi: 1 },
            },
            "empty range",
        ),
        (
            Command::SendIdxIcr {
                table: a,
                rule: IndexRule::In(vec![]),
            },
            "IN list",
        ),
        (
            Command::SendIdxIcr {
                table: 7,
                rule: IndexRule::In(vec![1]),
            },
            "unknown table",
        ),
        (
            Command::ReadIdx {
                table: a,
                rule: 42,
                lba: 0,
                blocks: 1,
            },
            "unknown rule",
        ),
        (
            Command::ReadIdx {
                table: 9,
                rule: 1,
                lba: 0,
                blocks: 1,
            },
            "unknown table",
        ),
        (
            Command::WriteIdx {
                table: 9,
                lba: 0,
                data: vec![0; LBA],
            },
            "unknown table",
        ),
        (
            Command::WriteIdx {
                table: a,
                lba: 0,
                data: vec![0; 100],
            },
            "whole",
        ),
    ] {
        let c = run(&mut d, q, cmd);
        assert!(
            matches!(c.status, Status::InvalidField(ref m) if m.contains(want)),
            "want {want}: {}",
            c.status
        );
        assert_eq!((c.acct.flash_programs, c.acct.host_link_bytes), (0, 0));
    }
    let c = run(
        &mut d,
        q,
        Command::WriteIdx {
            table: a,
            lba: u64::MAX - 1,
            data: vec![0; LBA],
        },
    );
    assert!(matches!(c.status, Status::LbaOutOfRange(_)));
    // Normal I/O is unaffected.
    ok(&run(
        &mut d,
        q,
        Command::Write {
            lba: 3,
            data: vec![7; LBA],
        },
    ));
    let c = run(&mut d, q, Command::Read { lba: 3, blocks: 1 });
    assert_eq!(c.payload, Payload::Data(vec![7; LBA]));
    assert_eq!(d.flixr().tables(), vec![(a, "a".to_string())]);
    assert_eq!(
        d.block_mut().ftl_mut().ext(3, T0).unwrap().0,
        vec![0; 24],
        "plain data gets no entry"
    );
}

/// §4.5: JOIN1 builds the per-table bitmap of join keys while filtering the first table;
/// JOIN2 skips the pages of the second table with none of those keys, and never a page
/// holding one (checked against a full scan).
#[test]
fn join_reads_prune_the_second_table_by_the_first_tables_keys() {
    let (mut d, q) = device(24, false);
    let fl = orders_format("lineitem");
    let fp = orders_format("part");
    let l = table_id(&run(&mut d, q, Command::SendTblCol(fl.clone())));
    let p = table_id(&run(&mut d, q, Command::SendTblCol(fp.clone())));
    let bounds: Vec<i64> = (1..64).map(|i| i * 10).collect(); // 64 buckets of 10 keys
    ok(&run(
        &mut d,
        q,
        Command::SendIdxEnc {
            table: l,
            spec: IndexSpec {
                column: "qty".into(),
                encoding: IndexEncoding::Range,
            },
        },
    ));
    ok(&run(
        &mut d,
        q,
        Command::SendIdxEnc {
            table: p,
            spec: IndexSpec {
                column: "key".into(),
                encoding: IndexEncoding::Bitmap {
                    bounds: bounds.clone(),
                },
            },
        },
    ));
    // lineitem page i: qty i, keys 37*i + j (mod 640); part page k: keys 20k..20k+19.
    let s = schema(&fl);
    let mk = |f: &TableFormat, rows: &[(i64, i32)]| {
        let s = schema(f);
        let mut b = PageBuilder::new(s.clone(), f.layout, LBA).unwrap();
        for &(k, qty) in rows {
            b.push_row(
                &s.encode_row_vec(&[Value::Int64(k), Value::Int32(qty), Value::Char(vec![])])
                    .unwrap(),
            )
            .unwrap();
        }
        b.finish().to_vec()
    };
    let _ = s;
    let li: Vec<u8> = (0..16)
        .flat_map(|i| {
            mk(
                &fl,
                &(0..3)
                    .map(|j| ((37 * i + j) % 640, i as i32))
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    let parts: Vec<u8> = (0..32)
        .flat_map(|k| mk(&fp, &(0..20).map(|j| (20 * k + j, 0)).collect::<Vec<_>>()))
        .collect();
    ok(&run(
        &mut d,
        q,
        Command::WriteIdx {
            table: l,
            lba: 100,
            data: li,
        },
    ));
    ok(&run(
        &mut d,
        q,
        Command::WriteIdx {
            table: p,
            lba: 200,
            data: parts.clone(),
        },
    ));
    let r = rule_id(&run(
        &mut d,
        q,
        Command::SendIdxIcr {
            table: l,
            rule: IndexRule::Between { lo: 2, hi: 4 },
        },
    ));
    let tia = rule_id(&run(
        &mut d,
        q,
        Command::SendTidxEnc {
            table: l,
            spec: JoinIndexSpec {
                column: "key".into(),
                bounds: bounds.clone(),
            },
        },
    ));
    let jr = rule_id(&run(&mut d, q, Command::SendTidxIcr { table: p, tia }));
    let got = index_read(run(
        &mut d,
        q,
        Command::ReadIdxJoin1 {
            table: l,
            rule: r,
            tia,
            reset: true,
            lba: 100,
            blocks: 16,
        },
    ));
    assert_eq!(got.lbas, vec![102, 103, 104]);
    let keys: Vec<i64> = (2..=4)
        .flat_map(|i| (0..3).map(move |j| (37 * i + j) % 640))
        .collect();
    let got = index_read(run(
        &mut d,
        q,
        Command::ReadIdxJoin2 {
            table: p,
            rule: jr,
            lba: 200,
            blocks: 32,
        },
    ));
    for &k in &keys {
        assert!(
            got.lbas.contains(&(200 + (k / 20) as u64)),
            "part page of key {k} skipped"
        );
    }
    assert!(
        got.skipped.len() >= 26,
        "only the pages with joining keys are read: {:?}",
        got.lbas
    );
    // Mismatched buckets and unknown ids are refused.
    let other = rule_id(&run(
        &mut d,
        q,
        Command::SendTidxEnc {
            table: l,
            spec: JoinIndexSpec {
                column: "key".into(),
                bounds: vec![1, 2],
            },
        },
    ));
    let c = run(
        &mut d,
        q,
        Command::SendTidxIcr {
            table: p,
            tia: other,
        },
    );
    assert!(
        matches!(c.status, Status::InvalidField(ref m) if m.contains("split points")),
        "{}",
        c.status
    );
    let c = run(&mut d, q, Command::SendTidxIcr { table: p, tia: 999 });
    assert!(
        matches!(c.status, Status::InvalidField(ref m) if m.contains("unknown per-table index")),
        "{}",
        c.status
    );
    let c = run(
        &mut d,
        q,
        Command::ReadIdxJoin2 {
            table: p,
            rule: 999,
            lba: 200,
            blocks: 1,
        },
    );
    assert!(
        matches!(c.status, Status::InvalidField(ref m) if m.contains("unknown rule")),
        "{}",
        c.status
    );
    let c = run(
        &mut d,
        q,
        Command::SendTidxEnc {
            table: l,
            spec: JoinIndexSpec {
                column: "note".into(),
                bounds: vec![1],
            },
        },
    );
    assert!(!c.status.is_success());
}

/// Tables and encodings persist across a clean shutdown and a crash (rules do not).
/// The shortest flash program of the test device (its fastest page type), in ns.
fn fastest_program_ns() -> u64 {
    let t_prog = small_device()
        .flash
        .t_prog_us
        .iter()
        .copied()
        .fold(f64::INFINITY, f64::min);
    (t_prog * 1e3) as u64
}

/// A registration that must survive power (SEND_TBL_COL, SEND_IDX_ENC) is answered once
/// its log force is done, the force starting at the command's own instant; a volatile one
/// (a comparison rule) only stages its arguments and replies. Both are submitted when the
/// device is idle, so the durable ones take at least a flash program (the log page).
#[test]
fn a_durable_registration_is_answered_after_its_log_force() {
    let (mut d, q) = device(24, false);
    let prog_ns = fastest_program_ns();
    let at = |d: &mut NvmeDevice, cmd: Command, t: SimTime| {
        d.submit(q, cmd, t).unwrap();
        d.process();
        let c = d.poll(q).unwrap();
        ok(&c);
        c
    };
    // Each command is submitted 10 ms after the previous one began, when every die idles.
    let t1 = SimTime::from_ns(10_000_000);
    let c = at(&mut d, Command::SendTblCol(orders_format("a")), t1);
    let a = table_id(&c);
    assert!(
        c.acct.latency_ns >= prog_ns,
        "SEND_TBL_COL answered {} ns after it arrived, before its log page could be programmed ({prog_ns} ns)",
        c.acct.latency_ns
    );
    assert!(
        c.acct.flash_programs >= 1,
        "the registry's log force programs a page"
    );
    let t2 = SimTime::from_ns(20_000_000);
    let c = at(
        &mut d,
        Command::SendIdxEnc {
            table: a,
            spec: IndexSpec {
                column: "qty".into(),
                encoding: IndexEncoding::Range,
            },
        },
        t2,
    );
    assert!(c.acct.latency_ns >= prog_ns, "SEND_IDX_ENC persists too");
    let t3 = SimTime::from_ns(30_000_000);
    let c = at(
        &mut d,
        Command::SendIdxIcr {
            table: a,
            rule: IndexRule::Between { lo: 1, hi: 2 },
        },
        t3,
    );
    assert!(
        c.acct.latency_ns < prog_ns,
        "a rule is query state: no log force ({} ns)",
        c.acct.latency_ns
    );
}

/// The LBAs of 8..12 whose entries may hold a key of table `a` in `lo..=hi` (a new rule
/// and a READ_IDX).
fn matching(d: &mut NvmeDevice, q: QueueId, a: u8, lo: i64, hi: i64) -> Vec<u64> {
    let r = rule_id(&run(
        d,
        q,
        Command::SendIdxIcr {
            table: a,
            rule: IndexRule::Between { lo, hi },
        },
    ));
    index_read(run(
        d,
        q,
        Command::ReadIdx {
            table: a,
            rule: r,
            lba: 8,
            blocks: 4,
        },
    ))
    .lbas
}

/// With a write-back cache WRITE_IDX is acknowledged from the page buffer, as on the
/// paper's platform (§4.3): no flash program before the reply, and READ_IDX judges the
/// buffered pages by their new entries at once. The entries are logged once the data is
/// committed (here by a FLUSH); a power cut before that loses the data and its entries
/// alike, and recovery recomputes the entries from the data that survived.
#[test]
fn write_idx_under_write_back_is_acknowledged_from_the_buffer() {
    let prog_ns = fastest_program_ns();
    let fa = orders_format("a");
    let old: Vec<u8> = (0..4).flat_map(|i| page(&fa, &[10 * i])).collect();
    let new: Vec<u8> = (0..4).flat_map(|i| page(&fa, &[500 + i])).collect();
    for flush in [true, false] {
        let (mut d, q) = device(24, true);
        let (a, _) = setup(&mut d, q);
        let write = |d: &mut NvmeDevice, data: &Vec<u8>, t: SimTime| {
            d.submit(
                q,
                Command::WriteIdx {
                    table: a,
                    lba: 8,
                    data: data.clone(),
                },
                t,
            )
            .unwrap();
            d.process();
            let c = d.poll(q).unwrap();
            ok(&c);
            c
        };
        write(&mut d, &old, SimTime::from_ns(10_000_000));
        ok(&run(&mut d, q, Command::Flush));
        let c = write(&mut d, &new, SimTime::from_ns(20_000_000));
        assert_eq!(c.acct.flash_programs, 0, "acknowledged from the buffer");
        assert!(
            c.acct.latency_ns < prog_ns,
            "WRITE_IDX took {} ns, a program takes {prog_ns}",
            c.acct.latency_ns
        );
        assert!(
            d.block().ftl().is_ext_pending(8),
            "logged only once committed"
        );
        let rule = |d: &mut NvmeDevice, lo: i64, hi: i64| matching(d, q, a, lo, hi);
        assert_eq!(rule(&mut d, 500, 503), vec![8, 9, 10, 11]);
        assert!(rule(&mut d, 0, 30).is_empty(), "the old keys are gone");
        if flush {
            ok(&run(&mut d, q, Command::Flush));
            assert!(!d.block().ftl().is_ext_pending(8), "settled by the FLUSH");
        }
        // Power off and on: a FLUSHed write survives with its entries; an unflushed one
        // is lost with its entries, and the old pages are found by the old keys again.
        let mut nand = d.into_block().into_ftl().crash();
        nand.power_on();
        let mut d = NvmeDevice::new(Ftl::recover(nand, ftl_cfg(24, true)).expect("recovery"));
        let q = d.create_queue_pair(16).unwrap();
        let rule = |d: &mut NvmeDevice, lo: i64, hi: i64| matching(d, q, a, lo, hi);
        if flush {
            assert_eq!(rule(&mut d, 500, 503), vec![8, 9, 10, 11]);
            assert!(rule(&mut d, 0, 30).is_empty());
        } else {
            assert_eq!(rule(&mut d, 0, 30), vec![8, 9, 10, 11]);
            assert!(
                rule(&mut d, 500, 503).is_empty(),
                "lost writes leave no entry"
            );
        }
    }
}

#[test]
fn registrations_persist_across_power_cycles() {
    let (mut d, q) = device(24, false);
    let (a, b) = setup(&mut d, q);
    let fa = orders_format("a");
    ok(&run(
        &mut d,
        q,
        Command::WriteIdx {
            table: a,
            lba: 5,
            data: page(&fa, &[1, 2, 3]),
        },
    ));
    let ftl = d.into_block().into_ftl();
    let nand = ftl.shutdown(T0).unwrap();
    let mut d = NvmeDevice::new(Ftl::recover(nand, ftl_cfg(24, false)).unwrap());
    let q = d.create_queue_pair(4).unwrap();
    assert_eq!(d.flixr().tables(), vec![(a, "a".into()), (b, "b".into())]);
    let c = run(
        &mut d,
        q,
        Command::ReadIdx {
            table: a,
            rule: 1,
            lba: 5,
            blocks: 1,
        },
    );
    assert!(
        matches!(c.status, Status::InvalidField(ref m) if m.contains("unknown rule")),
        "rules are volatile"
    );
    let r = rule_id(&run(
        &mut d,
        q,
        Command::SendIdxIcr {
            table: a,
            rule: IndexRule::Between { lo: 4, hi: 9 },
        },
    ));
    let got = index_read(run(
        &mut d,
        q,
        Command::ReadIdx {
            table: a,
            rule: r,
            lba: 5,
            blocks: 1,
        },
    ));
    assert_eq!(got.skipped, vec![5]);
    let nand = d.into_block().into_ftl().crash();
    let d = NvmeDevice::new(Ftl::recover(nand, ftl_cfg(24, false)).unwrap());
    assert_eq!(d.flixr().tables().len(), 2);
}

// ---------------------------------------------------------------------------------------
// Model-based property test.

const REGION: u64 = 48;

#[derive(Debug, Clone)]
enum Op {
    /// WRITE_IDX of `vals.len()` pages of table a (false) or b (true).
    WriteIdx {
        b: bool,
        lba: u64,
        vals: Vec<Vec<i32>>,
    },
    /// A plain Write of a valid table page.
    PlainPage {
        b: bool,
        lba: u64,
        vals: Vec<i32>,
    },
    /// A plain Write of bytes that are no table page.
    Garbage {
        lba: u64,
        byte: u8,
    },
    Trim {
        lba: u64,
        n: u64,
    },
    /// Plain writes outside the region (drive GC and wear leveling).
    Filler {
        n: u64,
        seed: u64,
    },
    Checkpoint,
    /// A FLUSH: afterwards no entry is pending (staged entries are logged).
    Flush,
    /// A power cut during the next WRITE_IDX (of table a or b), then recovery.
    CutDuring {
        b: bool,
        at_op: u64,
        lba: u64,
        vals: Vec<Vec<i32>>,
    },
}

fn vals() -> impl Strategy<Value = Vec<i32>> {
    prop::collection::vec(0..1000i32, 0..12)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<bool>(), 0..REGION, prop::collection::vec(vals(), 1..4))
            .prop_map(|(b, lba, vals)| Op::WriteIdx { b, lba, vals }),
        2 => (any::<bool>(), 0..REGION, vals()).prop_map(|(b, lba, vals)| Op::PlainPage { b, lba, vals }),
        1 => (0..REGION, any::<u8>()).prop_map(|(lba, byte)| Op::Garbage { lba, byte }),
        1 => (0..REGION, 1..4u64).prop_map(|(lba, n)| Op::Trim { lba, n }),
        2 => (64..512u64, any::<u64>()).prop_map(|(n, seed)| Op::Filler { n, seed }),
        1 => Just(Op::Checkpoint),
        1 => Just(Op::Flush),
        2 => (any::<bool>(), 1..60u64, 0..REGION, prop::collection::vec(vals(), 1..4))
            .prop_map(|(b, at_op, lba, vals)| Op::CutDuring { b, at_op, lba, vals }),
    ]
}

struct World {
    d: NvmeDevice,
    q: QueueId,
    a: u8,
    b: u8,
    wb: bool,
    /// GC victims so far (FTL counters restart at each recovery).
    gc_victims: u64,
    /// Table b has a second key (a range on `key` after its bitmap on `qty`): its
    /// entries are multi-key (version 2).
    multi: bool,
}

/// The values of column `col` of a page, if it is a page of the table.
fn col_rows(f: &TableFormat, data: &[u8], col: usize) -> Option<Vec<i64>> {
    let s = schema(f);
    let v = PageView::parse(data, &s).ok()?;
    let mut out = Vec::new();
    v.column(col).ok()?.decode_i64_into(&mut out).ok()?;
    Some(out)
}

/// Give table b its second key (range on `key`).
fn add_second_key(d: &mut NvmeDevice, q: QueueId, b: u8) {
    ok(&run(d, q, enc(b, "key", IndexEncoding::Range)));
    assert_eq!(d.flixr().key_layout(b).unwrap().slots.len(), 2);
}

impl World {
    fn fmt(&self, b: bool) -> TableFormat {
        orders_format(if b { "b" } else { "a" })
    }

    fn pages(&self, b: bool, lba: u64, vals: &[Vec<i32>]) -> Vec<u8> {
        let n = vals.len().min((REGION - lba) as usize).max(1);
        vals[..n]
            .iter()
            .flat_map(|v| page(&self.fmt(b), v))
            .collect()
    }

    fn recover(&mut self) {
        let dev = std::mem::replace(
            &mut self.d,
            NvmeDevice::new(
                Ftl::format(
                    Nand::new_in_memory(DeviceConfig::preset("tiny").unwrap()).unwrap(),
                    FtlConfig::default(),
                )
                .unwrap(),
            ),
        );
        self.gc_victims += dev.block().ftl().stats().gc_victims;
        let mut nand = dev.into_block().into_ftl().crash();
        nand.disarm_power_cut();
        nand.power_on();
        let ftl = Ftl::recover(nand, ftl_cfg(24, self.wb)).expect("recovery");
        self.d = NvmeDevice::new(ftl);
        self.q = self.d.create_queue_pair(16).unwrap();
        assert_eq!(self.d.flixr().tables().len(), 2, "registrations survive");
    }

    /// Apply `op`; true if a power cut struck inside it.
    fn apply(&mut self, op: &Op) -> bool {
        let fmt_b = orders_format("b");
        let fmt_a = orders_format("a");
        let (d, q) = (&mut self.d, self.q);
        match op {
            Op::WriteIdx { b, lba, vals } => {
                let data = self.pages(*b, *lba, vals);
                let table = if *b { self.b } else { self.a };
                ok(&run(
                    &mut self.d,
                    q,
                    Command::WriteIdx {
                        table,
                        lba: *lba,
                        data,
                    },
                ));
            }
            Op::PlainPage { b, lba, vals } => {
                let data = page(if *b { &fmt_b } else { &fmt_a }, vals);
                ok(&run(d, q, Command::Write { lba: *lba, data }));
            }
            Op::Garbage { lba, byte } => ok(&run(
                d,
                q,
                Command::Write {
                    lba: *lba,
                    data: vec![*byte; LBA],
                },
            )),
            Op::Trim { lba, n } => ok(&run(
                d,
                q,
                Command::Trim {
                    lba: *lba,
                    blocks: (*n).min(REGION - lba),
                },
            )),
            Op::Filler { n, seed } => {
                let lbas = d.block().ftl().lbas();
                let mut x = *seed | 1;
                for _ in 0..*n {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let l = REGION + x % (lbas - REGION);
                    ok(&run(
                        d,
                        q,
                        Command::Write {
                            lba: l,
                            data: vec![x as u8; LBA],
                        },
                    ));
                }
            }
            Op::Checkpoint => {
                d.block_mut().ftl_mut().checkpoint(T0).unwrap();
            }
            Op::Flush => {
                ok(&run(d, q, Command::Flush));
                let ftl = d.block().ftl();
                for l in 0..REGION {
                    assert!(!ftl.is_ext_pending(l), "LBA {l} pending after a FLUSH");
                }
            }
            Op::CutDuring {
                b,
                at_op,
                lba,
                vals,
            } => {
                let data = self.pages(*b, *lba, vals);
                let table = if *b { self.b } else { self.a };
                self.d
                    .block_mut()
                    .ftl_mut()
                    .nand_mut()
                    .arm_power_cut(PowerCut::AtOp(*at_op));
                let c = run(
                    &mut self.d,
                    q,
                    Command::WriteIdx {
                        table,
                        lba: *lba,
                        data,
                    },
                );
                assert!(
                    c.status.is_success() || matches!(c.status, Status::NamespaceNotReady(_)),
                    "{}",
                    c.status
                );
                self.recover();
                return !c.status.is_success();
            }
        }
        false
    }

    /// Every entry bounds its page's rows; READ_IDX never skips a page with a matching
    /// row, for a few rules on either table.
    fn check(&mut self, rules: &[(i64, i64)]) -> Result<(), TestCaseError> {
        let q = self.q;
        let c = run(
            &mut self.d,
            q,
            Command::Read {
                lba: 0,
                blocks: REGION as u32,
            },
        );
        ok(&c);
        let Payload::Data(all) = c.payload else {
            unreachable!()
        };
        for l in 0..REGION {
            let data = &all[l as usize * LBA..(l as usize + 1) * LBA];
            let ftl = self.d.block_mut().ftl_mut();
            // Under write-back an entry over data acknowledged from the page buffer stays
            // pending until its commit is logged (settled at the next FLIXR write or
            // FLUSH); write-through leaves nothing pending.
            let pending = ftl.is_ext_pending(l);
            prop_assert!(
                !pending || self.wb,
                "LBA {l}: pending after the command completed"
            );
            let e = Entry::decode(&ftl.ext(l, T0).unwrap().0);
            let (fa, fb) = (self.fmt(false), self.fmt(true));
            match e {
                Entry::None => {}
                Entry::Range { table, min, max } => {
                    prop_assert_eq!(table, self.a);
                    let v = rows(&fa, data);
                    prop_assert!(
                        v.is_some(),
                        "LBA {l}: range entry on a page that is not of table a"
                    );
                    for x in v.unwrap() {
                        prop_assert!(min <= x && x <= max, "LBA {l}: {x} outside [{min}, {max}]");
                    }
                }
                Entry::Bitmap { table, bits } => {
                    prop_assert_eq!(table, self.b);
                    let v = rows(&fb, data);
                    prop_assert!(
                        v.is_some(),
                        "LBA {l}: bitmap entry on a page that is not of table b"
                    );
                    for x in v.unwrap() {
                        let k = BOUNDS.partition_point(|&b| b <= x);
                        prop_assert!(
                            bits[k / 8] & (1 << (k % 8)) != 0,
                            "LBA {l}: bucket {k} of {x} not set"
                        );
                    }
                }
                Entry::Empty(t) => {
                    let f = if t == self.a { &fa } else { &fb };
                    prop_assert_eq!(
                        rows(f, data).map(|v| v.len()),
                        Some(0),
                        "LBA {}: empty entry",
                        l
                    );
                }
                Entry::Packed { table, .. } => {
                    prop_assert_eq!(table, self.b);
                    prop_assert!(self.multi, "LBA {l}: packed entry of a one-key table");
                    let layout = self.d.flixr().key_layout(self.b).unwrap();
                    let keys = layout.keys(&e);
                    prop_assert!(keys.is_some(), "LBA {l}: entry of another generation");
                    let (qty, key) = (rows(&fb, data), col_rows(&fb, data, 0));
                    prop_assert!(qty.is_some() && key.is_some(), "LBA {l}: not a page of b");
                    for (k, vals) in keys.unwrap().iter().zip([qty.unwrap(), key.unwrap()]) {
                        match k {
                            KeyEntry::Bitmap(bits) => {
                                for x in vals {
                                    let k = BOUNDS.partition_point(|&b| b <= x);
                                    prop_assert!(
                                        bits[k / 8] & (1 << (k % 8)) != 0,
                                        "LBA {l}: bucket {k}"
                                    );
                                }
                            }
                            KeyEntry::Range { min, max } => {
                                for x in vals {
                                    prop_assert!(
                                        *min <= x && x <= *max,
                                        "LBA {l}: key {x} outside [{min}, {max}]"
                                    );
                                }
                            }
                        }
                    }
                }
                Entry::Opaque(_) => {}
                Entry::Pending(_) => prop_assert!(false, "LBA {l}: pending stub left behind"),
            }
        }
        if self.multi {
            // A rule over both keys of b: never skips a page with a row matching both,
            // and never reads more than the rule on qty alone.
            for &(lo, hi) in rules {
                let (klo, khi) = (lo % 12, lo % 12 + 1);
                let one = read_under_n(&mut self.d, q, self.b, &[("qty", lo, hi)], REGION as u32);
                let got = read_under_n(
                    &mut self.d,
                    q,
                    self.b,
                    &[("qty", lo, hi), ("key", klo, khi)],
                    REGION as u32,
                );
                prop_assert!(got.lbas.len() <= one.lbas.len());
                let fb = self.fmt(true);
                for &l in &got.skipped {
                    let data = &all[l as usize * LBA..(l as usize + 1) * LBA];
                    if let (Some(q), Some(k)) = (rows(&fb, data), col_rows(&fb, data, 0)) {
                        prop_assert!(
                            !q.iter()
                                .zip(&k)
                                .any(|(&x, &y)| lo <= x && x <= hi && klo <= y && y <= khi),
                            "two-key READ_IDX skipped LBA {} holding a matching row",
                            l
                        );
                    }
                }
            }
        }
        for &(lo, hi) in rules {
            for (table, f) in [(self.a, self.fmt(false)), (self.b, self.fmt(true))] {
                let r = rule_id(&run(
                    &mut self.d,
                    q,
                    Command::SendIdxIcr {
                        table,
                        rule: IndexRule::Between { lo, hi },
                    },
                ));
                let got = index_read(run(
                    &mut self.d,
                    q,
                    Command::ReadIdx {
                        table,
                        rule: r,
                        lba: 0,
                        blocks: REGION as u32,
                    },
                ));
                let mut returned = got
                    .lbas
                    .iter()
                    .copied()
                    .chain(got.skipped.iter().copied())
                    .collect::<Vec<_>>();
                returned.sort_unstable();
                prop_assert_eq!(returned, (0..REGION).collect::<Vec<_>>());
                for (i, &l) in got.lbas.iter().enumerate() {
                    prop_assert_eq!(
                        &got.data[i * LBA..(i + 1) * LBA],
                        &all[l as usize * LBA..(l as usize + 1) * LBA]
                    );
                }
                for &l in &got.skipped {
                    let data = &all[l as usize * LBA..(l as usize + 1) * LBA];
                    if let Some(v) = rows(&f, data) {
                        prop_assert!(
                            !v.iter().any(|&x| lo <= x && x <= hi),
                            "READ_IDX skipped LBA {} of table {} holding a row in [{}, {}]: {:?}",
                            l,
                            table,
                            lo,
                            hi,
                            v
                        );
                    }
                }
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    #[test]
    fn entries_bound_rows_and_read_idx_never_skips_a_match(
        ops in prop::collection::vec(op(), 1..30),
        wb in any::<bool>(),
        rules in prop::collection::vec((0..1000i64, 0..300i64), 1..3),
        multi in any::<bool>(),
    ) {
        let (mut d, q) = device(24, wb);
        // The whole logical space written once (batches), so that fillers make GC run.
        let lbas = d.block().ftl().lbas();
        let mut l = REGION;
        while l < lbas {
            let n = (lbas - l).min(128);
            ok(&run(&mut d, q, Command::Write { lba: l, data: vec![l as u8; n as usize * LBA] }));
            l += n;
        }
        let (a, b) = setup(&mut d, q);
        if multi {
            add_second_key(&mut d, q, b);
        }
        let mut w = World { d, q, a, b, wb, gc_victims: 0, multi };
        let rules: Vec<(i64, i64)> = rules.into_iter().map(|(lo, len)| (lo, lo + len)).collect();
        for op in &ops {
            w.apply(op);
        }
        w.check(&rules)?;
        let fill: u64 = ops.iter().map(|o| if let Op::Filler { n, .. } = o { *n } else { 0 }).sum();
        // GC and a crash at the end must keep it all.
        w.recover();
        prop_assert!(fill < 1500 || w.gc_victims > 0, "{} filler writes and no GC", fill);
        w.check(&rules)?;
        w.d.block_mut().ftl_mut().check_invariants().map_err(TestCaseError::fail)?;
        let _: &BlockDevice = w.d.block();
    }
}

/// A power cut at every point of a WRITE_IDX overwrite: after recovery the index agrees
/// with whichever data survived (redo bit).
#[test]
fn power_cut_during_write_idx_leaves_index_agreeing_with_data() {
    let mut cut_hit = 0;
    for (at_op, multi) in (1..12).flat_map(|i| [(i, false), (i, true)]) {
        let (mut d, q) = device(24, false);
        let (a, b) = setup(&mut d, q);
        if multi {
            add_second_key(&mut d, q, b);
        }
        let fa = orders_format(if multi { "b" } else { "a" });
        let old: Vec<u8> = (0..4)
            .flat_map(|i| page(&fa, &[10 * i, 10 * i + 5]))
            .collect();
        ok(&run(
            &mut d,
            q,
            Command::WriteIdx {
                table: if multi { b } else { a },
                lba: 8,
                data: old,
            },
        ));
        let mut w = World {
            d,
            q,
            a,
            b,
            wb: false,
            gc_victims: 0,
            multi,
        };
        let new: Vec<Vec<i32>> = (0..4).map(|i| vec![500 + i, 900]).collect();
        if w.apply(&Op::CutDuring {
            b: multi,
            at_op,
            lba: 8,
            vals: new,
        }) {
            cut_hit += 1;
        }
        w.check(&[(0, 40), (500, 510), (900, 900)]).unwrap();
    }
    assert!(cut_hit >= 6, "cuts landed inside the command: {cut_hit}");
}

/// JOIN1 over a table whose pages are two LBAs: the keys of each whole page go into the
/// per-table index (it parsed single LBAs before: no key was found, and JOIN2 skipped
/// pages holding joining keys); a page the command's range cuts sets every bucket.
#[test]
fn join1_reads_keys_of_multi_lba_pages() {
    let (mut d, q) = device(24, false);
    let f = TableFormat {
        page_lbas: 2,
        ..orders_format("wide")
    };
    let t = table_id(&run(&mut d, q, Command::SendTblCol(f.clone())));
    ok(&run(
        &mut d,
        q,
        Command::SendIdxEnc {
            table: t,
            spec: IndexSpec {
                column: "qty".into(),
                encoding: IndexEncoding::Range,
            },
        },
    ));
    // Page i (LBAs 100 + 2i, 101 + 2i): qty i, keys 100i .. 100i + 4.
    let s = schema(&f);
    let data: Vec<u8> = (0..4)
        .flat_map(|i| {
            let mut b = PageBuilder::new(s.clone(), f.layout, 2 * LBA).unwrap();
            for j in 0..5 {
                let row = s
                    .encode_row_vec(&[
                        Value::Int64(100 * i + j),
                        Value::Int32(i as i32),
                        Value::Char(vec![]),
                    ])
                    .unwrap();
                b.push_row(&row).unwrap();
            }
            b.finish().to_vec()
        })
        .collect();
    ok(&run(
        &mut d,
        q,
        Command::WriteIdx {
            table: t,
            lba: 100,
            data,
        },
    ));
    let r = rule_id(&run(
        &mut d,
        q,
        Command::SendIdxIcr {
            table: t,
            rule: IndexRule::Between { lo: 1, hi: 2 },
        },
    ));
    // Buckets of 100 keys: page i's keys are in bucket i.
    let bounds: Vec<i64> = (1..8).map(|i| i * 100).collect();
    let tia = rule_id(&run(
        &mut d,
        q,
        Command::SendTidxEnc {
            table: t,
            spec: JoinIndexSpec {
                column: "key".into(),
                bounds,
            },
        },
    ));
    let join1 = |d: &mut NvmeDevice, lba: u64, blocks: u32| {
        index_read(run(
            d,
            q,
            Command::ReadIdxJoin1 {
                table: t,
                rule: r,
                tia,
                reset: true,
                lba,
                blocks,
            },
        ))
    };
    let got = join1(&mut d, 100, 8);
    assert_eq!(got.lbas, vec![102, 103, 104, 105], "pages 1 and 2");
    assert_eq!(d.flixr().table_index_bits(tia), Some(&[0b0000_0110u8][..]));
    // A range starting inside page 1: its second half cannot be parsed alone.
    join1(&mut d, 103, 3);
    assert_eq!(d.flixr().table_index_bits(tia), Some(&[0xFFu8][..]));
}

// ---------------------------------------------------------------------------------------
// Releasing join bitmaps, and multi-key per-page indexes (§6.4).

fn status_has(c: &Completion, want: &str) -> bool {
    matches!(c.status, Status::InvalidField(ref m) if m.contains(want))
}

/// A thousand joins' worth of SEND_TIDX_ENC / SEND_TIDX_ICR, each released after: the
/// device never runs out (without releasing, the 257th registration is refused and says
/// how to release). Unknown ids are refused and change nothing.
#[test]
fn join_registrations_release_and_a_thousand_joins_never_fill_the_tables() {
    let (mut d, q) = device(24, false);
    let (a, b) = setup(&mut d, q);
    let spec = || JoinIndexSpec {
        column: "qty".into(),
        bounds: BOUNDS.to_vec(),
    };
    for _ in 0..1000 {
        let tia = rule_id(&run(
            &mut d,
            q,
            Command::SendTidxEnc {
                table: a,
                spec: spec(),
            },
        ));
        let rule = rule_id(&run(&mut d, q, Command::SendTidxIcr { table: b, tia }));
        ok(&run(&mut d, q, Command::DropTidxIcr { table: b, rule }));
        ok(&run(&mut d, q, Command::DropTidxEnc { tia }));
    }
    assert_eq!(d.flixr().join_state(), (0, 0));
    // Dropping a per-table index takes its join rules with it.
    let tia = rule_id(&run(
        &mut d,
        q,
        Command::SendTidxEnc {
            table: a,
            spec: spec(),
        },
    ));
    let rule = rule_id(&run(&mut d, q, Command::SendTidxIcr { table: b, tia }));
    assert_eq!(d.flixr().join_state(), (1, 1));
    // Bad input: unknown ids, the wrong table; nothing changes.
    for (cmd, want) in [
        (
            Command::DropTidxEnc { tia: 9999 },
            "unknown per-table index",
        ),
        (
            Command::DropTidxIcr {
                table: b,
                rule: 9999,
            },
            "unknown join rule",
        ),
        (Command::DropTidxIcr { table: a, rule }, "unknown join rule"),
    ] {
        let c = run(&mut d, q, cmd);
        assert!(status_has(&c, want), "want {want}: {}", c.status);
        assert_eq!(d.flixr().join_state(), (1, 1));
    }
    ok(&run(&mut d, q, Command::DropTidxEnc { tia }));
    assert_eq!(d.flixr().join_state(), (0, 0));
    let c = run(&mut d, q, Command::DropTidxIcr { table: b, rule });
    assert!(status_has(&c, "unknown join rule"), "{}", c.status);
    // Without releasing, the table fills and the refusal says what to do.
    let mut refused = None;
    for i in 0..300 {
        let c = run(
            &mut d,
            q,
            Command::SendTidxEnc {
                table: a,
                spec: spec(),
            },
        );
        if !c.status.is_success() {
            refused = Some((i, c.status.to_string()));
            break;
        }
    }
    let (i, msg) = refused.expect("the TIRA is bounded");
    assert_eq!(i, 256);
    assert!(msg.contains("DropTidxEnc"), "{msg}");
}

/// `(key, qty)` rows as a page of `f`.
fn kq_page(f: &TableFormat, rows: &[(i64, i32)]) -> Vec<u8> {
    let s = schema(f);
    let mut b = PageBuilder::new(s.clone(), f.layout, LBA).unwrap();
    for &(k, v) in rows {
        b.push_row(
            &s.encode_row_vec(&[Value::Int64(k), Value::Int32(v), Value::Char(b"y".to_vec())])
                .unwrap(),
        )
        .unwrap();
    }
    b.finish().to_vec()
}

fn enc(table: u8, column: &str, encoding: IndexEncoding) -> Command {
    Command::SendIdxEnc {
        table,
        spec: IndexSpec {
            column: column.into(),
            encoding,
        },
    }
}

fn terms(t: &[(&str, i64, i64)]) -> Vec<RuleTerm> {
    t.iter()
        .map(|&(c, lo, hi)| RuleTerm {
            column: c.into(),
            rule: IndexRule::Between { lo, hi },
        })
        .collect()
}

fn read_under(d: &mut NvmeDevice, q: QueueId, table: u8, t: &[(&str, i64, i64)]) -> IndexRead {
    read_under_n(d, q, table, t, 16)
}

fn read_under_n(
    d: &mut NvmeDevice,
    q: QueueId,
    table: u8,
    t: &[(&str, i64, i64)],
    blocks: u32,
) -> IndexRead {
    let rule = rule_id(&run(
        d,
        q,
        Command::SendIdxIcrKeys {
            table,
            terms: terms(t),
        },
    ));
    let r = index_read(run(
        d,
        q,
        Command::ReadIdx {
            table,
            rule,
            lba: 0,
            blocks,
        },
    ));
    ok(&run(d, q, Command::DropIdxIcr { table, rule }));
    r
}

/// Two keys packed in one entry (a range on `key`, a bitmap on `qty`): a rule over both
/// skips a page when either key rules it out; a key that does not fit is refused naming
/// the sizes and registers nothing; dropping a key leaves the pages read until they are
/// rewritten; the keys survive a power cycle.
#[test]
fn multi_key_entries_pack_keys_and_rules_and_them() {
    let (mut d, q) = device(24, false);
    let f = orders_format("m");
    let m = table_id(&run(&mut d, q, Command::SendTblCol(f.clone())));
    ok(&run(&mut d, q, enc(m, "key", IndexEncoding::Range)));
    ok(&run(
        &mut d,
        q,
        enc(
            m,
            "qty",
            IndexEncoding::Bitmap {
                bounds: BOUNDS.to_vec(),
            },
        ),
    ));
    let layout = d.flixr().key_layout(m).unwrap();
    assert_eq!(layout.slots.len(), 2);
    assert_eq!(layout.entry_bytes(), 4 + 16 + 1);
    assert_ne!(layout.generation, 0);
    // Page i: keys 10i..10i+9; qty 100*(i % 8) + j.
    let data: Vec<u8> = (0..16i64)
        .flat_map(|i| {
            kq_page(
                &f,
                &(0..10)
                    .map(|j| (10 * i + j, (100 * (i % 8) + j) as i32))
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    ok(&run(
        &mut d,
        q,
        Command::WriteIdx {
            table: m,
            lba: 0,
            data: data.clone(),
        },
    ));
    // Key 0..=79 keeps pages 0..8; qty 200..=299 keeps pages 2 and 10; both: page 2.
    let by_key = read_under(&mut d, q, m, &[("key", 0, 79)]);
    let by_qty = read_under(&mut d, q, m, &[("qty", 200, 299)]);
    let both = read_under(&mut d, q, m, &[("key", 0, 79), ("qty", 200, 299)]);
    assert_eq!(by_key.lbas, (0..8).collect::<Vec<_>>());
    assert_eq!(by_qty.lbas, vec![2, 10]);
    assert_eq!(both.lbas, vec![2]);
    assert_eq!(&both.data[..], &data[2 * LBA..3 * LBA]);
    // SEND_IDX_ICR (one rule, no column) compares the first key; UPDATE_HOST_INDEX
    // reports the first key's range.
    let r = rule_id(&run(
        &mut d,
        q,
        Command::SendIdxIcr {
            table: m,
            rule: IndexRule::Between { lo: 150, hi: 155 },
        },
    ));
    let got = index_read(run(
        &mut d,
        q,
        Command::ReadIdx {
            table: m,
            rule: r,
            lba: 0,
            blocks: 16,
        },
    ));
    assert_eq!(got.lbas, vec![15]);
    let c = run(&mut d, q, Command::UpdateHostIndex { table: m, lba: 3 });
    ok(&c);
    assert_eq!(
        c.payload,
        Payload::HostIndex(HostIndexValue::Range { min: 30, max: 39 })
    );
    // Bad input: a term on a column without a key, a third key that does not fit, the
    // same column twice; nothing registered.
    let c = run(
        &mut d,
        q,
        Command::SendIdxIcrKeys {
            table: m,
            terms: terms(&[("note", 0, 1)]),
        },
    );
    assert!(status_has(&c, "no per-page index"), "{}", c.status);
    let c = run(
        &mut d,
        q,
        Command::SendIdxIcrKeys {
            table: m,
            terms: vec![],
        },
    );
    assert!(status_has(&c, "terms"), "{}", c.status);
    let f2 = orders_format("n");
    let n = table_id(&run(&mut d, q, Command::SendTblCol(f2)));
    ok(&run(
        &mut d,
        q,
        enc(
            n,
            "qty",
            IndexEncoding::Bitmap {
                bounds: (0..120).collect(),
            },
        ),
    ));
    let before = d.flixr().key_layout(n).unwrap();
    let c = run(&mut d, q, enc(n, "key", IndexEncoding::Range));
    assert!(
        status_has(&c, "would need 36 bytes") && status_has(&c, "keeps 24"),
        "{}",
        c.status
    );
    assert_eq!(
        d.flixr().key_layout(n).unwrap(),
        before,
        "nothing registered"
    );
    let c = run(&mut d, q, enc(m, "qty", IndexEncoding::Range));
    assert!(status_has(&c, "already"), "{}", c.status);
    let c = run(
        &mut d,
        q,
        Command::DropIdxEnc {
            table: m,
            column: "note".into(),
        },
    );
    assert!(status_has(&c, "no per-page index"), "{}", c.status);
    assert_eq!(d.flixr().key_layout(m).unwrap(), layout);
    // Power cycle: both keys and the generation survive, and so do the entries.
    let nand = d.into_block().into_ftl().crash();
    let mut d = NvmeDevice::new(Ftl::recover(nand, ftl_cfg(24, false)).unwrap());
    let q = d.create_queue_pair(16).unwrap();
    assert_eq!(d.flixr().key_layout(m).unwrap(), layout);
    let again = read_under(&mut d, q, m, &[("key", 0, 79), ("qty", 200, 299)]);
    assert_eq!(again.lbas, vec![2]);
    // Drop the qty key: a new generation, so the old entries are not compared (every
    // page is read) until the table is rewritten.
    ok(&run(
        &mut d,
        q,
        Command::DropIdxEnc {
            table: m,
            column: "qty".into(),
        },
    ));
    let one = d.flixr().key_layout(m).unwrap();
    assert_eq!(one.slots.len(), 1);
    assert_ne!(one.generation, layout.generation);
    let stale = read_under(&mut d, q, m, &[("key", 0, 9)]);
    assert_eq!(stale.lbas.len(), 16);
    ok(&run(
        &mut d,
        q,
        Command::WriteIdx {
            table: m,
            lba: 0,
            data,
        },
    ));
    let fresh = read_under(&mut d, q, m, &[("key", 0, 9)]);
    assert_eq!(fresh.lbas, vec![0]);
    let c = run(
        &mut d,
        q,
        Command::SendIdxIcrKeys {
            table: m,
            terms: terms(&[("qty", 0, 9)]),
        },
    );
    assert!(status_has(&c, "no per-page index"), "{}", c.status);
}
