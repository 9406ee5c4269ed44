//! All 22 TPC-H queries over device tables (SF 0.01, the eight tables loaded on an
//! in-memory device) against an independent computation: DataFusion over in-memory
//! Arrow tables of the same tpchgen rows (tpchgen-arrow, the spec's column types, no
//! csd code on the path). Results must agree with the reference, and be *identical*
//! across strategies (ihp, cpu-isp, hw-isp, auto) and layouts (NSM, PAX). Also checks
//! that filters, projections and aggregates really run in the device, and that bad SQL
//! fails clearly.

use std::sync::Arc;

use csd_device::NvmeDevice;
use csd_ftl::{Ftl, FtlConfig};
use csd_host::{Catalog, Client, Strategy};
use csd_nand::Nand;
use csd_sim::DeviceConfig;
use csd_sql::{Choice, ScanSettings, SqlSession, tpch::QUERIES};
use csd_table::Layout;
use csd_table::datagen::{TpchGenerator, TpchTable};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::display::array_value_to_string;
use datafusion::datasource::MemTable;
use datafusion::prelude::{SessionConfig, SessionContext};

const SF: f64 = 0.01;

fn device(layout: Layout) -> (Client, DeviceConfig) {
    device_with(DeviceConfig::preset("nvme-tlc").expect("preset"), layout)
}

fn device_with(cfg: DeviceConfig, layout: Layout) -> (Client, DeviceConfig) {
    let nand = Nand::new_in_memory(cfg.clone()).expect("nand");
    let ftl = Ftl::format(nand, FtlConfig::default()).expect("format");
    let mut c = Client::new(NvmeDevice::new(ftl)).expect("client");
    for t in TpchTable::ALL {
        let g = TpchGenerator::new(t, SF).expect("generator");
        Catalog::load(&mut c, t.name(), g, layout, &mut |_| {}).expect("load");
    }
    (c, cfg)
}

/// Reference tables straight from tpchgen-arrow.
fn reference() -> SessionContext {
    use tpchgen::generators::*;
    use tpchgen_arrow::*;
    let mut cfg = SessionConfig::new().with_target_partitions(2);
    cfg.options_mut().sql_parser.parse_float_as_decimal = true;
    let ctx = SessionContext::new_with_config(cfg);
    let add = |name: &str, it: Box<dyn Iterator<Item = RecordBatch>>, schema| {
        let batches: Vec<RecordBatch> = it.collect();
        let t = MemTable::try_new(schema, vec![batches]).expect("memtable");
        ctx.register_table(name, Arc::new(t)).expect("register");
    };
    macro_rules! table {
        ($name:expr, $arrow:ident, $gen:expr) => {{
            let a = $arrow::new($gen);
            let schema = $arrow::schema_ref();
            add($name, Box::new(a.map(|b| b.expect("batch"))), schema);
        }};
    }
    table!("lineitem", LineItemArrow, LineItemGenerator::new(SF, 1, 1));
    table!("orders", OrderArrow, OrderGenerator::new(SF, 1, 1));
    table!("part", PartArrow, PartGenerator::new(SF, 1, 1));
    table!("customer", CustomerArrow, CustomerGenerator::new(SF, 1, 1));
    table!("supplier", SupplierArrow, SupplierGenerator::new(SF, 1, 1));
    table!("partsupp", PartSuppArrow, PartSuppGenerator::new(SF, 1, 1));
    table!("nation", NationArrow, NationGenerator::new(SF, 1, 1));
    table!("region", RegionArrow, RegionGenerator::new(SF, 1, 1));
    ctx
}

/// The rows the device selected in the scans of `table` whose program says `what`
/// (every scan of `table` for `""`).
fn selected(a: &csd_sql::Answer, table: &str, what: &str) -> u64 {
    a.scans
        .iter()
        .filter(|r| r.table == table && r.program.contains(what))
        .map(|r| r.report.work.rows_selected)
        .sum()
}

/// Every scan's device program, sorted (the scans' order is the threads').
fn scan_programs(a: &csd_sql::Answer) -> Vec<String> {
    let mut v: Vec<_> = a.scans.iter().map(|r| r.program.clone()).collect();
    v.sort();
    v
}

