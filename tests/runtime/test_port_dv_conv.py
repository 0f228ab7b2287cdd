"""DMP's test_conv, ported call by call (examples/ports/dv_test_conv.py), on the issue's 650
configurations (326 file sets of generate_data.py's default run; the port's docstring says
how they were chosen).

Caffe's role is played here by `caffe_forward`, a float64 layer with Caffe's semantics
(Convolution with groups and dilation, Deconvolution by scattering each input through the
kernel, then TanH, ReLU, Sigmoid, PReLU or ELU), independent of emu. The port compares the
device's output with it as the C program does (`check_err`): the data are the generator's
integers (-2, -1, 1, 2), so every sum is an exact integer in float32 and in float64; both
sides round it once to FP16, and the activations are taken of that integer, so without an
activation the outputs must agree within 1e-6 (that is, exactly) and with one within 1e-3
(tanh, sigmoid and ELU of integers saturate or are correctly rounded on both sides). Then
every configuration's output, whose SHA-256 the port keeps, must equal bit for bit the
output of the slow reference of `tests/dv/reference.py` for the command the port built.

The default run takes a deterministic subset of the 650: the cheapest file set for every
value of every feature (conv_enable 1, 3, 5, 7; each kernel width and height; strides;
dilations; "same" and zero pads; activations; input sizes; channel and kernel counts, 65
included). `-m slow` runs all 650.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from emu.dv import layout
from emu.dv.compute import ConvRun
from emu.runtime import session
from tests.dv.reference import ref_run_conv

PORTS = Path(__file__).resolve().parents[2] / "examples" / "ports"
sys.path.insert(0, str(PORTS))
try:
    import dv_test_conv as port
finally:
    sys.path.pop(0)


# --- Caffe's layer in float64 -----------------------------------------------------------

def _activate(v: np.ndarray, activation: int, prelu: np.ndarray) -> np.ndarray:
    if activation == 1:
        return np.tanh(v)
    if activation == 2:  # Caffe's ReLU, negative_slope 0
        return np.maximum(v, 0.0)
    if activation == 3:
        return 1.0 / (1.0 + np.exp(-v))
    if activation == 4:
        return np.where(v > 0, v, v * prelu.astype(np.float64)[:, None, None])
    if activation == 5:  # alpha 1
        return np.where(v > 0, v, np.expm1(np.minimum(v, 0.0)))
    return v


def caffe_forward(layer: Any, x: np.ndarray, w: np.ndarray, bias: np.ndarray,
                  prelu: np.ndarray) -> np.ndarray:
    """Caffe's Convolution / Deconvolution (pad_w, pad_h the larger of each pair, as the
    generator's prototxt) and activation, in float64."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    c, h, wd = x.shape
    m = layer.n_kernels
    dil = max(1, layer.dil)
    sx, sy = layer.stride_xy
    pad_w = max(layer.pad_ltrb[0], layer.pad_ltrb[2])
    pad_h = max(layer.pad_ltrb[1], layer.pad_ltrb[3])
    ky, kx = w.shape[2:]
    if layer.deconv:  # w is (C, M / group, ky, kx): every input scattered through the kernel
        full = np.zeros((m, (h - 1) * sy + (ky - 1) * dil + 1, (wd - 1) * sx + (kx - 1) * dil + 1))
        for ty in range(ky):
            for tx in range(kx):
                if layer.dw:
                    part = w[:, 0, ty, tx, None, None] * x
                else:
                    part = np.einsum("cm,chw->mhw", w[:, :, ty, tx], x)
                full[:, ty * dil:ty * dil + (h - 1) * sy + 1:sy,
                     tx * dil:tx * dil + (wd - 1) * sx + 1:sx] += part
        out = full[:, pad_h:full.shape[1] - pad_h, pad_w:full.shape[2] - pad_w]
    else:  # w is (M, C / group, ky, kx)
        xp = np.zeros((c, h + 2 * pad_h, wd + 2 * pad_w))
        xp[:, pad_h:pad_h + h, pad_w:pad_w + wd] = x
        oh = (h + 2 * pad_h - (ky - 1) * dil - 1) // sy + 1
        ow = (wd + 2 * pad_w - (kx - 1) * dil - 1) // sx + 1
        out = np.zeros((m, oh, ow))
        for ty in range(ky):
            for tx in range(kx):
                patch = xp[:, ty * dil:ty * dil + (oh - 1) * sy + 1:sy,
                           tx * dil:tx * dil + (ow - 1) * sx + 1:sx]
                if layer.dw:
                    out += w[:, 0, ty, tx, None, None] * patch
                else:
                    out += np.einsum("mc,chw->mhw", w[:, :, ty, tx], patch)
    return _activate(out + bias.astype(np.float64)[:, None, None], layer.activation, prelu)


