//! Host power loss under the store, on an image file: random puts and deletes with syncs
//! on either interface, then a host crash (of each 4 KiB page of the image changed since
//! the host's last sync, the synced or a later version: `csd_nand::hostcrash`), FTL
//! recovery and store recovery. Every change the store had synced reads back; nothing
//! reads back that was never written; the image opens every time.

mod common;

use common::*;
use csd_device::NvmeDevice;
use csd_ftl::{Ftl, FtlConfig};
use csd_host::Client;
use csd_kv::Interface;
use csd_nand::{Nand, host_crash_image};
use csd_sim::DeviceConfig;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::collections::BTreeMap;
use std::path::Path;

fn start(img: &Path, durable: &Path, ftl_cfg: FtlConfig, fresh: bool) -> Client {
    let ftl = if fresh {
        let cfg = DeviceConfig::preset("tiny").expect("tiny preset");
        Ftl::format(Nand::create_image(img, cfg).expect("create"), ftl_cfg).expect("format")
    } else {
        let nand = Nand::open_image(img, None).expect("the image must open");
        assert!(nand.opened_unclean());
        match Ftl::try_recover(nand, ftl_cfg) {
            Ok(f) => f,
            Err(f) => panic!("FTL recovery: {}", f.error),
        }
    };
    let mut c = Client::new(NvmeDevice::new(ftl)).expect("client");
    c.device()
        .block_mut()
        .ftl_mut()
        .nand_mut()
        .track_durable_copy(durable)
        .expect("durable copy");
    c
}

fn run(interface: Interface, rounds: u64, seed: u64) {
    let dir = tempfile::tempdir().expect("temp dir");
    let (img, durable, crashed) = (
        dir.path().join("kv.img"),
        dir.path().join("kv.img.durable"),
        dir.path().join("crashed.img"),
    );
    let ftl_cfg = FtlConfig::default();
    let cfg = small(interface);
    let mut s = open(start(&img, &durable, ftl_cfg, true), cfg.clone());
    let mut rng = SmallRng::seed_from_u64(seed);
    // Per key: the value at the last sync, and the values written since.
    let mut synced: BTreeMap<u64, Option<Vec<u8>>> = BTreeMap::new();
    let mut since: BTreeMap<u64, Vec<Option<Vec<u8>>>> = BTreeMap::new();
    let mut version = 0;
    let mut syncs = 0;
    for round in 0..rounds {
        for _ in 0..rng.random_range(50..400) {
            version += 1;
            let k = rng.random_range(0..300u64);
            match rng.random_range(0..100) {
                0..80 => {
                    let v = value(k, version, rng.random_range(8..300));
                    s.put(&key(k), &v).expect("put");
                    since.entry(k).or_default().push(Some(v));
                }
                80..92 => {
                    s.delete(&key(k)).expect("delete");
                    since.entry(k).or_default().push(None);
                }
                _ => {
                    s.sync().expect("sync");
                    syncs += 1;
                    for (k, h) in std::mem::take(&mut since) {
                        synced.insert(k, h.last().cloned().flatten());
                    }
                }
            }
        }
        drop(s);
        let keep = [0.0, 0.5, 1.0, 0.2][(round % 4) as usize];
        host_crash_image(&img, &durable, &crashed, seed ^ round, keep).expect("crash image");
        std::fs::rename(&crashed, &img).expect("replace");
        s = open(start(&img, &durable, ftl_cfg, false), cfg.clone());
        for k in 0..300u64 {
            let got = s.get(&key(k)).expect("get");
            let base = synced.get(&k).cloned().flatten();
            let later = since.remove(&k).unwrap_or_default();
            assert!(
                got == base || later.contains(&got),
                "{interface:?} round {round} (keep {keep}): key {k} reads {:?} bytes, synced {:?}, {} changes since",
                got.as_ref().map(Vec::len),
                base.as_ref().map(Vec::len),
                later.len()
            );
            synced.insert(k, got);
        }
    }
    assert!(syncs > 10, "the run must sync");
}

#[test]
fn host_crash_loses_no_synced_change_on_the_block_interface() {
    run(Interface::Block, 12, 7);
}

#[test]
fn host_crash_loses_no_synced_change_on_the_batch_interface() {
    run(Interface::Batch, 12, 8);
}