/// `sql` (TPC-H Q`q`) run twice: the answer of the first run, after checking that the
/// second gave the device the same programs (the key sets are complete when scans start).
fn run_with_same_programs_twice(s: &SqlSession, sql: &str, q: usize) -> csd_sql::Answer {
    let with = s.run(sql).expect("run");
    let again = s.run(sql).expect("run");
    assert_eq!(
        scan_programs(&with),
        scan_programs(&again),
        "Q{q}: a rerun differs"
    );
    with
}

/// `sql` run with DataFusion's dynamic filters off (so no runtime filter or key set
/// reaches a scan), then turned back on.
fn run_without_dynamic_filters(s: &SqlSession, sql: &str) -> csd_sql::Answer {
    s.run("SET datafusion.optimizer.enable_dynamic_filter_pushdown = false")
        .expect("set");
    let without = s.run(sql).expect("run");
    s.run("SET datafusion.optimizer.enable_dynamic_filter_pushdown = true")
        .expect("set");
    without
}

/// Rows as display strings.
fn rows(batches: &[RecordBatch]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for b in batches {
        for r in 0..b.num_rows() {
            out.push(
                b.columns()
                    .iter()
                    .map(|c| array_value_to_string(c, r).expect("display"))
                    .collect(),
            );
        }
    }
    out
}

/// Equal as numbers (decimal types of other precisions may print other scales) or as
/// strings up to trailing blanks (a `CHAR(n)` column keeps no trailing blank: tpchgen
/// makes a few addresses that end in one).
fn same(a: &str, b: &str) -> bool {
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => (x - y).abs() <= 1e-5 * x.abs().max(1.0),
        _ => a.trim_end() == b.trim_end(),
    }
}

fn check(q: usize, got: &[Vec<String>], want: &[Vec<String>]) {
    assert_eq!(
        got.len(),
        want.len(),
        "Q{q}: {} rows, reference {}",
        got.len(),
        want.len()
    );
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "Q{q} row {i}: columns");
        for (a, b) in g.iter().zip(w) {
            assert!(same(a, b), "Q{q} row {i}: got {g:?}, reference {w:?}");
        }
    }
}

#[test]
fn all_22_queries_match_the_reference_on_every_strategy_and_layout() {
    let ctx = reference();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let want: Vec<Vec<Vec<String>>> = QUERIES
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let b = rt
                .block_on(async { ctx.sql(q).await?.collect().await })
                .unwrap_or_else(|e| panic!("reference Q{}: {e}", i + 1));
            rows(&b)
        })
        .collect();
    // Some answers are empty at this scale; most are not (a broken join would empty them).
    assert!(want.iter().filter(|r| !r.is_empty()).count() >= 18);
    let mut first: Option<Vec<Vec<Vec<String>>>> = None;
    let runs: [(Layout, &[Choice]); 2] = [
        (
            Layout::Pax,
            &[
                Choice::Fixed(Strategy::Ihp),
                Choice::Fixed(Strategy::CpuIsp),
                Choice::Fixed(Strategy::HwIsp),
                Choice::Auto,
            ],
        ),
        (
            Layout::Nsm,
            &[
                Choice::Fixed(Strategy::HwIsp),
                Choice::Fixed(Strategy::CpuIsp),
            ],
        ),
    ];
    for (layout, choices) in runs {
        let (mut client, cfg) = device(layout);
        for &choice in choices {
            let s =
                SqlSession::new(client, cfg.clone(), ScanSettings::new(choice)).expect("session");
            let mut all = Vec::new();
            for (i, q) in QUERIES.iter().enumerate() {
                let a = s
                    .run(q)
                    .unwrap_or_else(|e| panic!("Q{} {layout:?} {}: {e}", i + 1, choice.name()));
                assert!(!a.scans.is_empty(), "Q{}: no device scan ran", i + 1);
                let got = rows(&a.batches);
                check(i + 1, &got, &want[i]);
                all.push(got);
            }
            match &first {
                None => first = Some(all),
                Some(f) => assert_eq!(f, &all, "{layout:?} {} differs", choice.name()),
            }
            client = s.into_client().expect("client back");
        }
    }
}

