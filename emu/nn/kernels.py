"""Exact integer execution of quantised BPU layers: what each layer computes, bit for bit.

The numeric core the BPU model runs a quantised graph with. Nothing here is timed or
simulated: every op takes integer tensors and returns the integer tensor the arithmetic
below defines, whatever the host's BLAS, thread count or summation order.
`tests/nn/kernels_reference.py` restates each rule with Python integers and loops, and
`tests/nn/test_kernels.py` checks that the two agree bit for bit. The ops that are not
elementwise or pooling (MatMul, reductions, arg max, pad, linear resize, depth-to-space, top-k)
live in `emu/nn/kernels_tensor.py`, which follows the same rules and says what it adds.

Ops with parameters are objects, built once per layer (scales turned into fixed-point
multipliers, weights into float64 matrices, bounds checked) and then called on tensors:
`Conv2d` (dense, grouped, depthwise), `FullyConnected`, `Add` (and subtract), `Mul`, `Div`,
`Extremum`, `Rescale`, `Concat`, `Lut`. Ops without are functions: `max_pool2d`,
`avg_pool2d`, `global_avg_pool2d`, `resize_nearest`. The scalar rules are public too:
`quantize_multiplier`, `apply_multiplier`, `activation_bounds`, `accumulation_path`,
`float64_is_exact`, `divide_rounded` (integer quotients rounded half away from zero) and
`round_half_away_float64`.

Tensors and quantisation
------------------------
- Activations are NCHW int8 arrays, symmetric per tensor: code q stands for q x scale (zero
  point 0) and the full range [-128, 127] is used. int16 activations (range [-32768, 32767])
  go through the same rules (every op accepts them).
- Weights are int8, symmetric per output channel (`w_scales[c]`; one value is broadcast).
  The bias is int32 in the accumulator's scale, `in_scale x w_scales[c]`.
- A scale is a positive finite number, used as a float64 (exact for float32 scales). A zero,
  negative or non-finite scale raises `QuantisationError`, as does every other argument the
  ops cannot execute exactly (wrong dtype or shape, multiplier out of range, overflow).

Accumulation
------------
A convolution output is acc = bias[c] + sum(x * w) over its K = (C_in / groups) x kh x kw
taps; padding contributes nothing (zero point 0). The accumulator is int32. With int8
activations |x * w| <= 128 x 128 = 2**14, so |acc| <= 2**14 x K + max|bias|, and a layer is
refused when it is built unless that bound is at most 2**31 - 1 (`ACC_MAX`): K <= 131071 with
no bias (ResNet-50's largest K is 4608). With int16 activations |x * w| <= 2**22 and no useful
static bound exists: the sum is computed exactly (in float64 or int64, below) and a call
raises if any accumulator leaves the int32 range.

Exact methods
-------------
- `blas` path (`Conv2d`, dense and grouped): im2col, then float64 matmuls (numpy `@`, i.e.
  BLAS dgemm), one per group. Every operand is an integer, every product x * w an integer of
  magnitude <= max|x| x max|w|, and every intermediate BLAS may form (any order, blocking,
  FMA, partial sums across threads) is a sum of some of those products: an integer of
  magnitude <= K x max|x| x max|w|. float64 holds every integer up to 2**53 exactly, so
  when K x max|x| x max|w| <= 2**53 (`FLOAT64_EXACT`) no operation rounds and the result
  is the exact sum. For int8 activations that is K <= 2**39 (far beyond the int32 bound),
  for int16 K <= 2**31.
- `direct` path: numba loops over outputs and taps with int64 accumulation, exact for any
  realistic K (|acc| <= 2**22 x K < 2**63). `accumulation_path` picks it for groups of one
  input channel (depthwise convolution, where a matmul per channel would be tiny) and as the
  fallback whenever the float64 bound fails.
- Requantisation, pooling and the rest: numba loops or NumPy over integer arrays (int64),
  with no Python loop per element.

Requantisation (conv, fully connected)
--------------------------------------
The real multiplier of output channel c is r = in_scale x w_scales[c] / out_scale, evaluated
in float64 in that order. `quantize_multiplier(r)` turns it into a fixed-point multiplier
M0 and right shift n: r = m x 2**e with m in [0.5, 1) (`math.frexp`); M0 is m x 2**31
rounded half up to an integer (exact: m has 53 bits); if that reaches 2**31, M0 = 2**30
and e grows by one; n = -e. So M0 is in [2**30, 2**31) and M0 x 2**-(31 + n) equals r within
a relative error of 2**-31. Multipliers >= 1 are supported (n is then negative): r must be
in [2**-32, 2**30) and the total shift 31 + n in [1, 62] (which refuses only the r within
2**-32 relative of 2**30 that round up to it); others raise. Then

    out = clamp(rounding_shift(acc x M0, 31 + n), lo, hi)

- rounding_shift(v, s) is v / 2**s rounded to the nearest integer, ties away from zero:
  sign(v) x floor((|v| + 2**(s - 1)) / 2**s). The same rule rounds every op here.
  Half away from zero is symmetric (-x rounds to minus the rounding of x), as
  symmetric quantisation is; it is TFLite's RoundingDivideByPOT rule, applied here once, to
  the exact product (TFLite rounds twice: a doubling high multiply, then that shift).
- acc x M0 is exact in int64: |acc| <= 2**31 and M0 < 2**31, so with the rounding term
  2**(s - 1) <= 2**61 everything stays below 2**63.
- [lo, hi] is the output type's range (int8 or int16: saturation) intersected with the fused
  activation's: none; ReLU, [0, inf); ReLU6, [0, q6] with q6 = 6 / out_scale rounded half
  away from zero (the exact quotient, not its float64 approximation).

Other ops
---------
- `Rescale`: one tensor to another scale, out = clamp(rounding_shift(x x M0, 31 + n)) with
  the multiplier of in_scale / out_scale.
- `Add` (residual connections): inputs a, b (same type) with scales sa, sb; L = 20 for int8
  inputs, 15 for int16 (so x x 2**L stays within int32). With s = 2 x max(sa, sb):
  a' = rounding_shift(a x 2**L x Ma, 31 + na) with (Ma, na) the multiplier of sa / s, b' the
  same with sb / s; out = clamp(rounding_shift((a' + b') x Mo, 31 + no)) with the
  multiplier of s / (out_scale x 2**L), then the fused activation. Shapes broadcast as
  NumPy and ONNX Add do (a per-channel constant of shape (1, C, 1, 1) for instance).
  `Add(..., subtract=True)` is ONNX Sub, a - b: the same rule with b' computed from -b (in
  int64, so -(-128) is 128; rounding half away from zero is symmetric, so b' is minus the
  b' of Add).
- Binary ops below take two tensors of one type (int8 or int16), broadcast as `Add`, and
  give int8 or int16; a multiplier outside `quantize_multiplier`'s range is refused.
- `Mul`: out = clamp(rounding_shift(a x b x M0, 31 + n)) with the multiplier of
  sa x sb / out_scale. |a x b| <= 2**30 (int16), so the product fits the int32 the
  requantisation takes.
- `Div`: out = clamp(round_half_away(a x M0 / (b x 2**(31 + n)))), the exact rational
  rounded, with the multiplier of sa / (sb x out_scale): out x out_scale ~ (a sa) / (b sb).
  With s = 31 + n, |a x M0| < 2**15 x 2**31 = 2**46: for s <= 46 numerator and divisor
  |b| x 2**s <= 2**61 are int64 and the rounded quotient is exact integer division; for
  s > 46 the divisor exceeds twice every numerator and the quotient is 0. b = 0 gives the
  largest code when a > 0, the smallest when a < 0, and 0 when a = 0: the saturation of the
  +inf, -inf and (as NaN has no code) 0 of float division.
- `Extremum` (ONNX Max and Min of two tensors): both inputs to the output scale and type
  with `Rescale`'s rule, then the elementwise max or min (saturation is monotonic, so this
  is also the saturated extremum of the unsaturated values).
- `Concat`: each input rescaled to the output scale (as `Rescale`), then concatenated.
- `max_pool2d`: the largest code in the window (padding never wins); same scale and type.
- `avg_pool2d`: sum / count rounded half away from zero, exactly (integer division), at the
  input's scale; count is the number of window taps inside the input (ONNX's default
  count_include_pad=0) or kh x kw. A different output scale is a `Rescale` after it.
- `global_avg_pool2d`: `avg_pool2d` over the whole plane, shape (N, C, 1, 1).
- `resize_nearest`: out[y, x] = in[y // f, x // f] for an integer factor f; this is ONNX
  Resize (nearest) for an integer scale in half_pixel mode, or in asymmetric mode with
  nearest_mode floor (and f = 2 with the default round_prefer_floor).
- `Lut` (elementwise nonlinearities): a table over every input code, 256 entries for int8
  inputs and 65536 for int16, of int8 or int16 output codes: table[q] =
  clamp(round(f(q x in_scale) / out_scale)). The product q x in_scale, f and the quotient
  are float64; f is vectorised (float64 array in, float64 array of the same shape out, called
  once on every code's input when the table is built), and each quotient is rounded half away
  from zero exactly (the floor of a float64 and the difference to it are exact) and saturated
  to the output type. A quotient of +inf saturates to the largest code, -inf to the smallest,
  and NaN gives 0: codes outside f's domain (the square root of a negative code, say), which
  a calibrated model never produces, still get an entry. `LUT_FUNCTIONS` has sigmoid, SiLU,
  tanh, ONNX HardSigmoid (max(0, min(1, alpha x + beta)), alpha 0.2 and beta 0.5 unless bound
  otherwise, e.g. with functools.partial), ONNX HardSwish (x max(0, min(1, x / 6 + 0.5)))
  and GELU (erf form); any ONNX elementwise op is a callable with its attributes bound, e.g.
  Elu as `lambda x: np.where(x >= 0, x, alpha * (np.exp(x) - 1))`. A table is only as
  reproducible as f (NumPy's exp may differ from libm's in the last bit), so a reference must
  evaluate the same f.

Pool windows: kernel (kh, kw), stride (default: the kernel), dilation and padding as in
`Conv2d`. Padding is one int, (ph, pw), or ONNX's (top, left, bottom, right); the output has
floor((H + top + bottom - dilation x (kh - 1) - 1) / stride) + 1 rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Literal, NamedTuple

import numpy as np

from emu.errors import InputError
from emu.jit import njit

Activation = Literal["none", "relu", "relu6"]
Path = Literal["auto", "blas", "direct"]
IntPair = int | tuple[int, int]
Padding = int | tuple[int, int] | tuple[int, int, int, int]

ACC_MAX = 2**31 - 1
ACC_MIN = -(2**31)
FLOAT64_EXACT = 2**53
MULTIPLIER_MIN = 2.0**-32
MULTIPLIER_LIMIT = 2.0**30
ADD_LEFT_SHIFT = {np.dtype(np.int8): 20, np.dtype(np.int16): 15}
ACTIVATION_TYPES = (np.dtype(np.int8), np.dtype(np.int16))
DIV_SHIFT_MAX = 46                 # Div: |a x M0| < 2**46, so larger shifts round to 0
_I64_MIN = -(2**63)
_I64_MAX = 2**63 - 1


class QuantisationError(InputError):
    """A quantised layer or tensor the kernels cannot execute exactly; the message says why."""


class FixedPoint(NamedTuple):
    """A real multiplier as multiplier x 2**-(31 + shift), multiplier in [2**30, 2**31)."""

    multiplier: int
    shift: int

    @property
    def total_shift(self) -> int:
        return 31 + self.shift

    def as_fraction(self) -> Fraction:
        """The exact value this fixed-point multiplier stands for."""
        return Fraction(self.multiplier, 2**self.total_shift)


# ---------------------------------------------------------------------------------------
# Scalars: scales, multipliers, rounding


def check_scale(value: float, name: str = "scale") -> float:
    """`value` as a float64 scale; a zero, negative or non-finite one raises."""
    try:
        scale = float(value)
    except (TypeError, ValueError):
        raise QuantisationError(f"{name} must be a number, got {value!r}") from None
    if not (math.isfinite(scale) and scale > 0.0):
        raise QuantisationError(f"{name} must be positive and finite, got {value!r}")
    return scale


def quantize_multiplier(real: float) -> FixedPoint:
    """The fixed-point form (M0, n) of a real multiplier, as the module docstring defines it."""
    real = float(real)
    if not (math.isfinite(real) and MULTIPLIER_MIN <= real < MULTIPLIER_LIMIT):
        raise QuantisationError(
            f"real multiplier {real!r} is outside the supported [2**-32, 2**30)")
    mantissa, exponent = math.frexp(real)           # real = mantissa * 2**exponent
    bits = int(mantissa * 2.0**53)                  # exact: the mantissa has 53 bits
    m0 = (bits + 2**21) >> 22                       # m * 2**31 rounded half up
    if m0 == 2**31:
        m0, exponent = 2**30, exponent + 1
    shift = -exponent
    if not 1 <= 31 + shift <= 62:                   # only reachable through the carry above
        raise QuantisationError(
            f"real multiplier {real!r} is outside the supported [2**-32, 2**30)")
    return FixedPoint(m0, shift)


def quantize_multipliers(reals: np.ndarray | Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """`quantize_multiplier` of each value at once: the multipliers M0 and total shifts
    31 + n, int64 arrays. Raises as `quantize_multiplier` does for the first value it
    refuses."""
    values = np.asarray(reals, dtype=np.float64).reshape(-1)
    with np.errstate(invalid="ignore"):
        inside = (values >= MULTIPLIER_MIN) & (values < MULTIPLIER_LIMIT)
    mantissa, exponent = np.frexp(np.where(inside, values, 1.0))
    bits = (mantissa * 2.0**53).astype(np.int64)  # exact: 53-bit mantissas in [2**52, 2**53)
    multipliers = (bits + 2**21) >> 22
    carry = multipliers == 2**31
    multipliers[carry] = 2**30
    total_shifts = 31 - (exponent.astype(np.int64) + carry)
    refused = ~inside | (total_shifts < 1) | (total_shifts > 62)
    if refused.any():
        quantize_multiplier(float(values[np.argmax(refused)]))
    return multipliers, total_shifts


def round_half_away(value: Fraction) -> int:
    """The integer nearest an exact rational, ties away from zero."""
    magnitude = (2 * abs(value.numerator) + value.denominator) // (2 * value.denominator)
    return -magnitude if value < 0 else magnitude


def divide_rounded(numerator: np.ndarray, denominator: np.ndarray | int) -> np.ndarray:
    """numerator / denominator rounded half away from zero, exactly, elementwise in int64:
    sign(n) x floor((2 |n| + d) / (2 d)) for d > 0. 2 |n| + d and 2 d must stay below 2**63."""
    numerator = np.asarray(numerator, np.int64)
    divisor = np.asarray(denominator, np.int64)
    magnitude = (2 * np.abs(numerator) + divisor) // (2 * divisor)
    return np.where(numerator < 0, -magnitude, magnitude)


def round_half_away_float64(values: np.ndarray) -> np.ndarray:
    """Finite float64 values rounded to the nearest integer, ties away from zero, exactly: the
    floor of |v| and the fraction |v| - floor(|v|) are both exact in float64 (unlike
    floor(|v| + 0.5), whose sum can round up)."""
    magnitude = np.abs(values)
    whole = np.floor(magnitude)
    return np.copysign(whole + (magnitude - whole >= 0.5), values)


def activation_bounds(activation: Activation, out_dtype: np.dtype | type,
                      out_scale: float) -> tuple[int, int]:
    """[lo, hi] of the final clamp: the output type's range and the fused activation's."""
    info = np.iinfo(_activation_type(out_dtype, "output"))
    lo, hi = int(info.min), int(info.max)
    out_scale = check_scale(out_scale, "out_scale")
    if activation == "none":
        return lo, hi
    if activation == "relu":
        return 0, hi
    if activation == "relu6":
        return 0, min(hi, round_half_away(Fraction(6) / Fraction(out_scale)))
    raise QuantisationError(f"unknown activation {activation!r} (none, relu, relu6)")


# ---------------------------------------------------------------------------------------
# numba kernels (private): integer loops, no allocation


@njit
def _requantize(acc: np.ndarray, bias: np.ndarray, multiplier: np.ndarray,
                total_shift: np.ndarray, lo: int, hi: int, out: np.ndarray) -> bool:
    """out[n, c, i] = clamp(rounding_shift((acc + bias[c]) * M0[c], s[c]), lo, hi) for an
    integer-valued acc (float64 or int64) of shape (N, C, L); True if any acc + bias left
    the int32 range (out is then not to be used)."""
    overflow = False
    for n in range(acc.shape[0]):
        for c in range(acc.shape[1]):
            b = bias[c]
            m = multiplier[c]
            s = total_shift[c]
            half = np.int64(1) << (s - 1)
            for i in range(acc.shape[2]):
                a = np.int64(acc[n, c, i]) + b
                if a > 2147483647 or a < -2147483648:
                    overflow = True
                    a = 0
                p = a * m
                if p >= 0:
                    r = (p + half) >> s
                else:
                    r = -((half - p) >> s)
                if r < lo:
                    r = lo
                elif r > hi:
                    r = hi
                out[n, c, i] = r
    return overflow


@njit
def _conv_direct(x: np.ndarray, w: np.ndarray, groups: int, window: _Window,
                 acc: np.ndarray) -> None:
    """acc[n, co, oy, ox] += sum of w * x over the taps of the window (its strides, top and
    left pads and dilations), in int64."""
    _, (sy, sx), (pt, pl, _, _), (dy, dx) = window
    height, width = x.shape[2], x.shape[3]
    c_out, c_group, kh, kw = w.shape
    per_group = c_out // groups
    oh, ow = acc.shape[2], acc.shape[3]
    for n in range(x.shape[0]):
        for co in range(c_out):
            first = (co // per_group) * c_group
            for j in range(c_group):
                ci = first + j
                for ky in range(kh):
                    for kx in range(kw):
                        wv = np.int64(w[co, j, ky, kx])
                        if wv == 0:
                            continue
                        for oy in range(oh):
                            iy = oy * sy - pt + ky * dy
                            if iy < 0 or iy >= height:
                                continue
                            for ox in range(ow):
                                ix = ox * sx - pl + kx * dx
                                if 0 <= ix < width:
                                    acc[n, co, oy, ox] += wv * x[n, ci, iy, ix]


@njit
def _pool(x: np.ndarray, window: _Window, average: bool, include_pad: bool,
          out: np.ndarray) -> int:
    """Max or rounded average over each window's taps inside the input; returns the number
    of windows with no tap inside the input (their output is not to be used)."""
    (kh, kw), (sy, sx), (pt, pl, _, _), (dy, dx) = window
    height, width = x.shape[2], x.shape[3]
    empty = 0
    for n in range(x.shape[0]):
        for c in range(x.shape[1]):
            for oy in range(out.shape[2]):
                for ox in range(out.shape[3]):
                    total = np.int64(0)
                    best = np.int64(-(2**62))
                    count = 0
                    for ky in range(kh):
                        iy = oy * sy - pt + ky * dy
                        if iy < 0 or iy >= height:
                            continue
                        for kx in range(kw):
                            ix = ox * sx - pl + kx * dx
                            if 0 <= ix < width:
                                v = np.int64(x[n, c, iy, ix])
                                total += v
                                if v > best:
                                    best = v
                                count += 1
                    if count == 0:
                        empty += 1
                        out[n, c, oy, ox] = 0
                    elif average:
                        if include_pad:
                            count = kh * kw
                        q = (2 * abs(total) + count) // (2 * count)
                        out[n, c, oy, ox] = -q if total < 0 else q
                    else:
                        out[n, c, oy, ox] = best
    return empty


# ---------------------------------------------------------------------------------------
# Argument checks


def _activation_type(dtype: np.dtype | type, what: str) -> np.dtype:
    found = np.dtype(dtype)
    if found not in ACTIVATION_TYPES:
        raise QuantisationError(f"{what} type must be int8 or int16, got {found}")
    return found


def _tensor(x: np.ndarray, name: str, ndim: int | None = 4,
            dtype: np.dtype | None = None) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise QuantisationError(f"{name} must be a numpy array, got {type(x).__name__}")
    if dtype is None:
        _activation_type(x.dtype, name)
    elif x.dtype != dtype:
        raise QuantisationError(f"{name} must be {dtype}, got {x.dtype}")
    if ndim is not None and x.ndim != ndim:
        raise QuantisationError(f"{name} must have {ndim} dimensions, got shape {x.shape}")
    return x


def _positive_pair(value: IntPair, name: str) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int | np.integer) else tuple(value)
    if len(pair) != 2 or not all(isinstance(v, int | np.integer) and v >= 1 for v in pair):
        raise QuantisationError(f"{name} must be a positive int or a pair of them, got {value!r}")
    return int(pair[0]), int(pair[1])


def _pads(padding: Padding) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) from one int, (ph, pw) or ONNX's (top, left, bottom, right)."""
    if isinstance(padding, int | np.integer):
        values: tuple[int, ...] = (int(padding),) * 4
    else:
        values = tuple(padding)
        if len(values) == 2:
            values = values * 2
    if len(values) != 4 or not all(isinstance(v, int | np.integer) and v >= 0 for v in values):
        raise QuantisationError(f"padding must be non-negative ints (1, 2 or 4), got {padding!r}")
    top, left, bottom, right = (int(v) for v in values)
    return top, left, bottom, right


