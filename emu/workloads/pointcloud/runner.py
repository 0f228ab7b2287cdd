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

from emu.errors import EmuError, InputError
from emu.report.document import write_atomic
from emu.runtime import session
from emu.soc.clock import PS_PER_MS
from emu.workloads import lidar
from emu.workloads.pointcloud.impls import IMPLS, Preprocessor
from emu.workloads.pointcloud.params import MODELS, PillarParams


@dataclass(frozen=True)
class Frame:
    name: str
    points: np.ndarray
    points_dropped: int


def frames_from_files(paths: Sequence[str], params: PillarParams) -> list[Frame]:
    """Load every file first, so a bad one stops the run before anything is written."""
    out = []
    for path in paths:
        cloud = lidar.load_bin(path, params.dims, params.max_input_points)
        out.append(Frame(cloud.name, cloud.points, cloud.points_dropped))
    return out


def synthetic(params: PillarParams, count: int, seed: int, points: int | None) -> list[Frame]:
    frames = []
    for name, cloud in lidar.synthetic_frames(params.name, count, seed, points):
        kept = cloud[: params.max_input_points]
        frames.append(Frame(name, kept, len(cloud) - len(kept)))
    return frames


def _ms(ps: int) -> float:
    return round(ps / PS_PER_MS, 6)


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
    rows: list[dict[str, Any]] = [
        {"frame": f.name, "points_read": len(f.points),
         "points_dropped": int(f.points_dropped), "points_valid": 0, "points_kept": 0,
         "pillars": 0, "impls": {}} for f in frames]
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
        counts = {"points_valid": result.valid, "points_kept": result.kept,
                  "pillars": result.pillars}
        if first_outputs[k] is None:
            first_outputs[k] = (result.features, result.coords)
            row.update(counts)
        else:
            features, coords = first_outputs[k]  # type: ignore[misc]
            if not (np.array_equal(features, result.features)
                    and np.array_equal(coords, result.coords)):
                raise EmuError(f"frame {frame.name}: {impl} disagrees with {reference}")
        row["impls"][impl] = {"total_ms": _ms(result.total_ps),
                              "stages": {n: _ms(ps) for n, ps in result.stages_ps.items()}}
        if dump is not None:
            _dump(Path(dump) / frame.name / impl, result.features, result.coords,
                  dump_format)
        yield k + 1
