//! Device programs over tables stored on an emulated device, three ways (IHP,
//! embedded-CPU ISP, hardware ISP): the papers' orderings of the strategies, and the
//! OPEN/GET/CLOSE session protocol (smart-ssd-query-processing §3.1). Results of SQL
//! through every strategy and layout are checked in csd-sql's tests, which run the same
//! scans from DataFusion.

use csd_device::{
    Command, IspMode, IspOpen, NvmeDevice, Payload, SessionState, Status, TableExtent,
};
use csd_ftl::{Ftl, FtlConfig};
use csd_host::{
    Catalog, Client, CommandIssuer, HostError, QueryReport, ScanOptions, StageName, Strategy,
    TableInfo, run_scan,
};
use csd_nand::Nand;
use csd_query::build;
use csd_query::{
    AccView, AggFunc, Aggregate, Aggregation, CmpOp, Const, DataType, Expr, PartialResult, Plan,
};
use csd_sim::DeviceConfig;
use csd_table::Layout;
use csd_table::datagen::{RowSource, SyntheticGenerator, SyntheticSpec};

fn config(overrides: &[&str]) -> DeviceConfig {
    let text = DeviceConfig::preset_toml("tiny").expect("tiny");
    let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    DeviceConfig::from_toml_with_overrides(text, &o).expect("config")
}

fn client(cfg: DeviceConfig) -> Client {
    let nand = Nand::new_in_memory(cfg).expect("nand");
    let ftl = Ftl::format(nand, FtlConfig::default()).expect("format");
    Client::new(NvmeDevice::new(ftl)).expect("client")
}

const ROWS: u64 = 20_000;

fn load_synthetic(c: &mut Client, name: &str, layout: Layout) {
    let spec = SyntheticSpec::synthetic16(ROWS, 7).expect("spec");
    Catalog::load(
        c,
        name,
        SyntheticGenerator::new(spec).expect("gen"),
        layout,
        &mut |_| {},
    )
    .expect("load");
}

/// Every row of the synthetic table as i32 columns, straight from the generator.
fn synthetic_rows() -> Vec<Vec<i32>> {
    let spec = SyntheticSpec::synthetic16(ROWS, 7).expect("spec");
    let mut g = SyntheticGenerator::new(spec).expect("gen");
    let schema = g.schema().clone();
    let mut row = Vec::new();
    let mut out = Vec::new();
    while g.next_row(&mut row) {
        out.push(
            schema
                .offsets()
                .iter()
                .map(|&o| i32::from_le_bytes(row[o..o + 4].try_into().expect("4 bytes")))
                .collect(),
        );
    }
    out
}

fn table(c: &mut Client, name: &str) -> TableInfo {
    Catalog::read(c)
        .expect("catalog")
        .get(name)
        .expect("table")
        .clone()
}

/// Column `name` of `info`'s schema.
fn col(info: &TableInfo, name: &str) -> Expr {
    let i = info.schema.column_index(name).expect("column");
    Expr::column(&info.schema, i).expect("column")
}

/// `c1 < bound`.
fn c1_below(info: &TableInfo, bound: i32) -> Expr {
    let v = Expr::constant(Const::Int(i64::from(bound)), DataType::Int);
    build::compare(CmpOp::Lt, col(info, "c1"), v, "c1 < bound").expect("predicate")
}

/// The smart-ssd paper's selection: `SELECT c2 FROM t WHERE c1 < bound`.
fn selection(info: &TableInfo, bound: i32) -> Plan {
    let c2 = info.schema.column_index("c2").expect("c2");
    Plan::projection(&info.name, &info.schema, &[c2], Some(c1_below(info, bound))).expect("plan")
}

