"""Workload `emu dsp OP`: one DSP operator on generated data, through the board's API.

The host program is what a user would write on the board: allocate cached pool buffers,
write the input, clean it, call `hbDSPRpc` (several times for several concurrent calls),
wait, invalidate the output. The result is the simulated time of the calls and where it
went: RPC latency, iDMA in, compute, iDMA out — with the cycles and bytes behind them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from emu.errors import InputError
from emu.runtime import hbdsp, hbsys, session
from emu.soc.clock import Clock, report_ms
from emu.vdsp import rpc
from emu.vdsp.ops import nn
from emu.vdsp.ops.tensor_args import (
    MODE_SCALE,
    MODE_SHIFT,
    TYPE_F32,
    TYPE_S8,
    TYPE_U8,
    pack,
    packed_bytes,
)

OPS = {
    "softmax": (nn.CMD_SOFTMAX, "float32 softmax along --axis"),
    "quantize": (nn.CMD_QUANTIZE, "float32 -> --dtype with hbDNN --mode, per tensor or axis"),
    "dequantize": (nn.CMD_DEQUANTIZE, "--dtype -> float32 with hbDNN --mode"),
    "ping": (0x000, "an empty RPC: the round-trip overhead alone"),
}
CORES = {"any": hbdsp.HB_DSP_CORE_ANY, "0": hbdsp.HB_DSP_CORE_0, "1": hbdsp.HB_DSP_CORE_1}


@dataclass(frozen=True)
class DspRun:
    op: str
    shape: tuple[int, ...]
    axis: int = -1
    dtype: str = "int8"
    mode: str = "scale"
    per_axis: bool = False
    core: str = "any"
    rpcs: int = 1
    priority: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise InputError(f"unknown operator {self.op!r} (have: {', '.join(OPS)})")
        if not self.shape or len(self.shape) > 4 or min(self.shape) < 1:
            raise InputError(f"--shape: 1 to 4 positive sizes, got {self.shape}")
        if not -len(self.shape) <= self.axis < len(self.shape):
            raise InputError(f"--axis {self.axis}: the tensor has {len(self.shape)} axes")
        if self.dtype not in ("int8", "uint8") or self.mode not in ("scale", "shift"):
            raise InputError("--dtype is int8 or uint8 and --mode is scale or shift")
        if self.core not in CORES or self.rpcs < 1 or not 0 <= self.priority <= 255:
            raise InputError("--core is any, 0 or 1; --rpcs >= 1; --priority 0..255")


# Bytes per element of each operator's input and output tensor.
ELEMENT_BYTES = {"softmax": (4, 4), "quantize": (4, 1), "dequantize": (1, 4)}
PING_BYTES = 64


def buffer_bytes(run: DspRun) -> tuple[int, int]:
    """The sizes of one call's input buffer (header, parameters, tensor) and output buffer,
    known before any data is generated."""
    if run.op == "ping":
        return PING_BYTES, PING_BYTES
    elements = math.prod(run.shape)
    in_size, out_size = ELEMENT_BYTES[run.op]
    n = run.shape[run.axis] if run.per_axis else 1
    params = 0 if run.op == "softmax" else (2 * n if run.mode == "scale" else n)
    return packed_bytes(elements * in_size, params), elements * out_size


def pool_bytes(run: DspRun, alignment_bytes: int) -> int:
    """Pool memory all of a run's calls take, each buffer rounded up to the alignment."""
    return run.rpcs * sum(-(-size // alignment_bytes) * alignment_bytes
                          for size in buffer_bytes(run))


def _input(run: DspRun, rng: np.random.Generator) -> tuple[bytes, int]:
    """The input buffer contents and the output size in bytes."""
    shape = run.shape
    elements = math.prod(shape)
    axis = run.axis % len(shape)
    if run.op == "ping":
        return bytes(PING_BYTES), PING_BYTES
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    if run.op == "softmax":
        return pack(x, TYPE_F32, axis=axis), 4 * elements
    n = shape[axis] if run.per_axis else 1
    unsigned = run.dtype == "uint8"
    params: dict[str, Any]
    if run.mode == "shift":
        params = {"mode": MODE_SHIFT, "shifts": rng.integers(2, 6, n)}
    else:
        params = {"mode": MODE_SCALE, "scales": rng.uniform(0.02, 0.1, n).astype(np.float32),
                  "zero_points": np.full(n, 128 if unsigned else 0)}
    int_type = TYPE_U8 if unsigned else TYPE_S8
    if run.op == "quantize":
        return pack(x, int_type, axis=axis, **params), elements
    q = rng.integers(0 if unsigned else -128, 256 if unsigned else 128, shape)
    q = q.astype(np.uint8 if unsigned else np.int8)
    return pack(q, TYPE_F32, axis=axis, **params), 4 * elements



def execute(run: DspRun) -> dict[str, Any]:
    """Run the calls on the current session; the report of what they cost."""
    sess, host = session.caller()
    rng = np.random.default_rng(run.seed)
    blob, out_bytes = _input(run, rng)
    started = host.now_ps
    buffers = []
    tasks = []
    for _ in range(run.rpcs):
        inp, out = hbsys.hbSysMem(), hbsys.hbSysMem()
        for mem, size in ((inp, len(blob)), (out, out_bytes)):
            if hbsys.hbSysAllocCachedMem(mem, size) != 0:
                raise InputError(f"the pool cannot hold {size} B (mem.pool_bytes)")
        assert inp.virAddr is not None
        inp.virAddr[:] = np.frombuffer(blob, np.uint8)
        hbsys.hbSysFlushMem(inp, hbsys.HB_SYS_MEM_CACHE_CLEAN)
        buffers.append((inp, out))
    first_rpc = host.now_ps
    for inp, out in buffers:
        ctrl = hbdsp.hbDSPRpcCtrlParam()
        hbdsp.HB_DSP_INITIALIZE_RPC_CTRL_PARAM(ctrl)
        ctrl.rpcCmd, ctrl.dspCoreId, ctrl.priority = OPS[run.op][0], CORES[run.core], run.priority
        rc, task = hbdsp.hbDSPRpc(inp, out, ctrl)
        if rc != 0 or task is None:
            raise InputError(f"hbDSPRpc: {hbdsp.hbDSPGetErrorDesc(rc)}")
        tasks.append(task)
    calls = []
    for task in tasks:
        rc = hbdsp.hbDSPWaitTaskDone(task, 0)
        calls.append({"core": task.task.ran_on[-1] if task.task.ran_on else None,
                      "status": "ok" if rc == 0 else hbdsp.hbDSPGetErrorDesc(rc),
                      "error": task.error,
                      "latency_ms": report_ms(host.now_ps - first_rpc)})
        hbdsp.hbDSPReleaseTask(task)
    rpcs_done = host.now_ps
    for _inp, out in buffers:
        hbsys.hbSysFlushMem(out, hbsys.HB_SYS_MEM_CACHE_INVALIDATE)
    cfg = sess.config.vdsp
    clock = Clock("vdsp", cfg.freq_hz)
    dispatch_ps = clock.cycles_to_ps(cfg.operator_dispatch_cycles)
    cores = []
    tree = sess.stats()["vdsp"]
    for index in range(cfg.cores):
        hw = tree[f"core{index}"]
        channels = hw["idma"].values()

        def total(key: str, channels: Any = channels) -> int:
            return sum(ch.get(key, 0) for ch in channels)

        cycles = hw.get("kernel_cycles", 0)
        cores.append({
            "core": index,
            "compute_ms": report_ms(clock.cycles_to_ps(cycles)),
            "kernel_cycles": cycles,
            "bundles": hw.get("bundles", 0),
            "gather_cycles": hw.get("gather_cycles", 0),
            "fdiv_stall_cycles": hw.get("fdiv_stall_cycles", 0),
            "kernel_calls": hw.get("kernel_calls", 0),
            "idma_in_ms": report_ms(total("busy_in_ps")),
            "idma_in_bytes": total("bytes_in"),
            "idma_out_ms": report_ms(total("busy_out_ps")),
            "idma_out_bytes": total("bytes_out"),
            "tcm_high_water_bytes": [hw["tcm"].get(f"bank{b}_high_water_bytes", 0)
                                     for b in range(cfg.tcm.banks)],
        })
    return {
        "op": run.op,
        "shape": list(run.shape),
        "rpcs": calls,
        "rpc_overhead_ms": report_ms(rpc.message_ps(cfg) + dispatch_ps),
        "cores": cores,
        "calls_ms": report_ms(rpcs_done - first_rpc),
        "total_ms": report_ms(host.now_ps - started),
    }
