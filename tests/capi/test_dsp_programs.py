"""hbDSP from C: the generated CV header is current, the status values are the Python API's,
the sample's DSP resize is OpenCV's picture and the Python program's timeline, runs repeat
byte for byte, misuse gets the API's codes."""

import json
import re
from pathlib import Path

import cv2
import numpy as np
import pytest

from emu.capi import cv_header
from emu.runtime import hbdsp, hbdsp_cv, hbsys
from tests.capi.conftest import CC, ROOT, SAMPLES, python_run, run
from tests.runtime.port_kit import PHOTOS

pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler (cc or gcc) on this machine")


def test_the_cv_header_is_the_operator_tables():
    assert (ROOT / cv_header.PATH).read_text() == cv_header.text(), \
        "c/include/hb_dsp_cv.h is stale: run python tools/cv_header.py"


def test_the_status_values_of_hb_dsp_h_are_the_python_apis(built, tmp_path):
    _, compile_c = built
    names = [n for n in dir(hbdsp) if re.fullmatch(r"HB_DSP_[A-Z_]+", n)
             and isinstance(getattr(hbdsp, n), int) and not n.startswith("HB_DSP_CORE")]
    names += [n for n in dir(hbdsp_cv) if n.startswith("HB_DSP_IMAGE_")]
    source = tmp_path / "values.c"
    source.write_text('#include <stdio.h>\n#include "hb_dsp_cv.h"\nint main(void) {\n'
                      + "".join(f'  printf("{n} %d\\n", (int)({n}));\n' for n in names)
                      + "  return 0;\n}\n")
    printed = run(compile_c(source, "dsp_values")).stdout.splitlines()
    want = {n: str(getattr(hbdsp if hasattr(hbdsp, n) else hbdsp_cv, n)) for n in names}
    assert dict(line.split() for line in printed) == want and len(want) > 15


def _python_resize(bgr, out_w, out_h, interpolation):
    """The sample's calls, made from Python: the resized picture."""
    h, w = bgr.shape[:2]
    src_mem, dst_mem = hbsys.hbSysMem(), hbsys.hbSysMem()
    assert hbsys.hbSysAllocCachedMem(src_mem, w * h * 3) == 0
    src_mem.virAddr[:] = bgr.reshape(-1)  # memcpy
    assert hbsys.hbSysFlushMem(src_mem, hbsys.HB_SYS_MEM_CACHE_CLEAN) == 0
    assert hbsys.hbSysAllocCachedMem(dst_mem, out_w * out_h * 3) == 0
    images = []
    for mem, iw, ih in ((src_mem, w, h), (dst_mem, out_w, out_h)):
        image = hbdsp_cv.hbDSPImage()
        image.mem, image.width, image.height, image.stride = mem, iw, ih, iw * 3
        image.format = hbdsp_cv.HB_DSP_IMAGE_U8C3
        images.append(image)
    param = hbdsp_cv.hbDSPResizeParam()
    param.dsizeWidth, param.dsizeHeight, param.interpolation = out_w, out_h, interpolation
    ctrl = hbdsp.hbDSPRpcCtrlParam()
    rc, task = hbdsp_cv.hbDSPResize(*images, param, ctrl)
    assert rc == 0 and hbdsp.hbDSPWaitTaskDone(task, 0) == 0
    assert hbdsp.hbDSPReleaseTask(task) == 0
    assert hbsys.hbSysFlushMem(dst_mem, hbsys.HB_SYS_MEM_CACHE_INVALIDATE) == 0
    out = dst_mem.virAddr.reshape(out_h, out_w, 3).copy()
    assert hbsys.hbSysFreeMem(src_mem) == 0 and hbsys.hbSysFreeMem(dst_mem) == 0
    return out


@pytest.mark.parametrize(("picture", "size", "interpolation", "flag"), [
    ("coffee.png", (150, 100), 1, cv2.INTER_LINEAR),
    ("astronaut.png", (128, 128), 3, cv2.INTER_AREA),
    ("chelsea.png", (300, 200), 0, cv2.INTER_NEAREST)])
def test_the_dsp_resize_sample_is_opencvs_picture_and_the_python_programs_time(
        built, tmp_path, picture, size, interpolation, flag):
    _, compile_c = built
    exe = compile_c(SAMPLES / "dsp_cv_resize.c", "dsp_cv_resize")
    bgr = cv2.imread(str(PHOTOS / picture))
    src = tmp_path / "src.ppm"
    assert cv2.imwrite(str(src), bgr)
    runs = []
    for k in range(2):
        env = {"EMU_REPORT": str(tmp_path / f"r{k}.json"),
               "EMU_TRACE": str(tmp_path / f"t{k}.json")}
        done = run(exe, src, *size, tmp_path / f"out{k}.ppm", interpolation, env=env)
        assert done.returncode == 0, done.stderr
        runs.append([done.stdout] + [(tmp_path / f"{n}{k}.json").read_bytes() for n in "rt"]
                    + [(tmp_path / f"out{k}.ppm").read_bytes()])
    assert runs[0] == runs[1]  # stdout, report, trace and picture, byte for byte
    got = cv2.imread(str(tmp_path / "out0.ppm"))
    np.testing.assert_array_equal(got, cv2.resize(bgr, size, interpolation=flag))
    out, report = python_run(lambda: _python_resize(bgr, *size, interpolation))
    np.testing.assert_array_equal(got, out)
    assert json.loads(runs[0][1])["stats"] == report["stats"]
    rpc_ms = float(re.search(r"rpc ([0-9.]+) ms", runs[0][0]).group(1))
    assert 0 < rpc_ms < json.loads(runs[0][1])["results"]["simulated_ms"]


def test_misuse_of_hbdsp_from_c_returns_the_apis_codes(built):
    _, compile_c = built
    done = run(compile_c(Path(__file__).with_name("dsp_misuse.c"), "dsp_misuse"))
    assert done.returncode == 0, done.stderr
    got = dict(line.split() for line in done.stdout.splitlines())
    bad, task = str(hbdsp.HB_DSP_INVALID_ARGUMENT), str(hbdsp.HB_DSP_INVALID_TASK_HANDLE)
    assert got == {
        "alloc_in": "0", "alloc_out": "0", "resize_default_size": bad, "resize_null_task": bad,
        "resize_null_param": bad, "resize_null_ctrl": bad, "resize_bad_interpolation": bad,
        "resize_bad_core": bad, "resize_bent_pointer": bad, "resize_short_stride": bad,
        "resize": "0", "free_in_use": str(hbsys.HB_SYS_MEM_IN_USE), "wait_bad_handle": task,
        "wait": "0", "release": "0", "release_again": task, "wait_released": task,
        "rpc_no_command": str(hbdsp.HB_DSP_UNKNOWN_COMMAND),
        "rpc_unknown_command": str(hbdsp.HB_DSP_UNKNOWN_COMMAND), "rpc_null_input": bad,
        "free_in": "0", "resize_freed_source": bad, "free_out": "0", "error_text": "0"}
    assert "Traceback" not in done.stderr