/// `SELECT COUNT(*), SUM(c2) FROM t WHERE c1 < bound` as a device partial aggregation.
fn count_sum(info: &TableInfo, bound: i32) -> Plan {
    let agg = Aggregation {
        group_by: vec![],
        aggregates: vec![
            Aggregate {
                func: AggFunc::CountStar,
                arg: None,
                ty: DataType::Int,
            },
            Aggregate {
                func: AggFunc::Sum,
                arg: Some(col(info, "c2")),
                ty: DataType::Int,
            },
        ],
    };
    Plan::aggregation(&info.name, &info.schema, agg, Some(c1_below(info, bound)))
}

/// Runs `p` over `info` with `opts`; the merged partial result and the report.
fn run<C: CommandIssuer>(
    c: &mut C,
    info: &TableInfo,
    p: &Plan,
    cfg: &DeviceConfig,
    opts: &ScanOptions,
) -> (PartialResult, QueryReport) {
    let mut all = PartialResult::new(p);
    let rep = run_scan(c, info, p, cfg, opts, &mut |chunk| {
        all.merge(chunk)
            .map_err(|e| HostError::Invalid(e.to_string()))
    })
    .expect("scan");
    (all, rep)
}

/// `COUNT(*)` and `SUM(c2)` of a merged [`count_sum`] result.
fn count_and_sum(r: &PartialResult) -> (u64, i128) {
    let PartialResult::Aggregate(st) = r else {
        panic!("not an aggregation")
    };
    let Some(AccView::Sum(sum)) = st.accumulator(1) else {
        panic!("no sum")
    };
    (st.group_rows()[0], sum[0])
}

#[test]
fn every_strategy_and_layout_returns_the_reference_rows() {
    let cfg = config(&[]);
    let mut c = client(cfg.clone());
    load_synthetic(&mut c, "nsm", Layout::Nsm);
    load_synthetic(&mut c, "pax", Layout::Pax);
    let rows = synthetic_rows();
    let v = 2_000; // c1 is a permutation of 0..ROWS: c1 < 2000 selects exactly 10%
    let want_sum: i128 = rows
        .iter()
        .filter(|r| r[0] < v)
        .map(|r| i128::from(r[1]))
        .sum();
    for name in ["nsm", "pax"] {
        let info = table(&mut c, name);
        for s in Strategy::ALL {
            let (r, rep) = run(
                &mut c,
                &info,
                &selection(&info, v),
                &cfg,
                &ScanOptions::new(s),
            );
            let PartialResult::Rows(chunk) = &r else {
                panic!("rows")
            };
            assert_eq!(chunk.len(), v as usize, "{name} {s:?}");
            assert_eq!(rep.result_rows, v as u64);
            assert_eq!(rep.pages, info.pages);
            assert_eq!(
                rep.work.records_examined, info.rows,
                "{s:?} examined every row"
            );
            assert!(rep.modeled_ns > 0 && rep.energy.total_j() > 0.0);
            let (r, _) = run(
                &mut c,
                &info,
                &count_sum(&info, v),
                &cfg,
                &ScanOptions::new(s),
            );
            assert_eq!(count_and_sum(&r), (v as u64, want_sum), "{name} {s:?}");
        }
    }
}

#[test]
fn isp_beats_ihp_where_the_link_is_the_bottleneck_and_pax_beats_nsm_on_cpu() {
    // A slow link (50 MB/s) and a slow embedded CPU make the papers' orderings visible.
    let cfg = config(&[
        "host_link.bandwidth_mb_s=50",
        "cpu.clock_mhz=100",
        "cpu.cores=1",
    ]);
    let mut c = client(cfg.clone());
    load_synthetic(&mut c, "nsm", Layout::Nsm);
    load_synthetic(&mut c, "pax", Layout::Pax);
    let mut t = std::collections::HashMap::new();
    for name in ["nsm", "pax"] {
        let info = table(&mut c, name);
        let p = selection(&info, 20);
        for s in Strategy::ALL {
            let (_, rep) = run(&mut c, &info, &p, &cfg, &ScanOptions::new(s));
            t.insert((name, s), rep);
        }
    }
    let ihp = &t[&("pax", Strategy::Ihp)];
    let hw = &t[&("pax", Strategy::HwIsp)];
    assert_eq!(ihp.bottleneck, Some(StageName::DramToHost), "{ihp:?}");
    assert!(
        hw.modeled_ns * 3 < ihp.modeled_ns,
        "hw {} vs ihp {}",
        hw.modeled_ns,
        ihp.modeled_ns
    );
    assert!(hw.host_link_bytes * 20 < ihp.host_link_bytes);
    assert_eq!(hw.device_cpu_cycles, 0, "hardware ISP spends no CPU");
    let nsm = &t[&("nsm", Strategy::CpuIsp)];
    let pax = &t[&("pax", Strategy::CpuIsp)];
    assert!(
        nsm.device_cpu_cycles > pax.device_cpu_cycles,
        "NSM pays a DRAM access per value"
    );
    assert!(
        pax.modeled_ns < nsm.modeled_ns,
        "pax {} nsm {}",
        pax.modeled_ns,
        nsm.modeled_ns
    );
}

