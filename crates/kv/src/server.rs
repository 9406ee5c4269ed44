//! A Redis-protocol (RESP2, [`crate::resp`]) server in front of one [`Store`]: the command
//! dispatcher and the TCP connection loop behind `csd kv serve`, so that `redis-cli`,
//! `redis-benchmark` and any Redis client library reach the batch-io paper's key-value
//! store (§8.1.2) on either interface.
//!
//! Commands: GET, SET (NX / XX / GET; no expiry), DEL, EXISTS, MGET, MSET, SCAN (MATCH,
//! COUNT), KEYS, DBSIZE, PING, ECHO, INFO (the store's and the device's figures), FLUSHALL
//! / FLUSHDB, SAVE, and what clients send when they start: COMMAND (COUNT, LIST; DOCS and
//! INFO answer an empty array), CONFIG GET (save, appendonly, databases) / RESETSTAT,
//! CLIENT SETNAME / GETNAME / ID / SETINFO, SELECT 0, HELLO 2, QUIT.
//!
//! Choices:
//! * **Acknowledgement = durability.** A connection takes every complete command it has
//!   buffered (a pipeline, up to [`ServerConfig::max_batch`]), runs them under one hold of
//!   the store's lock, and if any of them changed the store and [`Store::acked`] is behind
//!   [`Store::last_change`], calls [`Store::sync`] before any reply leaves: `+OK` to a SET
//!   means the change is on the device and survives a SIGKILL or a power cut. One sync
//!   covers the whole pipeline (group commit per connection). If the sync fails, every
//!   write of the batch is answered with an error ("not durable") instead.
//! * **One store, many connections**: a thread per connection, the store behind a mutex;
//!   the store's own work (sealing, host GC, checkpoints) happens inside the operations.
//! * **Bad input**: a framing error (see [`crate::resp`]) gets one `-ERR Protocol error`
//!   and the connection is closed, as Redis does; an unknown command, wrong arity, a bad
//!   option, an oversize key or value gets `-ERR ...` and the connection goes on. Writes
//!   check every key and value of the command before changing anything; MSET is all or
//!   nothing against bad input and against a crash ([`Store::put_all`]).
//! * **SCAN cursors** are numbers (redis-cli parses them as integers): the server keeps
//!   the key a scan resumes at under a cursor id (the last [`MAX_CURSORS`] scans; ids start
//!   at a base from the clock, so a cursor from an earlier server run is refused rather
//!   than resuming somewhere else). A scan walks keys in order from that key, so every key
//!   present for the whole iteration is returned exactly once. COUNT is the number of keys
//!   visited (MATCH filters after), as in Redis.
//! * **Stopping**: the accept loop polls a stop flag; at stop it shuts the read side of
//!   every connection, so each connection thread sees end-of-file, and joins them. Reads
//!   poll with a timeout, so nothing waits for bytes that never come.

use crate::page::{MAX_KEY, MAX_VALUE};
use crate::resp::{Parsed, Reply, parse_command};
use crate::{KvError, Store};
use csd_host::CommandIssuer;
use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// SCAN cursors remembered (older ones are refused with an error naming the fix).
pub const MAX_CURSORS: usize = 4096;

/// Commands and their Redis arity (negative: at least that many arguments, the name
/// included).
const COMMANDS: &[(&str, i32)] = &[
    ("get", 2),
    ("set", -3),
    ("del", -2),
    ("exists", -2),
    ("mget", -2),
    ("mset", -3),
    ("scan", -2),
    ("keys", 2),
    ("dbsize", 1),
    ("ping", -1),
    ("echo", 2),
    ("info", -1),
    ("flushall", -1),
    ("flushdb", -1),
    ("save", 1),
    ("select", 2),
    ("quit", -1),
    ("hello", -1),
    ("command", -1),
    ("config", -2),
    ("client", -2),
];

/// Server parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// Connections served at once; more are refused with an error.
    pub max_connections: usize,
    /// Most pipelined commands run under one lock hold (and one sync).
    pub max_batch: usize,
    /// How often a blocked read wakes to look at the stop flag.
    pub read_poll: Duration,
    /// A reply that cannot be written within this long ends the connection.
    pub write_timeout: Duration,
    /// Print connection events to stderr.
    pub verbose: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_connections: 1024,
            max_batch: 1024,
            read_poll: Duration::from_millis(100),
            write_timeout: Duration::from_secs(30),
            verbose: false,
        }
    }
}

/// Counters of the server's work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Connections open now.
    pub connections_open: u64,
    /// Connections accepted since start.
    pub connections_total: u64,
    /// Connections refused (too many).
    pub connections_refused: u64,
    /// Commands run.
    pub commands: u64,
    /// Commands answered with an error.
    pub errors: u64,
    /// Connections closed for a framing error.
    pub protocol_errors: u64,
    /// Syncs that made acknowledged writes durable.
    pub syncs: u64,
}

#[derive(Default)]
struct Counters {
    open: AtomicU64,
    total: AtomicU64,
    refused: AtomicU64,
    commands: AtomicU64,
    errors: AtomicU64,
    protocol_errors: AtomicU64,
    syncs: AtomicU64,
}

/// Per-connection state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Session {
    /// Client id (CLIENT ID).
    pub id: u64,
    /// CLIENT SETNAME.
    pub name: Option<Vec<u8>>,
    /// QUIT was received: reply, then close.
    pub quit: bool,
}

struct Cursors {
    next: u64,
    keys: HashMap<u64, Vec<u8>>,
    order: VecDeque<u64>,
}

impl Cursors {
    fn new() -> Cursors {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_secs());
        Cursors {
            next: ((secs & 0x7fff_ffff) << 24).max(1),
            keys: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    fn remember(&mut self, key: Vec<u8>) -> u64 {
        let id = self.next;
        self.next += 1;
        self.keys.insert(id, key);
        self.order.push_back(id);
        while self.order.len() > MAX_CURSORS {
            if let Some(old) = self.order.pop_front() {
                self.keys.remove(&old);
            }
        }
        id
    }
}

/// The RESP2 server of one store.
pub struct Server<I: CommandIssuer> {
    store: Mutex<Store<I>>,
    cursors: Mutex<Cursors>,
    counters: Counters,
    cfg: ServerConfig,
    started: Instant,
    next_client: AtomicU64,
    smart0: Option<csd_device::SmartLog>,
    stats0: crate::StoreStats,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn wrong_arity(name: &str) -> Reply {
    Reply::err(format!("wrong number of arguments for '{name}' command"))
}

fn syntax() -> Reply {
    Reply::err("syntax error")
}

fn key_ok(k: &[u8]) -> Result<(), KvError> {
    if k.is_empty() || k.len() > MAX_KEY {
        return Err(KvError::KeySize {
            len: k.len(),
            max: MAX_KEY,
        });
    }
    Ok(())
}

fn value_ok(v: &[u8]) -> Result<(), KvError> {
    if v.len() > MAX_VALUE {
        return Err(KvError::ValueSize {
            len: v.len(),
            max: MAX_VALUE,
        });
    }
    Ok(())
}

fn text(a: &[u8]) -> String {
    String::from_utf8_lossy(a).into_owned()
}

fn int_arg(a: &[u8]) -> Result<i64, Reply> {
    std::str::from_utf8(a)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| Reply::err("value is not an integer or out of range"))
}

/// Redis-style glob match: `*`, `?`, `[abc]`, `[a-z]`, `[^a]`, `\x`.
pub fn glob_match(pattern: &[u8], s: &[u8]) -> bool {
    // One character class or literal at `p`: does it match `c`, and where does it end?
    fn one(pat: &[u8], mut p: usize, c: u8) -> (bool, usize) {
        match pat[p] {
            b'?' => (true, p + 1),
            b'\\' if p + 1 < pat.len() => (pat[p + 1] == c, p + 2),
            b'[' => {
                p += 1;
                let neg = p < pat.len() && pat[p] == b'^';
                if neg {
                    p += 1;
                }
                let mut hit = false;
                let mut first = true;
                while p < pat.len() && (pat[p] != b']' || first) {
                    first = false;
                    if pat[p] == b'\\' && p + 1 < pat.len() {
                        hit |= pat[p + 1] == c;
                        p += 2;
                    } else if p + 2 < pat.len() && pat[p + 1] == b'-' && pat[p + 2] != b']' {
                        let (a, b) = (pat[p].min(pat[p + 2]), pat[p].max(pat[p + 2]));
                        hit |= (a..=b).contains(&c);
                        p += 3;
                    } else {
                        hit |= pat[p] == c;
                        p += 1;
                    }
                }
                (hit != neg, (p + 1).min(pat.len()))
            }
            l => (l == c, p + 1),
        }
    }
    let (mut p, mut i) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            p += 1;
            star = Some((p, i));
            continue;
        }
        if p < pattern.len() {
            let (hit, np) = one(pattern, p, s[i]);
            if hit {
                p = np;
                i += 1;
                continue;
            }
        }
        match star {
            Some((sp, si)) => {
                p = sp;
                i = si + 1;
                star = Some((sp, si + 1));
            }
            None => return false,
        }
    }
    pattern[p.min(pattern.len())..].iter().all(|&c| c == b'*')
}

