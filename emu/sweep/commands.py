"""`emu sweep run|show|export|plot` and `emu compare` as commands of the command layer.

The sweep package sits above the command layer (a sweep runs commands through it), so its
own commands are declared here and registered by name: `emu.commands` imports this module
with the other command modules when its registry is first read.

`sweep run` checks the whole spec, then runs each point not already in the store; each
finished point is stored at once (`emu.sweep`), so a killed sweep loses none. Its results
are the points in spec order (`axes`, `metrics`, `status`, `error`, `key`), the `store`,
the `metrics`, the swept command and its arguments under `scenario`, and the sweep's axes
(`sweep`); its envelope describes the spec's base hardware (`Command.configure`). Which
points came from the store differs from run to run, so it is in the wall-clock part
(`points_from_store`). A failed point is a message ("point K failed: ...") and makes the
report `failed` (exit status 1); the points that ran are stored.

`show`, `export` and `plot` read a sweep back from its store and run nothing (a point not
stored yet shows as missing): a table, a CSV or Parquet file (`emu.sweep.outputs`), a chart
(`emu.report.sweep_plots`: a metric against one axis with one line per value of another, a
heat map over two axes, the Pareto front of two metrics). Axes a chart does not draw must be
fixed with `--where`. Files are written whole or not at all.

`compare` parses its own words (`Command.parse_words`: options, `--`, then another
command's), see `emu.sweep.compare`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emu.commands import Command, Outcome, Progress, register
from emu.commands.report import Report
from emu.errors import InputError
from emu.options import Option, assignment, names
from emu.sweep.compare import OPTIONS as COMPARE_OPTIONS

if TYPE_CHECKING:
    from emu.soc.config import ResolvedConfig

MAX_WORKERS = 256

SPEC = Option("spec", str, None, "the sweep spec", flags=("spec",), metavar="SPEC.toml",
              required=True)
STORE = Option("store", str, None, "the store (default: the spec's name with .sqlite, beside "
                                   "it)", metavar="FILE.sqlite")

RUN_OPTIONS = (
    SPEC,
    Option("workers", int, None, f"local worker processes (1 to {MAX_WORKERS}, default 1)",
           (1, MAX_WORKERS), metavar="N", group="executor", show_range=False),
    Option("dask", str, None, "run the points on a Dask scheduler at ADDRESS (the sweep "
                              "extra)", metavar="ADDRESS", group="executor"),
    Option("dask_local", int, None, "run the points on a local Dask cluster of N workers (the "
                                    "sweep extra)", (1, MAX_WORKERS), metavar="N",
           group="executor", show_range=False),
    STORE,
    Option("resume", bool, False, "finish an interrupted run of this sweep in the store"),
)
SHOW_OPTIONS = (
    SPEC, STORE,
    Option("columns", str, None, "axes, metrics or fields (status, error, key, seconds) to "
                                 "show", metavar="A,B,...", parse=names),
)
EXPORT_OPTIONS = (
    SPEC, STORE,
    Option("columns", str, None, "axes, metrics or fields to write (default: axes, metrics, "
                                 "status)", metavar="A,B,...", parse=names),
    Option("output", str, None, "FILE.csv or FILE.parquet", flags=("-o", "--output"),
           metavar="FILE", required=True),
)
CHARTS = ("line", "heatmap", "pareto")
PLOT_OPTIONS = (
    SPEC,
    Option("kind", str, None, "the chart", flags=("kind",), choices=CHARTS, required=True),
    STORE,
    Option("x", str, None, "line, heatmap: the horizontal axis", metavar="AXIS"),
    Option("y", str, None, "line: the metric drawn; heatmap: the vertical axis",
           metavar="NAME"),
    Option("series", str, None, "line: one line per value of this axis", metavar="AXIS"),
    Option("metric", str, None, "heatmap: the metric in the cells", metavar="METRIC"),
    Option("a", str, None, "pareto: the first metric", metavar="METRIC"),
    Option("b", str, None, "pareto: the second metric", metavar="METRIC"),
    Option("maximize_a", bool, False, "pareto: more of a is better"),
    Option("maximize_b", bool, False, "pareto: more of b is better"),
    Option("where", str, None, "keep the points with this axis value (repeatable)",
           metavar="AXIS=VALUE", repeat=True, parse=assignment),
    Option("output", str, None, "FILE.png or FILE.svg", flags=("-o", "--output"),
           metavar="FILE", required=True),
)
CHART_NEEDS = {"line": ("x", "y"), "heatmap": ("x", "y", "metric"), "pareto": ("a", "b")}


def _store(args: argparse.Namespace) -> Path:
    return Path(args.store) if args.store else Path(args.spec).with_suffix(".sqlite")


def _spec(args: argparse.Namespace, progress: Progress | None = None) -> Any:
    """The sweep spec `args` name, loaded and checked once (`base_hardware` reads it before
    `run_work` does: expanding a large spec resolves every point), telling `progress`."""
    if getattr(args, "loaded_spec", None) is None:
        from emu.sweep import spec as spec_module

        args.loaded_spec = spec_module.load(args.spec, progress)
    return args.loaded_spec


def base_hardware(args: argparse.Namespace) -> ResolvedConfig:
    """The hardware a sweep's points share before its axes: the spec's preset, config file
    and overrides (what the report's provenance and configuration describe)."""
    from emu.soc.config import load_config

    spec = _spec(args)
    return load_config(spec.preset, spec.config_file, spec.overrides)


def _dask(args: argparse.Namespace) -> Any:
    """The Dask executor asked for, or None."""
    if args.dask is None and args.dask_local is None:
        return None
    flag = "--dask" if args.dask is not None else "--dask-local"
    try:
        from emu.sweep import dask_executor  # type: ignore[attr-defined,unused-ignore]
    except ImportError as exc:
        raise InputError(f"{flag}: needs the sweep extra (python -m pip install "
                         f"'emu[sweep]'): {exc}") from None
    return dask_executor.DaskExecutor(address=args.dask, local_workers=args.dask_local)


def run_work(resolved: Any, args: argparse.Namespace, progress: Progress | None) -> Outcome:
    import emu.sweep

    spec = _spec(args)
    store = _store(args)
    if store.resolve() == Path(args.spec).resolve():
        raise InputError(f"--store {store}: is the spec itself")
    executor = _dask(args)
    try:
        rows = emu.sweep.run(spec, workers=args.workers or 1, store=store, resume=args.resume,
                             executor=executor, progress=progress)
    finally:
        if executor is not None:
            executor.close()
    failed = tuple(f"point {k} failed: {r['error']}" for k, r in enumerate(rows, start=1)
                   if r["status"] != "ok")
    results = {"scenario": {"command": spec.command, "args": list(spec.args)},
               "spec": spec.where, "store": str(store), "metrics": dict(spec.metrics),
               "sweep": emu.sweep.describe(spec)["axes"],
               "points": [{"axes": r["axes"], "metrics": r["metrics"], "status": r["status"],
                           "error": r["error"], "key": r["key"]} for r in rows]}
    from_store = [k for k, r in enumerate(rows, start=1) if r["cached"]]
    return Outcome(results, wall_clock={"points_from_store": from_store}, messages=failed,
                   failed=bool(failed))


def _cell(value: Any) -> Any:
    if value is None:
        return "-"
    if isinstance(value, int | float | str):  # booleans are ints
        return value
    return str(value)


def _hardware_line(report: Report) -> str:
    """The sweep's base hardware and how its axes are drawn, in one line."""
    assert report.provenance is not None
    prov, axes = report.provenance, report["sweep"]
    parts = [f"preset {prov['preset']}"]
    if prov["config_file"]:
        parts.append(f"config {prov['config_file']}")
    if prov["overrides"]:
        parts.append("--set " + " ".join(prov["overrides"]))
    parts.append(f"axes {axes['mode']}" + (f" ({axes['method']}, {axes['samples']} samples, "
                                           f"seed {axes['seed']})"
                                           if axes["mode"] == "random" else ""))
    return "; ".join(parts)


def run_text(report: Report) -> str:
    from emu.report.table import render

    axes, metrics, points = report["sweep"]["names"], report["metrics"], report["points"]
    from_store = set(report.wall_clock["points_from_store"])
    table = [(k, *(p["axes"][n] for n in axes), *(_cell(p["metrics"][m]) for m in metrics),
              p["status"] + (" (stored)" if k in from_store else ""))
             for k, p in enumerate(points, start=1)]
    scenario = report["scenario"]
    title = f"sweep {report['spec']}: {scenario['command']} {' '.join(scenario['args'])}"
    return "\n".join([
        _hardware_line(report),
        render(["#", *axes, *metrics, "status"], table, title=title.rstrip()),
        f"{len(points)} points, {len(from_store)} from the store; store {report['store']}"])


def _stored_rows(args: argparse.Namespace, progress: Progress | None
                 ) -> tuple[Any, list[dict[str, Any]], Path]:
    import emu.sweep

    spec = _spec(args, progress)
    store = _store(args)
    return spec, emu.sweep.stored(spec, store), store


def show_work(resolved: Any, args: argparse.Namespace, progress: Progress | None) -> Outcome:
    from emu.sweep import outputs

    spec, rows, store = _stored_rows(args, progress)
    columns, values = outputs.records(rows, args.columns)
    return Outcome({"spec": spec.where, "store": str(store), "columns": columns,
                    "points": [dict(zip(columns, line, strict=True)) for line in values]})


def show_text(report: Report) -> str:
    from emu.sweep import outputs

    columns = report["columns"]
    return outputs.records_table(columns, [[p[c] for c in columns] for p in report["points"]],
                                 title=f"sweep {report['spec']} in {report['store']}")


def _target(args: argparse.Namespace, suffixes: tuple[str, ...]) -> Path:
    """The -o file, checked (`emu.report.outputs`) and of one of `suffixes`."""
    from emu.report import outputs as paths

    target = paths.check_file("-o/--output", args.output)
    if target.suffix.lower() not in suffixes:
        raise InputError(f"-o {args.output}: expected a {' or '.join(suffixes)} file")
    return target


def export_work(resolved: Any, args: argparse.Namespace, progress: Progress | None) -> Outcome:
    from emu.sweep import outputs

    target = _target(args, (".csv", ".parquet"))
    _, rows, _ = _stored_rows(args, progress)
    if target.suffix.lower() == ".csv":
        outputs.write_csv(rows, target, args.columns)
    else:
        outputs.write_parquet(rows, target, args.columns)
    return Outcome({"file": str(target), "points": len(rows)}, written=(str(target),))


def plot_work(resolved: Any, args: argparse.Namespace, progress: Progress | None) -> Outcome:
    from emu.report import sweep_plots
    from emu.report.document import write_atomic
    from emu.sweep import outputs

    target = _target(args, (".png", ".svg"))
    fmt = target.suffix.lower().lstrip(".")
    missing = [f"--{n}" for n in CHART_NEEDS[args.kind] if getattr(args, n) is None]
    if missing:
        raise InputError(f"plot {args.kind}: needs {', '.join(missing)}")
    spec, stored, _ = _stored_rows(args, progress)
    rows = outputs.select(stored, dict(args.where))
    title = f"{spec.command} {' '.join(spec.args)}".strip()
    if args.kind == "line":
        data = sweep_plots.line(rows, args.x, args.y, args.series, fmt=fmt, title=title)
    elif args.kind == "heatmap":
        data = sweep_plots.heatmap(rows, args.x, args.y, args.metric, fmt=fmt, title=title)
    else:
        data = sweep_plots.pareto(rows, args.a, args.b,
                                  minimize=(not args.maximize_a, not args.maximize_b),
                                  fmt=fmt, title=title)
    write_atomic(target, data)
    return Outcome({"file": str(target), "chart": args.kind, "points": len(rows)},
                   written=(str(target),))


def wrote_text(report: Report) -> str:
    return f"wrote {report['file']}"


def compare_words(words: list[str]) -> argparse.Namespace:
    """`emu compare`'s words parsed and checked (`emu.sweep.compare.parse`): its options,
    with the two sides (`sides`) and the command after `--` (`run`)."""
    from emu.sweep import compare

    args, a, b, command = compare.parse(words)
    args.sides, args.run = (a, b), command
    return args


def compare_work(resolved: Any, args: argparse.Namespace, progress: Progress | None) -> Outcome:
    from emu.sweep import compare

    a, b = args.sides
    return Outcome(compare.compare(a, b, args.run))


def compare_text(report: Report) -> str:
    from emu.sweep import compare

    return compare.text(report.results, report.arguments["only_different"])


SWEEP_RUN = register(Command(
    "sweep run", "run a sweep spec (TOML) and print each point's metrics",
    "Check the whole spec, then run each point not already in the store; each finished "
    "point is stored at once, so a killed sweep loses none. Points that fail are listed on "
    "stderr, one line each, and the exit status is 1 (the points that ran are stored).",
    RUN_OPTIONS, run_work, run_text, hardware=False, progress=True, configure=base_hardware,
    label=lambda args: "sweep"))

SWEEP_SHOW = register(Command(
    "sweep show", "a sweep's points as its store holds them",
    "Print a sweep's points from its store (nothing runs; points not stored show as "
    "missing).", SHOW_OPTIONS, show_work, show_text, hardware=False, progress=True))

SWEEP_EXPORT = register(Command(
    "sweep export", "a sweep's points as CSV or Parquet",
    "Write a sweep's stored points as CSV (.csv) or Parquet (.parquet, needs pyarrow).",
    EXPORT_OPTIONS, export_work, wrote_text, hardware=False, outputs=("-o", "--output"),
    progress=True))

SWEEP_PLOT = register(Command(
    "sweep plot", "a chart of a sweep's points (PNG or SVG)",
    "Draw a sweep's stored points: `line` (a metric against one axis, one line per value of "
    "another), `heatmap` (a metric over two axes), `pareto` (two metrics and their Pareto "
    "front).", PLOT_OPTIONS, plot_work, wrote_text, hardware=False,
    outputs=("-o", "--output"), progress=True))


COMPARE = register(Command(
    "compare", "one command under two hardware descriptions, side by side",
    "Run one simulating command on two hardware descriptions, A and B, and show every "
    "numeric figure of the two JSON reports side by side (emu compare --help).",
    COMPARE_OPTIONS, compare_work, compare_text, hardware=False, parse_words=compare_words,
    usage="emu compare [options] -- COMMAND [ARGS ...]"))
