//! A full file system under an image: writes fail with a clear "image file system is
//! full" error and the device turns read-only, everything acknowledged before stays
//! readable, nothing dies of SIGBUS, and the image opens again later (read-only needs no
//! space at all).

use csd_device::BlockDevice;
use csd_device::stack::{self, OpenOptions};
use csd_ftl::{FtlConfig, FtlError, ReadOnlyReason};
use csd_sim::{DeviceConfig, SimTime};
use std::path::Path;

/// Mount a small tmpfs (needs root / CAP_SYS_ADMIN); `false` when this machine cannot.
fn small_tmpfs(dir: &Path, mib: u32) -> bool {
    std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success())
}

fn pattern(ss: usize, lba: u64) -> Vec<u8> {
    (0..ss as u64)
        .map(|i| (i ^ lba.wrapping_mul(77)) as u8)
        .collect()
}

/// Write LBAs 0, 1, … with their patterns until a write fails; returns how many were
/// acknowledged and the error. `never` is the message if every LBA fits.
fn fill_until_refused(dev: &mut BlockDevice, never: &str) -> (u64, FtlError) {
    let ss = dev.ftl().lba_size();
    let mut acked = 0u64;
    loop {
        match dev
            .ftl_mut()
            .write(acked, &pattern(ss, acked), SimTime::ZERO)
        {
            Ok(_) => acked += 1,
            Err(e) => return (acked, e),
        }
        assert!(acked < dev.ftl().lbas(), "{never}");
    }
}

#[test]
fn a_full_file_system_turns_the_device_read_only_and_keeps_what_was_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    if !small_tmpfs(&mnt, 6) {
        eprintln!("notice: cannot mount a tmpfs here; the full-file-system test is skipped");
        return;
    }
    let path = mnt.join("full.img");
    let outcome = std::panic::catch_unwind(|| {
        let cfg = DeviceConfig::preset("tiny").unwrap();
        let mut dev = stack::create_image(&path, cfg, FtlConfig::default()).unwrap();
        let ss = dev.ftl().lba_size();
        let (acked, err) = fill_until_refused(&mut dev, "a 64 MiB device does not fit 6 MiB");
        assert_eq!(
            err,
            FtlError::ReadOnly {
                reason: ReadOnlyReason::ImageFull
            }
        );
        assert!(
            err.to_string().contains("image file system is full"),
            "{err}"
        );
        assert!(
            acked > 100,
            "only {acked} writes before the file system filled"
        );
        eprintln!("{acked} LBAs acknowledged before the 6 MiB file system filled: {err}");
        // Reads keep working; later writes are refused the same way.
        let mut buf = vec![0u8; ss];
        for l in 0..acked {
            dev.ftl_mut().read(l, &mut buf, SimTime::ZERO).unwrap();
            assert_eq!(buf, pattern(ss, l), "LBA {l}");
        }
        assert!(dev.ftl_mut().write(0, &buf, SimTime::ZERO).is_err());
        let _ = stack::close(&mut dev);
        drop(dev);
        // The image opens again read-only (no space needed) with everything there.
        let (mut ro, _) = stack::open_image(&path, &OpenOptions::read_only()).unwrap();
        for l in 0..acked {
            ro.ftl_mut().read(l, &mut buf, SimTime::ZERO).unwrap();
            assert_eq!(buf, pattern(ss, l), "LBA {l} after reopening");
        }
    });
    let _ = std::process::Command::new("umount").arg(&mnt).status();
    if let Err(p) = outcome {
        std::panic::resume_unwind(p);
    }
}

/// An in-memory device at its memory limit: the write that needs one more erase block
/// fails with a clear error, the device turns read-only (no out-of-memory kill), and every
/// acknowledged write reads back.
#[test]
fn an_in_memory_device_at_its_memory_limit_turns_read_only_and_keeps_what_was_acknowledged() {
    let cfg = DeviceConfig::preset("tiny").unwrap();
    let mut dev = stack::in_memory(cfg, FtlConfig::default()).unwrap();
    let nand = dev.ftl_mut().nand_mut();
    assert!(nand.memory_limit().is_some() || std::env::var("CSD_MEMORY_LIMIT").is_ok());
    // Room for the blocks formatting took and about eight more.
    let held = nand.resident_bytes();
    let block = nand.geometry().block_bytes();
    assert!(nand.set_memory_limit(Some(held + 8 * (block + 4096))));
    let ss = dev.ftl().lba_size();
    let (acked, err) = fill_until_refused(&mut dev, "the limit never struck");
    assert_eq!(
        err,
        FtlError::ReadOnly {
            reason: ReadOnlyReason::MemoryFull
        }
    );
    assert!(err.to_string().contains("memory limit"), "{err}");
    assert!(acked > 100, "only {acked} writes before the limit");
    let mut buf = vec![0u8; ss];
    for l in 0..acked {
        dev.ftl_mut().read(l, &mut buf, SimTime::ZERO).unwrap();
        assert_eq!(buf, pattern(ss, l), "LBA {l}");
    }
    assert!(dev.ftl_mut().write(0, &buf, SimTime::ZERO).is_err());
    // Not a limit on images.
    let dir = tempfile::tempdir().unwrap();
    let mut img = stack::create_image(
        &dir.path().join("a.img"),
        DeviceConfig::preset("tiny").unwrap(),
        FtlConfig::default(),
    )
    .unwrap();
    assert!(!img.ftl_mut().nand_mut().set_memory_limit(Some(1)));
    assert_eq!(img.ftl().nand().memory_limit(), None);
}