#[test]
fn hardware_isp_aggregates_in_the_flash_controller() {
    // Scan paper Figure 3: the FMC's aggregation logic folds the matching records as they
    // stream by; only the aggregate crosses the link, and the host folds nothing.
    let cfg = config(&[]);
    let mut c = client(cfg.clone());
    load_synthetic(&mut c, "pax", Layout::Pax);
    let info = table(&mut c, "pax");
    let v = 2_000; // 10% of the rows
    let opts = ScanOptions::new(Strategy::HwIsp);
    let (_, proj) = run(&mut c, &info, &selection(&info, v), &cfg, &opts);
    let (r, agg) = run(&mut c, &info, &count_sum(&info, v), &cfg, &opts);
    assert_eq!(count_and_sum(&r).0, v as u64);
    // The projection sends the 2,000 matching 64-byte records; the aggregation its
    // state (plus the OPEN, GET and CLOSE commands themselves).
    assert!(
        proj.host_link_bytes > 2_000 * 64,
        "{}",
        proj.host_link_bytes
    );
    assert!(
        agg.host_link_bytes < 8 * 1024,
        "aggregation sent {} bytes",
        agg.host_link_bytes
    );
    assert_eq!(agg.host_cpu_cycles, 0, "the host folds nothing");
    assert!(
        proj.host_cpu_cycles > 0,
        "the host folds the projection's records"
    );
    assert_eq!(agg.device_cpu_cycles, 0, "hardware, not the embedded cores");
    // An ungrouped aggregate's accumulators are registers: no record reaches DRAM.
    assert!(
        agg.dram_bytes + 2_000 * 64 <= proj.dram_bytes,
        "agg {} proj {}",
        agg.dram_bytes,
        proj.dram_bytes
    );
}

// ------------------------------------------------------------------ session protocol

/// OPEN of [`selection`]`(bound)` over `name`.
fn open_cmd(c: &mut Client, name: &str, bound: i32, mode: IspMode) -> Command {
    let info = table(c, name);
    let lpp = info.lbas_per_page(c.identify().lba_size) as u32;
    Command::IspOpen(Box::new(IspOpen {
        plan: selection(&info, bound),
        mode,
        table: TableExtent {
            first_lba: info.first_lba,
            pages: info.pages,
            lbas_per_page: lpp,
        },
        index: None,
    }))
}

fn open(c: &mut Client, cmd: Command) -> Result<u32, HostError> {
    match c.exec(cmd)?.payload {
        Payload::IspSession(id) => Ok(id),
        p => panic!("expected a session, got {p:?}"),
    }
}

fn open_sel(c: &mut Client, name: &str, bound: i32, mode: IspMode) -> Result<u32, HostError> {
    let cmd = open_cmd(c, name, bound, mode);
    open(c, cmd)
}

fn status_of(r: Result<impl std::fmt::Debug, HostError>) -> Status {
    match r {
        Err(HostError::Device { status, .. }) => status,
        other => panic!("expected a device error, got {other:?}"),
    }
}

