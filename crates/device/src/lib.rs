//! The csd controller layer (docs/architecture.md "device"): the controller's own resources (DRAM
//! bus, host link, embedded cores, and the host CPU that drives them), the raw
//! open-channel device that exposes the flash array page by page, and the fio-style
//! workload engine that drives any [`workload::IoTarget`] and reports modeled figures
//! next to the emulator's wall-clock speed.
//!
//! The FTL's block and batch front ends sit behind the controller in [`block`], which
//! models each command's path once; [`command`] is the typed vocabulary of the command
//! interface (commands, completions with status, payload and accounting) and [`nvme`]
//! the queue pairs and the executor in front of the block device. Host code talks to a
//! device only through [`nvme`].
//!
//! Where things are:
//! * [`controller`]: DRAM bus, host link, embedded cores, host CPU;
//! * [`raw`]: the open-channel device; [`workload`]: the fio-style engine and
//!   [`IoTarget`]; [`stack`]: create / open / recover / close a device for every tool;
//! * [`block`]: the FTL block device, each command's controller path;
//! * [`isp`] (with the private `ahead`, its read-ahead): in-storage scan sessions;
//! * [`flixr`]: per-page indexes in the FTL's mapping entries (one module per concern
//!   under `flixr/`); [`btree`] and [`ssd_btree`]: the paged B+tree and the firmware's
//!   in-SSD B+tree;
//! * [`command`]: the command vocabulary; [`nvme`]: queues and the executor
//!   (`nvme/run.rs` dispatches, `io.rs` block I/O and batches, `index.rs` FLIXR and the
//!   in-SSD B+tree).
//!
//! Module dependency order, in layers: a module uses only modules of lower layers (and
//! the crate root's [`DeviceError`]); no import runs back up.
//!
//! ```text
//! 0  controller   workload   btree   ahead
//! 1  raw          block                          (controller, workload)
//! 2  isp          flixr      stack               (block; isp also ahead)
//! 3  ssd_btree                                   (block, btree, flixr)
//! 4  command                                     (flixr, isp: argument types only)
//! 5  nvme                                        (everything above)
//! ```
//!
//! `command` names the argument and reply types of the FLIXR, B+tree and ISP commands,
//! which live beside the firmware that interprets them; none of those modules, nor
//! `block`, uses `command` or `nvme`.

mod ahead;
pub mod block;
pub mod btree;
pub mod command;
pub mod controller;
pub mod flixr;
pub mod isp;
pub mod nvme;
pub mod raw;
pub mod ssd_btree;
pub mod stack;
pub mod workload;

pub use block::{BlockDevice, CommandError};
pub use command::{
    Accounting, Cid, Command, Completion, FlashSplit, IdentifyInfo, LogPage, Payload, PinnedRead,
    QueueId, SmartLog, Status, Telemetry,
};
pub use controller::Controller;
pub use csd_query::{scan_threads, set_scan_threads, size_scan_pool};
pub use flixr::{
    Flixr, FlixrError, FlixrStats, HostIndexValue, IndexEncoding, IndexRead, IndexRule, IndexSpec,
    JoinIndexSpec, KeyEntry, KeyLayout, RuleTerm, TableFormat,
};
pub use isp::{HW_AGG_REGISTER_GROUPS, IspMode, IspOpen, IspReply, SessionState, TableExtent};
pub use nvme::{Arbitration, NvmeDevice, QueuePriority};
pub use raw::RawDevice;
pub use ssd_btree::{NodeCache, SsdBtree, SsdBtreeStats};
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
