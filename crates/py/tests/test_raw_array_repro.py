"""Raw-mode workloads and preconditioning (``csd io --mode raw --precondition``),
arrays of devices (``csd array`` / ``--array DIR``), reproductions as DataFrames and
plots, damaged images."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

import csd


def test_raw_io_in_memory_and_preconditioning() -> None:
    # Reads of a fresh array hit erased pages; preconditioned, they read programmed ones.
    fresh = csd.raw_io(preset="tiny", rw="randread", ops=2000, size=8 << 20)
    assert fresh["ops"] == 2000 and fresh["writes"] == 0
    pre = csd.raw_io(preset="tiny", rw="randread", ops=2000, size=8 << 20, precondition=True)
    assert pre["ops"] == 2000 and pre["writes"] == 0, "only the measured run is reported"
    w = csd.raw_io(rw="write", bs=16384, ops=256, size=4 << 20)
    assert w["writes"] == 256 and w["iops"] > 0
    with pytest.raises(ValueError, match="force applies"):
        csd.raw_io(rw="write", ops=10, force=True)
    with pytest.raises(ValueError, match="rw `sideways`"):
        csd.raw_io(rw="sideways")
    with pytest.raises(csd.ConfigError):
        csd.raw_io(preset="no-such-preset")


def test_raw_writes_on_an_image_with_data_are_refused_and_change_nothing(image: Path) -> None:
    before = image.read_bytes()
    with pytest.raises(ValueError, match="refusing raw-mode writes"):
        csd.raw_io(image, rw="randwrite", ops=100)
    with pytest.raises(ValueError, match="refusing raw-mode writes"):
        csd.raw_io(image, rw="randread", ops=100, precondition=True)
    with pytest.raises(ValueError, match="carries its own config"):
        csd.raw_io(image, "tiny", ops=10)
    # Reads are fine (read-only: the image keeps every byte).
    r = csd.raw_io(image, rw="randread", ops=500)
    assert r["reads"] == 500
    assert image.read_bytes() == before
    with csd.open(image, read_only=True) as dev:
        assert dev.info()["device"] == "tiny"


def test_raw_writes_with_force(tmp_path: Path, image: Path) -> None:
    before = image.read_bytes()
    r = csd.raw_io(image, rw="write", bs=8192, ops=64, size=1 << 20, force=True)
    assert r["writes"] == 64
    assert image.read_bytes() != before, "forced raw writes reach the image"


def test_block_io_preconditioning_and_read_only() -> None:
    with csd.memory("tiny") as dev:
        r = dev.io("randread", ops=1000, size=4 << 20, precondition=True)
        assert r["reads"] == 1000 and r["writes"] == 0
        # The preconditioning wrote the region once sequentially, then overwrote it
        # once at random.
        assert dev.smart()["host_written_bytes"] == 2 * (4 << 20)


def test_block_io_precondition_refused_read_only(image: Path) -> None:
    before = image.read_bytes()
    with csd.open(image, read_only=True) as dev:
        with pytest.raises(ValueError, match="read-only"):
            dev.io("randread", ops=10, precondition=True)
        assert dev.io("randread", ops=100)["reads"] == 100
    assert image.read_bytes() == before


def test_array_load_and_query_matches_pandas(tmp_path: Path) -> None:
    arr = csd.create_array(tmp_path / "arr", 3, "tiny")
    assert arr.devices == 3
    df = pd.DataFrame({"k": range(20_000), "g": [i % 5 for i in range(20_000)]})
    load = arr.load("t", pa.Table.from_pandas(df.astype({"k": "int64", "g": "int32"}), preserve_index=False))
    assert load["rows"] == 20_000
    (t,) = arr.tables()
    assert t["name"] == "t" and sum(t["device_rows"]) == 20_000
    assert all(r > 0 for r in t["device_rows"]), "the rows are striped over every device"
    r = arr.sql("SELECT g, COUNT(*) AS n, SUM(k) AS s FROM t WHERE k % 3 = 0 GROUP BY g ORDER BY g", strategy="ihp")
    got = r.to_pandas()
    sel = df[df.k % 3 == 0]
    want = sel.groupby("g").agg(n=("k", "size"), s=("k", "sum")).reset_index()
    assert got["n"].tolist() == want["n"].tolist()
    assert got["s"].tolist() == want["s"].tolist()
    assert {x["device"] for x in r.reports} == {0, 1, 2}
    a = r.array
    assert a is not None and a["devices"] == 3
    assert a["modeled_time_s"] == pytest.approx(max(a["device_modeled_time_s"]))

    # Another load ends the query session; queries see the new table.
    arr.load_synthetic(columns=4, rows=5000, name="s4")
    again = csd.open_array(tmp_path / "arr")
    n = again.sql("SELECT COUNT(*) AS n FROM s4").to_pandas()["n"][0]
    assert n == 5000
    assert len(arr.sql("SELECT * FROM t LIMIT 7")) == 7
    again.close()
    arr.close()


def test_array_errors_change_nothing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="1 to 64"):
        csd.create_array(tmp_path / "a0", 0, "tiny")
    with pytest.raises(csd.ConfigError):
        csd.create_array(tmp_path / "bad", 2, "no-such-preset")
    assert not (tmp_path / "bad").exists(), "a refused config creates nothing"
    arr = csd.create_array(tmp_path / "a", 2, "tiny")
    with pytest.raises(ValueError, match="already holds an array"):
        csd.create_array(tmp_path / "a", 2, "tiny")
    with pytest.raises(csd.ImageError):
        csd.open_array(tmp_path / "none")
    manifest = (tmp_path / "a" / "csd-array.toml").read_bytes()
    with pytest.raises(csd.SqlError):
        arr.load("x", tmp_path / "missing.parquet")
    with pytest.raises(csd.SqlError):
        arr.sql("SELECT * FROM nosuch")
    assert (tmp_path / "a" / "csd-array.toml").read_bytes() == manifest


def test_truncated_image_raises_and_changes_nothing(image: Path) -> None:
    data = image.read_bytes()
    cut = data[: len(data) // 2]
    image.write_bytes(cut)
    for read_only in (True, False):
        with pytest.raises(csd.ImageError):
            csd.open(image, read_only=read_only)
    assert image.read_bytes() == cut


def test_markdown_tables_parse() -> None:
    from csd.repro import markdown_tables

    text = "# R\n\n## Figure 5\n\n| a | b |\n|---|---:|\n| x | 1,200 |\n| y | 2.5 |\n\ntext\n"
    ((title, df),) = markdown_tables(text)
    assert title == "Figure 5"
    assert df["a"].tolist() == ["x", "y"]
    assert df["b"].tolist() == [1200, 2.5]


def test_repro_scan_paper_tiny(tmp_path: Path) -> None:
    r = csd.repro("scan-paper", tmp_path / "sp", scale=0.001)
    assert r.report.startswith("#")
    assert r.tables, "the report's tables come back as DataFrames"
    assert all(isinstance(df, pd.DataFrame) and len(df) > 0 for _, df in r.tables)
    assert r.plots and all(p.suffix == ".svg" and p.is_file() for p in r.plots)
    assert len(r.pngs) == len(r.plots)
    assert r._repr_svg_().lstrip().startswith("<")
    assert "<table" in r._repr_html_()
    with pytest.raises(ValueError, match="scale"):
        csd.repro("scan-paper", tmp_path / "x", scale="big")
    with pytest.raises(ValueError, match="reproduction `nope`"):
        csd.repro("nope", tmp_path / "y")
    with pytest.raises(ValueError, match="no reproduction named"):
        csd.repro_all(tmp_path / "z", nope={})


def test_scan_reports_have_csd_query_json_keys_and_figures(image: Path) -> None:
    """One report shape for both front ends: `csd query --json`'s scans and
    `SqlResult.reports` (plus `run`) come from csd_sql::ScanRecordReport."""
    import json
    import subprocess

    binary = Path(__file__).resolve().parents[3] / "target" / "debug" / "csd"
    if not binary.is_file():
        pytest.skip(f"{binary} not built (cargo build -p csd)")
    with csd.open(image) as dev:
        dev.load_synthetic(columns=4, rows=5000, name="s")
    query = "SELECT COUNT(*) AS n FROM s WHERE c1 < 1000"
    out = subprocess.run(
        [str(binary), "query", "--image", str(image), "--strategy", "ihp", "--json", query],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    (cli,) = json.loads(out)["runs"][0]["scans"]
    with csd.open(image, read_only=True) as dev:
        (py,) = dev.sql(query, strategy="ihp").reports
    assert py["run"] == "ihp"
    assert set(py) - {"run"} == set(cli)
    for k in ("table", "strategy", "pages", "rows", "rows_selected", "result_rows", "flash_reads",
              "host_link_bytes", "commands", "device_program", "why", "stages"):
        assert py[k] == cli[k], k
