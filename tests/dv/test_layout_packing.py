"""Device layout round trips, weight packers and their readers."""

from __future__ import annotations

import numpy as np
import pytest

from emu.dv.compute import run_fc
from emu.dv.layout import element_index, from_device, tensor_bytes, to_device
from emu.dv.packing import (
    conv_weights_size,
    dil_weights_size,
    fc_weights_size,
    pack_conv_weights,
    pack_dil_weights,
    pack_fc_weights,
    unpack_conv_weights,
    unpack_dil_weights,
    unpack_fc_weights,
)
from emu.errors import InputError
from tests.dv.reference import ref_fc_nchw, ref_pack_dil

F16 = np.float16
SHAPES = [(1, 1, 1), (3, 2, 5), (8, 4, 4), (9, 3, 2), (17, 1, 7), (64, 2, 3)]


@pytest.mark.parametrize("shape", SHAPES)
def test_round_trip(shape: tuple[int, int, int]) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(F16)
    data = to_device(x)
    assert data.dtype == np.uint8 and data.size == tensor_bytes(*shape) == 2 * x.size
    back = from_device(data, *shape)
    np.testing.assert_array_equal(back.view(np.uint16), x.view(np.uint16))
    np.testing.assert_array_equal(from_device(data.tobytes(), *shape), x)
    assert sorted(element_index(*shape).ravel()) == list(range(x.size))


def test_whc8_order() -> None:
    c, h, w = 9, 2, 3
    x = np.arange(c * h * w, dtype=F16).reshape(c, h, w)
    flat = to_device(x).view("<f2")
    # first block: width outer, height, 8 channels innermost
    assert list(flat[:8]) == [x[ch, 0, 0] for ch in range(8)]
    assert list(flat[8:16]) == [x[ch, 1, 0] for ch in range(8)]
    assert list(flat[16:24]) == [x[ch, 0, 1] for ch in range(8)]
    # the last block holds one channel, unpadded
    assert list(flat[48:]) == [x[8, y, xx] for xx in range(w) for y in range(h)]


def test_layout_errors() -> None:
    with pytest.raises(InputError):
        tensor_bytes(0, 1, 1)
    with pytest.raises(InputError):
        to_device(np.zeros((2, 2), dtype=F16))
    with pytest.raises(InputError):
        to_device(np.zeros((1, 2, 2), dtype=np.float32))
    with pytest.raises(InputError):
        from_device(np.zeros(7, dtype=np.uint8), 1, 2, 2)


KERNELS = [(1, 1), (1, 3), (2, 2), (3, 3), (4, 5), (5, 5), (6, 6), (7, 7), (7, 2)]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize(("n_channels", "n_kernels"), [(1, 1), (3, 9), (9, 8), (70, 3)])
@pytest.mark.parametrize("quantised", [False, True])
@pytest.mark.parametrize("prelu", [False, True])
def test_conv_pack_round_trip(kernel: tuple[int, int], n_channels: int, n_kernels: int,
                              quantised: bool, prelu: bool) -> None:
    rng = np.random.default_rng(1)
    kx, ky = kernel
    n = n_kernels * n_channels * ky * kx
    bias = rng.standard_normal(n_kernels).astype(F16)
    slopes = rng.standard_normal(n_kernels).astype(F16) if prelu else None
    if quantised:
        table = rng.standard_normal(256).astype(F16)
        idx = rng.integers(0, 256, n).astype(np.uint8)
        packed = pack_conv_weights(n_channels, kx, ky, n_kernels, table.view(np.uint16), idx,
                                   bias.view(np.uint16), slopes)
        want = table[idx].reshape(n_kernels, n_channels, ky, kx)
    else:
        want = rng.standard_normal((n_kernels, n_channels, ky, kx)).astype(F16)
        packed = pack_conv_weights(n_channels, kx, ky, n_kernels, None, want.view(np.uint16),
                                   bias, slopes)
    assert len(packed) == conv_weights_size(n_channels, kx, ky, n_kernels, quantised, prelu)
    assert len(packed) % 16 == 0
    w, b, s = unpack_conv_weights(packed, n_channels, kx, ky, n_kernels, quantised, prelu)
    np.testing.assert_array_equal(w.view(np.uint16), want.view(np.uint16))
    np.testing.assert_array_equal(b.view(np.uint16), bias.view(np.uint16))
    if prelu:
        assert s is not None and slopes is not None
        np.testing.assert_array_equal(s.view(np.uint16), slopes.view(np.uint16))
    else:
        assert s is None


