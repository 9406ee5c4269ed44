//! SQL DML on an image file through a host power loss: INSERT statements run until the
//! device loses power at a random flash operation and the host loses, of each 4 KiB
//! page of the image changed since its last sync, the synced or a later version
//! (`csd_nand::hostcrash`). After recovery every acknowledged statement is there, the
//! interrupted one is there whole or not at all, and the image opens every time.

use csd_device::NvmeDevice;
use csd_ftl::{Ftl, FtlConfig};
use csd_host::{Catalog, Client, dml, slotted};
use csd_nand::{Nand, PowerCut, host_crash_image};
use csd_sim::DeviceConfig;
use csd_table::Layout;
use csd_table::datagen::{SyntheticGenerator, SyntheticSpec};
use std::path::Path;

fn client(ftl: Ftl, durable: &Path) -> Client {
    let mut c = Client::new(NvmeDevice::new(ftl)).expect("client");
    c.device()
        .block_mut()
        .ftl_mut()
        .nand_mut()
        .track_durable_copy(durable)
        .expect("durable copy");
    c
}

/// Rows of every page of the table, as the device holds them.
fn all_rows(c: &mut Client) -> Vec<Vec<csd_table::Value>> {
    let cat = Catalog::read(c).expect("catalog");
    let t = cat
        .tables
        .first()
        .expect("the loaded table must survive")
        .clone();
    (0..t.pages)
        .flat_map(|p| {
            let page = Catalog::read_page(c, &t, p).expect("page");
            slotted::parse_rows(&t.schema, &page)
        })
        .collect()
}

#[test]
fn inserts_survive_host_power_loss_whole_or_not_at_all() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (img, durable, crashed) = (
        dir.path().join("t.img"),
        dir.path().join("t.img.durable"),
        dir.path().join("crashed.img"),
    );
    let cfg = DeviceConfig::preset("tiny").expect("tiny preset");
    let ftl = Ftl::format(
        Nand::create_image(&img, cfg.clone()).expect("create"),
        FtlConfig::default(),
    )
    .expect("format");
    let mut c = client(ftl, &durable);
    let spec = SyntheticSpec::synthetic4(2_000, 1).expect("spec");
    Catalog::load(
        &mut c,
        "s4",
        SyntheticGenerator::new(spec).expect("generator"),
        Layout::Nsm,
        &mut |_| {},
    )
    .expect("load");
    let base = all_rows(&mut c);
    let mut expected = base.len();
    for round in 0..12u64 {
        c.device()
            .block_mut()
            .ftl_mut()
            .nand_mut()
            .arm_power_cut(PowerCut::AtOp(20 + round * 37 % 200));
        let mut interrupted = 0;
        for i in 0..100 {
            let n = 1 + (round as usize * 7 + i) % 40;
            let rows: Vec<_> = base.iter().cycle().skip(i * 13).take(n).cloned().collect();
            match dml::insert(&mut c, &cfg, "s4", &rows) {
                Ok(r) => {
                    expected += n;
                    assert_eq!(r.table_rows as usize, expected);
                }
                Err(_) => {
                    interrupted = n;
                    break;
                }
            }
        }
        assert!(interrupted > 0, "round {round}: the power cut must strike");
        drop(c);
        let keep = [0.0, 0.5, 1.0][(round % 3) as usize];
        host_crash_image(&img, &durable, &crashed, round, keep).expect("crash image");
        std::fs::rename(&crashed, &img).expect("replace");
        let nand = Nand::open_image(&img, None).expect("the image must open");
        let ftl = match Ftl::try_recover(nand, FtlConfig::default()) {
            Ok(f) => f,
            Err(f) => panic!("round {round}: recovery: {}", f.error),
        };
        c = client(ftl, &durable);
        let rows = all_rows(&mut c).len();
        let cat_rows = Catalog::read(&mut c).expect("catalog").tables[0].rows as usize;
        assert_eq!(rows, cat_rows, "round {round}: the catalog counts the rows");
        assert!(
            rows == expected || rows == expected + interrupted,
            "round {round} (keep {keep}): {rows} rows, expected {expected} (+{interrupted} interrupted)"
        );
        expected = rows;
    }
}
