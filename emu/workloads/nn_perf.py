"""`emu perf`: what `hrt_model_exec perf` does on the board, through hbDNN on the emulated SoC.

`--thread-num` host threads each run inferences in a loop (allocate the model's tensors
once with hbSys, then per frame: hbDNNInfer, hbDNNWaitTaskDone, hbDNNReleaseTask) until
`--frame-count` frames are done in all (frame k goes to thread k mod threads, as the tool
shares them). `--core-id` follows the tool: 0 any core, 1 core 0, 2 core 1. Latency of a
frame is the time from its hbDNNInfer to the end of its wait, in simulated time; FPS is the
frames over the simulated time from the first submission to the last completion. The
outputs are not computed (`hbdnn.set_timing_only`): the timing is the same, the run faster.

The profile (`--profile FILE`, and `profile` in the JSON) is the tool's per-node view
summed over the frames and divided by them: per segment of the model its kind, the time on
its device and the time it waited in that device's queue, and per task its pending time
(submission to the start of its first segment) and running time (to completion).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from emu.dnn import alloc_tensors
from emu.errors import InputError
from emu.nn import compiler
from emu.runtime import hbdnn, hbsys
from emu.runtime.session import Session
from emu.soc.clock import PS_PER_MS, PS_PER_S
from emu.soc.config import load_config
from emu.workloads.cameras import run_threads

CORE_IDS = {0: hbdnn.HB_BPU_CORE_ANY, 1: hbdnn.HB_BPU_CORE_0, 2: hbdnn.HB_BPU_CORE_1}


def _check(rc: int, what: str) -> None:
    if rc != hbdnn.HB_DNN_SUCCESS and rc != hbsys.HB_SYS_SUCCESS:
        raise InputError(f"{what}: {hbdnn.hbDNNGetErrorDesc(rc)}")


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q, method="nearest"))


def run_perf(model_file: str | Path, model_name: str | None, threads: int, core_id: int,
             frames: int, priority: int, preset: str = "j5",
             config: str | Path | None = None, overrides: Sequence[str] = ()
             ) -> dict[str, Any]:
    """The perf run (see the module docstring) as the contract's JSON document."""
    return run_perf_session(model_file, model_name, threads, core_id, frames, priority, preset,
                            config, overrides)[0]


def run_perf_session(model_file: str | Path, model_name: str | None, threads: int,
                     core_id: int, frames: int, priority: int, preset: str = "j5",
                     config: str | Path | None = None, overrides: Sequence[str] = (),
                     trace: bool = False) -> tuple[dict[str, Any], Session]:
    """`run_perf`, and the session it ran in (recording a trace if `trace`)."""
    if core_id not in CORE_IDS:
        raise InputError(f"--core-id {core_id}: expected 0 (any), 1 (core 0) or 2 (core 1)")
    with Session(preset, config, overrides, trace=trace) as sess:
        rc, packed = hbdnn.hbDNNInitializeFromFiles([str(model_file)])
        _check(rc, str(model_file))
        assert packed is not None
        hbdnn.set_timing_only(packed)
        rc, names, _ = hbdnn.hbDNNGetModelNameList(packed)
        assert names is not None
        if model_name is None:
            if len(names) != 1:
                raise InputError(f"{model_file} packs {len(names)} models ({', '.join(names)})"
                                 ": say which with --model-name")
            model_name = names[0]
        rc, dnn = hbdnn.hbDNNGetModelHandle(packed, model_name)
        if rc != hbdnn.HB_DNN_SUCCESS:
            raise InputError(f"--model-name {model_name}: {model_file} has {', '.join(names)}")
        assert dnn is not None
        if dnn.model.options.get("input_source", "ddr") == "resizer":
            raise InputError(f"{model_file}: model {model_name} takes its input from the "
                             f"resizer (hbDNNRoiInfer, regions of larger images); emu perf "
                             f"times hbDNNInfer: compile it with --input-source ddr to time "
                             f"the network")
        latencies: list[int] = []
        tasks: list[hbdnn.hbDNNTask] = []
        first_submit = [-1]

        def worker(count: int) -> None:
            inputs, outputs = alloc_tensors(dnn, False), alloc_tensors(dnn, True)
            ctrl = hbdnn.hbDNNInferCtrlParam()
            hbdnn.HB_DNN_INITIALIZE_INFER_CTRL_PARAM(ctrl)
            ctrl.bpuCoreId, ctrl.priority = CORE_IDS[core_id], priority
            for _ in range(count):
                start = sess.now_ps
                if first_submit[0] < 0:
                    first_submit[0] = start
                rc, task = hbdnn.hbDNNInfer(outputs, inputs, dnn, ctrl)
                _check(rc, "hbDNNInfer")
                assert task is not None
                _check(hbdnn.hbDNNWaitTaskDone(task, 0),
                       f"hbDNNWaitTaskDone{f' ({task.error})' if task.error else ''}")
                latencies.append(sess.now_ps - start)
                tasks.append(task)
                _check(hbdnn.hbDNNReleaseTask(task), "hbDNNReleaseTask")

        for k in range(threads):
            share = frames // threads + (1 if k < frames % threads else 0)
            if share:
                sess.spawn(worker, share, name=f"perf{k}")
        run_threads(sess)  # a refused call in a worker comes out as its one-line error
        end = max(t.finished_ps for t in tasks)
        span = end - first_submit[0]
    ms = [t / PS_PER_MS for t in latencies]
    return {
        "model": model_name, "threads": threads, "core_id": core_id, "frames": frames,
        "priority": priority,
        "latency_ms": {"avg": float(np.mean(ms)), "min": min(ms), "max": max(ms),
                       "p50": _percentile(ms, 50), "p99": _percentile(ms, 99)},
        "fps": frames * PS_PER_S / span if span else float("inf"),
        "profile": _profile(tasks),
    }, sess


