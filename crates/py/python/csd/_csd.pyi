"""Type stubs of the extension module ``csd._csd`` (built from crates/py)."""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping

import pandas
import pyarrow

__version__: str

class CsdError(Exception):
    """Base class of every error csd raises."""

class ConfigError(CsdError):
    """A device config csd refused (an unknown preset, a bad field or value)."""

class ImageError(CsdError):
    """An image that could not be opened or closed (missing, locked, damaged)."""

class SqlError(CsdError):
    """A SQL statement, table or file csd or DataFusion refused."""

class KvError(CsdError):
    """An error of the key-value store."""

class DeviceError(CsdError):
    """A device operation that failed (a workload, a closed device)."""

_Path = str | os.PathLike[str]
_Key = bytes | bytearray | str

class Report:
    """One run's figures (a workload, a load, a YCSB run)."""

    @property
    def kind(self) -> str: ...
    def to_dict(self) -> dict[str, Any]: ...
    def to_pandas(self) -> pandas.DataFrame: ...
    def keys(self) -> list[str]: ...
    def __getitem__(self, key: str) -> Any: ...
    def __contains__(self, key: str) -> bool: ...
    def __len__(self) -> int: ...
    def _repr_html_(self) -> str: ...

class SqlResult:
    """One statement's result: Arrow data, the scans' modeled reports, the plan."""

    @property
    def query(self) -> str: ...
    @property
    def strategy(self) -> str: ...
    def to_arrow(self) -> pyarrow.Table: ...
    def to_pandas(self) -> pandas.DataFrame: ...
    @property
    def reports(self) -> list[dict[str, Any]]: ...
    def reports_frame(self) -> pandas.DataFrame: ...
    @property
    def explain(self) -> str: ...
    @property
    def wall_s(self) -> float: ...
    @property
    def dml(self) -> str | None: ...
    @property
    def array(self) -> dict[str, Any] | None: ...
    def __len__(self) -> int: ...
    def _repr_html_(self) -> str: ...

class KeyValue:
    """The batch-io paper's key-value store on a device."""

    @property
    def interface(self) -> str: ...
    def get(self, key: _Key) -> bytes | None: ...
    def put(self, key: _Key, value: _Key) -> None: ...
    def delete(self, key: _Key) -> bool: ...
    def scan(self, start: _Key | None = None, limit: int = 100) -> list[tuple[bytes, bytes]]: ...
    def put_batch(self, pairs: Mapping[_Key, _Key] | Iterable[tuple[_Key, _Key]]) -> int: ...
    def sync(self) -> float: ...
    def stats(self) -> dict[str, int]: ...
    def ycsb(
        self,
        workload: str = "a",
        *,
        records: int = 10_000,
        ops: int = 10_000,
        dist: str = "zipfian",
        seed: int = 1,
        load: bool = True,
        time_model: str = "events",
    ) -> Report: ...
    def __len__(self) -> int: ...
    def __contains__(self, key: _Key) -> bool: ...

class Plot:
    """The PNG and SVG files of a chart."""

    @property
    def png(self) -> str: ...
    @property
    def svg(self) -> str: ...
    def _repr_svg_(self) -> str: ...

