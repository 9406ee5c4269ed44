//! An array of four devices (smart-ssd §4.3) answers TPC-H Q6 and joins (Q3, Q14)
//! exactly as one device holding the same tables does (SF 0.01), with every strategy,
//! and reports per-device figures.

use csd_device::NvmeDevice;
use csd_ftl::{Ftl, FtlConfig};
use csd_host::{Catalog, Client, Strategy};
use csd_nand::Nand;
use csd_sim::DeviceConfig;
use csd_sql::array::load_striped;
use csd_sql::{ArraySession, Choice, ScanSettings, SqlSession, tpch::QUERIES};
use csd_table::Layout;
use csd_table::datagen::{TpchGenerator, TpchTable};

const SF: f64 = 0.01;

fn client(cfg: &DeviceConfig) -> Client {
    let nand = Nand::new_in_memory(cfg.clone()).expect("nand");
    let ftl = Ftl::format(nand, FtlConfig::default()).expect("format");
    Client::new(NvmeDevice::new(ftl)).expect("client")
}

#[test]
fn four_device_array_equals_one_device_on_q6_q3_q14() {
    let cfg = DeviceConfig::preset("nvme-tlc").expect("preset");
    let mut one = client(&cfg);
    let mut four: Vec<Client> = (0..4).map(|_| client(&cfg)).collect();
    let mut placements = Vec::new();
    for t in TpchTable::ALL {
        let g = TpchGenerator::new(t, SF).expect("generator");
        Catalog::load(&mut one, t.name(), g, Layout::Pax, &mut |_| {}).expect("load");
        let g = TpchGenerator::new(t, SF).expect("generator");
        let (_, p) = load_striped(&mut four, t.name(), g, Layout::Pax, 1, &|_| {}).expect("load");
        placements.push(p);
    }
    let li = placements
        .iter()
        .find(|p| p.name == "lineitem")
        .expect("lineitem");
    assert!(
        li.device_pages.iter().all(|&p| p > 0),
        "{:?}",
        li.device_pages
    );
    let mut single =
        SqlSession::new(one, cfg.clone(), ScanSettings::new(Choice::Auto)).expect("single");
    let mut array = ArraySession::new(four, cfg, ScanSettings::new(Choice::Auto), 2, &placements)
        .expect("array");
    let choices = [
        Choice::Fixed(Strategy::Ihp),
        Choice::Fixed(Strategy::CpuIsp),
        Choice::Fixed(Strategy::HwIsp),
        Choice::Auto,
    ];
    for q in [6usize, 3, 14] {
        let sql = QUERIES[q - 1];
        let mut want = single
            .run_strategies(sql, &[Choice::Fixed(Strategy::HwIsp)])
            .expect("single")[0]
            .1
            .rows()
            .expect("rows");
        want.sort();
        assert!(!want.is_empty(), "q{q}");
        for (c, a) in array.run_strategies(sql, &choices).expect("array") {
            let mut got = a.answer.rows().expect("rows");
            got.sort();
            assert_eq!(got, want, "q{q} with {}", c.name());
            assert_eq!(a.devices.len(), 4);
            for (d, scans) in a.devices.iter().enumerate() {
                assert!(!scans.is_empty(), "q{q}: device {d} ran no scan");
            }
            let ns = a.device_ns();
            assert_eq!(a.modeled_ns(), ns.iter().copied().max().unwrap_or(0));
        }
    }
}
