"""`emu.dv.compute` equals the scalar references of `tests/dv/reference.py` bit for bit."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emu.dv.compute import ConvRun, activate, run_conv, run_fc
from emu.errors import InputError
from tests.dv.reference import ref_act_scalar, ref_fc, ref_run_conv

F16 = np.float16


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint16)


def rand16(rng: np.random.Generator, shape: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(F16)


def conv_run(rng: np.random.Generator, c: int, m: int, kx: int, ky: int, **kw: object
             ) -> ConvRun:
    depthwise = kw.get("conv_enable") in (3, 7)
    weights = rand16(rng, (m, 1 if depthwise else c, ky, kx), 0.5)
    return ConvRun(m=m, kernel=(kx, ky), weights=weights, bias=rand16(rng, (m,)),
                   **kw)  # type: ignore[arg-type]


def check(x: np.ndarray, runs: list[ConvRun], output_mode: int = 0,
          eltwise: np.ndarray | None = None) -> list[np.ndarray]:
    got = run_conv(x, runs, output_mode, eltwise)
    want = ref_run_conv(x, runs, output_mode, eltwise)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == F16 and g.shape == w.shape
        np.testing.assert_array_equal(bits(g), bits(w))
    return got


PADS = [(0, 0, 0, 0), (1, 1, 1, 1), (2, 0, 1, 0), (0, 2, 0, 1), (1, 2, 2, 1)]
STRIDES = [(1, 1), (2, 1), (1, 2), (2, 2), (3, 3)]


@pytest.mark.parametrize("pads", PADS)
@pytest.mark.parametrize("stride", STRIDES)
def test_padding_and_stride(pads: tuple[int, int, int, int], stride: tuple[int, int]) -> None:
    rng = np.random.default_rng(1)
    x = rand16(rng, (3, 5, 6))
    check(x, [conv_run(rng, 3, 2, 3, 3, pads=pads, stride=stride)])


@pytest.mark.parametrize("kernel", [(1, 1), (2, 3), (3, 3), (4, 2), (5, 5), (6, 7), (7, 7),
                                    (7, 1)])
def test_kernel_sizes(kernel: tuple[int, int]) -> None:
    rng = np.random.default_rng(2)
    x = rand16(rng, (2, 7, 8))
    kx, ky = kernel
    check(x, [conv_run(rng, 2, 3, kx, ky, pads=(kx // 2, kx // 2, ky // 2, ky // 2))])


@pytest.mark.parametrize("channels", [1, 3, 7, 9, 17])
def test_channel_counts(channels: int) -> None:
    rng = np.random.default_rng(3)
    x = rand16(rng, (channels, 4, 3))
    check(x, [conv_run(rng, channels, 9, 3, 3, pads=(1, 1, 1, 1))])


def test_one_pixel_image_and_largest_kernel() -> None:
    rng = np.random.default_rng(4)
    x = rand16(rng, (5, 1, 1))
    check(x, [conv_run(rng, 5, 4, 1, 1)])
    check(x, [conv_run(rng, 5, 4, 3, 3, pads=(1, 1, 1, 1))])
    check(x, [conv_run(rng, 5, 2, 7, 7, pads=(3, 3, 3, 3))])


@pytest.mark.parametrize("dilation", [(2, 2), (1, 3), (3, 1), (0, 0)])
def test_dilation(dilation: tuple[int, int]) -> None:
    rng = np.random.default_rng(5)
    x = rand16(rng, (3, 8, 7))
    check(x, [conv_run(rng, 3, 2, 3, 3, pads=(2, 2, 2, 2), dilation=dilation)])


@pytest.mark.parametrize("stride", [(1, 1), (2, 2)])
def test_depthwise(stride: tuple[int, int]) -> None:
    rng = np.random.default_rng(6)
    x = rand16(rng, (9, 6, 5))
    check(x, [conv_run(rng, 9, 9, 3, 3, conv_enable=3, pads=(1, 1, 1, 1), stride=stride)])


DECONVS = [((3, 3), (2, 2), (1, 1, 1, 1), (1, 1)), ((2, 2), (2, 2), (1, 1, 1, 1), (1, 1)),
           ((4, 3), (2, 1), (3, 0, 2, 1), (1, 1)), ((1, 1), (3, 2), (0, 0, 0, 0), (1, 1)),
           ((5, 5), (1, 1), (0, 4, 2, 2), (1, 1)), ((3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),
           ((7, 1), (2, 3), (6, 6, 0, 0), (1, 1)), ((3, 5), (1, 1), (4, 4, 8, 8), (2, 3))]


@pytest.mark.parametrize(("kernel", "stride", "pads", "dilation"), DECONVS)
@pytest.mark.parametrize("conv_enable", [5, 7])
def test_deconvolution(kernel: tuple[int, int], stride: tuple[int, int],
                       pads: tuple[int, int, int, int], dilation: tuple[int, int],
                       conv_enable: int) -> None:
    rng = np.random.default_rng(17)
    channels = 9 if conv_enable == 7 else 3
    x = rand16(rng, (channels, 4, 5))
    out = check(x, [conv_run(rng, channels, 9, *kernel, conv_enable=conv_enable, pads=pads,
                             stride=stride, dilation=dilation)])
    kx, ky = kernel
    left, right, top, bottom = pads
    want_h = top + 3 * stride[1] + 1 + bottom - (ky - 1) * dilation[1]
    assert out[0].shape == (9, want_h, left + 4 * stride[0] + 1 + right - (kx - 1) * dilation[0])


def _transposed_conv64(x: np.ndarray, w: np.ndarray, bias: np.ndarray, stride: int, pad: int
                       ) -> np.ndarray:
    """A framework's transposed convolution in float64, by scattering: input (c, iy, ix)
    adds x * w[c, k, ty, tx] to output (k, iy * s + ty - pad, ix * s + tx - pad); w is
    (C, M, ky, kx) as Caffe's Deconvolution keeps it."""
    c, h, wd = x.shape
    _, m, ky, kx = w.shape
    full = np.zeros((m, (h - 1) * stride + ky, (wd - 1) * stride + kx))
    for ci, iy, ix in np.ndindex(c, h, wd):
        full[:, iy * stride:iy * stride + ky, ix * stride:ix * stride + kx] += (
            float(x[ci, iy, ix]) * w[ci].astype(np.float64))
    out = full[:, pad:full.shape[1] - pad, pad:full.shape[2] - pad]
    return out + bias.astype(np.float64)[:, None, None]


