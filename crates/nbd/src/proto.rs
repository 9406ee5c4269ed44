//! The NBD wire format: magic numbers, flags, option and command codes, error values,
//! and the parsing and encoding of the messages this server exchanges.
//!
//! Everything here is plain data in network byte order. Parsers take byte slices of the
//! exact message size and return a typed [`ProtoError`] for anything they cannot accept;
//! they never panic and never allocate more than the bytes they are given. Values are
//! those of the NBD protocol document (`doc/proto.md` of the reference implementation)
//! as spoken by current libnbd, qemu and nbdkit.

use thiserror::Error;

/// `NBDMAGIC`, the first 8 bytes the server sends.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: the newstyle magic, and the magic of every option request.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic of every option reply.
pub const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of a transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

/// Handshake flag: the server speaks fixed newstyle.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
/// Handshake flag: the server can leave out the 124 zero bytes after `NBD_OPT_EXPORT_NAME`.
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
/// Client flag: the client speaks fixed newstyle.
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
/// Client flag: leave out the 124 zero bytes.
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

/// Option: choose an export and enter transmission (no error reply possible).
pub const OPT_EXPORT_NAME: u32 = 1;
/// Option: end the negotiation.
pub const OPT_ABORT: u32 = 2;
/// Option: list the exports.
pub const OPT_LIST: u32 = 3;
/// Option: start TLS (not supported here).
pub const OPT_STARTTLS: u32 = 5;
/// Option: describe an export.
pub const OPT_INFO: u32 = 6;
/// Option: describe an export and enter transmission.
pub const OPT_GO: u32 = 7;
/// Option: use structured replies (refused here: simple replies only).
pub const OPT_STRUCTURED_REPLY: u32 = 8;
/// Option: list metadata contexts (needs structured replies).
pub const OPT_LIST_META_CONTEXT: u32 = 9;
/// Option: select metadata contexts (needs structured replies).
pub const OPT_SET_META_CONTEXT: u32 = 10;
/// Option: extended headers (not supported here).
pub const OPT_EXTENDED_HEADERS: u32 = 11;

/// Option reply: done, no data.
pub const REP_ACK: u32 = 1;
/// Option reply: one export of `NBD_OPT_LIST`.
pub const REP_SERVER: u32 = 2;
/// Option reply: one piece of information of `NBD_OPT_INFO` / `NBD_OPT_GO`.
pub const REP_INFO: u32 = 3;
const REP_ERR: u32 = 1 << 31;
/// Option error: unknown option.
pub const REP_ERR_UNSUP: u32 = REP_ERR | 1;
/// Option error: forbidden by the server's policy.
pub const REP_ERR_POLICY: u32 = REP_ERR | 2;
/// Option error: syntactically invalid.
pub const REP_ERR_INVALID: u32 = REP_ERR | 3;
/// Option error: no such export.
pub const REP_ERR_UNKNOWN: u32 = REP_ERR | 6;
/// Option error: the server is shutting down.
pub const REP_ERR_SHUTDOWN: u32 = REP_ERR | 7;
/// Option error: the request is too large.
pub const REP_ERR_TOO_BIG: u32 = REP_ERR | 9;

/// Info type: size and transmission flags.
pub const INFO_EXPORT: u16 = 0;
/// Info type: the export's name.
pub const INFO_NAME: u16 = 1;
/// Info type: a human-readable description.
pub const INFO_DESCRIPTION: u16 = 2;
/// Info type: block size constraints.
pub const INFO_BLOCK_SIZE: u16 = 3;

/// Transmission flag: always set.
pub const TFLAG_HAS_FLAGS: u16 = 1 << 0;
/// Transmission flag: the export is read-only.
pub const TFLAG_READ_ONLY: u16 = 1 << 1;
/// Transmission flag: `NBD_CMD_FLUSH` is supported.
pub const TFLAG_SEND_FLUSH: u16 = 1 << 2;
/// Transmission flag: `NBD_CMD_FLAG_FUA` is supported.
pub const TFLAG_SEND_FUA: u16 = 1 << 3;
/// Transmission flag: `NBD_CMD_TRIM` is supported.
pub const TFLAG_SEND_TRIM: u16 = 1 << 5;
/// Transmission flag: `NBD_CMD_WRITE_ZEROES` is supported.
pub const TFLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
/// Transmission flag: flushes and FUA are visible across connections.
pub const TFLAG_CAN_MULTI_CONN: u16 = 1 << 8;

