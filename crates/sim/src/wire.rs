//! Wire formats of the command interface, shared by the host side and the device side.
//!
//! The batch I/O interface's descriptor (batch-io §3.2.2): the first block of a batch
//! buffer is a DESC that lists, for each logical page in the buffer, its LPID and its
//! offset (in blocks, counting the DESC as block 0), protected by a CRC-32C.
//!
//! Layout of the DESC block (little-endian): magic `BDSC` (u32), version (u16), count
//! (u16), CRC-32C of the block with this field zero (u32), reserved (u32), then `count`
//! entries of (LPID u64, offset u32). One DESC block bounds a batch to
//! `(block - 16) / 12` pages (340 for 4 KiB blocks).

use thiserror::Error;

/// A malformed batch descriptor or buffer.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{0}")]
pub struct DescError(pub String);

const MAGIC: u32 = 0x4353_4442;
const VERSION: u16 = 1;
const HEADER: usize = 16;
const ENTRY: usize = 12;

/// A parsed batch descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchDesc {
    /// (LPID, offset in blocks from the start of the buffer; 1 = the first page after the DESC).
    pub entries: Vec<(u64, u32)>,
}

impl BatchDesc {
    /// Pages one DESC block of `block` bytes can describe.
    pub fn capacity(block: usize) -> usize {
        block.saturating_sub(HEADER) / ENTRY
    }

    /// Serialize into one block of `block` bytes.
    pub fn encode(&self, block: usize) -> Result<Vec<u8>, DescError> {
        if self.entries.is_empty()
            || self.entries.len() > Self::capacity(block).min(u16::MAX as usize)
        {
            return Err(DescError(format!(
                "a batch holds 1 to {} pages, not {}",
                Self::capacity(block),
                self.entries.len()
            )));
        }
        let mut b = vec![0u8; block];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&(self.entries.len() as u16).to_le_bytes());
        for (i, (lpid, off)) in self.entries.iter().enumerate() {
            let o = HEADER + i * ENTRY;
            b[o..o + 8].copy_from_slice(&lpid.to_le_bytes());
            b[o + 8..o + 12].copy_from_slice(&off.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b);
        b[8..12].copy_from_slice(&crc.to_le_bytes());
        Ok(b)
    }

    /// Parse and check a DESC block.
    pub fn decode(b: &[u8]) -> Result<BatchDesc, DescError> {
        let bad = |m: &str| Err(DescError(m.to_string()));
        if b.len() < HEADER + ENTRY {
            return bad("the DESC block is too short");
        }
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        if u32_at(0) != MAGIC {
            return bad("the first block is not a batch descriptor (bad magic)");
        }
        if u16::from_le_bytes([b[4], b[5]]) != VERSION {
            return bad("unsupported DESC version");
        }
        let mut copy = b.to_vec();
        copy[8..12].fill(0);
        if crc32c::crc32c(&copy) != u32_at(8) {
            return bad("DESC checksum mismatch (corrupt descriptor)");
        }
        let count = u16::from_le_bytes([b[6], b[7]]) as usize;
        if count == 0 || count > Self::capacity(b.len()) {
            return Err(DescError(format!(
                "DESC count {count} is outside 1..={}",
                Self::capacity(b.len())
            )));
        }
        let entries = (0..count)
            .map(|i| {
                let o = HEADER + i * ENTRY;
                let lpid = u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0xFF; 8]));
                (lpid, u32_at(o + 8))
            })
            .collect();
        Ok(BatchDesc { entries })
    }
}

/// Build a batch buffer (DESC followed by the pages, in order) from `(lpid, page)` pairs.
pub fn build_batch(pages: &[(u64, &[u8])], block: usize) -> Result<Vec<u8>, DescError> {
    let desc = BatchDesc {
        entries: pages
            .iter()
            .enumerate()
            .map(|(i, (l, _))| (*l, i as u32 + 1))
            .collect(),
    };
    let mut buf = desc.encode(block)?;
    for (_, p) in pages {
        if p.len() != block {
            return Err(DescError(format!(
                "page of {} bytes; pages are {block} bytes",
                p.len()
            )));
        }
        buf.extend_from_slice(p);
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn desc_roundtrip_and_rejections() {
        let d = BatchDesc {
            entries: vec![(5, 1), (9, 2)],
        };
        let b = d.encode(4096).unwrap();
        assert_eq!(BatchDesc::decode(&b).unwrap(), d);
        let mut c = b.clone();
        c[20] ^= 1;
        assert!(
            BatchDesc::decode(&c)
                .unwrap_err()
                .to_string()
                .contains("checksum")
        );
        assert!(
            BatchDesc::decode(&[0u8; 4096])
                .unwrap_err()
                .to_string()
                .contains("magic")
        );
        assert!(BatchDesc::decode(&b[..10]).is_err());
        assert!(BatchDesc { entries: vec![] }.encode(4096).is_err());
        assert!(
            BatchDesc {
                entries: vec![(1, 1); 341]
            }
            .encode(4096)
            .is_err()
        );
        assert_eq!(BatchDesc::capacity(4096), 340);
    }
}
