"""`emu dsp cv`: the DSP's CV operators on an image, one or all of them.

    emu dsp cv OP [--input IMAGE] [operator options] [-o OUT] [--core any|0|1] [--json]
    emu dsp cv --all [--input IMAGE] [--json]

The operator table (`emu.vdsp.ops.cv`) is read only here, when `emu dsp cv` runs, so that
`emu --help` stays instant: each operator's options are made from its parameters (a field
`ksizeX` is the option `--ksize-x`, with the field's bounds, choices and default), and an
operator with more than one input takes the others as `--NAME FILE` (`--map-x maps.npy`).
Without `--input` the standard test image is used. Every argument is checked before any
work; the run itself is `emu.workloads.dsp_cv`'s.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from emu.errors import InputError

MAX_CHOICE_NAME = 32


def _flag(name: str) -> str:
    return "--" + re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower().replace("_", "-")


def _reals(count: int) -> Callable[[str], tuple[float, ...]]:
    def parse(text: str) -> tuple[float, ...]:
        try:
            values = tuple(float(v) for v in text.split(","))
        except ValueError:
            values = ()
        if len(values) != count or not all(v == v and abs(v) != float("inf") for v in values):
            raise argparse.ArgumentTypeError(f"expected {count} comma-separated finite "
                                             f"numbers, got {text!r}")
        return values
    return parse


def _parser(parser_class: type[argparse.ArgumentParser],
            parents: list[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    from emu.vdsp.ops import cv

    ops = cv.cv_operators()
    parser = parser_class(
        prog="emu dsp cv", parents=parents, add_help=False,
        description="Run the DSP's computer-vision operators (the J5 DSP sample's CV "
                    "library) on an image through hbDSP: each operator tiles the image "
                    "through TCM with ping-pong iDMA and computes with the vDSP ISA "
                    "emulation; outputs are bit-exact to OpenCV's (see the README for the "
                    "floating-point ones). Shows the RPC time, iDMA, compute, cycles per "
                    "pixel and the TCM high-water mark. Operator options: emu dsp cv OP "
                    "--help.")
    parser.add_argument("op", nargs="?", metavar="OP", choices=[op.name for op in ops],
                        help="the operator: " + ", ".join(op.name for op in ops))
    parser.add_argument("--all", action="store_true",
                        help="run every operator on the image with its default options, as "
                             "the sample's run script does")
    parser.add_argument("--input", metavar="IMAGE",
                        help="the image (.png, .pgm, .ppm, or .npy); default: the standard "
                             "640x480 test image shipped with emu")
    parser.add_argument("-o", "--output", metavar="OUT",
                        help="write the output image (.png/.pgm/.ppm for uint8 grey or RGB, "
                             ".npy for any)")
    parser.add_argument("--core", choices=["any", "0", "1"], default="any",
                        help="dspCoreId of the call (default any)")
    return parser


def _op_parser(op: Any, base: argparse.ArgumentParser,
               whole: Callable[[int, int], Callable[[str], int]],
               real: Callable[[float, float], Callable[[str], float]]) -> argparse.ArgumentParser:
    parser = type(base)(prog=f"emu dsp cv {op.name}", parents=[base], add_help=False,
                        description=f"{op.description}. Calls hbDSP{op.c_name}.")
    group = parser.add_argument_group(f"{op.name} options")
    for name in op.inputs[1:]:
        group.add_argument(_flag(name), dest=f"input_{name}", metavar="FILE",
                           help=f"the {name} image (.npy or an image file); default: the "
                                f"operator's sample {name}")
    for p in op.params:
        flag, dest = _flag(p.name), f"param_{p.name}"
        if p.kind == "choice":
            group.add_argument(flag, dest=dest, choices=[n for n, _ in p.choices],
                               default=next(n for n, v in p.choices if v == p.default),
                               help=f"{p.help} (default %(default)s)")
        elif p.kind == "reals":
            default = ",".join(f"{v:g}" for v in p.default)
            group.add_argument(flag, dest=dest, type=_reals(p.count), default=p.default,
                               metavar=f"{p.count} NUMBERS",
                               help=f"{p.help} (default {default})")
        elif p.kind == "int":
            low = int(max(p.low, -(2**31)))
            high = int(min(p.high, 2**31 - 1))
            group.add_argument(flag, dest=dest, type=whole(low, high), default=p.default,
                               metavar=p.name.upper(),
                               help=f"{p.help} ({low} to {high}, default {p.default})")
        else:
            span = ("any finite number" if p.low == -math.inf and p.high == math.inf
                    else f"{p.low:g} to {p.high:g}")
            group.add_argument(flag, dest=dest, type=real(p.low, p.high), default=p.default,
                               metavar=p.name.upper(),
                               help=f"{p.help} ({span}, default {p.default:g})")
    return parser


def run_cv(argv: list[str], parser_class: type[argparse.ArgumentParser],
           parents: list[argparse.ArgumentParser],
           whole: Callable[[int, int], Callable[[str], int]],
           real: Callable[[float, float], Callable[[str], float]],
           resolve: Callable[[argparse.Namespace], Any], outputs: Callable[..., Any],
           emit_json: Callable[[Any], None]) -> int:
    from emu.vdsp.ops import cv

    base = _parser(parser_class, parents)
    first, _ = base.parse_known_args([a for a in argv if a not in ("-h", "--help")])
    op = cv.cv_operator(first.op) if first.op else None
    parser = _op_parser(op, base, whole, real) if op is not None else base
    parser.add_argument("-h", "--help", action="help", help="show this help and exit")
    args = parser.parse_args(argv)
    if args.all == (args.op is not None):
        parser.error("give one operator OP, or --all")
    if args.all and (args.output or args.trace):
        parser.error("-o/--output and --trace take one operator's run; not with --all")
    trace = None if args.trace is None else outputs("--trace", args.trace)
    out_path = None if args.output is None else outputs("-o/--output", args.output)
    resolved = resolve(args)
    from emu.workloads import images

    picture = images.read_image(Path(args.input)) if args.input else images.standard()
    if args.all:
        return _run_all(args, resolved, picture, emit_json)
    assert op is not None
    values = {p.name: dict(p.choices)[getattr(args, f"param_{p.name}")] if p.kind == "choice"
              else getattr(args, f"param_{p.name}") for p in op.params}
    inputs = op.prepare(picture)
    for k, name in enumerate(op.inputs[1:], start=1):
        path = getattr(args, f"input_{name}")
        if path is not None:
            inputs[k] = images.read_image(Path(path))
    if out_path is not None:
        _check_output_kind(op, inputs, values, out_path)
    return _run_one(args, resolved, op, inputs, values, trace, out_path, emit_json)


def _check_output_kind(op: Any, inputs: list[Any], values: dict[str, Any], path: Path) -> None:
    """Refuse an output file type that cannot hold the operator's output, before any work."""
    from emu.vdsp.ops import image_args

    records = [image_args.Image(a.shape[1], a.shape[0], a.shape[2] if a.ndim == 3 else 1,
                                image_args.type_code(a.dtype), a.nbytes // a.shape[0], 0)
               for a in inputs]
    try:
        width, height, channels, etype, _ = op.output(records, values)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    if path.suffix.lower() != ".npy" and (etype != image_args.TYPE_U8
                                          or channels not in (1, 3)):
        raise InputError(f"-o {path}: the {op.name} output is "
                         f"{image_args.Image(width, height, channels, etype, 0, 0).describe()}; "
                         f"write it as .npy")


_COLUMNS = ["op", "output", "rpc ms", "iDMA in ms", "iDMA out ms", "compute ms", "cycles",
            "cyc/px", "iDMA bytes", "kernel calls", "TCM high-water B"]


def _row(r: dict[str, Any]) -> list[Any]:
    return [r["op"], r["output"], r["rpc_ms"], r["idma_in_ms"], r["idma_out_ms"],
            r["compute_ms"], r["kernel_cycles"], r["cycles_per_pixel"],
            r["idma_in_bytes"] + r["idma_out_bytes"], r["kernel_calls"],
            "/".join(str(b) for b in r["tcm_high_water_bytes"])]


def _run_one(args: argparse.Namespace, resolved: Any, op: Any, inputs: list[Any],
             values: dict[str, Any], trace: Path | None, out_path: Path | None,
             emit_json: Callable[[Any], None]) -> int:
    from emu.report.document import dumps, provenance, provenance_line, write_atomic
    from emu.report.table import render
    from emu.report.trace import chrome_trace
    from emu.runtime import session
    from emu.workloads import dsp_cv, images

    with session.Session(args.preset, args.config, args.overrides,
                         trace=trace is not None) as sess:
        output, report = dsp_cv.run_op(op, inputs, values, core=args.core)
    if out_path is not None:
        write_atomic(out_path, images.image_bytes(output, out_path))
    if trace is not None:
        write_atomic(trace, dumps(chrome_trace(sess.soc.recorder.recording,
                                               {"preset": args.preset})))
    prov = provenance(resolved)
    doc = {"preset": args.preset, "values": _plain(values), **report, "provenance": prov}
    if args.json:
        emit_json(doc)
        return 0
    print(provenance_line(prov))
    print(render(_COLUMNS, [_row(report)],
                 title=f"dsp cv {op.name} on {report['inputs'][0]}"))
    return 0


def _run_all(args: argparse.Namespace, resolved: Any, picture: Any,
             emit_json: Callable[[Any], None]) -> int:
    from emu.report.document import provenance, provenance_line
    from emu.report.table import render
    from emu.runtime import session
    from emu.vdsp.ops import cv
    from emu.workloads import dsp_cv

    reports = []
    for op in cv.cv_operators():
        # One session per operator, as the sample runs one program per operator: each
        # report's counters and TCM high-water mark are the operator's alone.
        with session.Session(args.preset, args.config, args.overrides):
            _, report = dsp_cv.run_op(op, op.prepare(picture), op.defaults(), core=args.core)
        reports.append(report)
    prov = provenance(resolved)
    shape = "x".join(str(s) for s in picture.shape)
    if args.json:
        emit_json({"preset": args.preset, "input": shape, "operators": reports,
                   "provenance": prov})
        return 0
    print(provenance_line(prov))
    print(render(_COLUMNS, [_row(r) for r in reports],
                 title=f"dsp cv --all on a {shape} image"))
    return 0


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}
