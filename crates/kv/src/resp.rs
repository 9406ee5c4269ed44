//! RESP2, the Redis serialization protocol, as far as `csd kv serve` needs it: a request
//! parser (multibulk arrays of bulk strings, which every client library sends, and the
//! inline form a person types into `telnet`/`nc`), a reply encoder, and a reply parser
//! for clients written in Rust (the tests).
//!
//! Not from a paper: the batch-io paper (§8) drives its key-value store with YCSB from
//! inside the process; RESP is how real clients (`redis-cli`, `redis-benchmark`) reach
//! csd's store from outside.
//!
//! Choices:
//! * The parser works on a byte buffer and never blocks: it returns
//!   [`Parsed::Incomplete`] when the buffer holds only part of a command, so a connection
//!   reads more only when a command is unfinished and never waits for bytes that a
//!   complete command does not need.
//! * Framing errors are typed ([`RespError`]) with Redis's wording ("Protocol error:
//!   ..."); after one the stream position is unknown, so the server replies once and
//!   closes the connection (as Redis does). Everything that parses as a frame but is a
//!   bad *command* (unknown name, wrong arity, oversize key) is the dispatcher's business
//!   and keeps the connection open.
//! * Limits against memory exhaustion: [`MAX_ARGS`] arguments per command, [`MAX_BULK`]
//!   bytes per argument, [`MAX_COMMAND_BYTES`] per command, [`MAX_INLINE`] bytes per
//!   inline line or header line. They are far above the store's own limits
//!   (`page::MAX_KEY`, `page::MAX_VALUE`), so an oversize key or value still arrives as a
//!   command and gets the store's error without losing the connection.
//! * Lengths are parsed strictly (optional `-`, digits, at most 19 of them; no `+`,
//!   spaces or empty strings), and a bulk string must end in CRLF.

use thiserror::Error;

/// Most arguments in one command (Redis: 1024 * 1024; lower here because the parser
/// re-reads the header of an unfinished command when more bytes arrive).
pub const MAX_ARGS: usize = 64 * 1024;
/// Largest argument, bytes (Redis's proto-max-bulk-len defaults to 512 MiB).
pub const MAX_BULK: usize = 8 << 20;
/// Largest command, bytes of all its arguments together.
pub const MAX_COMMAND_BYTES: usize = 64 << 20;
/// Longest inline command or header line (`*N` / `$N`), bytes (Redis: 64 KiB).
pub const MAX_INLINE: usize = 64 * 1024;

/// A framing error: the byte stream is not RESP, so the connection cannot continue.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RespError {
    /// `*` followed by something that is not a count in range.
    #[error("Protocol error: invalid multibulk length")]
    MultibulkLength,
    /// `$` followed by something that is not a length in range.
    #[error("Protocol error: invalid bulk length")]
    BulkLength,
    /// An argument of a multibulk command does not start with `$`.
    #[error("Protocol error: expected '$', got '{0}'")]
    ExpectedBulk(char),
    /// A bulk string is not followed by CRLF.
    #[error("Protocol error: bulk string of {0} bytes not followed by CRLF")]
    MissingCrlf(usize),
    /// A header or inline line with no line end within [`MAX_INLINE`] bytes.
    #[error("Protocol error: too big {0} (no line end within {MAX_INLINE} bytes)")]
    TooLong(&'static str),
    /// The arguments of one command add up to more than [`MAX_COMMAND_BYTES`].
    #[error("Protocol error: command over {MAX_COMMAND_BYTES} bytes")]
    CommandTooBig,
    /// An inline command with an unbalanced quote.
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
    /// A reply (client side) that is not RESP2.
    #[error("Protocol error: unexpected reply type byte '{0}'")]
    ReplyType(char),
    /// A reply (client side) with a malformed length or integer.
    #[error("Protocol error: malformed reply header `{0}`")]
    ReplyHeader(String),
}

