//! A damaged image never costs data silently. An image holding acknowledged data (once
//! after a clean shutdown, once after a crash) is damaged in many ways — the header
//! truncated, zeroed or with random bytes, the per-block table, and pages of every kind
//! (user data, MAP, MAPS, WEAR, bad-block table, GBITV, log, checkpoint records) flipped,
//! randomized or zeroed, whole blocks zeroed — and then opened read-only and read-write
//! the way every command opens it. For each case every acknowledged LBA must either read
//! back bit for bit or fail with a clear error (the open, or that LBA's read); nothing may
//! panic, a read-only open may not change a byte, and nothing may be formatted unasked.
//! The tally (tried / served correct / clear error / wrong) is printed; wrong must be 0.

use csd_device::stack::{self, OpenError, OpenOptions};
use csd_ftl::FtlConfig;
use csd_nand::Access;
use csd_sim::{DeviceConfig, SimTime};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const LBAS: u64 = 1500;
const HEADER: u64 = 64 * 1024;

fn device() -> DeviceConfig {
    let mut d = DeviceConfig::preset("tiny").unwrap();
    d.geometry.blocks_per_plane = 24;
    d
}

fn pattern(ss: usize, lba: u64, v: u64) -> Vec<u8> {
    (0..ss as u64)
        .map(|i| {
            (i.wrapping_mul(31) ^ lba.wrapping_mul(0x9E37) ^ v.wrapping_mul(0x7F4A_7C15)) as u8
        })
        .collect()
}

/// Build an image holding `LBAS` acknowledged LBAs (some written twice); `clean` shuts
/// it down cleanly, otherwise more writes follow the last checkpoint and the process
/// "dies" (the device is dropped).
fn build(path: &Path, clean: bool) -> BTreeMap<u64, u64> {
    let cfg = FtlConfig {
        op: 0.25,
        checkpoint_log_pages: 64,
        map_cache_share: 0.002,
        ..FtlConfig::default()
    };
    let mut dev = stack::create_image(path, device(), cfg).unwrap();
    let ss = dev.ftl().lba_size();
    let mut acked = BTreeMap::new();
    let mut rng = SmallRng::seed_from_u64(if clean { 1 } else { 2 });
    for l in 0..LBAS {
        dev.ftl_mut()
            .write(l, &pattern(ss, l, 1), SimTime::ZERO)
            .unwrap();
        acked.insert(l, 1);
    }
    for v in 2..600 {
        let l = rng.random_range(0..LBAS);
        dev.ftl_mut()
            .write(l, &pattern(ss, l, v), SimTime::ZERO)
            .unwrap();
        acked.insert(l, v);
    }
    if clean {
        stack::close(&mut dev).unwrap();
    } else {
        dev.ftl_mut().nand_mut().sync().unwrap();
    }
    acked
}

/// Copy only the allocated extents of a sparse file.
fn sparse_copy(from: &Path, to: &Path) {
    use std::os::fd::AsRawFd;
    let src = std::fs::File::open(from).unwrap();
    let dst = std::fs::File::create(to).unwrap();
    let len = src.metadata().unwrap().len();
    dst.set_len(len).unwrap();
    let fd = src.as_raw_fd();
    let mut off: i64 = 0;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        // SAFETY: lseek on a descriptor we own; SEEK_DATA/SEEK_HOLE only move the offset.
        let data = unsafe { libc::lseek(fd, off, libc::SEEK_DATA) };
        if data < 0 {
            break;
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        let mut at = data as u64;
        while at < hole as u64 {
            let n = ((hole as u64 - at) as usize).min(buf.len());
            src.read_exact_at(&mut buf[..n], at).unwrap();
            dst.write_all_at(&buf[..n], at).unwrap();
            at += n as u64;
        }
        off = hole;
    }
}

/// The image's byte layout (the same arithmetic as the media layer's, image version 4:
/// per block the page states, every page's OOB bytes, then 4 KiB aligned every page's
/// data).
struct Layout {
    blocks_offset: u64,
    block_bytes: u64,
    pages: u64,
    states: u64,
    oob_page: u64,
    data_base: u64,
    page_size: u64,
    blocks: u64,
}

impl Layout {
    fn new() -> Layout {
        let g = device().geometry;
        let pages = g.pages_per_block as u64;
        let oob_page = g.oob_per_page() as u64;
        let states = pages.next_multiple_of(64);
        let data_base = (states + pages * oob_page).next_multiple_of(4096);
        let blocks = g.total_blocks();
        Layout {
            blocks_offset: (HEADER + blocks * 16).next_multiple_of(4096),
            block_bytes: data_base + pages * g.page_size as u64,
            pages,
            states,
            oob_page,
            data_base,
            page_size: g.page_size as u64,
            blocks,
        }
    }
    fn block(&self, b: u64) -> u64 {
        self.blocks_offset + b * self.block_bytes
    }
    fn state(&self, b: u64, p: u64) -> u64 {
        self.block(b) + p
    }
    /// Page `p`'s data.
    fn data(&self, b: u64, p: u64) -> u64 {
        self.block(b) + self.data_base + p * self.page_size
    }
    /// Page `p`'s OOB bytes.
    fn oob(&self, b: u64, p: u64) -> u64 {
        self.block(b) + self.states + p * self.oob_page
    }
}

