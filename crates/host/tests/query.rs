//! Queries over tables stored on an emulated device, three ways (IHP, embedded-CPU ISP,
//! hardware ISP) and two layouts: identical results, equal to references computed here
//! straight from the generators' rows; and the OPEN/GET/CLOSE session protocol.

use csd_device::{
    Command, IspMode, IspOpen, NvmeDevice, Payload, SessionState, Status, TableExtent,
};
use csd_ftl::{Ftl, FtlConfig};
use csd_host::{Catalog, Client, CommandIssuer, HostError, ScanOptions, Strategy, run_query};
use csd_nand::Nand;
use csd_query::{Value, plan};
use csd_sim::DeviceConfig;
use csd_table::Layout;
use csd_table::datagen::{RowSource, SyntheticGenerator, SyntheticSpec, TpchGenerator, TpchTable};
use csd_table::date::parse_date;

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

fn run_all(c: &mut Client, table: &str, sql: &str) -> Vec<(Strategy, csd_query::QueryResult)> {
    let cfg = config(&[]);
    let cat = Catalog::read(c).expect("catalog");
    let info = cat.get(table).expect("table").clone();
    let p = plan(sql, &cat).expect("plan");
    Strategy::ALL
        .into_iter()
        .map(|s| {
            let (r, rep) = run_query(c, &info, &p, &cfg, &ScanOptions::new(s)).expect("query");
            assert_eq!(rep.pages, info.pages);
            assert_eq!(
                rep.work.records_examined, info.rows,
                "{s:?} examined every row"
            );
            assert!(rep.modeled_ns > 0 && rep.energy.total_j() > 0.0);
            (s, r)
        })
        .collect()
}

#[test]
fn synthetic_results_identical_across_strategies_and_layouts_and_match_reference() {
    let mut c = client(config(&[]));
    load_synthetic(&mut c, "nsm", Layout::Nsm);
    load_synthetic(&mut c, "pax", Layout::Pax);
    let rows = synthetic_rows();
    let v = 2_000; // c1 is a permutation of 0..ROWS: c1 < 2000 selects exactly 10%
    // Projection.
    let mut want: Vec<Vec<Value>> = rows
        .iter()
        .filter(|r| r[0] < v)
        .map(|r| vec![Value::Int(r[1] as i128), Value::Int(r[0] as i128)])
        .collect();
    want.sort_by(|a, b| a[1].cmp_sql(&b[1]));
    // Aggregation with OR, NOT, BETWEEN, IN and arithmetic.
    let sel =
        |r: &Vec<i32>| (r[0] < v || (r[2] >= 100 && r[2] <= 5000)) && r[3] >= 1000 && r[4] != 42;
    let hits: Vec<&Vec<i32>> = rows.iter().filter(|r| sel(r)).collect();
    let agg_want = vec![
        Value::Int(hits.len() as i128),
        Value::Int(hits.iter().map(|r| r[1] as i128 * 2 + r[5] as i128).sum()),
        Value::Int(hits.iter().map(|r| r[6] as i128).min().expect("rows")),
        Value::Int(hits.iter().map(|r| r[6] as i128).max().expect("rows")),
    ];
    for table in ["nsm", "pax"] {
        let sql = format!("SELECT c2, c1 FROM {table} WHERE c1 < {v} ORDER BY c1");
        for (s, r) in run_all(&mut c, table, &sql) {
            assert_eq!(r.rows, want, "{table} {s:?} projection");
        }
        let sql = format!(
            "SELECT COUNT(*), SUM(c2 * 2 + c6), MIN(c7), MAX(c7) FROM {table} \
             WHERE (c1 < {v} OR c3 BETWEEN 100 AND 5000) AND NOT (c4 < 1000) AND c5 NOT IN (42)"
        );
        for (s, r) in run_all(&mut c, table, &sql) {
            assert_eq!(r.rows, vec![agg_want.clone()], "{table} {s:?} aggregation");
        }
    }
}

/// Q6 from tpchgen's row structs: (revenue in units of 10^-4, qualifying rows).
fn q6_reference(sf: f64) -> (i128, u64) {
    let lo = parse_date("1994-01-01").expect("date");
    let hi = parse_date("1995-01-01").expect("date");
    let (mut sum, mut hits) = (0i128, 0u64);
    for l in tpchgen::generators::LineItemGenerator::new(sf, 1, 1).iter() {
        let ship = l.l_shipdate.to_unix_epoch();
        let d = l.l_discount.0;
        if ship >= lo && ship < hi && (5..=7).contains(&d) && l.l_quantity < 24 {
            sum += i128::from(l.l_extendedprice.0) * i128::from(d);
            hits += 1;
        }
    }
    (sum, hits)
}

