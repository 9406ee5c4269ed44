//! Loads through the workers: `csd load ... --array DIR` on a manifest that lists workers
//! writes each device's stripe through the worker that serves it.
//!
//! Transport: an Arrow Flight `DoPut` per device, served by [`LoadService`] on the
//! worker's own gRPC server next to the engine's worker service (gRPC multiplexes
//! services on one port; the same token check guards both). Flight carries the framing:
//! the descriptor's command is the load ([`WireLoad`]: device, table, layout, schema),
//! the rows follow as Arrow batches of one binary column (each value a row image), and
//! the two sides' words ride Flight's `app_metadata` ([`LoadControl`] from the
//! coordinator, [`LoadReply`] from the worker). Why not the engine: datafusion-distributed
//! moves data from workers to the coordinator (stages read stages); a load moves rows the
//! other way, from a source the coordinator reads, which is what `DoPut` is for.
//!
//! Protocol, per device, in one stream (two phases, so that no device publishes before
//! every device holds its stripe):
//! 1. The worker checks the load (version, device, table name, schema), reopens the
//!    device's image read-write (closing its read-only handle: the image lock is
//!    exclusive for writing; another process holding the image makes the load fail with
//!    the device named and changes nothing), and replies `ready` with its page size (the
//!    coordinator deals rows in whole pages, as a local array load does).
//! 2. The rows arrive and are written as a **staging table** (`<table>__load`) with the
//!    device's ordinary loader; the old table is untouched. After `end`, the worker
//!    replies `prepared`.
//! 3. When every device prepared, the coordinator sends `commit`: the worker renames the
//!    staging table over the table in one catalog write (the replaced extent is freed),
//!    records the new entry for the scans it serves, reopens the image read-only and
//!    replies `committed`. The coordinator then replaces the manifest (atomically).
//!
//! Any other end (a worker or the coordinator killed, a stream broken, `abort`) drops
//! the staging table and reopens the image read-only: the old manifest and the old
//! tables stay as they were. A failure between the commits of two devices (the short
//! second phase) leaves the devices out of step with the manifest, which queries detect
//! and name (load the table again).
//!
//! Queries during a load: the device stays served; scans and the load's commands take
//! the device in turn (a scan holds it for its whole run, the load per command), and a
//! scan sees the catalog entry it was planned with: the old table until the commit, the
//! new one after it (a plan made against the old manifest after the commit is refused as
//! a manifest mismatch; run it again). Never a half-loaded table.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightClient, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use csd_device::{BlockDevice, Command, Completion, IdentifyInfo, NvmeDevice};
use csd_host::{Catalog, Client, CommandIssuer, HostError};
use csd_sim::SimTime;
use csd_sql::Device;
use csd_sql::array::{Manifest, Placement};
use csd_sql::datafusion::arrow::array::{Array, BinaryArray, RecordBatch};
use csd_sql::datafusion::arrow::buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use csd_sql::datafusion::arrow::datatypes::{DataType, Field, Schema as ArrowSchema};
use csd_table::datagen::RowSource;
use csd_table::page::{Layout, rows_per_page};
use csd_table::schema::Schema;
use futures::StreamExt;
use futures::stream::BoxStream;
use tonic::{Request, Response, Status, Streaming};

use crate::member::{ServedDevice, WorkerDevices};
use crate::wire::{LoadControl, LoadReply, WIRE_VERSION, WireLoad};
use crate::{DistError, TOKEN_HEADER};

/// How a worker opens one of its images again: by file name, read-write (`true`, for a
/// load) or read-only.
pub type Opener = Arc<dyn Fn(&str, bool) -> Result<BlockDevice, String> + Send + Sync>;

/// The name a stripe is written under until the load commits.
pub fn staging_name(table: &str) -> String {
    let keep = table.len().min(64 - "__load".len());
    format!("{}__load", &table[..keep])
}

/// Rows of a batch column sent per Flight message: about 1 MiB of row images.
const CHUNK_BYTES: usize = 1 << 20;

/// The Arrow schema of the batches a load sends: one binary column of row images.
fn rows_schema() -> Arc<ArrowSchema> {
    Arc::new(ArrowSchema::new(vec![Field::new(
        "row",
        DataType::Binary,
        false,
    )]))
}

fn json_bytes<T: serde::Serialize>(v: &T) -> Vec<u8> {
    // The wire types are plain structs of strings and numbers: serializing cannot fail.
    serde_json::to_vec(v).unwrap_or_default()
}

// ---------------------------------------------------------------------------------------
// Worker side

