//! Shared test helpers: a fresh in-memory device, restart after a power cut.
#![allow(dead_code)]

use csd_device::NvmeDevice;
use csd_ftl::{Ftl, FtlConfig};
use csd_host::SharedDevice;
use csd_nand::Nand;
use csd_sim::{ClockMode, DeviceConfig};

/// A fresh `tiny` device.
pub fn device() -> SharedDevice {
    let cfg = DeviceConfig::preset("tiny").expect("tiny preset");
    let nand = Nand::new_in_memory(cfg).expect("nand");
    let ftl = Ftl::format(nand, FtlConfig::default()).expect("format");
    SharedDevice::new(NvmeDevice::new(ftl), ClockMode::Virtual).expect("share")
}

/// A fresh `tiny` device in paced mode (`scale` wall seconds per modeled second).
pub fn paced_device(scale: f64) -> SharedDevice {
    let cfg = DeviceConfig::preset("tiny").expect("tiny preset");
    let nand = Nand::new_in_memory(cfg).expect("nand");
    let ftl = Ftl::format(nand, FtlConfig::default()).expect("format");
    SharedDevice::new(NvmeDevice::new(ftl), ClockMode::Paced { scale }).expect("share")
}

/// A fresh `tiny` device on the event core (`events`): virtual, or paced at `scale`.
pub fn device_on_the_event_core(paced: Option<f64>) -> SharedDevice {
    let cfg = DeviceConfig::preset("tiny").expect("tiny preset");
    let nand = Nand::new_in_memory(cfg).expect("nand");
    let ftl = Ftl::format(nand, FtlConfig::default()).expect("format");
    let mode = paced.map_or(ClockMode::Virtual, |scale| ClockMode::Paced { scale });
    SharedDevice::with_time_model(
        NvmeDevice::new(ftl),
        mode,
        csd_sim::events::TimeModel::Events,
    )
    .expect("share")
}

/// Cut power on `dev` (every handle and tree must have been dropped), recover the FTL
/// and share the device again.
pub fn crash_and_recover(dev: SharedDevice) -> SharedDevice {
    let dev = dev.into_device().ok().expect("all handles dropped");
    let nand = dev.into_block().into_ftl().crash();
    let ftl = Ftl::recover(nand, FtlConfig::default()).expect("recover");
    SharedDevice::new(NvmeDevice::new(ftl), ClockMode::Virtual).expect("share")
}
