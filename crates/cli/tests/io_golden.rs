//! Golden modeled figures of `csd io`: speed work on the emulator (e.g. the workload
//! engine's cache hints) must not change what the model says. The figures were recorded
//! with the release binary of main before the cache hints existed; a change here is a
//! change of the model and must be explained in its commit. Re-recorded for issue 30
//! (calendars: an early arrival booked late takes the earliest gap instead of queueing
//! behind later arrivals): modeled time 2.247971579 → 1.756049448 s, p50 701.951 →
//! 41.855 µs, p99 6619.135 → 6688.767 µs, max 17121.279 → 12533.759 µs, IOPS 8896.9 →
//! 11389.2, energy 72.353 → 56.612 J (less idle time); reads and writes unchanged.
//! Since the event core became the default time model (2026-12-03) the calendar run
//! names `--time-model calendar`; the default run gives the event core's figures.

mod common;
use common::csd;

/// The JSON report of the golden randrw run on `tiny`, with `extra` arguments.
fn randrw_report(extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "io",
        "--preset",
        "tiny",
        "--rw",
        "randrw",
        "--rwmixread",
        "70",
        "--bs",
        "4k",
        "--iodepth",
        "8",
        "--ops",
        "20000",
        "--seed",
        "11",
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = csd(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON report")
}

/// A number of a JSON report.
fn num(v: &serde_json::Value, k: &str) -> f64 {
    v[k].as_f64()
        .unwrap_or_else(|| panic!("no number `{k}` in {v}"))
}

#[test]
fn randrw_on_tiny_keeps_its_modeled_figures() {
    let v = randrw_report(&["--time-model", "calendar"]);
    let num = |k: &str| num(&v, k);
    assert_eq!(num("reads"), 14116.0);
    assert_eq!(num("writes"), 5884.0);
    assert_eq!(num("user_read_bytes"), 57_819_136.0);
    assert_eq!(num("modeled_time_s"), 1.756049448);
    assert_eq!(num("latency_p50_us"), 41.855);
    assert_eq!(num("latency_p99_us"), 6688.767);
    assert_eq!(num("latency_max_us"), 12533.759);
    assert!((num("iops") - 11389.200926419471).abs() < 1e-6);
    assert!((num("energy_j") - 56.611757079840004).abs() < 1e-9);
}

/// The same run on the event core (`--time-model events`, issue 30): the same commands
/// (reads, writes, bytes: the FTL's decisions do not depend on modeled time), no booking
/// waits behind a later arrival anywhere, and its own golden figures, recorded with the
/// release build of 2026-12-02: 4.2% less modeled time than the calendar (1.683114702
/// against 1.756049448 s), p99 5042.175 against 6688.767 µs. A bad model name is refused.
#[test]
fn randrw_on_the_event_core_keeps_its_modeled_figures() {
    let v = randrw_report(&["--time-model", "events"]);
    let num = |k: &str| num(&v, k);
    assert_eq!(v["time_model"], "events");
    assert_eq!(num("reads"), 14116.0);
    assert_eq!(num("writes"), 5884.0);
    assert_eq!(num("user_read_bytes"), 57_819_136.0);
    for class in [
        "die",
        "channel",
        "dram",
        "host_link",
        "embedded_cpu",
        "host_cpu",
    ] {
        assert_eq!(num(&format!("order_inversions_{class}")), 0.0, "{class}");
    }
    assert_eq!(num("modeled_time_s"), 1.683114702);
    assert_eq!(num("latency_p50_us"), 41.855);
    assert_eq!(num("latency_p99_us"), 5042.175);
    assert_eq!(num("latency_max_us"), 11960.319);
    assert!((num("iops") - 11882.731447972345).abs() < 1e-6);
    assert!((num("energy_j") - 54.277845207839995).abs() < 1e-9);
    // The event core is the default (2026-12-03): no flag, the same run.
    let default = randrw_report(&[]);
    assert_eq!(default["time_model"], "events");
    assert_eq!(default["modeled_time_s"], v["modeled_time_s"]);
    assert_eq!(default["latency_p99_us"], v["latency_p99_us"]);

    let text = csd(&[
        "io",
        "--preset",
        "tiny",
        "--rw",
        "randread",
        "--ops",
        "500",
        "--time-model",
        "events",
    ]);
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(stdout.contains("time model: events"), "{stdout}");
    let bad = csd(&["io", "--preset", "tiny", "--time-model", "fcfs"]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("unknown time model \"fcfs\": calendar or events"),
        "{err}"
    );
}

/// Random reads of a fresh device find LBAs never written: the report says so (and how
/// many) instead of passing MAP lookups off as flash reads; after `--precondition` it
/// does not.
#[test]
fn reads_of_never_written_lbas_are_pointed_out() {
    let run = |extra: &[&str]| {
        let mut args = vec![
            "io", "--preset", "tiny", "--rw", "randread", "--bs", "4k", "--ops", "2000",
        ];
        args.extend_from_slice(extra);
        let out = csd(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let fresh = run(&[]);
    assert!(
        fresh.contains("note: 2000 of the 2000 sectors read (100%) were never written"),
        "{fresh}"
    );
    let filled = run(&["--precondition"]);
    assert!(!filled.contains("were never written"), "{filled}");
    let json = run(&["--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("JSON report");
    assert_eq!(v["unwritten_read_sectors"].as_u64(), Some(2000), "{v}");
}