/// What [`parse_command`] found at the start of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// The buffer holds only the beginning of a command: read more.
    Incomplete,
    /// A command: its arguments (possibly none: an empty line or `*0`, which a server
    /// skips without a reply) and how many bytes it took.
    Command {
        /// The arguments, the command name first.
        args: Vec<Vec<u8>>,
        /// Bytes of the buffer it took.
        consumed: usize,
    },
}

/// Find the end of the line that starts at `from`: the index of its `\r` (or of its `\n`
/// when `lf_ok` and the line ends in a bare `\n`), and the index after the line end.
fn line_end(buf: &[u8], from: usize, lf_ok: bool) -> Option<(usize, usize)> {
    let rest = &buf[from..];
    let nl = rest.iter().position(|&b| b == b'\n')?;
    if nl > 0 && rest[nl - 1] == b'\r' {
        Some((from + nl - 1, from + nl + 1))
    } else if lf_ok {
        Some((from + nl, from + nl + 1))
    } else {
        // A bare LF inside a header line: not a line end RESP knows.
        Some((usize::MAX, from + nl + 1))
    }
}

/// Strict integer of a RESP header: `-?[0-9]{1,19}`.
fn parse_int(s: &[u8]) -> Option<i64> {
    let digits = s.strip_prefix(b"-").unwrap_or(s);
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// Parse one request at the start of `buf` (multibulk `*N` or inline).
pub fn parse_command(buf: &[u8]) -> Result<Parsed, RespError> {
    match buf.first() {
        None => Ok(Parsed::Incomplete),
        Some(b'*') => parse_multibulk(buf),
        Some(_) => parse_inline(buf),
    }
}

/// A header line `<type><int>\r\n` at `at`: its integer and the index after it, or
/// `None` when the line is not complete yet.
fn header(
    buf: &[u8],
    at: usize,
    what: &'static str,
    bad: RespError,
) -> Result<Option<(i64, usize)>, RespError> {
    match line_end(buf, at, false) {
        None if buf.len() - at > MAX_INLINE => Err(RespError::TooLong(what)),
        None => Ok(None),
        Some((usize::MAX, _)) => Err(bad),
        Some((end, next)) => match parse_int(&buf[at + 1..end]) {
            Some(n) => Ok(Some((n, next))),
            None => Err(bad),
        },
    }
}

fn parse_multibulk(buf: &[u8]) -> Result<Parsed, RespError> {
    let Some((n, mut at)) = header(buf, 0, "mbulk count string", RespError::MultibulkLength)?
    else {
        return Ok(Parsed::Incomplete);
    };
    if n > MAX_ARGS as i64 {
        return Err(RespError::MultibulkLength);
    }
    if n <= 0 {
        return Ok(Parsed::Command {
            args: Vec::new(),
            consumed: at,
        });
    }
    let n = n as usize;
    // First pass: check every header and that all bytes are there, without copying.
    let mut spans = Vec::with_capacity(n.min(1024));
    let mut total = 0usize;
    for _ in 0..n {
        match buf.get(at) {
            None => return Ok(Parsed::Incomplete),
            Some(b'$') => {}
            Some(&c) => return Err(RespError::ExpectedBulk(c as char)),
        }
        let Some((len, data)) = header(buf, at, "bulk count string", RespError::BulkLength)? else {
            return Ok(Parsed::Incomplete);
        };
        if len < 0 || len > MAX_BULK as i64 {
            return Err(RespError::BulkLength);
        }
        let len = len as usize;
        total += len;
        if total > MAX_COMMAND_BYTES {
            return Err(RespError::CommandTooBig);
        }
        if buf.len() < data + len + 2 {
            return Ok(Parsed::Incomplete);
        }
        if &buf[data + len..data + len + 2] != b"\r\n" {
            return Err(RespError::MissingCrlf(len));
        }
        spans.push((data, len));
        at = data + len + 2;
    }
    let args = spans
        .into_iter()
        .map(|(s, l)| buf[s..s + l].to_vec())
        .collect();
    Ok(Parsed::Command { args, consumed: at })
}

fn hex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// Split an inline command into arguments the way Redis's `sdssplitargs` does: blanks
/// separate, `"..."` takes `\n \r \t \b \a \\ \" \xHH` escapes, `'...'` takes `\'`; a
/// closing quote must be followed by a blank or the end.
pub fn split_inline(line: &[u8]) -> Result<Vec<Vec<u8>>, RespError> {
    let mut out = Vec::new();
    let mut i = 0;
    let n = line.len();
    loop {
        while i < n && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= n {
            return Ok(out);
        }
        let mut cur = Vec::new();
        let (mut dq, mut sq) = (false, false);
        loop {
            if dq {
                if i >= n {
                    return Err(RespError::UnbalancedQuotes);
                }
                let c = line[i];
                if c == b'\\'
                    && i + 3 < n
                    && line[i + 1] == b'x'
                    && let (Some(h), Some(l)) = (hex(line[i + 2]), hex(line[i + 3]))
                {
                    cur.push(h * 16 + l);
                    i += 4;
                    continue;
                }
                if c == b'\\' && i + 1 < n {
                    cur.push(match line[i + 1] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        o => o,
                    });
                    i += 2;
                    continue;
                }
                if c == b'"' {
                    if i + 1 < n && !line[i + 1].is_ascii_whitespace() {
                        return Err(RespError::UnbalancedQuotes);
                    }
                    i += 1;
                    break;
                }
                cur.push(c);
                i += 1;
            } else if sq {
                if i >= n {
                    return Err(RespError::UnbalancedQuotes);
                }
                let c = line[i];
                if c == b'\\' && i + 1 < n && line[i + 1] == b'\'' {
                    cur.push(b'\'');
                    i += 2;
                    continue;
                }
                if c == b'\'' {
                    if i + 1 < n && !line[i + 1].is_ascii_whitespace() {
                        return Err(RespError::UnbalancedQuotes);
                    }
                    i += 1;
                    break;
                }
                cur.push(c);
                i += 1;
            } else {
                if i >= n || line[i].is_ascii_whitespace() {
                    break;
                }
                match line[i] {
                    b'"' => dq = true,
                    b'\'' => sq = true,
                    c => cur.push(c),
                }
                i += 1;
            }
        }
        out.push(cur);
    }
}

