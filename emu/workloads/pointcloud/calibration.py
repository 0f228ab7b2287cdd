"""The J5 calibration targets and the emulator's error on them: CenterPoint preprocessing
(`shared/calibration/j5.md`) and the CV sample's RPC round trips
(`shared/calibration/j5_cv.md`, `emu.workloads.cv_calibration`), fitted together.

The board measured CenterPoint preprocessing on nuScenes frames of 300,000 points; we have
synthetic nuScenes-like frames instead (`emu.workloads.lidar`), so the report states the
statistics of the frames used. The per-stage targets of scheme 2 were measured on one
frame; we compare them with the mean of each stage over the frame set, which does not
depend on which synthetic frame happens to play "the" frame.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from emu.errors import ConfigError
from emu.soc.config import load_config
from emu.workloads import cv_calibration
from emu.workloads.pointcloud import fitting, runner
from emu.workloads.pointcloud.fitting import FreeParameter, Target
from emu.workloads.pointcloud.params import CENTERPOINT

if TYPE_CHECKING:
    from emu.runtime.session import Session

FRAMES = 16
POINTS = 300_000
SEED = 0
SPREAD_TOLERANCE = 0.30
STAGE_TOLERANCE = 0.10



_STAGES = ("dsp2 dsp_stage1 (mean over frames)", "dsp2 cpu_voxelize (mean over frames)",
           "dsp2 dsp_stage2 (mean over frames)")

# Seven point-cloud targets, five independent: "dsp2 total" is the sum of the three stage
# means, and "dsp2 avg over 16 frames" is that same number again (the emulator predicts them
# equal; the board measured them in two runs). Then the six CV round trips.
POINTCLOUD_TARGETS = (
    Target(_STAGES[0], 5.604, "ms", STAGE_TOLERANCE,
           "seed 001: DSP stage 1 RPC round trip, one frame"),
    Target(_STAGES[1], 8.88, "ms", STAGE_TOLERANCE,
           "seed 001: CPU voxelisation, one frame"),
    Target(_STAGES[2], 1.982, "ms", STAGE_TOLERANCE,
           "seed 001: DSP stage 2 RPC round trip, one frame"),
    Target("dsp2 total (mean over frames)", 16.467, "ms", STAGE_TOLERANCE,
           "seed 001: total of the three stages, one frame", derived_from=_STAGES),
    Target("cpu avg over 16 frames", 119.374, "ms", STAGE_TOLERANCE,
           "seed 001: CPU reference, single thread, 16 frames"),
    Target("dsp2 avg over 16 frames", 16.126, "ms", STAGE_TOLERANCE,
           "seed 001: DSP scheme 2, single thread, 16 frames", derived_from=_STAGES),
    Target("cpu max/min over 16 frames", 206.633 / 57.109, "ratio", SPREAD_TOLERANCE,
           "seed 001: CPU reference max 206.633 ms / min 57.109 ms"),
)
TARGETS: tuple[Target, ...] = (*POINTCLOUD_TARGETS, *cv_calibration.TARGETS)
# Board figures predicted and reported beside the targets but not fitted (the reason is
# where each is defined).
CHECKS = cv_calibration.CHECKS


# The parameters a fit may free, each with the range the hardware makes plausible, written
# in the parameter's own unit, and why. Which of them are free is `FREE`, below.
CANDIDATES = {p.key: p for p in (
    FreeParameter(
        "cpu.cache_op_cycles", "2 cycles", "150 cycles",
        "one clean or invalidate by address per 64 B line (hbSysFlushMem): at least the two "
        "or so cycles of issuing it and looking up the tags; at most about one DDR round trip "
        "per line (~100 ns, 150 cycles at 1.5 GHz), as if the core overlapped none of them. "
        "Seen by the flushes inside both DSP stages (and, a little, CPU voxelisation)."),
    FreeParameter(
        "vdsp.rpc_submit_ps", "10 us", "1 ms",
        "hbDSPRpc until the DSP queue holds the task: a system call, an inter-processor "
        "interrupt and the DSP runtime's dispatcher take at least ~10 us; at most 1 ms, half "
        "the measured DSP stage 2 round trip (1.982 ms), which also holds the operator, the "
        "completion and the cache maintenance. Seen by both DSP stages."),
    FreeParameter(
        "vdsp.relay_hop_ps", "10 us", "200 us",
        "one message between the program and dsp_relay_server: a socket write, the server "
        "thread's wake-up and its read, at least ~10 us on an A55 under Linux; at most 200 "
        "us, as two of them (request and reply) must fit in the smallest CV round trip the "
        "board logged (threshold, 0.476 ms) with the operator and the kernel channel. Seen "
        "by every RPC: both DSP stages of the point cloud and every CV round trip."),
    FreeParameter(
        "vdsp.idma.bytes_per_cycle", "4 B/cycle", "64 B/cycle",
        "iDMA bytes per DSP cycle and channel between DDR and TCM: a 64-bit AXI port moves 8 "
        "B/cycle, a 512-bit one 64; at least half the narrowest. Seen by every tile the DSP "
        "stages and CV operators move."),
    FreeParameter(
        "ddr.latency_ps", "50 ns", "400 ns",
        "a demand load's DDR latency as the A55 sees it: the LPDDR4 array alone (tRCD + CL) "
        "is ~35-40 ns, so with controller and interconnect at least 50 ns; small in-order "
        "cores on LPDDR4 SoCs see ~100-250 ns, and 400 ns allows a busy controller. Seen by "
        "the CPU targets through every demand miss."),
    FreeParameter(
        "vdsp.fdiv_cycles", "2 cycles", "40 cycles",
        "a vector float32 division on the Vision P6, not pipelined: at least 2 cycles; an "
        "iterative divider making one or two quotient bits a cycle needs at most ~25-40 for "
        "a 24-bit mantissa. Seen by DSP stage 1's quantisation (divisions per point)."),
    FreeParameter(
        "cpu.fpcr_write_cycles", "2 cycles", "100 cycles",
        "a write of the FP control register (the reference's fesetround, once per element of "
        "its transpose): a system-register write the in-order A55 serialises, from a few "
        "cycles up to draining the pipeline and the store buffer (~100). The A55 guide gives "
        "no figure. Seen by the CPU reference's transpose, the largest part of `cpu avg`."),
    FreeParameter(
        "cpu.freq_hz", "1 GHz", "2 GHz",
        "the A55 cluster clock of a 16 nm automotive SoC: A55 clusters on such processes run "
        "at about 1.0-2.0 GHz. It scales every CPU cycle count at once, so the CPU targets "
        "see it exactly as they see the CPU model's own cycle counts."),
)}

# The free parameters of the fit (`tools/fit_j5.py`, `emu calibrate --cross-validate`): this
# one list. At most four, as the targets hold about eight independent numbers of which most
# see the same few mechanisms, and only parameters the targets tell apart: the fit prints
# the rank of its sensitivity matrix, and a parameter it cannot determine is not "fitted".
# Everything else keeps its preset value and source; a documented value is never free
# (cpu.fdiv_cycles: the A55 optimisation guide). Not free: vdsp.rpc_submit_ps and
# vdsp.rpc_return_ps, because every RPC pays them together with two relay hops, so the
# targets see only the sum (vdsp.relay_hop_ps stands for it); vdsp.fdiv_cycles (seen by DSP
# stage 1 alone; it keeps the value of the fit before the CV targets joined);
# vdsp.idma.bytes_per_cycle (tried free, with the input.jpg operators among the targets:
# it ran to its upper bound and lowered the fit's cost by 1 %); cpu.freq_hz, for the CPU
# model to decide.
FREE = ("cpu.cache_op_cycles", "ddr.latency_ps", "vdsp.relay_hop_ps", "cpu.fpcr_write_cycles")
FREE_PARAMETERS = tuple(CANDIDATES[key] for key in FREE)
FIT_SOURCE = ("calibrated: fitted by tools/fit_j5.py to shared/calibration/j5.md "
              "(CenterPoint, 16 synthetic frames, seed 0) and shared/calibration/j5_cv.md "
              "(pyrUp, resize and rotate round trips)")


IMPLS = ("cpu", "dsp2")  # the implementations the point-cloud targets time


def frames(count: int = FRAMES, seed: int = SEED) -> list[runner.Frame]:
    return runner.synthetic(CENTERPOINT, count, seed, POINTS)


def traced_run(preset: str = "j5", overrides: Sequence[str] = (),
               config_file: str | None = None) -> list[tuple[str, Session]]:
    """The first calibration frame through each implementation the targets time, each in a
    fresh session recording its timeline, as (implementation, session) pairs: what `emu
    calibrate --trace` writes. Each implementation's first frame runs in a fresh session in
    `predict` too, so these timelines are the ones its first frames had."""
    _, sessions = runner.run("centerpoint", list(IMPLS), frames(1), preset=preset,
                             config_file=config_file, overrides=overrides, trace=True)
    return list(zip(IMPLS, sessions, strict=True))


def predict(frame_set: Sequence[runner.Frame], preset: str = "j5",
            overrides: Sequence[str] = (), config_file: str | None = None,
            progress: Callable[[int, int, str], None] | None = None,
            ) -> tuple[dict[str, float], dict[str, Any]]:
    """The emulator's value for every target, and the report it came from."""
    report, _ = runner.run("centerpoint", list(IMPLS), list(frame_set), preset=preset,
                           config_file=config_file, overrides=overrides, progress=progress)
    rows = report["frames"]

    def mean_stage(stage: str) -> float:
        return float(np.mean([r["impls"]["dsp2"]["stages"][stage] for r in rows]))

    cpu = report["summary"]["cpu"]
    values = [mean_stage("dsp_stage1"), mean_stage("cpu_voxelize"), mean_stage("dsp_stage2"),
              float(np.mean([r["impls"]["dsp2"]["total_ms"] for r in rows])),
              cpu["avg_ms"], report["summary"]["dsp2"]["avg_ms"],
              cpu["max_ms"] / cpu["min_ms"]]
    cv, cv_reports = cv_calibration.predict(preset, overrides, config_file)
    predicted = {t.name: v for t, v in zip(POINTCLOUD_TARGETS, values, strict=True)}
    return {**predicted, **cv}, {**report, "cv_operators": cv_reports}


