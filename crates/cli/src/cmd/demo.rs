//! `csd demo`: a short tour of the emulated SSD on the default preset — the raw flash
//! array under fio-style workloads, the scan paper's equation 1 beside the measured
//! sequential read, the FTL's block device in both cache modes, a power cut with
//! recovery, and one query in each strategy. Its modeled figures are golden
//! (`bench/golden/demo.stdout`).

use super::io::run_with_progress;
use crate::args::Seed;
use crate::{CliError, report};
use clap::Args;
use csd_device::workload::{Rw, WorkloadSpec};
use csd_device::{BlockDevice, RawDevice};
use csd_ftl::{Ftl, FtlConfig, FtlError, WriteCache};
use csd_nand::{Nand, NandError};
use csd_sim::DeviceConfig;
use csd_sim::config::DEFAULT_PRESET;

/// Options of `csd demo`.
#[derive(Args)]
pub(crate) struct DemoArgs {
    /// Device preset to tour.
    #[arg(long, default_value = DEFAULT_PRESET)]
    preset: String,
    #[command(flatten)]
    rng: Seed,
}

/// `csd demo`: the raw array under five workloads, the model beside them, the FTL in
/// both cache modes, a power cut, and a query in each strategy.
pub(crate) fn run(a: &DemoArgs) -> Result<(), CliError> {
    let cfg = DeviceConfig::preset(&a.preset)?;
    println!("csd demo — a short tour of the emulated SSD\n");
    println!("1. The device: preset `{}` — {}", cfg.name, cfg.description);
    println!("   {}", report::geometry_line(&cfg));
    println!("   source: {}\n", cfg.source);
    let runs = tour_workloads(cfg.geometry.page_size as u64, a.rng.seed);
    println!("2. Workloads on the raw flash array (in memory, virtual clock):");
    let mut reports = Vec::new();
    let mut dev = RawDevice::new(Nand::new_in_memory(cfg.clone())?);
    for (name, spec) in &runs {
        let r = run_with_progress(&mut dev, spec, true)?;
        reports.push((name.to_string(), r));
    }
    report::print_demo(&reports);
    let seq = &reports[0].1;
    println!(
        "\n3. The model: sequential read reached {:.0} MB/s; the scan paper's model (equation 1, bounded by DRAM and host link) gives {:.0} MB/s.",
        seq.bandwidth_mb_s(),
        report::model_seq_read_mb_s(&cfg)
    );
    println!("\nDetails of the random-read run:");
    report::print_io(
        &reports[1].1,
        &format!(
            "csd io --preset {} --rw randread --bs 4k --iodepth 32 --ops 300000 --seed {}",
            cfg.name, a.rng.seed
        ),
    );
    demo_ftl(&cfg, a.rng.seed)?;
    super::query::demo_query(&cfg)?;
    println!(
        "\nNext: `csd load tpch --sf 0.1 --image dev.img`, `csd query --image dev.img q6`, `csd repro smart-ssd`, `csd config list`, `csd device create --preset isp-ch8 --image dev.img`, `csd io --image dev.img --rw randwrite --bs 4k`, `csd device smart --image dev.img`, `csd torture --cuts 1000`."
    );
    Ok(())
}

/// The five workloads of the tour's raw-array part.
fn tour_workloads(page: u64, seed: u64) -> Vec<(&'static str, WorkloadSpec)> {
    vec![
        (
            "sequential read, 128 KiB, qd 64",
            WorkloadSpec {
                rw: Rw::Read,
                bs: 128 << 10,
                iodepth: 64,
                ops: Some(50_000),
                seed,
                ..Default::default()
            },
        ),
        (
            "random read, 4 KiB, qd 32",
            WorkloadSpec {
                rw: Rw::RandRead,
                bs: 4096,
                iodepth: 32,
                ops: Some(300_000),
                seed,
                ..Default::default()
            },
        ),
        (
            "random read, 4 KiB, qd 1",
            WorkloadSpec {
                rw: Rw::RandRead,
                bs: 4096,
                iodepth: 1,
                ops: Some(50_000),
                seed,
                ..Default::default()
            },
        ),
        (
            "sequential write, 1 page, qd 64",
            WorkloadSpec {
                rw: Rw::Write,
                bs: page,
                iodepth: 64,
                ops: Some(50_000),
                seed,
                ..Default::default()
            },
        ),
        (
            "random read/write 70/30, 1 page, qd 32",
            WorkloadSpec {
                rw: Rw::RandRw,
                bs: page,
                iodepth: 32,
                ops: Some(50_000),
                seed,
                ..Default::default()
            },
        ),
    ]
}

