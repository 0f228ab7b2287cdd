"""`emu zoo list` and `emu zoo export`: the networks of `emu.nn.zoo`, built on the spot.

`zoo export` checks the name, sizes and output path before building anything and writes the
ONNX file whole or not at all; the same arguments give a byte-identical file. Neither
simulates anything.
"""

from __future__ import annotations

import argparse
from typing import Any

from emu.commands import Command, Outcome, Progress, register
from emu.commands.dv import ZOO_SIDE, zoo_size
from emu.commands.info import TERMINAL_COLUMNS
from emu.commands.report import Report
from emu.options import SEEDS, Option

ZOO_BATCH = (1, 256)  # emu.nn.zoo.MAX_BATCH (here so that `emu --help` imports no zoo)
ZOO_CLASSES = (1, 100_000)  # emu.nn.zoo.MAX_CLASSES

EXPORT_OPTIONS = (
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


def list_work(resolved: Any, args: argparse.Namespace, progress: Progress | None) -> Outcome:
    from emu.nn import zoo

    return Outcome({"models": [zoo.summary(name) for name in zoo.names()]})


def list_text(report: Report) -> str:
    from emu.report.table import render

    rows = [(s["name"], s["description"].split(" (")[0].split(";")[0],
             "x".join(map(str, s["inputs"][0]["shape"])), len(s["outputs"]),
             s["params"] / 1e6, s["macs"] / 1e9) for s in report["models"]]
    return render(["name", "network", "input", "outputs", "M weights", "GMACs"], rows,
                  title="emu zoo: networks built on the spot (emu zoo export NAME -o FILE.onnx)",
                  width=TERMINAL_COLUMNS, wrap=(1,))


def export_work(resolved: Any, args: argparse.Namespace, progress: Progress | None) -> Outcome:
    from emu.nn import zoo
    from emu.report.document import write_atomic
    from emu.report.outputs import check_file

    zoo.check(args.name, args.input_size, args.batch, args.classes)  # before any work
    target = check_file("-o", args.output)
    write_atomic(target, zoo.build(args.name, args.input_size, args.batch, args.seed,
                                   args.classes).SerializeToString())
    info = zoo.summary(args.name, args.input_size, args.batch, args.classes)
    return Outcome({"file": str(target), "model": info}, args.seed, written=(str(target),))


def export_text(report: Report) -> str:
    info = report["model"]
    return (f"wrote {report['file']}: {info['name']}, input "
            f"{'x'.join(map(str, info['inputs'][0]['shape']))}, {len(info['outputs'])} "
            f"output(s), {info['params']:,} weights, {info['macs'] / 1e9:.3f} GMACs, "
            f"seed {report.arguments['seed']}")


ZOO_LIST = register(Command(
    "zoo list", "every network with its default input, outputs, weights and MACs",
    "Every network of the zoo (ResNet, MobileNet, EfficientNet-lite, YOLOv8, UNet, "
    "CenterPoint-PointPillars and the topologies of the onnx package's test data) with its "
    "default input, outputs, weights and MACs.", (), list_work, list_text, hardware=False))

ZOO_EXPORT = register(Command(
    "zoo export", "write one network as an ONNX file",
    "Write zoo network NAME as an ONNX file, whole or not at all. The same name, size, batch "
    "and seed give a byte-identical file.", EXPORT_OPTIONS, export_work, export_text,
    hardware=False, outputs=("-o", "--output")))
