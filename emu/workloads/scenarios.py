"""The scenarios `emu scenario NAME` runs: one registry, which the command line builds its
flags from and `emu list` prints.

A scenario is a host program on the emulated SoC. It registers here with its name, a
description, its options as data (`emu.options.Option`: the command line turns them into
flags, so listing and parsing import nothing heavy), the paths its report has and the
module that runs it, imported only when it runs; `emu.commands.scenario` makes each one the
command `emu scenario NAME`. That module defines

    run_scenario(options, preset, config_file, overrides, trace, progress)
        -> (results, session); progress(done, total, what) is None or a callback
    summary(results) -> (title, headers, rows, notes)

`options` maps each option's name to its value; `results` is the JSON-ready dictionary the
report carries; `summary` is what the text output shows of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from emu.options import Option
from emu.registry import Registry

__all__ = ["Option", "Scenario", "register", "scenarios"]


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    module: str
    options: tuple[Option, ...]
    # The dotted paths its report has (`emu.commands`; a sweep collects metrics from them):
    # `*` any one name or index, a final `**` anything below.
    reports: tuple[str, ...] = ("stats.**",)


_REGISTRY: Registry[str, Scenario] = Registry("scenario", lambda scenario: scenario.name)


def register(scenario: Scenario) -> Scenario:
    return _REGISTRY.add(scenario)


def scenarios() -> list[Scenario]:
    return sorted(_REGISTRY.values(), key=lambda scenario: scenario.name)


CAMERAS = register(Scenario(
    "cameras",
    "N camera pipelines at a frame rate, one host thread each: downscale on an A55 core, the "
    "camera's network on a BPU core, dequantize by hbDSPRpc on a DSP core; p50/p99/max "
    "latency, deadline misses and the split into CPU, BPU, DSP and waiting",
    "emu.workloads.cameras",
    # Ranges refuse typing mistakes and runs that would not end: a camera-frame takes about
    # 50 ms of wall time.
    (Option("cameras", int, 2, "camera pipelines", (1, 64)),
     Option("frames", int, 8, "frames per camera", (1, 100_000)),
     Option("fps", float, 30.0, "frames per second", (0.01, 10_000)),
     Option("gmacs", float, 20.0, "GMAC per frame of each camera's network", (0.001, 10_000)),
     Option("seed", int, 0, "seed of the synthetic networks", (0, 2**32 - 1)),
     Option("sync", bool, False, "all cameras' frames arrive at the same instants (default: "
                                 "spread evenly across the frame period)")),
    ("results.params.*", "results.period_ms", "results.cameras.*.camera",
     "results.cameras.*.priority", "results.cameras.*.frames", "results.cameras.*.latency_ms.*",
     "results.cameras.*.deadline_misses", "results.cameras.*.stages_ms.*",
     "results.cameras.*.per_frame.*.*", "results.bpu_busy_ms.*", "results.bpu_utilisation.*",
     "results.sim_time_ms", "stats.**"),
))

PERCEPTION = register(Scenario(
    "perception",
    "N cameras running a detector (YOLOv8n unless --camera-model says) on the BPU and a "
    "LiDAR running CenterPoint's pillar preprocessing on the DSP and its backbone on the "
    "BPU, each on its own host thread through hbDNN/hbDSP/hbSys; p50/p99/max latency and "
    "deadline misses per pipeline, the LiDAR's preprocessing/backbone split, per-core BPU, "
    "DSP and A55 utilisation",
    "emu.workloads.perception",
    # Multi-word names are written with underscores: `emu scenario` reads each option back
    # under its own name, which argparse keeps only without hyphens. A LiDAR sweep of
    # 300,000 points takes about 0.3 s of wall time, a camera frame a few ms.
    (Option("cameras", int, 2, "camera pipelines (0: the LiDAR alone)", (0, 16)),
     Option("fps", float, 30.0, "camera frames per second", (0.1, 240)),
     Option("lidar_hz", float, 10.0, "LiDAR sweeps per second", (0.1, 100)),
     Option("seconds", float, 0.3, "simulated time of frame arrivals", (0.001, 10)),
     Option("input_size", int, 640, "side of the detector's square input, a multiple of 32",
            (32, 1280)),
     Option("points", int, 300_000, "points per LiDAR sweep (nuScenes-like, 10 sweeps "
                                    "accumulated)", (1, 300_000)),
     Option("camera_priority", int, 128, "hbDNN and thread priority of the cameras",
            (0, 255)),
     Option("lidar_priority", int, 128, "hbDNN and thread priority of the LiDAR (255 "
                                        "preempts at function-call boundaries)", (0, 255)),
     Option("camera_max_time_per_fc", float, 0.0, "microseconds per BPU function call "
            "when compiling the detector (0: no limit)", (0, 10_000_000)),
     Option("lidar_max_time_per_fc", float, 0.0, "microseconds per BPU function call "
            "when compiling the LiDAR backbone (0: no limit)", (0, 10_000_000)),
     Option("seed", int, 0, "seed of the synthetic LiDAR sweeps", (0, 2**32 - 1)),
     Option("sync", bool, False, "all cameras' frames arrive at the same instants (default: "
                                 "spread evenly across the frame period)"),
     Option("camera_model", str, "yolov8n", "the cameras' detector, a zoo network (default "
                                            "yolov8n)", choices=("yolov8n", "yolov8s",
                                                                 "yolov5s"))),
    ("results.params.*", "results.models.*.name", "results.models.*.function_calls",
     "results.pipelines.*.pipeline", "results.pipelines.*.kind", "results.pipelines.*.priority",
     "results.pipelines.*.period_ms", "results.pipelines.*.frames",
     "results.pipelines.*.latency_ms.*", "results.pipelines.*.deadline_misses",
     "results.pipelines.*.stages_ms.*", "results.pipelines.*.model_time.by_kind_ms.*",
     "results.pipelines.*.model_time.dominant", "results.pipelines.*.per_frame.*.*",
     "results.busy_ms.*.*", "results.utilisation.*.*", "results.sim_time_ms", "stats.**"),
))
