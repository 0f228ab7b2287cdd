"""`emu sweep` and `emu compare`: the command line of what-if sweeps.

    emu sweep run SPEC.toml [--workers N | --dask ADDRESS | --dask-local N]
                  [--store FILE.sqlite] [--resume] [--json] [--quiet]
    emu sweep show SPEC.toml [--store FILE.sqlite] [--columns A,B,...] [--json]
    emu sweep export SPEC.toml [--store FILE.sqlite] [--columns A,B,...] -o FILE.csv|.parquet
    emu sweep plot SPEC.toml [--store FILE.sqlite] KIND ... [--where AXIS=VALUE ...]
                   -o FILE.png|.svg
        KIND: line --x AXIS --y METRIC [--series AXIS] | heatmap --x AXIS --y AXIS
              --metric METRIC | pareto --a METRIC --b METRIC [--maximize-a] [--maximize-b]

`run` checks the whole spec, then runs its points (local worker processes by default) with
a progress bar on stderr, and prints a table of each point's axes and metrics, or with
`--json` one document: `{"command", "args", "store", "metrics", "points": [{"axes",
"metrics", "status", "error", "key"}, ...] in spec order, "provenance"}`. The store defaults
to a file beside the spec named after it (`sweeps/freq.toml` -> `sweeps/freq.sqlite`), so
every sweep is durable without asking; see `emu.sweep` for what `--resume` does. Points
that fail are listed after the table (on stderr with `--json`), and the exit status is 1.

`show`, `export` and `plot` read a sweep back from its store and run nothing (a point not
stored yet shows as missing): a table, a CSV or Parquet file (`emu.sweep.outputs`), a chart
(`emu.report.sweep_plots`: a metric against one axis with one line per value of another, a
heat map over two axes, the Pareto front of two metrics). Axes a chart does not draw must be
fixed with `--where`. Files are written whole or not at all.

`emu.cli.main` routes `emu sweep ...` and `emu compare ...` here (`run`), with its JSON
printer. Each sweep action is one `_add_*` function building its sub-parser and one `_*`
function running it, listed in `_ACTIONS`. A sweep with a failed point exits 1 after its
table (the points that ran are stored).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from emu.commands.parse import Parser, argument_type
from emu.errors import InputError
from emu.options import whole as whole_number

MAX_WORKERS = 256
EXIT_POINTS_FAILED = 1

Whole = Callable[[int, int], Callable[[str], int]]
EmitJson = Callable[[Any], None]


def run(words: list[str], emit_json: EmitJson) -> int:
    """`emu sweep ...` or `emu compare ...` (`words` from the command's name on)."""
    if words[0] == "compare":
        return _compare(words[1:], emit_json)
    return run_sweep_cli(words[1:], emit_json)


def _compare(words: list[str], emit_json: EmitJson) -> int:
    """`emu compare WORDS...`: prints the comparison; a user error raises UserError."""
    from emu.sweep import compare

    args, a, b, command = compare.parse(words)  # --help: SystemExit(0)
    doc = compare.compare(a, b, command)
    if args.json:
        emit_json(doc)
    else:
        print(compare.text(doc, a, b, args.only_different))
    return 0


def _whole(low: int, high: int) -> Callable[[str], int]:
    return argument_type(whole_number(low, high), "N")


def run_sweep_cli(words: list[str], emit_json: EmitJson) -> int:
    """Parse `emu sweep` arguments (`words`: what follows `sweep`) and run the action."""
    parser_class = Parser
    whole = _whole
    parser = parser_class(prog="emu sweep", description=(
        "What-if sweeps: one simulating command over a grid or a sample of hardware "
        "configurations and command options, each point's metrics collected, every finished "
        "point kept in a SQLite store."))
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True,
                                    parser_class=parser_class)
    for add, _ in _ACTIONS.values():
        add(actions, whole)
    args = parser.parse_args(words)
    _, action = _ACTIONS[args.action]
    return action(args, emit_json)


def _add_run(actions: Any, whole: Whole) -> None:
    run = actions.add_parser(
        "run", help="run a sweep spec (TOML) and print each point's metrics",
        description="Check the whole spec, then run each point not already in the store; "
                    "each finished point is stored at once, so a killed sweep loses none.")
    run.add_argument("spec", metavar="SPEC.toml", help="the sweep spec")
    where = run.add_mutually_exclusive_group()
    where.add_argument("--workers", type=whole(1, MAX_WORKERS), default=None, metavar="N",
                       help=f"local worker processes (1 to {MAX_WORKERS}, default 1)")
    where.add_argument("--dask", metavar="ADDRESS",
                       help="run the points on a Dask scheduler at ADDRESS (the sweep extra)")
    where.add_argument("--dask-local", type=whole(1, MAX_WORKERS), metavar="N",
                       help="run the points on a local Dask cluster of N workers (the sweep "
                            "extra)")
    run.add_argument("--store", metavar="FILE.sqlite",
                     help="the store (default: the spec's name with .sqlite, beside it)")
    run.add_argument("--resume", action="store_true",
                     help="finish an interrupted run of this sweep in the store")
    run.add_argument("--json", action="store_true", help="one JSON document on stdout")
    run.add_argument("--quiet", action="store_true", help="no progress bar")


