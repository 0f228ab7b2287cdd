"""The tensor ops of `emu.nn.kernels_tensor` equal the slow reference bit for bit."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from emu.nn import kernels as k
from emu.nn import kernels_tensor as kt
from emu.nn.kernels import QuantisationError
from tests.nn import kernels_reference as ref

I8, I16 = np.int8, np.int16
SEEDS = st.integers(0, 2**32 - 1)


def ints(rng, shape, dtype=I8):
    info = np.iinfo(dtype)
    return rng.integers(int(info.min), int(info.max) + 1, shape).astype(dtype)


def same(a, b):
    """Equal shapes, types and values."""
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)


# ---- MatMul ---------------------------------------------------------------------------------

def test_matmul_by_hand():
    a = np.array([[1, 2], [3, -4]], I8)
    b = np.array([[5, 6], [7, -128]], I8)
    assert kt.MatMul(1.0, 1.0, 1.0)(a, b).tolist() == [[19, -128], [-13, 127]]
    # / 4, ties away from zero: 4.75, -62.5, -3.25, 132.5
    assert kt.MatMul(1.0, 1.0, 4.0)(a, b).tolist() == [[5, -63], [-3, 127]]
    assert kt.MatMul(1.0, 1.0, 4.0, out_dtype=I16)(a, b).tolist() == [[5, -63], [-3, 133]]
    # per-column scales and a bias in the accumulator's scale
    layer = kt.MatMul(1.0, [1.0, 0.5], 1.0, bias=np.array([1, -2], np.int32),
                      activation="relu")
    assert layer(a, b).tolist() == [[20, 0], [0, 127]]       # 528 / 2 saturates
    assert layer.accumulate(a, b).tolist() == [[20, -252], [-12, 528]]
    # 1-D operands as NumPy and ONNX define them
    row, column = np.array([1, 2], I8), np.array([3, -1], I8)
    assert kt.MatMul(1.0, 1.0, 1.0)(row, b).tolist() == [19, -128]     # -250 saturates
    assert kt.MatMul(1.0, 1.0, 1.0)(a, column).tolist() == [1, 13]
    assert kt.MatMul(1.0, 1.0, 1.0)(row, column).shape == ()


def _matmul_operands(rng, kind, dtype):
    """a, b, the column count and whether b is an int8 weight, for one operand layout."""
    m, depth, n = (int(v) for v in rng.integers(1, 5, 3))
    batch = tuple(int(v) for v in rng.integers(1, 3, int(rng.integers(1, 3))))
    a_shape, b_shape = {
        "2d": ((m, depth), (depth, n)),
        "batched": ((*batch, m, depth), (*batch, depth, n)),
        "broadcast": ((batch[0], 1, m, depth), (3, depth, n)),
        "a1d": ((depth,), (*batch, depth, n)),
        "b1d": ((*batch, m, depth), (depth,)),
        "both1d": ((depth,), (depth,)),
        "weight": ((*batch, m, depth), (depth, n)),
    }[kind]
    weight = kind == "weight"
    return ints(rng, a_shape, dtype), ints(rng, b_shape, I8 if weight else dtype), weight


@settings(deadline=None, max_examples=120)
@given(SEEDS, st.sampled_from(["2d", "batched", "broadcast", "a1d", "b1d", "both1d",
                               "weight"]),
       st.sampled_from([I8, I16]), st.sampled_from([I8, I16]),
       st.sampled_from(["none", "relu", "relu6"]))
def test_matmul_random(seed, kind, dtype, out_dtype, activation):
    rng = np.random.default_rng(seed)
    a, b, weight = _matmul_operands(rng, kind, dtype)
    columns = 1 if b.ndim == 1 else b.shape[-1]
    depth = a.shape[-1]
    a_scale = float(rng.uniform(0.01, 0.1))
    b_scale = rng.uniform(0.001, 0.01, columns) if weight else float(rng.uniform(0.01, 0.1))
    bias = ints(rng, columns, np.int32) // 2**12 if weight else None
    # an output scale that keeps most results inside the type, some saturating
    largest = float(np.iinfo(dtype).max) * np.iinfo(b.dtype).max
    out_scale = a_scale * float(np.max(b_scale)) * largest * depth**0.5 / 2**6
    if dtype == I16 and b.dtype == I16:
        a //= 64                                   # keep the int32 accumulator within range
    layer = kt.MatMul(a_scale, b_scale, out_scale, bias=bias, activation=activation,
                      in_dtype=dtype, out_dtype=out_dtype)
    accs = ref.matmul_acc(a, b, bias)
    assert same(layer.accumulate(a, b), accs)
    assert same(layer(a, b), ref.matmul(a, b, a_scale, b_scale, out_scale, bias, activation,
                                        out_dtype))


def test_linear_on_tokens_is_a_matmul_with_a_constant_weight():
    rng = np.random.default_rng(7)
    x = ints(rng, (2, 5, 16))                      # [batch, tokens, features]
    w = ints(rng, (16, 6))                         # nn.Linear's weight, transposed
    bias = rng.integers(-5000, 5000, 6).astype(np.int32)
    w_scales = rng.uniform(0.001, 0.01, 6)
    linear = kt.MatMul(0.05, w_scales, 0.1, bias=bias)
    got = linear(x, w)
    assert same(got, ref.matmul(x, w, 0.05, w_scales, 0.1, bias))
    fc = k.FullyConnected(np.ascontiguousarray(w.T), bias, in_scale=0.05, w_scales=w_scales,
                          out_scale=0.1)
    assert same(got.reshape(10, 6), fc(x.reshape(10, 16)))
    wide = kt.MatMul(0.05, w_scales, 0.1, bias=bias, in_dtype=I16)    # int16 x int8 weight
    x16 = ints(rng, (2, 5, 16), I16)
    assert same(wide(x16, w), ref.matmul(x16, w, 0.05, w_scales, 0.1, bias))


def test_matmul_float64_bound(monkeypatch):
    assert k.float64_is_exact(2**23, I16, I16) and not k.float64_is_exact(2**23 + 1, I16, I16)
    assert k.float64_is_exact(2**31, I16, I8) and not k.float64_is_exact(2**31 + 1, I16, I8)
    assert k.float64_is_exact(2**39, I8, I8) and not k.float64_is_exact(2**39 + 1, I8, I8)
    # with the bound lowered to K = 12 at the extremes, K = 12 sums in float64 and K = 13 in
    # int64; both exact
    chosen = []

    def spy(*args):
        chosen.append(k.float64_is_exact(*args))
        return chosen[-1]

    monkeypatch.setattr(k, "FLOAT64_EXACT", 12 * 2**30)
    monkeypatch.setattr(kt, "float64_is_exact", spy)
    for depth in (12, 13):
        a = np.full((2, depth), -32768, I16)
        b = np.full((depth, 3), -32768, I16)
        a[1, ::2], b[::3, 1] = 32767, 32767
        b[:, 2] = 1                                # sums that fit int32
        layer = kt.MatMul(1.0, 1.0, 2.0**17, in_dtype=I16, out_dtype=I16)
        accs = ref.matmul_acc(a, b[:, 2:])
        assert same(layer.accumulate(a, b[:, 2:]), accs)
        assert same(layer(a, b[:, 2:]), ref.matmul(a, b[:, 2:], 1.0, 1.0, 2.0**17,
                                                   out_dtype=I16))
        with pytest.raises(QuantisationError, match="int32"):
            layer(a, b)                            # 12 x 2**30 leaves int32
    assert chosen == [True, True, True, False, False, False]


def test_matmul_int8_accumulator_bound():
    depth = 131071                                 # 2**14 x K = 2**31 - 2**14
    a = np.full((1, depth), -128, I8)
    b = np.full((depth, 1), -128, I8)
    layer = kt.MatMul(1.0, 1.0, 2.0**24)
    assert layer.accumulate(a, b).tolist() == [[depth * 2**14]]
    assert layer(a, b).item() == ref.requantize_one(depth * 2**14, 2.0**-24, I8, "none",
                                                    2.0**24)
    with pytest.raises(QuantisationError, match="overflow"):
        kt.MatMul(1.0, 1.0, 1.0, bias=np.array([2**14], np.int32))(a, b)
    with pytest.raises(QuantisationError, match="overflow"):
        layer(np.zeros((1, depth + 1), I8), np.zeros((depth + 1, 1), I8))


def test_matmul_refuses():
    layer = kt.MatMul(0.1, 0.1, 0.1)
    with pytest.raises(QuantisationError, match="multiply"):
        layer(np.zeros((2, 3), I8), np.zeros((4, 2), I8))
    with pytest.raises(QuantisationError, match="multiply"):
        layer(np.zeros((2, 2, 3), I8), np.zeros((3, 3, 2), I8))     # batches 2 and 3
    with pytest.raises(QuantisationError, match="one dimension"):
        layer(np.zeros((), I8), np.zeros(3, I8))
    with pytest.raises(QuantisationError, match="b must be int8"):
        layer(np.zeros((2, 3), I8), np.zeros((3, 2), I16))
    with pytest.raises(QuantisationError, match="a must be int16"):
        kt.MatMul(0.1, 0.1, 0.1, in_dtype=I16)(np.zeros((2, 3), I8), np.zeros((3, 2), I8))
    with pytest.raises(QuantisationError, match="columns"):
        kt.MatMul(0.1, [0.1, 0.2], 0.1)(np.zeros((2, 3), I8), np.zeros((3, 3), I8))
    with pytest.raises(QuantisationError, match="disagree"):
        kt.MatMul(0.1, [0.1, 0.2], 0.1, bias=np.zeros(3, np.int32))
    with pytest.raises(QuantisationError, match="outside the supported"):
        kt.MatMul(1.0, 1.0, 2.0**-40)
    with pytest.raises(QuantisationError):
        kt.MatMul(0.1, [0.1, -1.0], 0.1)
    with pytest.raises(QuantisationError, match="w_scales"):
        kt.MatMul(0.1, [], 0.1)
    with pytest.raises(QuantisationError, match="bias"):
        kt.MatMul(0.1, 0.1, 0.1, bias=np.zeros(0, np.int32))


# ---- reductions, arg max, top-k -----------------------------------------------------------

def test_reductions_by_hand():
    x = np.array([[[-128, 127, 3], [-1, 0, -2]]], I8)         # (1, 2, 3)
    assert kt.reduce_max(x, -1).tolist() == [[[127], [0]]]
    assert kt.reduce_min(x, (1, 2)).tolist() == [[[-128]]]
    assert kt.reduce_max(x).shape == (1, 1, 1)
    # means 2 / 3 -> 1, -3 / 3 -> -1, and over axis 1: -64.5 -> -65, 63.5 -> 64, 0.5 -> 1
    assert kt.reduce_mean(x, 2).tolist() == [[[1], [-1]]]
    assert kt.reduce_mean(x, 1).tolist() == [[[-65, 64, 1]]]
    total = kt.ReduceSum(1.0, 2.0, axes=1)                     # sums / 2
    assert total(x).tolist() == [[[-65, 64, 1]]]
    assert kt.ReduceSum(1.0, 1.0, out_dtype=I16)(x).tolist() == [[[-1]]]


@settings(deadline=None, max_examples=120)
@given(SEEDS, st.sampled_from([I8, I16]), st.sampled_from([I8, I16]))
def test_reductions_random(seed, dtype, out_dtype):
    rng = np.random.default_rng(seed)
    ndim = int(rng.integers(1, 5))
    x = ints(rng, tuple(int(v) for v in rng.integers(1, 5, ndim)), dtype)
    x[rng.random(x.shape) < 0.2] = np.iinfo(dtype).min
    chosen = [a for a in range(ndim) if rng.random() < 0.5]
    axes = None if not chosen else [a - ndim if rng.random() < 0.5 else a for a in chosen]
    if axes is not None and len(axes) == 1 and rng.random() < 0.5:
        axes = axes[0]
    assert same(kt.reduce_max(x, axes), ref.reduce(x, axes, "max"))
    assert same(kt.reduce_min(x, axes), ref.reduce(x, axes, "min"))
    assert same(kt.reduce_mean(x, axes), ref.reduce(x, axes, "mean"))
    in_scale, out_scale = rng.uniform(0.01, 0.1, 2)
    total = kt.ReduceSum(in_scale, out_scale, axes, in_dtype=dtype, out_dtype=out_dtype)
    assert same(total(x), ref.reduce_sum(x, axes, in_scale, out_scale, out_dtype))


def test_reductions_refuse():
    x = np.zeros((2, 3), I8)
    for bad in ((0, -2), 2, -3, [0, 5]):
        with pytest.raises(QuantisationError, match="axes"):
            kt.reduce_max(x, bad)
    with pytest.raises(QuantisationError, match="empty"):
        kt.reduce_mean(np.zeros((2, 0), I8), 1)
    with pytest.raises(QuantisationError, match="int32"):
        kt.ReduceSum(1.0, 1.0, in_dtype=I16)(np.full(65540, 32767, I16))   # 2**31 + 65532
    with pytest.raises(QuantisationError, match="int16"):
        kt.ReduceSum(1.0, 1.0)(np.zeros(3, I16))


def test_arg_extremes_by_hand():
    x = np.array([[3, -128, 3, -128], [127, 127, 0, -5]], I8)
    assert kt.argmax(x, 1).tolist() == [[0], [0]]
    assert kt.argmax(x, 1, select_last_index=True).tolist() == [[2], [1]]
    assert kt.argmin(x, -1, keepdims=False).tolist() == [1, 3]
    assert kt.argmin(x, 1, select_last_index=True).tolist() == [[3], [3]]
    assert kt.argmax(x).tolist() == [[1, 1, 0, 1]]
    assert kt.argmax(x).dtype == np.int64


@settings(deadline=None, max_examples=80)
@given(SEEDS, st.sampled_from([I8, I16]), st.booleans(), st.booleans())
def test_arg_extremes_random(seed, dtype, keepdims, last):
    rng = np.random.default_rng(seed)
    ndim = int(rng.integers(1, 4))
    # few distinct codes, so that ties are common
    x = rng.choice(np.array([np.iinfo(dtype).min, -1, 0, np.iinfo(dtype).max], dtype),
                   tuple(int(v) for v in rng.integers(1, 5, ndim)))
    axis = int(rng.integers(-ndim, ndim))
    for kernel, kind in ((kt.argmax, "max"), (kt.argmin, "min")):
        assert same(kernel(x, axis, keepdims, last),
                    ref.arg_extreme(x, axis, kind, keepdims, last))


def test_topk_by_hand():
    x = np.array([[5, -128, 5, 127, -128, 0]], I8)
    values, indices = kt.topk(x, 3)
    assert values.tolist() == [[127, 5, 5]] and indices.tolist() == [[3, 0, 2]]
    values, indices = kt.topk(x, 3, largest=False)
    assert values.tolist() == [[-128, -128, 0]] and indices.tolist() == [[1, 4, 5]]
    values, indices = kt.topk(x, 1, axis=0)
    assert same(values, x) and indices.tolist() == [[0] * 6]
    assert kt.topk(x, 0)[0].shape == (1, 0) and indices.dtype == np.int64
    with pytest.raises(QuantisationError, match="k must"):
        kt.topk(x, 7)


@settings(deadline=None, max_examples=80)
@given(SEEDS, st.sampled_from([I8, I16]), st.booleans(), st.booleans())
def test_topk_random(seed, dtype, largest, sort):
    rng = np.random.default_rng(seed)
    ndim = int(rng.integers(1, 4))
    shape = tuple(int(v) for v in rng.integers(1, 6, ndim))
    x = rng.choice(np.array([np.iinfo(dtype).min, -3, 0, 2, np.iinfo(dtype).max], dtype),
                   shape)
    axis = int(rng.integers(-ndim, ndim))
    count = int(rng.integers(0, shape[axis] + 1))
    values, indices = kt.topk(x, count, axis, largest, sort)
    expected_values, expected_indices = ref.topk(x, count, axis, largest)
    assert same(values, expected_values) and same(indices, expected_indices)


# ---- pad and permutations ------------------------------------------------------------------

def test_pad_by_hand():
    x = np.array([[1, 2, 3], [4, 5, 6]], I8)
    assert kt.pad(x, [0, 1, 0, 1], code=-128).tolist() == [[-128, 1, 2, 3, -128],
                                                           [-128, 4, 5, 6, -128]]
    assert kt.pad(x, [1, 0, 0, -1]).tolist() == [[0, 0], [1, 2], [4, 5]]
    assert kt.pad(x, [0, 2, 0, 1], "edge").tolist() == [[1, 1, 1, 2, 3, 3],
                                                        [4, 4, 4, 5, 6, 6]]
    assert kt.pad(x, [0, 2, 0, 1], "reflect").tolist() == [[3, 2, 1, 2, 3, 2],
                                                           [6, 5, 4, 5, 6, 5]]
    # crop first, then pad from what is left
    assert kt.pad(x, [0, -1, 0, 1], "edge").tolist() == [[2, 3, 3], [5, 6, 6]]
    assert kt.pad(x, [-1, 1, 0, -1], "reflect").tolist() == [[5, 4, 5]]


@settings(deadline=None, max_examples=120)
@given(SEEDS, st.sampled_from([I8, I16]), st.sampled_from(["constant", "edge", "reflect"]))
def test_pad_random(seed, dtype, mode):
    rng = np.random.default_rng(seed)
    ndim = int(rng.integers(1, 5))
    x = ints(rng, tuple(int(v) for v in rng.integers(1, 5, ndim)), dtype)
    pads = [int(v) for v in rng.integers(-2, 4, 2 * ndim)]
    code = int(rng.choice([0, np.iinfo(dtype).min, np.iinfo(dtype).max]))
    try:
        expected = ref.pad(x, pads, mode, code)
    except ref.Refused:
        with pytest.raises(QuantisationError):
            kt.pad(x, pads, mode, code)
        return
    assert same(kt.pad(x, pads, mode, code), expected)


def test_pad_refuses():
    x = np.zeros((2, 3), I8)
    with pytest.raises(QuantisationError, match="4 ints"):
        kt.pad(x, [1, 1])
    with pytest.raises(QuantisationError, match="nothing"):
        kt.pad(x, [-2, 0, 0, 0])
    with pytest.raises(QuantisationError, match="code"):
        kt.pad(x, [1, 1, 1, 1], code=128)
    with pytest.raises(QuantisationError, match="mirror"):
        kt.pad(x, [0, 3, 0, 0], "reflect")
    with pytest.raises(QuantisationError, match="unknown pad mode"):
        kt.pad(x, [0, 0, 0, 0], "wrap")


@settings(deadline=None, max_examples=40)
@given(SEEDS, st.sampled_from([I8, I16]), st.integers(1, 3))
def test_depth_and_space_random(seed, dtype, block):
    rng = np.random.default_rng(seed)
    n, c, h, w = (int(v) for v in rng.integers(1, 4, 4))
    deep = ints(rng, (n, c * block * block, h, w), dtype)
    for mode in ("DCR", "CRD"):
        assert same(kt.depth_to_space(deep, block, mode), ref.depth_to_space(deep, block, mode))
    flat = ints(rng, (n, c, h * block, w * block), dtype)
    assert same(kt.space_to_depth(flat, block), ref.space_to_depth(flat, block))
    # SpaceToDepth undoes DepthToSpace in DCR mode
    assert same(kt.space_to_depth(kt.depth_to_space(deep, block), block), deep)


def test_depth_and_space_refuse():
    with pytest.raises(QuantisationError, match="blocks"):
        kt.depth_to_space(np.zeros((1, 6, 2, 2), I8), 2)
    with pytest.raises(QuantisationError, match="blocks"):
        kt.space_to_depth(np.zeros((1, 1, 3, 4), I8), 2)
    with pytest.raises(QuantisationError, match="mode"):
        kt.depth_to_space(np.zeros((1, 4, 2, 2), I8), 2, "RCD")
    with pytest.raises(QuantisationError, match="blocksize"):
        kt.space_to_depth(np.zeros((1, 1, 2, 2), I8), 0)


# ---- linear resize ---------------------------------------------------------------------------

MODES = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
         "tf_half_pixel_for_nn"]


def test_resize_linear_by_hand():
    x = np.array([[[[0, 100], [-100, 127]]]], I8)
    # half_pixel x2: source rows -0.25 (clamped to 0), 0.25, 0.75, 1.25 (clamped to 1)
    assert kt.resize_linear(x, (4, 4)).tolist() == [[[
        [0, 25, 75, 100], [-25, 8, 74, 107], [-75, -26, 71, 120], [-100, -43, 70, 127]]]]
    # align_corners 2 -> 3: midpoints; (-100 + 127) / 2 = 13.5 rounds away from zero
    assert kt.resize_linear(x, (3, 3), "align_corners").tolist() == [[[
        [0, 50, 100], [-50, 32, 114], [-100, 14, 127]]]]
    same_size = kt.resize_linear(x, (2, 2))
    assert same(same_size, x)


@settings(deadline=None, max_examples=120)
@given(SEEDS, st.sampled_from([I8, I16]), st.sampled_from(MODES),
       st.sampled_from(["sizes", "fraction", "float"]))
def test_resize_linear_random(seed, dtype, mode, scale_kind):
    rng = np.random.default_rng(seed)
    (n, c), (h, w) = rng.integers(1, 3, 2).tolist(), rng.integers(1, 7, 2).tolist()
    x = ints(rng, (n, c, h, w), dtype)
    x[rng.random(x.shape) < 0.2] = np.iinfo(dtype).max
    if scale_kind == "sizes":                      # up, down, not divisible
        sizes = tuple(int(v) for v in rng.integers(1, 13, 2))
        scales = None
    else:
        steps = [Fraction(int(rng.integers(1, 17)), 4) for _ in range(2)]   # 0.25 ... 4
        scales = tuple(steps if scale_kind == "fraction" else [float(s) for s in steps])
        sizes = (max(1, int(h * steps[0])), max(1, int(w * steps[1])))
    expected = ref.resize_linear(x, sizes, mode, (None, None) if scales is None else scales)
    assert same(kt.resize_linear(x, sizes, mode, scales), expected)


def _onnx_resize(x, sizes, mode):
    """ONNX's own reference Resize (linear) on float copies of the codes."""
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear",
                            coordinate_transformation_mode=mode)
    graph = helper.make_graph(
        [node], "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
                           helper.make_tensor_value_info("sizes", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*x.shape[:2], *sizes])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    onnx.checker.check_model(model)
    sizes = np.array([*x.shape[:2], *sizes], np.int64)
    return ReferenceEvaluator(model).run(None, {"x": x.astype(np.float32), "sizes": sizes})[0]


