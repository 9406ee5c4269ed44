#![allow(clippy::map_entry)] // the model test reads clearer with explicit checks
use super::*;
use proptest::prelude::*;
use std::collections::HashMap;

pub(crate) fn tiny() -> DeviceConfig {
    DeviceConfig::preset("tiny").expect("tiny preset")
}

fn page_of(cfg: &DeviceConfig, seed: u64) -> Vec<u8> {
    (0..cfg.geometry.page_size as u64)
        .map(|i| (mix(seed, i, 0) & 0xFF) as u8)
        .collect()
}

fn oob_of(cfg: &DeviceConfig, seed: u64) -> Vec<u8> {
    (0..cfg.geometry.oob_per_page() as u64)
        .map(|i| (mix(seed, i, 1) & 0xFF) as u8)
        .collect()
}

fn read_page(n: &mut Nand, p: Ppa) -> Result<(Vec<u8>, Vec<u8>, ReadDone), NandError> {
    let g = *n.geometry();
    let mut d = vec![0u8; g.page_size as usize];
    let mut o = vec![0u8; g.oob_per_page() as usize];
    let r = n.read(p, 0, &mut d, &mut o, SimTime::ZERO)?;
    Ok((d, o, r))
}

#[test]
fn program_then_read_returns_data_and_oob() {
    let cfg = tiny();
    let mut n = Nand::new_in_memory(cfg.clone()).unwrap();
    let p = Ppa::new(BlockId(3), 0);
    let (d, o) = (page_of(&cfg, 1), oob_of(&cfg, 1));
    n.program(p, &d, &o, SimTime::ZERO).unwrap();
    let (rd, ro, r) = read_page(&mut n, p).unwrap();
    assert_eq!(rd, d);
    assert_eq!(ro, o);
    assert!(!r.erased);
    // A single sector, without OOB.
    let ss = cfg.geometry.sector_size as usize;
    let mut one = vec![0u8; ss];
    n.read(p, 1, &mut one, &mut [], SimTime::ZERO).unwrap();
    assert_eq!(&one[..], &d[ss..2 * ss]);
}

#[test]
fn erased_page_reads_erased_pattern() {
    let mut n = Nand::new_in_memory(tiny()).unwrap();
    let (d, o, r) = read_page(&mut n, Ppa::new(BlockId(0), 5)).unwrap();
    assert!(r.erased);
    assert!(d.iter().all(|&b| b == 0xFF) && o.iter().all(|&b| b == 0xFF));
    assert_eq!(n.stats().erased_reads, 1);
}

#[test]
fn nand_rules_are_enforced() {
    let cfg = tiny();
    let mut n = Nand::new_in_memory(cfg.clone()).unwrap();
    let d = page_of(&cfg, 2);
    let b = BlockId(1);
    // Out of order.
    assert_eq!(
        n.program(Ppa::new(b, 1), &d, &[], SimTime::ZERO),
        Err(NandError::ProgramOutOfOrder {
            ppa: Ppa::new(b, 1),
            expected: 0
        })
    );
    n.program(Ppa::new(b, 0), &d, &[], SimTime::ZERO).unwrap();
    // Not erased.
    assert_eq!(
        n.program(Ppa::new(b, 0), &d, &[], SimTime::ZERO),
        Err(NandError::ProgramNotErased {
            ppa: Ppa::new(b, 0)
        })
    );
    n.program(Ppa::new(b, 1), &d, &[], SimTime::ZERO).unwrap();
    assert_eq!(n.block_info(b).unwrap().next_page, 2);
    // Erase resets the block and counts a cycle.
    n.erase(b, SimTime::ZERO).unwrap();
    let info = n.block_info(b).unwrap();
    assert_eq!((info.pe_cycles, info.next_page), (1, 0));
    assert_eq!(n.page_state(Ppa::new(b, 0)).unwrap(), PageState::Erased);
    n.program(Ppa::new(b, 0), &d, &[], SimTime::ZERO).unwrap();
}

