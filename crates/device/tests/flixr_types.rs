//! FLIXR on users' tables (issue 34) at the command interface: a nullable VARCHAR key
//! and a nullable INT32 key get entries that ignore NULLs (a page whose key is NULL in
//! every row is skipped by any rule), the registry's format version 4 survives power
//! cycles, an image written in the older format (built here: a classic table, its
//! registry in the version-1 bytes) still opens and reads through its index after the
//! new format is written beside it, and a registry of an unknown format is refused
//! with a clear message while every page still reads exactly.

use csd_device::flixr::{KeyKind, prefix_key};
use csd_device::{
    Command, Completion, IndexEncoding, IndexRead, IndexRule, IndexSpec, NvmeDevice, Payload,
    QueueId, Status, TableFormat,
};
use csd_ftl::{Ftl, FtlConfig};
use csd_nand::Nand;
use csd_sim::{DeviceConfig, SimTime};
use csd_table::{Column, ColumnType, Layout, PageBuilder, Schema, Value};

const T0: SimTime = SimTime::ZERO;
const LBA: usize = 4096;

fn cfg() -> FtlConfig {
    FtlConfig {
        ext_bytes: 24,
        ..FtlConfig::default()
    }
}

fn device() -> (NvmeDevice, QueueId) {
    let nand = Nand::new_in_memory(DeviceConfig::preset("tiny").expect("preset")).expect("nand");
    let mut d = NvmeDevice::new(Ftl::format(nand, cfg()).expect("format"));
    let q = d.create_queue_pair(16).expect("queue");
    (d, q)
}

/// Power off cleanly and assemble the device again from its flash.
fn reopen(d: NvmeDevice) -> (NvmeDevice, QueueId) {
    let nand = d.into_block().into_ftl().shutdown(T0).expect("shutdown");
    let mut d = NvmeDevice::new(Ftl::recover(nand, cfg()).expect("recover"));
    let q = d.create_queue_pair(16).expect("queue");
    (d, q)
}

fn run(d: &mut NvmeDevice, q: QueueId, cmd: Command) -> Completion {
    d.submit(q, cmd, T0).expect("submit");
    d.process();
    d.poll(q).expect("completion")
}

fn ok(c: &Completion) -> &Payload {
    assert_eq!(c.status, Status::Success, "{}", c.status);
    &c.payload
}

fn table_id(c: &Completion) -> u8 {
    match ok(c) {
        Payload::FlixrTable(id) => *id,
        p => panic!("{p:?}"),
    }
}

/// A classic table: NOT NULL `k INT64, qty INT32` (its registry keeps the old bytes).
fn classic() -> TableFormat {
    TableFormat {
        name: "classic".into(),
        columns: vec![
            Column::new("k", ColumnType::Int64),
            Column::new("qty", ColumnType::Int32),
        ],
        layout: Layout::Nsm,
        page_lbas: 1,
    }
}

/// A user's table: `id INT32 NOT NULL, s VARCHAR NULL, n INT32 NULL`.
fn typed() -> TableFormat {
    TableFormat {
        name: "typed".into(),
        columns: vec![
            Column::new("id", ColumnType::Int32),
            Column::new("s", ColumnType::Varchar).with_nullable(true),
            Column::new("n", ColumnType::Int32).with_nullable(true),
        ],
        layout: Layout::Pax,
        page_lbas: 1,
    }
}

