//! Issue 30 for the scan path: in-host scans (IHP) and in-storage sessions (embedded-CPU
//! and hardware ISP) on the event core (docs/time-model.md, "Scans and in-storage
//! sessions on the event core"). Every strategy gives the calendars' answer and work,
//! every resource (the scan's own host cores included) serves first-come first-served
//! in arrival order, and the core never books behind a later arrival, outside itself, on
//! a stale instant or after a decision on an unfixed one.

use csd_device::{Command, IspMode, IspOpen, NvmeDevice, Payload, SessionState, TableExtent};
use csd_ftl::{Ftl, FtlConfig};
use csd_host::CommandIssuer;
use csd_host::{Catalog, Client, QueryReport, ScanOptions, Strategy, TableInfo, run_scan};
use csd_nand::Nand;
use csd_query::{AggFunc, Aggregate, Aggregation, CmpOp, Const, DataType, Expr, PartialResult};
use csd_query::{Plan, build};
use csd_sim::DeviceConfig;
use csd_sim::events::{Counters, Recording, first_come_first_served};
use csd_table::Layout;
use csd_table::datagen::{SyntheticGenerator, SyntheticSpec};

const ROWS: u64 = 30_000;

/// A fresh device of `preset` (a small array) with `overrides`, holding table `t`
/// (32-byte synthetic records) in `layout`.
fn device(preset: &str, overrides: &[&str], layout: Layout) -> (Client, TableInfo, DeviceConfig) {
    let text = DeviceConfig::preset_toml(preset).expect("preset");
    let mut sets: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    if preset != "tiny" {
        sets.push("geometry.blocks_per_plane=16".into());
    }
    let cfg = DeviceConfig::from_toml_with_overrides(text, &sets).expect("config");
    let nand = Nand::new_in_memory(cfg.clone()).expect("nand");
    let ftl = Ftl::format(nand, FtlConfig::default()).expect("format");
    let mut c = Client::new(NvmeDevice::new(ftl)).expect("client");
    let spec = SyntheticSpec::new(32, ROWS, 7).expect("spec");
    Catalog::load(
        &mut c,
        "t",
        SyntheticGenerator::new(spec).expect("gen"),
        layout,
        &mut |_| {},
    )
    .expect("load");
    let info = Catalog::read(&mut c)
        .expect("catalog")
        .get("t")
        .expect("t")
        .clone();
    (c, info, cfg)
}

/// `SELECT c2 FROM t WHERE c1 < v` at selectivity `sigma`.
fn projection(info: &TableInfo, sigma: f64) -> Plan {
    let spec = SyntheticSpec::new(32, ROWS, 7).expect("spec");
    let v = spec.threshold(sigma).expect("threshold");
    let c1 = Expr::column(&info.schema, 0).expect("c1");
    let bound = Expr::constant(Const::Int(i64::from(v)), DataType::Int);
    let filter = build::compare(CmpOp::Lt, c1, bound, "c1 < v").expect("c1 < v");
    Plan::projection("t", &info.schema, &[1], Some(filter)).expect("plan")
}

/// `SELECT c3, COUNT(*), SUM(c2) FROM t GROUP BY c3` as a device partial aggregation.
fn aggregation(info: &TableInfo) -> Plan {
    let c2 = Expr::column(&info.schema, 1).expect("c2");
    let agg = Aggregation {
        group_by: vec![2],
        aggregates: vec![
            Aggregate {
                func: AggFunc::CountStar,
                arg: None,
                ty: DataType::Int,
            },
            Aggregate {
                func: AggFunc::Sum,
                ty: c2.ty,
                arg: Some(c2),
            },
        ],
    };
    Plan::aggregation("t", &info.schema, agg, None)
}

/// One scan; its report and every partial result merged.
fn scan(
    c: &mut Client,
    info: &TableInfo,
    plan: &Plan,
    cfg: &DeviceConfig,
    s: Strategy,
) -> (QueryReport, PartialResult) {
    let mut opts = ScanOptions::new(s);
    // Two reads in flight: the in-host scan waits for completions it has not seen fixed.
    opts.queue_depth = 2;
    opts.poll_min_us = 5.0;
    opts.poll_max_us = 200.0;
    let mut all = PartialResult::new(plan);
    let rep = run_scan(c, info, plan, cfg, &opts, &mut |chunk| {
        all.merge(chunk)
            .map_err(|e| csd_host::HostError::Invalid(e.to_string()))
    })
    .expect("scan");
    (rep, all)
}

