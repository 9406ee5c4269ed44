use super::*;
use csd_device::NvmeDevice;
use csd_ftl::{Ftl, FtlConfig};
use csd_host::Strategy;
use csd_nand::Nand;
use csd_sim::DeviceConfig;
use csd_table::datagen::{SyntheticGenerator, SyntheticSpec};
use proptest::prelude::*;

fn clients(n: usize) -> (Vec<Client>, DeviceConfig) {
    let cfg = DeviceConfig::preset("tiny").expect("preset");
    let v = (0..n)
        .map(|_| {
            let nand = Nand::new_in_memory(cfg.clone()).expect("nand");
            let ftl = Ftl::format(nand, FtlConfig::default()).expect("format");
            Client::new(NvmeDevice::new(ftl)).expect("client")
        })
        .collect();
    (v, cfg)
}

#[test]
fn manifest_round_trips_and_bad_ones_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut m = Manifest::new(3, "--preset tiny");
    m.put(Placement {
        name: "t".into(),
        layout: Layout::Pax,
        stripe_pages: 1,
        rows: 10,
        pages: 3,
        device_rows: vec![4, 4, 2],
        device_pages: vec![1, 1, 1],
    });
    m.write(dir.path()).expect("write");
    assert_eq!(Manifest::read(dir.path()).expect("read"), m);
    let text = std::fs::read_to_string(Manifest::path(dir.path())).expect("text");
    assert!(text.contains("version = 1"), "{text}");

    let mut bad = m.clone();
    bad.version = 2;
    assert!(bad.check().expect_err("version").contains("version 2"));
    let mut bad = m.clone();
    bad.tables[0].device_rows = vec![4, 4];
    assert!(bad.check().is_err());
    // Rows or pages per device that do not add up to the table's: the field is named.
    let mut bad = m.clone();
    bad.tables[0].device_rows = vec![4, 4, 3];
    assert_eq!(
        bad.check().expect_err("rows"),
        "table t: device_rows add up to 11, not its rows = 10 (the placement per device \
         does not add up)"
    );
    let mut bad = m.clone();
    bad.tables[0].device_pages = vec![1, 1, 0];
    assert!(
        bad.check()
            .expect_err("pages")
            .starts_with("table t: device_pages add up to 2, not its pages = 3"),
    );
    let mut bad = m.clone();
    bad.devices[0] = "../escape.img".into();
    assert!(bad.check().is_err());
    std::fs::write(Manifest::path(dir.path()), "format = 1").expect("write");
    assert!(matches!(
        Manifest::read(dir.path()),
        Err(ArrayError::Invalid { .. })
    ));
}

/// The layout is saved by its name (`nsm` / `pax`, as when it was a string), an old
/// manifest's text reads back, and a manifest with a layout that is neither is refused
/// with an error naming the field and the value.
#[test]
fn manifest_layout_is_saved_by_name_and_a_bad_one_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut m = Manifest::new(2, "--preset tiny");
    for (name, layout) in [("a", Layout::Nsm), ("b", Layout::Pax)] {
        m.put(Placement {
            name: name.into(),
            layout,
            stripe_pages: 1,
            rows: 2,
            pages: 2,
            device_rows: vec![1, 1],
            device_pages: vec![1, 1],
        });
    }
    m.write(dir.path()).expect("write");
    let text = std::fs::read_to_string(Manifest::path(dir.path())).expect("text");
    assert!(text.contains("layout = \"nsm\""), "{text}");
    assert!(text.contains("layout = \"pax\""), "{text}");
    assert_eq!(Manifest::read(dir.path()).expect("read"), m);

    // A manifest written by the build that kept the layout as a string.
    let old = "format = \"csd-array\"\nversion = 1\ndevice_config = \"--preset tiny\"\n\
               devices = [\"dev0.img\", \"dev1.img\"]\n\n[[tables]]\nname = \"nation\"\n\
               layout = \"nsm\"\nstripe_pages = 1\nrows = 25\npages = 1\n\
               device_rows = [25, 0]\ndevice_pages = [1, 0]\n";
    std::fs::write(Manifest::path(dir.path()), old).expect("write old");
    let read = Manifest::read(dir.path()).expect("old manifest");
    assert_eq!(read.tables[0].layout, Layout::Nsm);

    let bad = old.replace("layout = \"nsm\"", "layout = \"columnar\"");
    std::fs::write(Manifest::path(dir.path()), bad).expect("write bad");
    let err = Manifest::read(dir.path())
        .expect_err("bad layout")
        .to_string();
    assert!(
        err.contains("layout") && err.contains("columnar") && err.contains("`nsm`"),
        "{err}"
    );
}

