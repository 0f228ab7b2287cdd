"""The quantised kernels of `emu.nn.kernels` equal the slow reference bit for bit."""

from __future__ import annotations

import math
from fractions import Fraction
from functools import partial

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from emu.errors import InputError
from emu.nn import kernels as k
from emu.nn.kernels import FixedPoint, QuantisationError
from tests.nn import kernels_reference as ref

I8, I16 = np.int8, np.int16


def ints(rng, shape, lo=-128, hi=127, dtype=I8):
    return rng.integers(lo, hi + 1, shape).astype(dtype)


def pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def same(a, b):
    """Equal shapes, types and values."""
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)


def check_conv(x, w, bias, *, in_scale, w_scales, out_scale, stride=1, padding=0,
               dilation=1, groups=1, activation="none", out_dtype=I8):
    """Both paths of `Conv2d` against the reference, accumulators and outputs."""
    pads = (padding,) * 4 if isinstance(padding, int) else tuple(padding) * (4 // len(padding))
    geometry = (pair(stride), pads, pair(dilation), groups)
    expected = ref.conv2d(x, w, bias, in_scale, w_scales, out_scale, *geometry, activation,
                          out_dtype)
    accs = np.array(ref.conv2d_acc(x, w, bias, *geometry), dtype=np.int64)
    for path in ("blas", "direct"):
        conv = k.Conv2d(w, bias, in_scale=in_scale, w_scales=w_scales, out_scale=out_scale,
                        stride=stride, padding=padding, dilation=dilation, groups=groups,
                        activation=activation, in_dtype=x.dtype, out_dtype=out_dtype,
                        path=path)
        assert same(conv.accumulate(x), accs), path
        assert same(conv(x), expected), path
    return expected


# ---- the fixed-point multiplier -----------------------------------------------------------

@pytest.mark.parametrize(("real", "expected"), [
    (0.5, (2**30, 0)),
    (1.0, (2**30, -1)),
    (0.75, (3 * 2**29, 0)),
    (3.0, (3 * 2**29, -2)),
    (2.0**-32, (2**30, 31)),
    (2.0**29, (2**30, -30)),
    (0.1, (1717986918, 3)),       # 0.1 x 2**34 = 1717986918.4 -> rounds down
])
def test_multiplier_by_hand(real, expected):
    assert k.quantize_multiplier(real) == expected == ref.fixed_point(real)


def test_multiplier_that_rounds_up_to_the_next_power_of_two():
    real = 0.5 * (2 - 2.0**-40)                    # m x 2**31 = 2**31 - 2**-10 rounds up
    assert k.quantize_multiplier(real) == (2**30, -1) == ref.fixed_point(real)


@settings(deadline=None, max_examples=500)
@given(st.floats(min_value=2.0**-32, max_value=2.0**30, exclude_max=True))
def test_multiplier_round_trip(real):
    try:
        expected = ref.fixed_point(real)
    except ref.Refused:
        with pytest.raises(QuantisationError):
            k.quantize_multiplier(real)
        return
    point = k.quantize_multiplier(real)
    assert point == expected
    assert 2**30 <= point.multiplier < 2**31 and 1 <= point.total_shift <= 62
    assert abs(point.as_fraction() / Fraction(real) - 1) <= Fraction(1, 2**31)


@pytest.mark.parametrize("real", [0.0, -0.5, math.nan, math.inf, 2.0**30, 2.0**31,
                                  2.0**-33, 2.0**30 * (1 - 2.0**-40)])
def test_multipliers_out_of_range_are_refused(real):
    with pytest.raises(QuantisationError, match="outside the supported"):
        k.quantize_multiplier(real)
    with pytest.raises(ref.Refused):
        ref.fixed_point(real)


def test_multipliers_of_an_array_are_the_references_one_by_one():
    """The array form (layers with a multiplier per channel) on the values above, the
    edges of the range, a mantissa that carries into the next power of two, and random
    values spread over the whole range on a log scale."""
    rng = np.random.default_rng(5)
    edges = [0.5, 1.0, 0.75, 3.0, 0.1, 2.0**-32, 2.0**-32 * (1 + 2.0**-52),
             2.0**29 * (1 - 2.0**-52), 2.0**30 * (1 - 2.0**-31), 0.5 * (2 - 2.0**-40),
             1 - 2.0**-53, math.nextafter(1.0, 2.0)]
    spread = 2.0 ** rng.uniform(-32, 30, 5000)
    for reals in (edges, spread, spread[:1], []):
        multipliers, shifts = k.quantize_multipliers(np.array(reals))
        expected = [ref.fixed_point(r) for r in reals]
        assert multipliers.dtype == shifts.dtype == np.int64
        assert multipliers.tolist() == [m for m, _ in expected]
        assert shifts.tolist() == [31 + n for _, n in expected]


@pytest.mark.parametrize("bad", [0.0, -0.5, math.nan, math.inf, 2.0**30, 2.0**-33,
                                 2.0**30 * (1 - 2.0**-40)])
def test_an_array_with_a_refused_multiplier_is_refused_for_that_value(bad):
    with pytest.raises(QuantisationError) as scalar:
        k.quantize_multiplier(bad)
    with pytest.raises(QuantisationError) as array:
        k.quantize_multipliers([0.25, bad, 0.0 if bad else 1.0])
    assert str(array.value) == str(scalar.value)


# ---- rounding ---------------------------------------------------------------------------

def test_rounding_ties_go_away_from_zero():
    values = np.arange(-6, 7)
    half = FixedPoint(2**30, 0)                    # x 0.5
    quarter = FixedPoint(2**30, 1)                 # x 0.25
    assert k.apply_multiplier(values, half).tolist() == [-3, -3, -2, -2, -1, -1, 0,
                                                         1, 1, 2, 2, 3, 3]
    assert k.apply_multiplier(values, quarter).tolist() == [-2, -1, -1, -1, -1, 0, 0,
                                                            0, 1, 1, 1, 1, 2]
    for point in (half, quarter, FixedPoint(3 * 2**29, 2)):
        assert k.apply_multiplier(values, point).tolist() == [
            ref.shift_round(int(v) * point.multiplier, point.total_shift) for v in values]


def test_rounding_at_the_int32_and_shift_extremes():
    values = np.array([2**31 - 1, -(2**31), 1, -1, 0])
    for point in (FixedPoint(2**31 - 1, 31), FixedPoint(2**30, -30), FixedPoint(2**30, 31)):
        assert k.apply_multiplier(values, point).tolist() == [
            ref.shift_round(int(v) * point.multiplier, point.total_shift) for v in values]
    with pytest.raises(QuantisationError, match="int32"):
        k.apply_multiplier(np.array([2**31]), FixedPoint(2**30, 0))


@pytest.mark.parametrize(("activation", "out_scale", "dtype", "bounds"), [
    ("none", 0.1, I8, (-128, 127)),
    ("relu", 0.1, I8, (0, 127)),
    ("relu6", 0.1, I8, (0, 60)),
    ("relu6", 0.01, I8, (0, 127)),
    ("relu6", 0.01, I16, (0, 600)),
    ("relu6", 12.0, I8, (0, 1)),                   # 6 / 12 = 0.5: away from zero
    ("relu6", 0.48, I8, (0, 13)),                  # 0.48 as a float is below 0.48
    ("none", 1.0, I16, (-32768, 32767)),
])
def test_activation_bounds(activation, out_scale, dtype, bounds):
    assert k.activation_bounds(activation, dtype, out_scale) == bounds


# ---- convolution: cases by hand -----------------------------------------------------------

def test_conv_by_hand():
    # one 3 x 3 channel, a 2 x 2 kernel of ones, multiplier 0.5: out = round(window sum / 2)
    x = np.array([[[[1, 2, 3], [4, 5, 6], [7, 8, -9]]]], I8)
    w = np.ones((1, 1, 2, 2), I8)
    conv = k.Conv2d(w, np.array([1], np.int32), in_scale=0.5, w_scales=1.0, out_scale=1.0)
    # sums + bias 1: 13, 17, 25, 11 -> 6.5, 8.5, 12.5, 5.5 -> ties away from zero
    assert conv(x).tolist() == [[[[7, 9], [13, 6]]]]
    neg = k.Conv2d(w, np.array([-1], np.int32), in_scale=0.5, w_scales=1.0, out_scale=1.0)
    assert neg(-x).tolist() == [[[[-7, -9], [-13, -6]]]]


def test_conv_saturates_both_ways():
    x = np.full((1, 4, 5, 5), 127, I8)
    w = np.full((2, 4, 3, 3), 127, I8)
    w[1] = -128
    out = check_conv(x, w, None, in_scale=1.0, w_scales=1.0, out_scale=1.0, padding=1)
    assert (out[0, 0] == 127).all() and (out[0, 1] == -128).all()
    # 4 channels x 2**14 x (4, 6 or 9 taps) x 2**-16 = 4, 6, 9 -> ReLU6 clamps the middle
    out = check_conv(np.full((1, 4, 5, 5), -128, I8), w, None, in_scale=1 / 256,
                     w_scales=1 / 256, out_scale=1.0, padding=1, activation="relu6")
    assert out[0, 0].max() == 0
    assert out[0, 1, 0].tolist() == [4, 6, 6, 6, 4] and out[0, 1, 2, 2] == 6


CASES = {
    "3x3 pad 1": dict(shape=(1, 3, 7, 7), w=(4, 3, 3, 3), padding=1),
    "stride 2 odd": dict(shape=(1, 3, 9, 7), w=(5, 3, 3, 3), stride=2, padding=1),
    "dilation 2": dict(shape=(1, 2, 9, 9), w=(3, 2, 3, 3), dilation=2, padding=2),
    "1x1": dict(shape=(2, 6, 5, 5), w=(4, 6, 1, 1)),
    "1x1 stride 2": dict(shape=(1, 6, 7, 7), w=(4, 6, 1, 1), stride=2),
    "1x1 padded": dict(shape=(1, 2, 3, 3), w=(2, 2, 1, 1), padding=1),
    "7x7 stride 2 pad 3": dict(shape=(1, 3, 13, 13), w=(4, 3, 7, 7), stride=2, padding=3),
    "asymmetric": dict(shape=(1, 2, 6, 5), w=(3, 2, 2, 3), stride=(2, 1), padding=(0, 1, 1, 2),
                       dilation=(1, 2)),
    "kernel = input": dict(shape=(2, 3, 4, 5), w=(6, 3, 4, 5)),
    "one channel": dict(shape=(1, 1, 6, 6), w=(1, 1, 3, 3), padding=1),
    "batch 2": dict(shape=(2, 4, 6, 6), w=(4, 4, 3, 3), padding=1, stride=2),
    "groups 2": dict(shape=(1, 4, 6, 6), w=(6, 2, 3, 3), padding=1, groups=2),
    "depthwise": dict(shape=(2, 5, 7, 7), w=(5, 1, 3, 3), padding=1, groups=5),
    "depthwise x2 stride 2": dict(shape=(1, 3, 8, 8), w=(6, 1, 3, 3), padding=1, stride=2,
                                  groups=3),
    "relu": dict(shape=(1, 3, 5, 5), w=(4, 3, 3, 3), activation="relu"),
    "relu6": dict(shape=(1, 3, 5, 5), w=(4, 3, 3, 3), activation="relu6", padding=1),
    "int16 in": dict(shape=(1, 3, 5, 5), w=(4, 3, 3, 3), dtype=I16, padding=1),
    "int16 in and out": dict(shape=(1, 3, 5, 5), w=(4, 3, 3, 3), dtype=I16, out_dtype=I16),
    "int8 in int16 out": dict(shape=(1, 3, 5, 5), w=(4, 3, 3, 3), out_dtype=I16, padding=1),
}


@pytest.mark.parametrize("name", list(CASES))
def test_conv_cases(name):
    case = dict(CASES[name])
    rng = np.random.default_rng(list(CASES).index(name))
    dtype = case.pop("dtype", I8)
    lo, hi = (-32768, 32767) if dtype == I16 else (-128, 127)
    x = ints(rng, case.pop("shape"), lo, hi, dtype)
    w = ints(rng, case.pop("w"))
    c_out, c_group, kh, kw = w.shape
    bias = ints(rng, c_out, -3000, 3000, np.int32)
    w_scales = rng.uniform(0.002, 0.02, c_out)
    in_scale = 0.05 if dtype == I8 else 0.05 / 256
    out_dtype = case.get("out_dtype", I8)
    spread = 256 if out_dtype == I16 else 1
    # |acc| is about 40 x (hi + 1) x sqrt(K): put that at code 64 (x 256 for int16 outputs)
    out_scale = in_scale * 0.01 * 40 * (hi + 1) * math.sqrt(c_group * kh * kw) / 64 / spread
    out = check_conv(x, w, bias, in_scale=in_scale, w_scales=w_scales, out_scale=out_scale,
                     **case)
    info = np.iinfo(out.dtype)
    assert out.min() < 0 or case.get("activation"), "the scales leave the range unused"
    assert ((out > info.min) & (out < info.max)).mean() > 0.25, "mostly saturated"


def test_conv_rounding_ties_with_power_of_two_scales():
    rng = np.random.default_rng(7)
    x = ints(rng, (1, 2, 6, 6), -3, 3)
    w = ints(rng, (3, 2, 3, 3), -3, 3)
    # multipliers 2**-3, 2**-2, 2**-1: many exact ties
    out = check_conv(x, w, None, in_scale=0.5, w_scales=[0.25, 0.5, 1.0], out_scale=1.0,
                     padding=1)
    sums = np.array(ref.conv2d_acc(x, w, None, pads=(1, 1, 1, 1)))
    assert (sums[0, 2] % 2 == 1).any() and (sums[0, 1] % 4 == 2).any()   # ties occurred
    by_hand = [[[ref.nearest(Fraction(int(v), 2 ** (3 - c))) for v in row] for row in plane]
               for c, plane in enumerate(sums[0])]
    assert out.tolist() == [by_hand]


# ---- convolution: random cases ------------------------------------------------------------

@st.composite
def conv_cases(draw):
    groups = draw(st.integers(1, 3))
    c_group = draw(st.integers(1, 3))
    per_group = draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    height = draw(st.integers(1, 7))
    width = draw(st.integers(1, 7))
    assume(height + pads[0] + pads[2] >= dilation[0] * (kh - 1) + 1)
    assume(width + pads[1] + pads[3] >= dilation[1] * (kw - 1) + 1)
    batch = draw(st.integers(1, 2))
    seed = draw(st.integers(0, 2**32 - 1))
    small = draw(st.booleans())                    # small values: many ties
    int16 = draw(st.booleans())
    power_of_two = draw(st.booleans())
    activation = draw(st.sampled_from(["none", "relu", "relu6"]))
    rng = np.random.default_rng(seed)
    c_out = groups * per_group
    if int16:
        x = ints(rng, (batch, groups * c_group, height, width), -40 if small else -32768,
                 40 if small else 32767, I16)
    else:
        x = ints(rng, (batch, groups * c_group, height, width), -4 if small else -128,
                 4 if small else 127)
    w = ints(rng, (c_out, c_group, kh, kw), -4 if small else -128, 4 if small else 127)
    bias = ints(rng, c_out, -500, 500, np.int32) if draw(st.booleans()) else None
    if power_of_two:
        in_scale = 2.0 ** -draw(st.integers(0, 8))
        w_scales = [2.0 ** -draw(st.integers(0, 8)) for _ in range(c_out)]
        out_scale = 2.0 ** -draw(st.integers(0, 12))
    else:
        in_scale = draw(st.floats(1e-3, 1.0))
        w_scales = rng.uniform(1e-3, 1e-1, c_out)
        out_scale = float(in_scale * np.mean(w_scales) * draw(st.floats(1.0, 3000.0))
                          * (256 if int16 else 1))
    return dict(x=x, w=w, bias=bias, in_scale=in_scale, w_scales=w_scales,
                out_scale=out_scale, stride=stride, padding=pads, dilation=dilation,
                groups=groups, activation=activation,
                out_dtype=draw(st.sampled_from([I8, I16])))


@settings(deadline=None, max_examples=400)
@given(conv_cases())
def test_conv_random(case):
    check_conv(**case)


@settings(deadline=None, max_examples=100)
@given(st.integers(1, 3), st.integers(1, 40), st.integers(1, 6), st.integers(0, 2**32 - 1),
       st.sampled_from(["none", "relu", "relu6"]))
def test_fully_connected_random(batch, depth, outputs, seed, activation):
    rng = np.random.default_rng(seed)
    x, w = ints(rng, (batch, depth)), ints(rng, (outputs, depth))
    bias = ints(rng, outputs, -2000, 2000, np.int32)
    w_scales = rng.uniform(0.001, 0.01, outputs)
    out_scale = 0.05 * 0.005 * 300 * math.sqrt(depth) / 64
    expected = ref.fully_connected(x, w, bias, 0.05, w_scales, out_scale, activation)
    for path in ("blas", "direct"):
        fc = k.FullyConnected(w, bias, in_scale=0.05, w_scales=w_scales, out_scale=out_scale,
                              activation=activation, path=path)
        assert same(fc(x), expected)


# ---- accumulator bounds and the exact paths -------------------------------------------------

def test_the_int32_accumulator_bound_is_checked_when_the_layer_is_built():
    depth = (2**31 - 1) // 2**14                   # 131071 taps
    w = np.ones((1, depth, 1, 1), I8)
    scales = dict(in_scale=1.0, w_scales=1.0, out_scale=2.0**20)
    k.Conv2d(w, np.array([16383], np.int32), **scales)   # 2**14 x 131071 + 16383 = 2**31 - 1
    with pytest.raises(QuantisationError, match="int32 accumulator"):
        k.Conv2d(w, np.array([16384], np.int32), **scales)
    with pytest.raises(QuantisationError, match="int32 accumulator"):
        k.Conv2d(np.ones((1, depth + 1, 1, 1), I8), None, **scales)
    x = np.full((1, depth, 1, 1), -128, I8)
    conv = k.Conv2d(np.full((1, depth, 1, 1), -128, I8), np.array([16383], np.int32),
                    **scales)
    assert conv.accumulate(x).item() == 2**31 - 1
    assert conv(x).item() == ref.requantize_one(2**31 - 1, 2.0**-20, I8, "none", 2.0**20)


def test_int16_accumulators_are_checked_on_the_data():
    w = np.full((1, 600, 1, 1), 127, I8)
    conv = k.Conv2d(w, None, in_scale=1.0, w_scales=1.0, out_scale=2.0**20, in_dtype=I16,
                    out_dtype=I16)
    assert conv(np.full((1, 600, 1, 1), 28000, I16)).item() == ref.requantize_one(
        28000 * 127 * 600, 2.0**-20, I16, "none", 2.0**20)    # 2.13e9: fits
    with pytest.raises(QuantisationError, match="int32"):
        conv(np.full((1, 600, 1, 1), 32767, I16))            # 2.50e9: does not


def test_float64_bound():
    assert k.float64_is_exact(2**39, I8) and not k.float64_is_exact(2**39 + 1, I8)
    assert k.float64_is_exact(2**31, I16) and not k.float64_is_exact(2**31 + 1, I16)
    assert k.accumulation_path(576, 64) == "blas"
    assert k.accumulation_path(9, 1) == "direct"             # depthwise
    assert k.accumulation_path(2**39 + 1, 2) == "direct"
    assert k.accumulation_path(2**31 + 1, 2, I16) == "direct"
    # the bound is not slack: one past 2**53, float64 loses the 1
    assert np.array([2.0**53, 1.0]) @ np.array([1.0, 1.0]) == 2.0**53


def test_above_the_float64_bound_the_direct_path_is_used(monkeypatch):
    rng = np.random.default_rng(3)
    x, w = ints(rng, (1, 4, 5, 5)), ints(rng, (3, 4, 3, 3))
    expected = ref.conv2d(x, w, None, 0.1, 0.01, 2.0, pads=(1, 1, 1, 1))
    monkeypatch.setattr(k, "FLOAT64_EXACT", 36 * 128 * 128 - 1)   # K = 36 now too deep
    conv = k.Conv2d(w, None, in_scale=0.1, w_scales=0.01, out_scale=2.0, padding=1)
    assert conv.path == "direct" and same(conv(x), expected)
    with pytest.raises(QuantisationError, match="not exact"):
        k.Conv2d(w, None, in_scale=0.1, w_scales=0.01, out_scale=2.0, padding=1, path="blas")


def test_float64_matmul_is_exact_at_the_deepest_resnet_layer():
    rng = np.random.default_rng(5)
    depth = 3 * 3 * 512
    a = rng.choice(np.array([-128, 127, -127], np.int64), (64, depth))
    b = rng.choice(np.array([-128, 127], np.int64), (depth, 50))
    a[0], b[:, 0] = -128, -128                     # one sum of 4608 x 2**14 = 75497472
    exact = a @ b                                  # int64: numpy's own loops, no BLAS
    assert exact[0, 0] == depth * 2**14
    assert np.array_equal((a.astype(np.float64) @ b.astype(np.float64)).astype(np.int64),
                          exact)


# ---- elementwise -------------------------------------------------------------------------

def test_add_by_hand():
    add = k.Add(1.0, 1.0, 1.0)                     # same scales: a + b, saturated
    a = np.array([100, -100, 5, -128, 127], I8)
    b = np.array([100, -100, -7, -1, 1], I8)
    assert add(a, b).tolist() == [127, -128, -2, -128, 127]
    halve = k.Add(1.0, 1.0, 2.0)                   # (a + b) / 2, ties away from zero
    assert halve(a, b).tolist() == [100, -100, -1, -65, 64]
    assert k.Add(1.0, 1.0, 2.0, activation="relu")(a, b).tolist() == [100, 0, 0, 0, 64]


@pytest.mark.parametrize(("dtype", "left"), [(I8, 20), (I16, 15)])
def test_add_intermediates_keep_left_shift_bits(dtype, left):
    codes = np.arange(-128, 128, dtype=I8) if dtype == I8 else np.concatenate(
        [np.arange(-32768, 32768, 97), np.arange(-300, 300)]).astype(I16)
    zeros = np.zeros(codes.shape, dtype)
    # scales 2**(L - 1) apart: b' = b x 2**L x 2**-L keeps every code of the finer input
    kept = k.Add(1.0, 2.0 ** (1 - left), 2.0 ** (1 - left), in_dtype=dtype, out_dtype=I16)
    assert kept(zeros, codes).tolist() == codes.tolist()
    assert kept(np.ones(codes.shape, dtype), codes).tolist() == [
        min(2 ** (left - 1) + int(c), 32767) for c in codes]
    # 2**L apart: b' = b / 2 rounded half away from zero, and out = 2 b'
    halved = k.Add(1.0, 2.0**-left, 2.0**-left, in_dtype=dtype, out_dtype=I16)
    assert halved(zeros, codes).tolist() == [
        min(2 * ref.nearest(Fraction(int(c), 2)), 32767) for c in codes]


def _broadcast_pair(rng: np.random.Generator, dtype: np.dtype,
                    broadcast: str) -> tuple[np.ndarray, np.ndarray]:
    """Random full-range codes a (N, C, H, W) and b of the shape `broadcast` names."""
    info = np.iinfo(dtype)
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(1, 4)),
             int(rng.integers(1, 5)))
    b_shape = {"same": shape, "channel": (1, shape[1], 1, 1), "scalar": (1,),
               "row": (shape[3],), "both": (shape[0], 1, shape[2], 1)}[broadcast]
    return (ints(rng, shape, int(info.min), int(info.max), dtype),
            ints(rng, b_shape, int(info.min), int(info.max), dtype))


