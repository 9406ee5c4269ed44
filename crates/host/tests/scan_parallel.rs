//! Scans evaluate pages on several host threads (`csd_query::par`): in-storage sessions
//! evaluate pages ahead of their modeled steps (`csd_device`'s look-ahead), in-host
//! processing evaluates the pages of several reads together. Results, work counters and
//! every modeled figure must be exactly those of evaluating each page on one thread,
//! whatever the program, layout, strategy, arena size and thread count, and also when
//! the table is overwritten while a session runs.
//!
//! The thread count is a process-wide setting, so the tests of this file take turns.

use csd_device::{
    Command, IspMode, IspOpen, NvmeDevice, Payload, PinnedRead, SessionState, TableExtent,
    set_scan_threads,
};
use csd_ftl::{Ftl, FtlConfig};
use csd_host::{
    Catalog, Client, CommandIssuer, HostError, QueryReport, ScanOptions, Strategy, run_scan,
};
use csd_nand::Nand;
use csd_query::build;
use csd_query::{
    AggFunc, Aggregate, Aggregation, CmpOp, Const, DataType, Expr, PartialResult, Plan,
};
use csd_sim::DeviceConfig;
use csd_table::Layout;
use csd_table::datagen::{SyntheticGenerator, SyntheticSpec};
use proptest::prelude::*;
use std::sync::{Mutex, MutexGuard, PoisonError};

static THREADS: Mutex<()> = Mutex::new(());

