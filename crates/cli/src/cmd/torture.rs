//! `csd torture`: crash torture of the FTL (power cuts at random points, recovery, and
//! the checks of `csd_ftl::torture`), for one seed or a range of seeds run in parallel,
//! with a per-seed table and totals.

use crate::args::{JsonFlag, Seed};
use crate::{CliError, report};
use clap::Args;
use csd_ftl::WriteCache;
use csd_ftl::torture::{TortureConfig, TortureReport, torture};
use serde::Serialize;
use std::ops::RangeInclusive;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Arguments of `csd torture`.
#[derive(Args)]
pub(crate) struct TortureArgs {
    /// Power cuts to perform (per seed).
    #[arg(long, default_value_t = 1000)]
    cuts: u64,
    #[command(flatten)]
    rng: Seed,
    /// A range of seeds instead, `A..B` (both included), run on all cores; one row each.
    #[arg(long, value_parser = parse_seeds, conflicts_with = "seed")]
    seeds: Option<RangeInclusive<u64>>,
    /// Use the write-back cache (acknowledged = flushed).
    #[arg(long)]
    write_back: bool,
    /// Inject program/erase failures and bit errors too.
    #[arg(long)]
    faults: bool,
    /// With --faults: a weak ECC and a high bit-error rate (reads need retries, GC meets
    /// unreadable sectors).
    #[arg(long, requires = "faults")]
    weak_ecc: bool,
    #[command(flatten)]
    report: JsonFlag,
}

fn parse_seeds(s: &str) -> Result<RangeInclusive<u64>, String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("`{s}` is not a seed range; write A..B, e.g. 1..10"))?;
    let b = b.strip_prefix('=').unwrap_or(b);
    let a: u64 = a.parse().map_err(|_| format!("`{a}` is not a seed"))?;
    let b: u64 = b.parse().map_err(|_| format!("`{b}` is not a seed"))?;
    if a > b {
        return Err(format!("seed range {a}..{b} is empty"));
    }
    Ok(a..=b)
}

impl TortureArgs {
    fn config(&self, seed: u64) -> TortureConfig {
        let mut cfg = match (self.faults, self.weak_ecc) {
            (true, true) => TortureConfig::with_weak_ecc(self.cuts, seed),
            (true, false) => TortureConfig::with_faults(self.cuts, seed),
            _ => TortureConfig::small(self.cuts, seed),
        };
        if self.write_back {
            cfg.ftl.write_cache = WriteCache::WriteBack;
        }
        cfg
    }
}

/// One seed's outcome.
struct SeedRun {
    seed: u64,
    result: Result<TortureReport, String>,
    wall_s: f64,
}

/// Run `csd torture`.
pub(crate) fn run(a: &TortureArgs) -> Result<(), CliError> {
    let seeds: Vec<u64> = a.seeds.clone().map_or(vec![a.rng.seed], |r| r.collect());
    let total = a.cuts * seeds.len() as u64;
    let bar = (!a.report.json).then(|| {
        let pb = report::progress_bar(Some(total), "cuts");
        pb.set_message("power cuts");
        pb
    });
    let done = AtomicU64::new(0);
    let next = Mutex::new(seeds.clone().into_iter());
    let runs = Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(seeds.len());
    let wall0 = std::time::Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let Some(seed) = next.lock().ok().and_then(|mut it| it.next()) else {
                        return;
                    };
                    let cfg = a.config(seed);
                    let t0 = std::time::Instant::now();
                    let mut last = 0;
                    let result = torture(&cfg, &mut |n| {
                        let pos = done.fetch_add(n - last, Ordering::Relaxed) + n - last;
                        last = n;
                        if let Some(pb) = &bar {
                            pb.set_position(pos);
                        }
                    });
                    let run = SeedRun {
                        seed,
                        result,
                        wall_s: t0.elapsed().as_secs_f64(),
                    };
                    if let Ok(mut v) = runs.lock() {
                        v.push(run);
                    }
                }
            });
        }
    });
    if let Some(pb) = bar {
        pb.finish_and_clear();
    }
    let wall = wall0.elapsed().as_secs_f64();
    let mut runs = runs.into_inner().unwrap_or_default();
    runs.sort_by_key(|r| r.seed);
    print_runs(a, &runs, wall);
    let mut problems = Vec::new();
    for r in &runs {
        match &r.result {
            Err(e) => problems.push(format!("seed {}: {e}", r.seed)),
            Ok(rep) if rep.lost > 0 || rep.torn > 0 => problems.push(format!(
                "seed {}: {} lost and {} torn: durability is broken",
                r.seed, rep.lost, rep.torn
            )),
            Ok(_) => {}
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(CliError::Torture(problems.join("; ")))
    }
}