/// A recording on this thread that keeps a trace and compacts every 2^11 nodes.
fn recording() -> Recording {
    let rec = Recording::start().expect("no recording on this thread");
    rec.graph(|g| {
        g.record_trace();
        g.set_compact_nodes(1 << 11);
    });
    rec
}

/// A finished recording did everything in arrival order: nothing pending, a
/// first-come first-served trace, no late arrival, booking outside the core, stale
/// instant or decision on an unfixed one, and at least one compaction. Its counters.
fn assert_clean(g: csd_sim::events::Graph, what: &str) -> Counters {
    let counters = g.counters();
    assert_eq!(
        Counters {
            booked: 0,
            forgotten: 0,
            ..counters
        },
        Counters::default(),
        "{what}: {counters:?}"
    );
    assert_eq!(g.pending(), 0, "{what}");
    if let Err(e) = first_come_first_served(g.trace()) {
        panic!("{what}: {e}");
    }
    assert!(counters.forgotten > 0, "{what}: never compacted");
    counters
}

/// Every case: the same answers, work and traffic as on calendars, and an event core
/// that did everything in arrival order (compacting on the way).
#[test]
fn every_scan_strategy_runs_on_the_event_core_with_the_calendars_answers() {
    // A small arena and few pinned buffers make sessions stall on unfetched chunks
    // and issue pages as buffers free up, the paths the core decides on.
    let cases: [(&str, &[&str], Layout); 3] = [
        ("tiny", &[], Layout::Nsm),
        (
            "isp-ch8",
            &["isp.session_arena_kib=64", "isp.max_pinned_pages=8"],
            Layout::Pax,
        ),
        ("nvme-tlc", &["isp.max_pinned_pages=32"], Layout::Pax),
    ];
    for (preset, overrides, layout) in cases {
        for strategy in Strategy::ALL {
            for (what_plan, which) in [("σ 0.05", 0), ("σ 0.6", 1), ("group by", 2)] {
                let what = format!("{preset} {layout:?} {} {what_plan}", strategy.name());
                let (mut cal, info, cfg) = device(preset, overrides, layout);
                let plan = match which {
                    0 => projection(&info, 0.05),
                    1 => projection(&info, 0.6),
                    _ => aggregation(&info),
                };
                let (r_cal, out_cal) = scan(&mut cal, &info, &plan, &cfg, strategy);
                let (mut ev, _, _) = device(preset, overrides, layout);
                let rec = recording();
                let (r_ev, out_ev) = scan(&mut ev, &info, &plan, &cfg, strategy);
                assert_clean(rec.finish(), &what);
                // Same answer, same work, same traffic.
                assert_eq!(out_ev.len(), out_cal.len(), "{what}");
                assert_eq!(out_ev, out_cal, "{what}");
                assert_eq!(r_ev.work, r_cal.work, "{what}");
                assert_eq!(r_ev.result_rows, r_cal.result_rows, "{what}");
                assert_eq!(r_ev.flash_reads, r_cal.flash_reads, "{what}");
                assert_eq!(r_ev.channel_bytes, r_cal.channel_bytes, "{what}");
                assert_eq!(r_ev.host_cpu_cycles, r_cal.host_cpu_cycles, "{what}");
                assert_eq!(r_ev.device_cpu_cycles, r_cal.device_cpu_cycles, "{what}");
                assert!(r_ev.modeled_ns > 0, "{what}");
                let dev = (r_ev.modeled_ns as f64 / r_cal.modeled_ns as f64 - 1.0) * 100.0;
                eprintln!(
                    "{what}: calendar {} ns, events {} ns ({dev:+.2}%), {} commands / {}",
                    r_cal.modeled_ns, r_ev.modeled_ns, r_cal.commands, r_ev.commands
                );
                // One session alone arrives in order: the core books what the calendars
                // book (measured: every case equal but one, 171 ns of 4.1 ms apart).
                assert_eq!(r_ev.commands, r_cal.commands, "{what}");
                assert!(dev.abs() < 0.01, "{what}: {dev:+.4}% from the calendars");
                // The device is usable on calendars afterwards: every instant is final.
                let (again, _) = scan(&mut ev, &info, &plan, &cfg, strategy);
                assert_eq!(again.work, r_cal.work, "{what}: a calendar scan after");
            }
        }
    }
}