class Device:
    """One device, in memory or on an image file; a context manager."""

    @property
    def name(self) -> str: ...
    @property
    def image(self) -> str | None: ...
    @property
    def read_only(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    def config(self) -> dict[str, Any]: ...
    def info(self) -> dict[str, Any]: ...
    def smart(self) -> dict[str, Any]: ...
    def io(
        self,
        rw: str = "randread",
        *,
        bs: int = 4096,
        iodepth: int = 32,
        ops: int | None = None,
        runtime_s: float | None = None,
        size: int | None = None,
        rwmixread: int = 70,
        seed: int = 1,
        dist: str = "uniform",
        batch: int = 0,
        precondition: bool = False,
        time_model: str = "events",
    ) -> Report: ...
    def load_tpch(self, sf: float = 0.01, tables: str = "lineitem", *, layout: str = "pax") -> list[Report]: ...
    def load_synthetic(
        self,
        columns: int = 16,
        rows: int = 100_000,
        *,
        seed: int = 1,
        name: str | None = None,
        layout: str = "pax",
    ) -> Report: ...
    def load(
        self,
        table: str,
        data: pyarrow.Table | pyarrow.RecordBatch | pyarrow.RecordBatchReader | pandas.DataFrame | _Path,
        *,
        layout: str = "pax",
        float_scale: int | None = None,
        header: bool = True,
        delimiter: str = ",",
    ) -> Report: ...
    def tables(self) -> list[dict[str, Any]]: ...
    def sql(
        self,
        query: str,
        *,
        strategy: str = "auto",
        aggregate_pushdown: bool = True,
        use_index: bool = True,
        queue_depth: int = 32,
        time_model: str = "events",
    ) -> SqlResult: ...
    def kv(self, interface: str = "batch", *, cache_pages: int | None = None, queue_depth: int = 64) -> KeyValue: ...
    def close(self) -> None: ...
    def __enter__(self) -> Device: ...
    def __exit__(self, *exc: object) -> bool: ...

def create(
    path: _Path,
    preset: str | None = None,
    *,
    config: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    op: float = 0.07,
    ext_bytes: int = 0,
) -> Device: ...
def open(path: _Path, *, read_only: bool = False) -> Device: ...
def memory(
    preset: str | None = None,
    *,
    config: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    op: float = 0.07,
    ext_bytes: int = 0,
) -> Device: ...
def presets() -> list[str]: ...
def device_config(
    preset: str | None = None,
    *,
    config: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]: ...
def plot_lines(
    dir: _Path,
    stem: str,
    series: Mapping[str, Iterable[tuple[float, float]]],
    *,
    title: str = "",
    x_label: str = "x",
    y_label: str = "y",
    log_x: bool = False,
    log_y: bool = False,
) -> Plot: ...
def raw_io(
    path: _Path | None = None,
    preset: str | None = None,
    *,
    config: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    rw: str = "randread",
    bs: int = 4096,
    iodepth: int = 32,
    ops: int | None = None,
    runtime_s: float | None = None,
    size: int | None = None,
    rwmixread: int = 70,
    seed: int = 1,
    dist: str = "uniform",
    precondition: bool = False,
    force: bool = False,
    time_model: str = "events",
) -> Report: ...

class Array:
    """An array of devices in a directory (``csd array``): tables striped over them."""

    @property
    def dir(self) -> str: ...
    @property
    def devices(self) -> int: ...
    def manifest(self) -> dict[str, Any]: ...
    def tables(self) -> list[dict[str, Any]]: ...
    def load_tpch(
        self, sf: float = 0.01, tables: str = "lineitem", *, layout: str = "pax", stripe_pages: int = 1
    ) -> list[Report]: ...
    def load_synthetic(
        self,
        columns: int = 16,
        rows: int = 100_000,
        *,
        seed: int = 1,
        name: str | None = None,
        layout: str = "pax",
        stripe_pages: int = 1,
    ) -> Report: ...
    def load(
        self,
        table: str,
        data: Any,
        *,
        layout: str = "pax",
        stripe_pages: int = 1,
        float_scale: int | None = None,
        header: bool = True,
        delimiter: str = ",",
    ) -> Report: ...
    def sql(
        self,
        query: str,
        *,
        strategy: str = "auto",
        threads: int | None = None,
        aggregate_pushdown: bool = True,
        use_index: bool = True,
        queue_depth: int = 32,
        time_model: str = "events",
    ) -> SqlResult: ...
    def close(self) -> None: ...
    def __enter__(self) -> Array: ...
    def __exit__(self, *exc: object) -> bool: ...

def create_array(
    dir: _Path,
    devices: int,
    preset: str | None = None,
    *,
    config: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    op: float = 0.07,
) -> Array: ...
def open_array(dir: _Path) -> Array: ...
def run_repro(args: list[str]) -> None: ...
