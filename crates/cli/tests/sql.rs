//! `csd sql` (one query and the shell fed from a pipe), `csd load csv|parquet` (round
//! trips against DataFusion over the same rows in memory; bad input leaves the image
//! byte-identical) and arrays (`csd array create`, `csd load --array`, `csd query
//! --array` equal to one image).

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use common::{csd, ok};
use csd_sql::datafusion::arrow::array::{
    ArrayRef, Date32Array, Decimal128Array, Int32Array, RecordBatch, StringArray, Time32SecondArray,
};
use csd_sql::datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use csd_sql::datafusion::datasource::MemTable;
use csd_sql::datafusion::prelude::{SessionConfig, SessionContext};

fn load_synthetic(target: &[&str]) {
    let mut args = vec![
        "load",
        "synthetic",
        "--columns",
        "4",
        "--rows",
        "3000",
        "--name",
        "s4",
        "--json",
    ];
    args.extend_from_slice(target);
    ok(&csd(&args));
}

/// Runs `csd` with `stdin` piped in.
fn csd_stdin(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_csd"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn csd");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("wait")
}

#[test]
fn shell_reads_statements_from_a_pipe_and_goes_on_after_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("s.img");
    let img = img.to_str().expect("utf-8");
    load_synthetic(&["--preset", "tiny", "--layout", "nsm", "--image", img]);
    let script = "\\d\n\\d s4\nSELECT COUNT(*) AS n\n  FROM s4\n  WHERE c1 < 300;\n\
                  SELECT nope FROM s4;\n\\f csv\nSELECT 41 + 1 AS answer; -- done\n\\q\nSELECT 7;\n";
    let out = csd_stdin(&["sql", "--image", img, "--strategy", "hw-isp"], script);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // One statement failed: the exit status says so, the others ran.
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("nope"), "{stderr}");
    assert!(stderr.contains("1 statement(s) failed"), "{stderr}");
    // \d and \d NAME.
    assert!(stdout.contains("(1 tables)"), "{stdout}");
    assert!(stdout.contains("table s4 (nsm): 3000 rows"), "{stdout}");
    assert!(stdout.contains("INT32"), "{stdout}");
    assert!(stdout.contains("distinct (est.)"), "{stdout}");
    // The key column's measured bounds: synthetic4's keys are 0 ..= 2999.
    assert!(stdout.contains("greatest"), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("c1") && l.contains("┆ 0 ") && l.contains("┆ 2999 ")),
        "{stdout}"
    );
    // The multi-line statement ran with its report; then CSV after \f csv.
    assert!(stdout.contains("│ 300 │"), "{stdout}");
    assert!(stdout.contains("modeled device time"), "{stdout}");
    assert!(stdout.contains("answer\n42\n"), "{stdout}");
    // \q stopped before `SELECT 7`.
    assert!(!stdout.contains("\n7\n"), "{stdout}");
}

#[test]
fn one_query_as_csv_and_json_and_into_a_parquet_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("s.img");
    let img = img.to_str().expect("utf-8");
    load_synthetic(&["--preset", "tiny", "--image", img]);
    let q = "SELECT c1, c2 FROM s4 WHERE c1 < 3 ORDER BY c1";
    let pq = dir.path().join("out.parquet");
    let csv = ok(&csd(&[
        "sql",
        "--image",
        img,
        "--strategy",
        "auto",
        "--format",
        "csv",
        "--output",
        pq.to_str().expect("utf-8"),
        q,
    ]));
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "c1,c2");
    assert_eq!(lines.len(), 4, "{csv}");
    // The Parquet file holds the same rows.
    let (_, batches) = csd_sql::import::read_parquet(&pq).expect("parquet");
    assert_eq!(batches.iter().map(RecordBatch::num_rows).sum::<usize>(), 3);
    let json = ok(&csd(&["sql", "--image", img, "--format", "json", q]));
    let v: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(v.as_array().expect("array").len(), 3);
    assert_eq!(v[0]["c1"], 0);
    // An output path that is not .csv/.parquet, or an image, is refused.
    let bad = csd(&["sql", "--image", img, "--output", img, q]);
    assert!(!bad.status.success());
}

