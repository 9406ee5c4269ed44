//! The command interface (DESIGN.md, "command interface (the NVMe boundary)"): the host
//! submits typed [`Command`]s on queue pairs, the controller executes them over the FTL
//! block device, and each comes back as a typed [`Completion`]: status, payload and the
//! accounting of the work that command caused.
//!
//! What it realizes:
//! * OX's NVMe front end (batch-io §7.1, §7.1.1): host and controller are decoupled by
//!   pairs of submission and completion queues, and every command has an operation code
//!   ([`Command::opcode`]); the batch interface uses vendor-specific opcodes, as OX does
//!   to add new storage interfaces.
//! * The batch I/O interface of batch-io §3 as two commands: [`Command::FlushBatch`] (a
//!   DESC block and the pages it describes, written atomically, §3.1 and §3.2.2) and
//!   [`Command::ReadLpids`] (`readLPID` of many logical pages at once).
//!
//! Choices made here:
//! * Commands are a typed enum, not bytes; one `match` in [`NvmeDevice`] dispatches them
//!   to the block device, whose methods model each command's timing (block.rs, shared
//!   with the workload engine). A new command (sessions, per-page index commands) is a new
//!   variant, its opcode and one match arm.
//! * Queue pairs: at most [`MAX_QUEUE_PAIRS`], ids 1..=64, a freed id is reused. NVMe's
//!   admin queue 0 is not modeled separately: Identify and Get Log Page are accepted on
//!   every pair. A pair's depth (1..=[`MAX_QUEUE_DEPTH`]) bounds the commands outstanding
//!   on it, submitted and not yet reaped by [`NvmeDevice::poll`]; so a completion queue
//!   never overflows, and command ids (per pair, counting up and wrapping at 2^16) are
//!   unique among outstanding commands. A full pair refuses a submission with
//!   [`Status::QueueFull`]; NVMe has no such status, because a host driver tracks the
//!   queue head itself, so it is reported as "Command Interrupted" (0x21: retry later).
//! * Arbitration: [`NvmeDevice::process`] executes pending commands one at a time, round
//!   robin across pairs (one command per pair per turn, NVMe's default arbitration), in
//!   submission order within a pair. The execution order decides what a command sees;
//!   its modeled times come from the resources it reserves from its own submission
//!   instant, so commands still overlap in simulated time.
//! * Batch visibility: a command runs to its end before the next starts, so a read
//!   concurrent with a batch sees none or all of it, the empty or the full time-ordered
//!   prefix. This meets the rules (a)-(d) of batch-io §3.1.
//! * Bad input (an LBA out of range, zero blocks, data that is not whole LBAs, a transfer
//!   over MDTS, a malformed DESC) gets an error status, completes at its submission
//!   instant with zero accounting, and changes nothing: the FTL checks its arguments
//!   before acting and the controller undoes the staging of a refused command.
//! * Transfer limit: Read, Write and ReadLpids move at most MDTS blocks (the FTL's
//!   `mdts_sectors`); larger ones get Invalid Field, as NVMe prescribes. This also bounds
//!   the buffer a read allocates. A batch is bounded by the batch page limit instead.
//! * Admin data: Identify returns a 4 KiB data structure and the SMART log a 512-byte
//!   page, as in NVMe; each is staged in DRAM and sent over the host link.
//! * Deleting a pair aborts its pending commands unexecuted and drops completions not
//!   reaped.
//! * Accounting is the difference of the flash array's and the controller's counters
//!   around the command, so GC, log and checkpoint work a command triggers is charged to
//!   that command.

use crate::block::{BlockDevice, CommandError};
use crate::flixr::{
    DEFAULT_INDEX_CACHE_BYTES, Flixr, FlixrError, HostIndexValue, IndexRead, IndexRule, IndexSpec,
    JoinIndexSpec, RuleTerm, TableFormat,
};
use crate::isp::{IspOpen, IspRefusal, IspReply, Runtime};
use crate::ssd_btree::SsdBtree;
use csd_ftl::{Ftl, FtlError};
use csd_nand::NandError;
use csd_sim::SimTime;
use csd_sim::wire::BatchDesc;
use std::collections::VecDeque;
use thiserror::Error;

/// Queue pairs one device offers.
pub const MAX_QUEUE_PAIRS: u16 = 64;
/// Largest depth of a queue pair (NVMe's maximum queue entries).
pub const MAX_QUEUE_DEPTH: u32 = 65_535;
/// Bytes of the Identify data structure sent to the host.
pub const IDENTIFY_BYTES: u64 = 4096;
/// Bytes of the SMART / health log page sent to the host.
pub const SMART_LOG_BYTES: u64 = 512;

/// A queue pair's identifier (1..=[`MAX_QUEUE_PAIRS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueId(pub u16);

/// A command identifier, assigned at submission, unique among the commands outstanding
/// on its queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cid(pub u16);

/// Log pages of [`Command::GetLogPage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogPage {
    /// SMART / health information (NVMe log identifier 0x02).
    Smart,
    /// Emulator telemetry (vendor-specific 0xC0): busy time per resource and the energy
    /// counters, for reports that attribute a run's modeled time and energy.
    Telemetry,
}

/// A command the host submits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Read `blocks` LBAs from `lba`; the payload is their data.
    Read {
        /// First LBA.
        lba: u64,
        /// Number of LBAs (1..=MDTS).
        blocks: u32,
    },
    /// Write `data` (whole LBAs, at most MDTS of them) at `lba`.
    Write {
        /// First LBA.
        lba: u64,
        /// The data.
        data: Vec<u8>,
    },
    /// Unmap `blocks` LBAs from `lba`; they read as zeros afterwards.
    Trim {
        /// First LBA.
        lba: u64,
        /// Number of LBAs (at least 1).
        blocks: u64,
    },
    /// Make every buffered write durable.
    Flush,
    /// Write a batch atomically (batch-io §3): a DESC block followed by the pages it
    /// describes (see `csd_sim::wire::build_batch`).
    FlushBatch {
        /// The batch buffer.
        buffer: Vec<u8>,
    },
    /// Read logical pages (batch-io `readLPID`); the payload is their data, in order.
    ReadLpids {
        /// The LPIDs (1..=MDTS of them).
        lpids: Vec<u64>,
    },
    /// Open an in-storage processing session (smart-ssd §3.1 OPEN): the program and its
    /// parameters; the payload is the session id.
    IspOpen(Box<IspOpen>),
    /// Status and the next ready result chunk of a session (smart-ssd §3.1 GET).
    IspGet {
        /// The session id OPEN returned.
        session: u32,
    },
    /// End a session and free its resources (smart-ssd §3.1 CLOSE).
    IspClose {
        /// The session id OPEN returned.
        session: u32,
    },
    /// Read a log page.
    GetLogPage(LogPage),
    /// Describe the device.
    Identify,
    /// FLIXR SEND_TBL_COL (admin, flixr Table 1): register a table's row format so that
    /// firmware can parse its pages; the payload is the table id.
    SendTblCol(TableFormat),
    /// FLIXR SEND_IDX_ENC (admin): the per-page index of a table (column and encoding).
    SendIdxEnc {
        /// Table id.
        table: u8,
        /// Column and encoding.
        spec: IndexSpec,
    },
    /// FLIXR SEND_IDX_ICR (admin): register an index comparison rule; the payload is the
    /// rule id.
    SendIdxIcr {
        /// Table id.
        table: u8,
        /// The rule.
        rule: IndexRule,
    },
    /// FLIXR WRITE_IDX: write table pages (one per LBA) and build their index entries.
    WriteIdx {
        /// Table id.
        table: u8,
        /// First LBA.
        lba: u64,
        /// The pages (whole LBAs, at most MDTS).
        data: Vec<u8>,
    },
    /// FLIXR READ_IDX: read the pages of `lba..lba+blocks` whose entry can satisfy rule
    /// `(table, rule)`; the payload lists the pages read and those skipped. The range may
    /// be up to `flixr::MAX_INDEX_SCAN` LBAs; at most MDTS pages are returned, and the
    /// reply's `resume_at` says where to continue when that limit cut the range short.
    ReadIdx {
        /// Table id.
        table: u8,
        /// Rule id.
        rule: u16,
        /// First LBA.
        lba: u64,
        /// Number of LBAs examined (1..=`flixr::MAX_INDEX_SCAN`; at most MDTS returned).
        blocks: u32,
    },
    /// FLIXR SEND_TIDX_ENC (admin, §4.5): a per-table join-key index over a column of
    /// `table`; the payload is its id (tiaID).
    SendTidxEnc {
        /// Table id (the join's first table).
        table: u8,
        /// Key column and buckets.
        spec: JoinIndexSpec,
    },
    /// FLIXR SEND_TIDX_ICR (admin, §4.5): a join rule comparing `table`'s per-page
    /// bitmap entries with per-table index `tia`; the payload is the rule id.
    SendTidxIcr {
        /// Table id (the join's second table).
        table: u8,
        /// The per-table index.
        tia: u16,
    },
    /// FLIXR READ_IDX_JOIN1 (§4.5 step 1): READ_IDX that also builds per-table index
    /// `tia` from the join keys of the matching rows on the pages read.
    ReadIdxJoin1 {
        /// Table id.
        table: u8,
        /// Comparison rule id (of SEND_IDX_ICR).
        rule: u16,
        /// Per-table index id.
        tia: u16,
        /// Clear the per-table index first (the first command of a join).
        reset: bool,
        /// First LBA.
        lba: u64,
        /// Number of LBAs examined (1..=`flixr::MAX_INDEX_SCAN`; at most MDTS returned).
        blocks: u32,
    },
    /// FLIXR READ_IDX_JOIN2 (§4.5 step 2): read the pages of `table` whose bitmap entry
    /// shares a bucket with the per-table index of join rule `rule`.
    ReadIdxJoin2 {
        /// Table id.
        table: u8,
        /// Join rule id (of SEND_TIDX_ICR).
        rule: u16,
        /// First LBA.
        lba: u64,
        /// Number of LBAs examined (1..=`flixr::MAX_INDEX_SCAN`; at most MDTS returned).
        blocks: u32,
    },
    /// FLIXR UPDATE_HOST_INDEX: the indexed column's min and max on page `lba` (FLIXR-HS).
    UpdateHostIndex {
        /// Table id.
        table: u8,
        /// The page's LBA.
        lba: u64,
    },
    /// Release FLIXR comparison rule `(table, rule)` (the query that used it ended).
    DropIdxIcr {
        /// Table id.
        table: u8,
        /// Rule id.
        rule: u16,
    },
    /// FLIXR SEND_IDX_ICR over several keys (admin, §3.1/§6.4): a rule whose terms, one
    /// predicate per indexed column, are ANDed; READ_IDX skips a page when any term's
    /// key rules it out. The payload is the rule id.
    SendIdxIcrKeys {
        /// Table id.
        table: u8,
        /// The terms (1..=`flixr::MAX_RULE_TERMS`).
        terms: Vec<RuleTerm>,
    },
    /// Remove one per-page index key of a table (admin, vendor command of this
    /// realization): the column's encoding leaves the IERA; the table's other keys stay.
    DropIdxEnc {
        /// Table id.
        table: u8,
        /// The indexed column.
        column: String,
    },
    /// Release per-table index `tia` (admin, §4.5; vendor command of this realization)
    /// and the join rules comparing with it (the join that used it ended).
    DropTidxEnc {
        /// Per-table index id (of SEND_TIDX_ENC).
        tia: u16,
    },
    /// Release join rule `(table, rule)` (admin, §4.5; vendor command of this
    /// realization).
    DropTidxIcr {
        /// Table id.
        table: u8,
        /// Join rule id (of SEND_TIDX_ICR).
        rule: u16,
    },
    /// Undo SEND_TBL_COL (admin, vendor command of this realization): remove table
    /// `table`, its encoding and rules from the FLIXR registries (its index was dropped).
    DropTblCol {
        /// Table id.
        table: u8,
    },
    /// In-SSD B+tree (flixr §5 baseline): a per-row index whose nodes the firmware keeps
    /// in LBAs `first..first + lbas`, bulk-loaded from `(key, page)` pairs; the payload
    /// is its id.
    SsdIdxCreate {
        /// First LBA of the node region.
        first: u64,
        /// LBAs of the region.
        lbas: u64,
        /// `(key, data page)` pairs.
        pairs: Vec<(i64, u64)>,
    },
    /// In-SSD B+tree: remove `remove`, then insert `insert` (firmware traverses, splits
    /// and programs the nodes).
    SsdIdxUpdate {
        /// Index id.
        index: u16,
        /// Pairs to add.
        insert: Vec<(i64, u64)>,
        /// Pairs to remove.
        remove: Vec<(i64, u64)>,
    },
    /// In-SSD B+tree: read the data pages `>= from` named by entries with
    /// `lo <= key <= hi` (at most MDTS; the reply says where to resume).
    SsdIdxRead {
        /// Index id.
        index: u16,
        /// Lowest key, inclusive.
        lo: i64,
        /// Highest key, inclusive.
        hi: i64,
        /// Smallest page LBA to return.
        from: u64,
    },
}

