"""The CV operators' framework: argument blocks, borders, tiles, the ARM API, threshold."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from emu.errors import DspError, InputError
from emu.runtime import hbdsp, hbdsp_cv, hbsys
from emu.runtime.session import Session
from emu.vdsp.ops import cv, image_args
from emu.workloads import dsp_cv
from tests.vdsp.cv_support import BORDER_MODES, LARGE, SIZES, assert_same, gray, noise, run_cv

# --- borders ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", BORDER_MODES)
@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_border_source_is_opencvs_border_interpolate(mode, n):
    for p in range(-2 * n - 3, 3 * n + 3):
        ours = cv.border_source(p, n, mode)
        assert ours == cv2.borderInterpolate(p, n, mode), (p, n, mode)


# --- argument blocks -------------------------------------------------------------------------


def _block(inputs, output, params):
    return np.frombuffer(image_args.pack(inputs, output, params), np.uint8).copy()


def test_an_argument_block_round_trips():
    src = image_args.Image(65, 7, 3, image_args.TYPE_U8, 200, 0x1234_5678_9A)
    out = image_args.Image(64, 32, 1, image_args.TYPE_U8, 64, 0x40000, planes=2)
    params = image_args.encode_params([("int", -5), ("real", 0.1), ("int", 7)])
    call = image_args.parse(_block([src], out, params), "t")
    assert call.inputs == (src,) and call.output == out
    assert call.params.view("<i4")[0] == -5 and call.params[1:3].view("<f8")[0] == 0.1


@pytest.mark.parametrize(("patch", "needle"), [
    (lambda w: w.__setitem__(0, 7), "EMUC"),
    (lambda w: w.__setitem__(2, 0), "input images"),
    (lambda w: w.__setitem__(3, 65), "parameter words"),
    (lambda w: w.__setitem__(4 + 3, 9), "unknown element type"),
    (lambda w: w.__setitem__(4, 0), "outside 1..32768"),
    (lambda w: w.__setitem__(4 + 4, 10), "stride 10 B is shorter"),
    (lambda w: w.__setitem__(4 + 7, 2), "NV12 input 0 image must be uint8"),
    (lambda w: w.__setitem__(4 + 24, 0) or w.__setitem__(4 + 25, 0) or w.__setitem__(4 + 26, 0)
     or w.__setitem__(4 + 27, 0) or w.__setitem__(4 + 28, 0) or w.__setitem__(4 + 29, 0)
     or w.__setitem__(4 + 31, 0), "no output image"),
])
def test_a_malformed_argument_block_is_refused_with_one_line(patch, needle):
    src = image_args.Image(65, 7, 3, image_args.TYPE_U8, 200, 4096)
    blob = _block([src], src, np.zeros(0, "<u4"))
    words = blob.view("<u4")
    patch(words)
    with pytest.raises(DspError, match=needle):
        image_args.parse(blob, "t")
    with pytest.raises(DspError, match="shorter than"):
        image_args.parse(blob[:100], "t")


# --- threshold: the example operator ---------------------------------------------------------

TYPES = [v for _, v in cv.cv_operator("threshold").params[2].choices]


@pytest.mark.parametrize("kind", TYPES)
@pytest.mark.parametrize("thresh", [-3.5, 0.0, 100.7, 254.2, 300.0])
def test_threshold_is_opencvs_on_the_standard_image(kind, thresh):
    img = gray()
    out, _ = run_cv("threshold", [img], thresh=thresh, maxval=200.6, type=kind)
    assert_same(out, cv2.threshold(img, thresh, 200.6, kind)[1])


@pytest.mark.parametrize(("height", "width"), [*SIZES, LARGE])
@pytest.mark.parametrize("channels", [1, 3])
def test_threshold_on_edge_sizes_and_colour(height, width, channels):
    img = noise(height, width, seed=height * width, channels=channels)
    out, _ = run_cv("threshold", [img], thresh=90, maxval=255, type=3)
    assert_same(out, cv2.threshold(img, 90, 255, 3)[1])


def test_threshold_refuses_other_images():
    op = cv.cv_operator("threshold")
    rec = image_args.Image(4, 4, 1, image_args.TYPE_F32, 16, 0)
    with pytest.raises(ValueError, match="threshold: takes uint8 images of 1 or 3"):
        op.output([rec], op.defaults())
    with pytest.raises(InputError, match="takes uint8"):
        run_cv("threshold", [np.zeros((4, 4), np.float32)])
    with pytest.raises(InputError, match="type must be one of"):
        run_cv("threshold", [gray(4, 4)], type=9)


# --- tiles -----------------------------------------------------------------------------------


def test_an_image_larger_than_the_tcm_is_tiled_and_one_smaller_is_not():
    _, small = run_cv("threshold", [gray(64, 64)])
    _, large = run_cv("threshold", [gray(*LARGE)])
    assert small["kernel_calls"] == 1
    assert large["kernel_calls"] > 2  # bands through both ping-pong sides
    assert max(large["tcm_high_water_bytes"]) <= 128 * 1024
    assert large["idma_in_bytes"] == LARGE[0] * LARGE[1] == large["idma_out_bytes"]


def test_twice_the_image_costs_about_twice_the_idma():
    _, one = run_cv("threshold", [gray(480, 640)])
    _, two = run_cv("threshold", [gray(960, 640)])
    assert two["idma_in_bytes"] == 2 * one["idma_in_bytes"]
    ratio = (two["idma_in_ms"] + two["idma_out_ms"]) / (one["idma_in_ms"] + one["idma_out_ms"])
    assert 1.8 < ratio < 2.2


def test_a_smaller_tcm_makes_more_tiles_with_the_same_output():
    img = gray(*LARGE)
    big, big_report = run_cv("threshold", [img])
    small, small_report = run_cv("threshold", [img],
                                 overrides=("vdsp.tcm.bank_bytes=64KiB",))
    assert_same(small, big)
    assert small_report["kernel_calls"] > big_report["kernel_calls"]


def _shifted_copy(img, mode, halo=2, value=77):
    """Run a test operator whose output pixel (y, x) is its tile's source pixel
    (y - halo, x - halo): the output is the bordered image shifted, border included."""
    from emu.vdsp import ops as registry
    from emu.vdsp.ops import cv_pixel_kernels
    from emu.vdsp.ops.cv_kernel_records import TileRows

    op = cv.cv_operator("threshold")

    def run(core, slot, r):
        row_bytes = r.inputs[0].image.row_bytes

        def kernel(src, dst, tile):  # tozero at -1: a copy
            return core.compute(cv_pixel_kernels.threshold_tile,
                                TileRows(src, dst, tile.out.height, row_bytes, tile.in_pitch,
                                         tile.out_pitch), -1, 255, 3)

        def source(out):
            return cv.Rect(out.x0 - halo, out.y0 - halo, out.x1 - halo, out.y1 - halo)

        return (yield from cv.run_plans(core, slot, r.what, [lambda: cv.image_plan(
            core, r, kernel, source=source, border=mode, border_value=value)]))

    cv.define(cv.CvOp(0x8FF, "shifted_copy", "ShiftedCopy", "test", op.params, op.inputs,
                      op.output, run))
    try:
        with Session("j5"):
            return dsp_cv.run_op(cv.cv_operator("shifted_copy"), [img], op.defaults())
    finally:
        registry._REGISTRY.remove(0x8FF)
        cv._CV.remove("shifted_copy")


@pytest.mark.parametrize("mode", BORDER_MODES)
@pytest.mark.parametrize(("height", "width"), [(1, 1), (5, 63), (9, 65), (300, 700)])
def test_tiles_with_a_halo_hold_opencvs_border(mode, height, width):
    img = noise(height, width, seed=width)
    out, _ = _shifted_copy(img, mode)
    ref = cv2.copyMakeBorder(img, 2, 0, 2, 0, mode, value=77)[:height, :width]
    assert_same(out, ref, f"mode {mode}")


def test_wrap_is_refused_naming_the_modes_we_have():
    with pytest.raises(InputError, match=r"border mode 3 is not supported.*reflect101"):
        _shifted_copy(gray(8, 8), cv2.BORDER_WRAP)


# --- the ARM API -----------------------------------------------------------------------------


def _image(sess, array):
    mem = hbsys.hbSysMem()
    assert hbsys.hbSysAllocCachedMem(mem, array.nbytes) == 0
    mem.virAddr[:] = array.reshape(-1).view(np.uint8)
    hbsys.hbSysFlushMem(mem, hbsys.HB_SYS_MEM_CACHE_CLEAN)
    im = hbdsp_cv.hbDSPImage()
    im.mem, im.height, im.width, im.stride = mem, *array.shape[:2], array.shape[1]
    return im


def test_every_operator_has_its_function_and_struct():
    for op in cv.cv_operators():
        assert callable(getattr(hbdsp_cv, f"hbDSP{op.c_name}"))
        param = getattr(hbdsp_cv, f"hbDSP{op.c_name}Param")()
        assert {p.name: getattr(param, p.name) for p in op.params} == op.defaults()


def test_the_api_runs_a_call_and_frees_its_argument_block():
    img = gray(48, 70)
    with Session("j5") as sess:
        src, dst = _image(sess, img), _image(sess, np.zeros_like(img))
        param = hbdsp_cv.hbDSPThresholdParam()
        param.thresh = 50
        ctrl = hbdsp.hbDSPRpcCtrlParam()
        hbdsp.HB_DSP_INITIALIZE_RPC_CTRL_PARAM(ctrl)
        live = sess.soc.pool.live_buffers
        rc, task = hbdsp_cv.hbDSPThreshold(src, dst, param, ctrl)
        assert rc == 0 and sess.soc.pool.live_buffers == live + 1  # the argument block
        assert hbsys.hbSysFreeMem(src.mem) != 0  # pinned while the task runs
        assert hbdsp.hbDSPWaitTaskDone(task, 0) == 0
        assert hbdsp.hbDSPReleaseTask(task) == 0
        assert sess.soc.pool.live_buffers == live
        hbsys.hbSysFlushMem(dst.mem, hbsys.HB_SYS_MEM_CACHE_INVALIDATE)
        out = dst.mem.virAddr.reshape(img.shape)
        assert_same(out, cv2.threshold(img, 50, 255, 0)[1])
        assert ctrl.rpcCmd == hbdsp.HB_DSP_RPC_CMD_NONE  # the caller's struct is as it was


@pytest.mark.parametrize(("change", "needle"), [
    (lambda s, d, p: setattr(d, "width", 10), "dst is 10x48"),
    (lambda s, d, p: setattr(s, "format", 99), "src.format 99"),
    (lambda s, d, p: setattr(s, "stride", 3), "src.stride 3"),
    (lambda s, d, p: setattr(s, "height", 1000), "runs past"),
    (lambda s, d, p: setattr(s, "mem", None), "src.mem is not a live"),
    (lambda s, d, p: setattr(p, "type", 7), "type must be one of"),
    (lambda s, d, p: setattr(p, "thresh", float("nan")), "thresh must be finite"),
    (lambda s, d, p: setattr(p, "thresh", "x"), "thresh must be a number"),
])
def test_bad_images_and_parameters_return_invalid_argument_and_say_why(change, needle, capfd):
    img = gray(48, 70)
    with Session("j5") as sess:
        src, dst = _image(sess, img), _image(sess, np.zeros_like(img))
        param = hbdsp_cv.hbDSPThresholdParam()
        change(src, dst, param)
        ctrl = hbdsp.hbDSPRpcCtrlParam()
        live = sess.soc.pool.live_buffers
        rc, task = hbdsp_cv.hbDSPThreshold(src, dst, param, ctrl)
        assert (rc, task) == (hbdsp.HB_DSP_INVALID_ARGUMENT, None)
        assert sess.soc.pool.live_buffers == live
    err = capfd.readouterr().err
    assert needle in err and err.count("\n") == 1


@pytest.mark.parametrize("kernel", [
    None, 3.0, "abcdefghijklmnopqrstuvwxy", [[1.0] * 5] * 5, [1.0] * 24, [1.0] * 24 + [None],
    [1.0] * 24 + [True], [1.0] * 24 + [float("inf")], np.ones((5, 5)),
], ids=["None", "number", "string", "nested", "short", "a None", "a bool", "inf", "2-D"])
def test_a_list_parameter_that_is_no_list_of_numbers_is_an_invalid_argument(kernel, capfd):
    img = gray(48, 70)
    with Session("j5") as sess:
        src, dst = _image(sess, img), _image(sess, np.zeros_like(img))
        param = hbdsp_cv.hbDSPFilter2DParam()
        param.kernel = kernel
        live = sess.soc.pool.live_buffers
        rc, task = hbdsp_cv.hbDSPFilter2D(src, dst, param, hbdsp.hbDSPRpcCtrlParam())
        assert (rc, task) == (hbdsp.HB_DSP_INVALID_ARGUMENT, None)
        assert sess.soc.pool.live_buffers == live
    err = capfd.readouterr().err
    assert "filter2d: kernel needs a list of 25 finite numbers" in err and err.count("\n") == 1


def test_a_call_from_another_thread_is_refused():
    import threading

    with Session("j5") as sess:
        src = _image(sess, gray(8, 8))
        got = []
        t = threading.Thread(target=lambda: got.append(hbdsp_cv.hbDSPThreshold(
            src, src, hbdsp_cv.hbDSPThresholdParam(), hbdsp.hbDSPRpcCtrlParam())))
        t.start()
        t.join()
    assert got == [(hbdsp.HB_DSP_WRONG_THREAD, None)]


def test_a_hand_made_block_with_a_bad_output_fails_the_task_with_a_message():
    img = gray(16, 16)
    with Session("j5") as sess:
        src = _image(sess, img)
        block, out = hbsys.hbSysMem(), hbsys.hbSysMem()
        hbsys.hbSysAllocCachedMem(block, image_args.ARGS_BYTES)
        hbsys.hbSysAllocCachedMem(out, 256)
        rec = image_args.Image(16, 16, 1, image_args.TYPE_U8, 16, src.mem.phyAddr)
        wrong = image_args.Image(16, 8, 1, image_args.TYPE_U8, 16, out.phyAddr)
        op = cv.cv_operator("threshold")
        block.virAddr[:] = np.frombuffer(image_args.pack([rec], wrong, op.encode(
            op.defaults())), np.uint8)
        hbsys.hbSysFlushMem(block, hbsys.HB_SYS_MEM_CACHE_CLEAN)
        ctrl = hbdsp.hbDSPRpcCtrlParam()
        ctrl.rpcCmd = op.cmd
        rc, task = hbdsp.hbDSPRpc(block, out, ctrl)
        assert rc == 0
        assert hbdsp.hbDSPWaitTaskDone(task, 0) == hbdsp.HB_DSP_TASK_FAILED
        assert "output record is 16x8" in task.error
        # an output outside the call's output buffer
        elsewhere = image_args.Image(16, 16, 1, image_args.TYPE_U8, 16, src.mem.phyAddr)
        block.virAddr[:] = np.frombuffer(image_args.pack([rec], elsewhere, op.encode(
            op.defaults())), np.uint8)
        hbsys.hbSysFlushMem(block, hbsys.HB_SYS_MEM_CACHE_CLEAN)
        rc, task2 = hbdsp.hbDSPRpc(block, out, ctrl)
        assert hbdsp.hbDSPWaitTaskDone(task2, 0) == hbdsp.HB_DSP_TASK_FAILED
        assert "must lie in the call's output buffer" in task2.error


def test_the_declarations_for_type_checkers_are_current_and_match_the_calls():
    import ast
    from pathlib import Path

    stub = Path(hbdsp_cv.__file__).with_name(hbdsp_cv.STUB)
    assert stub.read_text() == hbdsp_cv.declarations(), "run python tools/cv_stubs.py"
    tree = ast.parse(stub.read_text())
    functions = {n.name: [a.arg for a in n.args.args] for n in tree.body
                 if isinstance(n, ast.FunctionDef)}
    structs = {n.name: [s.target.id for s in n.body if isinstance(s, ast.AnnAssign)]
               for n in tree.body if isinstance(n, ast.ClassDef)}
    ops = cv.cv_operators()
    assert set(functions) | set(structs) == set(hbdsp_cv.names())
    for op in ops:
        name = f"hbDSP{op.c_name}"
        assert functions[name] == [*op.inputs, "dst", "param", "ctrl"], name
        made = getattr(hbdsp_cv, f"{name}Param")()
        assert structs[f"{name}Param"] == list(vars(made)) == [p.name for p in op.params]