/// Holds the thread-count setting for one test; restores the default when dropped.
struct Threads(#[allow(dead_code)] MutexGuard<'static, ()>);

impl Threads {
    fn take() -> Threads {
        Threads(THREADS.lock().unwrap_or_else(PoisonError::into_inner))
    }
    fn set(&self, n: usize) {
        set_scan_threads(n);
    }
}

impl Drop for Threads {
    fn drop(&mut self) {
        set_scan_threads(0);
    }
}

const ROWS: u64 = 12_000;

fn config(arena_kib: u32, chunk_kib: u32, pinned: u32) -> DeviceConfig {
    let text = DeviceConfig::preset_toml("tiny").expect("tiny");
    let o = vec![
        format!("isp.session_arena_kib={arena_kib}"),
        format!("isp.result_chunk_kib={chunk_kib}"),
        format!("isp.max_pinned_pages={pinned}"),
    ];
    DeviceConfig::from_toml_with_overrides(text, &o).expect("config")
}

/// A fresh device holding table `t` (synthetic16, `ROWS` rows) in `layout`.
fn loaded(cfg: &DeviceConfig, layout: Layout) -> Client {
    loaded_rows(cfg, layout, ROWS)
}

/// A fresh device holding table `t` (synthetic16, `rows` rows) in `layout`.
fn loaded_rows(cfg: &DeviceConfig, layout: Layout, rows: u64) -> Client {
    let nand = Nand::new_in_memory(cfg.clone()).expect("nand");
    let ftl = Ftl::format(nand, FtlConfig::default()).expect("format");
    let mut c = Client::new(NvmeDevice::new(ftl)).expect("client");
    load_t(&mut c, layout, rows);
    c
}

/// Loads table `t` (synthetic16, `rows` rows) in `layout` onto `c`'s device.
fn load_t(c: &mut Client, layout: Layout, rows: u64) {
    let spec = SyntheticSpec::synthetic16(rows, 11).expect("spec");
    Catalog::load(
        c,
        "t",
        SyntheticGenerator::new(spec).expect("gen"),
        layout,
        &mut |_| {},
    )
    .expect("load");
}

/// The catalog's entry for table `t`.
fn table_t(c: &mut Client) -> csd_host::TableInfo {
    Catalog::read(c)
        .expect("catalog")
        .get("t")
        .expect("t")
        .clone()
}

#[derive(Debug, Clone, Copy)]
enum Program {
    /// `SELECT c2, c3 FROM t WHERE c1 < bound`
    Select,
    /// `SELECT COUNT(*), SUM(c2), MAX(c4) FROM t WHERE c1 < bound`
    Ungrouped,
    /// `SELECT c1, COUNT(*), SUM(c2), MIN(c3) FROM t WHERE c1 < bound GROUP BY c1`:
    /// one group per row, so small arenas overflow and hand groups to the host.
    Grouped,
}

fn plan(c: &mut Client, p: Program, bound: i32) -> Plan {
    let info = table_t(c);
    let s = &info.schema;
    let col = |n: &str| Expr::column(s, s.column_index(n).expect("column")).expect("column");
    let v = Expr::constant(Const::Int(i64::from(bound)), DataType::Int);
    let filter = build::compare(CmpOp::Lt, col("c1"), v, "c1 < bound").expect("predicate");
    let agg = |func, arg: Option<Expr>| Aggregate {
        func,
        arg,
        ty: DataType::Int,
    };
    match p {
        Program::Select => {
            let cols = [
                s.column_index("c2").expect("c2"),
                s.column_index("c3").expect("c3"),
            ];
            Plan::projection("t", s, &cols, Some(filter)).expect("plan")
        }
        Program::Ungrouped => Plan::aggregation(
            "t",
            s,
            Aggregation {
                group_by: vec![],
                aggregates: vec![
                    agg(AggFunc::CountStar, None),
                    agg(AggFunc::Sum, Some(col("c2"))),
                    agg(AggFunc::Max, Some(col("c4"))),
                ],
            },
            Some(filter),
        ),
        Program::Grouped => Plan::aggregation(
            "t",
            s,
            Aggregation {
                group_by: vec![s.column_index("c1").expect("c1")],
                aggregates: vec![
                    agg(AggFunc::CountStar, None),
                    agg(AggFunc::Sum, Some(col("c2"))),
                    agg(AggFunc::Min, Some(col("c3"))),
                ],
            },
            Some(filter),
        ),
    }
}

/// Runs the program on a fresh device with `threads` scan threads: the merged result
/// and the report (wall time cleared).
fn scan(
    cfg: &DeviceConfig,
    layout: Layout,
    strategy: Strategy,
    p: Program,
    bound: i32,
) -> (PartialResult, QueryReport) {
    scan_rows(cfg, layout, strategy, p, bound, ROWS)
}

/// [`scan`] over a table of `rows` rows.
fn scan_rows(
    cfg: &DeviceConfig,
    layout: Layout,
    strategy: Strategy,
    p: Program,
    bound: i32,
    rows: u64,
) -> (PartialResult, QueryReport) {
    let mut c = loaded_rows(cfg, layout, rows);
    scan_on(&mut c, cfg, strategy, (p, bound)).expect("scan")
}

/// Program `p` with `bound` over table `t` of `c`'s device with `strategy`: the merged
/// result and the report (wall time cleared), or the scan's error.
fn scan_on(
    c: &mut Client,
    cfg: &DeviceConfig,
    strategy: Strategy,
    (p, bound): (Program, i32),
) -> Result<(PartialResult, QueryReport), HostError> {
    let pl = plan(c, p, bound);
    let info = table_t(c);
    let mut all = PartialResult::new(&pl);
    let mut rep = run_scan(c, &info, &pl, cfg, &ScanOptions::new(strategy), &mut |ch| {
        all.merge(ch).map_err(|e| HostError::Invalid(e.to_string()))
    })?;
    rep.wall_s = 0.0;
    Ok((all, rep))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, ..ProptestConfig::default() })]

    #[test]
    fn scans_on_several_threads_change_no_result_counter_or_modeled_figure(
        pax in any::<bool>(),
        strategy in prop_oneof![Just(Strategy::Ihp), Just(Strategy::CpuIsp), Just(Strategy::HwIsp)],
        program in prop_oneof![Just(Program::Select), Just(Program::Ungrouped), Just(Program::Grouped)],
        bound in 0i32..(ROWS as i32 + 100),
        small_arena in any::<bool>(),
        threads in 2usize..5,
    ) {
        let guard = Threads::take();
        let layout = if pax { Layout::Pax } else { Layout::Nsm };
        let cfg = if small_arena { config(32, 8, 4) } else { config(1024, 64, 32) };
        guard.set(1);
        let (want, want_rep) = scan(&cfg, layout, strategy, program, bound);
        guard.set(threads);
        let (got, got_rep) = scan(&cfg, layout, strategy, program, bound);
        prop_assert_eq!(&got, &want, "result, {} threads", threads);
        prop_assert_eq!(&got_rep, &want_rep, "report, {} threads", threads);
    }
}

