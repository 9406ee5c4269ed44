"""Devices: create / open / close round trips, configs, errors carrying csd's messages."""

from __future__ import annotations

from pathlib import Path

import pytest

import csd


def test_create_open_close_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "dev.img"
    with csd.create(path, "tiny", op=0.1) as dev:
        info = dev.info()
        assert info["device"] == "tiny"
        assert info["image"] == str(path)
        assert info["op"] == pytest.approx(0.1)
        lbas = info["lbas"]
        assert lbas > 0
        report = dev.io("randwrite", ops=2000, size=8 << 20)
        assert report["ops"] == 2000
        assert report["writes"] == 2000
        assert report["iops"] > 0
        assert report["latency_p50_us"] <= report["latency_p99_us"] <= report["latency_max_us"]
    assert dev.closed
    with pytest.raises(csd.DeviceError, match="closed"):
        dev.info()

    # Read-only: the same device, and the file keeps every byte.
    before = path.read_bytes()
    with csd.open(path, read_only=True) as ro:
        assert ro.read_only
        assert ro.info()["lbas"] == lbas
        smart = ro.smart()
        assert smart["host_written_bytes"] >= 2000 * 4096
        assert ro.io("randread", ops=500, size=8 << 20)["reads"] == 500
        with pytest.raises(ValueError, match="read-only"):
            ro.io("randwrite", ops=10)
    assert path.read_bytes() == before

    # Read-write again: the writes of the first session are there.
    with csd.open(path) as rw:
        assert rw.smart()["host_written_bytes"] >= 2000 * 4096


def test_memory_device_and_presets() -> None:
    assert "tiny" in csd.presets() and "nvme-tlc" in csd.presets()
    with csd.memory("tiny") as dev:
        assert dev.image is None
        assert dev.config()["name"] == "tiny"
        r = dev.io("read", bs=65536, ops=200)
        assert r["read_bytes"] == 200 * 65536
        df = r.to_pandas()
        assert list(df["ops"]) == [200]


def test_io_on_the_event_core() -> None:
    # The event core serves every resource in arrival order: same commands, no booking
    # behind a later arrival; a bad model name is refused with the choices.
    with csd.memory("tiny") as dev:
        cal = dev.io("randrw", ops=3000, size=8 << 20, iodepth=16, seed=4)
    with csd.memory("tiny") as dev:
        ev = dev.io("randrw", ops=3000, size=8 << 20, iodepth=16, seed=4, time_model="events")
        with pytest.raises(ValueError, match="calendar or events"):
            dev.io("randread", ops=10, time_model="fcfs")
    assert ev["time_model"] == "events"
    assert (ev["reads"], ev["writes"]) == (cal["reads"], cal["writes"])
    assert sum(v for k, v in ev.to_dict().items() if k.startswith("order_inversions_")) == 0
    raw = csd.raw_io(preset="tiny", rw="randread", ops=2000, time_model="events")
    assert raw["ops"] == 2000 and raw["time_model"] == "events"


def test_config_dict_and_overrides() -> None:
    cfg = csd.device_config("tiny", overrides={"channel.rate_mt_s": 400})
    assert cfg["channel"]["rate_mt_s"] == 400
    cfg["name"] = "my-tiny"
    with csd.memory(config=cfg) as dev:
        assert dev.name == "my-tiny"
        assert dev.config()["channel"]["rate_mt_s"] == 400


def test_faster_channel_reads_faster() -> None:
    """The override reaches the model: on `tiny` the channel is the bottleneck of
    sequential reads at 50 MT/s, so twice the rate reads about twice as fast."""

    def bandwidth(rate: int) -> float:
        with csd.memory("tiny", overrides={"channel.rate_mt_s": rate}) as dev:
            # Written first: an unwritten LBA reads as zeros without touching flash.
            dev.io("write", bs=131072, iodepth=64, size=32 << 20, ops=256)
            r = dev.io("read", bs=131072, iodepth=64, size=32 << 20, ops=256)
            assert r["bottleneck"] == "channel"
            return r["bandwidth_mb_s"]

    assert bandwidth(100) == pytest.approx(2 * bandwidth(50), rel=0.05)


def test_bad_preset_and_fields_raise() -> None:
    with pytest.raises(csd.ConfigError, match="nope"):
        csd.memory("nope")
    with pytest.raises(csd.ConfigError) as e:
        csd.memory("tiny", overrides={"geometry.channels": 0})
    assert "channels" in str(e.value)
    with pytest.raises(csd.ConfigError):
        csd.device_config("tiny", overrides={"channel.rate_mt_s": "fast"})
    with pytest.raises(ValueError, match="rw `sideways`"):
        csd.memory().io("sideways")


def test_missing_image_raises(tmp_path: Path) -> None:
    with pytest.raises(csd.ImageError) as e:
        csd.open(tmp_path / "none.img")
    assert "none.img" in str(e.value)


def test_damaged_image_raises_and_changes_nothing(image: Path) -> None:
    data = bytearray(image.read_bytes())
    data[16:48] = b"\xff" * 32  # inside the header, under its CRC
    image.write_bytes(bytes(data))
    for read_only in (True, False):
        with pytest.raises(csd.ImageError) as e:
            csd.open(image, read_only=read_only)
        assert str(image) in str(e.value) or "header" in str(e.value)
    assert image.read_bytes() == bytes(data)


def test_create_refuses_existing_file(image: Path) -> None:
    with pytest.raises(csd.ImageError):
        csd.create(image, "tiny")
    # The existing image still opens.
    with csd.open(image, read_only=True) as dev:
        assert dev.info()["device"] == "tiny"


def test_plot_lines(tmp_path: Path) -> None:
    plot = csd.plot_lines(tmp_path, "p", {"a": [(1, 2), (2, 4)], "b": [(1, 1), (2, 3)]}, title="t")
    assert Path(plot.png).stat().st_size > 0
    assert plot._repr_svg_().lstrip().startswith("<svg")
