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
from emu.runtime import hbdsp, hbdsp_cv, hbsys, session
from emu.soc.clock import report_ms
from emu.vdsp.ops import cv, image_args
from emu.workloads import dsp_cv
from tests.capi.conftest import CC, ROOT, SAMPLES, python_run, run
from tests.runtime.port_kit import PHOTOS

pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler (cc or gcc) on this machine")


def test_the_cv_header_is_the_operator_tables():
    assert (ROOT / cv_header.PATH).read_text() == cv_header.text(), \
        "c/include/hb_dsp_cv.h is stale: run python tools/cv_header.py"


def test_every_hbdsp_function_of_the_headers_is_exported_once_per_operator():
    """The headers' hbDSP prototypes are exactly the functions dsp_calls registers: the
    RPC's four and one per operator of the table."""
    from emu.capi import build, calls, dsp_calls  # noqa: F401  (registers the exports)

    _, functions = build.declarations()
    declared = {re.search(r"(\w+)\s*\(", f).group(1) for f in functions.splitlines()}
    exported = {n for n in calls.exported() if n.startswith("hbDSP")}
    want = {"hbDSPRpc", "hbDSPWaitTaskDone", "hbDSPReleaseTask", "hbDSPGetErrorDesc"} | {
        f"hbDSP{op.c_name}" for op in cv.cv_operators()}
    assert {n for n in declared if n.startswith("hbDSP")} == exported == want


def test_the_status_values_of_hb_dsp_h_are_the_python_apis(built, tmp_path):
    _, compile_c = built
    names = [n for n in dir(hbdsp) if re.fullmatch(r"HB_DSP_[A-Z0-9_]+", n)
             and isinstance(getattr(hbdsp, n), int)]  # statuses, cores, priorities
    names += [n for n in dir(hbdsp_cv) if n.startswith("HB_DSP_IMAGE_")]
    source = tmp_path / "values.c"
    source.write_text('#include <stdio.h>\n#include "hb_dsp_cv.h"\nint main(void) {\n'
                      + "".join(f'  printf("{n} %d\\n", (int)({n}));\n' for n in names)
                      + "  return 0;\n}\n")
    printed = run(compile_c(source, "dsp_values")).stdout.splitlines()
    want = {n: str(getattr(hbdsp if hasattr(hbdsp, n) else hbdsp_cv, n)) for n in names}
    assert dict(line.split() for line in printed) == want and len(want) > 15


def _image(mem, width, height):
    image = hbdsp_cv.hbDSPImage()
    image.mem, image.width, image.height, image.stride = mem, width, height, width * 3
    image.format = hbdsp_cv.HB_DSP_IMAGE_U8C3
    return image


def _python_resize(bgr, out_w, out_h, interpolation, blur=0):
    """The sample's calls, made from Python in its order: the picture written out and the
    simulated ps from "rpc begin" to "rpc finish"."""
    _, host = session.caller()
    h, w = bgr.shape[:2]
    src_mem, dst_mem, blur_mem = hbsys.hbSysMem(), hbsys.hbSysMem(), hbsys.hbSysMem()
    assert hbsys.hbSysAllocCachedMem(src_mem, w * h * 3) == 0
    src_mem.virAddr[:] = bgr.reshape(-1)  # memcpy
    assert hbsys.hbSysAllocCachedMem(dst_mem, out_w * out_h * 3) == 0
    if blur:
        assert hbsys.hbSysAllocCachedMem(blur_mem, out_w * out_h * 3) == 0
    out_mem = blur_mem if blur else dst_mem
    src, dst = _image(src_mem, w, h), _image(dst_mem, out_w, out_h)
    param = hbdsp_cv.hbDSPResizeParam()
    param.dsizeWidth, param.dsizeHeight, param.interpolation = out_w, out_h, interpolation
    blur_param = hbdsp_cv.hbDSPGaussianBlurParam()
    blur_param.ksizeX = blur_param.ksizeY = blur
    ctrl = hbdsp.hbDSPRpcCtrlParam()
    begin = host.now_ps
    assert hbsys.hbSysFlushMem(src_mem, hbsys.HB_SYS_MEM_CACHE_CLEAN) == 0
    rc, task = hbdsp_cv.hbDSPResize(src, dst, param, ctrl)
    assert rc == 0 and hbdsp.hbDSPWaitTaskDone(task, 0) == 0
    if blur:
        rc, blur_task = hbdsp_cv.hbDSPGaussianBlur(dst, _image(blur_mem, out_w, out_h),
                                                   blur_param, ctrl)
        assert rc == 0 and hbdsp.hbDSPWaitTaskDone(blur_task, 0) == 0
    assert hbsys.hbSysFlushMem(out_mem, hbsys.HB_SYS_MEM_CACHE_INVALIDATE) == 0
    rpc_ps = host.now_ps - begin
    assert hbdsp.hbDSPReleaseTask(task) == 0
    assert not blur or hbdsp.hbDSPReleaseTask(blur_task) == 0
    out = out_mem.virAddr.reshape(out_h, out_w, 3).copy()
    for mem in (src_mem, dst_mem, blur_mem) if blur else (src_mem, dst_mem):
        assert hbsys.hbSysFreeMem(mem) == 0
    return out, rpc_ps


