//! The worker (`csd worker`): a datafusion-distributed `Worker` on a tonic gRPC server
//! (Arrow Flight), serving the scans of the device images of its machine.
//!
//! * The devices are opened read-only by the caller (as `csd query` opens them) and
//!   their catalogs read once at start; a plan whose catalog expectations (rows, pages,
//!   layout) differ from a device's is refused (restart the worker after a load).
//! * Every session the engine builds for a task gets the devices ([`WorkerDevices`])
//!   and the [`MemberCodec`]; the token of the request is passed on to the requests
//!   this worker makes to other workers (stages reading stages).
//! * Loads (`csd load ... --array DIR` on a manifest that lists workers) arrive as a
//!   Flight `DoPut` on the same server ([`crate::load`]).
//! * Access: a loopback address by default. Any other address needs `allow_remote`
//!   and a token; with a token, every request must carry it (`x-csd-token`) or is
//!   refused with `UNAUTHENTICATED`, and the refusal is logged with the peer's address.

use std::net::SocketAddr;
use std::sync::Arc;

use csd_host::{Catalog, Client};
use csd_sim::DeviceConfig;
use csd_sql::Device;
use csd_sql::device::ScanSlots;
use datafusion_distributed::{DistributedExt, Worker, WorkerQueryContext};
use tonic::service::InterceptorLayer;
use tonic::transport::Server;

use crate::load::{LoadService, Opener};
use crate::member::{MemberCodec, ServedDevice, WorkerDevices};
use crate::wire::WIRE_VERSION;
use crate::{DistError, TOKEN_HEADER};

/// How a worker serves.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Address to listen on.
    pub addr: SocketAddr,
    /// Shared token every request must carry (`None`: none required; loopback only).
    pub token: Option<String>,
    /// Listen on a non-loopback address (needs a token).
    pub allow_remote: bool,
    /// Device scans at once (host threads for the emulated devices).
    pub threads: usize,
}

impl WorkerOptions {
    /// Checks the access rules of the [module docs](self).
    pub fn check(&self) -> Result<(), DistError> {
        if self.addr.ip().is_loopback() {
            return Ok(());
        }
        if !self.allow_remote {
            return Err(DistError::Access(format!(
                "{} is not a loopback address: give --allow-remote and a token \
                 (CSD_WORKER_TOKEN) to serve other machines",
                self.addr
            )));
        }
        match &self.token {
            Some(t) if t.len() >= 16 => Ok(()),
            Some(_) => Err(DistError::Access(
                "the token is shorter than 16 characters".into(),
            )),
            None => Err(DistError::Access(format!(
                "serving {} to other machines needs a shared token (CSD_WORKER_TOKEN)",
                self.addr
            ))),
        }
    }
}

/// The devices a worker serves: image file name (as the array's manifest names it) and
/// its opened client.
pub type Served = Vec<(String, Client)>;

/// Reads each device's catalog and wraps the clients for scanning.
pub fn devices(
    served: Served,
    config: &DeviceConfig,
    threads: usize,
    name: &str,
) -> Result<WorkerDevices, DistError> {
    let slots = ScanSlots::new(threads.max(1));
    let mut devices = Vec::with_capacity(served.len());
    for (file, mut client) in served {
        let catalog = Catalog::read(&mut client)
            .map_err(|e| DistError::Device(format!("{file}: reading its catalog: {e}")))?;
        let dev = Arc::new(Device::with_slots(client, config.clone(), slots.clone()));
        devices.push(ServedDevice::new(file, dev, catalog.tables));
    }
    Ok(WorkerDevices {
        name: name.to_string(),
        devices,
    })
}

