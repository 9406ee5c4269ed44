//! `csd bench ycsb`: the batch-io paper's key-value store (§8.1.2, crate csd-kv) under
//! YCSB (§8.1.3) on an in-memory device in virtual time, through either interface.
//!
//! One run: format a fresh device (the `ox-westlake` preset by default, shrunk to
//! `--device-gib`), load the records with an unbounded cache, sync, shrink the cache to
//! `--cache` percent of the tree's pages (or keep everything in memory with `--cache
//! in-mem`: nothing is written during the run, the paper's In-Mem line), reset the
//! counters and run the workload. Every figure printed comes from counters the store and
//! the device keep (the device's through its SMART log page, read before and after the
//! run):
//! * modeled ops/s: operations over the store's modeled clock; wall ops/s: over the
//!   emulator's wall time;
//! * latency percentiles from HDR histograms (modeled and wall);
//! * Table 3: user and GC bytes read and written, space GC reclaimed (host GC on the block
//!   interface plus the device's GC on either), and Table 4's read / write amplification
//!   `(user + GC) / user` and GC overhead `(GC read + GC write) / reclaimed`;
//! * host CPU: the modeled busy share of the host thread and the part of it spent in host
//!   GC and checkpoints (Figure 15).
//!
//! `--checkpoint off` turns off host checkpoints (block) and makes device checkpoints
//! rare (every 2^30 log pages); `--gc off` turns off host GC (block). The device's own GC
//! cannot be turned off (it runs only when the device runs short of free blocks): its
//! bytes are printed apart so a reader sees whether it ran.
//!
//! The run itself lives in the reproduction library ([`csd_repro::ycsb`]), which `csd
//! repro batch-io` shares; this module prints it.

use crate::CliError;
use crate::report::progress_bar;
pub(crate) use csd_repro::ycsb::{BenchYcsbArgs, Outcome, RUN_OP, phase_json};
use csd_repro::ycsb::{pct, run_once};
use csd_sim::DeviceConfig;

/// The device of a run: the preset shrunk to about `gib` of raw capacity (see
/// [`csd_repro::ycsb::device_config`]).
pub(crate) fn device_config(preset: &str, gib: f64) -> Result<DeviceConfig, CliError> {
    Ok(csd_repro::ycsb::device_config(preset, gib)?)
}

/// `cfg` shrunk to about `gib` of raw capacity (see [`csd_repro::ycsb::shrink_config`]).
pub(crate) fn shrink_config(cfg: DeviceConfig, gib: f64) -> Result<DeviceConfig, CliError> {
    Ok(csd_repro::ycsb::shrink_config(cfg, gib)?)
}

fn gb(b: u64) -> String {
    format!("{:.3} GB", b as f64 / 1e9)
}

/// `csd bench ycsb`.
pub(crate) fn bench_ycsb_cmd(a: &BenchYcsbArgs) -> Result<(), CliError> {
    let bar = progress_bar(Some(a.records), "");
    if a.report.json || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let o = run_once(a, &bar)?;
    bar.finish_and_clear();
    let peers = crate::cmd::kvpeers::run_peers(a, o.run.ops.total(), &bar)?;
    if a.report.json {
        let mut j = o.to_json();
        j["peers"] = serde_json::Value::Array(peers.iter().map(|p| p.to_json(&o)).collect());
        println!("{j}");
        return Ok(());
    }
    print_outcome(&o);
    if !peers.is_empty() {
        println!();
        println!("peers on a real file (same YCSB driver, wall clock):");
        println!(
            "  {:<18} {:>14} {:>14}",
            "store", "wall ops/s", "csd / peer"
        );
        println!(
            "  {:<18} {:>14.0} {:>14}",
            format!("csd {}", a.interface.name()),
            o.run.wall_ops_per_s(),
            "1.00"
        );
        for p in &peers {
            println!(
                "  {:<18} {:>14.0} {:>14.2}",
                p.name,
                p.run.wall_ops_per_s(),
                o.run.wall_ops_per_s() / p.run.wall_ops_per_s().max(1e-9)
            );
        }
    }
    println!();
    println!("seed {}; rerun: {}", a.rng.seed, crate::reproduce::line());
    Ok(())
}

