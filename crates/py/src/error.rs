//! Errors: csd's typed errors become Python exceptions that carry csd's own messages.
//!
//! One base class, `csd.CsdError`, with a subclass per family so that a script can
//! catch what it expects: `ConfigError` (a bad preset name or field), `ImageError` (an
//! image that cannot be opened: missing, locked, damaged, never formatted), `SqlError`
//! (a query DataFusion or the device refused: syntax, an unknown table, a value that
//! does not fit), `KvError` (the key-value store), `DeviceError` (a workload, a load, a
//! closed device). Ctrl-C during a long call is Python's own `KeyboardInterrupt`.

use pyo3::PyErr;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};

create_exception!(
    csd,
    CsdError,
    PyException,
    "Base class of every error csd raises."
);
create_exception!(csd, ConfigError, CsdError, "A device config csd refused.");
create_exception!(
    csd,
    ImageError,
    CsdError,
    "An image that could not be opened or closed."
);
create_exception!(
    csd,
    SqlError,
    CsdError,
    "A SQL statement csd or DataFusion refused."
);
create_exception!(csd, KvError, CsdError, "An error of the key-value store.");
create_exception!(
    csd,
    DeviceError,
    CsdError,
    "A device operation that failed."
);

/// What a call into csd can fail with; `Send`, so a call running on a worker thread
/// can hand it back. Each variant keeps csd's message.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A device config was refused.
    #[error(transparent)]
    Config(#[from] csd_sim::ConfigError),
    /// An image could not be opened or closed.
    #[error(transparent)]
    Open(#[from] csd_device::stack::OpenError),
    /// SQL failed.
    #[error(transparent)]
    Sql(#[from] csd_sql::SqlError),
    /// A file or table could not be converted into device rows.
    #[error(transparent)]
    Import(#[from] csd_sql::import::ImportError),
    /// The host side (catalog, tables) failed.
    #[error(transparent)]
    Host(#[from] csd_host::HostError),
    /// The device failed a workload.
    #[error(transparent)]
    Device(#[from] csd_device::DeviceError),
    /// An array's manifest could not be read or written.
    #[error(transparent)]
    Array(#[from] csd_sql::array::ArrayError),
    /// A reproduction failed (or its options were refused).
    #[error(transparent)]
    Repro(#[from] csd_repro::ReproError),
    /// The flash media (raw mode) failed.
    #[error(transparent)]
    Nand(#[from] csd_nand::NandError),
    /// The key-value store failed.
    #[error(transparent)]
    Kv(#[from] csd_kv::KvError),
    /// Arrow data could not cross the C data interface.
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    /// A plot could not be written.
    #[error(transparent)]
    Plot(#[from] csd_plot::PlotError),
    /// An argument csd does not accept (named in the message).
    #[error("{0}")]
    Invalid(String),
    /// The device was closed.
    #[error("the device is closed")]
    Closed,
    /// A call panicked inside csd (a bug); the device cannot be used any more.
    #[error(
        "csd stopped with an internal error (a bug), and the device cannot be used any more: {0}"
    )]
    Panicked(String),
}

impl From<Error> for PyErr {
    fn from(e: Error) -> PyErr {
        let msg = e.to_string();
        match e {
            Error::Config(_) => ConfigError::new_err(msg),
            Error::Open(_) | Error::Array(_) => ImageError::new_err(msg),
            Error::Sql(_) | Error::Import(_) => SqlError::new_err(msg),
            Error::Host(_) => SqlError::new_err(msg),
            Error::Kv(_) => KvError::new_err(msg),
            Error::Invalid(_) => PyValueError::new_err(msg),
            Error::Device(_)
            | Error::Nand(_)
            | Error::Repro(_)
            | Error::Arrow(_)
            | Error::Plot(_)
            | Error::Closed
            | Error::Panicked(_) => DeviceError::new_err(msg),
        }
    }
}

/// The result of a call into csd.
pub type Result<T> = std::result::Result<T, Error>;
