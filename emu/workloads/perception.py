"""Scenario `perception`: do N cameras and a LiDAR meet their rates on one SoC?

A host program written as a board application would be, against the runtime's C-named
APIs: one host thread per camera and one for the LiDAR, sharing the two BPU cores.

  cameras  every frame period (`fps`; the cameras spread evenly across it, or all arrive
           at once with `sync`) the camera's NV12 image is in memory (the ISP and the
           pyramid wrote it by DMA) and the thread runs the detector on it: hbDNNInfer of
           `camera_model` (YOLOv8n by default; `input_size` square, compiled with an
           NV12 input, so the colour conversion is the BPU's Preprocess node),
           hbDNNWaitTaskDone, hbDNNReleaseTask.
  LiDAR    every sweep period (`lidar_hz`) a synthetic nuScenes-like sweep of `points`
           points arrives; the thread runs CenterPoint's pillar preprocessing by the DSP
           scheme of `emu pointcloud --impl dsp2` (the same `Preprocessor`: DSP stage 1 and
           stage 2 through hbDSPRpc, voxelisation on an A55 core, the cache maintenance
           between them), then the `centerpoint_pillars` backbone and heads on the BEV
           grid of that preprocessing (512 x 512) through hbDNNInfer.

Priorities: every hbDNNInfer of a pipeline carries its priority (`camera_priority`,
`lidar_priority`), and so does its host thread's CPU work; the customId stays the
initialiser's 0, so at equal priority the BPU serves the tasks in the order they were
submitted: a LiDAR backbone that comes during a burst of camera frames waits for all of
them. The BPU queue lets a higher priority overtake only after the FCs already in the
core's low FIFO, and priority 255 at the next function-call boundary (`emu/bpu/cores.py`):
so the other models' `max_time_per_fc` (each model has its own, as each is compiled on its
own) bounds how long a 255 task waits for a core, at a price: every function call costs a
fixed overhead and its feature maps go through DDR, so a fine cut slows the cut model
down. The DSP calls of the preprocessing keep the sample's priority (0): `Preprocessor`
does not take one.

What is not modelled: the pillar feature network and the scatter that turn the
preprocessing's pillar features into the 64-channel BEV image (the backbone's input buffer
is timed, not filled), and the detectors' post-processing (decoding, NMS). Only timing
matters here, so the models' outputs are not computed (`hbdnn.set_timing_only`, as
`emu perf`).

Models: built by the zoo and compiled once per process for each input size (calibrated on
one random sample: the calibration changes the numbers, not the layers or their timing);
a different `max_time_per_fc` only cuts the same quantised model into other function
calls, which is the compiler's last step (`compiler.cut`).

Per pipeline: frames, latency (arrival to the end of the last step) avg / p50 / p99 / max,
deadline misses (latency above the pipeline's period) and the mean split of a frame:
cameras into the model's BPU time, its other segments' time (input and output conversion,
which the runtime's worker threads do on the A55 cores) and the rest (queues, API calls,
the backlog of the previous frame); the LiDAR into preprocessing, the backbone (its BPU
time and queueing shown apart) and the backlog. Per core: BPU, DSP and A55 busy time and
utilisation.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from emu.dnn import alloc_tensors
from emu.errors import InputError, SimulationError
from emu.nn import compiler, zoo
from emu.nn.compiler import CompiledModel
from emu.runtime import hbdnn, session
from emu.soc.clock import PS_PER_S, report_ms
from emu.soc.config import SocConfig
from emu.workloads.cameras import percentile, run_threads
from emu.workloads.pointcloud import runner
from emu.workloads.pointcloud.impls import Preprocessor
from emu.workloads.pointcloud.params import CENTERPOINT

DETECTOR = "yolov8n"
# The zoo's detectors a camera may run (`camera_model`): their total stride is 32.
DETECTORS = ("yolov8n", "yolov8s", "yolov5s")
BACKBONE = "centerpoint_pillars"
LIDAR_SCHEME = "dsp2"
# Sweeps are generated up front (6 MB each at 300,000 points); a longer run cycles them.
DISTINCT_SWEEPS = 8
_YOLO_STRIDE = 32


@dataclass(frozen=True)
class PerceptionParams:
    """The scenario's options (see the module docstring); checked here, so a bad value
    from Python is refused as from the command line."""

    cameras: int = 2
    fps: float = 30.0
    lidar_hz: float = 10.0
    seconds: float = 0.3
    input_size: int = 640
    points: int = 300_000
    camera_priority: int = 128
    lidar_priority: int = 128
    camera_max_time_per_fc: float = 0.0
    lidar_max_time_per_fc: float = 0.0
    sync: bool = False
    seed: int = 0
    camera_model: str = DETECTOR

    def __post_init__(self) -> None:
        if self.camera_model not in DETECTORS:
            raise ValueError(f"camera_model {self.camera_model!r}: expected one of "
                             f"{', '.join(DETECTORS)}")
        if self.cameras < 0:
            raise ValueError(f"cameras {self.cameras}: must not be negative")
        for name in ("fps", "lidar_hz", "seconds"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} {value}: must be positive and finite")
        if not (_YOLO_STRIDE <= self.input_size <= zoo.MAX_SIDE
                and self.input_size % _YOLO_STRIDE == 0):
            raise ValueError(f"input_size {self.input_size}: {self.camera_model} needs a "
                             f"multiple of {_YOLO_STRIDE} from {_YOLO_STRIDE} to {zoo.MAX_SIDE}")
        if not 1 <= self.points <= CENTERPOINT.max_input_points:
            raise ValueError(f"points {self.points}: expected 1 to "
                             f"{CENTERPOINT.max_input_points} (CenterPoint's input limit)")
        for name in ("camera_priority", "lidar_priority"):
            if not 0 <= getattr(self, name) <= 255:
                raise ValueError(f"{name} {getattr(self, name)}: expected 0 to 255")
        for name in ("camera_max_time_per_fc", "lidar_max_time_per_fc"):
            if not 0 <= getattr(self, name) <= compiler.MAX_TIME_PER_FC_US:
                raise ValueError(f"{name} {getattr(self, name)}: expected 0 (no limit) to "
                                 f"{compiler.MAX_TIME_PER_FC_US} microseconds")

    @property
    def camera_frames(self) -> int:
        return max(1, round(self.seconds * self.fps))

    @property
    def sweeps(self) -> int:
        return max(1, round(self.seconds * self.lidar_hz))


# --- the models ------------------------------------------------------------------------------

_QUANTISED: dict[tuple[str, int, int, str], CompiledModel] = {}


def compiled(name: str, size: tuple[int, int], input_type: str, max_time_per_fc_us: float,
             hardware: SocConfig) -> CompiledModel:
    """Zoo model `name` at `size` compiled for `hardware` with `max_time_per_fc_us`, as
    `compile_model` makes it; the quantised model is kept for the rest of the process."""
    key = (name, *size, input_type)
    if key not in _QUANTISED:
        options = compiler.CompileOptions(input_type=input_type, calib_random=1)
        _QUANTISED[key] = compiler.compile_model(zoo.build(name, size), name, options,
                                                 hardware)
    return compiler.cut(_QUANTISED[key], max_time_per_fc_us, hardware)


# --- the pipelines ---------------------------------------------------------------------------

@dataclass
class _Frame:
    """One frame (or sweep) of a pipeline, in ps: its latency and its split."""

    index: int
    arrival_ps: int
    latency_ps: int = 0
    parts: dict[str, int] = dataclasses.field(default_factory=dict)
    model_kinds: dict[str, int] = dataclasses.field(default_factory=dict)
    """The model's busy time by kind of work (its task's segments: bpu, quantize, ...)."""


def _check(rc: int, what: str) -> None:
    if rc != hbdnn.HB_DNN_SUCCESS:
        raise SimulationError(f"{what}: {hbdnn.hbDNNGetErrorDesc(rc)}")


class _Pipeline:
    """A host thread that handles a frame every `period_ps` from `first_ps` on."""

    kind = ""

    def __init__(self, name: str, dnn: hbdnn.hbDNNHandle, priority: int, period_ps: int,
                 first_ps: int, count: int, on_frame: Callable[[], None]) -> None:
        self.name = name
        self.dnn = dnn
        self.priority = priority
        self.period_ps = period_ps
        self.first_ps = first_ps
        self.count = count
        self.on_frame = on_frame
        self.frames: list[_Frame] = []

    def run(self) -> None:
        """The thread's body: its tensors, then every frame in order as it arrives."""
        inputs, outputs = alloc_tensors(self.dnn, False), alloc_tensors(self.dnn, True)
        ctrl = hbdnn.hbDNNInferCtrlParam()
        hbdnn.HB_DNN_INITIALIZE_INFER_CTRL_PARAM(ctrl)
        ctrl.priority = self.priority
        self.setup()
        _sess, thread = session.caller()
        for index in range(self.count):
            frame = _Frame(index, self.first_ps + index * self.period_ps)
            if thread.now_ps < frame.arrival_ps:
                thread.sleep(frame.arrival_ps - thread.now_ps, f"{self.name} {index} due")
            frame.parts["backlog"] = thread.now_ps - frame.arrival_ps
            self.before_model(frame)
            start = thread.now_ps
            rc, task = hbdnn.hbDNNInfer(outputs, inputs, self.dnn, ctrl)
            _check(rc, f"{self.name} frame {index}: hbDNNInfer")
            assert task is not None
            _check(hbdnn.hbDNNWaitTaskDone(task, 0), f"{self.name} frame {index}: wait")
            frame.latency_ps = thread.now_ps - frame.arrival_ps  # the result is ready
            frame.parts["model"] = thread.now_ps - start
            bpu = [s for s in task.segments if s["kind"] == "bpu"]
            frame.parts["bpu"] = sum(s["busy_ps"] for s in bpu)
            frame.parts["bpu_queue"] = sum(s["pending_ps"] for s in bpu)
            frame.parts["model_cpu"] = sum(s["busy_ps"] for s in task.segments) \
                - frame.parts["bpu"]
            for s in task.segments:
                frame.model_kinds[s["kind"]] = frame.model_kinds.get(s["kind"], 0) \
                    + s["busy_ps"]
            _check(hbdnn.hbDNNReleaseTask(task), f"{self.name} frame {index}: release")
            self.frames.append(frame)
            self.on_frame()

    def setup(self) -> None:
        """What the thread does once before its first frame."""

    def before_model(self, frame: _Frame) -> None:
        """What a frame goes through before the model."""