@pytest.mark.parametrize(("picture", "size", "interpolation", "flag", "blur"), [
    ("coffee.png", (150, 100), 1, cv2.INTER_LINEAR, 0),
    ("astronaut.png", (128, 128), 3, cv2.INTER_AREA, 0),
    ("chelsea.png", (300, 200), 0, cv2.INTER_NEAREST, 0),
    ("rocket.jpg", (160, 240), 1, cv2.INTER_LINEAR, 5)])
def test_the_dsp_resize_sample_is_opencvs_picture_and_the_python_programs_time(
        built, tmp_path, picture, size, interpolation, flag, blur):
    _, compile_c = built
    exe = compile_c(SAMPLES / "dsp_cv_resize.c", "dsp_cv_resize")
    bgr = cv2.imread(str(PHOTOS / picture))
    src = tmp_path / "src.ppm"
    assert cv2.imwrite(str(src), bgr)
    runs = []
    for k in range(2):
        env = {"EMU_REPORT": str(tmp_path / f"r{k}.json"),
               "EMU_TRACE": str(tmp_path / f"t{k}.json")}
        done = run(exe, src, *size, tmp_path / f"out{k}.ppm", interpolation, blur, env=env)
        assert done.returncode == 0, done.stderr
        runs.append([done.stdout] + [(tmp_path / f"{n}{k}.json").read_bytes() for n in "rt"]
                    + [(tmp_path / f"out{k}.ppm").read_bytes()])
    assert runs[0] == runs[1]  # stdout, report, trace and picture, byte for byte
    got = cv2.imread(str(tmp_path / "out0.ppm"))
    want = cv2.resize(bgr, size, interpolation=flag)
    if blur:
        want = cv2.GaussianBlur(want, (blur, blur), 0)
    np.testing.assert_array_equal(got, want)
    (out, rpc_ps), report = python_run(lambda: _python_resize(bgr, *size, interpolation, blur))
    np.testing.assert_array_equal(got, out)
    assert json.loads(runs[0][1])["stats"] == report["stats"]
    rpc_ms = float(re.search(r"rpc ([0-9.]+) ms", runs[0][0]).group(1))
    assert 0 < rpc_ms < json.loads(runs[0][1])["results"]["simulated_ms"]
    assert abs(rpc_ms - rpc_ps / 1e9) <= 1e-6  # the clock's nanoseconds, each end truncated
    if not blur:  # one operator: `emu dsp cv`'s host program and its rpc window
        op = cv.cv_operator("resize")
        values = {**op.defaults(), "dsizeWidth": size[0], "dsizeHeight": size[1],
                  "interpolation": interpolation}
        (_, workload), _ = python_run(lambda: dsp_cv.run_op(op, [bgr], values))
        assert workload["rpc_ms"] == report_ms(rpc_ps)


