//! On-flash formats of the FTL: sector TAGs, log pages and their records, checkpoint
//! records, and the packing of physical addresses.
//!
//! Every structure carries a magic, a version and a CRC-32C, so that recovery can tell a
//! valid page from an erased, torn or foreign one without trusting anything else.

use crate::FtlError;

/// Sentinel of an unmapped LPID or an absent address.
pub const NONE: u64 = u64::MAX;

/// A physical sector address: `block << 24 | page << 8 | sector`.
#[inline]
pub fn pack(block: u32, page: u32, sector: u32) -> u64 {
    ((block as u64) << 24) | ((page as u64) << 8) | sector as u64
}

/// Inverse of [`pack`].
#[inline]
pub fn unpack(a: u64) -> (u32, u32, u32) {
    (
        (a >> 24) as u32,
        ((a >> 8) & 0xFFFF) as u32,
        (a & 0xFF) as u32,
    )
}

/// Bytes of the TAG the FTL keeps in each sector's OOB area.
pub const TAG_BYTES: usize = 16;

/// What a sector or page holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Padding (no content).
    Pad = 0,
    /// User data of an LPID.
    Data = 1,
    /// A MAP page.
    Map = 2,
    /// A MAPS page.
    Maps = 3,
    /// A WEAR page.
    Wear = 4,
    /// A block-table page (one state byte per block; bad blocks among them).
    Bbt = 5,
    /// A log page.
    Log = 6,
    /// A checkpoint record.
    Ckpt = 7,
    /// A page of the valid-sector bitmap GBITV.
    Gbitv = 8,
    /// A body page of a checkpoint record (its lists).
    CkptBody = 9,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            0 => Kind::Pad,
            1 => Kind::Data,
            2 => Kind::Map,
            3 => Kind::Maps,
            4 => Kind::Wear,
            5 => Kind::Bbt,
            6 => Kind::Log,
            7 => Kind::Ckpt,
            8 => Kind::Gbitv,
            9 => Kind::CkptBody,
            _ => return None,
        })
    }
}

/// A sector's TAG: kind, a 56-bit id (LPID, MAP page index, LSN ...), the low 32 bits of
/// the commit sequence number, and a CRC-32C of the sector's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tag {
    /// What the sector holds.
    pub kind: Kind,
    /// LPID for data; index for metadata pages.
    pub id: u64,
    /// Low 32 bits of the commit sequence that wrote it.
    pub seq: u32,
    /// CRC-32C of the sector's data; when `bound`, XOR the sector's [`place_key`].
    pub crc: u32,
    /// The CRC is bound to where the sector was programmed (every data sector written
    /// since image format 3; older sectors keep the plain CRC): a copy of a sector moved
    /// to another place, or an older generation of the same place (written before the
    /// block's last erase), no longer checks, so a stale sector is never served as
    /// current. The flag is the top bit of the kind byte.
    pub bound: bool,
}

/// Kind-byte bit of a bound TAG.
const TAG_BOUND: u64 = 0x80;

/// CRC-32C (Castagnoli, as in iSCSI and NVMe's end-to-end protection) of one sector's
/// bytes: the value every data sector's TAG keeps. Computed with carry-less multiplication
/// folding where the CPU has it (`crc-fast`: about twice the 4 KiB throughput of the
/// SSE4.2 `crc32` instruction loop on this project's machines), so a scan's first read
/// of a page hashes it in half the time; the value is the standard CRC-32C, equal to
/// `crc32c::crc32c`, so images written before read the same.
#[inline]
pub fn sector_crc(data: &[u8]) -> u32 {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, data) as u32
}

/// What binds a data sector's CRC to its place: a CRC-32C of its block, page, sector and
/// the block's P/E count when it was programmed (the same until the block's next erase).
pub fn place_key(block: u32, page: u32, sector: u32, pe_cycles: u32) -> u32 {
    let mut b = [0u8; 16];
    b[0..4].copy_from_slice(&block.to_le_bytes());
    b[4..8].copy_from_slice(&page.to_le_bytes());
    b[8..12].copy_from_slice(&sector.to_le_bytes());
    b[12..16].copy_from_slice(&pe_cycles.to_le_bytes());
    crc32c::crc32c(&b)
}

