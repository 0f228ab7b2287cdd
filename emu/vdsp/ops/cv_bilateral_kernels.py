"""Kernels of the bilateral filter (`emu.vdsp.ops.cv_bilateral`), written with the vDSP ISA.

`color_weights` builds the colour-weight table the way OpenCV's set-up code does, with its
vectorised exponential (a Cephes-style polynomial, evaluated with separate multiplies and
adds). `bilateral_tile` filters a tile of 64-pixel groups in float32 lanes, reading the
colour weights with gathers; the sums use the ISA's fused multiply-add (`fma_f32`), as
OpenCV's accumulation does. `copy_tile` is the filter with a zero sigma.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from emu.jit import njit
from emu.vdsp import isa
from emu.vdsp.ops.cv_kernel_records import TileRows
from emu.vdsp.ops.cv_kernels import channel_patterns, load_channels

LANES = isa.LANES_32
VEC = isa.VECTOR_BYTES
GROUP = 64
"""Pixels per group: one byte vector, four float32 vectors."""

# OpenCV's float32 exponential: clamp, 2**n by the exponent bits, a degree-5 polynomial.
EXP_LOW = np.float32(-88.3762626647949)
EXP_HIGH = np.float32(89.0)
LOG2E = np.float32(1.44269504088896341)
EXP_C1 = np.float32(-6.93359375e-1)
EXP_C2 = np.float32(2.12194440e-4)
EXP_POLY = np.array([1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                     1.6666665459e-1, 5.0000001201e-1], np.float32)
"""0xFFFFFF00: keeps the top 16 significand bits of a float32."""


@njit
def color_weights(ctx: isa.Context, dst: int, count: int, coeff: float) -> None:
    """float32 exp(i * i * coeff) for i = 0..count-1 (a multiple of 16) at `dst`:
    x = float(i * i) * coeff rounded to float32, then OpenCV's v_exp of x with each of its
    multiply-adds done as a multiply and an add (as at its SSE baseline)."""
    iota = np.arange(LANES).astype(np.int32)
    base = np.empty(LANES, np.int32)
    fi = np.empty(LANES, np.float32)
    x = np.empty(LANES, np.float32)
    e = np.empty(LANES, np.float32)
    y = np.empty(LANES, np.float32)
    xx = np.empty(LANES, np.float32)
    scale = np.empty(LANES, np.float32)
    mm = np.empty(LANES, np.int32)
    c = np.empty((12, LANES), np.float32)
    bias = isa.splat_i32(ctx, 127)
    isa.splat_f32(ctx, coeff, c[0])
    isa.splat_f32(ctx, EXP_LOW, c[1])
    isa.splat_f32(ctx, EXP_HIGH, c[2])
    isa.splat_f32(ctx, 0.5, c[3])
    isa.splat_f32(ctx, LOG2E, c[4])
    isa.splat_f32(ctx, EXP_C1, c[5])
    isa.splat_f32(ctx, EXP_C2, c[6])
    isa.splat_f32(ctx, 1.0, c[7])
    p = np.empty((6, LANES), np.float32)
    for k in range(6):
        isa.splat_f32(ctx, EXP_POLY[k], p[k])
    mm_f = mm.view(np.float32)
    for at in range(0, count, LANES):
        isa.splat_i32(ctx, at, base)
        isa.add_i32(ctx, base, iota, base)
        isa.cvt_i32_f32(ctx, base, fi)
        isa.mul_f32(ctx, fi, fi, x)
        isa.mul_f32(ctx, x, c[0], x)
        isa.max_f32(ctx, x, c[1], x)
        isa.min_f32(ctx, x, c[2], x)
        isa.mula_f32(ctx, c[3], x, c[4], e)
        isa.floor_f32_i32(ctx, e, mm)
        isa.cvt_i32_f32(ctx, mm, e)
        isa.add_i32(ctx, mm, bias, mm)
        isa.sll_i32(ctx, mm, 23, mm)
        isa.mula_f32(ctx, x, e, c[5], x)
        isa.mula_f32(ctx, x, e, c[6], x)
        isa.mul_f32(ctx, x, x, xx)
        isa.mula_f32(ctx, p[1], x, p[0], y)
        for k in range(2, 6):
            isa.mula_f32(ctx, p[k], y, x, y)
        isa.mula_f32(ctx, x, y, xx, y)
        isa.add_f32(ctx, y, c[7], y)
        isa.mul_f32(ctx, y, mm_f, scale)
        isa.store(ctx, scale, dst + 4 * at)


@njit
def bilateral_tile(ctx: isa.Context, tile: TileRows, radius: int,
                   tap_offsets: npt.NDArray[np.int32], tap_weights: npt.NDArray[np.float32],
                   simd_order: npt.NDArray[np.int32], simd_end: int, table: int) -> None:
    """The 1-channel bilateral filter of `rows` x `width` output pixels; the source tile has
    `radius` border pixels on every side. Tap k reads the pixel `tap_offsets[k]` bytes from
    the centre (dy * in_pitch + dx) with space weight `tap_weights[k]`. Groups left of
    `simd_end` add the taps in `simd_order`, the others in tap order (OpenCV's vector loop
    and its scalar tail). Per pixel: w = space weight * colour weight (gathered at
    |neighbour - centre|), wsum += w, sum = fma(neighbour, w, sum); out = round_half_even(
    sum / wsum), saturated."""
    src, dst, rows, width, in_pitch, out_pitch = tile
    taps = tap_offsets.size
    center = np.empty(isa.LANES_8, np.uint8)
    near = np.empty(isa.LANES_8, np.uint8)
    diff = np.empty(isa.LANES_8, np.uint8)
    d16 = np.empty((2, isa.LANES_16), np.int16)
    v16 = np.empty((2, isa.LANES_16), np.int16)
    offs = np.empty(LANES, np.uint32)
    offs_i = offs.view(np.int32)
    v32 = np.empty(LANES, np.int32)
    vf = np.empty(LANES, np.float32)
    gathered = np.empty(LANES, np.float32)
    cw = np.empty(LANES, np.float32)
    w = np.empty(LANES, np.float32)
    sums = np.empty((4, LANES), np.float32)
    wsums = np.empty((4, LANES), np.float32)
    q = np.empty(LANES, np.float32)
    ints = np.empty((4, LANES), np.int32)
    halves = np.empty((2, isa.LANES_16), np.int16)
    out = np.empty(isa.LANES_8, np.uint8)
    kweights = np.empty((taps, LANES), np.float32)
    for k in range(taps):
        isa.splat_f32(ctx, tap_weights[k], kweights[k])
    for r in range(rows):
        row = src + (r + radius) * in_pitch + radius
        for x in range(0, width, GROUP):
            isa.loadu_u8(ctx, row + x, center)
            for part in range(4):
                isa.splat_f32(ctx, 0.0, sums[part])
                isa.splat_f32(ctx, 0.0, wsums[part])
            for n in range(taps):
                k = simd_order[n] if x < simd_end else n
                isa.loadu_u8(ctx, row + x + tap_offsets[k], near)
                isa.absdiff_u8(ctx, near, center, diff)
                isa.unpack_lo_u8_i16(ctx, diff, d16[0])
                isa.unpack_hi_u8_i16(ctx, diff, d16[1])
                isa.sll_i16(ctx, d16[0], 2, d16[0])
                isa.sll_i16(ctx, d16[1], 2, d16[1])
                isa.unpack_lo_u8_i16(ctx, near, v16[0])
                isa.unpack_hi_u8_i16(ctx, near, v16[1])
                for part in range(4):
                    half = part // 2
                    if part % 2 == 0:
                        isa.unpack_lo_i16_i32(ctx, d16[half], offs_i)
                        isa.unpack_lo_i16_i32(ctx, v16[half], v32)
                    else:
                        isa.unpack_hi_i16_i32(ctx, d16[half], offs_i)
                        isa.unpack_hi_i16_i32(ctx, v16[half], v32)
                    isa.gather_a_f32(ctx, table, offs, gathered)
                    isa.gather_d(ctx, gathered, cw)
                    isa.mul_f32(ctx, kweights[k], cw, w)
                    isa.add_f32(ctx, wsums[part], w, wsums[part])
                    isa.cvt_i32_f32(ctx, v32, vf)
                    isa.fma_f32(ctx, sums[part], vf, w, sums[part])
            for part in range(4):
                isa.fdiv_f32(ctx, sums[part], wsums[part], q)
                isa.round_f32_i32(ctx, q, ints[part])
            isa.pack_i32_i16(ctx, ints[0], ints[1], halves[0])
            isa.pack_i32_i16(ctx, ints[2], ints[3], halves[1])
            isa.pack_i16_u8(ctx, halves[0], halves[1], out)
            isa.store(ctx, out, dst + r * out_pitch + x)


@njit
def bilateral3_tile(ctx: isa.Context, tile: TileRows, radius: int,
                    tap_offsets: npt.NDArray[np.int32], tap_dx: npt.NDArray[np.int32],
                    tap_weights: npt.NDArray[np.float32], table: int) -> None:
    """The 3-channel bilateral filter of `rows` x `width` output pixels (source tile with
    `radius` border pixels on every side; `tap_offsets` in bytes, `tap_dx` the taps' column
    offsets in pixels). Per pixel and tap, in tap
    order: w = space weight * colour weight(|db| + |dg| + |dr|), wsum += w, and per channel
    sum_c = fma(neighbour_c, w, sum_c); out_c = round_half_even(sum_c * (1 / wsum)),
    saturated (OpenCV's 3-channel loop multiplies by the reciprocal)."""
    src, dst, rows, width, in_pitch, out_pitch = tile
    taps = tap_offsets.size
    idx = channel_patterns()
    raw = np.empty((3, isa.LANES_8), np.uint8)
    center = np.empty((3, isa.LANES_8), np.uint8)
    near = np.empty((3, isa.LANES_8), np.uint8)
    diff = np.empty(isa.LANES_8, np.uint8)
    d16 = np.empty((2, isa.LANES_16), np.int16)
    t16 = np.empty((2, isa.LANES_16), np.int16)
    v16 = np.empty((3, 2, isa.LANES_16), np.int16)
    offs = np.empty(LANES, np.uint32)
    offs_i = offs.view(np.int32)
    v32 = np.empty(LANES, np.int32)
    vf = np.empty(LANES, np.float32)
    gathered = np.empty(LANES, np.float32)
    cw = np.empty(LANES, np.float32)
    w = np.empty(LANES, np.float32)
    sums = np.empty((3, 4, LANES), np.float32)
    wsums = np.empty((4, LANES), np.float32)
    q = np.empty(LANES, np.float32)
    ints = np.empty((4, LANES), np.int32)
    halves = np.empty((2, isa.LANES_16), np.int16)
    outs = np.empty((3, isa.LANES_8), np.uint8)
    vec = np.empty(isa.LANES_8, np.uint8)
    one = isa.splat_f32(ctx, 1.0)
    kweights = np.empty((taps, LANES), np.float32)
    for k in range(taps):
        isa.splat_f32(ctx, tap_weights[k], kweights[k])
    row_bytes = 3 * (width + 2 * radius)
    for r in range(rows):
        row = src + (r + radius) * in_pitch + 3 * radius
        for x in range(0, width, GROUP):
            load_channels(ctx, row + 3 * x, row_bytes - 3 * (x + radius), raw, idx, center)
            for part in range(4):
                isa.splat_f32(ctx, 0.0, wsums[part])
                for c in range(3):
                    isa.splat_f32(ctx, 0.0, sums[c, part])
            for k in range(taps):
                at = row + 3 * x + tap_offsets[k]
                load_channels(ctx, at, row_bytes - 3 * (x + radius + tap_dx[k]), raw, idx, near)
                for c in range(3):
                    isa.absdiff_u8(ctx, near[c], center[c], diff)
                    isa.unpack_lo_u8_i16(ctx, near[c], v16[c, 0])
                    isa.unpack_hi_u8_i16(ctx, near[c], v16[c, 1])
                    if c == 0:
                        isa.unpack_lo_u8_i16(ctx, diff, d16[0])
                        isa.unpack_hi_u8_i16(ctx, diff, d16[1])
                    else:
                        isa.unpack_lo_u8_i16(ctx, diff, t16[0])
                        isa.unpack_hi_u8_i16(ctx, diff, t16[1])
                        isa.add_i16(ctx, d16[0], t16[0], d16[0])
                        isa.add_i16(ctx, d16[1], t16[1], d16[1])
                isa.sll_i16(ctx, d16[0], 2, d16[0])
                isa.sll_i16(ctx, d16[1], 2, d16[1])
                for part in range(4):
                    half = part // 2
                    if part % 2 == 0:
                        isa.unpack_lo_i16_i32(ctx, d16[half], offs_i)
                    else:
                        isa.unpack_hi_i16_i32(ctx, d16[half], offs_i)
                    isa.gather_a_f32(ctx, table, offs, gathered)
                    isa.gather_d(ctx, gathered, cw)
                    isa.mul_f32(ctx, kweights[k], cw, w)
                    isa.add_f32(ctx, wsums[part], w, wsums[part])
                    for c in range(3):
                        if part % 2 == 0:
                            isa.unpack_lo_i16_i32(ctx, v16[c, half], v32)
                        else:
                            isa.unpack_hi_i16_i32(ctx, v16[c, half], v32)
                        isa.cvt_i32_f32(ctx, v32, vf)
                        isa.fma_f32(ctx, sums[c, part], vf, w, sums[c, part])
            for part in range(4):
                isa.fdiv_f32(ctx, one, wsums[part], wsums[part])
            for c in range(3):
                for part in range(4):
                    isa.mul_f32(ctx, sums[c, part], wsums[part], q)
                    isa.round_f32_i32(ctx, q, ints[part])
                isa.pack_i32_i16(ctx, ints[0], ints[1], halves[0])
                isa.pack_i32_i16(ctx, ints[2], ints[3], halves[1])
                isa.pack_i16_u8(ctx, halves[0], halves[1], outs[c])
            left = 3 * (width - x)
            for m in range(3):
                if m * VEC < left:
                    isa.sel_u8(ctx, outs[0], outs[1], idx[6 + 2 * m], vec)
                    isa.sel_u8(ctx, vec, outs[2], idx[7 + 2 * m], vec)
                    isa.store(ctx, vec, dst + r * out_pitch + 3 * x + m * VEC)


@njit
def copy_tile(ctx: isa.Context, src: int, dst: int, rows: int, row_bytes: int,
              in_pitch: int, out_pitch: int) -> None:
    """Copy `rows` rows of `row_bytes` (what OpenCV does for a sigma of 1e-6 or less)."""
    v = np.empty(isa.LANES_8, np.uint8)
    for r in range(rows):
        for x in range(0, row_bytes, VEC):
            isa.load_u8(ctx, src + r * in_pitch + x, v)
            isa.store(ctx, v, dst + r * out_pitch + x)
