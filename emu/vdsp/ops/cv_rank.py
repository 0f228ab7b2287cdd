"""Rank-filter CV operators: median blur, dilate, erode (uint8, 1 or 3 channels).

median_blur (cv2.medianBlur): each output pixel is the median of the ksize x ksize window
around it, channel by channel, ksize 3, 5 or 7. As OpenCV does, the border is always
replicated. The kernel sorts the ksize source rows of each vector down the columns with a
sorting network of min_u8/max_u8 (once per vector: the ksize output vectors that read a
column share its sort), forms the window's ksize x ksize wires with byte selects (sel_u8:
row i of the sorted columns shifted by j pixels), and runs a selection network on them: it
sorts the rows of the column-sorted window (which keeps the columns sorted), drops the
positions that have more than half of the window provably at or below them (or at or above
them), and selects the median's rank among the rest with Batcher's odd-even merge sort,
pruned back from the one output it needs (only the min or the max of a compare-exchange
that is read later is computed). Medians are exact (ranks of integers, no arithmetic).

dilate / erode (cv2.dilate, cv2.erode with a ksizeY x ksizeX rectangle of ones, anchor at
its centre (ksize // 2), `iterations` >= 1): the maximum / minimum over the window. As
OpenCV does for a rectangular element, n iterations are one pass of the element
((ksizeX - 1) n + 1) x ((ksizeY - 1) n + 1) with its anchor n times the original's (which
differs from repeating the operation when the border is not constant). The rectangle is
separable: a pass down the columns (max_u8/min_u8 of the rows of the window) writes one
row per output row, the source's full width, into TCM scratch after the tile's output, and
a pass along those rows (unaligned loads one pixel apart) gives the output. A long pass
may instead double the window in place, log2(taps) steps of two loads, one min/max and one
store per vector (`extreme_doubling_tile`), when that issues fewer memory ops
(`doubling_pays`). Borders: constant (borderValue), replicate, reflect, reflect101; wrap is
refused. borderValue applies to every channel (cv2's borderValue=(v, v, v, v)); it is
rounded half to even and saturated as OpenCV's saturate_cast<uchar> does (a value whose
rounding leaves the int32 range gives 0); the default, DBL_MAX = OpenCV's
morphologyDefaultBorderValue(), means a border that never wins (255 for erode, 0 for dilate).
Exact (min/max only).

Tiling: `cv.image_plan` bands (or strips) of output rows with the source rectangle grown by
the window's reach on each side; the border pixels arrive with the source (iDMA for
replicate/reflect, the fill kernel for constant). Not supported: other element types,
non-rectangular structuring elements, a chosen anchor, median sizes above 7.
"""

from __future__ import annotations

import sys
from collections.abc import Generator, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import simpy

from emu.soc.sched import CoreSlot, StageBody
from emu.vdsp import timing
from emu.vdsp.ops import cv, cv_rank_kernels
from emu.vdsp.ops.cv_kernel_records import TileRows
from emu.vdsp.ops.image_args import TYPE_U8, Image
from emu.vdsp.tcm import VECTOR_ALIGN_BYTES

if TYPE_CHECKING:
    from emu.vdsp.cores import VdspCore

CMD_MEDIAN_BLUR = 0x815
CMD_DILATE = 0x816
CMD_ERODE = 0x817

MEDIAN_SIZES = (3, 5, 7)
DEFAULT_BORDER_VALUE = sys.float_info.max
"""OpenCV's morphologyDefaultBorderValue(): a constant border that never wins."""
MAX_WINDOW = 255
"""The largest effective structuring element side ((ksize - 1) x iterations + 1)."""

# --- sorting and selection networks ----------------------------------------------------------

Network = list[tuple[int, int]]


def batcher(n: int) -> Network:
    """Batcher's odd-even merge sort of `n` wires as compare-exchanges (a, b), a < b: min
    to a, max to b (a network for the next power of two with the wires >= n left out)."""
    out: Network = []
    p = 1
    while p < n:
        k = p
        while k >= 1:
            for j in range(k % p, n - k, 2 * k):
                for i in range(min(k, n - j - k)):
                    if (i + j) // (2 * p) == (i + j + k) // (2 * p):
                        out.append((i + j, i + j + k))
            k //= 2
        p *= 2
    return out


def prune(network: Network, output: int) -> tuple[npt.NDArray[np.int32], list[int]]:
    """The steps of `network` that wire `output` depends on, as rows (a, b, low, high):
    `low`/`high` say whether the min / the max of the exchange is read later. Also the input
    wires the result reads."""
    need = {output}
    kept: list[tuple[int, int, int, int]] = []
    for a, b in reversed(network):
        low, high = a in need, b in need
        if low or high:
            kept.append((a, b, int(low), int(high)))
            need |= {a, b}
    rows = np.array(kept[::-1], np.int32).reshape(-1, 4)
    return rows, sorted(need)