@pytest.mark.parametrize(("k", "stride", "pad"), [(3, 2, 1), (4, 2, 1), (2, 2, 0), (5, 1, 2),
                                                  (3, 3, 0), (1, 2, 0)])
def test_deconvolution_is_the_transposed_convolution(k: int, stride: int, pad: int) -> None:
    """With the kernel rotated by 180 degrees and the pads k - 1 - pad, as DMP's test_conv
    gives them, conv_enable 5 is a framework's transposed convolution (integers: exact)."""
    rng = np.random.default_rng(18)
    x = rng.integers(-3, 4, (3, 4, 5)).astype(F16)
    w = rng.integers(-3, 4, (3, 2, k, k)).astype(F16)  # (C, M, ky, kx)
    bias = rng.integers(-3, 4, 2).astype(F16)
    device_w = np.ascontiguousarray(w[:, :, ::-1, ::-1].transpose(1, 0, 2, 3))
    q = k - 1 - pad
    (got,) = check(x, [ConvRun(m=2, conv_enable=5, kernel=(k, k), pads=(q, q, q, q),
                               stride=(stride, stride), weights=device_w, bias=bias)])
    np.testing.assert_array_equal(got.astype(np.float64),
                                  _transposed_conv64(x, w, bias, stride, pad))


def test_deconvolution_special_values() -> None:
    rng = np.random.default_rng(19)
    x = rand16(rng, (2, 3, 3))
    x[0, 1, 1] = np.nan
    x[1, 0, 2] = np.inf
    w = rand16(rng, (2, 2, 3, 3))
    check(x, [ConvRun(m=2, conv_enable=5, kernel=(3, 3), pads=(1, 1, 1, 1), stride=(2, 2),
                      weights=w)])
    # an inf weight meets the inserted zeros, as padding: NaN wherever the tap covers one
    w = np.zeros((1, 1, 2, 2), dtype=F16)
    w[0, 0, 0, 0] = np.inf
    out = check(np.ones((1, 2, 2), F16), [ConvRun(m=1, conv_enable=5, kernel=(2, 2),
                                                  stride=(2, 2), weights=w)])
    assert np.isnan(out[0][0, 1::2, :]).all() and np.isposinf(out[0][0, 0, 0])
    one = rand16(rng, (4, 1, 1))  # a 1 x 1 input: no zeros are inserted
    check(one, [conv_run(rng, 4, 4, 3, 3, conv_enable=7, pads=(2, 2, 2, 2), stride=(2, 2))])


