"""ruff and mypy, as configured in pyproject.toml, are clean (both come with the test extras)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_is_clean():
    folders = ["emu", "tests", "benchmarks", "tools", "examples"]
    done = subprocess.run([sys.executable, "-m", "ruff", "check", *folders],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_is_clean():
    done = subprocess.run([sys.executable, "-m", "mypy"], capture_output=True, text=True,
                          cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
