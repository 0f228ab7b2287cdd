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

import numpy as np

from emu.jit import njit
from emu.vdsp import isa
from emu.vdsp.isa import F32, Context

LANES = 16
VEC = isa.VECTOR_BYTES

LOG2E = np.float32(1.4426950408889634)
EXP_T_MIN = np.float32(-127.0)
# Taylor coefficients of 2**f = exp(f ln 2) up to f**6, rounded to float32.
EXP2_POLY = np.array([1.0, 0.6931471805599453, 0.2402265069591007, 0.05550410866482158,
                      0.009618129107628477, 0.0013333558146428443, 0.0001540353039338161],
                     dtype=np.float32)


@njit
def quantize_tile(
    ctx: Context, src: int, dst: int, count: int, table: int, zp_table: int, period: int,
    phase: int, divide: bool, unsigned: bool,
) -> None:
    """float32[count] at `src` -> int8/uint8[count] at `dst`:
    q = saturate(round_half_even(x / s + z)) when `divide` (SCALE), or with x * s (SHIFT,
    where s = 2**shift), s and z from the tables at lane phase `phase`."""
    for base in range(0, count, 4 * LANES):
        q = []
        for part in range(4):
            x = isa.load_f32(ctx, src + 4 * (base + LANES * part))
            s = isa.loadu_f32(ctx, table + 4 * phase)
            z = isa.loadu_f32(ctx, zp_table + 4 * phase)
            v = isa.fdiv_f32(ctx, x, s) if divide else isa.mul_f32(ctx, x, s)
            q.append(isa.round_f32_i32(ctx, isa.add_f32(ctx, v, z)))
            phase = (phase + LANES) % period
        low = isa.pack_i32_i16(ctx, q[0], q[1])
        high = isa.pack_i32_i16(ctx, q[2], q[3])
        if unsigned:
            packed = isa.as_u8(isa.pack_i16_u8(ctx, low, high))
        else:
            packed = isa.as_u8(isa.pack_i16_i8(ctx, low, high))
        left = count - base
        if left >= VEC:
            isa.store(ctx, packed, dst + base)
        else:
            isa.store_partial(ctx, packed, dst + base, left)