@pytest.mark.parametrize("actfunc", range(7))
@pytest.mark.parametrize("rectify", [False, True])
def test_activations_in_a_run(actfunc: int, rectify: bool) -> None:
    rng = np.random.default_rng(7)
    x = rand16(rng, (3, 4, 4), 4.0)
    run = conv_run(rng, 3, 4, 3, 3, pads=(1, 1, 1, 1), actfunc=actfunc, actfunc_param=0.1,
                   rectify=rectify, prelu=rand16(rng, (4,)))
    check(x, [run])


@pytest.mark.parametrize("actfunc", range(7))
def test_activation_over_every_fp16_value(actfunc: int) -> None:
    every = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(F16).reshape(1, 256, 256)
    slope = np.array([-0.375], dtype=F16)
    got = activate(every, actfunc, 0.1, slope)
    a = float(F16(0.1))
    want = np.array([ref_act_scalar(v, actfunc, a, -0.375) for v in every.reshape(-1)],
                    dtype=F16)
    np.testing.assert_array_equal(bits(got).reshape(-1), bits(want))


@pytest.mark.parametrize("channels", [1, 3, 9])
@pytest.mark.parametrize("power", [False, True])
@pytest.mark.parametrize("scale", [0, 5, 15])
def test_lrn(channels: int, power: bool, scale: int) -> None:
    rng = np.random.default_rng(8)
    x = rand16(rng, (channels, 3, 4), 20.0)
    check(x, [ConvRun(m=channels, conv_enable=0, lrn=(True, power, scale))])


POOLS = [((2, 2), (2, 2), (0, 0, 0, 0)), ((3, 3), (1, 1), (1, 1, 1, 1)),
         ((3, 2), (2, 1), (1, 0, 0, 1)), ((7, 7), (1, 1), (0, 0, 0, 0)),
         ((1, 1), (1, 1), (0, 0, 0, 0)), ((2, 3), (3, 2), (0, 1, 2, 0))]


@pytest.mark.parametrize("kind", [1, 2])
@pytest.mark.parametrize(("size", "stride", "pad"), POOLS)
def test_pooling(kind: int, size: tuple[int, int], stride: tuple[int, int],
                 pad: tuple[int, int, int, int]) -> None:
    rng = np.random.default_rng(9)
    x = rand16(rng, (3, 7, 7))
    pooled = ConvRun(m=3, conv_enable=0, pool_enable=kind, pool_size=size, pool_stride=stride,
                     pool_pad=pad, pool_avg_param=1.0 / (size[0] * size[1]))
    check(x, [pooled])
    check(x, [replace(conv_run(rng, 3, 2, 3, 3, pads=(1, 1, 1, 1), actfunc=2,
                               actfunc_param=0.1),
                      pool_enable=kind, pool_size=size, pool_stride=stride, pool_pad=pad,
                      pool_avg_param=0.25)])


@pytest.mark.parametrize("factor", [(2, 2), (3, 1), (1, 2)])
def test_upsampling(factor: tuple[int, int]) -> None:
    rng = np.random.default_rng(10)
    x = rand16(rng, (2, 3, 4))
    out = check(x, [ConvRun(m=2, conv_enable=0, pool_enable=4, pool_size=factor)])
    assert out[0].shape == (2, 3 * factor[1], 4 * factor[0])