impl<I: CommandIssuer> Server<I> {
    /// A server of `store` (its counters and the device's SMART figures at this moment
    /// are the zero of INFO's "since start" figures).
    pub fn new(mut store: Store<I>, cfg: ServerConfig) -> Server<I> {
        let smart0 = store.smart().ok();
        let stats0 = store.stats();
        Server {
            store: Mutex::new(store),
            cursors: Mutex::new(Cursors::new()),
            counters: Counters::default(),
            cfg,
            started: Instant::now(),
            next_client: AtomicU64::new(1),
            smart0,
            stats0,
        }
    }

    /// A new client session.
    pub fn session(&self) -> Session {
        Session {
            id: self.next_client.fetch_add(1, Ordering::Relaxed),
            ..Session::default()
        }
    }

    /// The server's counters.
    pub fn stats(&self) -> ServerStats {
        let c = &self.counters;
        ServerStats {
            connections_open: c.open.load(Ordering::Relaxed),
            connections_total: c.total.load(Ordering::Relaxed),
            connections_refused: c.refused.load(Ordering::Relaxed),
            commands: c.commands.load(Ordering::Relaxed),
            errors: c.errors.load(Ordering::Relaxed),
            protocol_errors: c.protocol_errors.load(Ordering::Relaxed),
            syncs: c.syncs.load(Ordering::Relaxed),
        }
    }

    /// Run `f` on the store (under its lock).
    pub fn with_store<R>(&self, f: impl FnOnce(&mut Store<I>) -> R) -> R {
        f(&mut lock(&self.store))
    }

    /// The store back (after [`Server::serve`] returned).
    pub fn into_store(self) -> Store<I> {
        self.store.into_inner().unwrap_or_else(|e| e.into_inner())
    }

    /// Run one command (see [`Server::execute_batch`]).
    pub fn execute(&self, args: &[Vec<u8>], session: &mut Session) -> Reply {
        self.execute_batch(std::slice::from_ref(&args.to_vec()), session)
            .pop()
            .unwrap_or(Reply::NilArray)
    }

    /// Run pipelined commands under one hold of the store's lock and make every change
    /// durable before returning the replies (one per command run; commands after a QUIT
    /// are not run).
    pub fn execute_batch(&self, cmds: &[Vec<Vec<u8>>], session: &mut Session) -> Vec<Reply> {
        let mut store = lock(&self.store);
        let mut replies = Vec::with_capacity(cmds.len());
        let mut writes = Vec::new();
        for args in cmds {
            if session.quit {
                break;
            }
            let (r, wrote) = self.dispatch(&mut store, args, session);
            if wrote {
                writes.push(replies.len());
            }
            replies.push(r);
        }
        if !writes.is_empty() && store.acked() < store.last_change() {
            self.counters.syncs.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = store.sync() {
                for i in writes {
                    if !replies[i].is_error() {
                        replies[i] = Reply::err(format!(
                            "not durable, the change may or may not survive a restart: {e}"
                        ));
                    }
                }
            }
        }
        drop(store);
        let errors = replies.iter().filter(|r| r.is_error()).count() as u64;
        self.counters
            .commands
            .fetch_add(replies.len() as u64, Ordering::Relaxed);
        self.counters.errors.fetch_add(errors, Ordering::Relaxed);
        replies
    }

    /// One command; the flag says whether it may have changed the store.
    fn dispatch(&self, st: &mut Store<I>, args: &[Vec<u8>], s: &mut Session) -> (Reply, bool) {
        let Some(first) = args.first() else {
            return (Reply::err("empty command"), false);
        };
        let name = text(first).to_ascii_lowercase();
        let Some(&(_, arity)) = COMMANDS.iter().find(|(n, _)| *n == name) else {
            let mut msg = format!(
                "unknown command '{}', with args beginning with:",
                text(first)
            );
            for a in args.iter().skip(1).take(8) {
                msg.push_str(&format!(" '{}'", text(&a[..a.len().min(64)])));
            }
            return (Reply::err(msg), false);
        };
        let n = args.len() as i32;
        if (arity > 0 && n != arity) || (arity < 0 && n < -arity) {
            return (wrong_arity(&name), false);
        }
        let kv = |r: Result<Reply, KvError>| r.unwrap_or_else(Reply::err);
        let a = &args[1..];
        match name.as_str() {
            "get" => (
                kv(st.get(&a[0]).map(|v| v.map_or(Reply::Nil, Reply::Bulk))),
                false,
            ),
            "set" => self.set(st, a),
            "del" => (kv(self.del(st, a)), true),
            "exists" => (kv(self.exists(st, a)), false),
            "mget" => (kv(self.mget(st, a)), false),
            "mset" => {
                if !a.len().is_multiple_of(2) {
                    return (wrong_arity("mset"), false);
                }
                (kv(self.mset(st, a)), true)
            }
            "scan" => (self.scan(st, a), false),
            "keys" => (kv(self.keys(st, &a[0])), false),
            "dbsize" => (kv(st.len().map(|n| Reply::Int(n as i64))), false),
            "ping" => match a.len() {
                0 => (Reply::Simple("PONG".into()), false),
                1 => (Reply::Bulk(a[0].clone()), false),
                _ => (wrong_arity("ping"), false),
            },
            "echo" => (Reply::Bulk(a[0].clone()), false),
            "info" => (self.info(st, a), false),
            "flushall" | "flushdb" => match a {
                [] => (kv(st.clear().map(|_| Reply::ok())), true),
                [m] if matches!(text(m).to_ascii_lowercase().as_str(), "sync" | "async") => {
                    (kv(st.clear().map(|_| Reply::ok())), true)
                }
                _ => (syntax(), false),
            },
            "save" => (
                kv(st.sync().and_then(|_| st.checkpoint()).map(|_| Reply::ok())),
                false,
            ),
            "select" => match int_arg(&a[0]) {
                Ok(0) => (Reply::ok(), false),
                Ok(_) => (
                    Reply::err("DB index is out of range (this server has one database, 0)"),
                    false,
                ),
                Err(r) => (r, false),
            },
            "quit" => {
                s.quit = true;
                (Reply::ok(), false)
            }
            "hello" => (self.hello(a, s), false),
            "command" => (command(a), false),
            "config" => (self.config(st, a), false),
            "client" => (client(a, s), false),
            _ => (Reply::err(format!("unknown command '{name}'")), false),
        }
    }