def _run(args: argparse.Namespace, emit_json: EmitJson) -> int:
    import emu.sweep
    from emu.report import progress
    from emu.report.table import render
    from emu.sweep import spec as spec_module

    spec = spec_module.load(args.spec)
    store = Path(args.store) if args.store else Path(args.spec).with_suffix(".sqlite")
    if store.resolve() == Path(args.spec).resolve():
        raise InputError(f"--store {store}: is the spec itself")
    executor = _dask(args)
    try:
        enabled = progress.wanted(quiet=args.quiet, json_output=args.json, stdout=sys.stdout,
                                  stderr=sys.stderr)
        with progress.bar("sweep", enabled, sys.stderr) as update:
            rows = emu.sweep.run(spec, workers=args.workers or 1, store=store,
                                 resume=args.resume, executor=executor, progress=update)
    finally:
        if executor is not None:
            executor.close()
    failed = [(k, r) for k, r in enumerate(rows, start=1) if r["status"] != "ok"]
    if args.json:
        emit_json(_document(spec, rows, store))
    else:
        print(_provenance_line(spec))
        names = [a.name for a in spec.axes]
        headers = ["#", *names, *spec.metrics, "status"]
        table = [(k, *(r["axes"][n] for n in names),
                  *(_cell(r["metrics"][m]) for m in spec.metrics),
                  r["status"] + (" (stored)" if r["cached"] else ""))
                 for k, r in enumerate(rows, start=1)]
        print(render(headers, table, title=f"sweep {spec.where}: {spec.command} "
                                           f"{' '.join(spec.args)}".rstrip()))
        print(f"{len(rows)} points, {sum(r['cached'] for r in rows)} from the store; "
              f"store {store}")
    for k, row in failed:
        print(f"emu: point {k} failed: {row['error']}", file=sys.stderr)
    return EXIT_POINTS_FAILED if failed else 0


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


def _cell(value: Any) -> Any:
    if value is None:
        return "-"
    if isinstance(value, int | float | str):  # booleans are ints
        return value
    return str(value)


def _provenance_line(spec: Any) -> str:
    parts = [f"preset {spec.preset}"]
    if spec.config_file:
        parts.append(f"config {spec.config_file}")
    if spec.overrides:
        parts.append("--set " + " ".join(spec.overrides))
    parts.append(f"axes {spec.mode}" + (f" ({spec.method}, {spec.samples} samples, seed "
                                        f"{spec.seed})" if spec.mode == "random" else ""))
    return "; ".join(parts)


def _document(spec: Any, rows: list[dict[str, Any]], store: Path) -> dict[str, Any]:
    import emu.sweep
    from emu.report.document import provenance
    from emu.soc.config import load_config

    prov = provenance(load_config(spec.preset, spec.config_file, spec.overrides))
    prov["sweep"] = emu.sweep.describe(spec)["axes"]
    return {"command": spec.command, "args": list(spec.args), "store": str(store),
            "metrics": dict(spec.metrics),
            "points": [{"axes": r["axes"], "metrics": r["metrics"], "status": r["status"],
                        "error": r["error"], "key": r["key"]} for r in rows],
            "provenance": prov}


def _add_stored(parser: Any) -> None:
    parser.add_argument("spec", metavar="SPEC.toml", help="the sweep spec")
    parser.add_argument("--store", metavar="FILE.sqlite",
                        help="the store (default: the spec's name with .sqlite, beside it)")


def _columns(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected column names separated by commas, got "
                                         f"{text!r}")
    return names


def _where(text: str) -> tuple[str, str]:
    axis, sep, wanted = text.partition("=")
    if not sep or not axis:
        raise argparse.ArgumentTypeError(f"expected AXIS=VALUE, got {text!r}")
    return axis, wanted


def _stored_rows(args: argparse.Namespace) -> tuple[Any, list[dict[str, Any]], Path]:
    import emu.sweep
    from emu.sweep import spec as spec_module

    spec = spec_module.load(args.spec)
    store = Path(args.store) if args.store else Path(args.spec).with_suffix(".sqlite")
    return spec, emu.sweep.stored(spec, store), store


