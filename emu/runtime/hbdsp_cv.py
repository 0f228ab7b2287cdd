"""hbDSP CV: the ARM side of the DSP's computer-vision library, one C-named call per operator.

    src, dst = hbDSPImage(), hbDSPImage()
    src.mem, src.width, src.height, src.stride, src.format = mem, 640, 480, 640, HB_DSP_IMAGE_U8C1
    ...                                                  # dst likewise, for the output
    param = hbDSPGaussianBlurParam()                     # the operator's defaults
    param.ksizeX, param.ksizeY, param.sigmaX = 5, 5, 1.2
    ctrl = hbDSPRpcCtrlParam(); HB_DSP_INITIALIZE_RPC_CTRL_PARAM(ctrl)
    rc, task = hbDSPGaussianBlur(src, dst, param, ctrl)  # queued; returns at once
    rc = hbDSPWaitTaskDone(task, 0)
    rc = hbDSPReleaseTask(task)

An `hbDSPImage` names an image in an `hbSysMem` buffer of the session's pool (`offset` bytes
in, rows `stride` bytes apart); the DSP reads and writes the images where they are, so the
caller cleans a source it wrote and invalidates the destination before reading it, as for
any DSP call. Each operator of `emu.vdsp.ops.cv` has its function (`hbDSP<Name>`, taking
its input images, the destination, its `hbDSP<Name>Param` and the control struct) and its
parameter struct, both made from the operator table on first use. A call allocates the
small argument block the DSP reads, keeps the images pinned while the task is queued or
running, and frees the block when the task is released. Bad images or parameters (a
destination of the wrong size or format, a kernel size out of range, ...) return
`HB_DSP_INVALID_ARGUMENT` and change nothing, with one line on stderr saying why, as the
board's libraries log a failed call.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from emu.mem.pool import PoolBuffer
from emu.runtime import hbdsp, hbsys, session, status
from emu.runtime.cstruct import CStruct
from emu.vdsp.ops import cv, image_args
from emu.vdsp.ops.image_args import Image

HB_DSP_IMAGE_U8C1, HB_DSP_IMAGE_U8C3, HB_DSP_IMAGE_S16C1, HB_DSP_IMAGE_F32C1 = 1, 2, 3, 4
HB_DSP_IMAGE_S32C1, HB_DSP_IMAGE_U16C1, HB_DSP_IMAGE_NV12, HB_DSP_IMAGE_S16C2 = 5, 6, 7, 8
HB_DSP_IMAGE_F32C2 = 9
FORMATS: dict[int, tuple[int, int, int]] = {
    HB_DSP_IMAGE_U8C1: (1, image_args.TYPE_U8, 1),
    HB_DSP_IMAGE_U8C3: (3, image_args.TYPE_U8, 1),
    HB_DSP_IMAGE_S16C1: (1, image_args.TYPE_S16, 1),
    HB_DSP_IMAGE_S16C2: (2, image_args.TYPE_S16, 1),
    HB_DSP_IMAGE_F32C1: (1, image_args.TYPE_F32, 1),
    HB_DSP_IMAGE_F32C2: (2, image_args.TYPE_F32, 1),
    HB_DSP_IMAGE_S32C1: (1, image_args.TYPE_S32, 1),
    HB_DSP_IMAGE_U16C1: (1, image_args.TYPE_U16, 1),
    HB_DSP_IMAGE_NV12: (1, image_args.TYPE_U8, 2),
}
"""Image format -> (channels, element type, planes)."""

BORDER_CONSTANT = cv.BORDER_CONSTANT
BORDER_REPLICATE = cv.BORDER_REPLICATE
BORDER_REFLECT = cv.BORDER_REFLECT
BORDER_REFLECT_101 = cv.BORDER_REFLECT_101


def format_of(channels: int, etype: int, planes: int = 1) -> int:
    """The format constant of an image kind; ValueError when there is none."""
    for code, kind in FORMATS.items():
        if kind == (channels, etype, planes):
            return code
    raise ValueError(f"no image format has {channels} channel(s) of "
                     f"{image_args.TYPE_NAMES.get(etype, etype)} in {planes} plane(s)")


class hbDSPImage(CStruct):  # the CV library's image struct
    """An image in a pool buffer: `mem`, byte `offset`, size, row `stride`, `format`."""

    mem: Any
    offset: int
    width: int
    height: int
    stride: int
    format: int

    def __init__(self) -> None:
        self.mem = None
        self.offset = 0
        self.width = self.height = self.stride = 0
        self.format = HB_DSP_IMAGE_U8C1


def _record(image: Any, sess: session.Session, name: str) -> tuple[Image, PoolBuffer]:
    """The record and buffer of an hbDSPImage; ValueError saying what is wrong."""
    if not isinstance(image, hbDSPImage):
        raise ValueError(f"{name} is not an hbDSPImage")
    buf = hbsys.buffer_of(image.mem, sess)
    if buf is None:
        raise ValueError(f"{name}.mem is not a live hbSysMem buffer of this session")
    fields = {f: status.as_int(getattr(image, f), 0, image_args.MAX_SIDE * 64)
              for f in ("offset", "width", "height", "stride", "format")}
    bad = [f for f, v in fields.items() if v is None]
    if bad:
        raise ValueError(f"{name}.{bad[0]} must be a non-negative integer, got "
                         f"{getattr(image, bad[0])!r}")
    if fields["format"] not in FORMATS:
        raise ValueError(f"{name}.format {fields['format']} is not an HB_DSP_IMAGE_* format")
    channels, etype, planes = FORMATS[fields["format"]]
    record = Image(fields["width"] or 0, fields["height"] or 0, channels, etype,
                   fields["stride"] or 0, buf.phys_addr + (fields["offset"] or 0), planes)
    if not (1 <= record.width <= image_args.MAX_SIDE and 1 <= record.height
            <= image_args.MAX_SIDE):
        raise ValueError(f"{name} is {record.width}x{record.height}; sides must be "
                         f"1..{image_args.MAX_SIDE}")
    if planes == 2 and (record.width % 2 or record.height % 2):
        raise ValueError(f"{name}: NV12 needs an even width and height, got "
                         f"{record.width}x{record.height}")
    if record.stride < record.row_bytes:
        raise ValueError(f"{name}.stride {record.stride} is shorter than a row of "
                         f"{record.row_bytes} B")
    if (fields["offset"] or 0) + record.nbytes > buf.size_bytes:
        raise ValueError(f"{name} ({record.describe()}, stride {record.stride}, offset "
                         f"{fields['offset']}) runs past its {buf.size_bytes} B buffer")
    return record, buf


def _values(op: cv.CvOp, param: Any, struct: type) -> dict[str, Any]:
    if not isinstance(param, struct):
        raise ValueError(f"param is not an {struct.__name__}")
    return {p.name: p.check(getattr(param, p.name), op.name) for p in op.params}


def check(op: cv.CvOp, images: tuple[Any, ...], dst: Any, param: Any, struct: type
          ) -> tuple[list[Image], Image, list[PoolBuffer], PoolBuffer, dict[str, Any]]:
    """Everything a call needs, checked; ValueError naming the first problem."""
    sess, _ = session.caller()
    records = [_record(im, sess, name) for im, name in zip(images, op.inputs, strict=True)]
    out, out_buf = _record(dst, sess, "dst")
    values = _values(op, param, struct)
    spec = op.output([r for r, _ in records], values)
    if (out.width, out.height, out.channels, out.etype, out.planes) != spec:
        want = Image(*spec[:4], 0, 0, spec[4])
        raise ValueError(f"{op.name}: dst is {out.describe()}, the output is "
                         f"{want.describe()}")
    return [r for r, _ in records], out, [b for _, b in records], out_buf, values


def _api(op: cv.CvOp, struct: type) -> Callable[..., tuple[int, hbdsp.hbDSPTask | None]]:
    n = len(op.inputs)

    @status.c_function((hbdsp.HB_DSP_WRONG_THREAD, None))
    def call(*args: Any) -> tuple[int, hbdsp.hbDSPTask | None]:
        if len(args) != n + 3:
            return hbdsp.HB_DSP_INVALID_ARGUMENT, None
        *images, dst, param, ctrl = args
        try:
            records, out, buffers, _, values = check(op, tuple(images), dst, param, struct)
        except ValueError as exc:
            _log(f"hbDSP{op.c_name}: {exc}")
            return hbdsp.HB_DSP_INVALID_ARGUMENT, None
        if not isinstance(ctrl, hbdsp.hbDSPRpcCtrlParam):
            return hbdsp.HB_DSP_INVALID_ARGUMENT, None
        block = hbsys.hbSysMem()
        rc = hbsys.hbSysAllocCachedMem(block, image_args.ARGS_BYTES)
        if rc != hbsys.HB_SYS_SUCCESS:
            return rc, None
        assert block.virAddr is not None
        block.virAddr[:] = memoryview(image_args.pack(records, out, op.encode(values))).cast("B")
        hbsys.hbSysFlushMem(block, hbsys.HB_SYS_MEM_CACHE_CLEAN)
        saved = ctrl.rpcCmd
        ctrl.rpcCmd = op.cmd
        try:
            rc, task = hbdsp.rpc(block, dst.mem, ctrl, tuple(buffers))
        finally:
            ctrl.rpcCmd = saved
        if task is None:
            hbsys.hbSysFreeMem(block)
            return rc, None
        task.owned.append(block)
        return rc, task

    call.__name__ = call.__qualname__ = f"hbDSP{op.c_name}"
    call.__doc__ = (f"{op.description}. hbDSP{op.c_name}({', '.join(op.inputs)}, dst, param, "
                    f"ctrl) -> (rc, task); param is an hbDSP{op.c_name}Param.")
    return call


def _log(message: str) -> None:
    print(f"[E][hbDSP] {message}", file=sys.stderr)


def _struct(op: cv.CvOp) -> type:
    def init(self: Any) -> None:
        for p in op.params:
            setattr(self, p.name, p.default)

    doc = "; ".join(f"{p.name}: {p.help} (default {p.default})" for p in op.params)
    return type(f"hbDSP{op.c_name}Param", (CStruct,), {"__init__": init, "__doc__": doc,
                                                       "__module__": __name__})


def _make(op: cv.CvOp) -> None:
    struct = _struct(op)
    fn = _api(op, struct)
    globals()[struct.__name__] = struct
    globals()[fn.__name__] = fn


_PYTHON_TYPES = {"int": "int", "choice": "int", "real": "float", "reals": "tuple[float, ...]"}
STUB = "_cv_calls.pyi"  # beside this module: every operator's call and struct, for type checkers


def declarations() -> str:
    """The text of `STUB`: each operator's `hbDSP<Name>Param` struct and `hbDSP<Name>`
    call as type checkers and IDEs should see them (the module makes them at run time).
    `python tools/cv_stubs.py` writes it; a test checks that it is current."""
    lines = ['"""Generated by tools/cv_stubs.py from the operator table (emu/vdsp/ops/cv.py):',
             "every CV operator's call and parameter struct, which emu.runtime.hbdsp_cv makes",
             'at run time. Do not edit."""', "",
             "from emu.runtime.cstruct import CStruct",
             "from emu.runtime.hbdsp import hbDSPRpcCtrlParam, hbDSPTask",
             "from emu.runtime.hbdsp_cv import hbDSPImage"]
    for op in cv.cv_operators():
        name = f"hbDSP{op.c_name}"
        doc = " ".join([f"{op.description[0].upper()}{op.description[1:]}.",
                        *(f"{p.name}: {p.help}." for p in op.params)])
        lines += ["", f"class {name}Param(CStruct):",
                  *textwrap.wrap(f'"""{doc}"""', 96, initial_indent="    ",
                                 subsequent_indent="    ")]
        lines += [f"    {p.name}: {_PYTHON_TYPES[p.kind]}" for p in op.params]
        lines += ["", f"def {name}(", *(f"    {i}: hbDSPImage," for i in op.inputs),
                  "    dst: hbDSPImage,", f"    param: {name}Param,",
                  "    ctrl: hbDSPRpcCtrlParam,",
                  ") -> tuple[int, hbDSPTask | None]: ..."]
    return "\n".join(lines) + "\n"


def names() -> list[str]:
    """The names of every operator's function and parameter struct (`hbDSPBoxFilter`,
    `hbDSPBoxFilterParam`, ...)."""
    return [n for op in cv.cv_operators() for n in (f"hbDSP{op.c_name}",
                                                     f"hbDSP{op.c_name}Param")]


if TYPE_CHECKING:
    from emu.runtime._cv_calls import *  # noqa: F403 (the declarations above)


def __getattr__(name: str) -> Any:
    # The functions and structs are made from the operator table on first use, so that
    # importing this module does not load every operator module; so is `__all__`, which a
    # star import asks for: the header's names (`hb*`, `HB_*`) and every operator's two.
    if name == "__all__":
        return sorted({*status.c_names(globals(), "hb", "HB_"), *names()})
    for op in cv.cv_operators():
        if name in (f"hbDSP{op.c_name}", f"hbDSP{op.c_name}Param"):
            _make(op)
            return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
