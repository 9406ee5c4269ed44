//! Test devices for the store: the `tiny` preset in memory, behind the command interface.
#![allow(dead_code)]

use csd_device::NvmeDevice;
use csd_ftl::{Ftl, FtlConfig};
use csd_host::Client;
use csd_kv::{BlockOptions, Interface, Store, StoreConfig};
use csd_nand::Nand;
use csd_sim::DeviceConfig;

/// A fresh tiny device with a client on it.
pub fn client(ftl: FtlConfig) -> Client {
    let cfg = DeviceConfig::preset("tiny").unwrap();
    let nand = Nand::new_in_memory(cfg).unwrap();
    Client::new(NvmeDevice::new(Ftl::format(nand, ftl).unwrap())).unwrap()
}

/// A store config that makes every mechanism run on a tiny device: a cache of a few
/// pages, a small write buffer, host GC and checkpoints often.
pub fn small(interface: Interface) -> StoreConfig {
    StoreConfig {
        interface,
        cache_pages: Some(8),
        write_buffer_bytes: 41 * 4096,
        queue_depth: 8,
        max_dirty_age_ns: 2_000_000,
        block: BlockOptions {
            gc: true,
            gc_start_used: 0.3,
            ..BlockOptions::default()
        },
        checkpoint_interval_ns: Some(20_000_000),
        ..StoreConfig::default()
    }
}

/// Open a store, panicking with the reason.
pub fn open(c: Client, cfg: StoreConfig) -> Store<Client> {
    match Store::open(c, cfg) {
        Ok(s) => s,
        Err(f) => panic!("open: {}", f.error),
    }
}

/// A deterministic value of `len` bytes for (key, version).
pub fn value(k: u64, version: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (k.wrapping_mul(31).wrapping_add(version * 7 + i as u64) % 251) as u8)
        .collect()
}

/// 8-byte big-endian key.
pub fn key(k: u64) -> Vec<u8> {
    k.to_be_bytes().to_vec()
}