fn synthetic(rows: u64) -> SyntheticGenerator {
    SyntheticGenerator::new(SyntheticSpec::new(4, rows, 3).expect("spec")).expect("gen")
}

/// The rows one device (of `cfg`) holding `source` as table `name` answers `sql` with,
/// under `strategy`: the reference an array's answer must equal.
fn one_device_rows(
    cfg: &DeviceConfig,
    name: &str,
    source: impl RowSource,
    sql: &str,
    strategy: Strategy,
) -> Vec<Vec<String>> {
    let (mut one, _) = clients(1);
    Catalog::load(&mut one[0], name, source, Layout::Pax, &mut |_| {}).expect("load");
    crate::SqlSession::new(
        one.pop().expect("client"),
        cfg.clone(),
        ScanSettings::new(Choice::Fixed(strategy)),
    )
    .expect("session")
    .run(sql)
    .expect("run")
    .rows()
    .expect("rows")
}

#[test]
fn striped_table_answers_like_one_device_with_per_device_reports() {
    let rows = 20_000;
    let (mut cs, cfg) = clients(3);
    let (reports, placement) =
        load_striped(&mut cs, "s4", synthetic(rows), Layout::Pax, 1, &|_| {}).expect("load");
    assert_eq!(placement.rows, rows);
    assert_eq!(reports.len(), 3);
    // Pages dealt round robin: device page counts differ by at most one.
    let max = placement.device_pages.iter().max().copied().unwrap_or(0);
    let min = placement.device_pages.iter().min().copied().unwrap_or(0);
    assert!(max - min <= 1, "{:?}", placement.device_pages);
    let sql = "SELECT COUNT(*), SUM(c2), MIN(c3), MAX(c4) FROM s4 WHERE c1 < 1000";
    let single = one_device_rows(&cfg, "s4", synthetic(rows), sql, Strategy::HwIsp);
    let mut array = ArraySession::new(
        cs,
        cfg,
        ScanSettings::new(Choice::Auto),
        2,
        std::slice::from_ref(&placement),
    )
    .expect("array session");
    let runs = array
        .run_strategies(
            sql,
            &[
                Choice::Fixed(Strategy::Ihp),
                Choice::Fixed(Strategy::CpuIsp),
                Choice::Fixed(Strategy::HwIsp),
            ],
        )
        .expect("run");
    for (_, a) in &runs {
        assert_eq!(a.answer.rows().expect("rows"), single);
        assert_eq!(a.devices.len(), 3);
        for d in &a.devices {
            assert_eq!(d.len(), 1, "one scan per device");
        }
        assert_eq!(a.modeled_ns(), a.device_ns().into_iter().max().unwrap_or(0));
    }
    // The aggregation ran in every device under hw-isp.
    let (_, hw) = &runs[2];
    for d in &hw.devices {
        assert!(
            d[0].program.contains("partial aggregate"),
            "{}",
            d[0].program
        );
    }
    assert!(
        hw.answer.explained.contains("[array]"),
        "{}",
        hw.answer.explained
    );
}

