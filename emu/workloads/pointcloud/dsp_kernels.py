"""The vDSP side of pillar preprocessing, written with the SIMD ISA emulation.

Stage 1 of scheme 2 works like the seed's DSP kernel: gather each dimension of 16
interleaved points, compute the cell (packed `idy << 16 | idx`, or -1 through a masked move
when the point is invalid: outside the box, NaN, or rounded onto the far edge of the grid),
encode and quantise x, y, z, r (and t), pack x, y, z, r into one int32 with two interleaves,
and scatter the results per point. Stage 1 of scheme 1 computes only the cell. Stage 2
transposes records laid out by final feature position into one int8 plane per channel with
8-bit gathers (scheme 2), or encodes and quantises float records while doing so (scheme 1;
empty records hold NaN, which quantises to 0).

Parameters come as the float32 array of `PillarParams.f32()`; all arithmetic is the float32
of spec §3, so the results equal the CPU reference bit for bit.
"""

from __future__ import annotations

import numpy as np

from emu.jit import njit
from emu.vdsp import isa
from emu.vdsp.isa import F32, I32, Context
from emu.workloads.pointcloud.cpu_kernels import (
    BACK,
    BOTTOM,
    FRONT,
    LEFT,
    LOWER,
    RIGHT,
    SCALE,
    TOP,
    UPPER,
    XS,
    YS,
)

LANES = 16


@njit
def _quantize(ctx: Context, v: F32, low: I32, high: I32) -> I32:
    return isa.max_i32(ctx, isa.min_i32(ctx, isa.round_f32_i32(ctx, v), high), low)


@njit
def _encode(ctx: Context, v: F32, dim: int, p: np.ndarray) -> F32:
    """Spec §3 step 5, two float32 divisions (one for the 5th value)."""
    scale = isa.splat_f32(ctx, p[SCALE])
    if dim == 4:
        return isa.fdiv_f32(ctx, v, scale)
    lo = (p[BACK], p[RIGHT], p[BOTTOM], p[LOWER])[dim]
    hi = (p[FRONT], p[LEFT], p[TOP], p[UPPER])[dim]
    span = isa.splat_f32(ctx, np.float32(hi - lo))
    shifted = isa.sub_f32(ctx, v, isa.splat_f32(ctx, lo))
    return isa.fdiv_f32(ctx, isa.fdiv_f32(ctx, shifted, span), scale)


@njit
def _cells(ctx: Context, x: F32, y: F32, z: F32, p: np.ndarray, x_len: int, y_len: int) -> I32:
    back, front = isa.splat_f32(ctx, p[BACK]), isa.splat_f32(ctx, p[FRONT])
    right, left = isa.splat_f32(ctx, p[RIGHT]), isa.splat_f32(ctx, p[LEFT])
    bottom, top = isa.splat_f32(ctx, p[BOTTOM]), isa.splat_f32(ctx, p[TOP])
    idx = isa.trunc_f32_i32(ctx, isa.fdiv_f32(ctx, isa.sub_f32(ctx, x, back),
                                              isa.splat_f32(ctx, p[XS])))
    idy = isa.trunc_f32_i32(ctx, isa.fdiv_f32(ctx, isa.sub_f32(ctx, y, right),
                                              isa.splat_f32(ctx, p[YS])))
    # Unordered compares: a NaN coordinate counts as out of range.
    skip = isa.or_b(ctx, isa.ule_f32(ctx, x, back), isa.ule_f32(ctx, front, x))
    skip = isa.or_b(ctx, skip, isa.ule_f32(ctx, y, right))
    skip = isa.or_b(ctx, skip, isa.ule_f32(ctx, left, y))
    skip = isa.or_b(ctx, skip, isa.ule_f32(ctx, z, bottom))
    skip = isa.or_b(ctx, skip, isa.ule_f32(ctx, top, z))
    skip = isa.or_b(ctx, skip, isa.le_i32(ctx, isa.splat_i32(ctx, x_len), idx))
    skip = isa.or_b(ctx, skip, isa.le_i32(ctx, isa.splat_i32(ctx, y_len), idy))
    cell = isa.add_i32(ctx, isa.sll_i32(ctx, idy, 16), idx)
    return isa.mov_t(ctx, isa.splat_i32(ctx, -1), cell, skip)


