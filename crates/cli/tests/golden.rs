//! Golden modeled figures on the test build: `csd bench query` (Q6 and Q1 at SF 0.2, three
//! strategies, NSM and PAX), `csd demo`, `csd repro scan-paper` and `csd repro smart-ssd`
//! must print exactly the modeled figures in `bench/golden/` (recorded on main before SQL
//! moved to DataFusion, re-recorded for the model changes of issue 17; see
//! `scripts/golden.py`, which runs the same comparison on any binary, e.g. a release
//! build, and re-records with `--write` when a model change is intended).
//!
//! Only wall-clock figures are masked: JSON keys starting with `wall` (and the
//! `command` line), text lines that say "wall" have their numbers masked, and table
//! columns headed "wall" or "emulator" are masked. Everything else — modeled time per
//! stage, bytes per link, pages read, energy, result rows — must be equal.

mod common;

use common::csd;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn golden(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../bench/golden")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn run(args: &[&str], cwd: Option<&Path>) -> String {
    let out = match cwd {
        Some(d) => std::process::Command::new(env!("CARGO_BIN_EXE_csd"))
            .args(args)
            .current_dir(d)
            .output()
            .expect("run csd"),
        None => csd(args),
    };
    assert!(
        out.status.success(),
        "csd {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

fn strip_wall(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with("wall") && k.as_str() != "command")
                .map(|(k, x)| (k.clone(), strip_wall(x)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_wall).collect()),
        o => o.clone(),
    }
}

/// Replaces every number of a line with `#`.
fn mask_numbers(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_num = false;
    for ch in line.chars() {
        let numeric = ch.is_ascii_digit() || (in_num && matches!(ch, '.' | 'e' | '+' | '-'));
        if numeric {
            if !in_num {
                out.push('#');
            }
            in_num = true;
        } else {
            in_num = false;
            out.push(ch);
        }
    }
    out
}

/// `prefix` followed by `PATH` in place of the word after it (every occurrence).
fn mask_token(line: &str, prefix: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(i) = rest.find(prefix) {
        let after = &rest[i + prefix.len()..];
        let end = after.find(char::is_whitespace).unwrap_or(after.len());
        if end == 0 {
            out.push_str(&rest[..i + prefix.len()]);
        } else {
            out.push_str(&rest[..i]);
            out.push_str(prefix);
            out.push_str("PATH");
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The text with wall-clock figures masked (as `scripts/golden.py` does).
fn mask(text: &str, tmp: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut wall_cols: Option<Vec<usize>> = None;
    for line in text.lines() {
        let mut line = line.replace(tmp, "TMP");
        if line.contains('┆') {
            let mut cells: Vec<String> = line.split('┆').map(str::to_string).collect();
            if cells
                .iter()
                .any(|c| c.contains("wall") || c.contains("emulator"))
            {
                wall_cols = Some(
                    cells
                        .iter()
                        .enumerate()
                        .filter(|(_, c)| c.contains("wall") || c.contains("emulator"))
                        .map(|(i, _)| i)
                        .collect(),
                );
            } else if let Some(cols) = &wall_cols {
                for &i in cols {
                    if let Some(c) = cells.get_mut(i) {
                        *c = " * ".into();
                    }
                }
                line = cells.join("┆");
            }
        } else if !line.starts_with('│') && !line.starts_with('╞') && !line.starts_with('├') {
            wall_cols = None;
        }
        if line.to_lowercase().contains("wall") && !line.contains('┆') {
            line = mask_numbers(&line);
        }
        // The report's own path differs between runs.
        line = mask_token(&line, "report: ");
        line = mask_token(&line, "--out ");
        lines.push(line);
    }
    lines
}

fn compare_text(name: &str, got: &str, tmp: &str) {
    let want = golden(name);
    let (g, w) = (mask(got, tmp), mask(&want, "TMP"));
    let diffs: Vec<String> = g
        .iter()
        .zip(&w)
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(i, (a, b))| format!("line {}:\n  got  {a}\n  want {b}", i + 1))
        .collect();
    assert!(
        diffs.is_empty() && g.len() == w.len(),
        "{name}: modeled figures differ from bench/golden ({} lines, golden {}):\n{}",
        g.len(),
        w.len(),
        diffs.join("\n")
    );
}

/// `csd bench query` at SF 0.2 gives the golden modeled figures of `q`.
fn bench_query_keeps_its_modeled_figures(q: &str) {
    let got: Value = serde_json::from_str(&run(
        &["bench", "query", "--sf", "0.2", "--query", q, "--json"],
        None,
    ))
    .expect("json");
    let want: Value =
        serde_json::from_str(&golden(&format!("bench-{q}.json"))).expect("golden json");
    let (g, w) = (strip_wall(&got), strip_wall(&want));
    if g != w {
        let (ga, wa) = (&g["runs"], &w["runs"]);
        let mut diffs = Vec::new();
        for i in 0..ga.as_array().map_or(0, Vec::len) {
            if let (Some(a), Some(b)) = (ga[i].as_object(), wa[i].as_object()) {
                for (k, v) in a {
                    if b.get(k) != Some(v) {
                        diffs.push(format!("run {i} {k}: got {v}, want {:?}", b.get(k)));
                    }
                }
            }
        }
        panic!("bench {q}: modeled figures differ:\n{}", diffs.join("\n"));
    }
}

#[test]
fn bench_query_q6_keeps_its_modeled_figures() {
    bench_query_keeps_its_modeled_figures("q6");
}

#[test]
fn bench_query_q1_keeps_its_modeled_figures() {
    bench_query_keeps_its_modeled_figures("q1");
}

#[test]
fn demo_keeps_its_modeled_figures() {
    compare_text("demo.stdout", &run(&["demo"], None), "TMP");
}

/// `csd repro <paper>` writes the golden report and standard output.
fn paper_reproduction_keeps_its_modeled_figures(paper: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let tmp = dir.path().to_str().expect("utf-8 path").to_string();
    let out: PathBuf = dir.path().join(paper);
    let stdout = run(
        &["repro", paper, "--out", out.to_str().expect("utf-8 path")],
        Some(dir.path()),
    );
    let md = std::fs::read_to_string(out.join("report.md")).expect("report");
    compare_text(&format!("{paper}.md"), &md, &tmp);
    compare_text(&format!("{paper}.stdout"), &stdout, &tmp);
}

#[test]
fn scan_paper_reproduction_keeps_its_modeled_figures() {
    paper_reproduction_keeps_its_modeled_figures("scan-paper");
}

#[test]
fn smart_ssd_reproduction_keeps_its_modeled_figures() {
    paper_reproduction_keeps_its_modeled_figures("smart-ssd");
}
