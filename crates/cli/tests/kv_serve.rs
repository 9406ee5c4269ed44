//! `csd kv serve` with real Redis clients: redis-cli and redis-benchmark (Debian package
//! redis-tools; `.ci/run` installs it, and each test is skipped with a notice when the
//! tool is missing), SIGKILL of the server under redis-benchmark load followed by a
//! restart that must return every acknowledged write, a store of one interface opened as
//! the other, and malformed input over the wire. Both interfaces; devices are the 64 MiB
//! `tiny` preset.
//!
//! Nothing here can hang: the server prints `listening on ADDR` (it listens on port 0)
//! and the test waits for that line with a timeout; every client process runs under a
//! deadline and is killed past it; the test's own RESP client has socket timeouts; a
//! server still running when a test ends (or panics) is killed on drop.

use csd_kv::resp::{Reply, encode_command, parse_reply};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

const CSD: &str = env!("CARGO_BIN_EXE_csd");

/// Is `tool` installed?
fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Skip the test (print a notice and return) unless every tool is installed.
macro_rules! require {
    ($($tool:expr),+) => {
        for tool in [$($tool),+] {
            if !have(tool) {
                eprintln!("SKIPPED: `{tool}` is not installed (apt-get install redis-tools)");
                return;
            }
        }
    };
}

/// A running `csd kv serve`.
struct KvServe {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl KvServe {
    /// Start `csd kv serve` on `image` (tiny preset) on a free port; returns once it
    /// listens (or panics with its log after a minute).
    fn start(image: &Path, iface: &str) -> KvServe {
        match Self::try_start(image, iface) {
            Ok(s) => s,
            Err(log) => panic!("csd kv serve did not start:\n{log}"),
        }
    }

    /// Start, or return the server's log if it exits before listening.
    fn try_start(image: &Path, iface: &str) -> Result<KvServe, String> {
        static STARTS: AtomicUsize = AtomicUsize::new(0);
        let n = STARTS.fetch_add(1, Ordering::Relaxed);
        let log = image.with_extension(format!("serve-{n}.log"));
        let err = File::create(&log).unwrap();
        let mut child = Command::new(CSD)
            .args(["kv", "serve", "--image"])
            .arg(image)
            .args(["--preset", "tiny", "--listen", "127.0.0.1:0"])
            .args(["--interface", iface, "--cache-pages", "256"])
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(out);
            let mut line = String::new();
            let _ = r.read_line(&mut line);
            let _ = tx.send(line);
            // Keep the pipe open (and drained) while the server runs.
            let _ = std::io::copy(&mut r, &mut std::io::sink());
        });
        let line = rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_default();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .and_then(|a| a.parse::<SocketAddr>().ok());
        let Some(addr) = addr else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::fs::read_to_string(&log).unwrap_or_default());
        };
        Ok(KvServe { child, addr, log })
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait(&mut self, limit: Duration) -> ExitStatus {
        let t0 = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                t0.elapsed() < limit,
                "csd kv serve did not exit: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, and wait for the clean shutdown; returns the log.
    fn terminate(mut self) -> String {
        let pid = self.child.id() as libc::pid_t;
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let s = self.wait(Duration::from_secs(60));
        assert!(s.success(), "csd kv serve failed: {}", self.log());
        self.log()
    }

    /// SIGKILL: no shutdown at all.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.wait(Duration::from_secs(20));
    }

    fn host(&self) -> String {
        self.addr.ip().to_string()
    }

    fn port(&self) -> String {
        self.addr.port().to_string()
    }

    /// redis-cli with `args` against this server: its stdout (stderr appended).
    fn cli(&self, args: &[&str]) -> String {
        let mut c = Command::new("redis-cli");
        c.args(["-h", &self.host(), "-p", &self.port()]).args(args);
        let out = run_limited(&mut c, Duration::from_secs(60));
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    fn connect(&self) -> Resp {
        Resp::connect(self.addr)
    }
}

