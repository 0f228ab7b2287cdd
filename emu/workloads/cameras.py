"""Scenario `cameras`: do N camera pipelines meet their frame rate on the SoC?

A host program written as a board application would be: one host thread per camera. At
start-up each thread allocates its pool buffers with hbSys. Then, for every frame:
  1. it waits for the frame to arrive (a fixed rate; the cameras are spread evenly across
     the frame period, or all arrive at once with `sync`);
  2. CPU: invalidate the frame buffer the ISP wrote, downscale its Y plane by two into the
     network input (the loop's real address stream runs through the A55 cache model), and
     clean the input for the BPU;
  3. BPU: the camera's detection network (layer groups in one function call) on whichever
     core is free, at the camera's priority (camera 0 is the front camera and preempts
     with 255). The hbDNN runtime is not there yet, so the thread queues the model task
     itself and waits;
  4. DSP: the dequantize operator turns the network's int8 output into float32 through
     hbDSPRpc / hbDSPWaitTaskDone; the thread invalidates the result before reading it.
A frame's latency runs from its arrival to the end of step 4 and is split exactly into
CPU (the thread's time on an A55 core), BPU (the model on a BPU core), DSP (the RPC round
trip and the operator on a DSP core) and waiting (for a core of any kind, or for the
thread to finish the previous frame). A frame misses its deadline when its latency exceeds
the frame period. The networks are synthetic but fixed by the seed (`synthetic_network`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from emu.bpu.timing import LayerGroup, TensorRef
from emu.cpu.cluster import CpuWork
from emu.cpu.work import vector_loop
from emu.errors import HostThreadError, InputError, SimulationError, UserError
from emu.runtime import hbdsp, hbsys, session
from emu.soc.clock import PS_PER_S, report_ms
from emu.soc.sched import PRIORITY_PREEMPT
from emu.vdsp.ops import nn
from emu.vdsp.ops.tensor_args import MODE_SCALE, TYPE_F32, pack


@dataclass(frozen=True)
class CameraParams:
    cameras: int = 2
    frames: int = 8
    fps: float = 30.0
    width: int = 1280
    height: int = 720
    gmacs: float = 20.0
    seed: int = 0
    sync: bool = False

    def __post_init__(self) -> None:
        if self.cameras < 1 or self.frames < 1:
            raise ValueError("cameras and frames must be at least 1")
        if not (math.isfinite(self.fps) and self.fps > 0 and math.isfinite(self.gmacs)
                and self.gmacs > 0):
            raise ValueError("fps and gmacs must be positive and finite")
        if self.width < 2 or self.height < 2 or self.width % 128 or self.height % 2:
            raise ValueError("width must be a multiple of 128 and height even")


# Output tensor of the synthetic detector: stride-8 feature map, 64 int8 channels.
_OUT_STRIDE = 8
_OUT_CHANNELS = 64
_LAYERS = 24
_STRIDED = (0, _LAYERS // 3)  # the two stride-2 convs: input stride 2 to output stride 8


def synthetic_network(name: str, gmacs: float, width: int, height: int,
                      rng: np.random.Generator) -> list[LayerGroup]:
    """A detector backbone of 3x3 convs on the half-size Y plane, down to stride 8, and a
    1x1 head to the 64-channel output. The channel counts widen along the network with a
    seeded jitter and are scaled together so the network does about `gmacs` GMACs."""
    base = np.geomspace(16, 128, _LAYERS - 1) * rng.uniform(0.75, 1.25, _LAYERS - 1)

    def build(scale: float) -> list[LayerGroup]:
        x = TensorRef(f"{name}.input", 1, height // 2, width // 2, 1)
        layers = []
        for i in range(_LAYERS):
            stride = 2 if i in _STRIDED else 1
            head = i == _LAYERS - 1
            c = _OUT_CHANNELS if head else max(1, round(base[i] * scale))
            k = 1 if head else 3
            out = TensorRef(f"{name}.l{i}", 1, (x.h - 1) // stride + 1,
                            (x.w - 1) // stride + 1, c)
            layers.append(LayerGroup(f"{name}.l{i}", "Conv", "dense", out, (x,), cin=x.c,
                                     kernel_h=k, kernel_w=k, stride=stride,
                                     weight_bytes=c * x.c * k * k, leaves=head))
            x = out
        return layers

    # MACs grow with the square of the width (both channel counts), less at the ends.
    scale = math.sqrt(gmacs * 1e9 / sum(layer.macs for layer in build(1.0)))
    return build(scale)


def downscale_work(name: str, width: int, height: int, src: int, dst: int, vector_bytes: int,
                   line_bytes: int) -> CpuWork:
    """A 2x downscale of a `width` x `height` 8-bit image at `src` into `dst`, as a NEON
    loop: per output vector, two vector loads from each of the two input rows, the pairwise
    adds and the rounding narrow (6 NEON ops on the FP pipes), one store, and the loop step
    (`vector_loop`; the inner loop exits once per output row). Accesses in program order:
    the top row (stream 0), the bottom row (stream 1), the output (stream 2): its stores run
    along the row, so the store buffer merges them into whole lines, recorded once per line
    as full-line stores. The three streams interleave vector by vector, which
    `emu.cpu.work.Stream` (one range after another) does not describe, so the accesses are
    built here."""
    step = vector_bytes
    rows = np.arange(height // 2, dtype=np.int64)
    cols = np.arange(0, width, 2 * step, dtype=np.int64)
    top = src + (2 * rows[:, None]) * width + cols[None, :]
    bottom = top + width
    out = dst + rows[:, None] * (width // 2) + cols[None, :] // 2
    per = np.stack([top, top + step, bottom, bottom + step, out], axis=-1).reshape(-1)
    kinds = np.tile(np.arange(5), len(per) // 5)
    keep = (kinds < 4) | (per % line_bytes == 0)
    per, kinds = per[keep], kinds[keep]
    streams = np.array([0, 0, 1, 1, 2], np.uint8)[kinds]
    writes = kinds == 4
    vectors = out.size
    return CpuWork(name, ops=vector_loop(vectors, exits=height // 2, load=4, store=1, fp=6),
                   addrs=per, is_write=writes, full_line=writes, streams=streams)


@dataclass
class FrameTimes:
    """One frame's latency and its exact split, in ps."""

    index: int
    arrival_ps: int
    latency_ps: int = 0
    cpu_ps: int = 0
    bpu_ps: int = 0
    dsp_ps: int = 0
    wait_ps: int = 0