#[test]
fn a_device_without_its_stripe_is_an_error() {
    let (mut cs, cfg) = clients(2);
    let (_, mut placement) =
        load_striped(&mut cs, "s4", synthetic(3000), Layout::Nsm, 2, &|_| {}).expect("load");
    placement.device_rows[0] += 1;
    placement.device_rows[1] -= 1;
    let e = ArraySession::new(cs, cfg, ScanSettings::new(Choice::Auto), 1, &[placement])
        .expect_err("mismatch");
    assert!(e.to_string().contains("manifest"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(6))]
    /// Model: dealing units of `stripe` pages round robin puts page k on device
    /// (k / stripe) mod n; every row lands once.
    #[test]
    fn striping_matches_the_round_robin_model(
        n in 1usize..4, stripe in 1u64..3, rows in 1u64..6000
    ) {
        let (mut cs, _) = clients(n);
        let (_, p) = load_striped(&mut cs, "s", synthetic(rows), Layout::Nsm, stripe, &|_| {})
            .expect("load");
        let per_page = rows_per_page(Layout::Nsm, 16, cs[0].identify().flash_page_bytes as usize) as u64;
        let pages = rows.div_ceil(per_page);
        let mut want_pages = vec![0u64; n];
        let mut want_rows = vec![0u64; n];
        for k in 0..pages {
            let d = ((k / stripe) % n as u64) as usize;
            want_pages[d] += 1;
            want_rows[d] += per_page.min(rows - k * per_page);
        }
        prop_assert_eq!(p.device_pages, want_pages);
        prop_assert_eq!(p.device_rows, want_rows);
        prop_assert_eq!(p.rows, rows);
    }
}

#[test]
fn the_network_section_round_trips_and_bad_figures_are_refused_with_the_field_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut m = Manifest::new(2, "--preset tiny");
    m.workers = vec!["http://127.0.0.1:1".into(), "http://127.0.0.1:2".into()];
    m.network = Some(Network {
        bandwidth_gb_s: 0.5,
        latency_us: 20.0,
    });
    m.write(dir.path()).expect("write");
    assert_eq!(Manifest::read(dir.path()).expect("read"), m);
    let text = std::fs::read_to_string(Manifest::path(dir.path())).expect("text");
    assert!(text.contains("[network]"), "{text}");
    for (bw, lat, field) in [
        (0.0, 1.0, "network.bandwidth_gb_s"),
        (-1.0, 1.0, "network.bandwidth_gb_s"),
        (f64::NAN, 1.0, "network.bandwidth_gb_s"),
        (1.0, -1.0, "network.latency_us"),
        (1.0, f64::INFINITY, "network.latency_us"),
    ] {
        let mut bad = m.clone();
        bad.network = Some(Network {
            bandwidth_gb_s: bw,
            latency_us: lat,
        });
        let e = bad.check().expect_err("bad network");
        assert!(e.contains(field), "{e}");
        // Written anyway (write does not check), a reader refuses it and names it.
        bad.write(dir.path()).expect("write");
        let e = Manifest::read(dir.path()).expect_err("read refuses");
        assert!(e.to_string().contains(field), "{e}");
    }
}

/// A scan record of `ns` modeled nanoseconds.
fn record(ns: u64) -> ScanRecord {
    let report = csd_host::QueryReport {
        strategy: Strategy::HwIsp,
        table: "t".into(),
        layout: csd_table::page::Layout::Pax,
        pages: 0,
        table_bytes: 0,
        rows: 0,
        work: csd_query::WorkCounters::default(),
        result_rows: 0,
        modeled_ns: ns,
        stages: Vec::new(),
        bottleneck: None,
        flash_reads: 0,
        channel_bytes: 0,
        dram_bytes: 0,
        host_link_bytes: 0,
        device_cpu_cycles: 0,
        host_cpu_cycles: 0,
        commands: 0,
        energy: csd_sim::EnergyReport::default(),
        wall_s: 0.0,
        index: None,
        pages_skipped: 0,
        index_misses: 0,
        event_core: None,
        setup_ns: 0,
    };
    ScanRecord {
        table: "t".into(),
        strategy: Strategy::HwIsp,
        why: String::new(),
        program: String::new(),
        report,
    }
}

