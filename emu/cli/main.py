"""`emu`: the command-line entry point.

`main(argv) -> int` does the work and never exits, so tests can call it. Heavy modules
(numpy, numba, simpy and the models) are imported inside the command handlers, which keeps
`emu --help` instant. Exit status: 0 success, 2 a user error (bad usage, input file or
configuration; one line on stderr), 1 anything else.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from emu import __version__
from emu.errors import EmuError, UserError

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error raises instead of exiting, so main() owns the exit code."""

    def error(self, message: str) -> Any:
        raise _UsageError(f"{self.prog}: {message}")


class _UsageError(Exception):
    pass


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
                         help="write a Chrome trace-event JSON of the run (opens in Perfetto)")
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="emu", description=(
        "Cycle-approximate emulator of a J5-class automotive AI SoC (2 BPU, 2 vDSP, 8 A55, "
        "DDR, CMA/ION) and its runtime APIs."))
    parser.add_argument("--version", action="version", version=f"emu {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                     parser_class=_Parser)
    hardware = _hardware_options()

    config = commands.add_parser("config", help="show the resolved hardware configuration")
    config_cmds = config.add_subparsers(dest="config_command", metavar="ACTION", required=True,
                                        parser_class=_Parser)
    config_cmds.add_parser("show", parents=[hardware, _output_options(trace=False)],
                           help="print every parameter with unit and provenance")

    commands.add_parser("list", parents=[_output_options(trace=False)],
                        help="list presets, scenarios and pluggable policies")

    scenario = commands.add_parser("scenario", help="run a system scenario on the emulated SoC")
    scenarios = scenario.add_subparsers(dest="scenario", metavar="NAME", required=True,
                                        parser_class=_Parser)
    cams = scenarios.add_parser(
        "cameras", parents=[hardware, _output_options(trace=True)],
        help="N camera pipelines (CPU resize, BPU network, DSP dequantise) at a frame rate",
    )
    cams.add_argument("--cameras", type=int, default=2, help="camera pipelines (default 2)")
    cams.add_argument("--frames", type=int, default=8, help="frames per camera (default 8)")
    cams.add_argument("--fps", type=float, default=30.0, help="frames per second (default 30)")
    cams.add_argument("--gmacs", type=float, default=20.0,
                      help="GMAC per frame of each camera's network (default 20)")
    cams.add_argument("--seed", type=int, default=0, help="seed of the synthetic networks")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
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
        return _scenario(args)
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


def _emit_json(doc: Any) -> None:
    from emu.report.document import dumps

    sys.stdout.write(dumps(doc))


def _config_show(args: argparse.Namespace) -> int:
    from emu.report.table import render
    from emu.soc.config import format_value

    resolved = _resolve(args)
    if args.json:
        _emit_json(resolved.to_dict())
        return EXIT_OK
    rows = [(info.key, format_value(info, value), source, info.desc)
            for info, value, source in resolved.leaves()]
    print(render(["key", "value", "source", "description"], rows,
                 title=f"preset {resolved.preset}"))
    return EXIT_OK


def _list(args: argparse.Namespace) -> int:
    from emu.mem.ddr import POLICIES
    from emu.report.table import render
    from emu.soc.config import preset_names

    items = [("preset", name, "hardware preset") for name in preset_names()]
    items += [("scenario", name, desc) for name, desc in _SCENARIOS.items()]
    items += [("ddr.policy", name, desc) for name, (_, desc) in POLICIES.items()]
    if args.json:
        _emit_json([{"kind": k, "name": n, "description": d} for k, n, d in items])
    else:
        print(render(["kind", "name", "description"], items))
    return EXIT_OK


_SCENARIOS = {
    "cameras": "N camera pipelines (CPU resize, BPU network, DSP dequantise) at a frame rate",
}


def _scenario(args: argparse.Namespace) -> int:
    from emu.errors import InputError
    from emu.report.document import dumps, run_report, write_atomic
    from emu.report.table import render
    from emu.report.trace import chrome_trace
    from emu.soc.builder import Soc
    from emu.workloads import cameras

    resolved = _resolve(args)
    try:
        params = cameras.CameraParams(cameras=args.cameras, frames=args.frames, fps=args.fps,
                                      gmacs=args.gmacs, seed=args.seed)
    except ValueError as exc:
        raise InputError(f"scenario cameras: {exc}") from None
    soc = Soc(resolved, trace=args.trace is not None).build()
    results = cameras.run(soc, params)
    soc.finish()
    report = run_report(soc, "scenario cameras", results)
    if args.trace:
        trace = chrome_trace(soc.recorder.recording, {"preset": resolved.preset})
        write_atomic(args.trace, dumps(trace))
    if args.json:
        _emit_json(report)
        return EXIT_OK
    rows = [(c["camera"], c["priority"], c["frames"], c["avg_ms"], c["max_ms"], c["min_ms"],
             c["deadline_misses"]) for c in results["cameras"]]
    print(render(["camera", "priority", "frames", "avg ms", "max ms", "min ms", "missed"], rows,
                 title=f"cameras at {params.fps:g} FPS (period {results['period_ms']:.3f} ms), "
                       f"preset {resolved.preset}"))
    bpu = report["stats"]["bpu"]
    ddr = report["stats"]["ddr"]
    print(f"BPU utilisation: {', '.join(f'{u:.1%}' for u in bpu['utilisation'])}; "
          f"DDR moved {(ddr.get('bytes_read', 0) + ddr.get('bytes_written', 0)) / 1e6:.1f} MB; "
          f"pool high water {report['stats']['pool']['high_water_bytes'] / 2**20:.1f} MiB; "
          f"simulated {results['sim_time_ms']:.3f} ms")
    return EXIT_OK