/// Every programmed page, by the kind its first sector's TAG names.
fn pages_by_kind(path: &Path, lay: &Layout) -> BTreeMap<u8, Vec<(u64, u64)>> {
    let f = std::fs::File::open(path).unwrap();
    let mut out: BTreeMap<u8, Vec<(u64, u64)>> = BTreeMap::new();
    let mut states = vec![0u8; lay.pages as usize];
    let mut tag = [0u8; 8];
    for b in 0..lay.blocks {
        f.read_exact_at(&mut states, lay.block(b)).unwrap();
        for p in 0..lay.pages {
            if states[p as usize] != 1 {
                continue;
            }
            f.read_exact_at(&mut tag, lay.oob(b, p)).unwrap();
            let kind = (u64::from_le_bytes(tag) >> 56) as u8;
            out.entry(kind).or_default().push((b, p));
        }
    }
    out
}

/// A way of damaging the image.
#[derive(Debug, Clone)]
enum Damage {
    Truncate(u64),
    Write { at: u64, bytes: Vec<u8> },
    Flip { at: u64, mask: u8 },
}

impl Damage {
    fn apply(&self, path: &Path) {
        let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        match self {
            Damage::Truncate(len) => f.set_len(*len).unwrap(),
            Damage::Write { at, bytes } => f.write_all_at(bytes, *at).unwrap(),
            Damage::Flip { at, mask } => {
                let mut b = [0u8; 1];
                std::fs::File::open(path)
                    .unwrap()
                    .read_exact_at(&mut b, *at)
                    .unwrap();
                f.write_all_at(&[b[0] ^ mask], *at).unwrap();
            }
        }
    }
}

#[derive(Default, Debug)]
struct Tally {
    tried: u64,
    served_correct: u64,
    clear_error: u64,
    wrong: u64,
}

fn digest(path: &Path) -> u32 {
    let data = std::fs::read(path).unwrap_or_default();
    crc32c::crc32c(&data)
}

/// Open the damaged image read-only and read-write and read every acknowledged LBA.
/// Returns (correct LBAs, LBAs with a clear error, wrong LBAs, open errors).
fn evaluate(path: &Path, acked: &BTreeMap<u64, u64>, what: &str) -> (u64, u64, u64, u64) {
    let ss = device().geometry.sector_size as usize;
    let (mut ok, mut err, mut wrong, mut open_err) = (0, 0, 0, 0);
    for access in [Access::ReadOnly, Access::ReadWrite] {
        let before = (access == Access::ReadOnly).then(|| digest(path));
        let opened = std::panic::catch_unwind(|| {
            stack::open_image(
                path,
                &OpenOptions {
                    access,
                    ..OpenOptions::default()
                },
            )
        });
        let opened = opened.unwrap_or_else(|_| panic!("{what}: opening ({access:?}) panicked"));
        match opened {
            Err(e) => {
                let m = e.to_string();
                assert!(!m.is_empty(), "{what}: an empty error");
                // Never an implicit format: an image with data but no readable FTL is
                // an error that says so.
                if let OpenError::NoFtl { .. } = e {
                    assert!(m.contains("csd device check"), "{what}: {m}");
                }
                open_err += 1;
            }
            Ok((mut dev, rep)) => {
                assert!(!rep.formatted, "{what}: formatted unasked ({access:?})");
                let mut buf = vec![0u8; ss];
                for (&l, &v) in acked {
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        dev.ftl_mut().read(l, &mut buf, SimTime::ZERO)
                    }))
                    .unwrap_or_else(|_| panic!("{what}: reading LBA {l} panicked"));
                    match r {
                        Ok(_) if buf == pattern(ss, l, v) => ok += 1,
                        Ok(_) => wrong += 1,
                        Err(e) => {
                            assert!(!e.to_string().is_empty());
                            err += 1;
                        }
                    }
                }
                if access == Access::ReadWrite {
                    let _ = stack::close(&mut dev);
                }
            }
        }
        if let Some(d) = before {
            assert_eq!(
                digest(path),
                d,
                "{what}: a read-only open changed the image"
            );
        }
    }
    (ok, err, wrong, open_err)
}

