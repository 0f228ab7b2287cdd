"""A small urgent model next to a long one on one BPU core: what keeps its latency.

The issue's question, on zoo models: MobileNetV2 (64x64, 10 classes) every 30 ms from one
host thread, ResNet-18 (224x224) back to back from another, both pinned to BPU core 0, all
through hbDNN. The small model's p99 latency is printed for the four combinations of the
long model compiled with or without `--max-time-per-fc` and the small one submitted at
the same priority or at 255 (HB_DNN_PRIORITY_PREEMP), next to its solo latency.

    python benchmarks/bench_hbdnn_priority.py [--frames 30] [--fc-us 200]

Simulated times; the wall time is the script's.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import numpy as np

import emu
from emu.bpu import timing
from emu.nn import compiler, zoo
from emu.runtime import hbdnn as dnn
from emu.runtime.hbsys import hbSysAllocCachedMem
from emu.soc.clock import PS_PER_MS, PS_PER_US


def models(fc_us: float) -> bytes:
    soc = emu.Session().config
    options = compiler.CompileOptions(calib_random=1)
    small = compiler.compile_model(zoo.build("mobilenetv2", (64, 64), classes=10), "small",
                                   options, soc)
    long = compiler.compile_model(zoo.build("resnet18", (224, 224)), "long", options, soc)
    # The same quantised model cut into function calls of at most fc_us (the compiler's
    # last step), as `emu compile --max-time-per-fc` would.
    split = dataclasses.replace(long, name="long_fc", function_calls={},
                                options={**long.options, "max_time_per_fc_us": fc_us})
    resident = split.weights_resident(soc)
    for index, groups in split.subgraphs().items():
        split.function_calls[index] = timing.split_function_calls(
            groups, soc.bpu, soc.ddr, round(fc_us * PS_PER_US), resident)
    return compiler.dumps([small, long, split])


def small_latencies(data: bytes, long_name: str | None, priority: int, frames: int
                    ) -> list[float]:
    with emu.Session() as sess:
        rc, packed = dnn.hbDNNInitializeFromDDR([data], [len(data)])
        assert rc == 0
        dnn.set_timing_only(packed)
        latencies: list[float] = []

        def infer_loop(name: str, prio: int, period_ps: int, count: int) -> None:
            _, handle = dnn.hbDNNGetModelHandle(packed, name)
            tensors = []
            for query in (dnn.hbDNNGetInputTensorProperties, dnn.hbDNNGetOutputTensorProperties):
                tensor = dnn.hbDNNTensor()
                _, tensor.properties = query(handle, 0)
                hbSysAllocCachedMem(tensor.sysMem[0], tensor.properties.alignedByteSize)
                tensors.append(tensor)
            ctrl = dnn.hbDNNInferCtrlParam()
            dnn.HB_DNN_INITIALIZE_INFER_CTRL_PARAM(ctrl)
            ctrl.bpuCoreId, ctrl.priority = dnn.HB_BPU_CORE_0, prio
            for k in range(count):
                if period_ps:
                    emu.sleep_ms(max(0.0, ((k + 1) * period_ps - sess.now_ps) / PS_PER_MS))
                start = sess.now_ps
                rc, task = dnn.hbDNNInfer([tensors[1]], [tensors[0]], handle, ctrl)
                assert rc == 0 and dnn.hbDNNWaitTaskDone(task, 0) == 0
                dnn.hbDNNReleaseTask(task)
                if name == "small":
                    latencies.append((sess.now_ps - start) / PS_PER_MS)
                elif len(latencies) >= frames:
                    return

        period = 30 * PS_PER_MS
        sess.spawn(infer_loop, "small", priority, period, frames, name="small")
        if long_name is not None:
            sess.spawn(infer_loop, long_name, 0, 0, 10**6, name="long")
        sess.run()
        return latencies


def main(argv: list[str] | None = None) -> None:
    """`argv`: this script's options (benchmarks/run.py runs it with the defaults)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frames", type=int, default=30)
    parser.add_argument("--fc-us", type=float, default=200.0)
    args = parser.parse_args(argv or [])
    t0 = time.perf_counter()
    data = models(args.fc_us)
    solo = small_latencies(data, None, 0, args.frames)
    print(f"small model alone: p99 {np.percentile(solo, 99):.3f} ms (max {max(solo):.3f})")
    print(f"{'long model':28s} {'small priority':>15s} {'p99 ms':>8s} {'max ms':>8s}")
    for long_name, label in (("long", "one FC per subgraph"),
                             ("long_fc", f"FCs of <= {args.fc_us:g} us")):
        for priority in (0, dnn.HB_DNN_PRIORITY_PREEMP):
            lat = small_latencies(data, long_name, priority, args.frames)
            print(f"{label:28s} {priority:15d} {np.percentile(lat, 99):8.3f} {max(lat):8.3f}")
    print(f"wall {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