impl Command {
    /// The NVMe operation code: NVM command set opcodes for Flush (0x00), Write (0x01),
    /// Read (0x02) and Trim (Dataset Management, 0x09); admin opcodes for Get Log Page
    /// (0x02) and Identify (0x06); vendor-specific opcodes for the batch interface, whose
    /// low bits give the data direction as NVMe asks (0x81 host to device, 0x82 back).
    pub fn opcode(&self) -> u8 {
        match self {
            Command::Flush => 0x00,
            Command::Write { .. } => 0x01,
            Command::Read { .. } => 0x02,
            Command::Trim { .. } => 0x09,
            Command::FlushBatch { .. } => 0x81,
            Command::ReadLpids { .. } => 0x82,
            Command::IspClose { .. } => 0x84,
            Command::IspOpen(_) => 0x85,
            Command::IspGet { .. } => 0x86,
            Command::GetLogPage(_) => 0x02,
            Command::Identify => 0x06,
            // Vendor-specific admin opcodes (0xC0..), host to device.
            Command::SendTblCol(_) => 0xC1,
            Command::SendIdxEnc { .. } => 0xC5,
            Command::SendIdxIcr { .. } => 0xC9,
            Command::WriteIdx { .. } => 0x89,
            Command::ReadIdx { .. } => 0x8A,
            Command::UpdateHostIndex { .. } => 0x8E,
            Command::SendTidxEnc { .. } => 0xCD,
            Command::SendTidxIcr { .. } => 0xD1,
            Command::ReadIdxJoin1 { .. } => 0x92,
            Command::ReadIdxJoin2 { .. } => 0x96,
            Command::DropIdxIcr { .. } => 0xD5,
            Command::DropTblCol { .. } => 0xDD,
            Command::SendIdxIcrKeys { .. } => 0xE1,
            Command::DropIdxEnc { .. } => 0xE5,
            Command::DropTidxEnc { .. } => 0xE9,
            Command::DropTidxIcr { .. } => 0xED,
            Command::SsdIdxCreate { .. } => 0xD9,
            Command::SsdIdxUpdate { .. } => 0x99,
            Command::SsdIdxRead { .. } => 0x9A,
        }
    }

    /// Is this an admin command (its opcode is in the admin command set)?
    pub fn is_admin(&self) -> bool {
        matches!(
            self,
            Command::GetLogPage(_)
                | Command::Identify
                | Command::SendTblCol(_)
                | Command::SendIdxEnc { .. }
                | Command::SendIdxIcr { .. }
                | Command::SendTidxEnc { .. }
                | Command::SendTidxIcr { .. }
                | Command::DropIdxIcr { .. }
                | Command::DropTblCol { .. }
                | Command::SendIdxIcrKeys { .. }
                | Command::DropIdxEnc { .. }
                | Command::DropTidxEnc { .. }
                | Command::DropTidxIcr { .. }
                | Command::SsdIdxCreate { .. }
        )
    }

    /// A short name, for messages and traces.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Read { .. } => "Read",
            Command::Write { .. } => "Write",
            Command::Trim { .. } => "Trim",
            Command::Flush => "Flush",
            Command::FlushBatch { .. } => "FlushBatch",
            Command::ReadLpids { .. } => "ReadLpids",
            Command::IspOpen(_) => "IspOpen",
            Command::IspGet { .. } => "IspGet",
            Command::IspClose { .. } => "IspClose",
            Command::GetLogPage(_) => "GetLogPage",
            Command::Identify => "Identify",
            Command::SendTblCol(_) => "SendTblCol",
            Command::SendIdxEnc { .. } => "SendIdxEnc",
            Command::SendIdxIcr { .. } => "SendIdxIcr",
            Command::WriteIdx { .. } => "WriteIdx",
            Command::ReadIdx { .. } => "ReadIdx",
            Command::UpdateHostIndex { .. } => "UpdateHostIndex",
            Command::SendTidxEnc { .. } => "SendTidxEnc",
            Command::SendTidxIcr { .. } => "SendTidxIcr",
            Command::ReadIdxJoin1 { .. } => "ReadIdxJoin1",
            Command::ReadIdxJoin2 { .. } => "ReadIdxJoin2",
            Command::DropIdxIcr { .. } => "DropIdxIcr",
            Command::DropTblCol { .. } => "DropTblCol",
            Command::SendIdxIcrKeys { .. } => "SendIdxIcrKeys",
            Command::DropIdxEnc { .. } => "DropIdxEnc",
            Command::DropTidxEnc { .. } => "DropTidxEnc",
            Command::DropTidxIcr { .. } => "DropTidxIcr",
            Command::SsdIdxCreate { .. } => "SsdIdxCreate",
            Command::SsdIdxUpdate { .. } => "SsdIdxUpdate",
            Command::SsdIdxRead { .. } => "SsdIdxRead",
        }
    }
}

