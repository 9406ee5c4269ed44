//! `csd kv serve`: the batch-io paper's key-value store (§8.1.2, crate csd-kv) on a device
//! image, served over the Redis protocol (RESP2) so that `redis-cli`, `redis-benchmark`
//! and Redis client libraries use it. The protocol, the commands and the durability rule
//! (a write is acknowledged only once it is on the device) live in `csd_kv::server`; this
//! command opens the image, runs the server and shuts down cleanly.
//!
//! * A missing image is created: from `--preset` / `--config` / `--set`, or by default the
//!   paper's `ox-westlake` preset cut to `--device-gib` (2 GiB) as `csd bench ycsb` does,
//!   with 25% over-provisioning unless `--op` says otherwise. An existing image is opened
//!   and its FTL recovered (after a SIGKILL or power cut the log is replayed); then the
//!   store on it is recovered, or formatted if the device is empty. A store of the other
//!   interface, or other data at LBA 0, is refused before anything is written.
//! * SIGINT / SIGTERM: stop accepting, close the connections, sync the store, write a
//!   host checkpoint (block interface), and close the device (FTL checkpoint marked clean,
//!   image synced). A second signal ends the process at once; the next start recovers.
//! * The listening address goes to stdout as `listening on ADDR` (port 0 picks a free
//!   port), for scripts and tests; everything else goes to stderr.

use crate::{CliError, ConfigSource, cmd::bench_ycsb, image, report};
use clap::Args;
use csd_device::NvmeDevice;
use csd_device::stack::{self, OpenOptions};
use csd_host::Client;
use csd_kv::{Interface, IoStats, Server, ServerConfig, ServerStats, Store, StoreConfig};
use csd_nand::Access;
use csd_sim::DeviceConfig;
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::time::Instant;

/// Options of `csd kv serve`.
#[derive(Args)]
pub(crate) struct KvServeArgs {
    /// Image file. Created if it does not exist (see --preset and --device-gib).
    #[arg(long)]
    image: PathBuf,
    #[command(flatten)]
    src: ConfigSource,
    /// When the image is created: cut the device to about this raw capacity, GiB (8 MiB
    /// blocks of ox-westlake; default 2 when no --preset / --config is given).
    #[arg(long)]
    device_gib: Option<f64>,
    /// TCP address to listen on (port 0: any free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:6379")]
    listen: SocketAddr,
    /// Bind a non-loopback address: the store is then open to the network, without
    /// authentication or TLS.
    #[arg(long)]
    allow_remote: bool,
    /// Storage interface: block (host log structuring) or batch (log structuring in the
    /// device). Must match the store already on the image.
    #[arg(long, default_value = "batch", value_parser = parse_interface)]
    interface: Interface,
    /// Host page cache, in 4 KiB pages (0: unbounded).
    #[arg(long, default_value_t = 16384)]
    cache_pages: usize,
    /// Host I/O queue depth of the store.
    #[arg(long, default_value_t = 64)]
    queue_depth: usize,
    /// Connections served at once; more are refused with an error reply.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Print connection events to stderr.
    #[arg(long)]
    verbose: bool,
    /// How each pipeline's commands are placed in modeled time: `events` (the event core:
    /// every resource first-come first-served in modeled-arrival order; its counters in
    /// INFO) or `calendar` (each resource books an operation when code asks).
    #[arg(long, default_value = csd_sim::events::TimeModel::default().name(), value_parser = crate::cmd::io::parse_time_model)]
    time_model: csd_sim::events::TimeModel,
    #[command(flatten)]
    ftl: image::FtlArgs,
}

fn parse_interface(s: &str) -> Result<Interface, String> {
    s.parse()
}

/// The device config of a new image.
fn new_image_config(a: &KvServeArgs) -> Result<DeviceConfig, CliError> {
    if a.src.given() {
        let cfg = a.src.load()?;
        match a.device_gib {
            Some(g) => bench_ycsb::shrink_config(cfg, g),
            None => Ok(cfg),
        }
    } else {
        bench_ycsb::device_config("ox-westlake", a.device_gib.unwrap_or(2.0))
    }
}

fn open_device(a: &KvServeArgs) -> Result<csd_device::BlockDevice, CliError> {
    if a.image.exists() {
        if a.device_gib.is_some() {
            return Err(CliError::Usage(format!(
                "--device-gib applies when the image is created, and {} exists: drop it",
                a.image.display()
            )));
        }
        return image::open_rw(&a.image, &a.src, &a.ftl, false, false);
    }
    let cfg = new_image_config(a)?;
    eprintln!(
        "creating {} ({})",
        a.image.display(),
        report::geometry_line(&cfg)
    );
    let mut ftl = a.ftl.clone();
    if ftl.op.is_none() {
        ftl.op = Some(bench_ycsb::RUN_OP);
    }
    let opts = OpenOptions {
        access: Access::ReadWrite,
        ftl: ftl.config(cfg.geometry.sector_size)?,
        expect: None,
        create: Some(cfg),
        format: false,
    };
    let (dev, _) = stack::open_image(&a.image, &opts)?;
    Ok(dev)
}