#[test]
fn bad_input_is_rejected_and_changes_nothing() {
    let cfg = tiny();
    let g = cfg.geometry;
    let mut n = Nand::new_in_memory(cfg.clone()).unwrap();
    let d = page_of(&cfg, 3);
    let before = *n.stats();
    let nblocks = g.total_blocks() as u32;
    assert!(matches!(
        n.program(Ppa::new(BlockId(nblocks), 0), &d, &[], SimTime::ZERO),
        Err(NandError::OutOfRange { what: "block", .. })
    ));
    assert!(matches!(
        n.program(
            Ppa::new(BlockId(0), g.pages_per_block),
            &d,
            &[],
            SimTime::ZERO
        ),
        Err(NandError::OutOfRange { what: "page", .. })
    ));
    assert!(matches!(
        n.program(Ppa::new(BlockId(0), 0), &d[1..], &[], SimTime::ZERO),
        Err(NandError::BufferSize { .. })
    ));
    assert!(matches!(
        n.program(Ppa::new(BlockId(0), 0), &d, &[1, 2, 3], SimTime::ZERO),
        Err(NandError::BufferSize { .. })
    ));
    let mut buf = vec![0u8; 100];
    assert!(matches!(
        n.read(Ppa::new(BlockId(0), 0), 0, &mut buf, &mut [], SimTime::ZERO),
        Err(NandError::BufferSize { .. })
    ));
    let mut buf = vec![0u8; g.sector_size as usize];
    assert!(matches!(
        n.read(
            Ppa::new(BlockId(0), 0),
            g.sectors_per_page(),
            &mut buf,
            &mut [],
            SimTime::ZERO
        ),
        Err(NandError::OutOfRange { what: "sector", .. })
    ));
    assert!(matches!(
        n.erase(BlockId(nblocks), SimTime::ZERO),
        Err(NandError::OutOfRange { .. })
    ));
    assert_eq!(*n.stats(), before);
    assert_eq!(n.op_count(), 0);
    assert_eq!(n.block_info(BlockId(0)).unwrap().next_page, 0);
    assert_eq!(n.resident_bytes(), 0);
}

#[test]
fn memory_backend_is_sparse() {
    let cfg = tiny();
    let mut n = Nand::new_in_memory(cfg.clone()).unwrap();
    assert_eq!(n.resident_bytes(), 0);
    for b in 0..3 {
        n.program(
            Ppa::new(BlockId(b * 7), 0),
            &page_of(&cfg, 1),
            &[],
            SimTime::ZERO,
        )
        .unwrap();
    }
    let per_block = Layout::new(&cfg.geometry).block_bytes as u64;
    assert_eq!(n.resident_bytes(), 3 * per_block);
}

#[test]
fn fresh_blocks_come_from_the_memory_kept_ready() {
    let cfg = tiny();
    let per_block = Layout::new(&cfg.geometry).block_bytes as u64;
    let mut n = Nand::new_in_memory(cfg.clone()).unwrap();
    assert_eq!(n.memory_ready_stats(), None);
    assert!(n.keep_memory_ready(3 * per_block));
    n.wait_memory_ready();
    assert_eq!(n.memory_ready_stats().map(|s| s.ready), Some(3));
    // Ready memory is not the device's: it holds nothing yet.
    assert_eq!(n.resident_bytes(), 0);
    for b in 0..2 {
        let p = Ppa::new(BlockId(b * 5), 0);
        n.program(p, &page_of(&cfg, u64::from(b)), &[], SimTime::ZERO)
            .unwrap();
        assert_eq!(read_page(&mut n, p).unwrap().0, page_of(&cfg, u64::from(b)));
        // The rest of a block from the pool reads erased, as a fresh one does.
        assert!(
            read_page(&mut n, Ppa::new(BlockId(b * 5), 1))
                .unwrap()
                .2
                .erased
        );
    }
    assert_eq!(n.resident_bytes(), 2 * per_block);
    n.wait_memory_ready();
    let s = n.memory_ready_stats().unwrap();
    assert_eq!((s.taken, s.missed, s.ready), (2, 0, 3));
    // A limit of three blocks, the device holding two: the pool gives back all but one
    // at once; the device takes it, and a fourth block is refused as before.
    assert!(n.set_memory_limit(Some(3 * per_block.next_multiple_of(4096))));
    assert_eq!(n.memory_ready_stats().unwrap().ready, 1);
    n.program(
        Ppa::new(BlockId(11), 0),
        &page_of(&cfg, 7),
        &[],
        SimTime::ZERO,
    )
    .unwrap();
    assert!(matches!(
        n.program(
            Ppa::new(BlockId(12), 0),
            &page_of(&cfg, 8),
            &[],
            SimTime::ZERO
        ),
        Err(NandError::MemoryFull { .. })
    ));
    n.wait_memory_ready();
    let s = n.memory_ready_stats().unwrap();
    assert_eq!((s.taken, s.missed, s.ready), (3, 0, 0));
    // Switching it off gives the ready memory back; an image has none to keep.
    assert!(n.keep_memory_ready(0));
    assert_eq!(n.memory_ready_stats(), None);
    let dir = tempfile::tempdir().unwrap();
    let mut img = Nand::create_image(&dir.path().join("r.img"), cfg).unwrap();
    assert!(!img.keep_memory_ready(1 << 20));
}

