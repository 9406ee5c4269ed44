"""Shared fixtures of the csd Python tests (run by .ci/run: `pytest crates/py/tests`)."""

from __future__ import annotations

from pathlib import Path

import pytest

import csd


@pytest.fixture
def image(tmp_path: Path) -> Path:
    """A fresh image file of the `tiny` preset, created and closed."""
    path = tmp_path / "dev.img"
    csd.create(path, "tiny").close()
    return path
