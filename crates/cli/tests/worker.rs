//! `csd worker` end to end: an array of 4 devices served by 2 worker processes on
//! 127.0.0.1, queried through datafusion-distributed; answers and modeled device figures
//! checked against the same array run in process; a request without the token refused;
//! a worker killed (SIGKILL) fails the query with its name and devices, and the query
//! after a restart is right; manifests that do not add up refused with the field named.
//!
//! The TPC-H queries run at SF 0.01 on `q1,q3,q6,q12,q14` by default (CI);
//! `CSD_DIST_SF=0.1 CSD_DIST_QUERIES=all` runs all 22 at SF 0.1.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::{csd, ok};
use csd_sql::Manifest;
use serde_json::Value;

const TOKEN: &str = "test-token-0123456789abcdef";

/// A running `csd worker`; killed when dropped.
struct Worker {
    child: Child,
    url: String,
    devices: String,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Worker {
    /// Starts a worker of `devices` of the array in `dir` on `listen`, with the token.
    fn start(dir: &Path, devices: &str, listen: &str) -> Worker {
        let mut child = Command::new(env!("CARGO_BIN_EXE_csd"))
            .args([
                "worker",
                "--array",
                dir.to_str().expect("utf-8"),
                "--devices",
                devices,
                "--listen",
                listen,
                "--threads",
                "2",
            ])
            .env("CSD_WORKER_TOKEN", TOKEN)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start csd worker");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("worker's first line");
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no address in `{line}`"))
            .trim_end_matches(',')
            .to_string();
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let err = child.stderr.take().expect("stderr");
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap_or_else(|e| e.into_inner());
                s.push_str(&l);
                s.push('\n');
            }
        });
        Worker {
            child,
            url,
            devices: devices.to_string(),
            stderr,
        }
    }

    fn stderr(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `csd query --array DIR --json` with the token; the parsed output or the failure.
fn query(dir: &Path, sql: &str, strategy: &str, extra: &[&str]) -> Result<Value, String> {
    let mut args = vec![
        "query",
        "--array",
        dir.to_str().expect("utf-8"),
        "--threads",
        "2",
        "--strategy",
        strategy,
        "--json",
    ];
    args.extend_from_slice(extra);
    args.push(sql);
    let out = Command::new(env!("CARGO_BIN_EXE_csd"))
        .args(&args)
        .env("CSD_WORKER_TOKEN", TOKEN)
        .output()
        .expect("run csd");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
}

/// Each run's per-device modeled figures (time, flash reads, host-link bytes).
fn device_figures(v: &Value) -> Vec<Value> {
    v["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| {
            let devices = r["array"]["devices"].as_array().expect("devices");
            Value::Array(
                devices
                    .iter()
                    .map(|d| {
                        serde_json::json!([
                            d["modeled_time_s"],
                            d["flash_reads"],
                            d["host_link_bytes"]
                        ])
                    })
                    .collect(),
            )
        })
        .collect()
}

/// An array of 4 devices in `dir` holding TPC-H at `sf`.
fn tpch_array(dir: &Path, sf: &str) {
    let d = dir.to_str().expect("utf-8");
    ok(&csd(&[
        "array",
        "create",
        "--devices",
        "4",
        "--preset",
        "tiny",
        "--dir",
        d,
    ]));
    ok(&csd(&[
        "load", "tpch", "--sf", sf, "--layout", "pax", "--array", d,
    ]));
}

/// Writes the manifest's `workers`: devices 0, 1 on `a`, 2, 3 on `b`.
fn place(dir: &Path, a: &str, b: &str) {
    let mut m = Manifest::read(dir).expect("manifest");
    m.workers = vec![a.into(), a.into(), b.into(), b.into()];
    m.write(dir).expect("write manifest");
}

fn queries() -> Vec<String> {
    match std::env::var("CSD_DIST_QUERIES").as_deref() {
        Ok("all") => (1..=22).map(|q| format!("q{q}")).collect(),
        Ok(list) => list.split(',').map(str::to_string).collect(),
        Err(_) => ["q1", "q3", "q6", "q12", "q14"].map(String::from).to_vec(),
    }
}