#[test]
fn filters_projections_and_aggregates_run_in_the_device() {
    let (client, cfg) = device(Layout::Pax);
    let s = SqlSession::new(
        client,
        cfg,
        ScanSettings::new(Choice::Fixed(Strategy::HwIsp)),
    )
    .expect("session");
    // Q6: filter and SUM both in the device; one state crosses the link.
    let a = s.run(QUERIES[5]).expect("q6");
    assert_eq!(a.scans.len(), 1);
    let scan = &a.scans[0];
    assert!(
        scan.program.contains("partial aggregate"),
        "{}",
        scan.program
    );
    assert!(scan.program.contains("filter"), "{}", scan.program);
    assert_eq!(scan.report.result_rows, 1);
    let plan = &a.explained;
    assert!(!plan.contains("FilterExec"), "{plan}");
    assert!(plan.contains("[device]"), "{plan}");
    // A projection: only the requested columns leave the device.
    let a = s
        .run("select l_orderkey from lineitem where l_quantity < 2")
        .expect("projection");
    let r = &a.scans[0].report;
    let rows: usize = a.batches.iter().map(RecordBatch::num_rows).sum();
    assert!(rows > 0);
    assert_eq!(r.work.rows_selected, rows as u64);
    assert!(
        r.host_link_bytes < r.table_bytes / 20,
        "{} of {}",
        r.host_link_bytes,
        r.table_bytes
    );
    // A filter the device cannot evaluate exactly stays in DataFusion, same answer.
    let a = s
        .run("select count(*) from lineitem where l_comment like '%ly%'")
        .expect("like");
    let b = s
        .run("select count(*) from lineitem where l_comment like 'ly%' or l_comment like '%ly%'")
        .expect("like 2");
    assert_eq!(rows_of(&a.batches), rows_of(&b.batches));
    // LIMIT is pushed: the scan returns no more than asked.
    let a = s
        .run("select l_orderkey from lineitem limit 7")
        .expect("limit");
    assert_eq!(
        a.batches.iter().map(RecordBatch::num_rows).sum::<usize>(),
        7
    );
    // A limit across several device chunks and batches: exactly that many rows, the
    // first ones of the table in scan order, and the scan's report counts them.
    let all = s.run("select l_orderkey from lineitem").expect("all");
    let a = s
        .run("select l_orderkey from lineitem limit 10000")
        .expect("limit 10000");
    assert_eq!(
        a.batches.iter().map(RecordBatch::num_rows).sum::<usize>(),
        10_000
    );
    assert_eq!(
        rows_of(&a.batches),
        rows_of(&all.batches)[..10_000].to_vec()
    );
    assert_eq!(a.scans.first().map(|r| r.report.result_rows), Some(10_000));
}

fn rows_of(b: &[RecordBatch]) -> Vec<Vec<String>> {
    rows(b)
}

#[test]
fn bad_sql_and_unknown_names_fail_clearly() {
    let (client, cfg) = device(Layout::Nsm);
    let s = SqlSession::new(client, cfg, ScanSettings::new(Choice::Auto)).expect("session");
    let e = s
        .run("select * from nosuch")
        .expect_err("unknown table")
        .to_string();
    assert!(e.contains("nosuch") && e.contains("lineitem"), "{e}");
    let e = s
        .run("select l_nosuch from lineitem")
        .expect_err("unknown column")
        .to_string();
    assert!(e.contains("l_nosuch"), "{e}");
    let e = s.run("selec 1").expect_err("syntax").to_string();
    assert!(e.to_lowercase().contains("selec"), "{e}");
}

#[test]
fn groups_beyond_the_device_arena_meet_again_in_the_final_aggregate() {
    // A 16 KiB session arena holds a few hundred groups; lineitem at SF 0.01 has 15,000
    // order keys, so the device hands groups over many times and the same key comes
    // back in several chunks.
    let text = DeviceConfig::preset_toml("nvme-tlc").expect("preset");
    let cfg = DeviceConfig::from_toml_with_overrides(text, &["isp.session_arena_kib=16".into()])
        .expect("config");
    let sql = "select l_orderkey, count(*) as n, sum(l_quantity) as q from lineitem \
               group by l_orderkey order by l_orderkey";
    let want = {
        let ctx = reference();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(async { ctx.sql(sql).await?.collect().await })
            .expect("reference")
    };
    for strategy in [Strategy::CpuIsp, Strategy::HwIsp] {
        let (client, cfg) = device_with(cfg.clone(), Layout::Pax);
        let s = SqlSession::new(client, cfg, ScanSettings::new(Choice::Fixed(strategy)))
            .expect("session");
        let got = s.run(sql).expect("group by");
        assert!(
            got.scans[0].program.contains("partial aggregate"),
            "{}",
            got.scans[0].program
        );
        assert_eq!(rows(&got.batches), rows(&want), "{strategy:?}");
    }
}

