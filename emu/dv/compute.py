"""Exact execution of DV700 convolution and fully-connected commands (the specification).

Everything here is bit-exact by definition: `tests/dv/reference.py` implements the same rules
with scalar loops and the two must agree bit for bit. FP16 is IEEE binary16, float32 and
float64 are IEEE binary32/64 with round-to-nearest-even, and "fp16(v)" means v rounded once,
correctly, to binary16 (overflow gives +-inf, NaN stays NaN).

Convolution command
-------------------
A command is a sequence of runs (at most 32) applied to one input tensor X (C, H, W).
Run order and data flow follow the public kernel driver's reading of `topo`: a run reads X when
it is the first run or when the run before it wrote to external memory (topo bit 1); otherwise
it reads the previous run's output, which stayed in the unified buffer (topo bit 0). So the
runs form chains, each ending in one external output; e.g. a fused SqueezeNet fire module is
squeeze (UB) -> expand1x1 (ext) -> squeeze (UB) -> expand3x3 (ext), while two expands reading a
squeezed tensor given as X are simply expand1x1 (ext) -> expand3x3 (ext). The last run must
write to external memory. `run_conv` returns the external outputs in run order; with
output_mode 0 (concat) the device stores their WHC8 images back to back in the output buffer
(the channel concatenation when the channel counts before the last are multiples of 8); with
output_mode 1 (element-wise add) every external output Y becomes fp16(float32(Y) + float32(E))
element by element, where E is the `eltwise` tensor (or X itself when no eltwise buffer is
given: the header's "0 = UBUF input buffer"), of the same shape as Y.

Within a run the stages are, in order (the SDK's: convolution, then activation, then pooling):

1. Convolution (conv_enable 1): X is padded with +0.0 by (left, right, top, bottom); the output
   is (m, Ho, Wo), Ho = (top + H + bottom - ((ky - 1) * dy + 1)) // sy + 1 (likewise Wo), and
   out[k, oy, ox] = fp16(S + float32(bias[k])) with
   S = sum over c = 0..C-1 (outer), ty = 0..ky-1, tx = 0..kx-1 (inner) of the float32
   products float32(w[k, c, ty, tx]) * float32(Xpad[c, oy*sy + ty*dy, ox*sx + tx*dx]),
   accumulated in float32 strictly in that order, starting from +0.0, each addition rounded to
   float32. Every product is exact (FP16 x FP16 fits a float32); padded positions take part as
   products with +0.0 (so an inf or NaN weight on a padded tap gives NaN, as in IEEE). The
   bias is added last, in float32; without a bias the fp16 rounding is of S. Depthwise
   (conv_enable 3): m must equal C, weights are (C, 1, ky, kx) and channel k sums only its own
   input channel, over (ty, tx) in the same order. conv_enable 0: no convolution, pads, stride
   and bias are ignored, m must equal C and the stage passes X through. Dilation 0 means 1.
   Deconvolution (conv_enable 5; 7 depthwise): the stride is an upsampling factor. X becomes
   U, (C, (H - 1) * sy + 1, (W - 1) * sx + 1), with U[c, y * sy, x * sx] = X[c, y, x] and +0.0
   between; then U is convolved as above with stride 1 (pads, dilation and the order of the
   sum unchanged), so Ho = (top + (H - 1) * sy + 1 + bottom - ((ky - 1) * dy + 1)) + 1, the
   kernel driver's size. The inserted zeros take part as products with +0.0, as padding does.
   The weights are used as given: a transposed convolution's kernel must be rotated by 180
   degrees by the caller (DMP's packer says so), and its pads are the kernel driver's, i.e.
   (ky - 1) * dy - pad for a framework padding `pad` (DMP's test_conv: k_full - pad - 1).
   Why not float64: a float64 sum of FP16 products is exact only when all partial sums fit
   53 bits, but the products span 2^-48..2^32 (80 bits); so a fixed float32 order is the rule.
2. Activation, from the FP16 value v (per channel k for PReLU), each result rounded once to
   FP16: 0 none; 1 tanh: fp16(tanh(v)); 2 leaky ReLU: v * a if v < 0 else v; 3 sigmoid:
   fp16(1 / (1 + exp(-v))) for v >= 0 and fp16(e / (1 + e)), e = exp(v), otherwise; 4 PReLU:
   v * slope[k] if v < 0 else v; 5 ELU: fp16(expm1(v)) if v < 0 else v (alpha 1: the
   header calls actfunc_param the leaky ReLU's parameter, and DMP's test and converter leave
   it 0 for ELU); 6 ReLU6: 0 if v < 0, 6 if v > 6, else v. `a` is actfunc_param taken as
   FP16; a product of two FP16 is exact before its rounding. tanh, exp and expm1 are
   evaluated in float64 by the host C library through Python's `math` module, once per
   FP16 input (tables), then rounded directly to FP16. NaN stays NaN everywhere ("v < 0"
   is false for NaN).
3. Rectification: +0.0 if v < 0 else v (applies after any activation).
4. LRN (bit 0 of the lrn field): the public headers give only the bits, so the emulator fixes
   Caffe's across-channel form with local size 5, k = 1: s[c] = sum over j = max(0, c - 2) ..
   min(C - 1, c + 2), ascending, of float32(v_j)^2 in float32 from +0.0; t = s * 2^-scale in
   float32 (scale = bits 8..11, standing for alpha / n); b = 1 + t in float64; d = b^0.75
   computed as sqrt(b) * sqrt(sqrt(b)) in float64 when the power bit (bit 1) is set, else b;
   out = fp16(float64(v) / d).
5. Pooling. Max (1): window pool_size (w, h), pool stride, pool pads; positions outside the
   tensor do not take part (they count as -inf); the result is the first largest value in
   raster order (ty outer, tx inner), NaN if any value is NaN; a window wholly in padding
   gives -inf. Output size (pt + H + pb - h) // sy + 1. Average (2): the
   device runs it as a depthwise convolution whose weights all equal pool_avg_param p (FP16):
   fp16 of the float32 sum, raster order from +0.0, of the exact products float32(v) *
   float32(p), padded positions being +0.0. Upsample (4): nearest neighbour, every value
   repeated pool_size w times across and h times down (the hardware supports 2 x 2 only; the
   API should pass (2, 2)).

NaN: IEEE leaves the sign and payload of a NaN result open and hosts differ (SIMD and scalar
paths pick different operands), so every NaN the device writes - each run's output, each
element-wise sum, each FC output - is the canonical quiet NaN 0x7E00.

Fully connected command
-----------------------
`run_fc` takes the input vector and the (output_size, input_size) matrix in device order
(see `emu.dv.packing`): out[o] = fp16(S + float32(bias[o])), S the float32 sum over i = 0 ..
input_size - 1, ascending, from +0.0, of the exact products float32(w[o, i]) *
float32(x[i]); then the activation in FC numbering: 0 none, 1 ReLU (+0.0 if v < 0), 2 tanh,
3 leaky ReLU (param), 4 sigmoid, 5 PReLU (one slope for all outputs: the FC command has a
single parameter, so PReLU here equals leaky ReLU with it), each as defined above.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
from numpy.typing import NDArray

from emu.errors import InputError

F16 = np.float16
F32 = np.float32
MAX_RUNS = 32

Tensor = NDArray[np.float16]


@dataclass(frozen=True, eq=False)
class ConvRun:
    """One decoded run of a convolution command. Pairs are (x, y) / (width, height); pads are
    (left, right, top, bottom)."""

    m: int
    conv_enable: int = 1
    kernel: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    stride: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    weights: Tensor | None = None
    bias: Tensor | None = None
    prelu: Tensor | None = None
    pool_enable: int = 0
    pool_pad: tuple[int, int, int, int] = (0, 0, 0, 0)
    pool_size: tuple[int, int] = (1, 1)
    pool_stride: tuple[int, int] = (1, 1)
    pool_avg_param: float = 1.0
    actfunc: int = 0
    actfunc_param: float = 0.0
    rectify: bool = False
    lrn: tuple[bool, bool, int] = (False, False, 0)
    to_external: bool = True


# ---------------------------------------------------------------- scalar definitions (tables)

def sigmoid64(v: float) -> float:
    """The float64 sigmoid of the specification (no overflow for any input)."""
    if v >= 0:
        return 1.0 / (1.0 + math.exp(-v))
    e = math.exp(v)
    return e / (1.0 + e)


def _all_fp16() -> list[float]:
    return [float(v) for v in np.arange(65536, dtype=np.uint32).astype(np.uint16).view(F16)]


@cache
def _table64(name: str) -> NDArray[np.float64]:
    """float64 value of tanh / sigmoid / expm1 for every FP16 bit pattern."""
    fn: Callable[[float], float] = {"tanh": math.tanh, "sigmoid": sigmoid64,
                                    "expm1": math.expm1}[name]
    out = []
    for v in _all_fp16():
        if name == "expm1" and v > 0:
            out.append(0.0)  # ELU uses expm1 only for v < 0; avoid overflow of large inputs
        else:
            out.append(fn(v))
    return np.array(out, dtype=np.float64)


def _quiet() -> np.errstate:
    return np.errstate(all="ignore")


def _bits(v: Tensor) -> NDArray[np.uint16]:
    return np.ascontiguousarray(v).view(np.uint16)


def _leaky(v: Tensor, slope: NDArray[np.float32] | np.float32) -> Tensor:
    with _quiet():
        scaled = (v.astype(F32) * slope).astype(F16)
    return np.where(v < 0, scaled, v)


def _table_fp16(v: Tensor, name: str) -> Tensor:
    with _quiet():
        return _table64(name)[_bits(v)].astype(F16)


def activate(v: Tensor, actfunc: int, param: float, prelu: Tensor | None = None) -> Tensor:
    """Convolution-block activation (numbering of the conv command) of an FP16 (C, H, W)
    tensor; `prelu` holds the per-channel slopes for actfunc 4."""
    a = F16(param)
    if actfunc == 0:
        return v
    if actfunc == 1:
        return _table_fp16(v, "tanh")
    if actfunc == 2:
        return _leaky(v, F32(a))
    if actfunc == 3:
        return _table_fp16(v, "sigmoid")
    if actfunc == 4:
        if prelu is None or prelu.shape != (v.shape[0],):
            raise InputError(f"PReLU needs one slope per output channel ({v.shape[0]})")
        return _leaky(v, prelu.astype(F32).reshape((-1,) + (1,) * (v.ndim - 1)))
    if actfunc == 5:  # alpha 1, whatever actfunc_param holds (see the module)
        with _quiet():
            neg = _table64("expm1")[_bits(v)].astype(F16)
        return np.where(v < 0, neg, v)
    if actfunc == 6:
        return np.where(v < 0, F16(0), np.where(v > 6, F16(6), v))
    raise InputError(f"unknown conv activation function {actfunc}")


def rectify(v: Tensor) -> Tensor:
    """max(0, v) with NaN kept: +0.0 where v < 0."""
    return np.where(v < 0, F16(0), v)


def lrn(v: Tensor, power: bool, scale_log2: int) -> Tensor:
    """Across-channel LRN of an FP16 (C, H, W) tensor as the module docstring defines."""
    c = v.shape[0]
    with _quiet():
        sq = v.astype(F32) * v.astype(F32)
        s = np.zeros(v.shape, dtype=F32)
        for d in range(-2, 3):
            lo, hi = max(0, -d), min(c, c - d)  # channels k with 0 <= k + d < c
            if lo < hi:
                s[lo:hi] += sq[lo + d:hi + d]
        t = s * F32(2.0 ** -scale_log2)
        b = 1.0 + t.astype(np.float64)
        den = np.sqrt(b) * np.sqrt(np.sqrt(b)) if power else b
        return (v.astype(np.float64) / den).astype(F16)


# ---------------------------------------------------------------- convolution and pooling

def _out_size(size: int, pad0: int, pad1: int, window: int, stride: int, what: str) -> int:
    n = (pad0 + size + pad1 - window) // stride + 1
    if n < 1 or pad0 + size + pad1 < window:
        raise InputError(f"{what} window {window} does not fit the padded size "
                         f"{pad0 + size + pad1}")
    return n


def _windows(x: NDArray[np.float32] | Tensor, pads: tuple[int, int, int, int],
             window: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int],
             fill: float, what: str
             ) -> tuple[list[tuple[int, int, NDArray[np.float32] | Tensor]], int, int]:
    """Strided views of the padded tensor, one per tap (ty, tx) in raster order."""
    left, right, top, bottom = pads
    (wx, wy), (sx, sy), (dx, dy) = window, stride, dilation
    c, h, w = x.shape
    ho = _out_size(h, top, bottom, (wy - 1) * dy + 1, sy, what)
    wo = _out_size(w, left, right, (wx - 1) * dx + 1, sx, what)
    xp = np.full((c, top + h + bottom, left + w + right), fill, dtype=x.dtype)
    xp[:, top:top + h, left:left + w] = x
    taps = []
    for ty in range(wy):
        for tx in range(wx):
            y0, x0 = ty * dy, tx * dx
            taps.append((ty, tx, xp[:, y0:y0 + (ho - 1) * sy + 1:sy,
                                    x0:x0 + (wo - 1) * sx + 1:sx]))
    return taps, ho, wo


def _dil(d: tuple[int, int]) -> tuple[int, int]:
    return (max(1, d[0]), max(1, d[1]))


DEPTHWISE = 2  # bits of conv_enable (1, 3, 5, 7): the kernel driver tests these two
DECONV = 4


def upsample_zeros(x: Tensor, stride: tuple[int, int]) -> Tensor:
    """U of a deconvolution: X's values `stride` (sx, sy) apart, +0.0 between."""
    c, h, w = x.shape
    sx, sy = stride
    u = np.zeros((c, (h - 1) * sy + 1, (w - 1) * sx + 1), dtype=x.dtype)
    u[:, ::sy, ::sx] = x
    return u


