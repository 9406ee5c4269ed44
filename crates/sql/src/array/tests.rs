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
        layout: "pax".into(),
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
    let mut bad = m.clone();
    bad.devices[0] = "../escape.img".into();
    assert!(bad.check().is_err());
    std::fs::write(Manifest::path(dir.path()), "format = 1").expect("write");
    assert!(matches!(
        Manifest::read(dir.path()),
        Err(ArrayError::Invalid { .. })
    ));
}

fn synthetic(rows: u64) -> SyntheticGenerator {
    SyntheticGenerator::new(SyntheticSpec::new(4, rows, 3).expect("spec")).expect("gen")
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
    let (mut one, _) = clients(1);
    Catalog::load(&mut one[0], "s4", synthetic(rows), Layout::Pax, &mut |_| {}).expect("load");
    let sql = "SELECT COUNT(*), SUM(c2), MIN(c3), MAX(c4) FROM s4 WHERE c1 < 1000";
    let single = crate::SqlSession::new(
        one.pop().expect("client"),
        cfg.clone(),
        ScanSettings::new(Choice::Fixed(Strategy::HwIsp)),
    )
    .expect("session")
    .run(sql)
    .expect("run")
    .rows()
    .expect("rows");
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
