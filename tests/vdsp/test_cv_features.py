"""Canny and Harris on the DSP against OpenCV: Canny bit-exact, Harris within its bound."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from emu.errors import InputError
from emu.vdsp.ops import cv
from emu.vdsp.ops.image_args import TYPE_F32, TYPE_U8, Image
from tests.vdsp.cv_support import (
    BORDER_MODES,
    LARGE,
    SIZES,
    assert_same,
    gray,
    noise,
    run_cv,
    run_preempted,
)

HARRIS_BOUND = 2e-6
"""Largest |DSP - OpenCV| of cornerHarris, relative to the image's largest |response|."""


def _canny(img: np.ndarray, t1: float, t2: float, aperture: int = 3, l2: int = 0) -> None:
    out, report = run_cv("canny", [img], threshold1=t1, threshold2=t2, apertureSize=aperture,
                         L2gradient=l2)
    ref = cv2.Canny(img, t1, t2, apertureSize=aperture, L2gradient=bool(l2))
    assert_same(out, ref, f"canny {img.shape} {t1} {t2} {aperture} {l2}")
    assert report["kernel_cycles"] > 0


def _harris(img: np.ndarray, block: int, ksize: int, k: float, border: int) -> float:
    out, _ = run_cv("corner_harris", [img], blockSize=block, ksize=ksize, k=k,
                    borderType=border)
    ref = cv2.cornerHarris(img, block, ksize, k, borderType=border)
    assert out.shape == ref.shape and out.dtype == np.float32
    scale = float(np.abs(ref).max())
    err = float(np.abs(out.astype(np.float64) - ref).max())
    what = f"harris {img.shape} block {block} ksize {ksize} border {border}"
    assert err <= HARRIS_BOUND * scale, (what, err, scale)
    return err / scale if scale else 0.0


