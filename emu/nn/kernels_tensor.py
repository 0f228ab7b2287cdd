"""Exact integer execution of the quantised BPU's tensor ops: what each computes, bit for bit.

The companion of `emu/nn/kernels.py` for the ops that are neither elementwise nor pooling:
`MatMul`, the reductions, arg max and min, `pad`, `resize_linear`, `GridSample`,
`depth_to_space`, `space_to_depth`, `topk` and the recurrent `Lstm`. Its module docstring
is the spec this one extends: the same tensors (int8 or int16 codes, symmetric per-tensor
scale, zero point 0), the same fixed-point multipliers and rounding (half away from zero),
the same refusals (`QuantisationError`, one line saying why).
`tests/nn/kernels_reference.py` restates every rule below with Python integers, loops and
Fractions, and `tests/nn/test_kernels_tensor.py` checks that the two agree bit for bit.
Everything here is NumPy over integer arrays (no Python loop per element, but one per LSTM
time step, which depends on the step before) or a numba kernel of kernels.py; this module
defines none, so `emu.jit`'s cache key, which covers the modules that define kernels and
the emu modules those import, needs nothing from it.

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

Grid sample
-----------
`GridSample` is ONNX GridSample (PyTorch's grid_sample) of an NCHW tensor X of H x W codes at
the positions a grid gives: grid codes g of shape (N, OH, OW, 2), at the grid's own scale
s_g, hold normalised coordinates n = g x s_g, x (along W) first, then y (along H); the
output (N, C, OH, OW) has X's scale and type. Along an axis of length L the source
coordinate is ONNX's denormalisation, (n + 1) L / 2 - 1/2 (align_corners 0) or
(n + 1) (L - 1) / 2 (align_corners 1), which is g x a + (L - 1) / 2 with a = s_g x L / 2 or
s_g x (L - 1) / 2. It is computed in Q15 fixed point (F = 15 fraction bits):

    c = rounding_shift(g x M0, 31 + n) + (L - 1) x 2**14

with (M0, n) the fixed-point multiplier of the real s_g x S x 2**14 (S = L or L - 1, the
product evaluated in float64 in that order, which must lie in `quantize_multiplier`'s
range: s_g x S < 2**16), and c = (L - 1) x 2**14 when S = 0 (L = 1 with align_corners).
The one rounding is half away from zero at 2**-15 of a pixel. Then, with padding_mode
"border", the coordinate is clamped to [0, (L - 1) x 2**15] (ONNX clamps a coordinate
outside the border to [0, L - 1], and one inside [-1/2, 0) or (L - 1, L - 1/2] reads the
edge pixel twice, which is the same); with "zeros", a tap outside the plane reads the
code 0.
- mode "bilinear": i0 = floor(c / 2**15), t = c - i0 x 2**15 (Q15, in [0, 2**15)), taps i0
  and i0 + 1 with weights 2**15 - t and t along each axis, and

      out = rounding_shift(sum over the 2 x 2 taps of q x wy x wx, 30)

  (ties away from zero), a tap outside the plane reading 0 ("zeros") or the nearest edge
  pixel ("border"). The weights sum to 2**30, so out lies between the smallest and largest
  code read (0 included for "zeros"): same scale and type, no saturation; |sum| <= 2**45.
  The Q15 coordinate is the exact one rounded to 2**-15 of a pixel (and off by the
  multiplier's relative error of 2**-31), so each weight is within about 2**-16 of the
  float one and out within about 1/2 + 2**-15 x 255 < 1 LSB of float interpolation at the
  same grid codes for int8 codes, as `resize_linear` (tests/nn/test_kernels_tensor.py
  checks this against onnx's reference).
- mode "nearest": the index round(c / 2**15) with ties to even (NumPy's rint, which ONNX's
  reference and PyTorch use), clamped to [0, L - 1] for "border"; for "zeros" an index
  outside the plane gives the code 0. The output codes are X's codes (a pure gather).
Modes "bicubic" and padding "reflection" are not computed (J5's BPU does not take them).

LSTM
----
`Lstm` is one direction of ONNX LSTM with the default activations (sigmoid for the gates
i, o, f, tanh for the cell candidate g and the output), no peepholes, no clip: the cell
unrolled over the time steps into the BPU's primitives, as the toolchain unrolls it. All
codes are int8 (J5's operator list gives LSTM no int16). Per step t, with x_t (B, I) the
input codes and h (B, H), c (B, H) the state codes (at the hidden and cell scales):

1. the four gate pre-activations, each a `FullyConnected` of u = [x_t | h] (the codes side
   by side, (B, I + H)) with its H rows of the int8 weight (4H, I + H), in ONNX's gate order
   i, o, f, g, its int32 bias and its per-row scales `w_scales`, requantised to the gate's
   pre-activation scale. The x and h codes have different scales; the weight carries them:
   row j is the quantisation of [W_j x s_x | R_j x s_h] (`emu/nn/quantize.py`), so one
   accumulator unit of row j is worth w_scales[j] and the FC's input scale is 1. That
   keeps one int32 accumulation per row (as a conv over the concatenated codes) at the
   price of weight resolution for the smaller half of a row, whose absolute error is the
   same as the larger half's.
2. i, o, f = `Lut` sigmoid, g = `Lut` tanh of the pre-activations (pre-activation scale to
   the gate's scale);
3. f x c and i x g: `Mul`, each to its own scale; c' = `Add` of the two, to the cell scale;
4. h' = o x `Lut` tanh(c') (the tanh to its scale, the product by `Mul` to the hidden scale).
Every requantisation is the module's rule (fixed-point multipliers, half away from zero,
saturation); the scales are `LstmScales`, calibrated per tensor like any other. The call
gives every step's h and c codes; reversing the sequence (ONNX's reverse direction), the
initial states and the outputs' scales are the caller's (`emu/nn/execute.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np

from emu.nn.kernels import (
    ACC_MAX,
    Activation,
    Add,
    FixedPoint,
    FullyConnected,
    Lut,
    Mul,
    QuantisationError,
    _activation_type,
    _bias,
    _requantize,
    _scale_values,
    _tensor,
    _w_scales,
    activation_bounds,
    apply_multiplier,
    check_scale,
    divide_rounded,
    float64_is_exact,
    quantize_multiplier,
    quantize_multipliers,
    round_half_away,
)

Axes = int | Sequence[int] | None
PadMode = Literal["constant", "edge", "reflect"]
CoordinateMode = Literal["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                         "tf_half_pixel_for_nn"]
GridMode = Literal["bilinear", "nearest"]
GridPadding = Literal["zeros", "border"]
RESIZE_WEIGHT_BITS = 15
GRID_FRACTION_BITS = 15
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
        self._multipliers, self._total_shifts = quantize_multipliers(
            a_scale * b_scales / out_scale)
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


# ---------------------------------------------------------------------------------------
# Grid sample


def _grid_axis(grid_scale: float, length: int, align_corners: bool) -> FixedPoint | None:
    """The fixed point of grid code -> Q15 source coordinate along an axis of `length`
    (None when the coordinate does not depend on the code: L = 1 with align_corners)."""
    span = length - 1 if align_corners else length
    if span == 0:
        return None
    return quantize_multiplier(grid_scale * span * 2.0 ** (GRID_FRACTION_BITS - 1))


class GridSample:
    """ONNX GridSample of an NCHW code tensor at the positions of a grid of codes (see the
    module docstring): bilinear or nearest, padding zeros or border, X's scale and type."""

    def __init__(self, grid_scale: float, in_hw: tuple[int, int], *,
                 mode: GridMode = "bilinear", padding_mode: GridPadding = "zeros",
                 align_corners: bool = False) -> None:
        grid_scale = check_scale(grid_scale, "grid_scale")
        if not (len(in_hw) == 2
                and all(isinstance(v, int | np.integer) and v >= 1 for v in in_hw)):
            raise QuantisationError(f"in_hw must be two positive ints, got {in_hw!r}")
        if mode not in ("bilinear", "nearest"):
            raise QuantisationError(f"unknown grid sample mode {mode!r} (bilinear, nearest)")
        if padding_mode not in ("zeros", "border"):
            raise QuantisationError(
                f"unknown grid sample padding {padding_mode!r} (zeros, border)")
        self.in_hw = (int(in_hw[0]), int(in_hw[1]))
        self.mode = mode
        self.padding_mode = padding_mode
        self.axes = [_grid_axis(grid_scale, length, bool(align_corners))
                     for length in self.in_hw]

    def coordinates(self, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The Q15 source coordinates (y along H, x along W), int64 (N, OH, OW)."""
        _tensor(grid, "grid", 4)
        if grid.shape[3] != 2:
            raise QuantisationError(f"a 2-D grid is (N, OH, OW, 2), got {grid.shape}")
        found = []
        for axis, (length, point) in enumerate(zip(self.in_hw, self.axes, strict=True)):
            codes = grid[..., 1 - axis]               # the grid holds (x, y)
            offset = (length - 1) << (GRID_FRACTION_BITS - 1)
            if point is None:
                found.append(np.full(codes.shape, offset, np.int64))
            else:
                found.append(apply_multiplier(codes, point) + offset)
        return found[0], found[1]

    def __call__(self, x: np.ndarray, grid: np.ndarray) -> np.ndarray:
        _tensor(x, "input")
        if x.shape[2:] != self.in_hw:
            raise QuantisationError(f"the layer samples {self.in_hw} planes, got {x.shape}")
        y, z = self.coordinates(grid)
        if grid.shape[0] != x.shape[0]:
            raise QuantisationError(f"grid {grid.shape} and input {x.shape} differ in N")
        one = 1 << GRID_FRACTION_BITS
        if self.mode == "nearest":
            iy, ix = _round_half_even(y), _round_half_even(z)
            return self._gather(x, iy, ix).astype(x.dtype)
        if self.padding_mode == "border":
            y = np.clip(y, 0, (self.in_hw[0] - 1) * one)
            z = np.clip(z, 0, (self.in_hw[1] - 1) * one)
        y0, z0 = y >> GRID_FRACTION_BITS, z >> GRID_FRACTION_BITS      # floors
        ty = (y - (y0 << GRID_FRACTION_BITS))[:, None]                  # (N, 1, OH, OW)
        tz = (z - (z0 << GRID_FRACTION_BITS))[:, None]
        total = (self._gather(x, y0, z0) * (one - ty) * (one - tz)
                 + self._gather(x, y0, z0 + 1) * (one - ty) * tz
                 + self._gather(x, y0 + 1, z0) * ty * (one - tz)
                 + self._gather(x, y0 + 1, z0 + 1) * ty * tz)               # |.| <= 2**45
        return divide_rounded(total, 1 << (2 * GRID_FRACTION_BITS)).astype(x.dtype)

    def _gather(self, x: np.ndarray, iy: np.ndarray, ix: np.ndarray) -> np.ndarray:
        """int64 (N, C, OH, OW): x at rows iy, columns ix (N, OH, OW); outside the plane 0
        ("zeros") or the nearest edge pixel ("border")."""
        height, width = self.in_hw
        inside = (iy >= 0) & (iy < height) & (ix >= 0) & (ix < width)
        batch = np.arange(x.shape[0])[:, None, None]
        taps = x[batch, :, np.clip(iy, 0, height - 1), np.clip(ix, 0, width - 1)]
        taps = np.moveaxis(taps, 3, 1).astype(np.int64)                  # (N, C, OH, OW)
        if self.padding_mode == "zeros":
            taps = np.where(inside[:, None], taps, 0)
        return taps


def _round_half_even(q15: np.ndarray) -> np.ndarray:
    """Q15 values to the nearest integer, ties to even (NumPy's rint), exactly."""
    whole = q15 >> GRID_FRACTION_BITS
    rest = q15 - (whole << GRID_FRACTION_BITS)
    half = 1 << (GRID_FRACTION_BITS - 1)
    return whole + ((rest > half) | ((rest == half) & (whole % 2 == 1)))


# ---------------------------------------------------------------------------------------
# LSTM


@dataclass(frozen=True)
class LstmScales:
    """The scales of one LSTM direction's codes (see the module docstring): the gate
    pre-activations and the gates (i, o, f, g, ONNX's order), f x c (`forget`), i x g
    (`update`), the cell state c, tanh(c) and the hidden state h."""

    pre: tuple[float, float, float, float]
    gate: tuple[float, float, float, float]
    forget: float
    update: float
    c: float
    tanh_c: float
    h: float

    def __post_init__(self) -> None:
        if len(self.pre) != 4 or len(self.gate) != 4:
            raise QuantisationError("an LSTM has four gate pre-activation and gate scales")
        for name in ("forget", "update", "c", "tanh_c", "h"):
            check_scale(getattr(self, name), name)
        for k in range(4):
            check_scale(self.pre[k], f"pre[{k}]")
            check_scale(self.gate[k], f"gate[{k}]")


_GATE_FUNCTIONS = ("sigmoid", "sigmoid", "sigmoid", "tanh")    # i, o, f, g


class Lstm:
    """One direction of ONNX LSTM (default activations) on int8 codes, unrolled over the
    time steps (see the module docstring). weight: int8 (4H, I + H), the rows of
    [W x s_x | R x s_h] quantised per row; bias: int32 (4H,) or None, in each row's
    accumulator scale; w_scales: the value of one accumulator unit of each row."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None,
                 w_scales: float | Sequence[float] | np.ndarray, scales: LstmScales) -> None:
        weight = _tensor(weight, "weight", 2, np.dtype(np.int8))
        rows, depth = weight.shape
        hidden = rows // 4
        if rows == 0 or rows % 4 or depth <= hidden:
            raise QuantisationError(
                f"an LSTM weight is (4H, I + H) with I, H >= 1, got {weight.shape}")
        self.hidden = hidden
        self.inputs = depth - hidden
        bias_rows = _bias(bias, rows)
        scale_rows = _w_scales(w_scales, rows)
        part = [slice(k * hidden, (k + 1) * hidden) for k in range(4)]
        self.gates = [FullyConnected(weight[p], bias_rows[p], in_scale=1.0,
                                     w_scales=scale_rows[p], out_scale=scales.pre[k])
                      for k, p in enumerate(part)]
        self.activations = [Lut.from_function(f, scales.pre[k], scales.gate[k])
                            for k, f in enumerate(_GATE_FUNCTIONS)]
        gate_i, gate_o, gate_f, gate_g = scales.gate
        self.forget = Mul(gate_f, scales.c, scales.forget)
        self.update = Mul(gate_i, gate_g, scales.update)
        self.cell = Add(scales.forget, scales.update, scales.c)
        self.tanh_c = Lut.from_function("tanh", scales.c, scales.tanh_c)
        self.output = Mul(gate_o, scales.tanh_c, scales.h)

    def __call__(self, x: np.ndarray, h0: np.ndarray,
                 c0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(h, c) codes of every step, (T, B, H) each, from x (T, B, I) and the initial
        states h0, c0 (B, H), all int8, the steps taken in x's order."""
        _tensor(x, "x", 3, np.dtype(np.int8))
        steps, batch, inputs = x.shape
        for name, state in (("h0", h0), ("c0", c0)):
            _tensor(state, name, 2, np.dtype(np.int8))
            if state.shape != (batch, self.hidden):
                raise QuantisationError(
                    f"{name} must be {(batch, self.hidden)}, got {state.shape}")
        if inputs != self.inputs:
            raise QuantisationError(f"the layer takes {self.inputs} inputs, x has {inputs}")
        hs = np.empty((steps, batch, self.hidden), np.int8)
        cs = np.empty((steps, batch, self.hidden), np.int8)
        h, c = h0, c0
        for t in range(steps):           # each step needs the one before: no batching
            u = np.concatenate([x[t], h], axis=1)
            i, o, f, g = (act(fc(u)) for fc, act in zip(self.gates, self.activations,
                                                         strict=True))
            c = self.cell(self.forget(f, c), self.update(i, g))
            h = self.output(o, self.tanh_c(c))
            hs[t], cs[t] = h, c
        return hs, cs