#[test]
fn joins_build_their_hash_table_on_the_smaller_table() {
    // Device scans report the catalog's row counts to DataFusion's optimizer, so a join
    // of lineitem (60,000 rows at SF 0.01) with part (2,000) written either way round
    // builds on part and probes lineitem.
    let (client, cfg) = device(Layout::Pax);
    let s = SqlSession::new(client, cfg, ScanSettings::new(Choice::Fixed(Strategy::Ihp)))
        .expect("session");
    for sql in [
        "select count(*) from lineitem, part where l_partkey = p_partkey",
        "select count(*) from part, lineitem where p_partkey = l_partkey",
    ] {
        let plan = s.explain(sql).expect("explain");
        let join = plan.find("HashJoinExec").expect("a hash join");
        let rest = &plan[join..];
        let (part, lineitem) = (
            rest.find("table=part").expect("part scan"),
            rest.find("table=lineitem").expect("lineitem scan"),
        );
        assert!(part < lineitem, "build side is not part:\n{plan}");
    }
}

/// The text of TPC-H query `q` (1-based).
fn query(q: usize) -> &'static str {
    QUERIES[q - 1]
}

#[test]
fn join_estimates_use_the_distinct_values_the_load_measured() {
    // Q18's semi join: its subquery (lineitem grouped by l_orderkey, HAVING) is estimated
    // from l_orderkey's distinct values, far below the join of customer, orders and
    // lineitem it filters (foreign-key joins estimated at the larger side thanks to the
    // keys' distinct values), so the hash table is built on the subquery.
    let (client, cfg) = device(Layout::Pax);
    let s = SqlSession::new(client, cfg, ScanSettings::new(Choice::Auto)).expect("session");
    let t = s
        .catalog()
        .iter()
        .find(|t| t.name == "orders")
        .expect("orders");
    let d = t
        .distinct
        .as_ref()
        .expect("the load measured distinct values");
    let key = t.schema.column_index("o_orderkey").expect("column");
    assert!(
        d[key].abs_diff(t.rows) * 20 < t.rows,
        "o_orderkey: {} of {}",
        d[key],
        t.rows
    );
    let plan = s.explain(query(18)).expect("explain");
    let semi = plan.find("Semi").expect("a semi join");
    let build = &plan[semi..];
    let (agg, orders) = (
        build
            .find("partial aggregate")
            .expect("the subquery's scan"),
        build.find("table=orders").expect("orders scan"),
    );
    assert!(
        agg < orders,
        "the semi join does not build on the subquery:\n{plan}"
    );
}