impl Tag {
    /// Whether `data` is what this TAG describes; `place` gives the [`place_key`] of
    /// where it was read (asked only for a bound TAG).
    #[inline]
    pub fn matches(&self, data: &[u8], place: impl FnOnce() -> u32) -> bool {
        let key = if self.bound { place() } else { 0 };
        self.crc == sector_crc(data) ^ key
    }

    /// Encode into 16 bytes.
    pub fn write(&self, out: &mut [u8]) {
        let kind = self.kind as u64 | if self.bound { TAG_BOUND } else { 0 };
        let word = (self.id & 0x00FF_FFFF_FFFF_FFFF) | (kind << 56);
        out[0..8].copy_from_slice(&word.to_le_bytes());
        out[8..12].copy_from_slice(&self.seq.to_le_bytes());
        out[12..16].copy_from_slice(&self.crc.to_le_bytes());
    }

    /// Decode from 16 bytes; `None` for an unknown kind (erased OOB reads as 0xFF).
    pub fn read(b: &[u8]) -> Option<Tag> {
        let word = u64::from_le_bytes(b[0..8].try_into().ok()?);
        let kind = Kind::from_u8(((word >> 56) & !TAG_BOUND) as u8)?;
        Some(Tag {
            kind,
            bound: (word >> 56) & TAG_BOUND != 0,
            id: word & 0x00FF_FFFF_FFFF_FFFF,
            seq: u32::from_le_bytes(b[8..12].try_into().ok()?),
            crc: u32::from_le_bytes(b[12..16].try_into().ok()?),
        })
    }
}

/// A page address (`block << 16 | page`), used by links and tables.
#[inline]
pub fn page_addr(block: u32, page: u32) -> u64 {
    ((block as u64) << 16) | page as u64
}

/// Inverse of [`page_addr`].
#[inline]
pub fn page_unaddr(a: u64) -> (u32, u32) {
    ((a >> 16) as u32, (a & 0xFFFF) as u32)
}

/// One logged mapping change: `lpid` moves from `old` to `new` (sector addresses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The logical page.
    pub lpid: u64,
    /// Where it is written now.
    pub new: u64,
    /// Where it was before (undo information; GC moves apply only if MAP still says so).
    pub old: u64,
}

/// A recovery-log record (batch-io §4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// Redo descriptor of a user commit (written before its data).
    Rdesc {
        /// Commit sequence.
        seq: u64,
        /// Mapping changes.
        entries: Vec<Entry>,
    },
    /// Amendment: new locations of entries whose program failed.
    Rdesca {
        /// Commit sequence amended.
        seq: u64,
        /// Relocated entries.
        entries: Vec<Entry>,
    },
    /// GC relocations (applied only where MAP still points at `old`).
    GcMove {
        /// Commit sequence.
        seq: u64,
        /// Moves.
        entries: Vec<Entry>,
    },
    /// The commit's updates are installed.
    Done {
        /// Commit sequence.
        seq: u64,
    },
    /// LPIDs `lpid..lpid+n` were unmapped.
    Trim {
        /// First LPID.
        lpid: u64,
        /// Count.
        n: u64,
    },
    /// Metadata extension of an LPID was set.
    Ext {
        /// The LPID.
        lpid: u64,
        /// Extension bytes.
        bytes: Vec<u8>,
    },
    /// The commit failed and was rolled back: recovery must not apply it.
    Abort {
        /// Commit sequence.
        seq: u64,
    },
    /// The extensions of LPIDs `lpid..lpid+n` are being recomputed (FLIXR §4.6: their
    /// redo-log bit is cleared); a later `Ext` record of an LPID completes it.
    ExtPending {
        /// First LPID.
        lpid: u64,
        /// Count.
        n: u64,
    },
    /// The controller's persistent metadata blob was replaced.
    Blob {
        /// The whole blob.
        bytes: Vec<u8>,
    },
}

