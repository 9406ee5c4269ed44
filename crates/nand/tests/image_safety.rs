//! A damaged image or a careless user never costs data silently at the media layer:
//! every header byte is checked (a mutation is a clear error, never a panic), a truncated
//! file or a corrupt block table is refused, a read-only open never changes the file, and
//! a full file system is an error instead of a SIGBUS.

use csd_nand::{Access, BlockId, Nand, NandError, Ppa};
use csd_sim::{DeviceConfig, SimTime};
use std::path::Path;

fn tiny() -> DeviceConfig {
    DeviceConfig::preset("tiny").expect("tiny preset")
}

fn page(cfg: &DeviceConfig, seed: u8) -> Vec<u8> {
    (0..cfg.geometry.page_size as usize)
        .map(|i| (i as u8).wrapping_mul(7) ^ seed)
        .collect()
}

/// A small image with a few programmed pages.
fn written_image(path: &Path) -> DeviceConfig {
    written_image_version(path, 4)
}

/// [`written_image`] in image format `version`.
fn written_image_version(path: &Path, version: u32) -> DeviceConfig {
    let cfg = tiny();
    let mut n = Nand::create_image_version(path, cfg.clone(), version).unwrap();
    for p in 0..3 {
        n.program(
            Ppa::new(BlockId(5), p),
            &page(&cfg, p as u8),
            &[],
            SimTime::ZERO,
        )
        .unwrap();
    }
    n.sync().unwrap();
    cfg
}

fn header_len(path: &Path) -> usize {
    // The fixed header is 96 bytes; the config text follows. Mutate both (up to the end
    // of the config text, which is where the zero padding starts).
    let bytes = read_header(path);
    bytes[96..65536]
        .iter()
        .position(|&b| b == 0)
        .map_or(65536, |i| 96 + i)
}

#[test]
fn every_header_byte_mutation_is_a_clear_error_not_a_panic() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.img");
    written_image(&path);
    let n = header_len(&path);
    assert!(n > 200, "config text present");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let mut errors = 0;
    // Every byte of the fixed header, and every 7th byte of the config text.
    let offsets: Vec<usize> = (0..96).chain((96..n).step_by(7)).collect();
    for &off in &offsets {
        let mut orig = [0u8; 1];
        file.read_exact_at(&mut orig, off as u64).unwrap();
        for flip in [0x01u8, 0x80, 0xFF] {
            file.write_all_at(&[orig[0] ^ flip], off as u64).unwrap();
            match open_retrying(&path) {
                Err(NandError::Image { reason, .. }) => {
                    assert!(!reason.is_empty());
                    errors += 1;
                }
                Err(e) => panic!("byte {off} ^ {flip:#x}: unexpected error kind {e}"),
                Ok(_) => panic!("byte {off} ^ {flip:#x}: a corrupt header was accepted"),
            }
        }
        file.write_all_at(&orig, off as u64).unwrap();
    }
    assert_eq!(errors, offsets.len() * 3);
    // The original still opens and reads back.
    let mut n = open_retrying(&path).unwrap();
    let mut buf = vec![0u8; tiny().geometry.page_size as usize];
    n.read(Ppa::new(BlockId(5), 2), 0, &mut buf, &mut [], SimTime::ZERO)
        .unwrap();
    assert_eq!(buf, page(&tiny(), 2));
}

/// Open, retrying while another test's child process (between its fork and exec) still
/// shares our last open file description and so its lock.
fn open_retrying(path: &Path) -> Result<Nand, NandError> {
    for _ in 0..100 {
        match Nand::open_image(path, None) {
            Err(NandError::Locked { .. }) => {
                std::thread::sleep(std::time::Duration::from_millis(5))
            }
            r => return r,
        }
    }
    Nand::open_image(path, None)
}

/// Rewrite one u64 field of the fixed header and fix up the CRC, so that the field's own
/// check (not the checksum) must catch it.
fn set_field_with_valid_crc(path: &Path, off: usize, value: u64) {
    use std::os::unix::fs::FileExt;
    let mut bytes = read_header(path);
    bytes[off..off + 8].copy_from_slice(&value.to_le_bytes());
    let clen = u32::from_le_bytes(bytes[52..56].try_into().unwrap()) as usize;
    bytes[88..92].fill(0);
    let h = crc32c::crc32c(&bytes[..96]);
    let crc = crc32c::crc32c_append(h, &bytes[96..96 + clen]);
    bytes[88..92].copy_from_slice(&crc.to_le_bytes());
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(&bytes, 0).unwrap();
}