fn faulty(seed: u64) -> DeviceConfig {
    let mut c = tiny();
    c.faults.seed = seed;
    c.faults.factory_bad_block_ratio = 0.05;
    c.faults.program_fail_prob = 0.02;
    c.faults.erase_fail_prob = 0.02;
    c.faults.rber_fresh = 2e-4;
    c.faults.rber_end_of_life = 2e-4;
    c.faults.ecc_bits_per_sector = 10;
    c
}

/// Run a fixed operation sequence and record every outcome.
fn outcome_trace(cfg: DeviceConfig) -> Vec<String> {
    let mut n = Nand::new_in_memory(cfg.clone()).unwrap();
    let d = page_of(&cfg, 9);
    let mut out = Vec::new();
    let g = cfg.geometry;
    for b in 0..g.total_blocks() as u32 {
        out.push(format!(
            "{:?}",
            n.block_info(BlockId(b)).map(|i| i.factory_bad)
        ));
    }
    for round in 0..3 {
        for b in 0..40u32 {
            for pg in 0..4 {
                out.push(format!(
                    "{round} p {:?}",
                    n.program(Ppa::new(BlockId(b), pg), &d, &[], SimTime::ZERO)
                        .err()
                ));
                out.push(format!(
                    "{round} r {:?}",
                    read_page(&mut n, Ppa::new(BlockId(b), pg)).map(|r| r.2.corrected_bits)
                ));
            }
            out.push(format!(
                "{round} e {:?}",
                n.erase(BlockId(b), SimTime::ZERO).err()
            ));
        }
    }
    out
}

#[test]
fn faults_are_deterministic_per_seed() {
    let a = outcome_trace(faulty(11));
    let b = outcome_trace(faulty(11));
    let c = outcome_trace(faulty(12));
    assert_eq!(a, b, "same seed must give the same failures");
    assert_ne!(a, c, "another seed must give other failures");
    let joined = a.join("\n");
    for needle in [
        "Ok(true)",
        "ProgramFailed",
        "EraseFailed",
        "BadBlock",
        "Ok(",
        "Uncorrectable",
    ] {
        assert!(
            joined.contains(needle),
            "expected some {needle} in the trace"
        );
    }
}

#[test]
fn ecc_corrects_up_to_its_limit_and_names_the_sector() {
    let mut c = tiny();
    c.faults.rber_fresh = 1e-4; // ~3.3 bits per 4 KiB sector
    c.faults.rber_end_of_life = 1e-4;
    c.faults.ecc_bits_per_sector = 40;
    let mut n = Nand::new_in_memory(c.clone()).unwrap();
    let d = page_of(&c, 5);
    let p = Ppa::new(BlockId(0), 0);
    n.program(p, &d, &[], SimTime::ZERO).unwrap();
    let mut total = 0u64;
    for _ in 0..200 {
        let (rd, _, r) = read_page(&mut n, p).unwrap();
        assert_eq!(rd, d, "corrected data must be intact");
        total += r.corrected_bits as u64;
    }
    // mean 3.3 bits/sector x 2 sectors x 200 reads
    assert!((900..1800).contains(&total), "{total}");
    assert_eq!(n.stats().corrected_bits, total);
    // Weak ECC: uncorrectable errors name page and sector.
    c.faults.ecc_bits_per_sector = 1;
    let mut n = Nand::new_in_memory(c.clone()).unwrap();
    n.program(p, &d, &[], SimTime::ZERO).unwrap();
    let e = (0..50)
        .find_map(|_| read_page(&mut n, p).err())
        .expect("some read fails");
    match e {
        NandError::Uncorrectable {
            ppa,
            sector,
            bit_errors,
            ..
        } => {
            assert_eq!(ppa, p);
            assert!(sector < 2 && bit_errors > 1);
        }
        other => panic!("{other}"),
    }
}