def test_ub_chain() -> None:
    rng = np.random.default_rng(11)
    x = rand16(rng, (3, 6, 6))
    runs = [replace(conv_run(rng, 3, 8, 3, 3, pads=(1, 1, 1, 1), actfunc=2,
                             actfunc_param=0.1), to_external=False),
            replace(conv_run(rng, 8, 9, 1, 1), to_external=False, pool_enable=1,
                    pool_size=(2, 2), pool_stride=(2, 2)),
            conv_run(rng, 9, 4, 3, 3, stride=(2, 2), pads=(0, 1, 0, 1))]
    out = check(x, runs)
    assert len(out) == 1 and out[0].shape == (4, 1, 1)


def test_fire_module_concat() -> None:
    rng = np.random.default_rng(12)
    x = rand16(rng, (16, 5, 5))
    squeeze = replace(conv_run(rng, 16, 4, 1, 1, rectify=True), to_external=False)
    e1 = conv_run(rng, 4, 8, 1, 1, rectify=True)
    e3 = conv_run(rng, 4, 8, 3, 3, pads=(1, 1, 1, 1), rectify=True)
    fused = check(x, [squeeze, e1, squeeze, e3])
    assert [o.shape for o in fused] == [(8, 5, 5), (8, 5, 5)]
    # the same as a squeeze command followed by a command of two expands reading its output
    (s,) = run_conv(x, [replace(squeeze, to_external=True)], 0, None)
    split = check(s, [e1, e3])
    for a, b in zip(fused, split, strict=True):
        np.testing.assert_array_equal(bits(a), bits(b))


@pytest.mark.parametrize("given_eltwise", [False, True])
def test_eltwise_mode(given_eltwise: bool) -> None:
    rng = np.random.default_rng(13)
    x = rand16(rng, (4, 4, 4))
    e = rand16(rng, (4, 4, 4), 3.0) if given_eltwise else None
    runs = [replace(conv_run(rng, 4, 4, 3, 3, pads=(1, 1, 1, 1)), to_external=False),
            conv_run(rng, 4, 4, 3, 3, pads=(1, 1, 1, 1)),
            conv_run(rng, 4, 4, 1, 1)]
    check(x, runs, 1, e)


def test_special_values() -> None:
    rng = np.random.default_rng(14)
    x = rand16(rng, (3, 4, 4))
    x[0, 0, 0] = np.nan
    x[1, 2, 2] = np.inf
    x[2, 3, 1] = -np.inf
    x[2, 0, 3] = F16(6e-8)  # subnormal
    run = conv_run(rng, 3, 2, 3, 3, pads=(1, 1, 1, 1))
    check(x, [run])
    check(x, [ConvRun(m=3, conv_enable=0, pool_enable=1, pool_size=(2, 2),
                      pool_stride=(1, 1), pool_pad=(1, 1, 1, 1))])
    check(x, [ConvRun(m=3, conv_enable=0, pool_enable=2, pool_size=(2, 2), pool_stride=(2, 2),
                      pool_avg_param=0.25, actfunc=3)])
    check(x, [ConvRun(m=3, conv_enable=0, lrn=(True, True, 3), actfunc=1)])
    w = np.zeros((1, 3, 3, 3), dtype=F16)
    w[0, 0, 0, 0] = np.inf  # an inf weight on a padded tap gives NaN
    check(rand16(rng, (3, 2, 2)), [ConvRun(m=1, kernel=(3, 3), pads=(1, 1, 1, 1), weights=w)])
    big = np.full((8, 3, 3), 200.0, dtype=F16)
    heavy = ConvRun(m=2, kernel=(3, 3), weights=np.full((2, 8, 3, 3), 60.0, dtype=F16),
                    bias=np.array([0, -np.inf], dtype=F16))
    out = check(big, [heavy])
    assert np.isposinf(out[0][0]).all() and np.isneginf(out[0][1]).all()
    zero = np.zeros((2, 3, 3), dtype=F16)
    zero[0] = F16(-0.0)
    check(zero, [ConvRun(m=2, conv_enable=0, pool_enable=1, pool_size=(2, 2),
                         pool_stride=(1, 1), actfunc=6)])


@pytest.mark.parametrize("actfunc", range(6))
@pytest.mark.parametrize(("n_in", "n_out"), [(1, 1), (17, 9), (100, 33)])
def test_fc(actfunc: int, n_in: int, n_out: int) -> None:
    rng = np.random.default_rng(15)
    x = rand16(rng, (n_in,), 2.0)
    w = rand16(rng, (n_out, n_in), 0.3)
    b = rand16(rng, (n_out,))
    got = run_fc(x, w, b, actfunc, 0.125)
    np.testing.assert_array_equal(bits(got), bits(ref_fc(x, w, b, actfunc, 0.125)))