def test_the_caffe_layer_is_caffes_on_hand_worked_cases():
    one = port.Layer(2, 2, 1, 2, 2, 1, (0, 0, 0, 0), (2, 2), 0, False, 1, True)
    x = np.array([[[1.0, 2.0], [3.0, 4.0]]])
    w = np.array([[[[1.0, 10.0], [100.0, 1000.0]]]])
    out = caffe_forward(one, x, w, np.zeros(1), np.zeros(1))
    # a stride-2 2x2 deconvolution tiles the kernel scaled by each input
    assert out[0].tolist() == [[1, 10, 2, 20], [100, 1000, 200, 2000],
                               [3, 30, 4, 40], [300, 3000, 400, 4000]]
    conv = port.Layer(3, 1, 1, 3, 1, 1, (1, 0, 1, 0), (1, 1), 0, False, 1, False)
    out = caffe_forward(conv, np.array([[[1.0, 2.0, 3.0]]]), np.array([[[[1.0, 10.0, 100.0]]]]),
                        np.ones(1), np.zeros(1))
    assert out[0].tolist() == [[0 + 10 + 200 + 1, 1 + 20 + 300 + 1, 2 + 30 + 0 + 1]]


# --- the configurations -------------------------------------------------------------------

def _features(layer: Any) -> set[tuple[str, Any]]:
    """Each value of each feature, and of each feature next to the kind of convolution."""
    conv_enable = (3 if layer.dw else 1) + 4 * layer.deconv
    alone = {("kx", layer.kx), ("ky", layer.ky), ("stride", layer.stride_xy),
             ("dil", layer.dil), ("pad", max(layer.pad_ltrb) > 0), ("act", layer.activation),
             ("c", layer.n_channels), ("m", layer.n_kernels), ("w", layer.width),
             ("h", layer.height)}
    return ({("conv_enable", conv_enable)} | alone
            | {(f"{name} with conv_enable", (conv_enable, v)) for name, v in alone})


def _cost(layer: Any) -> int:
    ox, oy = layer.out_size()
    depth = 1 if layer.dw else layer.n_channels
    return layer.n_kernels * depth * layer.kx * layer.ky * ox * oy + 1000


ISSUE_LAYERS = port.issue_file_sets()


def _default_layers() -> list[Any]:
    """The cheapest file set for every feature value of the 650, in the 650's order."""
    chosen: set[Any] = set()
    covered: set[tuple[str, Any]] = set()
    for layer in sorted(ISSUE_LAYERS, key=_cost):
        if not _features(layer) <= covered:
            chosen.add(layer)
            covered |= _features(layer)
    return [layer for layer in ISSUE_LAYERS if layer in chosen]


def _test_conv_count(layers: list[Any]) -> int:
    return sum(1 if layer.activation == 4 else 2 for layer in layers)


def test_the_issue_set_is_650_configurations_with_every_feature():
    assert len(port.Generator().layers()) == 90_351  # the default run's file sets
    assert len(set(ISSUE_LAYERS)) == port.ISSUE_FILE_SETS
    assert _test_conv_count(ISSUE_LAYERS) == 650
    features = set().union(*map(_features, ISSUE_LAYERS))
    values = {name: {v for n, v in features if n == name} for name, _ in features}
    assert values["stride with conv_enable"] >= {(k, (2, 2)) for k in (1, 3, 5, 7)}
    assert values["conv_enable"] == {1, 3, 5, 7}
    assert values["kx"] == values["ky"] == set(range(1, 8))
    assert values["act"] == set(range(6)) and values["dil"] == {1, 2, 24}
    assert {1, 3, 9, 64, 65} <= values["c"] and {1, 3, 9, 64, 65} <= values["m"]
    assert values["stride"] == {(1, 1), (2, 2)} and values["pad"] == {False, True}
    default = set().union(*map(_features, _default_layers()))
    assert default == features  # the default subset leaves no feature value out