fn cases(pristine: &Path, lay: &Layout, rng: &mut SmallRng) -> Vec<(String, Vec<Damage>)> {
    let len = std::fs::metadata(pristine).unwrap().len();
    let mut v: Vec<(String, Vec<Damage>)> = vec![
        (
            "truncated to 1000 bytes".into(),
            vec![Damage::Truncate(1000)],
        ),
        ("truncated to half".into(), vec![Damage::Truncate(len / 2)]),
        (
            "truncated by one byte".into(),
            vec![Damage::Truncate(len - 1)],
        ),
        (
            "header zeroed".into(),
            vec![Damage::Write {
                at: 0,
                bytes: vec![0; HEADER as usize],
            }],
        ),
        (
            "block table zeroed".into(),
            vec![Damage::Write {
                at: HEADER,
                bytes: vec![0; (lay.blocks * 16) as usize],
            }],
        ),
    ];
    for _ in 0..24 {
        let at = rng.random_range(0..700u64);
        v.push((
            format!("header byte {at} randomized"),
            vec![Damage::Write {
                at,
                bytes: vec![rng.random()],
            }],
        ));
    }
    for _ in 0..24 {
        let at = HEADER + rng.random_range(0..lay.blocks * 16);
        v.push((
            format!("block table byte {at} randomized"),
            vec![Damage::Write {
                at,
                bytes: vec![rng.random()],
            }],
        ));
    }
    let kinds = pages_by_kind(pristine, lay);
    let names = [
        "pad",
        "data",
        "MAP",
        "MAPS",
        "WEAR",
        "BBT",
        "log",
        "checkpoint",
        "GBITV",
        "checkpoint body",
    ];
    for (&kind, pages) in &kinds {
        let name = names.get(kind as usize).copied().unwrap_or("unknown");
        let picks: Vec<(u64, u64)> = (0..6.min(pages.len()))
            .map(|_| pages[rng.random_range(0..pages.len())])
            .collect();
        for (b, p) in picks {
            let byte = lay.data(b, p) + rng.random_range(0..lay.page_size);
            v.push((
                format!("{name} page b{b}p{p}: a byte flipped"),
                vec![Damage::Flip {
                    at: byte,
                    mask: rng.random_range(1..=255u8),
                }],
            ));
            let noise: Vec<u8> = (0..lay.page_size).map(|_| rng.random()).collect();
            v.push((
                format!("{name} page b{b}p{p}: data randomized"),
                vec![Damage::Write {
                    at: lay.data(b, p),
                    bytes: noise,
                }],
            ));
            v.push((
                format!("{name} page b{b}p{p}: zeroed (reads as erased)"),
                vec![
                    Damage::Write {
                        at: lay.data(b, p),
                        bytes: vec![0; lay.page_size as usize],
                    },
                    Damage::Write {
                        at: lay.oob(b, p),
                        bytes: vec![0; lay.oob_page as usize],
                    },
                    Damage::Write {
                        at: lay.state(b, p),
                        bytes: vec![0],
                    },
                ],
            ));
        }
        // A whole block of this kind zeroed.
        let (b, _) = pages[rng.random_range(0..pages.len())];
        v.push((
            format!("a {name} block (b{b}) zeroed"),
            vec![Damage::Write {
                at: lay.block(b),
                bytes: vec![0; lay.block_bytes as usize],
            }],
        ));
    }
    v
}

fn run_suite(clean: bool) -> Tally {
    let dir = tempfile::tempdir().unwrap();
    let pristine = dir.path().join("pristine.img");
    let acked = build(&pristine, clean);
    let lay = Layout::new();
    let mut rng = SmallRng::seed_from_u64(if clean { 11 } else { 12 });
    let mut t = Tally::default();
    let work: PathBuf = dir.path().join("case.img");
    // The undamaged image serves everything (and the harness itself is sound).
    sparse_copy(&pristine, &work);
    let (ok, err, wrong, open_err) = evaluate(&work, &acked, "undamaged");
    assert_eq!((err, wrong, open_err), (0, 0, 0));
    assert_eq!(ok, 2 * acked.len() as u64);
    for (what, damage) in cases(&pristine, &lay, &mut rng) {
        sparse_copy(&pristine, &work);
        for d in &damage {
            d.apply(&work);
        }
        let (ok, err, wrong, open_err) = evaluate(&work, &acked, &what);
        t.tried += 1;
        if wrong > 0 {
            t.wrong += 1;
            eprintln!("WRONG: {what}: {wrong} LBA reads returned data that was not acknowledged");
        } else if err > 0 || open_err > 0 {
            t.clear_error += 1;
        } else {
            assert_eq!(ok, 2 * acked.len() as u64);
            t.served_correct += 1;
        }
    }
    t
}

/// Runs one image's cases and asserts that none returned wrong data. The clean and the
/// crashed image are two tests, so they run side by side.
fn every_damage_is_a_clear_error_or_correct_data(clean: bool) {
    let t = run_suite(clean);
    eprintln!(
        "{} image: {} cases tried, {} served every LBA correctly, {} gave a clear error, {} wrong",
        if clean { "clean" } else { "crashed" },
        t.tried,
        t.served_correct,
        t.clear_error,
        t.wrong
    );
    assert_eq!(t.wrong, 0, "{t:?}");
    assert!(t.tried > 75, "{t:?}");
}

#[test]
fn every_damage_of_a_clean_image_is_a_clear_error_or_correct_data_never_wrong_data() {
    every_damage_is_a_clear_error_or_correct_data(true);
}

#[test]
fn every_damage_of_a_crashed_image_is_a_clear_error_or_correct_data_never_wrong_data() {
    every_damage_is_a_clear_error_or_correct_data(false);
}