@pytest.mark.parametrize("kernel", [(1, 1), (3, 3), (2, 5), (7, 7)])
@pytest.mark.parametrize(("n_channels", "n_kernels"), [(1, 1), (9, 8), (70, 11)])
@pytest.mark.parametrize("quantised", [False, True])
@pytest.mark.parametrize("prelu", [False, True])
def test_dil_pack_is_the_references_and_round_trips(kernel: tuple[int, int], n_channels: int,
                                                    n_kernels: int, quantised: bool,
                                                    prelu: bool) -> None:
    rng = np.random.default_rng(2)
    kx, ky = kernel
    n = n_kernels * n_channels * ky * kx
    bias = rng.standard_normal(n_kernels).astype(F16).view(np.uint16)
    slopes = rng.standard_normal(n_kernels).astype(F16).view(np.uint16) if prelu else None
    table = rng.standard_normal(256).astype(F16).view(np.uint16) if quantised else None
    given = (rng.integers(0, 256, n).astype(np.uint8) if quantised
             else rng.standard_normal(n).astype(F16).view(np.uint16))
    packed = pack_dil_weights(n_channels, kx, ky, n_kernels, table, given, bias, slopes)
    assert packed == ref_pack_dil(n_channels, kx, ky, n_kernels, table, given, bias, slopes)
    assert len(packed) == dil_weights_size(n_channels, kx, ky, n_kernels, quantised, prelu)
    w, b, s = unpack_dil_weights(packed, n_channels, kx, ky, n_kernels, quantised, prelu)
    want = table[given] if table is not None else given
    np.testing.assert_array_equal(w.view(np.uint16).reshape(-1), want)
    np.testing.assert_array_equal(b.view(np.uint16), bias)
    if slopes is not None:
        assert s is not None
        np.testing.assert_array_equal(s.view(np.uint16), slopes)


def test_conv_pack_pinned_offsets() -> None:
    # Byte positions as DMP's public packer places them (checked against it, see report).
    w = np.array([0x1111, 0x2222], dtype=np.uint16)  # 1 kernel, 2 channels, 1x1
    packed = np.frombuffer(pack_conv_weights(2, 1, 1, 1, None, w, np.array([0x3333],
                                                                           np.uint16)), np.uint8)
    assert packed.size == conv_weights_size(2, 1, 1, 1, False) == 16 + 144
    assert packed[0:2].tolist() == [0x33, 0x33]
    assert packed[16 + 2 * 66:16 + 2 * 67].tolist() == [0x11, 0x11]  # row 11, column 0
    assert packed[16 + 2 * 69:16 + 2 * 70].tolist() == [0x22, 0x22]  # row 11, column 3
    assert np.count_nonzero(packed) == 6
    assert conv_weights_size(3, 3, 3, 9, True) == 1200  # 512 + (16 + 8 * 72) + (16 + 72), to 16
    assert conv_weights_size(9, 7, 7, 1, False) == 16 + 9 * 144
    assert conv_weights_size(9, 5, 5, 1, False) == 16 + (4 + 1) * 144


@pytest.mark.parametrize("dims", [(3, 1, 1, 5, 1, 1), (9, 2, 3, 4, 1, 1), (17, 3, 2, 10, 1, 1),
                                  (8, 2, 2, 9, 2, 1), (1, 1, 1, 1, 1, 1)])
