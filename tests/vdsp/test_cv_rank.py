"""Rank-filter CV operators (median_blur, dilate, erode) against OpenCV, bit for bit."""

from __future__ import annotations

import itertools
import re

import cv2
import numpy as np
import pytest

from emu.errors import InputError
from emu.runtime import hbdsp, hbsys
from emu.runtime.session import Session
from emu.vdsp.ops import cv, cv_rank, image_args
from tests.vdsp.cv_support import (
    BORDER_MODES,
    LARGE,
    SIZES,
    assert_same,
    gray,
    noise,
    rgb,
    run_cv,
    run_preempted,
)

# --- the selection networks --------------------------------------------------------------------


@pytest.mark.parametrize("n", range(2, 11))
def test_batcher_sorts_every_zero_one_input(n):
    net = cv_rank.batcher(n)
    for bits in itertools.product((0, 1), repeat=n):
        v = list(bits)
        for a, b in net:
            v[a], v[b] = min(v[a], v[b]), max(v[a], v[b])
        assert v == sorted(bits)


@pytest.mark.parametrize("k", cv_rank.MEDIAN_SIZES)
def test_the_pruned_network_finds_the_median_of_column_sorted_windows(k):
    column, select, used, output = cv_rank.median_network(k)
    assert len(column) == len(cv_rank.batcher(k))
    rng = np.random.default_rng(k)
    for t in range(400):
        window = rng.integers(0, 3 if t % 2 else 256, (k, k))
        wires = list(np.sort(window, axis=0).reshape(-1))
        for a, b, low, high in select:
            lo, hi = min(wires[a], wires[b]), max(wires[a], wires[b])
            wires[a] = lo if low else wires[a]
            wires[b] = hi if high else wires[b]
        assert wires[output] == np.median(window)
    assert set(used.tolist()) <= set(range(k * k))


# --- median_blur -------------------------------------------------------------------------------


@pytest.mark.parametrize("ksize", cv_rank.MEDIAN_SIZES)
def test_median_blur_is_opencvs_on_the_standard_image(ksize):
    img = gray(90, 200)
    out, _ = run_cv("median_blur", [img], ksize=ksize)
    assert_same(out, cv2.medianBlur(img, ksize))


@pytest.mark.parametrize("ksize", cv_rank.MEDIAN_SIZES)
@pytest.mark.parametrize("picture", ["standard", "noise"])
def test_median_blur_of_colour_images(ksize, picture):
    img = rgb(40, 77) if picture == "standard" else noise(23, 70, seed=ksize, channels=3)
    out, _ = run_cv("median_blur", [img], ksize=ksize)
    assert_same(out, cv2.medianBlur(img, ksize))