class _Camera(_Pipeline):
    kind = "camera"


class _Lidar(_Pipeline):
    kind = "lidar"

    def __init__(self, sweeps: list[runner.Frame], *args: Any) -> None:
        super().__init__(*args)
        self.sweeps = sweeps
        self.pre: Preprocessor | None = None

    def setup(self) -> None:
        self.pre = Preprocessor(CENTERPOINT)  # its pool buffers, as the sample's start-up

    def before_model(self, frame: _Frame) -> None:
        assert self.pre is not None
        thread = session.caller()[1]
        start = thread.now_ps
        self.pre.load(self.sweeps[frame.index % len(self.sweeps)].points)
        self.pre.run(LIDAR_SCHEME)
        frame.parts["preprocess"] = thread.now_ps - start


def run(params: PerceptionParams, preset: str = "j5", config_file: str | None = None,
        overrides: tuple[str, ...] | list[str] = (), *, trace: bool = False,
        progress: Callable[[int, int, str], None] | None = None,
        ) -> tuple[dict[str, Any], session.Session]:
    """Run the scenario on a new session; its results and the (closed) session.

    `progress(done, total, what)` is called after every camera frame and LiDAR sweep."""
    total = params.cameras * params.camera_frames + params.sweeps
    done = [0]

    def on_frame() -> None:
        done[0] += 1
        if progress is not None:
            progress(done[0], total, f"frame {done[0]}/{total}")

    sweeps = runner.synthetic(CENTERPOINT, min(params.sweeps, DISTINCT_SWEEPS), params.seed,
                              params.points)
    side = params.input_size
    with session.Session(preset, config_file, overrides, trace=trace) as sess:
        hardware = sess.config
        if progress is not None:
            progress(0, total, "compiling the models")
        models = [compiled(params.camera_model, (side, side), "nv12", params.camera_max_time_per_fc,
                           hardware),
                  compiled(BACKBONE, (CENTERPOINT.x_len, CENTERPOINT.y_len), "featuremap",
                           params.lidar_max_time_per_fc, hardware)]
        data = compiler.dumps(models)
        rc, packed = hbdnn.hbDNNInitializeFromDDR([data], [len(data)])
        _check(rc, "hbDNNInitializeFromDDR")
        assert packed is not None
        hbdnn.set_timing_only(packed)
        detector, backbone = (hbdnn.hbDNNGetModelHandle(packed, m.name)[1] for m in models)
        assert detector is not None and backbone is not None
        period = round(PS_PER_S / params.fps)
        pipelines: list[_Pipeline] = [
            _Camera(f"cam{c}", detector, params.camera_priority, period,
                    0 if params.sync else c * period // params.cameras, params.camera_frames,
                    on_frame) for c in range(params.cameras)]
        pipelines.append(_Lidar(sweeps, "lidar", backbone, params.lidar_priority,
                                round(PS_PER_S / params.lidar_hz), 0, params.sweeps,
                                on_frame))
        for pipeline in pipelines:
            sess.spawn(pipeline.run, name=pipeline.name, priority=pipeline.priority)
        run_threads(sess)
        _check(hbdnn.hbDNNRelease(packed), "hbDNNRelease")
    return _results(params, models, pipelines, sess), sess