impl Record {
    /// Encoded size in bytes.
    pub fn size(&self) -> usize {
        match self {
            Record::Rdesc { entries, .. }
            | Record::Rdesca { entries, .. }
            | Record::GcMove { entries, .. } => 1 + 8 + 4 + 24 * entries.len(),
            Record::Done { .. } | Record::Abort { .. } => 1 + 8,
            Record::Trim { .. } | Record::ExtPending { .. } => 1 + 16,
            Record::Blob { bytes } => 1 + 4 + bytes.len(),
            Record::Ext { bytes, .. } => 1 + 8 + 1 + bytes.len(),
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let mut entries_of = |tag: u8, seq: u64, entries: &[Entry]| {
            out.push(tag);
            out.extend_from_slice(&seq.to_le_bytes());
            out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
            for e in entries {
                out.extend_from_slice(&e.lpid.to_le_bytes());
                out.extend_from_slice(&e.new.to_le_bytes());
                out.extend_from_slice(&e.old.to_le_bytes());
            }
        };
        match self {
            Record::Rdesc { seq, entries } => entries_of(1, *seq, entries),
            Record::Rdesca { seq, entries } => entries_of(2, *seq, entries),
            Record::GcMove { seq, entries } => entries_of(3, *seq, entries),
            Record::Done { seq } => {
                out.push(4);
                out.extend_from_slice(&seq.to_le_bytes());
            }
            Record::Trim { lpid, n } => {
                out.push(5);
                out.extend_from_slice(&lpid.to_le_bytes());
                out.extend_from_slice(&n.to_le_bytes());
            }
            Record::Ext { lpid, bytes } => {
                out.push(6);
                out.extend_from_slice(&lpid.to_le_bytes());
                out.push(bytes.len() as u8);
                out.extend_from_slice(bytes);
            }
            Record::Abort { seq } => {
                out.push(7);
                out.extend_from_slice(&seq.to_le_bytes());
            }
            Record::ExtPending { lpid, n } => {
                out.push(8);
                out.extend_from_slice(&lpid.to_le_bytes());
                out.extend_from_slice(&n.to_le_bytes());
            }
            Record::Blob { bytes } => {
                out.push(9);
                out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                out.extend_from_slice(bytes);
            }
        }
    }

    fn decode(b: &[u8]) -> Option<(Record, usize)> {
        let u64_at = |o: usize| {
            b.get(o..o + 8)
                .and_then(|s| s.try_into().ok())
                .map(u64::from_le_bytes)
        };
        let tag = *b.first()?;
        match tag {
            1..=3 => {
                let seq = u64_at(1)?;
                let n = u32::from_le_bytes(b.get(9..13)?.try_into().ok()?) as usize;
                let mut entries = Vec::with_capacity(n.min(4096));
                for i in 0..n {
                    let o = 13 + 24 * i;
                    entries.push(Entry {
                        lpid: u64_at(o)?,
                        new: u64_at(o + 8)?,
                        old: u64_at(o + 16)?,
                    });
                }
                let r = match tag {
                    1 => Record::Rdesc { seq, entries },
                    2 => Record::Rdesca { seq, entries },
                    _ => Record::GcMove { seq, entries },
                };
                Some((r, 13 + 24 * n))
            }
            4 => Some((Record::Done { seq: u64_at(1)? }, 9)),
            7 => Some((Record::Abort { seq: u64_at(1)? }, 9)),
            5 => Some((
                Record::Trim {
                    lpid: u64_at(1)?,
                    n: u64_at(9)?,
                },
                17,
            )),
            6 => {
                let lpid = u64_at(1)?;
                let n = *b.get(9)? as usize;
                Some((
                    Record::Ext {
                        lpid,
                        bytes: b.get(10..10 + n)?.to_vec(),
                    },
                    10 + n,
                ))
            }
            8 => Some((
                Record::ExtPending {
                    lpid: u64_at(1)?,
                    n: u64_at(9)?,
                },
                17,
            )),
            9 => {
                let n = u32::from_le_bytes(b.get(1..5)?.try_into().ok()?) as usize;
                Some((
                    Record::Blob {
                        bytes: b.get(5..5 + n)?.to_vec(),
                    },
                    5 + n,
                ))
            }
            _ => None,
        }
    }
}

const LOG_MAGIC: u32 = 0x474F_4C43; // "CLOG"
/// Forward links per log page (a failed log write retries at the next link).
pub const LOG_LINKS: usize = 4;
const LOG_HEADER: usize = 4 + 4 + 8 + 8 + 8 * LOG_LINKS + 4 + 4 + 4;

/// A log page: header (LSN, back link, forward links) and records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogPage {
    /// Log sequence number of this page.
    pub lsn: u64,
    /// Page address of the previous log page.
    pub prev: u64,
    /// Candidate page addresses of the next log page, in order.
    pub links: [u64; LOG_LINKS],
    /// Records, in log order.
    pub records: Vec<Record>,
}

