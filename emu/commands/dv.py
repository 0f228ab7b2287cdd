"""`emu dv run`: an ONNX network (a file or a zoo name) on DMP's DV700 through `dmp_dv`.

The conversion and the run are `emu.workloads.dv_net`'s; this module declares the command,
checks every argument before any work, and makes the per-command table.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from emu.commands import Command, Outcome, Progress, register, trace_path, write_trace
from emu.commands.report import Report
from emu.errors import InputError
from emu.options import SEEDS, Option

ZOO_SIDE = (1, 4096)  # pixels per side of a zoo model's input (emu.nn.zoo.MAX_SIDE)


def zoo_size(text: str) -> tuple[int, int]:
    """A converter: H,W (or one number for both), each within ZOO_SIDE."""
    try:
        sides = tuple(int(part) for part in text.split(","))
    except ValueError:
        sides = ()
    if len(sides) == 1:
        sides = sides * 2
    if len(sides) != 2 or not all(ZOO_SIDE[0] <= side <= ZOO_SIDE[1] for side in sides):
        raise ValueError(f"expected H,W: two whole numbers from {ZOO_SIDE[0]} to "
                         f"{ZOO_SIDE[1]}, got {text!r}")
    return sides[0], sides[1]


OPTIONS = (
    Option("model", str, None, "an ONNX file, or a zoo network name (`emu zoo list`)",
           flags=("model",), metavar="MODEL", required=True),
    Option("input_size", str, None, "a zoo network's input height and width (one number for "
           "both; default: the network's usual size)", metavar="H,W", parse=zoo_size),
    Option("input", str, None, "the input: float32 NCHW of batch 1 (default: standard normal, "
           "drawn with --seed)", metavar="FILE.npy"),
    Option("seed", int, 0, "seed of the random input and of a zoo network's weights", SEEDS,
           metavar="S"),
)

REPORTS = (
    "model", "commands.*.index", "commands.*.name", "commands.*.kind",
    "commands.*.device_us", "command_counts.*", "device_us", "exec_time_us",
    "wall_time_us", "memory.buffers", "memory.weight_bytes", "memory.activation_bytes",
    "output.fp16_sha256", "output.check.cosine", "output.check.max_abs_diff",
    "output.check.max_abs_reference", "output.top5.*.class", "output.top5.*.score", "seed")


def _model(args: argparse.Namespace) -> tuple[Any, str]:
    """The ONNX model (bytes of a file, or a zoo ModelProto) and how to name it."""
    path = Path(args.model)
    if path.is_file() or args.model.lower().endswith(".onnx") or "/" in args.model:
        if args.input_size is not None:
            raise InputError(f"--input-size applies to zoo networks; {args.model} has its "
                             "own input shape")
        if path.is_dir():
            raise InputError(f"{args.model}: is a folder")
        if not path.is_file():
            raise InputError(f"{args.model}: no such file")
        return str(path), str(path)  # the importer reads it and names it in its errors
    from emu.nn import zoo

    item, size, _ = zoo.check(args.model, args.input_size)
    return zoo.build(args.model, size, seed=args.seed), f"{item.name} {size[0]}x{size[1]}"


def _input(path: str | None) -> Any:
    if path is None:
        return None
    import io

    import numpy as np

    try:
        data = Path(path).read_bytes()
    except IsADirectoryError:
        raise InputError(f"--input {path}: is a folder") from None
    except OSError as exc:
        raise InputError(f"--input {path}: cannot read: {exc.strerror}") from None
    try:
        value = np.load(io.BytesIO(data), allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InputError(f"--input {path}: not a .npy file ({exc})") from None
    if not isinstance(value, np.ndarray):
        raise InputError(f"--input {path}: an .npz archive; give one .npy array")
    return value


def work(resolved: Any, args: argparse.Namespace, progress: Progress | None) -> Outcome:
    trace = trace_path(args)
    x = _input(args.input)
    model, label = _model(args)

    from emu.runtime.session import Session
    from emu.workloads import dv_net

    with Session(args.preset, args.config, args.overrides, trace=trace is not None) as sess:
        try:
            results = dv_net.run_network(model, x, args.seed)
        except InputError as exc:
            if args.input is not None and str(exc).startswith("input"):
                raise InputError(f"--input {args.input}: {exc}") from None
            raise
    if trace is not None:
        write_trace(trace, [("", sess.soc.recorder.recording)], {"preset": args.preset})
    return Outcome({"model": label, **results}, args.seed)


def text(report: Report) -> str:
    """The run as a table, one line per command, and its totals."""
    from emu.report.document import provenance_line
    from emu.report.table import render

    doc = report.results
    assert report.provenance is not None

    counts = doc["command_counts"]
    lines = [provenance_line(report.provenance),
             f"{doc['model']}: {len(doc['commands'])} DV700 commands ({counts['conv']} conv, "
             f"{counts['fc']} fc) in one command list, input {tuple(doc['input']['shape'])}"]
    rows = [(c["index"], c["name"] + (" +" + "+".join(c["nodes"][1:]) if c["nodes"][1:]
                                      else "") + (" (+residual)" if c["residual"] else ""),
             c["kind"], "x".join(str(d) for d in c["output_shape"]), float(c["device_us"]))
            for c in doc["commands"]]
    lines.append(render(["#", "command (folded nodes)", "kind", "output CxHxW", "device us"],
                        rows))
    lines.append(f"device time, sum of the commands: {doc['device_us']:.2f} us")
    lines.append(f"dmp_dv_cmdlist_get_last_exec_time: {doc['exec_time_us']} us (kick to "
                 "the wait's return)")
    lines.append(f"simulated time from exec to the wait's return: {doc['wall_time_us']:.2f} us")
    if doc["cpu_ops"]:
        lines.append(f"left to the CPU (float32, after the device): {', '.join(doc['cpu_ops'])}")
    out = doc["output"]
    if out["top5"]:
        lines.append("top-5: " + ", ".join(f"{t['class']} ({t['score']:.4f})"
                                           for t in out["top5"]))
    check = out["check"]
    lines.append(f"FP16 device output vs the float32 reference: cosine {check['cosine']:.6f}, "
                 f"max |diff| {check['max_abs_diff']:.4g} (largest |reference| "
                 f"{check['max_abs_reference']:.4g})")
    return "\n".join(lines)


DV_RUN = register(Command(
    "dv run", "run an ONNX network on the DV700, one command per layer",
    "Import an ONNX model (a file, or a zoo name built on the spot), map each layer to a "
    "DV700 command (conv with fused ReLU/ReLU6 and pooling, pooling runs, element-wise "
    "residual adds, FC), pack the weights as FP16, run the one command list through dmp_dv "
    "and show each command's time on the device, the driver's exec time and the FP16 output "
    "against the float32 reference. Unsupported ops are refused; a trailing Softmax is left "
    "to the CPU.", OPTIONS, work, text, REPORTS, trace=True, outputs=("--trace",), sweepable=True))
