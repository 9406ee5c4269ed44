//! Test fixtures shared by the server's test modules: a store on a tiny in-memory device
//! behind a server, and helpers to run a command and check a reply.

use super::{Server, ServerConfig, Session};
use crate::resp::Reply;
use crate::{Interface, Store, StoreConfig};
use csd_device::NvmeDevice;
use csd_ftl::{Ftl, FtlConfig};
use csd_host::Client;
use csd_nand::Nand;
use csd_sim::DeviceConfig;

pub(super) fn client() -> Client {
    let cfg = DeviceConfig::preset("tiny").unwrap();
    let nand = Nand::new_in_memory(cfg).unwrap();
    Client::new(NvmeDevice::new(
        Ftl::format(nand, FtlConfig::default()).unwrap(),
    ))
    .unwrap()
}

pub(super) fn cfg(interface: Interface) -> StoreConfig {
    StoreConfig {
        interface,
        cache_pages: Some(16),
        write_buffer_bytes: 41 * 4096,
        queue_depth: 8,
        ..StoreConfig::default()
    }
}

pub(super) fn server(interface: Interface) -> Server<Client> {
    let s = Store::open(client(), cfg(interface)).unwrap();
    Server::new(s, ServerConfig::default())
}

pub(super) fn run(srv: &Server<Client>, s: &mut Session, args: &[&str]) -> Reply {
    let a: Vec<Vec<u8>> = args.iter().map(|x| x.as_bytes().to_vec()).collect();
    srv.execute(&a, s)
}

pub(super) fn b(s: &str) -> Reply {
    Reply::bulk(s)
}

pub(super) fn err_has(r: &Reply, what: &str) {
    match r {
        Reply::Error(m) => assert!(m.contains(what), "`{m}` lacks `{what}`"),
        o => panic!("{o:?} is not an error with `{what}`"),
    }
}
