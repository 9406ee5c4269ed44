//! The host side of csd (docs/architecture.md "host side"): code that uses the emulated SSD only
//! through its command interface.
//!
//! * [`client::Client`]: a synchronous host client over one queue pair of an
//!   [`csd_device::NvmeDevice`], keeping the host's view of time and the accounting of
//!   every command it issued.
//! * [`shared::SharedDevice`]: one device used by many host threads, each through its
//!   own [`shared::DeviceHandle`] (queue pair + clock), with paced waits outside the lock.
//! * [`scan`]: a device program over a stored table three ways — in-host processing,
//!   embedded-CPU ISP and hardware ISP through device sessions (OPEN/GET/CLOSE) — with the
//!   report of where the modeled time, bytes and energy went. SQL is `csd-sql`'s
//!   (DataFusion), which plans queries and runs their scans through [`scan::run_scan`].
//! * [`rowstore`]: a small row store of NSM pages on the device with INSERT, DELETE,
//!   UPDATE, scans and joins through FLIXR's access paths and its baselines (flixr §4–§6);
//!   one module per concern under `rowstore/` (`load`, `index`, `pages`, `scan`, `dml`,
//!   `join`; the public types in `mod.rs`).
//! * [`index`]: CREATE / DROP INDEX on catalog tables (FLIXR registration, pages
//!   rewritten through WRITE_IDX) and [`index::rule_for`], the FLIXR rule a filter
//!   implies on a column.
//! * [`dml`]: INSERT, UPDATE and DELETE on catalog tables (pages rewritten in place
//!   through WRITE_IDX, a redo record in the catalog for statement atomicity), on the
//!   page logic of [`slotted`] that the row store shares.
//! * [`catalog`]: tables stored on the device (smart-ssd paper §3–§4.1): a catalog of
//!   tables kept in a reserved LBA region and rewritten with one atomic batch (batch-io
//!   §3), so that a power cut during a load leaves the old catalog or the new one; and
//!   a bulk loader that packs rows into NSM or PAX pages of the device's flash-page size
//!   and writes them with MDTS-sized commands.

pub mod actors;
pub mod catalog;
pub mod client;
pub mod dml;
pub mod index;
pub mod rowstore;
pub mod scan;
pub mod shared;
pub mod slotted;
mod stats;

pub use catalog::{Catalog, LoadReport, TableIndex, TableInfo, check_table_name, same_name};
pub use client::{Client, CommandIssuer, HostError};
pub use rowstore::{IndexKind, KeyEncoding, RowStore, StoreError, StoreOptions, TableDef, TableId};
pub use scan::{JoinRead, QueryReport, ScanOptions, StageName, Strategy, run_scan};
pub use shared::{DeviceHandle, SharedDevice};
