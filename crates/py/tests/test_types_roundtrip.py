"""Issue 34's round trip on a small file (scripts/types_roundtrip.py runs it at 50,000
rows through the CLI): a pyarrow-written Parquet file and CSV file of every type (NULLs
in every column, -0.0, NaN, inf, DECIMAL(30, 5), timestamps with and without a time
zone, strings of 0 to 2,000 bytes with unicode, trailing blanks, quotes and newlines,
binary) load and `SELECT *` returns exactly the input, value for value."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pyarrow.csv as pcsv
import pyarrow.parquet as pq

import csd

_SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "types_roundtrip.py"
_spec = importlib.util.spec_from_file_location("types_roundtrip", _SCRIPT)
assert _spec is not None and _spec.loader is not None
roundtrip = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(roundtrip)


def test_parquet_and_csv_read_back_exactly(tmp_path: Path) -> None:
    t = roundtrip.make_table(1_000, seed=7)
    pq.write_table(t, tmp_path / "in.parquet")
    pcsv.write_csv(t, tmp_path / "in.csv")
    with csd.memory("tiny") as dev:
        assert dev.load("p", tmp_path / "in.parquet")["rows"] == 1_000
        assert dev.load("c", tmp_path / "in.csv")["rows"] == 1_000
        for table in ["p", "c"]:
            got = dev.sql(f"SELECT * FROM {table} ORDER BY id", strategy="cpu-isp").to_arrow()
            lines = roundtrip.compare(t, got)
            assert all(": exact" in x for x in lines), (table, lines)