#[test]
fn runtime_filters_the_device_takes_shrink_its_work_and_repeat_exactly() {
    // Q17 and Q18 with looser constants (at SF 0.01 theirs select no part and no
    // order): the filtered part keys reach lineitem's partial aggregate through the semi
    // join's dynamic filter; the big orders' keys reach the orders and lineitem scans.
    // Q17's join also reads lineitem with a static filter its subquery's aggregate does
    // not have (`l_quantity > 0`, true of every row), so the aggregate cannot take that
    // scan's rows (`crate::reuse`) and runs in the device with the join's keys.
    let q17 = query(17).replace(
        "p_container = 'MED BOX'",
        "p_container like 'MED%' and p_size + l_linenumber > 20 and l_quantity > 0",
    );
    let q18 = query(18).replace("> 300", "> 250");
    let (client, cfg) = device(Layout::Pax);
    let s = SqlSession::new(client, cfg, ScanSettings::new(Choice::Auto)).expect("session");
    let plan = s.explain(&q17).expect("explain");
    assert!(
        plan.lines()
            .any(|l| l.contains("partial aggregate") && l.contains("runtime filter")),
        "the partial aggregate scan takes no runtime filter:\n{plan}"
    );
    // Q4's lineitem rows go straight to the join that made the filter: the host does not
    // apply it (the join would probe each row twice), the device's program may.
    let plan = s.explain(query(4)).expect("explain");
    let lineitem = plan
        .lines()
        .find(|l| l.contains("table=lineitem"))
        .expect("lineitem scan");
    assert!(!lineitem.contains("runtime filter Dynamic"), "{plan}");
    assert!(lineitem.contains("runtime filter (device only)"), "{plan}");
    // Each scan's program and modeled report (wall time aside), in the order of tables
    // and programs.
    let modeled = |a: &csd_sql::Answer| {
        let mut v = a
            .scans
            .iter()
            .map(|r| {
                let mut rep = r.report.clone();
                rep.wall_s = 0.0;
                (r.table.clone(), r.program.clone(), format!("{rep:?}"))
            })
            .collect::<Vec<_>>();
        v.sort();
        v
    };
    for (q, sql) in [(17, &q17), (18, &q18)] {
        let with = s.run(sql).expect("run");
        // The filters are complete when the probe sides' scans start (the joins build
        // first), so the device takes the same terms in every run: the modeled figures
        // repeat exactly.
        let again = s.run(sql).expect("run");
        assert_eq!(modeled(&with), modeled(&again), "Q{q}: a rerun differs");
        let without = run_without_dynamic_filters(&s, sql);
        assert!(!without.explained.contains("runtime_filtered_rows"));
        assert_eq!(rows(&with.batches), rows(&without.batches), "Q{q}");
        // The device took the join's keys into its program and selected fewer rows.
        let (table, what) = if q == 17 {
            ("lineitem", "partial aggregate")
        } else {
            ("orders", "")
        };
        let taken = with
            .scans
            .iter()
            .find(|r| r.table == table && r.program.contains(what))
            .expect("scan");
        assert!(
            taken.program.contains("runtime filter") && taken.program.contains(" IN ("),
            "Q{q}: {}",
            taken.program
        );
        // (Without dynamic filters Q17's two lineitem scans run one program, so the
        // aggregate takes the other's rows: compare with what lineitem's scans selected.)
        let (w, wo) = (selected(&with, table, what), selected(&without, table, ""));
        assert!(
            w * 10 < wo,
            "Q{q}: {table} rows selected {w} with, {wo} without"
        );
    }
}

#[test]
fn joins_beyond_the_key_list_hand_their_key_sets_to_the_device() {
    // At SF 0.01 the joins of Q3 and Q12 build on a few hundred to a few thousand keys;
    // with DataFusion's key lists cut at 16 keys their runtime filters are hash-table
    // lookups, which the device takes as the build side's key set (`keyset`).
    let (client, cfg) = device(Layout::Pax);
    let s = SqlSession::new(client, cfg, ScanSettings::new(Choice::Auto)).expect("session");
    s.run("SET datafusion.optimizer.hash_join_inlist_pushdown_max_distinct_values = 16")
        .expect("set");
    // On one target partition too (a one-core host), where a `CooperativeExec` sits
    // over each scan instead of a repartition.
    for ((q, probe), partitions) in [(3, "lineitem"), (12, "orders")]
        .into_iter()
        .flat_map(|w| [(w, 2), (w, 1)])
    {
        s.run(&format!(
            "SET datafusion.execution.target_partitions = {partitions}"
        ))
        .expect("set");
        let sql = query(q);
        let with = run_with_same_programs_twice(&s, sql, q);
        let scan = with
            .scans
            .iter()
            .find(|r| r.table == probe)
            .expect("probe scan");
        assert!(
            scan.program.contains("runtime filter") && scan.program.contains(" values)"),
            "Q{q} on {partitions} partition(s): {}",
            scan.program
        );
        let without = run_without_dynamic_filters(&s, sql);
        assert_eq!(rows(&with.batches), rows(&without.batches), "Q{q}");
        let (w, wo) = (selected(&with, probe, ""), selected(&without, probe, ""));
        assert!(
            w * 2 < wo,
            "Q{q}: {probe} rows selected {w} with, {wo} without"
        );
        assert!(with.explained.contains("KeyTapExec"), "{}", with.explained);
    }
}

