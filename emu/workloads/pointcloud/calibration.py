"""The J5 calibration targets (`shared/calibration/j5.md`) and the emulator's error on them.

The board measured CenterPoint preprocessing on nuScenes frames of 300,000 points; we have
synthetic nuScenes-like frames instead (`emu.workloads.lidar`), so the report states the
statistics of the frames used. The per-stage targets of scheme 2 were measured on one
frame; we compare them with the mean of each stage over the frame set, which does not
depend on which synthetic frame happens to play "the" frame.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from emu.workloads.pointcloud import runner
from emu.workloads.pointcloud.params import CENTERPOINT

FRAMES = 16
POINTS = 300_000
SEED = 0
SPREAD_TOLERANCE = 0.30
STAGE_TOLERANCE = 0.10


@dataclass(frozen=True)
class Target:
    name: str
    measured: float
    unit: str
    tolerance: float
    source: str


TARGETS = (
    Target("dsp2 dsp_stage1 (mean over frames)", 5.604, "ms", STAGE_TOLERANCE,
           "seed 001: DSP stage 1 RPC round trip, one frame"),
    Target("dsp2 cpu_voxelize (mean over frames)", 8.88, "ms", STAGE_TOLERANCE,
           "seed 001: CPU voxelisation, one frame"),
    Target("dsp2 dsp_stage2 (mean over frames)", 1.982, "ms", STAGE_TOLERANCE,
           "seed 001: DSP stage 2 RPC round trip, one frame"),
    Target("dsp2 total (mean over frames)", 16.467, "ms", STAGE_TOLERANCE,
           "seed 001: total of the three stages, one frame"),
    Target("cpu avg over 16 frames", 119.374, "ms", STAGE_TOLERANCE,
           "seed 001: CPU reference, single thread, 16 frames"),
    Target("dsp2 avg over 16 frames", 16.126, "ms", STAGE_TOLERANCE,
           "seed 001: DSP scheme 2, single thread, 16 frames"),
    Target("cpu max/min over 16 frames", 206.633 / 57.109, "ratio", SPREAD_TOLERANCE,
           "seed 001: CPU reference max 206.633 ms / min 57.109 ms"),
)


def frames(count: int = FRAMES, seed: int = SEED) -> list[runner.Frame]:
    return runner.synthetic(CENTERPOINT, count, seed, POINTS)


def predict(frame_set: Sequence[runner.Frame], preset: str = "j5",
            overrides: Sequence[str] = (), config_file: str | None = None,
            progress: Callable[[int, int, str], None] | None = None,
            ) -> tuple[dict[str, float], dict[str, Any]]:
    """The emulator's value for every target, and the report it came from."""
    report, _ = runner.run("centerpoint", ["cpu", "dsp2"], list(frame_set), preset=preset,
                           config_file=config_file, overrides=overrides, progress=progress)
    rows = report["frames"]

    def mean_stage(stage: str) -> float:
        return float(np.mean([r["impls"]["dsp2"]["stages"][stage] for r in rows]))

    cpu = report["summary"]["cpu"]
    values = [mean_stage("dsp_stage1"), mean_stage("cpu_voxelize"), mean_stage("dsp_stage2"),
              float(np.mean([r["impls"]["dsp2"]["total_ms"] for r in rows])),
              cpu["avg_ms"], report["summary"]["dsp2"]["avg_ms"],
              cpu["max_ms"] / cpu["min_ms"]]
    return {t.name: v for t, v in zip(TARGETS, values, strict=True)}, report


def errors(predicted: dict[str, float]) -> dict[str, float]:
    """Relative error of each target (predicted / measured - 1)."""
    return {t.name: predicted[t.name] / t.measured - 1.0 for t in TARGETS}


def frame_statistics(report: dict[str, Any]) -> dict[str, Any]:
    rows = report["frames"]
    valid = np.array([r["points_valid"] for r in rows])
    kept = np.array([r["points_kept"] for r in rows])
    pillars = np.array([r["pillars"] for r in rows])
    return {
        "frames": len(rows),
        "points_per_frame": int(rows[0]["points_read"]),
        "valid_points": {"min": int(valid.min()), "mean": float(valid.mean().round(1)),
                         "max": int(valid.max())},
        "pillars": {"min": int(pillars.min()), "mean": float(pillars.mean().round(1)),
                    "max": int(pillars.max())},
        "kept_points_per_pillar": float((kept / pillars).mean().round(2)),
    }


def calibration_report(preset: str = "j5", overrides: Sequence[str] = (),
                       config_file: str | None = None,
                       progress: Callable[[int, int, str], None] | None = None,
                       ) -> dict[str, Any]:
    predicted, report = predict(frames(), preset, overrides, config_file, progress)
    err = errors(predicted)
    return {
        "preset": preset,
        "targets": [{"target": t.name, "measured": t.measured, "predicted":
                     round(predicted[t.name], 4), "unit": t.unit,
                     "error": round(err[t.name], 4), "tolerance": t.tolerance,
                     "within": abs(err[t.name]) <= t.tolerance, "source": t.source}
                    for t in TARGETS],
        "frame_statistics": frame_statistics(report),
    }