def _output_size(size: int, kernel: int, stride: int, before: int, after: int,
                 dilation: int, what: str) -> int:
    span = dilation * (kernel - 1) + 1
    if size + before + after < span:
        raise QuantisationError(
            f"{what}: window of {span} does not fit an input of {size} padded by "
            f"{before} + {after}")
    return (size + before + after - span) // stride + 1


class _Window(NamedTuple):
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]
    dilation: tuple[int, int]

    def output_shape(self, height: int, width: int, what: str) -> tuple[int, int]:
        top, left, bottom, right = self.pads
        return (_output_size(height, self.kernel[0], self.stride[0], top, bottom,
                             self.dilation[0], what),
                _output_size(width, self.kernel[1], self.stride[1], left, right,
                             self.dilation[1], what))


def _window(kernel: IntPair, stride: IntPair | None, padding: Padding,
            dilation: IntPair) -> _Window:
    size = _positive_pair(kernel, "kernel")
    return _Window(size, size if stride is None else _positive_pair(stride, "stride"),
                   _pads(padding), _positive_pair(dilation, "dilation"))


def _bias(bias: np.ndarray | None, channels: int) -> np.ndarray:
    if bias is None:
        return np.zeros(channels, np.int64)
    values = np.asarray(bias)
    if values.dtype.kind not in "iu" or values.shape != (channels,):
        raise QuantisationError(
            f"bias must be {channels} integers (int32), got {values.dtype} {values.shape}")
    values = values.astype(np.int64)
    if values.size and (values.min() < ACC_MIN or values.max() > ACC_MAX):
        raise QuantisationError("bias values must fit int32")
    return values


