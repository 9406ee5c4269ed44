//! `csd`: the command-line front end of the csd computational-storage emulator.
//!
//! Commands: `demo` (a short tour on the default device), `config` (show, list and
//! validate device configs), `device` (create and inspect image files), `io` (fio-style
//! workloads with modeled and wall-clock figures), `serve` (the device as an NBD server
//! for real clients), `kv serve` (the key-value store over the Redis protocol). Every command has `--help`.

mod array;
mod bench_flixr;
mod bench_open;
mod bench_serve;
mod bench_tpch;
mod check;
mod fdbench;
mod flixrrepro;
mod image;
mod index;
mod kvbench;
mod kvpeers;
mod kvrepro;
mod kvserve;
mod lineedit;
mod query;
mod report;
mod repro;
mod serve;
mod sql;
mod tables;
mod torture;
mod units;

use clap::{Args, Parser, Subcommand};
use csd_device::workload::{self, IoReport, Rw, WorkloadSpec};
use csd_device::{BlockDevice, DeviceError, IoTarget, RawDevice};
use csd_ftl::{Ftl, FtlConfig, FtlError, WriteCache};
use csd_nand::{BlockId, Nand, NandError};
use csd_sim::config::{DEFAULT_PRESET, PRESETS};
use csd_sim::{ClockMode, ConfigError, DeviceConfig};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use thiserror::Error;

