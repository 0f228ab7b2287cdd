"""`emu`: the command-line entry point.

`main(argv) -> int` does the work and never exits, so tests can call it. Heavy modules
(numpy, numba, simpy and the models) are imported inside the command handlers, which keeps
`emu --help` instant.

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
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from emu import __version__
from emu.errors import EmuError, UserError
from emu.workloads import scenarios as scenario_registry

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 130, 141

# The accepted range of each numeric option. Values outside are refused before any work,
# naming the flag and the range: they are typing mistakes, or runs that would not end or
# not fit in memory.
SEEDS = (0, 2**32 - 1)
SYNTHETIC_FRAMES = (1, 1000)  # the frames are generated up front: 6 MB each by default
POINTS_PER_FRAME = (1, 1_000_000)  # the models keep at most 300,000 (CenterPoint)
POINT_COLUMNS = (1, 64)  # float32 values per point of a --input file
DSP_RPCS = (1, 1000)
DSP_PRIORITY = (0, 255)
DSP_MAX_AXES = 4
ZOO_SIDE = (1, 4096)  # pixels per side of a zoo model's input (emu.nn.zoo.MAX_SIDE)
ZOO_BATCH = (1, 256)  # emu.nn.zoo.MAX_BATCH
ZOO_CLASSES = (1, 100_000)  # emu.nn.zoo.MAX_CLASSES
# Scenario options, with their ranges, come from the registry (emu/workloads/scenarios.py).


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error raises instead of exiting, so main() owns the exit code."""

    def error(self, message: str) -> Any:
        raise _UsageError(f"{self.prog}: {message}")


class _UsageError(Exception):
    pass