/// In-host processing hands each batch of reads to the pool and takes it when the next
/// batch is full (its payloads then go back to the device for later reads): over a
/// table of several batches (64 pages a thread each; 40,000 rows are 315 pages of
/// `tiny`), results, counters and every modeled figure are one thread's, with a
/// selective and an unselective filter (the pool stops where merging costs what
/// evaluating does).
#[test]
fn in_host_scans_over_many_batches_match_one_thread() {
    let guard = Threads::take();
    let cfg = config(1024, 64, 32);
    let rows = 40_000;
    for program in [Program::Select, Program::Ungrouped, Program::Grouped] {
        for bound in [rows as i32 / 50, rows as i32] {
            guard.set(1);
            let (want, want_rep) =
                scan_rows(&cfg, Layout::Pax, Strategy::Ihp, program, bound, rows);
            assert!(want_rep.pages > 300, "{}", want_rep.pages);
            for threads in [2, 3] {
                guard.set(threads);
                let (got, got_rep) =
                    scan_rows(&cfg, Layout::Pax, Strategy::Ihp, program, bound, rows);
                assert_eq!(got, want, "{program:?} < {bound}, {threads} threads");
                assert_eq!(
                    got_rep, want_rep,
                    "{program:?} < {bound}, {threads} threads"
                );
            }
        }
    }
}

/// A session's table is overwritten between two GETs: pages evaluated ahead before the
/// write must not be used after it (the rows are those one thread sees).
#[test]
fn a_write_during_a_scan_drops_pages_evaluated_ahead() {
    let guard = Threads::take();
    // Few page buffers: the session reads pages one by one, far behind the pages it
    // evaluated ahead.
    let cfg = config(1024, 8, 2);
    let mut results = Vec::new();
    for threads in [1, 2] {
        guard.set(threads);
        let mut c = loaded(&cfg, Layout::Pax);
        let pl = plan(&mut c, Program::Ungrouped, ROWS as i32);
        let info = table_t(&mut c);
        let lpp = info.lbas_per_page(c.identify().lba_size);
        let open = Command::IspOpen(Box::new(IspOpen {
            plan: pl.clone(),
            mode: IspMode::Hw,
            table: TableExtent {
                first_lba: info.first_lba,
                pages: info.pages,
                lbas_per_page: lpp as u32,
            },
            index: None,
        }));
        let Payload::IspSession(id) = c.exec(open).expect("open").payload else {
            panic!("no session")
        };
        let mut out = PartialResult::new(&pl);
        // Let the session run a little, then overwrite, last first, pages it evaluated
        // ahead but has not read yet with its first page (a valid page of the table,
        // other rows).
        let mut written = false;
        loop {
            let Payload::Isp(mut r) = c
                .exec(Command::IspGet { session: id })
                .expect("get")
                .payload
            else {
                panic!("no reply")
            };
            if let Some(ch) = r.chunk.take() {
                out.merge(ch).expect("merge");
            }
            if !written && r.pages_done >= 4 {
                written = true;
                assert!(r.pages_done < 16, "the scan ran too far: {}", r.pages_done);
                let Payload::Data(page0) = c
                    .exec(Command::Read {
                        lba: info.first_lba,
                        blocks: lpp as u32,
                    })
                    .expect("read")
                    .payload
                else {
                    panic!("no data")
                };
                for p in (r.pages_done + 4..info.pages).rev() {
                    let lba = info.first_lba + p * lpp;
                    c.exec(Command::Write {
                        lba,
                        data: page0.clone(),
                    })
                    .expect("write");
                }
            }
            match r.state {
                SessionState::Done if !r.more => break,
                SessionState::Failed(m) => panic!("{m}"),
                _ if !r.more => {
                    let t = c.now().after(2_000);
                    c.wait_until(t);
                }
                _ => {}
            }
        }
        c.exec(Command::IspClose { session: id }).expect("close");
        results.push(out);
    }
    assert_eq!(
        results[0], results[1],
        "rows with 2 threads differ from 1 thread's"
    );
}

