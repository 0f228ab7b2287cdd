"""Kernels of the warp and remap CV operators (`emu.vdsp.ops.cv_warp`).

One kernel, `warp_tile`, computes a tile of warp_affine, warp_perspective or remap: for each
group of 16 output pixels it forms the float32 source coordinates (from per-column tables and
per-row constants, or from the maps in TCM), turns them into tap offsets into the source
piece held in TCM, gathers the taps with the 8-bit gather, interpolates in float32 and packs
the rounded results into bytes (grey: vector stores; 3 channels: byte scatters into the
interleaved rows). The coordinate and interpolation arithmetic is described in
`emu.vdsp.ops.cv_warp`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from emu.jit import njit
from emu.vdsp import isa

KIND_AFFINE, KIND_PERSPECTIVE, KIND_REMAP = 0, 1, 2

# Indices into the kernel's scalar parameter vector (int64).
P_ROWS, P_COLS, P_OUT_Y0, P_OUT_X0, P_IN_PITCH, P_OUT_PITCH = 0, 1, 2, 3, 4, 5
P_KIND, P_LINEAR, P_TABLE, P_TABLE_STRIDE, P_NSIMD = 6, 7, 8, 9, 10
P_MAP, P_MAP_PITCH, P_SRC_X0, P_SRC_Y0, P_PIECE_ROWS, P_MERGE, P_PART = 11, 12, 13, 14, 15, 16, 17
P_LO_X, P_HI_X, P_LO_Y, P_HI_Y, P_IOTA, P_CONSTANT = 18, 19, 20, 21, 22, 23
P_SRC_W, P_SRC_H, P_CN = 24, 25, 26
N_PARAMS = 27


class BilinearRegs(NamedTuple):
    """The registers `_interpolate` works in: the gather's address register, the four taps'
    gathered pixels (uint16 rows), an int32 for widening, the float32 taps p00 .. p11 and
    the two row values v0, v1, the two int32 halves of the rounded result."""

    greg: isa.U16
    pix: npt.NDArray[np.uint16]
    wide: isa.I32
    p00: isa.F32
    p01: isa.F32
    p10: isa.F32
    p11: isa.F32
    v0: isa.F32
    v1: isa.F32
    rnd: tuple[isa.I32, isa.I32]


class BorderRegs(NamedTuple):
    """The registers `_non_finite` works in: constants (the last source column and row
    `lim`, -2, INT_MIN, 0.0, 1, 0) and the scratch `t`, `m`, `n`."""

    lim: npt.NDArray[np.int32]
    low: isa.I32
    intmin: isa.I32
    fzero: isa.F32
    one: isa.I32
    zero: isa.I32
    t: isa.I32
    m: isa.Mask
    n: isa.Mask


@njit
def _fused(ctx: isa.Context, table: int, x: int, stride: int, c: isa.F32, xs: isa.F32,
           ms: isa.F32, out: isa.F32) -> None:
    """out = fl(M * x + c), rounded once: the table holds the column numbers x as float32
    at column x and M splatted one table further; one fused multiply-add."""
    isa.load_f32(ctx, table + 4 * x, xs)
    isa.load_f32(ctx, table + stride + 4 * x, ms)
    isa.fma_f32(ctx, c, ms, xs, out)


@njit
def _origins(ctx: isa.Context, linear: bool, sx: isa.F32, sy: isa.F32, ix: isa.I32,
             iy: isa.I32) -> None:
    """The tap origins of coordinates: floor for linear, else round half to even (NaN 0,
    saturating)."""
    if linear:
        isa.floor_f32_i32(ctx, sx, ix)
        isa.floor_f32_i32(ctx, sy, iy)
    else:
        isa.round_f32_i32(ctx, sx, ix)
        isa.round_f32_i32(ctx, sy, iy)


@njit
def _interpolate(ctx: isa.Context, src: int, o16: npt.NDArray[np.int16],
                 alpha: tuple[isa.F32, isa.F32], beta: tuple[isa.F32, isa.F32],
                 regs: BilinearRegs, out: isa.I16) -> None:
    """Bilinear values of 32 lanes whose four taps are at offsets o16[0..3] from `src`:
    gathered, widened to float32 and interpolated as OpenCV orders it (v0 = p00 + a (p01 -
    p00), v1 likewise, v0 + b (v1 - v0)), each product and sum rounded, then rounded to the
    nearest integer (ties to even) and packed with saturation into `out`."""
    greg, pix, wide, p00, p01, p10, p11, v0, v1, rnd = regs
    for t in range(4):
        isa.gather_a_u8(ctx, src, isa.as_u16(o16[t]), greg)
        isa.gather_d(ctx, greg, pix[t])
    for q in range(2):
        for t, tap in enumerate((p00, p01, p10, p11)):
            if q == 0:
                isa.unpack_lo_u16_i32(ctx, pix[t], wide)
            else:
                isa.unpack_hi_u16_i32(ctx, pix[t], wide)
            isa.cvt_i32_f32(ctx, wide, tap)
        isa.sub_f32(ctx, p01, p00, p01)
        isa.fma_f32(ctx, p00, alpha[q], p01, v0)
        isa.sub_f32(ctx, p11, p10, p11)
        isa.fma_f32(ctx, p10, alpha[q], p11, v1)
        isa.sub_f32(ctx, v1, v0, v1)
        isa.fma_f32(ctx, v0, beta[q], v1, v0)
        isa.round_f32_i32(ctx, v0, rnd[q])
    isa.pack_i32_i16(ctx, rnd[0], rnd[1], out)


@njit
def _non_finite(ctx: isa.Context, simd: bool, ix: isa.I32, iy: isa.I32, alpha: isa.F32,
                beta: isa.F32, regs: BorderRegs) -> None:
    """Constant border, linear: OpenCV stores the border value without interpolating where
    all four taps are outside, per pixel in its scalar tail and per block of 16 pixels in its
    SIMD loop (where only all of them outside counts). That differs from interpolating four
    border taps only when a coordinate converted to INT_MIN (NaN, +-inf, out of range) makes
    a weight NaN or infinite; such weights are zeroed where OpenCV skips."""
    lim, low, intmin, fzero, one, zero, t, m, n = regs
    isa.min_i32(ctx, ix, iy, t)
    if isa.rmin_i32(ctx, t) != -2147483648:
        return
    if simd:
        isa.lt_i32(ctx, low, ix, m)  # ix >= -1
        isa.le_i32(ctx, ix, lim[0], n)  # ix <= width - 1
        isa.and_b(ctx, m, n, m)
        isa.lt_i32(ctx, low, iy, n)
        isa.and_b(ctx, m, n, m)
        isa.le_i32(ctx, iy, lim[1], n)
        isa.and_b(ctx, m, n, m)  # some tap inside
        isa.mov_t(ctx, one, zero, m, t)
        if isa.rmax_i32(ctx, t) != 0:
            return
        isa.eq_i32(ctx, t, t, m)  # every lane
    else:
        isa.eq_i32(ctx, ix, intmin, m)
        isa.eq_i32(ctx, iy, intmin, n)
        isa.or_b(ctx, m, n, m)
    isa.mov_t(ctx, fzero, alpha, m, alpha)
    isa.mov_t(ctx, fzero, beta, m, beta)


@njit
def warp_tile(ctx: isa.Context, src: int, dst: int, p: npt.NDArray[np.int64],
              m: npt.NDArray[np.float32]) -> None:
    """One output tile (see the module docstring); `p` holds the P_* parameters, `m` the
    float32 inverse map, row-major 3x3 (affine: its last row 0, 0, 1; unused for remap)."""
    rows, cols = p[P_ROWS], p[P_COLS]
    kind, linear = p[P_KIND], p[P_LINEAR] != 0
    table, tstride, nsimd = p[P_TABLE], p[P_TABLE_STRIDE], p[P_NSIMD]
    merge = p[P_MERGE] != 0
    constant = p[P_CONSTANT] != 0
    f = np.empty((16, isa.LANES_32), np.float32)  # float registers, by role below
    hi, lo = f[0], f[1]  # a column table's x and M
    sx, sy, sw, rx, ry = f[6], f[7], f[8], f[9], f[10]
    alpha = (f[12], f[13])
    beta = (f[14], f[15])
    g = np.empty((6, isa.LANES_32), np.float32)
    p00, p01, p10, p11, v0, v1 = g[0], g[1], g[2], g[3], g[4], g[5]
    ty = np.empty((3, isa.LANES_32), np.float32)  # y * M1, y * M4, y * M7 (tail columns)
    consts = np.empty((6, isa.LANES_32), np.float32)
    for k in range(6):
        isa.splat_f32(ctx, m[(k // 2) * 3 + 2] if k % 2 else m[(k // 2) * 3 + 1], consts[k])
    iv = np.empty((13, isa.LANES_32), np.int32)
    ix, iy, rel, t32, iota = iv[0], iv[1], iv[2], iv[3], iv[4]
    off = (iv[5], iv[6])
    d1 = (iv[7], iv[8])
    dp = (iv[9], iv[10])
    part, t32b = iv[11], iv[12]
    lox = isa.splat_i32(ctx, p[P_LO_X])
    hix = isa.splat_i32(ctx, p[P_HI_X])
    loy = isa.splat_i32(ctx, p[P_LO_Y])
    hiy = isa.splat_i32(ctx, p[P_HI_Y])
    sx0 = isa.splat_i32(ctx, p[P_SRC_X0])
    sy0 = isa.splat_i32(ctx, p[P_SRC_Y0])
    pitch = isa.splat_i32(ctx, p[P_IN_PITCH])
    prows = isa.splat_i32(ctx, p[P_PIECE_ROWS])
    minus1 = isa.splat_i32(ctx, -1)
    zero = isa.splat_i32(ctx, 0)
    one = isa.splat_i32(ctx, 1)
    bias = isa.splat_i32(ctx, 32768)
    intmin = isa.splat_i32(ctx, -2147483648)
    big = isa.splat_f32(ctx, 2147483648.0)
    fzero = isa.splat_f32(ctx, 0.0)
    lim = np.empty((2, isa.LANES_32), np.int32)  # the last source column and row
    isa.splat_i32(ctx, p[P_SRC_W] - 1, lim[0])
    isa.splat_i32(ctx, p[P_SRC_H] - 1, lim[1])
    low = isa.splat_i32(ctx, -2)
    bias16 = isa.splat_i16(ctx, -32768)
    one16 = isa.splat_i16(ctx, 1)
    cn = p[P_CN]
    cnv = isa.splat_i32(ctx, cn)
    cn16 = isa.splat_i16(ctx, cn)
    isa.load_i32(ctx, p[P_IOTA], iota)
    isa.mul_i32(ctx, iota, cnv, iota)  # lane k's first byte, k * channels
    lanes = np.empty(isa.LANES_16, np.int16)  # scatter offsets of 32 pixels' bytes of one channel
    isa.add_i32(ctx, iota, isa.splat_i32(ctx, 16 * cn), t32)
    isa.pack_i32_i16(ctx, iota, t32, lanes)
    lanes3 = isa.as_u16(lanes)
    inside = np.empty(isa.LANES_32, np.bool_)
    below = np.empty(isa.LANES_32, np.bool_)
    o16 = np.empty((4, isa.LANES_16), np.int16)
    d16 = np.empty((2, isa.LANES_16), np.int16)
    greg = np.empty(isa.LANES_16, np.uint16)
    pix = np.empty((4, isa.LANES_16), np.uint16)
    wide = np.empty(isa.LANES_32, np.int32)
    rnd = (np.empty(isa.LANES_32, np.int32), np.empty(isa.LANES_32, np.int32))
    res = (np.empty(isa.LANES_16, np.int16), np.empty(isa.LANES_16, np.int16))
    out = np.empty(isa.LANES_8, np.uint8)
    rowc = np.empty((3, isa.LANES_32), np.float32)
    ycoord = np.empty(isa.LANES_32, np.float32)
    bilinear = BilinearRegs(greg, pix, wide, p00, p01, p10, p11, v0, v1, rnd)
    border = BorderRegs(lim, low, intmin, fzero, one, zero, t32b, inside, below)
    for r in range(rows):
        y = p[P_OUT_Y0] + r
        if kind != KIND_REMAP:
            isa.splat_f32(ctx, np.float32(y), ycoord)
            for k in range(3 if kind == KIND_PERSPECTIVE else 2):
                isa.mul_f32(ctx, ycoord, consts[2 * k], ty[k])
                isa.add_f32(ctx, ty[k], consts[2 * k + 1], rowc[k])
        for x in range(0, cols, 64):
            for h in range(2):
                for q in range(2):
                    xx = x + 32 * h + 16 * q
                    col = p[P_OUT_X0] + xx
                    if kind == KIND_REMAP:
                        at = p[P_MAP] + r * p[P_MAP_PITCH] + 4 * xx
                        isa.load_f32(ctx, at, sx)
                        isa.load_f32(ctx, at + rows * p[P_MAP_PITCH], sy)
                    elif col < nsimd:
                        _fused(ctx, table, col, tstride, rowc[0], hi, lo, sx)
                        _fused(ctx, table + 2 * tstride, col, tstride, rowc[1], hi, lo, sy)
                        if kind == KIND_PERSPECTIVE:
                            _fused(ctx, table + 4 * tstride, col, tstride, rowc[2], hi, lo, sw)
                    else:  # OpenCV's scalar tail: fma(x, m0, fl(y m1)), then + m2
                        _fused(ctx, table, col, tstride, ty[0], hi, lo, sx)
                        isa.add_f32(ctx, sx, consts[1], sx)
                        _fused(ctx, table + 2 * tstride, col, tstride, ty[1], hi, lo, sy)
                        isa.add_f32(ctx, sy, consts[3], sy)
                        if kind == KIND_PERSPECTIVE:
                            _fused(ctx, table + 4 * tstride, col, tstride, ty[2], hi, lo, sw)
                            isa.add_f32(ctx, sw, consts[5], sw)
                    if kind == KIND_PERSPECTIVE:
                        isa.fdiv_f32(ctx, sx, sw, sx)
                        isa.fdiv_f32(ctx, sy, sw, sy)
                    _origins(ctx, linear, sx, sy, ix, iy)
                    # As x86's conversions (OpenCV's reference): NaN and >= 2**31 give INT_MIN.
                    isa.lt_f32(ctx, sx, big, inside)
                    isa.mov_t(ctx, ix, intmin, inside, ix)
                    isa.lt_f32(ctx, sy, big, inside)
                    isa.mov_t(ctx, iy, intmin, inside, iy)
                    if linear:
                        isa.cvt_i32_f32(ctx, ix, rx)
                        isa.cvt_i32_f32(ctx, iy, ry)
                        isa.sub_f32(ctx, sx, rx, alpha[q])
                        isa.sub_f32(ctx, sy, ry, beta[q])
                        if constant:
                            _non_finite(ctx, col < nsimd, ix, iy, alpha[q], beta[q], border)
                    isa.max_i32(ctx, ix, lox, ix)
                    isa.min_i32(ctx, ix, hix, ix)
                    isa.max_i32(ctx, iy, loy, iy)
                    isa.min_i32(ctx, iy, hiy, iy)
                    isa.sub_i32(ctx, ix, sx0, rel)
                    if cn > 1:
                        isa.mul_i32(ctx, rel, cnv, rel)
                    isa.sub_i32(ctx, iy, sy0, t32)
                    isa.mul_i32(ctx, t32, pitch, off[q])
                    isa.add_i32(ctx, off[q], rel, off[q])
                    if merge:
                        # Lanes whose source row is not in this piece keep the output the
                        # previous pieces left: every tap reads that output byte.
                        isa.lt_i32(ctx, minus1, t32, inside)
                        isa.lt_i32(ctx, t32, prows, below)
                        isa.and_b(ctx, inside, below, inside)
                        isa.splat_i32(ctx, p[P_PART] + r * p[P_OUT_PITCH] + cn * xx, part)
                        isa.add_i32(ctx, part, iota, part)
                        isa.mov_t(ctx, off[q], part, inside, off[q])
                        isa.mov_t(ctx, cnv, zero, inside, d1[q])
                        isa.mov_t(ctx, pitch, zero, inside, dp[q])
                # Offsets of 32 lanes as uint16 (0..65535): biased into int16, packed, unbiased.
                for q in range(2):
                    isa.sub_i32(ctx, off[q], bias, off[q])
                isa.pack_i32_i16(ctx, off[0], off[1], o16[0])
                isa.add_i16(ctx, o16[0], bias16, o16[0])
                if linear:
                    if merge:
                        isa.pack_i32_i16(ctx, d1[0], d1[1], d16[0])
                        isa.pack_i32_i16(ctx, dp[0], dp[1], d16[1])
                        isa.add_i16(ctx, o16[0], d16[0], o16[1])
                        isa.add_i16(ctx, o16[0], d16[1], o16[2])
                        isa.add_i16(ctx, o16[2], d16[0], o16[3])
                    else:
                        isa.splat_i16(ctx, p[P_IN_PITCH] - 65536 if p[P_IN_PITCH] > 32767
                                      else p[P_IN_PITCH], d16[1])
                        isa.add_i16(ctx, o16[0], cn16, o16[1])
                        isa.add_i16(ctx, o16[0], d16[1], o16[2])
                        isa.add_i16(ctx, o16[2], cn16, o16[3])
                for c in range(cn):
                    if c > 0:  # the next channel's byte of every tap
                        for t in range(4 if linear else 1):
                            isa.add_i16(ctx, o16[t], one16, o16[t])
                    at = dst + r * p[P_OUT_PITCH] + cn * (x + 32 * h) + c
                    if linear:
                        _interpolate(ctx, src, o16, alpha, beta, bilinear, res[h])
                        if cn > 1:
                            isa.scatter_i8(ctx, res[h], at, lanes3)
                    else:
                        isa.gather_a_u8(ctx, src, isa.as_u16(o16[0]), greg)
                        isa.gather_d(ctx, greg, pix[h])
                        if cn > 1:
                            isa.scatter_i8(ctx, isa.as_i16(pix[h]), at, lanes3)
            if cn == 1:
                if linear:
                    isa.pack_i16_u8(ctx, res[0], res[1], out)
                else:  # the gathered bytes are 0..255 in 16-bit lanes: pack them as they are
                    isa.pack_i16_u8(ctx, isa.as_i16(pix[0]), isa.as_i16(pix[1]), out)
                isa.store(ctx, out, dst + r * p[P_OUT_PITCH] + x)



@njit
def map_bounds(ctx: isa.Context, at: int, vectors: int, linear: bool,
               bounds: npt.NDArray[np.int32]) -> None:
    """The planner's pass over a piece of remap's maps: `vectors` vectors of x values at
    `at`, as many of y values after them, each turned into tap origins as the tile kernel
    turns them (`_origins`) and folded into the running lane-wise bounds: `bounds` rows
    min x, max x, min y, max y."""
    f = np.empty((2, isa.LANES_32), np.float32)
    sx, sy = f[0], f[1]
    i = np.empty((2, isa.LANES_32), np.int32)
    ix, iy = i[0], i[1]
    for v in range(vectors):
        isa.load_f32(ctx, at + isa.VECTOR_BYTES * v, sx)
        isa.load_f32(ctx, at + isa.VECTOR_BYTES * (vectors + v), sy)
        _origins(ctx, linear, sx, sy, ix, iy)
        isa.min_i32(ctx, bounds[0], ix, bounds[0])
        isa.max_i32(ctx, bounds[1], ix, bounds[1])
        isa.min_i32(ctx, bounds[2], iy, bounds[2])
        isa.max_i32(ctx, bounds[3], iy, bounds[3])