/// Poll a session of [`selection`]`(bound)` over `name` to the end; returns the merged
/// result's row count.
fn drain(c: &mut Client, id: u32, name: &str, bound: i32) -> usize {
    let p = selection(&table(c, name), bound);
    drain_rest(c, id, PartialResult::new(&p))
}

#[test]
fn sessions_exhaust_recycle_and_reject_unknown_ids() {
    let mut c = client(config(&["isp.max_sessions=2"]));
    load_synthetic(&mut c, "t", Layout::Pax);
    let a = open_sel(&mut c, "t", 100, IspMode::Cpu).expect("a");
    let b = open_sel(&mut c, "t", 100, IspMode::Hw).expect("b");
    assert_ne!(a, b);
    let cmd = open_cmd(&mut c, "t", 100, IspMode::Cpu);
    let st = status_of(open(&mut c, cmd));
    assert!(matches!(st, Status::SessionResources(_)), "{st}");
    assert!(st.to_string().contains("CLOSE"), "actionable: {st}");
    // Unknown and never-opened ids.
    for bad in [0, 3, 99] {
        let st = status_of(c.exec(Command::IspGet { session: bad }));
        assert!(matches!(st, Status::InvalidSession(_)), "{st}");
        let st = status_of(c.exec(Command::IspClose { session: bad }));
        assert!(matches!(st, Status::InvalidSession(_)), "{st}");
    }
    // Concurrent sessions both finish with the right answer.
    assert_eq!(drain(&mut c, a, "t", 100), 100);
    assert_eq!(drain(&mut c, b, "t", 100), 100);
    // CLOSE frees; a closed id is invalid, then recycled by the next OPEN.
    c.exec(Command::IspClose { session: a }).expect("close a");
    let st = status_of(c.exec(Command::IspGet { session: a }));
    assert!(matches!(st, Status::InvalidSession(_)));
    let a2 = open_sel(&mut c, "t", 100, IspMode::Cpu).expect("reopen");
    assert_eq!(a2, a, "the smallest free id is reused");
    assert_eq!(drain(&mut c, a2, "t", 100), 100);
    c.exec(Command::IspClose { session: a2 }).expect("close");
    c.exec(Command::IspClose { session: b }).expect("close");
}

#[test]
fn close_while_running_and_pinned_buffer_exhaustion() {
    // 8 KiB pages, 1 MiB of runtime DRAM = 128 buffers; 100 per session.
    let mut c = client(config(&[
        "isp.runtime_dram_mib=1",
        "isp.max_pinned_pages=100",
    ]));
    load_synthetic(&mut c, "t", Layout::Nsm);
    let a = open_sel(&mut c, "t", 19_000, IspMode::Cpu).expect("a");
    // 28 buffers are left: the next session still opens with fewer buffers…
    let b = open_sel(&mut c, "t", 19_000, IspMode::Cpu).expect("b");
    // …and then none are left.
    let cmd = open_cmd(&mut c, "t", 19_000, IspMode::Cpu);
    let st = status_of(open(&mut c, cmd));
    assert!(
        matches!(st, Status::SessionResources(ref m) if m.contains("pinned")),
        "{st}"
    );
    // CLOSE while running: the first GET sees it running; CLOSE stops it.
    let Payload::Isp(r) = c.exec(Command::IspGet { session: a }).expect("get").payload else {
        panic!()
    };
    assert_eq!(r.state, SessionState::Running);
    let Payload::Isp(r) = c
        .exec(Command::IspClose { session: a })
        .expect("close")
        .payload
    else {
        panic!()
    };
    assert!(r.pages_done < r.pages_total, "closed mid-scan");
    // Its buffers are back: a new session opens and the other still completes.
    let a2 = open_sel(&mut c, "t", 19_000, IspMode::Cpu).expect("a2");
    assert_eq!(drain(&mut c, b, "t", 19_000), 19_000);
    assert_eq!(drain(&mut c, a2, "t", 19_000), 19_000);
}