@settings(deadline=None, max_examples=200)
@given(st.integers(0, 2**32 - 1), st.sampled_from([I8, I16]),
       st.sampled_from(["same", "channel", "scalar", "row", "both"]),
       st.sampled_from(["none", "relu", "relu6"]), st.booleans())
def test_add_random(seed, dtype, broadcast, activation, power_of_two):
    rng = np.random.default_rng(seed)
    a, b = _broadcast_pair(rng, dtype, broadcast)
    if power_of_two:
        scales = [2.0 ** -int(rng.integers(0, 6)) for _ in range(3)]
    else:
        scales = list(rng.uniform(0.01, 0.1, 3))
    out_dtype = rng.choice([I8, I16])
    add = k.Add(*scales, activation=activation, in_dtype=dtype, out_dtype=out_dtype)
    expected = ref.add(a, b, *scales, activation=activation, out_dtype=out_dtype)
    assert same(add(a, b), expected)
    assert same(add(b, a), ref.add(b, a, *scales, activation=activation, out_dtype=out_dtype))


@pytest.mark.parametrize("scales", [(0.043, 0.071, 0.043 / 200), (0.02, 0.02 * 3 / 7, 1e-4)])
def test_add_every_int8_pair_into_a_fine_int16_output(scales):
    # an output finer than the inputs shows the rounding of the intermediates (a', b')
    a = np.arange(-128, 128, dtype=I8).reshape(256, 1)
    b = np.arange(-128, 128, dtype=I8).reshape(1, 256)
    got = k.Add(*scales, out_dtype=I16)(a, b)
    assert same(got, ref.add(a, b, *scales, out_dtype=I16))


