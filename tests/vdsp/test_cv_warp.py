"""warp_affine, warp_perspective and remap on the DSP against OpenCV (cv2)."""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest

from emu.chip import Soc
from emu.errors import InputError
from emu.soc.config import load_config
from emu.vdsp import isa, timing
from emu.vdsp.ops import cv, cv_warp
from emu.vdsp.ops import cv_warp_kernels as kern
from emu.vdsp.ops.image_args import TYPE_F32, TYPE_U8, Image

from .cv_support import (
    LARGE,
    SIZES,
    assert_same,
    assert_within_one,
    gray,
    noise,
    opencv_dispatches,
    rgb,
    run_cv,
)

INTERPOLATIONS = [0, 1]
BORDERS = [cv.BORDER_CONSTANT, cv.BORDER_REPLICATE]
def assert_close(out: np.ndarray, ref: np.ndarray, what: str) -> None:
    """Bit-exact where cv2 runs its AVX2 code (16-pixel blocks, fused steps: what the kernel
    follows); on other hosts the documented bound, 1 LSB on at most 0.1 % of the pixels."""
    if opencv_dispatches("AVX2"):
        assert_same(out, ref, what)
    else:
        assert_within_one(out, ref, what)


def rotation(angle: float, scale: float, cx: float, cy: float) -> list[float]:
    a, b = scale * math.cos(math.radians(angle)), scale * math.sin(math.radians(angle))
    return [a, b, (1 - a) * cx - b * cy, -b, a, b * cx + (1 - a) * cy]


def affine_ref(src: np.ndarray, m: list[float], size: tuple[int, int], interp: int,
               border: int, value: float = 0.0, inverse: bool = False) -> np.ndarray:
    flags = interp | (cv2.WARP_INVERSE_MAP if inverse else 0)
    return cv2.warpAffine(src, np.array(m, np.float64).reshape(2, 3), size, flags=flags,
                          borderMode=border, borderValue=value)


def perspective_ref(src: np.ndarray, m: list[float], size: tuple[int, int], interp: int,
                    border: int, value: float = 0.0, inverse: bool = False) -> np.ndarray:
    flags = interp | (cv2.WARP_INVERSE_MAP if inverse else 0)
    return cv2.warpPerspective(src, np.array(m, np.float64).reshape(3, 3), size, flags=flags,
                               borderMode=border, borderValue=value)


# --- the standard picture, defaults -----------------------------------------------------------


def test_defaults_on_the_large_standard_picture() -> None:
    """Every operator's default run on the 640x480 picture (larger than the TCM), exact."""
    src = gray(*LARGE)
    size = (LARGE[1], LARGE[0])
    out, report = run_cv("warp_affine", [src])
    m = list(cv_warp.WARP_AFFINE.defaults()["M"])
    assert_same(out, affine_ref(src, m, size, 1, cv.BORDER_CONSTANT), "warp_affine")
    assert report["kernel_calls"] > 2
    out, _ = run_cv("warp_perspective", [src], interpolation=0, borderMode=1)
    m = list(cv_warp.WARP_PERSPECTIVE.defaults()["M"])
    assert_same(out, perspective_ref(src, m, size, 0, 1), "warp_perspective")
    inputs = cv_warp.REMAP.prepare(cv.luma(np.stack([src] * 3, axis=-1)))
    out, _ = run_cv("remap", [src, *inputs[1:]])
    assert_same(out, cv2.remap(src, inputs[1], inputs[2], cv2.INTER_LINEAR), "remap")


# --- warp_affine ------------------------------------------------------------------------------

AFFINES = [
    rotation(30, 1.0, 40, 30),      # rotation about the middle
    rotation(-135, 1.7, 10, 50),    # enlarging, upside down
    rotation(5, 0.25, 0, 0),        # strong minification: pieces of the source
    [1.0, 0.3, -5.5, 0.1, 0.8, 3.25],  # shear
    [2.0, 0.0, 0.0, 0.0, 2.0, 0.0],    # exact 2x: half-pixel ties
    [1.0, 0.0, 500.0, 0.0, 1.0, 0.0],  # everything outside
]


