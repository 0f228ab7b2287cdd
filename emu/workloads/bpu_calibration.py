"""The BPU cost model against the J5 compiler's own estimates (`shared/calibration/j5_bpu.md`).

The targets are Horizon's `hb_perf` static estimates for MobileNetV2 (torchvision layout,
10 classes, 3x32x32, one core): the per-layer compute and load/store times of the batch-256
run, its total, its DDR bytes per frame, and the batch-1 total and DDR bytes. The zoo's
`mobilenetv2` built with 10 classes at 32x32 is that network (block k of the zoo is
torchvision's `features_{k+1}`); it goes through the same path as any model (importer,
placement, `emu/nn/layers.py`, `emu/nn/estimate.py`). `tools/fit_j5_bpu.py` fits the
preset's calibrated BPU keys to these targets; the YOLOv8s estimate is not fitted and
checks the prediction on a model 2,300 times larger, with the RGB image input it was
compiled for (with a caveat: MobileNetV2 was compiled at O1 and YOLOv8s at O3, which the
source says can change an estimate tenfold; the model has no optimisation level). The
latency targets are the BPU part of the estimate (`ModelEstimate.bpu_ps`): hb_perf times
the BPU subgraph, not the CPU's input quantize and output dequantize.

At the preset's fit: the MobileNetV2 totals within 10 % (batch-256 latency -1.6 %,
batch-1 latency +0.8 %, DDR bytes per frame -8 % to +10 %), RMS log error per layer 0.52
on compute and 0.82 on load/store (factors 1.7 and 2.3: the model keeps whole tensors on
chip or not, the compiler's choices are finer); YOLOv8s predicted within 8 % (+7.4 %).

Rows of the published table that cover several blocks ("features_5..6", "23-45 us") give
each block the range's midpoint. A load/store time of a few µs means the layer's tensors
stayed on chip; errors are taken on log times with `ON_CHIP_US` added to both sides, so
1 µs against 3 µs is no error worth fitting.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from emu.nn import compiler, importer, placement, zoo
from emu.nn.estimate import ModelEstimate, estimate
from emu.nn.graph import Graph
from emu.soc.clock import PS_PER_MS, PS_PER_US
from emu.soc.config import SocConfig

ON_CHIP_US = 10.0
MIB = 1 << 20

# The parameters the MobileNetV2 estimates determine, and the values the fit may give them
# (powers of two for granules, efficiencies a factor 1.2 apart, even steps for the rest:
# 256 KiB, 1 GB/s, 500 cycles). The other BPU keys are documented (cores, the MAC array),
# not seen by these targets (the pool, resize, move and elementwise efficiencies:
# MobileNetV2 fuses its adds; the weight SRAM: MobileNetV2's 2.2 MB of weights are read in
# both runs, which only bounds it from above; the FC cost, which a one-FC model cannot
# tell from the layers') or the runtime's.
_GEOMETRIC = tuple(round(0.02 * 1.2**k, 4) for k in range(22))
FREE: dict[str, tuple[Any, ...]] = {
    "bpu.align_h": (1, 2, 4, 8, 16, 32),
    "bpu.align_w": (1, 2, 4, 8, 16, 32, 64),
    "bpu.align_cin": (1, 2, 4, 8, 16, 32, 64),
    "bpu.align_cout": (1, 2, 4, 8, 16, 32, 64),
    "bpu.efficiency_dense": _GEOMETRIC,
    "bpu.efficiency_depthwise": _GEOMETRIC,
    "bpu.sram_bytes": tuple(MIB * k // 4 for k in range(1, 65)),
    "bpu.ddr_port_bytes_per_s": tuple(1e9 * k for k in range(2, 33)),
    "bpu.layer_overhead_cycles": tuple(500 * k for k in range(0, 41)),
}
SIDE = 32
CLASSES = 10
BATCHES = (1, 256)

# (zoo layer groups, ops of the batch-256 run, compute us, load/store us): hb_perf's rows.
_EXPAND, _DW, _PROJECT = "{}.expand.conv", "{}.dw.conv", "{}.project.conv"
_ROWS: tuple[tuple[tuple[str, ...], int, float, float], ...] = (
    (("stem.conv",), 113_246_208, 29, 267),
    (("block0.dw.conv",), 37_748_736, 42, 1156),
    (("block0.project.conv",), 67_108_864, 20, 1),
    (("block1.expand.conv",), 201_326_592, 44, 3132),
    (("block1.dw.conv",), 28_311_552, 54, 3132),
    (("block1.project.conv",), 75_497_472, 23, 1),
    (("block2.expand.conv",), 113_246_208, 24, 638),
    (("block2.dw.conv",), 42_467_328, 33, 3592),
    (("block2.project.conv",), 113_246_208, 14, 637),
    (("block3.expand.conv",), 113_246_208, 45, 2433),
    (("block3.dw.conv",), 10_616_832, 63, 2432),
    (("block3.project.conv",), 37_748_736, 21, 1),
    (("block4.expand.conv", "block5.expand.conv"), 50_331_648, 40, 3),
    (("block4.dw.conv", "block5.dw.conv"), 14_155_776, 34, 463),
    (("block4.project.conv", "block5.project.conv"), 50_331_648, 23, 462),
    (("block6.expand.conv",), 50_331_648, 61, 813),
    (("block6.dw.conv",), 3_538_944, 76, 812),
    (("block6.project.conv",), 25_165_824, 47, 3),
    (tuple(f"block{k}.expand.conv" for k in (7, 8, 9, 10)), 50_331_648, 76, 5),
    (tuple(f"block{k}.dw.conv" for k in (7, 8, 9, 10)), 7_077_888, 63, 463),
    (tuple(f"block{k}.project.conv" for k in (7, 8, 9)), 50_331_648, 67, 465),
    (("block10.project.conv",), 75_497_472, 110, 467),
    (("block11.expand.conv", "block12.expand.conv"), 113_246_208, 43, 644),
    (("block11.dw.conv", "block12.dw.conv"), 10_616_832, 50.5, 1274),
    (("block11.project.conv", "block12.project.conv"), 113_246_208, 34, 643),
    (("block13.expand.conv",), 113_246_208, 67, 644),
    (("block13.dw.conv",), 2_654_208, 72, 1274),
    (("block13.project.conv",), 47_185_920, 108, 647),
    (("block14.expand.conv", "block15.expand.conv", "block16.expand.conv"), 78_643_200,
     59.5, 1004),
    (("block14.dw.conv", "block15.dw.conv", "block16.dw.conv"), 4_423_680, 57, 1973),
    (("block14.project.conv", "block15.project.conv"), 78_643_200, 44.5, 1004),
    (("block16.project.conv",), 157_286_400, 99, 1021),
    (("head.conv",), 209_715_200, 878, 2601),
    (("logits",), 6_553_600, 5, 7),
)


@dataclass(frozen=True)
class Target:
    """One published number and what the model gives for it."""

    name: str
    unit: str
    target: float
    model: float
    fitted: bool = True

    @property
    def error(self) -> float:
        """Relative error of the model (model / target - 1)."""
        return self.model / self.target - 1

    @property
    def log_error(self) -> float:
        if self.unit == "us":
            return math.log((self.model + ON_CHIP_US) / (self.target + ON_CHIP_US))
        return math.log(self.model / self.target)


@dataclass(frozen=True)
class LayerRow:
    """One layer group of the batch-256 run: the published times and the model's."""

    name: str
    op_class: str
    ops: int
    target_ops: int
    compute_us: float
    target_compute_us: float
    load_store_us: float
    target_load_store_us: float


