"""`emu dsp cv`: the DSP's CV operators on an image, one or all of them.

    emu dsp cv OP [--input IMAGE] [operator options] [-o OUT] [--core any|0|1] [--json]
    emu dsp cv --all [--input IMAGE] [--json]

The operator table (`emu.vdsp.ops.cv`) is read only when `emu dsp cv` is parsed, so that
`emu --help` stays instant: each operator's options are its parameters (`cv.Param`) as
`Option`s (a field `ksizeX` is the option `--ksize-x`, with the field's bounds, choices and
default), and an operator with more than one input takes the others as `--NAME FILE`
(`--map-x maps.npy`). Without `--input` the standard test image is used. The run itself is
`emu.workloads.dsp_cv`'s.
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path
from typing import Any

from emu.commands import Command, Outcome, Progress, register, trace_path, write_trace
from emu.commands.report import Report, plain
from emu.errors import InputError, UsageError
from emu.options import Option

INT32 = (-(2**31), 2**31 - 1)

OPTIONS = (
    Option("all", bool, False, "run every operator on the image with its default options, as "
                               "the sample's run script does"),
    Option("input", str, None, "the image (.png, .pgm, .ppm, or .npy); default: the standard "
                               "640x480 test image shipped with emu", metavar="IMAGE"),
    Option("output", str, None, "write the output image (.png/.pgm/.ppm for uint8 grey or "
                                "RGB, .npy for any)", flags=("-o", "--output"), metavar="OUT"),
    Option("core", str, "any", "dspCoreId of the call (default any)", choices=("any", "0", "1")),
)

REPORTS = (
    "values.*", "op", "cmd", "inputs.*", "output", "core", "rpc_ms", "compute_ms",
    "idma_in_ms", "idma_out_ms", "total_ms", "kernel_cycles", "cycles_per_pixel", "bundles",
    "gather_cycles", "kernel_calls", "idma_in_bytes", "idma_out_bytes", "idma_descriptors",
    "tcm_high_water_bytes.*")


def _flag(name: str) -> str:
    return "--" + re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower().replace("_", "-")


def _reals(count: int) -> Any:
    def parse(text: str) -> tuple[float, ...]:
        try:
            values = tuple(float(v) for v in text.split(","))
        except ValueError:
            values = ()
        if len(values) != count or not all(math.isfinite(v) for v in values):
            raise ValueError(f"expected {count} comma-separated finite numbers, got {text!r}")
        return values
    return parse


def param_option(p: Any) -> Option:
    """An operator's parameter (`cv.Param`) as an option, `param_<field>` in code."""
    name, flags = f"param_{p.name}", (_flag(p.name),)
    if p.kind == "choice":
        default = next(n for n, v in p.choices if v == p.default)
        return Option(name, str, default, f"{p.help} (default {default})", flags=flags,
                      choices=tuple(n for n, _ in p.choices))
    if p.kind == "reals":
        text = ",".join(f"{v:g}" for v in p.default)
        return Option(name, str, p.default, f"{p.help} (default {text})", flags=flags,
                      metavar=f"{p.count} NUMBERS", parse=_reals(p.count))
    if p.kind == "int":
        bounds = (int(max(p.low, INT32[0])), int(min(p.high, INT32[1])))
        return Option(name, int, p.default, p.help, bounds, flags=flags,
                      metavar=p.name.upper())
    return Option(name, float, float(p.default), p.help, (float(p.low), float(p.high)),
                  flags=flags, metavar=p.name.upper(), show_range=True)


def operator_options(args: argparse.Namespace | None) -> tuple[Option, ...]:
    """OP, and once it is known, the operator's own options (its other inputs, then its
    parameters)."""
    from emu.vdsp.ops import cv

    names = tuple(op.name for op in cv.cv_operators())
    found = [Option("op", str, None, "the operator: " + ", ".join(names), choices=names,
                    flags=("op",), metavar="OP")]
    op = None if args is None or not args.op else cv.cv_operator(args.op)
    if op is not None:
        found += [Option(f"input_{name}", str, None, f"the {name} image (.npy or an image "
                                                     f"file); default: the operator's sample "
                                                     f"{name}", flags=(_flag(name),),
                         metavar="FILE") for name in op.inputs[1:]]
        found += [param_option(p) for p in op.params]
    return tuple(found)


