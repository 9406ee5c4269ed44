#!/usr/bin/env python3
"""Sweep one device parameter from Python: the flash channel rate.

For each channel rate (MT/s) an in-memory device of the chosen preset runs the same
fio-style sequential-read workload; the reports become one pandas DataFrame and a
line chart (PNG + SVG) of modeled bandwidth against the rate, with the scan paper's
analytic bound for comparison left to `csd model scan`.

    python3 examples/sweep_channel_rate.py --out /tmp/sweep --ops 2000

Needs the `csd` package: `pip install ./crates/py` (see README, "Python").
"""

from __future__ import annotations

import argparse
from pathlib import Path

import csd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny", help="device preset (default: tiny)")
    ap.add_argument("--rates", default="25,50,100,200,400,800", help="channel rates, MT/s")
    ap.add_argument("--ops", type=int, default=4000, help="operations per run")
    ap.add_argument("--out", type=Path, default=Path("sweep-out"), help="directory for the plot")
    a = ap.parse_args()

    rates = [int(r) for r in a.rates.split(",")]
    reports = []
    for rate in rates:
        with csd.memory(a.preset, overrides={"channel.rate_mt_s": rate}) as dev:
            # Write the region first: an unwritten LBA reads as zeros without flash reads.
            region = 32 << 20
            dev.io("write", bs=128 * 1024, iodepth=64, size=region, ops=region // (128 * 1024))
            reports.append(dev.io("read", bs=128 * 1024, iodepth=64, size=region, ops=a.ops, seed=1))
    df = csd.frame(reports, channel_rate_mt_s=rates)
    cols = ["channel_rate_mt_s", "bandwidth_mb_s", "iops", "latency_p99_us", "bottleneck", "energy_j"]
    print(df[cols].to_string(index=False))

    plot = csd.plot_lines(
        a.out,
        "channel-rate-sweep",
        {f"{a.preset} seq. read 128 KiB QD64": list(zip(df.channel_rate_mt_s, df.bandwidth_mb_s))},
        title=f"{a.preset}: modeled read bandwidth vs. channel rate",
        x_label="channel rate (MT/s)",
        y_label="bandwidth (MB/s)",
        log_x=True,
    )
    print(f"plot: {plot.png} {plot.svg}")
    # More channel bandwidth never reads slower, until another resource is the bottleneck.
    assert all(b >= a_ * 0.99 for a_, b in zip(df.bandwidth_mb_s, df.bandwidth_mb_s[1:]))


if __name__ == "__main__":
    main()