/// Flips a bit of byte `byte` of sector `sector` of table page `page` on flash (after a
/// flush, so the page is there).
fn damage(c: &mut Client, info: &csd_host::TableInfo, page: u64, sector: u32, byte: usize) {
    let lpp = info.lbas_per_page(c.identify().lba_size);
    let page_bytes = lpp as usize * c.identify().lba_size as usize;
    let ftl = c.device().block_mut().ftl_mut();
    ftl.flush(csd_sim::SimTime::ZERO).expect("flush");
    let crcs = ftl
        .peek_sector_crcs(info.first_lba + page * lpp, page_bytes)
        .expect("the table page is on flash");
    let (ppa, first) = crcs.place();
    ftl.nand_mut()
        .corrupt(ppa, first + sector, byte, 0x04)
        .expect("corrupt");
}

/// Runs `pl` with cpu-isp on the loaded device: the merged result, or the scan's error.
fn scan_loaded(
    c: &mut Client,
    info: &csd_host::TableInfo,
    pl: &Plan,
    cfg: &DeviceConfig,
) -> Result<PartialResult, HostError> {
    scan_loaded_with(c, info, pl, cfg, Strategy::CpuIsp)
}

/// [`scan_loaded`] with `strategy`.
fn scan_loaded_with(
    c: &mut Client,
    info: &csd_host::TableInfo,
    pl: &Plan,
    cfg: &DeviceConfig,
    strategy: Strategy,
) -> Result<PartialResult, HostError> {
    let mut all = PartialResult::new(pl);
    run_scan(c, info, pl, cfg, &ScanOptions::new(strategy), &mut |ch| {
        all.merge(ch).map_err(|e| HostError::Invalid(e.to_string()))
    })?;
    Ok(all)
}

/// A table page damaged on flash is found by a scan whose look-ahead threads hash the
/// pages they evaluate (`Ftl::note_crcs_matched`) as by a scan on one thread: the session
/// fails naming the page, with any thread count.
#[test]
fn a_damaged_page_fails_the_scan_with_any_thread_count() {
    let guard = Threads::take();
    let cfg = config(1024, 64, 32);
    let mut failures = Vec::new();
    let mut damaged = 0;
    for threads in [1, 2, 3] {
        guard.set(threads);
        let mut c = loaded(&cfg, Layout::Pax);
        let info = table_t(&mut c);
        // Far enough in that the look-ahead has evaluated pages before it.
        damaged = info.pages * 2 / 3;
        damage(&mut c, &info, damaged, 0, 100);
        let pl = plan(&mut c, Program::Ungrouped, ROWS as i32);
        let err =
            scan_loaded(&mut c, &info, &pl, &cfg).expect_err("a damaged page must fail the scan");
        failures.push(err.to_string());
    }
    let want = format!("table page {damaged}: LBA");
    assert!(
        failures[0].contains(&want) && failures[0].contains("unreadable"),
        "{} should name {want}",
        failures[0]
    );
    assert!(failures.iter().all(|f| f == &failures[0]), "{failures:?}");
}

/// A PAX scan hashes only the sectors of each page that hold its program's minipages
/// (`Ftl::read_ref_checking`): damage in a sector holding only columns the program does
/// not read leaves its answer exact, with any thread count, while a program that reads
/// a column of that sector fails naming the page. (Synthetic16 on `tiny`: pages of two
/// 4 KiB sectors, 127 rows of 16 four-byte columns, so c10 to c16 lie in the second.)
#[test]
fn a_scan_checks_the_sectors_its_program_reads() {
    let guard = Threads::take();
    let cfg = config(1024, 64, 32);
    for threads in [1, 2] {
        guard.set(threads);
        let (want, _) = scan(
            &cfg,
            Layout::Pax,
            Strategy::CpuIsp,
            Program::Ungrouped,
            ROWS as i32,
        );
        let mut c = loaded(&cfg, Layout::Pax);
        let info = table_t(&mut c);
        let page_bytes =
            info.lbas_per_page(c.identify().lba_size) as usize * c.identify().lba_size as usize;
        assert_eq!(page_bytes, 8192, "two sectors a page");
        let damaged = info.pages * 2 / 3;
        // Byte 3000 of the second sector: page byte 7096, in c14's minipage.
        damage(&mut c, &info, damaged, 1, 3000);
        let pl = plan(&mut c, Program::Ungrouped, ROWS as i32);
        let got = scan_loaded(&mut c, &info, &pl, &cfg)
            .expect("c1, c2 and c4 lie in the first sector, which is intact");
        assert_eq!(got, want, "{threads} thread(s)");
        // SELECT MAX(c15) reads the damaged sector (its bytes are hashed whole).
        let err = scan_loaded(&mut c, &info, &max_c15(&info), &cfg)
            .expect_err("the damaged sector is read");
        let want_page = format!("table page {damaged}: LBA");
        assert!(
            err.to_string().contains(&want_page),
            "{err} should name {want_page}"
        );
    }
}

