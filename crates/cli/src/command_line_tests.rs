//! The command tree against its `reproduce:` lines: for every command, a command line is
//! parsed, its line generated ([`crate::reproduce`]), the line parsed again, and both
//! parses must hold the same value for every option at every level. A command without a
//! sample here fails the test, so a new command gets one.

use crate::Cli;
use crate::reproduce;
use clap::{ArgMatches, Command, CommandFactory, FromArgMatches};

/// One command line per command, with some options away from their defaults (quoting,
/// repeated and comma-separated options, flags, positionals).
const SAMPLES: &[&[&str]] = &[
    &["demo", "--seed", "3"],
    &["config", "show", "tiny", "--set", "channel.rate_mt_s=400"],
    &["config", "list"],
    &["config", "validate", "my dev.toml"],
    &[
        "device", "create", "--preset", "tiny", "--image", "d.img", "--op", "0.1",
    ],
    &["device", "smart", "--image", "d.img", "--json"],
    &["device", "check", "--image", "d.img", "--quick"],
    &["device", "info", "--image", "d.img"],
    &[
        "io",
        "--preset",
        "tiny",
        "--rw",
        "randrw",
        "--rwmixread",
        "70",
        "--bs",
        "16k",
        "--runtime",
        "2s",
        "--seed",
        "9",
        "--clock",
        "paced:2",
        "--json",
    ],
    &[
        "io",
        "--image",
        "d.img",
        "--write-cache",
        "write-back",
        "--ops",
        "100",
    ],
    &[
        "bench",
        "array",
        "--devices",
        "2",
        "--threads",
        "1,2",
        "--query",
        "q6",
        "--strategy",
        "hw-isp",
    ],
    &[
        "bench",
        "recovery",
        "--logical-gib",
        "1",
        "--seed",
        "4",
        "--json",
    ],
    &["bench", "query", "--sf", "0.01", "--query", "q1"],
    &[
        "bench",
        "tpch",
        "--sf",
        "0.01",
        "--queries",
        "1,6,17",
        "--compare",
        "datafusion",
    ],
    &[
        "bench",
        "tpch",
        "--strings",
        "--sf",
        "1",
        "--layout",
        "nsm",
        "--strategy",
        "hw-isp",
        "--repeat",
        "3",
        "--compare",
        "duckdb,datafusion",
        "--preset",
        "tiny",
        "--set",
        "channel.rate_mt_s=400",
    ],
    &["bench", "fdtree", "--scheme", "xm,fc", "--seed", "5"],
    &["bench", "open", "--clean-gib", "1", "--crash-gib", "1,2"],
    &[
        "bench",
        "oneshot",
        "--image",
        "sf1.img",
        "--queries",
        "q1,q6",
        "--strategy",
        "cpu-isp,hw-isp",
        "--repeat",
        "5",
        "--compare",
        "duckdb",
    ],
    &["bench", "serve", "--runtime", "1"],
    &[
        "bench",
        "flixr",
        "--sf",
        "0.01",
        "--configs",
        "no-index,flixr-s",
    ],
    &[
        "bench",
        "ycsb",
        "--workload",
        "write-heavy",
        "--records",
        "1000",
    ],
    &["torture", "--cuts", "10", "--seed", "7", "--faults"],
    &["model", "scan", "--json"],
    &[
        "serve",
        "--image",
        "d.img",
        "--socket",
        "/tmp/s.sock",
        "--read-only",
    ],
    &[
        "serve",
        "--memory",
        "--socket",
        "/tmp/s.sock",
        "--ready-memory",
        "1g",
    ],
    &[
        "load", "tpch", "--sf", "0.01", "--tables", "lineitem", "--image", "d.img",
    ],
    &[
        "load",
        "synthetic",
        "--columns",
        "4",
        "--image",
        "d.img",
        "--seed",
        "2",
    ],
    &[
        "load", "csv", "--table", "t", "--image", "d.img", "rows.csv",
    ],
    &[
        "load",
        "parquet",
        "--table",
        "t",
        "--array",
        "arr",
        "rows.parquet",
    ],
    &["tables", "--image", "d.img", "--json"],
    &[
        "index",
        "create",
        "--image",
        "d.img",
        "--table",
        "lineitem",
        "--column",
        "l_shipdate",
    ],
    &["index", "list", "--image", "d.img"],
    &["index", "drop", "--image", "d.img", "--name", "i"],
    &[
        "query",
        "--image",
        "d.img",
        "--strategy",
        "ihp,hw-isp",
        "select * from t where s = 'it''s'",
    ],
    &["array", "create", "--devices", "2", "--dir", "arr"],
    &["array", "info", "--dir", "arr", "--json"],
    &["worker", "--array", "arr", "--devices", "d0.img,d1.img"],
    &["sql", "--image", "d.img", "--json", "q6"],
    &["sql", "--array", "arr", "--threads", "2"],
    &["repro", "scan-paper", "--out", "r", "--scale", "0.01"],
    &["repro", "smart-ssd", "--out", "r"],
    &["repro", "fd-tree", "--out", "r", "--seed", "1"],
    &["repro", "batch-io", "--out", "r", "--caches", "20,80"],
    &["repro", "flixr", "--out", "r", "--json"],
    &["repro", "all", "--out", "r", "--papers", "flixr,fd-tree"],
    &["kv", "serve", "--image", "kv.img", "--allow-remote"],
];