/// A device issued commands by a load while its scans go on: the device is taken for
/// each command, not for the whole load.
struct Shared<'a> {
    device: &'a Device,
    identify: IdentifyInfo,
}

impl<'a> Shared<'a> {
    fn new(device: &'a Device) -> Shared<'a> {
        let identify = device.lock().identify().clone();
        Shared { device, identify }
    }
}

impl CommandIssuer for Shared<'_> {
    fn exec_at(&mut self, cmd: Command, at: SimTime) -> Result<Completion, HostError> {
        self.device.lock().exec_at(cmd, at)
    }

    fn wait_until(&mut self, t: SimTime) {
        self.device.lock().wait_until(t)
    }

    fn identify(&self) -> &IdentifyInfo {
        &self.identify
    }

    fn now(&self) -> SimTime {
        self.device.lock().now()
    }
}

/// The rows of a stripe as they arrive (binary arrays of row images).
struct Arriving {
    schema: Schema,
    rx: tokio::sync::mpsc::Receiver<BinaryArray>,
    chunk: Option<BinaryArray>,
    pos: usize,
}

impl RowSource for Arriving {
    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn next_row(&mut self, row: &mut Vec<u8>) -> bool {
        loop {
            if let Some(c) = &self.chunk
                && self.pos < c.len()
            {
                row.clear();
                row.extend_from_slice(c.value(self.pos));
                self.pos += 1;
                return true;
            }
            match self.rx.blocking_recv() {
                Some(c) => {
                    self.chunk = Some(c);
                    self.pos = 0;
                }
                None => return false,
            }
        }
    }
}

/// The worker's state shared by its load streams.
struct LoadState {
    devices: Arc<WorkerDevices>,
    open: Opener,
    /// Devices with a load in progress (one at a time per device).
    busy: Mutex<HashSet<String>>,
    /// Spare clients (a tiny in-memory device) put in a device's place while its image
    /// is closed and opened again (under the device's lock: no scan ever sees it).
    spare: Mutex<Vec<Client>>,
}

/// The Flight service of a worker that takes loads: see the [module docs](self).
#[derive(Clone)]
pub struct LoadService {
    state: Arc<LoadState>,
}