/// The status of a command (or of a queue operation), with NVMe's status code type
/// ([`Status::sct`]) and status code ([`Status::code`]) and a message a user can act on.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Status {
    /// The command succeeded (generic 0x00).
    #[error("success")]
    Success,
    /// The device does not support this command (generic 0x01).
    #[error("invalid opcode: {0}")]
    InvalidOpcode(String),
    /// A field of the command is invalid: length, descriptor, configuration (generic 0x02).
    #[error("invalid field in command: {0}")]
    InvalidField(String),
    /// Data could not be moved to or from the media's backing store (generic 0x04).
    #[error("data transfer error: {0}")]
    DataTransferError(String),
    /// The device failed in a way the host cannot fix (generic 0x06).
    #[error("internal device error: {0}")]
    InternalError(String),
    /// The submission queue is full; reap completions and retry (generic 0x21, Command
    /// Interrupted).
    #[error(
        "queue pair {qid} is full ({depth} commands outstanding): poll completions, then resubmit"
    )]
    QueueFull {
        /// The queue pair.
        qid: u16,
        /// Its depth.
        depth: u32,
    },
    /// The LBA range is outside the namespace (generic 0x80).
    #[error("LBA out of range: {0}")]
    LbaOutOfRange(String),
    /// The device has no space left (generic 0x81).
    #[error("capacity exceeded: {0}")]
    CapacityExceeded(String),
    /// The namespace cannot serve commands now, e.g. power is off (generic 0x82).
    #[error("namespace not ready: {0}")]
    NamespaceNotReady(String),
    /// The queue pair does not exist, or no more can be created (command specific 0x01).
    #[error("invalid queue identifier: {0}")]
    InvalidQueueId(String),
    /// The queue depth is not supported (command specific 0x02, Max Queue Size Exceeded).
    #[error("invalid queue size: {0}")]
    InvalidQueueSize(String),
    /// A program or erase failed and was not recovered (media error 0x80).
    #[error("write fault: {0}")]
    WriteFault(String),
    /// The device cannot grant an in-storage session its resources now (vendor-specific
    /// command status 0xC0): close a session or wait.
    #[error("in-storage session refused: {0}")]
    SessionResources(String),
    /// The session id is not open (vendor-specific command status 0xC1).
    #[error("invalid session: {0}")]
    InvalidSession(String),
    /// The data of an LBA could not be read back (media error 0x81).
    #[error("unrecovered read error at LBA {lba}")]
    UnrecoveredReadError {
        /// The first LBA that could not be read.
        lba: u64,
    },
    /// The namespace accepts no writes: opened read-only, or the drive reached its end
    /// of life (generic 0x20, Namespace is Write Protected). Reads keep working.
    #[error("{0}")]
    WriteProtected(String),
}

impl Status {
    /// NVMe status code type: 0 generic, 1 command specific, 2 media and data integrity.
    pub fn sct(&self) -> u8 {
        match self {
            Status::InvalidQueueId(_)
            | Status::InvalidQueueSize(_)
            | Status::SessionResources(_)
            | Status::InvalidSession(_) => 1,
            Status::WriteFault(_) | Status::UnrecoveredReadError { .. } => 2,
            _ => 0,
        }
    }

    /// NVMe status code (within [`Status::sct`]).
    pub fn code(&self) -> u8 {
        match self {
            Status::Success => 0x00,
            Status::InvalidOpcode(_) => 0x01,
            Status::InvalidField(_) => 0x02,
            Status::DataTransferError(_) => 0x04,
            Status::InternalError(_) => 0x06,
            Status::QueueFull { .. } => 0x21,
            Status::LbaOutOfRange(_) => 0x80,
            Status::CapacityExceeded(_) => 0x81,
            Status::NamespaceNotReady(_) => 0x82,
            Status::InvalidQueueId(_) => 0x01,
            Status::InvalidQueueSize(_) => 0x02,
            Status::SessionResources(_) => 0xC0,
            Status::InvalidSession(_) => 0xC1,
            Status::WriteFault(_) => 0x80,
            Status::UnrecoveredReadError { .. } => 0x81,
            Status::WriteProtected(_) => 0x20,
        }
    }

    /// The human-readable message.
    pub fn message(&self) -> String {
        self.to_string()
    }

    /// Did the command succeed?
    pub fn is_success(&self) -> bool {
        *self == Status::Success
    }
}

impl From<FtlError> for Status {
    fn from(e: FtlError) -> Status {
        let m = e.to_string();
        match e {
            FtlError::OutOfRange { .. } => Status::LbaOutOfRange(m),
            FtlError::BadLength { .. } | FtlError::BadBatch(_) | FtlError::Config(_) => {
                Status::InvalidField(m)
            }
            FtlError::Uncorrectable { lba } => Status::UnrecoveredReadError { lba },
            FtlError::ReadOnly { .. } => Status::WriteProtected(m),
            FtlError::NoSpace => Status::CapacityExceeded(m),
            FtlError::NotFormatted => Status::NamespaceNotReady(m),
            FtlError::Corrupt(_) => Status::InternalError(m),
            FtlError::Nand(n) => match n {
                NandError::PowerLoss => Status::NamespaceNotReady(m),
                NandError::ProgramFailed { .. } | NandError::EraseFailed { .. } => {
                    Status::WriteFault(m)
                }
                NandError::Image { .. } | NandError::ImageFull { .. } => {
                    Status::DataTransferError(m)
                }
                // A data read names its LBA (`FtlError::Uncorrectable`); this is the FTL's
                // own metadata.
                NandError::Uncorrectable { .. } => {
                    Status::InternalError(format!("device metadata unreadable: {m}"))
                }
                // Broken NAND rules or a bad backend are the device's fault, not the host's.
                NandError::OutOfRange { .. }
                | NandError::BufferSize { .. }
                | NandError::ProgramNotErased { .. }
                | NandError::ProgramOutOfOrder { .. }
                | NandError::BadBlock { .. }
                | NandError::Locked { .. }
                | NandError::GeometryMismatch { .. }
                | NandError::Config(_) => Status::InternalError(m),
            },
        }
    }
}

/// Flash operations split by who caused them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FlashSplit {
    /// For host data.
    pub user: u64,
    /// By garbage collection and wear leveling.
    pub gc: u64,
    /// For the FTL's metadata (log, MAP/MAPS/WEAR/BBT pages, checkpoints).
    pub meta: u64,
}

impl FlashSplit {
    /// All three together.
    pub fn total(&self) -> u64 {
        self.user + self.gc + self.meta
    }
}

/// The SMART / health log: NVMe's health figures (critical warning, available spare,
/// percentage used, media and data-integrity errors) and the device's lifetime counters,
/// among them the batch-io paper's Table 3 columns and Table 4 figures (§8.2.3).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SmartLog {
    /// NVMe critical-warning bits: 0 spare below threshold, 2 reliability degraded,
    /// 3 read-only (`csd_ftl::WARN_*`).
    pub critical_warning: u8,
    /// Available spare, percent of the spare blocks at format.
    pub available_spare_pct: u32,
    /// Available-spare threshold, percent.
    pub spare_threshold_pct: u32,
    /// Life used: mean erase count over the rated endurance, percent (may pass 100).
    pub percentage_used: u32,
    /// Host reads that failed (uncorrectable after read retries, checksum mismatch, data
    /// lost earlier).
    pub media_errors: u64,
    /// Sectors whose data did not match the CRC or TAG kept with it.
    pub integrity_errors: u64,
    /// Sectors GC could not read and recorded as lost (reads of them fail naming the LBA).
    pub lost_sectors: u64,
    /// Read retries.
    pub read_retries: u64,
    /// Why the device accepts no writes, if it does not.
    pub read_only: Option<String>,
    /// Bytes the host read (Table 3 "user read").
    pub host_read_bytes: u64,
    /// Bytes the host wrote (Table 3 "user write").
    pub host_written_bytes: u64,
    /// Bytes GC and wear leveling read from flash, whole pages (Table 3 "GC read").
    pub gc_read_bytes: u64,
    /// Bytes GC and wear leveling programmed, whole pages (Table 3 "GC write").
    pub gc_written_bytes: u64,
    /// Bytes of garbage in the blocks GC erased (Table 3 "reclaimed space").
    pub reclaimed_bytes: u64,
    /// Flash page reads.
    pub flash_reads: FlashSplit,
    /// Flash page programs.
    pub flash_programs: FlashSplit,
    /// Block erases. Data blocks are erased only when GC or wear leveling reclaims them,
    /// so `user` is always zero.
    pub flash_erases: FlashSplit,
    /// `(user write + GC write) / user write` (batch-io §8.2.3).
    pub write_amplification: f64,
    /// `(user read + GC read) / user read` (batch-io §8.2.3).
    pub read_amplification: f64,
    /// `(GC read + GC write) / reclaimed space` (batch-io §8.2.3).
    pub gc_overhead: f64,
    /// Flash sectors programmed (data, GC, log and metadata, padding) per host sector
    /// written: the physical write amplification.
    pub physical_write_amplification: f64,
    /// Fewest erases of a usable block.
    pub erase_count_min: u32,
    /// Mean erases of a usable block.
    pub erase_count_avg: f64,
    /// Most erases of a usable block.
    pub erase_count_max: u32,
    /// Blocks retired (factory and grown bad).
    pub bad_blocks: u32,
    /// Free blocks.
    pub free_blocks: u32,
    /// MAP cache hit rate (0..=1).
    pub map_cache_hit_rate: f64,
    /// Checkpoints taken.
    pub checkpoints: u64,
    /// Modeled seconds of the last recovery (`None` if the FTL was formatted, not recovered).
    pub last_recovery_modeled_s: Option<f64>,
    /// Wall-clock seconds of the last recovery.
    pub last_recovery_wall_s: Option<f64>,
}

