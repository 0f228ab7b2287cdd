"""Slow, plain definitions of the quantised BPU ops that `emu/nn/kernels.py` must match.

Everything is written out with Python integers and loops over output elements and kernel
taps: no matmul, no vectorised rounding, nothing shared with the kernels. Values go in and
out as NumPy arrays; inside, arrays are turned into nested lists of Python ints first.

The rules (the module docstring of `emu/nn/kernels.py` is the spec):
- fixed point: the real multiplier r (a float64) is M0 / 2**s with 2**30 <= M0 < 2**31,
  M0 = r x 2**s rounded half up exactly; n = s - 31; s must lie in [1, 62] and r in
  [2**-32, 2**30).
- every rounding is to nearest with ties away from zero, on exact integers or rationals.
- saturation to the output type, then the fused activation's clamp.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np

TYPE_BITS = {np.dtype(np.int8): 8, np.dtype(np.int16): 16}


class Refused(ValueError):
    """The reference refuses an argument (the kernels must refuse it too)."""


# ---- integers and rationals -----------------------------------------------------------

def nearest(value: Fraction) -> int:
    """Round an exact rational to the nearest integer, ties away from zero."""
    whole, rest = divmod(abs(value.numerator), value.denominator)
    if 2 * rest >= value.denominator:
        whole += 1
    return whole if value >= 0 else -whole


def shift_round(v: int, s: int) -> int:
    """v / 2**s to the nearest integer, ties away from zero."""
    return nearest(Fraction(v, 2**s))


def fixed_point(real: float) -> tuple[int, int]:
    """(M0, n) with real ~ M0 / 2**(31 + n)."""
    if not math.isfinite(real):
        raise Refused(f"multiplier {real} is not finite")
    exact = Fraction(real)
    if not (Fraction(1, 2**32) <= exact < 2**30):
        raise Refused(f"multiplier {real} out of range")
    s = 31
    while exact * 2**s >= 2**31:
        s -= 1
    while exact * 2**s < 2**30:
        s += 1
    m0 = nearest(exact * 2**s)
    if m0 == 2**31:
        m0, s = 2**30, s - 1
    if not 1 <= s <= 62:
        raise Refused(f"multiplier {real} out of range")
    return m0, s - 31


def scale_ok(scale) -> float:
    scale = float(scale)
    if not (math.isfinite(scale) and scale > 0):
        raise Refused(f"bad scale {scale}")
    return scale


def type_range(dtype) -> tuple[int, int]:
    bits = TYPE_BITS[np.dtype(dtype)]
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def finish(v: int, dtype, activation: str, out_scale: float) -> int:
    """Saturate to the output type, then apply the fused activation's clamp."""
    lo, hi = type_range(dtype)
    v = min(max(v, lo), hi)
    if activation in ("relu", "relu6"):
        v = max(v, 0)
    if activation == "relu6":
        num, den = Fraction(out_scale).as_integer_ratio()
        six = nearest(Fraction(6 * den, num))
        v = min(v, six)
    return v


def requantize_one(acc: int, real: float, dtype, activation: str, out_scale: float) -> int:
    if not -(2**31) <= acc <= 2**31 - 1:
        raise Refused(f"accumulator {acc} outside int32")
    m0, n = fixed_point(real)
    return finish(shift_round(acc * m0, 31 + n), dtype, activation, out_scale)


# ---- convolution ------------------------------------------------------------------------

def out_size(size, kernel, stride, before, after, dilation):
    span = dilation * (kernel - 1) + 1
    if size + before + after < span:
        raise Refused("the window does not fit")
    return (size + before + after - span) // stride + 1