impl LoadService {
    /// Loads into `devices`, reopening their images with `open`.
    pub fn new(devices: Arc<WorkerDevices>, open: Opener) -> LoadService {
        LoadService {
            state: Arc::new(LoadState {
                devices,
                open,
                busy: Mutex::new(HashSet::new()),
                spare: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The service as a tonic server (messages of any size).
    pub fn into_server(self) -> FlightServiceServer<LoadService> {
        FlightServiceServer::new(self)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX)
    }
}

impl LoadState {
    fn device(&self, i: usize) -> &ServedDevice {
        &self.devices.devices[i]
    }

    fn spare(&self) -> Result<Client, String> {
        if let Some(c) = self
            .spare
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
        {
            return Ok(c);
        }
        let cfg = csd_sim::DeviceConfig::preset("tiny").map_err(|e| e.to_string())?;
        let nand = csd_nand::Nand::new_in_memory(cfg).map_err(|e| e.to_string())?;
        let ftl =
            csd_ftl::Ftl::format(nand, csd_ftl::FtlConfig::default()).map_err(|e| e.to_string())?;
        Client::new(NvmeDevice::new(ftl)).map_err(|e| e.to_string())
    }

    /// Closes device `i`'s image and opens it again, read-write or read-only. When that
    /// fails, the image is opened the other way again; when that fails too, the device
    /// is marked broken (its scans are refused, naming why).
    fn reopen(&self, i: usize, write: bool) -> Result<(), String> {
        let d = self.device(i);
        let spare = self.spare()?;
        let mut guard = d.device.lock();
        let old = std::mem::replace(&mut *guard, spare);
        let mut block = old.into_device().into_block();
        let closed = csd_device::stack::close(&mut block).map_err(|e| e.to_string());
        drop(block);
        let open = |w: bool| -> Result<Client, String> {
            let b = (self.open)(&d.file, w)?;
            Client::new(NvmeDevice::from_block(b)).map_err(|e| e.to_string())
        };
        let (client, result) = match closed.and_then(|()| open(write)) {
            Ok(c) => (Some(c), Ok(())),
            Err(e) => {
                let e = format!(
                    "{}: cannot open it {}: {e}",
                    d.file,
                    if write { "read-write" } else { "read-only" }
                );
                match open(!write) {
                    Ok(c) => (Some(c), Err(e)),
                    Err(e2) => (None, Err(format!("{e}; nor the other way: {e2}"))),
                }
            }
        };
        match client {
            Some(c) => {
                let spare = std::mem::replace(&mut *guard, c);
                self.spare
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(spare);
            }
            None => {
                if let Err(e) = &result {
                    *d.broken.lock().unwrap_or_else(PoisonError::into_inner) = Some(e.clone());
                }
            }
        }
        result
    }
}

fn status_of(e: HostError) -> Status {
    Status::failed_precondition(e.to_string())
}

fn reply(r: &LoadReply) -> PutResult {
    PutResult {
        app_metadata: json_bytes(r).into(),
    }
}

fn control_of(d: &FlightData) -> Option<Result<LoadControl, Status>> {
    if !d.data_header.is_empty() || d.app_metadata.is_empty() {
        return None;
    }
    Some(
        serde_json::from_slice(&d.app_metadata)
            .map_err(|e| Status::invalid_argument(format!("not a load control message: {e}"))),
    )
}

/// The checked start of a load: the device's index, the load and its schema and layout.
type Start = (usize, WireLoad, Schema, Layout);

impl LoadState {
    fn check(&self, cmd: &[u8]) -> Result<Start, Status> {
        let w: WireLoad = serde_json::from_slice(cmd)
            .map_err(|e| Status::invalid_argument(format!("not a csd load: {e}")))?;
        if w.version != WIRE_VERSION {
            return Err(Status::failed_precondition(format!(
                "version mismatch: the coordinator is {}, this worker is {WIRE_VERSION}; run \
                 the same csd on both",
                w.version
            )));
        }
        csd_host::check_table_name(&w.table).map_err(status_of)?;
        let layout = match w.layout.as_str() {
            "nsm" => Layout::Nsm,
            "pax" => Layout::Pax,
            l => return Err(Status::invalid_argument(format!("unknown layout `{l}`"))),
        };
        let schema = w
            .schema()
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let i = self
            .devices
            .devices
            .iter()
            .position(|d| d.file == w.device)
            .ok_or_else(|| {
                let e = self
                    .devices
                    .find(&w.device, &w.array, w.index)
                    .err()
                    .unwrap_or_default();
                Status::not_found(e)
            })?;
        if !self
            .busy
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(w.device.clone())
        {
            return Err(Status::already_exists(format!(
                "a load into {} is already in progress on worker {}",
                w.device, self.devices.name
            )));
        }
        Ok((i, w, schema, layout))
    }

    /// Runs one device's load (the device is marked busy): see the [module docs](self).
    async fn run(
        self: Arc<Self>,
        start: Start,
        input: Streaming<FlightData>,
        tx: tokio::sync::mpsc::Sender<Result<PutResult, Status>>,
    ) {
        let (i, w, schema, layout) = start;
        let file = w.device.clone();
        let outcome = self
            .clone()
            .session(i, &w, schema, layout, input, &tx)
            .await;
        // The device is read-only again and free for the next load before the
        // coordinator hears the outcome.
        self.busy
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&file);
        match outcome {
            Ok(committed) => {
                let _ = tx.send(Ok(reply(&committed))).await;
            }
            Err(e) => {
                tracing::warn!("load of {} into {file}: {}", w.table, e.message());
                eprintln!(
                    "csd worker: the load of {} into {file} did not complete: {}",
                    w.table,
                    e.message()
                );
                let _ = tx.send(Err(e)).await;
            }
        }
    }

    async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&LoadState) -> T + Send + 'static,
    ) -> Result<T, Status> {
        let s = self.clone();
        tokio::task::spawn_blocking(move || f(&s))
            .await
            .map_err(|e| Status::internal(format!("a load task failed: {e}")))
    }

    async fn session(
        self: Arc<Self>,
        i: usize,
        w: &WireLoad,
        schema: Schema,
        layout: Layout,
        input: Streaming<FlightData>,
        tx: &tokio::sync::mpsc::Sender<Result<PutResult, Status>>,
    ) -> Result<LoadReply, Status> {
        self.blocking(move |s| s.reopen(i, true))
            .await?
            .map_err(|e| {
                Status::failed_precondition(format!(
                    "{e} (the load needs the image to itself: stop other processes that \
                     hold it open)"
                ))
            })?;
        eprintln!(
            "csd worker: loading {} into {} (read-write until the load ends)",
            w.table, w.device
        );
        let staging = staging_name(&w.table);
        let result = self
            .clone()
            .stripe(i, w, &staging, schema, layout, input, tx)
            .await;
        // Whatever happened, the staging table goes (a commit renamed it already) and the
        // image is read-only again.
        let back = self
            .blocking(move |s| {
                let d = s.device(i);
                let dropped = Catalog::drop_table(&mut Shared::new(&d.device), &staging);
                (dropped, s.reopen(i, false))
            })
            .await?;
        let (dropped, reopened) = back;
        if let Err(e) = dropped {
            tracing::warn!("dropping the staging table: {e}");
        }
        if let Err(e) = reopened {
            eprintln!("csd worker: {e}");
        }
        result
    }