def _profile(tasks: Sequence[hbdnn.hbDNNTask]) -> dict[str, Any]:
    """Per BPU subgraph and per CPU/DSP item (quantize, layout conversion, cache
    maintenance, a node, dequantize), and per task, the average over the frames in ms."""
    n = len(tasks)
    items: dict[tuple[int, str], dict[str, Any]] = {}
    for task in tasks:
        for seg in task.segments:
            entry = items.setdefault((seg["segment"], seg["name"]), {
                "segment": seg["segment"], "name": seg["name"], "kind": seg["kind"],
                "device": _device(seg), "busy_ms": 0.0, "pending_ms": 0.0})
            entry["busy_ms"] += seg["busy_ps"] / PS_PER_MS / n
            entry["pending_ms"] += seg["pending_ps"] / PS_PER_MS / n
    pending = sum(t.segments[0]["start_ps"] - t.submitted_ps for t in tasks if t.segments)
    running = sum(t.finished_ps - (t.segments[0]["start_ps"] if t.segments else t.submitted_ps)
                  for t in tasks)
    devices = {"bpu": 0.0, "cpu": 0.0, "dsp": 0.0}
    for entry in items.values():
        devices[entry["device"]] += entry["busy_ms"]
    ordered = sorted(items.values(), key=lambda e: e["segment"])  # stable: run order kept
    return {"segments": ordered,
            "bpu_ms": devices["bpu"], "cpu_ms": devices["cpu"], "dsp_ms": devices["dsp"],
            "task_pending_ms": pending / PS_PER_MS / n if n else 0.0,
            "task_running_ms": running / PS_PER_MS / n if n else 0.0}


def _device(seg: dict[str, Any]) -> str:
    if seg["kind"] == "bpu":
        return "bpu"
    return "dsp" if seg["name"].startswith("dsp ") else "cpu"


STEADY_FRAMES = 3


def static_and_run_ms(model: compiler.CompiledModel, preset: str = "j5",
                      overrides: Sequence[str] = ()) -> tuple[float, float]:
    """A compiled model's static estimate (`emu compile --perf`) and its latency in this
    perf run with one thread on an idle chip, in ms. The run's is the median of
    `STEADY_FRAMES` frames, the steady state: the first finds the CPU's caches and TLBs
    cold, the next ones the model's inputs still in the L3 (as the estimate assumes when
    all the CPU reads fits there)."""
    resolved = load_config(preset, None, overrides)
    static = model.estimate(resolved.soc).latency_ps / PS_PER_MS
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.hbm"
        path.write_bytes(compiler.dumps([model]))
        run = run_perf(path, model.name, 1, 0, STEADY_FRAMES, 0, preset, None, overrides)
    return static, run["latency_ms"]["p50"]
