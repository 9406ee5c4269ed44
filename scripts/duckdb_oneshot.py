#!/usr/bin/env python3
"""One query in DuckDB over a Parquet file, as a fresh process: `csd bench oneshot`'s peer.

Usage:
  scripts/duckdb_oneshot.py --python            print the Python executable that has duckdb
  scripts/duckdb_oneshot.py PARQUET SQL_FILE    run the query once, print one JSON object

The second form is what `csd bench oneshot --compare duckdb` starts once per measured run
(with the Python the first form printed, so no venv re-exec is timed): the process's wall
time, measured by the bench from outside, is what a user pays for DuckDB's first query
over the file: interpreter start, `import duckdb`, opening the Parquet file, the query.
The SQL names the table `lineitem`, a view over the file. Prints
{"version": ..., "query_s": ..., "rows": [[...], ...]} (cells as text).

DuckDB comes from the same venv as `scripts/duckdb_tpch.py` (created with pip on first use).
"""

import json
import os
import sys
import time


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--python":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from duckdb_tpch import ensure_duckdb

        ensure_duckdb()
        print(sys.executable)
        return
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    import duckdb

    parquet, sql_path = sys.argv[1], sys.argv[2]
    with open(sql_path) as f:
        sql = f.read()
    t0 = time.perf_counter()
    con = duckdb.connect()
    con.execute(f"CREATE VIEW lineitem AS SELECT * FROM read_parquet('{parquet}')")
    rows = con.execute(sql).fetchall()
    query_s = time.perf_counter() - t0
    out = {
        "version": duckdb.__version__,
        "query_s": query_s,
        "rows": [["" if c is None else str(c) for c in r] for r in rows],
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