    #[allow(clippy::too_many_arguments)]
    async fn stripe(
        self: Arc<Self>,
        i: usize,
        w: &WireLoad,
        staging: &str,
        schema: Schema,
        layout: Layout,
        mut input: Streaming<FlightData>,
        tx: &tokio::sync::mpsc::Sender<Result<PutResult, Status>>,
    ) -> Result<LoadReply, Status> {
        let stage = staging.to_string();
        let (page_bytes, dropped) = self
            .blocking(move |s| {
                let mut c = Shared::new(&s.device(i).device);
                let id = c.identify().clone();
                // A staging table an earlier load left behind (a worker killed mid-load).
                let dropped = Catalog::drop_table(&mut c, &stage);
                (id.flash_page_bytes.max(id.lba_size), dropped)
            })
            .await?;
        dropped.map_err(status_of)?;
        tx.send(Ok(reply(&LoadReply::Ready { page_bytes })))
            .await
            .map_err(|_| Status::cancelled("the coordinator went away"))?;
        let (rows_tx, rows_rx) = tokio::sync::mpsc::channel::<BinaryArray>(4);
        let stage = staging.to_string();
        let s = self.clone();
        let loader = tokio::task::spawn_blocking(move || {
            let source = Arriving {
                schema,
                rx: rows_rx,
                chunk: None,
                pos: 0,
            };
            Catalog::load(
                &mut Shared::new(&s.device(i).device),
                &stage,
                source,
                layout,
                &mut |_| {},
            )
        });
        let received = receive(&mut input, rows_tx).await;
        // The loader ends when the rows do (or the stream broke): its staging table is
        // published only under the staging name.
        let loaded = loader
            .await
            .map_err(|e| Status::internal(format!("the loader failed: {e}")))?;
        received?;
        let report = loaded.map_err(status_of)?;
        tx.send(Ok(reply(&LoadReply::Prepared {
            rows: report.table.rows,
            pages: report.table.pages,
            first_lba: report.table.first_lba,
            modeled_s: report.modeled_s,
            wall_s: report.wall_s,
        })))
        .await
        .map_err(|_| Status::cancelled("the coordinator went away"))?;
        match input.message().await {
            Ok(Some(d)) => match control_of(&d) {
                Some(Ok(LoadControl::Commit)) => {}
                Some(Ok(c)) => {
                    return Err(Status::aborted(format!(
                        "the coordinator said {c:?}: the load is abandoned, nothing changed"
                    )));
                }
                Some(Err(e)) => return Err(e),
                None => return Err(Status::invalid_argument("rows after the end of a load")),
            },
            Ok(None) | Err(_) => {
                return Err(Status::aborted(
                    "the coordinator's stream ended before the commit: the load is \
                     abandoned, nothing changed",
                ));
            }
        }
        let (from, to) = (staging.to_string(), w.table.clone());
        let (table, replaced) = self
            .blocking(move |s| {
                let d = s.device(i);
                let r = Catalog::rename(&mut Shared::new(&d.device), &from, &to);
                if let Ok((t, _)) = &r {
                    d.publish(t.clone());
                }
                r
            })
            .await?
            .map_err(status_of)?;
        eprintln!(
            "csd worker: published {} on {} ({} rows, {} pages)",
            table.name, w.device, table.rows, table.pages
        );
        Ok(LoadReply::Committed {
            replaced: replaced.map(|t| (t.rows, t.pages)),
        })
    }
}