fn read_header(path: &Path) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let mut h = vec![0u8; 65536];
    std::fs::File::open(path)
        .unwrap()
        .read_exact_at(&mut h, 0)
        .unwrap();
    h
}

fn write_header(path: &Path, h: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(h, 0).unwrap();
}

#[test]
fn offsets_and_sizes_are_checked_against_the_layout_and_file_length() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("o.img");
    written_image(&path);
    let original = read_header(&path);
    let len = std::fs::metadata(&path).unwrap().len();
    // Field offsets in the fixed header: block_bytes 56, meta_offset 64, blocks_offset 72,
    // blocks 80.
    for (off, field, value) in [
        (64, "meta_offset", 0u64),
        (64, "meta_offset", u64::MAX),
        (72, "blocks_offset", 0),
        (72, "blocks_offset", u64::MAX - 5),
        (56, "block_bytes", 1 << 62),
        (80, "blocks", u64::MAX),
    ] {
        write_header(&path, &original);
        set_field_with_valid_crc(&path, off, value);
        let e = open_retrying(&path).expect_err(field);
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("corrupt image header: {field} is")),
            "{field}={value}: {msg}"
        );
    }
    // Truncated file.
    write_header(&path, &original);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(len / 2).unwrap();
    drop(f);
    let e = open_retrying(&path).expect_err("truncated");
    assert!(e.to_string().contains("truncated"), "{e}");
}

#[test]
fn a_corrupt_block_table_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.img");
    written_image(&path);
    // Block 3's write pointer (meta table at 64 KiB, 16 bytes per block, next_page at +4).
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&9999u32.to_le_bytes(), 65536 + 3 * 16 + 4)
        .unwrap();
    drop(f);
    let e = open_retrying(&path).expect_err("corrupt table");
    assert!(e.to_string().contains("block 3"), "{e}");
}

#[test]
fn read_only_open_never_changes_the_file_and_shares_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ro.img");
    let cfg = written_image(&path);
    let digest = |p: &Path| crc32c::crc32c(&std::fs::read(p).unwrap());
    let before = digest(&path);
    {
        let mut a = Nand::open_image_with(&path, None, Access::ReadOnly).unwrap();
        // A second reader is fine; a writer is not.
        let _b = Nand::open_image_with(&path, None, Access::ReadOnly).unwrap();
        assert!(matches!(
            Nand::open_image(&path, None),
            Err(NandError::Locked { .. })
        ));
        assert_eq!(a.access(), Access::ReadOnly);
        // Changes stay in this process's memory.
        a.program(Ppa::new(BlockId(5), 3), &page(&cfg, 9), &[], SimTime::ZERO)
            .unwrap();
        a.erase(BlockId(6), SimTime::ZERO).unwrap();
        let mut buf = vec![0u8; cfg.geometry.page_size as usize];
        a.read(Ppa::new(BlockId(5), 3), 0, &mut buf, &mut [], SimTime::ZERO)
            .unwrap();
        assert_eq!(buf, page(&cfg, 9));
        a.sync().unwrap();
    }
    assert_eq!(digest(&path), before, "read-only open wrote");
    // A file without write permission opens read-only, and read-write says why not.
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    use std::os::unix::fs::PermissionsExt;
    perms.set_mode(0o444);
    std::fs::set_permissions(&path, perms).unwrap();
    if nix_is_root() {
        // root ignores file permissions; nothing more to check here.
        return;
    }
    assert!(Nand::open_image_with(&path, None, Access::ReadOnly).is_ok());
    let e = open_retrying(&path).expect_err("not writable");
    assert!(e.to_string().contains("not writable"), "{e}");
}

