//! `csd`: the command-line front end of the csd computational-storage emulator.
//!
//! Commands: `demo` (a short tour on the default device), `config` (show, list and
//! validate device configs), `device` (create and inspect image files), `io` (fio-style
//! workloads with modeled and wall-clock figures), `serve` (the device as an NBD server
//! for real clients), `kv serve` (the key-value store over the Redis protocol), `load`,
//! `tables`, `index`, `query`, `sql` and `array` (tables and SQL on device images),
//! `model` (the papers' analytic models), `bench` (benchmarks) and `repro` (the papers'
//! experiments). Every command has `--help`.
//!
//! Where things are:
//! * this file: the command tree (clap) and the dispatch, nothing else;
//! * [`cmd`]: one module per command (or command family) with its options and body;
//! * [`repro`]: the reproduction library (crate `csd-repro`, `crates/repro`): one module
//!   per paper reproduction, each shaped sweep → checks → render, with the shared parts
//!   (comparison with the paper, markdown, report files) in its `lib.rs`;
//! * [`args`]: options shared by several commands, parsed once into typed values;
//! * [`image`]: opening devices and images with the CLI's rules; [`report`]: terminal
//!   tables, JSON objects and progress bars; [`units`]: sizes and durations;
//!   [`error`]: the one error type. Commands call these; none of them calls a command.

mod args;
mod cmd;
#[cfg(test)]
mod command_line_tests;
mod error;
mod image;
mod lineedit;
mod report;
mod rounds;
mod units;

use args::ConfigSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use cmd::{
    array, bench_fdtree, bench_flixr, bench_oneshot, bench_open, bench_query, bench_recovery,
    bench_serve, bench_tpch, bench_ycsb, config, demo, device, index, io, kv_serve, model, query,
    serve, sql, tables, torture, worker,
};
use csd_repro as repro;
use csd_repro::reproduce;
use error::CliError;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "csd", version, about = "An emulated computational-storage SSD: flash media, timing and energy model, device images and workloads", long_about = None)]
struct Cli {
    /// The command to run.
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// A short tour: create the default device in memory, run a few workloads, print the report.
    Demo(demo::DemoArgs),
    /// Show, list and validate device configurations.
    #[command(subcommand)]
    Config(config::ConfigCmd),
    /// Create and inspect device image files.
    #[command(subcommand)]
    Device(device::DeviceCmd),
    /// Run an fio-style workload and report modeled IOPS, bandwidth, latency, utilization
    /// and energy next to the emulator's wall-clock speed.
    Io(io::IoArgs),
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
    Model(model::ModelCmd),
    /// Serve the device on an image (or a throwaway one in memory) as a Network Block
    /// Device, for fio (--ioengine=nbd), nbdinfo, nbdcopy, qemu or the kernel's nbd
    /// driver. Stops cleanly (flush, checkpoint, sync) on Ctrl-C or SIGTERM.
    ///
    /// Example: csd serve --image dev.img --preset tiny --socket /tmp/csd.sock
    /// (or: csd serve --memory --socket /tmp/csd.sock)
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
    /// Serve this machine's devices of an array to a distributed coordinator (Arrow
    /// Flight over gRPC, datafusion-distributed): `csd query --array DIR` on a manifest
    /// that lists `workers` runs each device's scan on its worker.
    ///
    /// Example: csd worker --array arr --devices dev0.img,dev1.img --listen 127.0.0.1:50051
    Worker(worker::WorkerArgs),
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
    Serve(kv_serve::KvServeArgs),
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
    Recovery(bench_recovery::RecoveryArgs),
    /// Scan speed of the emulator: TPC-H lineitem in an in-memory device, a query per
    /// strategy and layout (load excluded from the times).
    ///
    /// Example: csd bench query --sf 1 --query q6
    Query(bench_query::BenchQueryArgs),
    /// The 22 TPC-H queries through DataFusion over an in-memory device: per-query wall
    /// time and correctness; `--compare duckdb` adds DuckDB's times and the ratio.
    ///
    /// Example: csd bench tpch --sf 1 --compare duckdb
    Tpch(bench_tpch::BenchTpchArgs),
    /// The FD+tree paper's harness (§5) on an emulated SSD in paced mode: one scheme,
    /// one workload; throughput and R_p / R_q per request type, and a latency plot.
    ///
    /// Example: csd bench fdtree --scheme fc --lookup-ratio 0.8 --preload 100000 --requests 100000
    Fdtree(bench_fdtree::BenchFdtreeArgs),
    /// A user's first query: `csd query --image IMG qN` as fresh processes (wall time,
    /// peak RSS, the scan's wall time beside the warm figure), and with `--compare duckdb`
    /// a fresh DuckDB process over Parquet of the same rows.
    ///
    /// Example: csd bench oneshot --sf 1 --queries q1,q6 --compare duckdb
    Oneshot(bench_oneshot::BenchOneshotArgs),
    /// Open time and memory of an image of real size: fresh, after writing and a clean
    /// shutdown, and after a crash (each open measured in its own process).
    ///
    /// Example: csd bench open --clean-gib 4 --crash-gib 1,16
    Open(bench_open::BenchOpenArgs),
    /// `csd serve` against `nbdkit memory` and `nbdkit file` under the same fio jobs (4
    /// KiB random writes and reads over NBD, queue depth 32), beside `nbdkit null`
    /// (nbdkit with no storage behind it), in rounds that run every server once: median
    /// IOPS side by side, ratios taken within a round.
    ///
    /// Example: csd bench serve --runtime 5 --rounds 3
    Serve(bench_serve::BenchServeArgs),
    /// FLIXR's scan-with-filtering microbenchmark (flixr §6.1): no index, host-side
    /// B+tree (node cache in host DRAM, and all in memory), FLIXR-S and FLIXR-HS on the
    /// same table and queries; modeled time per query and storage traffic split into
    /// index and data pages.
    ///
    /// Example: csd bench flixr --sf 0.03 --queries 20 --selectivity 0.01
    Flixr(bench_flixr::BenchFlixrArgs),
    /// The batch-io paper's key-value store under YCSB on either interface: modeled and
    /// wall ops/s, latency percentiles, Table 3/4 figures (RA, WA, GC overhead) and the
    /// host CPU share; optionally beside redb and fjall on a real file.
    ///
    /// Example: csd bench ycsb --interface block --workload write-heavy --records 200000 --cache 20%
    Ycsb(bench_ycsb::BenchYcsbArgs),
}