/// Passes the stream's row batches to the loader until `end`; an error when the stream
/// ends or breaks first, or carries something else.
async fn receive(
    input: &mut Streaming<FlightData>,
    rows: tokio::sync::mpsc::Sender<BinaryArray>,
) -> Result<(), Status> {
    let mut schema: Option<Arc<ArrowSchema>> = None;
    let none = std::collections::HashMap::new();
    loop {
        let d = match input.message().await {
            Ok(Some(d)) => d,
            Ok(None) => {
                return Err(Status::aborted(
                    "the coordinator's stream ended before every row was sent: the load is \
                     abandoned, nothing changed",
                ));
            }
            Err(e) => return Err(Status::aborted(format!("the load's stream broke: {e}"))),
        };
        match control_of(&d) {
            Some(Ok(LoadControl::End)) => return Ok(()),
            Some(Ok(c)) => {
                return Err(Status::aborted(format!(
                    "the coordinator said {c:?} before the end of the rows"
                )));
            }
            Some(Err(e)) => return Err(e),
            None => {}
        }
        let Some(s) = &schema else {
            let s = ArrowSchema::try_from(&d)
                .map_err(|e| Status::invalid_argument(format!("the rows' schema: {e}")))?;
            if s.fields().len() != 1 || s.field(0).data_type() != &DataType::Binary {
                return Err(Status::invalid_argument(
                    "a load's batches have one binary column of row images",
                ));
            }
            schema = Some(Arc::new(s));
            continue;
        };
        let b = arrow_flight::utils::flight_data_to_arrow_batch(&d, s.clone(), &none)
            .map_err(|e| Status::invalid_argument(format!("a batch of rows: {e}")))?;
        let col = b
            .column(0)
            .as_any()
            .downcast_ref::<BinaryArray>()
            .cloned()
            .ok_or_else(|| Status::invalid_argument("a batch of rows is not binary"))?;
        if rows.send(col).await.is_err() {
            // The loader stopped (an error it reports itself).
            return Ok(());
        }
    }
}

type Stream<T> = BoxStream<'static, Result<T, Status>>;

fn refuse<T>(what: &str) -> Result<Response<T>, Status> {
    Err(Status::unimplemented(format!(
        "csd worker: {what} is not served (loads use DoPut)"
    )))
}

#[tonic::async_trait]
impl FlightService for LoadService {
    type HandshakeStream = Stream<HandshakeResponse>;
    type ListFlightsStream = Stream<FlightInfo>;
    type DoGetStream = Stream<FlightData>;
    type DoPutStream = Stream<PutResult>;
    type DoExchangeStream = Stream<FlightData>;
    type DoActionStream = Stream<arrow_flight::Result>;
    type ListActionsStream = Stream<ActionType>;

    async fn handshake(
        &self,
        _r: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        refuse("Handshake")
    }

    async fn list_flights(
        &self,
        _r: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        refuse("ListFlights")
    }

    async fn get_flight_info(
        &self,
        _r: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        refuse("GetFlightInfo")
    }

    async fn poll_flight_info(
        &self,
        _r: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        refuse("PollFlightInfo")
    }

    async fn get_schema(
        &self,
        _r: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        refuse("GetSchema")
    }

    async fn do_get(&self, _r: Request<Ticket>) -> Result<Response<Self::DoGetStream>, Status> {
        refuse("DoGet")
    }

    async fn do_exchange(
        &self,
        _r: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        refuse("DoExchange")
    }

    async fn do_action(
        &self,
        _r: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        refuse("DoAction")
    }

    async fn list_actions(
        &self,
        _r: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        refuse("ListActions")
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        let mut input = request.into_inner();
        let first = input
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("an empty load stream"))?;
        let cmd = first
            .flight_descriptor
            .map(|d| d.cmd)
            .ok_or_else(|| Status::invalid_argument("a load starts with its descriptor"))?;
        let start = self.state.check(&cmd)?;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(self.state.clone().run(start, input, tx));
        let out =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
        Ok(Response::new(out.boxed()))
    }
}

// ---------------------------------------------------------------------------------------
// Coordinator side

/// One device's part of a load through its worker.
#[derive(Debug, Clone, PartialEq)]
pub struct StripeLoad {
    /// The device's index in the array.
    pub device: usize,
    /// Its worker.
    pub worker: String,
    /// Rows of its stripe.
    pub rows: u64,
    /// Pages of its stripe.
    pub pages: u64,
    /// First LBA of the stripe's extent.
    pub first_lba: u64,
    /// Modeled seconds of the device's load.
    pub modeled_s: f64,
    /// Wall seconds of the device's load (on the worker).
    pub wall_s: f64,
    /// Rows and pages of the stripe it replaced.
    pub replaced: Option<(u64, u64)>,
}

/// A load through the workers, done: each device's part, the table's placement (for
/// the manifest) and the devices' page size.
#[derive(Debug, Clone)]
pub struct ArrayLoaded {
    /// Per device, array order.
    pub devices: Vec<StripeLoad>,
    /// Where the table is (every device acknowledged it).
    pub placement: Placement,
    /// Bytes of a table page on the devices.
    pub page_bytes: u32,
}

/// One device's open load stream.
struct Link {
    device: usize,
    worker: String,
    file: String,
    chunks: Option<tokio::sync::mpsc::Sender<RecordBatch>>,
    control: tokio::sync::mpsc::Sender<FlightData>,
    replies: BoxStream<'static, Result<PutResult, FlightError>>,
}

