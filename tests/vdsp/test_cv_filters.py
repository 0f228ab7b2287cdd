"""The linear-filter CV operators against OpenCV (cv2)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cv2
import numpy as np
import pytest

from emu.errors import InputError
from emu.vdsp.ops import cv, cv_filters
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
    run_cv,
)


def _padded(src: np.ndarray, nx: int, ny: int, border: int, value: float) -> tuple[
        np.ndarray, tuple[slice, slice]]:
    """`src` with a border of the kernel's reach made by cv2 (so a constant border can have
    any value), and the slices of the original pixels."""
    ax, ay = nx // 2, ny // 2
    padded = cv2.copyMakeBorder(src, ay, ny - 1 - ay, ax, nx - 1 - ax, border,
                                value=[float(round(value))] * 4)
    return padded, (slice(ay, ay + src.shape[0]), slice(ax, ax + src.shape[1]))


def _ref(fn: Callable[[np.ndarray, int], np.ndarray], src: np.ndarray, nx: int, ny: int,
         border: int, value: float = 0.0) -> np.ndarray:
    padded, crop = _padded(src, nx, ny, border, value)
    return np.ascontiguousarray(fn(padded, cv2.BORDER_REFLECT_101)[crop])


def _close(out: np.ndarray, ref: np.ndarray, what: str, exact_with_avx2: bool = True) -> None:
    """The float32 operators: the documented bound, <= 1 LSB on <= 0.1 % of pixels; filter2d
    bit-exact where cv2 runs its AVX2 code (fused multiply-adds, as the DSP's fma_f32)."""
    if exact_with_avx2 and opencv_dispatches("AVX2"):
        assert_same(out, ref, what)
    else:
        assert_within_one(out, ref, what)


# --- box filter ---------------------------------------------------------------------------


def _box_ref(src, kx, ky, normalize, border, value=0.0):
    return _ref(lambda p, b: cv2.boxFilter(p, -1, (kx, ky), normalize=bool(normalize),
                                           borderType=b), src, kx, ky, border, value)


@pytest.mark.parametrize("border", BORDER_MODES)
def test_box_filter_borders_and_sizes(border: int) -> None:
    src = noise(33, 130, seed=border)
    for kx, ky, norm in [(3, 3, 1), (5, 5, 1), (2, 2, 1), (4, 3, 1), (16, 16, 1), (15, 15, 1),
                         (17, 17, 1), (31, 9, 1), (20, 14, 1), (1, 7, 1), (3, 3, 0), (7, 5, 0)]:
        out, _ = run_cv("box_filter", [src], ksizeX=kx, ksizeY=ky, normalize=norm,
                        borderType=border, borderValue=77.0)
        assert_same(out, _box_ref(src, kx, ky, norm, border, 77.0), f"{kx}x{ky} n{norm}")


def test_box_filter_edge_shapes_and_large() -> None:
    for h, w in SIZES:
        src = noise(h, w, seed=h * w)
        out, _ = run_cv("box_filter", [src], ksizeX=5, ksizeY=3)
        assert_same(out, _box_ref(src, 5, 3, 1, cv.BORDER_REFLECT_101), f"{h}x{w}")
    src = gray(*LARGE)
    out, report = run_cv("box_filter", [src])
    assert_same(out, _box_ref(src, 5, 5, 1, cv.BORDER_REFLECT_101), "large")
    assert report["kernel_cycles"] > 0


# --- Gaussian blur ------------------------------------------------------------------------


def _gauss_ref(src, kx, ky, sx, sy, border, value=0.0):
    nx = cv_filters.gaussian_size(kx, sx)
    ny = cv_filters.gaussian_size(ky, sy if sy > 0 else sx)
    return _ref(lambda p, b: cv2.GaussianBlur(p, (kx, ky), sx, sigmaY=sy, borderType=b),
                src, nx, ny, border, value)


def test_gaussian_fixed_taps() -> None:
    assert cv_filters.gaussian_fixed(3, 0) == [64, 128, 64]
    assert cv_filters.gaussian_fixed(5, 0) == [16, 64, 96, 64, 16]
    for n, s in [(7, 2.0), (5, 1.2), (9, 0.8)]:
        taps = cv_filters.gaussian_fixed(n, s)
        assert sum(taps) == 256 and taps == taps[::-1]
    # The float taps are OpenCV's (its soft-double exp and ours agree to an ulp or two), and
    # its error diffusion of them gives our fixed-point taps.
    for n in range(1, 32, 2):
        for sigma in (0.0, 0.3, 0.8, 1.1, 1.7, 2.5, 3.3, 4.9, 7.1, 9.9):
            ref = cv2.getGaussianKernel(n, sigma, ktype=cv2.CV_64F).ravel()
            np.testing.assert_allclose(cv_filters.gaussian_taps(n, sigma), ref, rtol=0,
                                       atol=1e-15)
            diffused, err, total = [0] * n, 0.0, 0
            for i in range(n // 2):
                adjusted = ref[i] * 256.0 + err
                diffused[i] = diffused[n - 1 - i] = round(adjusted)
                err = adjusted - diffused[i]
                total += diffused[i]
            diffused[n // 2] = 256 - 2 * total
            assert cv_filters.gaussian_fixed(n, sigma) == diffused, (n, sigma)


@pytest.mark.parametrize("border", BORDER_MODES)
def test_gaussian_blur_borders_and_parameters(border: int) -> None:
    src = noise(40, 70, seed=10 + border)
    cases = [(3, 3, 0, 0), (5, 5, 0, 0), (7, 7, 0, 0), (0, 0, 0.8, 0), (0, 0, 1.2, 0),
             (0, 0, 2.0, 0), (5, 5, 1.2, 0), (7, 3, 2.0, 0.5), (3, 9, 0, 0), (1, 5, 0, 0)]
    for kx, ky, sx, sy in cases:
        out, _ = run_cv("gaussian_blur", [src], ksizeX=kx, ksizeY=ky, sigmaX=sx, sigmaY=sy,
                        borderType=border, borderValue=200.0)
        assert_same(out, _gauss_ref(src, kx, ky, sx, sy, border, 200.0),
                    f"{kx}x{ky} s{sx},{sy}")


def test_gaussian_blur_edge_shapes_fixed_and_large() -> None:
    for h, w in SIZES:
        src = noise(h, w, seed=h + w)
        out, _ = run_cv("gaussian_blur", [src], ksizeX=5, ksizeY=5)
        assert_same(out, _gauss_ref(src, 5, 5, 0, 0, cv.BORDER_REFLECT_101), f"{h}x{w}")
    src = gray(*LARGE)
    out, _ = run_cv("gaussian_blur", [src], ksizeX=0, ksizeY=0, sigmaX=1.5)
    assert_same(out, cv2.GaussianBlur(src, (0, 0), 1.5, borderType=cv2.BORDER_REFLECT_101),
                "large")


def test_gaussian_5x5_costs_more_than_3x3() -> None:
    src = gray(64, 256)
    _, r3 = run_cv("gaussian_blur", [src], ksizeX=3, ksizeY=3)
    _, r5 = run_cv("gaussian_blur", [src], ksizeX=5, ksizeY=5)
    _, r7 = run_cv("gaussian_blur", [src], ksizeX=7, ksizeY=7)
    assert r3["kernel_cycles"] < r5["kernel_cycles"] < r7["kernel_cycles"]


# --- filter2d and sep_filter2d (float32) --------------------------------------------------


def _kernel25(k: np.ndarray) -> tuple[float, ...]:
    full = np.zeros((5, 5))
    full[: k.shape[0], : k.shape[1]] = k
    return tuple(float(v) for v in full.ravel())


@pytest.mark.parametrize("border", BORDER_MODES)
def test_filter2d(border: int) -> None:
    rng = np.random.default_rng(border)
    src = noise(33, 130, seed=20 + border)
    for n in range(1, 6):
        k = rng.normal(0, 0.35, (n, n)).astype(np.float32)
        k[rng.random((n, n)) < 0.2] = 0
        delta = float(rng.normal(0, 10)) if n % 2 else 0.0
        out, _ = run_cv("filter2d", [src], ksize=n, kernel=_kernel25(k), delta=delta,
                        borderType=border, borderValue=33.0)
        def filter2d(p: np.ndarray, b: int, k: np.ndarray = k, delta: float = delta
                     ) -> np.ndarray:
            return cv2.filter2D(p, -1, k, delta=delta, borderType=b)

        ref = _ref(filter2d, src, n, n, border, 33.0)
        _close(out, ref, f"{n}x{n}")


def test_filter2d_default_edge_shapes_and_large() -> None:
    k = np.array([[0, -1, 0], [-1, 5, -1], [0, -1, 0]], np.float32)
    for h, w in SIZES:
        src = noise(h, w, seed=3 * h + w)
        out, _ = run_cv("filter2d", [src])
        _close(out, cv2.filter2D(src, -1, k, borderType=cv2.BORDER_REFLECT_101), f"{h}x{w}")
    src = gray(*LARGE)
    out, _ = run_cv("filter2d", [src])
    _close(out, cv2.filter2D(src, -1, k, borderType=cv2.BORDER_REFLECT_101), "large")


def _taps7(k: np.ndarray) -> tuple[float, ...]:
    return tuple(float(v) for v in np.concatenate([k, np.zeros(7 - len(k))]))


@pytest.mark.parametrize("border", BORDER_MODES)
def test_sep_filter2d(border: int) -> None:
    rng = np.random.default_rng(40 + border)
    src = noise(33, 130, seed=30 + border)
    kernels = [(np.array([1, 4, 6, 4, 1]) / 16, np.array([1, 4, 6, 4, 1]) / 16),
               (np.array([0.25, 0.5, 0.25]), np.array([-1.0, 0.0, 1.0]))]
    kernels += [(rng.normal(0, 0.4, nx), rng.normal(0, 0.4, ny)) for nx, ny in
                [(7, 7), (2, 5), (1, 3), (6, 1)]]
    for i, (kx, ky) in enumerate(kernels):
        delta = 12.5 if i % 2 else 0.0
        out, _ = run_cv("sep_filter2d", [src], ksizeX=len(kx), ksizeY=len(ky),
                        kernelX=_taps7(kx), kernelY=_taps7(ky), delta=delta, borderType=border,
                        borderValue=250.0)
        def sep(p: np.ndarray, b: int, kx: np.ndarray = kx, ky: np.ndarray = ky,
                delta: float = delta) -> np.ndarray:
            return cv2.sepFilter2D(p, -1, kx, ky, delta=delta, borderType=b)

        ref = _ref(sep, src, len(kx), len(ky), border, 250.0)
        _close(out, ref, f"kernels {i}", exact_with_avx2=False)


def test_sep_filter2d_edge_shapes_and_large() -> None:
    k = np.array([1, 4, 6, 4, 1]) / 16
    for h, w in [*SIZES, LARGE]:
        src = noise(h, w, seed=h) if (h, w) != LARGE else gray(*LARGE)
        out, _ = run_cv("sep_filter2d", [src])
        _close(out, cv2.sepFilter2D(src, -1, k, k, borderType=cv2.BORDER_REFLECT_101),
               f"{h}x{w}", exact_with_avx2=False)


# --- Sobel --------------------------------------------------------------------------------


def test_sobel_kernels_match_opencv() -> None:
    for ksize in (1, 3, 5):
        for dx, dy in [(1, 0), (0, 1), (2, 0), (1, 1), (0, 2), (2, 1)]:
            if ksize > 1 and max(dx, dy) >= ksize:
                continue
            kx, ky = cv2.getDerivKernels(dx, dy, ksize)
            assert cv_filters.sobel_kernel(dx, ksize) == [int(v) for v in kx.ravel()]
            assert cv_filters.sobel_kernel(dy, ksize) == [int(v) for v in ky.ravel()]


def _sobel_exact(src, dx, dy, ksize):
    """The unscaled derivative in float64 (exact: integer kernels)."""
    n = 3 if ksize == 1 else ksize
    return _ref(lambda p, b: cv2.Sobel(p, cv2.CV_64F, dx, dy, ksize=ksize, borderType=b),
                src, n, n, cv.BORDER_REFLECT_101)


def _sobel_ref(src, dx, dy, ksize, border, scale=1.0, delta=0.0):
    n = 3 if ksize == 1 else ksize
    return _ref(lambda p, b: cv2.Sobel(p, cv2.CV_16S, dx, dy, ksize=ksize, scale=scale,
                                       delta=delta, borderType=b), src, n, n, border)


@pytest.mark.parametrize("border", BORDER_MODES)
def test_sobel_exact(border: int) -> None:
    src = noise(33, 130, seed=50 + border)
    for dx, dy, ksize in [(1, 0, 3), (0, 1, 3), (1, 1, 3), (2, 0, 3), (0, 2, 5), (1, 0, 5),
                          (2, 1, 5), (1, 0, 1), (0, 2, 1), (1, 1, 1)]:
        out, _ = run_cv("sobel", [src], dx=dx, dy=dy, ksize=ksize, borderType=border)
        assert_same(out, _sobel_ref(src, dx, dy, ksize, border), f"{dx},{dy} k{ksize}")


def test_sobel_scale_delta_edge_shapes_and_large() -> None:
    src = noise(33, 130, seed=7)
    out, _ = run_cv("sobel", [src], dx=1, dy=0, ksize=3, scale=2.0, delta=-5.0)
    assert_same(out, _sobel_ref(src, 1, 0, 3, cv.BORDER_REFLECT_101, 2.0, -5.0), "integral")
    for dx, dy, ksize, scale, delta in [(1, 1, 5, 0.37, 3.7), (2, 0, 5, 1.7, 0.2),
                                        (0, 1, 3, 0.3, 0.5)]:
        out, _ = run_cv("sobel", [src], dx=dx, dy=dy, ksize=ksize, scale=scale, delta=delta)
        ref = _sobel_ref(src, dx, dy, ksize, cv.BORDER_REFLECT_101, scale, delta)
        # The documented bound: 1 LSB, and only where the exact value is a tie (x.5).
        exact = _sobel_exact(src, dx, dy, ksize) * scale + delta
        diff = np.abs(out.astype(np.int64) - ref)
        assert diff.max() <= 1
        frac = np.abs(exact[diff > 0] - np.floor(exact[diff > 0]) - 0.5)
        assert np.all(frac < 1e-6), (dx, dy, ksize)
    for h, w in SIZES:
        src = noise(h, w, seed=h * 7 + w)
        out, _ = run_cv("sobel", [src])
        assert_same(out, _sobel_ref(src, 1, 0, 3, cv.BORDER_REFLECT_101), f"{h}x{w}")
    src = gray(*LARGE)
    out, _ = run_cv("sobel", [src], dx=0, dy=1)
    assert_same(out, cv2.Sobel(src, cv2.CV_16S, 0, 1, ksize=3), "large")


def test_three_channels() -> None:
    src = noise(20, 45, seed=5, channels=3)
    refl = cv.BORDER_REFLECT_101
    out, _ = run_cv("box_filter", [src], ksizeX=3, ksizeY=5, borderType=cv.BORDER_CONSTANT,
                    borderValue=90.0)
    assert_same(out, _box_ref(src, 3, 5, 1, cv.BORDER_CONSTANT, 90.0), "box")
    out, _ = run_cv("gaussian_blur", [src], ksizeX=5, ksizeY=3, sigmaX=1.2)
    assert_same(out, _gauss_ref(src, 5, 3, 1.2, 0, refl), "gaussian")
    out, _ = run_cv("filter2d", [src])
    k = np.array([[0, -1, 0], [-1, 5, -1], [0, -1, 0]], np.float32)
    _close(out, cv2.filter2D(src, -1, k), "filter2d")
    out, _ = run_cv("sep_filter2d", [src], ksizeX=3, kernelX=_taps7(np.array([-1.0, 0, 1])))
    kb = np.array([1, 4, 6, 4, 1]) / 16
    _close(out, cv2.sepFilter2D(src, -1, np.array([-1.0, 0, 1]), kb), "sep")


def test_strips_of_a_wide_image_in_a_small_tcm() -> None:
    # 64 KiB banks cannot hold a band of 8000-pixel rows: the plan falls back to strips.
    src = noise(10, 8000, seed=11)
    small = ("vdsp.tcm.bank_bytes=64KiB",)
    out, report = run_cv("gaussian_blur", [src], overrides=small, ksizeX=7, ksizeY=7)
    assert_same(out, cv2.GaussianBlur(src, (7, 7), 0), "gaussian strips")
    out, _ = run_cv("sobel", [src], overrides=small, dx=1, dy=1, ksize=5)
    assert_same(out, cv2.Sobel(src, cv2.CV_16S, 1, 1, ksize=5), "sobel strips")
    out, _ = run_cv("filter2d", [src], overrides=small)
    k = np.array([[0, -1, 0], [-1, 5, -1], [0, -1, 0]], np.float32)
    _close(out, cv2.filter2D(src, -1, k), "filter2d strips")
    assert report["kernel_calls"] > src.shape[0]  # more tiles than rows: strips


# --- refusals -----------------------------------------------------------------------------


def test_bad_parameters() -> None:
    grey = [Image(64, 8, 1, TYPE_U8, 64, 0)]
    rgba = [Image(64, 8, 4, TYPE_U8, 256, 0)]
    cases: list[tuple[str, list[Image], dict[str, Any], str | None]] = [
        ("gaussian_blur", grey, {"ksizeX": 4}, "ksizeX must be odd"),
        ("gaussian_blur", grey, {"ksizeX": 0, "sigmaX": 0.0}, "sigmaX must be > 0"),
        ("gaussian_blur", grey, {"ksizeX": 0, "sigmaX": 9.0}, "more than 31"),
        ("sobel", grey, {"dx": 0, "dy": 0}, r"dx \+ dy must be at least 1"),
        ("sobel", grey, {"dx": 2, "ksize": 1, "dy": 0}, None),
        ("box_filter", rgba, {}, "uint8 images of 1 or 3 channels"),
        ("sobel", [Image(64, 8, 3, TYPE_U8, 192, 0)], {}, "sobel: takes uint8 grey"),
    ]
    for name, inputs, values, message in cases:
        op = cv.cv_operator(name)
        assert op is not None
        merged = {**op.defaults(), **values}
        if message is None:
            op.output(inputs, merged)
            continue
        with pytest.raises(ValueError, match=message):
            op.output(inputs, merged)
    op = cv.cv_operator("box_filter")
    assert op is not None
    with pytest.raises(ValueError, match="ksizeX"):
        op.params[0].check(32, "box_filter")
    with pytest.raises(InputError, match="ksizeX must be odd"):
        run_cv("gaussian_blur", [noise(8, 8)], ksizeX=6)
    with pytest.raises(InputError, match="borderType"):
        run_cv("box_filter", [noise(8, 8)], borderType=3)