@pytest.mark.parametrize("mode", MODES[:4])
@pytest.mark.parametrize("sizes", [(7, 3), (2, 9), (1, 1), (5, 5)])
def test_resize_linear_is_within_one_code_of_onnx(mode, sizes):
    rng = np.random.default_rng(len(mode) * 31 + sizes[0])
    x = ints(rng, (1, 2, 5, 4))
    got = kt.resize_linear(x, sizes, mode).astype(np.float64)
    # |out - float| <= 1/2 + 2**-15 x 255, plus float32's own rounding in ONNX's reference
    assert np.abs(got - _onnx_resize(x, sizes, mode)).max() <= 0.5 + 255 / 2**15 + 1e-4


def test_resize_linear_refuses():
    x = np.zeros((1, 1, 2, 2), I8)
    with pytest.raises(QuantisationError, match="sizes"):
        kt.resize_linear(x, (0, 2))
    with pytest.raises(QuantisationError, match="coordinate_transformation_mode"):
        kt.resize_linear(x, (2, 2), "tf_crop_and_resize")
    with pytest.raises(QuantisationError, match="positive"):
        kt.resize_linear(x, (2, 2), scales=(1.0, -1.0))
    with pytest.raises(QuantisationError, match="number"):
        kt.resize_linear(x, (2, 2), scales=(1.0, float("inf")))
    with pytest.raises(QuantisationError, match="dimensions"):
        kt.resize_linear(np.zeros((2, 2), I8), (2, 2))


