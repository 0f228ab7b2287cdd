"""Colour conversion: `cvt_color` (RGB/BGR to grey or to NV12).

What it computes (uint8 RGB or BGR in, channels interleaved):
  - rgb2gray / bgr2gray: Y = (9798 R + 19235 G + 3735 B + 2**14) >> 15, the 15-bit
    fixed-point weights of 0.299, 0.587, 0.114 (they sum to 2**15) that OpenCV 5's
    `cvtColor(..., COLOR_RGB2GRAY)` uses for 8-bit images: bit-identical to it (checked on
    all 2**24 colours). Older OpenCV releases used 14-bit weights (4899, 9617, 1868), which
    differ by 1 on about 0.3 % of colours.
  - rgb2nv12 / bgr2nv12: NV12, a full-size Y plane followed by a plane of half the rows
    holding U, V interleaved (U first) for each 2x2 block. OpenCV 5 has no RGB-to-NV12
    code; NV12 here is exactly OpenCV's `COLOR_RGB2YUV_I420` with its U and V planes
    interleaved. That is BT.601 limited range in 20-bit fixed point:
      Y = (269484 R + 528482 G + 102760 B + (16 << 20) + 2**19) >> 20
      U = (-155188 R - 305135 G + 460324 B + (128 << 20) + 2**19) >> 20
      V = (460324 R - 385875 G - 74448 B + (128 << 20) + 2**19) >> 20
    with U and V of each 2x2 block taken from its top-left pixel alone (no averaging), as
    OpenCV does (the three formulas agree with cv2 on all 2**24 colours). Width and height
    must be even.

How: the kernels (`cv_color_kernels`) split 64 interleaved pixels into channel vectors with
`sel_u8`, widen them, and weigh them in int32 lanes (int16 x int16 products for grey,
int32 x int32 for the 20-bit BT.601 weights), rounding with the rounding narrow packs.
Tiles are bands of whole rows without a halo (`cv.image_plan`); NV12 tiles start on even
rows and columns (`row_step`, `col_step` 2) and each tile stores its Y rows and its UV
rows as two iDMA regions of the output's two planes.

The `code` values are OpenCV's for grey (rgb2gray 7, bgr2gray 6) and our own for NV12
(rgb2nv12 1000, bgr2nv12 1001). Not supported: other conversion codes, 4-channel input,
other element types.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from emu.soc.sched import CoreSlot, StageBody
from emu.vdsp import timing
from emu.vdsp.ops import cv, cv_color_kernels
from emu.vdsp.ops.cv_kernel_records import TileRows
from emu.vdsp.ops.image_args import TYPE_U8, Image
from emu.vdsp.tcm import VECTOR_ALIGN_BYTES
from emu.vdsp.tiling import Region

if TYPE_CHECKING:
    from emu.vdsp.cores import VdspCore

CMD_CVT_COLOR = 0x801

RGB2GRAY, BGR2GRAY, RGB2NV12, BGR2NV12 = 7, 6, 1000, 1001
CODES = (("rgb2gray", RGB2GRAY), ("bgr2gray", BGR2GRAY), ("rgb2nv12", RGB2NV12),
         ("bgr2nv12", BGR2NV12))
"""The conversion codes: OpenCV's for grey; NV12 ones of our own (OpenCV has none)."""

GRAY_WEIGHTS = (9798, 19235, 3735)
"""R, G, B weights of grey, in 1/2**15."""
BT601 = ((269484, 528482, 102760, 16 << 20),
         (-155188, -305135, 460324, 128 << 20),
         (460324, -385875, -74448, 128 << 20))
"""Y, U, V rows: R, G, B weights in 1/2**20, then the offset."""


def _output(inputs: Sequence[Image], values: cv.Values) -> cv.OutputSpec:
    src = inputs[0]
    if src.etype != TYPE_U8 or src.channels != 3 or src.planes != 1:
        raise ValueError(f"cvt_color: takes uint8 images of 3 channels, got {src.describe()}")
    if values["code"] in (RGB2NV12, BGR2NV12):
        if src.width % 2 or src.height % 2:
            raise ValueError(f"cvt_color: NV12 output needs even width and height, got "
                             f"{src.width}x{src.height}")
        return src.width, src.height, 1, TYPE_U8, 2
    return src.width, src.height, 1, TYPE_U8, 1


def _in_memory_order(weights: Sequence[int], bgr: bool) -> list[int]:
    """R, G, B weights in the order the channels lie in memory."""
    return list(weights[::-1]) if bgr else list(weights)


def _out_pitch(width: int) -> int:
    return cv.round_up(width + VECTOR_ALIGN_BYTES, VECTOR_ALIGN_BYTES)


def _cvt_color(core: VdspCore, slot: CoreSlot, run: cv.CvRun) -> Generator[
        simpy.Event, Any, StageBody | None]:
    code = run.values["code"]
    bgr = code in (BGR2GRAY, BGR2NV12)
    dst = run.output
    out_im = dst.image

    if code in (RGB2GRAY, BGR2GRAY):
        coef = np.array(_in_memory_order(GRAY_WEIGHTS, bgr), np.int32)

        def gray(src: int, out: int, tile: cv.ImageTile) -> timing.KernelCycles:
            return core.compute(cv_color_kernels.gray_tile, src, out, tile.out.height,
                                tile.out.width, tile.in_pitch, tile.out_pitch, coef)

        return (yield from cv.run_plans(core, slot, run.what,
                                        [lambda: cv.image_plan(core, run, gray)]))

    table = np.array([[*_in_memory_order(row[:3], bgr), row[3]] for row in BT601], np.int32)

    def nv12(src: int, out: int, tile: cv.ImageTile) -> timing.KernelCycles:
        uv = out + tile.out.height * tile.out_pitch
        return core.compute(cv_color_kernels.nv12_tile,
                            TileRows(src, out, tile.out.height, tile.out.width, tile.in_pitch,
                                     tile.out_pitch), uv, table)

    def stores(tile: cv.ImageTile) -> list[Region]:
        r = tile.out
        y_plane = dst.offset + r.y0 * out_im.stride + r.x0
        uv_plane = dst.offset + (out_im.height + r.y0 // 2) * out_im.stride + r.x0
        return [Region(dst.buffer, y_plane, out_im.stride, 0, tile.out_pitch, r.height,
                       r.width),
                Region(dst.buffer, uv_plane, out_im.stride, r.height * tile.out_pitch,
                       tile.out_pitch, r.height // 2, r.width)]

    return (yield from cv.run_plans(core, slot, run.what, [lambda: cv.image_plan(
        core, run, nv12, stores=stores, row_step=2, col_step=2,
        scratch_bytes=lambda src, out: out.height // 2 * _out_pitch(out.width))]))


def _prepare(picture: np.ndarray) -> list[np.ndarray]:
    return cv.rgb_input(picture)


CVT_COLOR = cv.define(cv.CvOp(
    CMD_CVT_COLOR, "cvt_color", "CvtColor",
    "colour conversion of a uint8 RGB/BGR image to grey or NV12",
    (cv.Param("code", "choice", RGB2GRAY, "conversion", choices=CODES),),
    ("src",), _output, _cvt_color, prepare=_prepare))
