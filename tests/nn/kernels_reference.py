"""Slow, plain definitions of the quantised BPU ops that `emu/nn/kernels.py` and
`emu/nn/kernels_tensor.py` must match.

Everything is written out with Python integers, Fractions and loops over output elements
and kernel taps: no matmul, no vectorised rounding or sorting, nothing shared with the
kernels. Values go in and out as NumPy arrays; inside, arrays are turned into Python ints
first. The one float computation is a LUT's function f: its float64 values are the input of
the table's rounding rule, so the reference evaluates f (the same NumPy formula) and checks
the rule from there.

The rules (the module docstrings of the two kernel modules are the spec):
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


def broadcast_pairs(a, b):
    """(output index, a's code, b's code) for every element of a broadcast, Python ints."""
    shape, a_full, b_full = broadcast_shape(a.shape, b.shape)
    av, bv = a.reshape(a_full), b.reshape(b_full)
    for index in itertools.product(*(range(d) for d in shape)):
        ia = tuple(0 if d == 1 else i for i, d in zip(index, a_full, strict=True))
        ib = tuple(0 if d == 1 else i for i, d in zip(index, b_full, strict=True))
        yield index, int(av[ia]), int(bv[ib])


def add(a, b, a_scale, b_scale, out_scale, activation="none", out_dtype=np.int8,
        subtract=False):
    """a + b, or a - b with `subtract`: b' is computed from -b."""
    a_scale, b_scale, out_scale = scale_ok(a_scale), scale_ok(b_scale), scale_ok(out_scale)
    left = 20 if a.dtype == np.int8 else 15
    twice = 2.0 * max(a_scale, b_scale)
    ma, na = fixed_point(a_scale / twice)
    mb, nb = fixed_point(b_scale / twice)
    mo, no = fixed_point(twice / (out_scale * 2.0**left))
    out = np.zeros(broadcast_shape(a.shape, b.shape)[0], dtype=out_dtype)
    for index, va, vb in broadcast_pairs(a, b):
        fa = shift_round(va * 2**left * ma, 31 + na)
        fb = shift_round((-vb if subtract else vb) * 2**left * mb, 31 + nb)
        out[index] = finish(shift_round((fa + fb) * mo, 31 + no), out_dtype, activation,
                            out_scale)
    return out


def mul(a, b, a_scale, b_scale, out_scale, out_dtype=np.int8):
    m0, n = fixed_point(scale_ok(a_scale) * scale_ok(b_scale) / scale_ok(out_scale))
    out = np.zeros(broadcast_shape(a.shape, b.shape)[0], dtype=out_dtype)
    for index, va, vb in broadcast_pairs(a, b):
        out[index] = finish(shift_round(va * vb * m0, 31 + n), out_dtype, "none", out_scale)
    return out


def div(a, b, a_scale, b_scale, out_scale, out_dtype=np.int8):
    """round(a M0 / (b 2**(31 + n))) saturated; b = 0 gives the code of +inf, -inf or 0."""
    m0, n = fixed_point(scale_ok(a_scale) / (scale_ok(b_scale) * scale_ok(out_scale)))
    lo, hi = type_range(out_dtype)
    out = np.zeros(broadcast_shape(a.shape, b.shape)[0], dtype=out_dtype)
    for index, va, vb in broadcast_pairs(a, b):
        if vb == 0:
            out[index] = hi if va > 0 else lo if va < 0 else 0
        else:
            out[index] = min(max(nearest(Fraction(va * m0, vb * 2 ** (31 + n))), lo), hi)
    return out


def extremum(a, b, kind, a_scale, b_scale, out_scale, out_dtype=np.int8):
    """Max or min of the two inputs, each rescaled to the output first."""
    ra = rescale(a, a_scale, out_scale, out_dtype)
    rb = rescale(b, b_scale, out_scale, out_dtype)
    pick = max if kind == "max" else min
    out = np.zeros(broadcast_shape(a.shape, b.shape)[0], dtype=out_dtype)
    for index, va, vb in broadcast_pairs(ra, rb):
        out[index] = pick(va, vb)
    return out