@pytest.mark.parametrize("interp", INTERPOLATIONS)
@pytest.mark.parametrize("border", BORDERS)
def test_warp_affine_matrices(interp: int, border: int) -> None:
    src = gray(61, 83)
    for k, m in enumerate(AFFINES):
        out, _ = run_cv("warp_affine", [src], M=m, interpolation=interp, borderMode=border,
                        borderValue=173.6, dsizeWidth=77, dsizeHeight=58)
        ref = affine_ref(src, m, (77, 58), interp, border, 173.6)
        assert_same(out, ref, f"warp_affine {k} interp {interp} border {border}")


def test_warp_affine_inverse_map_and_noise() -> None:
    src = noise(70, 90, seed=3)
    m = [0.8, -0.2, 12.3, 0.25, 0.9, -4.7]
    for interp in INTERPOLATIONS:
        out, _ = run_cv("warp_affine", [src], M=m, inverseMap=1, interpolation=interp,
                        borderMode=cv.BORDER_REPLICATE)
        ref = affine_ref(src, m, (90, 70), interp, cv.BORDER_REPLICATE, inverse=True)
        (assert_close if interp else assert_same)(out, ref, f"inverse map {interp}")


@pytest.mark.parametrize("shape", SIZES)
def test_warp_affine_edge_sizes(shape: tuple[int, int]) -> None:
    h, w = shape
    src = noise(h, w, seed=h * 100 + w)
    m = rotation(17, 0.9, w / 2, h / 2)
    for interp in INTERPOLATIONS:
        for border in BORDERS:
            out, _ = run_cv("warp_affine", [src], M=m, interpolation=interp,
                            borderMode=border, borderValue=9.0)
            ref = affine_ref(src, m, (w, h), interp, border, 9.0)
            assert_close(out, ref, f"{shape} interp {interp} border {border}")


def test_warp_affine_minifying_a_large_image_in_pieces() -> None:
    """A 10x reduction of the 640x480 picture: every output tile reaches more source rows
    than the gather window holds, so the source is visited in pieces."""
    src = gray(*LARGE)
    m = [0.1, 0.02, 3.0, -0.01, 0.1, 5.0]
    for interp in INTERPOLATIONS:
        out, report = run_cv("warp_affine", [src], M=m, interpolation=interp,
                             dsizeWidth=128, dsizeHeight=96)
        assert_same(out, affine_ref(src, m, (128, 96), interp, 0), f"minify {interp}")
        assert report["kernel_calls"] > 4


def test_structured_magnification() -> None:
    """Magnifying noise by decimal factors puts many exact values next to .5 ties, where
    only the fused steps give OpenCV's rounding."""
    src = noise(24, 30, seed=5)
    for sx, sy in ((0.25, 0.1), (0.1, 0.1), (1.0, 0.05)):
        m = [sx, 0.0, 0.0, 0.0, sy, 0.0]
        out, _ = run_cv("warp_affine", [src], M=m, inverseMap=1, borderMode=1,
                        dsizeWidth=200, dsizeHeight=200)
        ref = affine_ref(src, m, (200, 200), 1, 1, inverse=True)
        assert_close(out, ref, f"scales {sx}, {sy}")


# --- warp_perspective -------------------------------------------------------------------------

PERSPECTIVES = [
    [0.9, 0.08, 20.0, -0.03, 0.95, 30.0, -1e-4, 5e-5, 1.0],
    [1.2, -0.1, -8.0, 0.05, 1.1, -3.0, 2e-3, -1e-3, 1.0],
    [0.5, 0.0, 3.0, 0.0, 0.5, 2.0, 0.0, 0.0, 1.0],
    [1.0, 0.2, 0.0, 0.0, 1.0, 0.0, 0.004, 0.006, 0.8],
]


@pytest.mark.parametrize("interp", INTERPOLATIONS)
@pytest.mark.parametrize("border", BORDERS)
def test_warp_perspective_matrices(interp: int, border: int) -> None:
    src = gray(53, 71)
    for k, m in enumerate(PERSPECTIVES):
        for inverse in (0, 1):
            out, _ = run_cv("warp_perspective", [src], M=m, interpolation=interp,
                            borderMode=border, borderValue=250.0, inverseMap=inverse)
            ref = perspective_ref(src, m, (71, 53), interp, border, 250.0, bool(inverse))
            assert_same(out, ref, f"warp_perspective {k} inverse {inverse}")


