"""The bilateral filter: `bilateral_filter` (cv2.bilateralFilter on uint8 images of 1 or 3
channels).

What it computes, as OpenCV's own 8-bit implementation does (float32 throughout):
  - radius = d // 2 for d > 0, else round(1.5 * sigmaSpace) (half to even); at least 1.
    The taps are the offsets (dy, dx) with dy**2 + dx**2 <= radius**2, row by row.
  - space weight of a tap: float32(exp(r * r * cs)) in double, r = sqrt(dy**2 + dx**2),
    cs = float32(-0.5 / sigmaSpace**2); colour weight of a difference i:
    exp(float32(i * i) * cc), cc = float32(-0.5 / sigmaColor**2), evaluated with OpenCV's
    vectorised float32 exponential for all but the last 4 entries and the C library's exp
    for those (as OpenCV's set-up loop splits the table); the table has 256 entries per
    channel, as a 3-channel difference is |db| + |dg| + |dr|.
  - per pixel, over the taps: w = space weight * colour weight(|neighbour - centre|),
    wsum += w, sum = fma(neighbour, w, sum) (fused, as OpenCV's AVX2/AVX-512 code); the
    output is round_half_even(sum / wsum), saturated to 0..255. With 3 channels there is
    one sum per channel and the output is round_half_even(sum * (1 / wsum)), as OpenCV's
    3-channel loop computes it.
  - the order of the taps: OpenCV's vector loop takes 64-pixel blocks from the left of each
    row while a whole block fits (the AVX-512 dispatch of an x86 host; AVX2 hosts use
    32-pixel blocks) and, for 13 taps (radius 2), adds the rows in the order 0, 4, 1, 3, 2;
    the pixels right of the last whole block add the taps in row order. The kernel does
    the same, so the float32 sums round alike. 3-channel images take the taps in row order
    everywhere.
  - a sigma of 1e-6 or less copies the image, as OpenCV does.
Border pixels come from `borderType` (OpenCV's default reflect101; constant borders are 0).

Exactness: bit-identical to OpenCV's own implementation (cv2 with IPP disabled, or any
radius >= 3 or border reflect), checked on the standard image and noise. With IPP enabled
(cv2's default), OpenCV hands radius 1 and 2 with constant, replicate and reflect101 borders
to Intel IPP, whose closed implementation rounds differently: our output is within 1 of it
everywhere but differs by 1 on about half the pixels; the tests check that bound.

How: the colour-weight table (256 float32 per channel) is computed on the core by
`color_weights` into a TCM buffer; the last 4 entries and the space weights are written by
the set-up code (charged with `timing.table_fill_cycles`). Tiles are bands (or strips) of
output rows with a `radius` halo (`cv.image_plan`). `bilateral_tile` works on 64 pixels at
a time: per tap, one unaligned load, an absolute difference, four 16-lane float32 gathers
of the colour weight, and the weighted sums (`bilateral3_tile` does the same on three loads
split into channels with `sel_u8`, and puts the channels back together the same way). The
sums use the ISA's fused multiply-add (`fma_f32`, one rounding), as OpenCV's vector code
does, so the arithmetic is OpenCV's operation for operation.

Not supported: float32 images, 2- or 4-channel images, radius above 16.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from emu.soc.sched import CoreSlot, StageBody
from emu.vdsp import timing
from emu.vdsp.ops import cv, cv_bilateral_kernels
from emu.vdsp.ops.cv_kernel_records import TileRows
from emu.vdsp.ops.image_args import TYPE_U8, Image
from emu.vdsp.tiling import resumable, stream

if TYPE_CHECKING:
    from emu.vdsp.cores import VdspCore

CMD_BILATERAL_FILTER = 0x842

MAX_RADIUS = 16
SIGMA_EPS = 1e-6
"""A sigma at or below this makes OpenCV (and us) copy the image."""
BLOCK = 64
"""Pixels per block of OpenCV's vector loop on an AVX-512 host."""
TABLE_ENTRIES = 256
"""Colour-weight entries per channel."""
EXACT_TAIL = 4
"""The last table entries OpenCV computes with the C library's exp instead of its vector
exponential."""


def radius_of(values: cv.Values) -> int:
    d = values["d"]
    radius = d // 2 if d > 0 else round(values["sigmaSpace"] * 1.5)
    return max(radius, 1)


def taps(radius: int, sigma_space: float) -> tuple[list[tuple[int, int]], np.ndarray]:
    """The taps (dy, dx) in OpenCV's order and their float32 space weights."""
    coeff = float(np.float32(-0.5 / (sigma_space * sigma_space)))
    offsets: list[tuple[int, int]] = []
    weights: list[float] = []
    for dy in range(-radius, radius + 1):
        for dx in range(-radius, radius + 1):
            r = math.sqrt(float(dy * dy + dx * dx))
            if r > radius:
                continue
            offsets.append((dy, dx))
            weights.append(math.exp(r * r * coeff))
    return offsets, np.array(weights, np.float32)