impl LogPage {
    /// Record bytes that fit in a page of `page_size`.
    pub fn capacity(page_size: usize) -> usize {
        page_size - LOG_HEADER
    }

    /// Serialize into `out` (exactly one page).
    pub fn encode(&self, out: &mut [u8]) {
        self.encode_with(&self.records, out)
    }

    /// Serialize this page's header with `records` as its body (avoids cloning them).
    pub fn encode_with(&self, records: &[Record], out: &mut [u8]) {
        let mut body = Vec::with_capacity(out.len());
        for r in records {
            r.encode(&mut body);
        }
        out.fill(0);
        out[0..4].copy_from_slice(&LOG_MAGIC.to_le_bytes());
        out[4..8].copy_from_slice(&(records.len() as u32).to_le_bytes());
        out[8..16].copy_from_slice(&self.lsn.to_le_bytes());
        out[16..24].copy_from_slice(&self.prev.to_le_bytes());
        for (i, l) in self.links.iter().enumerate() {
            out[24 + 8 * i..32 + 8 * i].copy_from_slice(&l.to_le_bytes());
        }
        let o = 24 + 8 * LOG_LINKS;
        out[o..o + 4].copy_from_slice(&(body.len() as u32).to_le_bytes());
        out[LOG_HEADER..LOG_HEADER + body.len()].copy_from_slice(&body);
        let crc = crc32c::crc32c(&out[..LOG_HEADER + body.len()]);
        out[o + 8..o + 12].copy_from_slice(&crc.to_le_bytes());
    }

    /// Parse a page; `None` if it is not a valid log page.
    pub fn decode(b: &[u8]) -> Option<LogPage> {
        if b.len() < LOG_HEADER || u32::from_le_bytes(b[0..4].try_into().ok()?) != LOG_MAGIC {
            return None;
        }
        let nrec = u32::from_le_bytes(b[4..8].try_into().ok()?) as usize;
        let o = 24 + 8 * LOG_LINKS;
        let body_len = u32::from_le_bytes(b[o..o + 4].try_into().ok()?) as usize;
        if LOG_HEADER + body_len > b.len() {
            return None;
        }
        let crc = u32::from_le_bytes(b[o + 8..o + 12].try_into().ok()?);
        let mut copy = b[..LOG_HEADER + body_len].to_vec();
        copy[o + 8..o + 12].fill(0);
        if crc32c::crc32c(&copy) != crc {
            return None;
        }
        let mut links = [NONE; LOG_LINKS];
        for (i, l) in links.iter_mut().enumerate() {
            *l = u64::from_le_bytes(b[24 + 8 * i..32 + 8 * i].try_into().ok()?);
        }
        let mut records = Vec::with_capacity(nrec);
        let mut p = LOG_HEADER;
        for _ in 0..nrec {
            let (r, used) = Record::decode(&b[p..LOG_HEADER + body_len])?;
            records.push(r);
            p += used;
        }
        Some(LogPage {
            lsn: u64::from_le_bytes(b[8..16].try_into().ok()?),
            prev: u64::from_le_bytes(b[16..24].try_into().ok()?),
            links,
            records,
        })
    }
}

const CKPT_MAGIC: u32 = 0x504B_4343; // "CCKP"
/// Version 2 (csd since 2026-11) adds GBITV, the open blocks, the flags and the
/// reserve/spare block counts, and moves the variable-length lists into body pages next
/// to the record; version 1 records are recognized and refused with a message that says
/// how to go on.
const CKPT_VERSION: u32 = 2;
/// Bytes of the record's fixed header (before the body-page list).
const CKPT_FIXED: usize = 4 + 4 + 5 * 8 + 4 + 3 * 4 + 3 * 4 + 4 + 4;