@pytest.mark.parametrize("shape", SIZES)
def test_warp_perspective_edge_sizes(shape: tuple[int, int]) -> None:
    h, w = shape
    src = noise(h, w, seed=7 + h + w)
    m = PERSPECTIVES[1]
    for interp in INTERPOLATIONS:
        out, _ = run_cv("warp_perspective", [src], M=m, interpolation=interp,
                        borderMode=cv.BORDER_REPLICATE)
        ref = perspective_ref(src, m, (w, h), interp, cv.BORDER_REPLICATE)
        assert_close(out, ref, f"{shape} interp {interp}")


def test_noise_bound() -> None:
    """Random pixels: the float interpolation's bound, measured on a few matrices."""
    src = noise(120, 160, seed=11)
    for m in (AFFINES[0], AFFINES[1], AFFINES[3]):
        out, _ = run_cv("warp_affine", [src], M=m)
        assert_close(out, affine_ref(src, m, (160, 120), 1, 0), f"affine {m}")
    for m in PERSPECTIVES[:2]:
        out, _ = run_cv("warp_perspective", [src], M=m)
        assert_close(out, perspective_ref(src, m, (160, 120), 1, 0), f"perspective {m}")


# --- remap ------------------------------------------------------------------------------------


def test_remap_lens_and_edges() -> None:
    src = gray(45, 67)
    map_x, map_y = cv_warp.lens_maps(50, 60, k=0.4)
    map_x[3, 5] = -1e9  # far outside
    map_y[7, 9] = np.inf
    map_x[10, :20] = np.arange(20) + 0.5  # exact half-pixel ties
    for interp in INTERPOLATIONS:
        for border in BORDERS:
            out, _ = run_cv("remap", [src, map_x, map_y], interpolation=interp,
                            borderMode=border, borderValue=31.0)
            ref = cv2.remap(src, map_x, map_y, interp, borderMode=border, borderValue=31)
            assert_same(out, ref, f"remap interp {interp} border {border}")


def _origins_ref(v: np.ndarray, linear: bool) -> np.ndarray:
    """Tap origins as the ISA's conversions give them: NaN 0, saturated to int32."""
    o = np.floor(v.astype(np.float64)) if linear else np.rint(v.astype(np.float64))
    return np.clip(np.nan_to_num(o, nan=0.0), -2**31, 2**31 - 1).astype(np.int64)


@pytest.mark.parametrize("linear", [False, True])
def test_the_map_scan_kernel_folds_origins_into_bounds(linear: bool) -> None:
    rng = np.random.default_rng(7)
    vectors = 5
    mx = rng.uniform(-40, 900, vectors * 16).astype(np.float32)
    my = rng.uniform(-3, 70, vectors * 16).astype(np.float32)
    mx[3], mx[20], my[33], my[40] = np.nan, np.inf, -1e12, 2.5  # NaN, saturating, a tie
    ctx = isa.make_context(262144, 131072, 8, 4)
    ctx.tcm[:mx.nbytes] = mx.view(np.uint8)
    ctx.tcm[mx.nbytes: 2 * mx.nbytes] = my.view(np.uint8)
    bounds = np.empty((4, 16), np.int32)
    bounds[0::2], bounds[1::2] = 2**31 - 1, -2**31
    kern.map_bounds(ctx, 0, vectors, linear, bounds)
    ox, oy = (_origins_ref(m, linear).reshape(vectors, 16) for m in (mx, my))
    for row, expect in zip(bounds, (ox.min(0), ox.max(0), oy.min(0), oy.max(0)), strict=True):
        assert row.tolist() == expect.tolist()
    c = ctx.counters  # per vector: 2 loads, 2 conversions of 2 ops each, 4 min/max
    assert (c[isa.C_LOAD], c[isa.C_CVT], c[isa.C_ALU]) == (2 * vectors, 4 * vectors,
                                                             4 * vectors)