impl SmartLog {
    /// The SMART log of `ftl`, from its lifetime counters and accessors.
    pub fn from_ftl(ftl: &Ftl) -> SmartLog {
        let s = ftl.lifetime_stats();
        let spp = ftl.sectors_per_page();
        let lba = ftl.lba_size() as u64;
        let bytes = s.gc_bytes(ftl.page_size() as u64, lba);
        let health = ftl.health();
        let (erase_count_min, erase_count_avg, erase_count_max) = ftl.erase_counts();
        let rec = ftl.last_recovery();
        SmartLog {
            critical_warning: health.critical_warning,
            available_spare_pct: health.available_spare_pct,
            spare_threshold_pct: health.spare_threshold_pct,
            percentage_used: health.percentage_used,
            media_errors: s.media_errors,
            integrity_errors: s.integrity_errors,
            lost_sectors: s.lost_sectors,
            read_retries: s.read_retries,
            read_only: health.read_only.map(|r| r.to_string()),
            host_read_bytes: bytes.user_read,
            host_written_bytes: bytes.user_write,
            gc_read_bytes: bytes.gc_read,
            gc_written_bytes: bytes.gc_write,
            reclaimed_bytes: bytes.reclaimed,
            flash_reads: FlashSplit {
                user: s.user_reads,
                gc: s.gc_reads,
                meta: s.meta_reads,
            },
            flash_programs: FlashSplit {
                user: s.user_programs,
                gc: s.gc_programs,
                meta: s.meta_programs,
            },
            flash_erases: FlashSplit {
                user: 0,
                gc: s.erases,
                meta: s.meta_erases,
            },
            write_amplification: bytes.write_amplification(),
            read_amplification: bytes.read_amplification(),
            gc_overhead: bytes.gc_overhead(),
            physical_write_amplification: s.physical_write_amplification(spp),
            erase_count_min,
            erase_count_avg,
            erase_count_max,
            bad_blocks: ftl.bad_blocks(),
            free_blocks: ftl.free_blocks(),
            map_cache_hit_rate: s.map_hit_rate(),
            checkpoints: s.checkpoints,
            last_recovery_modeled_s: rec.map(|r| r.modeled_s),
            last_recovery_wall_s: rec.map(|r| r.wall_s),
        }
    }
}

/// What [`Command::Identify`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentifyInfo {
    /// Device name (the config's name).
    pub name: String,
    /// Capacity in LBAs.
    pub lbas: u64,
    /// Bytes per LBA.
    pub lba_size: u32,
    /// Largest transfer of Read, Write and ReadLpids, in LBAs (MDTS).
    pub mdts_blocks: u32,
    /// Most pages one FlushBatch may hold.
    pub max_batch_pages: u32,
    /// Queue pairs the device offers.
    pub max_queue_pairs: u16,
    /// Largest queue depth.
    pub max_queue_depth: u32,
    /// Bytes per flash page (the natural unit of a table page and of a streaming read).
    pub flash_page_bytes: u32,
}

/// The data a completion carries.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    /// Nothing (writes, trims, flushes, and every failed command).
    None,
    /// Data read.
    Data(Vec<u8>),
    /// The SMART log.
    Smart(SmartLog),
    /// The Identify data.
    Identify(IdentifyInfo),
    /// The id of a session [`Command::IspOpen`] opened.
    IspSession(u32),
    /// What [`Command::IspGet`] or [`Command::IspClose`] returns.
    Isp(Box<IspReply>),
    /// The telemetry log page.
    Telemetry(Telemetry),
    /// The table id SEND_TBL_COL assigned.
    FlixrTable(u8),
    /// The rule id SEND_IDX_ICR assigned.
    FlixrRule(u16),
    /// What READ_IDX read and skipped.
    IndexRead(Box<IndexRead>),
    /// What UPDATE_HOST_INDEX reports for the page.
    HostIndex(HostIndexValue),
    /// The id of an in-SSD B+tree SsdIdxCreate made.
    SsdIndex(u16),
}

/// The telemetry log page: cumulative busy time per resource class and the energy
/// counters since the device started (differences of two pages attribute a run).
#[derive(Debug, Clone, PartialEq)]
pub struct Telemetry {
    /// Per resource class: members and busy nanoseconds (summed over members); the
    /// `mean`/`max` fields are relative to a 1 ns window and meaningless here.
    pub busy: Vec<csd_sim::Utilization>,
    /// Energy counters (array ops, bytes per bus, CPU cycles).
    pub counters: csd_sim::EnergyCounters,
    /// The latest instant any device resource is busy until.
    pub now: SimTime,
}

/// Bytes of the telemetry log page sent to the host.
pub const TELEMETRY_BYTES: u64 = 512;

/// The work one command caused and when it ran, in modeled time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Accounting {
    /// When the host submitted it.
    pub submitted: SimTime,
    /// When it completed.
    pub completed: SimTime,
    /// `completed - submitted`, in nanoseconds.
    pub latency_ns: u64,
    /// Flash page reads (array tR), whatever caused them (user, GC, metadata).
    pub flash_reads: u64,
    /// Flash page programs.
    pub flash_programs: u64,
    /// Block erases.
    pub flash_erases: u64,
    /// Bytes moved over the host link.
    pub host_link_bytes: u64,
    /// Bytes staged through controller DRAM.
    pub dram_bytes: u64,
}

/// The device's answer to one command.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// The command's identifier.
    pub cid: Cid,
    /// How it ended.
    pub status: Status,
    /// What it returns.
    pub payload: Payload,
    /// What it cost.
    pub acct: Accounting,
}

struct Submission {
    cid: Cid,
    cmd: Command,
    at: SimTime,
}

struct QueuePair {
    depth: u32,
    next_cid: u16,
    sq: VecDeque<Submission>,
    cq: VecDeque<Completion>,
}

/// A device behind the NVMe-style command interface: queue pairs in front of the
/// controller and the FTL block device.
pub struct NvmeDevice {
    dev: BlockDevice,
    isp: Runtime,
    flixr: Flixr,
    ssd_btree: SsdBtree,
    /// Slot `i` holds queue pair `i + 1`.
    queues: Vec<Option<QueuePair>>,
    /// The slot the round robin serves next.
    next: usize,
}

/// A failed command: its status and completion instant.
type Failed = (Status, SimTime);

fn failed(e: CommandError) -> Failed {
    (Status::from(e.error), e.done)
}

/// A FLIXR read's range: 1..=[`MAX_INDEX_SCAN`] LBAs (what it returns is bounded by MDTS).
fn check_scan(what: &str, blocks: u32, at: SimTime) -> Result<(), Failed> {
    if blocks == 0 || blocks as u64 > crate::flixr::MAX_INDEX_SCAN {
        return Err((
            Status::InvalidField(format!(
                "{what} of {blocks} blocks: a filtered read examines 1..={} LBAs",
                crate::flixr::MAX_INDEX_SCAN
            )),
            at,
        ));
    }
    Ok(())
}

/// A FLIXR registration refused: nothing registered, completed at submission.
fn refused(e: FlixrError, at: SimTime) -> Failed {
    (Status::InvalidField(e.to_string()), at)
}

impl NvmeDevice {
    /// A device over `ftl`.
    pub fn new(ftl: Ftl) -> NvmeDevice {
        NvmeDevice::from_block(BlockDevice::new(ftl))
    }

    /// A device over an existing block device (its controller state carries on).
    pub fn from_block(dev: BlockDevice) -> NvmeDevice {
        let cfg = dev.ftl().nand().config();
        let isp = Runtime::new(cfg.isp, cfg.geometry.page_size as u64);
        let mut dev = dev;
        let mut flixr = Flixr::new(&dev, DEFAULT_INDEX_CACHE_BYTES);
        // FLIXR §4.6: entries whose redo bit is still 0 after a crash are rebuilt now.
        flixr.recover(&mut dev);
        NvmeDevice {
            dev,
            isp,
            flixr,
            ssd_btree: SsdBtree::default(),
            queues: Vec::new(),
            next: 0,
        }
    }

    /// The block device, for device-side inspection (host code uses commands).
    pub fn block(&self) -> &BlockDevice {
        &self.dev
    }

    /// The block device, mutably (fault injection, power cuts).
    pub fn block_mut(&mut self) -> &mut BlockDevice {
        &mut self.dev
    }

    /// The FLIXR firmware state (registries, index cache, counters).
    pub fn flixr(&self) -> &Flixr {
        &self.flixr
    }

    /// The in-SSD B+tree firmware state (indexes, node cache, counters).
    pub fn ssd_btree(&self) -> &SsdBtree {
        &self.ssd_btree
    }

    /// Resize the in-SSD B+tree node cache in controller DRAM (it starts empty again).
    pub fn set_node_cache_bytes(&mut self, bytes: u64) {
        self.ssd_btree.set_cache_bytes(bytes);
    }

    /// Resize the FLIXR index cache in controller DRAM (it starts empty again).
    pub fn set_index_cache_bytes(&mut self, bytes: u64) {
        self.flixr.set_cache_bytes(&self.dev, bytes);
    }

    /// Give the block device back; pending commands and completions are dropped.
    pub fn into_block(self) -> BlockDevice {
        self.dev
    }

    /// Create a queue pair of `depth` (1..=[`MAX_QUEUE_DEPTH`]) outstanding commands.
    pub fn create_queue_pair(&mut self, depth: u32) -> Result<QueueId, Status> {
        if depth == 0 || depth > MAX_QUEUE_DEPTH {
            return Err(Status::InvalidQueueSize(format!(
                "depth {depth} is outside 1..={MAX_QUEUE_DEPTH}"
            )));
        }
        let slot = match self.queues.iter().position(Option::is_none) {
            Some(i) => i,
            None if self.queues.len() < MAX_QUEUE_PAIRS as usize => {
                self.queues.push(None);
                self.queues.len() - 1
            }
            None => {
                return Err(Status::InvalidQueueId(format!(
                    "all {MAX_QUEUE_PAIRS} queue pairs are in use: delete one first"
                )));
            }
        };
        self.queues[slot] = Some(QueuePair {
            depth,
            next_cid: 0,
            sq: VecDeque::new(),
            cq: VecDeque::new(),
        });
        Ok(QueueId(slot as u16 + 1))
    }

    /// Delete a queue pair. Its pending commands are aborted unexecuted (their number is
    /// returned) and completions not yet polled are dropped.
    pub fn delete_queue_pair(&mut self, qid: QueueId) -> Result<usize, Status> {
        let slot = Self::slot(qid);
        match slot
            .and_then(|s| self.queues.get_mut(s))
            .and_then(Option::take)
        {
            Some(q) => Ok(q.sq.len()),
            None => Err(Self::no_queue(qid)),
        }
    }