# ---- GridSample -----------------------------------------------------------------------------

GRID_MODES = ["bilinear", "nearest"]
GRID_PADDINGS = ["zeros", "border"]


def test_grid_sample_by_hand():
    x = np.array([[[[0, 100], [-100, 127]]]], I8)
    # grid scale 1/64 on a 2 x 2 plane, align_corners 0: the coordinate is g / 64 + 1/2, so
    # these (x, y) codes sample (0.5, 0.5), (0, 0), (1, 1), (1.5, 0), (-0.5, 1), (0.75, 0)
    g = np.array([[[[0, 0], [-32, -32], [32, 32], [64, -32], [-64, 32], [16, -32]]]], I8)
    expected = {  # 31.75 rounds to 32; nearest ties go to the even index (0.5 -> 0, 1.5 -> 2)
        ("bilinear", "zeros"): [32, 0, 127, 50, -50, 75],
        ("bilinear", "border"): [32, 0, 127, 100, -100, 75],
        ("nearest", "zeros"): [0, 0, 127, 0, -100, 100],
        ("nearest", "border"): [0, 0, 127, 100, -100, 100]}
    for (mode, padding), values in expected.items():
        sample = kt.GridSample(1 / 64, (2, 2), mode=mode, padding_mode=padding)
        assert sample(x, g).tolist() == [[[values]]], (mode, padding)
    # align_corners 1: g / 128 + 1/2; (0.25, 0.25) is 7.9375, (0.75, 0.75) 71.4375
    aligned = kt.GridSample(1 / 64, (2, 2), align_corners=True)(x, g)
    assert aligned.tolist() == [[[[32, 8, 71, 107, -75, 57]]]]