def simd_order(count: int) -> np.ndarray:
    """The tap order of OpenCV's vector loop: rows 0, 4, 1, 3, 2 for the 13 taps of radius 2,
    else the taps in order."""
    if count == 13:
        return np.array([0, 12, 1, 2, 3, 9, 10, 11, 4, 5, 6, 7, 8], np.int32)
    return np.arange(count, dtype=np.int32)


def _output(inputs: Sequence[Image], values: cv.Values) -> cv.OutputSpec:
    src = inputs[0]
    if src.etype != TYPE_U8 or src.channels not in (1, 3) or src.planes != 1:
        raise ValueError(f"bilateral_filter: takes uint8 images of 1 or 3 channels, got "
                         f"{src.describe()}")
    radius = radius_of(values)
    if radius > MAX_RADIUS:
        how = (f"d = {values['d']}" if values["d"] > 0 else
               f"d <= 0 and sigmaSpace = {values['sigmaSpace']:g}")
        raise ValueError(f"bilateral_filter: radius must be at most {MAX_RADIUS}, got "
                         f"{radius} ({how})")
    return src.width, src.height, src.channels, TYPE_U8, 1


def _bilateral(core: VdspCore, slot: CoreSlot, run: cv.CvRun) -> Generator[
        simpy.Event, Any, StageBody | None]:
    v = run.values
    border = v["borderType"]
    width = run.inputs[0].image.width
    channels = run.inputs[0].image.channels
    if v["sigmaColor"] <= SIGMA_EPS or v["sigmaSpace"] <= SIGMA_EPS:
        def copy(src: int, dst: int, tile: cv.ImageTile) -> timing.KernelCycles:
            return core.compute(cv_bilateral_kernels.copy_tile, src, dst, tile.out.height,
                                tile.out.width * channels, tile.in_pitch, tile.out_pitch)

        return (yield from cv.run_plans(core, slot, run.what, [
            lambda: cv.image_plan(core, run, copy, border=border)]))

    radius = radius_of(v)
    offsets, space = taps(radius, v["sigmaSpace"])
    order = simd_order(len(offsets))
    color_coeff = np.float32(-0.5 / (v["sigmaColor"] * v["sigmaColor"]))
    entries = TABLE_ENTRIES * channels
    index = np.arange(entries - EXACT_TAIL, entries)
    tail = np.array([math.exp(float(x)) for x in
                     (index * index).astype(np.float32) * color_coeff], np.float32)
    nsimd = width // BLOCK * BLOCK
    tap_dx = np.array([dx for _, dx in offsets], np.int32)

    def source(out: cv.Rect) -> cv.Rect:
        return cv.Rect(out.x0 - radius, out.y0 - radius, out.x1 + radius, out.y1 + radius)

    def tiles(slot: CoreSlot, first: int) -> Generator[simpy.Event, Any, int | None]:
        # Every (re)start rebuilds the weight table in TCM before the tiles stream.
        table = core.tcm.alloc(0, 4 * entries, f"{run.what} colour weights")
        try:
            built = core.compute(cv_bilateral_kernels.color_weights, table.offset, entries,
                                 float(color_coeff))
            at = table.offset + 4 * (entries - EXACT_TAIL)
            core.tcm.data[at: at + 4 * EXACT_TAIL] = tail.view(np.uint8)
            yield from core.setup(slot, timing.table_fill_cycles(EXACT_TAIL + len(offsets), 1,
                                                                 core.cfg),
                                  f"{run.what} colour weights", kernel_cycles=built.total)

            def kernel(src: int, dst: int, tile: cv.ImageTile) -> timing.KernelCycles:
                tap_offsets = np.array([dy * tile.in_pitch + dx * channels
                                        for dy, dx in offsets], np.int32)
                rows = TileRows(src, dst, tile.out.height, tile.out.width, tile.in_pitch,
                                tile.out_pitch)
                if channels == 3:
                    return core.compute(cv_bilateral_kernels.bilateral3_tile, rows, radius,
                                        tap_offsets, tap_dx, space, table.offset)
                simd_end = min(max(nsimd - tile.out.x0, 0), tile.out.width)
                return core.compute(cv_bilateral_kernels.bilateral_tile, rows, radius,
                                    tap_offsets, space, order, simd_end, table.offset)

            plan = cv.image_plan(core, run, kernel, source=source, border=border)
            return (yield from stream(core, slot, plan, run.what, first=first))
        finally:
            core.tcm.free(table)

    return (yield from resumable(tiles)(slot))


BILATERAL_FILTER = cv.define(cv.CvOp(
    CMD_BILATERAL_FILTER, "bilateral_filter", "BilateralFilter",
    "edge-preserving bilateral filter of a uint8 grey or 3-channel image",
    (cv.Param("d", "int", 9, "diameter of the neighbourhood (<= 0: from sigmaSpace)",
              low=-1, high=2 * MAX_RADIUS + 1),
     cv.Param("sigmaColor", "real", 75.0, "sigma of the colour (intensity) weights",
              low=0.0),
     cv.Param("sigmaSpace", "real", 75.0, "sigma of the space weights", low=0.0),
     cv.Param("borderType", "choice", cv.BORDER_REFLECT_101, "border mode",
              choices=cv.BORDERS)),
    ("src",), _output, _bilateral))