/// The subcommand path of every leaf command of `cmd` (`["bench", "tpch"]` …).
fn leaves(cmd: &Command, path: Vec<String>, out: &mut Vec<Vec<String>>) {
    let subs: Vec<&Command> = cmd.get_subcommands().collect();
    if subs.is_empty() {
        out.push(path);
        return;
    }
    for s in subs {
        let mut p = path.clone();
        p.push(s.get_name().to_string());
        leaves(s, p, out);
    }
}

/// Every option's values (as typed) in `a` and `b` agree, at every level.
fn assert_same(cmd: &Command, a: &ArgMatches, b: &ArgMatches, line: &str) {
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        let values = |m: &ArgMatches| -> Option<Vec<String>> {
            m.try_get_raw(id)
                .ok()
                .flatten()
                .map(|v| v.map(|s| s.to_string_lossy().into_owned()).collect())
        };
        assert_eq!(values(a), values(b), "--{id} differs after `{line}`");
    }
    match (a.subcommand(), b.subcommand()) {
        (Some((na, sa)), Some((nb, sb))) => {
            assert_eq!(na, nb, "{line}");
            let sub = cmd.find_subcommand(na).expect("parsed subcommand");
            assert_same(sub, sa, sb, line);
        }
        (None, None) => {}
        _ => panic!("subcommands differ after `{line}`"),
    }
}

#[test]
fn every_commands_reproduce_line_parses_back_to_the_same_arguments() {
    for sample in SAMPLES {
        let argv: Vec<&str> = std::iter::once("csd")
            .chain(sample.iter().copied())
            .collect();
        let mut cmd = Cli::command();
        let first = cmd
            .try_get_matches_from_mut(&argv)
            .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        Cli::from_arg_matches(&first).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        let line = reproduce::render(&cmd, &first);
        let words = reproduce::words(&line).expect("balanced quotes");
        let again = cmd
            .try_get_matches_from_mut(&words)
            .unwrap_or_else(|e| panic!("`{line}` does not parse: {e}"));
        assert_same(&cmd, &first, &again, &line);
        assert_eq!(reproduce::render(&cmd, &again), line);
    }
}

#[test]
fn every_command_has_a_sample() {
    let mut all = Vec::new();
    leaves(&Cli::command(), Vec::new(), &mut all);
    for path in all {
        let covered = SAMPLES
            .iter()
            .any(|s| s.len() >= path.len() && s[..path.len()] == path[..]);
        assert!(
            covered,
            "no sample command line for `csd {}`",
            path.join(" ")
        );
    }
}

#[test]
fn the_shared_groups_keep_their_names_and_defaults() {
    let mut cmd = Cli::command();
    let m = cmd
        .try_get_matches_from_mut(["csd", "torture"])
        .expect("parses");
    let line = reproduce::render(&cmd, &m);
    assert!(line.contains("--seed 1"), "{line}");
    assert!(!line.contains("--json"), "{line}");
    let m = cmd
        .try_get_matches_from_mut(["csd", "bench", "flixr"])
        .expect("parses");
    assert!(reproduce::render(&cmd, &m).contains("--seed 42"));
    let e = cmd
        .try_get_matches_from_mut(["csd", "index", "list"])
        .expect_err("--image is required");
    assert!(e.to_string().contains("--image"), "{e}");
}

#[test]
fn bench_tpch_lines_spell_out_every_default_and_flag() {
    let mut cmd = Cli::command();
    let mut line = |argv: &[&str]| {
        let m = cmd.try_get_matches_from_mut(argv).expect("parses");
        reproduce::render(&cmd, &m)
    };
    assert_eq!(
        line(&["csd", "bench", "tpch"]),
        "csd bench tpch --sf 0.1 --layout pax --strategy auto --repeat 1 --rounds 1 --time-model events"
    );
    assert_eq!(
        line(&[
            "csd",
            "bench",
            "tpch",
            "--strings",
            "--compare",
            "duckdb",
            "--repeat",
            "3",
            "--strategy",
            "hw-isp",
            "--sf",
            "1",
        ]),
        "csd bench tpch --sf 1 --layout pax --strategy hw-isp --repeat 3 --rounds 1 --compare duckdb --strings --time-model events"
    );
}