/// Two in-storage sessions at once (embedded CPU and hardware), their GETs interleaved
/// with the host's own reads and writes of another region, on `preset` with a small arena
/// (sessions stall until a GET drains them): the rows of each session and the data read,
/// and the event core's counters (`None` on calendars).
fn concurrent(events: bool) -> (Vec<PartialResult>, Vec<Vec<u8>>, Option<Counters>, u64) {
    let (mut c, info, _) = device(
        "nvme-tlc",
        &["isp.session_arena_kib=64", "isp.max_pinned_pages=16"],
        Layout::Pax,
    );
    let rec = events.then(recording);
    let plans = [projection(&info, 0.4), aggregation(&info)];
    let lpp = info.lbas_per_page(c.identify().lba_size) as u32;
    let mut ids = Vec::new();
    for (plan, mode) in plans.iter().zip([IspMode::Cpu, IspMode::Hw]) {
        let open = Command::IspOpen(Box::new(IspOpen {
            plan: plan.clone(),
            mode,
            table: TableExtent {
                first_lba: info.first_lba,
                pages: info.pages,
                lbas_per_page: lpp,
            },
            index: None,
        }));
        let Payload::IspSession(id) = c.exec(open).expect("open").payload else {
            panic!("no session")
        };
        c.settle_now();
        ids.push(Some(id));
    }
    let mut outs: Vec<PartialResult> = plans.iter().map(PartialResult::new).collect();
    let mut reads = Vec::new();
    let scratch = info.first_lba + info.pages * lpp as u64 + 64;
    let mut round = 0u64;
    while ids.iter().any(Option::is_some) {
        round += 1;
        // Compaction while sessions are open renames their instants too.
        if csd_sim::events::compact_due() {
            let mut roots = Vec::new();
            c.settle_instants(&mut |t| {
                roots.push(t);
                t
            });
            if let Some(remap) = csd_sim::events::compact(&roots) {
                c.settle_instants(&mut |t| remap.apply(t));
            }
        }
        let mut got = false;
        for (k, slot) in ids.iter_mut().enumerate() {
            let Some(id) = *slot else { continue };
            let Payload::Isp(mut r) = c
                .exec(Command::IspGet { session: id })
                .expect("get")
                .payload
            else {
                panic!("no reply")
            };
            c.settle_now();
            if let Some(ch) = r.chunk.take() {
                outs[k].merge(ch).expect("merge");
                got = true;
            }
            match r.state {
                SessionState::Done if !r.more => {
                    c.exec(Command::IspClose { session: id }).expect("close");
                    c.settle_now();
                    *slot = None;
                }
                SessionState::Failed(m) => panic!("{m}"),
                _ => {}
            }
        }
        // The host's own I/O beside the sessions: a write, then a read of it.
        let lba = scratch + (round % 16) * 8;
        let data: Vec<u8> = (0..4096).map(|i| (i as u64 * 31 + round) as u8).collect();
        c.exec(Command::Write { lba, data }).expect("write");
        c.settle_now();
        let Payload::Data(d) = c
            .exec(Command::Read { lba, blocks: 8 })
            .expect("read")
            .payload
        else {
            panic!("no data")
        };
        c.settle_now();
        reads.push(d);
        if !got {
            let t = c.now().after(20_000);
            c.wait_until(t);
        }
    }
    let counters = rec.map(|rec| {
        c.run_events();
        c.settle_instants(&mut csd_sim::events::value);
        assert_clean(rec.finish(), "concurrent sessions")
    });
    (outs, reads, counters, c.now().ns())
}

/// Sessions running in the background while the host does other work (issue 30's
/// "ISP sessions" actor): the same rows and data on the event core as on calendars, with
/// every resource first-come first-served and nothing booked behind a later arrival.
#[test]
fn concurrent_sessions_and_host_io_run_on_the_event_core() {
    let (rows_cal, reads_cal, none, end_cal) = concurrent(false);
    assert!(none.is_none());
    let (rows_ev, reads_ev, counters, end_ev) = concurrent(true);
    let counters = counters.expect("counters");
    assert_eq!(rows_ev, rows_cal);
    assert_eq!(reads_ev, reads_cal);
    assert!(!rows_ev[0].is_empty() && rows_ev[1].len() > 1);
    eprintln!("calendar end {end_cal} ns, events {end_ev} ns, {counters:?}");
}