    fn set(&self, st: &mut Store<I>, a: &[Vec<u8>]) -> (Reply, bool) {
        let (k, v) = (&a[0], &a[1]);
        let (mut nx, mut xx, mut get) = (false, false, false);
        for o in &a[2..] {
            match text(o).to_ascii_uppercase().as_str() {
                "NX" => nx = true,
                "XX" => xx = true,
                "GET" => get = true,
                e @ ("EX" | "PX" | "EXAT" | "PXAT" | "KEEPTTL") => {
                    return (
                        Reply::err(format!(
                            "SET {e}: keys do not expire in this store (no TTLs)"
                        )),
                        false,
                    );
                }
                _ => return (syntax(), false),
            }
        }
        if nx && xx {
            return (syntax(), false);
        }
        if let Err(e) = key_ok(k).and_then(|_| value_ok(v)) {
            return (Reply::err(e), false);
        }
        let old = if nx || xx || get {
            match st.get(k) {
                Ok(o) => o,
                Err(e) => return (Reply::err(e), false),
            }
        } else {
            None
        };
        let skip = (nx && old.is_some()) || (xx && old.is_none());
        let done = if skip {
            Reply::Nil
        } else {
            match st.put(k, v) {
                Ok(_) => Reply::ok(),
                Err(e) => return (Reply::err(e), true),
            }
        };
        let r = if get {
            old.map_or(Reply::Nil, Reply::Bulk)
        } else {
            done
        };
        (r, !skip)
    }

    fn del(&self, st: &mut Store<I>, keys: &[Vec<u8>]) -> Result<Reply, KvError> {
        for k in keys {
            key_ok(k)?;
        }
        let mut n = 0;
        for k in keys {
            n += st.delete(k)? as i64;
        }
        Ok(Reply::Int(n))
    }

    fn exists(&self, st: &mut Store<I>, keys: &[Vec<u8>]) -> Result<Reply, KvError> {
        let mut n = 0;
        for k in keys {
            n += st.contains(k)? as i64;
        }
        Ok(Reply::Int(n))
    }

    fn mget(&self, st: &mut Store<I>, keys: &[Vec<u8>]) -> Result<Reply, KvError> {
        let mut v = Vec::with_capacity(keys.len());
        for k in keys {
            // An impossible key cannot exist: nil, as Redis answers for a missing key.
            v.push(match key_ok(k) {
                Ok(()) => st.get(k)?.map_or(Reply::Nil, Reply::Bulk),
                Err(_) => Reply::Nil,
            });
        }
        Ok(Reply::Array(v))
    }

    fn mset(&self, st: &mut Store<I>, a: &[Vec<u8>]) -> Result<Reply, KvError> {
        for p in a.chunks(2) {
            key_ok(&p[0])?;
            value_ok(&p[1])?;
        }
        let pairs: Vec<(&[u8], &[u8])> = a
            .chunks(2)
            .map(|p| (p[0].as_slice(), p[1].as_slice()))
            .collect();
        st.put_all(&pairs)?;
        Ok(Reply::ok())
    }

    fn scan(&self, st: &mut Store<I>, a: &[Vec<u8>]) -> Reply {
        let cursor = match std::str::from_utf8(&a[0])
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
        {
            Some(c) => c,
            None => return Reply::err("invalid cursor"),
        };
        let (mut pattern, mut count) = (None, 10usize);
        let mut i = 1;
        while i < a.len() {
            let opt = text(&a[i]).to_ascii_uppercase();
            let Some(val) = a.get(i + 1) else {
                return syntax();
            };
            match opt.as_str() {
                "MATCH" => pattern = Some(val.clone()),
                "COUNT" => match int_arg(val) {
                    Ok(n) if n >= 1 => count = (n as usize).min(100_000),
                    Ok(_) => return syntax(),
                    Err(r) => return r,
                },
                "TYPE" => {
                    if !text(val).eq_ignore_ascii_case("string") {
                        return Reply::Array(vec![Reply::bulk("0"), Reply::Array(vec![])]);
                    }
                }
                _ => return syntax(),
            }
            i += 2;
        }
        let start = if cursor == 0 {
            Vec::new()
        } else {
            match lock(&self.cursors).keys.get(&cursor) {
                Some(k) => k.clone(),
                None => {
                    return Reply::err(format!(
                        "invalid cursor {cursor}: unknown or expired (the server keeps the \
                         last {MAX_CURSORS} scans); start again with SCAN 0"
                    ));
                }
            }
        };
        let mut got = match st.scan(&start, count + 1) {
            Ok(g) => g,
            Err(e) => return Reply::err(e),
        };
        let next = if got.len() > count {
            let resume = got.swap_remove(count).0;
            got.truncate(count);
            lock(&self.cursors).remember(resume)
        } else {
            0
        };
        let keys = got
            .into_iter()
            .filter(|(k, _)| pattern.as_ref().is_none_or(|p| glob_match(p, k)))
            .map(|(k, _)| Reply::Bulk(k))
            .collect();
        Reply::Array(vec![Reply::bulk(next.to_string()), Reply::Array(keys)])
    }

    fn keys(&self, st: &mut Store<I>, pattern: &[u8]) -> Result<Reply, KvError> {
        let mut out = Vec::new();
        let mut start = Vec::new();
        loop {
            let got = st.scan(&start, 1025)?;
            let more = got.len() > 1024;
            for (k, _) in got.iter().take(1024) {
                if glob_match(pattern, k) {
                    out.push(Reply::Bulk(k.clone()));
                }
            }
            if !more {
                return Ok(Reply::Array(out));
            }
            start = got[1024].0.clone();
        }
    }

    fn hello(&self, a: &[Vec<u8>], s: &mut Session) -> Reply {
        let mut i = 0;
        if let Some(v) = a.first() {
            match int_arg(v) {
                Ok(2) => i = 1,
                Ok(_) => {
                    return Reply::Error(
                        "NOPROTO unsupported protocol version: this server speaks RESP2".into(),
                    );
                }
                Err(r) => return r,
            }
        }
        while i < a.len() {
            match text(&a[i]).to_ascii_uppercase().as_str() {
                "AUTH" if i + 2 < a.len() => i += 3,
                "SETNAME" if i + 1 < a.len() => {
                    s.name = Some(a[i + 1].clone());
                    i += 2;
                }
                _ => return syntax(),
            }
        }
        Reply::Array(vec![
            Reply::bulk("server"),
            Reply::bulk("csd-kv"),
            Reply::bulk("version"),
            Reply::bulk(env!("CARGO_PKG_VERSION")),
            Reply::bulk("proto"),
            Reply::Int(2),
            Reply::bulk("id"),
            Reply::Int(s.id as i64),
            Reply::bulk("mode"),
            Reply::bulk("standalone"),
            Reply::bulk("role"),
            Reply::bulk("master"),
            Reply::bulk("modules"),
            Reply::Array(vec![]),
        ])
    }