fn parse_inline(buf: &[u8]) -> Result<Parsed, RespError> {
    match line_end(buf, 0, true) {
        None if buf.len() > MAX_INLINE => Err(RespError::TooLong("inline request")),
        None => Ok(Parsed::Incomplete),
        Some((end, next)) => Ok(Parsed::Command {
            args: split_inline(&buf[..end])?,
            consumed: next,
        }),
    }
}

/// A RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+text` (no CR or LF inside: they are replaced by blanks).
    Simple(String),
    /// `-text`; the text starts with an error code such as `ERR` or `WRONGTYPE`.
    Error(String),
    /// `:n`.
    Int(i64),
    /// `$len` and the bytes.
    Bulk(Vec<u8>),
    /// `$-1`: no value.
    Nil,
    /// `*n` and the elements.
    Array(Vec<Reply>),
    /// `*-1`: no array.
    NilArray,
}

fn one_line(s: &str) -> String {
    s.replace(['\r', '\n'], " ")
}

impl Reply {
    /// `+OK`.
    pub fn ok() -> Reply {
        Reply::Simple("OK".into())
    }

    /// `-ERR msg`.
    pub fn err(msg: impl std::fmt::Display) -> Reply {
        Reply::Error(format!("ERR {msg}"))
    }

    /// A bulk string of `s`.
    pub fn bulk(s: impl AsRef<[u8]>) -> Reply {
        Reply::Bulk(s.as_ref().to_vec())
    }