fn nix_is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn opening_touches_no_block_of_a_fresh_image() {
    // A fresh image of a large preset opens without reading its blocks: the file stays
    // sparse (only the header and block table are allocated), before and after opening.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.img");
    let cfg = DeviceConfig::preset("nvme-tlc").unwrap();
    drop(Nand::create_image(&path, cfg).unwrap());
    let allocated = |p: &Path| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).unwrap().blocks() * 512
    };
    let before = allocated(&path);
    let n = open_retrying(&path).unwrap();
    assert_eq!(n.block_info(BlockId(100)).unwrap().next_page, 0);
    drop(n);
    let after = allocated(&path);
    assert!(after < 4 << 20, "image grew to {after} bytes on disk");
    assert_eq!(before, after);
}

/// Mount a small tmpfs (needs root / CAP_SYS_ADMIN); `None` when this machine cannot.
fn small_tmpfs(dir: &Path, mib: u32) -> Option<()> {
    let ok = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
        .arg(dir)
        .status()
        .ok()?
        .success();
    ok.then_some(())
}

#[test]
fn a_full_file_system_is_an_error_not_a_sigbus() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    if small_tmpfs(&mnt, 4).is_none() {
        eprintln!("notice: cannot mount a tmpfs here; full-file-system test skipped");
        return;
    }
    let result = std::panic::catch_unwind(|| program_until_full(&mnt.join("full.img")));
    let _ = std::process::Command::new("umount").arg(&mnt).status();
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}

/// Offset of the block table in an image (after the 64 KiB header).
const TABLE: u64 = 64 * 1024;

#[test]
fn a_zeroed_block_table_is_refused_not_read_as_a_fresh_device() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dev.img");
    written_image(&path);
    // `dd if=/dev/zero of=IMG bs=4096 seek=16 count=1 conv=notrunc`
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&[0u8; 4096], TABLE).unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    for access in [Access::ReadWrite, Access::ReadOnly] {
        let Err(e) = Nand::open_image_with(&path, None, access) else {
            panic!("a zeroed block table must be refused");
        };
        let msg = e.to_string();
        assert!(
            msg.contains("block table") && msg.contains("checksum"),
            "{msg}"
        );
    }
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "a refused open writes nothing"
    );
}

#[test]
fn a_version_2_image_opens_and_is_upgraded_with_table_checksums() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dev.img");
    let cfg = written_image_version(&path, 3);
    // Make it what csd wrote before version 3: version 2, no entry checksums.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let blocks = cfg.geometry.total_blocks();
        let mut table = vec![0u8; blocks as usize * 16];
        f.read_exact_at(&mut table, TABLE).unwrap();
        for e in table.chunks_exact_mut(16) {
            e[12..16].fill(0);
        }
        f.write_all_at(&table, TABLE).unwrap();
        let mut head = vec![0u8; 64 * 1024];
        f.read_exact_at(&mut head, 0).unwrap();
        head[8..12].copy_from_slice(&2u32.to_le_bytes());
        head[88..96].fill(0);
        let clen = u32::from_le_bytes(head[52..56].try_into().unwrap()) as usize;
        let crc = crc32c::crc32c_append(crc32c::crc32c(&head[..96]), &head[96..96 + clen]);
        head[88..92].copy_from_slice(&crc.to_le_bytes());
        f.write_all_at(&head, 0).unwrap();
    }
    // Read-only: opens as it is, and the file keeps every byte.
    let before = std::fs::read(&path).unwrap();
    drop(Nand::open_image_with(&path, None, Access::ReadOnly).unwrap());
    assert_eq!(std::fs::read(&path).unwrap(), before);
    // Read-write: upgraded; the data reads back, and a zeroed table is now caught.
    let mut n = Nand::open_image(&path, None).unwrap();
    let mut buf = vec![0u8; cfg.geometry.page_size as usize];
    n.read(Ppa::new(BlockId(5), 2), 0, &mut buf, &mut [], SimTime::ZERO)
        .unwrap();
    assert_eq!(buf, page(&cfg, 2));
    n.sync().unwrap();
    drop(n);
    let head = std::fs::read(&path).unwrap();
    assert_eq!(u32::from_le_bytes(head[8..12].try_into().unwrap()), 3);
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&[0u8; 16], TABLE + 5 * 16).unwrap();
    }
    assert!(Nand::open_image(&path, None).is_err());
}

