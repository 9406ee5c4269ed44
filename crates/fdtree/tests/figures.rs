//! Figures for the report (ignored by default; they take tens of seconds):
//! `cargo test -p csd-fdtree --test figures -- --ignored --nocapture`.
//! Paper configuration (L0 256 KB, k = 24, 4 KiB blocks, 15 MB cache) on the x25e-sata
//! preset, random 64-bit keys, virtual clock.

use csd_device::NvmeDevice;
use csd_fdtree::{FdConfig, FdTree, Scheme};
use csd_ftl::{Ftl, FtlConfig};
use csd_host::SharedDevice;
use csd_nand::Nand;
use csd_sim::{ClockMode, DeviceConfig};
use std::time::Instant;

fn x25e() -> SharedDevice {
    let cfg = DeviceConfig::preset("x25e-sata").expect("preset");
    let nand = Nand::new_in_memory(cfg).expect("nand");
    let ftl = Ftl::format(nand, FtlConfig::default()).expect("format");
    SharedDevice::new(NvmeDevice::new(ftl), ClockMode::Virtual).expect("share")
}

#[test]
#[ignore]
fn paper_config_insert_figures() {
    let n: u64 = std::env::var("FDTREE_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    for (scheme, durable) in [
        (Scheme::Xm, false),
        (Scheme::Ds, false),
        (Scheme::Fc, false),
        (Scheme::Fc, true),
    ] {
        let dev = x25e();
        let mut cfg = FdConfig::default().with_scheme(scheme);
        cfg.durable = durable;
        cfg.lba_count = Some(4 * 1024 * 1024); // 16 GiB region
        let t = FdTree::create(dev.clone(), cfg).unwrap();
        let t0 = Instant::now();
        let mut x = 88172645463325252u64;
        for i in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            t.insert(x, i).unwrap();
        }
        t.wait_for_merges().unwrap();
        let wall = t0.elapsed();
        let t1 = Instant::now();
        let mut found = 0;
        let mut y = 88172645463325252u64;
        for _ in 0..100_000 {
            y ^= y << 13;
            y ^= y >> 7;
            y ^= y << 17;
            found += usize::from(t.lookup(y).unwrap().is_some());
        }
        let lwall = t1.elapsed();
        assert_eq!(found, 100_000);
        let s = t.stats();
        println!(
            "{scheme:?} durable={durable}: {n} inserts in {:.2} s wall ({:.1} us/insert); merges {} (wall total {:.2} s, max {:.1} ms; modeled total {:.2} s); levels {:?}; blocks written {} read {} reclaimed {}; 100k lookups {:.2} s wall, cache hits {} misses {}",
            wall.as_secs_f64(),
            wall.as_secs_f64() * 1e6 / n as f64,
            s.merges,
            s.merge_wall.as_secs_f64(),
            s.max_merge_wall.as_secs_f64() * 1e3,
            s.merge_modeled_ns as f64 / 1e9,
            s.level_blocks,
            s.blocks_written,
            s.blocks_read,
            s.blocks_reclaimed,
            lwall.as_secs_f64(),
            s.cache_hits,
            s.cache_misses
        );
        t.check_invariants().unwrap();
    }
}

/// Worst-case latencies with real device latency (paced, scale 1): preload in virtual
/// time, reopen paced, then one writer inserting new keys and two readers looking up
/// existing keys, per scheme (durable = false, as the paper's index has no log).
#[test]
#[ignore]
fn paced_worst_case_latency_figures() {
    let pre: u64 = std::env::var("FDTREE_PRE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let ops: u64 = std::env::var("FDTREE_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60_000);
    for scheme in [Scheme::Xm, Scheme::Ds, Scheme::Fc] {
        let mut cfg = FdConfig::default().with_scheme(scheme);
        cfg.durable = false;
        cfg.lba_count = Some(4 * 1024 * 1024);
        let dev = x25e();
        let t = FdTree::create(dev.clone(), cfg.clone()).unwrap();
        for k in 0..pre {
            t.insert(k * 2, k).unwrap();
        }
        t.wait_for_merges().unwrap();
        t.close().unwrap();
        drop(t);
        let nvme = dev.into_device().ok().expect("handles dropped");
        let dev = SharedDevice::new(nvme, ClockMode::Paced { scale: 1.0 }).unwrap();
        let t = std::sync::Arc::new(FdTree::open(dev, cfg).unwrap());
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let t0 = Instant::now();
        let (wmax, rmax, reads) = std::thread::scope(|s| {
            let mut readers = Vec::new();
            for r in 0..2u64 {
                let (t, done) = (t.clone(), done.clone());
                readers.push(s.spawn(move || {
                    let mut worst = 0f64;
                    let mut n = 0u64;
                    let mut x = 0x2545F4914F6CDD1Du64 + r;
                    while !done.load(std::sync::atomic::Ordering::Relaxed) {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let k = (x % pre) * 2;
                        let a = Instant::now();
                        assert_eq!(t.lookup(k).unwrap(), Some(k / 2));
                        worst = worst.max(a.elapsed().as_secs_f64());
                        n += 1;
                    }
                    (worst, n)
                }));
            }
            let mut wworst = 0f64;
            let spread = std::env::var("FDTREE_KEYS").is_ok_and(|v| v == "spread");
            for i in 0..ops {
                // New keys: ascending above all (the paper's G_R) or spread over the
                // key space (odd keys between the preloaded even ones).
                let k = if spread {
                    (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % pre) * 2 + 1
                } else {
                    2 * pre + 2 * i + 1
                };
                let a = Instant::now();
                t.insert(k, i).unwrap();
                wworst = wworst.max(a.elapsed().as_secs_f64());
            }
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            let mut rworst = 0f64;
            let mut reads = 0;
            for r in readers {
                let (w, n) = r.join().unwrap();
                rworst = rworst.max(w);
                reads += n;
            }
            (wworst, rworst, reads)
        });
        let wall = t0.elapsed().as_secs_f64();
        t.wait_for_merges().unwrap();
        let s = t.stats();
        println!(
            "{scheme:?}: preload {pre}, then {ops} inserts + {reads} lookups in {wall:.1} s; worst insert {:.1} ms, worst lookup {:.1} ms; merges {} (max {:.1} ms wall)",
            wmax * 1e3,
            rmax * 1e3,
            s.merges,
            s.max_merge_wall.as_secs_f64() * 1e3
        );
    }
}