/// Checkpoint flag: taken by a clean shutdown, nothing written after it.
pub const CKPT_CLEAN: u32 = 1;
/// Checkpoint flag: the device was read-only because its spare blocks were exhausted.
pub const CKPT_SPARE_EXHAUSTED: u32 = 2;
/// Checkpoint flag: the device was read-only because its rated endurance was consumed.
pub const CKPT_WORN_OUT: u32 = 4;

/// An open block of a stream: `stream << 48 | block << 16 | next page`.
#[inline]
pub fn pack_open(stream: u8, block: u32, page: u32) -> u64 {
    ((stream as u64) << 48) | ((block as u64) << 16) | page as u64
}

/// Inverse of [`pack_open`].
#[inline]
pub fn unpack_open(x: u64) -> (u8, u32, u32) {
    (
        (x >> 48) as u8,
        ((x >> 16) & 0xFFFF_FFFF) as u32,
        (x & 0xFFFF) as u32,
    )
}

/// The checkpoint record written to the well-known location (batch-io §7.2.7): a fixed
/// header in the record page and a body (the variable-length lists) in the pages written
/// just before it in the same ring block.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// Checkpoint sequence (the newest valid one wins).
    pub seq: u64,
    /// LSN of the redo scan start point (RSSP).
    pub rssp_lsn: u64,
    /// Page address of the log page at the RSSP.
    pub rssp_addr: u64,
    /// Next commit sequence number.
    pub next_commit: u64,
    /// Logical capacity in LPIDs.
    pub lbas: u64,
    /// Bytes of metadata extension per MAP entry.
    pub ext_bytes: u32,
    /// Provisioning round-robin positions (HOT, COLD, META).
    pub rr: [u32; 3],
    /// `CKPT_*` flags.
    pub flags: u32,
    /// Blocks set aside at format (provisioning, GC headroom, metadata).
    pub reserve_blocks: u32,
    /// Spare blocks at format.
    pub initial_spare: u32,
    /// MAPT: page addresses of the MAPS pages.
    pub mapt: Vec<u64>,
    /// Page addresses of the WEAR pages.
    pub wear: Vec<u64>,
    /// Page addresses of the bad-block-table pages (a bit per block).
    pub bbt: Vec<u64>,
    /// Page addresses of the GBITV pages (`NONE` for a page of zeros).
    pub gbitv: Vec<u64>,
    /// The open blocks of the three streams ([`pack_open`]).
    pub open: Vec<u64>,
    /// Lifetime counters (SMART) as of this checkpoint.
    pub lifetime: Vec<u64>,
    /// The last recovery's modeled and wall-clock duration, ns.
    pub last_recovery_ns: [u64; 2],
    /// LPIDs whose extension was pending (FLIXR §4.6 redo bit 0) at the checkpoint.
    pub ext_pending: Vec<u64>,
    /// The controller's persistent metadata blob.
    pub blob: Vec<u8>,
}

/// Marks the optional FLIXR section at the end of a checkpoint body ("FLXR"). Bodies
/// without it (older images, devices that never used the section) read as empty, and
/// readers that do not know it stop before it: the section needs no version bump.
const BODY_FLIXR_MAGIC: u32 = 0x5258_4C46;

/// A record page decoded: the fixed fields, and where its body is.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordHead {
    /// The record without its body lists (empty until [`Checkpoint::with_body`]).
    pub ckpt: Checkpoint,
    /// Page addresses of the body pages.
    pub body_pages: Vec<u64>,
    /// Body length in bytes.
    pub body_len: u32,
    /// CRC-32C of the body.
    pub body_crc: u32,
}

