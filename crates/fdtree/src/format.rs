//! On-device formats: tree blocks, the manifest (superblock) and redo-log records.
//!
//! * **Tree block** (`block_bytes`, a multiple of the LBA size): a 24-byte header
//!   (`magic "FDB1"`, CRC-32C of the rest, entry count, next-block id or `u64::MAX`)
//!   then packed 17-byte entries `key u64 | payload u64 | kind u8`, sorted by
//!   `(key, kind)` with `Fence < Delete < Insert`, so a fence precedes the data entries
//!   of its key and a delete precedes the insert that follows it (paper §2.2 case 4).
//!   A fence's payload is the id of a block in the next *materialized* level.
//! * **Manifest**: two alternating slots of equal size; each holds a sequence number,
//!   the level descriptors, the fences that live in L0 (the "top fences"), the redo-log
//!   start LSN and the L0 generation, all under one CRC-32C. Open takes the valid slot
//!   with the highest sequence number, so a torn manifest write leaves the older one.
//! * **Log record** (40 bytes, `records_per_lba` to an LBA): `lsn | key | payload |
//!   generation | flags | crc`. A record is the full L0 slot of its key after the
//!   modification (physiological redo), so replay within one generation is "last
//!   record wins". The LBA of an LSN is `(lsn / records_per_lba) % log_lbas`; stale
//!   records of an earlier wrap have a different LSN and stop replay.

use crate::FdError;

/// Entry kinds, in their sort order inside a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A fence: payload is a block id in the next materialized level.
    Fence = 0,
    /// A delete data entry: cancels one insert entry of the key in a lower level.
    Delete = 1,
    /// An insert data entry: payload is the value.
    Insert = 2,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        match b {
            0 => Some(Kind::Fence),
            1 => Some(Kind::Delete),
            2 => Some(Kind::Insert),
            _ => None,
        }
    }
}

/// One entry of a level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Entry {
    /// The key.
    pub key: u64,
    /// Kind (part of the sort order).
    pub kind: Kind,
    /// Value (insert), 0 (delete) or block id (fence).
    pub val: u64,
}

/// A decoded tree block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// Sorted entries.
    pub entries: Vec<Entry>,
    /// Next block of the same level.
    pub next: Option<u64>,
}

const BLOCK_MAGIC: u32 = u32::from_le_bytes(*b"FDB1");
/// Block header bytes.
pub const BLOCK_HEADER: usize = 24;
/// Bytes per packed entry.
pub const ENTRY_BYTES: usize = 17;

/// Entries that fit in a block of `block_bytes`.
pub fn entries_per_block(block_bytes: usize) -> usize {
    block_bytes.saturating_sub(BLOCK_HEADER) / ENTRY_BYTES
}

impl Block {
    /// Encode into exactly `block_bytes` bytes.
    pub fn encode(&self, block_bytes: usize) -> Vec<u8> {
        let mut b = vec![0u8; block_bytes];
        b[0..4].copy_from_slice(&BLOCK_MAGIC.to_le_bytes());
        b[8..10].copy_from_slice(&(self.entries.len() as u16).to_le_bytes());
        b[16..24].copy_from_slice(&self.next.unwrap_or(u64::MAX).to_le_bytes());
        let mut off = BLOCK_HEADER;
        for e in &self.entries {
            b[off..off + 8].copy_from_slice(&e.key.to_le_bytes());
            b[off + 8..off + 16].copy_from_slice(&e.val.to_le_bytes());
            b[off + 16] = e.kind as u8;
            off += ENTRY_BYTES;
        }
        let crc = crc32c::crc32c(&b[8..off]);
        b[4..8].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode block `id` (the id only goes into error messages).
    pub fn decode(id: u64, b: &[u8]) -> Result<Block, FdError> {
        let bad = |why: &str| FdError::Corrupt(format!("tree block {id}: {why}"));
        if b.len() < BLOCK_HEADER
            || u32::from_le_bytes(b[0..4].try_into().unwrap_or([0; 4])) != BLOCK_MAGIC
        {
            return Err(bad("bad magic (not a tree block)"));
        }
        let count = u16::from_le_bytes([b[8], b[9]]) as usize;
        let end = BLOCK_HEADER + count * ENTRY_BYTES;
        if end > b.len() {
            return Err(bad("entry count larger than the block"));
        }
        let crc = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        if crc32c::crc32c(&b[8..end]) != crc {
            return Err(bad("checksum mismatch"));
        }
        let mut next = [0u8; 8];
        next.copy_from_slice(&b[16..24]);
        let next = u64::from_le_bytes(next);
        let mut entries = Vec::with_capacity(count);
        for i in 0..count {
            let o = BLOCK_HEADER + i * ENTRY_BYTES;
            let mut k = [0u8; 8];
            k.copy_from_slice(&b[o..o + 8]);
            let mut v = [0u8; 8];
            v.copy_from_slice(&b[o + 8..o + 16]);
            let kind = Kind::from_u8(b[o + 16]).ok_or_else(|| bad("unknown entry kind"))?;
            entries.push(Entry {
                key: u64::from_le_bytes(k),
                kind,
                val: u64::from_le_bytes(v),
            });
        }
        Ok(Block {
            entries,
            next: (next != u64::MAX).then_some(next),
        })
    }
}

/// A level descriptor as kept in memory and in the manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LevelMeta {
    /// Capacity class i of L_i (its maximum size is `l0_blocks * k^i` blocks).
    pub index: u32,
    /// First block.
    pub head: u64,
    /// Blocks in the level.
    pub blocks: u64,
    /// Insert entries.
    pub inserts: u64,
    /// Delete entries.
    pub deletes: u64,
    /// Fence entries.
    pub fences: u64,
}

