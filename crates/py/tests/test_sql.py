"""Tables and SQL: random pandas data loaded and queried, results equal to pandas' on
the same data (several seeds); TPC-H Q6; Arrow without copies; DML; errors that change
nothing; an interrupted query leaves the image readable."""

from __future__ import annotations

import datetime as dt
import os
import signal
import threading
import time
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import csd


def random_frame(seed: int, rows: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "id": np.arange(rows, dtype=np.int64),
            "grp": rng.integers(0, 7, rows, dtype=np.int32),
            "qty": rng.integers(-1000, 1000, rows, dtype=np.int64),
            "price": [Decimal(int(c)).scaleb(-2) for c in rng.integers(0, 10**6, rows)],
            "day": [dt.date(2020, 1, 1) + dt.timedelta(days=int(d)) for d in rng.integers(0, 900, rows)],
            "tag": rng.choice(["red", "green", "blue", "teal"], rows),
        }
    )


def as_arrow(df: pd.DataFrame) -> pa.Table:
    return pa.Table.from_pandas(
        df,
        preserve_index=False,
        schema=pa.schema(
            [
                ("id", pa.int64()),
                ("grp", pa.int32()),
                ("qty", pa.int64()),
                ("price", pa.decimal128(12, 2)),
                ("day", pa.date32()),
                ("tag", pa.string()),
            ]
        ),
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_frame_matches_pandas(seed: int) -> None:
    df = random_frame(seed, 3000 + 1000 * seed)
    strategy = ["auto", "ihp", "all"][seed - 1]
    with csd.memory("tiny") as dev:
        load = dev.load("t", as_arrow(df) if seed != 2 else df.astype({"price": float}), float_scale=2)
        assert load["rows"] == len(df)

        # Filter + group + aggregate, pushed into the device where it can run there.
        lo = int(np.random.default_rng(seed).integers(-500, 0))
        got = dev.sql(
            f"SELECT grp, COUNT(*) AS n, SUM(qty) AS s, MIN(day) AS d FROM t "
            f"WHERE qty > {lo} AND tag <> 'teal' GROUP BY grp ORDER BY grp",
            strategy=strategy,
        )
        assert got.reports, "the scan ran in the device's accounting"
        res = got.to_pandas()
        sel = df[(df.qty > lo) & (df.tag != "teal")]
        want = sel.groupby("grp").agg(n=("id", "size"), s=("qty", "sum"), d=("day", "min")).reset_index()
        assert res["grp"].tolist() == want["grp"].tolist()
        assert res["n"].tolist() == want["n"].tolist()
        assert res["s"].tolist() == want["s"].tolist()
        assert [pd.Timestamp(x).date() for x in res["d"]] == want["d"].tolist()

        # Exact decimals.
        total = dev.sql("SELECT SUM(price) AS p FROM t WHERE grp = 3").to_pandas()["p"][0]
        assert Decimal(str(total)) == sum(df[df.grp == 3].price, Decimal("0.00"))

        # Every row back, in order.
        back = dev.sql("SELECT id, tag FROM t ORDER BY id").to_arrow()
        assert back.column("id").to_pylist() == df.id.tolist()
        assert back.column("tag").to_pylist() == df.tag.tolist()


def test_sql_on_the_event_core() -> None:
    """`time_model="events"` (`csd query --time-model events`, the default): the same
    rows as on calendars, each scan's report with the event core's counters, nothing
    late."""
    with csd.memory("tiny") as dev:
        dev.load_tpch(0.01, "lineitem")
        cal = dev.sql("q6", strategy="all", time_model="calendar")
        ev = dev.sql("q6", strategy="all")
        assert ev.to_pandas().equals(cal.to_pandas())
        assert all("event_core" not in x for x in cal.reports)
        for x in ev.reports:
            core = x["event_core"]
            assert core["booked"] > 0
            assert (core["late_arrivals"], core["unrecorded"], core["stale"], core["unfixed_comparisons"]) == (0, 0, 0, 0)
        with pytest.raises(ValueError, match="time_model `fcfs`"):
            dev.sql("q6", time_model="fcfs")


def test_tpch_q6_and_reports() -> None:
    with csd.memory("tiny") as dev:
        [load] = dev.load_tpch(0.01, "lineitem")
        assert load["table"] == "lineitem" and load["rows"] > 50_000
        r = dev.sql("q6", strategy="all")
        assert r.strategy == "ihp,cpu-isp,hw-isp"
        assert {x["run"] for x in r.reports} == {"ihp", "cpu-isp", "hw-isp"}
        assert all(x["modeled_time_s"] > 0 for x in r.reports)
        assert "DeviceScanExec" in r.explain or "device" in r.explain
        revenue = r.to_pandas()["revenue"][0]
        li = dev.sql(
            "SELECT l_extendedprice, l_discount, l_quantity, l_shipdate FROM lineitem"
        ).to_pandas()
        m = li[
            (li.l_shipdate >= dt.date(1994, 1, 1))
            & (li.l_shipdate < dt.date(1995, 1, 1))
            & (li.l_discount >= Decimal("0.05"))
            & (li.l_discount <= Decimal("0.07"))
            & (li.l_quantity < 24)
        ]
        want = sum((p * d for p, d in zip(m.l_extendedprice, m.l_discount)), Decimal(0))
        assert Decimal(str(revenue)) == want
        assert r.reports_frame().shape[0] == 3
        assert "<table" in r._repr_html_()


def test_result_reaches_arrow_without_copies() -> None:
    with csd.memory("tiny") as dev:
        dev.load_synthetic(columns=4, rows=300_000)
        r = dev.sql("SELECT c1, c2 FROM synthetic4")
        a, b = r.to_arrow(), r.to_arrow()
        assert a.num_rows == len(r) == 300_000
        # Two exports share the same buffers: the C stream interface hands pyarrow the
        # batches' memory itself.
        for ca, cb in zip(a.column("c1").chunks, b.column("c1").chunks):
            assert ca.buffers()[1].address == cb.buffers()[1].address


def test_files_load(tmp_path: Path) -> None:
    df = random_frame(9, 500)
    pq.write_table(as_arrow(df), tmp_path / "t.parquet")
    df[["id", "grp", "tag"]].to_csv(tmp_path / "t.csv", index=False)
    with csd.memory("tiny") as dev:
        assert dev.load("p", tmp_path / "t.parquet")["rows"] == 500
        assert dev.load("c", str(tmp_path / "t.csv"))["rows"] == 500
        j = dev.sql("SELECT SUM(p.qty) AS s FROM p JOIN c ON p.id = c.id WHERE c.tag = 'red'").to_pandas()
        assert j["s"][0] == df[df.tag == "red"].qty.sum()
        names = {t["name"] for t in dev.tables()}
        assert names == {"p", "c"}
        with pytest.raises(csd.SqlError, match="nope.csv"):
            dev.load("x", tmp_path / "nope.csv")


def test_dml_round_trip(image: Path) -> None:
    with csd.open(image) as dev:
        dev.load("t", pa.table({"k": pa.array([1, 2, 3], pa.int32()), "v": pa.array([10, 20, 30], pa.int64())}))
        assert "inserted" in dev.sql("INSERT INTO t VALUES (4, 40), (5, 50)").dml
        assert "updated" in dev.sql("UPDATE t SET v = v + 1 WHERE k >= 4").dml
        assert "deleted" in dev.sql("DELETE FROM t WHERE k = 1").dml
    with csd.open(image, read_only=True) as dev:
        rows = dev.sql("SELECT k, v FROM t ORDER BY k").to_pandas()
        assert rows.values.tolist() == [[2, 20], [3, 30], [4, 41], [5, 51]]


def test_sql_errors_raise_and_change_nothing(image: Path) -> None:
    with csd.open(image) as dev:
        dev.load("t", pa.table({"k": pa.array([1, 2], pa.int32())}))
    before = image.read_bytes()
    with csd.open(image, read_only=True) as dev:
        with pytest.raises(csd.SqlError, match="nosuch"):
            dev.sql("SELECT * FROM nosuch")
        with pytest.raises(csd.SqlError):
            dev.sql("SELEC 1")
        with pytest.raises(csd.CsdError):
            dev.sql("INSERT INTO t VALUES (3)")
        with pytest.raises(ValueError, match="strategy `gpu`"):
            dev.sql("SELECT 1", strategy="gpu")
        assert dev.sql("SELECT COUNT(*) AS n FROM t").to_pandas()["n"][0] == 2
    assert image.read_bytes() == before
    with csd.open(image) as dev:
        with pytest.raises(csd.SqlError):
            dev.sql("INSERT INTO t VALUES ('not a number')")
        assert dev.sql("SELECT COUNT(*) AS n FROM t").to_pandas()["n"][0] == 2


def test_interrupted_query_leaves_image_readable(image: Path) -> None:
    with csd.open(image) as dev:
        dev.load_synthetic(columns=4, rows=50_000, name="s")
    dev = csd.open(image)
    # A process started in the background by a non-interactive shell inherits SIGINT
    # ignored, and Python then keeps it ignored: install Python's own handler for the
    # test's duration, so it tests csd's answer to Ctrl-C, not how pytest was started.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    t0 = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            # A cross join of 2.5e9 pairs: seconds of work, interrupted after 0.5 s.
            dev.sql("SELECT COUNT(*) FROM s a, s b WHERE a.c1 + b.c2 > 0", strategy="ihp")
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - t0 < 3.0, "Ctrl-C is answered within a poll interval"
    dev.close()  # waits for the abandoned command, then closes cleanly
    with csd.open(image, read_only=True) as ro:
        assert ro.sql("SELECT COUNT(*) AS n FROM s").to_pandas()["n"][0] == 50_000
