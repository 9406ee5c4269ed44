//! The csd controller layer (DESIGN.md "device"): the controller's own resources (DRAM
//! bus, host link, embedded cores, and the host CPU that drives them), the raw
//! open-channel device that exposes the flash array page by page, and the fio-style
//! workload engine that drives any [`workload::IoTarget`] and reports modeled figures
//! next to the emulator's wall-clock speed.
//!
//! The FTL's block and batch front ends sit behind the controller in [`block`], which
//! models each command's path once; [`nvme`] puts the typed command interface (queue
//! pairs, commands, completions with status, payload and accounting) in front of it. Host
//! code talks to a device only through [`nvme`].

mod ahead;
pub mod block;
pub mod btree;
pub mod controller;
pub mod flixr;
pub mod isp;
pub mod nvme;
pub mod raw;
pub mod ssd_btree;
pub mod stack;
pub mod workload;

pub use block::{BlockDevice, CommandError};
pub use controller::Controller;
pub use csd_query::{scan_threads, set_scan_threads};
pub use flixr::{
    Flixr, FlixrError, FlixrStats, HostIndexValue, IndexEncoding, IndexRead, IndexRule, IndexSpec,
    JoinIndexSpec, KeyEntry, KeyLayout, RuleTerm, TableFormat,
};
pub use isp::{HW_AGG_REGISTER_GROUPS, IspMode, IspOpen, IspReply, SessionState, TableExtent};
pub use nvme::{
    Accounting, Cid, Command, Completion, FlashSplit, IdentifyInfo, LogPage, NvmeDevice, Payload,
    QueueId, SmartLog, Status, Telemetry,
};
pub use raw::RawDevice;
pub use ssd_btree::{SsdBtree, SsdBtreeStats};
pub use workload::{IoReport, IoTarget, NoHints, PrefetchStage, Rw, WorkloadSpec};

use thiserror::Error;

/// Errors of the device layer.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum DeviceError {
    /// The flash media refused or failed an operation.
    #[error(transparent)]
    Nand(#[from] csd_nand::NandError),
    /// An I/O request does not fit the device.
    #[error("{0}")]
    BadRequest(String),
}