    fn config(&self, st: &mut Store<I>, a: &[Vec<u8>]) -> Reply {
        let sub = text(&a[0]).to_ascii_uppercase();
        match sub.as_str() {
            "GET" if a.len() >= 2 => {
                let known = [("save", ""), ("appendonly", "no"), ("databases", "1")];
                let mut out = Vec::new();
                for (k, v) in known {
                    if a[1..]
                        .iter()
                        .any(|p| glob_match(&p.to_ascii_lowercase(), k.as_bytes()))
                    {
                        out.push(Reply::bulk(k));
                        out.push(Reply::bulk(v));
                    }
                }
                Reply::Array(out)
            }
            "RESETSTAT" => {
                st.reset_stats();
                for c in [
                    &self.counters.commands,
                    &self.counters.errors,
                    &self.counters.protocol_errors,
                    &self.counters.syncs,
                ] {
                    c.store(0, Ordering::Relaxed);
                }
                Reply::ok()
            }
            "SET" => {
                Reply::err("CONFIG SET is not supported: restart `csd kv serve` with other options")
            }
            _ => Reply::err(format!(
                "unknown subcommand or wrong number of arguments for 'config|{}'",
                sub.to_ascii_lowercase()
            )),
        }
    }

    fn info(&self, st: &mut Store<I>, a: &[Vec<u8>]) -> Reply {
        let want: Vec<String> = a.iter().map(|x| text(x).to_ascii_lowercase()).collect();
        let all = want.is_empty()
            || want
                .iter()
                .any(|w| matches!(w.as_str(), "all" | "default" | "everything"));
        let show = |sec: &str| all || want.iter().any(|w| w == sec);
        let mut out = String::new();
        let mut line = |k: &str, v: String| {
            out.push_str(k);
            out.push(':');
            out.push_str(&v);
            out.push_str("\r\n");
        };
        let sv = self.stats();
        if show("server") {
            line("# Server", String::new());
            line("server", "csd-kv".into());
            line("csd_version", env!("CARGO_PKG_VERSION").into());
            line("redis_mode", "standalone".into());
            line("interface", st.config().interface.name().into());
            line(
                "uptime_in_seconds",
                self.started.elapsed().as_secs().to_string(),
            );
        }
        if show("clients") {
            line("# Clients", String::new());
            line("connected_clients", sv.connections_open.to_string());
        }
        if show("stats") {
            line("# Stats", String::new());
            line(
                "total_connections_received",
                sv.connections_total.to_string(),
            );
            line("rejected_connections", sv.connections_refused.to_string());
            line("total_commands_processed", sv.commands.to_string());
            line("total_error_replies", sv.errors.to_string());
            line("protocol_errors", sv.protocol_errors.to_string());
            line("durability_syncs", sv.syncs.to_string());
        }
        let keys = st.len();
        if show("keyspace") {
            line("# Keyspace", String::new());
            if let Ok(n) = &keys
                && *n > 0
            {
                line("db0", format!("keys={n},expires=0,avg_ttl=0"));
            }
        }
        let s = st.stats();
        if show("store") {
            line("# Store", String::new());
            line(
                "keys",
                keys.as_ref()
                    .map_or_else(|e| format!("error: {e}"), |n| n.to_string()),
            );
            line("pages", st.pages().to_string());
            line("tree_height", st.height().to_string());
            line("cache_pages", st.cached_pages().to_string());
            line(
                "cache_capacity_pages",
                st.config()
                    .cache_pages
                    .map_or("unbounded".into(), |c| c.to_string()),
            );
            line("dirty_pages", st.dirty_pages().to_string());
            line("cache_hits", s.cache_hits.to_string());
            line("cache_misses", s.cache_misses.to_string());
            line("cache_evictions", s.evictions.to_string());
            line("gets", s.gets.to_string());
            line("puts", s.puts.to_string());
            line("deletes", s.deletes.to_string());
            line("scans", s.scans.to_string());
            line("splits", s.splits.to_string());
            line("acked_change", st.acked().to_string());
            line("last_change", st.last_change().to_string());
            line("seals", s.io.seals.to_string());
            line("user_read_bytes", s.io.user_read_bytes.to_string());
            line("user_write_bytes", s.io.user_write_bytes.to_string());
            line("meta_write_bytes", s.io.meta_write_bytes.to_string());
            line("flush_commands", s.io.flush_commands.to_string());
            line("host_gc_victims", s.io.gc_victims.to_string());
            line("host_gc_pages_moved", s.io.gc_pages_moved.to_string());
            line("host_gc_read_bytes", s.io.gc_read_bytes.to_string());
            line("host_gc_write_bytes", s.io.gc_write_bytes.to_string());
            line(
                "host_gc_reclaimed_bytes",
                s.io.gc_reclaimed_bytes.to_string(),
            );
            line("host_checkpoints", s.io.checkpoints.to_string());
            line(
                "host_gc_forced_checkpoints",
                s.io.gc_forced_checkpoints.to_string(),
            );
            if let Some((all, free)) = st.host_log_segments() {
                line("host_log_segments", all.to_string());
                line("host_log_free_segments", free.to_string());
            }
            line("modeled_time_s", format!("{:.6}", st.now().0 as f64 / 1e9));
            line(
                "host_cpu_modeled_s",
                format!("{:.6}", s.cpu.total_ns() as f64 / 1e9),
            );
            line(
                "host_cpu_gc_modeled_s",
                format!("{:.6}", s.cpu.gc_ns as f64 / 1e9),
            );
            line(
                "host_cpu_checkpoint_modeled_s",
                format!("{:.6}", s.cpu.checkpoint_ns as f64 / 1e9),
            );
        }
        if show("device") {
            line("# Device", String::new());
            match st.smart() {
                Ok(d) => {
                    let z = self.smart0.as_ref();
                    let z0 = |f: fn(&csd_device::SmartLog) -> u64| z.map_or(0, f);
                    let since = |a: u64, b: u64| a.saturating_sub(b);
                    line("device_host_read_bytes", d.host_read_bytes.to_string());
                    line(
                        "device_host_written_bytes",
                        d.host_written_bytes.to_string(),
                    );
                    line("device_gc_read_bytes", d.gc_read_bytes.to_string());
                    line("device_gc_written_bytes", d.gc_written_bytes.to_string());
                    line("device_reclaimed_bytes", d.reclaimed_bytes.to_string());
                    line(
                        "device_read_amplification",
                        format!("{:.4}", d.read_amplification),
                    );
                    line(
                        "device_write_amplification",
                        format!("{:.4}", d.write_amplification),
                    );
                    line("device_gc_overhead", format!("{:.4}", d.gc_overhead));
                    line(
                        "device_physical_write_amplification",
                        format!("{:.4}", d.physical_write_amplification),
                    );
                    line("device_checkpoints", d.checkpoints.to_string());
                    line("device_free_blocks", d.free_blocks.to_string());
                    line("device_media_errors", d.media_errors.to_string());
                    // Table 4 of the paper, host and device GC together, since start.
                    let s0 = &self.stats0;
                    let user_read = since(s.io.user_read_bytes, s0.io.user_read_bytes);
                    let user_write = since(s.io.user_write_bytes, s0.io.user_write_bytes);
                    let gc_read = since(s.io.gc_read_bytes, s0.io.gc_read_bytes)
                        + since(d.gc_read_bytes, z0(|x| x.gc_read_bytes));
                    let gc_write = since(s.io.gc_write_bytes, s0.io.gc_write_bytes)
                        + since(d.gc_written_bytes, z0(|x| x.gc_written_bytes));
                    let reclaimed = since(s.io.gc_reclaimed_bytes, s0.io.gc_reclaimed_bytes)
                        + since(d.reclaimed_bytes, z0(|x| x.reclaimed_bytes));
                    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
                    line(
                        "read_amplification",
                        format!("{:.4}", ratio(user_read + gc_read, user_read)),
                    );
                    line(
                        "write_amplification",
                        format!("{:.4}", ratio(user_write + gc_write, user_write)),
                    );
                    line(
                        "gc_overhead",
                        format!("{:.4}", ratio(gc_read + gc_write, reclaimed)),
                    );
                }
                Err(e) => line("device_error", e.to_string()),
            }
        }
        Reply::Bulk(tidy_headers(&out).into_bytes())
    }
}

