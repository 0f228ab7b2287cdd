"""The vDSP side of pillar preprocessing, written with the SIMD ISA emulation.

Stage 1 of scheme 2 works like the seed's DSP kernel: gather each dimension of 16
interleaved points, compute the cell (packed `idy << 16 | idx`, or -1 through a masked move
when the point is invalid: outside the box, NaN, or rounded onto the far edge of the grid),
encode and quantise x, y, z, r (and t), pack x, y, z, r into one int32 with two interleaves,
and scatter the results per point. Stage 1 of scheme 1 computes only the cell. Stage 2
transposes records laid out by final feature position into one int8 plane per channel with
8-bit gathers (scheme 2), or encodes and quantises float records while doing so (scheme 1;
empty records hold NaN, which quantises to 0); it runs on the records of the pillars used
only, and `fill_zero` writes the planes' zero part for the others.

Parameters come as the float32 vector laid out below (`PillarParams.f32()` makes it); all
arithmetic is the float32 of spec §3, so the results equal the CPU reference bit for bit.
Every op writes into vector registers the kernel makes once per call (the ops' `out=`), so
the loops allocate nothing.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from emu.jit import njit, njit_inline, njit_op
from emu.vdsp import isa
from emu.vdsp.isa import F32, I32, U32, Context, Mask

# The float32 parameter vector every pillar kernel takes (words 16-26 of the operators'
# parameter block; `PillarParams.f32()` builds it, the CPU kernels read it too): the box
# [back, front] x [right, left] x [bottom, top], the intensity range [lower, upper], the
# cell sizes' reciprocals and the quantisation scale.
BACK, FRONT, RIGHT, LEFT, BOTTOM, TOP, LOWER, UPPER, XS, YS, SCALE = range(11)

LANES = isa.LANES_32


@njit_inline
def _quantize(ctx: Context, v: F32, low: I32, high: I32, out: I32) -> I32:
    isa.round_f32_i32(ctx, v, out)
    isa.min_i32(ctx, out, high, out)
    return isa.max_i32(ctx, out, low, out)


@njit_op
def _encode(ctx: Context, v: F32, dim: int, p: np.ndarray, scale: F32, shifted: F32,
            out: F32) -> F32:
    """Spec §3 step 5, two float32 divisions (one for the 5th value), into `out`; `scale` and
    `shifted` are working registers. Like `_cells`, compiled once and inlined by LLVM
    (`njit_op`): copied into their eight call sites by numba (`njit_inline`), the two were
    typed again at each, 3 s more compile of the pillar kernels, for 4-7 % less time in the
    scheme-1 kernels and none in `stage1_quantize_first` (a millisecond a `dsp1` frame)."""
    isa.splat_f32(ctx, p[SCALE], scale)
    if dim == 4:
        return isa.fdiv_f32(ctx, v, scale, out)
    lo = (p[BACK], p[RIGHT], p[BOTTOM], p[LOWER])[dim]
    hi = (p[FRONT], p[LEFT], p[TOP], p[UPPER])[dim]
    span = isa.splat_f32(ctx, np.float32(hi - lo), out)
    isa.sub_f32(ctx, v, isa.splat_f32(ctx, lo, shifted), shifted)
    return isa.fdiv_f32(ctx, isa.fdiv_f32(ctx, shifted, span, out), scale, out)


@njit_op
def _cells(ctx: Context, xyz: tuple[F32, F32, F32], p: np.ndarray, grid: tuple[int, int],
           f: tuple[F32, F32, F32, F32], i: tuple[I32, I32, I32], m: tuple[Mask, Mask],
           cell: I32) -> I32:
    """The packed cell of each lane (coordinates `xyz`, a grid of `grid` = (x_len, y_len)
    cells), or -1, into `cell`; `f`, `i` and `m` are working registers. Helpers get only the
    registers they use, not the whole `_Registers` set: every array in a tuple argument
    costs a reference-count update on each call."""
    x, y, z = xyz
    x_len, y_len = grid
    f0, f1, f2, f3 = f
    idx, idy, limit = i
    skip, hit = m
    back, front = isa.splat_f32(ctx, p[BACK], f0), isa.splat_f32(ctx, p[FRONT], f1)
    isa.sub_f32(ctx, x, back, f2)
    isa.trunc_f32_i32(ctx, isa.fdiv_f32(ctx, f2, isa.splat_f32(ctx, p[XS], f3), f2), idx)
    # Unordered compares: a NaN coordinate counts as out of range.
    isa.or_b(ctx, isa.ule_f32(ctx, x, back, skip), isa.ule_f32(ctx, front, x, hit), skip)
    right, left = isa.splat_f32(ctx, p[RIGHT], f0), isa.splat_f32(ctx, p[LEFT], f1)
    isa.sub_f32(ctx, y, right, f2)
    isa.trunc_f32_i32(ctx, isa.fdiv_f32(ctx, f2, isa.splat_f32(ctx, p[YS], f3), f2), idy)
    isa.or_b(ctx, skip, isa.ule_f32(ctx, y, right, hit), skip)
    isa.or_b(ctx, skip, isa.ule_f32(ctx, left, y, hit), skip)
    bottom, top = isa.splat_f32(ctx, p[BOTTOM], f0), isa.splat_f32(ctx, p[TOP], f1)
    isa.or_b(ctx, skip, isa.ule_f32(ctx, z, bottom, hit), skip)
    isa.or_b(ctx, skip, isa.ule_f32(ctx, top, z, hit), skip)
    isa.or_b(ctx, skip, isa.le_i32(ctx, isa.splat_i32(ctx, x_len, limit), idx, hit), skip)
    isa.or_b(ctx, skip, isa.le_i32(ctx, isa.splat_i32(ctx, y_len, limit), idy, hit), skip)
    isa.add_i32(ctx, isa.sll_i32(ctx, idy, 16, idy), idx, cell)
    return isa.mov_t(ctx, isa.splat_i32(ctx, -1, limit), cell, skip, cell)


class _Registers(NamedTuple):
    """The vector registers a kernel works in: made once per call, so that the ops of its
    loop allocate nothing (`out=` of every op)."""

    gather: F32
    x: F32
    y: F32
    z: F32
    r: F32
    f0: F32
    f1: F32
    f2: F32
    f3: F32
    i0: I32
    i1: I32
    i2: I32
    i3: I32
    cell: I32
    m0: Mask
    m1: Mask


@njit_inline
def _registers() -> _Registers:
    f = np.empty((9, LANES), np.float32)
    i = np.empty((5, LANES), np.int32)
    m = np.empty((2, LANES), np.bool_)
    return _Registers(f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8],
                      i[0], i[1], i[2], i[3], i[4], m[0], m[1])


@njit_inline
def _gather_f32(ctx: Context, base: int, offsets: U32, gather: F32, out: F32) -> F32:
    return isa.gather_d(ctx, isa.gather_a_f32(ctx, base, offsets, gather), out)


@njit
def stage1_quantize_first(ctx: Context, src: int, dst: int, count: int, dims: int,
                          p: np.ndarray, x_len: int, y_len: int) -> None:
    """Scheme 2, stage 1: per point out cell, packed xyzr (and quantised t for 5 dims)."""
    words = 3 if dims == 5 else 2
    in_offsets = (np.arange(LANES) * 4 * dims).astype(np.uint32)
    out_offsets = (np.arange(LANES) * 4 * words).astype(np.uint32)
    low, high = isa.splat_i32(ctx, -128), isa.splat_i32(ctx, 127)
    regs = _registers()
    x, y, z, r = regs.x, regs.y, regs.z, regs.r
    g, f0, f1, f2 = regs.gather, regs.f0, regs.f1, regs.f2
    cf, ci, cm, cell = ((f0, f1, f2, regs.f3), (regs.i0, regs.i1, regs.i2),
                        (regs.m0, regs.m1), regs.cell)
    qx, qy, qz, qr = regs.i0, regs.i1, regs.i2, regs.i3
    for first in range(0, count, LANES):
        base = src + 4 * dims * first
        out = dst + 4 * words * first
        _gather_f32(ctx, base, in_offsets, g, x)
        _gather_f32(ctx, base + 4, in_offsets, g, y)
        _gather_f32(ctx, base + 8, in_offsets, g, z)
        _gather_f32(ctx, base + 12, in_offsets, g, r)
        cells = _cells(ctx, (x, y, z), p, (x_len, y_len), cf, ci, cm, cell)
        isa.scatter_i32(ctx, cells, out, out_offsets)
        _quantize(ctx, _encode(ctx, x, 0, p, f0, f1, f2), low, high, qx)
        _quantize(ctx, _encode(ctx, y, 1, p, f0, f1, f2), low, high, qy)
        _quantize(ctx, _encode(ctx, z, 2, p, f0, f1, f2), low, high, qz)
        _quantize(ctx, _encode(ctx, r, 3, p, f0, f1, f2), low, high, qr)
        isa.interleave_even_i16(ctx, isa.interleave_even_i8(ctx, qx, qy, qx),
                                isa.interleave_even_i8(ctx, qz, qr, qz), qx)
        isa.scatter_i32(ctx, qx, out + 4, out_offsets)
        if dims == 5:
            _gather_f32(ctx, base + 16, in_offsets, g, x)
            isa.scatter_i32(ctx, _quantize(ctx, _encode(ctx, x, 4, p, f0, f1, f2), low, high, qx),
                            out + 8, out_offsets)
    isa.scatter_w(ctx)


@njit
def stage1_cells_only(ctx: Context, src: int, dst: int, count: int, dims: int, p: np.ndarray,
                      x_len: int, y_len: int) -> None:
    """Scheme 1, stage 1: only the cell of every point."""
    in_offsets = (np.arange(LANES) * 4 * dims).astype(np.uint32)
    regs = _registers()
    x, y, z, g = regs.x, regs.y, regs.z, regs.gather
    cf, ci, cm, cell = ((regs.f0, regs.f1, regs.f2, regs.f3), (regs.i0, regs.i1, regs.i2),
                        (regs.m0, regs.m1), regs.cell)
    for first in range(0, count, LANES):
        base = src + 4 * dims * first
        _gather_f32(ctx, base, in_offsets, g, x)
        _gather_f32(ctx, base + 4, in_offsets, g, y)
        _gather_f32(ctx, base + 8, in_offsets, g, z)
        isa.storeu(ctx, _cells(ctx, (x, y, z), p, (x_len, y_len), cf, ci, cm, cell),
                   dst + 4 * first)


@njit
def stage2_transpose(ctx: Context, src: int, dst: int, count: int, stride: int,
                     dims: int) -> None:
    """Scheme 2, stage 2: `count` (a multiple of 64) int8 records of `dims` bytes at `src`
    into `dims` planes, `stride` bytes apart, at `dst`; two 32-lane byte gathers a vector."""
    offsets = (np.arange(isa.LANES_16) * dims).astype(np.uint16)
    low = np.empty(isa.LANES_16, np.int16)
    high = np.empty(isa.LANES_16, np.int16)
    out = np.empty(isa.LANES_8, np.int8)
    for c in range(dims):
        for first in range(0, count, 64):
            base = src + dims * first + c
            isa.gather_a_i8(ctx, base, offsets, low)
            isa.gather_a_i8(ctx, base + 32 * dims, offsets, high)
            isa.gather_d_hi_i8(ctx, isa.gather_d_lo_i8(ctx, low, out), high, out)
            isa.store(ctx, out, dst + c * stride + first)


@njit
def stage2_encode_transpose(ctx: Context, src: int, dst: int, count: int, stride: int,
                            dims: int, p: np.ndarray) -> None:
    """Scheme 1, stage 2: `count` float32 records of `dims` values into `dims` int8 planes,
    encoding and quantising on the way (NaN records, the empty slots, give 0)."""
    offsets = (np.arange(LANES) * 4 * dims).astype(np.uint32)
    low, high = isa.splat_i32(ctx, -128), isa.splat_i32(ctx, 127)
    regs = _registers()
    v, g, f0, f1, f2 = regs.x, regs.gather, regs.f0, regs.f1, regs.f2
    q = (regs.i0, regs.i1, regs.i2, regs.i3)
    halves = np.empty((2, isa.LANES_16), np.int16)
    packed = np.empty(isa.LANES_8, np.int8)
    for c in range(dims):
        for first in range(0, count, 64):
            for part in range(4):
                base = src + 4 * (dims * (first + LANES * part) + c)
                _gather_f32(ctx, base, offsets, g, v)
                _quantize(ctx, _encode(ctx, v, c, p, f0, f1, f2), low, high, q[part])
            isa.pack_i16_i8(ctx, isa.pack_i32_i16(ctx, q[0], q[1], halves[0]),
                            isa.pack_i32_i16(ctx, q[2], q[3], halves[1]), packed)
            isa.store(ctx, packed, dst + c * stride + first)


@njit
def fill_zero(ctx: Context, dst: int, nbytes: int) -> None:
    """`nbytes` (a multiple of 64) of zeros at `dst`, one aligned vector store per 64: the
    output of records no kernel computes (the pillars no point fell in)."""
    zero = isa.splat_i8(ctx, 0)
    for at in range(dst, dst + nbytes, isa.VECTOR_BYTES):
        isa.store(ctx, zero, at)
