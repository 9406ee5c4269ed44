//! The SMART / health log through the command interface moves as a drive wears and
//! fails: percentage used grows with erases, available spare shrinks with grown bad
//! blocks, the critical-warning bits rise, and at the end of life the namespace is write
//! protected while reads keep working. A drive at its rated endurance ends its life by
//! wear alone, and its log (media errors included) survives closing and reopening the
//! image.

use csd_device::stack::{self, OpenOptions};
use csd_device::{Command, LogPage, NvmeDevice, Payload, SmartLog, Status};
use csd_ftl::{FtlConfig, WARN_READ_ONLY, WARN_RELIABILITY, WARN_SPARE};
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

fn status_of(dev: &mut NvmeDevice, q: csd_device::QueueId, cmd: Command) -> Status {
    dev.submit(q, cmd, SimTime::ZERO).unwrap();
    dev.process();
    dev.poll(q).unwrap().status
}

/// The fields of the log a reopened drive must report as they were.
fn nvme_fields(s: &SmartLog) -> impl PartialEq + std::fmt::Debug {
    (
        s.critical_warning,
        s.available_spare_pct,
        s.percentage_used,
        s.rated_endurance,
        s.media_errors,
        s.integrity_errors,
        s.read_only.clone(),
        s.host_written_bytes,
        s.bad_blocks,
    )
}

#[test]
fn wear_ends_life_at_the_endurance_and_the_smart_log_survives_close_and_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("worn.img");
    let mut cfg = DeviceConfig::preset("tiny").unwrap();
    cfg.geometry.blocks_per_plane = 32;
    cfg.geometry.pages_per_block = 8;
    cfg.flash.endurance = 3;
    let ftl = FtlConfig {
        op: 0.3,
        ..FtlConfig::default()
    };
    let mut dev = NvmeDevice::from_block(stack::create_image(&path, cfg, ftl).unwrap());
    let q = dev.create_queue_pair(8).unwrap();
    let lbas = dev.block().ftl().lbas();
    let mut x = 11u64;
    let mut protected = None;
    for i in 0..200_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let write = Command::Write {
            lba: x % lbas,
            data: vec![(i & 0xFF) as u8; 4096],
        };
        match status_of(&mut dev, q, write) {
            Status::WriteProtected(m) => {
                protected = Some(m);
                break;
            }
            s => assert!(s.is_success(), "write {i}: {s}"),
        }
    }
    let m = protected.expect("the drive never reached its end of life");
    assert!(m.contains("rated endurance"), "{m}");
    // Media errors at the end of life: a damaged sector read 20 times.
    let lba = 5;
    let (ppa, s) = dev.block_mut().ftl_mut().location_of_lba(lba).unwrap();
    dev.block_mut()
        .ftl_mut()
        .nand_mut()
        .corrupt(ppa, s, 100, 0x10)
        .unwrap();
    for _ in 0..20 {
        let st = status_of(&mut dev, q, Command::Read { lba, blocks: 1 });
        assert!(matches!(st, Status::UnrecoveredReadError { .. }), "{st}");
    }
    let before = smart(&mut dev, q);
    assert_eq!(before.media_errors, 20);
    assert_eq!(before.rated_endurance, 3);
    assert!((100..=110).contains(&before.percentage_used), "{before:?}");
    assert_ne!(before.critical_warning & WARN_RELIABILITY, 0, "{before:?}");
    assert_ne!(before.critical_warning & WARN_READ_ONLY, 0, "{before:?}");
    assert_eq!(
        before.read_only.as_deref(),
        Some("rated endurance reached (worn out)")
    );
    // Close (the CLI then says "synced"), reopen: nothing replayed, the same log.
    stack::close(dev.block_mut()).expect("a worn-out drive must close cleanly");
    let closed = SmartLog::from_ftl(dev.block().ftl());
    drop(dev);
    let (blk, rep) = stack::open_image(&path, &OpenOptions::read_write()).unwrap();
    let r = rep.recovery.expect("an existing FTL was opened");
    assert!(r.clean && r.log_pages == 0 && r.log_records == 0, "{r:?}");
    assert_eq!(rep.notice(&path), None);
    let mut dev = NvmeDevice::from_block(blk);
    let q = dev.create_queue_pair(8).unwrap();
    let after = smart(&mut dev, q);
    assert_eq!(nvme_fields(&after), nvme_fields(&before));
    assert_eq!(nvme_fields(&after), nvme_fields(&closed));
    assert_eq!(
        (
            after.erase_count_min,
            after.erase_count_avg,
            after.erase_count_max
        ),
        (
            closed.erase_count_min,
            closed.erase_count_avg,
            closed.erase_count_max
        )
    );
    // Still read-only after the reopen; reads keep working.
    let st = status_of(
        &mut dev,
        q,
        Command::Write {
            lba: 0,
            data: vec![1; 4096],
        },
    );
    assert!(matches!(st, Status::WriteProtected(_)), "{st}");
    assert!(status_of(&mut dev, q, Command::Read { lba: 0, blocks: 1 }).is_success());
}
