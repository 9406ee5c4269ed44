//! The command vocabulary of the NVMe boundary (docs/architecture.md, "command interface (the NVMe
//! boundary)"): the typed [`Command`]s a host submits, the [`Completion`] each comes
//! back as (a [`Status`], a [`Payload`] and the [`Accounting`] of the work it caused),
//! and the admin data structures (Identify, the SMART and telemetry log pages). The
//! queues that carry them and the controller that executes them are in
//! [`crate::nvme`].
//!
//! What it realizes:
//! * OX's NVMe front end (batch-io §7.1, §7.1.1): every command has an operation code
//!   ([`Command::opcode`]); the batch interface uses vendor-specific opcodes, as OX does
//!   to add new storage interfaces.
//! * The batch I/O interface of batch-io §3 as two commands: [`Command::FlushBatch`] (a
//!   DESC block and the pages it describes, written atomically, §3.1 and §3.2.2) and
//!   [`Command::ReadLpids`] (`readLPID` of many logical pages at once).
//! * The FLIXR commands of flixr Table 1 and the in-storage session commands (scan paper
//!   §4) as further vendor-specific opcodes.
//!
//! Choices made here:
//! * Commands are a typed enum, not bytes; a new command (sessions, per-page index
//!   commands) is a new variant, its opcode, and one arm in the executor
//!   (`nvme/run.rs`).
//! * Statuses carry NVMe's status code type and code ([`Status::sct`], [`Status::code`])
//!   and a message a user can act on; FTL, media and in-storage refusals map onto them
//!   here (`From` impls), so the executor only forwards errors.
//! * Admin data: Identify returns a 4 KiB data structure and the SMART log a 512-byte
//!   page, as in NVMe; each is staged in DRAM and sent over the host link.
//! * Accounting is the difference of the flash array's and the controller's counters
//!   around the command, so GC, log and checkpoint work a command triggers is charged to
//!   that command.
//!
//! Dependencies: this module names the argument types of the FLIXR, in-SSD B+tree and
//! ISP commands (defined beside the firmware that interprets them) and the FTL's
//! errors; it uses nothing of the queue machinery or the block device, so nothing
//! below it depends on it (see the order in the crate doc).

use crate::flixr::{
    HostIndexValue, IndexRead, IndexRule, IndexSpec, JoinIndexSpec, RuleTerm, TableFormat,
};
use crate::isp::{IspOpen, IspRefusal, IspReply};
use csd_ftl::{Ftl, FtlError};
use csd_nand::NandError;
use csd_sim::SimTime;
use thiserror::Error;

/// Bytes of the Identify data structure sent to the host.
pub const IDENTIFY_BYTES: u64 = 4096;
/// Bytes of the SMART / health log page sent to the host.
pub const SMART_LOG_BYTES: u64 = 512;