/// Generated rows: ints, decimals (2 digits), dates, strings (one with a comma).
fn generated(rows: usize) -> RecordBatch {
    let names = ["alpha", "beta", "gamma, inc", "delta"];
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int32, false),
        Field::new("price", DataType::Decimal128(12, 2), false),
        Field::new("day", DataType::Date32, false),
        Field::new("name", DataType::Utf8, false),
    ]));
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from_iter_values(0..rows as i32)),
        Arc::new(
            Decimal128Array::from_iter_values(
                (0..rows as i128).map(|i| (i * 7919) % 100_000 - 500),
            )
            .with_precision_and_scale(12, 2)
            .expect("decimal"),
        ),
        Arc::new(Date32Array::from_iter_values(
            (0..rows as i32).map(|i| 9000 + i % 700),
        )),
        Arc::new(StringArray::from_iter_values(
            (0..rows).map(|i| names[i % names.len()]),
        )),
    ];
    RecordBatch::try_new(schema, cols).expect("batch")
}

fn write_csv(path: &Path, b: &RecordBatch) {
    let f = std::fs::File::create(path).expect("create");
    let mut w = csd_sql::datafusion::arrow::csv::WriterBuilder::new()
        .with_header(true)
        .build(f);
    w.write(b).expect("write csv");
}

fn write_parquet(path: &Path, b: &RecordBatch) {
    let f = std::fs::File::create(path).expect("create");
    let mut w = csd_sql::parquet::arrow::ArrowWriter::try_new(f, b.schema(), None).expect("writer");
    w.write(b).expect("write");
    w.close().expect("close");
}

/// DataFusion over `b` in memory: the result as CSV.
fn reference(b: &RecordBatch, sql: &str) -> String {
    let mut cfg = SessionConfig::new().with_target_partitions(1);
    cfg.options_mut().sql_parser.parse_float_as_decimal = true;
    let ctx = SessionContext::new_with_config(cfg);
    let t = MemTable::try_new(b.schema(), vec![vec![b.clone()]]).expect("memtable");
    ctx.register_table("t", Arc::new(t)).expect("register");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let batches = rt
        .block_on(async { ctx.sql(sql).await?.collect().await })
        .expect("reference query");
    let mut out = Vec::new();
    {
        let mut w = csd_sql::datafusion::arrow::csv::WriterBuilder::new()
            .with_header(true)
            .build(&mut out);
        for b in &batches {
            w.write(b).expect("csv");
        }
    }
    String::from_utf8(out).expect("utf-8")
}

#[test]
fn csv_and_parquet_round_trip_and_answer_like_datafusion() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("f.img");
    let img = img.to_str().expect("utf-8");
    let b = generated(5000);
    let csv = dir.path().join("data.csv");
    let pq = dir.path().join("data.parquet");
    write_csv(&csv, &b);
    write_parquet(&pq, &b);
    ok(&csd(&[
        "load",
        "csv",
        csv.to_str().expect("utf-8"),
        "--table",
        "c",
        "--header",
        // Fixed point, as the reference's decimals (without it: FLOAT64, as in Arrow).
        "--float-scale",
        "2",
        "--layout",
        "nsm",
        "--preset",
        "tiny",
        "--image",
        img,
        "--json",
    ]));
    ok(&csd(&[
        "load",
        "parquet",
        pq.to_str().expect("utf-8"),
        "--table",
        "p",
        "--layout",
        "pax",
        "--image",
        img,
        "--json",
    ]));
    let q = "SELECT name, COUNT(*) AS n, SUM(price) AS s, MIN(day) AS d, MAX(id) AS m \
             FROM {} WHERE price > 10.5 GROUP BY name ORDER BY name";
    let want = reference(&b, &q.replace("{}", "t"));
    for (table, strategy) in [
        ("c", "ihp"),
        ("c", "hw-isp"),
        ("p", "cpu-isp"),
        ("p", "auto"),
    ] {
        let got = ok(&csd(&[
            "sql",
            "--image",
            img,
            "--strategy",
            strategy,
            "--format",
            "csv",
            &q.replace("{}", table),
        ]));
        assert_eq!(got, want, "table {table} with {strategy}");
    }
    // Whole rows survive (strings with a comma, decimals, dates).
    let q = "SELECT * FROM {} ORDER BY id";
    let want = reference(&b, &q.replace("{}", "t"));
    for table in ["c", "p"] {
        let got = ok(&csd(&[
            "sql",
            "--image",
            img,
            "--strategy",
            "ihp",
            "--format",
            "csv",
            &q.replace("{}", table),
        ]));
        assert_eq!(got, want, "table {table}");
    }
}

