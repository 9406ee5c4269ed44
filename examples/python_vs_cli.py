#!/usr/bin/env python3
"""How much the Python package adds to a query, and whether results cross without copies.

1. ``dev.sql("q6").to_arrow()`` from Python against ``csd query q6`` on the same
   image (both warm: each is run once before the timed runs; best of ``--runs``). The
   CLI's figure is the statement's wall time it prints ("wall W s": planning and running
   the statement, as ``SqlResult.wall_s``), and the whole process's wall time.
2. A result of ``--rows`` rows (default 1M) reaches pyarrow without a per-row copy:
   the time of ``to_arrow()`` stays flat from 10k to 1M rows, and two exports of one
   result point at the same buffers.

Usage: python3 examples/python_vs_cli.py --image lineitem-sf1.img --csd target/debug/csd
(the image is created with lineitem at ``--sf`` if it does not exist).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import time
from pathlib import Path

import csd


def best(f, runs: int) -> float:
    f()  # warm
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def cli_times(binary: str, image: Path, strategy: str, runs: int) -> tuple[float, float]:
    """Best statement wall time (printed by csd query) and best process wall time."""
    stmt, proc = [], []
    for i in range(runs + 1):
        t0 = time.perf_counter()
        out = subprocess.run(
            [binary, "query", "--image", str(image), "--strategy", strategy, "q6"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        elapsed = time.perf_counter() - t0
        m = re.search(r"wall ([0-9.]+) s", out)
        if m is None:
            raise SystemExit(f"no wall time in csd query's output:\n{out}")
        if i > 0:  # the first run warms the page cache
            stmt.append(float(m.group(1)))
            proc.append(elapsed)
    return min(stmt), min(proc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--image", type=Path, required=True)
    ap.add_argument("--csd", default="target/debug/csd", help="the csd binary to compare with")
    ap.add_argument("--sf", type=float, default=1.0)
    ap.add_argument("--preset", default="isp-ch8")
    ap.add_argument("--strategy", default="ihp")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rows", type=int, default=1_000_000)
    a = ap.parse_args()

    if not a.image.exists():
        with csd.create(a.image, a.preset) as dev:
            t0 = time.perf_counter()
            (r,) = dev.load_tpch(a.sf, "lineitem")
            print(f"loaded lineitem SF {a.sf}: {r['rows']} rows in {time.perf_counter() - t0:.1f} s")

    stmt, proc = cli_times(a.csd, a.image, a.strategy, a.runs)
    with csd.open(a.image, read_only=True) as dev:
        res = {}

        def q6() -> None:
            res["r"] = dev.sql("q6", strategy=a.strategy)
            res["t"] = res["r"].to_arrow()

        py = best(q6, a.runs)
        print(f"q6 ({a.strategy}), best of {a.runs}, warm:")
        print(f"  csd query: statement {stmt:.3f} s (process {proc:.3f} s)")
        print(f"  python sql('q6').to_arrow(): {py:.3f} s (statement wall_s {res['r'].wall_s:.3f} s)")
        print(f"  python / csd query statement: {py / stmt:.3f}")

    # As the CLI does: the image opened afresh for every query (its mapping faulted in
    # again, the device's caches and the SQL session new).
    def fresh() -> None:
        with csd.open(a.image, read_only=True) as dev:
            res["f"] = dev.sql("q6", strategy=a.strategy)
            res["f"].to_arrow()

    f = best(fresh, a.runs)
    print(
        f"  python, image opened per query: {f:.3f} s (statement wall_s {res['f'].wall_s:.3f} s); "
        f"statement / csd query statement: {res['f'].wall_s / stmt:.3f}, "
        f"whole call / csd query process: {f / proc:.3f}"
    )

    with csd.memory("tiny") as dev:
        dev.load_synthetic(columns=4, rows=a.rows, name="s")
        print(f"to_arrow() of a result, {a.rows} rows loaded:")
        for n in (10_000, 100_000, a.rows):
            r = dev.sql(f"SELECT c1, c2, c3, c4 FROM s LIMIT {n}", strategy="ihp")
            t = best(r.to_arrow, 5)
            one, two = r.to_arrow(), r.to_arrow()
            same = all(
                x.buffers()[1].address == y.buffers()[1].address
                for x, y in zip(one.column("c1").chunks, two.column("c1").chunks)
            )
            print(
                f"  {len(r):>9} rows: to_arrow {t * 1e6:8.1f} us ({t / max(len(r), 1) * 1e9:7.3f} ns/row), "
                f"{one.nbytes / 1e6:7.1f} MB, same buffers in two exports: {same}"
            )


if __name__ == "__main__":
    main()
