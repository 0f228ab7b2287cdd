"""Scenario `cameras`: do N camera pipelines meet their frame rate on the two BPU cores?

Each camera delivers frames at a fixed rate. A frame goes through the whole SoC:
  1. CPU: downscale the Y plane by two into a pool buffer (the real address stream of the
     loop runs through the A55 cache model), then clean the buffer for the BPU;
  2. BPU: a detection network, layer by layer, on whichever core is free, at the camera's
     priority (camera 0 is the front camera and preempts with priority 255);
  3. DSP: the dequantize operator turns the network's int8 output into float32, streamed
     through TCM with ping-pong iDMA; then the CPU invalidates the result before reading it.
A frame's latency runs from its arrival to the end of step 3; a frame misses its deadline
when that exceeds the frame period. Every timing comes from the models of the blocks; the
networks are synthetic but fixed by the seed.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from emu.bpu.timing import Layer
from emu.cpu.cluster import CpuWork
from emu.mem import maintenance
from emu.mem.pool import PoolBuffer
from emu.soc.builder import Soc
from emu.soc.clock import PS_PER_S, ps_to_ms
from emu.soc.sched import PRIORITY_PREEMPT, CoreSlot, Stage, StageBody, Task
from emu.vdsp import ops
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

    def __post_init__(self) -> None:
        if self.cameras < 1 or self.frames < 1:
            raise ValueError("cameras and frames must be at least 1")
        if not self.fps > 0 or not self.gmacs > 0:
            raise ValueError("fps and gmacs must be positive")
        if self.width < 2 or self.height < 2 or self.width % 128 or self.height % 2:
            raise ValueError("width must be a multiple of 128 and height even")


# Output tensor of the synthetic detector: stride-8 feature map, 64 int8 channels.
_OUT_STRIDE = 8
_OUT_CHANNELS = 64
_TILE_BYTES = 32 * 1024


def synthetic_network(name: str, gmacs: float, in_bytes: int, out_bytes: int,
                      rng: np.random.Generator) -> list[Layer]:
    """A 24-layer backbone+head whose MACs and weights follow a typical detector's shape."""
    n = 24
    share = rng.uniform(0.5, 1.5, n)
    share /= share.sum()
    macs = np.floor(share * gmacs * 1e9).astype(np.int64)
    weights = np.linspace(16 * 1024, 1024 * 1024, n).astype(np.int64)
    act = np.geomspace(in_bytes * 4, out_bytes, n).astype(np.int64)
    layers = []
    for i in range(n):
        layer_in = in_bytes if i == 0 else int(act[i - 1])
        layers.append(Layer(f"{name}.l{i}", int(macs[i]), int(weights[i]), layer_in, int(act[i])))
    return layers


