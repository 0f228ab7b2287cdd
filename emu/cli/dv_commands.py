"""`emu dv run`: an ONNX network (a file or a zoo name) on DMP's DV700 through `dmp_dv`.

The conversion and the run are `emu.workloads.dv_net`'s; this module parses the command
line, checks every argument before any work, and prints the per-command table or the JSON.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from emu.errors import InputError


def add_parsers(commands: Any, parents: list[argparse.ArgumentParser],
                whole: Callable[[int, int], Callable[[str], int]],
                seeds: tuple[int, int], size: Callable[[str], tuple[int, int]]) -> None:
    """The `dv` command and its `run` action (`parents`: hardware and output options;
    `size`: the zoo's H,W argument type)."""
    dv = commands.add_parser(
        "dv", help="DMP's DV700 CNN accelerator through the dmp_dv driver",
        description="Networks on the DV700 (the dmp_dv user driver, emu/runtime/dmp_dv.py).")
    actions = dv.add_subparsers(dest="dv_command", metavar="ACTION", required=True,
                                parser_class=type(dv))
    run = actions.add_parser(
        "run", parents=parents,
        help="run an ONNX network on the DV700, one command per layer",
        description="Import an ONNX model (a file, or a zoo name built on the spot), map each "
                    "layer to a DV700 command (conv with fused ReLU/ReLU6 and pooling, "
                    "pooling runs, element-wise residual adds, FC), pack the weights as "
                    "FP16, run the one command list through dmp_dv and show each command's "
                    "time on the device, the driver's exec time and the FP16 output against "
                    "the float32 reference. Unsupported ops are refused; a trailing Softmax "
                    "is left to the CPU.")
    run.add_argument("model", metavar="MODEL",
                     help="an ONNX file, or a zoo network name (`emu zoo list`)")
    run.add_argument("--input-size", type=size, metavar="H,W",
                     help="a zoo network's input height and width (one number for both; "
                          "default: the network's usual size)")
    run.add_argument("--input", metavar="FILE.npy",
                     help="the input: float32 NCHW of batch 1 (default: standard normal, "
                          "drawn with --seed)")
    run.add_argument("--seed", type=whole(*seeds), default=0, metavar="S",
                     help=f"seed of the random input and of a zoo network's weights "
                          f"({seeds[0]} to {seeds[1]}, default 0)")


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


def run_dv(args: argparse.Namespace, resolve: Callable[[], Any],
           emit_json: Callable[[Any], None]) -> int:
    resolved = resolve()  # configuration errors before any work
    x = _input(args.input)
    model, label = _model(args)

    from emu.report.document import provenance, provenance_line
    from emu.runtime.session import Session
    from emu.workloads import dv_net

    with Session(args.preset, args.config, args.overrides):
        try:
            results = dv_net.run_network(model, x, args.seed)
        except InputError as exc:
            if args.input is not None and str(exc).startswith("input"):
                raise InputError(f"--input {args.input}: {exc}") from None
            raise
    doc = {"model": label, **results, "provenance": provenance(resolved, args.seed)}
    if args.json:
        emit_json(doc)
        return 0
    print(provenance_line(doc["provenance"]))
    print(text(doc))
    return 0


def text(doc: dict[str, Any]) -> str:
    """The run as a table, one line per command, and its totals."""
    from emu.report.table import render

    counts = doc["command_counts"]
    lines = [f"{doc['model']}: {len(doc['commands'])} DV700 commands ({counts['conv']} conv, "
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
