"""The vDSP ISA ops against the one-lane-at-a-time references in `isa_reference.py`.

Every op is checked on hand-checked inputs, on random inputs from fixed seeds and on edge
inputs, together with the exact counters it adds; memory ops also for their faults.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emu.jit import njit
from emu.vdsp import isa
from tests.vdsp import isa_reference as ref

TCM_BYTES = 262144
BANK_BYTES = 131072
I32_MIN, I32_MAX = -(2**31), 2**31 - 1
NAN = float("nan")
INF = float("inf")
F32_MAX = float(np.finfo(np.float32).max)
F32_TINY = float(np.finfo(np.float32).smallest_subnormal)

SPECIAL_F32 = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 1e-3, INF, -INF, NAN, F32_MAX, -F32_MAX,
               F32_TINY, -F32_TINY, 16777216.0, 1.5e-38]

HYPOTHESIS = settings(max_examples=60, deadline=None)
f32_lanes = st.lists(st.floats(width=32), min_size=16, max_size=16).map(
    lambda xs: np.array(xs, dtype=np.float32)
)


@pytest.fixture(autouse=True, scope="module")
def _ieee_results_without_warnings():
    # The ops define IEEE results for overflow, 0/0 and x/0. The float32 references (and the
    # ops themselves under NUMBA_DISABLE_JIT=1) compute them with numpy, which would warn;
    # pytest turns warnings into errors.
    previous = np.seterr(all="ignore")
    yield
    np.seterr(**previous)


def j5(sub_banks: int = 4, width_bytes: int = 4) -> isa.Context:
    return isa.make_context(TCM_BYTES, BANK_BYTES, sub_banks, width_bytes)


def counted(ctx: isa.Context, op: Callable[..., Any], *args: Any) -> tuple[Any, dict[str, int]]:
    """Run `op(ctx, *args)`; return its result and the counters it changed, by name."""
    before = ctx.counters.copy()
    result = op(ctx, *args)
    delta = ctx.counters - before
    return result, {isa.COUNTER_NAMES[i]: int(d) for i, d in enumerate(delta) if d}


def assert_same_f32(actual: np.ndarray, expected: Any) -> None:
    """Bit-equal float32 lanes, except that any NaN matches any NaN."""
    expected = np.asarray(expected, dtype=np.float32)
    assert actual.dtype == np.float32 and actual.shape == expected.shape
    both_nan = np.isnan(actual) & np.isnan(expected)
    assert np.array_equal(actual.view(np.uint32)[~both_nan], expected.view(np.uint32)[~both_nan]), (
        actual,
        expected,
    )
    assert np.array_equal(np.isnan(actual), np.isnan(expected))


def lane_pairs(values: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """Every ordered pair of `values`, padded to whole 16-lane vectors."""
    a = [x for x in values for _ in values]
    b = [y for _ in values for y in values]
    pad = -len(a) % 16
    return (np.array(a + [1.0] * pad, np.float32), np.array(b + [2.0] * pad, np.float32))


# --- context -------------------------------------------------------------------------------


def test_make_context_allocates_zeroed_state():
    ctx = j5()
    tcm, counters, fault, geometry, scratch = (
        ctx.tcm, ctx.counters, ctx.fault, ctx.geometry, ctx.scratch
    )
    assert scratch.dtype == np.int64 and scratch.size >= 64
    views = (ctx.tcm_i8, ctx.tcm_i16, ctx.tcm_i32, ctx.tcm_f32)
    for view, dtype in zip(views, (np.int8, np.int16, np.int32, np.float32), strict=True):
        assert view.dtype == dtype and np.shares_memory(view, tcm)
    assert tcm.dtype == np.uint8 and tcm.size == TCM_BYTES and not tcm.any()
    assert counters.dtype == np.int64 and counters.size == isa.N_COUNTERS and not counters.any()
    assert fault.tolist() == [0, 0, 0, 0]
    assert geometry.tolist() == [BANK_BYTES, 4, 4, 2, BANK_BYTES.bit_length() - 1 - 2]
    assert len(isa.COUNTER_NAMES) == isa.N_COUNTERS


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 4096, 4, 4), "tcm_bytes: must be positive"),
        ((8192, 3000, 4, 4), "whole number"),
        ((8192, 4096, 0, 4), "sub_banks: must be positive"),
        ((8192, 4096, 4, 2), "at least 4"),
        ((8192, 4096, 4, 12), "sub_bank_width_bytes: must be a power of two"),
        ((8192, 4096, 3, 4), "sub_banks: must be a power of two"),
        ((12288, 3072, 4, 4), "bank_bytes: must be a power of two"),
        ((8192, 16, 4, 8), "not a multiple of sub_banks"),
        ((8192.0, 4096, 4, 4), "expected an integer"),
        ((8192, 4096, True, 4), "expected an integer"),
    ],
)
def test_make_context_rejects_impossible_geometry(args, message):
    with pytest.raises(ValueError, match=message):
        isa.make_context(*args)


def test_reset_counters_and_clear_fault():
    ctx = j5()
    isa.load_i32(ctx, 3)
    isa.add_i32(ctx, np.zeros(16, np.int32), np.zeros(16, np.int32))
    assert ctx.counters.any() and ctx.fault[0] == isa.FAULT_MISALIGNED
    isa.reset_counters(ctx)
    assert not ctx.counters.any() and ctx.fault[0] == isa.FAULT_MISALIGNED
    isa.clear_fault(ctx)
    assert ctx.fault.tolist() == [0, 0, 0, 0]


def test_describe_fault_names_op_lane_and_address():
    assert isa.describe_fault([0, 0, 0, 0]) == "no fault"
    assert isa.describe_fault([isa.FAULT_OUT_OF_WINDOW, 0x21170, isa.OP_GATHER32, 3]) == (
        "32-bit gather lane 3 at TCM byte 0x21170: its offset from the base is outside the "
        "64 KiB window (offsets must be below 65536)"
    )
    assert isa.describe_fault([isa.FAULT_MISALIGNED, 0x1004, isa.OP_LOAD, -1]) == (
        "aligned load at TCM byte 0x1004: the address is not a multiple of 64 bytes"
    )
    assert isa.describe_fault([isa.FAULT_MISALIGNED, 0x1002, isa.OP_SCATTER32, 0]).endswith(
        "not a multiple of 4 bytes"
    )
    assert isa.describe_fault([isa.FAULT_OUT_OF_TCM, 0x40000, isa.OP_STOREU, -1]) == (
        "unaligned store at TCM byte 0x40000: the access runs outside the TCM"
    )
    assert "TCM byte -64" in isa.describe_fault([isa.FAULT_OUT_OF_TCM, -64, isa.OP_LOAD, -1])
    with pytest.raises(ValueError, match="4 entries"):
        isa.describe_fault([1, 2, 3])


# --- bitcasts and broadcasts ---------------------------------------------------------------

BITCASTS = [  # (cast, the type it gives, a different type to cast from)
    (isa.as_f32, np.float32, np.int32),
    (isa.as_i32, np.int32, np.float32),
    (isa.as_u32, np.uint32, np.int16),
    (isa.as_i16, np.int16, np.uint8),
    (isa.as_u16, np.uint16, np.float32),
    (isa.as_i8, np.int8, np.int32),
    (isa.as_u8, np.uint8, np.float32),
]


@pytest.mark.parametrize(("cast", "dtype", "source"), BITCASTS,
                         ids=lambda v: getattr(v, "__name__", None))
def test_bitcasts_reinterpret_the_same_bytes_in_a_new_array(cast, dtype, source):
    raw = np.random.default_rng(1).integers(0, 256, 64, dtype=np.uint8)
    vec = raw.view(source).copy()
    out = cast(vec)
    assert out.dtype == dtype and out.nbytes == 64
    assert out.tobytes() == raw.tobytes()
    assert not np.shares_memory(out, vec)


@pytest.mark.parametrize(
    ("splat", "x", "dtype", "lanes"),
    [(isa.splat_f32, -1.25, np.float32, 16), (isa.splat_f32, 0.1, np.float32, 16),
     (isa.splat_i32, I32_MIN, np.int32, 16), (isa.splat_i16, -32768, np.int16, 32),
     (isa.splat_i8, 127, np.int8, 64)],
)
def test_splats_fill_every_lane(splat, x, dtype, lanes):
    out, counts = counted(j5(), splat, x)
    assert out.dtype == dtype and out.size == lanes
    assert (out == dtype(x)).all()
    assert counts == {"alu": 1}


# --- integer arithmetic --------------------------------------------------------------------

INT_BINARY = [
    (isa.add_i32, lambda x, y: x + y, 32, "alu"),
    (isa.sub_i32, lambda x, y: x - y, 32, "alu"),
    (isa.mul_i32, lambda x, y: x * y, 32, "mul"),
    (isa.min_i32, min, 32, "alu"),
    (isa.max_i32, max, 32, "alu"),
    (isa.add_i16, lambda x, y: x + y, 16, "alu"),
    (isa.sub_i16, lambda x, y: x - y, 16, "alu"),
    (isa.mul_i16, lambda x, y: x * y, 16, "mul"),
    (isa.min_i16, min, 16, "alu"),
    (isa.max_i16, max, 16, "alu"),
]


def int_inputs(bits: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    dtype = np.int32 if bits == 32 else np.int16
    lanes = 64 // (bits // 8)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    edges = [0, 1, -1, 2, lo, hi, lo + 1, hi - 1, 1 << (bits // 2), -(1 << (bits // 2)), 12345]
    a = [x for x in edges for _ in edges]
    b = [y for _ in edges for y in edges]
    rng = np.random.default_rng(seed)
    out = []
    for start in range(0, len(a), lanes):
        chunk_a = (a[start : start + lanes] + [7] * lanes)[:lanes]
        chunk_b = (b[start : start + lanes] + [-3] * lanes)[:lanes]
        out.append((np.array(chunk_a, dtype), np.array(chunk_b, dtype)))
    for _ in range(4):
        out.append(tuple(rng.integers(lo, hi, lanes, endpoint=True).astype(dtype) for _ in "ab"))
    return out


@pytest.mark.parametrize(("op", "lane_ref", "bits", "counter"), INT_BINARY,
                         ids=lambda v: getattr(v, "__name__", None))
def test_integer_binary_ops_match_wrapping_reference(op, lane_ref, bits, counter):
    ctx = j5()
    for a, b in int_inputs(bits, seed=bits):
        out, counts = counted(ctx, op, a, b)
        assert out.dtype == a.dtype
        expected = [ref.wrap(lane_ref(x, y), bits) for x, y in zip(a.tolist(), b.tolist(),
                                                                    strict=True)]
        assert out.tolist() == expected
        assert counts == {counter: 1}


def test_integer_wrap_around_by_hand():
    ctx = j5()
    a = np.array([I32_MAX, I32_MIN, 65536, 46341] + [0] * 12, np.int32)
    b = np.array([1, -1, 65536, 46341] + [0] * 12, np.int32)
    assert isa.add_i32(ctx, a, b)[:2].tolist() == [I32_MIN, I32_MAX]
    assert isa.mul_i32(ctx, a, b)[2:4].tolist() == [0, 46341 * 46341 - 2**32]
    h = np.array([32767, -32768, 300] + [0] * 29, np.int16)
    assert isa.add_i16(ctx, h, np.ones(32, np.int16))[:2].tolist() == [-32768, -32767]
    assert isa.mul_i16(ctx, h, h)[2] == 90000 - 65536


SHIFTS = [
    (isa.sll_i32, lambda x, k: x << k, 32),
    (isa.srl_i32, lambda x, k: (x % 2**32) >> k, 32),
    (isa.sra_i32, lambda x, k: x >> k, 32),
    (isa.sll_i16, lambda x, k: x << k, 16),
    (isa.srl_i16, lambda x, k: (x % 2**16) >> k, 16),
    (isa.sra_i16, lambda x, k: x >> k, 16),
]


@pytest.mark.parametrize(("op", "lane_ref", "bits"), SHIFTS,
                         ids=lambda v: getattr(v, "__name__", None))
def test_shifts_match_reference_for_every_count(op, lane_ref, bits):
    ctx = j5()
    for a, _ in int_inputs(bits, seed=3):
        for count in [0, 1, 7, bits - 1, bits, bits + 1, 100]:
            out, counts = counted(ctx, op, a, count)
            assert out.dtype == a.dtype
            assert out.tolist() == [ref.wrap(lane_ref(x, count), bits) for x in a.tolist()]
            assert counts == {"alu": 1}
    with pytest.raises(ValueError, match="negative"):
        op(ctx, a, -1)


def test_shift_edges_by_hand():
    ctx = j5()
    a = np.array([-8, 1, I32_MIN, I32_MAX] + [0] * 12, np.int32)
    assert isa.sra_i32(ctx, a, 32)[:4].tolist() == [-1, 0, -1, 0]
    assert isa.srl_i32(ctx, a, 28)[:4].tolist() == [15, 0, 8, 7]
    assert isa.sll_i32(ctx, a, 31)[:4].tolist() == [0, I32_MIN, 0, I32_MIN]
    assert isa.sll_i32(ctx, a, 32)[:4].tolist() == [0, 0, 0, 0]
    assert isa.srl_i32(ctx, a, 0).tolist() == a.tolist()


# --- float arithmetic ----------------------------------------------------------------------

FLOAT_BINARY = [
    (isa.add_f32, lambda x, y: x + y, "alu"),
    (isa.sub_f32, lambda x, y: x - y, "alu"),
    (isa.mul_f32, lambda x, y: x * y, "mul"),
    (isa.fdiv_f32, lambda x, y: x / y, "fdiv"),
    (isa.min_f32, ref.fmin, "alu"),
    (isa.max_f32, ref.fmax, "alu"),
]
FLOAT_UNARY = [
    (isa.abs_f32, abs, "alu"),
    (isa.neg_f32, lambda x: -x, "alu"),
    (isa.frecip_f32, lambda x: np.float32(1.0) / x, "fdiv"),
    (isa.firint_f32, lambda x: np.float32(math.copysign(round(x), x)) if math.isfinite(x) else x,
     "cvt"),
]


def f32_reference(lane_ref: Callable[..., Any], *vectors: np.ndarray) -> np.ndarray:
    lanes = zip(*(v.tolist() for v in vectors), strict=True)
    return np.array([lane_ref(*(np.float32(x) for x in xs)) for xs in lanes], np.float32)


@pytest.mark.parametrize(("op", "lane_ref", "counter"), FLOAT_BINARY,
                         ids=lambda v: getattr(v, "__name__", None))
def test_float_binary_ops_match_float32_reference(op, lane_ref, counter):
    ctx = j5()
    rng = np.random.default_rng(5)
    a, b = lane_pairs(SPECIAL_F32)
    randoms = (rng.standard_normal(64) * 10.0 ** rng.integers(-30, 30, 64)).astype(np.float32)
    a = np.concatenate([a, randoms])
    b = np.concatenate([b, randoms[::-1]])
    for start in range(0, a.size, 16):
        va, vb = a[start : start + 16].copy(), b[start : start + 16].copy()
        out, counts = counted(ctx, op, va, vb)
        assert_same_f32(out, f32_reference(lane_ref, va, vb))
        assert counts == {counter: 1}


@pytest.mark.parametrize(("op", "lane_ref", "counter"), FLOAT_UNARY,
                         ids=lambda v: getattr(v, "__name__", None))
def test_float_unary_ops_match_float32_reference(op, lane_ref, counter):
    ctx = j5()
    values = [*SPECIAL_F32, 0.5, 1.5, 2.5, -0.5, -1.5, 4.5, 8388609.5, 0.49999997]
    values += np.random.default_rng(6).standard_normal(48).astype(np.float32).tolist()
    a = np.array((values + [1.0] * 16)[: len(values) // 16 * 16 + 16], np.float32)
    for start in range(0, a.size, 16):
        va = a[start : start + 16].copy()
        out, counts = counted(ctx, op, va)
        assert_same_f32(out, f32_reference(lane_ref, va))
        assert counts == {counter: 1}


def test_float_results_by_hand():
    ctx = j5()
    one = np.ones(16, np.float32)
    assert isa.add_f32(ctx, np.full(16, 16777216.0, np.float32), one)[0] == 16777216.0
    assert isa.frecip_f32(ctx, np.full(16, 3.0, np.float32))[0] == np.float32(0.33333334)
    zeros = np.array([0.0, -0.0, 0.0, 1.0] * 4, np.float32)
    quotient = isa.fdiv_f32(ctx, np.array([1.0, 1.0, 0.0, -1.0] * 4, np.float32), zeros)
    assert quotient[0] == INF and quotient[1] == -INF and math.isnan(quotient[2])
    assert quotient[3] == -1.0
    minimum = isa.min_f32(ctx, np.array([0.0, -0.0, NAN, 1.0] * 4, np.float32),
                          np.array([-0.0, 0.0, 1.0, NAN] * 4, np.float32))
    assert np.signbit(minimum[0]) and np.signbit(minimum[1]) and np.isnan(minimum[2:4]).all()
    assert not np.signbit(isa.abs_f32(ctx, -zeros)[0])
    assert np.signbit(isa.neg_f32(ctx, zeros)[0])


@HYPOTHESIS
@given(a=f32_lanes, b=f32_lanes)
def test_float_ops_equal_numpy_float32_on_any_input(a, b):
    ctx = j5()
    assert_same_f32(isa.add_f32(ctx, a, b), a + b)
    assert_same_f32(isa.sub_f32(ctx, a, b), a - b)
    assert_same_f32(isa.mul_f32(ctx, a, b), a * b)
    assert_same_f32(isa.fdiv_f32(ctx, a, b), a / b)
    assert_same_f32(isa.min_f32(ctx, a, b), f32_reference(ref.fmin, a, b))
    assert_same_f32(isa.max_f32(ctx, a, b), f32_reference(ref.fmax, a, b))
    assert isa.ule_f32(ctx, a, b).tolist() == [
        not (x > y) for x, y in zip(a.tolist(), b.tolist(), strict=True)
    ]


@pytest.mark.parametrize(
    ("op", "args"),
    [
        (isa.mov_t, (np.zeros(16, np.int32), np.zeros(16, np.int32), np.zeros(32, np.bool_))),
        (isa.min_f32, (np.zeros(16, np.float32), np.zeros(8, np.float32))),
        (isa.radd_f32, (np.zeros(8, np.float32),)),
        (isa.pack_i32_i16, (np.zeros(16, np.int32), np.zeros(8, np.int32))),
        (isa.interleave_even_i8, (np.zeros(64, np.int8), np.zeros(32, np.int8))),
        (isa.store, (np.zeros(8, np.float32), 0)),
        (isa.gather_a_i16, (0, np.zeros(16, np.uint16))),
        (isa.scatter_i32, (np.zeros(8, np.int32), 0, np.zeros(8, np.uint32))),
        (isa.scatter_i8, (np.zeros(32, np.int16), 0, np.zeros(16, np.uint16))),
        (isa.gather_d_hi_i8, (np.zeros(32, np.int8), np.zeros(32, np.int16))),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_operands_with_the_wrong_lane_count_are_rejected(op, args):
    ctx = j5()
    with pytest.raises(ValueError, match="wrong number of lanes"):
        op(ctx, *args)
    assert not ctx.tcm.any() and ctx.fault[0] == isa.FAULT_NONE


# --- reductions ----------------------------------------------------------------------------


def test_radd_f32_uses_the_pairwise_tree_order():
    ctx = j5()
    # Lanes 4 and 12 meet in the first step (1 + 1 = 2, exact) and then join 2**24 exactly;
    # a left-to-right sum would lose each 1 separately to round-to-even.
    a = np.zeros(16, np.float32)
    a[0], a[4], a[12] = 2.0**24, 1.0, 1.0
    total, counts = counted(ctx, isa.radd_f32, a)
    assert total == 16777218.0
    assert counts == {"alu": 4}
    sequential = np.float32(0.0)
    for x in a:
        sequential = np.float32(sequential + x)
    assert sequential == 16777216.0


def test_reductions_match_reference():
    ctx = j5()
    rng = np.random.default_rng(7)
    vectors = [rng.standard_normal(16).astype(np.float32) * 1e4 for _ in range(20)]
    vectors += [np.array(SPECIAL_F32[i : i + 16] + [1.0] * 16, np.float32)[:16] for i in (0, 2)]
    vectors += [np.full(16, -INF, np.float32), np.array([-0.0] * 15 + [0.0], np.float32),
                np.array([0.0] + [-0.0] * 15, np.float32), np.full(16, -0.0, np.float32)]
    for v in vectors:
        assert_same_f32(np.array([isa.radd_f32(ctx, v)], np.float32), [ref.tree_sum_f32(v)])
        assert_same_f32(np.array([isa.rmax_f32(ctx, v)], np.float32), [ref.tree_max_f32(v)])
    assert math.isnan(isa.rmax_f32(ctx, np.array([1.0] * 15 + [NAN], np.float32)))
    for _ in range(20):
        v = rng.integers(I32_MIN, I32_MAX, 16, endpoint=True).astype(np.int32)
        assert isa.radd_i32(ctx, v) == ref.wrap(sum(v.tolist()), 32)
        assert isa.rmax_i32(ctx, v) == max(v.tolist())
    assert isa.radd_i32(ctx, np.full(16, 2**28, np.int32)) == 0
    assert isa.rmax_i32(ctx, np.full(16, I32_MIN, np.int32)) == I32_MIN
    _, counts = counted(ctx, isa.rmax_i32, v)
    assert counts == {"alu": 4}


# --- compares, masks, selects, interleaves -------------------------------------------------

COMPARES_F32 = [
    (isa.lt_f32, lambda x, y: x < y),
    (isa.le_f32, lambda x, y: x <= y),
    (isa.eq_f32, lambda x, y: x == y),
    (isa.ult_f32, lambda x, y: not x >= y),
    (isa.ule_f32, lambda x, y: not x > y),
]


@pytest.mark.parametrize(("op", "lane_ref"), COMPARES_F32,
                         ids=lambda v: getattr(v, "__name__", None))
def test_float_compares_ordered_and_unordered(op, lane_ref):
    ctx = j5()
    a, b = lane_pairs(SPECIAL_F32)
    for start in range(0, a.size, 16):
        va, vb = a[start : start + 16].copy(), b[start : start + 16].copy()
        out, counts = counted(ctx, op, va, vb)
        assert out.dtype == np.bool_
        assert out.tolist() == [lane_ref(x, y) for x, y in zip(va.tolist(), vb.tolist(),
                                                               strict=True)]
        assert counts == {"alu": 1}
    nan, one = np.full(16, NAN, np.float32), np.ones(16, np.float32)
    unordered = op in (isa.ult_f32, isa.ule_f32)
    assert op(ctx, nan, one).all() == unordered and op(ctx, one, nan).all() == unordered


COMPARES_INT = [
    (isa.lt_i32, lambda x, y, bits: x < y, 32),
    (isa.le_i32, lambda x, y, bits: x <= y, 32),
    (isa.eq_i32, lambda x, y, bits: x == y, 32),
    (isa.ltu_i32, lambda x, y, bits: x % 2**bits < y % 2**bits, 32),
    (isa.lt_i16, lambda x, y, bits: x < y, 16),
    (isa.le_i16, lambda x, y, bits: x <= y, 16),
    (isa.eq_i16, lambda x, y, bits: x == y, 16),
    (isa.ltu_i16, lambda x, y, bits: x % 2**bits < y % 2**bits, 16),
]


@pytest.mark.parametrize(("op", "lane_ref", "bits"), COMPARES_INT,
                         ids=lambda v: getattr(v, "__name__", None))
def test_integer_compares_signed_and_unsigned(op, lane_ref, bits):
    ctx = j5()
    for a, b in int_inputs(bits, seed=11):
        out, counts = counted(ctx, op, a, b)
        assert out.tolist() == [lane_ref(x, y, bits) for x, y in zip(a.tolist(), b.tolist(),
                                                                     strict=True)]
        assert counts == {"alu": 1}
    minus_one, one = np.full(64 * 8 // bits, -1, a.dtype), np.ones(64 * 8 // bits, a.dtype)
    if op in (isa.ltu_i32, isa.ltu_i16):
        assert not op(ctx, minus_one, one).any()


@pytest.mark.parametrize("lanes", [16, 32, 64])
def test_mask_logic(lanes):
    ctx = j5()
    rng = np.random.default_rng(lanes)
    m, n = rng.random(lanes) < 0.5, rng.random(lanes) < 0.5
    for op, expected in [(isa.and_b, [x and y for x, y in zip(m, n, strict=True)]),
                         (isa.or_b, [x or y for x, y in zip(m, n, strict=True)])]:
        out, counts = counted(ctx, op, m, n)
        assert out.tolist() == expected and counts == {"alu": 1}
    out, counts = counted(ctx, isa.not_b, m)
    assert out.tolist() == [not x for x in m] and counts == {"alu": 1}


@pytest.mark.parametrize(
    "vectors",
    [
        (np.arange(16, dtype=np.int32), np.full(16, -1, np.int32)),
        (np.array(SPECIAL_F32[:16], np.float32), -np.array(SPECIAL_F32[1:], np.float32)),
        (np.arange(64, dtype=np.int8), np.arange(64, dtype=np.int8)[::-1].copy()),
    ],
    ids=["i32", "f32", "i8"],
)
def test_mov_t_selects_a_where_mask_else_b(vectors):
    ctx = j5()
    a, b = vectors
    mask = np.random.default_rng(2).random(a.size) < 0.5
    out, counts = counted(ctx, isa.mov_t, a, b, mask)
    assert out.dtype == a.dtype and counts == {"alu": 1}
    expected = [x if m else y for x, y, m in zip(a.view(f"u{a.itemsize}").tolist(),
                                                 b.view(f"u{a.itemsize}").tolist(), mask,
                                                 strict=True)]
    assert out.view(f"u{a.itemsize}").tolist() == expected


def test_interleave_even_bytes_and_halfwords():
    ctx = j5()
    a = np.arange(64, dtype=np.uint8).view(np.int8)
    b = (np.arange(64, dtype=np.uint8) + 100).view(np.int8)
    out, counts = counted(ctx, isa.interleave_even_i8, a, b)
    assert counts == {"alu": 1}
    assert out.view(np.uint8).tolist()[:6] == [0, 100, 2, 102, 4, 104]
    assert out.view(np.uint8).tolist() == [
        (k if k % 2 == 0 else 100 + k - 1) for k in range(64)
    ]
    a16, b16 = a.view(np.int16).copy(), b.view(np.int16).copy()
    out16 = isa.interleave_even_i16(ctx, a16, b16)
    assert out16.dtype == np.int16
    expected = [a16[k] if k % 2 == 0 else b16[k - 1] for k in range(32)]
    assert out16.tolist() == expected


def test_interleaves_pack_four_int8_values_into_each_int32_lane():
    ctx = j5()
    rng = np.random.default_rng(4)
    x, y, z, r = (rng.integers(-128, 128, 16).astype(np.int32) for _ in range(4))
    xy = isa.interleave_even_i8(ctx, x, y)
    zr = isa.interleave_even_i8(ctx, z, r)
    packed = isa.interleave_even_i16(ctx, xy, zr)
    assert packed.dtype == np.int32
    assert packed.view(np.int8).reshape(16, 4).tolist() == np.stack([x, y, z, r], 1).tolist()


# --- conversions ---------------------------------------------------------------------------

CONVERT_EDGES = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.0, NAN, INF, -INF,
                 2147483520.0, 2147483648.0, -2147483648.0, -2147483904.0, 3e9, -3e9, 1e-45,
                 8388609.5, -8388609.5, 123.75, -123.75]


@pytest.mark.parametrize(
    ("op", "rounding", "cvt_ops"),
    [(isa.trunc_f32_i32, "trunc", 1), (isa.round_f32_i32, "even", 2)],
)
def test_float_to_int_conversions_saturate_and_map_nan_to_zero(op, rounding, cvt_ops):
    ctx = j5()
    values = CONVERT_EDGES + np.random.default_rng(8).normal(0, 1e6, 42).tolist()
    a = np.array(values, np.float32)
    for start in range(0, a.size, 16):
        va = a[start : start + 16].copy()
        out, counts = counted(ctx, op, va)
        assert out.dtype == np.int32
        assert out.tolist() == [ref.to_i32(x, rounding) for x in va.tolist()]
        assert counts == {"cvt": cvt_ops}


def test_float_to_int_by_hand():
    ctx = j5()
    ties = np.array([0.5, 1.5, 2.5, -0.5, -2.5, NAN, INF, -INF, 2147483648.0, -2147483648.0,
                     -3e9, 2.7, -2.7, 0, 0, 0], np.float32)
    assert isa.round_f32_i32(ctx, ties).tolist()[:13] == [
        0, 2, 2, 0, -2, 0, I32_MAX, I32_MIN, I32_MAX, I32_MIN, I32_MIN, 3, -3]
    assert isa.trunc_f32_i32(ctx, ties).tolist()[:13] == [
        0, 1, 2, 0, -2, 0, I32_MAX, I32_MIN, I32_MAX, I32_MIN, I32_MIN, 2, -2]


@HYPOTHESIS
@given(a=f32_lanes)
def test_float_to_int_matches_reference_on_any_input(a):
    ctx = j5()
    assert isa.trunc_f32_i32(ctx, a).tolist() == [ref.to_i32(x, "trunc") for x in a.tolist()]
    assert isa.round_f32_i32(ctx, a).tolist() == [ref.to_i32(x, "even") for x in a.tolist()]


def test_int_to_float_rounds_to_nearest_even():
    ctx = j5()
    a = np.array([16777217, 16777219, -16777217, I32_MAX, I32_MIN, 0, -1, 33554435,
                  *np.random.default_rng(9).integers(I32_MIN, I32_MAX, 8).tolist()], np.int32)
    out, counts = counted(ctx, isa.cvt_i32_f32, a)
    assert_same_f32(out, [np.float32(float(x)) for x in a.tolist()])
    assert out[:5].tolist() == [16777216.0, 16777220.0, -16777216.0, 2147483648.0,
                                -2147483648.0]
    assert counts == {"cvt": 1}


@pytest.mark.parametrize(
    ("op", "source", "lo", "hi", "dtype"),
    [(isa.pack_i32_i16, np.int32, -32768, 32767, np.int16),
     (isa.pack_i16_i8, np.int16, -128, 127, np.int8),
     (isa.pack_i16_u8, np.int16, 0, 255, np.uint8)],
)
def test_saturating_packs(op, source, lo, hi, dtype):
    ctx = j5()
    lanes = 64 // np.dtype(source).itemsize
    info = np.iinfo(source)
    edges = [lo, hi, lo - 1, hi + 1, 0, -1, 1, info.min, info.max, 255, 256, -129, 128]
    rng = np.random.default_rng(10)
    a = np.array((edges * lanes)[:lanes], source)
    b = rng.integers(info.min, info.max, lanes, endpoint=True).astype(source)
    out, counts = counted(ctx, op, a, b)
    assert out.dtype == dtype and out.size == 2 * lanes
    assert out.tolist() == [min(max(x, lo), hi) for x in a.tolist() + b.tolist()]
    assert counts == {"cvt": 1}


UNPACKS = [  # (op, how its source lanes are read, which half, result type)
    (isa.unpack_lo_i8_i16, np.int8, 0, np.int16),
    (isa.unpack_hi_i8_i16, np.int8, 1, np.int16),
    (isa.unpack_lo_u8_i16, np.uint8, 0, np.int16),
    (isa.unpack_hi_u8_i16, np.uint8, 1, np.int16),
    (isa.unpack_lo_i16_i32, np.int16, 0, np.int32),
    (isa.unpack_hi_i16_i32, np.int16, 1, np.int32),
]


@pytest.mark.parametrize(("op", "source", "half", "result"), UNPACKS,
                         ids=lambda v: getattr(v, "__name__", None))
def test_unpacks_widen_one_half_of_the_vector(op, source, half, result):
    raw = np.random.default_rng(15).integers(0, 256, 64, dtype=np.uint8)
    raw[0:4] = raw[32:36] = [0x80, 0xFF, 0x7F, 0x00]
    out, counts = counted(j5(), op, raw.view(np.int8).copy())
    assert counts == {"cvt": 1}
    assert out.dtype == result and out.nbytes == 64
    width = np.dtype(source).itemsize
    lanes = [int.from_bytes(raw[k : k + width].tobytes(), "little",
                            signed=np.issubdtype(source, np.signedinteger))
             for k in range(0, 64, width)]
    half_lanes = len(lanes) // 2
    assert out.tolist() == lanes[half * half_lanes : (half + 1) * half_lanes]
    by_hand = {np.int8: [-128, -1, 127, 0], np.uint8: [128, 255, 127, 0], np.int16: [-128, 127]}
    assert out.tolist()[: len(by_hand[source])] == by_hand[source]


def test_unpacks_undo_packs():
    ctx = j5()
    v = np.random.default_rng(16).integers(-128, 128, 64).astype(np.int8)
    low, high = isa.unpack_lo_i8_i16(ctx, v), isa.unpack_hi_i8_i16(ctx, v)
    assert isa.pack_i16_i8(ctx, low, high).tolist() == v.tolist()
    h = v.view(np.int16).copy()
    assert isa.pack_i32_i16(ctx, isa.unpack_lo_i16_i32(ctx, h),
                            isa.unpack_hi_i16_i32(ctx, h)).tolist() == h.tolist()


# --- loads and stores ----------------------------------------------------------------------

LOADS = [(isa.load_f32, isa.loadu_f32, np.float32), (isa.load_i32, isa.loadu_i32, np.int32),
         (isa.load_u32, isa.loadu_u32, np.uint32), (isa.load_i16, isa.loadu_i16, np.int16),
         (isa.load_u16, isa.loadu_u16, np.uint16), (isa.load_i8, isa.loadu_i8, np.int8),
         (isa.load_u8, isa.loadu_u8, np.uint8)]


def filled_j5(seed: int = 0, **geometry: int) -> isa.Context:
    ctx = j5(**geometry)
    ctx.tcm[:] = np.random.default_rng(seed).integers(0, 256, TCM_BYTES, dtype=np.uint8)
    return ctx


@pytest.mark.parametrize(("aligned", "unaligned", "dtype"), LOADS,
                         ids=lambda v: getattr(v, "__name__", None))
def test_loads_read_64_bytes_as_each_type(aligned, unaligned, dtype):
    ctx = filled_j5()
    for address in [0, 128, BANK_BYTES - 64, BANK_BYTES, TCM_BYTES - 64]:
        out, counts = counted(ctx, aligned, address)
        assert out.dtype == dtype and out.nbytes == 64 and counts == {"load": 1}
        assert out.tobytes() == ctx.tcm[address : address + 64].tobytes()
        assert not np.shares_memory(out, ctx.tcm)
    for address in [1, 77, BANK_BYTES - 32, TCM_BYTES - 64]:
        out, counts = counted(ctx, unaligned, address)
        assert out.tobytes() == ctx.tcm[address : address + 64].tobytes()
        assert counts == {"load": 1}
    assert ctx.fault[0] == isa.FAULT_NONE


@pytest.mark.parametrize(
    ("op_name", "address", "code", "op_id"),
    [("load_i32", 65, isa.FAULT_MISALIGNED, isa.OP_LOAD),
     ("load_i32", 32, isa.FAULT_MISALIGNED, isa.OP_LOAD),
     ("load_i32", TCM_BYTES, isa.FAULT_OUT_OF_TCM, isa.OP_LOAD),
     ("load_i32", -64, isa.FAULT_OUT_OF_TCM, isa.OP_LOAD),
     ("loadu_i32", TCM_BYTES - 63, isa.FAULT_OUT_OF_TCM, isa.OP_LOADU),
     ("loadu_i32", -1, isa.FAULT_OUT_OF_TCM, isa.OP_LOADU)],
)
def test_faulting_loads_return_zeros_and_record_the_fault(op_name, address, code, op_id):
    ctx = filled_j5()
    out, counts = counted(ctx, getattr(isa, op_name), address)
    assert not out.any() and counts == {"load": 1}
    assert ctx.fault.tolist() == [code, address, op_id, -1]


def test_only_the_first_fault_is_kept():
    ctx = filled_j5()
    isa.load_f32(ctx, 4)
    isa.loadu_f32(ctx, TCM_BYTES)
    isa.gather_a_f32(ctx, 0, np.full(16, 70000, np.uint32))
    isa.store(ctx, np.zeros(16, np.float32), 3)
    assert ctx.fault.tolist() == [isa.FAULT_MISALIGNED, 4, isa.OP_LOAD, -1]
    isa.clear_fault(ctx)
    isa.loadu_f32(ctx, TCM_BYTES)
    assert ctx.fault.tolist() == [isa.FAULT_OUT_OF_TCM, TCM_BYTES, isa.OP_LOADU, -1]


def test_stores_write_exactly_their_bytes():
    ctx = filled_j5()
    vec = np.random.default_rng(1).standard_normal(16).astype(np.float32)
    raw = vec.tobytes()
    cases = [(isa.store, (128,), 128, raw), (isa.store, (TCM_BYTES - 64,), TCM_BYTES - 64, raw),
             (isa.storeu, (3,), 3, raw), (isa.storeu, (TCM_BYTES - 64,), TCM_BYTES - 64, raw),
             (isa.store_partial, (1001, 5), 1001, raw[:5]),
             (isa.store_partial, (TCM_BYTES - 7, 7), TCM_BYTES - 7, raw[:7]),
             (isa.store_partial, (2000, 64), 2000, raw), (isa.store_partial, (2100, 0), 2100, b"")]
    for op, args, address, written in cases:
        before = ctx.tcm.copy()
        _, counts = counted(ctx, op, vec, *args)
        assert counts == {"store": 1}
        expected = before.copy()
        expected[address : address + len(written)] = np.frombuffer(written, np.uint8)
        assert np.array_equal(ctx.tcm, expected)
    assert ctx.fault[0] == isa.FAULT_NONE


@pytest.mark.parametrize(
    ("op_name", "args", "code", "address", "op_id"),
    [("store", (96,), isa.FAULT_MISALIGNED, 96, isa.OP_STORE),
     ("store", (TCM_BYTES,), isa.FAULT_OUT_OF_TCM, TCM_BYTES, isa.OP_STORE),
     ("storeu", (TCM_BYTES - 63,), isa.FAULT_OUT_OF_TCM, TCM_BYTES - 63, isa.OP_STOREU),
     ("storeu", (-5,), isa.FAULT_OUT_OF_TCM, -5, isa.OP_STOREU),
     ("store_partial", (TCM_BYTES - 5, 6), isa.FAULT_OUT_OF_TCM, TCM_BYTES - 5,
      isa.OP_STORE_PARTIAL)],
)
def test_faulting_stores_leave_the_tcm_untouched(op_name, args, code, address, op_id):
    ctx = filled_j5()
    before = ctx.tcm.copy()
    _, counts = counted(ctx, getattr(isa, op_name), np.ones(16, np.float32), *args)
    assert counts == {"store": 1}
    assert np.array_equal(ctx.tcm, before)
    assert ctx.fault.tolist() == [code, address, op_id, -1]


def test_store_partial_rejects_a_byte_count_beyond_the_vector():
    ctx = j5()
    for nbytes in (-1, 65):
        with pytest.raises(ValueError, match="nbytes"):
            isa.store_partial(ctx, np.zeros(16, np.float32), 0, nbytes)


# --- gather --------------------------------------------------------------------------------

GATHERS = {  # name: (op, element bytes, lanes, offsets dtype, numpy dtype of the lanes read)
    "f32": (isa.gather_a_f32, 4, 16, np.uint32, np.float32),
    "i32": (isa.gather_a_i32, 4, 16, np.uint32, np.int32),
    "i16": (isa.gather_a_i16, 2, 32, np.uint16, np.int16),
    "i8": (isa.gather_a_i8, 1, 32, np.uint16, np.int8),
    "u8": (isa.gather_a_u8, 1, 32, np.uint16, np.uint8),
}
GATHER_OPS = {4: isa.OP_GATHER32, 2: isa.OP_GATHER16, 1: isa.OP_GATHER8}


def assert_gathered_like_reference(
    drained: np.ndarray, core: ref.ReferenceCore, name: str, base: int, offsets: np.ndarray
) -> None:
    _, size, _, _, element = GATHERS[name]
    chunks = core.gather(base, offsets.tolist(), size, GATHER_OPS[size])
    expected = np.frombuffer(b"".join(chunks), element)
    if element == np.float32:  # compare bits: random TCM bytes include NaNs
        assert drained.tobytes() == expected.tobytes()
    else:  # compare values: 8-bit lanes come back extended to 16 bits
        assert drained.tolist() == expected.tolist()


@pytest.mark.parametrize("name", GATHERS)
def test_gathers_read_each_lane_from_base_plus_offset(name):
    op, size, lanes, offset_dtype, _ = GATHERS[name]
    ctx = filled_j5(seed=2)
    core = ref.ReferenceCore(TCM_BYTES, BANK_BYTES, 4, 4)
    core.tcm[:] = ctx.tcm.tobytes()
    rng = np.random.default_rng(size)
    last = 65536 - size
    for base in [0, 4096, BANK_BYTES - 32768, TCM_BYTES - 65536]:
        for offsets in [np.arange(lanes) * size, np.full(lanes, last),
                        np.r_[0, last, rng.integers(0, 65536 // size, lanes - 2) * size]]:
            offsets = offsets.astype(offset_dtype)
            register, counts = counted(ctx, op, base, offsets)
            drained, drain_counts = counted(ctx, isa.gather_d, register)
            assert drain_counts == {"gather_d": 1}
            assert_gathered_like_reference(drained, core, name, base, offsets)
            depth = ref.conflict_depth((base + offsets.astype(np.int64)).tolist(),
                                       BANK_BYTES, 4, 4)
            assert counts == {"gather_a": 1, "gather_conflict": depth}
    assert ctx.fault[0] == isa.FAULT_NONE


def test_byte_gathers_extend_into_16_bit_lanes_and_drain_into_halves():
    ctx = j5()
    ctx.tcm[:64] = np.arange(64, dtype=np.uint8) * 4 + 3  # crosses 0x80 at byte 32
    offsets = np.arange(32, dtype=np.uint16) * 2
    signed = isa.gather_d(ctx, isa.gather_a_i8(ctx, 0, offsets))
    unsigned = isa.gather_d(ctx, isa.gather_a_u8(ctx, 0, offsets))
    expected = (np.arange(32) * 8 + 3) % 256
    assert signed.dtype == np.int16 and signed.tolist() == [ref.wrap(v, 8) for v in expected]
    assert unsigned.dtype == np.uint16 and unsigned.tolist() == expected.tolist()
    low_register = isa.gather_a_i8(ctx, 0, offsets)
    high_register = isa.gather_a_i8(ctx, 1, offsets)
    low, counts = counted(ctx, isa.gather_d_lo_i8, low_register)
    assert counts == {"gather_d": 1}
    assert low.dtype == np.int8 and low.view(np.uint8).tolist() == expected.tolist() + [0] * 32
    both, counts = counted(ctx, isa.gather_d_hi_i8, low, high_register)
    assert counts == {"gather_d": 1}
    assert both.view(np.uint8).tolist() == expected.tolist() + ctx.tcm[1:64:2].tolist()
    assert low.view(np.uint8).tolist()[32:] == [0] * 32  # the input vector is not changed
    with pytest.raises(ValueError, match="wrong number of lanes"):
        isa.gather_d_lo_i8(ctx, np.zeros(16, np.int16))


@pytest.mark.parametrize(
    ("name", "base", "bad_lane", "bad_offset", "code"),
    [("f32", 0, 5, 65536, isa.FAULT_OUT_OF_WINDOW),
     ("i32", 100, 15, 2**32 - 4, isa.FAULT_OUT_OF_WINDOW),
     ("f32", TCM_BYTES - 65532, 3, 65532, isa.FAULT_OUT_OF_TCM),
     ("i32", 0, 1, 6, isa.FAULT_MISALIGNED),
     ("i16", 1, 0, 0, isa.FAULT_MISALIGNED),
     ("i16", TCM_BYTES - 65534, 31, 65534, isa.FAULT_OUT_OF_TCM),
     ("i8", TCM_BYTES - 65535, 7, 65535, isa.FAULT_OUT_OF_TCM),
     ("u8", -1, 0, 0, isa.FAULT_OUT_OF_TCM)],
)
def test_faulting_gathers_return_zeros_and_add_no_conflict_depth(
    name, base, bad_lane, bad_offset, code
):
    op, size, lanes, offset_dtype, _ = GATHERS[name]
    ctx = filled_j5()
    offsets = np.zeros(lanes, offset_dtype)
    offsets[bad_lane] = bad_offset
    offsets[bad_lane + 1 :] = 1  # misaligned for wider elements: still lane bad_lane is kept
    register, counts = counted(ctx, op, base, offsets)
    assert counts == {"gather_a": 1}
    assert not register.any()
    assert ctx.fault.tolist() == [code, base + bad_offset, GATHER_OPS[size], bad_lane]


def test_gathers_at_the_edges_of_the_window_and_the_tcm():
    ctx = filled_j5()
    last_word = TCM_BYTES - 4
    out = isa.gather_a_i32(ctx, TCM_BYTES - 65536, np.full(16, 65532, np.uint32))
    assert (out == ctx.tcm[last_word:].view(np.int32)[0]).all()
    out = isa.gather_a_u8(ctx, TCM_BYTES - 65536, np.full(32, 65535, np.uint16))
    assert (out == ctx.tcm[-1]).all()
    assert ctx.fault[0] == isa.FAULT_NONE
    with pytest.raises(ValueError, match="wrong number of lanes"):
        isa.gather_a_f32(ctx, 0, np.zeros(32, np.uint32))


@pytest.mark.parametrize(
    ("sub_banks", "width", "op", "offsets", "depth"),
    [
        (8, 4, isa.gather_a_f32, np.arange(16) * 4, 2),  # consecutive lanes
        (8, 4, isa.gather_a_f32, np.arange(16) * 32, 16),  # all in one sub-bank
        (8, 4, isa.gather_a_f32, np.zeros(16), 1),  # one address: coalesced
        (8, 4, isa.gather_a_f32, np.arange(16) % 2 * 32, 2),  # two words, one sub-bank
        (4, 4, isa.gather_a_u8, np.arange(32), 2),  # 32 bytes = 8 words over 4 sub-banks
        (4, 4, isa.gather_a_u8, np.arange(32) // 4 * 16, 8),  # 8 words, 4 lanes each
        (4, 8, isa.gather_a_i16, np.arange(32) * 2, 2),  # 8-byte words
        (4, 4, isa.gather_a_i32, np.arange(16) * 16 + np.arange(16) % 2 * 4, 8),
    ],
)
def test_conflict_depth_examples(sub_banks, width, op, offsets, depth):
    ctx = j5(sub_banks=sub_banks, width_bytes=width)
    offsets = offsets.astype(np.uint32 if op in (isa.gather_a_f32, isa.gather_a_i32)
                             else np.uint16)
    _, counts = counted(ctx, op, 4096, offsets)
    assert counts == {"gather_a": 1, "gather_conflict": depth}


def test_lanes_in_different_banks_do_not_conflict():
    ctx = j5(sub_banks=8, width_bytes=4)
    offsets = np.array([0, 32] * 8, np.uint32)  # words 0 and 8: both sub-bank 0 of a bank
    _, counts = counted(ctx, isa.gather_a_i32, BANK_BYTES - 32, offsets)
    assert counts == {"gather_a": 1, "gather_conflict": 1}
    _, counts = counted(ctx, isa.gather_a_i32, BANK_BYTES - 64, offsets)
    assert counts == {"gather_a": 1, "gather_conflict": 2}


@HYPOTHESIS
@given(
    words=st.lists(st.integers(0, 16383), min_size=16, max_size=16),
    geometry=st.sampled_from([(4, 4), (8, 4), (2, 8), (16, 4), (1, 4)]),
)
def test_conflict_depth_matches_reference_on_any_offsets(words, geometry):
    ctx = j5(*geometry)
    offsets = np.array(words, np.uint32) * 4
    _, counts = counted(ctx, isa.gather_a_f32, 0, offsets)
    assert counts["gather_conflict"] == ref.conflict_depth(offsets.tolist(), BANK_BYTES,
                                                           *geometry)


_STRIDED = {  # element size -> (gather, scatter, lanes, offset type)
    4: (isa.gather_a_i32, isa.scatter_i32, 16, np.uint32),
    2: (isa.gather_a_i16, isa.scatter_i16, 32, np.uint16),
    1: (isa.gather_a_u8, isa.scatter_i8, 32, np.uint16),
}


@settings(max_examples=300, deadline=None)
@given(
    size=st.sampled_from(sorted(_STRIDED)),
    geometry=st.sampled_from([(4, 4), (8, 4), (2, 8), (16, 4), (1, 4), (32, 4), (8, 16)]),
    stride=st.integers(0, 40),
    first=st.integers(0, 2048),
    base=st.sampled_from([0, 4096, BANK_BYTES - 1024, BANK_BYTES - 96, BANK_BYTES + 64]),
    descending=st.booleans(),
)
def test_conflict_depth_of_evenly_spaced_lanes_matches_reference(size, geometry, stride, first,
                                                                 base, descending):
    # Evenly spaced offsets take a closed form unless they step backwards, by part of a
    # sub-bank word, or across banks; every case must count what the reference counts.
    gather, scatter, lanes, offset_type = _STRIDED[size]
    ctx = j5(*geometry)
    offsets = first * size + np.arange(lanes) * stride * size
    if descending:
        offsets = offsets[::-1]
    offsets = offsets.astype(offset_type)
    depth = ref.conflict_depth((base + offsets.astype(np.int64)).tolist(), BANK_BYTES,
                               *geometry)
    _, counts = counted(ctx, gather, base, offsets)
    assert counts == {"gather_a": 1, "gather_conflict": depth}
    _, counts = counted(ctx, scatter, np.zeros(lanes, np.int32 if size == 4 else np.int16),
                        base, offsets)
    assert counts == {"scatter": 1, "scatter_conflict": depth}


@pytest.mark.parametrize(
    ("base", "stride", "depth"),
    [(0, 0, 1),  # one word
     (0, 4, 2),  # 16 consecutive words over 8 sub-banks
     (0, 20, 2),  # 5 words apart: every sub-bank twice
     (0, 8, 4),  # 2 words apart: 4 sub-banks, 4 words each
     (0, 32, 16),  # 8 words apart: all in sub-bank 0
     (BANK_BYTES - 256, 32, 8),  # across two banks: 8 lanes in each
     (0, 6, 2)],  # uneven steps: the general count (words 0,1,3,4,6,7,...)
)
def test_conflict_depth_of_strided_gathers_examples(base, stride, depth):
    ctx = j5(sub_banks=8, width_bytes=4)
    offsets = (np.arange(16) * stride).astype(np.uint32)
    if stride % 4:
        offsets = offsets // 4 * 4  # keep 32-bit lanes aligned: words 0,1,3,4,6,7,...
    assert depth == ref.conflict_depth((base + offsets.astype(np.int64)).tolist(),
                                       BANK_BYTES, 8, 4)
    _, counts = counted(ctx, isa.gather_a_i32, base, offsets)
    assert counts == {"gather_a": 1, "gather_conflict": depth}


# --- scatter -------------------------------------------------------------------------------


def test_scatter_writes_lanes_in_order_and_the_last_lane_wins():
    ctx = j5()
    values = np.arange(16, dtype=np.int32) * 1000 + 7
    offsets = np.array([0] * 8 + [4] * 7 + [64], np.uint32)
    _, counts = counted(ctx, isa.scatter_i32, values, 256, offsets)
    assert counts == {"scatter": 1, "scatter_conflict": 2}
    assert ctx.tcm[256:260].view(np.int32)[0] == 7007
    assert ctx.tcm[260:264].view(np.int32)[0] == 14007
    assert ctx.tcm[320:324].view(np.int32)[0] == 15007
    assert ctx.tcm.astype(bool).sum() <= 12
    _, counts = counted(ctx, isa.scatter_w)
    assert counts == {}


def test_scatter_variants_write_their_element_width():
    ctx = j5()
    f = np.linspace(-1, 1, 16).astype(np.float32)
    isa.scatter_f32(ctx, f, 0, (np.arange(16) * 8).astype(np.uint32))
    assert ctx.tcm[:128].view(np.float32)[::2].tolist() == f.tolist()
    assert not ctx.tcm[:128].view(np.float32)[1::2].any()
    h = (np.arange(32) * 0x0101 + 0x1234).astype(np.int16)
    _, counts = counted(ctx, isa.scatter_i16, h, 1000, (np.arange(32)[::-1] * 2).astype(np.uint16))
    assert counts == {"scatter": 1, "scatter_conflict": 4}
    assert ctx.tcm[1000:1064].view(np.int16).tolist() == h[::-1].tolist()
    _, counts = counted(ctx, isa.scatter_i8, h, 2001, np.arange(32, dtype=np.uint16))
    assert counts == {"scatter": 1, "scatter_conflict": 3}  # bytes 2001..2032: 9 words
    assert ctx.tcm[2001:2033].tolist() == (h.view(np.uint16) & 0xFF).tolist()
    assert ctx.tcm[2000] == 0 and ctx.tcm[2033] == 0


@pytest.mark.parametrize(
    ("op", "base", "bad_lane", "bad_offset", "code", "op_id"),
    [(isa.scatter_i32, 0, 10, 65536, isa.FAULT_OUT_OF_WINDOW, isa.OP_SCATTER32),
     (isa.scatter_f32, TCM_BYTES - 65532, 12, 65532, isa.FAULT_OUT_OF_TCM, isa.OP_SCATTER32),
     (isa.scatter_i32, 8, 3, 2, isa.FAULT_MISALIGNED, isa.OP_SCATTER32),
     (isa.scatter_i16, 3, 0, 0, isa.FAULT_MISALIGNED, isa.OP_SCATTER16),
     (isa.scatter_i8, TCM_BYTES - 65535, 31, 65535, isa.FAULT_OUT_OF_TCM, isa.OP_SCATTER8)],
)
def test_faulting_scatters_write_nothing_at_all(op, base, bad_lane, bad_offset, code, op_id):
    ctx = filled_j5()
    before = ctx.tcm.copy()
    lanes = 16 if op_id == isa.OP_SCATTER32 else 32
    vec = np.zeros(lanes, np.int32 if lanes == 16 else np.int16)
    if op is isa.scatter_f32:
        vec = vec.view(np.float32)
    offsets = (np.arange(lanes) * (4 if lanes == 16 else 2)).astype(
        np.uint32 if lanes == 16 else np.uint16)
    offsets[bad_lane] = bad_offset
    _, counts = counted(ctx, op, vec, base, offsets)
    assert counts == {"scatter": 1}
    assert np.array_equal(ctx.tcm, before)
    assert ctx.fault.tolist() == [code, base + bad_offset, op_id, bad_lane]


def test_random_memory_traffic_matches_the_reference_core():
    rng = np.random.default_rng(12)
    for sub_banks, width in [(4, 4), (8, 4), (2, 16)]:
        ctx = filled_j5(seed=sub_banks, sub_banks=sub_banks, width_bytes=width)
        core = ref.ReferenceCore(TCM_BYTES, BANK_BYTES, sub_banks, width)
        core.tcm[:] = ctx.tcm.tobytes()
        for step in range(150):
            kind = rng.integers(0, 6)
            # Mostly valid addresses near the end of the TCM, now and then a faulting one.
            base = int(rng.choice([0, 64 * rng.integers(0, 4096), TCM_BYTES - 65536,
                                   TCM_BYTES - 65536 + 4 * rng.integers(0, 8), -4, 2]))
            if kind == 0:
                address = int(rng.integers(-8, TCM_BYTES + 8))
                out = isa.loadu_u8(ctx, address)
                assert out.tobytes() == core.load(address, aligned=False)
            elif kind == 1:
                address = int(rng.integers(-2, TCM_BYTES // 64 + 2)) * 64 + int(
                    rng.choice([0, 0, 0, 4]))
                vec = rng.integers(0, 256, 64, dtype=np.uint8)
                isa.store(ctx, vec, address)
                core.store(vec.tobytes(), address, 64, isa.OP_STORE)
            elif kind == 2:
                offsets = (rng.integers(0, 16384, 16) * 4).astype(np.uint32)
                offsets[rng.integers(0, 16)] += int(rng.choice([0, 0, 0, 1, 65536]))
                out = isa.gather_a_i32(ctx, base, offsets)
                assert_gathered_like_reference(out, core, "i32", base, offsets)
            elif kind == 3:
                offsets = rng.integers(0, 65536, 32).astype(np.uint16)
                out = isa.gather_a_u8(ctx, base, offsets)
                assert_gathered_like_reference(out, core, "u8", base, offsets)
            elif kind == 4:
                offsets = (rng.integers(0, 64, 16) * 4).astype(np.uint32)  # many collisions
                offsets[rng.integers(0, 16)] += int(rng.choice([0, 0, 0, 2, 65536]))
                vec = rng.integers(I32_MIN, I32_MAX, 16).astype(np.int32)
                isa.scatter_i32(ctx, vec, base, offsets)
                core.scatter([vec[i : i + 1].tobytes() for i in range(16)], base,
                             offsets.tolist(), isa.OP_SCATTER32)
            else:
                offsets = rng.integers(0, 65536, 32).astype(np.uint16)
                vec = rng.integers(-32768, 32768, 32).astype(np.int16)
                isa.scatter_i8(ctx, vec, base, offsets)
                core.scatter([vec[i : i + 1].tobytes()[:1] for i in range(32)], base,
                             offsets.tolist(), isa.OP_SCATTER8)
            assert ctx.counters.tolist() == core.counters, step
            assert tuple(ctx.fault.tolist()) == core.fault, step
            if step % 10 == 0:
                isa.clear_fault(ctx)
                core.fault = (isa.FAULT_NONE, 0, 0, 0)
        assert ctx.tcm.tobytes() == bytes(core.tcm)


# --- kernels written with the ops ----------------------------------------------------------


@njit
def _pack_xyzr_kernel(ctx: isa.Context, src: int, dst: int, vectors: int) -> None:
    """Four int32 planes of int8-range values at src -> one int32 per point, bytes x, y, z, r."""
    plane = vectors * 64
    for i in range(vectors):
        x = isa.load_i32(ctx, src + i * 64)
        y = isa.load_i32(ctx, src + plane + i * 64)
        z = isa.load_i32(ctx, src + 2 * plane + i * 64)
        r = isa.load_i32(ctx, src + 3 * plane + i * 64)
        xy = isa.interleave_even_i8(ctx, x, y)
        zr = isa.interleave_even_i8(ctx, z, r)
        isa.store(ctx, isa.interleave_even_i16(ctx, xy, zr), dst + i * 64)


def test_xyzr_packing_kernel_matches_numpy():
    ctx = j5()
    rng = np.random.default_rng(13)
    vectors = 40
    planes = rng.integers(-128, 128, (4, vectors * 16)).astype(np.int32)
    ctx.tcm[: planes.nbytes] = planes.reshape(-1).view(np.uint8)
    dst = 65536
    _pack_xyzr_kernel(ctx, 0, dst, vectors)
    packed = ctx.tcm[dst : dst + vectors * 64].view(np.int8).reshape(-1, 4)
    assert np.array_equal(packed, planes.T.astype(np.int8))
    expected = np.zeros(isa.N_COUNTERS, np.int64)
    expected[[isa.C_LOAD, isa.C_STORE, isa.C_ALU]] = [4 * vectors, vectors, 3 * vectors]
    assert ctx.counters.tolist() == expected.tolist()
    assert ctx.fault[0] == isa.FAULT_NONE


@njit
def _pillar_index_kernel(
    ctx: isa.Context, points: int, out: int, vectors: int, box: np.ndarray, inv_cell: np.ndarray
) -> None:
    """Seed-style inner loop: gather x, y, z of 16 interleaved 5-float points, compute the
    pillar index (y << 16) + x, or -1 outside the box, and scatter it."""
    lane_offsets = (np.arange(16) * 20).astype(np.uint32)
    out_offsets = (np.arange(16) * 4).astype(np.uint32)
    back, front = isa.splat_f32(ctx, box[0]), isa.splat_f32(ctx, box[1])
    right, left = isa.splat_f32(ctx, box[2]), isa.splat_f32(ctx, box[3])
    bottom, top = isa.splat_f32(ctx, box[4]), isa.splat_f32(ctx, box[5])
    inv_x, inv_y = isa.splat_f32(ctx, inv_cell[0]), isa.splat_f32(ctx, inv_cell[1])
    minus_one = isa.splat_i32(ctx, -1)
    for i in range(vectors):
        base = points + i * 16 * 20
        x = isa.gather_d(ctx, isa.gather_a_f32(ctx, base, lane_offsets))
        y = isa.gather_d(ctx, isa.gather_a_f32(ctx, base + 4, lane_offsets))
        z = isa.gather_d(ctx, isa.gather_a_f32(ctx, base + 8, lane_offsets))
        idx = isa.trunc_f32_i32(ctx, isa.mul_f32(ctx, isa.sub_f32(ctx, x, back), inv_x))
        idy = isa.trunc_f32_i32(ctx, isa.mul_f32(ctx, isa.sub_f32(ctx, y, right), inv_y))
        pillar = isa.add_i32(ctx, isa.sll_i32(ctx, idy, 16), idx)
        skip = isa.or_b(ctx, isa.ule_f32(ctx, x, back), isa.ule_f32(ctx, front, x))
        skip = isa.or_b(ctx, skip, isa.ule_f32(ctx, y, right))
        skip = isa.or_b(ctx, skip, isa.ule_f32(ctx, left, y))
        skip = isa.or_b(ctx, skip, isa.ule_f32(ctx, z, bottom))
        skip = isa.or_b(ctx, skip, isa.ule_f32(ctx, top, z))
        pillar = isa.mov_t(ctx, minus_one, pillar, skip)
        isa.scatter_i32(ctx, pillar, out + i * 64, out_offsets)
    isa.scatter_w(ctx)


def test_pillar_index_kernel_matches_numpy():
    ctx = j5()
    rng = np.random.default_rng(14)
    vectors = 50
    points = rng.uniform(-60, 60, (vectors * 16, 5)).astype(np.float32)
    points[:, 2] = rng.uniform(-6, 4, vectors * 16)
    points[3, 0] = NAN  # a NaN point is outside the box (unordered compares)
    points[4, 1] = -INF
    ctx.tcm[: points.nbytes] = points.reshape(-1).view(np.uint8)
    box = np.array([-51.2, 51.2, -51.2, 51.2, -5.0, 3.0], np.float32)
    inv_cell = np.array([1 / 0.2, 1 / 0.2], np.float32)
    out = 131072
    _pillar_index_kernel(ctx, 0, out, vectors, box, inv_cell)

    x, y, z = points[:, 0], points[:, 1], points[:, 2]
    idx = np.trunc((x - box[0]) * inv_cell[0])
    idy = np.trunc((y - box[2]) * inv_cell[1])
    inside = (x > box[0]) & (box[1] > x) & (y > box[2]) & (box[3] > y) & (z > box[4]) & (
        box[5] > z)
    expected = np.where(inside, idy.astype(np.int64) * 65536 + idx.astype(np.int64), -1)
    assert ctx.tcm[out : out + vectors * 64].view(np.int32).tolist() == expected.tolist()
    assert expected[3] == -1 and expected[4] == -1 and (expected >= 0).sum() > 100

    per_vector = {"gather_a": 3, "gather_d": 3, "scatter": 1, "alu": 16, "mul": 2, "cvt": 2}
    counts = dict(zip(isa.COUNTER_NAMES, ctx.counters.tolist(), strict=True))
    for name, n in per_vector.items():
        assert counts[name] == n * vectors + (9 if name == "alu" else 0), name
    # Points are 20 bytes apart: 16 x 5 words fall in 4 sub-banks, 4 distinct words each.
    assert counts["gather_conflict"] == 3 * 4 * vectors
    assert counts["scatter_conflict"] == 4 * vectors
    assert ctx.fault[0] == isa.FAULT_NONE


# --- ops for computer-vision kernels -------------------------------------------------------
# One table: (op, the kinds of its arguments, a whole-vector reference on lists of Python
# numbers, the result's lane type (None for a scalar), counter, ticks).

def _lanes2(f: Callable[[Any, Any], Any]) -> Callable[[list[Any], list[Any]], list[Any]]:
    return lambda a, b: [f(x, y) for x, y in zip(a, b, strict=True)]


CV_OPS: list[tuple[Callable[..., Any], tuple[str, ...], Callable[..., Any], Any, str, int]] = [
    (isa.min_u8, ("u8", "u8"), _lanes2(min), np.uint8, "alu", 1),
    (isa.max_u8, ("u8", "u8"), _lanes2(max), np.uint8, "alu", 1),
    (isa.absdiff_u8, ("u8", "u8"), ref.absdiff, np.uint8, "alu", 1),
    (isa.avg_u8, ("u8", "u8"), ref.avg_round, np.uint8, "alu", 1),
    (isa.adds_u8, ("u8", "u8"), lambda a, b: ref.add_saturating(a, b, 0, 255), np.uint8, "alu",
     1),
    (isa.subs_u8, ("u8", "u8"), lambda a, b: ref.sub_saturating(a, b, 0, 255), np.uint8, "alu",
     1),
    (isa.lt_u8, ("u8", "u8"), _lanes2(lambda x, y: x < y), np.bool_, "alu", 1),
    (isa.le_u8, ("u8", "u8"), _lanes2(lambda x, y: x <= y), np.bool_, "alu", 1),
    (isa.eq_u8, ("u8", "u8"), _lanes2(lambda x, y: x == y), np.bool_, "alu", 1),
    (isa.splat_u8, ("byte",), lambda x: [x] * 64, np.uint8, "alu", 1),
    (isa.min_u16, ("u16", "u16"), _lanes2(min), np.uint16, "alu", 1),
    (isa.max_u16, ("u16", "u16"), _lanes2(max), np.uint16, "alu", 1),
    (isa.lt_u16, ("u16", "u16"), _lanes2(lambda x, y: x < y), np.bool_, "alu", 1),
    (isa.abs_i16, ("i16",), lambda a: ref.abs_wrapping(a, 16), np.int16, "alu", 1),
    (isa.adds_i16, ("i16", "i16"), lambda a, b: ref.add_saturating(a, b, -32768, 32767),
     np.int16, "alu", 1),
    (isa.subs_i16, ("i16", "i16"), lambda a, b: ref.sub_saturating(a, b, -32768, 32767),
     np.int16, "alu", 1),
    (isa.and_i16, ("i16", "i16"), _lanes2(lambda x, y: x & y), np.int16, "alu", 1),
    (isa.or_i16, ("i16", "i16"), _lanes2(lambda x, y: x | y), np.int16, "alu", 1),
    (isa.xor_i16, ("i16", "i16"), _lanes2(lambda x, y: x ^ y), np.int16, "alu", 1),
    (isa.abs_i32, ("i32",), lambda a: ref.abs_wrapping(a, 32), np.int32, "alu", 1),
    (isa.and_i32, ("i32", "i32"), _lanes2(lambda x, y: x & y), np.int32, "alu", 1),
    (isa.or_i32, ("i32", "i32"), _lanes2(lambda x, y: x | y), np.int32, "alu", 1),
    (isa.xor_i32, ("i32", "i32"), _lanes2(lambda x, y: x ^ y), np.int32, "alu", 1),
    (isa.mul_lo_u8_i16, ("u8", "i16"), lambda a, b: ref.mul_widening(a, b, 0, 0, 32, 16),
     np.int16, "mul", 1),
    (isa.mul_hi_u8_i16, ("u8", "i16"), lambda a, b: ref.mul_widening(a, b, 32, 0, 32, 16),
     np.int16, "mul", 1),
    (isa.mula_lo_u8_i16, ("i16", "u8", "i16"),
     lambda acc, a, b: ref.mul_accumulate(acc, a, b, 0, 0, 16), np.int16, "mul", 1),
    (isa.mula_hi_u8_i16, ("i16", "u8", "i16"),
     lambda acc, a, b: ref.mul_accumulate(acc, a, b, 32, 0, 16), np.int16, "mul", 1),
    (isa.mula_i16, ("i16", "i16", "i16"),
     lambda acc, a, b: ref.mul_accumulate(acc, a, b, 0, 0, 16), np.int16, "mul", 1),
    (isa.mul_lo_i16_i32, ("i16", "i16"), lambda a, b: ref.mul_widening(a, b, 0, 0, 16, 32),
     np.int32, "mul", 1),
    (isa.mul_hi_i16_i32, ("i16", "i16"), lambda a, b: ref.mul_widening(a, b, 16, 16, 16, 32),
     np.int32, "mul", 1),
    (isa.mula_lo_i16_i32, ("i32", "i16", "i16"),
     lambda acc, a, b: ref.mul_accumulate(acc, a, b, 0, 0, 32), np.int32, "mul", 1),
    (isa.mula_hi_i16_i32, ("i32", "i16", "i16"),
     lambda acc, a, b: ref.mul_accumulate(acc, a, b, 16, 16, 32), np.int32, "mul", 1),
    (isa.mula_i32, ("i32", "i32", "i32"),
     lambda acc, a, b: ref.mul_accumulate(acc, a, b, 0, 0, 32), np.int32, "mul", 1),
    (isa.mula_f32, ("f32", "f32", "f32"), ref.mul_accumulate_f32, np.float32, "mul", 1),
    (isa.fma_f32, ("f32", "f32", "f32"), ref.fused_multiply_add_f32, np.float32, "mul", 1),
    (isa.srar_i16, ("i16", "count"), ref.shift_rounding, np.int16, "alu", 1),
    (isa.srar_i32, ("i32", "count"), ref.shift_rounding, np.int32, "alu", 1),
    (isa.packr_i32_i16, ("i32", "i32", "count"),
     lambda a, b, k: ref.pack_rounding(a, b, k, -32768, 32767), np.int16, "cvt", 1),
    (isa.packr_i16_u8, ("i16", "i16", "count"),
     lambda a, b, k: ref.pack_rounding(a, b, k, 0, 255), np.uint8, "cvt", 1),
    (isa.unpack_lo_u16_i32, ("u16",), lambda a: a[:16], np.int32, "cvt", 1),
    (isa.unpack_hi_u16_i32, ("u16",), lambda a: a[16:], np.int32, "cvt", 1),
    (isa.shfl_u8, ("u8", "idx"), ref.shuffle, np.uint8, "alu", 1),
    (isa.sel_u8, ("u8", "u8", "idx"), ref.select2, np.uint8, "alu", 1),
    (isa.interleave_lo_u8, ("u8", "u8"), lambda a, b: ref.interleave(a, b, 0), np.uint8, "alu",
     1),
    (isa.interleave_hi_u8, ("u8", "u8"), lambda a, b: ref.interleave(a, b, 1), np.uint8, "alu",
     1),
    (isa.interleave_lo_i16, ("i16", "i16"), lambda a, b: ref.interleave(a, b, 0), np.int16,
     "alu", 1),
    (isa.interleave_hi_i16, ("i16", "i16"), lambda a, b: ref.interleave(a, b, 1), np.int16,
     "alu", 1),
    (isa.deinterleave_even_u8, ("u8", "u8"), lambda a, b: ref.deinterleave(a, b, 0), np.uint8,
     "alu", 1),
    (isa.deinterleave_odd_u8, ("u8", "u8"), lambda a, b: ref.deinterleave(a, b, 1), np.uint8,
     "alu", 1),
    (isa.radd_i16, ("i16",), lambda a: ref.wrap(sum(a), 32), None, "alu", 5),
    (isa.rmin_u8, ("u8",), min, None, "alu", 6),
    (isa.rmax_u8, ("u8",), max, None, "alu", 6),
    (isa.rmin_i32, ("i32",), min, None, "alu", 4),
    (isa.floor_f32_i32, ("f32",), lambda a: [ref.to_i32(x, "floor") for x in a], np.int32,
     "cvt", 2),
]

CV_KINDS: dict[str, tuple[Any, list[Any]]] = {  # kind: (lane type, edge values)
    "u8": (np.uint8, [0, 1, 2, 127, 128, 129, 254, 255]),
    "idx": (np.uint8, [0, 1, 63, 64, 65, 127, 128, 191, 255]),
    "u16": (np.uint16, [0, 1, 255, 32767, 32768, 65534, 65535]),
    "i16": (np.int16, [0, 1, -1, 2, -32768, 32767, -32767, 32766, 255, -256, 12345]),
    "i32": (np.int32, [0, 1, -1, 2, I32_MIN, I32_MAX, I32_MIN + 1, I32_MAX - 1, 65536, -65537,
                       46341, 32767, -32768]),
    "f32": (np.float32, SPECIAL_F32),
}
CV_COUNTS = [0, 1, 2, 5, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 100]


def cv_inputs(kinds: tuple[str, ...], seed: int) -> list[tuple[Any, ...]]:
    """Argument tuples for an op: edge values of each vector argument in a mixed-radix
    pattern (so that the first two meet in every pair), then random ones; a count argument
    takes each of CV_COUNTS."""
    rng = np.random.default_rng(seed)
    if kinds == ("byte",):
        return [(x,) for x in (0, 1, 127, 128, 255)]
    vector_sets: list[list[np.ndarray]] = []
    for block in range(3):
        vectors, radix = [], 1
        for kind in kinds:
            if kind == "count":
                continue
            dtype, edges = CV_KINDS[kind]
            lanes = 64 // np.dtype(dtype).itemsize
            pattern = [edges[((block * 64 + i) // radix) % len(edges)] for i in range(lanes)]
            vectors.append(np.array(pattern, dtype))
            radix *= len(edges)
        vector_sets.append(vectors)
    for _ in range(4):
        vectors = []
        for kind in kinds:
            if kind == "count":
                continue
            dtype = CV_KINDS[kind][0]
            lanes = 64 // np.dtype(dtype).itemsize
            if dtype == np.float32:
                vectors.append((rng.standard_normal(lanes) * 1e3).astype(np.float32))
            else:
                info = np.iinfo(dtype)
                vectors.append(rng.integers(info.min, info.max, lanes, endpoint=True)
                               .astype(dtype))
        vector_sets.append(vectors)
    if "count" not in kinds:
        return [tuple(v) for v in vector_sets]
    return [(*v, count) for v in vector_sets for count in CV_COUNTS]


def assert_same_result(actual: Any, expected: Any, result: Any) -> None:
    if result is None:
        assert actual == expected
    elif result == np.float32:
        assert_same_f32(actual, expected)
    else:
        assert actual.dtype == result
        assert actual.tolist() == list(expected)


def _cv_id(value: Any) -> str:
    return getattr(value, "__name__", "")


@pytest.mark.parametrize(("op", "kinds", "reference", "result", "counter", "ticks"), CV_OPS,
                         ids=_cv_id)
def test_cv_op_matches_reference_and_counts(op, kinds, reference, result, counter, ticks):
    ctx = j5()
    for args in cv_inputs(kinds, seed=len(op.__name__)):
        out, counts = counted(ctx, op, *args)
        lists = [a.tolist() if isinstance(a, np.ndarray) else a for a in args]
        assert_same_result(out, reference(*lists), result)
        assert counts == {counter: ticks}


@pytest.mark.parametrize(("op", "kinds", "reference", "result", "counter", "ticks"), CV_OPS,
                         ids=_cv_id)
def test_cv_op_rejects_vectors_of_the_wrong_lane_count(op, kinds, reference, result, counter,
                                                       ticks):
    args = cv_inputs(kinds, seed=1)[0]
    for k, arg in enumerate(args):
        if isinstance(arg, np.ndarray):
            short = list(args)
            short[k] = arg[: arg.size // 2].copy()
            with pytest.raises(ValueError, match="wrong number of lanes"):
                op(j5(), *short)
    if "count" in kinds:
        with pytest.raises(ValueError, match="negative"):
            op(j5(), *args[:-1], -1)


@pytest.mark.parametrize(("op", "kinds", "reference", "result", "counter", "ticks"),
                         [row for row in CV_OPS if row[3] is not None], ids=_cv_id)
def test_cv_op_may_write_over_any_input_of_its_result_type(op, kinds, reference, result,
                                                           counter, ticks):
    for args in cv_inputs(kinds, seed=2)[:4]:
        expected = op(j5(), *args)
        for k, arg in enumerate(args):
            if (isinstance(arg, np.ndarray) and arg.dtype == expected.dtype
                    and arg.size == expected.size):
                aliased = list(args)
                aliased[k] = arg.copy()
                given_back = op(j5(), *aliased, aliased[k])
                assert given_back is aliased[k]
                assert given_back.tobytes() == expected.tobytes(), k


def test_fma_rounds_once_where_the_unfused_op_rounds_twice():
    ctx = j5()
    # (1 + 2**-12)**2 = 1 + 2**-11 + 2**-24: the product alone rounds to 1 + 2**-11, and then
    # -1 - 2**-11 leaves 0; fused, the 2**-24 survives.
    x = np.full(16, 1 + 2**-12, np.float32)
    acc = np.full(16, -(1 + 2**-11), np.float32)
    assert isa.mula_f32(ctx, acc, x, x).tolist() == [0.0] * 16
    assert isa.fma_f32(ctx, acc, x, x).tolist() == [2**-24] * 16
    # A sum the float64 addition lands exactly halfway between two float32: the true value
    # 1 + 3 * 2**-24 - 2**-64 is just below it, so it rounds down, where rounding the float64
    # sum (ties to even) would go up to 1 + 2**-22.
    x = np.full(16, 2**-12 * (1 + 2**-20), np.float32)
    y = np.full(16, 2**-12 * (1 - 2**-20), np.float32)
    acc = np.full(16, 1 + 2**-23, np.float32)
    assert isa.fma_f32(ctx, acc, x, y).tolist() == [1 + 2**-23] * 16
    # and 1 + 2**-24 + 2**-64 is just above the midpoint of 1 and 1 + 2**-23: up, where ties
    # to even would give 1.
    assert isa.fma_f32(ctx, acc, x, -y).tolist() == [1 + 2**-23] * 16
    rng = np.random.default_rng(3)
    for _ in range(100):
        a, b, c = (rng.standard_normal(16).astype(np.float32) for _ in range(3))
        assert isa.fma_f32(ctx, c, a, b).tolist() == ref.fused_multiply_add_f32(c, a, b)


def test_cv_ops_by_hand():
    ctx = j5()
    u8 = np.zeros(64, np.uint8)
    u8[:4] = [10, 200, 255, 0]
    v8 = np.zeros(64, np.uint8)
    v8[:4] = [20, 100, 1, 255]
    assert isa.absdiff_u8(ctx, u8, v8)[:4].tolist() == [10, 100, 254, 255]
    assert isa.avg_u8(ctx, u8, v8)[:4].tolist() == [15, 150, 128, 128]
    assert isa.adds_u8(ctx, u8, v8)[:4].tolist() == [30, 255, 255, 255]
    assert isa.subs_u8(ctx, u8, v8)[:4].tolist() == [0, 100, 254, 0]
    h = np.array([5, -5, 6, -6, 7, -7, 32767, -32768] * 4, np.int16)
    assert isa.srar_i16(ctx, h, 1)[:8].tolist() == [3, -2, 3, -3, 4, -3, 16384, -16384]
    assert isa.srar_i16(ctx, h, 0).tolist() == h.tolist()
    assert isa.srar_i16(ctx, h, 16).tolist() == [0] * 32
    w = np.array([I32_MAX, I32_MIN, 3, -3] * 4, np.int32)
    assert isa.srar_i32(ctx, w, 1)[:4].tolist() == [2**30, -(2**30), 2, -1]
    assert isa.packr_i32_i16(ctx, w, w, 2)[:4].tolist() == [32767, -32768, 1, -1]
    assert isa.packr_i16_u8(ctx, h, h, 1)[:8].tolist() == [3, 0, 3, 0, 4, 0, 255, 0]
    assert isa.abs_i16(ctx, h)[6:8].tolist() == [32767, -32768]
    assert isa.radd_i16(ctx, np.full(32, -32768, np.int16)) == -32768 * 32
    assert isa.rmin_u8(ctx, u8) == 0 and isa.rmax_u8(ctx, u8) == 255
    # 8-bit pixel times 16-bit coefficient, accumulated in 16 bits, wraps.
    coef = np.full(32, 300, np.int16)
    assert isa.mul_lo_u8_i16(ctx, u8, coef)[:3].tolist() == [3000, 60000 - 65536, 76500 - 65536]
    acc = np.full(32, 30000, np.int16)
    assert isa.mula_lo_u8_i16(ctx, acc, u8, coef)[0] == ref.wrap(33000, 16)
    assert isa.mul_hi_i16_i32(ctx, h, h)[6:8].tolist() == [32767**2, 2**30]
    # Not fused: (1 + 2**-12)**2 = 1 + 2**-11 + 2**-24 rounds to 1 + 2**-11 first.
    a = np.full(16, 1 + 2**-12, np.float32)
    minus = np.full(16, -(1 + 2**-11), np.float32)
    assert isa.mula_f32(ctx, minus, a, a).tolist() == [0.0] * 16
    table = np.arange(64, dtype=np.uint8)[::-1].copy()
    idx = np.array([0, 63, 64, 255] * 16, np.uint8)
    assert isa.shfl_u8(ctx, table, idx)[:4].tolist() == [63, 0, 63, 0]
    low, high = np.arange(64, dtype=np.uint8), np.arange(64, 128, dtype=np.uint8)
    assert isa.sel_u8(ctx, low, high, idx)[:4].tolist() == [0, 63, 64, 127]
    assert isa.interleave_lo_u8(ctx, low, high)[:4].tolist() == [0, 64, 1, 65]
    assert isa.interleave_hi_u8(ctx, low, high)[:4].tolist() == [32, 96, 33, 97]
    assert isa.deinterleave_even_u8(ctx, low, high)[30:34].tolist() == [60, 62, 64, 66]
    assert isa.deinterleave_odd_u8(ctx, low, high)[:2].tolist() == [1, 3]
    f = np.array([-0.5, 2.5, -2.5, NAN, INF, -INF, 3e9, -3e9] * 2, np.float32)
    assert isa.floor_f32_i32(ctx, f)[:8].tolist() == [-1, 2, -3, 0, I32_MAX, I32_MIN, I32_MAX,
                                                      I32_MIN]


def test_interleaves_and_deinterleaves_undo_each_other():
    ctx = j5()
    rng = np.random.default_rng(21)
    a, b = (rng.integers(0, 256, 64).astype(np.uint8) for _ in "ab")
    lo, hi = isa.interleave_lo_u8(ctx, a, b), isa.interleave_hi_u8(ctx, a, b)
    assert isa.deinterleave_even_u8(ctx, lo, hi).tolist() == a.tolist()
    assert isa.deinterleave_odd_u8(ctx, lo, hi).tolist() == b.tolist()


# --- destination registers -----------------------------------------------------------------


def _destination_cases() -> list[tuple[Callable[..., Any], tuple[Any, ...]]]:
    """Every op that produces a vector, with arguments that make it do real work."""
    rng = np.random.default_rng(11)
    f = rng.normal(0, 1000, 16).astype(np.float32)
    g = rng.normal(0, 1000, 16).astype(np.float32)
    f[3], g[5] = NAN, -INF
    i32 = rng.integers(-(2**31), 2**31, 16, endpoint=False).astype(np.int32)
    j32 = rng.integers(-(2**31), 2**31, 16, endpoint=False).astype(np.int32)
    i16 = rng.integers(-(2**15), 2**15, 32).astype(np.int16)
    j16 = rng.integers(-(2**15), 2**15, 32).astype(np.int16)
    i8 = rng.integers(-128, 128, 64).astype(np.int8)
    m16, n16 = i32 < j32, f > g
    m32 = i16 < j16
    off32 = (rng.permutation(256)[:16] * 4).astype(np.uint32)
    off16 = rng.integers(0, 4096, 32).astype(np.uint16)
    cases: list[tuple[Callable[..., Any], tuple[Any, ...]]] = [
        (isa.splat_f32, (2.5,)), (isa.splat_i32, (-7,)), (isa.splat_i16, (300,)),
        (isa.splat_i8, (-3,)),
        (isa.gather_a_f32, (64, off32)), (isa.gather_a_i32, (64, off32)),
        (isa.gather_a_i16, (64, off16 & 0xFFFE)), (isa.gather_a_i8, (63, off16)),
        (isa.gather_a_u8, (63, off16)),
        (isa.gather_d, (f,)), (isa.gather_d_lo_i8, (i16,)), (isa.gather_d_hi_i8, (i8, i16)),
        (isa.frecip_f32, (f,)), (isa.abs_f32, (f,)), (isa.neg_f32, (f,)),
        (isa.firint_f32, (f,)), (isa.trunc_f32_i32, (f,)), (isa.round_f32_i32, (f,)),
        (isa.cvt_i32_f32, (i32,)),
        (isa.pack_i32_i16, (i32, j32)), (isa.pack_i16_i8, (i16, j16)),
        (isa.pack_i16_u8, (i16, j16)),
        (isa.and_b, (m16, n16)), (isa.or_b, (m16, n16)), (isa.not_b, (m32,)),
        (isa.mov_t, (f, g, m16)), (isa.mov_t, (i8, i8[::-1].copy(), i8 > 0)),
        (isa.interleave_even_i8, (i32, j32)), (isa.interleave_even_i16, (i16, j16)),
    ]
    for name in ("f32", "i32", "u32", "i16", "u16", "i8", "u8"):
        cases += [(getattr(isa, f"load_{name}"), (128,)), (getattr(isa, f"loadu_{name}"), (3,))]
    for source in ("lo_i8_i16", "hi_i8_i16", "lo_u8_i16", "hi_u8_i16", "lo_i16_i32",
                   "hi_i16_i32"):
        cases.append((getattr(isa, f"unpack_{source}"), (i8,)))
    cases += [(op, (f, g)) for op, *_ in FLOAT_BINARY]
    cases += [(op, (i32, j32) if bits == 32 else (i16, j16)) for op, _, bits, _ in INT_BINARY]
    cases += [(op, (i32, 5) if bits == 32 else (i16, 5)) for op, _, bits in SHIFTS]
    for op in (isa.lt_f32, isa.le_f32, isa.eq_f32, isa.ult_f32, isa.ule_f32):
        cases.append((op, (f, g)))
    for op in (isa.lt_i32, isa.le_i32, isa.eq_i32, isa.ltu_i32):
        cases.append((op, (i32, j32)))
    for op in (isa.lt_i16, isa.le_i16, isa.eq_i16, isa.ltu_i16):
        cases.append((op, (i16, j16)))
    for op, kinds, _, result, _, _ in CV_OPS:
        if result is not None:
            cases.append((op, cv_inputs(kinds, seed=11)[-1]))
    return cases


DESTINATION_CASES = _destination_cases()


def test_every_vector_op_takes_a_destination_and_is_covered_here():
    def takes_out(name: str) -> bool:
        py_func = getattr(getattr(isa, name), "py_func", None)
        return py_func is not None and "out" in py_func.__code__.co_varnames

    with_out = {name for name in dir(isa) if not name.startswith("_") and takes_out(name)}
    covered = {op.__name__ for op, _ in DESTINATION_CASES}
    assert with_out == covered
    # Called from Python without `out`, each makes it there and runs its destination form
    # (emu.jit.njit_op), which the test below checks gives the same result and counts.
    assert {name for name in with_out if getattr(isa, name).new_out is None} == set()


@pytest.mark.parametrize(("op", "args"), DESTINATION_CASES,
                         ids=lambda v: getattr(v, "__name__", ""))
def test_a_destination_gets_the_same_result_and_counts(op, args):
    ctx = filled_j5(seed=5)
    fresh, fresh_counts = counted(ctx, op, *args)
    out = np.full_like(fresh, 0x5A)  # stale contents must not leak into the result
    given_back, out_counts = counted(ctx, op, *args, out)
    assert given_back is out
    assert out.dtype == fresh.dtype and out.tobytes() == fresh.tobytes()
    assert out_counts == fresh_counts
    assert ctx.fault[0] == isa.FAULT_NONE


@pytest.mark.parametrize(("op", "args"), DESTINATION_CASES,
                         ids=lambda v: getattr(v, "__name__", ""))
def test_a_destination_of_the_wrong_lane_count_is_rejected(op, args):
    ctx = j5()
    fresh = op(ctx, *args)
    with pytest.raises(ValueError, match="wrong number of lanes"):
        op(ctx, *args, np.zeros(fresh.size // 2, fresh.dtype))


def test_a_destination_of_the_wrong_lane_type_is_a_typing_error():
    from numba.core.errors import TypingError

    ctx = j5()
    with pytest.raises(TypingError):
        isa.add_i32(ctx, np.ones(16, np.int32), np.ones(16, np.int32), np.zeros(16, np.float32))


# The ops whose first operand is a vector. Which of them give a result of that vector's lane
# type and count is found by running them, inside the test: running ops while the module is
# collected would compile them in every pytest-xdist worker at once.
FIRST_OPERAND_VECTOR = [(op, args) for op, args in DESTINATION_CASES
                        if args and isinstance(args[0], np.ndarray)]


@pytest.mark.parametrize(("op", "args"), FIRST_OPERAND_VECTOR,
                         ids=lambda v: getattr(v, "__name__", ""))
def test_a_lane_wise_op_may_write_over_its_first_operand_and_others_refuse_it(op, args):
    from numba.core.errors import TypingError

    ctx = j5()
    expected = op(ctx, *args)
    first = args[0].copy()
    if expected.dtype != first.dtype or expected.size != first.size:
        with pytest.raises((TypingError, ValueError)):
            op(ctx, first, *args[1:], first)
        return
    result = op(ctx, first, *args[1:], first)
    assert result is first and first.tobytes() == expected.tobytes()


_PLAIN_PYTHON_SCRIPT = """
import hashlib
import numpy as np
from emu.vdsp import isa
from emu.vdsp.ops import pointcloud_kernels as dsp_kernels
from emu.workloads.pointcloud.params import CENTERPOINT as P
ctx = isa.make_context(262144, 131072, 8, 4)
rng = np.random.default_rng(3)
points = rng.uniform(-60, 60, (64, 5)).astype(np.float32)
points[5, 0] = np.nan
ctx.tcm[: points.nbytes] = points.view(np.uint8).ravel()
dsp_kernels.stage1_quantize_first(ctx, 0, 131072, 64, 5, P.f32(), P.x_len, P.y_len)
print(hashlib.sha1(ctx.tcm.tobytes()).hexdigest(), ctx.counters.tolist(), ctx.fault.tolist())
"""


def test_ops_and_kernels_run_as_plain_python_with_the_jit_disabled():
    # emu.jit promises NUMBA_DISABLE_JIT=1 for debugging: the context then is a plain object.
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    outputs = []
    for disable in ("0", "1"):
        env = {**os.environ, "NUMBA_DISABLE_JIT": disable, "PYTHONPATH": root}
        done = subprocess.run([sys.executable, "-c", _PLAIN_PYTHON_SCRIPT], env=env,
                              capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1]