#[test]
fn a_join_whose_filter_no_scan_holds_gives_its_keys_to_the_scan_of_its_key_column() {
    // Q5 joins supplier on (l_suppkey, c_nationkey): the runtime filter names columns of
    // both sides of the orders-lineitem join below it, so no scan can hold it; the
    // supplier keys reach the lineitem scan that produces l_suppkey through the inner join
    // and the repartition on the way. Q2 joins its subquery on (ps_partkey, min(...)): the
    // part keys reach the subquery's partsupp scan through the aggregate grouped by
    // ps_partkey (`keyset`'s `ColumnKeySet`).
    let (client, cfg) = device(Layout::Pax);
    let s = SqlSession::new(client, cfg, ScanSettings::new(Choice::Auto)).expect("session");
    for (q, table, term) in [
        (5, "lineitem", "l_suppkey IN ("),
        (2, "partsupp", "ps_partkey IN ("),
    ] {
        let sql = query(q);
        let with = run_with_same_programs_twice(&s, sql, q);
        assert!(
            with.explained.contains("key set of"),
            "Q{q}: {}",
            with.explained
        );
        // The scan that took the set, and the rows the scans of `table` selected.
        let taken = |a: &csd_sql::Answer| {
            a.scans
                .iter()
                .find(|r| r.table == table && r.program.contains(term))
                .map(|r| r.report.work.rows_selected)
        };
        assert!(taken(&with).is_some(), "Q{q}: {:?}", scan_programs(&with));
        let without = run_without_dynamic_filters(&s, sql);
        assert_eq!(rows(&with.batches), rows(&without.batches), "Q{q}");
        assert!(taken(&without).is_none(), "Q{q}");
        let (w, wo) = (selected(&with, table, ""), selected(&without, table, ""));
        assert!(
            w * 2 < wo,
            "Q{q}: {table} rows selected {w} with, {wo} without"
        );
    }
}

#[test]
fn join_sides_are_chosen_on_what_the_key_sets_leave() {
    // Q21 joins orders (half of them with status 'F') with lineitem, after lineitem was
    // joined with the suppliers of one nation. That nation's key reaches the supplier
    // scan and the suppliers' keys the lineitem scan, so the lineitem side hands over a
    // few percent of its table; estimated from the scans' own filters it looked larger
    // than orders, and the join built its hash table on orders and streamed every 'F'
    // order to the host. Counting the key sets (`keyset::ExpectedKeySets`), it builds on
    // the lineitem side and the orders scan takes its keys.
    let (client, cfg) = device(Layout::Pax);
    let s = SqlSession::new(client, cfg, ScanSettings::new(Choice::Auto)).expect("session");
    let f_orders = s
        .run("select count(*) from orders where o_orderstatus = 'F'")
        .expect("count");
    let f_orders: u64 = rows(&f_orders.batches)[0][0].parse().expect("a count");
    let a = run_with_same_programs_twice(&s, query(21), 21);
    let orders = selected(&a, "orders", "");
    assert!(
        orders * 4 < f_orders,
        "orders rows selected {orders} of {f_orders} 'F' orders: {:?}\n{}",
        scan_programs(&a),
        a.explained
    );
    let without = run_without_dynamic_filters(&s, query(21));
    assert_eq!(rows(&a.batches), rows(&without.batches), "Q21");

    // A key set that would make the probe side look smaller than the build side is not
    // counted: join selection would then build on the probe side, and no set would reach
    // it. Q16 still builds on the part rows its filter keeps, not on partsupp.
    let plan = s.explain(query(16)).expect("explain");
    let join = plan.find("join_type=Inner").expect("the inner join");
    let rest = &plan[join..];
    let (part, partsupp) = (
        rest.find("table=part ").expect("part scan"),
        rest.find("table=partsupp").expect("partsupp scan"),
    );
    assert!(part < partsupp, "Q16 does not build on part:\n{plan}");
}

#[test]
fn scans_of_one_program_in_a_plan_run_once() {
    // Q11 sums one nation's stock twice (per part, and in all for its HAVING threshold):
    // two copies of the same join, so the device would scan nation, supplier and
    // partsupp twice with equal programs (partsupp's holding the same supplier keys).
    // `reuse::ReusedDeviceScans` runs each once; the other copy takes its rows.
    let ctx = reference();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let want = rows(
        &rt.block_on(async { ctx.sql(query(11)).await?.collect().await })
            .expect("reference Q11"),
    );
    assert!(!want.is_empty());
    let (mut client, cfg) = device(Layout::Pax);
    for choice in [Choice::Fixed(Strategy::HwIsp), Choice::Auto] {
        let s = SqlSession::new(client, cfg.clone(), ScanSettings::new(choice)).expect("session");
        let a = s.run(query(11)).expect("Q11");
        check(11, &rows(&a.batches), &want);
        let count = |t: &str| a.scans.iter().filter(|r| r.table == t).count();
        assert_eq!(
            (count("partsupp"), count("supplier"), count("nation")),
            (1, 1, 1),
            "{choice:?}: {:?}\n{}",
            scan_programs(&a),
            a.explained
        );
        assert!(a.explained.contains("reused_rows="), "{}", a.explained);
        client = s.into_client().expect("client back");
    }
}