def run_scenario(options: dict[str, Any], preset: str, config_file: str | None,
                 overrides: list[str], trace: bool,
                 progress: Callable[[int, int, str], None] | None = None,
                 ) -> tuple[dict[str, Any], session.Session]:
    """`emu scenario perception` (see `emu.workloads.scenarios`)."""
    try:
        params = PerceptionParams(**options)
    except ValueError as exc:
        name, _, rest = str(exc).partition(" ")  # the message starts with the field's name
        raise InputError(f"scenario perception: --{name.replace('_', '-')} {rest}") from None
    return run(params, preset, config_file, overrides, trace=trace, progress=progress)


# --- results ---------------------------------------------------------------------------------

# The mean split of a frame, per pipeline kind: (result key, part of the frame) in ps.
_SPLITS = {
    "camera": (("bpu", "bpu"), ("cpu", "model_cpu"), ("other", None)),
    "lidar": (("preprocess", "preprocess"), ("backbone", "model"), ("backbone_bpu", "bpu"),
              ("backbone_bpu_queue", "bpu_queue"), ("backlog", "backlog")),
}


def _split(pipeline: _Pipeline, frame: _Frame) -> dict[str, int]:
    """A frame's split (see `_SPLITS`); a camera's `other` is what the BPU and CPU time of
    its model leave of the latency: queues, API calls and the backlog."""
    out: dict[str, int] = {}
    for key, part in _SPLITS[pipeline.kind]:
        if part is None:
            out[key] = frame.latency_ps - sum(out.values())
        else:
            out[key] = frame.parts[part]
    return out


