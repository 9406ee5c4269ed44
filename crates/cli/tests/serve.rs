//! `csd serve` with real NBD clients: nbdinfo, fio's nbd engine, nbdcopy (each test is
//! skipped with a notice when its tool is not installed; `.ci/run` installs them), and
//! SIGKILL of the server during writes followed by a restart that must serve every
//! acknowledged block. Devices are the 64 MiB `tiny` preset; each test runs seconds.
//!
//! The crash test uses a client of its own that logs every acknowledged write rather
//! than fio's verify state: fio 3.33 (Debian 12) counts the writes that fail when the
//! connection drops as written, so its `--verify_state_load` pass then reports the
//! never-acknowledged blocks as corrupt, and its nbd engine sometimes spins forever once
//! the server is gone.

use csd_nbd::proto::{self, *};
use serde_json::Value;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const CSD: &str = env!("CARGO_BIN_EXE_csd");
const LBA: u64 = 4096;

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
                eprintln!(
                    "SKIPPED: `{tool}` is not installed (apt-get install fio libnbd-bin nbdkit)"
                );
                return;
            }
        }
    };
}

/// A running `csd serve`.
struct Serve {
    child: Child,
    dir: PathBuf,
    image: PathBuf,
    uri: String,
    log: PathBuf,
}

impl Serve {
    /// Start `csd serve` on `dir/dev.img` (tiny preset) at `dir/nbd.sock`, plus `extra`
    /// arguments; returns once it listens.
    fn start(dir: &Path, extra: &[&str]) -> Serve {
        let sock = dir.join("nbd.sock");
        let listen = [OsStr::new("--socket"), sock.as_os_str()];
        Serve::launch(dir, &dir.join("dev.img"), &listen, extra)
    }

    /// Start `csd serve` on `dir/dev.img` at 127.0.0.1 (any free port).
    fn start_tcp(dir: &Path, extra: &[&str]) -> Serve {
        let listen = [OsStr::new("--listen"), OsStr::new("127.0.0.1:0")];
        Serve::launch(dir, &dir.join("dev.img"), &listen, extra)
    }

    /// Start `csd serve` on `image` (tiny preset) listening as `listen` says, with its
    /// log in `dir`.
    fn launch(dir: &Path, image: &Path, listen: &[&OsStr], extra: &[&str]) -> Serve {
        Serve::launch_env(dir, image, listen, extra, &[])
    }