/// The byte offset in the file of page `page`'s data in block `block`, from the header's
/// block offset and block size and the layout of `version`.
fn data_offset(path: &Path, cfg: &DeviceConfig, version: u32, block: u64, page: u64) -> u64 {
    let head = read_header(path);
    let word = |o: usize| u64::from_le_bytes(head[o..o + 8].try_into().unwrap());
    // HeaderV1: magic 8, version 4, header_bytes 4, geo 36, config_len 4, then
    // block_bytes, meta_offset, blocks_offset, blocks (u64 each).
    let (block_bytes, blocks_offset) = (word(56), word(72));
    let g = &cfg.geometry;
    let pages = g.pages_per_block as u64;
    let states = pages.next_multiple_of(64);
    let (ps, oob) = (g.page_size as u64, g.oob_per_page() as u64);
    let in_block = if version >= 4 {
        (states + pages * oob).next_multiple_of(4096) + page * ps
    } else {
        states + page * (ps + oob)
    };
    blocks_offset + block * block_bytes + in_block
}

/// New images (version 4) keep every page's data on a 4 KiB boundary of the file, with
/// the OOB bytes beside the page states; images of version 3 keep their page slots, are
/// read and written in them, and stay version 3 when opened read-write.
#[test]
fn new_images_align_page_data_and_version_3_images_keep_their_layout() {
    let dir = tempfile::tempdir().unwrap();
    for version in [4u32, 3] {
        let path = dir.path().join(format!("v{version}.img"));
        let cfg = written_image_version(&path, version);
        let file = std::fs::read(&path).unwrap();
        assert_eq!(u32::from_le_bytes(file[8..12].try_into().unwrap()), version);
        for p in 0..3u64 {
            let o = data_offset(&path, &cfg, version, 5, p) as usize;
            if version >= 4 {
                assert_eq!(o % 4096, 0, "page {p}'s data is 4 KiB aligned");
            }
            let want = page(&cfg, p as u8);
            assert_eq!(&file[o..o + want.len()], &want[..], "v{version} page {p}");
        }
        // Read-write: reads back, takes a new page in the same layout, keeps its version.
        let mut n = Nand::open_image(&path, None).unwrap();
        let mut buf = vec![0u8; cfg.geometry.page_size as usize];
        let mut oob = vec![0u8; cfg.geometry.oob_per_page() as usize];
        n.read(
            Ppa::new(BlockId(5), 1),
            0,
            &mut buf,
            &mut oob,
            SimTime::ZERO,
        )
        .unwrap();
        assert_eq!(buf, page(&cfg, 1));
        let spare: Vec<u8> = (0..oob.len()).map(|i| i as u8 ^ 0x5A).collect();
        n.program(
            Ppa::new(BlockId(5), 3),
            &page(&cfg, 9),
            &spare,
            SimTime::ZERO,
        )
        .unwrap();
        n.sync().unwrap();
        drop(n);
        let file = std::fs::read(&path).unwrap();
        assert_eq!(u32::from_le_bytes(file[8..12].try_into().unwrap()), version);
        let o = data_offset(&path, &cfg, version, 5, 3) as usize;
        assert_eq!(&file[o..o + buf.len()], &page(&cfg, 9)[..]);
        let n = Nand::open_image_with(&path, None, Access::ReadOnly).unwrap();
        let sectors = cfg.geometry.page_size / cfg.geometry.sector_size;
        let (data, got) = n
            .stored_sectors(Ppa::new(BlockId(5), 3), 0, sectors)
            .unwrap();
        assert_eq!(data, &page(&cfg, 9)[..]);
        assert_eq!(got, &spare[..], "v{version}: the OOB bytes read back");
    }
}

#[test]
fn a_create_on_a_full_file_system_fails_cleanly_and_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    if small_tmpfs(&mnt, 1).is_none() {
        eprintln!("notice: cannot mount a tmpfs here; full-file-system test skipped");
        return;
    }
    let result = std::panic::catch_unwind(|| {
        // Fill the file system.
        let filler = mnt.join("filler");
        let _ = std::fs::write(&filler, vec![1u8; 2 << 20]);
        let path = mnt.join("new.img");
        let Err(e) = Nand::create_image(&path, tiny()) else {
            panic!("no room for a new image");
        };
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        assert!(!path.exists(), "a failed create leaves nothing behind");
    });
    let _ = std::process::Command::new("umount").arg(&mnt).status();
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}

