"""bilateral_filter on the DSP against cv2.bilateralFilter.

Bit-identical to OpenCV's own implementation (cv2 with IPP off, the path cv2 takes anyway
for radius >= 3 or the reflect border); within 1 of cv2's default where it hands the filter
to IPP (radius 1-2 with constant, replicate or reflect101 borders)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import cv2
import numpy as np
import pytest

from emu.errors import InputError
from emu.vdsp.ops import cv, cv_bilateral
from emu.vdsp.ops.image_args import TYPE_U8, Image
from tests.vdsp.cv_support import (
    BORDER_MODES,
    LARGE,
    SIZES,
    assert_same,
    assert_within_one,
    gray,
    noise,
    opencv_dispatches,
    rgb,
    run_cv,
    run_preempted,
)


@contextmanager
def opencv_own() -> Iterator[None]:
    """cv2 running OpenCV's own bilateral filter (IPP off)."""
    was = cv2.ipp.useIPP()
    cv2.ipp.setUseIPP(False)
    try:
        yield
    finally:
        cv2.ipp.setUseIPP(was)


def reference(src: np.ndarray, d: int, sigma_color: float, sigma_space: float,
              border: int = cv.BORDER_REFLECT_101) -> np.ndarray:
    with opencv_own():
        return cv2.bilateralFilter(src, d, sigma_color, sigma_space, borderType=border)


def run(src: np.ndarray, d: int, sigma_color: float, sigma_space: float,
        border: int = cv.BORDER_REFLECT_101) -> np.ndarray:
    out, _ = run_cv("bilateral_filter", [src], d=d, sigmaColor=sigma_color,
                    sigmaSpace=sigma_space, borderType=border)
    return out


def _matches(out: np.ndarray, ref: np.ndarray, what: str) -> None:
    """Bit-exact where cv2 runs its AVX-512 code (the 64-pixel blocks the kernel follows);
    on other hosts OpenCV sums in another order: the bound, 1 LSB on <= 0.1 % of pixels."""
    if opencv_dispatches("AVX512-SKX"):
        assert_same(out, ref, what)
    else:
        assert_within_one(out, ref, what)


def test_large_standard_image() -> None:
    # Radius 2: the 13-tap order of OpenCV's vector loop, blocks and tail (640 = 10 x 64).
    src = gray(*LARGE)
    out = run(src, 5, 50.0, 50.0)
    _matches(out, reference(src, 5, 50.0, 50.0), "d=5")
    # cv2's default hands this case to IPP: within 1 everywhere.
    ipp = cv2.bilateralFilter(src, 5, 50.0, 50.0)
    assert np.abs(out.astype(int) - ipp).max() <= 1


def test_defaults_on_the_standard_image() -> None:
    op = cv.cv_operator("bilateral_filter")
    assert op is not None
    v = op.defaults()
    src = gray(96, 200)
    out, report = run_cv("bilateral_filter", [src])
    ref = cv2.bilateralFilter(src, v["d"], v["sigmaColor"], v["sigmaSpace"])  # IPP on
    _matches(out, ref, "defaults")
    assert report["cycles_per_pixel"] > 0


@pytest.mark.parametrize("d,sigma_color,sigma_space", [
    (3, 20.0, 10.0), (5, 10.0, 2.0), (7, 30.0, 3.0), (0, 20.0, 2.9), (9, 5.0, 5.0),
    (5, 150.0, 150.0), (1, 30.0, 30.0), (0, 40.0, 0.5), (11, 60.0, 4.0), (4, 1.5, 80.0)])
def test_parameter_sweep_on_noise(d: int, sigma_color: float, sigma_space: float) -> None:
    src = noise(24, 150, seed=d + int(sigma_color))
    out = run(src, d, sigma_color, sigma_space)
    _matches(out, reference(src, d, sigma_color, sigma_space),
                f"d={d} sigmas={sigma_color},{sigma_space}")


@pytest.mark.parametrize("border", BORDER_MODES)
@pytest.mark.parametrize("d", [3, 5, 7])
def test_border_modes(border: int, d: int) -> None:
    src = noise(21, 70, seed=border * 10 + d)
    out = run(src, d, 40.0, 5.0, border)
    _matches(out, reference(src, d, 40.0, 5.0, border), f"border {border} d={d}")


@pytest.mark.parametrize("shape", SIZES)
def test_edge_sizes(shape: tuple[int, int]) -> None:
    src = noise(*shape, seed=shape[0] * 100 + shape[1])
    for d, border in ((5, cv.BORDER_REFLECT_101), (3, cv.BORDER_CONSTANT)):
        out = run(src, d, 30.0, 10.0, border)
        _matches(out, reference(src, d, 30.0, 10.0, border), f"{shape} d={d}")


