"""Kernels of the colour conversions (`emu.vdsp.ops.cv_color`), written with the vDSP ISA.

Both kernels read rows of interleaved 3-channel uint8 pixels and work on groups of 64
pixels: three aligned vector loads (192 bytes), split into one vector per channel by two
two-register selects each (`sel_u8`: the bytes that lie in the first two loads, then the
ones in the third), widened to int16 and int32 lanes, weighted, rounded and packed back to
bytes.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from emu.jit import njit
from emu.vdsp import isa
from emu.vdsp.ops.cv_kernel_records import TileRows
from emu.vdsp.ops.cv_kernels import channel_patterns, load_channels

VEC = isa.VECTOR_BYTES
GROUP = 64
"""Pixels per group: one output vector of bytes, three input vectors."""


@njit
def _weigh_i16(ctx: isa.Context, chans: npt.NDArray[np.uint8], coef: npt.NDArray[np.int16],
               wide: npt.NDArray[np.int16], acc: npt.NDArray[np.int32],
               halves: npt.NDArray[np.int16], out: npt.NDArray[np.uint8]) -> None:
    """out = (sum_c chans[c] * coef[c] + 2**14) >> 15 per pixel, saturated to uint8: int16
    lanes times int16 weights into int32 accumulators (`coef` rows are splatted weights)."""
    for c in range(3):
        isa.unpack_lo_u8_i16(ctx, chans[c], wide[2 * c])
        isa.unpack_hi_u8_i16(ctx, chans[c], wide[2 * c + 1])
    for half in range(2):
        lo, hi = acc[2 * half], acc[2 * half + 1]
        isa.mul_lo_i16_i32(ctx, wide[half], coef[0], lo)
        isa.mul_hi_i16_i32(ctx, wide[half], coef[0], hi)
        for c in range(1, 3):
            isa.mula_lo_i16_i32(ctx, lo, wide[2 * c + half], coef[c], lo)
            isa.mula_hi_i16_i32(ctx, hi, wide[2 * c + half], coef[c], hi)
    isa.packr_i32_i16(ctx, acc[0], acc[1], 15, halves[0])
    isa.packr_i32_i16(ctx, acc[2], acc[3], 15, halves[1])
    isa.pack_i16_u8(ctx, halves[0], halves[1], out)


@njit
def gray_tile(ctx: isa.Context, src: int, dst: int, rows: int, width: int, in_pitch: int,
              out_pitch: int, coef: npt.NDArray[np.int32]) -> None:
    """Grey of `rows` rows of `width` 3-channel pixels: (sum_c p[c] * coef[c] + 2**14) >> 15
    with the 15-bit weights `coef` given per channel in memory order."""
    idx = channel_patterns()
    raw = np.empty((3, isa.LANES_8), np.uint8)
    chans = np.empty((3, isa.LANES_8), np.uint8)
    wide = np.empty((6, isa.LANES_16), np.int16)
    acc = np.empty((4, isa.LANES_32), np.int32)
    weights = np.empty((3, isa.LANES_16), np.int16)
    halves = np.empty((2, isa.LANES_16), np.int16)
    out = np.empty(isa.LANES_8, np.uint8)
    for c in range(3):
        isa.splat_i16(ctx, coef[c], weights[c])
    row_bytes = 3 * width
    for r in range(rows):
        for x in range(0, width, GROUP):
            load_channels(ctx, src + r * in_pitch + 3 * x, row_bytes - 3 * x, raw, idx, chans)
            _weigh_i16(ctx, chans, weights, wide, acc, halves, out)
            isa.store(ctx, out, dst + r * out_pitch + x)


@njit
def _weigh_i32(ctx: isa.Context, wide: npt.NDArray[np.int16], first: int,
               coef: npt.NDArray[np.int32], offset: npt.NDArray[np.int32],
               lanes: npt.NDArray[np.int32], acc: npt.NDArray[np.int32],
               out: npt.NDArray[np.int16]) -> None:
    """out = (offset + sum_c wide[first + 2c] * coef[c] + 2**19) >> 20 for the 32 int16
    lanes of wide[first + 2c] (20-bit weights, int32 products)."""
    for part in range(2):
        a = acc[part]
        for c in range(3):
            if part == 0:
                isa.unpack_lo_i16_i32(ctx, wide[first + 2 * c], lanes[c])
            else:
                isa.unpack_hi_i16_i32(ctx, wide[first + 2 * c], lanes[c])
        isa.mula_i32(ctx, offset, lanes[0], coef[0], a)
        isa.mula_i32(ctx, a, lanes[1], coef[1], a)
        isa.mula_i32(ctx, a, lanes[2], coef[2], a)
    isa.packr_i32_i16(ctx, acc[0], acc[1], 20, out)


class Bt601Regs(NamedTuple):
    """The scratch registers of `_bt601`: six int16 (the three channels widened), three
    int32 lanes, two int32 accumulators, two int16 halves."""

    wide: npt.NDArray[np.int16]
    lanes: npt.NDArray[np.int32]
    acc: npt.NDArray[np.int32]
    halves: npt.NDArray[np.int16]


@njit
def _bt601(ctx: isa.Context, chans: npt.NDArray[np.uint8], coef: npt.NDArray[np.int32],
           offset: npt.NDArray[np.int32], regs: Bt601Regs, out: npt.NDArray[np.uint8]) -> None:
    """One BT.601 component of 64 pixels (`coef` rows: splatted 20-bit weights)."""
    wide, lanes, acc, halves = regs
    for c in range(3):
        isa.unpack_lo_u8_i16(ctx, chans[c], wide[2 * c])
        isa.unpack_hi_u8_i16(ctx, chans[c], wide[2 * c + 1])
    _weigh_i32(ctx, wide, 0, coef, offset, lanes, acc, halves[0])
    _weigh_i32(ctx, wide, 1, coef, offset, lanes, acc, halves[1])
    isa.pack_i16_u8(ctx, halves[0], halves[1], out)


@njit
def nv12_tile(ctx: isa.Context, tile: TileRows, dst_uv: int,
              coef: npt.NDArray[np.int32]) -> None:
    """NV12 of `rows` (even) rows of `width` (even) 3-channel pixels (`tile`; its output is
    the Y plane): every pixel's Y, and
    for each 2x2 block the U and V of its top-left pixel, interleaved (U first) in the UV
    row of the pair at `dst_uv`. `coef` is 3 x 4 int32: rows Y, U, V; columns the weights
    of the channels in memory order, then the offset (16 or 128) << 20."""
    src, dst, rows, width, in_pitch, out_pitch = tile
    idx = channel_patterns()
    raw = np.empty((3, isa.LANES_8), np.uint8)
    chans = np.empty((2, 3, isa.LANES_8), np.uint8)
    even = np.empty((3, isa.LANES_8), np.uint8)
    wide = np.empty((6, isa.LANES_16), np.int16)
    lanes = np.empty((3, isa.LANES_32), np.int32)
    acc = np.empty((2, isa.LANES_32), np.int32)
    halves = np.empty((2, isa.LANES_16), np.int16)
    regs = Bt601Regs(wide, lanes, acc, halves)
    weights = np.empty((3, 3, isa.LANES_32), np.int32)
    offsets = np.empty((3, isa.LANES_32), np.int32)
    comp = np.empty((3, isa.LANES_8), np.uint8)
    for k in range(3):
        for c in range(3):
            isa.splat_i32(ctx, coef[k, c], weights[k, c])
        isa.splat_i32(ctx, coef[k, 3], offsets[k])
    row_bytes = 3 * width
    for r in range(rows):
        top = r % 2 == 0
        for x in range(0, width, 2 * GROUP):
            for g in range(2):
                at = x + g * GROUP
                if at >= width:
                    break
                load_channels(ctx, src + r * in_pitch + 3 * at, row_bytes - 3 * at, raw, idx,
                              chans[g])
                _bt601(ctx, chans[g], weights[0], offsets[0], regs, comp[0])
                isa.store(ctx, comp[0], dst + r * out_pitch + at)
            if not top:
                continue
            # Chroma of the even pixels of these 128: U and V of 64 pixels, interleaved.
            for c in range(3):
                isa.deinterleave_even_u8(ctx, chans[0, c], chans[1, c], even[c])
            _bt601(ctx, even, weights[1], offsets[1], regs, comp[1])
            _bt601(ctx, even, weights[2], offsets[2], regs, comp[2])
            uv = dst_uv + (r // 2) * out_pitch + x
            isa.interleave_lo_u8(ctx, comp[1], comp[2], comp[0])
            isa.store(ctx, comp[0], uv)
            if x + GROUP < width:
                isa.interleave_hi_u8(ctx, comp[1], comp[2], comp[0])
                isa.store(ctx, comp[0], uv + VEC)
