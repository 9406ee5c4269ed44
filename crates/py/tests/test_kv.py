"""The key-value store against a dict (a model test), on both interfaces, and YCSB."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import csd


def key(rng: random.Random) -> bytes:
    return b"k%05d" % rng.randrange(400)


@pytest.mark.parametrize("interface", ["batch", "block"])
@pytest.mark.parametrize("seed", [1, 2])
def test_model_against_dict(image: Path, interface: str, seed: int) -> None:
    rng = random.Random(seed)
    model: dict[bytes, bytes] = {}
    with csd.open(image) as dev:
        kv = dev.kv(interface)
        assert kv.interface == interface
        for _ in range(1500):
            op = rng.random()
            k = key(rng)
            if op < 0.45:
                v = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
                kv.put(k, v)
                model[k] = v
            elif op < 0.6:
                assert kv.delete(k) == (k in model)
                model.pop(k, None)
            elif op < 0.85:
                assert kv.get(k) == model.get(k)
            elif op < 0.95:
                got = kv.scan(k, limit=7)
                want = sorted((a, b) for a, b in model.items() if a >= k)[:7]
                assert got == want
            else:
                batch = {key(rng): b"batch-%d" % i for i in range(rng.randrange(1, 20))}
                kv.put_batch(batch)
                model.update(batch)
        assert len(kv) == len(model)
    # Closed cleanly: everything is there after reopening.
    with csd.open(image) as dev:
        kv = dev.kv(interface)
        assert kv.scan(limit=10_000) == sorted(model.items())


def test_kv_str_keys_and_missing() -> None:
    with csd.memory() as dev:
        kv = dev.kv()
        kv.put("name", "ünïcode")
        assert kv.get("name") == "ünïcode".encode()
        assert "name" in kv
        assert kv.get("other") is None
        assert not kv.delete("other")


def test_ycsb_run() -> None:
    with csd.memory() as dev:
        r = dev.kv("batch").ycsb("a", records=2000, ops=3000, seed=7)
        assert r["run_ops"] == 3000
        assert r["run_read_misses"] == 0
        assert r["load_ops"] == 2000
        assert r["run_modeled_ops_per_s"] > 0
        assert r.to_pandas().shape[0] == 1
    with pytest.raises(ValueError, match="workload `z`"):
        csd.memory().kv().ycsb("z")


def test_ycsb_on_the_event_core() -> None:
    with csd.memory() as dev:
        # A cache of 8 pages: the operations read and write through the device.
        kv = dev.kv("block", cache_pages=8)
        r = kv.ycsb("write-heavy", records=2000, ops=3000, seed=7, time_model="events")
        assert r["run_ops"] == 3000
        assert r["run_read_misses"] == 0
        assert r["time_model"] == "events"
        core = r["event_core"]
        assert core["booked"] > 0
        assert (core["late_arrivals"], core["unrecorded"], core["unfixed_comparisons"]) == (0, 0, 0)
        # The store goes on with calendars afterwards, and the default is the core.
        r = kv.ycsb("a", records=2000, ops=500, seed=8, load=False, time_model="calendar")
        assert r["run_read_misses"] == 0 and "event_core" not in r
        r = kv.ycsb("a", records=2000, ops=500, seed=9, load=False)
        assert r["run_read_misses"] == 0 and r["time_model"] == "events"
    with pytest.raises(ValueError, match="time_model `fast`"):
        csd.memory().kv().ycsb("a", time_model="fast")
