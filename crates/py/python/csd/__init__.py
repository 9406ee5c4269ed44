"""csd from Python: an emulated computational-storage SSD.

Devices (``create``, ``open``, ``memory``), fio-style workloads (``Device.io``),
tables and SQL through DataFusion with scans that run in the device
(``Device.load*``, ``Device.sql`` returning Arrow / pandas), the batch-io paper's
key-value store (``Device.kv``) with YCSB, and csd's plots (``plot_lines``).

A thin binding over the library calls the ``csd`` command makes (the crate
``crates/py``); see the README's "Python" section.

>>> import csd
>>> with csd.memory("tiny") as dev:
...     _ = dev.load_synthetic(columns=4, rows=1000)
...     int(dev.sql("SELECT COUNT(*) AS n FROM synthetic4").to_pandas()["n"][0])
1000
"""

from __future__ import annotations

from typing import Any, Iterable

from ._csd import (
    ConfigError,
    CsdError,
    Device,
    DeviceError,
    ImageError,
    KeyValue,
    KvError,
    Plot,
    Report,
    SqlError,
    SqlResult,
    __version__,
    create,
    device_config,
    memory,
    open,
    plot_lines,
    presets,
)

__all__ = [
    "ConfigError",
    "CsdError",
    "Device",
    "DeviceError",
    "ImageError",
    "KeyValue",
    "KvError",
    "Plot",
    "Report",
    "SqlError",
    "SqlResult",
    "__version__",
    "create",
    "device_config",
    "frame",
    "memory",
    "open",
    "plot_lines",
    "presets",
]


def frame(reports: Iterable[Report | dict[str, Any]], **columns: Iterable[Any]) -> Any:
    """Stack reports (``Report`` or dicts) into one pandas DataFrame, one row each.

    Keyword arguments add columns, e.g. the swept parameter:
    ``csd.frame(runs, rate_mt_s=[100, 200, 400])``.
    """
    import pandas as pd

    rows = [r.to_dict() if isinstance(r, Report) else dict(r) for r in reports]
    df = pd.DataFrame(rows)
    for name, values in columns.items():
        df.insert(0, name, list(values))
    return df