impl Link {
    fn name(&self) -> String {
        format!(
            "worker {} (device {})",
            self.worker.trim_end_matches('/'),
            self.file
        )
    }

    async fn reply(&mut self) -> Result<LoadReply, String> {
        match self.replies.next().await {
            Some(Ok(r)) => serde_json::from_slice(&r.app_metadata)
                .map_err(|e| format!("{}: not a load reply: {e}", self.name())),
            Some(Err(e)) => Err(format!("{}: {}", self.name(), flight_message(&e))),
            None => Err(format!("{}: the stream ended without a reply", self.name())),
        }
    }
}

/// A Flight error in plain words (a refused token says how to fix it).
fn flight_message(e: &FlightError) -> String {
    match e {
        FlightError::Tonic(s) => {
            if s.code() == tonic::Code::Unauthenticated {
                return format!(
                    "refused the load: {}; set {} to the workers' token",
                    s.message(),
                    crate::TOKEN_ENV
                );
            }
            format!("{} ({:?})", s.message(), s.code())
        }
        e => e.to_string(),
    }
}

fn control(c: LoadControl) -> FlightData {
    FlightData {
        app_metadata: json_bytes(&c).into(),
        ..Default::default()
    }
}

async fn open_link(
    device: usize,
    worker: &str,
    token: Option<&str>,
    load: WireLoad,
) -> Result<(Link, u32), String> {
    let file = load.device.clone();
    let name = format!("worker {} (device {file})", worker.trim_end_matches('/'));
    let channel = tonic::transport::Endpoint::from_shared(worker.to_string())
        .map_err(|e| format!("{name}: {e}"))?
        .connect()
        .await
        .map_err(|e| format!("{name}: cannot connect: {e}"))?;
    let mut client = FlightClient::new(channel);
    if let Some(t) = token {
        client
            .add_header(TOKEN_HEADER, t)
            .map_err(|e| format!("the token: {e}"))?;
    }
    let (chunk_tx, chunk_rx) = tokio::sync::mpsc::channel::<RecordBatch>(2);
    let (ctl_tx, ctl_rx) = tokio::sync::mpsc::channel::<FlightData>(2);
    let first = FlightData {
        flight_descriptor: Some(FlightDescriptor::new_cmd(json_bytes(&load))),
        ..Default::default()
    };
    let batches = futures::stream::unfold(chunk_rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok(b), rx))
    });
    let data = FlightDataEncoderBuilder::new()
        .with_schema(rows_schema())
        .build(batches);
    let ctl = futures::stream::unfold(ctl_rx, |mut rx| async move {
        rx.recv().await.map(|m| (Ok(m), rx))
    });
    let request = futures::stream::iter([Ok(first)])
        .chain(data)
        .chain(futures::stream::iter([Ok(control(LoadControl::End))]))
        .chain(ctl);
    let replies = client
        .do_put(request)
        .await
        .map_err(|e| format!("{name}: {}", flight_message(&e)))?;
    let mut link = Link {
        device,
        worker: worker.to_string(),
        file,
        chunks: Some(chunk_tx),
        control: ctl_tx,
        replies,
    };
    match link.reply().await? {
        LoadReply::Ready { page_bytes } => Ok((link, page_bytes)),
        r => Err(format!("{name}: expected ready, got {r:?}")),
    }
}

/// Rows dealt to one device, gathered until a message's worth.
#[derive(Default)]
struct Gather {
    data: Vec<u8>,
    offsets: Vec<i32>,
}

impl Gather {
    fn push(&mut self, row: &[u8]) {
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
        self.data.extend_from_slice(row);
        // A batch holds at most CHUNK_BYTES plus one unit: far below i32::MAX.
        self.offsets.push(self.data.len() as i32);
    }

    fn take(&mut self) -> Option<RecordBatch> {
        if self.offsets.len() < 2 {
            return None;
        }
        let offsets = OffsetBuffer::new(ScalarBuffer::from(std::mem::take(&mut self.offsets)));
        let values = Buffer::from_vec(std::mem::take(&mut self.data));
        let col = BinaryArray::new(offsets, values, None);
        RecordBatch::try_new(rows_schema(), vec![Arc::new(col)]).ok()
    }
}