/// `SELECT MAX(c15) FROM t`: a program that reads only c15.
fn max_c15(info: &csd_host::TableInfo) -> Plan {
    let s = &info.schema;
    let c15 = Expr::column(s, s.column_index("c15").expect("c15")).expect("c15");
    Plan::aggregation(
        "t",
        s,
        Aggregation {
            group_by: vec![],
            aggregates: vec![Aggregate {
                func: AggFunc::Max,
                arg: Some(c15),
                ty: DataType::Int,
            }],
        },
        None,
    )
}

/// An in-host scan of an image opened read-only leaves its pages in place
/// (`Command::ReadPinned`) and has only the sectors holding its program's minipages
/// hashed (the read's `check`, known from the first page, which is checked whole): damage
/// in a sector holding only columns the program does not read leaves its answer exact
/// (its report too: the check is not modeled), while a program that reads a column of
/// that sector fails naming the damaged LBA. (Pages of two 4 KiB sectors; c10 to c16 in
/// the second.)
#[test]
fn an_in_host_scan_of_an_image_checks_the_sectors_its_program_reads() {
    let guard = Threads::take();
    let cfg = config(1024, 64, 32);
    let (_dir, path) = image_with_t(&cfg, 40_000);
    let program = (Program::Ungrouped, 40_000);
    guard.set(1);
    let (want, want_rep) = scan_image(&path, true, &cfg, program).expect("scan");
    let (damaged, lba) = {
        let mut c = opened(&path, false);
        let info = table_t(&mut c);
        let lpp = info.lbas_per_page(c.identify().lba_size);
        let damaged = info.pages * 2 / 3;
        // Byte 3000 of the second sector: in c14's minipage.
        damage(&mut c, &info, damaged, 1, 3000);
        csd_device::stack::close(c.device().block_mut()).expect("close");
        (damaged, info.first_lba + damaged * lpp + 1)
    };
    for threads in [1, 2] {
        guard.set(threads);
        let (got, got_rep) = scan_image(&path, true, &cfg, program)
            .expect("c1, c2 and c4 lie in the first sector, which is intact");
        assert_eq!(got, want, "{threads} thread(s)");
        assert_eq!(got_rep, want_rep, "{threads} thread(s)");
        let mut c = opened(&path, true);
        let info = table_t(&mut c);
        let err = scan_loaded_with(&mut c, &info, &max_c15(&info), &cfg, Strategy::Ihp)
            .expect_err("the damaged sector is read");
        assert!(
            err.to_string().contains(&format!("LBA {lba}")),
            "{err} should name LBA {lba} of page {damaged}"
        );
    }
}

/// A fresh directory holding an image `t.img` with table `t` (synthetic16, `rows` rows,
/// PAX), closed; the directory (removed when dropped) and the image's path.
fn image_with_t(cfg: &DeviceConfig, rows: u64) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t.img");
    let dev = csd_device::stack::create_image(&path, cfg.clone(), FtlConfig::default())
        .expect("create image");
    let mut c = Client::new(NvmeDevice::from_block(dev)).expect("client");
    load_t(&mut c, Layout::Pax, rows);
    csd_device::stack::close(c.device().block_mut()).expect("close");
    (dir, path)
}

/// The image at `path` opened read-only or read-write.
fn opened(path: &std::path::Path, read_only: bool) -> Client {
    let opts = if read_only {
        csd_device::stack::OpenOptions::read_only()
    } else {
        csd_device::stack::OpenOptions::read_write()
    };
    let (dev, _) = csd_device::stack::open_image(path, &opts).expect("open image");
    Client::new(NvmeDevice::from_block(dev)).expect("client")
}