def errors(predicted: dict[str, float]) -> dict[str, float]:
    """Relative error of each target and check (predicted / measured - 1)."""
    return {t.name: predicted[t.name] / t.measured - 1.0 for t in (*TARGETS, *CHECKS)}


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
    return _report(preset, predicted, report)


def _report(preset: str, predicted: dict[str, float], report: dict[str, Any]) -> dict[str, Any]:
    err = errors(predicted)
    return {
        "preset": preset,
        "targets": [{"target": t.name, "measured": t.measured, "predicted":
                     round(predicted[t.name], 4), "unit": t.unit,
                     "error": round(err[t.name], 4), "tolerance": t.tolerance,
                     "within": abs(err[t.name]) <= t.tolerance, "source": t.source,
                     "fitted": t in TARGETS}
                    for t in (*TARGETS, *CHECKS)],
        "frame_statistics": frame_statistics(report),
    }


@dataclass
class FitRun:
    """A fit of `FREE_PARAMETERS` to `TARGETS` and what came of it."""

    problem: fitting.Problem
    result: fitting.FitResult
    determination: fitting.Determination
    folds: list[fitting.Fold] | None
    document: dict[str, Any]  # `fitting.fit_document`, plus the preset's stale labels
    start: tuple[dict[str, float], dict[str, Any]]  # predictions and run report at the start


