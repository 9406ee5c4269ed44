//! Serve an image file over a Unix socket for a fixed time: the `csd serve` path
//! (virtual clock) without the CLI, for profiling the server with `perf` and driving it
//! with fio's nbd engine from another shell. Builds without the query engine's heavy
//! dependencies of the `csd` binary.
//!
//! ```sh
//! cargo run --release -p csd-nbd --example serve_image -- IMG SOCKET SECS [write-back|write-through]
//! fio --name=x --ioengine=nbd --uri='nbd+unix:///?socket=SOCKET' --rw=randwrite --bs=4k \
//!     --iodepth=32 --size=2g --runtime=3 --time_based
//! ```
//! The image is created from the default preset (nvme-tlc) when it does not exist.

use csd_device::NvmeDevice;
use csd_device::stack::{self, OpenOptions};
use csd_ftl::{FtlConfig, WriteCache};
use csd_nbd::{Listener, Server, ServerConfig};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [image, socket, secs, rest @ ..] = args.as_slice() else {
        return Err("usage: serve_image IMAGE SOCKET SECS [write-back|write-through]".into());
    };
    let secs: f64 = secs.parse()?;
    let write_cache = match rest.first().map(String::as_str) {
        None | Some("write-back") => WriteCache::WriteBack,
        Some("write-through") => WriteCache::WriteThrough,
        Some(other) => return Err(format!("unknown write cache {other:?}").into()),
    };
    let opts = OpenOptions {
        ftl: FtlConfig {
            write_cache,
            ..FtlConfig::default()
        },
        create: Some(csd_sim::DeviceConfig::preset("nvme-tlc")?),
        ..OpenOptions::read_write()
    };
    let (dev, _) = stack::open_image(&PathBuf::from(image), &opts)?;
    let server = Server::new(NvmeDevice::from_block(dev), ServerConfig::default())?;
    let listener = Listener::unix(&PathBuf::from(socket))?;
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs_f64(secs));
        s.store(true, Ordering::Relaxed);
    });
    eprintln!("serving {image} at {}", listener.uri(""));
    server.serve(&listener, &stop)?;
    let st = server.stats();
    eprintln!(
        "reads {} writes {} flushes {}",
        st.reads.count, st.writes.count, st.flushes.count
    );
    let mut dev = server
        .into_device()
        .map_err(|_| "the server is still shared")?;
    stack::close(dev.block_mut())?;
    Ok(())
}