impl Drop for KvServe {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A child process killed when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Run `cmd` to completion with its output captured, killing it after `limit`.
fn run_limited(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// The test's own RESP client (socket timeouts: it never waits forever).
struct Resp {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Resp {
    fn connect(addr: SocketAddr) -> Resp {
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
        Resp { s, buf: Vec::new() }
    }

    fn send(&mut self, cmds: &[Vec<&[u8]>]) -> std::io::Result<()> {
        let mut w = Vec::new();
        for c in cmds {
            w.extend(encode_command(c));
        }
        self.s.write_all(&w)
    }

    /// The next reply; an error on end-of-file, a reset or a timeout.
    fn reply(&mut self) -> std::io::Result<Reply> {
        let mut chunk = [0u8; 8192];
        loop {
            if let Some((r, n)) = parse_reply(&self.buf)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?
            {
                self.buf.drain(..n);
                return Ok(r);
            }
            match self.s.read(&mut chunk)? {
                0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                n => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    fn call(&mut self, args: &[&str]) -> Reply {
        let a: Vec<&[u8]> = args.iter().map(|x| x.as_bytes()).collect();
        self.send(&[a]).unwrap();
        self.reply().unwrap()
    }

    /// Read until the server closes the connection (or fail after the timeout).
    fn closed(&mut self) -> bool {
        let mut chunk = [0u8; 1024];
        loop {
            match self.s.read(&mut chunk) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
    }
}

fn bulk(s: &str) -> Reply {
    Reply::bulk(s)
}

fn ack_value(n: u64) -> String {
    format!("value-{n}-{}", "x".repeat((n % 97) as usize))
}

#[test]
fn redis_cli_runs_the_commands_on_both_interfaces() {
    require!("redis-cli");
    for iface in ["batch", "block"] {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("kv.img");
        let srv = KvServe::start(&image, iface);
        assert_eq!(srv.cli(&["PING"]).trim(), "PONG");
        assert_eq!(srv.cli(&["SET", "greeting", "hello world"]).trim(), "OK");
        assert_eq!(srv.cli(&["GET", "greeting"]).trim(), "hello world");
        assert_eq!(
            srv.cli(&["MSET", "a", "1", "b", "2", "c", "3"]).trim(),
            "OK"
        );
        assert_eq!(srv.cli(&["MGET", "a", "b", "zz", "c"]), "1\n2\n\n3\n");
        assert_eq!(srv.cli(&["EXISTS", "a", "b", "zz"]).trim(), "2");
        assert_eq!(srv.cli(&["DEL", "b", "zz"]).trim(), "1");
        assert_eq!(srv.cli(&["GET", "b"]).trim(), "");
        for i in 0..60 {
            srv.cli(&["SET", &format!("user:{i:03}"), &i.to_string()]);
        }
        // SCAN by hand: a numeric cursor and COUNT keys.
        let page = srv.cli(&["SCAN", "0", "COUNT", "7"]);
        let mut lines = page.lines();
        let cursor: u64 = lines.next().unwrap().parse().unwrap();
        assert!(cursor > 0, "{page}");
        assert_eq!(lines.count(), 7, "{page}");
        // redis-cli --scan walks SCAN cursors (10 keys a call) until 0.
        let scanned = srv.cli(&["--scan"]);
        let mut keys: Vec<&str> = scanned.lines().collect();
        keys.sort();
        assert_eq!(keys.len(), 63, "{scanned}");
        assert_eq!(keys[0], "a");
        let users = srv.cli(&["--scan", "--pattern", "user:05*"]);
        assert_eq!(users.lines().count(), 10, "{users}");
        assert_eq!(srv.cli(&["DBSIZE"]).trim(), "63");
        let info = srv.cli(&["INFO"]);
        for k in [
            "keys:63",
            &format!("interface:{iface}"),
            "device_write_amplification:",
            "gc_overhead:",
        ] {
            assert!(info.contains(k), "INFO lacks {k}: {info}");
        }
        // Errors: the client prints them, the server goes on.
        let e = srv.cli(&["FROB", "x"]);
        assert!(e.contains("ERR unknown command 'FROB'"), "{e}");
        let e = srv.cli(&["SET", "big", &"v".repeat(2000)]);
        assert!(e.contains("values are at most 1024 bytes"), "{e}");
        let e = srv.cli(&["GET"]);
        assert!(e.contains("wrong number of arguments"), "{e}");
        assert_eq!(srv.cli(&["GET", "greeting"]).trim(), "hello world");
        // A clean stop, a restart: everything is there.
        let log = srv.terminate();
        assert!(log.contains("closed cleanly"), "{log}");
        let srv = KvServe::start(&image, iface);
        let log = srv.log();
        assert!(log.contains("recovered the key-value store"), "{log}");
        assert!(
            !log.contains("unclean"),
            "a clean stop left an unclean image: {log}"
        );
        assert_eq!(srv.cli(&["GET", "greeting"]).trim(), "hello world");
        assert_eq!(srv.cli(&["DBSIZE"]).trim(), "63");
        assert_eq!(srv.cli(&["FLUSHALL"]).trim(), "OK");
        assert_eq!(srv.cli(&["DBSIZE"]).trim(), "0");
        srv.terminate();
    }
}

/// `SET: 1234.56 requests per second, ...` lines of `redis-benchmark -q`.
fn rps(out: &str, test: &str) -> Option<f64> {
    out.split(['\r', '\n'])
        .filter_map(|l| l.trim().strip_prefix(&format!("{test}: ")))
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .next_back()
}

#[test]
fn redis_benchmark_set_get_pipelined_passes_on_both_interfaces() {
    require!("redis-benchmark", "redis-cli");
    for iface in ["batch", "block"] {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("kv.img");
        let srv = KvServe::start(&image, iface);
        let mut c = Command::new("redis-benchmark");
        c.args(["-h", &srv.host(), "-p", &srv.port()]).args([
            "-t", "set,get", "-n", "20000", "-P", "16", "-r", "5000", "-q",
        ]);
        let out = run_limited(&mut c, Duration::from_secs(600));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{text}");
        let (set, get) = (rps(&text, "SET"), rps(&text, "GET"));
        assert!(set.is_some() && get.is_some(), "{text}");
        assert!(!text.contains("ERR"), "{text}");
        println!(
            "redis-benchmark -t set,get -n 20000 -P 16 -r 5000 on csd kv serve --interface {iface} \
             (tiny preset, debug build): SET {:.0} req/s, GET {:.0} req/s",
            set.unwrap_or(0.0),
            get.unwrap_or(0.0)
        );
        let n: u64 = srv.cli(&["DBSIZE"]).trim().parse().unwrap();
        assert!(n > 1000 && n <= 5000, "{n} keys");
        let info = srv.cli(&["INFO", "stats"]);
        assert!(info.contains("total_commands_processed:"), "{info}");
        srv.terminate();
    }
}

#[test]
fn sigkill_under_redis_benchmark_load_loses_no_acknowledged_write() {
    require!("redis-benchmark");
    for iface in ["batch", "block"] {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("kv.img");
        let srv = KvServe::start(&image, iface);
        // Background load: pipelined SETs over random keys from 4 connections.
        let load = Guard(
            Command::new("redis-benchmark")
                .args(["-h", &srv.host(), "-p", &srv.port()])
                .args(["-t", "set", "-n", "100000000", "-P", "16", "-r", "20000"])
                .args(["-c", "4", "-q"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        // Our client: pipelines of 8 SETs of unique keys; a key counts as acknowledged
        // when its `+OK` arrived.
        let acked = Arc::new(Mutex::new(Vec::<u64>::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (acked, stop, addr) = (acked.clone(), stop.clone(), srv.addr);
            std::thread::spawn(move || {
                let mut c = Resp::connect(addr);
                let mut n = 0u64;
                let t0 = Instant::now();
                while !stop.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(120) {
                    let batch: Vec<(String, String)> = (n..n + 8)
                        .map(|i| (format!("ack:{i}"), ack_value(i)))
                        .collect();
                    let cmds: Vec<Vec<&[u8]>> = batch
                        .iter()
                        .map(|(k, v)| vec![&b"SET"[..], k.as_bytes(), v.as_bytes()])
                        .collect();
                    if c.send(&cmds).is_err() {
                        return "send failed";
                    }
                    for i in n..n + 8 {
                        match c.reply() {
                            Ok(Reply::Simple(s)) if s == "OK" => acked.lock().unwrap().push(i),
                            Ok(other) => panic!("SET ack:{i}: {other:?}"),
                            Err(_) => return "connection lost",
                        }
                    }
                    n += 8;
                }
                "stopped"
            })
        };
        // Kill once enough writes were acknowledged (and the load ran a while).
        let t0 = Instant::now();
        while acked.lock().unwrap().len() < 400 || t0.elapsed() < Duration::from_secs(2) {
            assert!(
                t0.elapsed() < Duration::from_secs(180),
                "only {} acknowledged writes in 180 s: {}",
                acked.lock().unwrap().len(),
                srv.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        srv.kill();
        stop.store(true, Ordering::Relaxed);
        let how = writer.join().unwrap();
        assert_eq!(how, "connection lost");
        drop(load);
        let acked = acked.lock().unwrap().clone();

        // Restart on the same image: the FTL and the store recover.
        let srv = KvServe::start(&image, iface);
        let log = srv.log();
        assert!(log.contains("recovered the key-value store"), "{log}");
        assert!(log.contains("recovering from an unclean shutdown"), "{log}");
        let mut c = srv.connect();
        let mut lost = Vec::new();
        for &i in &acked {
            let got = c.call(&["GET", &format!("ack:{i}")]);
            if got != bulk(&ack_value(i)) {
                lost.push((i, got));
            }
        }
        assert!(
            lost.is_empty(),
            "{iface}: {} of {} acknowledged writes lost after SIGKILL, e.g. {:?}",
            lost.len(),
            acked.len(),
            &lost[..lost.len().min(5)]
        );
        println!(
            "{iface}: {} acknowledged writes, all readable after SIGKILL and restart",
            acked.len()
        );
        // The store goes on taking writes.
        assert_eq!(c.call(&["SET", "after", "restart"]), Reply::ok());
        assert_eq!(c.call(&["GET", "after"]), bulk("restart"));
        srv.terminate();
    }
}

#[test]
fn a_store_opened_with_the_other_interface_is_refused_and_kept() {
    for (made, wrong) in [("block", "batch"), ("batch", "block")] {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("kv.img");
        let srv = KvServe::start(&image, made);
        let mut c = srv.connect();
        assert_eq!(c.call(&["SET", "k", "v"]), Reply::ok());
        srv.terminate();
        let log = match KvServe::try_start(&image, wrong) {
            Ok(_) => panic!("a {made} store was served as {wrong}"),
            Err(log) => log,
        };
        assert!(
            log.contains(&format!("open it with --interface {made}")),
            "{log}"
        );
        let srv = KvServe::start(&image, made);
        assert_eq!(srv.connect().call(&["GET", "k"]), bulk("v"));
        srv.terminate();
    }
}

#[test]
fn malformed_resp_gets_an_error_and_closes_only_that_connection() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("kv.img");
    let srv = KvServe::start(&image, "batch");
    let mut good = srv.connect();
    assert_eq!(good.call(&["SET", "k", "1"]), Reply::ok());
    for bad in [
        &b"*1\r\n$x\r\n"[..],
        b"*abc\r\n",
        b"*1\r\n+PING\r\n",
        b"*1\r\n$4\r\nPINGPONG\r\n",
        b"GET \"k\r\n",
    ] {
        let mut c = srv.connect();
        c.s.write_all(bad).unwrap();
        match c.reply().unwrap() {
            Reply::Error(m) => assert!(m.starts_with("ERR Protocol error"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert!(
            c.closed(),
            "left open after {:?}",
            String::from_utf8_lossy(bad)
        );
    }
    // Inline commands (telnet style) work, and bad commands keep the connection.
    let mut c = srv.connect();
    c.s.write_all(b"GET k\r\nNOPE\r\nSET k2 \"two words\"\r\nGET k2\r\n")
        .unwrap();
    assert_eq!(c.reply().unwrap(), bulk("1"));
    assert!(c.reply().unwrap().is_error());
    assert_eq!(c.reply().unwrap(), Reply::ok());
    assert_eq!(c.reply().unwrap(), bulk("two words"));
    let big_key = "k".repeat(600);
    assert!(c.call(&["SET", &big_key, "v"]).is_error());
    assert_eq!(good.call(&["GET", "k"]), bulk("1"));
    let info = good.call(&["INFO", "stats"]);
    let Reply::Bulk(info) = info else { panic!() };
    assert!(String::from_utf8_lossy(&info).contains("protocol_errors:5"));
    srv.terminate();
}
