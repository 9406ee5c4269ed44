//! Shared vocabulary of every csd layer: simulated time, busy resources, the clock
//! (virtual or paced), energy accounting, and the device configuration with its presets.
//!
//! This crate realizes the "Time" section of `docs/architecture.md` and the resource-reservation
//! reading of the in-storage-scan paper's equations 1–4: every resource (die, channel
//! bus, controller DRAM bus, host link, embedded core, host CPU) keeps the simulated
//! instant at which it becomes free, an operation reserves the resources on its path in
//! order, and it completes when its last reservation ends. Reservations are O(1) and
//! deterministic; nothing here reads the wall clock except [`clock::Pacer`].

pub mod clock;
pub mod config;
pub mod dist;
pub mod energy;
pub mod events;
pub mod net;
pub mod prefetch;
pub mod resource;
pub mod time;
pub mod units;
pub mod wire;

pub use clock::{ClockMode, Pacer};
pub use config::{ConfigError, DeviceConfig, FtlPolicy, Geometry, IspConfig};
pub use energy::{EnergyCounters, EnergyReport};
pub use resource::{Resource, ResourceClass, Utilization};
pub use time::{Rate, SimTime};