def convolve(x: Tensor, run: ConvRun) -> Tensor:
    """Stage 1 of a run: convolution or deconvolution (+ bias), or the pass-through when
    conv_enable is 0."""
    c = x.shape[0]
    if run.conv_enable == 0:
        if run.m != c:
            raise InputError(f"a run without convolution keeps the channels: m={run.m}, C={c}")
        return x
    if run.conv_enable not in (1, 3, 5, 7):
        raise InputError(f"unsupported conv_enable {run.conv_enable}")
    kx, ky = run.kernel
    depthwise = bool(run.conv_enable & DEPTHWISE)
    want = (run.m, 1 if depthwise else c, ky, kx)
    if depthwise and run.m != c:
        raise InputError(f"a depthwise run keeps the channels: m={run.m}, C={c}")
    if run.weights is None or run.weights.shape != want:
        got = None if run.weights is None else run.weights.shape
        raise InputError(f"conv weights must have shape {want}, got {got}")
    if run.bias is not None and run.bias.shape != (run.m,):
        raise InputError(f"conv bias must have shape ({run.m},), got {run.bias.shape}")
    if min(run.stride) < 1:
        raise InputError(f"conv stride must be positive, got {run.stride}")
    stride = run.stride
    if run.conv_enable & DECONV:
        x, stride = upsample_zeros(x, stride), (1, 1)
    w32 = run.weights.astype(F32)
    taps, ho, wo = _windows(x.astype(F32), run.pads, run.kernel, stride,
                            _dil(run.dilation), 0.0, "conv")
    acc = np.zeros((run.m, ho, wo), dtype=F32)
    with _quiet():
        if depthwise:
            for ty, tx, view in taps:
                acc += w32[:, 0, ty, tx, None, None] * view
        else:
            for ci in range(c):
                for ty, tx, view in taps:
                    acc += w32[:, ci, ty, tx, None, None] * view[ci]
        if run.bias is not None:
            acc += run.bias.astype(F32)[:, None, None]
        return acc.astype(F16)