impl Checkpoint {
    /// The variable-length part, serialized.
    pub fn body(&self) -> Vec<u8> {
        let mut v = Vec::new();
        for list in [
            &self.mapt,
            &self.wear,
            &self.bbt,
            &self.gbitv,
            &self.open,
            &self.lifetime,
        ] {
            v.extend_from_slice(&(list.len() as u32).to_le_bytes());
            for a in list.iter() {
                v.extend_from_slice(&a.to_le_bytes());
            }
        }
        v.extend_from_slice(&self.last_recovery_ns[0].to_le_bytes());
        v.extend_from_slice(&self.last_recovery_ns[1].to_le_bytes());
        // Only when there is something to keep, so that the body (and the modeled cost of
        // writing it) of a device that does not use FLIXR is what it always was.
        if !self.ext_pending.is_empty() || !self.blob.is_empty() {
            v.extend_from_slice(&BODY_FLIXR_MAGIC.to_le_bytes());
            v.extend_from_slice(&(self.ext_pending.len() as u32).to_le_bytes());
            for l in &self.ext_pending {
                v.extend_from_slice(&l.to_le_bytes());
            }
            v.extend_from_slice(&(self.blob.len() as u32).to_le_bytes());
            v.extend_from_slice(&self.blob);
        }
        v
    }

    /// The record page: the fixed fields and the addresses of the body pages (written
    /// before it), with the body's length and CRC. Errors if the body needs more pages
    /// than the record can list.
    pub fn encode_head(
        &self,
        body: &[u8],
        body_pages: &[u64],
        out: &mut [u8],
    ) -> Result<(), FtlError> {
        let mut v = Vec::with_capacity(out.len());
        v.extend_from_slice(&CKPT_MAGIC.to_le_bytes());
        v.extend_from_slice(&CKPT_VERSION.to_le_bytes());
        for x in [
            self.seq,
            self.rssp_lsn,
            self.rssp_addr,
            self.next_commit,
            self.lbas,
        ] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v.extend_from_slice(&self.ext_bytes.to_le_bytes());
        for r in self.rr {
            v.extend_from_slice(&r.to_le_bytes());
        }
        for x in [self.flags, self.reserve_blocks, self.initial_spare] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v.extend_from_slice(&(body.len() as u32).to_le_bytes());
        v.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
        debug_assert_eq!(v.len(), CKPT_FIXED);
        v.extend_from_slice(&(body_pages.len() as u32).to_le_bytes());
        for a in body_pages {
            v.extend_from_slice(&a.to_le_bytes());
        }
        // The last 8 * LOG_LINKS bytes of the page hold the RSSP's candidate links.
        if v.len() + 4 > out.len() - 8 * LOG_LINKS {
            return Err(FtlError::Config(format!(
                "a checkpoint body of {} bytes needs more body pages than a {}-byte record lists",
                body.len(),
                out.len()
            )));
        }
        let crc = crc32c::crc32c(&v);
        out.fill(0);
        out[..v.len()].copy_from_slice(&v);
        out[v.len()..v.len() + 4].copy_from_slice(&crc.to_le_bytes());
        Ok(())
    }

    /// Is this page a checkpoint record of an older format version (valid magic, older
    /// version)? Such a device must be re-created or formatted with this csd.
    pub fn is_older_version(b: &[u8]) -> bool {
        b.len() >= 8
            && b[0..4] == CKPT_MAGIC.to_le_bytes()
            && u32::from_le_bytes([b[4], b[5], b[6], b[7]]) < CKPT_VERSION
    }

