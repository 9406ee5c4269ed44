//! Direction tests: each reproduction at a small scale (virtual time, fixed seeds), every
//! headline on the paper's side. A headline whose direction flips (csd's ratio on the
//! other side of 1 than the paper's, or off the paper's side of a stated bound) fails
//! the test, naming the headline and both values.
//!
//! Headlines that are already on the other side at this scale are listed per test with
//! the measured values, so that a change of direction in either sense shows up.

use csd_repro::all::parse_args;
use csd_repro::{Comparison, flixr, scan_paper, smart_ssd};

/// Asserts every headline's direction, except `known_flipped` (which must still be
/// flipped: a headline that comes back to the paper's side is a change to record).
fn assert_directions(cs: &[Comparison], known_flipped: &[&str]) {
    assert!(!cs.is_empty(), "the reproduction compared nothing");
    let mut wrong = Vec::new();
    for c in cs {
        let flipped_expected = known_flipped.iter().any(|k| c.headline.contains(k));
        if c.direction_holds() == flipped_expected {
            wrong.push(format!(
                "{} ({}): paper {}, csd {:.3}",
                c.headline,
                if flipped_expected {
                    "listed as flipped, now on the paper's side"
                } else {
                    "direction flipped"
                },
                c.paper.label(),
                c.csd
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

fn out(dir: &tempfile::TempDir) -> String {
    dir.path().display().to_string()
}

#[test]
fn scan_paper_headlines_keep_their_direction() {
    let d = tempfile::tempdir().expect("temp dir");
    let a: scan_paper::ScanPaperArgs =
        parse_args("scan-paper", &["--out", &out(&d), "--scale", "0.002"]).expect("args");
    let cs = scan_paper::run(&a).expect("scan-paper runs");
    // At this scale hw-ISP stays 1.42x IHP at σ = 1 on PCIe (measured 2026-11-29).
    assert_directions(&cs, &["σ = 1, PCIe"]);
}

#[test]
fn smart_ssd_headlines_keep_their_direction() {
    let d = tempfile::tempdir().expect("temp dir");
    let a: smart_ssd::SmartSsdArgs = parse_args(
        "smart-ssd",
        &["--out", &out(&d), "--scale", "0.0001", "--sf", "0.002"],
    )
    .expect("args");
    let cs = smart_ssd::run(&a).expect("smart-ssd runs");
    assert_directions(&cs, &[]);
}

#[test]
fn flixr_headlines_keep_their_direction() {
    let d = tempfile::tempdir().expect("temp dir");
    let a: flixr::ReproFlixrArgs = parse_args(
        "flixr",
        &[
            "--out",
            &out(&d),
            "--sf",
            "0.005",
            "--queries",
            "20",
            "--tpcc-txns",
            "40",
            "--cache-sweep-kib",
            "64",
            "--tpcc-population",
            "reduced",
            "--trend-sf",
            "--sweep-host-cache",
            "--sweep-dram-factor",
            "--sweep-full-scan",
        ],
    )
    .expect("args");
    let cs = flixr::repro_flixr(&a).expect("flixr runs");
    // Every FLIXR-HS headline is asserted ahead of the host index, as in the paper
    // (measured 2026-11-29 after the host index reads a range's leaves together and
    // FLIXR-HS searches a clustered table from the range: Delete 1.65x, Scan 1.55x, TPC-C
    // 1.13x). On the other side at this scale: FLIXR-S Scan (paper 0.92x). Since every
    // configuration's writes are acknowledged from the device's write buffer (2026-11-30,
    // the paper's platform) the in-SSD B+tree over Figure 10 is on the paper's side, 1.18x
    // (paper 1.058x; 0.915x written through). Since a statement reads each host leaf
    // once (2026-11-30) the host index's Delete is 4.6x faster at default scale; FLIXR-HS
    // stays ahead there (1.13x, paper 1.30x).
    // The in-SSD B+tree's Insert (paper: slower than the host index, §6.1) was 2.24x the
    // host index here (2026-11-30) while its node cache held the whole tree; since it
    // holds the inner levels (2026-12-01, what the paper's 16 MiB holds at SF 10) each
    // insert reads its leaf from flash, as the host index's does, and it is on the
    // paper's side. Its Figure 10 mean went to the other side then (paper 1.058x):
    // NewOrder and Payment about 1.0x (the paper has them below 1) and Q6 about 0.5x
    // (the firmware compares every key of the range on one core; the paper has the
    // in-SSD B+tree's TPC-H near FLIXR-S, 1.26x on Q6 here).
    // Since table pages are the paper's 16 KiB (2026-12-04: one FTL entry per 16 KiB, so
    // FLIXR-S's firmware compares a quarter of the entries it did) FLIXR-S's Delete is
    // ahead of the host index here too: 1.11x (paper 0.92x, "8% lower": its iteration
    // over SF 10's entries; 1.21x at SF 0.01 and 1.005x at SF 0.03 in `csd repro flixr`).
    assert_directions(
        &cs,
        &["FLIXR-S Scan", "FLIXR-S Delete", "in-SSD B+tree overall"],
    );
}

/// FD+tree (Figures 6(d), 7 and 8(c): FD+XM and FD+DS stall insertions for a whole merge,
/// FD+FC for a few blocks of it), measured deterministically on the tree itself rather
/// than on the paced harness (whose latencies are wall time, so not deterministic): a
/// [`MergeGate`](csd_fdtree::MergeGate) lets every merge through one output block at a
/// time, and after each block, once the tree is at rest (the merge at the gate, the
/// writer waiting for room in L0 or, under FD+XM, running the merge itself), the test
/// reads how many insertions a writer thread has completed. An insertion's stall is
/// counted in merge blocks: the longest stretch of blocks during which the writer
/// completed none is the worst insertion `R_p` in merge-block time. The ratios of those
/// stalls are the paper's headlines (`csd_idxbench::repro`: FD+XM / FD+FC >= 20x, FD+DS /
/// FD+FC above the stall factor).
mod fd_tree {
    use csd_device::NvmeDevice;
    use csd_fdtree::{FdConfig, FdTree, MergeGate, Scheme};
    use csd_ftl::{Ftl, FtlConfig};
    use csd_host::SharedDevice;
    use csd_idxbench::repro::{PAPER, STALL_FACTOR, XM_OVER_FC_MIN};
    use csd_nand::Nand;
    use csd_repro::{Comparison, PaperValue};
    use csd_sim::{ClockMode, DeviceConfig};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    /// Keys preloaded: a bottom level of ~60 blocks (256 entries a block), so that the
    /// merges into it are long against the few blocks FD+FC makes an insertion wait.
    const PRELOAD: u64 = 16_000;
    /// A prime above the keys used: `i -> i * c mod P` permutes `0..P`.
    const P: u64 = 40_009;
    /// Merge blocks the measurement lets through (several merges into the bottom level).
    const BLOCKS: u64 = 260;
    /// Longest the test waits for the tree to come to rest after a block.
    const PATIENCE: Duration = Duration::from_secs(60);

    fn tree(scheme: Scheme) -> Arc<FdTree> {
        let cfg = DeviceConfig::preset("tiny").expect("tiny preset");
        let nand = Nand::new_in_memory(cfg).expect("nand");
        let ftl = Ftl::format(nand, FtlConfig::default()).expect("format");
        let dev = SharedDevice::new(NvmeDevice::new(ftl), ClockMode::Virtual).expect("share");
        let cfg = FdConfig {
            durable: false,
            ..FdConfig::small().with_scheme(scheme)
        };
        let t = FdTree::create(dev, cfg).expect("create");
        for i in 0..PRELOAD {
            let k = 2 * ((i * 1237) % P);
            t.insert(k, k + 1).expect("preload");
        }
        t.wait_for_merges().expect("settle");
        Arc::new(t)
    }

    /// The worst insertion stall of `scheme`, in merge blocks, over [`BLOCKS`] blocks.
    pub fn worst_stall_blocks(scheme: Scheme) -> u64 {
        let t = tree(scheme);
        let gate = Arc::new(MergeGate::closed());
        t.set_merge_gate(Some(gate.clone()));
        let done = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (t, done, stop) = (t.clone(), done.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) && i < P {
                    let k = 2 * ((i * 7919) % P) + 1;
                    t.insert(k, k + 1).expect("insert");
                    i += 1;
                    done.store(i, Ordering::SeqCst);
                }
            })
        };
        // At rest: a merge stands at the gate and the writer cannot go on until it moves
        // (FD+XM: the writer's insertion is the merge; FD+DS and FD+FC: the writer waits
        // for room in L0, which is over its budget).
        let at_rest = || {
            let s = t.stats();
            gate.wait_stopped(Duration::ZERO)
                && (scheme == Scheme::Xm
                    || (s.waiting_modifications == 1 && s.l0_charge > s.l0_capacity))
        };
        let settle = || {
            let end = Instant::now() + PATIENCE;
            while !at_rest() {
                assert!(
                    Instant::now() < end,
                    "{scheme:?}: the tree did not come to rest"
                );
                std::thread::sleep(Duration::from_micros(200));
            }
            done.load(Ordering::SeqCst)
        };
        let mut last = settle();
        let (mut streak, mut worst) = (0u64, 0u64);
        for _ in 0..BLOCKS {
            gate.allow(1);
            let now = settle();
            if now == last {
                streak += 1;
                worst = worst.max(streak);
            } else {
                streak = 0;
            }
            last = now;
        }
        gate.open();
        stop.store(true, Ordering::SeqCst);
        writer.join().expect("writer");
        t.set_merge_gate(None);
        t.check_invariants().expect("invariants");
        worst
    }

    /// The headlines as the repro states them, from the stalls.
    pub fn comparisons(xm: u64, ds: u64, fc: u64) -> Vec<Comparison> {
        let over = |a: u64| a as f64 / fc.max(1) as f64;
        vec![
            Comparison::new(
                PAPER,
                "FD+XM / FD+FC worst insertion stall (>= 20x)",
                PaperValue::above(XM_OVER_FC_MIN),
                over(xm),
            ),
            Comparison::new(
                PAPER,
                "FD+DS / FD+FC worst insertion stall (DS stalls during a merge)",
                PaperValue::above(STALL_FACTOR),
                over(ds),
            ),
        ]
    }
}

#[test]
fn fd_tree_headlines_keep_their_direction() {
    use csd_fdtree::Scheme;
    let [xm, ds, fc] = [Scheme::Xm, Scheme::Ds, Scheme::Fc].map(fd_tree::worst_stall_blocks);
    eprintln!("worst insertion stall in merge blocks: FD+XM {xm}, FD+DS {ds}, FD+FC {fc}");
    assert_directions(&fd_tree::comparisons(xm, ds, fc), &[]);
}