/// Command: read.
pub const CMD_READ: u16 = 0;
/// Command: write (the payload follows the header).
pub const CMD_WRITE: u16 = 1;
/// Command: disconnect (no reply).
pub const CMD_DISC: u16 = 2;
/// Command: flush.
pub const CMD_FLUSH: u16 = 3;
/// Command: trim (discard).
pub const CMD_TRIM: u16 = 4;
/// Command: cache (prefetch; not advertised here).
pub const CMD_CACHE: u16 = 5;
/// Command: write zeroes.
pub const CMD_WRITE_ZEROES: u16 = 6;
/// Command: block status (needs structured replies; not supported here).
pub const CMD_BLOCK_STATUS: u16 = 7;

/// Command flag: force unit access (durable before the reply).
pub const CMD_FLAG_FUA: u16 = 1 << 0;
/// Command flag of write zeroes: do not punch a hole.
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;

/// Error value: operation not permitted (write to a read-only export).
pub const EPERM: u32 = 1;
/// Error value: input/output error.
pub const EIO: u32 = 5;
/// Error value: out of memory.
pub const ENOMEM: u32 = 12;
/// Error value: invalid argument.
pub const EINVAL: u32 = 22;
/// Error value: no space left (a write beyond the end of the export).
pub const ENOSPC: u32 = 28;
/// Error value: value too large.
pub const EOVERFLOW: u32 = 75;
/// Error value: not supported.
pub const ENOTSUP: u32 = 95;
/// Error value: the server is shutting down.
pub const ESHUTDOWN: u32 = 108;

/// Bytes of an option request header (magic, option, length).
pub const OPTION_HEADER_BYTES: usize = 16;
/// Bytes of a transmission request header.
pub const REQUEST_HEADER_BYTES: usize = 28;
/// Bytes of a simple reply header.
pub const SIMPLE_REPLY_BYTES: usize = 16;
/// Largest READ or WRITE payload the server accepts (the maximum block size it
/// advertises); larger requests get `EINVAL`.
pub const MAX_PAYLOAD_BYTES: u32 = 32 << 20;
/// Largest option data the server reads; longer options are skipped and answered with
/// `NBD_REP_ERR_TOO_BIG`. Strings in NBD are at most 4096 bytes, so no valid option of
/// this server comes close.
pub const MAX_OPTION_BYTES: u32 = 64 << 10;
/// Longest export name (the protocol's string limit).
pub const MAX_NAME_BYTES: usize = 4096;

/// A message the server cannot accept at all (the connection is then dropped, the
/// protocol's "hard disconnect").
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProtoError {
    /// A message began with the wrong magic number.
    #[error("bad {what} magic {got:#x}: the client is not speaking NBD or lost framing")]
    BadMagic {
        /// Which message.
        what: &'static str,
        /// The number found.
        got: u64,
    },
    /// The client set handshake flags the server did not offer.
    #[error("client flags {0:#x} include flags the server did not offer")]
    BadClientFlags(u32),
    /// A buffer has the wrong length for the message.
    #[error("{what} needs {expected} bytes, got {got}")]
    Short {
        /// Which message.
        what: &'static str,
        /// Bytes needed.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
}

fn be_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn be_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn short(what: &'static str, expected: usize, got: usize) -> ProtoError {
    ProtoError::Short {
        what,
        expected,
        got,
    }
}

/// The server's opening: `NBDMAGIC`, `IHAVEOPT` and the handshake flags.
pub fn greeting() -> [u8; 18] {
    let mut b = [0u8; 18];
    b[..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    b[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    b[16..].copy_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    b
}

/// Parse the client's flags (4 bytes); unknown flags are a protocol violation.
pub fn parse_client_flags(b: &[u8]) -> Result<u32, ProtoError> {
    let f = be_u32(b, 0).ok_or_else(|| short("client flags", 4, b.len()))?;
    if f & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Err(ProtoError::BadClientFlags(f));
    }
    Ok(f)
}

/// The header of an option request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    /// The option code.
    pub option: u32,
    /// Bytes of option data that follow.
    pub length: u32,
}

impl OptionHeader {
    /// Parse [`OPTION_HEADER_BYTES`] bytes.
    pub fn parse(b: &[u8]) -> Result<OptionHeader, ProtoError> {
        let (Some(magic), Some(option), Some(length), true) = (
            be_u64(b, 0),
            be_u32(b, 8),
            be_u32(b, 12),
            b.len() == OPTION_HEADER_BYTES,
        ) else {
            return Err(short("option header", OPTION_HEADER_BYTES, b.len()));
        };
        if magic != IHAVEOPT {
            return Err(ProtoError::BadMagic {
                what: "option",
                got: magic,
            });
        }
        Ok(OptionHeader { option, length })
    }

    /// Encode (used by test clients).
    pub fn encode(&self) -> [u8; OPTION_HEADER_BYTES] {
        let mut b = [0u8; OPTION_HEADER_BYTES];
        b[..8].copy_from_slice(&IHAVEOPT.to_be_bytes());
        b[8..12].copy_from_slice(&self.option.to_be_bytes());
        b[12..].copy_from_slice(&self.length.to_be_bytes());
        b
    }
}

/// The data of `NBD_OPT_INFO` and `NBD_OPT_GO`: an export name and the information
/// types the client asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoRequest {
    /// The export name (empty: the default export).
    pub name: Vec<u8>,
    /// Information types requested.
    pub requests: Vec<u16>,
}