/// The model of the [module docs](super): per worker, its slowest device then all its
/// devices' bytes over one link (latency once); the array, its slowest worker.
fn model(device_ns: &[u64], workers: &[usize], bytes: &[u64], net: &Network) -> u64 {
    let w_count = workers.iter().max().map_or(0, |m| m + 1);
    (0..w_count)
        .map(|w| {
            let mine: Vec<usize> = (0..workers.len()).filter(|&d| workers[d] == w).collect();
            if mine.is_empty() {
                return 0;
            }
            let slowest = mine.iter().map(|&d| device_ns[d]).max().unwrap_or(0);
            let sent: u64 = mine.iter().map(|&d| bytes[d]).sum();
            let transfer = if sent == 0 {
                0.0
            } else {
                net.latency_us * 1e3 + sent as f64 / net.bandwidth_gb_s
            };
            slowest + transfer.round() as u64
        })
        .max()
        .unwrap_or(0)
}

proptest! {
    #[test]
    fn a_distributed_array_adds_each_workers_transfer_to_its_slowest_device(
        devices in proptest::collection::vec((0u64..1_000_000_000, 0u64..1u64 << 32, 0usize..3), 1..8),
        bw in 0.01f64..100.0,
        lat in 0.0f64..1000.0,
    ) {
        let net = Network { bandwidth_gb_s: bw, latency_us: lat };
        let device_ns: Vec<u64> = devices.iter().map(|d| d.0).collect();
        let bytes: Vec<u64> = devices.iter().map(|d| d.1).collect();
        let owner: Vec<usize> = devices.iter().map(|d| d.2).collect();
        let figures = ArrayFigures {
            // Two scans per device, adding up to its time.
            devices: device_ns.iter().map(|&ns| vec![record(ns / 2), record(ns - ns / 2)]).collect(),
            network: Some(NetworkFigures {
                network: net,
                workers: owner.iter().map(|w| format!("http://w{w}:1")).collect(),
                bytes: bytes.clone(),
                rows: bytes.iter().map(|b| b / 8).collect(),
            }),
        };
        prop_assert_eq!(figures.device_ns(), device_ns.clone());
        prop_assert_eq!(figures.modeled_ns(), model(&device_ns, &owner, &bytes, &net));
        // Never below the slowest device; every worker's bytes once.
        prop_assert!(figures.modeled_ns() >= array_ns(&figures.devices));
        let workers = figures.workers();
        prop_assert_eq!(workers.iter().map(|w| w.bytes).sum::<u64>(), bytes.iter().sum::<u64>());
        prop_assert_eq!(workers.iter().map(|w| w.devices.len()).sum::<usize>(), device_ns.len());
        // Without a network (in process) the array is its slowest device.
        let local = ArrayFigures { devices: figures.devices.clone(), network: None };
        prop_assert_eq!(local.modeled_ns(), array_ns(&local.devices));
        prop_assert!(local.workers().is_empty());
    }
}

#[test]
fn nothing_sent_costs_no_latency() {
    let net = Network::default();
    assert_eq!(net.transfer_ns(0), 0);
    // 1.25 GB/s: 1.25 MB in 1 ms, plus 50 µs.
    assert_eq!(net.transfer_ns(1_250_000), 1_050_000);
}

#[derive(Debug)]
enum OpenErr {
    Array(ArrayError),
    Host(#[allow(dead_code)] HostError),
}

impl From<ArrayError> for OpenErr {
    fn from(e: ArrayError) -> Self {
        OpenErr::Array(e)
    }
}

impl From<HostError> for OpenErr {
    fn from(e: HostError) -> Self {
        OpenErr::Host(e)
    }
}

fn block(preset: &str) -> csd_device::BlockDevice {
    let nand = Nand::new_in_memory(DeviceConfig::preset(preset).expect("preset")).expect("nand");
    csd_device::BlockDevice::new(Ftl::format(nand, FtlConfig::default()).expect("format"))
}

#[test]
fn open_clients_wants_devices_of_one_geometry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = Manifest::new(2, "--preset tiny");
    let (clients, cfg) =
        open_clients::<OpenErr>(&m, dir.path(), |_| Ok(block("tiny"))).expect("same geometry");
    assert_eq!(clients.len(), 2);
    assert_eq!(
        cfg.geometry,
        DeviceConfig::preset("tiny").expect("preset").geometry
    );