    /// Parse a record page; `None` if it is not a valid record.
    pub fn decode_head(b: &[u8]) -> Option<RecordHead> {
        let u32_at = |o: usize| {
            b.get(o..o + 4)
                .and_then(|s| s.try_into().ok())
                .map(u32::from_le_bytes)
        };
        let u64_at = |o: usize| {
            b.get(o..o + 8)
                .and_then(|s| s.try_into().ok())
                .map(u64::from_le_bytes)
        };
        if u32_at(0)? != CKPT_MAGIC || u32_at(4)? != CKPT_VERSION {
            return None;
        }
        let mut p = 8;
        let mut next = || {
            let x = u64_at(p);
            p += 8;
            x
        };
        let (seq, rssp_lsn, rssp_addr, next_commit, lbas) =
            (next()?, next()?, next()?, next()?, next()?);
        let ext_bytes = u32_at(p)?;
        let rr = [u32_at(p + 4)?, u32_at(p + 8)?, u32_at(p + 12)?];
        let (flags, reserve_blocks, initial_spare) =
            (u32_at(p + 16)?, u32_at(p + 20)?, u32_at(p + 24)?);
        let (body_len, body_crc) = (u32_at(p + 28)?, u32_at(p + 32)?);
        p += 36;
        let n = u32_at(p)? as usize;
        p += 4;
        if n > b.len() / 8 {
            return None;
        }
        let mut body_pages = Vec::with_capacity(n);
        for _ in 0..n {
            body_pages.push(u64_at(p)?);
            p += 8;
        }
        let crc = u32_at(p)?;
        if crc32c::crc32c(&b[..p]) != crc {
            return None;
        }
        Some(RecordHead {
            ckpt: Checkpoint {
                seq,
                rssp_lsn,
                rssp_addr,
                next_commit,
                lbas,
                ext_bytes,
                rr,
                flags,
                reserve_blocks,
                initial_spare,
                mapt: Vec::new(),
                wear: Vec::new(),
                bbt: Vec::new(),
                gbitv: Vec::new(),
                open: Vec::new(),
                lifetime: Vec::new(),
                last_recovery_ns: [0, 0],
                ext_pending: Vec::new(),
                blob: Vec::new(),
            },
            body_pages,
            body_len,
            body_crc,
        })
    }

