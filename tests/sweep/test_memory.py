"""A long in-process sweep keeps its memory flat (issue 28): closed sessions are freed."""

from __future__ import annotations

import gc

import pytest

import emu.sweep


def _resident_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096 / 2**20


@pytest.mark.slow  # 24 perception scenarios: about 25 s
def test_a_24_point_perception_sweep_ends_within_a_tenth_of_its_first_points_memory():
    spec = {"scenario": {"command": "scenario perception", "args": ["--seconds", "0.1"],
                         "metrics": {"seed": "results.params.seed"}},
            "axes": {"mode": "grid",
                     "vdsp.freq_hz": ["400MHz", "500MHz", "600MHz", "700MHz", "800MHz",
                                      "900MHz"],
                     "bpu.cores": [1, 2], "--seed": [0, 1]}}
    after: list[float] = []

    def progress(done: int, total: int, what: str) -> None:
        if done:
            gc.collect()
            after.append(_resident_mib())

    rows = emu.sweep.run(spec, workers=0, progress=progress)
    assert [r["status"] for r in rows] == ["ok"] * 24 and len(after) == 24
    assert after[-1] <= 1.1 * after[0], after
