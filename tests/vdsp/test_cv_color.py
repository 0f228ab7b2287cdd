"""cvt_color on the DSP against OpenCV: grey bit-identical to cv2.cvtColor, NV12
bit-identical to cv2's I420 conversion with its U and V planes interleaved."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from emu.errors import InputError
from emu.vdsp.ops import cv, cv_color
from emu.vdsp.ops.image_args import TYPE_U8, Image
from tests.vdsp.cv_support import LARGE, SIZES, assert_same, noise, rgb, run_cv

GRAY = {"rgb2gray": cv2.COLOR_RGB2GRAY, "bgr2gray": cv2.COLOR_BGR2GRAY}
I420 = {"rgb2nv12": cv2.COLOR_RGB2YUV_I420, "bgr2nv12": cv2.COLOR_BGR2YUV_I420}
CODE = dict(cv_color.CODES)
EVEN_SIZES = [(2, 2), (2, 18), (18, 2), (6, 62), (8, 64), (10, 66), (34, 130)]


def nv12_reference(src: np.ndarray, name: str) -> np.ndarray:
    """NV12 from OpenCV's I420: the Y plane, then U and V interleaved."""
    h, w = src.shape[:2]
    i420 = cv2.cvtColor(src, I420[name])
    chroma = i420[h:].reshape(-1)
    n = h * w // 4
    u, v = chroma[:n].reshape(h // 2, w // 2), chroma[n:].reshape(h // 2, w // 2)
    return np.concatenate([i420[:h], np.stack([u, v], axis=-1).reshape(h // 2, w)])


def reference(src: np.ndarray, name: str) -> np.ndarray:
    return cv2.cvtColor(src, GRAY[name]) if name in GRAY else nv12_reference(src, name)


def test_gray_weights_match_opencv_on_every_colour() -> None:
    # The fixed-point formula the kernel computes, on all 2**24 colours (16 slices of red),
    # against cv2.
    wr, wg, wb = cv_color.GRAY_WEIGHTS
    gb = np.arange(1 << 16, dtype=np.int32)
    g, b = gb >> 8, gb & 255
    for red in range(0, 256, 16):
        r = np.arange(red, red + 16, dtype=np.int32)[:, None]
        pic = np.stack(np.broadcast_arrays(r, g[None], b[None]), -1).astype(np.uint8)
        ours = ((wr * r + wg * g + wb * b + (1 << 14)) >> 15).astype(np.uint8)
        assert_same(ours, cv2.cvtColor(pic, cv2.COLOR_RGB2GRAY), f"grey formula, red {red}")


@pytest.mark.parametrize("name", ["rgb2gray", "rgb2nv12"])
def test_standard_image_large(name: str) -> None:
    src = rgb(*LARGE)
    out, report = run_cv("cvt_color", [src], code=CODE[name])
    assert_same(out, reference(src, name), name)
    assert report["cycles_per_pixel"] > 0


@pytest.mark.parametrize("name", list(CODE))
def test_noise(name: str) -> None:
    src = noise(46, 200, seed=7, channels=3)
    out, _ = run_cv("cvt_color", [src], code=CODE[name])
    assert_same(out, reference(src, name), name)


@pytest.mark.parametrize("shape", SIZES)
@pytest.mark.parametrize("name", ["rgb2gray", "bgr2gray"])
def test_gray_edge_sizes(shape: tuple[int, int], name: str) -> None:
    src = noise(*shape, seed=shape[0] * 1000 + shape[1], channels=3)
    out, _ = run_cv("cvt_color", [src], code=CODE[name])
    assert_same(out, reference(src, name), f"{name} {shape}")


@pytest.mark.parametrize("shape", EVEN_SIZES)
@pytest.mark.parametrize("name", ["rgb2nv12", "bgr2nv12"])
def test_nv12_edge_sizes(shape: tuple[int, int], name: str) -> None:
    src = noise(*shape, seed=shape[0] * 1000 + shape[1] + 1, channels=3)
    out, _ = run_cv("cvt_color", [src], code=CODE[name])
    assert_same(out, reference(src, name), f"{name} {shape}")


def test_wide_image_in_strips() -> None:
    src = noise(4, 30002, seed=5, channels=3)
    for name in ("bgr2gray", "rgb2nv12"):
        out, _ = run_cv("cvt_color", [src], code=CODE[name])
        assert_same(out, reference(src, name), name)


def test_extreme_colours() -> None:
    # Saturated and grey colours, where rounding and the BT.601 offsets are tested hardest.
    levels = np.array([0, 1, 2, 127, 128, 254, 255], np.uint8)
    combos = np.array(np.meshgrid(levels, levels, levels)).reshape(3, -1).T
    src = np.ascontiguousarray(np.repeat(combos, 2, axis=0).reshape(-1, 2, 3)[:342].reshape(
        18, 38, 3))
    for name in CODE:
        out, _ = run_cv("cvt_color", [src], code=CODE[name])
        assert_same(out, reference(src, name), name)


def test_bad_parameters() -> None:
    op = cv.cv_operator("cvt_color")
    assert op is not None
    rgb_im = Image(65, 9, 3, TYPE_U8, 195, 0)
    with pytest.raises(ValueError, match="cvt_color: NV12 output needs even width and height"):
        op.output([rgb_im], {"code": cv_color.RGB2NV12})
    with pytest.raises(ValueError, match="cvt_color: takes uint8 images of 3 channels"):
        op.output([Image(64, 8, 1, TYPE_U8, 64, 0)], {"code": cv_color.RGB2GRAY})
    with pytest.raises(ValueError, match="cvt_color: code must be one of"):
        op.params[0].check(5, "cvt_color")
    assert op.output([rgb_im], {"code": cv_color.BGR2GRAY}) == (65, 9, 1, TYPE_U8, 1)


def test_errors_reach_the_caller() -> None:
    with pytest.raises(InputError, match="even width and height"):
        run_cv("cvt_color", [noise(9, 65, channels=3)], code=cv_color.RGB2NV12)
    with pytest.raises(InputError, match="code must be one of"):
        run_cv("cvt_color", [noise(8, 64, channels=3)], code=3)
    with pytest.raises(InputError, match="3 channels"):
        run_cv("cvt_color", [noise(8, 64)], code=cv_color.RGB2GRAY)
