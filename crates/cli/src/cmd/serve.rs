//! `csd serve`: the device on an image file (or, with `--memory`, a throwaway device in
//! memory) as an NBD server (crate `csd-nbd`), with a
//! SMART stats file for `csd device smart` while it runs, and a clean shutdown on
//! SIGINT / SIGTERM (flush, checkpoint, sync). After a SIGKILL the next `csd serve`
//! recovers the FTL from its checkpoint and log like any other start.
//!
//! The stats file is a convenience, not part of the device: with `--read-only` and the
//! default stats file (`IMAGE.smart.json`), a stats file that cannot be written (an
//! image in a read-only directory or file system) is warned about once on stderr and
//! the server goes on without one. It is not moved elsewhere, because `csd device smart`
//! looks for it only beside the image. An explicit `--stats-file`, or a read-write
//! server (which writes the image beside it anyway), still fails on it.

use crate::{CliError, ConfigSource, image, report};
use clap::Args;
use csd_device::{BlockDevice, NvmeDevice};
use csd_nbd::{Listener, OpStats, Server, ServerConfig};
use csd_sim::ClockMode;
use csd_sim::events::{Counters, TimeModel};
use serde::Serialize;
use serde_json::Value;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(Args)]
pub(crate) struct ServeArgs {
    /// Image file to serve. If it does not exist it is created from --preset / --config /
    /// --set (default preset nvme-tlc); an image without an FTL needs --format.
    #[arg(long, required_unless_present = "memory")]
    image: Option<PathBuf>,
    /// Serve a fresh device in memory instead (from --preset / --config / --set), like
    /// `nbdkit memory`: nothing outlives the server. Its stats file is written only
    /// where --stats-file says.
    #[arg(long, conflicts_with_all = ["image", "read_only"])]
    memory: bool,
    /// With --memory: keep this much erase-block memory faulted in ahead of the writes
    /// that will need it, by a background thread (0: none; default: an eighth of the
    /// device's memory limit, at most 2 GiB). The device is log-structured, so writes
    /// keep landing in flash never used before; this takes the kernel's zeroing of that
    /// fresh memory off the request path. It is memory the device's next writes take,
    /// and counts toward the memory limit.
    #[arg(long, value_parser = crate::units::parse_size, conflicts_with = "image")]
    ready_memory: Option<u64>,
    #[command(flatten)]
    src: ConfigSource,
    /// Listen on this Unix socket (URI nbd+unix:///EXPORT?socket=PATH).
    #[arg(long, required_unless_present = "listen", conflicts_with = "listen")]
    socket: Option<PathBuf>,
    /// Listen on this TCP address, e.g. 127.0.0.1:10809 (port 0: any free port).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Bind a non-loopback address: the device is then open to the network, without
    /// authentication or TLS.
    #[arg(long)]
    allow_remote: bool,
    /// Export name (clients may also use the empty default name).
    #[arg(long, default_value = "")]
    export: String,
    /// Serve read-only: writes, trims and write-zeroes get EPERM.
    #[arg(long)]
    read_only: bool,
    /// Clock: virtual (reply as soon as a request ran) or paced[:SCALE] (reply when the
    /// wall clock reaches the modeled completion, times SCALE).
    #[arg(long, default_value = "virtual", value_parser = crate::args::parse_clock)]
    clock: ClockMode,
    /// How commands are placed in modeled time: `calendar` (each resource books an
    /// operation when code asks) or `events` (issue 30's event core: every connection's
    /// commands are booked at each resource in modeled-arrival order; with a paced clock
    /// a reply waits until the core has fixed its completion by the wall clock's instant).
    #[arg(long, default_value = csd_sim::events::TimeModel::default().name(), value_parser = crate::cmd::io::parse_time_model)]
    time_model: TimeModel,
    /// Write the SMART log and server counters to the stats file every SECS seconds
    /// (0: only at shutdown).
    #[arg(long, default_value_t = 2.0, value_name = "SECS")]
    stats_interval: f64,
    /// Stats file (default: IMAGE.smart.json). `csd device smart --image IMAGE` prints
    /// the default one while the server holds the image.
    #[arg(long, value_name = "PATH")]
    stats_file: Option<PathBuf>,
    /// Also print a line of stats to stderr every --stats-interval.
    #[arg(long)]
    print_stats: bool,
    /// Drop a connection that has not finished the NBD handshake (entered
    /// transmission) this many seconds after it was accepted.
    #[arg(long, default_value_t = 10.0, value_name = "SECS", value_parser = parse_secs)]
    handshake_timeout: f64,
    /// Close a connection that has had no request in flight for this many seconds
    /// (0: never, the default; NBD clients such as the kernel's may sit idle for hours).
    #[arg(long, default_value_t = 0.0, value_name = "SECS", value_parser = parse_secs)]
    idle_timeout: f64,
    /// Print connection events to stderr.
    #[arg(long)]
    verbose: bool,
    #[command(flatten)]
    ftl: image::FtlArgs,
}