/// The durable root of the tree.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Manifest {
    /// Sequence number (the higher valid slot wins).
    pub seq: u64,
    /// Geometry check: block size in bytes.
    pub block_bytes: u32,
    /// Geometry check: first LBA of the region.
    pub start_lba: u64,
    /// Geometry check: LBAs in the region.
    pub region_lbas: u64,
    /// Geometry check: LBAs of the redo log.
    pub log_lbas: u64,
    /// L0 generation whose log records start at `log_start`.
    pub generation: u64,
    /// First LSN the tree still needs.
    pub log_start: u64,
    /// Merges completed over the tree's life.
    pub merges: u64,
    /// Levels below L0, top-down.
    pub levels: Vec<LevelMeta>,
    /// Fences kept in L0 (key, block of the first level).
    pub top_fences: Vec<(u64, u64)>,
}

const MANIFEST_MAGIC: u32 = u32::from_le_bytes(*b"FDM1");
/// Manifest fixed header bytes.
pub const MANIFEST_HEADER: usize = 80;
/// Bytes per level descriptor.
pub const LEVEL_BYTES: usize = 44;

impl Manifest {
    /// Bytes the encoding needs.
    pub fn encoded_len(levels: usize, top_fences: usize) -> usize {
        MANIFEST_HEADER + levels * LEVEL_BYTES + top_fences * 16
    }

    /// Encode into `slot_bytes` bytes (the caller checked it fits).
    pub fn encode(&self, slot_bytes: usize) -> Vec<u8> {
        let mut b = vec![0u8; slot_bytes];
        let mut w = Writer { b: &mut b, off: 12 };
        w.u64(self.seq);
        w.u32(self.block_bytes);
        w.u64(self.start_lba);
        w.u64(self.region_lbas);
        w.u64(self.generation);
        w.u64(self.log_start);
        w.u64(self.merges);
        w.u32(self.levels.len() as u32);
        w.u32(self.top_fences.len() as u32);
        w.u64(self.log_lbas);
        w.off = MANIFEST_HEADER;
        for l in &self.levels {
            w.u32(l.index);
            w.u64(l.head);
            w.u64(l.blocks);
            w.u64(l.inserts);
            w.u64(l.deletes);
            w.u64(l.fences);
        }
        for &(k, v) in &self.top_fences {
            w.u64(k);
            w.u64(v);
        }
        let len = w.off;
        b[0..4].copy_from_slice(&MANIFEST_MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&(len as u32).to_le_bytes());
        let crc = crc32c::crc32c(&b[8..len]);
        b[4..8].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode a slot; `None` if it is not a valid manifest (never written, torn).
    pub fn decode(b: &[u8]) -> Option<Manifest> {
        if b.len() < MANIFEST_HEADER || b[0..4] != MANIFEST_MAGIC.to_le_bytes() {
            return None;
        }
        let len = u32::from_le_bytes(b[8..12].try_into().ok()?) as usize;
        if !(MANIFEST_HEADER..=b.len()).contains(&len) {
            return None;
        }
        if crc32c::crc32c(&b[8..len]) != u32::from_le_bytes(b[4..8].try_into().ok()?) {
            return None;
        }
        let mut r = Reader { b, off: 12 };
        let seq = r.u64()?;
        let block_bytes = r.u32()?;
        let start_lba = r.u64()?;
        let region_lbas = r.u64()?;
        let generation = r.u64()?;
        let log_start = r.u64()?;
        let merges = r.u64()?;
        let nl = r.u32()? as usize;
        let nf = r.u32()? as usize;
        let log_lbas = r.u64()?;
        if Self::encoded_len(nl, nf) != len {
            return None;
        }
        r.off = MANIFEST_HEADER;
        let mut levels = Vec::with_capacity(nl);
        for _ in 0..nl {
            levels.push(LevelMeta {
                index: r.u32()?,
                head: r.u64()?,
                blocks: r.u64()?,
                inserts: r.u64()?,
                deletes: r.u64()?,
                fences: r.u64()?,
            });
        }
        let mut top_fences = Vec::with_capacity(nf);
        for _ in 0..nf {
            top_fences.push((r.u64()?, r.u64()?));
        }
        Some(Manifest {
            seq,
            block_bytes,
            start_lba,
            region_lbas,
            log_lbas,
            generation,
            log_start,
            merges,
            levels,
            top_fences,
        })
    }
}

/// Bytes per redo-log record.
pub const LOG_RECORD_BYTES: usize = 40;

/// One redo-log record: the L0 slot of `key` after a modification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRecord {
    /// Log sequence number (from 1).
    pub lsn: u64,
    /// L0 generation the record belongs to.
    pub generation: u64,
    /// The key.
    pub key: u64,
    /// The slot has a delete entry.
    pub del: bool,
    /// The slot's insert entry, if any.
    pub ins: Option<u64>,
}

