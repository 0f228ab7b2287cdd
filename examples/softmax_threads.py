"""Eight host threads share the two DSP cores.

Each thread allocates its buffers with hbSys, then submits softmax RPCs to any DSP core at
its own priority, `--depth` at a time, waiting for the oldest before it submits the next
(as a pipelined board application does). It prints when each thread's RPCs finished, how
many each DSP core ran, and writes the session's report and trace if asked:

    python examples/softmax_threads.py [--threads 8] [--rpcs 50] [--depth 2]
                                       [--report R.json] [--trace T.json]

Same arguments, same report and trace, byte for byte.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import emu
from emu.report.document import dumps, session_report, write_atomic
from emu.report.trace import chrome_trace
from emu.runtime.hbdsp import (
    HB_DSP_CORE_ANY,
    HB_DSP_INITIALIZE_RPC_CTRL_PARAM,
    hbDSPReleaseTask,
    hbDSPRpc,
    hbDSPRpcCtrlParam,
    hbDSPWaitTaskDone,
)
from emu.runtime.hbsys import (
    HB_SYS_MEM_CACHE_CLEAN,
    HB_SYS_MEM_CACHE_INVALIDATE,
    hbSysAllocCachedMem,
    hbSysFlushMem,
    hbSysFreeMem,
    hbSysMem,
)
from emu.soc.clock import PS_PER_MS
from emu.vdsp.ops.nn import CMD_SOFTMAX
from emu.vdsp.ops.tensor_args import TYPE_F32, pack

PRIORITIES = (0, 10, 100, 200, 255, 50, 150, 20)


def worker(k: int, rpcs: int, depth: int, done: list[dict]) -> None:
    """Thread k: `rpcs` softmax calls on its own (16, 256) tensor, `depth` in flight."""
    x = np.random.default_rng(k).standard_normal((16, 256)).astype(np.float32)
    blob = pack(x, TYPE_F32, axis=1)
    inp, out = hbSysMem(), hbSysMem()
    assert hbSysAllocCachedMem(inp, len(blob)) == 0
    assert hbSysAllocCachedMem(out, x.nbytes) == 0
    inp.virAddr[:] = np.frombuffer(blob, np.uint8)
    hbSysFlushMem(inp, HB_SYS_MEM_CACHE_CLEAN)
    ctrl = hbDSPRpcCtrlParam()
    HB_DSP_INITIALIZE_RPC_CTRL_PARAM(ctrl)
    ctrl.rpcCmd, ctrl.dspCoreId = CMD_SOFTMAX, HB_DSP_CORE_ANY
    ctrl.priority = PRIORITIES[k % len(PRIORITIES)]
    in_flight = []

    def finish_oldest() -> None:
        index, task = in_flight.pop(0)
        assert hbDSPWaitTaskDone(task, 0) == 0
        done.append({"thread": k, "rpc": index, "priority": ctrl.priority,
                     "core": task.task.ran_on[-1],
                     "finished_ms": task.task.finished_ps / PS_PER_MS})
        assert hbDSPReleaseTask(task) == 0

    for i in range(rpcs):
        ctrl.customId = i
        rc, task = hbDSPRpc(inp, out, ctrl)
        assert rc == 0, rc
        in_flight.append((i, task))
        if len(in_flight) == depth:
            finish_oldest()
    while in_flight:
        finish_oldest()
    hbSysFlushMem(out, HB_SYS_MEM_CACHE_INVALIDATE)
    assert hbSysFreeMem(inp) == 0 and hbSysFreeMem(out) == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--rpcs", type=int, default=50)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--report", help="write the session's JSON report here")
    parser.add_argument("--trace", help="write a Perfetto trace of the run here")
    args = parser.parse_args(argv)
    done: list[dict] = []
    with emu.Session(trace=args.trace is not None) as s:
        for k in range(args.threads):
            s.spawn(worker, k, args.rpcs, args.depth, done, name=f"worker{k}")
        s.run()
        elapsed = emu.now_ms()
    per_core = [sum(1 for d in done if d["core"] == c) for c in range(s.soc.config.vdsp.cores)]
    print(f"{len(done)} softmax RPCs from {args.threads} threads in {elapsed:.3f} ms "
          f"simulated; per DSP core: {per_core}")
    for k in range(args.threads):
        mine = [d for d in done if d["thread"] == k]
        print(f"  worker{k} (priority {mine[0]['priority']:3d}): last RPC done at "
              f"{mine[-1]['finished_ms']:.3f} ms")
    if args.report:
        write_atomic(args.report, dumps(session_report(
            s, "examples/softmax_threads.py", {"completions": done, "per_core": per_core})))
    if args.trace:
        write_atomic(args.trace, dumps(chrome_trace(s.soc.recorder.recording)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
