"""`emu dsp OP`: one vDSP operator on generated data, run as a host program would
(`emu.workloads.dsp_ops`), and where the simulated time goes."""

from __future__ import annotations

import argparse
from typing import Any

from emu.commands import Command, Outcome, Progress, register, trace_path, write_trace
from emu.commands.report import Report
from emu.errors import InputError
from emu.options import SEEDS, Option

DSP_RPCS = (1, 1000)
DSP_PRIORITY = (0, 255)
DSP_MAX_AXES = 4


def shape(text: str) -> tuple[int, ...]:
    """A converter: 1 to DSP_MAX_AXES positive sizes, `64,1000`."""
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        sizes = ()
    if not 1 <= len(sizes) <= DSP_MAX_AXES or min(sizes) < 1:
        raise ValueError(f"expected 1 to {DSP_MAX_AXES} positive sizes like 64,1000, got "
                         f"{text!r}")
    return sizes


OPTIONS = (
    Option("op", str, None, "the operator; cv: the computer-vision operators on an image, see "
                            "`emu dsp cv --help`",
           choices=("softmax", "quantize", "dequantize", "ping", "cv"), flags=("op",),
           required=True),
    Option("shape", str, (64, 1000), f"tensor shape, 1 to {DSP_MAX_AXES} sizes, e.g. 64,1000 "
                                     "(default); the tensors of all calls must fit in the pool "
                                     "(mem.pool_bytes)", parse=shape),
    Option("axis", int, -1, "softmax / per-axis axis (default -1)"),
    Option("dtype", str, "int8", "quantised type (default int8)", choices=("int8", "uint8")),
    Option("mode", str, "scale", "hbDNN quantisation type (default scale)",
           choices=("scale", "shift")),
    Option("per_axis", bool, False, "one scale per slice of --axis"),
    Option("core", str, "any", "dspCoreId of the calls (default any)",
           choices=("any", "0", "1")),
    Option("rpcs", int, 1, "concurrent calls", DSP_RPCS),
    Option("priority", int, 0, "priority of the calls", DSP_PRIORITY),
    Option("seed", int, 0, "seed of the generated data", SEEDS),
)

_PROVENANCE = ("provenance.emu_version", "provenance.preset", "provenance.overrides.*",
               "provenance.changed_from_preset.*", "provenance.seed")
REPORTS = (
    "op", "shape.*", "rpcs.*.core", "rpcs.*.status", "rpcs.*.latency_ms", "rpc_overhead_ms",
    "cores.*.core", "cores.*.compute_ms", "cores.*.kernel_cycles", "cores.*.bundles",
    "cores.*.gather_cycles", "cores.*.fdiv_stall_cycles", "cores.*.kernel_calls",
    "cores.*.idma_in_ms", "cores.*.idma_in_bytes", "cores.*.idma_out_ms",
    "cores.*.idma_out_bytes", "cores.*.tcm_high_water_bytes.*", "calls_ms", "total_ms")


def check_pool(run: Any, mem: Any) -> None:
    """Refuse a --shape whose buffers, over all --rpcs calls, the pool (`mem`, the
    configuration's) could not hold, before any data is generated or allocated."""
    from emu.workloads import dsp_ops

    needed = dsp_ops.pool_bytes(run, mem.alignment_bytes)
    if needed > mem.pool_bytes:
        calls = f" over --rpcs {run.rpcs} calls" if run.rpcs > 1 else ""
        raise InputError(f"--shape {','.join(map(str, run.shape))}: {run.op} needs "
                         f"{needed} B of pool memory for its buffers{calls}, more than "
                         f"mem.pool_bytes ({mem.pool_bytes} B)")


def check(args: argparse.Namespace) -> None:
    if args.op == "cv":
        raise InputError("emu dsp cv takes every option after `cv`, and is its own command: "
                         "emu dsp cv OP [options] (see emu dsp cv --help)")


def work(resolved: Any, args: argparse.Namespace, progress: Progress | None) -> Outcome:
    from emu.runtime import session
    from emu.workloads import dsp_ops

    trace = trace_path(args)
    run = dsp_ops.DspRun(args.op, args.shape, args.axis, args.dtype, args.mode, args.per_axis,
                         args.core, args.rpcs, args.priority, args.seed)
    check_pool(run, resolved.soc.mem)
    with session.Session(args.preset, args.config, args.overrides,
                         trace=trace is not None) as sess:
        result = dsp_ops.execute(run)
    failed = [call["error"] for call in result["rpcs"] if call["status"] != "ok"]
    if failed:
        raise InputError(f"dsp {run.op}: {failed[0]}")
    if trace is not None:
        write_trace(trace, [("", sess.soc.recorder.recording)], {"preset": args.preset})
    return Outcome(result, args.seed)


def text(report: Report) -> str:
    from emu.report.document import provenance_line
    from emu.report.table import render

    assert report.provenance is not None
    rows = [(c["core"], c["compute_ms"], c["kernel_cycles"], c["bundles"], c["gather_cycles"],
             c["fdiv_stall_cycles"], c["idma_in_ms"], c["idma_in_bytes"], c["idma_out_ms"],
             c["idma_out_bytes"]) for c in report["cores"]]
    lines = [provenance_line(report.provenance),
             render(["core", "compute ms", "cycles", "bundles", "gather cyc", "fdiv stall",
                     "iDMA in ms", "in bytes", "iDMA out ms", "out bytes"], rows,
                    title=f"dsp {report['op']} {'x'.join(map(str, report['shape']))} on "
                          f"preset {report.preset}")]
    for k, call in enumerate(report["rpcs"]):
        lines.append(f"call {k}: core {call['core']}, {call['status']}, done after "
                     f"{call['latency_ms']:.3f} ms"
                     + (f" ({call['error']})" if call["error"] else ""))
    lines.append(f"RPC overhead per call {report['rpc_overhead_ms']:.3f} ms; calls took "
                 f"{report['calls_ms']:.3f} ms; with buffer set-up and cache maintenance "
                 f"{report['total_ms']:.3f} ms")
    return "\n".join(lines)


DSP = register(Command(
    "dsp", "run a DSP operator on generated data through hbSys/hbDSP",
    "Run one vDSP operator on generated data as a host program would (pool buffers, cache "
    "clean, hbDSPRpc, wait, invalidate) and show where the simulated time goes: RPC, iDMA in, "
    "compute, iDMA out.", OPTIONS, work, text, REPORTS, trace=True, outputs=("--trace",),
    check=check, sweepable=True))