/// The process allocator: mimalloc. glibc's malloc gave back the memory of every
/// freed record batch to the kernel (`heap_trim` → `madvise`, page faults on the next
/// batch), a tenth of some TPC-H queries' wall time; the modeled figures do not depend
/// on it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay`: index 15 of `mi_option_e` in the v3 header that
/// libmimalloc-sys 0.1.49 builds (its Rust bindings name only some options; a test
/// checks the index by the option's default, 1000 ms).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Memory the process freed stays with it (mimalloc never purges it). By default
/// mimalloc returns memory unused for a second to the kernel (`madvise`), and the next
/// allocation of it faults every page in again, zeroed by the kernel. A csd process
/// repeats its work (queries, scans, event-graph compactions, batches), so that was pure
/// cost: `csd bench tpch --sf 1 --repeat 3` took about 30K page faults after its load,
/// about 100 with this, and its system time fell by about a quarter; peak RSS grew by
/// about 1% (what a process keeps, it had at its peak). The modeled figures do not
/// depend on it.
/// `MIMALLOC_PURGE_DELAY` in the environment (mimalloc's own setting) is left to rule.
fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: `mi_option_set` stores a value in mimalloc's option table (an atomic
    // store, safe from any thread); -1 is the documented "never purge" value.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) }
}

/// mimalloc's `mi_option_allow_thp`: index 43 of `mi_option_e` in the same v3 header (a
/// test checks it by the option's default, 1, and by what setting it does).
const MI_OPTION_ALLOW_THP: libmimalloc_sys::mi_option_t = 43;

/// The heap on 4 KiB pages: no transparent huge pages for the process's memory. mimalloc
/// asks for huge pages on its arenas by default (`MADV_HUGEPAGE`), so the first touch of
/// any 2 MiB of heap made the kernel zero all of it; on a virtual machine whose free
/// memory is given back to its host (this one) that first touch runs at about 1 GB/s, so
/// a small allocation in a fresh page cost about 2 ms. Measured 2026-12-05 (release,
/// alternated): the first TPC-H query of `csd bench tpch --sf 1 --queries 4,6,15` took
/// 0.22-0.29 s with huge pages and 0.08-0.13 s without (half of its samples were the
/// kernel zeroing pages), the second 0.05-0.18 s against 0.030-0.035 s; a one-shot
/// `csd query --image sf1.img --strategy hw-isp q6` 0.16-1.21 s against 0.16-0.17 s,
/// peak RSS 148-159 MB against 111-113 MB. Warm, best-of-5 runs moved within the
/// machine's noise (TPC-H Q9 at most 8% slower without). The rule is the device
/// memory's (README, "Memory of a device in memory"): the page size whose worst case is
/// best, since a user's first run is the cold one. `MIMALLOC_ALLOW_THP` in the
/// environment (mimalloc's own setting) is left to rule.
///
/// Not for `csd load`: `csd load tpch --sf 1` into a fresh image took 11.26 / 9.83 / 9.52 s
/// with the heap on small pages against 8.54 / 8.01 / 7.95 s with huge pages (alternated,
/// the disk synced before each run; perf: the kernel's copy of the programmed pages into
/// the image's page cache, `pwrite`, rose from 1% to 11-18% of the samples), so its worst
/// case is best with huge pages: it takes them back once its arguments are parsed.
fn heap_on_small_pages(small: bool) {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
        return;
    }
    // SAFETY: `mi_option_set` stores a value in mimalloc's option table (an atomic store,
    // safe from any thread): arenas mapped from now on are (not) advised for huge pages.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ALLOW_THP, libc::c_long::from(!small)) }
    // What mimalloc does itself when the option is 0 at its start (it starts before
    // `main`): on a system whose huge pages are always on, the process opts out.
    #[cfg(target_os = "linux")]
    // SAFETY: `prctl(PR_SET_THP_DISABLE, flag, 0, 0, 0)` sets a flag of this process's
    // memory map; it reads and writes no memory of ours. A failure (an old kernel)
    // leaves huge pages as they were, which is only slower.
    unsafe {
        libc::prctl(
            libc::PR_SET_THP_DISABLE,
            libc::c_ulong::from(small),
            0,
            0,
            0,
        );
    }
}