def pool(v: Tensor, run: ConvRun) -> Tensor:
    """Stage 5 of a run: max / average pooling or upsampling (pool_enable 0 passes)."""
    if run.pool_enable == 0:
        return v
    pw, ph = run.pool_size
    if min(pw, ph) < 1 or min(run.pool_stride) < 1:
        raise InputError(f"pool size and stride must be positive, got {run.pool_size}, "
                         f"{run.pool_stride}")
    if run.pool_enable == 4:
        return np.repeat(np.repeat(v, ph, axis=1), pw, axis=2)
    if run.pool_enable == 1:
        taps, ho, wo = _windows(v, run.pool_pad, run.pool_size, run.pool_stride, (1, 1),
                                -np.inf, "pool")
        best = np.full((v.shape[0], ho, wo), -np.inf, dtype=F16)
        for _, _, view in taps:
            best = np.where((view > best) | np.isnan(view), view, best)
        return best
    if run.pool_enable == 2:
        p = F32(F16(run.pool_avg_param))
        taps, ho, wo = _windows(v.astype(F32), run.pool_pad, run.pool_size, run.pool_stride,
                                (1, 1), 0.0, "pool")
        acc = np.zeros((v.shape[0], ho, wo), dtype=F32)
        with _quiet():
            for _, _, view in taps:
                acc += view * p
            return acc.astype(F16)
    raise InputError(f"unsupported pool_enable {run.pool_enable}")