def latency_summary(values: list[int]) -> dict[str, float]:
    """avg, p50, p99 (nearest rank), max and min of latencies in ps, in ms."""
    return {"avg": report_ms(sum(values) / len(values)), "p50": report_ms(percentile(values, 0.5)),
            "p99": report_ms(percentile(values, 0.99)), "max": report_ms(max(values)),
            "min": report_ms(min(values))}


# What each kind of an hbDNN task's work is, for "where the time goes".
KIND_LABELS = {
    "bpu": "the BPU", "quantize": "A55 quantising float inputs",
    "dequantize": "A55 dequantising outputs", "layout": "A55 layout changes (NCHW <-> NHWC)",
    "pad": "A55 padding NV12 rows", "cache": "A55 cache maintenance",
    "cpu": "A55 operators the BPU cannot run", "dsp": "DSP operators",
}


def where_time_goes(pipeline: _Pipeline) -> dict[str, Any]:
    """The model's mean busy time per frame by kind of work, largest first, and the kind
    that dominates it."""
    n = len(pipeline.frames)
    kinds: dict[str, int] = {}
    for f in pipeline.frames:
        for kind, ps in f.model_kinds.items():
            kinds[kind] = kinds.get(kind, 0) + ps
    ordered = sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))
    return {"by_kind_ms": {k: report_ms(ps / n) for k, ps in ordered},
            "dominant": ordered[0][0] if ordered else None}


