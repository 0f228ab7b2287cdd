"""`emu sweep`: points per second on 1 and 2 local workers and on a local Dask cluster of 2
workers, and the overhead per point.

A 40-point sweep of small CenterPoint frames through `dsp2` (8 DSP clocks x 5 point counts)
runs on a warm pool of 1, then 2, worker processes (each pool first runs a few other points,
so workers have imported emu and loaded the compiled kernels). The overhead per point is
the wall time per point on one worker minus the command's own in-process time: starting the
point, shipping it to the worker and back, storing it. The machine's load average is
printed first: on a shared machine the second worker may find no free core, which shows as
a longer command time per point on 2 workers than on 1. The Dask run (the sweep extra; left
out with a line saying so when dask is not installed) uses a local cluster of 2 worker
processes, one thread each, warmed the same way; its speed-up is against 1 local worker.
"""

from __future__ import annotations

import os
import time

import emu.sweep
from emu.sweep.local import LocalExecutor

FREQS = ["400MHz", "500MHz", "600MHz", "648MHz", "700MHz", "800MHz", "900MHz", "1GHz"]


def _spec(freqs: list[str], points: list[int]) -> dict:
    return {"scenario": {"command": "pointcloud",
                         "args": ["--model", "centerpoint", "--impl", "dsp2", "--synthetic",
                                  "1"],
                         "metrics": {"dsp2_ms": "summary.dsp2.avg_ms"}},
            "axes": {"mode": "grid", "vdsp.freq_hz": freqs, "--points": points}}


def _timed(spec: dict, executor: object, workers: int) -> tuple[float, list[dict]]:
    """Warm `executor`'s workers on other points, then run `spec`: wall seconds, rows."""
    emu.sweep.run(_spec(["300MHz"], [5000 + k for k in range(2 * workers)]),
                  executor=executor)
    start = time.perf_counter()
    rows = emu.sweep.run(spec, executor=executor)  # an in-memory store: every point runs
    wall = time.perf_counter() - start
    assert all(r["status"] == "ok" for r in rows), [r["error"] for r in rows]
    return wall, rows


def _line(label: str, workers: int, wall: float, rows: list[dict]) -> float:
    command = sum(r["seconds"] for r in rows) / len(rows)
    overhead = wall * workers / len(rows) - command
    print(f"{label:>12s} {len(rows):6d} {wall:7.2f} {len(rows) / wall:9.2f} {command:16.3f} "
          f"{overhead:17.3f}")
    return len(rows) / wall


def main() -> None:
    spec = _spec(FREQS, [40000, 50000, 60000, 70000, 80000])
    rate = {}
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"{'workers':>12s} {'points':>6s} {'wall s':>7s} {'points/s':>9s} "
          f"{'command s/point':>16s} {'overhead s/point':>17s}")
    for workers in (1, 2):
        with LocalExecutor(workers) as executor:
            wall, rows = _timed(spec, executor, workers)
        rate[workers] = _line(f"{workers} local", workers, wall, rows)
    print(f"speed-up of 2 local workers over 1: {rate[2] / rate[1]:.2f}x")
    try:
        from emu.sweep.dask_executor import DaskExecutor
    except ImportError as exc:
        print(f"dask: not installed ({exc}); python -m pip install 'emu[sweep]'")
        return
    with DaskExecutor(local_workers=2) as executor:
        wall, rows = _timed(spec, executor, 2)
    dask_rate = _line("2 dask", 2, wall, rows)
    print(f"speed-up of a 2-worker local Dask cluster over 1 local worker: "
          f"{dask_rate / rate[1]:.2f}x")


if __name__ == "__main__":
    main()
