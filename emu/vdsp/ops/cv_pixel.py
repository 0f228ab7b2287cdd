"""Per-pixel CV operators: threshold.

Each output pixel depends on the same pixel of the input only, so tiles are bands of whole
rows without a halo (`cv.image_plan` with its defaults).
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

import simpy

from emu.soc.sched import CoreSlot, StageBody
from emu.vdsp import timing
from emu.vdsp.ops import cv, cv_pixel_kernels
from emu.vdsp.ops.cv_kernel_records import TileRows
from emu.vdsp.ops.image_args import TYPE_U8, Image

if TYPE_CHECKING:
    from emu.vdsp.cores import VdspCore

CMD_THRESHOLD = 0x800

THRESHOLD_TYPES = (("binary", 0), ("binary_inv", 1), ("trunc", 2), ("tozero", 3),
                   ("tozero_inv", 4))


def _same_u8(op: str, channels: tuple[int, ...]) -> Any:
    def output(inputs: Sequence[Image], values: cv.Values) -> cv.OutputSpec:
        src = inputs[0]
        if src.etype != TYPE_U8 or src.channels not in channels or src.planes != 1:
            raise ValueError(f"{op}: takes uint8 images of {' or '.join(map(str, channels))} "
                             f"channel(s), got {src.describe()}")
        return src.width, src.height, src.channels, TYPE_U8, 1

    return output


def _threshold(core: VdspCore, slot: CoreSlot, run: cv.CvRun) -> Generator[
        simpy.Event, Any, StageBody | None]:
    # OpenCV's 8-bit rules: the threshold is floored and the maximum rounded and saturated;
    # a threshold below 0 or above 254 behaves as -1 or 255 (all or nothing passes).
    v = run.values
    thresh = min(max(math.floor(v["thresh"]), -1), 255)
    maxval = min(max(round(v["maxval"]), 0), 255)
    row_bytes = run.inputs[0].image.row_bytes

    def kernel(src: int, dst: int, tile: cv.ImageTile) -> timing.KernelCycles:
        return core.compute(cv_pixel_kernels.threshold_tile,
                            TileRows(src, dst, tile.out.height, row_bytes, tile.in_pitch,
                                     tile.out_pitch), thresh, maxval, v["type"])

    return (yield from cv.run_plans(core, slot, run.what,
                                    [lambda: cv.image_plan(core, run, kernel)]))


THRESHOLD = cv.define(cv.CvOp(
    CMD_THRESHOLD, "threshold", "Threshold", "fixed-level threshold of a uint8 image",
    (cv.Param("thresh", "real", 127.0, "threshold (floored, as OpenCV does for uint8)"),
     cv.Param("maxval", "real", 255.0, "value of passing pixels for binary types"),
     cv.Param("type", "choice", 0, "threshold type", choices=THRESHOLD_TYPES)),
    ("src",), _same_u8("threshold", (1, 3)), _threshold))