def _add_show(actions: Any, whole: Whole) -> None:
    show = actions.add_parser("show", help="a sweep's points as its store holds them",
                              description="Print a sweep's points from its store (nothing "
                                          "runs; points not stored show as missing).")
    _add_stored(show)
    show.add_argument("--columns", type=_columns, metavar="A,B,...",
                      help="axes, metrics or fields (status, error, key, seconds) to show")
    show.add_argument("--json", action="store_true", help="one JSON document on stdout")


def _show(args: argparse.Namespace, emit_json: EmitJson) -> int:
    from emu.sweep import outputs

    spec, rows, store = _stored_rows(args)
    if args.json:
        names, values = outputs.records(rows, args.columns)
        emit_json({"store": str(store), "columns": names,
                   "points": [dict(zip(names, line, strict=True)) for line in values]})
        return 0
    print(outputs.table(rows, args.columns, title=f"sweep {spec.where} in {store}"))
    return 0


def _add_export(actions: Any, whole: Whole) -> None:
    export = actions.add_parser("export", help="a sweep's points as CSV or Parquet",
                                description="Write a sweep's stored points as CSV (.csv) or "
                                            "Parquet (.parquet, needs pyarrow).")
    _add_stored(export)
    export.add_argument("--columns", type=_columns, metavar="A,B,...",
                        help="axes, metrics or fields to write (default: axes, metrics, "
                             "status)")
    export.add_argument("-o", "--output", required=True, metavar="FILE",
                        help="FILE.csv or FILE.parquet")


def _export(args: argparse.Namespace, emit_json: EmitJson) -> int:
    from emu.report import outputs as paths
    from emu.sweep import outputs

    target = paths.check_file("-o/--output", args.output)
    suffix = target.suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise InputError(f"-o {args.output}: expected a .csv or .parquet file")
    _, rows, _ = _stored_rows(args)
    if suffix == ".csv":
        outputs.write_csv(rows, target, args.columns)
    else:
        outputs.write_parquet(rows, target, args.columns)
    return 0


def _add_plot(actions: Any, whole: Whole) -> None:
    plot = actions.add_parser("plot", help="a chart of a sweep's points (PNG or SVG)",
                              description="Draw a sweep's stored points: `line` (a metric "
                                          "against one axis, one line per value of another), "
                                          "`heatmap` (a metric over two axes), `pareto` (two "
                                          "metrics and their Pareto front).")
    _add_stored(plot)
    plot.add_argument("kind", choices=["line", "heatmap", "pareto"], help="the chart")
    plot.add_argument("--x", metavar="AXIS", help="line, heatmap: the horizontal axis")
    plot.add_argument("--y", metavar="NAME",
                      help="line: the metric drawn; heatmap: the vertical axis")
    plot.add_argument("--series", metavar="AXIS", help="line: one line per value of this axis")
    plot.add_argument("--metric", metavar="METRIC", help="heatmap: the metric in the cells")
    plot.add_argument("--a", metavar="METRIC", help="pareto: the first metric")
    plot.add_argument("--b", metavar="METRIC", help="pareto: the second metric")
    plot.add_argument("--maximize-a", action="store_true", help="pareto: more of a is better")
    plot.add_argument("--maximize-b", action="store_true", help="pareto: more of b is better")
    plot.add_argument("--where", type=_where, action="append", default=[],
                      metavar="AXIS=VALUE", help="keep the points with this axis value "
                                                 "(repeatable)")
    plot.add_argument("-o", "--output", required=True, metavar="FILE",
                      help="FILE.png or FILE.svg")


def _plot(args: argparse.Namespace, emit_json: EmitJson) -> int:
    from emu.report import outputs as paths
    from emu.report import sweep_plots
    from emu.report.document import write_atomic
    from emu.sweep import outputs

    target = paths.check_file("-o/--output", args.output)
    fmt = target.suffix.lower().lstrip(".")
    if fmt not in ("png", "svg"):
        raise InputError(f"-o {args.output}: expected a .png or .svg file")
    needed = {"line": ("x", "y"), "heatmap": ("x", "y", "metric"), "pareto": ("a", "b")}
    missing = [f"--{n}" for n in needed[args.kind] if getattr(args, n) is None]
    if missing:
        raise InputError(f"plot {args.kind}: needs {', '.join(missing)}")
    spec, stored, _ = _stored_rows(args)
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
    print(f"wrote {target}")
    return 0


# The sub-actions: name -> (add its parser, run it), in the order `emu sweep --help` lists
# them.
_ACTIONS: dict[str, tuple[Callable[[Any, Whole], None],
                          Callable[[argparse.Namespace, EmitJson], int]]] = {
    "run": (_add_run, _run),
    "show": (_add_show, _show),
    "export": (_add_export, _export),
    "plot": (_add_plot, _plot),
}