#[test]
fn bad_open_parameters_are_refused_and_change_nothing() {
    let mut c = client(config(&["isp.max_sessions=1"]));
    load_synthetic(&mut c, "t", Layout::Pax);
    let lbas = c.identify().lbas;
    let mutate = |c: &mut Client, f: &dyn Fn(&mut TableExtent)| {
        let Command::IspOpen(mut o) = open_cmd(c, "t", 100, IspMode::Cpu) else {
            unreachable!()
        };
        f(&mut o.table);
        Command::IspOpen(o)
    };
    for f in [
        &(|t: &mut TableExtent| t.lbas_per_page = 1) as &dyn Fn(&mut TableExtent),
        &|t: &mut TableExtent| t.first_lba = lbas - 1,
        &|t: &mut TableExtent| t.pages = u64::MAX,
    ] {
        let cmd = mutate(&mut c, f);
        let st = status_of(open(&mut c, cmd));
        assert!(matches!(st, Status::InvalidField(_)), "{st}");
    }
    // Nothing was taken: the one session slot is still free.
    let id = open_sel(&mut c, "t", 100, IspMode::Cpu).expect("open");
    assert_eq!(drain(&mut c, id, "t", 100), 100);
    // A session over pages of another table fails cleanly with a message.
    let spec = SyntheticSpec::synthetic4(1_000, 1).expect("spec");
    Catalog::load(
        &mut c,
        "u",
        SyntheticGenerator::new(spec).expect("gen"),
        Layout::Nsm,
        &mut |_| {},
    )
    .expect("load");
    c.exec(Command::IspClose { session: id }).expect("close");
    let u = table(&mut c, "u");
    let Command::IspOpen(mut o) = open_cmd(&mut c, "t", 100, IspMode::Cpu) else {
        unreachable!()
    };
    o.table.first_lba = u.first_lba;
    let id = open(&mut c, Command::IspOpen(o)).expect("opens");
    let t = c.now().after(1_000_000_000);
    c.wait_until(t);
    let Payload::Isp(r) = c
        .exec(Command::IspGet { session: id })
        .expect("get")
        .payload
    else {
        panic!()
    };
    match r.state {
        SessionState::Failed(m) => assert!(m.contains("not a page of"), "{m}"),
        s => panic!("expected failure, got {s:?}"),
    }
}

#[test]
fn sessions_from_concurrent_host_threads_share_the_device() {
    use csd_host::SharedDevice;
    use csd_sim::ClockMode;
    let cfg = config(&[]);
    let mut c = client(cfg.clone());
    load_synthetic(&mut c, "nsm", Layout::Nsm);
    load_synthetic(&mut c, "pax", Layout::Pax);
    let infos = [table(&mut c, "nsm"), table(&mut c, "pax")];
    let shared = SharedDevice::new(c.into_device(), ClockMode::Virtual).expect("share");
    let rows = synthetic_rows();
    std::thread::scope(|s| {
        for i in 0..4 {
            let (shared, info, cfg, rows) = (shared.clone(), &infos[i % 2], &cfg, &rows);
            s.spawn(move || {
                let mut h = shared.handle().expect("handle");
                let v = 1_000 * (i as i32 + 1);
                let strategy = Strategy::ALL[i % 3];
                let (r, _) = run(
                    &mut h,
                    info,
                    &count_sum(info, v),
                    cfg,
                    &ScanOptions::new(strategy),
                );
                let want: i128 = rows.iter().filter(|r| r[0] < v).map(|r| r[1] as i128).sum();
                assert_eq!(
                    count_and_sum(&r),
                    (v as u64, want),
                    "{} {strategy:?}",
                    info.name
                );
            });
        }
    });
}

// ------------------------------------------------------- session protocol, model-based

/// One step of a random session workload.
#[derive(Debug, Clone)]
enum SessionOp {
    /// OPEN a scan with `c1 < bound` in the given mode.
    Open { bound: i32, hw: bool },
    /// GET on id `k` of 0..=4 (ids start at 1; open or not).
    Get(u32),
    /// CLOSE on id `k` of 0..=4 (open or not).
    Close(u32),
    /// Let modeled time pass (µs), so running sessions make progress.
    Wait(u64),
}