def _pipeline_results(pipeline: _Pipeline) -> dict[str, Any]:
    lat = [f.latency_ps for f in pipeline.frames]
    splits = [_split(pipeline, f) for f in pipeline.frames]
    n = len(splits)
    return {
        "pipeline": pipeline.name, "kind": pipeline.kind, "priority": pipeline.priority,
        "period_ms": report_ms(pipeline.period_ps), "frames": n,
        "latency_ms": latency_summary(lat),
        "deadline_misses": sum(1 for x in lat if x > pipeline.period_ps),
        "stages_ms": {key: report_ms(sum(s[key] for s in splits) / n) for key in splits[0]},
        "model_time": where_time_goes(pipeline),
        "per_frame": [{"frame": f.index, "arrival_ms": report_ms(f.arrival_ps),
                       "latency_ms": report_ms(f.latency_ps),
                       **{f"{key}_ms": report_ms(ps) for key, ps in s.items()}}
                      for f, s in zip(pipeline.frames, splits, strict=True)],
    }


def _results(params: PerceptionParams, models: list[CompiledModel],
             pipelines: list[_Pipeline], sess: session.Session) -> dict[str, Any]:
    stats = sess.stats()
    cores = {"bpu": stats["bpu"], "dsp": stats["vdsp"], "a55": stats["cpu"]}
    return {
        "params": {f.name: getattr(params, f.name) for f in fields(params)},
        "models": [{"name": m.name, "input": list(m.inputs[0].shape),
                    "input_type": m.options["input_type"],
                    "function_calls": sum(len(v) for v in m.function_calls.values()),
                    "max_time_per_fc_us": m.options["max_time_per_fc_us"]}
                   for m in models],
        "pipelines": [_pipeline_results(p) for p in pipelines],
        "busy_ms": {k: [report_ms(b) for b in v["busy_ps"]] for k, v in cores.items()},
        "utilisation": {k: v["utilisation"] for k, v in cores.items()},
        "sim_time_ms": report_ms(sess.now_ps),
    }


def summary(results: dict[str, Any]) -> tuple[str, list[str], list[tuple[Any, ...]],
                                              list[str]]:
    """The text table of `emu scenario perception`: one row per pipeline, notes below."""
    p = results["params"]
    rows = []
    for q in results["pipelines"]:
        s, lat = q["stages_ms"], q["latency_ms"]
        split = ", ".join(f"{k} {v:.3f}" for k, v in s.items())
        rows.append((q["pipeline"], q["priority"], q["period_ms"], q["frames"],
                     lat["p50"], lat["p99"], lat["max"], q["deadline_misses"], split))
    models = "; ".join(f"{m['name']} {'x'.join(map(str, m['input']))} "
                       f"{m['input_type']}: {m['function_calls']} FC(s)"
                       + (f" of at most {m['max_time_per_fc_us']:g} us"
                          if m["max_time_per_fc_us"] else "")
                       for m in results["models"])
    util = "; ".join(f"{k.upper() if k != 'a55' else 'A55'} "
                     f"{' '.join(f'{u:.1%}' for u in v)}"
                     for k, v in results["utilisation"].items())
    notes = [f"split: mean ms per frame; camera cpu = the model's CPU segments, other = "
             f"BPU queue, API calls and backlog; LiDAR preprocessing by {LIDAR_SCHEME} "
             f"(DSP + A55), backbone from hbDNNInfer to done (of which on and queued for a "
             f"BPU core)",
             f"models: {models}",
             f"utilisation per core: {util}; simulated {results['sim_time_ms']:.3f} ms"]
    for q in results["pipelines"]:
        # Say so when most of the model's time is not the BPU's.
        by_kind = q["model_time"]["by_kind_ms"]
        total, bpu = sum(by_kind.values()), by_kind.get("bpu", 0.0)
        others = [k for k in by_kind if k != "bpu"]  # largest first
        if others and bpu < total / 2:
            notes.append(f"where the time goes: {q['pipeline']}'s model is busy "
                         f"{total:.3f} ms a frame, {total - bpu:.3f} ms of it outside the "
                         f"BPU, most of that {KIND_LABELS.get(others[0], others[0])} "
                         f"({by_kind[others[0]]:.3f} ms)")
    title = (f"perception: {p['cameras']} camera(s) at {p['fps']:g} FPS "
             f"({'together' if p['sync'] else 'staggered'}), LiDAR at {p['lidar_hz']:g} Hz "
             f"({p['points']} points), {p['seconds']:g} s")
    return title, ["pipeline", "priority", "period ms", "frames", "p50 ms", "p99 ms",
                   "max ms", "missed", "split (mean ms)"], rows, notes