/// Q1's count, SUM(l_quantity) and SUM(l_extendedprice) per group, from tpchgen's rows
/// (units of 0.01), in group order.
fn q1_reference(sf: f64) -> Vec<(String, String, i128, i128, i128)> {
    let cutoff = parse_date("1998-09-02").expect("date");
    let mut g: std::collections::BTreeMap<(String, String), (i128, i128, i128)> =
        std::collections::BTreeMap::new();
    for l in tpchgen::generators::LineItemGenerator::new(sf, 1, 1).iter() {
        if l.l_shipdate.to_unix_epoch() <= cutoff {
            let e = g
                .entry((l.l_returnflag.to_string(), l.l_linestatus.to_string()))
                .or_default();
            e.0 += 1;
            e.1 += i128::from(l.l_quantity) * 100;
            e.2 += i128::from(l.l_extendedprice.0);
        }
    }
    g.into_iter()
        .map(|((a, b), (c, q, p))| (a, b, c, q, p))
        .collect()
}

fn q6_sql(t: &str) -> String {
    format!(
        "SELECT SUM(l_extendedprice * l_discount) AS revenue, COUNT(*) FROM {t} \
         WHERE l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01' \
         AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24"
    )
}

fn q1_sql(t: &str) -> String {
    format!(
        "SELECT l_returnflag, l_linestatus, COUNT(*), SUM(l_quantity), SUM(l_extendedprice), \
         SUM(l_extendedprice * (1 - l_discount)), AVG(l_discount) FROM {t} \
         WHERE l_shipdate <= DATE '1998-09-02' GROUP BY l_returnflag, l_linestatus \
         ORDER BY l_returnflag, l_linestatus"
    )
}

fn units(v: &Value, scale: u32) -> i128 {
    let (u, s) = v.as_units().expect("number");
    u * 10i128.pow(scale - s as u32)
}

/// Q6 and Q1 through a device at `sf`, every strategy and both layouts: identical, and
/// equal to references computed from tpchgen's rows.
fn tpch_on_device(sf: f64) {
    let preset = "nvme-tlc";
    let text = DeviceConfig::preset_toml(preset).expect("preset");
    let cfg = DeviceConfig::from_toml_with_overrides(text, &[]).expect("config");
    let (rev, hits) = q6_reference(sf);
    let q1_want = q1_reference(sf);
    let mut q1_results = Vec::new();
    for (name, layout) in [("lineitem", Layout::Pax), ("lineitem_nsm", Layout::Nsm)] {
        // One device per layout keeps the in-memory image small.
        let mut c = client(cfg.clone());
        let g = TpchGenerator::new(TpchTable::LineItem, sf).expect("gen");
        Catalog::load(&mut c, name, g, layout, &mut |_| {}).expect("load");
        for (s, r) in run_all(&mut c, name, &q6_sql(name)) {
            assert_eq!(units(&r.rows[0][0], 4), rev, "{name} {s:?} revenue");
            assert_eq!(r.rows[0][1], Value::Int(hits as i128), "{name} {s:?} count");
        }
        for (s, r) in run_all(&mut c, name, &q1_sql(name)) {
            let got: Vec<_> = r
                .rows
                .iter()
                .map(|row| {
                    let ch = |v: &Value| match v {
                        Value::Char(b) => String::from_utf8_lossy(b).into_owned(),
                        o => o.to_string(),
                    };
                    (
                        ch(&row[0]),
                        ch(&row[1]),
                        units(&row[2], 0),
                        units(&row[3], 2),
                        units(&row[4], 2),
                    )
                })
                .collect();
            assert_eq!(got, q1_want, "{name} {s:?} Q1");
            q1_results.push(r.rows);
        }
    }
    assert!(
        q1_results.windows(2).all(|w| w[0] == w[1]),
        "Q1 identical everywhere"
    );
}

#[test]
fn tpch_q6_and_q1_at_sf_0_1_identical_across_strategies_and_layouts() {
    tpch_on_device(0.1);
}

