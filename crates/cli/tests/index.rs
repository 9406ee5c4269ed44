//! `csd index create|list|drop` and `CREATE INDEX` / `DROP INDEX` in `csd sql` on an
//! image file: the index survives reopening (every command is a new process), queries
//! report the pages it skipped, bad input fails clearly and leaves the table usable.

mod common;

use std::process::Output;

use common::{csd, ok};

fn fails(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "should fail");
    assert!(err.contains(needle), "stderr: {err}");
}

#[test]
fn indexes_are_created_used_listed_and_dropped_across_processes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("dev.img");
    let img = img.to_str().expect("path");
    ok(&csd(&[
        "device",
        "create",
        "--preset",
        "tiny",
        "--ext-bytes",
        "24",
        "--image",
        img,
    ]));
    ok(&csd(&[
        "load", "tpch", "--sf", "0.01", "--tables", "part", "--layout", "nsm", "--image", img,
    ]));
    // Bad input first: nothing is registered.
    fails(
        &csd(&[
            "index", "create", "--image", img, "--table", "part", "--column", "p_nope",
        ]),
        "has no column `p_nope`",
    );
    fails(
        &csd(&[
            "index", "create", "--image", img, "--table", "nope", "--column", "x",
        ]),
        "unknown table `nope`",
    );
    let list = ok(&csd(&["index", "list", "--image", img, "--json"]));
    assert!(list.contains("\"indexes\":[]"), "{list}");
    let made = ok(&csd(&[
        "index",
        "create",
        "--image",
        img,
        "--table",
        "part",
        "--column",
        "p_partkey",
    ]));
    assert!(made.contains("created index part_p_partkey"), "{made}");
    let list = ok(&csd(&["index", "list", "--image", img, "--json"]));
    assert!(list.contains("\"index\":\"part_p_partkey\""), "{list}");
    let q = "SELECT count(*) FROM part WHERE p_partkey BETWEEN 100 AND 300";
    let out = ok(&csd(&["query", "--image", img, "--json", q]));
    assert!(out.contains("\"pages_skipped\""), "{out}");
    assert!(out.contains("201"), "{out}");
    let text = ok(&csd(&[
        "query",
        "--image",
        img,
        "--strategy",
        "cpu-isp",
        "--explain",
        q,
    ]));
    assert!(text.contains("pages_skipped="), "{text}");
    // The same in SQL; a second index on the same column is refused, one on another
    // column is a secondary key (flixr §6.4) and can be dropped alone.
    fails(
        &csd(&["sql", "--image", img, "CREATE INDEX x ON part (p_partkey)"]),
        "already has index",
    );
    let made = ok(&csd(&[
        "sql",
        "--image",
        img,
        "CREATE INDEX x ON part (p_size) USING bitmap WITH (buckets = 16)",
    ]));
    assert!(made.contains("created index x"), "{made}");
    let list = ok(&csd(&["index", "list", "--image", img, "--json"]));
    assert!(list.contains("\"index\":\"x\""), "{list}");
    ok(&csd(&["sql", "--image", img, "DROP INDEX x"]));
    ok(&csd(&["sql", "--image", img, "DROP INDEX part_p_partkey"]));
    let made = ok(&csd(&[
        "sql",
        "--image",
        img,
        "CREATE INDEX p_size ON part (p_size) USING bitmap WITH (buckets = 16)",
    ]));
    assert!(made.contains("created index p_size"), "{made}");
    let out = ok(&csd(&[
        "sql",
        "--image",
        img,
        "--format",
        "csv",
        "SELECT count(*) FROM part WHERE p_size = 7",
    ]));
    assert!(
        out.lines()
            .any(|l| l.trim().parse::<u64>().is_ok_and(|n| n > 0)),
        "{out}"
    );
    ok(&csd(&["index", "drop", "--image", img, "--name", "p_size"]));
    let list = ok(&csd(&["index", "list", "--image", img]));
    assert!(list.contains("no indexes"), "{list}");
}