def test_fc_special_values() -> None:
    x = np.array([np.nan, 1, np.inf, 60000, -60000], dtype=F16)
    w = np.array([[0, 0, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 0, 2, 0],
                  [0, 0, 0, 1, 1]], dtype=F16)
    b = np.zeros(5, dtype=F16)
    for act in range(6):
        got = run_fc(x, w, b, act, 0.5)
        np.testing.assert_array_equal(bits(got), bits(ref_fc(x, w, b, act, 0.5)))
    assert np.isnan(run_fc(x, w, b, 0, 0.0)).all()  # every row meets 0 * NaN
    assert bits(run_fc(x, w, b, 0, 0.0))[0] == 0x7E00
    big = np.array([60000, 60000], dtype=F16)
    over = run_fc(big, np.array([[2, 0], [1, 1], [-1, -1]], dtype=F16), np.zeros(3, F16))
    assert np.isposinf(over[:2]).all() and np.isneginf(over[2])


@settings(max_examples=40, deadline=None)
@given(c=st.integers(1, 10), m=st.integers(1, 9), h=st.integers(1, 6), w=st.integers(1, 6),
       kx=st.integers(1, 4), ky=st.integers(1, 4), pad=st.tuples(*[st.integers(0, 2)] * 4),
       stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       dil=st.tuples(st.integers(1, 2), st.integers(1, 2)), depthwise=st.booleans(),
       deconv=st.booleans(),
       actfunc=st.integers(0, 6), rect=st.booleans(), pool=st.sampled_from([0, 1, 2, 4]),
       lrn=st.booleans(), seed=st.integers(0, 2**31))
def test_property(c: int, m: int, h: int, w: int, kx: int, ky: int,
                  pad: tuple[int, int, int, int], stride: tuple[int, int],
                  dil: tuple[int, int], depthwise: bool, deconv: bool, actfunc: int,
                  rect: bool, pool: int, lrn: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    if depthwise:
        m = c
    left, right, top, bottom = pad
    uh, uw = ((h - 1) * stride[1] + 1, (w - 1) * stride[0] + 1) if deconv else (h, w)
    if left + uw + right < (kx - 1) * dil[0] + 1 or top + uh + bottom < (ky - 1) * dil[1] + 1:
        return
    x = rand16(rng, (c, h, w), 2.0)
    run = conv_run(rng, c, m, kx, ky, conv_enable=(3 if depthwise else 1) + 4 * deconv,
                   pads=pad, stride=stride, dilation=dil, actfunc=actfunc, actfunc_param=0.2,
                   rectify=rect, lrn=(lrn, True, 2), prelu=rand16(rng, (m,)),
                   pool_enable=pool, pool_size=(1, 1) if pool != 4 else (2, 2),
                   pool_avg_param=0.5)
    check(x, [run])


def test_bad_arguments() -> None:
    rng = np.random.default_rng(16)
    x = rand16(rng, (3, 4, 4))
    good = conv_run(rng, 3, 2, 3, 3)
    with pytest.raises(InputError):
        run_conv(x, [replace(good, to_external=False)])
    with pytest.raises(InputError):
        run_conv(x, [])
    with pytest.raises(InputError):
        run_conv(x, [replace(good, weights=rand16(rng, (2, 4, 3, 3)))])
    with pytest.raises(InputError):
        run_conv(x, [conv_run(rng, 3, 2, 7, 7)])  # window larger than the image
    with pytest.raises(InputError):
        run_conv(x, [ConvRun(m=4, conv_enable=0)])
    with pytest.raises(InputError):
        run_conv(x, [replace(good, actfunc=4)])
    with pytest.raises(InputError):
        run_conv(x, [good], 1, rand16(rng, (2, 3, 3)))
    with pytest.raises(InputError):
        run_conv(x.astype(np.float32), [good])
    with pytest.raises(InputError):
        run_fc(x[0, 0], rand16(rng, (2, 5)), rand16(rng, (2,)))