    /// [`Serve::launch`] with environment variables `env` for the server.
    fn launch_env(
        dir: &Path,
        image: &Path,
        listen: &[&OsStr],
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Serve {
        static STARTS: AtomicUsize = AtomicUsize::new(0);
        let n = STARTS.fetch_add(1, Ordering::Relaxed);
        let log = dir.join(format!("serve-{n}.log"));
        let err = File::create(&log).unwrap();
        let mut child = Command::new(CSD)
            .args(["serve", "--image"])
            .arg(image)
            .args(["--preset", "tiny", "--stats-interval", "0.2"])
            .args(listen)
            .args(extra)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap();
        // The server prints its URI on stdout once it listens.
        let uri = first_line(&mut child);
        assert!(
            uri.starts_with("nbd"),
            "csd serve did not start: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        Serve {
            child,
            dir: dir.to_path_buf(),
            image: image.to_path_buf(),
            uri,
            log,
        }
    }

    fn image(&self) -> PathBuf {
        self.image.clone()
    }

    /// The TCP address of a server started with [`Serve::start_tcp`].
    fn addr(&self) -> SocketAddr {
        let rest = self.uri.strip_prefix("nbd://").unwrap();
        rest.split('/').next().unwrap().parse().unwrap()
    }

    /// The server's stats file (the default one).
    fn stats(&self) -> Value {
        let mut p = self.image.clone().into_os_string();
        p.push(".smart.json");
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("nbd.sock")
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
                "csd serve did not exit: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, and wait for the clean shutdown.
    fn terminate(mut self) -> String {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        let s = self.wait(Duration::from_secs(30));
        assert!(s.success(), "csd serve failed: {}", self.log());
        self.log()
    }

    /// SIGKILL: no shutdown at all.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.wait(Duration::from_secs(10));
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The first line a server printed on stdout (its URI once it listens), trimmed.
fn first_line(child: &mut Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    line.trim().to_string()
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The export size of a freshly formatted tiny device, computed by the FTL itself.
fn tiny_export_bytes() -> u64 {
    let cfg = csd_sim::DeviceConfig::preset("tiny").unwrap();
    let nand = csd_nand::Nand::new_in_memory(cfg).unwrap();
    let ftl = csd_ftl::Ftl::format(nand, csd_ftl::FtlConfig::default()).unwrap();
    ftl.lbas() * ftl.lba_size() as u64
}

fn pseudo_random(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

#[test]
fn nbdinfo_lists_the_export_with_its_size_and_smart_works_live() {
    require!("nbdinfo");
    let dir = tempfile::tempdir().unwrap();
    let srv = Serve::start(dir.path(), &["--export", "disk"]);
    assert!(
        srv.uri.starts_with("nbd+unix:///disk?socket="),
        "{}",
        srv.uri
    );
    let out = run(Command::new("nbdinfo").args(["--json", &srv.uri]));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let e = &v["exports"][0];
    assert_eq!(e["export-name"], "disk");
    assert_eq!(e["export-size"].as_u64(), Some(tiny_export_bytes()));
    assert_eq!(e["block_size_minimum"].as_u64(), Some(1));
    assert_eq!(e["block_size_preferred"].as_u64(), Some(4096));
    assert_eq!(e["block_size_maximum"].as_u64(), Some(32 << 20));
    for f in [
        "can_flush",
        "can_fua",
        "can_trim",
        "can_zero",
        "can_multi_conn",
    ] {
        assert_eq!(e[f], true, "{f}");
    }
    assert_eq!(e["is_read_only"], false);
    let list = run(Command::new("nbdinfo").args(["--list", &srv.uri]));
    assert!(String::from_utf8_lossy(&list.stdout).contains("export=\"disk\""));

    // While the server holds the image, `csd device smart` shows its stats file.
    std::thread::sleep(Duration::from_millis(300));
    let smart = run(Command::new(CSD)
        .args(["device", "smart", "--json", "--image"])
        .arg(srv.image()));
    let s: Value = serde_json::from_slice(&smart.stdout).unwrap();
    assert_eq!(s["live"], true);
    assert!(s["server"]["connections_total"].as_u64().unwrap() >= 2);
    assert!(
        s["host_read_bytes"].as_u64().unwrap() > 0,
        "nbdinfo reads the first sector"
    );
    let table = run(Command::new(CSD)
        .args(["device", "smart", "--image"])
        .arg(srv.image()));
    assert!(String::from_utf8_lossy(&table.stdout).contains("live server"));

    // SIGTERM: a clean shutdown; the stats file says so; the image opens again.
    let log = srv.terminate();
    assert!(log.contains("synced"), "{log}");
    let smart = run(Command::new(CSD)
        .args(["device", "smart", "--json", "--image"])
        .arg(dir.path().join("dev.img")));
    let s: Value = serde_json::from_slice(&smart.stdout).unwrap();
    assert!(s.get("live").is_none(), "read from the image itself");
    let file: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("dev.img.smart.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(file["live"], false);

    // Read-only on the next start: opened from the clean checkpoint with nothing to
    // replay, and the image is not changed by serving it (not even at shutdown).
    let image = dir.path().join("dev.img");
    let digest = || crc32c::crc32c(&std::fs::read(&image).unwrap());
    let before = digest();
    let srv = Serve::start(dir.path(), &["--read-only"]);
    let out = run(Command::new("nbdinfo").args(["--json", &srv.uri]));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["exports"][0]["is_read_only"], true);
    assert!(!srv.log().contains("recovering"), "{}", srv.log());
    srv.terminate();
    assert_eq!(digest(), before, "csd serve --read-only changed the image");
}

/// Run fio's nbd engine on `uri` in `dir` (fio leaves verify-state files in its working
/// directory).
fn fio(dir: &Path, uri: &str, args: &[&str]) -> Output {
    let mut c = Command::new("fio");
    c.current_dir(dir)
        .args([
            "--ioengine=nbd",
            &format!("--uri={uri}"),
            "--output-format=json",
        ])
        .args(args);
    run(&mut c)
}

/// fio's JSON report (the nbd engine prints a line of its own before it).
fn fio_json(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let json = text.find('{').map_or("", |i| &text[i..]);
    serde_json::from_str(json).unwrap_or_else(|e| panic!("fio output: {e}: {text}"))
}

/// fio's job error count from its JSON output.
fn fio_errors(out: &Output) -> u64 {
    let v = fio_json(out);
    v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["error"].as_u64().unwrap())
        .sum()
}

#[test]
fn fio_random_write_then_verify() {
    require!("fio");
    let dir = tempfile::tempdir().unwrap();
    let srv = Serve::start(dir.path(), &[]);
    let job = [
        "--name=w",
        "--rw=randwrite",
        "--bs=4k",
        "--size=16M",
        "--iodepth=16",
        "--verify=crc32c",
        "--do_verify=1",
    ];
    assert_eq!(fio_errors(&fio(dir.path(), &srv.uri, &job)), 0);
    // Unaligned blocks (read-modify-write in the server) from two connections at once.
    let unaligned = [
        "--name=u",
        "--rw=randwrite",
        "--bs=1k",
        "--size=2M",
        "--offset=24M",
        "--offset_increment=4M",
        "--numjobs=2",
        "--iodepth=8",
        "--verify=crc32c",
        "--do_verify=1",
    ];
    assert_eq!(fio_errors(&fio(dir.path(), &srv.uri, &unaligned)), 0);
    srv.terminate();

    // After a restart the data is still there: verify only, same job and seed.
    let srv = Serve::start(dir.path(), &[]);
    let mut again = job.to_vec();
    again.push("--verify_only");
    let out = fio(dir.path(), &srv.uri, &again);
    assert_eq!(fio_errors(&out), 0);
    let verified = fio_json(&out)["jobs"][0]["read"]["io_bytes"].as_u64();
    assert_eq!(verified, Some(16 << 20), "verify_only read everything back");
    srv.terminate();
}

/// `csd serve --memory`: a device in memory behind the same protocol, as `nbdkit
/// memory` is a RAM disk: fio writes and verifies through it, SIGTERM ends it cleanly,
/// no file is left, and it refuses an image or `--read-only` beside it.
/// SIGTERM to a server started as a plain child, and its exit status.
fn terminate(child: &mut Child) -> ExitStatus {
    assert!(
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    child.wait().unwrap()
}

/// `csd serve --memory --preset tiny` on a socket in `dir` with `extra` arguments, its
/// stderr in `log`, with `CSD_MEMORY_LIMIT` when given; returns the child and the URI it
/// printed.
fn serve_tiny_in_memory(
    dir: &Path,
    log: &Path,
    memory_limit: Option<&str>,
    extra: &[&std::ffi::OsStr],
) -> (Child, String) {
    let mut c = Command::new(CSD);
    c.args(["serve", "--memory", "--preset", "tiny", "--socket"])
        .arg(dir.join("mem.sock"))
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::from(File::create(log).unwrap()));
    if let Some(l) = memory_limit {
        c.env("CSD_MEMORY_LIMIT", l);
    }
    let mut child = c.spawn().unwrap();
    let uri = first_line(&mut child);
    assert!(
        uri.starts_with("nbd+unix"),
        "{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    (child, uri)
}

/// fio writes 8 MiB of random 4 KiB blocks through `uri` and verifies them; then the
/// server stops (SIGTERM) and must exit successfully. Returns its stderr (`log`).
fn write_verified_and_stop(dir: &Path, uri: &str, child: &mut Child, log: &Path) -> String {
    let job = [
        "--name=m",
        "--rw=randwrite",
        "--bs=4k",
        "--size=8M",
        "--iodepth=16",
        "--verify=crc32c",
        "--do_verify=1",
    ];
    assert_eq!(fio_errors(&fio(dir, uri, &job)), 0);
    let status = terminate(child);
    let text = std::fs::read_to_string(log).unwrap_or_default();
    assert!(status.success(), "{text}");
    text
}

#[test]
fn a_device_in_memory_serves_fio_and_leaves_nothing_behind() {
    require!("fio");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("mem.log");
    let (mut child, uri) = serve_tiny_in_memory(dir.path(), &log, None, &[]);
    let text = write_verified_and_stop(dir.path(), &uri, &mut child, &log);
    assert!(text.contains("device in memory"), "{text}");
    assert!(text.contains("discarded"), "{text}");
    // Only the log (and fio's own files) in the directory: no image, no stats file.
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().to_string();
        assert!(
            !name.ends_with(".img") && !name.ends_with(".smart.json"),
            "{name} left behind"
        );
    }
    for bad in [
        vec![
            "serve",
            "--memory",
            "--image",
            "x.img",
            "--socket",
            "/tmp/x.sock",
        ],
        vec![
            "serve",
            "--memory",
            "--read-only",
            "--socket",
            "/tmp/x.sock",
        ],
        vec!["serve", "--socket", "/tmp/x.sock"],
    ] {
        let out = Command::new(CSD).args(&bad).output().unwrap();
        assert!(!out.status.success(), "{bad:?} must be refused");
    }
}

/// `--ready-memory`: the stats file counts the fresh blocks a device in memory took from
/// the memory kept ready (and those it had to map itself); with `0` none is kept and the
/// stats file has no such counters. fio verifies every block written either way.
#[test]
fn a_device_in_memory_reports_the_memory_it_kept_ready() {
    require!("fio");
    for ready in ["64m", "0"] {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("mem.log");
        let stats = dir.path().join("s.json");
        let extra = [
            "--ready-memory".as_ref(),
            ready.as_ref(),
            "--stats-file".as_ref(),
            stats.as_os_str(),
        ];
        let (mut child, uri) = serve_tiny_in_memory(dir.path(), &log, None, &extra);
        write_verified_and_stop(dir.path(), &uri, &mut child, &log);
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
        let m = &v["server"]["memory_ready"];
        if ready == "0" {
            assert!(m.is_null(), "{v:#}");
        } else {
            let fresh = m["blocks_taken"].as_u64().unwrap() + m["blocks_missed"].as_u64().unwrap();
            assert!(fresh > 0, "{v:#}");
        }
    }
}

/// A device in memory at its memory limit (`CSD_MEMORY_LIMIT`): fio's writes past it get
/// errors, the server says why once on stderr, stays up, and reads go on.
#[test]
fn a_device_in_memory_at_its_memory_limit_refuses_writes_and_keeps_serving_reads() {
    require!("fio");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("lim.log");
    let (mut child, uri) = serve_tiny_in_memory(dir.path(), &log, Some("8m"), &[]);
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text().contains("memory limit (8 MiB"), "{}", text());
    let mut w = Command::new("fio");
    w.current_dir(dir.path()).args([
        "--ioengine=nbd",
        &format!("--uri={uri}"),
        "--output-format=json",
        "--name=w",
        "--rw=randwrite",
        "--bs=4k",
        "--size=32M",
        "--iodepth=16",
        "--continue_on_error=all",
    ]);
    let out = w.output().unwrap();
    let job = &fio_json(&out)["jobs"][0];
    let failed = job["total_err"].as_u64().unwrap_or(0) + job["error"].as_u64().unwrap_or(0);
    assert!(failed > 0, "no write was refused: {job}");
    let reads = fio(
        dir.path(),
        &uri,
        &[
            "--name=r",
            "--rw=randread",
            "--bs=4k",
            "--size=32M",
            "--iodepth=16",
        ],
    );
    assert_eq!(fio_errors(&reads), 0);
    let l = text();
    assert_eq!(l.matches("refuses writes from now on").count(), 1, "{l}");
    assert!(l.contains("reached its memory limit"), "{l}");
    assert!(terminate(&mut child).success(), "{}", text());
}

#[test]
fn nbdcopy_in_and_out_returns_identical_bytes() {
    require!("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let srv = Serve::start(dir.path(), &[]);
    // Not a multiple of 4 KiB: the tail is an unaligned write.
    let data = pseudo_random(7, (3 << 20) + 1234);
    let input = dir.path().join("in.bin");
    let output = dir.path().join("out.bin");
    std::fs::write(&input, &data).unwrap();
    run(Command::new("nbdcopy").arg(&input).arg(&srv.uri));
    run(Command::new("nbdcopy").arg(&srv.uri).arg(&output));
    let back = std::fs::read(&output).unwrap();
    assert_eq!(back.len() as u64, tiny_export_bytes());
    assert!(
        back[..data.len()] == data[..],
        "the bytes copied out differ"
    );
    assert!(back[data.len()..].iter().all(|&b| b == 0));
    srv.terminate();
}

#[test]
fn tcp_needs_loopback_or_allow_remote() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(CSD)
        .args([
            "serve",
            "--preset",
            "tiny",
            "--listen",
            "0.0.0.0:0",
            "--image",
        ])
        .arg(dir.path().join("dev.img"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-remote"));

    let img = dir.path().join("dev.img");
    let mut child = Command::new(CSD)
        .args([
            "serve",
            "--preset",
            "tiny",
            "--listen",
            "127.0.0.1:0",
            "--image",
        ])
        .arg(&img)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let line = first_line(&mut child);
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.starts_with("nbd://127.0.0.1:"), "{line}");
}

#[test]
fn paced_clock_makes_fio_latency_follow_the_model() {
    require!("fio");
    let dir = tempfile::tempdir().unwrap();
    // Five wall seconds per modeled second: a modeled 4 KiB flash read of ~70 µs
    // takes ~0.35 ms. Write the region first so that the reads reach the flash.
    let scale = 5.0;
    let srv = Serve::start(dir.path(), &["--clock", "paced:5"]);
    fio(
        dir.path(),
        &srv.uri,
        &[
            "--name=w",
            "--rw=write",
            "--bs=64k",
            "--size=2M",
            "--iodepth=4",
        ],
    );
    let out = fio(
        dir.path(),
        &srv.uri,
        &[
            "--name=r",
            "--rw=randread",
            "--bs=4k",
            "--size=2M",
            "--iodepth=1",
            "--runtime=1",
            "--time_based",
        ],
    );
    let v = fio_json(&out);
    let clat = &v["jobs"][0]["read"]["clat_ns"];
    let fio_us = clat["mean"].as_f64().unwrap() / 1e3;
    // The upper bound is checked on the 10th percentile: on a loaded machine some wake-ups
    // come milliseconds late and drag the mean, but most requests are on time.
    let p10_us = clat["percentile"]["10.000000"].as_f64().unwrap_or(f64::MAX) / 1e3;
    std::thread::sleep(Duration::from_millis(300));
    let stats: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("dev.img.smart.json")).unwrap(),
    )
    .unwrap();
    let model_us = stats["server"]["read"]["mean_modeled_latency_us"]
        .as_f64()
        .unwrap();
    assert!(model_us > 40.0, "{stats}");
    let want = model_us * scale;
    eprintln!(
        "paced x{scale}: fio mean clat {fio_us:.1} µs (p10 {p10_us:.1} µs), modeled {model_us:.1} µs"
    );
    assert!(
        fio_us >= 0.9 * want && p10_us <= 4.0 * want + 1000.0,
        "fio's completion latency (mean {fio_us:.1} µs, p10 {p10_us:.1} µs) vs modeled {model_us:.1} µs x {scale}"
    );
    srv.terminate();
}

/// A minimal NBD client for the crash test (over a Unix socket unless said otherwise).
struct Client<S = UnixStream> {
    s: S,
}

impl Client {
    fn connect(sock: &Path) -> Client {
        let s = UnixStream::connect(sock).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Client::go(s)
    }
}

impl Client<TcpStream> {
    fn connect_tcp(addr: SocketAddr) -> Client<TcpStream> {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Client::go(s)
    }
}

impl<S: Read + Write> Client<S> {
    /// Read the greeting and enter transmission with NBD_OPT_GO.
    fn go(mut s: S) -> Client<S> {
        let mut g = [0u8; 18];
        s.read_exact(&mut g).unwrap();
        assert_eq!(g, proto::greeting());
        s.write_all(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes())
            .unwrap();
        let info = InfoRequest {
            name: vec![],
            requests: vec![],
        }
        .encode();
        let h = OptionHeader {
            option: OPT_GO,
            length: info.len() as u32,
        };
        s.write_all(&h.encode()).unwrap();
        s.write_all(&info).unwrap();
        loop {
            let mut b = [0u8; 20];
            s.read_exact(&mut b).unwrap();
            let typ = u32::from_be_bytes(b[12..16].try_into().unwrap());
            let len = u32::from_be_bytes(b[16..20].try_into().unwrap());
            std::io::copy(&mut (&mut s).take(len as u64), &mut std::io::sink()).unwrap();
            assert!(typ == REP_INFO || typ == REP_ACK, "GO refused: {typ:#x}");
            if typ == REP_ACK {
                return Client { s };
            }
        }
    }

    fn send(
        &mut self,
        kind: u16,
        cookie: u64,
        offset: u64,
        data: &[u8],
        len: u32,
    ) -> std::io::Result<()> {
        self.send_flags(0, kind, cookie, offset, data, len)
    }

    fn send_flags(
        &mut self,
        flags: u16,
        kind: u16,
        cookie: u64,
        offset: u64,
        data: &[u8],
        len: u32,
    ) -> std::io::Result<()> {
        let r = Request {
            flags,
            kind,
            cookie,
            offset,
            length: len,
        };
        self.s.write_all(&r.encode())?;
        self.s.write_all(data)
    }

    fn reply(&mut self) -> std::io::Result<(u32, u64)> {
        let mut b = [0u8; SIMPLE_REPLY_BYTES];
        self.s.read_exact(&mut b)?;
        proto::parse_simple_reply(&b).map_err(std::io::Error::other)
    }

    fn read(&mut self, offset: u64, len: u32) -> Vec<u8> {
        self.send(CMD_READ, 1, offset, &[], len).unwrap();
        assert_eq!(self.reply().unwrap(), (0, 1));
        let mut d = vec![0u8; len as usize];
        self.s.read_exact(&mut d).unwrap();
        d
    }
}

/// The content the crash test writes as version `seq` of an LBA.
fn block(lba: u64, seq: u64) -> Vec<u8> {
    let mut b = pseudo_random(lba * 1_000_003 + seq, LBA as usize);
    b[..8].copy_from_slice(&lba.to_le_bytes());
    b[8..16].copy_from_slice(&seq.to_le_bytes());
    b
}

/// LBAs the crash test writes (8 MiB of the 50 MiB device, overwritten many times, so
/// GC and checkpoints run).
const REGION: u64 = 2048;

/// Write random LBAs of the region with 16 writes in flight until the server dies.
/// `acked[lba]` is the last acknowledged version of each LBA (0: never written); the
/// versions in flight when the connection broke (at most one per LBA) are returned.
fn write_until_the_server_dies(sock: &Path, acked: &mut [u64], seq: &mut u64) -> Vec<(u64, u64)> {
    let mut c = Client::connect(sock);
    let mut inflight: std::collections::HashMap<u64, u64> = Default::default();
    let mut busy = vec![false; REGION as usize];
    let mut rng = *seq ^ 0x5EED_1234;
    loop {
        while inflight.len() < 16 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let lba = rng % REGION;
            if busy[lba as usize] {
                continue;
            }
            *seq += 1;
            busy[lba as usize] = true;
            // Sent in full, in part or not at all: it may or may not reach the device.
            inflight.insert(*seq, lba);
            let sent = c.send(CMD_WRITE, *seq, lba * LBA, &block(lba, *seq), LBA as u32);
            if sent.is_err() {
                return inflight.into_iter().map(|(s, l)| (l, s)).collect();
            }
        }
        match c.reply() {
            Ok((0, cookie)) => {
                let lba = inflight
                    .remove(&cookie)
                    .expect("a reply to a request we sent");
                busy[lba as usize] = false;
                acked[lba as usize] = cookie;
            }
            Ok((e, _)) => panic!("write failed with error {e}"),
            Err(_) => return inflight.into_iter().map(|(s, l)| (l, s)).collect(),
        }
    }
}

/// Read the region back; every LBA must hold its last acknowledged version, or the
/// version that was in flight when the server died (then that becomes the one to keep).
fn check_region(sock: &Path, acked: &mut [u64], pending: &[(u64, u64)]) {
    let mut c = Client::connect(sock);
    let data = c.read(0, (REGION * LBA) as u32);
    let mut lost = Vec::new();
    for lba in 0..REGION {
        let got = &data[(lba * LBA) as usize..((lba + 1) * LBA) as usize];
        let a = acked[lba as usize];
        let want = if a == 0 {
            vec![0u8; LBA as usize]
        } else {
            block(lba, a)
        };
        let flying = pending.iter().find(|p| p.0 == lba).map(|p| p.1);
        if got == want {
            continue;
        }
        match flying {
            Some(s) if got == block(lba, s) => acked[lba as usize] = s,
            _ => lost.push((lba, a)),
        }
    }
    assert!(
        lost.is_empty(),
        "{} of {REGION} LBAs lost their acknowledged data after SIGKILL: {:?}",
        lost.len(),
        &lost[..lost.len().min(10)]
    );
}

#[test]
fn sigkill_during_writes_then_restart_serves_every_acknowledged_block() {
    let dir = tempfile::tempdir().unwrap();
    let mut acked = vec![0u64; REGION as usize];
    let mut seq = 0u64;
    let mut srv = Serve::start(dir.path(), &[]);
    // Two rounds: kill during writes, restart (recovery), check, write on, kill again.
    for round in 0..2 {
        let sock = srv.socket();
        let (mut a, mut s) = (acked.clone(), seq);
        let writer = std::thread::spawn(move || {
            let pending = write_until_the_server_dies(&sock, &mut a, &mut s);
            (a, s, pending)
        });
        std::thread::sleep(Duration::from_millis(1200));
        let writes_before = seq;
        srv.kill();
        let (a, s, pending) = writer.join().unwrap();
        (acked, seq) = (a, s);
        eprintln!(
            "round {round}: {} writes issued, {} in flight at the kill",
            seq - writes_before,
            pending.len()
        );
        assert!(seq - writes_before > 500, "too few writes before the kill");
        assert!(
            !pending.is_empty(),
            "the kill should catch writes in flight"
        );
        srv = Serve::start(dir.path(), &[]);
        assert!(
            srv.log().contains("recovering from an unclean shutdown"),
            "{}",
            srv.log()
        );
        check_region(&srv.socket(), &mut acked, &pending);
    }
    srv.terminate();
}

/// `csd bench serve` runs fio against csd serve and nbdkit memory and reports both.
#[test]
fn bench_serve_compares_with_nbdkit() {
    let have = |t: &str| {
        Command::new(t)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !(have("fio") && have("nbdkit")) {
        eprintln!("notice: fio or nbdkit missing; bench serve test skipped");
        return;
    }
    let out = run(Command::new(CSD).args([
        "bench",
        "serve",
        "--preset",
        "tiny",
        "--runtime",
        "1",
        "--size",
        "16m",
        "--rounds",
        "2",
        "--json",
    ]));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 3, "randwrite, randwrite with flushes, randread");
    for j in jobs {
        assert!(j["csd_iops"].as_f64().unwrap() > 0.0, "{j}");
        assert!(j["csd_memory_iops"].as_f64().unwrap() > 0.0, "{j}");
        assert!(j["ratio_in_memory"].as_f64().unwrap() > 0.0, "{j}");
        assert!(j["nbdkit_memory_iops"].as_f64().unwrap() > 0.0, "{j}");
        assert!(j["nbdkit_file_iops"].as_f64().unwrap() > 0.0, "{j}");
        // Two rounds, each with all three servers; the median ratio lies in the range
        // of the rounds' ratios, which are the rounds' own IOPS over each other.
        let rounds = j["rounds"].as_array().unwrap();
        assert_eq!(rounds.len(), 2, "{j}");
        let ratios: Vec<f64> = rounds
            .iter()
            .map(|r| r["csd_iops"].as_f64().unwrap() / r["nbdkit_memory_iops"].as_f64().unwrap())
            .collect();
        let range = j["ratio_memory_range"].as_array().unwrap();
        let (lo, hi) = (range[0].as_f64().unwrap(), range[1].as_f64().unwrap());
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(1.0);
        assert!(close(lo, ratios[0].min(ratios[1])), "{j}");
        assert!(close(hi, ratios[0].max(ratios[1])), "{j}");
        let m = j["ratio_memory"].as_f64().unwrap();
        assert!(close(m, (ratios[0] + ratios[1]) / 2.0), "{j}");
    }
    // A round count out of range is refused before any server starts.
    let bad = Command::new(CSD)
        .args(["bench", "serve", "--preset", "tiny", "--rounds", "0"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--rounds"));
}

/// Read until the server closes `s`; `false` if it is still open after its read timeout.
fn closed_by_server(s: &mut impl Read) -> bool {
    let mut b = [0u8; 256];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// Poll `f` until it holds or `limit` passes.
fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

#[test]
fn silent_tcp_connections_do_not_lock_clients_out() {
    // 70 TCP connections that never answer the greeting (63 used to lock every other
    // client out for good), then a real client, during the flood and after it.
    let dir = tempfile::tempdir().unwrap();
    let srv = Serve::start_tcp(dir.path(), &["--handshake-timeout", "1"]);
    let addr = srv.addr();
    let t0 = Instant::now();
    let mut flood: Vec<TcpStream> = (0..70)
        .map(|_| {
            let s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut c = Client::connect_tcp(addr);
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    let data = pseudo_random(7, LBA as usize);
    c.send(CMD_WRITE, 2, 3 * LBA, &data, LBA as u32).unwrap();
    assert_eq!(c.reply().unwrap(), (0, 2));
    assert_eq!(c.read(3 * LBA, LBA as u32), data);
    if have("nbdinfo") {
        let uri = format!("nbd://{addr}/");
        run(Command::new("nbdinfo").arg(&uri));
    } else {
        eprintln!("nbdinfo is not installed: only the test's own client connects");
    }
    // The server drops every silent connection within the handshake timeout.
    for s in &mut flood {
        assert!(closed_by_server(s), "a silent connection is still open");
    }
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    assert!(
        eventually(Duration::from_secs(3), || {
            let s = &srv.stats()["server"];
            let dropped = s["handshake_timeouts"].as_u64().unwrap_or(0)
                + s["handshakes_evicted"].as_u64().unwrap_or(0);
            dropped == 70 && s["handshakes_pending"].as_u64() == Some(0)
        }),
        "{}",
        srv.stats()
    );
    // The client that got in is still served; a new one gets in too.
    assert_eq!(c.read(3 * LBA, LBA as u32), data);
    let mut d = Client::connect_tcp(addr);
    assert_eq!(d.read(3 * LBA, LBA as u32), data);
    srv.terminate();
}

#[test]
fn idle_timeout_closes_an_idle_connection() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Serve::start(dir.path(), &["--idle-timeout", "0.5"]);
    let mut c = Client::connect(&srv.socket());
    c.read(0, 4096);
    let t0 = Instant::now();
    c.s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert!(
        closed_by_server(&mut c.s),
        "the idle connection stayed open"
    );
    let after = t0.elapsed();
    assert!(
        after >= Duration::from_millis(450) && after < Duration::from_secs(3),
        "{after:?}"
    );
    assert!(eventually(Duration::from_secs(3), || srv.stats()["server"]
        ["idle_closed"]
        .as_u64()
        == Some(1)));
    // Without the flag connections stay open (the default is no idle timeout).
    srv.terminate();
    let srv = Serve::start(dir.path(), &[]);
    let mut c = Client::connect(&srv.socket());
    c.s.set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    assert!(!closed_by_server(&mut c.s), "closed without --idle-timeout");
    c.read(0, 4096);
    srv.terminate();
}

#[test]
fn read_only_serve_goes_on_without_a_stats_file_it_cannot_write() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    let image = ro.join("dev.img");
    let sock = dir.path().join("nbd.sock");
    let listen = [OsStr::new("--socket"), sock.as_os_str()];
    // Write a block, shut down cleanly; no stats file is left behind.
    let srv = Serve::launch(dir.path(), &image, &listen, &[]);
    let data = pseudo_random(11, LBA as usize);
    let mut c = Client::connect(&sock);
    c.send(CMD_WRITE, 2, 5 * LBA, &data, LBA as u32).unwrap();
    assert_eq!(c.reply().unwrap(), (0, 2));
    drop(c);
    srv.terminate();
    let stats = ro.join("dev.img.smart.json");
    std::fs::remove_file(&stats).unwrap();

    // The directory becomes read-only. Root writes there anyway, so for root the
    // stats file's temporary path is made a directory: the write fails either way.
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    let probe = ro.join("probe");
    if std::fs::write(&probe, b"x").is_ok() {
        std::fs::remove_file(&probe).unwrap();
        std::fs::create_dir(ro.join("dev.img.smart.json.tmp")).unwrap();
    }
    let srv = Serve::launch(dir.path(), &image, &listen, &["--read-only"]);
    let mut c = Client::connect(&sock);
    assert_eq!(c.read(5 * LBA, LBA as u32), data);
    c.send(CMD_WRITE, 3, 5 * LBA, &data, LBA as u32).unwrap();
    assert_eq!(c.reply().unwrap(), (EPERM, 3));
    drop(c);
    let log = srv.terminate();
    assert_eq!(
        log.matches("without a stats file").count(),
        1,
        "warned once: {log}"
    );
    assert!(!stats.exists());

    // An explicit --stats-file that cannot be written is still an error.
    let out = Command::new(CSD)
        .args(["serve", "--read-only", "--image"])
        .arg(&image)
        .arg("--socket")
        .arg(&sock)
        .arg("--stats-file")
        .arg(&stats)
        .output()
        .unwrap();
    assert!(!out.status.success());
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// LBAs the host-crash test writes.
const CRASH_REGION: u64 = 1024;

/// What the host-crash test knows of each LBA: the version known durable (a FLUSH, a
/// FUA write or a write-through write acknowledged it) and the versions sent since.
#[derive(Clone, Default)]
struct Durability {
    durable: Vec<u64>,
    sent: Vec<Vec<u64>>,
}

impl Durability {
    fn new() -> Durability {
        Durability {
            durable: vec![0; CRASH_REGION as usize],
            sent: vec![Vec::new(); CRASH_REGION as usize],
        }
    }

    fn made_durable(&mut self, lba: u64, seq: u64) {
        let i = lba as usize;
        if seq > self.durable[i] {
            self.durable[i] = seq;
            self.sent[i].retain(|&s| s > seq);
        }
    }
}

/// Write random LBAs of the crash region (8 in flight; FUA on one write in 8; a FLUSH
/// after every 16 writes) until the server dies; `write_through` says every
/// acknowledged write is durable.
fn write_and_flush_until_the_server_dies(
    sock: &Path,
    d: &mut Durability,
    seq: &mut u64,
    write_through: bool,
) {
    let mut c = Client::connect(sock);
    // Writes in flight: cookie -> (lba, FUA); flushes in flight: cookie -> the writes
    // acknowledged before the flush was sent (durable once it is acknowledged).
    let mut writes: std::collections::HashMap<u64, (u64, bool)> = Default::default();
    let mut flushes: std::collections::HashMap<u64, Vec<(u64, u64)>> = Default::default();
    let mut acked_not_durable: Vec<(u64, u64)> = Vec::new();
    let mut busy = vec![false; CRASH_REGION as usize];
    let mut rng = *seq ^ 0xC0FF_EE11;
    let mut since_flush = 0;
    loop {
        while writes.len() + flushes.len() < 8 {
            *seq += 1;
            let cookie = *seq;
            if since_flush >= 16 {
                since_flush = 0;
                flushes.insert(cookie, std::mem::take(&mut acked_not_durable));
                if c.send(CMD_FLUSH, cookie, 0, &[], 0).is_err() {
                    return;
                }
                continue;
            }
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let lba = rng % CRASH_REGION;
            if busy[lba as usize] {
                continue;
            }
            busy[lba as usize] = true;
            let fua = rng.is_multiple_of(8);
            writes.insert(cookie, (lba, fua));
            d.sent[lba as usize].push(cookie);
            since_flush += 1;
            let flags = if fua { CMD_FLAG_FUA } else { 0 };
            let data = block(lba, cookie);
            if c.send_flags(flags, CMD_WRITE, cookie, lba * LBA, &data, LBA as u32)
                .is_err()
            {
                return;
            }
        }
        match c.reply() {
            Ok((0, cookie)) => {
                if let Some(done) = flushes.remove(&cookie) {
                    for (lba, s) in done {
                        d.made_durable(lba, s);
                    }
                } else if let Some((lba, fua)) = writes.remove(&cookie) {
                    busy[lba as usize] = false;
                    if fua || write_through {
                        d.made_durable(lba, cookie);
                    } else {
                        acked_not_durable.push((lba, cookie));
                    }
                } else {
                    panic!("a reply to a request we did not send: {cookie}");
                }
            }
            Ok((e, _)) => panic!("request failed with error {e}"),
            Err(_) => return,
        }
    }
}

/// Every LBA of the crash region holds its durable version or one sent after it; the
/// version found becomes the durable one. Returns how many LBAs held a version newer
/// than the durable one.
fn check_durable(sock: &Path, d: &mut Durability, round: u64) -> u64 {
    let mut c = Client::connect(sock);
    let data = c.read(0, (CRASH_REGION * LBA) as u32);
    let mut newer = 0;
    for lba in 0..CRASH_REGION {
        let i = lba as usize;
        let got = &data[(lba * LBA) as usize..((lba + 1) * LBA) as usize];
        let version = |s: u64| {
            if s == 0 {
                vec![0u8; LBA as usize]
            } else {
                block(lba, s)
            }
        };
        let found = if got == version(d.durable[i]) {
            Some(d.durable[i])
        } else {
            d.sent[i].iter().copied().find(|&s| got == version(s))
        };
        let Some(s) = found else {
            panic!(
                "cut {round}: LBA {lba} lost its durable version {} (sent since: {:?})",
                d.durable[i], d.sent[i]
            );
        };
        if s != d.durable[i] {
            newer += 1;
        }
        d.durable[i] = s;
        d.sent[i].clear();
    }
    newer
}

/// Host power cuts under a client that writes with FLUSH and FUA: `csd serve` keeps a
/// copy of what it synced (`CSD_DURABLE_COPY`), is killed at a random instant, and the
/// image is replaced by what a host power loss may leave (`csd_nand::host_crash_image`:
/// per 4 KiB page changed since the last sync, the synced or the later version). Every
/// flushed block must read back and the image must open, every time.
fn host_power_cuts(cache: &str, cuts: u64, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("dev.img");
    let mut durable_copy = image.clone().into_os_string();
    durable_copy.push(".durable");
    let durable_copy = PathBuf::from(durable_copy);
    let crashed = dir.path().join("crashed.img");
    let sock = dir.path().join("nbd.sock");
    let listen = [OsStr::new("--socket"), sock.as_os_str()];
    let extra = ["--write-cache", cache];
    let env = [("CSD_DURABLE_COPY", "1")];
    let start = || Serve::launch_env(dir.path(), &image, &listen, &extra, &env);
    let mut d = Durability::new();
    let mut seq = 0;
    let mut srv = start();
    let mut rng = seed;
    let (mut newer, mut writes) = (0, 0);
    for cut in 0..cuts {
        let s = srv.socket();
        let (mut dd, mut sq) = (d.clone(), seq);
        let wt = cache == "write-through";
        let writer = std::thread::spawn(move || {
            write_and_flush_until_the_server_dies(&s, &mut dd, &mut sq, wt);
            (dd, sq)
        });
        rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        std::thread::sleep(Duration::from_millis(60 + (rng >> 33) % 240));
        srv.kill();
        let before = seq;
        (d, seq) = writer.join().unwrap();
        writes += seq - before;
        let keep = [0.0, 0.5, 1.0, 0.25][(cut % 4) as usize];
        csd_nand::host_crash_image(&image, &durable_copy, &crashed, seed ^ cut, keep).unwrap();
        std::fs::rename(&crashed, &image).unwrap();
        srv = start();
        newer += check_durable(&srv.socket(), &mut d, cut);
    }
    srv.terminate();
    eprintln!(
        "{cache}: {cuts} host power cuts, {writes} requests, {newer} LBAs kept a version newer than the flushed one"
    );
    assert!(writes > cuts * 20, "too few writes between cuts");
}

/// Cuts per write-cache mode (`CSD_HOST_CUTS` for longer runs by hand).
fn host_cuts(default: u64) -> u64 {
    std::env::var("CSD_HOST_CUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn host_power_cuts_lose_no_flushed_block_write_back() {
    host_power_cuts("write-back", host_cuts(25), 11);
}

#[test]
fn host_power_cuts_lose_no_flushed_block_write_through() {
    host_power_cuts("write-through", host_cuts(25), 12);
}
