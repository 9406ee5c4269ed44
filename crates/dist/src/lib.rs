//! csd on many machines: a device array whose devices are served by `csd worker`
//! processes and queried through datafusion-distributed (Arrow Flight over gRPC).
//!
//! * [`worker`]: a worker opens the device images of its machine read-only and serves
//!   their scans as a datafusion-distributed worker.
//! * [`coordinator`]: `csd query --array DIR` / `csd sql --array DIR` plan as for a
//!   local array; [`coordinator::distribute`] hands the session's queries to the
//!   engine, which routes each device's scan to the worker the manifest names and
//!   places the operators above (joins, final aggregates) itself.
//! * [`load`]: `csd load ... --array DIR` through the workers: an Arrow Flight `DoPut`
//!   per device (staging table, then a commit once every device holds its stripe).
//! * [`member`]: the leaf a task runs ([`member::MemberScanExec`]) and its
//!   `PhysicalExtensionCodec`; [`wire`]: what it carries as plain data.
//!
//! Choices, and why:
//! * **Engine**: datafusion-distributed 4 (DataFusion 55, as csd), not Ballista 55.
//!   Its workers are a library (a tonic service we mount in `csd worker` next to our
//!   devices) rather than an executor process with its own scheduler; its planner
//!   takes a DataFusion plan made by our own `SessionContext` (our table providers and
//!   physical rules run unchanged); and it has the two hooks an array needs: per-task
//!   leaf variants (`DistributedLeafExec`) and task routing to chosen workers.
//! * **One task per device**, routed to the device's worker: the unit of work of a
//!   local array (one partition per device) stays the unit of placement.
//! * **The plan carries the request, not the device program**: the worker builds the
//!   device scan again from the table request (DataFusion's protobuf expressions) with
//!   the same code the coordinator used, so there is one translation to the device
//!   program, and the catalog entry is the device's own, checked against the manifest.
//! * **Scan records ride the engine's metrics** (a labelled counter per member scan),
//!   so no RPC of our own: the engine and its Flight transport carry everything.
//! * The coordinator reads each member's catalog from the image to plan (the array
//!   directory is shared, or a copy of it is on the coordinator); the scans themselves
//!   run on the workers, and a plan that would run them in the coordinator is refused.
//! * Dynamic (runtime) filters of joins and FLIXR join reads stay within one process:
//!   a member scan runs without them on its worker (results are the same; a join
//!   query's device figures may then differ from the local array's).
#![warn(missing_docs)]

pub mod coordinator;
pub mod load;
pub mod member;
pub mod wire;
pub mod worker;

pub use coordinator::distribute;
pub use load::load_through_workers;
pub use worker::{WorkerOptions, serve};

/// The request header carrying the shared token.
pub const TOKEN_HEADER: &str = "x-csd-token";

/// The environment variable both coordinator and worker read the token from.
pub const TOKEN_ENV: &str = "CSD_WORKER_TOKEN";

/// What went wrong setting up a distributed array or a worker.
#[derive(Debug, thiserror::Error)]
pub enum DistError {
    /// The manifest's worker placement cannot be used (the field is named).
    #[error("array manifest: {0}")]
    Manifest(String),
    /// The token cannot be used.
    #[error("token: {0}")]
    Token(String),
    /// The worker's address or token rules refuse to serve.
    #[error("refused: {0}")]
    Access(String),
    /// A device of the worker cannot be served.
    #[error("device {0}")]
    Device(String),
    /// Listening or serving failed.
    #[error("network: {0}")]
    Io(String),
    /// Plain data that does not decode.
    #[error("wire: {0}")]
    Wire(String),
    /// The SQL session.
    #[error(transparent)]
    Sql(#[from] csd_sql::SqlError),
}