/// Serves `devices` on `opts.addr` until `shutdown` completes: see the [module
/// docs](self). `on_ready` is called with the bound address once it listens. With
/// `open` (how to open a device's image, by file name, read-write or not), loads
/// through this worker are served too ([`crate::load`]).
pub async fn serve(
    devices: WorkerDevices,
    open: Option<Opener>,
    opts: WorkerOptions,
    shutdown: impl std::future::Future<Output = ()> + Send,
    on_ready: impl FnOnce(SocketAddr),
) -> Result<(), DistError> {
    opts.check()?;
    let listener = tokio::net::TcpListener::bind(opts.addr)
        .await
        .map_err(|e| DistError::Io(format!("listening on {}: {e}", opts.addr)))?;
    let local = listener
        .local_addr()
        .map_err(|e| DistError::Io(e.to_string()))?;
    // Messages name the worker by the address it listens on (port 0 chose one).
    let mut devices = devices;
    devices.name = format!("http://{local}");
    let devices = Arc::new(devices);
    let loads = open.map(|o| LoadService::new(devices.clone(), o).into_server());
    let token = opts.token.clone();
    let forward = token.clone();
    let worker = Worker::from_session_builder(move |ctx: WorkerQueryContext| {
        let devices = devices.clone();
        let forward = forward.clone();
        async move {
            let mut b = ctx.builder;
            let cfg = b.config().get_or_insert_default();
            cfg.set_extension(devices);
            b.set_distributed_user_codec(MemberCodec);
            if let Some(t) = forward
                && let Ok(v) = http::HeaderValue::from_str(&t)
            {
                let mut h = http::HeaderMap::new();
                h.insert(TOKEN_HEADER, v);
                b.set_distributed_passthrough_headers(h)?;
            }
            Ok(b.build())
        }
    })
    .with_version(WIRE_VERSION);
    on_ready(local);
    let auth = move |req: tonic::Request<()>| -> Result<tonic::Request<()>, tonic::Status> {
        let Some(expected) = &token else {
            return Ok(req);
        };
        let given = req
            .metadata()
            .get(TOKEN_HEADER)
            .and_then(|v| v.to_str().ok());
        if given.is_some_and(|g| constant_time_eq(g.as_bytes(), expected.as_bytes())) {
            return Ok(req);
        }
        let peer = req
            .remote_addr()
            .map_or_else(|| "an unknown peer".to_string(), |a| a.to_string());
        let why = if given.is_some() {
            "a wrong token"
        } else {
            "no token"
        };
        tracing::warn!("refused a request from {peer}: {why}");
        eprintln!("csd worker: refused a request from {peer}: {why}");
        Err(tonic::Status::unauthenticated(format!(
            "csd worker: {why} (set CSD_WORKER_TOKEN to the worker's token)"
        )))
    };
    let incoming = tokio_stream_of(listener);
    Server::builder()
        .layer(InterceptorLayer::new(auth))
        .add_service(worker.into_worker_server())
        .add_optional_service(loads)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
        .map_err(|e| DistError::Io(format!("serving on {local}: {e}")))
}

/// The accepted connections of `listener`, as tonic takes them.
fn tokio_stream_of(
    listener: tokio::net::TcpListener,
) -> impl futures::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures::stream::unfold(listener, |l| async move {
        let r = l.accept().await.map(|(s, _)| s);
        if let Ok(s) = &r {
            let _ = s.set_nodelay(true);
        }
        Some((r, l))
    })
}

/// Compares two byte strings in time independent of where they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// [`serve`] on a runtime of `threads` threads until SIGINT or SIGTERM.
pub fn run(
    devices: WorkerDevices,
    open: Option<Opener>,
    opts: WorkerOptions,
    threads: usize,
    on_ready: impl FnOnce(SocketAddr),
) -> Result<(), DistError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(2))
        .enable_all()
        .build()
        .map_err(|e| DistError::Io(format!("starting the runtime: {e}")))?;
    runtime.block_on(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| DistError::Io(format!("SIGTERM handler: {e}")))?;
        let shutdown = async move {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        };
        serve(devices, open, opts, shutdown, on_ready).await
    })
}
