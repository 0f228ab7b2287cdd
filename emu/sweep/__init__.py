"""What-if sweeps: one simulating command run over a grid or a sample of hardware and
arguments, each point's metrics collected, every finished point kept in a store.

    import emu.sweep
    rows = emu.sweep.run("sweep.toml", workers=2, store="sweep.sqlite")
    import pandas; frame = pandas.DataFrame([{**r["axes"], **r["metrics"]} for r in rows])

The spec (`emu.sweep.spec`) is checked and expanded whole before any point runs. Each point
runs its command in-process through the command layer (`emu.commands`: the same parse,
resolve and run as `emu` itself; `emu.sweep.runner.run_point`), on an executor: local
worker processes by default (`emu.sweep.local`), the calling process with `workers=0`, or
any object with `map_unordered(fn, items)` (`emu.sweep.runner.Executor`; the Dask one is
`emu.sweep.dask_executor`). Each result is stored the moment it arrives
(`emu.sweep.store`), keyed by the point's content; a point already in the store, from this
sweep or any other, is read back instead of run again. A point that fails records its
one-line error and the sweep goes on.

`resume`: without it, a store holding an unfinished run of this very sweep (same points in
the same order) is refused, with a line saying to give `--resume` (or another store), so
that finishing an interrupted sweep is a deliberate act; stored points of any other sweep,
or of a finished run of this one, are reused either way. With it, the unfinished run is
finished: no stored point is lost or recomputed, only the missing ones run. A `--resume`
with nothing to resume just runs the sweep.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emu.errors import InputError

if TYPE_CHECKING:
    from emu.sweep.runner import Executor
    from emu.sweep.spec import Spec

__all__ = ["run", "stored"]

ProgressFn = Callable[[int, int, str], None]


def run(spec: Spec | str | Path | dict[str, Any], *, workers: int = 1,
        store: str | Path | None = None, resume: bool = False,
        executor: Executor | None = None,
        progress: ProgressFn | None = None) -> list[dict[str, Any]]:
    """Run a sweep; one row per point, in spec order:
    {"axes", "metrics", "status" ("ok"/"error"), "error", "key", "cached", "seconds"}.

    `spec`: a checked Spec, a spec file, or the spec as data. `workers`: local worker
    processes (0: the calling process). `store`: the SQLite store file (None: one in
    memory, gone when the call returns). `executor`: overrides `workers`; not closed here.
    `progress(done, total, what)` is called as points finish. A point whose worker died
    (a result marked `transient`) is reported but not stored, and leaves the run
    unfinished: `resume` runs it again.
    """
    from emu.sweep import spec as spec_module
    from emu.sweep.runner import InlineExecutor, run_point
    from emu.sweep.store import Store

    if isinstance(spec, str | Path):
        spec = spec_module.load(spec)
    elif isinstance(spec, dict):
        spec = spec_module.parse(spec)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise InputError(f"workers: expected a whole number from 0 up, got {workers!r}")
    keys = [p.key for p in spec.points]
    with Store(":memory:" if store is None else store) as db:
        record = db.sweep(spec.key)
        if record is not None and record["finished"] is None and not resume:
            left = len(db.missing(keys))
            raise InputError(f"store {db.path}: holds an unfinished run of this sweep "
                             f"({len(set(keys)) - left} of {len(set(keys))} points done); "
                             "give --resume to finish it, or another store")
        db.begin_sweep(spec.key, describe(spec), keys, [p.axes for p in spec.points])
        todo_keys = set(db.missing(keys))
        first = {}
        for point in spec.points:
            if point.key in todo_keys and point.key not in first:
                first[point.key] = point
        todo = list(first.values())
        fresh: dict[str, dict[str, Any]] = {}
        done, total = len(set(keys)) - len(todo), len(set(keys))
        if progress is not None:
            progress(done, total, f"{done} stored, {len(todo)} to run")
        own: Any = None  # an executor made here, closed here
        if executor is None:
            if workers == 0:
                own = InlineExecutor()
            else:
                from emu.sweep.local import LocalExecutor

                own = LocalExecutor(min(workers, max(1, len(todo))))
        runner = executor if executor is not None else own
        assert runner is not None
        try:
            if todo:
                for index, result in runner.map_unordered(run_point,
                                                          [p.job for p in todo]):
                    point = todo[index]
                    fresh[point.key] = result
                    if not result.get("transient"):
                        report = result.get("report")
                        db.put(point.key, command=spec.command, args=point.job["argv"],
                               axes=point.axes, config=_config(spec, point),
                               status=result["status"],
                               metrics=_metrics(spec, report)[0] if report else {},
                               report=report, error=result.get("error"),
                               seconds=result.get("seconds"))
                    done += 1
                    if progress is not None:
                        progress(done, total, f"point {point.index + 1} "
                                              f"{result['status']}")
        finally:
            if own is not None:
                own.close()
        if not any(r.get("transient") for r in fresh.values()):
            db.finish_sweep(spec.key)
        stored = db.get(keys)
    return [_row(spec, point, fresh.get(point.key), stored.get(point.key))
            for point in spec.points]


def stored(spec: Spec | str | Path | dict[str, Any], store: str | Path) -> list[dict[str, Any]]:
    """The rows of a sweep as its store holds them, running nothing: rows like `run`'s, a
    point the store does not hold having status "missing". InputError when the store file
    does not exist."""
    from emu.sweep import spec as spec_module
    from emu.sweep.store import Store

    if isinstance(spec, str | Path):
        spec = spec_module.load(spec)
    elif isinstance(spec, dict):
        spec = spec_module.parse(spec)
    with Store(store, read_only=True) as db:
        held = db.get([p.key for p in spec.points])
    rows = []
    for point in spec.points:
        if point.key in held:
            rows.append(_row(spec, point, None, held[point.key]))
        else:
            rows.append({"axes": dict(point.axes), "metrics": {n: None for n in spec.metrics},
                         "status": "missing", "error": "not in the store", "key": point.key,
                         "cached": False, "seconds": None})
    return rows


def describe(spec: Spec) -> dict[str, Any]:
    """The spec as plain data: what the store records of a sweep and reports show."""
    return {"command": spec.command, "args": list(spec.args), "metrics": dict(spec.metrics),
            "hardware": {"preset": spec.preset, "config": spec.config_file,
                         "set": list(spec.overrides)},
            "axes": {"mode": spec.mode, "samples": spec.samples, "seed": spec.seed,
                     "method": spec.method if spec.mode == "random" else None,
                     "names": [a.name for a in spec.axes]},
            "where": spec.where}


def _config(spec: Spec, point: Any) -> dict[str, Any]:
    from emu.soc.config import load_config

    return load_config(spec.preset, spec.config_file, point.overrides).to_dict()


def _metrics(spec: Spec, report: Any) -> tuple[dict[str, Any], str | None]:
    """The spec's metrics from a report, and the first that is not in it (or None)."""
    from emu.sweep.spec import resolve_metric

    values: dict[str, Any] = {}
    missing = None
    for name, path in spec.metrics.items():
        try:
            values[name] = resolve_metric(report, path)
        except KeyError as exc:
            values[name] = None
            missing = missing or f"metric {name} = {path!r}: {exc.args[0]}"
    return values, missing


def _row(spec: Spec, point: Any, fresh: dict[str, Any] | None,
         stored: dict[str, Any] | None) -> dict[str, Any]:
    source = stored if stored is not None else fresh
    cached = fresh is None
    if source is None:  # not run: cannot happen unless the executor skipped it
        return {"axes": dict(point.axes), "metrics": {n: None for n in spec.metrics},
                "status": "error", "error": "not run", "key": point.key, "cached": False,
                "seconds": None}
    status, error = source["status"], source.get("error")
    metrics = {n: None for n in spec.metrics}
    if status == "ok":
        metrics, missing = _metrics(spec, source["report"])
        if missing is not None:
            status, error = "error", missing
    return {"axes": dict(point.axes), "metrics": metrics, "status": status, "error": error,
            "key": point.key, "cached": cached, "seconds": source.get("seconds")}
