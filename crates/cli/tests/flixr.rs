//! `csd repro flixr` end to end at a tiny scale: the JSON's speed-ups are the ratios of
//! the measured throughputs, the traffic counters show FLIXR's mechanism, every headline
//! carries its scale-trend re-run and appears in the report; bad options refused.

mod common;

use common::csd;

#[test]
fn repro_flixr_reports_what_it_measured() {
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
        "--trend-sf",
        "0.002",
        "--sweep-host-cache",
        "none",
        "--sweep-dram-factor",
        "2",
        "--sweep-full-scan",
        "off",
        "--sweep-node-kib",
        "4",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let measure = |w: &str, c: &str| -> serde_json::Value {
        j["measures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["workload"] == w && m["config"] == c)
            .unwrap_or_else(|| panic!("{w} {c} not measured"))
            .clone()
    };
    for w in ["scan", "join", "insert", "delete", "tpch-q6", "tpch-q14"] {
        // The speed-up is the ratio of the measured throughputs.
        let host = measure(w, "host-index")["ops_per_minute"].as_f64().unwrap();
        for c in [
            "no-index",
            "host-index",
            "host-index-ideal",
            "in-ssd-btree",
            "flixr-s",
            "flixr-hs",
        ] {
            let m = measure(w, c);
            let s = j["speedup_over_host_index"][w][c]["speedup_over_host_index"]
                .as_f64()
                .unwrap();
            let want = m["ops_per_minute"].as_f64().unwrap() / host;
            assert!(
                (s - want).abs() < 1e-9 * want.max(1.0),
                "{w} {c}: {s} vs {want}"
            );
            // Every configuration answered alike (the run fails otherwise).
            assert_eq!(m["answer"], measure(w, "host-index")["answer"], "{w} {c}");
        }
    }
    // Mechanisms, from the traffic counters: FLIXR skips pages and fetches fewer than the
    // full scan; only the host index (not its ideal form) reads index pages.
    let t = |w: &str, c: &str, k: &str| measure(w, c)["traffic"][k].as_u64().unwrap();
    assert!(t("scan", "flixr-s", "pages_skipped") > 0);
    assert!(
        t("scan", "flixr-s", "data_pages_to_host") < t("scan", "no-index", "data_pages_to_host")
    );
    assert!(t("scan", "host-index", "index_pages_to_host") > 0);
    assert_eq!(t("scan", "host-index-ideal", "index_pages_to_host"), 0);
    assert_eq!(t("scan", "flixr-hs", "index_pages_to_host"), 0);
    // Figure 11 is the host index's measured split, normalized to its total.
    let f11 = j["figure11"].as_array().unwrap();
    let h = f11.iter().find(|f| f["config"] == "host-index").unwrap();
    let (i, d) = (
        h["index_pages"].as_f64().unwrap(),
        h["data_pages"].as_f64().unwrap(),
    );
    assert!((i + d - 1.0).abs() < 1e-9, "{i} + {d}");
    // The comparison: every headline has a status, and the scale trend re-measured each
    // headline at SF 0.002 (a measured re-run of --sf), shown in the report beside it.
    let cs = j["comparison"].as_array().unwrap();
    assert!(!cs.is_empty());
    let trend = j["trend"].as_array().unwrap();
    assert_eq!(trend.len(), 2, "{trend:?}");
    assert_eq!(trend[0]["sf"], 0.001);
    assert_eq!(trend[1]["sf"], 0.002);
    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    for c in cs {
        let status = c["status"].as_str().unwrap();
        assert!(["within", "explained", "miss"].contains(&status), "{c}");
        let headline = c["headline"].as_str().unwrap();
        assert!(md.contains(headline), "{headline} not in the report");
        let reruns = c["measured"].as_array().unwrap();
        assert!(
            reruns
                .iter()
                .any(|m| m["parameter"] == "--sf"
                    && m["setting"].as_str().unwrap().contains("0.002")),
            "{headline}: no trend re-run: {reruns:?}"
        );
    }
    assert!(md.contains("## Scale trend"));
    // One point of each sweep of what the paper does not report, every headline at each;
    // a sweep point never changes a status (statuses are the three above).
    let sens = j["sensitivity"].as_array().expect("sensitivity");
    assert_eq!(sens.len(), 4, "{sens:?}");
    assert_eq!(sens[0]["parameter"], "host B+tree cache");
    assert_eq!(sens[0]["setting"], "none");
    assert_eq!(sens[1]["parameter"], "B+tree optimizer: full scan above");
    assert_eq!(sens[1]["setting"], "off (every range through the index)");
    assert_eq!(sens[2]["parameter"], "B+tree node");
    assert_eq!(sens[2]["setting"], "4 KiB (fan-out 170)");
    assert_eq!(sens[3]["parameter"], "isp.dram_access_cycles");
    for p in sens {
        assert_eq!(p["headlines"].as_array().unwrap().len(), cs.len(), "{p}");
    }
    assert!(md.contains("## Sensitivity to what the paper does not report"));
    // Figure 12 (§6.4): Q6 with the primary key and with secondary keys, three
    // configurations each; the speed-up is the ratio of modeled times.
    let f12 = j["figure12"].as_array().expect("figure12");
    assert_eq!(f12.len(), 6);
    for r in f12 {
        assert!(r["table_pages"].as_u64().unwrap() <= r["total_pages"].as_u64().unwrap());
        let host = f12
            .iter()
            .find(|h| h["config"] == "host-index" && h["secondary"] == r["secondary"])
            .unwrap();
        let want = host["modeled_ns"].as_f64().unwrap() / r["modeled_ns"].as_f64().unwrap();
        let s = r["speedup_over_host_index"].as_f64().unwrap();
        assert!((s - want).abs() < 1e-9 * want.max(1.0), "{r}");
    }
    assert!(
        j["command"]
            .as_str()
            .unwrap()
            .starts_with("csd repro flixr")
    );
}

#[test]
fn repro_flixr_refuses_bad_options() {
    for args in [
        &["repro", "flixr", "--workloads", "nope"][..],
        &["repro", "flixr", "--sf", "0"][..],
        &["repro", "flixr", "--cache-sweep-kib", "0"][..],
        &["repro", "flixr", "--preset", "no-such-preset"][..],
        &["repro", "flixr", "--trend-sf", "0"][..],
        &["repro", "flixr", "--tpcc-population", "huge"][..],
        &["repro", "flixr", "--sweep-host-cache", "101"][..],
        &["repro", "flixr", "--sweep-dram-factor", "0"][..],
        &["repro", "flixr", "--sweep-full-scan", "never"][..],
        &["repro", "flixr", "--full-scan", "200"][..],
        &["repro", "flixr", "--node-kib", "2"][..],
        &["repro", "flixr", "--node-kib", "32"][..],
        &["repro", "flixr", "--sweep-node-kib", "4,64"][..],
    ] {
        let out = csd(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(!String::from_utf8_lossy(&out.stderr).is_empty());
    }
}