impl InfoRequest {
    /// Parse option data; `None` if the lengths inside do not add up (the server then
    /// answers `NBD_REP_ERR_INVALID`).
    pub fn parse(data: &[u8]) -> Option<InfoRequest> {
        let name_len = be_u32(data, 0)? as usize;
        if name_len > MAX_NAME_BYTES {
            return None;
        }
        let name = data.get(4..4usize.checked_add(name_len)?)?.to_vec();
        let at = 4 + name_len;
        let n = be_u16(data, at)? as usize;
        let rest = data.get(at + 2..)?;
        if rest.len() != 2 * n {
            return None;
        }
        let requests = rest
            .chunks_exact(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
            .collect();
        Some(InfoRequest { name, requests })
    }

    /// Encode (used by test clients).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(6 + self.name.len() + 2 * self.requests.len());
        b.extend_from_slice(&(self.name.len() as u32).to_be_bytes());
        b.extend_from_slice(&self.name);
        b.extend_from_slice(&(self.requests.len() as u16).to_be_bytes());
        for r in &self.requests {
            b.extend_from_slice(&r.to_be_bytes());
        }
        b
    }
}

/// An option reply: magic, the option, the reply type, the data length, the data.
pub fn option_reply(option: u32, reply: u32, data: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(20 + data.len());
    b.extend_from_slice(&OPT_REPLY_MAGIC.to_be_bytes());
    b.extend_from_slice(&option.to_be_bytes());
    b.extend_from_slice(&reply.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    b
}

/// `NBD_INFO_EXPORT`: size and transmission flags.
pub fn info_export(size: u64, flags: u16) -> Vec<u8> {
    let mut b = Vec::with_capacity(12);
    b.extend_from_slice(&INFO_EXPORT.to_be_bytes());
    b.extend_from_slice(&size.to_be_bytes());
    b.extend_from_slice(&flags.to_be_bytes());
    b
}

/// `NBD_INFO_BLOCK_SIZE`: minimum, preferred and maximum block size.
pub fn info_block_size(min: u32, preferred: u32, max: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(14);
    b.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    for v in [min, preferred, max] {
        b.extend_from_slice(&v.to_be_bytes());
    }
    b
}

/// `NBD_INFO_NAME` or `NBD_INFO_DESCRIPTION`: a string.
pub fn info_string(kind: u16, s: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(2 + s.len());
    b.extend_from_slice(&kind.to_be_bytes());
    b.extend_from_slice(s);
    b
}

/// The reply to `NBD_OPT_EXPORT_NAME`: size, transmission flags and, unless the client
/// negotiated `NBD_FLAG_C_NO_ZEROES`, 124 zero bytes.
pub fn export_name_reply(size: u64, flags: u16, no_zeroes: bool) -> Vec<u8> {
    let mut b = Vec::with_capacity(134);
    b.extend_from_slice(&size.to_be_bytes());
    b.extend_from_slice(&flags.to_be_bytes());
    if !no_zeroes {
        b.resize(b.len() + 124, 0);
    }
    b
}

/// A transmission request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Command flags.
    pub flags: u16,
    /// Command type.
    pub kind: u16,
    /// The client's handle, echoed in the reply.
    pub cookie: u64,
    /// Byte offset.
    pub offset: u64,
    /// Byte length.
    pub length: u32,
}

impl Request {
    /// Parse [`REQUEST_HEADER_BYTES`] bytes.
    pub fn parse(b: &[u8]) -> Result<Request, ProtoError> {
        let (Some(magic), Some(flags), Some(kind), Some(cookie), Some(offset), Some(length)) = (
            be_u32(b, 0),
            be_u16(b, 4),
            be_u16(b, 6),
            be_u64(b, 8),
            be_u64(b, 16),
            be_u32(b, 24),
        ) else {
            return Err(short("request header", REQUEST_HEADER_BYTES, b.len()));
        };
        if b.len() != REQUEST_HEADER_BYTES {
            return Err(short("request header", REQUEST_HEADER_BYTES, b.len()));
        }
        if magic != REQUEST_MAGIC {
            return Err(ProtoError::BadMagic {
                what: "request",
                got: magic as u64,
            });
        }
        Ok(Request {
            flags,
            kind,
            cookie,
            offset,
            length,
        })
    }