CANONICAL_NAN = 0x7E00


def canonical_nan(v: Tensor) -> Tensor:
    """`v` with every NaN replaced by the canonical quiet NaN 0x7E00."""
    out = np.ascontiguousarray(v).view(np.uint16).copy()
    out[np.isnan(v)] = CANONICAL_NAN
    return out.view(F16)


def run_one(x: Tensor, run: ConvRun) -> Tensor:
    """All stages of one run on its input tensor."""
    return canonical_nan(_stages(x, run))


def _stages(x: Tensor, run: ConvRun) -> Tensor:
    v = convolve(x, run)
    v = activate(v, run.actfunc, run.actfunc_param, run.prelu)
    if run.rectify:
        v = rectify(v)
    enable, power, scale = run.lrn
    if enable:
        v = lrn(v, power, scale)
    return pool(v, run)


def _check_tensor(x: Tensor, what: str) -> None:
    if not isinstance(x, np.ndarray) or x.dtype != F16 or x.ndim != 3 or min(x.shape) < 1:
        raise InputError(f"{what} must be a non-empty float16 (C, H, W) array")


def run_conv(x: Tensor, runs: Sequence[ConvRun], output_mode: int = 0,
             eltwise: Tensor | None = None) -> list[Tensor]:
    """Execute a convolution command; the external outputs in run order (module docstring)."""
    _check_tensor(x, "conv input")
    if not 1 <= len(runs) <= MAX_RUNS:
        raise InputError(f"a conv command has 1..{MAX_RUNS} runs, got {len(runs)}")
    if not runs[-1].to_external:
        raise InputError("the last run of a conv command must write to external memory")
    if output_mode not in (0, 1):
        raise InputError(f"unsupported output_mode {output_mode}")
    current = x
    outputs: list[Tensor] = []
    for run in runs:
        y = run_one(current, run)
        if run.to_external:
            outputs.append(y)
            current = x
        else:
            current = y
    if output_mode == 1:
        other = x if eltwise is None else eltwise
        _check_tensor(other, "eltwise input")
        for i, y in enumerate(outputs):
            if y.shape != other.shape:
                raise InputError(f"element-wise add needs equal shapes, output {y.shape} vs "
                                 f"{other.shape}")
            with _quiet():
                outputs[i] = canonical_nan((y.astype(F32) + other.astype(F32)).astype(F16))
    return outputs


