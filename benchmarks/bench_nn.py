"""The BPU toolchain's own speed: compiling ResNet-50, computing one inference exactly,
simulating one through hbDNN without computing it (issue 11, point 8), and `emu perf`'s
200 frames from 8 host threads (issue 12, point 3).

Budgets from the issues, on a 2-core machine: compile <= 30 s, functional inference
<= 2 s (warm JIT cache: one run first), timing-only <= 20 ms per inference, perf <= 15 s.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from emu.nn import compiler, zoo
from emu.soc.config import load_config
from emu.workloads import nn_perf

FRAMES = 20


def main() -> None:
    soc = load_config("j5", None, []).soc
    onnx_model = zoo.build("resnet50")
    start = time.perf_counter()
    model = compiler.compile_model(onnx_model, "resnet50", compiler.CompileOptions(), soc)
    compile_s = time.perf_counter() - start
    rng = np.random.default_rng(0)
    feeds = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in model.inputs}
    model.run(feeds)  # compile the kernels, build the model's kernel objects
    start = time.perf_counter()
    model.run(feeds)
    functional_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "resnet50.hbm"
        path.write_bytes(compiler.dumps([model]))
        nn_perf.run_perf(path, None, 1, 0, 1, 0)  # imports and first-use costs
        start = time.perf_counter()
        result = nn_perf.run_perf(path, None, 1, 0, FRAMES, 0)  # timing only, one thread
        timing_ms = (time.perf_counter() - start) * 1e3 / FRAMES
        start = time.perf_counter()
        perf = nn_perf.run_perf(path, None, 8, 0, 200, 0)
        perf_s = time.perf_counter() - start
    print(f"{'resnet50 224x224, batch 1':34s} {'wall':>10s}  budget")
    print(f"{'compile (16 calibration samples)':34s} {compile_s:9.2f}s  30 s")
    print(f"{'functional inference (exact)':34s} {functional_s:9.3f}s  2 s")
    print(f"{'timing-only inference':34s} {timing_ms:8.2f}ms  20 ms"
          f"   (simulated {result['latency_ms']['avg']:.3f} ms per frame, {FRAMES} frames)")
    print(f"{'emu perf: 200 frames, 8 threads':34s} {perf_s:9.2f}s  15 s"
          f"   (simulated {perf['fps']:.1f} FPS)")


if __name__ == "__main__":
    main()