def test_standard_image_crop_with_ipp_bound() -> None:
    # Radius 1 with cv2's defaults (IPP): within 1; without IPP: identical.
    src = gray(64, 130)
    out = run(src, 3, 25.0, 25.0, cv.BORDER_REPLICATE)
    _matches(out, reference(src, 3, 25.0, 25.0, cv.BORDER_REPLICATE), "d=3")
    ipp = cv2.bilateralFilter(src, 3, 25.0, 25.0, borderType=cv.BORDER_REPLICATE)
    assert np.abs(out.astype(int) - ipp).max() <= 1


@pytest.mark.parametrize("d,border", [(5, cv.BORDER_REFLECT_101), (3, cv.BORDER_CONSTANT),
                                      (7, cv.BORDER_REFLECT), (0, cv.BORDER_REPLICATE)])
def test_three_channels(d: int, border: int) -> None:
    src = noise(13, 140, seed=d, channels=3)
    out = run(src, d, 35.0, 2.5, border)
    _matches(out, reference(src, d, 35.0, 2.5, border), f"3 channels d={d}")


def test_three_channels_standard_image() -> None:
    src = rgb(40, 130)
    out = run(src, 5, 50.0, 50.0)
    _matches(out, reference(src, 5, 50.0, 50.0), "rgb d=5")
    ipp = cv2.bilateralFilter(src, 5, 50.0, 50.0)
    assert np.abs(out.astype(int) - ipp).max() <= 1


@pytest.mark.parametrize("shape", SIZES)
def test_three_channel_edge_sizes(shape: tuple[int, int]) -> None:
    src = noise(*shape, seed=shape[0] * 100 + shape[1] + 1, channels=3)
    out = run(src, 5, 30.0, 10.0)
    _matches(out, reference(src, 5, 30.0, 10.0), f"{shape}")


def test_wide_image_in_strips() -> None:
    # A row of 30001 pixels with its halo does not fit a TCM buffer: the tiles are strips,
    # and the block/tail split of OpenCV's loop still follows image columns.
    src = noise(4, 30001, seed=4)
    out = run(src, 5, 50.0, 5.0)
    _matches(out, reference(src, 5, 50.0, 5.0), "strips")


def test_zero_sigma_copies() -> None:
    src = noise(9, 65, seed=3)
    out = run(src, 5, 0.0, 10.0)
    assert_same(out, src, "sigmaColor 0")
    assert_same(out, cv2.bilateralFilter(src, 5, 0.0, 10.0), "cv2 copies too")


def test_bad_parameters() -> None:
    op = cv.cv_operator("bilateral_filter")
    assert op is not None
    grey = Image(64, 8, 1, TYPE_U8, 64, 0)
    values = op.defaults()
    with pytest.raises(ValueError, match="bilateral_filter: radius must be at most 16"):
        op.output([grey], {**values, "d": 0, "sigmaSpace": 20.0})
    with pytest.raises(ValueError, match="bilateral_filter: takes uint8 images of 1 or 3"):
        op.output([Image(64, 8, 4, TYPE_U8, 256, 0)], values)
    d, border = (next(p for p in op.params if p.name == n) for n in ("d", "borderType"))
    with pytest.raises(ValueError, match="bilateral_filter: d = 40 is outside"):
        d.check(40, "bilateral_filter")
    with pytest.raises(ValueError, match="bilateral_filter: borderType must be one of"):
        border.check(cv.BORDER_WRAP, "bilateral_filter")
    assert op.output([grey], values) == (64, 8, 1, TYPE_U8, 1)
    assert op.output([Image(64, 8, 3, TYPE_U8, 192, 0)], values) == (64, 8, 3, TYPE_U8, 1)
    assert cv_bilateral.radius_of({"d": 0, "sigmaSpace": 1.0}) == 2  # round(1.5): to even


def test_errors_reach_the_caller() -> None:
    with pytest.raises(InputError, match="radius must be at most 16"):
        run_cv("bilateral_filter", [noise(8, 64)], d=0, sigmaSpace=30.0)
    with pytest.raises(InputError, match="borderType must be one of"):
        run_cv("bilateral_filter", [noise(8, 64)], borderType=cv.BORDER_WRAP)
    with pytest.raises(InputError, match="sigmaColor"):
        run_cv("bilateral_filter", [noise(8, 64)], sigmaColor=-1.0)


def test_a_preemptor_that_overwrites_the_tcm_leaves_the_output_intact() -> None:
    src = gray(120, 200)
    want = reference(src, 5, 75.0, 75.0)
    out, end_ps, _ = run_preempted("bilateral_filter", src, None, d=5)
    assert_same(out, want, "not preempted")
    preempted = 0
    for at_ps in np.linspace(0, end_ps, 6, dtype=np.int64).tolist()[1:-1]:
        out, _, preemptions = run_preempted("bilateral_filter", src, at_ps, d=5)
        assert_same(out, want, f"preempted at {at_ps} ps")
        preempted += preemptions
    assert preempted >= 3