impl LogRecord {
    /// Encode into 40 bytes.
    pub fn encode(&self, out: &mut [u8]) {
        out[0..8].copy_from_slice(&self.lsn.to_le_bytes());
        out[8..16].copy_from_slice(&self.key.to_le_bytes());
        out[16..24].copy_from_slice(&self.ins.unwrap_or(0).to_le_bytes());
        out[24..32].copy_from_slice(&self.generation.to_le_bytes());
        let flags = u32::from(self.del) | (u32::from(self.ins.is_some()) << 1);
        out[32..36].copy_from_slice(&flags.to_le_bytes());
        let crc = crc32c::crc32c_append(0x5EED_F00D, &out[0..36]);
        out[36..40].copy_from_slice(&crc.to_le_bytes());
    }

    /// Decode; `None` on a bad checksum.
    pub fn decode(b: &[u8]) -> Option<LogRecord> {
        let crc = u32::from_le_bytes(b[36..40].try_into().ok()?);
        if crc32c::crc32c_append(0x5EED_F00D, &b[0..36]) != crc {
            return None;
        }
        let u =
            |o: usize| -> Option<u64> { Some(u64::from_le_bytes(b[o..o + 8].try_into().ok()?)) };
        let flags = u32::from_le_bytes(b[32..36].try_into().ok()?);
        Some(LogRecord {
            lsn: u(0)?,
            key: u(8)?,
            ins: (flags & 2 != 0).then_some(u(16)?),
            generation: u(24)?,
            del: flags & 1 != 0,
        })
    }
}

struct Writer<'a> {
    b: &'a mut [u8],
    off: usize,
}

impl Writer<'_> {
    fn u64(&mut self, v: u64) {
        self.b[self.off..self.off + 8].copy_from_slice(&v.to_le_bytes());
        self.off += 8;
    }
    fn u32(&mut self, v: u32) {
        self.b[self.off..self.off + 4].copy_from_slice(&v.to_le_bytes());
        self.off += 4;
    }
}

struct Reader<'a> {
    b: &'a [u8],
    off: usize,
}

impl Reader<'_> {
    fn u64(&mut self) -> Option<u64> {
        let v = u64::from_le_bytes(self.b.get(self.off..self.off + 8)?.try_into().ok()?);
        self.off += 8;
        Some(v)
    }
    fn u32(&mut self) -> Option<u32> {
        let v = u32::from_le_bytes(self.b.get(self.off..self.off + 4)?.try_into().ok()?);
        self.off += 4;
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_round_trip_and_corruption() {
        let blk = Block {
            entries: vec![
                Entry {
                    key: 1,
                    kind: Kind::Fence,
                    val: 7,
                },
                Entry {
                    key: 1,
                    kind: Kind::Insert,
                    val: 9,
                },
                Entry {
                    key: 5,
                    kind: Kind::Delete,
                    val: 0,
                },
            ],
            next: Some(3),
        };
        let mut b = blk.encode(4096);
        assert_eq!(Block::decode(0, &b).unwrap(), blk);
        b[30] ^= 1;
        assert!(matches!(Block::decode(0, &b), Err(FdError::Corrupt(_))));
        assert!(Block::decode(0, &vec![0u8; 4096]).is_err());
        assert_eq!(entries_per_block(4096), 239);
    }

    #[test]
    fn manifest_and_log_round_trip() {
        let m = Manifest {
            seq: 3,
            block_bytes: 4096,
            start_lba: 10,
            region_lbas: 1000,
            log_lbas: 16,
            generation: 4,
            log_start: 99,
            merges: 2,
            levels: vec![LevelMeta {
                index: 1,
                head: 5,
                blocks: 2,
                inserts: 10,
                deletes: 1,
                fences: 3,
            }],
            top_fences: vec![(0, 5), (100, 6)],
        };
        let mut b = m.encode(4096);
        assert_eq!(Manifest::decode(&b), Some(m));
        b[90] ^= 4;
        assert_eq!(Manifest::decode(&b), None);
        let r = LogRecord {
            lsn: 5,
            generation: 2,
            key: 77,
            del: true,
            ins: Some(8),
        };
        let mut buf = [0u8; LOG_RECORD_BYTES];
        r.encode(&mut buf);
        assert_eq!(LogRecord::decode(&buf), Some(r));
        assert_eq!(LogRecord::decode(&[0u8; 40]), None);
    }
}