/// An in-host scan running program `p` with `bound` on the image at `path` opened
/// read-only or read-write: the merged result and the report (wall time cleared), or the
/// scan's error.
fn scan_image(
    path: &std::path::Path,
    read_only: bool,
    cfg: &DeviceConfig,
    (p, bound): (Program, i32),
) -> Result<(PartialResult, QueryReport), HostError> {
    scan_on(&mut opened(path, read_only), cfg, Strategy::Ihp, (p, bound))
}

/// On an image opened read-only an in-host scan's reads leave the pages where the image
/// keeps them (`Command::ReadPinned`) and the host evaluates them there: results,
/// counters and every modeled figure are those of the same scan with copied reads (the
/// image opened read-write), on one to three threads, over many batches.
#[test]
fn in_host_scans_of_a_read_only_image_match_copied_reads() {
    let guard = Threads::take();
    let cfg = config(1024, 64, 32);
    let (_dir, path) = image_with_t(&cfg, 40_000);
    let run = |read_only: bool, p: Program, bound: i32| {
        scan_image(&path, read_only, &cfg, (p, bound)).expect("scan")
    };
    for program in [Program::Select, Program::Ungrouped, Program::Grouped] {
        for bound in [800, 40_000] {
            guard.set(1);
            let (want, want_rep) = run(false, program, bound);
            assert!(want_rep.pages > 300, "{}", want_rep.pages);
            for threads in [1, 2, 3] {
                guard.set(threads);
                let (got, got_rep) = run(true, program, bound);
                assert_eq!(got, want, "{program:?} < {bound}, {threads} threads");
                assert_eq!(
                    got_rep, want_rep,
                    "{program:?} < {bound}, {threads} threads"
                );
            }
        }
    }
}

/// `ReadPinned` is a Read: on an image opened read-only its pages (whole table pages in
/// one flash page) stay in place and read as a Read's bytes, with the same completion
/// and accounting as the same Reads on another read-only opening of the image; on a
/// read-write device it returns a Read's data.
#[test]
fn read_pinned_is_a_read_with_its_pages_left_in_place() {
    let cfg = config(1024, 64, 32);
    let (_dir, path) = image_with_t(&cfg, 12_000);
    let (mut a, mut b) = (opened(&path, true), opened(&path, true));
    // Both devices run the same commands from their opening on.
    let info = table_t(&mut a);
    assert_eq!(table_t(&mut b), info);
    let ls = a.identify().lba_size as u64;
    let unit = info.page_bytes as usize;
    let lpp = (info.page_bytes as u64 / ls).max(1);
    let mdts = a.identify().mdts_blocks as u64;
    let total = info.pages * lpp;
    let mut pinned = 0;
    // Reads of whole table pages from the table's start, of a page, of MDTS, and one
    // starting mid-page (no unit in place: copied).
    let mut lba = info.first_lba;
    let mut k = 0u64;
    while lba < info.first_lba + total {
        let blocks = match k % 3 {
            0 => lpp,
            1 => mdts / lpp * lpp,
            _ => lpp * 3 + 1,
        }
        .min(info.first_lba + total - lba) as u32;
        k += 1;
        let at = a.now().max(b.now());
        let want = a.exec_at(Command::Read { lba, blocks }, at).expect("read");
        let got = b
            .exec_at(
                Command::ReadPinned {
                    lba,
                    blocks,
                    unit,
                    check: u64::MAX,
                },
                at,
            )
            .expect("read pinned");
        assert_eq!(got.acct, want.acct, "LBA {lba} x {blocks}");
        let Payload::Data(data) = want.payload else {
            panic!("a Read returns data");
        };
        match got.payload {
            Payload::Pinned(p) => {
                pinned += p.pinned();
                assert_eq!(p.units() * p.unit(), data.len());
                let same = PinnedRead::read_all(&[&p], |units| {
                    units
                        .iter()
                        .zip(data.chunks_exact(unit))
                        .all(|(u, d)| *u == d)
                });
                assert_eq!(same, Some(true), "LBA {lba} x {blocks}");
            }
            Payload::Data(d) => assert_eq!(d, data, "LBA {lba} x {blocks}"),
            other => panic!("ReadPinned returned {other:?}"),
        }
        lba += blocks as u64;
    }
    assert!(
        pinned as u64 > info.pages / 2,
        "{pinned} of {} pages in place",
        info.pages
    );
    // Read-write (the read-only openings closed first): a Read's data.
    drop((a, b));
    let mut w = opened(&path, false);
    let got = w
        .exec(Command::ReadPinned {
            lba: info.first_lba,
            blocks: lpp as u32,
            unit,
            check: u64::MAX,
        })
        .expect("read pinned");
    assert!(matches!(got.payload, Payload::Data(ref d) if d.len() == unit));
}