def _whole(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from `low` to `high`."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"expected a whole number from {low} to {high}, got {text!r}")
        return value
    return parse


def _real(low: float, high: float) -> Callable[[str], float]:
    """An argparse type: a finite number from `low` to `high` (no NaN or infinity)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(
                f"expected a number from {low:g} to {high:g}, got {text!r}")
        return value
    return parse


def _span(bounds: tuple[float, float]) -> str:
    """A range as the help shows it: whole numbers in full, others short."""
    return " to ".join(str(b) if isinstance(b, int) else f"{b:g}" for b in bounds)


def _hardware_options() -> _Parser:
    common = _Parser(add_help=False)
    hw = common.add_argument_group("hardware")
    hw.add_argument("--preset", default="j5", help="hardware preset (default: j5)")
    hw.add_argument("--config", metavar="FILE.toml", help="partial config layered over the preset")
    hw.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override one parameter, e.g. vdsp.freq_hz=800e6 (repeatable)")
    return common


def _output_options(trace: bool) -> _Parser:
    common = _Parser(add_help=False)
    out = common.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="one JSON document on stdout")
    if trace:
        out.add_argument("--trace", metavar="FILE",
                         help="write a Chrome trace-event JSON of the run (opens in Perfetto) "
                              "when it completes; an existing regular file is replaced, a "
                              "folder, device, pipe or symbolic link is refused")
    return common


def _progress_options() -> _Parser:
    common = _Parser(add_help=False)
    common.add_argument("--quiet", action="store_true",
                        help="no progress bar (there is none anyway when stderr is not a "
                             "terminal, or with --json going to a file or pipe)")
    return common


def _progress(args: argparse.Namespace, label: str) -> Any:
    """The progress bar of a long run (a context manager giving the callback or None)."""
    from emu.report import progress

    return progress.bar(label, progress.wanted(quiet=args.quiet, json_output=args.json,
                                               stdout=sys.stdout, stderr=sys.stderr),
                        sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="emu", description=(
        "Cycle-approximate emulator of a J5-class automotive AI SoC (2 BPU, 2 vDSP, 8 A55, "
        "DDR, CMA/ION) and its runtime APIs."))
    parser.add_argument("--version", action="version", version=f"emu {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                     parser_class=_Parser)
    hardware = _hardware_options()

    pc = commands.add_parser(
        "pointcloud", parents=[hardware, _output_options(trace=True), _progress_options()],
        help="CenterPoint / PointPillars preprocessing on CPU and DSP, compared",
        description="Pillar preprocessing of LiDAR frames by the CPU reference and the two "
                    "DSP schemes on the emulated SoC: identical outputs, simulated time per "
                    "stage, and the avg/max/min table per implementation.")
    pc.add_argument("--model", choices=["centerpoint", "pointpillars"], required=True)
    pc.add_argument("--impl", action="append", choices=["cpu", "dsp1", "dsp2"],
                    help="implementation (repeatable; default: all three)")
    source = pc.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", nargs="+", metavar="FILE.bin",
                        help="raw little-endian float32 point files: *.pcd.bin with 5 "
                             "values a point (nuScenes: x, y, z, intensity, ring), any other "
                             "*.bin with the model's (5 for centerpoint: x, y, z, intensity, "
                             "t; 4 for pointpillars: x, y, z, reflectance), a warning when a "
                             "4-value file seems read as 5; the model takes the first 5 or 4; "
                             "a file with fewer exits 2")
    source.add_argument("--synthetic", type=_whole(*SYNTHETIC_FRAMES), metavar="N_FRAMES",
                        help="generate N realistic frames (nuScenes-like or KITTI-like; "
                             f"{_span(SYNTHETIC_FRAMES)})")
    pc.add_argument("--columns", type=_whole(*POINT_COLUMNS), metavar="N",
                    help="values per point of every --input file, whatever the names say "
                         f"({_span(POINT_COLUMNS)}), e.g. 4 for a KITTI file given to "
                         "pointpillars as *.pcd.bin, or 6 for a file with an extra value")
    pc.add_argument("--points", type=_whole(*POINTS_PER_FRAME),
                    help=f"points per synthetic frame ({_span(POINTS_PER_FRAME)})")
    pc.add_argument("--seed", type=_whole(*SEEDS), default=0,
                    help=f"seed of the synthetic frames ({_span(SEEDS)}, default 0)")
    pc.add_argument("--dump", metavar="DIR",
                    help="write features and coords per frame/impl into DIR, which must be "
                         "new or an empty folder; it appears only when the run completes")
    pc.add_argument("--dump-format", choices=["npy", "txt", "both"], default="npy",
                    help="npy arrays, the board's text form (one integer a line), or both")

    calibrate = commands.add_parser(
        "calibrate", parents=[hardware, _output_options(trace=False), _progress_options()],
        help="predicted vs measured J5 timings (shared/calibration/j5.md) and the error",
        description="Run the calibration targets (CenterPoint preprocessing, 16 synthetic "
                    "300,000-point frames, seed 0) on the chosen hardware and print each "
                    "target's measured value, the prediction and the error, with the "
                    "statistics of the frames used. The fit itself: tools/fit_j5.py.")
    calibrate.add_argument(
        "--cross-validate", action="store_true",
        help="also fit the free parameters (FREE in "
             "emu/workloads/pointcloud/calibration.py; nothing is written) from the chosen "
             "hardware's values, then leave each target out in turn, refit the rest and "
             "predict it: prints the fit's sensitivity matrix, its rank and conditioning, and "
             "each target's fit error beside its left-out prediction error (about "
             "a dozen runs of the targets: several minutes)")

    config = commands.add_parser("config", help="show the resolved hardware configuration")
    config_cmds = config.add_subparsers(dest="config_command", metavar="ACTION", required=True,
                                        parser_class=_Parser)
    config_cmds.add_parser("show", parents=[hardware, _output_options(trace=False)],
                           help="print every parameter with unit and provenance")

    commands.add_parser("list", parents=[_output_options(trace=False)],
                        help="list presets, scenarios and pluggable policies")

    ops = commands.add_parser(
        "ops", parents=[_output_options(trace=False)],
        help="the ONNX operators emu compile takes: where each runs on J5 and under which "
             "constraints",
        description="Every operator of the J5 operator table that `emu compile` places by: "
                    "bpu (quantised, within the constraints shown; outside them the CPU runs "
                    "it and the compiler says which constraint failed), cpu (float, as ONNX "
                    "defines it), fold (constant folding only), refused (listed as not "
                    "integrated). Operators not in the table are refused too.")
    ops.add_argument("--where", choices=["bpu", "cpu", "fold", "refused"],
                     help="only the operators placed so")

    scenario = commands.add_parser("scenario", help="run a system scenario on the emulated SoC")
    scenarios = scenario.add_subparsers(dest="scenario", metavar="NAME", required=True,
                                        parser_class=_Parser)
    for item in scenario_registry.scenarios():
        sub = scenarios.add_parser(item.name, parents=[hardware, _output_options(trace=True),
                                                       _progress_options()],
                                   help=item.description.split(";")[0],
                                   description=item.description)
        for option in item.options:
            flag = "--" + option.name.replace("_", "-")  # options[name] in code, --name-x
            if option.kind is bool:
                sub.add_argument(flag, dest=option.name, action="store_true", help=option.help)
                continue
            bounds = option.bounds
            kind: Callable[[str], Any] = option.kind
            if option.kind is int:
                kind = _whole(int(bounds[0]), int(bounds[1]))
            elif option.kind is float:
                kind = _real(*bounds)
            sub.add_argument(flag, dest=option.name, type=kind, default=option.default,
                             help=f"{option.help} ({_span(bounds)}, default {option.default})")

    dsp = commands.add_parser(
        "dsp", parents=[hardware, _output_options(trace=True)],
        help="run a DSP operator on generated data through hbSys/hbDSP",
        description="Run one vDSP operator on generated data as a host program would (pool "
                    "buffers, cache clean, hbDSPRpc, wait, invalidate) and show where the "
                    "simulated time goes: RPC, iDMA in, compute, iDMA out.")
    dsp.add_argument("op", choices=["softmax", "quantize", "dequantize", "ping", "cv"],
                     help="the operator; cv: the computer-vision operators on an image, "
                          "see `emu dsp cv --help`")
    dsp.add_argument("--shape", type=_shape, default=(64, 1000),
                     help=f"tensor shape, 1 to {DSP_MAX_AXES} sizes, e.g. 64,1000 (default); "
                          "the tensors of all calls must fit in the pool (mem.pool_bytes)")
    dsp.add_argument("--axis", type=int, default=-1, help="softmax / per-axis axis (default -1)")
    dsp.add_argument("--dtype", choices=["int8", "uint8"], default="int8",
                     help="quantised type (default int8)")
    dsp.add_argument("--mode", choices=["scale", "shift"], default="scale",
                     help="hbDNN quantisation type (default scale)")
    dsp.add_argument("--per-axis", action="store_true", help="one scale per slice of --axis")
    dsp.add_argument("--core", choices=["any", "0", "1"], default="any",
                     help="dspCoreId of the calls (default any)")
    dsp.add_argument("--rpcs", type=_whole(*DSP_RPCS), default=1,
                     help=f"concurrent calls ({_span(DSP_RPCS)}, default 1)")
    dsp.add_argument("--priority", type=_whole(*DSP_PRIORITY), default=0,
                     help=f"priority of the calls ({_span(DSP_PRIORITY)}, default 0)")
    dsp.add_argument("--seed", type=_whole(*SEEDS), default=0,
                     help=f"seed of the generated data ({_span(SEEDS)}, default 0)")

    zoo = commands.add_parser(
        "zoo", help="neural networks built on the spot as ONNX files (no download)",
        description="A zoo of networks written with onnx.helper (opset 13, NCHW, float32) "
                    "with seeded weights: ResNet, MobileNet, EfficientNet-lite, YOLOv8, "
                    "UNet, CenterPoint-PointPillars and the topologies of the onnx "
                    "package's test data.")
    zoo_cmds = zoo.add_subparsers(dest="zoo_command", metavar="ACTION", required=True,
                                  parser_class=_Parser)
    zoo_cmds.add_parser("list", parents=[_output_options(trace=False)],
                        help="every network with its default input, outputs, weights and MACs")
    export = zoo_cmds.add_parser(
        "export", help="write one network as an ONNX file",
        description="Write zoo network NAME as an ONNX file, whole or not at all. The same "
                    "name, size, batch and seed give a byte-identical file.")
    export.add_argument("name", metavar="NAME", help="a name `emu zoo list` shows")
    export.add_argument("--input-size", type=_zoo_size, metavar="H,W",
                        help="input height and width (one number for both; default: the "
                             "network's usual size; a multiple of its stride for YOLO, UNet "
                             f"and CenterPoint; {_span(ZOO_SIDE)} pixels a side)")
    export.add_argument("--batch", type=_whole(*ZOO_BATCH), default=None, metavar="N",
                        help=f"batch ({_span(ZOO_BATCH)}, default 1)")
    export.add_argument("--seed", type=_whole(*SEEDS), default=0, metavar="S",
                        help=f"seed of the weights ({_span(SEEDS)}, default 0)")
    export.add_argument("--classes", type=_whole(*ZOO_CLASSES), default=None, metavar="N",
                        help="outputs of a classifier (resnet, mobilenet, efficientnet; "
                             f"{_span(ZOO_CLASSES)}, default 1000)")
    export.add_argument("-o", "--output", required=True, metavar="FILE.onnx",
                        help="the file to write; an existing regular file is replaced, a "
                             "folder, device, pipe or symbolic link is refused")
    from emu.cli import nn_commands

    nn_commands.add_parsers(
        commands, [hardware, _output_options(trace=False), _progress_options()],
        _whole, _real, SEEDS)
    from emu.cli import dv_commands

    dv_commands.add_parsers(commands, [hardware, _output_options(trace=False)], _whole, SEEDS,
                            _zoo_size)
    # Listed for --help only: `emu sweep ...` is routed to emu.sweep.command before parsing.
    commands.add_parser("sweep", help="what-if sweeps over hardware and command options, "
                                      "with a durable store (emu sweep --help)")
    commands.add_parser("compare", help="one command under two hardware descriptions, side "
                                        "by side (emu compare --help)")
    return parser


def _zoo_size(text: str) -> tuple[int, int]:
    """An argparse type: H,W (or one number for both), each within ZOO_SIDE."""
    try:
        sides = tuple(int(part) for part in text.split(","))
    except ValueError:
        sides = ()
    if len(sides) == 1:
        sides = sides * 2
    if len(sides) != 2 or not all(ZOO_SIDE[0] <= side <= ZOO_SIDE[1] for side in sides):
        raise argparse.ArgumentTypeError(f"expected H,W: two whole numbers from "
                                         f"{_span(ZOO_SIDE)}, got {text!r}")
    return sides[0], sides[1]


def _shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(part) for part in text.split(","))
    except ValueError:
        shape = ()
    if not 1 <= len(shape) <= DSP_MAX_AXES or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"expected 1 to {DSP_MAX_AXES} positive sizes like "
                                         f"64,1000, got {text!r}")
    return shape


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
    if words[:2] == ["dsp", "cv"]:  # its options come from the operator table: parsed there
        return _dsp_cv(words[2:])
    if words[:1] == ["sweep"]:  # emu.sweep parses its own actions
        return _sweep(words[1:])
    if words[:1] == ["compare"]:  # its command follows `--`: parsed there
        from emu.sweep import compare

        return _self_parsing(lambda: compare.run_compare(words[1:], _emit_json))
    parser = build_parser()
    try:
        args = parser.parse_args(words)
    except _UsageError as exc:
        print(f"{exc}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:  # --help and --version
        return int(exc.code or 0)
    try:
        if args.command == "config":
            return _config_show(args)
        if args.command == "list":
            return _list(args)
        if args.command == "dsp":
            return _dsp(args)
        if args.command == "pointcloud":
            return _pointcloud(args)
        if args.command == "calibrate":
            return _calibrate(args)
        if args.command == "zoo":
            return _zoo(args)
        if args.command == "ops":
            return _ops(args)
        if args.command == "compile":
            from emu.cli import nn_commands

            return nn_commands.run_compile(args, lambda: _resolve(args),
                                           lambda label: _progress(args, label), _emit_json)
        if args.command == "perf":
            from emu.cli import nn_commands

            return nn_commands.run_perf(args, lambda: _resolve(args), _emit_json)
        if args.command == "infer":
            from emu.cli import nn_commands

            return nn_commands.run_infer(args, lambda: _resolve(args), _emit_json)
        if args.command == "dv":
            from emu.cli import dv_commands

            return dv_commands.run_dv(args, lambda: _resolve(args), _emit_json)
        return _scenario(args)
    except UserError as exc:
        print(f"emu: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except EmuError as exc:
        print(f"emu: failed: {exc}", file=sys.stderr)
        return EXIT_FAILURE


def _dsp_cv(words: list[str]) -> int:
    from emu.cli import cv_commands

    def check_file(flag: str, path: str) -> Path:
        from emu.report import outputs

        return outputs.check_file(flag, path)

    return _self_parsing(lambda: cv_commands.run_cv(
        words, _Parser, [_hardware_options(), _output_options(True)], _whole, _real, _resolve,
        check_file, _emit_json))


def _sweep(words: list[str]) -> int:
    from emu.sweep import command

    return _self_parsing(lambda: command.run_sweep_cli(words, _Parser, _whole, _emit_json))


def _self_parsing(run: Callable[[], int]) -> int:
    """Run a command that parses its own words (`dsp cv`, `sweep`, `compare`), with the exit
    codes and one-line messages of `_main`."""
    try:
        return run()
    except _UsageError as exc:
        print(f"{exc}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except UserError as exc:
        print(f"emu: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except EmuError as exc:
        print(f"emu: failed: {exc}", file=sys.stderr)
        return EXIT_FAILURE


def entry() -> None:
    sys.exit(main())


def _resolve(args: argparse.Namespace) -> Any:
    from emu.soc.config import load_config

    return load_config(args.preset, args.config, args.overrides)


def _outputs(args: argparse.Namespace) -> tuple[Path | None, Path | None]:
    """The `--trace` file and `--dump` folder, checked before any work (the rules are
    `emu.report.outputs`'s), or None for each not asked for."""
    from emu.errors import InputError
    from emu.report import outputs

    trace = None if args.trace is None else outputs.check_file("--trace", args.trace)
    dump_path = getattr(args, "dump", None)
    dump = None if dump_path is None else outputs.check_folder("--dump", dump_path)
    if (trace is not None and dump is not None
            and os.path.abspath(trace) == os.path.abspath(dump)):
        raise InputError(f"--trace {args.trace}: is the --dump folder too")
    return trace, dump


def _emit_json(doc: Any) -> None:
    from emu.report.document import dumps

    sys.stdout.write(dumps(doc))


def _config_show(args: argparse.Namespace) -> int:
    from emu.report.table import render
    from emu.soc.config import format_value

    resolved = _resolve(args)
    if args.json:  # the blocks, then where each value comes from, as the table says
        _emit_json({**resolved.to_dict(), "provenance": {
            info.key: {"source": source, "description": info.desc}
            for info, _, source in resolved.leaves()}})
        return EXIT_OK
    rows = [(info.key, format_value(info, value), source, info.desc)
            for info, value, source in resolved.leaves()]
    print(render(["key", "value", "source", "description"], rows,
                 title=f"preset {resolved.preset}"))
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
        print(render(["kind", "name", "description"], items))
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


def _calibrate(args: argparse.Namespace) -> int:
    from emu.report.document import provenance, provenance_line
    from emu.report.table import render
    from emu.workloads import bpu_calibration
    from emu.workloads.pointcloud import calibration

    resolved = _resolve(args)
    prov = provenance(resolved, seed=0)  # the calibration frames' seed
    run = calibration.cross_validation_report if args.cross_validate \
        else calibration.calibration_report
    with _progress(args, "calibrate") as progress:
        report = {**run(args.preset, args.overrides, args.config, progress), "provenance": prov}
    report["bpu_targets"] = bpu_calibration.report(resolved.soc)
    if args.json:
        _emit_json(report)
        return EXIT_OK
    print(provenance_line(prov))
    rows = [(t["target"] + ("" if t["fitted"] else " (not fitted)"), t["measured"],
             t["predicted"], t["unit"], f"{t['error']:+.1%}", f"{t['tolerance']:.0%}",
             "yes" if t["within"] else "NO") for t in report["targets"]]
    print(render(["target", "measured", "predicted", "unit", "error", "tolerance", "within"],
                 rows, title=f"J5 calibration, preset {args.preset}"))
    stats = report["frame_statistics"]
    print(f"\nframes: {stats['frames']} synthetic nuScenes-like frames of "
          f"{stats['points_per_frame']} points; valid points {stats['valid_points']}; "
          f"pillars {stats['pillars']}; kept points per pillar "
          f"{stats['kept_points_per_pillar']}")
    bpu_rows = [(t["name"], t["target"], t["model"], t["unit"], f"{t['error']:+.1%}", t["use"])
                for t in report["bpu_targets"]]
    print(render(["BPU target (J5 hb_perf estimates)", "target", "model", "unit", "error",
                  "use"], bpu_rows, title=f"J5 BPU calibration, preset {args.preset} "
                                          "(tools/fit_j5_bpu.py)"))
    if args.cross_validate:
        from emu.workloads.pointcloud import fitting

        print(f"\n{fitting.fit_text(report['fit'])}\n")
        print(fitting.cross_validation_text({**report["fit"],
                                             "cross_validation": report["cross_validation"]}))
    return EXIT_OK


def _pointcloud(args: argparse.Namespace) -> int:
    import contextlib

    from emu.errors import InputError
    from emu.report.document import dumps, provenance, provenance_line, write_atomic
    from emu.report.outputs import staged_folder
    from emu.report.table import render
    from emu.report.trace import chrome_trace_many
    from emu.workloads import lidar
    from emu.workloads.pointcloud import runner
    from emu.workloads.pointcloud.params import MODELS

    trace, dump = _outputs(args)  # bad output paths and configuration stop the run before
    resolved = _resolve(args)     # any work
    params = MODELS[args.model]
    impls = list(dict.fromkeys(args.impl or ["cpu", "dsp1", "dsp2"]))
    if args.synthetic is not None:
        if args.columns is not None:
            raise InputError("--columns applies to --input files only")
        frames = runner.synthetic(params, args.synthetic, args.seed, args.points)
    else:
        if args.points is not None:
            raise InputError("--points applies to --synthetic frames only")
        frames = runner.frames_from_files(args.input, params, args.columns)
    for frame in frames:
        if frame.columns > params.dims:
            print(f"emu: note: {frame.name}: {frame.columns} values a point, {args.model} "
                  f"reads the first {params.dims}", file=sys.stderr)
        odd = lidar.implausible_times(frame.points) if frame.columns == 5 else 0.0
        if odd > 0.5:
            print(f"emu: warning: {frame.name}: read as 5 values a point, but the 5th (t) is "
                  f"outside -1..1 s for {odd:.0%} of the points: if the file has 4 values a "
                  f"point (KITTI), give --columns 4", file=sys.stderr)
        if frame.points_dropped:
            print(f"emu: warning: {frame.name}: only the first {params.max_input_points} points "
                  f"are processed, {frame.points_dropped} dropped", file=sys.stderr)
    trace_text = None
    with contextlib.ExitStack() as stack:  # the dump is written aside, in place at the end
        staged = None if dump is None else stack.enter_context(staged_folder(dump))
        with _progress(args, args.model) as progress:
            report, sessions = runner.run(args.model, impls, frames, preset=args.preset,
                                          config_file=args.config, overrides=args.overrides,
                                          trace=trace is not None,
                                          dump=None if staged is None else str(staged),
                                          dump_format=args.dump_format, progress=progress)
        if trace is not None:
            trace_text = dumps(chrome_trace_many(
                [(impl, s.soc.recorder.recording)
                 for impl, s in zip(impls, sessions, strict=True)],
                {"preset": args.preset, "model": args.model}))
    if trace is not None and trace_text is not None:  # after the dump: it may go inside it
        write_atomic(trace, trace_text)
    for frame in report["frames"]:
        if frame["points_dropped_max_pillars"]:
            print(f"emu: warning: {frame['frame']}: {frame['cells']} cells, more than max "
                  f"pillars {params.max_pillars}: the cells past it share the last pillar, "
                  f"{frame['points_dropped_max_pillars']} points dropped", file=sys.stderr)
    prov = provenance(resolved, args.seed if args.synthetic is not None else None)
    report["provenance"] = prov
    if args.json:
        _emit_json(report)
        return EXIT_OK
    print(provenance_line(prov))
    rows = []
    for frame in report["frames"]:
        for impl in impls:
            entry = frame["impls"][impl]
            stages = ", ".join(f"{k} {v:.3f}" for k, v in entry["stages"].items())
            rows.append((frame["frame"], impl, entry["total_ms"], stages))
    print(render(["frame", "impl", "total ms", "stages (ms)"], rows,
                 title=f"{args.model} preprocessing, preset {args.preset}"))
    print()
    print(render(["impl", "avg ms", "max ms", "min ms"],
                 [(impl, s["avg_ms"], s["max_ms"], s["min_ms"])
                  for impl, s in report["summary"].items()],
                 title=f"single-thread, single-frame latency over {len(frames)} frame(s)"))
    print()
    print(render(["frame", "read", "valid", "kept", "pillars", "cells", "drop: input cap",
                  "drop: pillar cap", "drop: pillar full"],
                 [(f["frame"], f["points_read"], f["points_valid"], f["points_kept"],
                   f["pillars"], f["cells"], f["points_dropped"],
                   f["points_dropped_max_pillars"], f["points_dropped_max_points_per_pillar"])
                  for f in report["frames"]],
                 title=f"points per frame; dropped past the input cap of "
                       f"{params.max_input_points} points, by the pillar cap of "
                       f"{params.max_pillars} (the cells past it share the last pillar), in "
                       f"pillars full at {params.max_points_per_pillar} points"))
    print(f"\noutputs identical across {', '.join(impls)}; wall {report['wall_s']:.1f} s")
    return EXIT_OK


def _dsp(args: argparse.Namespace) -> int:
    from emu.errors import InputError
    from emu.report.document import dumps, provenance, provenance_line, write_atomic
    from emu.report.table import render
    from emu.report.trace import chrome_trace
    from emu.runtime import session
    from emu.workloads import dsp_ops

    if args.op == "cv":
        raise InputError("emu dsp cv takes every option after `cv`: emu dsp cv OP [options] "
                         "(see emu dsp cv --help)")
    trace, _ = _outputs(args)  # bad output paths, configuration and sizes stop the run
    resolved = _resolve(args)  # before any work
    run = dsp_ops.DspRun(args.op, args.shape, args.axis, args.dtype, args.mode, args.per_axis,
                         args.core, args.rpcs, args.priority, args.seed)
    _check_pool(run, resolved.soc.mem)
    with session.Session(args.preset, args.config, args.overrides,
                         trace=trace is not None) as sess:
        result = dsp_ops.execute(run)
    failed = [call["error"] for call in result["rpcs"] if call["status"] != "ok"]
    if failed:
        raise InputError(f"dsp {run.op}: {failed[0]}")
    prov = provenance(resolved, args.seed)
    result = {"preset": args.preset, **result, "provenance": prov}
    if trace is not None:
        write_atomic(trace, dumps(chrome_trace(sess.soc.recorder.recording,
                                               {"preset": args.preset})))
    if args.json:
        _emit_json(result)
        return EXIT_OK
    print(provenance_line(prov))
    rows = [(c["core"], c["compute_ms"], c["kernel_cycles"], c["bundles"], c["gather_cycles"],
             c["fdiv_stall_cycles"], c["idma_in_ms"], c["idma_in_bytes"], c["idma_out_ms"],
             c["idma_out_bytes"]) for c in result["cores"]]
    print(render(["core", "compute ms", "cycles", "bundles", "gather cyc", "fdiv stall",
                  "iDMA in ms", "in bytes", "iDMA out ms", "out bytes"], rows,
                 title=f"dsp {run.op} {'x'.join(map(str, run.shape))} on preset {args.preset}"))
    for k, call in enumerate(result["rpcs"]):
        print(f"call {k}: core {call['core']}, {call['status']}, done after "
              f"{call['latency_ms']:.3f} ms" + (f" ({call['error']})" if call["error"] else ""))
    print(f"RPC overhead per call {result['rpc_overhead_ms']:.3f} ms; calls took "
          f"{result['calls_ms']:.3f} ms; with buffer set-up and cache maintenance "
          f"{result['total_ms']:.3f} ms")
    return EXIT_OK


def _check_pool(run: Any, mem: Any) -> None:
    """Refuse a --shape whose buffers, over all --rpcs calls, the pool (`mem`, the
    configuration's) could not hold, before any data is generated or allocated."""
    from emu.errors import InputError
    from emu.workloads import dsp_ops

    needed = dsp_ops.pool_bytes(run, mem.alignment_bytes)
    if needed > mem.pool_bytes:
        calls = f" over --rpcs {run.rpcs} calls" if run.rpcs > 1 else ""
        raise InputError(f"--shape {','.join(map(str, run.shape))}: {run.op} needs "
                         f"{needed} B of pool memory for its buffers{calls}, more than "
                         f"mem.pool_bytes ({mem.pool_bytes} B)")


def _scenario(args: argparse.Namespace) -> int:
    import importlib

    from emu.report.document import dumps, provenance_line, session_report, write_atomic
    from emu.report.table import render
    from emu.report.trace import chrome_trace

    trace, _ = _outputs(args)  # bad output paths and configuration stop the run before
    resolved = _resolve(args)  # any work
    item = next(s for s in scenario_registry.scenarios() if s.name == args.scenario)
    module = importlib.import_module(item.module)
    options = {option.name: getattr(args, option.name) for option in item.options}
    with _progress(args, f"scenario {item.name}") as progress:
        results, sess = module.run_scenario(options, args.preset, args.config,
                                            args.overrides, trace is not None, progress)
    report = session_report(sess, f"scenario {item.name}", results, options.get("seed"))
    if trace is not None:
        write_atomic(trace, dumps(chrome_trace(sess.soc.recorder.recording,
                                               {"preset": resolved.preset})))
    if args.json:
        _emit_json(report)
        return EXIT_OK
    title, headers, rows, notes = module.summary(results)
    print(provenance_line(report["provenance"]))
    print(render(headers, rows, title=title))
    stats = report["stats"]
    moved = stats["ddr"].get("bytes_read", 0) + stats["ddr"].get("bytes_written", 0)
    for note in [*notes, f"DDR moved {moved / 1e6:.1f} MB; pool high water "
                         f"{stats['pool']['high_water_bytes'] / 2**20:.1f} MiB"]:
        print(note)
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