def _grid_case(rng, dtype, grid_dtype):
    n, c = (int(v) for v in rng.integers(1, 3, 2))
    h, w, oh, ow = (int(v) for v in rng.integers(1, 6, 4))
    x = ints(rng, (n, c, h, w), dtype)
    x[rng.random(x.shape) < 0.2] = np.iinfo(dtype).min
    grid = ints(rng, (n, oh, ow, 2), grid_dtype)
    return x, grid


@settings(deadline=None, max_examples=120)
@given(SEEDS, st.sampled_from([I8, I16]), st.sampled_from([I8, I16]),
       st.sampled_from(GRID_MODES), st.sampled_from(GRID_PADDINGS), st.booleans(),
       st.sampled_from([1 / 127, 0.013, 1 / 64, 0.1, 2.0**-14]))
def test_grid_sample_random(seed, dtype, grid_dtype, mode, padding, align, scale):
    rng = np.random.default_rng(seed)
    x, grid = _grid_case(rng, dtype, grid_dtype)
    sample = kt.GridSample(scale, x.shape[2:], mode=mode, padding_mode=padding,
                           align_corners=align)
    assert same(sample(x, grid), ref.grid_sample(x, grid, scale, mode, padding, align))


@pytest.mark.parametrize("mode", GRID_MODES)
@pytest.mark.parametrize("padding", GRID_PADDINGS)
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_edges(mode, padding, align):
    """Extreme codes, coordinates far outside the plane (a coarse grid scale), 1-pixel axes
    (whose coordinate does not depend on the grid with align_corners) and exact ties."""
    rng = np.random.default_rng(3)
    for shape in ((1, 2, 1, 1), (2, 1, 1, 5), (1, 1, 4, 3)):
        x = np.where(rng.random(shape) < 0.5, -128, 127).astype(I8)
        grid = np.array([-128, 127, 0, -1, 1, 64, -64, 32])[
            rng.integers(0, 8, (shape[0], 3, 4, 2))].astype(I8)
        for scale in (1 / 128, 1 / 64, 0.9, 1e-5):
            sample = kt.GridSample(scale, shape[2:], mode=mode, padding_mode=padding,
                                   align_corners=align)
            assert same(sample(x, grid), ref.grid_sample(x, grid, scale, mode, padding, align))