/// Turn the `# Name:` lines the builder wrote into `# Name` and separate sections by a
/// blank line, as Redis's INFO does.
fn tidy_headers(s: &str) -> String {
    let mut out = String::new();
    for l in s.split("\r\n").filter(|l| !l.is_empty()) {
        if let Some(h) = l.strip_prefix("# ") {
            if !out.is_empty() {
                out.push_str("\r\n");
            }
            out.push_str("# ");
            out.push_str(h.trim_end_matches(':'));
        } else {
            out.push_str(l);
        }
        out.push_str("\r\n");
    }
    out
}

fn command(a: &[Vec<u8>]) -> Reply {
    match a.first().map(|x| text(x).to_ascii_uppercase()).as_deref() {
        None | Some("DOCS") | Some("INFO") => Reply::Array(vec![]),
        Some("COUNT") => Reply::Int(COMMANDS.len() as i64),
        Some("LIST") => Reply::Array(COMMANDS.iter().map(|(n, _)| Reply::bulk(n)).collect()),
        Some(o) => Reply::err(format!(
            "unknown subcommand '{o}'. Try COMMAND COUNT, LIST, DOCS or INFO"
        )),
    }
}

fn client(a: &[Vec<u8>], s: &mut Session) -> Reply {
    match text(&a[0]).to_ascii_uppercase().as_str() {
        "SETNAME" if a.len() == 2 => {
            s.name = Some(a[1].clone());
            Reply::ok()
        }
        "GETNAME" => s.name.clone().map_or(Reply::Nil, Reply::Bulk),
        "ID" => Reply::Int(s.id as i64),
        "SETINFO" if a.len() == 3 => Reply::ok(),
        "INFO" => Reply::bulk(format!(
            "id={} name={} db=0\n",
            s.id,
            s.name.as_deref().map(text).unwrap_or_default()
        )),
        o => Reply::err(format!(
            "unknown subcommand or wrong number of arguments for 'client|{}'",
            o.to_ascii_lowercase()
        )),
    }
}

