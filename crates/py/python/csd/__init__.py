"""csd from Python: an emulated computational-storage SSD.

Devices (``create``, ``open``, ``memory``), fio-style workloads (``Device.io``,
``raw_io`` on the raw flash array), arrays of devices (``create_array``, ``open_array``),
tables and SQL through DataFusion with scans that run in the device
(``Device.load*``, ``Device.sql`` returning Arrow / pandas), the batch-io paper's
key-value store (``Device.kv``) with YCSB, the papers' reproductions (``repro``,
``repro_all``) and csd's plots (``plot_lines``).

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
    Array,
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
    create_array,
    device_config,
    memory,
    open,
    open_array,
    plot_lines,
    presets,
    raw_io,
)
from .repro import REPRODUCTIONS, ReproResult, repro, repro_all

__all__ = [
    "REPRODUCTIONS",
    "Array",
    "ConfigError",
    "CsdError",
    "Device",
    "DeviceError",
    "ImageError",
    "KeyValue",
    "KvError",
    "Plot",
    "Report",
    "ReproResult",
    "SqlError",
    "SqlResult",
    "__version__",
    "create",
    "create_array",
    "device_config",
    "frame",
    "memory",
    "open",
    "open_array",
    "plot_lines",
    "presets",
    "raw_io",
    "repro",
    "repro_all",
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
