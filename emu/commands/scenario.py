"""`emu scenario NAME`: the system scenarios of `emu.workloads.scenarios`, one command each.

The scenario registry is where a scenario is declared (its options are `Option`s); this
module makes each registered scenario a command when the command registry is read, so a
scenario registered later (a test's) is a command too.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from emu.commands import Command, Outcome, Progress, trace_path, write_trace
from emu.commands.report import Report
from emu.workloads import scenarios


def _work(item: scenarios.Scenario) -> Any:
    def work(resolved: Any, args: argparse.Namespace, progress: Progress | None) -> Outcome:
        trace = trace_path(args)
        module = importlib.import_module(item.module)
        options = {option.name: getattr(args, option.name) for option in item.options}
        results, sess = module.run_scenario(options, args.preset, args.config,
                                            args.overrides, trace is not None, progress)
        if trace is not None:
            write_trace(trace, [("", sess.soc.recorder.recording)],
                        {"preset": resolved.preset})
        return Outcome({"results": results, "stats": sess.stats()}, options.get("seed"))
    return work


def _text(item: scenarios.Scenario) -> Any:
    def text(report: Report) -> str:
        from emu.report.document import provenance_line
        from emu.report.table import render

        module = importlib.import_module(item.module)
        title, headers, rows, notes = module.summary(report["results"])
        assert report.provenance is not None
        stats = report["stats"]
        moved = stats["ddr"].get("bytes_read", 0) + stats["ddr"].get("bytes_written", 0)
        return "\n".join([provenance_line(report.provenance),
                          render(headers, rows, title=title), *notes,
                          f"DDR moved {moved / 1e6:.1f} MB; pool high water "
                          f"{stats['pool']['high_water_bytes'] / 2**20:.1f} MiB"])
    return text


def _label(name: str) -> Any:
    return lambda args: f"scenario {name}"


def commands() -> list[Command]:
    """Every registered scenario as a command."""
    return [Command(f"scenario {item.name}", item.description.split(";")[0], item.description,
                    item.options, _work(item), _text(item), item.reports,
                    trace=True, progress=True, outputs=("--trace",),
                    label=_label(item.name), sweepable=True)
            for item in scenarios.scenarios()]