#[test]
fn worn_blocks_fail_per_config() {
    let mut c = tiny();
    c.flash.endurance = 3;
    c.faults.worn_program_fail_prob = 1.0;
    c.faults.worn_erase_fail_prob = 0.0;
    let mut n = Nand::new_in_memory(c.clone()).unwrap();
    let d = page_of(&c, 1);
    let b = BlockId(2);
    for _ in 0..3 {
        n.program(Ppa::new(b, 0), &d, &[], SimTime::ZERO).unwrap();
        n.erase(b, SimTime::ZERO).unwrap();
    }
    assert_eq!(n.block_info(b).unwrap().pe_cycles, 3);
    assert!(matches!(
        n.program(Ppa::new(b, 0), &d, &[], SimTime::ZERO),
        Err(NandError::ProgramFailed { .. })
    ));
    assert!(matches!(
        read_page(&mut n, Ppa::new(b, 0)),
        Err(NandError::Uncorrectable { .. })
    ));
    assert_eq!(n.stats().program_failures, 1);
}

#[test]
fn power_cut_tears_the_program_in_flight() {
    let cfg = tiny();
    let mut n = Nand::new_in_memory(cfg.clone()).unwrap();
    let b = BlockId(4);
    let d0 = page_of(&cfg, 100);
    n.program(Ppa::new(b, 0), &d0, &[], SimTime::ZERO).unwrap();
    n.arm_power_cut(PowerCut::AtOp(2));
    n.program(Ppa::new(b, 1), &page_of(&cfg, 101), &[], SimTime::ZERO)
        .unwrap();
    assert_eq!(
        n.program(Ppa::new(b, 2), &page_of(&cfg, 102), &[], SimTime::ZERO),
        Err(NandError::PowerLoss)
    );
    assert!(!n.is_powered());
    assert_eq!(
        read_page(&mut n, Ppa::new(b, 0)).unwrap_err(),
        NandError::PowerLoss
    );
    assert_eq!(n.erase(b, SimTime::ZERO), Err(NandError::PowerLoss));
    n.power_on();
    // Completed programs intact; the torn one detected.
    assert_eq!(read_page(&mut n, Ppa::new(b, 0)).unwrap().0, d0);
    assert_eq!(
        read_page(&mut n, Ppa::new(b, 1)).unwrap().0,
        page_of(&cfg, 101)
    );
    assert!(matches!(
        n.page_state(Ppa::new(b, 2)).unwrap(),
        PageState::Torn { .. }
    ));
    assert!(
        matches!(read_page(&mut n, Ppa::new(b, 2)), Err(NandError::Uncorrectable { ppa, .. }) if ppa == Ppa::new(b, 2))
    );
    // The torn page cannot be reprogrammed; the next page can.
    assert!(n.program(Ppa::new(b, 2), &d0, &[], SimTime::ZERO).is_err());
    n.program(Ppa::new(b, 3), &d0, &[], SimTime::ZERO).unwrap();
    assert_eq!(n.stats().power_cuts, 1);
}

#[test]
fn power_cut_at_time_and_during_erase() {
    let cfg = tiny();
    let mut n = Nand::new_in_memory(cfg.clone()).unwrap();
    let d = page_of(&cfg, 1);
    let b = BlockId(0);
    n.program(Ppa::new(b, 0), &d, &[], SimTime::ZERO).unwrap();
    let now = n.now();
    n.arm_power_cut(PowerCut::AtTime(now.after(1)));
    assert_eq!(n.erase(b, now), Err(NandError::PowerLoss));
    n.power_on();
    assert_eq!(n.page_state(Ppa::new(b, 0)).unwrap(), PageState::EraseTorn);
    assert!(read_page(&mut n, Ppa::new(b, 0)).is_err());
    // Re-erasing recovers the block.
    n.erase(b, n.now()).unwrap();
    n.program(Ppa::new(b, 0), &d, &[], SimTime::ZERO).unwrap();
}