/// A number of seconds: finite, not negative, at most a day.
fn parse_secs(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !v.is_finite() || !(0.0..=86_400.0).contains(&v) {
        return Err(format!("{s}: give 0 to 86400 seconds"));
    }
    Ok(v)
}

/// The stats file `csd serve` writes by default for `image`: `IMAGE.smart.json`.
pub(crate) fn default_stats_file(image: &Path) -> PathBuf {
    let mut s = OsString::from(image.as_os_str());
    s.push(".smart.json");
    PathBuf::from(s)
}

/// One kind of NBD request in the stats file.
#[derive(Serialize)]
struct OpFigures {
    count: u64,
    bytes: u64,
    errors: u64,
    mean_modeled_latency_us: f64,
}

impl From<&OpStats> for OpFigures {
    fn from(o: &OpStats) -> OpFigures {
        OpFigures {
            count: o.count,
            bytes: o.bytes,
            errors: o.errors,
            mean_modeled_latency_us: o.mean_modeled_us(),
        }
    }
}

/// The server's counters in the stats file.
#[derive(Serialize)]
struct ServerFigures {
    /// `virtual` or `paced:SCALE`.
    clock: String,
    /// `calendar` or `events`.
    time_model: TimeModel,
    /// The event core's counters (time model `events`).
    #[serde(skip_serializing_if = "Option::is_none")]
    event_core: Option<Counters>,
    /// The memory kept ready for a device in memory (`--ready-memory`): fresh blocks
    /// taken from it, fresh blocks mapped on the request path because it was empty, and
    /// blocks ready now.
    #[serde(skip_serializing_if = "Option::is_none")]
    memory_ready: Option<ReadyFigures>,
    connections_open: u64,
    connections_total: u64,
    protocol_errors: u64,
    handshakes_pending: u64,
    handshake_timeouts: u64,
    handshakes_evicted: u64,
    connections_refused_busy: u64,
    idle_closed: u64,
    requests_refused: u64,
    read: OpFigures,
    write: OpFigures,
    flush: OpFigures,
    trim: OpFigures,
    write_zeroes: OpFigures,
    modeled_now_s: f64,
    wall_s: f64,
}

impl ServerFigures {
    fn new(
        server: &Server,
        clock: ClockMode,
        time_model: TimeModel,
        started: Instant,
    ) -> ServerFigures {
        let s = &server.stats();
        ServerFigures {
            clock: match clock {
                ClockMode::Virtual => "virtual".to_string(),
                ClockMode::Paced { scale } => format!("paced:{scale}"),
            },
            time_model,
            event_core: server.event_counters(),
            memory_ready: server
                .with_device(|d| d.block().ftl().nand().memory_ready_stats())
                .map(|r| ReadyFigures {
                    blocks_taken: r.taken,
                    blocks_missed: r.missed,
                    blocks_ready: r.ready,
                }),
            connections_open: s.connections_open,
            connections_total: s.connections_total,
            protocol_errors: s.protocol_errors,
            handshakes_pending: s.handshakes_pending,
            handshake_timeouts: s.handshake_timeouts,
            handshakes_evicted: s.handshakes_evicted,
            connections_refused_busy: s.refused_busy,
            idle_closed: s.idle_closed,
            requests_refused: s.refused,
            read: (&s.reads).into(),
            write: (&s.writes).into(),
            flush: (&s.flushes).into(),
            trim: (&s.trims).into(),
            write_zeroes: (&s.zeroes).into(),
            modeled_now_s: s.modeled_now.ns() as f64 / 1e9,
            wall_s: started.elapsed().as_secs_f64(),
        }
    }
}

/// [`csd_nand::ReadyStats`] in the stats file.
#[derive(Serialize)]
struct ReadyFigures {
    blocks_taken: u64,
    blocks_missed: u64,
    blocks_ready: u64,
}