def _onnx_grid_sample(x, grid, mode, padding, align):
    """ONNX's own reference GridSample (opset 20: bilinear is called linear there)."""
    node = helper.make_node("GridSample", ["x", "grid"], ["y"],
                            mode="linear" if mode == "bilinear" else mode,
                            padding_mode=padding, align_corners=int(align))
    y_shape = [*x.shape[:2], *grid.shape[1:3]]
    graph = helper.make_graph(
        [node], "grid_sample", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
                                helper.make_tensor_value_info("grid", TensorProto.FLOAT,
                                                              grid.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    return ReferenceEvaluator(model).run(None, {"x": x.astype(np.float32),
                                                "grid": grid.astype(np.float32)})[0]


@pytest.mark.parametrize("mode", GRID_MODES)
@pytest.mark.parametrize("padding", GRID_PADDINGS)
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_is_within_one_code_of_onnx(mode, padding, align):
    """ONNX's reference on the codes of X and the grid's values: bilinear within
    1/2 + 2**-15 x 255 codes (and float32's own rounding), nearest the same codes."""
    rng = np.random.default_rng(int(align) * 7 + len(mode) + len(padding))
    x = ints(rng, (1, 2, 5, 4))
    grid_codes = ints(rng, (1, 3, 6, 2))
    scale = 0.0123                                     # so that no coordinate is a tie
    got = kt.GridSample(scale, (5, 4), mode=mode, padding_mode=padding,
                        align_corners=align)(x, grid_codes).astype(np.float64)
    want = _onnx_grid_sample(x, grid_codes * np.float32(scale), mode, padding, align)
    if mode == "nearest":
        assert np.array_equal(got, want)
    else:
        assert np.abs(got - want).max() <= 0.5 + 255 / 2**15 + 1e-4


def test_grid_sample_refuses():
    x, grid = np.zeros((1, 1, 2, 2), I8), np.zeros((1, 3, 3, 2), I8)
    with pytest.raises(QuantisationError, match="mode"):
        kt.GridSample(0.1, (2, 2), mode="bicubic")
    with pytest.raises(QuantisationError, match="padding"):
        kt.GridSample(0.1, (2, 2), padding_mode="reflection")
    with pytest.raises(QuantisationError, match="in_hw"):
        kt.GridSample(0.1, (0, 2))
    with pytest.raises(QuantisationError, match="grid_scale"):
        kt.GridSample(0.0, (2, 2))
    with pytest.raises(QuantisationError, match="outside the supported"):
        kt.GridSample(200.0, (1024, 2))                # a coordinate step of 2**16 pixels
    sample = kt.GridSample(0.1, (2, 2))
    with pytest.raises(QuantisationError, match="samples"):
        sample(np.zeros((1, 1, 3, 2), I8), grid)
    with pytest.raises(QuantisationError, match=r"\(N, OH, OW, 2\)"):
        sample(x, np.zeros((1, 3, 3, 3), I8))
    with pytest.raises(QuantisationError, match="differ in N"):
        sample(x, np.zeros((2, 3, 3, 2), I8))
    with pytest.raises(QuantisationError, match="int8 or int16"):
        sample(x.astype(np.int32), grid)


# ---- LSTM -------------------------------------------------------------------------------------

def _lstm_scales(rng):
    """Random scales of one LSTM direction, as the reference takes them (a dict)."""
    def some(count=None):
        values = rng.uniform(0.002, 0.05, count)
        return tuple(float(v) for v in values) if count else float(values)
    return {"pre": some(4), "gate": some(4), "forget": some(), "update": some(),
            "c": some(), "tanh_c": some(), "h": some()}


def test_lstm_by_hand():
    """No weights: every gate is sigmoid(0) = 1/2 (code 64 at scale 1/128), g = tanh(0) = 0,
    so the cell halves each step (12.5 rounds away from zero to 13) and h = tanh(c) / 2."""
    hidden = 1
    scales = {"pre": (0.01,) * 4, "gate": (1 / 128,) * 4, "forget": 0.01, "update": 0.01,
              "c": 0.01, "tanh_c": 1 / 128, "h": 1 / 256}
    weight = np.zeros((4 * hidden, 2 + hidden), I8)
    cell = kt.Lstm(weight, None, 1e-3, kt.LstmScales(**scales))
    x = np.ones((3, 1, 2), I8)
    h, c = cell(x, np.zeros((1, 1), I8), np.full((1, 1), 100, I8))
    assert c.ravel().tolist() == [50, 25, 13]
    # tanh(0.5) x 128 = 59.15, tanh(0.25) x 128 = 31.35, tanh(0.13) x 128 = 16.55
    assert h.ravel().tolist() == [59, 31, 17]
    expected = ref.lstm(x, np.zeros((1, 1), I8), np.full((1, 1), 100, I8), weight, None,
                        1e-3, scales)
    assert same(h, expected[0]) and same(c, expected[1])


@settings(deadline=None, max_examples=60)
@given(SEEDS, st.booleans())
def test_lstm_random(seed, with_bias):
    rng = np.random.default_rng(seed)
    steps, batch, inputs, hidden = (int(v) for v in rng.integers(1, 5, 4))
    weight = ints(rng, (4 * hidden, inputs + hidden))
    bias = rng.integers(-5000, 5001, 4 * hidden).astype(np.int32) if with_bias else None
    w_scales = rng.uniform(1e-4, 1e-3, 4 * hidden)
    scales = _lstm_scales(rng)
    x = ints(rng, (steps, batch, inputs))
    h0, c0 = ints(rng, (batch, hidden)), ints(rng, (batch, hidden))
    got = kt.Lstm(weight, bias, w_scales, kt.LstmScales(**scales))(x, h0, c0)
    expected = ref.lstm(x, h0, c0, weight, bias, w_scales, scales)
    assert same(got[0], expected[0]) and same(got[1], expected[1])


def test_lstm_saturates_like_the_reference():
    """Extreme codes and weights, and a bias that opens every gate and drives g to the
    fill's sign: pre-activations, gates and the cell state all saturate."""
    rng = np.random.default_rng(5)
    hidden, inputs = 3, 2
    for fill in (-128, 127):
        weight = np.where(rng.random((4 * hidden, inputs + hidden)) < 0.5, -127, 127)
        weight = weight.astype(I8)
        bias = np.full(4 * hidden, 2**20, np.int32)
        bias[3 * hidden:] *= 1 if fill > 0 else -1
        scales = {"pre": (0.1,) * 4, "gate": (0.001,) * 4, "forget": 0.002, "update": 0.002,
                  "c": 0.0001, "tanh_c": 0.002, "h": 0.0005}
        x = np.full((4, 1, inputs), fill, I8)
        states = np.full((1, hidden), fill, I8)
        got = kt.Lstm(weight, bias, 0.05, kt.LstmScales(**scales))(x, states, states)
        expected = ref.lstm(x, states, states, weight, bias, 0.05, scales)
        assert same(got[0], expected[0]) and same(got[1], expected[1])
        assert set(np.unique(got[1]).tolist()) == {fill}                    # so does the cell


def test_lstm_refuses():
    scales = kt.LstmScales((0.1,) * 4, (0.01,) * 4, 0.1, 0.1, 0.1, 0.01, 0.1)
    with pytest.raises(QuantisationError, match=r"\(4H, I \+ H\)"):
        kt.Lstm(np.zeros((6, 3), I8), None, 0.1, scales)
    with pytest.raises(QuantisationError, match=r"\(4H, I \+ H\)"):
        kt.Lstm(np.zeros((4, 1), I8), None, 0.1, scales)     # no input columns
    with pytest.raises(QuantisationError, match="weight must be int8"):
        kt.Lstm(np.zeros((4, 2), I16), None, 0.1, scales)
    with pytest.raises(QuantisationError, match="four"):
        kt.LstmScales((0.1,) * 3, (0.01,) * 4, 0.1, 0.1, 0.1, 0.01, 0.1)
    with pytest.raises(QuantisationError, match="positive"):
        kt.LstmScales((0.1,) * 4, (0.01,) * 4, 0.1, 0.0, 0.1, 0.01, 0.1)
    cell = kt.Lstm(np.zeros((4, 3), I8), None, 0.1, scales)
    state = np.zeros((1, 1), I8)
    with pytest.raises(QuantisationError, match="x must be int8"):
        cell(np.zeros((2, 1, 2), I16), state, state)
    with pytest.raises(QuantisationError, match="takes 2 inputs"):
        cell(np.zeros((2, 1, 3), I8), state, state)
    with pytest.raises(QuantisationError, match=r"h0 must be \(1, 1\)"):
        cell(np.zeros((2, 1, 2), I8), np.zeros((2, 1), I8), state)
