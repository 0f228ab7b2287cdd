"""`emu`: the command-line entry point.

`main(argv) -> int` does the work and never exits, so tests can call it. The commands are
`emu.commands`': this module builds their command lines from the registry, runs them and
prints their reports (`--json`: the report's one envelope; otherwise the command's text),
and maps errors to exit codes. The commands that only show what emu holds (`config show`,
`list`, `ops`, `zoo`) are here, and `sweep` and `compare` are routed to `emu.cli.sweep`.
Heavy modules (numpy, numba, simpy and the models) are imported only when a command runs,
which keeps `emu --help` instant.

Exit status: 0 success; 2 a user error (bad usage, option value, input file, output path or
configuration; one line on stderr naming it), found before any simulation starts where it
can be; 1 anything else; 130 (128 + SIGINT) after Ctrl-C, with the one line
`emu: interrupted`; 141 (128 + SIGPIPE, what a shell reports for a program a closed pipe
stopped) when stdout's reader went away (`emu list | head -1`), with nothing printed. An
interrupted or failed run leaves no partial `--trace` file or `--dump` folder
(`emu.report.outputs`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from emu import __version__, commands
from emu.commands import parse
from emu.commands.dv import ZOO_SIDE, zoo_size
from emu.errors import EmuError, UsageError, UserError
from emu.options import SEEDS, Option
from emu.workloads import scenarios as scenario_registry

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 130, 141
TERMINAL_COLUMNS = 100  # the tables of `config show` and `list` fit this width

ZOO_BATCH = (1, 256)  # emu.nn.zoo.MAX_BATCH
ZOO_CLASSES = (1, 100_000)  # emu.nn.zoo.MAX_CLASSES
__all__ = ["ZOO_BATCH", "ZOO_CLASSES", "ZOO_SIDE", "build_parser", "entry", "main"]

HARDWARE = parse.HARDWARE
JSON = (parse.JSON,)
ZOO_EXPORT = (
    Option("name", str, None, "a name `emu zoo list` shows", flags=("name",), metavar="NAME",
           required=True),
    Option("input_size", str, None, "input height and width (one number for both; default: "
           "the network's usual size; a multiple of its stride for YOLO, UNet and "
           f"CenterPoint; {ZOO_SIDE[0]} to {ZOO_SIDE[1]} pixels a side)", metavar="H,W",
           parse=zoo_size),
    Option("batch", int, None, "batch (default 1)", ZOO_BATCH, metavar="N"),
    Option("seed", int, 0, "seed of the weights", SEEDS, metavar="S"),
    Option("classes", int, None, "outputs of a classifier (resnet, mobilenet, efficientnet; "
           "default 1000)", ZOO_CLASSES, metavar="N"),
    Option("output", str, None, "the file to write; an existing regular file is replaced, a "
           "folder, device, pipe or symbolic link is refused", flags=("-o", "--output"),
           metavar="FILE.onnx", required=True),
)
OPS = (Option("where", str, None, "only the operators placed so",
              choices=("bpu", "cpu", "fold", "refused")), *JSON)


def _sub(parent: Any, name: str, options: Sequence[Option] = (), **kw: Any) -> Any:
    sub = parent.add_parser(name, **kw)
    parse.add_options(sub, options)
    return sub


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, for `emu --help` and the commands this module runs itself.
    The registry's commands are parsed by `emu.commands.parse` once named."""
    parser = parse.Parser(prog="emu", description=(
        "Cycle-approximate emulator of a J5-class automotive AI SoC (2 BPU, 2 vDSP, 8 A55, "
        "DDR, CMA/ION) and its runtime APIs."))
    parser.add_argument("--version", action="version", version=f"emu {__version__}")
    top = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                parser_class=parse.Parser)
    groups: dict[str, Any] = {}

    def group(word: str, help_text: str, metavar: str, description: str | None = None) -> Any:
        if word not in groups:
            sub = top.add_parser(word, help=help_text, description=description)
            groups[word] = sub.add_subparsers(dest=f"{word}_command", metavar=metavar,
                                              required=True, parser_class=parse.Parser)
        return groups[word]

    named = {c.words[0] for c in commands.commands() if len(c.words) == 1}
    for command in commands.commands():
        if len(command.words) > 1 and command.words[0] in named:
            continue  # `dsp cv`: its own options, parsed once named (`emu dsp cv --help`)
        if len(command.words) == 1:
            where = top
        elif command.words[0] == "scenario":
            where = group("scenario", "run a system scenario on the emulated SoC", "NAME")
        else:
            where = group(command.words[0], "DMP's DV700 CNN accelerator through the dmp_dv "
                          "driver", "ACTION", "Networks on the DV700 (the dmp_dv user "
                          "driver, emu/runtime/dmp_dv.py).")
        _sub(where, command.words[-1], command.all_options(), help=command.help,
             description=command.description)
    config = group("config", "show the resolved hardware configuration", "ACTION")
    _sub(config, "show", (*HARDWARE, *JSON),
         help="print every parameter with unit and provenance")
    _sub(top, "list", JSON, help="list presets, scenarios and pluggable policies")
    _sub(top, "ops", OPS,
         help="the ONNX operators emu compile takes: where each runs on J5 and under which "
              "constraints",
         description="Every operator of the J5 operator table that `emu compile` places by: "
                     "bpu (quantised, within the constraints shown; outside them the CPU runs "
                     "it and the compiler says which constraint failed), cpu (float, as ONNX "
                     "defines it), fold (constant folding only), refused (listed as not "
                     "integrated). Operators not in the table are refused too.")
    zoo = group("zoo", "neural networks built on the spot as ONNX files (no download)",
                "ACTION", "A zoo of networks written with onnx.helper (opset 13, NCHW, "
                "float32) with seeded weights: ResNet, MobileNet, EfficientNet-lite, YOLOv8, "
                "UNet, CenterPoint-PointPillars and the topologies of the onnx package's "
                "test data.")
    _sub(zoo, "list", JSON,
         help="every network with its default input, outputs, weights and MACs")
    _sub(zoo, "export", ZOO_EXPORT, help="write one network as an ONNX file",
         description="Write zoo network NAME as an ONNX file, whole or not at all. The same "
                     "name, size, batch and seed give a byte-identical file.")
    # Listed for --help only: `emu sweep ...` and `emu compare ...` are routed before parsing.
    top.add_parser("sweep", help="what-if sweeps over hardware and command options, with a "
                                 "durable store (emu sweep --help)")
    top.add_parser("compare", help="one command under two hardware descriptions, side by "
                                   "side (emu compare --help)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = _main(argv)
        sys.stdout.flush()  # a reader that went away shows here, not as a message at exit
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_BROKEN_PIPE
    except BaseException as exc:
        if not _interrupted(exc):
            raise
        print("emu: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return code


def _interrupted(exc: BaseException) -> bool:
    """Whether `exc` is Ctrl-C's KeyboardInterrupt or was caused by it: one that arrives
    inside compiled code or a simulation step can come out wrapped (a numba kernel raises
    SystemError, SimPy raises a copy of a failed process's exception)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        item = todo.pop()
        if item is None or id(item) in seen:
            continue
        if isinstance(item, KeyboardInterrupt):
            return True
        seen.add(id(item))
        todo += [item.__cause__, item.__context__]
    return False


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush of what the closed pipe
    did not take fails silently instead of printing "Exception ignored"."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (a test's capture)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def _main(argv: Sequence[str] | None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] in (["sweep"], ["compare"]):  # they parse their own words
        from emu.cli import sweep

        return _guarded(lambda: sweep.run(words, _emit_json))
    command = commands.find(words)
    if command is not None:
        return _guarded(lambda: _run(command, words[len(command.words):]))
    return _guarded(lambda: _info(build_parser().parse_args(words)))


def _guarded(run: Callable[[], int]) -> int:
    """Run a command with the exit codes and one-line messages of a user error (2) and a
    failure (1); --help and --version exit 0 here."""
    try:
        return run()
    except UsageError as exc:  # its message names the command
        print(f"{exc}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:  # --help and --version
        return int(exc.code or 0)
    except UserError as exc:
        print(f"emu: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except EmuError as exc:
        print(f"emu: failed: {exc}", file=sys.stderr)
        return EXIT_FAILURE


def _run(command: commands.Command, words: list[str]) -> int:
    """Parse, resolve (configuration errors before any work), run and print one command."""
    args = command.parse(words)
    resolved = command.resolve(args)
    label = command.label(args) if command.label is not None else command.name
    with _progress(args, label) as progress:
        report = command.run(resolved, args, progress)
    for message in report.messages:
        print(f"emu: {message}", file=sys.stderr)
    if args.json:
        _emit_json(report.document())
    else:
        print(command.text(report))
    return EXIT_OK


def _progress(args: argparse.Namespace, label: str) -> Any:
    """The progress bar of a long run (a context manager giving the callback or None)."""
    if not hasattr(args, "quiet"):
        return contextlib.nullcontext(None)
    from emu.report import progress

    return progress.bar(label, progress.wanted(quiet=args.quiet, json_output=args.json,
                                               stdout=sys.stdout, stderr=sys.stderr),
                        sys.stderr)


def _info(args: argparse.Namespace) -> int:
    if args.command == "config":
        return _config_show(args)
    if args.command == "list":
        return _list(args)
    if args.command == "ops":
        return _ops(args)
    return _zoo(args)


def entry() -> None:
    sys.exit(main())


def _emit_json(doc: Any) -> None:
    from emu.report.document import dumps

    sys.stdout.write(dumps(doc))


def _config_show(args: argparse.Namespace) -> int:
    from emu.report.table import render
    from emu.soc.config import format_value, load_config

    resolved = load_config(args.preset, args.config, args.overrides)
    if args.json:  # the blocks, then where each value comes from, as the table says
        _emit_json({**resolved.to_dict(), "provenance": {
            info.key: {"source": source, "description": info.desc}
            for info, _, source in resolved.leaves()}})
        return EXIT_OK
    rows = [(info.key, format_value(info, value), source, info.desc)
            for info, value, source in resolved.leaves()]
    print(render(["key", "value", "source", "description"], rows,
                 title=f"preset {resolved.preset}", width=TERMINAL_COLUMNS, wrap=(2, 3)))
    return EXIT_OK


def _list(args: argparse.Namespace) -> int:
    from emu.mem.ddr import POLICIES
    from emu.nn import zoo
    from emu.report.table import render
    from emu.soc.config import preset_names
    from emu.vdsp import ops

    items = [("preset", name, "hardware preset") for name in preset_names()]
    items += [("scenario", item.name, item.description)
              for item in scenario_registry.scenarios()]
    items += [("ddr.policy", name, desc) for name, (_, desc) in POLICIES.items()]
    items += [("dsp operator", f"{op.cmd:#05x} {op.name}", op.description)
              for op in ops.operators()]
    items += [("zoo model", item.name, item.description) for item in zoo.entries()]
    if args.json:
        _emit_json([{"kind": k, "name": n, "description": d} for k, n, d in items])
    else:
        print(render(["kind", "name", "description"], items, width=TERMINAL_COLUMNS,
                     wrap=(2,)))
    return EXIT_OK


def _ops(args: argparse.Namespace) -> int:
    import textwrap

    from emu.nn import optable

    rows = [(r.op, "refused" if r.where == "unsupported" else r.where,
             "int16" if r.int16 and r.where == "bpu" else "",
             r.constraints + (" [emu's own row]" if r.extension else ""))
            for r in sorted(optable.RULES.values(), key=lambda r: r.op)]
    rows = [row for row in rows if args.where in (None, row[1])]
    if args.json:
        _emit_json([{"op": op, "where": where, "int16": bool(wide), "constraints": text}
                    for op, where, wide, text in rows])
        return EXIT_OK
    width = max(len(row[0]) for row in rows)
    indent = " " * (width + 18)
    print(f"{'operator'.ljust(width)}  where    int16  constraints")
    for op, where, wide, text in rows:
        lines = textwrap.wrap(text, 100 - len(indent)) or [""]
        print(f"{op.ljust(width)}  {where.ljust(7)}  {wide.ljust(5)}  {lines[0]}")
        for line in lines[1:]:
            print(indent + line)
    return EXIT_OK


def _zoo(args: argparse.Namespace) -> int:
    from emu.nn import zoo
    from emu.report.table import render

    if args.zoo_command == "export":
        from emu.report.document import write_atomic
        from emu.report.outputs import check_file

        zoo.check(args.name, args.input_size, args.batch, args.classes)  # before any work
        target = check_file("-o", args.output)
        write_atomic(target, zoo.build(args.name, args.input_size, args.batch, args.seed,
                                       args.classes).SerializeToString())
        info = zoo.summary(args.name, args.input_size, args.batch, args.classes)
        print(f"wrote {target}: {info['name']}, input "
              f"{'x'.join(map(str, info['inputs'][0]['shape']))}, {len(info['outputs'])} "
              f"output(s), {info['params']:,} weights, {info['macs'] / 1e9:.3f} GMACs, "
              f"seed {args.seed}")
        return EXIT_OK
    summaries = [zoo.summary(name) for name in zoo.names()]
    if args.json:
        _emit_json(summaries)
        return EXIT_OK
    rows = [(s["name"], s["description"].split(" (")[0].split(";")[0],
             "x".join(map(str, s["inputs"][0]["shape"])), len(s["outputs"]),
             s["params"] / 1e6, s["macs"] / 1e9) for s in summaries]
    print(render(["name", "network", "input", "outputs", "M weights", "GMACs"], rows,
                 title="emu zoo: networks built on the spot (emu zoo export NAME -o FILE.onnx)"))
    return EXIT_OK
