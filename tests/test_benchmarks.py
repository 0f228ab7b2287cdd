"""The benchmarks, runnable through pytest on request (`pytest -m benchmark -s`).

They print figures and assert nothing about speed; this only checks that each one runs.
"""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.benchmark
@pytest.mark.parametrize("name", sorted(p.stem.removeprefix("bench_")
                                        for p in (ROOT / "benchmarks").glob("bench_*.py")))
def test_benchmark_runs(name):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), name],
                          capture_output=True, text=True, cwd=ROOT)
    print(done.stdout)
    assert done.returncode == 0, done.stderr