#[test]
fn an_unclean_close_is_seen_at_the_next_open_and_a_clean_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dev.img");
    let cfg = written_image(&path);
    assert!(!Nand::open_image(&path, None).unwrap().opened_unclean());
    let mut n = Nand::open_image(&path, None).unwrap();
    n.program(Ppa::new(BlockId(5), 3), &page(&cfg, 3), &[], SimTime::ZERO)
        .unwrap();
    drop(n); // no sync: as if the process died
    let mut n = Nand::open_image(&path, None).unwrap();
    assert!(n.opened_unclean());
    n.sync().unwrap();
    drop(n);
    assert!(!Nand::open_image(&path, None).unwrap().opened_unclean());
}

/// A small ext2 file system on a loop device (ext2 has no `fallocate`), or `None` where
/// this machine cannot make one (no root, no loop devices, no mkfs.ext2).
fn small_ext2(dir: &Path, mib: u32) -> Option<()> {
    let fs = dir.join("ext2.img");
    std::fs::File::create(&fs)
        .ok()?
        .set_len(mib as u64 * 1024 * 1024)
        .ok()?;
    let mkfs = std::process::Command::new("mkfs.ext2")
        .args(["-q", "-F"])
        .arg(&fs)
        .status()
        .ok()?;
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&mnt).ok()?;
    let mount = std::process::Command::new("mount")
        .args(["-o", "loop"])
        .arg(&fs)
        .arg(&mnt)
        .status()
        .ok()?;
    (mkfs.success() && mount.success()).then_some(())
}

#[test]
fn a_full_file_system_without_fallocate_is_an_error_not_a_sigbus() {
    let dir = tempfile::tempdir().unwrap();
    if small_ext2(dir.path(), 8).is_none() {
        eprintln!("notice: cannot mount a loop ext2 here; no-fallocate test skipped");
        return;
    }
    let mnt = dir.path().join("mnt");
    let result = std::panic::catch_unwind(|| program_until_full(&mnt.join("full.img")));
    let _ = std::process::Command::new("umount").arg(&mnt).status();
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}

/// Program a tiny device's pages at `path` until its file system is full: the failure is
/// [`NandError::ImageFull`] (not a SIGBUS), and every page programmed before reads back.
fn program_until_full(path: &Path) {
    let cfg = tiny();
    let mut n = Nand::create_image(path, cfg.clone()).unwrap();
    let g = cfg.geometry;
    let mut written = Vec::new();
    let mut full = None;
    'all: for b in 0..g.total_blocks() as u32 {
        for p in 0..g.pages_per_block {
            match n.program(
                Ppa::new(BlockId(b), p),
                &page(&cfg, b as u8),
                &[],
                SimTime::ZERO,
            ) {
                Ok(_) => written.push((b, p)),
                Err(e) => {
                    full = Some(e);
                    break 'all;
                }
            }
        }
    }
    let e = full.expect("a 64 MiB device does not fit");
    assert!(matches!(e, NandError::ImageFull { .. }), "{e}");
    assert!(e.to_string().contains("file system is full"), "{e}");
    let mut buf = vec![0u8; g.page_size as usize];
    for &(b, p) in &written {
        n.read(Ppa::new(BlockId(b), p), 0, &mut buf, &mut [], SimTime::ZERO)
            .unwrap();
        assert_eq!(buf, page(&cfg, b as u8));
    }
    assert!(!written.is_empty());
}

