"""Image-statistics CV operators (integral, equalize_hist) against OpenCV, bit for bit."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from emu.errors import InputError
from emu.runtime import hbdsp, hbsys
from emu.runtime.session import Session
from emu.vdsp.ops import cv, cv_stats, image_args
from tests.vdsp.cv_support import LARGE, SIZES, assert_same, gray, noise, rgb, run_cv, run_preempted

# --- integral ----------------------------------------------------------------------------------


def test_integral_is_opencvs_on_the_standard_image():
    img = gray(120, 300)
    out, _ = run_cv("integral", [img])
    assert_same(out, cv2.integral(img))


@pytest.mark.parametrize(("height", "width"), [*SIZES, (2, 200), (70, 1)])
def test_integral_on_noise_and_edge_sizes(height, width):
    img = noise(height, width, seed=height * 31 + width)
    out, _ = run_cv("integral", [img])
    assert_same(out, cv2.integral(img), f"{height}x{width}")


def test_integral_on_an_image_larger_than_the_tcm_carries_its_sums_across_bands():
    img = gray(*LARGE)
    out, report = run_cv("integral", [img])
    assert_same(out, cv2.integral(img))
    assert report["kernel_calls"] > 2


def test_integral_of_white_sums_every_pixel():
    img = np.full((300, 257), 255, np.uint8)
    out, _ = run_cv("integral", [img], overrides=("vdsp.tcm.reserved_bytes=110KiB",))
    assert_same(out, cv2.integral(img))
    assert out[-1, -1] == 255 * img.size


@pytest.mark.parametrize(("width", "needle"), [
    (5000, "an output row of 5001 int32 does not fit a TCM tile buffer pair"),
    (9000, "tile buffer 'integral carry' does not fit"),
])
def test_an_integral_row_too_wide_for_a_band_is_refused(width, needle):
    img = np.zeros((2, width), np.uint8)
    with pytest.raises(InputError, match=needle):
        run_cv("integral", [img], overrides=("vdsp.tcm.reserved_bytes=100KiB",))


# --- equalize_hist -----------------------------------------------------------------------------


def test_equalize_hist_is_opencvs_on_the_standard_image():
    img = gray(150, 260)
    out, _ = run_cv("equalize_hist", [img])
    assert_same(out, cv2.equalizeHist(img))


@pytest.mark.parametrize(("height", "width"), SIZES)
def test_equalize_hist_on_noise_and_edge_sizes(height, width):
    img = noise(height, width, seed=height + 7 * width)
    out, _ = run_cv("equalize_hist", [img])
    assert_same(out, cv2.equalizeHist(img), f"{height}x{width}")


@pytest.mark.parametrize("kind", ["flat", "two", "dark", "bright", "narrow", "one_off"])
def test_equalize_hist_on_awkward_histograms(kind):
    rng = np.random.default_rng(5)
    img = {
        "flat": np.full((13, 70), 42, np.uint8),
        "two": rng.choice(np.array([3, 250], np.uint8), (20, 65)),
        "dark": rng.integers(0, 4, (31, 66), dtype=np.uint8),
        "bright": rng.integers(250, 256, (9, 130), dtype=np.uint8),
        "narrow": (gray(40, 90) // 8 + 100).astype(np.uint8),
        "one_off": np.where(np.arange(64 * 9).reshape(9, 64) == 100, 0, 255).astype(np.uint8),
    }[kind]
    out, _ = run_cv("equalize_hist", [img])
    assert_same(out, cv2.equalizeHist(img), kind)


def test_equalize_hist_on_an_image_larger_than_the_tcm():
    img = gray(*LARGE)
    out, report = run_cv("equalize_hist", [img])
    assert_same(out, cv2.equalizeHist(img))
    assert report["kernel_calls"] > 4


@pytest.mark.parametrize("seed", range(3))
def test_equalize_hist_on_random_sizes_and_ranges(seed):
    rng = np.random.default_rng(seed)
    h, w = rng.integers(1, 90, 2)
    low, span = rng.integers(0, 200), rng.integers(1, 56)
    img = (low + rng.integers(0, span, (h, w))).astype(np.uint8)
    out, _ = run_cv("equalize_hist", [img])
    assert_same(out, cv2.equalizeHist(img), f"{h}x{w} {low}+{span}")


# --- images they refuse -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["integral", "equalize_hist"])
def test_colour_and_other_types_are_refused(name):
    op = cv.cv_operator(name)
    rec = image_args.Image(8, 8, 3, image_args.TYPE_U8, 24, 0)
    with pytest.raises(ValueError, match=f"{name}: takes uint8 images of 1 channel"):
        op.output([rec], op.defaults())
    with pytest.raises(InputError, match="takes uint8 images of 1 channel, got"):
        run_cv(name, [rgb(8, 8)])
    with pytest.raises(InputError, match="takes uint8"):
        run_cv(name, [np.zeros((8, 8), np.int16)])


@pytest.mark.parametrize("name", ["integral", "equalize_hist"])
def test_the_dsp_refuses_a_hand_made_block_with_a_colour_image(name):
    op = cv.cv_operator(name)
    with Session("j5"):
        src, block, out = hbsys.hbSysMem(), hbsys.hbSysMem(), hbsys.hbSysMem()
        hbsys.hbSysAllocCachedMem(src, 8 * 24)
        hbsys.hbSysAllocCachedMem(block, image_args.ARGS_BYTES)
        hbsys.hbSysAllocCachedMem(out, 9 * 9 * 4)
        rec = image_args.Image(8, 8, 3, image_args.TYPE_U8, 24, src.phyAddr)
        dst = image_args.Image(9, 9, 1, image_args.TYPE_S32, 36, out.phyAddr)
        block.virAddr[:] = np.frombuffer(image_args.pack([rec], dst, op.encode({})), np.uint8)
        hbsys.hbSysFlushMem(block, hbsys.HB_SYS_MEM_CACHE_CLEAN)
        ctrl = hbdsp.hbDSPRpcCtrlParam()
        ctrl.rpcCmd = op.cmd
        rc, task = hbdsp.hbDSPRpc(block, out, ctrl)
        assert rc == 0
        assert hbdsp.hbDSPWaitTaskDone(task, 0) == hbdsp.HB_DSP_TASK_FAILED
        assert f"{name}: takes uint8 images of 1 channel, got 8x8 3xuint8" in task.error


# --- preemption --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["integral", "equalize_hist"])
def test_a_preemptor_that_scribbles_over_the_tcm_leaves_the_output_intact(name):
    img = gray(200, 300)
    want = cv2.integral(img) if name == "integral" else cv2.equalizeHist(img)
    out, end_ps, _ = run_preempted(name, img, None)
    assert_same(out, want)
    preempted = 0
    for at_ps in np.linspace(0, end_ps, 9, dtype=np.int64).tolist()[1:-1]:
        out, _, preemptions = run_preempted(name, img, at_ps)
        assert_same(out, want, f"preempted at {at_ps} ps")
        preempted += preemptions
    assert preempted >= 4


def test_the_operators_are_registered_at_their_ids():
    assert cv.cv_operator("equalize_hist").cmd == cv_stats.CMD_EQUALIZE_HIST == 0x802
    assert cv.cv_operator("integral").cmd == cv_stats.CMD_INTEGRAL == 0x803


def test_defaults_run_on_the_standard_picture():
    for name, ref in (("integral", cv2.integral), ("equalize_hist", cv2.equalizeHist)):
        op = cv.cv_operator(name)
        (img,) = op.prepare(rgb())
        out, report = run_cv(name, [img])
        assert_same(out, ref(img), name)
        assert report["cycles_per_pixel"] < 1.0