/// An image of 40,000 rows of table `t`, with page `pages * 2 / 3` (far enough in that the
/// pool has evaluated batches before it) damaged at byte 100 of its first sector, in c1's
/// minipage, which the test programs read: the directory, the image, the table and the
/// page.
fn damaged_image(
    cfg: &DeviceConfig,
) -> (
    tempfile::TempDir,
    std::path::PathBuf,
    csd_host::TableInfo,
    u64,
) {
    let (dir, path) = image_with_t(cfg, 40_000);
    let mut c = opened(&path, false);
    let info = table_t(&mut c);
    let damaged = info.pages * 2 / 3;
    damage(&mut c, &info, damaged, 0, 100);
    csd_device::stack::close(c.device().block_mut()).expect("close");
    (dir, path, info, damaged)
}

/// `ReadPinned` reads of whole pages of `info`: the unit in bytes, the LBAs per page and
/// the LBAs per read (whole pages up to MDTS).
fn pinned_reads(c: &mut Client, info: &csd_host::TableInfo) -> (usize, u64, u64) {
    let lpp = info.lbas_per_page(c.identify().lba_size).max(1);
    let per_read = c.identify().mdts_blocks as u64 / lpp * lpp;
    (info.page_bytes as usize, lpp, per_read)
}

/// A table page damaged in an image is found by an in-host scan of the image opened
/// read-only, whose reads leave the pages in place (`Command::ReadPinned`, the sectors the
/// program reads checked where they lie): the scan fails as the same scan of the image
/// opened read-write (copied reads, checked whole) does, with any thread count. (Damage
/// in a sector the program does not read: `an_in_host_scan_of_an_image_checks_the_sectors_its_program_reads`.)
#[test]
fn a_damaged_page_fails_an_in_host_scan_of_a_read_only_image() {
    let guard = Threads::take();
    let cfg = config(1024, 64, 32);
    let (_dir, path, _, damaged) = damaged_image(&cfg);
    let run = |read_only: bool| {
        scan_image(&path, read_only, &cfg, (Program::Ungrouped, 40_000))
            .map(|_| ())
            .expect_err("a damaged page must fail the scan")
            .to_string()
    };
    guard.set(1);
    let want = run(false);
    assert!(want.contains("Read"), "{want}");
    for threads in [1, 2, 3] {
        guard.set(threads);
        assert_eq!(run(true), want, "{threads} threads, page {damaged}");
    }
}