def check(args: argparse.Namespace) -> None:
    if args.all == (args.op is not None):
        raise UsageError("emu dsp cv: give one operator OP, or --all")
    if args.all and (args.output or args.trace):
        raise UsageError("emu dsp cv: -o/--output and --trace take one operator's run; not "
                         "with --all")


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


def work(resolved: Any, args: argparse.Namespace, progress: Progress | None) -> Outcome:
    from emu import jit
    from emu.report import outputs
    from emu.report.document import write_atomic
    from emu.runtime import session
    from emu.vdsp.ops import cv
    from emu.workloads import dsp_cv, images

    trace = trace_path(args)
    out_path = None if args.output is None else outputs.check_file(
        "-o/--output", args.output, [args.input] if args.input else [])
    picture = images.read_image(Path(args.input)) if args.input else images.standard()
    if args.all:
        reports = []
        table = cv.cv_operators()
        # The back half of the table's kernels compile on another core meanwhile.
        jit.compile_aside(f"{dsp_cv.__name__}:warm", [op.name for op in table[len(table) // 2:]])
        for op in table:
            # One session per operator, as the sample runs one program per operator: each
            # report's counters and TCM high-water mark are the operator's alone.
            with session.Session(args.preset, args.config, args.overrides):
                _, report = dsp_cv.run_op(op, op.prepare(picture), op.defaults(),
                                          core=args.core)
            reports.append(report)
        shape = "x".join(str(s) for s in picture.shape)
        return Outcome({"input": shape, "operators": reports})
    chosen = cv.cv_operator(args.op)
    assert chosen is not None  # the parser took only the table's names
    op = chosen
    values = {p.name: dict(p.choices)[getattr(args, f"param_{p.name}")] if p.kind == "choice"
              else getattr(args, f"param_{p.name}") for p in op.params}
    inputs = op.prepare(picture)
    for k, name in enumerate(op.inputs[1:], start=1):
        path = getattr(args, f"input_{name}")
        if path is not None:
            inputs[k] = images.read_image(Path(path))
    if out_path is not None:
        _check_output_kind(op, inputs, values, out_path)
    with session.Session(args.preset, args.config, args.overrides,
                         trace=trace is not None) as sess:
        output, report = dsp_cv.run_op(op, inputs, values, core=args.core)
    if out_path is not None:
        write_atomic(out_path, images.image_bytes(output, out_path))
    if trace is not None:
        write_trace(trace, [("", sess.soc.recorder.recording)], {"preset": args.preset})
    return Outcome({"values": plain(values), **report})


_COLUMNS = ["op", "output", "rpc ms", "iDMA in ms", "iDMA out ms", "compute ms", "cycles",
            "cyc/px", "iDMA bytes", "kernel calls", "TCM high-water B"]


def _row(r: dict[str, Any]) -> list[Any]:
    return [r["op"], r["output"], r["rpc_ms"], r["idma_in_ms"], r["idma_out_ms"],
            r["compute_ms"], r["kernel_cycles"], r["cycles_per_pixel"],
            r["idma_in_bytes"] + r["idma_out_bytes"], r["kernel_calls"],
            "/".join(str(b) for b in r["tcm_high_water_bytes"])]


def text(report: Report) -> str:
    from emu.report.document import provenance_line
    from emu.report.table import render

    assert report.provenance is not None
    if "operators" in report.results:
        table = render(_COLUMNS, [_row(r) for r in report["operators"]],
                       title=f"dsp cv --all on a {report['input']} image")
    else:
        table = render(_COLUMNS, [_row(report.results)],
                       title=f"dsp cv {report['op']} on {report['inputs'][0]}")
    return provenance_line(report.provenance) + "\n" + table


DSP_CV = register(Command(
    "dsp cv", "the computer-vision operators on an image (emu dsp cv --help)",
    "Run the DSP's computer-vision operators (the J5 DSP sample's CV library) on an image "
    "through hbDSP: each operator tiles the image through TCM with ping-pong iDMA and "
    "computes with the vDSP ISA emulation; outputs are bit-exact to OpenCV's (see the README "
    "for the floating-point ones). Shows the RPC time, iDMA, compute, cycles per pixel and "
    "the TCM high-water mark. Operator options: emu dsp cv OP --help.",
    OPTIONS, work, text, REPORTS, trace=True, outputs=("-o", "--output", "--trace"),
    more_options=operator_options, check=check, sweepable=True))