/// A queue pair's identifier (1..=[`crate::nvme::MAX_QUEUE_PAIRS`]).
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
    /// Read as [`Command::Read`] does, for a host in this process that evaluates what
    /// it reads: every `unit` bytes of the data that lie in one flash page are left where
    /// an image opened read-only keeps them, pinned, instead of copied
    /// ([`Payload::Pinned`]); on any other device, for a read that is not whole units,
    /// or when no unit lies so, the payload is the data as a Read's. Modeled exactly as a Read of the same LBAs (an emulator
    /// shortcut: the device's work, the host link's transfer and every counter are the
    /// Read's).
    ReadPinned {
        /// First LBA.
        lba: u64,
        /// Number of LBAs (1..=MDTS).
        blocks: u32,
        /// Bytes of a unit the host evaluates (a table page), a multiple of the LBA size.
        unit: usize,
        /// Of each unit left in place, the LBAs whose bytes the host reads (bit k: the
        /// unit's k-th LBA; `u64::MAX`, [`csd_ftl::ALL_SECTORS`]: all, past the 64th
        /// always). Every LBA's TAG is checked; only these are hashed against their
        /// CRC, and the host must not use the others' bytes (an in-host scan of PAX
        /// pages reads its program's minipages: [`csd_table::page::PageView::pieces_read`]).
        /// Units copied are checked whole. No modeled effect.
        check: u64,
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
        /// Bytes of a node, one to an LBA at its start: 0 for the whole LBA, else 4096 up
        /// to the LBA size, a multiple of 8.
        node_bytes: u32,
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
    /// `lo <= key <= hi` (at most MDTS; the reply says where to resume). A command that
    /// resumes the previous request on the same index and range (`from` at its resume
    /// point, no update in between) is served from the page list the request's first
    /// command left in DRAM, without traversing the index again.
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
            Command::Read { .. } | Command::ReadPinned { .. } => 0x02,
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

    /// A short name, for messages and traces.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Read { .. } | Command::ReadPinned { .. } => "Read",
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
            FtlError::Corrupt(_) | FtlError::NotCheckpointed { .. } => Status::InternalError(m),
            FtlError::Nand(n) => match n {
                NandError::PowerLoss => Status::NamespaceNotReady(m),
                NandError::ProgramFailed { .. } | NandError::EraseFailed { .. } => {
                    Status::WriteFault(m)
                }
                NandError::Image { .. }
                | NandError::ImageFull { .. }
                | NandError::MemoryFull { .. } => Status::DataTransferError(m),
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
    /// NVMe critical-warning bits: 0 spare below threshold, 2 reliability degraded
    /// (media errors, or the rated endurance consumed), 3 read-only (`csd_ftl::WARN_*`).
    pub critical_warning: u8,
    /// Available spare, percent of the spare blocks at format.
    pub available_spare_pct: u32,
    /// Available-spare threshold, percent.
    pub spare_threshold_pct: u32,
    /// Life used: mean erase count over the rated endurance, percent (floor; may pass
    /// 100, capped at 255 as NVMe does). At 100 the device turns read-only (worn out).
    pub percentage_used: u32,
    /// The rated endurance, P/E cycles per block (the preset's `flash.endurance`).
    #[serde(default)]
    pub rated_endurance: u32,
    /// Host reads that failed (uncorrectable after read retries, checksum mismatch, data
    /// lost earlier), over the device's life: like every counter here it is kept in the
    /// FTL's checkpoints and survives a clean close, also of a read-only device.
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
            rated_endurance: health.rated_endurance,
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
    /// Data read by [`Command::ReadPinned`], partly left in place.
    Pinned(PinnedRead),
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

/// The data of a [`Command::ReadPinned`]: units of `unit` bytes, each either left where
/// the flash keeps it (pinned: [`csd_nand::PinnedPages`]) or copied into a buffer the
/// payload owns. Cloning shares it; two payloads are equal only if they are the same one.
#[derive(Clone)]
pub struct PinnedRead(std::sync::Arc<PinnedReadParts>);

struct PinnedReadParts {
    unit: usize,
    /// The read's bytes where a unit was copied (the units left in place unwritten).
    owned: Vec<u8>,
    /// The units left in place, in unit order.
    pins: csd_nand::PinnedPages,
    /// Per unit: its page in `pins`, or `u32::MAX` for a unit in `owned`.
    place: Vec<u32>,
}

impl PinnedRead {
    /// The read of `owned.len()` bytes whose units `in_place` (in increasing order) are
    /// the pages of `pins`.
    pub(crate) fn new(
        unit: usize,
        owned: Vec<u8>,
        pins: csd_nand::PinnedPages,
        in_place: &[usize],
    ) -> PinnedRead {
        let units = owned.len() / unit.max(1);
        let mut place = vec![u32::MAX; units];
        for (k, &u) in in_place.iter().enumerate() {
            debug_assert!(k == 0 || u > in_place[k - 1], "units in increasing order");
            if let Some(p) = place.get_mut(u) {
                *p = k as u32;
            }
        }
        debug_assert_eq!(pins.len(), in_place.len());
        PinnedRead(std::sync::Arc::new(PinnedReadParts {
            unit,
            owned,
            pins,
            place,
        }))
    }

    /// Bytes of a unit.
    pub fn unit(&self) -> usize {
        self.0.unit
    }

    /// Number of units.
    pub fn units(&self) -> usize {
        self.0.place.len()
    }

    /// Units left in place.
    pub fn pinned(&self) -> usize {
        self.0.pins.len()
    }

    /// Calls `f` with the units of every read of `reads`, in order (one list), if the
    /// units left in place are still the bytes they were; `None` if the array changed
    /// since (nothing read).
    pub fn read_all<R>(reads: &[&PinnedRead], f: impl FnOnce(&[&[u8]]) -> R) -> Option<R> {
        let sets: Vec<&csd_nand::PinnedPages> = reads.iter().map(|r| &r.0.pins).collect();
        csd_nand::PinnedPages::read_all(&sets, |pinned| {
            let mut base = 0;
            let mut units = Vec::with_capacity(reads.iter().map(|r| r.units()).sum());
            for r in reads {
                let p = &r.0;
                for (u, &k) in p.place.iter().enumerate() {
                    units.push(if k == u32::MAX {
                        &p.owned[u * p.unit..(u + 1) * p.unit]
                    } else {
                        pinned[base + k as usize]
                    });
                }
                base += p.pins.len();
            }
            f(&units)
        })
    }

    /// The buffer the payload owns, when this is its last holder (to give back to the
    /// device for a later read).
    pub fn into_owned(self) -> Option<Vec<u8>> {
        std::sync::Arc::try_unwrap(self.0).ok().map(|p| p.owned)
    }
}

impl std::fmt::Debug for PinnedRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedRead")
            .field("unit", &self.unit())
            .field("units", &self.units())
            .field("pinned", &self.pinned())
            .finish()
    }
}

impl PartialEq for PinnedRead {
    fn eq(&self, other: &PinnedRead) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
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

impl From<IspRefusal> for Status {
    fn from(r: IspRefusal) -> Status {
        match r {
            IspRefusal::Resources(m) => Status::SessionResources(m),
            IspRefusal::NoSession(m) => Status::InvalidSession(m),
            IspRefusal::Invalid(m) => Status::InvalidField(m),
        }
    }
}