def _w_scales(w_scales: float | Sequence[float] | np.ndarray, channels: int) -> np.ndarray:
    try:
        values = np.asarray(w_scales, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise QuantisationError(f"w_scales must be numbers, got {w_scales!r}") from None
    if values.size == 1:
        values = np.repeat(values, channels)
    if values.size != channels:
        raise QuantisationError(
            f"w_scales must hold 1 or {channels} values, got {values.size}")
    with np.errstate(invalid="ignore"):
        wrong = ~(np.isfinite(values) & (values > 0.0))
    if wrong.any():
        first = int(np.argmax(wrong))
        check_scale(float(values[first]), f"w_scales[{first}]")
    return values


def _fixed_point_arrays(points: Sequence[FixedPoint]) -> tuple[np.ndarray, np.ndarray]:
    multipliers = np.array([p.multiplier for p in points], dtype=np.int64)
    total_shifts = np.array([p.total_shift for p in points], dtype=np.int64)
    return multipliers, total_shifts


def _scale_values(values: np.ndarray, point: FixedPoint, lo: int, hi: int,
                  out_dtype: np.dtype) -> np.ndarray:
    """clamp(rounding_shift(values x M0, 31 + n), lo, hi), per tensor, any shape; values
    must fit int32."""
    flat = np.ascontiguousarray(values, dtype=np.int64).reshape(1, 1, -1)
    out = np.empty(flat.shape, out_dtype)
    multiplier, total_shift = _fixed_point_arrays([point])
    if _requantize(flat, np.zeros(1, np.int64), multiplier, total_shift, lo, hi, out):
        raise QuantisationError("a value to requantise is outside the int32 range")
    return out.reshape(values.shape)


def apply_multiplier(values: np.ndarray, point: FixedPoint) -> np.ndarray:
    """rounding_shift(values x M0, 31 + n) as int64, no clamp; values must fit int32."""
    return _scale_values(np.asarray(values), point, _I64_MIN, _I64_MAX, np.dtype(np.int64))


# ---------------------------------------------------------------------------------------
# Convolution and fully connected


def float64_is_exact(k: int, in_dtype: np.dtype | type = np.int8,
                     w_dtype: np.dtype | type = np.int8) -> bool:
    """Whether every partial sum of K products x * w is an integer float64 holds exactly:
    K x max|x| x max|w| <= 2**53, max|x| and max|w| 128 (int8) or 32768 (int16)."""
    largest_x = -int(np.iinfo(_activation_type(in_dtype, "input")).min)
    largest_w = -int(np.iinfo(_activation_type(w_dtype, "weight")).min)
    return k * largest_x * largest_w <= FLOAT64_EXACT


def accumulation_path(k: int, in_channels_per_group: int,
                      in_dtype: np.dtype | type = np.int8) -> Literal["blas", "direct"]:
    """`blas` when the float64 matmul is exact and worth it (more than one input channel per
    group), else `direct`."""
    if in_channels_per_group > 1 and float64_is_exact(k, in_dtype):
        return "blas"
    return "direct"


class Conv2d:
    """A quantised 2-D convolution (dense, grouped or depthwise) with requantisation.

    weight: int8 (C_out, C_in / groups, kh, kw); bias: int32 (C_out,) or None; scales and the
    rest as the module docstring says. Calling it on an (N, C_in, H, W) array of `in_dtype`
    gives the (N, C_out, OH, OW) array of `out_dtype`.
    """

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None = None, *,
                 in_scale: float, w_scales: float | Sequence[float] | np.ndarray,
                 out_scale: float, stride: IntPair = 1, padding: Padding = 0,
                 dilation: IntPair = 1, groups: int = 1, activation: Activation = "none",
                 in_dtype: np.dtype | type = np.int8, out_dtype: np.dtype | type = np.int8,
                 path: Path = "auto") -> None:
        weight = _tensor(weight, "weight", 4, np.dtype(np.int8))
        c_out, c_group, kh, kw = weight.shape
        if not (isinstance(groups, int) and groups >= 1 and c_out % groups == 0
                and min(weight.shape) >= 1):
            raise QuantisationError(
                f"groups ({groups!r}) must divide the {c_out} output channels of a non-empty "
                f"weight")
        self.weight = np.array(weight, order="C")      # a copy: later edits do not leak in
        self.groups = groups
        self.in_channels = c_group * groups
        self.out_channels = c_out
        self.k = c_group * kh * kw
        self.window = _window((kh, kw), stride, padding, dilation)
        self.in_dtype = _activation_type(in_dtype, "input")
        self.out_dtype = _activation_type(out_dtype, "output")
        self.bias = _bias(bias, c_out)
        in_scale = check_scale(in_scale, "in_scale")
        out_scale = check_scale(out_scale, "out_scale")
        self._multipliers, self._total_shifts = quantize_multipliers(
            in_scale * _w_scales(w_scales, c_out) / out_scale)
        self.lo, self.hi = activation_bounds(activation, self.out_dtype, out_scale)
        if self.in_dtype == np.int8:
            bound = 2**14 * self.k + int(np.abs(self.bias).max())
            if bound > ACC_MAX:
                raise QuantisationError(
                    f"int32 accumulator can overflow: 2**14 x K ({self.k}) + max|bias| = "
                    f"{bound} > 2**31 - 1")
        if path == "auto":
            self.path: Literal["blas", "direct"] = accumulation_path(self.k, c_group,
                                                                     self.in_dtype)
        elif path == "blas" and not float64_is_exact(self.k, self.in_dtype):
            raise QuantisationError(f"the float64 matmul is not exact for K = {self.k}")
        elif path in ("blas", "direct"):
            self.path = path
        else:
            raise QuantisationError(f"unknown path {path!r} (auto, blas, direct)")
        if self.path == "blas":
            self._matrix = weight.reshape(groups, c_out // groups, self.k).astype(np.float64)

    def _check_input(self, x: np.ndarray) -> tuple[int, int]:
        _tensor(x, "input", 4, self.in_dtype)
        if x.shape[1] != self.in_channels:
            raise QuantisationError(
                f"input has {x.shape[1]} channels, the layer takes {self.in_channels}")
        return self.window.output_shape(x.shape[2], x.shape[3], "conv2d")

    def _sums(self, x: np.ndarray, oh: int, ow: int) -> np.ndarray:
        """The sums of products without the bias, (N, C_out, OH x OW), float64 or int64."""
        n = x.shape[0]
        win = self.window
        if self.path == "direct":
            acc = np.zeros((n, self.out_channels, oh, ow), np.int64)
            _conv_direct(np.ascontiguousarray(x), self.weight, self.groups, win, acc)
            return acc.reshape(n, self.out_channels, oh * ow)
        cols = _im2col(x, win, oh, ow)
        cols = cols.reshape(n, self.groups, self.k, oh * ow)
        return np.matmul(self._matrix, cols).reshape(n, self.out_channels, oh * ow)

    def accumulate(self, x: np.ndarray) -> np.ndarray:
        """The exact accumulators bias + sum(x * w), int64 (N, C_out, OH, OW)."""
        oh, ow = self._check_input(x)
        sums = self._sums(x, oh, ow).astype(np.int64)
        return (sums + self.bias[None, :, None]).reshape(x.shape[0], self.out_channels, oh, ow)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        oh, ow = self._check_input(x)
        sums = self._sums(x, oh, ow)
        out = np.empty(sums.shape, self.out_dtype)
        if _requantize(sums, self.bias, self._multipliers, self._total_shifts, self.lo,
                       self.hi, out):
            raise QuantisationError("an accumulator left the int32 range (int16 input)")
        return out.reshape(x.shape[0], self.out_channels, oh, ow)


def _im2col(x: np.ndarray, win: _Window, oh: int, ow: int) -> np.ndarray:
    """float64 (N, C x kh x kw, OH x OW): column (oy, ox) holds the window of that output,
    channel-major then kernel row then column, as the weight's flattened rows."""
    n, c, height, width = x.shape
    (kh, kw), (sy, sx), (dy, dx) = win.kernel, win.stride, win.dilation
    top, left, bottom, right = win.pads
    if kh == kw == 1 and not any(win.pads):
        picked = x[:, :, : (oh - 1) * sy + 1 : sy, : (ow - 1) * sx + 1 : sx]
        return picked.astype(np.float64).reshape(n, c, oh * ow)
    padded = np.zeros((n, c, height + top + bottom, width + left + right), np.float64)
    padded[:, :, top : top + height, left : left + width] = x
    s0, s1, s2, s3 = padded.strides
    view = np.lib.stride_tricks.as_strided(
        padded, (n, c, kh, kw, oh, ow), (s0, s1, s2 * dy, s3 * dx, s2 * sy, s3 * sx),
        writeable=False)
    return view.reshape(n, c * kh * kw, oh * ow)


class FullyConnected:
    """A quantised fully connected layer: weight int8 (M, K), input (N, K), output (N, M);
    computed as the 1 x 1 convolution of (N, K, 1, 1), with the same rules."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None = None, *,
                 in_scale: float, w_scales: float | Sequence[float] | np.ndarray,
                 out_scale: float, activation: Activation = "none",
                 in_dtype: np.dtype | type = np.int8, out_dtype: np.dtype | type = np.int8,
                 path: Path = "auto") -> None:
        weight = _tensor(weight, "weight", 2, np.dtype(np.int8))
        self.conv = Conv2d(weight[:, :, None, None], bias, in_scale=in_scale,
                           w_scales=w_scales, out_scale=out_scale, activation=activation,
                           in_dtype=in_dtype, out_dtype=out_dtype, path=path)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        _tensor(x, "input", 2)
        return self.conv(x[:, :, None, None])[:, :, 0, 0]


# ---------------------------------------------------------------------------------------
# Elementwise: rescale, add and subtract, mul, div, max and min, concat, LUT


class Rescale:
    """A tensor (int8 or int16) to another scale and type: multiplier in_scale / out_scale."""

    def __init__(self, in_scale: float, out_scale: float, *,
                 out_dtype: np.dtype | type = np.int8) -> None:
        in_scale = check_scale(in_scale, "in_scale")
        out_scale = check_scale(out_scale, "out_scale")
        self.fixed_point = quantize_multiplier(in_scale / out_scale)
        self.out_dtype = _activation_type(out_dtype, "output")
        self.lo, self.hi = activation_bounds("none", self.out_dtype, out_scale)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        _tensor(x, "input", None)
        return _scale_values(x, self.fixed_point, self.lo, self.hi, self.out_dtype)


def _check_pair(a: np.ndarray, b: np.ndarray, dtype: np.dtype) -> tuple[int, ...]:
    """The broadcast shape of two inputs of one activation type; mismatches raise."""
    _tensor(a, "a", None, dtype)
    _tensor(b, "b", None, dtype)
    try:
        return np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise QuantisationError(f"cannot broadcast {a.shape} with {b.shape}") from None


class Add:
    """The requantised elementwise sum of two tensors of one type (see the module docstring),
    broadcast as NumPy / ONNX Add, with an optional fused activation; with `subtract`, the
    difference a - b (ONNX Sub) by the same rule."""

    def __init__(self, a_scale: float, b_scale: float, out_scale: float, *,
                 activation: Activation = "none", in_dtype: np.dtype | type = np.int8,
                 out_dtype: np.dtype | type = np.int8, subtract: bool = False) -> None:
        a_scale = check_scale(a_scale, "a_scale")
        b_scale = check_scale(b_scale, "b_scale")
        out_scale = check_scale(out_scale, "out_scale")
        self.in_dtype = _activation_type(in_dtype, "input")
        self.out_dtype = _activation_type(out_dtype, "output")
        self.left_shift = ADD_LEFT_SHIFT[self.in_dtype]
        self.b_sign = -1 if subtract else 1
        twice_max = 2.0 * max(a_scale, b_scale)
        self.a_point = quantize_multiplier(a_scale / twice_max)
        self.b_point = quantize_multiplier(b_scale / twice_max)
        self.out_point = quantize_multiplier(twice_max / (out_scale * 2.0**self.left_shift))
        self.lo, self.hi = activation_bounds(activation, self.out_dtype, out_scale)

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        _check_pair(a, b, self.in_dtype)
        a_fixed = apply_multiplier(a.astype(np.int64) << self.left_shift, self.a_point)
        b_signed = self.b_sign * b.astype(np.int64)     # int64: -(-128) needs a ninth bit
        b_fixed = apply_multiplier(b_signed << self.left_shift, self.b_point)
        return _scale_values(a_fixed + b_fixed, self.out_point, self.lo, self.hi,
                             self.out_dtype)


class _ScaledPair:
    """An op of two tensors of one type requantised by one real multiplier of the three
    scales (each subclass's `_multiplier`): its checked types, fixed point and output
    bounds."""

    _multiplier: Callable[[float, float, float], float]

    def __init__(self, a_scale: float, b_scale: float, out_scale: float, *,
                 in_dtype: np.dtype | type = np.int8,
                 out_dtype: np.dtype | type = np.int8) -> None:
        a_scale = check_scale(a_scale, "a_scale")
        b_scale = check_scale(b_scale, "b_scale")
        out_scale = check_scale(out_scale, "out_scale")
        self.in_dtype = _activation_type(in_dtype, "input")
        self.out_dtype = _activation_type(out_dtype, "output")
        self.fixed_point = quantize_multiplier(self._multiplier(a_scale, b_scale, out_scale))
        self.lo, self.hi = activation_bounds("none", self.out_dtype, out_scale)


class Mul(_ScaledPair):
    """The requantised elementwise product of two tensors of one type, broadcast as ONNX Mul:
    clamp(rounding_shift(a x b x M0, 31 + n)), multiplier a_scale x b_scale / out_scale."""

    @staticmethod
    def _multiplier(a_scale: float, b_scale: float, out_scale: float) -> float:
        return a_scale * b_scale / out_scale

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        _check_pair(a, b, self.in_dtype)
        return _scale_values(a.astype(np.int64) * b, self.fixed_point, self.lo, self.hi,
                             self.out_dtype)


class Div(_ScaledPair):
    """The requantised elementwise quotient of two tensors of one type, broadcast as ONNX Div:
    clamp(round_half_away(a x M0 / (b x 2**(31 + n)))), multiplier a_scale / (b_scale x
    out_scale); b = 0 saturates (see the module docstring)."""

    @staticmethod
    def _multiplier(a_scale: float, b_scale: float, out_scale: float) -> float:
        return a_scale / (b_scale * out_scale)

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        shape = _check_pair(a, b, self.in_dtype)
        a_wide = np.broadcast_to(a.astype(np.int64), shape)
        b_wide = np.broadcast_to(b.astype(np.int64), shape)
        shift = self.fixed_point.total_shift
        if shift > DIV_SHIFT_MAX:
            quotient = np.zeros(shape, np.int64)
        else:
            # the sign of b moves to the numerator so that the divisor is positive; a zero b
            # divides by 1 here and is replaced below
            numerator = a_wide * self.fixed_point.multiplier * np.sign(b_wide)
            quotient = divide_rounded(numerator, np.maximum(np.abs(b_wide), 1) << shift)
        by_zero = np.where(a_wide > 0, self.hi, np.where(a_wide < 0, self.lo, 0))
        out = np.where(b_wide == 0, by_zero, np.clip(quotient, self.lo, self.hi))
        return out.astype(self.out_dtype)


class Extremum:
    """ONNX Max (`kind` "max") or Min ("min") of two tensors of one type, broadcast: each
    input to out_scale and `out_dtype` with `Rescale`'s rule, then the elementwise extremum."""

    def __init__(self, kind: Literal["max", "min"], a_scale: float, b_scale: float,
                 out_scale: float, *, in_dtype: np.dtype | type = np.int8,
                 out_dtype: np.dtype | type = np.int8) -> None:
        if kind not in ("max", "min"):
            raise QuantisationError(f"unknown extremum {kind!r} (max, min)")
        self.pick = np.maximum if kind == "max" else np.minimum
        self.in_dtype = _activation_type(in_dtype, "input")
        self.a_rescale = Rescale(a_scale, out_scale, out_dtype=out_dtype)
        self.b_rescale = Rescale(b_scale, out_scale, out_dtype=out_dtype)

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        _check_pair(a, b, self.in_dtype)
        return self.pick(self.a_rescale(a), self.b_rescale(b))


class Concat:
    """Inputs, each at its own scale, rescaled to `out_scale` and joined along `axis`."""

    def __init__(self, in_scales: Sequence[float], out_scale: float, *, axis: int = 1,
                 out_dtype: np.dtype | type = np.int8) -> None:
        if not in_scales:
            raise QuantisationError("concat needs at least one input")
        self.parts = [Rescale(s, out_scale, out_dtype=out_dtype) for s in in_scales]
        self.axis = axis

    def __call__(self, inputs: Sequence[np.ndarray]) -> np.ndarray:
        if len(inputs) != len(self.parts):
            raise QuantisationError(
                f"concat was built for {len(self.parts)} inputs, got {len(inputs)}")
        try:
            return np.concatenate([part(x) for part, x in zip(self.parts, inputs, strict=True)],
                                  axis=self.axis)
        except ValueError as error:  # AxisError is one
            raise QuantisationError(f"cannot concatenate: {error}") from None


@njit
def _erf_flat(values: np.ndarray, out: np.ndarray) -> None:
    """out[i] = erf(values[i]) (libm's, as math.erf), for 1-D float64 arrays."""
    for i in range(values.shape[0]):
        out[i] = math.erf(values[i])


def erf(x: np.ndarray) -> np.ndarray:
    """The error function of every element; NumPy has none."""
    flat = np.ascontiguousarray(x, np.float64).reshape(-1)
    out = np.empty_like(flat)
    _erf_flat(flat, out)
    return out.reshape(np.shape(x))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # exp(-|x|) never overflows: 1 / (1 + e) on the right, e / (1 + e) on the left
    e = np.exp(-np.abs(x))
    return np.where(x >= 0.0, 1.0 / (1.0 + e), e / (1.0 + e))


def _hard_sigmoid(x: np.ndarray, alpha: float = 0.2, beta: float = 0.5) -> np.ndarray:
    """ONNX HardSigmoid; PyTorch's Hardsigmoid is alpha 1/6, beta 0.5."""
    return np.clip(alpha * x + beta, 0.0, 1.0)


LUT_FUNCTIONS: dict[str, Callable[..., np.ndarray]] = {
    "sigmoid": _sigmoid,
    "silu": lambda x: x * _sigmoid(x),
    "tanh": np.tanh,
    "hardsigmoid": _hard_sigmoid,
    "hardswish": lambda x: x * np.clip(x / 6.0 + 0.5, 0.0, 1.0),
    "gelu": lambda x: 0.5 * x * (1.0 + erf(x / math.sqrt(2.0))),
}
LUT_SIZES: dict[np.dtype, int] = {np.dtype(np.int8): 256, np.dtype(np.int16): 65536}
_UNSIGNED: dict[np.dtype, np.dtype] = {np.dtype(np.int8): np.dtype(np.uint8),
                                       np.dtype(np.int16): np.dtype(np.uint16)}


class Lut:
    """An elementwise op through a table over every input code: 256 entries for int8 inputs,
    65536 for int16, table[q - min code] the output code (int8 or int16) of input code q."""

    def __init__(self, table: np.ndarray) -> None:
        table = _tensor(table, "table", 1)
        sizes = {size: dtype for dtype, size in LUT_SIZES.items()}
        if table.shape[0] not in sizes:
            raise QuantisationError(
                f"a LUT has 256 (int8 input) or 65536 (int16 input) entries, got "
                f"{table.shape[0]}")
        self.in_dtype = sizes[table.shape[0]]
        self.out_dtype = table.dtype
        self.table = table.copy()
        # indexed by the code's bit pattern, which puts codes 0, 1, ... max before min ... -1
        self._by_bits = np.roll(self.table, -(table.shape[0] // 2))

    @classmethod
    def from_function(cls, function: Callable[[np.ndarray], np.ndarray] | str,
                      in_scale: float, out_scale: float, *,
                      in_dtype: np.dtype | type = np.int8,
                      out_dtype: np.dtype | type = np.int8) -> Lut:
        """table[q] = clamp(round_half_away(f(q x in_scale) / out_scale)) for every code q of
        `in_dtype`, into `out_dtype`; +-inf saturate and NaN gives 0 (module docstring)."""
        if isinstance(function, str):
            if function not in LUT_FUNCTIONS:
                raise QuantisationError(
                    f"unknown LUT function {function!r} ({', '.join(LUT_FUNCTIONS)})")
            function = LUT_FUNCTIONS[function]
        in_scale = check_scale(in_scale, "in_scale")
        out_scale = check_scale(out_scale, "out_scale")
        info = np.iinfo(_activation_type(in_dtype, "input"))
        lo, hi = activation_bounds("none", out_dtype, out_scale)
        inputs = np.arange(int(info.min), int(info.max) + 1).astype(np.float64) * in_scale
        with np.errstate(all="ignore"):                # outside f's domain: NaN or inf
            values = np.asarray(function(inputs), np.float64) / out_scale
        if values.shape != inputs.shape:
            raise QuantisationError(
                f"a LUT function maps an array to one of the same shape, got {values.shape} "
                f"for {inputs.shape}")
        # clamping before rounding gives the same codes (lo and hi are integers) and makes
        # every value finite but NaN
        values = np.nan_to_num(np.clip(values, lo, hi), nan=0.0)
        return cls(round_half_away_float64(values).astype(out_dtype))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        _tensor(x, "input", None, self.in_dtype)
        return self._by_bits[x.view(_UNSIGNED[self.in_dtype])]


# ---------------------------------------------------------------------------------------
# Pooling and resize


def _pool2d(x: np.ndarray, window: _Window, average: bool, include_pad: bool,
            what: str) -> np.ndarray:
    _tensor(x, "input")
    oh, ow = window.output_shape(x.shape[2], x.shape[3], what)
    out = np.empty((x.shape[0], x.shape[1], oh, ow), x.dtype)
    if _pool(np.ascontiguousarray(x), window, average, include_pad, out):
        raise QuantisationError(f"{what}: a window lies entirely in the padding")
    return out


def max_pool2d(x: np.ndarray, kernel: IntPair, stride: IntPair | None = None,
               padding: Padding = 0, dilation: IntPair = 1) -> np.ndarray:
    """The largest code of each window (padding excluded); int8 or int16, scale unchanged."""
    return _pool2d(x, _window(kernel, stride, padding, dilation), False, False, "max_pool2d")


def avg_pool2d(x: np.ndarray, kernel: IntPair, stride: IntPair | None = None,
               padding: Padding = 0, dilation: IntPair = 1,
               count_include_pad: bool = False) -> np.ndarray:
    """sum / count of each window rounded half away from zero; int8 or int16, same scale."""
    return _pool2d(x, _window(kernel, stride, padding, dilation), True, count_include_pad,
                   "avg_pool2d")


def global_avg_pool2d(x: np.ndarray) -> np.ndarray:
    """The rounded average of each (n, c) plane, shape (N, C, 1, 1), same scale and type."""
    _tensor(x, "input")
    return avg_pool2d(x, (x.shape[2], x.shape[3]))


def resize_nearest(x: np.ndarray, factor: IntPair = 2) -> np.ndarray:
    """Nearest-neighbour upsampling by an integer factor: out[y, x] = in[y // f, x // f]."""
    _tensor(x, "input")
    fy, fx = _positive_pair(factor, "factor")
    return np.repeat(np.repeat(x, fy, axis=2), fx, axis=3)