def test_add_refuses_mismatches():
    add = k.Add(0.1, 0.2, 0.3)
    with pytest.raises(QuantisationError, match="broadcast"):
        add(np.zeros((1, 3, 2, 2), I8), np.zeros((1, 2, 1, 1), I8))
    with pytest.raises(QuantisationError, match="int8"):
        add(np.zeros(3, I8), np.zeros(3, I16))
    with pytest.raises(QuantisationError, match="outside the supported"):
        k.Add(1.0, 2.0**-40, 1.0)                  # scales 2**40 apart


def test_sub_by_hand():
    a = np.array([-128, 127, 5, 0, -128], I8)
    b = np.array([127, -128, 7, -128, -128], I8)
    assert k.Add(1.0, 1.0, 1.0, subtract=True)(a, b).tolist() == [-128, 127, -2, 127, 0]
    wide = k.Add(1.0, 1.0, 1.0, subtract=True, out_dtype=I16)
    assert wide(a, b).tolist() == [-255, 255, -2, 128, 0]    # -(-128) is 128, not -128
    assert k.Add(1.0, 1.0, 1.0, subtract=True, activation="relu")(a, b).tolist() == [
        0, 127, 0, 127, 0]


def test_mul_by_hand():
    a = np.array([64, -128, 3, 64, -64, 127], I8)
    b = np.array([64, -128, -1, 1, 1, 127], I8)
    # a x b / 128: 32, 128 (saturates), -0.02, 0.5 and -0.5 (away from zero), 126.01
    assert k.Mul(1 / 128, 1 / 128, 1 / 128)(a, b).tolist() == [32, 127, 0, 1, -1, 126]
    wide = k.Mul(1.0, 1.0, 1.0, in_dtype=I16, out_dtype=I16)
    big = np.array([-32768, -32768, 181, -2], I16)
    assert wide(big, np.array([-32768, 1, 181, 3], I16)).tolist() == [32767, -32768, 32761,
                                                                       -6]


