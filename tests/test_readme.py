"""The README's Python examples run as written."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_the_readme_has_its_examples():
    assert len(BLOCKS) >= 3
    assert any("s.spawn(" in block and "s.run()" in block for block in BLOCKS)


def test_the_first_example_runs_a_model_in_at_most_ten_lines():
    lines = BLOCKS[0].splitlines()
    load = next(k for k, line in enumerate(lines) if "emu.dnn.Model(" in line)
    latency = next(k for k, line in enumerate(lines) if "print(" in line and "latency" in line)
    assert 0 <= latency - load < 10


@pytest.fixture(scope="module")
def run_block(tmp_path_factory):
    """run_block(k): README block k run as written, in a folder of its own, and that folder.
    Each block runs once for the module: the two-thread example's run is read by the test
    that runs every block and by its own test, which would otherwise run it twice."""
    done = {}

    def run(k):
        if k not in done:
            folder = tmp_path_factory.mktemp(f"block{k}")
            done[k] = subprocess.run([sys.executable, "-c", BLOCKS[k]], capture_output=True,
                                     text=True, cwd=folder, check=False), folder
        return done[k]
    return run


@pytest.mark.parametrize("k", range(len(BLOCKS)), ids=[f"block{k}" for k in range(len(BLOCKS))])
def test_readme_example_runs(k, run_block):
    done, _ = run_block(k)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


def test_the_two_thread_example_shows_priority_on_a_shared_core(run_block):
    done, folder = run_block(next(k for k, b in enumerate(BLOCKS) if "s.spawn(" in b))
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("priority")]
    assert len(lines) == 8
    latency = {int(p): [] for p in ("255", "0")}
    for line in lines:
        priority, ms = re.match(r"priority\s+(\d+) frame \d: ([\d.]+) ms", line).groups()
        latency[int(priority)].append(float(ms))
    # The urgent thread overtakes the background one at tile boundaries: its latency stays
    # near its own run time, far below the background operator's.
    assert max(latency[255]) <= 1.5 * min(latency[255])
    assert max(latency[255]) < 0.5 * min(latency[0])
    assert (folder / "threads.json").stat().st_size > 0


def test_every_repository_path_the_readme_names_exists_and_none_lies_outside():
    """A reader of the README has the repository and nothing else: every `emu/`, `tests/`,
    `tools/`, `benchmarks/`, `examples/` or `docs/` path it names exists, and it names no
    file beside or above the repository (`../`, the project's shared material)."""
    text = README.read_text()
    assert "../" not in text and "shared/" not in text
    root = README.parent
    named = set(re.findall(r"`((?:emu|tests|tools|benchmarks|examples|docs)/[\w./-]+?)"
                           r"(?:::[\w\[\]-]+)?`", text))
    missing = sorted(p for p in named if not (root / p.rstrip("/")).exists())
    assert named and not missing, missing
