"""libemu_rt's hbDSP functions (`hb_dsp.h`, `hb_dsp_cv.h`): the RPC, waits and releases,
and one CV call per operator of the table, registered in a loop from it (the C side is
the generated header, `emu/capi/cv_header.py`)."""

from __future__ import annotations

from typing import Any

from emu.capi.calls import Runtime, export
from emu.runtime import hbdsp, hbdsp_cv
from emu.vdsp.ops import cv

_dsp = export(hbdsp.HB_DSP_WRONG_THREAD, hbdsp.HB_DSP_INVALID_ARGUMENT)  # an hbDSP function
_INVALID = hbdsp.HB_DSP_INVALID_ARGUMENT


def _ctrl_in(c: Any) -> hbdsp.hbDSPRpcCtrlParam:
    ctrl = hbdsp.hbDSPRpcCtrlParam()
    ctrl.dspCoreId, ctrl.rpcCmd, ctrl.priority = int(c.dspCoreId), int(c.rpcCmd), int(c.priority)
    ctrl.customId, ctrl.reserved1, ctrl.reserved2 = (int(c.customId), int(c.reserved1),
                                                     int(c.reserved2))
    return ctrl


@_dsp
def hbDSPRpc(rt: Runtime, task: Any, input: Any, output: Any, ctrl: Any) -> int:
    if any(rt.null(p) for p in (task, input, output, ctrl)):
        return _INVALID
    return rt.handle_out(task, hbdsp.hbDSPRpc(rt.mem_in(input), rt.mem_in(output),
                                             _ctrl_in(ctrl)))


@_dsp
def hbDSPWaitTaskDone(rt: Runtime, task: Any, timeout: int) -> int:
    return hbdsp.hbDSPWaitTaskDone(rt.handle(task), int(timeout))


@_dsp
def hbDSPReleaseTask(rt: Runtime, task: Any) -> int:
    return hbdsp.hbDSPReleaseTask(rt.handle(task))


@export(refused=0, failed=None, direct=True)
def hbDSPGetErrorDesc(rt: Runtime, code: int) -> Any:
    return rt.string(hbdsp.hbDSPGetErrorDesc(int(code)))


def _image_in(rt: Runtime, c: Any) -> hbdsp_cv.hbDSPImage:
    image = hbdsp_cv.hbDSPImage()
    image.mem = rt.mem_in(c.mem)
    image.offset, image.width, image.height = int(c.offset), int(c.width), int(c.height)
    image.stride, image.format = int(c.stride), int(c.format)
    return image


def _param_in(op: cv.CvOp, c: Any) -> Any:
    param = getattr(hbdsp_cv, f"hbDSP{op.c_name}Param")()
    for p in op.params:
        value = getattr(c, p.name)
        setattr(param, p.name, [float(value[k]) for k in range(p.count)] if p.kind == "reals"
                else float(value) if p.kind == "real" else int(value))
    return param


def _cv_call(op: cv.CvOp) -> None:
    function = getattr(hbdsp_cv, f"hbDSP{op.c_name}")

    def call(rt: Runtime, task: Any, *args: Any) -> int:
        *images, dst, param, ctrl = args
        if any(rt.null(p) for p in (task, *images, dst, param, ctrl)):
            return _INVALID
        return rt.handle_out(task, function(*(_image_in(rt, im) for im in images),
                                            _image_in(rt, dst), _param_in(op, param),
                                            _ctrl_in(ctrl)))

    export(hbdsp.HB_DSP_WRONG_THREAD, _INVALID, name=f"hbDSP{op.c_name}")(call)


for _op in cv.cv_operators():
    _cv_call(_op)