@cache
def median_network(k: int) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32],
                                    npt.NDArray[np.int64], int]:
    """For a k x k window: the column sort (k wires), the median's selection program on
    wires i * k + j (row i of the sorted columns, column j), the wires it reads, and the
    wire that ends with the median (see the module docstring)."""
    n = k * k
    m = n // 2  # the median's rank, from 0
    net: Network = []
    for i in range(k):
        net += [(i * k + a, i * k + b) for a, b in batcher(k)]
    # With rows and columns sorted, (i, j) has (i + 1)(j + 1) wires at or below it and
    # (k - i)(k - j) at or above it: ranks beyond m on one side rule it out.
    low = [(i, j) for i in range(k) for j in range(k) if (k - i) * (k - j) > n - m]
    high = [(i, j) for i in range(k) for j in range(k) if (i + 1) * (j + 1) > m + 1]
    rest = [i * k + j for i in range(k) for j in range(k)
            if (i, j) not in low and (i, j) not in high]
    net += [(rest[a], rest[b]) for a, b in batcher(len(rest))]
    output = rest[m - len(low)]
    select, used = prune(net, output)
    column = np.array([(a, b, 1, 1) for a, b in batcher(k)], np.int32).reshape(-1, 4)
    return column, select, np.array(used, np.int64), output


def doubling_offsets(taps: int) -> list[int]:
    """The tap offsets of `extreme_doubling_tile`'s steps: 1, 2, 4, ... p / 2, then taps - p
    (p the largest power of two <= taps) when taps is not a power of two."""
    offsets, p = [], 1
    while 2 * p <= taps:
        offsets.append(p)
        p *= 2
    return offsets + ([taps - p] if p < taps else [])


def doubling_pays(rows: int, row_bytes: int, taps: int, tap_bytes: int, down: bool) -> bool:
    """Whether the log-step window kernel issues fewer memory ops than the direct one (taps
    loads and a store per output vector) for this pass; its steps also cover the window's
    reach beyond the output (taps - 1 rows or pixels, shrinking each step)."""
    def vectors(n_rows: int, n_bytes: int) -> int:
        return n_rows * cv.round_up(n_bytes, VECTOR_ALIGN_BYTES) // VECTOR_ALIGN_BYTES

    if taps < 2:
        return False
    direct = vectors(rows, row_bytes) * (taps + 1)
    reach = taps - 1
    doubling = 0
    for o in doubling_offsets(taps):
        reach -= o
        extra = reach if down else 0
        doubling += 3 * vectors(rows + extra, row_bytes + (0 if down else reach * tap_bytes))
    return doubling < direct


# --- parameters ------------------------------------------------------------------------------


def _u8_image(op: str, inputs: Sequence[Image]) -> Image:
    src = inputs[0]
    if src.etype != TYPE_U8 or src.channels not in (1, 3) or src.planes != 1:
        raise ValueError(f"{op}: takes uint8 images of 1 or 3 channels, got "
                         f"{src.describe()}")
    return src


def _median_output(inputs: Sequence[Image], values: cv.Values) -> cv.OutputSpec:
    src = _u8_image("median_blur", inputs)
    if values["ksize"] not in MEDIAN_SIZES:
        raise ValueError(f"median_blur: ksize must be 3, 5 or 7, got {values['ksize']}")
    return src.width, src.height, src.channels, TYPE_U8, 1


def saturate_u8(value: float) -> int:
    """OpenCV's saturate_cast<uchar>(double): rounded half to even to an int (a value whose
    rounding leaves the int32 range gives INT_MIN, as cvRound does), then clamped."""
    rounded = round(value)
    if not -(2 ** 31) <= rounded < 2 ** 31:
        return 0
    return min(max(rounded, 0), 255)


def window(values: cv.Values) -> tuple[int, int, int, int]:
    """The one-pass structuring element of (ksizeX, ksizeY, iterations): width, height and
    its anchor (x, y)."""
    n = values["iterations"]
    kx, ky = values["ksizeX"], values["ksizeY"]
    return (kx - 1) * n + 1, (ky - 1) * n + 1, kx // 2 * n, ky // 2 * n


def _morph_output(op: str) -> Any:
    def output(inputs: Sequence[Image], values: cv.Values) -> cv.OutputSpec:
        src = _u8_image(op, inputs)
        wx, wy, _, _ = window(values)
        for name, side in (("ksizeX", wx), ("ksizeY", wy)):
            if side > MAX_WINDOW:
                raise ValueError(f"{op}: ({name} - 1) x iterations + 1 must be at most "
                                 f"{MAX_WINDOW}, got {side}")
        return src.width, src.height, src.channels, TYPE_U8, 1

    return output


# --- bodies ----------------------------------------------------------------------------------


def _median(core: VdspCore, slot: CoreSlot, run: cv.CvRun) -> Generator[
        simpy.Event, Any, StageBody | None]:
    k = run.values["ksize"]
    r = k // 2
    image = run.inputs[0].image
    pb = image.pixel_bytes
    column, select, used, output = median_network(k)

    def source(out: cv.Rect) -> cv.Rect:
        return cv.Rect(out.x0 - r, out.y0 - r, out.x1 + r, out.y1 + r)

    def kernel(src: int, dst: int, tile: cv.ImageTile) -> timing.KernelCycles:
        return core.compute(cv_rank_kernels.median_tile,
                            TileRows(src, dst, tile.out.height, tile.out.width * pb,
                                     tile.in_pitch, tile.out_pitch),
                            k, pb, column, select, used, output)

    return (yield from cv.run_plans(core, slot, run.what, [lambda: cv.image_plan(
        core, run, kernel, source=source, border=cv.BORDER_REPLICATE)]))