/// What `csd serve` adds to the SMART log's keys in its stats file.
#[derive(Serialize)]
struct ServeFigures<'a> {
    written_by: &'static str,
    live: bool,
    pid: u32,
    uri: &'a str,
    updated_unix_s: f64,
    server: ServerFigures,
}

/// Everything the stats file holds.
struct Snapshot<'a> {
    image: &'a Path,
    uri: &'a str,
    clock: ClockMode,
    time_model: TimeModel,
    started: Instant,
}

impl Snapshot<'_> {
    fn json(&self, server: &Server, live: bool) -> Result<Value, CliError> {
        let log = server.smart()?;
        let mut v = report::smart_json(self.image, &log);
        if let Some(m) = v.as_object_mut() {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            let figures = ServeFigures {
                written_by: "csd serve",
                live,
                pid: std::process::id(),
                uri: self.uri,
                updated_unix_s: now,
                server: ServerFigures::new(server, self.clock, self.time_model, self.started),
            };
            if let Ok(Value::Object(o)) = serde_json::to_value(figures) {
                m.extend(o);
            }
        }
        Ok(v)
    }

    /// Write the stats file atomically (a reader never sees half of it).
    fn write(&self, server: &Server, path: &Path, live: bool) -> Result<Value, CliError> {
        let v = self.json(server, live)?;
        let mut tmp = OsString::from(path.as_os_str());
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let io = |e| CliError::Io {
            path: path.to_path_buf(),
            source: e,
        };
        std::fs::write(&tmp, format!("{v:#}\n")).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)?;
        Ok(v)
    }
}

/// One line of stats for stderr.
fn stats_line(v: &Value) -> String {
    let s = &v["server"];
    let op = |k: &str| {
        format!(
            "{} {} ({:.1} us)",
            k,
            s[k]["count"].as_u64().unwrap_or(0),
            s[k]["mean_modeled_latency_us"].as_f64().unwrap_or(0.0)
        )
    };
    format!(
        "[{:.1} s] connections {} | {} | {} | {} | WA {:.3} | free blocks {} | modeled {:.3} s",
        s["wall_s"].as_f64().unwrap_or(0.0),
        s["connections_open"].as_u64().unwrap_or(0),
        op("read"),
        op("write"),
        op("flush"),
        v["write_amplification"].as_f64().unwrap_or(f64::NAN),
        v["free_blocks"].as_u64().unwrap_or(0),
        s["modeled_now_s"].as_f64().unwrap_or(0.0),
    )
}

/// `csd serve`.
pub(crate) fn serve_cmd(a: &ServeArgs) -> Result<(), CliError> {
    let stats_path = check_options(a)?;
    let dev = open_device(a)?;
    // What the device is called in messages and the stats file.
    let name = a.image.clone().unwrap_or_else(|| PathBuf::from("(memory)"));
    let device = dev.ftl().nand().config().name.clone();
    let server = Server::new(
        NvmeDevice::from_block(dev),
        ServerConfig {
            export_name: a.export.clone(),
            read_only: a.read_only,
            clock: a.clock,
            time_model: a.time_model,
            verbose: a.verbose,
            handshake_timeout: Duration::from_secs_f64(a.handshake_timeout),
            idle_timeout: (a.idle_timeout > 0.0).then(|| Duration::from_secs_f64(a.idle_timeout)),
            ..ServerConfig::default()
        },
    )?;
    let listener = listener(a)?;
    let stop = stop_on_signals()?;
    let uri = listener.uri(&a.export);
    let snap = Snapshot {
        image: &name,
        uri: &uri,
        clock: a.clock,
        time_model: a.time_model,
        started: Instant::now(),
    };
    let stats_path = match stats_path.map(|p| snap.write(&server, &p, true).map(|_| p)) {
        None => None,
        Some(Ok(p)) => Some(p),
        // Read-only with the default stats file: go on without it (module docs).
        Some(Err(e)) if a.read_only && a.stats_file.is_none() => {
            eprintln!(
                "warning: {e}; serving read-only without a stats file (`csd device smart` \
                 cannot show this server's figures; --stats-file PATH puts them elsewhere)"
            );
            None
        }
        Some(Err(e)) => return Err(e),
    };
    eprintln!(
        "serving {} ({} bytes, device {device}, clock {}, time model {}) at {uri}",
        name.display(),
        server.export_size(),
        match a.clock {
            ClockMode::Virtual => "virtual".to_string(),
            ClockMode::Paced { scale } => format!("paced:{scale}"),
        },
        a.time_model.name()
    );
    match &stats_path {
        Some(p) => eprintln!(
            "stats: {} (csd device smart --image {}); stop with Ctrl-C or SIGTERM",
            p.display(),
            name.display()
        ),
        None => eprintln!("stop with Ctrl-C or SIGTERM"),
    }
    // The URI alone on stdout, for scripts.
    println!("{uri}");

    let served = std::thread::scope(|s| {
        let ticker = s.spawn(|| {
            if let Some(p) = &stats_path {
                tick_stats(a, &snap, &server, p, &stop);
            }
        });
        let r = server.serve(&listener, &stop);
        // `serve` also returns on a listener failure: stop the ticker then too.
        stop.store(true, Ordering::Relaxed);
        let _ = ticker.join();
        r
    });
    drop(listener);
    if a.memory {
        eprintln!("shutting down: the device in memory is discarded");
    } else {
        eprintln!("shutting down: flush, checkpoint, sync");
        // Every connection has ended; make the device durable before the final stats.
        server.with_device(|d| image::close(d.block_mut()))?;
    }
    let v = match &stats_path {
        Some(p) => snap.write(&server, p, false)?,
        None => snap.json(&server, false)?,
    };
    eprintln!("{}", stats_line(&v));
    served?;
    if let Some(image) = &a.image {
        eprintln!("image {} synced", image.display());
    }
    Ok(())
}

