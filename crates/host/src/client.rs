//! A synchronous host client over one queue pair: submit, let the device process, poll.
//! The host's clock advances to each completion, so a sequence of calls models a host
//! thread that waits for each command.

use csd_device::{Command, Completion, IdentifyInfo, NvmeDevice, Payload, QueueId, Status};
use csd_sim::SimTime;
use csd_sim::events;
use thiserror::Error;

/// Errors a host operation reports.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum HostError {
    /// The device completed a command with an error status.
    #[error("{command} failed: {status}")]
    Device {
        /// Which command.
        command: &'static str,
        /// The device's status.
        status: Status,
    },
    /// The catalog on the device is unreadable or inconsistent.
    #[error("catalog: {0}")]
    Catalog(String),
    /// A request the host refuses before sending anything.
    #[error("{0}")]
    Invalid(String),
    /// Building pages failed.
    #[error(transparent)]
    Page(#[from] csd_table::page::PageError),
    /// An INSERT / UPDATE / DELETE was committed but not fully applied when power failed,
    /// and this open of the device cannot write to finish it (`csd_host::dml::finish`).
    #[error(
        "an INSERT/UPDATE/DELETE on table {table} was committed but not fully applied when \
         power failed ({pages} pages to rewrite); open the image read-write once to finish \
         it (any `csd sql` statement that changes data, `csd load`, `csd index`; `csd sql` \
         and `csd query` do it themselves): {cause}"
    )]
    Unfinished {
        /// The table.
        table: String,
        /// Pages the redo record rewrites.
        pages: u64,
        /// Why this open could not finish it.
        cause: String,
    },
}

/// Host-side totals of what the client's commands cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientTotals {
    /// Commands completed.
    pub commands: u64,
    /// Bytes over the host link.
    pub host_link_bytes: u64,
    /// Flash page reads, programs and erases caused.
    pub flash_reads: u64,
    /// Flash page programs caused.
    pub flash_programs: u64,
    /// Flash block erases caused.
    pub flash_erases: u64,
}

impl ClientTotals {
    /// Count one completed command.
    pub fn add(&mut self, a: &csd_device::Accounting) {
        self.commands += 1;
        self.host_link_bytes += a.host_link_bytes;
        self.flash_reads += a.flash_reads;
        self.flash_programs += a.flash_programs;
        self.flash_erases += a.flash_erases;
    }
}

/// A host client of one device.
pub struct Client {
    dev: NvmeDevice,
    qid: QueueId,
    now: SimTime,
    identify: IdentifyInfo,
    totals: ClientTotals,
}

impl Client {
    /// Open a client on `dev` (creates a queue pair and reads Identify).
    pub fn new(mut dev: NvmeDevice) -> Result<Client, HostError> {
        let qid = dev
            .create_queue_pair(64)
            .map_err(|status| HostError::Device {
                command: "CreateQueuePair",
                status,
            })?;
        // The host starts once the device is idle: a freshly formatted device may still
        // be programming its format's metadata, and the first commands must not overlap it.
        let now = device_now(&dev);
        let mut c = Client {
            dev,
            qid,
            now,
            identify: IdentifyInfo {
                name: String::new(),
                lbas: 0,
                lba_size: 0,
                mdts_blocks: 0,
                max_batch_pages: 0,
                max_queue_pairs: 0,
                max_queue_depth: 0,
                flash_page_bytes: 0,
            },
            totals: ClientTotals::default(),
        };
        match c.exec(Command::Identify)?.payload {
            Payload::Identify(info) => c.identify = info,
            _ => return Err(HostError::Invalid("Identify returned no data".into())),
        }
        Ok(c)
    }

    /// The host waits for its clock (the completion of the commands it waited for):
    /// while the event core records, the core books what it needs to fix it (stages
    /// arriving by then, in arrival order), so a synchronous host keeps the graph small
    /// and its clock final. Returns the clock.
    pub fn settle_now(&mut self) -> SimTime {
        self.now = self.dev.resolve(self.now);
        self.now
    }

    /// Totals of every command issued so far.
    pub fn totals(&self) -> ClientTotals {
        self.totals
    }

