"""A compiled model run on the emulated SoC: the timing of one inference, segment by segment.

What `emu infer` reports and `benchmarks/bench_nn.py` times, until the hbDNN runtime (the
next issue) drives compiled models from host threads itself. The host's main thread runs
the model's segments in order, as the board's runtime does for one task on one core:

- a BPU subgraph is one task on the BPU cores (`HostThread.run_model`) with the compiled
  model's function-call cut: its layer groups' compute and DDR traffic are simulated,
  through the shared DDR model, on the session's hardware;
- a CPU segment (input quantize, output dequantize, an op the BPU does not run) is busy
  time on an A55 core of the calling thread, as long as the static estimate's A55 model
  says (`emu/nn/estimate.py`);
- a DSP segment is not timed yet (its operators run under `emu dsp`).

No output is computed here: this is the timing-only path. `CompiledModel.run` computes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from emu.nn.compiler import CompiledModel
from emu.runtime.session import Session
from emu.soc.clock import PS_PER_MS
from emu.soc.sched import ANY_CORE


def simulate(model: CompiledModel, preset: str = "j5", config: str | Path | None = None,
             overrides: Sequence[str] = (), *, frames: int = 1,
             core: int = ANY_CORE) -> dict[str, Any]:
    """Run `frames` inferences of `model` one after another on a fresh session; simulated
    latency per frame and its split between the BPU and the CPU."""
    with Session(preset, config, overrides) as sess:
        soc = sess.config
        lines = model.estimate(soc).layers
        cpu_ps: dict[int, int] = {}
        for line in lines:
            if line.where == "cpu":
                cpu_ps[line.segment] = cpu_ps.get(line.segment, 0) + line.time_ps
        calls = model.subgraphs()
        resident = model.weights_resident(soc)
        thread = sess.main
        latencies, bpu_total, cpu_total = [], 0, 0
        for frame in range(frames):
            start = sess.now_ps
            for index, segment in enumerate(model.segments):
                if segment.kind == "bpu":
                    task = thread.run_model(
                        f"{model.name} frame {frame} bpu{index}", calls[index],
                        spans=model.function_calls.get(index), resident_weights=resident,
                        core=core)
                    bpu_total += task.busy_ps
                elif index in cpu_ps:
                    thread.cpu(cpu_ps[index], f"{model.name} {segment.kind}")
                    cpu_total += cpu_ps[index]
            latencies.append(sess.now_ps - start)
    return {"frames": frames,
            "latency_ms": sum(latencies) / frames / PS_PER_MS,
            "bpu_ms": bpu_total / frames / PS_PER_MS,
            "cpu_ms": cpu_total / frames / PS_PER_MS,
            "per_frame_ms": [t / PS_PER_MS for t in latencies]}
