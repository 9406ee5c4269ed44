//! `csd worker`: serve the scans of this machine's devices of an array to a distributed
//! coordinator (`csd query --array DIR` on a manifest that lists workers). The images
//! are opened read-only, as `csd query` opens them; the engine is datafusion-distributed
//! (see `csd_dist`). Loopback by default; another address needs `--allow-remote` and a
//! shared token in `CSD_WORKER_TOKEN`, which every request must carry. Loads into the
//! array (`csd load ... --array DIR`) come through the worker too (`csd_dist::load`):
//! it reopens the image read-write for the load only.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use csd_device::NvmeDevice;
use csd_host::Client;
use csd_sql::Manifest;

use crate::error::CliError;
use crate::image;

/// Options of `csd worker`.
#[derive(Args)]
pub(crate) struct WorkerArgs {
    /// The array's directory (its manifest names the device images).
    #[arg(long)]
    array: PathBuf,
    /// The devices this worker serves, by image file name (comma separated); default:
    /// every device the manifest places on this worker's address, or all of them.
    #[arg(long, value_delimiter = ',')]
    devices: Vec<String>,
    /// Address to listen on (port 0: any free port, printed when ready).
    #[arg(long, default_value = "127.0.0.1:50051")]
    listen: SocketAddr,
    /// Serve a non-loopback address (needs a token of 16+ characters in
    /// CSD_WORKER_TOKEN).
    #[arg(long)]
    allow_remote: bool,
    /// Device scans at once (default: the cores).
    #[arg(long)]
    threads: Option<usize>,
}

/// Runs `csd worker` until SIGINT or SIGTERM.
pub(crate) fn worker_cmd(a: &WorkerArgs) -> Result<(), CliError> {
    let manifest = Manifest::read(&a.array).map_err(|e| CliError::Usage(e.to_string()))?;
    let token = std::env::var(csd_dist::TOKEN_ENV)
        .ok()
        .filter(|t| !t.is_empty());
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let opts = csd_dist::WorkerOptions {
        addr: a.listen,
        token,
        allow_remote: a.allow_remote,
        threads,
    };
    opts.check().map_err(dist_error)?;
    let names = served_names(a, &manifest)?;
    let mut served = Vec::with_capacity(names.len());
    let mut cfg = None;
    for name in &names {
        let path = a.array.join(name);
        // A worker serves query after query: the pages its scans read stay mapped for the
        // next one, as in `csd sql`'s shell (see `ImageSession::open_for`).
        let dev = image::open_ro_serving(&path, true)?;
        cfg.get_or_insert_with(|| dev.ftl().nand().config().clone());
        served.push((name.clone(), Client::new(NvmeDevice::from_block(dev))?));
    }
    let cfg = cfg.ok_or_else(|| CliError::Usage("the worker serves no device".into()))?;
    let devices = csd_dist::worker::devices(served, &cfg, threads, &format!("http://{}", a.listen))
        .map_err(dist_error)?;
    // Loads through this worker reopen an image read-write for their duration.
    let dir = a.array.clone();
    let open: csd_dist::load::Opener = std::sync::Arc::new(move |file: &str, write: bool| {
        let path = dir.join(file);
        let dev = if write {
            image::open_rw(
                &path,
                &crate::ConfigSource::default(),
                &image::FtlArgs::default(),
                false,
                true,
            )
        } else {
            image::open_ro(&path, true)
        };
        dev.map_err(|e| e.to_string())
    });
    csd_dist::worker::run(devices, Some(open), opts, threads, |addr| {
        // The line scripts and tests wait for.
        println!(
            "csd worker listening on http://{addr}, devices {}",
            names.join(", ")
        );
    })
    .map_err(dist_error)
}

/// The image names to serve: `--devices`, else the manifest's devices placed on this
/// worker's address, else all of them; each must be a device of the array.
fn served_names(a: &WorkerArgs, m: &Manifest) -> Result<Vec<String>, CliError> {
    if !a.devices.is_empty() {
        for d in &a.devices {
            if !m.devices.contains(d) {
                return Err(CliError::Usage(format!(
                    "--devices: {d} is not a device of the array (it has {})",
                    m.devices.join(", ")
                )));
            }
        }
        return Ok(a.devices.clone());
    }
    let me = format!("http://{}", a.listen);
    let mine: Vec<String> = m
        .workers
        .iter()
        .zip(&m.devices)
        .filter(|(w, _)| w.trim_end_matches('/') == me)
        .map(|(_, d)| d.clone())
        .collect();
    Ok(if mine.is_empty() {
        m.devices.clone()
    } else {
        mine
    })
}

fn dist_error(e: csd_dist::DistError) -> CliError {
    CliError::Usage(e.to_string())
}
