"""Exact integer execution of the quantised BPU's tensor ops: what each computes, bit for bit.

The companion of `emu/nn/kernels.py` for the ops that are neither elementwise nor pooling:
`MatMul`, the reductions, arg max and min, `pad`, `resize_linear`, `depth_to_space`,
`space_to_depth` and `topk`. Its module docstring is the spec this one extends: the same
tensors (int8 or int16 codes, symmetric per-tensor scale, zero point 0), the same fixed-point
multipliers and rounding (half away from zero), the same refusals (`QuantisationError`, one
line saying why). `tests/nn/kernels_reference.py` restates every rule below with Python
integers, loops and Fractions, and `tests/nn/test_kernels_tensor.py` checks that the two agree
bit for bit. Everything here is NumPy over integer arrays (no Python loop per element) or a
numba kernel of kernels.py; this module defines none, so `emu.jit`'s cache key, which covers
the modules that define kernels and the emu modules those import, needs nothing from it.

Axes are ints, negative ones counting from the end, as NumPy and ONNX take them.

MatMul
------
`MatMul` is ONNX MatMul (NumPy `matmul` semantics) of A, codes of the input type, and B,
codes of the input type (a feature map) or int8 (a constant weight, as nn.Linear's on a
[batch, tokens, features] input). Leading (batch) axes broadcast; a 1-D A is one row whose
axis is dropped from the result, a 1-D B one column likewise. For output column j (B's last
axis) the accumulator is

    acc = bias[j] + sum over k of a[..., i, k] x b[..., k, j]

with bias an optional int32 per column in the accumulator's scale a_scale x b_scale[j], and
b_scale one value or one per column (a weight quantised per output channel, as
`FullyConnected`'s w_scales). The accumulator is int32 with `Conv2d`'s rule: when both
operands are int8, |a x b| <= 2**14 and a call is refused before anything is computed unless
2**14 x K + max|bias| <= 2**31 - 1 (K <= 131071 without bias); with an int16 operand no
useful static bound exists, the sum is computed exactly and the call raises if an accumulator
leaves the int32 range.

The sum is a float64 matmul (BLAS) when K x max|a| x max|b| <= 2**53, max|.| the largest
magnitude of the operand's type (`kernels.float64_is_exact`): every product is an integer of
magnitude <= max|a| x max|b|, every intermediate BLAS may form (any order, blocking, FMA,
partial sums across threads) is a sum of some of them, an integer of magnitude
<= K x max|a| x max|b| <= 2**53, which float64 holds exactly, so nothing rounds. That is
K <= 2**39 for int8 x int8 (far beyond the int32 bound), 2**31 for int16 x int8 and 2**23 for
int16 x int16. Past it, the sum is an int64 matmul (NumPy's own integer loops), exact while
K x 2**30 < 2**63. Then `Conv2d`'s requantisation per column: out = clamp(rounding_shift(acc x
M0[j], 31 + n[j])) with the multiplier of a_scale x b_scale[j] / out_scale (float64, in that
order), and the fused activation.

Reductions and arg max
----------------------
The reductions keep the reduced axes with size 1 (ONNX keepdims = 1); `axes` is an int, a
sequence of distinct ints, or None for every axis (ONNX's empty axes with
noop_with_empty_axes = 0). An empty reduction is refused.
- `reduce_max`, `reduce_min`: the largest or smallest code; same scale and type.
- `reduce_mean`: sum / count rounded half away from zero, exactly (`kernels.divide_rounded`:
  |sum| <= 2**15 x count, far below 2**62), count the number of reduced elements; same scale
  and type, as `avg_pool2d`.
- `ReduceSum`: the exact int64 sum, an int32 accumulator (a call raises if it leaves the
  int32 range), then `Rescale`'s rule to out_scale: clamp(rounding_shift(sum x M0, 31 + n))
  with the multiplier of in_scale / out_scale.
- `argmax`, `argmin`: int64 index of the largest or smallest code along one axis, the first
  among equal codes (the last with select_last_index, as ONNX).
- `topk`: the k largest (or smallest) codes along an axis and their int64 indices, ordered
  by value, equal codes by increasing index (ONNX's rule). ONNX leaves the order open when
  sorted = 0; this order is returned then too.

Pad, permutations
-----------------
- `pad` (ONNX Pad): pads = [begin of each axis..., end of each axis...]. Negative pads crop
  first, then positive pads add: in mode "constant" the code given (of the input's type: the
  value code x scale), in "edge" copies of the border code, in "reflect" the mirror image
  without repeating the border (so a pad is at most the cropped length - 1). Axes are never
  cropped to nothing.
- `depth_to_space` (modes DCR and CRD) and `space_to_depth` on NCHW: ONNX's reshape and
  transpose of the codes, a pure permutation.

Linear resize
-------------
`resize_linear` is ONNX Resize, mode "linear", in H and W of an NCHW tensor, as a fixed-point
rule. For each axis of input length L and output length O, scale r (given, as a Fraction or a
float taken exactly, else O / L) and output index o, the source coordinate is the exact
rational ONNX's coordinate_transformation_mode defines:

    half_pixel            (o + 1/2) / r - 1/2
    pytorch_half_pixel    (o + 1/2) / r - 1/2, or 0 when O = 1
    align_corners         o x (L - 1) / (L r - 1), or 0 when L r = 1 (L r is O unless an
                          explicit scale leaves it fractional, as ONNX reads it)
    asymmetric            o / r
    tf_half_pixel_for_nn  (o + 1/2) / r

clamped to [0, L - 1] (ONNX's linear interpolation reads edge-padded data, which is that
clamp). With i0 its floor, i1 = min(i0 + 1, L - 1) and t = c - i0, the weights are Q15:
w1 = round_half_away(t x 2**15), w0 = 2**15 - w1. Then

    out[y, x] = rounding_shift(sum over the 2 x 2 taps of q x wy x wx, 30)

The weights of a pixel sum to 2**30 exactly, so |sum| <= 2**45 (int64) and out lies between
the smallest and largest of its four codes: same scale and type, no saturation. The sum is
taken rows first, then columns; integer sums are exact in any order. This is not bit-identical
to float bilinear interpolation: each Q15 weight is within 2**-16 of t, which moves the value
by at most 2**-15 x (largest - smallest of the four codes), so out is within 1/2 + 2**-15 x 255
< 1 LSB of the float value for int8 and within 2.5 LSB for int16.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Literal

import numpy as np

from emu.nn.kernels import (
    ACC_MAX,
    Activation,
    QuantisationError,
    _activation_type,
    _bias,
    _fixed_point_arrays,
    _requantize,
    _scale_values,
    _tensor,
    _w_scales,
    activation_bounds,
    check_scale,
    divide_rounded,
    float64_is_exact,
    quantize_multiplier,
    round_half_away,
)

Axes = int | Sequence[int] | None
PadMode = Literal["constant", "edge", "reflect"]
CoordinateMode = Literal["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                         "tf_half_pixel_for_nn"]
RESIZE_WEIGHT_BITS = 15
_INT8_PRODUCT_MAX = 2**14


# ---------------------------------------------------------------------------------------
# MatMul


class MatMul:
    """ONNX MatMul of two code tensors (B a feature map of the input type or an int8 weight)
    with requantisation per column of B; see the module docstring for the arithmetic."""

    def __init__(self, a_scale: float, b_scale: float | Sequence[float] | np.ndarray,
                 out_scale: float, *, bias: np.ndarray | None = None,
                 activation: Activation = "none", in_dtype: np.dtype | type = np.int8,
                 out_dtype: np.dtype | type = np.int8) -> None:
        a_scale = check_scale(a_scale, "a_scale")
        out_scale = check_scale(out_scale, "out_scale")
        b_scales = _w_scales(b_scale, max(1, int(np.size(b_scale))))
        self.fixed_points = [quantize_multiplier(a_scale * s / out_scale) for s in b_scales]
        self._multipliers, self._total_shifts = _fixed_point_arrays(self.fixed_points)
        self.bias = _bias(bias, 1 if bias is None else max(1, int(np.size(bias))))
        per_column = {len(b_scales), self.bias.size} - {1}
        if len(per_column) > 1:
            raise QuantisationError(
                f"b_scale ({len(b_scales)} values) and bias ({self.bias.size}) disagree on "
                f"the number of columns")
        self.columns = per_column.pop() if per_column else None
        self.in_dtype = _activation_type(in_dtype, "input")
        self.out_dtype = _activation_type(out_dtype, "output")
        self.lo, self.hi = activation_bounds(activation, self.out_dtype, out_scale)

    def _operands(self, a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
        """K and the number of output columns; bad operands raise."""
        _tensor(a, "a", None, self.in_dtype)
        _tensor(b, "b", None)
        if b.dtype not in (self.in_dtype, np.dtype(np.int8)):   # only int16 for int8 a
            raise QuantisationError(f"b must be int8 (or int16 with int16 a), got {b.dtype}")
        if a.ndim == 0 or b.ndim == 0:
            raise QuantisationError("matmul operands have at least one dimension")
        depth = a.shape[-1]
        columns = 1 if b.ndim == 1 else b.shape[-1]
        if (b.shape[0] if b.ndim == 1 else b.shape[-2]) != depth:
            raise QuantisationError(f"cannot multiply {a.shape} by {b.shape}")
        if self.columns is not None and columns != self.columns:
            raise QuantisationError(
                f"the layer has {self.columns} columns of scales or bias, b has {columns}")
        if self.in_dtype == b.dtype == np.int8:
            bound = _INT8_PRODUCT_MAX * depth + int(np.abs(self.bias).max())
            if bound > ACC_MAX:
                raise QuantisationError(
                    f"int32 accumulator can overflow: 2**14 x K ({depth}) + max|bias| = "
                    f"{bound} > 2**31 - 1")
        return depth, columns

    def _sums(self, a: np.ndarray, b: np.ndarray, depth: int) -> np.ndarray:
        """The exact sums of products, float64 or int64, in matmul's output shape."""
        wide = np.float64 if float64_is_exact(depth, a.dtype, b.dtype) else np.int64
        try:
            return np.asarray(np.matmul(a.astype(wide), b.astype(wide)))  # 1-D @ 1-D: 0-D
        except ValueError:                         # batch axes that do not broadcast
            raise QuantisationError(f"cannot multiply {a.shape} by {b.shape}") from None

    def accumulate(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The exact accumulators bias + sum(a x b), int64, in matmul's output shape."""
        depth, columns = self._operands(a, b)
        sums = self._sums(a, b, depth).astype(np.int64)
        # a 1-D b leaves no column axis: its one bias is added to every sum
        return sums + (self.bias[0] if b.ndim == 1 else _per_column(self.bias, columns))

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        depth, columns = self._operands(a, b)
        sums = self._sums(a, b, depth)
        # (rows, columns, 1): _requantize's channel axis is the column
        flat = np.ascontiguousarray(sums).reshape(-1, columns, 1)
        out = np.empty(flat.shape, self.out_dtype)
        if _requantize(flat, _per_column(self.bias, columns),
                       _per_column(self._multipliers, columns),
                       _per_column(self._total_shifts, columns), self.lo, self.hi, out):
            raise QuantisationError("an accumulator left the int32 range (int16 operand)")
        return out.reshape(sums.shape)


def _per_column(values: np.ndarray, columns: int) -> np.ndarray:
    """A per-column int64 array of `columns` entries from one value or one per column."""
    return np.repeat(values, columns) if values.size == 1 else values


# ---------------------------------------------------------------------------------------
# Reductions, arg max, top-k


def _axes(axes: Axes, ndim: int) -> tuple[int, ...]:
    """Distinct non-negative axes from an int, a sequence or None (every axis)."""
    if axes is None:
        return tuple(range(ndim))
    given = (axes,) if isinstance(axes, int | np.integer) else tuple(axes)
    if not all(isinstance(a, int | np.integer) and -ndim <= a < ndim for a in given):
        raise QuantisationError(f"axes {axes!r} are not axes of a {ndim}-D tensor")
    found = tuple(int(a) % ndim for a in given)
    if len(set(found)) != len(found):
        raise QuantisationError(f"axes {axes!r} repeat an axis")
    return found


def _reduced(x: np.ndarray, axes: Axes, what: str) -> tuple[int, ...]:
    """The checked axes of a reduction of x over at least one element."""
    _tensor(x, "input", None)
    found = _axes(axes, x.ndim)
    if any(x.shape[a] == 0 for a in found):
        raise QuantisationError(f"{what} over an empty axis")
    return found


def reduce_max(x: np.ndarray, axes: Axes = None) -> np.ndarray:
    """The largest code over `axes` (kept with size 1); same scale and type."""
    return np.max(x, axis=_reduced(x, axes, "reduce_max"), keepdims=True)


def reduce_min(x: np.ndarray, axes: Axes = None) -> np.ndarray:
    """The smallest code over `axes` (kept with size 1); same scale and type."""
    return np.min(x, axis=_reduced(x, axes, "reduce_min"), keepdims=True)


def reduce_mean(x: np.ndarray, axes: Axes = None) -> np.ndarray:
    """sum / count over `axes` rounded half away from zero (kept with size 1); same scale
    and type."""
    found = _reduced(x, axes, "reduce_mean")
    count = int(np.prod([x.shape[a] for a in found]))
    total = np.asarray(np.sum(x, axis=found, dtype=np.int64, keepdims=True))
    return divide_rounded(total, count).astype(x.dtype)


class ReduceSum:
    """ONNX ReduceSum (keepdims): the exact sum over `axes`, then `Rescale`'s rule from
    in_scale to out_scale; the sum must fit int32."""

    def __init__(self, in_scale: float, out_scale: float, axes: Axes = None, *,
                 in_dtype: np.dtype | type = np.int8,
                 out_dtype: np.dtype | type = np.int8) -> None:
        in_scale = check_scale(in_scale, "in_scale")
        out_scale = check_scale(out_scale, "out_scale")
        self.axes = axes
        self.in_dtype = _activation_type(in_dtype, "input")
        self.out_dtype = _activation_type(out_dtype, "output")
        self.fixed_point = quantize_multiplier(in_scale / out_scale)
        self.lo, self.hi = activation_bounds("none", self.out_dtype, out_scale)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        _tensor(x, "input", None, self.in_dtype)
        total = np.asarray(np.sum(x, axis=_reduced(x, self.axes, "reduce_sum"),
                                  dtype=np.int64, keepdims=True))
        return _scale_values(total, self.fixed_point, self.lo, self.hi, self.out_dtype)


def _arg_extremum(x: np.ndarray, axis: int, keepdims: bool, select_last_index: bool,
                  find: Literal["argmax", "argmin"]) -> np.ndarray:
    (axis,) = _reduced(x, axis, find)
    pick = np.argmax if find == "argmax" else np.argmin    # both return the first extreme
    if select_last_index:
        last = x.shape[axis] - 1
        index = last - pick(np.flip(x, axis), axis=axis, keepdims=True)
    else:
        index = pick(x, axis=axis, keepdims=True)
    index = index.astype(np.int64)
    return index if keepdims else np.squeeze(index, axis)


def argmax(x: np.ndarray, axis: int = 0, keepdims: bool = True,
           select_last_index: bool = False) -> np.ndarray:
    """int64 index of the largest code along `axis`: the first of equal ones, or the last."""
    return _arg_extremum(x, axis, keepdims, select_last_index, "argmax")


def argmin(x: np.ndarray, axis: int = 0, keepdims: bool = True,
           select_last_index: bool = False) -> np.ndarray:
    """int64 index of the smallest code along `axis`: the first of equal ones, or the last."""
    return _arg_extremum(x, axis, keepdims, select_last_index, "argmin")


def topk(x: np.ndarray, k: int, axis: int = -1, largest: bool = True,
         sorted: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The k largest (or smallest) codes along `axis` and their int64 indices, by value, equal
    codes by increasing index; `sorted` False returns the same order (ONNX leaves it open)."""
    (axis,) = _reduced(x, axis, "topk")
    if not (isinstance(k, int | np.integer) and 0 <= k <= x.shape[axis]):
        raise QuantisationError(f"k must be in [0, {x.shape[axis]}], got {k!r}")
    keys = x.astype(np.int64)                      # int64: -(-128) needs a ninth bit
    # a stable sort keeps equal codes in index order
    order = np.argsort(-keys if largest else keys, axis=axis, kind="stable")
    indices = np.take(order, np.arange(int(k)), axis=axis).astype(np.int64)
    return np.take_along_axis(x, indices, axis=axis), indices


# ---------------------------------------------------------------------------------------
# Pad and permutations


def pad(x: np.ndarray, pads: Sequence[int], mode: PadMode = "constant",
        code: int = 0) -> np.ndarray:
    """ONNX Pad on codes: pads [begins..., ends...] for every axis, negative ones crop first;
    constant `code`, edge or reflect (module docstring)."""
    _tensor(x, "input", None)
    values = tuple(pads)
    if len(values) != 2 * x.ndim or not all(isinstance(p, int | np.integer) for p in values):
        raise QuantisationError(f"pads must be {2 * x.ndim} ints, got {pads!r}")
    begins, ends = values[: x.ndim], values[x.ndim :]
    crop = tuple(slice(max(-b, 0), x.shape[i] - max(-e, 0))
                 for i, (b, e) in enumerate(zip(begins, ends, strict=True)))
    cropped = x[crop]
    if any(size <= 0 for size in cropped.shape):
        raise QuantisationError(f"pads {pads!r} crop an axis of {x.shape} to nothing")
    widths = [(max(int(b), 0), max(int(e), 0)) for b, e in zip(begins, ends, strict=True)]
    if mode == "constant":
        info = np.iinfo(x.dtype)
        if not (isinstance(code, int | np.integer) and info.min <= code <= info.max):
            raise QuantisationError(f"pad code {code!r} is not a {x.dtype} code")
        return np.pad(cropped, widths, mode="constant", constant_values=code)
    if mode == "reflect":
        if any(max(w) > size - 1 for w, size in zip(widths, cropped.shape, strict=True)):
            raise QuantisationError(
                f"reflect pads {pads!r} are longer than {cropped.shape} can mirror")
        return np.pad(cropped, widths, mode="reflect")
    if mode == "edge":
        return np.pad(cropped, widths, mode="edge")
    raise QuantisationError(f"unknown pad mode {mode!r} (constant, edge, reflect)")


def _blocks(x: np.ndarray, blocksize: int) -> int:
    _tensor(x, "input")
    if not (isinstance(blocksize, int | np.integer) and blocksize >= 1):
        raise QuantisationError(f"blocksize must be a positive int, got {blocksize!r}")
    return int(blocksize)


def depth_to_space(x: np.ndarray, blocksize: int,
                   mode: Literal["DCR", "CRD"] = "DCR") -> np.ndarray:
    """ONNX DepthToSpace: (N, C, H, W) to (N, C / b**2, H x b, W x b), the channel split as
    (b, b, C / b**2) in DCR mode or (C / b**2, b, b) in CRD mode."""
    b = _blocks(x, blocksize)
    n, c, height, width = x.shape
    if c % (b * b):
        raise QuantisationError(f"{c} channels do not split into {b} x {b} blocks")
    if mode == "DCR":
        split = x.reshape(n, b, b, c // (b * b), height, width).transpose(0, 3, 4, 1, 5, 2)
    elif mode == "CRD":
        split = x.reshape(n, c // (b * b), b, b, height, width).transpose(0, 1, 4, 2, 5, 3)
    else:
        raise QuantisationError(f"unknown depth_to_space mode {mode!r} (DCR, CRD)")
    return split.reshape(n, c // (b * b), height * b, width * b)


def space_to_depth(x: np.ndarray, blocksize: int) -> np.ndarray:
    """ONNX SpaceToDepth: (N, C, H, W) to (N, C x b**2, H / b, W / b), the block offset
    (row, column) major, then the channel."""
    b = _blocks(x, blocksize)
    n, c, height, width = x.shape
    if height % b or width % b:
        raise QuantisationError(f"{height} x {width} does not split into {b} x {b} blocks")
    blocks = x.reshape(n, c, height // b, b, width // b, b).transpose(0, 3, 5, 1, 2, 4)
    return blocks.reshape(n, c * b * b, height // b, width // b)


# ---------------------------------------------------------------------------------------
# Linear resize


def _source_coordinate(o: int, size_in: int, size_out: int, scale: Fraction,
                       mode: CoordinateMode) -> Fraction:
    """ONNX Resize's coordinate of output index o in the input, exact, before the clamp."""
    if mode == "pytorch_half_pixel" and size_out == 1:
        return Fraction(0)
    if mode in ("half_pixel", "pytorch_half_pixel"):
        return (o + Fraction(1, 2)) / scale - Fraction(1, 2)
    if mode == "align_corners":
        # ONNX's resized length is size_in x scale, which an explicit scale can leave
        # fractional (its conformance cases expect that); without one it is size_out.
        resized = size_in * scale
        return Fraction(0) if resized == 1 else o * (size_in - 1) / (resized - 1)
    if mode == "asymmetric":
        return o / scale
    if mode == "tf_half_pixel_for_nn":
        return (o + Fraction(1, 2)) / scale
    raise QuantisationError(
        f"unknown coordinate_transformation_mode {mode!r} (half_pixel, pytorch_half_pixel, "
        f"align_corners, asymmetric, tf_half_pixel_for_nn)")


def _linear_taps(size_in: int, size_out: int, scale: Fraction | float | None,
                 mode: CoordinateMode) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per output index: the two source indices and their Q15 weights (int64 arrays)."""
    if scale is None:
        exact = Fraction(size_out, size_in)
    else:
        try:
            exact = Fraction(scale)                # a float is taken exactly
        except (TypeError, ValueError, OverflowError):
            raise QuantisationError(f"resize scale must be a number, got {scale!r}") from None
        if exact <= 0:
            raise QuantisationError(f"resize scale must be positive, got {scale!r}")
    first = np.empty(size_out, np.int64)
    weight_second = np.empty(size_out, np.int64)
    one = 2**RESIZE_WEIGHT_BITS
    for o in range(size_out):                      # one entry per output row or column
        c = min(max(_source_coordinate(o, size_in, size_out, exact, mode), Fraction(0)),
                Fraction(size_in - 1))
        whole = c.numerator // c.denominator
        first[o] = whole
        weight_second[o] = round_half_away((c - whole) * one)
    second = np.minimum(first + 1, size_in - 1)
    return first, second, one - weight_second, weight_second


def resize_linear(x: np.ndarray, sizes: tuple[int, int],
                  mode: CoordinateMode = "half_pixel",
                  scales: tuple[Fraction | float, Fraction | float] | None = None,
                  ) -> np.ndarray:
    """ONNX Resize (linear) of an NCHW tensor to `sizes` (OH, OW), with Q15 weights; `scales`
    (H, W) as ONNX's scales input, else OH / H and OW / W. Same scale and type."""
    _tensor(x, "input")
    if not (len(sizes) == 2
            and all(isinstance(s, int | np.integer) and s >= 1 for s in sizes)):
        raise QuantisationError(f"sizes must be two positive ints, got {sizes!r}")
    if x.shape[2] == 0 or x.shape[3] == 0:
        raise QuantisationError(f"cannot resize an empty plane {x.shape}")
    per_axis = (None, None) if scales is None else tuple(scales)
    if len(per_axis) != 2:
        raise QuantisationError(f"scales must be two numbers (H, W), got {scales!r}")
    y0, y1, wy0, wy1 = _linear_taps(x.shape[2], int(sizes[0]), per_axis[0], mode)
    x0, x1, wx0, wx1 = _linear_taps(x.shape[3], int(sizes[1]), per_axis[1], mode)
    codes = x.astype(np.int64)
    rows = codes[:, :, y0, :] * wy0[:, None] + codes[:, :, y1, :] * wy1[:, None]   # <= 2**30
    total = rows[..., x0] * wx0 + rows[..., x1] * wx1                             # <= 2**45
    return divide_rounded(total, 2 ** (2 * RESIZE_WEIGHT_BITS)).astype(x.dtype)