def test_div_by_hand():
    div = k.Div(1.0, 1.0, 1.0)
    a = np.array([7, -7, 3, 127, -128, -128, 5, -5, 0, 1], I8)
    b = np.array([2, 2, -2, -128, -128, -1, 0, 0, 0, 3], I8)
    # 3.5 and -3.5 and -1.5 away from zero, 127 / -128 = -0.99, 1, 128 saturates, b = 0
    assert div(a, b).tolist() == [4, -4, -2, -1, 1, 127, 127, -128, 0, 0]
    assert same(div(a, b), ref.div(a, b, 1.0, 1.0, 1.0))
    fine = k.Div(1.0, 1.0, 1 / 1024, out_dtype=I16)            # out = 1024 a / b
    assert fine(a, b).tolist() == [3584, -3584, -1536, -1016, 1024, 32767, 32767, -32768, 0,
                                   341]


@pytest.mark.parametrize("real", [2.0**-16 * 1.5, 2.0**-16, 2.0**-16 * 0.99, 2.0**-17 * 1.99,
                                  2.0**-30, 2.0**-32])
def test_div_at_the_largest_shifts(real):
    # total shifts 46 (computed) and 47 and beyond (every quotient rounds to 0)
    point = k.quantize_multiplier(real)
    assert (point.total_shift <= k.DIV_SHIFT_MAX) == (real >= 2.0**-16)
    info = np.iinfo(I16)
    a = np.array([info.max, info.min, info.min, 1, 0, -1, 30000], I16).reshape(-1, 1)
    b = np.array([1, -1, 1, 0, 0, 0, 2, info.min], I16).reshape(1, -1)
    got = k.Div(real, 1.0, 1.0, in_dtype=I16, out_dtype=I16)(a, b)
    assert same(got, ref.div(a, b, real, 1.0, 1.0, out_dtype=I16))


