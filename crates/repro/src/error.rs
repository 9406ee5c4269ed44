//! The one error type of the reproductions: every run returns `Result<_, ReproError>`.
//! Lower layers' typed errors convert with `?`; `Usage` carries an actionable message for
//! options that do not fit.

use std::path::PathBuf;
use thiserror::Error;

/// Errors of a reproduction.
#[derive(Debug, Error)]
pub enum ReproError {
    /// A device config that does not parse or validate.
    #[error(transparent)]
    Config(#[from] csd_sim::ConfigError),
    /// The host side (catalog, loads, scans) refused or failed.
    #[error(transparent)]
    Host(#[from] csd_host::HostError),
    /// Options that do not fit together, or input the reproduction cannot use.
    #[error("{0}")]
    Usage(String),
    /// The flash array.
    #[error(transparent)]
    Nand(#[from] csd_nand::NandError),
    /// The device layer.
    #[error(transparent)]
    Device(#[from] csd_device::DeviceError),
    /// The FTL.
    #[error(transparent)]
    Ftl(#[from] csd_ftl::FtlError),
    /// The key-value store ran out of room (its host log or the device) during a run.
    #[error("key-value store: {0}")]
    OutOfSpace(String),
    /// The command interface answered with an error status or not at all.
    #[error("command interface: {0}")]
    Nvme(String),
    /// The analytic models refused their parameters.
    #[error(transparent)]
    Model(#[from] csd_model::ModelError),
    /// A file the reproduction reads or writes.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
}

/// A SQL layer error as a reproduction error (a query that does not plan is a usage
/// error; host failures stay typed; runtime failures are the command interface's).
pub fn sql_error(e: csd_sql::SqlError) -> ReproError {
    use csd_sql::SqlError;
    match e {
        SqlError::Query { .. } => ReproError::Usage(e.to_string()),
        SqlError::Host(h) => ReproError::Host(h),
        SqlError::Runtime(_) | SqlError::Disagree { .. } => ReproError::Nvme(e.to_string()),
    }
}