# ---------------------------------------------------------------- fully connected

def fc_activate(v: Tensor, actfunc: int, param: float) -> Tensor:
    """FC-block activation (FC numbering) of an FP16 vector."""
    conv_numbering = {0: 0, 2: 1, 3: 2, 4: 3, 5: 2}
    if actfunc == 1:
        return rectify(v)
    if actfunc not in conv_numbering:
        raise InputError(f"unknown FC activation function {actfunc}")
    return activate(v, conv_numbering[actfunc], param)


def run_fc(x: Tensor, weights: Tensor, bias: Tensor, actfunc: int = 0, param: float = 0.0
           ) -> Tensor:
    """Execute an FC command on device-order vectors (module docstring)."""
    if x.dtype != F16 or weights.dtype != F16 or bias.dtype != F16:
        raise InputError("FC input, weights and bias must be float16")
    if x.ndim != 1 or weights.shape != (bias.shape[0], x.shape[0]) or bias.ndim != 1:
        raise InputError(f"FC shapes do not match: input {x.shape}, weights {weights.shape}, "
                         f"bias {bias.shape}")
    w32 = weights.astype(F32)
    x32 = x.astype(F32)
    acc = np.zeros(bias.shape[0], dtype=F32)
    with _quiet():
        for i in range(x.shape[0]):
            acc += w32[:, i] * x32[i]
        acc += bias.astype(F32)
        out = acc.astype(F16)
    return canonical_nan(fc_activate(out, actfunc, param))