impl<I: CommandIssuer + Send> Server<I> {
    /// Accept connections on `listener` and serve each on its own thread until `stop` is
    /// set; then close every connection (their read side) and wait for their threads.
    /// Returns on a listener failure too. The store stays in the server: take it back
    /// with [`Server::into_store`] and sync it.
    pub fn serve(&self, listener: &TcpListener, stop: &AtomicBool) -> io::Result<()> {
        listener.set_nonblocking(true)?;
        std::thread::scope(|scope| {
            let mut conns: Vec<(std::thread::ScopedJoinHandle<'_, ()>, TcpStream)> = Vec::new();
            let result = loop {
                if stop.load(Ordering::Relaxed) {
                    break Ok(());
                }
                conns.retain(|(h, _)| !h.is_finished());
                match listener.accept() {
                    Ok((stream, peer)) => {
                        let id = self.counters.total.fetch_add(1, Ordering::Relaxed) + 1;
                        if conns.len() >= self.cfg.max_connections {
                            self.counters.refused.fetch_add(1, Ordering::Relaxed);
                            let mut s = stream;
                            let _ = s.set_nonblocking(false);
                            let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
                            let _ = s
                                .write_all(&Reply::err("max number of clients reached").to_bytes());
                            continue;
                        }
                        let Ok(handle) = stream.try_clone() else {
                            continue;
                        };
                        let verbose = self.cfg.verbose;
                        let h = scope.spawn(move || {
                            self.counters.open.fetch_add(1, Ordering::Relaxed);
                            if verbose {
                                eprintln!("connection {id} from {peer}: open");
                            }
                            let r = self.serve_connection(stream, stop);
                            self.counters.open.fetch_sub(1, Ordering::Relaxed);
                            if verbose {
                                match r {
                                    Ok(()) => eprintln!("connection {id}: closed"),
                                    Err(e) => eprintln!("connection {id}: {e}"),
                                }
                            }
                        });
                        conns.push((h, handle));
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::Interrupted
                                | io::ErrorKind::ConnectionAborted
                                | io::ErrorKind::ConnectionReset
                        ) => {}
                    Err(e) => break Err(e),
                }
            };
            for (_, s) in &conns {
                let _ = s.shutdown(Shutdown::Read);
            }
            result
        })
    }

    /// Serve one connection until end-of-file, QUIT, a framing error or the stop flag.
    pub fn serve_connection(&self, mut stream: TcpStream, stop: &AtomicBool) -> io::Result<()> {
        stream.set_nonblocking(false)?;
        stream.set_read_timeout(Some(self.cfg.read_poll))?;
        stream.set_write_timeout(Some(self.cfg.write_timeout))?;
        let _ = stream.set_nodelay(true);
        let mut session = self.session();
        let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
        let mut chunk = vec![0u8; 64 * 1024];
        let mut out = Vec::new();
        loop {
            let mut cmds = Vec::new();
            let mut pos = 0;
            let mut fatal = None;
            while cmds.len() < self.cfg.max_batch.max(1) {
                match parse_command(&buf[pos..]) {
                    Ok(Parsed::Incomplete) => break,
                    Ok(Parsed::Command { args, consumed }) => {
                        pos += consumed;
                        if !args.is_empty() {
                            cmds.push(args);
                        }
                    }
                    Err(e) => {
                        fatal = Some(e);
                        break;
                    }
                }
            }
            buf.drain(..pos);
            if !cmds.is_empty() || fatal.is_some() {
                out.clear();
                for r in self.execute_batch(&cmds, &mut session) {
                    r.encode(&mut out);
                }
                if let Some(e) = &fatal {
                    self.counters
                        .protocol_errors
                        .fetch_add(1, Ordering::Relaxed);
                    Reply::err(e).encode(&mut out);
                }
                stream.write_all(&out)?;
                if fatal.is_some() || session.quit {
                    let _ = stream.shutdown(Shutdown::Both);
                    return Ok(());
                }
                if pos > 0 {
                    continue;
                }
            }
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            match stream.read(&mut chunk) {
                Ok(0) => return Ok(()),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::{encode_command, parse_reply};
    use crate::{Interface, StoreConfig};
    use csd_device::NvmeDevice;
    use csd_ftl::{Ftl, FtlConfig};
    use csd_host::Client;
    use csd_nand::Nand;
    use csd_sim::DeviceConfig;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn client() -> Client {
        let cfg = DeviceConfig::preset("tiny").unwrap();
        let nand = Nand::new_in_memory(cfg).unwrap();
        Client::new(NvmeDevice::new(
            Ftl::format(nand, FtlConfig::default()).unwrap(),
        ))
        .unwrap()
    }

    fn cfg(interface: Interface) -> StoreConfig {
        StoreConfig {
            interface,
            cache_pages: Some(16),
            write_buffer_bytes: 41 * 4096,
            queue_depth: 8,
            ..StoreConfig::default()
        }
    }

    fn server(interface: Interface) -> Server<Client> {
        let s = Store::open(client(), cfg(interface)).unwrap();
        Server::new(s, ServerConfig::default())
    }

    fn run(srv: &Server<Client>, s: &mut Session, args: &[&str]) -> Reply {
        let a: Vec<Vec<u8>> = args.iter().map(|x| x.as_bytes().to_vec()).collect();
        srv.execute(&a, s)
    }

    fn b(s: &str) -> Reply {
        Reply::bulk(s)
    }

    fn err_has(r: &Reply, what: &str) {
        match r {
            Reply::Error(m) => assert!(m.contains(what), "`{m}` lacks `{what}`"),
            o => panic!("{o:?} is not an error with `{what}`"),
        }
    }

    #[test]
    fn strings_commands_work_on_both_interfaces() {
        for iface in [Interface::Batch, Interface::Block] {
            let srv = server(iface);
            let s = &mut srv.session();
            assert_eq!(run(&srv, s, &["PING"]), Reply::Simple("PONG".into()));
            assert_eq!(run(&srv, s, &["ping", "hi"]), b("hi"));
            assert_eq!(run(&srv, s, &["SET", "a", "1"]), Reply::ok());
            assert_eq!(run(&srv, s, &["get", "a"]), b("1"));
            assert_eq!(run(&srv, s, &["GET", "zz"]), Reply::Nil);
            assert_eq!(run(&srv, s, &["MSET", "b", "2", "c", "3"]), Reply::ok());
            assert_eq!(
                run(&srv, s, &["MGET", "a", "b", "nope", "c"]),
                Reply::Array(vec![b("1"), b("2"), Reply::Nil, b("3")])
            );
            assert_eq!(run(&srv, s, &["EXISTS", "a", "b", "x", "a"]), Reply::Int(3));
            assert_eq!(run(&srv, s, &["DEL", "a", "x"]), Reply::Int(1));
            assert_eq!(run(&srv, s, &["EXISTS", "a"]), Reply::Int(0));
            assert_eq!(run(&srv, s, &["DBSIZE"]), Reply::Int(2));
            assert_eq!(run(&srv, s, &["SET", "b", "9", "NX"]), Reply::Nil);
            assert_eq!(run(&srv, s, &["SET", "n", "1", "XX"]), Reply::Nil);
            assert_eq!(run(&srv, s, &["SET", "b", "8", "XX", "GET"]), b("2"));
            assert_eq!(run(&srv, s, &["GET", "b"]), b("8"));
            assert_eq!(run(&srv, s, &["GET", "n"]), Reply::Nil);
            assert_eq!(run(&srv, s, &["SELECT", "0"]), Reply::ok());
            assert_eq!(run(&srv, s, &["FLUSHALL"]), Reply::ok());
            assert_eq!(run(&srv, s, &["DBSIZE"]), Reply::Int(0));
            assert_eq!(run(&srv, s, &["GET", "b"]), Reply::Nil);
            assert_eq!(run(&srv, s, &["SAVE"]), Reply::ok());
            let st = srv.stats();
            // FLUSHALL makes itself durable (Store::clear), so it needs no sync of its own.
            assert!(st.syncs >= 3, "{st:?}");
        }
    }

    #[test]
    fn scan_walks_every_key_once_with_numeric_cursors() {
        let srv = server(Interface::Batch);
        let s = &mut srv.session();
        let mut want = Vec::new();
        for i in 0..137 {
            let k = format!("k{i:04}");
            run(&srv, s, &["SET", &k, "v"]);
            want.push(k);
        }
        let mut got = Vec::new();
        let mut cursor = "0".to_string();
        let mut rounds = 0;
        loop {
            rounds += 1;
            let r = run(&srv, s, &["SCAN", &cursor, "COUNT", "20"]);
            let Reply::Array(v) = r else {
                panic!("not an array")
            };
            let Reply::Bulk(c) = &v[0] else { panic!() };
            let Reply::Array(keys) = &v[1] else { panic!() };
            for k in keys {
                let Reply::Bulk(k) = k else { panic!() };
                got.push(String::from_utf8(k.clone()).unwrap());
            }
            cursor = String::from_utf8(c.clone()).unwrap();
            assert!(cursor.parse::<u64>().is_ok());
            if cursor == "0" {
                break;
            }
        }
        assert_eq!(got, want);
        assert_eq!(rounds, 7);
        // MATCH filters the visited keys.
        let r = run(
            &srv,
            s,
            &["SCAN", "0", "MATCH", "k00[1-2]?", "COUNT", "1000"],
        );
        let Reply::Array(v) = r else { panic!() };
        assert_eq!(v[0], b("0"));
        let Reply::Array(keys) = &v[1] else { panic!() };
        assert_eq!(keys.len(), 20);
        let Reply::Array(all) = run(&srv, s, &["KEYS", "*"]) else {
            panic!()
        };
        assert_eq!(all.len(), 137);
        err_has(&run(&srv, s, &["SCAN", "12345"]), "invalid cursor");
        err_has(&run(&srv, s, &["SCAN", "x"]), "invalid cursor");
        err_has(&run(&srv, s, &["SCAN", "0", "COUNT", "0"]), "syntax");
        err_has(&run(&srv, s, &["SCAN", "0", "COUNT"]), "syntax");
        err_has(&run(&srv, s, &["SCAN", "0", "COUNT", "x"]), "integer");
    }

    #[test]
    fn bad_commands_get_errors_and_change_nothing() {
        for iface in [Interface::Batch, Interface::Block] {
            let srv = server(iface);
            let s = &mut srv.session();
            run(&srv, s, &["SET", "keep", "me"]);
            let before = srv.with_store(|st| st.last_change());
            err_has(
                &run(&srv, s, &["NOPE", "a", "b"]),
                "unknown command 'NOPE', with args beginning with: 'a' 'b'",
            );
            err_has(
                &run(&srv, s, &["GET"]),
                "wrong number of arguments for 'get'",
            );
            err_has(
                &run(&srv, s, &["GET", "a", "b"]),
                "wrong number of arguments",
            );
            err_has(&run(&srv, s, &["SET", "a"]), "wrong number of arguments");
            err_has(
                &run(&srv, s, &["MSET", "a", "1", "b"]),
                "wrong number of arguments for 'mset'",
            );
            err_has(&run(&srv, s, &["PING", "a", "b"]), "wrong number");
            err_has(
                &run(&srv, s, &["SET", "a", "1", "EX", "10"]),
                "do not expire",
            );
            err_has(&run(&srv, s, &["SET", "a", "1", "NX", "XX"]), "syntax");
            err_has(&run(&srv, s, &["SET", "a", "1", "BOGUS"]), "syntax");
            err_has(&run(&srv, s, &["SELECT", "1"]), "out of range");
            err_has(&run(&srv, s, &["SELECT", "x"]), "not an integer");
            err_has(&run(&srv, s, &["FLUSHALL", "x"]), "syntax");
            let big_key = "k".repeat(MAX_KEY + 1);
            let big_val = "v".repeat(MAX_VALUE + 1);
            err_has(
                &run(&srv, s, &["SET", &big_key, "1"]),
                "keys are 1..=512 bytes",
            );
            err_has(&run(&srv, s, &["SET", "", "1"]), "key of 0 bytes");
            err_has(
                &run(&srv, s, &["SET", "a", &big_val]),
                "values are at most 1024 bytes",
            );
            err_has(&run(&srv, s, &["GET", &big_key]), "keys are");
            err_has(&run(&srv, s, &["MSET", "a", "1", "b", &big_val]), "at most");
            err_has(&run(&srv, s, &["DEL", "keep", &big_key]), "keys are");
            assert_eq!(
                run(&srv, s, &["MGET", &big_key, "keep"]),
                Reply::Array(vec![Reply::Nil, b("me")])
            );
            assert_eq!(
                srv.with_store(|st| st.last_change()),
                before,
                "a refused command changed the store"
            );
            assert_eq!(run(&srv, s, &["GET", "a"]), Reply::Nil);
            assert_eq!(run(&srv, s, &["GET", "keep"]), b("me"));
            assert!(srv.stats().errors >= 18);
        }
    }

    #[test]
    fn start_up_commands_of_redis_tools_are_answered() {
        let srv = server(Interface::Batch);
        let s = &mut srv.session();
        assert_eq!(run(&srv, s, &["COMMAND", "DOCS"]), Reply::Array(vec![]));
        assert_eq!(run(&srv, s, &["COMMAND"]), Reply::Array(vec![]));
        assert_eq!(
            run(&srv, s, &["COMMAND", "COUNT"]),
            Reply::Int(COMMANDS.len() as i64)
        );
        assert_eq!(
            run(&srv, s, &["CONFIG", "GET", "save"]),
            Reply::Array(vec![b("save"), b("")])
        );
        assert_eq!(
            run(&srv, s, &["CONFIG", "GET", "appendonly"]),
            Reply::Array(vec![b("appendonly"), b("no")])
        );
        assert_eq!(
            run(&srv, s, &["CONFIG", "GET", "maxmemory"]),
            Reply::Array(vec![])
        );
        err_has(&run(&srv, s, &["CONFIG", "SET", "a", "b"]), "not supported");
        assert_eq!(run(&srv, s, &["CLIENT", "SETNAME", "me"]), Reply::ok());
        assert_eq!(run(&srv, s, &["CLIENT", "GETNAME"]), b("me"));
        let Reply::Array(h) = run(&srv, s, &["HELLO", "2"]) else {
            panic!()
        };
        assert_eq!(h[5], Reply::Int(2));
        err_has(&run(&srv, s, &["HELLO", "3"]), "NOPROTO");
        assert_eq!(run(&srv, s, &["ECHO", "x"]), b("x"));
        assert_eq!(run(&srv, s, &["QUIT"]), Reply::ok());
        assert!(s.quit);
    }

    #[test]
    fn info_reports_store_and_device_figures() {
        for iface in [Interface::Batch, Interface::Block] {
            let srv = server(iface);
            let s = &mut srv.session();
            for i in 0..300 {
                run(&srv, s, &["SET", &format!("key{i}"), &"x".repeat(100)]);
            }
            let Reply::Bulk(info) = run(&srv, s, &["INFO"]) else {
                panic!()
            };
            let info = String::from_utf8(info).unwrap();
            for k in [
                "# Server\r\n",
                "# Store\r\n",
                "# Device\r\n",
                "keys:300\r\n",
                "db0:keys=300,",
                &format!("interface:{}", iface.name()),
                "pages:",
                "cache_pages:",
                "host_checkpoints:",
                "host_gc_victims:",
                "device_write_amplification:",
                "read_amplification:",
                "gc_overhead:",
                "modeled_time_s:",
            ] {
                assert!(info.contains(k), "INFO lacks {k}:\n{info}");
            }
            assert!(!info.contains("# Server:"));
            let Reply::Bulk(one) = run(&srv, s, &["INFO", "keyspace"]) else {
                panic!()
            };
            let one = String::from_utf8(one).unwrap();
            assert!(one.starts_with("# Keyspace\r\ndb0:keys=300"), "{one}");
        }
    }

    #[test]
    fn glob_matches_like_redis() {
        let m = |p: &str, s: &str| glob_match(p.as_bytes(), s.as_bytes());
        assert!(m("*", ""));
        assert!(m("*", "abc"));
        assert!(m("a*c", "abbbc"));
        assert!(!m("a*c", "abbb"));
        assert!(m("h?llo", "hello"));
        assert!(m("h[ae]llo", "hallo"));
        assert!(!m("h[^e]llo", "hello"));
        assert!(m("h[a-b]llo", "hbllo"));
        assert!(m("a\\*b", "a*b"));
        assert!(!m("a\\*b", "axb"));
        assert!(m("*a*b*", "xxaxxbxx"));
        assert!(!m("abc", "abcd"));
    }

    /// Acknowledged writes survive a reopen of the store on the same device, and a QUIT
    /// in a pipeline stops it.
    #[test]
    fn acknowledged_batches_are_durable() {
        for iface in [Interface::Batch, Interface::Block] {
            let srv = server(iface);
            let s = &mut srv.session();
            let cmds: Vec<Vec<Vec<u8>>> = (0..50)
                .map(|i| {
                    vec![
                        b"SET".to_vec(),
                        format!("k{i}").into_bytes(),
                        vec![b'v'; 200],
                    ]
                })
                .chain([
                    vec![b"QUIT".to_vec()],
                    vec![b"SET".to_vec(), b"after".to_vec(), b"x".to_vec()],
                ])
                .collect();
            let r = srv.execute_batch(&cmds, s);
            assert_eq!(r.len(), 51);
            assert!(r[..50].iter().all(|x| *x == Reply::ok()));
            let mut st = srv.into_store();
            assert_eq!(st.acked(), st.last_change(), "replies left before the sync");
            let dev = st.into_device();
            let mut st = Store::open(
                dev,
                StoreConfig {
                    create: false,
                    ..cfg(iface)
                },
            )
            .unwrap();
            for i in 0..50 {
                assert_eq!(
                    st.get(format!("k{i}").as_bytes()).unwrap(),
                    Some(vec![b'v'; 200])
                );
            }
            assert_eq!(st.get(b"after").unwrap(), None);
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Set(u8, u8),
        Del(u8, u8),
        Get(u8),
        MSet(u8, u8),
        Scan(u8),
        Flush,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (any::<u8>(), any::<u8>()).prop_map(|(k, v)| Op::Set(k, v)),
            2 => (any::<u8>(), any::<u8>()).prop_map(|(k, j)| Op::Del(k, j)),
            4 => any::<u8>().prop_map(Op::Get),
            2 => (any::<u8>(), any::<u8>()).prop_map(|(k, v)| Op::MSet(k, v)),
            1 => (1u8..40).prop_map(Op::Scan),
            1 => Just(Op::Flush),
        ]
    }

    fn key(k: u8) -> String {
        format!("key:{:03}", k % 64)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

        /// The server against a BTreeMap reference, both interfaces.
        #[test]
        fn server_matches_a_btreemap(ops in proptest::collection::vec(op(), 1..120), block in any::<bool>()) {
            let srv = server(if block { Interface::Block } else { Interface::Batch });
            let s = &mut srv.session();
            let mut m: BTreeMap<String, String> = BTreeMap::new();
            for o in ops {
                match o {
                    Op::Set(k, v) => {
                        let val = format!("v{v}").repeat(v as usize % 7 + 1);
                        prop_assert_eq!(run(&srv, s, &["SET", &key(k), &val]), Reply::ok());
                        m.insert(key(k), val);
                    }
                    Op::Del(k, j) => {
                        let n = [key(k), key(j)].iter().collect::<std::collections::BTreeSet<_>>()
                            .iter().filter(|x| m.remove(x.as_str()).is_some()).count();
                        prop_assert_eq!(run(&srv, s, &["DEL", &key(k), &key(j)]), Reply::Int(n as i64));
                    }
                    Op::Get(k) => {
                        let want = m.get(&key(k)).map_or(Reply::Nil, |v| b(v));
                        prop_assert_eq!(run(&srv, s, &["GET", &key(k)]), want);
                    }
                    Op::MSet(k, v) => {
                        let (a, c) = (key(k), key(k.wrapping_add(v)));
                        prop_assert_eq!(run(&srv, s, &["MSET", &a, "1", &c, "2"]), Reply::ok());
                        m.insert(a, "1".into());
                        m.insert(c, "2".into());
                    }
                    Op::Scan(n) => {
                        let r = run(&srv, s, &["SCAN", "0", "COUNT", &n.to_string()]);
                        let want: Vec<Reply> = m.keys().take(n as usize).map(|k| b(k)).collect();
                        let Reply::Array(v) = r else { panic!() };
                        prop_assert_eq!(&v[1], &Reply::Array(want));
                        prop_assert_eq!(v[0] == b("0"), m.len() <= n as usize);
                    }
                    Op::Flush => {
                        prop_assert_eq!(run(&srv, s, &["FLUSHDB"]), Reply::ok());
                        m.clear();
                    }
                }
            }
            prop_assert_eq!(run(&srv, s, &["DBSIZE"]), Reply::Int(m.len() as i64));
        }
    }

    // ------------------------------------------------------------ over TCP

    struct Running {
        addr: std::net::SocketAddr,
        stop: std::sync::Arc<AtomicBool>,
        thread: Option<std::thread::JoinHandle<Server<Client>>>,
    }

    impl Running {
        fn start(iface: Interface) -> Running {
            let srv = server(iface);
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let stop = std::sync::Arc::new(AtomicBool::new(false));
            let st = stop.clone();
            let thread = std::thread::spawn(move || {
                srv.serve(&l, &st).unwrap();
                srv
            });
            Running {
                addr,
                stop,
                thread: Some(thread),
            }
        }

        fn connect(&self) -> TcpStream {
            let c = TcpStream::connect(self.addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            c.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
            c
        }

        fn stop(mut self) -> Server<Client> {
            self.stop.store(true, Ordering::Relaxed);
            self.thread.take().unwrap().join().unwrap()
        }
    }

    impl Drop for Running {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
        }
    }

    /// Read `n` replies (or fewer if the server closes); never waits past the timeout.
    fn replies(c: &mut TcpStream, n: usize) -> (Vec<Reply>, bool) {
        let mut buf = Vec::new();
        let mut out = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            while let Some((r, used)) = parse_reply(&buf).unwrap() {
                out.push(r);
                buf.drain(..used);
            }
            if out.len() >= n {
                return (out, false);
            }
            match c.read(&mut chunk) {
                Ok(0) => return (out, true),
                Ok(k) => buf.extend_from_slice(&chunk[..k]),
                Err(e) => panic!("read: {e} after {} replies", out.len()),
            }
        }
    }

    #[test]
    fn pipelines_over_tcp_get_every_reply_in_order() {
        let r = Running::start(Interface::Batch);
        let mut c = r.connect();
        let mut wire = Vec::new();
        for i in 0..500 {
            wire.extend(encode_command(&["SET", &format!("p{i}"), &i.to_string()]));
        }
        for i in 0..500 {
            wire.extend(encode_command(&["GET", &format!("p{i}")]));
        }
        // Split at awkward places: the server must put the halves together.
        for part in wire.chunks(777) {
            c.write_all(part).unwrap();
        }
        let (got, closed) = replies(&mut c, 1000);
        assert!(!closed);
        for (i, g) in got[500..].iter().enumerate() {
            assert_eq!(*g, b(&i.to_string()));
        }
        // A second connection sees the writes.
        let mut d = r.connect();
        d.write_all(b"GET p7\r\n").unwrap();
        assert_eq!(replies(&mut d, 1).0, vec![b("7")]);
        let srv = r.stop();
        assert!(srv.stats().connections_total >= 2);
    }

    #[test]
    fn malformed_input_closes_only_that_connection_and_loses_nothing() {
        for iface in [Interface::Batch, Interface::Block] {
            let r = Running::start(iface);
            let mut ok = r.connect();
            ok.write_all(&encode_command(&["SET", "safe", "1"]))
                .unwrap();
            assert_eq!(replies(&mut ok, 1).0, vec![Reply::ok()]);
            for bad in [
                &b"*1\r\n$abc\r\n"[..],
                b"*x\r\n",
                b"*2\r\n$3\r\nGET\r\n:1\r\n",
                b"*1\r\n$3\r\nGETXX\r\n",
                b"*1\r\n$-5\r\n",
                b"SET \"unbalanced 1\r\n",
            ] {
                let mut c = r.connect();
                // A good command first, in the same write: it still runs and replies.
                let mut w = encode_command(&["SET", "before", "2"]);
                w.extend_from_slice(bad);
                c.write_all(&w).unwrap();
                let (got, closed) = replies(&mut c, 3);
                assert_eq!(got[0], Reply::ok());
                assert!(
                    matches!(&got[1], Reply::Error(m) if m.starts_with("ERR Protocol error")),
                    "{got:?}"
                );
                assert!(
                    closed,
                    "connection left open after {:?}",
                    String::from_utf8_lossy(bad)
                );
            }
            // Unknown commands and oversize values keep the connection.
            let mut w = encode_command(&["FOO"]);
            w.extend(encode_command(&["SET", "big", &"v".repeat(5000)]));
            w.extend(encode_command(&["GET", "safe"]));
            ok.write_all(&w).unwrap();
            let (got, closed) = replies(&mut ok, 3);
            assert!(!closed);
            assert!(got[0].is_error() && got[1].is_error());
            assert_eq!(got[2], b("1"));
            // A half-sent command, then the server stops: nothing hangs.
            let mut half = r.connect();
            half.write_all(b"*2\r\n$3\r\nGET\r\n$10\r\nabc").unwrap();
            let srv = r.stop();
            assert!(srv.stats().protocol_errors >= 6);
            let mut st = srv.into_store();
            assert_eq!(st.get(b"safe").unwrap(), Some(b"1".to_vec()));
            assert_eq!(st.get(b"before").unwrap(), Some(b"2".to_vec()));
        }
    }

    #[test]
    fn many_connections_at_once_share_the_store() {
        let r = Running::start(Interface::Block);
        std::thread::scope(|sc| {
            for t in 0..6 {
                let r = &r;
                sc.spawn(move || {
                    let mut c = r.connect();
                    for round in 0..10 {
                        let mut w = Vec::new();
                        for i in 0..16 {
                            w.extend(encode_command(&["SET", &format!("t{t}:{round}:{i}"), "v"]));
                        }
                        c.write_all(&w).unwrap();
                        let (got, _) = replies(&mut c, 16);
                        assert!(got.iter().all(|g| *g == Reply::ok()));
                    }
                });
            }
        });
        let mut c = r.connect();
        c.write_all(&encode_command(&["DBSIZE"])).unwrap();
        assert_eq!(replies(&mut c, 1).0, vec![Reply::Int(960)]);
        drop(r.stop());
    }

    #[test]
    fn too_many_connections_are_refused_with_an_error() {
        let srv = server(Interface::Batch);
        let srv = Server {
            cfg: ServerConfig {
                max_connections: 1,
                ..ServerConfig::default()
            },
            ..srv
        };
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|sc| {
            sc.spawn(|| srv.serve(&l, &stop).unwrap());
            let mut a = TcpStream::connect(addr).unwrap();
            a.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            a.write_all(b"PING\r\n").unwrap();
            assert_eq!(replies(&mut a, 1).0, vec![Reply::Simple("PONG".into())]);
            let mut b2 = TcpStream::connect(addr).unwrap();
            b2.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let (got, _) = replies(&mut b2, 1);
            assert!(matches!(&got[0], Reply::Error(m) if m.contains("max number of clients")));
            stop.store(true, Ordering::Relaxed);
        });
        assert_eq!(srv.stats().connections_refused, 1);
    }
}