#[test]
fn timing_follows_the_reservation_model() {
    let cfg = tiny();
    let g = cfg.geometry;
    let mut n = Nand::new_in_memory(cfg.clone()).unwrap();
    let t_r = cfg.flash.t_read_ns(0);
    let xfer = cfg.channel.rate().transfer_ns(g.page_size as u64);
    let mut buf = vec![0u8; g.page_size as usize];
    // One read: tR then transfer.
    let r = n
        .read(Ppa::new(BlockId(0), 0), 0, &mut buf, &mut [], SimTime::ZERO)
        .unwrap();
    assert_eq!(r.done.ns(), t_r + xfer);
    // Same die again: waits for the die (cache read: tR only), then the channel.
    let r2 = n
        .read(Ppa::new(BlockId(1), 0), 0, &mut buf, &mut [], SimTime::ZERO)
        .unwrap();
    assert_eq!(r2.done.ns(), (2 * t_r).max(t_r + xfer) + xfer);
    // Another channel's die is independent.
    let other = n.addr().block_of_die(DieId(1), 0);
    let r3 = n
        .read(Ppa::new(other, 0), 0, &mut buf, &mut [], SimTime::ZERO)
        .unwrap();
    assert_eq!(r3.done.ns(), t_r + xfer);
    // Program: transfer in, then tPROG; erase: tBERS.
    let mut m = Nand::new_in_memory(cfg.clone()).unwrap();
    let done = m
        .program(
            Ppa::new(BlockId(0), 0),
            &page_of(&cfg, 1),
            &[],
            SimTime::from_ns(1000),
        )
        .unwrap();
    let xfer_in = cfg
        .channel
        .rate()
        .transfer_ns((g.page_size + g.oob_per_page()) as u64);
    assert_eq!(done.ns(), 1000 + xfer_in + cfg.flash.t_prog_ns(0));
    let e = m.erase(BlockId(1), SimTime::ZERO).unwrap();
    assert_eq!(e.ns(), done.ns() + cfg.flash.t_erase_ns());
}

#[test]
fn asymmetric_page_latencies() {
    let mut c = tiny();
    c.flash.t_read_us = vec![10.0, 20.0, 30.0];
    let ss = c.geometry.sector_size as usize;
    let xfer = c.channel.rate().transfer_ns(ss as u64);
    let mut buf = vec![0u8; ss];
    for (page, t) in [(0u32, 10_000u64), (1, 20_000), (2, 30_000), (3, 10_000)] {
        let mut n = Nand::new_in_memory(c.clone()).unwrap();
        let b = BlockId(0);
        let r = n
            .read(Ppa::new(b, page), 0, &mut buf, &mut [], SimTime::ZERO)
            .unwrap();
        assert_eq!(r.done.ns(), t + xfer, "page {page}");
    }
}

/// Programs reach a read-write image with `pwritev`, not through the mapping: they do
/// not count toward the release of written blocks (which, counted, released every
/// block a round-robin writer touched, one `madvise` per program), and what they wrote
/// reads back; an erase, which stores through the mapping, still counts.
#[test]
fn programs_to_an_image_do_not_count_toward_the_written_release() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dev.img");
    let cfg = tiny();
    let mut n = Nand::create_image(&path, cfg.clone()).unwrap();
    let block_bytes = n.layout.block_bytes;
    n.set_release_written_bytes(4 * block_bytes);
    for page in 0..3u32 {
        for b in 1..=8u32 {
            let seed = u64::from(b * 10 + page);
            let p = Ppa::new(BlockId(b), page);
            n.program(p, &page_of(&cfg, seed), &oob_of(&cfg, seed), SimTime::ZERO)
                .unwrap();
        }
    }
    assert_eq!(
        n.store.touched_blocks(),
        0,
        "programs counted as mapped writes"
    );
    for page in 0..3u32 {
        for b in 1..=8u32 {
            let seed = u64::from(b * 10 + page);
            let (d, o, _) = read_page(&mut n, Ppa::new(BlockId(b), page)).unwrap();
            assert_eq!(
                (d, o),
                (page_of(&cfg, seed), oob_of(&cfg, seed)),
                "block {b} page {page}"
            );
        }
    }
    n.erase(BlockId(1), SimTime::ZERO).unwrap();
    assert_eq!(
        n.store.touched_blocks(),
        1,
        "an erase stores through the mapping"
    );
}