def _morphology(dilate: bool) -> Any:
    def body(core: VdspCore, slot: CoreSlot, run: cv.CvRun) -> Generator[
            simpy.Event, Any, StageBody | None]:
        v = run.values
        wx, wy, ax, ay = window(v)
        pb = run.inputs[0].image.pixel_bytes
        border = v["borderType"]
        value = v["borderValue"]
        if value == DEFAULT_BORDER_VALUE:
            fill = 0 if dilate else 255
        else:
            fill = saturate_u8(value)

        def source(out: cv.Rect) -> cv.Rect:
            return cv.Rect(out.x0 - ax, out.y0 - ay, out.x1 - ax + wx - 1,
                           out.y1 - ay + wy - 1)

        def pitch(src: cv.Rect) -> int:
            return cv.round_up(src.width * pb + VECTOR_ALIGN_BYTES, VECTOR_ALIGN_BYTES)

        def scratch(src: cv.Rect, out: cv.Rect) -> int:
            return out.height * pitch(src)

        def extreme(src: int, src_pitch: int, dst: int, dst_pitch: int, rows: int,
                    row_bytes: int, taps: int, tap_bytes: int, down: bool
                    ) -> timing.KernelCycles:
            tile = TileRows(src, dst, rows, row_bytes, src_pitch, dst_pitch)
            if doubling_pays(rows, row_bytes, taps, tap_bytes, down):
                return core.compute(cv_rank_kernels.extreme_doubling_tile, tile, taps,
                                    tap_bytes, down, dilate)
            return core.compute(cv_rank_kernels.extreme_tile, tile, taps, tap_bytes, dilate)

        def kernel(src: int, dst: int, tile: cv.ImageTile) -> timing.KernelCycles:
            row_bytes = tile.out.width * pb
            rows = tile.out.height
            if wy == 1:  # one pass along the rows, straight into the output
                return extreme(src, tile.in_pitch, dst, tile.out_pitch, rows, row_bytes, wx,
                               pb, False)
            if wx == 1:  # one pass down the columns of the source
                return extreme(src, tile.in_pitch, dst, tile.out_pitch, rows, row_bytes, wy,
                               tile.in_pitch, True)
            # Down the columns of the whole source width first (its scratch holds output
            # rows, not source rows: small even for a tall element), then along the rows.
            scratch = dst + rows * tile.out_pitch
            down = extreme(src, tile.in_pitch, scratch, tile.in_pitch, rows,
                           tile.src.width * pb, wy, tile.in_pitch, True)
            across = extreme(scratch, tile.in_pitch, dst, tile.out_pitch, rows, row_bytes, wx,
                             pb, False)
            return down.then(across)

        return (yield from cv.run_plans(core, slot, run.what, [lambda: cv.image_plan(
            core, run, kernel, source=source, border=border, border_value=fill,
            scratch_bytes=scratch)]))

    return body


MEDIAN_BLUR = cv.define(cv.CvOp(
    CMD_MEDIAN_BLUR, "median_blur", "MedianBlur",
    "median of the ksize x ksize neighbourhood (replicated border), as cv2.medianBlur",
    (cv.Param("ksize", "int", 3, "window side: 3, 5 or 7", low=1, high=255),),
    ("src",), _median_output, _median, prepare=cv.gray_input))


def _morph_params(default_border: int) -> tuple[cv.Param, ...]:
    return (
        cv.Param("ksizeX", "int", 3, "width of the rectangular structuring element",
                 low=1, high=MAX_WINDOW),
        cv.Param("ksizeY", "int", 3, "height of the rectangular structuring element",
                 low=1, high=MAX_WINDOW),
        cv.Param("iterations", "int", 1, "times the operation is applied (as one pass of a "
                 "larger element, as OpenCV does)", low=1, high=MAX_WINDOW - 1),
        cv.Param("borderType", "choice", default_border, "border mode", choices=cv.BORDERS),
        cv.Param("borderValue", "real", DEFAULT_BORDER_VALUE,
                 "constant border value (saturated to 0..255); the default, DBL_MAX, is "
                 "OpenCV's morphologyDefaultBorderValue: a border that never wins (255 for "
                 "erode, 0 for dilate)"),
    )


DILATE = cv.define(cv.CvOp(
    CMD_DILATE, "dilate", "Dilate",
    "maximum over a rectangular structuring element, as cv2.dilate",
    _morph_params(cv.BORDER_CONSTANT), ("src",), _morph_output("dilate"), _morphology(True),
    prepare=cv.gray_input))

ERODE = cv.define(cv.CvOp(
    CMD_ERODE, "erode", "Erode",
    "minimum over a rectangular structuring element, as cv2.erode",
    _morph_params(cv.BORDER_CONSTANT), ("src",), _morph_output("erode"), _morphology(False),
    prepare=cv.gray_input))
