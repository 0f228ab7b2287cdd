"""`emu config show`, `emu list` and `emu ops`: what emu holds, shown; nothing simulated.

`config show` resolves the hardware its options describe and reports it: the configuration
blocks at the top (`cpu`, `bpu`, `vdsp`, `ddr`, `mem`: the public contract) and where each
value comes from under `sources`; its envelope does not repeat the configuration
(`Command.embed_config`). `list` reports the presets, scenarios, DDR policies, DSP operators
and zoo networks as `items`; `ops` the ONNX operator table `emu compile` places by as
`operators`. Their tables fit `TERMINAL_COLUMNS`.
"""

from __future__ import annotations

import argparse
import textwrap
from typing import Any

from emu.commands import Command, Outcome, Progress, register
from emu.commands.report import Report
from emu.options import Option

TERMINAL_COLUMNS = 100  # the tables of `config show`, `list` and `ops` fit this width
OPS_PLACES = ("bpu", "cpu", "fold", "refused")


def config_work(resolved: Any, args: argparse.Namespace, progress: Progress | None) -> Outcome:
    """The configuration blocks, then where each value comes from, as the table says."""
    sources = {info.key: {"source": source, "description": info.desc}
               for info, _, source in resolved.leaves()}
    return Outcome({**resolved.to_dict(), "sources": sources})


def config_text(report: Report) -> str:
    from emu.report.table import render
    from emu.soc.config import format_value, schema_fields

    rows = []
    for info in schema_fields():
        value: Any = report.results
        for part in info.key.split("."):
            value = value[part]
        source = report["sources"][info.key]
        rows.append((info.key, format_value(info, value), source["source"], info.desc))
    return render(["key", "value", "source", "description"], rows,
                  title=f"preset {report.preset}", width=TERMINAL_COLUMNS, wrap=(2, 3))


def list_work(resolved: Any, args: argparse.Namespace, progress: Progress | None) -> Outcome:
    from emu.mem.ddr import POLICIES
    from emu.nn import zoo
    from emu.soc.config import preset_names
    from emu.vdsp import ops
    from emu.workloads import scenarios

    items = [("preset", name, "hardware preset") for name in preset_names()]
    items += [("scenario", item.name, item.description) for item in scenarios.scenarios()]
    items += [("ddr.policy", name, desc) for name, (_, desc) in POLICIES.items()]
    items += [("dsp operator", f"{op.cmd:#05x} {op.name}", op.description)
              for op in ops.operators()]
    items += [("zoo model", item.name, item.description) for item in zoo.entries()]
    return Outcome({"items": [{"kind": k, "name": n, "description": d} for k, n, d in items]})


def list_text(report: Report) -> str:
    from emu.report.table import render

    return render(["kind", "name", "description"],
                  [(i["kind"], i["name"], i["description"]) for i in report["items"]],
                  width=TERMINAL_COLUMNS, wrap=(2,))


def ops_work(resolved: Any, args: argparse.Namespace, progress: Progress | None) -> Outcome:
    from emu.nn import optable

    rows = [{"op": r.op, "where": "refused" if r.where == "unsupported" else r.where,
             "int16": bool(r.int16 and r.where == "bpu"),
             "constraints": r.constraints + (" [emu's own row]" if r.extension else "")}
            for r in sorted(optable.RULES.values(), key=lambda r: r.op)]
    return Outcome({"operators": [row for row in rows if args.where in (None, row["where"])]})


def ops_text(report: Report) -> str:
    rows = report["operators"]
    width = max(len(row["op"]) for row in rows)
    indent = " " * (width + 18)
    lines = [f"{'operator'.ljust(width)}  where    int16  constraints"]
    for row in rows:
        wrapped = textwrap.wrap(row["constraints"], TERMINAL_COLUMNS - len(indent)) or [""]
        wide = "int16" if row["int16"] else ""
        lines.append(f"{row['op'].ljust(width)}  {row['where'].ljust(7)}  {wide.ljust(5)}  "
                     f"{wrapped[0]}")
        lines += [indent + line for line in wrapped[1:]]
    return "\n".join(lines)


CONFIG_SHOW = register(Command(
    "config show", "print every parameter with unit and provenance",
    "Resolve the hardware (--preset, --config, --set) and print every parameter with its "
    "value, unit, where it comes from and what it is. --json: the configuration blocks at "
    "the top, each key's source and description under `sources`.",
    (), config_work, config_text, embed_config=False))

LIST = register(Command(
    "list", "list presets, scenarios and pluggable policies",
    "The hardware presets, scenarios, DDR arbitration policies, DSP operators and zoo "
    "networks emu holds, one line each.", (), list_work, list_text, hardware=False))

OPS = register(Command(
    "ops", "the ONNX operators emu compile takes: where each runs on J5 and under which "
           "constraints",
    "Every operator of the J5 operator table that `emu compile` places by: bpu (quantised, "
    "within the constraints shown; outside them the CPU runs it and the compiler says which "
    "constraint failed), cpu (float, as ONNX defines it), fold (constant folding only), "
    "refused (listed as not integrated). Operators not in the table are refused too.",
    (Option("where", str, None, "only the operators placed so", choices=OPS_PLACES),),
    ops_work, ops_text, hardware=False))