/// A stream of `ReadPinned` reads (an in-host scan of an image opened read-only) has the
/// CRCs of the units it reads next hashed on the pool, ahead of the reads, when scans
/// have more than one thread (`NvmeDevice::crc_checks_ahead`), and on none with one: the
/// reads' completions, accounting and bytes are the same either way, and a unit damaged
/// in a sector the reads check fails its read naming its LBA, though the pool hashed it
/// first. The reads after it go on.
#[test]
fn read_pinned_streams_have_their_crcs_hashed_ahead() {
    let guard = Threads::take();
    let cfg = config(1024, 64, 32);
    let (_dir, path, info, damaged) = damaged_image(&cfg);
    guard.set(1);
    let mut one = opened(&path, true);
    guard.set(2);
    let mut two = opened(&path, true);
    assert_eq!(table_t(&mut one), info);
    assert_eq!(table_t(&mut two), info);
    let (unit, lpp, per_read) = pinned_reads(&mut one, &info);
    let damaged_lba = info.first_lba + damaged * lpp;
    let end = info.first_lba + info.pages * lpp;
    let (mut lba, mut failed) = (info.first_lba, Vec::new());
    while lba < end {
        let blocks = per_read.min(end - lba) as u32;
        let cmd = Command::ReadPinned {
            lba,
            blocks,
            unit,
            check: u64::MAX,
        };
        let at = one.now().max(two.now());
        two.device().settle_crc_ahead();
        match (one.exec_at(cmd.clone(), at), two.exec_at(cmd, at)) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a.acct, b.acct, "LBA {lba}");
                let (Payload::Pinned(a), Payload::Pinned(b)) = (a.payload, b.payload) else {
                    panic!("whole table pages stay in place on a read-only image");
                };
                let same = PinnedRead::read_all(&[&a, &b], |u| {
                    let (x, y) = u.split_at(u.len() / 2);
                    x == y
                });
                assert_eq!(same, Some(true), "LBA {lba}");
            }
            (Err(a), Err(b)) => {
                assert_eq!(a.to_string(), b.to_string());
                failed.push(a.to_string());
            }
            (a, b) => panic!("LBA {lba}: one thread {a:?}, two threads {b:?}"),
        }
        lba += blocks as u64;
    }
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(
        failed[0].contains(&format!("LBA {damaged_lba}")),
        "{} should name LBA {damaged_lba}",
        failed[0]
    );
    assert_eq!(one.device().crc_checks_ahead(), 0);
    // Every unit but the first read's (the stream starts there) and the damaged one's.
    let ahead = two.device().crc_checks_ahead();
    let want = info.pages - per_read / lpp - 1;
    assert!(
        ahead >= want * 9 / 10,
        "{ahead} of {want} units hashed ahead"
    );
}

/// A stream of `ReadPinned` reads that breaks off drops the windows it had submitted to
/// the pool, and the pool hashes none of their units it had not started
/// (`NvmeDevice::crc_units_hashed_ahead`): the pool is held while the stream starts and
/// jumps, so every unit it hashes after is one of the new stream's windows.
#[test]
fn a_broken_read_pinned_stream_stops_hashing_its_windows() {
    use std::sync::{Arc, Barrier, RwLock};
    let guard = Threads::take();
    let cfg = config(1024, 64, 32);
    let (_dir, path) = image_with_t(&cfg, 40_000);
    guard.set(2);
    let mut c = opened(&path, true);
    let info = table_t(&mut c);
    let (unit, lpp, per_read) = pinned_reads(&mut c, &info);
    let far = info.first_lba + info.pages / 4 * lpp;
    let after = info.pages - (far + per_read - info.first_lba) / lpp;
    // The new stream's two windows: 32 and 64 units (`FIRST_CRC_WINDOW`, doubled).
    assert!(
        after >= 96,
        "{after} units after the jump: make the table larger"
    );
    let read = |c: &mut Client, lba: u64| {
        let cmd = Command::ReadPinned {
            lba,
            blocks: per_read as u32,
            unit,
            check: u64::MAX,
        };
        let at = c.now();
        c.exec_at(cmd, at).map(|_| ()).expect("read")
    };
    // Every pool thread waits on `hold` until the jump is made.
    let hold = Arc::new(RwLock::new(()));
    let held = hold.write().unwrap_or_else(PoisonError::into_inner);
    let n = rayon::current_num_threads();
    let started = Arc::new(Barrier::new(n + 1));
    for _ in 0..n {
        let (hold, started) = (Arc::clone(&hold), Arc::clone(&started));
        rayon::spawn(move || {
            started.wait();
            drop(hold.read());
        });
    }
    started.wait();
    read(&mut c, info.first_lba);
    read(&mut c, far);
    drop(held);
    c.device().settle_crc_ahead();
    let want = 96;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while c.device().crc_units_hashed_ahead() < want && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // Time for the pool to run the dropped windows' jobs, spawned before the new ones.
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(c.device().crc_units_hashed_ahead(), want);
    // The new stream goes on and takes what was hashed for it.
    read(&mut c, far + per_read);
    assert_eq!(c.device().crc_checks_ahead(), (per_read / lpp).min(96));
}