def downscale_addresses(width: int, height: int, src: int, dst: int) -> tuple[np.ndarray,
                                                                               np.ndarray]:
    """Addresses of a 2x downscale loop, one per 16-byte NEON access, in program order."""
    step = 16
    rows = np.arange(height // 2, dtype=np.int64)
    cols = np.arange(0, width, 2 * step, dtype=np.int64)
    top = src + (2 * rows[:, None]) * width + cols[None, :]
    bottom = top + width
    first = top + step
    out = dst + rows[:, None] * (width // 2) + cols[None, :] // 2
    per = np.stack([top, first, bottom, bottom + step, out], axis=-1).reshape(-1)
    writes = np.tile(np.array([0, 0, 0, 0, 1], dtype=bool), len(per) // 5)
    return per, writes


def run(soc: Soc, params: CameraParams) -> dict[str, Any]:
    """Simulate the scenario on a built SoC and return its results."""
    env = soc.env
    rng = np.random.default_rng(params.seed)
    period_ps = round(PS_PER_S / params.fps)
    in_bytes = (params.width // 2) * (params.height // 2)
    out_bytes = (params.width // _OUT_STRIDE) * (params.height // _OUT_STRIDE) * _OUT_CHANNELS
    latencies: dict[int, list[int]] = {c: [] for c in range(params.cameras)}
    networks = [synthetic_network(f"cam{c}", params.gmacs, in_bytes, out_bytes, rng)
                for c in range(params.cameras)]
    priorities = [PRIORITY_PREEMPT if c == 0 else max(1, 128 - c) for c in range(params.cameras)]
    out_shape = (_OUT_CHANNELS, params.height // _OUT_STRIDE, params.width // _OUT_STRIDE)
    output_blob = np.frombuffer(
        pack(np.zeros(out_shape, np.int8), TYPE_F32, mode=MODE_SCALE, scales=[0.05],
             zero_points=[0]), np.uint8)

    def frame(cam: int, index: int) -> Generator[simpy.Event, Any, None]:
        host = soc.recorder.track(f"host.cam{cam}")

        def step(label: str, event: simpy.Event) -> Generator[simpy.Event, Any, None]:
            start = env.now
            yield event
            host.slice(f"{label} {index}", start, env.now)

        image = soc.pool.alloc(params.width * params.height, cached=True, label="frame")
        small = soc.pool.alloc(in_bytes, cached=True, label="input")
        # The network's int8 output, laid out as the DSP dequantize operator reads it.
        output = soc.pool.alloc(len(output_blob), cached=True, label="output")
        output.data[:] = output_blob
        scores = soc.pool.alloc(4 * out_bytes, cached=True, label="scores")
        addrs, writes = downscale_addresses(params.width, params.height, image.phys_addr,
                                            small.phys_addr)
        work = CpuWork(f"cam{cam} downscale {index}", ops=6 * in_bytes, addrs=addrs,
                       is_write=writes)
        cpu_task = soc.cpu.work_task(work, core=1 + cam % (soc.config.cpu.cores - 1))
        yield from step("downscale", soc.cpu.submit(cpu_task))
        clean = maintenance.clean_ps(in_bytes, soc.config.mem)
        yield from step("clean", env.timeout(clean))
        bpu_task = soc.bpu.model_task(f"cam{cam} frame {index}", networks[cam],
                                      priority=priorities[cam], custom_id=index)
        yield from step("bpu", soc.bpu.submit(bpu_task))
        dsp_task = _dequantize_task(soc, cam, index, output, scores, priorities[cam])
        yield from step("dsp", soc.vdsp.submit(dsp_task))
        invalidate = maintenance.invalidate_ps(out_bytes * 4, soc.config.mem)
        yield from step("invalidate", env.timeout(invalidate))
        for buf in (image, small, output, scores):
            soc.pool.free(buf)

    def camera(cam: int) -> Generator[simpy.Event, Any, None]:
        # One host thread per camera handles its frames in order. Cameras are not in
        # phase: each starts a fraction of a period after the previous one.
        first_ps = cam * period_ps // params.cameras
        for index in range(params.frames):
            arrival = first_ps + index * period_ps
            if env.now < arrival:
                yield env.timeout(arrival - env.now)
            yield from frame(cam, index)
            latencies[cam].append(env.now - arrival)

    for cam in range(params.cameras):
        env.process(camera(cam))
    soc.run()

    per_camera = []
    for cam in range(params.cameras):
        lat = latencies[cam]
        per_camera.append({
            "camera": cam,
            "priority": priorities[cam],
            "frames": len(lat),
            "avg_ms": round(ps_to_ms(sum(lat) // len(lat)), 6),
            "max_ms": round(ps_to_ms(max(lat)), 6),
            "min_ms": round(ps_to_ms(min(lat)), 6),
            "deadline_misses": sum(1 for x in lat if x > period_ps),
        })
    return {
        "params": {k: getattr(params, k) for k in params.__dataclass_fields__},
        "period_ms": round(ps_to_ms(period_ps), 6),
        "cameras": per_camera,
        "sim_time_ms": round(ps_to_ms(soc.now_ps), 6),
    }


def _dequantize_task(soc: Soc, cam: int, index: int, inp: PoolBuffer, out: PoolBuffer,
                     priority: int) -> Task:
    """The DSP's dequantize operator on the network output (an RPC task on any DSP core)."""
    op = ops.lookup(nn.CMD_DEQUANTIZE)
    assert op is not None
    name = f"cam{cam} dequantize {index}"

    def body(slot: CoreSlot) -> Generator[simpy.Event, Any, StageBody | None]:
        return (yield from op.run(soc.vdsp.hw[slot.index], slot, inp, out))

    return Task(name, [Stage(name, body)], priority=priority, custom_id=index)
