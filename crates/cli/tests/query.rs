//! `csd load` + `csd query` end to end on an image file: JSON keys, identical results
//! across strategies, clear errors for bad SQL that leave the image as it was.

mod common;

use common::csd;

#[test]
fn load_then_query_three_ways_as_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("q.img");
    let img = img.to_str().expect("utf-8 path");
    let out = csd(&[
        "load",
        "synthetic",
        "--columns",
        "16",
        "--rows",
        "5000",
        "--name",
        "s16",
        "--layout",
        "pax",
        "--preset",
        "tiny",
        "--image",
        img,
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = csd(&[
        "query",
        "--image",
        img,
        "--json",
        "SELECT COUNT(*), SUM(c2) FROM s16 WHERE c1 < 500",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["rows"][0][0], "500");
    let runs = v["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 3);
    // Each run reports its scans (one here: a single-table query).
    for r in runs.iter().map(|r| &r["scans"][0]) {
        for key in [
            "modeled_time_s",
            "wall_s",
            "host_link_bytes",
            "energy_j",
            "bottleneck",
            "flash_reads",
            "channel_bytes",
            "dram_bytes",
            "device_energy_j",
            "host_energy_j",
            "wall_rows_per_s",
        ] {
            assert!(!r[key].is_null(), "missing {key} in {r}");
        }
        assert!(r["stages"]["flash_array"]["busy_s"].as_f64().expect("busy") > 0.0);
    }
    let link = |i: usize| {
        runs[i]["scans"][0]["host_link_bytes"]
            .as_u64()
            .expect("bytes")
    };
    assert!(link(2) < link(0), "hw-isp moves fewer bytes than ihp");

    // Bad SQL: a clear error naming the problem, and the image still answers.
    for (sql, needle) in [
        ("SELECT nope FROM s16", "nope"),
        ("SELECT c1 FROM s16 WHERE", "sql"),
        ("DELETE FROM nope", "nope"),
    ] {
        let out = csd(&["query", "--image", img, sql]);
        assert!(!out.status.success(), "{sql} should fail");
        let err = String::from_utf8_lossy(&out.stderr).to_lowercase();
        assert!(err.contains(needle), "{sql}: {err}");
    }
    let out = csd(&[
        "query",
        "--image",
        img,
        "--strategy",
        "warp",
        "SELECT c1 FROM s16",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("ihp, cpu-isp, hw-isp"));
    let out = csd(&[
        "query",
        "--image",
        img,
        "--strategy",
        "hw-isp",
        "--json",
        "SELECT COUNT(*) FROM s16",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["rows"][0][0], "5000");
}

/// Issue 15's reproducer: loading `Syn` (1,000 rows) and then `syn` (2,000 rows) leaves
/// one table, the second; the load says it replaced the first; `COUNT(*)` finds 2,000.
#[test]
fn a_table_name_differing_only_in_case_replaces_the_table() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("c.img");
    let img = img.to_str().expect("utf-8 path");
    let load = |name: &str, rows: &str| {
        let out = csd(&[
            "load",
            "synthetic",
            "--columns",
            "4",
            "--rows",
            rows,
            "--name",
            name,
            "--preset",
            "tiny",
            "--image",
            img,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(!load("Syn", "1000").contains("replaced"));
    let note = load("syn", "2000");
    assert!(note.contains("replaced table `Syn` (1000 rows)"), "{note}");
    for q in ["SELECT COUNT(*) FROM syn", "SELECT COUNT(*) FROM SYN"] {
        let out = csd(&["query", "--image", img, "--json", q]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(v["rows"][0][0], "2000", "{q}");
    }
    let out = csd(&["tables", "--image", img, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["tables"].as_array().map(Vec::len), Some(1), "{v}");
}