@functools.cache
def compiled(model: str, side: int, batch: int, classes: int | None = None) -> Graph:
    """A zoo network compiled (kept: the fit evaluates it many times)."""
    return importer.compile_graph(importer.load(
        zoo.build(model, input_size=(side, side), batch=batch, classes=classes)))


def mobilenetv2(cfg: SocConfig, batch: int) -> ModelEstimate:
    graph = compiled("mobilenetv2", SIDE, batch, CLASSES)
    return estimate(graph, placement.place(graph), cfg, batch, name=f"mobilenetv2 b{batch}")


def yolov8s(cfg: SocConfig) -> ModelEstimate:
    """As the published model was compiled (`hb_mapper_makertbin.log`: `input_type_rt`
    rgb, `norm_type` data_scale 1/255, input source DDR): an RGB image input, whose colour
    conversion and scaling run on the BPU. Its six heads end in a Conv without activation:
    int32 outputs, as the compiler's."""
    graph = compiler.add_preprocess(compiled("yolov8s", 640, 1),
                                    compiler.CompileOptions(input_type="rgb", scale=(1 / 255,)))
    segments = placement.place(graph)
    wide = dict.fromkeys(placement.final_convs(graph, segments), "int32")
    return estimate(graph, segments, cfg, 1, name="yolov8s", dtypes=wide)


