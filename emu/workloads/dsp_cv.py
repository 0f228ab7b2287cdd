"""Workload `emu dsp cv`: the DSP's CV operators on an image, as the board's sample runs them.

The host program is the sample's: put the image in a cached pool buffer; then, between its
"rpc begin" and "rpc finish" log lines, clean the source buffers, call the operator's
`hbDSP<Name>` with its parameter struct, wait, and invalidate the destination; then read
it. `run_op` does that for one operator in the current session and reports where the
simulated time went (`rpc_ms`: that window, which the board's logged round trips in
`shared/calibration/j5_cv.md` measure; iDMA in and out; the kernels' compute) with the
cycles, bytes, tiles and TCM high-water mark behind it. `sample_inputs` makes an operator's
inputs from one picture (grey or RGB as the operator takes; maps and matrices it needs are
part of its defaults), so `emu dsp cv --all` can run every operator on one image.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from emu.errors import InputError
from emu.runtime import hbdsp, hbdsp_cv, hbsys, session
from emu.soc.clock import Clock, report_ms
from emu.vdsp.ops import cv, image_args

CORES = {"any": hbdsp.HB_DSP_CORE_ANY, "0": hbdsp.HB_DSP_CORE_0, "1": hbdsp.HB_DSP_CORE_1}



def _image(array: npt.NDArray, nv12: bool = False) -> tuple[hbdsp_cv.hbDSPImage, hbsys.hbSysMem]:
    """A cached pool buffer holding `array` (not yet cleaned), and its hbDSPImage."""
    mem = hbsys.hbSysMem()
    if hbsys.hbSysAllocCachedMem(mem, max(array.nbytes, 1)) != 0:
        raise InputError(f"the pool cannot hold a {array.nbytes} B image (mem.pool_bytes)")
    assert mem.virAddr is not None
    mem.virAddr[:] = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
    im = hbdsp_cv.hbDSPImage()
    im.mem = mem
    if nv12:
        im.height, im.width = array.shape[0] * 2 // 3, array.shape[1]
        im.format = hbdsp_cv.HB_DSP_IMAGE_NV12
    else:
        im.height, im.width = array.shape[:2]
        channels = array.shape[2] if array.ndim == 3 else 1
        im.format = hbdsp_cv.format_of(channels, image_args.type_code(array.dtype))
    im.stride = array.nbytes // array.shape[0]
    return im, mem


def output_shape(spec: cv.OutputSpec) -> tuple[tuple[int, ...], np.dtype]:
    """The numpy shape and dtype of an output image."""
    width, height, channels, etype, planes = spec
    rows = height + (height // 2 if planes == 2 else 0)
    shape = (rows, width) + ((channels,) if channels > 1 else ())
    return shape, image_args.DTYPES[etype]


def run_op(op: cv.CvOp, inputs: Sequence[npt.NDArray], values: dict[str, Any], *,
           core: str = "any") -> tuple[npt.NDArray, dict[str, Any]]:
    """Run `op` on `inputs` with `values` (every parameter) in the current session: its
    output image and its report. InputError for inputs or values the operator refuses."""
    sess, host = session.caller()
    records = [image_args.Image(a.shape[1], a.shape[0], a.shape[2] if a.ndim == 3 else 1,
                                image_args.type_code(a.dtype), a.nbytes // a.shape[0], 0)
               for a in inputs]
    try:
        checked = {p.name: p.check(values[p.name], op.name) for p in op.params}
        spec = op.output(records, checked)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    shape, dtype = output_shape(spec)
    before = _counters(sess)
    started = host.now_ps
    images = [_image(a) for a in inputs]
    out = np.zeros(shape, dtype)
    dst, dst_mem = _image(out, nv12=spec[4] == 2)
    param = getattr(hbdsp_cv, f"hbDSP{op.c_name}Param")()
    for name, value in checked.items():
        setattr(param, name, value)
    ctrl = hbdsp.hbDSPRpcCtrlParam()
    hbdsp.HB_DSP_INITIALIZE_RPC_CTRL_PARAM(ctrl)
    ctrl.dspCoreId = CORES[core]
    call = host.now_ps  # "rpc begin"
    for _, mem in images:
        hbsys.hbSysFlushMem(mem, hbsys.HB_SYS_MEM_CACHE_CLEAN)
    rc, task = getattr(hbdsp_cv, f"hbDSP{op.c_name}")(*(im for im, _ in images), dst, param,
                                                      ctrl)
    if rc != 0 or task is None:
        raise InputError(f"hbDSP{op.c_name}: {hbdsp.hbDSPGetErrorDesc(rc)}")
    rc = hbdsp.hbDSPWaitTaskDone(task, 0)
    if rc == 0:
        hbsys.hbSysFlushMem(dst_mem, hbsys.HB_SYS_MEM_CACHE_INVALIDATE)
    rpc_ps = host.now_ps - call  # "rpc finish"
    ran_on = task.task.ran_on[-1] if task.task.ran_on else None
    error = task.error
    hbdsp.hbDSPReleaseTask(task)
    if rc != 0:
        raise InputError(f"{op.name}: {error or hbdsp.hbDSPGetErrorDesc(rc)}")
    assert dst_mem.virAddr is not None
    result = np.frombuffer(dst_mem.virAddr[: out.nbytes].tobytes(), dtype).reshape(shape)
    total_ps = host.now_ps - started
    for _, mem in [*images, (dst, dst_mem)]:
        hbsys.hbSysFreeMem(mem)
    used = {k: v - before.get(k, 0) for k, v in _counters(sess).items()}
    cfg = sess.config.vdsp
    clock = Clock("vdsp", cfg.freq_hz)
    pixels = spec[0] * spec[1]
    report = {
        "op": op.name,
        "cmd": op.cmd,
        "inputs": [r.describe() for r in records],
        "output": image_args.Image(*spec[:4], 0, 0, spec[4]).describe(),
        "core": ran_on,
        "rpc_ms": report_ms(rpc_ps),
        "compute_ms": report_ms(clock.cycles_to_ps(used["kernel_cycles"])),
        "idma_in_ms": report_ms(used["busy_in_ps"]),
        "idma_out_ms": report_ms(used["busy_out_ps"]),
        "total_ms": report_ms(total_ps),
        "kernel_cycles": used["kernel_cycles"],
        "cycles_per_pixel": round(used["kernel_cycles"] / pixels, 4),
        "bundles": used["bundles"],
        "gather_cycles": used["gather_cycles"],
        "kernel_calls": used["kernel_calls"],
        "idma_in_bytes": used["bytes_in"],
        "idma_out_bytes": used["bytes_out"],
        "idma_descriptors": used["descriptors"],
        "tcm_high_water_bytes": _high_water(sess, ran_on),
    }
    return result, report


def _counters(sess: session.Session) -> dict[str, int]:
    """Totals over both cores of the counters a report needs."""
    tree = sess.stats()["vdsp"]
    out: dict[str, int] = {}
    for index in range(sess.config.vdsp.cores):
        hw = tree[f"core{index}"]
        for key in ("kernel_cycles", "bundles", "gather_cycles", "kernel_calls"):
            out[key] = out.get(key, 0) + hw.get(key, 0)
        for channel in hw["idma"].values():
            for key in ("busy_in_ps", "busy_out_ps", "bytes_in", "bytes_out", "descriptors"):
                out[key] = out.get(key, 0) + channel.get(key, 0)
    return out


def _high_water(sess: session.Session, core: int | None) -> list[int]:
    """Per TCM bank, the most bytes of it operators held at once on `core` this session."""
    if core is None:
        return []
    tcm = sess.stats()["vdsp"][f"core{core}"]["tcm"]
    return [tcm.get(f"bank{b}_high_water_bytes", 0) for b in range(sess.config.vdsp.tcm.banks)]


def sample_inputs(op: cv.CvOp, picture: npt.NDArray) -> list[npt.NDArray]:
    """The inputs `op` takes, made from one picture (uint8 grey or RGB; other types are
    given to the operator as they are)."""
    return op.prepare(np.ascontiguousarray(picture))


def warm(*names: str) -> None:
    """Run the operators `names` with their default values on the standard image, each in
    a session of its own, for their kernels only: what `emu dsp cv --all` starts on a
    second core for the back half of the table (`emu.jit.compile_aside`)."""
    from emu.workloads import images

    picture = images.standard()
    for name in names:
        op = cv.cv_operator(name)
        if op is None:
            raise InputError(f"no CV operator {name!r}")
        with session.Session():
            run_op(op, sample_inputs(op, picture), op.defaults())
