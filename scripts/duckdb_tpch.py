#!/usr/bin/env python3
"""Runs queries in DuckDB for `csd bench tpch --compare duckdb`, one at a time when asked.

Usage: scripts/duckdb_tpch.py DATA_DIR QUERIES_JSON THREADS [RUNS]

DATA_DIR holds one CSV per table (`<table>.csv`, header row, written by csd from the
same rows it loaded on the device). QUERIES_JSON is a JSON list of SQL texts. The tables
are loaded once, and one line {"version": ..., "threads": ..., "runs": ...} is printed.
Then each line read from stdin names a query by its index in QUERIES_JSON, and the
answer is one line {"t1_s": .., "tn_s": .., "rows": [[...], ...]}: the best wall time of
RUNS runs (default 3; csd passes its own `--repeat`, so both engines are measured the same
way) with 1 and THREADS threads (DuckDB's `SET threads = N`), and the rows. So csd runs
each query on DuckDB and on itself back to back. The script ends at the end of its input.

DuckDB comes from a venv (~/.cache/csd/duckdb-venv), created with pip on first use.
"""

import json
import os
import subprocess
import sys
import time

VENV = os.path.expanduser("~/.cache/csd/duckdb-venv")


def ensure_duckdb():
    try:
        import duckdb  # noqa: F401

        return
    except ImportError:
        pass
    py = os.path.join(VENV, "bin", "python")
    if os.environ.get("CSD_DUCKDB_VENV") != "1":
        if not os.path.exists(py):
            print(f"creating {VENV} and installing duckdb with pip ...", file=sys.stderr)
            subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
            subprocess.run(
                [py, "-m", "pip", "install", "--quiet", "duckdb"], check=True, stdout=sys.stderr
            )
        env = dict(os.environ, CSD_DUCKDB_VENV="1")
        os.execve(py, [py] + sys.argv, env)
    sys.exit("duckdb is not importable even in the venv")


def main():
    args = sys.argv[1:]
    if len(args) not in (3, 4):
        sys.exit(__doc__)
    ensure_duckdb()
    import duckdb

    data, queries_path, threads = args[0], args[1], int(args[2])
    runs = int(args[3]) if len(args) == 4 else 3
    if runs < 1:
        sys.exit(f"RUNS must be at least 1, not {runs}")
    with open(queries_path) as f:
        queries = json.load(f)
    con = duckdb.connect()
    for name in sorted(os.listdir(data)):
        if name.endswith(".csv"):
            t = name[:-4]
            con.execute(
                f"CREATE TABLE {t} AS SELECT * FROM read_csv('{os.path.join(data, name)}', "
                f"header = true)"
            )
    header = {"version": duckdb.__version__, "threads": threads, "runs": runs}
    print(json.dumps(header), flush=True)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        k = int(line)
        if not 0 <= k < len(queries):
            sys.exit(f"query index {k} is not in 0..{len(queries)}")
        print(json.dumps(run_query(con, queries[k], threads, runs)), flush=True)


def run_query(con, q, threads, runs):
    """The best wall time of `runs` runs of `q` with 1 and `threads` threads, and its rows."""
    times = {}
    rows = None
    for n in sorted({1, threads}):
        con.execute(f"SET threads = {n}")
        best = None
        for _ in range(runs):
            t0 = time.perf_counter()
            r = con.execute(q).fetchall()
            dt = time.perf_counter() - t0
            best = dt if best is None else min(best, dt)
            rows = r
        times[n] = best
    return {
        "t1_s": times[1],
        "tn_s": times[threads],
        "rows": [[str(v) for v in row] for row in rows],
    }


if __name__ == "__main__":
    main()
