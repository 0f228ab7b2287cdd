"""Shared helpers of the sweep tests: writing a spec file."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def write_spec(tmp_path: Path):
    def write(text: str, name: str = "spec.toml") -> Path:
        path = tmp_path / name
        path.write_text(text, "utf-8")
        return path
    return write
