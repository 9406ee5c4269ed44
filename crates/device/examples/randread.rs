//! The emulator's 4 KiB random-read speed at steady state on the default device, with and
//! without the workload engine's cache hints (`IoTarget::prefetch_read`), alternated in
//! one process so that both see the same machine load:
//!
//! ```sh
//! cargo run --release -p csd-device --example randread -- [REGION_MIB] [OPS] [ROUNDS] [TIME_MODEL]
//! ```
//!
//! The region (default 2048 MiB) is written sequentially, then overwritten once at random
//! (write-back cache), as `csd io --precondition` does; then each round runs `OPS`
//! random reads at queue depth 32 twice. It prints wall and CPU ops/s per run and checks
//! that both runs modeled the same figures (hints must not change the model). The reads
//! run on `TIME_MODEL` (`calendar` or `events`; default: the default time model).

use csd_device::workload::{self, IoTarget, NoHints, Rw, WorkloadSpec};
use csd_ftl::{FtlConfig, WriteCache};
use csd_sim::DeviceConfig;
use csd_sim::events::TimeModel;
use std::error::Error;

fn arg(i: usize, default: u64) -> Result<u64, Box<dyn Error>> {
    Ok(match std::env::args().nth(i) {
        Some(s) => s.parse()?,
        None => default,
    })
}

fn main() -> Result<(), Box<dyn Error>> {
    let region = arg(1, 2048)? << 20;
    let ops = arg(2, 3_000_000)?;
    let rounds = arg(3, 3)?;
    let time_model = match std::env::args().nth(4) {
        Some(s) => TimeModel::parse(&s).ok_or("TIME_MODEL is `calendar` or `events`")?,
        None => TimeModel::default(),
    };
    let cfg = DeviceConfig::preset("nvme-tlc")?;
    let ftl = FtlConfig {
        write_cache: WriteCache::WriteBack,
        ..FtlConfig::default()
    };
    let mut dev = csd_device::stack::in_memory(cfg, ftl)?;
    let unit = dev.io_unit(true);
    let fill = |rw, bs, seed| WorkloadSpec {
        rw,
        bs,
        size: Some(region),
        iodepth: 64,
        ops: Some(region / bs),
        seed,
        ..Default::default()
    };
    eprintln!("preconditioning {} MiB", region >> 20);
    workload::run(&mut dev, &fill(Rw::Write, 128 << 10, 1), &mut |_| {})?;
    workload::run(&mut dev, &fill(Rw::RandWrite, unit, 2), &mut |_| {})?;
    let spec = WorkloadSpec {
        rw: Rw::RandRead,
        bs: unit,
        size: Some(region),
        iodepth: 32,
        ops: Some(ops),
        seed: 3,
        time_model,
        ..Default::default()
    };
    println!("time model: {}", time_model.name());
    println!("| round | hints | wall Mops/s | CPU Mops/s | modeled IOPS |");
    println!("|---|---|---|---|---|");
    for round in 1..=rounds {
        let with = workload::run(&mut dev, &spec, &mut |_| {})?;
        let without = workload::run(&mut NoHints(&mut dev), &spec, &mut |_| {})?;
        for (name, r) in [("on", &with), ("off", &without)] {
            println!(
                "| {round} | {name} | {:.3} | {:.3} | {:.0} |",
                r.wall_ops_per_s() / 1e6,
                r.cpu_ops_per_s() / 1e6,
                r.iops()
            );
        }
        if with.modeled_ns != without.modeled_ns || with.latency != without.latency {
            return Err("the cache hints changed a modeled figure".into());
        }
    }
    Ok(())
}
