//! `csd bench ycsb` and `csd repro batch-io` end to end at a tiny scale: the JSON carries
//! the paper's figures and they hang together; the repro writes its report and plots;
//! bad options are refused with a clear message.

mod common;

use common::csd;

fn json(args: &[&str]) -> serde_json::Value {
    let out = csd(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

#[test]
fn bench_ycsb_prints_paper_figures_for_both_interfaces() {
    for iface in ["block", "batch"] {
        let j = json(&[
            "bench",
            "ycsb",
            "--interface",
            iface,
            "--workload",
            "write-heavy",
            "--records",
            "5000",
            "--ops",
            "5000",
            "--cache",
            "20%",
            "--json",
        ]);
        assert_eq!(j["interface"], iface);
        assert_eq!(j["run"]["ops"], 5000);
        assert_eq!(j["run"]["read_misses"], 0);
        assert_eq!(j["run"]["updates"], 4750);
        assert!(j["run"]["modeled_ops_per_s"].as_f64().unwrap() > 0.0);
        assert!(j["run"]["modeled_latency"]["p99_us"].as_f64().unwrap() > 0.0);
        assert!(j["user_read_bytes"].as_u64().unwrap() > 0, "{j}");
        let ra = j["read_amplification"].as_f64().unwrap();
        assert!(ra >= 1.0, "{j}");
        let busy = j["host_cpu_busy_share"].as_f64().unwrap();
        assert!(busy > 0.0 && busy <= 1.0 + 1e-9, "{j}");
        // The run's misses and buffer writes booked device resources; the bookings that
        // waited behind a later arrival are a part of them.
        let bookings = j["device_bookings"].as_u64().unwrap();
        let inversions = j["order_inversions"].as_u64().unwrap();
        assert!(bookings > 0 && inversions <= bookings, "{j}");
        let by_class = j["bookings_by_class"].as_object().unwrap();
        let sum: u64 = by_class
            .values()
            .map(|c| c["bookings"].as_u64().unwrap())
            .sum();
        assert_eq!(sum, bookings, "{j}");
        let die = &by_class["die"];
        assert!(
            die["order_inversion_wait_ns"].as_u64() <= die["wait_ns"].as_u64(),
            "{j}"
        );
    }
}

#[test]
fn bench_ycsb_compares_with_redb_and_fjall() {
    let j = json(&[
        "bench",
        "ycsb",
        "--workload",
        "read-heavy",
        "--records",
        "3000",
        "--ops",
        "3000",
        "--cache",
        "100%",
        "--compare",
        "redb,fjall",
        "--json",
    ]);
    let peers = j["peers"].as_array().expect("peers");
    assert_eq!(peers.len(), 2);
    for p in peers {
        assert_eq!(p["run"]["ops"], 3000);
        assert!(p["csd_wall_ops_over_peer"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn bad_options_are_refused() {
    for args in [
        vec!["bench", "ycsb", "--cache", "0%"],
        vec!["bench", "ycsb", "--workload", "g"],
        vec!["bench", "ycsb", "--interface", "nvme"],
        vec![
            "bench",
            "ycsb",
            "--compare",
            "rocksdb",
            "--records",
            "100",
            "--ops",
            "10",
        ],
    ] {
        let out = csd(&args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("use"), "{args:?}: {err}");
    }
}

#[test]
fn a_bad_preset_override_or_buffer_count_is_refused_and_named() {
    for (args, names) in [
        (
            vec![
                "bench",
                "ycsb",
                "--set",
                "ftl.serial_contextz=true",
                "--ops",
                "10",
            ],
            "serial_contextz",
        ),
        (
            vec![
                "bench",
                "ycsb",
                "--set",
                "ftl.serial_contexts=7",
                "--ops",
                "10",
            ],
            "serial_contexts",
        ),
        (
            vec!["bench", "ycsb", "--write-buffers", "many"],
            "write-buffers",
        ),
    ] {
        let out = csd(&args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(names), "{args:?}: {err}");
    }
}

#[test]
fn repro_batch_io_writes_its_report_and_plots() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_dir = dir.path().join("r");
    let out = csd(&[
        "repro",
        "batch-io",
        "--out",
        out_dir.to_str().unwrap(),
        "--records",
        "3000",
        "--duration",
        "0.05",
        "--caches",
        "50",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    for s in [
        "Figure 11",
        "Figure 12",
        "Figure 13",
        "Figure 15",
        "Tables 3 and 4",
        "done records per MiB",
        "Scale and mechanisms measured in this run",
        "Reproduce:",
    ] {
        assert!(md.contains(s), "{s} missing");
    }
    for f in ["fig11a", "fig11f", "fig12", "fig13a", "fig13b", "fig15"] {
        assert!(out_dir.join(format!("{f}.png")).exists(), "{f}.png");
        assert!(out_dir.join(format!("{f}.svg")).exists(), "{f}.svg");
    }
}