@njit
def dequantize_tile(
    ctx: Context, src: int, dst: int, count: int, table: int, zp_table: int, period: int,
    phase: int, unsigned: bool,
) -> None:
    """int8/uint8[count] at `src` -> float32[count] at `dst`: y = (float(q) - z) * s."""
    for base in range(0, count, 4 * LANES):
        raw = isa.load_i8(ctx, src + base)
        if unsigned:
            halves = (isa.unpack_lo_u8_i16(ctx, raw), isa.unpack_hi_u8_i16(ctx, raw))
        else:
            halves = (isa.unpack_lo_i8_i16(ctx, raw), isa.unpack_hi_i8_i16(ctx, raw))
        for part in range(4):
            half = halves[part // 2]
            if part % 2 == 0:
                q = isa.unpack_lo_i16_i32(ctx, half)
            else:
                q = isa.unpack_hi_i16_i32(ctx, half)
            s = isa.loadu_f32(ctx, table + 4 * phase)
            z = isa.loadu_f32(ctx, zp_table + 4 * phase)
            y = isa.mul_f32(ctx, isa.sub_f32(ctx, isa.cvt_i32_f32(ctx, q), z), s)
            phase = (phase + LANES) % period
            at = base + LANES * part
            left = count - at
            if left >= LANES:
                isa.store(ctx, y, dst + 4 * at)
            elif left > 0:
                isa.store_partial(ctx, y, dst + 4 * at, 4 * left)


@njit
def exp_f32(ctx: Context, x: F32) -> F32:
    """exp(x) for x <= 0 (and NaN), as described in the module docstring."""
    t = isa.max_f32(ctx, isa.mul_f32(ctx, x, isa.splat_f32(ctx, LOG2E)),
                    isa.splat_f32(ctx, EXP_T_MIN))
    n = isa.round_f32_i32(ctx, t)
    f = isa.sub_f32(ctx, t, isa.cvt_i32_f32(ctx, n))
    p = isa.splat_f32(ctx, EXP2_POLY[6])
    for k in range(5, -1, -1):
        p = isa.add_f32(ctx, isa.mul_f32(ctx, p, f), isa.splat_f32(ctx, EXP2_POLY[k]))
    bits = isa.sll_i32(ctx, isa.add_i32(ctx, n, isa.splat_i32(ctx, 127)), 23)
    return isa.mul_f32(ctx, p, isa.as_f32(bits))


@njit
def softmax_rows_across_lanes(
    ctx: Context, src: int, dst: int, length: int, offsets: np.ndarray,
) -> None:
    """Softmax of 16 rows of `length` float32 at once, lane l holding row l (rows at
    `src` + offsets[l]); each lane runs along its row: max, then the sum of exponentials in
    row order, then each exponential times the reciprocal of the sum."""
    m = isa.gather_d(ctx, isa.gather_a_f32(ctx, src, offsets))
    for j in range(1, length):
        m = isa.max_f32(ctx, m, isa.gather_d(ctx, isa.gather_a_f32(ctx, src + 4 * j, offsets)))
    total = isa.splat_f32(ctx, np.float32(0.0))
    for j in range(length):
        x = isa.gather_d(ctx, isa.gather_a_f32(ctx, src + 4 * j, offsets))
        e = exp_f32(ctx, isa.sub_f32(ctx, x, m))
        total = isa.add_f32(ctx, total, e)
        isa.scatter_f32(ctx, e, dst + 4 * j, offsets)
    r = isa.frecip_f32(ctx, total)
    for j in range(length):
        e = isa.gather_d(ctx, isa.gather_a_f32(ctx, dst + 4 * j, offsets))
        isa.scatter_f32(ctx, isa.mul_f32(ctx, e, r), dst + 4 * j, offsets)
    isa.scatter_w(ctx)


@njit
def softmax_columns(ctx: Context, src: int, dst: int, length: int) -> None:
    """Softmax down 16 columns at once: row j of the tile (64 bytes at src + 64 j) holds
    element j of 16 independent softmax vectors; same order of operations as above."""
    m = isa.load_f32(ctx, src)
    for j in range(1, length):
        m = isa.max_f32(ctx, m, isa.load_f32(ctx, src + VEC * j))
    total = isa.splat_f32(ctx, np.float32(0.0))
    for j in range(length):
        e = exp_f32(ctx, isa.sub_f32(ctx, isa.load_f32(ctx, src + VEC * j), m))
        total = isa.add_f32(ctx, total, e)
        isa.store(ctx, e, dst + VEC * j)
    r = isa.frecip_f32(ctx, total)
    for j in range(length):
        isa.store(ctx, isa.mul_f32(ctx, isa.load_f32(ctx, dst + VEC * j), r), dst + VEC * j)


@njit
def softmax_long_row(ctx: Context, src: int, dst: int, length: int) -> None:
    """Softmax of one long row with lanes along the row: lane l takes elements l, l+16, ...;
    lane maxima and lane sums (in element order) are combined by the ISA's reduction trees."""
    minus_inf = isa.splat_f32(ctx, np.float32(-np.inf))
    zero = isa.splat_f32(ctx, np.float32(0.0))
    lane = np.arange(LANES)
    m = minus_inf
    for base in range(0, length, LANES):
        valid = _valid_lanes(ctx, lane, length - base)
        m = isa.max_f32(ctx, m, isa.mov_t(ctx, isa.load_f32(ctx, src + 4 * base), minus_inf,
                                          valid))
    row_max = isa.splat_f32(ctx, isa.rmax_f32(ctx, m))
    total = zero
    for base in range(0, length, LANES):
        valid = _valid_lanes(ctx, lane, length - base)
        e = exp_f32(ctx, isa.sub_f32(ctx, isa.load_f32(ctx, src + 4 * base), row_max))
        total = isa.add_f32(ctx, total, isa.mov_t(ctx, e, zero, valid))
        isa.store(ctx, e, dst + 4 * base)
    r = isa.frecip_f32(ctx, isa.splat_f32(ctx, isa.radd_f32(ctx, total)))
    for base in range(0, length, LANES):
        isa.store(ctx, isa.mul_f32(ctx, isa.load_f32(ctx, dst + 4 * base), r), dst + 4 * base)


@njit
def _valid_lanes(ctx: Context, lane: np.ndarray, left: int) -> np.ndarray:
    # A lane-index compare against the count left (one compare instruction).
    return isa.lt_i32(ctx, lane.astype(np.int32), isa.splat_i32(ctx, left))
