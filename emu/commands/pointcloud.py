"""`emu pointcloud`: pillar preprocessing of LiDAR frames by the CPU reference and the two
DSP schemes (`emu.workloads.pointcloud.runner`), compared."""

from __future__ import annotations

import argparse
import contextlib
import os
from typing import Any

from emu.commands import Command, Outcome, Progress, register, write_trace
from emu.commands.report import Report
from emu.errors import InputError
from emu.options import SEEDS, Option

IMPLS = ("cpu", "dsp1", "dsp2")
SYNTHETIC_FRAMES = (1, 1000)  # the frames are generated up front: 6 MB each by default
POINTS_PER_FRAME = (1, 1_000_000)  # the models keep at most 300,000 (CenterPoint)
POINT_COLUMNS = (1, 64)  # float32 values per point of a --input file

OPTIONS = (
    Option("model", str, None, "the network whose preprocessing runs",
           choices=("centerpoint", "pointpillars"), required=True),
    Option("impl", str, None, "implementation (repeatable; default: all three)",
           choices=IMPLS, repeat=True),
    Option("input", str, None,
           "raw little-endian float32 point files: *.pcd.bin with 5 values a point "
           "(nuScenes: x, y, z, intensity, ring), any other *.bin with the model's (5 for "
           "centerpoint: x, y, z, intensity, t; 4 for pointpillars: x, y, z, reflectance), a "
           "warning when a 4-value file seems read as 5; the model takes the first 5 or 4; a "
           "file with fewer exits 2", metavar="FILE.bin", many=True, group="source",
           group_required=True),
    Option("synthetic", int, None, "generate N realistic frames (nuScenes-like or "
                                   "KITTI-like)", SYNTHETIC_FRAMES, metavar="N_FRAMES",
           group="source"),
    Option("columns", int, None, "values per point of every --input file, whatever the names "
                                 "say, e.g. 4 for a KITTI file given to pointpillars as "
                                 "*.pcd.bin, or 6 for a file with an extra value",
           POINT_COLUMNS, metavar="N"),
    Option("points", int, None, "points per synthetic frame", POINTS_PER_FRAME),
    Option("seed", int, 0, "seed of the synthetic frames", SEEDS),
    Option("dump", str, None, "write features and coords per frame/impl into DIR, which "
                              "must be new or an empty folder; it appears only when the run "
                              "completes", metavar="DIR"),
    Option("dump_format", str, "npy", "npy arrays, the board's text form (one integer a "
                                      "line), or both", choices=("npy", "txt", "both")),
)

REPORTS = (
    "model", "frames.*.frame", "frames.*.points_read", "frames.*.points_dropped",
    "frames.*.points_valid", "frames.*.points_kept", "frames.*.pillars", "frames.*.columns",
    "frames.*.cells", "frames.*.points_dropped_max_pillars",
    "frames.*.points_dropped_max_points_per_pillar", "frames.*.impls.*.total_ms",
    "frames.*.impls.*.stages.*", "summary.*.avg_ms", "summary.*.max_ms", "summary.*.min_ms")


def output_paths(args: argparse.Namespace) -> tuple[Any, Any]:
    """The `--trace` file and `--dump` folder, checked before any work (the rules are
    `emu.report.outputs`'s), or None for each not asked for."""
    from emu.report import outputs

    trace = None if args.trace is None else outputs.check_file("--trace", args.trace)
    dump_path = getattr(args, "dump", None)
    dump = None if dump_path is None else outputs.check_folder("--dump", dump_path)
    if (trace is not None and dump is not None
            and os.path.abspath(trace) == os.path.abspath(dump)):
        raise InputError(f"--trace {args.trace}: is the --dump folder too")
    return trace, dump


