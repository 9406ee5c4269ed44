//! The one error type of the CLI: every command returns `Result<(), CliError>` and
//! `main` prints it as `error: ...` with a failing exit status. Lower layers' typed errors
//! convert with `?`; `Usage` carries an actionable message for options that do not fit.

use csd_device::DeviceError;
use csd_ftl::FtlError;
use csd_nand::NandError;
use csd_sim::ConfigError;
use std::path::PathBuf;
use thiserror::Error;

/// Errors the CLI reports to the user.
#[derive(Debug, Error)]
pub(crate) enum CliError {
    /// A device config that does not parse or validate.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The host side (catalog, loads, scans) refused or failed.
    #[error(transparent)]
    Host(#[from] csd_host::HostError),
    /// Options that do not fit together, or input the command cannot use.
    #[error("{0}")]
    Usage(String),
    /// The flash array (image file, geometry, power loss).
    #[error(transparent)]
    Nand(#[from] NandError),
    /// The device layer (block and raw interfaces, workloads).
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// Opening an image (lock, header, FTL recovery).
    #[error(transparent)]
    Open(#[from] csd_device::stack::OpenError),
    /// The FTL.
    #[error(transparent)]
    Ftl(#[from] FtlError),
    /// A crash-torture check that failed (lost or torn writes).
    #[error("torture: {0}")]
    Torture(String),
    /// The command interface answered with an error status or not at all.
    #[error("command interface: {0}")]
    Nvme(String),
    /// A query failed while it ran (a device scan failed, or strategies returned
    /// different rows); bad SQL is [`CliError::Usage`]. The message keeps the prefix
    /// these errors always had.
    #[error("command interface: {0}")]
    Sql(csd_sql::SqlError),
    /// The analytic models refused their parameters.
    #[error(transparent)]
    Model(#[from] csd_model::ModelError),
    /// The NBD server.
    #[error("serve: {0}")]
    Serve(#[from] csd_nbd::NbdError),
    /// A paper reproduction (or the benchmark runs it shares with the CLI).
    #[error(transparent)]
    Repro(#[from] csd_repro::ReproError),
    /// A file the command reads or writes.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
}
