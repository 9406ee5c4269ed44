#!/usr/bin/env python3
"""Runs TPC-H queries in DuckDB for `csd bench tpch --compare duckdb`.

Usage: scripts/duckdb_tpch.py DATA_DIR QUERIES_JSON THREADS [RUNS]

DATA_DIR holds one CSV per table (`<table>.csv`, header row, written by csd from the
same tpchgen rows it loaded on the device). QUERIES_JSON is a JSON list of SQL texts.
For every query and for 1 and THREADS threads, the best wall time of RUNS runs (default
3; csd passes its own `--repeat`, so both engines are measured the same way) is measured
(DuckDB's `SET threads = N`). Prints one JSON object to stdout:
{"version": ..., "queries": [{"t1_s": .., "tn_s": .., "rows": [[...], ...]}, ...]}.

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
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    ensure_duckdb()
    import duckdb

    data, queries_path, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    runs = int(sys.argv[4]) if len(sys.argv) == 5 else 3
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
    out = []
    for q in queries:
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
        out.append(
            {
                "t1_s": times[1],
                "tn_s": times[threads],
                "rows": [[str(v) for v in row] for row in rows],
            }
        )
    print(
        json.dumps(
            {"version": duckdb.__version__, "threads": threads, "runs": runs, "queries": out}
        )
    )


if __name__ == "__main__":
    main()