    /// The device (for shutdown or inspection).
    pub fn device(&mut self) -> &mut NvmeDevice {
        &mut self.dev
    }

    /// Give the device back.
    pub fn into_device(self) -> NvmeDevice {
        self.dev
    }

    /// Run `cmd` submitted at `at` without waiting for it (a background writer): the
    /// host's clock stays where it is, the device's resources stay reserved. Errors on a
    /// non-success status.
    pub fn exec_detached(&mut self, cmd: Command, at: SimTime) -> Result<Completion, HostError> {
        let name = cmd.name();
        let c = complete(&mut self.dev, self.qid, cmd, at)?;
        self.totals.add(&c.acct);
        checked(name, c)
    }
}

/// The instant every resource of `dev` (flash dies and channels, controller, host link,
/// cores) is free: when a host that starts using it now may submit its first command.
pub(crate) fn device_now(dev: &NvmeDevice) -> SimTime {
    csd_device::workload::IoTarget::now(dev.block())
}

/// Submit `cmd` on `qid` at `at`, let the device run it, and take its completion. A
/// non-success status is returned inside the completion, not as an error.
pub(crate) fn complete(
    dev: &mut NvmeDevice,
    qid: QueueId,
    cmd: Command,
    at: SimTime,
) -> Result<Completion, HostError> {
    let name = cmd.name();
    dev.submit(qid, cmd, at)
        .map_err(|status| HostError::Device {
            command: name,
            status,
        })?;
    dev.process();
    dev.poll(qid)
        .ok_or(HostError::Invalid(format!("{name}: no completion")))
}

/// `c` if it succeeded, else the device error for command `name`.
pub(crate) fn checked(name: &'static str, c: Completion) -> Result<Completion, HostError> {
    if c.status.is_success() {
        Ok(c)
    } else {
        Err(HostError::Device {
            command: name,
            status: c.status,
        })
    }
}

/// Anything that issues commands to a device and waits for each: a [`Client`] or a
/// thread's [`crate::shared::DeviceHandle`]. The provided methods are the common
/// block-interface calls.
pub trait CommandIssuer {
    /// Run one command submitted at host instant `at` (a host that keeps several
    /// commands in flight submits before its earlier ones complete); the issuer's clock
    /// becomes the later of itself and the completion. Errors on a non-success status.
    fn exec_at(&mut self, cmd: Command, at: SimTime) -> Result<Completion, HostError>;

    /// Run one command to completion, submitted at the issuer's clock.
    fn exec(&mut self, cmd: Command) -> Result<Completion, HostError> {
        let at = self.now();
        self.exec_at(cmd, at)
    }

    /// Let host time pass until `t` (a poll interval; in paced mode the thread sleeps).
    fn wait_until(&mut self, t: SimTime);

    /// What the device said about itself.
    fn identify(&self) -> &IdentifyInfo;

    /// The issuer's clock: the completion of its last command.
    fn now(&self) -> SimTime;

    /// Whether the issuer's device books its work through the event core
    /// ([`csd_sim::events`]) while a recording is on: its instants may then be unfixed,
    /// and host code decides on them through [`CommandIssuer::earliest`],
    /// [`CommandIssuer::at_or_before`] and [`CommandIssuer::resolve`]. The default: no
    /// (every instant is final, and those methods go by value).
    fn event_core(&self) -> bool {
        false
    }

    /// Of `instants`, the earliest (the first of equal ones) and its final value; the
    /// event core books stages only as far as it must to know it.
    fn earliest(&mut self, instants: &[SimTime]) -> Option<(usize, SimTime)> {
        instants
            .iter()
            .enumerate()
            .min_by_key(|&(i, t)| (t.ns(), i))
            .map(|(i, &t)| (i, t))
    }

    /// Whether `t` ends at or before `bound` (a final instant); the event core books only
    /// stages that arrive by `bound`.
    fn at_or_before(&mut self, t: SimTime, bound: SimTime) -> bool {
        t.ns() <= bound.ns()
    }

    /// The final value of `t` (the host waits for it).
    fn resolve(&mut self, t: SimTime) -> SimTime {
        t
    }