# --- running the port -----------------------------------------------------------------

@contextlib.contextmanager
def _inside(folder: Path) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def _write_data(folder: Path, layers: list[Any], forward: Any = caffe_forward) -> None:
    generator = port.Generator(forward)
    with _inside(folder):
        for layer in layers:
            generator.generate(layer)


def _reference_hash(conf: Any) -> bytes:
    """SHA-256 of the slow reference's output for the command the port built from `conf`'s
    files, in the device's layout."""
    base = Path(conf.prefix())
    read = lambda suffix, dtype: np.fromfile(f"{base}.{suffix}.bin", dtype)  # noqa: E731
    quant = read("q", np.uint16).view(np.float16)
    depthwise = conf.tpe == 1
    x = read("i", np.float16).reshape(conf.n_channels, conf.height, conf.width)
    weights = quant[read("w", np.uint8)].reshape(
        conf.n_kernels, 1 if depthwise else conf.n_channels, conf.ky, conf.kx)
    dil = conf.tpe if conf.tpe > 1 else 1
    pads = (conf.pad_left, conf.pad_right, conf.pad_top, conf.pad_bottom)
    if conf.deconv:  # the kernel driver's pads: the full kernel's size - 1 - Caffe's
        kw, kh = (conf.kx - 1) * dil + 1, (conf.ky - 1) * dil + 1
        pads = (kw - 1 - pads[0], kw - 1 - pads[1], kh - 1 - pads[2], kh - 1 - pads[3])
    run = ConvRun(m=conf.n_kernels, conv_enable=(3 if depthwise else 1) + 4 * conf.deconv,
                  kernel=(conf.kx, conf.ky), pads=pads, stride=(conf.stride_x, conf.stride_y),
                  dilation=(dil, dil), weights=weights,
                  bias=read("b", np.uint16).view(np.float16),
                  prelu=read("prelu", np.uint16).view(np.float16) if conf.activation == 4
                  else None, actfunc=conf.activation)
    (out,) = ref_run_conv(x, [run], 0, None)
    return hashlib.sha256(layout.to_device(out).tobytes()).digest()


def _run(folder: Path, seed: int) -> tuple[list[Any], tuple[int, int, int]]:
    with _inside(folder), session.Session():
        configs = port.load_configurations()
        counts = port.run_passes(configs, random.Random(seed))
    return configs, counts


@pytest.mark.parametrize("layers", [
    pytest.param(_default_layers, id="default-subset"),
    pytest.param(lambda: ISSUE_LAYERS, id="all-650", marks=pytest.mark.slow)])
def test_the_port_passes_against_caffe_and_equals_the_slow_reference(tmp_path, layers):
    chosen = layers()
    _write_data(tmp_path, chosen)
    configs, (n_ok, n_add_raw, n_err) = _run(tmp_path, seed=23)
    assert len(configs) == _test_conv_count(chosen)
    assert (n_add_raw, n_err) == (0, 0) and n_ok > 0
    assert not any(conf.failed for conf in configs)
    with _inside(tmp_path):
        for conf in configs:
            assert conf.hash_set and conf.hash == _reference_hash(conf), conf.prefix()


def _unrotated_forward(layer: Any, x: np.ndarray, w: np.ndarray, bias: np.ndarray,
                       prelu: np.ndarray) -> np.ndarray:
    """A wrong Caffe: the deconvolution's kernel read upside down."""
    return caffe_forward(layer, x, w[:, :, ::-1, ::-1], bias, prelu)


def test_the_ports_check_finds_a_wrong_gold_output(tmp_path):
    deconvs = [layer for layer in _default_layers()
               if layer.deconv and layer.kx > 1 and layer.width > 1][:3]
    assert deconvs
    _write_data(tmp_path, deconvs, _unrotated_forward)
    configs, (_, n_add_raw, n_err) = _run(tmp_path, seed=5)
    assert n_add_raw == 0 and n_err > 0 and all(conf.failed for conf in configs)
