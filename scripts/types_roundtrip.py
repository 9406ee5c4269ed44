#!/usr/bin/env python3
"""Issue 34's round trip: a pyarrow-written file of every type a user's table has loads
through Parquet and through CSV without options, and `SELECT *` returns exactly the input.

The table (`make_table`): id, and with NULLs in every other column: BOOLEAN, INT8/16/32/64,
FLOAT32/64 with -0.0, NaN and +-inf, DECIMAL(30, 5), DATE, TIMESTAMP (us) with time zone
UTC and without, strings of 0 to 2,000 bytes (unicode, trailing blanks, empty, commas,
quotes, newlines) and binary. Parquet and CSV are written by pyarrow (`write_table`,
`write_csv`: a quoted header, NULL as an empty field). pyarrow's CSV writer refuses
binary that is not UTF-8, so the binary values are UTF-8 bytes (arbitrary bytes go
through Parquet in crates/sql/tests/integration/types.rs).

Exact means value for value: a CSV column comes back in CSV's own type (INT64 for the
integers, DOUBLE for FLOAT32, VARCHAR for binary), cast back to the input's type before
comparing; floats compare bit for bit (-0.0 kept), NaN with NaN.

    python3 scripts/types_roundtrip.py --csd target/debug/csd --rows 50000 --dir /tmp/rt

`compare` and `make_table` are also used by crates/py/tests/test_types_roundtrip.py.
"""
from __future__ import annotations

import argparse
import datetime
import decimal
import math
import random
import struct
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq


def make_table(n: int, seed: int = 34) -> pa.Table:
    """`n` rows of every type, NULLs in every column but `id` (see the module docs)."""
    r = random.Random(seed)

    def nul(f, p=0.1):
        return [None if r.random() < p else f() for _ in range(n)]

    def text():
        k = r.random()
        if k < 0.1:
            return ""
        if k < 0.2:
            return "abc" + " " * r.randint(1, 3)  # trailing blanks
        if k < 0.3:
            return "日本語 é 🙂" * r.randint(1, 4)
        if k < 0.4:
            return 'with,comma "quoted"\nand a newline'
        if k < 0.5:
            return "x" * r.randint(1000, 2000)
        return "".join(r.choice("abcdefgh ") for _ in range(r.randint(1, 40)))

    f32s = [0.0, -0.0, 1.5, -2.25, 3.4e38, 1e-45, math.inf, -math.inf, math.nan]
    f64s = [0.0, -0.0, 1e-300, -1e300, math.inf, -math.inf, math.nan]
    ts0 = datetime.datetime(1970, 1, 1)
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "flag": pa.array(nul(lambda: r.random() < 0.5), pa.bool_()),
            "i8": pa.array(nul(lambda: r.randint(-128, 127)), pa.int8()),
            "i16": pa.array(nul(lambda: r.randint(-32768, 32767)), pa.int16()),
            "i32": pa.array(nul(lambda: r.randint(-(2**31), 2**31 - 1)), pa.int32()),
            "i64": pa.array(nul(lambda: r.randint(-(2**63), 2**63 - 1)), pa.int64()),
            "f32": pa.array(
                nul(lambda: r.choice(f32s) if r.random() < 0.3 else r.uniform(-1e6, 1e6)),
                pa.float32(),
            ),
            "f64": pa.array(
                nul(lambda: r.choice(f64s) if r.random() < 0.3 else r.uniform(-1e9, 1e9)),
                pa.float64(),
            ),
            "dec": pa.array(
                nul(lambda: decimal.Decimal(r.randint(-(10**30) + 1, 10**30 - 1)).scaleb(-5)),
                pa.decimal128(30, 5),
            ),
            "day": pa.array(
                nul(lambda: datetime.date(1900, 1, 1) + datetime.timedelta(days=r.randint(0, 80000))),
                pa.date32(),
            ),
            "ts_utc": pa.array(
                nul(lambda: r.randint(-(2**50), 2**50)), pa.timestamp("us", tz="UTC")
            ),
            "ts": pa.array(
                nul(lambda: ts0 + datetime.timedelta(microseconds=r.randint(0, 2**52))),
                pa.timestamp("us"),
            ),
            "name": pa.array(nul(text, 0.2), pa.string()),
            "bin": pa.array(nul(lambda: text().encode()), pa.binary()),
        }
    )


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float):
        if math.isnan(a):
            return isinstance(b, float) and math.isnan(b)
        return struct.pack("<d", a) == struct.pack("<d", b)
    return a == b


def compare(want: pa.Table, got: pa.Table) -> list[str]:
    """One line per column of `want`: `exact` or how `got` differs (in order; `got` is
    cast to `want`'s types first)."""
    lines = []
    if got.num_rows != want.num_rows:
        return [f"rows: {got.num_rows} returned, {want.num_rows} written"]
    for name in want.column_names:
        w = want.column(name).combine_chunks()
        if name not in got.column_names:
            lines.append(f"{name}: missing")
            continue
        g = got.column(name).combine_chunks()
        note = "" if g.type == w.type else f" (returned as {g.type})"
        try:
            g = g.cast(w.type) if g.type != w.type else g
        except pa.ArrowInvalid as e:
            lines.append(f"{name}: cannot cast {g.type} to {w.type}: {e}")
            continue
        x, y = w.to_pylist(), g.to_pylist()
        bad = [i for i in range(len(x)) if not _same(x[i], y[i])]
        if bad:
            i = bad[0]
            lines.append(f"{name}: {len(bad)} differ{note}, e.g. row {i}: {x[i]!r} vs {y[i]!r}")
        else:
            lines.append(f"{name}: exact{note}")
    return lines


def _run(cmd: list[str]) -> None:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csd", default="target/debug/csd", help="the csd binary")
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/csd-types-roundtrip"))
    ap.add_argument("--preset", default="nvme-tlc")
    a = ap.parse_args()
    a.dir.mkdir(parents=True, exist_ok=True)
    t = make_table(a.rows)
    pq.write_table(t, a.dir / "in.parquet")
    pcsv.write_csv(t, a.dir / "in.csv")
    img = a.dir / "dev.img"
    img.unlink(missing_ok=True)
    _run([a.csd, "device", "create", "--preset", a.preset, "--image", str(img)])
    _run([a.csd, "load", "parquet", str(a.dir / "in.parquet"), "--table", "p", "--image", str(img)])
    _run([a.csd, "load", "csv", str(a.dir / "in.csv"), "--table", "c", "--image", str(img)])
    total = 0
    for table, via in [("p", "Parquet"), ("c", "CSV")]:
        out = a.dir / f"out_{table}.parquet"
        _run([a.csd, "sql", "--image", str(img), "--format", "csv", "--output", str(out),
              f"SELECT * FROM {table} ORDER BY id"])
        lines = compare(t, pq.read_table(out))
        exact = sum(1 for x in lines if x.endswith("exact") or ": exact (" in x)
        print(f"{via}: {exact} of {t.num_columns} columns exact, {t.num_rows} rows")
        for x in lines:
            print("  " + x)
        total += exact == t.num_columns
    sys.exit(0 if total == 2 else 1)


if __name__ == "__main__":
    main()