def test_extremum_by_hand():
    a = np.array([1, -5, 127], I8)
    b = np.array([4, -7, 127], I8)                 # at half the scale: 2, -3.5 -> -4, 63.5 -> 64
    assert k.Extremum("max", 1.0, 0.5, 1.0)(a, b).tolist() == [2, -4, 127]
    assert k.Extremum("min", 1.0, 0.5, 1.0)(a, b).tolist() == [1, -5, 64]
    assert k.Extremum("max", 1.0, 0.5, 0.25, out_dtype=I16)(a, b).tolist() == [8, -14, 508]


def _binary(kind, scales, in_dtype, out_dtype):
    """The kernel and the reference of a binary op of two feature maps."""
    if kind == "sub":
        return (k.Add(*scales, in_dtype=in_dtype, out_dtype=out_dtype, subtract=True),
                partial(ref.add, a_scale=scales[0], b_scale=scales[1], out_scale=scales[2],
                        out_dtype=out_dtype, subtract=True))
    if kind in ("max", "min"):
        return (k.Extremum(kind, *scales, in_dtype=in_dtype, out_dtype=out_dtype),
                partial(ref.extremum, kind=kind, a_scale=scales[0], b_scale=scales[1],
                        out_scale=scales[2], out_dtype=out_dtype))
    op, reference = {"mul": (k.Mul, ref.mul), "div": (k.Div, ref.div)}[kind]
    return (op(*scales, in_dtype=in_dtype, out_dtype=out_dtype),
            partial(reference, a_scale=scales[0], b_scale=scales[1], out_scale=scales[2],
                    out_dtype=out_dtype))