fn session_op() -> impl proptest::strategy::Strategy<Value = SessionOp> {
    use proptest::prelude::*;
    prop_oneof![
        3 => (0..ROWS as i32, any::<bool>()).prop_map(|(bound, hw)| SessionOp::Open { bound, hw }),
        5 => (0..5u32).prop_map(SessionOp::Get),
        2 => (0..5u32).prop_map(SessionOp::Close),
        2 => (1..20_000u64).prop_map(SessionOp::Wait),
    ]
}

/// The reference: which ids are open, what each one's query must return, and what
/// its GETs returned so far.
struct ModelSession {
    bound: i32,
    want_rows: usize,
    got: PartialResult,
    finished: bool,
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

    /// Random OPEN / GET / CLOSE / wait sequences against a reference of the protocol:
    /// OPEN succeeds exactly when fewer than `max_sessions` are open and returns the
    /// smallest free id; GET and CLOSE of an id that is not open are `InvalidSession`
    /// and change nothing; a session that reports `Done` with nothing more has returned
    /// exactly the rows of its query; after CLOSE the id is invalid until reopened.
    #[test]
    fn sessions_follow_the_protocol_under_random_use(
        ops in proptest::collection::vec(session_op(), 1..40)
    ) {
        const MAX: u32 = 3;
        let mut c = client(config(&["isp.max_sessions=3"]));
        load_synthetic(&mut c, "t", Layout::Pax);
        let mut open_ids: std::collections::BTreeMap<u32, ModelSession> = Default::default();
        for op in ops {
            match op {
                SessionOp::Open { bound, hw } => {
                    let mode = if hw { IspMode::Hw } else { IspMode::Cpu };
                    let cmd = open_cmd(&mut c, "t", bound, mode);
                    let r = c.exec(cmd);
                    if open_ids.len() < MAX as usize {
                        let Ok(done) = r else { panic!("OPEN refused with {} open: {r:?}", open_ids.len()) };
                        let Payload::IspSession(id) = done.payload else { panic!("no id") };
                        let smallest = (1..).find(|i| !open_ids.contains_key(i)).expect("free id");
                        proptest::prop_assert_eq!(id, smallest);
                        let p = selection(&table(&mut c, "t"), bound);
                        open_ids.insert(id, ModelSession {
                            bound,
                            want_rows: bound as usize,
                            got: PartialResult::new(&p),
                            finished: false,
                        });
                    } else {
                        let st = status_of(r);
                        proptest::prop_assert!(matches!(st, Status::SessionResources(_)), "{}", st);
                    }
                }
                SessionOp::Get(id) => {
                    let r = c.exec(Command::IspGet { session: id });
                    match open_ids.get_mut(&id) {
                        None => {
                            let st = status_of(r);
                            proptest::prop_assert!(matches!(st, Status::InvalidSession(_)), "{}", st);
                        }
                        Some(m) => {
                            let Payload::Isp(mut rep) = r.expect("get").payload else { panic!("no reply") };
                            proptest::prop_assert!(!m.finished || rep.chunk.is_none(), "chunk after the end");
                            if let Some(ch) = rep.chunk.take() {
                                m.got.merge(ch).expect("merge");
                            }
                            match rep.state {
                                SessionState::Failed(e) => panic!("c1 < {}: {e}", m.bound),
                                SessionState::Done if !rep.more && !m.finished => {
                                    m.finished = true;
                                    proptest::prop_assert_eq!(m.got.len(), m.want_rows, "c1 < {}", m.bound);
                                }
                                _ => {}
                            }
                        }
                    }
                }
                SessionOp::Close(id) => {
                    let r = c.exec(Command::IspClose { session: id });
                    if open_ids.remove(&id).is_some() {
                        let Payload::Isp(rep) = r.expect("close").payload else { panic!("no reply") };
                        proptest::prop_assert!(rep.pages_done <= rep.pages_total);
                    } else {
                        let st = status_of(r);
                        proptest::prop_assert!(matches!(st, Status::InvalidSession(_)), "{}", st);
                    }
                }
                SessionOp::Wait(us) => {
                    let t = c.now().after(us * 1000);
                    c.wait_until(t);
                }
            }
        }
        // Every session still open runs to its exact answer, then closes.
        let ids: Vec<u32> = open_ids.keys().copied().collect();
        for id in ids {
            let m = open_ids.remove(&id).expect("open");
            if !m.finished {
                proptest::prop_assert_eq!(drain_rest(&mut c, id, m.got), m.want_rows, "c1 < {}", m.bound);
            }
            c.exec(Command::IspClose { session: id }).expect("close");
        }
    }
}