def test_misuse_of_hbdsp_from_c_returns_the_apis_codes(built):
    _, compile_c = built
    done = run(compile_c(Path(__file__).with_name("dsp_misuse.c"), "dsp_misuse"))
    assert done.returncode == 0, done.stderr
    got = dict(line.split() for line in done.stdout.splitlines())
    bad, task = str(hbdsp.HB_DSP_INVALID_ARGUMENT), str(hbdsp.HB_DSP_INVALID_TASK_HANDLE)
    assert got == {
        "alloc_in": "0", "alloc_out": "0", "resize_default_size": bad, "resize_null_task": bad,
        "resize_null_param": bad, "resize_null_ctrl": bad, "resize_null_src": bad,
        "resize_null_dst": bad, "failed_call_left_task": "1", "resize_bad_interpolation": bad,
        "resize_bad_core": bad, "resize_bent_pointer": bad, "resize_short_stride": bad,
        "blur_even_kernel": bad, "blur_dst_past_its_buffer": bad,
        "resize": "0", "free_in_use": str(hbsys.HB_SYS_MEM_IN_USE), "wait_bad_handle": task,
        "wait": "0", "release": "0", "release_again": task, "wait_released": task,
        "wait_null_handle": task, "release_null_handle": task,
        "rpc_no_command": str(hbdsp.HB_DSP_UNKNOWN_COMMAND),
        "rpc_unknown_command": str(hbdsp.HB_DSP_UNKNOWN_COMMAND), "rpc_null_input": bad,
        "free_out": "0", "resize_freed_dest": bad, "rpc_freed_output": bad, "free_in": "0",
        "resize_freed_source": bad, "free_again": str(hbsys.HB_SYS_INVALID_MEMORY),
        "error_text": "0", "error_text_unknown": "0"}
    # the refusals say why, as the Python API logs them; the emulator itself never failed
    for reason in ("ksizeX must be odd", "runs past its 768 B buffer", "interpolation",
                   "dst.mem is not a live hbSysMem buffer"):
        assert reason in done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr


# --- every operator of the table from C -------------------------------------------------------

def _c_literal(path: Path) -> str:
    return '"' + str(path).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _image_fields(array, nv12=False):
    """(width, height, stride, format) of an image as dsp_cv.run_op describes it."""
    rows = array.shape[0]
    height = rows * 2 // 3 if nv12 else rows
    channels = array.shape[2] if array.ndim == 3 else 1
    fmt = hbdsp_cv.HB_DSP_IMAGE_NV12 if nv12 else hbdsp_cv.format_of(
        channels, image_args.type_code(array.dtype))
    return array.shape[1], height, array.nbytes // rows, fmt


