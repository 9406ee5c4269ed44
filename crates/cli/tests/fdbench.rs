//! `csd bench fdtree` end to end: several schemes on one request stream give one JSON
//! object with a run per scheme and the paper's headline ratios computed from those
//! runs; a bad scheme list is refused before any run.

mod common;

use common::csd;

#[test]
fn scheme_list_runs_each_scheme_and_reports_the_headline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_dir = dir.path().to_str().expect("utf-8 path");
    let out = csd(&[
        "bench",
        "fdtree",
        "--scheme",
        "xm,ds,fc",
        "--preload",
        "5000",
        "--requests",
        "5000",
        // Paced: wall-clock latencies (in virtual time host work is free, so a run this
        // small, all in the cache, takes no modeled time at all; csd-repro's
        // `virtual_runs_serve_in_arrival_order_and_repeat_exactly` covers virtual runs).
        "--clock",
        "paced",
        "--out",
        out_dir,
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("one JSON object on stdout");
    let runs = v["runs"].as_array().expect("runs");
    let names: Vec<&str> = runs.iter().filter_map(|r| r["scheme"].as_str()).collect();
    assert_eq!(names, ["FD+XM", "FD+DS", "FD+FC"]);
    for r in runs {
        assert_eq!(r["requests"].as_u64(), Some(5000));
        assert!(r["throughput_rps"].as_f64().is_some_and(|t| t > 0.0));
        // A plot, unless every latency was 0 in modeled time (nothing to draw on a log
        // scale: the index fit in the cache and no merge ran).
        match r["plot_png"].as_str() {
            Some(p) => assert!(std::path::Path::new(p).exists()),
            None => {
                for k in ["insert_rp_max_ms", "lookup_rp_max_ms", "lookup_ro_max_ms"] {
                    assert_eq!(r[k].as_f64(), Some(0.0), "{k} without a plot");
                }
            }
        }
    }
    // The ratios are those of the runs' own figures.
    let max = |i: usize, k: &str| runs[i][k].as_f64().expect(k);
    let want = max(0, "insert_rp_max_ms") / max(2, "insert_rp_max_ms").max(1e-9);
    let got = v["xm_over_fc_insert_rp_max"].as_f64().expect("ratio");
    assert!(
        (got - want).abs() <= 1e-9 * want.max(1.0),
        "{got} vs {want}"
    );
    let want = max(2, "throughput_rps") / max(1, "throughput_rps");
    let got = v["fc_over_ds_throughput"].as_f64().expect("ratio");
    assert!(
        (got - want).abs() <= 1e-9 * want.max(1.0),
        "{got} vs {want}"
    );
    assert!(
        v["command"]
            .as_str()
            .is_some_and(|c| c.contains("--scheme xm,ds,fc"))
    );
}

#[test]
fn bad_scheme_lists_are_refused_before_any_run() {
    for list in [" , ", "xm,nope"] {
        let out = csd(&["bench", "fdtree", "--scheme", list, "--clock", "virtual"]);
        assert!(!out.status.success(), "{list:?} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("xm, ds, fc"), "{list:?}: {err}");
        assert!(out.stdout.is_empty(), "{list:?} ran something");
    }
}

#[test]
fn repro_runs_the_figures_asked_for_with_the_threads_given() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_dir = dir.path().join("fd");
    let out_s = out_dir.to_str().expect("utf-8 path");
    let small = [
        "repro",
        "fd-tree",
        "--schemes",
        "fc,xm",
        "--preload",
        "2000",
        "--requests",
        "2000",
        "--lookup-ratios",
        "0.8",
        "--sizes",
        "1000",
        "--warehouses",
        "--clock",
        "virtual",
        "--out",
        out_s,
    ];
    // Bad threads: refused by the argument parser, nothing written.
    let bad: Vec<&str> = small.iter().copied().chain(["--threads", "0/1"]).collect();
    let out = csd(&bad);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("at least one reader and one writer"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out_dir.exists(), "a refused run writes nothing");

    let good: Vec<&str> = small.iter().copied().chain(["--threads", "2/1"]).collect();
    let out = csd(&good);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out_dir.join("fig6/report.md").exists());
    assert!(out_dir.join("fig7/report.md").exists());
    assert!(
        !out_dir.join("fig8").exists(),
        "--warehouses without a value skips Figure 8"
    );
    assert!(out_dir.join("orderings.md").exists());
    assert!(stdout.contains("--threads 2/1"), "{stdout}");
    assert!(stdout.contains("Fig. 6, W_l = 0.8"), "{stdout}");
}