/// Poll `id` to the end, merging into what earlier GETs returned; the row count.
fn drain_rest(c: &mut Client, id: u32, mut out: PartialResult) -> usize {
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
        match r.state {
            SessionState::Done if !r.more => break,
            SessionState::Failed(m) => panic!("{m}"),
            _ => {
                if !r.more {
                    let t = c.now().after(100_000);
                    c.wait_until(t);
                }
            }
        }
    }
    out.len()
}

/// ISP GET judges what is ready once the firmware has the command: the session's steps
/// issued by then have run. Two devices differ only in the per-command latency of their
/// transport (20 ms, or none); each OPEN and GET is decided at the same instant on both
/// (sent 20 ms earlier to the slow one), so both GETs see the same progress. A third
/// GET, decided 1 ms earlier, shows the session still moving then (else the test would
/// prove nothing). Before the fix the slow device's GET saw the session as it stood when
/// the GET was sent: no page done.
#[test]
fn a_get_sees_the_steps_issued_by_the_time_it_is_received() {
    use csd_sim::SimTime;
    const LATENCY_NS: u64 = 20_000_000;
    let device = |latency_us: u64| {
        let mut c = client(config(&[
            "host_link.command_overhead_us=0",
            &format!("host_link.command_latency_us={latency_us}"),
        ]));
        load_synthetic(&mut c, "t", Layout::Pax);
        c
    };
    // Long after the load, on idle devices holding the same pages.
    let t_open = SimTime::from_ns(1_000_000_000_000);
    let get_at = t_open.after(3_000_000);
    // (device, how much earlier than the decision instant its commands are sent, how
    // much earlier its GET is decided).
    let runs = [
        (device(LATENCY_NS / 1000), LATENCY_NS, 0),
        (device(0), 0, 0),
        (device(0), 0, 1_000_000),
    ];
    let mut replies = Vec::new();
    for (mut c, early, earlier_get) in runs {
        // An aggregation: its one state never fills the arena, so the session never
        // stalls waiting for a GET.
        let mut cmd = open_cmd(&mut c, "t", 19_000, IspMode::Cpu);
        if let Command::IspOpen(o) = &mut cmd {
            o.plan = count_sum(&table(&mut c, "t"), 19_000);
        }
        let id = match c
            .exec_at(cmd, SimTime::from_ns(t_open.ns() + LATENCY_NS - early))
            .expect("open")
            .payload
        {
            Payload::IspSession(id) => id,
            p => panic!("expected a session, got {p:?}"),
        };
        let got = c
            .exec_at(
                Command::IspGet { session: id },
                SimTime::from_ns(get_at.ns() + LATENCY_NS - early - earlier_get),
            )
            .expect("get");
        let Payload::Isp(r) = got.payload else {
            panic!("expected a GET reply");
        };
        replies.push((r.pages_done, r.pages_total, r.state));
    }
    assert!(
        replies[2].0 < replies[1].0,
        "the session is still running at the GETs: {replies:?}"
    );
    assert_eq!(
        replies[0], replies[1],
        "the slow device's GET saw the session as it stood when the GET was received"
    );
}