    /// The host waits for its clock: on the event core, the core books what it must to fix
    /// it ([`Client::settle_now`]); the clock, final. The default: the clock as it is.
    fn settle_now(&mut self) -> SimTime {
        self.now()
    }

    /// Book everything the event core recorded for this issuer's device (the end of a
    /// recording); afterwards every instant has its final value
    /// ([`csd_sim::events::value`]).
    fn run_events(&mut self) {}

    /// Replace every instant the issuer and its device keep by `settle(instant)` (the
    /// event core's compaction and end of recording). The default keeps none.
    fn settle_instants(&mut self, settle: &mut dyn FnMut(SimTime) -> SimTime) {
        let _ = settle;
    }

    /// Hand back a Read's payload the caller is done with: an in-process device fills
    /// it on a later Read of the same length instead of allocating (and zeroing) a new
    /// one. The default drops it.
    fn give_back(&mut self, buf: Vec<u8>) {
        drop(buf);
    }

    /// Read `blocks` LBAs from `lba`.
    fn read(&mut self, lba: u64, blocks: u32) -> Result<Vec<u8>, HostError> {
        match self.exec(Command::Read { lba, blocks })?.payload {
            Payload::Data(d) => Ok(d),
            _ => Err(HostError::Invalid("Read returned no data".into())),
        }
    }

    /// Write whole LBAs at `lba`, split into MDTS-sized commands.
    fn write(&mut self, lba: u64, data: &[u8]) -> Result<(), HostError> {
        let id = self.identify();
        let lba_size = id.lba_size as usize;
        let chunk = id.mdts_blocks as usize * lba_size;
        for (i, part) in data.chunks(chunk.max(1)).enumerate() {
            let l = lba + (i * chunk / lba_size.max(1)) as u64;
            self.exec(Command::Write {
                lba: l,
                data: part.to_vec(),
            })?;
        }
        Ok(())
    }

    /// Discard `blocks` LBAs from `lba`.
    fn trim(&mut self, lba: u64, blocks: u64) -> Result<(), HostError> {
        self.exec(Command::Trim { lba, blocks }).map(|_| ())
    }

    /// Make everything written durable.
    fn flush(&mut self) -> Result<(), HostError> {
        self.exec(Command::Flush).map(|_| ())
    }

    /// Write an atomic batch buffer (a DESC block and its pages).
    fn flush_batch(&mut self, buffer: Vec<u8>) -> Result<(), HostError> {
        self.exec(Command::FlushBatch { buffer }).map(|_| ())
    }
}

impl CommandIssuer for Client {
    fn exec_at(&mut self, cmd: Command, at: SimTime) -> Result<Completion, HostError> {
        let name = cmd.name();
        let c = complete(&mut self.dev, self.qid, cmd, at)?;
        self.now = self.now.max(c.acct.completed);
        self.totals.add(&c.acct);
        checked(name, c)
    }

    fn identify(&self) -> &IdentifyInfo {
        &self.identify
    }

    fn now(&self) -> SimTime {
        self.now
    }

    fn wait_until(&mut self, t: SimTime) {
        self.now = self.now.max(t);
    }

    fn event_core(&self) -> bool {
        true
    }

    fn earliest(&mut self, instants: &[SimTime]) -> Option<(usize, SimTime)> {
        self.dev.earliest(instants)
    }

    fn at_or_before(&mut self, t: SimTime, bound: SimTime) -> bool {
        self.dev.at_or_before(t, bound)
    }

    fn resolve(&mut self, t: SimTime) -> SimTime {
        self.dev.resolve(t)
    }

    fn settle_now(&mut self) -> SimTime {
        Client::settle_now(self)
    }

    fn run_events(&mut self) {
        events::run_all(&mut self.dev);
    }

    fn settle_instants(&mut self, settle: &mut dyn FnMut(SimTime) -> SimTime) {
        self.now = settle(self.now);
        self.dev.settle_instants(settle);
    }

    fn give_back(&mut self, buf: Vec<u8>) {
        self.dev.give_back(buf);
    }
}