def conv2d_acc(x, w, bias, stride=(1, 1), pads=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    """bias + sum of x * w for every output, as nested lists of Python ints."""
    xs, ws = x.tolist(), w.tolist()
    n_, _, height, width = x.shape
    c_out, c_group, kh, kw = w.shape
    top, left, bottom, right = pads
    oh = out_size(height, kh, stride[0], top, bottom, dilation[0])
    ow = out_size(width, kw, stride[1], left, right, dilation[1])
    bias = [0] * c_out if bias is None else [int(b) for b in bias]
    per_group = c_out // groups
    out = []
    for n in range(n_):
        planes = []
        for co in range(c_out):
            group = co // per_group
            rows = []
            for oy in range(oh):
                row = []
                for ox in range(ow):
                    acc = bias[co]
                    for j in range(c_group):
                        ci = group * c_group + j
                        for ky in range(kh):
                            for kx in range(kw):
                                iy = oy * stride[0] - top + ky * dilation[0]
                                ix = ox * stride[1] - left + kx * dilation[1]
                                if 0 <= iy < height and 0 <= ix < width:
                                    acc += xs[n][ci][iy][ix] * ws[co][j][ky][kx]
                    row.append(acc)
                rows.append(row)
            planes.append(rows)
        out.append(planes)
    return out


def conv2d(x, w, bias, in_scale, w_scales, out_scale, stride=(1, 1), pads=(0, 0, 0, 0),
           dilation=(1, 1), groups=1, activation="none", out_dtype=np.int8):
    in_scale, out_scale = scale_ok(in_scale), scale_ok(out_scale)
    c_out = w.shape[0]
    w_scales = [float(s) for s in np.broadcast_to(np.asarray(w_scales, float), (c_out,))]
    for s in w_scales:
        scale_ok(s)
    accs = conv2d_acc(x, w, bias, stride, pads, dilation, groups)
    result = [[[[requantize_one(a, in_scale * w_scales[co] / out_scale, out_dtype, activation,
                                out_scale) for a in row] for row in plane]
               for co, plane in enumerate(sample)] for sample in accs]
    return np.array(result, dtype=out_dtype).reshape(len(accs), c_out, *_plane(accs))


def _plane(accs):
    plane = accs[0][0]
    return len(plane), len(plane[0])


def fully_connected(x, w, bias, in_scale, w_scales, out_scale, activation="none",
                    out_dtype=np.int8):
    xs, ws = x.tolist(), w.tolist()
    m_, k_ = w.shape
    w_scales = [float(s) for s in np.broadcast_to(np.asarray(w_scales, float), (m_,))]
    bias = [0] * m_ if bias is None else [int(b) for b in bias]
    out = []
    for row in xs:
        values = []
        for m in range(m_):
            acc = bias[m] + sum(row[k] * ws[m][k] for k in range(k_))
            values.append(requantize_one(acc, in_scale * w_scales[m] / out_scale, out_dtype,
                                         activation, out_scale))
        out.append(values)
    return np.array(out, dtype=out_dtype).reshape(len(xs), m_)


# ---- elementwise --------------------------------------------------------------------------

def rescale(x, in_scale, out_scale, out_dtype=np.int8):
    m0, n = fixed_point(scale_ok(in_scale) / scale_ok(out_scale))
    flat = [finish(shift_round(v * m0, 31 + n), out_dtype, "none", out_scale)
            for v in x.reshape(-1).tolist()]
    return np.array(flat, dtype=out_dtype).reshape(x.shape)


def broadcast_shape(a_shape, b_shape):
    rank = max(len(a_shape), len(b_shape))
    a_full = (1,) * (rank - len(a_shape)) + tuple(a_shape)
    b_full = (1,) * (rank - len(b_shape)) + tuple(b_shape)
    shape = []
    for p, q in zip(a_full, b_full, strict=True):
        if p != q and 1 not in (p, q):
            raise Refused(f"cannot broadcast {a_shape} and {b_shape}")
        shape.append(max(p, q))
    return tuple(shape), a_full, b_full


def add(a, b, a_scale, b_scale, out_scale, activation="none", out_dtype=np.int8):
    a_scale, b_scale, out_scale = scale_ok(a_scale), scale_ok(b_scale), scale_ok(out_scale)
    left = 20 if a.dtype == np.int8 else 15
    twice = 2.0 * max(a_scale, b_scale)
    ma, na = fixed_point(a_scale / twice)
    mb, nb = fixed_point(b_scale / twice)
    mo, no = fixed_point(twice / (out_scale * 2.0**left))
    shape, a_full, b_full = broadcast_shape(a.shape, b.shape)
    av, bv = a.reshape(a_full), b.reshape(b_full)
    out = np.zeros(shape, dtype=out_dtype)
    for index in itertools.product(*(range(d) for d in shape)):
        ia = tuple(0 if d == 1 else i for i, d in zip(index, a_full, strict=True))
        ib = tuple(0 if d == 1 else i for i, d in zip(index, b_full, strict=True))
        fa = shift_round(int(av[ia]) * 2**left * ma, 31 + na)
        fb = shift_round(int(bv[ib]) * 2**left * mb, 31 + nb)
        out[index] = finish(shift_round((fa + fb) * mo, 31 + no), out_dtype, activation,
                            out_scale)
    return out


def concat(inputs, scales, out_scale, axis=1, out_dtype=np.int8):
    return np.concatenate([rescale(x, s, out_scale, out_dtype)
                           for x, s in zip(inputs, scales, strict=True)], axis=axis)


def _sigmoid(x):
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


FUNCTIONS = {
    "sigmoid": _sigmoid,
    "silu": lambda x: x * _sigmoid(x),
    "tanh": math.tanh,
    "hardsigmoid": lambda x: min(max(x + 3.0, 0.0), 6.0) / 6.0,
    "hardswish": lambda x: x * min(max(x + 3.0, 0.0), 6.0) / 6.0,
    "gelu": lambda x: 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0))),
}