    let mut first = true;
    let e = open_clients::<OpenErr>(&m, dir.path(), |_| {
        let p = if first { "tiny" } else { "isp-ch8" };
        first = false;
        Ok(block(p))
    })
    .map(|_| ())
    .expect_err("two geometries");
    match e {
        OpenErr::Array(ArrayError::Invalid { path, message }) => {
            assert!(path.ends_with("dev1.img"), "{}", path.display());
            assert!(message.contains("geometry"), "{message}");
        }
        other => panic!("{other:?}"),
    }

    let empty = Manifest::new(0, "--preset tiny");
    let e = open_clients::<OpenErr>(&empty, dir.path(), |_| Ok(block("tiny")))
        .map(|_| ())
        .expect_err("no devices");
    assert!(
        matches!(e, OpenErr::Array(ArrayError::Invalid { .. })),
        "{e:?}"
    );
}

/// Rows of a nullable VARCHAR table (row images of different lengths), as `csd load
/// csv|parquet` makes them.
fn varchar_rows(rows: usize) -> crate::import::RowImages {
    use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema as ArrowSchema};
    let schema = Arc::new(ArrowSchema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]));
    let ids = Int64Array::from_iter_values(0..rows as i64);
    let names = StringArray::from_iter((0..rows).map(|i| match i % 7 {
        0 => None,
        k => Some("x".repeat(i % 300 + k)),
    }));
    let batch =
        RecordBatch::try_new(schema.clone(), vec![Arc::new(ids), Arc::new(names)]).expect("batch");
    crate::import::to_rows(
        "v",
        &schema,
        &[batch],
        &crate::import::ImportOptions::default(),
        false,
        std::path::Path::new("memory"),
    )
    .expect("rows")
}

#[test]
fn variable_length_rows_stripe_and_answer_like_one_device_and_reload() {
    let rows = 3_000;
    let (mut cs, cfg) = clients(2);
    let (_, placement) =
        load_striped(&mut cs, "v", varchar_rows(rows), Layout::Pax, 1, &|_| {}).expect("load");
    assert_eq!(placement.rows, rows as u64);
    assert!(
        placement.device_rows.iter().all(|&r| r > 0),
        "{placement:?}"
    );
    // A table too small to reach the second device leaves it an empty member; loading
    // it again replaces both (the empty one holds no LBAs to trim).
    let (_, small) =
        load_striped(&mut cs, "w", varchar_rows(3), Layout::Nsm, 1, &|_| {}).expect("load");
    assert_eq!(small.device_rows, vec![3, 0]);
    let (_, small) =
        load_striped(&mut cs, "w", varchar_rows(5), Layout::Nsm, 1, &|_| {}).expect("reload");
    assert_eq!(small.rows, 5);
    let sql = "SELECT COUNT(*), COUNT(name), SUM(LENGTH(name)), MIN(name), MAX(id) FROM v WHERE name LIKE 'xxx%'";
    let single = one_device_rows(&cfg, "v", varchar_rows(rows), sql, Strategy::Ihp);
    let mut array = ArraySession::new(
        cs,
        cfg,
        ScanSettings::new(Choice::Auto),
        2,
        &[placement, small],
    )
    .expect("array session");
    for (_, a) in array
        .run_strategies(
            sql,
            &[
                Choice::Fixed(Strategy::Ihp),
                Choice::Fixed(Strategy::CpuIsp),
            ],
        )
        .expect("run")
    {
        assert_eq!(a.answer.rows().expect("rows"), single);
    }
    let w = array.run("SELECT COUNT(*) FROM w").expect("run");
    assert_eq!(w.answer.rows().expect("rows"), vec![vec!["5".to_string()]]);
}