fn main() -> ExitCode {
    keep_freed_memory();
    // Before anything else touches the heap; `csd load` takes huge pages back once parsed.
    heap_on_small_pages(true);
    let mut command = Cli::command();
    let matches = command.get_matches_mut();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.format(&mut command).exit());
    if matches!(cli.cmd, Cmd::Load(_)) {
        heap_on_small_pages(false);
    }
    reproduce::record(&command, &matches);
    csd_device::size_scan_pool();
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
        Cmd::Demo(a) => demo::run(&a),
        Cmd::Config(c) => config::run(c),
        Cmd::Device(d) => device::run(d),
        Cmd::Io(a) => io::run(&a),
        Cmd::Torture(a) => torture::run(&a),
        Cmd::Model(model::ModelCmd::Scan(a)) => model::scan(&a),
        Cmd::Serve(a) => serve::serve_cmd(&a),
        Cmd::Load(c) => tables::load_cmd(&c),
        Cmd::Tables(a) => tables::tables_cmd(&a),
        Cmd::Index(c) => index::index_cmd(&c),
        Cmd::Query(a) => query::query_cmd(&a),
        Cmd::Sql(a) => sql::sql_cmd(&a),
        Cmd::Array(c) => array::array_cmd(&c),
        Cmd::Worker(a) => worker::worker_cmd(&a),
        Cmd::Repro(c) => Ok(repro::repro_cmd(&c)?),
        Cmd::Kv(KvCmd::Serve(a)) => kv_serve::kv_serve_cmd(&a),
        Cmd::Bench(b) => bench(b),
    }
}

fn bench(b: BenchCmd) -> Result<(), CliError> {
    match b {
        BenchCmd::Array(a) => array::bench_array_cmd(&a),
        BenchCmd::Recovery(a) => bench_recovery::run(&a),
        BenchCmd::Query(a) => bench_query::bench_query_cmd(&a),
        BenchCmd::Tpch(a) => bench_tpch::run(&a),
        BenchCmd::Fdtree(a) => bench_fdtree::bench_fdtree_cmd(&a),
        BenchCmd::Oneshot(a) => bench_oneshot::run(&a),
        BenchCmd::Open(a) => bench_open::run(&a),
        BenchCmd::Serve(a) => bench_serve::run(&a),
        BenchCmd::Flixr(a) => bench_flixr::run(&a),
        BenchCmd::Ycsb(a) => bench_ycsb::bench_ycsb_cmd(&a),
    }
}

#[cfg(test)]
mod allocator_tests {
    use super::*;

    /// The index taken for `mi_option_purge_delay` names that option: its default is
    /// mimalloc v3's 1000 ms purge delay (a header whose enum moved would give another
    /// option's default here), and setting it keeps freed memory.
    #[test]
    fn the_purge_delay_option_is_the_one_set() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return; // the environment chose the value
        }
        // SAFETY: reads and stores in mimalloc's option table (atomic, any thread).
        unsafe {
            assert_eq!(libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY), 1000);
            keep_freed_memory();
            assert_eq!(libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY), -1);
        }
    }

    /// The index taken for `mi_option_allow_thp` names that option (its default, 1, and
    /// the option after it, `minimal_purge_size`, defaulting to 0, pin the place), and
    /// the process's huge pages are off after the setting and on again after its undoing.
    #[test]
    fn the_huge_page_option_is_the_one_set() {
        if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
            return; // the environment chose the value
        }
        // SAFETY: reads and stores in mimalloc's option table (atomic, any thread);
        // `prctl(PR_GET_THP_DISABLE)` only reads a flag of the process.
        unsafe {
            assert_eq!(libmimalloc_sys::mi_option_get(MI_OPTION_ALLOW_THP), 1);
            assert_eq!(libmimalloc_sys::mi_option_get(MI_OPTION_ALLOW_THP + 1), 0);
            heap_on_small_pages(true);
            assert_eq!(libmimalloc_sys::mi_option_get(MI_OPTION_ALLOW_THP), 0);
            #[cfg(target_os = "linux")]
            assert_eq!(libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0), 1);
            heap_on_small_pages(false);
            assert_eq!(libmimalloc_sys::mi_option_get(MI_OPTION_ALLOW_THP), 1);
            #[cfg(target_os = "linux")]
            assert_eq!(libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0), 0);
        }
    }
}