/// Demo part two: the FTL's block device in both cache modes, then a power cut.
fn demo_ftl(cfg: &DeviceConfig, seed: u64) -> Result<(), CliError> {
    println!("\n4. The FTL block device (4 KiB LBAs; every write logged before it completes):");
    let region = 256u64 << 20;
    let mut rows = Vec::new();
    for (name, wc) in [
        ("write-through", WriteCache::WriteThrough),
        ("write-back", WriteCache::WriteBack),
    ] {
        let fcfg = FtlConfig {
            write_cache: wc,
            ..FtlConfig::default()
        };
        let mut dev = BlockDevice::new(Ftl::format(Nand::new_in_memory(cfg.clone())?, fcfg)?);
        let ops = if wc == WriteCache::WriteThrough {
            20_000
        } else {
            200_000
        };
        let spec = WorkloadSpec {
            rw: Rw::RandWrite,
            bs: 4096,
            size: Some(region),
            iodepth: 32,
            ops: Some(ops),
            seed,
            ..Default::default()
        };
        let r = run_with_progress(&mut dev, &spec, true)?;
        let st = *dev.ftl().stats();
        rows.push((
            format!("random 4 KiB writes, {name}"),
            r,
            st.physical_write_amplification(dev.ftl().sectors_per_page()),
            st.log_pages,
        ));
    }
    let mut t = report::table(&[
        "workload",
        "IOPS",
        "p50 us",
        "p99 us",
        "write amplification",
        "log pages",
        "emulator ops/s",
    ]);
    for (name, r, waf, logs) in &rows {
        t.add_row(vec![
            name.clone(),
            format!("{:.0}", r.iops()),
            format!("{:.1}", r.latency.p50_us),
            format!("{:.1}", r.latency.p99_us),
            format!("{waf:.2}"),
            logs.to_string(),
            format!("{:.0}", r.wall_ops_per_s()),
        ]);
    }
    println!("{t}");
    let chains = cfg.ftl.log_chains(&cfg.geometry);
    println!(
        "   Write-through pads a page and logs an RDESC per 4 KiB command before completing it: every command waits for its log page's program, then its data page's (the log is striped over {chains} dies, `ftl.log_dies`; batch-io §4.2.1). Write-back commits whole stripes with one log page each."
    );
    power_cut(cfg)
}

/// Demo part three: write, cut the power mid-write, recover, check every acknowledged
/// write.
fn power_cut(cfg: &DeviceConfig) -> Result<(), CliError> {
    println!(
        "\n5. Power cut: write 20,000 LBAs, cut the power mid-write, recover, check every acknowledged write."
    );
    let fcfg = FtlConfig::default();
    let mut ftl = Ftl::format(Nand::new_in_memory(cfg.clone())?, fcfg)?;
    let ss = ftl.lba_size();
    let pattern = |l: u64| -> Vec<u8> {
        (0..ss)
            .map(|i| (l.wrapping_mul(31) ^ i as u64) as u8)
            .collect()
    };
    let mut t = csd_sim::SimTime::ZERO;
    let mut acked = 0u64;
    ftl.nand_mut()
        .arm_power_cut(csd_nand::PowerCut::AtOp(25_000));
    for l in 0..20_000u64 {
        match ftl.write(l, &pattern(l), t) {
            Ok(done) => {
                t = done;
                acked += 1;
            }
            Err(FtlError::Nand(NandError::PowerLoss)) => break,
            Err(e) => return Err(e.into()),
        }
    }
    let nand = ftl.crash();
    let mut g = Ftl::recover(nand, fcfg)?;
    let r = g.last_recovery().unwrap_or_default();
    let mut intact = 0u64;
    let mut buf = vec![0u8; ss];
    for l in 0..acked {
        g.read(l, &mut buf, csd_sim::SimTime::ZERO)?;
        intact += (buf == pattern(l)) as u64;
    }
    println!(
        "   power cut after {acked} acknowledged writes; recovery replayed {} log pages in {:.2} ms modeled / {:.2} ms wall-clock; {intact} of {acked} acknowledged writes intact.",
        r.log_pages,
        r.modeled_s * 1e3,
        r.wall_s * 1e3
    );
    if intact != acked {
        return Err(CliError::Torture(format!(
            "{} acknowledged writes lost",
            acked - intact
        )));
    }
    Ok(())
}