fn kv(e: csd_kv::KvError) -> CliError {
    CliError::Usage(format!("key-value store: {e}"))
}

/// Give the device back and shut it down cleanly.
fn close(c: Client) -> Result<(), CliError> {
    let mut b = c.into_device().into_block();
    image::close(&mut b)
}

/// `csd kv serve`.
pub(crate) fn kv_serve_cmd(a: &KvServeArgs) -> Result<(), CliError> {
    if !a.listen.ip().is_loopback() && !a.allow_remote {
        return Err(CliError::Usage(format!(
            "--listen {}: not a loopback address, and the Redis protocol here has no \
             authentication: add --allow-remote to serve the store to the network",
            a.listen
        )));
    }
    if a.queue_depth == 0 {
        return Err(CliError::Usage("--queue-depth must be at least 1".into()));
    }
    let store = open_store(a)?;
    let (listener, store) = bind(a, store)?;
    let addr = listener.local_addr().map_err(|e| CliError::Io {
        path: PathBuf::from(a.listen.to_string()),
        source: e,
    })?;
    let stop = super::serve::stop_on_signals()?;
    let server = Server::new(
        store,
        ServerConfig {
            max_connections: a.max_connections.max(1),
            verbose: a.verbose,
            time_model: a.time_model,
            ..ServerConfig::default()
        },
    );
    eprintln!(
        "try: redis-cli -h {} -p {} ; stop with Ctrl-C or SIGTERM",
        addr.ip(),
        addr.port()
    );
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on {addr}");
        let _ = out.flush();
    }
    let served = server.serve(&listener, &stop);
    drop(listener);
    eprintln!("shutting down: sync, checkpoint, close");
    let st = server.stats();
    let mut store = server.into_store();
    let synced = store.sync().and_then(|_| store.checkpoint()).map_err(kv);
    let io = store.stats().io;
    close(store.into_device())?;
    synced?;
    served.map_err(|e| CliError::Io {
        path: PathBuf::from(addr.to_string()),
        source: e,
    })?;
    print_served(a, &st, &io);
    Ok(())
}

/// Opens (or formats) the store on the image and says which.
fn open_store(a: &KvServeArgs) -> Result<Store<Client>, CliError> {
    let t0 = Instant::now();
    let dev = open_device(a)?;
    let device = dev.ftl().nand().config().name.clone();
    let client = Client::new(NvmeDevice::from_block(dev))?;
    let scfg = StoreConfig {
        interface: a.interface,
        cache_pages: (a.cache_pages > 0).then_some(a.cache_pages),
        queue_depth: a.queue_depth,
        ..StoreConfig::default()
    };
    let mut store = match Store::open(client, scfg) {
        Ok(s) => s,
        Err(f) => {
            // Nothing of the store was written; close the device as it was.
            let error = f.error;
            close(f.dev)?;
            return Err(CliError::Usage(format!("{}: {error}", a.image.display())));
        }
    };
    let keys = store.len().map_err(kv)?;
    eprintln!(
        "{} key-value store on {} (device {device}, {} interface): {keys} keys, {} pages; opened in {:.2} s",
        if store.recovered() {
            "recovered the"
        } else {
            "formatted a new"
        },
        a.image.display(),
        a.interface.name(),
        store.pages(),
        t0.elapsed().as_secs_f64()
    );
    Ok(store)
}

/// The listening socket; on failure the store is synced and the image closed.
fn bind(
    a: &KvServeArgs,
    mut store: Store<Client>,
) -> Result<(TcpListener, Store<Client>), CliError> {
    let listener = match TcpListener::bind(a.listen) {
        Ok(l) => l,
        Err(e) => {
            let _ = store.sync();
            close(store.into_device())?;
            return Err(CliError::Io {
                path: PathBuf::from(a.listen.to_string()),
                source: e,
            });
        }
    };
    Ok((listener, store))
}

/// The totals of the run, after the image is closed.
fn print_served(a: &KvServeArgs, st: &ServerStats, io: &IoStats) {
    eprintln!(
        "served {} connections, {} commands ({} errors, {} protocol errors), {} durability syncs; \
         store wrote {} pages in {} seals; image {} closed cleanly",
        st.connections_total,
        st.commands,
        st.errors,
        st.protocol_errors,
        st.syncs,
        io.user_write_bytes / csd_kv::page::PAGE as u64,
        io.seals,
        a.image.display()
    );
}