@pytest.mark.parametrize("linear", [False, True])
def test_the_map_scan_costs_its_ops_per_vector_in_pieces_with_no_call(linear: bool) -> None:
    core = Soc(load_config()).build().vdsp.hw[0]
    maps = cv_warp.lens_maps(37, 21, k=0.2)  # 777 pixels: 49 vectors, the last one part
    free = core.tcm.free_bytes(0)
    block = core.tcm.alloc(0, free - 1024, "most of bank 0")
    try:  # 1 KiB left: pieces of 8 vectors
        cycles = cv_warp._map_scan_cycles(core, maps, linear, "remap")
    finally:
        core.tcm.free(block)
    vectors = -(-37 * 21 // 16)
    assert cycles == timing.bundle_cycles(2 * vectors, 0, 8 * vectors, core.cfg)
    assert core.tcm.free_bytes(0) == free  # the pieces' buffer is given back


def test_non_finite_coordinates() -> None:
    """NaN and infinite coordinates (maps, a perspective through w = 0) as on x86."""
    src = gray(40, 50)
    rng = np.random.default_rng(0)
    map_x = np.full((30, 70), np.nan, np.float32)
    map_x[:, ::3] = np.inf
    map_x[:, 1::5] = -np.inf
    map_x[:, 2::7] = 1e10
    map_x[:5] = 10.0  # rows with a few non-finite coordinates among finite ones
    map_x[:5, 3::17] = np.nan
    map_y = rng.uniform(-5, 45, (30, 70)).astype(np.float32)
    m = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, -0.02, 0.01, 0.5]
    for interp in INTERPOLATIONS:
        for border in BORDERS:
            for mx, my in ((map_x, map_y), (map_y, map_x)):
                out, _ = run_cv("remap", [src, mx, my], interpolation=interp,
                                borderMode=border, borderValue=40.0)
                ref = cv2.remap(src, mx, my, interp, borderMode=border, borderValue=40)
                assert_same(out, ref, f"remap interp {interp} border {border}")
            out, _ = run_cv("warp_perspective", [src], M=m, inverseMap=1, interpolation=interp,
                            borderMode=border, borderValue=40.0)
            ref = perspective_ref(src, m, (50, 40), interp, border, 40.0, inverse=True)
            assert_same(out, ref, f"perspective w = 0, interp {interp} border {border}")


@pytest.mark.parametrize("shape", SIZES)
def test_remap_edge_sizes(shape: tuple[int, int]) -> None:
    h, w = shape
    rng = np.random.default_rng(h * w)
    src = noise(h + 2, w + 1, seed=w)
    map_x = rng.uniform(-2, w + 2, (h, w)).astype(np.float32)
    map_y = rng.uniform(-2, h + 3, (h, w)).astype(np.float32)
    for interp in INTERPOLATIONS:
        for border in BORDERS:
            out, _ = run_cv("remap", [src, map_x, map_y], interpolation=interp,
                            borderMode=border, borderValue=128.0)
            ref = cv2.remap(src, map_x, map_y, interp, borderMode=border, borderValue=128)
            assert_close(out, ref, f"{shape} interp {interp} border {border}")


def test_remap_random_maps_on_a_large_image_cost_more_gathers() -> None:
    """Random maps over a 640x480 source need several source pieces per tile; their
    scattered gathers hit the sub-banks harder than an identity map's gathers."""
    h, w = LARGE
    src = noise(h, w, seed=1)
    rng = np.random.default_rng(2)
    map_x = rng.uniform(0, w - 1, (96, 128)).astype(np.float32)
    map_y = rng.uniform(0, h - 1, (96, 128)).astype(np.float32)
    out, scattered = run_cv("remap", [src, map_x, map_y], interpolation=0)
    assert_same(out, cv2.remap(src, map_x, map_y, cv2.INTER_NEAREST), "random nearest")
    out, _ = run_cv("remap", [src, map_x, map_y], interpolation=1, borderMode=1)
    assert_close(out, cv2.remap(src, map_x, map_y, cv2.INTER_LINEAR,
                                borderMode=cv2.BORDER_REPLICATE), "random linear")
    ident_y, ident_x = np.mgrid[0:96, 0:128].astype(np.float32)
    out, identity = run_cv("remap", [src, ident_x, ident_y], interpolation=0)
    assert_same(out, cv2.remap(src, ident_x, ident_y, cv2.INTER_NEAREST), "identity")
    assert scattered["gather_cycles"] > 2 * identity["gather_cycles"]
    assert scattered["kernel_cycles"] > identity["kernel_cycles"]


# --- three channels ---------------------------------------------------------------------------