def run_fit(preset: str = "j5", overrides: Sequence[str] = (),
            config_file: str | None = None, *, cross_validate: bool = False,
            max_iterations: int = 8, max_evaluations: int = 60,
            progress: Callable[[int, int, str], None] | None = None,
            log: Callable[[str], None] | None = None) -> FitRun:
    """Fit the free parameters, starting from the resolved configuration's values, and with
    `cross_validate` leave each target out in turn (`fitting.cross_validate`). Nothing is
    written. `progress(done, total, what)` counts the frames of every evaluation; `log` gets
    one line per evaluation and per fit iteration."""
    frame_set = frames()
    bounds = fitting.resolve(FREE_PARAMETERS)
    resolved = load_config(preset, config_file, overrides)
    for b in bounds:
        if resolved.sources[b.key].startswith("documented"):
            raise ConfigError(f"free parameter {b.key}: the value is documented "
                              f"({resolved.sources[b.key]}); a documented value is not fitted")
    current = {info.key: value for info, value, _ in resolved.leaves()}
    start = {b.key: float(current[b.key]) for b in bounds}
    expected = 1 + len(bounds) + (len(TARGETS) if cross_validate else 0)
    state: dict[str, Any] = {"index": 0, "why": "", "first": None}

    def on_evaluation(index: int, why: str) -> None:
        state["index"], state["why"] = index, why
        if log is not None:
            log(f"evaluation {index + 1}: {why}")

    def inner(done: int, total: int, what: str) -> None:
        if progress is not None:
            runs = max(expected, state["index"] + 1)
            progress(state["index"] * total + done, runs * total, f"{state['why']}: {what}")

    def model(values: Mapping[str, float]) -> Mapping[str, float]:
        extra = [f"{key}={value!r}" for key, value in values.items()]
        predicted, report = predict(frame_set, preset, [*overrides, *extra], config_file,
                                    inner if progress is not None else None)
        if state["first"] is None:
            state["first"] = (predicted, report)
        return predicted

    problem = fitting.Problem(bounds, TARGETS, model, start, on_evaluation)
    result = fitting.fit(problem, max_iterations, max_evaluations, log)
    det = fitting.determination(problem, result.sensitivity)
    folds = fitting.cross_validate(problem, result) if cross_validate else None
    if problem.outside:  # the fit started from clipped values: run the configuration as is
        state["first"] = predict(frame_set, preset, overrides, config_file)
    doc = fitting.fit_document(problem, result, det, folds)
    free = {b.key for b in bounds}
    doc["labelled_fitted_but_not_free"] = sorted(
        key for key, source in resolved.sources.items()
        if source.startswith("calibrated: fitted") and key not in free)
    return FitRun(problem, result, det, folds, doc, state["first"])


