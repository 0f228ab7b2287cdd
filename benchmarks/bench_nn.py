"""The BPU toolchain's own speed (issue 11, point 8): compiling ResNet-50, computing one
inference exactly, and simulating one without computing it.

Budgets from the issue, on a 2-core machine: compile <= 30 s, functional inference
<= 2 s (warm JIT cache: one run first), timing-only <= 20 ms per inference.
"""

from __future__ import annotations

import time

import numpy as np

from emu.nn import compiler, zoo
from emu.soc.config import load_config
from emu.workloads import nn_models

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
    nn_models.simulate(model, frames=1)  # imports and first-use costs
    start = time.perf_counter()
    result = nn_models.simulate(model, frames=FRAMES)
    timing_ms = (time.perf_counter() - start) * 1e3 / FRAMES
    print(f"{'resnet50 224x224, batch 1':34s} {'wall':>10s}  budget")
    print(f"{'compile (16 calibration samples)':34s} {compile_s:9.2f}s  30 s")
    print(f"{'functional inference (exact)':34s} {functional_s:9.3f}s  2 s")
    print(f"{'timing-only inference':34s} {timing_ms:8.2f}ms  20 ms"
          f"   (simulated {result['latency_ms']:.3f} ms per frame, {FRAMES} frames)")


if __name__ == "__main__":
    main()
