"""Kernels of the linear-filter CV operators (`emu.vdsp.ops.cv_filters`).

Two engines cover the five operators:

- `sep_int_tile`, an integer separable filter: a vertical pass of uint8 rows into wrapping
  int16 sums (with an offset that keeps them in range), then a horizontal pass of the
  int16 sums into int32, then one of the `FIN_*` finishes (rounding shift to uint8,
  saturation to int16, or the box filter's divisions);
- `float_tile`, float32 arithmetic: the source tile is converted to float32 once, then
  either a 2-D filter (every non-zero tap, row-major) or a horizontal then a vertical 1-D
  pass, rounded half to even and saturated.

Source rows sit `in_pitch` bytes apart; output pixel x of a tile row takes source columns
x .. x + taps - 1 (the tile's source rectangle starts `anchor` columns left of the output).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from emu.jit import njit
from emu.vdsp import isa

FIN_SHIFT_U8 = 0
"""Rounding shift right by `shift`, saturate to uint8."""
FIN_SAT_I16 = 1
"""Rounding shift right by `shift` (none for 0), saturate to int16."""
FIN_FLOOR_DIV_U8 = 2
"""floor(sum * scale) in float32 (scale slightly above 1/area, exact for sums < 2**17),
saturate to uint8."""
FIN_ROUND_MUL_U8 = 3
"""sum * scale in float32, rounded half to even, saturate to uint8."""


class FilterTile(NamedTuple):
    """Where one tile of a filter lies in TCM: its source at `src` (`src_rows` rows of
    `src_width` values, `in_pitch` bytes apart), its output at `dst` (`rows` rows of `width`
    values, `out_pitch` bytes apart), the engine's scratch rows at `scratch` (`scratch_pitch`
    bytes apart); values are pixels times `cn` interleaved channels."""

    src: int
    dst: int
    scratch: int
    rows: int
    width: int
    src_rows: int
    src_width: int
    in_pitch: int
    out_pitch: int
    scratch_pitch: int
    cn: int


class IntFilter(NamedTuple):
    """The integer engine's filter: horizontal and vertical taps, the offsets that keep the
    vertical (`voff`) and horizontal (`hoff`) sums in range, the finish (`FIN_*`) with its
    `shift` or `scale`."""

    kx: npt.NDArray[np.int16]
    ky: npt.NDArray[np.int16]
    voff: int
    hoff: int
    finish: int
    shift: int
    scale: float


class FloatFilter(NamedTuple):
    """The float32 engine's filter: 2-D taps `taps` at rows `tap_dy` and values `tap_dx`,
    or (`separable`) the horizontal and vertical taps; the `delta` added; int16 output
    (`out16`) or uint8."""

    taps: npt.NDArray[np.float32]
    tap_dy: npt.NDArray[np.int64]
    tap_dx: npt.NDArray[np.int64]
    kx: npt.NDArray[np.float32]
    ky: npt.NDArray[np.float32]
    delta: float
    separable: bool
    out16: bool


class FinishRegs(NamedTuple):
    """The registers `_finish_float` rounds, packs and stores through: four int32, two
    int16 and one uint8."""

    word: npt.NDArray[np.int32]
    h0: npt.NDArray[np.int16]
    h1: npt.NDArray[np.int16]
    out: npt.NDArray[np.uint8]


@njit
def sep_int_tile(ctx: isa.Context, tile: FilterTile, f: IntFilter) -> None:
    """Integer separable filter of one tile: `rows` output rows of `width` values (pixels
    times `cn` interleaved channels; horizontal taps are `cn` values apart).

    Vertical pass: mid[r][x] = voff + sum_j ky[j] * src[r + j][x] in wrapping int16, for
    the `src_width` source columns, stored as int16 rows in the scratch (`mid`, rows
    `mid_pitch` bytes apart). Horizontal pass: hoff + sum_i kx[i] * mid[r][x + i] in int32,
    then `finish`.
    """
    src, dst, mid, rows, width, _, src_width, in_pitch, out_pitch, mid_pitch, cn = tile
    kx, ky, voff, hoff, finish, shift, scale = f
    raw = np.empty(isa.LANES_8, np.uint8)
    lo = np.empty(isa.LANES_16, np.int16)
    hi = np.empty(isa.LANES_16, np.int16)
    vin = np.empty(isa.LANES_16, np.int16)
    h0 = np.empty(isa.LANES_16, np.int16)
    h1 = np.empty(isa.LANES_16, np.int16)
    out = np.empty(isa.LANES_8, np.uint8)
    acc = np.empty((4, isa.LANES_32), np.int32)
    fl = np.empty(isa.LANES_32, np.float32)
    nky = ky.size
    nkx = kx.size
    kyv = np.empty((nky, isa.LANES_16), np.int16)
    kxv = np.empty((nkx, isa.LANES_16), np.int16)
    for j in range(nky):
        isa.splat_i16(ctx, ky[j], kyv[j])
    for i in range(nkx):
        isa.splat_i16(ctx, kx[i], kxv[i])
    scale_v = isa.splat_f32(ctx, scale)
    for r in range(rows):
        row = mid + r * mid_pitch
        for x in range(0, src_width, isa.VECTOR_BYTES):
            isa.splat_i16(ctx, voff, lo)
            isa.splat_i16(ctx, voff, hi)
            for j in range(nky):
                isa.load_u8(ctx, src + (r + j) * in_pitch + x, raw)
                isa.mula_lo_u8_i16(ctx, lo, raw, kyv[j], lo)
                isa.mula_hi_u8_i16(ctx, hi, raw, kyv[j], hi)
            isa.store(ctx, lo, row + 2 * x)
            isa.store(ctx, hi, row + 2 * x + 64)
        for x in range(0, width, isa.VECTOR_BYTES):
            for q in range(4):
                isa.splat_i32(ctx, hoff, acc[q])
            for i in range(nkx):
                at = row + 2 * (x + i * cn)
                isa.loadu_i16(ctx, at, vin)
                isa.mula_lo_i16_i32(ctx, acc[0], vin, kxv[i], acc[0])
                isa.mula_hi_i16_i32(ctx, acc[1], vin, kxv[i], acc[1])
                isa.loadu_i16(ctx, at + 64, vin)
                isa.mula_lo_i16_i32(ctx, acc[2], vin, kxv[i], acc[2])
                isa.mula_hi_i16_i32(ctx, acc[3], vin, kxv[i], acc[3])
            for q in range(4):
                if finish >= FIN_FLOOR_DIV_U8:  # the float finishes
                    isa.cvt_i32_f32(ctx, acc[q], fl)
                    isa.mul_f32(ctx, fl, scale_v, fl)
                    if finish == FIN_FLOOR_DIV_U8:
                        isa.floor_f32_i32(ctx, fl, acc[q])
                    else:
                        isa.round_f32_i32(ctx, fl, acc[q])
                elif shift > 0:
                    isa.srar_i32(ctx, acc[q], shift, acc[q])
            isa.pack_i32_i16(ctx, acc[0], acc[1], h0)
            isa.pack_i32_i16(ctx, acc[2], acc[3], h1)
            if finish == FIN_SAT_I16:
                isa.store(ctx, h0, dst + r * out_pitch + 2 * x)
                if x + 32 < width:
                    isa.store(ctx, h1, dst + r * out_pitch + 2 * x + 64)
            else:
                isa.pack_i16_u8(ctx, h0, h1, out)
                isa.store(ctx, out, dst + r * out_pitch + x)


@njit
def _to_float_rows(ctx: isa.Context, src: int, fbuf: int, rows: int, src_width: int,
                   in_pitch: int, f_pitch: int) -> None:
    """uint8 source rows into float32 rows `f_pitch` bytes apart (whole vectors)."""
    raw = np.empty(isa.LANES_8, np.uint8)
    half = np.empty(isa.LANES_16, np.int16)
    word = np.empty(isa.LANES_32, np.int32)
    fl = np.empty(isa.LANES_32, np.float32)
    for r in range(rows):
        for x in range(0, src_width, isa.VECTOR_BYTES):
            isa.load_u8(ctx, src + r * in_pitch + x, raw)
            at = fbuf + r * f_pitch + 4 * x
            for h in range(2):
                if h == 0:
                    isa.unpack_lo_u8_i16(ctx, raw, half)
                else:
                    isa.unpack_hi_u8_i16(ctx, raw, half)
                isa.unpack_lo_i16_i32(ctx, half, word)
                isa.cvt_i32_f32(ctx, word, fl)
                isa.store(ctx, fl, at + 128 * h)
                isa.unpack_hi_i16_i32(ctx, half, word)
                isa.cvt_i32_f32(ctx, word, fl)
                isa.store(ctx, fl, at + 128 * h + 64)


@njit
def _finish_float(ctx: isa.Context, acc: npt.NDArray[np.float32], regs: FinishRegs, dst: int,
                  x: int, width: int, out16: bool) -> None:
    """Round the four float32 accumulators half to even, saturate and store 64 pixels."""
    word, h0, h1, out = regs
    for q in range(4):
        isa.round_f32_i32(ctx, acc[q], word[q])
    isa.pack_i32_i16(ctx, word[0], word[1], h0)
    isa.pack_i32_i16(ctx, word[2], word[3], h1)
    if out16:
        isa.store(ctx, h0, dst + 2 * x)
        if x + 32 < width:
            isa.store(ctx, h1, dst + 2 * x + 64)
    else:
        isa.pack_i16_u8(ctx, h0, h1, out)
        isa.store(ctx, out, dst + x)


@njit
def float_tile(ctx: isa.Context, tile: FilterTile, f: FloatFilter) -> None:
    """Float32 filter of one tile: `rows` output rows of `width` values (pixels times `cn`
    interleaved channels; `tap_dx` is in values, separable taps are `cn` values apart). The
    source is first copied as float32 rows into the scratch (`fbuf`, rows `f_pitch` bytes
    apart).

    2-D (`separable` false): delta + sum over the taps t (in order) of taps[t] *
    src[r + tap_dy[t]][x + tap_dx[t]], accumulated in float32 (product rounded, then sum).
    Separable: the rows first, R[y][x] = sum_i kx[i] * src[y][x + i] (from 0, in order),
    written over the float copy of the row, then delta + sum_j ky[j] * R[r + j][x].
    """
    src, dst, fbuf, rows, width, src_rows, src_width, in_pitch, out_pitch, f_pitch, cn = tile
    taps, tap_dy, tap_dx, kx, ky, delta, separable, out16 = f
    _to_float_rows(ctx, src, fbuf, src_rows, src_width, in_pitch, f_pitch)
    acc = np.empty((4, isa.LANES_32), np.float32)
    word = np.empty((4, isa.LANES_32), np.int32)
    vin = np.empty(isa.LANES_32, np.float32)
    h0 = np.empty(isa.LANES_16, np.int16)
    h1 = np.empty(isa.LANES_16, np.int16)
    out = np.empty(isa.LANES_8, np.uint8)
    regs = FinishRegs(word, h0, h1, out)
    if separable:
        kxv = np.empty((kx.size, isa.LANES_32), np.float32)
        kyv = np.empty((ky.size, isa.LANES_32), np.float32)
        for i in range(kx.size):
            isa.splat_f32(ctx, kx[i], kxv[i])
        for j in range(ky.size):
            isa.splat_f32(ctx, ky[j], kyv[j])
        for y in range(src_rows):
            row = fbuf + y * f_pitch
            for x in range(0, width, isa.VECTOR_BYTES):
                for q in range(4):
                    isa.splat_f32(ctx, 0.0, acc[q])
                for i in range(kx.size):
                    for q in range(4):
                        isa.loadu_f32(ctx, row + 4 * (x + i * cn) + 64 * q, vin)
                        isa.fma_f32(ctx, acc[q], vin, kxv[i], acc[q])
                for q in range(4):
                    isa.store(ctx, acc[q], row + 4 * x + 64 * q)
        for r in range(rows):
            for x in range(0, width, isa.VECTOR_BYTES):
                for q in range(4):
                    isa.splat_f32(ctx, delta, acc[q])
                for j in range(ky.size):
                    for q in range(4):
                        isa.load_f32(ctx, fbuf + (r + j) * f_pitch + 4 * x + 64 * q, vin)
                        isa.fma_f32(ctx, acc[q], vin, kyv[j], acc[q])
                _finish_float(ctx, acc, regs, dst + r * out_pitch, x, width, out16)
        return
    tv = np.empty((taps.size, isa.LANES_32), np.float32)
    for t in range(taps.size):
        isa.splat_f32(ctx, taps[t], tv[t])
    for r in range(rows):
        for x in range(0, width, isa.VECTOR_BYTES):
            for q in range(4):
                isa.splat_f32(ctx, delta, acc[q])
            for t in range(taps.size):
                at = fbuf + (r + tap_dy[t]) * f_pitch + 4 * (x + tap_dx[t])
                for q in range(4):
                    isa.loadu_f32(ctx, at + 64 * q, vin)
                    isa.fma_f32(ctx, acc[q], vin, tv[t], acc[q])
            _finish_float(ctx, acc, regs, dst + r * out_pitch, x, width, out16)
