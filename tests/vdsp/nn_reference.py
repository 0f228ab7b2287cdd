"""Plain NumPy definitions of the DSP NN operators, step by step in float32.

These are the specifications the numba kernels must match bit for bit: the same float32
operations in the same order (see `emu/vdsp/ops/nn_kernels.py` for why the order is fixed).
"""

from __future__ import annotations

import functools

import numpy as np

LOG2E = np.float32(1.4426950408889634)
EXP2_POLY = [np.float32(c) for c in (1.0, 0.6931471805599453, 0.2402265069591007,
                                     0.05550410866482158, 0.009618129107628477,
                                     0.0013333558146428443, 0.0001540353039338161)]


def ieee(func):
    """IEEE results (inf, NaN) are the point here, not a numpy warning."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with np.errstate(all="ignore"):
            return func(*args, **kwargs)

    return wrapper


def _split(shape, axis):
    outer = int(np.prod(shape[:axis]))
    inner = int(np.prod(shape[axis + 1:]))
    return outer, shape[axis], inner


def _per_element(params, shape, axis):
    """Broadcast per-tensor (1 value) or per-axis parameters over the tensor."""
    params = np.asarray(params)
    if params.size == 1:
        return np.full(shape, params.reshape(()), dtype=params.dtype)
    view = [1] * len(shape)
    view[axis] = shape[axis]
    return np.broadcast_to(params.reshape(view), shape)


def to_int32_saturating(v):
    """Round-to-integer float32 -> int32: saturate, NaN -> 0."""
    out = np.zeros(v.shape, np.int32)
    finite = ~np.isnan(v)
    clipped = np.clip(v[finite].astype(np.float64), -(2.0**31), 2.0**31 - 1)
    out[finite] = clipped.astype(np.int64).astype(np.int32)
    return out


@ieee
def quantize(x, out_dtype, axis, *, scales=None, zero_points=None, shifts=None):
    x = np.asarray(x, np.float32)
    if shifts is not None:
        mult = _per_element(np.ldexp(np.float32(1), np.asarray(shifts)).astype(np.float32),
                            x.shape, axis)
        v = x * mult + np.float32(0)
    else:
        s = _per_element(np.asarray(scales, np.float32), x.shape, axis)
        z = _per_element(np.asarray(zero_points, np.int32).astype(np.float32), x.shape, axis)
        v = x / s + z
    q = to_int32_saturating(np.rint(v).astype(np.float32))
    info = np.iinfo(out_dtype)
    return np.clip(q, info.min, info.max).astype(out_dtype)


@ieee
def dequantize(q, axis, *, scales=None, zero_points=None, shifts=None):
    qf = np.asarray(q).astype(np.int32).astype(np.float32)
    if shifts is not None:
        mult = np.ldexp(np.float32(1), -np.asarray(shifts)).astype(np.float32)
        s = _per_element(mult, qf.shape, axis)
        z = np.zeros(qf.shape, np.float32)
    else:
        s = _per_element(np.asarray(scales, np.float32), qf.shape, axis)
        z = _per_element(np.asarray(zero_points, np.int32).astype(np.float32), qf.shape, axis)
    return (qf - z) * s


@ieee
def exp(x):
    t = np.maximum(x * LOG2E, np.float32(-127.0))
    n = to_int32_saturating(np.rint(t).astype(np.float32))
    f = t - n.astype(np.float32)
    p = np.full(x.shape, EXP2_POLY[6], np.float32)
    for k in range(5, -1, -1):
        p = p * f + EXP2_POLY[k]
    bits = ((n.astype(np.int64) + 127) << 23).astype(np.uint32).view(np.float32)
    return p * bits


@ieee
def softmax(x, axis, layout):
    """`layout` as `emu.vdsp.ops.nn.softmax_layout` decides; it fixes the order of the sums."""
    x = np.asarray(x, np.float32)
    outer, length, inner = _split(x.shape, axis)
    v = x.reshape(outer, length, inner).transpose(0, 2, 1).reshape(-1, length)  # rows
    m = v[:, 0].copy()
    for j in range(1, length):
        m = np.maximum(m, v[:, j])
    e = exp(v - m[:, None])
    if layout == "long":
        lanes = np.zeros((v.shape[0], 16), np.float32)
        for base in range(0, length, 16):
            chunk = e[:, base: base + 16]
            lanes[:, : chunk.shape[1]] = lanes[:, : chunk.shape[1]] + chunk
            lanes[:, chunk.shape[1]:] = lanes[:, chunk.shape[1]:] + np.float32(0)
        half = 8
        while half:
            lanes = lanes[:, :half] + lanes[:, half: 2 * half]
            half //= 2
        total = lanes[:, 0]
    else:
        total = np.zeros(v.shape[0], np.float32)
        for j in range(length):
            total = total + e[:, j]
    y = e * (np.float32(1) / total)[:, None]
    return y.reshape(outer, inner, length).transpose(0, 2, 1).reshape(x.shape)