def _every_operator_program(folder: Path, picture) -> tuple[str, dict[str, tuple]]:
    """A C program that runs every operator of the table once, with its header's defaults,
    in dsp_cv.run_op's order of calls (allocate the inputs and the destination, clean,
    call, wait, invalidate, release, free), printing each parameter the initialiser set and
    each status and writing each output to a file; and per operator its inputs and output's
    (shape, dtype)."""
    lines = ['#include <stdio.h>', '#include <string.h>', '#include "hb_dsp_cv.h"', "",
             "static int load(hbSysMem *mem, const char *path, uint32_t size) {",
             "  if (hbSysAllocCachedMem(mem, size) != 0) return -1;",
             '  FILE *f = fopen(path, "rb");', "  if (f == NULL) return -1;",
             "  size_t got = fread(mem->virAddr, 1, size, f);", "  fclose(f);",
             "  return got == size ? 0 : -1;", "}", "",
             "static int save(const hbSysMem *mem, const char *path, uint32_t size) {",
             '  FILE *f = fopen(path, "wb");', "  if (f == NULL) return -1;",
             "  size_t put = fwrite(mem->virAddr, 1, size, f);",
             "  return fclose(f) == 0 && put == size ? 0 : -1;", "}", "",
             "#define SHOW(name, call) printf(\"%s %d\\n\", name, (int)(call))", "",
             "int main(void) {"]
    plan = {}
    for op in cv.cv_operators():
        name = op.c_name
        inputs = op.prepare(picture)
        records = [image_args.Image(a.shape[1], a.shape[0], a.shape[2] if a.ndim == 3 else 1,
                                    image_args.type_code(a.dtype), a.nbytes // a.shape[0], 0)
                   for a in inputs]
        spec = op.output(records, op.defaults())
        shape, dtype = dsp_cv.output_shape(spec)
        out = np.zeros(shape, dtype)
        plan[name] = (op, inputs, shape, dtype)
        lines += ["  {", f"    /* {op.name} */"]
        for k, array in enumerate(inputs):
            raw = folder / f"{name}_in{k}.raw"
            np.ascontiguousarray(array).tofile(raw)
            w, h, stride, fmt = _image_fields(array)
            lines += [f"    hbSysMem m{k};",
                      f'    SHOW("{name}.load{k}", load(&m{k}, {_c_literal(raw)}, '
                      f"{max(array.nbytes, 1)}));",
                      f"    hbDSPImage i{k} = {{m{k}, 0, {w}, {h}, {stride}, {fmt}}};"]
        w, h, stride, fmt = _image_fields(out, nv12=spec[4] == 2)
        lines += ["    hbSysMem dm;",
                  f'    SHOW("{name}.alloc", hbSysAllocCachedMem(&dm, {max(out.nbytes, 1)}));',
                  f"    memset(dm.virAddr, 0, {out.nbytes});",
                  f"    hbDSPImage dst = {{dm, 0, {w}, {h}, {stride}, {fmt}}};",
                  f"    hbDSP{name}Param param;", f"    {cv_header.macro_name(op)}(&param);"]
        for p in op.params:
            fields = [f"{p.name}[{k}]" for k in range(p.count)] if p.kind == "reals" \
                else [p.name]
            for f in fields:
                form = '"%d"' if p.kind in ("int", "choice") else '"%.17g"'
                lines.append(f'    printf("{name}.{f} " {form} "\\n", param.{f});')
        lines += ["    hbDSPRpcCtrlParam ctrl;", "    HB_DSP_INITIALIZE_RPC_CTRL_PARAM(&ctrl);"]
        lines += [f"    hbSysFlushMem(&m{k}, HB_SYS_MEM_CACHE_CLEAN);" for k in range(len(inputs))]
        images = "".join(f"&i{k}, " for k in range(len(inputs)))
        lines += ["    hbDSPTask_t task = NULL;",
                  f'    SHOW("{name}.call", hbDSP{name}(&task, {images}&dst, &param, &ctrl));',
                  f'    SHOW("{name}.wait", hbDSPWaitTaskDone(task, 0));',
                  "    hbSysFlushMem(&dm, HB_SYS_MEM_CACHE_INVALIDATE);",
                  f'    SHOW("{name}.release", hbDSPReleaseTask(task));',
                  f'    SHOW("{name}.save", save(&dm, {_c_literal(folder / f"{name}_out.raw")}, '
                  f"{out.nbytes}));"]
        lines += [f"    hbSysFreeMem(&m{k});" for k in range(len(inputs))]
        lines += ["    hbSysFreeMem(&dm);", "  }"]
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n", plan


def _python_every_operator(plan):
    """The same calls from Python: each operator's output."""
    return {name: dsp_cv.run_op(op, inputs, op.defaults())[0]
            for name, (op, inputs, _, _) in plan.items()}


def test_every_operator_from_c_is_the_python_apis_call(built, tmp_path):
    """Each generated export and initialiser, end to end: the header's defaults are the
    Python struct's, every operator's output is the Python API's bytes and the whole run's
    statistics are the same calls' from Python."""
    _, compile_c = built
    picture = cv2.imread(str(PHOTOS / "astronaut.png"))[:360, :480]  # RoiResize's default ROI
    source, plan = _every_operator_program(tmp_path, picture)
    (tmp_path / "every_op.c").write_text(source)
    report_path = tmp_path / "report.json"
    done = run(compile_c(tmp_path / "every_op.c", "dsp_every_op"),
               env={"EMU_REPORT": str(report_path)})
    assert done.returncode == 0, done.stderr
    printed = dict(line.split() for line in done.stdout.splitlines())
    assert len(plan) == len(cv.cv_operators()) == 25
    for op in cv.cv_operators():
        for step in ("alloc", "call", "wait", "release", "save"):
            assert printed[f"{op.c_name}.{step}"] == "0", (op.c_name, step, done.stderr)
        for p in op.params:
            if p.kind == "reals":
                got = tuple(float(printed[f"{op.c_name}.{p.name}[{k}]"])
                            for k in range(p.count))
                assert got == tuple(p.default), (op.c_name, p.name)
            else:
                kind = int if p.kind in ("int", "choice") else float
                assert kind(printed[f"{op.c_name}.{p.name}"]) == p.default, (op.c_name, p.name)
    outputs, report = python_run(lambda: _python_every_operator(plan))
    for name, (_, _, shape, dtype) in plan.items():
        got = np.fromfile(tmp_path / f"{name}_out.raw", dtype).reshape(shape)
        np.testing.assert_array_equal(got, outputs[name], err_msg=name)
    assert json.loads(report_path.read_text())["stats"] == report["stats"]