def concat(inputs, scales, out_scale, axis=1, out_dtype=np.int8):
    return np.concatenate([rescale(x, s, out_scale, out_dtype)
                           for x, s in zip(inputs, scales, strict=True)], axis=axis)


def _sigmoid(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def hard_sigmoid(x, alpha=0.2, beta=0.5):
    """ONNX HardSigmoid: max(0, min(1, alpha x + beta))."""
    return np.maximum(0.0, np.minimum(1.0, alpha * x + beta))


def _erf(x):
    return np.array([math.erf(v) for v in x.tolist()], dtype=np.float64)


FUNCTIONS = {
    "sigmoid": _sigmoid,
    "silu": lambda x: x * _sigmoid(x),
    "tanh": np.tanh,
    "hardsigmoid": hard_sigmoid,
    "hardswish": lambda x: x * np.maximum(0.0, np.minimum(1.0, x / 6.0 + 0.5)),
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
}


def lut_table(function, in_scale, out_scale, in_dtype=np.int8, out_dtype=np.int8):
    """The output codes of every input code, the lowest first, as a list. f is called once,
    on the float64 inputs q x in_scale of every code q."""
    in_scale, out_scale = scale_ok(in_scale), scale_ok(out_scale)
    first, last = type_range(in_dtype)
    lo, hi = type_range(out_dtype)
    inputs = np.array([q * in_scale for q in range(first, last + 1)], dtype=np.float64)
    with np.errstate(all="ignore"):
        values = np.asarray(function(inputs), dtype=np.float64).tolist()
    table = []
    for value in values:
        quotient = value / out_scale               # Python floats are float64
        if math.isnan(quotient):
            table.append(0)
        elif math.isinf(quotient):
            table.append(hi if quotient > 0 else lo)
        else:
            table.append(min(max(nearest(Fraction(quotient)), lo), hi))
    return table


def lut(x, table, out_dtype=np.int8):
    """table[q - lowest code] for every code q; 256 entries for int8 inputs, 65536 for int16."""
    lowest = -(len(table) // 2)
    flat = [table[v - lowest] for v in x.reshape(-1).tolist()]
    return np.array(flat, dtype=out_dtype).reshape(x.shape)


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


# ---- tensor ops (emu/nn/kernels_tensor.py) ----------------------------------------------------

def matmul_acc(a, b, bias=None):
    """bias[j] + sum over k of a[..., i, k] b[..., k, j], as an int64 array of matmul's shape
    (a 1-D a is one row, a 1-D b one column, their axes dropped from the result)."""
    a_mat = a.reshape(1, a.shape[0]) if a.ndim == 1 else a
    b_mat = b.reshape(b.shape[0], 1) if b.ndim == 1 else b
    (m, depth), (depth_b, n) = a_mat.shape[-2:], b_mat.shape[-2:]
    if depth != depth_b:
        raise Refused(f"cannot multiply {a.shape} by {b.shape}")
    batch, a_full, b_full = broadcast_shape(a_mat.shape[:-2], b_mat.shape[:-2])
    av = a_mat.reshape(*a_full, m, depth)
    bv = b_mat.reshape(*b_full, depth, n)
    biases = [0] * n if bias is None else [int(v) for v in np.broadcast_to(bias, (n,))]
    out = np.zeros((*batch, m, n), dtype=np.int64)
    for index in itertools.product(*(range(d) for d in batch)):
        ia = tuple(0 if d == 1 else i for i, d in zip(index, a_full, strict=True))
        ib = tuple(0 if d == 1 else i for i, d in zip(index, b_full, strict=True))
        rows, cols = av[ia].tolist(), bv[ib].tolist()
        for i in range(m):
            for j in range(n):
                out[(*index, i, j)] = biases[j] + sum(rows[i][t] * cols[t][j]
                                                      for t in range(depth))
    if a.ndim == 1:
        out = out[..., 0, :]
    if b.ndim == 1:
        out = out[..., 0]
    return out


def matmul(a, b, a_scale, b_scales, out_scale, bias=None, activation="none",
           out_dtype=np.int8):
    """MatMul requantised per column of b (b_scales one value or one per column)."""
    depth = a.shape[-1]
    if a.dtype == b.dtype == np.int8:
        largest_bias = 0 if bias is None else max(abs(int(v)) for v in np.ravel(bias))
        if 2**14 * depth + largest_bias > 2**31 - 1:
            raise Refused("int8 accumulator bound")
    accs = matmul_acc(a, b, bias)
    n = 1 if b.ndim == 1 else b.shape[-1]
    scales = [scale_ok(s) for s in np.broadcast_to(np.asarray(b_scales, float), (n,))]
    a_scale, out_scale = scale_ok(a_scale), scale_ok(out_scale)
    out = np.zeros(accs.shape, dtype=out_dtype)
    for index in itertools.product(*(range(d) for d in accs.shape)):
        column = index[-1] if b.ndim > 1 else 0
        out[index] = requantize_one(int(accs[index]), a_scale * scales[column] / out_scale,
                                    out_dtype, activation, out_scale)
    return out


def _reduced_axes(axes, ndim):
    if axes is None:
        return set(range(ndim))
    return {a % ndim for a in ([axes] if isinstance(axes, int) else axes)}


def reduction_groups(x, axes):
    """(output index, the codes it reduces) of a keepdims reduction over axes."""
    reduced = _reduced_axes(axes, x.ndim)
    out_shape = tuple(1 if i in reduced else d for i, d in enumerate(x.shape))
    for index in itertools.product(*(range(d) for d in out_shape)):
        ranges = [range(x.shape[i]) if i in reduced else [index[i]] for i in range(x.ndim)]
        yield index, [int(x[full]) for full in itertools.product(*ranges)]


def reduce(x, axes, kind):
    """Keepdims reduction of codes: "max", "min", "mean" (rounded) or "sum" (exact int)."""
    reduced = _reduced_axes(axes, x.ndim)
    out_shape = tuple(1 if i in reduced else d for i, d in enumerate(x.shape))
    out = np.zeros(out_shape, dtype=np.int64 if kind == "sum" else x.dtype)
    for index, codes in reduction_groups(x, axes):
        if kind == "max":
            out[index] = max(codes)
        elif kind == "min":
            out[index] = min(codes)
        elif kind == "mean":
            out[index] = nearest(Fraction(sum(codes), len(codes)))
        else:
            out[index] = sum(codes)
    return out


def reduce_sum(x, axes, in_scale, out_scale, out_dtype=np.int8):
    m0, n = fixed_point(scale_ok(in_scale) / scale_ok(out_scale))
    totals = reduce(x, axes, "sum")
    out = np.zeros(totals.shape, dtype=out_dtype)
    for index in itertools.product(*(range(d) for d in totals.shape)):
        total = int(totals[index])
        if not -(2**31) <= total <= 2**31 - 1:
            raise Refused("sum outside int32")
        out[index] = finish(shift_round(total * m0, 31 + n), out_dtype, "none", out_scale)
    return out


def _lines(x, axis):
    """(index with None at axis, the codes along axis) for every line of x along axis."""
    others = [range(d) if i != axis else [None] for i, d in enumerate(x.shape)]
    for index in itertools.product(*others):
        line = [int(x[(*index[:axis], t, *index[axis + 1:])]) for t in range(x.shape[axis])]
        yield index, line


def arg_extreme(x, axis, kind, keepdims=True, select_last_index=False):
    axis %= x.ndim
    shape = [1 if i == axis else d for i, d in enumerate(x.shape)]
    out = np.zeros(shape, dtype=np.int64)
    for index, line in _lines(x, axis):
        best = 0
        for t, v in enumerate(line):
            better = v > line[best] if kind == "max" else v < line[best]
            if better or (select_last_index and v == line[best]):
                best = t
        out[(*index[:axis], 0, *index[axis + 1:])] = best
    return out if keepdims else out.squeeze(axis)


def topk(x, k, axis, largest=True):
    axis %= x.ndim
    shape = [k if i == axis else d for i, d in enumerate(x.shape)]
    values = np.zeros(shape, dtype=x.dtype)
    indices = np.zeros(shape, dtype=np.int64)
    for index, line in _lines(x, axis):
        # by value (largest or smallest first), then by increasing index
        ranked = sorted(range(len(line)), key=lambda t: (-line[t] if largest else line[t], t))
        for rank, t in enumerate(ranked[:k]):
            at = (*index[:axis], rank, *index[axis + 1:])
            values[at], indices[at] = line[t], t
    return values, indices


def pad(x, pads, mode="constant", code=0):
    """Every output element from its coordinate u = p - begin in the input: inside the kept
    range [first, last] it is x[u]; outside, the code, the clamped u (edge) or u mirrored at
    the range's end (reflect)."""
    rank = x.ndim
    begins, ends = list(pads[:rank]), list(pads[rank:])
    kept = [(max(-b, 0), d - 1 - max(-e, 0)) for b, e, d in zip(begins, ends, x.shape,
                                                                strict=True)]
    if any(first > last for first, last in kept):
        raise Refused("an axis is cropped away")
    shape = [d + b + e for d, b, e in zip(x.shape, begins, ends, strict=True)]
    out = np.zeros(shape, dtype=x.dtype)
    for index in itertools.product(*(range(d) for d in shape)):
        source = []
        for p, b, (first, last) in zip(index, begins, kept, strict=True):
            u = p - b
            if u < first:
                u = first if mode == "edge" else 2 * first - u if mode == "reflect" else None
            elif u > last:
                u = last if mode == "edge" else 2 * last - u if mode == "reflect" else None
            if u is not None and not first <= u <= last:
                raise Refused("reflect past the other end")
            source.append(u)
        out[index] = code if None in source else x[tuple(source)]
    return out


def depth_to_space(x, b, mode="DCR"):
    n_, c_, height, width = x.shape
    c_out = c_ // (b * b)
    out = np.zeros((n_, c_out, height * b, width * b), dtype=x.dtype)
    for n, c, y, z in itertools.product(range(n_), range(c_out), range(height * b),
                                        range(width * b)):
        offset = (y % b) * b + z % b
        channel = offset * c_out + c if mode == "DCR" else c * b * b + offset
        out[n, c, y, z] = x[n, channel, y // b, z // b]
    return out


def space_to_depth(x, b):
    n_, c_, height, width = x.shape
    out = np.zeros((n_, c_ * b * b, height // b, width // b), dtype=x.dtype)
    for n, c, y, z, by, bz in itertools.product(range(n_), range(c_), range(height // b),
                                                range(width // b), range(b), range(b)):
        out[n, (by * b + bz) * c_ + c, y, z] = x[n, c, y * b + by, z * b + bz]
    return out


def source_coordinate(o, length_in, length_out, scale, mode):
    """ONNX Resize's x_original of x_resized = o, as a Fraction (scale a Fraction)."""
    half = Fraction(1, 2)
    if mode == "half_pixel":
        return (o + half) / scale - half
    if mode == "pytorch_half_pixel":
        return (o + half) / scale - half if length_out > 1 else Fraction(0)
    if mode == "align_corners":
        resized = length_in * scale  # ONNX's resized length: fractional for some scales
        return o * (length_in - 1) / (resized - 1) if resized != 1 else Fraction(0)
    if mode == "asymmetric":
        return o / scale
    if mode == "tf_half_pixel_for_nn":
        return (o + half) / scale
    raise Refused(f"mode {mode}")


def linear_taps(o, length_in, length_out, scale, mode):
    """((index, Q15 weight), (index, Q15 weight)) of output index o along one axis."""
    scale = Fraction(length_out, length_in) if scale is None else Fraction(scale)
    c = source_coordinate(o, length_in, length_out, scale, mode)
    c = max(Fraction(0), min(c, Fraction(length_in - 1)))
    i0 = math.floor(c)
    w1 = nearest((c - i0) * 2**15)
    return (i0, 2**15 - w1), (min(i0 + 1, length_in - 1), w1)


def resize_linear(x, sizes, mode="half_pixel", scales=(None, None)):
    n_, c_, height, width = x.shape
    oh, ow = sizes
    rows = [linear_taps(y, height, oh, scales[0], mode) for y in range(oh)]
    cols = [linear_taps(z, width, ow, scales[1], mode) for z in range(ow)]
    xs = x.tolist()
    out = np.zeros((n_, c_, oh, ow), dtype=x.dtype)
    for n, c, y, z in itertools.product(range(n_), range(c_), range(oh), range(ow)):
        total = sum(xs[n][c][iy][iz] * wy * wz for iy, wy in rows[y] for iz, wz in cols[z])
        out[n, c, y, z] = shift_round(total, 30)
    return out


def grid_source(code, length, grid_scale, align_corners):
    """The Q15 source coordinate of grid code `code` along an axis of `length`."""
    span = length - 1 if align_corners else length
    offset = (length - 1) * 2**14
    if span == 0:
        return offset
    m0, n = fixed_point(grid_scale * span * 2.0**14)
    return shift_round(code * m0, 31 + n) + offset


def grid_sample(x, grid, grid_scale, mode="bilinear", padding_mode="zeros",
                align_corners=False):
    """ONNX GridSample on codes, output element by output element (Q15 coordinates)."""
    scale_ok(grid_scale)
    n_, c_, height, width = x.shape
    _, oh, ow, _ = grid.shape
    xs, gs = x.tolist(), grid.tolist()
    one = 2**15

    def code(n, c, iy, ix):
        if 0 <= iy < height and 0 <= ix < width:
            return xs[n][c][iy][ix]
        if padding_mode == "zeros":
            return 0
        return xs[n][c][min(max(iy, 0), height - 1)][min(max(ix, 0), width - 1)]

    out = np.zeros((n_, c_, oh, ow), dtype=x.dtype)
    for n, y, z in itertools.product(range(n_), range(oh), range(ow)):
        sx = grid_source(gs[n][y][z][0], width, grid_scale, align_corners)
        sy = grid_source(gs[n][y][z][1], height, grid_scale, align_corners)
        if mode == "nearest":
            iy, ix = round(Fraction(sy, one)), round(Fraction(sx, one))   # ties to even
            for c in range(c_):
                out[n, c, y, z] = code(n, c, iy, ix)
            continue
        if padding_mode == "border":
            sy = min(max(sy, 0), (height - 1) * one)
            sx = min(max(sx, 0), (width - 1) * one)
        y0, x0 = sy // one, sx // one
        ty, tx = sy - y0 * one, sx - x0 * one
        taps = [(y0, x0, (one - ty) * (one - tx)), (y0, x0 + 1, (one - ty) * tx),
                (y0 + 1, x0, ty * (one - tx)), (y0 + 1, x0 + 1, ty * tx)]
        for c in range(c_):
            total = sum(code(n, c, iy, ix) * w for iy, ix, w in taps)
            out[n, c, y, z] = shift_round(total, 30)
    return out


def lstm(x, h0, c0, weight, bias, w_scales, scales):
    """One LSTM direction on int8 codes, step by step: (h, c) codes of every step. `scales`
    is a dict: "pre" and "gate" (i, o, f, g), "forget", "update", "c", "tanh_c", "h"."""
    hidden = weight.shape[0] // 4
    rows = [slice(k * hidden, (k + 1) * hidden) for k in range(4)]
    w_scales = np.broadcast_to(np.asarray(w_scales, float), (4 * hidden,))
    bias = np.zeros(4 * hidden, np.int64) if bias is None else np.asarray(bias)
    tables = [lut_table(FUNCTIONS[f], scales["pre"][k], scales["gate"][k])
              for k, f in enumerate(("sigmoid", "sigmoid", "sigmoid", "tanh"))]
    tanh_table = lut_table(FUNCTIONS["tanh"], scales["c"], scales["tanh_c"])
    gate_i, gate_o, gate_f, gate_g = scales["gate"]
    h, c = h0, c0
    hs, cs = [], []
    for t in range(x.shape[0]):
        u = np.concatenate([x[t], h], axis=1)
        i, o, f, g = (lut(fully_connected(u, weight[r], bias[r], 1.0, w_scales[r],
                                          scales["pre"][k]), tables[k])
                      for k, r in enumerate(rows))
        c = add(mul(f, c, gate_f, scales["c"], scales["forget"]),
                mul(i, g, gate_i, gate_g, scales["update"]),
                scales["forget"], scales["update"], scales["c"])
        h = mul(o, lut(c, tanh_table), gate_o, scales["tanh_c"], scales["h"])
        hs.append(h)
        cs.append(c)
    return np.stack(hs), np.stack(cs)