/// Runs TPC-H query `q` under each of `choices` on a fresh device: the reference's
/// answer, `table` scanned `scans` times by the device with another scan of it taking
/// kept rows (`reused_rows`), the same answer and scans on a rerun (which scan ran is
/// not the threads'), and `more`'s checks of the answer.
fn reads_kept_rows(
    q: usize,
    choices: [Choice; 2],
    table: &str,
    scans: usize,
    more: impl Fn(&csd_sql::Answer),
) {
    let want = reference_rows(query(q));
    assert!(!want.is_empty(), "Q{q} answers rows at this scale");
    let (mut client, cfg) = device(Layout::Pax);
    for choice in choices {
        let s = SqlSession::new(client, cfg.clone(), ScanSettings::new(choice)).expect("session");
        let a = s.run(query(q)).expect("run");
        check(q, &rows(&a.batches), &want);
        let n = a.scans.iter().filter(|r| r.table == table).count();
        assert_eq!(
            n,
            scans,
            "Q{q} {choice:?}: {:?}\n{}",
            scan_programs(&a),
            a.explained
        );
        assert!(a.explained.contains("reused_rows="), "{}", a.explained);
        more(&a);
        let again = s.run(query(q)).expect("run again");
        assert_eq!(rows(&again.batches), rows(&a.batches));
        assert_eq!(scan_programs(&again), scan_programs(&a));
        client = s.into_client().expect("client back");
    }
}

#[test]
fn q2s_subquery_takes_the_partsupp_rows_its_outer_scan_kept() {
    // Q2 reads partsupp for the parts of one size and type (the join's key set), then
    // again in its subquery for one region's suppliers and the parts the outer join
    // kept: a subset of the first scan's keys, so the second scan's rows are among the
    // first's (`csd_query::imply`). The first scan is on the build side of the join
    // whose probe side holds the second, so it always ends first; the second takes its
    // rows, filtered in the host by its own program, and the device reads partsupp once.
    let choices = [Choice::Fixed(Strategy::Ihp), Choice::Auto];
    reads_kept_rows(2, choices, "partsupp", 1, |a| {
        let second = a
            .explained
            .lines()
            .filter(|l| l.contains("table=partsupp"))
            .nth(1)
            .expect("the subquery's partsupp scan");
        assert!(second.contains("reused_rows="), "{second}");
    });
}

#[test]
fn q21s_not_exists_takes_the_exists_scans_rows_filtered_by_its_static_filter() {
    // Q21 reads lineitem three times: for the late lines of one nation's suppliers,
    // for EXISTS (the orders' keys), and for NOT EXISTS (late lines of a subset of those
    // keys). The third scan's static filter (`l_receiptdate > l_commitdate`) implies the
    // second's (none) and its keys are among the second's, which runs first (the anti
    // join builds on the semi join): the second scan also reads the two dates and the
    // third takes its rows filtered in the host. The device reads lineitem twice.
    let choices = [Choice::Fixed(Strategy::CpuIsp), Choice::Auto];
    reads_kept_rows(21, choices, "lineitem", 2, |a| {
        assert!(
            a.scans
                .iter()
                .filter(|r| r.table == "lineitem")
                .any(|r| r.program.contains("l_commitdate, l_receiptdate")
                    || r.program.contains("l_receiptdate, l_commitdate")),
            "the EXISTS scan reads the dates: {:?}",
            scan_programs(a)
        );
    });
}

#[test]
fn scans_of_one_table_with_other_runtime_keys_do_not_share_rows() {
    // Two scalar subqueries over partsupp: the same static program and columns, but
    // each scan holds the keys of another nation's suppliers. Neither may hand its rows
    // to the other; the sums are those of each nation.
    let (client, cfg) = device(Layout::Pax);
    let s = SqlSession::new(client, cfg, ScanSettings::new(Choice::Auto)).expect("session");
    let count = |n: u32| {
        format!(
            "(select sum(ps_availqty) from partsupp, supplier \
             where ps_suppkey = s_suppkey and s_nationkey = {n})"
        )
    };
    let both = s
        .run(&format!("select {} as a, {} as b", count(7), count(8)))
        .expect("both");
    let one = |n: u32| {
        let a = s.run(&format!("select {}", count(n))).expect("one");
        rows(&a.batches)[0][0].clone()
    };
    let got = rows(&both.batches);
    assert_eq!(got, vec![vec![one(7), one(8)]]);
    assert_ne!(got[0][0], got[0][1], "the two nations differ at this scale");
    let partsupp = both.scans.iter().filter(|r| r.table == "partsupp").count();
    assert_eq!(partsupp, 2, "{:?}", scan_programs(&both));
}

