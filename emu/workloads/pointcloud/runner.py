"""`emu pointcloud`: frames through the chosen implementations, checked, timed, dumped.

Each implementation runs all frames in order on its own freshly built SoC (as the board
runs each sample program on its own), so its timings do not depend on which other
implementations were asked for. The implementations must produce identical features and
coordinates; if they ever differ, that is an emulator bug and the run fails.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from emu import jit
from emu.errors import EmuError, InputError
from emu.report.document import write_atomic
from emu.runtime import session
from emu.soc.clock import report_ms
from emu.workloads import lidar
from emu.workloads.pointcloud.impls import IMPLS, Preprocessor
from emu.workloads.pointcloud.params import MODELS, PillarParams

# What each of a model's values per point is (spec §1), for messages.
_VALUES = {4: "x, y, z, reflectance", 5: "x, y, z, intensity, t"}


@dataclass(frozen=True)
class Frame:
    name: str
    points: np.ndarray  # [points, model dims]: the model's values of the points read
    points_dropped: int  # points past the model's max input points
    columns: int  # values per point in the source (the file's; the model's if synthetic)


def frames_from_files(paths: Sequence[str], params: PillarParams,
                      columns: int | None = None) -> list[Frame]:
    """Load every file first, so a bad one stops the run before anything is written.

    A file is read with the values per point of its format (`lidar.file_columns`: 5 for a
    `*.pcd.bin`, the model's for any other `.bin`, as spec §2 has it), or `columns` when
    given; the model takes the first `dims` of them. A file with fewer values per point
    than the model reads is refused: the spec's models take every value from the file
    (spec §1-§2), and inventing one would change the model's input without a word."""
    needed = f"{params.name} reads {params.dims} values a point"
    if params.dims in _VALUES:
        needed += f" ({_VALUES[params.dims]})"
    if columns is not None and columns < params.dims:
        raise InputError(f"--columns {columns}: {needed}")
    out = []
    for path in paths:
        if columns is None:
            known, what = lidar.file_columns(path)
            n = params.dims if known is None else known
            if n < params.dims:
                raise InputError(f"{path}: a {what} file has {n} values a point, {needed}; "
                                 f"if this file has {params.dims}, give --columns "
                                 f"{params.dims}")
        else:
            n = columns
        cloud = lidar.load_bin(path, n, params.max_input_points)
        points = np.ascontiguousarray(cloud.points[:, : params.dims])
        out.append(Frame(cloud.name, points, cloud.points_dropped, n))
    return out


def synthetic(params: PillarParams, count: int, seed: int, points: int | None) -> list[Frame]:
    frames = []
    for name, cloud in lidar.synthetic_frames(params.name, count, seed, points):
        kept = cloud[: params.max_input_points]
        frames.append(Frame(name, kept, len(cloud) - len(kept), params.dims))
    return frames


WARM_POINTS = 4096


def warm(model: str, *impls: str) -> None:
    """Run `impls`, in order, over one small synthetic frame of `model`: every kernel they
    call compiles (or loads from the cache) with the types a real frame gives it. What
    `run` starts on a second core (`emu.jit.compile_aside`)."""
    params = MODELS[model]
    run(model, impls, synthetic(params, 1, 0, WARM_POINTS))


def _counts(frame: Frame, params: PillarParams) -> dict[str, Any]:
    """A frame's points by what became of them, before any implementation runs (the
    implementations' own counts must then agree): `points_dropped` past max input points,
    `cells` the distinct cells of the valid points, and the valid points each limit of the
    pillars dropped: `points_dropped_max_points_per_pillar` would be dropped even if every
    cell had its own pillar, `points_dropped_max_pillars` are the further ones lost because
    the cells past max pillars share the last pillar (spec §3 step 3)."""
    grid = lidar.grid_occupancy(frame.points, params)
    return {"frame": frame.name, "columns": frame.columns, "points_read": len(frame.points),
            "points_dropped": int(frame.points_dropped), "points_valid": grid.valid,
            "points_kept": grid.kept, "pillars": grid.pillars, "cells": grid.cells,
            "points_dropped_max_pillars": grid.kept_uncapped - grid.kept,
            "points_dropped_max_points_per_pillar": grid.valid - grid.kept_uncapped,
            "impls": {}}



def _dump(folder: Path, result_features: np.ndarray, coords: np.ndarray, fmt: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, array in (("features", result_features), ("coords", coords)):
        if fmt in ("npy", "both"):
            _save_npy(folder / f"{name}.npy", array)
        if fmt in ("txt", "both"):
            text = "\n".join(map(str, array.reshape(-1).tolist())) + "\n"
            write_atomic(folder / f"{name}.txt", text)


def _save_npy(path: Path, array: np.ndarray) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("wb") as fh:
        np.save(fh, array)
    tmp.replace(path)


def run(
    model: str, impls: Sequence[str], frames: list[Frame], *, preset: str = "j5",
    config_file: str | None = None, overrides: Sequence[str] = (), trace: bool = False,
    dump: str | None = None, dump_format: str = "npy",
    progress: Callable[[int, int, str], None] | None = None,
) -> tuple[dict[str, Any], list[session.Session]]:
    """Run `frames` through `impls`; the report of the contract and the sessions used.

    `progress(done, total, what)` is called after every frame of every implementation."""
    params = MODELS[model]
    unknown = [i for i in impls if i not in IMPLS]
    if unknown:
        raise InputError(f"--impl {unknown[0]}: expected one of {', '.join(IMPLS)}")
    started = time.perf_counter()
    # The back half of the implementations' kernels compile on another core while this
    # process runs the front half.
    if len(impls) > 1:
        jit.compile_aside(f"{__name__}:warm", [model, *impls[(len(impls) + 1) // 2:]])
    rows = [_counts(f, params) for f in frames]
    first_outputs: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(frames)
    sessions = []
    steps = len(impls) * len(frames)
    for k, impl in enumerate(impls):
        with session.Session(preset, config_file, overrides, trace=trace) as sess:
            sessions.append(sess)
            for done in _run_impl(impl, params, frames, rows, first_outputs, impls[0], dump,
                                  dump_format):
                if progress is not None:
                    progress(k * len(frames) + done, steps, f"{impl} {done}/{len(frames)}")
    summary = {}
    for impl in impls:
        totals = [row["impls"][impl]["total_ms"] for row in rows]
        summary[impl] = {"avg_ms": round(sum(totals) / len(totals), 6),
                         "max_ms": max(totals), "min_ms": min(totals)}
    report = {"model": model, "preset": preset, "frames": rows, "summary": summary,
              "wall_s": round(time.perf_counter() - started, 3)}
    return report, sessions


def _run_impl(
    impl: str, params: PillarParams, frames: list[Frame], rows: list[dict[str, Any]],
    first_outputs: list[tuple[np.ndarray, np.ndarray] | None], reference: str,
    dump: str | None, dump_format: str,
) -> Iterator[int]:
    """All frames through one implementation on the current session, checked against the
    first implementation's outputs; yields the number of frames done after each."""
    pre = Preprocessor(params)
    for k, frame in enumerate(frames):
        pre.load(frame.points)
        result = pre.run(impl)
        row = rows[k]
        counts = (result.valid, result.kept, result.pillars)
        if counts != (row["points_valid"], row["points_kept"], row["pillars"]):
            raise EmuError(f"frame {frame.name}: {impl} counts {counts} (valid, kept, "
                           f"pillars) disagree with the grid's count")
        if first_outputs[k] is None:
            first_outputs[k] = (result.features, result.coords)
        else:
            features, coords = first_outputs[k]  # type: ignore[misc]
            if not (np.array_equal(features, result.features)
                    and np.array_equal(coords, result.coords)):
                raise EmuError(f"frame {frame.name}: {impl} disagrees with {reference}")
        row["impls"][impl] = {"total_ms": report_ms(result.total_ps),
                              "stages": {n: report_ms(ps) for n, ps in result.stages_ps.items()}}
        if dump is not None:
            _dump(Path(dump) / frame.name / impl, result.features, result.coords,
                  dump_format)
        yield k + 1