def layer_rows(cfg: SocConfig, b256: ModelEstimate | None = None) -> list[LayerRow]:
    """The batch-256 per-layer table, target against model (`b256`: the estimate, if made
    already)."""
    lines = {line.name: line for line in (b256 or mobilenetv2(cfg, 256)).layers}
    graph = compiled("mobilenetv2", SIDE, 256, CLASSES)
    classes = {node.name: "depthwise" if int(node.attrs.get("group", 1)) > 1 else node.op
               for node in graph.nodes}
    rows = []
    for names, ops, compute, load_store in _ROWS:
        for name in names:
            line = lines[name]
            rows.append(LayerRow(name, classes[name], line.ops, ops,
                                 line.compute_ps / PS_PER_US, compute,
                                 line.load_store_ps / PS_PER_US, load_store))
    return rows


def fitted_targets(cfg: SocConfig) -> list[Target]:
    """What the fit sees: the per-layer times (us) and the MobileNetV2 totals."""
    b1, b256 = (mobilenetv2(cfg, b) for b in BATCHES)
    rows = []
    for row in layer_rows(cfg, b256):
        rows.append(Target(f"{row.name} compute", "us", row.target_compute_us, row.compute_us))
        rows.append(Target(f"{row.name} load/store", "us", row.target_load_store_us,
                           row.load_store_us))
    return [
        *rows,
        Target("mobilenetv2 b256 BPU latency", "ms", 44.73, b256.bpu_ps / PS_PER_MS),
        Target("mobilenetv2 b1 BPU latency", "ms", 0.3766, b1.bpu_ps / PS_PER_MS),
        Target("mobilenetv2 b256 DDR loaded per frame", "B", 707_232,
               b256.loaded_bytes_per_frame),
        Target("mobilenetv2 b256 DDR stored per frame", "B", 696_360,
               b256.stored_bytes_per_frame),
        Target("mobilenetv2 b1 DDR per frame", "B", 2_481_312, b1.ddr_bytes_per_frame),
    ]


def predicted_targets(cfg: SocConfig) -> list[Target]:
    """Published numbers the fit does not see: the YOLOv8s estimate (its BPU part: the
    published model has its output dequantize removed)."""
    return [Target("yolov8s 640 BPU latency (O3)", "ms", 3.1554,
                   yolov8s(cfg).bpu_ps / PS_PER_MS, fitted=False)]


def targets(cfg: SocConfig) -> list[Target]:
    """Every fitted number (per-layer times in us, totals) and the predicted ones."""
    return fitted_targets(cfg) + predicted_targets(cfg)


def totals(cfg: SocConfig) -> list[Target]:
    """The whole-model numbers: fitted (MobileNetV2) and predicted (YOLOv8s)."""
    return [t for t in targets(cfg) if t.unit != "us"]


def fit_error(rows: Sequence[Target], *, total_weight: float = 10.0) -> float:
    """What the fit minimises: the mean squared log error of the fitted per-layer numbers,
    plus `total_weight` times that of the fitted totals."""
    layers = [t.log_error**2 for t in rows if t.fitted and t.unit == "us"]
    whole = [t.log_error**2 for t in rows if t.fitted and t.unit != "us"]
    return sum(layers) / len(layers) + total_weight * sum(whole) / len(whole)


def rms_log_error(rows: Sequence[Target]) -> float:
    return math.sqrt(sum(t.log_error**2 for t in rows) / len(rows)) if rows else 0.0


def report(cfg: SocConfig) -> list[dict[str, object]]:
    """Rows for `emu calibrate`: every total (target, model, error, fitted or predicted)
    and a summary of the per-layer agreement."""
    rows: list[dict[str, object]] = [
        {"name": t.name, "unit": t.unit, "target": t.target, "model": round(t.model, 4),
         "error": round(t.error, 4), "use": "fitted" if t.fitted else "predicted"}
        for t in totals(cfg)]
    per_layer = [t for t in fitted_targets(cfg) if t.unit == "us"]
    for kind in ("compute", "load/store"):
        part = [t for t in per_layer if t.name.endswith(kind)]
        rows.append({"name": f"mobilenetv2 b256 per-layer {kind} (RMS log error)",
                     "unit": "log", "target": 0.0, "model": round(rms_log_error(part), 4),
                     "error": round(math.expm1(rms_log_error(part)), 4), "use": "fitted"})
    return rows
