"""`c/include/hb_dsp_cv.h`, the CV library's C header, made from the operator table
(`emu/vdsp/ops/cv.py`), as `emu/runtime/_cv_calls.pyi` is for Python: the image struct and
formats, and per operator its parameter struct, an initialiser macro with its defaults and
its function. `python tools/cv_header.py` writes it; a test checks that it is current.

Types: an int or choice parameter is an `int32_t`, a real one a `double` and a list of
reals a `double` array of its count, so every value a C program sets reaches the operator
exactly as a Python float would.
"""

from __future__ import annotations

from emu.runtime import hbdsp_cv
from emu.vdsp.ops import cv

PATH = "c/include/hb_dsp_cv.h"
FORMATS = {name: value for name, value in vars(hbdsp_cv).items()
           if name.startswith("HB_DSP_IMAGE_")}


def _field(p: cv.Param) -> str:
    if p.kind == "reals":
        return f"  double {p.name}[{p.count}];"
    return f"  {'double' if p.kind == 'real' else 'int32_t'} {p.name};"


def _default(p: cv.Param) -> list[str]:
    if p.kind == "reals":
        return [f"(param)->{p.name}[{k}] = {float(v)!r};" for k, v in enumerate(p.default)]
    value = repr(float(p.default)) if p.kind == "real" else str(int(p.default))
    return [f"(param)->{p.name} = {value};"]


def macro_name(op: cv.CvOp) -> str:
    name = op.c_name
    snake = "".join(f"_{c}" if c.isupper() and k and name[k - 1].islower() else c
                    for k, c in enumerate(name))
    return f"HB_DSP_INITIALIZE_{snake.upper()}_PARAM"


def text() -> str:
    lines = ["/* hb_dsp_cv.h: the DSP's computer-vision library (hbDSP<Name>), for programs",
             " * built against emu's libemu_rt. Generated from emu's operator table by",
             " * tools/cv_header.py: do not edit. An operator's call queues it on the DSP like",
             " * hbDSPRpc; wait for and release its task with hbDSPWaitTaskDone and",
             " * hbDSPReleaseTask. Clean a source the CPU wrote, invalidate the destination",
             " * before the CPU reads it. */",
             "#ifndef EMU_HB_DSP_CV_H_", "#define EMU_HB_DSP_CV_H_", "",
             "#include <stdint.h>", "", '#include "hb_dsp.h"', '#include "hb_sys.h"', "",
             "#ifdef __cplusplus", 'extern "C" {', "#endif", ""]
    lines += [f"#define {name} {value}" for name, value in FORMATS.items()]
    lines += ["", "/* An image in a pool buffer: offset bytes in, rows stride bytes apart. */",
              "typedef struct {", "  hbSysMem mem;", "  int32_t offset;", "  int32_t width;",
              "  int32_t height;", "  int32_t stride;", "  int32_t format;", "} hbDSPImage;"]
    for op in cv.cv_operators():
        name = f"hbDSP{op.c_name}"
        lines += ["", f"/* {op.description[0].upper()}{op.description[1:]}. */"]
        fields = [_field(p) for p in op.params] or ["  int32_t reserved; /* no parameters */"]
        lines += ["typedef struct {", *fields, f"}} {name}Param;"]
        body = [s for p in op.params for s in _default(p)] or ["(param)->reserved = 0;"]
        lines += [f"#define {macro_name(op)}(param) \\", "  { \\",
                  *(f"    {s} \\" for s in body), "  }"]
        images = ", ".join(f"const hbDSPImage *{i}" for i in op.inputs)
        lines += [f"int32_t {name}(hbDSPTask_t *taskHandle, {images}, hbDSPImage *dst,",
                  f"    const {name}Param *param, hbDSPRpcCtrlParam *rpcCtrlParam);"]
    lines += ["", "#ifdef __cplusplus", "}", "#endif", "", "#endif /* EMU_HB_DSP_CV_H_ */"]
    return "\n".join(lines) + "\n"