fn page(f: &TableFormat, rows: &[Vec<Value>]) -> Vec<u8> {
    let s = Schema::new(f.name.clone(), f.columns.clone()).expect("schema");
    let mut b = PageBuilder::new(s.clone(), f.layout, LBA).expect("builder");
    for r in rows {
        b.push_row(&s.encode_row_vec(r).expect("row"))
            .expect("push");
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

/// READ_IDX of `lba..lba+n` under a new rule on the table's first key: the LBAs skipped.
fn skipped(
    d: &mut NvmeDevice,
    q: QueueId,
    table: u8,
    rule: IndexRule,
    lba: u64,
    n: u32,
) -> Vec<u64> {
    let r = match ok(&run(d, q, Command::SendIdxIcr { table, rule })) {
        Payload::FlixrRule(r) => *r,
        p => panic!("{p:?}"),
    };
    let c = run(
        d,
        q,
        Command::ReadIdx {
            table,
            rule: r,
            lba,
            blocks: n,
        },
    );
    match ok(&c) {
        Payload::IndexRead(r) => {
            let r: &IndexRead = r;
            r.skipped.clone()
        }
        p => panic!("{p:?}"),
    }
}

/// Pages of the typed table at LBAs 100..104: strings `a…`, NULL-only, `m…` with NULL
/// `n`, long strings sharing 8+ bytes.
fn typed_pages() -> Vec<Vec<u8>> {
    let f = typed();
    let row = |id: i32, s: Option<&str>, n: Option<i32>| {
        vec![
            Value::Int32(id),
            s.map_or(Value::Null, |s| Value::Varchar(s.into())),
            n.map_or(Value::Null, Value::Int32),
        ]
    };
    vec![
        page(
            &f,
            &[
                row(0, Some(""), Some(1)),
                row(1, Some("abc"), Some(5)),
                row(2, None, Some(9)),
            ],
        ),
        page(&f, &[row(3, None, None), row(4, None, None)]),
        page(
            &f,
            &[row(5, Some("mango"), None), row(6, Some("melon  "), None)],
        ),
        page(
            &f,
            &[
                row(7, Some("prefix-shared-a"), Some(20)),
                row(8, Some("prefix-shared-b"), Some(30)),
            ],
        ),
    ]
}

#[test]
fn nullable_and_string_keys_skip_pages_and_survive_a_power_cycle() {
    let (mut d, q) = device();
    let t = table_id(&run(&mut d, q, Command::SendTblCol(typed())));
    ok(&run(&mut d, q, enc(t, "s", IndexEncoding::Range)));
    let data = typed_pages().concat();
    ok(&run(
        &mut d,
        q,
        Command::WriteIdx {
            table: t,
            lba: 100,
            data: data.clone(),
        },
    ));
    let key = |s: &str| prefix_key(s.as_bytes(), 0);
    let eq = |s: &str| IndexRule::Between {
        lo: key(s),
        hi: key(s),
    };
    let all = IndexRule::Between {
        lo: i64::MIN,
        hi: i64::MAX,
    };
    // `s = 'abc'`: only the first page; a NULL-only page is skipped by every rule.
    assert_eq!(
        skipped(&mut d, q, t, eq("abc"), 100, 4),
        vec![101, 102, 103]
    );
    assert_eq!(skipped(&mut d, q, t, all.clone(), 100, 4), vec![101]);
    // Strings longer than the key: both long strings have the key of their first 8
    // bytes; a constant sharing them keeps the page.
    assert_eq!(
        skipped(&mut d, q, t, eq("prefix-shared-zzz"), 100, 4),
        vec![100, 101, 102]
    );
    let (lo, hi) = KeyKind::prefix_range(b"me");
    assert_eq!(
        skipped(&mut d, q, t, IndexRule::Between { lo, hi }, 100, 4),
        vec![100, 101, 103]
    );
    // A second key on the nullable INT32: page 102 has no `n` at all.
    ok(&run(
        &mut d,
        q,
        enc(
            t,
            "n",
            IndexEncoding::Bitmap {
                bounds: vec![10, 25],
            },
        ),
    ));
    ok(&run(
        &mut d,
        q,
        Command::WriteIdx {
            table: t,
            lba: 100,
            data: data.clone(),
        },
    ));
    let r = match ok(&run(
        &mut d,
        q,
        Command::SendIdxIcrKeys {
            table: t,
            terms: vec![csd_device::RuleTerm {
                column: "n".into(),
                rule: IndexRule::Between {
                    lo: i64::MIN,
                    hi: i64::MAX,
                },
            }],
        },
    )) {
        Payload::FlixrRule(r) => *r,
        p => panic!("{p:?}"),
    };
    let c = run(
        &mut d,
        q,
        Command::ReadIdx {
            table: t,
            rule: r,
            lba: 100,
            blocks: 4,
        },
    );
    let Payload::IndexRead(got) = ok(&c) else {
        panic!()
    };
    assert_eq!(got.skipped, vec![101, 102]);

    // The registry (version 4: nullability) and the entries survive a power cycle.
    let (mut d, q) = reopen(d);
    assert_eq!(d.flixr().tables(), vec![(t, "typed".to_string())]);
    assert_eq!(
        skipped(&mut d, q, t, eq("abc"), 100, 4),
        vec![101, 102, 103]
    );
    let c = run(
        &mut d,
        q,
        Command::Read {
            lba: 100,
            blocks: 4,
        },
    );
    assert_eq!(ok(&c), &Payload::Data(data));
}

#[test]
fn an_old_format_image_opens_and_reads_and_an_unknown_registry_is_refused() {
    // The image as csd wrote it before version 4: a classic table with a range index;
    // its registry is the version-1 bytes (checked against the documented layout).
    let (mut d, q) = device();
    let f = classic();
    let a = table_id(&run(&mut d, q, Command::SendTblCol(f.clone())));
    ok(&run(&mut d, q, enc(a, "qty", IndexEncoding::Range)));
    let pages: Vec<u8> = (0..4)
        .flat_map(|p| {
            page(
                &f,
                &(0..10)
                    .map(|i| vec![Value::Int64(i), Value::Int32(p * 100 + i as i32)])
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    ok(&run(
        &mut d,
        q,
        Command::WriteIdx {
            table: a,
            lba: 0,
            data: pages.clone(),
        },
    ));
    let mut ftl = d.into_block().into_ftl();
    let mut want = b"FXR1".to_vec();
    want.extend_from_slice(&[1, a, 7, 0]);
    want.extend_from_slice(b"classic");
    want.extend_from_slice(&[Layout::Nsm.code(), 2, 0, 1, 0, b'k', 2, 0, 0]);
    want.extend_from_slice(&[3, 0, b'q', b't', b'y', 1, 0, 0, 1, 1, 0]);
    assert_eq!(ftl.blob(), want.as_slice(), "the old registry bytes");
    ftl.set_blob(&want).expect("blob");
    let nand = ftl.shutdown(T0).expect("shutdown");
    let mut d = NvmeDevice::new(Ftl::recover(nand, cfg()).expect("recover"));
    let q = d.create_queue_pair(16).expect("queue");
    let between = |lo, hi| IndexRule::Between { lo, hi };
    assert_eq!(
        skipped(&mut d, q, a, between(205, 207), 0, 4),
        vec![0, 1, 3]
    );

    // The new format beside it: a nullable string table, then a power cycle.
    let t = table_id(&run(&mut d, q, Command::SendTblCol(typed())));
    ok(&run(&mut d, q, enc(t, "s", IndexEncoding::Range)));
    let typed_data = typed_pages().concat();
    ok(&run(
        &mut d,
        q,
        Command::WriteIdx {
            table: t,
            lba: 100,
            data: typed_data.clone(),
        },
    ));
    assert_eq!(&d.block().ftl().blob()[..4], b"FXR4");
    let (mut d, q) = reopen(d);
    assert_eq!(
        skipped(&mut d, q, a, between(205, 207), 0, 4),
        vec![0, 1, 3]
    );
    let k = prefix_key(b"abc", 0);
    assert_eq!(
        skipped(&mut d, q, t, between(k, k), 100, 4),
        vec![101, 102, 103]
    );

    // A registry of a format this build does not read (a later version): nothing is
    // registered or compared, every change is refused naming why, the blob is left as
    // it is, and the pages read exactly.
    let mut ftl = d.into_block().into_ftl();
    let mut future = ftl.blob().to_vec();
    future[3] = b'9';
    ftl.set_blob(&future).expect("blob");
    let nand = ftl.shutdown(T0).expect("shutdown");
    let mut d = NvmeDevice::new(Ftl::recover(nand, cfg()).expect("recover"));
    let q = d.create_queue_pair(16).expect("queue");
    assert!(d.flixr().tables().is_empty());
    let c = run(&mut d, q, Command::SendTblCol(classic()));
    assert!(
        matches!(c.status, Status::InvalidField(ref m) if m.contains("format this csd does not read") && m.contains("FXR9")),
        "{}",
        c.status
    );
    let c = run(
        &mut d,
        q,
        Command::SendIdxIcr {
            table: a,
            rule: between(0, 1),
        },
    );
    assert!(!c.status.is_success(), "no rule on an unread registry");
    assert_eq!(d.block().ftl().blob(), future.as_slice(), "left as it is");
    let c = run(&mut d, q, Command::Read { lba: 0, blocks: 4 });
    assert_eq!(ok(&c), &Payload::Data(pages));
    let c = run(
        &mut d,
        q,
        Command::Read {
            lba: 100,
            blocks: 4,
        },
    );
    assert_eq!(ok(&c), &Payload::Data(typed_data));
}
