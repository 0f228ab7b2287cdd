"""Slow, literal references of `emu.dv.compute`: one output element at a time, scalars only,
except the convolution, which goes one kernel tap at a time over all outputs (still each
element's own sum in the specification's order) so that DMP's test_conv configurations (up
to 65 x 65 channels of 7 x 7 taps) can be checked with it (`tests/runtime/test_port_dv_conv.py`).

They follow the rules in the docstring of `emu.dv.compute` word for word and share no code
with it (only the `ConvRun` record, which is plain data).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from emu.dv.compute import ConvRun

F16 = np.float16
F32 = np.float32


def f16(v: float | np.floating) -> np.float16:
    with np.errstate(all="ignore"):
        return F16(v)


def add32(a: np.float32, b: np.float32) -> np.float32:
    with np.errstate(all="ignore"):
        return F32(a + b)


def mul32(a: float, b: float) -> np.float32:
    with np.errstate(all="ignore"):
        return F32(F32(a) * F32(b))


def ref_conv(x: np.ndarray, run: ConvRun) -> np.ndarray:
    """Stage 1, one kernel tap at a time for all outputs at once: every output element's sum
    is still formed term by term in the specification's order (c, then ty, then tx), each
    term read from X by the index arithmetic of the definition (a deconvolution's U position
    u holds X[u / s] when s divides u, else +0.0)."""
    c, h, w = x.shape
    if run.conv_enable == 0:
        return x.copy()
    kx, ky = run.kernel
    sx, sy = run.stride
    dx, dy = max(1, run.dilation[0]), max(1, run.dilation[1])
    left, right, top, bottom = run.pads
    depthwise = run.conv_enable in (3, 7)
    deconv = run.conv_enable in (5, 7)
    # U's size (the input itself unless deconvolving) and the step of the output over U
    uh, uw = ((h - 1) * sy + 1, (w - 1) * sx + 1) if deconv else (h, w)
    step_y, step_x = (1, 1) if deconv else (sy, sx)
    ho = (top + uh + bottom - ((ky - 1) * dy + 1)) // step_y + 1
    wo = (left + uw + right - ((kx - 1) * dx + 1)) // step_x + 1
    assert run.weights is not None
    oy, ox = np.mgrid[0:ho, 0:wo]
    acc = np.zeros((run.m, ho, wo), dtype=F32)
    with np.errstate(all="ignore"):
        for ci in range(1 if depthwise else c):
            for ty in range(ky):
                for tx in range(kx):
                    uy = oy * step_y + ty * dy - top  # position in U (or X)
                    ux = ox * step_x + tx * dx - left
                    inside = (uy >= 0) & (uy < uh) & (ux >= 0) & (ux < uw)
                    if deconv:
                        inside &= (uy % sy == 0) & (ux % sx == 0)
                        iy, ix = uy // sy, ux // sx
                    else:
                        iy, ix = uy, ux
                    iy, ix = np.where(inside, iy, 0), np.where(inside, ix, 0)
                    if depthwise:  # output channel k reads input channel k
                        v = np.where(inside[None], x[:, iy, ix].astype(F32), F32(0.0))
                        wt = run.weights[:, 0, ty, tx].astype(F32)
                    else:
                        v = np.where(inside, x[ci, iy, ix].astype(F32), F32(0.0))[None]
                        wt = run.weights[:, ci, ty, tx].astype(F32)
                    acc = (acc + wt[:, None, None] * v).astype(F32)
        if run.bias is not None:
            acc = (acc + run.bias.astype(F32)[:, None, None]).astype(F32)
        return acc.astype(F16)


def ref_sigmoid(v: float) -> float:
    if v >= 0:
        return 1.0 / (1.0 + math.exp(-v))
    e = math.exp(v)
    return e / (1.0 + e)


def ref_act_scalar(v: Any, actfunc: int, a: float, slope: float) -> np.float16:
    fv = float(v)
    if actfunc == 0:
        return v
    if actfunc == 1:
        return f16(math.tanh(fv))
    if actfunc in (2, 4):
        s = a if actfunc == 2 else slope
        return f16(fv * s) if fv < 0 else v
    if actfunc == 3:
        return f16(ref_sigmoid(fv))
    if actfunc == 5:
        return f16(math.expm1(fv)) if fv < 0 else v  # alpha 1: the parameter is leaky's
    if actfunc == 6:
        if fv < 0:
            return F16(0.0)
        return F16(6.0) if fv > 6 else v
    raise AssertionError(actfunc)


def ref_activate(t: np.ndarray, actfunc: int, param: float, prelu: np.ndarray | None
                 ) -> np.ndarray:
    a = float(F16(param))
    out = t.copy()
    for idx in np.ndindex(*t.shape):
        slope = float(prelu[idx[0]]) if prelu is not None else 0.0
        out[idx] = ref_act_scalar(t[idx], actfunc, a, slope)
    return out


def ref_rectify(t: np.ndarray) -> np.ndarray:
    out = t.copy()
    for idx in np.ndindex(*t.shape):
        if float(t[idx]) < 0:
            out[idx] = F16(0.0)
    return out


def ref_lrn(t: np.ndarray, power: bool, scale: int) -> np.ndarray:
    c = t.shape[0]
    out = t.copy()
    for idx in np.ndindex(*t.shape):
        k = idx[0]
        s = F32(0.0)
        for j in range(max(0, k - 2), min(c - 1, k + 2) + 1):
            v = float(t[(j, *idx[1:])])
            s = add32(s, mul32(v, v))
        with np.errstate(all="ignore"):
            tt = F32(s * F32(2.0 ** -scale))
        b = 1.0 + float(tt)
        d = math.sqrt(b) * math.sqrt(math.sqrt(b)) if power else b
        out[idx] = f16(float(t[idx]) / d)
    return out


def ref_pool(t: np.ndarray, run: ConvRun) -> np.ndarray:
    if run.pool_enable == 0:
        return t.copy()
    c, h, w = t.shape
    pw, ph = run.pool_size
    if run.pool_enable == 4:
        out = np.zeros((c, h * ph, w * pw), dtype=F16)
        for k, y, x in np.ndindex(*out.shape):
            out[k, y, x] = t[k, y // ph, x // pw]
        return out
    sx, sy = run.pool_stride
    left, right, top, bottom = run.pool_pad
    ho = (top + h + bottom - ph) // sy + 1
    wo = (left + w + right - pw) // sx + 1
    out = np.zeros((c, ho, wo), dtype=F16)
    p = float(F16(run.pool_avg_param))
    for k, oy, ox in np.ndindex(c, ho, wo):
        best = F16(-np.inf)
        acc = F32(0.0)
        for ty in range(ph):
            for tx in range(pw):
                iy, ix = oy * sy + ty - top, ox * sx + tx - left
                inside = 0 <= iy < h and 0 <= ix < w
                if run.pool_enable == 1:
                    if inside:
                        v = t[k, iy, ix]
                        if v > best or math.isnan(float(v)):
                            best = v
                else:
                    acc = add32(acc, mul32(float(t[k, iy, ix]) if inside else 0.0, p))
        out[k, oy, ox] = best if run.pool_enable == 1 else f16(acc)
    return out


def canon(t: np.ndarray) -> np.ndarray:
    """Every NaN becomes the quiet NaN 0x7E00."""
    out = t.copy()
    for idx in np.ndindex(*t.shape):
        if math.isnan(float(t[idx])):
            out[idx] = np.array(0x7E00, dtype=np.uint16).view(F16)
    return out


def ref_run(x: np.ndarray, run: ConvRun) -> np.ndarray:
    return canon(ref_stages(x, run))


def ref_stages(x: np.ndarray, run: ConvRun) -> np.ndarray:
    v = ref_conv(x, run)
    v = ref_activate(v, run.actfunc, run.actfunc_param, run.prelu)
    if run.rectify:
        v = ref_rectify(v)
    if run.lrn[0]:
        v = ref_lrn(v, run.lrn[1], run.lrn[2])
    return ref_pool(v, run)


def ref_run_conv(x: np.ndarray, runs: Sequence[ConvRun], output_mode: int,
                 eltwise: np.ndarray | None) -> list[np.ndarray]:
    outs = []
    previous_external = True
    previous = x
    for run in runs:
        y = ref_run(x if previous_external else previous, run)
        if run.to_external:
            outs.append(y)
        previous, previous_external = y, run.to_external
    if output_mode == 1:
        e = x if eltwise is None else eltwise
        added = []
        for y in outs:
            z = np.zeros_like(y)
            for idx in np.ndindex(*y.shape):
                z[idx] = f16(add32(F32(y[idx]), F32(e[idx])))
            added.append(canon(z))
        outs = added
    return outs


def ref_fc(x: np.ndarray, weights: np.ndarray, bias: np.ndarray, actfunc: int, param: float
           ) -> np.ndarray:
    out = np.zeros(bias.shape[0], dtype=F16)
    conv_act = {0: 0, 2: 1, 3: 2, 4: 3, 5: 2}
    a = float(F16(param))
    for o in range(bias.shape[0]):
        acc = F32(0.0)
        for i in range(x.shape[0]):
            acc = add32(acc, mul32(float(weights[o, i]), float(x[i])))
        v = f16(add32(acc, F32(bias[o])))
        if actfunc == 1:
            out[o] = F16(0.0) if float(v) < 0 else v
        else:
            out[o] = ref_act_scalar(v, conv_act[actfunc], a, a)
    return canon(out)


def ref_fc_nchw(x: np.ndarray, weights: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Dense FC on NCHW-flattened vectors (weights (n_out, n_in)), no activation."""
    return ref_fc(x.reshape(-1), weights, bias, 0, 0.0)