fn print_outcome(o: &Outcome) {
    let a = &o.args;
    let p = o.paper();
    let (busy, gc, ck) = o.cpu_shares();
    println!(
        "YCSB {} on csd {} ({} preset at {} GiB, in memory, virtual clock)",
        a.workload.name(),
        a.interface.name(),
        a.preset,
        a.device_gib
    );
    println!(
        "  records {} ({} tree pages), cache {} ({} pages), checkpoint {}, GC {} (start {}), keys {:?}",
        a.records,
        o.dataset_pages,
        a.cache.label(),
        o.cache_pages.map_or("all".into(), |c| c.to_string()),
        if a.checkpoint { "on" } else { "off" },
        if a.gc { "on" } else { "off" },
        a.gc_start,
        a.dist
    );
    println!(
        "  load: {} records in {:.2} s wall, {:.3} s modeled",
        a.records,
        o.load.wall_s,
        o.load.modeled_s.unwrap_or(0.0)
    );
    let r = &o.run;
    println!(
        "  run: {} ops ({} reads, {} updates, {} inserts, {} scans, {} rmw)",
        r.ops.total(),
        r.ops.reads,
        r.ops.updates,
        r.ops.inserts,
        r.ops.scans,
        r.ops.rmws
    );
    println!(
        "  modeled {:.0} ops/s over {:.3} s; wall {:.0} ops/s over {:.2} s",
        o.modeled_ops(),
        r.modeled_s.unwrap_or(0.0),
        r.wall_ops_per_s(),
        r.wall_s
    );
    for (name, h) in [("modeled", &r.modeled_latency), ("wall", &r.wall_latency)] {
        if !h.is_empty() {
            println!(
                "  {name} latency us: p50 {:.1}  p95 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}",
                pct(h, 0.5),
                pct(h, 0.95),
                pct(h, 0.99),
                pct(h, 0.999),
                h.max() as f64 / 1e3
            );
        }
    }
    println!(
        "  Table 3: user read {}, user write {}, GC read {} (host {}, device {}), GC write {} (host {}, device {}), reclaimed {}",
        gb(p.user_read),
        gb(p.user_write),
        gb(p.gc_read),
        gb(o.host.gc_read_bytes),
        gb(o.dev.gc_read),
        gb(p.gc_write),
        gb(o.host.gc_write_bytes),
        gb(o.dev.gc_written),
        gb(p.reclaimed)
    );
    println!(
        "  Table 4: read amplification {:.3}, write amplification {:.3}, GC overhead {:.3}",
        p.ra, p.wa, p.gc_overhead
    );
    println!(
        "  host CPU: busy {:.1}% of modeled time; of it GC {:.1}%, checkpoints {:.1}% ({} host checkpoints, {} host GC victims)",
        busy * 100.0,
        gc * 100.0,
        ck * 100.0,
        o.host.checkpoints,
        o.host.gc_victims
    );
    println!(
        "  write buffers: {}; {} seals, {} waited for a free buffer ({:.1}% of modeled time)",
        a.write_buffer_limit()
            .map_or("as many as the I/O queue lets go out".into(), |n| n
                .to_string()),
        o.host.seals,
        o.host.buffer_waits,
        o.buffer_wait_share() * 100.0
    );
    println!(
        "  device bookings: {}, of which {} ({:.3}%) waited behind a later arrival booked first{}",
        o.flash.bookings(),
        o.flash.inversions(),
        o.flash.inversion_share() * 100.0,
        if o.flash.inversions() > 0 {
            format!(" ({})", o.flash.inversions_by_class().join("; "))
        } else {
            String::new()
        }
    );
    if let Some(e) = o.events {
        println!(
            "  time model: events (every resource first-come first-served in modeled-arrival order): {} stages booked, {} late arrivals, {} bookings outside the core, {} decisions on unfixed instants",
            e.booked, e.late_arrivals, e.unrecorded, e.unfixed_comparisons
        );
    }
}