    /// Submit `cmd` on queue pair `qid` at host time `at`; returns its command id. Fails
    /// if the pair does not exist or is full.
    pub fn submit(&mut self, qid: QueueId, cmd: Command, at: SimTime) -> Result<Cid, Status> {
        let q = self.queue(qid)?;
        if q.sq.len() + q.cq.len() >= q.depth as usize {
            return Err(Status::QueueFull {
                qid: qid.0,
                depth: q.depth,
            });
        }
        let cid = Cid(q.next_cid);
        q.next_cid = q.next_cid.wrapping_add(1);
        q.sq.push_back(Submission { cid, cmd, at });
        Ok(cid)
    }

    /// Execute every pending command, one at a time, round robin across queue pairs;
    /// returns how many ran. Their completions wait in the pairs' completion queues.
    pub fn process(&mut self) -> usize {
        let mut ran = 0;
        let n = self.queues.len();
        loop {
            let start = self.next;
            let Some(slot) = (0..n)
                .map(|k| (start + k) % n)
                .find(|&i| self.queues[i].as_ref().is_some_and(|q| !q.sq.is_empty()))
            else {
                return ran;
            };
            self.next = (slot + 1) % n;
            let Some(sub) = self.queues[slot].as_mut().and_then(|q| q.sq.pop_front()) else {
                return ran;
            };
            let c = self.execute(sub);
            if let Some(q) = self.queues[slot].as_mut() {
                q.cq.push_back(c);
            }
            ran += 1;
        }
    }

    /// Take the oldest completion of queue pair `qid` (`None` if there is none, or no
    /// such pair).
    pub fn poll(&mut self, qid: QueueId) -> Option<Completion> {
        self.queue(qid).ok()?.cq.pop_front()
    }

    fn slot(qid: QueueId) -> Option<usize> {
        (qid.0 as usize).checked_sub(1)
    }

    fn no_queue(qid: QueueId) -> Status {
        Status::InvalidQueueId(format!(
            "queue pair {} does not exist (never created, or deleted)",
            qid.0
        ))
    }

    fn queue(&mut self, qid: QueueId) -> Result<&mut QueuePair, Status> {
        Self::slot(qid)
            .and_then(|s| self.queues.get_mut(s))
            .and_then(Option::as_mut)
            .ok_or_else(|| Self::no_queue(qid))
    }

    /// Run one command and account for it.
    fn execute(&mut self, sub: Submission) -> Completion {
        // In-storage sessions run in the background up to this command's arrival; their
        // work is not charged to the command.
        if self.isp.open_sessions() > 0 {
            self.isp.advance(&mut self.dev, sub.at);
        }
        let nand0 = *self.dev.ftl().nand().stats();
        let ctrl0 = self.dev.controller().counters();
        let (status, payload, done) = match self.run(sub.cmd, sub.at) {
            Ok((payload, done)) => (Status::Success, payload, done),
            Err((status, done)) => (status, Payload::None, done),
        };
        let nand1 = self.dev.ftl().nand().stats();
        let ctrl1 = self.dev.controller().counters();
        let done = done.max(sub.at);
        Completion {
            cid: sub.cid,
            status,
            payload,
            acct: Accounting {
                submitted: sub.at,
                completed: done,
                latency_ns: done.since(sub.at),
                flash_reads: nand1.page_reads.saturating_sub(nand0.page_reads),
                flash_programs: nand1.programs.saturating_sub(nand0.programs),
                flash_erases: nand1.erases.saturating_sub(nand0.erases),
                host_link_bytes: ctrl1.host_link_bytes.saturating_sub(ctrl0.host_link_bytes),
                dram_bytes: ctrl1.dram_bytes.saturating_sub(ctrl0.dram_bytes),
            },
        }
    }

    /// Largest transfer in LBAs.
    fn mdts(&self) -> u32 {
        self.dev.ftl().config().mdts_sectors
    }

    /// Refuse a transfer of `blocks` LBAs that is empty or over MDTS.
    fn check_transfer(&self, what: &str, blocks: u64, at: SimTime) -> Result<(), Failed> {
        let mdts = self.mdts();
        if blocks == 0 || blocks > mdts as u64 {
            return Err((
                Status::InvalidField(format!(
                    "{what} of {blocks} blocks: a transfer is 1..={mdts} blocks (MDTS)"
                )),
                at,
            ));
        }
        Ok(())
    }

