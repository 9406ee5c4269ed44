//! The SMART / health log through the command interface moves as a drive wears and
//! fails: percentage used grows with erases, available spare shrinks with grown bad
//! blocks, the critical-warning bits rise, and at the end of life the namespace is write
//! protected while reads keep working.

use csd_device::{Command, LogPage, NvmeDevice, Payload, SmartLog, Status};
use csd_ftl::{FtlConfig, WARN_READ_ONLY, WARN_SPARE};
use csd_sim::{DeviceConfig, SimTime};

fn smart(dev: &mut NvmeDevice, q: csd_device::QueueId) -> SmartLog {
    dev.submit(q, Command::GetLogPage(LogPage::Smart), SimTime::ZERO)
        .unwrap();
    dev.process();
    match dev.poll(q).unwrap().payload {
        Payload::Smart(s) => s,
        other => panic!("not a SMART log: {other:?}"),
    }
}

#[test]
fn smart_fields_move_as_blocks_wear_and_fail() {
    let mut cfg = DeviceConfig::preset("tiny").unwrap();
    cfg.geometry.blocks_per_plane = 40;
    cfg.geometry.pages_per_block = 8;
    cfg.flash.endurance = 60;
    cfg.faults.seed = 3;
    cfg.faults.program_fail_prob = 0.004;
    cfg.faults.erase_fail_prob = 0.004;
    let ftl = FtlConfig {
        op: 0.4,
        ..FtlConfig::default()
    };
    let mut dev = NvmeDevice::from_block(csd_device::stack::in_memory(cfg, ftl).unwrap());
    let q = dev.create_queue_pair(8).unwrap();
    let first = smart(&mut dev, q);
    assert_eq!(first.available_spare_pct, 100);
    assert_eq!(first.percentage_used, 0);
    assert_eq!(first.critical_warning, 0);
    assert_eq!(first.read_only, None);
    let lbas = dev.block().ftl().lbas();
    let mut logs = vec![first];
    let mut x = 7u64;
    let mut protected = None;
    for i in 0..400_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let data = vec![(i & 0xFF) as u8; 4096];
        dev.submit(
            q,
            Command::Write {
                lba: x % lbas,
                data,
            },
            SimTime::ZERO,
        )
        .unwrap();
        dev.process();
        let c = dev.poll(q).unwrap();
        if let Status::WriteProtected(m) = &c.status {
            protected = Some(m.clone());
            break;
        }
        assert!(c.status.is_success(), "write {i}: {}", c.status);
        if i % 2000 == 0 {
            logs.push(smart(&mut dev, q));
        }
    }
    let m = protected.expect("the drive never reached its end of life");
    assert!(m.contains("spare blocks exhausted"), "{m}");
    let last = smart(&mut dev, q);
    for w in logs.windows(2) {
        assert!(w[1].available_spare_pct <= w[0].available_spare_pct);
        assert!(w[1].percentage_used >= w[0].percentage_used);
        assert!(w[1].bad_blocks >= w[0].bad_blocks);
    }
    assert!(last.percentage_used > 0, "{last:?}");
    assert!(
        last.available_spare_pct < last.spare_threshold_pct,
        "{last:?}"
    );
    assert_ne!(last.critical_warning & WARN_SPARE, 0);
    assert_ne!(last.critical_warning & WARN_READ_ONLY, 0);
    assert_eq!(last.read_only.as_deref(), Some("spare blocks exhausted"));
    // The JSON of `csd device smart --json` carries them.
    let v = serde_json::to_value(&last).unwrap();
    for k in [
        "critical_warning",
        "available_spare_pct",
        "spare_threshold_pct",
        "percentage_used",
        "media_errors",
        "integrity_errors",
        "read_only",
        "gc_read_bytes",
        "reclaimed_bytes",
        "read_amplification",
    ] {
        assert!(v.get(k).is_some(), "no {k} in {v}");
    }
    // Reads keep working at the end of life.
    dev.submit(q, Command::Read { lba: 0, blocks: 1 }, SimTime::ZERO)
        .unwrap();
    dev.process();
    assert!(dev.poll(q).unwrap().status.is_success());
}