#[test]
fn image_persists_and_checks_geometry() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dev.img");
    let cfg = tiny();
    let d = page_of(&cfg, 42);
    let o = oob_of(&cfg, 42);
    {
        let mut n = Nand::create_image(&path, cfg.clone()).unwrap();
        n.program(Ppa::new(BlockId(9), 0), &d, &o, SimTime::ZERO)
            .unwrap();
        n.erase(BlockId(10), SimTime::ZERO).unwrap();
        // Locked while open.
        assert!(matches!(
            Nand::open_image(&path, None),
            Err(NandError::Locked { .. })
        ));
        assert!(
            Nand::create_image(&path, cfg.clone()).is_err(),
            "create must not clobber"
        );
    }
    let mut n = Nand::open_image(&path, Some(&cfg.geometry)).unwrap();
    assert_eq!(n.config(), &cfg);
    let (rd, ro, _) = read_page(&mut n, Ppa::new(BlockId(9), 0)).unwrap();
    assert_eq!((rd, ro), (d, o));
    assert_eq!(n.block_info(BlockId(10)).unwrap().pe_cycles, 1);
    assert_eq!(n.block_info(BlockId(9)).unwrap().next_page, 1);
    drop(n);
    let mut other = cfg.geometry;
    other.channels = 4;
    let e = Nand::open_image(&path, Some(&other)).expect_err("mismatch");
    assert!(matches!(e, NandError::GeometryMismatch { .. }), "{e}");
    assert!(
        e.to_string().contains("2ch") && e.to_string().contains("4ch"),
        "{e}"
    );
    // Not an image.
    let junk = dir.path().join("junk.img");
    std::fs::write(&junk, vec![7u8; 70_000]).unwrap();
    assert!(matches!(
        Nand::open_image(&junk, None),
        Err(NandError::Image { .. })
    ));
    let short = dir.path().join("short.img");
    std::fs::write(&short, b"x").unwrap();
    assert!(matches!(
        Nand::open_image(&short, None),
        Err(NandError::Image { .. })
    ));
}

/// A reference model of the media for the property test.
#[derive(Default)]
struct Model {
    pages: HashMap<(u32, u32), u64>,
    next: HashMap<u32, u32>,
    pe: HashMap<u32, u32>,
}