def ref_pack_dil(n_channels: int, kx: int, ky: int, n_kernels: int,
                 quant_map: np.ndarray | None, weights: np.ndarray, bias: np.ndarray,
                 prelu: np.ndarray | None) -> bytes:
    """The dilated layout of emu/dv/packing.py, written out with loops: per kernel tap a
    1 x 1 convolution (per 8 output channels: 8 biases, 8 slopes, then per group of 64 input
    channels one 12 x 6 tile per output channel), padded to 16 bytes; biases and slopes only
    in the last tap. `weights` are uint16 FP16 bits or uint8 indices, NCHW."""
    e = 1 if quant_map is not None else 2
    out = bytearray()
    if quant_map is not None:
        out += np.asarray(quant_map, "<u2").tobytes()
    w = np.asarray(weights).reshape(n_kernels, n_channels, ky, kx)
    for y in range(ky):
        for x in range(kx):
            last = (y, x) == (ky - 1, kx - 1)
            for m0 in range(0, n_kernels, 8):
                for values in (bias, prelu):
                    if values is None:
                        continue
                    chunk = [int(values[m]) if last else 0
                             for m in range(m0, min(m0 + 8, n_kernels))]
                    out += np.array(chunk + [0] * (8 - len(chunk)), "<u2").tobytes()
                for c0 in range(0, n_channels, 64):
                    for m in range(m0, min(m0 + 8, n_kernels)):
                        tile = np.zeros((12, 6), np.uint8 if e == 1 else "<u2")
                        for c in range(c0, min(c0 + 64, n_channels)):
                            t, j = c % 8, (c % 64) // 8
                            tile[11 - 3 * (t // 2) - j // 3, 3 * (t % 2) + j % 3] = w[m, c, y, x]
                        out += tile.tobytes()
            out += bytes(-len(out) % 16)
    return bytes(out)
