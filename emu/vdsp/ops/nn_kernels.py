"""The DSP kernels of the NN operators, written with the vDSP ISA emulation.

Each kernel works on one tile already in TCM and writes its result to TCM; the operator
around it (`emu.vdsp.ops.nn`) moves tiles with iDMA. The arithmetic here *is* the operator's
definition: the NumPy references in `tests/vdsp/nn_reference.py` repeat it operation by
operation in float32, and the two must agree bit for bit.

Per-lane parameters (scales, zero points) come from a table in TCM laid out by element
position: entry i holds the parameter of flat element i modulo the period `P` = (axis size
x inner size), extended by 16 entries so an unaligned 16-lane load may start at any phase.

Softmax's exponential is computed as 2**(x * log2 e): the exponent t is clamped below at
-127, split into n = round(t) and f = t - n in [-0.5, 0.5], 2**f is a degree-6 polynomial
(Horner form, float32), and 2**n is built in the exponent bits (n = -127 gives 0: results
below 2**-126 flush to zero).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from emu.jit import njit
from emu.vdsp import isa
from emu.vdsp.isa import F32, Context

LANES = isa.LANES_32
VEC = isa.VECTOR_BYTES

LOG2E = np.float32(1.4426950408889634)
EXP_T_MIN = np.float32(-127.0)
# Taylor coefficients of 2**f = exp(f ln 2) up to f**6, rounded to float32.
EXP2_POLY = np.array([1.0, 0.6931471805599453, 0.2402265069591007, 0.05550410866482158,
                      0.009618129107628477, 0.0013333558146428443, 0.0001540353039338161],
                     dtype=np.float32)


class ParamTables(NamedTuple):
    """The per-lane parameter tables of a tile in TCM (see the module docstring): scales at
    `scale`, zero points at `zero_point`, their `period` and the tile's first element's
    `phase` in it."""

    scale: int
    zero_point: int
    period: int
    phase: int


@njit
def quantize_tile(ctx: Context, src: int, dst: int, count: int, tables: ParamTables,
                  divide: bool, unsigned: bool) -> None:
    """float32[count] at `src` -> int8/uint8[count] at `dst`:
    q = saturate(round_half_even(x / s + z)) when `divide` (SCALE), or with x * s (SHIFT,
    where s = 2**shift), s and z from the tables at lane phase `phase`."""
    table, zp_table, period, phase = tables
    x, s, z = np.empty(LANES, np.float32), np.empty(LANES, np.float32), np.empty(LANES, np.float32)
    q = np.empty((4, LANES), np.int32)
    low, high = np.empty(isa.LANES_16, np.int16), np.empty(isa.LANES_16, np.int16)
    packed = np.empty(isa.LANES_8, np.uint8)
    signed = packed.view(np.int8)
    for base in range(0, count, 4 * LANES):
        for part in range(4):
            isa.load_f32(ctx, src + 4 * (base + LANES * part), x)
            isa.loadu_f32(ctx, table + 4 * phase, s)
            isa.loadu_f32(ctx, zp_table + 4 * phase, z)
            if divide:
                isa.fdiv_f32(ctx, x, s, x)
            else:
                isa.mul_f32(ctx, x, s, x)
            isa.round_f32_i32(ctx, isa.add_f32(ctx, x, z, x), q[part])
            phase = (phase + LANES) % period
        isa.pack_i32_i16(ctx, q[0], q[1], low)
        isa.pack_i32_i16(ctx, q[2], q[3], high)
        if unsigned:
            isa.pack_i16_u8(ctx, low, high, packed)
        else:
            isa.pack_i16_i8(ctx, low, high, signed)
        left = count - base
        if left >= VEC:
            isa.store(ctx, packed, dst + base)
        else:
            isa.store_partial(ctx, packed, dst + base, left)


@njit
def dequantize_tile(ctx: Context, src: int, dst: int, count: int, tables: ParamTables,
                    unsigned: bool) -> None:
    """int8/uint8[count] at `src` -> float32[count] at `dst`: y = (float(q) - z) * s."""
    table, zp_table, period, phase = tables
    raw = np.empty(isa.LANES_8, np.int8)
    halves = np.empty((2, isa.LANES_16), np.int16)
    q = np.empty(LANES, np.int32)
    y, s, z = np.empty(LANES, np.float32), np.empty(LANES, np.float32), np.empty(LANES, np.float32)
    for base in range(0, count, 4 * LANES):
        isa.load_i8(ctx, src + base, raw)
        if unsigned:
            isa.unpack_lo_u8_i16(ctx, raw, halves[0])
            isa.unpack_hi_u8_i16(ctx, raw, halves[1])
        else:
            isa.unpack_lo_i8_i16(ctx, raw, halves[0])
            isa.unpack_hi_i8_i16(ctx, raw, halves[1])
        for part in range(4):
            half = halves[part // 2]
            if part % 2 == 0:
                isa.unpack_lo_i16_i32(ctx, half, q)
            else:
                isa.unpack_hi_i16_i32(ctx, half, q)
            isa.loadu_f32(ctx, table + 4 * phase, s)
            isa.loadu_f32(ctx, zp_table + 4 * phase, z)
            isa.mul_f32(ctx, isa.sub_f32(ctx, isa.cvt_i32_f32(ctx, q, y), z, y), s, y)
            phase = (phase + LANES) % period
            at = base + LANES * part
            left = count - at
            if left >= LANES:
                isa.store(ctx, y, dst + 4 * at)
            elif left > 0:
                isa.store_partial(ctx, y, dst + 4 * at, 4 * left)


@njit
def _exp_registers() -> np.ndarray:
    """The working registers of `exp_f32`: t, f, a coefficient, n and the exponent bits."""
    return np.empty((5, LANES), np.float32)


@njit
def exp_f32(ctx: Context, x: F32, out: F32, regs: np.ndarray) -> F32:
    """exp(x) for x <= 0 (and NaN) into `out`, as described in the module docstring; `regs`
    are working registers from `_exp_registers()`."""
    t, f, c = regs[0], regs[1], regs[2]
    n, bits = regs[3].view(np.int32), regs[4].view(np.int32)
    isa.mul_f32(ctx, x, isa.splat_f32(ctx, LOG2E, c), t)
    isa.max_f32(ctx, t, isa.splat_f32(ctx, EXP_T_MIN, c), t)
    isa.round_f32_i32(ctx, t, n)
    isa.sub_f32(ctx, t, isa.cvt_i32_f32(ctx, n, f), f)
    p = isa.splat_f32(ctx, EXP2_POLY[6], out)
    for k in range(5, -1, -1):
        isa.add_f32(ctx, isa.mul_f32(ctx, p, f, p), isa.splat_f32(ctx, EXP2_POLY[k], c), p)
    isa.sll_i32(ctx, isa.add_i32(ctx, n, isa.splat_i32(ctx, 127, bits), bits), 23, bits)
    return isa.mul_f32(ctx, p, bits.view(np.float32), out)


@njit
def softmax_rows_across_lanes(
    ctx: Context, src: int, dst: int, length: int, offsets: np.ndarray,
) -> None:
    """Softmax of 16 rows of `length` float32 at once, lane l holding row l (rows at
    `src` + offsets[l]); each lane runs along its row: max, then the sum of exponentials in
    row order, then each exponential times the reciprocal of the sum."""
    regs = _exp_registers()
    work = np.empty((5, LANES), np.float32)
    g, m, x, e, total = work[0], work[1], work[2], work[3], work[4]
    isa.gather_d(ctx, isa.gather_a_f32(ctx, src, offsets, g), m)
    for j in range(1, length):
        isa.max_f32(ctx, m, isa.gather_d(ctx, isa.gather_a_f32(ctx, src + 4 * j, offsets, g), x),
                    m)
    isa.splat_f32(ctx, np.float32(0.0), total)
    for j in range(length):
        isa.gather_d(ctx, isa.gather_a_f32(ctx, src + 4 * j, offsets, g), x)
        exp_f32(ctx, isa.sub_f32(ctx, x, m, x), e, regs)
        isa.add_f32(ctx, total, e, total)
        isa.scatter_f32(ctx, e, dst + 4 * j, offsets)
    r = isa.frecip_f32(ctx, total, m)
    for j in range(length):
        isa.gather_d(ctx, isa.gather_a_f32(ctx, dst + 4 * j, offsets, g), e)
        isa.scatter_f32(ctx, isa.mul_f32(ctx, e, r, e), dst + 4 * j, offsets)
    isa.scatter_w(ctx)


@njit
def softmax_columns(ctx: Context, src: int, dst: int, length: int) -> None:
    """Softmax down 16 columns at once: row j of the tile (64 bytes at src + 64 j) holds
    element j of 16 independent softmax vectors; same order of operations as above."""
    regs = _exp_registers()
    work = np.empty((4, LANES), np.float32)
    m, x, e, total = work[0], work[1], work[2], work[3]
    isa.load_f32(ctx, src, m)
    for j in range(1, length):
        isa.max_f32(ctx, m, isa.load_f32(ctx, src + VEC * j, x), m)
    isa.splat_f32(ctx, np.float32(0.0), total)
    for j in range(length):
        exp_f32(ctx, isa.sub_f32(ctx, isa.load_f32(ctx, src + VEC * j, x), m, x), e, regs)
        isa.add_f32(ctx, total, e, total)
        isa.store(ctx, e, dst + VEC * j)
    r = isa.frecip_f32(ctx, total, m)
    for j in range(length):
        isa.store(ctx, isa.mul_f32(ctx, isa.load_f32(ctx, dst + VEC * j, x), r, x),
                  dst + VEC * j)


@njit
def softmax_long_row(ctx: Context, src: int, dst: int, length: int) -> None:
    """Softmax of one long row with lanes along the row: lane l takes elements l, l+16, ...;
    lane maxima and lane sums (in element order) are combined by the ISA's reduction trees."""
    regs = _exp_registers()
    work = np.empty((6, LANES), np.float32)
    minus_inf, zero, m, x, e, total = work[0], work[1], work[2], work[3], work[4], work[5]
    isa.splat_f32(ctx, np.float32(-np.inf), minus_inf)
    isa.splat_f32(ctx, np.float32(0.0), zero)
    lane = np.arange(LANES).astype(np.int32)
    left_reg = np.empty(LANES, np.int32)
    valid = np.empty(LANES, np.bool_)
    m[:] = minus_inf
    for base in range(0, length, LANES):
        _valid_lanes(ctx, lane, length - base, left_reg, valid)
        isa.max_f32(ctx, m, isa.mov_t(ctx, isa.load_f32(ctx, src + 4 * base, x), minus_inf,
                                      valid, x), m)
    row_max = isa.splat_f32(ctx, isa.rmax_f32(ctx, m), m)
    total[:] = zero
    for base in range(0, length, LANES):
        _valid_lanes(ctx, lane, length - base, left_reg, valid)
        exp_f32(ctx, isa.sub_f32(ctx, isa.load_f32(ctx, src + 4 * base, x), row_max, x), e,
                regs)
        isa.add_f32(ctx, total, isa.mov_t(ctx, e, zero, valid, x), total)
        isa.store(ctx, e, dst + 4 * base)
    r = isa.frecip_f32(ctx, isa.splat_f32(ctx, isa.radd_f32(ctx, total), m), m)
    for base in range(0, length, LANES):
        isa.store(ctx, isa.mul_f32(ctx, isa.load_f32(ctx, dst + 4 * base, x), r, x),
                  dst + 4 * base)


@njit
def _valid_lanes(ctx: Context, lane: np.ndarray, left: int, left_reg: np.ndarray,
                 out: np.ndarray) -> np.ndarray:
    # A lane-index compare against the count left (one compare instruction).
    return isa.lt_i32(ctx, lane, isa.splat_i32(ctx, left, left_reg), out)