/// SF 1 (6,001,215 rows per layout, ~0.9 GB per in-memory device): also checked against
/// the official answers below. Takes about a minute in the debug profile.
#[test]
fn tpch_q6_and_q1_at_sf_1_match_the_official_answers_through_the_device() {
    tpch_on_device(1.0);
    // The official SF 1 answer of Q6 (tpchgen's q_and_a): 123141078.23.
    let (rev, _) = q6_reference(1.0);
    assert_eq!((rev + 50) / 100, 12_314_107_823);
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
    let cat = Catalog::read(&mut c).expect("catalog");
    let mut t = std::collections::HashMap::new();
    for table in ["nsm", "pax"] {
        let info = cat.get(table).expect("table").clone();
        let p = plan(&format!("SELECT c2 FROM {table} WHERE c1 < 20"), &cat).expect("plan");
        for s in Strategy::ALL {
            let (_, rep) = run_query(&mut c, &info, &p, &cfg, &ScanOptions::new(s)).expect("q");
            t.insert((table, s), rep);
        }
    }
    let ihp = &t[&("pax", Strategy::Ihp)];
    let hw = &t[&("pax", Strategy::HwIsp)];
    assert_eq!(ihp.bottleneck, "dram_to_host", "{ihp:?}");
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

// ------------------------------------------------------------------ session protocol

fn open_cmd(c: &mut Client, table: &str, sql: &str, mode: IspMode) -> Command {
    let cat = Catalog::read(c).expect("catalog");
    let info = cat.get(table).expect("table");
    let lpp = info.lbas_per_page(c.identify().lba_size) as u32;
    Command::IspOpen(Box::new(IspOpen {
        plan: plan(sql, &cat).expect("plan"),
        mode,
        table: TableExtent {
            first_lba: info.first_lba,
            pages: info.pages,
            lbas_per_page: lpp,
        },
    }))
}

fn open(c: &mut Client, cmd: Command) -> Result<u32, HostError> {
    match c.exec(cmd)?.payload {
        Payload::IspSession(id) => Ok(id),
        p => panic!("expected a session, got {p:?}"),
    }
}

fn open_sql(c: &mut Client, table: &str, sql: &str, mode: IspMode) -> Result<u32, HostError> {
    let cmd = open_cmd(c, table, sql, mode);
    open(c, cmd)
}

fn status_of(r: Result<impl std::fmt::Debug, HostError>) -> Status {
    match r {
        Err(HostError::Device { status, .. }) => status,
        other => panic!("expected a device error, got {other:?}"),
    }
}

/// Poll a session to the end; returns the merged result's row count.
fn drain(c: &mut Client, id: u32, sql: &str) -> usize {
    let cat = Catalog::read(c).expect("catalog");
    let p = plan(sql, &cat).expect("plan");
    drain_rest(c, id, csd_query::PartialResult::new(&p), &p)
}

#[test]
fn sessions_exhaust_recycle_and_reject_unknown_ids() {
    let mut c = client(config(&["isp.max_sessions=2"]));
    load_synthetic(&mut c, "t", Layout::Pax);
    let sql = "SELECT c2 FROM t WHERE c1 < 100";
    let a = open_sql(&mut c, "t", sql, IspMode::Cpu).expect("a");
    let b = open_sql(&mut c, "t", sql, IspMode::Hw).expect("b");
    assert_ne!(a, b);
    let cmd = open_cmd(&mut c, "t", sql, IspMode::Cpu);
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
    assert_eq!(drain(&mut c, a, sql), 100);
    assert_eq!(drain(&mut c, b, sql), 100);
    // CLOSE frees; a closed id is invalid, then recycled by the next OPEN.
    c.exec(Command::IspClose { session: a }).expect("close a");
    let st = status_of(c.exec(Command::IspGet { session: a }));
    assert!(matches!(st, Status::InvalidSession(_)));
    let a2 = open_sql(&mut c, "t", sql, IspMode::Cpu).expect("reopen");
    assert_eq!(a2, a, "the smallest free id is reused");
    assert_eq!(drain(&mut c, a2, sql), 100);
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
    let sql = "SELECT c2 FROM t WHERE c1 < 19000";
    let a = open_sql(&mut c, "t", sql, IspMode::Cpu).expect("a");
    // 28 buffers are left: the next session still opens with fewer buffers…
    let b = open_sql(&mut c, "t", sql, IspMode::Cpu).expect("b");
    // …and then none are left.
    let cmd = open_cmd(&mut c, "t", sql, IspMode::Cpu);
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
    let a2 = open_sql(&mut c, "t", sql, IspMode::Cpu).expect("a2");
    assert_eq!(drain(&mut c, b, sql), 19_000);
    assert_eq!(drain(&mut c, a2, sql), 19_000);
}

#[test]
fn bad_open_parameters_are_refused_and_change_nothing() {
    let mut c = client(config(&["isp.max_sessions=1"]));
    load_synthetic(&mut c, "t", Layout::Pax);
    let sql = "SELECT c2 FROM t WHERE c1 < 100";
    let lbas = c.identify().lbas;
    let mutate = |c: &mut Client, f: &dyn Fn(&mut TableExtent)| {
        let Command::IspOpen(mut o) = open_cmd(c, "t", sql, IspMode::Cpu) else {
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
    let id = open_sql(&mut c, "t", sql, IspMode::Cpu).expect("open");
    assert_eq!(drain(&mut c, id, sql), 100);
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
    let cat = Catalog::read(&mut c).expect("catalog");
    let u = cat.get("u").expect("u").clone();
    let Command::IspOpen(mut o) = open_cmd(&mut c, "t", sql, IspMode::Cpu) else {
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
fn bad_sql_is_a_clear_error() {
    let mut c = client(config(&[]));
    load_synthetic(&mut c, "t", Layout::Pax);
    let cat = Catalog::read(&mut c).expect("catalog");
    for (sql, needle) in [
        ("SELECT nope FROM t", "nope"),
        ("SELECT c1 FROM missing", "missing"),
        ("SELECT c1 FROM t WHERE c1 < 'abc'", "CHAR"),
        ("SELECT c1 FROM t JOIN t AS u ON t.c1 = u.c1", "JOIN"),
    ] {
        let e = plan(sql, &cat).expect_err(sql).to_string();
        assert!(
            e.to_lowercase().contains(&needle.to_lowercase()),
            "{sql}: {e}"
        );
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
    let cat = Catalog::read(&mut c).expect("catalog");
    let shared = SharedDevice::new(c.into_device(), ClockMode::Virtual).expect("share");
    let rows = synthetic_rows();
    std::thread::scope(|s| {
        for (i, table) in ["nsm", "pax", "nsm", "pax"].into_iter().enumerate() {
            let (shared, cat, cfg, rows) = (shared.clone(), &cat, &cfg, &rows);
            s.spawn(move || {
                let mut h = shared.handle().expect("handle");
                let v = 1_000 * (i as i32 + 1);
                let p = plan(
                    &format!("SELECT COUNT(*), SUM(c2) FROM {table} WHERE c1 < {v}"),
                    cat,
                )
                .expect("plan");
                let info = cat.get(table).expect("table");
                let strategy = Strategy::ALL[i % 3];
                let (r, _) =
                    run_query(&mut h, info, &p, cfg, &ScanOptions::new(strategy)).expect("query");
                let want: i128 = rows.iter().filter(|r| r[0] < v).map(|r| r[1] as i128).sum();
                assert_eq!(r.rows[0][0], Value::Int(v as i128), "{table} {strategy:?}");
                assert_eq!(r.rows[0][1], Value::Int(want), "{table} {strategy:?}");
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
    sql: String,
    want_rows: usize,
    got: csd_query::PartialResult,
    plan: csd_query::Plan,
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
        let cat = Catalog::read(&mut c).expect("catalog");
        let mut open_ids: std::collections::BTreeMap<u32, ModelSession> = Default::default();
        for op in ops {
            match op {
                SessionOp::Open { bound, hw } => {
                    let sql = format!("SELECT c2 FROM t WHERE c1 < {bound}");
                    let mode = if hw { IspMode::Hw } else { IspMode::Cpu };
                    let cmd = open_cmd(&mut c, "t", &sql, mode);
                    let r = c.exec(cmd);
                    if open_ids.len() < MAX as usize {
                        let Ok(done) = r else { panic!("OPEN refused with {} open: {r:?}", open_ids.len()) };
                        let Payload::IspSession(id) = done.payload else { panic!("no id") };
                        let smallest = (1..).find(|i| !open_ids.contains_key(i)).expect("free id");
                        proptest::prop_assert_eq!(id, smallest);
                        let p = plan(&sql, &cat).expect("plan");
                        open_ids.insert(id, ModelSession {
                            sql,
                            want_rows: bound as usize,
                            got: csd_query::PartialResult::new(&p),
                            plan: p,
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
                                SessionState::Failed(e) => panic!("{}: {e}", m.sql),
                                SessionState::Done if !rep.more && !m.finished => {
                                    m.finished = true;
                                    let got = std::mem::replace(&mut m.got, csd_query::PartialResult::new(&m.plan));
                                    let rows = got.finish(&m.plan).expect("finish").rows.len();
                                    proptest::prop_assert_eq!(rows, m.want_rows, "{}", m.sql);
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
                proptest::prop_assert_eq!(drain_rest(&mut c, id, m.got, &m.plan), m.want_rows, "{}", m.sql);
            }
            c.exec(Command::IspClose { session: id }).expect("close");
        }
    }
}

/// Poll `id` to the end, merging into what earlier GETs returned; the row count.
fn drain_rest(
    c: &mut Client,
    id: u32,
    mut out: csd_query::PartialResult,
    p: &csd_query::Plan,
) -> usize {
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
    out.finish(p).expect("finish").rows.len()
}
