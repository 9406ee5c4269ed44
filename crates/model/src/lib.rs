//! Analytic models of the papers behind csd.
//!
//! docs/architecture.md: "The analytic model of the scan paper is its own module and is *checked
//! against* the simulation, not used in its place." Nothing in the device or host layers
//! may call into this crate to compute a figure it reports; tests and the `csd model`
//! command use it to say what the paper's equations predict for a device config.
//!
//! * [`scan`]: the in-storage-scan paper's performance model of a table scan (§4,
//!   equations 1–9) for in-host processing, embedded-CPU ISP and per-channel hardware ISP.

#![warn(missing_docs)]

pub mod scan;

pub use scan::{
    Bottleneck, Breakdown, Composition, ModelError, ScanModel, ScanParams, Strategy, StrategyResult,
};