    /// Encode (used by test clients).
    pub fn encode(&self) -> [u8; REQUEST_HEADER_BYTES] {
        let mut b = [0u8; REQUEST_HEADER_BYTES];
        b[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&self.flags.to_be_bytes());
        b[6..8].copy_from_slice(&self.kind.to_be_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b[16..24].copy_from_slice(&self.offset.to_be_bytes());
        b[24..].copy_from_slice(&self.length.to_be_bytes());
        b
    }

    /// Does a payload of `length` bytes follow the header?
    pub fn has_payload(&self) -> bool {
        self.kind == CMD_WRITE
    }

    /// A short name of the command, for messages.
    pub fn name(&self) -> &'static str {
        match self.kind {
            CMD_READ => "READ",
            CMD_WRITE => "WRITE",
            CMD_DISC => "DISC",
            CMD_FLUSH => "FLUSH",
            CMD_TRIM => "TRIM",
            CMD_CACHE => "CACHE",
            CMD_WRITE_ZEROES => "WRITE_ZEROES",
            CMD_BLOCK_STATUS => "BLOCK_STATUS",
            _ => "unknown",
        }
    }
}

/// A simple reply header: magic, error, handle.
pub fn simple_reply(error: u32, cookie: u64) -> [u8; SIMPLE_REPLY_BYTES] {
    let mut b = [0u8; SIMPLE_REPLY_BYTES];
    b[..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&error.to_be_bytes());
    b[8..].copy_from_slice(&cookie.to_be_bytes());
    b
}

/// Parse a simple reply header into (error, handle) (used by test clients).
pub fn parse_simple_reply(b: &[u8]) -> Result<(u32, u64), ProtoError> {
    let (Some(magic), Some(error), Some(cookie)) = (be_u32(b, 0), be_u32(b, 4), be_u64(b, 8))
    else {
        return Err(short("simple reply", SIMPLE_REPLY_BYTES, b.len()));
    };
    if magic != SIMPLE_REPLY_MAGIC {
        return Err(ProtoError::BadMagic {
            what: "simple reply",
            got: magic as u64,
        });
    }
    Ok((error, cookie))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let r = Request {
            flags: CMD_FLAG_FUA,
            kind: CMD_WRITE,
            cookie: 0xdead_beef_0000_0001,
            offset: 1 << 40,
            length: 4096,
        };
        assert_eq!(Request::parse(&r.encode()), Ok(r));
        let h = OptionHeader {
            option: OPT_GO,
            length: 12,
        };
        assert_eq!(OptionHeader::parse(&h.encode()), Ok(h));
        let i = InfoRequest {
            name: b"disk".to_vec(),
            requests: vec![INFO_BLOCK_SIZE, INFO_NAME],
        };
        assert_eq!(InfoRequest::parse(&i.encode()), Some(i));
        assert_eq!(parse_simple_reply(&simple_reply(EIO, 7)), Ok((EIO, 7)));
    }

    #[test]
    fn malformed_messages_are_refused() {
        let mut b = Request {
            flags: 0,
            kind: CMD_READ,
            cookie: 1,
            offset: 0,
            length: 1,
        }
        .encode();
        assert!(Request::parse(&b[..27]).is_err());
        assert!(Request::parse(&[0u8; 29]).is_err());
        b[0] ^= 1;
        assert!(matches!(
            Request::parse(&b),
            Err(ProtoError::BadMagic { .. })
        ));
        assert!(OptionHeader::parse(&[0u8; 16]).is_err());
        assert!(OptionHeader::parse(&[]).is_err());
        assert_eq!(parse_client_flags(&[0, 0, 0, 3]), Ok(3));
        assert!(parse_client_flags(&[0, 0, 0, 4]).is_err());
        assert!(parse_client_flags(&[0, 0]).is_err());
        // INFO data whose inner lengths do not add up.
        assert_eq!(InfoRequest::parse(&[]), None);
        assert_eq!(InfoRequest::parse(&[0, 0, 0, 9, b'a']), None);
        assert_eq!(InfoRequest::parse(&[0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(InfoRequest::parse(&[0, 0, 0, 0, 0, 1]), None);
        assert_eq!(InfoRequest::parse(&[0, 0, 0, 0, 0, 0, 1]), None);
        assert_eq!(
            InfoRequest::parse(&[0, 0, 0, 0, 0, 0]),
            Some(InfoRequest {
                name: vec![],
                requests: vec![]
            })
        );
    }
}