#[test]
fn bad_types_bad_values_and_missing_files_leave_the_image_unchanged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("u.img");
    let img_s = img.to_str().expect("utf-8");
    load_synthetic(&["--preset", "tiny", "--image", img_s]);
    let before = std::fs::read(&img).expect("image");
    // A time-of-day column (no device type).
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int32, false),
        Field::new("flag", DataType::Time32(TimeUnit::Second), false),
    ]));
    let b = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int32Array::from(vec![1, 2])) as ArrayRef,
            Arc::new(Time32SecondArray::from(vec![1, 2])),
        ],
    )
    .expect("batch");
    let pq = dir.path().join("bool.parquet");
    write_parquet(&pq, &b);
    let out = csd(&[
        "load",
        "parquet",
        pq.to_str().expect("utf-8"),
        "--table",
        "b",
        "--image",
        img_s,
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`flag`") && err.contains("Time32"), "{err}");
    // A field that does not read as its column's type (a ragged row) in a CSV.
    let csv = dir.path().join("null.csv");
    std::fs::write(&csv, "a,b\n1,2\n3\n").expect("write");
    let out = csd(&[
        "load",
        "csv",
        csv.to_str().expect("utf-8"),
        "--header",
        "--table",
        "n",
        "--image",
        img_s,
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("null.csv"), "{err}");
    // A missing file.
    let out = csd(&[
        "load",
        "csv",
        dir.path().join("none.csv").to_str().expect("utf-8"),
        "--table",
        "m",
        "--image",
        img_s,
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("none.csv"));
    // A bad table name.
    let out = csd(&[
        "load",
        "csv",
        csv.to_str().expect("utf-8"),
        "--table",
        "no-dash",
        "--image",
        img_s,
    ]);
    assert!(!out.status.success());
    assert_eq!(std::fs::read(&img).expect("image"), before, "image changed");
}

#[test]
fn an_array_answers_like_one_image() {
    let dir = tempfile::tempdir().expect("tempdir");
    let arr = dir.path().join("arr");
    let arr = arr.to_str().expect("utf-8");
    let img = dir.path().join("one.img");
    let img = img.to_str().expect("utf-8");
    ok(&csd(&[
        "array",
        "create",
        "--devices",
        "3",
        "--preset",
        "tiny",
        "--dir",
        arr,
    ]));
    // A second create over it is refused.
    assert!(
        !csd(&[
            "array",
            "create",
            "--devices",
            "2",
            "--preset",
            "tiny",
            "--dir",
            arr
        ])
        .status
        .success()
    );
    load_synthetic(&["--layout", "pax", "--array", arr]);
    load_synthetic(&["--layout", "pax", "--preset", "tiny", "--image", img]);
    let info = ok(&csd(&["array", "info", "--dir", arr]));
    assert!(info.contains("s4") && info.contains("3000"), "{info}");
    let q = "SELECT COUNT(*), SUM(c2), MAX(c3) FROM s4 WHERE c1 < 1000";
    let rows = |args: &[&str]| -> serde_json::Value {
        let out = ok(&csd(args));
        let v: serde_json::Value = serde_json::from_str(&out).expect("json");
        v["rows"].clone()
    };
    let one = rows(&["query", "--image", img, "--json", q]);
    let all = {
        let out = ok(&csd(&[
            "query",
            "--array",
            arr,
            "--threads",
            "2",
            "--json",
            q,
        ]));
        serde_json::from_str::<serde_json::Value>(&out).expect("json")
    };
    assert_eq!(all["rows"], one);
    let devices = all["runs"][0]["array"]["devices"]
        .as_array()
        .expect("devices");
    assert_eq!(devices.len(), 3);
    // The shell over the array lists the whole table.
    let out = csd_stdin(&["sql", "--array", arr, "--strategy", "hw-isp"], "\\d\n");
    let s = ok(&out);
    assert!(s.contains("3000"), "{s}");
    // The table report per device and the array total.
    let text = ok(&csd(&["query", "--array", arr, "--strategy", "hw-isp", q]));
    assert!(
        text.contains("dev2") && text.contains("array modeled time"),
        "{text}"
    );
}

#[test]
fn insert_update_delete_from_the_shell_and_bad_statements_leave_the_image_unchanged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("d.img");
    let img_s = img.to_str().expect("utf-8");
    ok(&csd(&[
        "device",
        "create",
        "--preset",
        "tiny",
        "--ext-bytes",
        "24",
        "--image",
        img_s,
    ]));
    load_synthetic(&["--layout", "pax", "--image", img_s]);
    ok(&csd(&[
        "sql",
        "--image",
        img_s,
        "CREATE INDEX s4_c1 ON s4 (c1)",
    ]));
    // Bad input and a statement that changes nothing: the image keeps every byte.
    let before = std::fs::read(&img).expect("image");
    for (sql, needle) in [
        ("INSERT INTO nope VALUES (1)", "nope"),
        ("UPDATE s4 SET zz = 1", "zz"),
        ("INSERT INTO s4 VALUES (1, 2, 3)", "expected 4"),
        ("INSERT INTO s4 VALUES (NULL, 2, 3, 4)", "column c1"),
        ("UPDATE s4 SET c2 = 99999999999", "column c2"),
    ] {
        let out = csd(&["sql", "--image", img_s, sql]);
        assert!(!out.status.success(), "{sql} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{sql}: {err}");
    }
    let out = ok(&csd(&[
        "query",
        "--image",
        img_s,
        "DELETE FROM s4 WHERE c1 < -5",
    ]));
    assert!(out.contains("0 rows deleted"), "{out}");
    assert_eq!(
        std::fs::read(&img).expect("image"),
        before,
        "the image changed"
    );
    // A session of changes from a pipe; the counts and the modeled report come back.
    let script = "INSERT INTO s4 VALUES (-1, 1, 2, 3), (-2, 1, 2, 3);\n\
                  UPDATE s4 SET c2 = c2 + 1 WHERE c1 < 0;\n\
                  DELETE FROM s4 WHERE c1 = -2;\n\
                  \\f csv\nSELECT count(*) AS n, sum(c2) AS s FROM s4 WHERE c1 < 0;\n";
    let out = csd_stdin(&["sql", "--image", img_s, "--strategy", "cpu-isp"], script);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "2 rows inserted in s4",
        "2 rows updated in s4",
        "1 row deleted in s4",
    ] {
        assert!(stdout.contains(want), "{want}: {stdout}");
    }
    assert!(
        stdout.contains("(WRITE_IDX)") && stdout.contains("redo log pages"),
        "{stdout}"
    );
    assert!(stdout.contains("n,s\n1,2\n"), "{stdout}");
    // The change is durable and the catalog counts it; JSON carries the report.
    let out = ok(&csd(&["tables", "--image", img_s, "--json"]));
    assert!(out.contains("3001"), "{out}");
    let out = ok(&csd(&[
        "sql",
        "--image",
        img_s,
        "--json",
        "DELETE FROM s4 WHERE c1 >= 0",
    ]));
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("json");
    assert_eq!(v["dml"]["rows"], 3000);
    assert_eq!(v["dml"]["table_rows"], 1);
    assert!(v["dml"]["modeled_time_s"].as_f64().expect("time") > 0.0);
}

/// `csd bench tpch --sf 0.01 --queries QUERIES ARGS… --compare datafusion`.
fn bench_tpch_against_memory(queries: &str, args: &[&str]) -> Output {
    let mut all = vec!["bench", "tpch", "--sf", "0.01", "--queries", queries];
    all.extend_from_slice(args);
    all.extend(["--compare", "datafusion"]);
    csd(&all)
}

#[test]
fn bench_tpch_checks_every_query_against_datafusion_in_memory() {
    let out = bench_tpch_against_memory("1,6,17", &[]);
    let text = ok(&out);
    assert!(text.contains("datafusion mem s"), "{text}");
    for q in ["Q1", "Q6", "Q17"] {
        let line = text
            .lines()
            .find(|l| l.contains(&format!(" {q} ")))
            .unwrap_or_else(|| panic!("{q} missing:\n{text}"));
        assert!(line.contains("yes"), "{q} not checked or wrong: {line}");
    }
    assert!(
        text.contains("reproduce: csd bench tpch --sf 0.01 --layout pax --strategy auto --queries 1,6,17 --repeat 1 --rounds 1 --compare datafusion"),
        "{text}"
    );
    let bad = csd(&["bench", "tpch", "--sf", "0.01", "--queries", "23"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("use 1 to 22"));
}

#[test]
fn bench_tpch_in_rounds_gives_ratios_within_rounds_with_their_range() {
    let out = bench_tpch_against_memory("6,14", &["--rounds", "3"]);
    let text = ok(&out);
    assert!(
        text.contains("3 rounds: each query ran on csd and its peers back to back"),
        "{text}"
    );
    for q in [" Q6 ", " Q14 ", " total "] {
        let line = text
            .lines()
            .find(|l| l.contains(q))
            .unwrap_or_else(|| panic!("{q} missing:\n{text}"));
        // `1.23x (1.10-1.40)`: the median ratio and the range of the rounds' ratios.
        let cell = line
            .split(['│', '┆'])
            .map(str::trim)
            .find(|c| c.ends_with(')') && c.contains("x ("))
            .unwrap_or_else(|| panic!("no ratio with a range in {line}"));
        let nums: Vec<f64> = cell
            .split(['x', '(', '-', ')'])
            .filter_map(|p| p.trim().parse().ok())
            .collect();
        assert_eq!(nums.len(), 3, "{cell}");
        assert!(
            nums[1] <= nums[0] && nums[0] <= nums[2],
            "median within its range: {cell}"
        );
        if q != " total " {
            assert!(line.contains("yes"), "{q} not checked or wrong: {line}");
        }
    }
    let strings = csd(&[
        "bench",
        "tpch",
        "--sf",
        "0.01",
        "--strings",
        "--rounds",
        "2",
    ]);
    assert!(
        !strings.status.success(),
        "--rounds with --strings accepted"
    );
    assert!(String::from_utf8_lossy(&strings.stderr).contains("--rounds measures the 22 queries"));
    for bad_rounds in ["0", "101"] {
        let bad = csd(&["bench", "tpch", "--sf", "0.01", "--rounds", bad_rounds]);
        assert!(!bad.status.success(), "--rounds {bad_rounds} accepted");
        assert!(String::from_utf8_lossy(&bad.stderr).contains("--rounds"));
    }
}

/// A `tiny` image in `dir` holding TPC-H lineitem at SF 0.01; returns its path.
fn lineitem_image(dir: &Path) -> String {
    let img = dir.join("dev.img");
    let img = img.to_str().expect("path").to_string();
    ok(&csd(&[
        "device", "create", "--preset", "tiny", "--image", &img,
    ]));
    ok(&csd(&[
        "load", "tpch", "--sf", "0.01", "--tables", "lineitem", "--image", &img,
    ]));
    img
}

#[test]
fn explain_analyze_runs_under_every_strategy_and_shows_the_device_scan() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = lineitem_image(dir.path());
    let img = img.as_str();
    // The plans differ between strategies (each shows its own metrics): that is no
    // disagreement between their results.
    let text = ok(&csd(&[
        "sql",
        "--image",
        img,
        "--strategy",
        "all",
        "EXPLAIN ANALYZE SELECT sum(l_quantity) FROM lineitem WHERE l_discount < 0.03",
    ]));
    for s in ["ihp", "cpu-isp", "hw-isp"] {
        assert!(
            text.contains(&format!("strategy {s}")),
            "{s} missing:\n{text}"
        );
    }
    assert!(
        text.contains("DeviceScanExec") && text.contains("pages_read"),
        "{text}"
    );
}

/// What the device does, and so every modeled figure, does not depend on how many
/// partitions DataFusion plans with (the host's core count): with one target partition
/// DataFusion plans a `Single` aggregate behind a `CooperativeExec`, which once kept the
/// aggregation out of the device (Q1 modeled 0.166 s on one partition, 0.070 s on two),
/// and a subquery's repeated scan unshared (Q15 twice the device time).
#[test]
fn modeled_figures_do_not_depend_on_the_host_partition_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = lineitem_image(dir.path());
    let img = img.as_str();
    let grouped = "SELECT l_returnflag, l_linestatus, sum(l_quantity), \
                   sum(l_extendedprice * (1 - l_discount)), count(*) FROM lineitem \
                   WHERE l_shipdate <= date '1998-09-02' \
                   GROUP BY l_returnflag, l_linestatus ORDER BY l_returnflag, l_linestatus";
    let twice = "WITH r AS (SELECT l_suppkey AS s, sum(l_quantity) AS q FROM lineitem \
                 WHERE l_shipdate >= date '1996-01-01' GROUP BY l_suppkey) \
                 SELECT s, q FROM r WHERE q = (SELECT max(q) FROM r) ORDER BY s";
    let run = |sql: &str, partitions: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_csd"))
            .args([
                "sql",
                "--image",
                img,
                "--strategy",
                "hw-isp",
                "--explain",
                sql,
            ])
            .env("DATAFUSION_EXECUTION_TARGET_PARTITIONS", partitions)
            .output()
            .expect("run csd");
        let text = ok(&out) + &String::from_utf8_lossy(&out.stderr);
        let modeled = text
            .lines()
            .find_map(|l| l.split("modeled device time, all scans: ").nth(1))
            .unwrap_or_else(|| panic!("no modeled time:\n{text}"))
            .to_string();
        (text, modeled)
    };
    for (sql, scans) in [(grouped, 1), (twice, 1)] {
        let (one, m1) = run(sql, "1");
        let (two, m2) = run(sql, "2");
        assert_eq!(m1, m2, "one partition:\n{one}\ntwo partitions:\n{two}");
        for text in [&one, &two] {
            assert!(text.contains("in device: partial aggregate"), "{text}");
            let devices = text
                .lines()
                .filter(|l| l.contains("DeviceScanExec: table=lineitem"))
                .count();
            // Q15's shape: the view's scan is shown under each reader, and run once.
            assert!(devices >= scans, "{text}");
            assert!(text.contains(&format!("{scans} device scan(s)")), "{text}");
        }
    }
}