def labels_to_write(problem: fitting.Problem, result: fitting.FitResult,
                    det: fitting.Determination, source: str = FIT_SOURCE) -> dict[str, str]:
    """The parameters a fit may write to the preset, with their new source: those it moved
    (as the preset writes them) and the targets determine, noted as poorly determined where
    the targets pin them only loosely. One the fit did not move keeps its value and source
    (it was not fitted); one the targets do not determine at all is not written either
    (where the fit left it says nothing about the board)."""
    out = {}
    for key in result.moved(problem):
        spread = det.spread[key]
        if math.isinf(spread):
            continue
        note = f"; poorly determined by the targets (x/÷ {spread:.1f})" \
            if key in det.poorly_determined else ""
        out[key] = source + note
    return out


def cross_validation_report(preset: str = "j5", overrides: Sequence[str] = (),
                            config_file: str | None = None,
                            progress: Callable[[int, int, str], None] | None = None,
                            ) -> dict[str, Any]:
    """`calibration_report`, plus the fit from the configuration's values (not written
    anywhere) and its leave-one-out cross-validation."""
    run = run_fit(preset, overrides, config_file, cross_validate=True, progress=progress)
    predicted, report = run.start
    doc = dict(run.document)
    folds = doc.pop("cross_validation")
    return {**_report(preset, predicted, report), "fit": doc, "cross_validation": folds}