/// Refuses options that cannot work, before anything touches the image; the stats
/// file's path (none for a device in memory without --stats-file).
fn check_options(a: &ServeArgs) -> Result<Option<PathBuf>, CliError> {
    if let ClockMode::Paced { scale } = a.clock
        && scale > 1e6
    {
        return Err(CliError::Serve(csd_nbd::NbdError::Config(format!(
            "--clock paced:{scale}: a scale over 1e6 would hold replies for days"
        ))));
    }
    if let Some(addr) = a.listen
        && !addr.ip().is_loopback()
        && !a.allow_remote
    {
        // Refused before anything touches the image.
        return Err(CliError::Usage(format!(
            "--listen {addr} is not a loopback address: NBD has no authentication here; \
             add --allow-remote to serve the device to the network"
        )));
    }
    let Some(stats_path) = a
        .stats_file
        .clone()
        .or_else(|| a.image.as_deref().map(default_stats_file))
    else {
        return Ok(None);
    };
    image::guard_output(&stats_path, &[], true)?;
    if Some(&stats_path) == a.image.as_ref() {
        return Err(CliError::Usage(
            "--stats-file is the image itself: pick another path".into(),
        ));
    }
    Ok(Some(stats_path))
}

/// `--ready-memory`'s default for a device in memory with memory limit `limit`: an
/// eighth of it, at most 2 GiB (512 MiB without a limit). Rule: the ready memory is what
/// the device's next writes take anyway, so it costs only if they never come; an eighth
/// of the limit leaves the device seven eighths for what it holds, and 2 GiB covers five
/// seconds of the fastest 4 KiB random writes a client reached here (about 110K/s, fio's
/// nbd engine on one core; each write takes 4 KiB of fresh flash).
fn default_ready_memory(limit: Option<u64>) -> u64 {
    limit.map_or(512 << 20, |l| (l / 8).min(2 << 30))
}

/// The image's block device: read-only, or read-write (created if it does not exist);
/// or a fresh device in memory.
fn open_device(a: &ServeArgs) -> Result<BlockDevice, CliError> {
    let Some(path) = &a.image else {
        let cfg = a.src.load()?;
        eprintln!("device in memory ({})", report::geometry_line(&cfg));
        let ftl = a.ftl.config(cfg.geometry.sector_size)?;
        let mut dev = csd_device::stack::in_memory(cfg, ftl)?;
        if let Some(n) = report::memory_limit_notice(dev.ftl().nand()) {
            eprintln!("{n}");
        }
        let nand = dev.ftl_mut().nand_mut();
        let ready = a
            .ready_memory
            .unwrap_or_else(|| default_ready_memory(nand.memory_limit()));
        if ready > 0 && !nand.keep_memory_ready(ready) {
            eprintln!(
                "warning: could not start the thread that keeps memory ready; serving without it"
            );
        }
        return Ok(dev);
    };
    Ok(if a.read_only {
        if a.ftl.format || a.ftl.op.is_some() {
            return Err(CliError::Usage(
                "--read-only cannot be combined with --format or --op".into(),
            ));
        }
        image::open_ro_serving(path, false)?
    } else {
        if !path.exists() {
            let cfg = a.src.load()?;
            eprintln!(
                "creating {} ({})",
                path.display(),
                report::geometry_line(&cfg)
            );
        }
        image::open_rw(path, &a.src, &a.ftl, true, false)?
    })
}