    /// Is it an error reply?
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// Append the wire form to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Reply::Simple(s) => {
                out.push(b'+');
                out.extend_from_slice(one_line(s).as_bytes());
            }
            Reply::Error(s) => {
                out.push(b'-');
                out.extend_from_slice(one_line(s).as_bytes());
            }
            Reply::Int(n) => {
                out.push(b':');
                out.extend_from_slice(n.to_string().as_bytes());
            }
            Reply::Bulk(b) => {
                out.push(b'$');
                out.extend_from_slice(b.len().to_string().as_bytes());
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(b);
            }
            Reply::Nil => out.extend_from_slice(b"$-1"),
            Reply::Array(v) => {
                out.push(b'*');
                out.extend_from_slice(v.len().to_string().as_bytes());
                out.extend_from_slice(b"\r\n");
                for r in v {
                    r.encode(out);
                }
                return;
            }
            Reply::NilArray => out.extend_from_slice(b"*-1"),
        }
        out.extend_from_slice(b"\r\n");
    }

    /// The wire form.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode(&mut v);
        v
    }
}

/// The wire form of a command as clients send it (a multibulk array of bulk strings).
pub fn encode_command<A: AsRef<[u8]>>(args: &[A]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        let a = a.as_ref();
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Parse one reply at the start of `buf` (client side): the reply and the bytes it took,
/// or `None` when the buffer holds only part of it.
pub fn parse_reply(buf: &[u8]) -> Result<Option<(Reply, usize)>, RespError> {
    parse_reply_at(buf, 0, 0)
}

fn parse_reply_at(
    buf: &[u8],
    at: usize,
    depth: usize,
) -> Result<Option<(Reply, usize)>, RespError> {
    let Some(&t) = buf.get(at) else {
        return Ok(None);
    };
    let Some((end, next)) = line_end(buf, at, false) else {
        return Ok(None);
    };
    let bad = || RespError::ReplyHeader(String::from_utf8_lossy(&buf[at..next]).into_owned());
    // A bare LF, or a line of only CR LF (no type byte before it).
    if end == usize::MAX || end <= at {
        return Err(bad());
    }
    let text = &buf[at + 1..end];
    let int = || parse_int(text).ok_or_else(bad);
    match t {
        b'+' => Ok(Some((
            Reply::Simple(String::from_utf8_lossy(text).into_owned()),
            next,
        ))),
        b'-' => Ok(Some((
            Reply::Error(String::from_utf8_lossy(text).into_owned()),
            next,
        ))),
        b':' => Ok(Some((Reply::Int(int()?), next))),
        b'$' => {
            let n = int()?;
            if n < 0 {
                return Ok(Some((Reply::Nil, next)));
            }
            let n = n as usize;
            if buf.len() < next + n + 2 {
                return Ok(None);
            }
            if &buf[next + n..next + n + 2] != b"\r\n" {
                return Err(RespError::MissingCrlf(n));
            }
            Ok(Some((
                Reply::Bulk(buf[next..next + n].to_vec()),
                next + n + 2,
            )))
        }
        b'*' => {
            let n = int()?;
            if n < 0 {
                return Ok(Some((Reply::NilArray, next)));
            }
            if depth > 32 {
                return Err(bad());
            }
            let mut v = Vec::with_capacity((n as usize).min(1024));
            let mut pos = next;
            for _ in 0..n {
                match parse_reply_at(buf, pos, depth + 1)? {
                    None => return Ok(None),
                    Some((r, p)) => {
                        v.push(r);
                        pos = p;
                    }
                }
            }
            Ok(Some((Reply::Array(v), pos)))
        }
        c => Err(RespError::ReplyType(c as char)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cmd(buf: &[u8]) -> (Vec<Vec<u8>>, usize) {
        match parse_command(buf) {
            Ok(Parsed::Command { args, consumed }) => (args, consumed),
            other => panic!("{other:?} for {:?}", String::from_utf8_lossy(buf)),
        }
    }

    fn strs(args: &[Vec<u8>]) -> Vec<String> {
        args.iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect()
    }

    #[test]
    fn multibulk_parses_and_every_prefix_is_incomplete() {
        let wire = encode_command(&["SET", "key", "v\r\nal"]);
        let (args, n) = cmd(&wire);
        assert_eq!(strs(&args), ["SET", "key", "v\r\nal"]);
        assert_eq!(n, wire.len());
        for cut in 0..wire.len() {
            assert_eq!(parse_command(&wire[..cut]), Ok(Parsed::Incomplete), "{cut}");
        }
    }

    #[test]
    fn pipelined_commands_parse_one_after_another() {
        let mut wire = encode_command(&["PING"]);
        wire.extend(encode_command(&["GET", "a"]));
        wire.extend(b"SET b 1\r\n");
        let (a, n1) = cmd(&wire);
        let (b, n2) = cmd(&wire[n1..]);
        let (c, n3) = cmd(&wire[n1 + n2..]);
        assert_eq!(strs(&a), ["PING"]);
        assert_eq!(strs(&b), ["GET", "a"]);
        assert_eq!(strs(&c), ["SET", "b", "1"]);
        assert_eq!(n1 + n2 + n3, wire.len());
    }

    #[test]
    fn inline_commands_split_like_redis() {
        assert_eq!(strs(&cmd(b"set a b\r\n").0), ["set", "a", "b"]);
        assert_eq!(strs(&cmd(b"  get   x \n").0), ["get", "x"]);
        assert_eq!(
            strs(&cmd(b"set \"a b\" 'c d' \"\\x41\\n\"\r\n").0),
            ["set", "a b", "c d", "A\n"]
        );
        assert_eq!(cmd(b"\r\n"), (vec![], 2));
        assert_eq!(parse_command(b"get x"), Ok(Parsed::Incomplete));
        assert_eq!(
            parse_command(b"set \"a b\r\n"),
            Err(RespError::UnbalancedQuotes)
        );
        assert_eq!(
            parse_command(b"set \"a\"b\r\n"),
            Err(RespError::UnbalancedQuotes)
        );
    }

    #[test]
    fn empty_and_negative_multibulk_are_skipped() {
        assert_eq!(cmd(b"*0\r\n"), (vec![], 4));
        assert_eq!(cmd(b"*-1\r\n"), (vec![], 5));
    }

    #[test]
    fn malformed_frames_are_typed_errors() {
        let e = |b: &[u8]| parse_command(b).unwrap_err();
        assert_eq!(e(b"*x\r\n"), RespError::MultibulkLength);
        assert_eq!(e(b"*\r\n"), RespError::MultibulkLength);
        assert_eq!(e(b"*+1\r\n"), RespError::MultibulkLength);
        assert_eq!(e(b"*1 \r\n"), RespError::MultibulkLength);
        assert_eq!(e(b"*99999999999\r\n"), RespError::MultibulkLength);
        assert_eq!(e(b"*1\n$1\r\na\r\n"), RespError::MultibulkLength);
        assert_eq!(e(b"*1\r\n$abc\r\n"), RespError::BulkLength);
        assert_eq!(e(b"*1\r\n$-3\r\n"), RespError::BulkLength);
        assert_eq!(e(b"*1\r\n$99999999999\r\n"), RespError::BulkLength);
        assert_eq!(e(b"*1\r\n:1\r\n"), RespError::ExpectedBulk(':'));
        assert_eq!(e(b"*1\r\n$1\r\nabc\r\n"), RespError::MissingCrlf(1));
        assert_eq!(
            e(b"*2\r\n$1\r\na\r\n$2\r\nbcX\r\n"),
            RespError::MissingCrlf(2)
        );
        let mut long = b"*1".to_vec();
        long.extend(std::iter::repeat_n(b'1', MAX_INLINE + 10));
        assert_eq!(e(&long), RespError::TooLong("mbulk count string"));
        let inline = vec![b'a'; MAX_INLINE + 1];
        assert_eq!(e(&inline), RespError::TooLong("inline request"));
        assert!(e(b"*1\r\n$x\r\n").to_string().starts_with("Protocol error"));
    }

    #[test]
    fn limits_refuse_huge_commands_before_their_bytes_arrive() {
        let head = format!("*1\r\n${}\r\n", MAX_BULK + 1);
        assert_eq!(parse_command(head.as_bytes()), Err(RespError::BulkLength));
        let head = format!("*{}\r\n", MAX_ARGS + 1);
        assert_eq!(
            parse_command(head.as_bytes()),
            Err(RespError::MultibulkLength)
        );
        let mut head = format!("*{}\r\n", 10).into_bytes();
        for _ in 0..9 {
            head.extend(format!("${MAX_BULK}\r\n").as_bytes());
            head.extend(std::iter::repeat_n(b'x', MAX_BULK));
            head.extend(b"\r\n");
        }
        assert_eq!(parse_command(&head), Err(RespError::CommandTooBig));
    }

    #[test]
    fn replies_encode_and_parse_back() {
        let r = Reply::Array(vec![
            Reply::ok(),
            Reply::err("bad\r\nthing"),
            Reply::Int(-42),
            Reply::bulk("a\r\nb"),
            Reply::Nil,
            Reply::NilArray,
            Reply::Array(vec![]),
        ]);
        let w = r.to_bytes();
        assert!(w.starts_with(
            b"*7\r\n+OK\r\n-ERR bad  thing\r\n:-42\r\n$4\r\na\r\nb\r\n$-1\r\n*-1\r\n*0\r\n"
        ));
        let (back, n) = parse_reply(&w).unwrap().unwrap();
        assert_eq!(n, w.len());
        match back {
            Reply::Array(v) => {
                assert_eq!(v[1], Reply::Error("ERR bad  thing".into()));
                assert_eq!(v[3], Reply::bulk("a\r\nb"));
            }
            other => panic!("{other:?}"),
        }
        for cut in 0..w.len() {
            assert_eq!(parse_reply(&w[..cut]), Ok(None), "{cut}");
        }
        assert!(parse_reply(b"?x\r\n").is_err());
        assert!(parse_reply(b":x\r\n").is_err());
    }

    proptest! {
        #[test]
        fn any_command_round_trips_at_any_split(
            args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..6),
            cut in 0usize..400,
        ) {
            let wire = encode_command(&args);
            let cut = cut.min(wire.len());
            if cut < wire.len() {
                prop_assert_eq!(parse_command(&wire[..cut]), Ok(Parsed::Incomplete));
            }
            let mut two = wire.clone();
            two.extend_from_slice(&wire);
            match parse_command(&two) {
                Ok(Parsed::Command { args: got, consumed }) => {
                    prop_assert_eq!(got, args);
                    prop_assert_eq!(consumed, wire.len());
                }
                other => prop_assert!(false, "{:?}", other),
            }
        }

        /// A reply line of only CR LF has no type byte: an error, not a panic (the
        /// parser sliced past the line's end; found by the property below).
        #[test]
        fn a_reply_line_without_a_type_byte_is_an_error(depth in 0usize..3) {
            let mut bytes = b"*1\r\n".repeat(depth);
            bytes.extend_from_slice(b"\r\n");
            prop_assert!(parse_reply(&bytes).is_err());
        }

        #[test]
        fn garbage_never_panics_and_never_overruns(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(Parsed::Command { consumed, .. }) = parse_command(&bytes) {
                prop_assert!(consumed > 0 && consumed <= bytes.len());
            }
            if let Ok(Some((_, n))) = parse_reply(&bytes) {
                prop_assert!(n > 0 && n <= bytes.len());
            }
        }
    }
}