/// Blocks written through the mapping are released from the process every so often
/// (MADV_DONTNEED): nothing written is lost, before or after a sync, in this process or
/// after a reopen. Erases count toward a release (programs reach the file with
/// `pwritev` and do not), so each round erases a spare block after every program: the
/// releases fall between programs of the blocks checked.
#[test]
fn released_written_blocks_keep_their_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.img");
    let cfg = tiny();
    let mut n = Nand::create_image(&path, cfg.clone()).unwrap();
    let block_bytes = cfg.geometry.page_size as usize * cfg.geometry.pages_per_block as usize;
    // A release every second block counted.
    n.set_release_written_bytes(2 * block_bytes);
    let blocks = 12u32;
    for round in 0..3u32 {
        for b in 1..=blocks {
            let p = Ppa::new(BlockId(b), round);
            n.program(p, &page(&cfg, (b * 3 + round) as u8), &[], SimTime::ZERO)
                .unwrap();
            let spare = BlockId(blocks + b);
            n.program(Ppa::new(spare, 0), &page(&cfg, 0xEE), &[], SimTime::ZERO)
                .unwrap();
            n.erase(spare, SimTime::ZERO).unwrap();
        }
        if round == 1 {
            n.persist().unwrap();
        }
    }
    let mut buf = vec![0u8; cfg.geometry.page_size as usize];
    let check = |n: &mut Nand, buf: &mut Vec<u8>| {
        for round in 0..3u32 {
            for b in 1..=blocks {
                n.read(Ppa::new(BlockId(b), round), 0, buf, &mut [], SimTime::ZERO)
                    .unwrap();
                assert!(
                    buf[..] == page(&cfg, (b * 3 + round) as u8)[..],
                    "block {b} page {round} changed"
                );
            }
        }
    };
    check(&mut n, &mut buf);
    n.sync().unwrap();
    drop(n);
    let mut n = Nand::open_image_with(&path, None, Access::ReadOnly).unwrap();
    check(&mut n, &mut buf);
}

/// With a read release size (a scanning command's read-only open), pages read leave the
/// process every so often and read back unchanged, and a block this process stored into
/// under its copy-on-write mapping keeps the private bytes (releasing its pages would
/// bring back the file's).
#[test]
fn released_read_blocks_keep_their_data_and_private_pages_stay() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.img");
    let cfg = tiny();
    let mut n = Nand::create_image(&path, cfg.clone()).unwrap();
    let blocks = 12u32;
    for b in 1..=blocks {
        for p in 0..2u32 {
            let data = page(&cfg, (b * 3 + p) as u8);
            n.program(Ppa::new(BlockId(b), p), &data, &[], SimTime::ZERO)
                .unwrap();
        }
    }
    // Block 4 full: its last page's slot ends next to block 5's page states.
    let last = cfg.geometry.pages_per_block - 1;
    for p in 2..=last {
        n.program(
            Ppa::new(BlockId(4), p),
            &page(&cfg, 0x44),
            &[],
            SimTime::ZERO,
        )
        .unwrap();
    }
    n.sync().unwrap();
    drop(n);
    let mut n = Nand::open_image_with(&path, None, Access::ReadOnly).unwrap();
    // A release every third page read.
    n.set_release_read_bytes(Some(3 * cfg.geometry.page_size as usize));
    // A private store into block 5 (page 2 is erased on the file).
    let private = page(&cfg, 0xEE);
    n.program(Ppa::new(BlockId(5), 2), &private, &[], SimTime::ZERO)
        .unwrap();
    let mut buf = vec![0u8; cfg.geometry.page_size as usize];
    for _ in 0..3 {
        for b in 1..=blocks {
            for p in 0..2u32 {
                n.read(Ppa::new(BlockId(b), p), 0, &mut buf, &mut [], SimTime::ZERO)
                    .unwrap();
                assert!(
                    buf[..] == page(&cfg, (b * 3 + p) as u8)[..],
                    "block {b} page {p} changed after a release"
                );
            }
            // A whole page with its spare bytes (one vectored read from the file).
            let mut spare = vec![0u8; cfg.geometry.oob_per_page() as usize];
            n.read_with_tags(
                Ppa::new(BlockId(b), 0),
                0,
                &mut buf,
                &mut spare,
                SimTime::ZERO,
            )
            .unwrap();
            assert!(
                buf == page(&cfg, (b * 3) as u8),
                "block {b} page 0 with tags"
            );
            assert!(
                spare.iter().all(|&x| x == 0xFF),
                "block {b} page 0's spare bytes"
            );
            n.read(
                Ppa::new(BlockId(4), last),
                0,
                &mut buf,
                &mut [],
                SimTime::ZERO,
            )
            .unwrap();
            assert!(buf == page(&cfg, 0x44), "block 4's last page changed");
            let r = n
                .read(Ppa::new(BlockId(5), 2), 0, &mut buf, &mut [], SimTime::ZERO)
                .unwrap();
            assert!(
                !r.erased && buf == private,
                "the private page of block 5 was released"
            );
        }
    }
    drop(n);
    // Nothing reached the file: the private page is erased there.
    let mut n = Nand::open_image_with(&path, None, Access::ReadOnly).unwrap();
    let r = n
        .read(Ppa::new(BlockId(5), 2), 0, &mut buf, &mut [], SimTime::ZERO)
        .unwrap();
    assert!(r.erased, "a read-only open wrote to the image");
}