    /// Fill in the lists from the body bytes (checked against the head's length and
    /// CRC); `None` if the body is not the one the record describes.
    pub fn with_body(head: &RecordHead, body: &[u8]) -> Option<Checkpoint> {
        let body = body.get(..head.body_len as usize)?;
        if crc32c::crc32c(body) != head.body_crc {
            return None;
        }
        let u32_at = |o: usize| {
            body.get(o..o + 4)
                .and_then(|s| s.try_into().ok())
                .map(u32::from_le_bytes)
        };
        let u64_at = |o: usize| {
            body.get(o..o + 8)
                .and_then(|s| s.try_into().ok())
                .map(u64::from_le_bytes)
        };
        let mut p = 0;
        let mut lists: [Vec<u64>; 6] = Default::default();
        for list in lists.iter_mut() {
            let n = u32_at(p)? as usize;
            p += 4;
            if n > body.len() / 8 {
                return None;
            }
            for _ in 0..n {
                list.push(u64_at(p)?);
                p += 8;
            }
        }
        let last_recovery_ns = [u64_at(p)?, u64_at(p + 8)?];
        p += 16;
        let mut ext_pending = Vec::new();
        let mut blob = Vec::new();
        if u32_at(p) == Some(BODY_FLIXR_MAGIC) {
            let n = u32_at(p + 4)? as usize;
            p += 8;
            if n > body.len() / 8 {
                return None;
            }
            for _ in 0..n {
                ext_pending.push(u64_at(p)?);
                p += 8;
            }
            let len = u32_at(p)? as usize;
            blob = body.get(p + 4..p + 4 + len)?.to_vec();
        }
        let [mapt, wear, bbt, gbitv, open, lifetime] = lists;
        Some(Checkpoint {
            mapt,
            wear,
            bbt,
            gbitv,
            open,
            lifetime,
            last_recovery_ns,
            ext_pending,
            blob,
            ..head.ckpt.clone()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The sector CRC is the standard CRC-32C, bit for bit, at every length and
        /// alignment (the folding kernel has separate paths below 16, 64 and 256 bytes
        /// and for unaligned starts): images written with either implementation read
        /// with the other.
        #[test]
        fn sector_crc_is_the_standard_crc32c(
            data in proptest::collection::vec(any::<u8>(), 0..9000),
            skip in 0usize..64,
        ) {
            let d = &data[skip.min(data.len())..];
            prop_assert_eq!(sector_crc(d), crc32c::crc32c(d));
        }
    }

    #[test]
    fn sector_crc_known_values() {
        // The CRC-32C check value (RFC 3720 appendix B.4) and a whole 4 KiB sector.
        assert_eq!(sector_crc(b"123456789"), 0xE306_9283);
        assert_eq!(sector_crc(&[0u8; 32]), 0x8A91_36AA);
        let sector: Vec<u8> = (0..4096u32).map(|i| (i * 31 + i / 7) as u8).collect();
        assert_eq!(sector_crc(&sector), crc32c::crc32c(&sector));
    }

    #[test]
    fn tag_roundtrip_and_erased() {
        let t = Tag {
            bound: true,
            kind: Kind::Data,
            id: 0x12_3456_789A,
            seq: 7,
            crc: 0xDEAD_BEEF,
        };
        let mut b = [0u8; 16];
        t.write(&mut b);
        assert_eq!(Tag::read(&b), Some(t));
        assert_eq!(Tag::read(&[0xFF; 16]), None);
    }

    #[test]
    fn log_page_roundtrip_and_corruption() {
        let p = LogPage {
            lsn: 42,
            prev: 7,
            links: [1, 2, 3, NONE],
            records: vec![
                Record::Rdesc {
                    seq: 9,
                    entries: vec![Entry {
                        lpid: 1,
                        new: 2,
                        old: NONE,
                    }],
                },
                Record::Done { seq: 8 },
                Record::Trim { lpid: 5, n: 3 },
                Record::Ext {
                    lpid: 4,
                    bytes: vec![1, 2, 3],
                },
                Record::ExtPending { lpid: 6, n: 2 },
                Record::Blob {
                    bytes: vec![7; 300],
                },
                Record::GcMove {
                    seq: 10,
                    entries: vec![
                        Entry {
                            lpid: 3,
                            new: 4,
                            old: 5
                        };
                        3
                    ],
                },
                Record::Rdesca {
                    seq: 9,
                    entries: vec![],
                },
                Record::Abort { seq: 11 },
            ],
        };
        let mut page = vec![0u8; 4096];
        p.encode(&mut page);
        assert_eq!(LogPage::decode(&page), Some(p));
        page[100] ^= 1;
        assert_eq!(LogPage::decode(&page), None);
        assert_eq!(LogPage::decode(&[0xFF; 4096]), None);
        assert_eq!(LogPage::decode(&[0u8; 10]), None);
    }

    #[test]
    fn checkpoint_roundtrip_and_corruption() {
        let c = Checkpoint {
            seq: 3,
            rssp_lsn: 10,
            rssp_addr: 99,
            next_commit: 77,
            lbas: 1000,
            ext_bytes: 8,
            rr: [1, 2, 3],
            flags: CKPT_CLEAN,
            reserve_blocks: 40,
            initial_spare: 12,
            mapt: vec![5, 6],
            wear: vec![7],
            bbt: vec![8, 9],
            gbitv: vec![NONE, 4],
            open: vec![pack_open(2, 1234, 17)],
            lifetime: vec![1, 2, 3],
            last_recovery_ns: [10, 20],
            ext_pending: Vec::new(),
            blob: Vec::new(),
        };
        // The optional FLIXR section round-trips too, and is absent when empty.
        let with = Checkpoint {
            ext_pending: vec![4, 9],
            blob: vec![1, 2, 3],
            ..c.clone()
        };
        let wb = with.body();
        assert_eq!(wb.len(), c.body().len() + 4 + 4 + 16 + 4 + 3);
        let mut wp = vec![0u8; 4096];
        with.encode_head(&wb, &[11], &mut wp).unwrap();
        let wh = Checkpoint::decode_head(&wp).unwrap();
        assert_eq!(Checkpoint::with_body(&wh, &wb), Some(with));
        assert_eq!(unpack_open(c.open[0]), (2, 1234, 17));
        let body = c.body();
        let mut page = vec![0u8; 4096];
        c.encode_head(&body, &[11, 12], &mut page).unwrap();
        let head = Checkpoint::decode_head(&page).unwrap();
        assert_eq!(head.body_pages, vec![11, 12]);
        assert_eq!(Checkpoint::with_body(&head, &body), Some(c.clone()));
        // A body that is not the record's.
        let mut other = body.clone();
        other[3] ^= 1;
        assert_eq!(Checkpoint::with_body(&head, &other), None);
        page[20] ^= 0x40;
        assert_eq!(Checkpoint::decode_head(&page), None);
        // More body pages than a record page lists.
        let many = vec![1u64; 600];
        assert!(c.encode_head(&body, &many, &mut page).is_err());
    }
}