@settings(deadline=None, max_examples=150)
@given(st.integers(0, 2**32 - 1), st.sampled_from(["sub", "mul", "div", "max", "min"]),
       st.sampled_from([I8, I16]), st.sampled_from([I8, I16]),
       st.sampled_from(["same", "channel", "scalar", "row", "both"]))
def test_binary_ops_random(seed, kind, dtype, out_dtype, broadcast):
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    a, b = _broadcast_pair(rng, dtype, broadcast)
    shape, b_shape = a.shape, b.shape
    b[rng.random(b_shape) < 0.2] = 0               # division by zero, and zeros elsewhere
    a[rng.random(shape) < 0.1] = info.min
    a_scale, b_scale = rng.uniform(0.01, 0.1, 2)
    out_scale = {"mul": a_scale * b_scale, "div": a_scale / b_scale}.get(kind, 0.05)
    out_scale *= 2.0 ** rng.uniform(-8, 8)
    scales = (a_scale, b_scale, out_scale)
    op, reference = _binary(kind, scales, dtype, out_dtype)
    assert same(op(a, b), reference(a, b))
    assert same(op(b, a), reference(b, a))


def test_every_int8_pair_of_the_binary_ops():
    a = np.arange(-128, 128, dtype=I8).reshape(256, 1)
    b = np.arange(-128, 128, dtype=I8).reshape(1, 256)
    for kind, scales in (("sub", (0.043, 0.071, 0.043 / 200)), ("mul", (0.03, 0.07, 1e-4)),
                         ("div", (0.05, 0.02, 0.01)), ("max", (0.02, 0.03, 0.004))):
        op, reference = _binary(kind, scales, I8, I16)
        assert same(op(a, b), reference(a, b)), kind


def test_binary_ops_refuse():
    for op in (k.Mul(0.1, 0.2, 0.3), k.Div(0.1, 0.2, 0.3), k.Extremum("max", 0.1, 0.2, 0.3),
               k.Add(0.1, 0.2, 0.3, subtract=True)):
        with pytest.raises(QuantisationError, match="broadcast"):
            op(np.zeros((1, 3, 2, 2), I8), np.zeros((1, 2, 1, 1), I8))
        with pytest.raises(QuantisationError, match="int8"):
            op(np.zeros(3, I8), np.zeros(3, I16))
    with pytest.raises(QuantisationError, match="outside the supported"):
        k.Mul(1.0, 1.0, 2.0**-40)                  # multiplier 2**40
    with pytest.raises(QuantisationError, match="outside the supported"):
        k.Div(2.0**-40, 1.0, 1.0)
    with pytest.raises(QuantisationError, match="unknown extremum"):
        k.Extremum("median", 0.1, 0.1, 0.1)


@settings(deadline=None, max_examples=40)
@given(st.integers(0, 2**32 - 1), st.sampled_from([I8, I16]), st.sampled_from([I8, I16]),
       st.floats(1e-3, 10.0), st.floats(1e-3, 10.0))
def test_rescale_random(seed, dtype, out_dtype, in_scale, out_scale):
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    x = ints(rng, (2, 3, 4), int(info.min), int(info.max), dtype)
    got = k.Rescale(in_scale, out_scale, out_dtype=out_dtype)(x)
    assert same(got, ref.rescale(x, in_scale, out_scale, out_dtype))


def test_concat():
    rng = np.random.default_rng(11)
    parts = [ints(rng, (2, c, 3, 4)) for c in (1, 3, 2)]
    scales = [0.1, 0.05, 0.4]
    got = k.Concat(scales, 0.1)(parts)
    assert same(got, ref.concat(parts, scales, 0.1))
    assert np.array_equal(got[:, :1], parts[0])    # the input at the output scale is kept
    assert same(k.Concat([0.1, 0.1], 0.2, axis=3)(parts[:1] * 2),
                ref.concat(parts[:1] * 2, [0.1, 0.1], 0.2, axis=3))
    assert same(k.Concat([0.01, 0.1], 0.001, out_dtype=I16)(parts[:2]),
                ref.concat(parts[:2], [0.01, 0.1], 0.001, out_dtype=I16))
    with pytest.raises(QuantisationError, match="concatenate"):
        k.Concat(scales, 0.1, axis=2)(parts)


@pytest.mark.parametrize("name", list(k.LUT_FUNCTIONS))
@pytest.mark.parametrize(("in_scale", "out_scale"), [(0.05, 1 / 128), (0.1, 0.03),
                                                    (1 / 16, 1 / 32), (0.5, 0.5)])
def test_lut_tables(name, in_scale, out_scale):
    lut = k.Lut.from_function(name, in_scale, out_scale)
    assert lut.table.tolist() == ref.lut_table(ref.FUNCTIONS[name], in_scale, out_scale)
    codes = np.arange(-128, 128, dtype=I8).reshape(2, 4, 8, 4)
    assert same(lut(codes), ref.lut(codes, lut.table.tolist()))


