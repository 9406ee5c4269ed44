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
//! * **Time model** ([`ServerConfig::time_model`]): on the event core (the default) each
//!   batch records its commands' stages and books them in modeled-arrival order at every
//!   resource, then settles every instant the store holds before the lock is released
//!   (batches run one at a time under the lock, as in virtual time); the core's counters
//!   add up in [`ServerStats::event_core`] and INFO. `calendar` books as code asks.
//! * **Stopping**: the accept loop polls a stop flag; at stop it shuts the read side of
//!   every connection, so each connection thread sees end-of-file, and joins them. Reads
//!   poll with a timeout, so nothing waits for bytes that never come.
//!
//! Where things are: this file holds the configuration, the counters, the per-connection
//! [`Session`], the argument checks and the dispatcher ([`Server::execute_batch`], which
//! also does the group commit); `keys` the commands on keys (GET/SET/DEL/EXISTS/MGET/
//! MSET/SCAN/KEYS, the SCAN cursors and [`glob_match`]); `admin` what clients send when
//! they start and INFO (HELLO, CONFIG, COMMAND, CLIENT, INFO's sections); `conn` the TCP
//! accept loop and the connection loop ([`Server::serve`], [`Server::serve_connection`]).

mod admin;
mod conn;
mod keys;
#[cfg(test)]
mod testutil;

use admin::{client, command};
use keys::Cursors;
pub use keys::glob_match;

use crate::page::{MAX_KEY, MAX_VALUE};
use crate::resp::Reply;
use crate::{KvError, Store};
use csd_host::CommandIssuer;
use csd_sim::events::{Counters as EventCounters, Recording, TimeModel};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

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
    /// How each batch's commands are placed in modeled time (see the module docs).
    pub time_model: TimeModel,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_connections: 1024,
            max_batch: 1024,
            read_poll: Duration::from_millis(100),
            write_timeout: Duration::from_secs(30),
            verbose: false,
            time_model: TimeModel::default(),
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
    /// The event core's counters summed over every batch (`None` on calendars).
    pub event_core: Option<EventCounters>,
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
    event_core: Mutex<EventCounters>,
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
            event_core: (self.cfg.time_model == TimeModel::Events).then(|| *lock(&c.event_core)),
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
        let rec = (self.cfg.time_model == TimeModel::Events && store.device().event_core())
            .then(Recording::start)
            .flatten();
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
        if let Some(rec) = rec {
            // Book what the batch recorded and fix every instant the store keeps, so the
            // next batch (any connection) starts from final instants.
            store.settle_events();
            let k = rec.finish().counters();
            lock(&self.counters.event_core).add(&k);
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
}

#[cfg(test)]
mod tests {
    use super::testutil::{b, cfg, err_has, run, server};
    use super::*;
    use crate::{Interface, StoreConfig};
    use csd_host::Client;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

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
            // The default time model is the event core: every batch in arrival order.
            let k = srv.stats().event_core.expect("the event core is the default");
            prop_assert_eq!(k.anomalies(), [0; 4]);
        }
    }

    /// The same commands on the event core and on calendars: the same replies and the
    /// same store; the core's counters (stages booked, nothing out of order) in the stats
    /// and in INFO; none on calendars.
    #[test]
    fn a_server_on_the_event_core_answers_as_on_calendars_and_reports_its_counters() {
        for iface in [Interface::Batch, Interface::Block] {
            let on = |time_model| {
                let st = Store::open(super::testutil::client(), cfg(iface)).unwrap();
                Server::new(
                    st,
                    ServerConfig {
                        time_model,
                        ..ServerConfig::default()
                    },
                )
            };
            let (ev, cal) = (on(TimeModel::Events), on(TimeModel::Calendar));
            let (se, sc) = (&mut ev.session(), &mut cal.session());
            for i in 0..300u32 {
                let k = format!("k{}", i.wrapping_mul(7919) % 97);
                let cmd: Vec<String> = match i % 3 {
                    0 | 1 => vec!["SET".into(), k, format!("v{i}").repeat(40)],
                    _ => vec!["GET".into(), k],
                };
                let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
                assert_eq!(run(&ev, se, &cmd), run(&cal, sc, &cmd), "{iface:?} {i}");
            }
            let k = ev.stats().event_core.expect("events");
            assert!(k.booked > 0, "{iface:?}: {k:?}");
            assert_eq!(k.anomalies(), [0; 4], "{iface:?}");
            assert_eq!(cal.stats().event_core, None);
            let info = |srv: &Server<Client>, s: &mut Session| match run(srv, s, &["INFO"]) {
                Reply::Bulk(b) => String::from_utf8(b).unwrap(),
                o => panic!("{o:?}"),
            };
            let (ie, ic) = (info(&ev, se), info(&cal, sc));
            assert!(ie.contains("time_model:events"), "{ie}");
            assert!(ie.contains("event_core_late_arrivals:0"), "{ie}");
            assert!(ic.contains("time_model:calendar"), "{ic}");
            assert!(!ic.contains("event_core_"), "{ic}");
        }
    }
}
