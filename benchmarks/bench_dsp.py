"""`emu dsp`: simulated time against wall time, per operator (warm JIT cache).

Each operator runs once to compile its kernels, then again to be timed; the ratio says how
many seconds of wall clock one simulated second costs on this machine.
"""

from __future__ import annotations

import time

from emu.runtime import session
from emu.workloads.dsp_ops import DspRun, execute

CASES = [
    DspRun("quantize", (256, 4096)),
    DspRun("quantize", (256, 4096), per_axis=True, axis=1, rpcs=2),
    DspRun("dequantize", (256, 4096)),
    DspRun("softmax", (1024, 1000)),
    DspRun("softmax", (4096, 100), rpcs=2),
]


def main() -> None:
    print(f"{'case':42s} {'simulated ms':>13s} {'wall ms':>9s} {'wall/sim':>9s}")
    for run in CASES:
        session.start("j5")
        execute(run)  # compile
        session.start("j5")
        start = time.perf_counter()
        result = execute(run)
        wall_ms = (time.perf_counter() - start) * 1e3
        sim_ms = result["total_ms"]
        label = f"{run.op} {'x'.join(map(str, run.shape))} rpcs={run.rpcs}" + \
            (" per-axis" if run.per_axis else "")
        print(f"{label:42s} {sim_ms:13.3f} {wall_ms:9.1f} {wall_ms / sim_ms:9.1f}")


if __name__ == "__main__":
    main()