@pytest.mark.parametrize("name", list(k.LUT_FUNCTIONS))
@pytest.mark.parametrize(("in_dtype", "out_dtype", "in_scale", "out_scale"), [
    (I16, I16, 6.0 / 32768, 1.0 / 32768),
    (I16, I8, 8.0 / 32768, 1.0 / 128),
    (I8, I16, 0.05, 1.0 / 4096),
])
def test_lut_tables_of_int16(name, in_dtype, out_dtype, in_scale, out_scale):
    lut = k.Lut.from_function(name, in_scale, out_scale, in_dtype=in_dtype,
                              out_dtype=out_dtype)
    expected = ref.lut_table(ref.FUNCTIONS[name], in_scale, out_scale, in_dtype, out_dtype)
    assert lut.table.dtype == out_dtype and lut.table.tolist() == expected
    info = np.iinfo(in_dtype)
    codes = np.arange(info.min, info.max + 1).astype(in_dtype).reshape(16, 2, -1)
    assert same(lut(codes), ref.lut(codes, expected, out_dtype))


def test_lut_of_onnx_ops_with_attributes():
    alpha = 0.7
    elu = lambda x: np.where(x >= 0, x, alpha * (np.exp(x) - 1))  # noqa: E731
    for in_dtype, in_scale in ((I8, 0.05), (I16, 1e-3)):
        lut = k.Lut.from_function(elu, in_scale, 0.01, in_dtype=in_dtype, out_dtype=I16)
        assert lut.table.tolist() == ref.lut_table(elu, in_scale, 0.01, in_dtype, I16)
    # ONNX HardSigmoid by default; PyTorch's is alpha 1/6
    onnx = k.Lut.from_function("hardsigmoid", 0.25, 1 / 128)
    assert onnx.table.tolist() == ref.lut_table(
        lambda x: np.maximum(0, np.minimum(1, 0.2 * x + 0.5)), 0.25, 1 / 128)
    assert onnx(np.array([-128, -5, 0, 5, 127], I8)).tolist() == [0, 32, 64, 96, 127]
    torch = k.Lut.from_function(partial(k.LUT_FUNCTIONS["hardsigmoid"], alpha=1 / 6), 0.25,
                                1 / 128)
    assert torch(np.array([-12, -6, 0, 6, 12], I8)).tolist() == [0, 32, 64, 96, 127]


def test_lut_outside_the_domain_and_at_infinity():
    # sqrt of a negative code is NaN (0); 1 / x at code 0 is +inf (the largest code), and
    # -1 / x there is -inf (the smallest)
    root = k.Lut.from_function(np.sqrt, 1.0, 1.0, in_dtype=I16, out_dtype=I16)
    assert root(np.array([-32768, -1, 0, 1, 4, 10, 32767], I16)).tolist() == [
        0, 0, 0, 1, 2, 3, 181]
    assert root.table.tolist() == ref.lut_table(np.sqrt, 1.0, 1.0, I16, I16)
    for sign, code in ((1.0, 127), (-1.0, -128)):
        inverse = k.Lut.from_function(lambda x, s=sign: s / x, 1.0, 1 / 256)
        assert inverse(np.array([0, 1, -1], I8)).tolist() == [code, code, -code - 1]
        assert inverse.table.tolist() == ref.lut_table(lambda x, s=sign: s / x, 1.0, 1 / 256)


def test_lut_by_hand_and_refusals():
    # identity at equal scales; halving at twice the scale, ties away from zero
    assert k.Lut.from_function(lambda v: v, 0.5, 0.5).table.tolist() == list(range(-128, 128))
    halve = k.Lut.from_function(lambda v: v, 0.5, 1.0)
    assert halve(np.array([-3, -1, 1, 3, 127, -128], I8)).tolist() == [-2, -1, 1, 2, 64, -64]
    shout = k.Lut.from_function(lambda v: 1000 * v, 1.0, 1.0)
    assert shout(np.array([-1, 0, 1], I8)).tolist() == [-128, 0, 127]
    with pytest.raises(QuantisationError, match="same shape"):
        k.Lut.from_function(lambda v: np.float64(math.inf), 0.1, 0.1)
    with pytest.raises(QuantisationError, match="unknown LUT"):
        k.Lut.from_function("swishy", 0.1, 0.1)
    with pytest.raises(QuantisationError, match="int8"):
        halve(np.zeros(3, I16))
    with pytest.raises(QuantisationError, match="65536"):
        k.Lut(np.zeros(300, I8))
    with pytest.raises(QuantisationError, match="int16"):
        k.Lut.from_function("tanh", 0.1, 0.1, in_dtype=np.int32)


# ---- pooling and resize --------------------------------------------------------------------

def test_pools_by_hand():
    x = np.array([[[[1, 2, -3], [4, -5, 6], [-7, 8, 9]]]], I8)
    assert k.max_pool2d(x, 2, 1).tolist() == [[[[4, 6], [8, 9]]]]
    # sums 2, 0, 0, 18 over 4 -> 0.5, 0, 0, 4.5 -> 1, 0, 0, 5
    assert k.avg_pool2d(x, 2, 1).tolist() == [[[[1, 0], [0, 5]]]]
    assert k.avg_pool2d(-x, 2, 1).tolist() == [[[[-1, 0], [0, -5]]]]
    # corner windows of a padded pool: only the taps inside count, unless told otherwise
    # sums 1, -1, -3, 18 over 1, 2, 2, 4 taps (or always 4)
    assert k.avg_pool2d(x, 2, 2, padding=1).tolist() == [[[[1, -1], [-2, 5]]]]
    assert k.avg_pool2d(x, 2, 2, padding=1, count_include_pad=True).tolist() == [
        [[[0, 0], [-1, 5]]]]
    assert k.global_avg_pool2d(x).tolist() == [[[[2]]]]   # 15 / 9 = 1.67
    with pytest.raises(QuantisationError, match="padding"):
        k.max_pool2d(x, 1, 1, padding=1)           # the corner window holds no input


@settings(deadline=None, max_examples=200)
@given(st.integers(0, 2**32 - 1), st.sampled_from([I8, I16]), st.integers(1, 3),
       st.integers(1, 3), st.integers(1, 3), st.integers(1, 2), st.integers(0, 2),
       st.booleans())