/// Loads `source` as table `name` striped over the array's devices through their
/// workers (see the [module docs](self)): units of `stripe_pages` pages round robin, as
/// [`csd_sql::array::load_striped`] deals them. Returns when every device committed;
/// the caller then writes the manifest. `progress` sees the rows dealt.
#[allow(clippy::too_many_arguments)]
pub fn load_through_workers(
    manifest: &Manifest,
    array: &str,
    token: Option<&str>,
    name: &str,
    mut source: impl RowSource,
    layout: Layout,
    stripe_pages: u64,
    progress: &dyn Fn(u64),
) -> Result<ArrayLoaded, DistError> {
    manifest.check().map_err(DistError::Manifest)?;
    csd_host::check_table_name(name).map_err(|e| DistError::Wire(e.to_string()))?;
    if stripe_pages == 0 {
        return Err(DistError::Wire("a stripe unit is at least one page".into()));
    }
    if manifest.workers.len() != manifest.devices.len() {
        return Err(DistError::Manifest(
            "workers: a load through workers needs one worker address per device".into(),
        ));
    }
    let schema = source.schema().clone();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| DistError::Io(format!("starting the runtime: {e}")))?;
    let loads: Vec<WireLoad> = manifest
        .devices
        .iter()
        .enumerate()
        .map(|(i, d)| WireLoad {
            version: WIRE_VERSION.to_string(),
            array: array.to_string(),
            device: d.clone(),
            index: i,
            table: name.to_string(),
            layout: layout.to_string(),
            schema_name: schema.name().to_string(),
            columns: WireLoad::columns_of(&schema),
            fingerprint: schema.fingerprint(),
        })
        .collect();
    // 1. Every device ready (open read-write on its worker).
    let opened = runtime.block_on(async {
        let tries = loads.into_iter().enumerate().map(|(i, l)| {
            let w = manifest.workers[i].clone();
            async move { open_link(i, &w, token, l).await }
        });
        futures::future::join_all(tries).await
    });
    let mut links = Vec::with_capacity(opened.len());
    let mut errors = Vec::new();
    let mut page_bytes = None;
    for o in opened {
        match o {
            Ok((l, p)) => {
                if *page_bytes.get_or_insert(p) != p {
                    errors.push(format!(
                        "{}: {p}-byte pages, other devices have {}",
                        l.name(),
                        page_bytes.unwrap_or(0)
                    ));
                }
                links.push(l);
            }
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        // Dropping the links ends their streams: each worker abandons its load.
        drop(links);
        return Err(failed(array, name, &errors));
    }
    let page_bytes = page_bytes.unwrap_or(0);
    let width = schema.row_width();
    let per_page = rows_per_page(layout, width, page_bytes as usize);
    if per_page == 0 {
        return Err(DistError::Wire(format!(
            "a {width}-byte row of table {name} does not fit a {page_bytes}-byte {layout} page"
        )));
    }
    // 2. Deal the rows: unit k to device k mod n, a message per device when it holds
    // about CHUNK_BYTES.
    let n = links.len();
    let unit_rows = per_page * stripe_pages as usize;
    let unit_bytes = stripe_pages as usize * page_bytes as usize;
    let senders: Vec<_> = links.iter_mut().map(|l| l.chunks.take()).collect();
    let mut gathers: Vec<Gather> = (0..n).map(|_| Gather::default()).collect();
    let mut row = Vec::with_capacity(width);
    let (mut rows, mut in_unit, mut unit_len, mut k) = (0u64, 0usize, 0usize, 0usize);
    let mut broken = false;
    let send = |d: usize, b: RecordBatch| -> bool {
        senders[d]
            .as_ref()
            .is_some_and(|s| s.blocking_send(b).is_ok())
    };
    while source.next_row(&mut row) {
        let g = &mut gathers[k % n];
        g.push(&row);
        rows += 1;
        in_unit += 1;
        unit_len += row.len();
        if csd_sql::array::unit_is_full(in_unit, unit_len, unit_rows, unit_bytes) {
            in_unit = 0;
            unit_len = 0;
            if g.data.len() >= CHUNK_BYTES
                && let Some(b) = g.take()
                && !send(k % n, b)
            {
                broken = true;
                break;
            }
            k += 1;
            if k.is_multiple_of(n) {
                progress(rows);
            }
        }
    }
    if !broken {
        for (d, g) in gathers.iter_mut().enumerate() {
            if let Some(b) = g.take()
                && !send(d, b)
            {
                broken = true;
            }
        }
    }
    progress(rows);
    // The rows' streams end: each device writes its stripe and says prepared.
    drop(senders);
    let result = runtime.block_on(finish(&mut links, array, name, broken, rows));
    // The streams close when the links go (a worker that did not commit abandons).
    drop(links);
    drop(runtime);
    let devices = result?;
    let placement = Placement {
        name: name.to_string(),
        layout,
        stripe_pages,
        rows: devices.iter().map(|d| d.rows).sum(),
        pages: devices.iter().map(|d| d.pages).sum(),
        device_rows: devices.iter().map(|d| d.rows).collect(),
        device_pages: devices.iter().map(|d| d.pages).collect(),
    };
    Ok(ArrayLoaded {
        devices,
        placement,
        page_bytes,
    })
}