@pytest.mark.parametrize("quantised", [False, True])
def test_fc_pack_reorders_to_device_layout(dims: tuple[int, int, int, int, int, int],
                                          quantised: bool) -> None:
    rng = np.random.default_rng(2)
    ci, hi, wi, co, ho, wo = dims
    n_in, n_out = ci * hi * wi, co * ho * wo
    bias = rng.integers(-3, 4, n_out).astype(F16)
    if quantised:
        table = np.arange(-128, 128).astype(F16)  # small integers: every sum is exact
        idx = rng.integers(125, 132, n_in * n_out).astype(np.uint8)
        packed = pack_fc_weights(*dims, table.view(np.uint16), idx, bias.view(np.uint16))
        w = table[idx].reshape(n_out, n_in)
    else:
        w = rng.integers(-3, 4, (n_out, n_in)).astype(F16)
        packed = pack_fc_weights(*dims, None, w.view(np.uint16), bias.view(np.uint16))
    assert len(packed) == fc_weights_size(*dims, quantised) and len(packed) % 16 == 0
    w_dev, b_dev = unpack_fc_weights(packed, n_in, n_out, quantised)
    x = rng.integers(-4, 5, (ci, hi, wi)).astype(F16)
    y_dev = run_fc(to_device(x).view(F16), w_dev, b_dev)
    y = from_device(y_dev.view(np.uint8), co, ho, wo)
    want = ref_fc_nchw(x, w, bias).reshape(co, ho, wo)
    np.testing.assert_array_equal(y.view(np.uint16), want.view(np.uint16))
    rows = element_index(co, ho, wo).ravel()
    cols = element_index(ci, hi, wi).ravel()
    np.testing.assert_array_equal(w_dev[np.ix_(rows, cols)].view(np.uint16),
                                  w.view(np.uint16))


def test_the_size_query_counts_what_the_layout_places() -> None:
    # conv_weights_size answers without placing the weights (a layer of 65535 x 65535
    # channels must be refused, not built); the layout's own size comes from its offsets.
    from emu.dv.packing import _ConvMap
    for kx in range(1, 8):
        for ky in range(1, 8):
            for n_channels in (1, 2, 7, 8, 9, 15, 16, 17, 63, 64, 65, 130):
                for n_kernels in (1, 7, 8, 9, 17):
                    for quantised in (False, True):
                        for prelu in (False, True):
                            args = (n_channels, kx, ky, n_kernels, quantised, prelu)
                            assert conv_weights_size(*args) == _ConvMap(*args).size, args
    with pytest.raises(InputError, match=r"input channels must be 1\.\.65535"):
        conv_weights_size(65536, 3, 3, 1, False)
    with pytest.raises(InputError, match=r"output channels must be 1\.\.65535"):
        dil_weights_size(1, 3, 3, 65536, False)
    assert conv_weights_size(65535, 7, 7, 65535, False) > 1 << 39  # answered, not built


def test_fc_sizes() -> None:
    assert fc_weights_size(3, 1, 1, 5, 1, 1, False) == 32 + 16
    assert fc_weights_size(3, 1, 1, 5, 1, 1, True) == 512 + 16 + 16


def test_packing_errors() -> None:
    w = np.zeros(9, dtype=np.uint16)
    b = np.zeros(1, dtype=np.uint16)
    for args in [(1, 8, 8, 1), (1, 0, 3, 1), (0, 3, 3, 1), (1, 3, 3, 0)]:
        with pytest.raises(InputError):
            pack_conv_weights(*args, None, w, b)
        with pytest.raises(InputError):
            conv_weights_size(*args, False)
    with pytest.raises(InputError):
        pack_conv_weights(1, 3, 3, 1, None, w[:8], b)
    with pytest.raises(InputError):
        pack_conv_weights(1, 3, 3, 1, None, w, np.zeros(2, np.uint16))
    with pytest.raises(InputError):
        pack_conv_weights(1, 3, 3, 1, np.zeros(256, np.uint16), w, b)  # uint16 indices
    with pytest.raises(InputError):
        pack_conv_weights(1, 3, 3, 1, np.zeros(255, np.uint16), w.astype(np.uint8), b)
    with pytest.raises(InputError):
        pack_conv_weights(1, 3, 3, 1, None, w.astype(np.float32), b)
    with pytest.raises(InputError):
        pack_fc_weights(0, 1, 1, 1, 1, 1, None, w, b)
    with pytest.raises(InputError):
        pack_fc_weights(3, 1, 1, 3, 1, 1, None, w[:8], np.zeros(3, np.uint16))
    with pytest.raises(InputError):
        unpack_conv_weights(b"\0" * 16, 1, 3, 3, 1, False)
    with pytest.raises(InputError):
        unpack_fc_weights(b"\0" * 16, 3, 3, False)