/// TPC-H Q17's shape with a part filter that keeps parts at SF 0.01 (Q17's own keeps
/// none there), and `extra` added to the outer query's conditions.
fn q17_like(extra: &str) -> String {
    format!(
        "select sum(l_extendedprice) / 7.0 as avg_yearly from lineitem, part \
         where p_partkey = l_partkey and p_brand = 'Brand#23' {extra} \
         and l_quantity < (select 0.2 * avg(l_quantity) from lineitem \
         where l_partkey = p_partkey)"
    )
}

/// The reference's rows for `sql`.
fn reference_rows(sql: &str) -> Vec<Vec<String>> {
    let ctx = reference();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rows(
        &rt.block_on(async { ctx.sql(sql).await?.collect().await })
            .expect("reference"),
    )
}

#[test]
fn an_aggregation_over_rows_a_join_already_read_runs_in_the_host() {
    // Q17 joins part with lineitem (rows: l_partkey, l_quantity, l_extendedprice) and
    // semi-joins that with lineitem grouped by l_partkey (the average quantity per
    // part). Both lineitem scans hold the same part keys, so the aggregation's rows are
    // the join's: `reuse::ReusedDeviceScans` lets the aggregation take them from the
    // scan on the join's build side (which always ends first) and compute its states
    // in the host. The device reads lineitem once; the answer is the reference's.
    let sql = q17_like("");
    let want = reference_rows(&sql);
    assert_eq!(want.len(), 1);
    assert_ne!(want[0][0], "", "the parts of the brand have lineitems");
    let (mut client, cfg) = device(Layout::Pax);
    for choice in [Choice::Fixed(Strategy::CpuIsp), Choice::Auto] {
        let s = SqlSession::new(client, cfg.clone(), ScanSettings::new(choice)).expect("session");
        let a = run_with_same_programs_twice(&s, &sql, 17);
        assert_eq!(rows(&a.batches), want, "{choice:?}");
        let lineitem: Vec<_> = a.scans.iter().filter(|r| r.table == "lineitem").collect();
        assert_eq!(
            lineitem.len(),
            1,
            "{choice:?}: {:?}\n{}",
            scan_programs(&a),
            a.explained
        );
        assert!(
            lineitem[0].program.starts_with("columns"),
            "the scan of rows ran: {:?}",
            scan_programs(&a)
        );
        assert!(a.explained.contains("reused_rows="), "{}", a.explained);
        client = s.into_client().expect("client back");
    }
}

#[test]
fn an_aggregation_with_fewer_runtime_keys_takes_the_join_rows_filtered_in_the_host() {
    // A condition on the joined rows keeps lineitems of only some of the brand's parts:
    // the aggregation's keys (the parts left after the join) are among those the join's
    // scan held, so its rows are among that scan's rows: `reuse::ReusedDeviceScans`
    // hands them over filtered in the host by the aggregation's own program
    // (`csd_query::imply`), and the device reads lineitem once. The answer is the
    // reference's.
    let sql = q17_like("and p_size + l_linenumber = 9");
    let want = reference_rows(&sql);
    let (mut client, cfg) = device(Layout::Pax);
    for choice in [Choice::Fixed(Strategy::HwIsp), Choice::Auto] {
        let s = SqlSession::new(client, cfg.clone(), ScanSettings::new(choice)).expect("session");
        let a = s.run(&sql).expect("run");
        assert_eq!(rows(&a.batches), want, "{choice:?}");
        let programs: Vec<_> = a
            .scans
            .iter()
            .filter(|r| r.table == "lineitem")
            .map(|r| r.program.clone())
            .collect();
        assert_eq!(
            programs.len(),
            1,
            "{choice:?}: {:?}\n{}",
            scan_programs(&a),
            a.explained
        );
        assert!(programs[0].starts_with("columns"), "{programs:?}");
        assert!(a.explained.contains("reused_rows="), "{}", a.explained);
        client = s.into_client().expect("client back");
    }
}