fn failed(array: &str, table: &str, errors: &[String]) -> DistError {
    DistError::Io(format!(
        "the load of {table} into array {array} failed, nothing was published (the \
         manifest and the tables are as before): {}",
        errors.join("; ")
    ))
}

/// Phase 2 and 3: every device prepared, then every device committed.
async fn finish(
    links: &mut [Link],
    array: &str,
    table: &str,
    broken: bool,
    sent: u64,
) -> Result<Vec<StripeLoad>, DistError> {
    let prepared = futures::future::join_all(links.iter_mut().map(|l| async move {
        match l.reply().await? {
            LoadReply::Prepared {
                rows,
                pages,
                first_lba,
                modeled_s,
                wall_s,
            } => Ok(StripeLoad {
                device: l.device,
                worker: l.worker.clone(),
                rows,
                pages,
                first_lba,
                modeled_s,
                wall_s,
                replaced: None,
            }),
            r => Err(format!("{}: expected prepared, got {r:?}", l.name())),
        }
    }))
    .await;
    let mut errors: Vec<String> = prepared
        .iter()
        .filter_map(|p| p.as_ref().err().cloned())
        .collect();
    if broken && errors.is_empty() {
        errors.push("a worker stopped taking rows".into());
    }
    let held: u64 = prepared
        .iter()
        .filter_map(|p| p.as_ref().ok())
        .map(|s| s.rows)
        .sum();
    if errors.is_empty() && held != sent {
        errors.push(format!("the devices hold {held} rows, {sent} were sent"));
    }
    if !errors.is_empty() {
        for l in links.iter() {
            let _ = l.control.send(control(LoadControl::Abort)).await;
        }
        return Err(failed(array, table, &errors));
    }
    let mut loads: Vec<StripeLoad> = prepared.into_iter().filter_map(Result::ok).collect();
    for l in links.iter() {
        if l.control.send(control(LoadControl::Commit)).await.is_err() {
            errors.push(format!("{}: its stream closed before the commit", l.name()));
        }
    }
    let committed = futures::future::join_all(links.iter_mut().map(|l| async move {
        match l.reply().await? {
            LoadReply::Committed { replaced } => Ok((l.device, replaced)),
            r => Err(format!("{}: expected committed, got {r:?}", l.name())),
        }
    }))
    .await;
    for c in committed {
        match c {
            Ok((d, replaced)) => {
                if let Some(s) = loads.iter_mut().find(|s| s.device == d) {
                    s.replaced = replaced;
                }
            }
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        return Err(DistError::Io(format!(
            "the load of {table} into array {array} failed during the commit: {}; some \
             devices may hold the new table and others the old one (the manifest is as \
             before): load the table again",
            errors.join("; ")
        )));
    }
    Ok(loads)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_names_are_valid_table_names() {
        for t in ["lineitem", &"x".repeat(64), "a"] {
            let s = staging_name(t);
            assert!(csd_host::check_table_name(&s).is_ok(), "{s}");
            assert_ne!(s, t);
        }
    }

    #[test]
    fn gathered_rows_keep_their_bytes_and_order() {
        let mut g = Gather::default();
        assert!(g.take().is_none());
        let rows: Vec<Vec<u8>> = (0..100u8).map(|i| vec![i; (i % 7) as usize + 1]).collect();
        for r in &rows {
            g.push(r);
        }
        let b = g.take().expect("a batch");
        let col = b
            .column(0)
            .as_any()
            .downcast_ref::<BinaryArray>()
            .expect("binary");
        let back: Vec<Vec<u8>> = (0..col.len()).map(|i| col.value(i).to_vec()).collect();
        assert_eq!(back, rows);
        assert!(g.take().is_none(), "taken: empty again");
    }

    #[test]
    fn a_control_message_is_told_from_rows() {
        let c = control(LoadControl::Commit);
        assert!(matches!(control_of(&c), Some(Ok(LoadControl::Commit))));
        let rows = FlightData {
            data_header: vec![1, 2, 3].into(),
            ..Default::default()
        };
        assert!(control_of(&rows).is_none());
        let bad = FlightData {
            app_metadata: b"nonsense".to_vec().into(),
            ..Default::default()
        };
        assert!(matches!(control_of(&bad), Some(Err(_))));
    }
}