#[derive(Debug, Clone)]
enum Op {
    Program { block: u32, page: u32, seed: u64 },
    Read { block: u32, page: u32 },
    Erase { block: u32 },
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u32..6, 0u32..34, any::<u64>()).prop_map(|(block, page, seed)| Op::Program { block, page, seed }),
        4 => (0u32..6, 0u32..34).prop_map(|(block, page)| Op::Read { block, page }),
        1 => (0u32..6).prop_map(|block| Op::Erase { block }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn media_matches_reference_model(ops in proptest::collection::vec(op_strategy(), 1..200), backend in 0u8..3) {
        let cfg = tiny();
        let pages = cfg.geometry.pages_per_block;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.img");
        // 0: memory, 1: an image, 2: memory with two blocks kept ready (fresh blocks come
        // from the pool or, when it is empty, are mapped by the device).
        let file = backend == 1;
        let mut n = if file { Nand::create_image(&path, cfg.clone()).unwrap() } else { Nand::new_in_memory(cfg.clone()).unwrap() };
        if backend == 2 {
            prop_assert!(n.keep_memory_ready(2 * Layout::new(&cfg.geometry).block_bytes as u64));
        }
        let mut m = Model::default();
        for op in ops {
            match op {
                Op::Program { block, page, seed } => {
                    let r = n.program(Ppa::new(BlockId(block), page), &page_of(&cfg, seed), &[], SimTime::ZERO);
                    let next = *m.next.get(&block).unwrap_or(&0);
                    if page >= pages {
                        prop_assert!(matches!(r, Err(NandError::OutOfRange { .. })), "expected out of range");
                    } else if m.pages.contains_key(&(block, page)) {
                        prop_assert_eq!(r, Err(NandError::ProgramNotErased { ppa: Ppa::new(BlockId(block), page) }));
                    } else if page != next {
                        prop_assert_eq!(r, Err(NandError::ProgramOutOfOrder { ppa: Ppa::new(BlockId(block), page), expected: next }));
                    } else {
                        prop_assert!(r.is_ok());
                        m.pages.insert((block, page), seed);
                        m.next.insert(block, page + 1);
                    }
                }
                Op::Read { block, page } => {
                    let r = read_page(&mut n, Ppa::new(BlockId(block), page));
                    if page >= pages {
                        prop_assert!(r.is_err());
                    } else {
                        let (d, _, done) = r.unwrap();
                        match m.pages.get(&(block, page)) {
                            Some(seed) => { prop_assert!(!done.erased); prop_assert_eq!(d, page_of(&cfg, *seed)); }
                            None => { prop_assert!(done.erased); prop_assert!(d.iter().all(|&x| x == 0xFF)); }
                        }
                    }
                }
                Op::Erase { block } => {
                    n.erase(BlockId(block), SimTime::ZERO).unwrap();
                    m.pages.retain(|(b, _), _| *b != block);
                    m.next.insert(block, 0);
                    *m.pe.entry(block).or_default() += 1;
                }
            }
        }
        for b in 0..6u32 {
            let info = n.block_info(BlockId(b)).unwrap();
            prop_assert_eq!(info.pe_cycles, *m.pe.get(&b).unwrap_or(&0));
            prop_assert_eq!(info.next_page, *m.next.get(&b).unwrap_or(&0));
        }
        if file {
            drop(n);
            let mut n = Nand::open_image(&path, None).unwrap();
            for ((b, p), seed) in &m.pages {
                prop_assert_eq!(read_page(&mut n, Ppa::new(BlockId(*b), *p)).unwrap().0, page_of(&cfg, *seed));
            }
        }
    }
}

#[test]
fn checked_sectors_are_forgotten_when_their_block_changes() {
    let cfg = tiny();
    let mut n = Nand::new_in_memory(cfg.clone()).unwrap();
    let (p0, p1) = (Ppa::new(BlockId(3), 0), Ppa::new(BlockId(3), 1));
    let other = Ppa::new(BlockId(4), 0);
    for p in [p0, other] {
        n.program(p, &page_of(&cfg, 1), &oob_of(&cfg, 1), SimTime::ZERO)
            .unwrap();
    }
    assert!(!n.sector_checked(p0, 1));
    n.mark_sector_checked(p0, 1);
    n.mark_sector_checked(other, 0);
    assert!(n.sector_checked(p0, 1));
    assert!(!n.sector_checked(p0, 0) && !n.sector_checked(p1, 1));
    // Out-of-range marks are ignored.
    n.mark_sector_checked(Ppa::new(BlockId(3), u32::MAX), 0);
    n.mark_sector_checked(p0, u32::MAX);
    // Corruption anywhere in the block forgets it; other blocks keep theirs.
    n.corrupt(p0, 0, 5, 0x10).unwrap();
    assert!(!n.sector_checked(p0, 1));
    assert!(n.sector_checked(other, 0));
    // So does a program of another page of the block, and an erase.
    n.mark_sector_checked(p0, 1);
    n.program(p1, &page_of(&cfg, 2), &oob_of(&cfg, 2), SimTime::ZERO)
        .unwrap();
    assert!(!n.sector_checked(p0, 1));
    n.mark_sector_checked(p0, 1);
    n.erase(BlockId(3), SimTime::ZERO).unwrap();
    assert!(!n.sector_checked(p0, 1));
    assert!(n.sector_checked(other, 0));
}