@pytest.mark.parametrize("interp", INTERPOLATIONS)
@pytest.mark.parametrize("border", BORDERS)
def test_three_channels(interp: int, border: int) -> None:
    """RGB and 3-channel noise through all three operators (channel bytes gathered, results
    scattered into interleaved rows)."""
    a = [0.9, 0.2, 3.5, -0.15, 1.1, -2.25]
    p = [*a, 1e-3, -2e-3, 1.0]
    value = (66.0, 66.0, 66.0)
    for src in (rgb(50, 70), noise(37, 65, seed=4, channels=3)):
        h, w = src.shape[:2]
        map_x, map_y = cv_warp.lens_maps(h, w, 0.3)
        out, _ = run_cv("warp_affine", [src], M=a, interpolation=interp, borderMode=border,
                        borderValue=66.0)
        ref = cv2.warpAffine(src, np.array(a).reshape(2, 3), (w, h), flags=interp,
                             borderMode=border, borderValue=value)
        assert_close(out, ref, f"warp_affine {src.shape}")
        out, _ = run_cv("warp_perspective", [src], M=p, interpolation=interp,
                        borderMode=border, borderValue=66.0)
        ref = cv2.warpPerspective(src, np.array(p).reshape(3, 3), (w, h), flags=interp,
                                  borderMode=border, borderValue=value)
        assert_close(out, ref, f"warp_perspective {src.shape}")
        out, _ = run_cv("remap", [src, map_x, map_y], interpolation=interp, borderMode=border,
                        borderValue=66.0)
        ref = cv2.remap(src, map_x, map_y, interp, borderMode=border, borderValue=value)
        assert_close(out, ref, f"remap {src.shape}")


def test_three_channels_random_maps_in_pieces() -> None:
    h, w = LARGE
    src = noise(h, w, seed=1, channels=3)
    rng = np.random.default_rng(2)
    map_x = rng.uniform(-1, w, (40, 70)).astype(np.float32)
    map_y = rng.uniform(-1, h, (40, 70)).astype(np.float32)
    for interp in INTERPOLATIONS:
        out, report = run_cv("remap", [src, map_x, map_y], interpolation=interp,
                             borderValue=5.0)
        ref = cv2.remap(src, map_x, map_y, interp, borderValue=(5, 5, 5))
        assert_close(out, ref, f"random maps, interp {interp}")
        assert report["kernel_calls"] > 4


# --- refusals ---------------------------------------------------------------------------------


def _grey(w: int = 8, h: int = 8) -> Image:
    return Image(w, h, 1, TYPE_U8, w, 0)


def test_bad_parameters_are_refused() -> None:
    affine = cv.cv_operator("warp_affine")
    perspective = cv.cv_operator("warp_perspective")
    remap = cv.cv_operator("remap")
    assert affine is not None and perspective is not None and remap is not None
    values = affine.defaults()
    with pytest.raises(ValueError, match="warp_affine: M is singular"):
        affine.output([_grey()], {**values, "M": (1.0, 2.0, 0.0, 2.0, 4.0, 0.0)})
    with pytest.raises(ValueError, match="warp_affine: takes a uint8 grey or 3-channel"):
        affine.output([Image(8, 8, 4, TYPE_U8, 32, 0)], values)
    with pytest.raises(ValueError, match="warp_perspective: M is singular"):
        perspective.output([_grey()], {**perspective.defaults(), "M": (0.0,) * 9})
    good = Image(8, 8, 1, TYPE_F32, 32, 0)
    with pytest.raises(ValueError, match="remap: mapX must be a float32"):
        remap.output([_grey(), _grey(), good], remap.defaults())
    with pytest.raises(ValueError, match=r"remap: mapX .* must have the same size"):
        remap.output([_grey(), good, Image(9, 8, 1, TYPE_F32, 36, 0)], remap.defaults())
    param = {p.name: p for p in affine.params}["interpolation"]
    with pytest.raises(ValueError, match="warp_affine: interpolation must be one of"):
        param.check(3, "warp_affine")


def test_bad_values_fail_through_the_dsp_call() -> None:
    with pytest.raises(InputError, match="borderMode"):
        run_cv("warp_affine", [gray(8, 8)], borderMode=2)
    with pytest.raises(InputError, match="M is singular"):
        run_cv("warp_perspective", [gray(8, 8)], M=(1.0, 0.0, 0.0) * 3)
