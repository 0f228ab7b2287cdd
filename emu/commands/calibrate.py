"""`emu calibrate`: predicted against measured J5 timings and the error
(`emu.workloads.pointcloud.calibration`, `emu.workloads.bpu_calibration`)."""

from __future__ import annotations

import argparse
from typing import Any

from emu.commands import Command, Outcome, Progress, register, trace_path, write_trace
from emu.commands.report import Report
from emu.options import Option

CALIBRATION_SEED = 0  # the calibration frames' seed

OPTIONS = (
    Option("cross_validate", bool, False,
           "also fit the free parameters (FREE in emu/workloads/pointcloud/calibration.py; "
           "nothing is written) from the chosen hardware's values, then leave each target out "
           "in turn, refit the rest and predict it: prints the fit's sensitivity matrix, its "
           "rank and conditioning, and each target's fit error beside its left-out prediction "
           "error (about a dozen runs of the targets: several minutes)"),
)

REPORTS = ("targets.*.*", "frame_statistics.*", "bpu_targets.*.*", "fit.**",
           "cross_validation.**")


def work(resolved: Any, args: argparse.Namespace, progress: Progress | None) -> Outcome:
    from emu.workloads import bpu_calibration
    from emu.workloads.pointcloud import calibration

    trace = trace_path(args)  # a bad --trace path stops the run before any work
    run = calibration.cross_validation_report if args.cross_validate \
        else calibration.calibration_report
    results = run(args.preset, args.overrides, args.config, progress)
    results["bpu_targets"] = bpu_calibration.report(resolved.soc)
    if trace is not None:
        traced = calibration.traced_run(args.preset, args.overrides, args.config)
        write_trace(trace, [(impl, sess.soc.recorder.recording) for impl, sess in traced],
                    {"preset": args.preset, "model": "centerpoint",
                     "frame": "synthetic-0 of the calibration frames"})
    return Outcome(results, CALIBRATION_SEED)


def text(report: Report) -> str:
    from emu.report.document import provenance_line
    from emu.report.table import render

    assert report.provenance is not None
    rows = [(t["target"] + ("" if t["fitted"] else " (not fitted)"), t["measured"],
             t["predicted"], t["unit"], f"{t['error']:+.1%}", f"{t['tolerance']:.0%}",
             "yes" if t["within"] else "NO") for t in report["targets"]]
    stats = report["frame_statistics"]
    bpu_rows = [(t["name"], t["target"], t["model"], t["unit"], f"{t['error']:+.1%}", t["use"])
                for t in report["bpu_targets"]]
    lines = [provenance_line(report.provenance),
             render(["target", "measured", "predicted", "unit", "error", "tolerance",
                     "within"], rows, title=f"J5 calibration, preset {report.preset}"),
             f"\nframes: {stats['frames']} synthetic nuScenes-like frames of "
             f"{stats['points_per_frame']} points; valid points {stats['valid_points']}; "
             f"pillars {stats['pillars']}; kept points per pillar "
             f"{stats['kept_points_per_pillar']}",
             render(["BPU target (J5 hb_perf estimates)", "target", "model", "unit", "error",
                     "use"], bpu_rows, title=f"J5 BPU calibration, preset {report.preset} "
                                             "(tools/fit_j5_bpu.py)")]
    if "cross_validation" in report.results:
        from emu.workloads.pointcloud import fitting

        lines.append(f"\n{fitting.fit_text(report['fit'])}\n")
        lines.append(fitting.cross_validation_text(
            {**report["fit"], "cross_validation": report["cross_validation"]}))
    return "\n".join(lines)


CALIBRATE = register(Command(
    "calibrate", "predicted vs measured J5 timings and the error",
    "Run the calibration targets (CenterPoint preprocessing, 16 synthetic 300,000-point "
    "frames, seed 0) on the chosen hardware and print each target's measured value, the "
    "prediction and the error, with the statistics of the frames used. The fit itself: "
    "tools/fit_j5.py. --trace: the timeline of the first calibration frame through the CPU "
    "reference and DSP scheme 2 (the implementations the point-cloud targets time; their "
    "processes named `cpu ...` and `dsp2 ...`), run again after the targets, each in a fresh "
    "session as the targets' own first frames were; the CV and BPU targets are not in it.",
    OPTIONS, work, text, REPORTS, trace=True, progress=True, outputs=("--trace",)))