/// The Unix socket or TCP address to listen on.
fn listener(a: &ServeArgs) -> Result<Listener, CliError> {
    Ok(match (&a.socket, a.listen) {
        (Some(p), _) => Listener::unix(p)?,
        (None, Some(addr)) => Listener::tcp(addr, a.allow_remote)?,
        (None, None) => {
            return Err(CliError::Serve(csd_nbd::NbdError::Config(
                "give --socket PATH or --listen ADDR:PORT".into(),
            )));
        }
    })
}

/// A flag SIGINT and SIGTERM set (for `csd serve` and `csd kv serve`); a second signal
/// during the shutdown ends the process at once (the next start recovers, as after any
/// crash).
pub(crate) fn stop_on_signals() -> Result<Arc<AtomicBool>, CliError> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // A second signal during the shutdown ends the process at once (the next start
        // recovers, as after any crash).
        signal_hook::flag::register_conditional_shutdown(sig, 1, stop.clone())
            .and_then(|_| signal_hook::flag::register(sig, stop.clone()))
            .map_err(|e| CliError::Io {
                path: PathBuf::from("signal handler"),
                source: e,
            })?;
    }
    Ok(stop)
}

/// Rewrites the stats file every `--stats-interval` seconds until `stop` (printing a
/// line each time with `--print-stats`).
fn tick_stats(
    a: &ServeArgs,
    snap: &Snapshot,
    server: &Server,
    stats_path: &Path,
    stop: &AtomicBool,
) {
    if !(a.stats_interval > 0.0 && a.stats_interval.is_finite()) {
        return;
    }
    let every = Duration::from_secs_f64(a.stats_interval.max(0.05));
    let mut next = Instant::now() + every;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
        if Instant::now() < next {
            continue;
        }
        next += every;
        match snap.write(server, stats_path, true) {
            Ok(v) if a.print_stats => eprintln!("{}", stats_line(&v)),
            Ok(_) => {}
            Err(e) => eprintln!("stats: {e}"),
        }
    }
}

/// `csd device smart` on an image a live server holds: print the server's stats file.
pub(crate) fn print_live_smart(image: &Path, json_out: bool) -> Result<(), CliError> {
    let path = default_stats_file(image);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        CliError::Nvme(format!(
            "{} is in use by another process, and its stats file {} cannot be read ({e}); \
             is `csd serve` running on it with another --stats-file?",
            image.display(),
            path.display()
        ))
    })?;
    if json_out {
        print!("{text}");
        return Ok(());
    }
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| CliError::Nvme(format!("{}: not a stats file: {e}", path.display())))?;
    let log = report::smart_from_json(&v).ok_or_else(|| {
        CliError::Nvme(format!(
            "{}: the SMART fields are incomplete",
            path.display()
        ))
    })?;
    let age = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
        - v["updated_unix_s"].as_f64().unwrap_or(0.0);
    println!(
        "live server (pid {}, {}): SMART log from its stats file {}, written {:.1} s ago",
        v["pid"],
        v["uri"].as_str().unwrap_or("?"),
        path.display(),
        age.max(0.0)
    );
    report::print_smart(image, &log, false);
    if v["server"].is_object() {
        println!("{}", stats_line(&v));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::default_ready_memory;
    use crate::Cli;
    use clap::Parser;

    #[test]
    fn ready_memory_defaults_to_an_eighth_of_the_limit_at_most_2_gib() {
        assert_eq!(default_ready_memory(Some(8 << 30)), 1 << 30);
        assert_eq!(default_ready_memory(Some(64 << 30)), 2 << 30);
        assert_eq!(default_ready_memory(None), 512 << 20);
    }

    #[test]
    fn ready_memory_is_refused_without_memory() {
        let line = [
            "csd",
            "serve",
            "--image",
            "d.img",
            "--socket",
            "s",
            "--ready-memory",
            "1g",
        ];
        let err = Cli::try_parse_from(line).err().expect("refused");
        assert!(err.to_string().contains("--image"), "{err}");
        // Without it, an image needs none.
        assert!(Cli::try_parse_from(["csd", "serve", "--image", "d.img", "--socket", "s"]).is_ok());
    }
}