    /// The command's work: the one place a new command variant is wired in.
    fn run(&mut self, cmd: Command, at: SimTime) -> Result<(Payload, SimTime), Failed> {
        let ls = self.dev.ftl().lba_size();
        match cmd {
            Command::Read { lba, blocks } => {
                self.check_transfer("Read", blocks as u64, at)?;
                let mut buf = vec![0u8; blocks as usize * ls];
                let t = self.dev.read_lbas(lba, &mut buf, at).map_err(failed)?;
                Ok((Payload::Data(buf), t))
            }
            Command::Write { lba, data } => {
                // Zero or partial LBAs are the FTL's to refuse (Invalid Field).
                let mdts = self.mdts();
                if data.len() > mdts as usize * ls {
                    return Err((
                        Status::InvalidField(format!(
                            "Write of {} bytes: a transfer is at most {mdts} blocks of {ls} bytes (MDTS)",
                            data.len()
                        )),
                        at,
                    ));
                }
                let t = if self.flixr_writes(lba, data.len()) {
                    let pages: Vec<(u64, &[u8])> = data
                        .chunks(ls)
                        .enumerate()
                        .map(|(i, p)| (lba + i as u64, p))
                        .collect();
                    self.flixr
                        .plain_write(&mut self.dev, &pages, data.len() as u64, at, |d, t| {
                            d.ftl_mut()
                                .write(lba, &data, t)
                                .map_err(|error| CommandError { error, done: t })
                        })
                        .map_err(failed)?
                } else {
                    self.dev.write_lbas(lba, &data, at).map_err(failed)?
                };
                Ok((Payload::None, t))
            }
            Command::Trim { lba, blocks } => {
                if blocks == 0 {
                    return Err((Status::InvalidField("Trim of 0 blocks".into()), at));
                }
                let t = self.dev.trim_lbas(lba, blocks, at).map_err(failed)?;
                self.flixr.trimmed(&self.dev, lba, blocks);
                Ok((Payload::None, t))
            }
            Command::Flush => {
                let t = self.dev.flush(at).map_err(failed)?;
                Ok((Payload::None, t))
            }
            Command::FlushBatch { buffer } => {
                let desc = (self.flixr.active() && buffer.len() >= ls)
                    .then(|| BatchDesc::decode(&buffer[..ls]).ok())
                    .flatten()
                    .filter(|d| {
                        let pages = buffer.len() / ls;
                        d.entries.iter().all(|&(l, off)| {
                            off >= 1 && (off as usize) < pages && l < self.dev.ftl().lbas()
                        })
                    });
                let t = match desc {
                    Some(d) if self.dev.ftl().config().ext_bytes > 0 => {
                        let pages: Vec<(u64, &[u8])> = d
                            .entries
                            .iter()
                            .map(|&(l, off)| {
                                (l, &buffer[off as usize * ls..(off as usize + 1) * ls])
                            })
                            .collect();
                        self.flixr
                            .plain_write(&mut self.dev, &pages, buffer.len() as u64, at, |d, t| {
                                d.ftl_mut()
                                    .flush_batch(&buffer, t)
                                    .map_err(|error| CommandError { error, done: t })
                            })
                            .map_err(failed)?
                    }
                    _ => self.dev.flush_batch(&buffer, at).map_err(failed)?,
                };
                Ok((Payload::None, t))
            }
            Command::ReadLpids { lpids } => {
                self.check_transfer("ReadLpids", lpids.len() as u64, at)?;
                let mut out = vec![0u8; lpids.len() * ls];
                let t = self.dev.read_lpids(&lpids, &mut out, at).map_err(failed)?;
                Ok((Payload::Data(out), t))
            }
            Command::IspOpen(args) => {
                let mut t = self.dev.receive(at, IspOpen::WIRE_BYTES);
                // A session under a FLIXR rule: compare the entries first (flixr §4.4),
                // then stream only the pages kept.
                let selected = match args.index {
                    Some(rule) => {
                        let x = &args.table;
                        let (kept, misses, tt) = self
                            .flixr
                            .select_pages(
                                &mut self.dev,
                                rule,
                                (x.first_lba, x.pages, x.lbas_per_page as u64),
                                t,
                            )
                            .map_err(failed)?;
                        t = tt;
                        Some((kept, misses))
                    }
                    None => None,
                };
                let id = self
                    .isp
                    .open(&self.dev, *args, selected, t)
                    .map_err(|r| (r.into(), at))?;
                Ok((Payload::IspSession(id), self.dev.respond(t, 16)))
            }
            Command::IspGet { session } => {
                let t = self.dev.receive(at, 0);
                let reply = self.isp.get(session, t).map_err(|r| (r.into(), at))?;
                let done = self
                    .dev
                    .respond_with(t, IspReply::HEADER_BYTES, reply.chunk_link_bytes);
                Ok((Payload::Isp(Box::new(reply)), done))
            }
            Command::IspClose { session } => {
                let t = self.dev.receive(at, 0);
                let reply = self.isp.close(session, t).map_err(|r| (r.into(), at))?;
                Ok((
                    Payload::Isp(Box::new(reply)),
                    self.dev.respond(t, IspReply::HEADER_BYTES),
                ))
            }
            Command::GetLogPage(LogPage::Telemetry) => {
                let log = self.dev.telemetry();
                Ok((
                    Payload::Telemetry(log),
                    self.dev.respond(at, TELEMETRY_BYTES),
                ))
            }
            Command::GetLogPage(LogPage::Smart) => {
                let log = SmartLog::from_ftl(self.dev.ftl());
                Ok((Payload::Smart(log), self.dev.respond(at, SMART_LOG_BYTES)))
            }
            Command::Identify => {
                let info = self.identify();
                Ok((
                    Payload::Identify(info),
                    self.dev.respond(at, IDENTIFY_BYTES),
                ))
            }
            Command::SendTblCol(format) => {
                let bytes = 64
                    + format
                        .columns
                        .iter()
                        .map(|c| c.0.len() as u64 + 4)
                        .sum::<u64>();
                let id = self
                    .flixr
                    .register_table(&mut self.dev, format)
                    .map_err(|e| refused(e, at))?;
                let t = self.dev.receive(at, bytes);
                Ok((Payload::FlixrTable(id), self.dev.respond(t, 16)))
            }
            Command::SendIdxEnc { table, spec } => {
                let bytes = 64
                    + match &spec.encoding {
                        crate::flixr::IndexEncoding::Range => 0,
                        crate::flixr::IndexEncoding::Bitmap { bounds } => 8 * bounds.len() as u64,
                    };
                self.flixr
                    .register_encoding(&mut self.dev, table, spec)
                    .map_err(|e| refused(e, at))?;
                let t = self.dev.receive(at, bytes);
                Ok((Payload::None, self.dev.respond(t, 16)))
            }
            Command::SendIdxIcr { table, rule } => {
                let bytes = 32
                    + match &rule {
                        IndexRule::Between { .. } => 16,
                        IndexRule::In(v) => 8 * v.len() as u64,
                    };
                let id = self
                    .flixr
                    .register_rule(table, rule)
                    .map_err(|e| refused(e, at))?;
                let t = self.dev.receive(at, bytes);
                Ok((Payload::FlixrRule(id), self.dev.respond(t, 16)))
            }
            Command::WriteIdx { table, lba, data } => {
                self.flixr
                    .check_writable(&self.dev, table)
                    .map_err(|e| refused(e, at))?;
                let mdts = self.mdts() as usize;
                if data.is_empty() || !data.len().is_multiple_of(ls) || data.len() > mdts * ls {
                    return Err((
                        Status::InvalidField(format!(
                            "WriteIdx of {} bytes: a transfer is 1..={mdts} whole {ls}-byte LBAs (one table page each)",
                            data.len()
                        )),
                        at,
                    ));
                }
                let n = (data.len() / ls) as u64;
                let k = self.flixr.page_lbas(table).unwrap_or(1).max(1) as u64;
                if k > 1 && (!lba.is_multiple_of(k) || !n.is_multiple_of(k)) {
                    return Err((
                        Status::InvalidField(format!(
                            "WriteIdx of {n} LBAs at {lba}: table {table}'s pages are {k} LBAs, so a transfer is whole pages at a multiple of {k}"
                        )),
                        at,
                    ));
                }
                let cap = self.dev.ftl().lbas();
                if lba.checked_add(n).is_none_or(|e| e > cap) {
                    return Err((
                        Status::LbaOutOfRange(format!(
                            "WriteIdx of LBAs {lba}..{} on a device of {cap} LBAs",
                            lba.saturating_add(n)
                        )),
                        at,
                    ));
                }
                let t = self
                    .flixr
                    .write_idx(&mut self.dev, table, lba, &data, at)
                    .map_err(failed)?;
                Ok((Payload::None, t))
            }
            Command::ReadIdx {
                table,
                rule,
                lba,
                blocks,
            } => {
                check_scan("ReadIdx", blocks, at)?;
                let (reply, t) = self
                    .flixr
                    .read_idx(&mut self.dev, table, rule, lba, blocks, at)
                    .map_err(failed)?;
                Ok((Payload::IndexRead(Box::new(reply)), t))
            }
            Command::SendTidxEnc { table, spec } => {
                let bytes = 32 + 8 * spec.bounds.len() as u64;
                let id = self
                    .flixr
                    .register_table_index(&self.dev, table, spec)
                    .map_err(|e| refused(e, at))?;
                let t = self.dev.receive(at, bytes);
                Ok((Payload::FlixrRule(id), self.dev.respond(t, 16)))
            }
            Command::SendTidxIcr { table, tia } => {
                let id = self
                    .flixr
                    .register_join_rule(table, tia)
                    .map_err(|e| refused(e, at))?;
                let t = self.dev.receive(at, 32);
                Ok((Payload::FlixrRule(id), self.dev.respond(t, 16)))
            }
            Command::ReadIdxJoin1 {
                table,
                rule,
                tia,
                reset,
                lba,
                blocks,
            } => {
                check_scan("ReadIdxJoin1", blocks, at)?;
                let (reply, t) = self
                    .flixr
                    .read_idx_join1(&mut self.dev, table, rule, tia, reset, lba, blocks, at)
                    .map_err(failed)?;
                Ok((Payload::IndexRead(Box::new(reply)), t))
            }
            Command::ReadIdxJoin2 {
                table,
                rule,
                lba,
                blocks,
            } => {
                check_scan("ReadIdxJoin2", blocks, at)?;
                let (reply, t) = self
                    .flixr
                    .read_idx_join2(&mut self.dev, table, rule, lba, blocks, at)
                    .map_err(failed)?;
                Ok((Payload::IndexRead(Box::new(reply)), t))
            }
            Command::UpdateHostIndex { table, lba } => {
                let (v, t) = self
                    .flixr
                    .host_index(&mut self.dev, table, lba, at)
                    .map_err(failed)?;
                Ok((Payload::HostIndex(v), t))
            }
            Command::DropIdxIcr { table, rule } => {
                self.flixr
                    .drop_rule(table, rule)
                    .map_err(|e| refused(e, at))?;
                let t = self.dev.receive(at, 16);
                Ok((Payload::None, self.dev.respond(t, 16)))
            }
            Command::SendIdxIcrKeys { table, terms } => {
                let bytes = 32
                    + terms
                        .iter()
                        .map(|t| {
                            4 + t.column.len() as u64
                                + match &t.rule {
                                    IndexRule::Between { .. } => 16,
                                    IndexRule::In(v) => 8 * v.len() as u64,
                                }
                        })
                        .sum::<u64>();
                let id = self
                    .flixr
                    .register_rule_terms(table, terms)
                    .map_err(|e| refused(e, at))?;
                let t = self.dev.receive(at, bytes);
                Ok((Payload::FlixrRule(id), self.dev.respond(t, 16)))
            }
            Command::DropIdxEnc { table, column } => {
                let bytes = 16 + column.len() as u64;
                self.flixr
                    .drop_encoding(&mut self.dev, table, &column)
                    .map_err(|e| refused(e, at))?;
                let t = self.dev.receive(at, bytes);
                Ok((Payload::None, self.dev.respond(t, 16)))
            }
            Command::DropTidxEnc { tia } => {
                self.flixr
                    .drop_table_index(tia)
                    .map_err(|e| refused(e, at))?;
                let t = self.dev.receive(at, 16);
                Ok((Payload::None, self.dev.respond(t, 16)))
            }
            Command::DropTidxIcr { table, rule } => {
                self.flixr
                    .drop_join_rule(table, rule)
                    .map_err(|e| refused(e, at))?;
                let t = self.dev.receive(at, 16);
                Ok((Payload::None, self.dev.respond(t, 16)))
            }
            Command::DropTblCol { table } => {
                self.flixr
                    .drop_table(&mut self.dev, table)
                    .map_err(|e| refused(e, at))?;
                let t = self.dev.receive(at, 16);
                Ok((Payload::None, self.dev.respond(t, 16)))
            }
            Command::SsdIdxCreate { first, lbas, pairs } => {
                let (id, t) = self
                    .ssd_btree
                    .create(&mut self.dev, first, lbas, pairs, at)
                    .map_err(failed)?;
                Ok((Payload::SsdIndex(id), t))
            }
            Command::SsdIdxUpdate {
                index,
                insert,
                remove,
            } => {
                let t = self
                    .ssd_btree
                    .update(&mut self.dev, index, &insert, &remove, at)
                    .map_err(failed)?;
                Ok((Payload::None, t))
            }
            Command::SsdIdxRead {
                index,
                lo,
                hi,
                from,
            } => {
                if lo > hi {
                    return Err((
                        Status::InvalidField(format!("SsdIdxRead of an empty range {lo}..={hi}")),
                        at,
                    ));
                }
                let (reply, t) = self
                    .ssd_btree
                    .read(&mut self.dev, index, lo, hi, from, at)
                    .map_err(failed)?;
                Ok((Payload::IndexRead(Box::new(reply)), t))
            }
        }
    }

    /// Must a plain write of `bytes` at `lba` look after FLIXR entries? Only on a device
    /// with extension bytes and registered tables, and only for a write the FTL will take
    /// (anything else it refuses unchanged).
    fn flixr_writes(&self, lba: u64, bytes: usize) -> bool {
        let ftl = self.dev.ftl();
        let ls = ftl.lba_size();
        self.flixr.active()
            && ftl.config().ext_bytes > 0
            && bytes > 0
            && bytes.is_multiple_of(ls)
            && lba
                .checked_add((bytes / ls) as u64)
                .is_some_and(|e| e <= ftl.lbas())
    }