/// `csd torture --json`: the runs of every seed and their sums.
#[derive(Serialize)]
struct TortureFigures {
    seeds: Vec<SeedFigures>,
    cuts: u64,
    lost: u64,
    torn: u64,
    writes_checked: u64,
    errors: usize,
    wall_s: f64,
    write_back: bool,
    faults: bool,
    weak_ecc: bool,
    command: String,
}

/// One seed's outcome in `csd torture --json`.
#[derive(Serialize)]
#[serde(untagged)]
enum SeedFigures {
    Ran {
        seed: u64,
        cuts: u64,
        recovery_cuts: u64,
        acked_commands: u64,
        writes_checked: u64,
        lost: u64,
        torn: u64,
        inflight_applied: u64,
        recovery_discarded_commits: u64,
        recovery_modeled_s_total: f64,
        recovery_wall_max_s: f64,
        read_only_at_cut: Option<u64>,
        read_only_reason: Option<String>,
        bad_blocks: u32,
        unreadable_reads: u64,
        lost_sectors: u64,
        wall_s: f64,
    },
    Failed {
        seed: u64,
        error: String,
        wall_s: f64,
    },
}

impl SeedFigures {
    fn of(r: &SeedRun) -> SeedFigures {
        match &r.result {
            Ok(rep) => SeedFigures::Ran {
                seed: r.seed,
                cuts: rep.cuts,
                recovery_cuts: rep.recovery_cuts,
                acked_commands: rep.acked_commands,
                writes_checked: rep.writes_checked,
                lost: rep.lost,
                torn: rep.torn,
                inflight_applied: rep.inflight_applied,
                recovery_discarded_commits: rep.recovery_discarded,
                recovery_modeled_s_total: rep.recovery_modeled_s,
                recovery_wall_max_s: rep.recovery_wall_max_s,
                read_only_at_cut: rep.read_only_at_cut,
                read_only_reason: rep.read_only_reason.map(|r| r.to_string()),
                bad_blocks: rep.bad_blocks,
                unreadable_reads: rep.unreadable,
                lost_sectors: rep.lost_sectors,
                wall_s: r.wall_s,
            },
            Err(e) => SeedFigures::Failed {
                seed: r.seed,
                error: e.clone(),
                wall_s: r.wall_s,
            },
        }
    }
}

fn print_runs(a: &TortureArgs, runs: &[SeedRun], wall: f64) {
    let cfg = a.config(runs.first().map_or(a.rng.seed, |r| r.seed));
    if a.report.json {
        let seeds: Vec<SeedFigures> = runs.iter().map(SeedFigures::of).collect();
        let ok: Vec<&TortureReport> = runs.iter().filter_map(|r| r.result.as_ref().ok()).collect();
        let v = TortureFigures {
            seeds,
            cuts: ok.iter().map(|r| r.cuts).sum(),
            lost: ok.iter().map(|r| r.lost).sum(),
            torn: ok.iter().map(|r| r.torn).sum(),
            writes_checked: ok.iter().map(|r| r.writes_checked).sum(),
            errors: runs.len() - ok.len(),
            wall_s: wall,
            write_back: a.write_back,
            faults: a.faults,
            weak_ecc: a.weak_ecc,
            command: crate::reproduce::line(),
        };
        report::print_json(&v);
        return;
    }
    let mut t = report::table(&[
        "seed",
        "cuts (in recovery)",
        "acked",
        "LBA reads checked",
        "lost",
        "torn",
        "in-flight applied",
        "discarded",
        "read-only at cut",
        "unreadable / lost sectors",
        "longest recovery ms",
        "wall s",
    ]);
    for r in runs {
        match &r.result {
            Ok(rep) => t.add_row(vec![
                r.seed.to_string(),
                format!("{} ({})", rep.cuts, rep.recovery_cuts),
                rep.acked_commands.to_string(),
                rep.writes_checked.to_string(),
                rep.lost.to_string(),
                rep.torn.to_string(),
                rep.inflight_applied.to_string(),
                rep.recovery_discarded.to_string(),
                match (rep.read_only_at_cut, rep.read_only_reason) {
                    (Some(c), Some(why)) => format!("{c} ({why})"),
                    (Some(c), None) => c.to_string(),
                    _ => "-".into(),
                },
                format!("{} / {}", rep.unreadable, rep.lost_sectors),
                format!("{:.3}", rep.recovery_wall_max_s * 1e3),
                format!("{:.1}", r.wall_s),
            ]),
            Err(e) => t.add_row(vec![r.seed.to_string(), format!("error: {e}")]),
        };
    }
    println!("{t}");
    println!(
        "device: {} (shrunk: {} blocks/plane, {} pages/block)  run time {wall:.1} s",
        cfg.device.name, cfg.device.geometry.blocks_per_plane, cfg.device.geometry.pages_per_block,
    );
    println!("reproduce: {}", crate::reproduce::line());
}