class _Camera:
    """One camera's host thread: its buffers, network and frames."""

    def __init__(self, cam: int, params: CameraParams, network: list[LayerGroup], priority: int,
                 period_ps: int, on_frame: Callable[[], None]) -> None:
        self.cam = cam
        self.p = params
        self.network = network
        self.priority = priority
        self.period_ps = period_ps
        self.first_ps = 0 if params.sync else cam * period_ps // params.cameras
        self.frames: list[FrameTimes] = []
        self.on_frame = on_frame

    def _alloc(self, size: int) -> hbsys.hbSysMem:
        mem = hbsys.hbSysMem()
        if hbsys.hbSysAllocCachedMem(mem, size) != hbsys.HB_SYS_SUCCESS:
            raise InputError(f"camera {self.cam}: the pool cannot hold {size} B "
                             f"(mem.pool_bytes)")
        return mem

    def run(self) -> None:
        """The thread's body: set up, then every frame in order."""
        p = self.p
        in_bytes = (p.width // 2) * (p.height // 2)
        out_shape = (_OUT_CHANNELS, p.height // _OUT_STRIDE, p.width // _OUT_STRIDE)
        # The network's int8 output, laid out as the DSP dequantize operator reads it.
        blob = pack(np.zeros(out_shape, np.int8), TYPE_F32, mode=MODE_SCALE, scales=[0.05],
                    zero_points=[0])
        image, small = self._alloc(p.width * p.height), self._alloc(in_bytes)
        output, scores = self._alloc(len(blob)), self._alloc(4 * math.prod(out_shape))
        assert output.virAddr is not None
        output.virAddr[:] = np.frombuffer(blob, np.uint8)
        cpu = session.current().config.cpu
        ctrl = hbdsp.hbDSPRpcCtrlParam()
        hbdsp.HB_DSP_INITIALIZE_RPC_CTRL_PARAM(ctrl)
        ctrl.rpcCmd, ctrl.priority = nn.CMD_DEQUANTIZE, self.priority
        for index in range(p.frames):
            self._frame(index, image, small, output, scores, ctrl,
                        downscale_work(f"cam{self.cam} downscale {index}", p.width, p.height,
                                       image.phyAddr, small.phyAddr, cpu.vector_bytes,
                                       cpu.line_bytes))
        for mem in (image, small, output, scores):
            hbsys.hbSysFreeMem(mem)

    def _frame(self, index: int, image: hbsys.hbSysMem, small: hbsys.hbSysMem,
               output: hbsys.hbSysMem, scores: hbsys.hbSysMem, ctrl: hbdsp.hbDSPRpcCtrlParam,
               downscale: CpuWork) -> None:
        _sess, thread = session.caller()
        times = FrameTimes(index, self.first_ps + index * self.period_ps)
        if thread.now_ps < times.arrival_ps:
            thread.sleep(times.arrival_ps - thread.now_ps, f"frame {index} due")
        backlog = thread.now_ps - times.arrival_ps  # still busy with earlier frames
        busy0, queued0 = thread.cpu_busy_ps, thread.cpu_queued_ps

        hbsys.hbSysFlushMem(image, hbsys.HB_SYS_MEM_CACHE_INVALIDATE)
        thread.cpu(downscale, f"downscale {index}")
        hbsys.hbSysFlushMem(small, hbsys.HB_SYS_MEM_CACHE_CLEAN)

        model = thread.run_model(f"cam{self.cam} frame {index}", self.network,
                                 priority=self.priority, custom_id=index)

        ctrl.customId = index
        rc, task = hbdsp.hbDSPRpc(output, scores, ctrl)
        if task is None or hbdsp.hbDSPWaitTaskDone(task, 0) != hbdsp.HB_DSP_SUCCESS:
            raise SimulationError(f"camera {self.cam} frame {index}: dequantize failed: "
                                  f"{hbdsp.hbDSPGetErrorDesc(rc)} {task and task.error}")
        dsp_pending = task.task.pending_ps
        hbdsp.hbDSPReleaseTask(task)
        hbsys.hbSysFlushMem(scores, hbsys.HB_SYS_MEM_CACHE_INVALIDATE)

        # The thread was on a core, queued for one, or blocked on the BPU or the DSP; what
        # is left after CPU, BPU and every queue is the RPC round trip and the operator.
        times.latency_ps = thread.now_ps - times.arrival_ps
        times.cpu_ps = thread.cpu_busy_ps - busy0
        times.bpu_ps = model.busy_ps
        times.wait_ps = (backlog + thread.cpu_queued_ps - queued0 + model.pending_ps
                         + dsp_pending)
        times.dsp_ps = times.latency_ps - times.cpu_ps - times.bpu_ps - times.wait_ps
        self.frames.append(times)
        self.on_frame()


def run(params: CameraParams, preset: str = "j5", config_file: str | None = None,
        overrides: tuple[str, ...] | list[str] = (), *, trace: bool = False,
        progress: Callable[[int, int, str], None] | None = None,
        ) -> tuple[dict[str, Any], session.Session]:
    """Run the scenario on a new session; its results and the (closed) session.

    `progress(done, total, what)` is called after every frame of every camera."""
    total = params.cameras * params.frames
    done = [0]

    def on_frame() -> None:
        done[0] += 1
        if progress is not None:
            progress(done[0], total, f"frame {done[0]}/{total}")

    rng = np.random.default_rng(params.seed)
    period_ps = round(PS_PER_S / params.fps)
    cameras = [
        _Camera(c, params, synthetic_network(f"cam{c}", params.gmacs, params.width,
                                             params.height, rng),
                PRIORITY_PREEMPT if c == 0 else max(1, 128 - c), period_ps, on_frame)
        for c in range(params.cameras)]
    with session.Session(preset, config_file, overrides, trace=trace) as sess:
        for camera in cameras:
            sess.spawn(camera.run, name=f"cam{camera.cam}")
        run_threads(sess)
    return _results(params, period_ps, cameras, sess), sess


def run_threads(sess: session.Session) -> None:
    """Run the session's host threads to the end; a user error inside one (the pool too
    small, ...) comes out as itself, for the command line to report in one line."""
    try:
        sess.run()
    except HostThreadError as exc:
        if isinstance(exc.__cause__, UserError):
            raise exc.__cause__ from None
        raise


def run_scenario(options: dict[str, Any], preset: str, config_file: str | None,
                 overrides: list[str], trace: bool,
                 progress: Callable[[int, int, str], None] | None = None,
                 ) -> tuple[dict[str, Any], session.Session]:
    """`emu scenario cameras` (see `emu.workloads.scenarios`)."""
    try:
        params = CameraParams(**options)
    except ValueError as exc:
        raise InputError(f"scenario cameras: {exc}") from None
    return run(params, preset, config_file, overrides, trace=trace, progress=progress)


def summary(results: dict[str, Any]) -> tuple[str, list[str], list[tuple[Any, ...]],
                                              list[str]]:
    """The text table of `emu scenario cameras`: one row per camera, and notes below."""
    p = results["params"]
    rows = [(c["camera"], c["priority"], c["frames"], c["latency_ms"]["p50"],
             c["latency_ms"]["p99"], c["latency_ms"]["max"], c["deadline_misses"],
             c["stages_ms"]["cpu"], c["stages_ms"]["bpu"], c["stages_ms"]["dsp"],
             c["stages_ms"]["wait"]) for c in results["cameras"]]
    busy = zip(results["bpu_busy_ms"], results["bpu_utilisation"], strict=True)
    notes = ["stage columns: mean per frame; wait = queued for a CPU, BPU or DSP core, or "
             "behind the camera's previous frame",
             f"BPU busy: {', '.join(f'{b:.3f} ms ({u:.1%})' for b, u in busy)}; "
             f"simulated {results['sim_time_ms']:.3f} ms"]
    title = (f"cameras at {p['fps']:g} FPS (period {results['period_ms']:.3f} ms, frames "
             f"arrive {'together' if p['sync'] else 'staggered'})")
    return title, ["camera", "priority", "frames", "p50 ms", "p99 ms", "max ms", "missed",
                   "cpu ms", "bpu ms", "dsp ms", "wait ms"], rows, notes



def percentile(values: list[int], q: float) -> int:
    """The nearest-rank percentile: the smallest value with at least q of them at or below
    it (no interpolation, so it is always one of the measured values)."""
    ranked = sorted(values)
    return ranked[max(0, math.ceil(q * len(ranked)) - 1)]


def _results(params: CameraParams, period_ps: int, cameras: list[_Camera],
             sess: session.Session) -> dict[str, Any]:
    per_camera = []
    for camera in cameras:
        lat = [f.latency_ps for f in camera.frames]
        n = len(camera.frames)
        per_camera.append({
            "camera": camera.cam,
            "priority": camera.priority,
            "frames": n,
            "latency_ms": {"avg": report_ms(sum(lat) / n), "p50": report_ms(percentile(lat, 0.5)),
                           "p99": report_ms(percentile(lat, 0.99)), "max": report_ms(max(lat)),
                           "min": report_ms(min(lat))},
            "deadline_misses": sum(1 for x in lat if x > period_ps),
            "stages_ms": {stage: report_ms(sum(getattr(f, f"{stage}_ps")
                                               for f in camera.frames) / n)
                          for stage in ("cpu", "bpu", "dsp", "wait")},
            "per_frame": [{"frame": f.index, "arrival_ms": report_ms(f.arrival_ps),
                           "latency_ms": report_ms(f.latency_ps), "cpu_ms": report_ms(f.cpu_ps),
                           "bpu_ms": report_ms(f.bpu_ps), "dsp_ms": report_ms(f.dsp_ps),
                           "wait_ms": report_ms(f.wait_ps)} for f in camera.frames],
        })
    bpu = sess.stats()["bpu"]
    return {
        "params": {f.name: getattr(params, f.name) for f in fields(params)},
        "period_ms": report_ms(period_ps),
        "cameras": per_camera,
        "bpu_busy_ms": [report_ms(b) for b in bpu["busy_ps"]],
        "bpu_utilisation": bpu["utilisation"],
        "sim_time_ms": report_ms(sess.now_ps),
    }