@pytest.mark.parametrize(("height", "width"), SIZES)
@pytest.mark.parametrize("ksize", cv_rank.MEDIAN_SIZES)
def test_median_blur_on_noise_and_edge_sizes(height, width, ksize):
    img = noise(height, width, seed=height * width + ksize)
    if height * width > 100:
        img[: height // 2] //= 64  # ties: few distinct values
    out, _ = run_cv("median_blur", [img], ksize=ksize)
    assert_same(out, cv2.medianBlur(img, ksize), f"{height}x{width} k{ksize}")


def test_median_blur_on_an_image_larger_than_the_tcm():
    img = gray(*LARGE)
    out, report = run_cv("median_blur", [img], ksize=5)
    assert_same(out, cv2.medianBlur(img, 5))
    assert report["kernel_calls"] > 1


# --- dilate / erode --------------------------------------------------------------------------

OPS = {"dilate": cv2.dilate, "erode": cv2.erode}


def _ref(name, img, ksizeX=3, ksizeY=3, iterations=1, borderType=cv.BORDER_CONSTANT,
         borderValue=None):
    kw = {} if borderValue is None else {"borderValue": (borderValue,) * 4}
    return OPS[name](img, np.ones((ksizeY, ksizeX), np.uint8), iterations=iterations,
                     borderType=borderType, **kw)


def _run(name, img, **values):
    out, _ = run_cv(name, [img], **values)
    return out


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("mode", BORDER_MODES)
@pytest.mark.parametrize(("kx", "ky", "iterations"),
                         [(3, 3, 1), (1, 1, 1), (5, 1, 1), (1, 4, 1), (4, 3, 2), (7, 5, 1),
                          (3, 3, 3), (12, 1, 1), (1, 13, 1), (4, 6, 5), (17, 2, 1)])
def test_morphology_is_opencvs_on_the_standard_image(name, mode, kx, ky, iterations):
    img = gray(45, 100)
    out = _run(name, img, ksizeX=kx, ksizeY=ky, iterations=iterations, borderType=mode)
    assert_same(out, _ref(name, img, kx, ky, iterations, mode), f"{name} {kx}x{ky}")


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("value", [0.0, 100.5, 101.5, 254.6, -7.0, 300.0, 1e12])
def test_a_constant_border_value_is_saturated_as_opencv_does(name, value):
    img = noise(20, 70, seed=3)
    out = _run(name, img, ksizeX=5, ksizeY=3, borderValue=value)
    assert_same(out, _ref(name, img, 5, 3, borderValue=value), f"{name} {value}")


@pytest.mark.parametrize("value", [0.0, 2.5, 1e300, -2**31, 2**31 - 1, 2**31 - 0.4])
def test_saturate_u8_is_opencvs(value):
    src = np.full((1, 1), 255, np.uint8)
    ref = cv2.erode(src, np.ones((3, 3), np.uint8), borderType=cv2.BORDER_CONSTANT,
                    borderValue=(value,) * 4)
    assert cv_rank.saturate_u8(value) == ref[0, 0]


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize(("height", "width"), SIZES)
def test_morphology_on_noise_and_edge_sizes(name, height, width):
    img = noise(height, width, seed=height + width)
    for mode in (cv.BORDER_CONSTANT, cv.BORDER_REFLECT_101):
        out = _run(name, img, ksizeX=3, ksizeY=5, borderType=mode)
        assert_same(out, _ref(name, img, 3, 5, 1, mode), f"{name} {height}x{width} {mode}")


@pytest.mark.parametrize("name", OPS)
def test_morphology_of_colour_images(name):
    img = rgb(30, 90)
    out = _run(name, img, ksizeX=4, ksizeY=2, borderType=cv.BORDER_REPLICATE)
    assert_same(out, _ref(name, img, 4, 2, 1, cv.BORDER_REPLICATE))
    out = _run(name, img, ksizeX=3, ksizeY=3, borderValue=77.0)
    assert_same(out, _ref(name, img, 3, 3, borderValue=77.0))


@pytest.mark.parametrize("name", OPS)
def test_morphology_on_an_image_larger_than_the_tcm(name):
    img = gray(*LARGE)
    out, report = run_cv(name, [img], ksizeX=5, ksizeY=5, iterations=2,
                         borderType=cv.BORDER_REFLECT)
    assert_same(out, _ref(name, img, 5, 5, 2, cv.BORDER_REFLECT))
    assert report["kernel_calls"] > 1


# --- bad parameters ----------------------------------------------------------------------------


def _records(img):
    return [image_args.Image(img.shape[1], img.shape[0], 1, image_args.TYPE_U8, img.shape[1],
                             0)]


@pytest.mark.parametrize(("name", "change", "needle"), [
    ("median_blur", {"ksize": 4}, "median_blur: ksize must be 3, 5 or 7, got 4"),
    ("median_blur", {"ksize": 9}, "ksize must be 3, 5 or 7"),
    ("dilate", {"ksizeX": 30, "iterations": 10}, "(ksizeX - 1) x iterations + 1 must be at "
                                                  "most 255, got 291"),
    ("erode", {"ksizeY": 200, "iterations": 2}, "(ksizeY - 1) x iterations + 1"),
])
def test_bad_parameters_are_refused_naming_them(name, change, needle):
    op = cv.cv_operator(name)
    img = gray(8, 8)
    with pytest.raises(ValueError, match=re.escape(needle)):
        op.output(_records(img), {**op.defaults(), **change})
    with pytest.raises(InputError, match="must be"):
        run_cv(name, [img], **change)


@pytest.mark.parametrize(("name", "change", "needle"), [
    ("dilate", {"borderType": 3}, "borderType must be one of"),
    ("erode", {"ksizeX": 0}, "ksizeX = 0 is outside 1..255"),
    ("median_blur", {"ksize": 2.5}, "ksize must be an integer"),
])
def test_malformed_values_are_refused_by_the_api(name, change, needle):
    with pytest.raises(InputError, match=needle):
        run_cv(name, [gray(8, 8)], **change)


def test_other_images_are_refused():
    op = cv.cv_operator("median_blur")
    rec = image_args.Image(8, 8, 4, image_args.TYPE_U8, 32, 0)
    with pytest.raises(ValueError, match="takes uint8 images of 1 or 3 channels"):
        op.output([rec], op.defaults())
    with pytest.raises(InputError, match="takes uint8"):
        run_cv("dilate", [np.zeros((8, 8), np.float32)])


@pytest.mark.parametrize(("name", "values", "needle"), [
    ("median_blur", {"ksize": 4}, "ksize must be 3, 5 or 7, got 4"),
    ("dilate", {"ksizeX": 129, "iterations": 3}, "must be at most 255, got 385"),
])
def test_the_dsp_refuses_a_hand_made_block_with_bad_values(name, values, needle):
    img = gray(16, 16)
    op = cv.cv_operator(name)
    with Session("j5"):
        src, block, out = hbsys.hbSysMem(), hbsys.hbSysMem(), hbsys.hbSysMem()
        hbsys.hbSysAllocCachedMem(src, img.nbytes)
        hbsys.hbSysAllocCachedMem(block, image_args.ARGS_BYTES)
        hbsys.hbSysAllocCachedMem(out, img.nbytes)
        rec = image_args.Image(16, 16, 1, image_args.TYPE_U8, 16, src.phyAddr)
        dst = image_args.Image(16, 16, 1, image_args.TYPE_U8, 16, out.phyAddr)
        block.virAddr[:] = np.frombuffer(image_args.pack([rec], dst, op.encode(
            {**op.defaults(), **values})), np.uint8)
        hbsys.hbSysFlushMem(block, hbsys.HB_SYS_MEM_CACHE_CLEAN)
        ctrl = hbdsp.hbDSPRpcCtrlParam()
        ctrl.rpcCmd = op.cmd
        rc, task = hbdsp.hbDSPRpc(block, out, ctrl)
        assert rc == 0
        assert hbdsp.hbDSPWaitTaskDone(task, 0) == hbdsp.HB_DSP_TASK_FAILED
        assert needle in task.error


def test_defaults_run_on_the_standard_picture():
    for name in ("median_blur", "dilate", "erode"):
        op = cv.cv_operator(name)
        (img,) = op.prepare(rgb())
        out, report = run_cv(name, [img])
        ref = cv2.medianBlur(img, 3) if name == "median_blur" else _ref(name, img)
        assert_same(out, ref, name)
        assert report["cycles_per_pixel"] < 1.0


@pytest.mark.parametrize(("taps", "down"), [(2, False), (5, True), (12, False), (16, True),
                                            (31, False), (255, True)])
def test_the_doubling_window_kernel_gives_the_direct_ones_result(taps, down):
    from emu.vdsp import isa
    from emu.vdsp.ops import cv_rank_kernels
    from emu.vdsp.ops.cv_kernel_records import TileRows

    pitch, rows, row_bytes, pb = 576, 3, 130, 3  # along a row: 130 + 30 x 3 + 64 <= 576
    src_rows = rows + (taps - 1 if down else 0)
    rng = np.random.default_rng(taps)
    data = rng.integers(0, 256, src_rows * pitch, dtype=np.uint8)
    outs = []
    for kernel in (cv_rank_kernels.extreme_tile, cv_rank_kernels.extreme_doubling_tile):
        ctx = isa.make_context(262144, 131072, 8, 4)
        ctx.tcm[: data.size] = data
        dst = 131072
        tap = pitch if down else pb
        args = (TileRows(0, dst, rows, row_bytes, pitch, pitch), taps, tap)
        if kernel is cv_rank_kernels.extreme_doubling_tile:
            kernel(ctx, *args, down, True)
        else:
            kernel(ctx, *args, True)
        assert ctx.fault[0] == 0
        outs.append(ctx.tcm[dst: dst + rows * pitch].reshape(rows, pitch)[:, :row_bytes].copy())
    assert_same(outs[1], outs[0])
    assert sum(cv_rank.doubling_offsets(taps)) == taps - 1


def test_doubling_pays_for_long_windows_over_many_rows_only():
    assert not cv_rank.doubling_pays(40, 640, 3, 1, False)
    assert cv_rank.doubling_pays(40, 640, 31, 1, False)
    assert cv_rank.doubling_pays(40, 640, 31, 704, True)
    assert not cv_rank.doubling_pays(1, 64, 255, 384, True)  # one output row under 255 taps


@pytest.mark.parametrize("name", ["median_blur", "dilate"])
def test_a_preemptor_that_scribbles_over_the_tcm_leaves_the_output_intact(name):
    img = gray(150, 300)
    want = cv2.medianBlur(img, 3) if name == "median_blur" else _ref(name, img)
    out, end_ps, _ = run_preempted(name, img, None)
    assert_same(out, want)
    preempted = 0
    for at_ps in np.linspace(0, end_ps, 6, dtype=np.int64).tolist()[1:-1]:
        out, _, preemptions = run_preempted(name, img, at_ps)
        assert_same(out, want, f"preempted at {at_ps} ps")
        preempted += preemptions
    assert preempted >= 2