def work(resolved: Any, args: argparse.Namespace, progress: Progress | None) -> Outcome:
    from emu.report.outputs import staged_folder
    from emu.workloads import lidar
    from emu.workloads.pointcloud import runner
    from emu.workloads.pointcloud.params import MODELS

    trace, dump = output_paths(args)  # bad output paths stop the run before any work
    params = MODELS[args.model]
    impls = list(dict.fromkeys(args.impl or IMPLS))
    if args.synthetic is not None:
        if args.columns is not None:
            raise InputError("--columns applies to --input files only")
        frames = runner.synthetic(params, args.synthetic, args.seed, args.points)
    else:
        if args.points is not None:
            raise InputError("--points applies to --synthetic frames only")
        frames = runner.frames_from_files(args.input, params, args.columns)
    messages = []
    for frame in frames:
        if frame.columns > params.dims:
            messages.append(f"note: {frame.name}: {frame.columns} values a point, "
                            f"{args.model} reads the first {params.dims}")
        odd = lidar.implausible_times(frame.points) if frame.columns == 5 else 0.0
        if odd > 0.5:
            messages.append(f"warning: {frame.name}: read as 5 values a point, but the 5th (t) "
                            f"is outside -1..1 s for {odd:.0%} of the points: if the file has "
                            f"4 values a point (KITTI), give --columns 4")
        if frame.points_dropped:
            messages.append(f"warning: {frame.name}: only the first {params.max_input_points} "
                            f"points are processed, {frame.points_dropped} dropped")
    with contextlib.ExitStack() as stack:  # the dump is written aside, in place at the end
        staged = None if dump is None else stack.enter_context(staged_folder(dump))
        report, sessions = runner.run(args.model, impls, frames, preset=args.preset,
                                      config_file=args.config, overrides=args.overrides,
                                      trace=trace is not None,
                                      dump=None if staged is None else str(staged),
                                      dump_format=args.dump_format, progress=progress)
    if trace is not None:  # after the dump: it may go inside it
        write_trace(trace, [(impl, s.soc.recorder.recording)
                            for impl, s in zip(impls, sessions, strict=True)],
                    {"preset": args.preset, "model": args.model})
    for frame in report["frames"]:
        if frame["points_dropped_max_pillars"]:
            messages.append(f"warning: {frame['frame']}: {frame['cells']} cells, more than max "
                            f"pillars {params.max_pillars}: the cells past it share the last "
                            f"pillar, {frame['points_dropped_max_pillars']} points dropped")
    wall = {"wall_s": report.pop("wall_s")}
    results = {k: v for k, v in report.items() if k != "preset"}
    return Outcome(results, args.seed if args.synthetic is not None else None, wall,
                   tuple(messages))


def text(report: Report) -> str:
    from emu.report.document import provenance_line
    from emu.report.table import render
    from emu.workloads.pointcloud.params import MODELS

    params = MODELS[report["model"]]
    impls = list(report["summary"])
    rows = []
    for frame in report["frames"]:
        for impl in impls:
            entry = frame["impls"][impl]
            stages = ", ".join(f"{k} {v:.3f}" for k, v in entry["stages"].items())
            rows.append((frame["frame"], impl, entry["total_ms"], stages))
    assert report.provenance is not None
    return "\n".join([
        provenance_line(report.provenance),
        render(["frame", "impl", "total ms", "stages (ms)"], rows,
               title=f"{report['model']} preprocessing, preset {report.preset}"),
        "",
        render(["impl", "avg ms", "max ms", "min ms"],
               [(impl, s["avg_ms"], s["max_ms"], s["min_ms"])
                for impl, s in report["summary"].items()],
               title=f"single-thread, single-frame latency over {len(report['frames'])} "
                     "frame(s)"),
        "",
        render(["frame", "read", "valid", "kept", "pillars", "cells", "drop: input cap",
                "drop: pillar cap", "drop: pillar full"],
               [(f["frame"], f["points_read"], f["points_valid"], f["points_kept"],
                 f["pillars"], f["cells"], f["points_dropped"],
                 f["points_dropped_max_pillars"], f["points_dropped_max_points_per_pillar"])
                for f in report["frames"]],
               title=f"points per frame; dropped past the input cap of "
                     f"{params.max_input_points} points, by the pillar cap of "
                     f"{params.max_pillars} (the cells past it share the last pillar), in "
                     f"pillars full at {params.max_points_per_pillar} points"),
        f"\noutputs identical across {', '.join(impls)}; wall "
        f"{report.wall_clock['wall_s']:.1f} s"])


POINTCLOUD = register(Command(
    "pointcloud", "CenterPoint / PointPillars preprocessing on CPU and DSP, compared",
    "Pillar preprocessing of LiDAR frames by the CPU reference and the two DSP schemes on "
    "the emulated SoC: identical outputs, simulated time per stage, and the avg/max/min "
    "table per implementation.",
    OPTIONS, work, text, REPORTS, trace=True, progress=True, outputs=("--dump", "--trace"),
    wall_clock_at_top=("wall_s",), label=lambda args: args.model, sweepable=True))