/// Pinned stored pages read on another thread while the owner erases and reprograms
/// their block: every read that succeeds sees exactly the bytes pinned (never a page
/// half erased or rewritten), and once the block changed no read succeeds.
#[test]
fn pinned_pages_are_never_seen_changing() {
    let cfg = tiny();
    let mut n = Nand::new_in_memory(cfg.clone()).unwrap();
    let b = BlockId(2);
    let ss = cfg.geometry.sectors_per_page();
    let (d, o) = (page_of(&cfg, 7), oob_of(&cfg, 7));
    n.program(Ppa::new(b, 0), &d, &o, SimTime::ZERO).unwrap();
    let stored = n.stored_sectors(Ppa::new(b, 0), 0, ss).unwrap().0;
    // SAFETY (test): the slice comes from `stored_sectors` of `n` under this borrow.
    let pinned = unsafe { n.pin_pages(&[stored]) };
    let (seen, gone) = (
        std::sync::atomic::AtomicU64::new(0),
        std::sync::atomic::AtomicBool::new(false),
    );
    std::thread::scope(|s| {
        s.spawn(|| {
            while !gone.load(std::sync::atomic::Ordering::SeqCst) {
                match pinned.read(0..1, |p| p[0] == &d[..]) {
                    Some(same) => {
                        assert!(same, "a pinned page was read while it changed");
                        seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    None => gone.store(true, std::sync::atomic::Ordering::SeqCst),
                }
            }
        });
        while seen.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        for round in 0..20u64 {
            n.erase(b, SimTime::ZERO).unwrap();
            let (d2, o2) = (page_of(&cfg, 100 + round), oob_of(&cfg, 100 + round));
            n.program(Ppa::new(b, 0), &d2, &o2, SimTime::ZERO).unwrap();
        }
        // The reader stops on its own: the first change moved the generation on.
    });
    assert!(gone.load(std::sync::atomic::Ordering::SeqCst));
    assert_eq!(pinned.read(0..1, |_| ()), None);
}

#[test]
fn scans_read_ahead_per_block_and_random_reads_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ahead.img");
    let cfg = tiny();
    let mut n = Nand::create_image(&path, cfg.clone()).unwrap();
    let pages = 8u32;
    for b in [1u32, 2, 3] {
        for p in 0..pages {
            let seed = u64::from(b * 100 + p);
            n.program(
                Ppa::new(BlockId(b), p),
                &page_of(&cfg, seed),
                &oob_of(&cfg, seed),
                SimTime::ZERO,
            )
            .unwrap();
        }
    }
    // Reads out of order in a block make no run: nothing is read ahead.
    for p in [5, 1, 7, 3, 2, 6] {
        read_page(&mut n, Ppa::new(BlockId(1), p)).unwrap();
    }
    assert_eq!(n.store.ahead_mark(1), 0);
    // Two reads in a row of the next page: not yet a run.
    read_page(&mut n, Ppa::new(BlockId(2), 0)).unwrap();
    read_page(&mut n, Ppa::new(BlockId(2), 1)).unwrap();
    assert_eq!(n.store.ahead_mark(2), 0);
    // The third is: the block is read ahead from that page on (or taken as cached).
    let (d, o, _) = read_page(&mut n, Ppa::new(BlockId(2), 2)).unwrap();
    assert_eq!((d, o), (page_of(&cfg, 202), oob_of(&cfg, 202)));
    let mark = n.store.ahead_mark(2);
    let slot = n.layout.read_range(2);
    assert!(
        mark as usize >= slot.end,
        "mark {mark} below page 2's slot {slot:?}"
    );
    // A scan's pinned pages: asked for directly.
    let (data, oob) = n.stored_sectors(Ppa::new(BlockId(3), 4), 0, 1).unwrap();
    n.will_need(&[data, oob]);
    assert!(n.store.ahead_mark(3) as usize >= n.layout.data_start(4));
    // Hints change no byte; an erase forgets its block's mark.
    for p in 0..pages {
        let (d, _, _) = read_page(&mut n, Ppa::new(BlockId(3), p)).unwrap();
        assert_eq!(d, page_of(&cfg, 300 + u64::from(p)));
    }
    n.erase(BlockId(2), SimTime::ZERO).unwrap();
    assert_eq!(n.store.ahead_mark(2), 0);
    // Slices that are not the store's own are ignored.
    let foreign = vec![0u8; 64];
    n.will_need(&[&foreign, &[]]);
    // In memory: no-op.
    let m = Nand::new_in_memory(cfg.clone()).unwrap();
    m.will_need(&[&foreign]);
    assert_eq!(m.store.ahead_mark(0), 0);
}