@njit
def stage1_quantize_first(ctx: Context, src: int, dst: int, count: int, dims: int,
                          p: np.ndarray, x_len: int, y_len: int) -> None:
    """Scheme 2, stage 1: per point out cell, packed xyzr (and quantised t for 5 dims)."""
    words = 3 if dims == 5 else 2
    in_offsets = (np.arange(LANES) * 4 * dims).astype(np.uint32)
    out_offsets = (np.arange(LANES) * 4 * words).astype(np.uint32)
    low, high = isa.splat_i32(ctx, -128), isa.splat_i32(ctx, 127)
    for first in range(0, count, LANES):
        base = src + 4 * dims * first
        out = dst + 4 * words * first
        x = isa.gather_d(ctx, isa.gather_a_f32(ctx, base, in_offsets))
        y = isa.gather_d(ctx, isa.gather_a_f32(ctx, base + 4, in_offsets))
        z = isa.gather_d(ctx, isa.gather_a_f32(ctx, base + 8, in_offsets))
        r = isa.gather_d(ctx, isa.gather_a_f32(ctx, base + 12, in_offsets))
        isa.scatter_i32(ctx, _cells(ctx, x, y, z, p, x_len, y_len), out, out_offsets)
        qx = _quantize(ctx, _encode(ctx, x, 0, p), low, high)
        qy = _quantize(ctx, _encode(ctx, y, 1, p), low, high)
        qz = _quantize(ctx, _encode(ctx, z, 2, p), low, high)
        qr = _quantize(ctx, _encode(ctx, r, 3, p), low, high)
        xyzr = isa.interleave_even_i16(ctx, isa.interleave_even_i8(ctx, qx, qy),
                                       isa.interleave_even_i8(ctx, qz, qr))
        isa.scatter_i32(ctx, xyzr, out + 4, out_offsets)
        if dims == 5:
            t = isa.gather_d(ctx, isa.gather_a_f32(ctx, base + 16, in_offsets))
            isa.scatter_i32(ctx, _quantize(ctx, _encode(ctx, t, 4, p), low, high), out + 8,
                            out_offsets)
    isa.scatter_w(ctx)


@njit
def stage1_cells_only(ctx: Context, src: int, dst: int, count: int, dims: int, p: np.ndarray,
                      x_len: int, y_len: int) -> None:
    """Scheme 1, stage 1: only the cell of every point."""
    in_offsets = (np.arange(LANES) * 4 * dims).astype(np.uint32)
    for first in range(0, count, LANES):
        base = src + 4 * dims * first
        x = isa.gather_d(ctx, isa.gather_a_f32(ctx, base, in_offsets))
        y = isa.gather_d(ctx, isa.gather_a_f32(ctx, base + 4, in_offsets))
        z = isa.gather_d(ctx, isa.gather_a_f32(ctx, base + 8, in_offsets))
        isa.storeu(ctx, _cells(ctx, x, y, z, p, x_len, y_len), dst + 4 * first)


@njit
def stage2_transpose(ctx: Context, src: int, dst: int, count: int, stride: int,
                     dims: int) -> None:
    """Scheme 2, stage 2: `count` (a multiple of 64) int8 records of `dims` bytes at `src`
    into `dims` planes, `stride` bytes apart, at `dst`; two 32-lane byte gathers a vector."""
    offsets = (np.arange(32) * dims).astype(np.uint16)
    for c in range(dims):
        for first in range(0, count, 64):
            base = src + dims * first + c
            low = isa.gather_a_i8(ctx, base, offsets)
            high = isa.gather_a_i8(ctx, base + 32 * dims, offsets)
            out = isa.gather_d_hi_i8(ctx, isa.gather_d_lo_i8(ctx, low), high)
            isa.store(ctx, out, dst + c * stride + first)


@njit
def stage2_encode_transpose(ctx: Context, src: int, dst: int, count: int, stride: int,
                            dims: int, p: np.ndarray) -> None:
    """Scheme 1, stage 2: `count` float32 records of `dims` values into `dims` int8 planes,
    encoding and quantising on the way (NaN records, the empty slots, give 0)."""
    offsets = (np.arange(LANES) * 4 * dims).astype(np.uint32)
    low, high = isa.splat_i32(ctx, -128), isa.splat_i32(ctx, 127)
    for c in range(dims):
        for first in range(0, count, 64):
            q = []
            for part in range(4):
                base = src + 4 * (dims * (first + LANES * part) + c)
                v = isa.gather_d(ctx, isa.gather_a_f32(ctx, base, offsets))
                q.append(_quantize(ctx, _encode(ctx, v, c, p), low, high))
            packed = isa.pack_i16_i8(ctx, isa.pack_i32_i16(ctx, q[0], q[1]),
                                     isa.pack_i32_i16(ctx, q[2], q[3]))
            isa.store(ctx, packed, dst + c * stride + first)