#[test]
fn bench_oneshot_measures_fresh_query_processes_and_refuses_what_it_cannot_compare() {
    let out = csd(&[
        "bench",
        "oneshot",
        "--sf",
        "0.01",
        "--queries",
        "q6",
        "--strategy",
        "ihp,hw-isp",
        "--repeat",
        "1",
        "--cold",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(ok(&out).trim()).expect("json");
    assert_eq!(v["cold"], true, "{v}");
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{v}");
    for (r, s) in rows.iter().zip(["ihp", "hw-isp"]) {
        assert_eq!(r["query"], "q6");
        assert_eq!(r["strategy"], s);
        let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k} in {r}"));
        // A fresh process takes longer than its own scan, and holds some memory.
        assert!(f("oneshot_wall_s") > f("oneshot_scan_wall_s"), "{r}");
        assert!(
            f("oneshot_scan_wall_s") > 0.0 && f("warm_scan_wall_s") > 0.0,
            "{r}"
        );
        assert!(f("oneshot_peak_rss_mib") > 1.0, "{r}");
        assert!(f("modeled_s") > 0.0, "{r}");
        assert!(r.get("duckdb_wall_s").is_none(), "no peer asked for: {r}");
    }
    // The two strategies model different devices paths: their modeled times differ.
    assert_ne!(rows[0]["modeled_s"], rows[1]["modeled_s"]);
    assert_eq!(v["image_generated"], true);

    let bad = csd(&["bench", "oneshot", "--compare", "datafusion"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("duckdb only"));
    for rounds in ["0", "101"] {
        let bad = csd(&["bench", "oneshot", "--repeat", rounds]);
        assert!(!bad.status.success(), "--repeat {rounds} accepted");
        let err = String::from_utf8_lossy(&bad.stderr);
        assert!(err.contains("1 to 100 rounds"), "{err}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("empty.img");
    let img = img.to_str().expect("path");
    ok(&csd(&[
        "device", "create", "--preset", "tiny", "--image", img,
    ]));
    let none = csd(&["bench", "oneshot", "--image", img, "--queries", "q6"]);
    assert!(
        !none.status.success(),
        "an image without lineitem must fail"
    );
    assert!(
        String::from_utf8_lossy(&none.stderr).contains("lineitem"),
        "{}",
        String::from_utf8_lossy(&none.stderr)
    );
}