def _blurred_noise(height: int, width: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return cv2.GaussianBlur(rng.integers(0, 256, (height, width), dtype=np.uint8), (0, 0), 2.5)


# --- Canny ------------------------------------------------------------------------------------


def test_canny_standard_image_large() -> None:
    _canny(gray(*LARGE), 50, 150)


@pytest.mark.parametrize("aperture", [3, 5])
@pytest.mark.parametrize("l2", [0, 1])
def test_canny_edge_sizes(aperture: int, l2: int) -> None:
    t1, t2 = (60, 200) if aperture == 3 else (600, 2000)
    for h, w in SIZES:
        _canny(noise(h, w, seed=h * w), t1, t2, aperture, l2)
        _canny(gray(h, w), t1 / 4, t2 / 4, aperture, l2)


@pytest.mark.parametrize("aperture", [3, 5])
@pytest.mark.parametrize("l2", [0, 1])
def test_canny_threshold_sweep(aperture: int, l2: int) -> None:
    img = gray(96, 160)
    f = 1 if aperture == 3 else 10
    for t1, t2 in [(0, 0), (30, 90), (120, 40), (-10, 20), (20.7, 80.2), (1000, 2000)]:
        _canny(img, t1 * f, t2 * f, aperture, l2)


def test_canny_hysteresis_across_tiles() -> None:
    # Dense weak chains crossing many tile borders: several hysteresis passes.
    _canny(_blurred_noise(200, 300, 5), 2, 30)
    # A spiral of weak edges fed by one strong blob in the middle.
    n = 160
    y, x = np.mgrid[:n, :n] - n / 2
    img = np.where(np.mod(np.hypot(y, x) - np.arctan2(y, x) * 12 / np.pi, 24) < 12, 60, 0)
    img = img.astype(np.uint8)
    img[n // 2 - 2: n // 2 + 2, n // 2 - 2: n // 2 + 2] = 255
    _canny(img, 50, 400)


def test_canny_wide_image_in_strips() -> None:
    # Too wide for a band of rows: the tiles are strips, chains cross their sides.
    _canny(_blurred_noise(6, 5000, 3), 10, 60)


def test_canny_resumes_its_passes_after_a_preemption() -> None:
    img = _blurred_noise(120, 200, 7)
    want = cv2.Canny(img, 2, 30)
    out, end_ps, _ = run_preempted("canny", img, None, threshold1=2.0, threshold2=30.0)
    assert_same(out, want)
    preempted = 0
    for at_ps in np.linspace(0, end_ps, 7, dtype=np.int64).tolist()[1:-1]:
        out, _, preemptions = run_preempted("canny", img, at_ps, threshold1=2.0, threshold2=30.0)
        assert_same(out, want, f"preempted at {at_ps} ps")
        preempted += preemptions
    assert preempted >= 3


def test_canny_bad_parameters() -> None:
    op = cv.cv_operator("canny")
    assert op is not None
    grey = [Image(64, 8, 1, TYPE_U8, 64, 0)]
    with pytest.raises(ValueError, match="canny: apertureSize must be one of"):
        op.encode({**op.defaults(), "apertureSize": 7})
    with pytest.raises(ValueError, match="canny: L2gradient must be one of"):
        op.encode({**op.defaults(), "L2gradient": 2})
    with pytest.raises(ValueError, match="canny: takes a uint8 grey image"):
        op.output([Image(64, 8, 3, TYPE_U8, 192, 0)], op.defaults())
    assert op.output(grey, op.defaults()) == (64, 8, 1, TYPE_U8, 1)
    with pytest.raises(InputError, match="apertureSize"):
        run_cv("canny", [gray(8, 64)], apertureSize=4)
    with pytest.raises(InputError, match="uint8 grey"):
        run_cv("canny", [noise(8, 64, channels=3)])


# --- Harris -----------------------------------------------------------------------------------


def test_harris_standard_image_large() -> None:
    _harris(gray(*LARGE), 2, 3, 0.04, cv.BORDER_REFLECT_101)


@pytest.mark.parametrize("border", BORDER_MODES)
def test_harris_edge_sizes(border: int) -> None:
    for h, w in SIZES:
        _harris(noise(h, w, seed=h + w), 3, 3, 0.04, border)
        _harris(noise(h, w, seed=h * w), 2, 5, 0.06, border)


@pytest.mark.parametrize("ksize", [3, 5])
@pytest.mark.parametrize("border", BORDER_MODES)
def test_harris_block_sweep(ksize: int, border: int) -> None:
    img = gray(40, 90)
    for block in (1, 2, 4, 5, 7):
        _harris(img, block, ksize, 0.05, border)


def test_harris_k_and_random() -> None:
    for k in (-0.1, 0.0, 0.15):
        _harris(noise(30, 70, seed=3), 3, 3, k, cv.BORDER_REFLECT)
    _harris(gray(160, 1500), 3, 3, 0.04, cv.BORDER_REPLICATE)  # strips


def test_harris_bad_parameters() -> None:
    op = cv.cv_operator("corner_harris")
    assert op is not None
    with pytest.raises(ValueError, match="corner_harris: blockSize = 0 is outside"):
        op.encode({**op.defaults(), "blockSize": 0})
    with pytest.raises(ValueError, match="corner_harris: ksize must be one of"):
        op.encode({**op.defaults(), "ksize": 7})
    with pytest.raises(ValueError, match="corner_harris: borderType must be one of"):
        op.encode({**op.defaults(), "borderType": cv.BORDER_WRAP})
    with pytest.raises(ValueError, match="corner_harris: takes a uint8 grey image"):
        op.output([Image(16, 8, 1, TYPE_F32, 64, 0)], op.defaults())
    assert op.output([Image(16, 8, 1, TYPE_U8, 16, 0)], op.defaults()) == (
        16, 8, 1, TYPE_F32, 1)
    with pytest.raises(InputError, match="ksize"):
        run_cv("corner_harris", [gray(8, 64)], ksize=1)