def test_pools_random(seed, dtype, kh, kw, stride, dilation, pad, include_pad):
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    x = ints(rng, (int(rng.integers(1, 3)), 2, int(rng.integers(1, 7)),
                   int(rng.integers(1, 7))), int(info.min), int(info.max), dtype)
    pads = tuple(int(p) for p in rng.integers(0, pad + 1, 4))
    args = ((kh, kw), (stride, stride), pads, (dilation, dilation))
    for mode, kernel in (("max", k.max_pool2d), ("avg", k.avg_pool2d)):
        extra = {"count_include_pad": include_pad} if mode == "avg" else {}
        try:
            expected = ref.pool2d(x, *args, mode=mode, **extra)
        except ref.Refused:                         # no window, or one all in padding
            with pytest.raises(QuantisationError):
                kernel(x, (kh, kw), stride, pads, dilation, **extra)
            continue
        assert same(kernel(x, (kh, kw), stride, pads, dilation, **extra), expected)
    assert same(k.global_avg_pool2d(x), ref.global_avg_pool(x))


def test_resize_nearest():
    x = np.array([[[[1, -2], [3, 4]]]], I8)
    assert k.resize_nearest(x).tolist() == [[[[1, 1, -2, -2], [1, 1, -2, -2],
                                              [3, 3, 4, 4], [3, 3, 4, 4]]]]
    rng = np.random.default_rng(2)
    x = ints(rng, (2, 3, 3, 5), -32768, 32767, I16)
    assert same(k.resize_nearest(x), ref.resize_nearest(x, 2, 2))
    assert same(k.resize_nearest(x, (3, 1)), ref.resize_nearest(x, 3, 1))


# ---- refusals --------------------------------------------------------------------------------

@pytest.mark.parametrize("scale", [0.0, -0.1, math.nan, math.inf, "a"])
def test_bad_scales_are_refused_everywhere(scale):
    w = np.ones((2, 1, 1, 1), I8)
    builders = [
        lambda: k.Conv2d(w, None, in_scale=scale, w_scales=1.0, out_scale=1.0),
        lambda: k.Conv2d(w, None, in_scale=1.0, w_scales=[1.0, scale], out_scale=1.0),
        lambda: k.Conv2d(w, None, in_scale=1.0, w_scales=1.0, out_scale=scale),
        lambda: k.Add(scale, 1.0, 1.0),
        lambda: k.Rescale(1.0, scale),
        lambda: k.Concat([1.0, scale], 1.0),
        lambda: k.Lut.from_function("tanh", scale, 1.0),
        lambda: k.Mul(1.0, scale, 1.0),
        lambda: k.Div(1.0, 1.0, scale),
        lambda: k.Extremum("min", scale, 1.0, 1.0),
    ]
    for build in builders:
        with pytest.raises(QuantisationError):
            build()


def test_errors_are_user_errors():
    assert issubclass(QuantisationError, InputError)


def test_bad_layers_and_inputs_are_refused():
    w = np.ones((4, 2, 3, 3), I8)
    scales = dict(in_scale=0.1, w_scales=0.1, out_scale=0.1)
    for bad in (dict(groups=3), dict(groups=0), dict(stride=0), dict(padding=-1),
                dict(dilation=(1, 2, 3)), dict(activation="gelu"), dict(path="gpu"),
                dict(in_dtype=np.int32), dict(out_dtype=np.uint8)):
        with pytest.raises(QuantisationError):
            k.Conv2d(w, None, **scales, **bad)
    with pytest.raises(QuantisationError, match="int8"):
        k.Conv2d(w.astype(I16), None, **scales)
    with pytest.raises(QuantisationError, match="bias"):
        k.Conv2d(w, np.zeros(3, np.int32), **scales)
    with pytest.raises(QuantisationError, match="int32"):
        k.Conv2d(w, np.full(4, 2**31, np.int64), **scales)
    conv = k.Conv2d(w, None, **scales, groups=2)
    with pytest.raises(QuantisationError, match="channels"):
        conv(np.zeros((1, 2, 5, 5), I8))
    with pytest.raises(QuantisationError, match="int8"):
        conv(np.zeros((1, 4, 5, 5), I16))
    with pytest.raises(QuantisationError, match="does not fit"):
        conv(np.zeros((1, 4, 2, 5), I8))
    with pytest.raises(QuantisationError, match="dimensions"):
        conv(np.zeros((4, 5, 5), I8))


# ---- larger layers -------------------------------------------------------------------------

@pytest.mark.parametrize(("c_in", "c_out", "size", "kernel", "stride", "groups"), [
    (64, 16, 14, 3, 1, 1),
    (32, 64, 15, 1, 2, 1),
    (3, 8, 31, 7, 2, 1),
    (48, 48, 14, 3, 2, 48),
    (32, 32, 12, 3, 1, 4),
])
def test_larger_layers(c_in, c_out, size, kernel, stride, groups):
    rng = np.random.default_rng(c_in * c_out + size)
    x = ints(rng, (1, c_in, size, size))
    w = ints(rng, (c_out, c_in // groups, kernel, kernel), -127, 127)
    bias = ints(rng, c_out, -20000, 20000, np.int32)
    w_scales = rng.uniform(0.001, 0.01, c_out)
    depth = c_in // groups * kernel * kernel
    check_conv(x, w, bias, in_scale=0.02, w_scales=w_scales,
               out_scale=0.02 * 0.005 * 5000 * math.sqrt(depth) / 64, stride=stride,
               padding=kernel // 2, groups=groups, activation="relu")


@pytest.mark.parametrize(("c_in", "kernel", "size"), [(256, 3, 14), (2048, 1, 7)])
def test_deep_layers_at_the_extremes(c_in, kernel, size):
    # ResNet-50 depths (K = 2304, 2048), codes only at the ends of the range
    rng = np.random.default_rng(c_in)
    x = rng.choice(np.array([-128, 127, 0], I8), (1, c_in, size, size))
    w = rng.choice(np.array([-128, 127, -127], I8), (4, c_in, kernel, kernel))
    w[0] = -128
    x[0, :, :2, :2] = -128                         # the largest sums there: 2**14 x K
    check_conv(x, w, None, in_scale=2.0**-7, w_scales=2.0**-7, out_scale=2.0**7,
               padding=kernel // 2)