/// Kilobytes of `path`'s mappings resident in this process (`/proc/self/smaps`).
#[cfg(target_os = "linux")]
fn mapped_kib(path: &Path) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
    let name = path.to_string_lossy();
    let mut ours = false;
    let mut kib = 0;
    for line in smaps.lines() {
        let header = line.split_whitespace().next().is_some_and(|r| {
            r.contains('-') && r.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
        });
        if header {
            ours = line.ends_with(&*name);
        } else if ours && let Some(v) = line.strip_prefix("Rss:") {
            kib += v
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .expect("Rss");
        }
    }
    kib
}

/// `release_read_pages` lets every block read go from the process — all of it, not only
/// the read window's slots — and what was read reads back unchanged, except that a block
/// this process stored into under its copy-on-write mapping keeps its private bytes;
/// with no read release size it releases nothing.
#[cfg(target_os = "linux")]
#[test]
fn release_read_pages_lets_every_block_read_go_and_keeps_private_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rel.img");
    let cfg = tiny();
    let pages = cfg.geometry.pages_per_block;
    let blocks = 1..=8u32;
    let mut n = Nand::create_image(&path, cfg.clone()).unwrap();
    for b in blocks.clone() {
        for p in 0..pages {
            let data = page(&cfg, (b * 31 + p) as u8);
            n.program(Ppa::new(BlockId(b), p), &data, &[], SimTime::ZERO)
                .unwrap();
        }
    }
    n.sync().unwrap();
    drop(n);
    let data_kib = u64::from(pages) * u64::from(cfg.geometry.page_size) / 1024 * 8;
    // Reads in place (a scan's): through the mapping, as `pread` copies are not.
    let spp = cfg.geometry.page_size / cfg.geometry.sector_size;
    let read_all = |n: &mut Nand| {
        for b in blocks.clone() {
            for p in 0..pages {
                let at = Ppa::new(BlockId(b), p);
                n.read_in_place(at, 0, spp, SimTime::ZERO).unwrap();
                let (data, _) = n.stored_sectors(at, 0, spp).expect("stored");
                assert!(
                    data == &page(&cfg, (b * 31 + p) as u8)[..],
                    "block {b} page {p}"
                );
            }
        }
    };
    let mut buf = vec![0u8; cfg.geometry.page_size as usize];
    for release in [false, true] {
        let mut n = Nand::open_image_with(&path, None, Access::ReadOnly).unwrap();
        // A window larger than what is read: only `release_read_pages` releases.
        n.set_release_read_bytes(release.then_some(1 << 30));
        // A private store into block 9 (erased on the file), read back after the release.
        let private = page(&cfg, 0xEE);
        n.program(Ppa::new(BlockId(9), 0), &private, &[], SimTime::ZERO)
            .unwrap();
        let opened = mapped_kib(&path);
        read_all(&mut n);
        n.read_in_place(Ppa::new(BlockId(9), 0), 0, spp, SimTime::ZERO)
            .unwrap();
        let read = mapped_kib(&path);
        assert!(
            read >= opened + data_kib / 2,
            "reads mapped {opened} -> {read} KiB"
        );
        n.release_read_pages();
        let after = mapped_kib(&path);
        if release {
            assert!(
                after <= opened + 64,
                "after the release {after} KiB (opened {opened})"
            );
        } else {
            assert!(
                after >= read,
                "released without a release size: {read} -> {after}"
            );
        }
        read_all(&mut n);
        n.read(Ppa::new(BlockId(9), 0), 0, &mut buf, &mut [], SimTime::ZERO)
            .unwrap();
        assert!(buf == private, "the private page of block 9 was released");
    }
}
