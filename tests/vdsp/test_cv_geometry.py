"""The geometric CV operators against OpenCV: bit-identical outputs."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from emu.errors import InputError
from emu.vdsp.ops import cv
from emu.vdsp.ops.image_args import TYPE_U8, Image
from tests.vdsp.cv_support import LARGE, SIZES, assert_same, gray, noise, rgb, run_cv


def _grey(shape: tuple[int, int], seed: int = 0) -> np.ndarray:
    return noise(*shape, seed=seed)


# --- flip, transpose, rotate -----------------------------------------------------------------


@pytest.mark.parametrize("code", [-1, 0, 1])
def test_flip_sizes(code: int) -> None:
    for k, shape in enumerate(SIZES):
        img = _grey(shape, k)
        out, _ = run_cv("flip", [img], flipCode=code)
        assert_same(out, cv2.flip(img, code), f"flip {code} {shape}")


def test_flip_rgb_and_large() -> None:
    for code in (-1, 0, 1):
        img = noise(9, 65, seed=code + 5, channels=3)
        out, _ = run_cv("flip", [img], flipCode=code)
        assert_same(out, cv2.flip(img, code), f"flip rgb {code}")
    img = rgb(*LARGE)
    out, report = run_cv("flip", [img], flipCode=1)
    assert_same(out, cv2.flip(img, 1), "flip large rgb")
    assert report["kernel_calls"] > 1
    wide = noise(2, 30000, seed=9, channels=3)  # a row is more than a tile: strips
    out, _ = run_cv("flip", [wide], flipCode=-1)
    assert_same(out, cv2.flip(wide, -1), "flip wide rgb")


def test_transpose() -> None:
    for k, shape in enumerate([*SIZES, (130, 200), (2000, 40), (3, 12000)]):
        img = _grey(shape, k)
        out, _ = run_cv("transpose", [img])
        assert_same(out, cv2.transpose(img), f"transpose {shape}")
    img = gray(*LARGE)
    out, _ = run_cv("transpose", [img])
    assert_same(out, cv2.transpose(img), "transpose large")


@pytest.mark.parametrize("code", [0, 1, 2])
def test_rotate(code: int) -> None:
    for k, shape in enumerate([*SIZES, (70, 129)]):
        img = _grey(shape, k + 10)
        out, _ = run_cv("rotate", [img], rotateCode=code)
        assert_same(out, cv2.rotate(img, code), f"rotate {code} {shape}")


def test_rotate_large_and_rgb() -> None:
    img = gray(*LARGE)
    out, _ = run_cv("rotate", [img], rotateCode=0)
    assert_same(out, cv2.rotate(img, 0), "rotate large")
    img3 = rgb(*LARGE)
    out, _ = run_cv("rotate", [img3], rotateCode=2)
    assert_same(out, cv2.rotate(img3, 2), "rotate large rgb")


@pytest.mark.parametrize("code", [None, 0, 1, 2])
def test_transpose_rotate_rgb(code: int | None) -> None:
    for k, shape in enumerate([(1, 1), (1, 70), (70, 1), (5, 63), (9, 65), (70, 129)]):
        img = noise(*shape, seed=k + 30, channels=3)
        if code is None:
            out, _ = run_cv("transpose", [img])
            ref = cv2.transpose(img)
        else:
            out, _ = run_cv("rotate", [img], rotateCode=code)
            ref = cv2.rotate(img, code)
        assert_same(out, ref, f"rgb {code} {shape}")


# --- resize ----------------------------------------------------------------------------------

_RESIZES = [
    ((48, 64), (37, 91)),     # up in x, down in y, non-integer
    ((100, 100), (33, 77)),   # down by non-integer factors
    ((17, 31), (50, 200)),    # up by non-integer factors
    ((66, 130), (33, 65)),    # exactly 2x down (OpenCV's INTER_AREA case)
    ((1, 17), (3, 40)),       # one row
    ((17, 1), (40, 3)),       # one column
    ((1, 1), (5, 7)),
    ((9, 65), (9, 65)),       # same size: a copy
    ((5, 63), (11, 129)),
    ((33, 130), (1, 1)),
]


@pytest.mark.parametrize("interpolation", [0, 1])
def test_resize_grey(interpolation: int) -> None:
    for k, ((h, w), (dh, dw)) in enumerate(_RESIZES):
        img = _grey((h, w), k)
        out, _ = run_cv("resize", [img], dsizeWidth=dw, dsizeHeight=dh,
                        interpolation=interpolation)
        ref = cv2.resize(img, (dw, dh), interpolation=interpolation)
        assert_same(out, ref, f"resize {interpolation} {(h, w)} -> {(dh, dw)}")


@pytest.mark.parametrize("interpolation", [0, 1])
def test_resize_rgb(interpolation: int) -> None:
    for k, ((h, w), (dh, dw)) in enumerate(_RESIZES[:5]):
        img = noise(h, w, seed=k, channels=3)
        out, _ = run_cv("resize", [img], dsizeWidth=dw, dsizeHeight=dh,
                        interpolation=interpolation)
        ref = cv2.resize(img, (dw, dh), interpolation=interpolation)
        assert_same(out, ref, f"resize rgb {interpolation} {(h, w)} -> {(dh, dw)}")


def test_resize_large() -> None:
    img = gray(*LARGE)
    for (dw, dh), interpolation in [((500, 300), 1), ((320, 240), 1), ((1000, 700), 0)]:
        out, _ = run_cv("resize", [img], dsizeWidth=dw, dsizeHeight=dh,
                        interpolation=interpolation)
        assert_same(out, cv2.resize(img, (dw, dh), interpolation=interpolation),
                    f"resize large -> {dw}x{dh}")
    img3 = rgb(*LARGE)
    out, _ = run_cv("resize", [img3])
    assert_same(out, cv2.resize(img3, (400, 300), interpolation=cv2.INTER_LINEAR),
                "resize large rgb (defaults)")


_AREAS = [
    ((30, 30), (10, 10)),     # 3 x 3 blocks
    ((60, 64), (15, 16)),     # 4 x 4
    ((64, 128), (32, 64)),    # 2 x 2: the average
    ((48, 64), (48, 32)),     # 2 x 1
    ((9, 65), (3, 13)),       # 5 x 3
    ((17, 31), (50, 200)),    # enlarging: bilinear with area fractions
    ((48, 64), (37, 91)),     # shrinking one axis, enlarging the other
    ((1, 1), (3, 3)),
]


@pytest.mark.parametrize("channels", [1, 3])
def test_resize_area(channels: int) -> None:
    for k, ((h, w), (dh, dw)) in enumerate(_AREAS):
        img = noise(h, w, seed=k + 50, channels=channels)
        out, _ = run_cv("resize", [img], dsizeWidth=dw, dsizeHeight=dh,
                        interpolation=cv2.INTER_AREA)
        ref = cv2.resize(img, (dw, dh), interpolation=cv2.INTER_AREA)
        assert_same(out, ref, f"resize area {channels} {(h, w)} -> {(dh, dw)}")
    if channels == 1:
        img = gray(*LARGE)
        out, _ = run_cv("resize", [img], dsizeWidth=128, dsizeHeight=96, interpolation=3)
        ref = cv2.resize(img, (128, 96), interpolation=cv2.INTER_AREA)
        assert_same(out, ref, "resize area large")


def test_roi_resize() -> None:
    img = _grey((60, 90), 4)
    cases = [((10, 5, 30, 20), (45, 17)), ((0, 0, 90, 60), (41, 33)),
             ((60, 40, 30, 20), (61, 9)), ((89, 59, 1, 1), (3, 2)), ((7, 3, 64, 1), (20, 4))]
    for (x, y, w, h), (dw, dh) in cases:
        for interpolation in (0, 1):
            out, _ = run_cv("roi_resize", [img], roiX=x, roiY=y, roiWidth=w, roiHeight=h,
                            dsizeWidth=dw, dsizeHeight=dh, interpolation=interpolation)
            crop = np.ascontiguousarray(img[y: y + h, x: x + w])
            ref = cv2.resize(crop, (dw, dh), interpolation=interpolation)
            assert_same(out, ref, f"roi_resize {(x, y, w, h)} -> {(dw, dh)} {interpolation}")
    for (x, y, w, h), (dw, dh) in [((10, 5, 30, 21), (10, 7)), ((3, 2, 40, 20), (20, 10)),
                                   ((50, 30, 20, 15), (37, 40))]:
        out, _ = run_cv("roi_resize", [img], roiX=x, roiY=y, roiWidth=w, roiHeight=h,
                        dsizeWidth=dw, dsizeHeight=dh, interpolation=cv2.INTER_AREA)
        ref = cv2.resize(np.ascontiguousarray(img[y: y + h, x: x + w]), (dw, dh),
                         interpolation=cv2.INTER_AREA)
        assert_same(out, ref, f"roi_resize area {(x, y, w, h)} -> {(dw, dh)}")
    img3 = noise(40, 50, seed=2, channels=3)
    out, _ = run_cv("roi_resize", [img3], roiX=5, roiY=6, roiWidth=33, roiHeight=21,
                    dsizeWidth=70, dsizeHeight=15)
    ref = cv2.resize(np.ascontiguousarray(img3[6:27, 5:38]), (70, 15))
    assert_same(out, ref, "roi_resize rgb")


def test_roi_resize_large_defaults() -> None:
    img = gray(*LARGE)
    out, _ = run_cv("roi_resize", [img])
    ref = cv2.resize(np.ascontiguousarray(img[120:360, 160:480]), (400, 300))
    assert_same(out, ref, "roi_resize defaults")


# --- pyramids --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["pyr_down", "pyr_up"])
def test_pyramid(name: str) -> None:
    ref_op = cv2.pyrDown if name == "pyr_down" else cv2.pyrUp
    for k, shape in enumerate([*SIZES, (2, 2), (3, 3), (130, 257)]):
        img = _grey(shape, k + 20)
        out, _ = run_cv(name, [img])
        assert_same(out, ref_op(img), f"{name} {shape}")
    img = gray(*LARGE)
    out, _ = run_cv(name, [img])
    assert_same(out, ref_op(img), f"{name} large")


@pytest.mark.parametrize("name", ["pyr_down", "pyr_up"])
def test_pyramid_rgb(name: str) -> None:
    ref_op = cv2.pyrDown if name == "pyr_down" else cv2.pyrUp
    for k, shape in enumerate([(1, 1), (1, 45), (45, 1), (5, 63), (9, 65), (33, 130)]):
        img = noise(*shape, seed=k + 40, channels=3)
        out, _ = run_cv(name, [img])
        assert_same(out, ref_op(img), f"{name} rgb {shape}")
    img = rgb(*LARGE)
    out, _ = run_cv(name, [img])
    assert_same(out, ref_op(img), f"{name} large rgb")


# --- refusals --------------------------------------------------------------------------------


def _image(width: int, height: int, channels: int = 1) -> Image:
    return Image(width, height, channels, TYPE_U8, width * channels, 0)


def _output(name: str, image: Image, **values: object) -> cv.OutputSpec:
    op = cv.cv_operator(name)
    assert op is not None
    return op.output([image], {**op.defaults(), **values})


def test_bad_parameters() -> None:
    with pytest.raises(ValueError, match="roi_resize: roiX \\+ roiWidth"):
        _output("roi_resize", _image(100, 100), roiX=90, roiWidth=20, roiY=0, roiHeight=10)
    with pytest.raises(ValueError, match="roi_resize: roiY \\+ roiHeight"):
        _output("roi_resize", _image(100, 100), roiX=0, roiWidth=10, roiY=1, roiHeight=100)
    with pytest.raises(ValueError, match="transpose: takes uint8 images of 1 or 3"):
        _output("transpose", _image(10, 10, 4))
    assert _output("rotate", _image(10, 7, 3), rotateCode=2) == (7, 10, 3, TYPE_U8, 1)
    assert _output("rotate", _image(10, 7, 3), rotateCode=1) == (10, 7, 3, TYPE_U8, 1)
    with pytest.raises(ValueError, match="resize: dsizeWidth x channels"):
        _output("resize", _image(10, 10, 3), dsizeWidth=5000)
    with pytest.raises(ValueError, match="pyr_down: takes uint8 images of 1 or 3"):
        _output("pyr_down", _image(10, 10, 2))
    with pytest.raises(ValueError, match="resize: interpolation area shrinks by integer"):
        _output("resize", _image(100, 100), dsizeWidth=30, dsizeHeight=50, interpolation=3)
    with pytest.raises(ValueError, match="roi_resize: interpolation area sums at most 257"):
        _output("roi_resize", _image(10, 600), roiX=0, roiY=0, roiWidth=10, roiHeight=600,
                dsizeWidth=10, dsizeHeight=2, interpolation=3)
    op = cv.cv_operator("flip")
    assert op is not None
    with pytest.raises(ValueError, match="flip: flipCode must be one of"):
        op.params[0].check(2, "flip")
    resize = cv.cv_operator("resize")
    assert resize is not None
    with pytest.raises(ValueError, match="resize: dsizeWidth = 0"):
        resize.params[0].check(0, "resize")


def test_errors_through_the_dsp_call() -> None:
    img = _grey((20, 30))
    with pytest.raises(InputError, match="roiX \\+ roiWidth"):
        run_cv("roi_resize", [img], roiX=10, roiY=0, roiWidth=21, roiHeight=5)
    with pytest.raises(InputError, match="flipCode"):
        run_cv("flip", [img], flipCode=3)
    with pytest.raises(InputError, match="takes uint8 images of 1 or 3"):
        run_cv("pyr_up", [noise(4, 4, channels=4)])