#[test]
fn two_workers_answer_like_the_array_in_process_and_a_killed_one_is_named() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("arr");
    let sf = std::env::var("CSD_DIST_SF").unwrap_or_else(|_| "0.01".into());
    tpch_array(&dir, &sf);
    let w0 = Worker::start(&dir, "dev0.img,dev1.img", "127.0.0.1:0");
    let w1 = Worker::start(&dir, "dev2.img,dev3.img", "127.0.0.1:0");
    place(&dir, &w0.url, &w1.url);

    for q in queries() {
        let local = query(&dir, &q, "all", &["--in-process"]).expect("in process");
        let dist = query(&dir, &q, "all", &[]).unwrap_or_else(|e| {
            panic!(
                "{q} distributed: {e}\nworkers:\n{}{}",
                w0.stderr(),
                w1.stderr()
            )
        });
        assert_eq!(dist["rows"], local["rows"], "{q}: rows differ");
        assert_eq!(
            dist["runs"].as_array().map(Vec::len),
            local["runs"].as_array().map(Vec::len),
            "{q}"
        );
        // Every device's scans on its worker reported back, as many as in process.
        let counts = |v: &Value| -> Vec<Vec<usize>> {
            v["runs"]
                .as_array()
                .expect("runs")
                .iter()
                .map(|r| {
                    let devices = r["array"]["devices"].as_array().expect("devices");
                    devices
                        .iter()
                        .map(|d| d["scans"].as_array().map_or(0, Vec::len))
                        .collect()
                })
                .collect()
        };
        assert_eq!(counts(&dist), counts(&local), "{q}: scans per device");
        assert!(counts(&dist).iter().all(|r| r.len() == 4), "{q}");
        // Scans without joins run the same device programs: the same modeled figures.
        if ["q1", "q6"].contains(&q.as_str()) {
            assert_eq!(device_figures(&dist), device_figures(&local), "{q}");
        }
    }

    // A request without the token is refused, and the worker logs it.
    let out = Command::new(env!("CARGO_BIN_EXE_csd"))
        .args(["query", "--array", dir.to_str().expect("utf-8"), "q6"])
        .env_remove("CSD_WORKER_TOKEN")
        .output()
        .expect("run csd");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("token"), "{err}");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let logs = format!("{}{}", w0.stderr(), w1.stderr());
    assert!(logs.contains("refused a request"), "{logs}");

    // SIGKILL one worker: the query fails naming it and its devices; no image changed.
    let images: Vec<Vec<u8>> = (0..4)
        .map(|d| std::fs::read(dir.join(format!("dev{d}.img"))).expect("image"))
        .collect();
    let (url1, devs1) = (w1.url.clone(), w1.devices.clone());
    drop(w1);
    let err = query(&dir, "q6", "hw-isp", &[]).expect_err("a dead worker");
    let bare = url1.trim_start_matches("http://");
    assert!(err.contains(bare), "{err}");
    assert!(
        err.contains("dev2.img") && err.contains("dev3.img"),
        "{err}"
    );
    for (d, before) in images.iter().enumerate() {
        let now = std::fs::read(dir.join(format!("dev{d}.img"))).expect("image");
        assert!(now == *before, "dev{d}.img changed");
    }
    // Restarted on the same address, the next query is right.
    let w1 = Worker::start(&dir, &devs1, bare);
    assert_eq!(w1.url, url1);
    let local = query(&dir, "q6", "hw-isp", &["--in-process"]).expect("in process");
    let dist = query(&dir, "q6", "hw-isp", &[]).expect("after restart");
    assert_eq!(dist["rows"], local["rows"]);
    drop(w0);
}

#[test]
fn bad_placements_are_refused_with_the_field_named() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("arr");
    let d = dir.to_str().expect("utf-8");
    ok(&csd(&[
        "array",
        "create",
        "--devices",
        "2",
        "--preset",
        "tiny",
        "--dir",
        d,
    ]));
    ok(&csd(&[
        "load",
        "synthetic",
        "--columns",
        "4",
        "--rows",
        "2000",
        "--name",
        "s4",
        "--array",
        d,
    ]));
    // The manifest as loaded; each case writes it with another `workers` list
    // (`Manifest::write` does not check, `Manifest::read` does).
    let base = Manifest::read(&dir).expect("manifest");
    let set = |workers: Vec<String>| {
        let mut m = base.clone();
        m.workers = workers;
        m.write(&dir).expect("write");
    };
    let err = |w: Vec<String>| {
        set(w);
        query(&dir, "SELECT COUNT(*) FROM s4", "hw-isp", &[]).expect_err("a bad placement")
    };
    // One worker listed for two devices.
    let e = err(vec!["http://127.0.0.1:1".into()]);
    assert!(
        e.contains("workers") && e.contains("one worker address per device"),
        "{e}"
    );
    // Not an address.
    let e = err(vec!["http://127.0.0.1:1".into(), "nowhere".into()]);
    assert!(e.contains("workers[1]"), "{e}");
    // A device that its worker does not serve.
    set(Vec::new()); // a worker reads a valid manifest
    let w = Worker::start(&dir, "dev0.img", "127.0.0.1:0");
    let e = err(vec![w.url.clone(), w.url.clone()]);
    assert!(
        e.contains("dev1.img") && e.contains("not served by worker"),
        "{e}"
    );
    // A worker that is not running (unknown worker).
    let e = err(vec![w.url.clone(), "http://127.0.0.1:9".into()]);
    assert!(e.contains("127.0.0.1:9") && e.contains("dev1.img"), "{e}");
    // Placement that does not add up: rows per device changed in the manifest.
    set(vec![w.url.clone(), w.url.clone()]);
    let mut m = Manifest::read(&dir).expect("manifest");
    m.workers.clear();
    m.tables[0].device_rows[0] += 1;
    m.write(&dir).expect("write");
    let out = csd(&["query", "--array", d, "SELECT COUNT(*) FROM s4"]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("do not add up"), "{e}");
    // A non-loopback address without --allow-remote and a token is refused.
    set(Vec::new());
    let out = csd(&["worker", "--array", d, "--listen", "0.0.0.0:0"]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("--allow-remote"), "{e}");
}
