//! `csd repro flixr` end to end at a tiny scale: the report, its plots and the JSON with
//! `speedup_over_host_index` per workload and configuration; bad options refused.

mod common;

use common::csd;

#[test]
fn repro_flixr_writes_report_plots_and_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_dir = dir.path().join("r");
    let out = csd(&[
        "repro",
        "flixr",
        "--out",
        out_dir.to_str().unwrap(),
        "--preset",
        "tiny",
        "--sf",
        "0.001",
        "--queries",
        "2",
        "--tpcc-txns",
        "2",
        "--workloads",
        "scan,join,insert,delete,tpch-q6,tpch-q14",
        "--cache-sweep-kib",
        "4",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    for w in ["scan", "join", "insert", "delete", "tpch-q6", "tpch-q14"] {
        for c in [
            "no-index",
            "host-index",
            "host-index-ideal",
            "in-ssd-btree",
            "flixr-s",
            "flixr-hs",
        ] {
            let s = j["speedup_over_host_index"][w][c]["speedup_over_host_index"]
                .as_f64()
                .unwrap_or_else(|| panic!("{w} {c}"));
            assert!(s > 0.0, "{w} {c}: {s}");
        }
        assert_eq!(
            j["speedup_over_host_index"][w]["host-index"]["speedup_over_host_index"],
            1.0
        );
    }
    assert!(
        j["command"]
            .as_str()
            .unwrap()
            .starts_with("csd repro flixr")
    );
    assert!(!j["comparison"].as_array().unwrap().is_empty());
    // Figure 12 (§6.4): Q6 with the primary key and with secondary keys, three
    // configurations each, host-index at 1.0 in both.
    let f12 = j["figure12"].as_array().expect("figure12");
    assert_eq!(f12.len(), 6);
    for r in f12 {
        assert!(r["modeled_ns"].as_u64().unwrap() > 0, "{r}");
        assert!(r["table_pages"].as_u64().unwrap() <= r["total_pages"].as_u64().unwrap());
        if r["config"] == "host-index" {
            assert_eq!(r["speedup_over_host_index"], 1.0);
        }
    }
    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    for s in [
        "Figure 9",
        "Figure 10",
        "Figure 11",
        "Figure 12",
        "Side by side",
        "Reproduce",
    ] {
        assert!(md.contains(s), "{s} missing");
    }
    for f in ["fig9", "fig10", "fig11", "cache_sweep"] {
        assert!(out_dir.join(format!("{f}.png")).exists(), "{f}.png");
        assert!(out_dir.join(format!("{f}.svg")).exists(), "{f}.svg");
    }
}

#[test]
fn repro_flixr_refuses_bad_options() {
    for args in [
        &["repro", "flixr", "--workloads", "nope"][..],
        &["repro", "flixr", "--sf", "0"][..],
        &["repro", "flixr", "--cache-sweep-kib", "0"][..],
        &["repro", "flixr", "--preset", "no-such-preset"][..],
    ] {
        let out = csd(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(!String::from_utf8_lossy(&out.stderr).is_empty());
    }
}