def lut_table(function, in_scale, out_scale):
    """The 256 int8 outputs for codes -128..127, as a list."""
    table = []
    for q in range(-128, 128):
        value = function(q * in_scale) / out_scale
        if not math.isfinite(value):
            raise Refused(f"function not finite at {q}")
        table.append(min(max(nearest(Fraction(value)), -128), 127))
    return table


def lut(x, table):
    flat = [table[v + 128] for v in x.reshape(-1).tolist()]
    return np.array(flat, dtype=np.int8).reshape(x.shape)


# ---- pooling and resize -------------------------------------------------------------------

def pool2d(x, kernel, stride, pads=(0, 0, 0, 0), dilation=(1, 1), mode="max",
           count_include_pad=False):
    xs = x.tolist()
    n_, c_, height, width = x.shape
    top, left, bottom, right = pads
    oh = out_size(height, kernel[0], stride[0], top, bottom, dilation[0])
    ow = out_size(width, kernel[1], stride[1], left, right, dilation[1])
    out = np.zeros((n_, c_, oh, ow), dtype=x.dtype)
    for n, c, oy, ox in itertools.product(range(n_), range(c_), range(oh), range(ow)):
        taps = []
        for ky in range(kernel[0]):
            for kx in range(kernel[1]):
                iy = oy * stride[0] - top + ky * dilation[0]
                ix = ox * stride[1] - left + kx * dilation[1]
                if 0 <= iy < height and 0 <= ix < width:
                    taps.append(xs[n][c][iy][ix])
        if not taps:
            raise Refused("window entirely in the padding")
        if mode == "max":
            out[n, c, oy, ox] = max(taps)
        else:
            count = kernel[0] * kernel[1] if count_include_pad else len(taps)
            out[n, c, oy, ox] = nearest(Fraction(sum(taps), count))
    return out


def global_avg_pool(x):
    xs = x.tolist()
    n_, c_, height, width = x.shape
    out = np.zeros((n_, c_, 1, 1), dtype=x.dtype)
    for n in range(n_):
        for c in range(c_):
            total = sum(sum(row) for row in xs[n][c])
            out[n, c, 0, 0] = nearest(Fraction(total, height * width))
    return out


def resize_nearest(x, fy, fx):
    n_, c_, height, width = x.shape
    out = np.zeros((n_, c_, height * fy, width * fx), dtype=x.dtype)
    for n, c, y, z in itertools.product(range(n_), range(c_), range(height * fy),
                                        range(width * fx)):
        out[n, c, y, z] = x[n, c, y // fy, z // fx]
    return out