/// Errors the CLI reports to the user.
#[derive(Debug, Error)]
enum CliError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Host(#[from] csd_host::HostError),
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Nand(#[from] NandError),
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error(transparent)]
    Open(#[from] csd_device::stack::OpenError),
    #[error(transparent)]
    Ftl(#[from] FtlError),
    #[error("torture: {0}")]
    Torture(String),
    #[error("command interface: {0}")]
    Nvme(String),
    #[error(transparent)]
    Model(#[from] csd_model::ModelError),
    #[error("serve: {0}")]
    Serve(#[from] csd_nbd::NbdError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

#[derive(Parser)]
#[command(name = "csd", version, about = "An emulated computational-storage SSD: flash media, timing and energy model, device images and workloads", long_about = None)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// A short tour: create the default device in memory, run a few workloads, print the report.
    Demo(DemoArgs),
    /// Show, list and validate device configurations.
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Create and inspect device image files.
    #[command(subcommand)]
    Device(DeviceCmd),
    /// Run an fio-style workload and report modeled IOPS, bandwidth, latency, utilization
    /// and energy next to the emulator's wall-clock speed.
    Io(IoArgs),
    /// Benchmarks of the emulator itself.
    #[command(subcommand)]
    Bench(BenchCmd),
    /// Crash torture of the FTL: cut power at random points (also during recovery),
    /// recover, and check every acknowledged write and the atomicity of batches.
    ///
    /// Example: csd torture --cuts 10000 --seed 7
    Torture(torture::TortureArgs),
    /// The papers' analytic models, evaluated for a device config (checked against the
    /// simulation, never used in its place).
    #[command(subcommand)]
    Model(ModelCmd),
    /// Serve the device on an image as a Network Block Device, for fio (--ioengine=nbd),
    /// nbdinfo, nbdcopy, qemu or the kernel's nbd driver. Stops cleanly (flush,
    /// checkpoint, sync) on Ctrl-C or SIGTERM.
    ///
    /// Example: csd serve --image dev.img --preset tiny --socket /tmp/csd.sock
    Serve(serve::ServeArgs),
    /// Load tables onto a device image (TPC-H or SyntheticN), NSM or PAX pages.
    #[command(subcommand)]
    Load(tables::LoadCmd),
    /// List the tables on a device image.
    ///
    /// Example: csd tables --image dev.img
    Tables(tables::TablesArgs),
    /// FLIXR per-page indexes on a table's column (flixr §4): create, list, drop. Scans
    /// whose filter constrains the column then read only the pages that may match.
    ///
    /// Example: csd index create --image dev.img --table lineitem --column l_shipdate
    #[command(subcommand)]
    Index(index::IndexCmd),
    /// Run a SQL query over a table on a device image: in the host (ihp), on the
    /// device's embedded cores (cpu-isp) or in its per-channel filter hardware (hw-isp);
    /// prints the result, modeled time with its breakdown and bottleneck, bytes per
    /// link, energy and the emulator's wall-clock speed.
    ///
    /// Example: csd query --image dev.img --strategy all q6
    Query(query::QueryArgs),
    /// Arrays of devices (smart-ssd §4.3): a table's pages striped across N device
    /// images; queries scan every device in parallel.
    #[command(subcommand)]
    Array(array::ArrayCmd),
    /// SQL over the tables of a device image: one query (as `csd query` runs it) or, without
    /// one, an interactive shell (history, statements over several lines ending at `;`,
    /// `\d` lists the tables, `\d NAME` describes one, `\q` quits).
    ///
    /// Example: csd sql --image dev.img --format csv --output q6.parquet q6
    Sql(sql::SqlArgs),
    /// Reproduce a paper's experiments: markdown report, PNG + SVG plots, side-by-side
    /// table against the published figures.
    #[command(subcommand)]
    Repro(repro::ReproCmd),
    /// The batch-io paper's key-value store on a device image.
    #[command(subcommand)]
    Kv(KvCmd),
}

#[derive(Subcommand)]
enum KvCmd {
    /// Serve the key-value store on an image over the Redis protocol (RESP2) for
    /// redis-cli, redis-benchmark and Redis client libraries: GET, SET, DEL, EXISTS, MGET,
    /// MSET, SCAN, KEYS, DBSIZE, PING, INFO (store and device figures), FLUSHALL. A write
    /// is acknowledged once it is durable. Stops cleanly on Ctrl-C or SIGTERM.
    ///
    /// Example: csd kv serve --image kv.img --interface batch --listen 127.0.0.1:6379
    Serve(kvserve::KvServeArgs),
}

#[derive(Args)]
struct DemoArgs {
    /// Device preset to tour.
    #[arg(long, default_value = DEFAULT_PRESET)]
    preset: String,
    /// Seed of the workloads.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Subcommand)]
enum ConfigCmd {
    /// Print a preset as TOML (with its source comments), after any --set overrides.
    ///
    /// Example: csd config show isp-ch8 --set channel.rate_mt_s=400
    Show {
        /// Preset name (see `csd config list`).
        preset: String,
        /// Override a field, e.g. --set host_link.bandwidth_mb_s=750 (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
    },
    /// List the built-in presets.
    List,
    /// Check a device config file and print a summary or every problem found.
    ///
    /// Example: csd config validate my-device.toml
    Validate {
        /// TOML file.
        file: PathBuf,
    },
}

#[derive(Subcommand)]
enum DeviceCmd {
    /// Create an image file holding a fresh device.
    ///
    /// Example: csd device create --preset nvme-tlc --image dev.img
    Create {
        #[command(flatten)]
        src: ConfigSource,
        /// Image file to create (must not exist; sparse on disk).
        #[arg(long)]
        image: PathBuf,
        /// Over-provisioning of the FTL formatted on it, (physical - logical) / logical.
        #[arg(long, default_value_t = 0.07)]
        op: f64,
        /// Extension bytes per MAP entry for FLIXR per-page indexes (0..=24; a range
        /// index needs 20, a bitmap of up to 160 buckets 24).
        #[arg(long, default_value_t = 0)]
        ext_bytes: u32,
    },
    /// Read the SMART / health log page from an image (through the command interface),
    /// opened read-only: the image is not changed.
    ///
    /// Example: csd device smart --image dev.img --json
    Smart {
        /// Image file.
        #[arg(long)]
        image: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Check an image without changing it: header, block table, FTL checkpoint and log,
    /// and (unless --quick) a read of every mapped LBA; reports what is readable.
    ///
    /// Example: csd device check --image dev.img
    Check(check::CheckArgs),
    /// Print an image's device config, geometry and wear summary.
    ///
    /// Example: csd device info --image dev.img --json
    Info {
        /// Image file.
        #[arg(long)]
        image: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Which interface `csd io` drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
enum ModeArg {
    /// The FTL's block device (4 KiB LBAs).
    #[default]
    Block,
    /// The raw flash array, page by page (open-channel style).
    Raw,
}

impl std::fmt::Display for ModeArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ModeArg::Block => "block",
            ModeArg::Raw => "raw",
        })
    }
}

/// Where a device config comes from.
#[derive(Args, Clone, Default)]
struct ConfigSource {
    /// Built-in preset (default: nvme-tlc).
    #[arg(long, conflicts_with = "config")]
    preset: Option<String>,
    /// Device config TOML file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Override a config field, e.g. --set channel.rate_mt_s=400 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
}

impl ConfigSource {
    fn given(&self) -> bool {
        self.preset.is_some() || self.config.is_some() || !self.set.is_empty()
    }

    fn load(&self) -> Result<DeviceConfig, CliError> {
        let text = match (&self.preset, &self.config) {
            (_, Some(path)) => std::fs::read_to_string(path).map_err(|e| CliError::Io {
                path: path.clone(),
                source: e,
            })?,
            (Some(p), None) => DeviceConfig::preset_toml(p)?.to_string(),
            (None, None) => DeviceConfig::preset_toml(DEFAULT_PRESET)?.to_string(),
        };
        Ok(DeviceConfig::from_toml_with_overrides(&text, &self.set)?)
    }

    fn describe(&self) -> String {
        let mut s = match (&self.preset, &self.config) {
            (_, Some(p)) => format!("--config {}", p.display()),
            (Some(p), None) => format!("--preset {p}"),
            (None, None) => format!("--preset {DEFAULT_PRESET}"),
        };
        for o in &self.set {
            s.push_str(&format!(" --set {o}"));
        }
        s
    }
}

#[derive(Args)]
struct IoArgs {
    /// Run on this image file (otherwise a fresh in-memory device).
    #[arg(long)]
    image: Option<PathBuf>,
    #[command(flatten)]
    src: ConfigSource,
    /// Device interface: `block` (the FTL's LBA interface) or `raw` (the flash array page
    /// by page, open-channel style).
    #[arg(long, value_enum, default_value_t)]
    mode: ModeArg,
    #[command(flatten)]
    ftl: image::FtlArgs,
    /// Offsets of random I/O: uniform, zipf[:THETA] (scrambled zipfian, theta 0.99 by
    /// default, as YCSB), or hotcold:H/C (H% of the I/O to C% of the region).
    #[arg(long, default_value = "uniform", value_parser = csd_sim::dist::Dist::parse)]
    dist: csd_sim::dist::Dist,
    /// Access pattern: read, write, randread, randwrite, randrw.
    #[arg(long, default_value = "randread", value_parser = parse_rw)]
    rw: Rw,
    /// Percent reads in randrw.
    #[arg(long, default_value_t = 70)]
    rwmixread: u32,
    /// Bytes per I/O (4k, 16k, 128k ...). Raw writes need whole pages.
    #[arg(long, default_value = "4k", value_parser = units::parse_size)]
    bs: u64,
    /// Region addressed, from offset 0 (default: the whole device).
    #[arg(long, value_parser = units::parse_size)]
    size: Option<u64>,
    /// Commands kept in flight.
    #[arg(long, default_value_t = 32)]
    iodepth: u32,
    /// Operations to run (default 200000 unless --runtime is given).
    #[arg(long)]
    ops: Option<u64>,
    /// Stop after this much modeled time (e.g. 500ms, 2s).
    #[arg(long, value_parser = units::parse_duration_ns)]
    runtime: Option<u64>,
    /// Seed of offsets and read/write choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Clock: virtual (default, as fast as possible) or paced[:SCALE] (wall time follows modeled time).
    #[arg(long, default_value = "virtual", value_parser = parse_clock)]
    clock: ClockMode,
    /// Block mode: issue writes as batches of N pages (batch-io §3 `flush_batch`).
    #[arg(long, default_value_t = 0)]
    batch: u32,
    /// Before measuring, write the whole region once (sequential page writes, queue
    /// depth 64) so that reads hit programmed pages.
    #[arg(long)]
    precondition: bool,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Scan wall time of a query on an in-memory array of devices (TPC-H lineitem
    /// striped over them), per number of host threads.
    ///
    /// Example: csd bench array --devices 2 --sf 0.1 --threads 1,2 --query q6
    Array(array::BenchArrayArgs),
    /// FTL recovery time after a power cut at steady state.
    ///
    /// Example: csd bench recovery --logical-gib 4
    Recovery(RecoveryArgs),
    /// Scan speed of the emulator: TPC-H lineitem in an in-memory device, a query per
    /// strategy and layout (load excluded from the times).
    ///
    /// Example: csd bench query --sf 1 --query q6
    Query(query::BenchQueryArgs),
    /// The 22 TPC-H queries through DataFusion over an in-memory device: per-query wall
    /// time and correctness; `--compare duckdb` adds DuckDB's times and the ratio.
    ///
    /// Example: csd bench tpch --sf 1 --compare duckdb
    Tpch(bench_tpch::BenchTpchArgs),
    /// The FD+tree paper's harness (§5) on an emulated SSD in paced mode: one scheme,
    /// one workload; throughput and R_p / R_q per request type, and a latency plot.
    ///
    /// Example: csd bench fdtree --scheme fc --lookup-ratio 0.8 --preload 100000 --requests 100000
    Fdtree(fdbench::BenchFdtreeArgs),
    /// Open time and memory of an image of real size: fresh, after writing and a clean
    /// shutdown, and after a crash (each open measured in its own process).
    ///
    /// Example: csd bench open --clean-gib 4 --crash-gib 1,16
    Open(bench_open::BenchOpenArgs),
    /// `csd serve` against `nbdkit memory` under the same fio jobs (4 KiB random writes
    /// and reads over NBD, queue depth 32): IOPS side by side.
    ///
    /// Example: csd bench serve --runtime 10
    Serve(bench_serve::BenchServeArgs),
    /// FLIXR's scan-with-filtering microbenchmark (flixr §6.1): no index, host-side
    /// B+tree (node cache in host DRAM, and all in memory), FLIXR-S and FLIXR-HS on the
    /// same table and queries; modeled time per query and storage traffic split into
    /// index and data pages.
    ///
    /// Example: csd bench flixr --rows 200000 --queries 20 --selectivity 0.01
    Flixr(bench_flixr::BenchFlixrArgs),
    /// The batch-io paper's key-value store under YCSB on either interface: modeled and
    /// wall ops/s, latency percentiles, Table 3/4 figures (RA, WA, GC overhead) and the
    /// host CPU share; optionally beside redb and fjall on a real file.
    ///
    /// Example: csd bench ycsb --interface block --workload write-heavy --records 200000 --cache 20%
    Ycsb(kvbench::BenchYcsbArgs),
}

#[derive(Args)]
struct RecoveryArgs {
    /// Logical capacity to aim for, GiB (the nvme-tlc preset is shrunk to fit).
    #[arg(long, default_value_t = 4)]
    logical_gib: u64,
    /// Random overwrites after the sequential fill, as a multiple of the capacity.
    #[arg(long, default_value_t = 1.0)]
    overwrite: f64,
    /// Seed of the random overwrites.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

fn parse_rw(s: &str) -> Result<Rw, String> {
    Rw::parse(s).ok_or_else(|| {
        format!("`{s}` is not a pattern; use read, write, randread, randwrite or randrw")
    })
}

fn parse_clock(s: &str) -> Result<ClockMode, String> {
    ClockMode::parse(s)
        .ok_or_else(|| format!("`{s}` is not a clock; use virtual, paced or paced:SCALE"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<(), CliError> {
    match cli.cmd {
        Cmd::Demo(a) => demo(&a),
        Cmd::Config(c) => config_cmd(c),
        Cmd::Device(d) => device_cmd(d),
        Cmd::Io(a) => io_cmd(&a),
        Cmd::Torture(a) => torture::run(&a),
        Cmd::Bench(BenchCmd::Recovery(a)) => bench_recovery(&a),
        Cmd::Model(ModelCmd::Scan(a)) => model_scan_cmd(&a),
        Cmd::Serve(a) => serve::serve_cmd(&a),
        Cmd::Load(c) => tables::load_cmd(&c),
        Cmd::Tables(a) => tables::tables_cmd(&a),
        Cmd::Index(c) => index::index_cmd(&c),
        Cmd::Query(a) => query::query_cmd(&a),
        Cmd::Sql(a) => sql::sql_cmd(&a),
        Cmd::Array(c) => array::array_cmd(&c),
        Cmd::Bench(BenchCmd::Array(a)) => array::bench_array_cmd(&a),
        Cmd::Repro(c) => repro::repro_cmd(&c),
        Cmd::Kv(KvCmd::Serve(a)) => kvserve::kv_serve_cmd(&a),
        Cmd::Bench(BenchCmd::Query(a)) => query::bench_query_cmd(&a),
        Cmd::Bench(BenchCmd::Tpch(a)) => bench_tpch::run(&a),
        Cmd::Bench(BenchCmd::Fdtree(a)) => fdbench::bench_fdtree_cmd(&a),
        Cmd::Bench(BenchCmd::Open(a)) => bench_open::run(&a),
        Cmd::Bench(BenchCmd::Serve(a)) => bench_serve::run(&a),
        Cmd::Bench(BenchCmd::Flixr(a)) => bench_flixr::run(&a),
        Cmd::Bench(BenchCmd::Ycsb(a)) => kvbench::bench_ycsb_cmd(&a),
    }
}

fn config_cmd(c: ConfigCmd) -> Result<(), CliError> {
    match c {
        ConfigCmd::Show { preset, set } => {
            let text = DeviceConfig::preset_toml(&preset)?;
            if set.is_empty() {
                // The preset file itself, comments and all.
                print!("{text}");
            } else {
                let cfg = DeviceConfig::from_toml_with_overrides(text, &set)?;
                println!("# preset {preset} with {}", set.join(", "));
                print!("{}", cfg.to_toml());
            }
            Ok(())
        }
        ConfigCmd::List => {
            let mut t =
                report::table(&["preset", "description", "geometry", "model seq. read MB/s"]);
            for (name, _) in PRESETS {
                let cfg = DeviceConfig::preset(name)?;
                t.add_row(vec![
                    name.to_string(),
                    cfg.description.clone(),
                    report::geometry_line(&cfg),
                    format!("{:.0}", report::model_seq_read_mb_s(&cfg)),
                ]);
            }
            println!("{t}");
            Ok(())
        }
        ConfigCmd::Validate { file } => {
            let text = std::fs::read_to_string(&file).map_err(|e| CliError::Io {
                path: file.clone(),
                source: e,
            })?;
            let cfg = DeviceConfig::from_toml(&text)?;
            println!("{}: valid", file.display());
            println!("{cfg}");
            Ok(())
        }
    }
}

fn device_cmd(d: DeviceCmd) -> Result<(), CliError> {
    match d {
        DeviceCmd::Create {
            src,
            image,
            op,
            ext_bytes,
        } => {
            let cfg = src.load()?;
            let ftl = FtlConfig {
                op,
                ext_bytes,
                ..FtlConfig::default()
            };
            let dev = csd_device::stack::create_image(&image, cfg, ftl)?;
            let f = dev.ftl();
            println!("created {} ({})", image.display(), f.nand().config());
            println!(
                "FTL formatted: {} logical ({} LBAs of {} B), over-provisioning {op}",
                report::bytes(f.lbas() * f.lba_size() as u64),
                f.lbas(),
                f.lba_size()
            );
            let on_disk = std::fs::metadata(&image).map(|m| m.len()).unwrap_or(0);
            println!(
                "image size {} (sparse: blocks take disk space once programmed)",
                report::bytes(on_disk)
            );
            Ok(())
        }
        DeviceCmd::Smart { image, json } => {
            let dev = match image::open_ro(&image, json) {
                // A live `csd serve` holds the image: show its stats file.
                Err(CliError::Open(csd_device::stack::OpenError::Nand(NandError::Locked {
                    ..
                }))) => return serve::print_live_smart(&image, json),
                r => r?,
            };
            let mut dev = csd_device::NvmeDevice::from_block(dev);
            let q = dev
                .create_queue_pair(4)
                .map_err(|s| CliError::Nvme(s.to_string()))?;
            dev.submit(
                q,
                csd_device::Command::GetLogPage(csd_device::LogPage::Smart),
                csd_sim::SimTime::ZERO,
            )
            .map_err(|s| CliError::Nvme(s.to_string()))?;
            dev.process();
            let c = dev
                .poll(q)
                .ok_or_else(|| CliError::Nvme("no completion".into()))?;
            let csd_device::Payload::Smart(log) = c.payload else {
                return Err(CliError::Nvme(format!(
                    "SMART log page failed: {}",
                    c.status
                )));
            };
            report::print_smart(&image, &log, json);
            Ok(())
        }
        DeviceCmd::Info { image, json } => {
            let nand = csd_device::stack::open_media(
                &image,
                &csd_device::stack::OpenOptions::read_only(),
            )?;
            report::device_info(&image, &nand, json);
            Ok(())
        }
        DeviceCmd::Check(a) => check::run(&a),
    }
}

/// Open the raw flash array an `io`-like command runs on.
fn open_media(image: Option<&Path>, src: &ConfigSource) -> Result<Nand, CliError> {
    match image {
        Some(path) => {
            let opts = csd_device::stack::OpenOptions {
                expect: if src.given() {
                    Some(src.load()?.geometry)
                } else {
                    None
                },
                ..csd_device::stack::OpenOptions::read_write()
            };
            Ok(csd_device::stack::open_media(path, &opts)?)
        }
        None => Ok(Nand::new_in_memory(src.load()?)?),
    }
}

fn io_cmd(a: &IoArgs) -> Result<(), CliError> {
    let mut holder = match (a.mode, &a.image) {
        (ModeArg::Raw, image) => Dev::Raw(RawDevice::new(open_media(image.as_deref(), &a.src)?)),
        // On an image: keep the FTL that is there (recover it) unless asked to format.
        (ModeArg::Block, Some(path)) => {
            Dev::Block(image::open_rw(path, &a.src, &a.ftl, false, a.json)?)
        }
        (ModeArg::Block, None) => {
            let cfg = a.src.load()?;
            let ftl = a.ftl.config(cfg.geometry.sector_size)?;
            Dev::Block(csd_device::stack::in_memory(cfg, ftl)?)
        }
    };
    let dev: &mut dyn IoTarget = match &mut holder {
        Dev::Raw(d) => d,
        Dev::Block(d) => d,
    };
    let spec = WorkloadSpec {
        rw: a.rw,
        rwmixread: a.rwmixread,
        bs: a.bs,
        size: a.size,
        iodepth: a.iodepth,
        ops: if a.ops.is_none() && a.runtime.is_none() {
            Some(200_000)
        } else {
            a.ops
        },
        runtime_ns: a.runtime,
        seed: a.seed,
        clock: a.clock,
        batch: a.batch,
        dist: a.dist,
    };
    if a.precondition {
        let unit = dev.io_unit(true);
        let bs = (a.bs.clamp(unit, 1 << 20) / unit) * unit;
        let region = a.size.unwrap_or_else(|| dev.capacity_bytes()) / bs * bs;
        let fill = WorkloadSpec {
            rw: Rw::Write,
            bs,
            size: Some(region),
            iodepth: 64,
            ops: Some(region / bs),
            seed: a.seed,
            ..Default::default()
        };
        if !a.json {
            eprintln!(
                "preconditioning: writing {} sequentially",
                report::bytes(region)
            );
        }
        run_with_progress(dev, &fill, !a.json)?;
        if a.mode == ModeArg::Block {
            // Then overwrite the region once at random, so GC reaches steady state.
            let steady = WorkloadSpec {
                rw: Rw::RandWrite,
                bs: unit,
                size: Some(region),
                iodepth: 64,
                ops: Some(region / unit),
                seed: a.seed ^ 0x5EED,
                ..Default::default()
            };
            if !a.json {
                eprintln!(
                    "preconditioning: overwriting {} at random to reach steady state",
                    report::bytes(region)
                );
            }
            run_with_progress(dev, &steady, !a.json)?;
        }
    }
    let r = run_with_progress(dev, &spec, !a.json)?;
    let cmd = reproduce_cmd(a);
    if a.json {
        let mut v = report::io_json(&r, &cmd);
        if let (Dev::Block(b), Some(m)) = (&holder, v.as_object_mut()) {
            report::ftl_json(b.ftl(), m);
        }
        println!("{v}");
    } else {
        report::print_io(&r, &cmd);
        if let Dev::Block(b) = &holder {
            report::print_ftl(b.ftl());
        }
    }
    if let Some(path) = &a.image {
        match &mut holder {
            Dev::Block(b) => image::close(b)?,
            Dev::Raw(d) => d.nand_mut().sync()?,
        }
        if !a.json {
            println!("image {} synced", path.display());
        }
    }
    Ok(())
}

fn bench_recovery(a: &RecoveryArgs) -> Result<(), CliError> {
    // nvme-tlc, shrunk in blocks per plane until the logical capacity is about right.
    let text = DeviceConfig::preset_toml(DEFAULT_PRESET)?;
    let mut bpp = 8u64;
    let cfg = FtlConfig {
        write_cache: WriteCache::WriteBack,
        ..FtlConfig::default()
    };
    let (ftl, dev) = loop {
        let dev = DeviceConfig::from_toml_with_overrides(
            text,
            &[format!("geometry.blocks_per_plane={bpp}")],
        )?;
        let f = Ftl::format(Nand::new_in_memory(dev.clone())?, cfg)?;
        if f.lbas() * f.lba_size() as u64 >= a.logical_gib << 30 || bpp >= 1024 {
            break (f, dev);
        }
        bpp += (bpp / 4).max(1);
    };
    let mut ftl = ftl;
    let lbas = ftl.lbas();
    let ss = ftl.lba_size();
    let show = !a.json;
    let total = lbas + (lbas as f64 * a.overwrite) as u64;
    let bar = show.then(|| {
        let pb = report::progress_bar(Some(total), "LBAs");
        pb.set_message("filling to steady state");
        pb
    });
    let mut data = vec![0u8; ss * 64];
    let mut t = csd_sim::SimTime::ZERO;
    let mut l = 0u64;
    while l < lbas {
        let n = (lbas - l).min(64);
        data.iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = (i as u64 ^ l) as u8);
        t = ftl.write(l, &data[..n as usize * ss], t)?;
        l += n;
        if let Some(pb) = &bar {
            pb.set_position(l);
        }
    }
    let mut x = a.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for i in 0..total - lbas {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        t = ftl.write(x % lbas, &data[..ss], t)?;
        if let Some(pb) = &bar
            && i % 4096 == 0
        {
            pb.set_position(lbas + i);
        }
    }
    t = ftl.flush(t)?;
    if let Some(pb) = bar {
        pb.finish_and_clear();
    }
    let since_ckpt_pages = ftl.stats().log_pages;
    let nand = ftl.crash();
    let wall0 = std::time::Instant::now();
    let mut g = Ftl::recover(nand, cfg)?;
    let wall = wall0.elapsed().as_secs_f64();
    let r = g.last_recovery().unwrap_or_default();
    // Spot-check that the data is there.
    let mut buf = vec![0u8; ss];
    g.read(0, &mut buf, t)?;
    let cmd = format!(
        "csd bench recovery --logical-gib {} --overwrite {} --seed {}",
        a.logical_gib, a.overwrite, a.seed
    );
    if a.json {
        let v = serde_json::json!({
            "logical_bytes": lbas * ss as u64,
            "blocks_per_plane": bpp,
            "recovery_wall_s": wall,
            "recovery_modeled_s": r.modeled_s,
            "checkpoint_seq": r.checkpoint_seq,
            "log_pages_replayed": r.log_pages,
            "commits_redone": r.commits_redone,
            "commits_verified": r.commits_verified,
            "commits_discarded": r.commits_discarded,
            "log_pages_written_before_cut": since_ckpt_pages,
            "seed": a.seed,
            "command": cmd,
        });
        println!("{v}");
    } else {
        let mut tb = report::table(&["recovery at steady state", "value"]);
        for (k, v) in [
            (
                "device",
                format!(
                    "{} with {bpp} blocks/plane: {} logical",
                    dev.name,
                    report::bytes(lbas * ss as u64)
                ),
            ),
            ("wall-clock recovery", format!("{:.3} s", wall)),
            ("modeled recovery", format!("{:.3} s", r.modeled_s)),
            ("checkpoint recovered from", r.checkpoint_seq.to_string()),
            ("log pages replayed", r.log_pages.to_string()),
            (
                "commits redone / verified / discarded",
                format!(
                    "{} / {} / {}",
                    r.commits_redone, r.commits_verified, r.commits_discarded
                ),
            ),
        ] {
            tb.add_row(vec![k.to_string(), v]);
        }
        println!("{tb}");
        println!("seed: {}  reproduce: {cmd}", a.seed);
    }
    Ok(())
}

/// The device an `io` run drives.
#[allow(clippy::large_enum_variant)] // one per run, never moved around
enum Dev {
    Raw(RawDevice),
    Block(BlockDevice),
}

fn run_with_progress(
    dev: &mut dyn IoTarget,
    spec: &WorkloadSpec,
    show: bool,
) -> Result<IoReport, CliError> {
    let bar = if show {
        let pb = report::progress_bar(spec.ops, "ops");
        pb.set_message(format!("{} bs={} qd={}", spec.rw, spec.bs, spec.iodepth));
        Some(pb)
    } else {
        None
    };
    let mut cb = |n: u64| {
        if let Some(pb) = &bar {
            pb.set_position(n);
        }
    };
    let r = workload::run(dev, spec, &mut cb);
    if let Some(pb) = bar {
        pb.finish_and_clear();
    }
    Ok(r?)
}

fn reproduce_cmd(a: &IoArgs) -> String {
    let mut s = String::from("csd io");
    if let Some(p) = &a.image {
        s.push_str(&format!(" --image {}", p.display()));
    }
    if a.src.given() || a.image.is_none() {
        s.push(' ');
        s.push_str(&a.src.describe());
    }
    s.push_str(&format!(
        " --mode {} --rw {} --bs {} --iodepth {} --dist {}",
        a.mode, a.rw, a.bs, a.iodepth, a.dist
    ));
    if a.mode == ModeArg::Block {
        s.push_str(&a.ftl.describe());
    }
    if a.rw == Rw::RandRw {
        s.push_str(&format!(" --rwmixread {}", a.rwmixread));
    }
    if let Some(z) = a.size {
        s.push_str(&format!(" --size {z}"));
    }
    match (a.ops, a.runtime) {
        (Some(o), _) => s.push_str(&format!(" --ops {o}")),
        (None, Some(r)) => s.push_str(&format!(" --runtime {r}ns")),
        (None, None) => s.push_str(" --ops 200000"),
    }
    s.push_str(&format!(" --seed {}", a.seed));
    if a.precondition {
        s.push_str(" --precondition");
    }
    if a.batch > 1 {
        s.push_str(&format!(" --batch {}", a.batch));
    }
    if let ClockMode::Paced { scale } = a.clock {
        s.push_str(&format!(" --clock paced:{scale}"));
    }
    s
}

fn demo(a: &DemoArgs) -> Result<(), CliError> {
    let cfg = DeviceConfig::preset(&a.preset)?;
    println!("csd demo — a short tour of the emulated SSD\n");
    println!("1. The device: preset `{}` — {}", cfg.name, cfg.description);
    println!("   {}", report::geometry_line(&cfg));
    println!("   source: {}\n", cfg.source);
    let page = cfg.geometry.page_size as u64;
    let runs: Vec<(&str, WorkloadSpec)> = vec![
        (
            "sequential read, 128 KiB, qd 64",
            WorkloadSpec {
                rw: Rw::Read,
                bs: 128 << 10,
                iodepth: 64,
                ops: Some(50_000),
                seed: a.seed,
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
                seed: a.seed,
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
                seed: a.seed,
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
                seed: a.seed,
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
                seed: a.seed,
                ..Default::default()
            },
        ),
    ];
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
            cfg.name, a.seed
        ),
    );
    demo_ftl(&cfg, a.seed)?;
    query::demo_query(&cfg)?;
    println!(
        "\nNext: `csd load tpch --sf 0.1 --image dev.img`, `csd query --image dev.img q6`, `csd repro smart-ssd`, `csd config list`, `csd device create --preset isp-ch8 --image dev.img`, `csd io --image dev.img --rw randwrite --bs 4k`, `csd device smart --image dev.img`, `csd torture --cuts 1000`."
    );
    Ok(())
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
    println!(
        "   Write-through pads a page and logs an RDESC per 4 KiB command before completing it: every command waits for a log-page program on one die (the block interface's cost, batch-io §8.2.1). Write-back commits whole stripes with one log page each."
    );

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

/// Used by `device info`: wear and bad-block summary over every block.
pub(crate) fn wear_summary(nand: &Nand) -> (u32, u32, f64, u32, u64) {
    let blocks = nand.addr().blocks();
    let (mut min, mut max, mut sum, mut bad, mut pages) = (u32::MAX, 0u32, 0u64, 0u32, 0u64);
    for b in 0..blocks {
        if let Ok(i) = nand.block_info(BlockId(b)) {
            min = min.min(i.pe_cycles);
            max = max.max(i.pe_cycles);
            sum += i.pe_cycles as u64;
            bad += i.factory_bad as u32;
            pages += i.next_page as u64;
        }
    }
    (
        min.min(max),
        max,
        sum as f64 / blocks.max(1) as f64,
        bad,
        pages,
    )
}

#[derive(Subcommand)]
enum ModelCmd {
    /// The in-storage-scan paper's model (§4, eqs. 1-9): modeled time, records/s, MB/s, the
    /// per-term breakdown and the bottleneck of a table scan by in-host processing (ihp),
    /// the embedded CPU (cpu-isp) and per-channel hardware (hw-isp).
    ///
    /// Example: csd model scan --preset isp-ch16 --set channel.rate_mt_s=400
    Scan(ModelScanArgs),
}

#[derive(Args)]
struct ModelScanArgs {
    #[command(flatten)]
    src: ConfigSource,
    /// Fraction of records that match, in [0, 1] (Table 2: 0.013).
    #[arg(long, default_value_t = csd_model::scan::DEFAULT_SELECTIVITY, allow_negative_numbers = true)]
    selectivity: f64,
    /// Records in the table (default: TPC-H lineitem at scale factor 1).
    #[arg(long, default_value_t = csd_model::scan::DEFAULT_RECORDS)]
    records: u64,
    /// Bytes per record (§5.2.2: 128).
    #[arg(long, default_value_t = csd_model::scan::DEFAULT_RECORD_BYTES)]
    record_bytes: u64,
    /// How the phases combine: pipelined (slowest phase; default) or summed (as printed).
    #[arg(long, default_value = "pipelined", value_parser = ["pipelined", "summed"])]
    composition: String,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

/// `csd model scan`: evaluate the scan paper's equations 1-9 and print them.
fn model_scan_cmd(a: &ModelScanArgs) -> Result<(), CliError> {
    use csd_model::{ScanModel, ScanParams, Strategy};
    let cfg = a.src.load()?;
    let mut p = ScanParams::from_device(&cfg);
    p.selectivity = a.selectivity;
    p.records = a.records;
    p.record_bytes = a.record_bytes;
    p.composition = csd_model::Composition::parse(&a.composition).unwrap_or_default();
    let m = ScanModel::evaluate(&p)?;
    let cmd = format!(
        "csd model scan {} --records {} --record-bytes {} --selectivity {} --composition {}",
        a.src.describe(),
        p.records,
        p.record_bytes,
        p.selectivity,
        p.composition
    );
    if a.json {
        let mut o = serde_json::Map::new();
        o.insert("device".into(), serde_json::json!(cfg.name));
        o.insert("overrides".into(), serde_json::json!(a.src.set));
        o.insert("table_bytes".into(), serde_json::json!(m.table_bytes));
        if let Ok(serde_json::Value::Object(params)) = serde_json::to_value(&m.params) {
            o.extend(params);
        }
        for r in m.results() {
            let k = r.strategy.key();
            o.insert(format!("{k}_time_s"), serde_json::json!(r.time_s));
            o.insert(
                format!("{k}_records_per_s"),
                serde_json::json!(r.records_per_s),
            );
            o.insert(
                format!("{k}_table_mb_per_s"),
                serde_json::json!(r.table_mb_per_s),
            );
            for (term, v) in r.breakdown.terms() {
                o.insert(format!("{k}_{term}"), serde_json::json!(v));
            }
            o.insert(
                format!("{k}_bottleneck"),
                serde_json::json!(r.bottleneck.key()),
            );
        }
        for over in [Strategy::Ihp, Strategy::CpuIsp] {
            o.insert(
                format!("hw_isp_speedup_over_{}", over.key()),
                serde_json::json!(m.speedup(Strategy::HwIsp, over)),
            );
        }
        o.insert("command".into(), serde_json::json!(cmd));
        println!("{:#}", serde_json::Value::Object(o));
        return Ok(());
    }
    let time = |s: f64| {
        if s == 0.0 {
            "-".to_string()
        } else if s >= 1.0 {
            format!("{s:.3} s")
        } else if s >= 1e-3 {
            format!("{:.3} ms", s * 1e3)
        } else if s >= 1e-6 {
            format!("{:.3} us", s * 1e6)
        } else {
            format!("{:.1} ns", s * 1e9)
        }
    };
    println!(
        "scan model (in-storage-scan paper §4, eqs. 1-9, {}) on {}: {} records x {} B = {:.1} MB ({}), selectivity {}",
        p.composition,
        cfg.name,
        p.records,
        p.record_bytes,
        m.table_bytes as f64 / 1e6,
        report::bytes(m.table_bytes),
        p.selectivity
    );
    let rs = m.results();
    let mut t = report::table(&["", "ihp (eq. 9)", "cpu-isp (eq. 6)", "hw-isp (eq. 8)"]);
    let mut row = |name: &str, f: &dyn Fn(&csd_model::StrategyResult) -> String| {
        let mut cells = vec![name.to_string()];
        cells.extend(rs.iter().map(|r| f(r)));
        t.add_row(cells);
    };
    row("modeled time", &|r| time(r.time_s));
    row("records/s", &|r| format!("{:.3e}", r.records_per_s));
    row("table MB/s", &|r| format!("{:.1}", r.table_mb_per_s));
    row("flash array (eq. 1)", &|r| time(r.breakdown.flash_array_s));
    row("flash->DRAM (eq. 2/7)", &|r| {
        time(r.breakdown.flash_to_dram_s)
    });
    row("embedded CPU (eq. 5)", &|r| {
        time(r.breakdown.embedded_cpu_s)
    });
    row("DRAM->host (eq. 3)", &|r| time(r.breakdown.dram_to_host_s));
    row("host CPU (eq. 9)", &|r| time(r.breakdown.host_cpu_s));
    row("bottleneck", &|r| r.bottleneck.to_string());
    row("hw-isp faster by", &|r| {
        format!("{:.2}x", r.time_s / m.hw_isp.time_s)
    });
    println!("{t}");
    println!(
        "parameters: N_ch {}, N_way {}, tR {:.1} us, page {} B, channel {:.0} MB/s, DRAM {:.0} MB/s, host link {:.0} MB/s; \
         t_comp {} + σ·t_result {} cycles = {:.2} cycles/record at {:.0} MHz (CPU {} MHz / bus ratio {}); host {:.4} us/record",
        p.channels,
        p.ways,
        p.t_r_s * 1e6,
        p.page_bytes,
        p.channel_bytes_per_s / 1e6,
        p.dram_bytes_per_s / 1e6,
        p.host_link_bytes_per_s / 1e6,
        p.t_comp_cycles,
        p.t_result_cycles,
        p.cycles_per_record(),
        p.cycle_hz / 1e6,
        cfg.cpu.clock_mhz,
        csd_model::scan::CPU_TO_BUS_CLOCK_RATIO,
        p.t_ihp_scan_cpu_s * 1e6
    );
    println!(
        "device: {}  overrides: {}  deterministic (analytic, no seed)",
        cfg.name,
        if a.src.set.is_empty() {
            "none".to_string()
        } else {
            a.src.set.join(", ")
        }
    );
    println!("reproduce: {cmd}");
    Ok(())
}