    fn identify(&self) -> IdentifyInfo {
        let ftl = self.dev.ftl();
        let ls = ftl.lba_size();
        let batch = (ftl.config().max_batch_pages as usize).min(BatchDesc::capacity(ls));
        IdentifyInfo {
            name: ftl.nand().config().name.clone(),
            lbas: ftl.lbas(),
            lba_size: ls as u32,
            mdts_blocks: ftl.config().mdts_sectors,
            flash_page_bytes: ftl.nand().geometry().page_size,
            max_batch_pages: batch as u32,
            max_queue_pairs: MAX_QUEUE_PAIRS,
            max_queue_depth: MAX_QUEUE_DEPTH,
        }
    }
}

impl From<IspRefusal> for Status {
    fn from(r: IspRefusal) -> Status {
        match r {
            IspRefusal::Resources(m) => Status::SessionResources(m),
            IspRefusal::NoSession(m) => Status::InvalidSession(m),
            IspRefusal::Invalid(m) => Status::InvalidField(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use csd_ftl::FtlConfig;
    use csd_nand::Nand;
    use csd_sim::DeviceConfig;
    use csd_sim::wire::build_batch;

    const LBA: usize = 4096;
    const T0: SimTime = SimTime::ZERO;

    fn dev() -> NvmeDevice {
        let cfg = DeviceConfig::preset("tiny").unwrap();
        let nand = Nand::new_in_memory(cfg).unwrap();
        NvmeDevice::new(Ftl::format(nand, FtlConfig::default()).unwrap())
    }

    fn wr(lba: u64, data: Vec<u8>) -> Command {
        Command::Write { lba, data }
    }

    fn rd(lba: u64, blocks: u32) -> Command {
        Command::Read { lba, blocks }
    }

    fn fill(v: u8, blocks: usize) -> Vec<u8> {
        vec![v; blocks * LBA]
    }

    /// Submit, run and reap one command.
    fn run1(d: &mut NvmeDevice, q: QueueId, cmd: Command, at: SimTime) -> Completion {
        let cid = d.submit(q, cmd, at).unwrap();
        assert_eq!(d.process(), 1);
        let c = d.poll(q).unwrap();
        assert_eq!(c.cid, cid);
        c
    }

    fn data(c: Completion) -> Vec<u8> {
        assert_eq!(c.status, Status::Success, "{}", c.status);
        match c.payload {
            Payload::Data(d) => d,
            p => panic!("expected data, got {p:?}"),
        }
    }

    fn read(d: &mut NvmeDevice, q: QueueId, lba: u64, blocks: u32) -> Vec<u8> {
        data(run1(d, q, rd(lba, blocks), T0))
    }

    #[test]
    fn every_command_works() {
        let mut d = dev();
        let q = d.create_queue_pair(8).unwrap();

        let c = run1(&mut d, q, Command::Identify, T0);
        assert_eq!(c.acct.host_link_bytes, IDENTIFY_BYTES);
        let Payload::Identify(id) = c.payload else {
            panic!("{c:?}")
        };
        assert_eq!((id.lbas, id.lba_size), (d.block().ftl().lbas(), LBA as u32));
        assert_eq!((id.mdts_blocks, id.max_batch_pages), (128, 340));
        assert_eq!((id.name.as_str(), id.max_queue_pairs), ("tiny", 64));

        let mut w = fill(1, 3);
        w[LBA..2 * LBA].fill(2);
        let c = run1(&mut d, q, wr(10, w.clone()), T0);
        assert_eq!((c.status, c.payload), (Status::Success, Payload::None));
        assert_eq!(read(&mut d, q, 10, 3), w);

        let c = run1(&mut d, q, Command::Trim { lba: 11, blocks: 1 }, T0);
        assert!(c.status.is_success());
        let r = read(&mut d, q, 10, 3);
        assert_eq!(&r[..LBA], &w[..LBA]);
        assert!(r[LBA..2 * LBA].iter().all(|&b| b == 0));

        assert!(run1(&mut d, q, Command::Flush, T0).status.is_success());

        // A batch; within it the later entry for LPID 20 wins.
        let (a, b) = (fill(0xA, 1), fill(0xB, 1));
        let buffer = build_batch(&[(20, &a), (21, &b), (20, &b)], LBA).unwrap();
        let c = run1(&mut d, q, Command::FlushBatch { buffer }, T0);
        assert!(c.status.is_success(), "{}", c.status);
        let lpids = vec![21, 20, 10];
        let c = run1(&mut d, q, Command::ReadLpids { lpids }, T0);
        assert_eq!(data(c), [b.clone(), b, w[..LBA].to_vec()].concat());

        let c = run1(&mut d, q, Command::GetLogPage(LogPage::Smart), T0);
        assert_eq!(c.acct.host_link_bytes, SMART_LOG_BYTES);
        let Payload::Smart(s) = c.payload else {
            panic!("{c:?}")
        };
        assert_eq!(s.host_written_bytes, 6 * LBA as u64);
        assert!(d.poll(q).is_none());
    }

    /// Everything a refused command could disturb.
    fn state(d: &NvmeDevice) -> impl PartialEq + std::fmt::Debug + use<> {
        let b = d.block();
        let f = b.ftl();
        (*f.stats(), *f.nand().stats(), b.controller().counters())
    }

    #[test]
    fn bad_input_gets_a_clear_status_and_changes_nothing() {
        let mut d = dev();
        let q = d.create_queue_pair(4).unwrap();
        let old = fill(7, 4);
        run1(&mut d, q, wr(0, old.clone()), T0);
        let lbas = d.block().ftl().lbas();
        let page = fill(9, 1);
        let good = build_batch(&[(0, &page), (1, &page)], LBA).unwrap();
        let mut corrupt = good.clone();
        corrupt[20] ^= 1; // inside the DESC block: its CRC no longer matches
        let mut bad_magic = good.clone();
        bad_magic[0] ^= 1;
        let batch = |buffer: Vec<u8>| Command::FlushBatch { buffer };
        let lpids = |lpids: Vec<u64>| Command::ReadLpids { lpids };
        let trim = |lba, blocks| Command::Trim { lba, blocks };
        let (range, field) = (0x80, 0x02);
        let cases = [
            (rd(lbas - 1, 2), range, "outside"),
            (rd(u64::MAX, 1), range, "outside"),
            (rd(0, 0), field, "MDTS"),
            (rd(0, 129), field, "MDTS"),
            (wr(lbas, fill(1, 1)), range, "outside"),
            (wr(0, vec![]), field, "multiple"),
            (wr(0, vec![1; 100]), field, "multiple"),
            (wr(0, vec![1; LBA + 1]), field, "multiple"),
            (wr(0, fill(1, 129)), field, "MDTS"),
            (trim(lbas - 1, 2), range, "outside"),
            (trim(0, 0), field, "0 blocks"),
            (batch(corrupt), field, "checksum"),
            (batch(bad_magic), field, "magic"),
            (
                batch(build_batch(&[(0, &page), (lbas, &page)], LBA).unwrap()),
                field,
                "outside",
            ),
            (batch(good[..LBA].to_vec()), field, "DESC"),
            (batch(good[..LBA + 7].to_vec()), field, "DESC"),
            (lpids(vec![]), field, "MDTS"),
            (lpids(vec![0; 129]), field, "MDTS"),
            (lpids(vec![0, lbas]), range, "outside"),
        ];
        let before = state(&d);
        let t = SimTime(1_000);
        for (cmd, code, words) in cases {
            let name = cmd.name();
            let c = run1(&mut d, q, cmd, t);
            let s = &c.status;
            assert_eq!((s.sct(), s.code()), (0, code), "{name}: {s}");
            assert!(s.message().contains(words), "{name}: {s}");
            assert_eq!(c.payload, Payload::None);
            let nothing = Accounting {
                submitted: t,
                completed: t,
                ..Default::default()
            };
            assert_eq!(c.acct, nothing, "{name}: a refused command costs nothing");
            assert_eq!(state(&d), before, "{name} changed the device");
        }
        assert_eq!(read(&mut d, q, 0, 4), old);
        d.block_mut().ftl_mut().check_invariants().unwrap();
    }

    #[test]
    fn device_errors_map_to_statuses() {
        let m = |e: FtlError| {
            let s = Status::from(e);
            (s.sct(), s.code())
        };
        let (lba, end, capacity) = (5, 9, 6);
        assert_eq!(m(FtlError::OutOfRange { lba, end, capacity }), (0, 0x80));
        let (got, lba_size) = (3, 4096);
        assert_eq!(m(FtlError::BadLength { got, lba_size }), (0, 0x02));
        assert_eq!(m(FtlError::BadBatch("x".into())), (0, 0x02));
        assert_eq!(m(FtlError::Config("x".into())), (0, 0x02));
        assert_eq!(m(FtlError::NoSpace), (0, 0x81));
        assert_eq!(m(FtlError::NotFormatted), (0, 0x82));
        assert_eq!(m(FtlError::Corrupt("x".into())), (0, 0x06));
        assert_eq!(m(FtlError::Nand(NandError::PowerLoss)), (0, 0x82));
        let ppa = csd_nand::Ppa::new(csd_nand::BlockId(3), 1);
        let failed = NandError::ProgramFailed { ppa, done: T0 };
        assert_eq!(m(FtlError::Nand(failed)), (2, 0x80));
        let unc = Status::from(FtlError::Uncorrectable { lba: 42 });
        assert_eq!(unc, Status::UnrecoveredReadError { lba: 42 });
        assert_eq!((unc.sct(), unc.code()), (2, 0x81));
        assert!(unc.message().contains("LBA 42"));

        // A power cut reaches the host as Namespace Not Ready, not as a panic.
        let mut d = dev();
        let q = d.create_queue_pair(4).unwrap();
        run1(&mut d, q, wr(3, fill(3, 1)), T0);
        d.block_mut().ftl_mut().nand_mut().power_off();
        let c = run1(&mut d, q, rd(3, 1), T0);
        assert_eq!((c.status.sct(), c.status.code()), (0, 0x82), "{}", c.status);
        assert_eq!(c.payload, Payload::None);
    }

    #[test]
    fn queue_errors() {
        let mut d = dev();
        for depth in [0, MAX_QUEUE_DEPTH + 1] {
            let e = d.create_queue_pair(depth).unwrap_err();
            assert_eq!((e.sct(), e.code()), (1, 0x02), "{e}");
        }
        for qid in [QueueId(7), QueueId(0)] {
            let e = d.submit(qid, Command::Flush, T0).unwrap_err();
            assert_eq!((e.sct(), e.code()), (1, 0x01), "{e}");
            assert!(e.message().contains("does not exist"));
            assert!(d.poll(qid).is_none());
            assert!(d.delete_queue_pair(qid).is_err());
        }

        // A full pair refuses more until a completion is reaped.
        let q = d.create_queue_pair(2).unwrap();
        assert_eq!(q, QueueId(1));
        assert_eq!(d.submit(q, wr(5, fill(1, 1)), T0), Ok(Cid(0)));
        assert_eq!(d.submit(q, wr(5, fill(2, 1)), T0), Ok(Cid(1)));
        let e = d.submit(q, wr(5, fill(3, 1)), T0).unwrap_err();
        assert_eq!(e, Status::QueueFull { qid: 1, depth: 2 });
        assert_eq!((e.sct(), e.code()), (0, 0x21));
        assert_eq!(d.process(), 2);
        let e = d.submit(q, wr(5, fill(3, 1)), T0).unwrap_err();
        assert!(
            matches!(e, Status::QueueFull { .. }),
            "unreaped completions count"
        );
        assert_eq!(d.poll(q).unwrap().cid, Cid(0));
        assert_eq!(d.submit(q, wr(5, fill(3, 1)), T0), Ok(Cid(2)));

        // Deleting a pair aborts its pending commands: the third write never happens.
        assert_eq!(d.delete_queue_pair(q), Ok(1));
        let e = d.submit(q, Command::Flush, T0).unwrap_err();
        assert_eq!((e.sct(), e.code()), (1, 0x01));
        assert!(d.poll(q).is_none());
        assert_eq!(d.delete_queue_pair(q).unwrap_err().code(), 0x01);
        let q = d.create_queue_pair(1).unwrap();
        assert_eq!(q, QueueId(1), "freed ids are reused");
        assert_eq!(read(&mut d, q, 5, 1), fill(2, 1));

        // The pair limit.
        for i in 2..=MAX_QUEUE_PAIRS {
            assert_eq!(d.create_queue_pair(1), Ok(QueueId(i)));
        }
        let e = d.create_queue_pair(1).unwrap_err();
        assert_eq!((e.sct(), e.code()), (1, 0x01), "{e}");
        d.delete_queue_pair(QueueId(30)).unwrap();
        assert_eq!(d.create_queue_pair(1), Ok(QueueId(30)));
    }

    #[test]
    fn accounting_of_a_write_and_a_read() {
        let mut d = dev();
        let q = d.create_queue_pair(4).unwrap();
        let bytes = 2 * LBA as u64;
        let at = SimTime(5_000);
        let a = run1(&mut d, q, wr(8, fill(4, 2)), at).acct;
        assert_eq!(a.submitted, at);
        assert!(a.completed > at);
        assert_eq!(a.latency_ns, a.completed.since(at));
        assert!(a.flash_programs >= 1, "{a:?}");
        assert_eq!((a.host_link_bytes, a.dram_bytes), (bytes, bytes));

        let c = run1(&mut d, q, rd(8, 2), a.completed);
        let a = c.acct;
        assert!(a.flash_reads >= 1, "{a:?}");
        assert_eq!((a.flash_programs, a.flash_erases), (0, 0));
        assert_eq!((a.host_link_bytes, a.dram_bytes), (bytes, bytes));
        // On an idle device the latency is the read path (plus any MAP page read).
        let cfg = d.block().ftl().nand().config().clone();
        let path = cfg.flash.t_read_ns(0)
            + cfg.channel.rate().transfer_ns(bytes)
            + cfg.dram.rate().transfer_ns(bytes)
            + cfg.host_link.rate().transfer_ns(bytes)
            + cfg.host_link.command_overhead_ns();
        assert!(
            a.latency_ns >= path && a.latency_ns < 2 * path,
            "{a:?} vs {path}"
        );
        assert_eq!(data(c), fill(4, 2));
    }

    #[test]
    fn round_robin_across_queue_pairs() {
        let mut d = dev();
        let qw = d.create_queue_pair(8).unwrap();
        let qr = d.create_queue_pair(8).unwrap();
        for v in 1..=3u8 {
            d.submit(qw, wr(9, fill(v, 1)), T0).unwrap();
        }
        for _ in 0..3 {
            d.submit(qr, rd(9, 1), T0).unwrap();
        }
        assert_eq!(d.process(), 6);
        // W1 R W2 R W3 R: each read sees the write just before it.
        for (i, v) in (1..=3u8).enumerate() {
            let w = d.poll(qw).unwrap();
            assert_eq!((w.cid, w.status), (Cid(i as u16), Status::Success));
            let r = d.poll(qr).unwrap();
            assert_eq!(r.cid, Cid(i as u16));
            assert_eq!(data(r), fill(v, 1));
        }
        assert!(d.poll(qw).is_none() && d.poll(qr).is_none());
    }

    /// batch-io §3.1: a read acknowledged before a batch was issued sees none of it (a);
    /// a read issued after the batch was acknowledged sees all of it (b); reads
    /// concurrent with batches, on another queue pair, see a time-ordered prefix of each,
    /// here none or all (c); a later read sees at least what an earlier one saw (d).
    #[test]
    fn a_read_sees_all_or_none_of_a_batch() {
        let mut d = dev();
        let qr = d.create_queue_pair(64).unwrap();
        let qb = d.create_queue_pair(64).unwrap();
        let lpids: Vec<u64> = (100..108).collect();
        let n = lpids.len();
        run1(&mut d, qb, wr(100, fill(0xAA, n)), T0);
        let batch = |v: u8| {
            let page = fill(v, 1);
            let pages: Vec<(u64, &[u8])> = lpids.iter().map(|&l| (l, &page[..])).collect();
            let buffer = build_batch(&pages, LBA).unwrap();
            Command::FlushBatch { buffer }
        };
        // How many of the two batches a read's data shows.
        let seen = |buf: &[u8]| -> usize {
            let firsts: Vec<u8> = buf.chunks(LBA).map(|p| p[0]).collect();
            assert!(
                buf.iter().all(|&b| b == buf[0]),
                "part of a batch: {firsts:?}"
            );
            match buf[0] {
                0xAA => 0,
                0xBB => 1,
                0xCC => 2,
                v => panic!("unexpected data {v:#x}"),
            }
        };
        // (a). Done on `qb`, so that the round robin serves `qr` first below.
        assert_eq!(seen(&read(&mut d, qb, 100, n as u32)), 0);

        // Two batches on one pair, reads of both kinds on the other, in flight together.
        let mut now = d.block().controller().now();
        let mut reads = Vec::new();
        for i in 0..12 {
            let cmd = if i % 2 == 0 {
                rd(100, n as u32)
            } else {
                let lpids = lpids.iter().rev().copied().collect();
                Command::ReadLpids { lpids }
            };
            reads.push(d.submit(qr, cmd, now).unwrap());
            match i {
                1 => drop(d.submit(qb, batch(0xBB), now).unwrap()),
                3 => drop(d.submit(qb, batch(0xCC), now).unwrap()),
                _ => {}
            }
            now = now.after(10_000);
        }
        assert_eq!(d.process(), 14);
        let mut outcomes = Vec::new();
        for cid in reads {
            let c = d.poll(qr).unwrap();
            assert_eq!(c.cid, cid);
            outcomes.push(seen(&data(c)));
        }
        assert!(outcomes.is_sorted(), "(d) violated: {outcomes:?}");
        // Round robin from `qr`: R B1 R B2 R ..., so reads before, between and after.
        assert_eq!(&outcomes[..3], &[0, 1, 2], "{outcomes:?}");
        let mut acked = T0;
        for _ in 0..2 {
            let c = d.poll(qb).unwrap();
            assert!(c.status.is_success(), "{}", c.status);
            acked = acked.max(c.acct.completed);
        }
        // (b)
        assert_eq!(seen(&data(run1(&mut d, qr, rd(100, n as u32), acked))), 2);
    }

    #[test]
    fn smart_log_after_writes() {
        let mut d = dev();
        let q = d.create_queue_pair(4).unwrap();
        for i in 0..50u64 {
            let c = run1(&mut d, q, wr(i * 3, fill(i as u8, 1)), T0);
            assert!(c.status.is_success());
        }
        read(&mut d, q, 0, 4);
        let c = run1(&mut d, q, Command::GetLogPage(LogPage::Smart), T0);
        let Payload::Smart(s) = c.payload else {
            panic!("{c:?}")
        };
        assert_eq!(s.host_written_bytes, 50 * LBA as u64);
        assert_eq!(s.host_read_bytes, 4 * LBA as u64);
        assert!(s.write_amplification >= 1.0, "{s:?}");
        assert!(
            s.flash_programs.user >= 25 && s.flash_programs.meta >= 1,
            "{s:?}"
        );
        assert!(s.free_blocks > 0 && s.erase_count_max >= s.erase_count_min);
        assert_eq!(s.last_recovery_modeled_s, None);
        assert_eq!(s, SmartLog::from_ftl(d.block().ftl()));
    }
}
