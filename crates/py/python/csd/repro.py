"""The papers' reproductions from Python (``csd repro ...``).

``repro(name, out, **options)`` runs one reproduction through csd-repro (the library
``csd repro`` calls), with the options of ``csd repro NAME --help`` as keyword
arguments (``scale=0.001`` is ``--scale 0.001``; ``True`` is a bare flag). It returns a
``ReproResult``: the report's markdown, its tables as pandas DataFrames, and the paths
of its plots. ``repro_all(out, ...)`` runs every reproduction into ``out/NAME``. In
Jupyter a result shows its tables and plots (``_repr_html_``) or its first plot
(``_repr_svg_``).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._csd import run_repro

#: The reproductions, by their ``csd repro`` names.
REPRODUCTIONS = ("scan-paper", "smart-ssd", "fd-tree", "batch-io", "flixr")


def _argv(name: str, out: Path, options: dict[str, Any]) -> list[str]:
    if name not in REPRODUCTIONS:
        raise ValueError(f"reproduction `{name}`: use one of {', '.join(REPRODUCTIONS)}")
    args = [name, "--out", str(out)]
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value is False or value is None:
            continue
        else:
            args += [flag, str(value)]
    return args


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def markdown_tables(text: str) -> list[tuple[str, Any]]:
    """The pipe tables of a markdown text as ``(title, DataFrame)``: the title is the
    nearest heading above the table. Cells that read as numbers become numbers."""
    import pandas as pd

    lines = text.splitlines()
    tables: list[tuple[str, Any]] = []
    title = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            title = line.lstrip("#").strip()
        if (
            line.lstrip().startswith("|")
            and i + 1 < len(lines)
            and re.fullmatch(r"\s*\|?(\s*:?-{3,}:?\s*\|)+\s*:?-*:?\s*\|?\s*", lines[i + 1])
        ):
            header = _cells(line)
            rows = []
            i += 2
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                cells = _cells(lines[i])
                rows.append((cells + [""] * len(header))[: len(header)])
                i += 1
            df = pd.DataFrame(rows, columns=header)
            for c in df.columns:
                converted = pd.to_numeric(df[c].str.replace(",", "", regex=False), errors="coerce")
                if converted.notna().all():
                    df[c] = converted
            tables.append((title, df))
            continue
        i += 1
    return tables


@dataclass
class ReproResult:
    """One reproduction's outputs: its report, tables and plots."""

    #: The reproduction's name (``scan-paper`` ...).
    name: str
    #: The directory it wrote into.
    out: Path
    #: The markdown report (``report.md``).
    report: str
    #: The report's tables as ``(title, DataFrame)``, in order.
    tables: list[tuple[str, Any]] = field(default_factory=list)
    #: The plots it wrote (SVG), sorted by name; each has a PNG beside it.
    plots: list[Path] = field(default_factory=list)

    @classmethod
    def read(cls, name: str, out: Path) -> ReproResult:
        """The outputs a reproduction wrote into ``out``."""
        report_path = out / "report.md"
        if not report_path.is_file():
            raise FileNotFoundError(f"{report_path}: the reproduction wrote no report")
        text = report_path.read_text()
        return cls(
            name=name,
            out=out,
            report=text,
            tables=markdown_tables(text),
            plots=sorted(out.glob("*.svg")),
        )

    @property
    def pngs(self) -> list[Path]:
        """The PNG files of the plots."""
        return sorted(self.out.glob("*.png"))

    def table(self, title: str) -> Any:
        """The first table whose title contains ``title`` (case-insensitive)."""
        for t, df in self.tables:
            if title.lower() in t.lower():
                return df
        raise KeyError(f"no table titled like `{title}` in {self.out / 'report.md'}")

    def __repr__(self) -> str:
        return (
            f"csd.ReproResult({self.name}: {len(self.tables)} tables, "
            f"{len(self.plots)} plots in {self.out})"
        )

    def _repr_svg_(self) -> str | None:
        return self.plots[0].read_text() if self.plots else None

    def _repr_html_(self) -> str:
        parts = [f"<div><h3>csd repro {html.escape(self.name)}</h3>"]
        for title, df in self.tables:
            parts.append(f"<h4>{html.escape(title)}</h4>")
            parts.append(df.to_html(index=False))
        for p in self.plots:
            parts.append(f"<div>{p.read_text()}</div>")
        parts.append("</div>")
        return "".join(parts)


def repro(name: str, out: str | Path, **options: Any) -> ReproResult:
    """Runs the reproduction ``name`` (one of ``REPRODUCTIONS``) into ``out`` with the
    options of ``csd repro NAME --help`` as keyword arguments, and returns its outputs.
    Options csd does not know raise ``ValueError`` with its usage text; a failed run
    raises ``csd.DeviceError``; Ctrl-C raises ``KeyboardInterrupt``."""
    out = Path(out)
    run_repro(_argv(name, out, options))
    return ReproResult.read(name, out)


def repro_all(out: str | Path, **options: dict[str, Any]) -> dict[str, ReproResult]:
    """Runs every reproduction into ``out/NAME``. ``options`` maps a reproduction's
    name (with ``_`` for ``-``: ``scan_paper``) to its keyword options."""
    out = Path(out)
    unknown = set(options) - {n.replace("-", "_") for n in REPRODUCTIONS}
    if unknown:
        raise ValueError(f"no reproduction named {', '.join(sorted(unknown))}")
    return {
        name: repro(name, out / name, **options.get(name.replace("-", "_"), {}))
        for name in REPRODUCTIONS
    }
