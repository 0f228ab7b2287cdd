"""Feature detectors: Canny edges and the Harris corner response.

canny (0x840, `hbDSPCanny`) = cv2.Canny(src, threshold1, threshold2, apertureSize,
L2gradient) on a uint8 grey image, bit-exact. OpenCV's arithmetic there is all integer:
  - dx, dy: the int16 Sobel derivatives (apertureSize 3 or 5) with a replicated border;
  - magnitude |dx| + |dy| (L1) or dx*dx + dy*dy (L2gradient; the thresholds are then
    clamped to 32767 and squared when positive); thresholds swapped if threshold1 >
    threshold2, then floored; magnitudes outside the image count as 0;
  - non-maximum suppression: with x = |dx|, y = |dy| << 15 and TG22 = 13573 (tan 22.5
    degrees in 15-bit fixed point), y < x*TG22 compares with the left (m > it) and right
    (m >= it) neighbours, y > x*TG22 + (x << 16) with the upper (>) and lower (>=) ones,
    else the diagonal pair (both >): up-right and down-left where dx and dy differ in
    sign, up-left and down-right where not;
  - a pixel passing suppression with m > low is weak, with m > high also strong; the edges
    are the weak pixels 8-connected to strong ones.
The result of that hysteresis does not depend on how the flood fill runs, so the DSP runs it
as tiled passes over an edge-class map kept in the output image (0 none, 128 weak, 255
strong):
  1. classify: each tile (a band of rows with a source halo of 2 + apertureSize // 2,
     replicated by the iDMA) computes the Sobel derivatives (int16, separable), magnitudes
     (int32) and suppression (int32 lanes) for the tile and a ring of one pixel around it,
     then converges the hysteresis inside the tile (below) and stores the tile's classes;
  2. hysteresis: each kernel reports which sides of its tile's outer ring (first or last
     row, first or last column) it changed; only such a change can matter to another tile.
     While the previous pass changed some, a pass loads each tile whose pixels or one-pixel
     halo meet a side another tile changed, with that halo (the neighbours' latest classes;
     zero outside the image), and converges it again. When a pass changes no side, every
     tile is closed under its neighbours' final classes: the fixpoint. The number of passes
     grows with how often chains cross tile borders (the next tile's load is issued before
     the current tile's store, so a chain crosses one border per pass), the cost of each
     with the tiles they touch;
  3. finish: strong pixels become 255, the rest 0.
Inside a tile the hysteresis is a vector dilation restricted to weak pixels, new = max(v,
min(3x3 maximum, 2v saturated)), applied in place row by row, downwards and then upwards,
each row repeated until it stops changing, until a down-and-up sweep changes nothing.

corner_harris (0x841, `hbDSPCornerHarris`) = cv2.cornerHarris(src, blockSize, ksize, k,
borderType) on a uint8 grey image, float32 output. OpenCV scales the Sobel derivatives by
1 / (2**(ksize - 1) * blockSize * 255) in float, sums the products dx*dx, dx*dy, dy*dy
over the blockSize x blockSize block (in double, then rounded to float) and gives
a*c - b*b - k*(a + c)^2. The DSP has no double: it takes the exact integer Sobel
derivatives, converts and scales them in float32, multiplies, sums the block in float32
(columns, then rows) and forms the response in float32. So the result is not bit-exact:
the tests bound it by 2e-6 of the image's largest |response| in absolute error (measured
below 1e-6) — the response cancels (a*c against b*b), so the error is relative to the
magnitude of the terms, not to the result. Borders follow OpenCV: the source is extended by
borderType for the Sobel, and the products are extended by borderType for the block sum
(the kernel copies the products of the mirrored rows and columns, or zeros for a constant
border, into the grid positions outside the image). The block's anchor is blockSize // 2,
except that for an even blockSize with a constant or replicated border OpenCV's IPP path
puts it at (blockSize - 1) // 2, which we follow. Tiles are bands of whole rows (multiples
of blockSize rows, so a band at the image's edge holds the rows its border mirrors) with a
source halo of the block and Sobel radii.

Cost on the 640x480 standard image with the default parameters (`emu dsp cv <name>
--json`): canny 1.74 cycles/pixel (48 classify tiles, three hysteresis passes of 5, 2 and 3
tiles, the finish pass), corner_harris 0.90 cycles/pixel.

Not supported: colour input (OpenCV's Canny takes the strongest channel), apertureSize /
ksize 1 and 7 and Scharr (-1), Canny on precomputed derivatives, the wrap border.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from emu.errors import DspError
from emu.soc.sched import CoreSlot, StageBody
from emu.vdsp import timing
from emu.vdsp.ops import cv
from emu.vdsp.ops import cv_features_kernels as fk
from emu.vdsp.ops.cv_kernel_records import Inside, TileIn
from emu.vdsp.ops.image_args import TYPE_F32, TYPE_U8, Image
from emu.vdsp.tiling import Region, TiledPlan

if TYPE_CHECKING:
    from emu.vdsp.cores import VdspCore

CMD_CANNY = 0x840
CMD_CORNER_HARRIS = 0x841

APERTURES = (("3", 3), ("5", 5))
SWITCH = (("off", 0), ("on", 1))
_INT32 = (-(2 ** 31), 2 ** 31 - 1)


def _grey_u8(op: str, etype: int) -> Callable[[Sequence[Image], cv.Values], cv.OutputSpec]:
    def output(inputs: Sequence[Image], values: cv.Values) -> cv.OutputSpec:
        src = inputs[0]
        if src.etype != TYPE_U8 or src.channels != 1 or src.planes != 1:
            raise ValueError(f"{op}: takes a uint8 grey image, got {src.describe()}")
        return src.width, src.height, 1, etype, 1

    return output


def _meets(a: cv.Rect, b: cv.Rect) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _grow(rect: cv.Rect, before: int, after: int) -> cv.Rect:
    return cv.Rect(rect.x0 - before, rect.y0 - before, rect.x1 + after, rect.y1 + after)


# --- Canny ------------------------------------------------------------------------------------


def _canny_layout(out: cv.Rect, ksize: int) -> dict[str, int]:
    """Offsets in a Canny tile's output buffer: the class map (`work`, rows `p8` apart, a
    zero margin before it), dx, dy, the magnitudes and two Sobel scratch rows; `total`."""
    w, h = out.width, out.height
    gw, gh = w + 4, h + 4
    lay = {"p8": cv.round_up(w + 2 + 64, 64), "p16": cv.round_up(2 * gw + 64, 64),
           "p32": cv.round_up(4 * gw + 64, 64), "pt": 2 * (cv.round_up(gw + ksize - 1, 64) + 64)}
    lay["work"] = 64
    lay["dx"] = lay["work"] + (h + 2) * lay["p8"]
    lay["dy"] = lay["dx"] + gh * lay["p16"]
    lay["mag"] = lay["dy"] + gh * lay["p16"]
    lay["s"] = lay["mag"] + gh * lay["p32"]
    lay["d"] = lay["s"] + lay["pt"]
    lay["total"] = lay["d"] + lay["pt"]
    return lay


def _beyond_rows(out: cv.Rect, total: int) -> int:
    """The scratch a Canny tile needs beyond the output rows `cv.image_plan` reserves
    (uint8 rows), when it uses `total` bytes of its output buffer."""
    return max(0, total - out.height * cv.round_up(out.width + 64, 64))


def _class_stores(dst: Any, tile: cv.ImageTile) -> list[Region]:
    """The tile's classes, stored from the class map's rows 1..h, columns 1..w."""
    im = dst.image
    r = tile.out
    p8 = cv.round_up(r.width + 2 + 64, 64)
    return [Region(dst.buffer, dst.offset + r.y0 * im.stride + r.x0, im.stride, 64 + p8 + 1,
                   p8, r.height, r.width)]


def _canny(core: VdspCore, slot: CoreSlot, run: cv.CvRun) -> Generator[
        simpy.Event, Any, StageBody | None]:
    v = run.values
    ksize, l2 = v["apertureSize"], bool(v["L2gradient"])
    lo, hi = sorted((v["threshold1"], v["threshold2"]))
    if l2:
        lo, hi = ((min(32767.0, t) ** 2 if t > 0 else t) for t in (lo, hi))
    low, high = (int(min(max(math.floor(t), _INT32[0]), _INT32[1])) for t in (lo, hi))
    im = run.inputs[0].image
    on_map = replace(run, inputs=(run.output,))
    flag = np.zeros(1, np.int64)
    changed: list[list[tuple[cv.Rect, cv.Rect]]] = []
    """Per pass: (tile, ring side) of each ring side a tile changed."""
    kinds: list[str] = []

    def record(tile: cv.ImageTile, cycles: timing.KernelCycles) -> timing.KernelCycles:
        o = tile.out
        sides = (cv.Rect(o.x0, o.y0, o.x1, o.y0 + 1), cv.Rect(o.x0, o.y1 - 1, o.x1, o.y1),
                 cv.Rect(o.x0, o.y0, o.x0 + 1, o.y1), cv.Rect(o.x1 - 1, o.y0, o.x1, o.y1))
        changed[-1] += [(o, side) for bit, side in enumerate(sides) if flag[0] >> bit & 1]
        return cycles

    def classify(in_addr: int, out_addr: int, tile: cv.ImageTile) -> timing.KernelCycles:
        o = tile.out
        lay = _canny_layout(o, ksize)
        return record(tile, core.compute(
            fk.canny_classify_tile, TileIn(in_addr, tile.in_pitch, o.height, o.width),
            fk.CannyParams(ksize, l2, low, high),
            fk.CannyLayout(out_addr + lay["work"], lay["p8"], out_addr + lay["dx"],
                           out_addr + lay["dy"], lay["p16"], out_addr + lay["mag"], lay["p32"],
                           out_addr + lay["s"], out_addr + lay["d"]),
            Inside(max(0, 2 - o.y0), min(o.height + 4, im.height - o.y0 + 2),
                      max(0, 2 - o.x0), min(o.width + 4, im.width - o.x0 + 2)), flag))

    def hysteresis(in_addr: int, out_addr: int, tile: cv.ImageTile) -> timing.KernelCycles:
        o = tile.out
        p8 = cv.round_up(o.width + 2 + 64, 64)
        return record(tile, core.compute(fk.canny_hysteresis_tile, in_addr,
                                         tile.in_pitch, o.height, o.width, out_addr + 64, p8,
                                         flag))

    def finish(in_addr: int, out_addr: int, tile: cv.ImageTile) -> timing.KernelCycles:
        return core.compute(fk.canny_finish_tile, in_addr, out_addr,
                            tile.out.height, tile.out.width, tile.in_pitch, tile.out_pitch)

    def stale(tile: cv.ImageTile) -> bool:
        """Whether a ring side another tile changed in the last pass lies in this tile or
        its halo (the tile that changed it is closed already)."""
        reach = _grow(tile.out, 1, 1)
        return any(owner != tile.out and _meets(reach, side) for owner, side in changed[-1])

    def build(k: int) -> TiledPlan[Any] | None:
        if k == 0:
            kinds.append("classify")
            changed.append([])
            halo = 2 + ksize // 2
            return cv.image_plan(
                core, run, classify, source=lambda r: _grow(r, halo, halo),
                border=cv.BORDER_REPLICATE,
                scratch_bytes=lambda src, out: _beyond_rows(out, _canny_layout(out, ksize)[
                    "total"]),
                stores=lambda t: _class_stores(run.output, t))
        if kinds[-1] == "finish":
            return None
        if changed[-1]:
            plan = cv.image_plan(
                core, on_map, hysteresis, source=lambda r: _grow(r, 1, 1),
                border=cv.BORDER_CONSTANT, border_value=0.0,
                scratch_bytes=lambda src, out: _beyond_rows(out, 64 + (out.height + 2) * (
                    cv.round_up(out.width + 2 + 64, 64))),
                stores=lambda t: _class_stores(run.output, t))
            work = [t for t in plan.work if stale(t.work)]
            if work:
                kinds.append("hysteresis")
                changed.append([])
                return replace(plan, work=work)
        kinds.append("finish")
        return cv.image_plan(core, on_map, finish)

    return (yield from cv.run_passes(core, slot, run.what, build))


CANNY = cv.define(cv.CvOp(
    CMD_CANNY, "canny", "Canny", "Canny edges of a uint8 grey image (255 on edges)",
    (cv.Param("threshold1", "real", 50.0, "one hysteresis threshold (the two are sorted)",
              -1e9, 1e9),
     cv.Param("threshold2", "real", 150.0, "the other hysteresis threshold", -1e9, 1e9),
     cv.Param("apertureSize", "choice", 3, "Sobel aperture", choices=APERTURES),
     cv.Param("L2gradient", "choice", 0, "magnitude sqrt(dx^2 + dy^2) instead of |dx| + |dy|",
              choices=SWITCH)),
    ("src",), _grey_u8("canny", TYPE_U8), _canny))


# --- Harris -----------------------------------------------------------------------------------


def _harris_anchor(block: int, border: int) -> int:
    if block % 2 == 0 and border in (cv.BORDER_CONSTANT, cv.BORDER_REPLICATE):
        return (block - 1) // 2
    return block // 2


def _harris_layout(out: cv.Rect, ksize: int, block: int) -> dict[str, int]:
    """Offsets in a Harris tile's output buffer: the output rows come first (`rows`
    bytes), then the three product planes (rows `pp` apart), the block's column sums,
    the dx and dy rows and two Sobel scratch rows; `total`."""
    w, h = out.width, out.height
    gw, gh = w + block - 1, h + block - 1
    lay = {"pp": cv.round_up(4 * gw + 64, 64), "p16": cv.round_up(2 * gw + 64, 64),
           "pt": 2 * (cv.round_up(gw + ksize - 1, 64) + 64),
           "rows": h * cv.round_up(4 * w + 64, 64)}
    lay["prod"] = lay["rows"]
    lay["vrow"] = lay["prod"] + 3 * gh * lay["pp"]
    lay["dx"] = lay["vrow"] + 3 * lay["pp"]
    lay["dy"] = lay["dx"] + lay["p16"]
    lay["s"] = lay["dy"] + lay["p16"]
    lay["d"] = lay["s"] + lay["pt"]
    lay["total"] = lay["d"] + lay["pt"]
    return lay


def _border_map(first: int, count: int, size: int, border: int, what: str) -> np.ndarray:
    """For grid positions first..first+count-1 of a line of `size` pixels: the grid index
    whose products each takes (itself inside the image, -1 for a constant border)."""
    out = np.empty(count, np.int64)
    for i in range(count):
        p = first + i
        if 0 <= p < size:
            out[i] = i
            continue
        s = cv.border_source(p, size, border)
        j = -1 if s < 0 else s - first
        if s >= 0 and not 0 <= j < count:
            raise DspError(f"{what}: internal tiling error (border row {p} maps outside "
                           "the tile)")
        out[i] = j
    return out


def _corner_harris(core: VdspCore, slot: CoreSlot, run: cv.CvRun) -> Generator[
        simpy.Event, Any, StageBody | None]:
    v = run.values
    ksize, block, border = v["ksize"], v["blockSize"], v["borderType"]
    anchor = _harris_anchor(block, border)
    after = block - 1 - anchor
    r = ksize // 2
    scale = 1.0 / ((1 << (ksize - 1)) * block * 255.0)
    im = run.inputs[0].image

    def kernel(in_addr: int, out_addr: int, tile: cv.ImageTile) -> timing.KernelCycles:
        o = tile.out
        lay = _harris_layout(o, ksize, block)
        gh, gw = o.height + block - 1, o.width + block - 1
        rmap = _border_map(o.y0 - anchor, gh, im.height, border, run.what)
        cmap = _border_map(o.x0 - anchor, gw, im.width, border, run.what)
        return core.compute(
            fk.harris_tile, TileIn(in_addr, tile.in_pitch, o.height, o.width),
            fk.HarrisParams(ksize, block, scale, v["k"]),
            fk.HarrisLayout(out_addr + lay["prod"], lay["pp"], out_addr + lay["vrow"],
                            out_addr + lay["dx"], out_addr + lay["dy"], out_addr + lay["s"],
                            out_addr + lay["d"]),
            out_addr, tile.out_pitch, rmap, cmap)

    def plan() -> TiledPlan[cv.ImageTile]:
        return cv.image_plan(
            core, run, kernel,
            source=lambda rect: cv.Rect(rect.x0 - anchor - r, rect.y0 - anchor - r,
                                        rect.x1 + after + r, rect.y1 + after + r),
            border=border, border_value=0.0, row_step=block,
            scratch_bytes=lambda src, out: _harris_layout(out, ksize, block)["total"]
            - _harris_layout(out, ksize, block)["rows"])

    return (yield from cv.run_plans(core, slot, run.what, [plan]))


CORNER_HARRIS = cv.define(cv.CvOp(
    CMD_CORNER_HARRIS, "corner_harris", "CornerHarris",
    "Harris corner response of a uint8 grey image (float32)",
    (cv.Param("blockSize", "int", 2, "side of the block the products are summed over", 1, 15),
     cv.Param("ksize", "choice", 3, "Sobel aperture", choices=APERTURES),
     cv.Param("k", "real", 0.04, "Harris free parameter", -1e6, 1e6),
     cv.Param("borderType", "choice", cv.BORDER_REFLECT_101, "pixel extrapolation",
              choices=cv.BORDERS)),
    ("src",), _grey_u8("corner_harris", TYPE_F32), _corner_harris))
